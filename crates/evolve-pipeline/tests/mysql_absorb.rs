//! The absorb flows of `tests/replacement.rs` and the drift signals of
//! `tests/drift.rs`, run against a MariaDB upstream (the harness's shared
//! server, a fresh database per test) into a PostgreSQL sink, with the
//! same exact counts of the sink's writes (a trigger counts every row
//! write); plus the outcomes of TRUNCATE, RENAME TABLE, DROP TABLE,
//! RENAME COLUMN and a column dropped and re-added, which the binlog's
//! DDL shows and the catalog alone would not.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::mysql::*;
use common::*;
use evolve_pipeline::drift::{DriftRow, Signal, TypeChange};
use evolve_pipeline::poll::drift;
use evolve_pipeline::{Config, ObjectKind, Pipeline, PipelineError, TableState};
use mysql_async::prelude::Queryable;
use tokio_postgres::Client;

const CONVERGE: Duration = Duration::from_secs(30);
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// Where each test's state directory goes ([`my_env`]).
const STATE: &str = "evolve-mysql-absorb";

/// Runs `sql` (one or more statements) upstream.
async fn run(my: &mut mysql_async::Conn, sql: &str) {
    my.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The source (once), and for each name: table `<name>_v1`, interface
/// `<name>_json`, sink `<name>_sink` into `public.<name>_json`, counted.
async fn create_all(pipeline: &Pipeline, env: &MyEnv, sink: &Client, names: &[&str]) {
    if pipeline.sources().unwrap().is_empty() {
        pipeline
            .create_mysql_source(&env.source, "my")
            .await
            .unwrap();
    }
    for name in names {
        create_chain(pipeline, env, name).await;
        audit_sink(sink, &format!("{name}_json")).await;
    }
}

/// Creates table `version` over `table`, a replacement over it for
/// `interface`, waits until it is hydrated, and applies it.
async fn swap_to(
    pipeline: &Pipeline,
    env: &MyEnv,
    interface: &str,
    version: &str,
    table: &str,
    exclude: &[&str],
) {
    pipeline
        .create_table(&spec(env, version, table, exclude))
        .await
        .unwrap();
    let replacement = format!("{interface}_{version}");
    pipeline
        .create_replacement(&replacement, interface, version)
        .unwrap();
    wait_state(pipeline, version, TableState::Running, CONVERGE).await;
    pipeline
        .apply_replacement(interface, &replacement, APPLY_WAIT)
        .await
        .unwrap();
    let reads = pipeline
        .interfaces()
        .unwrap()
        .into_iter()
        .find(|i| i.name == interface)
        .unwrap()
        .table;
    assert_eq!(reads, version);
    assert!(pipeline.replacements().unwrap().is_empty());
}

/// The documents upstream of `table`'s `columns` (integers and text),
/// nulls stripped, by `{"id": n}` key.
async fn upstream_docs(
    my: &mut mysql_async::Conn,
    table: &str,
    columns: &[&str],
) -> Vec<(serde_json::Value, serde_json::Value)> {
    let list: Vec<String> = columns.iter().map(|c| format!("`{c}`")).collect();
    let rows: Vec<mysql_async::Row> = my
        .exec(
            format!("SELECT {} FROM `{table}` ORDER BY id", list.join(", ")),
            (),
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    for row in rows {
        let mut doc = serde_json::Map::new();
        for (i, column) in columns.iter().enumerate() {
            let value = match row.as_ref(i).unwrap() {
                mysql_async::Value::NULL => continue,
                mysql_async::Value::Int(n) => serde_json::json!(n),
                mysql_async::Value::UInt(n) => serde_json::json!(n),
                mysql_async::Value::Bytes(b) => {
                    serde_json::Value::String(String::from_utf8(b.clone()).unwrap())
                }
                other => panic!("{table}.{column}: unexpected {other:?}"),
            };
            doc.insert(column.to_string(), value);
        }
        let key = serde_json::json!({"id": doc["id"].clone()});
        out.push((key, serde_json::Value::Object(doc)));
    }
    out.sort_by_key(|(k, _)| k.to_string());
    out
}

async fn sink_docs(sink: &Client, table: &str) -> Vec<(serde_json::Value, serde_json::Value)> {
    let mut out: Vec<(serde_json::Value, serde_json::Value)> = sink_rows(sink, table)
        .await
        .into_iter()
        .map(|(k, d)| {
            (
                serde_json::from_str(&k).unwrap(),
                serde_json::from_str(&d).unwrap(),
            )
        })
        .collect();
    out.sort_by_key(|(k, _)| k.to_string());
    out
}

/// Waits until the sink holds exactly the upstream documents over
/// `columns`.
async fn wait_equal_my(
    my: &mut mysql_async::Conn,
    sink: &Client,
    table: &str,
    sink_table: &str,
    columns: &[&str],
) {
    let start = std::time::Instant::now();
    loop {
        let want = upstream_docs(my, table, columns).await;
        let got = sink_docs(sink, sink_table).await;
        if want == got {
            return;
        }
        if start.elapsed() > CONVERGE {
            let first = want.iter().zip(&got).find(|(w, g)| w != g);
            panic!(
                "sink {sink_table} did not converge to upstream {table}: {} rows upstream, {} in the sink; first difference {first:?}",
                want.len(),
                got.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn count(sink: &Client, sql: &str) -> i64 {
    sink.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// The consumer's query: rows with a priority, read as bigint.
async fn high_priority(sink: &Client) -> i64 {
    count(
        sink,
        "SELECT count(*) FROM public.orders_json WHERE (data->>'priority')::bigint > 0",
    )
    .await
}

/// Flow 1: a column added upstream. Ingestion goes on; v2 with the new
/// column is hydrated while writes continue and swapped in at the binlog
/// marker; the sink gets exactly one write per row with a value in the new
/// column, and a subscriber sees them all at the swap's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_added_upstream_is_absorbed() {
    let env = my_env(STATE, "my_absorb_add").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20) NOT NULL, amount int);
         INSERT INTO orders SELECT seq, 'open', seq FROM seq_1_to_2000;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 2000).await;

    run(
        &mut my,
        "ALTER TABLE orders ADD COLUMN region text;
         UPDATE orders SET region = 'eu' WHERE id % 20 = 0;   -- 100 rows, invisible to v1
         UPDATE orders SET amount = amount + 1 WHERE id = 1; -- visible",
    )
    .await;
    wait_writes(&sink, "orders_json", 2001).await;
    assert_eq!(
        pipeline.tables().unwrap()[0].state,
        TableState::Running,
        "an added column never stalls"
    );

    pipeline
        .create_table(&spec(&env, "orders_v2", "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    for i in 0..20 {
        run(
            &mut my,
            &format!(
                "UPDATE orders SET amount = amount + 1 WHERE id = {};
                 INSERT INTO orders VALUES ({}, 'new', 0, 'us');",
                2 + i,
                10_000 + i
            ),
        )
        .await;
    }
    wait_state(&pipeline, "orders_v2", TableState::Running, CONVERGE).await;
    wait_writes(&sink, "orders_json", 2001 + 40).await;
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
    assert!(
        changes
            .iter()
            .filter(|c| c["diff"] == 1)
            .all(|c| c["data"]["region"].is_string())
    );
    drop(subscription);
    let columns = ["id", "status", "amount", "region"];
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;

    pipeline.drop_table("orders_v1").await.unwrap();
    run(&mut my, "UPDATE orders SET region = 'apac' WHERE id = 3").await;
    wait_writes(&sink, "orders_json", 2162).await;
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;
    // The marker lives in its own small table upstream, one row per source.
    let markers: Vec<(String, u64)> = my
        .query("SELECT slot, seq FROM evolve_markers")
        .await
        .unwrap();
    assert_eq!(markers.len(), 1, "{markers:?}");
    running.stop().await;
}

/// Columns of MariaDB's JSON, UUID and INET6 types added while the stream
/// runs (the binlog shows them as `longtext` and binary strings; the
/// stream reads their types from the catalog when it starts again for
/// the new table version): a version pinning them is hydrated, swapped in
/// (one write per row with a value in them) and streams on without a
/// stall, and its documents hold a JSON object, a UUID and an address,
/// not their bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_uuid_and_inet_columns_added_upstream_are_read_as_their_types() {
    let env = my_env(STATE, "my_absorb_declared").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE dev (id int PRIMARY KEY, name varchar(20));
         INSERT INTO dev SELECT seq, CONCAT('n', seq) FROM seq_1_to_100;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["dev"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "dev_json", 100).await;
    run(
        &mut my,
        "ALTER TABLE dev ADD COLUMN meta json, ADD COLUMN (serial uuid, addr inet6);
         UPDATE dev SET meta = JSON_OBJECT('a', id),
                        serial = CONCAT('00000000-0000-4000-8000-', LPAD(id, 12, '0')),
                        addr = CONCAT('2001:db8::', HEX(id))
         WHERE id % 10 = 0;",
    )
    .await;
    swap_to(&pipeline, &env, "dev_json", "dev_v2", "dev", &[]).await;
    wait_writes(&sink, "dev_json", 110).await;
    // After the swap, through the binlog only.
    run(
        &mut my,
        "INSERT INTO dev VALUES (1000, 'new', '{\"b\": [1, 2]}',
                                 '6ccd780c-baba-1026-9564-5b8c656024db', '::ffff:10.0.0.1');
         UPDATE dev SET addr = '::1' WHERE id = 20;",
    )
    .await;
    wait_writes(&sink, "dev_json", 112).await;
    let mut want: Vec<(serde_json::Value, serde_json::Value)> = (1..=100)
        .map(|id: i64| {
            let mut doc = serde_json::json!({"id": id, "name": format!("n{id}")});
            if id % 10 == 0 {
                doc["meta"] = serde_json::json!({"a": id});
                doc["serial"] = format!("00000000-0000-4000-8000-{id:012}").into();
                doc["addr"] = if id == 20 {
                    "::1".to_string()
                } else {
                    format!("2001:db8::{id:x}")
                }
                .into();
            }
            (serde_json::json!({"id": id}), doc)
        })
        .collect();
    want.push((
        serde_json::json!({"id": 1000}),
        serde_json::json!({"id": 1000, "name": "new", "meta": {"b": [1, 2]},
            "serial": "6ccd780c-baba-1026-9564-5b8c656024db", "addr": "::ffff:10.0.0.1"}),
    ));
    want.sort_by_key(|(k, _)| k.to_string());
    wait_until("dev_json's documents", CONVERGE, async || {
        sink_docs(&sink, "dev_json").await == want
    })
    .await;
    assert!(
        pipeline
            .tables()
            .unwrap()
            .iter()
            .all(|t| t.state == TableState::Running),
        "{:?}",
        pipeline.status()
    );
    running.stop().await;
}

/// Flow 2: a planned drop. v2 excludes the column and is swapped in (one
/// write per row that had a value in it); the upstream DROP COLUMN is
/// then nothing for the interface.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_drop_changes_only_rows_with_a_value() {
    let env = my_env(STATE, "my_absorb_drop").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20) NOT NULL, note text);
         INSERT INTO orders SELECT seq, 'open', IF(seq % 50 = 0, CONCAT('n', seq), NULL)
         FROM seq_1_to_1500;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1500).await;

    swap_to(
        &pipeline,
        &env,
        "orders_json",
        "orders_v2",
        "orders",
        &["note"],
    )
    .await;
    wait_writes(&sink, "orders_json", 1500 + 30).await;
    assert_eq!(
        count(
            &sink,
            "SELECT count(*) FROM public.orders_json WHERE data ? 'note'"
        )
        .await,
        0
    );

    pipeline.drop_table("orders_v1").await.unwrap();
    run(
        &mut my,
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'closed' WHERE id <= 5;",
    )
    .await;
    wait_writes(&sink, "orders_json", 1535).await;
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &["id", "status"]).await;
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
    let env = my_env(STATE, "my_absorb_type").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, priority int);
         INSERT INTO orders SELECT seq, IF(seq % 4 = 0, seq, NULL) FROM seq_1_to_1000;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1000).await;
    assert_eq!(high_priority(&sink).await, 250);

    // 1. Exclude: 250 rows lose priority.
    swap_to(
        &pipeline,
        &env,
        "orders_json",
        "orders_v2",
        "orders",
        &["priority"],
    )
    .await;
    wait_writes(&sink, "orders_json", 1250).await;
    assert_eq!(high_priority(&sink).await, 0);
    pipeline.drop_table("orders_v1").await.unwrap();

    // 2. Change the type upstream: nothing for the interface.
    run(
        &mut my,
        "ALTER TABLE orders MODIFY priority bigint;
         UPDATE orders SET priority = 5000000000 WHERE id = 1;",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 1250);
    assert_eq!(high_priority(&sink).await, 0);
    assert_eq!(table_state(&pipeline, "orders_v2").0, TableState::Running);

    // 3. Re-include with the new type: 251 rows get it back.
    swap_to(&pipeline, &env, "orders_json", "orders_v3", "orders", &[]).await;
    wait_writes(&sink, "orders_json", 1250 + 251).await;
    assert_eq!(high_priority(&sink).await, 251);
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &["id", "priority"]).await;
    running.stop().await;
}

