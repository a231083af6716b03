ALTER DOMAIN public.positive ADD CONSTRAINT positive_small CHECK (VALUE < 1000000);
