ALTER TABLE public.orders ADD COLUMN seq bigserial;
