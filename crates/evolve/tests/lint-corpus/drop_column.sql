ALTER TABLE public.orders DROP COLUMN note;
