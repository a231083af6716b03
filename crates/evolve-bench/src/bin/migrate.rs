//! `cargo xtask bench migrate [N]`: applies N (default 1,000) small
//! migrations, each a CREATE TABLE and an INSERT, to a throwaway cluster
//! three ways, each into a fresh database:
//!
//! - floor: one psql session, each file in its own transaction
//!   (`BEGIN; \i file; COMMIT`): PostgreSQL's own work and nothing else;
//! - scale: one psql process per file (`psql -1 -f file`), as a shell loop
//!   would do it;
//! - evolve: `evolve migrate apply`, history rows and checksums included;
//! - Flyway: the real Flyway's `migrate` (through its Java API, the driver
//!   of evolve-migrate's tests) with the same files and history table,
//!   timed with the JVM's start and, separately, without it (the driver's
//!   own timing of `migrate`). Needs the jars in `target/flyway/jars`,
//!   which `cargo xtask bench migrate` fetches.
//!
//! Then `evolve migrate status` over the N applied migrations. Prints the
//! figures and evolve's ratio to the floor and to Flyway (median of 3 runs
//! for the floor, evolve and Flyway, one run for the per-process baseline).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use evolve_bench::{fmt, ratio};
use evolve_migrate::{ApplyOptions, Options};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1000);
    let runs = 3;
    let cluster = evolve_test::Cluster::start()?;
    // The same runtime the evolve binary uses.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = std::env::temp_dir().join(format!("evolve-bench-migrate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::with_capacity(n);
    for i in 1..=n {
        let path = dir.join(format!("V{i}__create_t{i}.sql"));
        std::fs::write(
            &path,
            format!(
                "CREATE TABLE t{i} (id bigint PRIMARY KEY, name text NOT NULL);\nINSERT INTO t{i} VALUES ({i}, 'row {i}');\n"
            ),
        )?;
        files.push(path);
    }
    let version = Command::new(cluster.bin("postgres"))
        .arg("--version")
        .output()?;
    println!(
        "migrate benchmark: {n} migrations (CREATE TABLE + INSERT each), {}, loopback, fsync=off",
        String::from_utf8_lossy(&version.stdout).trim()
    );

    let psql = cluster.bin("psql");
    let driver = dir.join("driver.psql");
    let mut script = String::from("\\set ON_ERROR_STOP 1\n");
    for f in &files {
        script.push_str(&format!("BEGIN;\n\\i {}\nCOMMIT;\n", f.display()));
    }
    std::fs::write(&driver, script)?;

    let flyway = flyway_classpath()?;
    let mut floor_times = Vec::new();
    let mut evolve_times = Vec::new();
    let mut flyway_times = Vec::new();
    let mut flyway_migrate_times = Vec::new();
    let mut status_time = Duration::ZERO;
    for run in 0..runs {
        // Rotate the order so no side always runs on a warmer server.
        let mut order = vec![Side::Floor, Side::Evolve];
        if flyway.is_some() {
            order.push(Side::Flyway);
        }
        let first = run % order.len();
        order.rotate_left(first);
        for side in order {
            let db = rt.block_on(cluster.create_database(&format!("bench_{run}_{side:?}")))?;
            if side == Side::Flyway {
                let classpath = flyway.as_deref().unwrap_or_default();
                let (total, migrate) = run_flyway(classpath, &db.url, &dir, n)?;
                flyway_times.push(total);
                flyway_migrate_times.push(migrate);
            } else if side == Side::Floor {
                let start = Instant::now();
                let out = Command::new(&psql)
                    .args(["-X", "-q", "-f"])
                    .arg(&driver)
                    .arg(&db.url)
                    .output()?;
                let elapsed = start.elapsed();
                if !out.status.success() {
                    return Err(
                        format!("psql failed: {}", String::from_utf8_lossy(&out.stderr)).into(),
                    );
                }
                floor_times.push(elapsed);
            } else {
                let mut opts = Options::new(db.url.clone(), &dir);
                opts.history_table = (None, "flyway_schema_history".into());
                let start = Instant::now();
                let report = rt.block_on(evolve_migrate::apply(
                    &opts,
                    &ApplyOptions::default(),
                    &mut |_| {},
                ))?;
                let elapsed = start.elapsed();
                if report.applied != n {
                    return Err(format!("evolve applied {} of {n}", report.applied).into());
                }
                evolve_times.push(elapsed);
                let start = Instant::now();
                let status = rt.block_on(evolve_migrate::status(&opts))?;
                status_time = status_time.max(start.elapsed());
                if status.migrations.len() != n {
                    return Err("status did not list every migration".into());
                }
            }
        }
    }
    let ms = |t: &[Duration]| t.iter().map(Duration::as_millis).collect::<Vec<_>>();
    println!(
        "runs (ms): floor {:?}, evolve {:?}, flyway {:?} (migrate alone {:?})",
        ms(&floor_times),
        ms(&evolve_times),
        ms(&flyway_times),
        ms(&flyway_migrate_times)
    );
    floor_times.sort();
    evolve_times.sort();
    flyway_times.sort();
    flyway_migrate_times.sort();
    let floor = floor_times[runs / 2];
    let evolve = evolve_times[runs / 2];

    let db = rt.block_on(cluster.create_database("bench_per_process"))?;
    let per_process = per_process(&psql, &db.url, &files)?;

    println!(
        "{:<52} {:>10}",
        "psql, one session, BEGIN; \\i file; COMMIT (floor)",
        fmt(floor)
    );
    println!(
        "{:<52} {:>10}  ({} the floor)",
        "psql, one process per file (psql -1 -f)",
        fmt(per_process),
        ratio(per_process, floor)
    );
    println!(
        "{:<52} {:>10}  ({} the floor)",
        "evolve migrate apply",
        fmt(evolve),
        ratio(evolve, floor)
    );
    if flyway.is_some() {
        let total = flyway_times[runs / 2];
        let migrate = flyway_migrate_times[runs / 2];
        println!(
            "{:<52} {:>10}  ({} the floor)",
            "flyway migrate, JVM start included",
            fmt(total),
            ratio(total, floor)
        );
        println!(
            "{:<52} {:>10}  ({} the floor)",
            "flyway migrate, JVM start excluded",
            fmt(migrate),
            ratio(migrate, floor)
        );
        println!(
            "{:<52} {:>10}",
            "flyway / evolve, JVM start included",
            ratio(total, evolve)
        );
        println!(
            "{:<52} {:>10}",
            "flyway / evolve, JVM start excluded",
            ratio(migrate, evolve)
        );
    } else {
        println!(
            "flyway: not run, its jars are not in {}; run 'cargo xtask bench migrate', which fetches them",
            flyway_dir().join("jars").display()
        );
    }
    println!(
        "{:<52} {:>10}",
        format!("evolve migrate status ({n} applied)"),
        fmt(status_time)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Floor,
    Evolve,
    Flyway,
}

