//! The Debezium baseline: `debezium-mysql/` of this crate, a Java program
//! that runs Debezium's MySQL connector in the embedded engine from the
//! binlog file and position every consumer starts at (taken before the
//! load; handed to the engine as a stored offset, the tables' schemas read
//! with `snapshot.mode=recovery`, the schema history in memory; MariaDB's
//! lack of `SHOW BINARY LOG STATUS` papered over as the crate's docs of
//! the `mysql` benchmark say), and counts
//! and discards its JSON change events until the marker row. `cargo xtask
//! bench mysql` builds it with Maven into `target/debezium-mysql` (the
//! program's jar and `lib/`) and says here, through
//! `EVOLVE_BENCH_DEBEZIUM_MYSQL` (that directory) or
//! `EVOLVE_BENCH_DEBEZIUM_MYSQL_SKIP` (why it could not), what it found; run
//! by hand, the benchmark looks in `target/debezium-mysql`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Result;

/// The program's main class.
const MAIN: &str = "evolve.bench.DebeziumMysqlDrain";
/// The program's jar.
const JAR: &str = "evolve-bench-debezium-mysql.jar";
/// What its report lines start with.
const PREFIX: &str = "evolve-debezium: ";

/// Whether the baseline can run.
pub enum Baseline {
    /// `java`, and the directory with the jar and `lib/`.
    Ready(PathBuf),
    /// Why not.
    Skipped(String),
}

impl Baseline {
    pub fn find() -> Baseline {
        if let Ok(reason) = std::env::var("EVOLVE_BENCH_DEBEZIUM_MYSQL_SKIP")
            && !reason.is_empty()
        {
            return Baseline::Skipped(reason);
        }
        let dir = std::env::var_os("EVOLVE_BENCH_DEBEZIUM_MYSQL")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/debezium-mysql")
                    .to_path_buf()
            });
        let java = Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !java.is_ok_and(|s| s.success()) {
            return Baseline::Skipped("`java` is not on PATH (or `java -version` fails)".into());
        }
        let jar = dir.join(JAR);
        if !jar.is_file() || !dir.join("lib").is_dir() {
            return Baseline::Skipped(format!(
                "{} is not built; `cargo xtask bench mysql` builds it with mvn",
                jar.display()
            ));
        }
        Baseline::Ready(dir)
    }
}

/// One drain of the binlog.
pub struct Drained {
    /// From `java`'s start until the marker line was read: JVM start-up,
    /// the engine's set-up and the drain.
    pub total: Duration,
    /// From the engine's construction (JVM start-up excluded) to the marker.
    pub engine: Duration,
    /// From the engine's construction to its first change event.
    pub first: Duration,
    /// Change events of the table, up to and including the marker.
    pub events: i64,
}

/// Where the engine reads from.
pub struct Target<'a> {
    pub port: u16,
    pub database: &'a str,
    /// `database.table`.
    pub table: &'a str,
    /// The binlog file and position to start at.
    pub file: &'a str,
    pub pos: u64,
}

/// Runs the program on `target` until it has consumed the marker.
pub async fn drain(dir: &Path, target: &Target<'_>) -> Result<Drained> {
    let log = std::env::temp_dir().join(format!(
        "evolve-bench-debezium-mysql-{}.log",
        std::process::id()
    ));
    let offsets = std::env::temp_dir().join(format!(
        "evolve-bench-debezium-mysql-{}.offsets",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&offsets);
    let mut cmd = Command::new("java");
    cmd.arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            dir.join(JAR).display(),
            dir.join("lib").display()
        ))
        .arg(MAIN)
        .args([
            "--host",
            "127.0.0.1",
            "--user",
            "evolve",
            "--password",
            "evolve",
        ])
        .args(["--port", &target.port.to_string()])
        .args(["--database", target.database])
        .args(["--table", target.table])
        .args(["--file", target.file])
        .args(["--pos", &target.pos.to_string()])
        .arg("--offsets")
        .arg(&offsets)
        .args([
            "--timeout-seconds",
            &evolve_bench::stream::TIMEOUT.as_secs().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?);
    let log_tail = {
        let log = log.clone();
        move || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        }
    };
    let result = tokio::task::spawn_blocking(move || -> Result<Drained> {
        let started = Instant::now();
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut marker = None;
        let mut errors = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            let Some(report) = line.strip_prefix(PREFIX) else {
                continue;
            };
            if let Some(fields) = report.strip_prefix("marker ") {
                marker = Some((started.elapsed(), fields.to_string()));
            } else if let Some(e) = report.strip_prefix("error ") {
                errors.push(e.to_string());
            }
        }
        let status = child.wait()?;
        let Some((total, fields)) = marker else {
            return Err(format!(
                "the Debezium program exited ({status}) before the marker: {}",
                errors.join("; ")
            )
            .into());
        };
        if !status.success() {
            return Err(format!("the Debezium program failed ({status}) after the marker").into());
        }
        let field = |name: &str| -> Result<i64> {
            fields
                .split_whitespace()
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| format!("no {name} in `{fields}`"))?
                .parse::<i64>()
                .map_err(Into::into)
        };
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        Ok(Drained {
            total,
            engine: ms(field("engine_ms")?),
            first: ms(field("first_ms")?),
            events: field("events")?,
        })
    })
    .await?;
    let _ = std::fs::remove_file(&offsets);
    match result {
        Ok(drained) => {
            let _ = std::fs::remove_file(&log);
            Ok(drained)
        }
        Err(e) => Err(format!("{e}\nDebezium's log ({}):\n{}", log.display(), log_tail()).into()),
    }
}
