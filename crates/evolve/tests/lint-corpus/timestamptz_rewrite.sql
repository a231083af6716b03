ALTER TABLE public.ticks ALTER COLUMN at TYPE timestamptz;
