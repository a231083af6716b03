//! The harness against a real server: shared cluster, fresh databases,
//! settings, and cleanup on drop, on exit and on SIGKILL.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use evolve_test::{Cluster, Options, fresh_db, shared};

/// One value from a one-row, one-column query, on a connection that is
/// closed before returning.
async fn query_value(url: &str, sql: &str) -> String {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    let connection = tokio::spawn(connection);
    let row = client
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let value: String = row.get(0);
    drop(client);
    connection.await.unwrap().unwrap();
    value
}

fn accepts_connections(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_ok()
}

fn keep_requested() -> bool {
    std::env::var_os("EVOLVE_TEST_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

fn wait_until_gone(path: &Path, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !path.exists() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn parallel_tests_get_distinct_databases_on_one_cluster() {
    // Each thread plays a #[tokio::test]: its own thread, its own runtime.
    let threads: Vec<_> = ["parallel a", "parallel b"]
        .into_iter()
        .map(|hint| {
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let db = fresh_db(hint).await;
                    let current = query_value(&db.url, "SELECT current_database()::text").await;
                    (db, current)
                })
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let (a, b) = (&results[0], &results[1]);
    assert_ne!(a.0.name, b.0.name);
    assert_eq!(a.0.name, a.1);
    assert_eq!(b.0.name, b.1);
    assert!(a.0.name.starts_with("evolve_parallel_a_"), "{}", a.0.name);
    let port = format!(":{}/", shared().port());
    assert!(a.0.url.contains(&port) && b.0.url.contains(&port));
}

#[tokio::test]
async fn fresh_database_has_logical_wal_and_no_fsync() {
    let db = fresh_db("settings").await;
    assert_eq!(query_value(&db.url, "SHOW wal_level").await, "logical");
    assert_eq!(query_value(&db.url, "SHOW fsync").await, "off");
    assert_eq!(
        query_value(&db.url, "SHOW max_replication_slots").await,
        "20"
    );
    assert_eq!(
        query_value(&db.url, "SELECT current_user::text").await,
        "postgres"
    );
    assert!(shared().bin("pg_recvlogical").is_file());
    assert!(shared().data_dir().join("PG_VERSION").is_file());
}

#[test]
fn dropping_a_cluster_stops_it_and_removes_its_directory() {
    if keep_requested() {
        eprintln!("skipped: EVOLVE_TEST_KEEP keeps clusters on purpose");
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::start().unwrap_or_else(|e| panic!("{e}"));
    let start_time = started.elapsed();
    let dir = cluster.data_dir().parent().unwrap().to_path_buf();
    let port = cluster.port();
    assert_ne!(port, shared().port());
    assert!(accepts_connections(port));
    assert!(cluster.log_tail(50).contains("ready to accept connections"));

    let stopping = Instant::now();
    drop(cluster);
    eprintln!(
        "cluster started in {start_time:?}, dropped in {:?}",
        stopping.elapsed()
    );
    assert!(!dir.exists(), "{} still exists", dir.display());
    assert!(!accepts_connections(port), "port {port} still accepts");
}

/// `Options::settings` win over the harness's own (wal_level, slots, WAL
/// senders) and keep the rest; a setting that cannot be a
/// `postgresql.conf` line is refused before anything starts.
#[tokio::test]
async fn extra_settings_win_over_the_harness_defaults() {
    let settings = |pairs: &[(&str, &str)]| Options {
        settings: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Options::default()
    };
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(settings(&[
            ("wal_level", "replica"),
            ("max_replication_slots", "3"),
            ("max_wal_senders", "4"),
            ("application_name", "it's quoted"),
        ]))
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    let url = cluster.url("postgres");
    for (sql, want) in [
        ("SHOW wal_level", "replica"),
        ("SHOW max_replication_slots", "3"),
        ("SHOW max_wal_senders", "4"),
        ("SHOW fsync", "off"),
        ("SHOW max_connections", "200"),
        (
            "SELECT setting FROM pg_settings WHERE name = 'application_name'",
            "it's quoted",
        ),
    ] {
        assert_eq!(query_value(&url, sql).await, want, "{sql}");
    }
    drop(cluster);

    for bad in [
        ("max_wal_senders = 1\nfsync", "on"),
        ("port", "1\nfsync = on"),
    ] {
        let err = Cluster::start_with(settings(&[bad]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("fix Options::settings"), "{err}");
    }
    let err = Cluster::start_with(settings(&[("no_such_setting", "1")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no_such_setting"), "{err}");
}

/// What the child process reports: the shared cluster's data dir and port.
fn read_report(path: &Path) -> Option<(PathBuf, u16)> {
    let text = std::fs::read_to_string(path).ok()?;
    let (dir, port) = text.trim_end().rsplit_once('\n')?;
    Some((PathBuf::from(dir), port.parse().ok()?))
}

/// Run [`child_starts_shared_cluster`] in a copy of this test binary, end it
/// (`exit`: it calls `process::exit(0)`; `kill`: we SIGKILL it), and check
/// that the watchdog removes its cluster.
fn watchdog_cleans_up(mode: &str) {
    let report = std::env::temp_dir().join(format!(
        "evolve-test-child-{}-{mode}.txt",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_starts_shared_cluster", "--exact", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .env("EVOLVE_TEST_CHILD_REPORT", &report)
        .env("EVOLVE_TEST_CHILD_MODE", mode)
        .env_remove("EVOLVE_TEST_KEEP")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let started = Instant::now();
    let (data_dir, port) = loop {
        if let Some(report) = read_report(&report) {
            break report;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited ({status}) without reporting a cluster");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "child reported no cluster within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    std::fs::remove_file(&report).unwrap();
    if mode == "kill" {
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    assert!(mode == "kill" || status.success(), "child: {status}");

    let dir = data_dir.parent().unwrap();
    match wait_until_gone(dir, Duration::from_secs(10)) {
        Some(took) => eprintln!("{mode}: watchdog removed {} in {took:?}", dir.display()),
        None => panic!("{} still exists 10 s after the child ended", dir.display()),
    }
    assert!(!accepts_connections(port), "port {port} still accepts");
}

#[test]
fn watchdog_removes_shared_cluster_after_exit() {
    watchdog_cleans_up("exit");
}

#[test]
fn watchdog_removes_shared_cluster_after_sigkill() {
    watchdog_cleans_up("kill");
}

/// Not a test of its own: the child process of the watchdog tests. It starts
/// the shared cluster, reports where it is, then exits without running any
/// destructor, or waits to be killed.
#[test]
#[ignore = "run by the watchdog tests in a child process"]
fn child_starts_shared_cluster() {
    let Some(report) = std::env::var_os("EVOLVE_TEST_CHILD_REPORT") else {
        return;
    };
    let cluster = shared();
    let text = format!("{}\n{}\n", cluster.data_dir().display(), cluster.port());
    let partial = PathBuf::from(&report).with_extension("partial");
    std::fs::write(&partial, text).unwrap();
    std::fs::rename(&partial, &report).unwrap();
    if std::env::var_os("EVOLVE_TEST_CHILD_MODE").is_some_and(|m| m == "exit") {
        std::process::exit(0);
    }
    // Waiting to be killed; not forever if the parent died first.
    std::thread::sleep(Duration::from_secs(120));
}
