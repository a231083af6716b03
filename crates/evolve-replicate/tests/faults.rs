//! What a fault audit found, each against real databases: a value too
//! long for the node's column halts instead of arriving cut; a type the
//! node converts to is a logged `target_column_type_mismatch` (and halts
//! under `error`); a halt the match or the node's refusal causes is
//! logged and counted once, however often it is met again; a halted
//! replica goes on by itself once the node is fixed; and a skip is
//! refused unless it names the transaction the replica is halted at.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_pipeline::Position;
use evolve_replicate::{Replica, ReplicaSpec, ReplicateError};
use tokio_postgres::Client;

fn spec(name: &str, up: &str, node: &str, tables: &[&str], resolvers: Resolvers) -> ReplicaSpec {
    ReplicaSpec {
        name: name.into(),
        upstream: up.into(),
        upstream_connection: "up".into(),
        node: node.into(),
        tables: tables
            .iter()
            .map(|t| ("public".to_string(), t.to_string()))
            .collect(),
        resolvers,
        transforms: Vec::new(),
    }
}

fn counted(status: &BTreeMap<(ConflictType, Resolver), u64>) -> BTreeMap<(String, String), i64> {
    status
        .iter()
        .map(|((c, r), n)| ((c.name().to_string(), r.name().to_string()), *n as i64))
        .collect()
}

