CREATE TABLE public.item (id bigint, name varchar(10), type text);
CREATE VIEW public.item_names AS SELECT name FROM public.item;
ALTER TABLE public.item RENAME COLUMN name TO title;
