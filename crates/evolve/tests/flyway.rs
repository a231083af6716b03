//! evolve and the real Flyway on the same history table: each continues
//! what the other wrote (versioned and repeatable migrations, failures and
//! repair, baseline, out-of-order files), `flyway validate` and `info` stay
//! clean, `evolve migrate status` agrees with `flyway info`, and the rows
//! evolve writes hold what Flyway writes for the same event.

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
    let report: Value =
        serde_json::from_str(&evolve_ok(url, dir, &["migrate", "status"])).expect("status is JSON");
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
                if m["type"] == "baseline" {
                    "BASELINE"
                } else {
                    "SQL"
                }
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
/// files at the baseline version (evolve notes them on the baseline line).
fn flyway_info(fw: &Flyway, url: &str, dir: &Path, config: &[(&str, &str)]) -> Vec<Line> {
    let info = fw.ok(url, dir, config, "info");
    let mut lines: Vec<Line> = info
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

/// Every column but installed_on, in installed order.
async fn history(client: &Client) -> Vec<Vec<String>> {
    client
        .query(
            "SELECT installed_rank::text, coalesce(version, '<null>'), description, type, script,
                    coalesce(checksum::text, '<null>'), installed_by, success::text
             FROM flyway_schema_history h ORDER BY h.installed_rank",
            &[],
        )
        .await
        .expect("read history")
        .iter()
        .map(|r| (0..8).map(|i| r.get::<_, String>(i)).collect())
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
        "# Flyway's own file\nflyway.url={}\nflyway.user={}\nflyway.locations=filesystem:{}\nflyway.table=my_history\nflyway.placeholders.table_name=from_conf\nflyway.initSql=SET application_name = 'flyway'\nflyway.group=true\n",
        jdbc[0].1,
        jdbc[1].1,
        sql.display()
    );
    std::fs::write(project.join("flyway.conf"), &conf).expect("write conf");
    let out = evolve_in(&project, &[], &["migrate", "apply"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: Flyway configuration: flyway.initSql is not supported by evolve (evolve runs no SQL at the start of a session; put it in a beforeMigrate.sql callback); it is ignored"),
        "{stderr}"
    );
    assert!(!stderr.contains("flyway.group"), "{stderr}");
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
    assert!(
        stderr.contains("flyway.connectRetries is not supported by evolve"),
        "{stderr}"
    );
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
