//! Replacement swaps on real clusters: the flows that absorb upstream
//! schema changes behind an interface, each with the exact number of
//! writes the sink received (counted by a trigger on the sink table).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use evolve_pipeline::{Pipeline, PipelineError, TableSpec, TableState};
use tokio_postgres::Client;

const CONVERGE: Duration = Duration::from_secs(30);
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// Waits until the sink's audit count stops at `expected` (and checks it
/// does not go past it for a moment).
async fn wait_writes(sink: &Client, table: &str, expected: i64) {
    wait_until(
        &format!("{table} to have {expected} writes"),
        CONVERGE,
        async || {
            let n = audit_count(sink, table).await;
            assert!(n <= expected, "{table}: {n} writes, more than {expected}");
            n == expected
        },
    )
    .await;
    // A fixed wait: no write past `expected` may arrive meanwhile.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        audit_count(sink, table).await,
        expected,
        "{table}: writes after settling"
    );
}

fn spec(name: &str, source: &str, table: &str, exclude: &[&str]) -> TableSpec {
    TableSpec {
        name: name.into(),
        source: source.into(),
        schema: "public".into(),
        table: table.into(),
        exclude: exclude.iter().map(|s| s.to_string()).collect(),
        ..TableSpec::default()
    }
}

/// Creates table `version`, a replacement over it for `orders_json`, waits
/// until it is hydrated, and applies it.
async fn swap_to(pipeline: &Pipeline, source: &str, version: &str, exclude: &[&str]) {
    pipeline
        .create_table(&spec(version, source, "orders", exclude))
        .await
        .unwrap();
    let replacement = format!("orders_json_{version}");
    pipeline
        .create_replacement(&replacement, "orders_json", version)
        .unwrap();
    wait_state(pipeline, version, TableState::Running, CONVERGE).await;
    pipeline
        .apply_replacement("orders_json", &replacement, APPLY_WAIT)
        .await
        .unwrap();
    let interface = pipeline
        .interfaces()
        .unwrap()
        .into_iter()
        .find(|i| i.name == "orders_json")
        .unwrap();
    assert_eq!(interface.table, version);
    assert!(pipeline.replacements().unwrap().is_empty());
}

