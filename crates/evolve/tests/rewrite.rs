//! `evolve rewrite` as users run it: integer to bigint on a table that a
//! view and a materialized view read while a writer keeps writing; SIGKILL
//! during the copy, the replay and the swap; `--keep-old` and `--revert`;
//! bad input.

mod backfill_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backfill_support::{
    Background, assert_no_leftovers, assert_refused, connect, count, events, evolve, text,
};
use tokio_postgres::Client;

async fn scalar_text(c: &Client, sql: &str) -> Option<String> {
    c.query_one(sql, &[]).await.expect(sql).get(0)
}

#[derive(Default, Debug)]
struct Tally {
    inserts: i64,
    count_delta: i64,
    sum_delta: i64,
    failures: Vec<String>,
}

/// Inserts, updates and deletes until told to stop, keeping the expected
/// change of count(*) and sum(balance).
async fn writer(url: String, stop: Arc<AtomicBool>, rows: i64) -> Tally {
    let c = connect(&url).await;
    let mut t = Tally::default();
    let mut mine: Vec<i64> = Vec::new();
    let mut i: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let op = match i % 3 {
            0 => c
                .query_one(
                    "INSERT INTO accounts (owner, balance) VALUES ('w', 1) RETURNING id::int8",
                    &[],
                )
                .await
                .map(|r| {
                    mine.push(r.get(0));
                    t.inserts += 1;
                    t.count_delta += 1;
                    t.sum_delta += 1;
                }),
            1 => c
                .execute(
                    "UPDATE accounts SET balance = balance + 2 WHERE id = $1::int8",
                    &[&(i % rows + 1)],
                )
                .await
                .map(|n| t.sum_delta += 2 * n as i64),
            _ => match mine.pop() {
                Some(id) => c
                    .execute("DELETE FROM accounts WHERE id = $1::int8", &[&id])
                    .await
                    .map(|n| {
                        t.count_delta -= n as i64;
                        t.sum_delta -= n as i64;
                    }),
                None => Ok(()),
            },
        };
        if let Err(e) = op {
            t.failures.push(evolve_pg::PgError::Query(e).to_string());
        }
    }
    t
}

