//! The pipeline against real clusters: upstream on the shared cluster, the
//! sink on a second one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use evolve_pipeline::{ObjectKind, Pipeline, PipelineError, TableSpec, TableState};

const CONVERGE: Duration = Duration::from_secs(30);

/// Documents of many types, from the snapshot and from the stream, equal
/// the upstream server's `coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}')`;
/// deletes, key changes and no-op updates behave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_in_the_sink_equal_the_servers() {
    let env = env("documents").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        r#"CREATE TYPE mood AS ENUM ('happy', 'sad');
         CREATE TYPE pair AS (x int, label text);
         CREATE TABLE items (
            id int PRIMARY KEY, name text, price numeric(10,2), ratio float8, ok bool,
            at timestamptz, day date, tags text[], meta jsonb, m mood, p pair, gone int,
            iv interval, raw bytea, n numeric
         );
         INSERT INTO items
         SELECT i, 'item ' || i, i * 1.25, i / 3.0, i % 2 = 0,
                '2024-01-02 03:04:05.678+02'::timestamptz + i * interval '1 hour',
                date '2024-02-29' + i, ARRAY['a', NULL, 'c"' || i], jsonb_build_object('k', i, 'n', NULL),
                'sad'::mood, ROW(i, 'p ' || i)::pair, NULL, i * interval '90 minutes', '\x00ff'::bytea, 'NaN'
         FROM generate_series(1, 300) i;"#,
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["items"]).await;
    audit_sink(&sink, "items_json").await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "items", "items_json", CONVERGE).await;
    assert_eq!(
        audit_count(&sink, "items_json").await,
        300,
        "the initial load"
    );

    up.batch_execute(
        "INSERT INTO items (id, name, ratio, at, meta) VALUES (1000, 'new', 'Infinity', 'infinity', '[1, {\"a\": null}]');
         UPDATE items SET name = name || ' changed', price = NULL WHERE id <= 10;
         UPDATE items SET name = name WHERE id BETWEEN 11 AND 20; -- documents unchanged
         DELETE FROM items WHERE id BETWEEN 21 AND 25;
         UPDATE items SET id = id + 5000 WHERE id = 26;          -- key change
         BEGIN; INSERT INTO items (id) VALUES (2000); DELETE FROM items WHERE id = 2000; COMMIT;",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "items", "items_json", CONVERGE).await;
    // 1 insert + 10 updates + 5 deletes + (delete + insert) for the key
    // change; nothing for the no-op updates or the insert-then-delete.
    let writes = audit_count(&sink, "items_json").await - 300;
    assert_eq!(writes, 1 + 10 + 5 + 2);
    // The interface's state holds the same documents.
    let docs = pipeline.documents("items_json").unwrap();
    assert_eq!(docs.len(), 300 + 1 - 5);
    running.stop().await;
}

/// Rows inserted, updated and deleted while the snapshot is copied appear
/// exactly once, with their final value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_stream_meet_exactly() {
    let env = env("seam").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE seam (id int PRIMARY KEY, n int NOT NULL, pad text);
         INSERT INTO seam SELECT i, 0, repeat('x', 100) FROM generate_series(1, 30000) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["seam"]).await;

    // A writer that keeps changing rows while the snapshot runs.
    let writer_url = env.up.url.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let w = connect(&writer_url).await;
        let mut i: i32 = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                return i;
            }
            i += 1;
            w.batch_execute(&format!(
                "BEGIN;
                 UPDATE seam SET n = n + 1 WHERE id % 997 = {m};
                 INSERT INTO seam VALUES ({new}, {i}, 'new');
                 DELETE FROM seam WHERE id = {del};
                 COMMIT;",
                m = i % 997,
                new = 100_000 + i,
                del = 30_001 - i,
            ))
            .await
            .unwrap();
            // A steady writer, not a flood: the seam is what is tested,
            // and a debug build on a slow machine must catch up in time.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    // A fixed wait: the writer is under way before the snapshot starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let running = Running::start(pipeline.clone());
    // Keep writing until the table is streaming, and a little longer (a
    // fixed 500 ms of writes to the stream).
    wait_state(&pipeline, "seam_v1", TableState::Running, CONVERGE).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    let transactions = writer.await.unwrap();
    assert!(
        transactions > 10,
        "the writer ran only {transactions} transactions"
    );
    wait_equal(&up, &sink, "seam", "seam_json", CONVERGE).await;
    running.stop().await;
}

/// A table created while the pipeline streams another one, with writes to
/// both during its snapshot: it meets the stream exactly, and the first
/// table goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_later_meets_the_stream_exactly() {
    let env = env("later").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE first (id int PRIMARY KEY, n int NOT NULL);
         CREATE TABLE second (id int PRIMARY KEY, n int NOT NULL, pad text);
         INSERT INTO first SELECT i, 0 FROM generate_series(1, 100) i;
         INSERT INTO second SELECT i, 0, repeat('y', 100) FROM generate_series(1, 20000) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["first"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "first", "first_json", CONVERGE).await;

    let writer_url = env.up.url.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let w = connect(&writer_url).await;
        let mut i: i32 = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                return i;
            }
            i += 1;
            w.batch_execute(&format!(
                "BEGIN;
                 UPDATE first SET n = n + 1 WHERE id = {f};
                 UPDATE second SET n = n + 1 WHERE id % 1009 = {m};
                 INSERT INTO second VALUES ({new}, {i}, 'new');
                 DELETE FROM second WHERE id = {i};
                 COMMIT;",
                f = i % 100 + 1,
                m = i % 1009,
                new = 100_000 + i,
            ))
            .await
            .unwrap();
            // A steady writer, not a flood (see above).
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    // A fixed wait: the writer is under way before the second snapshot.
    tokio::time::sleep(Duration::from_millis(200)).await;
    create_all(&pipeline, &env.source, &["second"]).await;
    wait_all_running(&pipeline, CONVERGE).await;
    // A fixed 500 ms more of writes, streamed to both tables.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    let transactions = writer.await.unwrap();
    assert!(
        transactions > 10,
        "the writer ran only {transactions} transactions"
    );
    wait_equal(&up, &sink, "second", "second_json", CONVERGE).await;
    wait_equal(&up, &sink, "first", "first_json", CONVERGE).await;
    let second = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "second_v1")
        .unwrap();
    // Every writer transaction inserts one row and deletes one.
    assert_eq!(second.rows_copied, 20_000, "rows copied by the snapshot");
    running.stop().await;
}

