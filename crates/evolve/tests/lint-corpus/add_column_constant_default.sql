ALTER TABLE public.orders ADD COLUMN note text DEFAULT 'none';