#[tokio::test]
async fn integer_to_bigint_under_a_view_and_a_matview_while_a_writer_writes() {
    let db = evolve_test::fresh_db("rw_bigint").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "DO $$ BEGIN CREATE ROLE evolve_rw_reader; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
         CREATE TABLE branches (id int PRIMARY KEY);
         INSERT INTO branches VALUES (1), (2);
         CREATE TABLE accounts (id serial PRIMARY KEY, owner text NOT NULL,
                                balance int NOT NULL DEFAULT 0 CHECK (balance > -1000000), note text,
                                branch int DEFAULT 1 REFERENCES branches (id));
         ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
         CREATE POLICY not_secret ON accounts USING (owner <> 'secret');
         CREATE INDEX accounts_owner_idx ON accounts (owner);
         ALTER TABLE accounts ADD CONSTRAINT accounts_owner_note_key UNIQUE (owner, note);
         COMMENT ON TABLE accounts IS 'money';
         GRANT SELECT ON accounts TO evolve_rw_reader;
         CREATE TABLE audit (n int);
         CREATE FUNCTION audit_insert() RETURNS trigger LANGUAGE plpgsql AS
           $f$ BEGIN INSERT INTO audit VALUES (1); RETURN NULL; END $f$;
         CREATE TRIGGER accounts_audit AFTER INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION audit_insert();
         CREATE TABLE transfers (id serial PRIMARY KEY, account_id int REFERENCES accounts (id), amount int);
         INSERT INTO accounts (owner, balance) SELECT 'o' || (i % 100), i % 1000 FROM generate_series(1, 40000) i;
         INSERT INTO transfers (account_id, amount) SELECT i, 1 FROM generate_series(1, 100) i;
         CREATE VIEW rich AS SELECT id, owner, balance FROM accounts WHERE balance > 100;
         CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(balance) AS s FROM accounts;
         ANALYZE accounts;",
    )
    .await
    .unwrap();
    let (count0, sum0) = {
        let r = c
            .query_one("SELECT count(*), sum(balance) FROM accounts", &[])
            .await
            .unwrap();
        (r.get::<_, i64>(0), r.get::<_, i64>(1))
    };
    let oid0 = count(&c, "SELECT 'accounts'::regclass::oid::int8").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(writer(db.url.clone(), stop.clone(), 40000));
    let url = db.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        evolve(
            &url,
            &[
                "rewrite",
                "accounts",
                "--alter",
                "ALTER COLUMN id TYPE bigint",
                "--batch",
                "2000",
                "--batch-time",
                "0",
                "--format",
                "json",
            ],
        )
    })
    .await
    .unwrap();
    // A little more writing on the new table, then stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    let tally = writing.await.unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        tally.failures.is_empty(),
        "no write failed: {:?}",
        tally.failures
    );
    assert!(tally.inserts > 0);
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    let swapped = &events(&lines, "swapped")[0];
    let rebuilt: Vec<&str> = swapped["rebuilt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(rebuilt, ["public.rich", "public.totals"]);
    // 40000 rows in batches of 2000, and the writer's inserts.
    assert!(events(&lines, "batch").len() >= 20);
    let replayed: u64 = events(&lines, "replayed")
        .iter()
        .map(|r| r["entries"].as_u64().unwrap())
        .sum();
    assert!(
        replayed > 0,
        "the writer's changes during the copy were replayed"
    );

    // The new table: bigint, every row, every attachment.
    assert_ne!(
        count(&c, "SELECT 'accounts'::regclass::oid::int8").await,
        oid0
    );
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'accounts'::regclass AND attname = 'id'").await.as_deref(),
        Some("bigint")
    );
    let r = c
        .query_one("SELECT count(*), sum(balance) FROM accounts", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), count0 + tally.count_delta, "row count");
    assert_eq!(
        r.get::<_, i64>(1),
        sum0 + tally.sum_delta,
        "sum of balances"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM audit").await,
        40000 + tally.inserts,
        "the trigger fired on every insert"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM rich").await,
        count(&c, "SELECT count(*) FROM accounts WHERE balance > 100").await
    );
    for rel in ["rich", "totals"] {
        let reads = count(
            &c,
            &format!(
                "SELECT count(*) FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                 WHERE r.ev_class = '{rel}'::regclass AND d.refobjid = 'accounts'::regclass"
            ),
        )
        .await;
        assert!(reads > 0, "{rel} reads the new table");
    }
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_class WHERE relname = 'totals' AND relispopulated"
        )
        .await,
        1
    );
    assert!(count(&c, "SELECT n FROM totals").await >= count0);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_constraint WHERE conname = 'transfers_account_id_fkey'
                   AND confrelid = 'accounts'::regclass AND convalidated"
        )
        .await,
        1,
        "the foreign key points at the new table and is validated"
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'accounts'::regclass
                   AND confrelid = 'branches'::regclass AND convalidated"
        )
        .await,
        1,
        "and so does the one from it"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM pg_policy p JOIN pg_class t ON t.oid = p.polrelid
                   WHERE p.polrelid = 'accounts'::regclass AND p.polname = 'not_secret' AND t.relrowsecurity").await,
        1,
        "the policy and row security are on the new table"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM pg_indexes WHERE tablename = 'accounts'
                   AND indexname IN ('accounts_pkey', 'accounts_owner_idx', 'accounts_owner_note_key')").await,
        3
    );
    assert_eq!(count(&c, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'accounts'::regclass AND contype = 'c'").await, 1);
    assert_eq!(
        scalar_text(
            &c,
            "SELECT obj_description('accounts'::regclass, 'pg_class')"
        )
        .await
        .as_deref(),
        Some("money")
    );
    assert_eq!(
        count(
            &c,
            "SELECT has_table_privilege('evolve_rw_reader', 'accounts', 'SELECT')::int::int8"
        )
        .await,
        1
    );
    assert_eq!(
        scalar_text(&c, "SELECT pg_get_serial_sequence('accounts', 'id')")
            .await
            .as_deref(),
        Some("public.accounts_id_seq"),
        "the sequence moved with the column"
    );
    assert_eq!(
        scalar_text(&c, "SELECT format_type(seqtypid, NULL) FROM pg_sequence WHERE seqrelid = 'accounts_id_seq'::regclass").await.as_deref(),
        Some("bigint"),
        "and took its type"
    );
    assert_no_leftovers(&c).await;
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM evolve_rewrites WHERE phase = 'done'"
        )
        .await,
        1
    );
}

/// md5 of the rows (id, v, w), in key order.
async fn checksum(c: &Client, table: &str) -> String {
    scalar_text(
        c,
        &format!(
            "SELECT md5(string_agg(format('%s|%s|%s', id, v, w), ',' ORDER BY id)) FROM {table}"
        ),
    )
    .await
    .unwrap_or_default()
}

