//! Replicas against real databases: an upstream and nodes whose schemas
//! differ from it (on the shared throwaway cluster), each conflict type
//! counted exactly, the conflict history equal to the counts, nothing
//! applied twice across restarts, and a halt skipped by its LSN.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_replicate::{Replica, ReplicaSpec, ReplicateError};
use tokio_postgres::Client;

fn counted(status: &BTreeMap<(ConflictType, Resolver), u64>) -> BTreeMap<(String, String), i64> {
    status
        .iter()
        .map(|((c, r), n)| ((c.name().to_string(), r.name().to_string()), *n as i64))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_at_another_schema_version_gets_every_row_by_its_resolvers() {
    let up_db = evolve_test::fresh_db("rep_up").await;
    let node_db = evolve_test::fresh_db("rep_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20), note text, qty int);
         CREATE TABLE audit (id int PRIMARY KEY, what text);
         INSERT INTO orders VALUES (100, 'old', 'before', 1), (200, 'old', 'before', 2);",
    )
    .await
    .unwrap();
    // The node is at another version: no `note` yet, `status` already
    // text, `qty` bigint, a new `region` with a default, no `audit`; and
    // it has a row of its own with key 1.
    node.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text, qty bigint,
                              region text NOT NULL DEFAULT 'eu');
         INSERT INTO orders VALUES (1, 'local', 0, 'us');",
    )
    .await
    .unwrap();
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    resolvers
        .set(ConflictType::TargetTableMissing, Resolver::Skip)
        .unwrap();
    let spec = ReplicaSpec {
        name: "node_a".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![
            ("public".into(), "orders".into()),
            ("public".into(), "audit".into()),
        ],
        resolvers,
        transforms: Vec::new(),
    };
    let replica = Arc::new(Replica::create(spec.clone()).await.unwrap());
    up.batch_execute(
        "INSERT INTO orders SELECT g, 'new', 'n' || g, g FROM generate_series(1, 10) g;
         UPDATE orders SET status = 'paid', qty = 50 WHERE id = 5;
         DELETE FROM orders WHERE id = 7;
         INSERT INTO audit VALUES (1, 'a'), (2, 'b'), (3, 'c');
         UPDATE orders SET status = 'moved' WHERE id = 100;
         DELETE FROM orders WHERE id = 200;",
    )
    .await
    .unwrap();
    run_until_caught_up(replica.clone(), &up, &node, "node_a").await;

    let rows: Vec<(i32, String, i64, String)> = node
        .query(
            "SELECT id, status, qty, region FROM orders ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let mut want: Vec<(i32, String, i64, String)> = (1..=10)
        .filter(|&i| i != 7)
        .map(|i| {
            let (status, qty) = if i == 5 {
                ("paid", 50)
            } else {
                ("new", i64::from(i))
            };
            // Key 1 existed on the node: the upstream's row replaced its
            // columns, and `region`, which the upstream does not send,
            // kept the node's value.
            let region = if i == 1 { "us" } else { "eu" };
            (i, status.to_string(), qty, region.to_string())
        })
        .collect();
    // The update of a row the node never had became an insert.
    want.push((100, "moved".into(), 1, "eu".into()));
    assert_eq!(rows, want);

    let expected: BTreeMap<(String, String), i64> = [
        // `note` had a value in 10 inserts and 2 updates (the updates'
        // new rows carry every column).
        (key("target_column_missing", "ignore"), 12),
        (key("target_table_missing", "skip"), 3),
        (key("insert_exists", "update"), 1),
        (key("update_missing", "insert_or_skip"), 1),
        (key("delete_missing", "skip"), 1),
        // Once per match: `region` filled by its default, and `status`
        // and `qty` converted by assignment cast (varchar(20) to text,
        // integer to bigint).
        (key("source_column_missing", "use_default_value"), 1),
        (key("target_column_type_mismatch", "transform"), 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(history(&node, "node_a").await, expected);
    assert_eq!(counted(&replica.status().conflicts), expected);
    // The history has what an operator needs: the key, both tuples.
    let row = node
        .query_one(
            "SELECT key::text, remote_tuple->>'status', local_tuple->>'region', remote_lsn IS NOT NULL
             FROM evolve_conflict_history WHERE conflict_type = 'insert_exists'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), r#"{"id": "1"}"#);
    assert_eq!(row.get::<_, String>(1), "new");
    assert_eq!(row.get::<_, String>(2), "us");
    assert!(row.get::<_, bool>(3));

    // A restart replays nothing twice: more writes, a second run, and the
    // history grows by exactly their conflicts.
    up.batch_execute(
        "INSERT INTO orders VALUES (11, 'new', 'eleven', 11);
         UPDATE orders SET qty = qty + 1000 WHERE id <= 3;",
    )
    .await
    .unwrap();
    let replica = Arc::new(Replica::new(spec));
    run_until_caught_up(replica.clone(), &up, &node, "node_a").await;
    let qty: Vec<i64> = node
        .query(
            "SELECT qty FROM orders WHERE id IN (1, 2, 3, 11) ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(qty, vec![1001, 1002, 1003, 11]);
    let mut expected = expected;
    *expected
        .get_mut(&key("target_column_missing", "ignore"))
        .unwrap() += 4;
    *expected
        .get_mut(&key("source_column_missing", "use_default_value"))
        .unwrap() += 1;
    *expected
        .get_mut(&key("target_column_type_mismatch", "transform"))
        .unwrap() += 2;
    assert_eq!(history(&node, "node_a").await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_resolver_halts_at_the_transaction_and_skip_passes_it() {
    let up_db = evolve_test::fresh_db("rep_halt_up").await;
    let node_db = evolve_test::fresh_db("rep_halt_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    node.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (2, 'local');",
    )
    .await
    .unwrap();
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::InsertExists, Resolver::Error)
        .unwrap();
    let spec = ReplicaSpec {
        name: "node_h".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![("public".into(), "t".into())],
        resolvers,
        transforms: Vec::new(),
    };
    let replica = Arc::new(Replica::create(spec.clone()).await.unwrap());
    // Three upstream transactions (one query string would be one).
    for sql in [
        "INSERT INTO t VALUES (1, 'a')",
        "INSERT INTO t VALUES (2, 'b'), (3, 'c')",
        "INSERT INTO t VALUES (4, 'd')",
    ] {
        up.batch_execute(sql).await.unwrap();
    }
    let (_stop, task) = start(replica.clone());
    let e = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the replica halts")
        .unwrap()
        .unwrap_err();
    let ReplicateError::Halted { lsn, message, .. } = &e else {
        panic!("not a halt: {e}");
    };
    assert!(message.contains("insert_exists"), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("evolve replicate skip node_h --lsn {lsn}")),
        "{e}"
    );
    assert_eq!(replica.status().state, "halted");
    // The conflict that halted it is counted and in the node's history,
    // though its transaction was rolled back.
    assert_eq!(
        replica
            .status()
            .conflicts
            .get(&(ConflictType::InsertExists, Resolver::Error)),
        Some(&1),
        "{:?}",
        replica.status().conflicts
    );
    let history: Vec<(String, String, String, String)> = node
        .query(
            "SELECT conflict_type, resolution, key::text, detail FROM evolve_conflict_history \
             WHERE replica = 'node_h'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        history,
        vec![(
            "insert_exists".into(),
            "error".into(),
            r#"{"id": "2"}"#.into(),
            "halted the replica".into()
        )]
    );
    // Nothing of the halted transaction was applied; the one before was.
    let got: Vec<(i32, String)> = node
        .query("SELECT id, v FROM t ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(got, vec![(1, "a".into()), (2, "local".into())]);
    // Skip it: the next run passes exactly that transaction.
    Replica::skip(&node_db.url, "node_h", *lsn).await.unwrap();
    let replica = Arc::new(Replica::new(spec));
    run_until_caught_up(replica, &up, &node, "node_h").await;
    let got: Vec<(i32, String)> = node
        .query("SELECT id, v FROM t ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        got,
        vec![(1, "a".into()), (2, "local".into()), (4, "d".into())]
    );
    let skip: Option<String> = node
        .query_one(
            "SELECT skip_lsn::text FROM evolve_replica_progress WHERE replica = 'node_h'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(skip, None, "the skip is cleared once passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_splits_a_column_and_its_filter_drops_rows() {
    let up_db = evolve_test::fresh_db("rep_tf_up").await;
    let node_db = evolve_test::fresh_db("rep_tf_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute("CREATE TABLE customers (id int PRIMARY KEY, name text, status text)")
        .await
        .unwrap();
    // The node has split `name` already.
    node.batch_execute(
        "CREATE TABLE customers (id int PRIMARY KEY, first_name text NOT NULL,
                                 last_name text NOT NULL, status text)",
    )
    .await
    .unwrap();
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    let spec = ReplicaSpec {
        name: "node_tf".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![("public".into(), "customers".into())],
        resolvers,
        transforms: vec![evolve_replicate::Transform {
            name: "split_name".into(),
            schema: "public".into(),
            table: "customers".into(),
            sets: vec![
                ("first_name".into(), "split_part(NEW.name, ' ', 1)".into()),
                ("last_name".into(), "split_part(NEW.name, ' ', 2)".into()),
            ],
            filter: Some("NEW.status <> 'test'".into()),
        }],
    };
    let replica = Arc::new(Replica::create(spec.clone()).await.unwrap());
    up.batch_execute(
        "INSERT INTO customers VALUES (1, 'Ada Lovelace', 'vip'), (2, 'Alan Turing', 'new'),
                                      (3, 'Test User', 'test'), (4, 'Grace Hopper', 'new');
         UPDATE customers SET name = 'Alan M. Turing' WHERE id = 2;
         UPDATE customers SET name = 'Still Test' WHERE id = 3;
         UPDATE customers SET status = 'test' WHERE id = 4;",
    )
    .await
    .unwrap();
    run_until_caught_up(replica.clone(), &up, &node, "node_tf").await;
    let rows: Vec<(i32, String, String, String)> = node
        .query(
            "SELECT id, first_name, last_name, status FROM customers ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let row = |id, f: &str, l: &str, s: &str| (id, f.to_string(), l.to_string(), s.to_string());
    assert_eq!(
        rows,
        vec![
            row(1, "Ada", "Lovelace", "vip"),
            row(2, "Alan", "M.", "new"),
            // The update that made row 4 a test row took it off the node
            // (as PostgreSQL's row filters turn it into a delete): the
            // node keeps no row the filter rejects, nor its old values.
        ]
    );
    // Nothing but the dropped `name` values was a conflict: 4 inserts and
    // 3 updates sent it (columns are matched before the transform runs,
    // so the rows its filter dropped count too), and the filtered update
    // of row 3, which the node never had, is not an update_missing.
    let h = history(&node, "node_tf").await;
    assert_eq!(
        h.get(&key("target_column_missing", "ignore")),
        Some(&7),
        "{h:?}"
    );
    assert_eq!(
        h.get(&key("update_missing", "insert_or_skip")),
        None,
        "{h:?}"
    );
    assert_eq!(h.len(), 1, "{h:?}");

    // A transform the node cannot evaluate halts with the server's error.
    let mut broken = spec.clone();
    broken.transforms[0].sets[0].1 = "NEW.name::int".into();
    up.batch_execute("INSERT INTO customers VALUES (5, 'Edsger Dijkstra', 'new')")
        .await
        .unwrap();
    let (_stop, task) = start(Arc::new(Replica::new(broken)));
    let e = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the replica halts")
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid input syntax for type integer: \"Edsger Dijkstra\""),
        "{e}"
    );
    assert!(matches!(e, ReplicateError::Halted { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_data_meets_the_stream_exactly_under_writes() {
    let up_db = evolve_test::fresh_db("rep_copy_up").await;
    let node_db = evolve_test::fresh_db("rep_copy_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text);
         INSERT INTO items SELECT g, g, 'n' || g FROM generate_series(1, 20000) g;",
    )
    .await
    .unwrap();
    // The node has no `note` yet.
    node.batch_execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)")
        .await
        .unwrap();
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    let spec = ReplicaSpec {
        name: "node_copy".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![("public".into(), "items".into())],
        resolvers,
        transforms: Vec::new(),
    };
    // Writes go on while the copy is taken: each one must arrive exactly
    // once, by the copy or by the stream.
    let writer = {
        let up = connect(&up_db.url).await;
        tokio::spawn(async move {
            for k in 1..=300 {
                up.batch_execute(&format!(
                    "BEGIN; UPDATE items SET v = v + 1000 WHERE id = {k};
                     INSERT INTO items VALUES ({}, 0, NULL); COMMIT;",
                    20_000 + k
                ))
                .await
                .unwrap();
            }
        })
    };
    let (replica, report) = Replica::create_copying(spec).await.unwrap();
    writer.await.unwrap();
    assert_eq!(report.tables, 1);
    assert!(report.rows >= 20_000, "{report:?}");
    let replica = Arc::new(replica);
    run_until_caught_up(replica, &up, &node, "node_copy").await;
    let (up_count, up_sum) = count_and_sum(&up).await;
    assert_eq!(up_count, 20_300);
    assert_eq!(
        count_and_sum(&node).await,
        (up_count, up_sum),
        "the node equals the upstream"
    );
    // A row in both the copy and the stream would have been an
    // insert_exists; none happened. `note`'s values were dropped, by the
    // copy (each row it read) and by the stream (the updates, which
    // carry whole rows).
    let h = history(&node, "node_copy").await;
    assert_eq!(h.get(&key("insert_exists", "update")), None, "{h:?}");
    assert_eq!(h.keys().len(), 1, "{h:?}");
}

async fn count_and_sum(client: &Client) -> (i64, i64) {
    let r = client
        .query_one("SELECT count(*), sum(v)::int8 FROM items", &[])
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// A partitioned upstream table is replicated as the one table it is
/// (the copy reads it through its parent): its stream's changes arrive
/// under the parent's name too, whichever partition holds the row, a row
/// moved between partitions included, so a node with a plain table of
/// that name gets every one, with no conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_table_streams_under_its_own_name() {
    let up_db = evolve_test::fresh_db("rep_part_up").await;
    let node_db = evolve_test::fresh_db("rep_part_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(
        "CREATE TABLE items (id int, region text, v int NOT NULL, PRIMARY KEY (id, region))
           PARTITION BY LIST (region);
         CREATE TABLE items_eu PARTITION OF items FOR VALUES IN ('eu');
         CREATE TABLE items_us PARTITION OF items FOR VALUES IN ('us');
         INSERT INTO items SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g
           FROM generate_series(1, 100) g;",
    )
    .await
    .unwrap();
    node.batch_execute(
        "CREATE TABLE items (id int, region text, v int NOT NULL, PRIMARY KEY (id, region))",
    )
    .await
    .unwrap();
    let spec = ReplicaSpec {
        name: "node_part".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: vec![("public".into(), "items".into())],
        resolvers: Resolvers::default(),
        transforms: Vec::new(),
    };
    let (replica, report) = Replica::create_copying(spec).await.unwrap();
    assert_eq!(report.rows, 100, "{report:?}");
    // Inserts into both partitions, updates in place, deletes, and rows
    // moved from one partition to the other.
    up.batch_execute(
        "INSERT INTO items SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g
           FROM generate_series(101, 150) g;
         UPDATE items SET v = v + 1000 WHERE id <= 20;
         DELETE FROM items WHERE id BETWEEN 21 AND 30;
         UPDATE items SET region = 'us' WHERE region = 'eu' AND id BETWEEN 31 AND 40;",
    )
    .await
    .unwrap();
    let replica = Arc::new(replica);
    run_until_caught_up(replica.clone(), &up, &node, "node_part").await;
    let all = "SELECT id::text || region || v::text FROM items ORDER BY id, region";
    let upstream = rows(&up, all).await;
    assert_eq!(upstream.len(), 140);
    assert_eq!(
        rows(&node, all).await,
        upstream,
        "the node equals the upstream"
    );
    assert_eq!(history(&node, "node_part").await, BTreeMap::new());

    // A replica created by an earlier release has a publication without
    // publish_via_partition_root: its task sets it when it starts, and
    // the changes made after that arrive under the table's own name.
    let via_root =
        "SELECT pubviaroot FROM pg_publication WHERE pubname = 'evolve_replica_node_part'";
    up.batch_execute(
        "ALTER PUBLICATION evolve_replica_node_part SET (publish_via_partition_root = false)",
    )
    .await
    .unwrap();
    assert_eq!(rows(&up, via_root).await, ["(f)"]);
    let (stop, task) = start(replica.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while rows(&up, via_root).await != ["(t)"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the publication was not set"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    up.batch_execute(
        "INSERT INTO items SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g
           FROM generate_series(151, 160) g;
         UPDATE items SET v = v + 1 WHERE id BETWEEN 151 AND 155;",
    )
    .await
    .unwrap();
    let target = tick(&up).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !caught_up(&node, "node_part", &target).await {
        assert!(
            !task.is_finished() && tokio::time::Instant::now() < deadline,
            "the replica did not catch up: {:?}",
            replica.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    let upstream = rows(&up, all).await;
    assert_eq!(upstream.len(), 150);
    assert_eq!(
        rows(&node, all).await,
        upstream,
        "the node equals the upstream"
    );
    assert_eq!(history(&node, "node_part").await, BTreeMap::new());
}
