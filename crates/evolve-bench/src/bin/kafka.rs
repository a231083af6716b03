//! `cargo xtask bench kafka [--part a|b|all] [--rows N] [--runs N]`: evolve
//! and Kafka, each part against plain rdkafka clients on the same broker
//! (`evolve_test::Kafka`, one KRaft node on loopback; topics of the
//! broker's default single partition), medians of `--runs` runs (default
//! 3) of `--rows` row changes (default 1,000,000).
//!
//! - **(a) the Kafka sink** (see [`sink`]): an interface's row changes into
//!   a topic exactly once (`FORMAT JSON`, `ENVELOPE UPSERT`), against the
//!   same records produced by a plain idempotent producer, the ceiling.
//!   Goal: evolve ≥ 0.7x the ceiling.
//! - **(b) a Kafka source table** (see [`table`]): a topic of Avro
//!   records into a table (`ENVELOPE UPSERT`) and a PostgreSQL sink, by
//!   the source's stream and by a table's snapshot, against consuming the
//!   topic raw. Goal: evolve ≥ 0.7x the raw consumer.
//!
//! The shared pieces here: a `read_committed` consumer that counts a
//! topic's records as they become visible ([`Counter`]), reading a topic
//! to its end ([`read_topic`]), the ceiling's idempotent producer
//! ([`produce`]), and medians.

#[path = "kafka/sink.rs"]
mod sink;
#[path = "kafka/table.rs"]
mod table;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

const USAGE: &str =
    "usage: kafka [--part a|b|all] [--rows N] [--runs N] [--snapshot-memory-keys N]";

/// The header carrying the upstream transaction's position on the Kafka
/// sink's records.
const POSITION_HEADER: &str = "evolve-position";

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    A,
    B,
    All,
}

/// The command line.
struct Args {
    part: Part,
    rows: i64,
    runs: usize,
    /// Part (b)'s `kafka_snapshot_memory_keys` (the pipeline's default
    /// unless given).
    memory_keys: Option<usize>,
}

impl Args {
    fn parse() -> Result<Args> {
        let mut args = Args {
            part: Part::All,
            rows: 1_000_000,
            runs: 3,
            memory_keys: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))
                    .map_err(Error::from)
            };
            match arg.as_str() {
                "--part" => {
                    args.part = match value()?.as_str() {
                        "a" => Part::A,
                        "b" => Part::B,
                        "all" => Part::All,
                        other => {
                            return Err(format!("--part {other}: name a, b or all; {USAGE}").into());
                        }
                    }
                }
                "--rows" => args.rows = value()?.parse()?,
                "--runs" => args.runs = value()?.parse()?,
                "--snapshot-memory-keys" => args.memory_keys = Some(value()?.parse()?),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other}; {USAGE}").into()),
            }
        }
        if args.rows < 100 {
            return Err("--rows must be at least 100".into());
        }
        if args.runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        Ok(args)
    }
}

fn run() -> Result<()> {
    let args = Args::parse()?;
    let up = evolve_test::Cluster::start()?;
    let broker = evolve_test::Kafka::start()?;
    // The runtime `evolve pipeline run` uses: multi-threaded, one worker
    // per core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let version = Command::new(up.bin("postgres")).arg("--version").output()?;
    println!(
        "kafka benchmark: {} row changes, {} run(s); {}, fsync=off; Apache Kafka {} (one KRaft node), loopback",
        args.rows,
        args.runs,
        String::from_utf8_lossy(&version.stdout).trim(),
        evolve_test::KAFKA_VERSION
    );
    let result = rt.block_on(async {
        if args.part != Part::B {
            sink::bench(&up, &broker, &args).await?;
        }
        if args.part != Part::A {
            table::bench(&up, &broker, &args).await?;
        }
        Ok::<(), Error>(())
    });
    if result.is_err() {
        eprintln!("upstream log:\n{}", up.log_tail(20));
        eprintln!("broker log:\n{}", broker.log_tail(20));
    }
    result
}

