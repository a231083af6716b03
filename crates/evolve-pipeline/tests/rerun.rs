//! Statements a user re-runs and waits on, through the admin API's
//! `execute` on real clusters: `CREATE ... IF NOT EXISTS` of an object
//! that exists changes nothing, whatever its definition says, and `APPLY
//! REPLACEMENT ... WITH (WAIT = ...)` that runs out of time applies
//! nothing.

mod common;

use std::time::{Duration, Instant};

use common::*;
use evolve_pipeline::Pipeline;
use evolve_pipeline::admin::{SqlResponse, execute};

fn notices(response: &SqlResponse) -> Vec<Option<String>> {
    response.results.iter().map(|r| r.notice.clone()).collect()
}

fn setup(source: &str) -> String {
    format!(
        "CREATE SOURCE IF NOT EXISTS {source} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');
         CREATE TABLE IF NOT EXISTS orders_v1 FROM SOURCE {source} (REFERENCE public.orders);
         CREATE MATERIALIZED VIEW IF NOT EXISTS orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;
         CREATE SINK IF NOT EXISTS orders_sink FROM orders_json
           INTO POSTGRES CONNECTION sink (TABLE 'public.orders_json');"
    )
}

/// The same names with other definitions: each is skipped with
/// PostgreSQL's notice, and nothing of the catalog, upstream or the sink
/// changes. Without `IF NOT EXISTS` the same statements are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_not_exists_leaves_an_existing_object_as_it_is() {
    let env = env("rerun_if_not_exists").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric);
         INSERT INTO orders VALUES (1, 'ada', 10), (2, 'bob', NULL);",
    )
    .await
    .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    let source = env.source.clone();

    let first = execute(&pipeline, &setup(&source)).await;
    assert_eq!(first.error, None);
    assert_eq!(notices(&first), vec![None; 4]);

    // The setup again: four notices, nothing else.
    let again = execute(&pipeline, &setup(&source)).await;
    assert_eq!(again.error, None);
    assert_eq!(
        notices(&again),
        vec![
            Some(format!("source \"{source}\" already exists, skipping")),
            Some("table \"orders_v1\" already exists, skipping".into()),
            Some("materialized view \"orders_json\" already exists, skipping".into()),
            Some("sink \"orders_sink\" already exists, skipping".into()),
        ]
    );
    let statuses: Vec<&str> = again.results.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "CREATE SOURCE",
            "CREATE TABLE",
            "CREATE MATERIALIZED VIEW",
            "CREATE SINK"
        ]
    );

    // Other definitions under the same names.
    let other = format!(
        "CREATE SOURCE IF NOT EXISTS {source} FROM POSTGRES CONNECTION up (PUBLICATION 'other_pub');
         CREATE TABLE IF NOT EXISTS orders_v1 FROM SOURCE {source} (REFERENCE public.orders)
           WITH (EXCLUDE COLUMNS (total));
         CREATE MATERIALIZED VIEW IF NOT EXISTS orders_json WITH (ABSORB = 'auto') AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;
         CREATE SINK IF NOT EXISTS orders_sink FROM orders_json
           INTO POSTGRES CONNECTION sink (TABLE 'public.elsewhere');"
    );
    let response = execute(&pipeline, &other).await;
    assert_eq!(response.error, None);
    assert!(
        notices(&response).iter().all(|n| n.is_some()),
        "{response:?}"
    );
    let sources = pipeline.sources().unwrap();
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].publication, "evolve_pub");
    let tables = pipeline.tables().unwrap();
    assert_eq!(tables.len(), 1);
    assert!(tables[0].columns.iter().all(|c| !c.excluded), "{tables:?}");
    let interfaces = pipeline.interfaces().unwrap();
    assert_eq!(interfaces.len(), 1);
    assert!(!interfaces[0].absorb_auto);
    let sinks = pipeline.sinks().unwrap();
    assert_eq!(sinks.len(), 1);
    assert_eq!(sinks[0].target_table, "orders_json");
    let publications: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_publication WHERE pubname = 'other_pub'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(publications, 0);
    let sink = connect(&env.sink.url).await;
    assert!(!sink_exists(&sink, "elsewhere").await);

    // Without IF NOT EXISTS: refused, as before.
    let response = execute(
        &pipeline,
        &format!("CREATE SOURCE {source} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub')"),
    )
    .await;
    let error = response.error.expect("refused");
    assert_eq!(error.code, "42710");
    assert_eq!(error.message, format!("source \"{source}\" already exists"));

    // IF NOT EXISTS covers the name only: a new table of a missing source
    // is still an error.
    let response = execute(
        &pipeline,
        "CREATE TABLE IF NOT EXISTS orders_v9 FROM SOURCE nope (REFERENCE public.orders)",
    )
    .await;
    assert_eq!(
        response.error.expect("refused").message,
        "source \"nope\" does not exist"
    );

    // A pending replacement's name is taken for materialized views too,
    // and its own statement re-runs.
    let replacement = format!(
        "CREATE TABLE IF NOT EXISTS orders_v2 FROM SOURCE {source} (REFERENCE public.orders);
         CREATE REPLACEMENT MATERIALIZED VIEW IF NOT EXISTS orders_json_v2 FOR orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v2 t;"
    );
    let response = execute(&pipeline, &replacement).await;
    assert_eq!(response.error, None);
    assert_eq!(notices(&response), vec![None, None]);
    let response = execute(&pipeline, &replacement).await;
    assert_eq!(response.error, None);
    assert_eq!(
        notices(&response),
        vec![
            Some("table \"orders_v2\" already exists, skipping".into()),
            Some("materialized view \"orders_json_v2\" already exists, skipping".into()),
        ]
    );
    let response = execute(
        &pipeline,
        "CREATE MATERIALIZED VIEW IF NOT EXISTS orders_json_v2 AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
         CREATE MATERIALIZED VIEW orders_json_v2 AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;",
    )
    .await;
    assert_eq!(
        notices(&response),
        vec![Some(
            "materialized view \"orders_json_v2\" already exists, skipping".into()
        )]
    );
    assert_eq!(response.error.expect("refused").code, "42710");
    assert_eq!(pipeline.interfaces().unwrap().len(), 1);
    assert_eq!(pipeline.replacements().unwrap().len(), 1);
    assert_eq!(pipeline.tables().unwrap().len(), 2);
}

