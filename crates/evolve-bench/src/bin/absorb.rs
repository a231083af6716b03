//! `cargo xtask bench absorb [--rows N]`: the replacement swap that absorbs
//! a column added upstream, against a plain snapshot of the same table, on
//! two throwaway clusters (upstream and sink).
//!
//! Each round uses a fresh upstream database, sink database and pipeline:
//! `orders (id bigint PRIMARY KEY, status text, amount numeric, note
//! text)`, table `orders_v1`, interface `orders_json` and a sink into
//! `public.orders_json`, running in-process (library API, 2-worker
//! runtime); then ROWS rows inserted upstream in transactions of
//! [`LOAD_BATCH`] and streamed, waited for until the sink holds them all
//! (not a sink's initial load, which holds every document in memory and
//! would leave the resident set at that size). Then
//! `ALTER TABLE orders ADD COLUMN region text` and one `UPDATE` that sets
//! `region` on every row with `id % 100 = 0` (exactly 1%), waited for until
//! the source has applied it (`orders_v1` pinned its columns before the
//! ALTER, so no document changes and the sink gets nothing). Measured:
//!
//! - hydrate: `create_table(orders_v2)` and `create_replacement` until
//!   `orders_v2` is running. This is a plain snapshot of the table through
//!   evolve (copy into the store, then the stream's pending changes and,
//!   in the same store transaction, the one comparison of the two tables
//!   that gives the keys whose documents differ, kept from then on), and
//!   the baseline of the ratio;
//! - apply: `apply_replacement`, which returns once the swap is committed
//!   in the store; and until the sink has committed it (its progress row
//!   reaches the swap's position, read from the bus; the sink writes the
//!   swap's entries and that position in one transaction). The progress
//!   row is polled rather than `count(*) ... WHERE data ? 'region'`, a
//!   sequential scan of the whole sink table that would take CPU from the
//!   pipeline on a 2-core machine every 10 ms; the count is checked once
//!   afterwards;
//! - downstream changes: the `Change`s of the interface on the pipeline's
//!   bus (subscribed before the apply), which must all be at the swap's
//!   position, all updates, and exactly ROWS / 100; and the sink's rows
//!   with a region, which must be the same number;
//! - where the apply's time goes: the swap message's upstream commit time
//!   (the request: store reads, a new upstream connection,
//!   `pg_logical_emit_message`), when the bus published the swap (stream
//!   and the swap's store transaction), when `apply_replacement` returned
//!   (it polls the store every 50 ms), when the sink had it, and the
//!   sink's upsert replayed alone on the same documents; and, with the
//!   pipeline stopped, a comparison of every key as one query alone and
//!   with its feed inserts (rolled back), and a read of both tables in key
//!   order (what the comparison at the end of the hydrate reads; the swap
//!   reads only the differing keys), timed by the `sqlite3` command line
//!   on the store, when it is installed;
//! - peak resident memory of the process (VmHWM, reset through
//!   `/proc/self/clear_refs`) during the hydrate and during the apply, and
//!   the resident set before each: the table's size should not show in
//!   the growth.
//!
//! A round of 100,000 rows runs first when ROWS is larger (default
//! 1,000,000), so that memory and time can be compared across sizes. The
//! program exits non-zero when the downstream changes are not exactly 1%.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use evolve_bench::{Running, cpu_since, cpu_time, fmt, lsn_value, mib, proc_status, ratio};
use evolve_pipeline::{Config, Pipeline, TableSpec, TableState};
use tokio::sync::{broadcast, oneshot, watch};
use tokio_postgres::Client;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// How long any step may take before the benchmark gives up.
const TIMEOUT: Duration = Duration::from_secs(1800);

/// The smaller round, run first when ROWS is larger.
const SMALL: i64 = 100_000;

/// Rows per upstream transaction of the load.
const LOAD_BATCH: i64 = 10_000;

/// The row of id `g` (an SQL expression over `g`).
const ROW: &str = "g, (ARRAY['open', 'paid', 'shipped'])[1 + g % 3], (g % 100000) / 100.0, \
     CASE WHEN g % 4 = 0 THEN NULL ELSE 'note ' || g END";