/// Dropping a pinned column upstream stalls that table only (with the
/// reason); the other table of the source keeps streaming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_column_stalls_only_its_table() {
    let env = env("stall").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE s1 (id int PRIMARY KEY, a text, b text);
         CREATE TABLE s2 (id int PRIMARY KEY, a text);
         INSERT INTO s1 VALUES (1, 'a', 'b'); INSERT INTO s2 VALUES (1, 'a');",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["s1", "s2"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "s1", "s1_json", CONVERGE).await;
    wait_equal(&up, &sink, "s2", "s2_json", CONVERGE).await;
    up.batch_execute(
        "ALTER TABLE s1 DROP COLUMN b; INSERT INTO s1 VALUES (2, 'x'); INSERT INTO s2 VALUES (2, 'y');",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "s2", "s2_json", CONVERGE).await;
    let mut error = None;
    wait_until("table s1_v1 to stall", CONVERGE, async || {
        let (state, e) = table_state(&pipeline, "s1_v1");
        error = e;
        state == TableState::Stalled
    })
    .await;
    let error = error.unwrap_or_default();
    assert!(error.contains("column \"b\""), "{error}");
    // The stalled table's interface keeps its last consistent state.
    assert_eq!(pipeline.documents("s1_json").unwrap().len(), 1);
    running.stop().await;
}

/// An update of another column keeps a 100 kB TOASTed value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_toast_values_are_kept() {
    let env = env("toast").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE big (id int PRIMARY KEY, body text, note text);
         ALTER TABLE big ALTER COLUMN body SET STORAGE EXTERNAL;
         INSERT INTO big VALUES (1, 'small', 'a');",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["big"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "big", "big_json", CONVERGE).await;
    up.batch_execute(
        "INSERT INTO big SELECT 2, string_agg(md5(i::text), ''), 'b' FROM generate_series(1, 3200) i;",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "big", "big_json", CONVERGE).await;
    up.batch_execute("UPDATE big SET note = 'changed' WHERE id = 2;")
        .await
        .unwrap();
    wait_equal(&up, &sink, "big", "big_json", CONVERGE).await;
    let row = sink
        .query_one(
            "SELECT length(data->>'body'), data->>'note' FROM public.big_json WHERE key = '{\"id\": 2}'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 102_400);
    assert_eq!(row.get::<_, String>(1), "changed");
    running.stop().await;
}

/// Deletes under REPLICA IDENTITY DEFAULT and FULL, key changes under both,
/// and TRUNCATE of one table (the other keeps its rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_and_truncate() {
    let env = env("deletes").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE d_default (id int PRIMARY KEY, v text);
         CREATE TABLE d_full (id int PRIMARY KEY, v text, big text);
         ALTER TABLE d_full REPLICA IDENTITY FULL;
         INSERT INTO d_default SELECT i, 'v' || i FROM generate_series(1, 50) i;
         INSERT INTO d_full SELECT i, 'v' || i, NULL FROM generate_series(1, 50) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["d_default", "d_full"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "d_default", "d_default_json", CONVERGE).await;
    wait_equal(&up, &sink, "d_full", "d_full_json", CONVERGE).await;
    up.batch_execute(
        "DELETE FROM d_default WHERE id <= 10;
         DELETE FROM d_full WHERE id <= 10;
         UPDATE d_default SET id = id + 100 WHERE id = 11;
         UPDATE d_full SET id = id + 100, v = 'moved' WHERE id = 11;
         UPDATE d_full SET v = 'x' WHERE id = 12;",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "d_default", "d_default_json", CONVERGE).await;
    wait_equal(&up, &sink, "d_full", "d_full_json", CONVERGE).await;
    assert_eq!(compare(&up, &sink, "d_full", "d_full_json").await.1, 40);

    up.batch_execute("INSERT INTO d_full VALUES (500, 'late'); TRUNCATE d_full;")
        .await
        .unwrap();
    wait_equal(&up, &sink, "d_full", "d_full_json", CONVERGE).await;
    assert_eq!(compare(&up, &sink, "d_full", "d_full_json").await.1, 0);
    assert!(pipeline.documents("d_full_json").unwrap().is_empty());
    assert_eq!(
        compare(&up, &sink, "d_default", "d_default_json").await.1,
        40
    );
    up.batch_execute("INSERT INTO d_full VALUES (1, 'again');")
        .await
        .unwrap();
    wait_equal(&up, &sink, "d_full", "d_full_json", CONVERGE).await;
    running.stop().await;
}

