//! One test per defect a review found, each named after what broke: a
//! failed APPLY request, a DROP SOURCE whose slot cannot be dropped, a row
//! that cannot be encoded, the replacement's output check, an unknown
//! table state, verbs racing each other, a document that is not UTF-8, a
//! replayed old schema stalling a version made after a rename.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use evolve_pipeline::admin::{self, SqlResponse};
use evolve_pipeline::{Pipeline, PipelineError, TableSpec, TableState};
use tokio_postgres::Client;

const WAIT: Duration = Duration::from_secs(30);

fn spec(name: &str, source: &str, table: &str) -> TableSpec {
    TableSpec {
        name: name.into(),
        source: source.into(),
        schema: "public".into(),
        table: table.into(),
        ..TableSpec::default()
    }
}

/// The state store's own SQLite file, as another process would open it.
fn state_db(env: &Env) -> rusqlite::Connection {
    let db = rusqlite::Connection::open(env.state.join("pipeline.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    db
}

/// The SQLSTATE a request failed with, `None` when it succeeded.
fn code(response: &SqlResponse) -> Option<&str> {
    response.error.as_ref().map(|e| e.code.as_str())
}

async fn slots(up: &Client, slot: &str) -> i64 {
    up.query_one(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .get(0)
}

/// Defect 1: APPLY marked the replacement as applying, then failed to
/// reach upstream and left the mark: absorb skipped it and DROP refused it
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_cannot_reach_upstream_leaves_the_replacement_droppable() {
    let env = env("reg_apply").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, v text);
         INSERT INTO orders SELECT g, 'v' || g FROM generate_series(1, 5) g;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    for version in ["orders_v1", "orders_v2"] {
        pipeline
            .create_table(&spec(version, &env.source, "orders"))
            .await
            .unwrap();
    }
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    let running = Running::start(pipeline.clone());
    wait_state(&pipeline, "orders_v2", TableState::Running, WAIT).await;
    running.stop().await;
    drop(pipeline);

    // The same state, with the upstream unreachable.
    let unreachable = env
        .config
        .clone()
        .with_connection("up", "postgres://evolve@127.0.0.1:1/gone?connect_timeout=2");
    let pipeline = Pipeline::open(unreachable).unwrap();
    let e = pipeline
        .apply_replacement("orders_json", "orders_json_v2", Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(e, PipelineError::Connect { .. }), "{e}");
    let replacements = pipeline.replacements().unwrap();
    assert_eq!(replacements.len(), 1);
    assert!(!replacements[0].applying, "{replacements:?}");
    let recorded = replacements[0].error.clone().unwrap_or_default();
    assert!(recorded.contains("could not connect"), "{recorded}");
    let interface = pipeline.interfaces().unwrap();
    assert_eq!(interface[0].table, "orders_v1", "nothing was swapped");

    pipeline.drop_interface("orders_json_v2").unwrap();
    assert_eq!(pipeline.replacements().unwrap().len(), 0);
}

/// Defect 2: DROP SOURCE forgot the source before dropping its slot; when
/// the slot could not be dropped it stayed upstream holding WAL, and
/// nothing remembered it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_that_cannot_be_dropped_keeps_its_source_listed() {
    let env = env("reg_dropsrc").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    let source = pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    assert_eq!(slots(&up, &source.slot).await, 1);

    // Another session streams from the slot: it cannot be dropped.
    let config = evolve_pipeline::upstream::replication_config(
        &env.source,
        env.config.connection("up").unwrap(),
        &source.slot,
        &source.publication,
    )
    .unwrap();
    let mut holder = pgwire_replication::ReplicationClient::connect(config)
        .await
        .unwrap();
    wait_until("the slot to be active", WAIT, async || {
        up.query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active",
            &[&source.slot],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
            == 1
    })
    .await;

    let e = pipeline.drop_source(&env.source).await.unwrap_err();
    assert!(
        e.primary().starts_with(&format!(
            "source \"{}\" is not dropped: its replication slot \"{}\" could not be dropped upstream",
            env.source, source.slot
        )),
        "{e}"
    );
    assert!(e.detail().unwrap().contains("is active"), "{e}");
    assert!(e.hint().unwrap().contains("DROP SOURCE"), "{e}");
    let sources = pipeline.sources().unwrap();
    assert_eq!(sources.len(), 1, "the source is still listed");
    assert!(sources[0].dropping);
    assert!(
        sources[0]
            .drop_error
            .as_deref()
            .is_some_and(|e| e.contains("is active")),
        "{sources:?}"
    );
    assert_eq!(slots(&up, &source.slot).await, 1);
    let report = admin::status(&pipeline).await.unwrap();
    let shown = report.objects.iter().find(|o| o.kind == "source").unwrap();
    assert_eq!(shown.state, "dropping");
    assert!(shown.error.as_deref().unwrap().contains("is active"));
    let refused = pipeline
        .create_table(&spec("orders_v1", &env.source, "orders"))
        .await
        .unwrap_err();
    assert_eq!(
        refused.primary(),
        format!("source \"{}\" is being dropped", env.source)
    );

    // Once the slot is free, DROP SOURCE again finishes the job.
    let _ = holder.shutdown().await;
    pipeline.drop_source(&env.source).await.unwrap();
    assert_eq!(pipeline.sources().unwrap().len(), 0);
    assert_eq!(slots(&up, &source.slot).await, 0);
}

/// Defect 3: a row whose value the encoder refuses failed the whole
/// source, retried forever, instead of stalling its table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_encoded_stalls_only_its_table() {
    let env = env("reg_encode").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE bad (id int PRIMARY KEY, j json);
         CREATE TABLE good (id int PRIMARY KEY, v text);
         INSERT INTO bad VALUES (1, '[1]');
         INSERT INTO good VALUES (1, 'a');",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["bad", "good"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "bad", "bad_json", WAIT).await;
    wait_equal(&up, &sink, "good", "good_json", WAIT).await;
    audit_sink(&sink, "bad_json").await;
    audit_sink(&sink, "good_json").await;

    // json keeps \u0000, which no document can hold (to_jsonb refuses it
    // too). The same transaction changes the other table.
    up.batch_execute(
        r#"BEGIN;
           UPDATE bad SET j = '[2]' WHERE id = 1;
           INSERT INTO bad VALUES (2, '{"a": "\u0000"}');
           INSERT INTO good VALUES (2, 'b');
           COMMIT;"#,
    )
    .await
    .unwrap();
    wait_state(&pipeline, "bad_v1", TableState::Stalled, WAIT).await;
    let (_, error) = table_state(&pipeline, "bad_v1");
    let error = error.unwrap();
    assert!(
        error
            .starts_with("could not build the document of a row of table \"bad_v1\": column \"j\""),
        "{error}"
    );
    up.batch_execute("INSERT INTO good VALUES (3, 'c'); UPDATE bad SET j = '[3]' WHERE id = 1")
        .await
        .unwrap();
    wait_equal(&up, &sink, "good", "good_json", WAIT).await;
    assert_eq!(audit_count(&sink, "good_json").await, 2);
    let source = pipeline
        .status()
        .into_iter()
        .find(|s| s.name == env.source)
        .unwrap();
    assert_eq!(source.state, "running", "{source:?}");
    // Nothing of the failed transaction or after it reached bad's
    // documents or its sink.
    assert_eq!(pipeline.document_count("bad_v1").unwrap(), 1);
    assert_eq!(
        pipeline.documents("bad_json").unwrap()[0].1,
        br#"{"j":[1],"id":1}"#
    );
    assert_eq!(audit_count(&sink, "bad_json").await, 0);
    running.stop().await;
}

