//! `evolve migrate` against real PostgreSQL: one throwaway cluster for this
//! test binary, a fresh database per test.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evolve_core::migration::Version;
use evolve_migrate::{ApplyOptions, ApplyReport, Event, MigrateError, Options, State};
use evolve_test::TestDb;
use tokio_postgres::Client;

struct Fixture {
    db: TestDb,
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
        "evolve-migrate-test-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create migrations dir");
    let mut opts = Options::new(db.url.clone(), &dir);
    opts.lock_timeout = Duration::from_millis(200);
    opts.retry_delay = Duration::from_millis(50);
    let client = connect(&db.url, "evolve test").await;
    Fixture {
        db,
        dir,
        opts,
        client,
    }
}

async fn connect(url: &str, app: &str) -> Client {
    evolve_pg::connect(url, app).await.expect("connect")
}

impl Fixture {
    fn write(&self, name: &str, body: impl AsRef<[u8]>) {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, body).expect("write migration");
    }

    fn remove(&self, name: &str) {
        std::fs::remove_file(self.dir.join(name)).expect("remove migration");
    }

    async fn apply_with(
        &self,
        apply: &ApplyOptions,
    ) -> (Result<ApplyReport, MigrateError>, Vec<Event>) {
        let mut events = Vec::new();
        let r = evolve_migrate::apply(&self.opts, apply, &mut |e| events.push(e)).await;
        (r, events)
    }

    async fn apply(&self) -> ApplyReport {
        let (r, _) = self.apply_with(&ApplyOptions::default()).await;
        r.expect("apply")
    }

    async fn apply_err(&self) -> String {
        let (r, _) = self.apply_with(&ApplyOptions::default()).await;
        match r {
            Ok(report) => panic!("apply should have failed, applied {}", report.applied),
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

    async fn history_count(&self) -> i64 {
        self.count("SELECT count(*) FROM evolve_schema_history")
            .await
    }

    async fn table_exists(&self, name: &str) -> bool {
        self.client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
            .await
            .expect("to_regclass")
            .get(0)
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
}

fn s(script: &str, state: State) -> (String, State) {
    (script.to_string(), state)
}

#[tokio::test]
async fn applies_each_file_once_in_numeric_version_order() {
    let f = fixture("order").await;
    f.write("V1__log.sql", "CREATE TABLE log (n serial, name text);");
    // 1.9 < 1.10 < 2: numeric, not lexical.
    f.write("V1.10__b.sql", "INSERT INTO log (name) VALUES ('1.10');");
    f.write("V1_9__a.sql", "INSERT INTO log (name) VALUES ('1.9');");
    f.write("V2__c.sql", "INSERT INTO log (name) VALUES ('2');");
    f.write("sub/V10__d.sql", "INSERT INTO log (name) VALUES ('10');");
    f.write(
        "R__view.sql",
        "CREATE OR REPLACE VIEW log_v AS SELECT name FROM log;",
    );
    f.write("README.md", "not a migration");

    let report = f.apply().await;
    assert_eq!(report.applied, 6);
    assert_eq!(report.current_version.as_deref(), Some("10"));
    let names: Vec<String> = f
        .client
        .query("SELECT name FROM log ORDER BY n", &[])
        .await
        .expect("log")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(names, ["1.9", "1.10", "2", "10"]);

    let rows = f
        .client
        .query(
            "SELECT installed_rank, version, description, type, script, success FROM evolve_schema_history ORDER BY installed_rank",
            &[],
        )
        .await
        .expect("history");
    let got: Vec<(i32, Option<String>, String, String, String, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect();
    let row = |rank, v: Option<&str>, d: &str, script: &str| {
        (
            rank,
            v.map(str::to_string),
            d.to_string(),
            "SQL".to_string(),
            script.to_string(),
            true,
        )
    };
    assert_eq!(
        got,
        vec![
            row(1, Some("1"), "log", "V1__log.sql"),
            row(2, Some("1.9"), "a", "V1_9__a.sql"),
            row(3, Some("1.10"), "b", "V1.10__b.sql"),
            row(4, Some("2"), "c", "V2__c.sql"),
            row(5, Some("10"), "d", "sub/V10__d.sql"),
            row(6, None, "view", "R__view.sql"),
        ]
    );

    // A second run applies nothing and writes nothing.
    let again = f.apply().await;
    assert_eq!(again.applied, 0);
    assert_eq!(f.history_count().await, 6);
    assert_eq!(f.count("SELECT count(*) FROM log").await, 4);
}

#[tokio::test]
async fn a_failing_statement_leaves_no_trace() {
    let f = fixture("failing").await;
    f.write("V1__ok.sql", "CREATE TABLE ok (id int);");
    f.write(
        "V2__broken.sql",
        "CREATE TABLE half (id int);\nINSERT INTO ok VALUES (1);\n  INSERT INTO missing_table VALUES (1);\n",
    );
    f.write("V3__later.sql", "CREATE TABLE later (id int);");
    let err = f.apply_err().await;
    assert!(err.starts_with("migration V2__broken.sql failed at line 3, column 15: ERROR 42P01: relation \"missing_table\" does not exist"), "{err}");
    assert!(err.contains("nothing of this file was applied"), "{err}");
    assert!(f.table_exists("ok").await);
    assert!(
        !f.table_exists("half").await,
        "the failed file's first statement must be rolled back"
    );
    assert!(
        !f.table_exists("later").await,
        "the run stops at the failure"
    );
    assert_eq!(f.count("SELECT count(*) FROM ok").await, 0);
    assert_eq!(f.history_count().await, 1);
    assert_eq!(
        f.states().await,
        vec![
            s("V1__ok.sql", State::Applied),
            s("V2__broken.sql", State::Pending),
            s("V3__later.sql", State::Pending)
        ]
    );
}

#[tokio::test]
async fn syntax_errors_point_at_the_line_and_column_in_the_file() {
    let f = fixture("syntax").await;
    f.write(
        "V1__typo.sql",
        "-- a comment\nCREATE TABLE a (id int);\nSELECT 1,\n  2 FROM WHERE;\n",
    );
    let err = f.apply_err().await;
    assert!(err.starts_with("migration V1__typo.sql failed at line 4, column 10: ERROR 42601: syntax error at or near \"WHERE\""), "{err}");
    assert!(!f.table_exists("a").await);
    // The server quotes the rest of an unterminated string, newline and
    // all: the error stays one line.
    let f = fixture("syntax_quote").await;
    f.write("V1__quote.sql", "SELECT 1;\nSELECT 'abc;\n");
    let err = f.apply_err().await;
    assert_eq!(
        err.lines().next(),
        Some(
            "migration V1__quote.sql failed at line 2, column 8: ERROR 42601: unterminated quoted string at or near \"'abc;\\n\""
        ),
        "{err}"
    );
    assert!(err.lines().skip(1).all(|l| l.starts_with("  ")), "{err}");
}

#[tokio::test]
async fn an_edited_file_is_refused_until_repaired() {
    let f = fixture("edited").await;
    f.write("V1__a.sql", "CREATE TABLE a (id int);");
    f.apply().await;
    f.write("V1__a.sql", "CREATE TABLE a (id bigint);");
    f.write("V2__b.sql", "CREATE TABLE b (id int);");

    let err = evolve_migrate::validate(&f.opts)
        .await
        .expect_err("validate must fail")
        .to_string();
    assert!(
        err.contains("migration V1__a.sql was edited after it was applied (checksum"),
        "{err}"
    );
    assert!(err.contains("run 'evolve migrate repair'"), "{err}");
    let err = f.apply_err().await;
    assert!(err.contains("V1__a.sql was edited"), "{err}");
    assert!(
        !f.table_exists("b").await,
        "nothing may be applied while a file is edited"
    );

    let mut events = Vec::new();
    let repaired = evolve_migrate::repair(&f.opts, &mut |e| events.push(e))
        .await
        .expect("repair");
    assert_eq!(repaired.changed, 1);
    assert_eq!(f.apply().await.applied, 1);
    assert!(f.table_exists("b").await);
    evolve_migrate::validate(&f.opts)
        .await
        .expect("valid after repair");
}

#[tokio::test]
async fn a_missing_file_fails_validation_until_marked_deleted() {
    let f = fixture("missing").await;
    f.write("V1__a.sql", "CREATE TABLE a (id int);");
    f.write("V2__b.sql", "CREATE TABLE b (id int);");
    f.apply().await;
    f.remove("V1__a.sql");
    assert_eq!(
        f.states().await,
        vec![
            s("V1__a.sql", State::MissingFile),
            s("V2__b.sql", State::Applied)
        ]
    );
    let err = evolve_migrate::validate(&f.opts)
        .await
        .expect_err("missing")
        .to_string();
    assert!(
        err.contains("V1__a.sql was applied but its file is missing"),
        "{err}"
    );
    let mut events = Vec::new();
    assert_eq!(
        evolve_migrate::repair(&f.opts, &mut |e| events.push(e))
            .await
            .expect("repair")
            .changed,
        1
    );
    evolve_migrate::validate(&f.opts)
        .await
        .expect("valid after repair");
    assert_eq!(f.states().await[0], s("V1__a.sql", State::Deleted));
}

#[tokio::test]
async fn out_of_order_files_are_refused_unless_asked_for() {
    let f = fixture("ooo").await;
    f.write("V1__a.sql", "CREATE TABLE a (id int);");
    f.write("V3__c.sql", "CREATE TABLE c (id int);");
    f.apply().await;
    f.write("V2__b.sql", "CREATE TABLE b (id int);");
    assert_eq!(
        f.states().await[1],
        s("V2__b.sql", State::IgnoredOutOfOrder)
    );
    let err = evolve_migrate::validate(&f.opts)
        .await
        .expect_err("out of order")
        .to_string();
    assert!(
        err.contains("V2__b.sql is pending but sorts before applied version 3"),
        "{err}"
    );
    let err = f.apply_err().await;
    assert!(err.contains("--out-of-order"), "{err}");
    assert!(!f.table_exists("b").await);
    let (r, events) = f
        .apply_with(&ApplyOptions {
            out_of_order: true,
            ..Default::default()
        })
        .await;
    assert_eq!(r.expect("apply out of order").applied, 1);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Applied {
            out_of_order: true,
            ..
        }
    )));
    assert!(f.table_exists("b").await);
}

