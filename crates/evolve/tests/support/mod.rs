//! What the binary's pipeline tests share: an upstream database on the
//! shared cluster and a sink database on a second one, an evolve.toml,
//! `evolve pipeline run` as a child process, and `evolve` runs the way a
//! user types them.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use evolve_test::{Cluster, TestDb};
use serde_json::Value;

pub const EVOLVE: &str = env!("CARGO_BIN_EXE_evolve");

/// The sink cluster, separate from the upstream (shared) one.
fn sink_cluster() -> &'static Cluster {
    static SINK: OnceLock<Cluster> = OnceLock::new();
    SINK.get_or_init(|| Cluster::start().expect("start the sink cluster"))
}

/// Two databases, a directory with an evolve.toml naming them `pg_conn`
/// and `sink_conn`, and clients of both.
pub struct Env {
    pub up_db: TestDb,
    pub sink_db: TestDb,
    pub up: tokio_postgres::Client,
    pub sink: tokio_postgres::Client,
    pub dir: PathBuf,
    pub config: PathBuf,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub async fn env(hint: &str) -> Env {
    let up_db = evolve_test::fresh_db(hint).await;
    let sink_cluster = tokio::task::spawn_blocking(sink_cluster).await.unwrap();
    let sink_db = sink_cluster.create_database(hint).await.unwrap();
    let dir = std::env::temp_dir().join(format!("evolve-cli-{}-{hint}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
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
    let up = connect(&up_db.url).await;
    let sink = connect(&sink_db.url).await;
    Env {
        up_db,
        sink_db,
        up,
        sink,
        dir,
        config,
    }
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

/// A running `evolve pipeline run`; killed on drop.
pub struct Pipeline {
    child: Child,
    pub url: String,
}

impl Pipeline {
    /// Starts it with `args` after `--config`, the environment changed by
    /// `env` (`None` removes a variable), and stderr to `stderr`.
    pub fn start_with(
        config: &Path,
        args: &[&str],
        env: &[(&str, Option<&str>)],
        stderr: Stdio,
    ) -> Pipeline {
        let mut command = Command::new(EVOLVE);
        command
            .args(["pipeline", "run", "--config"])
            .arg(config)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let mut child = command.spawn().expect("spawn evolve pipeline run");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        assert!(
            line.starts_with("evolve pipeline listening on http://127.0.0.1:"),
            "{line:?}"
        );
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Pipeline { child, url }
    }

    pub fn start(config: &Path) -> Pipeline {
        Pipeline::start_with(config, &[], &[], Stdio::inherit())
    }

    /// SIGTERM; waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
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
                start.elapsed() < Duration::from_secs(20),
                "evolve pipeline run did not stop within 20 s of SIGTERM"
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

/// `evolve ARGS`, stdin empty, without `EVOLVE_ADMIN` or
/// `EVOLVE_ADMIN_TOKEN` from the caller.
pub async fn evolve(args: &[&str]) -> Output {
    evolve_with(args, &[]).await
}

/// [`evolve`] with the variables `env` set.
pub async fn evolve_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        Command::new(EVOLVE)
            .args(&args)
            .env_remove("EVOLVE_ADMIN")
            .env_remove("EVOLVE_ADMIN_TOKEN")
            .envs(env)
            .stdin(Stdio::null())
            .output()
            .expect("run evolve")
    })
    .await
    .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `evolve sql --admin URL ARGS`, which must succeed; its stdout.
pub async fn sql_ok(admin: &str, args: &[&str]) -> String {
    let mut all = vec!["sql", "--admin", admin];
    all.extend_from_slice(args);
    let out = evolve(&all).await;
    assert!(
        out.status.success(),
        "evolve sql {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `GET /status` through `evolve status --format json`.
pub async fn status(admin: &str) -> Vec<Value> {
    let out = evolve(&["status", "--admin", admin, "--format", "json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    report["objects"].as_array().expect("objects").clone()
}

/// The status object `name` of `kind` (`table`, `materialized view`, ...).
pub async fn object(admin: &str, kind: &str, name: &str) -> Option<Value> {
    status(admin)
        .await
        .into_iter()
        .find(|o| o["kind"] == kind && o["name"] == name)
}

/// Waits until table `name` is running.
pub async fn wait_running(admin: &str, name: &str) {
    let start = Instant::now();
    loop {
        let table = object(admin, "table", name).await;
        if table.as_ref().is_some_and(|t| t["state"] == "running") {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "table {name} is not running after 60 s: {table:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every object in the status report is running: a sink says
/// "starting" for a moment after its initial load, until its stream task
/// reports in.
pub async fn wait_all_running(admin: &str) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let objects = status(admin).await;
        if !objects.is_empty() && objects.iter().all(|o| o["state"] == "running") {
            return objects;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "objects are not all running after 60 s: {objects:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The README's text between the line `$ cat FILE` and the next `$ ` line.
pub fn readme_file(file: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let marker = format!("$ cat {file}\n");
    let start = readme
        .find(&marker)
        .unwrap_or_else(|| panic!("README.md has no `{}`", marker.trim()))
        + marker.len();
    let end = readme[start..]
        .find("\n$ ")
        .map_or(readme.len(), |n| start + n + 1);
    readme[start..end].to_string()
}

/// `(key, document)` as text of the sink table `public.orders_json`.
pub async fn sink_rows(sink: &tokio_postgres::Client) -> Vec<(String, String)> {
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

/// What the upstream server computes for `public.orders`, keyed by `id`.
pub async fn upstream_rows(up: &tokio_postgres::Client) -> Vec<(String, String)> {
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

/// Waits until the sink holds exactly the upstream server's documents.
pub async fn wait_converged(env: &Env) {
    let start = Instant::now();
    loop {
        let exists: bool = env
            .sink
            .query_one("SELECT to_regclass('public.orders_json') IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0);
        if exists {
            let (want, got) = (upstream_rows(&env.up).await, sink_rows(&env.sink).await);
            if want == got {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "the sink did not converge in 90 s: upstream {} rows, sink {} rows",
                want.len(),
                got.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Counts every row written into the sink's `public.orders_json` from now
/// on, in `public.orders_json_audit`.
pub async fn audit_sink(sink: &tokio_postgres::Client) {
    sink.batch_execute(
        "CREATE TABLE public.orders_json_audit (op text, key jsonb);
         CREATE FUNCTION public.orders_json_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO public.orders_json_audit
             VALUES (TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.orders_json
           FOR EACH ROW EXECUTE FUNCTION public.orders_json_audit_fn();",
    )
    .await
    .unwrap();
}

pub async fn audit_count(sink: &tokio_postgres::Client) -> i64 {
    sink.query_one("SELECT count(*) FROM public.orders_json_audit", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until the audit count reaches `expected`, then checks that it
/// stays there for a moment.
pub async fn wait_writes(sink: &tokio_postgres::Client, expected: i64) {
    let start = Instant::now();
    loop {
        let n = audit_count(sink).await;
        assert!(
            n <= expected,
            "{n} writes into the sink, more than {expected}"
        );
        if n == expected {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            assert_eq!(audit_count(sink).await, expected, "writes after settling");
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{n} writes into the sink, waiting for {expected}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ------------------------------------------------------------- Kafka topics

/// Every committed record of `topic` on the brokers `bootstrap`; none
/// while the topic does not exist yet (a sink creates it when it opens,
/// which a busy machine may not have done when a test first looks).
pub async fn topic_records(bootstrap: &str, topic: &str) -> Vec<evolve_test::Record> {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        match evolve_test::read_committed(&bootstrap, &topic, Duration::from_secs(60)) {
            Ok(records) => records,
            Err(evolve_test::HarnessError::KafkaRead { why, .. })
                if why == "the topic does not exist" =>
            {
                Vec::new()
            }
            Err(e) => panic!("{e}"),
        }
    })
    .await
    .unwrap()
}

/// Waits until `topic` has `n` committed records, then checks that no
/// more come for a moment.
pub async fn wait_topic_records(
    bootstrap: &str,
    topic: &str,
    n: usize,
) -> Vec<evolve_test::Record> {
    let start = Instant::now();
    loop {
        let got = topic_records(bootstrap, topic).await;
        assert!(
            got.len() <= n,
            "{} records in {topic}, more than {n}",
            got.len()
        );
        if got.len() == n {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let again = topic_records(bootstrap, topic).await;
            assert_eq!(again.len(), n, "records after settling");
            return again;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} records in {topic} after 120 s, waiting for {n}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// JSON bytes as a value (the test fails on anything else).
pub fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {}", text(bytes)))
}

/// The topic folded as a compacted topic would be: last value per key
/// (the key's JSON text), tombstones delete.
pub fn folded(records: &[evolve_test::Record]) -> std::collections::BTreeMap<String, Value> {
    let mut state = std::collections::BTreeMap::new();
    for r in records {
        let key = json(r.key.as_deref().unwrap()).to_string();
        match &r.value {
            Some(v) => state.insert(key, json(v)),
            None => state.remove(&key),
        };
    }
    state
}

/// What the upstream server computes for `orders`' documents, keyed like
/// [`folded`].
pub async fn upstream_documents(env: &Env) -> std::collections::BTreeMap<String, Value> {
    upstream_rows(&env.up)
        .await
        .into_iter()
        .map(|(k, d)| (json(k.as_bytes()).to_string(), json(d.as_bytes())))
        .collect()
}

// ------------------------------------------------------------- processes

/// A child process killed when the test ends, however it ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `evolve registry serve --listen LISTEN --storage sqlite:<env>/registry.db`
/// with `extra` arguments: the running registry and the URL it printed
/// (`http://...`, or `https://...` with TLS).
pub fn serve_registry(env: &Env, listen: &str, extra: &[&std::ffi::OsStr]) -> (Killed, String) {
    let mut registry = Killed(
        Command::new(EVOLVE)
            .args(["registry", "serve", "--listen", listen, "--storage"])
            .arg(format!("sqlite:{}", env.dir.join("registry.db").display()))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(registry.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (registry, url)
}

/// Runs `python3` with `args` (a script path, or `-c CODE` and its
/// arguments), `stdin` on its standard input; its stdout (the test fails
/// when it exits badly).
pub async fn python3(args: Vec<std::ffi::OsString>, stdin: String) -> String {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new("python3")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "python3 {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    })
    .await
    .unwrap()
}
