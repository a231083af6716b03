//! `cargo xtask bench rebuild [ROWS]`: how long readers are blocked while
//! evolve widens `orders.status` under a three-layer chain (daily matview
//! with a unique index, monthly matview over it, a dashboard view).
//!
//! Two runs on fresh databases with ROWS (default 1,000,000) orders each:
//!
//! - evolve: the rebuild as `evolve migrate apply` does it by default, the
//!   matviews recreated WITH NO DATA in the transaction and refreshed after
//!   the commit;
//! - naive: the same, but the matviews populated inside the transaction
//!   (`--populate-in-transaction`), which is what a hand-written
//!   drop/alter/recreate migration does.
//!
//! During each, one reader of `orders` runs point queries and records the
//! longest wait; another reads `daily` and counts the reads that fail
//! (the relation it had looked up was dropped, or it is not populated yet)
//! and how long `daily` could not be read: its longest wait (readers queue
//! behind the refresh's lock) or the span of failed reads, whichever is
//! longer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use evolve_bench::{fmt, ratio};
use evolve_migrate::{ApplyOptions, Options};

struct Readings {
    apply: Duration,
    orders_longest_wait: Duration,
    daily_errors: u64,
    daily_window: Duration,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let rows: i64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let cluster = evolve_test::Cluster::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "rebuild benchmark: ALTER TABLE orders ALTER COLUMN status TYPE text under daily -> monthly -> dashboard, {rows} orders"
    );
    let evolve = rt.block_on(measure(&cluster, rows, false))?;
    let naive = rt.block_on(measure(&cluster, rows, true))?;
    for (name, r) in [
        ("evolve (refresh after commit)", &evolve),
        ("naive (populate in transaction)", &naive),
    ] {
        println!(
            "{name:<34} apply {:>10}  orders reader blocked at most {:>10}  daily unreadable {:>10} ({} failed reads)",
            fmt(r.apply),
            fmt(r.orders_longest_wait),
            fmt(r.daily_window),
            r.daily_errors
        );
    }
    println!(
        "orders blocked: evolve {} vs naive {} ({} of the naive time)",
        fmt(evolve.orders_longest_wait),
        fmt(naive.orders_longest_wait),
        ratio(evolve.orders_longest_wait, naive.orders_longest_wait)
    );
    Ok(())
}

async fn measure(
    cluster: &evolve_test::Cluster,
    rows: i64,
    populate_in_transaction: bool,
) -> Result<Readings, Box<dyn std::error::Error>> {
    let db = cluster
        .create_database(if populate_in_transaction {
            "bench_naive"
        } else {
            "bench_evolve"
        })
        .await?;
    let setup = evolve_pg::connect(&db.url, "bench setup").await?;
    setup
        .batch_execute(&format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY, status varchar(20) NOT NULL,
                                  amount numeric NOT NULL, created date NOT NULL);
             INSERT INTO orders SELECT i, (ARRAY['open','paid','shipped','done'])[1 + i % 4],
                                       i % 1000, date '2024-01-01' + (i % 730)::int
                                FROM generate_series(1, {rows}) i;
             ANALYZE orders;
             CREATE MATERIALIZED VIEW daily AS
                 SELECT created, status, sum(amount) AS total, count(*) AS n FROM orders GROUP BY 1, 2;
             CREATE UNIQUE INDEX daily_key ON daily (created, status);
             CREATE MATERIALIZED VIEW monthly AS
                 SELECT date_trunc('month', created) AS month, sum(total) AS total FROM daily GROUP BY 1;
             CREATE VIEW dashboard AS SELECT month, total FROM monthly;"
        ))
        .await?;
    let dir = std::env::temp_dir().join(format!(
        "evolve-bench-rebuild-{}-{populate_in_transaction}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("V1__widen_status.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;\n",
    )?;

    let stop = Arc::new(AtomicBool::new(false));
    let orders_reader = {
        let stop = stop.clone();
        let client = evolve_pg::connect(&db.url, "bench orders reader").await?;
        tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            let mut id: i64 = 1;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let _ = client
                    .query_opt("SELECT status FROM orders WHERE id = $1", &[&id])
                    .await;
                longest = longest.max(started.elapsed());
                id = id % 1000 + 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            longest
        })
    };
    let daily_reader = {
        let stop = stop.clone();
        let client = evolve_pg::connect(&db.url, "bench daily reader").await?;
        tokio::spawn(async move {
            // Unreadable: the longest single read (readers queue behind the
            // drop and the refresh) or the span from the first failed read
            // to the next good one, whichever is longer.
            let (mut errors, mut longest) = (0u64, Duration::ZERO);
            let (mut first_error, mut span) = (None::<Instant>, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let ok = client
                    .query_one("SELECT count(*) FROM daily", &[])
                    .await
                    .is_ok();
                let now = Instant::now();
                longest = longest.max(now - started);
                if !ok {
                    errors += 1;
                    first_error.get_or_insert(started);
                } else if let Some(f) = first_error.take() {
                    span = span.max(now - f);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (errors, longest.max(span))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let opts = Options::new(db.url.clone(), &dir);
    let apply_opts = ApplyOptions {
        populate_in_transaction,
        ..Default::default()
    };
    let started = Instant::now();
    let report = evolve_migrate::apply(&opts, &apply_opts, &mut |_| {}).await?;
    let apply = started.elapsed();
    if report.applied != 1 {
        return Err("the migration did not apply".into());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let orders_longest_wait = orders_reader.await?;
    let (daily_errors, daily_window) = daily_reader.await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Readings {
        apply,
        orders_longest_wait,
        daily_errors,
        daily_window,
    })
}
