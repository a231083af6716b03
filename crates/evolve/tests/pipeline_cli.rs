//! `evolve pipeline run`, `evolve sql` and `evolve status` as users run
//! them: two throwaway clusters (upstream and sink), an evolve.toml, the
//! README's statements end to end.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use evolve_test::Cluster;
use serde_json::Value;

const EVOLVE: &str = env!("CARGO_BIN_EXE_evolve");

fn temp_dir(hint: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("evolve-pipeline-cli-{}-{hint}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A running `evolve pipeline run`; killed on drop.
struct Pipeline {
    child: Child,
    url: String,
}

impl Pipeline {
    fn start(config: &Path) -> Pipeline {
        let mut child = Command::new(EVOLVE)
            .args(["pipeline", "run", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn evolve pipeline run");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        assert!(
            line.starts_with("evolve pipeline listening on http://127.0.0.1:"),
            "{line:?}"
        );
        assert!(line.contains("(state "), "{line:?}");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Pipeline { child, url }
    }

    /// SIGTERM, and the exit status within `timeout`.
    fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                start.elapsed() < timeout,
                "evolve pipeline run did not stop within {timeout:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn evolve(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(EVOLVE)
            .args(&args)
            .env_remove("EVOLVE_ADMIN")
            .output()
            .expect("run evolve")
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

/// `(key, document)` as text, ordered: the sink table's rows, and what the
/// upstream server computes for its rows.
async fn sink_rows(sink: &tokio_postgres::Client) -> Vec<(String, String)> {
    let exists: bool = sink
        .query_one("SELECT to_regclass('public.orders_json') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    if !exists {
        return Vec::new();
    }
    sink.query(
        "SELECT key::text, data::text FROM public.orders_json ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

async fn upstream_rows(up: &tokio_postgres::Client) -> Vec<(String, String)> {
    up.query(
        "SELECT jsonb_build_object('id', t.id)::text, \
                coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb)::text \
         FROM public.orders t ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

async fn wait_converged(up: &tokio_postgres::Client, sink: &tokio_postgres::Client) {
    let start = Instant::now();
    loop {
        let (want, got) = (upstream_rows(up).await, sink_rows(sink).await);
        if want == got {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sink did not converge in 30 s: upstream {} rows, sink {} rows\n{want:?}\n{got:?}",
            want.len(),
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The README's statements.
const STATEMENTS: &str = "\
CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders);
CREATE MATERIALIZED VIEW orders_json AS
  SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_end_to_end_through_the_binary() {
    let (upstream, sink_cluster) = std::thread::scope(|s| {
        let a = s.spawn(Cluster::start);
        let b = s.spawn(Cluster::start);
        (
            a.join().unwrap().expect("upstream cluster"),
            b.join().unwrap().expect("sink cluster"),
        )
    });
    let up_db = upstream.create_database("cli_up").await.unwrap();
    let sink_db = sink_cluster.create_database("cli_sink").await.unwrap();
    let up = connect(&up_db.url).await;
    let sink = connect(&sink_db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2),
                              placed date);
         INSERT INTO orders VALUES (1, 'ada', 10.50, '2024-01-02'), (2, 'bob', NULL, NULL),
                                   (3, 'cy', 3, '2024-03-04');",
    )
    .await
    .unwrap();

    let dir = temp_dir("e2e");
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n[connections.sink_conn]\nurl = \"{}\"\n",
            up_db.url, sink_db.url
        ),
    )
    .unwrap();
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();

    // A misspelled statement: exit 1, psql's error with a hint, nothing
    // created.
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREAT SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ERROR:  syntax error at or near \"CREAT\"\nLINE 1: CREAT"),
        "{stderr}"
    );
    assert!(stderr.contains("\nHINT:  Did you mean CREATE?"), "{stderr}");
    assert_eq!(text(&out.stdout), "");

    // The README's statements.
    let out = evolve(&["sql", "--admin", &admin, "-c", STATEMENTS]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "CREATE SOURCE\nCREATE TABLE\nCREATE MATERIALIZED VIEW\nCREATE SINK\n"
    );
    wait_converged(&up, &sink).await;

    // Changes upstream reach the sink.
    up.batch_execute(
        "INSERT INTO orders VALUES (4, 'dee', 99.99, '2024-04-05');
         UPDATE orders SET total = 11, placed = NULL WHERE id = 1;
         DELETE FROM orders WHERE id = 2;",
    )
    .await
    .unwrap();
    wait_converged(&up, &sink).await;
    assert_eq!(sink_rows(&sink).await.len(), 3);

    // SHOW from a file, as a table; and as JSON.
    let file = dir.join("show.sql");
    std::fs::write(&file, "SHOW TABLES;\nSHOW SINKS;\n").unwrap();
    let out = evolve(&["sql", "--admin", &admin, "-f", file.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(" orders_v1 | src    | public.orders | id  |       4 | running"),
        "{stdout}"
    );
    assert!(stdout.contains("(1 row)"), "{stdout}");
    assert!(
        stdout.contains(" orders_sink | orders_json | sink_conn  | public.orders_json"),
        "{stdout}"
    );
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "--format",
        "json",
        "-c",
        "SHOW MATERIALIZED VIEWS",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        body["results"][0]["rows"],
        serde_json::json!([{"name": "orders_json", "table": "orders_v1", "absorb": "manual"}])
    );

    // A reference to an unknown source: exit 1, nothing created.
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE TABLE orders_v2 FROM SOURCE nope (REFERENCE public.orders)",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("ERROR:  source \"nope\" does not exist"),
        "{}",
        text(&out.stderr)
    );

    // Status: the table is running, with its documents.
    let out = evolve(&["status", "--admin", &admin, "--format", "json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let table = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "table" && o["name"] == "orders_v1")
        .unwrap_or_else(|| panic!("no table in {report}"))
        .clone();
    assert_eq!(table["state"], "running", "{report}");
    assert_eq!(table["documents"], 3, "{report}");
    assert_eq!(report["objects"].as_array().unwrap().len(), 4, "{report}");
    assert!(!report.to_string().contains("postgres://"), "{report}");
    let out = evolve(&["status", "--admin", &admin]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(" table             | orders_v1   | running |"),
        "{}",
        text(&out.stdout)
    );

    // SIGTERM stops it cleanly.
    let status = pipeline.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");

    // Nobody listening: one line naming the URL.
    let out = evolve(&["sql", "--admin", &admin, "-c", "SHOW SOURCES"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&admin), "{stderr}");
    assert!(
        stderr.contains("is `evolve pipeline run` running?"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `evolve drift`: nothing at first, then one row in the product spec's
/// layout after a column is added upstream, the same row as JSON, and an
/// unknown `--source` as an error (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_through_the_binary() {
    let up_db = evolve_test::fresh_db("cli_drift").await;
    let up = connect(&up_db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL);
         INSERT INTO orders VALUES (1, 'ada');",
    )
    .await
    .unwrap();
    let dir = temp_dir("drift");
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n",
            up_db.url
        ),
    )
    .unwrap();
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE SOURCE src_drift FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
         CREATE TABLE orders_v1 FROM SOURCE src_drift (REFERENCE public.orders);",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let start = Instant::now();
    loop {
        let out = evolve(&["status", "--admin", &admin, "--format", "json"]).await;
        let report: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        let running = report["objects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["name"] == "orders_v1" && o["state"] == "running");
        if running {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "orders_v1 is not running after 30 s: {report}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let out = evolve(&["drift", "--admin", &admin]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "no drift: every table matches its upstream table\n"
    );

    up.batch_execute("ALTER TABLE orders ADD COLUMN region text")
        .await
        .unwrap();
    let out = evolve(&["drift", "--admin", &admin]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        " table     | upstream      | signal       | status  | added_upstream | dropped_upstream | type_changed\n \
         orders_v1 | public.orders | column_drift | running | {region}       | {}               | {}\n"
    );
    let out = evolve(&[
        "drift",
        "--admin",
        &admin,
        "--format",
        "json",
        "--source",
        "src_drift",
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).expect("drift JSON");
    assert_eq!(
        body,
        serde_json::json!({"tables": [{
            "table": "orders_v1", "source": "src_drift", "upstream": "public.orders",
            "signal": "column_drift", "status": "running",
            "added_upstream": ["region"], "dropped_upstream": [], "type_changed": [],
            "error": null, "detail": null
        }]})
    );

    let out = evolve(&["drift", "--admin", &admin, "--source", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: source \"nope\" does not exist"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "");

    let status = pipeline.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `evolve subscribe NAME --snapshot` against `evolve pipeline run`: the
/// documents, then each change as it happens, one JSON line each on
/// stdout; SIGTERM ends it with exit 0. A materialized view that does not
/// exist: exit 1 and one line on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_through_the_binary() {
    /// A child process killed on drop (a failing test leaves none).
    struct Subscriber(Child);
    impl Drop for Subscriber {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    let up_db = evolve_test::fresh_db("cli_subscribe").await;
    let up = connect(&up_db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
         INSERT INTO orders VALUES (1, 'ada', 10.50), (2, 'bob', NULL), (3, 'cy', 3);",
    )
    .await
    .unwrap();
    let dir = temp_dir("subscribe");
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\nretain_history = \"5m\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n",
            up_db.url
        ),
    )
    .unwrap();
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE SOURCE src_subscribe FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
         CREATE TABLE orders_v1 FROM SOURCE src_subscribe (REFERENCE public.orders);
         CREATE MATERIALIZED VIEW orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Started before the table runs: it waits, then sends the snapshot.
    let mut child = Subscriber(
        Command::new(EVOLVE)
            .args(["subscribe", "orders_json", "--snapshot", "--admin", &admin])
            .env_remove("EVOLVE_ADMIN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn evolve subscribe"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || -> Value {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from evolve subscribe within 30 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };

    let mut snapshot = Vec::new();
    let start = loop {
        let line = next();
        match line["type"].as_str() {
            Some("change") => snapshot.push(line),
            Some("progress") => break line["ts"].clone(),
            _ => panic!("{line}"),
        }
    };
    assert_eq!(snapshot.len(), 3, "{snapshot:?}");
    assert!(snapshot.iter().all(|l| l["diff"] == 1 && l["ts"] == start));
    assert_eq!(
        snapshot[0],
        serde_json::json!({"type": "change", "ts": start, "diff": 1, "key": {"id": 1},
                           "data": {"id": 1, "customer": "ada", "total": 10.50}})
    );
    assert_eq!(
        snapshot[1]["data"],
        serde_json::json!({"id": 2, "customer": "bob"})
    );

    // Live: an insert, then an update (a retraction and an insertion at
    // one position), each followed by its progress line.
    up.batch_execute("INSERT INTO orders VALUES (4, 'dee', 99.99)")
        .await
        .unwrap();
    let insert = next();
    assert_eq!(
        (&insert["type"], &insert["diff"], &insert["key"]),
        (
            &Value::from("change"),
            &Value::from(1),
            &serde_json::json!({"id": 4})
        ),
        "{insert}"
    );
    assert_eq!(insert["data"]["customer"], "dee");
    assert_eq!(
        next(),
        serde_json::json!({"type": "progress", "ts": insert["ts"]})
    );
    up.batch_execute("UPDATE orders SET customer = 'ada l.' WHERE id = 1")
        .await
        .unwrap();
    let (old, new) = (next(), next());
    assert_eq!(
        (&old["diff"], &new["diff"]),
        (&Value::from(-1), &Value::from(1))
    );
    assert_eq!(old["ts"], new["ts"]);
    assert_eq!(old["data"]["customer"], "ada");
    assert_eq!(new["data"]["customer"], "ada l.");
    assert_eq!(next()["type"], "progress");

    // SIGTERM: exit 0.
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "evolve subscribe did not stop within 10 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");

    // A materialized view that does not exist: exit 1, the error and its
    // hint, as psql prints them.
    let out = evolve(&["subscribe", "missing", "--admin", &admin]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr,
        "ERROR:  materialized view \"missing\" does not exist\n\
         HINT:  SHOW MATERIALIZED VIEWS lists the materialized views there are; CREATE MATERIALIZED VIEW makes one.\n"
    );
    assert_eq!(text(&out.stdout), "");

    // The pipeline stops under a subscriber: it says so, names the
    // position to go on from, and exits 1.
    let mut follower = Command::new(EVOLVE)
        .args(["subscribe", "orders_json", "--snapshot", "--admin", &admin])
        .env_remove("EVOLVE_ADMIN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn evolve subscribe");
    let mut first = BufReader::new(follower.stdout.take().expect("stdout"));
    let ts = loop {
        let mut line = String::new();
        assert!(
            first.read_line(&mut line).expect("read") > 0,
            "no progress line"
        );
        let line: Value = serde_json::from_str(&line).expect("JSON");
        if line["type"] == "progress" {
            break line["ts"].as_str().expect("ts").to_string();
        }
    };
    let status = pipeline.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    let out = follower.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("ended the stream of \"orders_json\" (it stopped)")
            && stderr.contains(&format!("--as-of {ts} to go on where it stopped")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
