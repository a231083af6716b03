//! Where evolve once parted from Flyway 13 and now does what Flyway does
//! (or refuses with the way out): file names, script configuration files,
//! baseline migrations, COPY ... FROM STDIN, files of non-transactional
//! statements only, repair of future and repeatable migrations, validate of
//! pending migrations, targets, a second baseline, Flyway's lock key, the
//! guard of a non-empty schema without history, and the default schema on
//! the search_path. One throwaway cluster for this binary, a fresh database
//! per test.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evolve_migrate::{ApplyOptions, Event, MigrateError, Options, State};
use evolve_test::TestDb;
use tokio_postgres::Client;

struct Fixture {
    _db: TestDb,
    dir: PathBuf,
    opts: Options,
    client: Client,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

async fn fixture(hint: &str) -> Fixture {
    let db = evolve_test::fresh_db(hint).await;
    let dir = std::env::temp_dir().join(format!(
        "evolve-parity-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create migrations dir");
    let mut opts = Options::new(db.url.clone(), &dir);
    opts.lock_timeout = Duration::from_millis(500);
    opts.retry_delay = Duration::from_millis(50);
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    Fixture {
        _db: db,
        dir,
        opts,
        client,
    }
}

impl Fixture {
    fn write(&self, name: &str, body: &str) {
        std::fs::write(self.dir.join(name), body).expect("write migration");
    }

    fn remove(&self, name: &str) {
        std::fs::remove_file(self.dir.join(name)).expect("remove migration");
    }

    async fn apply_with(&self, apply: &ApplyOptions) -> Result<(usize, Vec<Event>), MigrateError> {
        let mut events = Vec::new();
        let r = evolve_migrate::apply(&self.opts, apply, &mut |e| events.push(e)).await?;
        Ok((r.applied, events))
    }

    async fn apply(&self) -> usize {
        self.apply_with(&ApplyOptions::default())
            .await
            .expect("apply")
            .0
    }

    async fn apply_err(&self, apply: &ApplyOptions) -> String {
        match self.apply_with(apply).await {
            Ok((n, _)) => panic!("apply should have failed, applied {n}"),
            Err(e) => e.to_string(),
        }
    }

    async fn count(&self, sql: &str) -> i64 {
        self.client
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get::<_, i64>(0)
    }

    /// `(type, script, success)` of every history row, in order.
    async fn history(&self) -> Vec<(String, String, bool)> {
        self.client
            .query(
                "SELECT type, script, success FROM evolve_schema_history ORDER BY installed_rank",
                &[],
            )
            .await
            .expect("history")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    async fn states(&self) -> Vec<(String, State)> {
        evolve_migrate::status(&self.opts)
            .await
            .expect("status")
            .migrations
            .into_iter()
            .map(|m| (m.script, m.state))
            .collect()
    }

    async fn repair(&self) -> usize {
        evolve_migrate::repair(&self.opts, &mut |_| {})
            .await
            .expect("repair")
            .changed
    }
}

fn s(script: &str, state: State) -> (String, State) {
    (script.to_string(), state)
}

fn row(kind: &str, script: &str) -> (String, String, bool) {
    (kind.to_string(), script.to_string(), true)
}

/// Flyway's names: the suffix in any letter case, a versioned name without
/// a description; an undo file is skipped (Flyway Community skips it too).
#[tokio::test]
async fn flyway_file_names() {
    let f = fixture("names").await;
    f.write("V1.sql", "CREATE TABLE a (i int);");
    f.write("V2__B.SQL", "CREATE TABLE b (i int);");
    f.write("U2__b.sql", "DROP TABLE b;");
    assert_eq!(f.apply().await, 2);
    assert_eq!(
        f.history().await,
        [row("SQL", "V1.sql"), row("SQL", "V2__B.SQL")]
    );
    let status = evolve_migrate::status(&f.opts).await.expect("status");
    assert_eq!(status.migrations[0].description, "");
    assert_eq!(status.migrations[1].description, "B");
    assert_eq!(status.migrations.len(), 2);
}

/// repair leaves a future migration (applied by newer files) alone, as
/// Flyway's does: the newer files still have it and never run it again.
#[tokio::test]
async fn repair_leaves_a_future_migration_alone() {
    let f = fixture("future").await;
    f.write("V1__a.sql", "CREATE TABLE a (i int);");
    f.write("V2__b.sql", "CREATE TABLE b (i int);");
    f.apply().await;
    f.remove("V2__b.sql");
    assert_eq!(
        f.states().await,
        [
            s("V1__a.sql", State::Applied),
            s("V2__b.sql", State::Future)
        ]
    );
    assert_eq!(f.repair().await, 0);
    f.write("V2__b.sql", "CREATE TABLE b (i int);");
    evolve_migrate::validate(&f.opts).await.expect("valid");
    assert_eq!(f.apply().await, 0);
    assert_eq!(
        f.history().await,
        [row("SQL", "V1__a.sql"), row("SQL", "V2__b.sql")]
    );
}

/// A repeatable migration repair marked deleted runs again when its file
/// comes back unchanged, as in Flyway (whose info says PENDING).
#[tokio::test]
async fn a_deleted_repeatable_that_comes_back_runs_again() {
    let f = fixture("rdeleted").await;
    f.write("R__v.sql", "CREATE OR REPLACE VIEW rv AS SELECT 1 AS x;");
    f.apply().await;
    f.remove("R__v.sql");
    assert_eq!(f.repair().await, 1);
    f.client.batch_execute("DROP VIEW rv").await.expect("drop");
    f.write("R__v.sql", "CREATE OR REPLACE VIEW rv AS SELECT 1 AS x;");
    assert_eq!(f.states().await, [s("R__v.sql", State::Pending)]);
    assert_eq!(f.apply().await, 1);
    assert_eq!(f.count("SELECT count(*) FROM rv").await, 1);
    assert_eq!(f.states().await, [s("R__v.sql", State::Applied)]);
}

/// A file whose every statement must run outside a transaction runs so
/// without `mixed`, as Flyway runs it; a file that mixes both kinds is
/// refused, naming the statement without upper-casing its names.
#[tokio::test]
async fn files_of_non_transactional_statements_only_run_outside_a_transaction() {
    let f = fixture("nontx").await;
    f.write("V1__a.sql", "CREATE TABLE a (i int);");
    f.write(
        "V2__idx.sql",
        "CREATE INDEX CONCURRENTLY a_i ON a (i);\nCREATE INDEX CONCURRENTLY a_i2 ON a (i);\n",
    );
    assert_eq!(f.apply().await, 2);
    assert_eq!(
        f.count("SELECT count(*) FROM pg_indexes WHERE tablename = 'a'")
            .await,
        2
    );
    f.write(
        "V3__mix.sql",
        "CREATE TABLE b (i int);\ncreate index concurrently B_i on b (i);\n",
    );
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert_eq!(
        err,
        "migration V3__mix.sql: line 2: CREATE INDEX CONCURRENTLY B_i cannot run inside a transaction, and the file also holds statements that run in one, a mix Flyway refuses too; move it to a file of its own, make '-- evolve:no-transaction' the first line, or set mixed = true (--mixed) to run such files outside a transaction"
    );
}

/// `COPY ... FROM STDIN` with its rows in the file loads them (Flyway
/// sends them through the COPY protocol), in a transaction or outside one;
/// bad rows fail the file as any statement does.
#[tokio::test]
async fn copy_from_stdin_loads_the_rows_of_the_file() {
    let f = fixture("copy").await;
    f.write(
        "V1__copy.sql",
        "CREATE TABLE t (i int, s text);\nCOPY t (i, s) FROM STDIN;\n1\tit's\n2\t/* not a comment\n\\.\nINSERT INTO t VALUES (3, 'after');\n",
    );
    f.write(
        "V2__copy.sql",
        "-- evolve:no-transaction\nCOPY t FROM STDIN WITH (FORMAT csv);\n4,csv\n\\.\n",
    );
    let (applied, events) = f
        .apply_with(&ApplyOptions {
            dry_run: true,
            ..ApplyOptions::default()
        })
        .await
        .expect("dry run");
    assert_eq!(applied, 2);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::WouldApply { statements: 3, .. })),
        "{events:?}"
    );
    assert_eq!(f.apply().await, 2);
    let rows: Vec<(i32, String)> = f
        .client
        .query("SELECT i, s FROM t ORDER BY i", &[])
        .await
        .expect("rows")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        [
            (1, "it's".to_string()),
            (2, "/* not a comment".to_string()),
            (3, "after".to_string()),
            (4, "csv".to_string())
        ]
    );
    f.write("V3__bad.sql", "COPY t FROM STDIN;\nnot a number\tx\n\\.\n");
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert!(
        err.starts_with("migration V3__bad.sql failed at line 1, column 1: ERROR 22P02")
            && err.contains("the transaction was rolled back"),
        "{err}"
    );
    assert_eq!(f.count("SELECT count(*) FROM t").await, 4);
    f.write("V3__bad.sql", "COPY t FROM STDIN;\n5\tx\n");
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert!(err.contains("has no line \"\\.\" after its data"), "{err}");
}

