//! `cargo xtask bench pipeline [CHANGES]`: evolve's pipeline against
//! PostgreSQL's own logical replication and `pg_recvlogical`, on two
//! throwaway clusters (upstream and sink).
//!
//! Stream: CHANGES (default 1,000,000) row changes, inserts and updates in
//! transactions of 1, 10, 100 and 1000 rows (a fixed shuffled mix, see
//! [`MIX`](evolve_bench::stream::MIX)), are loaded into `bench_t` (int8
//! key, text, numeric, timestamptz, bool, small jsonb, nullable text) after
//! every consumer's slot exists, so each drains the same WAL, one after the
//! other:
//!
//! - evolve: source, table, interface and sink created and the (empty)
//!   snapshot done before the load, the pipeline stopped; then restarted
//!   and timed until the marker row (the load's last transaction) is in the
//!   sink table, whose row count is then checked;
//! - native: a subscription (`copy_data = false`, created disabled on a
//!   slot made before the load) into a plain copy of the table, timed from
//!   `ALTER SUBSCRIPTION ... ENABLE` until the marker row is applied;
//! - `pg_recvlogical` on a pgoutput slot (`proto_version=1`, the same
//!   publication) to /dev/null with `--endpos` just after the marker: the
//!   decoding ceiling;
//! - Debezium: its PostgreSQL connector in the embedded engine (the Java
//!   program in `debezium/`, see [`debezium`]) on a pgoutput slot and the
//!   same publication, JSON change events counted and discarded, timed from
//!   `java`'s start until it has consumed the marker (and, as it reports,
//!   from the engine's construction, JVM start-up excluded). Without `java`
//!   or the built program it is skipped, said loudly, and the rest runs.
//!
//! Then the sink's table shape by itself (see [`write_floor`]): the
//! stream's final rows inserted, then updated, in an empty (key jsonb,
//! data jsonb) table with the PostgreSQL sink's statements, and in a typed
//! table with an int8 key like the native subscription's, inside the
//! sink's server with no replication in the way: what the interface's
//! table costs PostgreSQL per row against a typed one.
//!
//! Snapshot: a table of CHANGES / 10 rows and one of CHANGES rows, snapshotted
//! by evolve into the sink (timed from the pipeline's start to the sink's
//! progress row, written with the initial load), against `COPY (SELECT key,
//! jsonb_strip_nulls(to_jsonb(t)) ...) TO STDOUT` streamed into `COPY ...
//! FROM STDIN` on the sink, into a table of the same shape. The process's
//! peak resident memory (VmHWM, reset through `/proc/self/clear_refs`
//! before the stream and before each snapshot) is printed for the stream
//! and for each snapshot size.
//!
//! Freshness (see [`freshness`]): with the pipeline running, a steady load
//! of `--freshness-rate` row changes a second (default 20,000) for
//! `--freshness-seconds` (default 60; 0 skips it), and for each upstream
//! commit the time until the sink committed it: p50, p99, max. Then a
//! step-up of `--step-up-seconds` runs (default 10; 0 skips it), the rate
//! doubling while it is sustained (achieved within 5% and p99 under 1 s),
//! or halving while it is not, printing the highest sustained rate.
//!
//! To tell where evolve's time goes it also prints when its source had
//! applied everything to the store (the sink's share is the rest), the
//! process's CPU time, and the snapshot's store and sink-load phases. With
//! `TMPDIR=/dev/shm` the store (and the clusters) live on tmpfs, which
//! takes the store's fsyncs out of the figures.

#[path = "pipeline/debezium.rs"]
mod debezium;
#[path = "pipeline/freshness.rs"]
mod freshness;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_bench::stream::{
    COLUMNS, ROW, TIMEOUT, connect, count, load_procedure, lsn, per_second, wait_for,
};
use evolve_bench::{Running, cpu_since, cpu_time, fmt, lsn_value, mib, proc_status, ratio};
use evolve_pipeline::{Config, Pipeline, SINK_FILLFACTOR, TableSpec};
use futures_util::{SinkExt, StreamExt};
use tokio_postgres::Client;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

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

