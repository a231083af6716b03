ALTER TABLE public.orders ADD CONSTRAINT orders_total_pos CHECK (total > 0) NOT VALID;
ALTER TABLE public.orders VALIDATE CONSTRAINT orders_total_pos;
