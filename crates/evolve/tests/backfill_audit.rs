//! `evolve backfill` run the way production runs it: as an ordinary role,
//! not a superuser.

mod backfill_support;

use backfill_support::{Background, assert_refused, connect, count, evolve};

fn url_as(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

/// PostgreSQL shows a replica's `replay_lag` only to superusers and
/// members of `pg_read_all_stats`; to anyone else the column is NULL. A
/// backfill run by such a role with `--max-lag` would never pause, however
/// far a replica fell behind: it is refused with the way out, and once
/// the role may read the lag it pauses as it says.
#[tokio::test]
async fn max_lag_is_refused_for_a_role_that_cannot_see_the_lag_rather_than_ignored() {
    let primary = evolve_test::Cluster::start().expect("primary");
    let db = primary.create_database("bfa_lag_role").await.unwrap();
    let c = connect(&db.url).await;
    let role = format!("evolve_bfa_lag_{}", std::process::id());
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         GRANT CREATE ON SCHEMA public TO {role};
         CREATE TABLE s (id int PRIMARY KEY, a int, b int);
         INSERT INTO s SELECT i, i, NULL FROM generate_series(1, 2000) i;
         ALTER TABLE s OWNER TO {role};"
    ))
    .await
    .unwrap();
    let standby = primary.start_standby("replica_b").expect("standby");
    let r = connect(&standby.url(&db.name)).await;
    for _ in 0..600 {
        if r.query_one("SELECT count(*) FROM s", &[])
            .await
            .is_ok_and(|row| row.get::<_, i64>(0) == 2000)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    r.batch_execute("SELECT pg_wal_replay_pause()")
        .await
        .unwrap();
    c.batch_execute("CREATE TABLE filler AS SELECT i FROM generate_series(1, 1000) i")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let args = [
        "backfill",
        "run",
        "--table",
        "s",
        "--set",
        "b = a",
        "--name",
        "lagged",
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
    ];
    let out = evolve(&url_as(&db.url, &role), &args);
    assert_refused(
        &out,
        &["backfill lagged", "--max-lag", "pg_read_all_stats", &role],
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM s WHERE b IS NOT NULL").await,
        0,
        "nothing ran"
    );

    c.batch_execute(&format!("GRANT pg_read_all_stats TO {role}"))
        .await
        .unwrap();
    let mut run = Background::start(&url_as(&db.url, &role), &args);
    let paused = run.wait_for("paused", |v| v["type"] == "paused");
    assert_eq!(paused["reason"], "replica_lag", "{paused}");
    r.batch_execute("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    let (status, _, stderr) = run.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(count(&c, "SELECT count(*) FROM s WHERE b = a").await, 2000);
}

/// A partitioned table has no statistics of its own (`reltuples` is -1):
/// the estimate comes from its partitions' statistics, not from counting
/// every row of every partition before the first batch.
#[tokio::test]
async fn a_partitioned_table_is_estimated_from_its_partitions_not_counted() {
    let db = evolve_test::fresh_db("bfa_parted_estimate").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE pt (id int, at int, v int, w int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
         CREATE TABLE pt_1 PARTITION OF pt FOR VALUES FROM (0) TO (1000);
         CREATE TABLE pt_2 PARTITION OF pt FOR VALUES FROM (1000) TO (2000);
         INSERT INTO pt SELECT i, i, i FROM generate_series(0, 1999) i;
         ANALYZE pt_1, pt_2;
         -- Rows the statistics have not seen: a count would find them.
         INSERT INTO pt SELECT i, i % 2000, i FROM generate_series(2000, 2999) i;",
    )
    .await
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "backfill", "run", "--table", "pt", "--set", "w = v", "--format", "json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        backfill_support::text(&out.stderr)
    );
    let lines: Vec<String> = backfill_support::text(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    let started = &backfill_support::events(&lines, "started")[0];
    assert_eq!(started["estimated_rows"], 2000, "{started}");
    assert_eq!(count(&c, "SELECT count(*) FROM pt WHERE w = v").await, 3000);
}

/// Columns of types without `=` (json, xml, point): the predicate that
/// skips rows already done (`col IS DISTINCT FROM (expr)`) failed the
/// first batch with `operator does not exist: json = json`. They are
/// compared by their text, so the backfill runs, and a second run over
/// the same rows changes none of them.
#[tokio::test]
async fn columns_without_equality_are_backfilled_and_a_rerun_changes_nothing() {
    let db = evolve_test::fresh_db("bfa_no_equality").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE docs (id int PRIMARY KEY, v int, payload json, at point);
         INSERT INTO docs SELECT i, i, NULL, NULL FROM generate_series(1, 1500) i;",
    )
    .await
    .unwrap();
    let run = |name: &'static str| {
        evolve(
            &db.url,
            &[
                "backfill",
                "run",
                "--table",
                "docs",
                "--set",
                "payload = json_build_object('v', v)",
                "--set",
                "at = point(v, v)",
                "--name",
                name,
                "--format",
                "json",
            ],
        )
    };
    let finished = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            backfill_support::text(&out.stderr)
        );
        let lines: Vec<String> = backfill_support::text(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        backfill_support::events(&lines, "finished")[0]["rows_done"].clone()
    };
    assert_eq!(finished(&run("docs_first")), 1500);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM docs WHERE payload::text = json_build_object('v', v)::text AND at ~= point(v, v)"
        )
        .await,
        1500
    );
    // Another job over the same rows: every row already holds its value.
    assert_eq!(finished(&run("docs_again")), 0);
}
