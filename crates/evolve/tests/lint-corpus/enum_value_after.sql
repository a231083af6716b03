ALTER TYPE public.mood ADD VALUE 'meh' AFTER 'ok';
