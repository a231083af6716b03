CREATE TABLE public.ticks (id bigint, at timestamp);
CREATE TABLE public.tocks (id bigint, at timestamp);