/// A row the encoder refuses found by the snapshot failed the copy, which
/// was retried forever, each time reading the whole table upstream again.
/// The table stalls instead, keeps no partial copy, and the other tables
/// go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_encoded_in_the_snapshot_stalls_its_table_once() {
    let env = env("reg_encode_copy").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        r#"CREATE TABLE bad (id int PRIMARY KEY, j json);
           CREATE TABLE good (id int PRIMARY KEY, v text);
           INSERT INTO bad SELECT g, '[1]' FROM generate_series(1, 100) g;
           INSERT INTO bad VALUES (101, '{"a": "\u0000"}');
           INSERT INTO good VALUES (1, 'a');"#,
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["bad", "good"]).await;
    let running = Running::start(pipeline.clone());
    wait_state(&pipeline, "bad_v1", TableState::Stalled, WAIT).await;
    let (_, error) = table_state(&pipeline, "bad_v1");
    let error = error.unwrap();
    assert!(
        error
            .starts_with("could not build the document of a row of table \"bad_v1\": column \"j\""),
        "{error}"
    );
    // It stays stalled, checked for a fixed 3 s: a retry would start by
    // setting the table snapshotting again.
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(table_state(&pipeline, "bad_v1").0, TableState::Stalled);
    }
    assert_eq!(pipeline.document_count("bad_v1").unwrap(), 0);
    wait_equal(&up, &sink, "good", "good_json", WAIT).await;
    up.batch_execute("INSERT INTO good VALUES (2, 'b')")
        .await
        .unwrap();
    wait_equal(&up, &sink, "good", "good_json", WAIT).await;
    let temporary: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE temporary",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(temporary, 0, "no snapshot slot is left behind");
    running.stop().await;
}

