CREATE TABLE public.labels (id bigint, code varchar(10));
