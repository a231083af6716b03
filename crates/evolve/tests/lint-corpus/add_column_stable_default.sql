ALTER TABLE public.orders ADD COLUMN seen_at timestamptz DEFAULT timezone('utc', now());