/// Flow 4: an unplanned drop. Only the affected table stalls (another
/// table of the source keeps flowing) at the binlog's DROP COLUMN; the
/// sink keeps the last consistent state; the replacement flow recovers
/// and the sink resumes without reprocessing: one write per row whose
/// document differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplanned_drop_stalls_one_table_and_a_replacement_recovers() {
    let env = my_env(STATE, "my_absorb_unplanned").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20) NOT NULL, note text);
         INSERT INTO orders SELECT seq, 'open', IF(seq % 10 = 0, 'n', NULL) FROM seq_1_to_1000;
         CREATE TABLE customers (id int PRIMARY KEY, name text);
         INSERT INTO customers SELECT seq, CONCAT('c', seq) FROM seq_1_to_10;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders", "customers"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 1000).await;
    wait_writes(&sink, "customers_json", 10).await;

    run(
        &mut my,
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'paid' WHERE id <= 20;
         INSERT INTO customers VALUES (11, 'new');",
    )
    .await;
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap();
    assert!(
        error.contains("column \"note\"") && error.contains("dropped"),
        "{error}"
    );
    wait_writes(&sink, "customers_json", 11).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 1000);
    assert_eq!(
        count(
            &sink,
            "SELECT count(*) FROM public.orders_json WHERE data->>'status' = 'paid'"
        )
        .await,
        0,
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

    // Recover: the 100 rows that had a note and the 20 paid ones, of
    // which ids 10 and 20 are both: 118.
    swap_to(&pipeline, &env, "orders_json", "orders_v2", "orders", &[]).await;
    wait_writes(&sink, "orders_json", 1000 + 118).await;
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &["id", "status"]).await;

    run(&mut my, "UPDATE orders SET status = 'shipped' WHERE id = 1").await;
    wait_writes(&sink, "orders_json", 1119).await;
    pipeline.drop_table("orders_v1").await.unwrap();
    running.stop().await;
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

