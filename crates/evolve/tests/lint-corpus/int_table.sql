CREATE TABLE public.counters (id bigint, hits int);
