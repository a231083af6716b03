ALTER TABLE public.orders RENAME COLUMN note TO remark;
