//! `evolve rewrite` on tables and sessions that are not the plain case:
//! row security that applies to the role, partitions and inheritance,
//! writers whose session settings change how keys read as text, columns
//! added while a rewrite runs, publications with column lists and row
//! filters, NOT VALID constraints, and what `LIKE` leaves out (rules,
//! tablespaces, UNLOGGED, comments, statistics targets, identity sequence
//! names). Each compares rows and checksums before and after.

mod backfill_support;

use backfill_support::{
    Background, assert_no_leftovers, assert_refused, connect, count, events, evolve, text,
};
use tokio_postgres::Client;

async fn scalar_text(c: &Client, sql: &str) -> Option<String> {
    c.query_one(sql, &[]).await.expect(sql).get(0)
}

/// md5 of `table`'s rows as text, in key order `key`.
async fn checksum(c: &Client, table: &str, key: &str) -> String {
    scalar_text(
        c,
        &format!("SELECT md5(string_agg(t::text, ',' ORDER BY {key})) FROM {table} t"),
    )
    .await
    .unwrap_or_default()
}

/// The database's URL as role `role` (the test cluster trusts every
/// loopback login).
fn url_as(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

/// A table whose owner is subject to its policies (FORCE ROW LEVEL
/// SECURITY) would be copied through them: the rows they hide would be
/// gone after the swap. Refused before anything runs, naming the way out.
#[tokio::test]
async fn a_table_whose_policies_apply_to_the_role_is_refused_not_filtered() {
    let db = evolve_test::fresh_db("rw_rls").await;
    let c = connect(&db.url).await;
    let role = format!("evolve_rw_rls_{}", std::process::id());
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         GRANT CREATE ON SCHEMA public TO {role};
         SET ROLE {role};
         CREATE TABLE ten (id int PRIMARY KEY, t text);
         INSERT INTO ten SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END FROM generate_series(1, 1000) g;
         ALTER TABLE ten ENABLE ROW LEVEL SECURITY;
         ALTER TABLE ten FORCE ROW LEVEL SECURITY;
         CREATE POLICY only_a ON ten USING (t = 'a');
         RESET ROLE;"
    ))
    .await
    .unwrap();
    let before = checksum(&c, "ten", "id").await;
    let out = evolve(
        &url_as(&db.url, &role),
        &["rewrite", "ten", "--alter", "ALTER COLUMN id TYPE bigint"],
    );
    assert_refused(
        &out,
        &[
            "rewrite of public.ten: the row-level security policies of public.ten apply to role",
            "BYPASSRLS",
            "NO FORCE ROW LEVEL SECURITY",
        ],
    );
    assert_eq!(count(&c, "SELECT count(*) FROM ten").await, 1000);
    assert_eq!(checksum(&c, "ten", "id").await, before);
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'ten'::regclass AND attname = 'id'").await.as_deref(),
        Some("integer")
    );
    assert_no_leftovers(&c).await;
    // A role that bypasses row security (here the superuser) rewrites it
    // whole, policies and FORCE included. (The state table the role made
    // is refused to a superuser: it goes first.)
    c.batch_execute("DROP TABLE evolve_rewrites").await.unwrap();
    let out = evolve(
        &db.url,
        &["rewrite", "ten", "--alter", "ALTER COLUMN id TYPE bigint"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(checksum(&c, "ten", "id").await, before);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_class WHERE oid = 'ten'::regclass AND relforcerowsecurity"
        )
        .await,
        1
    );
    assert_no_leftovers(&c).await;
}

