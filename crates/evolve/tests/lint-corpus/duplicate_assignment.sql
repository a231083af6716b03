UPDATE public.orders SET status = 'a', status = 'b';
