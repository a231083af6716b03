//! The Kafka sink: an interface's changes as records of a topic, exactly
//! once, with the sink's position in the progress topic
//! [`PROGRESS_TOPIC`] beside it.
//!
//! It holds the [`Sink`] contract with Kafka transactions, as Materialize
//! does: a transactional producer (`transactional.id` =
//! `evolve-sink-<name>`, so a restarted pipeline fences the one it
//! replaces and aborts whatever transaction that one left open;
//! `enable.idempotence`) writes each [`Sink::write`] (consecutive upstream
//! transactions) and each [`Sink::load`] as one Kafka transaction: the data
//! records, then one record of the progress topic (key = the sink's name,
//! value = `{"position":"0/16B3748","partitions":1,"written":true}`: the
//! position, the partition count the keys are spread over, and whether
//! the sink has written a record into its topic), committed together. A
//! `read_committed` consumer of the topic sees every upstream transaction
//! whole, once, in commit order per key; [`Sink::position`] is the value of
//! the sink's last record in the progress topic, read to its end by such a
//! consumer after the producer's `init_transactions` (so nothing of the
//! fenced producer is still open).
//!
//! Records: key = the interface key (the key document's JSON), partition
//! by the murmur2 hash of the key (Java's default partitioner, so every
//! record of a key lands on one partition, in order) over the partition
//! count the sink loaded into, which its progress records keep:
//! partitions added to the topic later stay empty, since spreading the
//! keys over them would move a key's later records (its tombstone among
//! them) to another partition than its earlier ones. A progress record of
//! an earlier evolve has no count: its producer spread keys by murmur2
//! over the topic's count when it wrote, so the count is the smallest
//! that places the last records of every partition where they are
//! (`legacy_partitions`), and partitions added before the first restart
//! on this release move no key. A topic that is gone,
//! that has fewer partitions than that, or that is empty though the sink
//! wrote records into it (deleted and created again) stops the sink,
//! retrying, with the way out, rather than have it write only the later
//! changes into a topic that lost the rest. Header
//! `evolve-position` = the upstream transaction's position (LSN notation).
//! `ENVELOPE UPSERT`: value = the document; a delete is a tombstone (no
//! value). `ENVELOPE DEBEZIUM`: value = `{"before":..,"after":..,"op":..}`
//! with `op` `r` (the initial load), `c`, `u` or `d`, and no tombstones.
//!
//! `FORMAT AVRO`: key and value in Confluent's wire format (byte 0, the
//! schema id big-endian, the Avro binary encoding): the key a record
//! `Key {key: string}`, the value `Value {data: string}` or, under
//! `ENVELOPE DEBEZIUM`, `Envelope {before: [null, string], after: [null,
//! string], op: string}`, each document a string marked `connect.name` =
//! `io.debezium.data.Json`. The schemas ([`avro_schemas`]) are registered
//! under `<topic>-key` and `<topic>-value` ([`register_avro_schemas`],
//! through [`super::registry`]) when the sink is created and each time it
//! opens, which gives their ids.
//!
//! The progress topic has one partition and `cleanup.policy=compact` (the
//! last position of each sink is kept); it and the data topic are created
//! when missing (the data topic with the broker's default partitions and
//! replication). A progress topic created by someone else that deletes
//! records (`cleanup.policy=delete` with a retention) is refused, at
//! `CREATE SINK` and when a sink opens, since a sink whose position the
//! broker deleted would write its interface again. `CREATE SINK` writes
//! the sink's tombstone there, as `DROP SINK` does, so that a sink
//! created under the name of one dropped while the cluster could not be
//! reached loads its interface anew. A load is one transaction, so it must commit within
//! [`TRANSACTION_TIMEOUT`] (15 minutes, the broker's default
//! `transaction.max.timeout.ms`): that, and the broker's memory for one
//! open transaction, bound how large an interface a sink can load. While a
//! transaction is open, `read_committed` readers of its partitions (the
//! progress topic's one among them, shared by every sink on the cluster)
//! wait at its first record.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use super::registry::Registry;
use super::{Documents, Sink};
use crate::config::{Connection, ConnectionKind};
use crate::error::{PipelineError, Result};
use crate::position::Position;
use crate::store::{FeedEntry, KafkaEnvelope, KafkaFormat, KafkaTarget, SinkInfo};

/// The topic of every Kafka sink's position: one partition, compacted,
/// key = the sink's name.
pub const PROGRESS_TOPIC: &str = "_evolve_sink_progress";

/// The producer's `transaction.timeout.ms`: what bounds a load.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(900);

/// How long the cluster may take to answer metadata, create a topic,
/// start or commit a transaction of a write.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the cluster may take to answer the first metadata request:
/// an unreachable cluster is reported this soon.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// How long reading the progress topic to its end may take.
const PROGRESS_READ_TIMEOUT: Duration = Duration::from_secs(120);

/// The header with the upstream transaction's position.
const POSITION_HEADER: &str = "evolve-position";

type Producer_ = ThreadedProducer<Deliveries>;

/// The largest record the producer sends (librdkafka's `message.max.bytes`,
/// 1,000,000 by default): the topic's `max.message.bytes` decides which
/// records it takes, so that raising it is the way to write larger
/// documents. Under the broker's `socket.request.max.bytes` (100 MiB).
const MAX_RECORD_BYTES: usize = 100_000_000;

/// A record too large for its topic, the first of a transaction.
#[derive(Debug)]
struct TooLarge {
    /// The record's key, as text, cut to 100 characters.
    key: String,
    /// The record's key and value, in bytes.
    bytes: usize,
}

/// The producer's context: remembers the first record refused for its
/// size (by the brokers, or by the producer past [`MAX_RECORD_BYTES`]), so
/// that the failed transaction's error names it and the way out.
#[derive(Default)]
struct Deliveries {
    too_large: std::sync::Mutex<Option<TooLarge>>,
}

impl Deliveries {
    fn refused(&self, key: Option<&[u8]>, bytes: usize) {
        let mut too_large = self
            .too_large
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if too_large.is_none() {
            *too_large = Some(TooLarge {
                key: String::from_utf8_lossy(key_document(key.unwrap_or_default()))
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(100)
                    .collect(),
                bytes,
            });
        }
    }

    fn take(&self) -> Option<TooLarge> {
        self.too_large
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// The key document of a record key the sink wrote: the key itself
/// (`FORMAT JSON`: JSON text, which never starts with a zero byte), or
/// under `FORMAT AVRO` the string of its `Key` record, after the wire
/// header and the string's length (a zig-zag varint, whose bytes can be
/// printable: 40, a 20-byte key's, is `(`).
fn key_document(key: &[u8]) -> &[u8] {
    let Some(mut rest) = key.strip_prefix(&[0]).and_then(|k| k.get(4..)) else {
        return key;
    };
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some((&b, tail)) = rest.split_first() else {
            return key;
        };
        rest = tail;
        z |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            let n = (z >> 1) as i64 ^ -((z & 1) as i64);
            return if usize::try_from(n).ok() == Some(rest.len()) {
                rest
            } else {
                key
            };
        }
    }
    key
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), m)) =
            result
        {
            self.refused(m.key(), m.key_len() + m.payload_len());
        }
    }
}

