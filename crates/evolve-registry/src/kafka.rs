//! The log in a Kafka topic, `_schemas` by default: what Confluent Schema
//! Registry and Karapace keep their schemas in, in the same record format,
//! so that evolve can take over a topic they wrote and they could read one
//! evolve wrote.
//!
//! # The topic
//!
//! `--storage kafka://BROKERS[/TOPIC][?OPTIONS]`. The topic has one
//! partition (records are ordered only within a partition) and
//! `cleanup.policy=compact` (records are kept until a later record of the
//! same key replaces them); it is created so, with a replication factor of
//! three or the number of brokers when fewer, when it is missing, and a
//! topic with more partitions or another cleanup policy is refused. Every
//! record is Confluent's key JSON and value JSON ([`crate::record`]), a
//! permanent delete a tombstone (a record without a value). Keys are
//! written byte for byte as Confluent writes them, so compaction collapses
//! evolve's records and Confluent's of one key alike. Compaction keeps the
//! last record of every key, and the replay only ever depends on that one:
//! a later SCHEMA record of a version replaces the earlier one, the last
//! CONFIG and MODE records of a subject are its configuration and mode, a
//! DELETE_SUBJECT record deletes every version up to its own, which covers
//! what an earlier one of the subject deleted. One thing compaction does
//! take away, as it does from Confluent's registry: once the records of a
//! permanently deleted version and its tombstone are cleaned, a replay no
//! longer knows the version's id was used (the next id may reuse the
//! highest such id).
//!
//! # One writer
//!
//! Instances on one topic write through a transactional producer with one
//! `transactional.id`, `evolve-registry-<topic>`, so Kafka itself lets one
//! of them write at a time:
//!
//! - To append, an instance without a producer creates one and calls
//!   `init_transactions`. The transaction coordinator then bumps the
//!   producer epoch of the id, which fences every other holder of it (its
//!   next produce or commit fails), and before answering completes the
//!   fenced producer's transaction: aborts an open one, finishes one whose
//!   commit it had already accepted. So once `init_transactions` returns,
//!   every record any earlier writer will ever commit is committed.
//! - The new producer's first transaction writes one record to the writer
//!   topic, `<topic>_writer` (one partition, compacted, created like the
//!   topic; key `writer`, value `{"instance": ID, "url": URL}`): the
//!   instance's random id and its `--advertised-url`. It commits only while
//!   the new epoch is current, so the last committed record names the
//!   instance that took over last. The other instances read it to know
//!   where to forward writes ([`crate::forward`]); nothing relies on it for
//!   correctness, and the registry's topic holds Confluent's records only.
//! - It then reads the topic to its last stable offset (with a
//!   `read_committed` consumer), which is beyond all of those records, so
//!   its view of the log is complete; the append goes ahead only if the log
//!   still ends where the caller computed its records (otherwise
//!   `Ok(false)`: the caller catches up and decides again, as with the
//!   other stores).
//! - The records go out in one transaction: begin, produce, commit. A
//!   commit that succeeds is durable (`acks=all`) and whole; a produce or
//!   commit that reports the producer fenced means another instance took
//!   over: its `init_transactions` aborted this transaction (or, if this
//!   commit had reached the coordinator first, completed it: then the
//!   caller's catch-up finds the records and the registration answers with
//!   the id they hold), so the producer is dropped and the append answers
//!   `Ok(false)`.
//! - An instance keeps its producer between appends: as long as its epoch
//!   is current nobody else has written through the id (writing needs
//!   `init_transactions`, which would have fenced it), so its next append
//!   needs no `init_transactions`, only the read to the end (cheap: nothing
//!   new) and one transaction. If someone did take over meanwhile, that
//!   transaction fails as fenced and nothing of it is committed.
//! - A commit that fails otherwise (a timeout, say) has an unknown outcome:
//!   the producer is dropped and the append answers `Ok(false)` too, so
//!   the caller's next attempt starts with `init_transactions`, which
//!   settles that transaction (completes or aborts it) before the topic is
//!   read again; a registration that did commit is then found, one that did
//!   not is written again. Three such commits in a row fail the append.
//! - An instance that was fenced waits a moment before it takes over again,
//!   so that the instance that fenced it can commit first instead of being
//!   fenced in turn. A write that came over HTTP does not take over again
//!   when the writer topic names another instance that took over since: it
//!   is forwarded there ([`forward::Takeover`]); and an instance that was
//!   fenced waits up to 3 s for the record of the instance that fenced it
//!   (committed once its `init_transactions` returns) rather than fence
//!   it back.
//!
//! A writer killed mid-transaction leaves it open; the next
//! `init_transactions`, by whichever instance writes next, aborts it at
//! once (without one, the broker aborts it after
//! [`TRANSACTION_TIMEOUT`]). Until then `read_committed` readers stop at its
//! first record, so nobody reads records that were not committed.
//! Producers that do not use the id (a Confluent registry writing the same
//! topic at the same time, say) are not fenced: one registry at a time may
//! write a topic.
//!
//! # Offsets
//!
//! Kafka offsets are not contiguous (every transaction ends with a commit
//! marker, aborted records are skipped, compaction removes records), while
//! [`Log`] numbers records 1, 2, ... without gaps and the state appends at
//! `after + 1`. So this log numbers the records itself, in the order this
//! instance reads them, and the state never sees a Kafka offset. The
//! numbers live as long as the instance (a restart numbers the topic
//! anew), which is all the state needs: it replays from the start at every
//! start. Records already read past are forgotten: the registry reads
//! forward only, so `read_after(n)` drops the records up to `n`, and the
//! log holds only what it has read and the state has not yet applied.
//!
//! Reading to the end is: ask the brokers for the last stable offset (a
//! `read_committed` ListOffsets, on a connection of its own, since a broker
//! answers one connection's requests in order and the reader's connection
//! has a fetch waiting), then poll until the consumer's position reaches
//! it. The position counts commit markers as the poll passes them, so a
//! topic ending in one is read to its end without waiting for another
//! fetch. An append's own records are numbered when their transaction
//! commits (the caller applies them at those numbers) and skipped when the
//! reader meets them; when only they and their commit marker lie between
//! what was read and the last stable offset, the topic counts as read
//! without reading them back.
//!
//! # What a Confluent registry would see
//!
//! Confluent Schema Registry reads its topic with the consumer's default
//! `read_uncommitted`, so it would also see the records of transactions
//! that were aborted (registrations that failed with their writer) until
//! compaction removes them.

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use evolve_core::kafka::ClientOptions;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::forward::{self, Forwarder, Takeover};
use crate::record::{Record, Value};
use crate::store::{Log, StoreError};

