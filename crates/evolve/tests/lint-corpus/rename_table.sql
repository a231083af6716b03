ALTER TABLE public.orders RENAME TO purchases;