/// A reader of the sink never sees part of an upstream transaction: every
/// transaction inserts 200 rows in 200 statements, so the count a reader
/// sees is always a multiple of 200, and matches the recorded position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_transactions_are_atomic_in_the_sink() {
    let env = env("atomic").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute("CREATE TABLE atomic (id int PRIMARY KEY, v int);")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["atomic"]).await;
    let running = Running::start(pipeline.clone());
    wait_until(
        "the sink table atomic_json to exist",
        Duration::from_secs(60),
        async || sink_exists(&sink, "atomic_json").await,
    )
    .await;
    let reader_url = env.sink.url.clone();
    let reader = tokio::spawn(async move {
        let r = connect(&reader_url).await;
        let mut seen = std::collections::BTreeMap::new();
        loop {
            let row = r
                .query_one(
                    "SELECT (SELECT count(*) FROM public.atomic_json), \
                            (SELECT lsn::text FROM public.evolve_sink_progress WHERE sink = 'atomic_sink')",
                    &[],
                )
                .await
                .unwrap();
            let count: i64 = row.get(0);
            let lsn: Option<String> = row.get(1);
            assert_eq!(
                count % 200,
                0,
                "a reader saw {count} rows: half a transaction"
            );
            if let Some(lsn) = lsn {
                let previous = seen.insert(lsn.clone(), count);
                assert!(
                    previous.is_none_or(|p| p == count),
                    "position {lsn} with {previous:?} and {count} rows"
                );
            }
            if count == 2000 {
                return seen.len();
            }
        }
    });
    for t in 0..10 {
        let mut sql = String::from("BEGIN;");
        for i in 0..200 {
            sql.push_str(&format!(
                "INSERT INTO atomic VALUES ({}, {t});",
                t * 200 + i
            ));
        }
        sql.push_str("COMMIT;");
        up.batch_execute(&sql).await.unwrap();
        // Give the reader time to see each state.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let positions = tokio::time::timeout(CONVERGE, reader)
        .await
        .expect("the sink reaches 2000 rows")
        .unwrap();
    assert!(positions >= 2, "the reader saw {positions} positions");
    wait_equal(&up, &sink, "atomic", "atomic_json", CONVERGE).await;
    running.stop().await;
}

/// Stopping the pipeline and starting it again, with changes made while
/// it was down: nothing lost, nothing written twice, and the slot's
/// confirmed position advances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_loses_and_duplicates_nothing() {
    let env = env("restart").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute("CREATE TABLE r (id int PRIMARY KEY, v text);")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["r"]).await;
    audit_sink(&sink, "r_json").await;
    let running = Running::start(pipeline.clone());
    for i in 0..100 {
        up.execute("INSERT INTO r VALUES ($1, 'a')", &[&i])
            .await
            .unwrap();
    }
    wait_equal(&up, &sink, "r", "r_json", CONVERGE).await;
    running.stop().await;
    drop(pipeline);
    let confirmed_before: String = up
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&format!("evolve_{}", env.source)],
        )
        .await
        .unwrap()
        .get(0);

    up.batch_execute(
        "UPDATE r SET v = 'b' WHERE id < 50;
         UPDATE r SET v = v WHERE id >= 50;
         DELETE FROM r WHERE id >= 90;
         INSERT INTO r SELECT i, 'c' FROM generate_series(100, 119) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "r", "r_json", CONVERGE).await;
    // The slot is confirmed once the sink has committed (the replication
    // client sends the position with its next status update).
    let slot = format!("evolve_{}", env.source);
    wait_until(
        &format!("the slot's confirmed position to advance past {confirmed_before}"),
        CONVERGE,
        async || {
            up.query_one(
                "SELECT confirmed_flush_lsn > $1::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
                &[&confirmed_before, &slot],
            )
            .await
            .unwrap()
            .get(0)
        },
    )
    .await;
    running.stop().await;
    assert_eq!(audit_count(&sink, "r_json").await, 100 + 50 + 10 + 20);
}

/// Shuts the sink database (`allow` false: no new connections, and the
/// open ones ended) or opens it again.
async fn sink_connections(admin: &tokio_postgres::Client, db: &str, allow: bool) {
    let end = if allow {
        String::new()
    } else {
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}';")
    };
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {db} ALLOW_CONNECTIONS {allow}; {end}"
        ))
        .await
        .unwrap();
}

/// While a sink cannot commit, the slot's confirmed position does not pass
/// what the sink has committed; once it can, everything arrives and the
/// slot moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_waits_for_the_sinks() {
    // An upstream of its own: other tests' WAL would let an idle keepalive
    // confirm past positions this test reads, which is right (nothing of
    // this source is there) but not what it checks.
    let own = tokio::task::spawn_blocking(evolve_test::Cluster::start)
        .await
        .unwrap()
        .expect("an upstream cluster of its own");
    let mut env = env("slotwait").await;
    env.up = own.create_database("slotwait").await.unwrap();
    env.config = env.config.clone().with_connection("up", env.up.url.clone());
    let up = connect(&env.up.url).await;
    let admin = connect(&sink_cluster().url("postgres")).await;
    up.batch_execute("CREATE TABLE w (id int PRIMARY KEY);")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["w"]).await;
    let running = Running::start(pipeline.clone());
    up.batch_execute("INSERT INTO w SELECT generate_series(1, 10);")
        .await
        .unwrap();
    {
        let sink = connect(&env.sink.url).await;
        wait_equal(&up, &sink, "w", "w_json", CONVERGE).await;
    }
    // Shut the sink database.
    sink_connections(&admin, &env.sink.name, false).await;
    // Where the first insert's transaction is, before its commit record:
    // the slot must not confirm past it while the sink cannot commit.
    let before: String = up
        .query_one(
            "WITH i AS (INSERT INTO w VALUES (11) RETURNING 1) \
             SELECT pg_current_wal_insert_lsn()::text FROM i",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for i in 12..=20 {
        up.execute("INSERT INTO w VALUES ($1)", &[&i])
            .await
            .unwrap();
    }
    let slot = format!("evolve_{}", env.source);
    let confirmed_le = |lsn: String| {
        let up = &up;
        let slot = slot.clone();
        async move {
            up.query_one(
                "SELECT confirmed_flush_lsn <= $1::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
                &[&lsn, &slot],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
        }
    };
    // The pipeline applies the inserts to its state, but cannot write them.
    wait_until("the state to reach 20 rows", CONVERGE, async || {
        pipeline.documents("w_json").unwrap().len() >= 20
    })
    .await;
    // A fixed wait: the slot must not confirm past `before` meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        confirmed_le(before.clone()).await,
        "the slot confirmed changes the sink has not committed"
    );
    sink_connections(&admin, &env.sink.name, true).await;
    let sink = connect(&env.sink.url).await;
    wait_equal(&up, &sink, "w", "w_json", CONVERGE).await;
    wait_until(
        &format!("the slot to confirm past {before}"),
        CONVERGE,
        async || !confirmed_le(before.clone()).await,
    )
    .await;
    running.stop().await;
}

