//! Part (b): a Kafka source table. A topic (one partition) of `--rows`
//! Avro records in Confluent's wire format (`{id: long, customer: string,
//! qty: int, note: [null, string]}`, registered as `<topic>-value` in
//! evolve's registry served in-process, one record per key, keys
//! `order-<n>`), written by a plain producer before anything is timed.
//! Each run, on a fresh state directory and sink database:
//!
//! - **stream**: source, table (`ENVELOPE UPSERT`), interface and a
//!   PostgreSQL sink created on the empty topic and running; the pipeline
//!   stopped, the records produced, then the pipeline started again and
//!   timed until the sink table holds every record's document (the
//!   source's stream: decoding with the pinned reader schema, the store,
//!   the sink).
//! - **snapshot**: the same objects created once the topic is full (the
//!   source starts at the topic's end, so the table's snapshot reads the
//!   records), timed from the pipeline's start until the sink holds them;
//!   the process's peak resident memory during it is printed beside its
//!   resident memory before it (VmHWM, reset through
//!   `/proc/self/clear_refs`).
//! - **ceiling**: a `read_committed` consumer reading the topic from its
//!   beginning to its `--rows` records, doing nothing with them (what
//!   `kafka-console-consumer` does before it prints), timed from its
//!   creation.
//!
//! An evolve figure ends when the source has applied every offset and the
//! sink's committed position reached the source's (cheap reads of the
//! store and the sink's progress row while it waits); the sink table is
//! then counted: exactly `--rows` documents.

use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_bench::stream::{connect, per_second};
use evolve_bench::{Running, fmt, proc_status, ratio};
use evolve_core::control::{KafkaTable, TableEnvelope, TableFormat};
use evolve_pipeline::{Config, Pipeline, TableSpec};
use rdkafka::consumer::Consumer;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use super::{Args, Result, client, median};

const SCHEMA: &str = r#"{"type":"record","name":"Order","namespace":"bench","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"qty","type":"int"},
  {"name":"note","type":["null","string"],"default":null}]}"#;

struct Run {
    stream: Duration,
    snapshot: Duration,
    /// The process's peak resident memory during the snapshot, and its
    /// resident memory before it, in KiB.
    snapshot_peak: (u64, u64),
    ceiling: Duration,
}

