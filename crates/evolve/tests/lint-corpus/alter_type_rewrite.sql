ALTER TABLE public.counters ALTER COLUMN hits TYPE bigint;
