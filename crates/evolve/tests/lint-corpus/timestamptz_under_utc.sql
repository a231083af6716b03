SET timezone = 'UTC';
ALTER TABLE public.tocks ALTER COLUMN at TYPE timestamptz;
