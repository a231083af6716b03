//! The real Flyway, driven through its Java API by `FlywayDriver.java`
//! (beside this file), compiled with `javac` on first use into
//! `target/flyway/`. The jars (flyway-core, flyway-database-postgresql and
//! the PostgreSQL JDBC driver) are fetched by `cargo xtask test` into
//! `target/flyway/jars`, or found in `EVOLVE_FLYWAY_JARS`.
//!
//! Without the jars a test fails under `CI=true` and is skipped with a
//! message elsewhere.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The workspace's `target/flyway`.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/flyway")
        .components()
        .collect()
}

fn jars_dir() -> PathBuf {
    std::env::var_os("EVOLVE_FLYWAY_JARS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("jars"))
}

fn has_flyway(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("flyway-core-") && n.ends_with(".jar"))
        })
    })
}

/// Real Flyway, ready to run.
pub struct Flyway {
    classpath: String,
}

/// Flyway, or `None` (with a message) when its jars are absent outside CI.
pub fn flyway() -> Option<&'static Flyway> {
    static FLYWAY: OnceLock<Option<Flyway>> = OnceLock::new();
    FLYWAY
        .get_or_init(|| {
            let jars = jars_dir();
            if !has_flyway(&jars) {
                let message = format!(
                    "the Flyway jars are not in {}; run 'cargo xtask test' (it fetches them with Maven) or set EVOLVE_FLYWAY_JARS",
                    jars.display()
                );
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("{message}");
                }
                eprintln!("SKIPPED: {message}");
                return None;
            }
            let classes = compile_driver(&jars);
            Some(Flyway {
                classpath: format!("{}/*:{}", jars.display(), classes.display()),
            })
        })
        .as_ref()
}

/// Compiles the driver once per source text into `target/flyway/driver-<hash>`.
fn compile_driver(jars: &Path) -> PathBuf {
    let text = include_str!("FlywayDriver.java").as_bytes();
    let hash = text.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let dir = cache_dir().join(format!("driver-{hash:016x}"));
    if dir.join("FlywayDriver.class").is_file() {
        return dir;
    }
    let tmp = cache_dir().join(format!("driver-tmp-{}-{hash:016x}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create the driver's class directory");
    let source = tmp.join("FlywayDriver.java");
    std::fs::write(&source, text).expect("write FlywayDriver.java");
    let out = Command::new("javac")
        .arg("-nowarn")
        .arg("-cp")
        .arg(format!("{}/*", jars.display()))
        .arg("-d")
        .arg(&tmp)
        .arg(&source)
        .output()
        .expect("run javac (is a JDK installed?)");
    assert!(
        out.status.success(),
        "javac FlywayDriver.java failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another test process may have won the race; either copy will do.
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    dir
}

/// `jdbc:postgresql://host:port/db` and the user of a
/// `postgres://user[:password]@host:port/db` URL.
pub fn jdbc(url: &str) -> Vec<(String, String)> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .expect("a postgres:// URL");
    let (auth, host) = rest.split_once('@').expect("a user in the URL");
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let mut out = vec![
        (
            "flyway.url".to_string(),
            format!("jdbc:postgresql://{host}"),
        ),
        ("flyway.user".to_string(), user.to_string()),
    ];
    if !password.is_empty() {
        out.push(("flyway.password".to_string(), password.to_string()));
    }
    out
}

/// What one Flyway command printed.
#[derive(Debug, Clone)]
pub struct Outcome(pub Value);

impl Outcome {
    pub fn ok(&self) -> bool {
        self.0["ok"].as_bool().unwrap_or(false)
    }
    pub fn error(&self) -> String {
        self.0["error"].as_str().unwrap_or_default().to_string()
    }
    pub fn ms(&self) -> u64 {
        self.0["ms"].as_u64().unwrap_or(0)
    }
    pub fn rows(&self) -> Vec<Value> {
        self.0["rows"].as_array().cloned().unwrap_or_default()
    }
    /// Panics with Flyway's error unless the command succeeded.
    pub fn expect_ok(&self, what: &str) -> &Self {
        assert!(self.ok(), "flyway {what} failed: {}", self.error());
        self
    }
}

impl Flyway {
    /// Runs `commands` in one JVM against `url` with the migrations of
    /// `dir` and the extra `config` (`flyway.*` properties, or `("@FILE",
    /// "")` for a flyway.conf); one outcome per command.
    pub fn run(
        &self,
        url: &str,
        dir: &Path,
        config: &[(&str, &str)],
        commands: &[&str],
    ) -> Vec<Outcome> {
        let outcomes = self.drive(url, dir, config, commands);
        assert!(
            outcomes.len() == commands.len() + 1,
            "flyway refused the configuration: {}",
            outcomes[0].error()
        );
        outcomes.into_iter().skip(1).collect()
    }

    /// Whether Flyway accepts the configuration: the outcome of
    /// configuring it, no command run.
    pub fn configure(&self, url: &str, dir: &Path, config: &[(&str, &str)]) -> Outcome {
        self.drive(url, dir, config, &[]).remove(0)
    }

    /// The driver's outcomes, "configure" first.
    fn drive(
        &self,
        url: &str,
        dir: &Path,
        config: &[(&str, &str)],
        commands: &[&str],
    ) -> Vec<Outcome> {
        let mut cmd = Command::new("java");
        cmd.arg("-XX:TieredStopAtLevel=1")
            .arg("-Xshare:auto")
            .arg("-cp")
            .arg(&self.classpath)
            .arg("FlywayDriver")
            .env("REDGATE_DISABLE_TELEMETRY", "true")
            .env("FLYWAY_TELEMETRY_OPTOUT", "true");
        for (k, v) in jdbc(url) {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg(format!("flyway.locations=filesystem:{}", dir.display()));
        for (k, v) in config {
            // `@FILE`: the driver reads a flyway.conf.
            if k.starts_with('@') {
                cmd.arg(k);
            } else {
                cmd.arg(format!("{k}={v}"));
            }
        }
        cmd.arg("--").args(commands);
        let out = cmd.output().expect("run java");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let outcomes: Vec<Outcome> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .map(Outcome)
            .collect();
        let refused = outcomes.len() == 1 && !outcomes[0].ok();
        assert!(
            out.status.success() && (refused || outcomes.len() == commands.len() + 1),
            "flyway {commands:?} did not finish ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        outcomes
    }

    /// One command; panics unless it succeeded.
    pub fn ok(&self, url: &str, dir: &Path, config: &[(&str, &str)], command: &str) -> Outcome {
        let o = self.run(url, dir, config, &[command]).remove(0);
        o.expect_ok(command);
        o
    }
}
