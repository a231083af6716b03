ALTER TABLE public.orders ADD CONSTRAINT orders_total_pos CHECK (total > 0);
