//! `evolve backfill` throttling: a logical slot that retains WAL pauses
//! it until the slot is gone, a long lock wait pauses and retries, and the
//! batch size adapts to the target batch time. Its own cluster, so the
//! slot holds back no other test's WAL.

mod backfill_support;

use std::time::Duration;

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

/// A streaming replica whose replay is paused falls behind while the
/// backfill writes; `--max-lag` pauses the backfill until the replica
/// replays again, and the replica ends with every row changed. A primary
/// of its own, so that no other test sees the replica's lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_replaying_behind_pauses_the_backfill_until_it_catches_up() {
    let primary = evolve_test::Cluster::start().expect("primary");
    let db = primary.create_database("bf_replica").await.unwrap();
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE s (id int PRIMARY KEY, a int, b int);
         INSERT INTO s SELECT i, i, NULL FROM generate_series(1, 20000) i;",
    )
    .await
    .unwrap();
    let standby = primary.start_standby("replica_a").expect("standby");
    let r = connect(&standby.url(&db.name)).await;
    let caught_up = async |r: &tokio_postgres::Client, sql: &str, want: i64| {
        for _ in 0..600 {
            if r.query_one(sql, &[])
                .await
                .is_ok_and(|row| row.get::<_, i64>(0) == want)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the replica never answered {want} to {sql}");
    };
    caught_up(&r, "SELECT count(*) FROM s", 20000).await;
    r.batch_execute("SELECT pg_wal_replay_pause()")
        .await
        .unwrap();
    // WAL the replica receives but does not replay, for longer than the
    // limit.
    c.batch_execute("CREATE TABLE filler AS SELECT i FROM generate_series(1, 1000) i")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let mut run = Background::start(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "s",
            "--set",
            "b = a",
            "--max-lag",
            "1s",
            "--poll",
            "100ms",
            "--batch",
            "200",
            "--batch-time",
            "0",
            "--format",
            "json",
        ],
    );
    let paused = run.wait_for("paused", |v| v["type"] == "paused");
    assert_eq!(paused["reason"], "replica_lag", "{paused}");
    assert_eq!(paused["replica"], "replica_a");
    assert!(paused["lag_ms"].as_u64().unwrap() > 1000, "{paused}");
    assert!(
        paused["message"]
            .as_str()
            .unwrap()
            .contains("replica \"replica_a\" replays"),
        "{paused}"
    );
    // While paused, nothing is written.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(
        events(&run.seen, "batch").is_empty(),
        "it paused before the first batch"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM s WHERE b IS NOT NULL").await,
        0,
        "no batch ran while the replica was behind"
    );
    r.batch_execute("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    let (status, lines, stderr) = run.finish();
    assert!(status.success(), "{stderr}");
    assert!(!events(&lines, "resumed").is_empty(), "{lines:?}");
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 20000);
    assert_eq!(count(&c, "SELECT count(*) FROM s WHERE b = a").await, 20000);
    caught_up(&r, "SELECT count(*) FROM s WHERE b = a", 20000).await;
}

/// `--nice 2` waits twice each batch's duration before the next: batches
/// slowed to at least 50 ms each (a statement trigger that sleeps) take at
/// least three times as long in all.
#[tokio::test]
async fn nice_waits_a_multiple_of_each_batch_before_the_next() {
    let db = evolve_test::fresh_db("bf_nice").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE n (id int PRIMARY KEY, a int, b int);
         INSERT INTO n SELECT i, i, NULL FROM generate_series(1, 500) i;
         CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN PERFORM pg_sleep(0.05); RETURN NULL; END $$;
         CREATE TRIGGER slow AFTER UPDATE ON n FOR EACH STATEMENT EXECUTE FUNCTION slow();",
    )
    .await
    .unwrap();
    let args = |nice: &'static str, column: &'static str| {
        let set: &'static str = if column == "a" { "a = a" } else { "b = a" };
        vec![
            "backfill",
            "run",
            "--name",
            column,
            "--table",
            "n",
            "--set",
            set,
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--nice",
            nice,
            "--format",
            "json",
        ]
    };
    let started = std::time::Instant::now();
    let out = evolve(&db.url, &args("2", "b"));
    let took = started.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    let batches = events(&lines, "batch");
    assert_eq!(batches.len(), 5, "{lines:?}");
    let batch_ms: u64 = batches.iter().map(|b| b["ms"].as_u64().unwrap()).sum();
    assert!(
        batch_ms >= 250,
        "each batch took its trigger's 50 ms: {batch_ms}"
    );
    // Four waits (none after the last batch) of twice the batch before.
    let waits: u64 = batches[..4]
        .iter()
        .map(|b| 2 * b["ms"].as_u64().unwrap())
        .sum();
    assert!(
        took.as_millis() as u64 >= batch_ms + waits,
        "{} ms in all for {batch_ms} ms of batches and {waits} ms of waits",
        took.as_millis()
    );
    assert_eq!(count(&c, "SELECT count(*) FROM n WHERE b = a").await, 500);
    let refused = evolve(&db.url, &args("101", "a"));
    assert_eq!(refused.status.code(), Some(2), "a usage error");
    assert!(
        text(&refused.stderr).contains("\"101\" is not a ratio from 0 to 100"),
        "{}",
        text(&refused.stderr)
    );
}

/// Waits until a session of `application_name` waits for a lock.
async fn until_waiting(c: &tokio_postgres::Client, application_name: &str) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND datname = current_database()";
    while c
        .query_one(sql, &[&application_name])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A batch the server rolls back to break a deadlock is tried again like