/// Partitioned tables, partitions and tables in an inheritance tree cannot
/// be swapped for one plain table: refused before anything runs, and
/// every row stays where it was.
#[tokio::test]
async fn partitions_and_inheritance_are_refused_and_left_whole() {
    let db = evolve_test::fresh_db("rw_parts").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE pt (id int, r int, v int, PRIMARY KEY (id, r)) PARTITION BY LIST (r);
         CREATE TABLE pt1 PARTITION OF pt FOR VALUES IN (1);
         CREATE TABLE pt2 PARTITION OF pt FOR VALUES IN (2);
         INSERT INTO pt SELECT g, 1 + g % 2, g FROM generate_series(1, 100) g;
         CREATE TABLE par (id int PRIMARY KEY, v int);
         CREATE TABLE kid () INHERITS (par);
         ALTER TABLE kid ADD PRIMARY KEY (id);
         INSERT INTO par SELECT g, g FROM generate_series(1, 10) g;
         INSERT INTO kid SELECT g, g FROM generate_series(11, 15) g;",
    )
    .await
    .unwrap();
    let rw = |table: &str| {
        evolve(
            &db.url,
            &["rewrite", table, "--alter", "ALTER COLUMN v TYPE bigint"],
        )
    };
    assert_refused(
        &rw("pt"),
        &[
            "rewrite of public.pt: it is a partitioned table",
            "plain ALTER TABLE",
        ],
    );
    assert_refused(
        &rw("pt1"),
        &[
            "rewrite of public.pt1: it is a partition of pt",
            "plain ALTER TABLE",
        ],
    );
    assert_refused(
        &rw("par"),
        &[
            "rewrite of public.par: tables inherit from it (kid)",
            "plain ALTER TABLE",
        ],
    );
    assert_refused(
        &rw("kid"),
        &[
            "rewrite of public.kid: it inherits from par",
            "plain ALTER TABLE",
        ],
    );
    assert_eq!(
        scalar_text(&c, "SELECT string_agg(relname || ':' || relkind::text || ':' || relispartition, ',' ORDER BY relname) FROM pg_class WHERE relname IN ('pt', 'pt1', 'pt2')").await.as_deref(),
        Some("pt:p:false,pt1:r:true,pt2:r:true")
    );
    assert_eq!(count(&c, "SELECT count(*) FROM pt").await, 100);
    assert_eq!(count(&c, "SELECT count(*) FROM par").await, 15);
    assert_eq!(count(&c, "SELECT count(*) FROM ONLY par").await, 10);
    assert_eq!(count(&c, "SELECT count(*) FROM evolve_rewrites").await, 0);
    assert_no_leftovers(&c).await;
}

/// Keys travel from the writer's capture trigger to evolve's replay, and
/// from one copy batch to the next, as text. A writer that switches to
/// `DateStyle = 'SQL, DMY'` and `extra_float_digits = 0` in the middle of
/// a rewrite, and an evolve session given `extra_float_digits = 0` by its
/// connection string, must not change which rows those keys name.
#[tokio::test]
async fn keys_read_back_the_same_whatever_the_sessions_date_style_and_float_digits() {
    let db = evolve_test::fresh_db("rw_keytext").await;
    let c = connect(&db.url).await;
    // Float keys one ulp apart: printed with 15 digits, dozens read as one.
    c.batch_execute(
        "CREATE TABLE daily (d date PRIMARY KEY, v int NOT NULL);
         INSERT INTO daily SELECT date '2026-01-01' + g, 0 FROM generate_series(0, 999) g;
         CREATE TABLE fk (k float8 PRIMARY KEY, v int NOT NULL);
         INSERT INTO fk SELECT 1 + g * 2.220446049250313e-16, g FROM generate_series(0, 999) g;",
    )
    .await
    .unwrap();
    let low_digits = format!(
        "{}{}options=-c%20extra_float_digits%3D0",
        db.url,
        if db.url.contains('?') { "&" } else { "?" }
    );
    // Batches of 37 end on keys that print rounded up: the next batch
    // would start past rows it never copied.
    for (table, url, batch) in [("daily", &db.url, "100"), ("fk", &low_digits, "37")] {
        let args = [
            "rewrite",
            table,
            "--alter",
            "ALTER COLUMN v TYPE bigint",
            "--batch",
            batch,
            "--batch-time",
            "0",
            "--format",
            "json",
        ];
        // Stopped during the copy: its trigger captures every write.
        let mut run = Background::start(url, &args);
        run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
        run.kill();
        let writer = connect(&db.url).await;
        writer
            .batch_execute(if table == "daily" {
                "SET DateStyle = 'SQL, DMY'; SET extra_float_digits = 0;
                 UPDATE daily SET v = 42 WHERE d IN ('2026-01-05', '2026-01-11', '2026-02-03');"
            } else {
                "SET DateStyle = 'SQL, DMY'; SET extra_float_digits = 0;
                 UPDATE fk SET v = -v WHERE v BETWEEN 10 AND 60;
                 DELETE FROM fk WHERE v BETWEEN 61 AND 70;
                 INSERT INTO fk VALUES (1.5, 7);"
            })
            .await
            .unwrap();
        let key = if table == "daily" { "d" } else { "k" };
        let expected = checksum(&c, table, key).await;
        let rows = count(&c, &format!("SELECT count(*) FROM {table}")).await;
        let out = evolve(url, &args);
        assert!(
            out.status.success(),
            "{table}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(
            count(&c, &format!("SELECT count(*) FROM {table}")).await,
            rows,
            "{table}: every row"
        );
        assert_eq!(
            checksum(&c, table, key).await,
            expected,
            "{table}: every write"
        );
    }
    assert_eq!(
        count(&c, "SELECT count(*) FROM daily WHERE v = 42").await,
        3
    );
    assert_eq!(count(&c, "SELECT count(*) FROM fk").await, 991);
    assert_no_leftovers(&c).await;
}