/// Flyway's script configuration file beside a migration:
/// `executeInTransaction=false` runs it outside a transaction (a new enum
/// value used in the same file), `placeholderReplacement=false` leaves its
/// placeholders; an encoding other than UTF-8 is refused, naming the file.
#[tokio::test]
async fn script_configuration_files_are_honoured() {
    let f = fixture("scriptconf").await;
    f.write(
        "V1__t.sql",
        "CREATE TYPE mood AS ENUM ('a');\nCREATE TABLE m (x mood, note text);\n",
    );
    f.write(
        "V2__add.sql",
        "ALTER TYPE mood ADD VALUE 'b';\nINSERT INTO m VALUES ('b', '${kept}');\n",
    );
    f.write(
        "V2__add.sql.conf",
        "executeInTransaction=false\nplaceholderReplacement=false\n",
    );
    let status = evolve_migrate::status(&f.opts).await.expect("status");
    assert!(status.migrations[1].no_transaction);
    assert_eq!(f.apply().await, 2);
    assert_eq!(
        f.count("SELECT count(*) FROM m WHERE x = 'b' AND note = '${kept}'")
            .await,
        1
    );
    f.write("V3__c.sql", "SELECT 1;");
    f.write("V3__c.sql.conf", "encoding=ISO-8859-1\n");
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert_eq!(
        err,
        "migration V3__c.sql.conf: encoding is \"ISO-8859-1\", and evolve reads migrations as UTF-8 only; convert V3__c.sql to UTF-8 and remove the key"
    );
    f.write("V3__c.sql.conf", "shouldExecute=false\n");
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert!(
        err.starts_with("migration V3__c.sql.conf: shouldExecute is not supported by evolve"),
        "{err}"
    );
    // executeInTransaction=true keeps a file in a transaction: a statement
    // PostgreSQL refuses in one is refused up front, naming the setting.
    f.write("V3__c.sql", "CREATE INDEX CONCURRENTLY m_x ON m (x);");
    f.write("V3__c.sql.conf", "executeInTransaction=true\n");
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert!(
        err.ends_with("cannot run inside a transaction, and V3__c.sql.conf says executeInTransaction=true; set it to false"),
        "{err}"
    );
}

