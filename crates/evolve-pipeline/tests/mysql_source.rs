//! The MySQL source against a real MariaDB server (the harness's): a
//! snapshot joined to the binlog stream into a PostgreSQL sink with exact
//! counts and documents, every type's document equal to PostgreSQL's
//! `to_jsonb` of the mapped type, resume after SIGKILL under load with
//! nothing lost or applied twice, a binlog connection gone silent
//! failing and reconnecting, MariaDB's compressed binlog events read as
//! their uncompressed counterparts, and the refusals of CREATE SOURCE and
//! CREATE TABLE.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::mysql::*;
use common::*;
use evolve_pipeline::source::mysql::{is_gtid_position, mariadb_position};
use evolve_pipeline::store::Store;
use evolve_pipeline::{Config, Pipeline, Position, TableSpec, TableState};
use evolve_test::{MariaDb, MariaDbOptions};
use mysql_async::prelude::Queryable;
use tokio_postgres::Client;

/// Where each test's state directory goes ([`my_env`]).
const STATE: &str = "evolve-mysql-test";

/// Waits until table `name` is running; panics with every object's
/// status after `timeout`.
async fn wait_running(pipeline: &Pipeline, name: &str, timeout: Duration) {
    let start = std::time::Instant::now();
    while table_state(pipeline, name).0 != TableState::Running {
        assert!(
            start.elapsed() < timeout,
            "table {name} is not running after {timeout:?}: {:?}\n{:#?}",
            table_state(pipeline, name),
            pipeline.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Table `k (id, n)` in `env`'s database, its chain into `k_json` with
/// every sink write audited, and the pipeline running: a connection to
/// the server, one to the sink, and the running pipeline.
async fn audited_k(env: &MyEnv) -> (mysql_async::Conn, tokio_postgres::Client, Running) {
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop("CREATE TABLE k (id int PRIMARY KEY, n int NOT NULL)")
        .await
        .unwrap();
    let pipeline = pipeline_with_chain(env, env.config.clone(), "k").await;
    audit_sink(&sink, "k_json").await;
    (my, sink, Running::start(pipeline))
}

/// `(key, data)` of the sink table, as PostgreSQL prints them.
/// A pipeline on `config` with MySQL source `env.source` (connection
/// `my`) and `table`'s chain: `<table>_v1`, `<table>_json` and its sink.
async fn pipeline_with_chain(env: &MyEnv, config: Config, table: &str) -> Arc<Pipeline> {
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    create_chain(&pipeline, env, table).await;
    pipeline
}

async fn sink_docs(sink: &Client, table: &str) -> Vec<(String, String)> {
    if !sink_exists(sink, table).await {
        return Vec::new();
    }
    sink_rows(sink, table).await
}

/// The documents PostgreSQL makes of `expected` (a table on the sink's
/// server with the mapped types), keyed as the sink keys them.
async fn expected_docs(sink: &Client, expected: &str) -> Vec<(String, String)> {
    sink.query(
        &format!(
            "SELECT jsonb_build_object('id', x_row.id)::text, \
                    coalesce(jsonb_strip_nulls(to_jsonb(x_row)), '{{}}')::text \
             FROM {expected} x_row ORDER BY 1"
        ),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Waits until sink table `table` holds exactly the documents PostgreSQL
/// makes of `expected` ([`expected_docs`]), which are `rows`; returns
/// them.
async fn wait_expected(
    pipeline: &Pipeline,
    sink: &Client,
    expected: &str,
    table: &str,
    rows: usize,
) -> Vec<(String, String)> {
    let want = expected_docs(sink, expected).await;
    assert_eq!(want.len(), rows, "rows of {expected}");
    wait_docs(Some(pipeline), sink, table, &want, Duration::from_secs(60)).await;
    want
}

/// Waits until the sink's documents are exactly `want` (text equal);
/// panics with the first difference.
async fn wait_docs(
    pipeline: Option<&Pipeline>,
    sink: &Client,
    table: &str,
    want: &[(String, String)],
    timeout: Duration,
) {
    let start = std::time::Instant::now();
    loop {
        let got = sink_docs(sink, table).await;
        if got == want {
            return;
        }
        if start.elapsed() > timeout {
            let first = got
                .iter()
                .zip(want)
                .find(|(g, w)| g != w)
                .map(|(g, w)| format!("got {g:?}\nwant {w:?}"));
            panic!(
                "sink {table} has {} documents, {} expected; first difference: {}\n{:#?}",
                got.len(),
                want.len(),
                first.unwrap_or_else(|| "(a prefix is equal)".into()),
                pipeline.map(|p| p.status())
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Copies `<db>.<table>`'s rows (selected as text by `select`) into
/// PostgreSQL table `expected` of the sink's server, whose columns have
/// the mapped types.
async fn mirror(
    my: &mut mysql_async::Conn,
    sink: &Client,
    select: &str,
    expected: &str,
    types: &[&str],
) {
    let rows: Vec<mysql_async::Row> = my.query(select).await.unwrap();
    sink.batch_execute(&format!("TRUNCATE {expected}"))
        .await
        .unwrap();
    for row in rows {
        let values: Vec<Option<String>> = (0..row.len())
            .map(|i| row.get::<Option<String>, _>(i).unwrap())
            .collect();
        let placeholders: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::text::{t}", i + 1))
            .collect();
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
            .iter()
            .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        sink.execute(
            &format!(
                "INSERT INTO {expected} VALUES ({})",
                placeholders.join(", ")
            ),
            &params,
        )
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_binlog_inserts_updates_deletes_reach_the_sink_exactly() {
    let env = my_env(STATE, "mysql_stream").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop(
        "CREATE TABLE orders (id int PRIMARY KEY, note varchar(40), amount decimal(10,2) NOT NULL, qty smallint unsigned)",
    )
    .await
    .unwrap();
    // 300 rows before the table exists in evolve: the snapshot's.
    for chunk in 0..3 {
        let values: Vec<String> = (1..=100)
            .map(|i| {
                let id = chunk * 100 + i;
                format!("({id}, 'n{id}', {id}.50, {})", id % 7)
            })
            .collect();
        my.query_drop(format!("INSERT INTO orders VALUES {}", values.join(", ")))
            .await
            .unwrap();
    }
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let source = pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    assert_eq!(source.kind, evolve_pipeline::store::SourceKind::Mysql);
    // Written between CREATE SOURCE and the snapshot: in the snapshot or
    // the stream, never both.
    my.query_drop("UPDATE orders SET note = 'before the table' WHERE id = 1")
        .await
        .unwrap();
    create_chain(&pipeline, &env, "orders").await;
    let running = Running::start(pipeline.clone());
    wait_running(&pipeline, "orders_v1", Duration::from_secs(60)).await;
    // The stream: single statements, a multi-statement transaction, a
    // rolled-back one, NULLs, and a key update.
    my.query_drop("INSERT INTO orders VALUES (1001, NULL, 0.05, NULL)")
        .await
        .unwrap();
    my.query_drop("UPDATE orders SET amount = amount * 2, note = CONCAT(note, '!') WHERE id <= 50")
        .await
        .unwrap();
    my.query_drop("DELETE FROM orders WHERE id BETWEEN 101 AND 120")
        .await
        .unwrap();
    my.query_drop(
        "START TRANSACTION; INSERT INTO orders VALUES (1002, 'tx', 1.00, 1); \
         UPDATE orders SET qty = 65535 WHERE id = 1002; DELETE FROM orders WHERE id = 300; COMMIT",
    )
    .await
    .unwrap();
    my.query_drop("START TRANSACTION; INSERT INTO orders VALUES (1003, 'gone', 1, 1); ROLLBACK")
        .await
        .unwrap();
    my.query_drop("UPDATE orders SET id = 2000 WHERE id = 299")
        .await
        .unwrap();

    sink.batch_execute(
        "CREATE TABLE expected_orders (id int, note text, amount numeric, qty int4)",
    )
    .await
    .unwrap();
    mirror(
        &mut my,
        &sink,
        "SELECT CAST(id AS CHAR), note, CAST(amount AS CHAR), CAST(qty AS CHAR) FROM orders",
        "expected_orders",
        &["int", "text", "numeric", "int4"],
    )
    .await;
    let want = wait_expected(
        &pipeline,
        &sink,
        "expected_orders",
        "orders_json",
        300 - 20 - 1 + 2,
    )
    .await;
    assert!(
        want.iter().any(
            |(_, d)| d == r#"{"id": 1, "qty": 1, "note": "before the table!", "amount": 3.00}"#
        ),
        "{:?}",
        &want[..2]
    );
    // TRUNCATE, logged as a statement, deletes every document.
    my.query_drop("TRUNCATE TABLE orders").await.unwrap();
    my.query_drop("INSERT INTO orders VALUES (7, 'after truncate', 7.00, 7)")
        .await
        .unwrap();
    wait_docs(
        Some(&pipeline),
        &sink,
        "orders_json",
        &[(
            r#"{"id": 7}"#.to_string(),
            r#"{"id": 7, "qty": 7, "note": "after truncate", "amount": 7.00}"#.to_string(),
        )],
        Duration::from_secs(60),
    )
    .await;
    // Positions are GTID positions (MariaDB always logs GTIDs).
    let applied = pipeline.sources().unwrap()[0].applied_lsn;
    assert!(
        applied > source.applied_lsn,
        "{applied} after {}",
        source.applied_lsn
    );
    assert!(
        is_gtid_position(source.applied_lsn),
        "{}",
        source.applied_lsn
    );
    running.stop().await;
    let _ = my.disconnect().await;
}

/// Every mapped type, loaded into MariaDB and (through the mapped types)
/// into PostgreSQL: evolve's documents, from the snapshot and from the
/// binlog, are PostgreSQL's `to_jsonb` text byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mapped_type_gives_postgres_to_jsonb_from_snapshot_and_binlog() {
    let env = my_env(STATE, "mysql_types").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop("SET time_zone = '+00:00'").await.unwrap();
    my.query_drop(
        "CREATE TABLE typed (
            id int PRIMARY KEY,
            ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned,
            mi mediumint, mu mediumint unsigned, i int, iu int unsigned,
            bi bigint, bu bigint unsigned, d decimal(20,4), f float, db double,
            b bit(10), c char(5), vc varchar(20), t text,
            l1 varchar(10) CHARACTER SET latin1,
            bn binary(4), vb varbinary(10), bl blob,
            dt date, tm time(3), dtm datetime(6), ts timestamp(2) NULL DEFAULT NULL,
            y year, e enum('small','large'), s set('a','b','c'), j json, n int
        )",
    )
    .await
    .unwrap();
    // (MariaDB literal, PostgreSQL literal) per column after id.
    let rows: Vec<Vec<(&str, &str)>> = vec![
        vec![
            ("-128", "-128"),
            ("255", "255"),
            ("-32768", "-32768"),
            ("65535", "65535"),
            ("-8388608", "-8388608"),
            ("16777215", "16777215"),
            ("-2147483648", "-2147483648"),
            ("4294967295", "4294967295"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("18446744073709551615", "18446744073709551615"),
            ("-12345678901234.5678", "-12345678901234.5678"),
            ("1.5", "1.5"),
            ("1e-300", "1e-300"),
            ("b'1010101010'", "B'1010101010'"),
            ("'ab'", "'ab'"),
            ("'héllo ☃ 😀'", "'héllo ☃ 😀'"),
            ("'a\\nb \"q\" \\\\'", "E'a\\nb \"q\" \\\\'"),
            ("'café €'", "'café €'"),
            ("x'0a00'", "'\\x0a000000'"),
            ("x'00ff'", "'\\x00ff'"),
            ("x'deadbeef'", "'\\xdeadbeef'"),
            ("'2024-02-29'", "'2024-02-29'"),
            ("'-838:59:59.000'", "'-838:59:59'"),
            (
                "'2024-01-31 23:59:58.123456'",
                "'2024-01-31 23:59:58.123456'",
            ),
            ("'2024-01-31 12:00:00.50'", "'2024-01-31 12:00:00.50+00'"),
            ("2024", "2024"),
            ("'large'", "'large'"),
            ("'a,c'", "'a,c'"),
            (
                "'{\"b\": [1, 2.50, null], \"a\": \"x\"}'",
                "'{\"b\": [1, 2.50, null], \"a\": \"x\"}'",
            ),
            ("NULL", "NULL"),
        ],
        vec![
            ("127", "127"),
            ("0", "0"),
            ("32767", "32767"),
            ("0", "0"),
            ("8388607", "8388607"),
            ("0", "0"),
            ("2147483647", "2147483647"),
            ("0", "0"),
            ("9223372036854775807", "9223372036854775807"),
            ("0", "0"),
            ("0.0100", "0.0100"),
            ("0.1", "0.1"),
            ("-1.7976931348623157e308", "-1.7976931348623157e308"),
            ("b'0000000001'", "B'0000000001'"),
            ("''", "''"),
            ("'x'", "'x'"),
            ("''", "''"),
            ("'Ÿ'", "'Ÿ'"),
            ("x'00000000'", "'\\x00000000'"),
            ("x''", "'\\x'"),
            ("x'00'", "'\\x00'"),
            ("'1000-01-01'", "'1000-01-01'"),
            ("'12:34:56.789'", "'12:34:56.789'"),
            ("'9999-12-31 23:59:59'", "'9999-12-31 23:59:59'"),
            ("'1970-01-02 00:00:00'", "'1970-01-02 00:00:00+00'"),
            ("1901", "1901"),
            ("'small'", "'small'"),
            ("''", "''"),
            ("'[]'", "'[]'"),
            ("7", "7"),
        ],
        vec![("NULL", "NULL"); 30],
    ];
    let pg_types = [
        "int2",
        "int2",
        "int2",
        "int4",
        "int4",
        "int4",
        "int4",
        "int8",
        "int8",
        "numeric",
        "numeric",
        "float4",
        "float8",
        "bit(10)",
        "text",
        "text",
        "text",
        "text",
        "bytea",
        "bytea",
        "bytea",
        "date",
        "interval",
        "timestamp",
        "timestamptz",
        "int2",
        "text",
        "text",
        "jsonb",
        "int4",
    ];
    let columns: Vec<String> = pg_types
        .iter()
        .enumerate()
        .map(|(i, t)| format!("c{i} {t}"))
        .collect();
    sink.batch_execute(&format!(
        "SET TimeZone = 'UTC'; CREATE TABLE expected_typed (id int, {})",
        columns.join(", ")
    ))
    .await
    .unwrap();
    // Each row once through the snapshot (ids 1..3) and once through the
    // binlog (ids 11..13).
    let insert = |id: usize, row: &[(&str, &str)]| {
        (
            format!(
                "INSERT INTO typed VALUES ({id}, {})",
                row.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
            ),
            format!(
                "INSERT INTO expected_typed VALUES ({id}, {})",
                row.iter().map(|(_, p)| *p).collect::<Vec<_>>().join(", ")
            ),
        )
    };
    for (n, row) in rows.iter().enumerate() {
        let (m, p) = insert(n + 1, row);
        my.query_drop(m).await.unwrap();
        sink.batch_execute(&p).await.unwrap();
    }
    let pipeline = pipeline_with_chain(&env, env.config.clone(), "typed").await;
    let running = Running::start(pipeline.clone());
    wait_running(&pipeline, "typed_v1", Duration::from_secs(60)).await;
    for (n, row) in rows.iter().enumerate() {
        let (m, p) = insert(n + 11, row);
        my.query_drop(m).await.unwrap();
        sink.batch_execute(&p).await.unwrap();
    }
    // The expected table's columns are named c0..; the documents are
    // compared under the MariaDB names.
    let names = [
        "ti", "tu", "si", "su", "mi", "mu", "i", "iu", "bi", "bu", "d", "f", "db", "b", "c", "vc",
        "t", "l1", "bn", "vb", "bl", "dt", "tm", "dtm", "ts", "y", "e", "s", "j", "n",
    ];
    let renames: String = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("ALTER TABLE expected_typed RENAME COLUMN c{i} TO {n};"))
        .collect();
    sink.batch_execute(&renames).await.unwrap();
    wait_expected(&pipeline, &sink, "expected_typed", "typed_json", 6).await;
    running.stop().await;
    let _ = my.disconnect().await;
}

/// MariaDB's UUID (a primary key here), INET4 and INET6 columns reach the
/// binlog as fixed binary strings without their trailing zero bytes
/// (MariaDB's records reverse a UUID's groups for versions 1 to 5, its
/// binlog does not): from the snapshot and from the binlog, inserts,
/// updates found by the UUID key and deletes, the documents are
/// PostgreSQL's `to_jsonb` of `uuid` and `inet` byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_uuid_and_inet_columns_give_postgres_to_jsonb() {
    let env = my_env(STATE, "mysql_uuid_inet").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop("CREATE TABLE addr (id uuid PRIMARY KEY, v4 inet4, v6 inet6, n int)")
        .await
        .unwrap();
    sink.batch_execute("CREATE TABLE expected_addr (id uuid, v4 inet, v6 inet, n int)")
        .await
        .unwrap();
    // The same literals work on both servers. Per id: version 1 and 4
    // (records swapped), version 7 and nil (records as they are), not the
    // RFC variant, upper case; values ending in zero bytes and in 0x20;
    // IPv4-mapped, IPv4-compatible and compressed IPv6 addresses.
    let snapshot_rows = [
        "'6ccd780c-baba-1026-9564-5b8c656024db', '192.0.2.1', '2001:db8::1', 1",
        "'a0eebc00-9c0b-4ef8-bb6d-6bb9bd380a00', '0.0.0.0', '::ffff:1.2.3.4', 2",
        "'01890a5d-ac96-774b-bcce-b30209000000', '255.255.255.255', '::', 3",
        "'00000000-0000-0000-0000-000000000000', '10.0.0.0', '2001:db8:0:0:1:0:0:1', NULL",
        "'6ccd7820-baba-1026-1564-5b8c65602420', NULL, '::1.2.3.4', 5",
        "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '1.2.3.4', 'fe80:0:0:1::', 6",
    ];
    let binlog_rows = [
        "'7ccd780c-baba-1026-9564-5b8c656024db', '198.51.100.7', '2001:db8::2', 11",
        "'b0eebc00-9c0b-4ef8-bb6d-6bb9bd380a00', '0.0.0.1', '::ffff:0.0.0.0', 12",
        "'02890a5d-ac96-774b-bcce-b30209000000', '255.0.0.0', '::1', 13",
        "'ffffffff-ffff-ffff-ffff-ffffffffffff', '10.0.0.0', '0:0:1::', NULL",
        "'7ccd7820-baba-1026-1564-5b8c65602420', NULL, '::0.0.0.2', 15",
        "'B0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '100.64.0.0', 'FE80::ABCD:0:0', 16",
    ];
    for row in snapshot_rows {
        my.query_drop(format!("INSERT INTO addr VALUES ({row})"))
            .await
            .unwrap();
        sink.batch_execute(&format!("INSERT INTO expected_addr VALUES ({row})"))
            .await
            .unwrap();
    }
    let pipeline = pipeline_with_chain(&env, env.config.clone(), "addr").await;
    let running = Running::start(pipeline.clone());
    wait_running(&pipeline, "addr_v1", Duration::from_secs(60)).await;
    let mut statements: Vec<String> = binlog_rows
        .iter()
        .map(|row| format!("INSERT INTO {{table}} VALUES ({row})"))
        .collect();
    // Updates and a delete find their rows by the UUID key.
    statements.push("UPDATE {table} SET n = coalesce(n, 0) + 100 WHERE v4 IS NOT NULL".into());
    statements.push("DELETE FROM {table} WHERE id = '6ccd780c-baba-1026-9564-5b8c656024db'".into());
    statements.push("DELETE FROM {table} WHERE id = 'b0eebc00-9c0b-4ef8-bb6d-6bb9bd380a00'".into());
    for statement in &statements {
        my.query_drop(statement.replace("{table}", "addr"))
            .await
            .unwrap();
        sink.batch_execute(&statement.replace("{table}", "expected_addr"))
            .await
            .unwrap();
    }
    wait_expected(&pipeline, &sink, "expected_addr", "addr_json", 10).await;
    running.stop().await;
    let _ = my.disconnect().await;
}

/// The child process; killed with SIGKILL when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_child(config: &std::path::Path) -> Guard {
    Guard(
        Command::new(env!("CARGO_BIN_EXE_evolve-pipeline-run"))
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start evolve-pipeline-run"),
    )
}

fn kill(child: &mut Guard, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.0.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {}", child.0.id());
    child.0.wait().expect("reap the child");
}

/// Source `source`'s applied position and resume state in the state
/// store of `state_dir`, as the next engine resumes from them: read while
/// no engine runs there (the engine lock is taken, which fails while one
/// does), in one statement, so one snapshot of the row: the two are
/// always the pair one store transaction wrote, never a position of one
/// commit with the state of another.
fn stored_resume_point(state_dir: &std::path::Path, source: &str) -> (Position, String) {
    let _engine = Store::lock_engine(state_dir)
        .unwrap_or_else(|e| panic!("an engine still runs on the state directory: {e}"));
    let db = rusqlite::Connection::open(state_dir.join("pipeline.db")).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    let (applied, state): (i64, Option<String>) = db
        .query_row(
            "SELECT applied_lsn, resume_state FROM sources WHERE name = ?1",
            [source],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let state = state.unwrap_or_else(|| panic!("source {source} has no resume state"));
    (Position::from_u64(applied as u64), state)
}

/// SIGKILL of the pipeline's process at several moments while MariaDB
/// keeps writing, and one graceful stop (SIGTERM): after restarts from
/// the stored GTID state, the sink equals the upstream and got every
/// change exactly once (a trigger counts them), and the stored position
/// is the stored GTID state's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_resumes_from_the_binlog_position_without_loss_or_duplicates() {
    // A server of its own: on the shared one, an XA transaction another
    // test holds prepared (xa_transactions_reach_the_sink_at_their_commit_only
    // holds one for seconds) is in this source's binlog too, and while it
    // is prepared the resume state stored with each commit is the state
    // before its prepare (see the source's "XA transactions"), not the
    // applied position's own, which the check below compares exactly.
    let server = tokio::task::spawn_blocking(|| MariaDb::start().unwrap())
        .await
        .unwrap();
    let db = server.create_database("mysql_crash").unwrap();
    let env = my_env_on(STATE, "mysql_crash", db).await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop("CREATE TABLE k (id int PRIMARY KEY, n int NOT NULL, pad varchar(60))")
        .await
        .unwrap();
    pipeline_with_chain(&env, env.config.clone(), "k").await;
    sink.batch_execute(
        "CREATE TABLE public.k_json_audit (op text, key jsonb, same bool);
         CREATE FUNCTION public.k_json_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF TG_OP = 'DELETE' THEN
             INSERT INTO public.k_json_audit VALUES (TG_OP, OLD.key, false);
           ELSIF TG_OP = 'UPDATE' THEN
             INSERT INTO public.k_json_audit VALUES (TG_OP, NEW.key, OLD.data = NEW.data);
           ELSE
             INSERT INTO public.k_json_audit VALUES (TG_OP, NEW.key, false);
           END IF;
           RETURN NULL;
         END $$;",
    )
    .await
    .unwrap();
    let config_path = env.state.with_extension("toml");
    std::fs::write(
        &config_path,
        format!(
            "state_dir = {:?}\n[connections.my]\nurl = {:?}\n[connections.sink]\nurl = {:?}\n",
            env.state.display().to_string(),
            env.my.url,
            env.sink.url
        ),
    )
    .unwrap();
    let mut child = start_child(&config_path);
    wait_until(
        "the initial load (k_sink's progress row)",
        Duration::from_secs(60),
        async || {
            sink.query_one(
                "SELECT to_regclass('public.evolve_sink_progress') IS NOT NULL \
                 AND EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = 'k_sink')",
                &[],
            )
            .await
            .unwrap()
            .get(0)
        },
    )
    .await;
    sink.batch_execute(
        "CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.k_json
           FOR EACH ROW EXECUTE FUNCTION public.k_json_audit_fn();",
    )
    .await
    .unwrap();

    // Transaction i inserts i, updates i - 1, and every tenth deletes i - 2.
    let writer_url = env.my.url.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let mut w = my_conn(&writer_url).await;
        let mut i: i32 = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                let _ = w.disconnect().await;
                return i;
            }
            i += 1;
            let delete = if i % 10 == 0 {
                format!("DELETE FROM k WHERE id = {};", i - 2)
            } else {
                String::new()
            };
            w.query_drop(format!(
                "START TRANSACTION; INSERT INTO k VALUES ({i}, 0, REPEAT('p', 50)); \
                 UPDATE k SET n = n + 1 WHERE id = {prev}; {delete} COMMIT",
                prev = i - 1
            ))
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    for (delay, signal) in [(300, 9), (700, 9), (900, 15), (1200, 9), (500, 9)] {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        kill(&mut child, signal);
        // What the restart resumes from: a GTID state, and the position
        // it stands for, stored together (no XA transaction is prepared
        // on this server: the state is the position's own).
        let (applied, state) = stored_resume_point(&env.state, &env.source);
        assert_eq!(mariadb_position(&state), Some(applied), "{state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        child = start_child(&config_path);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    let n = writer.await.unwrap();
    assert!(n > 50, "the writer ran only {n} transactions");

    sink.batch_execute("CREATE TABLE expected_k (id int, n int, pad text)")
        .await
        .unwrap();
    mirror(
        &mut my,
        &sink,
        "SELECT CAST(id AS CHAR), CAST(n AS CHAR), pad FROM k",
        "expected_k",
        &["int", "int", "text"],
    )
    .await;
    let want = expected_docs(&sink, "expected_k").await;
    wait_docs(None, &sink, "k_json", &want, Duration::from_secs(60)).await;
    kill(&mut child, 15);

    let expected_deletes = (1..=n).filter(|i| i % 10 == 0 && *i >= 3).count() as i64;
    let counts = sink
        .query_one(
            "SELECT count(*) FILTER (WHERE op = 'INSERT'), count(*) FILTER (WHERE op = 'UPDATE'), \
                    count(*) FILTER (WHERE op = 'DELETE'), count(*) FILTER (WHERE same) \
             FROM public.k_json_audit",
            &[],
        )
        .await
        .unwrap();
    let (inserts, updates, deletes, same): (i64, i64, i64, i64) =
        (counts.get(0), counts.get(1), counts.get(2), counts.get(3));
    assert_eq!(
        same, 0,
        "a write left a document as it was (a replayed transaction)"
    );
    assert_eq!(inserts, i64::from(n), "inserts");
    assert_eq!(updates, i64::from(n) - 1, "updates");
    assert_eq!(deletes, expected_deletes, "deletes");
    let _ = std::fs::remove_file(&config_path);
    let _ = my.disconnect().await;
}

/// CREATE SOURCE refuses a server whose binlog is not row-based, naming the
/// setting and its value and saying what to set; a user without the
/// replication privileges, naming them and the GRANT; and a server that
/// cannot be reached, without the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_source_refuses_statement_binlogs_and_missing_privileges() {
    let server = tokio::task::spawn_blocking(|| {
        MariaDb::start_with(MariaDbOptions {
            settings: vec![("binlog_format".into(), "STATEMENT".into())],
        })
        .unwrap()
    })
    .await
    .unwrap();
    let state = std::env::temp_dir().join(format!("evolve-mysql-refuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let pg_url = tokio::task::spawn_blocking(sink_cluster)
        .await
        .unwrap()
        .url("postgres");
    let pipeline = Pipeline::open(
        Config::new(&state)
            .with_connection("stmt", server.url("mysql"))
            .with_connection("pg", pg_url),
    )
    .unwrap();
    let e = pipeline.create_mysql_source("s", "stmt").await.unwrap_err();
    assert_eq!(
        e.primary(),
        "MySQL source \"s\" cannot read connection \"stmt\"'s binlog: binlog_format is STATEMENT"
    );
    assert!(
        e.hint().unwrap().starts_with(
            "SET GLOBAL binlog_format = 'ROW'; set them in the server's configuration file"
        ),
        "{e}"
    );
    assert!(pipeline.sources().unwrap().is_empty());
    // A PostgreSQL connection is not a MySQL one.
    let e = pipeline.create_mysql_source("s", "pg").await.unwrap_err();
    assert!(e.primary().contains("is not a MySQL connection"), "{e}");

    // A user who may only SELECT.
    server
        .client_sql(
            "SET GLOBAL binlog_format = 'ROW'; CREATE USER 'reader'@'%' IDENTIFIED BY 'r3ad'; \
             GRANT SELECT ON *.* TO 'reader'@'%';",
        )
        .unwrap();
    let reader_url = format!("mysql://reader:r3ad@127.0.0.1:{}/mysql", server.port());
    let pipeline =
        Pipeline::open(Config::new(&state).with_connection("reader", reader_url)).unwrap();
    let e = pipeline
        .create_mysql_source("s", "reader")
        .await
        .unwrap_err();
    assert_eq!(
        e.primary(),
        "MySQL source \"s\": user 'reader'@'%' of connection \"reader\" lacks REPLICATION SLAVE, REPLICATION CLIENT"
    );
    assert_eq!(
        e.hint().as_deref(),
        Some("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'reader'@'%';")
    );
    assert!(!e.to_string().contains("r3ad"), "the password leaked: {e}");
    drop(pipeline);

    // A server nobody answers for: refused in one line, nothing created.
    let pipeline = Pipeline::open(
        Config::new(&state).with_connection("gone", "mysql://evolve:hunter2@127.0.0.1:1/shop"),
    )
    .unwrap();
    let e = pipeline.create_mysql_source("s", "gone").await.unwrap_err();
    assert_eq!(
        e.primary(),
        "could not connect to connection \"gone\" (mysql://evolve:***@127.0.0.1:1/shop)"
    );
    assert_eq!(
        e.detail().as_deref(),
        Some("Connection refused (os error 111)")
    );
    assert!(
        e.hint().is_some_and(|h| h.contains("server is running")),
        "{e}"
    );
    assert!(
        !e.to_string().contains("hunter2"),
        "the password leaked: {e}"
    );
    assert!(pipeline.sources().unwrap().is_empty());
    drop(pipeline);
    let _ = std::fs::remove_dir_all(&state);
}

/// XA transactions: a prepared one's changes reach the sink at its `XA
/// COMMIT`, in the commit's place in the stream, even across a restart
/// of the pipeline between the prepare and the commit; a rolled-back one
/// never does; CREATE SOURCE refuses to start while one is prepared.
/// Counted: one sink write per row change of each committed transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xa_transactions_reach_the_sink_at_their_commit_only() {
    // A server of its own: the XA transaction it holds prepared would be
    // in every other test's binlog (moving their resume states back to
    // before its prepare) and would make their CREATE SOURCE refuse.
    let server = tokio::task::spawn_blocking(|| MariaDb::start().unwrap())
        .await
        .unwrap();
    let db = server.create_database("my_xa").unwrap();
    let env = my_env_on(STATE, "my_xa", db).await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop(
        "CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL);
         INSERT INTO orders VALUES (1, 1);",
    )
    .await
    .unwrap();
    let pipeline = pipeline_with_chain(&env, env.config.clone(), "orders").await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    let ids = async || -> Vec<i64> {
        sink_docs(&sink, "orders_json")
            .await
            .iter()
            .map(|(k, _)| key_id(k))
            .collect()
    };
    wait_writes(&sink, "orders_json", 1).await;

    // Prepared (its session then ends: MariaDB keeps it prepared), then
    // an ordinary transaction after it.
    let mut xa = my_conn(&env.my.url).await;
    xa.query_drop(
        "XA START 'x1'; INSERT INTO orders VALUES (2, 2); UPDATE orders SET qty = 10 WHERE id = 1;
         XA END 'x1'; XA PREPARE 'x1';",
    )
    .await
    .unwrap();
    drop(xa);
    my.query_drop("INSERT INTO orders VALUES (3, 3)")
        .await
        .unwrap();
    wait_writes(&sink, "orders_json", 2).await;
    assert_eq!(
        ids().await,
        vec![1, 3],
        "the prepared changes wait for the commit"
    );

    // CREATE SOURCE would start after the prepare: refused.
    let e = pipeline
        .create_mysql_source("late", "my")
        .await
        .unwrap_err();
    assert!(
        e.primary().contains("1 prepared XA transaction(s): 'x1'"),
        "{e}"
    );
    assert_eq!(pipeline.sources().unwrap().len(), 1);

    // Restarted while prepared: the stream reads the prepare again.
    running.stop().await;
    let running = Running::start(pipeline.clone());
    my.query_drop("INSERT INTO orders VALUES (4, 4)")
        .await
        .unwrap();
    wait_writes(&sink, "orders_json", 3).await;
    assert_eq!(ids().await, vec![1, 3, 4]);
    my.query_drop("XA COMMIT 'x1'").await.unwrap();
    wait_writes(&sink, "orders_json", 5).await;
    assert_eq!(ids().await, vec![1, 2, 3, 4]);
    let qty: i64 = sink
        .query_one(
            "SELECT (data->>'qty')::int8 FROM public.orders_json WHERE key = '{\"id\": 1}'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(qty, 10);

    // Rolled back: nothing; the stream goes on.
    my.query_drop(
        "XA START 'x2'; INSERT INTO orders VALUES (5, 5); XA END 'x2'; XA PREPARE 'x2';
         XA ROLLBACK 'x2'; INSERT INTO orders VALUES (6, 6);",
    )
    .await
    .unwrap();
    wait_writes(&sink, "orders_json", 6).await;
    assert_eq!(ids().await, vec![1, 2, 3, 4, 6]);
    // And once more across a restart after everything ended.
    running.stop().await;
    let running = Running::start(pipeline.clone());
    my.query_drop("INSERT INTO orders VALUES (7, 7)")
        .await
        .unwrap();
    wait_writes(&sink, "orders_json", 7).await;
    assert_eq!(ids().await, vec![1, 2, 3, 4, 6, 7]);
    running.stop().await;
}

/// CREATE TABLE refuses an upstream table without a primary key (updates
/// and deletes could not be matched), one that does not exist, and a
/// column evolve cannot convert (text in a charset other than UTF-8's,
/// ASCII and latin1; MariaDB 10.11 has no type without a mapping) unless
/// it is excluded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_table_refuses_tables_without_a_primary_key() {
    let env = my_env(STATE, "mysql_nopk").await;
    let mut my = my_conn(&env.my.url).await;
    my.query_drop(
        "CREATE TABLE heap (id int, note text); \
         CREATE TABLE odd (id int PRIMARY KEY, u varchar(10) CHARACTER SET sjis, note text)",
    )
    .await
    .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    let spec = |table: &str, exclude: &[&str]| TableSpec {
        name: format!("{table}_v1"),
        source: env.source.clone(),
        schema: env.my.name.clone(),
        table: table.to_string(),
        exclude: exclude.iter().map(|c| c.to_string()).collect(),
        ..TableSpec::default()
    };
    let e = pipeline.create_table(&spec("heap", &[])).await.unwrap_err();
    assert_eq!(
        e.primary(),
        format!("upstream table \"{}.heap\" has no primary key", env.my.name)
    );
    assert_eq!(
        e.hint().as_deref(),
        Some(
            format!(
                "Add one (ALTER TABLE `{}`.`heap` ADD PRIMARY KEY (...)), then create the table again.",
                env.my.name
            )
            .as_str()
        )
    );
    let e = pipeline
        .create_table(&spec("nothere", &[]))
        .await
        .unwrap_err();
    assert!(e.primary().contains("does not exist in source"), "{e}");
    let e = pipeline.create_table(&spec("odd", &[])).await.unwrap_err();
    assert!(
        e.primary().contains("column \"u\"")
            && e.primary().contains("is in charset sjis")
            && e.primary().contains("list it in EXCLUDE COLUMNS"),
        "{e}"
    );
    let t = pipeline.create_table(&spec("odd", &["u"])).await.unwrap();
    assert!(t.columns.iter().any(|c| c.name == "u" && c.excluded));
    assert!(
        pipeline
            .tables()
            .unwrap()
            .iter()
            .all(|t| t.name == "odd_v1")
    );
    let _ = my.disconnect().await;
}

/// A source whose GTID position was purged while the pipeline was
/// stopped (transactions written after it, the binlog rotated and the
/// files holding them purged) stalls with a permanent error naming the
/// position, its GTID and the way out, and is not retried; so does a
/// source of an older store, whose position is a file and an offset, when
/// that file is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_binlog_position_stalls_the_source_with_the_way_out() {
    let server = tokio::task::spawn_blocking(|| MariaDb::start().unwrap())
        .await
        .unwrap();
    let db = server.create_database("purged").unwrap();
    server
        .client_sql(&format!(
            "CREATE TABLE `{}`.p (id int PRIMARY KEY)",
            db.name
        ))
        .unwrap();
    let state = std::env::temp_dir().join(format!("evolve-mysql-purged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let pipeline = Arc::new(
        Pipeline::open(Config::new(&state).with_connection("my", db.url.clone())).unwrap(),
    );
    let source = pipeline.create_mysql_source("purged", "my").await.unwrap();
    pipeline
        .create_table(&TableSpec {
            name: "p_v1".into(),
            source: "purged".into(),
            schema: db.name.clone(),
            table: "p".into(),
            ..TableSpec::default()
        })
        .await
        .unwrap();
    let gtid = Store::open(&state)
        .unwrap()
        .resume_state("purged")
        .unwrap()
        .unwrap();
    assert_eq!(mariadb_position(&gtid), Some(source.applied_lsn), "{gtid}");
    // A source as a store written before GTID positions has it: the
    // binlog file's number and offset, no GTID state.
    let status = server.client_sql("SHOW MASTER STATUS").unwrap();
    let mut fields = status.split('\t');
    let (file, offset) = (fields.next().unwrap(), fields.next().unwrap());
    let legacy_at = evolve_pipeline::source::mysql::binlog_position(
        file.rsplit_once('.').unwrap().1.parse().unwrap(),
        offset.trim().parse().unwrap(),
    );
    Store::open(&state)
        .unwrap()
        .insert_source_resuming(
            &evolve_pipeline::SourceInfo {
                name: "legacy".into(),
                connection: "my".into(),
                publication: String::new(),
                publication_created: false,
                slot: "evolve_legacy".into(),
                applied_lsn: legacy_at,
                dropping: false,
                drop_error: None,
                kind: evolve_pipeline::store::SourceKind::Mysql,
            },
            None,
        )
        .unwrap();
    // Transactions after both positions; then the server rotates and
    // forgets every file but the new one (MariaDB keeps a file until its
    // binlog checkpoint passes it, so this is tried until it is alone).
    server
        .client_sql(&format!(
            "INSERT INTO `{0}`.p VALUES (1); INSERT INTO `{0}`.p VALUES (2)",
            db.name
        ))
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let current = server
            .client_sql("FLUSH BINARY LOGS; SHOW MASTER STATUS")
            .unwrap();
        let current = current.split('\t').next().unwrap().trim().to_string();
        server
            .client_sql(&format!("PURGE BINARY LOGS TO '{current}'"))
            .unwrap();
        let logs = server.client_sql("SHOW BINARY LOGS").unwrap();
        if logs.lines().count() == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "older binlog files are still there: {logs}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let running = Running::start(pipeline.clone());
    wait_until(
        "the sources to stall",
        Duration::from_secs(30),
        async || {
            let status = pipeline.status();
            ["purged", "legacy"].iter().all(|name| {
                status
                    .iter()
                    .any(|s| s.name == *name && s.state == "stalled")
            })
        },
    )
    .await;
    let status = pipeline.status();
    let error = |name: &str| {
        status
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.error.clone())
            .unwrap()
    };
    let purged = error("purged");
    assert!(
        purged.starts_with(&format!(
            "ERROR: binlog position {} (GTID {gtid}) of source \"purged\" is no longer on the server",
            source.applied_lsn
        )),
        "{purged}"
    );
    assert!(
        purged.contains("Could not find GTID state requested by slave in any binlog files"),
        "{purged}"
    );
    assert!(
        purged.contains("point the source's connection in evolve.toml at it"),
        "{purged}"
    );
    assert!(
        purged.contains("drop the source's tables and the source, then create them again"),
        "{purged}"
    );
    assert!(purged.contains("not retried"), "{purged}");
    let legacy = error("legacy");
    assert!(
        legacy.starts_with(&format!(
            "ERROR: binlog position {legacy_at} of source \"legacy\" is no longer on the server"
        )),
        "{legacy}"
    );
    assert!(
        legacy.contains("the server's oldest binlog file is binlog."),
        "{legacy}"
    );
    assert!(legacy.contains("not retried"), "{legacy}");
    running.stop().await;
    let _ = std::fs::remove_dir_all(&state);
}

/// A TCP proxy to a server whose connections can be frozen as a dead
/// network path freezes them: no byte passes either way and neither end
/// is closed. Connections made after [`FreezingProxy::freeze`] pass.
struct FreezingProxy {
    port: u16,
    /// Connections numbered below this pass nothing.
    frozen_below: Arc<tokio::sync::watch::Sender<u64>>,
    /// Connections accepted so far (the next one's number).
    accepted: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezingProxy {
    async fn start(target_port: u16) -> FreezingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen_below = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (frozen, count) = (frozen_below.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let id = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(Self::pump(
                    id,
                    client_read,
                    server_write,
                    frozen.subscribe(),
                ));
                tokio::spawn(Self::pump(
                    id,
                    server_read,
                    client_write,
                    frozen.subscribe(),
                ));
            }
        });
        FreezingProxy {
            port,
            frozen_below,
            accepted,
            task,
        }
    }

    /// Copies `from` to `to` while connection `id` is not frozen; a byte
    /// read as it freezes waits with it.
    async fn pump(
        id: u64,
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut frozen_below: tokio::sync::watch::Receiver<u64>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if frozen_below.wait_for(|below| id >= *below).await.is_err() {
                return;
            }
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => n,
            };
            if frozen_below.wait_for(|below| id >= *below).await.is_err() {
                return;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    /// Freezes every connection made so far.
    fn freeze(&self) {
        let accepted = self.accepted.load(std::sync::atomic::Ordering::SeqCst);
        self.frozen_below.send_replace(accepted);
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A binlog connection that goes silent without closing (a frozen server
/// host, a partition: nothing notices it at the TCP level) fails the
/// stream after 30 s without an event or a heartbeat, although the engine
/// drops the stream's pending read at every tick; the source shows the
/// error, reconnects, and streams on, each row into the sink once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_binlog_connection_times_out_and_the_source_reconnects() {
    let env = my_env(STATE, "mysql_silent").await;
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    my.query_drop("CREATE TABLE s (id int PRIMARY KEY, note varchar(20))")
        .await
        .unwrap();
    // The source's connection goes through the proxy; this test's own
    // does not.
    let (_, port_and_db) = env.my.url.rsplit_once(':').unwrap();
    let (port, _) = port_and_db.split_once('/').unwrap();
    let server_port: u16 = port.parse().unwrap();
    let proxy = FreezingProxy::start(server_port).await;
    let proxied = env.my.url.replace(
        &format!("127.0.0.1:{server_port}/"),
        &format!("127.0.0.1:{}/", proxy.port),
    );
    assert_ne!(proxied, env.my.url);
    let config = env.config.clone().with_connection("my", proxied);
    let pipeline = pipeline_with_chain(&env, config, "s").await;
    audit_sink(&sink, "s_json").await;
    let running = Running::start(pipeline.clone());
    wait_running(&pipeline, "s_v1", Duration::from_secs(60)).await;
    my.query_drop("INSERT INTO s VALUES (1, 'before')")
        .await
        .unwrap();
    wait_until("row 1 in the sink", Duration::from_secs(30), async || {
        sink_exists(&sink, "s_json").await && audit_count(&sink, "s_json").await == 1
    })
    .await;

    let source_status = || {
        pipeline
            .status()
            .into_iter()
            .find(|s| s.kind == evolve_pipeline::ObjectKind::Source && s.name == env.source)
    };
    assert_eq!(
        source_status().map(|s| s.state),
        Some("running".to_string())
    );
    let before = proxy.accepted();
    proxy.freeze();
    let frozen_at = std::time::Instant::now();
    // The supervisor shows the error for its first backoff (500 ms) before
    // it retries: looked for every 10 ms.
    let wanted = "no binlog event or heartbeat for 30 s";
    let error = loop {
        if let Some(s) = source_status()
            && s.state == "retrying"
            && let Some(error) = s.error.filter(|e| e.contains(wanted))
        {
            break error;
        }
        assert!(
            frozen_at.elapsed() < Duration::from_secs(60),
            "the source did not fail with \"{wanted}\" within 60 s of its binlog connection \
             going silent: {:?}",
            source_status()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let waited = frozen_at.elapsed();
    assert!(
        waited >= Duration::from_secs(25),
        "the source failed {waited:?} after the freeze, before its read timeout: {error}"
    );
    // The retry connects anew (through the proxy, which passes new
    // connections) and streams on.
    wait_until(
        "the source to run again",
        Duration::from_secs(30),
        async || source_status().is_some_and(|s| s.state == "running"),
    )
    .await;
    assert!(proxy.accepted() > before, "the source did not reconnect");
    my.query_drop("INSERT INTO s VALUES (2, 'after')")
        .await
        .unwrap();
    wait_until("row 2 in the sink", Duration::from_secs(30), async || {
        audit_count(&sink, "s_json").await >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "s_json").await, 2, "sink writes");
    let keys: Vec<String> = sink_rows(&sink, "s_json")
        .await
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(keys, [r#"{"id": 1}"#, r#"{"id": 2}"#]);
    running.stop().await;
}

/// The statements, through the admin API as `evolve sql` sends them:
/// `CREATE SOURCE ... FROM MYSQL`, `CREATE TABLE ... (REFERENCE
/// database.table)`, and the drops, which leave nothing upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statements_run_through_the_admin_api() {
    let env = my_env(STATE, "mysql_sql").await;
    let mut my = my_conn(&env.my.url).await;
    my.query_drop("CREATE TABLE t (id bigint unsigned PRIMARY KEY, v json)")
        .await
        .unwrap();
    let pipeline = Pipeline::open(env.config.clone()).unwrap();
    let sql = format!(
        "CREATE SOURCE shop FROM MYSQL CONNECTION my; \
         CREATE TABLE t_v1 FROM SOURCE shop (REFERENCE {}.t);",
        env.my.name
    );
    let response = evolve_pipeline::admin::execute(&pipeline, &sql).await;
    assert!(response.error.is_none(), "{:?}", response.error);
    let statuses: Vec<(&str, &str)> = response
        .results
        .iter()
        .map(|r| (r.statement.as_str(), r.status.as_str()))
        .collect();
    let create_table = format!(
        "CREATE TABLE t_v1 FROM SOURCE shop (REFERENCE {}.t)",
        env.my.name
    );
    assert_eq!(
        statuses,
        vec![
            (
                "CREATE SOURCE shop FROM MYSQL CONNECTION my",
                "CREATE SOURCE"
            ),
            (create_table.as_str(), "CREATE TABLE"),
        ]
    );
    let t = pipeline.tables().unwrap().remove(0);
    let types: Vec<(&str, u32, &str)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_oid, c.type_name.as_str()))
        .collect();
    // BIGINT UNSIGNED is numeric; MariaDB's JSON is jsonb.
    assert_eq!(
        types,
        vec![("id", 1700, "bigint(20) unsigned"), ("v", 3802, "longtext")]
    );
    // FROM POSTGRES with a MySQL connection says what to write instead.
    let response = evolve_pipeline::admin::execute(
        &pipeline,
        "CREATE SOURCE pg FROM POSTGRES CONNECTION my (PUBLICATION 'p')",
    )
    .await;
    let error = response.error.unwrap();
    assert_eq!(
        error.message,
        "connection \"my\" is a MySQL connection; FROM POSTGRES needs a PostgreSQL one"
    );
    // `evolve status` shows the source and its binlog position, promptly.
    let started = std::time::Instant::now();
    let report = evolve_pipeline::admin::status(&pipeline).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let shop = report.objects.iter().find(|o| o.name == "shop").unwrap();
    assert_eq!(shop.kind, "source");
    assert_eq!(
        shop.applied_lsn,
        Some(pipeline.sources().unwrap()[0].applied_lsn.to_string())
    );
    let response =
        evolve_pipeline::admin::execute(&pipeline, "DROP TABLE t_v1; DROP SOURCE shop;").await;
    assert!(response.error.is_none(), "{:?}", response.error);
    assert!(pipeline.sources().unwrap().is_empty());
    let _ = my.disconnect().await;
}

/// The events of every binlog file of `server` that concern table `table`
/// of database `db`: `(event type, info)` of its rows events (by the table
/// ids of its table maps) and of the statements naming it.
fn binlog_events_of(server: &MariaDb, db: &str, table: &str) -> Vec<(String, String)> {
    let files = server.client_sql("SHOW BINARY LOGS").unwrap();
    let mut ids = std::collections::HashSet::new();
    let mut out = Vec::new();
    for file in files.lines().filter_map(|l| l.split('\t').next()) {
        let events = server
            .client_sql(&format!("SHOW BINLOG EVENTS IN '{file}'"))
            .unwrap();
        for line in events.lines() {
            // Log_name, Pos, Event_type, Server_id, End_log_pos, Info.
            let fields: Vec<&str> = line.split('\t').collect();
            let (kind, info) = (fields[2], fields.get(5).copied().unwrap_or_default());
            let id = info
                .strip_prefix("table_id: ")
                .and_then(|rest| rest.split(' ').next())
                .map(str::to_string);
            if kind == "Table_map" && info.ends_with(&format!("({db}.{table})")) {
                ids.extend(id);
                continue;
            }
            let rows = kind.contains("_rows") && id.is_some_and(|id| ids.contains(&id));
            let statement = kind.starts_with("Query") && info.contains(&format!(" {table}"));
            if rows || statement {
                out.push((kind.to_string(), info.to_string()));
            }
        }
    }
    out
}

/// MariaDB shut down and started again while the pipeline streams (a
/// clean restart, as an upgrade does; its binlog goes on in a new file):
/// the source loses the connection, reconnects once the server is back,
/// resumes at its GTID state, and every change written before and after
/// the restart reaches the sink once (a trigger counts them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restarted_during_the_stream_loses_and_repeats_nothing() {
    let mut server = tokio::task::spawn_blocking(MariaDb::start)
        .await
        .unwrap()
        .unwrap();
    let env = my_env_on(
        STATE,
        "restarted",
        server.create_database("restarted").unwrap(),
    )
    .await;
    let (mut my, sink, running) = audited_k(&env).await;
    let pipeline = running.pipeline.clone();
    // 200 rows in 20 transactions.
    async fn insert(my: &mut mysql_async::Conn, from: i32, to: i32) {
        for start in (from..=to).step_by(10) {
            my.query_drop(format!(
                "INSERT INTO k SELECT seq, 0 FROM seq_{start}_to_{}",
                start + 9
            ))
            .await
            .unwrap();
        }
    }
    insert(&mut my, 1, 200).await;
    wait_writes(&sink, "k_json", 200).await;
    let _ = my.disconnect().await;
    // The source's status names the lost connection while the server is
    // away.
    let watcher = {
        let pipeline = pipeline.clone();
        tokio::spawn(async move {
            loop {
                let lost = pipeline
                    .status()
                    .into_iter()
                    .find(|s| s.kind == evolve_pipeline::ObjectKind::Source && s.error.is_some());
                if let Some(status) = lost {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let server = tokio::task::spawn_blocking(move || {
        server.restart().unwrap();
        server
    })
    .await
    .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .expect("the source reports the lost connection")
        .unwrap();
    assert_eq!(lost.name, env.source, "{lost:?}");
    let mut my = my_conn(&env.my.url).await;
    let files = server.client_sql("SHOW BINARY LOGS").unwrap();
    assert_eq!(
        files.lines().count(),
        2,
        "the restart starts a new binlog file: {files}"
    );
    insert(&mut my, 201, 400).await;
    my.query_drop("UPDATE k SET n = n + 1 WHERE id <= 50")
        .await
        .unwrap();
    my.query_drop("DELETE FROM k WHERE id > 390").await.unwrap();
    wait_writes(&sink, "k_json", 400 + 50 + 10).await;
    // Nothing more comes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(audit_ops(&sink, "k_json").await, (400, 50, 10));
    let rows: i64 = sink
        .query_one(
            "SELECT count(*) FROM public.k_json WHERE (data->>'n')::int = (CASE WHEN (key->>'id')::int <= 50 THEN 1 ELSE 0 END)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 390);
    running.stop().await;
    let _ = my.disconnect().await;
}

/// MariaDB killed with SIGKILL while a writer commits one row per
/// transaction and the pipeline streams them (a durable server:
/// `innodb_flush_log_at_trx_commit=1`, `sync_binlog=1`), then started
/// again (crash recovery): the source reconnects at its GTID state, and the
/// sink holds exactly the rows the recovered server holds, each written
/// once, including the transactions that committed after the kill's
/// last acknowledgement and the writes after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_crashed_during_the_stream_loses_and_repeats_nothing() {
    let mut server = tokio::task::spawn_blocking(|| {
        MariaDb::start_with(MariaDbOptions {
            settings: vec![
                ("innodb_flush_log_at_trx_commit".into(), "1".into()),
                ("sync_binlog".into(), "1".into()),
            ],
        })
    })
    .await
    .unwrap()
    .unwrap();
    let env = my_env_on(STATE, "crashed", server.create_database("crashed").unwrap()).await;
    // The writer below has a connection of its own.
    let (_, sink, running) = audited_k(&env).await;
    // One row per transaction until the server goes away.
    let writer = {
        let url = env.my.url.clone();
        tokio::spawn(async move {
            let mut my = my_conn(&url).await;
            let mut acknowledged = 0;
            for id in 1.. {
                if my
                    .query_drop(format!("INSERT INTO k VALUES ({id}, {id})"))
                    .await
                    .is_err()
                {
                    break;
                }
                acknowledged = id;
            }
            acknowledged
        })
    };
    wait_until(
        "the sink to have 100 rows",
        Duration::from_secs(60),
        async || audit_count(&sink, "k_json").await >= 100,
    )
    .await;
    let server = tokio::task::spawn_blocking(move || {
        server.crash_and_restart().unwrap();
        server
    })
    .await
    .unwrap();
    let acknowledged = writer.await.unwrap();
    let mut my = my_conn(&env.my.url).await;
    let recovered: i64 = my
        .query_first("SELECT count(*) FROM k")
        .await
        .unwrap()
        .unwrap();
    // Every acknowledged commit survived (at most the one in flight more).
    assert!(
        recovered == acknowledged || recovered == acknowledged + 1,
        "{recovered} rows after the crash, {acknowledged} acknowledged"
    );
    my.query_drop(format!(
        "INSERT INTO k SELECT seq, seq FROM seq_{}_to_{}",
        recovered + 1,
        recovered + 50
    ))
    .await
    .unwrap();
    my.query_drop("UPDATE k SET n = -n WHERE id <= 10")
        .await
        .unwrap();
    let total = recovered + 50;
    wait_writes(&sink, "k_json", total + 10).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(audit_ops(&sink, "k_json").await, (total, 10, 0));
    let rows: i64 = sink
        .query_one(
            "SELECT count(*) FROM public.k_json \
             WHERE (data->>'n')::int = (CASE WHEN (key->>'id')::int <= 10 THEN -1 ELSE 1 END) * (key->>'id')::int",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, total);
    running.stop().await;
    let _ = my.disconnect().await;
    drop(server);
}

/// MariaDB's compressed binlog events (`log_bin_compress = ON`, and
/// `log_bin_compress_min_len` at its minimum, 10 bytes, so every rows
/// event and statement below is compressed, as the binlog shows) reach
/// the sink as their uncompressed counterparts do: inserts, updates,
/// deletes, a multi-row statement and a transaction with exact write
/// counts and documents; a TRUNCATE written while the pipeline is
/// stopped, read after the restart at its GTID position; and a column
/// dropped and re-added, which only the statement shows, stalls the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_compressed_binlog_events_reach_the_sink_as_uncompressed_ones_do() {
    let server = tokio::task::spawn_blocking(|| {
        MariaDb::start_with(MariaDbOptions {
            settings: vec![
                ("log_bin_compress".into(), "ON".into()),
                ("log_bin_compress_min_len".into(), "10".into()),
            ],
        })
        .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        server
            .client_sql("SELECT @@log_bin_compress, @@log_bin_compress_min_len")
            .unwrap()
            .trim(),
        "1\t10"
    );
    let env = my_env_on(
        STATE,
        "compressed",
        server.create_database("compressed").unwrap(),
    )
    .await;
    let db = env.my.name.clone();
    let mut my = my_conn(&env.my.url).await;
    let sink = connect(&env.sink.url).await;
    // Every row image is more than 10 bytes long (the note alone is).
    my.query_drop(
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20) NOT NULL, note text);
         INSERT INTO orders SELECT seq, 'open', CONCAT('the note of order ', seq) FROM seq_1_to_100;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let source = pipeline
        .create_mysql_source(&env.source, "my")
        .await
        .unwrap();
    create_chain(&pipeline, &env, "orders").await;
    audit_sink(&sink, "orders_json").await;
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 100).await;

    // One row, ten updated, ten deleted, three in one statement, and a
    // transaction of an insert, an update and a delete.
    for sql in [
        "INSERT INTO orders VALUES (101, 'open', 'a single inserted order')",
        "UPDATE orders SET status = 'paid' WHERE id <= 10",
        "DELETE FROM orders WHERE id > 90 AND id <= 100",
        "INSERT INTO orders VALUES (102, 'open', 'the first of three'), \
         (103, 'open', 'the second of three'), (104, 'open', 'the third of three')",
        "START TRANSACTION; INSERT INTO orders VALUES (105, 'open', 'inserted in a transaction'); \
         UPDATE orders SET note = 'updated in a transaction' WHERE id = 11; \
         DELETE FROM orders WHERE id = 12; COMMIT",
    ] {
        my.query_drop(sql).await.unwrap();
    }
    wait_writes(&sink, "orders_json", 100 + 1 + 10 + 10 + 3 + 3).await;
    sink.batch_execute("CREATE TABLE expected_orders (id int, status text, note text)")
        .await
        .unwrap();
    let select = "SELECT CAST(id AS CHAR), status, note FROM orders";
    let types = ["int", "text", "text"];
    mirror(&mut my, &sink, select, "expected_orders", &types).await;
    wait_expected(
        &pipeline,
        &sink,
        "expected_orders",
        "orders_json",
        100 + 1 - 10 + 3 + 1 - 1,
    )
    .await;
    running.stop().await;

    // Written while stopped: the stream resumes after the last GTID
    // applied and reads the TRUNCATE (94 deletes) and the insert after it.
    my.query_drop(
        "TRUNCATE TABLE orders; INSERT INTO orders VALUES (7, 'open', 'after the truncate')",
    )
    .await
    .unwrap();
    let running = Running::start(pipeline.clone());
    wait_writes(&sink, "orders_json", 127 + 94 + 1).await;
    wait_docs(
        Some(&pipeline),
        &sink,
        "orders_json",
        &[(
            r#"{"id": 7}"#.to_string(),
            r#"{"id": 7, "note": "after the truncate", "status": "open"}"#.to_string(),
        )],
        Duration::from_secs(60),
    )
    .await;
    let applied = pipeline.sources().unwrap()[0].applied_lsn;
    assert!(is_gtid_position(applied), "{applied}");
    assert!(
        applied > source.applied_lsn,
        "{applied} after {}",
        source.applied_lsn
    );

    // Dropped and re-added with the same name and type, no row after it:
    // only the statement shows the drop, and the table stalls at it.
    my.query_drop("ALTER TABLE orders DROP COLUMN note; ALTER TABLE orders ADD COLUMN note text")
        .await
        .unwrap();
    wait_state(
        &pipeline,
        "orders_v1",
        TableState::Stalled,
        Duration::from_secs(60),
    )
    .await;
    let error = table_state(&pipeline, "orders_v1").1.unwrap();
    assert!(error.contains("column \"note\""), "{error}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(audit_count(&sink, "orders_json").await, 222);
    running.stop().await;

    // Every rows event of the table and every statement naming it was
    // written compressed.
    let events = tokio::task::spawn_blocking(move || binlog_events_of(&server, &db, "orders"))
        .await
        .unwrap();
    let kinds: std::collections::BTreeSet<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Delete_rows_compressed_v1",
            "Query_compressed",
            "Update_rows_compressed_v1",
            "Write_rows_compressed_v1"
        ]
        .into_iter()
        .collect(),
        "{events:#?}"
    );
    for statement in [
        "TRUNCATE TABLE orders",
        "ALTER TABLE orders DROP COLUMN note",
    ] {
        assert!(
            events
                .iter()
                .any(|(kind, info)| kind == "Query_compressed" && info.ends_with(statement)),
            "{statement}: {events:#?}"
        );
    }
    let _ = my.disconnect().await;
}
