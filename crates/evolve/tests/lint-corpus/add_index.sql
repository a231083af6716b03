CREATE INDEX orders_status_idx ON public.orders (status);
