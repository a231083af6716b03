//! `evolve deps` against real PostgreSQL catalogs.

use evolve_migrate::{DependentKind, DepsReport};

const SCHEMA: &str = r#"
CREATE SCHEMA reporting;
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    status varchar(20) NOT NULL,
    amount numeric NOT NULL,
    created date NOT NULL,
    note text,
    doubled numeric GENERATED ALWAYS AS (amount * 2) STORED
);
INSERT INTO orders VALUES (1, 'open', 10, '2026-11-01', 'x'), (2, 'closed', 20, '2026-11-02', NULL);
CREATE MATERIALIZED VIEW daily AS
    SELECT created, status, sum(amount) AS total FROM orders GROUP BY created, status;
CREATE UNIQUE INDEX daily_key ON daily (created, status);
CREATE MATERIALIZED VIEW monthly AS
    SELECT date_trunc('month', created) AS month, sum(total) AS total FROM daily GROUP BY 1
    WITH NO DATA;
CREATE VIEW reporting.dashboard AS SELECT month, total FROM monthly;
CREATE VIEW notes AS SELECT id, note FROM orders;
CREATE VIEW both_ways AS SELECT d.total, o.id FROM daily d JOIN orders o ON o.created = d.created;
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY open_orders ON orders USING (status <> 'closed');
CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER big_orders BEFORE UPDATE ON orders FOR EACH ROW WHEN (NEW.amount > 1000) EXECUTE FUNCTION audit();
CREATE FUNCTION open_count() RETURNS bigint LANGUAGE sql
    BEGIN ATOMIC SELECT count(*) FROM orders WHERE status = 'open'; END;
"#;

async fn setup(hint: &str) -> String {
    let db = evolve_test::fresh_db(hint).await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client.batch_execute(SCHEMA).await.expect("schema");
    db.url
}

fn summary(r: &DepsReport) -> Vec<(u32, DependentKind, String)> {
    r.dependents
        .iter()
        .map(|d| (d.depth, d.kind, d.name.clone()))
        .collect()
}

fn d(depth: u32, kind: DependentKind, name: &str) -> (u32, DependentKind, String) {
    (depth, kind, name.to_string())
}

#[tokio::test]
async fn every_kind_of_dependent_with_depth_and_path() {
    use DependentKind::*;
    let url = setup("deps_all").await;
    let r = evolve_migrate::dependents(&url, "orders")
        .await
        .expect("deps");
    assert_eq!(r.target, "public.orders");
    assert_eq!(
        summary(&r),
        vec![
            d(1, Policy, "open_orders on public.orders"),
            d(1, Trigger, "big_orders on public.orders"),
            d(1, GeneratedColumn, "public.orders.doubled"),
            d(1, Function, "public.open_count()"),
            d(1, MaterializedView, "public.daily"),
            d(1, View, "public.notes"),
            // both_ways reads orders directly and daily: its deepest path wins.
            d(2, View, "public.both_ways"),
            d(2, MaterializedView, "public.monthly"),
            d(3, View, "reporting.dashboard"),
        ]
        .tap_sort()
    );
    let by_name = |n: &str| r.dependents.iter().find(|x| x.name == n).expect(n);
    let daily = by_name("public.daily");
    assert_eq!(daily.populated, Some(true));
    assert_eq!(
        daily.indexes,
        vec!["CREATE UNIQUE INDEX daily_key ON public.daily USING btree (created, status)"]
    );
    assert_eq!(by_name("public.monthly").populated, Some(false));
    assert_eq!(by_name("public.notes").populated, None);
    assert_eq!(
        by_name("reporting.dashboard").path,
        [
            "public.orders",
            "public.daily",
            "public.monthly",
            "reporting.dashboard"
        ]
    );
    assert_eq!(
        by_name("public.both_ways").path,
        ["public.orders", "public.daily", "public.both_ways"]
    );
    assert!(r.dependents.iter().all(|x| x.owner == "postgres"));
}

trait TapSort {
    fn tap_sort(self) -> Self;
}

impl TapSort for Vec<(u32, DependentKind, String)> {
    /// The report's order: depth, then name.
    fn tap_sort(mut self) -> Self {
        self.sort_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
        self
    }
}

#[tokio::test]
async fn a_column_narrows_the_walk_to_what_reads_it() {
    use DependentKind::*;
    let url = setup("deps_column").await;
    let status = evolve_migrate::dependents(&url, "public.orders.status")
        .await
        .expect("deps");
    assert_eq!(status.target, "public.orders.status");
    assert_eq!(
        summary(&status),
        vec![
            d(1, Policy, "open_orders on public.orders"),
            d(1, Function, "public.open_count()"),
            d(1, MaterializedView, "public.daily"),
            d(2, View, "public.both_ways"),
            d(2, MaterializedView, "public.monthly"),
            d(3, View, "reporting.dashboard"),
        ]
        .tap_sort()
    );
    let note = evolve_migrate::dependents(&url, "orders.note")
        .await
        .expect("deps");
    assert_eq!(summary(&note), vec![d(1, View, "public.notes")]);
    let amount = evolve_migrate::dependents(&url, "orders.amount")
        .await
        .expect("deps");
    let names: Vec<String> = amount.dependents.iter().map(|x| x.name.clone()).collect();
    assert!(
        names.contains(&"big_orders on public.orders".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"public.orders.doubled".to_string()),
        "{names:?}"
    );
    assert!(!names.contains(&"public.notes".to_string()), "{names:?}");
    let id = evolve_migrate::dependents(&url, "orders.id")
        .await
        .expect("deps");
    assert_eq!(
        summary(&id),
        vec![d(1, View, "public.both_ways"), d(1, View, "public.notes")]
    );
    let nothing = evolve_migrate::dependents(&url, "reporting.dashboard")
        .await
        .expect("deps");
    assert!(nothing.dependents.is_empty());
}

#[tokio::test]
async fn unknown_tables_and_columns_are_clear_errors() {
    let url = setup("deps_errors").await;
    let err = evolve_migrate::dependents(&url, "orderz")
        .await
        .expect_err("no table")
        .to_string();
    assert_eq!(
        err,
        "table \"orderz\" does not exist; name it as table, schema.table or schema.table.column (the search_path applies)"
    );
    let err = evolve_migrate::dependents(&url, "orders.statuz")
        .await
        .expect_err("no column")
        .to_string();
    assert_eq!(
        err,
        "column \"statuz\" of table public.orders does not exist"
    );
    let err = evolve_migrate::dependents(&url, "a.b.c.d")
        .await
        .expect_err("bad name")
        .to_string();
    assert!(err.contains("is not a valid name"), "{err}");
}