fn main() {
    if let Err(e) = run() {
        match e
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.as_db_error())
        {
            Some(db) => eprintln!("error: {}", evolve_pg::describe_db_error(db, None)),
            None => eprintln!("error: {e}"),
        }
        std::process::exit(1);
    }
}

fn rows_arg() -> Result<i64> {
    let mut rows = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.strip_prefix("--rows=") {
            Some(v) => v.to_string(),
            None if arg == "--rows" => args.next().ok_or("--rows needs a number")?,
            None => {
                return Err(format!("unknown argument {arg:?}; usage: absorb [--rows N]").into());
            }
        };
        rows = value
            .parse()
            .map_err(|_| format!("--rows: {value:?} is not a number"))?;
    }
    if rows < 1000 || rows % 100 != 0 {
        return Err("--rows must be a multiple of 100, at least 1000".into());
    }
    Ok(rows)
}

fn run() -> Result<()> {
    let n = rows_arg()?;
    let up = evolve_test::Cluster::start()?;
    let sink = evolve_test::Cluster::start()?;
    // The runtime `evolve pipeline run` uses: multi-threaded, one worker
    // per core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let version = Command::new(up.bin("postgres")).arg("--version").output()?;
    println!(
        "absorb benchmark: a column added upstream with a value on 1% of {n} rows, {}, two clusters on loopback, fsync=off",
        String::from_utf8_lossy(&version.stdout).trim()
    );
    let result = rt.block_on(bench(&up, &sink, n));
    if result.is_err() {
        eprintln!("upstream log:\n{}", up.log_tail(20));
        eprintln!("sink log:\n{}", sink.log_tail(20));
    }
    result
}

async fn connect(url: &str) -> Result<Client> {
    Ok(evolve_pg::connect(url, "evolve-bench").await?)
}

