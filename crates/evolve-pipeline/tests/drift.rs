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
    assert!(error.contains("column \"priority\""), "{error}");
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
