//! `evolve rewrite` under the writers and tables production has: an
//! application role with rights on the table only, changes applied with
//! `session_replication_role = replica` (a logical replication
//! subscriber's apply worker, a data-only restore), unique values that
//! move between rows while the rewrite runs, an `--alter` adding a unique
//! constraint or a self-reference, a key retyped to text, rows the new
//! shape cannot hold, foreign keys from partitioned tables, stored
//! generated columns (and a retype one of them forbids), and a capture set
//! up by an earlier evolve. Each compares the
//! rows after the swap with the table's last committed rows.

mod backfill_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backfill_support::{Background, assert_no_leftovers, connect, count, evolve, text};
use tokio_postgres::Client;

async fn scalar_text(c: &Client, sql: &str) -> Option<String> {
    c.query_one(sql, &[]).await.expect(sql).get(0)
}

/// md5 of `table`'s rows as text, in the order of that text.
async fn checksum(c: &Client, table: &str) -> String {
    scalar_text(
        c,
        &format!("SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM {table} t"),
    )
    .await
    .unwrap_or_default()
}

fn url_as(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

fn args<'a>(table: &'a str, alter: &'a str) -> Vec<&'a str> {
    vec![
        "rewrite",
        table,
        "--alter",
        alter,
        "--batch",
        "50",
        "--batch-time",
        "0",
        "--lock-timeout",
        "60s",
        "--format",
        "json",
    ]
}

/// Starts a rewrite and SIGKILLs it during its copy (after its second
/// batch, slowed by `--nice`): the capture trigger is in place, most rows
/// are not copied yet.
fn kill_during_copy(url: &str, table: &str, alter: &str) {
    let mut a = args(table, alter);
    a.extend(["--nice", "20"]);
    let mut run = Background::start(url, &a);
    run.wait_for("a batch", |v| v["type"] == "batch");
    run.wait_for("a 2nd batch", |v| v["type"] == "batch");
    run.kill();
}

/// Starts a rewrite and SIGKILLs it while its swap waits for the table's
/// lock: copied, indexes built, in phase replay.
async fn kill_while_swapping(c: &Client, url: &str, table: &str, alter: &str) {
    let holder = connect(url).await;
    holder
        .batch_execute(&format!("BEGIN; LOCK TABLE {table} IN ACCESS SHARE MODE"))
        .await
        .unwrap();
    let mut run = Background::start(url, &args(table, alter));
    run.wait_for("the swap", |v| v["type"] == "phase" && v["phase"] == "swap");
    let waiting = format!(
        "SELECT count(*) FROM pg_locks WHERE relation = '{table}'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted"
    );
    while count(c, &waiting).await == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.kill();
    holder.batch_execute("COMMIT").await.unwrap();
    while count(
        c,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'evolve rewrite'",
    )
    .await
        > 0
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn finish(url: &str, table: &str, alter: &str) {
    let out = evolve(url, &args(table, alter));
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The capture trigger runs in the writer's session: an application role
/// that may write the table but has never heard of evolve's log table
/// must go on writing while a rewrite runs (and its writes must reach the
/// new table).
#[tokio::test]
async fn an_application_role_with_rights_on_the_table_only_keeps_writing() {
    let db = evolve_test::fresh_db("rwa_app_role").await;
    let c = connect(&db.url).await;
    let role = format!("evolve_rwa_app_{}", std::process::id());
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         CREATE TABLE acct (id serial PRIMARY KEY, v int, w text);
         INSERT INTO acct (v, w) SELECT i, 'w' || i FROM generate_series(1, 2000) i;
         GRANT SELECT, INSERT, UPDATE, DELETE ON acct TO {role};
         GRANT USAGE ON SEQUENCE acct_id_seq TO {role};"
    ))
    .await
    .unwrap();
    kill_during_copy(&db.url, "acct", "ALTER COLUMN v TYPE bigint");
    let app = connect(&url_as(&db.url, &role)).await;
    for sql in [
        "UPDATE acct SET w = 'by the app' WHERE id = 1",
        "INSERT INTO acct (v, w) VALUES (-1, 'inserted by the app')",
        "DELETE FROM acct WHERE id = 2",
    ] {
        app.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {}", evolve_pg::PgError::Query(e)));
    }
    let expected = checksum(&c, "acct").await;
    finish(&db.url, "acct", "ALTER COLUMN v TYPE bigint");
    assert_eq!(checksum(&c, "acct").await, expected);
    // And after the swap, with the table's rights carried over.
    app.batch_execute("UPDATE acct SET w = 'after' WHERE id = 3")
        .await
        .unwrap();
}

/// Triggers do not fire for sessions with `session_replication_role =
/// replica` (a subscription's apply worker, a data-only restore) unless
/// they are ENABLE ALWAYS: such writes must be captured all the same, or
/// the swap brings back the rows as they were before them.
#[tokio::test]
async fn writes_applied_as_a_replica_are_not_lost() {
    let db = evolve_test::fresh_db("rwa_replica_role").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE sub (id int PRIMARY KEY, v int, w text);
         INSERT INTO sub SELECT i, i, 'w' || i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    kill_during_copy(&db.url, "sub", "ALTER COLUMN v TYPE bigint");
    let apply = connect(&db.url).await;
    apply
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE sub SET w = 'applied' WHERE id = 1;
             DELETE FROM sub WHERE id = 2;
             INSERT INTO sub VALUES (0, 0, 'applied insert');",
        )
        .await
        .unwrap();
    let expected = checksum(&c, "sub").await;
    finish(&db.url, "sub", "ALTER COLUMN v TYPE bigint");
    assert_eq!(
        scalar_text(&c, "SELECT w FROM sub WHERE id = 1")
            .await
            .as_deref(),
        Some("applied")
    );
    assert_eq!(count(&c, "SELECT count(*) FROM sub WHERE id = 2").await, 0);
    assert_eq!(checksum(&c, "sub").await, expected);
}