/// The median of `samples` (the upper one of an even count).
fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// A plain client's settings for the broker at `bootstrap`.
fn client(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("log_level", "3");
    config
}

/// A `read_committed` consumer assigned every partition of `topic` from
/// its beginning. The broker answers its fetches within 10 ms when it has
/// nothing new (`fetch.wait.max.ms`, 500 ms by default), so that when it
/// saw a record is when the record was visible, give or take 10 ms.
fn consumer(bootstrap: &str, topic: &str, eof: bool) -> Result<BaseConsumer> {
    let consumer: BaseConsumer = client(bootstrap)
        .set("group.id", format!("evolve-bench-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        // As evolve's consumers: a full local queue holds off the next
        // fetch for 10 ms, not librdkafka's default 1 s.
        .set("fetch.queue.backoff.ms", "10")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", if eof { "true" } else { "false" })
        .set("auto.offset.reset", "earliest")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let mut assignment = rdkafka::TopicPartitionList::new();
    for t in metadata.topics().iter().filter(|t| t.name() == topic) {
        if let Some(e) = t.error() {
            return Err(format!("topic {topic}: {e:?}").into());
        }
        for p in t.partitions() {
            assignment.add_partition_offset(topic, p.id(), rdkafka::Offset::Beginning)?;
        }
    }
    if assignment.count() == 0 {
        return Err(format!("topic {topic} has no partitions").into());
    }
    consumer.assign(&assignment)?;
    Ok(consumer)
}

/// A `read_committed` consumer on a thread of its own counting the
/// records of a topic from its beginning as they become visible, until
/// there are `target`: the instants the first and the last were.
struct Counter {
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Seen>>,
}

/// When a [`Counter`] saw the first record and the last one.
struct Seen {
    first: Instant,
    all: Instant,
}

impl Counter {
    /// Starts counting; the consumer is assigned when this returns.
    fn start(bootstrap: &str, topic: &str, target: u64) -> Result<Counter> {
        let consumer = consumer(bootstrap, topic, false)?;
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            let mut first = None;
            while n < target {
                if s.load(Ordering::Relaxed) {
                    return Err("stopped".into());
                }
                match consumer.poll(Duration::from_millis(100)) {
                    None => {}
                    Some(Ok(_)) => {
                        n += 1;
                        c.store(n, Ordering::Relaxed);
                        first.get_or_insert_with(Instant::now);
                    }
                    Some(Err(e)) => return Err(Error::from(e)),
                }
            }
            let all = Instant::now();
            Ok(Seen {
                first: first.unwrap_or(all),
                all,
            })
        });
        Ok(Counter {
            count,
            stop,
            thread,
        })
    }

    fn finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// The records counted so far.
    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// When the first record and the target were reached (the thread
    /// has finished).
    fn join(self) -> Result<Seen> {
        self.thread
            .join()
            .map_err(|_| Error::from("the counting consumer panicked"))?
    }

    /// Stops counting, whatever the count.
    fn cancel(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// One record as a consumer sees it.
struct Rec<'a> {
    key: &'a [u8],
    value: Option<&'a [u8]>,
    /// The `evolve-position` header, empty without one.
    position: &'a [u8],
}

impl<'a> Rec<'a> {
    fn of(m: &'a BorrowedMessage<'a>) -> Rec<'a> {
        let position = m
            .headers()
            .and_then(|h| {
                h.iter()
                    .find(|h| h.key == POSITION_HEADER)
                    .and_then(|h| h.value)
            })
            .unwrap_or_default();
        Rec {
            key: m.key().unwrap_or_default(),
            value: m.payload(),
            position,
        }
    }
}

/// A record kept to be produced again.
struct Owned {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    position: Vec<u8>,
}

