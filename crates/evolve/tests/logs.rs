//! The binary's log lines, read from a file as an operator would: what the
//! pipeline does is there at the default level, without colour codes when
//! stderr is not a terminal; `--log-format json` gives one JSON object per
//! line; `--log-level` wins over `EVOLVE_LOG`.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

fn setup(source: &str, absorb: &str) -> String {
    format!(
        "CREATE SOURCE {source} FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
         CREATE TABLE orders_v1 FROM SOURCE {source} (REFERENCE public.orders);
         CREATE MATERIALIZED VIEW orders_json WITH (ABSORB = '{absorb}') AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;"
    )
}

fn stderr_file(env: &Env) -> (std::path::PathBuf, Stdio) {
    let path = env.dir.join("stderr.log");
    let file = std::fs::File::create(&path).unwrap();
    (path, Stdio::from(file))
}

/// `ABSORB = 'auto'` at the default log level, stderr to a file: one INFO
/// line per step, in order, and no ANSI escape anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absorb_steps_are_logged_at_the_default_level_without_colour() {
    let env = env("cli_logs_absorb").await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text);
             INSERT INTO orders SELECT i, 'c' || i FROM generate_series(1, 100) i;",
        )
        .await
        .unwrap();
    let (log, stderr) = stderr_file(&env);
    let mut pipeline = Pipeline::start_with(
        &env.config,
        &[],
        &[("EVOLVE_LOG", None), ("NO_COLOR", None), ("RUST_LOG", None)],
        stderr,
    );
    let admin = pipeline.url.clone();
    sql_ok(&admin, &["-c", &setup("src_logs_absorb", "auto")]).await;
    wait_running(&admin, "orders_v1").await;
    env.up
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN region text;
             UPDATE orders SET region = 'eu' WHERE id % 10 = 0;",
        )
        .await
        .unwrap();
    let steps = [
        "absorb: created table \"orders_v2\" from public.orders, the next version of \"orders_v1\" (column_drift)",
        "absorb: created replacement \"orders_json_absorb_v2\" for materialized view \"orders_json\" over table \"orders_v2\"; hydrating",
        "absorb: replacement \"orders_json_absorb_v2\" hydrated; applying it",
        "absorb: applied replacement \"orders_json_absorb_v2\": materialized view \"orders_json\" reads table \"orders_v2\"",
        "absorb: dropped the old table \"orders_v1\"",
    ];
    let start = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains(steps[4]) {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the absorb steps were not all logged in 60 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = pipeline.terminate();
    assert!(status.success(), "{status:?}");

    assert!(!text.contains("\x1b["), "ANSI escapes in a file:\n{text}");
    let mut at = 0;
    for step in steps {
        let line = text[at..]
            .lines()
            .find(|l| l.contains(step))
            .unwrap_or_else(|| panic!("no line {step:?} after the previous step:\n{text}"));
        assert!(line.contains(" INFO evolve_pipeline::absorb: "), "{line}");
        at += text[at..].find(line).unwrap() + line.len();
    }
    // The statements were not logged, nor the connection's password.
    assert!(!text.contains("postgres://"), "{text}");
}

/// `--log-format json`: every line of stderr is one JSON object with
/// level, target and message. `EVOLVE_LOG=off` would silence them;
/// `--log-level info` wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_and_the_flag_wins_over_the_environment() {
    let env = env("cli_logs_json").await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text);
             INSERT INTO orders VALUES (1, 'ada'), (2, 'bob');",
        )
        .await
        .unwrap();
    let (log, stderr) = stderr_file(&env);
    let mut pipeline = Pipeline::start_with(
        &env.config,
        &["--log-level", "info", "--log-format", "json"],
        &[("EVOLVE_LOG", Some("off"))],
        stderr,
    );
    let admin = pipeline.url.clone();
    sql_ok(&admin, &["-c", &setup("src_logs_json", "manual")]).await;
    wait_running(&admin, "orders_v1").await;
    let status = pipeline.terminate();
    assert!(status.success(), "{status:?}");

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    assert!(!lines.is_empty(), "no log lines");
    for line in &lines {
        for field in ["level", "target", "message", "timestamp"] {
            assert!(line[field].is_string(), "no {field} in {line}");
        }
    }
    assert!(
        lines.iter().any(|l| l["level"] == "INFO"
            && l["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("evolve_pipeline::"))
            && l["table"] == "orders_v1"),
        "{text}"
    );
    assert!(!text.contains("\x1b["), "{text}");

    // A bare word that is not a level is refused, before anything runs.
    let out = evolve(&["--log-level", "verbose", "status", "--admin", &admin]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        support::text(&out.stderr)
            .starts_with("error: --log-level \"verbose\" is not a log level;"),
        "{}",
        support::text(&out.stderr)
    );
    // EVOLVE_LOG takes the same, and is held to the same.
    let out =
        support::evolve_with(&["status", "--admin", &admin], &[("EVOLVE_LOG", "verbose")]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        support::text(&out.stderr).starts_with("error: EVOLVE_LOG \"verbose\" is not a log level;"),
        "{}",
        support::text(&out.stderr)
    );
}