#[tokio::test]
async fn target_and_dry_run() {
    let f = fixture("target").await;
    f.write("V1__a.sql", "CREATE TABLE a (id int);");
    f.write("V2__b.sql", "CREATE TABLE b (id int);");
    f.write("V3__c.sql", "CREATE TABLE c (id int);");
    let (r, events) = f
        .apply_with(&ApplyOptions {
            dry_run: true,
            ..Default::default()
        })
        .await;
    assert_eq!(r.expect("dry run").applied, 3);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::WouldApply { .. }))
            .count(),
        3
    );
    assert!(!f.table_exists("a").await, "a dry run runs nothing");
    assert!(
        !f.table_exists("evolve_schema_history").await,
        "a dry run writes nothing"
    );

    let target = evolve_migrate::Target::Version(Version::parse("2").expect("version"));
    let (r, _) = f
        .apply_with(&ApplyOptions {
            target,
            ..Default::default()
        })
        .await;
    assert_eq!(r.expect("apply to target").applied, 2);
    assert!(f.table_exists("b").await);
    assert!(!f.table_exists("c").await);
}

#[tokio::test]
async fn repeatable_files_rerun_when_they_change() {
    let f = fixture("repeatable").await;
    f.write("V1__t.sql", "CREATE TABLE t (id int, name text);");
    f.write("R__v.sql", "CREATE OR REPLACE VIEW v AS SELECT id FROM t;");
    assert_eq!(f.apply().await.applied, 2);
    assert_eq!(f.apply().await.applied, 0);
    f.write(
        "R__v.sql",
        "CREATE OR REPLACE VIEW v AS SELECT id, name FROM t;",
    );
    assert_eq!(f.states().await[1], s("R__v.sql", State::Outdated));
    assert_eq!(f.apply().await.applied, 1);
    assert_eq!(
        f.count("SELECT count(*) FROM information_schema.columns WHERE table_name = 'v'")
            .await,
        2
    );
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history WHERE version IS NULL")
            .await,
        2
    );
    evolve_migrate::validate(&f.opts).await.expect("valid");
}