/// A unique value moved from a row already copied to one not copied yet:
/// the copy brings the old row (with the value) and, later, the new one
/// (with it too). The unique index must still be built, and the rewrite
/// must end with exactly the table's rows.
#[tokio::test]
async fn a_unique_value_moved_to_a_row_not_copied_yet_does_not_stop_the_rewrite() {
    let db = evolve_test::fresh_db("rwa_unique_copy").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE usr (id int PRIMARY KEY, email text NOT NULL UNIQUE, v int);
         INSERT INTO usr SELECT i, 'e' || i, i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    kill_during_copy(&db.url, "usr", "ALTER COLUMN v TYPE bigint");
    c.batch_execute(
        "UPDATE usr SET email = 'gone' WHERE id = 1;
         UPDATE usr SET email = 'e1' WHERE id = 1900;",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "usr").await;
    finish(&db.url, "usr", "ALTER COLUMN v TYPE bigint");
    assert_eq!(checksum(&c, "usr").await, expected);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_index WHERE indrelid = 'usr'::regclass AND indisunique AND NOT indisprimary"
        )
        .await,
        1
    );
}

/// Unique values exchanged between two rows (and one moved from a deleted
/// row to a new one) after the shadow's unique index was built: each
/// committed state of the table is unique, and so must the replay's be.
#[tokio::test]
async fn unique_values_exchanged_between_rows_are_replayed() {
    let db = evolve_test::fresh_db("rwa_unique_replay").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE usr (id int PRIMARY KEY, email text NOT NULL UNIQUE, v int);
         INSERT INTO usr SELECT i, 'e' || i, i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    kill_while_swapping(&c, &db.url, "usr", "ALTER COLUMN v TYPE bigint").await;
    c.batch_execute(
        "BEGIN;
         UPDATE usr SET email = 'tmp' WHERE id = 2;
         UPDATE usr SET email = 'e2' WHERE id = 3;
         UPDATE usr SET email = 'e3' WHERE id = 2;
         COMMIT;
         DELETE FROM usr WHERE id = 4;
         INSERT INTO usr VALUES (2001, 'e4', 0);",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "usr").await;
    finish(&db.url, "usr", "ALTER COLUMN v TYPE bigint");
    assert_eq!(checksum(&c, "usr").await, expected);
}

/// A row the new shape cannot hold (a value out of range of the narrower
/// type) stops the copy: the error names the table, the keys of the batch
/// and both ways out, on one line, and the table is untouched; once the
/// row is fixed the next run resumes and finishes.
#[tokio::test]
async fn a_row_the_new_shape_cannot_hold_names_the_keys_and_the_way_out() {
    let db = evolve_test::fresh_db("rwa_copy_fails").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE narrow (id int PRIMARY KEY, v int);
         INSERT INTO narrow SELECT i, i FROM generate_series(1, 200) i;
         UPDATE narrow SET v = 100000 WHERE id = 120;",
    )
    .await
    .unwrap();
    let alter = "ALTER COLUMN v TYPE smallint";
    let out = evolve(&db.url, &args("narrow", alter));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    for part in [
        "error: rewrite of public.narrow:",
        "keys after (100) up to (150)",
        "smallint out of range",
        "run it again",
        "evolve rewrite public.narrow --abort",
    ] {
        assert!(first.contains(part), "{part:?} in the first line: {stderr}");
    }
    assert_eq!(
        count(&c, "SELECT count(*) FROM narrow WHERE v = id").await,
        199
    );
    c.batch_execute("UPDATE narrow SET v = 120 WHERE id = 120")
        .await
        .unwrap();
    let expected = checksum(&c, "narrow").await;
    finish(&db.url, "narrow", alter);
    assert_eq!(checksum(&c, "narrow").await, expected);
}