/// `ALTER MATERIALIZED VIEW <interface> SET (ABSORB = 'auto')`, through
/// the admin API's statement path.
async fn absorb_auto(pipeline: &Pipeline, interface: &str) {
    let response = evolve_pipeline::admin::execute(
        pipeline,
        &format!("ALTER MATERIALIZED VIEW {interface} SET (ABSORB = 'auto')"),
    )
    .await;
    assert!(response.error.is_none(), "{:?}", response.error);
}

/// Flow 5: ABSORB = 'auto'. evolve runs the flows itself on the MariaDB
/// upstream: a column added, a type change, an unplanned drop; each time
/// the next version, hydrated, applied at a binlog marker, the old one
/// dropped, and the consumer's query answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_runs_the_flows_itself() {
    let env = my_env(STATE, "my_absorb_auto").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20) NOT NULL, priority int, note text);
         INSERT INTO orders SELECT seq, 'open', IF(seq % 5 = 0, seq, NULL), IF(seq % 8 = 0, 'n', NULL)
         FROM seq_1_to_800;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    absorb_auto(&pipeline, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 800).await;
    assert_eq!(high_priority(&sink).await, 160);

    run(
        &mut my,
        "ALTER TABLE orders ADD COLUMN region text;
         UPDATE orders SET region = 'eu' WHERE id % 20 = 0;",
    )
    .await;
    wait_reads(&pipeline, "orders_v2").await;
    wait_writes(&sink, "orders_json", 800 + 40).await;
    let columns = ["id", "status", "priority", "note", "region"];
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;

    run(
        &mut my,
        "ALTER TABLE orders MODIFY priority bigint;
         UPDATE orders SET priority = 5000000000 WHERE id = 1;",
    )
    .await;
    wait_reads(&pipeline, "orders_v3").await;
    wait_writes(&sink, "orders_json", 841).await;
    assert_eq!(high_priority(&sink).await, 161);

    run(
        &mut my,
        "ALTER TABLE orders DROP COLUMN note;
         UPDATE orders SET status = 'paid' WHERE id = 2;",
    )
    .await;
    wait_reads(&pipeline, "orders_v4").await;
    wait_writes(&sink, "orders_json", 841 + 101).await;
    let columns = ["id", "status", "priority", "region"];
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;
    running.stop().await;
}