#[tokio::test]
async fn sigkill_during_copy_replay_and_swap_each_resume_to_exactly_the_right_data() {
    let db = evolve_test::fresh_db("rw_sigkill").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE k (id int PRIMARY KEY, v int, w text);
         INSERT INTO k SELECT i, i, 'w' || i FROM generate_series(1, 30000) i;
         CREATE VIEW k_view AS SELECT id, v FROM k;",
    )
    .await
    .unwrap();
    let oid0 = count(&c, "SELECT 'k'::regclass::oid::int8").await;
    let args = |batch: &'static str| {
        vec![
            "rewrite",
            "k",
            "--alter",
            "ALTER COLUMN v TYPE bigint",
            "--alter",
            "ADD COLUMN extra int DEFAULT 7",
            "--batch",
            batch,
            "--batch-time",
            "0",
            "--lock-timeout",
            "60s",
            "--format",
            "json",
        ]
    };
    let shadow = format!("_evolve_rw_{oid0}_new");
    let log = format!("_evolve_rw_{oid0}_log");

    // 1. Killed during the copy.
    let mut run = Background::start(&db.url, &args("500"));
    run.wait_for("5th batch", |v| v["type"] == "batch" && v["batch"] == 5);
    run.kill();
    let copied = count(
        &c,
        "SELECT rows_copied FROM evolve_rewrites WHERE table_name = 'public.k' AND phase = 'copy'",
    )
    .await;
    assert!((2500..30000).contains(&copied), "{copied}");
    assert_eq!(
        count(&c, &format!("SELECT count(*) FROM {shadow}")).await,
        copied,
        "the shadow holds what was recorded"
    );
    // Writes go on and are captured.
    c.batch_execute(
        "UPDATE k SET v = v + 1 WHERE id % 10 = 0;
         DELETE FROM k WHERE id % 97 = 0;
         INSERT INTO k SELECT i, i, 'new' FROM generate_series(30001, 30500) i;",
    )
    .await
    .unwrap();
    let expected = checksum(&c, "k").await;
    assert!(count(&c, &format!("SELECT count(*) FROM {log}")).await > 3000);

    // 2. Killed during the replay.
    let mut run = Background::start(&db.url, &args("100"));
    run.wait_for("a replay batch", |v| v["type"] == "replayed");
    run.kill();
    assert_eq!(
        count(&c, "SELECT 'k'::regclass::oid::int8").await,
        oid0,
        "not swapped"
    );
    assert_eq!(
        checksum(&c, "k").await,
        expected,
        "the original is untouched"
    );

    // 3. Killed during the swap, while it waits for the table's lock.
    let holder = connect(&db.url).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE k IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let mut run = Background::start(&db.url, &args("100"));
    run.wait_for("the swap", |v| v["type"] == "phase" && v["phase"] == "swap");
    let waiting = "SELECT count(*) FROM pg_locks WHERE relation = 'k'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted";
    while count(&c, waiting).await == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.kill();
    holder.batch_execute("COMMIT").await.unwrap();
    while count(
        &c,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'evolve rewrite'",
    )
    .await
        > 0
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        count(&c, "SELECT 'k'::regclass::oid::int8").await,
        oid0,
        "the swap rolled back"
    );
    assert_eq!(count(&c, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'k'::regclass AND tgname LIKE '\\_evolve%'").await, 2, "changes are still captured");
    c.batch_execute("UPDATE k SET w = 'late' WHERE id = 1")
        .await
        .unwrap();
    let expected = checksum(&c, "k").await;

    // 4. The next run finishes.
    let out = evolve(
        &db.url,
        &args("100").iter().map(|s| &**s).collect::<Vec<_>>(),
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_ne!(count(&c, "SELECT 'k'::regclass::oid::int8").await, oid0);
    assert_eq!(
        checksum(&c, "k").await,
        expected,
        "exactly the rows of the original"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM k WHERE extra = 7").await,
        count(&c, "SELECT count(*) FROM k").await
    );
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'k'::regclass AND attname = 'v'").await.as_deref(),
        Some("bigint")
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM k_view").await,
        count(&c, "SELECT count(*) FROM k").await
    );
    assert_no_leftovers(&c).await;
}

#[tokio::test]
async fn keep_old_then_revert_swaps_back_with_every_later_write() {
    let db = evolve_test::fresh_db("rw_revert").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE t (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v int);
         INSERT INTO t (v) SELECT i FROM generate_series(1, 1000) i;
         CREATE VIEW t_view AS SELECT id, v FROM t;",
    )
    .await
    .unwrap();
    let out = evolve(
        &db.url,
        &[
            "rewrite",
            "t",
            "--alter",
            "ALTER COLUMN id TYPE bigint",
            "--keep-old",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("rebuilt public.t_view"),
        "{}",
        text(&out.stdout)
    );
    // The identity goes on where it was.
    c.batch_execute("INSERT INTO t (v) VALUES (1001); UPDATE t SET v = -1 WHERE id = 5; DELETE FROM t WHERE id = 6")
        .await
        .unwrap();
    assert_eq!(count(&c, "SELECT max(id)::int8 FROM t").await, 1001);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_class WHERE relname LIKE '\\_evolve\\_rw\\_%\\_old'"
        )
        .await,
        1
    );
    // A second rewrite waits for the kept table to be dealt with.
    assert_refused(
        &evolve(
            &db.url,
            &["rewrite", "t", "--alter", "ALTER COLUMN v TYPE bigint"],
        ),
        &["kept the old table", "--revert"],
    );
    let expected = scalar_text(
        &c,
        "SELECT md5(string_agg(format('%s|%s', id, v), ',' ORDER BY id)) FROM t",
    )
    .await;
    let out = evolve(&db.url, &["rewrite", "t", "--revert"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 't'::regclass AND attname = 'id'").await.as_deref(),
        Some("integer")
    );
    assert_eq!(
        scalar_text(
            &c,
            "SELECT md5(string_agg(format('%s|%s', id, v), ',' ORDER BY id)) FROM t"
        )
        .await,
        expected,
        "the old table has every write made after the swap"
    );
    assert_eq!(count(&c, "SELECT count(*) FROM t_view").await, 1000);
    c.batch_execute("INSERT INTO t (v) VALUES (1002)")
        .await
        .unwrap();
    assert_eq!(
        count(&c, "SELECT max(id)::int8 FROM t").await,
        1002,
        "the identity went back too"
    );
    assert_no_leftovers(&c).await;
    assert_eq!(count(&c, "SELECT count(*) FROM evolve_rewrites").await, 0);
}