/// A key column whose type changes to one the old type does not compare
/// with (integer to text): the replay matches the shadow's keys with the
/// logged ones, so the rewrite must either work or be refused before
/// anything runs, not fail after the whole copy with nothing but
/// `--abort` left.
#[tokio::test]
async fn a_key_retyped_to_text_is_replayed_or_refused_up_front() {
    let db = evolve_test::fresh_db("rwa_key_text").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE codes (id int PRIMARY KEY, v int);
         INSERT INTO codes SELECT i, i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    let alter = "ALTER COLUMN id TYPE text";
    kill_during_copy(&db.url, "codes", alter);
    c.batch_execute("UPDATE codes SET v = -1 WHERE id = 1; DELETE FROM codes WHERE id = 2")
        .await
        .unwrap();
    let expected = checksum(&c, "codes").await;
    finish(&db.url, "codes", alter);
    assert_eq!(checksum(&c, "codes").await, expected);
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'codes'::regclass AND attname = 'id'").await.as_deref(),
        Some("text")
    );
}

/// An `--alter` that adds a unique constraint the rows break: PostgreSQL's
/// own `ALTER TABLE ... ADD UNIQUE` would fail naming the duplicate; a
/// rewrite must not instead drop the second row of each duplicate on the
/// floor and swap in a table without it.
#[tokio::test]
async fn a_unique_constraint_the_rows_break_fails_and_loses_no_row() {
    let db = evolve_test::fresh_db("rwa_add_unique").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE dup (id int PRIMARY KEY, email text, v int);
         INSERT INTO dup SELECT i, 'e' || i, i FROM generate_series(1, 200) i;
         UPDATE dup SET email = 'e10' WHERE id = 160;",
    )
    .await
    .unwrap();
    let before = checksum(&c, "dup").await;
    let alter = "ADD CONSTRAINT dup_email_key UNIQUE (email)";
    let out = evolve(&db.url, &args("dup", alter));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}{stderr}", text(&out.stdout));
    let first = stderr.lines().next().unwrap_or_default();
    for part in [
        "error: rewrite of public.dup:",
        "keys after (150) up to (200)",
        "dup_email_key",
        "evolve rewrite public.dup --abort",
    ] {
        assert!(first.contains(part), "{part:?} in the first line: {stderr}");
    }
    assert_eq!(checksum(&c, "dup").await, before, "the table is untouched");
    assert_eq!(count(&c, "SELECT count(*) FROM dup").await, 200);
    // Fixed, the next run goes on and every row is there.
    c.batch_execute("UPDATE dup SET email = 'e160' WHERE id = 160")
        .await
        .unwrap();
    let expected = checksum(&c, "dup").await;
    finish(&db.url, "dup", alter);
    assert_eq!(checksum(&c, "dup").await, expected);
    assert_eq!(count(&c, "SELECT count(*) FROM dup").await, 200);
}