/// An online schema change tool's cut-over (gh-ost and
/// pt-online-schema-change copy the table into a new one with the change,
/// then swap the names in one `RENAME TABLE`): the table stalls at the
/// swap, since another table now holds its name, and under `ABSORB =
/// 'auto'` evolve reads the table under that name again and applies the
/// minimal diff: only the rows the copy really changed reach the sink
/// (the added column's 10 values), and later writes flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_schema_change_cut_over_is_absorbed_with_a_minimal_diff() {
    let env = my_env(STATE, "my_absorb_osc").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20) NOT NULL);
         INSERT INTO orders SELECT seq, 'open' FROM seq_1_to_300;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    absorb_auto(&pipeline, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 300).await;

    // The tool's steps: the ghost table with the change, the copy, the
    // swap, the old table dropped.
    run(
        &mut my,
        "CREATE TABLE _orders_gho LIKE orders;
         ALTER TABLE _orders_gho ADD COLUMN region text;
         INSERT INTO _orders_gho SELECT id, status, IF(id % 30 = 0, 'eu', NULL) FROM orders;
         RENAME TABLE orders TO _orders_del, _orders_gho TO orders;
         DROP TABLE _orders_del;",
    )
    .await;
    wait_reads(&pipeline, "orders_v2").await;
    wait_writes(&sink, "orders_json", 310).await;
    run(&mut my, "UPDATE orders SET status = 'paid' WHERE id = 7").await;
    wait_writes(&sink, "orders_json", 311).await;
    wait_equal_my(
        &mut my,
        &sink,
        "orders",
        "orders_json",
        &["id", "status", "region"],
    )
    .await;
    running.stop().await;
}

