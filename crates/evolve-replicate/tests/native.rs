//! The proof against the anchor: the five rolling-upgrade scenarios run
//! through PostgreSQL's own logical replication (a publication and a
//! subscription per scenario) and through evolve, from the same upstream
//! on the same cluster. Native replication stops in each (its error text
//! is asserted, from the server log); evolve goes on per resolver (or
//! halts where the issue says it must, naming both fixes, and goes on once
//! one is applied), every conflict is counted by type, and afterwards each
//! evolve node equals the upstream except for what a resolver
//! documentably drops (`ignore`d columns, rows of a table the node did not
//! have yet).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_replicate::{Replica, ReplicaSpec, Transform};
use tokio_postgres::Client;

/// Waits until the server log has a line with every one of `needles`;
/// the line.
async fn log_line(needles: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = evolve_test::shared().log_tail(20_000);
        if let Some(line) = log.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return line.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no server log line with {needles:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A native subscription in `node` to upstream table `table` of
/// `up_url`, with its slot made first (same cluster), not copying data.
async fn subscribe(up: &Client, up_url: &str, node: &Client, name: &str, table: &str) {
    // Two statements, two transactions: a slot is not made in a
    // transaction that wrote.
    up.batch_execute(&format!("CREATE PUBLICATION {name} FOR TABLE {table}"))
        .await
        .unwrap();
    up.batch_execute(&format!(
        "SELECT pg_create_logical_replication_slot('{name}', 'pgoutput')"
    ))
    .await
    .unwrap();
    node.batch_execute(&format!(
        "CREATE SUBSCRIPTION {name} CONNECTION '{up_url}' PUBLICATION {name}
         WITH (create_slot = false, slot_name = '{name}', copy_data = false)"
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_replication_stops_where_evolve_goes_on() {
    let up_db = evolve_test::fresh_db("cmp_up").await;
    let native_db = evolve_test::fresh_db("cmp_native").await;
    let node_db = evolve_test::fresh_db("cmp_node").await;
    let strict_db = evolve_test::fresh_db("cmp_strict").await;
    let up = connect(&up_db.url).await;
    let native = connect(&native_db.url).await;
    let node = connect(&node_db.url).await;
    let strict = connect(&strict_db.url).await;
    // Unique table names: the server log is the cluster's, shared by every
    // test of the process.
    let schema = "CREATE TABLE cmp1_added (id int PRIMARY KEY, a text);
         CREATE TABLE cmp2_dropped (id int PRIMARY KEY, a text, c int NOT NULL);
         CREATE TABLE cmp3_retyped (id int PRIMARY KEY, status varchar(20));
         CREATE TABLE cmp4_split (id int PRIMARY KEY, name text);";
    up.batch_execute(schema).await.unwrap();
    native.batch_execute(schema).await.unwrap();
    strict.batch_execute(schema).await.unwrap();
    // The evolve node: cmp4 is already split, the others as upstream.
    node.batch_execute(
        "CREATE TABLE cmp1_added (id int PRIMARY KEY, a text);
         CREATE TABLE cmp3_retyped (id int PRIMARY KEY, status varchar(20));
         CREATE TABLE cmp4_split (id int PRIMARY KEY, first_name text, last_name text);",
    )
    .await
    .unwrap();
    native
        .batch_execute(
            "ALTER TABLE cmp4_split DROP COLUMN name;
             ALTER TABLE cmp4_split ADD COLUMN first_name text, ADD COLUMN last_name text;",
        )
        .await
        .unwrap();
    for (n, table) in ["cmp1_added", "cmp2_dropped", "cmp3_retyped", "cmp4_split"]
        .iter()
        .enumerate()
    {
        subscribe(
            &up,
            &up_db.url,
            &native,
            &format!("cmp_sub{}", n + 1),
            table,
        )
        .await;
    }

    // evolve: one replica for scenarios 1, 3, 4 and 5 on `node` (the
    // resolvers of a migration window, and two transforms), one with the
    // defaults for scenario 2 on `strict`.
    let mut window = Resolvers::default();
    window
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    window
        .set(ConflictType::TargetTableMissing, Resolver::Skip)
        .unwrap();
    let tables = |names: &[&str]| {
        names
            .iter()
            .map(|t| ("public".to_string(), t.to_string()))
            .collect::<Vec<_>>()
    };
    let spec = ReplicaSpec {
        name: "cmp_node".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: node_db.url.clone(),
        tables: tables(&["cmp1_added", "cmp3_retyped", "cmp4_split"]),
        resolvers: window,
        transforms: vec![
            Transform {
                name: "fit_status".into(),
                schema: "public".into(),
                table: "cmp3_retyped".into(),
                sets: vec![("status".into(), "left(NEW.status, 20)".into())],
                filter: None,
            },
            Transform {
                name: "split_name".into(),
                schema: "public".into(),
                table: "cmp4_split".into(),
                sets: vec![
                    ("first_name".into(), "split_part(NEW.name, ' ', 1)".into()),
                    ("last_name".into(), "split_part(NEW.name, ' ', 2)".into()),
                ],
                filter: None,
            },
        ],
    };
    let replica = Arc::new(Replica::create(spec.clone()).await.unwrap());
    let strict_spec = ReplicaSpec {
        name: "cmp_strict".into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: strict_db.url.clone(),
        tables: tables(&["cmp2_dropped"]),
        resolvers: Resolvers::default(),
        transforms: Vec::new(),
    };
    let strict_replica = Arc::new(Replica::create(strict_spec.clone()).await.unwrap());

    // The upstream migrates while the nodes have not yet, each statement
    // a transaction of its own.
    for sql in [
        "INSERT INTO cmp1_added VALUES (1, 'x')",
        "ALTER TABLE cmp1_added ADD COLUMN b int",
        "INSERT INTO cmp1_added VALUES (2, 'y', 20), (3, 'z', NULL)",
        "INSERT INTO cmp2_dropped VALUES (1, 'x', 10)",
        "ALTER TABLE cmp2_dropped DROP COLUMN c",
        "INSERT INTO cmp2_dropped VALUES (2, 'y')",
        "ALTER TABLE cmp3_retyped ALTER COLUMN status TYPE text",
        "INSERT INTO cmp3_retyped VALUES (1, 'short'), (2, 'a status much longer than twenty')",
        "INSERT INTO cmp4_split VALUES (1, 'Ada Lovelace'), (2, 'Alan Turing')",
        "CREATE TABLE cmp5_new (id int PRIMARY KEY, v text)",
    ] {
        up.batch_execute(sql).await.unwrap();
    }
    for publication in ["cmp_sub1", "evolve_replica_cmp_node"] {
        up.batch_execute(&format!(
            "ALTER PUBLICATION {publication} ADD TABLE cmp5_new"
        ))
        .await
        .unwrap();
    }
    up.batch_execute("INSERT INTO cmp5_new VALUES (1, 'before the node has it')")
        .await
        .unwrap();

    // Native replication: each subscription stops at its first mismatch,
    // with PostgreSQL's own errors.
    log_line(&["logical replication target relation \"public.cmp1_added\" is missing replicated column: \"b\""]).await;
    log_line(&[
        "null value in column \"c\" of relation \"cmp2_dropped\" violates not-null constraint",
    ])
    .await;
    log_line(&["value too long for type character varying(20)"]).await;
    log_line(&["logical replication target relation \"public.cmp4_split\" is missing replicated column: \"name\""]).await;
    // (cmp5_new rides on cmp_sub1, which is stopped at cmp1; its own
    // error needs a subscription that gets that far.)
    let stuck: Vec<String> = rows(&native, "SELECT id FROM cmp1_added ORDER BY id").await;
    assert_eq!(
        stuck,
        vec!["(1)"],
        "native applied nothing after the mismatch"
    );

    // evolve: the migration-window node goes on.
    assert!(
        run(replica.clone(), &up, &node, "cmp_node").await.is_none(),
        "{:?}",
        replica.status()
    );
    assert_eq!(
        rows(&node, "SELECT id, a FROM cmp1_added ORDER BY id").await,
        vec!["(1,x)", "(2,y)", "(3,z)"]
    );
    assert_eq!(
        rows(&node, "SELECT id, status FROM cmp3_retyped ORDER BY id").await,
        vec!["(1,short)", "(2,\"a status much longer\")"]
    );
    assert_eq!(
        rows(
            &node,
            "SELECT id, first_name, last_name FROM cmp4_split ORDER BY id"
        )
        .await,
        vec!["(1,Ada,Lovelace)", "(2,Alan,Turing)"]
    );
    // Scenario 5: the node creates the table; rows from then on arrive.
    node.batch_execute("CREATE TABLE cmp5_new (id int PRIMARY KEY, v text)")
        .await
        .unwrap();
    up.batch_execute("INSERT INTO cmp5_new VALUES (2, 'after')")
        .await
        .unwrap();
    let replica = Arc::new(Replica::new(spec));
    assert!(run(replica, &up, &node, "cmp_node").await.is_none());
    assert_eq!(
        rows(&node, "SELECT id, v FROM cmp5_new ORDER BY id").await,
        vec!["(2,after)"]
    );
    let expected: BTreeMap<(String, String), i64> = [
        // cmp1: one row with a non-NULL `b` lost it.
        (key("target_column_missing", "ignore"), 1),
        // (cmp3's `status` is computed by its transform, which makes
        // every value fit, so nothing is converted: no type conflict.)
        // cmp5: the row written before the node had the table.
        (key("target_table_missing", "skip"), 1),
    ]
    .into_iter()
    .collect();
    let got = history(&node, "cmp_node").await;
    // cmp4's dropped `name` values (two rows) are target_column_missing
    // too: the node has no `name`.
    let mut expected = expected;
    *expected
        .get_mut(&key("target_column_missing", "ignore"))
        .unwrap() += 2;
    assert_eq!(got, expected);

    // Scenario 2 under the defaults: evolve halts at the row, naming the
    // column and both fixes, with nothing of it applied...
    let halt = run(strict_replica, &up, &strict, "cmp_strict")
        .await
        .expect("the replica halts");
    let text = halt.to_string();
    assert!(
        text.contains("column \"c\"")
            && text.contains("SET DEFAULT")
            && text.contains("DROP NOT NULL")
            && text.contains("source_column_missing"),
        "{text}"
    );
    assert_eq!(
        rows(&strict, "SELECT id FROM cmp2_dropped ORDER BY id").await,
        vec!["(1)"]
    );
    // ... and goes on once the node takes one of them.
    strict
        .batch_execute("ALTER TABLE cmp2_dropped ALTER COLUMN c SET DEFAULT 0")
        .await
        .unwrap();
    assert!(
        run(
            Arc::new(Replica::new(strict_spec)),
            &up,
            &strict,
            "cmp_strict"
        )
        .await
        .is_none()
    );
    assert_eq!(
        rows(&strict, "SELECT id, a, c FROM cmp2_dropped ORDER BY id").await,
        vec!["(1,x,10)", "(2,y,0)"]
    );
    // The halt, logged once, then the column filled by its default, once
    // per match.
    assert_eq!(
        history(&strict, "cmp_strict").await,
        [(key("source_column_missing", "use_default_value"), 2)]
            .into_iter()
            .collect()
    );

    // Native replication is still stopped (it retries every 5 s, failing
    // the same way): nothing after the mismatches arrived.
    let errors: i64 = native
        .query_one(
            "SELECT sum(apply_error_count)::int8 FROM pg_stat_subscription_stats
             WHERE subname LIKE 'cmp_sub%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(errors >= 4, "{errors}");
    assert_eq!(
        rows(&native, "SELECT id FROM cmp4_split ORDER BY id").await,
        Vec::<String>::new()
    );
    for n in 1..=4 {
        native
            .batch_execute(&format!(
                "ALTER SUBSCRIPTION cmp_sub{n} DISABLE;
                 ALTER SUBSCRIPTION cmp_sub{n} SET (slot_name = NONE);
                 DROP SUBSCRIPTION cmp_sub{n};"
            ))
            .await
            .unwrap();
        up.batch_execute(&format!("SELECT pg_drop_replication_slot('cmp_sub{n}')"))
            .await
            .unwrap();
    }
}
