//! `evolve migrate` as users run it, where it used to go wrong: concurrent
//! deploys around `CREATE INDEX CONCURRENTLY`, migrations directories that
//! cannot be trusted, and the stumbles of a first walk through the README.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-hardening-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn evolve_cmd(url: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(args).env_remove("DATABASE_URL");
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url);
    }
    cmd
}

/// Runs `evolve ARGS --dir DIR`, killing it when it takes longer than a
/// minute (a hang is a failure, not a stuck test).
fn evolve(url: Option<&str>, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = evolve_cmd(url, args);
    cmd.arg("--dir").arg(dir);
    run_bounded(cmd, Duration::from_secs(60))
}

fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run evolve");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "evolve {:?} still running after {limit:?}\n{}{}",
                cmd.get_args().collect::<Vec<_>>(),
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn connect(url: &str) -> Client {
    evolve_pg::connect(url, "evolve test")
        .await
        .expect("connect")
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

/// `evolve migrate baseline --version 0` on `url`: a database that already
/// holds objects is adopted before files are applied to it (`apply`
/// refuses a non-empty schema without history, as Flyway does); every
/// file still runs.
fn adopt(url: &str) {
    let out = evolve_cmd(Some(url), &["migrate", "baseline", "--version", "0"])
        .output()
        .expect("run evolve");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Rows in the history table, 0 when it does not exist.
async fn history_rows(client: &Client) -> i64 {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('evolve_schema_history') IS NOT NULL",
            &[],
        )
        .await
        .expect("to_regclass")
        .get(0);
    if exists {
        count(client, "SELECT count(*) FROM evolve_schema_history").await
    } else {
        0
    }
}

/// `url` with another user.
fn as_user(url: &str, user: &str) -> String {
    url.replacen("postgres@", &format!("{user}@"), 1)
}

/// Oid and validity of index `t_x_idx`.
async fn oid_of(client: &Client) -> Option<(u32, bool)> {
    client
        .query_opt(
            "SELECT c.oid, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
             WHERE c.relname = 't_x_idx'",
            &[],
        )
        .await
        .expect("index")
        .map(|r| (r.get(0), r.get(1)))
}

// 1. Concurrent runs and CREATE INDEX CONCURRENTLY.

#[tokio::test]
async fn eight_concurrent_applies_leave_every_concurrent_index_valid() {
    let db = evolve_test::fresh_db("cli_concurrent_cic").await;
    let dir = temp_dir("concurrent");
    std::fs::write(
        dir.join("V1__create_t.sql"),
        "CREATE TABLE t (id int, a int, b int);\nINSERT INTO t SELECT i, i % 97, i % 89 FROM generate_series(1, 50000) i;\n",
    )
    .expect("write");
    for v in 2..=50 {
        let body = match v {
            10 => "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_a_idx ON t (a);\n".to_string(),
            30 => "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_b_idx ON t (b);\n".to_string(),
            _ => format!("CREATE TABLE t{v} (id int);\n"),
        };
        std::fs::write(dir.join(format!("V{v}__step_{v}.sql")), body).expect("write");
    }
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let mut cmd = evolve_cmd(
                Some(&db.url),
                &[
                    "migrate",
                    "apply",
                    "--lock-timeout",
                    "1s",
                    "--lock-retries",
                    "2",
                    "--lock-retry-delay",
                    "100ms",
                ],
            );
            cmd.arg("--dir").arg(&dir);
            std::thread::spawn(move || run_bounded(cmd, Duration::from_secs(120)))
        })
        .collect();
    let outputs: Vec<Output> = runs.into_iter().map(|r| r.join().expect("run")).collect();
    for out in &outputs {
        assert!(
            out.status.success(),
            "every run exits 0\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    let waited = outputs
        .iter()
        .filter(|o| text(&o.stdout).contains("waiting for the migration lock"))
        .count();
    assert!(waited > 0, "the runs overlapped");
    let client = connect(&db.url).await;
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM evolve_schema_history WHERE success"
        )
        .await,
        50
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM (SELECT version FROM evolve_schema_history GROUP BY version HAVING count(*) > 1) d"
        )
        .await,
        0,
        "each migration applied exactly once"
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE c.relname IN ('t_a_idx', 't_b_idx') AND i.indisvalid"
        )
        .await,
        2,
        "both concurrent indexes are valid"
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM pg_index WHERE NOT indisvalid"
        )
        .await,
        0
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn apply_waits_for_an_index_another_backend_is_building_instead_of_dropping_it() {
    let db = evolve_test::fresh_db("cli_cic_building").await;
    let dir = temp_dir("cic_building");
    std::fs::write(
        dir.join("V1__index_t.sql"),
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_x_idx ON t (x);\n",
    )
    .expect("write");
    let client = connect(&db.url).await;
    client
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000)")
        .await
        .expect("table");
    adopt(&db.url);
    // The build of a killed run: still running on its backend, kept in
    // progress by a writer, its index INVALID meanwhile.
    let writer = connect(&db.url).await;
    writer
        .batch_execute("BEGIN; LOCK TABLE t IN ROW EXCLUSIVE MODE")
        .await
        .expect("writer");
    let builder = connect(&db.url).await;
    let builder_pid: i32 = builder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let build = tokio::spawn(async move {
        builder
            .batch_execute("CREATE INDEX CONCURRENTLY t_x_idx ON t (x)")
            .await
    });
    let mut building = None;
    for _ in 0..100 {
        building = oid_of(&client).await;
        if building.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (oid, valid) = building.expect("the build created the index");
    assert!(!valid);

    let mut child = evolve_cmd(
        Some(&db.url),
        &["migrate", "apply", "--lock-timeout", "30s"],
    )
    .arg("--dir")
    .arg(&dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("run evolve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let wait_line = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no wait line; saw {seen:?}"));
        if line.contains("still being built") {
            break line;
        }
        seen.push(line);
    };
    assert!(
        wait_line
            .contains("V1__index_t.sql: INVALID index public.t_x_idx is still being built by pid ")
            && wait_line.contains(&format!("pid {builder_pid} ")),
        "{wait_line}"
    );
    // The other build can finish now.
    writer.batch_execute("COMMIT").await.expect("commit");
    build
        .await
        .expect("join")
        .expect("the other build finishes");
    let out = child.wait_with_output().expect("evolve");
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(out.status.success(), "{rest:?}\n{}", text(&out.stderr));
    assert!(
        !rest
            .iter()
            .chain(&seen)
            .any(|l| l.contains("dropped INVALID index")),
        "{rest:?}"
    );
    assert_eq!(
        oid_of(&client).await,
        Some((oid, true)),
        "the index the other backend built is kept"
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM evolve_schema_history WHERE success AND type = 'SQL'"
        )
        .await,
        1
    );
    let _ = std::fs::remove_dir_all(dir);
}

