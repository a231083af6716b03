CREATE TABLE public.audit (id bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE INDEX audit_at_idx ON public.audit (at);
