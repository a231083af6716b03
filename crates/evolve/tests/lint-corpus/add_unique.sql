ALTER TABLE public.orders ADD CONSTRAINT orders_code_key UNIQUE (code);