/// Flyway's baseline migrations: on an empty database the highest `B`
/// file runs instead of the versioned files up to its version (recorded as
/// `SQL_BASELINE`); on a database with history they do not run.
#[tokio::test]
async fn baseline_migrations_run_on_an_empty_database_only() {
    let f = fixture("bfiles").await;
    f.write("V1__a.sql", "CREATE TABLE a (i int);");
    f.write("V2__b.sql", "CREATE TABLE b (i int);");
    f.write(
        "B2__base.sql",
        "CREATE TABLE a (i int);\nCREATE TABLE b (i int);",
    );
    f.write("V3__c.sql", "CREATE TABLE c (i int);");
    assert_eq!(
        f.states().await,
        [
            s("V1__a.sql", State::BelowBaseline),
            s("B2__base.sql", State::Pending),
            s("V3__c.sql", State::Pending),
        ]
    );
    assert_eq!(f.apply().await, 2);
    assert_eq!(
        f.history().await,
        [row("SQL_BASELINE", "B2__base.sql"), row("SQL", "V3__c.sql")]
    );
    assert_eq!(
        f.states().await,
        [
            s("V1__a.sql", State::BelowBaseline),
            s("B2__base.sql", State::Baseline),
            s("V3__c.sql", State::Applied),
        ]
    );
    evolve_migrate::validate(&f.opts).await.expect("valid");
    // An edited baseline migration is refused like any applied file.
    f.write(
        "B2__base.sql",
        "CREATE TABLE a (i bigint);\nCREATE TABLE b (i int);",
    );
    let err = evolve_migrate::validate(&f.opts).await.expect_err("edited");
    assert!(err.to_string().contains("B2__base.sql was edited"), "{err}");

    // With a history, the versioned files run and the B file does not.
    let g = fixture("bfiles_history").await;
    g.write("V1__a.sql", "CREATE TABLE a (i int);");
    assert_eq!(g.apply().await, 1);
    g.write("V2__b.sql", "CREATE TABLE b (i int);");
    g.write(
        "B2__base.sql",
        "CREATE TABLE a (i int);\nCREATE TABLE b (i int);",
    );
    assert_eq!(g.apply().await, 1);
    assert_eq!(
        g.history().await,
        [row("SQL", "V1__a.sql"), row("SQL", "V2__b.sql")]
    );
}

