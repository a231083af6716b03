//! Drift against a real upstream: the pipeline runs in process over three
//! upstream tables while they change, and `drift()` is asserted row by row
//! after each change.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{table_state, wait_state, wait_until};
use evolve_pipeline::drift::{DriftRow, Signal, TypeChange};
use evolve_pipeline::poll::drift;
use evolve_pipeline::{Config, ObjectKind, Pipeline, PipelineError, TableSpec, TableState};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

const CONVERGE: Duration = Duration::from_secs(30);

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A pipeline running in a task of this runtime (as in tests/pipeline.rs).
struct Running {
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Running {
    fn start(pipeline: Arc<Pipeline>) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            evolve_pipeline::absorb::run_with(&pipeline, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Running {
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(20), handle)
                .await
                .expect("the pipeline stops within 20 s")
                .unwrap();
        }
    }
}

/// Removes the state directory when the test ends, however it ends.
struct StateDir(PathBuf);

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn wait_documents(pipeline: &Pipeline, name: &str, count: u64) {
    wait_until(
        &format!("{name} to have {count} documents"),
        CONVERGE,
        async || pipeline.document_count(name).unwrap() == count,
    )
    .await;
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn change(column: &str, from: &str, to: &str) -> TypeChange {
    TypeChange {
        column: column.into(),
        from: from.into(),
        to: to.into(),
    }
}

/// A row of `orders_v1` with nothing in it yet.
fn orders(source: &str, signal: Signal) -> DriftRow {
    DriftRow {
        table: "orders_v1".into(),
        source: source.into(),
        upstream: "public.orders".into(),
        signal,
        status: "running".into(),
        added_upstream: Vec::new(),
        dropped_upstream: Vec::new(),
        type_changed: Vec::new(),
        error: None,
        detail: None,
        renamed_to: None,
        recreated_oid: None,
    }
}

/// Column drift, type drift (typmod and OID), an excluded column dropped,
/// a column dropped and re-added without a Relation message, a stall, a
/// renamed and a dropped upstream table, and an unreachable upstream; a
/// table of the same source keeps running throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_follows_the_upstream_catalog() {
    let db = evolve_test::fresh_db("drift").await;
    let up = connect(&db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, priority int NOT NULL DEFAULT 0,
                              code varchar(10), body text);
         CREATE TABLE memos (id int PRIMARY KEY, body text, note text);
         CREATE TABLE steady (id int PRIMARY KEY, n int);
         INSERT INTO orders VALUES (1, 5, 'a', 'first');
         INSERT INTO memos VALUES (1, 'm', 'private');
         INSERT INTO steady VALUES (1, 1);",
    )
    .await
    .unwrap();
    let state = StateDir(std::env::temp_dir().join(format!(
        "evolve-drift-test-{}-{}",
        std::process::id(),
        db.name
    )));
    let _ = std::fs::remove_dir_all(&state.0);
    let source = format!("src_{}", db.name);
    let pipeline = Arc::new(
        Pipeline::open(Config::new(&state.0).with_connection("up", db.url.clone())).unwrap(),
    );
    pipeline
        .create_source(&source, "up", "evolve_pub")
        .await
        .unwrap();
    for (name, upstream, exclude) in [
        ("orders_v1", "orders", vec![]),
        ("memos_v1", "memos", vec!["note".to_string()]),
        ("steady_v1", "steady", vec![]),
    ] {
        pipeline
            .create_table(&TableSpec {
                name: name.into(),
                source: source.clone(),
                schema: "public".into(),
                table: upstream.into(),
                exclude,
                ..TableSpec::default()
            })
            .await
            .unwrap();
    }
    let running = Running::start(pipeline.clone());
    for name in ["orders_v1", "memos_v1", "steady_v1"] {
        wait_state(&pipeline, name, TableState::Running, CONVERGE).await;
    }

    // Everything matches.
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![]);

    // A column added upstream.
    up.batch_execute("ALTER TABLE orders ADD COLUMN region text")
        .await
        .unwrap();
    let added = DriftRow {
        added_upstream: strings(&["region"]),
        ..orders(&source, Signal::ColumnDrift)
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![added.clone()]);

    // The excluded column dropped upstream, and a row change after it
    // (so a Relation message): memos_v1 is not reported and keeps running,
    // and so does steady_v1.
    up.batch_execute(
        "ALTER TABLE memos DROP COLUMN note;
         INSERT INTO memos VALUES (2, 'n');
         INSERT INTO steady VALUES (2, 2);",
    )
    .await
    .unwrap();
    wait_documents(&pipeline, "memos_v1", 2).await;
    wait_documents(&pipeline, "steady_v1", 2).await;
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![added.clone()]);
    assert_eq!(table_state(&pipeline, "memos_v1").0, TableState::Running);

    // varchar(10) to varchar(20): the same type OID, so the stream goes on
    // after the next row change, and only the catalog shows the typmod.
    up.batch_execute(
        "ALTER TABLE orders ALTER COLUMN code TYPE varchar(20);
         INSERT INTO orders (id, code) VALUES (2, 'twenty characters!!');",
    )
    .await
    .unwrap();
    wait_documents(&pipeline, "orders_v1", 2).await;
    assert_eq!(
        drift(&pipeline, None).await.unwrap(),
        vec![DriftRow {
            type_changed: vec![change(
                "code",
                "character varying(10)",
                "character varying(20)"
            )],
            signal: Signal::TypeDrift,
            ..added.clone()
        }]
    );
    up.batch_execute(
        "DELETE FROM orders WHERE id = 2; ALTER TABLE orders ALTER COLUMN code TYPE varchar(10)",
    )
    .await
    .unwrap();
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![added.clone()]);

    // A column dropped and re-added with the same name and type, and no
    // row change afterwards: no Relation message, only the catalog's
    // attribute numbers show it.
    up.batch_execute(
        "ALTER TABLE orders DROP COLUMN body; ALTER TABLE orders ADD COLUMN body text",
    )
    .await
    .unwrap();
    let readded = DriftRow {
        dropped_upstream: strings(&["body"]),
        detail: Some("column \"body\" was dropped and re-added (attnum 4 → 6)".into()),
        ..added.clone()
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![readded.clone()]);
    assert_eq!(table_state(&pipeline, "orders_v1").0, TableState::Running);

    // integer to bigint: type drift at once; after the next row change the
    // source's task stalls the table, and drift says so with its error.
    up.batch_execute("ALTER TABLE orders ALTER COLUMN priority TYPE bigint")
        .await
        .unwrap();
    let retyped = DriftRow {
        type_changed: vec![change("priority", "integer", "bigint")],
        signal: Signal::TypeDrift,
        ..readded.clone()
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![retyped.clone()]);
    up.batch_execute("INSERT INTO orders (id) VALUES (3); INSERT INTO steady VALUES (3, 3);")
        .await
        .unwrap();
    wait_state(&pipeline, "orders_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap_or_default();
    // The retyped column, or the re-added one: a stream behind the DDL
    // numbers an earlier schema's columns with the catalog as it is now,
    // and stalls there at the re-added column (see `number_columns`).
    assert!(
        error.contains("column \"priority\"")
            || error.contains(
                "column \"body\" of upstream table \"public.orders\" is no longer the column pinned"
            ),
        "{error}"
    );
    let stalled = DriftRow {
        status: "stalled".into(),
        error: Some(error),
        signal: Signal::Stalled,
        ..retyped.clone()
    };
    assert_eq!(drift(&pipeline, None).await.unwrap(), vec![stalled.clone()]);

    // The other table of the source kept running.
    wait_documents(&pipeline, "steady_v1", 3).await;
    assert_eq!(table_state(&pipeline, "steady_v1").0, TableState::Running);

    // One source, or one that does not exist.
    assert_eq!(
        drift(&pipeline, Some(&source)).await.unwrap(),
        vec![stalled.clone()]
    );
    match drift(&pipeline, Some("nope")).await {
        Err(PipelineError::UnknownObject {
            kind: ObjectKind::Source,
            name,
        }) => assert_eq!(name, "nope"),
        other => panic!("expected an unknown source, got {other:?}"),
    }

    // An upstream table renamed (the stream follows its OID), and one
    // dropped.
    let steady_oid: u32 = up
        .query_one("SELECT 'public.steady'::regclass::oid", &[])
        .await
        .unwrap()
        .get(0);
    up.batch_execute("ALTER TABLE memos RENAME TO memos_old; DROP TABLE steady;")
        .await
        .unwrap();
    let memos = DriftRow {
        table: "memos_v1".into(),
        upstream: "public.memos".into(),
        detail: Some("upstream table \"public.memos\" was renamed to \"public.memos_old\"".into()),
        renamed_to: Some(evolve_pipeline::drift::UpstreamName {
            schema: "public".into(),
            table: "memos_old".into(),
        }),
        ..orders(&source, Signal::TableRenamed)
    };
    let steady = DriftRow {
        table: "steady_v1".into(),
        upstream: "public.steady".into(),
        detail: Some(format!(
            "upstream table \"public.steady\" (OID {steady_oid}) was dropped"
        )),
        ..orders(&source, Signal::TableDropped)
    };
    assert_eq!(
        drift(&pipeline, None).await.unwrap(),
        vec![memos.clone(), stalled.clone(), steady.clone()]
    );
    running.stop().await;

    // The same catalog with an upstream that cannot be reached: every
    // table is `unknown`, with the error and without the password.
    let unreachable = Pipeline::open(
        Config::new(&state.0).with_connection("up", "postgres://postgres:hunter2@127.0.0.1:1/x"),
    )
    .unwrap();
    let rows = drift(&unreachable, None).await.unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.table.as_str(), r.signal, r.status.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("memos_v1", Signal::Unknown, "running"),
            ("orders_v1", Signal::Unknown, "stalled"),
            ("steady_v1", Signal::Unknown, "running"),
        ]
    );
    for row in &rows {
        let error = row.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with("could not connect to connection \"up\" (postgres@127.0.0.1:1/x)"),
            "{error}"
        );
        assert!(
            !error.contains("hunter2") && !error.contains("postgres://"),
            "{error}"
        );
        assert!(
            row.added_upstream.is_empty() && row.detail.is_none(),
            "{row:?}"
        );
    }
}