/// Transactions the server has decoded and handed to the slot's output
/// plugin (`pg_stat_replication_slots.total_txns`; those it skips because
/// they end before where the stream starts are not counted).
async fn slot_txns(up: &tokio_postgres::Client, slot: &str) -> i64 {
    up.query_one(
        "SELECT coalesce((SELECT total_txns FROM pg_stat_replication_slots WHERE slot_name = $1), 0)",
        &[&slot],
    )
    .await
    .unwrap()
    .get(0)
}

/// A pipeline restarted while a sink is behind: the slot's confirmed
/// position stayed where the sink had committed, but the source starts its
/// stream at its applied position, so the server does not send again what
/// the store has (it used to send every transaction since the sink's
/// position, and the source skipped them). The sink catches up from the
/// store's feed, each change written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_behind_a_sink_streams_only_what_the_store_lacks() {
    let env = env("restart_behind").await;
    let up = connect(&env.up.url).await;
    let admin = connect(&sink_cluster().url("postgres")).await;
    up.batch_execute(
        "CREATE TABLE w (id int PRIMARY KEY, n int);
         INSERT INTO w SELECT g, 0 FROM generate_series(1, 10) g;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["w"]).await;
    let running = Running::start(pipeline.clone());
    let sink = connect(&env.sink.url).await;
    wait_equal(&up, &sink, "w", "w_json", CONVERGE).await;
    audit_sink(&sink, "w_json").await;
    // The table the sink created leaves room for heap-only updates.
    let options: Vec<String> = sink
        .query_one(
            "SELECT reloptions::text[] FROM pg_class WHERE oid = 'public.w_json'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        options,
        vec![format!("fillfactor={}", evolve_pipeline::SINK_FILLFACTOR)]
    );
    drop(sink);
    // Shut the sink database, then 100 transactions the store applies and
    // the sink cannot write.
    sink_connections(&admin, &env.sink.name, false).await;
    for i in 11..=110 {
        up.execute("INSERT INTO w VALUES ($1, 1)", &[&i])
            .await
            .unwrap();
    }
    wait_until("the store to hold 110 rows", CONVERGE, async || {
        pipeline.documents("w_json").unwrap().len() == 110
    })
    .await;
    running.stop().await;
    let slot = format!("evolve_{}", env.source);
    let behind: bool = up
        .query_one(
            "SELECT confirmed_flush_lsn < pg_current_wal_lsn() - 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    assert!(behind, "the slot confirmed what the sink has not committed");
    let decoded_before = slot_txns(&up, &slot).await;

    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let running = Running::start(pipeline.clone());
    sink_connections(&admin, &env.sink.name, true).await;
    let sink = connect(&env.sink.url).await;
    wait_equal(&up, &sink, "w", "w_json", CONVERGE).await;
    up.execute("UPDATE w SET n = 2 WHERE id = 1", &[])
        .await
        .unwrap();
    wait_equal(&up, &sink, "w", "w_json", CONVERGE).await;
    running.stop().await;
    assert_eq!(audit_ops(&sink, "w_json").await, (100, 1, 0));
    let decoded = slot_txns(&up, &slot).await - decoded_before;
    // The update, and room for a few of the server's own (autovacuum's
    // ANALYZE writes the catalog); the 100 the store had would make 101.
    assert!(
        decoded <= 5,
        "the server decoded {decoded} transactions for the restarted stream; the store had all but the last one"
    );
}