/// The topic when `--storage kafka://BROKERS` names none: Confluent's.
pub const DEFAULT_TOPIC: &str = "_schemas";

/// What the topic's name is followed by in the name of the side topic
/// that names the writer (`_schemas_writer`).
pub const WRITER_TOPIC_SUFFIX: &str = "_writer";

/// The key of every record of the writer topic (compaction keeps the
/// last).
const WRITER_KEY: &str = "writer";

/// The producer's `transaction.timeout.ms`: how long the broker waits
/// before it aborts the open transaction of a writer that vanished and
/// that no other instance fenced.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the cluster may take to answer metadata, create the topic,
/// start the producer, or commit a transaction.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the first metadata request may take: an unreachable cluster is
/// reported this soon.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an instance that was fenced waits for the writer record of
/// the instance that fenced it before a write that came over HTTP takes
/// over again (the fencer commits its record once `init_transactions`
/// returns, which waits for the fenced transaction to be aborted, and
/// librdkafka asks for that every half second).
const FENCED_WAIT: Duration = Duration::from_secs(3);

/// How long reading the topic to its last stable offset may wait for the
/// next record.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The options a `kafka://` storage takes, as the pipeline's `kafka://`
/// connections name them.
const OPTIONS: &str = "sslmode, sslrootcert, sslcert, sslkey, sasl_mechanism, user, password";

// ---- --storage kafka://... ----------------------------------------------------

/// `--storage kafka://BROKERS[/TOPIC][?OPTIONS]`: the brokers, the topic
/// (default [`DEFAULT_TOPIC`]) and TLS and SASL options with the names and
/// meanings of the pipeline's `kafka://` connections: `sslmode` (`disable`,
/// `require`, `verify-ca`, `verify-full`), `sslrootcert`, `sslcert`,
/// `sslkey`, `sasl_mechanism` (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`),
/// `user`, `password` (percent-encoded where needed). The password never
/// shows in `Debug` output, [`KafkaSpec::describe`] or errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaSpec {
    /// `host:port,host:port`.
    pub brokers: String,
    pub topic: String,
    /// TLS and SASL, checked as the pipeline's connections are.
    pub options: ClientOptions,
}

impl KafkaSpec {
    /// Parses `kafka://...` (the whole `--storage` value). Errors name the
    /// part that is wrong and never repeat the password.
    pub fn parse(text: &str) -> Result<KafkaSpec, String> {
        let rest = text
            .strip_prefix("kafka://")
            .ok_or_else(|| "a Kafka store is written kafka://host:port/_schemas".to_string())?;
        let (location, query) = match rest.split_once('?') {
            Some((l, q)) => (l, Some(q)),
            None => (rest, None),
        };
        let (brokers, topic) = match location.split_once('/') {
            Some((b, t)) => (b, t),
            None => (location, ""),
        };
        evolve_core::kafka::check_brokers(
            brokers,
            "kafka://host:port[,host:port...]/_schemas",
            "add ?sasl_mechanism=...&user=...&password=... after it",
        )
        .map_err(|problem| format!("--storage: {problem}"))?;
        let topic = if topic.is_empty() {
            DEFAULT_TOPIC.to_string()
        } else {
            percent_decode(topic).ok_or_else(|| {
                "--storage kafka://: the topic is not valid percent-encoding".to_string()
            })?
        };
        check_topic(&topic).map_err(|problem| format!("--storage kafka://: {problem}"))?;
        if topic.len() + WRITER_TOPIC_SUFFIX.len() > 249 {
            return Err(format!(
                "--storage kafka://: the topic name is longer than {} characters; the registry also uses a topic named after it with {WRITER_TOPIC_SUFFIX} appended, and Kafka allows 249",
                249 - WRITER_TOPIC_SUFFIX.len()
            ));
        }
        let mut options = ClientOptions::default();
        let mut password = None;
        for pair in query.unwrap_or_default().split('&') {
            if pair.is_empty() {
                continue;
            }
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value).ok_or_else(|| {
                format!("--storage kafka://: option {name} is not valid percent-encoding")
            })?;
            match name {
                "sslmode" => options.sslmode = Some(value),
                "sasl_mechanism" => options.sasl_mechanism = Some(value),
                "user" => options.user = Some(value),
                "password" => password = Some(value),
                "sslrootcert" => options.sslrootcert = Some(PathBuf::from(value)),
                "sslcert" => options.sslcert = Some(PathBuf::from(value)),
                "sslkey" => options.sslkey = Some(PathBuf::from(value)),
                other => {
                    return Err(format!(
                        "--storage kafka://: unknown option {:?}; a Kafka store takes {OPTIONS}",
                        other.chars().take(40).collect::<String>()
                    ));
                }
            }
        }
        if let Some(password) = password {
            options = options.with_password(password);
        }
        options
            .check()
            .map_err(|p| format!("--storage kafka://: {p}"))?;
        Ok(KafkaSpec {
            brokers: brokers.to_string(),
            topic,
            options,
        })
    }

    /// `kafka://BROKERS/TOPIC`, for messages: no options, no password.
    pub fn describe(&self) -> String {
        format!("kafka://{}/{}", self.brokers, self.topic)
    }

    /// The `transactional.id` every instance on the topic writes with.
    pub fn transactional_id(&self) -> String {
        format!("evolve-registry-{}", self.topic)
    }

    /// The side topic whose last record names the writer:
    /// `<topic>_writer`.
    pub fn writer_topic(&self) -> String {
        format!("{}{WRITER_TOPIC_SUFFIX}", self.topic)
    }

    /// The settings of the store's readers: committed records only, no
    /// group commits (the log is read from its beginning at every open).
    fn reader_config(&self) -> ClientConfig {
        let mut config = self.client_config();
        config
            .set("group.id", format!("{}-reader", self.transactional_id()))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "earliest")
            // Reading a long topic at start, a full local queue holds off
            // the next fetch for 10 ms, not librdkafka's default 1 s.
            .set("fetch.queue.backoff.ms", "10");
        config
    }

    /// librdkafka's settings: brokers, TLS, SASL (as the pipeline's
    /// `kafka://` connections map them).
    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in self.options.settings(&self.brokers, "evolve-registry") {
            config.set(key, value);
        }
        config
    }
}