#[tokio::test]
async fn session_settings_do_not_leak_between_files() {
    let f = fixture("settings").await;
    f.write(
        "V1__a.sql",
        "CREATE SCHEMA other;\nSET search_path = other;\nCREATE TABLE in_other (id int);",
    );
    f.write("V2__b.sql", "CREATE TABLE in_public (id int);");
    f.apply().await;
    assert!(f.table_exists("other.in_other").await);
    assert!(f.table_exists("public.in_public").await);
}

/// A file checksummed the way Flyway checksums it, with CRLF line endings
/// and a BOM, and a history table written the way Flyway writes it: evolve
/// continues it without re-baselining.
#[tokio::test]
async fn adopts_a_flyway_history_table() {
    let f = fixture("flyway").await;
    // Flyway's value for this file, computed by its algorithm (CRC32 over
    // the lines without terminators, BOM stripped) in Java.
    let v1 = "\u{feff}CREATE TABLE t (id int);\r\n\r\nINSERT INTO t VALUES (1);\r\n";
    let flyway_checksum = evolve_core::migration::flyway_checksum(v1.as_bytes()).expect("utf-8");
    assert_eq!(flyway_checksum, FLYWAY_CRLF_BOM_CHECKSUM);
    f.write("V1__create_t.sql", v1);
    f.write("V2__more.sql", "INSERT INTO t VALUES (2);\n");
    f.client
        .batch_execute(&format!(
            r#"CREATE TABLE "public"."flyway_schema_history" (
                "installed_rank" INT NOT NULL, "version" VARCHAR(50), "description" VARCHAR(200) NOT NULL,
                "type" VARCHAR(20) NOT NULL, "script" VARCHAR(1000) NOT NULL, "checksum" INT,
                "installed_by" VARCHAR(100) NOT NULL, "installed_on" TIMESTAMP NOT NULL DEFAULT now(),
                "execution_time" INT NOT NULL, "success" BOOLEAN NOT NULL);
            ALTER TABLE "public"."flyway_schema_history" ADD CONSTRAINT "flyway_schema_history_pk" PRIMARY KEY ("installed_rank");
            CREATE TABLE t (id int); INSERT INTO t VALUES (1);
            INSERT INTO flyway_schema_history VALUES
              (1, '1', 'create t', 'SQL', 'V1__create_t.sql', {FLYWAY_CRLF_BOM_CHECKSUM}, 'flyway', now(), 12, true);"#
        ))
        .await
        .expect("flyway history");
    let mut opts = f.opts.clone();
    opts.history_table = (None, "flyway_schema_history".into());
    let status = evolve_migrate::status(&opts).await.expect("status");
    let states: Vec<_> = status
        .migrations
        .iter()
        .map(|m| (m.script.clone(), m.state))
        .collect();
    assert_eq!(
        states,
        vec![
            s("V1__create_t.sql", State::Applied),
            s("V2__more.sql", State::Pending)
        ]
    );
    let r = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    assert_eq!(r.applied, 1);
    assert_eq!(f.count("SELECT count(*) FROM t").await, 2);
    assert_eq!(
        f.count("SELECT max(installed_rank)::int8 FROM flyway_schema_history")
            .await,
        2
    );
    assert!(!f.table_exists("evolve_schema_history").await);
}