/// Flow 1: a column added upstream. Ingestion goes on; v2 with the new
/// column is hydrated while writes continue and swapped in; the sink gets
/// exactly one write per row with a value in the new column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_added_upstream_is_absorbed() {
    let env = env("absorb_add").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, amount int);
         INSERT INTO orders SELECT i, 'open', i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 2000).await;

    up.batch_execute(
        "ALTER TABLE orders ADD COLUMN region text;
         UPDATE orders SET region = 'eu' WHERE id % 20 = 0;   -- 100 rows, invisible to v1
         UPDATE orders SET amount = amount + 1 WHERE id = 1; -- visible",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 2001).await;

    // v2 hydrates while the upstream keeps changing (its pending changes
    // are applied when its copy is in).
    pipeline
        .create_table(&spec("orders_v2", &env.source, "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    for i in 0..20 {
        up.batch_execute(&format!(
            "UPDATE orders SET amount = amount + 1 WHERE id = {};
             INSERT INTO orders VALUES ({}, 'new', 0, 'us');",
            2 + i,
            10_000 + i
        ))
        .await
        .unwrap();
    }
    // Not hydrated yet, or hydrated: either way APPLY is exact; wait.
    wait_state(&pipeline, "orders_v2", TableState::Running, CONVERGE).await;
    // v1 fed the 20 updates and 20 inserts (without region).
    wait_writes(&sink, "orders_json", 2001 + 40).await;
    // A subscriber sees the swap too.
    let mut subscription = evolve_pipeline::subscribe::subscribe(
        &pipeline,
        "orders_json",
        evolve_pipeline::subscribe::SubscribeOptions::default(),
    )
    .await
    .unwrap();
    pipeline
        .apply_replacement("orders_json", "orders_json_v2", APPLY_WAIT)
        .await
        .unwrap();
    // One write per row with a region: 100 old rows and the 20 new ones.
    wait_writes(&sink, "orders_json", 2041 + 120).await;
    // ... and for the subscriber, one update (a -1 and a +1) per such row,
    // all at the swap's position.
    let mut changes: Vec<serde_json::Value> = Vec::new();
    while changes.len() < 240 {
        let line = tokio::time::timeout(CONVERGE, subscription.next_line())
            .await
            .expect("the swap reaches the subscriber")
            .expect("the subscription goes on");
        let line: serde_json::Value = serde_json::from_slice(&line).unwrap();
        if line["type"] == "change" {
            changes.push(line);
        }
    }
    let positions: std::collections::BTreeSet<String> =
        changes.iter().map(|c| c["ts"].to_string()).collect();
    assert_eq!(positions.len(), 1, "one position: {positions:?}");
    let keys: std::collections::BTreeSet<String> =
        changes.iter().map(|c| c["key"].to_string()).collect();
    assert_eq!(keys.len(), 120);
    assert_eq!(changes.iter().filter(|c| c["diff"] == 1).count(), 120);
    assert!(
        changes
            .iter()
            .filter(|c| c["diff"] == 1)
            .all(|c| c["data"]["region"].is_string())
    );
    drop(subscription);
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;

    // The old version can go; the interface follows v2.
    pipeline.drop_table("orders_v1").await.unwrap();
    up.batch_execute("UPDATE orders SET region = 'apac' WHERE id = 3")
        .await
        .unwrap();
    wait_writes(&sink, "orders_json", 2162).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    running.stop().await;
}

/// Flow 2: a planned drop. v2 excludes the column and is swapped in (one
/// write per row that had a value in it); the upstream DROP COLUMN is
/// then nothing for the interface.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_drop_changes_only_rows_with_a_value() {
    let env = env("absorb_drop").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, note text);
         INSERT INTO orders SELECT i, 'open', CASE WHEN i % 50 = 0 THEN 'n' || i END
         FROM generate_series(1, 1500) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1500).await;

    swap_to(&pipeline, &env.source, "orders_v2", &["note"]).await;
    wait_writes(&sink, "orders_json", 1500 + 30).await;
    let with_note: i64 = sink
        .query_one(
            "SELECT count(*) FROM public.orders_json WHERE data ? 'note'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(with_note, 0);

    pipeline.drop_table("orders_v1").await.unwrap();
    up.batch_execute(
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'closed' WHERE id <= 5;",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 1535).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    let v2 = pipeline.tables().unwrap();
    assert_eq!(v2.len(), 1);
    assert_eq!(v2[0].state, TableState::Running, "{:?}", v2[0].error);
    running.stop().await;
}

/// Flow 3: a type change, planned. Exclude the column, change its type
/// upstream, re-include it with the new type. A consumer reading
/// `(data->>'priority')::bigint` works at every step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_in_three_steps() {
    let env = env("absorb_type").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, priority int);
         INSERT INTO orders SELECT i, CASE WHEN i % 4 = 0 THEN i END FROM generate_series(1, 1000) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1000).await;
    assert_eq!(high_priority(&sink).await, 250);

    // 1. Exclude: 250 rows lose priority.
    swap_to(&pipeline, &env.source, "orders_v2", &["priority"]).await;
    wait_writes(&sink, "orders_json", 1250).await;
    assert_eq!(high_priority(&sink).await, 0);
    pipeline.drop_table("orders_v1").await.unwrap();

    // 2. Change the type upstream: nothing for the interface.
    up.batch_execute(
        "ALTER TABLE orders ALTER COLUMN priority TYPE bigint;
         UPDATE orders SET priority = 5000000000 WHERE id = 1;",
    )
    .await
    .unwrap();
    // A fixed wait: no write may arrive meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 1250);
    assert_eq!(high_priority(&sink).await, 0);

    // 3. Re-include with the new type: 251 rows get it back.
    swap_to(&pipeline, &env.source, "orders_v3", &[]).await;
    wait_writes(&sink, "orders_json", 1250 + 251).await;
    assert_eq!(high_priority(&sink).await, 251);
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    running.stop().await;
}

/// The consumer's query: rows with a priority, read as bigint.
async fn high_priority(sink: &Client) -> i64 {
    sink.query_one(
        "SELECT count(*) FROM public.orders_json WHERE (data->>'priority')::bigint > 0",
        &[],
    )
    .await
    .expect("the consumer's query works")
    .get(0)
}