/// The same unique constraint added by the `--alter` on rows that keep it,
/// while a writer moves a value from a row already copied to one not
/// copied yet: not a duplicate in the table, so the rewrite goes through
/// with every row.
#[tokio::test]
async fn an_added_unique_constraint_survives_a_value_moved_during_the_copy() {
    let db = evolve_test::fresh_db("rwa_add_unique_moved").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE mv (id int PRIMARY KEY, email text, v int);
         INSERT INTO mv SELECT i, 'e' || i, i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    let alter = "ADD CONSTRAINT mv_email_key UNIQUE (email)";
    kill_during_copy(&db.url, "mv", alter);
    c.batch_execute(
        "UPDATE mv SET email = 'moved' WHERE id = 1;
         UPDATE mv SET email = 'e1' WHERE id = 1900;",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "mv").await;
    finish(&db.url, "mv", alter);
    assert_eq!(checksum(&c, "mv").await, expected);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'mv'::regclass AND conname = 'mv_email_key'"
        )
        .await,
        1
    );
}

/// A table with stored generated columns (besides an identity column and
/// a default) that a view reads, its key retyped int to bigint while a
/// writer inserts, updates the columns the generation expression reads
/// and deletes: the shadow has the generated column with the same
/// expression, the copy and the replay leave it out of their INSERTs
/// (PostgreSQL computes it), and the swap rebuilds the view without
/// refusing the table's own generated column. Kept with `--keep-old`,
/// changed again, and reverted: the same holds the other way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_a_stored_generated_column_is_rewritten_under_a_writer() {
    let db = evolve_test::fresh_db("rwa_generated").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE gen (id int PRIMARY KEY, a int NOT NULL, b int DEFAULT 7,
                           seq int GENERATED ALWAYS AS IDENTITY,
                           g int GENERATED ALWAYS AS (a * 2 + b) STORED,
                           h text GENERATED ALWAYS AS ('a' || a) STORED);
         INSERT INTO gen (id, a, b) SELECT i, i, i % 5 FROM generate_series(1, 3000) i;
         CREATE VIEW big_gen AS SELECT id, g, h FROM gen WHERE g > 100;",
    )
    .await
    .unwrap();
    let expressions = "SELECT string_agg(format('%s %s %s', a.attname, a.attgenerated, pg_get_expr(d.adbin, d.adrelid)), '; ' ORDER BY a.attnum)
                       FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                       WHERE a.attrelid = 'gen'::regclass";
    let expressions0 = scalar_text(&c, expressions).await;
    let max_seq0 = count(&c, "SELECT max(seq)::int8 FROM gen").await;
    let oid0 = count(&c, "SELECT 'gen'::regclass::oid::int8").await;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let writing = {
        let (url, stop, started) = (db.url.clone(), Arc::clone(&stop), Arc::clone(&started));
        tokio::spawn(async move {
            let c = connect(&url).await;
            started.notify_one();
            let (mut delta, mut updates, mut inserts) = (0i64, 0i64, 0i64);
            let mut failures = Vec::new();
            let mut mine: Vec<i32> = Vec::new();
            let mut i = 0i32;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let op = match i % 3 {
                    0 => c
                        .execute(
                            "INSERT INTO gen (id, a) VALUES ($1::int4 + 100000, $1)",
                            &[&i],
                        )
                        .await
                        .map(|n| {
                            mine.push(i + 100000);
                            inserts += n as i64;
                            delta += n as i64;
                        }),
                    1 => c
                        .execute(
                            "UPDATE gen SET a = a + 1 WHERE id = $1::int4",
                            &[&(i * 7 % 3000 + 1)],
                        )
                        .await
                        .map(|n| updates += n as i64),
                    _ => match mine.pop() {
                        Some(id) => c
                            .execute("DELETE FROM gen WHERE id = $1::int4", &[&id])
                            .await
                            .map(|n| delta -= n as i64),
                        None => Ok(()),
                    },
                };
                if let Err(e) = op {
                    failures.push(evolve_pg::PgError::Query(e).to_string());
                }
            }
            (delta, updates, inserts, failures)
        })
    };
    started.notified().await;
    let url = db.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut a = args("gen", "ALTER COLUMN id TYPE bigint");
        a.push("--keep-old");
        evolve(&url, &a)
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    let (delta, updates, inserts, failures) = writing.await.unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(failures.is_empty(), "no write failed: {failures:?}");
    assert!(
        updates > 0 && inserts > 0,
        "the writer ran during the rewrite"
    );
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    let rebuilt = &backfill_support::events(&lines, "swapped")[0]["rebuilt"];
    assert_eq!(rebuilt, &serde_json::json!(["public.big_gen"]));
    let replayed: u64 = backfill_support::events(&lines, "replayed")
        .iter()
        .map(|r| r["entries"].as_u64().unwrap())
        .sum();
    assert!(replayed > 0, "the writer's changes were replayed");

    let check = async |c: &Client, id_type: &str| {
        assert_eq!(
            scalar_text(c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'gen'::regclass AND attname = 'id'").await.as_deref(),
            Some(id_type)
        );
        assert_eq!(count(c, "SELECT count(*) FROM gen").await, 3000 + delta);
        assert_eq!(
            count(
                c,
                "SELECT count(*) FROM gen WHERE g IS DISTINCT FROM a * 2 + b OR h IS DISTINCT FROM 'a' || a"
            )
            .await,
            0,
            "every generated value is the expression's"
        );
        assert_eq!(
            scalar_text(c, expressions).await,
            expressions0,
            "the same generated columns, identity and default"
        );
        assert_eq!(
            scalar_text(c, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = 'gen'::regclass AND attname = 'seq'").await.as_deref(),
            Some("a")
        );
        assert_eq!(
            count(c, "SELECT count(*) FROM big_gen").await,
            count(c, "SELECT count(*) FROM gen WHERE g > 100").await,
            "the view reads the table in place"
        );
        assert_eq!(
            count(
                c,
                "SELECT count(*) FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                 WHERE r.ev_class = 'big_gen'::regclass AND d.refobjid = 'gen'::regclass AND d.refobjsubid > 0"
            )
            .await,
            3,
            "id, g and h of the table in place"
        );
    };
    check(&c, "bigint").await;
    assert_ne!(count(&c, "SELECT 'gen'::regclass::oid::int8").await, oid0);
    // The new table computes, defaults and numbers a new row.
    let r = c
        .query_one(
            "INSERT INTO gen (id, a) VALUES (5000000, 1) RETURNING g::int8, b::int8, seq::int8",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), (9, 7));
    assert!(r.get::<_, i64>(2) > max_seq0);
    let explicit = c
        .execute("INSERT INTO gen (id, a, g) VALUES (5000001, 1, 3)", &[])
        .await
        .expect_err("a generated column stays generated");
    assert_eq!(
        explicit.code(),
        Some(&tokio_postgres::error::SqlState::GENERATED_ALWAYS)
    );
    c.batch_execute("UPDATE gen SET a = a + 10 WHERE id <= 10; DELETE FROM gen WHERE id = 11")
        .await
        .unwrap();
    let expected = checksum(&c, "gen").await;

    let out = evolve(&db.url, &["rewrite", "gen", "--revert"]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(count(&c, "SELECT 'gen'::regclass::oid::int8").await, oid0);
    check(&c, "integer").await;
    assert_eq!(checksum(&c, "gen").await, expected, "every row back");
    assert_no_leftovers(&c).await;
}

/// PostgreSQL refuses to change the type of a column that a generated
/// column reads ("cannot alter type of a column used by a generated
/// column"), and so the `--alter` cannot be applied to the shadow: refused
/// before anything runs, in the rewrite's words, naming both columns and
/// the way out, nothing left behind. The way out (the generated column
/// dropped and added back in the same rewrite) then works.
#[tokio::test]
async fn retyping_a_column_a_generated_column_reads_is_refused_naming_both() {
    let db = evolve_test::fresh_db("rwa_generated_retype").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE gen (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a + 1) STORED, z int);
         INSERT INTO gen (id, a, z) SELECT i, i, i FROM generate_series(1, 500) i;
         CREATE VIEW gen_g AS SELECT id, g FROM gen;",
    )
    .await
    .unwrap();
    let out = evolve(&db.url, &args("gen", "ALTER COLUMN a TYPE bigint"));
    backfill_support::assert_refused(
        &out,
        &[
            "rewrite of public.gen: --alter \"ALTER COLUMN a TYPE bigint\" cannot be applied",
            "the type of column a, which the generated column g reads",
            "(evolve rewrite public.gen --alter 'ALTER COLUMN a TYPE bigint' --alter 'DROP COLUMN g' --alter 'ADD COLUMN g integer GENERATED ALWAYS AS ((a + 1)) STORED': g then comes last",
            "(evolve rewrite public.gen --alter 'ALTER COLUMN a TYPE bigint' --alter 'ALTER COLUMN g DROP EXPRESSION')",
        ],
    );
    assert!(
        !text(&out.stderr).contains("migration"),
        "{}",
        text(&out.stderr)
    );
    assert_no_leftovers(&c).await;
    let mut a = args("gen", "ALTER COLUMN a TYPE bigint");
    a.extend([
        "--alter",
        "DROP COLUMN g",
        "--alter",
        "ADD COLUMN g integer GENERATED ALWAYS AS ((a + 1)) STORED",
    ]);
    let out = evolve(&db.url, &a);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        scalar_text(
            &c,
            "SELECT string_agg(format('%s %s%s', attname, format_type(atttypid, atttypmod), attgenerated), ', ' ORDER BY attnum)
             FROM pg_attribute WHERE attrelid = 'gen'::regclass AND attnum > 0 AND NOT attisdropped"
        )
        .await
        .as_deref(),
        Some("id integer, a bigint, z integer, g integers")
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM gen WHERE g = a + 1 AND z = a").await,
        500
    );
    assert_eq!(count(&c, "SELECT sum(g)::int8 FROM gen_g").await, 125_750);
}

