//! `evolve migrate` beside the real Flyway (13.12.1) where the two once
//! parted: each case runs both tools on databases of their own (or one
//! after the other on one), and compares what they wrote and said.
//! Cases that need no Flyway (environment variables in Flyway's files,
//! JDBC parameters, messages) check evolve against what Flyway's source
//! does.

#[path = "../../evolve-migrate/tests/flyway/mod.rs"]
mod flyway;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio_postgres::Client;

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-parity-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

/// `evolve ARGS` in `cwd` with `env`, no DATABASE_URL inherited.
fn evolve_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(args).current_dir(cwd).env_remove("DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run evolve")
}

/// `evolve migrate VERB --dir DIR ARGS` on `url` and flyway_schema_history.
fn evolve(url: &str, dir: &Path, verb: &str, args: &[&str]) -> Output {
    let mut full = vec!["migrate", verb];
    let dir = dir.display().to_string();
    if verb != "baseline" {
        full.extend(["--dir", dir.as_str()]);
    }
    full.extend(["--history-table", "flyway_schema_history"]);
    full.extend(args);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(&full).env("DATABASE_URL", url);
    cmd.output().expect("run evolve")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn evolve_ok(url: &str, dir: &Path, verb: &str, args: &[&str]) -> (String, String) {
    let out = evolve(url, dir, verb, args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "evolve migrate {verb} {args:?} failed:\n{stdout}{stderr}"
    );
    (stdout, stderr)
}

fn evolve_err(url: &str, dir: &Path, verb: &str, args: &[&str]) -> String {
    let out = evolve(url, dir, verb, args);
    assert!(
        !out.status.success(),
        "evolve migrate {verb} {args:?} succeeded:\n{}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

async fn connect(url: &str) -> Client {
    evolve_pg::connect(url, "evolve test")
        .await
        .expect("connect")
}

/// Every column but installed_on and execution_time, in installed order.
async fn history_of(url: &str, table: &str) -> Vec<Vec<String>> {
    connect(url)
        .await
        .query(
            &format!(
                "SELECT installed_rank::text, coalesce(version, '<null>'), description, type, script,
                        coalesce(checksum::text, '<null>'), installed_by, success::text
                 FROM {table} h ORDER BY h.installed_rank"
            ),
            &[],
        )
        .await
        .expect("read history")
        .iter()
        .map(|r| (0..8).map(|i| r.get::<_, String>(i)).collect())
        .collect()
}

async fn history(url: &str) -> Vec<Vec<String>> {
    history_of(url, "flyway_schema_history").await
}

async fn scalar(url: &str, sql: &str) -> String {
    connect(url)
        .await
        .query_one(&format!("SELECT ({sql})::text"), &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get::<_, Option<String>>(0)
        .unwrap_or_default()
}

type Line = (Option<String>, String, String, Option<i64>, String);

/// `evolve migrate status` as (version, description, Flyway's type,
/// checksum, Flyway's state), sorted.
fn evolve_status(url: &str, dir: &Path) -> Vec<Line> {
    let (stdout, _) = evolve_ok(url, dir, "status", &["--format", "json"]);
    let report: Value = serde_json::from_str(&stdout).expect("status is JSON");
    let mut lines: Vec<Line> = report["migrations"]
        .as_array()
        .expect("migrations")
        .iter()
        .map(|m| {
            let state = match m["state"].as_str().expect("state") {
                "applied" => "SUCCESS",
                "pending" => "PENDING",
                "failed" => "FAILED",
                "baseline" => "BASELINE",
                "below-baseline" => "BELOW_BASELINE",
                "ignored-out-of-order" => "IGNORED",
                "outdated" => "OUTDATED",
                "missing-file" => "MISSING_SUCCESS",
                "future" => "FUTURE_SUCCESS",
                "deleted" => "DELETED",
                other => panic!("state {other}"),
            };
            (
                m["version"].as_str().map(str::to_string),
                m["description"].as_str().expect("description").to_string(),
                m["history_type"].as_str().expect("type").to_string(),
                m["checksum"].as_i64(),
                state.to_string(),
            )
        })
        .collect();
    lines.sort();
    lines
}

/// `flyway info` in the same shape, superseded runs and files at the
/// baseline's version (evolve notes them on the baseline's line) left out.
fn flyway_info(fw: &flyway::Flyway, url: &str, dir: &Path) -> Vec<Line> {
    let mut lines: Vec<Line> = fw
        .ok(url, dir, &[], "info")
        .rows()
        .iter()
        .filter(|r| r["state"] != "SUPERSEDED" && r["state"] != "BASELINE_IGNORED")
        .map(|r| {
            (
                r["version"].as_str().map(str::to_string),
                r["description"].as_str().expect("description").to_string(),
                r["type"].as_str().expect("type").to_string(),
                r["checksum"].as_i64(),
                r["state"].as_str().expect("state").to_string(),
            )
        })
        .collect();
    lines.sort();
    lines
}

/// Both tools on a database each, the same files: the same history.
async fn same_history(
    fw: &flyway::Flyway,
    hint: &str,
    dir: &Path,
    config: &[(&str, &str)],
) -> (String, String) {
    let by_evolve = evolve_test::fresh_db(&format!("ev_{hint}")).await;
    let by_flyway = evolve_test::fresh_db(&format!("fw_{hint}")).await;
    fw.ok(&by_flyway.url, dir, config, "migrate");
    evolve_ok(&by_evolve.url, dir, "apply", &[]);
    let ev = history(&by_evolve.url).await;
    assert_eq!(ev, history(&by_flyway.url).await, "histories differ");
    (by_evolve.url.clone(), by_flyway.url.clone())
}

/// Flyway's file names (`V1.sql`, a `.SQL` suffix) and an undo file,
/// which both skip (evolve says so on stderr).
#[tokio::test]
async fn names_and_undo_files() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("names");
    write(&dir, "V1.sql", "CREATE TABLE a (i int);\n");
    write(&dir, "V2__B.SQL", "CREATE TABLE b (i int);\n");
    write(&dir, "U2__b.sql", "DROP TABLE b;\n");
    let (ev, _) = same_history(fw, "names", &dir, &[]).await;
    assert_eq!(history(&ev).await.len(), 2);
    assert_eq!(flyway_info(fw, &ev, &dir), evolve_status(&ev, &dir));
    write(&dir, "V3__c.sql", "CREATE TABLE c (i int);\n");
    let (_, stderr) = evolve_ok(&ev, &dir, "apply", &[]);
    assert!(
        stderr.contains("migration U2__b.sql is an undo migration, which evolve does not run (nor does Flyway Community); it is skipped"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of `CREATE INDEX CONCURRENTLY` only runs outside a transaction
/// in both (mixed = false); `COPY ... FROM STDIN` loads its rows in both;
/// a script configuration file's `executeInTransaction=false` lets a new
/// enum value be used in the same file in both.
#[tokio::test]
async fn concurrent_indexes_copy_and_script_configuration() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("statements");
    write(
        &dir,
        "V1__a.sql",
        "CREATE TABLE a (i int, s text);\nCREATE TYPE mood AS ENUM ('a');\n",
    );
    write(
        &dir,
        "V2__idx.sql",
        "CREATE INDEX CONCURRENTLY a_i ON a (i);\n",
    );
    write(
        &dir,
        "V3__copy.sql",
        "COPY a (i, s) FROM STDIN;\n1\tit's\n2\tb\n\\.\nINSERT INTO a VALUES (3, 'c');\n",
    );
    write(
        &dir,
        "V4__add.sql",
        "ALTER TYPE mood ADD VALUE 'b';\nCREATE TABLE m (x mood DEFAULT 'b');\n",
    );
    write(&dir, "V4__add.sql.conf", "executeInTransaction=false\n");
    // Flyway's transactional lock would make its own CREATE INDEX
    // CONCURRENTLY wait for ever.
    let lock = [("flyway.postgresql.transactional.lock", "false")];
    let (ev, fwu) = same_history(fw, "statements", &dir, &lock).await;
    for url in [&ev, &fwu] {
        assert_eq!(
            scalar(url, "SELECT string_agg(s, ',' ORDER BY i) FROM a").await,
            "it's,b,c"
        );
        assert_eq!(
            scalar(
                url,
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'a_i'"
            )
            .await,
            "1"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Baseline migrations: on an empty database both run the `B` file
/// instead of the versioned files up to its version, record it as
/// `SQL_BASELINE`, agree on every state, and continue each other.
#[tokio::test]
async fn baseline_migrations() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("bfiles");
    write(&dir, "V1__a.sql", "CREATE TABLE a (i int);\n");
    write(&dir, "V2__b.sql", "CREATE TABLE b (i int);\n");
    write(
        &dir,
        "B2__base.sql",
        "CREATE TABLE a (i int);\nCREATE TABLE b (i int);\n",
    );
    write(&dir, "V3__c.sql", "CREATE TABLE c (i int);\n");
    let (ev, fwu) = same_history(fw, "bfiles", &dir, &[]).await;
    let types: Vec<String> = history(&ev).await.iter().map(|r| r[3].clone()).collect();
    assert_eq!(types, ["SQL_BASELINE", "SQL"]);
    write(&dir, "V4__d.sql", "CREATE TABLE d (i int);\n");
    evolve_ok(&fwu, &dir, "apply", &[]);
    fw.ok(&ev, &dir, &[], "migrate");
    assert_eq!(history(&ev).await, history(&fwu).await);
    for url in [&ev, &fwu] {
        fw.ok(url, &dir, &[], "validate");
        evolve_ok(url, &dir, "validate", &[]);
        assert_eq!(flyway_info(fw, url, &dir), evolve_status(url, &dir));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `apply` names a baseline migration as its `B` file does (`B1 base
/// line`, kind `baseline` in JSON), not as a versioned one (`V1`, as it
/// once did); `status` lists it as Flyway's `info` does: the B file's
/// script and description, type `SQL_BASELINE`, state `BASELINE`.
#[tokio::test]
async fn a_baseline_migration_prints_as_its_b_file() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("bprint");
    write(&dir, "V1__a.sql", "CREATE TABLE a (i int);\n");
    write(&dir, "B1__base_line.sql", "CREATE TABLE a (i int);\n");
    write(&dir, "V2__b.sql", "CREATE TABLE b (i int);\n");
    let db = evolve_test::fresh_db("ev_bprint").await;
    let (stdout, _) = evolve_ok(&db.url, &dir, "apply", &["--dry-run"]);
    assert!(
        stdout.starts_with(
            "would apply B1 base line (1 statement, in one transaction)\nwould apply V2 b (1 statement, in one transaction)\n"
        ),
        "{stdout}"
    );
    let (stdout, _) = evolve_ok(&db.url, &dir, "apply", &["--dry-run", "--format", "json"]);
    let kinds: Vec<(String, String)> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON line"))
        .filter(|e| e["type"] == "would_apply")
        .map(|e| {
            (
                e["script"].as_str().expect("script").to_string(),
                e["kind"].as_str().expect("kind").to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("B1__base_line.sql".to_string(), "baseline".to_string()),
            ("V2__b.sql".to_string(), "versioned".to_string())
        ]
    );
    let (stdout, _) = evolve_ok(&db.url, &dir, "apply", &[]);
    let applied: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("applied "))
        .map(|l| l.split(" (").next().unwrap_or(l))
        .collect();
    assert_eq!(applied, ["applied B1 base line", "applied V2 b"]);
    let (stdout, _) = evolve_ok(&db.url, &dir, "status", &["--format", "json"]);
    let report: Value = serde_json::from_str(&stdout).expect("status is JSON");
    let b = report["migrations"]
        .as_array()
        .expect("migrations")
        .iter()
        .find(|m| m["version"] == "1")
        .expect("version 1")
        .clone();
    let info = fw.ok(&db.url, &dir, &[], "info").rows();
    let fb = info
        .iter()
        .find(|r| r["script"] == "B1__base_line.sql")
        .expect("Flyway lists the B file");
    assert_eq!(
        (
            &b["script"],
            &b["description"],
            &b["history_type"],
            &b["state"],
            &b["type"]
        ),
        (
            &fb["script"],
            &fb["description"],
            &fb["type"],
            &Value::from("baseline"),
            &Value::from("baseline")
        )
    );
    assert_eq!(fb["state"], "BASELINE");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `ignoreMigrationPatterns` entry that is not `<type>:<state>` is
/// refused by both before anything runs; evolve once warned and applied.
/// evolve says it in one line naming the entry, what is wrong and the
/// forms, from a flyway.conf and from FLYWAY_IGNORE_MIGRATION_PATTERNS.
#[tokio::test]
async fn an_invalid_ignore_migration_pattern_is_refused_by_both() {
    let Some(fw) = flyway::flyway() else { return };
    let (root, sql) = project("ignore_invalid");
    write(&sql, "V1__a.sql", "CREATE TABLE a (i int);\n");
    let by_evolve = evolve_test::fresh_db("ev_ignore_invalid").await;
    let by_flyway = evolve_test::fresh_db("fw_ignore_invalid").await;
    let jdbc = flyway::jdbc(&by_evolve.url);
    let forms = "write <type>:<state>, type *, versioned or repeatable, state *, pending, missing, ignored or future (e.g. *:pending, repeatable:missing)";
    for (pattern, flyway_says, why) in [
        (
            "*:bogus",
            "Invalid migration state 'bogus'",
            "pattern \"*:bogus\" has state \"bogus\", which is not a state it can name",
        ),
        (
            "foo",
            "Invalid pattern 'foo'",
            "pattern \"foo\" is not of the form <type>:<state>",
        ),
        (
            "*:future,x:pending",
            "Invalid migration type 'x'",
            "pattern \"x:pending\" has type \"x\", which is not a migration type",
        ),
    ] {
        let outcome = fw
            .run(
                &by_flyway.url,
                &sql,
                &[("flyway.ignoreMigrationPatterns", pattern)],
                &["migrate"],
            )
            .remove(0);
        assert!(
            !outcome.ok() && outcome.error().starts_with(flyway_says),
            "{outcome:?}"
        );
        let expected = format!(
            "error: Flyway setting flyway.ignoreMigrationPatterns: {why} (Flyway refuses it too); {forms}\n"
        );
        write(
            &root,
            "flyway.conf",
            &format!(
                "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.ignoreMigrationPatterns={pattern}\n",
                jdbc[0].1,
                jdbc[1].1,
                sql.display()
            ),
        );
        let out = evolve_in(&root, &[], &["migrate", "apply"]);
        assert!(!out.status.success(), "{pattern}: {}", text(&out.stdout));
        assert_eq!(text(&out.stderr), expected, "{pattern}");
        std::fs::remove_file(root.join("flyway.conf")).expect("rm");
        let dir = sql.display().to_string();
        let out = evolve_in(
            &root,
            &[
                ("DATABASE_URL", by_evolve.url.as_str()),
                ("FLYWAY_IGNORE_MIGRATION_PATTERNS", pattern),
            ],
            &["migrate", "apply", "--dir", &dir],
        );
        assert!(!out.status.success(), "{pattern}: {}", text(&out.stdout));
        assert_eq!(text(&out.stderr), expected, "{pattern}");
        for url in [&by_evolve.url, &by_flyway.url] {
            assert_eq!(
                scalar(url, "SELECT count(*) FROM pg_class WHERE relname IN ('a', 'flyway_schema_history', 'evolve_schema_history')").await,
                "0",
                "{pattern}: nothing is applied"
            );
        }
    }
    // A trailing comma is no entry, in both.
    let fine = [(
        "flyway.ignoreMigrationPatterns",
        "*:future, REPEATABLE:missing,",
    )];
    fw.ok(&by_flyway.url, &sql, &fine, "migrate");
    let dir = sql.display().to_string();
    let out = evolve_in(
        &root,
        &[
            ("DATABASE_URL", by_evolve.url.as_str()),
            ("FLYWAY_IGNORE_MIGRATION_PATTERNS", fine[0].1),
        ],
        &[
            "migrate",
            "apply",
            "--dir",
            &dir,
            "--history-table",
            "flyway_schema_history",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(history(&by_evolve.url).await, history(&by_flyway.url).await);
    let _ = std::fs::remove_dir_all(&root);
}

/// Placeholders of a `.conf` file (`flyway.placeholders.NAME`, a name in
/// another case in the files), with Flyway's default placeholders, in a
/// migration, a repeatable and a callback; then `placeholderReplacement =
/// false` from a `.conf` named with `--flyway-config`: evolve, reading the
/// files, leaves what Flyway, reading the same keys, leaves.
#[tokio::test]
async fn placeholders_of_a_flyway_conf_as_flyway() {
    let Some(fw) = flyway::flyway() else { return };
    let (root, sql) = project("conf_placeholders");
    write(
        &sql,
        "V1__a.sql",
        "CREATE TABLE ${tname} (i int);\nCREATE TABLE info (k text, v text);\nINSERT INTO info VALUES ('v1', '${flyway:defaultSchema}|${flyway:user}|${flyway:filename}|${flyway:table}|${flyway:environment}|${TName}|${owner}');\n",
    );
    write(
        &sql,
        "R__r.sql",
        "INSERT INTO info VALUES ('r', '${tname} ${flyway:filename}');\n",
    );
    write(
        &sql,
        "afterMigrate.sql",
        "INSERT INTO info VALUES ('after', '${tname} ${flyway:filename}');\n",
    );
    let by_evolve = evolve_test::fresh_db("ev_conf_placeholders").await;
    let by_flyway = evolve_test::fresh_db("fw_conf_placeholders").await;
    let jdbc = flyway::jdbc(&by_evolve.url);
    let keys = |extra: &str| {
        format!(
            "flyway.locations=filesystem:{}\nflyway.placeholders.tname=from_conf\nflyway.placeholders.Owner = team a\n{extra}",
            sql.display()
        )
    };
    let info = |url: String| async move {
        connect(&url)
            .await
            .query("SELECT k || '=' || v FROM info ORDER BY k, v", &[])
            .await
            .expect("info")
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    for (phase, extra, evolve_args) in [
        ("replaced", "", vec!["migrate", "apply"]),
        (
            "left",
            "flyway.placeholderReplacement=false\n",
            vec!["migrate", "apply", "--flyway-config", "settings.conf"],
        ),
    ] {
        if phase == "left" {
            write(
                &sql,
                "V2__raw.sql",
                "INSERT INTO info VALUES ('v2', '${tname} ${flyway:user}');\n",
            );
        }
        let shared = keys(extra);
        write(&root, "shared.conf", &shared);
        let conf = format!(
            "flyway.url={}\nflyway.user={}\n{shared}",
            jdbc[0].1, jdbc[1].1
        );
        let _ = std::fs::remove_file(root.join("flyway.conf"));
        let name = if phase == "left" {
            "settings.conf"
        } else {
            "flyway.conf"
        };
        write(&root, name, &conf);
        let arg = format!("@{}", root.join("shared.conf").display());
        fw.ok(&by_flyway.url, &sql, &[(arg.as_str(), "")], "migrate");
        let out = evolve_in(&root, &[], &evolve_args);
        assert!(out.status.success(), "{phase}: {}", text(&out.stderr));
        assert_eq!(
            history(&by_evolve.url).await,
            history(&by_flyway.url).await,
            "{phase}"
        );
        assert_eq!(
            info(by_evolve.url.clone()).await,
            info(by_flyway.url.clone()).await,
            "{phase}"
        );
    }
    let rows = info(by_evolve.url.clone()).await;
    assert!(
        rows.contains(
            &"v1=public|postgres|V1__a.sql|flyway_schema_history|default|from_conf|team a"
                .to_string()
        ) && rows.contains(&"v2=${tname} ${flyway:user}".to_string())
            && rows.contains(&"r=${tname} ${flyway:filename}".to_string()),
        "{rows:?}"
    );
    assert_eq!(
        scalar(&by_evolve.url, "SELECT to_regclass('public.from_conf')").await,
        "from_conf"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A repeatable migration marked deleted by repair runs again when its
/// file comes back (Flyway's info says PENDING, so does evolve's status).
#[tokio::test]
async fn a_deleted_repeatable_that_comes_back_is_pending_in_both() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("rdeleted");
    write(
        &dir,
        "R__v.sql",
        "CREATE OR REPLACE VIEW rv AS SELECT 1 AS x;\n",
    );
    let db = evolve_test::fresh_db("ev_rdeleted").await;
    evolve_ok(&db.url, &dir, "apply", &[]);
    std::fs::remove_file(dir.join("R__v.sql")).expect("rm");
    evolve_ok(&db.url, &dir, "repair", &[]);
    connect(&db.url)
        .await
        .batch_execute("DROP VIEW rv")
        .await
        .expect("drop");
    write(
        &dir,
        "R__v.sql",
        "CREATE OR REPLACE VIEW rv AS SELECT 1 AS x;\n",
    );
    // Flyway lists the history's rows too (the run it deleted, the DELETE
    // row); evolve one line per repeatable, its state now.
    let pending: Vec<Line> = flyway_info(fw, &db.url, &dir)
        .into_iter()
        .filter(|l| l.4 == "PENDING")
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending, evolve_status(&db.url, &dir));
    evolve_ok(&db.url, &dir, "apply", &[]);
    assert_eq!(scalar(&db.url, "SELECT to_regclass('rv')").await, "rv");
    fw.ok(&db.url, &dir, &[], "validate");
    let _ = std::fs::remove_dir_all(&dir);
}

/// repair leaves a future migration alone in both: the newer files run
/// nothing again afterwards.
#[tokio::test]
async fn repair_of_a_future_migration_writes_nothing_in_either() {
    let Some(fw) = flyway::flyway() else { return };
    let new = temp_dir("future_new");
    let old = temp_dir("future_old");
    write(&new, "V1__a.sql", "CREATE TABLE a (i int);\n");
    write(&new, "V2__b.sql", "CREATE TABLE b (i int);\n");
    write(&old, "V1__a.sql", "CREATE TABLE a (i int);\n");
    let (ev, fwu) = same_history(fw, "future", &new, &[]).await;
    evolve_ok(&ev, &old, "repair", &[]);
    fw.ok(&fwu, &old, &[], "repair");
    assert_eq!(history(&ev).await, history(&fwu).await);
    assert_eq!(history(&ev).await.len(), 2);
    fw.ok(&ev, &new, &[], "migrate");
    evolve_ok(&fwu, &new, "validate", &[]);
    assert_eq!(history(&ev).await.len(), 2);
    let _ = std::fs::remove_dir_all(&new);
    let _ = std::fs::remove_dir_all(&old);
}

/// A schema that holds objects but no history: Flyway refuses to migrate
/// it, and so does evolve, with baseline as the way out; a database
/// Flyway migrated is not migrated again into evolve's default table.
#[tokio::test]
async fn a_non_empty_schema_without_history() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("nonempty");
    write(
        &dir,
        "V1__a.sql",
        "CREATE TABLE IF NOT EXISTS a (i int);\nINSERT INTO a VALUES (1);\n",
    );
    let by_evolve = evolve_test::fresh_db("ev_nonempty").await;
    let by_flyway = evolve_test::fresh_db("fw_nonempty").await;
    for db in [&by_evolve, &by_flyway] {
        connect(&db.url)
            .await
            .batch_execute("CREATE TABLE legacy (i int)")
            .await
            .expect("legacy");
    }
    let outcome = fw.run(&by_flyway.url, &dir, &[], &["migrate"]).remove(0);
    assert!(
        !outcome.ok()
            && outcome
                .error()
                .contains("Found non-empty schema(s) \"public\" but no schema history table"),
        "{outcome:?}"
    );
    let stderr = evolve_err(&by_evolve.url, &dir, "apply", &[]);
    assert!(
        stderr.starts_with("error: history table public.flyway_schema_history: does not exist, but schema public already holds tables, views, types or functions")
            && stderr.contains("'evolve migrate baseline --version V'"),
        "{stderr}"
    );
    assert!(evolve_err(&by_evolve.url, &dir, "apply", &["--dry-run"]).contains("already holds"));
    // The way out, in both: baseline at 0, then every file runs.
    evolve_ok(&by_evolve.url, &dir, "baseline", &["--version", "0"]);
    evolve_ok(&by_evolve.url, &dir, "apply", &[]);
    let zero = [("flyway.baselineVersion", "0")];
    fw.ok(&by_flyway.url, &dir, &zero, "baseline");
    fw.ok(&by_flyway.url, &dir, &zero, "migrate");
    assert_eq!(history(&by_evolve.url).await, history(&by_flyway.url).await);

    // evolve without --history-table on the database Flyway migrated.
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(["migrate", "apply", "--dir"])
        .arg(&dir)
        .env("DATABASE_URL", &by_flyway.url)
        .output()
        .expect("run evolve");
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: history table public.evolve_schema_history: does not exist, but Flyway's history public.flyway_schema_history does: this database is migrated by Flyway; pass --history-table flyway_schema_history (or run evolve where its flyway.conf or flyway.toml is) to continue that history\n"
    );
    assert_eq!(scalar(&by_flyway.url, "SELECT count(*) FROM a").await, "1");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--history-table app.flyway_schema_history` makes `app` the default
/// schema, first on the search_path, as Flyway's `schemas = app` does.
#[tokio::test]
async fn the_history_tables_schema_is_the_default_schema() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("defschema");
    write(&dir, "V1__t1.sql", "CREATE TABLE t1 (i int);\n");
    let db = evolve_test::fresh_db("ev_defschema").await;
    fw.ok(&db.url, &dir, &[("flyway.schemas", "app")], "migrate");
    write(
        &dir,
        "V2__t2.sql",
        "CREATE TABLE t2 (i int);\nCOMMENT ON TABLE t2 IS '${flyway:defaultSchema}';\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args([
            "migrate",
            "apply",
            "--history-table",
            "app.flyway_schema_history",
            "--dir",
        ])
        .arg(&dir)
        .env("DATABASE_URL", &db.url)
        .output()
        .expect("run evolve");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        scalar(&db.url, "SELECT obj_description('app.t2'::regclass)").await,
        "app"
    );
    assert_eq!(scalar(&db.url, "SELECT to_regclass('public.t2')").await, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Targets: one no migration has is refused by both; `latest` is every
/// one.
#[tokio::test]
async fn targets() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("targets");
    for n in 1..=3 {
        write(
            &dir,
            &format!("V{n}__t{n}.sql"),
            &format!("CREATE TABLE t{n} (i int);\n"),
        );
    }
    let db = evolve_test::fresh_db("ev_targets").await;
    let outcome = fw
        .run(&db.url, &dir, &[("flyway.target", "2.5")], &["migrate"])
        .remove(0);
    assert!(
        outcome
            .error()
            .starts_with("No migration with a target version 2.5 could be found"),
        "{outcome:?}"
    );
    let stderr = evolve_err(&db.url, &dir, "apply", &["--target", "2.5"]);
    assert_eq!(
        stderr,
        "error: no migration has target version 2.5 (no file, no history row), as Flyway requires of a target; give --target (or flyway.target) the version of a migration, 2.5? to go up to it all the same, or latest, current or next\n"
    );
    evolve_ok(&db.url, &dir, "apply", &["--target", "latest"]);
    assert_eq!(history(&db.url).await.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flyway's targets `current` (nothing beyond the applied version, the
/// repeatables still run), `next` (the first pending version only) and
/// `<version>?` (a version no migration has), from `--target`, a
/// flyway.conf and a flyway.toml: each step leaves the history Flyway's
/// leaves. evolve once refused all three ("one of Flyway's targets evolve
/// does not support"). A target that is none of Flyway's forms is refused
/// by both, evolve in one line naming it and the forms.
#[tokio::test]
async fn targets_current_next_and_optional_as_flyway() {
    let Some(fw) = flyway::flyway() else { return };
    let (root, sql) = project("target_current");
    for n in 1..=4 {
        write(
            &sql,
            &format!("V{n}__t{n}.sql"),
            &format!("CREATE TABLE t{n} (i int);\n"),
        );
    }
    write(
        &sql,
        "R__v.sql",
        "CREATE OR REPLACE VIEW v AS SELECT 1 AS x;\n",
    );
    let by_evolve = evolve_test::fresh_db("ev_target_current").await;
    let by_flyway = evolve_test::fresh_db("fw_target_current").await;
    let jdbc = flyway::jdbc(&by_evolve.url);
    let steps: [(&str, &str, Option<&str>); 8] = [
        // On an empty database: no version, the repeatable runs.
        ("current", "--target", None),
        ("1", "--target", None),
        (
            "current",
            "--target",
            Some("CREATE OR REPLACE VIEW v AS SELECT 2 AS x;\n"),
        ),
        ("NEXT", "--target", None),
        ("2.5?", "--target", None),
        (
            "current",
            "flyway.conf",
            Some("CREATE OR REPLACE VIEW v AS SELECT 3 AS x;\n"),
        ),
        ("next", "flyway.toml", None),
        ("latest", "--target", None),
    ];
    let mut applied_versions = Vec::new();
    for (target, how, repeatable) in steps {
        if let Some(text) = repeatable {
            write(&sql, "R__v.sql", text);
        }
        fw.ok(
            &by_flyway.url,
            &sql,
            &[("flyway.target", target)],
            "migrate",
        );
        let _ = std::fs::remove_file(root.join("flyway.conf"));
        let _ = std::fs::remove_file(root.join("flyway.toml"));
        let out = match how {
            "flyway.conf" => {
                write(
                    &root,
                    "flyway.conf",
                    &format!(
                        "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.target={target}\n",
                        jdbc[0].1,
                        jdbc[1].1,
                        sql.display()
                    ),
                );
                evolve_in(&root, &[], &["migrate", "apply"])
            }
            "flyway.toml" => {
                write(
                    &root,
                    "flyway.toml",
                    &format!(
                        "[environments.default]\nurl = \"{}\"\nuser = \"{}\"\n\n[flyway]\nlocations = [\"filesystem:{}\"]\ntarget = \"{target}\"\n",
                        jdbc[0].1,
                        jdbc[1].1,
                        sql.display()
                    ),
                );
                evolve_in(&root, &[], &["migrate", "apply"])
            }
            _ => evolve(&by_evolve.url, &sql, "apply", &["--target", target]),
        };
        assert!(
            out.status.success(),
            "target {target} ({how}):\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let ev = history(&by_evolve.url).await;
        assert_eq!(ev, history(&by_flyway.url).await, "target {target} ({how})");
        applied_versions.push(
            ev.iter()
                .filter(|r| r[1] != "<null>")
                .map(|r| r[1].clone())
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    assert_eq!(
        applied_versions,
        ["", "1", "1", "1,2", "1,2", "1,2", "1,2,3", "1,2,3,4"]
    );
    let repeatable_runs = history(&by_evolve.url)
        .await
        .iter()
        .filter(|r| r[4] == "R__v.sql")
        .count();
    assert_eq!(repeatable_runs, 3);

    // Neither takes a target that is none of Flyway's forms.
    let _ = std::fs::remove_file(root.join("flyway.toml"));
    let outcome = fw
        .run(
            &by_flyway.url,
            &sql,
            &[("flyway.target", "soon")],
            &["migrate"],
        )
        .remove(0);
    assert!(
        outcome.error().contains("Invalid version: soon"),
        "{outcome:?}"
    );
    let forms =
        "give a version (2.1), a version no migration need have (2.1?), latest, current or next";
    let stderr = evolve_err(&by_evolve.url, &sql, "apply", &["--target", "soon"]);
    assert!(
        stderr.starts_with(&format!(
            "error: invalid value 'soon' for '--target <TARGET>': target \"soon\" is not a target; {forms}\n"
        )),
        "{stderr}"
    );
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.target=soon\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        format!("error: Flyway setting flyway.target: target \"soon\" is not a target; {forms}\n")
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// validate fails on a pending migration in both, unless
/// ignoreMigrationPatterns has `*:pending`; a second baseline at the same
/// version does nothing in both.
#[tokio::test]
async fn validate_of_pending_migrations_and_a_second_baseline() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("validate");
    write(&dir, "V1__a.sql", "SELECT 1;\n");
    let db = evolve_test::fresh_db("ev_validate").await;
    evolve_ok(&db.url, &dir, "apply", &[]);
    let (stdout, _) = evolve_ok(&db.url, &dir, "validate", &[]);
    assert_eq!(
        stdout,
        "public.flyway_schema_history: 1 applied migration matches its file; 0 pending\n"
    );
    write(&dir, "V2__b.sql", "SELECT 2;\n");
    assert!(!fw.run(&db.url, &dir, &[], &["validate"])[0].ok());
    let stderr = evolve_err(&db.url, &dir, "validate", &[]);
    assert!(
        stderr.starts_with("error: migration V2__b.sql is pending (not applied yet)"),
        "{stderr}"
    );
    fw.ok(
        &db.url,
        &dir,
        &[("flyway.ignoreMigrationPatterns", "*:pending")],
        "validate",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args([
            "migrate",
            "validate",
            "--history-table",
            "flyway_schema_history",
            "--dir",
        ])
        .arg(&dir)
        .env("DATABASE_URL", &db.url)
        .env("FLYWAY_IGNORE_MIGRATION_PATTERNS", "*:pending")
        .output()
        .expect("run evolve");
    assert!(out.status.success(), "{}", text(&out.stderr));

    let by_evolve = evolve_test::fresh_db("ev_baseline2").await;
    let by_flyway = evolve_test::fresh_db("fw_baseline2").await;
    fw.run(&by_flyway.url, &dir, &[], &["baseline", "baseline"])
        .iter()
        .for_each(|o| {
            o.expect_ok("baseline");
        });
    evolve_ok(&by_evolve.url, &dir, "baseline", &[]);
    evolve_ok(&by_evolve.url, &dir, "baseline", &[]);
    assert_eq!(history(&by_evolve.url).await, history(&by_flyway.url).await);
    let stderr = evolve_err(&by_evolve.url, &dir, "baseline", &["--version", "2"]);
    assert!(
        stderr.contains("is already baselined at version 1"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Flyway run in progress holds its advisory lock on the history table;
/// evolve takes the same key, so it waits (or, with --no-wait, stops).
#[tokio::test]
async fn flyway_and_evolve_exclude_each_other() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("lock");
    write(
        &dir,
        "V1__slow.sql",
        "CREATE TABLE a (i int);\nSELECT pg_sleep(4);\n",
    );
    let db = evolve_test::fresh_db("ev_lock").await;
    let (url, d) = (db.url.clone(), dir.clone());
    let flyway = std::thread::spawn(move || fw.ok(&url, &d, &[], "migrate"));
    let key = evolve_migrate::flyway_lock_key(&evolve_pg::QualifiedName::new(
        "public",
        "flyway_schema_history",
    ));
    let started = std::time::Instant::now();
    loop {
        let held = scalar(
            &db.url,
            // Flyway takes its key around each of its steps (creating
            // the history table, then each migration): it must be held
            // while V1 runs, not only by a short step before it.
            &format!(
                "SELECT count(*) FROM pg_locks l \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.classid = {} AND l.objid = {} \
                 AND EXISTS (SELECT FROM pg_stat_activity a \
                             WHERE a.state = 'active' AND a.query LIKE 'SELECT pg_sleep(4)%')",
                key >> 32,
                key & 0xffff_ffff
            ),
        )
        .await;
        if held == "1" {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "Flyway never took its lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let stderr = evolve_err(&db.url, &dir, "apply", &["--no-wait"]);
    assert!(
        stderr.starts_with(
            "error: another migration run holds the migration lock on public.flyway_schema_history"
        ),
        "{stderr}"
    );
    flyway.join().expect("flyway");
    let (stdout, _) = evolve_ok(&db.url, &dir, "apply", &[]);
    assert!(
        stdout.contains("schema is up to date at version 1"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A failed row Flyway left, without evolve's progress record: validate
/// says the real way out; under --group nothing is said applied when the
/// group fails.
#[tokio::test]
async fn messages_after_failures() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("failed");
    write(&dir, "V1__a.sql", "CREATE TABLE a (i int);\n");
    write(
        &dir,
        "V2__idx.sql",
        "CREATE INDEX CONCURRENTLY a1 ON a (i);\nCREATE INDEX CONCURRENTLY a2 ON a (nosuch);\n",
    );
    let db = evolve_test::fresh_db("ev_failed").await;
    let outcome = fw
        .run(
            &db.url,
            &dir,
            &[("flyway.postgresql.transactional.lock", "false")],
            &["migrate"],
        )
        .remove(0);
    assert!(!outcome.ok());
    let stderr = evolve_err(&db.url, &dir, "validate", &[]);
    assert_eq!(
        stderr,
        "error: migration V2__idx.sql failed; evolve has no record of how far it got, so apply cannot resume it; make sure its effects are complete or undone, then run 'evolve migrate repair' to remove the failed row\n"
    );

    let group = temp_dir("group");
    write(&group, "V1__a.sql", "CREATE TABLE a (i int);\n");
    write(&group, "V2__b.sql", "INSERT INTO nosuch VALUES (1);\n");
    let db = evolve_test::fresh_db("ev_group").await;
    let out = evolve(&db.url, &group, "apply", &["--group"]);
    assert!(!out.status.success());
    assert!(
        !text(&out.stdout).contains("applied V1"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("none of the pending migrations was applied"));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&group);
}

/// A Flyway project: `flyway.conf` (or `flyway.toml`) beside `sql`.
fn project(hint: &str) -> (PathBuf, PathBuf) {
    let root = temp_dir(hint);
    let sql = root.join("sql");
    std::fs::create_dir_all(&sql).expect("mkdir");
    (root, sql)
}

/// Environment variables in Flyway's files, as Flyway reads them:
/// `${NAME}` in a flyway.conf (an unset one reads as empty, said in a
/// warning), `${env.NAME}` in a flyway.toml (an unset one is an error).
#[tokio::test]
async fn environment_variables_in_flyway_conf_and_toml() {
    let db = evolve_test::fresh_db("ev_conf_env").await;
    let (root, sql) = project("conf_env");
    write(
        &sql,
        "V1__t.sql",
        "CREATE TABLE t (i int);\nCOMMENT ON TABLE t IS '${owner}';\n",
    );
    let jdbc = flyway::jdbc(&db.url);
    let (hostport, dbname) = jdbc[0]
        .1
        .strip_prefix("jdbc:postgresql://")
        .and_then(|r| r.split_once('/'))
        .expect("jdbc url");
    let user = jdbc[1].1.as_str();
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url=jdbc:postgresql://${{EV_HOSTPORT}}/${{EV_DB}}\nflyway.user=${{EV_USER}}\nflyway.locations=filesystem:{}\nflyway.placeholders.owner=${{APP_OWNER}}\nflyway.placeholders.other=${{EV_UNSET_VARIABLE}}x\n",
            sql.display()
        ),
    );
    let env = [
        ("EV_HOSTPORT", hostport),
        ("EV_DB", dbname),
        ("EV_USER", user),
        ("APP_OWNER", "team-billing"),
    ];
    let out = evolve_in(&root, &env, &["migrate", "apply"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: Flyway configuration flyway.conf: line 5: environment variable EV_UNSET_VARIABLE is not set, so ${EV_UNSET_VARIABLE} reads as empty, as Flyway reads it; set EV_UNSET_VARIABLE"),
        "{stderr}"
    );
    assert_eq!(
        scalar(&db.url, "SELECT obj_description('t'::regclass)").await,
        "team-billing"
    );

    std::fs::remove_file(root.join("flyway.conf")).expect("rm");
    write(
        &root,
        "flyway.toml",
        &format!(
            "[environments.default]\nurl = \"jdbc:postgresql://${{env.EV_HOSTPORT}}/${{env.EV_DB}}\"\nuser = \"${{env.EV_USER}}\"\n\n[flyway]\nlocations = [\"filesystem:{}\"]\n\n[flyway.placeholders]\nowner = \"${{env.APP_OWNER}}\"\n",
            sql.display()
        ),
    );
    write(
        &sql,
        "V2__t2.sql",
        "CREATE TABLE t2 (i int);\nCOMMENT ON TABLE t2 IS '${owner}';\n",
    );
    let ops = [env[0], env[1], env[2], ("APP_OWNER", "team-ops")];
    let out = evolve_in(&root, &ops, &["migrate", "apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        scalar(&db.url, "SELECT obj_description('t2'::regclass)").await,
        "team-ops"
    );
    let out = evolve_in(&root, &env[..3], &["migrate", "status"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: Flyway configuration flyway.toml: line 9: flyway.placeholders.owner reads environment variable APP_OWNER, which is not set (Flyway refuses it too); set APP_OWNER; fix the file\n"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// flyway.url's JDBC parameters: those with a libpq equivalent apply
/// (`currentSchema` places the history and the tables as in Flyway), any
/// other is refused naming the file and the key, and a connection that
/// fails names the file as where to look.
#[tokio::test]
async fn jdbc_parameters_of_flyway_url() {
    let Some(fw) = flyway::flyway() else { return };
    let by_evolve = evolve_test::fresh_db("ev_jdbc").await;
    let by_flyway = evolve_test::fresh_db("fw_jdbc").await;
    for db in [&by_evolve, &by_flyway] {
        connect(&db.url)
            .await
            .batch_execute("CREATE SCHEMA app")
            .await
            .expect("schema");
    }
    let (root, sql) = project("jdbc");
    write(&sql, "V1__t.sql", "CREATE TABLE t (i int);\n");
    let url_of = |url: &str| {
        format!(
            "{}?currentSchema=app&ApplicationName=evolve-test&connectTimeout=5",
            flyway::jdbc(url)[0].1
        )
    };
    let conf = |url: &str| {
        format!(
            "flyway.url={url}\nflyway.user={}\nflyway.locations=filesystem:{}\n",
            flyway::jdbc(&by_evolve.url)[1].1,
            sql.display()
        )
    };
    write(&root, "flyway.conf", &conf(&url_of(&by_evolve.url)));
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    fw.ok(
        &by_flyway.url,
        &sql,
        &[("flyway.url", &url_of(&by_flyway.url))],
        "migrate",
    );
    let table = "app.flyway_schema_history";
    let ev = history_of(&by_evolve.url, table).await;
    assert_eq!(ev.len(), 1);
    assert_eq!(ev, history_of(&by_flyway.url, table).await);
    assert_eq!(
        scalar(&by_evolve.url, "SELECT to_regclass('app.t')").await,
        "app.t"
    );

    let bad = format!("{}?prepareThreshold=0", flyway::jdbc(&by_evolve.url)[0].1);
    write(&root, "flyway.conf", &conf(&bad));
    let out = evolve_in(&root, &[], &["migrate", "status"]);
    assert_eq!(
        text(&out.stderr),
        "error: Flyway configuration flyway.url in flyway.conf: flyway.url has JDBC parameter prepareThreshold, which has no libpq equivalent evolve applies; remove it from flyway.url (or pass --database-url)\n"
    );
    let out = evolve_in(
        &root,
        &[("DATABASE_URL", &by_evolve.url)],
        &["migrate", "status"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    write(
        &root,
        "flyway.conf",
        &conf("jdbc:postgresql://127.0.0.1:1/nowhere"),
    );
    let out = evolve_in(&root, &[], &["migrate", "status"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: could not connect to")
            && stderr.contains("check flyway.url in flyway.conf and that the server is running"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `${flyway:environment}` was `default` whatever `flyway.environment`
/// said. With a flyway.toml whose `[flyway] environment` is `staging`,
/// evolve connects with `[environments.staging]` and writes what Flyway,
/// on the environment `staging`, writes; `FLYWAY_ENVIRONMENT` picks
/// another environment of the file, as it does for Flyway.
#[tokio::test]
async fn the_environment_placeholder_follows_flyway_environment() {
    let Some(fw) = flyway::flyway() else { return };
    let by_evolve = evolve_test::fresh_db("ev_environment").await;
    let by_flyway = evolve_test::fresh_db("fw_environment").await;
    let (root, sql) = project("environment");
    write(
        &sql,
        "V1__env.sql",
        "CREATE TABLE info AS SELECT '${flyway:environment}'::text AS v;\n",
    );
    let jdbc = flyway::jdbc(&by_evolve.url);
    write(
        &root,
        "flyway.toml",
        &format!(
            "[flyway]\nenvironment = \"staging\"\nlocations = [\"filesystem:{}\"]\n\n[environments.default]\nurl = \"jdbc:postgresql://127.0.0.1:1/nowhere\"\n\n[environments.staging]\nurl = \"{}\"\nuser = \"{}\"\n",
            sql.display(),
            jdbc[0].1,
            jdbc[1].1
        ),
    );
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    fw.ok(
        &by_flyway.url,
        &sql,
        &[("driver.environment", "staging")],
        "migrate",
    );
    assert_eq!(history(&by_evolve.url).await, history(&by_flyway.url).await);
    let value = "SELECT v FROM info";
    assert_eq!(scalar(&by_evolve.url, value).await, "staging");
    assert_eq!(scalar(&by_flyway.url, value).await, "staging");

    // FLYWAY_ENVIRONMENT names another environment of the file.
    let other = evolve_test::fresh_db("ev_environment_other").await;
    let jdbc = flyway::jdbc(&other.url);
    write(
        &root,
        "flyway.toml",
        &format!(
            "[flyway]\nenvironment = \"staging\"\nlocations = [\"filesystem:{}\"]\n\n[environments.staging]\nurl = \"jdbc:postgresql://127.0.0.1:1/nowhere\"\n\n[environments.other]\nurl = \"{}\"\nuser = \"{}\"\n",
            sql.display(),
            jdbc[0].1,
            jdbc[1].1
        ),
    );
    let out = evolve_in(
        &root,
        &[("FLYWAY_ENVIRONMENT", "other")],
        &["migrate", "apply"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(scalar(&other.url, value).await, "other");
    let _ = std::fs::remove_dir_all(&root);
}

/// `FLYWAY_CONFIG_FILES` was only "not supported; it is ignored", and a
/// `--placeholder NAME=...` lost to a file's `placeholders.name`. As
/// Flyway's command line reads them (its `LegacyConfigurationManager`):
/// `./flyway.conf`, then the listed files in order, then `FLYWAY_*`
/// variables, then the command line, each over the ones before; a
/// placeholder name in another case is the same placeholder (Flyway
/// keeps both spellings and lets hash order pick one; evolve lets the
/// later source win). Naming both kinds of file is refused, as Flyway
/// refuses it, and so is a listed file that cannot be read.
#[tokio::test]
async fn flyway_config_files_and_placeholder_case() {
    let db = evolve_test::fresh_db("ev_config_files").await;
    let (root, sql) = project("config_files");
    write(
        &sql,
        "V1__p.sql",
        "CREATE TABLE info AS SELECT '${name}|${a}|${b}|${c}'::text AS v;\n",
    );
    let jdbc = flyway::jdbc(&db.url);
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.placeholders.name=from_conf\nflyway.placeholders.a=conf\nflyway.placeholders.b=conf\nflyway.placeholders.c=conf\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    write(
        &root,
        "extra.conf",
        "flyway.placeholders.a=extra\nflyway.placeholders.B=extra\nflyway.placeholders.c=extra\n",
    );
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    write(
        &root.join("sub"),
        "more.conf",
        "flyway.placeholders.b=more\n",
    );
    let out = evolve_in(
        &root,
        &[
            ("FLYWAY_CONFIG_FILES", "extra.conf, sub/more.conf"),
            ("FLYWAY_PLACEHOLDERS_C", "env"),
        ],
        &["migrate", "apply", "--placeholder", "NAME=from_flag"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("configFiles"), "{stderr}");
    assert_eq!(
        scalar(&db.url, "SELECT v FROM info").await,
        "from_flag|extra|more|env"
    );

    for (listed, error) in [
        (
            "extra.conf,x.toml",
            "error: Flyway configuration: FLYWAY_CONFIG_FILES names both .toml files (x.toml) and .conf files (extra.conf), which Flyway refuses too (\"Using both TOML configuration and CONF configuration is not supported\"); name files of one kind\n",
        ),
        (
            "extra.conf,nope.conf",
            "error: Flyway configuration nope.conf cannot be read; fix FLYWAY_CONFIG_FILES, which names it: No such file or directory (os error 2)\n",
        ),
    ] {
        let out = evolve_in(
            &root,
            &[("FLYWAY_CONFIG_FILES", listed)],
            &["migrate", "status"],
        );
        assert!(!out.status.success(), "{listed}");
        assert_eq!(text(&out.stderr), error, "{listed}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Flyway's command line also reads `flyway.conf`, `flyway.toml` and
/// `flyway.user.toml` in the home directory and `flyway.user.toml` in
/// the working directory (`ConfigUtils.getDefaultTomlConfigFileLocations`).
/// evolve reads the working directory's three, and never the home
/// directory's: a `~/flyway.conf` kept for other projects would switch
/// every project evolve runs in to Flyway's history table and settings.
#[tokio::test]
async fn flyway_user_toml_is_read_and_the_home_directory_is_not() {
    let alone = evolve_test::fresh_db("ev_home_alone").await;
    let db = evolve_test::fresh_db("ev_home_files").await;
    let (root, sql) = project("home_files");
    let home = temp_dir("home");
    let jdbc = flyway::jdbc(&db.url);
    write(&sql, "V1__plain.sql", "CREATE TABLE info0 (v text);\n");
    write(
        &home,
        "flyway.conf",
        "flyway.url=jdbc:postgresql://127.0.0.1:1/nowhere\nflyway.table=from_home\n",
    );
    let home_env = home.display().to_string();
    let env = [("HOME", home_env.as_str())];
    let sql_dir = sql.display().to_string();
    let out = evolve_in(
        &root,
        &env,
        &[
            "migrate",
            "apply",
            "--database-url",
            &alone.url,
            "--dir",
            &sql_dir,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        scalar(&alone.url, "SELECT count(*) FROM evolve_schema_history").await,
        "1",
        "the home directory's flyway.conf changed nothing"
    );
    assert!(
        !text(&out.stderr).contains("from_home"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        scalar(&alone.url, "to_regclass('from_home') IS NULL").await,
        "true"
    );
    std::fs::remove_file(sql.join("V1__plain.sql")).expect("rm");

    // The connection in flyway.toml, the user in flyway.user.toml.
    write(
        &sql,
        "V2__toml.sql",
        "CREATE TABLE info2 AS SELECT '${a}|${b}'::text AS v;\n",
    );
    write(
        &root,
        "flyway.toml",
        &format!(
            "[environments.default]\nurl = \"{}\"\n\n[flyway]\nlocations = [\"filesystem:{}\"]\n\n[flyway.placeholders]\na = \"toml\"\nb = \"toml\"\n",
            jdbc[0].1,
            sql.display()
        ),
    );
    write(
        &root,
        "flyway.user.toml",
        &format!(
            "[environments.default]\nuser = \"{}\"\n\n[flyway.placeholders]\nb = \"user\"\n",
            jdbc[1].1
        ),
    );
    let out = evolve_in(&root, &env, &["migrate", "apply"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(scalar(&db.url, "SELECT v FROM info2").await, "toml|user");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&home);
}

/// `[environments.<name>.flyway]` was once warned about, key by key, as
/// unknown and ignored. Flyway prefers its settings to `[flyway]`'s (and
/// to the `FLYWAY_*` variables, which set `[flyway]`'s), and takes its
/// placeholders whole: `[flyway.placeholders]` then has no say.
#[tokio::test]
async fn an_environments_flyway_table_overrides_flyway() {
    let Some(fw) = flyway::flyway() else { return };
    let by_evolve = evolve_test::fresh_db("ev_env_flyway").await;
    let by_flyway = evolve_test::fresh_db("fw_env_flyway").await;
    let (root, sql) = project("env_flyway");
    write(&sql, "V1__t.sql", "CREATE TABLE ${tname} (i int);\n");
    let jdbc = flyway::jdbc(&by_evolve.url);
    write(
        &root,
        "flyway.toml",
        &format!(
            "[flyway]\nenvironment = \"staging\"\nlocations = [\"filesystem:{}\"]\ntable = \"main_history\"\n\n[flyway.placeholders]\ntname = \"from_main\"\nother = \"x\"\n\n[environments.staging]\nurl = \"{}\"\nuser = \"{}\"\n\n[environments.staging.flyway]\ntable = \"env_history\"\n\n[environments.staging.flyway.placeholders]\ntname = \"from_env\"\n",
            sql.display(),
            jdbc[0].1,
            jdbc[1].1
        ),
    );
    let out = evolve_in(
        &root,
        &[("FLYWAY_TABLE", "variable_history")],
        &["migrate", "apply"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let config = [
        ("driver.environment", "staging"),
        ("flyway.table", "variable_history"),
        ("flyway.placeholders.tname", "from_main"),
        ("flyway.placeholders.other", "x"),
        ("driver.env.flyway.table", "env_history"),
        ("driver.env.flyway.placeholders.tname", "from_env"),
    ];
    fw.ok(&by_flyway.url, &sql, &config, "migrate");
    assert_eq!(
        history_of(&by_evolve.url, "env_history").await,
        history_of(&by_flyway.url, "env_history").await
    );
    let tables = "SELECT concat_ws(',', to_regclass('env_history'), to_regclass('from_env'), to_regclass('main_history'), to_regclass('variable_history'), to_regclass('from_main'))";
    assert_eq!(scalar(&by_evolve.url, tables).await, "env_history,from_env");
    assert_eq!(scalar(&by_flyway.url, tables).await, "env_history,from_env");

    // The environment's placeholders replace [flyway]'s: ${other} has no
    // value in either.
    write(&sql, "V2__o.sql", "CREATE TABLE ${other} (i int);\n");
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("V2__o.sql") && stderr.contains("other"),
        "{stderr}"
    );
    let outcome = fw
        .run(&by_flyway.url, &sql, &config, &["migrate"])
        .remove(0);
    assert!(
        !outcome.ok()
            && outcome
                .error()
                .contains("No value provided for placeholder"),
        "{}",
        outcome.error()
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `flyway.environment` in a .conf file was once taken as the
/// environment: Flyway refuses it ("Unknown configuration property"),
/// environments being flyway.toml's; so does evolve, before anything runs.
#[tokio::test]
async fn an_environment_in_a_conf_file_is_refused_by_both() {
    let Some(fw) = flyway::flyway() else { return };
    let db = evolve_test::fresh_db("ev_conf_environment").await;
    let (root, sql) = project("conf_environment");
    write(&sql, "V1__a.sql", "CREATE TABLE a (i int);\n");
    let jdbc = flyway::jdbc(&db.url);
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.environment=staging\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let outcome = fw.configure(
        &db.url,
        &sql,
        &[(&format!("@{}", root.join("flyway.conf").display()), "")],
    );
    assert!(!outcome.ok());
    assert!(
        outcome
            .error()
            .starts_with("Unknown configuration property: flyway.environment"),
        "{}",
        outcome.error()
    );
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: Flyway configuration flyway.conf: flyway.environment=staging in a .conf file: Flyway refuses it (\"Unknown configuration property: flyway.environment\"), as environments exist only in flyway.toml; remove the line, or move the configuration to a flyway.toml with [flyway] environment = \"staging\" and an [environments.staging] table\n"
    );
    assert_eq!(
        scalar(&db.url, "to_regclass('flyway_schema_history')").await,
        ""
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A misspelt key (`flyway.loactions`) was once a warning, and evolve ran
/// with its default locations; Flyway refuses the whole configuration
/// ("Unknown configuration property: flyway.loactions"). Both refuse it
/// now, before anything runs: no history table afterwards. Likewise a
/// misspelt key in a flyway.toml's `[flyway]` (Flyway's command line
/// refuses it, "Unknown: 'flyway.loactions'"; the driver reads no
/// flyway.toml), while a misspelt `FLYWAY_*` variable Flyway ignores.
#[tokio::test]
async fn a_misspelt_key_is_refused_by_both() {
    let Some(fw) = flyway::flyway() else { return };
    let db = evolve_test::fresh_db("ev_misspelt_key").await;
    let (root, sql) = project("misspelt_key");
    write(&sql, "V1__a.sql", "CREATE TABLE a (i int);\n");
    let jdbc = flyway::jdbc(&db.url);
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url={}\nflyway.user={}\nflyway.loactions=filesystem:{}\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let outcome = fw.configure(
        &db.url,
        &sql,
        &[(&format!("@{}", root.join("flyway.conf").display()), "")],
    );
    assert!(!outcome.ok());
    assert!(
        outcome
            .error()
            .starts_with("Unknown configuration property: flyway.loactions"),
        "{}",
        outcome.error()
    );
    let refusal = "error: Flyway setting flyway.loactions: Flyway knows no such setting and refuses the whole configuration (\"Unknown configuration property: flyway.loactions\"), so evolve runs nothing either; did you mean flyway.locations? correct the key\n";
    for verb in [
        &["migrate", "apply"][..],
        &["migrate", "status"],
        &["migrate", "validate"],
    ] {
        let out = evolve_in(&root, &[], verb);
        assert!(!out.status.success(), "{verb:?}");
        assert_eq!(text(&out.stderr), refusal, "{verb:?}");
    }
    assert_eq!(
        scalar(&db.url, "to_regclass('flyway_schema_history')").await,
        ""
    );

    std::fs::remove_file(root.join("flyway.conf")).expect("rm flyway.conf");
    write(
        &root,
        "flyway.toml",
        &format!(
            "[environments.default]\nurl = \"{}\"\nuser = \"{}\"\n\n[flyway]\nloactions = [\"filesystem:{}\"]\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: Flyway setting loactions in [flyway] of a flyway.toml: Flyway refuses it (\"Unknown: 'flyway.loactions'\"), so evolve runs nothing either; did you mean locations? correct the key\n"
    );
    assert_eq!(
        scalar(&db.url, "to_regclass('flyway_schema_history')").await,
        ""
    );

    // FLYWAY_LOACTIONS names no setting: Flyway ignores it (its
    // ConfigUtils.convertKey maps it to nothing), and so does evolve,
    // saying so.
    write(
        &root,
        "flyway.toml",
        &format!(
            "[environments.default]\nurl = \"{}\"\nuser = \"{}\"\n\n[flyway]\nlocations = [\"filesystem:{}\"]\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let out = evolve_in(
        &root,
        &[("FLYWAY_LOACTIONS", "filesystem:elsewhere")],
        &["migrate", "apply"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: Flyway configuration: environment variable FLYWAY_LOACTIONS names no Flyway setting; it is ignored, as Flyway ignores it; did you mean FLYWAY_LOCATIONS?"),
        "{stderr}"
    );
    assert_eq!(scalar(&db.url, "to_regclass('a')").await, "a");
    let _ = std::fs::remove_dir_all(&root);
}

/// Keys Flyway knows but evolve does not apply stay warnings: both run
/// the file the same way.
#[tokio::test]
async fn a_key_flyway_knows_but_evolve_does_not_apply_only_warns() {
    let Some(fw) = flyway::flyway() else { return };
    let by_evolve = evolve_test::fresh_db("ev_known_key").await;
    let by_flyway = evolve_test::fresh_db("fw_known_key").await;
    let (root, sql) = project("known_key");
    write(&sql, "V1__a.sql", "CREATE TABLE a (i int);\n");
    let keys = format!(
        "flyway.locations=filesystem:{}\nflyway.validateMigrationNaming=false\nflyway.postgresql.transactional.lock=false\n",
        sql.display()
    );
    // The driver names its database itself: shared.conf has no url.
    write(&root, "shared.conf", &keys);
    let jdbc = flyway::jdbc(&by_evolve.url);
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url={}\nflyway.user={}\n{keys}",
            jdbc[0].1, jdbc[1].1
        ),
    );
    fw.ok(
        &by_flyway.url,
        &sql,
        &[(&format!("@{}", root.join("shared.conf").display()), "")],
        "migrate",
    );
    let out = evolve_in(&root, &[], &["migrate", "apply"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    for key in [
        "flyway.postgresql.transactional.lock",
        "flyway.validateMigrationNaming",
    ] {
        assert!(
            stderr.contains(&format!(
                "warning: Flyway configuration: {key} is not supported by evolve; it is ignored"
            )),
            "{stderr}"
        );
    }
    assert_eq!(history(&by_evolve.url).await, history(&by_flyway.url).await);
    let _ = std::fs::remove_dir_all(&root);
}

/// `--flyway-config FILE` once replaced `./flyway.conf`; Flyway's
/// `-configFiles` adds to the working directory's file of its kind (its
/// `LegacyConfigurationManager` loads the default files, then the
/// `FLYWAY_CONFIG_FILES` ones, then `-configFiles`, each over the ones
/// before; `ModernConfigurationManager` the same for flyway.toml). The
/// driver, given both files in that order, stands for Flyway's command
/// line, which is not among the jars.
#[tokio::test]
async fn flyway_config_adds_to_the_working_directorys_file() {
    let Some(fw) = flyway::flyway() else { return };
    let by_evolve = evolve_test::fresh_db("ev_config_adds").await;
    let by_flyway = evolve_test::fresh_db("fw_config_adds").await;
    let (root, sql) = project("config_adds");
    write(
        &sql,
        "V1__p.sql",
        "CREATE TABLE info AS SELECT '${a}|${b}'::text AS v;\n",
    );
    let conf = |url: &str| {
        let jdbc = flyway::jdbc(url);
        format!(
            "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.table=project_history\nflyway.placeholders.a=from_default\nflyway.placeholders.b=from_default\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        )
    };
    write(&root, "flyway.conf", &conf(&by_evolve.url));
    // Flyway's copy, on its own database.
    write(&root, "flyway-fw.conf", &conf(&by_flyway.url));
    write(&root, "extra.conf", "flyway.placeholders.b=from_extra\n");
    let out = evolve_in(
        &root,
        &[],
        &["migrate", "apply", "--flyway-config", "extra.conf"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let conf = format!("@{}", root.join("flyway-fw.conf").display());
    let extra = format!("@{}", root.join("extra.conf").display());
    fw.ok(
        &by_flyway.url,
        &sql,
        &[(conf.as_str(), ""), (extra.as_str(), "")],
        "migrate",
    );
    assert_eq!(
        history_of(&by_evolve.url, "project_history").await,
        history_of(&by_flyway.url, "project_history").await
    );
    let value = "SELECT v FROM info";
    assert_eq!(
        scalar(&by_evolve.url, value).await,
        "from_default|from_extra"
    );
    assert_eq!(
        scalar(&by_flyway.url, value).await,
        "from_default|from_extra"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// FLYWAY_CONFIG_FILE_ENCODING was once "not supported by evolve; it is
/// ignored": Flyway reads .conf files in the encoding it names (a
/// flyway.toml always as UTF-8). evolve reads UTF-8 only, so UTF-8 (or
/// US-ASCII) passes in silence and another encoding is refused, with the
/// way out, before anything runs.
#[tokio::test]
async fn the_config_file_encoding_is_utf8_or_refused() {
    let db = evolve_test::fresh_db("ev_conf_encoding").await;
    let (root, sql) = project("conf_encoding");
    write(&sql, "V1__a.sql", "CREATE TABLE a (i int);\n");
    let jdbc = flyway::jdbc(&db.url);
    write(
        &root,
        "flyway.conf",
        &format!(
            "flyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let out = evolve_in(
        &root,
        &[("FLYWAY_CONFIG_FILE_ENCODING", "ISO-8859-1")],
        &["migrate", "apply"],
    );
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: Flyway setting FLYWAY_CONFIG_FILE_ENCODING=ISO-8859-1: evolve reads Flyway configuration files as UTF-8 only, so it cannot read them as ISO-8859-1 as Flyway would; convert the .conf files to UTF-8 (iconv -f ISO-8859-1 -t UTF-8) and unset FLYWAY_CONFIG_FILE_ENCODING (a flyway.toml is UTF-8 in Flyway too)\n"
    );
    let out = evolve_in(
        &root,
        &[("FLYWAY_CONFIG_FILE_ENCODING", "UTF-8")],
        &["migrate", "apply"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    // A flyway.toml is UTF-8 whatever the variable says, in Flyway too:
    // with no .conf file read, it stops nothing.
    std::fs::remove_file(root.join("flyway.conf")).unwrap();
    write(&sql, "V2__b.sql", "CREATE TABLE b (i int);\n");
    write(
        &root,
        "flyway.toml",
        &format!(
            "[environments.default]\nurl = \"{}\"\nuser = \"{}\"\n[flyway]\nlocations = [\"filesystem:{}\"]\n",
            jdbc[0].1,
            jdbc[1].1,
            sql.display()
        ),
    );
    let out = evolve_in(
        &root,
        &[("FLYWAY_CONFIG_FILE_ENCODING", "ISO-8859-1")],
        &["migrate", "apply"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(scalar(&db.url, "to_regclass('b')::text").await, "b");
    let _ = std::fs::remove_dir_all(&root);
}

/// Empty migrations (no bytes, only comments, only blank lines), as
/// Flyway 13.12.1 runs them: applied without a word, each recorded as a
/// `SQL` row (checksum 0 for a file of no bytes), versioned and
/// repeatable alike; each tool continues the other's history.
#[tokio::test]
async fn empty_migrations_are_recorded_as_flyway_records_them() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("empty");
    write(&dir, "V1__empty.sql", "");
    write(&dir, "V2__comments.sql", "-- nothing yet\n\n/* later */\n");
    write(&dir, "V3__blank.sql", "  \n\n");
    write(&dir, "V4__t.sql", "CREATE TABLE t (i int);\n");
    write(&dir, "R__empty.sql", "");
    let (ev, fwu) = same_history(fw, "empty", &dir, &[]).await;
    let rows = history(&ev).await;
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0][5], "0");
    assert_eq!(rows[4][4], "R__empty.sql");
    assert_eq!(flyway_info(fw, &ev, &dir), evolve_status(&ev, &dir));
    assert_eq!(flyway_info(fw, &fwu, &dir), evolve_status(&fwu, &dir));
    fw.ok(&ev, &dir, &[], "validate");
    evolve_ok(&fwu, &dir, "validate", &[]);
    // No word of the empty files on stderr.
    let db = evolve_test::fresh_db("ev_empty_quiet").await;
    let (_, stderr) = evolve_ok(&db.url, &dir, "apply", &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