/// Flow 4: an unplanned drop. Only the affected table stalls (another
/// table of the source keeps flowing); the sink keeps the last consistent
/// state; the replacement flow recovers and the sink resumes without
/// reprocessing: one write per row whose document differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplanned_drop_stalls_one_table_and_a_replacement_recovers() {
    let env = env("absorb_unplanned").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, note text);
         INSERT INTO orders SELECT i, 'open', CASE WHEN i % 10 = 0 THEN 'n' END FROM generate_series(1, 1000) i;
         CREATE TABLE customers (id int PRIMARY KEY, name text);
         INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 10) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders", "customers"]).await;
    audit_sink(&sink, "orders_json").await;
    audit_sink(&sink, "customers_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1000).await;
    wait_writes(&sink, "customers_json", 10).await;

    up.batch_execute(
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'paid' WHERE id <= 20;
         INSERT INTO customers VALUES (11, 'new');",
    )
    .await
    .unwrap();
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    // The other table flows; the stalled one's sink keeps its state.
    wait_writes(&sink, "customers_json", 11).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 1000);
    let paid: i64 = sink
        .query_one(
            "SELECT count(*) FROM public.orders_json WHERE data->>'status' = 'paid'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        paid, 0,
        "the stalled table's sink keeps the last consistent state"
    );
    let status = evolve_pipeline::admin::status(&pipeline).await.unwrap();
    let interface = status
        .objects
        .iter()
        .find(|o| o.name == "orders_json")
        .unwrap();
    assert_eq!(interface.state, "stale");
    assert!(interface.error.as_deref().unwrap().contains("orders_v1"));

    // Recover: v2 with today's columns. Rows whose document differs: the
    // 100 that had a note (now gone) and the 20 paid ones, of which ids 10
    // and 20 are both: 118.
    swap_to(&pipeline, &env.source, "orders_v2", &[]).await;
    wait_writes(&sink, "orders_json", 1000 + 118).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;

    // The sink resumes from there: one more change, one more write.
    up.batch_execute("UPDATE orders SET status = 'shipped' WHERE id = 1")
        .await
        .unwrap();
    wait_writes(&sink, "orders_json", 1119).await;
    // The stalled table can be dropped now that nothing reads it.
    pipeline.drop_table("orders_v1").await.unwrap();
    running.stop().await;
}

/// APPLY REPLACEMENT refuses what it cannot apply, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacement_errors() {
    let env = env("replacement_errors").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text);
         INSERT INTO orders SELECT i, 'open' FROM generate_series(1, 100000) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    pipeline
        .create_table(&spec("orders_v2", &env.source, "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    // Not hydrated: the pipeline is not even running.
    let e = pipeline
        .apply_replacement("orders_json", "orders_json_v2", APPLY_WAIT)
        .await
        .unwrap_err();
    assert_eq!(
        e.primary(),
        "replacement \"orders_json_v2\" is not hydrated"
    );
    assert!(e.detail().unwrap().contains("pending"), "{e}");
    // One pending replacement per interface.
    let e = pipeline
        .create_replacement("orders_json_v3", "orders_json", "orders_v2")
        .unwrap_err();
    assert!(
        matches!(
            e,
            PipelineError::Refused {
                sqlstate: "42710",
                ..
            }
        ),
        "{e}"
    );
    // The wrong target.
    pipeline
        .create_interface("other_json", "orders_v1")
        .unwrap();
    let e = pipeline
        .apply_replacement("other_json", "orders_json_v2", APPLY_WAIT)
        .await
        .unwrap_err();
    assert!(
        e.primary()
            .contains("is a replacement for materialized view \"orders_json\""),
        "{e}"
    );
    // Its table cannot be dropped while the replacement reads it.
    let e = pipeline.drop_table("orders_v2").await.unwrap_err();
    assert!(matches!(e, PipelineError::HasDependents { .. }), "{e}");
    // Dropping the replacement is DROP MATERIALIZED VIEW.
    pipeline.drop_interface("orders_json_v2").unwrap();
    assert!(pipeline.replacements().unwrap().is_empty());
    let interfaces = pipeline.interfaces().unwrap();
    assert!(interfaces.iter().all(|i| i.table == "orders_v1"));
}

/// Waits until `orders_json` reads `table` and only that version of
/// `orders` is left.
async fn wait_reads(pipeline: &Pipeline, table: &str) {
    wait_until(
        &format!("orders_json to read {table}, the only version of orders left"),
        Duration::from_secs(60),
        async || {
            let interface = pipeline
                .interfaces()
                .unwrap()
                .into_iter()
                .find(|i| i.name == "orders_json")
                .unwrap();
            let tables: Vec<String> = pipeline
                .tables()
                .unwrap()
                .into_iter()
                .map(|t| t.name)
                .filter(|n| n.starts_with("orders_v"))
                .collect();
            interface.table == table && tables == [table]
        },
    )
    .await;
}

/// Flow 5: ABSORB = 'auto'. evolve runs the flows itself: a column added
/// (only rows with a value change), a type change (the table stalls, the
/// next version takes the new type), an unplanned drop; each time it
/// creates the next version, hydrates, applies and drops the old one, and
/// the consumer's query answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_runs_the_flows_itself() {
    let env = env("absorb_auto").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, priority int, note text);
         INSERT INTO orders SELECT i, 'open', CASE WHEN i % 5 = 0 THEN i END,
                                   CASE WHEN i % 8 = 0 THEN 'n' END
         FROM generate_series(1, 800) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let response = evolve_pipeline::admin::execute(
        &pipeline,
        "ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'auto')",
    )
    .await;
    assert!(response.error.is_none(), "{:?}", response.error);
    assert!(pipeline.interfaces().unwrap()[0].absorb_auto);
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 800).await;
    assert_eq!(high_priority(&sink).await, 160);

    // A column added upstream, with a value on 40 rows.
    up.batch_execute(
        "ALTER TABLE orders ADD COLUMN region text;
         UPDATE orders SET region = 'eu' WHERE id % 20 = 0;",
    )
    .await
    .unwrap();
    wait_reads(&pipeline, "orders_v2").await;
    wait_writes(&sink, "orders_json", 800 + 40).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;

    // A type change: the consumer reads priority as bigint throughout.
    up.batch_execute(
        "ALTER TABLE orders ALTER COLUMN priority TYPE bigint;
         UPDATE orders SET priority = 5000000000 WHERE id = 1;",
    )
    .await
    .unwrap();
    wait_reads(&pipeline, "orders_v3").await;
    // Row 1's document changed (its priority); nothing else did.
    wait_writes(&sink, "orders_json", 841).await;
    assert_eq!(high_priority(&sink).await, 161);

    // An unplanned drop: the 100 rows with a note change.
    up.batch_execute(
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'paid' WHERE id = 2;",
    )
    .await
    .unwrap();
    wait_reads(&pipeline, "orders_v4").await;
    wait_writes(&sink, "orders_json", 841 + 101).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    running.stop().await;
}

