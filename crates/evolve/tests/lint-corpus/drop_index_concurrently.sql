-- evolve:no-transaction
DROP INDEX CONCURRENTLY IF EXISTS public.orders_status_idx;
