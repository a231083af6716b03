ALTER TABLE public.labels ALTER COLUMN code TYPE varchar(20);
