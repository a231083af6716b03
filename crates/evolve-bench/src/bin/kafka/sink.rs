//! Part (a): the Kafka sink. Each run, on a fresh database and state
//! directory: `bench_t` (the pipeline benchmark's table, see
//! [`evolve_bench::stream`]) in source `bench<run>` of a pipeline (library
//! API, in-process, 2-worker runtime), its interface `bench_t_json`, and
//! two sinks of it, `CREATE SINK ... INTO KAFKA ... FORMAT JSON ENVELOPE
//! UPSERT`, each into a topic of its own, their (empty) initial loads done.
//! Then the pipeline benchmark's load makes `--rows` row changes (inserts
//! and updates in transactions of 1 to 1,000 rows, committed as it goes),
//! and:
//!
//! - **live**: with the pipeline running through the load, the first
//!   sink's topic is timed from the start of the load until a
//!   `read_committed` consumer has seen every change (one record each: no
//!   deletes, so no tombstones). The second sink's connection points at a
//!   port nobody listens on meanwhile, so it retries and the store keeps
//!   the interface's feed for it. A marker row in a table of the source
//!   outside the interface tells when the source had applied the load.
//! - **catch-up**: the pipeline restarted with the second sink's broker
//!   reachable, timed from the start until the consumer of its topic has
//!   seen every change: the sink reading the store's feed, in
//!   transactions of up to 10,000 changes. The source has nothing new to
//!   apply: its slot's confirmed position stayed where the second sink
//!   had committed (a source confirms no further than every sink), but it
//!   starts the stream at its applied position, so the server reads the
//!   load's WAL again beside the sink without sending its changes.
//! - **ceiling**: the first topic's records (key, value and
//!   `evolve-position` header, as read back) produced into a third topic by
//!   a plain idempotent producer ([`super::produce`]).
//!
//! Every topic is then read to its end: the live topic holds exactly
//! `--rows` records, one per (key, position), as many keys as upstream
//! rows; the catch-up topic the same records in the same order; the
//! ceiling topic `--rows` records. The process's CPU time (the pipeline,
//! the counting consumer, the producer) is printed for each figure.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_bench::stream::{
    COLUMNS, TIMEOUT, connect, count, load_call, load_procedure, lsn, mix, per_second, simulate,
};
use evolve_bench::{Running, cpu_since, cpu_time, fmt, lsn_value, ratio};
use evolve_pipeline::{
    Config, KafkaEnvelope, KafkaFormat, KafkaTarget, ObjectKind, Pipeline, TableSpec,
};

use super::{Args, Counter, Owned, Result, Seen, create_topic, delete_topics, median, read_topic};

/// A Kafka url nobody answers at.
const UNREACHABLE: &str = "kafka://127.0.0.1:9";

/// One run's figures.
struct Run {
    /// From the start of the load until every change was visible.
    live: Duration,
    /// How long the load took upstream.
    load: Duration,
    /// When the source had applied the load to its store.
    applied: Option<Duration>,
    live_cpu: String,
    /// From the pipeline's start until every change was visible.
    catch_up: Duration,
    /// When the catch-up's first record was visible.
    catch_up_first: Duration,
    catch_up_cpu: String,
    ceiling: Duration,
    ceiling_cpu: String,
    /// The records' average key and value sizes, in bytes.
    sizes: (f64, f64),
}

pub async fn bench(
    up: &evolve_test::Cluster,
    broker: &evolve_test::Kafka,
    args: &Args,
) -> Result<()> {
    let n = args.rows;
    let (transactions, updates) = simulate(&mix(), n);
    println!();
    println!(
        "(a) the Kafka sink: {n} row changes ({updates} updates) in {transactions} upstream transactions, FORMAT JSON, ENVELOPE UPSERT, against a plain idempotent producer"
    );
    let mut runs = Vec::new();
    for run in 1..=args.runs {
        let r = one_run(up, broker, n, run).await?;
        println!(
            "run {run}: live {} (the load took {}, the source had applied it at {}; CPU {}), catch-up {} (the first record visible at {}; CPU {}), ceiling {} (CPU {}); records of {:.0}-byte keys and {:.0}-byte values on average",
            fmt(r.live),
            fmt(r.load),
            r.applied.map_or_else(|| "?".into(), fmt),
            r.live_cpu,
            fmt(r.catch_up),
            fmt(r.catch_up_first),
            r.catch_up_cpu,
            fmt(r.ceiling),
            r.ceiling_cpu,
            r.sizes.0,
            r.sizes.1
        );
        runs.push(r);
    }
    println!();
    println!(
        "| run | evolve live: load start to all in the topic | evolve catch-up: the sink from the store's feed | ceiling: idempotent producer | live / ceiling | catch-up / ceiling |"
    );
    println!("|---|---|---|---|---|---|");
    let row = |label: &str, live: Duration, catch_up: Duration, ceiling: Duration| {
        println!(
            "| {label} | {} ({}/s) | {} ({}/s) | {} ({}/s) | {} | {} |",
            fmt(live),
            per_second(n, live),
            fmt(catch_up),
            per_second(n, catch_up),
            fmt(ceiling),
            per_second(n, ceiling),
            ratio(ceiling, live),
            ratio(ceiling, catch_up)
        );
    };
    for (i, r) in runs.iter().enumerate() {
        row(&(i + 1).to_string(), r.live, r.catch_up, r.ceiling);
    }
    let pick = |f: fn(&Run) -> Duration| median(&runs.iter().map(f).collect::<Vec<_>>());
    let (live, catch_up, ceiling) = (pick(|r| r.live), pick(|r| r.catch_up), pick(|r| r.ceiling));
    row("**median**", live, catch_up, ceiling);
    println!(
        "goal: evolve / ceiling >= 0.7x; live {}, catch-up {} (ratios of the medians)",
        ratio(ceiling, live),
        ratio(ceiling, catch_up)
    );
    Ok(())
}

