//! Running `evolve backfill` and `evolve rewrite` as users do, in the
//! foreground or in the background with their JSON Lines events read as
//! they come.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

pub fn evolve_cmd(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.args(args)
        .env("DATABASE_URL", url)
        .env_remove("EVOLVE_LOG");
    cmd
}

/// Runs evolve to the end (killed and failed after two minutes).
pub fn evolve(url: &str, args: &[&str]) -> Output {
    let child = evolve_cmd(url, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run evolve");
    let pid = child.id();
    let (tx, rx) = channel();
    // Reads stdout and stderr while waiting, so a full pipe never stalls it.
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("evolve {args:?} still running after 2 minutes");
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a failed run: exit code 1, one error line on stderr containing
/// every one of `parts`.
pub fn assert_refused(out: &Output, parts: &[&str]) {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit 1\nstdout: {}\nstderr: {stderr}",
        text(&out.stdout)
    );
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("error: "), "one error line: {stderr}");
    for p in parts {
        assert!(stderr.contains(p), "{p:?} in {stderr}");
    }
}

/// evolve in the background; its stdout lines arrive on a channel.
pub struct Background {
    child: Child,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl Background {
    pub fn start(url: &str, args: &[&str]) -> Background {
        let mut child = evolve_cmd(url, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run evolve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Background {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most a minute) for a line that `pred` accepts.
    pub fn wait_for(
        &mut self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                        && pred(&v)
                    {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.kill();
                    let mut stderr = String::new();
                    if let Some(mut e) = self.child.stderr.take() {
                        let _ = e.read_to_string(&mut stderr);
                    }
                    panic!(
                        "no {what} line; saw:\n{}\nstderr: {stderr}",
                        self.seen.join("\n")
                    );
                }
            }
        }
    }

    /// SIGKILL.
    pub fn kill(mut self) {
        self.child.kill().expect("kill");
        let _ = self.child.wait();
    }

    /// Waits for the exit (at most two minutes); the exit status, every
    /// stdout line and stderr.
    pub fn finish(mut self) -> (ExitStatus, Vec<String>, String) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
        if Instant::now() >= deadline {
            let _ = self.child.kill();
        }
        let status = self.child.wait().expect("wait");
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        (status, self.seen, stderr)
    }
}

pub fn events(lines: &[String], kind: &str) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == kind)
        .collect()
}

pub async fn connect(url: &str) -> Client {
    evolve_pg::connect(url, "evolve test")
        .await
        .expect("connect")
}

pub async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

/// Everything a rewrite creates is gone: no shadow, log or old table, no
/// index, function or trigger named by evolve.
pub async fn assert_no_leftovers(c: &Client) {
    for (catalog, column) in [
        ("pg_class", "relname"),
        ("pg_proc", "proname"),
        ("pg_trigger", "tgname"),
    ] {
        assert_eq!(
            count(
                c,
                &format!("SELECT count(*) FROM {catalog} WHERE {column} LIKE '\\_evolve\\_rw\\_%'")
            )
            .await,
            0,
            "nothing of evolve's left in {catalog}"
        );
    }
}
