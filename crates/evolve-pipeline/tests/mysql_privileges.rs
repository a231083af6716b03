//! A running MySQL source whose user loses what it needs on the harness's
//! MariaDB: REPLICATION SLAVE revoked, or its password changed. The
//! source stalls naming the privilege (or the password) and the way out,
//! never as a wrong password retried forever, and resumes without loss
//! once the grant (or the url) is right again.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::mysql::*;
use common::*;
use evolve_pipeline::drift::Signal;
use evolve_pipeline::poll::drift;
use evolve_pipeline::{ObjectKind, Pipeline, TableState};
use evolve_test::shared_mariadb;
use mysql_async::prelude::Queryable;

const STATE: &str = "evolve-mysql-privileges-test";

/// The source's state and error.
fn source_status(pipeline: &Pipeline, source: &str) -> Option<(String, Option<String>)> {
    object_status(pipeline, ObjectKind::Source, source)
}

/// An object's state and error on the status board.
fn object_status(
    pipeline: &Pipeline,
    kind: ObjectKind,
    name: &str,
) -> Option<(String, Option<String>)> {
    pipeline
        .status()
        .into_iter()
        .find(|s| s.kind == kind && s.name == name)
        .map(|s| (s.state, s.error))
}

/// Waits until the source shows `state` with an error containing
/// `wanted`; returns the error.
async fn wait_source(pipeline: &Pipeline, source: &str, state: &str, wanted: &str) -> String {
    wait_object(pipeline, ObjectKind::Source, source, state, wanted).await
}

/// Waits until object `name` shows `state` with an error containing
/// `wanted`; returns the error.
async fn wait_object(
    pipeline: &Pipeline,
    kind: ObjectKind,
    name: &str,
    state: &str,
    wanted: &str,
) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some((s, Some(error))) = object_status(pipeline, kind, name)
            && s == state
            && error.contains(wanted)
        {
            return error;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{kind} {name} did not show {state} with \"{wanted}\" within 60 s: {:?}",
            object_status(pipeline, kind, name)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A user `r_<n>` of the shared MariaDB with password `pw` and
/// `privileges` on everything, and every privilege on database `db`.
fn create_user(tag: &str, db: &str, privileges: &str) -> String {
    let user = format!("r{tag}_{}", std::process::id());
    shared_mariadb()
        .client_sql(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'old_pw'; \
             GRANT {privileges} ON *.* TO '{user}'@'%'; \
             GRANT ALL ON `{db}`.* TO '{user}'@'%';"
        ))
        .unwrap();
    user
}

/// Ends the binlog dump sessions of `user` (the stream reconnects, as it
/// does after any network failure or server restart).
async fn kill_dumps(root: &mut mysql_async::Conn, user: &str) {
    let ids: Vec<u64> = root
        .exec(
            "SELECT ID FROM information_schema.PROCESSLIST \
             WHERE USER = ? AND COMMAND LIKE 'Binlog Dump%'",
            (user,),
        )
        .await
        .unwrap();
    assert!(!ids.is_empty(), "no binlog dump session of {user}");
    for id in ids {
        let _ = root.query_drop(format!("KILL {id}")).await;
    }
}

/// A pipeline over `env` whose connection `my` is `url`, with table
/// `p_v1` over `p` and its chain into the sink.
async fn pipeline_on(env: &MyEnv, url: &str, create: bool) -> Arc<Pipeline> {
    let config = env.config.clone().with_connection("my", url.to_string());
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    if create {
        pipeline
            .create_mysql_source(&env.source, "my")
            .await
            .unwrap();
        create_chain(&pipeline, env, "p").await;
    }
    pipeline
}