/// `--drop-old` keeps the new table of a `--keep-old` rewrite for good:
/// the capture stops, the old table and the log go, and a revert that a
/// column change blocks names it.
#[tokio::test]
async fn drop_old_keeps_the_new_table_and_stops_the_capture() {
    let db = evolve_test::fresh_db("rw_drop_old").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE k (id int PRIMARY KEY, v int);
         INSERT INTO k SELECT i, i FROM generate_series(1, 1000) i;",
    )
    .await
    .unwrap();
    let refused = evolve(&db.url, &["rewrite", "k", "--drop-old"]);
    assert_refused(&refused, &["no rewrite of it is recorded"]);
    let out = evolve(
        &db.url,
        &[
            "rewrite",
            "k",
            "--alter",
            "ALTER COLUMN id TYPE bigint",
            "--keep-old",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.batch_execute("INSERT INTO k VALUES (1001, 1); ALTER TABLE k ADD COLUMN extra text")
        .await
        .unwrap();
    let log_rows = || async {
        count(
            &c,
            "SELECT count(*) FROM pg_class WHERE relname LIKE '\\_evolve\\_rw\\_%\\_log'",
        )
        .await
    };
    assert_eq!(log_rows().await, 1);
    // The column added to the new table blocks a revert, which names the
    // way to keep the new table.
    assert_refused(
        &evolve(&db.url, &["rewrite", "k", "--revert"]),
        &["added extra", "evolve rewrite --drop-old public.k"],
    );
    // So does a second rewrite.
    assert_refused(
        &evolve(
            &db.url,
            &["rewrite", "k", "--alter", "ALTER COLUMN v TYPE bigint"],
        ),
        &["kept the old table", "evolve rewrite --drop-old public.k"],
    );
    let out = evolve(&db.url, &["rewrite", "k", "--drop-old"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("rewrite public.k: old table dropped"),
        "{}",
        text(&out.stdout)
    );
    assert_no_leftovers(&c).await;
    assert_eq!(count(&c, "SELECT count(*) FROM evolve_rewrites").await, 0);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'k'::regclass AND NOT tgisinternal"
        )
        .await,
        0,
        "no trigger records the table's changes any more"
    );
    assert_eq!(count(&c, "SELECT count(*) FROM k").await, 1001);
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'k'::regclass AND attname = 'id'").await.as_deref(),
        Some("bigint")
    );
    // And the table can be rewritten again.
    let out = evolve(
        &db.url,
        &["rewrite", "k", "--alter", "ALTER COLUMN v TYPE bigint"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_leftovers(&c).await;
}

#[tokio::test]
async fn bad_input_is_one_line_and_leaves_nothing_behind() {
    let db = evolve_test::fresh_db("rw_bad").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, w text);
         CREATE TABLE nokey (a int);
         INSERT INTO t VALUES (1, '1');",
    )
    .await
    .unwrap();
    let rw = |args: &[&str]| evolve(&db.url, &[&["rewrite"], args].concat());
    assert_refused(
        &rw(&["nope", "--alter", "ALTER COLUMN a TYPE bigint"]),
        &["table \"nope\" does not exist"],
    );
    assert_refused(
        &rw(&["nokey", "--alter", "ALTER COLUMN a TYPE bigint"]),
        &["public.nokey has no primary key"],
    );
    assert_refused(
        &rw(&["t", "--alter", "RENAME COLUMN w TO x"]),
        &["cannot be done by a rewrite"],
    );
    assert_refused(
        &rw(&["t", "--alter", "ALTER COLUMN w TYPE int; DROP TABLE t"]),
        &["is not one ALTER TABLE action"],
    );
    assert_refused(
        &rw(&["t", "--alter", "ALTER COLUMN nope TYPE bigint"]),
        &["cannot be applied", "column \"nope\""],
    );
    // text to int has no automatic cast: refused by the server on the
    // empty new shape, with its hint.
    assert_refused(
        &rw(&["t", "--alter", "ALTER COLUMN w TYPE int"]),
        &["cannot be applied", "cannot be cast automatically"],
    );
    // A USING the copy would drop.
    assert_refused(
        &rw(&["t", "--alter", "ALTER COLUMN w TYPE int USING w::int"]),
        &["converts with USING", "evolve backfill"],
    );
    assert_refused(&rw(&["t", "--revert"]), &["nothing to revert"]);
    assert_refused(&rw(&["t", "--abort"]), &["nothing to abort"]);
    // A type change of a column a generated column reads, which
    // PostgreSQL refuses: refused before any copy, naming both.
    c.batch_execute(
        "CREATE TABLE g (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a + 1) STORED)",
    )
    .await
    .unwrap();
    assert_refused(
        &rw(&["g", "--alter", "ALTER COLUMN a TYPE bigint"]),
        &[
            "cannot be applied",
            "column a, which the generated column b reads",
        ],
    );
    assert_no_leftovers(&c).await;
    // A swap that cannot recreate a view (the column it reads is dropped)
    // rolls back, says how to go on, and --abort removes the rest.
    c.batch_execute("CREATE VIEW t_w AS SELECT id, w FROM t")
        .await
        .unwrap();
    let failed = rw(&["t", "--alter", "DROP COLUMN w"]);
    assert_refused(
        &failed,
        &[
            "the swap failed",
            "view public.t_w cannot be recreated",
            "evolve rewrite public.t --abort",
        ],
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM t_w").await,
        1,
        "the table and its view are unchanged"
    );
    let aborted = rw(&["t", "--abort"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    assert_no_leftovers(&c).await;
    assert_eq!(count(&c, "SELECT count(*) FROM evolve_rewrites").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM t").await, 1);
}

/// A non-key `GENERATED ALWAYS AS IDENTITY` column: the replay updates rows
/// the copy already brought over, which PostgreSQL refuses for such a
/// column ("can only be updated to DEFAULT") unless the shadow's identity
/// is `BY DEFAULT` until the swap. After the swap (and after --revert) it
/// is `ALWAYS` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_always_column_is_replayed_and_stays_always() {
    let db = evolve_test::fresh_db("rw_identity").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE ledger (id int PRIMARY KEY, seq int GENERATED ALWAYS AS IDENTITY, v int NOT NULL);
         INSERT INTO ledger (id, v) SELECT i, 0 FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let updates = {
        let (url, stop, started) = (db.url.clone(), Arc::clone(&stop), Arc::clone(&started));
        tokio::spawn(async move {
            let c = connect(&url).await;
            started.notify_one();
            let (mut done, mut failures) = (0i64, Vec::new());
            let mut i = 0i64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                match c
                    .execute(
                        "UPDATE ledger SET v = v + 1 WHERE id = $1::int8",
                        &[&(i * 7 % 2000 + 1)],
                    )
                    .await
                {
                    Ok(n) => done += n as i64,
                    Err(e) => failures.push(evolve_pg::PgError::Query(e).to_string()),
                }
            }
            (done, failures)
        })
    };
    started.notified().await;
    let out = evolve(
        &db.url,
        &[
            "rewrite",
            "ledger",
            "--alter",
            "ALTER COLUMN v TYPE bigint",
            "--batch",
            "20",
            "--batch-time",
            "0",
            "--keep-old",
        ],
    );
    stop.store(true, Ordering::SeqCst);
    let (done, failures) = updates.await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(failures.is_empty(), "{failures:?}");
    assert!(done > 0, "the writer ran during the rewrite");
    assert_eq!(
        count(&c, "SELECT sum(v)::int8 FROM ledger").await,
        done,
        "every update made during the copy reached the new table"
    );
    let identity = async |c: &Client| {
        scalar_text(c, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = 'ledger'::regclass AND attname = 'seq'").await
    };
    assert_eq!(identity(&c).await.as_deref(), Some("a"));
    let seqs = count(&c, "SELECT count(DISTINCT seq) FROM ledger").await;
    assert_eq!(seqs, 2000, "each row kept its own identity value");
    // Writes after the swap go back to the old table on --revert, whose
    // identity column is ALWAYS too.
    c.batch_execute("UPDATE ledger SET v = v + 1000 WHERE id <= 10; INSERT INTO ledger (id, v) VALUES (2001, 5)")
        .await
        .unwrap();
    let out = evolve(&db.url, &["rewrite", "ledger", "--revert"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        count(&c, "SELECT sum(v)::int8 FROM ledger").await,
        done + 10_005
    );
    assert_eq!(identity(&c).await.as_deref(), Some("a"));
    assert_eq!(
        count(&c, "SELECT seq::int8 FROM ledger WHERE id = 2001").await,
        2001,
        "the identity went on where it was"
    );
    assert_no_leftovers(&c).await;
}

/// The change log records rows; a TRUNCATE cannot be recorded that way and
/// is refused, with the way out, while a rewrite has its triggers on the
/// table. Updates that leave the key alone log it once.
#[tokio::test]
async fn truncate_is_refused_while_a_rewrite_runs_and_updates_log_their_key_once() {
    let db = evolve_test::fresh_db("rw_truncate").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE tr (id int PRIMARY KEY, v int);
         INSERT INTO tr SELECT i, i FROM generate_series(1, 3000) i;",
    )
    .await
    .unwrap();
    let oid = count(&c, "SELECT 'tr'::regclass::oid::int8").await;
    let args = [
        "rewrite",
        "tr",
        "--alter",
        "ALTER COLUMN v TYPE bigint",
        "--batch",
        "100",
        "--batch-time",
        "0",
        "--format",
        "json",
    ];
    let mut run = Background::start(&db.url, &args);
    run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
    run.kill();
    let log = format!("_evolve_rw_{oid}_log");
    let logged = count(&c, &format!("SELECT count(*) FROM {log}")).await;
    c.batch_execute(
        "UPDATE tr SET v = v + 1 WHERE id <= 10; UPDATE tr SET id = id + 10000 WHERE id = 20",
    )
    .await
    .unwrap();
    assert_eq!(
        count(&c, &format!("SELECT count(*) FROM {log}")).await - logged,
        12,
        "ten updates of v log ten keys, a key update logs the old and the new"
    );
    let err = c.batch_execute("TRUNCATE tr").await.unwrap_err();
    let message = evolve_pg::PgError::Query(err).to_string();
    assert!(
        message.contains("TRUNCATE of tr is refused while evolve rewrite runs on it")
            && message.contains("evolve rewrite --abort"),
        "{message}"
    );
    assert_eq!(count(&c, "SELECT count(*) FROM tr").await, 3000);
    let out = evolve(&db.url, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(count(&c, "SELECT count(*) FROM tr").await, 3000);
    assert_eq!(
        count(&c, "SELECT sum(v)::int8 FROM tr").await,
        3000 * 3001 / 2 + 10
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM tr WHERE id = 10020").await,
        1
    );
    assert_no_leftovers(&c).await;
}