impl Owned {
    fn of(r: &Rec<'_>) -> Owned {
        Owned {
            key: r.key.to_vec(),
            value: r.value.map(<[u8]>::to_vec),
            position: r.position.to_vec(),
        }
    }
}

/// Reads `topic` to its end as a `read_committed` consumer, handing each
/// record to `f` in partition and offset order per partition; the count.
fn read_topic(bootstrap: &str, topic: &str, mut f: impl FnMut(Rec<'_>)) -> Result<u64> {
    let consumer = consumer(bootstrap, topic, true)?;
    let mut open = consumer.assignment()?.count();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut n = 0;
    while open > 0 {
        if Instant::now() > deadline {
            return Err(format!("topic {topic}: its end was not reached in 600 s").into());
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => open -= 1,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(m)) => {
                n += 1;
                f(Rec::of(&m));
            }
        }
    }
    Ok(n)
}

/// Creates `topic` as the Kafka sink creates its topic (the broker's
/// default partitions and replication).
async fn create_topic(bootstrap: &str, topic: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client(bootstrap).create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin
        .create_topics(
            &[NewTopic::new(topic, -1, TopicReplication::Fixed(-1))],
            &options,
        )
        .await?
    {
        if let Err((t, code)) = result {
            return Err(format!("create topic {t}: {code}").into());
        }
    }
    Ok(())
}

/// Deletes `topics` (best effort: their data is only in the way).
async fn delete_topics(bootstrap: &str, topics: &[&str]) {
    let Ok(admin) = client(bootstrap).create::<AdminClient<DefaultClientContext>>() else {
        return;
    };
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let _ = admin.delete_topics(topics, &options).await;
}

/// Counts the producer's delivery reports.
#[derive(Default)]
struct Delivered {
    ok: AtomicU64,
    failed: AtomicU64,
    error: Mutex<Option<String>>,
}

impl ClientContext for Delivered {}

impl ProducerContext for Delivered {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut error = self.error.lock().unwrap_or_else(|p| p.into_inner());
                error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// The ceiling: `records` produced into `topic` by a plain idempotent
/// producer (`enable.idempotence=true`, so `acks=all` and in-order
/// retries; `linger.ms=5` and the murmur2 partitioner as the Kafka sink's
/// producer has them; no transactions, no compression), each with its
/// key, value and `evolve-position` header, waiting a millisecond
/// whenever librdkafka's queue (100,000 records) is full. Connected before
/// it is timed; timed from the first record queued until every delivery
/// report is in.
/// Returns the time and the CPU time this process used meanwhile.
fn produce(bootstrap: &str, topic: &str, records: &[Owned]) -> Result<(Duration, String)> {
    let producer: ThreadedProducer<Delivered> = client(bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", "300000")
        .create_with_context(Delivered::default())?;
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let cpu = evolve_bench::cpu_time();
    let started = Instant::now();
    for r in records {
        let headers = OwnedHeaders::new().insert(Header {
            key: POSITION_HEADER,
            value: Some(&r.position),
        });
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .key(&r.key)
            .headers(headers);
        if let Some(value) = &r.value {
            record = record.payload(value);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }
    // Every delivery report, looking each millisecond (rdkafka's `flush`
    // waits in steps of 100 ms).
    let _ = producer.flush(Duration::ZERO);
    while producer.in_flight_count() > 0 {
        if started.elapsed() > Duration::from_secs(300) {
            return Err("the producer's records were not delivered within 300 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = started.elapsed();
    let cpu = evolve_bench::cpu_since(cpu);
    let delivered = producer.context();
    let (ok, failed) = (
        delivered.ok.load(Ordering::Relaxed),
        delivered.failed.load(Ordering::Relaxed),
    );
    if failed > 0 || ok != records.len() as u64 {
        let error = delivered
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        return Err(format!(
            "the producer delivered {ok} of {} records, {failed} failed ({})",
            records.len(),
            error.unwrap_or_default()
        )
        .into());
    }
    Ok((took, cpu))
}