async fn wait_rows(sink: &tokio_postgres::Client, rows: i64) {
    wait_until(
        &format!("{rows} rows in the sink"),
        Duration::from_secs(60),
        async || {
            sink_exists(sink, "p_json").await
                && sink_rows(sink, "p_json").await.len() as i64 == rows
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_replication_grant_or_changed_password_stalls_the_source_with_the_way_out() {
    let env = my_env(STATE, "mysql_revoked").await;
    let user = format!("r_{}", env.my.name.len() + std::process::id() as usize);
    let server = shared_mariadb();
    let (port, db) = (server.port(), env.my.name.clone());
    server
        .client_sql(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'old_pw'; \
             GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{user}'@'%'; \
             GRANT ALL ON `{db}`.* TO '{user}'@'%';"
        ))
        .unwrap();
    let url = |pw: &str| format!("mysql://{user}:{pw}@127.0.0.1:{port}/{db}");
    let mut root = my_conn(&env.my.url).await;
    root.query_drop("CREATE TABLE p (id int PRIMARY KEY, n int NOT NULL)")
        .await
        .unwrap();
    let sink = connect(&env.sink.url).await;
    let pipeline = pipeline_on(&env, &url("old_pw"), true).await;
    let running = Running::start(pipeline.clone());
    wait_state(
        &pipeline,
        "p_v1",
        TableState::Running,
        Duration::from_secs(60),
    )
    .await;
    root.query_drop("INSERT INTO p VALUES (1, 1)")
        .await
        .unwrap();
    wait_rows(&sink, 1).await;

    // REPLICATION SLAVE revoked: the open dump goes on until the stream
    // reconnects, which is refused.
    server
        .client_sql(&format!(
            "REVOKE REPLICATION SLAVE ON *.* FROM '{user}'@'%'"
        ))
        .unwrap();
    kill_dumps(&mut root, &user).await;
    root.query_drop("INSERT INTO p VALUES (2, 2)")
        .await
        .unwrap();
    let error = wait_source(&pipeline, &env.source, "stalled", "REPLICATION SLAVE").await;
    assert!(
        error.contains(&format!("GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'")),
        "{error}"
    );
    assert!(!error.contains("using password"), "{error}");
    assert!(!error.contains("old_pw"), "the password leaked: {error}");
    running.stop().await;
    drop(pipeline);

    // Granted again: the restarted source resumes where it was, nothing lost.
    server
        .client_sql(&format!("GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'"))
        .unwrap();
    let pipeline = pipeline_on(&env, &url("old_pw"), false).await;
    let running = Running::start(pipeline.clone());
    wait_rows(&sink, 2).await;
    assert_eq!(
        source_status(&pipeline, &env.source).map(|s| s.0),
        Some("running".to_string())
    );

    // The user's password changed upstream: refused as such, not retried.
    server
        .client_sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'new_pw'"))
        .unwrap();
    kill_dumps(&mut root, &user).await;
    root.query_drop("INSERT INTO p VALUES (3, 3)")
        .await
        .unwrap();
    let error = wait_source(&pipeline, &env.source, "stalled", "password").await;
    assert!(error.contains(&format!("'{user}'")), "{error}");
    assert!(error.contains("connection \"my\""), "{error}");
    assert!(!error.contains("old_pw"), "the password leaked: {error}");
    running.stop().await;
    drop(pipeline);

    // The url updated: the source resumes.
    let pipeline = pipeline_on(&env, &url("new_pw"), false).await;
    let running = Running::start(pipeline.clone());
    wait_rows(&sink, 3).await;
    running.stop().await;
    let _ = root.disconnect().await;
    let _ = server.client_sql(&format!("DROP USER '{user}'@'%'"));
}

/// A running source's metadata queries refused for a privilege: a source
/// of a store written before GTID positions (a binlog file and offset)
/// lists the binlog files when its stream opens (SHOW BINARY LOGS), which
/// MariaDB answers with error 1227 for a user without BINLOG MONITOR.
/// The source stalls naming BINLOG MONITOR and the GRANT instead of
/// retrying forever, and resumes from its position once granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_binlog_monitor_stalls_the_source_naming_the_grant() {
    let env = my_env(STATE, "mysql_monitor").await;
    let db = env.my.name.clone();
    let user = create_user("m", &db, "REPLICATION SLAVE, SELECT");
    let port = shared_mariadb().port();
    let url = format!("mysql://{user}:old_pw@127.0.0.1:{port}/{db}");
    let mut root = my_conn(&env.my.url).await;
    root.query_drop("CREATE TABLE p (id int PRIMARY KEY, n int NOT NULL)")
        .await
        .unwrap();
    source_at_file_position(&env, &mut root).await;
    root.query_drop("INSERT INTO p VALUES (1, 1)")
        .await
        .unwrap();
    let sink = connect(&env.sink.url).await;
    let pipeline = pipeline_on(&env, &url, false).await;
    create_chain(&pipeline, &env, "p").await;
    let running = Running::start(pipeline.clone());
    let error = wait_source(&pipeline, &env.source, "stalled", "BINLOG MONITOR").await;
    assert!(
        error.contains(&format!(
            "user '{user}'@'%' lacks BINLOG MONITOR, which listing the binlog files (SHOW BINARY LOGS) needs"
        )),
        "{error}"
    );
    assert!(
        error.contains(&format!("GRANT BINLOG MONITOR ON *.* TO '{user}'@'%';")),
        "{error}"
    );
    assert!(error.contains("not retried"), "{error}");
    assert!(!error.contains("GRANT SUPER"), "{error}");
    running.stop().await;
    drop(pipeline);

    // Granted: the restarted source resumes at its position, nothing lost.
    shared_mariadb()
        .client_sql(&format!("GRANT BINLOG MONITOR ON *.* TO '{user}'@'%'"))
        .unwrap();
    root.query_drop("INSERT INTO p VALUES (2, 2)")
        .await
        .unwrap();
    let pipeline = pipeline_on(&env, &url, false).await;
    let running = Running::start(pipeline.clone());
    wait_rows(&sink, 2).await;
    wait_state(
        &pipeline,
        "p_v1",
        TableState::Running,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        source_status(&pipeline, &env.source).map(|s| s.0),
        Some("running".to_string())
    );
    running.stop().await;
    let _ = root.disconnect().await;
    let _ = shared_mariadb().client_sql(&format!("DROP USER '{user}'@'%'"));
}

/// A password changed upstream before a table's snapshot connects: the
/// snapshot's session is refused at login, and the table stalls naming
/// the connection whose url to fix (as the stream does), instead of
/// retrying a connection error forever; the drift poll's session says
/// the same. With the new password in the url the restarted pipeline
/// copies the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_changed_before_a_snapshot_stalls_the_table_naming_the_connection() {
    let env = my_env(STATE, "mysql_snapshot_pw").await;
    let db = env.my.name.clone();
    let user = create_user("s", &db, "REPLICATION SLAVE, BINLOG MONITOR, SELECT");
    let port = shared_mariadb().port();
    let url = |pw: &str| format!("mysql://{user}:{pw}@127.0.0.1:{port}/{db}");
    let mut root = my_conn(&env.my.url).await;
    root.query_drop("CREATE TABLE p (id int PRIMARY KEY, n int NOT NULL)")
        .await
        .unwrap();
    root.query_drop("INSERT INTO p VALUES (1, 1)")
        .await
        .unwrap();
    let sink = connect(&env.sink.url).await;
    // Created with the old password; changed before the pipeline runs.
    let pipeline = pipeline_on(&env, &url("old_pw"), true).await;
    shared_mariadb()
        .client_sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'new_pw'"))
        .unwrap();
    let running = Running::start(pipeline.clone());
    let error = wait_object(
        &pipeline,
        ObjectKind::Table,
        "p_v1",
        "stalled",
        "the server refused the user of connection \"my\"",
    )
    .await;
    assert!(error.contains(&format!("'{user}'")), "{error}");
    assert!(error.contains("connection \"my\"'s url"), "{error}");
    assert!(error.contains("not retried"), "{error}");
    assert!(!error.contains("old_pw"), "the password leaked: {error}");
    // The monitoring session of the drift poll.
    let rows = drift(&pipeline, None).await.unwrap();
    let row = rows.iter().find(|r| r.table == "p_v1").expect("p_v1's row");
    assert_eq!(row.signal, Signal::Unknown, "{row:?}");
    let said = row.error.as_deref().unwrap_or_default();
    assert!(
        said.contains("the server refused the user of connection \"my\""),
        "{said}"
    );
    running.stop().await;
    drop(pipeline);

    let pipeline = pipeline_on(&env, &url("new_pw"), false).await;
    let running = Running::start(pipeline.clone());
    wait_rows(&sink, 1).await;
    running.stop().await;
    let _ = root.disconnect().await;
    let _ = shared_mariadb().client_sql(&format!("DROP USER '{user}'@'%'"));
}