/// one whose lock_timeout expired, and the pause says why.
#[tokio::test]
async fn a_batch_chosen_as_a_deadlock_victim_is_retried() {
    let db = evolve_test::fresh_db("bf_deadlock").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE l (id int PRIMARY KEY, a int, b int);
         INSERT INTO l SELECT i, i, NULL FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    // The holder never runs the deadlock check itself (60 s), so the
    // backfill's session (1 s) is the one the server rolls back.
    let holder = connect(&db.url).await;
    holder
        .batch_execute(
            "SET deadlock_timeout = '60s'; BEGIN; SELECT * FROM l WHERE id = 50 FOR UPDATE",
        )
        .await
        .unwrap();
    let run = Background::start(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "l",
            "--set",
            "b = a",
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--lock-timeout",
            "60s",
            "--lock-retry-delay",
            "10ms",
            "--format",
            "json",
        ],
    );
    until_waiting(&c, "evolve backfill").await;
    // The first batch holds rows 1 to 49 and waits for 50; the holder now
    // waits for row 10: a deadlock.
    holder
        .batch_execute("UPDATE l SET a = a WHERE id = 10")
        .await
        .unwrap();
    holder.batch_execute("COMMIT").await.unwrap();
    let (status, lines, stderr) = run.finish();
    assert!(status.success(), "{stderr}");
    let paused = events(&lines, "paused");
    assert_eq!(paused.len(), 1, "{lines:?}");
    assert_eq!(paused[0]["reason"], "conflict");
    assert_eq!(paused[0]["cause"], "deadlock");
    assert_eq!(paused[0]["attempt"], 1);
    assert!(
        paused[0]["message"]
            .as_str()
            .unwrap()
            .contains("rolled back by a deadlock"),
        "{}",
        paused[0]
    );
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 300);
    assert_eq!(count(&c, "SELECT count(*) FROM l WHERE b = a").await, 300);
}

/// Under REPEATABLE READ (the database's default here), a batch that
/// finds a row updated since its snapshot fails with a serialization
/// failure: tried again with a new snapshot, and given up after
/// --lock-retries with a message that says so.
#[tokio::test]
async fn a_serialization_failure_is_retried_and_given_up_after_the_last_retry() {
    let db = evolve_test::fresh_db("bf_serialize").await;
    let c = connect(&db.url).await;
    c.batch_execute(&format!(
        "CREATE TABLE l (id int PRIMARY KEY, a int, b int);
         INSERT INTO l SELECT i, i, NULL FROM generate_series(1, 300) i;
         ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read';",
        db.name
    ))
    .await
    .unwrap();
    let args = |retries: &'static str| {
        vec![
            "backfill",
            "run",
            "--table",
            "l",
            "--set",
            "b = a",
            "--name",
            "rr",
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--lock-timeout",
            "60s",
            "--lock-retries",
            retries,
            "--lock-retry-delay",
            "10ms",
            "--format",
            "json",
        ]
    };
    for retries in ["1", "0"] {
        let holder = connect(&db.url).await;
        holder
            .batch_execute("BEGIN; UPDATE l SET a = a WHERE id = 150")
            .await
            .unwrap();
        let run = Background::start(&db.url, &args(retries));
        until_waiting(&c, "evolve backfill").await;
        holder.batch_execute("COMMIT").await.unwrap();
        let (status, lines, stderr) = run.finish();
        if retries == "1" {
            assert!(status.success(), "{stderr}");
            let paused = events(&lines, "paused");
            assert_eq!(paused.len(), 1, "{lines:?}");
            assert_eq!(paused[0]["reason"], "conflict");
            assert_eq!(paused[0]["cause"], "serialization_failure");
            assert_eq!(count(&c, "SELECT count(*) FROM l WHERE b = a").await, 300);
            c.batch_execute("UPDATE l SET b = NULL").await.unwrap();
        } else {
            assert_eq!(status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains(
                    "backfill rr gave up: its last attempt (number 1, as --lock-retries allows) was rolled back by a serialization failure"
                ) && stderr.contains("public.l"),
                "{stderr}"
            );
        }
    }
}

/// Preparing the batch statements takes the table's locks too: under
/// --lock-timeout with the batches' retries, not waiting for as long as
/// another session holds the table.
#[tokio::test]
async fn a_table_locked_before_the_first_batch_is_given_up_after_lock_timeout() {
    let db = evolve_test::fresh_db("bf_preplock").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE l (id int PRIMARY KEY, a int, b int);
         INSERT INTO l SELECT i, i, NULL FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    let holder = connect(&db.url).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE l IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    // Released after 15 s at the latest.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(15)).await;
        holder.batch_execute("COMMIT").await.unwrap();
        holder
    });
    let url = db.url.clone();
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        evolve(
            &url,
            &[
                "backfill",
                "run",
                "--table",
                "l",
                "--set",
                "b = a",
                "--name",
                "once",
                "--lock-timeout",
                "200ms",
                "--lock-retries",
                "1",
                "--lock-retry-delay",
                "10ms",
            ],
        )
    })
    .await
    .unwrap();
    let took = started.elapsed();
    release.abort();
    assert_refused(
        &out,
        &["backfill once could not take its locks within 200 ms in 2 attempts"],
    );
    assert!(took < Duration::from_secs(10), "gave up after {took:?}");
    assert_eq!(
        count(&c, "SELECT count(*) FROM l WHERE b IS NOT NULL").await,
        0
    );
}
