CREATE TABLE public.legacy (id serial, n smallint, at timestamp, code char(3));
