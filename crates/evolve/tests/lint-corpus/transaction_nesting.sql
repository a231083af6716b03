BEGIN;
ALTER TABLE public.orders ADD COLUMN note text;
COMMIT;
