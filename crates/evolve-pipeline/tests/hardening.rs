//! Regressions found by hostile testing: publication names that are not
//! plain lower-case identifiers, streams the server refuses, sources that
//! can never recover, and monitoring floods.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use common::*;
use evolve_pipeline::{Pipeline, TableSpec};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

async fn get_json(router: &Router, uri: &str) -> (u16, Value) {
    let request = Request::get(uri)
        .header("host", "127.0.0.1:7800")
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The `/status` object of kind `kind` named `name`.
async fn object(router: &Router, kind: &str, name: &str) -> Value {
    let (status, body) = get_json(router, "/status").await;
    assert_eq!(status, 200, "{body}");
    body["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == kind && o["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} {name} in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publication_names_keep_their_case_commas_and_quotes() {
    let env = env("pubnames").await;
    let up = connect(&env.up.url).await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let names = ["MyPub", "zz,evolve_pub", "it's \"quoted\""];
    for (i, publication) in names.iter().enumerate() {
        up.batch_execute(&format!(
            "CREATE TABLE t{i} (id int PRIMARY KEY, v text); INSERT INTO t{i} VALUES (1, 'a')"
        ))
        .await
        .unwrap();
        let source = format!("{}_{i}", env.source);
        pipeline
            .create_source(&source, "up", publication)
            .await
            .unwrap_or_else(|e| panic!("{publication}: {e}"));
        pipeline
            .create_table(&TableSpec {
                name: format!("t{i}_v1"),
                source: source.clone(),
                schema: "public".into(),
                table: format!("t{i}"),
                ..TableSpec::default()
            })
            .await
            .unwrap();
        pipeline
            .create_interface(&format!("t{i}_json"), &format!("t{i}_v1"))
            .unwrap();
    }
    // Each publication exists upstream under exactly its name, alone.
    let rows = up
        .query("SELECT pubname::text FROM pg_publication ORDER BY 1", &[])
        .await
        .unwrap();
    let mut found: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    found.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want);

    let running = Running::start(pipeline.clone());
    for i in 0..names.len() {
        up.batch_execute(&format!(
            "INSERT INTO t{i} SELECT g, 'x' FROM generate_series(2, 11) g"
        ))
        .await
        .unwrap();
    }
    for (i, publication) in names.iter().enumerate() {
        let table = format!("t{i}_v1");
        wait_until(
            &format!("11 documents through publication {publication:?}"),
            Duration::from_secs(30),
            async || pipeline.document_count(&table).unwrap() == 11,
        )
        .await;
    }
    for status in pipeline.status() {
        assert!(
            status.state != "stalled" && status.state != "retrying",
            "{status:?}"
        );
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_source_refuses_a_stream_the_server_refuses_and_creates_nothing() {
    // A cluster of its own whose every WAL sender is taken: the slot can
    // be made (in an ordinary session) but no stream can start.
    let cluster = tokio::task::spawn_blocking(|| evolve_test::Cluster::start().unwrap())
        .await
        .unwrap();
    let db = cluster.create_database("nosenders").await.unwrap();
    let up = connect(&db.url).await;
    let mut held = Vec::new();
    loop {
        let config = pgwire_replication::ReplicationConfig::new(
            "127.0.0.1",
            "postgres",
            "",
            db.name.clone(),
            "unused",
            "unused",
        )
        .with_port(cluster.port());
        let mut session = pgwire_replication::ReplicationClient::connect_gated(config)
            .await
            .unwrap();
        match session.simple_query("IDENTIFY_SYSTEM").await {
            Ok(_) => held.push(session),
            Err(e) => {
                assert!(e.to_string().contains("max_wal_senders"), "{e}");
                break;
            }
        }
        assert!(held.len() <= 100, "max_wal_senders is never reached");
    }
    let state = std::env::temp_dir().join(format!("evolve-nosenders-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = evolve_pipeline::Config::new(&state).with_connection("up", db.url.clone());
    let pipeline = Pipeline::open(config).unwrap();
    let e = pipeline
        .create_source("nosenders", "up", "evolve_pub")
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(message.contains("0 WAL senders free"), "{message}");
    assert!(
        message.contains("ALTER SYSTEM SET max_wal_senders"),
        "{message}"
    );
    assert!(pipeline.sources().unwrap().is_empty());
    let slots: i64 = up
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "the slot was dropped again");
    let publications: i64 = up
        .query_one("SELECT count(*) FROM pg_publication", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(publications, 0, "the publication it created was dropped");
    // Once two senders are free (one to stream, one for a snapshot) the
    // same statement works.
    drop(held.pop());
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(500)).await;
    pipeline
        .create_source("nosenders", "up", "evolve_pub")
        .await
        .unwrap();
    drop(held);
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_source_drops_its_slot_and_publication_when_only_the_stream_probe_fails() {
    // Every check passes, the publication and the slot are made, and then
    // the role loses LOGIN (an event trigger on CREATE PUBLICATION does it,
    // as an operator might at that moment): CREATE SOURCE's own session
    // goes on, but the stream probe's new session is refused. What CREATE
    // SOURCE made must be dropped again.
    let env = env("probefails").await;
    let up = connect(&env.up.url).await;
    let role = format!("probing_{}", env.up.name);
    up.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN REPLICATION; \
         GRANT CREATE ON DATABASE {db} TO {role}; \
         CREATE TABLE ddl_log (n serial, tag text); \
         CREATE FUNCTION log_ddl() RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER \
           AS $$ BEGIN \
             INSERT INTO public.ddl_log (tag) VALUES (tg_tag); \
             IF tg_tag = 'CREATE PUBLICATION' THEN ALTER ROLE {role} NOLOGIN; END IF; \
           END $$; \
         CREATE EVENT TRIGGER log_ddl ON ddl_command_end \
           WHEN TAG IN ('CREATE PUBLICATION', 'DROP PUBLICATION') EXECUTE FUNCTION log_ddl()",
        db = env.up.name
    ))
    .await
    .unwrap();
    let url = format!(
        "postgres://{role}@127.0.0.1:{}/{}",
        evolve_test::shared().port(),
        env.up.name
    );
    let config = evolve_pipeline::Config::new(&env.state).with_connection("up", url.clone());
    let pipeline = Pipeline::open(config).unwrap();
    {
        let client = connect(&url).await;
        let checks = evolve_pipeline::preflight::upstream(&client, "probe_pub", None)
            .await
            .unwrap();
        assert!(checks.iter().all(|c| c.ok), "the checks pass: {checks:?}");
    }

    let e = pipeline
        .create_source("probing", "up", "probe_pub")
        .await
        .unwrap_err();
    let message = e.to_string();
    // The stream's session was refused, not CREATE SOURCE's own session
    // (a connection error, before anything was made).
    assert!(
        matches!(e, evolve_pipeline::PipelineError::Replication { .. }),
        "{e:?}"
    );
    assert!(
        message.contains(&format!("role \"{role}\" is not permitted to log in")),
        "the server's refusal of the stream: {message}"
    );
    assert!(!message.contains('\n'), "one line: {message}");
    let log: Vec<String> = up
        .query("SELECT tag FROM ddl_log ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        log,
        ["CREATE PUBLICATION", "DROP PUBLICATION"],
        "CREATE SOURCE made the publication and dropped it again"
    );
    let slots: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "the slot CREATE SOURCE made was dropped");
    let publications: i64 = up
        .query_one("SELECT count(*) FROM pg_publication", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(publications, 0, "the publication was dropped");
    assert!(pipeline.sources().unwrap().is_empty(), "no source recorded");

    // Once the role may log in again the same statement succeeds.
    up.batch_execute(&format!(
        "DROP EVENT TRIGGER log_ddl; ALTER ROLE {role} LOGIN"
    ))
    .await
    .unwrap();
    let info = pipeline
        .create_source("probing", "up", "probe_pub")
        .await
        .unwrap();
    let made: (i64, i64) = {
        let row = up
            .query_one(
                "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1), \
                        (SELECT count(*) FROM pg_publication WHERE pubname = 'probe_pub')",
                &[&info.slot],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(made, (1, 1));
    assert_eq!(pipeline.sources().unwrap().len(), 1);
    pipeline.drop_source("probing").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_probe_reports_the_servers_refusal() {
    // pg_recvlogical holds a slot; starting a stream on it is refused
    // (55006), which is what CREATE SOURCE's probe reports.
    let env = env("probe").await;
    let up = connect(&env.up.url).await;
    let slot = format!("probe_{}", env.up.name);
    up.query(
        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
        &[&slot],
    )
    .await
    .unwrap();
    up.batch_execute("CREATE PUBLICATION probe_pub")
        .await
        .unwrap();
    let cluster = evolve_test::shared();
    let mut holder = std::process::Command::new(cluster.bin("pg_recvlogical"))
        .args([
            "-d",
            &env.up.url,
            "--slot",
            &slot,
            "--start",
            "-f",
            "/dev/null",
        ])
        .args(["-o", "proto_version=1", "-o", "publication_names=probe_pub"])
        .spawn()
        .unwrap();
    wait_until(
        "pg_recvlogical holds the slot",
        Duration::from_secs(20),
        async || {
            up.query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
        },
    )
    .await;
    let connection = env.config.connection("up").unwrap();
    let e = evolve_pipeline::upstream::probe_stream("src", connection, &slot, "probe_pub")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is active for PID"), "{e}");
    let _ = holder.kill();
    let _ = holder.wait();
    wait_until("the slot is free", Duration::from_secs(20), async || {
        !up.query_one(
            "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    })
    .await;
    evolve_pipeline::upstream::probe_stream("src", connection, &slot, "probe_pub")
        .await
        .unwrap();
    evolve_pipeline::upstream::wait_slot_released(&up, &slot)
        .await
        .unwrap();
    up.query("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_publication_is_gone_stops_instead_of_retrying() {
    let env = env("permanent").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE p (id int PRIMARY KEY)")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["p"]).await;
    let router = evolve_pipeline::admin::router(pipeline.clone());
    let running = Running::start(pipeline.clone());
    wait_until("the table runs", Duration::from_secs(30), async || {
        pipeline
            .status()
            .iter()
            .any(|s| s.name == "p_v1" && s.state == "running")
    })
    .await;
    up.batch_execute("DROP PUBLICATION evolve_pub; INSERT INTO p VALUES (1)")
        .await
        .unwrap();
    wait_until("the source stops", Duration::from_secs(30), async || {
        let o = object(&router, "source", &env.source).await;
        o["state"] == "stalled" && o["error"].as_str().unwrap_or("").contains("not retried")
    })
    .await;
    let o = object(&router, "source", &env.source).await;
    let error = o["error"].as_str().unwrap();
    assert!(
        error.contains("publication \"evolve_pub\" does not exist"),
        "{error}"
    );
    assert!(o["retained_wal_bytes"].as_i64().is_some(), "{o}");
    // A retry would set the state to "starting" again (the backoff starts
    // at half a second): it stays stalled, and the slot stays inactive.
    let slot = format!("evolve_{}", env.source);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let state = pipeline
            .status()
            .into_iter()
            .find(|s| s.name == env.source)
            .unwrap()
            .state;
        assert_eq!(state, "stalled");
        let active: bool = up
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!active, "the slot was taken again by a retry");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The way out it names is not "restart": the change written while the
    // publication was missing cannot be decoded once it exists again.
    assert!(error.contains("even once it exists again"), "{error}");
    assert!(!error.contains("restart the pipeline"), "{error}");
    running.stop().await;
    up.batch_execute("CREATE PUBLICATION evolve_pub FOR TABLE p; INSERT INTO p VALUES (2)")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let router = evolve_pipeline::admin::router(pipeline.clone());
    let running = Running::start(pipeline.clone());
    wait_until(
        "the restarted source stops again",
        Duration::from_secs(30),
        async || {
            let o = object(&router, "source", &env.source).await;
            o["state"] == "stalled"
                && o["error"]
                    .as_str()
                    .unwrap_or("")
                    .contains("publication \"evolve_pub\" does not exist")
        },
    )
    .await;
    running.stop().await;
}

/// Upstream client sessions of the pipeline (not its replication
/// sessions) on database `db`.
async fn monitoring_sessions(up: &tokio_postgres::Client, db: &str) -> i64 {
    up.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
         AND application_name = 'evolve-pipeline' AND backend_type = 'client backend'",
        &[&db],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_scrapers_share_one_upstream_session() {
    let env = env("flood").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE f (id int PRIMARY KEY, v text); \
         INSERT INTO f SELECT g, 'x' FROM generate_series(1, 1000) g",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["f"]).await;
    let router = evolve_pipeline::admin::router(pipeline.clone());
    let running = Running::start(pipeline.clone());
    wait_until("the table runs", Duration::from_secs(30), async || {
        pipeline
            .status()
            .iter()
            .any(|s| s.name == "f_v1" && s.state == "running")
    })
    .await;

    // An idle source that has applied nothing yet is caught up.
    wait_until(
        "lag_bytes of an idle source under 1 MiB",
        Duration::from_secs(30),
        async || {
            let o = object(&router, "source", &env.source).await;
            o["lag_bytes"].as_u64().is_some_and(|l| l < 1 << 20)
        },
    )
    .await;

    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let url = env.up.url.clone();
        let db = env.up.name.clone();
        let flooding = flooding.clone();
        tokio::spawn(async move {
            let up = connect(&url).await;
            let mut most = 0;
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(monitoring_sessions(&up, &db).await);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let router = router.clone();
        clients.spawn(async move {
            let mut took = Vec::new();
            for uri in ["/status", "/metrics", "/drift", "/status", "/status"] {
                let started = Instant::now();
                let request = Request::get(uri)
                    .header("host", "127.0.0.1:7800")
                    .body(Body::empty())
                    .unwrap();
                let response = router.clone().oneshot(request).await.unwrap();
                assert_eq!(response.status(), 200, "{uri}");
                let _ = response.into_body().collect().await.unwrap();
                if uri == "/status" {
                    took.push(started.elapsed());
                }
            }
            took
        });
    }
    let mut took = Vec::new();
    while let Some(result) = clients.join_next().await {
        took.extend(result.unwrap());
    }
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.await.unwrap();
    took.sort();
    let p99 = took[took.len() * 99 / 100];
    println!(
        "600 GET /status by 200 concurrent clients: p50 {:?}, p99 {:?}; at most {most} monitoring session(s) upstream",
        took[took.len() / 2],
        p99
    );
    assert!(
        p99 < Duration::from_millis(100),
        "p99 of GET /status under 200 concurrent clients is {p99:?}, over 100 ms"
    );
    assert!(most <= 1, "{most} monitoring sessions upstream");
    let (_, status) = get_json(&router, "/status").await;
    assert_eq!(
        monitoring_sessions(&up, &env.up.name).await,
        1,
        "the session stays open for the next reader: {status}"
    );

    // Status comes from a 1 s cache: 200 clients scraping /status and
    // /metrics without pause for 3 s cost the upstream at most about one
    // reading a second, counted as the transactions committed in the
    // upstream database (the pipeline's monitoring session is the only
    // client there; every query of it commits one or more).
    drop(up);
    let admin = connect(&evolve_test::shared().url("postgres")).await;
    let db = env.up.name.clone();
    let before = flushed_commits(&admin, &db).await;
    let clients_until = Instant::now() + Duration::from_secs(3);
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let router = router.clone();
        clients.spawn(async move {
            let mut requests = 0u32;
            while Instant::now() < clients_until {
                for uri in ["/status", "/metrics"] {
                    let request = Request::get(uri)
                        .header("host", "127.0.0.1:7800")
                        .body(Body::empty())
                        .unwrap();
                    let response = router.clone().oneshot(request).await.unwrap();
                    assert_eq!(response.status(), 200, "{uri}");
                    let _ = response.into_body().collect().await.unwrap();
                    requests += 2;
                }
            }
            requests
        });
    }
    let mut requests = 0;
    while let Some(result) = clients.join_next().await {
        requests += result.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64().ceil() as i64;
    let flood = flushed_commits(&admin, &db).await - before;
    // What one reading costs (a new session and one reading of the
    // positions, as the flood's first one did), once the cache expired.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _) = get_json(&router, "/status").await;
    assert_eq!(status, 200);
    let one = flushed_commits(&admin, &db).await - before - flood;
    println!(
        "{requests} requests in {seconds} s: {flood} upstream transactions; one reading costs {one}"
    );
    assert!(
        one >= 1,
        "one reading of the positions commits nothing upstream"
    );
    assert!(
        requests >= 1000,
        "only {requests} requests in {seconds} s: the flood proves nothing"
    );
    assert!(
        flood <= one * (seconds + 3),
        "{requests} requests in {seconds} s cost {flood} upstream transactions, \
         more than {} readings of {one}: status is not served from a 1 s cache",
        seconds + 3
    );
    running.stop().await;
}

/// Transactions committed in database `db` so far, all counted: the
/// pipeline's monitoring session there is closed first (a backend flushes
/// its statistics when it exits; an idle one may hold them for 10 s).
/// The next reader opens a new session.
async fn flushed_commits(admin: &tokio_postgres::Client, db: &str) -> i64 {
    admin
        .query(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity \
             WHERE datname = $1 AND backend_type = 'client backend'",
            &[&db],
        )
        .await
        .unwrap();
    wait_until(
        "the upstream database's sessions are gone",
        Duration::from_secs(20),
        async || client_sessions(admin, db).await == 0,
    )
    .await;
    admin
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    admin
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
            &[&db],
        )
        .await
        .unwrap()
        .get(0)
}

/// Client sessions of any application on database `db`.
async fn client_sessions(up: &tokio_postgres::Client, db: &str) -> i64 {
    up.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
         AND backend_type = 'client backend'",
        &[&db],
    )
    .await
    .unwrap()
    .get(0)
}

/// The upstream confirmed position of the source's slot.
async fn slot_confirmed(up: &tokio_postgres::Client, source: &str) -> i64 {
    up.query_one(
        "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1",
        &[&format!("evolve_{source}")],
    )
    .await
    .unwrap()
    .get(0)
}

/// A state directory restored from a backup is behind the slot, whose
/// changes after the backup are gone: the source stops with the reason
/// instead of resuming with a gap. A restart of the state that goes with
/// the slot, after an idle stream confirmed WAL past its last change,
/// resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_restored_from_a_backup_stops_instead_of_losing_changes() {
    let env = env("behind").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE b (id int PRIMARY KEY); CREATE TABLE elsewhere (id int)")
        .await
        .unwrap();
    let start = async || {
        let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
        let router = evolve_pipeline::admin::router(pipeline.clone());
        (pipeline.clone(), router, Running::start(pipeline))
    };
    let documents = async |pipeline: &Pipeline, n: u64| {
        wait_until(
            &format!("{n} documents"),
            Duration::from_secs(30),
            async || pipeline.document_count("b_v1").unwrap() == n,
        )
        .await;
    };
    {
        let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
        create_all(&pipeline, &env.source, &["b"]).await;
    }
    let (pipeline, _, running) = start().await;
    up.batch_execute("INSERT INTO b VALUES (1)").await.unwrap();
    documents(&pipeline, 1).await;
    running.stop().await;
    drop(pipeline);
    let backup = env.state.with_extension("backup");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&env.state)
        .arg(&backup)
        .status()
        .unwrap();
    assert!(copied.success());

    // Two more rows, then WAL that holds nothing for the source: the idle
    // stream confirms past its last change.
    let (pipeline, router, running) = start().await;
    up.batch_execute("INSERT INTO b VALUES (2), (3)")
        .await
        .unwrap();
    documents(&pipeline, 3).await;
    up.batch_execute("INSERT INTO elsewhere VALUES (1)")
        .await
        .unwrap();
    let after: i64 = up
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get(0);
    wait_until(
        "the idle stream to confirm past its last change",
        Duration::from_secs(30),
        async || slot_confirmed(&up, &env.source).await >= after,
    )
    .await;
    running.stop().await;
    drop((pipeline, router));

    // The state that goes with the slot resumes.
    let (pipeline, router, running) = start().await;
    up.batch_execute("INSERT INTO b VALUES (4)").await.unwrap();
    documents(&pipeline, 4).await;
    assert_eq!(
        object(&router, "source", &env.source).await["state"],
        "running"
    );
    running.stop().await;
    drop((pipeline, router));

    // The backup does not.
    std::fs::remove_dir_all(&env.state).unwrap();
    std::fs::rename(&backup, &env.state).unwrap();
    let (pipeline, router, running) = start().await;
    wait_until(
        "the restored source stops",
        Duration::from_secs(30),
        async || {
            let o = object(&router, "source", &env.source).await;
            o["state"] == "stalled" && o["error"].as_str().unwrap_or("").contains("not retried")
        },
    )
    .await;
    let o = object(&router, "source", &env.source).await;
    let error = o["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("the state of source \"{}\" ends at ", env.source))
            && error.contains("the state directory is older than the upstream's record of it"),
        "{error}"
    );
    assert_eq!(pipeline.document_count("b_v1").unwrap(), 1);
    running.stop().await;
}

/// `pipeline check` of statements not run yet fails what CREATE SOURCE and
/// CREATE TABLE would refuse: a slot of the source's name that exists
/// already, a REFERENCE to a table that does not exist, a partitioned
/// table, and a table without a key; a plain table passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_check_fails_what_the_statements_would_be_refused() {
    let env = env("check_refusals").await;
    let up = connect(&env.up.url).await;
    let taken = format!("{}_new", env.source);
    up.batch_execute(
        "CREATE TABLE fine (id int PRIMARY KEY);
         CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id);
         CREATE TABLE keyless (v int);",
    )
    .await
    .unwrap();
    up.batch_execute(&format!(
        "SELECT pg_create_logical_replication_slot('evolve_{taken}', 'pgoutput')"
    ))
    .await
    .unwrap();
    let statements = evolve_core::control::parse(&format!(
        "CREATE SOURCE {taken} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');
         CREATE TABLE fine_v1 FROM SOURCE {taken} (REFERENCE public.fine);
         CREATE TABLE missing_v1 FROM SOURCE {taken} (REFERENCE public.missing);
         CREATE TABLE parted_v1 FROM SOURCE {taken} (REFERENCE public.parted);
         CREATE TABLE keyless_v1 FROM SOURCE {taken} (REFERENCE public.keyless);"
    ))
    .unwrap();
    let mut plan = evolve_pipeline::preflight::Plan::default();
    plan.add_statements(&statements, &[]);
    let report = evolve_pipeline::preflight::run(&env.config, &plan).await;
    let failed: Vec<(String, String)> = report
        .connections
        .iter()
        .flat_map(|c| &c.checks)
        .filter(|c| !c.ok)
        .map(|c| (c.subject.clone(), c.message.clone()))
        .collect();
    up.batch_execute(&format!(
        "SELECT pg_drop_replication_slot('evolve_{taken}')"
    ))
    .await
    .unwrap();
    let subjects: Vec<&str> = failed.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        subjects,
        [
            format!("replication slot evolve_{taken}").as_str(),
            "table public.missing",
            "table public.parted",
            "table public.keyless",
        ],
        "{failed:#?}"
    );
    assert!(
        failed[0].1.contains("exists upstream already"),
        "{failed:?}"
    );
    assert!(failed[1].1.contains("public.missing"), "{failed:?}");
    assert!(failed[2].1.contains("is a partitioned table"), "{failed:?}");
    assert!(failed[3].1.contains("public.keyless"), "{failed:?}");
}

/// One engine per state directory: a second run on it is refused, naming
/// the process that holds it, and succeeds once the first has stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_engine_on_the_same_state_directory_is_refused() {
    let state = std::env::temp_dir().join(format!("evolve-engine-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = evolve_pipeline::Config::new(&state);
    let first = Arc::new(Pipeline::open(config.clone()).unwrap());
    let running = Running::start(first.clone());
    // The first holds the lock once it wrote its process id into the lock
    // file (a second engine started before that could take the lock
    // first, and the first would be the one refused).
    let lock = state.join("engine.lock");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&lock).unwrap_or_default() != std::process::id().to_string() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the first engine took no lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = Pipeline::open(config.clone()).unwrap();
    let e = second
        .run(std::future::ready(()))
        .await
        .expect_err("the second engine is refused");
    assert_eq!(
        e.primary(),
        format!(
            "state directory {} is in use by another running pipeline (process {})",
            state.display(),
            std::process::id()
        )
    );
    running.stop().await;
    second.run(std::future::ready(())).await.unwrap();
    let _ = std::fs::remove_dir_all(&state);
}
