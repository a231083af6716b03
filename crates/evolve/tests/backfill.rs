//! `evolve backfill` as users run it: keyset batches over composite and
//! sparse keys, a run killed with SIGKILL and resumed, a failing
//! expression, two runs of one job, pause/resume/cancel, the verify query
//! and bad input.

mod backfill_support;

use backfill_support::{Background, assert_refused, connect, count, events, evolve, text};

/// Batches of a fixed size, for counting.
const FIXED: [&str; 2] = ["--batch-time", "0"];

#[tokio::test]
async fn composite_sparse_keys_are_walked_in_batches_and_a_rerun_changes_nothing() {
    let db = evolve_test::fresh_db("bf_composite").await;
    let c = connect(&db.url).await;
    // 1000 rows, keys (region, id) with gaps: id steps by 7.
    c.batch_execute(
        "CREATE TABLE orders (region text, id int, price int, qty int, total int,
                              PRIMARY KEY (region, id));
         INSERT INTO orders SELECT r, i * 7, i, 2, NULL
           FROM unnest(array['eu', 'us', 'ap', 'sa']) r, generate_series(1, 250) i;
         UPDATE orders SET total = price * qty WHERE region = 'ap';",
    )
    .await
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "orders",
            "--set",
            "total = price * qty",
            "--batch",
            "64",
            FIXED[0],
            FIXED[1],
            "--format",
            "json",
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    let batches = events(&lines, "batch");
    // ceil(1000 / 64) = 16 batches, each walking 64 keys but the last.
    assert_eq!(batches.len(), 16);
    assert!(batches[..15].iter().all(|b| b["scanned"] == 64));
    assert_eq!(batches[15]["scanned"], 1000 - 15 * 64);
    // The 250 'ap' rows were right already: the predicate skipped them.
    let finished = &events(&lines, "finished")[0];
    assert_eq!(finished["rows_done"], 750);
    assert_eq!(finished["remaining"], 0);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM orders WHERE total IS DISTINCT FROM price * qty"
        )
        .await,
        0
    );
    assert_eq!(
        count(&c, "SELECT rows_done FROM evolve_backfill_jobs WHERE name = 'orders.total' AND state = 'done'").await,
        750
    );
    // Idempotent: a second run walks the table and changes nothing.
    let again = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "orders",
            "--set",
            "total = price * qty",
            "--format",
            "json",
        ],
    );
    assert!(again.status.success(), "{}", text(&again.stderr));
    let lines: Vec<String> = text(&again.stdout).lines().map(String::from).collect();
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 0);
}

