ALTER TABLE public.orders ADD COLUMN total_cents bigint GENERATED ALWAYS AS (total * 100) STORED;
