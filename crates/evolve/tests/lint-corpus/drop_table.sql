DROP TABLE public.legacy_orders;