/// Waits until every sink of `names` runs (its position read or its
/// initial load committed).
async fn sinks_running(pipeline: &Pipeline, names: &[&str]) -> Result<()> {
    let started = Instant::now();
    loop {
        let status = pipeline.status();
        let running = |name: &str| {
            status
                .iter()
                .any(|s| s.kind == ObjectKind::Sink && s.name == name && s.state == "running")
        };
        if names.iter().all(|n| running(n)) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("sinks {names:?} did not start within 120 s: {status:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for `counter` to see every record; when it saw the first and
/// the last, and when `probe` first held (checked meanwhile, and for up
/// to 60 s after).
async fn counted(
    counter: Counter,
    pipeline: &Pipeline,
    started: Instant,
    what: &str,
    mut probe: impl FnMut(&Pipeline) -> bool,
) -> Result<(Seen, Option<Duration>)> {
    let mut probed = None;
    let mut done = None;
    loop {
        if probed.is_none() && probe(pipeline) {
            probed = Some(started.elapsed());
        }
        if done.is_none() && counter.finished() {
            done = Some(Instant::now());
        }
        match done {
            Some(at) if probed.is_some() || at.elapsed() > Duration::from_secs(60) => break,
            _ => {}
        }
        if started.elapsed() > TIMEOUT {
            let seen = counter.count();
            counter.cancel();
            return Err(format!(
                "{what}: {seen} records after {TIMEOUT:?}: {:?}",
                pipeline.status()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((counter.join()?, probed))
}

async fn one_run(
    up: &evolve_test::Cluster,
    broker: &evolve_test::Kafka,
    n: i64,
    run: usize,
) -> Result<Run> {
    let bootstrap = broker.bootstrap();
    let target = u64::try_from(n)?;
    let db = up.create_database(&format!("kafka_sink_{run}")).await?;
    let upc = connect(&db.url).await?;
    upc.batch_execute(&format!(
        "CREATE TABLE bench_t ({COLUMNS});
         CREATE TABLE bench_marker (id int8 PRIMARY KEY);
         {};",
        load_procedure()
    ))
    .await?;
    let sizes = mix();
    let (_, updates) = simulate(&sizes, n);
    let state =
        std::env::temp_dir().join(format!("evolve-bench-kafka-{}-{run}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    // Names of their own each run: a Kafka sink's position is kept in the
    // broker's progress topic under the sink's name.
    let source = format!("bench{run}");
    let (live, catch_up) = (format!("live{run}"), format!("catchup{run}"));
    let topics = [
        format!("bench_live_{run}"),
        format!("bench_catchup_{run}"),
        format!("bench_ceiling_{run}"),
    ];
    let config = |later: &str| {
        Config::new(&state)
            .with_connection("up", db.url.clone())
            .with_connection("k", broker.url())
            .with_connection("later", later)
    };

    // The objects, and both sinks' (empty) initial loads.
    {
        let pipeline = Arc::new(Pipeline::open(config(&broker.url()))?);
        pipeline.create_source(&source, "up", "evolve_pub").await?;
        for table in ["bench_t", "bench_marker"] {
            pipeline
                .create_table(&TableSpec {
                    name: format!("{table}_v1"),
                    source: source.clone(),
                    schema: "public".into(),
                    table: table.into(),
                    ..TableSpec::default()
                })
                .await?;
        }
        pipeline.create_interface("bench_t_json", "bench_t_v1")?;
        for (sink, connection, topic) in
            [(&live, "k", &topics[0]), (&catch_up, "later", &topics[1])]
        {
            pipeline
                .create_kafka_sink(
                    sink,
                    "bench_t_json",
                    connection,
                    KafkaTarget {
                        topic: topic.clone(),
                        format: KafkaFormat::Json,
                        envelope: KafkaEnvelope::Upsert,
                        registry: None,
                    },
                )
                .await?;
        }
        let running = Running::start(&pipeline);
        sinks_running(&pipeline, &[live.as_str(), catch_up.as_str()]).await?;
        running.stop().await?;
    }

    // Live: the load with the pipeline running.
    let pipeline = Arc::new(Pipeline::open(config(UNREACHABLE))?);
    let running = Running::start(&pipeline);
    sinks_running(&pipeline, &[live.as_str()]).await?;
    let counter = Counter::start(&bootstrap, &topics[0], target)?;
    let cpu = cpu_time();
    let started = Instant::now();
    upc.batch_execute(&load_call(&sizes, n)).await?;
    let load = started.elapsed();
    let before_marker = lsn_value(&lsn(&upc, "SELECT pg_current_wal_insert_lsn()::text").await?);
    upc.batch_execute("INSERT INTO bench_marker VALUES (1)")
        .await?;
    let (done, applied) = counted(counter, &pipeline, started, "the live sink", |p| {
        p.sources()
            .ok()
            .and_then(|s| s.first().map(|s| s.applied_lsn.as_u64() > before_marker))
            .unwrap_or(false)
    })
    .await?;
    let live_time = done.all - started;
    let live_cpu = cpu_since(cpu);
    running.stop().await?;
    drop(pipeline);

    // Catch-up: the second sink, reachable now, alone.
    let pipeline = Arc::new(Pipeline::open(config(&broker.url()))?);
    let counter = Counter::start(&bootstrap, &topics[1], target)?;
    let cpu = cpu_time();
    let started = Instant::now();
    let running = Running::start(&pipeline);
    let (done, _) = counted(counter, &pipeline, started, "the catch-up sink", |_| true).await?;
    let catch_up_time = done.all - started;
    let catch_up_first = done.first - started;
    let catch_up_cpu = cpu_since(cpu);
    running.stop().await?;
    drop(pipeline);

    // What the topics hold: every change once.
    let rows = count(&upc, "bench_t").await?;
    if rows != n - updates {
        return Err(format!("bench_t has {rows} rows, the load inserted {}", n - updates).into());
    }
    let (records, catch_up_records) = {
        let bootstrap = bootstrap.clone();
        let topics = topics.clone();
        tokio::task::spawn_blocking(move || -> Result<(Vec<Owned>, u64)> {
            let mut records = Vec::with_capacity(usize::try_from(target)?);
            read_topic(&bootstrap, &topics[0], |r| records.push(Owned::of(&r)))?;
            let mut i = 0usize;
            let mut differ = 0u64;
            let got = read_topic(&bootstrap, &topics[1], |r| {
                let same = records.get(i).is_some_and(|o| {
                    o.key == r.key && o.value.as_deref() == r.value && o.position == r.position
                });
                differ += u64::from(!same);
                i += 1;
            })?;
            if differ > 0 {
                return Err(format!(
                    "{differ} of the catch-up sink's {got} records differ from the live sink's"
                )
                .into());
            }
            Ok((records, got))
        })
        .await??
    };
    let changes: HashSet<(&[u8], &[u8])> = records
        .iter()
        .map(|r| (r.key.as_slice(), r.position.as_slice()))
        .collect();
    let keys: HashSet<&[u8]> = records.iter().map(|r| r.key.as_slice()).collect();
    let tombstones = records.iter().filter(|r| r.value.is_none()).count();
    if records.len() as u64 != target
        || catch_up_records != target
        || changes.len() != records.len()
        || keys.len() as i64 != rows
        || tombstones > 0
    {
        return Err(format!(
            "expected {n} records (one per change, no tombstones) over {rows} keys in each sink's topic; the live topic has {} ({} distinct changes, {} keys, {tombstones} tombstones), the catch-up topic {catch_up_records}",
            records.len(),
            changes.len(),
            keys.len()
        )
        .into());
    }
    drop((changes, keys));
    let sizes = (
        records.iter().map(|r| r.key.len()).sum::<usize>() as f64 / records.len() as f64,
        records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Vec::len))
            .sum::<usize>() as f64
            / records.len() as f64,
    );

    // The ceiling: the same records, by a plain idempotent producer.
    create_topic(&bootstrap, &topics[2]).await?;
    let (ceiling, ceiling_cpu, produced) = {
        let bootstrap = bootstrap.clone();
        let topic = topics[2].clone();
        tokio::task::spawn_blocking(move || -> Result<(Duration, String, u64)> {
            let (took, cpu) = super::produce(&bootstrap, &topic, &records)?;
            drop(records);
            let produced = read_topic(&bootstrap, &topic, |_| {})?;
            Ok((took, cpu, produced))
        })
        .await??
    };
    if produced != target {
        return Err(format!("the ceiling's topic has {produced} records of {n}").into());
    }

    // Room for the next run.
    delete_topics(&bootstrap, &[&topics[0], &topics[1], &topics[2]]).await;
    upc.batch_execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()",
    )
    .await?;
    let _ = std::fs::remove_dir_all(&state);
    Ok(Run {
        live: live_time,
        load,
        applied,
        live_cpu,
        catch_up: catch_up_time,
        catch_up_first,
        catch_up_cpu,
        ceiling,
        ceiling_cpu,
        sizes,
    })
}