/// A legal Kafka topic name: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
fn check_topic(topic: &str) -> Result<(), String> {
    let legal = topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if topic.len() > 249 || !legal || topic == "." || topic == ".." {
        return Err(format!(
            "{:?} is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')",
            topic.chars().take(80).collect::<String>()
        ));
    }
    Ok(())
}

/// `%XX` decoded (and `+` left alone); `None` when malformed or not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

// ---- the log -------------------------------------------------------------------

/// What the reader has read of the topic and the state has not applied.
#[derive(Default)]
struct Tail {
    /// The number of the last record dropped; `records` hold the next ones.
    trimmed: i64,
    records: VecDeque<Record>,
    /// The number of the last record (`trimmed + records.len()`).
    end: i64,
    /// Every Kafka offset below this one has been read.
    read_to: i64,
    /// Kafka offsets of records this instance committed and numbered
    /// already, not yet met by the reader.
    claimed: BTreeSet<i64>,
}

impl Tail {
    /// One record the reader met at Kafka `offset`.
    #[cfg(test)]
    fn ingest(&mut self, target: &str, offset: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.ingest_timed(target, offset, None, key, value);
    }

    /// One record the reader met at Kafka `offset`, with the record's
    /// Kafka timestamp (epoch milliseconds): a schema version whose value
    /// has no `ts` (Confluent's and Karapace's records) takes it, as
    /// Confluent's reader sets it (`KafkaStoreMessageHandler.validateUpdate`).
    fn ingest_timed(
        &mut self,
        target: &str,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) {
        if offset < self.read_to {
            // Accounted for already: this instance's own records, known
            // to end where the topic ends (see `claim`).
            return;
        }
        self.read_to = offset + 1;
        if self.claimed.remove(&offset) {
            return;
        }
        if let Some(first) = self.claimed.first().copied() {
            if offset < first {
                tracing::warn!(
                    store = target,
                    offset,
                    "a record that this registry did not write came before its own: another program writes to the topic"
                );
            }
            // Claimed records the reader has passed will not come.
            self.claimed = self.claimed.split_off(&offset);
        }
        let Some(key) = key else {
            tracing::warn!(store = target, offset, "skipping a record without a key");
            return;
        };
        let (Ok(key), Ok(value)) = (
            std::str::from_utf8(key),
            value.map(std::str::from_utf8).transpose(),
        ) else {
            tracing::warn!(
                store = target,
                offset,
                "skipping a record that is not UTF-8 text"
            );
            return;
        };
        match Record::from_json(key, value) {
            Ok(mut record) => {
                if let Some(Value::Schema(v)) = &mut record.value
                    && v.ts.is_none()
                {
                    v.ts = timestamp;
                }
                self.end += 1;
                self.records.push_back(record);
            }
            // As Confluent's reader does: an unreadable record is skipped.
            Err(e) => {
                tracing::warn!(store = target, offset, error = %e, "skipping an unreadable record")
            }
        }
    }

    /// Records this instance committed at Kafka `offsets`, numbered now
    /// (the caller applies them at these numbers); the reader skips them
    /// when it meets them.
    fn claim(&mut self, records: &[Record], offsets: &[i64]) {
        for record in records {
            self.end += 1;
            self.records.push_back(record.clone());
        }
        let read_to = self.read_to;
        self.claimed
            .extend(offsets.iter().filter(|o| **o >= read_to));
    }

    /// Whether what is left to read below the last stable offset `stable`
    /// is this instance's own claimed records and their commit marker
    /// only: then it counts as read, without reading the records back
    /// (the marker is written after the commit returns, so this holds
    /// once the marker is there).
    fn settle(&mut self, stable: i64) {
        let (Some(first), Some(last)) = (self.claimed.first(), self.claimed.last()) else {
            return;
        };
        let contiguous = *last - *first + 1 == self.claimed.len() as i64;
        if *first == self.read_to && contiguous && stable == *last + 2 {
            self.read_to = stable;
            self.claimed.clear();
        }
    }

    /// Drops the records up to number `n`.
    fn trim(&mut self, n: i64) {
        while self.trimmed < n && self.records.pop_front().is_some() {
            self.trimmed += 1;
        }
    }
}

type Writer = FutureProducer;

/// The record of the writer topic that names the writer: the instance
/// that last took over the `transactional.id`, and the URL it takes
/// forwarded writes at. It only routes writes; what keeps two instances
/// from both writing is the fencing of the `transactional.id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterRecord {
    /// The id the instance drew when it started (16 hex digits).
    pub instance: String,
    /// Its `--advertised-url`; none for an instance that serves no HTTP
    /// (`evolve registry import`, a library user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// What this instance has read of the writer topic.
#[derive(Default)]
struct WriterView {
    /// The last writer record committed, with its Kafka offset.
    latest: Option<(i64, WriterRecord)>,
    /// Every Kafka offset below this one has been read.
    read_to: i64,
}

impl WriterView {
    fn ingest(&mut self, target: &str, offset: i64, value: Option<&[u8]>) {
        self.read_to = self.read_to.max(offset + 1);
        let record = value.and_then(|v| serde_json::from_slice::<WriterRecord>(v).ok());
        match record {
            Some(record) => self.learn(offset, record),
            None => tracing::warn!(
                store = target,
                offset,
                "skipping an unreadable record of the writer topic"
            ),
        }
    }

    /// A writer record at `offset`; an older one than the latest is
    /// ignored.
    fn learn(&mut self, offset: i64, record: WriterRecord) {
        if self.latest.as_ref().is_none_or(|(at, _)| *at < offset) {
            self.latest = Some((offset, record));
        }
    }
}

/// This instance as the writer of its topic, for `/metrics` and the
/// writer endpoint.
#[derive(Clone, Debug)]
pub struct WriterStats {
    /// This instance's id in writer records.
    pub instance: String,
    /// The last writer record read (or written).
    pub writer: Option<WriterRecord>,
    /// Whether this instance holds the producer and the last writer
    /// record names it.
    pub is_writer: bool,
    /// How many times it took over (`init_transactions` and a writer
    /// record committed).
    pub takeovers: u64,
    /// How many transactions of registry records it committed.
    pub commits: u64,
}