/// Flyway's checksum of
/// `"\u{feff}CREATE TABLE t (id int);\r\n\r\nINSERT INTO t VALUES (1);\r\n"`.
const FLYWAY_CRLF_BOM_CHECKSUM: i32 = 169_406_234;

#[tokio::test]
async fn lock_timeouts_are_retried_and_name_the_blocker() {
    let f = fixture("lockretry").await;
    f.write("V1__t.sql", "CREATE TABLE t (id int);");
    f.apply().await;
    f.write("V2__alter.sql", "ALTER TABLE t ADD COLUMN name text;");

    let blocker = connect(&f.db.url, "nightly report").await;
    let blocker_pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    blocker
        .batch_execute("BEGIN; SELECT count(*) FROM t")
        .await
        .expect("blocker takes ACCESS SHARE");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        blocker.batch_execute("COMMIT").await.expect("release");
    });
    let (r, events) = f.apply_with(&ApplyOptions::default()).await;
    release.await.expect("release task");
    let report = r.expect("applied after retries");
    assert_eq!(report.applied, 1);
    let retries: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::LockRetry {
                script,
                line,
                blockers,
                ..
            } => Some((script.clone(), *line, blockers.clone())),
            _ => None,
        })
        .collect();
    assert!(
        !retries.is_empty(),
        "expected at least one retry, got {events:?}"
    );
    for (script, line, blockers) in &retries {
        assert_eq!(script, "V2__alter.sql");
        assert_eq!(*line, 1);
        assert_eq!(blockers.len(), 1, "{blockers:?}");
        assert_eq!(blockers[0].pid, blocker_pid);
        assert_eq!(blockers[0].application_name, "nightly report");
        assert_eq!(blockers[0].state, "idle in transaction");
        assert_eq!(blockers[0].query, "BEGIN; SELECT count(*) FROM t");
    }
    let attempts = events.iter().find_map(|e| match e {
        Event::Applied { attempts, .. } if e_script(e) == "V2__alter.sql" => Some(*attempts),
        _ => None,
    });
    assert_eq!(attempts, Some(retries.len() as u32 + 1));
    assert_eq!(
        f.count("SELECT count(*) FROM information_schema.columns WHERE table_name = 't'")
            .await,
        2
    );
}