/// A primary key that is itself a stored generated column: the copy's
/// batches are bounded by it though it is not copied (the new table
/// computes it), and changes that move a row's key (a write to the column
/// it is computed from) are replayed. A run killed during its copy, rows
/// changed, and the next run finishes with exactly the table's rows.
#[tokio::test]
async fn a_generated_primary_key_is_copied_and_replayed() {
    let db = evolve_test::fresh_db("rwa_generated_key").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE gk (a int NOT NULL, id int GENERATED ALWAYS AS (a * 10) STORED PRIMARY KEY, v int);
         INSERT INTO gk (a, v) SELECT i, i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    kill_during_copy(&db.url, "gk", "ALTER COLUMN v TYPE bigint");
    c.batch_execute(
        "UPDATE gk SET a = a + 100000 WHERE a <= 5;
         UPDATE gk SET v = -v WHERE a BETWEEN 1500 AND 1510;
         DELETE FROM gk WHERE a = 1999;
         INSERT INTO gk (a, v) VALUES (3000, 1);",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "gk").await;
    finish(&db.url, "gk", "ALTER COLUMN v TYPE bigint");
    assert_eq!(checksum(&c, "gk").await, expected);
    assert_eq!(
        scalar_text(&c, "SELECT attgenerated::text || format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'gk'::regclass AND attname = 'id'").await.as_deref(),
        Some("sinteger")
    );
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'gk'::regclass AND attname = 'v'").await.as_deref(),
        Some("bigint")
    );
}

