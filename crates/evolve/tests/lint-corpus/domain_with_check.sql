CREATE DOMAIN public.positive AS bigint CHECK (VALUE > 0);
