-- evolve:ignore ban-drop-table
DROP TABLE public.legacy_orders;
