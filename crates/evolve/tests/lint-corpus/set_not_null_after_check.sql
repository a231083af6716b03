-- evolve:no-transaction
ALTER TABLE public.orders ADD CONSTRAINT orders_status_nn CHECK (status IS NOT NULL) NOT VALID;
ALTER TABLE public.orders VALIDATE CONSTRAINT orders_status_nn;
ALTER TABLE public.orders ALTER COLUMN status SET NOT NULL;