/// A target no migration has is refused before anything runs, as Flyway
/// refuses it.
#[tokio::test]
async fn a_target_no_migration_has_is_refused() {
    let f = fixture("target").await;
    for n in 1..=3 {
        f.write(
            &format!("V{n}__t{n}.sql"),
            &format!("CREATE TABLE t{n} (i int);"),
        );
    }
    let target = |v: &str| ApplyOptions {
        target: evolve_migrate::Target::parse(v).expect("target"),
        ..ApplyOptions::default()
    };
    let err = f.apply_err(&target("2.5")).await;
    assert_eq!(
        err,
        "no migration has target version 2.5 (no file, no history row), as Flyway requires of a target; give --target (or flyway.target) the version of a migration, 2.5? to go up to it all the same, or latest, current or next"
    );
    assert_eq!(
        f.count("SELECT count(*) FROM pg_class WHERE relname = 'evolve_schema_history'")
            .await,
        0
    );
    assert_eq!(f.apply_with(&target("2.0")).await.expect("apply").0, 2);
}

/// validate fails on pending migrations, as Flyway's does, unless
/// ignoreMigrationPatterns lets them be; a failed file evolve cannot
/// resume names the real way out.
#[tokio::test]
async fn validate_fails_on_pending_migrations_unless_ignored() {
    let mut f = fixture("validate").await;
    f.write("V1__a.sql", "SELECT 1;");
    f.apply().await;
    f.write("V2__b.sql", "SELECT 2;");
    f.write("R__r.sql", "SELECT 3;");
    let err = evolve_migrate::validate(&f.opts)
        .await
        .expect_err("pending")
        .to_string();
    assert_eq!(
        err,
        "migration V2__b.sql is pending (not applied yet); run 'evolve migrate apply', or set ignoreMigrationPatterns = *:pending to validate without applying it\nmigration R__r.sql is pending (not applied yet); run 'evolve migrate apply', or set ignoreMigrationPatterns = *:pending to validate without applying it"
    );
    f.opts.ignore_patterns.pending = evolve_migrate::ByType::ALL;
    let report = evolve_migrate::validate(&f.opts).await.expect("ignored");
    assert_eq!((report.applied, report.pending), (1, 2));

    // A failed row without evolve's progress record (Flyway left it).
    f.client
        .batch_execute(
            "INSERT INTO evolve_schema_history (installed_rank, version, description, type, script, checksum, installed_by, execution_time, success)
             VALUES (2, '2', 'b', 'SQL', 'V2__b.sql', 0, 'flyway', 0, false)",
        )
        .await
        .expect("failed row");
    let err = evolve_migrate::validate(&f.opts)
        .await
        .expect_err("failed")
        .to_string();
    assert_eq!(
        err,
        "migration V2__b.sql failed; evolve has no record of how far it got, so apply cannot resume it; make sure its effects are complete or undone, then run 'evolve migrate repair' to remove the failed row"
    );
}

