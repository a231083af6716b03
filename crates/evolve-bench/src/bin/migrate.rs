//! `cargo xtask bench migrate [N]`: applies N (default 1,000) small
//! migrations, each a CREATE TABLE and an INSERT, to a throwaway cluster
//! three ways, each into a fresh database:
//!
//! - floor: one psql session, each file in its own transaction
//!   (`BEGIN; \i file; COMMIT`): PostgreSQL's own work and nothing else;
//! - scale: one psql process per file (`psql -1 -f file`), as a shell loop
//!   would do it;
//! - evolve: `evolve migrate apply`, history rows and checksums included.
//!
//! Then `evolve migrate status` over the N applied migrations. Prints the
//! figures and evolve's ratio to the floor (median of 3 runs for the floor
//! and evolve, one run for the per-process baseline).

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

    let mut floor_times = Vec::new();
    let mut evolve_times = Vec::new();
    let mut status_time = Duration::ZERO;
    for run in 0..runs {
        // Alternate the order so neither side always runs on a warmer server.
        let order = if run % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for floor_first in order {
            let db = rt.block_on(cluster.create_database(&format!("bench_{run}_{floor_first}")))?;
            if floor_first {
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
                let opts = Options::new(db.url.clone(), &dir);
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
    println!(
        "runs (ms): floor {:?}, evolve {:?}",
        floor_times
            .iter()
            .map(Duration::as_millis)
            .collect::<Vec<_>>(),
        evolve_times
            .iter()
            .map(Duration::as_millis)
            .collect::<Vec<_>>()
    );
    floor_times.sort();
    evolve_times.sort();
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
    println!(
        "{:<52} {:>10}",
        format!("evolve migrate status ({n} applied)"),
        fmt(status_time)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
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
