//! `evolve migrate` and `evolve lint` on Flyway's file names as users run
//! them: the text `apply` prints for a file without a description, and
//! the baseline migrations (`B<version>__...`) that `lint` reads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn temp_dir(hint: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("evolve-output-lint-{}-{hint}", std::process::id()));
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
    for v in [
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGDATABASE",
        "PGUSER",
        "PGSERVICE",
    ] {
        cmd.env_remove(v);
    }
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().expect("run evolve")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A versioned file without a description (`V1.sql`, as Flyway allows)
/// is `V1` in the lines of `apply` and `--dry-run`, one space before what
/// follows.
#[tokio::test]
async fn a_file_without_description_prints_without_a_double_space() {
    let db = evolve_test::fresh_db("cli_nodesc").await;
    let dir = temp_dir("nodesc");
    std::fs::write(dir.join("V1.sql"), "CREATE TABLE t (id bigint);").expect("write");
    std::fs::write(dir.join("V2__fill_t.sql"), "INSERT INTO t VALUES (1);").expect("write");

    let out = evolve(Some(&db.url), &dir, &["migrate", "apply", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("would apply V1 (1 statement, in one transaction)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("would apply V2 fill t (1 statement, in one transaction)\n"),
        "{stdout}"
    );

    let out = evolve(Some(&db.url), &dir, &["migrate", "apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[1].starts_with("applied V1 (1 statement, "),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("applied V2 fill t (1 statement, "),
        "{stdout}"
    );
    assert!(!stdout.contains("  "), "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `apply --dry-run` refuses a statement the parser rejects (here two
/// statements without the `;` between them), naming the file, the line
/// and the column, as `plan` does: the real run would fail there. Nothing
/// is applied, and a resumed file's statements already done are not read.
#[tokio::test]
async fn a_dry_run_refuses_a_statement_that_does_not_parse() {
    let db = evolve_test::fresh_db("cli_dry_syntax").await;
    let dir = temp_dir("dry_syntax");
    std::fs::write(dir.join("V1__t.sql"), "CREATE TABLE t (id bigint);").expect("write");
    std::fs::write(
        dir.join("V2__columns.sql"),
        "ALTER TABLE t ADD COLUMN a text\nALTER TABLE t ADD COLUMN b text;\n",
    )
    .expect("write");
    let out = evolve(Some(&db.url), &dir, &["migrate", "apply", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("V2__columns.sql")
            && stderr.contains("line 1, column 32: missing comma"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        !text(&out.stdout).contains("would apply"),
        "{}",
        text(&out.stdout)
    );
    let status = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "status", "--format", "json"],
    );
    assert!(
        !text(&status.stdout).contains("\"success\""),
        "nothing applied: {}",
        text(&status.stdout)
    );
    // Fixed, it would run.
    std::fs::write(
        dir.join("V2__columns.sql"),
        "ALTER TABLE t ADD COLUMN a text;\nALTER TABLE t ADD COLUMN b text;\n",
    )
    .expect("write");
    let out = evolve(Some(&db.url), &dir, &["migrate", "apply", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("would apply V2 columns (2 statements, in one transaction)"),
        "{}",
        text(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `evolve lint` reads baseline migrations as it reads versioned ones, each
/// on its own (it runs on an empty database), before the versioned files.
#[test]
fn lint_reads_baseline_migrations() {
    let dir = temp_dir("lint_baseline");
    std::fs::write(
        dir.join("B2__base.sql"),
        "CREATE TABLE orders (id int);\nCREATE INDEX orders_id ON orders (id);\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("V1__orders.sql"),
        "CREATE TABLE orders (id bigint);\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("V2__index.sql"),
        "CREATE INDEX orders_id ON orders (id);\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(["lint", "--dir"])
        .arg(&dir)
        .output()
        .expect("run evolve");
    let stdout = text(&out.stdout);
    // The baseline file's own table is new (no index advice for it);
    // V2's index on the table V1 created is an error.
    assert_eq!(
        stdout
            .lines()
            .map(|l| l.split(": ").next().unwrap_or_default())
            .collect::<Vec<_>>(),
        [
            "B2__base.sql:1:25",
            "V2__index.sql:1:1",
            "2 findings (1 error)"
        ],
        "{stdout}"
    );
    assert!(
        stdout.starts_with("B2__base.sql:1:25: warning[prefer-bigint-over-int]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("V2__index.sql:1:1: error[require-concurrent-index-creation]"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(dir);
}