/// Defect 4: CREATE REPLACEMENT compared the interface form's output with
/// itself, so it could never refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_whose_output_differs_from_its_targets_is_refused() {
    let env = env("reg_output").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    for version in ["orders_v1", "orders_v2"] {
        pipeline
            .create_table(&spec(version, &env.source, "orders"))
            .await
            .unwrap();
    }
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    // The language has one form today; a view recorded with another
    // output (json, not jsonb) stands for the forms to come.
    let db = state_db(&env);
    let set_output = |output: &str| {
        db.execute(
            "UPDATE interfaces SET output = ?1 WHERE name = 'orders_json'",
            [output],
        )
        .unwrap();
    };
    set_output(r#"[{"name":"data","type":"json","not_null":true}]"#);
    let e = pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap_err();
    assert!(
        matches!(
            e,
            PipelineError::Refused {
                sqlstate: "42804",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.primary(), "replacement schema differs from target schema");
    assert_eq!(
        e.detail().unwrap(),
        "Column \"data\" has type jsonb in the replacement and json in the target."
    );
    assert_eq!(pipeline.replacements().unwrap().len(), 0);

    set_output(r#"[{"name":"data","type":"jsonb","not_null":true}]"#);
    pipeline
        .create_replacement("orders_json_v2", "orders_json", "orders_v2")
        .unwrap();
    assert_eq!(pipeline.replacements().unwrap().len(), 1);
}

/// A pipeline whose table `orders_v1` has copied three upstream rows, and
/// is stopped.
async fn three_orders_copied(env: &Env) -> (Arc<Pipeline>, evolve_pipeline::TableInfo) {
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, v text);
         INSERT INTO orders SELECT g, 'v' || g FROM generate_series(1, 3) g;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    let table = pipeline
        .create_table(&spec("orders_v1", &env.source, "orders"))
        .await
        .unwrap();
    let running = Running::start(pipeline.clone());
    wait_state(&pipeline, "orders_v1", TableState::Running, WAIT).await;
    running.stop().await;
    assert_eq!(pipeline.document_count("orders_v1").unwrap(), 3);
    (pipeline, table)
}

/// The run refuses at once with an error containing `needle`, and the
/// table's three documents are still in the store.
async fn stops_and_keeps_the_documents(
    pipeline: &Pipeline,
    db: &rusqlite::Connection,
    table: i64,
    needle: &str,
) {
    let run = tokio::time::timeout(WAIT, pipeline.run(std::future::pending())).await;
    let e = run.expect("the run stops at once").unwrap_err();
    assert!(e.primary().contains(needle), "{e}");
    let rows: i64 = db
        .query_row("SELECT count(*) FROM rows WHERE tbl = ?1", [table], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(rows, 3, "the documents are kept");
}

/// A pinned column list the store cannot read was taken as no columns at
/// all: the table would have gone on ingesting empty documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_column_list_is_an_error_and_keeps_the_documents() {
    let env = env("reg_columns").await;
    let (pipeline, table) = three_orders_copied(&env).await;
    let db = state_db(&env);
    db.execute(
        r#"UPDATE tables SET columns = '[{"name":"id"}]' WHERE name = 'orders_v1'"#,
        [],
    )
    .unwrap();
    let e = pipeline.tables().unwrap_err();
    assert!(
        e.primary().starts_with(
            "embedded store: read table \"orders_v1\": its pinned column list is not one this release can read"
        ),
        "{e}"
    );
    stops_and_keeps_the_documents(&pipeline, &db, table.id, "pinned column list").await;
}

/// A sink's kind is data in the catalog: an older store's sinks are
/// PostgreSQL sinks, and a kind this release does not know is an error
/// naming the sink, never a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_kind_the_store_does_not_know_is_an_error() {
    let env = env("reg_sink_kind").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let sinks = pipeline.sinks().unwrap();
    assert_eq!(sinks.len(), 1);
    assert_eq!(sinks[0].kind, evolve_pipeline::SinkKind::Postgres);
    let db = state_db(&env);
    let stored: String = db
        .query_row("SELECT kind FROM sinks", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, "postgres");
    db.execute("UPDATE sinks SET kind = 'bigquery'", [])
        .unwrap();
    let e = pipeline.sinks().unwrap_err();
    assert!(
        e.primary().starts_with(
            "embedded store: read sink \"orders_sink\": its kind \"bigquery\" is not one this release knows"
        ),
        "{e}"
    );
}

/// Defect 5: a table state the store did not know was read as "pending",
/// and the copy that followed began by deleting the table's documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_table_state_is_an_error_and_keeps_the_documents() {
    let env = env("reg_state").await;
    let (pipeline, table) = three_orders_copied(&env).await;
    let db = state_db(&env);
    db.execute(
        "UPDATE tables SET state = 'archived' WHERE name = 'orders_v1'",
        [],
    )
    .unwrap();
    let e = pipeline.tables().unwrap_err();
    assert!(
        e.primary()
            .starts_with("embedded store: read table \"orders_v1\": its state \"archived\" is not one this release knows"),
        "{e}"
    );
    stops_and_keeps_the_documents(&pipeline, &db, table.id, "\"archived\"").await;
}