/// A table that a partitioned table references: the swap drops and
/// re-adds the foreign key, whose clones on the partitions come and go
/// with it (dropping them one by one failed the swap), and PostgreSQL
/// before 18 cannot add it back `NOT VALID` on a partitioned table. On
/// such a server it is refused before anything runs, naming the foreign
/// key and the way out; from 18 on it is carried over.
#[tokio::test]
async fn a_foreign_key_from_a_partitioned_table_is_carried_over_or_refused_up_front() {
    let db = evolve_test::fresh_db("rwa_fk_parted").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE parent (id int PRIMARY KEY, v int);
         INSERT INTO parent SELECT i, i FROM generate_series(1, 300) i;
         CREATE TABLE events (pid int NOT NULL REFERENCES parent (id), at int NOT NULL) PARTITION BY RANGE (at);
         CREATE TABLE events_1 PARTITION OF events FOR VALUES FROM (0) TO (1000);
         INSERT INTO events SELECT i, i FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "parent").await;
    let pg18 = count(&c, "SELECT current_setting('server_version_num')::int8").await >= 180000;
    let out = evolve(&db.url, &args("parent", "ALTER COLUMN v TYPE bigint"));
    if pg18 {
        assert!(out.status.success(), "{}", text(&out.stderr));
    } else {
        backfill_support::assert_refused(
            &out,
            &[
                "rewrite of public.parent: partitioned tables reference it",
                "events_pid_fkey on events",
                "drop that foreign key first",
            ],
        );
        assert_no_leftovers(&c).await;
    }
    assert_eq!(checksum(&c, "parent").await, expected);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype = 'f'
               AND confrelid = 'parent'::regclass AND convalidated"
        )
        .await,
        1
    );
    assert!(
        c.batch_execute("INSERT INTO events VALUES (999, 5)")
            .await
            .is_err(),
        "the foreign key holds"
    );
}

