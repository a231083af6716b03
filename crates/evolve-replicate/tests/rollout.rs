//! A rolling upgrade of three nodes: the check refuses a rollout that
//! would halt replication (naming each fix), then the rollout migrates the
//! upstream and the two replicas' nodes one at a time while writes go on,
//! waits for the replicas after each, and a second run finds nothing to
//! do (a stopped rollout resumes with the next node).

mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_replicate::rollout::{self, ReplicaView, RolloutError, RolloutSpec, Step};
use evolve_replicate::{Replica, ReplicaSpec};
use tokio::sync::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_are_upgraded_one_at_a_time_while_replicating() {
    let up_db = evolve_test::fresh_db("roll_a").await;
    let b_db = evolve_test::fresh_db("roll_b").await;
    let c_db = evolve_test::fresh_db("roll_c").await;
    let up = connect(&up_db.url).await;
    let b = connect(&b_db.url).await;
    let c = connect(&c_db.url).await;
    for client in [&up, &b, &c] {
        client
            .batch_execute("CREATE TABLE orders (id int PRIMARY KEY, status text)")
            .await
            .unwrap();
    }
    let dir = std::env::temp_dir().join(format!("evolve-rollout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("V1__audit.sql"),
        "CREATE TABLE audit (id int PRIMARY KEY, what text);\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("V2__region.sql"),
        "ALTER TABLE orders ADD COLUMN region text;\n",
    )
    .unwrap();

    let spec = |name: &str, url: &str, resolvers: Resolvers| ReplicaSpec {
        name: name.into(),
        upstream: up_db.url.clone(),
        upstream_connection: "up".into(),
        node: url.into(),
        // FOR TABLE lists existing tables only; `audit` is added to the
        // publications below, as the migration creates it upstream.
        tables: vec![("public".into(), "orders".into())],
        resolvers,
        transforms: Vec::new(),
    };
    let view = |name: &str, node: &str, resolvers: Resolvers| ReplicaView {
        name: name.into(),
        node: node.into(),
        resolvers,
        transforms: Vec::new(),
        tables: Vec::new(),
    };
    let nodes = vec![
        ("a".to_string(), up_db.url.clone()),
        ("b".to_string(), b_db.url.clone()),
        ("c".to_string(), c_db.url.clone()),
    ];
    let rollout_spec = |resolvers: Resolvers| RolloutSpec {
        dir: dir.clone(),
        nodes: nodes.clone(),
        upstream: "a".into(),
        replicas: vec![
            (view("node_b", "b", resolvers.clone()), b_db.url.clone()),
            (view("node_c", "c", resolvers), c_db.url.clone()),
        ],
        catchup_timeout: Duration::from_secs(60),
    };

    // With the default resolvers the rollout is refused before anything
    // runs: the new table and the new column would halt both replicas.
    let e = rollout::run(&rollout_spec(Resolvers::default()), &mut |_| {})
        .await
        .unwrap_err();
    let RolloutError::Refused(found) = &e else {
        panic!("not refused: {e}");
    };
    assert_eq!(found.len(), 4, "{found:#?}");
    let text = e.to_string();
    assert!(
        text.contains("ALTER REPLICA node_b SET CONFLICT RESOLVER target_table_missing = 'skip'")
            && text.contains(
                "ALTER REPLICA node_c SET CONFLICT RESOLVER target_column_missing = 'ignore'"
            ),
        "{text}"
    );
    let tables: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename IN ('audit', 'evolve_schema_history')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "nothing ran");

    // The migration window's resolvers: the rollout may run.
    let mut window = Resolvers::default();
    window
        .set(ConflictType::TargetTableMissing, Resolver::Skip)
        .unwrap();
    window
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    let mut tasks = Vec::new();
    let (stop, stop_rx) = watch::channel(false);
    for (name, url) in [("node_b", &b_db.url), ("node_c", &c_db.url)] {
        let replica = Arc::new(
            Replica::create(spec(name, url, window.clone()))
                .await
                .unwrap(),
        );
        let rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move { replica.run(rx).await }));
    }
    // Writes go on through the whole rollout.
    let (writing, mut writing_rx) = watch::channel(true);
    let writer = {
        let up = connect(&up_db.url).await;
        tokio::spawn(async move {
            let mut k = 0;
            while *writing_rx.borrow_and_update() {
                k += 1;
                up.batch_execute(&format!(
                    "INSERT INTO orders (id, status) VALUES ({k}, 'new')"
                ))
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            k
        })
    };
    let mut seen = Vec::new();
    let steps = rollout::run(&rollout_spec(window.clone()), &mut |s| seen.push(s.clone()))
        .await
        .unwrap();
    assert_eq!(steps, seen);
    let names: Vec<String> = steps
        .iter()
        .map(|s| match s {
            Step::Checked {
                statements,
                replicas,
            } => format!("checked {statements} {replicas}"),
            Step::Migrated { node, applied } => format!("migrated {node} {applied}"),
            Step::CaughtUp { node, .. } => format!("caught up {node}"),
            Step::AlreadyMigrated { node } => format!("already {node}"),
        })
        .collect();
    assert_eq!(
        names,
        vec![
            "checked 2 2",
            "migrated a 2",
            "caught up a",
            "migrated b 2",
            "caught up b",
            "migrated c 2",
            "caught up c"
        ]
    );
    // Every node is at the new version; new rows carry `region` to all.
    for pub_name in ["evolve_replica_node_b", "evolve_replica_node_c"] {
        up.batch_execute(&format!("ALTER PUBLICATION {pub_name} ADD TABLE audit"))
            .await
            .unwrap();
    }
    up.batch_execute(
        "INSERT INTO orders (id, status, region) VALUES (100000, 'after', 'eu');
         INSERT INTO audit VALUES (1, 'after the rollout');",
    )
    .await
    .unwrap();
    writing.send(false).unwrap();
    let written = writer.await.unwrap();
    assert!(written > 0);
    let marker: String = up
        .query_one(
            "SELECT pg_logical_emit_message(true, 'test', 'end')::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for (node, name) in [(&b, "node_b"), (&c, "node_c")] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let done = node
                .query_opt(
                    "SELECT 1 FROM evolve_replica_progress WHERE replica = $1 AND lsn > $2::text::pg_lsn",
                    &[&name, &marker],
                )
                .await
                .unwrap()
                .is_some();
            if done {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            rows(node, "SELECT id, status FROM orders ORDER BY id").await,
            rows(&up, "SELECT id, status FROM orders ORDER BY id").await,
            "{name} has every row"
        );
        assert_eq!(
            rows(node, "SELECT region FROM orders WHERE id = 100000").await,
            vec!["(eu)"]
        );
        assert_eq!(
            rows(node, "SELECT what FROM audit").await,
            vec!["(\"after the rollout\")"]
        );
        assert_eq!(
            rows(
                node,
                "SELECT version FROM evolve_schema_history ORDER BY installed_rank"
            )
            .await,
            vec!["(1)", "(2)"]
        );
    }
    // A second run has nothing left to migrate.
    let again = rollout::run(&rollout_spec(window), &mut |_| {})
        .await
        .unwrap();
    assert!(
        again
            .iter()
            .filter(|s| matches!(s, Step::AlreadyMigrated { .. }))
            .count()
            == 3,
        "{again:?}"
    );
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// numeric(10,2) into an integer column: `pg_cast` has an assignment cast,
/// but the apply gives the text `5.00` to integer's input, which refuses
/// it; the plan says so for the direction that sends numeric to the
/// integer column, with the rows and a fix. A replica halted by a row its
/// node refuses stops the rollout with its halt and the ways past it, and
/// a node that cannot be reached is named by where its url comes from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_predicts_the_text_conversion_and_a_halt_stops_the_rollout_with_its_cause() {
    let up_db = evolve_test::fresh_db("rollnum_a").await;
    let b_db = evolve_test::fresh_db("rollnum_b").await;
    let up = connect(&up_db.url).await;
    let b = connect(&b_db.url).await;
    up.batch_execute("CREATE TABLE load (id int PRIMARY KEY, amount numeric(10,2))")
        .await
        .unwrap();
    // The node refuses amounts of 100 or more.
    b.batch_execute(
        "CREATE TABLE load (id int PRIMARY KEY, amount numeric(10,2) CHECK (amount < 100))",
    )
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("evolve-rollout-num-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("V1__amount_int.sql"),
        "ALTER TABLE load ALTER COLUMN amount TYPE integer;\n",
    )
    .unwrap();
    let view = ReplicaView {
        name: "rep_num".into(),
        node: "b".into(),
        resolvers: Resolvers::default(),
        transforms: Vec::new(),
        tables: Vec::new(),
    };
    let rollout_spec = |order: &[&str]| RolloutSpec {
        dir: dir.clone(),
        nodes: order
            .iter()
            .map(|n| {
                let url = if *n == "a" { &up_db.url } else { &b_db.url };
                (n.to_string(), url.clone())
            })
            .collect(),
        upstream: "a".into(),
        replicas: vec![(view.clone(), b_db.url.clone())],
        catchup_timeout: Duration::from_secs(3),
    };

    // The node first: it gets integer while the upstream still sends
    // numeric(10,2), every value of which would halt.
    let (_, found) = rollout::check(&rollout_spec(&["b", "a"])).await.unwrap();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        found[0].problem,
        "column public.load.amount reaches node b as numeric(10,2) while it has integer, and integer's input function refuses the text of every value (numeric with scale 2 prints 2 decimal places, e.g. 5.00): each row with such a value would halt the replica"
    );
    assert_eq!(
        found[0].fix,
        "CREATE TRANSFORM ... ON REPLICA rep_num FOR TABLE public.load SET amount = NEW.amount::integer (drop it once every node has the new type)"
    );
    // The upstream first: integers into numeric(10,2) all convert.
    let (_, found) = rollout::check(&rollout_spec(&["a", "b"])).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");

    // A replica halted by a row its node refuses: the rollout stops after
    // the upstream's migration with the halt, not only a position.
    let replica = Arc::new(
        Replica::create(ReplicaSpec {
            name: "rep_num".into(),
            upstream: up_db.url.clone(),
            upstream_connection: "a".into(),
            node: b_db.url.clone(),
            tables: vec![("public".into(), "load".into())],
            resolvers: Resolvers::default(),
            transforms: Vec::new(),
        })
        .await
        .unwrap(),
    );
    up.batch_execute("INSERT INTO load VALUES (1, 500)")
        .await
        .unwrap();
    let halt = run(replica, &up, &b, "rep_num")
        .await
        .expect("the replica halts");
    let evolve_replicate::ReplicateError::Halted { lsn, .. } = &halt else {
        panic!("not a halt: {halt}");
    };
    let e = rollout::run(&rollout_spec(&["a", "b"]), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(e, RolloutError::CatchUp { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "replica rep_num did not catch up within 3s after node a: it is halted at the upstream transaction finished at {lsn}: the node refused a row of \"public\".\"load\" with key {{\"id\":\"1\"}}: ERROR 23514: new row for relation \"load\" violates check constraint \"load_amount_check\""
        )) && text.ends_with(&format!(
            "; the rollout stopped: fix the cause (the replica tries again by itself, every 30s at most) or skip that transaction with `evolve replicate skip rep_num --lsn {lsn}`, then run the rollout again to continue with the next node"
        )),
        "{text}"
    );

    // A node nobody listens on: the way out names the config, which
    // `evolve rollout` reads its urls from.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut dead = rollout_spec(&["a", "b"]);
    dead.nodes[1].1 = format!("postgres://postgres@127.0.0.1:{closed}/nowhere");
    dead.replicas[0].1 = dead.nodes[1].1.clone();
    let e = rollout::check(&dead).await.unwrap_err().to_string();
    assert!(
        e.starts_with("node b: ")
            && e.contains("check the node's connection in the config (--config)")
            && !e.contains("--database-url"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