/// TRUNCATE, ALTER TABLE ... RENAME COLUMN, and a column dropped and
/// re-added with the same name and type, each with its outcome:
/// - TRUNCATE deletes every document (one write per row) and the table
///   goes on;
/// - RENAME COLUMN stalls the table (the pinned column is gone under its
///   name) and drift says it was renamed; a new version recovers, one write
///   per row;
/// - DROP COLUMN then ADD COLUMN of the same name and type stalls the
///   table at the drop (the catalog afterwards looks as before: only the
///   binlog's DDL shows it), so old values are never merged with the new
///   column; a new version recovers, one write per row that had a value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_rename_column_and_a_readded_column() {
    let env = my_env(STATE, "my_absorb_outcomes").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20), note text);
         INSERT INTO orders SELECT seq, 'open', IF(seq % 4 = 0, 'n', NULL) FROM seq_1_to_300;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 300).await;

    // TRUNCATE: 300 deletes; then 200 rows again.
    run(&mut my, "TRUNCATE TABLE orders").await;
    wait_writes(&sink, "orders_json", 600).await;
    assert_eq!(
        count(&sink, "SELECT count(*) FROM public.orders_json").await,
        0
    );
    run(
        &mut my,
        "INSERT INTO orders SELECT seq, 'open', IF(seq % 4 = 0, 'n', NULL) FROM seq_1_to_200",
    )
    .await;
    wait_writes(&sink, "orders_json", 800).await;
    let columns = ["id", "status", "note"];
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;
    assert_eq!(table_state(&pipeline, "orders_v1").0, TableState::Running);

    // RENAME COLUMN: stalled at the statement; the sink keeps its state.
    run(
        &mut my,
        "ALTER TABLE orders RENAME COLUMN status TO state;
         UPDATE orders SET state = 'paid' WHERE id <= 10;",
    )
    .await;
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap();
    assert!(
        error.contains("column \"status\"") && error.contains("renamed"),
        "{error}"
    );
    let rows = drift(&pipeline, None).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].signal, Signal::Stalled);
    assert_eq!(rows[0].added_upstream, ["state"]);
    assert_eq!(rows[0].dropped_upstream, ["status"]);
    assert_eq!(
        rows[0].detail.as_deref(),
        Some("column \"status\" was renamed to \"state\"")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 800);
    // v2 over today's columns: every document changes (status → state).
    swap_to(&pipeline, &env, "orders_json", "orders_v2", "orders", &[]).await;
    wait_writes(&sink, "orders_json", 800 + 200).await;
    let columns = ["id", "state", "note"];
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;
    pipeline.drop_table("orders_v1").await.unwrap();

    // Dropped and re-added, same name and type, no row change after it.
    run(
        &mut my,
        "ALTER TABLE orders DROP COLUMN note; ALTER TABLE orders ADD COLUMN note text",
    )
    .await;
    wait_state(&pipeline, "orders_v2", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v2").1.unwrap();
    assert!(error.contains("column \"note\""), "{error}");
    // The catalog looks as when orders_v2 was created; the stall is what
    // drift reports.
    let rows = drift(&pipeline, None).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].signal, rows[0].error.as_deref()),
        (Signal::Stalled, Some(error.as_str()))
    );
    // A value in the new column does not reach the stalled version.
    run(&mut my, "UPDATE orders SET note = 'fresh' WHERE id = 1").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 1000);
    // v3: the 50 rows whose old note is gone, and row 1 with its new one.
    swap_to(&pipeline, &env, "orders_json", "orders_v3", "orders", &[]).await;
    wait_writes(&sink, "orders_json", 1000 + 51).await;
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &columns).await;
    running.stop().await;
}