/// A column added to the table after the shadow was made (between a
/// killed run and the next, or while a run copies) would be dropped with
/// its data by the swap: refused, nothing swapped, and --abort then a new
/// run keep it.
#[tokio::test]
async fn a_column_added_while_a_rewrite_is_under_way_is_never_swapped_away() {
    let db = evolve_test::fresh_db("rw_added").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE dd (id int PRIMARY KEY, v int);
         INSERT INTO dd SELECT g, g FROM generate_series(1, 20000) g;",
    )
    .await
    .unwrap();
    let oid = count(&c, "SELECT 'dd'::regclass::oid::int8").await;
    let args = [
        "rewrite",
        "dd",
        "--alter",
        "ALTER COLUMN v TYPE bigint",
        "--batch",
        "500",
        "--batch-time",
        "0",
        "--format",
        "json",
    ];
    // 1. Between a killed run and the next.
    let mut run = Background::start(&db.url, &args);
    run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
    run.kill();
    c.batch_execute("ALTER TABLE dd ADD COLUMN extra text DEFAULT 'important'")
        .await
        .unwrap();
    let refused = evolve(&db.url, &args);
    assert_refused(
        &refused,
        &[
            "rewrite of public.dd: its columns changed (added extra)",
            "nothing was swapped",
            "evolve rewrite public.dd --abort",
        ],
    );
    assert_eq!(count(&c, "SELECT 'dd'::regclass::oid::int8").await, oid);
    let aborted = evolve(&db.url, &["rewrite", "dd", "--abort"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));

    // 2. While a run copies: found under the swap's lock.
    let mut run = Background::start(&db.url, &[&args[..], &["--nice", "1"]].concat());
    run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
    c.batch_execute("ALTER TABLE dd ADD COLUMN extra2 int DEFAULT 7")
        .await
        .unwrap();
    let (status, _, stderr) = run.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("its columns changed (added extra2)")
            && stderr.contains("evolve rewrite public.dd --abort"),
        "{stderr}"
    );
    assert_eq!(count(&c, "SELECT 'dd'::regclass::oid::int8").await, oid);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM dd WHERE extra = 'important' AND extra2 = 7"
        )
        .await,
        20000
    );
    let aborted = evolve(&db.url, &["rewrite", "dd", "--abort"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    assert_no_leftovers(&c).await;

    // 3. Run again from the start, it keeps both.
    let expected = checksum(&c, "dd", "id").await;
    let out = evolve(&db.url, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_ne!(count(&c, "SELECT 'dd'::regclass::oid::int8").await, oid);
    assert_eq!(checksum(&c, "dd", "id").await, expected);
    assert_eq!(
        scalar_text(&c, "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'dd'::regclass AND attnum > 0 AND NOT attisdropped").await.as_deref(),
        Some("id integer, v bigint, extra text, extra2 integer")
    );
    assert_no_leftovers(&c).await;
}

/// Indexes created on the table or dropped from it while a rewrite runs,
/// or between a killed run and the next, are built on the new table or
/// left off it: the swap neither loses a new index nor brings a dropped
/// one back.
#[tokio::test]
async fn indexes_created_or_dropped_while_a_rewrite_runs_are_carried_over() {
    let db = evolve_test::fresh_db("rw_indexes").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE ix (id int PRIMARY KEY, v int, w int, u int);
         CREATE INDEX ix_w ON ix (w);
         CREATE INDEX ix_u ON ix (u);
         INSERT INTO ix SELECT g, g, g % 100, g FROM generate_series(1, 20000) g;",
    )
    .await
    .unwrap();
    let indexes = async |c: &Client| {
        scalar_text(
            c,
            "SELECT string_agg(c.relname || ' ' || i.indisvalid || ' ' || pg_get_indexdef(i.indexrelid), '; ' ORDER BY c.relname)
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'ix'::regclass",
        )
        .await
        .unwrap_or_default()
    };
    let args = [
        "rewrite",
        "ix",
        "--alter",
        "ALTER COLUMN v TYPE bigint",
        "--batch",
        "500",
        "--batch-time",
        "0",
        "--format",
        "json",
    ];
    // A session that reads the table keeps the swap's lock waiting, so
    // the indexes change after the shadow's were built.
    let reader = connect(&db.url).await;
    let hold = async || {
        reader
            .batch_execute("BEGIN; LOCK TABLE ix IN ACCESS SHARE MODE")
            .await
            .unwrap();
    };
    // 1. Between a killed run and the next: one index created, one dropped.
    hold().await;
    let mut run = Background::start(&db.url, &[&args[..], &["--lock-timeout", "200ms"]].concat());
    run.wait_for("the swap", |v| v["type"] == "phase" && v["phase"] == "swap");
    run.kill();
    reader
        .batch_execute("CREATE INDEX ix_v ON ix (v); DROP INDEX ix_w; COMMIT;")
        .await
        .unwrap();
    let expected = checksum(&c, "ix", "id").await;
    let out = evolve(&db.url, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(checksum(&c, "ix", "id").await, expected);
    assert_eq!(
        indexes(&c).await,
        "ix_pkey true CREATE UNIQUE INDEX ix_pkey ON public.ix USING btree (id); \
         ix_u true CREATE INDEX ix_u ON public.ix USING btree (u); \
         ix_v true CREATE INDEX ix_v ON public.ix USING btree (v)"
    );
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'ix'::regclass AND attname = 'v'").await.as_deref(),
        Some("bigint")
    );
    assert_no_leftovers(&c).await;

    // 2. While the swap waits for its lock: it finds them under the lock,
    // rolls back, brings the new table's indexes up to date and swaps.
    let args = [
        "rewrite",
        "ix",
        "--alter",
        "ALTER COLUMN u TYPE bigint",
        "--lock-timeout",
        "200ms",
        "--lock-retries",
        "50",
        "--format",
        "json",
    ];
    hold().await;
    let mut run = Background::start(&db.url, &args);
    run.wait_for("the swap", |v| v["type"] == "phase" && v["phase"] == "swap");
    reader
        .batch_execute(
            "CREATE UNIQUE INDEX ix_w_id ON ix (w, id); DROP INDEX ix_v;
             UPDATE ix SET w = w + 1 WHERE id % 1000 = 0; COMMIT;",
        )
        .await
        .unwrap();
    let (status, lines, stderr) = run.finish();
    assert!(status.success(), "{stderr}");
    let swaps = events(&lines, "phase")
        .iter()
        .filter(|v| v["phase"] == "swap")
        .count();
    assert_eq!(
        swaps, 2,
        "the swap rolled back once for the indexes: {lines:?}"
    );
    let expected_rows = count(
        &c,
        "SELECT count(*) FROM ix WHERE id % 1000 = 0 AND w = id % 100 + 1",
    )
    .await;
    assert_eq!(expected_rows, 20);
    assert_eq!(
        indexes(&c).await,
        "ix_pkey true CREATE UNIQUE INDEX ix_pkey ON public.ix USING btree (id); \
         ix_u true CREATE INDEX ix_u ON public.ix USING btree (u); \
         ix_w_id true CREATE UNIQUE INDEX ix_w_id ON public.ix USING btree (w, id)"
    );
    assert_eq!(
        scalar_text(&c, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'ix'::regclass AND attname = 'u'").await.as_deref(),
        Some("bigint")
    );
    assert_no_leftovers(&c).await;
}

/// A publication that publishes some columns of the table, or some rows,
/// publishes the same of the new table.
#[tokio::test]
async fn publication_column_lists_and_row_filters_are_kept() {
    let db = evolve_test::fresh_db("rw_pub").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE pb (id int PRIMARY KEY, secret text, v int);
         INSERT INTO pb SELECT g, 's', g FROM generate_series(1, 100) g;
         CREATE PUBLICATION pb_cols FOR TABLE pb (id, v) WHERE (id > 10);
         CREATE PUBLICATION pb_all FOR TABLE pb;",
    )
    .await
    .unwrap();
    let published = "SELECT string_agg(pubname || ' ' || attnames::text || ' ' || coalesce(rowfilter, '-'), '; ' ORDER BY pubname) FROM pg_publication_tables WHERE tablename = 'pb'";
    let before = scalar_text(&c, published).await;
    assert_eq!(
        before.as_deref(),
        Some("pb_all {id,secret,v} -; pb_cols {id,v} (id > 10)")
    );
    let out = evolve(
        &db.url,
        &["rewrite", "pb", "--alter", "ALTER COLUMN v TYPE bigint"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(scalar_text(&c, published).await, before);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM pg_publication_rel WHERE prrelid = 'pb'::regclass"
        )
        .await,
        2
    );
    assert_no_leftovers(&c).await;
}

/// NOT VALID foreign keys and checks, with old rows that break them: the
/// copy keeps those rows, the new table has the constraints NOT VALID
/// (still enforced on new rows), and the rewrite finishes. A step after
/// the swap that fails names the command that finishes it, and --abort
/// (which has nothing left to drop) says the same.
#[tokio::test]
async fn not_valid_constraints_stay_not_valid_and_a_failure_after_the_swap_names_the_way_out() {
    let db = evolve_test::fresh_db("rw_notvalid").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE parent (id int PRIMARY KEY);
         INSERT INTO parent VALUES (1);
         CREATE TABLE child (id int PRIMARY KEY, pid int, v int);
         INSERT INTO child VALUES (1, 1, 5), (2, 2, -1);
         ALTER TABLE child ADD CONSTRAINT child_pid_fkey FOREIGN KEY (pid) REFERENCES parent NOT VALID;
         ALTER TABLE child ADD CONSTRAINT v_pos CHECK (v > 0) NOT VALID;
         COMMENT ON CONSTRAINT v_pos ON child IS 'positive from now on';",
    )
    .await
    .unwrap();
    let before = checksum(&c, "child", "id").await;
    let out = evolve(
        &db.url,
        &["rewrite", "child", "--alter", "ALTER COLUMN id TYPE bigint"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        checksum(&c, "child", "id").await,
        before,
        "the old rows stay"
    );
    assert_eq!(
        scalar_text(&c, "SELECT string_agg(conname || ' ' || convalidated, ', ' ORDER BY conname) FROM pg_constraint WHERE conrelid = 'child'::regclass AND contype IN ('c', 'f')").await.as_deref(),
        Some("child_pid_fkey false, v_pos false")
    );
    assert_eq!(
        scalar_text(&c, "SELECT obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conrelid = 'child'::regclass AND conname = 'v_pos'").await.as_deref(),
        Some("positive from now on")
    );
    // Still enforced on new rows.
    assert!(
        c.batch_execute("INSERT INTO child VALUES (3, 1, -5)")
            .await
            .is_err()
    );
    assert!(
        c.batch_execute("INSERT INTO child VALUES (3, 9, 5)")
            .await
            .is_err()
    );
    assert_no_leftovers(&c).await;

    // A materialized view whose refresh fails after the swap.
    c.batch_execute(
        "CREATE TABLE t2 (id int PRIMARY KEY, v int);
         INSERT INTO t2 SELECT g, g FROM generate_series(1, 10) g;
         CREATE MATERIALIZED VIEW t2_inverse AS SELECT id, 100 / v AS q FROM t2;
         UPDATE t2 SET v = 0 WHERE id = 3;",
    )
    .await
    .unwrap();
    let alter = ["rewrite", "t2", "--alter", "ALTER COLUMN v TYPE bigint"];
    let failed = evolve(&db.url, &alter);
    assert_refused(
        &failed,
        &[
            "the new table is in place, but after the swap",
            "division by zero",
            "finish with: evolve rewrite public.t2 --alter 'ALTER COLUMN v TYPE bigint'",
        ],
    );
    assert_refused(
        &evolve(&db.url, &["rewrite", "t2", "--abort"]),
        &[
            "has swapped already",
            "finish it with: evolve rewrite public.t2 --alter 'ALTER COLUMN v TYPE bigint'",
        ],
    );
    assert_refused(
        &evolve(
            &db.url,
            &["rewrite", "t2", "--alter", "ALTER COLUMN id TYPE bigint"],
        ),
        &["finish it with: evolve rewrite public.t2 --alter 'ALTER COLUMN v TYPE bigint'"],
    );
    c.batch_execute("UPDATE t2 SET v = 3 WHERE id = 3")
        .await
        .unwrap();
    let out = evolve(&db.url, &alter);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        count(&c, "SELECT sum(q)::int8 FROM t2_inverse").await,
        10 + 50 + 33 + 25 + 20 + 16 + 14 + 12 + 11 + 100
    );
    assert_no_leftovers(&c).await;
}