/// ABSORB = 'auto' finishes flows that were interrupted: an old version
/// left ingesting after its swap (the process killed between APPLY and
/// DROP TABLE) is dropped, and a new version that stalled before its
/// replacement was applied (the upstream changed again while it
/// hydrated) is dropped with its replacement and made again from the
/// upstream as it is now, then applied. A renamed upstream table with a
/// column added is absorbed under its new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_finishes_interrupted_flows() {
    let env = env("absorb_interrupted").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, note text);
         INSERT INTO orders SELECT i, 'open', CASE WHEN i % 4 = 0 THEN 'n' END
         FROM generate_series(1, 200) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 200).await;

    // The swap to v2 as the controller makes it, without its DROP TABLE.
    pipeline
        .create_table(&spec("orders_v2", &env.source, "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_absorb_v2", "orders_json", "orders_v2")
        .unwrap();
    wait_state(&pipeline, "orders_v2", TableState::Running, CONVERGE).await;
    pipeline
        .apply_replacement("orders_json", "orders_json_absorb_v2", APPLY_WAIT)
        .await
        .unwrap();
    assert_eq!(pipeline.tables().unwrap().len(), 2);
    pipeline.set_absorb("orders_json", true).unwrap();
    wait_reads(&pipeline, "orders_v2").await;
    // Same documents: the swap wrote nothing.
    assert_eq!(audit_count(&sink, "orders_json").await, 200);

    // A next version hydrated by hand under the controller's names, then
    // an unplanned drop upstream that stalls it and the current version.
    pipeline.set_absorb("orders_json", false).unwrap();
    pipeline
        .create_table(&spec("orders_v3", &env.source, "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_absorb_v3", "orders_json", "orders_v3")
        .unwrap();
    wait_state(&pipeline, "orders_v3", TableState::Running, CONVERGE).await;
    up.batch_execute(
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'paid' WHERE id = 1;",
    )
    .await
    .unwrap();
    wait_state(&pipeline, "orders_v3", TableState::Stalled, CONVERGE).await;
    wait_state(&pipeline, "orders_v2", TableState::Stalled, CONVERGE).await;
    pipeline.set_absorb("orders_json", true).unwrap();
    // orders_v3 and its replacement go, a new orders_v3 is made from the
    // table without `note`, applied, and orders_v2 dropped.
    wait_reads(&pipeline, "orders_v3").await;
    assert!(pipeline.replacements().unwrap().is_empty());
    let v3 = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "orders_v3")
        .unwrap();
    assert_eq!(v3.state, TableState::Running);
    assert!(!v3.columns.iter().any(|c| c.name == "note"), "{v3:?}");
    // The 50 rows with a note and row 1 changed.
    wait_writes(&sink, "orders_json", 200 + 51).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;

    // The upstream table renamed and a column added: the next version
    // follows the table under its new name; 20 rows have a value.
    up.batch_execute(
        "ALTER TABLE orders RENAME TO orders_renamed;
         ALTER TABLE orders_renamed ADD COLUMN region text;
         UPDATE orders_renamed SET region = 'eu' WHERE id % 10 = 0;",
    )
    .await
    .unwrap();
    wait_reads(&pipeline, "orders_v4").await;
    let v4 = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "orders_v4")
        .unwrap();
    assert_eq!(v4.reference(), "public.orders_renamed");
    wait_writes(&sink, "orders_json", 251 + 20).await;
    wait_equal(&up, &sink, "orders_renamed", "orders_json", CONVERGE).await;
    running.stop().await;
}