/// Schema changes the stream's column names alone do not show stall the
/// table at the next row change, before any of its rows is applied: a
/// column dropped and re-added under its name (the last column, so the
/// Relation message lists the same names in the same order), names
/// swapped by renames, and type modifiers whose change rewrote stored
/// values (a numeric scale, a lowered timestamp precision). Modifier
/// changes that keep every value (a longer varchar, a numeric precision
/// at the same scale, a raised timestamp precision) keep the table
/// running, and its rows keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_names_and_rewriting_typmods_stall() {
    let db = evolve_test::fresh_db("drift_reuse").await;
    let up = connect(&db.url).await;
    up.batch_execute(
        "CREATE TABLE readded (id int PRIMARY KEY, body text, tail text);
         CREATE TABLE swapped (id int PRIMARY KEY, x text, y text);
         CREATE TABLE scaled (id int PRIMARY KEY, amount numeric(10,2));
         CREATE TABLE rounded (id int PRIMARY KEY, at timestamp(6));
         CREATE TABLE widened (id int PRIMARY KEY, code varchar(10), amount numeric(10,2),
                               at timestamp(3));
         INSERT INTO readded VALUES (1, 'b', 'old tail');
         INSERT INTO swapped VALUES (1, 'x1', 'y1');
         INSERT INTO scaled VALUES (1, 1.5);
         INSERT INTO rounded VALUES (1, '2026-01-01 00:00:00.123456');
         INSERT INTO widened VALUES (1, 'c', 1.5, '2026-01-01 00:00:00.123');",
    )
    .await
    .unwrap();
    let state = StateDir(std::env::temp_dir().join(format!(
        "evolve-drift-reuse-{}-{}",
        std::process::id(),
        db.name
    )));
    let _ = std::fs::remove_dir_all(&state.0);
    let source = format!("src_{}", db.name);
    let pipeline = Arc::new(
        Pipeline::open(Config::new(&state.0).with_connection("up", db.url.clone())).unwrap(),
    );
    pipeline
        .create_source(&source, "up", "evolve_pub")
        .await
        .unwrap();
    let names = ["readded", "swapped", "scaled", "rounded", "widened"];
    for upstream in names {
        pipeline
            .create_table(&TableSpec {
                name: format!("{upstream}_v1"),
                source: source.clone(),
                schema: "public".into(),
                table: upstream.into(),
                ..TableSpec::default()
            })
            .await
            .unwrap();
    }
    pipeline
        .create_interface("readded_json", "readded_v1")
        .unwrap();
    let running = Running::start(pipeline.clone());
    for upstream in names {
        wait_state(
            &pipeline,
            &format!("{upstream}_v1"),
            TableState::Running,
            CONVERGE,
        )
        .await;
    }
    // A row change of each before the DDL: the stream has sent each
    // table's Relation message once already.
    up.batch_execute(
        "INSERT INTO readded VALUES (2, 'b', 'old tail');
         INSERT INTO swapped VALUES (2, 'x2', 'y2');
         INSERT INTO scaled VALUES (2, 2.5);
         INSERT INTO rounded VALUES (2, '2026-01-02 00:00:00.5');
         INSERT INTO widened VALUES (2, 'c', 2.5, '2026-01-02 00:00:00.5');",
    )
    .await
    .unwrap();
    for upstream in names {
        wait_documents(&pipeline, &format!("{upstream}_v1"), 2).await;
    }

    up.batch_execute(
        "ALTER TABLE readded DROP COLUMN tail; ALTER TABLE readded ADD COLUMN tail text;
         ALTER TABLE swapped RENAME COLUMN x TO t; ALTER TABLE swapped RENAME COLUMN y TO x;
         ALTER TABLE swapped RENAME COLUMN t TO y;
         ALTER TABLE scaled ALTER COLUMN amount TYPE numeric(12,4);
         ALTER TABLE rounded ALTER COLUMN at TYPE timestamp(0);
         ALTER TABLE widened ALTER COLUMN code TYPE varchar(20),
                             ALTER COLUMN amount TYPE numeric(14,2),
                             ALTER COLUMN at TYPE timestamp(6);
         INSERT INTO readded VALUES (3, 'b', 'new tail');
         UPDATE swapped SET x = 'x3' WHERE id = 1;
         INSERT INTO scaled VALUES (3, 3.5);
         INSERT INTO rounded VALUES (3, '2026-01-03 00:00:00');
         INSERT INTO widened VALUES (3, 'twenty characters!!', 3.5, '2026-01-03 00:00:00.123456');",
    )
    .await
    .unwrap();
    let reasons = [
        (
            "readded_v1",
            "column \"tail\" of upstream table \"public.readded\" is no longer the column pinned (attnum 3 is now 4)",
        ),
        (
            "swapped_v1",
            "column \"x\" of upstream table \"public.swapped\" is no longer the column pinned (attnum 2 is now 3)",
        ),
        (
            "scaled_v1",
            "column \"amount\" of upstream table \"public.scaled\" changed type from numeric(10,2) to numeric(12,4)",
        ),
        (
            "rounded_v1",
            "column \"at\" of upstream table \"public.rounded\" changed type from timestamp(6) without time zone to timestamp(0) without time zone",
        ),
    ];
    for (table, reason) in reasons {
        wait_state(&pipeline, table, TableState::Stalled, CONVERGE).await;
        let error = table_state(&pipeline, table).1.unwrap_or_default();
        assert!(error.starts_with(reason), "{table}: {error}");
        // Stalled before the row change: the documents are the two rows
        // from before the DDL, unchanged.
        assert_eq!(pipeline.document_count(table).unwrap(), 2, "{table}");
    }
    wait_documents(&pipeline, "widened_v1", 3).await;
    assert_eq!(table_state(&pipeline, "widened_v1").0, TableState::Running);
    let docs: Vec<String> = pipeline
        .documents("readded_json")
        .unwrap()
        .into_iter()
        .map(|(_, doc)| String::from_utf8(doc).unwrap())
        .collect();
    assert_eq!(docs.len(), 2, "{docs:?}");
    assert!(docs.iter().all(|d| d.contains("old tail")), "{docs:?}");
    running.stop().await;
}

