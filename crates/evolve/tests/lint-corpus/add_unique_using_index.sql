ALTER TABLE public.orders ADD CONSTRAINT orders_code_key UNIQUE USING INDEX orders_code_idx;
