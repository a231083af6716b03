//! The Debezium baselines' shared part: a Java program of this crate
//! (`debezium/` for the PostgreSQL connector, `debezium-mysql/` for the
//! MySQL one) that runs the connector in Debezium's embedded engine and
//! counts and discards its JSON change events until the marker row,
//! printing `evolve-debezium: marker engine_ms=.. first_ms=.. events=..`.
//! `cargo xtask bench NAME` builds it with Maven into `target/<program>`
//! (the jar and `lib/`) and says through `EVOLVE_BENCH_<PROGRAM>` (that
//! directory) or `EVOLVE_BENCH_<PROGRAM>_SKIP` (why it could not) what it
//! found; run by hand, a benchmark looks in `target/<program>`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::stream::per_second;
use crate::{fmt, ratio};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What the program's report lines start with.
const PREFIX: &str = "evolve-debezium: ";

/// One of the crate's Debezium programs.
pub struct Program {
    /// Its Maven project's directory under the crate, and its build's
    /// under `target/` (`debezium`, `debezium-mysql`).
    pub name: &'static str,
    /// Its main class.
    pub main: &'static str,
    /// The benchmark that builds it (`cargo xtask bench <bench>`).
    pub bench: &'static str,
}

impl Program {
    /// The variable naming its build directory.
    fn var(&self) -> String {
        format!(
            "EVOLVE_BENCH_{}",
            self.name.to_uppercase().replace('-', "_")
        )
    }

    fn jar(&self, dir: &Path) -> PathBuf {
        dir.join(format!("evolve-bench-{}.jar", self.name))
    }
}

/// Whether the baseline can run.
pub enum Baseline {
    /// `java`, and the directory with the jar and `lib/`.
    Ready(PathBuf),
    /// Why not.
    Skipped(String),
}

impl Baseline {
    pub fn find(program: &Program) -> Baseline {
        if let Ok(reason) = std::env::var(format!("{}_SKIP", program.var()))
            && !reason.is_empty()
        {
            return Baseline::Skipped(reason);
        }
        let dir = std::env::var_os(program.var())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target")
                    .join(program.name)
            });
        let java = Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !java.is_ok_and(|s| s.success()) {
            return Baseline::Skipped("`java` is not on PATH (or `java -version` fails)".into());
        }
        let jar = program.jar(&dir);
        if !jar.is_file() || !dir.join("lib").is_dir() {
            return Baseline::Skipped(format!(
                "{} is not built; `cargo xtask bench {}` builds it with mvn",
                jar.display(),
                program.bench
            ));
        }
        Baseline::Ready(dir)
    }
}

/// One drain, up to the marker.
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

/// Runs `program` (built in `dir`) with `args` until it has consumed the
/// marker; its log goes to a temporary file, whose last lines come with an
/// error.
pub async fn run(program: &Program, dir: &Path, args: Vec<String>) -> Result<Drained> {
    let log = std::env::temp_dir().join(format!(
        "evolve-bench-{}-{}.log",
        program.name,
        std::process::id()
    ));
    let mut cmd = Command::new("java");
    cmd.arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            program.jar(dir).display(),
            dir.join("lib").display()
        ))
        .arg(program.main)
        .args(args)
        .args([
            "--timeout-seconds",
            &crate::stream::TIMEOUT.as_secs().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?);
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
    match result {
        Ok(drained) => {
            let _ = std::fs::remove_file(&log);
            Ok(drained)
        }
        Err(e) => {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            Err(format!("{e}\nDebezium's log ({}):\n{tail}", log.display()).into())
        }
    }
}

/// The benchmark table's rows for Debezium (`label` names it) against
/// evolve's `evolve` for `n` changes, and the line on where its time went;
/// or the row that says why it was skipped.
pub fn print_rows(
    label: &str,
    drained: Option<&Drained>,
    baseline: &Baseline,
    n: i64,
    evolve: Duration,
) {
    match (drained, baseline) {
        (Some(d), _) => {
            println!(
                "| {label}, JSON events discarded, from `java` start | {} | {} | **{}** |",
                fmt(d.total),
                per_second(n, d.total),
                ratio(d.total, evolve)
            );
            println!(
                "| the same, from the engine's construction (JVM start-up excluded) | {} | {} | **{}** |",
                fmt(d.engine),
                per_second(n, d.engine),
                ratio(d.engine, evolve)
            );
            println!(
                "Debezium: JVM start-up {}, then its first event {} after the engine's construction; {} events from the first to the marker in {} ({} events/s)",
                fmt(d.total.saturating_sub(d.engine)),
                fmt(d.first),
                d.events,
                fmt(d.engine.saturating_sub(d.first)),
                per_second(d.events, d.engine.saturating_sub(d.first))
            );
        }
        (None, Baseline::Skipped(why)) => println!("| Debezium | **SKIPPED**: {why} | | |"),
        (None, Baseline::Ready(_)) => println!("| Debezium | **FAILED** (see above) | | |"),
    }
}