// 2. Migrations directories that cannot be trusted.

/// Runs `apply` on `dir` and checks the refusal: exit 1, the path named,
/// nothing recorded, none of `secret` printed.
async fn refused(db_url: &str, dir: &Path, extra: &[&str], names: &str, secret: &str) -> String {
    let mut args = vec!["migrate", "apply"];
    args.extend_from_slice(extra);
    let out = evolve(Some(db_url), dir, &args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}{}", text(&out.stdout));
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(names), "names {names:?}: {stderr}");
    assert!(
        !stderr.contains(secret) && !text(&out.stdout).contains(secret),
        "no file content: {stderr}"
    );
    let client = connect(db_url).await;
    assert_eq!(history_rows(&client).await, 0, "nothing applied");
    stderr
}

#[tokio::test]
async fn symbolic_link_loops_are_refused_promptly() {
    let db = evolve_test::fresh_db("cli_symlink_loop").await;
    let dir = temp_dir("loop");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    std::os::unix::fs::symlink(".", dir.join("loop")).expect("symlink");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink("..", dir.join("sub/up")).expect("symlink");
    let stderr = refused(
        &db.url,
        &dir,
        &[],
        "is a symbolic link to a directory",
        "\0",
    )
    .await;
    assert!(
        stderr.contains(&dir.join("loop").display().to_string())
            || stderr.contains(&dir.join("sub/up").display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("--follow-symlinks"), "{stderr}");
    let stderr = refused(
        &db.url,
        &dir,
        &["--follow-symlinks"],
        "a directory already read (a loop)",
        "\0",
    )
    .await;
    assert!(
        stderr.contains(&dir.join("loop").display().to_string())
            || stderr.contains(&dir.join("sub/up").display().to_string()),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_fifo_named_like_a_migration_is_refused_without_reading_it() {
    let db = evolve_test::fresh_db("cli_fifo").await;
    let dir = temp_dir("fifo");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    let fifo = dir.join("V2__fifo.sql");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let stderr = refused(&db.url, &dir, &[], &fifo.display().to_string(), "\0").await;
    assert!(stderr.contains("is not a regular file"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_link_to_a_file_outside_the_directory_is_refused_and_never_printed() {
    let db = evolve_test::fresh_db("cli_outside").await;
    let dir = temp_dir("outside");
    let elsewhere = temp_dir("elsewhere");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", dir.join("V2__passwd.sql")).expect("symlink");
    let stderr = refused(
        &db.url,
        &dir,
        &[],
        &dir.join("V2__passwd.sql").display().to_string(),
        "root:",
    )
    .await;
    assert!(
        stderr.contains("outside the migrations directory") && stderr.contains("--follow-symlinks"),
        "{stderr}"
    );

    // A file of one's own outside: refused, and read only when asked for.
    std::fs::remove_file(dir.join("V2__passwd.sql")).expect("rm");
    std::fs::write(
        elsewhere.join("shared.sql"),
        "CREATE TABLE shared_t (id int); -- secret-marker-7\n",
    )
    .expect("write");
    std::os::unix::fs::symlink(elsewhere.join("shared.sql"), dir.join("V2__shared.sql"))
        .expect("symlink");
    refused(&db.url, &dir, &[], "V2__shared.sql", "secret-marker-7").await;
    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "apply", "--follow-symlinks"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let client = connect(&db.url).await;
    assert_eq!(history_rows(&client).await, 2);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(elsewhere);
}

#[tokio::test]
async fn names_the_history_cannot_record_are_refused_before_anything_runs() {
    use std::os::unix::ffi::OsStrExt;
    let db = evolve_test::fresh_db("cli_names").await;

    // A script path longer than the history's script column (1000).
    let dir = temp_dir("long");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    let mut deep = dir.clone();
    for i in 0..5 {
        deep = deep.join(format!("{i}{}", "d".repeat(200)));
    }
    std::fs::create_dir_all(&deep).expect("mkdir");
    std::fs::write(deep.join("V2__deep.sql"), "CREATE TABLE deep (id int);").expect("write");
    let stderr = refused(
        &db.url,
        &dir,
        &[],
        &deep.join("V2__deep.sql").display().to_string(),
        "\0",
    )
    .await;
    assert!(
        stderr.contains("column script of history table public.evolve_schema_history holds 1000"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);

    // A file name that is not UTF-8.
    let dir = temp_dir("utf8");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    let name = std::ffi::OsStr::from_bytes(b"V2__caf\xe9.sql");
    std::fs::write(dir.join(name), "CREATE TABLE cafe (id int);").expect("write");
    let stderr = refused(&db.url, &dir, &[], "V2__caf", "\0").await;
    assert!(stderr.contains("is not UTF-8"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);

    // A directory named like a migration.
    let dir = temp_dir("dirsql");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    std::fs::create_dir(dir.join("V2__dir.sql")).expect("mkdir");
    std::fs::write(
        dir.join("V2__dir.sql/V3__inner.sql"),
        "CREATE TABLE inner_t (id int);",
    )
    .expect("write");
    let stderr = refused(
        &db.url,
        &dir,
        &[],
        &dir.join("V2__dir.sql").display().to_string(),
        "\0",
    )
    .await;
    assert!(
        stderr.contains("is a directory named like a migration file"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

// 3. A walk through the README.

#[tokio::test]
async fn new_never_reuses_a_version_repair_marked_deleted_and_validate_reports_it() {
    let db = evolve_test::fresh_db("cli_new_deleted").await;
    let dir = temp_dir("new_deleted");
    for (name, body) in [
        ("V1__a.sql", "CREATE TABLE a (id int);"),
        ("V2__b.sql", "CREATE TABLE b (id int);"),
        ("V3__c.sql", "CREATE TABLE c (id int);"),
    ] {
        std::fs::write(dir.join(name), body).expect("write");
    }
    assert!(
        evolve(Some(&db.url), &dir, &["migrate", "apply"])
            .status
            .success()
    );
    // V3's file goes while a later one is there (a missing version above
    // every file's would be a future one, which repair leaves alone, as
    // Flyway's does); then the later one goes too.
    std::fs::remove_file(dir.join("V3__c.sql")).expect("rm");
    std::fs::write(dir.join("V4__later.sql"), "SELECT 1;").expect("write");
    let out = evolve(Some(&db.url), &dir, &["migrate", "repair"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("marked V3__c.sql as deleted"));
    std::fs::remove_file(dir.join("V4__later.sql")).expect("rm");

    let out = evolve(Some(&db.url), &dir, &["migrate", "new", "add d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("created {}", dir.join("V4__add_d.sql").display())
    );
    assert!(!dir.join("V3__add_d.sql").exists());
    std::fs::remove_file(dir.join("V4__add_d.sql")).expect("rm");

    // A file given the deleted version by hand never runs: validate says so.
    std::fs::write(dir.join("V3__d.sql"), "CREATE TABLE d (id int);").expect("write");
    let out = evolve(Some(&db.url), &dir, &["migrate", "validate"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        stderr.contains("migration V3__d.sql has version 3, which 'evolve migrate repair' marked deleted, so apply never runs it; rename it to version 4"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_usage_exits_2() {
    let dir = temp_dir("usage");
    let url = Some("postgres://nobody@127.0.0.1:1/none");
    let out = evolve(url, &dir, &["migrate", "apply", "--target", "4x1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("error: invalid value '4x1' for '--target <TARGET>'"),
        "{}",
        text(&out.stderr)
    );
    let out = evolve(url, &dir, &["migrate", "baseline", "--version", "v4"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let out = run_bounded(evolve_cmd(url, &["refresh"]), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("<NAMES|--all|--status>"), "{stderr}");
    assert!(stderr.contains("Usage: evolve refresh"), "{stderr}");

    let out = evolve(url, &dir, &["migrate", "status", "--format", "dot"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_of_each_verb_lists_only_its_flags() {
    let help = |args: &[&str]| {
        let mut all = args.to_vec();
        all.push("--help");
        let out = run_bounded(evolve_cmd(None, &all), Duration::from_secs(60));
        assert!(out.status.success(), "{args:?}");
        text(&out.stdout)
    };
    let lock_flags = ["--lock-timeout", "--lock-retries", "--lock-retry-delay"];
    let check = |args: &[&str], present: &[&str], absent: &[&str]| {
        let h = help(args);
        for flag in present {
            assert!(h.contains(flag), "{args:?} --help lacks {flag}\n{h}");
        }
        for flag in absent {
            assert!(!h.contains(flag), "{args:?} --help lists {flag}\n{h}");
        }
        assert!(
            !h.contains("mermaid") && !h.contains("dot"),
            "{args:?} --help lists deps' formats\n{h}"
        );
    };
    let db = ["--database-url", "--history-table"];
    let files = ["--dir", "--follow-symlinks"];
    let run = ["--no-wait", "--installed-by"];
    let cat = |parts: &[&[&'static str]]| parts.concat();

    check(
        &["migrate", "new"],
        &cat(&[&db, &files]),
        &cat(&[&lock_flags, &run]),
    );
    check(
        &["migrate", "status"],
        &cat(&[&db, &files]),
        &cat(&[&lock_flags, &run]),
    );
    check(
        &["migrate", "validate"],
        &cat(&[&db, &files]),
        &cat(&[&lock_flags, &run]),
    );
    check(
        &["migrate", "apply"],
        &cat(&[&db, &files, &lock_flags, &run, &["--target", "--dry-run"]]),
        &[],
    );
    check(
        &["migrate", "repair"],
        &cat(&[&db, &files, &run]),
        &lock_flags,
    );
    check(
        &["migrate", "baseline"],
        &cat(&[&db, &run, &["--version", "--description"]]),
        &cat(&[&lock_flags, &files]),
    );
    check(
        &["refresh"],
        &["--all", "--status", "--database-url"],
        &files,
    );
    // lint reads the live catalog with --database-url, never the history.
    check(
        &["lint"],
        &["--dir", "--follow-symlinks", "--database-url"],
        &["--history-table"],
    );

    // baseline's own flags say what they are.
    let h = help(&["migrate", "baseline"]);
    for flag in ["--version <VERSION>", "--description <DESCRIPTION>"] {
        let line = h
            .lines()
            .find(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag}\n{h}"));
        assert!(
            line.trim_start().len() > flag.len() + 10,
            "{flag} has help text: {line}"
        );
    }

    let h = help(&["deps"]);
    assert!(h.contains("dot") && h.contains("mermaid"), "{h}");
    assert!(
        h.contains("dot -Tsvg"),
        "deps --help says Graphviz renders it\n{h}"
    );
}

#[tokio::test]
async fn lock_retries_name_the_blocker_or_say_its_query_is_hidden() {
    let db = evolve_test::fresh_db("cli_blocker_role").await;
    let client = connect(&db.url).await;
    let suffix = db.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let app = format!("app_{suffix}");
    let report = format!("report_{suffix}");
    client
        .batch_execute(&format!(
            "CREATE ROLE \"{app}\" LOGIN; CREATE ROLE \"{report}\" LOGIN;
             GRANT ALL ON SCHEMA public TO \"{app}\";
             CREATE TABLE customers (id int); ALTER TABLE customers OWNER TO \"{app}\";
             GRANT SELECT ON customers TO \"{report}\";"
        ))
        .await
        .expect("roles");
    adopt(&as_user(&db.url, &app));
    let dir = temp_dir("blocker_role");
    std::fs::write(
        dir.join("V1__add_customer_tier.sql"),
        "ALTER TABLE customers ADD COLUMN tier text;",
    )
    .expect("write");
    let blocker = evolve_pg::connect(&as_user(&db.url, &report), "nightly report")
        .await
        .expect("connect as the report role");
    let blocker_pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    blocker
        .batch_execute("BEGIN;\nLOCK TABLE customers IN ACCESS SHARE MODE;")
        .await
        .expect("lock");
    let apply = || {
        evolve(
            Some(&as_user(&db.url, &app)),
            &dir,
            &[
                "migrate",
                "apply",
                "--lock-timeout",
                "300ms",
                "--lock-retries",
                "1",
                "--lock-retry-delay",
                "50ms",
            ],
        )
    };

    let out = apply();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let retry = stdout
        .lines()
        .find(|l| l.starts_with("lock timeout in V1__add_customer_tier.sql at line 1"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        retry.contains(&format!(
            "blocked by pid {blocker_pid} (nightly report): its query is hidden from role {app} (GRANT pg_read_all_stats TO \"{app}\" lets evolve name it); retry 1 of 1"
        )),
        "{retry}"
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("GRANT pg_read_all_stats TO"), "{stderr}");

    client
        .batch_execute(&format!("GRANT pg_read_all_stats TO \"{app}\""))
        .await
        .expect("grant");
    let out = apply();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let retry = stdout
        .lines()
        .find(|l| l.starts_with("lock timeout in V1__add_customer_tier.sql at line 1"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        retry.contains(&format!(
            "blocked by pid {blocker_pid} (nightly report, idle in transaction): BEGIN; LOCK TABLE customers IN ACCESS SHARE MODE; retry 1 of 1 in "
        )),
        "{retry}"
    );
    for output in [stdout.as_str(), &text(&out.stderr)] {
        assert!(!output.contains(";;"), "{output}");
    }
    // The baseline's row only.
    assert_eq!(history_rows(&client).await, 1);
    blocker.batch_execute("COMMIT").await.expect("commit");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_dry_run_counts_the_rows_of_a_matview_never_analysed() {
    let db = evolve_test::fresh_db("cli_dry_rows").await;
    let client = connect(&db.url).await;
    client
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, status varchar(20));
             INSERT INTO orders SELECT i, 'open' FROM generate_series(1, 66) i;
             CREATE MATERIALIZED VIEW open_orders WITH (autovacuum_enabled = false)
                 AS SELECT id, status FROM orders;",
        )
        .await
        .expect("schema");
    let reltuples: f32 = client
        .query_one(
            "SELECT reltuples FROM pg_class WHERE relname = 'open_orders'",
            &[],
        )
        .await
        .expect("reltuples")
        .get(0);
    assert!(reltuples <= 0.0, "never analysed: {reltuples}");
    adopt(&db.url);
    let dir = temp_dir("dry_rows");
    std::fs::write(
        dir.join("V1__widen_status.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;",
    )
    .expect("write");
    let out = evolve(Some(&db.url), &dir, &["migrate", "apply", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("after the commit: REFRESH MATERIALIZED VIEW"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("(unreadable until done: 66 rows, "), "{line}");

    let out = evolve(
        Some(&db.url),
        &dir,
        &["migrate", "apply", "--dry-run", "--format", "json"],
    );
    let rebuild = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|e| e["type"] == "would_rebuild")
        .expect("would_rebuild");
    assert_eq!(rebuild["refresh_estimates"][0]["rows"], 66);
    assert_eq!(rebuild["refresh_estimates"][0]["rows_counted"], true);
    let _ = std::fs::remove_dir_all(dir);
}