/// The librdkafka settings of connection `name`: brokers, TLS, SASL.
pub(crate) fn client_config(name: &str, connection: &Connection) -> Result<ClientConfig> {
    let Some(brokers) = connection.kafka_brokers() else {
        return Err(not_kafka(name));
    };
    let mut config = ClientConfig::new();
    for (key, value) in connection
        .kafka_options()
        .settings(brokers, "evolve-pipeline")
    {
        config.set(key, value);
    }
    Ok(config)
}

/// A sink into Kafka named a connection of another kind.
pub(crate) fn not_kafka(name: &str) -> PipelineError {
    PipelineError::Refused {
        sqlstate: "42809",
        primary: format!(
            "connection \"{name}\" is not a kafka:// connection; a Kafka sink needs url = \"kafka://host:port\""
        ),
        detail: None,
        hint: None,
    }
}

/// A PostgreSQL sink named a connection of another kind.
pub(crate) fn not_postgres(name: &str, kind: ConnectionKind) -> PipelineError {
    let primary = if kind == ConnectionKind::Kafka {
        format!(
            "connection \"{name}\" is a kafka:// connection; INTO POSTGRES needs a PostgreSQL url (or write INTO KAFKA CONNECTION {name} (TOPIC '...'))"
        )
    } else {
        format!(
            "connection \"{name}\" is a {} connection; INTO POSTGRES needs a PostgreSQL url",
            kind.as_str()
        )
    };
    PipelineError::Refused {
        sqlstate: "42809",
        primary,
        detail: None,
        hint: None,
    }
}

/// Whether `connection` reaches Kafka.
pub(crate) fn is_kafka(connection: &Connection) -> bool {
    connection.kind() == ConnectionKind::Kafka
}

fn kafka_error(context: String, e: impl std::fmt::Display) -> PipelineError {
    PipelineError::Database {
        context,
        message: e.to_string(),
    }
}

/// Runs `f` on a thread of the blocking pool (librdkafka's calls block).
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| kafka_error(what.to_string(), e))?
}

/// Which of `topics` (and the progress topic) the cluster of
/// `connection` lacks. An unreachable cluster is a connection error
/// naming the connection and its brokers.
pub(crate) async fn missing_topics(
    connection_name: &str,
    connection: &Connection,
    topics: Vec<String>,
) -> Result<Vec<String>> {
    let config = client_config(connection_name, connection)?;
    let brokers = connection.kafka_brokers().unwrap_or_default().to_string();
    let name = connection_name.to_string();
    blocking("read the Kafka cluster's metadata", move || {
        let consumer: BaseConsumer = config
            .create()
            .map_err(|e| kafka_error("create a Kafka client".into(), e))?;
        let metadata = consumer
            .fetch_metadata(None, METADATA_TIMEOUT)
            .map_err(|e| PipelineError::Connect {
                connection: name.clone(),
                target: brokers.clone(),
                reason: format!(
                    "no Kafka broker answered in {}s ({e}); check the url and that the brokers are running",
                    METADATA_TIMEOUT.as_secs()
                ),
            })?;
        let exists = |t: &str| {
            metadata
                .topics()
                .iter()
                .any(|m| m.name() == t && m.error().is_none() && !m.partitions().is_empty())
        };
        let mut missing: Vec<String> = topics.into_iter().filter(|t| !exists(t)).collect();
        if !exists(PROGRESS_TOPIC) {
            missing.push(PROGRESS_TOPIC.to_string());
        }
        Ok(missing)
    })
    .await
}

/// Refuses the progress topic as a sink's `topic`, checks that a broker
/// of `connection` answers, creates `topic` and the progress topic when
/// they are missing, checks the progress topic
/// ([`check_progress_topic`]), and forgets whatever position the
/// progress topic still holds for a sink named `sink`: one dropped while
/// the cluster could not be reached (its tombstone is best effort), whose
/// position the new sink would otherwise resume at, without loading its
/// own interface.
pub(crate) async fn ensure_topics(
    connection_name: &str,
    connection: &Connection,
    sink: &str,
    topic: &str,
) -> Result<()> {
    if topic == PROGRESS_TOPIC {
        return Err(PipelineError::Refused {
            sqlstate: "42602",
            primary: format!(
                "Kafka topic \"{PROGRESS_TOPIC}\" of sink \"{sink}\" is where every Kafka sink keeps its position; choose another TOPIC"
            ),
            detail: None,
            hint: None,
        });
    }
    let missing = missing_topics(connection_name, connection, vec![topic.to_string()]).await?;
    create_topics(connection_name, connection, sink, topic, &missing).await?;
    check_progress_topic(connection_name, connection, sink).await?;
    forget(connection_name, connection, sink)
        .await
        .map_err(|e| match e {
            PipelineError::Database { context, message } => PipelineError::Database {
                context: format!(
                    "{context} (clearing the position of an earlier sink \"{sink}\" in topic \"{PROGRESS_TOPIC}\")"
                ),
                message,
            },
            other => other,
        })
}

/// Checks that the progress topic keeps each sink's last record however
/// old it is: compacted, or its records kept for ever. A topic created by
/// someone else with the broker's default `cleanup.policy=delete` would
/// lose the position of a sink that wrote nothing for `retention.ms`, and
/// the sink would then write its whole interface again. A user that may
/// not read topic configurations is not checked.
async fn check_progress_topic(
    connection_name: &str,
    connection: &Connection,
    sink: &str,
) -> Result<()> {
    use rdkafka::admin::ResourceSpecifier;
    let admin: AdminClient<DefaultClientContext> = client_config(connection_name, connection)?
        .create()
        .map_err(|e| kafka_error("create a Kafka admin client".into(), e))?;
    let context = || format!("read the configuration of Kafka topic \"{PROGRESS_TOPIC}\"");
    let options = AdminOptions::new().request_timeout(Some(OPERATION_TIMEOUT));
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(PROGRESS_TOPIC)], &options)
        .await
        .map_err(|e| kafka_error(context(), e))?;
    for result in results {
        let config = match result {
            Ok(config) => config,
            Err(
                RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::UnknownTopicOrPartition,
            ) => continue,
            Err(code) => return Err(kafka_error(context(), code)),
        };
        let value = |name: &str| {
            config
                .get(name)
                .and_then(|e| e.value.clone())
                .unwrap_or_default()
        };
        let policy = value("cleanup.policy");
        let (retention_ms, retention_bytes) = (value("retention.ms"), value("retention.bytes"));
        if let Some(problem) = progress_retention_problem(&policy, &retention_ms, &retention_bytes)
        {
            return Err(PipelineError::Refused {
                sqlstate: "55000",
                primary: format!(
                    "Kafka topic \"{PROGRESS_TOPIC}\", where sink \"{sink}\" keeps its position, is not compacted ({problem}), so the broker deletes old positions, and a sink whose position is gone would write its interface again; compact it (kafka-configs.sh --alter --entity-type topics --entity-name {PROGRESS_TOPIC} --add-config cleanup.policy=compact)"
                ),
                detail: None,
                hint: None,
            });
        }
    }
    Ok(())
}

