//! evolve and the real Flyway on the same history table: each continues
//! what the other wrote (versioned and repeatable migrations, failures and
//! repair, baseline, out-of-order files), `flyway validate` and `info` stay
//! clean, `evolve migrate status` agrees with `flyway info`, and the rows
//! evolve writes hold what Flyway writes for the same event (execution
//! times included).
//!
//! Flyway's configuration: a flyway.conf or flyway.toml in the working
//! directory configures evolve; the same keys configure Flyway on a second
//! database, and the two histories are compared row by row (target,
//! outOfOrder, validateOnMigrate, baselineOnMigrate, schemas and
//! defaultSchema, the naming keys, initSql). connectRetries, lockRetryCount
//! and an unknown key are evolve's alone to show.

#[path = "../../evolve-migrate/tests/flyway/mod.rs"]
mod flyway;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use flyway::Flyway;
use serde_json::Value;
use tokio_postgres::Client;

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-flyway-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write migration");
}

/// `evolve ARGS` on `url` and flyway_schema_history, with `--dir DIR` for
/// the verbs that read files.
fn evolve(url: &str, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(args);
    if args.get(1) != Some(&"baseline") {
        cmd.arg("--dir").arg(dir);
    }
    cmd.args([
        "--history-table",
        "flyway_schema_history",
        "--format",
        "json",
    ])
    .env("DATABASE_URL", url)
    .output()
    .expect("run evolve")
}

fn evolve_ok(url: &str, dir: &Path, args: &[&str]) -> String {
    let out = evolve(url, dir, args);
    assert!(
        out.status.success(),
        "evolve {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn connect(url: &str) -> Client {
    evolve_pg::connect(url, "evolve test")
        .await
        .expect("connect")
}

/// Flyway's state for an evolve state (applied out of order is Flyway's
/// OUT_OF_ORDER, told apart by `out_of_order`).
fn flyway_state(evolve_state: &str, out_of_order: bool) -> &'static str {
    match evolve_state {
        "applied" if out_of_order => "OUT_OF_ORDER",
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
        other => panic!("evolve state {other} has no Flyway counterpart"),
    }
}

type Line = (Option<String>, String, String, Option<i64>, String);

/// `evolve migrate status`, as (version, description, type, checksum,
/// state) in Flyway's words, sorted.
fn evolve_status(url: &str, dir: &Path, out_of_order: &[&str]) -> Vec<Line> {
    status_lines(&evolve_ok(url, dir, &["migrate", "status"]), out_of_order)
}

/// The lines of a `status --format json` document; the type is evolve's
/// own `history_type` (Flyway's type of the migration).
fn status_lines(json: &str, out_of_order: &[&str]) -> Vec<Line> {
    let report: Value = serde_json::from_str(json).expect("status is JSON");
    let mut lines: Vec<Line> = report["migrations"]
        .as_array()
        .expect("migrations")
        .iter()
        .map(|m| {
            let version = m["version"].as_str().map(str::to_string);
            let ooo = version
                .as_deref()
                .is_some_and(|v| out_of_order.contains(&v));
            (
                version,
                m["description"].as_str().expect("description").to_string(),
                m["history_type"]
                    .as_str()
                    .expect("history_type")
                    .to_string(),
                m["checksum"].as_i64(),
                flyway_state(m["state"].as_str().expect("state"), ooo).to_string(),
            )
        })
        .collect();
    lines.sort();
    lines
}

