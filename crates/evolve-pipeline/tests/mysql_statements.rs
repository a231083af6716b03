//! Upstream statements that change rows or remove tables without the
//! binlog logging rows for them: each stalls exactly the tables it
//! concerns, with the way out, instead of leaving their documents
//! silently different from the upstream rows; the source's other tables
//! go on.
//!
//! - a write run in a session with `binlog_format = STATEMENT` (or
//!   `MIXED`), logged as its text;
//! - `ALTER TABLE ... TRUNCATE PARTITION`, `DROP PARTITION` and `EXCHANGE
//!   PARTITION`, logged as the statement only;
//! - `DROP DATABASE`, whose tables are gone (one re-created under the
//!   name is not merged into them);
//! - `CREATE OR REPLACE TABLE ... SELECT`, whose DDL comes inside the
//!   event group that logs the new table's rows.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::mysql::*;
use common::*;
use evolve_pipeline::{Pipeline, TableSpec, TableState};
use mysql_async::prelude::Queryable;
use tokio_postgres::Client;

const CONVERGE: Duration = Duration::from_secs(30);

/// Where each test's state directory goes ([`my_env`]).
const STATE: &str = "evolve-mysql-statements";

/// Runs `sql` (one or more statements) upstream.
async fn run(my: &mut mysql_async::Conn, sql: &str) {
    my.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The source, and for each name: table `<name>_v1`, interface
/// `<name>_json`, sink `<name>_sink`, counted.
async fn create_all(pipeline: &Pipeline, env: &MyEnv, sink: &Client, names: &[&str]) {
    pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    for name in names {
        create_chain(pipeline, env, name).await;
        audit_sink(sink, &format!("{name}_json")).await;
    }
}

/// Waits until table `name` is stalled, and returns its error.
async fn stalled(pipeline: &Pipeline, name: &str) -> String {
    wait_state(pipeline, name, TableState::Stalled, CONVERGE).await;
    table_state(pipeline, name).1.unwrap()
}

/// Writes logged as statements (a session's `binlog_format`), and
/// partitions truncated, dropped or exchanged: the tables they wrote
/// stall at them with the way out, and never at a value; the others go
/// on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_changed_by_logged_statements_stall_their_tables() {
    let env = my_env(STATE, "my_stmt_rows").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    let parts = "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), \
                 PARTITION p1 VALUES LESS THAN MAXVALUE)";
    run(
        &mut my,
        &format!(
            "CREATE TABLE a (id int PRIMARY KEY, n int);
             CREATE TABLE b (id int PRIMARY KEY, n int);
             CREATE TABLE ok (id int PRIMARY KEY, n int);
             CREATE TABLE pt (id int PRIMARY KEY, n int) {parts};
             CREATE TABLE pd (id int PRIMARY KEY, n int) {parts};
             CREATE TABLE px (id int PRIMARY KEY, n int) {parts};
             CREATE TABLE swap (id int PRIMARY KEY, n int);
             INSERT INTO a VALUES (1, 1), (2, 2);
             INSERT INTO b VALUES (1, 1);
             INSERT INTO ok VALUES (1, 1);
             INSERT INTO pt VALUES (1, 1), (11, 11);
             INSERT INTO pd VALUES (1, 1), (11, 11);
             INSERT INTO px VALUES (1, 1), (11, 11);
             INSERT INTO swap VALUES (5, 5);"
        ),
    )
    .await;
    let names = ["a", "b", "ok", "pt", "pd", "px"];
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &names).await;
    let running = Running::start(pipeline.clone());
    for (name, rows) in [
        ("a", 2),
        ("b", 1),
        ("ok", 1),
        ("pt", 2),
        ("pd", 2),
        ("px", 2),
    ] {
        wait_writes(&sink, &format!("{name}_json"), rows).await;
    }

    // A session logging statements: its UPDATE of a and its INSERT into
    // b (with a value that must not show in the error) arrive as text.
    run(
        &mut my,
        "SET SESSION binlog_format = 'STATEMENT';
         UPDATE a SET n = 10 WHERE id = 1;
         INSERT INTO b VALUES (2, 123456789);
         SET SESSION binlog_format = 'ROW';
         INSERT INTO ok VALUES (2, 2);",
    )
    .await;
    let error = stalled(&pipeline, "a_v1").await;
    assert!(
        error.starts_with("the UPDATE at binlog offset ")
            && error.contains(
                "was logged as a statement, not as the rows it changed: the session that ran it had binlog_format STATEMENT or MIXED; set binlog_format = 'ROW' upstream"
            )
            && error.ends_with("then create the table again (a new table version's snapshot reads the table as it is)"),
        "{error}"
    );
    let error = stalled(&pipeline, "b_v1").await;
    assert!(error.starts_with("the INSERT at "), "{error}");
    assert!(!error.contains("123456789"), "{error}");
    wait_writes(&sink, "ok_json", 2).await;

    // Partitions: rows removed or swapped without a row event.
    run(
        &mut my,
        "ALTER TABLE pt TRUNCATE PARTITION p0;
         ALTER TABLE pd DROP PARTITION p0;
         ALTER TABLE px EXCHANGE PARTITION p0 WITH TABLE swap;
         INSERT INTO ok VALUES (3, 3);",
    )
    .await;
    let db = &env.my.name;
    for (name, statement) in [
        ("pt", "TRUNCATE PARTITION"),
        ("pd", "DROP PARTITION"),
        ("px", "EXCHANGE PARTITION"),
    ] {
        let error = stalled(&pipeline, &format!("{name}_v1")).await;
        assert!(
            error.starts_with(&format!("ALTER TABLE ... {statement} at binlog offset "))
                && error.ends_with(&format!(
                    "removed or replaced rows of upstream table \"{db}.{name}\" without logging them as rows, so evolve cannot tell which; create the table again (a new table version's snapshot reads the table as it is)"
                )),
            "{error}"
        );
    }
    wait_writes(&sink, "ok_json", 3).await;
    assert_eq!(table_state(&pipeline, "ok_v1").0, TableState::Running);
    // The stalled tables' sinks keep their last consistent state.
    for (name, rows) in [("a", 2), ("b", 1), ("pt", 2), ("pd", 2), ("px", 2)] {
        assert_eq!(
            audit_count(&sink, &format!("{name}_json")).await,
            rows,
            "{name}"
        );
    }
    running.stop().await;
    let _ = my.disconnect().await;
}