/// What makes a progress topic with these settings delete records that
/// are still a sink's last (`None`: nothing, the topic is compacted only,
/// or keeps every record).
fn progress_retention_problem(
    policy: &str,
    retention_ms: &str,
    retention_bytes: &str,
) -> Option<String> {
    let compact_only = !policy.is_empty() && policy.split(',').all(|p| p.trim() == "compact");
    let forever = retention_ms == "-1" && retention_bytes == "-1";
    if compact_only || forever {
        return None;
    }
    let mut problem = format!("cleanup.policy={policy}");
    if retention_ms != "-1" {
        problem.push_str(&format!(", retention.ms={retention_ms}"));
    }
    if retention_bytes != "-1" {
        problem.push_str(&format!(", retention.bytes={retention_bytes}"));
    }
    Some(problem)
}

/// Creates `missing` (the data topic `topic` of `sink` with the broker's
/// defaults, the progress topic with one compacted partition).
async fn create_topics(
    connection_name: &str,
    connection: &Connection,
    sink: &str,
    topic: &str,
    missing: &[String],
) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    let admin: AdminClient<DefaultClientContext> = client_config(connection_name, connection)?
        .create()
        .map_err(|e| kafka_error("create a Kafka admin client".into(), e))?;
    let topics: Vec<NewTopic<'_>> = missing
        .iter()
        .map(|t| {
            if t == PROGRESS_TOPIC {
                NewTopic::new(t, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact")
            } else {
                NewTopic::new(t, -1, TopicReplication::Fixed(-1))
            }
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(OPERATION_TIMEOUT));
    let results = admin.create_topics(&topics, &options).await.map_err(|e| {
        kafka_error(
            format!("create Kafka topic \"{topic}\" of sink \"{sink}\""),
            e,
        )
    })?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => {
                return Err(PipelineError::Refused {
                    sqlstate: "58000",
                    primary: format!(
                        "Kafka topic \"{t}\" of sink \"{sink}\" does not exist and could not be created ({code}); create it, or let connection \"{connection_name}\"'s user create topics"
                    ),
                    detail: None,
                    hint: None,
                });
            }
        }
    }
    Ok(())
}

/// Forgets sink `name`'s position: a tombstone in the progress topic,
/// written by a producer with the sink's `transactional.id` (which fences
/// a task of the sink still running), so a sink created again under the
/// name loads the interface anew. `DROP SINK` ignores its errors (a sink
/// whose cluster is gone can be dropped); `CREATE SINK` writes it again
/// ([`ensure_topics`]) and fails with them.
pub(crate) async fn forget(
    connection_name: &str,
    connection: &Connection,
    name: &str,
) -> Result<()> {
    let producer = Arc::new(producer(connection_name, connection, name)?);
    let name = name.to_string();
    blocking("forget the sink's Kafka position", move || {
        producer
            .init_transactions(OPERATION_TIMEOUT)
            .map_err(|e| kafka_error("start the Kafka producer".into(), e))?;
        transact(&producer, OPERATION_TIMEOUT, |p| {
            send(
                p,
                BaseRecord::<[u8], [u8]>::to(PROGRESS_TOPIC)
                    .partition(0)
                    .key(name.as_bytes()),
            )
        })
    })
    .await
}

/// The sink's transactional producer.
fn producer(connection_name: &str, connection: &Connection, sink: &str) -> Result<Producer_> {
    let mut config = client_config(connection_name, connection)?;
    config
        .set("transactional.id", format!("evolve-sink-{sink}"))
        .set("enable.idempotence", "true")
        .set(
            "transaction.timeout.ms",
            TRANSACTION_TIMEOUT.as_millis().to_string(),
        )
        .set("message.timeout.ms", "300000")
        .set("message.max.bytes", MAX_RECORD_BYTES.to_string())
        .set("linger.ms", "5")
        // evolve creates the topics it writes: a topic deleted under a
        // running sink must not come back empty from a metadata request
        // on a broker that creates topics on first use.
        .set("allow.auto.create.topics", "false");
    config
        .create_with_context(Deliveries::default())
        .map_err(|e| kafka_error(format!("create the Kafka producer of sink \"{sink}\""), e))
}

/// How often [`commit`] looks whether the transaction's records are all
/// acknowledged.
const FLUSH_POLL: Duration = Duration::from_millis(1);

/// Commits the open transaction within `timeout`. Its records are waited
/// for first, looking every [`FLUSH_POLL`]: `commit_transaction` starts
/// with rdkafka's `flush`, which waits in steps of 100 ms (its poll runs
/// to its deadline), which would make every transaction, however small,
/// last 100 ms at least; with the records acknowledged it has nothing to
/// wait for.
fn commit(producer: &Producer_, timeout: Duration) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    // A flush that does not wait: it sends what lingers now rather than
    // after `linger.ms`. It reports a timeout while records are in flight.
    let _ = producer.flush(Duration::ZERO);
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(FLUSH_POLL);
    }
    producer.commit_transaction(deadline.saturating_duration_since(Instant::now()))
}

/// `f`'s records in one transaction, committed within `timeout`; aborted
/// (best effort) when anything fails.
fn transact(
    producer: &Producer_,
    timeout: Duration,
    f: impl FnOnce(&Producer_) -> Result<()>,
) -> Result<()> {
    producer
        .begin_transaction()
        .map_err(|e| kafka_error("begin a Kafka transaction".into(), e))?;
    let done = f(producer).and_then(|()| {
        commit(producer, timeout).map_err(|e| kafka_error("commit the Kafka transaction".into(), e))
    });
    if done.is_err() {
        let _ = producer.abort_transaction(OPERATION_TIMEOUT);
    }
    done
}

/// Queues one record, waiting while librdkafka's queue is full.
fn send(producer: &Producer_, mut record: BaseRecord<'_, [u8], [u8]>) -> Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, r)) => {
                if let KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge) = e {
                    let bytes = r.key.map_or(0, <[u8]>::len) + r.payload.map_or(0, <[u8]>::len);
                    producer.context().refused(r.key, bytes);
                }
                return Err(kafka_error("queue a Kafka record".into(), e));
            }
        }
    }
}

/// How a sink's records are encoded: what its `FORMAT` and `ENVELOPE`
/// say. A record's bytes are borrowed from the change where they are the
/// document's JSON as it is (`FORMAT JSON`), so a write copies nothing
/// before librdkafka does.
#[derive(Clone, Copy)]
struct Encoding {
    envelope: KafkaEnvelope,
    /// `FORMAT AVRO`: the key and value schemas' ids.
    avro: Option<(u32, u32)>,
    /// The partitions the keys are spread over (see [`partition`]); known
    /// once [`Sink::position`] has read the sink's progress.
    partitions: i32,
}