/// Integer to bigint on an identity key: its sequence must follow the new
/// type (and keep its value), or inserts stop at 2^31 as before the
/// rewrite.
#[tokio::test]
async fn an_identity_key_retyped_to_bigint_gets_a_bigint_sequence() {
    let db = evolve_test::fresh_db("rwa_identity_bigint").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE idt (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v int);
         INSERT INTO idt (v) SELECT i FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    finish(&db.url, "idt", "ALTER COLUMN id TYPE bigint");
    assert_eq!(
        scalar_text(
            &c,
            "SELECT format_type(seqtypid, NULL) FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence('idt', 'id')::regclass"
        )
        .await
        .as_deref(),
        Some("bigint")
    );
    assert_eq!(
        count(&c, "INSERT INTO idt (v) VALUES (0) RETURNING id::int8").await,
        301
    );
}

/// An `--alter` that adds a foreign key from the table to itself: on the
/// shadow it references the original, so the swap must make it reference
/// the new table (itself), not leave it on the old one or fail on it.
#[tokio::test]
async fn a_self_reference_added_by_the_alter_references_the_new_table() {
    let db = evolve_test::fresh_db("rwa_self_fk").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE tree (id int PRIMARY KEY, parent int);
         INSERT INTO tree SELECT i, NULLIF(i - 1, 0) FROM generate_series(1, 300) i;",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "tree").await;
    finish(
        &db.url,
        "tree",
        "ADD CONSTRAINT tree_parent_fkey FOREIGN KEY (parent) REFERENCES tree (id)",
    );
    assert_eq!(checksum(&c, "tree").await, expected);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_constraint WHERE conname = 'tree_parent_fkey'
               AND conrelid = 'tree'::regclass AND confrelid = 'tree'::regclass AND convalidated"
        )
        .await,
        1
    );
    assert!(
        c.batch_execute("INSERT INTO tree VALUES (1000, 999)")
            .await
            .is_err(),
        "the foreign key holds"
    );
    assert_no_leftovers(&c).await;
}

/// A rewrite set up by an earlier evolve (capture function `SECURITY
/// INVOKER`, triggers fired only in origin sessions) is brought up to date
/// by the next run: from then on the application role's writes and
/// writes applied as a replica are captured.
#[tokio::test]
async fn the_next_run_brings_an_earlier_evolves_capture_up_to_date() {
    let db = evolve_test::fresh_db("rwa_old_capture").await;
    let c = connect(&db.url).await;
    let role = format!("evolve_rwa_old_{}", std::process::id());
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         CREATE TABLE oc (id int PRIMARY KEY, v int, w text);
         INSERT INTO oc SELECT i, i, 'w' || i FROM generate_series(1, 4000) i;
         GRANT SELECT, INSERT, UPDATE, DELETE ON oc TO {role};"
    ))
    .await
    .unwrap();
    let alter = "ALTER COLUMN v TYPE bigint";
    kill_during_copy(&db.url, "oc", alter);
    let oid = count(&c, "SELECT 'oc'::regclass::oid::int8").await;
    // As an earlier evolve left it.
    c.batch_execute(&format!(
        "ALTER FUNCTION _evolve_rw_{oid}_capture() SECURITY INVOKER;
         ALTER TABLE oc ENABLE TRIGGER _evolve_rw_capture;
         ALTER TABLE oc ENABLE TRIGGER _evolve_rw_capture_truncate;"
    ))
    .await
    .unwrap();
    kill_during_copy(&db.url, "oc", alter);
    let app = connect(&url_as(&db.url, &role)).await;
    app.batch_execute("UPDATE oc SET w = 'by the app' WHERE id = 1")
        .await
        .unwrap_or_else(|e| panic!("{}", evolve_pg::PgError::Query(e)));
    c.batch_execute(
        "SET session_replication_role = replica;
         UPDATE oc SET w = 'applied' WHERE id = 2;
         RESET session_replication_role;",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "oc").await;
    finish(&db.url, "oc", alter);
    assert_eq!(checksum(&c, "oc").await, expected);
}
