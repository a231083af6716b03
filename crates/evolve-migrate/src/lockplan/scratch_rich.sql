CREATE SCHEMA app;
CREATE TYPE app.mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN app.posint AS int DEFAULT 1 CONSTRAINT posint_positive CHECK (VALUE > 0);
CREATE TYPE app.pair AS (a int, b text);
CREATE TYPE app.span AS RANGE (SUBTYPE = int4);
CREATE COLLATION app.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE SEQUENCE app.counter START 10 INCREMENT 5;
CREATE FUNCTION app.touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.updated := now(); RETURN NEW; END $$;
CREATE FUNCTION app.double(x int) RETURNS int LANGUAGE sql IMMUTABLE RETURN x * 2;
CREATE TABLE app.customers (id int PRIMARY KEY, name text NOT NULL UNIQUE,
  email text COLLATE app.ci, tier app.mood DEFAULT 'ok', span app.span);
CREATE FUNCTION app.customer_count() RETURNS bigint LANGUAGE sql STABLE
  BEGIN ATOMIC SELECT count(*) FROM app.customers; END;
CREATE FUNCTION app.first_customer() RETURNS app.customers LANGUAGE sql STABLE
  AS 'SELECT * FROM app.customers ORDER BY id LIMIT 1';
CREATE TABLE app.orders (
  id bigint GENERATED ALWAYS AS IDENTITY (START WITH 100) PRIMARY KEY,
  legacy int,
  customer_id int NOT NULL REFERENCES app.customers (id) ON DELETE CASCADE,
  status text NOT NULL DEFAULT 'new',
  qty app.posint,
  price numeric(10, 2) CHECK (price >= 0),
  total numeric GENERATED ALWAYS AS (price * app.double(qty)) STORED,
  note varchar(200),
  tags text[],
  meta jsonb,
  placed timestamptz DEFAULT now(),
  updated timestamptz,
  seq int DEFAULT nextval('app.counter'),
  pair app.pair,
  CONSTRAINT orders_status_known CHECK (status IN ('new', 'paid', 'shipped')) NOT VALID,
  CONSTRAINT orders_meta_obj CHECK (jsonb_typeof(meta) = 'object' AND (pair).a > 0)
);
ALTER TABLE app.orders DROP COLUMN legacy;
CREATE INDEX orders_lower_note ON app.orders (lower(note) text_pattern_ops, (meta ->> 'kind') DESC NULLS LAST, placed NULLS FIRST)
  WHERE status <> 'shipped';
CREATE INDEX orders_cust ON app.orders (customer_id) INCLUDE (status) WITH (fillfactor = 80);
CREATE UNIQUE INDEX orders_seq ON app.orders (seq) NULLS NOT DISTINCT;
CREATE INDEX orders_tags ON app.orders USING gin (tags);
CREATE INDEX orders_note_c ON app.orders (note COLLATE "C");
ALTER TABLE app.orders CLUSTER ON orders_cust;
CREATE TRIGGER orders_touch BEFORE UPDATE ON app.orders FOR EACH ROW EXECUTE FUNCTION app.touch();
CREATE TRIGGER orders_paid AFTER UPDATE OF status ON app.orders FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION app.touch();
CREATE TRIGGER orders_off BEFORE INSERT ON app.orders FOR EACH ROW EXECUTE FUNCTION app.touch('a', 'b c');
ALTER TABLE app.orders DISABLE TRIGGER orders_off;
ALTER TABLE app.orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY orders_mine ON app.orders USING (status <> 'hidden') WITH CHECK (qty > 0);
CREATE POLICY orders_known ON app.orders AS RESTRICTIVE FOR SELECT TO PUBLIC
  USING (EXISTS (SELECT 1 FROM app.customers c WHERE c.id = customer_id AND c.tier <> 'sad'));
CREATE STATISTICS app.orders_stats (dependencies) ON customer_id, status FROM app.orders;
CREATE STATISTICS app.orders_expr ON (lower(note)), status FROM app.orders;
CREATE TABLE app.events (id int, at date NOT NULL, kind text) PARTITION BY RANGE (at);
CREATE TABLE app.events_2024 PARTITION OF app.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE app.events_rest PARTITION OF app.events DEFAULT;
CREATE INDEX events_kind ON app.events (kind);
ALTER TABLE app.events ADD PRIMARY KEY (id, at);
CREATE TABLE app.hashed (k text, v int) PARTITION BY HASH (lower(k));
CREATE TABLE app.hashed_0 PARTITION OF app.hashed FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE app.hashed_1 PARTITION OF app.hashed FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE app.bookings (room int NOT NULL, during tstzrange,
  CONSTRAINT bookings_no_overlap EXCLUDE USING gist (during WITH &&) WHERE (room > 0));