fn e_script(e: &Event) -> &str {
    match e {
        Event::Applied { script, .. } => script,
        _ => "",
    }
}

#[tokio::test]
async fn lock_timeouts_give_up_after_the_retries_and_apply_nothing() {
    let mut f = fixture("lockgiveup").await;
    f.opts.lock_retries = 2;
    f.write("V1__t.sql", "CREATE TABLE t (id int);");
    f.apply().await;
    f.write(
        "V2__alter.sql",
        "CREATE TABLE u (id int);\nALTER TABLE t ADD COLUMN name text;",
    );
    let blocker = connect(&f.db.url, "stuck job").await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE t IN ACCESS SHARE MODE")
        .await
        .expect("lock");
    let (r, events) = f.apply_with(&ApplyOptions::default()).await;
    let err = r.expect_err("must give up").to_string();
    assert!(err.starts_with("migration V2__alter.sql could not take its locks within 200 ms after 3 attempts (line 2); blocked by pid "), "{err}");
    assert!(
        err.contains("(stuck job, idle in transaction): BEGIN; LOCK TABLE t IN ACCESS SHARE MODE"),
        "{err}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::LockRetry { .. }))
            .count(),
        2
    );
    assert!(!f.table_exists("u").await);
    assert_eq!(f.history_count().await, 1);
    blocker.batch_execute("ROLLBACK").await.expect("rollback");
}

#[tokio::test]
async fn concurrent_runs_apply_each_migration_exactly_once() {
    let f = fixture("concurrent").await;
    f.write(
        "V1__log.sql",
        "CREATE TABLE log (version text);\nSELECT pg_sleep(0.5);",
    );
    for i in 2..=20 {
        f.write(
            &format!("V{i}__step.sql"),
            format!("INSERT INTO log VALUES ('{i}');"),
        );
    }
    let (a, b) = tokio::join!(
        async {
            let mut events = Vec::new();
            let r =
                evolve_migrate::apply(&f.opts, &ApplyOptions::default(), &mut |e| events.push(e))
                    .await;
            (r, events)
        },
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut events = Vec::new();
            let r =
                evolve_migrate::apply(&f.opts, &ApplyOptions::default(), &mut |e| events.push(e))
                    .await;
            (r, events)
        }
    );
    let (ra, ea) = a;
    let (rb, eb) = b;
    let (ra, rb) = (ra.expect("first run"), rb.expect("second run"));
    assert_eq!(
        ra.applied + rb.applied,
        20,
        "each migration applied by exactly one run"
    );
    assert_eq!(ra.applied, 20);
    assert!(eb.iter().any(|e| matches!(e, Event::LockWait { holder: Some(h), .. } if h.application_name == "evolve migrate (lock)")), "{eb:?}");
    assert!(!ea.iter().any(|e| matches!(e, Event::LockWait { .. })));
    assert_eq!(f.count("SELECT count(*) FROM log").await, 19);
    assert_eq!(f.count("SELECT count(DISTINCT version) FROM log").await, 19);
    assert_eq!(f.history_count().await, 20);
}

