//! The sink's freshness in `evolve status`: upstream commit to sink
//! commit, live.

mod support;

use std::time::{Duration, Instant};

use support::*;

fn sink_lag(objects: &[serde_json::Value]) -> f64 {
    let sink = objects
        .iter()
        .find(|o| o["kind"] == "sink")
        .unwrap_or_else(|| panic!("no sink in {objects:?}"));
    sink["lag_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no lag_seconds in {sink}"))
}

/// A sink held back by a lock in the sink database grows late by the
/// time it is held (the source is not: it keeps applying), shows it in
/// the text status, and is fresh again once the lock goes and a new
/// transaction arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_sink_shows_its_lag_and_recovers() {
    let env = env("cli_lag").await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 20) i;",
        )
        .await
        .unwrap();
    let file = env.dir.join("setup.sql");
    std::fs::write(&file, readme_file("setup.sql")).unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    sql_ok(&admin, &["-f", file.to_str().unwrap()]).await;
    wait_all_running(&admin).await;
    wait_converged(&env).await;
    env.up
        .batch_execute("INSERT INTO orders VALUES (21, 'x', 1)")
        .await
        .unwrap();
    wait_converged(&env).await;
    let fresh = sink_lag(&status(&admin).await);
    assert!(fresh < 1.0, "a caught-up sink is {fresh} s late");

    // Hold the sink's table: its writes wait behind the lock.
    let holder = connect(&env.sink_db.url).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE public.orders_json IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    env.up
        .batch_execute("INSERT INTO orders VALUES (22, 'y', 2)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let objects = status(&admin).await;
    let held = sink_lag(&objects);
    assert!(
        (2.5..30.0).contains(&held),
        "a sink held for 3 s is {held} s late"
    );
    let source = objects
        .iter()
        .find(|o| o["kind"] == "source")
        .expect("source");
    assert!(
        source["lag_seconds"].as_f64().unwrap() < 1.0,
        "the source kept applying: {source}"
    );
    let out = evolve(&["status", "--admin", &admin]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.lines().next().unwrap().contains("| lag "), "{table}");
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("sink"))
        .unwrap_or_else(|| panic!("no sink row in {table}"));
    let shown: f64 = row
        .split('|')
        .nth(5)
        .and_then(|c| c.trim().strip_suffix(" s"))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no lag in {row:?}"));
    assert!(shown >= 2.5, "{row}");

    holder.batch_execute("COMMIT").await.unwrap();
    wait_converged(&env).await;
    env.up
        .batch_execute("INSERT INTO orders VALUES (23, 'z', 3)")
        .await
        .unwrap();
    wait_converged(&env).await;
    let start = Instant::now();
    loop {
        let lag = sink_lag(&status(&admin).await);
        if lag < 1.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the sink is still {lag} s late after catching up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = pipeline.terminate();
    assert!(status.success(), "{status:?}");
}