#[tokio::test]
async fn sigkill_mid_run_resumes_at_the_next_batch_and_counts_every_row_once() {
    let db = evolve_test::fresh_db("bf_sigkill").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE items (id bigint PRIMARY KEY, src int NOT NULL, dst int);
         INSERT INTO items SELECT i * 3, i, NULL FROM generate_series(1, 60000) i;",
    )
    .await
    .unwrap();
    let args = [
        "backfill",
        "run",
        "--table",
        "items",
        "--set",
        "dst = src * 2",
        "--name",
        "dst",
        "--batch",
        "100",
        FIXED[0],
        FIXED[1],
        "--format",
        "json",
    ];
    let mut run = Background::start(&db.url, &args);
    run.wait_for("10th batch", |v| v["type"] == "batch" && v["batch"] == 10);
    run.kill();
    // Whatever moment the kill hit, the progress row and the data agree:
    // every committed batch is recorded, nothing else is.
    let (rows_done, batches, last): (i64, i64, Vec<String>) = {
        let r = c
            .query_one(
                "SELECT rows_done, batches, last_key FROM evolve_backfill_jobs WHERE name = 'dst'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    let changed = count(&c, "SELECT count(*) FROM items WHERE dst IS NOT NULL").await;
    assert!(
        batches >= 10 && rows_done < 60000,
        "killed mid-run: {batches} batches"
    );
    assert_eq!(changed, rows_done, "rows changed = rows recorded");
    assert_eq!(rows_done, batches * 100);
    let last: i64 = last[0].parse().unwrap();
    assert_eq!(
        count(
            &c,
            &format!("SELECT count(*) FROM items WHERE dst IS NOT NULL AND id > {last}")
        )
        .await,
        0,
        "nothing after the recorded key was changed"
    );
    assert_eq!(
        count(
            &c,
            &format!("SELECT count(*) FROM items WHERE dst IS NULL AND id <= {last}")
        )
        .await,
        0,
        "everything up to it was"
    );
    // The next run resumes after that key and does exactly the rest.
    let out = evolve(&db.url, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    let started = &events(&lines, "started")[0];
    assert_eq!(started["resumed"], true);
    assert_eq!(started["rows_done"], rows_done);
    let batch_rows: i64 = events(&lines, "batch")
        .iter()
        .map(|b| b["rows"].as_i64().unwrap())
        .sum();
    assert_eq!(
        batch_rows,
        60000 - rows_done,
        "the resumed run changed only the rest"
    );
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 60000);
    assert_eq!(
        count(&c, "SELECT count(*) FROM items WHERE dst = src * 2").await,
        60000
    );
}

#[tokio::test]
async fn a_failing_expression_stops_naming_the_key_range_and_resumes_there_once_fixed() {
    let db = evolve_test::fresh_db("bf_failing").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE m (id int PRIMARY KEY, d int, q int);
         INSERT INTO m SELECT i, CASE WHEN i = 57 THEN 0 ELSE i END, NULL FROM generate_series(1, 100) i;",
    )
    .await
    .unwrap();
    let args = [
        "backfill",
        "run",
        "--table",
        "m",
        "--set",
        "q = 1000 / d",
        "--batch",
        "10",
        FIXED[0],
        FIXED[1],
    ];
    let out = evolve(&db.url, &args);
    assert_refused(
        &out,
        &[
            "keys after (50) up to (60)",
            "division by zero",
            "rolled back",
        ],
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM m WHERE q IS NOT NULL").await,
        50
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM evolve_backfill_jobs WHERE state = 'failed' AND error LIKE '%division by zero%'").await,
        1
    );
    c.batch_execute("UPDATE m SET d = 1 WHERE id = 57")
        .await
        .unwrap();
    let out = evolve(&db.url, &[&args[..], &["--format", "json"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(events(&lines, "started")[0]["resumed"], true);
    assert_eq!(events(&lines, "batch").len(), 5, "batches 6 to 10 only");
    assert_eq!(
        count(&c, "SELECT count(*) FROM m WHERE q = 1000 / d").await,
        100
    );
    // The first batch failing: its range starts at the first key. A
    // failure whose error has detail lines stays one line of `status`.
    c.batch_execute(
        "CREATE TABLE m2 (id int PRIMARY KEY, d int, q int CHECK (q < 500));
         INSERT INTO m2 SELECT i, i, NULL FROM generate_series(1, 30) i;",
    )
    .await
    .unwrap();
    assert_refused(
        &evolve(
            &db.url,
            &[
                "backfill",
                "run",
                "--table",
                "m2",
                "--set",
                "q = 1000 / d",
                "--name",
                "m2q",
                "--batch",
                "10",
                FIXED[0],
                FIXED[1],
            ],
        ),
        &[
            "the batch of public.m2 keys from the first up to (10) failed",
            "violates check constraint",
            "detail: Failing row contains",
        ],
    );
    let status = text(&evolve(&db.url, &["backfill", "status"]).stdout);
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one line per job: {status}");
    assert!(
        lines[2].contains("m2q") && lines[2].contains("; detail: Failing row contains"),
        "{status}"
    );
}

#[tokio::test]
async fn two_runs_of_one_job_never_overlap_and_pause_resume_cancel_reach_a_run() {
    let db = evolve_test::fresh_db("bf_lock").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE p (id int PRIMARY KEY, a int, b int);
         INSERT INTO p SELECT i, i, NULL FROM generate_series(1, 500) i;",
    )
    .await
    .unwrap();
    // A session holding row 1 makes the first batch wait.
    let holder = connect(&db.url).await;
    holder
        .batch_execute("BEGIN; SELECT * FROM p WHERE id = 1 FOR UPDATE")
        .await
        .unwrap();
    let args = [
        "backfill",
        "run",
        "--table",
        "p",
        "--set",
        "b = a",
        "--name",
        "job",
        "--batch",
        "100",
        FIXED[0],
        FIXED[1],
        "--lock-timeout",
        "60s",
        "--poll",
        "50ms",
        "--format",
        "json",
    ];
    let mut first = Background::start(&db.url, &args);
    first.wait_for("started", |v| v["type"] == "started");
    // The second run of the same job is refused at once.
    let second = evolve(&db.url, &args);
    assert_refused(
        &second,
        &[
            "backfill job is already running (pid ",
            ", evolve backfill, ",
            "evolve backfill cancel job",
        ],
    );
    // The other run is named by its pid and program, not by its batch
    // statement.
    let stderr = text(&second.stderr);
    assert!(
        !stderr.contains("WITH batch") && stderr.len() < 300,
        "{stderr}"
    );
    // Pause while the batch waits; it commits, then the run waits.
    let paused = evolve(&db.url, &["backfill", "pause", "job", "--format", "json"]);
    assert!(paused.status.success(), "{}", text(&paused.stderr));
    holder.batch_execute("COMMIT").await.unwrap();
    let p = first.wait_for("paused", |v| v["type"] == "paused");
    assert_eq!(p["reason"], "requested");
    let status = evolve(&db.url, &["backfill", "status", "job", "--format", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status[0]["state"], "paused");
    assert_eq!(status[0]["running"], true);
    let table = text(&evolve(&db.url, &["backfill", "status", "job"]).stdout);
    assert!(
        table.contains(" paused* ") && table.contains("(* a run holds the job's lock now)"),
        "a paused job whose run waits is starred: {table}"
    );
    assert_eq!(status[0]["batches"], 1, "one batch before the pause");
    assert_eq!(
        count(&c, "SELECT count(*) FROM p WHERE b IS NOT NULL").await,
        100
    );
    let resumed = evolve(&db.url, &["backfill", "resume", "job"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let (status, lines, stderr) = first.finish();
    assert!(status.success(), "{stderr}");
    assert_eq!(events(&lines, "resumed").len(), 1);
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 500);

    // Cancel reaches a waiting run, which stops with exit 1.
    holder
        .batch_execute("BEGIN; SELECT * FROM p WHERE id = 1 FOR UPDATE")
        .await
        .unwrap();
    let cancel_args = [
        "backfill",
        "run",
        "--table",
        "p",
        "--set",
        "a = a + 1",
        "--name",
        "bump",
        "--batch",
        "100",
        FIXED[0],
        FIXED[1],
        "--lock-timeout",
        "60s",
        "--poll",
        "50ms",
        "--format",
        "json",
    ];
    let mut run = Background::start(&db.url, &cancel_args);
    run.wait_for("started", |v| v["type"] == "started");
    let cancelled = evolve(&db.url, &["backfill", "cancel", "bump"]);
    assert!(cancelled.status.success(), "{}", text(&cancelled.stderr));
    holder.batch_execute("COMMIT").await.unwrap();
    let (status, _, stderr) = run.finish();
    assert_eq!(status.code(), Some(1));
    assert!(
        stderr.contains("backfill bump was cancelled after 100 rows"),
        "{stderr}"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM p WHERE a = id + 1").await,
        100
    );
    // Verbs on jobs that cannot take them.
    assert_refused(
        &evolve(&db.url, &["backfill", "resume", "bump"]),
        &["backfill bump is cancelled"],
    );
    assert_refused(
        &evolve(&db.url, &["backfill", "pause", "nope"]),
        &["backfill job nope does not exist"],
    );
}

#[tokio::test]
async fn the_verify_query_fails_the_run_when_rows_still_need_the_change() {
    let db = evolve_test::fresh_db("bf_verify").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE r (id int PRIMARY KEY, x float8);
         INSERT INTO r SELECT i, 0 FROM generate_series(1, 50) i;",
    )
    .await
    .unwrap();
    // A volatile expression is never "done": the verify query says so.
    let out = evolve(
        &db.url,
        &["backfill", "run", "--table", "r", "--set", "x = random()"],
    );
    assert_refused(&out, &["50 rows of public.r still need the change"]);
    assert!(
        text(&out.stdout).contains("verify: 50 rows left"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM evolve_backfill_jobs WHERE state = 'failed'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_backfill_file_runs_as_a_job_named_after_it() {
    let db = evolve_test::fresh_db("bf_file").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE restaurants (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), postcode text, postal_code text);
         INSERT INTO restaurants (postcode) SELECT 'PC' || i FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("evolve-bf-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("B001__postal_code.sql");
    std::fs::write(
        &file,
        "-- evolve:batch 40\nUPDATE restaurants SET postal_code = lower(postcode)\n WHERE postcode <> 'PC7';\n",
    )
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--file",
            file.to_str().unwrap(),
            "--batch-time",
            "0",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("299 rows changed in 8 batches"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM restaurants WHERE postal_code = lower(postcode)"
        )
        .await,
        299
    );
    let status = evolve(&db.url, &["backfill", "status"]);
    let s = text(&status.stdout);
    assert!(s.contains("B001__postal_code") && s.contains("done"), "{s}");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn bad_input_is_one_line_and_leaves_nothing_behind() {
    let db = evolve_test::fresh_db("bf_bad").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a * 2) STORED);
         CREATE TABLE nokey (a int);
         INSERT INTO t (id, a) VALUES (1, 1);",
    )
    .await
    .unwrap();
    let run = |args: &[&str]| evolve(&db.url, &[&["backfill", "run"], args].concat());
    assert_refused(
        &run(&["--table", "nope", "--set", "a = 1"]),
        &["table \"nope\" does not exist"],
    );
    assert_refused(
        &run(&["--table", "nokey", "--set", "a = 1"]),
        &["public.nokey has no primary key"],
    );
    assert_refused(
        &run(&["--table", "t", "--set", "zz = 1"]),
        &["column \"zz\" of table public.t does not exist"],
    );
    assert_refused(&run(&["--table", "t", "--set", "g = 1"]), &["is generated"]);
    assert_refused(
        &run(&["--table", "t", "--set", "id = 1"]),
        &["part of the primary key"],
    );
    assert_refused(
        &run(&["--table", "t", "--set", "a == 1"]),
        &["is not an assignment"],
    );
    assert_refused(
        &run(&["--table", "t", "--set", "a = 1; DROP TABLE t"]),
        &["semicolon"],
    );
    assert_refused(
        &run(&[
            "--table",
            "t",
            "--set",
            "a = 1",
            "--where",
            "true); DELETE FROM t; --",
        ]),
        &["is not one condition"],
    );
    assert_refused(
        &run(&["--table", "t", "--set", "a = nosuch + 1"]),
        &["do not work on public.t", "nosuch"],
    );
    assert_refused(
        &run(&["--table", "t", "--set", "a = 'x'"]),
        &["do not work on public.t"],
    );
    // Nothing ran: no progress table, the row untouched.
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_class WHERE relname = 'evolve_backfill_jobs'"
        )
        .await,
        0
    );
    assert_eq!(count(&c, "SELECT a::int8 FROM t").await, 1);
    // A name already used for another change.
    let first = run(&[
        "--table", "t", "--set", "a = 5", "--name", "j", "--where", "false",
    ]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    c.batch_execute("UPDATE evolve_backfill_jobs SET state = 'running'")
        .await
        .unwrap();
    assert_refused(
        &run(&["--table", "t", "--set", "a = 6", "--name", "j"]),
        &["backfill j exists for another change"],
    );
    let usage = evolve(&db.url, &["backfill", "run", "--set", "a = 1"]);
    assert_eq!(
        usage.status.code(),
        Some(2),
        "clap refuses a missing --table"
    );
}

#[tokio::test]
async fn quoted_names_and_timestamp_numeric_keys_round_trip() {
    let db = evolve_test::fresh_db("bf_odd").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        r#"CREATE SCHEMA "My Schema";
           CREATE TABLE "My Schema"."Odd ""T""" ("Key Col" timestamptz, k2 numeric, "v;x" text,
                                                 PRIMARY KEY ("Key Col", k2));
           INSERT INTO "My Schema"."Odd ""T"""
             SELECT timestamptz '2020-01-01 00:00:00.123456+00' + (i / 2) * interval '1 hour', i / 3.0, NULL
             FROM generate_series(1, 500) i;"#,
    )
    .await
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            r#""My Schema"."Odd ""T""""#,
            "--set",
            r#""v;x" = k2::text"#,
            "--name",
            "odd",
            "--batch",
            "30",
            FIXED[0],
            FIXED[1],
            "--format",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(
        events(&lines, "batch").len(),
        17,
        "ceil(500 / 30) batches, none repeated"
    );
    assert_eq!(events(&lines, "finished")[0]["rows_done"], 500);
    assert_eq!(
        count(
            &c,
            r#"SELECT count(*) FROM "My Schema"."Odd ""T""" WHERE "v;x" = k2::text"#
        )
        .await,
        500
    );
}

/// The database's URL as role `role` (the test cluster trusts every
/// loopback login).
fn url_as(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

/// `url` with `options` (libpq's `-c name=value` settings, encoded).
fn with_options(url: &str, options: &str) -> String {
    format!(
        "{url}{}options={options}",
        if url.contains('?') { "&" } else { "?" }
    )
}

/// A table whose policies apply to the role (its owner, under FORCE ROW
/// LEVEL SECURITY) would be backfilled only where they let the role see,
/// and verified the same way: refused before anything runs.
#[tokio::test]
async fn a_table_whose_policies_apply_to_the_role_is_refused_not_filtered() {
    let db = evolve_test::fresh_db("bf_rls").await;
    let c = connect(&db.url).await;
    let role = format!("evolve_bf_rls_{}", std::process::id());
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         GRANT CREATE ON SCHEMA public TO {role};
         SET ROLE {role};
         CREATE TABLE ten (id int PRIMARY KEY, t text, u text);
         INSERT INTO ten SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, NULL FROM generate_series(1, 1000) g;
         ALTER TABLE ten ENABLE ROW LEVEL SECURITY;
         ALTER TABLE ten FORCE ROW LEVEL SECURITY;
         CREATE POLICY only_a ON ten USING (t = 'a');
         RESET ROLE;"
    ))
    .await
    .unwrap();
    let out = evolve(
        &url_as(&db.url, &role),
        &["backfill", "run", "--table", "ten", "--set", "u = upper(t)"],
    );
    assert_refused(
        &out,
        &[
            "backfill ten.u: the row-level security policies of public.ten apply to role",
            "BYPASSRLS",
        ],
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM ten WHERE u IS NOT NULL").await,
        0
    );
    // Without FORCE the owner bypasses the policies: every row.
    c.batch_execute("ALTER TABLE ten NO FORCE ROW LEVEL SECURITY")
        .await
        .unwrap();
    let out = evolve(
        &url_as(&db.url, &role),
        &["backfill", "run", "--table", "ten", "--set", "u = upper(t)"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        count(&c, "SELECT count(*) FROM ten WHERE u = upper(t)").await,
        1000
    );
}

/// The last key of a batch is kept as text between batches and between
/// runs: a session with `extra_float_digits = 0` (float keys one ulp
/// apart would print alike) or `DateStyle = 'SQL, DMY'` (05/01 read back
/// as May 1 by the next run) must not make a backfill skip rows.
#[tokio::test]
async fn keys_kept_as_text_read_back_the_same_in_any_session() {
    let db = evolve_test::fresh_db("bf_keytext").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE fk (k float8 PRIMARY KEY, a int, b int);
         INSERT INTO fk SELECT 1 + g * 2.220446049250313e-16, g, NULL FROM generate_series(0, 999) g;
         CREATE TABLE daily (d date PRIMARY KEY, a int, b int);
         INSERT INTO daily SELECT date '2026-01-01' + g, g, NULL FROM generate_series(0, 399) g;",
    )
    .await
    .unwrap();
    let out = evolve(
        &with_options(&db.url, "-c%20extra_float_digits%3D0"),
        &[
            "backfill", "run", "--table", "fk", "--set", "b = a", "--batch", "37", FIXED[0],
            FIXED[1],
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(count(&c, "SELECT count(*) FROM fk WHERE b = a").await, 1000);

    // Killed under one DateStyle, resumed under another.
    let args = [
        "backfill", "run", "--table", "daily", "--set", "b = a", "--name", "daily", "--batch",
        "10", FIXED[0], FIXED[1], "--nice", "2", "--format", "json",
    ];
    let mut run = Background::start(&with_options(&db.url, "-c%20DateStyle%3DSQL%2CDMY"), &args);
    run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
    run.kill();
    let out = evolve(&db.url, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        count(&c, "SELECT count(*) FROM daily WHERE b = a").await,
        400
    );
}

/// A `statement_timeout` set on the database would cancel the verify
/// query (which reads the whole table) or a long batch: evolve's sessions
/// run without one. A batch cancelled anyway (pg_cancel_backend) says so,
/// not that the rows are wrong.
#[tokio::test]
async fn a_database_statement_timeout_does_not_stop_a_backfill_and_a_cancel_says_so() {
    let db = evolve_test::fresh_db("bf_timeout").await;
    let c = connect(&db.url).await;
    c.batch_execute(&format!(
        "CREATE FUNCTION slow(int) RETURNS int LANGUAGE sql AS 'SELECT $1 FROM pg_sleep(0.001)';
         CREATE TABLE s (id int PRIMARY KEY, a int, b int, c int);
         INSERT INTO s SELECT g, g, NULL, NULL FROM generate_series(1, 300) g;
         ALTER DATABASE {} SET statement_timeout = '100ms';",
        db.name
    ))
    .await
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "s",
            "--set",
            "b = slow(a)",
            "--batch",
            "10",
            FIXED[0],
            FIXED[1],
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("verify: 0 rows left"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(count(&c, "SELECT count(*) FROM s WHERE b = a").await, 300);

    let holder = connect(&db.url).await;
    holder
        .batch_execute("BEGIN; SELECT * FROM s WHERE id = 5 FOR UPDATE")
        .await
        .unwrap();
    let run = Background::start(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "s",
            "--set",
            "c = a",
            "--name",
            "cancelled",
            "--batch",
            "10",
            FIXED[0],
            FIXED[1],
            "--lock-timeout",
            "60s",
        ],
    );
    let waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = 'evolve backfill' AND wait_event_type = 'Lock' AND datname = current_database()";
    let pid: i32 = loop {
        if let Some(r) = c.query_opt(waiting, &[]).await.unwrap() {
            break r.get(0);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    c.execute("SELECT pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap();
    let (status, _, stderr) = run.finish();
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("keys from the first up to (10)")
            && stderr.contains("the statement was cancelled")
            && stderr.contains("statement_timeout")
            && stderr.contains("run it again to resume at that batch")
            && !stderr.contains("fix the expression"),
        "{stderr}"
    );
    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--table",
            "s",
            "--set",
            "c = a",
            "--name",
            "cancelled",
            "--batch",
            "10",
            FIXED[0],
            FIXED[1],
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(count(&c, "SELECT count(*) FROM s WHERE c = a").await, 300);
}
