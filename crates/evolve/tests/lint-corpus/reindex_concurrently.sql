-- evolve:no-transaction
REINDEX INDEX CONCURRENTLY public.orders_status_idx;
