-- evolve:no-transaction
CREATE TABLE public.jobs (id bigint);
ALTER TABLE public.jobs ADD COLUMN state text;
