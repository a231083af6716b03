//! SIGKILL of a replica's process while it applies, at several points
//! under a steady upstream load, and while it copies (`COPY DATA`):
//! afterwards the node equals the upstream, no transaction was applied
//! twice, and the conflict history has each conflict once.

mod common;

use common::*;
use std::process::{Child, Command};
use std::time::Duration;

use evolve_core::conflict::Resolvers;
use evolve_replicate::{Replica, ReplicaSpec};
use tokio_postgres::Client;

fn spawn(name: &str, up: &str, node: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_evolve-replicate-run"))
        .args([name, up, node, "public.crash_t"])
        .spawn()
        .expect("start evolve-replicate-run")
}

fn kill(mut child: Child) {
    // SIGKILL: nothing of the process's own shutdown runs.
    child.kill().unwrap();
    child.wait().unwrap();
}

async fn table(client: &Client) -> Vec<String> {
    client
        .query(
            "SELECT t::text FROM (SELECT id, v, note FROM crash_t ORDER BY id) t",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_apply_loses_and_doubles_nothing() {
    let up_db = evolve_test::fresh_db("rep_crash_up").await;
    let node_db = evolve_test::fresh_db("rep_crash_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    let ddl = "CREATE TABLE crash_t (id int PRIMARY KEY, v int NOT NULL, note text)";
    up.batch_execute(ddl).await.unwrap();
    node.batch_execute(ddl).await.unwrap();
    // The node has 20 of the keys the load inserts: 20 insert_exists
    // conflicts, each to be logged exactly once whatever the kills do.
    node.batch_execute("INSERT INTO crash_t SELECT g, -1, 'local' FROM generate_series(1, 20) g")
        .await
        .unwrap();
    Replica::create(ReplicaSpec {
        name: "crash".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![("public".into(), "crash_t".into())],
        resolvers: Resolvers::default(),
        transforms: Vec::new(),
    })
    .await
    .unwrap();

    // The load: transactions of one insert, some with an update of the
    // row before and a delete of an older one, as fast as they go.
    let writer = {
        let up = connect(&up_db.url).await;
        tokio::spawn(async move {
            for k in 1..=3_000i32 {
                let mut sql = format!("INSERT INTO crash_t VALUES ({k}, {k}, 'n{k}');");
                if k % 3 == 0 {
                    sql.push_str(&format!(
                        "UPDATE crash_t SET v = v + 1 WHERE id = {};",
                        k - 1
                    ));
                }
                if k % 7 == 0 {
                    sql.push_str(&format!("DELETE FROM crash_t WHERE id = {};", k - 2));
                }
                up.batch_execute(&format!("BEGIN; {sql} COMMIT;"))
                    .await
                    .unwrap();
            }
        })
    };
    // Kills at several points of the apply: early, mid-load, late.
    let mut kills = 0;
    for wait in [300u64, 550, 800, 1_100, 400] {
        let child = spawn("crash", &up_db.url, &node_db.url);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        kill(child);
        kills += 1;
    }
    writer.await.unwrap();
    let target: String = up
        .query_one(
            "SELECT pg_logical_emit_message(true, 'test', 'tick')::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let child = spawn("crash", &up_db.url, &node_db.url);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let done = node
            .query_opt(
                "SELECT 1 FROM evolve_replica_progress WHERE replica = 'crash' AND lsn > $1::text::pg_lsn",
                &[&target],
            )
            .await
            .unwrap()
            .is_some();
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kill(child);
    assert_eq!(kills, 5);

    let upstream = table(&up).await;
    assert!(upstream.len() > 2_000, "{}", upstream.len());
    assert_eq!(table(&node).await, upstream, "the node equals the upstream");
    let history = node
        .query_one(
            "SELECT count(*), count(DISTINCT key) FROM evolve_conflict_history
             WHERE replica = 'crash' AND conflict_type = 'insert_exists'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(history.get::<_, i64>(0), 20, "each conflict logged once");
    assert_eq!(history.get::<_, i64>(1), 20);
    let others: i64 = node
        .query_one(
            "SELECT count(*) FROM evolve_conflict_history
             WHERE replica = 'crash' AND conflict_type <> 'insert_exists'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        others, 0,
        "no transaction was applied twice (that would be a conflict)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_the_copy_leaves_nothing_and_the_next_copy_is_whole() {
    let up_db = evolve_test::fresh_db("rep_copy_crash_up").await;
    let node_db = evolve_test::fresh_db("rep_copy_crash_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    let ddl = "CREATE TABLE crash_t (id int PRIMARY KEY, v int NOT NULL, note text)";
    up.batch_execute(ddl).await.unwrap();
    node.batch_execute(ddl).await.unwrap();
    up.batch_execute(
        "INSERT INTO crash_t SELECT g, g, repeat('x', 40) FROM generate_series(1, 200000) g",
    )
    .await
    .unwrap();
    node.batch_execute("INSERT INTO crash_t SELECT g, -1, 'local' FROM generate_series(1, 20) g")
        .await
        .unwrap();
    let spec = ReplicaSpec {
        name: "copy_crash".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![("public".into(), "crash_t".into())],
        resolvers: Resolvers::default(),
        transforms: Vec::new(),
    };
    Replica::publish(&spec).await.unwrap();
    let spawn_copy = || {
        Command::new(env!("CARGO_BIN_EXE_evolve-replicate-run"))
            .args([
                "--copy",
                "copy_crash",
                &up_db.url,
                &node_db.url,
                "public.crash_t",
            ])
            .spawn()
            .expect("start evolve-replicate-run")
    };
    let progress = "SELECT count(*) FROM evolve_replica_progress WHERE replica = 'copy_crash'";
    // Killed inside the copy: the node has its own 20 rows and no
    // position, whatever was loaded before.
    let mut cut_short = 0;
    for wait in [400u64, 900] {
        let child = spawn_copy();
        tokio::time::sleep(Duration::from_millis(wait)).await;
        kill(child);
        if count(&node, progress).await <= 0 {
            cut_short += 1;
            assert_eq!(
                count(&node, "SELECT count(*) FROM crash_t").await,
                20,
                "a copy cut short leaves nothing on the node"
            );
        }
    }
    assert!(cut_short > 0, "no kill landed inside the copy");
    up.batch_execute("INSERT INTO crash_t VALUES (200001, 1, 'after')")
        .await
        .unwrap();
    let target = tick(&up).await;
    let child = spawn_copy();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !caught_up(&node, "copy_crash", &target).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kill(child);
    let upstream = table(&up).await;
    assert_eq!(upstream.len(), 200_001);
    assert_eq!(table(&node).await, upstream, "the node equals the upstream");
    let history = node
        .query_one(
            "SELECT count(*), count(DISTINCT key) FROM evolve_conflict_history
             WHERE replica = 'copy_crash'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(history.get::<_, i64>(0), 20, "each conflict logged once");
    assert_eq!(history.get::<_, i64>(1), 20);
    // One slot: the ones the killed copies made were dropped.
    let slots: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'evolve_replica_copy_crash'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 1);
}

/// `sql`'s one count, -1 when it fails (a table not there yet).
async fn count(client: &Client, sql: &str) -> i64 {
    client
        .query_one(sql, &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(-1)
}