#[tokio::test]
async fn no_wait_fails_fast_naming_the_holder() {
    let mut f = fixture("nowait").await;
    f.opts.wait_for_lock = false;
    f.write("V1__t.sql", "CREATE TABLE t (id int);");
    let holder = connect(&f.db.url, "deploy 42").await;
    let key = evolve_migrate::lock_key(&evolve_pg::QualifiedName::new(
        "public",
        "evolve_schema_history",
    ));
    holder
        .query_one("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .expect("lock");
    let err = f.apply_err().await;
    assert!(
        err.starts_with(
            "another migration run holds the migration lock on public.evolve_schema_history (pid "
        ),
        "{err}"
    );
    assert!(err.contains("deploy 42"), "{err}");
    assert!(!f.table_exists("t").await);
}

#[tokio::test]
async fn no_transaction_files_resume_and_drop_the_invalid_index_they_left() {
    let f = fixture("notx").await;
    f.write(
        "V1__t.sql",
        "CREATE TABLE t (id int, email text);\nINSERT INTO t VALUES (1, 'a'), (2, 'a');",
    );
    f.write(
        "V2__unique_email.sql",
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY t_id_idx ON t (id);\nCREATE UNIQUE INDEX CONCURRENTLY t_email_key ON t (email);\nCREATE INDEX CONCURRENTLY t_both_idx ON t (id, email);\n",
    );
    let err = f.apply_err().await;
    assert!(err.starts_with("migration V2__unique_email.sql failed at line 3, column 1: ERROR 23505: could not create unique index \"t_email_key\""), "{err}");
    assert!(
        err.contains("statement 1 of 3 is applied and recorded"),
        "{err}"
    );
    let status = evolve_migrate::status(&f.opts).await.expect("status");
    let v2 = &status.migrations[1];
    assert_eq!((v2.state, v2.statements_done), (State::Failed, Some(1)));
    assert!(evolve_migrate::validate(&f.opts).await.is_err());
    let invalid = "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 't_email_key' AND NOT i.indisvalid";
    assert_eq!(
        f.count(invalid).await,
        1,
        "the failed build leaves an INVALID index"
    );

    f.client
        .batch_execute("UPDATE t SET email = 'b' WHERE id = 2")
        .await
        .expect("fix data");
    let (r, events) = f.apply_with(&ApplyOptions::default()).await;
    assert_eq!(r.expect("resume").applied, 1);
    assert!(events.iter().any(|e| matches!(e, Event::InvalidIndexDropped { index, .. } if index == "public.t_email_key")), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Applied {
                resumed_at_statement: Some(2),
                ..
            }
        )),
        "{events:?}"
    );
    assert_eq!(f.count(invalid).await, 0);
    assert_eq!(
        f.count("SELECT count(*) FROM pg_indexes WHERE tablename = 't'")
            .await,
        3
    );
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history WHERE version = '2' AND success")
            .await,
        1
    );
    assert_eq!(f.history_count().await, 2);
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history_progress")
            .await,
        0
    );
    evolve_migrate::validate(&f.opts).await.expect("valid");
}