/// `(key, data)` of `p`'s rows upstream, as the sink's documents of them
/// are: `{"id": .., "n": ..}` keyed by `{"id": ..}`.
async fn upstream_docs(root: &mut mysql_async::Conn) -> Vec<(String, String)> {
    let rows: Vec<(i32, i32)> = root.query("SELECT id, n FROM p").await.unwrap();
    let mut docs: Vec<(String, String)> = rows
        .into_iter()
        .map(|(id, n)| {
            (
                format!("{{\"id\": {id}}}"),
                format!("{{\"n\": {n}, \"id\": {id}}}"),
            )
        })
        .collect();
    docs.sort();
    docs
}

/// A running source whose user may not read one of its tables: MariaDB
/// refuses the snapshot's SELECT with error 1142 (no privilege on the
/// table), then 1143 (SELECT on some of its columns only). Each time the
/// table stalls with one line naming the user, the table and the exact
/// GRANT, as `evolve status` shows it, instead of retrying forever; the
/// source and its other tables keep streaming. Once granted, the restarted
/// pipeline copies the table and joins the stream: every row arrives
/// exactly once (a trigger counts the sink's writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_the_user_may_not_select_stalls_naming_the_grant_and_resumes_once_granted() {
    let env = my_env(STATE, "mysql_select").await;
    let db = env.my.name.clone();
    let server = shared_mariadb();
    let user = format!("rsel_{}", std::process::id());
    let port = server.port();
    let url = format!("mysql://{user}:old_pw@127.0.0.1:{port}/{db}");
    let mut root = my_conn(&env.my.url).await;
    root.query_drop(
        "CREATE TABLE p (id int PRIMARY KEY, n int NOT NULL); \
         CREATE TABLE q (id int PRIMARY KEY, n int NOT NULL); \
         INSERT INTO p VALUES (1, 1), (2, 2), (3, 3); \
         INSERT INTO q VALUES (1, 1), (2, 2);",
    )
    .await
    .unwrap();
    // SELECT on q, nothing on p.
    server
        .client_sql(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'old_pw'; \
             GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'; \
             GRANT SELECT ON `{db}`.q TO '{user}'@'%';"
        ))
        .unwrap();
    let sink = connect(&env.sink.url).await;
    // Created by a user who may read everything (CREATE SOURCE wants
    // SELECT on the database); run by the restricted one.
    {
        let pipeline = pipeline_on(&env, &env.my.url, true).await;
        create_chain(&pipeline, &env, "q").await;
    }
    audit_sink(&sink, "p_json").await;
    let pipeline = pipeline_on(&env, &url, false).await;
    let running = Running::start(pipeline.clone());

    // 1142: SELECT denied on the table.
    let error = wait_object(
        &pipeline,
        ObjectKind::Table,
        "p_v1",
        "stalled",
        "lacks SELECT",
    )
    .await;
    let first = error.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "ERROR: user '{user}'@'%' lacks SELECT on table {db}.p, which its snapshot needs: run GRANT SELECT ON {db}.p TO '{user}'@'%';"
        ),
        "{error}"
    );
    assert!(error.contains("error 1142"), "{error}");
    assert!(error.contains("not retried"), "{error}");
    assert!(!error.contains("old_pw"), "the password leaked: {error}");
    // What `evolve status` shows: the same line, and the table stays
    // stalled, not retried.
    let (state, shown) = object_status(&pipeline, ObjectKind::Table, "p_v1").unwrap();
    assert_eq!(state, "stalled");
    assert!(shown.unwrap().contains(first), "{first}");
    // The drift poll, which `information_schema` hides the table from,
    // says the same rather than calling it dropped.
    let rows = drift(&pipeline, None).await.unwrap();
    let row = rows.iter().find(|r| r.table == "p_v1").expect("p_v1's row");
    assert_eq!(row.signal, Signal::Unknown, "{row:?}");
    let said = row.error.as_deref().unwrap_or_default();
    assert!(
        said.contains(&format!("GRANT SELECT ON {db}.p TO '{user}'@'%';")),
        "{said}"
    );
    // Only p's row says so: q, which the user may read, matches upstream
    // (its row used to carry p's error too).
    assert!(
        rows.iter().all(|r| r.table != "q_v1"),
        "q_v1 has a drift row: {rows:?}"
    );
    // A new table version over it is refused the same way.
    let refused = pipeline
        .create_table(&spec(&env, "p_v2", "p", &[]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!(
            "lacks SELECT on table {db}.p, which its snapshot needs: run GRANT SELECT ON {db}.p TO '{user}'@'%';"
        )),
        "{refused}"
    );
    assert!(refused.contains("create the table again"), "{refused}");
    // The source and its other table go on.
    root.query_drop("INSERT INTO q VALUES (3, 3)")
        .await
        .unwrap();
    wait_until(
        "q's 3 rows in the sink",
        Duration::from_secs(60),
        async || sink_rows(&sink, "q_json").await.len() == 3,
    )
    .await;
    assert_eq!(
        source_status(&pipeline, &env.source).map(|s| s.0),
        Some("running".to_string())
    );
    // Changes while the table is stalled.
    root.query_drop(
        "INSERT INTO p VALUES (4, 4); UPDATE p SET n = 10 WHERE id = 1; \
         DELETE FROM p WHERE id = 2; INSERT INTO p VALUES (5, 5);",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        object_status(&pipeline, ObjectKind::Table, "p_v1").map(|s| s.0),
        Some("stalled".to_string())
    );
    assert_eq!(audit_count(&sink, "p_json").await, 0);
    running.stop().await;
    drop(pipeline);

    // 1143: SELECT on one column only.
    server
        .client_sql(&format!("GRANT SELECT (id) ON `{db}`.p TO '{user}'@'%'"))
        .unwrap();
    let pipeline = pipeline_on(&env, &url, false).await;
    let running = Running::start(pipeline.clone());
    let error = wait_object(
        &pipeline,
        ObjectKind::Table,
        "p_v1",
        "stalled",
        "lacks SELECT on columns",
    )
    .await;
    assert!(
        error.lines().next().unwrap().ends_with(&format!(
            "lacks SELECT on columns of table {db}.p, which its snapshot needs: run GRANT SELECT ON {db}.p TO '{user}'@'%';"
        )),
        "{error}"
    );
    assert!(error.contains("error 1143"), "{error}");
    root.query_drop("INSERT INTO p VALUES (6, 6); DELETE FROM p WHERE id = 4;")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    drop(pipeline);

    // Granted: the restarted pipeline copies the table and streams it on.
    server
        .client_sql(&format!("GRANT SELECT ON `{db}`.p TO '{user}'@'%'"))
        .unwrap();
    let pipeline = pipeline_on(&env, &url, false).await;
    let running = Running::start(pipeline.clone());
    wait_state(
        &pipeline,
        "p_v1",
        TableState::Running,
        Duration::from_secs(60),
    )
    .await;
    root.query_drop("INSERT INTO p VALUES (7, 7); UPDATE p SET n = 11 WHERE id = 3;")
        .await
        .unwrap();
    let want = upstream_docs(&mut root).await;
    assert_eq!(want.len(), 5, "{want:?}");
    wait_until(
        "the sink to hold p's rows",
        Duration::from_secs(60),
        async || sink_rows(&sink, "p_json").await == want,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink_rows(&sink, "p_json").await, want);
    // Each row written once: its copy (1, 3, 5, 6), or its insert (7),
    // and 3's update; nothing before the grant, nothing twice.
    let writes: Vec<(String, String, i64)> = sink
        .query(
            "SELECT op, key::text, count(*) FROM public.p_json_audit GROUP BY 1, 2 ORDER BY 2, 1",
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let written = |op: &str, id: i32| (op.to_string(), format!("{{\"id\": {id}}}"), 1);
    assert_eq!(
        writes,
        vec![
            written("INSERT", 1),
            written("INSERT", 3),
            written("UPDATE", 3),
            written("INSERT", 5),
            written("INSERT", 6),
            written("INSERT", 7),
        ]
    );
    assert_eq!(
        source_status(&pipeline, &env.source).map(|s| s.0),
        Some("running".to_string())
    );
    running.stop().await;
    let _ = root.disconnect().await;
    let _ = server.client_sql(&format!("DROP USER '{user}'@'%'"));
}