/// baseline a second time at the same version and description does
/// nothing, as in Flyway; at another one it is refused.
#[tokio::test]
async fn baseline_twice_is_done_once() {
    let f = fixture("baseline2").await;
    let v = |s: &str| evolve_core::migration::Version::parse(s).expect("version");
    let baseline = |version: &str| {
        let version = v(version);
        let opts = f.opts.clone();
        async move { evolve_migrate::baseline(&opts, &version, None, &mut |_| {}).await }
    };
    assert_eq!(baseline("3").await.expect("first").changed, 1);
    assert_eq!(baseline("3").await.expect("again").changed, 0);
    let err = baseline("4").await.expect_err("another").to_string();
    assert!(
        err.starts_with(
            "history table public.evolve_schema_history: is already baselined at version 3"
        ),
        "{err}"
    );
    assert_eq!(
        f.history().await,
        [row("BASELINE", "<< Flyway Baseline >>")]
    );
}

/// evolve takes Flyway's advisory lock key on the history table too, so a
/// Flyway run in progress (which holds it, by default for the migration's
/// transaction) keeps evolve out.
#[tokio::test]
async fn flyways_lock_keeps_evolve_out() {
    let mut f = fixture("fwlock").await;
    f.write("V1__a.sql", "CREATE TABLE a (i int);");
    let key = evolve_migrate::flyway_lock_key(&evolve_pg::QualifiedName::new(
        "public",
        "evolve_schema_history",
    ));
    let flyway = evolve_pg::connect(&f.opts.database_url, "Redgate_Flyway")
        .await
        .expect("connect");
    flyway
        .batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({key})"))
        .await
        .expect("lock");
    f.opts.wait_for_lock = false;
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert!(
        err.starts_with(
            "another migration run holds the migration lock on public.evolve_schema_history"
        ) && err.contains("Redgate_Flyway"),
        "{err}"
    );
    flyway.batch_execute("COMMIT").await.expect("release");
    assert_eq!(f.apply().await, 1);
}