/// What `CREATE TABLE ... LIKE` leaves out is carried over by hand: rules,
/// the tablespace of the table and of its indexes, UNLOGGED, comments on
/// indexes and constraints, per-column statistics targets and options,
/// and the identity sequence's name.
#[tokio::test]
async fn rules_tablespaces_unlogged_comments_statistics_and_identity_names_are_kept() {
    let db = evolve_test::fresh_db("rw_like").await;
    let c = connect(&db.url).await;
    // The server makes the tablespace's directory, as its own OS user.
    let location = format!("/tmp/evolve_rw_ts_{}_{}", std::process::id(), db.name);
    let ts = format!("evolve_rw_ts_{}", std::process::id());
    c.batch_execute(&format!("COPY (SELECT 1) TO PROGRAM 'mkdir -p {location}'"))
        .await
        .unwrap();
    c.batch_execute(&format!("CREATE TABLESPACE {ts} LOCATION '{location}'"))
        .await
        .unwrap();
    c.batch_execute(&format!(
        "CREATE TABLE misc (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY USING INDEX TABLESPACE {ts}, v int) TABLESPACE {ts};
         INSERT INTO misc (v) SELECT g FROM generate_series(1, 500) g;
         CREATE INDEX misc_v ON misc (v) TABLESPACE {ts};
         COMMENT ON INDEX misc_v IS 'by v';
         COMMENT ON CONSTRAINT misc_pkey ON misc IS 'the key';
         ALTER TABLE misc ALTER COLUMN v SET STATISTICS 500;
         ALTER TABLE misc ALTER COLUMN v SET (n_distinct = 100);
         CREATE TABLE misc_log (id int);
         CREATE RULE log_insert AS ON INSERT TO misc DO ALSO INSERT INTO misc_log VALUES (new.id);
         COMMENT ON RULE log_insert ON misc IS 'audit';
         CREATE UNLOGGED TABLE ul (id int PRIMARY KEY, v int);
         INSERT INTO ul SELECT g, g FROM generate_series(1, 100) g;"
    ))
    .await
    .unwrap();
    let before = checksum(&c, "misc", "id").await;
    for table in ["misc", "ul"] {
        let out = evolve(
            &db.url,
            &["rewrite", table, "--alter", "ALTER COLUMN v TYPE bigint"],
        );
        assert!(out.status.success(), "{table}: {}", text(&out.stderr));
    }
    assert_eq!(checksum(&c, "misc", "id").await, before);
    let facts = async |sql: &str| scalar_text(&c, sql).await;
    assert_eq!(
        facts("SELECT string_agg(c.relname || ' in ' || coalesce(t.spcname, 'default'), ', ' ORDER BY c.relname) FROM pg_class c LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace WHERE c.relname IN ('misc', 'misc_pkey', 'misc_v')").await,
        Some(format!("misc in {ts}, misc_pkey in {ts}, misc_v in {ts}"))
    );
    assert_eq!(
        facts("SELECT relpersistence::text FROM pg_class WHERE oid = 'ul'::regclass")
            .await
            .as_deref(),
        Some("u")
    );
    assert_eq!(
        facts("SELECT obj_description('misc_v'::regclass, 'pg_class')")
            .await
            .as_deref(),
        Some("by v")
    );
    assert_eq!(
        facts("SELECT obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conrelid = 'misc'::regclass AND conname = 'misc_pkey'").await.as_deref(),
        Some("the key")
    );
    assert_eq!(
        facts("SELECT attstattarget || ' ' || array_to_string(attoptions, ',') FROM pg_attribute WHERE attrelid = 'misc'::regclass AND attname = 'v'").await.as_deref(),
        Some("500 n_distinct=100")
    );
    assert_eq!(
        facts("SELECT pg_get_serial_sequence('misc', 'id')")
            .await
            .as_deref(),
        Some("public.misc_id_seq")
    );
    assert_eq!(
        facts("SELECT obj_description(oid, 'pg_rewrite') FROM pg_rewrite WHERE ev_class = 'misc'::regclass AND rulename = 'log_insert'").await.as_deref(),
        Some("audit")
    );
    // The rule and the identity work on the new table.
    c.batch_execute("INSERT INTO misc (v) VALUES (501)")
        .await
        .unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM misc_log").await, 1);
    assert_eq!(count(&c, "SELECT count(*) FROM misc").await, 501);
    assert_no_leftovers(&c).await;
}