impl Encoding {
    /// A record's key: the key document's JSON, or under `FORMAT AVRO` the
    /// `Key` record holding it.
    fn key<'a>(&self, key: &'a [u8]) -> Cow<'a, [u8]> {
        match self.avro {
            None => Cow::Borrowed(key),
            Some((key_id, _)) => Cow::Owned(avro_value(key_id, &[AvroField::String(key)])),
        }
    }

    /// A record's value for a change from `before` to `after` (documents'
    /// JSON), `op` as Debezium names it; `None` for an upsert's tombstone.
    fn value<'a>(
        &self,
        before: Option<&[u8]>,
        after: Option<&'a [u8]>,
        op: &str,
    ) -> Option<Cow<'a, [u8]>> {
        match (self.envelope, self.avro) {
            (KafkaEnvelope::Upsert, None) => after.map(Cow::Borrowed),
            (KafkaEnvelope::Upsert, Some((_, id))) => {
                after.map(|doc| Cow::Owned(avro_value(id, &[AvroField::String(doc)])))
            }
            (KafkaEnvelope::Debezium, None) => Some(Cow::Owned(debezium(before, after, op))),
            (KafkaEnvelope::Debezium, Some((_, id))) => Some(Cow::Owned(avro_value(
                id,
                &[
                    AvroField::Optional(before),
                    AvroField::Optional(after),
                    AvroField::String(op.as_bytes()),
                ],
            ))),
        }
    }
}

/// A connected Kafka sink: its producer, fenced in and ready.
pub(crate) struct KafkaSink {
    name: String,
    connection_name: String,
    connection: Connection,
    target: KafkaTarget,
    producer: Arc<Producer_>,
    encoding: Encoding,
    /// The topic did not exist when the sink opened: it is created when
    /// the sink has no position, else the sink stops.
    topic_missing: bool,
    /// Whether the sink has committed a record into its topic.
    written: bool,
}

impl KafkaSink {
    /// Checks the cluster, creates missing topics, and starts the
    /// transactional producer (fencing an earlier one of this sink).
    pub(crate) async fn open(
        sink: &SinkInfo,
        connection: &Connection,
        registry: Option<&Connection>,
    ) -> Result<KafkaSink> {
        let Some(target) = sink.kafka.clone() else {
            return Err(PipelineError::Store {
                context: format!("read sink \"{}\"", sink.name),
                message: "a Kafka sink without a topic: the state store is damaged".into(),
            });
        };
        // The progress topic is created here; the data topic when the
        // sink's progress says it has never been written (`position`).
        let missing =
            missing_topics(&sink.connection, connection, vec![target.topic.clone()]).await?;
        let topic_missing = missing.contains(&target.topic);
        let progress_missing: Vec<String> = missing
            .into_iter()
            .filter(|t| t == PROGRESS_TOPIC)
            .collect();
        create_topics(
            &sink.connection,
            connection,
            &sink.name,
            &target.topic,
            &progress_missing,
        )
        .await?;
        check_progress_topic(&sink.connection, connection, &sink.name).await?;
        let avro = match (&target.registry, registry) {
            (Some(name), Some(registry)) => {
                Some(register_avro_schemas(name, registry, &sink.interface, &target).await?)
            }
            _ => None,
        };
        let producer = Arc::new(producer(&sink.connection, connection, &sink.name)?);
        let p = producer.clone();
        let name = sink.name.clone();
        blocking("start the Kafka producer", move || {
            // Connected first: librdkafka asks for the transaction
            // coordinator through a broker that is up, and a producer that
            // has none yet looks again only 500 ms later.
            p.client()
                .fetch_metadata(Some(PROGRESS_TOPIC), METADATA_TIMEOUT)
                .map_err(|e| {
                    kafka_error(format!("connect the Kafka producer of sink \"{name}\""), e)
                })?;
            p.init_transactions(OPERATION_TIMEOUT).map_err(|e| {
                kafka_error(
                    format!("start the transactional Kafka producer of sink \"{name}\""),
                    e,
                )
            })
        })
        .await?;
        Ok(KafkaSink {
            name: sink.name.clone(),
            connection_name: sink.connection.clone(),
            connection: connection.clone(),
            encoding: Encoding {
                envelope: target.envelope,
                avro,
                partitions: 0,
            },
            target,
            producer,
            topic_missing,
            written: false,
        })
    }

    /// The number of partitions of the sink's topic (0 when it does not
    /// exist), and whether every one of them is empty from its start
    /// (its end offset 0: nothing was ever written into it).
    async fn topic_partitions(&self) -> Result<(i32, bool)> {
        let config = client_config(&self.connection_name, &self.connection)?;
        let (name, topic) = (self.name.clone(), self.target.topic.clone());
        blocking("read the Kafka sink's topic", move || {
            let fail = |e: KafkaError| {
                kafka_error(
                    format!("read the partitions of topic \"{topic}\" of sink \"{name}\""),
                    e,
                )
            };
            let consumer: BaseConsumer = config.create().map_err(fail)?;
            let metadata = consumer
                .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
                .map_err(fail)?;
            let partitions = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .map_or(0, |t| t.partitions().len() as i32);
            let mut never_written = true;
            for p in 0..partitions {
                let (_, high) = consumer
                    .fetch_watermarks(&topic, p, METADATA_TIMEOUT)
                    .map_err(fail)?;
                never_written &= high == 0;
            }
            Ok((partitions, never_written))
        })
        .await
    }

    /// The sink stops at `problem` with its topic: one line, with the way
    /// out.
    fn topic_lost(&self, problem: String) -> PipelineError {
        PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "Kafka topic \"{}\" of sink \"{}\" {problem}; the sink waits rather than write only later changes into it: DROP SINK and CREATE SINK to write the interface anew",
                self.target.topic, self.name
            ),
            detail: None,
            hint: None,
        }
    }

    /// Checks the sink's topic against its progress (see the module's
    /// documentation), creates it when the sink has never written, and
    /// sets the partitions the keys are spread over.
    async fn check_topic(&mut self, progress: Option<Progress>) -> Result<()> {
        let (mut partitions, never_written) = self.topic_partitions().await?;
        if let Some(p) = &progress {
            if partitions == 0 {
                return Err(self.topic_lost(format!(
                    "does not exist, though the sink wrote the interface into it up to {}",
                    p.position
                )));
            }
            if let Some(pinned) = p.partitions
                && partitions < pinned
            {
                return Err(self.topic_lost(format!(
                    "has {partitions} partition(s), fewer than the {pinned} the sink spread its keys over: it was deleted and created again"
                )));
            }
            if p.written && never_written {
                return Err(self.topic_lost(format!(
                    "is empty from its start, though the sink wrote the interface into it up to {}: it was deleted and created again",
                    p.position
                )));
            }
        } else if partitions == 0 || self.topic_missing {
            create_topics(
                &self.connection_name,
                &self.connection,
                &self.name,
                &self.target.topic,
                std::slice::from_ref(&self.target.topic),
            )
            .await?;
            let deadline = Instant::now() + OPERATION_TIMEOUT;
            while partitions == 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                partitions = self.topic_partitions().await?.0;
            }
            if partitions == 0 {
                return Err(kafka_error(
                    format!(
                        "create Kafka topic \"{}\" of sink \"{}\"",
                        self.target.topic, self.name
                    ),
                    format!(
                        "it has no partitions {}s after it was created; retried",
                        OPERATION_TIMEOUT.as_secs()
                    ),
                ));
            }
        }
        let pinned = match &progress {
            Some(Progress {
                partitions: Some(pinned),
                ..
            }) => *pinned,
            // Partitions may have been added since the earlier evolve
            // wrote: its records tell over how many it spread the keys.
            Some(Progress {
                partitions: None, ..
            }) => self.legacy_partitions(partitions).await?,
            None => partitions,
        };
        if partitions > pinned {
            tracing::warn!(
                sink = self.name,
                topic = self.target.topic,
                "Kafka topic \"{}\" has {partitions} partitions; sink \"{}\" keeps each key on its partition among the first {pinned}, which it loaded into (DROP SINK and CREATE SINK into a new topic to spread the keys over more)",
                self.target.topic,
                self.name
            );
        }
        self.encoding.partitions = pinned;
        self.written = progress.is_some_and(|p| p.written);
        Ok(())
    }
}

