//! `evolve backfill` throttling: a logical slot that retains WAL pauses
//! it until the slot is gone, a long lock wait pauses and retries, and the
//! batch size adapts to the target batch time. Its own cluster, so the
//! slot holds back no other test's WAL.

mod backfill_support;

use backfill_support::{Background, assert_refused, connect, count, events, evolve, text};

#[tokio::test]
async fn a_slot_retaining_wal_pauses_the_backfill_until_it_is_dropped() {
    let db = evolve_test::fresh_db("bf_slot").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE s (id int PRIMARY KEY, a int, b int);
         INSERT INTO s SELECT i, i, NULL FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    // A slot nobody consumes, then WAL for it to retain.
    c.batch_execute("SELECT pg_create_logical_replication_slot('held_back', 'test_decoding')")
        .await
        .unwrap();
    c.batch_execute(
        "CREATE TABLE filler AS SELECT repeat('x', 1000) AS x FROM generate_series(1, 4000);",
    )
    .await
    .unwrap();
    let mut run = Background::start(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "s",
            "--set",
            "b = a",
            "--max-slot-wal",
            "1MB",
            "--max-lag",
            "5s",
            "--poll",
            "50ms",
            "--batch",
            "500",
            "--format",
            "json",
        ],
    );
    let paused = run.wait_for("paused", |v| v["type"] == "paused");
    assert_eq!(paused["reason"], "slot_wal");
    assert_eq!(paused["slot"], "held_back");
    assert!(paused["bytes"].as_u64().unwrap() > 1 << 20);
    assert!(
        paused["message"]
            .as_str()
            .unwrap()
            .contains("replication slot \"held_back\" retains"),
        "{paused}"
    );
    assert!(
        events(&run.seen, "batch").is_empty(),
        "it paused before the first batch"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM s WHERE b IS NOT NULL").await,
        0
    );
    c.batch_execute("SELECT pg_drop_replication_slot('held_back')")
        .await
        .unwrap();
    let (status, lines, stderr) = run.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(events(&lines, "paused").len(), 1);
    assert_eq!(events(&lines, "resumed").len(), 1);
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 2000);
    assert_eq!(count(&c, "SELECT count(*) FROM s WHERE b = a").await, 2000);
}

#[tokio::test]
async fn a_long_lock_wait_pauses_and_retries_and_gives_up_after_the_last_retry() {
    let db = evolve_test::fresh_db("bf_lockwait").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE l (id int PRIMARY KEY, a int, b int);
         INSERT INTO l SELECT i, i, NULL FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    let holder = connect(&db.url).await;
    holder
        .batch_execute("BEGIN; SELECT * FROM l WHERE id = 150 FOR UPDATE")
        .await
        .unwrap();
    // Given up: two attempts, both time out.
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "l",
            "--set",
            "b = a",
            "--name",
            "once",
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--lock-timeout",
            "100ms",
            "--lock-retries",
            "1",
            "--lock-retry-delay",
            "10ms",
        ],
    );
    assert_refused(
        &out,
        &[
            "backfill once could not take its locks within 100 ms in 2 attempts",
            "public.l",
        ],
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM l WHERE b IS NOT NULL").await,
        100,
        "the first batch committed"
    );
    // With retries to spare, it pauses until the lock is free.
    let mut run = Background::start(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "l",
            "--set",
            "b = a",
            "--name",
            "once",
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--lock-timeout",
            "100ms",
            "--lock-retries",
            "1000",
            "--lock-retry-delay",
            "10ms",
            "--format",
            "json",
        ],
    );
    let paused = run.wait_for("lock wait", |v| v["type"] == "paused");
    assert_eq!(paused["reason"], "lock_wait");
    holder.batch_execute("COMMIT").await.unwrap();
    let (status, lines, stderr) = run.finish();
    assert!(status.success(), "{stderr}");
    assert!(!events(&lines, "paused").is_empty());
    assert!(
        events(&lines, "paused")
            .iter()
            .all(|p| p["reason"] == "lock_wait")
    );
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 300);
    assert_eq!(count(&c, "SELECT count(*) FROM l WHERE b = a").await, 300);
}

#[tokio::test]
async fn the_batch_size_grows_toward_the_target_batch_time() {
    let db = evolve_test::fresh_db("bf_adapt").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE g (id int PRIMARY KEY, a int, b int);
         INSERT INTO g SELECT i, i, NULL FROM generate_series(1, 20000) i;",
    )
    .await
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "g",
            "--set",
            "b = a",
            "--batch",
            "10",
            "--batch-time",
            "2s",
            "--format",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    let batches = events(&lines, "batch");
    // A fixed size of 10 would take 2000 batches; batches of 10 rows take
    // far less than 2 s, so each next one is twice as big.
    assert!(batches.len() < 20, "{} batches", batches.len());
    assert_eq!(batches[0]["next_size"], 20);
    assert_eq!(batches[1]["next_size"], 40);
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 20000);
}
