//! The `evolve` binary as users run it: arguments, output formats, exit
//! codes, against a throwaway PostgreSQL cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-cli-test-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn evolve(url: Option<&str>, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(args)
        .arg("--dir")
        .arg(dir)
        .env_remove("DATABASE_URL");
    for v in LIBPQ_ENV {
        cmd.env_remove(v);
    }
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().expect("run evolve")
}

/// The variables that make evolve connect where psql would.
const LIBPQ_ENV: [&str; 6] = [
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGSERVICE",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn apply_prints_one_line_per_migration_and_status_json_is_documented_shape() {
    let db = evolve_test::fresh_db("cli_apply").await;
    let dir = temp_dir("apply");
    std::fs::write(dir.join("V1__create_t.sql"), "CREATE TABLE t (id int);").expect("write");
    std::fs::write(
        dir.join("V2__fill_t.sql"),
        "INSERT INTO t VALUES (1);\nINSERT INTO t VALUES (2);",
    )
    .expect("write");

    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "status", "--format", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert_eq!(status["history_table"], "public.evolve_schema_history");
    assert_eq!(status["history_exists"], false);
    assert_eq!(status["current_version"], serde_json::Value::Null);
    let first = &status["migrations"][0];
    assert_eq!(first["version"], "1");
    assert_eq!(first["description"], "create t");
    assert_eq!(first["type"], "versioned");
    assert_eq!(first["script"], "V1__create_t.sql");
    assert_eq!(first["state"], "pending");
    assert!(first["checksum"].is_i64());
    assert_eq!(status["migrations"].as_array().map(Vec::len), Some(2));

    let out = evolve(Some(&db.url), &dir, &["migrate", "apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(
        lines[0],
        "created history table public.evolve_schema_history"
    );
    assert!(
        lines[1].starts_with("applied V1 create t (1 statement, "),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("applied V2 fill t (2 statements, "),
        "{stdout}"
    );
    assert!(lines[3].starts_with("2 migrations applied in "), "{stdout}");
    assert!(lines[3].ends_with("; schema is at version 2"), "{stdout}");

    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "status", "--format", "json"],
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert_eq!(status["current_version"], "2");
    assert_eq!(status["migrations"][1]["state"], "applied");
    assert_eq!(status["migrations"][1]["installed_rank"], 2);

    let out = evolve(Some(&db.url), &dir, &["migrate", "status"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("public.evolve_schema_history: schema version 2"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with(" 2       | fill t")),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn apply_json_is_json_lines_ending_in_a_summary() {
    let db = evolve_test::fresh_db("cli_json").await;
    let dir = temp_dir("json");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "apply", "--format", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(types, ["history_created", "applied", "summary"]);
    assert_eq!(events[1]["script"], "V1__a.sql");
    assert_eq!(events[1]["attempts"], 1);
    assert_eq!(events[2]["applied"], 1);
    assert_eq!(events[2]["current_version"], "1");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn refusals_exit_non_zero_with_one_line_on_stderr() {
    let db = evolve_test::fresh_db("cli_refuse").await;
    let dir = temp_dir("refuse");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    assert!(
        evolve(Some(&db.url), &dir, &["migrate", "apply"])
            .status
            .success()
    );
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id bigint);").expect("edit");

    let out = evolve(Some(&db.url), &dir, &["migrate", "validate"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: migration V1__a.sql was edited after it was applied (checksum "),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = evolve(None, &dir, &["migrate", "status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error: no database given; pass --database-url"));
    // Without a URL, libpq's environment says where, as for psql.
    let url: tokio_postgres::Config = db.url.parse().unwrap();
    let port = url.get_ports()[0].to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(["migrate", "status", "--dir"])
        .arg(&dir)
        .env_remove("DATABASE_URL")
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", &port)
        .env("PGUSER", url.get_user().unwrap())
        .env("PGDATABASE", url.get_dbname().unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("schema version 1"),
        "{}",
        text(&out.stdout)
    );

    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "apply", "--lock-timeout", "soon"],
    );
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");

    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "apply", "--target", "1.x"],
    );
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    assert!(
        text(&out.stderr).starts_with("error: invalid value '1.x' for '--target <TARGET>'"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn new_creates_the_next_versioned_file() {
    let dir = temp_dir("new");
    let out = evolve(None, &dir, &["migrate", "new", "add postal code"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.join("V1__add_postal_code.sql").exists());
    std::fs::write(dir.join("V41__x.sql"), "SELECT 1;").expect("write");
    let out = evolve(None, &dir, &["migrate", "new", "next one"]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("created {}", dir.join("V42__next_one.sql").display())
    );
    let out = evolve(None, &dir, &["migrate", "new", "a/b"]);
    assert_eq!(out.status.code(), Some(1));
    // Too long for the history, or --dir a file: said, nothing created.
    let long = "x".repeat(201);
    let out = evolve(None, &dir, &["migrate", "new", &long]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("has 201 characters, and the history table records at most 200"),
        "{}",
        text(&out.stderr)
    );
    let file = dir.join("V41__x.sql");
    let out = evolve(None, &file, &["migrate", "new", "next"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is a file, not a directory; give --dir a directory"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 3);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn deps_prints_text_json_dot_and_mermaid() {
    let db = evolve_test::fresh_db("cli_deps").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, status text);
             CREATE MATERIALIZED VIEW daily AS SELECT status, count(*) FROM orders GROUP BY status;
             CREATE VIEW dash AS SELECT * FROM daily;",
        )
        .await
        .expect("schema");
    let deps = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_evolve"))
            .args(args)
            .env("DATABASE_URL", &db.url)
            .output()
            .expect("run evolve")
    };
    let run = |format: &str| deps(&["deps", "orders.status", "--format", format]);

    let out = run("text");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("2 dependents of public.orders.status\n"),
        "{stdout}"
    );
    assert!(stdout.contains(" 1     | materialized view | public.daily | postgres | true      | 0       | public.orders -> public.daily"), "{stdout}");
    assert!(
        stdout.contains("public.orders -> public.daily -> public.dash"),
        "{stdout}"
    );

    let out = run("json");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["target"], "public.orders.status");
    assert_eq!(json["dependents"][1]["depth"], 2);
    assert_eq!(json["dependents"][1]["kind"], "view");
    assert_eq!(json["dependents"][0]["kind"], "materialized_view");
    assert_eq!(json["dependents"][0]["populated"], true);

    let dot = text(&run("dot").stdout);
    assert!(dot.starts_with("digraph deps {"), "{dot}");
    assert!(
        dot.contains("\"public.orders.status\" -> \"public.daily\";"),
        "{dot}"
    );
    assert!(
        dot.contains("\"public.daily\" -> \"public.dash\";"),
        "{dot}"
    );

    let mermaid = text(&run("mermaid").stdout);
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    assert!(mermaid.contains("n0 --> n1"), "{mermaid}");
    assert!(mermaid.contains("n1 --> n2"), "{mermaid}");

    let out = deps(&["deps", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error: table \"nope\" does not exist"));
    let out = deps(&["migrate", "status", "--format", "dot"]);
    assert_eq!(out.status.code(), Some(2), "dot is for evolve deps only");
    assert!(text(&out.stderr).contains("invalid value 'dot' for '--format <FORMAT>'"));
}

#[test]
fn lint_reports_file_line_and_rule_and_exits_1_on_errors() {
    let dir = temp_dir("lint");
    std::fs::write(
        dir.join("V1__orders.sql"),
        "-- evolve:ignore-file prefer-text-field\nCREATE TABLE orders (id bigint, status varchar(20));\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("V2__summary.sql"),
        "CREATE MATERIALIZED VIEW summary AS SELECT * FROM orders;\n",
    )
    .expect("write");
    let lint = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_evolve"))
            .args(["lint", "--dir"])
            .arg(dir)
            .output()
            .expect("run evolve")
    };
    let out = lint(&dir);
    assert_eq!(
        out.status.code(),
        Some(0),
        "warnings only: {}",
        text(&out.stdout)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("V2__summary.sql:1:44: warning[matview-select-star]: materialized view summary is defined with SELECT *"), "{stdout}");
    assert!(stdout.ends_with("1 finding (0 errors)\n"), "{stdout}");

    std::fs::write(
        dir.join("V3__shrink.sql"),
        "-- shrink\nALTER TABLE orders ALTER COLUMN status TYPE varchar(10);\n",
    )
    .expect("write");
    let out = lint(&dir);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("V3__shrink.sql:2:20: error[alter-type-rewrite]: changing orders.status from varchar(20) to varchar(10) rewrites the whole table"), "{stdout}");
    assert!(stdout.ends_with("2 findings (1 error)\n"), "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn compat_check_exits_0_1_or_2() {
    let dir = temp_dir("compat");
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).expect("write");
        p
    };
    let v1 = write(
        "v1.avsc",
        r#"{"type":"record","name":"User","fields":[{"name":"id","type":"long"}]}"#,
    );
    let v2_ok = write(
        "v2_ok.avsc",
        r#"{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"email","type":"string","default":""}]}"#,
    );
    let v2_bad = write(
        "v2_bad.avsc",
        r#"{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"email","type":"string"}]}"#,
    );
    let broken = write(
        "broken.avsc",
        r#"{"type":"record","name":"User","fields":[{"name":"id"#,
    );
    let compat = |args: &[&str], new: &Path, old: &Path| {
        Command::new(env!("CARGO_BIN_EXE_evolve"))
            .args(["compat", "check"])
            .args(args)
            .arg(new)
            .arg(old)
            .output()
            .expect("run evolve")
    };
    let out = compat(&["--type", "avro", "--mode", "BACKWARD"], &v2_ok, &v1);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("is BACKWARD compatible with"));

    let out = compat(&["--type", "avro", "--mode", "backward"], &v2_bad, &v1);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("(backward): READER_FIELD_MISSING_DEFAULT_VALUE at /fields/1"),
        "{stdout}"
    );
    assert!(
        stdout
            .trim_end()
            .ends_with("is not BACKWARD compatible: 1 incompatibility"),
        "{stdout}"
    );

    // FORWARD: the old schema reads the new data; a new field is ignored.
    let out = compat(&["--type", "avro", "--mode", "FORWARD"], &v2_bad, &v1);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    let out = compat(
        &["--type", "avro", "--mode", "FULL", "--format", "json"],
        &v2_bad,
        &v1,
    );
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["compatible"], false);
    assert_eq!(json["mode"], "FULL");
    assert_eq!(json["findings"][0]["direction"], "backward");
    assert_eq!(
        json["findings"][0]["kind"],
        "READER_FIELD_MISSING_DEFAULT_VALUE"
    );
    assert_eq!(json["findings"][0]["path"], "/fields/1");
    assert_eq!(json["findings"][0]["against"], v1.display().to_string());

    // Transitive: each finding names the old file it was found against,
    // by path, once (not an index into the old files).
    let v0 = write(
        "v0.avsc",
        r#"{"type":"record","name":"User","fields":[{"name":"id","type":"int"}]}"#,
    );
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args([
            "compat",
            "check",
            "--type",
            "avro",
            "--mode",
            "FORWARD_TRANSITIVE",
        ])
        .args(["--format", "json"])
        .arg(&v2_bad)
        .arg(&v1)
        .arg(&v0)
        .output()
        .expect("run evolve");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.matches("\"against\"").count(),
        1,
        "one finding, one against: {stdout}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(json["findings"][0]["against"], v0.display().to_string());
    assert_eq!(json["findings"][0]["direction"], "forward");

    // A JSON Schema pattern Java refuses: refused in the new schema, taken
    // in an earlier version (stored before, as a registry reads it back).
    let java_bad = write(
        "bad_pattern.json",
        r#"{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2,1}$"}}}"#,
    );
    let fixed = write(
        "fixed.json",
        r#"{"type":"object","properties":{"code":{"type":"string"}}}"#,
    );
    let out = compat(&["--type", "json"], &fixed, &java_bad);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = compat(&["--type", "json"], &java_bad, &fixed);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is not a regular expression Confluent accepts"),
        "{}",
        text(&out.stderr)
    );

    let out = compat(&["--type", "avro"], &broken, &v1);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("broken.avsc: invalid Avro schema"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `evolve demo`, the README's first command: the pipeline tour runs on
/// its own throwaway clusters, exits 0, and each flow prints its check
/// line with equal counts.
#[test]
fn demo_tours_the_pipeline_through_flows_1_2_4_and_5_with_exact_counts() {
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .arg("demo")
        .output()
        .expect("run evolve demo");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "evolve demo failed\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(!stdout.contains('✗'), "{stdout}");
    // Sections start with "== "; each flow has at least one check line
    // whose two counts are equal.
    let section = |title: &str| -> &str {
        let start = stdout
            .find(&format!("\n== {title}"))
            .unwrap_or_else(|| panic!("no section {title}\n{stdout}"));
        let rest = &stdout[start + 1..];
        let end = rest[3..].find("\n== ").map_or(rest.len(), |i| i + 3);
        &rest[..end]
    };
    let counts = |section: &str| -> Vec<(u64, u64)> {
        section
            .lines()
            .filter_map(|line| {
                let rest = line.trim().strip_prefix("downstream changes: ")?;
                let (writes, rest) = rest.split_once("   rows that really changed: ")?;
                let (changed, mark) = rest.split_once("   ")?;
                assert_eq!(mark, "✓", "{line}");
                Some((writes.parse().ok()?, changed.parse().ok()?))
            })
            .collect()
    };
    for flow in ["flow 1:", "flow 2:", "flow 4:"] {
        let counts = counts(section(flow));
        assert!(!counts.is_empty(), "no check line in {flow}\n{stdout}");
        for (writes, changed) in counts {
            assert_eq!(writes, changed, "{flow}\n{stdout}");
            assert!(writes > 0, "{flow}\n{stdout}");
        }
    }
    // Flow 5 needs ABSORB = 'auto'; a build without it says so.
    let flow_5 = section("flow 5:");
    assert!(
        !counts(flow_5).is_empty()
            || flow_5.contains("skipped: ABSORB = 'auto' is not available in this build"),
        "{stdout}"
    );
    let end = section("the end");
    assert!(
        end.lines()
            .any(|l| l.trim().starts_with("open_orders answered ")
                && l.ends_with(" queries, 0 errors   ✓")),
        "{stdout}"
    );
    assert!(
        stdout.contains("pipeline stopped, clusters and state removed"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("all ") && last.contains(" checks passed in "),
        "{stdout}"
    );
    // Flow 4's stall is logged as a warning line like the command's own,
    // its fields without colour codes (stderr is not a terminal).
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("warning: table stalled table=orders_v")),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}