/// How many records at the end of each partition tell over how many
/// partitions an earlier evolve spread the keys ([`KafkaSink::legacy_partitions`]).
const LEGACY_TAIL: i64 = 1_000;

impl KafkaSink {
    /// The partition count an earlier evolve, whose progress records do
    /// not keep it, spread the topic's keys over (`now`: the topic's
    /// partitions). Its producer placed each key by murmur2 over the
    /// topic's count when it wrote, so partitions added since (before the
    /// first restart on this evolve) would move keys if the keys were
    /// spread over them: the count is the smallest that places the last
    /// [`LEGACY_TAIL`] records of every partition where they are. Records
    /// that no count places (other writers, or partitions added while the
    /// earlier evolve wrote) make the sink wait with the way out.
    async fn legacy_partitions(&self, now: i32) -> Result<i32> {
        let mut config = client_config(&self.connection_name, &self.connection)?;
        config
            .set("group.id", format!("evolve-sink-{}", self.name))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "10");
        let (name, topic) = (self.name.clone(), self.target.topic.clone());
        let placed: Vec<(i32, u32)> = blocking("read the Kafka sink's topic", move || {
            let fail = |e: KafkaError| {
                kafka_error(
                    format!("read the records of topic \"{topic}\" of sink \"{name}\""),
                    e,
                )
            };
            let consumer: BaseConsumer = config.create().map_err(fail)?;
            let mut list = rdkafka::TopicPartitionList::new();
            let mut open = std::collections::HashSet::new();
            for p in 0..now {
                let (low, high) = consumer
                    .fetch_watermarks(&topic, p, METADATA_TIMEOUT)
                    .map_err(fail)?;
                if high > low {
                    list.add_partition_offset(
                        &topic,
                        p,
                        rdkafka::Offset::Offset(low.max(high - LEGACY_TAIL)),
                    )
                    .map_err(fail)?;
                    open.insert(p);
                }
            }
            let mut placed = Vec::new();
            if open.is_empty() {
                return Ok(placed);
            }
            consumer.assign(&list).map_err(fail)?;
            let deadline = Instant::now() + PROGRESS_READ_TIMEOUT;
            while !open.is_empty() {
                if Instant::now() > deadline {
                    return Err(kafka_error(
                        format!("read the records of topic \"{topic}\" of sink \"{name}\""),
                        format!(
                            "their end was not reached in {}s; retried",
                            PROGRESS_READ_TIMEOUT.as_secs()
                        ),
                    ));
                }
                match consumer.poll(Duration::from_millis(200)) {
                    None => {}
                    Some(Err(KafkaError::PartitionEOF(p))) => {
                        open.remove(&p);
                    }
                    Some(Err(e)) => return Err(fail(e)),
                    Some(Ok(m)) => {
                        if let Some(key) = m.key() {
                            placed.push((m.partition(), murmur2(key) & 0x7fff_ffff));
                        }
                    }
                }
            }
            Ok(placed)
        })
        .await?;
        spread_count(&placed, now).ok_or_else(|| PipelineError::Refused {
                sqlstate: "55000",
                primary: format!(
                    "Kafka topic \"{}\" of sink \"{}\" has {now} partitions, and the sink's progress record, written by an earlier evolve, does not say over how many it spread the keys (its records fit no count: partitions were added while it wrote, or others wrote into the topic); the sink waits rather than move keys to other partitions: DROP SINK and CREATE SINK to write the interface anew",
                    self.target.topic, self.name
                ),
                detail: None,
                hint: None,
            })
    }
}

/// The smallest partition count up to `now` that places every record of
/// `placed` (partition, positive murmur2 hash of its key) where it is;
/// `now` when there is no record.
fn spread_count(placed: &[(i32, u32)], now: i32) -> Option<i32> {
    let Some(least) = placed.iter().map(|(p, _)| p + 1).max() else {
        return Some(now);
    };
    (least..=now).find(|k| placed.iter().all(|(p, hash)| hash % *k as u32 == *p as u32))
}

/// Java's `Utils.murmur2` (what Kafka's default partitioner hashes a key
/// with, and librdkafka's `murmur2` partitioners).
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, b) in rest.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of a record with key `key` among `partitions`, as Java's
/// default partitioner picks it: the positive part of the key's murmur2
/// hash, modulo the count.
fn partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