/// `WITH (WAIT = ...)` on a replacement that does not get hydrated in time
/// (the pipeline is not running, so its table stays pending): the error
/// names the replacement, its table's state and rows copied, and the way
/// out, after about the time asked for; nothing is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_with_wait_times_out_and_applies_nothing() {
    let env = env("rerun_wait_timeout").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text);
         INSERT INTO orders VALUES (1, 'ada');",
    )
    .await
    .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    let response = execute(&pipeline, &setup(&env.source)).await;
    assert_eq!(response.error, None);
    let response = execute(
        &pipeline,
        &format!(
            "CREATE TABLE orders_v2 FROM SOURCE {} (REFERENCE public.orders);
             CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v2 t;",
            env.source
        ),
    )
    .await;
    assert_eq!(response.error, None);

    let start = Instant::now();
    let response = execute(
        &pipeline,
        "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2 WITH (WAIT = '700ms')",
    )
    .await;
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(700), "{waited:?}");
    let error = response.error.expect("timed out");
    assert_eq!(error.code, "57014");
    assert_eq!(
        error.message,
        "replacement \"orders_json_v2\" is not hydrated after waiting 700ms"
    );
    assert_eq!(
        error.detail.as_deref(),
        Some("Its table \"orders_v2\" is pending (0 rows copied so far). Nothing was applied.")
    );
    assert_eq!(
        error.hint.as_deref(),
        Some(
            "Wait longer (ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2 \
             WITH (WAIT = '10min')), or apply it once `evolve status` shows it hydrated."
        )
    );
    let interface = pipeline.interfaces().unwrap();
    assert_eq!(interface[0].table, "orders_v1");
    let replacements = pipeline.replacements().unwrap();
    assert_eq!(replacements.len(), 1);
    assert!(!replacements[0].applying);

    // Without WAIT: refused at once, and the hint shows WAIT.
    let response = execute(
        &pipeline,
        "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2",
    )
    .await;
    let error = response.error.expect("refused");
    assert_eq!(error.code, "55000");
    assert_eq!(
        error.message,
        "replacement \"orders_json_v2\" is not hydrated"
    );
    assert!(
        error
            .hint
            .as_deref()
            .unwrap()
            .contains("WITH (WAIT = '60s')"),
        "{error:?}"
    );
    // WAIT on the wrong target is refused before any waiting.
    let start = Instant::now();
    let response = execute(
        &pipeline,
        "ALTER MATERIALIZED VIEW orders_v1 APPLY REPLACEMENT orders_json_v2 WITH (WAIT = '60s')",
    )
    .await;
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(response.error.expect("refused").code, "42704");
}
