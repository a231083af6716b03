ALTER TABLE public.orders ADD PRIMARY KEY (id);
