//! GTID positions of the MySQL source against real MariaDB servers: after
//! a failover to a GTID replica (other binlog files and offsets, the
//! connection's url changed in the configuration between two runs) the
//! source resumes there with nothing lost and nothing applied twice; a
//! source of a store written before GTID positions (a binlog file and
//! offset, no GTID state) moves to GTID positions where it stood.
//! (`tests/mysql_source.rs` resumes by GTID after SIGKILL and SIGTERM and
//! stalls on a purged GTID.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::mysql::*;
use common::*;
use evolve_pipeline::source::mysql::{is_gtid_position, mariadb_position};
use evolve_pipeline::store::Store;
use evolve_pipeline::{Config, Pipeline, TableSpec};
use evolve_test::{MariaDb, MariaDbOptions};
use mysql_async::prelude::Queryable;
use tokio_postgres::Client;

/// Where each test's state directory goes.
const STATE: &str = "evolve-mysql-gtid-test";

/// Transactions `from..=to` of the workload: transaction `i` inserts row
/// `i`, updates row `i - 1`, and every tenth deletes row `i - 2`.
async fn write(my: &mut mysql_async::Conn, from: i32, to: i32) {
    for i in from..=to {
        let delete = if i % 10 == 0 {
            format!("DELETE FROM k WHERE id = {};", i - 2)
        } else {
            String::new()
        };
        my.query_drop(format!(
            "START TRANSACTION; INSERT INTO k VALUES ({i}, 0, REPEAT('p', 20)); \
             UPDATE k SET n = n + 1 WHERE id = {prev}; {delete} COMMIT",
            prev = i - 1
        ))
        .await
        .unwrap();
    }
}

/// The changes transactions `1..=n` of [`write`] make: inserts, updates,
/// deletes.
fn workload(n: i32) -> (i64, i64, i64) {
    let deletes = (1..=n).filter(|i| i % 10 == 0 && *i >= 3).count() as i64;
    (i64::from(n), i64::from(n) - 1, deletes)
}

/// Copies upstream table `k` (`id`, `n`, `pad`) into `public.expected_k`
/// of the sink's database, whose documents `compare` checks the sink
/// against.
async fn expect(my: &mut mysql_async::Conn, sink: &Client, table: &str) {
    let rows: Vec<(i32, i32, String)> = my
        .query(format!("SELECT id, n, pad FROM {table}"))
        .await
        .unwrap();
    let (ids, ns, pads): (Vec<i32>, Vec<i32>, Vec<String>) =
        rows.into_iter()
            .fold((vec![], vec![], vec![]), |mut acc, r| {
                acc.0.push(r.0);
                acc.1.push(r.1);
                acc.2.push(r.2);
                acc
            });
    sink.batch_execute(
        "CREATE TABLE IF NOT EXISTS public.expected_k (id int, n int, pad text); \
         TRUNCATE public.expected_k",
    )
    .await
    .unwrap();
    sink.execute(
        "INSERT INTO public.expected_k SELECT * FROM unnest($1::int[], $2::int[], $3::text[])",
        &[&ids, &ns, &pads],
    )
    .await
    .unwrap();
}

/// Counts the sink's writes into `public.<table>`: each insert, update
/// (and whether it left the document as it was: a transaction applied
/// twice) and delete.
async fn audit(sink: &Client, table: &str) {
    sink.batch_execute(&format!(
        "CREATE TABLE public.{table}_audit (op text, key jsonb, same bool);
         CREATE FUNCTION public.{table}_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF TG_OP = 'DELETE' THEN
             INSERT INTO public.{table}_audit VALUES (TG_OP, OLD.key, false);
           ELSIF TG_OP = 'UPDATE' THEN
             INSERT INTO public.{table}_audit VALUES (TG_OP, NEW.key, OLD.data = NEW.data);
           ELSE
             INSERT INTO public.{table}_audit VALUES (TG_OP, NEW.key, false);
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.{table}
           FOR EACH ROW EXECUTE FUNCTION public.{table}_audit_fn();"
    ))
    .await
    .unwrap();
}

/// `(inserts, updates, deletes, updates that changed nothing)` of
/// [`audit`].
async fn audited(sink: &Client, table: &str) -> (i64, i64, i64, i64) {
    let row = sink
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE op = 'INSERT'), count(*) FILTER (WHERE op = 'UPDATE'), \
                        count(*) FILTER (WHERE op = 'DELETE'), count(*) FILTER (WHERE same) \
                 FROM public.{table}_audit"
            ),
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// Waits until sink `sink_name` has loaded (its progress row exists).
async fn wait_loaded(sink: &Client, sink_name: &str) {
    wait_until(
        &format!("the initial load ({sink_name}'s progress row)"),
        Duration::from_secs(60),
        async || {
            sink.query_one(
                "SELECT to_regclass('public.evolve_sink_progress') IS NOT NULL \
                 AND EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = $1)",
                &[&sink_name],
            )
            .await
            .unwrap()
            .get(0)
        },
    )
    .await;
}