#[tokio::test]
async fn bad_files_are_refused_before_anything_runs() {
    #[track_caller]
    fn expect(err: String, fragments: &[&str]) {
        for frag in fragments {
            assert!(err.contains(frag), "{err:?} should contain {frag:?}");
        }
        assert!(!err.contains("panicked"));
    }
    let cases: &[(&str, &[u8], &[&str])] = &[
        (
            "V2__latin1.sql",
            b"INSERT INTO t VALUES ('caf\xe9');",
            &["V2__latin1.sql", "UTF-8"],
        ),
        (
            "V2__directive.sql",
            b"-- evolve:no-transactoin\nSELECT 1;",
            &["V2__directive.sql", "no-transactoin"],
        ),
        (
            "V2__commit.sql",
            b"INSERT INTO t VALUES (1);\nCOMMIT;",
            &[
                "V2__commit.sql",
                "line 2",
                "COMMIT",
                "evolve:no-transaction",
            ],
        ),
        // A statement that cannot run in a transaction beside one that
        // runs in it (a file of the first kind only runs outside one).
        (
            "V2__cic.sql",
            b"INSERT INTO t VALUES (1);\nCREATE INDEX CONCURRENTLY i ON t (id);",
            &[
                "V2__cic.sql",
                "line 2",
                "cannot run inside a transaction",
                "-- evolve:no-transaction",
            ],
        ),
        ("V2_oops.sql", b"SELECT 1;", &["V2_oops.sql", "__"]),
        (
            "V2__comment.sql",
            b"CREATE TABLE important (id int);\n/* forgot to close\nCREATE TABLE important2 (id int);\n",
            &["V2__comment.sql", "line 2, column 1", "never closed"],
        ),
    ];
    for (name, body, fragments) in cases {
        let f = fixture("badfile").await;
        f.write("V1__t.sql", "CREATE TABLE t (id int);");
        f.write(name, body);
        let err = f.apply_err().await;
        expect(err, fragments);
        assert!(!f.table_exists("t").await, "{name}: nothing may run");
        assert!(
            !f.table_exists("evolve_schema_history").await,
            "{name}: nothing may be created"
        );
    }
    let f = fixture("dupversion").await;
    f.write("V1__a.sql", "CREATE TABLE a (id int);");
    f.write("V1.0__b.sql", "CREATE TABLE b (id int);");
    let err = f.apply_err().await;
    expect(err, &["V1.0__b.sql", "V1__a.sql", "version"]);
    assert!(!f.table_exists("a").await);
}

#[tokio::test]
async fn file_names_are_data_never_sql() {
    let f = fixture("names").await;
    f.write("V1__t.sql", "CREATE TABLE t (id int);");
    f.write("V2__x'; drop table t; --.sql", "SELECT 1;");
    f.apply().await;
    assert!(f.table_exists("t").await);
    let d: String = f
        .client
        .query_one(
            "SELECT description FROM evolve_schema_history WHERE version = '2'",
            &[],
        )
        .await
        .expect("row")
        .get(0);
    assert_eq!(d, "x'; drop table t; --");
}

#[tokio::test]
async fn baseline_marks_an_existing_database() {
    let f = fixture("baseline").await;
    f.client
        .batch_execute("CREATE TABLE legacy (id int)")
        .await
        .expect("legacy");
    f.write("V1__legacy.sql", "CREATE TABLE legacy (id int);");
    f.write(
        "V2__legacy_more.sql",
        "ALTER TABLE legacy ADD COLUMN x int;",
    );
    f.write("V3__new.sql", "CREATE TABLE fresh (id int);");
    let mut events = Vec::new();
    evolve_migrate::baseline(&f.opts, &Version::parse("2").expect("v"), None, &mut |e| {
        events.push(e)
    })
    .await
    .expect("baseline");
    assert_eq!(
        f.states().await,
        vec![
            s("V1__legacy.sql", State::BelowBaseline),
            s("<< Flyway Baseline >>", State::Baseline),
            s("V3__new.sql", State::Pending)
        ]
    );
    assert_eq!(f.apply().await.applied, 1);
    assert!(f.table_exists("fresh").await);
    let again =
        evolve_migrate::baseline(&f.opts, &Version::parse("5").expect("v"), None, &mut |_| {})
            .await;
    assert!(
        again
            .expect_err("second baseline")
            .to_string()
            .contains("cannot be baselined")
    );
}

#[tokio::test]
async fn a_history_table_of_the_wrong_shape_is_refused() {
    let f = fixture("shape").await;
    f.client
        .batch_execute("CREATE TABLE evolve_schema_history (id int)")
        .await
        .expect("table");
    f.write("V1__t.sql", "CREATE TABLE t (id int);");
    let err = f.apply_err().await;
    assert_eq!(
        err,
        "history table public.evolve_schema_history has the wrong shape: column installed_rank is missing; it is not an evolve or Flyway history table, choose another with --history-table"
    );
    assert!(!f.table_exists("t").await);
}

