VACUUM FULL public.orders;
