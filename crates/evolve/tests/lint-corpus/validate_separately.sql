ALTER TABLE public.orders VALIDATE CONSTRAINT orders_customer_fk;