/// The command line: `[CHANGES] [--freshness-seconds S]
/// [--freshness-rate R] [--step-up-seconds S]`.
struct Args {
    changes: i64,
    freshness_seconds: f64,
    freshness_rate: u64,
    step_up_seconds: f64,
}

impl Args {
    fn parse() -> Result<Args> {
        let mut args = Args {
            changes: 1_000_000,
            freshness_seconds: 60.0,
            freshness_rate: 20_000,
            step_up_seconds: 10.0,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| format!("{arg} needs a value"))
                    .map_err(Error::from)
            };
            match arg.as_str() {
                "--freshness-seconds" => args.freshness_seconds = value()?.parse()?,
                "--freshness-rate" => args.freshness_rate = value()?.parse()?,
                "--step-up-seconds" => args.step_up_seconds = value()?.parse()?,
                flag if flag.starts_with('-') => {
                    return Err(format!(
                        "unknown option {flag}; usage: pipeline [CHANGES] [--freshness-seconds S] [--freshness-rate R] [--step-up-seconds S]"
                    )
                    .into());
                }
                changes => args.changes = changes.parse()?,
            }
        }
        if args.changes < 10 {
            return Err("CHANGES must be at least 10".into());
        }
        if args.freshness_rate < 100 {
            return Err("--freshness-rate must be at least 100".into());
        }
        if !(args.freshness_seconds >= 0.0 && args.step_up_seconds >= 0.0) {
            return Err("--freshness-seconds and --step-up-seconds must be >= 0".into());
        }
        Ok(args)
    }
}

fn run() -> Result<()> {
    let args = Args::parse()?;
    let changes = args.changes;
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
        "pipeline benchmark: {changes} row changes, {}, two clusters on loopback, fsync=off",
        String::from_utf8_lossy(&version.stdout).trim()
    );
    let result = rt.block_on(bench(&up, &sink, &args));
    if result.is_err() {
        eprintln!("upstream log:\n{}", up.log_tail(20));
        eprintln!("sink log:\n{}", sink.log_tail(20));
    }
    result
}