/// Flow 6: TRUNCATE, replica identity changes and a rename upstream each
/// have a defined outcome.
/// - TRUNCATE: every document of the table is deleted (one sink write per
///   row), and the table goes on.
/// - REPLICA IDENTITY FULL: nothing changes for the interface.
/// - REPLICA IDENTITY USING INDEX on other columns: the pinned key no
///   longer identifies updated and deleted rows, so the table stalls with
///   that reason; a new version keyed by the replica identity index
///   recovers (every key changes: a delete and an insert per row).
/// - RENAME: the table keeps flowing (matched by OID) and drift reports
///   `table_renamed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_replica_identity_and_rename_upstream() {
    let env = env("absorb_outcomes").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, code text NOT NULL UNIQUE, status text);
         INSERT INTO orders SELECT i, 'c' || i, 'open' FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 300).await;

    // TRUNCATE and the same 200 rows again, in one transaction: the net
    // effect is 100 deletes (the interface shows each transaction's net
    // effect). Then a TRUNCATE alone: 200 deletes; and new rows.
    up.batch_execute(
        "TRUNCATE orders;
         INSERT INTO orders SELECT i, 'c' || i, 'open' FROM generate_series(1, 200) i;",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 300 + 100).await;
    up.batch_execute("TRUNCATE orders").await.unwrap();
    wait_writes(&sink, "orders_json", 600).await;
    up.batch_execute(
        "INSERT INTO orders SELECT i, 'c' || i, 'open' FROM generate_series(1, 200) i",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 800).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;

    // REPLICA IDENTITY FULL: updates and deletes still apply by key.
    up.batch_execute(
        "ALTER TABLE orders REPLICA IDENTITY FULL;
         UPDATE orders SET status = 'paid' WHERE id <= 3;
         DELETE FROM orders WHERE id = 4;",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 804).await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;

    // RENAME: still flowing; drift says so.
    up.batch_execute(
        "ALTER TABLE orders RENAME TO orders_renamed;
         UPDATE orders_renamed SET status = 'shipped' WHERE id = 5;",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 805).await;
    let drift = evolve_pipeline::poll::drift(&pipeline, None).await.unwrap();
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert_eq!(
        drift[0].signal,
        evolve_pipeline::drift::Signal::TableRenamed
    );
    up.batch_execute("ALTER TABLE orders_renamed RENAME TO orders")
        .await
        .unwrap();

    // REPLICA IDENTITY USING INDEX on code: the pinned key (id) no longer
    // identifies rows; the table stalls at the next change.
    up.batch_execute(
        "ALTER TABLE orders REPLICA IDENTITY USING INDEX orders_code_key;
         UPDATE orders SET status = 'late' WHERE id = 6;",
    )
    .await
    .unwrap();
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = pipeline.tables().unwrap()[0].error.clone().unwrap();
    assert!(error.contains("replica identity"), "{error}");
    assert_eq!(audit_count(&sink, "orders_json").await, 805);
    // v2 is keyed by code: 199 rows, each a delete (old key) and an insert.
    swap_to(&pipeline, &env.source, "orders_v2", &[]).await;
    wait_writes(&sink, "orders_json", 805 + 2 * 199).await;
    let keys: i64 = sink
        .query_one(
            "SELECT count(*) FROM public.orders_json WHERE key ? 'code' AND NOT key ? 'id'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 199);
    running.stop().await;
}

/// Between a replacement's hydrate and its apply, the upstream keeps
/// changing rows that both versions read: `orders_v1` leaves `region`
/// out, `orders_v2` has it, so a row's documents differ exactly while it
/// has a region. Rows get a region, lose it again (in later transactions
/// and within one), are deleted with and without one, are inserted with
/// and without one, change in columns both versions have, and the table is
/// truncated and filled again. The keys the store keeps as differing are
/// exactly the rows with a region after each round, and the swap writes
/// exactly those rows to the sink, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_between_hydrate_and_apply_reach_the_swap_exactly() {
    let env = env("swap_kept_keys").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, region text);
         INSERT INTO orders SELECT i, 'open', CASE WHEN i % 10 = 0 THEN 'eu' END
         FROM generate_series(1, 1000) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    pipeline
        .create_table(&spec("orders_v1", &env.source, "orders", &["region"]))
        .await
        .unwrap();
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    pipeline
        .create_sink(
            "orders_sink",
            "orders_json",
            "sink",
            "public",
            "orders_json",
        )
        .await
        .unwrap();
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1000).await;

    pipeline
        .create_table(&spec("orders_v2", &env.source, "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    wait_state(&pipeline, "orders_v2", TableState::Running, CONVERGE).await;
    // Hydrated means compared: the 100 rows with a region differ.
    let with_region = upstream_ids(&up, "orders", "region IS NOT NULL").await;
    assert_eq!(with_region.len(), 100);
    assert_eq!(
        kept_differing_ids(&env.state, "orders_json_v2").as_ref(),
        Some(&with_region)
    );

    let rounds = [
        // New differing rows, rows equal again (three in later
        // transactions, one within its own), deletes of a differing and an
        // equal row, inserts with and without a region, a change both
        // versions see on a differing and on an equal row, and a region
        // set to the value it has.
        "UPDATE orders SET region = 'us' WHERE id BETWEEN 1 AND 20 AND id % 10 <> 0;
         UPDATE orders SET region = NULL WHERE id IN (30, 40, 50);
         DELETE FROM orders WHERE id IN (60, 61);
         INSERT INTO orders VALUES (2001, 'new', 'apac'), (2002, 'new', NULL);
         UPDATE orders SET status = 'paid' WHERE id IN (70, 71);
         UPDATE orders SET region = 'eu' WHERE id = 80;
         BEGIN;
         UPDATE orders SET region = 'x' WHERE id = 90;
         UPDATE orders SET region = NULL WHERE id = 90;
         UPDATE orders SET region = 'y' WHERE id = 91;
         COMMIT;",
        // TRUNCATE: no row differs; then new rows, some with a region, of
        // which one loses it again and one is deleted.
        "TRUNCATE orders;
         INSERT INTO orders SELECT i, 'again', CASE WHEN i % 7 = 0 THEN 'eu' END
         FROM generate_series(1, 300) i;
         UPDATE orders SET region = NULL WHERE id = 7;
         DELETE FROM orders WHERE id = 14;
         UPDATE orders SET status = 'paid' WHERE id IN (21, 22);",
    ];
    for (n, statements) in rounds.iter().enumerate() {
        up.batch_execute(statements).await.unwrap();
        wait_equal_without(&up, &sink, "orders", "orders_json", "region", CONVERGE).await;
        let with_region = upstream_ids(&up, "orders", "region IS NOT NULL").await;
        assert_eq!(
            kept_differing_ids(&env.state, "orders_json_v2").as_ref(),
            Some(&with_region),
            "round {n}"
        );
    }
    // 42 rows with a region after the TRUNCATE, less id 7 and id 14.
    let with_region = upstream_ids(&up, "orders", "region IS NOT NULL").await;
    assert_eq!(with_region.len(), 40);

    sink.batch_execute("DELETE FROM public.orders_json_audit")
        .await
        .unwrap();
    pipeline
        .apply_replacement("orders_json", "orders_json_v2", APPLY_WAIT)
        .await
        .unwrap();
    wait_writes(&sink, "orders_json", 40).await;
    let written = audited_ids(&sink, "orders_json").await;
    assert!(written.iter().all(|(op, _)| op == "UPDATE"), "{written:?}");
    let ids: std::collections::BTreeSet<i64> = written.into_iter().map(|(_, id)| id).collect();
    assert_eq!(ids, with_region);
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    running.stop().await;
}
