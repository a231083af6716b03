REINDEX INDEX public.orders_status_idx;
