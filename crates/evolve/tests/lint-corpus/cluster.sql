CLUSTER public.orders USING orders_pkey;
