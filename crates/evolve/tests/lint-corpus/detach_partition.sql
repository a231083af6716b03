ALTER TABLE public.events DETACH PARTITION public.events_2020;