/// A rewrite with other --alter under way: the message names both ways
/// on, finishing it and giving it up. Giving up works whatever became of
/// the table, even when it was dropped.
#[tokio::test]
async fn another_rewrite_under_way_names_abort_and_abort_always_works() {
    let db = evolve_test::fresh_db("rw_other").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE o (id int PRIMARY KEY, v int);
         INSERT INTO o SELECT g, g FROM generate_series(1, 5000) g;",
    )
    .await
    .unwrap();
    let mut run = Background::start(
        &db.url,
        &[
            "rewrite",
            "o",
            "--alter",
            "ALTER COLUMN v TYPE bigint",
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--format",
            "json",
        ],
    );
    run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
    run.kill();
    assert_refused(
        &evolve(
            &db.url,
            &["rewrite", "o", "--alter", "ALTER COLUMN id TYPE bigint"],
        ),
        &[
            "a rewrite with other --alter (ALTER COLUMN v TYPE bigint) is under way",
            "finish it with: evolve rewrite public.o --alter 'ALTER COLUMN v TYPE bigint'",
            "give it up with: evolve rewrite public.o --abort",
        ],
    );
    let aborted = evolve(&db.url, &["rewrite", "o", "--abort"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    assert_no_leftovers(&c).await;

    let mut run = Background::start(
        &db.url,
        &[
            "rewrite",
            "o",
            "--alter",
            "ALTER COLUMN v TYPE bigint",
            "--batch",
            "100",
            "--batch-time",
            "0",
            "--format",
            "json",
        ],
    );
    run.wait_for("2nd batch", |v| v["type"] == "batch" && v["batch"] == 2);
    run.kill();
    c.batch_execute("DROP TABLE o").await.unwrap();
    let aborted = evolve(&db.url, &["rewrite", "o", "--abort"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    assert_no_leftovers(&c).await;
    assert_eq!(count(&c, "SELECT count(*) FROM evolve_rewrites").await, 0);
}

/// The state table made by one ordinary role and used by another that may
/// not write it: refused with the GRANT that lets it, not a bare
/// "permission denied".
#[tokio::test]
async fn a_state_table_of_another_role_names_the_grant() {
    let db = evolve_test::fresh_db("rw_state_role").await;
    let c = connect(&db.url).await;
    let (first, second) = (
        format!("evolve_rw_first_{}", std::process::id()),
        format!("evolve_rw_second_{}", std::process::id()),
    );
    c.batch_execute(&format!(
        "CREATE ROLE {first} LOGIN; CREATE ROLE {second} LOGIN;
         GRANT CREATE ON SCHEMA public TO {first}, {second};
         SET ROLE {first}; CREATE TABLE a (id int PRIMARY KEY, v int); INSERT INTO a VALUES (1, 1);
         SET ROLE {second}; CREATE TABLE b (id int PRIMARY KEY, v int); INSERT INTO b VALUES (1, 1);
         RESET ROLE;"
    ))
    .await
    .unwrap();
    let out = evolve(
        &url_as(&db.url, &first),
        &["rewrite", "a", "--alter", "ALTER COLUMN v TYPE bigint"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = evolve(
        &url_as(&db.url, &second),
        &["rewrite", "b", "--alter", "ALTER COLUMN v TYPE bigint"],
    );
    assert_refused(
        &out,
        &[
            &format!(
                "rewrite state table public.evolve_rewrites belongs to role {first}, and role {second} may not read and write it"
            ),
            "GRANT SELECT, INSERT, UPDATE, DELETE ON public.evolve_rewrites TO",
        ],
    );
    c.batch_execute(&format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON evolve_rewrites TO {second}"
    ))
    .await
    .unwrap();
    let out = evolve(
        &url_as(&db.url, &second),
        &["rewrite", "b", "--alter", "ALTER COLUMN v TYPE bigint"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}