/// Flyway's guard: a schema that holds objects but no history table is
/// refused (baseline, or baselineOnMigrate, is the way out), and so is
/// evolve's default table when Flyway's history is beside it.
#[tokio::test]
async fn a_non_empty_schema_without_history_is_refused() {
    let f = fixture("nonempty").await;
    f.write("V1__a.sql", "CREATE TABLE a (i int);");
    f.client
        .batch_execute("CREATE TABLE existing (i int)")
        .await
        .expect("existing");
    let guarded = ApplyOptions {
        require_history_or_empty: true,
        ..ApplyOptions::default()
    };
    let err = f.apply_err(&guarded).await;
    assert!(
        err.starts_with("history table public.evolve_schema_history: does not exist, but schema public already holds tables, views, types or functions")
            && err.contains("run 'evolve migrate baseline --version V' first"),
        "{err}"
    );
    let dry = ApplyOptions {
        dry_run: true,
        ..guarded.clone()
    };
    assert_eq!(f.apply_err(&dry).await, err);
    // The way out: a baseline below every file.
    let zero = evolve_core::migration::Version::parse("0").expect("version");
    evolve_migrate::baseline(&f.opts, &zero, None, &mut |_| {})
        .await
        .expect("baseline");
    assert_eq!(f.apply_with(&guarded).await.expect("apply").0, 1);

    // Flyway's history beside evolve's absent default table.
    let g = fixture("beside").await;
    g.write("V1__a.sql", "CREATE TABLE a (i int);");
    let mut flyway = g.opts.clone();
    flyway.history_table = (None, "flyway_schema_history".into());
    evolve_migrate::apply(&flyway, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply as Flyway's table");
    let expected = "history table public.evolve_schema_history: does not exist, but Flyway's history public.flyway_schema_history does: this database is migrated by Flyway; pass --history-table flyway_schema_history (or run evolve where its flyway.conf or flyway.toml is) to continue that history";
    assert_eq!(g.apply_err(&ApplyOptions::default()).await, expected);
    let err = evolve_migrate::status(&g.opts).await.expect_err("status");
    assert_eq!(err.to_string(), expected);
    assert_eq!(g.count("SELECT count(*) FROM a").await, 0);

    // evolve's own state tables (here the refresh log) are not the user's
    // schema: it still counts as empty.
    let h = fixture("ownstate").await;
    h.write("V1__a.sql", "CREATE TABLE a (i int);");
    evolve_migrate::refresh_status(&h.opts.database_url)
        .await
        .expect("refresh status");
    assert_eq!(h.apply_with(&guarded).await.expect("apply").0, 1);
}

/// The schema `--history-table` names is Flyway's default schema: first on
/// the search_path of migrations, as `${flyway:defaultSchema}` says.
#[tokio::test]
async fn the_history_tables_schema_is_first_on_the_search_path() {
    let mut f = fixture("defschema").await;
    f.opts.history_table = (Some("app".into()), "flyway_schema_history".into());
    f.write(
        "V1__t.sql",
        "CREATE TABLE t (i int);\nCOMMENT ON TABLE t IS '${flyway:defaultSchema}';",
    );
    assert_eq!(f.apply().await, 1);
    let (schema, comment): (String, String) = f
        .client
        .query_one(
            "SELECT n.nspname::text, obj_description(c.oid)
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = 't'",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .expect("t");
    assert_eq!((schema.as_str(), comment.as_str()), ("app", "app"));
}

/// Messages: a no-transaction file failing at its first statement says
/// none ran; under group, nothing is said applied before the group fails.
#[tokio::test]
async fn messages_say_what_happened() {
    let f = fixture("messages").await;
    f.write("V1__a.sql", "CREATE TABLE a (i int);");
    f.write(
        "V2__idx.sql",
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY a1 ON a (nosuch);\nCREATE INDEX CONCURRENTLY a2 ON a (i);\n",
    );
    let err = f.apply_err(&ApplyOptions::default()).await;
    assert!(
        err.ends_with("this file runs outside a transaction: none of its 2 statements was applied; fix the cause and run 'evolve migrate apply' to resume at statement 1 (line 2)"),
        "{err}"
    );
    let status = evolve_migrate::status(&f.opts).await.expect("status");
    assert_eq!(
        status.migrations[1].note.as_deref(),
        Some("stopped after 0 of 2 statements; apply resumes it")
    );

    let g = fixture("group").await;
    g.write("V1__a.sql", "CREATE TABLE a (i int);");
    g.write("V2__b.sql", "INSERT INTO nosuch VALUES (1);");
    let mut events = Vec::new();
    let r = evolve_migrate::apply(
        &g.opts,
        &ApplyOptions {
            group: true,
            ..ApplyOptions::default()
        },
        &mut |e| events.push(e),
    )
    .await;
    let err = r.expect_err("group fails").to_string();
    assert!(
        err.contains("none of the pending migrations was applied"),
        "{err}"
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::Applied { .. })),
        "{events:?}"
    );
}