/// A random id for this instance's writer records.
fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    format!("{:016x}", hasher.finish())
}

/// The registry's log in a Kafka topic; see the module documentation.
pub struct KafkaLog {
    spec: KafkaSpec,
    target: String,
    consumer: Arc<BaseConsumer>,
    /// Asks the brokers for the topic's last stable offset.
    watermarks: Arc<BaseConsumer>,
    tail: Arc<Mutex<Tail>>,
    /// Held while reading the topic and while appending, so that records
    /// are numbered in one order.
    gate: tokio::sync::Mutex<()>,
    /// The transactional producer while this instance holds the epoch.
    writer: tokio::sync::Mutex<Option<Arc<Writer>>>,
    /// When this instance last found itself fenced: it then lets the new
    /// writer finish before taking over again.
    fenced_at: Mutex<Option<Instant>>,
    /// Commits in a row that failed with an unknown outcome.
    unknown_commits: Mutex<u32>,
    /// This instance's id in writer records.
    instance: String,
    /// Where this instance takes forwarded writes and whether it may write
    /// at all; unset when it serves no HTTP.
    forwarder: OnceLock<Forwarder>,
    /// Reads the writer topic.
    writers: Arc<BaseConsumer>,
    view: Arc<Mutex<WriterView>>,
    /// Held while reading the writer topic.
    writer_gate: tokio::sync::Mutex<()>,
    /// Whether `writer` holds a producer (read without its lock).
    holding: AtomicBool,
    takeovers: AtomicU64,
    commits: AtomicU64,
    /// The Kafka offset just past the last record this instance committed
    /// to the registry's topic (0: none yet).
    committed_to: AtomicI64,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError(format!("registry store task failed: {e}")))?
}

/// Why an append failed.
enum Failure {
    /// Another instance took over the `transactional.id`.
    Fenced,
    /// The commit failed otherwise: whether it took effect is unknown
    /// until the next `init_transactions` settles it.
    Unknown(String),
    Other(String),
}

/// Commits in a row whose outcome was unknown before an append gives up.
const UNKNOWN_COMMITS: u32 = 3;

fn is_fenced_code(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
    )
}

impl KafkaLog {
    /// Connects, checks (or creates) the topic and starts reading it from
    /// its beginning. The registry's first `read_after(0)` reads it to its
    /// end.
    pub async fn open(spec: &KafkaSpec) -> Result<KafkaLog, StoreError> {
        let spec = spec.clone();
        let target = spec.describe();
        ensure_topic(&spec, &spec.topic, &target).await?;
        ensure_topic(&spec, &spec.writer_topic(), &target).await?;
        let config = spec.reader_config();
        // Asks for the last stable offset on a connection of its own: a
        // broker answers a connection's requests in order, so behind the
        // reader's waiting fetch the question would wait too.
        let watermarks: BaseConsumer = config
            .create()
            .map_err(|e| StoreError(format!("registry store {target}: {e}")))?;
        let reader = |topic: &str| -> Result<BaseConsumer, StoreError> {
            let consumer: BaseConsumer = config
                .create()
                .map_err(|e| StoreError(format!("registry store {target}: {e}")))?;
            let mut assignment = TopicPartitionList::new();
            assignment
                .add_partition_offset(topic, 0, Offset::Beginning)
                .map_err(|e| StoreError(format!("registry store {target}: {e}")))?;
            consumer
                .assign(&assignment)
                .map_err(|e| StoreError(format!("registry store {target}: {e}")))?;
            Ok(consumer)
        };
        let consumer = reader(&spec.topic)?;
        let writers = reader(&spec.writer_topic())?;
        Ok(KafkaLog {
            spec,
            target,
            consumer: Arc::new(consumer),
            watermarks: Arc::new(watermarks),
            tail: Arc::new(Mutex::new(Tail::default())),
            gate: tokio::sync::Mutex::new(()),
            writer: tokio::sync::Mutex::new(None),
            fenced_at: Mutex::new(None),
            unknown_commits: Mutex::new(0),
            instance: instance_id(),
            forwarder: OnceLock::new(),
            writers: Arc::new(writers),
            view: Arc::new(Mutex::new(WriterView::default())),
            writer_gate: tokio::sync::Mutex::new(()),
            holding: AtomicBool::new(false),
            takeovers: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            committed_to: AtomicI64::new(0),
        })
    }

    /// This instance's id in writer records.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Serves writes through `forwarder`: its URL goes into this
    /// instance's writer records, and writes that reach another instance
    /// are forwarded here (see [`crate::forward`]). Set once; a second
    /// call is ignored.
    pub fn serve_as(&self, forwarder: Forwarder) {
        let _ = self.forwarder.set(forwarder);
    }

    pub fn forwarder(&self) -> Option<&Forwarder> {
        self.forwarder.get()
    }

    /// The writer as far as this instance knows: the last record of the
    /// writer topic, read to its last stable offset unless this instance
    /// holds the producer and the record it knows names it (then nobody
    /// took over without fencing it, and its next commit would find out).
    pub async fn current_writer(&self) -> Result<Option<WriterRecord>, StoreError> {
        if self.holding.load(Ordering::SeqCst) {
            let latest = locked(&self.view).latest.clone();
            if let Some((_, record)) = latest
                && record.instance == self.instance
            {
                return Ok(Some(record));
            }
        }
        self.read_writers().await
    }

    /// The writer: the last record of the writer topic, read to its last
    /// stable offset.
    pub async fn read_writer(&self) -> Result<Option<WriterRecord>, StoreError> {
        self.read_writers().await
    }

    /// The Kafka offset just past the last record this instance committed
    /// to the registry's topic, if it committed any.
    pub fn committed_to(&self) -> Option<i64> {
        Some(self.committed_to.load(Ordering::SeqCst)).filter(|o| *o > 0)
    }

    /// Whether every record of the registry's topic below Kafka offset
    /// `offset` has been read (and so, after a catch-up, applied).
    pub fn has_read(&self, offset: i64) -> bool {
        locked(&self.tail).read_to >= offset
    }

