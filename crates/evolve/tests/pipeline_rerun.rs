//! `evolve sql` as users re-run it: the README's setup file twice through
//! `evolve sql -f`, and `evolve sql` given no statements at all.

mod support;

use support::*;

/// The README's `setup.sql` run a second time: exit 0, one NOTICE per
/// statement, and nothing changes: the same four objects, the table is not
/// snapshotted again (its rows-copied count stays, though rows were added
/// upstream since), one slot upstream, and the sink gets no writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_setup_runs_twice() {
    let env = env("cli_rerun").await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 200) i;",
        )
        .await
        .unwrap();
    let setup = readme_file("setup.sql");
    assert!(setup.contains("CREATE SINK IF NOT EXISTS"), "{setup}");
    let file = env.dir.join("setup.sql");
    std::fs::write(&file, &setup).unwrap();
    let file = file.to_str().unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();

    let out = evolve(&["sql", "--admin", &admin, "-f", file]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "CREATE SOURCE\nCREATE TABLE\nCREATE MATERIALIZED VIEW\nCREATE SINK\n"
    );
    assert_eq!(text(&out.stderr), "");
    wait_running(&admin, "orders_v1").await;
    wait_converged(&env).await;
    let before = wait_all_running(&admin).await;
    let copied = |objects: &[serde_json::Value]| {
        objects
            .iter()
            .find(|o| o["kind"] == "table" && o["name"] == "orders_v1")
            .map(|o| o["rows_copied"].clone())
    };
    assert_eq!(copied(&before), Some(200.into()), "{before:?}");
    audit_sink(&env.sink).await;
    env.up
        .batch_execute("INSERT INTO orders VALUES (201, 'new', 1)")
        .await
        .unwrap();
    wait_converged(&env).await;
    assert_eq!(audit_count(&env.sink).await, 1);

    let out = evolve(&["sql", "--admin", &admin, "-f", file]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "CREATE SOURCE\nCREATE TABLE\nCREATE MATERIALIZED VIEW\nCREATE SINK\n"
    );
    assert_eq!(
        text(&out.stderr),
        "NOTICE:  source \"src\" already exists, skipping\n\
         NOTICE:  table \"orders_v1\" already exists, skipping\n\
         NOTICE:  materialized view \"orders_json\" already exists, skipping\n\
         NOTICE:  sink \"orders_sink\" already exists, skipping\n"
    );
    // Time for a restarted snapshot to show, had one been started.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after = status(&admin).await;
    assert_eq!(after.len(), 4, "{after:?}");
    let names = |objects: &[serde_json::Value]| {
        objects
            .iter()
            .map(|o| format!("{} {} {}", o["kind"], o["name"], o["state"]))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&after), names(&before));
    assert_eq!(copied(&after), Some(200.into()), "{after:?}");
    let slots: i64 = env
        .up
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 1);
    env.up
        .batch_execute("UPDATE orders SET total = 2 WHERE id = 201")
        .await
        .unwrap();
    wait_converged(&env).await;
    assert_eq!(audit_count(&env.sink).await, 2);

    let status = pipeline.terminate();
    assert!(status.success(), "{status:?}");
}

/// `evolve sql` with no -c, no -f and nothing on stdin says how to use it
/// and exits 2, like other bad usage.
#[tokio::test]
async fn sql_without_statements_says_how_to_use_it() {
    let out = evolve(&["sql", "--admin", "http://127.0.0.1:9"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: no statements to run; "),
        "{stderr}"
    );
    assert!(stderr.contains("-c SQL"), "{stderr}");
    assert!(stderr.contains("-f FILE"), "{stderr}");
    assert!(stderr.contains("Usage: evolve sql"), "{stderr}");
    assert_eq!(text(&out.stdout), "");
    // Statements piped to stdin run (here: nobody listens, exit 1).
    let out = tokio::task::spawn_blocking(|| {
        use std::io::Write;
        let mut child = std::process::Command::new(EVOLVE)
            .args(["sql", "--admin", "http://127.0.0.1:9"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"SHOW SOURCES")
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot reach the pipeline's admin API at http://127.0.0.1:9"),
        "{}",
        text(&out.stderr)
    );
}