/// A user without any privilege on the url's database: MariaDB refuses
/// the login itself with error 1044, to every session of the source. The
/// source stalls naming the user, the database and the GRANT (not a
/// connection failure retried forever); once granted, the restarted
/// pipeline copies the table and streams what was written meanwhile,
/// each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_database_stalls_the_source_naming_the_grant() {
    let env = my_env(STATE, "mysql_nodb").await;
    let db = env.my.name.clone();
    let server = shared_mariadb();
    let user = format!("rdb_{}", std::process::id());
    let url = format!("mysql://{user}:old_pw@127.0.0.1:{}/{db}", server.port());
    let mut root = my_conn(&env.my.url).await;
    root.query_drop(
        "CREATE TABLE p (id int PRIMARY KEY, n int NOT NULL); INSERT INTO p VALUES (1, 1);",
    )
    .await
    .unwrap();
    server
        .client_sql(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'old_pw'; \
             GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%';"
        ))
        .unwrap();
    let sink = connect(&env.sink.url).await;
    drop(pipeline_on(&env, &env.my.url, true).await);
    audit_sink(&sink, "p_json").await;
    let pipeline = pipeline_on(&env, &url, false).await;
    let running = Running::start(pipeline.clone());
    let error = wait_source(&pipeline, &env.source, "stalled", "lacks any privilege").await;
    assert!(
        error.contains(&format!(
            "user '{user}'@'%' lacks any privilege on database {db}, which each session of connection \"my\" needs"
        )),
        "{error}"
    );
    assert!(
        error.contains(&format!("run GRANT SELECT ON {db}.* TO '{user}'@'%';")),
        "{error}"
    );
    assert!(error.contains("error 1044"), "{error}");
    assert!(!error.contains("old_pw"), "the password leaked: {error}");
    // A new source of that user is refused with the same GRANT, not
    // "check the url" (the url is right).
    let refused = pipeline
        .create_mysql_source("nodb_again", "my")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!("run GRANT SELECT ON {db}.* TO '{user}'@'%';")),
        "{refused}"
    );
    root.query_drop("INSERT INTO p VALUES (2, 2)")
        .await
        .unwrap();
    running.stop().await;
    drop(pipeline);

    server
        .client_sql(&format!("GRANT SELECT ON `{db}`.* TO '{user}'@'%'"))
        .unwrap();
    let pipeline = pipeline_on(&env, &url, false).await;
    let running = Running::start(pipeline.clone());
    wait_rows(&sink, 2).await;
    root.query_drop("INSERT INTO p VALUES (3, 3)")
        .await
        .unwrap();
    wait_rows(&sink, 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "p_json").await, 3);
    assert_eq!(
        source_status(&pipeline, &env.source).map(|s| s.0),
        Some("running".to_string())
    );
    running.stop().await;
    let _ = root.disconnect().await;
    let _ = server.client_sql(&format!("DROP USER '{user}'@'%'"));
}