/// RENAME TABLE and DROP TABLE: a table renamed upstream is followed to
/// its new name (drift says `table_renamed`), also after a restart, and a
/// version created over the new name reads it beside the old one (the
/// swap changes nothing downstream); a dropped table stalls its version at
/// the statement with the way out, and the source's other tables go on. A
/// table re-created under the dropped name is not merged into the stalled
/// version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_table_and_drop_table() {
    let env = my_env(STATE, "my_absorb_tables").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20));
         INSERT INTO orders SELECT seq, 'open' FROM seq_1_to_100;
         CREATE TABLE customers (id int PRIMARY KEY, name text);
         INSERT INTO customers SELECT seq, CONCAT('c', seq) FROM seq_1_to_10;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders", "customers"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 100).await;
    wait_writes(&sink, "customers_json", 10).await;

    // RENAME TABLE: orders_v1 follows the table to its new name (drift
    // says it was renamed); customers flows.
    run(
        &mut my,
        "RENAME TABLE orders TO orders_old;
         UPDATE orders_old SET status = 'paid' WHERE id <= 3;
         INSERT INTO customers VALUES (11, 'new');",
    )
    .await;
    wait_writes(&sink, "orders_json", 103).await;
    wait_writes(&sink, "customers_json", 11).await;
    assert_eq!(table_state(&pipeline, "orders_v1").0, TableState::Running);
    let db = &env.my.name;
    let rows = drift(&pipeline, None).await.unwrap();
    let renamed = rows
        .iter()
        .find(|r| r.table == "orders_v1")
        .expect("orders_v1 drifts");
    assert_eq!(renamed.signal, Signal::TableRenamed, "{rows:?}");
    assert_eq!(
        renamed.detail.as_deref(),
        Some(format!("upstream table \"{db}.orders\" was renamed to \"{db}.orders_old\"").as_str())
    );
    // Restarted: the stream finds the new name in the schema history.
    running.stop().await;
    run(
        &mut my,
        "UPDATE orders_old SET status = 'shipped' WHERE id = 6",
    )
    .await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 104).await;
    // A version over the new name reads the same table beside the old
    // one; the swap changes nothing downstream, and writes flow.
    swap_to(
        &pipeline,
        &env,
        "orders_json",
        "orders_v2",
        "orders_old",
        &[],
    )
    .await;
    run(
        &mut my,
        "UPDATE orders_old SET status = 'paid' WHERE id = 5",
    )
    .await;
    wait_writes(&sink, "orders_json", 105).await;
    wait_equal_my(
        &mut my,
        &sink,
        "orders_old",
        "orders_json",
        &["id", "status"],
    )
    .await;
    pipeline.drop_table("orders_v1").await.unwrap();

    // DROP TABLE: customers_v1 stalls; orders_v2 flows.
    run(
        &mut my,
        "DROP TABLE customers;
         UPDATE orders_old SET status = 'shipped' WHERE id = 4;",
    )
    .await;
    wait_state(&pipeline, "customers_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "customers_v1").1.unwrap();
    assert_eq!(
        error,
        format!(
            "upstream table \"{db}.customers\" was dropped or replaced by another table of that name; its changes no longer reach this table"
        )
    );
    wait_writes(&sink, "orders_json", 106).await;
    // Re-created under the same name: nothing of it reaches the stalled
    // version, whose sink keeps the last consistent state.
    run(
        &mut my,
        "CREATE TABLE customers (id int PRIMARY KEY, name text);
         INSERT INTO customers VALUES (1, 'someone else'), (50, 'x');",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(audit_count(&sink, "customers_json").await, 11);
    assert_eq!(
        count(
            &sink,
            "SELECT count(*) FROM public.customers_json WHERE data->>'name' = 'c1'"
        )
        .await,
        1
    );
    let rows = drift(&pipeline, None).await.unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.table.as_str(), r.signal))
            .collect::<Vec<_>>(),
        [("customers_v1", Signal::Stalled)],
        "{rows:?}"
    );
    running.stop().await;
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Drift against MariaDB: column drift, type drift, an excluded column
/// dropped, a stall after the next row, a column dropped and re-added, a
/// dropped table, and an unreachable upstream; a table of the same source
/// keeps running throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_follows_the_upstream_catalog_and_binlog() {
    let env = my_env(STATE, "my_drift").await;
    let mut my = my_conn(&env.my.url).await;
    let db = env.my.name.clone();
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, priority int NOT NULL DEFAULT 0,
                              code varchar(10), body text);
         CREATE TABLE memos (id int PRIMARY KEY, body text, note text);
         CREATE TABLE steady (id int PRIMARY KEY, n int);
         INSERT INTO orders VALUES (1, 5, 'a', 'first');
         INSERT INTO memos VALUES (1, 'm', 'private');
         INSERT INTO steady VALUES (1, 1);",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    for (name, upstream, exclude) in [
        ("orders_v1", "orders", &[][..]),
        ("memos_v1", "memos", &["note"][..]),
        ("steady_v1", "steady", &[][..]),
    ] {
        pipeline
            .create_table(&spec(&env, name, upstream, exclude))
            .await
            .unwrap();
    }
    let running = Running::start(pipeline.clone());
    for name in ["orders_v1", "memos_v1", "steady_v1"] {
        wait_state(&pipeline, name, TableState::Running, CONVERGE).await;
    }
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![]);

    let row = |table: &str, upstream: &str, signal: Signal| DriftRow {
        table: table.into(),
        source: env.source.clone(),
        upstream: format!("{db}.{upstream}"),
        signal,
        status: "running".into(),
        added_upstream: Vec::new(),
        dropped_upstream: Vec::new(),
        type_changed: Vec::new(),
        error: None,
        detail: None,
        renamed_to: None,
        recreated_oid: None,
    };

    // A column added upstream; a column added FIRST moves every ordinal,
    // which is no drift of the others.
    run(
        &mut my,
        "ALTER TABLE orders ADD COLUMN region text; ALTER TABLE orders ADD COLUMN tag int FIRST",
    )
    .await;
    let added = DriftRow {
        added_upstream: strings(&["tag", "region"]),
        ..row("orders_v1", "orders", Signal::ColumnDrift)
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![added.clone()]);

    // The excluded column dropped upstream, and rows after it: memos_v1
    // is not reported and keeps running, and so does steady_v1.
    run(
        &mut my,
        "ALTER TABLE memos DROP COLUMN note;
         INSERT INTO memos VALUES (2, 'n');
         INSERT INTO steady VALUES (2, 2);",
    )
    .await;
    wait_until("memos_v1 to have 2 documents", CONVERGE, async || {
        pipeline.document_count("memos_v1").unwrap() == 2
    })
    .await;
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![added.clone()]);
    assert_eq!(table_state(&pipeline, "memos_v1").0, TableState::Running);

    // varchar(10) to varchar(20): both are text documents, so no drift.
    run(&mut my, "ALTER TABLE orders MODIFY code varchar(20)").await;
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![added.clone()]);

    // int to bigint: type drift at once; after the next row the source's
    // task stalls the table (the table map has the new type).
    run(
        &mut my,
        "ALTER TABLE orders MODIFY priority bigint NOT NULL DEFAULT 0",
    )
    .await;
    let retyped = DriftRow {
        type_changed: vec![TypeChange {
            column: "priority".into(),
            from: "int(11)".into(),
            to: "bigint(20)".into(),
        }],
        signal: Signal::TypeDrift,
        ..added.clone()
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![retyped.clone()]);
    assert_eq!(table_state(&pipeline, "orders_v1").0, TableState::Running);
    run(
        &mut my,
        "INSERT INTO orders (id) VALUES (3); INSERT INTO steady VALUES (3, 3);",
    )
    .await;
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap_or_default();
    assert!(error.contains("column \"priority\""), "{error}");
    let stalled = DriftRow {
        status: "stalled".into(),
        error: Some(error),
        signal: Signal::Stalled,
        ..retyped.clone()
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![stalled.clone()]);
    wait_until("steady_v1 to have 3 documents", CONVERGE, async || {
        pipeline.document_count("steady_v1").unwrap() == 3
    })
    .await;
    assert_eq!(table_state(&pipeline, "steady_v1").0, TableState::Running);

    // One source, or one that does not exist.
    assert_eq!(
        drift(&pipeline, Some(&env.source)).await.unwrap(),
        vec![stalled.clone()]
    );
    match drift(&pipeline, Some("nope")).await {
        Err(PipelineError::UnknownObject {
            kind: ObjectKind::Source,
            name,
        }) => assert_eq!(name, "nope"),
        other => panic!("expected an unknown source, got {other:?}"),
    }

    // A column dropped and re-added with the same name and type, no row
    // after it: the catalog shows nothing, the binlog's DDL stalls it.
    run(
        &mut my,
        "ALTER TABLE memos DROP COLUMN body; ALTER TABLE memos ADD COLUMN body text",
    )
    .await;
    wait_state(&pipeline, "memos_v1", TableState::Stalled, CONVERGE).await;
    let memos_error = table_state(&pipeline, "memos_v1").1.unwrap();
    assert!(
        memos_error.contains("column \"body\"") && memos_error.contains("dropped"),
        "{memos_error}"
    );
    let memos = DriftRow {
        status: "stalled".into(),
        error: Some(memos_error),
        ..row("memos_v1", "memos", Signal::Stalled)
    };

    // A dropped table: it stalls too.
    run(&mut my, "DROP TABLE steady").await;
    wait_state(&pipeline, "steady_v1", TableState::Stalled, CONVERGE).await;
    let steady_oid = evolve_pipeline::source::mysql::table_id(&db, "steady");
    let steady = DriftRow {
        status: "stalled".into(),
        error: Some(format!(
            "upstream table \"{db}.steady\" was dropped or replaced by another table of that name; its changes no longer reach this table"
        )),
        detail: Some(format!(
            "upstream table \"{db}.steady\" (OID {steady_oid}) was dropped"
        )),
        ..row("steady_v1", "steady", Signal::Stalled)
    };
    assert_eq!(
        drift(&pipeline, None).await.unwrap(),
        vec![memos.clone(), stalled.clone(), steady.clone()]
    );
    running.stop().await;

    // The same catalog with an upstream that cannot be reached: every
    // table is `unknown`, with the error and without the password.
    let unreachable = Pipeline::open(
        Config::new(&env.state).with_connection("my", "mysql://evolve:hunter2@127.0.0.1:1/x"),
    )
    .unwrap();
    let rows = drift(&unreachable, None).await.unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.table.as_str(), r.signal, r.status.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("memos_v1", Signal::Unknown, "stalled"),
            ("orders_v1", Signal::Unknown, "stalled"),
            ("steady_v1", Signal::Unknown, "stalled"),
        ]
    );
    for row in &rows {
        let error = row.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with("could not connect to connection \"my\""),
            "{error}"
        );
        assert!(
            !error.contains("hunter2") && error.contains("evolve:***@127.0.0.1:1/x"),
            "{error}"
        );
    }
}