/// Polls `sql` (one bool) every 10 ms until it is true; the time it took,
/// and when `probe` first held (it is checked before `sql` each time).
async fn wait_until(
    client: &Client,
    sql: &str,
    started: Instant,
    what: &str,
    pipeline: &Pipeline,
    mut probe: impl FnMut(&Pipeline) -> bool,
) -> Result<(Duration, Option<Duration>)> {
    let mut probed = None;
    loop {
        if probed.is_none() && probe(pipeline) {
            probed = Some(started.elapsed());
        }
        if client.query_one(sql, &[]).await?.get::<_, bool>(0) {
            return Ok((started.elapsed(), probed));
        }
        if started.elapsed() > TIMEOUT {
            return Err(format!(
                "{what} did not finish within {TIMEOUT:?}: {:?}",
                pipeline.status()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn bench(up: &evolve_test::Cluster, sink: &evolve_test::Cluster, args: &Args) -> Result<()> {
    let n = args.changes;
    let baseline = debezium::Baseline::find(&debezium::PROGRAM);
    if let debezium::Baseline::Skipped(why) = &baseline {
        eprintln!("!!! DEBEZIUM BASELINE SKIPPED: {why}");
    }
    let up_db = up.create_database("pipeline_up").await?;
    let sink_db = sink.create_database("pipeline_sink").await?;
    let native_db = sink.create_database("pipeline_native").await?;
    let upc = connect(&up_db.url).await?;
    let sinkc = connect(&sink_db.url).await?;
    let nativec = connect(&native_db.url).await?;

    // Tables, and the snapshot benchmark's data, before any slot exists.
    let small = (n / 10).max(1);
    upc.batch_execute(&format!(
        "CREATE TABLE bench_t ({COLUMNS});
         CREATE TABLE snap_small ({COLUMNS});
         CREATE TABLE snap_full ({COLUMNS});
         INSERT INTO snap_small SELECT {ROW} FROM generate_series(1, {small}) g;
         INSERT INTO snap_full SELECT {ROW} FROM generate_series(1, {n}) g;
         {};",
        load_procedure()
    ))
    .await?;
    upc.batch_execute("VACUUM ANALYZE snap_small").await?;
    upc.batch_execute("VACUUM ANALYZE snap_full").await?;
    nativec
        .batch_execute(&format!("CREATE TABLE bench_t ({COLUMNS})"))
        .await?;

    // evolve: source (its slot), table, interface, sink; the empty
    // snapshot and initial load; then stopped.
    let state = std::env::temp_dir().join(format!("evolve-bench-pipeline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = Config::new(&state)
        .with_connection("up", up_db.url.clone())
        .with_connection("sink", sink_db.url.clone());
    let pipeline = Arc::new(Pipeline::open(config)?);
    pipeline.create_source("bench", "up", "evolve_pub").await?;
    create_objects(&pipeline, "bench_t", "bench_t").await?;
    let running = Running::start(&pipeline);
    wait_until(
        &sinkc,
        "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = 'bench_t_sink')",
        Instant::now(),
        "evolve's empty snapshot",
        &pipeline,
        |_| false,
    )
    .await?;
    running.stop().await?;

    // The native subscription's slot and pg_recvlogical's, before the load.
    for sql in [
        "CREATE PUBLICATION bench_pub FOR TABLE bench_t",
        "SELECT pg_create_logical_replication_slot('bench_native', 'pgoutput')",
        "SELECT pg_create_logical_replication_slot('bench_recv', 'pgoutput')",
    ] {
        upc.batch_execute(sql).await?;
    }
    if matches!(baseline, debezium::Baseline::Ready(_)) {
        upc.batch_execute(
            "SELECT pg_create_logical_replication_slot('bench_debezium', 'pgoutput')",
        )
        .await?;
    }
    nativec
        .batch_execute(&format!(
            "CREATE SUBSCRIPTION bench_native
               CONNECTION 'host=127.0.0.1 port={} user=postgres dbname={}'
               PUBLICATION bench_pub
               WITH (create_slot = false, slot_name = 'bench_native', copy_data = false, enabled = false)",
            up.port(),
            up_db.name
        ))
        .await?;

    // The load, then the marker row in a transaction of its own.
    let load = evolve_bench::stream::load(&upc, n, "bench_recv").await?;
    let (before_marker, endpos, rows) = (load.before_marker, load.endpos.clone(), load.rows);
    println!("{load}");

    // (a) evolve, timed from the restart until the marker is in the sink.
    // Reset the peak to the current resident set: the stream's own peak.
    std::fs::write("/proc/self/clear_refs", "5")?;
    let stream_before = proc_status("VmRSS:");
    let cpu = cpu_time();
    let started = Instant::now();
    let running = Running::start(&pipeline);
    // The source's applied position (SQLite) next to the sink's marker, to
    // tell the source's share of the time from the sink's.
    let (evolve, applied_at) = wait_until(
        &sinkc,
        "SELECT EXISTS (SELECT 1 FROM public.bench_t_json WHERE key = '{\"id\": 0}'::jsonb)",
        started,
        "evolve",
        &pipeline,
        |p| {
            p.sources()
                .ok()
                .and_then(|s| s.first().map(|s| s.applied_lsn.as_u64() > before_marker))
                .unwrap_or(false)
        },
    )
    .await?;
    let evolve_cpu = cpu_since(cpu);
    let stream_peak = proc_status("VmHWM:");
    running.stop().await?;
    let got = count(&sinkc, "public.bench_t_json").await?;
    if got != rows {
        return Err(format!("evolve's sink has {got} rows, upstream {rows}").into());
    }

    // (b) native logical replication.
    let started = Instant::now();
    nativec
        .batch_execute("ALTER SUBSCRIPTION bench_native ENABLE")
        .await?;
    let native = wait_for(
        &nativec,
        "SELECT EXISTS (SELECT 1 FROM bench_t WHERE id = 0)",
        started,
        "the native subscription",
    )
    .await?;
    let got = count(&nativec, "bench_t").await?;
    if got != rows {
        return Err(format!("the subscriber has {got} rows, upstream {rows}").into());
    }
    nativec
        .batch_execute("ALTER SUBSCRIPTION bench_native DISABLE")
        .await?;

    // (c) pg_recvlogical to /dev/null.
    let started = Instant::now();
    let mut recvlogical = Command::new(up.bin("pg_recvlogical"));
    recvlogical
        .args([
            "-d",
            &up_db.url,
            "--slot",
            "bench_recv",
            "--start",
            "--no-loop",
        ])
        .args(["-o", "proto_version=1", "-o", "publication_names=bench_pub"])
        .args(["-E", &endpos, "-f", "/dev/null"]);
    let out = tokio::task::spawn_blocking(move || recvlogical.output()).await??;
    let recv = started.elapsed();
    if !out.status.success() {
        return Err(format!(
            "pg_recvlogical failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }

    // pg_recvlogical confirms what it wrote before it exits: the marker.
    let confirmed = lsn(
        &upc,
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'bench_recv'",
    )
    .await?;
    if lsn_value(&confirmed) <= before_marker {
        return Err(format!("pg_recvlogical stopped at {confirmed}, before the marker").into());
    }

    // (d) Debezium's embedded engine, discarding its JSON change events.
    let dbz = match &baseline {
        debezium::Baseline::Ready(dir) => {
            let target = debezium::Target {
                port: up.port(),
                database: &up_db.name,
                slot: "bench_debezium",
                publication: "bench_pub",
                table: "public.bench_t",
            };
            let drained = debezium::drain(dir, &target).await?;
            // Every change and the marker, one event each.
            if drained.events != n + 1 {
                return Err(format!(
                    "Debezium counted {} change events, the load made {}",
                    drained.events,
                    n + 1
                )
                .into());
            }
            upc.batch_execute("SELECT pg_drop_replication_slot('bench_debezium')")
                .await?;
            Some(drained)
        }
        debezium::Baseline::Skipped(_) => None,
    };

    println!();
    println!("| consumer | time | row changes/s | evolve / it |");
    println!("|---|---|---|---|");
    println!(
        "| evolve into the sink | {} | {} | |",
        fmt(evolve),
        per_second(n, evolve)
    );
    println!(
        "| native subscription | {} | {} | **{}** |",
        fmt(native),
        per_second(n, native),
        ratio(native, evolve)
    );
    println!(
        "| pg_recvlogical to /dev/null | {} | {} | **{}** |",
        fmt(recv),
        per_second(n, recv),
        ratio(recv, evolve)
    );
    evolve_bench::debezium::print_rows(
        &format!("Debezium {DEBEZIUM_VERSION} embedded"),
        dbz.as_ref(),
        &baseline,
        n,
        evolve,
    );
    if let Some(applied) = applied_at {
        println!(
            "evolve's source had applied everything to its store after {} ({} changes/s); the sink finished {} later",
            fmt(applied),
            per_second(n, applied),
            fmt(evolve.saturating_sub(applied))
        );
    }
    println!(
        "evolve's process used {evolve_cpu} of CPU in those {}; its peak resident set {} ({} before the stream)",
        fmt(evolve),
        mib(stream_peak),
        mib(stream_before)
    );
    println!(
        "goals: evolve / native >= 1.0x, evolve / pg_recvlogical >= 0.8x; native / pg_recvlogical {}",
        ratio(recv, native)
    );
    nativec
        .batch_execute("DROP SUBSCRIPTION bench_native")
        .await?;
    let floor = write_floor(&sinkc, &nativec).await?;
    println!(
        "the sink's PostgreSQL alone, the table's {} final rows written twice (inserted, then updated) in batches of {FLOOR_BATCH} from text: \
         the interface's (key jsonb, data jsonb) table with evolve's statements {} ({} rows/s), the typed table with an int8 key {} ({} rows/s): **{}**",
        floor.rows,
        fmt(floor.interface),
        per_second(2 * floor.rows, floor.interface),
        fmt(floor.typed),
        per_second(2 * floor.rows, floor.typed),
        ratio(floor.interface, floor.typed),
    );
    upc.batch_execute("SELECT pg_drop_replication_slot('bench_recv')")
        .await?;

    // Snapshot: the baseline, then evolve, for each size.
    println!();
    println!(
        "| table | COPY ... TO STDOUT into COPY ... FROM STDIN | evolve snapshot into the sink | evolve / COPY | peak RSS during evolve's snapshot (RSS before) | evolve's CPU |"
    );
    println!("|---|---|---|---|---|---|");
    for (table, rows) in [("snap_small", small), ("snap_full", n)] {
        let copy = copy_baseline(&upc, &sinkc, table, rows).await?;
        create_objects(&pipeline, table, table).await?;
        // Reset the peak to the current resident set.
        std::fs::write("/proc/self/clear_refs", "5")?;
        let before = proc_status("VmRSS:");
        let cpu = cpu_time();
        let started = Instant::now();
        let running = Running::start(&pipeline);
        // When the table is running, its snapshot is in the store; the
        // sink's initial load follows.
        let name = format!("{table}_v1");
        let (snapshot, stored) = wait_until(
            &sinkc,
            &format!(
                "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = '{table}_sink')"
            ),
            started,
            "evolve's snapshot",
            &pipeline,
            |p| {
                p.tables().is_ok_and(|t| {
                    t.iter()
                        .any(|t| t.name == name && t.state == evolve_pipeline::TableState::Running)
                })
            },
        )
        .await?;
        let stored = stored.unwrap_or(snapshot);
        let peak = proc_status("VmHWM:");
        let snapshot_cpu = cpu_since(cpu);
        running.stop().await?;
        let got = count(&sinkc, &format!("public.{table}_json")).await?;
        if got != rows {
            return Err(format!("evolve's snapshot sink has {got} rows of {rows}").into());
        }
        println!(
            "| {rows} rows | {} ({} rows/s) | {} ({} rows/s; in the store after {}, then the sink's initial load {}) | **{}** | {} ({}) | {snapshot_cpu} |",
            fmt(copy),
            per_second(rows, copy),
            fmt(snapshot),
            per_second(rows, snapshot),
            fmt(stored),
            fmt(snapshot.saturating_sub(stored)),
            ratio(copy, snapshot),
            mib(peak),
            mib(before),
        );
    }
    println!("goal: evolve / COPY >= 0.7x, peak memory flat as the table grows");

    if args.freshness_seconds > 0.0 {
        fresh(&pipeline, &upc, &sinkc, &up_db.url, args).await?;
    }
    if let debezium::Baseline::Skipped(why) = &baseline {
        eprintln!("!!! DEBEZIUM BASELINE SKIPPED: {why}");
    }
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}

/// Rows per statement in [`write_floor`].
const FLOOR_BATCH: i64 = 1_000;

/// What writing the stream's rows costs the sink's PostgreSQL by itself.
struct Floor {
    rows: i64,
    /// Into a (key jsonb, data jsonb) table with the sink's statements.
    interface: Duration,
    /// Into a typed table with an int8 key (the native subscription's).
    typed: Duration,
}

/// The cost of the sink's table shape, with no replication in the way:
/// the final rows of the stream (evolve's sink table `bench_t_json`, with
/// the `fillfactor` the sink gives the tables it creates, and
/// the native subscription's `bench_t`), as text, in random order in
/// batches of [`FLOOR_BATCH`] kept in the server, written twice into an
/// empty table (every row inserted, then every row updated) by one `DO`
/// block each: once with the PostgreSQL sink's statements (`unnest` of
/// text arrays cast to jsonb, a plain `INSERT`, then `UPDATE ... FROM`
/// with its count of the rows found), once into a typed table with an int8
/// key from an array of row literals (each column through its input
/// function, as the apply worker reads pgoutput's text), also inserted,
/// then updated by key, as the apply worker does. Each pair is timed
/// around its statement; the batches are built before.
async fn write_floor(sinkc: &Client, nativec: &Client) -> Result<Floor> {
    let rows = count(sinkc, "public.bench_t_json").await?;
    sinkc
        .batch_execute(&format!(
            "CREATE TABLE floor_batches AS \
               SELECT (n - 1) / {FLOOR_BATCH} AS b, array_agg(k ORDER BY n) AS ks, array_agg(d ORDER BY n) AS ds \
               FROM (SELECT row_number() OVER (ORDER BY random()) AS n, key::text AS k, data::text AS d \
                     FROM public.bench_t_json) x GROUP BY 1;
             CREATE TABLE floor_json (key jsonb PRIMARY KEY, data jsonb NOT NULL) \
               WITH (fillfactor = {SINK_FILLFACTOR});"
        ))
        .await?;
    nativec
        .batch_execute(&format!(
            "CREATE TABLE floor_batches AS \
               SELECT (n - 1) / {FLOOR_BATCH} AS b, array_agg(r ORDER BY n) AS rs \
               FROM (SELECT row_number() OVER (ORDER BY random()) AS n, t::text AS r FROM bench_t t) x \
               GROUP BY 1;
             CREATE TABLE floor_typed ({COLUMNS});"
        ))
        .await?;
    let each_batch = |write: &str| {
        format!(
            "DO $$ DECLARE r record; n bigint; BEGIN FOR r IN SELECT * FROM floor_batches ORDER BY b LOOP \
             {write}; END LOOP; END $$"
        )
    };
    let interface_sql = [
        each_batch(
            "INSERT INTO floor_json (key, data) SELECT k::jsonb, d::jsonb FROM unnest(r.ks, r.ds) AS u(k, d)",
        ),
        each_batch(
            "WITH u AS (UPDATE floor_json AS t SET data = v.d::jsonb FROM unnest(r.ks, r.ds) AS v(k, d) \
             WHERE t.key = v.k::jsonb RETURNING 1) \
             SELECT 1 / (count(*) = cardinality(r.ks))::int INTO n FROM u",
        ),
    ];
    let typed_sql = [
        each_batch("INSERT INTO floor_typed SELECT * FROM unnest(r.rs::bench_t[])"),
        each_batch(
            "UPDATE floor_typed AS t SET (name, amount, created_at, active, attrs, note) = \
             (u.name, u.amount, u.created_at, u.active, u.attrs, u.note) \
             FROM unnest(r.rs::bench_t[]) AS u WHERE t.id = u.id",
        ),
    ];
    let (mut interface, mut typed) = (Duration::ZERO, Duration::ZERO);
    // Inserted, then updated: alternating, so both see the same machine.
    for (interface_sql, typed_sql) in interface_sql.iter().zip(&typed_sql) {
        let started = Instant::now();
        sinkc.batch_execute(interface_sql).await?;
        interface += started.elapsed();
        let started = Instant::now();
        nativec.batch_execute(typed_sql).await?;
        typed += started.elapsed();
    }
    let (json_rows, typed_rows) = (
        count(sinkc, "floor_json").await?,
        count(nativec, "floor_typed").await?,
    );
    if json_rows != rows || typed_rows != rows {
        return Err(format!(
            "the floor tables have {json_rows} and {typed_rows} rows, the stream's {rows}"
        )
        .into());
    }
    sinkc
        .batch_execute("DROP TABLE floor_batches, floor_json")
        .await?;
    nativec
        .batch_execute("DROP TABLE floor_batches, floor_typed")
        .await?;
    Ok(Floor {
        rows,
        interface,
        typed,
    })
}

/// The Debezium version `debezium/pom.xml` pins.
const DEBEZIUM_VERSION: &str = "3.6.1.Final";

/// Freshness at a fixed rate, then the step-up, with the pipeline live.
async fn fresh(
    pipeline: &Arc<Pipeline>,
    upc: &Client,
    sinkc: &Client,
    up_url: &str,
    args: &Args,
) -> Result<()> {
    freshness::upstream_table(upc).await?;
    create_objects(pipeline, "fresh_t", "fresh_t").await?;
    let running = Running::start(pipeline);
    wait_until(
        sinkc,
        "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = 'fresh_t_sink')",
        Instant::now(),
        "evolve's freshness sink",
        pipeline,
        |_| false,
    )
    .await?;
    freshness::arrival_trigger(sinkc).await?;
    let mut generator = freshness::Generator::connect(up_url).await?;
    println!();
    println!(
        "freshness: upstream commit to sink commit, evolve running live, {} s at {} row changes/s",
        args.freshness_seconds,
        per_second(args.freshness_rate as i64, Duration::from_secs(1))
    );
    println!("{}", freshness::header());
    let wait = Duration::from_secs_f64((2.0 * args.freshness_seconds).max(60.0));
    let base = generator
        .run(sinkc, args.freshness_rate, args.freshness_seconds, wait)
        .await?;
    println!(
        "{}",
        base.row(&format!("fixed, {} s", args.freshness_seconds))
    );
    if base.missing > 0 {
        running.stop().await?;
        return Err(format!(
            "{} of {} upstream transactions were not in the sink {wait:?} after the load",
            base.missing, base.transactions
        )
        .into());
    }
    generator.check_rows(sinkc).await?;
    let best = if args.step_up_seconds > 0.0 {
        freshness::step_up(&mut generator, sinkc, &base, args.step_up_seconds).await?
    } else {
        None
    };
    running.stop().await?;
    println!(
        "goal: p99 < {} at {} row changes/s: {} (p99 {}, achieved {} /s)",
        fmt(freshness::GOAL_P99),
        per_second(args.freshness_rate as i64, Duration::from_secs(1)),
        if base.sustained() { "met" } else { "MISSED" },
        fmt(base.p99),
        per_second(
            base.rows,
            Duration::from_secs_f64(base.rows as f64 / base.achieved.max(1e-9))
        )
    );
    if args.step_up_seconds > 0.0 {
        match (best, base.sustained()) {
            (Some(m), _) => println!(
                "highest sustained rate of the step-up: {} row changes/s (p99 {}, max {})",
                per_second(m.rate as i64, Duration::from_secs(1)),
                fmt(m.p99),
                fmt(m.max)
            ),
            (None, true) => println!(
                "highest sustained rate of the step-up: the fixed run's {} row changes/s (twice that was not)",
                per_second(base.rate as i64, Duration::from_secs(1))
            ),
            (None, false) => println!("no rate of the step-up was sustained"),
        }
    }
    Ok(())
}

/// Source `bench`'s table `<name>_v1` on `public.<upstream>`, interface
/// `<name>_json`, sink `<name>_sink` into `public.<name>_json`.
async fn create_objects(pipeline: &Pipeline, name: &str, upstream: &str) -> Result<()> {
    pipeline
        .create_table(&TableSpec {
            name: format!("{name}_v1"),
            source: "bench".into(),
            schema: "public".into(),
            table: upstream.into(),
            ..TableSpec::default()
        })
        .await?;
    pipeline.create_interface(&format!("{name}_json"), &format!("{name}_v1"))?;
    pipeline
        .create_sink(
            &format!("{name}_sink"),
            &format!("{name}_json"),
            "sink",
            "public",
            &format!("{name}_json"),
        )
        .await?;
    Ok(())
}

/// `COPY (SELECT key, document ...) TO STDOUT` upstream streamed into
/// `COPY <table>_copy FROM STDIN` on the sink, a table shaped like
/// evolve's sink table.
async fn copy_baseline(up: &Client, sink: &Client, table: &str, rows: i64) -> Result<Duration> {
    sink.batch_execute(&format!(
        "CREATE TABLE public.{table}_copy (key jsonb PRIMARY KEY, data jsonb NOT NULL)"
    ))
    .await?;
    let started = Instant::now();
    let out = up
        .copy_out(&format!(
            "COPY (SELECT jsonb_build_object('id', t.id), \
                          coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) \
                   FROM public.{table} t) TO STDOUT"
        ))
        .await?;
    let into = sink
        .copy_in::<_, bytes::Bytes>(&format!("COPY public.{table}_copy (key, data) FROM STDIN"))
        .await?;
    futures_util::pin_mut!(out);
    futures_util::pin_mut!(into);
    // One CopyData message per row: buffered, flushed by the sink as its
    // buffer fills and at the end.
    while let Some(chunk) = out.next().await {
        into.feed(chunk?).await?;
    }
    let copied = into.finish().await?;
    let elapsed = started.elapsed();
    if copied != rows as u64 {
        return Err(format!("COPY wrote {copied} rows of {rows}").into());
    }
    Ok(elapsed)
}