CREATE RULE bookings_keep AS ON DELETE TO app.bookings DO INSTEAD NOTHING;
CREATE TABLE app.base (id int NOT NULL, created date DEFAULT current_date, CHECK (id > 0));
CREATE TABLE app.child (extra int, id int) INHERITS (app.base);
CREATE UNLOGGED TABLE app.scratchpad (k text PRIMARY KEY, v text) WITH (fillfactor = 70, autovacuum_enabled = false);
ALTER TABLE app.scratchpad REPLICA IDENTITY FULL;
CREATE TABLE app.serials (id serial PRIMARY KEY, big bigserial, "Odd Name" text, "select" int);
CREATE VIEW app.open_orders AS
  SELECT o.id, o.status, c.name, o.note::varchar(50) AS short_note
  FROM app.orders o JOIN app.customers c ON c.id = o.customer_id WHERE o.status <> 'shipped';
CREATE VIEW app.open_names WITH (security_barrier) AS
  SELECT name COLLATE "C" AS name, count(*) AS n FROM app.open_orders GROUP BY 1;
CREATE MATERIALIZED VIEW app.order_totals AS
  SELECT customer_id, sum(total) AS total FROM app.orders GROUP BY customer_id;
CREATE UNIQUE INDEX order_totals_customer ON app.order_totals (customer_id);
CREATE MATERIALIZED VIEW app.never_filled AS SELECT id FROM app.customers WITH NO DATA;
CREATE VIEW app.orders_rw AS SELECT id, status FROM app.orders WITH CASCADED CHECK OPTION;
CREATE EXTENSION citext WITH SCHEMA app;
CREATE EXTENSION pg_trgm;
CREATE TABLE app.tagged (id int PRIMARY KEY, handle app.citext UNIQUE, moods app.mood[], owner app.customers,
  CHECK (cardinality(moods) < 5));
CREATE INDEX tagged_trgm ON app.tagged USING gin ((handle::text) gin_trgm_ops);
CREATE TABLE public.tagged (id int, label text CHECK (label <> ''), CHECK (id > 0));
CREATE INDEX tagged_label ON public.tagged (upper(label));
CREATE TYPE app.shape AS (w int, h int);
CREATE TABLE app.shapes OF app.shape (PRIMARY KEY (w));
CREATE TABLE app.metrics (at timestamptz NOT NULL, region text NOT NULL, v float8)
  PARTITION BY LIST (region);
CREATE TABLE app.metrics_eu PARTITION OF app.metrics FOR VALUES IN ('eu') PARTITION BY RANGE (at);
CREATE TABLE app.metrics_eu_2024 PARTITION OF app.metrics_eu
  FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE UNIQUE INDEX metrics_key ON app.metrics (region, at);
CREATE TABLE app.readings (id int, region text, at timestamptz,
  FOREIGN KEY (region, at) REFERENCES app.metrics (region, at));
CREATE FUNCTION app.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER readings_audit AFTER INSERT ON app.readings REFERENCING NEW TABLE AS fresh
  FOR EACH STATEMENT EXECUTE FUNCTION app.audit();
CREATE CONSTRAINT TRIGGER readings_check AFTER INSERT OR UPDATE ON app.readings
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.id > 0) EXECUTE FUNCTION app.audit();
CREATE TRIGGER metrics_audit AFTER INSERT ON app.metrics FOR EACH ROW EXECUTE FUNCTION app.audit();
CREATE VIEW app.now_view AS SELECT now() AS at, 1 AS one;
CREATE FUNCTION app.instead() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER now_view_ins INSTEAD OF INSERT ON app.now_view FOR EACH ROW EXECUTE FUNCTION app.instead();
CREATE MATERIALIZED VIEW app.handles AS SELECT id, handle FROM app.tagged;
CREATE INDEX handles_lower ON app.handles (lower(handle::text)) WHERE id > 0;
INSERT INTO app.customers VALUES (1, 'ann', 'a@x', 'ok'), (2, 'bob', 'b@x', 'happy');
INSERT INTO app.orders (customer_id, status, qty, price, note, meta, pair)
  SELECT 1 + i % 2, 'new', 1 + i % 5, i, 'n' || i, '{"kind": "k"}', ROW(1, 'x')::app.pair FROM generate_series(1, 500) i;
REFRESH MATERIALIZED VIEW app.order_totals;
ANALYZE;
