ALTER TABLE public.orders ADD COLUMN region text NOT NULL;
