DROP INDEX public.orders_status_idx;