/// The source's stored position and GTID state.
fn stored(state: &std::path::Path, source: &str) -> (evolve_pipeline::Position, String) {
    let store = Store::open(state).unwrap();
    (
        store.applied_lsn(source).unwrap(),
        store.resume_state(source).unwrap().unwrap(),
    )
}

/// Runs the pipeline of `config` until sink `k_json` equals upstream
/// table `k` of `my`; returns the source's stored position and GTID state.
async fn run_until_equal(
    config: Config,
    my: &mut mysql_async::Conn,
    sink: &Client,
    state: &std::path::Path,
) -> (evolve_pipeline::Position, String) {
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    let running = Running::start(pipeline.clone());
    expect(my, sink, "k").await;
    wait_equal(sink, sink, "expected_k", "k_json", Duration::from_secs(60)).await;
    running.stop().await;
    drop(pipeline);
    stored(state, "fo")
}

/// Waits until `replica` has every transaction `primary` has.
fn caught_up(primary: &MariaDb, replica: &MariaDb) {
    let last = primary.client_sql("SELECT @@gtid_binlog_pos").unwrap();
    let waited = replica
        .client_sql(&format!("SELECT MASTER_GTID_WAIT('{}', 60)", last.trim()))
        .unwrap();
    assert_eq!(waited.trim(), "0", "the replica did not reach {last}");
}

