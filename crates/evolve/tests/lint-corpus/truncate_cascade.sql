TRUNCATE public.customers CASCADE;