    /// The counters and the writer as last read, without reading.
    pub fn writer_stats(&self) -> WriterStats {
        let writer = locked(&self.view).latest.as_ref().map(|(_, r)| r.clone());
        WriterStats {
            is_writer: self.holding.load(Ordering::SeqCst)
                && writer.as_ref().is_some_and(|w| w.instance == self.instance),
            instance: self.instance.clone(),
            writer,
            takeovers: self.takeovers.load(Ordering::SeqCst),
            commits: self.commits.load(Ordering::SeqCst),
        }
    }

    /// Reads the writer topic to its last stable offset; its last record.
    async fn read_writers(&self) -> Result<Option<WriterRecord>, StoreError> {
        let _gate = self.writer_gate.lock().await;
        let consumer = Arc::clone(&self.writers);
        let watermarks = Arc::clone(&self.watermarks);
        let view = Arc::clone(&self.view);
        let topic = self.spec.writer_topic();
        let target = self.target.clone();
        blocking(move || read_writers(&consumer, &watermarks, &view, &topic, &target)).await?;
        Ok(locked(&self.view).latest.as_ref().map(|(_, r)| r.clone()))
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.spec.topic
    }

    /// Reads the topic up to its last stable offset. Call with the gate.
    async fn read_to_end(&self) -> Result<(), StoreError> {
        let consumer = Arc::clone(&self.consumer);
        let watermarks = Arc::clone(&self.watermarks);
        let tail = Arc::clone(&self.tail);
        let topic = self.spec.topic.clone();
        let target = self.target.clone();
        blocking(move || read_to_end(&consumer, &watermarks, &tail, &topic, &target)).await
    }

    /// A producer with the writers' `transactional.id`, after
    /// `init_transactions`: every other holder of the id is fenced.
    async fn start_writer(&self) -> Result<Arc<Writer>, StoreError> {
        let recently_fenced = locked(&self.fenced_at)
            .take()
            .is_some_and(|at| at.elapsed() < Duration::from_secs(1));
        if recently_fenced {
            // Another instance has just taken over and is likely in the
            // middle of its transaction: let it commit first.
            let jitter = u64::from(std::process::id() % 7) * 5 + 20;
            tokio::time::sleep(Duration::from_millis(jitter)).await;
        }
        let mut config = self.spec.client_config();
        config
            .set("transactional.id", self.spec.transactional_id())
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set(
                "transaction.timeout.ms",
                TRANSACTION_TIMEOUT.as_millis().to_string(),
            )
            .set(
                "message.timeout.ms",
                OPERATION_TIMEOUT.as_millis().to_string(),
            )
            .set("linger.ms", "0")
            // Taking over waits for the coordinator to abort the fenced
            // writer's transaction (CONCURRENT_TRANSACTIONS): ask again soon.
            .set("retry.backoff.ms", "10")
            .set("retry.backoff.max.ms", "100");
        let target = self.target.clone();
        let id = self.spec.transactional_id();
        blocking(move || {
            let producer: Writer = config
                .create()
                .map_err(|e| StoreError(format!("registry store {target}: {e}")))?;
            match producer.init_transactions(OPERATION_TIMEOUT) {
                Ok(()) => Ok(Arc::new(producer)),
                Err(e) => Err(StoreError(format!(
                    "registry store {target}: could not become the writer ({e}); check that the brokers are running and that the user may write with transactional id \"{id}\""
                ))),
            }
        })
        .await
    }

    /// Drops a producer off the async threads (librdkafka's destroy waits).
    fn retire(&self, producer: Arc<Writer>) {
        tokio::task::spawn_blocking(move || drop(producer));
    }

