CREATE MATERIALIZED VIEW public.order_copy AS SELECT * FROM public.orders;