/// `flyway info` in the same shape, superseded runs of repeatable
/// migrations left out (evolve shows the latest run of each), and so are
/// files at the baseline version (evolve notes them on the baseline line)
/// and the schema creation row (no migration: the history comparisons
/// cover it).
fn flyway_info(fw: &Flyway, url: &str, dir: &Path, config: &[(&str, &str)]) -> Vec<Line> {
    let info = fw.ok(url, dir, config, "info");
    let mut lines: Vec<Line> = info
        .rows()
        .iter()
        .filter(|r| {
            r["state"] != "SUPERSEDED" && r["state"] != "BASELINE_IGNORED" && r["type"] != "SCHEMA"
        })
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

/// Every column but installed_on and execution_time, in installed order.
async fn history(client: &Client) -> Vec<Vec<String>> {
    history_of(client, "flyway_schema_history").await
}

/// [`history`] of another table.
async fn history_of(client: &Client, table: &str) -> Vec<Vec<String>> {
    client
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

/// `(type, execution_time)` of every row of `table`, in installed order.
async fn execution_times(client: &Client, table: &str) -> Vec<(String, i32)> {
    client
        .query(
            &format!("SELECT type, execution_time FROM {table} ORDER BY installed_rank"),
            &[],
        )
        .await
        .expect("read execution times")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn versioned(n: u32) -> String {
    format!("CREATE TABLE t{n} (id int PRIMARY KEY);\nINSERT INTO t{n} VALUES ({n});\n")
}

#[tokio::test]
async fn one_history_flyway_then_evolve_then_flyway() {
    let Some(fw) = flyway::flyway() else { return };
    let db = evolve_test::fresh_db("fw_shared").await;
    let dir = temp_dir("shared");
    for n in 1..=11 {
        write(&dir, &format!("V{n}__step_{n}.sql"), &versioned(n));
    }
    write(
        &dir,
        "R__view.sql",
        "CREATE OR REPLACE VIEW v AS SELECT 1 AS one;\n",
    );

    let outcomes = fw.run(&db.url, &dir, &[("flyway.target", "5")], &["migrate"]);
    outcomes[0].expect_ok("migrate to 5");
    evolve_ok(&db.url, &dir, &["migrate", "apply", "--target", "10"]);
    let client = connect(&db.url).await;
    let ranks: Vec<String> = history(&client)
        .await
        .iter()
        .map(|r| r[4].clone())
        .collect();
    assert_eq!(ranks.len(), 11, "{ranks:?}");
    assert_eq!(ranks[10], "V10__step_10.sql", "{ranks:?}");

    fw.ok(&db.url, &dir, &[], "migrate");
    // The repeatable changes; evolve runs it again.
    write(
        &dir,
        "R__view.sql",
        "CREATE OR REPLACE VIEW v AS SELECT 1 AS one, 2 AS two;\n",
    );
    evolve_ok(&db.url, &dir, &["migrate", "apply"]);
    let outcomes = fw.run(&db.url, &dir, &[], &["validate", "info"]);
    outcomes[0].expect_ok("validate");
    for row in outcomes[1].rows() {
        assert!(
            row["state"] == "SUCCESS" || row["state"] == "SUPERSEDED",
            "{row}"
        );
    }
    assert_eq!(
        flyway_info(fw, &db.url, &dir, &[]),
        evolve_status(&db.url, &dir, &[])
    );
    evolve_ok(&db.url, &dir, &["migrate", "validate"]);

    // Rows evolve wrote look like the rows Flyway wrote.
    let rows = history(&client).await;
    assert_eq!(rows.len(), 13);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], (i + 1).to_string());
        assert_eq!(row[3], "SQL");
        assert_eq!(row[6], "postgres");
        assert_eq!(row[7], "true");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn failed_migrations_are_repaired_by_either_tool() {
    let Some(fw) = flyway::flyway() else { return };
    let db = evolve_test::fresh_db("fw_failed").await;
    let dir = temp_dir("failed");
    write(&dir, "V1__base.sql", &versioned(1));
    // Outside a transaction in both tools; fails: no table t2 yet.
    let failing = "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY t2_idx ON t2 (id);\n";
    write(&dir, "V2__index.sql", failing);

    // evolve fails, Flyway sees the failure and repairs it.
    let out = evolve(&db.url, &dir, &["migrate", "apply"]);
    assert!(!out.status.success());
    assert_eq!(
        flyway_info(fw, &db.url, &dir, &[]),
        evolve_status(&db.url, &dir, &[])
    );
    let outcomes = fw.run(&db.url, &dir, &[], &["validate", "repair"]);
    assert!(
        !outcomes[0].ok(),
        "flyway validate passes a failed migration"
    );
    assert_eq!(outcomes[1].expect_ok("repair").0["removed"], 1);
    let fixed = "-- evolve:no-transaction\nCREATE TABLE t2 (id int);\nCREATE INDEX CONCURRENTLY t2_idx ON t2 (id);\n";
    write(&dir, "V2__index.sql", fixed);
    evolve_ok(&db.url, &dir, &["migrate", "apply"]);
    let client = connect(&db.url).await;
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 't2_idx'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);
    fw.ok(&db.url, &dir, &[], "validate");

    // A failed file outside a transaction leaves no row in Flyway's history
    // on PostgreSQL: both see it pending.
    write(
        &dir,
        "V3__index.sql",
        "CREATE INDEX CONCURRENTLY t3_idx ON t3 (id);\n",
    );
    let outcomes = fw.run(&db.url, &dir, &[], &["migrate"]);
    assert!(
        !outcomes[0].ok(),
        "flyway migrate succeeded on a missing table"
    );
    let info = flyway_info(fw, &db.url, &dir, &[]);
    assert_eq!(info.last().map(|l| l.4.as_str()), Some("PENDING"));
    assert_eq!(info, evolve_status(&db.url, &dir, &[]));

    // evolve fails and repairs, Flyway continues.
    write(
        &dir,
        "V3__index.sql",
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY t3_idx ON t3 (id);\n",
    );
    let out = evolve(&db.url, &dir, &["migrate", "apply"]);
    assert!(!out.status.success());
    let info = flyway_info(fw, &db.url, &dir, &[]);
    assert_eq!(info.last().map(|l| l.4.as_str()), Some("FAILED"));
    assert_eq!(info, evolve_status(&db.url, &dir, &[]));
    let out = evolve(&db.url, &dir, &["migrate", "validate"]);
    assert!(!out.status.success());
    evolve_ok(&db.url, &dir, &["migrate", "repair"]);
    // Flyway refuses a file that mixes transactional and non-transactional
    // statements (mixed = false): the table comes from elsewhere.
    client
        .batch_execute("CREATE TABLE t3 (id int)")
        .await
        .expect("create t3");
    // Flyway's transactional lock would make its own CREATE INDEX
    // CONCURRENTLY wait forever.
    fw.ok(
        &db.url,
        &dir,
        &[("flyway.postgresql.transactional.lock", "false")],
        "migrate",
    );
    let outcomes = fw.run(&db.url, &dir, &[], &["validate"]);
    outcomes[0].expect_ok("validate");
    evolve_ok(&db.url, &dir, &["migrate", "validate"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn baseline_by_either_tool_writes_the_same_row() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("baseline");
    for n in 1..=4 {
        write(&dir, &format!("V{n}__step_{n}.sql"), &versioned(n));
    }
    let config = [("flyway.baselineVersion", "2")];

    let by_flyway = evolve_test::fresh_db("fw_baseline").await;
    fw.ok(&by_flyway.url, &dir, &config, "baseline");
    assert_eq!(
        flyway_info(fw, &by_flyway.url, &dir, &config),
        evolve_status(&by_flyway.url, &dir, &[])
    );
    let by_evolve = evolve_test::fresh_db("ev_baseline").await;
    evolve_ok(
        &by_evolve.url,
        &dir,
        &["migrate", "baseline", "--version", "2"],
    );
    let fw_rows = history(&connect(&by_flyway.url).await).await;
    let ev_rows = history(&connect(&by_evolve.url).await).await;
    assert_eq!(ev_rows, fw_rows);
    // Flyway writes 0 as the execution time of a BASELINE row; so does evolve.
    let fw_times = execution_times(&connect(&by_flyway.url).await, "flyway_schema_history").await;
    let ev_times = execution_times(&connect(&by_evolve.url).await, "flyway_schema_history").await;
    assert_eq!(fw_times, [("BASELINE".to_string(), 0)]);
    assert_eq!(ev_times, fw_times);

    // Each continues the other's baseline.
    evolve_ok(&by_flyway.url, &dir, &["migrate", "apply"]);
    fw.ok(&by_evolve.url, &dir, &config, "migrate");
    for db in [&by_flyway, &by_evolve] {
        fw.ok(&db.url, &dir, &config, "validate");
        assert_eq!(
            flyway_info(fw, &db.url, &dir, &config),
            evolve_status(&db.url, &dir, &[])
        );
    }
    assert_eq!(
        history(&connect(&by_flyway.url).await).await,
        history(&connect(&by_evolve.url).await).await
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn out_of_order_files_either_way() {
    let Some(fw) = flyway::flyway() else { return };
    let ooo = [("flyway.outOfOrder", "true")];
    for (hint, evolve_first) in [("fw_ooo_a", true), ("fw_ooo_b", false)] {
        let db = evolve_test::fresh_db(hint).await;
        let dir = temp_dir(hint);
        write(&dir, "V1__one.sql", &versioned(1));
        write(&dir, "V3__three.sql", &versioned(3));
        if evolve_first {
            evolve_ok(&db.url, &dir, &["migrate", "apply"]);
        } else {
            fw.ok(&db.url, &dir, &[], "migrate");
        }
        write(&dir, "V2__two.sql", &versioned(2));
        assert_eq!(
            flyway_info(fw, &db.url, &dir, &[]),
            evolve_status(&db.url, &dir, &[])
        );
        if evolve_first {
            fw.ok(&db.url, &dir, &ooo, "migrate");
        } else {
            evolve_ok(&db.url, &dir, &["migrate", "apply", "--out-of-order"]);
        }
        fw.ok(&db.url, &dir, &ooo, "validate");
        assert_eq!(
            flyway_info(fw, &db.url, &dir, &ooo),
            evolve_status(&db.url, &dir, &["2"])
        );
        evolve_ok(&db.url, &dir, &["migrate", "validate"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn repair_of_edited_and_deleted_files_writes_what_flyway_writes() {
    let Some(fw) = flyway::flyway() else { return };
    let dir = temp_dir("repair");
    for n in 1..=4 {
        write(&dir, &format!("V{n}__step_{n}.sql"), &versioned(n));
    }
    let by_flyway = evolve_test::fresh_db("fw_repair").await;
    let by_evolve = evolve_test::fresh_db("ev_repair").await;
    fw.ok(&by_flyway.url, &dir, &[], "migrate");
    fw.ok(&by_evolve.url, &dir, &[], "migrate");
    // V2 edited, V3 deleted (V4, the latest, stays: a missing latest
    // version is one a newer deploy applied, which repair leaves alone).
    write(
        &dir,
        "V2__step_2.sql",
        &format!("{}-- edited\n", versioned(2)),
    );
    std::fs::remove_file(dir.join("V3__step_3.sql")).expect("rm");
    fw.ok(&by_flyway.url, &dir, &[], "repair");
    evolve_ok(&by_evolve.url, &dir, &["migrate", "repair"]);
    assert_eq!(
        history(&connect(&by_evolve.url).await).await,
        history(&connect(&by_flyway.url).await).await
    );
    // The DELETE row's execution time: 0 from either tool.
    for db in [&by_flyway, &by_evolve] {
        let times = execution_times(&connect(&db.url).await, "flyway_schema_history").await;
        let deletes: Vec<i32> = times
            .iter()
            .filter(|(t, _)| t == "DELETE")
            .map(|(_, ms)| *ms)
            .collect();
        assert_eq!(deletes, [0], "{times:?}");
    }
    for db in [&by_flyway, &by_evolve] {
        fw.ok(&db.url, &dir, &[], "validate");
        evolve_ok(&db.url, &dir, &["migrate", "validate"]);
        assert_eq!(
            flyway_info(fw, &db.url, &dir, &[]),
            evolve_status(&db.url, &dir, &[])
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn evolve_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(args).current_dir(cwd).env_remove("DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run evolve")
}

/// A `flyway.conf` in the working directory, and a `flyway.toml` given
/// with --flyway-config under FLYWAY_* variables, configure evolve as they
/// configure Flyway: the database, the locations, the table, the
/// placeholders. Keys evolve does not apply are named in warnings.
#[tokio::test]
async fn flyway_configuration_files_and_environment() {
    let Some(fw) = flyway::flyway() else { return };
    let db = evolve_test::fresh_db("fw_conf").await;
    let project = temp_dir("conf");
    let sql = project.join("sql");
    std::fs::create_dir_all(&sql).expect("mkdir");
    write(
        &sql,
        "V1__named.sql",
        "CREATE TABLE ${table_name} (id int);\n",
    );
    let jdbc = flyway::jdbc(&db.url);
    let conf = format!(
        // Java properties' other separators: a space (the url's `:` is
        // its value's), a colon, spaces around `=`.
        "# Flyway's own file\nflyway.url {}\n  flyway.user: {}\nflyway.locations=filesystem:{}\nflyway.table = my_history\nflyway.placeholders.table_name=from_conf\nflyway.initSql=SET application_name = 'flyway'\nflyway.group=true\n",
        jdbc[0].1,
        jdbc[1].1,
        sql.display()
    );
    std::fs::write(project.join("flyway.conf"), &conf).expect("write conf");
    let out = evolve_in(&project, &[], &["migrate", "apply"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // initSql and group are applied, so nothing is said of them.
    assert!(!stderr.contains("warning"), "{stderr}");
    let client = connect(&db.url).await;
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM my_history h JOIN pg_tables t ON t.tablename = 'from_conf' WHERE h.success",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);
    // Flyway reads the same file and finds its history as evolve left it.
    let conf_arg = format!("@{}", project.join("flyway.conf").display());
    let outcomes = fw.run(
        &db.url,
        &sql,
        &[(conf_arg.as_str(), "")],
        &["validate", "info"],
    );
    outcomes[0].expect_ok("validate");
    assert_eq!(outcomes[1].rows()[0]["state"], "SUCCESS");

    // flyway.toml, named on the command line; the environment wins.
    std::fs::remove_file(project.join("flyway.conf")).expect("rm");
    write(
        &sql,
        "V2__named.sql",
        "CREATE TABLE ${table_name} (id int);\n",
    );
    // Applied only under mixed = true (FLYWAY_MIXED).
    write(
        &sql,
        "V3__mixed.sql",
        "CREATE TABLE from_mixed (id int);\nCREATE INDEX CONCURRENTLY from_mixed_i ON from_mixed (id);\n",
    );
    let toml = format!(
        "[environments.default]\nurl = \"{}\"\nuser = \"{}\"\n\n[flyway]\nlocations = [\"filesystem:{}\"]\ntable = \"my_history\"\n\n[flyway.placeholders]\ntable_name = \"from_toml\"\n",
        jdbc[0].1,
        jdbc[1].1,
        sql.display()
    );
    let toml_path = project.join("settings.toml");
    std::fs::write(&toml_path, toml).expect("write toml");
    let toml_arg = toml_path.display().to_string();
    let out = evolve_in(
        &project,
        &[
            ("FLYWAY_PLACEHOLDERS_TABLE_NAME", "from_env"),
            ("FLYWAY_CONNECT_RETRIES", "3"),
            ("FLYWAY_MIXED", "true"),
        ],
        &["migrate", "apply", "--flyway-config", &toml_arg],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let tables: Vec<String> = client
        .query(
            "SELECT tablename::text FROM pg_tables WHERE tablename LIKE 'from_%' ORDER BY 1",
            &[],
        )
        .await
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(tables, ["from_conf", "from_env", "from_mixed"]);
    let _ = std::fs::remove_dir_all(&project);
}

/// A project as Flyway users lay it out: `flyway.conf` (or `flyway.toml`)
/// beside the `sql` directory. evolve runs in it and reads the file from
/// the working directory; Flyway's driver gets the same keys in
/// `shared.conf` (it names the database itself).
struct Project {
    root: PathBuf,
    sql: PathBuf,
}

fn project(hint: &str) -> Project {
    let root = temp_dir(hint);
    let sql = root.join("sql");
    std::fs::create_dir_all(&sql).expect("mkdir");
    Project { root, sql }
}

impl Project {
    /// `flyway.conf` naming the database of `url`, the locations and
    /// `keys`; `shared.conf` with the locations and `keys`.
    fn conf(&self, url: &str, keys: &[(&str, &str)]) {
        let mut shared = format!("flyway.locations=filesystem:{}\n", self.sql.display());
        for (k, v) in keys {
            shared.push_str(&format!("{k}={v}\n"));
        }
        let mut conf = String::from("# written by the test\n");
        for (k, v) in flyway::jdbc(url) {
            conf.push_str(&format!("{k}={v}\n"));
        }
        conf.push_str(&shared);
        let _ = std::fs::remove_file(self.root.join("flyway.toml"));
        std::fs::write(self.root.join("flyway.conf"), conf).expect("write flyway.conf");
        std::fs::write(self.root.join("shared.conf"), shared).expect("write shared.conf");
    }

    /// What Flyway's driver reads: `@shared.conf`.
    fn shared(&self) -> String {
        format!("@{}", self.root.join("shared.conf").display())
    }

    /// Real Flyway with the shared keys on `url`.
    fn flyway(&self, fw: &Flyway, url: &str, command: &str) -> flyway::Outcome {
        let shared = self.shared();
        fw.ok(url, &self.sql, &[(shared.as_str(), "")], command)
    }

    /// `flyway info` with the shared keys.
    fn flyway_info(&self, fw: &Flyway, url: &str) -> Vec<Line> {
        let shared = self.shared();
        flyway_info(fw, url, &self.sql, &[(shared.as_str(), "")])
    }

    fn evolve(&self, args: &[&str]) -> Output {
        evolve_in(&self.root, &[], args)
    }

    /// evolve in the project; its stdout and stderr.
    fn evolve_ok(&self, args: &[&str]) -> (String, String) {
        let out = self.evolve(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "evolve {args:?} failed:\n{stdout}{stderr}"
        );
        (stdout, stderr)
    }

    /// `evolve migrate status` in the project, against `url`.
    fn status(&self, url: &str, keys: &[(&str, &str)], out_of_order: &[&str]) -> Vec<Line> {
        self.conf(url, keys);
        let (stdout, _) = self.evolve_ok(&["migrate", "status", "--format", "json"]);
        status_lines(&stdout, out_of_order)
    }
}

/// `target` and `outOfOrder` from a flyway.conf in the working directory:
/// evolve and Flyway, each on its own database with the same keys, write
/// the same history; `evolve migrate status` agrees with `flyway info`.
#[tokio::test]
async fn flyway_conf_target_then_out_of_order() {
    let Some(fw) = flyway::flyway() else { return };
    let p = project("conf_target");
    for n in [1, 2, 4, 5] {
        write(&p.sql, &format!("V{n}__step_{n}.sql"), &versioned(n));
    }
    write(
        &p.sql,
        "R__view.sql",
        "CREATE OR REPLACE VIEW v AS SELECT 1 AS one;\n",
    );
    let by_evolve = evolve_test::fresh_db("ev_conf_target").await;
    let by_flyway = evolve_test::fresh_db("fw_conf_target").await;
    let scripts = |rows: &[Vec<String>]| rows.iter().map(|r| r[4].clone()).collect::<Vec<_>>();

    // target = 4: V1, V2, V4, and the repeatable (target is about versions).
    let target = [("flyway.target", "4")];
    p.conf(&by_evolve.url, &target);
    p.evolve_ok(&["migrate", "apply"]);
    p.flyway(fw, &by_flyway.url, "migrate");
    let ev = history(&connect(&by_evolve.url).await).await;
    assert_eq!(
        scripts(&ev),
        [
            "V1__step_1.sql",
            "V2__step_2.sql",
            "V4__step_4.sql",
            "R__view.sql"
        ]
    );
    assert_eq!(ev, history(&connect(&by_flyway.url).await).await);

    // V3 comes late: outOfOrder = true applies it below V4, then V5.
    write(&p.sql, "V3__step_3.sql", &versioned(3));
    let ooo = [("flyway.outOfOrder", "true")];
    p.conf(&by_evolve.url, &ooo);
    p.evolve_ok(&["migrate", "apply"]);
    p.flyway(fw, &by_flyway.url, "migrate");
    let ev = history(&connect(&by_evolve.url).await).await;
    assert_eq!(scripts(&ev)[4..], ["V3__step_3.sql", "V5__step_5.sql"]);
    assert_eq!(ev, history(&connect(&by_flyway.url).await).await);
    for db in [&by_evolve, &by_flyway] {
        p.flyway(fw, &db.url, "validate");
        assert_eq!(p.flyway_info(fw, &db.url), p.status(&db.url, &ooo, &["3"]));
    }

    // validateOnMigrate = false: an applied file edited since does not stop
    // either tool from applying the next one.
    write(
        &p.sql,
        "V1__step_1.sql",
        &format!("{}-- edited\n", versioned(1)),
    );
    write(&p.sql, "V6__step_6.sql", &versioned(6));
    let out = p.evolve(&["migrate", "apply"]);
    assert!(!out.status.success(), "an edited file was not refused");
    let lax = [("flyway.validateOnMigrate", "false")];
    p.conf(&by_evolve.url, &lax);
    p.evolve_ok(&["migrate", "apply"]);
    p.flyway(fw, &by_flyway.url, "migrate");
    let ev = history(&connect(&by_evolve.url).await).await;
    assert_eq!(
        scripts(&ev).last().map(String::as_str),
        Some("V6__step_6.sql")
    );
    assert_eq!(ev, history(&connect(&by_flyway.url).await).await);
    let _ = std::fs::remove_dir_all(&p.root);
}

/// `baselineOnMigrate` with `baselineVersion`: a schema that holds
/// something but has no history is baselined first, as Flyway does it; an
/// empty one is not. Execution times: 0 for the BASELINE row from either
/// tool, the time the file took (milliseconds) for SQL rows.
#[tokio::test]
async fn flyway_conf_baseline_on_migrate() {
    let Some(fw) = flyway::flyway() else { return };
    let p = project("conf_bom");
    for n in 1..=4 {
        write(&p.sql, &format!("V{n}__step_{n}.sql"), &versioned(n));
    }
    write(
        &p.sql,
        "V3__step_3.sql",
        &format!("SELECT pg_sleep(0.25);\n{}", versioned(3)),
    );
    let keys = [
        ("flyway.baselineOnMigrate", "true"),
        ("flyway.baselineVersion", "2"),
    ];

    let by_evolve = evolve_test::fresh_db("ev_conf_bom").await;
    let by_flyway = evolve_test::fresh_db("fw_conf_bom").await;
    for db in [&by_evolve, &by_flyway] {
        connect(&db.url)
            .await
            .batch_execute("CREATE TABLE legacy (id int)")
            .await
            .expect("legacy table");
    }
    p.conf(&by_evolve.url, &keys);
    // --dry-run writes nothing, and runs only what the baseline leaves.
    let (stdout, _) = p.evolve_ok(&["migrate", "apply", "--dry-run", "--format", "json"]);
    let would: Vec<String> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "would_apply")
        .map(|e| e["script"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(would, ["V3__step_3.sql", "V4__step_4.sql"], "{stdout}");
    let created: bool = connect(&by_evolve.url)
        .await
        .query_one(
            "SELECT to_regclass('flyway_schema_history') IS NOT NULL",
            &[],
        )
        .await
        .expect("look for the history")
        .get(0);
    assert!(!created, "--dry-run created the history table");
    let (stdout, _) = p.evolve_ok(&["migrate", "apply", "--format", "json"]);
    let baselined: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "baselined")
        .unwrap_or_else(|| panic!("no baselined event:\n{stdout}"));
    assert_eq!(baselined["version"], "2");
    assert_eq!(
        baselined["non_empty_schemas"],
        serde_json::json!(["public"])
    );
    p.flyway(fw, &by_flyway.url, "migrate");
    let ev = history(&connect(&by_evolve.url).await).await;
    assert_eq!(
        ev.iter()
            .map(|r| (r[1].as_str(), r[3].as_str()))
            .collect::<Vec<_>>(),
        [("2", "BASELINE"), ("3", "SQL"), ("4", "SQL")]
    );
    assert_eq!(ev, history(&connect(&by_flyway.url).await).await);
    for db in [&by_evolve, &by_flyway] {
        let times = execution_times(&connect(&db.url).await, "flyway_schema_history").await;
        assert_eq!(times[0], ("BASELINE".to_string(), 0), "{times:?}");
        // V3 sleeps 250 ms; nothing takes anywhere near a minute.
        assert!((250..60_000).contains(&times[1].1), "{times:?}");
        assert!((0..60_000).contains(&times[2].1), "{times:?}");
        p.flyway(fw, &db.url, "validate");
        assert_eq!(p.flyway_info(fw, &db.url), p.status(&db.url, &keys, &[]));
    }

    // An empty schema: no baseline, every file runs.
    let empty_evolve = evolve_test::fresh_db("ev_conf_bom_empty").await;
    let empty_flyway = evolve_test::fresh_db("fw_conf_bom_empty").await;
    p.conf(&empty_evolve.url, &keys);
    p.evolve_ok(&["migrate", "apply"]);
    p.flyway(fw, &empty_flyway.url, "migrate");
    let ev = history(&connect(&empty_evolve.url).await).await;
    assert_eq!(ev.len(), 4, "{ev:?}");
    assert!(ev.iter().all(|r| r[3] == "SQL"), "{ev:?}");
    assert_eq!(ev, history(&connect(&empty_flyway.url).await).await);
    let _ = std::fs::remove_dir_all(&p.root);
}

/// `schemas` and `defaultSchema`: the missing schemas are created and
/// recorded (Flyway's SCHEMA row at rank 0), the history lives in the
/// default schema, and unqualified names in the files land there, as
/// Flyway puts it first on the search_path.
#[tokio::test]
async fn flyway_conf_schemas_and_default_schema() {
    let Some(fw) = flyway::flyway() else { return };
    let p = project("conf_schemas");
    write(
        &p.sql,
        "V1__tables.sql",
        "CREATE TABLE t1 (id int);\nCREATE TABLE extra.t2 (id int);\nCOMMENT ON TABLE t1 IS '${flyway:defaultSchema}';\n",
    );
    write(
        &p.sql,
        "R__view.sql",
        "CREATE OR REPLACE VIEW v AS SELECT id FROM t1;\n",
    );
    let keys = [
        ("flyway.defaultSchema", "app"),
        ("flyway.schemas", "app,extra"),
    ];
    let by_evolve = evolve_test::fresh_db("ev_conf_schemas").await;
    let by_flyway = evolve_test::fresh_db("fw_conf_schemas").await;
    p.conf(&by_evolve.url, &keys);
    p.evolve_ok(&["migrate", "apply"]);
    p.flyway(fw, &by_flyway.url, "migrate");

    let table = "app.flyway_schema_history";
    let ev = history_of(&connect(&by_evolve.url).await, table).await;
    assert_eq!(
        ev[0],
        [
            "0",
            "<null>",
            "<< Flyway Schema Creation >>",
            "SCHEMA",
            "\"app\",\"extra\"",
            "<null>",
            "postgres",
            "true"
        ]
    );
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert_eq!(ev, history_of(&connect(&by_flyway.url).await, table).await);
    for db in [&by_evolve, &by_flyway] {
        let client = connect(&db.url).await;
        let objects: Vec<(String, String, String)> = client
            .query(
                "SELECT n.nspname::text, c.relname::text, coalesce(obj_description(c.oid, 'pg_class'), '')
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relname IN ('t1', 't2', 'v') ORDER BY 2",
                &[],
            )
            .await
            .expect("objects")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(
            objects,
            [
                ("app".into(), "t1".into(), "app".into()),
                ("extra".into(), "t2".into(), String::new()),
                ("app".into(), "v".into(), String::new()),
            ]
        );
        assert_eq!(
            execution_times(&client, table).await[0],
            ("SCHEMA".to_string(), 0)
        );
        p.flyway(fw, &db.url, "validate");
        assert_eq!(p.flyway_info(fw, &db.url), p.status(&db.url, &keys, &[]));
    }
    let _ = std::fs::remove_dir_all(&p.root);
}

/// Flyway's naming keys from a flyway.toml: other prefixes, separator and
/// suffixes decide which files are migrations and callbacks; a `.sql` file
/// is then none, for Flyway and evolve alike.
#[tokio::test]
async fn flyway_toml_custom_prefix_separator_and_suffixes() {
    let Some(fw) = flyway::flyway() else { return };
    let p = project("toml_naming");
    write(&p.sql, "M1-create_t.pgsql", "CREATE TABLE t (id int);\n");
    write(
        &p.sql,
        "M1.1-more_t.ddl",
        "ALTER TABLE t ADD COLUMN name text;\n",
    );
    write(
        &p.sql,
        "Rep-view.pgsql",
        "CREATE OR REPLACE VIEW v AS SELECT id, name FROM t;\n",
    );
    write(
        &p.sql,
        "afterMigrate.pgsql",
        "CREATE TABLE IF NOT EXISTS cb_log (n int);\nINSERT INTO cb_log VALUES (1);\n",
    );
    // Not a migration under this naming: it would fail if it ran.
    write(&p.sql, "V9__not_a_migration_here.sql", "SELECT 1/0;\n");
    let naming = [
        ("flyway.sqlMigrationPrefix", "M"),
        ("flyway.repeatableSqlMigrationPrefix", "Rep"),
        ("flyway.sqlMigrationSeparator", "-"),
        ("flyway.sqlMigrationSuffixes", ".pgsql,.ddl"),
    ];
    let toml = |url: &str| {
        let jdbc = flyway::jdbc(url);
        let text = format!(
            "[environments.default]\nurl = \"{}\"\nuser = \"{}\"\n\n[flyway]\nlocations = [\"filesystem:{}\"]\nsqlMigrationPrefix = \"M\"\nrepeatableSqlMigrationPrefix = \"Rep\"\nsqlMigrationSeparator = \"-\"\nsqlMigrationSuffixes = [\".pgsql\", \".ddl\"]\n",
            jdbc[0].1,
            jdbc[1].1,
            p.sql.display()
        );
        let _ = std::fs::remove_file(p.root.join("flyway.conf"));
        std::fs::write(p.root.join("flyway.toml"), text).expect("write flyway.toml");
    };
    let by_evolve = evolve_test::fresh_db("ev_toml_naming").await;
    let by_flyway = evolve_test::fresh_db("fw_toml_naming").await;
    toml(&by_evolve.url);
    let (_, stderr) = p.evolve_ok(&["migrate", "apply"]);
    assert!(!stderr.contains("warning"), "{stderr}");
    fw.ok(&by_flyway.url, &p.sql, &naming, "migrate");
    let ev = history(&connect(&by_evolve.url).await).await;
    assert_eq!(
        ev.iter()
            .map(|r| (r[2].as_str(), r[4].as_str()))
            .collect::<Vec<_>>(),
        [
            ("create t", "M1-create_t.pgsql"),
            ("more t", "M1.1-more_t.ddl"),
            ("view", "Rep-view.pgsql")
        ]
    );
    assert_eq!(ev, history(&connect(&by_flyway.url).await).await);
    for db in [&by_evolve, &by_flyway] {
        let runs: i64 = connect(&db.url)
            .await
            .query_one("SELECT count(*) FROM cb_log", &[])
            .await
            .expect("the afterMigrate callback ran")
            .get(0);
        assert_eq!(runs, 1);
        fw.ok(&db.url, &p.sql, &naming, "validate");
        toml(&db.url);
        let (stdout, _) = p.evolve_ok(&["migrate", "status", "--format", "json"]);
        assert_eq!(
            flyway_info(fw, &db.url, &p.sql, &naming),
            status_lines(&stdout, &[])
        );
    }
    // `migrate new` names the next file the same way.
    toml(&by_evolve.url);
    let (stdout, _) = p.evolve_ok(&["migrate", "new", "next step"]);
    assert!(p.sql.join("M2-next_step.pgsql").is_file(), "{stdout}");
    let _ = std::fs::remove_dir_all(&p.root);
}

/// `initSql` runs on every connection, placeholders replaced, before the
/// history is looked for: its search_path places the history and the
/// files' objects, and its settings hold in every migration (they outlast
/// the RESET ALL evolve ends each migration with), as in Flyway.
#[tokio::test]
async fn flyway_conf_init_sql() {
    let Some(fw) = flyway::flyway() else { return };
    let p = project("conf_init_sql");
    let seen =
        "INSERT INTO seen VALUES (current_setting('evolve_test.marker'), current_schema());\n";
    write(
        &p.sql,
        "V1__seen.sql",
        &format!("CREATE TABLE seen (marker text, in_schema text);\n{seen}"),
    );
    write(&p.sql, "V2__seen_again.sql", seen);
    let keys = [
        (
            "flyway.initSql",
            "SET search_path = app_data, public; SET evolve_test.marker = '${marker}'",
        ),
        ("flyway.placeholders.marker", "from_init"),
    ];
    let by_evolve = evolve_test::fresh_db("ev_conf_init").await;
    let by_flyway = evolve_test::fresh_db("fw_conf_init").await;
    for db in [&by_evolve, &by_flyway] {
        connect(&db.url)
            .await
            .batch_execute("CREATE SCHEMA app_data")
            .await
            .expect("schema");
    }
    // In a flyway.conf, `${marker}` would be the environment variable
    // `marker` (Flyway expands `${NAME}` in the file before reading it):
    // evolve gets initSql from FLYWAY_INIT_SQL here, Flyway's driver from
    // its properties, neither expanded.
    p.conf(&by_evolve.url, &keys[1..]);
    let mut shared = std::fs::read_to_string(p.root.join("shared.conf")).expect("shared");
    shared.push_str(&format!("{}={}\n", keys[0].0, keys[0].1));
    std::fs::write(p.root.join("shared.conf"), shared).expect("write shared.conf");
    let out = evolve_in(
        &p.root,
        &[("FLYWAY_INIT_SQL", keys[0].1)],
        &["migrate", "apply"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    p.flyway(fw, &by_flyway.url, "migrate");
    let table = "app_data.flyway_schema_history";
    let ev = history_of(&connect(&by_evolve.url).await, table).await;
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev, history_of(&connect(&by_flyway.url).await, table).await);
    for db in [&by_evolve, &by_flyway] {
        let rows: Vec<(String, String)> = connect(&db.url)
            .await
            .query("SELECT marker, in_schema FROM app_data.seen", &[])
            .await
            .expect("seen")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let expected = ("from_init".to_string(), "app_data".to_string());
        assert_eq!(rows, [expected.clone(), expected]);
    }

    // A failing initSql stops the run, naming it, the line and the error.
    p.conf(
        &by_evolve.url,
        &[("flyway.initSql", "SELECT 1; SELECT no_such_column")],
    );
    let out = p.evolve(&["migrate", "apply"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("error: initSql failed at line 1: ERROR 42703: column \"no_such_column\" does not exist; fix initSql"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&p.root);
}

/// A key no Flyway knows: Flyway refuses the configuration, and so does
/// evolve (it once named the key in a warning and ran), before anything
/// runs.
#[tokio::test]
async fn flyway_conf_unknown_key_is_refused_as_flyway_refuses_it() {
    let Some(fw) = flyway::flyway() else { return };
    let p = project("conf_foo");
    write(&p.sql, "V1__one.sql", &versioned(1));
    let db = evolve_test::fresh_db("ev_conf_foo").await;
    p.conf(&db.url, &[("flyway.foo", "bar")]);
    let out = p.evolve(&["migrate", "apply"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("\"Unknown configuration property: flyway.foo\""),
        "{stderr}"
    );
    let client = connect(&db.url).await;
    let table: Option<String> = client
        .query_one("SELECT to_regclass('flyway_schema_history')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(table, None, "nothing ran");
    let shared = p.shared();
    let outcome = fw.configure(&db.url, &p.sql, &[(shared.as_str(), "")]);
    assert!(
        !outcome.ok()
            && outcome
                .error()
                .contains("Unknown configuration property: flyway.foo"),
        "{outcome:?}"
    );
    let _ = std::fs::remove_dir_all(&p.root);
}

/// `lockRetryCount`: while another run holds the migration lock, evolve
/// waits about that many seconds (Flyway retries once a second), then
/// stops with an error naming the table and the setting.
#[tokio::test]
async fn flyway_conf_lock_retry_count_limits_the_wait() {
    let p = project("conf_lock");
    write(&p.sql, "V1__one.sql", &versioned(1));
    let db = evolve_test::fresh_db("ev_conf_lock").await;
    let holder = connect(&db.url).await;
    let key = evolve_migrate::lock_key(&evolve_pg::QualifiedName::new(
        "public",
        "flyway_schema_history",
    ));
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .expect("hold the lock");
    p.conf(&db.url, &[("flyway.lockRetryCount", "1")]);
    let started = std::time::Instant::now();
    let out = p.evolve(&["migrate", "apply"]);
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("still holds the migration lock on public.flyway_schema_history")
            && stderr.contains("lockRetryCount"),
        "{stderr}"
    );
    assert!(took >= std::time::Duration::from_secs(1), "{took:?}");
    // Released: the same configuration applies.
    holder
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .expect("release");
    p.evolve_ok(&["migrate", "apply"]);
    let _ = std::fs::remove_dir_all(&p.root);
}

/// Forwards 127.0.0.1:`port` to `target` from `after` on: a server that
/// comes up late.
fn late_proxy(port: u16, target: std::net::SocketAddr, after: std::time::Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the proxy");
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(target) else {
                continue;
            };
            let (mut c2, mut s2) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let (mut client, mut server) = (client, server);
                let _ = std::io::copy(&mut server, &mut client);
                let _ = client.shutdown(std::net::Shutdown::Write);
            });
        }
    });
}

/// `connectRetries`: a server that is not up yet is tried again, 1 s, then
/// 2 s, ... apart (Flyway's backoff, at most connectRetriesInterval); when
/// the retries run out the error says how often evolve tried.
#[tokio::test]
async fn flyway_conf_connect_retries() {
    let p = project("conf_retries");
    write(&p.sql, "V1__one.sql", &versioned(1));
    let db = evolve_test::fresh_db("ev_conf_retries").await;
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    };
    let (_, host) = db.url.split_once('@').expect("user@host");
    let (host, _) = host.split_once('/').expect("host/db");
    let target: std::net::SocketAddr = host.parse().expect("127.0.0.1:port");
    let via = |port: u16| db.url.replace(host, &format!("127.0.0.1:{port}"));

    // Nothing listens: one retry after 1 s, then the error.
    let dead = free_port();
    p.conf(
        &via(dead),
        &[
            ("flyway.connectRetries", "1"),
            ("flyway.connectRetriesInterval", "1"),
        ],
    );
    let started = std::time::Instant::now();
    let out = p.evolve(&["migrate", "apply"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    assert!(
        stderr.contains("retry 1 of 1, as connectRetries allows")
            && stderr.contains("(tried 2 times over 1 s, as connectRetries allows)"),
        "{stderr}"
    );

    // The server comes up after 1.5 s: the second retry (at 3 s) connects.
    let late = free_port();
    late_proxy(late, target, std::time::Duration::from_millis(1500));
    p.conf(&via(late), &[("flyway.connectRetries", "3")]);
    let (_, stderr) = p.evolve_ok(&["migrate", "apply"]);
    assert!(stderr.contains("retry 1 of 3"), "{stderr}");
    assert!(!stderr.contains("retry 3 of 3"), "{stderr}");
    assert_eq!(history(&connect(&db.url).await).await.len(), 1);
    let _ = std::fs::remove_dir_all(&p.root);
}
