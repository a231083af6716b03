//! `cargo xtask bench rewrite [ROWS] [WRITERS] [RATE]`: integer to bigint
//! on a table of ROWS rows (default 5,000,000) while WRITERS pgbench-style
//! writers (default 4, each `UPDATE t SET a = a + 1 WHERE id = random` at
//! RATE writes a second, default 1,000; 0 for as fast as they can) update
//! it. The replay must outpace the writers: unthrottled writers that keep
//! two cores busy write changes faster than it applies them.
//!
//! Three runs, each on a fresh copy of the table, in one process:
//!
//! - **evolve rewrite** `--alter "ALTER COLUMN id TYPE bigint"` (batches of
//!   5,000 adapting to 200 ms, lock_timeout 3 s);
//! - **plain ALTER TABLE** `ALTER COLUMN id TYPE bigint`, which holds
//!   ACCESS EXCLUSIVE for the whole rewrite;
//! - **pg_repack** `-t t` (Debian's `postgresql-15-repack`, installed by
//!   `cargo xtask bench rewrite`): an online rewrite without a type change,
//!   the reference for what an online rewrite costs.
//!
//! For each: the total time and the longest time any writer was blocked
//! (its longest write). Goal: evolve's longest block under 1 s.

use std::time::{Duration, Instant};

use evolve_backfill::BatchOptions;
use evolve_backfill::rewrite::RewriteOptions;
use evolve_bench::{Writers, fmt, ratio};

fn main() {
    if let Err(e) = run() {
        // A server error shows its SQLSTATE, message and detail.
        let e = match e.downcast::<tokio_postgres::Error>() {
            Ok(pg) => Box::new(evolve_pg::PgError::Query(*pg)),
            Err(other) => other,
        };
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

fn arg<T: std::str::FromStr>(n: usize, default: T) -> Result<T, Error>
where
    T::Err: std::fmt::Display,
{
    match std::env::args().nth(n) {
        None => Ok(default),
        Some(a) => a
            .parse()
            .map_err(|e| format!("argument {n} ({a:?}): {e}").into()),
    }
}

fn run() -> Result<(), Error> {
    let rows: i64 = arg(1, 5_000_000)?;
    let writers: usize = arg(2, 4)?;
    let rate: u64 = arg(3, 1000)?;
    let cluster = evolve_test::Cluster::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(bench(&cluster, rows, writers, rate))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Evolve,
    Alter,
    Repack,
}

/// (total, writes, longest write), or None when pg_repack is missing.
async fn measure(
    cluster: &evolve_test::Cluster,
    rows: i64,
    writers: usize,
    rate: u64,
    way: Way,
) -> Result<Option<(Duration, usize, Duration)>, Error> {
    let repack = cluster.bin("pg_repack");
    if way == Way::Repack && !repack.is_file() {
        return Ok(None);
    }
    let db = cluster.create_database("bench_rewrite").await?;
    let c = evolve_pg::connect(&db.url, "bench").await?;
    c.batch_execute(&format!(
        "CREATE TABLE t (id int PRIMARY KEY, a int NOT NULL, pad text);
         INSERT INTO t SELECT i, 0, 'padding padding padding' FROM generate_series(1, {rows}) i"
    ))
    .await?;
    c.batch_execute("VACUUM ANALYZE t").await?;
    if way == Way::Repack {
        c.batch_execute("CREATE EXTENSION pg_repack").await?;
    }
    let w = Writers::start(&db.url, writers, rows, rate).await?;
    let started = Instant::now();
    match way {
        Way::Evolve => {
            let opts = RewriteOptions {
                database_url: db.url.clone(),
                table: "t".into(),
                alters: vec!["ALTER COLUMN id TYPE bigint".into()],
                keep_old: false,
                batches: BatchOptions::default(),
            };
            evolve_backfill::rewrite::run(&opts, &mut |_| {}).await?;
        }
        Way::Alter => {
            c.batch_execute("ALTER TABLE t ALTER COLUMN id TYPE bigint")
                .await?
        }
        Way::Repack => {
            let port = cluster.port().to_string();
            let name = db.name.clone();
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new(repack)
                    .args([
                        "-h",
                        "127.0.0.1",
                        "-p",
                        &port,
                        "-U",
                        "postgres",
                        "-d",
                        &name,
                        "-t",
                        "t",
                    ])
                    .output()
            })
            .await??;
            if !out.status.success() {
                return Err(
                    format!("pg_repack failed: {}", String::from_utf8_lossy(&out.stderr)).into(),
                );
            }
        }
    }
    let total = started.elapsed();
    let (n, _, longest) = w.stop().await?;
    Ok(Some((total, n, longest)))
}

async fn bench(
    cluster: &evolve_test::Cluster,
    rows: i64,
    writers: usize,
    rate: u64,
) -> Result<(), Error> {
    println!(
        "rewrite benchmark: integer to bigint, {rows} rows, {writers} writers updating random rows, {rate} writes/s each (0: unthrottled)"
    );
    let evolve = measure(cluster, rows, writers, rate, Way::Evolve)
        .await?
        .ok_or("evolve did not run")?;
    let alter = measure(cluster, rows, writers, rate, Way::Alter)
        .await?
        .ok_or("ALTER did not run")?;
    let repack = measure(cluster, rows, writers, rate, Way::Repack).await?;
    println!(
        "{:<28} {:>12} {:>10} {:>16}",
        "way", "total", "writes", "longest block"
    );
    for (name, r) in [
        ("evolve rewrite", Some(evolve)),
        ("plain ALTER TABLE", Some(alter)),
        ("pg_repack (no type change)", repack),
    ] {
        match r {
            Some((total, n, longest)) => {
                println!("{name:<28} {:>12} {n:>10} {:>16}", fmt(total), fmt(longest))
            }
            None => println!(
                "{name:<28} skipped: pg_repack is not installed (apt-get install postgresql-15-repack)"
            ),
        }
    }
    println!(
        "longest block: evolve {} vs plain ALTER {} (goal < 1 s)",
        fmt(evolve.2),
        fmt(alter.2)
    );
    println!("total: evolve / plain ALTER {}", ratio(evolve.0, alter.0));
    if let Some(r) = repack {
        println!("total: evolve / pg_repack {}", ratio(evolve.0, r.0));
    }
    Ok(())
}