pub async fn bench(
    up: &evolve_test::Cluster,
    broker: &evolve_test::Kafka,
    args: &Args,
) -> Result<()> {
    let n = args.rows;
    println!();
    println!(
        "(b) a Kafka source table: {n} Avro records (one per key) into a table, ENVELOPE UPSERT, and a PostgreSQL sink, against raw consumption of the topic"
    );
    let dir = std::env::temp_dir().join(format!("evolve-bench-kafka-b-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let registry = serve_registry(&dir).await?;
    let mut runs = Vec::new();
    for run in 1..=args.runs {
        let r = one_run(up, broker, &registry, &dir, n, run, args.memory_keys).await?;
        println!(
            "run {run}: stream {} ({}/s), snapshot {} ({}/s, peak RSS {} MiB, {} MiB before), ceiling {} ({}/s)",
            fmt(r.stream),
            per_second(n, r.stream),
            fmt(r.snapshot),
            per_second(n, r.snapshot),
            r.snapshot_peak.0 / 1024,
            r.snapshot_peak.1 / 1024,
            fmt(r.ceiling),
            per_second(n, r.ceiling)
        );
        runs.push(r);
    }
    let pick = |f: fn(&Run) -> Duration| median(&runs.iter().map(f).collect::<Vec<_>>());
    let (stream, snapshot, ceiling) = (
        pick(|r| r.stream),
        pick(|r| r.snapshot),
        pick(|r| r.ceiling),
    );
    println!();
    println!(
        "| | evolve stream: topic to sink | evolve snapshot: topic to sink | ceiling: raw consumer | stream / ceiling | snapshot / ceiling |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| **median** | {} ({}/s) | {} ({}/s) | {} ({}/s) | {} | {} |",
        fmt(stream),
        per_second(n, stream),
        fmt(snapshot),
        per_second(n, snapshot),
        fmt(ceiling),
        per_second(n, ceiling),
        ratio(ceiling, stream),
        ratio(ceiling, snapshot)
    );
    println!(
        "goal: evolve / ceiling >= 0.7x; stream {}, snapshot {} (ratios of the medians)",
        ratio(ceiling, stream),
        ratio(ceiling, snapshot)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// evolve's registry on a free loopback port (SQLite in `dir`); its url.
async fn serve_registry(dir: &std::path::Path) -> Result<String> {
    use evolve_registry::http::{App, DEFAULT_MAX_BODY, DEFAULT_MAX_SCHEMA};
    let log = evolve_registry::store::SqliteLog::open(&dir.join("registry.db"))?;
    let registry = evolve_registry::service::Registry::open(
        evolve_registry::store::Storage::Sqlite(log),
        evolve_registry::service::Settings::default(),
    )
    .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: evolve_registry::metrics::Metrics::default(),
        max_body: DEFAULT_MAX_BODY,
        max_schema: DEFAULT_MAX_SCHEMA,
        access: evolve_registry::access::Access::new(address, false, &[])?,
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, evolve_registry::http::router(app)).await;
    });
    Ok(format!("http://{address}"))
}

/// Registers the schema under `subject`; its id.
async fn register(registry: &str, subject: &str) -> Result<u32> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = registry.trim_start_matches("http://");
    let body = serde_json::json!({ "schema": SCHEMA }).to_string();
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    stream
        .write_all(
            format!(
                "POST /subjects/{subject}/versions HTTP/1.1\r\nHost: {authority}\r\n\
                 Content-Type: application/vnd.schemaregistry.v1+json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let json = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_default();
    parsed["id"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| format!("registering {subject}: {answer}").into())
}

fn zigzag(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn avro_string(out: &mut Vec<u8>, s: &str) {
    zigzag(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

/// Record `i` in the wire format of schema `id`.
fn record(id: u32, i: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    zigzag(&mut out, i);
    avro_string(&mut out, &format!("customer {}", i % 1000));
    zigzag(&mut out, 1 + i % 9);
    if i % 5 == 0 {
        zigzag(&mut out, 1);
        avro_string(&mut out, "leave at the door");
    } else {
        zigzag(&mut out, 0);
    }
    out
}

/// Produces the topic's records (untimed).
fn produce(bootstrap: &str, topic: &str, id: u32, n: i64) -> Result<()> {
    let producer: ThreadedProducer<_> = client(bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("message.timeout.ms", "300000")
        .create()?;
    for i in 1..=n {
        let key = format!("order-{i}");
        let value = record(id, i);
        let mut r = BaseRecord::<str, [u8]>::to(topic).key(&key).payload(&value);
        loop {
            match producer.send(r) {
                Ok(()) => break,
                Err((_, back)) => {
                    r = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(300))?;
    Ok(())
}

/// Source `src`, table `t_v1`, interface `t_json` and a sink into
/// `public.t_json` of `sink_url`.
async fn create(pipeline: &Pipeline, topic: &str) -> Result<()> {
    pipeline.create_kafka_source("src", "k", topic).await?;
    pipeline
        .create_table(&TableSpec {
            name: "t_v1".into(),
            source: "src".into(),
            kafka: Some(KafkaTable {
                registry: "csr".into(),
                envelope: TableEnvelope::Upsert,
                format: TableFormat::Avro,
                key_format: None,
                message: None,
                subject: None,
            }),
            ..TableSpec::default()
        })
        .await?;
    pipeline.create_interface("t_json", "t_v1")?;
    pipeline
        .create_sink("t_sink", "t_json", "sink", "public", "t_json")
        .await?;
    Ok(())
}

/// Waits until the sink holds the topic's `n` records: the source has
/// applied every offset (its resume state in the store), the table runs,
/// and the sink's committed position (its progress row) is at the
/// source's applied position; then counts the sink table once (exactly
/// `n`). Cheap reads only while it waits: counting a table of a million
/// rows every few milliseconds would take the CPU being measured.
async fn sink_holds(
    sink: &tokio_postgres::Client,
    state: &std::path::Path,
    n: i64,
    started: Instant,
) -> Result<Duration> {
    // One connection for the whole wait: opening the store checks its
    // schema, which every 20 ms would take CPU the pipeline needs.
    let store = evolve_pipeline::store::Store::open(state)?;
    let took = loop {
        let applied = store.applied_lsn("src")?;
        let consumed: i64 = store
            .resume_state("src")?
            .and_then(|s: String| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| {
                v.as_object()
                    .map(|o| o.values().filter_map(|x| x.as_i64()).sum())
            })
            .unwrap_or(0);
        let running = store
            .table("t_v1")?
            .is_some_and(|t| t.state == evolve_pipeline::TableState::Running);
        if consumed >= n && running {
            let committed = sink
                .query_opt(
                    "SELECT lsn::text FROM evolve_sink_progress WHERE sink = 't_sink'",
                    &[],
                )
                .await
                .ok()
                .flatten()
                .map(|r| r.get::<_, String>(0));
            if let Some(lsn) = committed
                && parse_lsn(&lsn) >= applied.as_u64()
            {
                break started.elapsed();
            }
        }
        if started.elapsed() > Duration::from_secs(1800) {
            return Err("the sink did not catch up within 1800 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let got: i64 = sink
        .query_one("SELECT count(*) FROM public.t_json", &[])
        .await?
        .get(0);
    if got != n {
        return Err(format!("the sink holds {got} documents, not {n}").into());
    }
    Ok(took)
}

/// `X/Y` (pg_lsn's text) as a number.
fn parse_lsn(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').unwrap_or(("0", "0"));
    (u64::from_str_radix(hi, 16).unwrap_or(0) << 32) | u64::from_str_radix(lo, 16).unwrap_or(0)
}

async fn one_run(
    up: &evolve_test::Cluster,
    broker: &evolve_test::Kafka,
    registry: &str,
    dir: &std::path::Path,
    n: i64,
    run: usize,
    memory_keys: Option<usize>,
) -> Result<Run> {
    let bootstrap = broker.bootstrap();
    let topic = format!("bench_table_{run}");
    super::create_topic(&bootstrap, &topic).await?;
    let id = register(registry, &format!("{topic}-value")).await?;

    // Stream: the objects on the empty topic, then the records.
    let sink_db = up
        .create_database(&format!("kafka_table_stream_{run}"))
        .await?;
    let sink = connect(&sink_db.url).await?;
    let config = |state: &std::path::Path| {
        Config::new(state)
            .with_connection("k", broker.url())
            .with_connection("csr", registry.to_string())
            .with_connection("sink", sink_db.url.clone())
    };
    let state = dir.join(format!("stream-{run}"));
    {
        let pipeline = Arc::new(Pipeline::open(config(&state))?);
        create(&pipeline, &topic).await?;
        let running = Running::start(&pipeline);
        sink_holds(&sink, &state, 0, Instant::now()).await?;
        running.stop().await?;
    }
    let (b, t) = (bootstrap.clone(), topic.clone());
    tokio::task::spawn_blocking(move || produce(&b, &t, id, n)).await??;
    let stream = {
        let pipeline = Arc::new(Pipeline::open(config(&state))?);
        let started = Instant::now();
        let running = Running::start(&pipeline);
        let took = sink_holds(&sink, &state, n, started).await?;
        running.stop().await?;
        took
    };

    // Snapshot: the objects created on the full topic.
    let snap_db = up
        .create_database(&format!("kafka_table_snapshot_{run}"))
        .await?;
    let snap_sink = connect(&snap_db.url).await?;
    let state = dir.join(format!("snapshot-{run}"));
    std::fs::write("/proc/self/clear_refs", "5")?;
    let rss_before = proc_status("VmRSS:");
    let snapshot = {
        let mut config = Config::new(&state)
            .with_connection("k", broker.url())
            .with_connection("csr", registry.to_string())
            .with_connection("sink", snap_db.url.clone());
        if let Some(keys) = memory_keys {
            config = config.with_kafka_snapshot_memory_keys(keys);
        }
        let pipeline = Arc::new(Pipeline::open(config)?);
        // The source starts at the topic's end: the table's snapshot reads
        // every record.
        create(&pipeline, &topic).await?;
        let started = Instant::now();
        let running = Running::start(&pipeline);
        let took = sink_holds(&snap_sink, &state, n, started).await?;
        running.stop().await?;
        took
    };
    let snapshot_peak = (proc_status("VmHWM:"), rss_before);

    // Ceiling: raw consumption.
    let (b, t) = (bootstrap.clone(), topic.clone());
    let ceiling = tokio::task::spawn_blocking(move || -> Result<Duration> {
        let started = Instant::now();
        let consumer = super::consumer(&b, &t, false)?;
        let mut seen = 0;
        while seen < n {
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(_)) => seen += 1,
                Some(Err(e)) => return Err(e.into()),
            }
            if started.elapsed() > Duration::from_secs(600) {
                return Err(format!("the consumer read {seen} of {n} in 600 s").into());
            }
        }
        let took = started.elapsed();
        drop(consumer.unassign());
        Ok(took)
    })
    .await??;
    let _ = std::fs::remove_dir_all(dir.join(format!("stream-{run}")));
    let _ = std::fs::remove_dir_all(&state);
    Ok(Run {
        stream,
        snapshot,
        snapshot_peak,
        ceiling,
    })
}