    /// Takes over writing: `init_transactions` (fences the previous
    /// writer), then one transaction that writes this instance's record
    /// to the writer topic. `None` when another instance fenced this one
    /// before that committed (the caller tries again).
    ///
    /// A write that came over HTTP takes over only from the writer it
    /// found unreachable, or when the writer topic names none or this
    /// instance ([`Takeover::From`]): if another instance has taken over
    /// since, it declines, and the write is routed there instead.
    async fn take_over(&self) -> Result<Option<Arc<Writer>>, StoreError> {
        let forwarder = self.forwarder.get();
        if forwarder.is_some_and(|f| !f.eligible()) {
            return Err(StoreError(format!(
                "registry store {}: this instance does not write (--writer-eligible false)",
                self.target
            )));
        }
        if let Takeover::From(expected) = forward::takeover() {
            // Fenced a moment ago: whoever did it is taking over, and its
            // record is about to show; follow it rather than fence it.
            let fenced = (*locked(&self.fenced_at)).is_some_and(|at| at.elapsed() < FENCED_WAIT);
            let deadline = Instant::now() + if fenced { FENCED_WAIT } else { Duration::ZERO };
            loop {
                let latest = self.read_writers().await?;
                if let Some(writer) = latest
                    && writer.instance != self.instance
                    && Some(&writer.instance) != expected.as_ref()
                {
                    let message = format!(
                        "registry store {}: instance {} ({}) took over writing meanwhile",
                        self.target,
                        writer.instance,
                        writer.url.as_deref().unwrap_or("no address")
                    );
                    forward::decline(writer);
                    return Err(StoreError(message));
                }
                if Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let producer = self.start_writer().await?;
        let record = WriterRecord {
            instance: self.instance.clone(),
            url: forwarder
                .and_then(|f| f.url())
                .map(|u| u.as_str().to_owned()),
        };
        let value = serde_json::to_string(&record)
            .map_err(|e| StoreError(format!("registry store {}: {e}", self.target)))?;
        let topic = self.spec.writer_topic();
        match self
            .transact(&producer, &topic, &[(WRITER_KEY.to_owned(), Some(value))])
            .await
        {
            Ok(offsets) => {
                locked(&self.view).learn(offsets.first().copied().unwrap_or(0), record.clone());
                self.takeovers.fetch_add(1, Ordering::SeqCst);
                tracing::info!(
                    store = %self.target,
                    instance = %record.instance,
                    url = record.url.as_deref().unwrap_or("-"),
                    "this instance took over writing"
                );
                Ok(Some(producer))
            }
            Err(Failure::Fenced) => {
                *locked(&self.fenced_at) = Some(Instant::now());
                self.retire(producer);
                Ok(None)
            }
            Err(Failure::Unknown(message) | Failure::Other(message)) => {
                self.retire(producer);
                Err(StoreError(message))
            }
        }
    }

    /// Writes `messages` (keys and values) to `topic` in one transaction;
    /// their Kafka offsets.
    async fn transact(
        &self,
        producer: &Arc<Writer>,
        topic: &str,
        messages: &[(String, Option<String>)],
    ) -> Result<Vec<i64>, Failure> {
        let classify = |e: &KafkaError, what: &str| {
            let code = e.rdkafka_error_code();
            let fatal = producer.client().fatal_error().map(|(code, _)| code);
            if code.is_some_and(is_fenced_code) || fatal.is_some_and(is_fenced_code) {
                Failure::Fenced
            } else {
                Failure::Other(format!(
                    "registry store {}: could not {what}: {e}",
                    self.target
                ))
            }
        };
        producer
            .begin_transaction()
            .map_err(|e| classify(&e, "begin a transaction"))?;
        let mut deliveries = Vec::with_capacity(messages.len());
        let mut failed = None;
        for (key, value) in messages {
            let mut out = FutureRecord::<str, str>::to(topic).partition(0).key(key);
            if let Some(value) = value {
                out = out.payload(value);
            }
            match producer.send_result(out) {
                Ok(delivery) => deliveries.push(delivery),
                Err((e, _)) => {
                    failed = Some(classify(&e, "write a record"));
                    break;
                }
            }
        }
        let mut offsets = Vec::with_capacity(messages.len());
        for delivery in deliveries {
            match delivery.await {
                Ok(Ok(d)) => offsets.push(d.offset),
                Ok(Err((e, _))) => {
                    failed.get_or_insert_with(|| classify(&e, "write a record"));
                }
                Err(_) => {
                    failed.get_or_insert_with(|| {
                        Failure::Other(format!(
                            "registry store {}: the producer went away while writing",
                            self.target
                        ))
                    });
                }
            }
        }
        if let Some(failure) = failed {
            let p = Arc::clone(producer);
            let _ = blocking(move || {
                let _ = p.abort_transaction(OPERATION_TIMEOUT);
                Ok(())
            })
            .await;
            return Err(failure);
        }
        let p = Arc::clone(producer);
        let committed =
            tokio::task::spawn_blocking(move || p.commit_transaction(OPERATION_TIMEOUT))
                .await
                .map_err(|e| Failure::Other(format!("registry store task failed: {e}")))?;
        committed.map_err(|e| match classify(&e, "commit the transaction") {
            Failure::Other(message) => Failure::Unknown(message),
            fenced => fenced,
        })?;
        Ok(offsets)
    }
}

impl Log for KafkaLog {
    async fn read_after(&self, offset: i64) -> Result<Vec<(i64, Record)>, StoreError> {
        let _gate = self.gate.lock().await;
        self.read_to_end().await?;
        let mut tail = locked(&self.tail);
        tail.trim(offset);
        let first = tail.trimmed + 1;
        Ok(tail
            .records
            .iter()
            .enumerate()
            .map(|(i, r)| (first + i as i64, r.clone()))
            .filter(|(n, _)| *n > offset)
            .collect())
    }

    async fn append(&self, after: i64, records: &[Record]) -> Result<bool, StoreError> {
        let mut writer = self.writer.lock().await;
        let producer = match writer.as_ref() {
            Some(p) => Arc::clone(p),
            None => match self.take_over().await? {
                Some(p) => {
                    *writer = Some(Arc::clone(&p));
                    self.holding.store(true, Ordering::SeqCst);
                    p
                }
                None => return Ok(false),
            },
        };
        let _gate = self.gate.lock().await;
        self.read_to_end().await?;
        if locked(&self.tail).end != after {
            return Ok(false);
        }
        let messages: Vec<(String, Option<String>)> = records
            .iter()
            .map(|r| (r.key.to_json(), r.value_json()))
            .collect();
        let result = self.transact(&producer, &self.spec.topic, &messages).await;
        if result.is_err() {
            *writer = None;
            self.holding.store(false, Ordering::SeqCst);
        }
        match result {
            Ok(offsets) => {
                locked(&self.tail).claim(records, &offsets);
                *locked(&self.unknown_commits) = 0;
                self.commits.fetch_add(1, Ordering::SeqCst);
                if let Some(last) = offsets.iter().max() {
                    self.committed_to.fetch_max(last + 1, Ordering::SeqCst);
                }
                Ok(true)
            }
            Err(Failure::Fenced) => {
                tracing::info!(store = %self.target, "another registry instance took over writing");
                *locked(&self.fenced_at) = Some(Instant::now());
                self.retire(producer);
                Ok(false)
            }
            Err(Failure::Unknown(message)) => {
                // A new producer's init_transactions settles the outcome
                // (completes or aborts the transaction) before the log is
                // read again, so the caller may catch up and decide again:
                // a registration that did commit is then found.
                self.retire(producer);
                let mut unknown = locked(&self.unknown_commits);
                *unknown += 1;
                if *unknown >= UNKNOWN_COMMITS {
                    *unknown = 0;
                    return Err(StoreError(message));
                }
                tracing::warn!(store = %self.target, error = %message, "a commit failed; reading the topic again");
                Ok(false)
            }
            Err(Failure::Other(message)) => {
                self.retire(producer);
                Err(StoreError(message))
            }
        }
    }

    fn describe(&self) -> String {
        self.target.clone()
    }
}

/// Polls `consumer` until every record below the topic's last stable
/// offset is in `tail`. The position counts transaction markers too
/// (librdkafka moves it past a marker when the poll serves it), so a topic
/// that ends with one is read to its end without waiting for a fetch.
fn read_to_end(
    consumer: &BaseConsumer,
    watermarks: &BaseConsumer,
    tail: &Mutex<Tail>,
    topic: &str,
    target: &str,
) -> Result<(), StoreError> {
    // With read_committed, the high watermark librdkafka asks for is the
    // last stable offset.
    let (low, high) = watermarks
        .fetch_watermarks(topic, 0, METADATA_TIMEOUT)
        .map_err(|e| {
            StoreError(format!(
                "registry store {target}: could not read the topic's end ({e}); check that the brokers are running"
            ))
        })?;
    // Reading a large topic takes long: what must not take long is the
    // wait for the next record.
    let mut deadline = Instant::now() + READ_TIMEOUT;
    let mut progress = i64::MIN;
    let mut last_error = None;
    loop {
        {
            let mut t = locked(tail);
            t.settle(high);
            if t.read_to > progress {
                progress = t.read_to;
                deadline = Instant::now() + READ_TIMEOUT;
            }
            if low >= high {
                t.read_to = t.read_to.max(high);
            }
            if t.read_to >= high {
                return Ok(());
            }
        }
        match consumer.poll(Duration::from_millis(2)) {
            None => {}
            Some(Ok(m)) => locked(tail).ingest_timed(
                target,
                m.offset(),
                m.timestamp().to_millis().filter(|ts| *ts >= 0),
                m.key(),
                m.payload(),
            ),
            Some(Err(e)) => {
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::TopicAuthorizationFailed
                            | RDKafkaErrorCode::GroupAuthorizationFailed
                            | RDKafkaErrorCode::UnknownTopicOrPartition
                    )
                ) {
                    return Err(StoreError(format!(
                        "registry store {target}: could not read the topic: {e}"
                    )));
                }
                last_error = Some(e.to_string());
            }
        }
        if let Some(p) = position(consumer, topic) {
            let mut t = locked(tail);
            t.read_to = t.read_to.max(p);
        }
        if Instant::now() > deadline {
            return Err(StoreError(format!(
                "registry store {target}: reading the topic stopped at offset {progress} of {high} for {} s{}; check that the brokers are running",
                READ_TIMEOUT.as_secs(),
                last_error.map(|e| format!(" ({e})")).unwrap_or_default()
            )));
        }
    }
}

