CREATE INDEX CONCURRENTLY orders_status_idx ON public.orders (status);