/// Bad input: errors in PostgreSQL's shape, and the catalog unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_leave_the_catalog_unchanged() {
    let env = env("errors").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE nokey (a int, b text);
         CREATE TABLE ok (id int PRIMARY KEY, g int GENERATED ALWAYS AS (id * 2) STORED);",
    )
    .await
    .unwrap();
    sink.batch_execute("CREATE TABLE public.wrong (key text PRIMARY KEY, data jsonb);")
        .await
        .unwrap();
    // An unreachable upstream: a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = env.config.clone().with_connection(
        "down",
        format!("postgres://postgres:hunter2@127.0.0.1:{port}/x"),
    );
    let pipeline = Pipeline::open(config).unwrap();
    let e = pipeline
        .create_source(&env.source, "down", "p")
        .await
        .unwrap_err();
    assert!(matches!(e, PipelineError::Connect { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("ERROR: could not connect to connection \"down\""),
        "{text}"
    );
    assert!(text.contains("HINT: "), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    let e = pipeline
        .create_source(&env.source, "nope", "p")
        .await
        .unwrap_err();
    assert!(matches!(e, PipelineError::UnknownConnection { .. }), "{e}");
    assert!(pipeline.sources().unwrap().is_empty());

    pipeline
        .create_source(&env.source, "up", "p")
        .await
        .unwrap();
    let spec = |table: &str| TableSpec {
        name: format!("{table}_v1"),
        source: env.source.clone(),
        schema: "public".into(),
        table: table.into(),
        ..TableSpec::default()
    };
    let e = pipeline.create_table(&spec("missing")).await.unwrap_err();
    assert!(
        matches!(e, PipelineError::UpstreamTableNotFound { .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("ERROR: upstream table \"public.missing\" does not exist"),
        "{e}"
    );
    let e = pipeline.create_table(&spec("nokey")).await.unwrap_err();
    assert!(matches!(e, PipelineError::NoReplicaIdentity { .. }), "{e}");
    assert!(
        e.detail().is_some() && e.hint().unwrap().contains("PRIMARY KEY"),
        "{e}"
    );
    let e = pipeline.create_table(&spec("ok")).await.unwrap_err();
    assert!(e.to_string().contains("generated column"), "{e}");
    let e = pipeline
        .create_table(&TableSpec {
            exclude: vec!["id".into()],
            ..spec("ok")
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("part of the key"), "{e}");
    assert!(pipeline.tables().unwrap().is_empty());
    // Nothing was added to the publication either.
    let published: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'p'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(published, 0);

    pipeline
        .create_table(&TableSpec {
            exclude: vec!["g".into()],
            ..spec("ok")
        })
        .await
        .unwrap();
    pipeline.create_interface("ok_json", "ok_v1").unwrap();
    let e = pipeline
        .create_sink("s", "ok_json", "sink", "public", "wrong")
        .await
        .unwrap_err();
    assert!(matches!(e, PipelineError::SinkShape { .. }), "{e}");
    assert!(e.to_string().contains("key text"), "{e}");
    assert!(pipeline.sinks().unwrap().is_empty());
    let e = pipeline.create_interface("x", "no_table").unwrap_err();
    assert!(
        matches!(
            e,
            PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                ..
            }
        ),
        "{e}"
    );
    let e = pipeline.drop_table("ok_v1").await.unwrap_err();
    assert!(matches!(e, PipelineError::HasDependents { .. }), "{e}");
    // Dropping in order works, and releases the slot.
    pipeline.drop_interface("ok_json").unwrap();
    pipeline.drop_table("ok_v1").await.unwrap();
    pipeline.drop_source(&env.source).await.unwrap();
    let slots: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0);
}

/// A slot dropped upstream while the pipeline was down: the source stalls
/// with an error that names the slot and the way out, the catalog and the
/// sink keep what they have, and nothing is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_slot_stalls_the_source_with_the_way_out() {
    let env = env("lost_slot").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE lost (id int PRIMARY KEY, n int);
         INSERT INTO lost SELECT i, i FROM generate_series(1, 20) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["lost"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "lost", "lost_json", CONVERGE).await;
    running.stop().await;

    let slot = pipeline.sources().unwrap()[0].slot.clone();
    // The walsender ends a moment after the stream's connection closes.
    wait_until(
        "the stopped pipeline's slot to be released",
        CONVERGE,
        async || {
            up.query_one(
                "SELECT NOT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .get(0)
        },
    )
    .await;
    up.execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    up.batch_execute("UPDATE lost SET n = n + 1").await.unwrap();

    let running = Running::start(pipeline.clone());
    let mut error = None;
    wait_until("the source to stall", CONVERGE, async || {
        error = pipeline
            .status()
            .iter()
            .find(|s| s.kind == ObjectKind::Source && s.state == "stalled")
            .map(|s| s.error.clone().unwrap());
        error.is_some()
    })
    .await;
    let error = error.unwrap();
    assert!(
        error.starts_with(&format!(
            "ERROR: replication slot \"{slot}\" of source \"{}\" is missing or invalidated",
            env.source
        )),
        "{error}"
    );
    assert!(
        error.contains("DETAIL: The slot does not exist upstream."),
        "{error}"
    );
    assert!(error.contains("HINT: "), "{error}");
    // Nothing moved: the sink keeps the 20 rows as they were.
    let rows = sink_rows(&sink, "lost_json").await;
    assert_eq!(rows.len(), 20);
    let n1: i32 = sink
        .query_one(
            "SELECT (data->>'n')::int FROM public.lost_json WHERE key = '{\"id\": 1}'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n1, 1);
    assert_eq!(pipeline.tables().unwrap().len(), 1);
    running.stop().await;
}

/// Rows whose documents COPY must carry byte for byte: quotes,
/// backslashes, tabs and new lines, non-ASCII text, nulls, long values.
const AWKWARD_ROWS: &str = r#"SELECT g,
       CASE g % 5 WHEN 0 THEN NULL WHEN 1 THEN E'tab\there\nnew line\r'
                  WHEN 2 THEN 'back\slash "quoted" \N' WHEN 3 THEN 'ünïcødé ✓ 🐘'
                  ELSE repeat('x', g % 700) END,
       g / 7.0,
       jsonb_build_object('g', g, 's', E'\\\t\u0001', 'a', jsonb_build_array(g, NULL))
FROM generate_series(1, {n}) g"#;

/// The sink's progress row of `sink`, once there is one.
async fn progress_of(sink: &tokio_postgres::Client, name: &str) -> Option<String> {
    sink.query_opt(
        "SELECT lsn::text FROM public.evolve_sink_progress WHERE sink = $1",
        &[&name],
    )
    .await
    .unwrap()
    .map(|r| r.get(0))
}

/// An initial load of many chunks (100 documents each, the last one
/// partial) writes every document exactly once and equal to the
/// server's, commits its position with them, and the stream goes on from
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_load_of_many_chunks_writes_every_document_once() {
    let env = env("load_chunks").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE t (id int PRIMARY KEY, v text, n numeric, j jsonb);
         INSERT INTO t {};",
        AWKWARD_ROWS.replace("{n}", "2537")
    ))
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone().with_sink_load_rows(100)).unwrap());
    create_all(&pipeline, &env.source, &["t"]).await;
    audit_sink(&sink, "t_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("t_sink's initial load", CONVERGE, async || {
        progress_of(&sink, "t_sink").await.is_some()
    })
    .await;
    assert_eq!(
        compare(&up, &sink, "t", "t_json").await,
        (2537, 2537, 2537),
        "(upstream rows, sink rows, equal rows) right after the load"
    );
    assert_eq!(audit_ops(&sink, "t_json").await, (2537, 0, 0));

    up.batch_execute(
        "UPDATE t SET v = 'after' WHERE id % 100 = 0;
         DELETE FROM t WHERE id > 2500;
         INSERT INTO t VALUES (5000, 'new', 1, '{}');",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "t", "t_json", CONVERGE).await;
    assert_eq!(audit_ops(&sink, "t_json").await, (2537 + 1, 25, 37));
    running.stop().await;
}