/// Defect 6: two callers running the same verb at once (the absorb
/// controller and an admin request) both passed the checks, and the later
/// insert failed with an internal error (XX000) instead of 42710.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_get_already_exists() {
    let env = env("reg_race").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    let src = &env.source;
    let twice = async |sql: String| {
        let (a, b) = tokio::join!(
            admin::execute(&pipeline, &sql),
            admin::execute(&pipeline, &sql)
        );
        let mut codes = [code(&a), code(&b)];
        codes.sort();
        assert_eq!(codes, [None, Some("42710")], "{sql}: {a:?} {b:?}");
    };
    twice(format!(
        "CREATE SOURCE {src} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub')"
    ))
    .await;
    twice(format!(
        "CREATE TABLE orders_v1 FROM SOURCE {src} (REFERENCE public.orders)"
    ))
    .await;
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    twice(
        "CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink \
         (TABLE 'public.orders_json')"
            .into(),
    )
    .await;
    assert_eq!(pipeline.sources().unwrap().len(), 1);
    assert_eq!(pipeline.tables().unwrap().len(), 1);
    assert_eq!(pipeline.sinks().unwrap().len(), 1);
}

/// Defect 7: the sink wrote a stored document that is not UTF-8 as JSON
/// `null`; it must stall with the error and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_that_is_not_utf8_stalls_the_sink_and_writes_nothing() {
    let env = env("reg_utf8").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, v text);
         INSERT INTO orders SELECT g, 'v' || g FROM generate_series(1, 3) g;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    let table = pipeline
        .create_table(&spec("orders_v1", &env.source, "orders"))
        .await
        .unwrap();
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    let running = Running::start(pipeline.clone());
    wait_state(&pipeline, "orders_v1", TableState::Running, WAIT).await;
    running.stop().await;

    let db = state_db(&env);
    let damaged = db
        .execute(
            "UPDATE rows SET doc = x'7b22763a22ff7d' \
             WHERE tbl = ?1 AND key = (SELECT min(key) FROM rows WHERE tbl = ?1)",
            [table.id],
        )
        .unwrap();
    assert_eq!(damaged, 1);
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
    let running = Running::start(pipeline.clone());
    wait_until("the sink to retry", WAIT, async || {
        pipeline.status().iter().any(|s| {
            s.name == "orders_sink"
                && s.state == "retrying"
                && s.error.as_deref().is_some_and(|e| e.contains("not UTF-8"))
        })
    })
    .await;
    // It retries and fails again; nothing is written meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written: i64 = sink
        .query_one("SELECT count(*) FROM public.orders_json", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, 0);
    let progress: i64 = sink
        .query_one("SELECT count(*) FROM public.evolve_sink_progress", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(progress, 0);
    running.stop().await;
}

