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