/// Publication settings that keep changes from the stream stall the
/// tables they hide, with the setting and the way out, at the next check
/// (every 5 s) or at the next schema that lacks a read column: a table
/// removed from the publication, a row filter, a column list, a partition
/// published as its root, operations not published, and an enum value
/// renamed, in a column of the enum or of an array, a domain or a
/// composite type that holds it (a value added is nothing). CREATE TABLE
/// refuses such a table, and `pipeline check` fails a table removed from
/// the publication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publication_settings_that_hide_changes_stall() {
    let db = evolve_test::fresh_db("drift_pub").await;
    let up = connect(&db.url).await;
    up.batch_execute(
        "CREATE TABLE removed (id int PRIMARY KEY, v int);
         CREATE TABLE filtered (id int PRIMARY KEY, v int);
         CREATE TABLE listed (id int PRIMARY KEY, v int, w int);
         CREATE TABLE parts (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
         CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (1000);
         CREATE TABLE deletes (id int PRIMARY KEY, v int);
         CREATE TYPE mood AS ENUM ('ok', 'sad');
         CREATE TABLE moods (id int PRIMARY KEY, m mood);
         INSERT INTO moods VALUES (1, 'sad');
         CREATE TYPE hue AS ENUM ('red', 'green');
         CREATE TABLE hues (id int PRIMARY KEY, h hue[]);
         INSERT INTO hues VALUES (1, '{red,green}');
         CREATE TYPE size AS ENUM ('s', 'm');
         CREATE DOMAIN size_d AS size;
         CREATE TABLE sizes (id int PRIMARY KEY, s size_d);
         INSERT INTO sizes VALUES (1, 's');
         CREATE TYPE tone AS ENUM ('lo', 'hi');
         CREATE TYPE pitch AS (t tone, n int);
         CREATE TABLE pitches (id int PRIMARY KEY, p pitch);
         INSERT INTO pitches VALUES (1, ROW('lo', 1));
         INSERT INTO removed VALUES (1, 1);
         INSERT INTO filtered VALUES (1, 1);
         INSERT INTO listed VALUES (1, 1, 1);
         INSERT INTO parts VALUES (1, 1);
         INSERT INTO deletes VALUES (1, 1);",
    )
    .await
    .unwrap();
    let state = StateDir(std::env::temp_dir().join(format!(
        "evolve-drift-pub-{}-{}",
        std::process::id(),
        db.name
    )));
    let _ = std::fs::remove_dir_all(&state.0);
    let source = format!("src_{}", db.name);
    let config = Config::new(&state.0).with_connection("up", db.url.clone());
    let pipeline = Arc::new(Pipeline::open(config.clone()).unwrap());
    pipeline
        .create_source(&source, "up", "evo_pub")
        .await
        .unwrap();
    let names = [
        "removed", "filtered", "listed", "parts_1", "deletes", "moods", "hues", "sizes", "pitches",
    ];
    for upstream in names {
        pipeline
            .create_table(&TableSpec {
                name: format!("{upstream}_v1"),
                source: source.clone(),
                schema: "public".into(),
                table: upstream.into(),
                ..TableSpec::default()
            })
            .await
            .unwrap();
    }
    let running = Running::start(pipeline.clone());
    for upstream in names {
        wait_state(
            &pipeline,
            &format!("{upstream}_v1"),
            TableState::Running,
            CONVERGE,
        )
        .await;
    }

    up.batch_execute(
        "ALTER PUBLICATION evo_pub DROP TABLE removed;
         BEGIN;
         ALTER PUBLICATION evo_pub DROP TABLE filtered;
         ALTER PUBLICATION evo_pub ADD TABLE filtered WHERE (id > 10);
         COMMIT;
         BEGIN;
         ALTER PUBLICATION evo_pub DROP TABLE listed;
         ALTER PUBLICATION evo_pub ADD TABLE listed (id, w);
         COMMIT;
         INSERT INTO listed VALUES (2, 2, 2);
         ALTER PUBLICATION evo_pub ADD TABLE parts;
         ALTER PUBLICATION evo_pub SET (publish_via_partition_root = true);
         ALTER TYPE mood ADD VALUE 'glad';
         ALTER TYPE mood RENAME VALUE 'sad' TO 'blue';
         ALTER TYPE hue RENAME VALUE 'red' TO 'crimson';
         ALTER TYPE size RENAME VALUE 's' TO 'small';
         ALTER TYPE tone RENAME VALUE 'lo' TO 'low';",
    )
    .await
    .unwrap();
    let reasons = [
        (
            "removed_v1",
            "upstream table public.removed is not in publication evo_pub (it was removed from it), so its changes do not reach the stream; way out: ALTER PUBLICATION evo_pub ADD TABLE public.removed; then a new version of the table through a replacement",
        ),
        (
            "filtered_v1",
            "publication evo_pub publishes only the rows of public.filtered WHERE (id > 10), and the interface needs every row; way out: BEGIN; ALTER PUBLICATION evo_pub DROP TABLE public.filtered; ALTER PUBLICATION evo_pub ADD TABLE public.filtered; COMMIT;",
        ),
        (
            "listed_v1",
            "publication evo_pub publishes public.listed with a column list that leaves out v, which the table reads",
        ),
        (
            "parts_1_v1",
            "publication evo_pub publishes partition public.parts_1 as its partitioned root (publish_via_partition_root), so no change reaches a table over the partition",
        ),
        (
            "moods_v1",
            "enum type mood of column \"m\" of upstream table \"public.moods\" no longer has the value 'sad' (renamed with ALTER TYPE ... RENAME VALUE), which documents still show",
        ),
        (
            "hues_v1",
            "type hue[] of column \"h\" of upstream table \"public.hues\" holds an enum that no longer has the value 'red' (renamed with ALTER TYPE ... RENAME VALUE), which documents still show",
        ),
        (
            "sizes_v1",
            "type size_d of column \"s\" of upstream table \"public.sizes\" holds an enum that no longer has the value 's' (renamed with ALTER TYPE ... RENAME VALUE)",
        ),
        (
            "pitches_v1",
            "type pitch of column \"p\" of upstream table \"public.pitches\" holds an enum that no longer has the value 'lo' (renamed with ALTER TYPE ... RENAME VALUE)",
        ),
    ];
    for (table, reason) in reasons {
        wait_state(&pipeline, table, TableState::Stalled, CONVERGE).await;
        let error = table_state(&pipeline, table).1.unwrap_or_default();
        assert!(error.starts_with(reason), "{table}: {error}");
        assert_eq!(pipeline.document_count(table).unwrap(), 1, "{table}");
    }
    assert_eq!(table_state(&pipeline, "deletes_v1").0, TableState::Running);

    // Deletes not published: the last running table stalls too.
    up.batch_execute("ALTER PUBLICATION evo_pub SET (publish = 'insert, update')")
        .await
        .unwrap();
    wait_state(&pipeline, "deletes_v1", TableState::Stalled, CONVERGE).await;
    let error = table_state(&pipeline, "deletes_v1").1.unwrap_or_default();
    assert!(
        error.starts_with(
            "publication evo_pub does not publish delete, truncate of public.deletes, so those changes never reach the stream"
        ),
        "{error}"
    );
    running.stop().await;

    // A new version over a filtered table is refused, naming the filter.
    up.batch_execute(
        "ALTER PUBLICATION evo_pub SET (publish = 'insert, update, delete, truncate')",
    )
    .await
    .unwrap();
    let refused = pipeline
        .create_table(&TableSpec {
            name: "filtered_v2".into(),
            source: source.clone(),
            schema: "public".into(),
            table: "filtered".into(),
            ..TableSpec::default()
        })
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("publishes only the rows of public.filtered WHERE (id > 10)"),
        "{refused}"
    );
    // `pipeline check` fails the table removed from the publication.
    let plan = evolve_pipeline::preflight::Plan::from_catalog(
        &pipeline.sources().unwrap(),
        &pipeline.tables().unwrap(),
        &[],
    );
    let report = evolve_pipeline::preflight::run(&config, &plan).await;
    let failed: Vec<String> = report
        .connections
        .iter()
        .flat_map(|c| &c.checks)
        .filter(|c| !c.ok)
        .map(|c| c.message.clone())
        .collect();
    assert!(
        failed
            .iter()
            .any(|m| m == "public.removed is not in publication evo_pub, so its changes do not reach the stream (its table stalls, since it missed them)"),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|m| m.contains("column list that leaves out v")),
        "{failed:?}"
    );
    // And the tables whose enums lost a value they pinned.
    for (column, table) in [
        ("m", "moods"),
        ("h", "hues"),
        ("s", "sizes"),
        ("p", "pitches"),
    ] {
        assert!(
            failed.iter().any(|m| m.contains(&format!(
                "of column \"{column}\" of upstream table \"public.{table}\""
            )) && m.ends_with(
                "(renamed with ALTER TYPE ... RENAME VALUE), which documents still show"
            )),
            "{table}: {failed:?}"
        );
    }
}