/// An initial load into a table that got rows after its sink was created
/// (`CREATE SINK` refuses a table with rows, but nothing stops writers
/// after it) upserts: rows of the interface's keys get its documents, the
/// others are left as they are, each row written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_load_into_a_table_with_rows_upserts() {
    let env = env("load_upsert").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE u (id int PRIMARY KEY, v text, n numeric, j jsonb);
         INSERT INTO u {};",
        AWKWARD_ROWS.replace("{n}", "250")
    ))
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone().with_sink_load_rows(100)).unwrap());
    create_all(&pipeline, &env.source, &["u"]).await;
    sink.batch_execute(
        r#"INSERT INTO public.u_json VALUES ('{"id": 1}', '{"stale": true}'),
                                            ('{"id": 999999}', '{"kept": true}');"#,
    )
    .await
    .unwrap();
    audit_sink(&sink, "u_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("u_sink's initial load", CONVERGE, async || {
        progress_of(&sink, "u_sink").await.is_some()
    })
    .await;
    assert_eq!(
        compare(&up, &sink, "u", "u_json").await,
        (250, 251, 250),
        "(upstream rows, sink rows, equal rows) after the load"
    );
    let kept: String = sink
        .query_one(
            r#"SELECT data::text FROM public.u_json WHERE key = '{"id": 999999}'"#,
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, r#"{"kept": true}"#);
    assert_eq!(audit_ops(&sink, "u_json").await, (249, 1, 0));
    running.stop().await;
}

/// A write inserts the documents of keys new to the interface and updates
/// the others (no upsert: no statement-level `UPDATE` trigger fires for a
/// batch of inserts). A table changed by hand, a key deleted that the
/// interface then updates and one inserted that it then inserts, is set
/// right by that write done again as upserts; the failed attempt leaves
/// nothing behind, so each change is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_insert_or_update_and_a_table_changed_by_hand_is_set_right() {
    let env = env("by_hand").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE h (id int PRIMARY KEY, v text);
         INSERT INTO h SELECT i, 'v' || i FROM generate_series(1, 100) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["h"]).await;
    audit_sink(&sink, "h_json").await;
    sink.batch_execute(
        "CREATE TABLE public.h_update_statements (at timestamptz);
         CREATE FUNCTION public.h_update_statement() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO public.h_update_statements VALUES (now()); RETURN NULL; END $$;
         CREATE TRIGGER update_statements AFTER UPDATE ON public.h_json
           FOR EACH STATEMENT EXECUTE FUNCTION public.h_update_statement();",
    )
    .await
    .unwrap();
    let update_statements = async || -> i64 {
        sink.query_one("SELECT count(*) FROM public.h_update_statements", &[])
            .await
            .unwrap()
            .get(0)
    };
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    assert_eq!(
        audit_ops(&sink, "h_json").await,
        (100, 0, 0),
        "the initial load"
    );

    for i in 0..5 {
        up.execute(
            "INSERT INTO h SELECT g, 'new' FROM generate_series($1::int, $1::int + 9) g",
            &[&(101 + i * 10)],
        )
        .await
        .unwrap();
    }
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    assert_eq!(audit_ops(&sink, "h_json").await, (150, 0, 0));
    assert_eq!(
        update_statements().await,
        0,
        "inserts of new keys are written without an upsert"
    );

    up.batch_execute("UPDATE h SET v = 'changed' WHERE id <= 10")
        .await
        .unwrap();
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    assert_eq!(audit_ops(&sink, "h_json").await, (150, 10, 0));

    // By hand: one row gone, one the interface does not have yet.
    sink.batch_execute(
        r#"DELETE FROM public.h_json WHERE key = '{"id": 5}';
           INSERT INTO public.h_json VALUES ('{"id": 1000}', '{"stale": true}');"#,
    )
    .await
    .unwrap();
    assert_eq!(audit_ops(&sink, "h_json").await, (151, 10, 1));
    up.batch_execute(
        "BEGIN; UPDATE h SET v = 'again' WHERE id IN (5, 6); INSERT INTO h VALUES (1001, 'x'); COMMIT;
         INSERT INTO h VALUES (1000, 'y');",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    // Upserted: 5 inserted again, 6 updated, 1001 inserted, 1000 updated
    // over the stale row.
    assert_eq!(audit_ops(&sink, "h_json").await, (151 + 2, 10 + 2, 1));
    assert_eq!(
        compare(&up, &sink, "h", "h_json").await,
        (152, 152, 152),
        "(upstream rows, sink rows, equal rows)"
    );
    assert_eq!(
        table_state(&pipeline, "h_v1").0,
        TableState::Running,
        "nothing stalled"
    );
    running.stop().await;
}