/// `DROP DATABASE` stalls every table of the database as `DROP TABLE`
/// does, and `CREATE OR REPLACE TABLE ... SELECT` the table it replaces:
/// rows of tables re-created under those names never reach them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_databases_and_tables_replaced_by_a_select_stall_their_tables() {
    let env = my_env(STATE, "my_stmt_drop").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    let other = format!("{}_other", env.my.name);
    run(
        &mut my,
        &format!(
            "CREATE TABLE r (id int PRIMARY KEY, n int);
             CREATE TABLE ok (id int PRIMARY KEY, n int);
             INSERT INTO r VALUES (1, 1), (2, 2);
             INSERT INTO ok VALUES (1, 1);
             CREATE DATABASE `{other}`;
             CREATE TABLE `{other}`.d (id int PRIMARY KEY, n int);
             INSERT INTO `{other}`.d VALUES (1, 1);"
        ),
    )
    .await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env, &sink, &["r", "ok"]).await;
    pipeline
        .create_table(&TableSpec {
            name: "d_v1".into(),
            source: env.source.clone(),
            schema: other.clone(),
            table: "d".into(),
            ..TableSpec::default()
        })
        .await
        .unwrap();
    pipeline.create_interface("d_json", "d_v1").unwrap();
    pipeline
        .create_sink("d_sink", "d_json", "sink", "public", "d_json")
        .await
        .unwrap();
    audit_sink(&sink, "d_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "r_json", 2).await;
    wait_writes(&sink, "ok_json", 1).await;
    wait_writes(&sink, "d_json", 1).await;

    run(
        &mut my,
        &format!(
            "CREATE OR REPLACE TABLE r (id int PRIMARY KEY, n int) SELECT 7 AS id, 7 AS n;
             DROP DATABASE `{other}`;
             CREATE DATABASE `{other}`;
             CREATE TABLE `{other}`.d (id int PRIMARY KEY, n int);
             INSERT INTO `{other}`.d VALUES (5, 5);
             INSERT INTO r VALUES (8, 8);
             INSERT INTO ok VALUES (2, 2);"
        ),
    )
    .await;
    let db = &env.my.name;
    for (name, table) in [("r_v1", format!("{db}.r")), ("d_v1", format!("{other}.d"))] {
        assert_eq!(
            stalled(&pipeline, name).await,
            format!(
                "upstream table \"{table}\" was dropped or replaced by another table of that name; its changes no longer reach this table"
            )
        );
    }
    wait_writes(&sink, "ok_json", 2).await;
    // Nothing of the new tables reached the old ones' documents.
    assert_eq!(audit_count(&sink, "r_json").await, 2);
    assert_eq!(audit_count(&sink, "d_json").await, 1);
    running.stop().await;
    run(&mut my, &format!("DROP DATABASE `{other}`")).await;
    let _ = my.disconnect().await;
}