/// A column dropped and re-added while the pipeline is stopped: the
/// stream reopens before both statements, with the catalog already as it
/// was before them, and still stalls the table at the drop; a restart
/// after that replays nothing (the statement's position is applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_readded_while_stopped_is_detected_after_the_restart() {
    let env = my_env(STATE, "my_absorb_restart").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, note text);
         INSERT INTO orders SELECT seq, IF(seq % 2 = 0, 'n', NULL) FROM seq_1_to_40;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 40).await;
    running.stop().await;

    run(
        &mut my,
        "ALTER TABLE orders DROP COLUMN note; ALTER TABLE orders ADD COLUMN note text;
         UPDATE orders SET note = 'new' WHERE id <= 3;",
    )
    .await;
    let running = Running::start(pipeline.clone());
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap();
    assert!(error.contains("column \"note\""), "{error}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 40);
    // Recovery: the 20 old notes are gone, 3 new ones came.
    swap_to(&pipeline, &env, "orders_json", "orders_v2", "orders", &[]).await;
    wait_writes(&sink, "orders_json", 40 + 20 + 3 - 1).await;
    wait_equal_my(&mut my, &sink, "orders", "orders_json", &["id", "note"]).await;
    running.stop().await;
    // Restarted once more: orders_v2 keeps running.
    let running = Running::start(pipeline.clone());
    run(&mut my, "UPDATE orders SET note = 'again' WHERE id = 5").await;
    wait_writes(&sink, "orders_json", 63).await;
    assert_eq!(table_state(&pipeline, "orders_v2").0, TableState::Running);
    running.stop().await;
}