/// The sink's update is planned for its table as it is: planned while the
/// table held 5 rows, it would scan the whole table for each batch after
/// 30,000 rows arrived; prepared again as the table grows, it looks the
/// keys up in the index. Counted by PostgreSQL's own statistics of the sink
/// table (nothing else reads it meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sinks_updates_look_keys_up_after_the_table_grew() {
    let env = env("replan").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE g (id int PRIMARY KEY, v int);
         INSERT INTO g SELECT i, 0 FROM generate_series(1, 5) i;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["g"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "g", "g_json", CONVERGE).await;
    // (sequential scans, index scans, rows updated) of the sink's table,
    // once its backend has reported `updated` rows updated; this
    // connection's own reads of the table (`wait_equal`'s) are reported
    // first.
    let scans = async |updated: i64| -> (i64, i64, i64) {
        let mut last = (0, 0, 0);
        wait_until("the sink's statistics", CONVERGE, async || {
            sink.batch_execute("SELECT pg_stat_force_next_flush()")
                .await
                .unwrap();
            let row = sink
                .query_one(
                    "SELECT seq_scan, coalesce(idx_scan, 0), n_tup_upd FROM pg_stat_user_tables \
                     WHERE relid = 'public.g_json'::regclass",
                    &[],
                )
                .await
                .unwrap();
            last = (row.get(0), row.get(1), row.get(2));
            last.2 >= updated
        })
        .await;
        last
    };
    let update_all = async |times: i64| {
        for _ in 0..times {
            up.batch_execute("UPDATE g SET v = v + 1 WHERE id <= 5")
                .await
                .unwrap();
        }
    };
    // More than the five custom plans: the generic one is made now.
    update_all(8).await;
    let (_, _, updated) = scans(8 * 5).await;
    up.batch_execute("INSERT INTO g SELECT i, 0 FROM generate_series(6, 30005) i")
        .await
        .unwrap();
    wait_equal(&up, &sink, "g", "g_json", CONVERGE).await;
    let (seq_before, idx_before, _) = scans(updated).await;
    update_all(10).await;
    let (seq_after, idx_after, _) = scans(updated + 10 * 5).await;
    assert_eq!(
        seq_after - seq_before,
        0,
        "sequential scans of the 30,005-row sink table by 10 updates of 5 keys"
    );
    assert!(
        idx_after - idx_before >= 10 * 5,
        "index lookups by 10 updates of 5 keys: {}",
        idx_after - idx_before
    );
    wait_equal(&up, &sink, "g", "g_json", CONVERGE).await;
    running.stop().await;
}