#[tokio::test]
async fn a_database_that_does_not_connect_is_one_clear_line_without_the_password() {
    // An empty directory of its own: the migrations directory is read
    // (recursively) before connecting, and the shared temp directory holds
    // other tests' clusters, which come and go.
    let dir = std::env::temp_dir().join(format!("evolve-noconnect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("migrations dir");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let opts = Options::new(
        format!("postgres://app:hunter2@127.0.0.1:{port}/shop"),
        dir.clone(),
    );
    let err = evolve_migrate::status(&opts)
        .await
        .expect_err("no server")
        .to_string();
    let _ = std::fs::remove_dir(&dir);
    assert!(
        err.starts_with(&format!("could not connect to app@127.0.0.1:{port}/shop: ")),
        "{err}"
    );
    assert!(err.contains("--database-url"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[tokio::test]
async fn repair_removes_a_failed_row_so_the_file_runs_from_the_start() {
    let f = fixture("repairfailed").await;
    f.write(
        "V1__t.sql",
        "CREATE TABLE t (id int);\nINSERT INTO t VALUES (1), (1);",
    );
    f.write(
        "V2__idx.sql",
        "-- evolve:no-transaction\nCREATE TABLE IF NOT EXISTS side (id int);\nCREATE UNIQUE INDEX CONCURRENTLY t_id_key ON t (id);\n",
    );
    let err = f.apply_err().await;
    assert!(
        err.contains("could not create unique index \"t_id_key\""),
        "{err}"
    );
    assert!(err.contains("detail: Key (id)=(1) is duplicated."), "{err}");
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history WHERE NOT success")
            .await,
        1
    );
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history_progress")
            .await,
        1
    );

    let mut events = Vec::new();
    let r = evolve_migrate::repair(&f.opts, &mut |e| events.push(e))
        .await
        .expect("repair");
    assert_eq!(r.changed, 1);
    assert!(matches!(
        events.as_slice(),
        [Event::Repaired {
            action: evolve_migrate::RepairAction::RemovedFailedRow,
            ..
        }]
    ));
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history").await,
        1
    );
    assert_eq!(
        f.count("SELECT count(*) FROM evolve_schema_history_progress")
            .await,
        0
    );
    assert_eq!(f.states().await[1], s("V2__idx.sql", State::Pending));

    f.client
        .batch_execute("DELETE FROM t WHERE ctid = (SELECT max(ctid) FROM t)")
        .await
        .expect("dedupe");
    let (r, events) = f.apply_with(&ApplyOptions::default()).await;
    assert_eq!(r.expect("apply from the start").applied, 1);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Applied {
            resumed_at_statement: None,
            attempts: 1,
            ..
        }
    )));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::InvalidIndexDropped { .. }))
    );
    evolve_migrate::validate(&f.opts).await.expect("valid");
}

#[tokio::test]
async fn a_schema_qualified_history_table_is_created_and_used() {
    let mut f = fixture("histschema").await;
    f.opts.history_table = (Some("Ops Team".into()), "Deploys".into());
    f.write("V1__t.sql", "CREATE TABLE t (id int);");
    let mut events = Vec::new();
    let r = evolve_migrate::apply(&f.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("apply");
    assert_eq!(r.history_table, "Ops Team.Deploys");
    assert!(matches!(&events[0], Event::HistoryCreated { table } if table == "Ops Team.Deploys"));
    assert_eq!(
        f.count(r#"SELECT count(*) FROM "Ops Team"."Deploys" WHERE success"#)
            .await,
        1
    );
    assert!(!f.table_exists("evolve_schema_history").await);
    assert_eq!(
        evolve_migrate::status(&f.opts)
            .await
            .expect("status")
            .current_version
            .as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn errors_without_a_position_name_the_statement_that_failed() {
    let f = fixture("noposition").await;
    f.write("V1__t.sql", "CREATE TABLE t (id int PRIMARY KEY);\nINSERT INTO t VALUES (1);\n\n  INSERT INTO t VALUES (1);\nSELECT 1/0;\n");
    let err = f.apply_err().await;
    assert!(err.starts_with("migration V1__t.sql failed at line 4, column 3: ERROR 23505: duplicate key value violates unique constraint \"t_pkey\"\n  detail: Key (id)=(1) already exists."), "{err}");
    assert!(!f.table_exists("t").await);
}
