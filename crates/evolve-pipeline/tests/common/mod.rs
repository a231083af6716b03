//! Shared helpers: an upstream database on the shared cluster, a sink
//! database on a second cluster, a state directory, and checks that compare
//! the sink with the upstream server's own documents.

#![allow(dead_code)]

pub mod mysql;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use evolve_pipeline::{Config, Pipeline, TableSpec, TableState};
use evolve_test::{Cluster, TestDb};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// The sink cluster, separate from the upstream (shared) one.
pub fn sink_cluster() -> &'static Cluster {
    static SINK: OnceLock<Cluster> = OnceLock::new();
    SINK.get_or_init(|| Cluster::start().expect("start the sink cluster"))
}

pub struct Env {
    /// The source's name, unique in the cluster (slots are cluster-wide).
    pub source: String,
    pub up: TestDb,
    pub sink: TestDb,
    pub state: PathBuf,
    pub config: Config,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

pub async fn env(hint: &str) -> Env {
    let up = evolve_test::fresh_db(hint).await;
    let sink_cluster = tokio::task::spawn_blocking(sink_cluster).await.unwrap();
    let sink = sink_cluster.create_database(hint).await.unwrap();
    let state = std::env::temp_dir().join(format!(
        "evolve-pipeline-test-{}-{}",
        std::process::id(),
        up.name
    ));
    let _ = std::fs::remove_dir_all(&state);
    let config = Config::new(&state)
        .with_connection("up", up.url.clone())
        .with_connection("sink", sink.url.clone());
    Env {
        source: format!("src_{}", up.name),
        up,
        sink,
        state,
        config,
    }
}

pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Source `src`, table `<name>_v1` on `public.<name>`, interface
/// `<name>_json`, sink `<name>_sink` into `public.<name>_json`.
pub async fn create_all(pipeline: &Pipeline, source: &str, names: &[&str]) {
    if pipeline.sources().unwrap().is_empty() {
        pipeline
            .create_source(source, "up", "evolve_pub")
            .await
            .unwrap();
    }
    for name in names {
        pipeline
            .create_table(&TableSpec {
                name: format!("{name}_v1"),
                source: source.into(),
                schema: "public".into(),
                table: name.to_string(),
                ..TableSpec::default()
            })
            .await
            .unwrap();
        pipeline
            .create_interface(&format!("{name}_json"), &format!("{name}_v1"))
            .unwrap();
        pipeline
            .create_sink(
                &format!("{name}_sink"),
                &format!("{name}_json"),
                "sink",
                "public",
                &format!("{name}_json"),
            )
            .await
            .unwrap();
    }
}

/// A pipeline running in a task of this runtime.
pub struct Running {
    pub pipeline: Arc<Pipeline>,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Running {
    pub fn start(pipeline: Arc<Pipeline>) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let p = pipeline.clone();
        let handle = tokio::spawn(async move {
            evolve_pipeline::absorb::run_with(&p, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Running {
            pipeline,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    pub async fn stop(mut self) {
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

/// Waits until `condition` holds, looking every 50 ms; panics naming
/// `what` when `timeout` passes first.
pub async fn wait_until<F: AsyncFnMut() -> bool>(what: &str, timeout: Duration, mut condition: F) {
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The state and error of table `name`; panics when there is no such table.
pub fn table_state(pipeline: &Pipeline, name: &str) -> (TableState, Option<String>) {
    let t = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no table {name}"));
    (t.state, t.error)
}

/// Waits until table `name` is in `state`.
pub async fn wait_state(pipeline: &Pipeline, name: &str, state: TableState, timeout: Duration) {
    wait_until(
        &format!("table {name} to be {state:?}"),
        timeout,
        async || table_state(pipeline, name).0 == state,
    )
    .await;
}

/// Waits until every table of the pipeline is running (its snapshot is in).
pub async fn wait_all_running(pipeline: &Pipeline, timeout: Duration) {
    wait_until("every table to be running", timeout, async || {
        pipeline
            .tables()
            .unwrap()
            .iter()
            .all(|t| t.state == TableState::Running)
    })
    .await;
}

/// Rows of a sink table: `(key text, data text)`.
pub async fn sink_rows(sink: &Client, table: &str) -> Vec<(String, String)> {
    sink.query(
        &format!("SELECT key::text, data::text FROM public.{table} ORDER BY key::text"),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Writes into `table` counted by operation: (inserts, updates, deletes).
pub async fn audit_ops(sink: &Client, table: &str) -> (i64, i64, i64) {
    let row = sink
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE op = 'INSERT'), count(*) FILTER (WHERE op = 'UPDATE'), \
                        count(*) FILTER (WHERE op = 'DELETE') FROM public.{table}_audit"
            ),
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// How the sink compares with the upstream server's own documents of
/// `table` (keyed by `id`): (upstream rows, sink rows, rows equal as jsonb).
pub async fn compare(up: &Client, sink: &Client, table: &str, sink_table: &str) -> (i64, i64, i64) {
    let rows = sink_rows(sink, sink_table).await;
    let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let docs: Vec<String> = rows.iter().map(|r| r.1.clone()).collect();
    let row = up
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM public.{table}), \
                        (SELECT count(*) FROM public.{table} t \
                         JOIN unnest($1::text[], $2::text[]) AS s(k, d) \
                           ON jsonb_build_object('id', t.id) = s.k::jsonb \
                         WHERE coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) = s.d::jsonb)"
            ),
            &[&keys, &docs],
        )
        .await
        .unwrap();
    (row.get(0), rows.len() as i64, row.get(1))
}

/// Waits until the sink equals the upstream table (same count, every row
/// equal as jsonb); panics with the last comparison after `timeout`.
pub async fn wait_equal(
    up: &Client,
    sink: &Client,
    table: &str,
    sink_table: &str,
    timeout: Duration,
) {
    let start = Instant::now();
    let mut last = (0, 0, 0);
    while start.elapsed() < timeout {
        if sink_exists(sink, sink_table).await {
            last = compare(up, sink, table, sink_table).await;
            if last.0 == last.1 && last.1 == last.2 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "sink {sink_table} did not converge to upstream {table} in {timeout:?}: upstream {} rows, sink {} rows, {} equal",
        last.0, last.1, last.2
    );
}

pub async fn sink_exists(sink: &Client, table: &str) -> bool {
    sink.query_one(
        "SELECT to_regclass($1) IS NOT NULL",
        &[&format!("public.{table}")],
    )
    .await
    .unwrap()
    .get(0)
}

/// Counts every row write into `table` in `<table>_audit`.
pub async fn audit_sink(sink: &Client, table: &str) {
    sink.batch_execute(&format!(
        "CREATE TABLE public.{table}_audit (op text, key jsonb);
         CREATE FUNCTION public.{table}_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO public.{table}_audit VALUES (TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.{table}
           FOR EACH ROW EXECUTE FUNCTION public.{table}_audit_fn();"
    ))
    .await
    .unwrap();
}

pub async fn audit_count(sink: &Client, table: &str) -> i64 {
    sink.query_one(&format!("SELECT count(*) FROM public.{table}_audit"), &[])
        .await
        .unwrap()
        .get(0)
}

/// How the sink compares with the upstream server's own documents of
/// `table` (keyed by `id`) without column `left_out`, as a table version
/// that excludes it shows them: (upstream rows, sink rows, rows equal as
/// jsonb).
pub async fn compare_without(
    up: &Client,
    sink: &Client,
    table: &str,
    sink_table: &str,
    left_out: &str,
) -> (i64, i64, i64) {
    let rows = sink_rows(sink, sink_table).await;
    let keys: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let docs: Vec<String> = rows.iter().map(|r| r.1.clone()).collect();
    let row = up
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM public.{table}), \
                        (SELECT count(*) FROM public.{table} t \
                         JOIN unnest($1::text[], $2::text[]) AS s(k, d) \
                           ON jsonb_build_object('id', t.id) = s.k::jsonb \
                         WHERE coalesce(jsonb_strip_nulls(to_jsonb(t) - $3), '{{}}'::jsonb) = s.d::jsonb)"
            ),
            &[&keys, &docs, &left_out],
        )
        .await
        .unwrap();
    (row.get(0), rows.len() as i64, row.get(1))
}

/// Waits until the sink equals the upstream table without column
/// `left_out` (see [`compare_without`]).
pub async fn wait_equal_without(
    up: &Client,
    sink: &Client,
    table: &str,
    sink_table: &str,
    left_out: &str,
    timeout: Duration,
) {
    let start = Instant::now();
    let mut last = (0, 0, 0);
    while start.elapsed() < timeout {
        if sink_exists(sink, sink_table).await {
            last = compare_without(up, sink, table, sink_table, left_out).await;
            if last.0 == last.1 && last.1 == last.2 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "sink {sink_table} did not converge to upstream {table} without {left_out} in {timeout:?}: upstream {} rows, sink {} rows, {} equal",
        last.0, last.1, last.2
    );
}

/// The ids of the keys (`{"id": N}`) the state store keeps as differing
/// for replacement `replacement`; `None` while it keeps none for it (its
/// tables are not both hydrated and compared yet).
pub fn kept_differing_ids(
    state: &std::path::Path,
    replacement: &str,
) -> Option<std::collections::BTreeSet<i64>> {
    let db = rusqlite::Connection::open_with_flags(
        state.join("pipeline.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    let tracked: Option<i64> = db
        .query_row(
            "SELECT tracked_new FROM replacements WHERE name = ?1",
            [replacement],
            |r| r.get(0),
        )
        .unwrap();
    tracked?;
    let mut stmt = db
        .prepare("SELECT key FROM differing_keys WHERE replacement = ?1")
        .unwrap();
    let ids = stmt
        .query_map([replacement], |r| r.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(|k| key_id(&String::from_utf8(k.unwrap()).unwrap()))
        .collect();
    Some(ids)
}

/// The id of a key document `{"id": N}`.
pub fn key_id(key: &str) -> i64 {
    let key: serde_json::Value = serde_json::from_str(key).unwrap();
    key["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("key {key} has no id"))
}

/// The ids of the rows of upstream `table` that match `filter`.
pub async fn upstream_ids(
    up: &Client,
    table: &str,
    filter: &str,
) -> std::collections::BTreeSet<i64> {
    up.query(
        &format!("SELECT id::bigint FROM public.{table} WHERE {filter}"),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<_, i64>(0))
    .collect()
}

/// The operation and key id of every row write into the sink table
/// `table` since `<table>_audit` was last emptied, by id.
pub async fn audited_ids(sink: &Client, table: &str) -> Vec<(String, i64)> {
    let mut writes: Vec<(String, i64)> = sink
        .query(
            &format!("SELECT op, key::text FROM public.{table}_audit"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), key_id(r.get::<_, &str>(1))))
        .collect();
    writes.sort_by_key(|w| w.1);
    writes
}