/// A sink created with its table loads beside the table's snapshot: its
/// COPY runs while the table is still being copied into the store, and a
/// transaction committed upstream meanwhile (kept as pending, replayed once
/// the copy is in) reaches the sink inside the load's own transaction:
/// the load's position is past that commit, and every change is written
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_loads_beside_the_snapshot_and_catches_up_in_its_transaction() {
    const ROWS: i64 = 100_000;
    let env = env("load_beside").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE b (id int PRIMARY KEY, v text, n int);
         INSERT INTO b SELECT g, repeat('v', g % 50), g FROM generate_series(1, {ROWS}) g;"
    ))
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["b"]).await;
    audit_sink(&sink, "b_json").await;
    // The copy waits a few seconds for the sink to start listening; on a
    // loaded machine the sink can take longer, load after the copy instead
    // (correct, but not what this test is about). So the upstream table
    // stays locked, and the copy's COPY waits, until the sink listens.
    let mut holder = connect(&env.up.url).await;
    let hold = holder.transaction().await.unwrap();
    hold.batch_execute("LOCK TABLE b IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let running = Running::start(pipeline.clone());
    wait_until("b_sink to wait for b_v1's snapshot", CONVERGE, async || {
        pipeline.status().iter().any(|s| {
            s.kind == ObjectKind::Sink
                && s.name == "b_sink"
                && s.state == "waiting for its table's snapshot"
        })
    })
    .await;
    hold.rollback().await.unwrap();
    // The sink's COPY is seen while the table is still being copied (the
    // state only moves forward, so it was snapshotting when the COPY was
    // seen): the two run at the same time.
    wait_until(
        "b_sink's COPY while b_v1 is still snapshotting",
        CONVERGE,
        async || {
            let copied: i64 = sink
                .query_one(
                    "SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy \
                     WHERE relid = 'public.b_json'::regclass",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            copied > 0
                && pipeline
                    .tables()
                    .unwrap()
                    .iter()
                    .any(|t| t.name == "b_v1" && t.state == TableState::Snapshotting)
        },
    )
    .await;
    // After the snapshot's point: kept as pending, replayed, caught up.
    up.batch_execute(&format!(
        "BEGIN;
         UPDATE b SET v = 'during' WHERE id % 100 = 0;
         DELETE FROM b WHERE id % 1000 = 1;
         INSERT INTO b SELECT g, 'new', g FROM generate_series({}, {}) g;
         COMMIT;",
        ROWS + 1,
        ROWS + 50
    ))
    .await
    .unwrap();
    let committed: String = up
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    wait_until("b_sink's initial load", CONVERGE, async || {
        progress_of(&sink, "b_sink").await.is_some()
    })
    .await;
    let included: bool = sink
        .query_one(
            "SELECT lsn >= $1::text::pg_lsn FROM public.evolve_sink_progress WHERE sink = 'b_sink'",
            &[&committed],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        included,
        "the load's position is past the transaction committed during the copy"
    );
    let expected = ROWS - 100 + 50;
    assert_eq!(
        compare(&up, &sink, "b", "b_json").await,
        (expected, expected, expected),
        "(upstream rows, sink rows, equal rows) right after the load"
    );
    assert_eq!(
        audit_ops(&sink, "b_json").await,
        (ROWS + 50, 1_000, 100),
        "(inserts, updates, deletes) of the load and its catch-up"
    );
    // The stream goes on from the load's position (id 1 was deleted).
    up.batch_execute("UPDATE b SET n = -1 WHERE id <= 10")
        .await
        .unwrap();
    wait_equal(&up, &sink, "b", "b_json", CONVERGE).await;
    assert_eq!(audit_ops(&sink, "b_json").await, (ROWS + 50, 1_009, 100));
    running.stop().await;
}

/// Holds sink table `table` locked from `holder` (its sink's next write
/// waits for the lock) while `burst` runs upstream and until the source
/// has applied everything up to the upstream's WAL position after it;
/// then lets it go.
async fn while_held(
    pipeline: &Pipeline,
    up: &tokio_postgres::Client,
    holder: &mut tokio_postgres::Client,
    table: &str,
    burst: impl AsyncFnOnce(),
) {
    let hold = holder.transaction().await.unwrap();
    hold.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .await
        .unwrap();
    burst().await;
    let lsn: String = up
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let target: evolve_pipeline::Position = lsn.parse().unwrap();
    wait_until("the source to apply the burst", CONVERGE, async || {
        pipeline.sources().unwrap()[0].applied_lsn >= target
    })
    .await;
    hold.rollback().await.unwrap();
}

/// A sink held up (its table locked) while upstream commits more
/// transactions than the bus holds for a sink falls back to the store's
/// feed, then follows the bus again: every change arrives exactly once,
/// in order, before and after. The same for a few large transactions
/// holding more bytes than the bus keeps for a sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_falls_behind_the_bus_reads_the_feed_and_loses_nothing() {
    const BURST: i64 = 1_500;
    let env = env("bus_behind").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute("CREATE TABLE h (id int PRIMARY KEY, n int NOT NULL, pad text)")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["h"]).await;
    audit_sink(&sink, "h_json").await;
    let running = Running::start(pipeline.clone());
    wait_until("h_sink's initial load", CONVERGE, async || {
        progress_of(&sink, "h_sink").await.is_some()
    })
    .await;
    let mut holder = connect(&env.sink.url).await;
    // One transaction per row: more than the bus holds for a sink.
    while_held(&pipeline, &up, &mut holder, "public.h_json", async || {
        let insert = up.prepare("INSERT INTO h VALUES ($1, 0)").await.unwrap();
        for id in 1..=BURST {
            up.execute(&insert, &[&(id as i32)]).await.unwrap();
        }
    })
    .await;
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    assert_eq!(audit_ops(&sink, "h_json").await, (BURST, 0, 0));
    // Following the bus again.
    up.batch_execute("UPDATE h SET n = 1 WHERE id <= 10; DELETE FROM h WHERE id = 11;")
        .await
        .unwrap();
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    assert_eq!(audit_ops(&sink, "h_json").await, (BURST, 10, 1));

    // Sixteen transactions of 1,000 rows with 700-byte values: far fewer
    // transactions than the bus holds, more bytes (about 13 MB).
    const LARGE: i64 = 16;
    while_held(&pipeline, &up, &mut holder, "public.h_json", async || {
        for t in 0..LARGE {
            let first = 10_000 + t * 1_000;
            up.batch_execute(&format!(
                "INSERT INTO h SELECT g, 2, repeat('x', 700) FROM generate_series({first}, {}) g",
                first + 999
            ))
            .await
            .unwrap();
        }
    })
    .await;
    wait_equal(&up, &sink, "h", "h_json", CONVERGE).await;
    assert_eq!(
        audit_ops(&sink, "h_json").await,
        (BURST + LARGE * 1_000, 10, 1)
    );
    running.stop().await;
}

/// DROP SINK returns once the sink's task has stopped: under a steady
/// load, no write reaches the sink table after it returns, and its
/// progress record stays gone (a write still in flight would have
/// recorded it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_sink_returns_once_its_writes_have_stopped() {
    let env = env("drop_sink_settles").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute("CREATE TABLE w (id int PRIMARY KEY, n int)")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["w"]).await;
    audit_sink(&sink, "w_json").await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let url = env.up.url.clone();
        let writing = writing.clone();
        tokio::spawn(async move {
            let up = connect(&url).await;
            let mut i = 0;
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                up.execute("INSERT INTO w VALUES ($1, 0)", &[&i])
                    .await
                    .unwrap();
            }
        })
    };
    wait_until("the sink to write under load", CONVERGE, async || {
        audit_count(&sink, "w_json").await > 200
    })
    .await;
    pipeline.drop_sink("w_sink").await.unwrap();
    let written = audit_count(&sink, "w_json").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    assert_eq!(audit_count(&sink, "w_json").await, written);
    assert_eq!(progress_of(&sink, "w_sink").await, None);
    running.stop().await;
}