/// Polls `consumer` until the writer topic is read to its last stable
/// offset (as [`read_to_end`] reads the registry's topic).
fn read_writers(
    consumer: &BaseConsumer,
    watermarks: &BaseConsumer,
    view: &Mutex<WriterView>,
    topic: &str,
    target: &str,
) -> Result<(), StoreError> {
    let (low, high) = watermarks
        .fetch_watermarks(topic, 0, METADATA_TIMEOUT)
        .map_err(|e| {
            StoreError(format!(
                "registry store {target}: could not read the end of topic \"{topic}\" ({e}); check that the brokers are running"
            ))
        })?;
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        {
            let mut v = locked(view);
            if low >= high {
                v.read_to = v.read_to.max(high);
            }
            if v.read_to >= high {
                return Ok(());
            }
        }
        match consumer.poll(Duration::from_millis(2)) {
            None => {}
            Some(Ok(m)) => locked(view).ingest(target, m.offset(), m.payload()),
            Some(Err(e)) => {
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::TopicAuthorizationFailed
                            | RDKafkaErrorCode::UnknownTopicOrPartition
                    )
                ) {
                    return Err(StoreError(format!(
                        "registry store {target}: could not read topic \"{topic}\": {e}"
                    )));
                }
            }
        }
        if let Some(p) = position(consumer, topic) {
            let mut v = locked(view);
            v.read_to = v.read_to.max(p);
        }
        if Instant::now() > deadline {
            return Err(StoreError(format!(
                "registry store {target}: reading topic \"{topic}\" did not reach offset {high} in {} s; check that the brokers are running",
                READ_TIMEOUT.as_secs()
            )));
        }
    }
}

/// The consumer's position in partition 0, once it has one.
fn position(consumer: &BaseConsumer, topic: &str) -> Option<i64> {
    let list = consumer.position().ok()?;
    match list.find_partition(topic, 0)?.offset() {
        Offset::Offset(p) => Some(p),
        _ => None,
    }
}

