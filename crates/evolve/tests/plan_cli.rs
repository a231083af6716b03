//! `evolve plan` as users run it: pending files against a real cluster,
//! text and JSON output, the probe, and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-plan-cli-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn evolve(url: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .arg("--database-url")
        .arg(url)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run evolve")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const V1: &str = "CREATE TABLE orders (id int PRIMARY KEY, status text, note text);
CREATE VIEW open_orders AS SELECT id, status FROM orders WHERE status = 'open';
";
const RISKY: &str = "ALTER TABLE orders ALTER COLUMN id TYPE bigint;
ALTER TABLE orders ALTER COLUMN status SET NOT NULL;
ALTER TABLE orders ADD COLUMN shard int DEFAULT (random() * 16)::int;
";

/// A database where V1 is applied and `V2__risky.sql` is pending.
async fn risky() -> (evolve_test::TestDb, PathBuf) {
    let db = evolve_test::fresh_db("plan_cli").await;
    let dir = temp_dir("risky");
    std::fs::write(dir.join("V1__orders.sql"), V1).expect("write");
    let out = evolve(&db.url, &dir, &["migrate", "apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let client = evolve_pg::connect(&db.url, "test").await.expect("connect");
    client
        .batch_execute(
            "INSERT INTO orders SELECT i, CASE WHEN i % 2 = 0 THEN 'open' ELSE 'done' END, 'n'
               FROM generate_series(1, 20000) i;
             ANALYZE orders;",
        )
        .await
        .expect("rows");
    std::fs::write(dir.join("V2__risky.sql"), RISKY).expect("write");
    (db, dir)
}

async fn applied(url: &str) -> i64 {
    let client = evolve_pg::connect(url, "test").await.expect("connect");
    client
        .query_one("SELECT count(*) FROM evolve_schema_history", &[])
        .await
        .expect("history")
        .get(0)
}

#[tokio::test]
async fn json_plan_of_the_pending_file_has_the_documented_shape() {
    let (db, dir) = risky().await;
    let out = evolve(&db.url, &dir, &["plan", "--probe", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let statements = doc["statements"].as_array().expect("statements");
    // Only the pending file: V1 is applied.
    assert_eq!(statements.len(), 3, "{doc:#}");
    for st in statements {
        assert_eq!(st["file"], "V2__risky.sql");
        for key in [
            "line",
            "sql",
            "locks",
            "rewrites",
            "scans",
            "table_rows",
            "table_bytes",
            "rebuilds",
            "advice",
            "probe",
        ] {
            assert!(st.get(key).is_some(), "{key} missing in {st:#}");
        }
        let lock = &st["locks"][0];
        assert_eq!(lock["relation"], "public.orders");
        assert_eq!(lock["mode"], "ACCESS EXCLUSIVE");
        assert_eq!(lock["held"], "transaction");
        assert_eq!(st["table_rows"], 20000);
        assert!(st["table_bytes"].as_i64().unwrap() > 0);
        assert_eq!(
            st["probe"]["disagreements"],
            serde_json::json!([]),
            "{st:#}"
        );
    }
    let (retype, not_null, shard) = (&statements[0], &statements[1], &statements[2]);
    assert_eq!(retype["line"], 1);
    assert_eq!(retype["rewrites"], true);
    assert_eq!(retype["rebuilds"][0]["name"], "public.open_orders");
    assert_eq!(retype["rebuilds"][0]["kind"], "view");
    assert!(
        retype["advice"][0]
            .as_str()
            .unwrap()
            .contains("evolve rewrite public.orders"),
        "{retype:#}"
    );
    assert_eq!(not_null["rewrites"], false);
    assert_eq!(not_null["scans"], true);
    assert!(
        not_null["advice"][0]
            .as_str()
            .unwrap()
            .contains("NOT VALID")
    );
    assert_eq!(shard["rewrites"], true);
    assert_eq!(shard["probe"]["rewrites"], true);
    assert_eq!(doc["probed"], true);
    assert_eq!(doc["disagreements"], 0);
    // Nothing was applied.
    assert_eq!(applied(&db.url).await, 1);
}

#[tokio::test]
async fn text_plan_names_locks_rewrites_and_advice() {
    let (db, dir) = risky().await;
    let out = evolve(&db.url, &dir, &["plan"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("V2__risky.sql:1  ALTER TABLE orders ALTER COLUMN id TYPE bigint"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "lock       ACCESS EXCLUSIVE on public.orders (until the file's transaction commits"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("rebuilds   view public.open_orders (depth 1)"),
        "{stdout}"
    );
    assert!(stdout.contains("random()"), "{stdout}");
    assert!(
        stdout.contains("3 statements: 2 rewrite, 1 scan without rewrite"),
        "{stdout}"
    );
    // Named files are planned whatever the history says.
    let out = evolve(
        &db.url,
        &dir,
        &["plan", dir.join("V1__orders.sql").to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("V1__orders.sql:1  CREATE TABLE orders"));
}

#[track_caller]
fn refused(out: &Output, needles: &[&str]) {
    assert!(!out.status.success(), "should fail");
    let stderr = text(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in {stderr}");
    }
    assert!(
        out.stdout.is_empty(),
        "nothing planned: {}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn bad_input_is_one_line_and_applies_nothing() {
    let (db, dir) = risky().await;
    for (sql, needles) in [
        (
            "SELECT 1;\nALTER TABLE orders ADD COLUMN;",
            &["V2__risky.sql", "line 2, column"][..],
        ),
        (
            "ALTER TABLE nowhere ADD COLUMN a int;",
            &["nowhere", "does not exist"][..],
        ),
        (
            "ALTER TABLE orders ALTER COLUMN nope TYPE text;",
            &["column nope", "orders"][..],
        ),
        (
            "ALTER TABLE orders ALTER COLUMN note TYPE notatype;",
            &["type notatype", "does not exist"][..],
        ),
    ] {
        std::fs::write(dir.join("V2__risky.sql"), sql).expect("write");
        refused(&evolve(&db.url, &dir, &["plan"]), needles);
    }
    assert_eq!(applied(&db.url).await, 1);
    // A statement the probe sees fail would fail apply: counted, exit 1.
    std::fs::write(
        dir.join("V2__risky.sql"),
        "ALTER TABLE orders ADD COLUMN x int DEFAULT (1/0);",
    )
    .expect("write");
    let out = evolve(&db.url, &dir, &["plan", "--probe"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("probe      failed on the scratch copy: "),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(
            "probe: 0 disagreements, 1 statement failed on the scratch copy (apply would fail there too)\n"
        ),
        "{stdout}"
    );
    assert_eq!(applied(&db.url).await, 1);
    let out = evolve("postgres://nobody@127.0.0.1:1/none", &dir, &["plan"]);
    refused(&out, &["could not connect"]);

    // A probe role without CREATEDB.
    std::fs::write(dir.join("V2__risky.sql"), RISKY).expect("write");
    let client = evolve_pg::connect(&db.url, "test").await.expect("connect");
    let role = format!("plan_probe_{}", std::process::id());
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; GRANT ALL ON SCHEMA public TO {role};
             GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .expect("role");
    let url = format!("{}?user={role}", db.url);
    let out = evolve(&url, &dir, &["plan", "--probe"]);
    refused(&out, &[&role, "CREATEDB", "without --probe"]);
}

/// Another session holds ACCESS EXCLUSIVE on the table the pending file
/// alters: the plan's catalog reads (its size, its definitions) cannot
/// take their moment of ACCESS SHARE, so the plan waits a few seconds and
/// then says so, instead of waiting as long as that session does.
#[tokio::test]
async fn a_table_held_by_another_session_is_said_not_waited_for() {
    let (db, dir) = risky().await;
    let holder = evolve_pg::connect(&db.url, "holder")
        .await
        .expect("connect");
    holder
        .batch_execute("BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(["plan", "--dir"])
        .arg(&dir)
        .arg("--database-url")
        .arg(&db.url)
        .env_remove("DATABASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run evolve plan");
    // Bounded: a plan that waits on the lock is killed, and the test fails.
    let out = loop {
        if child.try_wait().expect("wait").is_some() {
            break child.wait_with_output().expect("output");
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("evolve plan still waits on the lock after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    refused(
        &out,
        &[
            "evolve plan waited 5 s",
            "holds locked",
            "nothing was applied",
        ],
    );
    holder.batch_execute("ROLLBACK").await.expect("unlock");
    assert_eq!(applied(&db.url).await, 1, "nothing was applied");
    // Once the lock is gone the plan goes through.
    let out = evolve(&db.url, &dir, &["plan"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The text plan of a statement on a partitioned table names its
/// partitions in one line per lock, with the advice that works for a
/// partitioned index, and the probe agrees.
#[tokio::test]
async fn a_partitioned_table_s_partitions_are_one_line() {
    let db = evolve_test::fresh_db("plan_cli_partitions").await;
    let client = evolve_pg::connect(&db.url, "test").await.expect("connect");
    let mut setup =
        String::from("CREATE TABLE events (id bigint, at int, note text) PARTITION BY RANGE (at);");
    for p in 0..7 {
        setup.push_str(&format!(
            "CREATE TABLE events_{p} PARTITION OF events FOR VALUES FROM ({}) TO ({});",
            p * 10,
            p * 10 + 10
        ));
    }
    setup.push_str(
        "INSERT INTO events SELECT g, g % 70, 'n' FROM generate_series(1, 7000) g; ANALYZE;",
    );
    client.batch_execute(&setup).await.expect("setup");
    let dir = temp_dir("partitions");
    std::fs::write(
        dir.join("V1__index.sql"),
        "CREATE INDEX events_note ON events (note);\n",
    )
    .expect("write");
    let out = evolve(&db.url, &dir, &["plan", "--probe"]);
    let printed = text(&out.stdout);
    assert!(out.status.success(), "{printed}{}", text(&out.stderr));
    assert!(
        printed
            .contains("  lock       SHARE on public.events (until the file's transaction commits"),
        "{printed}"
    );
    assert!(
        printed.contains(
            "  lock       SHARE on each of the 7 partitions of public.events: public.events_0, public.events_1, public.events_2, public.events_3, public.events_4 and 2 more (until the file's transaction commits"
        ),
        "{printed}"
    );
    assert!(printed.contains("ON ONLY public.events"), "{printed}");
    assert!(printed.contains("  probe      agrees"), "{printed}");
    let _ = std::fs::remove_dir_all(dir);
}
