ALTER TABLE public.orders ALTER COLUMN amount TYPE numeric(12,2);