/// The columns a reopened stream reads DDL statements against come from
/// the store's schema history at its position, not from the catalog as it
/// is when it reopens. Stopped, then upstream: a rename of the excluded
/// column `z` (a planned drop: no stall), five updates of `a`, and the
/// drop of `a`. After the restart the table takes the five updates and
/// stalls at the drop. Read against today's catalog (no `a` any more),
/// the rename's statement would already lack `a` and stall the table
/// before the updates: 11 writes instead of 16.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_read_while_stopped_are_read_against_their_own_position() {
    let env = my_env(STATE, "my_absorb_history").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, a int, z int);
         INSERT INTO orders SELECT seq, seq, seq FROM seq_1_to_10;",
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    create_chain_excluding(&pipeline, &env, "orders", &["z"]).await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 10).await;
    // A streamed row: the stream announces the table's columns, and the
    // store records them at this transaction's position.
    run(&mut my, "UPDATE orders SET a = 0 WHERE id = 1").await;
    wait_writes(&sink, "orders_json", 11).await;
    running.stop().await;

    run(
        &mut my,
        "ALTER TABLE orders CHANGE COLUMN z z2 int;
         UPDATE orders SET a = a + 100 WHERE id <= 5;
         ALTER TABLE orders DROP COLUMN a;",
    )
    .await;
    let running = Running::start(pipeline.clone());
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap();
    assert!(error.contains("column \"a\""), "{error}");
    wait_writes(&sink, "orders_json", 16).await;
    let updated = count(
        &sink,
        "SELECT count(*) FROM public.orders_json WHERE (data->>'a')::int >= 100",
    )
    .await;
    assert_eq!(
        updated, 5,
        "the five updates before the drop reached the sink"
    );
    running.stop().await;
}

/// APPLY REPLACEMENT for a user who may read the binlog but not write the
/// marker: one clear error naming the table and the GRANT, no password,
/// nothing applied; after the GRANT the same APPLY swaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_without_the_marker_privileges_says_which_grant() {
    let env = my_env(STATE, "my_absorb_grant").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    run(
        &mut my,
        "CREATE TABLE orders (id int PRIMARY KEY, note text);
         INSERT INTO orders SELECT seq, NULL FROM seq_1_to_10;",
    )
    .await;
    let db = env.my.name.clone();
    let user = format!("rd_{}", db.len());
    let server = tokio::task::spawn_blocking(evolve_test::shared_mariadb)
        .await
        .unwrap();
    let user = format!("{user}_{}", std::process::id());
    server
        .client_sql(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 's3cret'; \
             GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{user}'@'%';"
        ))
        .unwrap();
    let url = format!("mysql://{user}:s3cret@127.0.0.1:{}/{db}", server.port());
    let config = Config::new(&env.state)
        .with_connection("my", url)
        .with_connection("sink", env.sink.url.clone());
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    create_all(&pipeline, &env, &sink, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 10).await;
    pipeline
        .create_table(&spec(&env, "orders_v2", "orders", &[]))
        .await
        .unwrap();
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    wait_state(&pipeline, "orders_v2", TableState::Running, CONVERGE).await;
    let e = pipeline
        .apply_replacement("orders_json", "orders_json_v2", APPLY_WAIT)
        .await
        .unwrap_err();
    assert_eq!(
        e.primary(),
        format!(
            "APPLY REPLACEMENT for MySQL source \"{}\" could not write its marker into {db}.evolve_markers",
            env.source
        )
    );
    assert_eq!(
        e.hint().as_deref(),
        Some(
            format!(
                "The user of connection \"my\" needs CREATE, INSERT and UPDATE on it: GRANT CREATE, INSERT, UPDATE ON `{db}`.`evolve_markers` TO <user>;"
            )
            .as_str()
        )
    );
    assert!(!e.to_string().contains("s3cret"), "{e}");
    let pending = pipeline.replacements().unwrap();
    assert_eq!(pending.len(), 1);
    assert!(!pending[0].applying, "{pending:?}");
    assert_eq!(
        pipeline.interfaces().unwrap()[0].table,
        "orders_v1",
        "nothing applied"
    );
    server
        .client_sql(&format!(
            "GRANT CREATE, INSERT, UPDATE ON `{db}`.`evolve_markers` TO '{user}'@'%';"
        ))
        .unwrap();
    pipeline
        .apply_replacement("orders_json", "orders_json_v2", APPLY_WAIT)
        .await
        .unwrap();
    assert_eq!(pipeline.interfaces().unwrap()[0].table, "orders_v2");
    // Same documents: the swap wrote nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 10);
    running.stop().await;
}
