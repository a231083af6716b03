//! The absorb flows at their edges, on real clusters: what `ABSORB =
//! 'auto'` does when a new version cannot recover the table it replaces.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use evolve_pipeline::{Pipeline, TableSpec, TableState};

const CONVERGE: Duration = Duration::from_secs(30);

/// A row whose document cannot be built (a `json` value with `\u0000`,
/// which jsonb refuses) stalls the table; every new version's snapshot
/// reads the same row and stalls the same way. The controller makes the
/// next version, and makes it once more (the upstream may have changed
/// while it hydrated), but then stops making copies of the whole table
/// every poll: it waits before trying again, and leaves no new version or
/// replacement behind meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_does_not_loop_on_a_stall_a_new_version_repeats() {
    let env = env("absorb_no_loop").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, j json);
         INSERT INTO orders SELECT i, json_build_object('n', i) FROM generate_series(1, 20) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    pipeline.set_absorb("orders_json", true).unwrap();
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("20 sink writes", CONVERGE, async || {
        audit_count(&sink, "orders_json").await == 20
    })
    .await;

    up.batch_execute(r#"INSERT INTO orders VALUES (21, '{"a": "\u0000"}')"#)
        .await
        .unwrap();
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;

    // Watch the controller for 25 s (about a dozen polls): every table
    // version it makes, by id.
    let mut made = BTreeSet::new();
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(25) {
        for t in pipeline.tables().unwrap() {
            if t.name != "orders_v1" {
                made.insert(t.id);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        made.len() <= 2,
        "the controller made {} new versions of orders_v1 in 25 s, each a copy of the whole table that stalls the same way",
        made.len()
    );
    // Nothing half-made is left while it waits, and readers keep the last
    // consistent state.
    wait_until(
        "the stalled new version to be dropped",
        CONVERGE,
        async || {
            pipeline.tables().unwrap().len() == 1 && pipeline.replacements().unwrap().is_empty()
        },
    )
    .await;
    let interface = pipeline
        .interfaces()
        .unwrap()
        .into_iter()
        .find(|i| i.name == "orders_json")
        .unwrap();
    assert_eq!(interface.table, "orders_v1");
    assert_eq!(pipeline.document_count("orders_v1").unwrap(), 20);
    assert_eq!(audit_count(&sink, "orders_json").await, 20);
    running.stop().await;
}

/// The next version keeps the old one's EXCLUDE COLUMNS and TEXT COLUMNS
/// for the columns upstream still has. A column excluded on purpose and
/// then dropped upstream (the planned drop) is left out of the lists, and
/// the rest stay: a column excluded to keep it out of documents (a
/// secret) stays out, and a column read as text stays text, so the swap
/// changes only the rows whose document really changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_keeps_the_exclusions_of_columns_upstream_still_has() {
    let env = env("absorb_keeps_options").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, qty int, secret text, note text);
         INSERT INTO orders SELECT i, i, 'pw' || i, 'n' FROM generate_series(1, 100) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    pipeline
        .create_table(&TableSpec {
            name: "orders_v1".into(),
            source: env.source.clone(),
            schema: "public".into(),
            table: "orders".into(),
            exclude: vec!["secret".into(), "note".into()],
            text: vec!["qty".into()],
            ..TableSpec::default()
        })
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
    pipeline.set_absorb("orders_json", true).unwrap();
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("100 sink writes", CONVERGE, async || {
        audit_count(&sink, "orders_json").await == 100
    })
    .await;

    // The planned drop of an excluded column: nothing for the interface.
    // Then a column added, with a value on 10 rows.
    up.batch_execute(
        "ALTER TABLE orders DROP COLUMN note;
         ALTER TABLE orders ADD COLUMN region text;
         UPDATE orders SET region = 'eu' WHERE id % 10 = 0;",
    )
    .await
    .unwrap();
    wait_until("orders_json to read orders_v2", CONVERGE, async || {
        pipeline
            .interfaces()
            .unwrap()
            .iter()
            .any(|i| i.name == "orders_json" && i.table == "orders_v2")
    })
    .await;
    let v2 = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "orders_v2")
        .unwrap();
    let flags = |name: &str| {
        v2.columns
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.excluded, c.as_text))
    };
    assert_eq!(flags("secret"), Some((true, false)), "{v2:?}");
    assert_eq!(flags("qty"), Some((false, true)), "{v2:?}");
    assert_eq!(flags("note"), None, "{v2:?}");
    // Only the 10 rows with a region changed downstream.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 110);
    let leaked = sink_rows(&sink, "orders_json")
        .await
        .into_iter()
        .filter(|(_, data)| data.contains("secret") || data.contains("pw"))
        .count();
    assert_eq!(leaked, 0, "documents show the excluded column");
    let row10 = sink_rows(&sink, "orders_json")
        .await
        .into_iter()
        .map(|(_, data)| data)
        .find(|data| data.contains(r#""id": 10,"#));
    assert!(
        row10
            .as_deref()
            .is_some_and(|d| d.contains(r#""qty": "10""#) && d.contains("eu")),
        "{row10:?}"
    );
    running.stop().await;
}

/// A column excluded on purpose and then renamed upstream stays excluded
/// under its new name in the next version (its values must not reach
/// documents because it changed its name), and a column read as text
/// stays text under its new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_follows_renamed_excluded_and_text_columns() {
    let env = env("absorb_renamed_options").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, code int, secret text);
         INSERT INTO orders SELECT i, i, 'pw' || i FROM generate_series(1, 100) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    pipeline
        .create_table(&TableSpec {
            name: "orders_v1".into(),
            source: env.source.clone(),
            schema: "public".into(),
            table: "orders".into(),
            exclude: vec!["secret".into()],
            text: vec!["code".into()],
            ..TableSpec::default()
        })
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
    pipeline.set_absorb("orders_json", true).unwrap();
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("100 sink writes", CONVERGE, async || {
        audit_count(&sink, "orders_json").await == 100
    })
    .await;

    up.batch_execute(
        "ALTER TABLE orders RENAME COLUMN secret TO password;
         ALTER TABLE orders RENAME COLUMN code TO sku;",
    )
    .await
    .unwrap();
    wait_until("orders_json to read orders_v2", CONVERGE, async || {
        pipeline
            .interfaces()
            .unwrap()
            .iter()
            .any(|i| i.name == "orders_json" && i.table == "orders_v2")
    })
    .await;
    let v2 = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "orders_v2")
        .unwrap();
    let flags = |name: &str| {
        v2.columns
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.excluded, c.as_text))
    };
    assert_eq!(flags("password"), Some((true, false)), "{v2:?}");
    assert_eq!(flags("sku"), Some((false, true)), "{v2:?}");
    // Every document changed once (`code` is `sku` now), and none shows
    // the excluded column.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 200);
    let rows = sink_rows(&sink, "orders_json").await;
    assert_eq!(rows.len(), 100);
    for (_, data) in &rows {
        assert!(!data.contains("password") && !data.contains("pw"), "{data}");
    }
    let row10 = rows
        .into_iter()
        .map(|(_, data)| data)
        .find(|data| data.contains(r#""id": 10,"#));
    assert!(
        row10
            .as_deref()
            .is_some_and(|d| d.contains(r#""sku": "10""#)),
        "{row10:?}"
    );
    running.stop().await;
}

/// A cut-over that drops the table and renames its copy into its place
/// (`CREATE TABLE orders_new ...; DROP TABLE orders; ALTER TABLE
/// orders_new RENAME TO orders`): the pinned OID is gone and the stream
/// brings nothing of the new table, while the old version stays
/// `running`. ABSORB = 'auto' makes the next version over the table that
/// has the name now, as after a renaming cut-over that keeps the old
/// table, so changes flow again; only the rows whose document differs
/// are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_auto_follows_a_table_dropped_and_re_created() {
    let env = env("absorb_recreated").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL);
         INSERT INTO orders SELECT i, 'open' FROM generate_series(1, 50) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    pipeline.set_absorb("orders_json", true).unwrap();
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("50 sink writes", CONVERGE, async || {
        audit_count(&sink, "orders_json").await == 50
    })
    .await;

    up.batch_execute(
        "CREATE TABLE orders_new (LIKE orders INCLUDING ALL);
         INSERT INTO orders_new SELECT * FROM orders;
         UPDATE orders_new SET status = 'paid' WHERE id <= 5;
         BEGIN;
         DROP TABLE orders;
         ALTER TABLE orders_new RENAME TO orders;
         COMMIT;
         INSERT INTO orders VALUES (51, 'open');",
    )
    .await
    .unwrap();
    wait_until("orders_json to read orders_v2", CONVERGE, async || {
        pipeline
            .interfaces()
            .unwrap()
            .iter()
            .any(|i| i.name == "orders_json" && i.table == "orders_v2")
    })
    .await;
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    // Rows written after the swap reach the sink too.
    up.batch_execute("UPDATE orders SET status = 'shipped' WHERE id = 7")
        .await
        .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", CONVERGE).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 50 + 5 + 1 + 1);
    // The old version, over a table that no longer exists, is dropped.
    wait_until("orders_v1 to be dropped", CONVERGE, async || {
        pipeline
            .tables()
            .unwrap()
            .iter()
            .all(|t| t.name != "orders_v1")
    })
    .await;
    running.stop().await;
}