/// The primary's transactions reach a GTID replica, whose binlog has them
/// at other files and offsets. The pipeline reads the primary; pointed at
/// the replica while the replica lags behind what it applied, the source
/// stalls (the replica refuses its GTID state) rather than skip anything,
/// and resumes there once the replica has caught up. Then the primary
/// takes writes while the pipeline is down (the replica gets them) and
/// goes away, and the replica, promoted, takes writes of its own: the
/// pipeline, its connection naming the replica, resumes after the GTID
/// state it stored. Every change reaches the sink exactly once (a trigger
/// counts them), the documents equal the replica's rows, and the position
/// is the replica's GTID state's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_a_gtid_replica_the_source_resumes_there_exactly_once() {
    let (primary, replica) = tokio::task::spawn_blocking(|| {
        let primary = MariaDb::start().unwrap();
        // Its own server_id; log_slave_updates puts the primary's
        // transactions, with their GTIDs, into its binlog.
        let replica = MariaDb::start_with(MariaDbOptions {
            settings: vec![
                ("server_id".into(), "2".into()),
                ("log_slave_updates".into(), "ON".into()),
            ],
        })
        .unwrap();
        (primary, replica)
    })
    .await
    .unwrap();
    // Both servers were bootstrapped alike (the `evolve` user): the
    // replica starts from the primary's position now, with an empty
    // binlog of its own.
    let at = primary.client_sql("SELECT @@gtid_binlog_pos").unwrap();
    replica
        .client_sql(&format!(
            "RESET MASTER; SET GLOBAL gtid_slave_pos = '{}'; \
             CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
               MASTER_USER = 'evolve', MASTER_PASSWORD = 'evolve', MASTER_USE_GTID = slave_pos; \
             START SLAVE",
            at.trim(),
            primary.port()
        ))
        .unwrap();
    let db = primary.create_database("failover").unwrap();
    let replica_url = replica.url(&db.name);
    let mut p = my_conn(&db.url).await;
    p.query_drop("CREATE TABLE k (id int PRIMARY KEY, n int NOT NULL, pad varchar(40))")
        .await
        .unwrap();
    let sink_db = tokio::task::spawn_blocking(sink_cluster)
        .await
        .unwrap()
        .create_database("mysql_failover")
        .await
        .unwrap();
    let sink = connect(&sink_db.url).await;
    let state = std::env::temp_dir().join(format!("{STATE}-{}-failover", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = |url: &str| {
        Config::new(&state)
            .with_connection("my", url.to_string())
            .with_connection("sink", sink_db.url.clone())
    };

    // The pipeline on the primary.
    let pipeline = Arc::new(Pipeline::open(config(&db.url)).unwrap());
    let source = pipeline.create_mysql_source("fo", "my").await.unwrap();
    assert!(
        is_gtid_position(source.applied_lsn),
        "{}",
        source.applied_lsn
    );
    pipeline
        .create_table(&TableSpec {
            name: "k_v1".into(),
            source: "fo".into(),
            schema: db.name.clone(),
            table: "k".into(),
            ..TableSpec::default()
        })
        .await
        .unwrap();
    pipeline.create_interface("k_json", "k_v1").unwrap();
    pipeline
        .create_sink("k_sink", "k_json", "sink", "public", "k_json")
        .await
        .unwrap();
    let running = Running::start(pipeline.clone());
    wait_loaded(&sink, "k_sink").await;
    audit(&sink, "k_json").await;
    running.stop().await;
    drop(pipeline);
    write(&mut p, 1, 100).await;
    let (first, gtid) = run_until_equal(config(&db.url), &mut p, &sink, &state).await;
    assert!(gtid.starts_with("0-1-"), "{gtid}");
    assert_eq!(mariadb_position(&gtid), Some(first), "{gtid}");

    // The replica stops receiving; the pipeline applies 50 more
    // transactions from the primary.
    caught_up(&primary, &replica);
    replica.client_sql("STOP SLAVE").unwrap();
    write(&mut p, 101, 150).await;
    let (ahead, gtid) = run_until_equal(config(&db.url), &mut p, &sink, &state).await;
    // Pointed at the replica, which lacks them, the source stalls.
    let pipeline = Arc::new(Pipeline::open(config(&replica_url)).unwrap());
    let running = Running::start(pipeline.clone());
    wait_until("the source to stall", Duration::from_secs(30), async || {
        pipeline
            .status()
            .iter()
            .any(|s| s.name == "fo" && s.state == "stalled")
    })
    .await;
    let error = pipeline
        .status()
        .iter()
        .find(|s| s.name == "fo")
        .and_then(|s| s.error.clone())
        .unwrap();
    assert!(
        error.starts_with(&format!(
            "ERROR: binlog position {ahead} (GTID {gtid}) of source \"fo\" is no longer on the server"
        )),
        "{error}"
    );
    assert!(error.contains("The server says: "), "{error}");
    assert!(
        error.contains("point the source's connection in evolve.toml at it"),
        "{error}"
    );
    running.stop().await;
    drop(pipeline);
    assert_eq!(stored(&state, "fo"), (ahead, gtid.clone()));
    // Once the replica has them, the source resumes there.
    replica.client_sql("START SLAVE").unwrap();
    caught_up(&primary, &replica);
    let mut r = my_conn(&replica_url).await;
    let (same, _) = run_until_equal(config(&replica_url), &mut r, &sink, &state).await;
    assert_eq!(same, ahead);

    // While the pipeline is down, the primary takes 25 more transactions;
    // the replica receives them, at other binlog offsets.
    write(&mut p, 151, 175).await;
    caught_up(&primary, &replica);
    let coordinates = |server: &MariaDb| {
        let status = server.client_sql("SHOW MASTER STATUS").unwrap();
        let mut fields = status.split('\t');
        (
            fields.next().unwrap().to_string(),
            fields.next().unwrap().trim().to_string(),
        )
    };
    let (on_primary, on_replica) = (coordinates(&primary), coordinates(&replica));
    assert_ne!(on_primary, on_replica, "the binlogs should differ");

    // Failover: the primary goes away, the replica stops replicating and
    // takes writes of its own.
    let _ = p.disconnect().await;
    drop(primary);
    replica.client_sql("STOP SLAVE; RESET SLAVE ALL").unwrap();
    write(&mut r, 176, 200).await;
    let now = replica.client_sql("SELECT @@gtid_binlog_pos").unwrap();
    let now = now.trim();
    assert!(now.starts_with("0-2-"), "{now}");

    // The pipeline again, on the replica.
    let (last, gtid) = run_until_equal(config(&replica_url), &mut r, &sink, &state).await;
    assert_eq!((last, gtid.as_str()), (mariadb_position(now).unwrap(), now));
    assert!(first < ahead && ahead < last, "{first} {ahead} {last}");

    let (inserts, updates, deletes) = workload(200);
    assert_eq!(
        audited(&sink, "k_json").await,
        (inserts, updates, deletes, 0),
        "(inserts, updates, deletes, updates that changed nothing)"
    );
    let _ = r.disconnect().await;
    let _ = std::fs::remove_dir_all(&state);
}

/// A source of a store written before GTID positions (its position a
/// binlog file number and offset, no GTID state) resumes there on
/// MariaDB, from then on with GTID positions (`BINLOG_GTID_POS` maps its
/// file and offset), and a table created after it joins its snapshot to
/// the stream exactly: the sink equals the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_of_an_older_store_moves_from_its_file_position_to_gtids() {
    let env = my_env(STATE, "mysql_upgrade").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop("CREATE TABLE k (id int PRIMARY KEY, n int NOT NULL, pad varchar(40))")
        .await
        .unwrap();
    write(&mut my, 1, 30).await;
    let at = source_at_file_position(&env, &mut my).await;
    // After the old position, before the pipeline starts: in the table's
    // snapshot and in the stream from the old position, applied once.
    write(&mut my, 31, 40).await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_chain(&pipeline, &env, "k").await;
    let running = Running::start(pipeline.clone());
    write(&mut my, 41, 80).await;
    expect(&mut my, &sink, "k").await;
    wait_equal(
        &sink,
        &sink,
        "expected_k",
        "k_json",
        Duration::from_secs(60),
    )
    .await;
    // The sink can equal the table from the snapshot alone, before the
    // stream has committed a transaction (and with it the GTID state):
    // wait for the state, which the stream stores with its next commit.
    wait_until(
        "the source's GTID state in the store",
        Duration::from_secs(60),
        async || {
            Store::open(&env.state)
                .unwrap()
                .resume_state(&env.source)
                .unwrap()
                .is_some()
        },
    )
    .await;
    running.stop().await;
    let (applied, gtid) = stored(&env.state, &env.source);
    assert!(
        is_gtid_position(applied) && applied > at,
        "{applied} after {at}"
    );
    assert_eq!(mariadb_position(&gtid), Some(applied), "{gtid}");
    let _ = my.disconnect().await;
}