/// Polls `sql` (one bool) every 10 ms until it is true; the time it took.
async fn wait_for(client: &Client, sql: &str, started: Instant, what: &str) -> Result<Duration> {
    loop {
        if client.query_one(sql, &[]).await?.get::<_, bool>(0) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > TIMEOUT {
            return Err(format!("{what} did not finish within {TIMEOUT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn client_bool(client: &Client, sql: &str) -> Result<bool> {
    Ok(client.query_one(sql, &[]).await?.get(0))
}

async fn count(client: &Client, sql: &str) -> Result<i64> {
    Ok(client.query_one(sql, &[]).await?.get(0))
}

/// Resets the peak resident set (VmHWM) to the current one; returns it.
fn reset_peak() -> Result<u64> {
    std::fs::write("/proc/self/clear_refs", "5")?;
    Ok(proc_status("VmRSS:"))
}

/// `+12 MiB`: how far the peak went above the resident set before.
fn growth(peak: u64, before: u64) -> String {
    format!("+{:.0} MiB", peak.saturating_sub(before) as f64 / 1024.0)
}

/// With thousands separators.
fn thousands(v: i64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn per_second(rows: i64, d: Duration) -> String {
    thousands((rows as f64 / d.as_secs_f64().max(1e-9)).round() as i64)
}

fn micros_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The interface's changes in one committed transaction on the bus.
#[derive(Clone, Debug)]
struct Seen {
    /// When the bus delivered it, since the apply started.
    at: Duration,
    /// Its position (`X/Y`).
    pos: String,
    /// Its upstream commit time, Unix microseconds.
    commit_time_micros: i64,
    changes: usize,
    updates: usize,
}

/// Follows the bus (polled every millisecond) until `stop`: every
/// transaction with changes of `interface`; the first is also sent to
/// `first`.
fn follow(
    mut bus: broadcast::Receiver<Arc<evolve_pipeline::bus::Committed>>,
    interface: i64,
    started: Instant,
    first_tx: oneshot::Sender<Seen>,
    stop: &AtomicBool,
) -> std::result::Result<Vec<Seen>, String> {
    let mut first = Some(first_tx);
    let mut seen = Vec::new();
    loop {
        let committed = match bus.try_recv() {
            Ok(c) => c,
            Err(broadcast::error::TryRecvError::Empty) => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(seen);
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(broadcast::error::TryRecvError::Closed) => return Ok(seen),
            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                return Err(format!("the bus follower lagged by {n} transactions"));
            }
        };
        let ours: Vec<_> = committed
            .changes
            .iter()
            .filter(|c| c.interface == interface)
            .collect();
        if ours.is_empty() {
            continue;
        }
        let s = Seen {
            at: started.elapsed(),
            pos: committed.pos.to_string(),
            commit_time_micros: committed.commit_time_micros,
            changes: ours.len(),
            updates: ours
                .iter()
                .filter(|c| c.old.is_some() && c.new.is_some())
                .count(),
        };
        if let Some(first) = first.take() {
            let _ = first.send(s.clone());
        }
        seen.push(s);
    }
}

/// What one round measured.
struct Round {
    rows: i64,
    /// Where `orders_v2` first showed as copied (or running), and running.
    copied: Duration,
    hydrate: Duration,
    hydrate_cpu: String,
    hydrate_peak: u64,
    hydrate_before: u64,
    apply: Duration,
    sink: Duration,
    apply_cpu: String,
    /// Peak during the apply: when `apply_replacement` returned, and when
    /// the sink had committed the swap.
    apply_peak: u64,
    sink_peak: u64,
    apply_before: u64,
    /// The swap's upstream commit (the request), since the apply started.
    requested: Duration,
    /// The swap on the bus.
    swap: Seen,
    /// Every transaction with changes of the interface on the bus.
    bus_transactions: usize,
    bus_changes: usize,
    sink_with_region: i64,
    /// The sink's upsert of the swap's rows, replayed on its own.
    sink_upsert: Duration,
    /// `sqlite3` timings: the comparison alone, with its feed inserts,
    /// and reading both tables once in key order.
    compare: Option<(Duration, Duration, Duration)>,
}

async fn bench(up: &evolve_test::Cluster, sink: &evolve_test::Cluster, n: i64) -> Result<()> {
    let sizes = if n > SMALL { vec![SMALL, n] } else { vec![n] };
    let mut rounds = Vec::new();
    for rows in sizes {
        rounds.push(round(up, sink, rows).await?);
    }

    println!();
    println!(
        "| rows | hydrate v2 (plain snapshot) | apply_replacement | sink committed the swap | **apply / hydrate** | downstream changes (bus, sink) |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rounds {
        println!(
            "| {} | {} ({} rows/s; copied after {}) | {} | {} | **{}** | {} at one position, {} in the sink (expected {}) |",
            thousands(r.rows),
            fmt(r.hydrate),
            per_second(r.rows, r.hydrate),
            fmt(r.copied),
            fmt(r.apply),
            fmt(r.sink),
            ratio(r.apply, r.hydrate),
            thousands(r.bus_changes as i64),
            thousands(r.sink_with_region),
            thousands(r.rows / 100),
        );
    }
    println!();
    println!(
        "| rows | swap requested upstream | swap on the bus (stream + store transaction) | apply_replacement noticed | sink's transaction | its upsert replayed alone | comparison query alone (sqlite3) | comparison + feed inserts, rolled back (sqlite3) | both tables read once in key order (sqlite3) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rounds {
        let [compare, insert, scan] = r.compare.map_or(
            ["-".to_string(), "-".to_string(), "-".to_string()],
            |(c, i, s)| [fmt(c), fmt(i), fmt(s)],
        );
        println!(
            "| {} | {} | {} (+{}) | {} (+{}) | {} (+{}) | {} | {compare} | {insert} | {scan} |",
            thousands(r.rows),
            fmt(r.requested),
            fmt(r.swap.at),
            fmt(r.swap.at.saturating_sub(r.requested)),
            fmt(r.apply),
            fmt(r.apply.saturating_sub(r.swap.at)),
            fmt(r.sink),
            fmt(r.sink.saturating_sub(r.swap.at)),
            fmt(r.sink_upsert),
        );
    }
    println!();
    println!(
        "| rows | peak RSS during hydrate (before, growth) | peak RSS during apply, to the store / to the sink (before, growth) | CPU of the process: hydrate | apply |"
    );
    println!("|---|---|---|---|---|");
    for r in &rounds {
        println!(
            "| {} | {} ({}, {}) | {} / {} ({}, {}) | {} | {} |",
            thousands(r.rows),
            mib(r.hydrate_peak),
            mib(r.hydrate_before),
            growth(r.hydrate_peak, r.hydrate_before),
            mib(r.apply_peak),
            mib(r.sink_peak),
            mib(r.apply_before),
            growth(r.sink_peak, r.apply_before),
            r.hydrate_cpu,
            r.apply_cpu,
        );
    }
    println!(
        "goals: apply / hydrate < 0.1x; downstream changes exactly 1% of the rows; memory growth flat as the table grows"
    );

    let mut wrong = Vec::new();
    for r in &rounds {
        let expected = r.rows / 100;
        if r.bus_changes as i64 != expected
            || r.bus_transactions != 1
            || r.swap.updates != r.swap.changes
            || r.sink_with_region != expected
        {
            wrong.push(format!(
                "{} rows: {} changes in {} transactions on the bus ({} of them updates), {} sink rows with a region; expected {expected} updates at one position",
                r.rows, r.bus_changes, r.bus_transactions, r.swap.updates, r.sink_with_region
            ));
        }
    }
    if !wrong.is_empty() {
        return Err(format!(
            "the downstream changes are not exactly 1%: {}",
            wrong.join("; ")
        )
        .into());
    }
    Ok(())
}

/// One round on fresh databases and a fresh pipeline.
async fn round(up: &evolve_test::Cluster, sink: &evolve_test::Cluster, rows: i64) -> Result<Round> {
    let expected = rows / 100;
    let up_db = up.create_database(&format!("absorb_up_{rows}")).await?;
    let sink_db = sink.create_database(&format!("absorb_sink_{rows}")).await?;
    let upc = connect(&up_db.url).await?;
    let sinkc = connect(&sink_db.url).await?;
    println!();
    println!("round of {} rows", thousands(rows));

    upc.batch_execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text, amount numeric, note text)",
    )
    .await?;

    let state =
        std::env::temp_dir().join(format!("evolve-bench-absorb-{}-{rows}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = Config::new(&state)
        .with_connection("up", up_db.url.clone())
        .with_connection("sink", sink_db.url.clone());
    let pipeline = Arc::new(Pipeline::open(config)?);
    // Slots are cluster-wide: one source name per round.
    let source = format!("absorb_{rows}");
    pipeline.create_source(&source, "up", "evolve_pub").await?;
    pipeline.create_table(&spec("orders_v1", &source)).await?;
    pipeline.create_interface("orders_json", "orders_v1")?;
    pipeline
        .create_sink(
            "orders_sink",
            "orders_json",
            "sink",
            "public",
            "orders_json",
        )
        .await?;
    let started = Instant::now();
    let running = Running::start(&pipeline);
    let result = measure(&pipeline, &upc, &sinkc, &source, rows, started).await;
    running.stop().await?;
    let mut round = result?;

    // A comparison of every key on the store as it is now (both versions
    // still hold the same documents), with the pipeline stopped.
    let tables = pipeline.tables()?;
    let id = |name: &str| tables.iter().find(|t| t.name == name).map(|t| t.id);
    if let (Some(old), Some(new)) = (id("orders_v1"), id("orders_v2")) {
        round.compare = compare_in_sqlite(&state.join("pipeline.db"), old, new, expected)?;
    }
    let slot = pipeline
        .sources()?
        .into_iter()
        .map(|s| s.slot)
        .next()
        .ok_or("the source is gone")?;
    drop(pipeline);
    // The walsender may take a moment to let the slot go.
    let drop_slot = format!("SELECT pg_drop_replication_slot('{slot}')");
    let mut attempt = 0;
    while let Err(e) = upc.batch_execute(&drop_slot).await {
        attempt += 1;
        if attempt >= 50 {
            return Err(e.into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_dir_all(&state);
    Ok(round)
}

fn spec(name: &str, source: &str) -> TableSpec {
    TableSpec {
        name: name.into(),
        source: source.into(),
        schema: "public".into(),
        table: "orders".into(),
        ..TableSpec::default()
    }
}

/// Waits until table `name` is in `state` (polled every 10 ms); when it
/// first showed as copied or running, and when it was `state`.
async fn wait_table(
    pipeline: &Pipeline,
    name: &str,
    state: TableState,
    started: Instant,
) -> Result<(Duration, Duration)> {
    let mut copied = None;
    loop {
        let table = pipeline
            .tables()?
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| format!("table {name} is gone"))?;
        if copied.is_none() && matches!(table.state, TableState::Copied | TableState::Running) {
            copied = Some(started.elapsed());
        }
        if table.state == state {
            let at = started.elapsed();
            return Ok((copied.unwrap_or(at), at));
        }
        if table.state == TableState::Stalled || started.elapsed() > TIMEOUT {
            return Err(format!(
                "table {name} is {} ({:?}), waiting for {}",
                table.state.as_str(),
                table.error,
                state.as_str()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Everything after the pipeline's start, while it runs.
async fn measure(
    pipeline: &Arc<Pipeline>,
    upc: &Client,
    sinkc: &Client,
    source: &str,
    rows: i64,
    started: Instant,
) -> Result<Round> {
    let expected = rows / 100;
    // v1's (empty) snapshot and the sink's initial load, committed with
    // its progress row.
    wait_for(
        sinkc,
        "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = 'orders_sink')",
        started,
        "v1's snapshot into the sink",
    )
    .await?;
    // The rows, streamed in transactions of LOAD_BATCH rows: a sink's
    // initial load holds every document in memory at once, which would
    // leave the process's resident set at that size and hide what the
    // hydrate and the apply use.
    let started = Instant::now();
    let mut next = 1;
    while next <= rows {
        let last = (next + LOAD_BATCH - 1).min(rows);
        upc.execute(
            &format!("INSERT INTO orders SELECT {ROW} FROM generate_series({next}, {last}) g"),
            &[],
        )
        .await?;
        next = last + 1;
    }
    upc.batch_execute("VACUUM ANALYZE orders").await?;
    let loaded = started.elapsed();
    let sql = format!("SELECT count(*) = {rows} FROM public.orders_json");
    loop {
        if client_bool(sinkc, &sql).await? {
            break;
        }
        if started.elapsed() > TIMEOUT {
            return Err(format!("the sink did not get {rows} rows within {TIMEOUT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "  {} rows inserted upstream in {} and streamed into the sink after {} ({} rows/s)",
        thousands(rows),
        fmt(loaded),
        fmt(started.elapsed()),
        per_second(rows, started.elapsed())
    );

    // The column, then its values on 1% of the rows in one statement;
    // v1 pinned its columns, so no document changes.
    upc.batch_execute("ALTER TABLE orders ADD COLUMN region text")
        .await?;
    let before: String = upc
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?
        .get(0);
    let before = lsn_value(&before);
    let started = Instant::now();
    let updated = upc
        .execute(
            "UPDATE orders SET region = 'region ' || (id / 100 % 7) WHERE id % 100 = 0",
            &[],
        )
        .await?;
    if updated != expected as u64 {
        return Err(format!("the UPDATE set region on {updated} rows, not {expected}").into());
    }
    loop {
        let applied = pipeline
            .sources()?
            .into_iter()
            .find(|s| s.name == source)
            .map_or(0, |s| s.applied_lsn.as_u64());
        if applied > before {
            break;
        }
        if started.elapsed() > TIMEOUT {
            return Err(format!("the source did not apply the UPDATE within {TIMEOUT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let with_region = count(
        sinkc,
        "SELECT count(*) FROM public.orders_json WHERE data ? 'region'",
    )
    .await?;
    if with_region != 0 {
        return Err(format!("v1 wrote {with_region} rows with a region to the sink").into());
    }
    println!(
        "  ADD COLUMN and the UPDATE of {} rows applied by the source (no document changed) after {}",
        thousands(expected),
        fmt(started.elapsed())
    );

    // Hydrate: v2 and the replacement over it, until v2 is running.
    let hydrate_before = reset_peak()?;
    let cpu = cpu_time();
    let started = Instant::now();
    pipeline.create_table(&spec("orders_v2", source)).await?;
    pipeline.create_replacement("orders_json_v2", "orders_json", "orders_v2")?;
    let (copied, hydrate) = wait_table(pipeline, "orders_v2", TableState::Running, started).await?;
    let hydrate_peak = proc_status("VmHWM:");
    let hydrate_cpu = cpu_since(cpu);
    println!(
        "  hydrate: {} ({} rows/s), peak RSS {}",
        fmt(hydrate),
        per_second(rows, hydrate),
        mib(hydrate_peak)
    );

    // Apply, with the bus followed from before the request.
    let interface = pipeline
        .interfaces()?
        .into_iter()
        .find(|i| i.name == "orders_json")
        .ok_or("interface orders_json is gone")?
        .id;
    let bus = pipeline.bus().subscribe();
    let apply_before = reset_peak()?;
    let cpu = cpu_time();
    let wall = micros_since_epoch(SystemTime::now());
    let started = Instant::now();
    let (first_tx, first_rx) = oneshot::channel::<Seen>();
    let stop_bus = Arc::new(AtomicBool::new(false));
    // A thread of its own, so that when the bus delivers does not depend
    // on when the runtime schedules a task (the source task's wake-up
    // would go to its own worker's queue).
    let follower = std::thread::spawn({
        let stop = stop_bus.clone();
        move || follow(bus, interface, started, first_tx, &stop)
    });
    // The sink, polled beside the apply: its progress row reaches the
    // swap's position in the transaction that writes the swap's changes.
    let (applied_tx, mut applied_rx) = watch::channel(false);
    let sink_wait = async {
        let swap = tokio::select! {
            swap = first_rx => swap.map_err(|_| "the bus follower ended before the swap")?,
            _ = async {
                let _ = applied_rx.wait_for(|applied| *applied).await;
                tokio::time::sleep(Duration::from_secs(10)).await;
            } => {
                return Err("the swap is applied, but no change of orders_json came on the bus within 10 s".into());
            }
        };
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress \
             WHERE sink = 'orders_sink' AND lsn >= '{}'::pg_lsn)",
            swap.pos
        );
        let at = wait_for(sinkc, &sql, started, "the sink's swap").await?;
        Ok::<_, Error>((at, proc_status("VmHWM:"), swap))
    };
    let apply_wait = async {
        pipeline
            .apply_replacement("orders_json", "orders_json_v2", TIMEOUT)
            .await?;
        applied_tx.send_replace(true);
        Ok::<_, Error>((started.elapsed(), proc_status("VmHWM:")))
    };
    let ((apply, apply_peak), (sink, sink_peak, swap)) =
        match tokio::try_join!(apply_wait, sink_wait) {
            Ok(done) => done,
            Err(e) => {
                stop_bus.store(true, Ordering::Relaxed);
                return Err(e);
            }
        };
    let apply_cpu = cpu_since(cpu);
    // Anything else the interface might still receive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_bus.store(true, Ordering::Relaxed);
    let seen = follower.join().map_err(|_| "the bus follower panicked")??;
    let requested =
        Duration::from_micros(swap.commit_time_micros.saturating_sub(wall).max(0) as u64);
    println!(
        "  apply: {} (sink {}), {} changes at {}",
        fmt(apply),
        fmt(sink),
        thousands(swap.changes as i64),
        swap.pos
    );
    let sink_with_region = count(
        sinkc,
        "SELECT count(*) FROM public.orders_json WHERE data ? 'region'",
    )
    .await?;
    let sink_rows = count(sinkc, "SELECT count(*) FROM public.orders_json").await?;
    if sink_rows != rows {
        return Err(format!("the sink has {sink_rows} rows of {rows} after the swap").into());
    }
    let sink_upsert = replay_upsert(sinkc).await?;
    Ok(Round {
        rows,
        copied,
        hydrate,
        hydrate_cpu,
        hydrate_peak,
        hydrate_before,
        apply,
        sink,
        apply_cpu,
        apply_peak,
        sink_peak,
        apply_before,
        requested,
        bus_transactions: seen.len(),
        bus_changes: seen.iter().map(|s| s.changes).sum(),
        swap,
        sink_with_region,
        sink_upsert,
        compare: None,
    })
}

/// The sink's statement for the swap's changes, replayed on their
/// documents (read back from the sink first) in a transaction of its own:
/// what PostgreSQL needs for the sink's write, without evolve's feed read
/// and wake-ups. It writes the same documents again.
async fn replay_upsert(sink: &Client) -> Result<Duration> {
    let rows = sink
        .query(
            "SELECT key::text, data::text FROM public.orders_json WHERE data ? 'region'",
            &[],
        )
        .await?;
    let keys: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let data: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
    let upsert = sink
        .prepare(
            "INSERT INTO public.orders_json (key, data) \
             SELECT k::jsonb, d::jsonb FROM unnest($1::text[], $2::text[]) AS u(k, d) \
             ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
        )
        .await?;
    let started = Instant::now();
    sink.batch_execute("BEGIN").await?;
    sink.execute(&upsert, &[&keys, &data]).await?;
    sink.batch_execute("COMMIT").await?;
    Ok(started.elapsed())
}

/// A comparison of every key between tables `old` and `new` (their store
/// ids) as one query, run by the `sqlite3` command line on the store:
/// alone (a count), and inserting its rows into a table of the shape the
/// feed had when it kept one row per change (rolled back); then both
/// tables read once in key order, which is all a merge of the two reads
/// (the query is a nested loop: a primary-key search in one table for
/// every row of the other, both ways). The swap itself runs neither: it
/// reads the differing keys kept since the hydrate, whose one merge is
/// the last of these. `None` when `sqlite3` is not installed.
fn compare_in_sqlite(
    db: &std::path::Path,
    old: i64,
    new: i64,
    expected: i64,
) -> Result<Option<(Duration, Duration, Duration)>> {
    // Every key compared as one query, with the interface id -1.
    let differing = format!(
        "SELECT -1, 0, o.key, o.doc, n.doc, 0 FROM rows o \
           LEFT JOIN rows n ON n.tbl = {new} AND n.key = o.key \
           WHERE o.tbl = {old} AND n.doc IS NOT o.doc \
         UNION ALL \
         SELECT -1, 0, n.key, NULL, n.doc, 0 FROM rows n \
           WHERE n.tbl = {new} AND NOT EXISTS \
             (SELECT 1 FROM rows o WHERE o.tbl = {old} AND o.key = n.key)"
    );
    let script = format!(
        ".timer on\n\
         SELECT count(*) FROM ({differing});\n\
         BEGIN;\n\
         CREATE TABLE feed_rows (seq INTEGER PRIMARY KEY AUTOINCREMENT, interface INTEGER, \
         pos INTEGER, key BLOB, old_doc BLOB, new_doc BLOB, committed_at INTEGER);\n\
         INSERT INTO feed_rows (interface, pos, key, old_doc, new_doc, committed_at) {differing};\n\
         ROLLBACK;\n\
         SELECT count(*), sum(length(doc)) FROM rows WHERE tbl IN ({old}, {new});\n"
    );
    let out = match Command::new("sqlite3")
        .arg(db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            use std::io::Write;
            child
                .stdin
                .take()
                .ok_or("sqlite3's stdin")?
                .write_all(script.as_bytes())?;
            child.wait_with_output()?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("  sqlite3 is not installed: the comparison is not timed alone");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("sqlite3 failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    // "Run Time: real 0.123 user 0.100000 sys 0.020000", one per statement.
    let times: Vec<Duration> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Run Time: real "))
        .filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .collect();
    let counted = text.lines().find_map(|l| l.trim().parse::<i64>().ok());
    if counted != Some(expected) || times.len() < 5 {
        return Err(
            format!("unexpected output of sqlite3 (expected {expected} keys):\n{text}").into(),
        );
    }
    Ok(Some((times[0], times[2], times[4])))
}