/// The workspace's `target/flyway`, where `cargo xtask` puts the jars.
fn flyway_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/flyway")
}

/// The class path of the jars and the compiled driver, or `None` when the
/// jars are missing.
fn flyway_classpath() -> Result<Option<String>, Box<dyn std::error::Error>> {
    let jars = std::env::var_os("EVOLVE_FLYWAY_JARS")
        .map(PathBuf::from)
        .unwrap_or_else(|| flyway_dir().join("jars"));
    let present = std::fs::read_dir(&jars).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("flyway-core-"))
        })
    });
    if !present {
        return Ok(None);
    }
    let classes = flyway_dir().join("bench-driver");
    std::fs::create_dir_all(&classes)?;
    let source = classes.join("FlywayDriver.java");
    std::fs::write(
        &source,
        include_str!("../../../evolve-migrate/tests/flyway/FlywayDriver.java"),
    )?;
    let out = Command::new("javac")
        .arg("-nowarn")
        .arg("-cp")
        .arg(format!("{}/*", jars.display()))
        .arg("-d")
        .arg(&classes)
        .arg(&source)
        .output()?;
    if !out.status.success() {
        return Err(format!("javac failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(Some(format!("{}/*:{}", jars.display(), classes.display())))
}

/// Runs Flyway's migrate in a new JVM: the whole process's time, and the
/// time of migrate alone as the driver reports it.
fn run_flyway(
    classpath: &str,
    url: &str,
    dir: &Path,
    n: usize,
) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    let rest = url
        .strip_prefix("postgres://")
        .ok_or("not a postgres:// URL")?;
    let (user, host) = rest.split_once('@').ok_or("no user in the URL")?;
    let start = Instant::now();
    let out = Command::new("java")
        .arg("-cp")
        .arg(classpath)
        .arg("FlywayDriver")
        .arg(format!("flyway.url=jdbc:postgresql://{host}"))
        .arg(format!("flyway.user={user}"))
        .arg(format!("flyway.locations=filesystem:{}", dir.display()))
        .args(["--", "migrate"])
        .env("REDGATE_DISABLE_TELEMETRY", "true")
        .output()?;
    let total = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let migrate = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["command"] == "migrate")
        .ok_or_else(|| {
            format!(
                "flyway did not run: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    if migrate["ok"] != true || migrate["executed"].as_u64() != Some(n as u64) {
        return Err(format!("flyway migrate failed: {migrate}").into());
    }
    let ms = migrate["ms"].as_u64().ok_or("no time from the driver")?;
    Ok((total, Duration::from_millis(ms)))
}

fn per_process(
    psql: &Path,
    url: &str,
    files: &[PathBuf],
) -> Result<Duration, Box<dyn std::error::Error>> {
    let start = Instant::now();
    for f in files {
        let out = Command::new(psql)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-f"])
            .arg(f)
            .arg(url)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "psql failed on {}: {}",
                f.display(),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
    }
    Ok(start.elapsed())
}
