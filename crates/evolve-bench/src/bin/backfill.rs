//! `cargo xtask bench backfill [ROWS] [WRITERS] [SECONDS] [RATE] [NICE]`:
//! a backfill of ROWS rows (default 5,000,000) while WRITERS pgbench-style
//! writers (default 4, each `UPDATE t SET a = a + 1 WHERE id = random` at
//! RATE writes a second, default 1,000, as `pgbench -R` does; 0 for as
//! fast as they can) update the same table.
//!
//! Three phases on one table, in one run:
//!
//! - **writers alone** for SECONDS (default 10): their p99 and longest
//!   write;
//! - **evolve backfill** `b = id * 2` (batches of 5,000 adapting to 200 ms,
//!   lock_timeout 3 s) under the writers: its rate, the writers' p99 and
//!   longest write;
//! - **evolve backfill --nice NICE** `e = id * 2` under the writers, when
//!   NICE (default 1) is above 0: the same, waiting NICE times each
//!   batch's duration before the next, so the writers keep more of the
//!   machine;
//! - **evolve backfill without writers** `d = id * 2`, to tell the
//!   backfill's own cost from the CPU the writers take on a small machine;
//! - **one plain UPDATE** `SET c = id * 2` of the whole table under the
//!   writers: its rate, the writers' p99 and longest write (a writer that
//!   touches a row the UPDATE has changed waits for its commit).
//!
//! Goals: p99 during the backfill within 2x of the writers alone; the
//! backfill's rate at least 0.5x of the single UPDATE's.

use std::time::{Duration, Instant};

use evolve_backfill::{BackfillOptions, BatchOptions, Spec};
use evolve_bench::{Writers, fmt};

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
    let seconds: u64 = arg(3, 10)?;
    let rate: u64 = arg(4, 1000)?;
    let nice: f64 = arg(5, 1.0)?;
    let cluster = evolve_test::Cluster::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(bench(&cluster, rows, writers, seconds, rate, nice))
}

/// `column = id * 2` as evolve backfills it by default (batches of 5,000
/// adapting to 200 ms) with `--nice`: its duration and batch count.
async fn run_backfill(url: &str, column: &str, nice: f64) -> Result<(Duration, u64), Error> {
    let started = Instant::now();
    let opts = BackfillOptions {
        database_url: url.to_string(),
        name: format!("bench {column}"),
        spec: Spec {
            table: "t".into(),
            set: vec![evolve_backfill::script::parse_assignment(&format!(
                "{column} = id * 2"
            ))?],
            filter: None,
            batch: None,
        },
        batches: BatchOptions {
            nice,
            ..BatchOptions::default()
        },
    };
    let mut batches = 0u64;
    evolve_backfill::run(&opts, &mut |e| {
        if matches!(e, evolve_backfill::Event::Batch { .. }) {
            batches += 1;
        }
    })
    .await?;
    Ok((started.elapsed(), batches))
}

async fn bench(
    cluster: &evolve_test::Cluster,
    rows: i64,
    writers: usize,
    seconds: u64,
    rate: u64,
    nice: f64,
) -> Result<(), Error> {
    println!(
        "backfill benchmark: {rows} rows, {writers} writers updating random rows of the same table, {rate} writes/s each (0: unthrottled)"
    );
    let db = cluster.create_database("bench_backfill").await?;
    let c = evolve_pg::connect(&db.url, "bench").await?;
    c.batch_execute(&format!(
        "CREATE TABLE t (id bigint PRIMARY KEY, a int NOT NULL, b bigint, c bigint, d bigint, e bigint, pad text);
         INSERT INTO t SELECT i, 0, NULL, NULL, NULL, NULL, 'padding padding padding' FROM generate_series(1, {rows}) i"
    ))
    .await?;
    c.batch_execute("VACUUM ANALYZE t").await?;

    let w = Writers::start(&db.url, writers, rows, rate).await?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (alone_n, alone_p99, alone_max) = w.stop().await?;

    let w = Writers::start(&db.url, writers, rows, rate).await?;
    let (backfill, batches) = run_backfill(&db.url, "b", 0.0).await?;
    let (bf_n, bf_p99, bf_max) = w.stop().await?;
    let niced = if nice > 0.0 {
        let w = Writers::start(&db.url, writers, rows, rate).await?;
        let (took, batches) = run_backfill(&db.url, "e", nice).await?;
        Some((took, batches, w.stop().await?))
    } else {
        None
    };
    let (quiet, _) = run_backfill(&db.url, "d", 0.0).await?;

    let w = Writers::start(&db.url, writers, rows, rate).await?;
    let started = Instant::now();
    c.batch_execute("UPDATE t SET c = id * 2").await?;
    let update = started.elapsed();
    let (up_n, up_p99, up_max) = w.stop().await?;

    let rate = |d: Duration| rows as f64 / d.as_secs_f64();
    println!(
        "{:<32} {:>12} {:>14} {:>10} {:>12} {:>12}",
        "phase", "time", "rows/s", "writes", "write p99", "longest"
    );
    println!(
        "{:<32} {:>12} {:>14} {:>10} {:>12} {:>12}",
        format!("writers alone ({seconds} s)"),
        "-",
        "-",
        alone_n,
        fmt(alone_p99),
        fmt(alone_max)
    );
    println!(
        "{:<32} {:>12} {:>14.0} {:>10} {:>12} {:>12}",
        format!("evolve backfill ({batches} batches)"),
        fmt(backfill),
        rate(backfill),
        bf_n,
        fmt(bf_p99),
        fmt(bf_max)
    );
    if let Some((took, batches, (n, p99, max))) = niced {
        println!(
            "{:<32} {:>12} {:>14.0} {:>10} {:>12} {:>12}",
            format!("--nice {nice} ({batches} batches)"),
            fmt(took),
            rate(took),
            n,
            fmt(p99),
            fmt(max)
        );
    }
    println!(
        "{:<32} {:>12} {:>14.0} {:>10} {:>12} {:>12}",
        "evolve backfill, no writers",
        fmt(quiet),
        rate(quiet),
        "-",
        "-",
        "-"
    );
    println!(
        "{:<32} {:>12} {:>14.0} {:>10} {:>12} {:>12}",
        "one UPDATE of the whole table",
        fmt(update),
        rate(update),
        up_n,
        fmt(up_p99),
        fmt(up_max)
    );
    println!(
        "write p99 during the backfill / writers alone: {:.2}x (goal <= 2x)",
        bf_p99.as_secs_f64() / alone_p99.as_secs_f64().max(1e-9)
    );
    println!(
        "backfill rate / single UPDATE rate: {:.2}x (goal >= 0.5x)",
        rate(backfill) / rate(update)
    );
    if let Some((took, _, (_, p99, _))) = niced {
        println!(
            "with --nice {nice}: write p99 / writers alone {:.2}x (goal <= 2x), rate / single UPDATE {:.2}x (goal >= 0.5x)",
            p99.as_secs_f64() / alone_p99.as_secs_f64().max(1e-9),
            rate(took) / rate(update)
        );
    }
    println!(
        "backfill rate without writers / single UPDATE rate: {:.2}x",
        rate(quiet) / rate(update)
    );
    println!(
        "longest write: {} during the backfill, {} during the single UPDATE",
        fmt(bf_max),
        fmt(up_max)
    );
    Ok(())
}