/// One field of an Avro record as `FORMAT AVRO` writes it.
enum AvroField<'a> {
    /// A `string`.
    String(&'a [u8]),
    /// A `["null", string]` union.
    Optional(Option<&'a [u8]>),
}

/// Avro's `long`: zig-zag, then base-128 varint, low group first.
fn avro_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A record of `fields` in Avro's binary encoding, behind Confluent's wire
/// header (magic byte 0, the schema id big-endian).
fn avro_value(schema_id: u32, fields: &[AvroField<'_>]) -> Vec<u8> {
    let size: usize = fields
        .iter()
        .map(|f| match f {
            AvroField::String(s) | AvroField::Optional(Some(s)) => s.len() + 11,
            AvroField::Optional(None) => 1,
        })
        .sum();
    let mut out = Vec::with_capacity(5 + size);
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    for f in fields {
        let text = match f {
            AvroField::String(s) => Some(*s),
            AvroField::Optional(None) => {
                avro_long(&mut out, 0);
                None
            }
            AvroField::Optional(Some(s)) => {
                avro_long(&mut out, 1);
                Some(*s)
            }
        };
        if let Some(text) = text {
            avro_long(&mut out, text.len() as i64);
            out.extend_from_slice(text);
        }
    }
    out
}

/// `FORMAT AVRO`'s key and value schemas for `interface` with `envelope`:
/// records whose fields are the documents as strings
/// (`connect.name` = `io.debezium.data.Json`, as Debezium marks JSON text).
fn avro_schemas(interface: &str, envelope: KafkaEnvelope) -> (String, String) {
    let namespace: String = std::iter::once("evolve".to_string())
        .chain(std::iter::once(
            interface
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect::<String>(),
        ))
        .map(|part| {
            if part.starts_with(|c: char| c.is_ascii_digit()) {
                format!("_{part}")
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(".");
    let json = serde_json::json!({"type": "string", "connect.name": "io.debezium.data.Json"});
    let key = serde_json::json!({
        "type": "record", "name": "Key", "namespace": namespace,
        "fields": [{"name": "key", "type": json}],
    });
    let value = match envelope {
        KafkaEnvelope::Upsert => serde_json::json!({
            "type": "record", "name": "Value", "namespace": namespace,
            "fields": [{"name": "data", "type": json}],
        }),
        KafkaEnvelope::Debezium => serde_json::json!({
            "type": "record", "name": "Envelope", "namespace": namespace,
            "fields": [
                {"name": "before", "type": ["null", json], "default": null},
                {"name": "after", "type": ["null", json], "default": null},
                {"name": "op", "type": "string"},
            ],
        }),
    };
    (key.to_string(), value.to_string())
}

/// Registers `FORMAT AVRO`'s key and value schemas of `target` under its
/// topic's subjects (`<topic>-key`, `<topic>-value`) in the registry of
/// connection `name`; their ids.
pub(crate) async fn register_avro_schemas(
    name: &str,
    registry: &Connection,
    interface: &str,
    target: &KafkaTarget,
) -> Result<(u32, u32)> {
    debug_assert_eq!(target.format, KafkaFormat::Avro);
    let registry = Registry::new(name, registry)?;
    let (key, value) = avro_schemas(interface, target.envelope);
    let key_id = registry
        .register(&format!("{}-key", target.topic), &key)
        .await?;
    let value_id = registry
        .register(&format!("{}-value", target.topic), &value)
        .await?;
    Ok((key_id, value_id))
}

/// `{"before":..,"after":..,"op":".."}` from the documents' JSON bytes.
fn debezium(before: Option<&[u8]>, after: Option<&[u8]>, op: &str) -> Vec<u8> {
    let mut v =
        Vec::with_capacity(40 + before.map_or(4, <[u8]>::len) + after.map_or(4, <[u8]>::len));
    v.extend_from_slice(b"{\"before\":");
    v.extend_from_slice(before.unwrap_or(b"null"));
    v.extend_from_slice(b",\"after\":");
    v.extend_from_slice(after.unwrap_or(b"null"));
    v.extend_from_slice(b",\"op\":\"");
    v.extend_from_slice(op.as_bytes());
    v.extend_from_slice(b"\"}");
    v
}

/// What a progress record says of its sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Progress {
    /// The upstream position the topic holds the interface up to.
    position: Position,
    /// The partitions the keys are spread over; `None` in a record of an
    /// evolve that did not write it (the topic's count then).
    partitions: Option<i32>,
    /// Whether the sink has written a record into its topic (`false` in a
    /// record of an evolve that did not write it).
    written: bool,
}

/// The progress record's value for position `at`.
fn progress_value(at: Position, partitions: i32, written: bool) -> Vec<u8> {
    format!("{{\"position\":\"{at}\",\"partitions\":{partitions},\"written\":{written}}}")
        .into_bytes()
}

/// What a progress record's value says.
fn parse_progress(value: &[u8]) -> Option<Progress> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    Some(Progress {
        position: v.get("position")?.as_str()?.parse().ok()?,
        partitions: match v.get("partitions") {
            None => None,
            Some(n) => Some(
                n.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| *n > 0)?,
            ),
        },
        written: v.get("written").and_then(serde_json::Value::as_bool) == Some(true),
    })
}

/// Queues one record to `topic`, with its position header.
fn send_record(
    producer: &Producer_,
    topic: &str,
    partitions: i32,
    key: &[u8],
    value: Option<&[u8]>,
    pos: &str,
) -> Result<()> {
    let headers = OwnedHeaders::new().insert(Header {
        key: POSITION_HEADER,
        value: Some(pos.as_bytes()),
    });
    let mut record = BaseRecord::<[u8], [u8]>::to(topic)
        .partition(partition(key, partitions))
        .key(key)
        .headers(headers);
    if let Some(value) = value {
        record = record.payload(value);
    }
    send(producer, record)
}

/// Queues a record for each of `entries` to `topic`.
fn send_changes(
    producer: &Producer_,
    topic: &str,
    encoding: Encoding,
    entries: &[FeedEntry],
) -> Result<()> {
    // The position header's text, made once per upstream transaction.
    let (mut shown, mut shown_for) = (String::new(), None);
    for e in entries {
        if shown_for != Some(e.pos) {
            shown = e.pos.to_string();
            shown_for = Some(e.pos);
        }
        let op = match (&e.old, &e.new) {
            (None, _) => "c",
            (_, None) => "d",
            _ => "u",
        };
        let value = encoding.value(e.old.as_deref(), e.new.as_deref(), op);
        send_record(
            producer,
            topic,
            encoding.partitions,
            &encoding.key(&e.key),
            value.as_deref(),
            &shown,
        )?;
    }
    Ok(())
}

/// Queues a record for each document of a load's chunk, all at `at`.
fn send_documents(
    producer: &Producer_,
    topic: &str,
    encoding: Encoding,
    chunk: &[(Vec<u8>, Vec<u8>)],
    at: &str,
) -> Result<()> {
    for (key, doc) in chunk {
        let value = encoding.value(None, Some(doc), "r");
        send_record(
            producer,
            topic,
            encoding.partitions,
            &encoding.key(key),
            value.as_deref(),
            at,
        )?;
    }
    Ok(())
}

/// Queues sink `name`'s progress record for `at` (see [`Progress`]).
fn send_progress(
    producer: &Producer_,
    name: &str,
    at: Position,
    partitions: i32,
    written: bool,
) -> Result<()> {
    let value = progress_value(at, partitions, written);
    send(
        producer,
        BaseRecord::<[u8], [u8]>::to(PROGRESS_TOPIC)
            .partition(0)
            .key(name.as_bytes())
            .payload(&value),
    )
}

impl Sink for KafkaSink {
    /// A Kafka transaction costs about 20 to 40 ms whatever it holds (the
    /// coordinator still writing the last one's markers makes librdkafka
    /// wait 20 ms before it registers the next one's partitions): a sink
    /// catching up writes 100,000 changes in each.
    const CATCH_UP_BATCH: usize = 100_000;

    /// The value of the sink's last record in the progress topic, read to
    /// its end with `read_committed`, once the topic is checked against it.
    async fn position(&mut self) -> Result<Option<Position>> {
        let progress = self.progress().await?;
        self.check_topic(progress).await?;
        Ok(progress.map(|p| p.position))
    }

    /// One transaction: every document, then the position.
    async fn load(&mut self, docs: &mut Documents) -> Result<u64> {
        self.load_all(docs).await
    }

    async fn write(&mut self, entries: Vec<FeedEntry>, at: Position) -> Result<()> {
        self.write_changes(entries, at).await
    }
}

impl KafkaSink {
    /// The sink's last record in the progress topic, read to its end with
    /// `read_committed`.
    async fn progress(&mut self) -> Result<Option<Progress>> {
        let mut config = client_config(&self.connection_name, &self.connection)?;
        config
            .set("group.id", format!("evolve-sink-{}", self.name))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            // The end is known when a fetch comes back empty there; the
            // broker holds an empty fetch this long (500 ms by default).
            .set("fetch.wait.max.ms", "10");
        let name = self.name.clone();
        blocking("read the Kafka sink's position", move || {
            let fail = |e: KafkaError| {
                kafka_error(
                    format!("read the position of sink \"{name}\" from topic \"{PROGRESS_TOPIC}\""),
                    e,
                )
            };
            let consumer: BaseConsumer = config.create().map_err(fail)?;
            // Connected before the assignment: a consumer that starts
            // fetching with no broker up yet finds its leader later.
            consumer
                .fetch_metadata(Some(PROGRESS_TOPIC), METADATA_TIMEOUT)
                .map_err(fail)?;
            let mut assignment = rdkafka::TopicPartitionList::new();
            assignment
                .add_partition_offset(PROGRESS_TOPIC, 0, rdkafka::Offset::Beginning)
                .map_err(fail)?;
            consumer.assign(&assignment).map_err(fail)?;
            let deadline = Instant::now() + PROGRESS_READ_TIMEOUT;
            // The last record for this sink decides: a position, none (a
            // tombstone: the sink was dropped), or, at an offset, a value
            // that is not a position. That last is refused rather than
            // read as none, which would write the whole interface again.
            let mut position: std::result::Result<Option<Progress>, i64> = Ok(None);
            loop {
                if Instant::now() > deadline {
                    return Err(kafka_error(
                        format!("read the position of sink \"{name}\" from topic \"{PROGRESS_TOPIC}\""),
                        format!(
                            "its end was not reached in {}s (an open transaction of another sink holds read_committed readers back); retried",
                            PROGRESS_READ_TIMEOUT.as_secs()
                        ),
                    ));
                }
                match consumer.poll(Duration::from_millis(200)) {
                    None => {}
                    Some(Err(KafkaError::PartitionEOF(_))) => {
                        return position.map_err(|offset| {
                            kafka_error(
                                format!("read the position of sink \"{name}\" from topic \"{PROGRESS_TOPIC}\""),
                                format!(
                                    "its last record there (partition 0, offset {offset}) holds no position evolve wrote, so where the topic stands is unknown; \
                                     the sink waits rather than write the interface again: DROP SINK and CREATE SINK to write it anew"
                                ),
                            )
                        });
                    }
                    Some(Err(e)) => return Err(fail(e)),
                    Some(Ok(m)) if m.key() == Some(name.as_bytes()) => {
                        position = match m.payload() {
                            None => Ok(None),
                            Some(value) => parse_progress(value).map(Some).ok_or(m.offset()),
                        };
                    }
                    Some(Ok(_)) => {}
                }
            }
        })
        .await
    }

    /// `e`, or when a record of the failed transaction was too large for
    /// the topic, that record and the way out.
    fn explain(&self, e: PipelineError) -> PipelineError {
        let Some(record) = self.producer.context().take() else {
            return e;
        };
        let topic = &self.target.topic;
        PipelineError::Refused {
            sqlstate: "54000",
            primary: format!(
                "sink \"{}\" cannot write its record for key {} ({} bytes) into Kafka topic \"{topic}\", which takes smaller records; it retries: raise the topic's max.message.bytes above {} (kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config max.message.bytes=...), or DROP SINK",
                self.name,
                record.key,
                record.bytes,
                record.bytes + 100,
            ),
            detail: None,
            hint: None,
        }
    }

    /// [`Sink::load`].
    async fn load_all(&mut self, docs: &mut Documents) -> Result<u64> {
        self.producer.context().take();
        let loaded = self.load_documents(docs).await;
        loaded.map_err(|e| self.explain(e))
    }

    /// [`KafkaSink::load_all`].
    async fn load_documents(&mut self, docs: &mut Documents) -> Result<u64> {
        let at = docs.at();
        let at_text = at.to_string();
        let p = self.producer.clone();
        blocking("begin the Kafka sink's load", move || {
            p.begin_transaction()
                .map_err(|e| kafka_error("begin a Kafka transaction".into(), e))
        })
        .await?;
        let mut written = 0u64;
        let loaded: Result<()> = async {
            while let Some(chunk) = docs.next().await? {
                written += chunk.len() as u64;
                let (p, topic, encoding, at) = (
                    self.producer.clone(),
                    self.target.topic.clone(),
                    self.encoding,
                    at_text.clone(),
                );
                blocking("write the Kafka sink's load", move || {
                    send_documents(&p, &topic, encoding, &chunk, &at)
                })
                .await?;
            }
            let (p, name) = (self.producer.clone(), self.name.clone());
            let (partitions, written) = (self.encoding.partitions, self.written || written > 0);
            blocking("commit the Kafka sink's load", move || {
                send_progress(&p, &name, at, partitions, written)?;
                commit(&p, TRANSACTION_TIMEOUT).map_err(|e| {
                    kafka_error(format!("commit the initial load of sink \"{name}\""), e)
                })
            })
            .await
        }
        .await;
        if let Err(e) = loaded {
            let p = self.producer.clone();
            let _ = blocking("abort the Kafka sink's load", move || {
                let _ = p.abort_transaction(OPERATION_TIMEOUT);
                Ok(())
            })
            .await;
            return Err(e);
        }
        self.written |= written > 0;
        Ok(written)
    }

    /// [`Sink::write`].
    async fn write_changes(&mut self, entries: Vec<FeedEntry>, at: Position) -> Result<()> {
        self.producer.context().take();
        let (p, topic, name, encoding) = (
            self.producer.clone(),
            self.target.topic.clone(),
            self.name.clone(),
            self.encoding,
        );
        let written = self.written || !entries.is_empty();
        blocking("write to the Kafka sink", move || {
            transact(&p, OPERATION_TIMEOUT, |p| {
                send_changes(p, &topic, encoding, &entries)?;
                send_progress(p, &name, at, encoding.partitions, written)
            })
            .map_err(|e| match e {
                PipelineError::Database { context, message } => PipelineError::Database {
                    context: format!("{context} of sink \"{name}\" (topic \"{topic}\")"),
                    message,
                },
                other => other,
            })
        })
        .await
        .map_err(|e| self.explain(e))?;
        self.written = written;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key a "record too large" error names is the key document,
    /// whatever its length: under `FORMAT AVRO` no byte of the wire
    /// header or of the string's length shows (a 20-byte key's length is
    /// 40 zig-zagged, `(`).
    #[test]
    fn a_refused_records_key_is_its_document_without_the_avro_framing() {
        for doc in [
            r#"{"id":"0123456789"}"#.to_string(),
            r#"{"id":7}"#.to_string(),
            format!(r#"{{"id":"{}"}}"#, "x".repeat(200)),
        ] {
            for (id, format) in [(1u32, "avro"), (0x4142_4344, "avro"), (0, "json")] {
                let key = if format == "avro" {
                    avro_value(id, &[AvroField::String(doc.as_bytes())])
                } else {
                    doc.as_bytes().to_vec()
                };
                let deliveries = Deliveries::default();
                deliveries.refused(Some(&key), 10);
                let shown = deliveries.take().unwrap().key;
                let want: String = doc.chars().take(100).collect();
                assert_eq!(shown, want, "{format} key with schema id {id}");
            }
        }
    }

    /// An earlier evolve's records tell the count it spread the keys
    /// over: the smallest that places each where it is.
    #[test]
    fn the_partition_count_of_an_earlier_evolves_records() {
        let keys: Vec<Vec<u8>> = (0..40)
            .map(|i| format!("{{\"id\":{i}}}").into_bytes())
            .collect();
        let placed = |count: i32| -> Vec<(i32, u32)> {
            keys.iter()
                .map(|k| (partition(k, count), murmur2(k) & 0x7fff_ffff))
                .collect()
        };
        assert_eq!(spread_count(&[], 6), Some(6));
        assert_eq!(spread_count(&placed(1), 3), Some(1));
        assert_eq!(spread_count(&placed(3), 6), Some(3));
        assert_eq!(spread_count(&placed(6), 6), Some(6));
        // Keys over two counts (partitions added while it wrote), or a
        // record no count places: none.
        let mut mixed = placed(2);
        mixed.extend(placed(5).into_iter().filter(|(p, _)| *p >= 2));
        assert_eq!(spread_count(&mixed, 5), None);
    }

    #[test]
    fn avro_records_are_avros_binary_encoding_behind_the_wire_header() {
        let mut longs = Vec::new();
        for n in [0i64, -1, 1, 63, 64, -65, 300] {
            avro_long(&mut longs, n);
        }
        // The Avro specification's examples, then 300 = 0x258.
        assert_eq!(
            longs,
            [0x00, 0x01, 0x02, 0x7e, 0x80, 0x01, 0x81, 0x01, 0xd8, 0x04]
        );
        let v = avro_value(
            7,
            &[
                AvroField::Optional(None),
                AvroField::Optional(Some(b"{}")),
                AvroField::String(b"foo"),
            ],
        );
        assert_eq!(
            v,
            [
                0, 0, 0, 0, 7, 0x00, 0x02, 0x04, b'{', b'}', 0x06, b'f', b'o', b'o'
            ]
        );
        let (key, value) = avro_schemas("1 orders-json", KafkaEnvelope::Debezium);
        let key: serde_json::Value = serde_json::from_str(&key).unwrap();
        assert_eq!(key["namespace"], "evolve._1_orders_json");
        let value: serde_json::Value = serde_json::from_str(&value).unwrap();
        assert_eq!(
            value["fields"][1]["type"][1]["connect.name"],
            "io.debezium.data.Json"
        );
    }

    #[test]
    fn debezium_values_and_progress_round_trip() {
        assert_eq!(
            debezium(None, Some(br#"{"id":1}"#), "c"),
            br#"{"before":null,"after":{"id":1},"op":"c"}"#
        );
        assert_eq!(
            debezium(Some(br#"{"id":1}"#), None, "d"),
            br#"{"before":{"id":1},"after":null,"op":"d"}"#
        );
        let at = Position::from_u64(0x16B_3748);
        assert_eq!(
            progress_value(at, 3, true),
            br#"{"position":"0/16B3748","partitions":3,"written":true}"#
        );
        assert_eq!(
            parse_progress(&progress_value(at, 3, true)),
            Some(Progress {
                position: at,
                partitions: Some(3),
                written: true
            })
        );
        // What an evolve that did not record partitions wrote.
        assert_eq!(
            parse_progress(br#"{"position":"0/16B3748"}"#),
            Some(Progress {
                position: at,
                partitions: None,
                written: false
            })
        );
        assert_eq!(
            parse_progress(br#"{"position":"0/1","partitions":0}"#),
            None
        );
        assert_eq!(parse_progress(b"garbage"), None);
    }

    #[test]
    fn keys_are_partitioned_as_javas_default_partitioner_does() {
        // Kafka's own test vectors for `Utils.murmur2`.
        for (key, hash) in [
            (&b"21"[..], -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ] {
            assert_eq!(
                murmur2(key) as i32,
                hash,
                "{}",
                String::from_utf8_lossy(key)
            );
        }
        // Where librdkafka's murmur2 partitioner put these keys in a topic
        // of 3 partitions.
        for (id, p) in [(1, 0), (2, 1), (3, 0), (4, 2), (5, 2)] {
            assert_eq!(partition(format!("{{\"id\":{id}}}").as_bytes(), 3), p);
        }
        assert_eq!(partition(b"anything", 1), 0);
    }

    /// A progress topic keeps every sink's last record when it is
    /// compacted only, or keeps every record.
    #[test]
    fn a_progress_topic_that_deletes_records_is_named() {
        for (policy, ms, bytes) in [
            ("compact", "604800000", "-1"),
            ("compact", "1000", "1000"),
            ("delete", "-1", "-1"),
            ("compact,delete", "-1", "-1"),
        ] {
            assert_eq!(
                progress_retention_problem(policy, ms, bytes),
                None,
                "{policy}"
            );
        }
        for (policy, ms, bytes, problem) in [
            (
                "delete",
                "604800000",
                "-1",
                "cleanup.policy=delete, retention.ms=604800000",
            ),
            (
                "compact,delete",
                "-1",
                "1073741824",
                "cleanup.policy=compact,delete, retention.bytes=1073741824",
            ),
            (
                "",
                "",
                "",
                "cleanup.policy=, retention.ms=, retention.bytes=",
            ),
        ] {
            assert_eq!(
                progress_retention_problem(policy, ms, bytes).as_deref(),
                Some(problem)
            );
        }
    }

    #[test]
    fn client_config_maps_tls_and_sasl() {
        let mut options = crate::config::KafkaOptions::default().with_password("pw");
        options.sslmode = Some("verify-ca".into());
        options.sslrootcert = Some("/ca.pem".into());
        options.sasl_mechanism = Some("SCRAM-SHA-512".into());
        options.user = Some("u".into());
        let c = client_config("k", &Connection::kafka("kafka://a:1,b:2", options)).unwrap();
        assert_eq!(c.get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(c.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(c.get("ssl.endpoint.identification.algorithm"), Some("none"));
        assert_eq!(c.get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(c.get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        let plain = client_config("k", &Connection::new("kafka://a:1")).unwrap();
        assert_eq!(plain.get("security.protocol"), Some("plaintext"));
        let e = client_config("pg", &Connection::new("postgres://h/db")).unwrap_err();
        assert_eq!(
            e.primary(),
            "connection \"pg\" is not a kafka:// connection; a Kafka sink needs url = \"kafka://host:port\""
        );
    }
}