/// Defect: a catalog change restarts the source's stream from the slot's
/// confirmed position, and while a sink lagged that position was before an
/// upstream `RENAME COLUMN`: the replayed old schema stalled a table
/// version created after the rename (pinned to the new name) although
/// none of the replayed rows applied to it. `migrate apply --pipeline`'s
/// rename (exclude, rename, include) met it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_created_after_a_rename_survives_a_replay_of_the_old_schema() {
    let env = env("reg_replay_schema").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, a text);
         INSERT INTO orders SELECT g, 'a' || g FROM generate_series(1, 5) g;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, WAIT).await;
    let sink = connect(&env.sink.url).await;
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    // The sink cannot write (each attempt fails and is retried): the
    // slot's confirmed position stays before the changes below.
    sink.batch_execute(
        "CREATE TABLE public.blocked (since timestamptz);
         INSERT INTO public.blocked VALUES (now());
         CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF EXISTS (SELECT 1 FROM public.blocked) THEN
             RAISE EXCEPTION 'the test holds the sink';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER refuse BEFORE INSERT OR UPDATE OR DELETE ON public.orders_json
           FOR EACH ROW EXECUTE FUNCTION public.refuse();",
    )
    .await
    .unwrap();
    up.batch_execute("UPDATE orders SET a = 'y' WHERE id = 2")
        .await
        .unwrap();
    up.batch_execute("ALTER TABLE orders RENAME COLUMN a TO b")
        .await
        .unwrap();
    up.batch_execute("UPDATE orders SET b = 'z' WHERE id = 3")
        .await
        .unwrap();
    wait_state(&pipeline, "orders_v1", TableState::Stalled, WAIT).await;
    pipeline
        .create_table(&spec("orders_v2", &env.source, "orders"))
        .await
        .unwrap();
    wait_until("orders_v2 to be hydrated", WAIT, async || {
        table_state(&pipeline, "orders_v2").0.is_hydrated()
    })
    .await;
    assert_eq!(
        table_state(&pipeline, "orders_v2"),
        (TableState::Running, None)
    );
    // Another catalog change: the stream restarts and replays the old
    // schema (with `a`) from before the rename.
    pipeline
        .create_interface("orders_json2", "orders_v2")
        .unwrap();
    up.batch_execute("UPDATE orders SET b = 'w' WHERE id = 4")
        .await
        .unwrap();
    wait_until("orders_v2 to hold the last update", WAIT, async || {
        pipeline
            .documents("orders_json2")
            .unwrap()
            .iter()
            .any(|(_, d)| std::str::from_utf8(d).is_ok_and(|d| d.contains("\"b\":\"w\"")))
    })
    .await;
    assert_eq!(
        table_state(&pipeline, "orders_v2"),
        (TableState::Running, None)
    );
    sink.batch_execute("DELETE FROM public.blocked")
        .await
        .unwrap();
    running.stop().await;
}