/// Checks `topic` (the registry's topic or its writer topic), or creates
/// it with Confluent's settings: one partition, compacted.
async fn ensure_topic(spec: &KafkaSpec, topic: &str, target: &str) -> Result<(), StoreError> {
    let admin: AdminClient<DefaultClientContext> = spec
        .client_config()
        .create()
        .map_err(|e| StoreError(format!("registry store {target}: {e}")))?;
    let admin = Arc::new(admin);
    let describe = {
        let admin = Arc::clone(&admin);
        let topic = topic.to_string();
        let target = target.to_string();
        move || -> Result<(Option<usize>, usize), StoreError> {
            let metadata = admin
                .inner()
                .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
                .map_err(|e| {
                    StoreError(format!(
                        "registry store {target}: no Kafka broker answered in {} s ({e}); check --storage and that the brokers are running",
                        METADATA_TIMEOUT.as_secs()
                    ))
                })?;
            let partitions = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
                .map(|t| t.partitions().len());
            Ok((partitions, metadata.brokers().len()))
        }
    };
    let (mut partitions, brokers) = blocking(describe.clone()).await?;
    if partitions.is_none() {
        let replication = brokers.clamp(1, 3) as i32;
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication))
            .set("cleanup.policy", "compact");
        let options = AdminOptions::new().operation_timeout(Some(OPERATION_TIMEOUT));
        let results = admin.create_topics([&new], &options).await.map_err(|e| {
            StoreError(format!(
                "registry store {target}: could not create the topic: {e}"
            ))
        })?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(StoreError(format!(
                        "registry store {target}: topic \"{topic}\" does not exist and could not be created ({code}); create it with one partition and cleanup.policy=compact, or let the user create topics"
                    )));
                }
            }
        }
        tracing::info!(store = target, topic, replication, "created the topic");
        // Until the metadata shows the new topic.
        let started = Instant::now();
        loop {
            partitions = blocking(describe.clone()).await?.0;
            if partitions.is_some() || started.elapsed() > METADATA_TIMEOUT {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    match partitions {
        None => {
            return Err(StoreError(format!(
                "registry store {target}: topic \"{topic}\" was created but does not show in the cluster's metadata; try again"
            )));
        }
        Some(1) => {}
        Some(n) => {
            return Err(StoreError(format!(
                "registry store {target}: topic \"{topic}\" has {n} partitions, the registry's log needs exactly one (records are ordered only within a partition); name another topic in --storage, or recreate it with one partition"
            )));
        }
    }
    let resource = ResourceSpecifier::Topic(topic);
    let options = AdminOptions::new().request_timeout(Some(OPERATION_TIMEOUT));
    let configs = admin
        .describe_configs([&resource], &options)
        .await
        .map_err(|e| {
            StoreError(format!(
                "registry store {target}: could not read the topic's configuration: {e}"
            ))
        })?;
    for config in configs {
        let config = config.map_err(|code| {
            StoreError(format!(
                "registry store {target}: could not read the topic's configuration ({code}); let the user describe the topic's configuration"
            ))
        })?;
        let policy = config
            .get("cleanup.policy")
            .and_then(|e| e.value.clone())
            .unwrap_or_default();
        if policy.trim() != "compact" {
            return Err(StoreError(format!(
                "registry store {target}: topic \"{topic}\" has cleanup.policy={policy}, the registry's log needs cleanup.policy=compact (nothing deleted by age or size); set it with kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact, or name another topic in --storage"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_read_committed_and_fetch_again_soon_after_a_full_queue() {
        let spec = KafkaSpec::parse("kafka://a:9092").expect("brokers only");
        let config = spec.reader_config();
        assert_eq!(config.get("bootstrap.servers"), Some("a:9092"));
        assert_eq!(config.get("isolation.level"), Some("read_committed"));
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        // librdkafka's default is 1 s, a pause per 100,000 records when
        // the reader is faster than the broker's answers.
        assert_eq!(config.get("fetch.queue.backoff.ms"), Some("10"));
    }

    #[test]
    fn kafka_storage_urls_parse_with_the_pipelines_option_names() {
        let spec = KafkaSpec::parse("kafka://a:9092,b:9093").expect("brokers only");
        assert_eq!(spec.brokers, "a:9092,b:9093");
        assert_eq!(spec.topic, "_schemas");
        assert_eq!(spec.describe(), "kafka://a:9092,b:9093/_schemas");
        assert_eq!(spec.transactional_id(), "evolve-registry-_schemas");

        let spec = KafkaSpec::parse(
            "kafka://a:9092/team.schemas?sslmode=verify-ca&sslrootcert=/ca.pem&sasl_mechanism=scram-sha-512&user=reg&password=p%40ss%26word",
        )
        .expect("options");
        assert_eq!(spec.topic, "team.schemas");
        assert_eq!(spec.options.password(), Some("p@ss&word"));
        assert_eq!(
            spec.options.sasl_mechanism.as_deref(),
            Some("SCRAM-SHA-512")
        );
        let config = spec.client_config();
        assert_eq!(config.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(
            config.get("ssl.endpoint.identification.algorithm"),
            Some("none")
        );
        assert_eq!(config.get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(config.get("sasl.username"), Some("reg"));
        let shown = format!("{spec:?} {}", spec.describe());
        assert!(!shown.contains("p@ss"), "{shown}");

        for (bad, expected) in [
            ("kafka://", "names no broker"),
            ("kafka://a", "is not host:port"),
            ("kafka://u:secret@a:1/t", "takes no user or password"),
            ("kafka://a:1/bad topic", "is not a Kafka topic name"),
            ("kafka://a:1/t?sslmod=require", "unknown option \"sslmod\""),
            ("kafka://a:1/t?sslmode=on", "is not one of disable"),
            ("kafka://a:1/t?sslrootcert=/ca.pem", "sslmode is not"),
            ("kafka://a:1/t?user=u&password=secret", "go together"),
            ("kafka://a:1/t?password=%zz", "not valid percent-encoding"),
        ] {
            let err = KafkaSpec::parse(bad).expect_err(bad);
            assert!(err.contains(expected), "{bad}: {err}");
            assert!(!err.contains("secret"), "{bad}: {err}");
        }
    }

    fn schema_record(version: u32) -> Record {
        Record::from_json(
            &format!(r#"{{"keytype":"SCHEMA","subject":"s","version":{version},"magic":1}}"#),
            Some(&format!(
                r#"{{"subject":"s","version":{version},"id":{version},"schema":"\"int\"","deleted":false}}"#
            )),
        )
        .expect("record")
    }

    #[test]
    fn the_tail_numbers_records_without_gaps_and_skips_its_own() {
        let mut tail = Tail::default();
        let key = |v: u32| {
            Record::from_json(
                &format!(r#"{{"keytype":"SCHEMA","subject":"s","version":{v},"magic":1}}"#),
                None,
            )
            .expect("key")
            .key
            .to_json()
        };
        // Offsets 0 and 1, a commit marker at 2, a record at 3.
        let value = schema_record(1).value_json();
        tail.ingest(
            "t",
            0,
            Some(key(1).as_bytes()),
            value.as_deref().map(str::as_bytes),
        );
        tail.ingest("t", 1, Some(b"not json"), None);
        tail.ingest("t", 3, Some(key(2).as_bytes()), None);
        assert_eq!((tail.end, tail.read_to, tail.records.len()), (2, 4, 2));
        // This instance commits two records at 5 and 6 (a marker at 4).
        tail.claim(&[schema_record(3), schema_record(4)], &[5, 6]);
        tail.settle(8);
        assert_eq!(
            tail.read_to, 4,
            "a gap (offset 4) before them: read them back"
        );
        assert_eq!(tail.end, 4);
        tail.ingest("t", 5, Some(key(3).as_bytes()), None);
        tail.ingest("t", 6, Some(key(4).as_bytes()), None);
        assert_eq!(
            (tail.end, tail.records.len()),
            (4, 4),
            "own records counted once"
        );
        // Two more right after what was read, only their marker after
        // them: the topic counts as read to the marker's end at once, and
        // the records, read back later, are not counted again.
        assert_eq!(tail.read_to, 7);
        tail.claim(&[schema_record(5), schema_record(6)], &[7, 8]);
        tail.settle(7);
        assert_eq!((tail.end, tail.read_to), (6, 7), "not committed yet");
        tail.settle(10);
        assert_eq!((tail.end, tail.read_to), (6, 10));
        tail.ingest("t", 7, Some(key(5).as_bytes()), None);
        tail.ingest("t", 8, Some(key(6).as_bytes()), None);
        assert_eq!((tail.end, tail.records.len()), (6, 6));
        tail.trim(3);
        assert_eq!((tail.trimmed, tail.records.len()), (3, 3));
        tail.trim(10);
        assert_eq!((tail.trimmed, tail.records.len()), (6, 0));
    }
}