/// The history's (type, resolution, detail) rows, in order.
async fn details(node: &Client, name: &str) -> Vec<(String, String, String)> {
    node.query(
        "SELECT conflict_type, resolution, coalesce(detail, '') FROM evolve_conflict_history
         WHERE replica = $1 ORDER BY id",
        &[&name],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Each statement its own upstream transaction.
async fn write(up: &Client, statements: &[&str]) {
    for sql in statements {
        up.batch_execute(sql).await.unwrap();
    }
}

/// The halt `run` ended with; panics when it caught up instead.
async fn halted(replica: Arc<Replica>, up: &Client, node: &Client, name: &str) -> ReplicateError {
    match run(replica, up, node, name).await {
        Some(e @ ReplicateError::Halted { .. }) => e,
        Some(e) => panic!("{name} failed without halting: {e}"),
        None => panic!("{name} caught up without halting"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_too_long_for_the_node_halts_instead_of_arriving_cut() {
    let up_db = evolve_test::fresh_db("fault_len_up").await;
    let node_db = evolve_test::fresh_db("fault_len_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute("CREATE TABLE t (id int PRIMARY KEY, s text, n numeric)")
        .await
        .unwrap();
    node.batch_execute("CREATE TABLE t (id int PRIMARY KEY, s varchar(3), n numeric(10,1))")
        .await
        .unwrap();
    let replica = Arc::new(
        Replica::create(spec(
            "f_len",
            &up_db.url,
            &node_db.url,
            &["t"],
            Resolvers::default(),
        ))
        .await
        .unwrap(),
    );
    write(
        &up,
        &[
            "INSERT INTO t VALUES (1, 'abc', 1.25)",
            "INSERT INTO t VALUES (2, 'abcdef', 2)",
        ],
    )
    .await;
    let e = halted(replica.clone(), &up, &node, "f_len").await;
    let text = e.to_string();
    assert!(
        text.contains("value too long for type character varying(3)")
            && text.contains(
                "(target_column_type_mismatch: column \"s\" converted from text to character varying(3))"
            ),
        "{text}"
    );
    // Row 1 fits (its numeric rounded to the column's scale, as numeric's
    // input does in native replication); row 2 is not there cut to 'abc'.
    assert_eq!(
        rows(&node, "SELECT id, s, n FROM t ORDER BY id").await,
        vec!["(1,abc,1.3)"]
    );
    let history = details(&node, "f_len").await;
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(
        history[..2],
        [
            (
                "target_column_type_mismatch".to_string(),
                "transform".to_string(),
                "column \"s\" converted from text to character varying(3)".to_string()
            ),
            (
                "target_column_type_mismatch".to_string(),
                "transform".to_string(),
                "column \"n\" converted from numeric to numeric(10,1)".to_string()
            ),
        ]
    );
    assert_eq!(history[2].0, "target_column_type_mismatch");
    assert!(
        history[2].2.starts_with(
            "halted the replica: ERROR 22001: value too long for type character varying(3)"
        ),
        "{history:?}"
    );
    assert_eq!(
        counted(&replica.status().conflicts),
        BTreeMap::from([(key("target_column_type_mismatch", "transform"), 3)])
    );
    // The set path (a group of rows at once) refuses it too.
    let node2_db = evolve_test::fresh_db("fault_len_node2").await;
    let node2 = connect(&node2_db.url).await;
    node2
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, s varchar(3), n numeric(10,1))")
        .await
        .unwrap();
    let again = Arc::new(
        Replica::create(spec(
            "f_len2",
            &up_db.url,
            &node2_db.url,
            &["t"],
            Resolvers::default(),
        ))
        .await
        .unwrap(),
    );
    up.batch_execute(
        "INSERT INTO t SELECT g, 'ab', g FROM generate_series(10, 500) g;
         UPDATE t SET s = 'abcd' WHERE id = 400;",
    )
    .await
    .unwrap();
    let e = halted(again, &up, &node2, "f_len2").await;
    assert!(e.to_string().contains("value too long"), "{e}");
    assert_eq!(
        rows(&node2, "SELECT count(*) FROM t WHERE length(s) > 2").await,
        vec!["(0)"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_type_difference_is_logged_and_halts_under_error() {
    let up_db = evolve_test::fresh_db("fault_type_up").await;
    let node_db = evolve_test::fresh_db("fault_type_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(
        "CREATE TYPE mood AS ENUM ('ok', 'sad');
         CREATE TABLE t (id int PRIMARY KEY, q int, s varchar(10), m mood)",
    )
    .await
    .unwrap();
    // The node's enum has another OID than the upstream's: not compared.
    node.batch_execute(
        "CREATE TYPE other AS ENUM ('x');
         CREATE TYPE mood AS ENUM ('ok', 'sad');
         CREATE TABLE t (id int PRIMARY KEY, q bigint, s text, m mood)",
    )
    .await
    .unwrap();
    let s = spec(
        "f_type",
        &up_db.url,
        &node_db.url,
        &["t"],
        Resolvers::default(),
    );
    let replica = Arc::new(Replica::create(s.clone()).await.unwrap());
    write(
        &up,
        &[
            "INSERT INTO t VALUES (1, 10, 'ten', 'ok')",
            "INSERT INTO t VALUES (2, 20, 'twenty', 'sad')",
        ],
    )
    .await;
    run_until_caught_up(replica.clone(), &up, &node, "f_type").await;
    assert_eq!(
        rows(&node, "SELECT * FROM t ORDER BY id").await,
        vec!["(1,10,ten,ok)", "(2,20,twenty,sad)"]
    );
    // Each converted column once per match, with both types.
    let converted = vec![
        (
            "target_column_type_mismatch".to_string(),
            "transform".to_string(),
            "column \"q\" converted from integer to bigint".to_string(),
        ),
        (
            "target_column_type_mismatch".to_string(),
            "transform".to_string(),
            "column \"s\" converted from character varying(10) to text".to_string(),
        ),
    ];
    assert_eq!(details(&node, "f_type").await, converted);
    assert_eq!(
        counted(&replica.status().conflicts),
        BTreeMap::from([(key("target_column_type_mismatch", "transform"), 2)])
    );

    // With `error` the difference halts, naming the column, both types
    // and the ways out; the halt is logged and counted.
    let mut strict = Resolvers::default();
    strict
        .set(ConflictType::TargetColumnTypeMismatch, Resolver::Error)
        .unwrap();
    let mut strict_spec = s;
    strict_spec.resolvers = strict;
    up.batch_execute("INSERT INTO t VALUES (3, 30, 'thirty', 'ok')")
        .await
        .unwrap();
    let replica = Arc::new(Replica::new(strict_spec));
    let e = halted(replica.clone(), &up, &node, "f_type").await;
    assert!(
        e.to_string().contains(
            "column \"q\" of node table public.t is bigint and the upstream sends integer, and target_column_type_mismatch is error: set it to transform to convert the values, or change the column's type on the node to integer (target_column_type_mismatch)"
        ),
        "{e}"
    );
    assert_eq!(rows(&node, "SELECT count(*) FROM t").await, vec!["(2)"]);
    let history = details(&node, "f_type").await;
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(
        (history[2].0.as_str(), history[2].1.as_str()),
        ("target_column_type_mismatch", "error")
    );
    assert!(
        history[2].2.starts_with("halted the replica: column \"q\""),
        "{history:?}"
    );
    assert_eq!(
        counted(&replica.status().conflicts),
        BTreeMap::from([(key("target_column_type_mismatch", "error"), 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_found_while_matching_or_refused_by_the_node_is_logged_once() {
    let up_db = evolve_test::fresh_db("fault_log_up").await;
    let up = connect(&up_db.url).await;
    up.batch_execute(
        "CREATE TABLE a (id int PRIMARY KEY, note text);
         CREATE TABLE b (id int PRIMARY KEY, v int);
         CREATE TABLE c (id int PRIMARY KEY, note text);
         CREATE TABLE d (id int PRIMARY KEY, name text);",
    )
    .await
    .unwrap();
    let mut no_missing = Resolvers::default();
    no_missing
        .set(ConflictType::TargetColumnMissing, Resolver::Error)
        .unwrap();
    // (table, the node's table, resolvers, the write, the conflict logged)
    let cases = [
        (
            "a",
            "CREATE TABLE a (id int PRIMARY KEY)",
            no_missing,
            "INSERT INTO a VALUES (1, NULL)",
            ("target_column_missing", "error"),
        ),
        (
            "b",
            "CREATE TABLE b (id int PRIMARY KEY, v int, req text NOT NULL)",
            Resolvers::default(),
            "INSERT INTO b VALUES (1, 1)",
            ("source_column_missing", "use_default_value"),
        ),
        (
            "c",
            "CREATE TABLE c (id int PRIMARY KEY)",
            Resolvers::default(),
            "INSERT INTO c VALUES (1, 'a note the node lacks')",
            ("target_column_missing", "ignore_if_null"),
        ),
        (
            "d",
            "CREATE TABLE d (id int PRIMARY KEY, name text UNIQUE); INSERT INTO d VALUES (100, 'y')",
            Resolvers::default(),
            "INSERT INTO d VALUES (1, 'y')",
            ("multiple_unique_conflicts", "error"),
        ),
    ];
    for (table, node_ddl, resolvers, write_sql, (conflict, resolution)) in cases {
        let node_db = evolve_test::fresh_db(&format!("fault_log_{table}")).await;
        let node = connect(&node_db.url).await;
        node.batch_execute(node_ddl).await.unwrap();
        let name = format!("f_log_{table}");
        let s = spec(&name, &up_db.url, &node_db.url, &[table], resolvers);
        let replica = Arc::new(Replica::create(s.clone()).await.unwrap());
        up.batch_execute(write_sql).await.unwrap();
        let e = halted(replica.clone(), &up, &node, &name).await;
        assert!(e.to_string().contains(&format!("({conflict}")), "{e}");
        let history = details(&node, &name).await;
        assert_eq!(history.len(), 1, "{table}: {history:?}");
        assert_eq!(
            (history[0].0.as_str(), history[0].1.as_str()),
            (conflict, resolution),
            "{table}"
        );
        assert!(
            history[0].2.starts_with("halted the replica"),
            "{history:?}"
        );
        assert_eq!(
            counted(&replica.status().conflicts),
            BTreeMap::from([(key(conflict, resolution), 1)]),
            "{table}"
        );
        // Met again (a restart), it is not logged again.
        let again = Arc::new(Replica::new(s));
        halted(again, &up, &node, &name).await;
        assert_eq!(details(&node, &name).await.len(), 1, "{table}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halted_replica_goes_on_by_itself_once_the_node_is_fixed() {
    let up_db = evolve_test::fresh_db("fault_retry_up").await;
    let node_db = evolve_test::fresh_db("fault_retry_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        .await
        .unwrap();
    node.batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let replica = Arc::new(
        Replica::create(spec(
            "f_retry",
            &up_db.url,
            &node_db.url,
            &["t"],
            Resolvers::default(),
        ))
        .await
        .unwrap(),
    );
    // ignore_if_null: the note halts the replica.
    up.batch_execute("INSERT INTO t VALUES (1, 'a note')")
        .await
        .unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = {
        let replica = replica.clone();
        tokio::spawn(async move { replica.run_retrying(stop_rx).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while replica.status().state != "halted" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            replica.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // It tries again (at 1 s, then 2 s) and meets the same halt, logged
    // once; the task goes on.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!task.is_finished());
    assert_eq!(replica.status().state, "halted");
    assert_eq!(details(&node, "f_retry").await.len(), 1);
    // The cause fixed on the node: the replica applies the transaction by
    // itself, nobody telling it.
    node.batch_execute("ALTER TABLE t ADD COLUMN note text")
        .await
        .unwrap();
    let target = tick(&up).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while !caught_up(&node, "f_retry", &target).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            replica.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows(&node, "SELECT id, note FROM t").await,
        vec!["(1,\"a note\")"]
    );
    let status = replica.status();
    assert_eq!((status.state.as_str(), status.error), ("running", None));
    assert_eq!(
        counted(&status.conflicts),
        BTreeMap::from([(key("target_column_missing", "ignore_if_null"), 1)])
    );
    // Its halt is no longer recorded on the node.
    assert_eq!(
        rows(
            &node,
            "SELECT halted_lsn, halt FROM evolve_replica_progress WHERE replica = 'f_retry'"
        )
        .await,
        vec!["(,)"]
    );
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_must_name_the_transaction_the_replica_is_halted_at() {
    let up_db = evolve_test::fresh_db("fault_skip_up").await;
    let node_db = evolve_test::fresh_db("fault_skip_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    node.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text CHECK (v <> 'bad'))")
        .await
        .unwrap();
    let s = spec(
        "f_skip",
        &up_db.url,
        &node_db.url,
        &["t"],
        Resolvers::default(),
    );
    let replica = Arc::new(Replica::create(s.clone()).await.unwrap());
    up.batch_execute("INSERT INTO t VALUES (1, 'good')")
        .await
        .unwrap();
    run_until_caught_up(replica, &up, &node, "f_skip").await;
    // Not halted: nothing to skip, however far ahead.
    let far = Position::from_u64(0xFF_00FF_FFFF);
    let e = Replica::skip(&node_db.url, "f_skip", far)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("the replica is not halted (its node records no halt)"),
        "{e}"
    );
    let armed: Vec<String> = rows(
        &node,
        "SELECT skip_lsn FROM evolve_replica_progress WHERE replica = 'f_skip'",
    )
    .await;
    assert_eq!(armed, vec!["()"]);
    // A row the node refuses (not a conflict) halts it; its halt is on
    // the node, and only its LSN is taken.
    up.batch_execute("INSERT INTO t VALUES (2, 'bad')")
        .await
        .unwrap();
    let replica = Arc::new(Replica::new(s.clone()));
    let e = halted(replica, &up, &node, "f_skip").await;
    let ReplicateError::Halted { lsn, .. } = &e else {
        unreachable!()
    };
    assert!(details(&node, "f_skip").await.is_empty());
    let e = Replica::skip(&node_db.url, "f_skip", far)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "the replica is halted at the upstream transaction finished at {lsn}, not at {far}; to skip it: evolve replicate skip f_skip --lsn {lsn}"
        )),
        "{e}"
    );
    Replica::skip(&node_db.url, "f_skip", *lsn).await.unwrap();
    up.batch_execute("INSERT INTO t VALUES (3, 'good')")
        .await
        .unwrap();
    run_until_caught_up(Arc::new(Replica::new(s)), &up, &node, "f_skip").await;
    assert_eq!(
        rows(&node, "SELECT id FROM t ORDER BY id").await,
        vec!["(1)", "(3)"]
    );
    // A node that cannot be reached is named by where its url comes from.
    let dead = format!(
        "postgres://postgres@127.0.0.1:{}/nowhere",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    );
    let e = Replica::skip(&dead, "f_skip", *lsn)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("check the replica's node connection in the pipeline's config")
            && !e.contains("--database-url"),
        "{e}"
    );
}
