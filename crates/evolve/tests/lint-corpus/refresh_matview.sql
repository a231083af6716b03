REFRESH MATERIALIZED VIEW public.order_totals;
