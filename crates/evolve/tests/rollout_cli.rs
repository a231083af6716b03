//! `evolve rollout` as a user runs it: a pipeline with two replicas made
//! through `evolve sql`, then `--plan` refusing a rollout that would halt
//! them (exit 1, each fix named), the fix through `evolve sql`, the
//! rollout over three nodes, and a second run that finds every node
//! migrated.

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_of_three_nodes() {
    let a_db = evolve_test::fresh_db("rocli_a").await;
    let b_db = evolve_test::fresh_db("rocli_b").await;
    let c_db = evolve_test::fresh_db("rocli_c").await;
    let (a, b, c) = (
        connect(&a_db.url).await,
        connect(&b_db.url).await,
        connect(&c_db.url).await,
    );
    for client in [&a, &b, &c] {
        client
            .batch_execute("CREATE TABLE orders (id int PRIMARY KEY, status text)")
            .await
            .unwrap();
    }
    let dir = std::env::temp_dir().join(format!("evolve-rollout-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("migrations")).unwrap();
    std::fs::write(
        dir.join("migrations/V1__region.sql"),
        "ALTER TABLE orders ADD COLUMN region text;\n",
    )
    .unwrap();
    let config = dir.join("evolve.toml");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.node_a]\nurl = \"{}\"\n\
             [connections.node_b]\nurl = \"{}\"\n\
             [connections.node_c]\nurl = \"{}\"\n\
             [connections.node_dead]\nurl = \"postgres://postgres@127.0.0.1:{closed}/nowhere\"\n",
            a_db.url, b_db.url, c_db.url
        ),
    )
    .unwrap();
    let pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    sql_ok(
        &admin,
        &[
            "-c",
            "CREATE SOURCE src FROM POSTGRES CONNECTION node_a (PUBLICATION 'evolve_pub');
             CREATE REPLICA rep_b FROM SOURCE src INTO POSTGRES CONNECTION node_b WITH (TABLES (public.orders));
             CREATE REPLICA rep_c FROM SOURCE src INTO POSTGRES CONNECTION node_c WITH (TABLES (public.orders));",
        ],
    )
    .await;
    let config_arg = config.to_str().unwrap();
    let migrations = dir.join("migrations");
    let rollout = |extra: &'static [&'static str]| {
        let mut args = vec![
            "rollout",
            "--config",
            config_arg,
            "--dir",
            migrations.to_str().unwrap(),
            "--nodes",
            "node_a,node_b,node_c",
            "--source",
            "src",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| async move {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        evolve(&refs).await
    };

    // A node that cannot be reached is named with where its url comes
    // from: the config, not a --database-url the rollout does not have.
    let out = evolve(&[
        "rollout",
        "--config",
        config_arg,
        "--dir",
        migrations.to_str().unwrap(),
        "--nodes",
        "node_a,node_b,node_c,node_dead",
        "--plan",
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("node node_dead: could not connect to ")
            && stderr.contains("check the node's connection in the config (--config)")
            && !stderr.contains("--database-url"),
        "{stderr}"
    );

    // The default target_column_missing (ignore_if_null) would halt both
    // replicas at the first row with a region: refused, each fix named.
    let out = run(rollout(&["--plan"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for replica in ["rep_b", "rep_c"] {
        assert!(
            stdout.contains(&format!(
                "fix: ALTER REPLICA {replica} SET CONFLICT RESOLVER target_column_missing = 'ignore'"
            )),
            "{stdout}"
        );
    }
    let out = run(rollout(&[])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("the rollout would halt replication"),
        "{}",
        text(&out.stderr)
    );
    let history: i64 = a
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'evolve_schema_history'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(history, 0, "nothing ran");

    // The fix, as printed; then the rollout runs, node by node.
    for replica in ["rep_b", "rep_c"] {
        sql_ok(
            &admin,
            &[
                "-c",
                &format!(
                    "ALTER REPLICA {replica} SET CONFLICT RESOLVER target_column_missing = 'ignore'"
                ),
            ],
        )
        .await;
    }
    let out = run(rollout(&["--plan"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no replica would halt"));
    a.batch_execute("INSERT INTO orders VALUES (1, 'before')")
        .await
        .unwrap();
    let out = run(rollout(&["--catchup-timeout", "60s"])).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for line in [
        "checked 1 pending statement(s) against 2 replica(s): nothing would halt",
        "node node_a: applied 1 migration(s)",
        "node node_b: applied 1 migration(s)",
        "node node_c: applied 1 migration(s)",
        "node node_c: every replica caught up in",
    ] {
        assert!(stderr.contains(line), "{line:?} missing from {stderr}");
    }
    a.batch_execute("INSERT INTO orders VALUES (2, 'after', 'eu')")
        .await
        .unwrap();
    for node in [&b, &c] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let rows: Vec<(i32, Option<String>)> = node
                .query("SELECT id, region FROM orders ORDER BY id", &[])
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            if rows == vec![(1, None), (2, Some("eu".to_string()))] {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Resumable: a second run has nothing to do on any node.
    let out = run(rollout(&[])).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("nothing pending (migrated before)").count(),
        3,
        "{stderr}"
    );
    drop(pipeline);
    let _ = std::fs::remove_dir_all(&dir);
}
