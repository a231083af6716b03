//! The Kafka source: a topic of Avro records (Confluent's wire format: a
//! zero byte, the writer schema's registry id in four bytes, the Avro
//! binary datum), of JSON records under a JSON Schema (`FORMAT JSON`:
//! the same header, then JSON text; module [`json`]), or of Protobuf
//! messages (`FORMAT PROTOBUF`: the same header, Confluent's message
//! indexes, then the message; module [`protobuf`]), read into tables
//! whose columns are the fields (properties) of a reader schema pinned at
//! `CREATE TABLE`.
//!
//! # Positions and offsets
//!
//! A topic has no order across its partitions and no transactions a
//! consumer can see, so the source makes its own: each batch of records
//! the consumer has ready (at most [`BATCH`]) is one transaction, and
//! positions count them, two a transaction: the transaction after the one
//! that ended at `A` commits at `A + 1` and ends at `A + 2`. The topic's
//! coordinate of a position is the next offset of every partition after
//! that transaction: the source's resume state ([`ChangeStream::resume_state`],
//! JSON `{"0": 1200, "1": 980}`), stored by the engine in the same store
//! transaction as the position. A reopened stream assigns the partitions
//! at those offsets (a partition missing from them starts at its
//! beginning), so records are applied exactly once whatever the consumer
//! group says: no group offset is committed or trusted. `CREATE SOURCE`
//! stores the topic's high watermarks as the first state: the stream
//! starts at the end of the topic, and each table reads what came before
//! from its snapshot. Partitions added to the topic while the stream runs
//! are assigned within `PARTITION_CHECK` of their creation, from their
//! beginning, as a reopened stream would read them.
//!
//! A topic deleted and created again is not the topic the offsets are
//! of, and reading it from them would skip its first records. Offsets say
//! so only when the new topic ends before them, or lacks a partition
//! read; so the resume state also keeps a fingerprint of the last
//! record read in each partition (`"@last"`), and a reopened stream reads
//! that record again first (`verify_last`): another record there stops
//! the source ([`PipelineError::OffsetsLost`]). While the stream runs,
//! the partition check notices a topic gone (or with fewer partitions)
//! and fails the stream, which reopens once the topic is back, checked
//! so. A topic deleted, created again and written past the offsets
//! between two checks goes unnoticed: Kafka's topic ids would tell, and
//! rdkafka's metadata does not show them.
//!
//! # Snapshots
//!
//! A table's snapshot is the topic read from its beginning up to the
//! offsets of the source's last stored position `A` (read with it from the
//! store), so its position is `A + 1`: every transaction the stream
//! delivers after `A` starts at those offsets. A thread reads the topic
//! and hands the records over in chunks of 5,000, decoded as they come,
//! so the copy is stored while the topic is still read. With `ENVELOPE
//! UPSERT` only each key's last record is a row (a tombstone removes the
//! key): a first pass over the topic finds those records, keeping only
//! each key and its last offset, and a second hands them over, so memory
//! grows with the topic's keys, not its values. With `ENVELOPE NONE`
//! every record with a value is a row, in one pass.
//!
//! # `ENVELOPE DEBEZIUM`
//!
//! A topic Debezium writes with Confluent's Avro, JSON Schema or Protobuf
//! converter: each record's key is the row's key and its value a change
//! event (`before`, `after`, `op`, `source`, ...). The table's columns are
//! the fields of the reader schema's `after` record (the properties of
//! the object its `after` holds, the fields of its `after` message); `c`,
//! `r` and `u` make the key's row `after`, `d` and the tombstone after it
//! delete it. A snapshot keeps each key's last record, as `ENVELOPE
//! UPSERT` does. A truncate event (`op` `t`) cannot be applied one record
//! at a time: it stalls the table with the way out. The writer schema is checked against the whole reader schema
//! (the event's), so a change of the row's fields is a change of it.
//!
//! # Decoding, and what stalls a table
//!
//! Each table decodes every record with its own reader schema: the writer
//! schema is fetched by the id in the record's header (once per id) and
//! checked against the reader by evolve's compatibility engine
//! (`evolve_compat::avro::check`); a compatible record is read with Avro's
//! resolution rules (defaults, promotions, aliases, enum defaults,
//! unions). A `FORMAT JSON` table checks the writer's JSON Schema the
//! same way (`evolve_compat::json::check`: does the reader accept every
//! document the writer's schema allows?), then reads the properties it
//! has columns for. A `FORMAT PROTOBUF` table checks the writer's file
//! with Confluent's Protobuf rules (`evolve_compat::protobuf::check`,
//! keeping the differences in the messages its message uses),
//! finds the message the record's indexes name in it, which must be the
//! reader's message (`MESSAGE`'s, else the pinned file's first), and
//! decodes the bytes with the reader's descriptor: fields are matched by
//! number, and fields the reader does not declare are skipped. A record
//! that a table cannot read (no wire header, an id the registry does not
//! know, a writer schema the reader cannot read, a
//! corrupt payload, no key under `ENVELOPE UPSERT`, a key its pinned
//! registry key format cannot read) is
//! [`SourceEvent::Undecodable`] for that table: it stalls at that record,
//! with the partition, offset and reason, and counts the records after it
//! it could not read either; the other tables go on. A registry that
//! cannot be reached fails the stream (retried with backoff, the source's
//! status says why) rather than stalling anything.
//!
//! # Keys
//!
//! A keyed table (`ENVELOPE UPSERT`, `DEBEZIUM`) reads every record's key
//! one way, decided at `CREATE TABLE` and stored with the table
//! (`KafkaTableInfo::key_format`): `KEY FORMAT ... VALUE FORMAT ...`
//! when the statement names it, else registry keys in the format of the
//! `<topic>-key` subject's latest schema when the registry has that
//! subject, else text. A text key is its UTF-8 text, or bytea's hex form
//! (`"\\x00ff"`) when it is not UTF-8 or holds a NUL (PostgreSQL's text
//! cannot); `KEY FORMAT BYTES` keys are always the hex form. Neither is
//! ever parsed as Confluent's wire format, so raw keys that happen to
//! start with a zero byte and a registered schema's id are read as the
//! bytes they are. A registry key (`AVRO`, `JSON`, `PROTOBUF`) is read
//! with the schema its header names, fetched by id as values' are; a key
//! without the header, naming an id the registry lacks or a schema of
//! another format, or that the schema cannot decode is undecodable, and
//! stalls the table as a value would. An `ENVELOPE NONE` table reads no
//! keys and stores no key format. A table pinned before key formats
//! were stored none either, and reads each key as it did then: with the
//! schema its header names when it looks like the wire format and the
//! registry has the id, else as text (UTF-8, else the hex form).
//!
//! # A topic of several record types
//!
//! A table created with `SUBJECT 'name'` pins that subject's latest
//! schema (Confluent's RecordNameStrategy or TopicRecordNameStrategy)
//! and stores its record type (`KafkaTableInfo::record_type`): a record
//! whose writer schema is of another type (an Avro record's full name, a
//! JSON Schema's title, the Protobuf message its indexes name) is another
//! table's and skipped, before any compatibility check, and counted: the
//! stream hands the counts of each transaction to the engine with its
//! commit (`ChangeStream::take_skipped`), the snapshot with its copy
//! (`TableSnapshot::skipped`; a keyed snapshot's first pass counts the
//! values it leaves out), and `evolve status` and `/metrics` show each
//! table's total since the pipeline started (`skipped_records`,
//! `evolve_pipeline_skipped_records_total`). Keyed (`ENVELOPE
//! UPSERT`, `DEBEZIUM`), a key's row is its last record of the table's
//! type, and a tombstone deletes the key (from every type's table): the
//! snapshot's first pass tells the types apart by the values' writer
//! schemas, fetched by id as it meets them.
//!
//! # Schema references
//!
//! A schema may take named types from other subjects (Confluent's
//! `references`: a type's full name, a subject, a version), as the
//! registry's answers for a subject version and for an id list them. The
//! source fetches each referenced version, and the versions those
//! reference, through every level (each once; a cycle, a version the
//! registry does not have or more than `MAX_REFERENCE_DEPTH`
//! (`sink/registry.rs`) levels refused with a line saying which), and
//! parses the schema with them. `CREATE TABLE` stores the referenced schemas beside the pinned
//! reader schema (`references` in the table's Kafka settings), so the
//! table parses it again without the registry; a table pinned before
//! references were followed has none stored and reads as before. A writer
//! schema's references are fetched with it, once per id, and each
//! numbered version once per stream. The decoder and the compatibility
//! check read the same parsed schemas, and a reader field whose type is a
//! referenced record is a JSON object, as a nested record is. A writer
//! schema whose references cannot be fetched or parsed stalls the table at
//! the record that names it, as an unknown id does.
//!
//! # Replacement swaps
//!
//! A topic is not the pipeline's to write to, so `APPLY REPLACEMENT`
//! writes nothing upstream: the stream sees the request in the store (a
//! replacement of one of its tables' interfaces marked as applying) and
//! delivers it as a transaction of its own holding only the marker, at
//! the next position. A request seen again after a restart is delivered
//! again; one already swapped in is no longer in the store.

pub mod avro;
pub mod json;
mod last;
pub mod protobuf;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use bytes::Bytes;
use evolve_compat::avro::AvroSchema;
use evolve_core::change::{ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};
use rdkafka::ClientConfig;
use rdkafka::Message as _;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;
use tokio::sync::mpsc;

use crate::config::Connection;
use crate::error::{PipelineError, Result};
use crate::position::Position;
use crate::sink::registry::{Registry, SubjectVersions, VersionedSchema, resolve_references};
use crate::source::{ChangeStream, Source, SourceEvent, TableSnapshot};
use crate::store::{ColumnInfo, SourceInfo, Store, TableInfo};
use crate::swap::{MESSAGE_PREFIX, apply_message};

/// The most records in one transaction.
pub const BATCH: usize = 2_000;

/// How long a metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the stream looks for replacement requests in the store.
const MARKER_POLL: Duration = Duration::from_millis(200);
/// How often the stream looks for partitions added to its topic.
const PARTITION_CHECK: Duration = Duration::from_secs(5);

/// The key column of an `ENVELOPE UPSERT` or `ENVELOPE DEBEZIUM` table:
/// the record's key as JSON
/// (not a valid Avro field name, so no field can take it).
pub const KEY_COLUMN: &str = "@key";

/// The key column of an `ENVELOPE NONE` table: `topic/partition/offset`.
pub const OFFSET_COLUMN: &str = "@offset";

/// The subject of a topic's value schemas (TopicNameStrategy).
pub fn value_subject(topic: &str) -> String {
    format!("{topic}-value")
}

/// The subject of a topic's key schemas (TopicNameStrategy): when the
/// registry has it at `CREATE TABLE`, the table's keys are read as
/// registry-encoded.
pub fn key_subject(topic: &str) -> String {
    format!("{topic}-key")
}

/// The next offset of each partition (`.0`), and the fingerprint of
/// the record before it, the last one the source read there (`.1`; none
/// in states stored before fingerprints, or for a partition the source
/// has read nothing of). JSON: `{"0": 1200, "1": 980, "@last": {"0":
/// "9b1f03a2c4d5e6f7"}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offsets(pub BTreeMap<i32, i64>, pub BTreeMap<i32, u64>);

/// The key of [`Offsets`]' fingerprints in its JSON form.
const LAST_KEY: &str = "@last";

impl Offsets {
    pub fn to_json(&self) -> String {
        let mut map: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(p, o)| (p.to_string(), serde_json::Value::from(*o)))
            .collect();
        if !self.1.is_empty() {
            let last: serde_json::Map<String, serde_json::Value> = self
                .1
                .iter()
                .map(|(p, f)| (p.to_string(), serde_json::Value::from(format!("{f:016x}"))))
                .collect();
            map.insert(LAST_KEY.into(), serde_json::Value::Object(last));
        }
        serde_json::Value::Object(map).to_string()
    }

    pub fn from_json(text: &str) -> Option<Offsets> {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        let mut out = Offsets::default();
        for (p, o) in value.as_object()? {
            if p == LAST_KEY {
                for (p, f) in o.as_object()? {
                    out.1
                        .insert(p.parse().ok()?, u64::from_str_radix(f.as_str()?, 16).ok()?);
                }
                continue;
            }
            out.0.insert(p.parse().ok()?, o.as_i64()?);
        }
        Some(out)
    }
}

/// What tells one record from another at the same offset of a topic
/// deleted and created again: FNV-1a over its timestamp, key and value
/// (each length-prefixed; stable across releases, unlike std's hasher).
fn fingerprint(raw: &Raw) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(&raw.timestamp_millis.unwrap_or(i64::MIN).to_le_bytes());
    for part in [&raw.key, &raw.value] {
        match part {
            Some(bytes) => {
                eat(&(bytes.len() as u64).to_le_bytes());
                eat(bytes);
            }
            None => eat(&u64::MAX.to_le_bytes()),
        }
    }
    hash
}

fn kafka_error(connection: &str, context: &str, e: impl std::fmt::Display) -> PipelineError {
    PipelineError::Database {
        context: format!("Kafka connection \"{connection}\": {context}"),
        message: e.to_string(),
    }
}

fn consumer(name: &str, connection: &Connection, group: &str) -> Result<BaseConsumer> {
    consumer_config(name, connection, group)?
        .create()
        .map_err(|e| kafka_error(name, "create a consumer", e))
}

/// The settings of every consumer a Kafka source makes.
fn consumer_config(name: &str, connection: &Connection, group: &str) -> Result<ClientConfig> {
    let mut config = crate::sink::kafka::client_config(name, connection)?;
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "false")
        // librdkafka stops fetching a partition whose local queue holds
        // `queued.min.messages` and looks again this much later (1 s by
        // default): a reader faster than the broker's answers then
        // drains the queue in a fraction of that and waits out the rest.
        .set("fetch.queue.backoff.ms", "10");
    Ok(config)
}

/// The partitions of `topic` with their low and high watermarks. An
/// unknown topic is an error saying so.
fn watermarks(
    name: &str,
    connection: &Connection,
    consumer: &BaseConsumer,
    topic: &str,
) -> Result<Vec<(i32, i64, i64)>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|e| PipelineError::Connect {
            connection: name.to_string(),
            target: connection.kafka_brokers().unwrap_or_default().to_string(),
            reason: format!(
                "no Kafka broker answered in {}s ({e}); check the url and that the brokers are running",
                METADATA_TIMEOUT.as_secs()
            ),
        })?;
    let Some(t) = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
    else {
        return Err(PipelineError::Refused {
            sqlstate: "42P01",
            primary: format!("topic \"{topic}\" does not exist on Kafka connection \"{name}\""),
            detail: None,
            hint: Some("Create the topic (or let its producer create it), then try again.".into()),
        });
    };
    let mut out = Vec::new();
    for p in t.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(topic, p.id(), METADATA_TIMEOUT)
            .map_err(|e| kafka_error(name, &format!("read the offsets of topic \"{topic}\""), e))?;
        out.push((p.id(), low, high));
    }
    out.sort_unstable();
    Ok(out)
}

/// `CREATE SOURCE ... FROM KAFKA`: checks that the topic exists and
/// returns its high watermarks, where the source's stream starts.
pub async fn check_topic(name: &str, connection: &Connection, topic: &str) -> Result<Offsets> {
    let (name, connection, topic) = (name.to_string(), connection.clone(), topic.to_string());
    blocking(move || {
        let consumer = consumer(&name, &connection, "evolve-check")?;
        let marks = watermarks(&name, &connection, &consumer, &topic)?;
        Ok(Offsets(
            marks.into_iter().map(|(p, _, h)| (p, h)).collect(),
            BTreeMap::new(),
        ))
    })
    .await
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PipelineError::Database {
            context: "Kafka client".into(),
            message: e.to_string(),
        })?
}

/// What `CREATE TABLE ... FORMAT AVRO | JSON | PROTOBUF` pins: the subject's latest schema,
/// its columns (with the key column last), and the settings to store.
pub struct Pinned {
    pub columns: Vec<ColumnInfo>,
    pub info: crate::store::KafkaTableInfo,
}

/// Reads the value subject's latest schema from the registry and maps it
/// to columns.
pub async fn pin_reader(
    topic: &str,
    registry: &Connection,
    table: &evolve_core::control::KafkaTable,
) -> Result<Pinned> {
    use evolve_core::control::{TableEnvelope, TableFormat};
    let (registry_name, envelope, format) = (table.registry.as_str(), table.envelope, table.format);
    let mut client = Registry::new(registry_name, registry)?;
    let subject = table
        .subject
        .clone()
        .unwrap_or_else(|| value_subject(topic));
    let latest = client
        .latest(&subject)
        .await?
        .ok_or_else(|| PipelineError::Refused {
            sqlstate: "42704",
            primary: format!(
                "subject \"{subject}\" has no schema in the registry of connection \"{registry_name}\""
            ),
            detail: None,
            hint: Some(
                "Register the subject's schema (a producer does on its first record), then create the table."
                    .into(),
            ),
        })?;
    let of = format!("subject \"{subject}\" version {}", latest.version);
    let refused = |e: String| PipelineError::Refused {
        sqlstate: "22023",
        primary: format!("the latest schema of {of} (id {}): {e}", latest.id),
        detail: None,
        hint: None,
    };
    let wanted = format.schema_type();
    if latest.schema_type != wanted {
        return Err(refused(format!(
            "it is a schema of type {}, and FORMAT {} reads {wanted} schemas; name the format its producer writes",
            latest.schema_type,
            format.as_str().to_ascii_uppercase()
        )));
    }
    let references = if latest.references.is_empty() {
        Vec::new()
    } else {
        resolve_references(
            wanted,
            &mut client,
            &of,
            Some((&subject, latest.version)),
            &latest.references,
        )
        .await?
        .map_err(|why| PipelineError::Refused {
            sqlstate: "42704",
            primary: why,
            detail: None,
            hint: None,
        })?
    };
    let debezium = envelope == TableEnvelope::Debezium;
    let mut message = None;
    let mut record_type = None;
    let fields = match format {
        TableFormat::Json => {
            // Schemas a registry holds already are read as stored ones: a
            // pattern Java refuses is refused only when a schema is new.
            evolve_compat::json::parse_stored(&latest.schema, &compat_references(&references))
                .map_err(|e| refused(format!("not a JSON Schema evolve can read: {e}")))?;
            if table.subject.is_some() {
                record_type = Some(json::title(&latest.schema).ok_or_else(|| {
                    refused(
                        "it has no title, which names a JSON Schema's record type; SUBJECT needs it to tell this table's records from others'"
                            .into(),
                    )
                })?);
            }
            json::reader_columns(&latest.schema, debezium).map_err(refused)?
        }
        TableFormat::Protobuf => {
            let schema =
                evolve_compat::protobuf::parse(&latest.schema, &compat_references(&references))
                    .map_err(|e| refused(format!("not a Protobuf schema evolve can read: {e}")))?;
            let read = protobuf::reader_message(schema.file(), table.message.as_deref())
                .map_err(refused)?;
            message = Some(read.full_name().to_string());
            if table.subject.is_some() {
                record_type = message.clone();
            }
            if debezium {
                protobuf::reader_columns(&protobuf::debezium_row(&read).map_err(refused)?)
            } else {
                protobuf::reader_columns(&read)
            }
        }
        TableFormat::Avro => {
            let schema =
                avro::parse(&latest.schema, &references).map_err(|e| PipelineError::Refused {
                    sqlstate: "22023",
                    primary: format!(
                        "the latest schema of {of} (id {}) is not an Avro schema evolve can read: {e}",
                        latest.id
                    ),
                    detail: None,
                    hint: None,
                })?;
            let names = avro::schema_names(&schema);
            if table.subject.is_some() {
                record_type = avro::record_name(schema.root());
            }
            let root = match envelope {
                TableEnvelope::Debezium => {
                    avro::debezium_row(schema.root(), &names).map_err(refused)?
                }
                _ => schema.root(),
            };
            avro::reader_columns(root, &avro::referenced_names(&schema)).map_err(refused)?
        }
    };
    let mut pinned = pinned(
        fields,
        envelope,
        format,
        registry_name,
        subject,
        latest,
        references,
    );
    pinned.info.message = message;
    pinned.info.record_type = record_type;
    pinned.info.key_format = pin_key_format(topic, &mut client, registry_name, table)
        .await?
        .map(|f| f.as_str().to_string());
    Ok(pinned)
}

/// How a keyed table's keys are written: `KEY FORMAT`'s, else the
/// registry format of the `<topic>-key` subject's latest schema when the
/// registry has the subject, else text. `None` for `ENVELOPE NONE`,
/// which reads no keys.
async fn pin_key_format(
    topic: &str,
    client: &mut Registry,
    registry_name: &str,
    table: &evolve_core::control::KafkaTable,
) -> Result<Option<evolve_core::control::KeyFormat>> {
    use evolve_core::control::{KeyFormat, TableFormat};
    if !table.envelope.keyed() {
        return Ok(None);
    }
    if let Some(format) = table.key_format {
        return Ok(Some(format));
    }
    let subject = key_subject(topic);
    let Some(latest) = client.latest(&subject).await? else {
        return Ok(Some(KeyFormat::Text));
    };
    match TableFormat::parse(&latest.schema_type) {
        Some(format) => Ok(Some(KeyFormat::Registry(format))),
        None => Err(PipelineError::Refused {
            sqlstate: "22023",
            primary: format!(
                "the latest schema of subject \"{subject}\" in the registry of connection \"{registry_name}\" is of type {}, which evolve cannot read keys with",
                latest.schema_type
            ),
            detail: None,
            hint: Some(
                "Name how the keys are written: KEY FORMAT TEXT | BYTES | AVRO | JSON | PROTOBUF VALUE FORMAT ...".into(),
            ),
        }),
    }
}

/// The columns of `fields` (and the envelope's key column, last) and the
/// settings a table pinned at `latest` stores.
fn pinned(
    fields: Vec<avro::AvroColumn>,
    envelope: evolve_core::control::TableEnvelope,
    format: evolve_core::control::TableFormat,
    registry_name: &str,
    subject: String,
    latest: VersionedSchema,
    references: Vec<crate::store::ReferencedSchema>,
) -> Pinned {
    let mut columns: Vec<ColumnInfo> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| ColumnInfo {
            name: f.name.clone(),
            attnum: i16::try_from(i + 1).unwrap_or(i16::MAX),
            type_oid: f.type_oid,
            typmod: f.typmod,
            type_name: f.type_name.clone(),
            not_null: f.not_null,
            kind: f.kind(),
            excluded: false,
            as_text: false,
            key: false,
            labels: None,
        })
        .collect();
    columns.push(key_column(envelope, columns.len()));
    Pinned {
        columns,
        info: crate::store::KafkaTableInfo {
            registry: registry_name.to_string(),
            envelope: envelope.as_str().to_string(),
            format: format.as_str().to_string(),
            subject,
            schema_id: latest.id,
            version: latest.version,
            schema: latest.schema,
            references,
            message: None,
            record_type: None,
            key_format: None,
        },
    }
}

/// The key column of an envelope: part of the key, not of the document.
fn key_column(envelope: evolve_core::control::TableEnvelope, fields: usize) -> ColumnInfo {
    let (name, type_oid, type_name) = if envelope.keyed() {
        (KEY_COLUMN, 3802, "jsonb")
    } else {
        (OFFSET_COLUMN, 25, "text")
    };
    ColumnInfo {
        name: name.to_string(),
        attnum: i16::try_from(fields + 1).unwrap_or(i16::MAX),
        type_oid,
        typmod: -1,
        type_name: type_name.to_string(),
        not_null: true,
        kind: evolve_core::document::TypeKind::from_builtin_oid(type_oid),
        excluded: true,
        as_text: false,
        key: true,
        labels: None,
    }
}

/// The columns the registry's latest schema of a Kafka table's subject
/// would pin now, with the attnums of the pinned columns of the same name
/// (fields are matched by name, not position): what drift compares.
pub async fn upstream_columns(
    table: &TableInfo,
    registry: &Connection,
) -> Result<Vec<crate::drift::UpstreamColumn>> {
    let Some(kafka) = &table.kafka else {
        return Ok(Vec::new());
    };
    let pinned = pin_reader(&table.upstream_table, registry, &kafka.spec()).await?;
    Ok(drift_columns(table, kafka.schema_id, pinned))
}

/// What drift compares `table` (pinned at schema id `pinned_id`) with:
/// the columns `latest` maps the subject's latest schema to, with the
/// attnums of the pinned columns of the same name.
fn drift_columns(
    table: &TableInfo,
    pinned_id: u32,
    latest: Pinned,
) -> Vec<crate::drift::UpstreamColumn> {
    if latest.info.schema_id == pinned_id {
        // The pinned schema is still the latest: nothing drifted, even
        // where this version of evolve maps the same schema to other
        // columns than the version that pinned it did.
        return table.columns.iter().map(as_upstream).collect();
    }
    let mut next = table.columns.iter().map(|c| c.attnum).max().unwrap_or(0);
    latest
        .columns
        .into_iter()
        .map(|c| {
            let attnum = match table.columns.iter().find(|p| p.name == c.name) {
                Some(p) => p.attnum,
                None => {
                    next = next.saturating_add(1);
                    next
                }
            };
            crate::drift::UpstreamColumn {
                attnum,
                ..as_upstream(&c)
            }
        })
        .collect()
}

/// A pinned column as drift's side of the upstream.
fn as_upstream(c: &ColumnInfo) -> crate::drift::UpstreamColumn {
    crate::drift::UpstreamColumn {
        name: c.name.clone(),
        attnum: c.attnum,
        type_oid: c.type_oid,
        typmod: c.typmod,
        type_name: c.type_name.clone(),
    }
}

/// Fetched referenced schemas as the compatibility engine's parsers take
/// them.
pub(crate) fn compat_references(
    fetched: &[crate::store::ReferencedSchema],
) -> Vec<evolve_compat::Reference> {
    fetched
        .iter()
        .map(|r| evolve_compat::Reference {
            name: r.name.clone(),
            schema: r.schema.clone(),
        })
        .collect()
}

// ------------------------------------------------------------ decoding

/// One record as the consumer read it.
#[derive(Clone, Debug)]
struct Raw {
    partition: i32,
    offset: i64,
    timestamp_millis: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

impl Raw {
    /// A copy of consumed message `m`.
    fn of(m: &impl rdkafka::Message) -> Raw {
        Raw {
            partition: m.partition(),
            offset: m.offset(),
            timestamp_millis: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
        }
    }
}

/// A table's way of reading records.
struct Reader {
    /// The table's id in the stream (its `upstream_oid`).
    oid: u32,
    upsert: bool,
    /// `ENVELOPE DEBEZIUM`: each value is a change event.
    debezium: bool,
    /// Pinned from a named subject: the record type the table reads;
    /// records of other types are skipped (`KafkaTableInfo::record_type`).
    record_type: Option<String>,
    registry: String,
    /// How the keys are read (keyed envelopes).
    keys: KeyReading,
    /// The pinned reader schema.
    format: ReaderFormat,
    schema_id: u32,
    fields: Vec<avro::AvroColumn>,
    table_schema: Arc<TableSchema>,
    /// Per writer schema id: `None` when the reader reads it, else why not.
    verdicts: HashMap<u32, Option<String>>,
}

/// How a table reads its records' keys
/// ([`crate::store::KafkaTableInfo::key_format`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyReading {
    /// Pinned before key formats were: the schema the key's header
    /// names when it looks like the wire format and the registry has
    /// the id, else text (UTF-8, else bytea's hex form), record by record.
    Guess,
    /// As [`evolve_core::control::KeyFormat`] says, for every key.
    Pinned(evolve_core::control::KeyFormat),
}

impl KeyReading {
    /// Whether a key's header names a writer schema to fetch.
    fn fetches(self) -> bool {
        matches!(
            self,
            KeyReading::Guess | KeyReading::Pinned(evolve_core::control::KeyFormat::Registry(_))
        )
    }
}

/// A pinned reader schema, by format.
enum ReaderFormat {
    Avro(Box<AvroReader>),
    Json(evolve_compat::json::JsonSchema),
    Protobuf(Box<ProtobufReader>),
}

impl ReaderFormat {
    /// What its `FORMAT` reads, for messages: `Avro (FORMAT AVRO)`.
    fn reads(&self) -> &'static str {
        match self {
            ReaderFormat::Avro(_) => "Avro (FORMAT AVRO)",
            ReaderFormat::Json(_) => "JSON (FORMAT JSON)",
            ReaderFormat::Protobuf(_) => "Protobuf (FORMAT PROTOBUF)",
        }
    }
}

/// A Protobuf reader schema.
struct ProtobufReader {
    schema: evolve_compat::protobuf::ProtobufSchema,
    /// The message the records are ([`protobuf::reader_message`]), whose
    /// fields are the columns.
    message: prost_reflect::MessageDescriptor,
    /// `ENVELOPE DEBEZIUM`: `message` is the change event, and this its
    /// `after` message, whose fields are the columns.
    row: Option<prost_reflect::MessageDescriptor>,
}

/// An Avro reader schema.
struct AvroReader {
    /// The pinned reader schema with the schemas its references name.
    schema: AvroSchema,
    /// `ENVELOPE DEBEZIUM`: the change events' row record (their
    /// `after`), whose fields are the columns.
    row: Option<Schema>,
    /// The same, as records are decoded with it
    /// ([`avro::parse_for_decoding`]).
    decoding: AvroSchema,
    /// The named types of the schema and its references.
    names: HashMap<apache_avro::schema::Name, Schema>,
}

impl Reader {
    fn new(table: &TableInfo) -> Result<Reader> {
        let kafka = table
            .kafka
            .as_ref()
            .ok_or_else(|| PipelineError::Document {
                table: table.name.clone(),
                message: "a table of a Kafka source without its Kafka settings (store damaged?)"
                    .into(),
            })?;
        let bad = |e: String| PipelineError::Document {
            table: table.name.clone(),
            message: format!("its pinned reader schema (id {}): {e}", kafka.schema_id),
        };
        use evolve_core::control::{TableEnvelope, TableFormat};
        let references = compat_references(&kafka.references);
        let debezium = TableEnvelope::parse(&kafka.envelope) == Some(TableEnvelope::Debezium);
        let (format, fields) = match TableFormat::parse(&kafka.format).unwrap_or_default() {
            TableFormat::Json => {
                let schema = evolve_compat::json::parse_stored(&kafka.schema, &references)
                    .map_err(|e| bad(e.to_string()))?;
                let fields = json::reader_columns(&kafka.schema, debezium).map_err(bad)?;
                (ReaderFormat::Json(schema), fields)
            }
            TableFormat::Protobuf => {
                let schema = evolve_compat::protobuf::parse(&kafka.schema, &references)
                    .map_err(|e| bad(e.to_string()))?;
                let message = protobuf::reader_message(schema.file(), kafka.message.as_deref())
                    .map_err(bad)?;
                let row = match debezium {
                    true => Some(protobuf::debezium_row(&message).map_err(bad)?),
                    false => None,
                };
                let fields = protobuf::reader_columns(row.as_ref().unwrap_or(&message));
                let reader = ProtobufReader {
                    schema,
                    message,
                    row,
                };
                (ReaderFormat::Protobuf(Box::new(reader)), fields)
            }
            TableFormat::Avro => {
                let schema = avro::parse(&kafka.schema, &kafka.references).map_err(bad)?;
                let decoding =
                    avro::parse_for_decoding(&kafka.schema, &kafka.references).map_err(bad)?;
                let names = avro::schema_names(&schema);
                let row = match debezium {
                    true => Some(
                        avro::debezium_row(schema.root(), &names)
                            .map_err(bad)?
                            .clone(),
                    ),
                    false => None,
                };
                let fields = avro::reader_columns(
                    row.as_ref().unwrap_or(schema.root()),
                    &avro::referenced_names(&schema),
                )
                .map_err(bad)?;
                let reader = AvroReader {
                    schema,
                    row,
                    decoding,
                    names,
                };
                (ReaderFormat::Avro(Box::new(reader)), fields)
            }
        };
        let mut columns: Vec<ColumnSchema> = fields
            .iter()
            .map(|f| ColumnSchema {
                name: f.name.clone(),
                type_oid: f.type_oid,
                typmod: f.typmod,
                key: false,
                attnum: None,
            })
            .collect();
        let upsert = kafka.envelope != "none";
        let keys = match &kafka.key_format {
            None => KeyReading::Guess,
            Some(f) => KeyReading::Pinned(
                evolve_core::control::KeyFormat::parse(f)
                    .ok_or_else(|| bad(format!("its key format {f:?} is not one evolve knows")))?,
            ),
        };
        let key = table.columns.iter().find(|c| c.key);
        columns.push(ColumnSchema {
            name: key.map_or_else(|| KEY_COLUMN.to_string(), |c| c.name.clone()),
            type_oid: key.map_or(3802, |c| c.type_oid),
            typmod: -1,
            key: true,
            attnum: None,
        });
        Ok(Reader {
            oid: table.upstream_oid,
            upsert,
            debezium,
            record_type: kafka.record_type.clone(),
            registry: kafka.registry.clone(),
            keys,
            format,
            schema_id: kafka.schema_id,
            fields,
            table_schema: Arc::new(TableSchema {
                schema: table.upstream_schema.clone(),
                name: table.upstream_table.clone(),
                columns,
            }),
            verdicts: HashMap::new(),
        })
    }
}

/// A writer schema as fetched by id, parsed with the schemas its
/// references name.
enum WriterSchema {
    Avro {
        schema: Box<AvroSchema>,
        /// The same, as records are decoded with it
        /// ([`avro::parse_for_decoding`]).
        decoding: Box<AvroSchema>,
        /// The named types of the schema and its references.
        names: HashMap<apache_avro::schema::Name, Schema>,
    },
    Json {
        schema: evolve_compat::json::JsonSchema,
        /// Its `title`, the record type.
        title: Option<String>,
    },
    Protobuf(evolve_compat::protobuf::ProtobufSchema),
}

impl WriterSchema {
    /// Whether a record's `datum` (what follows the wire header) written
    /// with this schema is of record type `wanted`: a record's full name,
    /// a JSON Schema's title, the full name of the message the datum's
    /// indexes name ([`protobuf::message_at`]). Compared in place, for
    /// every record of a table pinned with `SUBJECT`.
    fn is_type(&self, datum: &[u8], wanted: &str) -> bool {
        match self {
            WriterSchema::Avro { schema, .. } => avro::is_record(schema.root(), wanted),
            WriterSchema::Json { title, .. } => title.as_deref() == Some(wanted),
            WriterSchema::Protobuf(schema) => protobuf::message_indexes(datum)
                .ok()
                .and_then(|(indexes, _)| {
                    protobuf::message_at(schema.file(), &indexes, Some(wanted))
                })
                .is_some_and(|m| m.full_name() == wanted),
        }
    }

    /// What it is, for messages: `an Avro schema`.
    fn what(&self) -> &'static str {
        match self {
            WriterSchema::Avro { .. } => "an Avro schema",
            WriterSchema::Json { .. } => "a JSON Schema",
            WriterSchema::Protobuf(_) => "a Protobuf schema",
        }
    }
}

/// Why `reader` cannot read records of `writer`, if it cannot: the
/// compatibility engine's first finding, or formats that differ.
fn verdict(reader: &ReaderFormat, writer: &WriterSchema) -> Option<String> {
    let first = |found: Vec<evolve_compat::Incompatibility>| {
        found
            .first()
            .map(|i| format!("{} ({} at {})", i.message, i.kind, i.path))
    };
    match (reader, writer) {
        (ReaderFormat::Avro(r), WriterSchema::Avro { schema, .. }) => {
            first(evolve_compat::avro::check(&r.schema, schema))
        }
        (ReaderFormat::Json(r), WriterSchema::Json { schema, .. }) => {
            first(evolve_compat::json::check(r, schema))
        }
        (ReaderFormat::Protobuf(r), WriterSchema::Protobuf(w)) => {
            // Only what the table's message reads: a file's other messages
            // may change as they like.
            let read = protobuf::reachable(&r.message);
            let concerns = |path: &str| {
                let message = path.trim_start_matches("#/").split('/').next();
                message.is_none_or(|m| m.is_empty() || read.contains(m))
            };
            first(
                evolve_compat::protobuf::check(&r.schema, w)
                    .into_iter()
                    .filter(|i| concerns(&i.path))
                    .collect(),
            )
        }
        (reader, writer) => Some(format!(
            "it is {}, and the table reads {}",
            writer.what(),
            reader.reads()
        )),
    }
}

/// A writer schema as fetched by id, or why a record naming the id cannot
/// be read, worded to follow the record's place in a stall's reason
/// (`names writer schema id 7, which ...`): the registry does not have the
/// id, it is not Avro, its references cannot be fetched, or it does not
/// parse.
type Writer = std::result::Result<Arc<WriterSchema>, String>;

/// Registry clients and the writer schemas they gave, shared by a
/// stream's or snapshot's readers.
struct Writers {
    clients: HashMap<String, Registry>,
    schemas: HashMap<(String, u32), Writer>,
    /// The subject versions that writer schemas' references named, by
    /// registry, subject and version: each fetched once.
    versions: HashMap<(String, String, i64), VersionedSchema>,
}

/// A registry's subject versions through the cache of a [`Writers`].
struct CachedVersions<'a> {
    registry: &'a str,
    client: &'a Registry,
    cache: &'a mut HashMap<(String, String, i64), VersionedSchema>,
}

impl SubjectVersions for CachedVersions<'_> {
    /// A numbered version is kept once fetched (a registered version does
    /// not change); `-1` (the latest) and versions the registry does not
    /// have are asked for each time.
    async fn subject_version(
        &mut self,
        subject: &str,
        version: i64,
    ) -> Result<Option<VersionedSchema>> {
        let key = (self.registry.to_string(), subject.to_string(), version);
        if let Some(found) = self.cache.get(&key) {
            return Ok(Some(found.clone()));
        }
        let found = self.client.version(subject, version).await?;
        if let Some(found) = &found
            && version >= 1
        {
            self.cache.insert(key, found.clone());
        }
        Ok(found)
    }
}

impl Writers {
    fn new(registries: &[(String, Connection)]) -> Result<Writers> {
        let mut clients = HashMap::new();
        for (name, connection) in registries {
            clients.insert(name.clone(), Registry::new(name, connection)?);
        }
        Ok(Writers {
            clients,
            schemas: HashMap::new(),
            versions: HashMap::new(),
        })
    }

    /// The writer schema `id` of registry `registry` as fetched before
    /// ([`Writers::prefetch`]); `None` when it was not.
    fn cached(&self, registry: &str, id: u32) -> Option<Writer> {
        self.schemas.get(&(registry.to_string(), id)).cloned()
    }

    /// Fetches every writer schema that reading `batch` with `readers`
    /// needs (the values' ids, and the keys' under `ENVELOPE UPSERT`), so
    /// that decoding never waits. Cancel-safe: what was fetched stays
    /// cached.
    async fn prefetch(&mut self, readers: &[Reader], batch: &[Raw]) -> Result<()> {
        for raw in batch {
            for reader in readers {
                let ids = [
                    raw.value.as_deref().and_then(wire).map(|(id, _)| id),
                    raw.key
                        .as_deref()
                        .filter(|_| reader.upsert && reader.keys.fetches())
                        .and_then(wire)
                        .map(|(id, _)| id),
                ];
                for id in ids.into_iter().flatten() {
                    self.fetch(&reader.registry, id).await?;
                }
            }
        }
        Ok(())
    }

    /// Fetches writer schema `id` of registry `registry`, with the schemas
    /// its references name, unless it was fetched before; an error when
    /// the registry cannot be asked (the stream retries).
    async fn fetch(&mut self, registry: &str, id: u32) -> Result<()> {
        if self.schemas.contains_key(&(registry.to_string(), id)) {
            return Ok(());
        }
        let client = self
            .clients
            .get(registry)
            .ok_or_else(|| PipelineError::Config {
                message: format!(
                    "connection \"{registry}\" (a Kafka table's schema registry) is not in evolve.toml"
                ),
            })?;
        let writer = match client.schema_by_id(id).await? {
            None => Err(format!(
                "names writer schema id {id}, which the registry of connection \"{registry}\" does not have"
            )),
            Some(found) if !["AVRO", "JSON", "PROTOBUF"].contains(&found.schema_type.as_str()) => {
                Err(format!(
                    "names writer schema id {id}, which is a {} schema in the registry of connection \"{registry}\"; a Kafka table reads Avro, JSON Schema or Protobuf",
                    found.schema_type
                ))
            }
            Some(found) => {
                let of = format!("writer schema id {id}");
                let references = if found.references.is_empty() {
                    Ok(Vec::new())
                } else {
                    let mut versions = CachedVersions {
                        registry,
                        client,
                        cache: &mut self.versions,
                    };
                    resolve_references(
                        &found.schema_type,
                        &mut versions,
                        &of,
                        None,
                        &found.references,
                    )
                    .await?
                };
                let schema_type = found.schema_type.as_str();
                references
                    .and_then(|references| {
                        if schema_type == "JSON" {
                            return evolve_compat::json::parse_stored(
                                &found.schema,
                                &compat_references(&references),
                            )
                            .map(|schema| {
                                Arc::new(WriterSchema::Json {
                                    schema,
                                    title: json::title(&found.schema),
                                })
                            })
                            .map_err(|e| e.to_string());
                        }
                        if schema_type == "PROTOBUF" {
                            return evolve_compat::protobuf::parse(
                                &found.schema,
                                &compat_references(&references),
                            )
                            .map(|schema| Arc::new(WriterSchema::Protobuf(schema)))
                            .map_err(|e| e.to_string());
                        }
                        let read = |parsed: std::result::Result<AvroSchema, String>| {
                            parsed.map_err(|e| {
                                format!("{of} is not an Avro schema evolve can read: {e}")
                            })
                        };
                        let (schema, decoding) = (
                            read(avro::parse(&found.schema, &references))?,
                            read(avro::parse_for_decoding(&found.schema, &references))?,
                        );
                        Ok(Arc::new(WriterSchema::Avro {
                            names: avro::schema_names(&schema),
                            schema: Box::new(schema),
                            decoding: Box::new(decoding),
                        }))
                    })
                    .map_err(|why| {
                        format!("names writer schema id {id}, which cannot be read: {why}")
                    })
            }
        };
        self.schemas.insert((registry.to_string(), id), writer);
        Ok(())
    }
}

/// The schema id of Confluent's wire format, and the datum after it.
fn wire(payload: &[u8]) -> Option<(u32, &[u8])> {
    if payload.len() < 5 || payload[0] != 0 {
        return None;
    }
    let id = u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]);
    Some((id, &payload[5..]))
}

/// What one record is for one table.
enum Decoded {
    Change(RowChange),
    /// Nothing (a tombstone under `ENVELOPE NONE`).
    Nothing,
    /// Another record type's record, which a table pinned with `SUBJECT`
    /// leaves to the other tables (counted, see
    /// [`ChangeStream::take_skipped`]).
    Skipped,
    /// The table cannot read it: why.
    Undecodable(String),
}

fn at(raw: &Raw) -> String {
    format!(
        "record at partition {} offset {}",
        raw.partition, raw.offset
    )
}

/// Reads `raw` for `reader`, with the writer schemas
/// [`Writers::prefetch`] fetched (it never waits).
fn decode(reader: &mut Reader, writers: &Writers, topic: &str, raw: &Raw) -> Result<Decoded> {
    // The key.
    let key = if reader.upsert {
        let Some(key) = raw.key.as_deref() else {
            return Ok(Decoded::Undecodable(format!(
                "{} has no key, which ENVELOPE UPSERT and ENVELOPE DEBEZIUM need",
                at(raw)
            )));
        };
        match key_text(writers, &reader.registry, reader.keys, key)? {
            Ok(text) => text,
            Err(problem) => return Ok(Decoded::Undecodable(format!("{}: {problem}", at(raw)))),
        }
    } else {
        format!("{topic}/{}/{}", raw.partition, raw.offset)
    };
    let key = Datum::Text(Bytes::from(key));
    let Some(value) = raw.value.as_deref() else {
        if !reader.upsert {
            return Ok(Decoded::Nothing);
        }
        return Ok(Decoded::Change(delete(reader, key)));
    };
    let Some((id, datum)) = wire(value) else {
        return Ok(Decoded::Undecodable(format!(
            "{} has no schema registry header (a zero byte and a 4-byte schema id)",
            at(raw)
        )));
    };
    let writer = match fetched(writers, &reader.registry, id)? {
        Ok(writer) => writer,
        Err(why) => return Ok(Decoded::Undecodable(format!("{} {why}", at(raw)))),
    };
    if let Some(wanted) = &reader.record_type
        && !writer.is_type(datum, wanted)
    {
        // Another type's record, another table's row.
        return Ok(Decoded::Skipped);
    }
    let verdict = match reader.verdicts.get(&id) {
        Some(v) => v.clone(),
        None => {
            let v = verdict(&reader.format, &writer);
            reader.verdicts.insert(id, v.clone());
            v
        }
    };
    if let Some(why) = verdict {
        return Ok(Decoded::Undecodable(format!(
            "{} has writer schema id {id}, which the pinned reader schema (id {}) cannot read: {why}",
            at(raw),
            reader.schema_id
        )));
    }
    let values = match (&reader.format, &*writer) {
        (ReaderFormat::Json(_), _) if reader.debezium => {
            json::debezium_event(datum).and_then(|(op, after)| {
                debezium_value(&op, after, |a| {
                    json::record_values(a.as_bytes(), &reader.fields)
                })
            })
        }
        (ReaderFormat::Json(_), _) => json::record_values(datum, &reader.fields).map(RowValue::Row),
        (ReaderFormat::Avro(r), WriterSchema::Avro { decoding, .. }) => {
            let mut bytes = datum;
            let read = GenericDatumReader::builder(decoding.root())
                .writer_schemata(avro::schemata(decoding))
                .and_then(|b| {
                    b.reader_schema(r.decoding.root())
                        .reader_schemata(avro::schemata(&r.decoding))
                })
                .and_then(|b| b.build())
                .and_then(|d| d.read_value(&mut bytes));
            avro_values(read, r, &reader.fields)
        }
        (ReaderFormat::Protobuf(r), WriterSchema::Protobuf(w)) => {
            protobuf_values(datum, r, w, &reader.fields)
        }
        // The verdict refused the other pairs.
        (r, w) => Err(format!(
            "it is {}, and the table reads {}",
            w.what(),
            r.reads()
        )),
    };
    match values {
        Ok(RowValue::Row(mut values)) => {
            values.push(key);
            Ok(Decoded::Change(RowChange {
                table: Arc::clone(&reader.table_schema),
                kind: ChangeKind::Insert,
                old: None,
                new: Some(values),
            }))
        }
        Ok(RowValue::Delete) => Ok(Decoded::Change(delete(reader, key))),
        Ok(RowValue::Truncate) => Ok(Decoded::Undecodable(format!(
            "{} is a truncate event (op \"t\"), which a Kafka table cannot apply record by record; recreate the table (its snapshot reads the topic again), or turn Debezium's truncate events off (skipped.operations = t)",
            at(raw)
        ))),
        Err(e) => Ok(Decoded::Undecodable(format!(
            "{} cannot be decoded with writer schema id {id}: {e}",
            at(raw)
        ))),
    }
}

/// What a record's value does to its key's row.
enum RowValue {
    /// The row is these values.
    Row(Vec<Datum>),
    /// A Debezium delete.
    Delete,
    /// A Debezium truncate event.
    Truncate,
}

/// The row an Avro value `read` with `reader` gives (`ENVELOPE
/// DEBEZIUM`: its change event's), in `fields`' text forms.
fn avro_values(
    read: std::result::Result<apache_avro::types::Value, apache_avro::Error>,
    reader: &AvroReader,
    fields: &[avro::AvroColumn],
) -> std::result::Result<RowValue, String> {
    let v = read.map_err(|e| e.to_string())?;
    let Some(row) = &reader.row else {
        return avro::record_values(&v, reader.schema.root(), fields, &reader.names)
            .map(RowValue::Row);
    };
    let (op, after) = avro::debezium_event(&v)?;
    debezium_value(op, after, |after| {
        avro::record_values(after, row, fields, &reader.names)
    })
}

/// What a Debezium change event with `op` and `after` does to its key's
/// row, the row's values read from `after` by `row`.
fn debezium_value<T>(
    op: &str,
    after: Option<T>,
    row: impl FnOnce(T) -> std::result::Result<Vec<Datum>, String>,
) -> std::result::Result<RowValue, String> {
    match (op, after) {
        ("c" | "r" | "u", Some(after)) => row(after).map(RowValue::Row),
        ("d", _) => Ok(RowValue::Delete),
        ("t", _) => Ok(RowValue::Truncate),
        (op, after) => Err(format!(
            "a change event with op {op:?} and {} after, which ENVELOPE DEBEZIUM does not read (c, r and u have an after, d deletes)",
            if after.is_some() { "an" } else { "no" }
        )),
    }
}

/// The row of a Protobuf record's `datum` (its message indexes, then the
/// message), whose indexes must name the reader's message in `writer`.
fn protobuf_values(
    datum: &[u8],
    reader: &ProtobufReader,
    writer: &evolve_compat::protobuf::ProtobufSchema,
    fields: &[avro::AvroColumn],
) -> std::result::Result<RowValue, String> {
    let (indexes, encoded) = protobuf::message_indexes(datum)?;
    let wanted = reader.message.full_name();
    match protobuf::message_at(writer.file(), &indexes, Some(wanted)) {
        None => Err(format!(
            "its message indexes {indexes:?} name no message of the writer schema"
        )),
        Some(m) if m.full_name() != wanted => Err(format!(
            "it is a {} message (message indexes {indexes:?}), and the table reads {wanted}; a table of {} is created with FORMAT PROTOBUF MESSAGE '{}'",
            m.full_name(),
            m.full_name(),
            m.full_name()
        )),
        Some(_) if reader.row.is_some() => {
            let (op, after) = protobuf::debezium_event(encoded, &reader.message)?;
            debezium_value(&op, after, |a| protobuf::message_values(&a, fields))
        }
        Some(_) => protobuf::record_values(encoded, &reader.message, fields).map(RowValue::Row),
    }
}

/// The delete of `key`'s row from `reader`'s table.
fn delete(reader: &Reader, key: Datum) -> RowChange {
    let mut old = vec![Datum::Missing; reader.fields.len()];
    old.push(key);
    RowChange {
        table: Arc::clone(&reader.table_schema),
        kind: ChangeKind::Delete,
        old: Some(old),
        new: None,
    }
}

/// Writer schema `id`, which [`Writers::prefetch`] fetched.
fn fetched(writers: &Writers, registry: &str, id: u32) -> Result<Writer> {
    writers
        .cached(registry, id)
        .ok_or_else(|| PipelineError::Database {
            context: format!("schema registry connection \"{registry}\""),
            message: format!("writer schema id {id} was not fetched before decoding"),
        })
}

/// A Protobuf key's `datum` (message indexes, then the message) as JSON
/// text, read with the message its indexes name in `writer`.
fn protobuf_key(
    datum: &[u8],
    writer: &evolve_compat::protobuf::ProtobufSchema,
) -> std::result::Result<String, String> {
    let (indexes, encoded) =
        protobuf::message_indexes(datum).map_err(|e| format!("its key: {e}"))?;
    let message = protobuf::message_at(writer.file(), &indexes, None).ok_or_else(|| {
        format!("its key's message indexes {indexes:?} name no message of its schema")
    })?;
    protobuf::key_json(encoded, &message)
}

/// A record key as JSON text, read as `keys` says, or why it cannot be
/// read.
fn key_text(
    writers: &Writers,
    registry: &str,
    keys: KeyReading,
    key: &[u8],
) -> Result<std::result::Result<String, String>> {
    use evolve_core::control::KeyFormat;
    let format = match keys {
        KeyReading::Guess => {
            // Avro (or JSON, Protobuf) in the wire format when the
            // registry has the id, else a UTF-8 string, else bytea's hex
            // form: as tables pinned before key formats read keys.
            if let Some((id, datum)) = wire(key)
                && let Ok(writer) = fetched(writers, registry, id)?
            {
                return Ok(registry_key(&writer, id, datum));
            }
            let text = std::str::from_utf8(key).map_or_else(|_| bytea_hex(key), str::to_string);
            return Ok(Ok(serde_json::Value::String(text).to_string()));
        }
        KeyReading::Pinned(KeyFormat::Text) => {
            // PostgreSQL's text holds no NUL, so a key with one is bytes.
            let text = std::str::from_utf8(key)
                .ok()
                .filter(|t| !t.contains('\0'))
                .map_or_else(|| bytea_hex(key), str::to_string);
            return Ok(Ok(serde_json::Value::String(text).to_string()));
        }
        KeyReading::Pinned(KeyFormat::Bytes) => {
            return Ok(Ok(serde_json::Value::String(bytea_hex(key)).to_string()));
        }
        KeyReading::Pinned(KeyFormat::Registry(format)) => format,
    };
    let way_out = format!(
        "the table reads {} keys from the registry (its key format, pinned at CREATE TABLE); a table created with KEY FORMAT TEXT VALUE FORMAT ... reads keys as text",
        format.as_str().to_ascii_uppercase()
    );
    let Some((id, datum)) = wire(key) else {
        return Ok(Err(format!(
            "its key has no schema registry header (a zero byte and a 4-byte schema id), and {way_out}"
        )));
    };
    let writer = match fetched(writers, registry, id)? {
        Ok(writer) => writer,
        Err(why) => return Ok(Err(format!("its key {why}"))),
    };
    let written = match &*writer {
        WriterSchema::Avro { .. } => evolve_core::control::TableFormat::Avro,
        WriterSchema::Json { .. } => evolve_core::control::TableFormat::Json,
        WriterSchema::Protobuf(_) => evolve_core::control::TableFormat::Protobuf,
    };
    if written != format {
        return Ok(Err(format!(
            "its key names writer schema id {id}, which is {}, and {way_out}",
            writer.what()
        )));
    }
    Ok(registry_key(&writer, id, datum))
}

/// A key's `datum` (what follows its wire header, which named schema
/// `id`) read with `writer`, as JSON text.
fn registry_key(
    writer: &WriterSchema,
    id: u32,
    datum: &[u8],
) -> std::result::Result<String, String> {
    let (schema, names) = match writer {
        WriterSchema::Avro { schema, names, .. } => (schema, names),
        WriterSchema::Json { .. } => return json::key_json(datum),
        WriterSchema::Protobuf(w) => return protobuf_key(datum, w),
    };
    let mut bytes = datum;
    let read = GenericDatumReader::builder(schema.root())
        .writer_schemata(avro::schemata(schema))
        .and_then(|b| b.build())
        .and_then(|r| r.read_value(&mut bytes));
    match read {
        Ok(v) => avro::key_json(&v, schema.root(), names),
        Err(e) => Err(format!(
            "its key cannot be decoded with schema id {id}: {e}"
        )),
    }
}

/// `bytes` in bytea's hex form: `\x0102`.
fn bytea_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(2 + 2 * bytes.len());
    hex.push_str("\\x");
    for b in bytes {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

// -------------------------------------------------------------- source

/// A Kafka topic as a [`Source`].
pub struct KafkaSource {
    source: SourceInfo,
    connection: Connection,
    state_dir: PathBuf,
    /// The source's tables (for the stream).
    tables: Vec<TableInfo>,
    /// The registry connections its tables name.
    registries: Vec<(String, Connection)>,
    /// Keys an upsert snapshot keeps in memory
    /// ([`crate::config::DEFAULT_KAFKA_SNAPSHOT_MEMORY_KEYS`] unless set).
    memory_keys: usize,
}

impl KafkaSource {
    pub fn new(
        source: SourceInfo,
        connection: Connection,
        state_dir: PathBuf,
        tables: Vec<TableInfo>,
        registries: Vec<(String, Connection)>,
    ) -> KafkaSource {
        KafkaSource {
            source,
            connection,
            state_dir,
            tables,
            registries,
            memory_keys: crate::config::DEFAULT_KAFKA_SNAPSHOT_MEMORY_KEYS,
        }
    }

    /// Sets how many keys an `ENVELOPE UPSERT` snapshot keeps in memory
    /// before they move to a file in the state directory.
    pub fn with_snapshot_memory_keys(mut self, keys: usize) -> KafkaSource {
        self.memory_keys = keys;
        self
    }

    fn topic(&self) -> &str {
        &self.source.publication
    }
}

impl Source for KafkaSource {
    type Stream = KafkaStream;
    type Snapshot = KafkaSnapshot;

    async fn stream(&self, from: Position) -> Result<KafkaStream> {
        self.stream_resuming(from, None, HashMap::new()).await
    }

    /// A topic's table knows its columns from its pinned reader schema:
    /// the schema history is not needed.
    async fn stream_resuming(
        &self,
        from: Position,
        state: Option<String>,
        _schemas: HashMap<u32, Arc<TableSchema>>,
    ) -> Result<KafkaStream> {
        let offsets = match state.as_deref() {
            Some(text) => Offsets::from_json(text).ok_or_else(|| PipelineError::Replication {
                source_name: self.source.name.clone(),
                message: "its stored topic offsets are not readable (store damaged?)".into(),
            })?,
            None => Offsets::default(),
        };
        let mut readers = Vec::new();
        for t in &self.tables {
            if t.kafka.is_some() {
                readers.push(Reader::new(t)?);
            }
        }
        let writers = Writers::new(&self.registries)?;
        let (tx, rx) = mpsc::channel::<Result<Raw>>(BATCH * 2);
        let name = self.source.connection.clone();
        let connection = self.connection.clone();
        let topic = self.topic().to_string();
        let group = format!("evolve-{}", self.source.slot);
        let start = offsets.clone();
        let source_name = self.source.name.clone();
        let assigned = blocking(move || {
            let consumer = consumer(&name, &connection, &group)?;
            let marks = watermarks(&name, &connection, &consumer, &topic)?;
            // A partition the source read that the topic no longer has:
            // partitions are never removed, so the topic was deleted and
            // created again with fewer.
            if let Some((p, o)) = start
                .0
                .iter()
                .find(|(p, o)| **o > 0 && !marks.iter().any(|(q, _, _)| q == *p))
            {
                return Err(PipelineError::OffsetsLost {
                    source_name: source_name.clone(),
                    detail: format!(
                        "Topic \"{topic}\" has {} partition{}, and the source has read partition {p} up to offset {o}: the topic was deleted and created again, and which of its records are new cannot be told.",
                        marks.len(),
                        if marks.len() == 1 { "" } else { "s" }
                    ),
                });
            }
            let mut checks = Vec::new();
            let mut list = TopicPartitionList::new();
            for (p, low, high) in &marks {
                let offset = match start.0.get(p) {
                    Some(o) if *o < *low => {
                        return Err(PipelineError::OffsetsLost {
                            source_name: source_name.clone(),
                            detail: format!(
                                "Partition {p} of topic \"{topic}\" no longer holds offset {o}: it starts at {low} now, so retention or compaction removed records the source had not read."
                            ),
                        });
                    }
                    // Its end is before where the source has read: not
                    // the records the source read (the topic was deleted
                    // and created again, or lost records), and which of
                    // them are new cannot be told.
                    Some(o) if *o > *high => {
                        return Err(PipelineError::OffsetsLost {
                            source_name: source_name.clone(),
                            detail: format!(
                                "Partition {p} of topic \"{topic}\" ends at offset {high}, before offset {o} that the source has read up to: the topic was deleted and created again, or lost records, and which of its records are new cannot be told."
                            ),
                        });
                    }
                    Some(o) => Offset::Offset(*o),
                    None => Offset::Beginning,
                };
                if let (Some(o), Some(f)) = (start.0.get(p), start.1.get(p))
                    && *o > *low
                {
                    checks.push((*p, *o, *f));
                }
                list.add_partition_offset(&topic, *p, offset)
                    .map_err(|e| kafka_error(&name, "assign partitions", e))?;
            }
            verify_last(&name, &connection, &group, &topic, &source_name, &checks)?;
            consumer
                .assign(&list)
                .map_err(|e| kafka_error(&name, "assign partitions", e))?;
            let partitions: HashSet<i32> = marks.iter().map(|(p, _, _)| *p).collect();
            Ok((consumer, name, topic, partitions))
        })
        .await?;
        let (consumer, name, topic, partitions) = assigned;
        std::thread::Builder::new()
            .name(format!("kafka-{}", self.source.name))
            .spawn(move || poll_loop(consumer, tx, &name, &topic, partitions))
            .map_err(|e| kafka_error(&self.source.connection, "start the consumer", e))?;
        Ok(KafkaStream {
            source: self.source.clone(),
            topic: self.topic().to_string(),
            state_dir: self.state_dir.clone(),
            store: None,
            records: rx,
            batch: Vec::new(),
            position: from,
            queued: from,
            offsets,
            readers,
            writers,
            queue: VecDeque::new(),
            announced: HashSet::new(),
            markers_sent: HashSet::new(),
            markers_checked: Instant::now() - MARKER_POLL,
            tables: self.tables.iter().map(|t| t.name.clone()).collect(),
            skipped: HashMap::new(),
        })
    }

    async fn snapshot(&self, table: &TableInfo) -> Result<KafkaSnapshot> {
        // The boundary: the last stored position and its offsets.
        let store = Store::open(&self.state_dir)?;
        // Both in one read: a pair the stream stored together.
        let (applied, resume) = store.read_consistent(|s| {
            Ok((
                s.applied_lsn(&self.source.name)?,
                s.resume_state(&self.source.name)?,
            ))
        })?;
        let offsets = resume
            .as_deref()
            .and_then(Offsets::from_json)
            .unwrap_or_default();
        drop(store);
        let reader = Reader::new(table)?;
        let writers = Writers::new(&self.registries)?;
        let (name, connection, topic) = (
            self.source.connection.clone(),
            self.connection.clone(),
            self.topic().to_string(),
        );
        let target = offsets.clone();
        let upsert = reader.upsert;
        // A table of one record type of several: which values are its
        // type's, told by their writer schemas, fetched as the first pass
        // meets their ids.
        let ours: Option<Ours> = match (&reader.record_type, upsert) {
            (Some(wanted), true) => Some(Ours {
                writers: Writers::new(&self.registries)?,
                registry: reader.registry.clone(),
                wanted: wanted.clone(),
                runtime: tokio::runtime::Handle::current(),
                skipped: 0,
            }),
            _ => None,
        };
        let group = format!("evolve-{}-snapshot", self.source.slot);
        // Where an upsert snapshot's keys go past what memory keeps.
        let spill = self
            .state_dir
            .join(format!("snapshot-keys-{}.sqlite", table.id));
        let memory_keys = self.memory_keys;
        tracing::debug!(
            table = %table.name,
            position = %Position::from_u64(applied.as_u64() + 1),
            offsets = %offsets.to_json(),
            "kafka snapshot reading"
        );
        let (tx, chunks) = mpsc::channel(2);
        std::thread::Builder::new()
            .name(format!("kafka-snapshot-{}", table.id))
            .spawn(move || {
                let spill = upsert.then_some((spill.as_path(), memory_keys, ours));
                let read = read_until(&name, &connection, &group, &topic, &target, spill, &tx);
                // The end, or why it came early; nobody listens any more
                // when the snapshot was dropped.
                let _ = tx.blocking_send(read.map(|()| SnapshotChunk::End));
            })
            .map_err(|e| {
                kafka_error(&self.source.connection, "start the snapshot's consumer", e)
            })?;
        // The document columns in attnum order, then the key column.
        let order: Vec<usize> = table
            .columns
            .iter()
            .filter(|c| !c.excluded)
            .chain(table.columns.iter().filter(|c| c.key && c.excluded))
            .filter_map(|c| reader.table_schema.column(&c.name))
            .collect();
        Ok(KafkaSnapshot {
            position: Position::from_u64(applied.as_u64() + 1),
            table: table.name.clone(),
            topic: self.topic().to_string(),
            reader,
            writers,
            chunks,
            order,
            ended: false,
            skipped: 0,
        })
    }
}

/// How many records a snapshot's reader hands over at a time.
const SNAPSHOT_CHUNK: usize = 5_000;

/// Which record values are of the record type a snapshot's table reads
/// (a table pinned with `SUBJECT`), by their writer schemas, fetched
/// through the runtime's handle as the first pass meets their ids; they
/// go to the snapshot's decoding afterwards ([`SnapshotChunk::Writers`]),
/// so the registry is asked once per id.
struct Ours {
    writers: Writers,
    registry: String,
    wanted: String,
    runtime: tokio::runtime::Handle,
    /// The values found to be of another type.
    skipped: u64,
}

impl Ours {
    fn is_ours(&mut self, value: &[u8]) -> Result<bool> {
        let Some((id, datum)) = wire(value) else {
            // Decoding reports it.
            return Ok(true);
        };
        self.runtime
            .block_on(self.writers.fetch(&self.registry, id))?;
        let ours = match self.writers.cached(&self.registry, id) {
            Some(Ok(writer)) => writer.is_type(datum, &self.wanted),
            // An id that cannot be read: decoding reports it.
            _ => true,
        };
        if !ours {
            self.skipped += 1;
        }
        Ok(ours)
    }
}

/// What a snapshot's reader thread hands to [`KafkaSnapshot`].
enum SnapshotChunk {
    /// The writer schemas the first pass fetched (see [`Ours`]).
    Writers(Writers),
    /// The records of other types the first pass left out (see [`Ours`]).
    Skipped(u64),
    Records(Vec<Raw>),
    /// Every record is handed over.
    End,
}

/// Reads `topic` from its beginning up to `target` (exclusive; a
/// partition not in it is read to nothing) and hands its records to `out`
/// in chunks: every record, or with `upsert` each key's last record
/// unless that is a tombstone (and the keyless records, which decoding
/// refuses). For `upsert` a first pass finds those records, keeping only
/// keys and offsets, and a second hands them over: the memory a snapshot
/// needs grows with the topic's keys, not with its values, and past
/// the number of keys `upsert` gives they move to the file it names.
/// With [`Ours`], a key's last record is its last of the table's type (a
/// tombstone still removes the key). Returns early, with `Ok`, when
/// `out` is closed.
fn read_until(
    name: &str,
    connection: &Connection,
    group: &str,
    topic: &str,
    target: &Offsets,
    upsert: Option<(&std::path::Path, usize, Option<Ours>)>,
    out: &mpsc::Sender<Result<SnapshotChunk>>,
) -> Result<()> {
    let consumer = consumer(name, connection, group)?;
    let marks = watermarks(name, connection, &consumer, topic)?;
    let ends: HashMap<i32, i64> = marks
        .iter()
        .filter_map(|(p, low, _)| {
            let end = target.0.get(p).copied().unwrap_or(0);
            (end > *low).then_some((*p, end))
        })
        .collect();
    let mut chunk: Vec<Raw> = Vec::with_capacity(SNAPSHOT_CHUNK);
    // Hands `chunk` over; false when nobody listens any more.
    let hand = |chunk: &mut Vec<Raw>| {
        let full = std::mem::replace(chunk, Vec::with_capacity(SNAPSHOT_CHUNK));
        full.is_empty() || out.blocking_send(Ok(SnapshotChunk::Records(full))).is_ok()
    };
    let Some((spill, memory_keys, mut ours)) = upsert else {
        scan(&consumer, name, topic, &ends, |m| {
            chunk.push(Raw::of(m));
            Ok(chunk.len() < SNAPSHOT_CHUNK || hand(&mut chunk))
        })?;
        hand(&mut chunk);
        return Ok(());
    };
    let mut live = last::LastRecords::new(spill, memory_keys);
    let mut keyless: Option<Raw> = None;
    // Keys and offsets only: the values are read again in the second pass.
    scan(&consumer, name, topic, &ends, |m| {
        match (m.key(), m.payload()) {
            (Some(key), Some(value)) => {
                if ours.as_mut().map_or(Ok(true), |ours| ours.is_ours(value))? {
                    live.set(key, (m.partition(), m.offset()))?;
                }
            }
            (Some(key), None) => live.remove(key)?,
            (None, _) => {
                keyless.get_or_insert_with(|| Raw::of(m));
            }
        }
        // Nobody listens any more: the snapshot was dropped.
        Ok(!out.is_closed())
    })?;
    if out.is_closed() {
        return Ok(());
    }
    if let Some(ours) = ours
        && (out
            .blocking_send(Ok(SnapshotChunk::Skipped(ours.skipped)))
            .is_err()
            || out
                .blocking_send(Ok(SnapshotChunk::Writers(ours.writers)))
                .is_err())
    {
        return Ok(());
    }
    if let Some(raw) = keyless {
        // Decoding reports it, with its offset.
        chunk.push(raw);
        if !hand(&mut chunk) {
            return Ok(());
        }
    }
    let keys = live.len()?;
    if keys == 0 {
        return Ok(());
    }
    let mut found = 0u64;
    scan(&consumer, name, topic, &ends, |m| {
        let last = match m.key() {
            Some(key) => live.is_last(key, (m.partition(), m.offset()))?,
            None => false,
        };
        if last {
            found += 1;
            chunk.push(Raw::of(m));
        }
        Ok(chunk.len() < SNAPSHOT_CHUNK || hand(&mut chunk))
    })?;
    if hand(&mut chunk) && found < keys {
        // Log compaction removes a record once a later one of its key is
        // written; that later record is past the snapshot's end, so the
        // stream reads it.
        tracing::warn!(
            source = name,
            topic,
            missing = keys - found,
            "records of the snapshot's first pass were compacted away before its second; their keys come back with the later records the stream reads"
        );
    }
    Ok(())
}

/// Reads the partitions of `ends` from their beginning up to their end
/// offset (exclusive), each record to `each` (which copies what it keeps)
/// until it returns false.
fn scan(
    consumer: &BaseConsumer,
    name: &str,
    topic: &str,
    ends: &HashMap<i32, i64>,
    mut each: impl FnMut(&BorrowedMessage<'_>) -> Result<bool>,
) -> Result<()> {
    if ends.is_empty() {
        return Ok(());
    }
    let mut list = TopicPartitionList::new();
    for p in ends.keys() {
        list.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(|e| kafka_error(name, "assign partitions", e))?;
    }
    consumer
        .assign(&list)
        .map_err(|e| kafka_error(name, "assign partitions", e))?;
    let mut open = ends.clone();
    // When a poll last found nothing after records (`None` while they
    // come: the clock is read when a poll comes back empty, not per record).
    let mut idle_since: Option<Instant> = None;
    while !open.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                idle_since = None;
                let p = m.partition();
                let Some(&end) = open.get(&p) else {
                    continue;
                };
                if m.offset() >= end {
                    open.remove(&p);
                    continue;
                }
                if m.offset() + 1 >= end {
                    open.remove(&p);
                }
                if !each(&m)? {
                    return Ok(());
                }
            }
            Some(Err(e)) => return Err(kafka_error(name, &format!("read topic \"{topic}\""), e)),
            None => {
                // Transaction markers and compaction leave gaps: a
                // partition whose consumer position reached the end is
                // done.
                if let Ok(positions) = consumer.position() {
                    for e in positions.elements() {
                        if let Offset::Offset(o) = e.offset()
                            && open.get(&e.partition()).is_some_and(|end| o >= *end)
                        {
                            open.remove(&e.partition());
                        }
                    }
                }
                if idle_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(60) {
                    return Err(kafka_error(
                        name,
                        &format!("read topic \"{topic}\""),
                        "no record for 60 s before the snapshot's end offsets",
                    ));
                }
            }
        }
    }
    consumer
        .unassign()
        .map_err(|e| kafka_error(name, "unassign partitions", e))
}

/// Checks that the record before each offset of `checks` (partition,
/// stored offset, fingerprint) is still the one the source read there:
/// a topic deleted and created again may hold as many records as the
/// source had read, or more, and reading it from the old offsets would
/// skip its first records. A record compacted away since, or a
/// partition that answers nothing within [`METADATA_TIMEOUT`], is not
/// checked.
fn verify_last(
    name: &str,
    connection: &Connection,
    group: &str,
    topic: &str,
    source_name: &str,
    checks: &[(i32, i64, u64)],
) -> Result<()> {
    if checks.is_empty() {
        return Ok(());
    }
    let consumer = consumer(name, connection, group)?;
    let mut list = TopicPartitionList::new();
    let mut open: HashMap<i32, (i64, u64)> = HashMap::new();
    for (p, o, f) in checks {
        list.add_partition_offset(topic, *p, Offset::Offset(o - 1))
            .map_err(|e| kafka_error(name, "assign partitions", e))?;
        open.insert(*p, (*o, *f));
    }
    consumer
        .assign(&list)
        .map_err(|e| kafka_error(name, "assign partitions", e))?;
    let deadline = Instant::now() + METADATA_TIMEOUT;
    while !open.is_empty() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let Some((o, f)) = open.remove(&m.partition()) else {
                    continue;
                };
                if m.offset() == o - 1 && fingerprint(&Raw::of(&m)) != f {
                    return Err(PipelineError::OffsetsLost {
                        source_name: source_name.to_string(),
                        detail: format!(
                            "Partition {} of topic \"{topic}\" holds another record at offset {} than the one the source read there: the topic was deleted and created again, and which of its records are new cannot be told.",
                            m.partition(),
                            o - 1
                        ),
                    });
                }
            }
            Some(Err(e)) => {
                return Err(kafka_error(name, &format!("read topic \"{topic}\""), e));
            }
            None => {
                // A record compacted away with nothing after it (a
                // tombstone past delete.retention.ms): the consumer's
                // position moved past it, and there is nothing to check.
                if let Ok(positions) = consumer.position() {
                    for e in positions.elements() {
                        if let Offset::Offset(at) = e.offset()
                            && open.get(&e.partition()).is_some_and(|(o, _)| at >= *o)
                        {
                            open.remove(&e.partition());
                        }
                    }
                }
            }
        }
    }
    if !open.is_empty() {
        tracing::warn!(source = source_name, topic, partitions = ?open.keys().collect::<Vec<_>>(), "could not read the last records the source read, to check that the topic is the one it read");
    }
    Ok(())
}

/// The consumer's thread: polls and hands records to the stream until the
/// stream is gone.
fn poll_loop(
    consumer: BaseConsumer,
    tx: mpsc::Sender<Result<Raw>>,
    name: &str,
    topic: &str,
    mut partitions: HashSet<i32>,
) {
    let mut checked = Instant::now();
    // Records since the clock was last read: it is read after an empty
    // poll and every 64th record, not for each one.
    let mut unclocked = 0u32;
    loop {
        if tx.is_closed() {
            return;
        }
        unclocked += 1;
        if unclocked >= 64 {
            unclocked = 0;
            if checked.elapsed() >= PARTITION_CHECK {
                checked = Instant::now();
                match assign_new_partitions(&consumer, topic, &mut partitions) {
                    Ok(None) => {}
                    Ok(Some(gone)) => {
                        // The stream reopens, and checks the topic it
                        // finds then against what it read.
                        let _ = tx.blocking_send(Err(kafka_error(
                            name,
                            &format!("read topic \"{topic}\""),
                            gone,
                        )));
                        return;
                    }
                    Err(e) => {
                        // Looked for again at the next check; reading goes on.
                        tracing::debug!(source = name, topic, error = %e, "could not look for new partitions");
                    }
                }
            }
        }
        let item = match consumer.poll(Duration::from_millis(100)) {
            None => {
                unclocked = 64;
                continue;
            }
            Some(Ok(m)) => Ok(Raw::of(&m)),
            Some(Err(e)) => Err(kafka_error(name, &format!("read topic \"{topic}\""), e)),
        };
        let failed = item.is_err();
        if tx.blocking_send(item).is_err() || failed {
            return;
        }
    }
}

/// Adds the partitions of `topic` that are not in `partitions` (added to
/// the topic since the stream opened) to the consumer's assignment, each
/// from its beginning, as a reopened stream reads a partition its stored
/// offsets do not name: their records come after the transactions already
/// delivered, and their offsets go into the next ones' resume states.
/// `Some` says why the stream must reopen instead: the topic is gone, or
/// has fewer partitions than it read (deleted and created again).
fn assign_new_partitions(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &mut HashSet<i32>,
) -> KafkaResult<Option<String>> {
    let metadata = consumer.fetch_metadata(Some(topic), METADATA_TIMEOUT)?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    if let Some(code) = found.error() {
        if code == rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART {
            return Ok(Some(
                "the topic was deleted while the source read it".to_string(),
            ));
        }
        return Ok(None);
    }
    let now = found.partitions().len();
    if now < partitions.len() {
        return Ok(Some(format!(
            "the topic has {now} partitions now, fewer than the {} the source read: it was deleted and created again",
            partitions.len()
        )));
    }
    let mut list = TopicPartitionList::new();
    let mut added = Vec::new();
    for p in found.partitions() {
        if !partitions.contains(&p.id()) {
            list.add_partition_offset(topic, p.id(), Offset::Beginning)?;
            added.push(p.id());
        }
    }
    if added.is_empty() {
        return Ok(None);
    }
    consumer.incremental_assign(&list)?;
    tracing::info!(topic, partitions = ?added, "reading partitions added to the topic");
    partitions.extend(added);
    Ok(None)
}

/// A Kafka source's stream.
pub struct KafkaStream {
    source: SourceInfo,
    topic: String,
    state_dir: PathBuf,
    /// The store, opened at the first look for replacement requests.
    store: Option<Store>,
    records: mpsc::Receiver<Result<Raw>>,
    /// Records taken from `records` whose transaction is not queued yet.
    batch: Vec<Raw>,
    /// The last position delivered.
    position: Position,
    /// The last position queued (at or after `position`).
    queued: Position,
    /// The next offset of each partition after it.
    offsets: Offsets,
    readers: Vec<Reader>,
    writers: Writers,
    queue: VecDeque<SourceEvent>,
    /// Tables whose schema was sent in this stream.
    announced: HashSet<u32>,
    markers_sent: HashSet<String>,
    markers_checked: Instant,
    /// The source's tables, by name: replacements of the interfaces over
    /// them are this stream's to deliver.
    tables: Vec<String>,
    /// Records of the transaction being queued that each table (by
    /// `upstream_oid`) skipped as another record type's.
    skipped: HashMap<u32, u64>,
}

impl KafkaStream {
    /// Replacement requests of this source's tables' interfaces not yet
    /// delivered in this stream.
    fn marker_requests(&mut self) -> Result<Vec<String>> {
        if self.store.is_none() {
            self.store = Some(Store::open(&self.state_dir)?);
        }
        let Some(store) = self.store.as_ref() else {
            return Ok(Vec::new());
        };
        let interfaces = store.interfaces()?;
        let mut out = Vec::new();
        for r in store.replacements()? {
            if !r.applying || self.markers_sent.contains(&r.name) {
                continue;
            }
            let ours = interfaces
                .iter()
                .any(|i| i.name == r.target && self.tables.contains(&i.table));
            if ours {
                out.push(r.name);
            }
        }
        Ok(out)
    }

    /// Queues the `Begin` of the next transaction; its end position (its
    /// commit position is the one before: an end is always after its
    /// commit, as the source contract has it).
    fn begin(&mut self, time_micros: i64) -> Position {
        let commit = Position::from_u64(self.queued.as_u64() + 1);
        let end = Position::from_u64(self.queued.as_u64() + 2);
        self.queued = end;
        self.queue.push_back(SourceEvent::Begin {
            commit,
            commit_time_micros: time_micros,
        });
        end
    }
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl ChangeStream for KafkaStream {
    async fn next(&mut self) -> Result<SourceEvent> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                if let SourceEvent::Commit { end } = &event {
                    self.position = *end;
                }
                return Ok(event);
            }
            if self.markers_checked.elapsed() >= MARKER_POLL {
                self.markers_checked = Instant::now();
                for name in self.marker_requests()? {
                    let next = self.begin(now_micros());
                    self.queue.push_back(SourceEvent::Marker {
                        prefix: MESSAGE_PREFIX.to_string(),
                        content: apply_message(&self.source.slot, &name).into_bytes(),
                    });
                    self.queue.push_back(SourceEvent::Commit { end: next });
                    self.markers_sent.insert(name);
                }
                if !self.queue.is_empty() {
                    continue;
                }
            }
            // The engine may drop this future at any await (it is one arm
            // of a select!): a batch taken from the channel is kept in
            // `self.batch` until its transaction is queued, and the
            // transaction is built without waiting.
            if self.batch.is_empty() {
                let first = tokio::time::timeout(MARKER_POLL, self.records.recv()).await;
                let first = match first {
                    Err(_) => {
                        return Ok(SourceEvent::Idle {
                            upto: self.position,
                        });
                    }
                    Ok(None) => {
                        return Err(kafka_error(
                            &self.source.connection,
                            &format!("read topic \"{}\"", self.topic),
                            "the consumer stopped",
                        ));
                    }
                    Ok(Some(r)) => r?,
                };
                self.batch.push(first);
                while self.batch.len() < BATCH {
                    match self.records.try_recv() {
                        Ok(r) => self.batch.push(r?),
                        Err(_) => break,
                    }
                }
            }
            self.writers.prefetch(&self.readers, &self.batch).await?;
            let batch = std::mem::take(&mut self.batch);
            let time = batch
                .iter()
                .filter_map(|r| r.timestamp_millis)
                .max()
                .map_or_else(now_micros, |ms| ms.saturating_mul(1_000));
            let next = self.begin(time);
            for raw in &batch {
                for i in 0..self.readers.len() {
                    let decoded = decode(&mut self.readers[i], &self.writers, &self.topic, raw)?;
                    let reader = &self.readers[i];
                    if !self.announced.contains(&reader.oid) {
                        self.announced.insert(reader.oid);
                        self.queue.push_back(SourceEvent::Schema {
                            table: reader.oid,
                            schema: Arc::clone(&reader.table_schema),
                        });
                    }
                    match decoded {
                        Decoded::Change(change) => self.queue.push_back(SourceEvent::Row {
                            table: reader.oid,
                            change,
                        }),
                        Decoded::Nothing => {}
                        Decoded::Skipped => *self.skipped.entry(reader.oid).or_default() += 1,
                        Decoded::Undecodable(problem) => {
                            self.queue.push_back(SourceEvent::Undecodable {
                                table: reader.oid,
                                problem,
                            })
                        }
                    }
                }
                self.offsets.0.insert(raw.partition, raw.offset + 1);
            }
            // Each partition's last record, to check a reopened topic by.
            let mut fingerprinted = HashSet::new();
            for raw in batch.iter().rev() {
                if fingerprinted.insert(raw.partition) {
                    self.offsets.1.insert(raw.partition, fingerprint(raw));
                }
            }
            self.queue.push_back(SourceEvent::Commit { end: next });
            tracing::debug!(
                source = %self.source.name,
                end = %next,
                records = batch.len(),
                first = ?batch.first().map(|r| (r.partition, r.offset)),
                offsets = %self.offsets.to_json(),
                "kafka transaction"
            );
        }
    }

    fn confirm(&mut self, _upto: Position) {
        // Nothing upstream to release: the offsets are the store's.
    }

    fn resume_state(&self, end: Position) -> Option<String> {
        let _ = end;
        Some(self.offsets.to_json())
    }

    fn take_skipped(&mut self) -> Vec<(u32, u64)> {
        // A batch's records are counted as it is queued, and the next
        // batch is read only once its commit is taken.
        self.skipped.drain().collect()
    }

    async fn close(self) {}
}

/// A Kafka table's snapshot: the rows read, in the copy's column order.
pub struct KafkaSnapshot {
    position: Position,
    table: String,
    topic: String,
    reader: Reader,
    writers: Writers,
    /// From the reader thread ([`read_until`]).
    chunks: mpsc::Receiver<Result<SnapshotChunk>>,
    /// Which value of a row each copied column takes.
    order: Vec<usize>,
    ended: bool,
    /// Records of other record types left out (a table pinned with
    /// `SUBJECT`), by the first pass or by decoding.
    skipped: u64,
}

impl TableSnapshot for KafkaSnapshot {
    fn position(&self) -> Position {
        self.position
    }

    async fn next_rows<F>(&mut self, mut row: F) -> Result<bool>
    where
        F: FnMut(&[Option<&[u8]>]) -> Result<()> + Send,
    {
        if self.ended {
            return Ok(false);
        }
        let raws = match self.chunks.recv().await {
            Some(Ok(SnapshotChunk::Writers(fetched))) => {
                self.writers.schemas.extend(fetched.schemas);
                self.writers.versions.extend(fetched.versions);
                return Ok(true);
            }
            Some(Ok(SnapshotChunk::Skipped(n))) => {
                self.skipped += n;
                return Ok(true);
            }
            Some(Ok(SnapshotChunk::Records(raws))) => raws,
            Some(Ok(SnapshotChunk::End)) => {
                self.ended = true;
                return Ok(false);
            }
            Some(Err(e)) => return Err(e),
            // The thread ended without saying so: not a complete copy.
            None => {
                return Err(PipelineError::Database {
                    context: format!(
                        "table \"{}\": read topic \"{}\" for its snapshot",
                        self.table, self.topic
                    ),
                    message: "the snapshot's consumer stopped before the end".into(),
                });
            }
        };
        // The registry is asked once per writer id.
        self.writers
            .prefetch(std::slice::from_ref(&self.reader), &raws)
            .await?;
        for raw in &raws {
            let r = match decode(&mut self.reader, &self.writers, &self.topic, raw)? {
                Decoded::Change(change) => match change.new {
                    Some(new) => new,
                    None => continue,
                },
                Decoded::Nothing => continue,
                Decoded::Skipped => {
                    self.skipped += 1;
                    continue;
                }
                Decoded::Undecodable(problem) => {
                    return Err(PipelineError::Document {
                        table: self.table.clone(),
                        message: problem,
                    });
                }
            };
            let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(self.order.len());
            for &i in &self.order {
                values.push(match r.get(i) {
                    Some(Datum::Text(b)) => Some(b.as_ref()),
                    _ => None,
                });
            }
            row(&values)?;
        }
        Ok(true)
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }

    async fn finish(self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumers_read_committed_and_fetch_again_soon_after_a_full_queue() {
        let connection = Connection::kafka(
            "kafka://127.0.0.1:9092",
            crate::config::KafkaOptions::default(),
        );
        let config = consumer_config("k", &connection, "evolve-s-snapshot").unwrap();
        assert_eq!(config.get("group.id"), Some("evolve-s-snapshot"));
        assert_eq!(config.get("isolation.level"), Some("read_committed"));
        // No consumer-group commit is trusted: offsets live in the store.
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        // librdkafka's default is 1 s: a snapshot's first pass, which
        // reads faster than the broker answers, took about 7 s instead of
        // 1.5 s for 1,000,000 records, idle most of the time.
        assert_eq!(config.get("fetch.queue.backoff.ms"), Some("10"));
    }

    #[test]
    fn offsets_round_trip_and_the_wire_header_is_read() {
        let o = Offsets(BTreeMap::from([(0, 12), (3, 7)]), BTreeMap::new());
        assert_eq!(o.to_json(), r#"{"0":12,"3":7}"#);
        assert_eq!(Offsets::from_json(&o.to_json()), Some(o));
        assert_eq!(Offsets::from_json("[1]"), None);
        // With the fingerprints of the last records read.
        let raw = |value: &[u8]| Raw {
            partition: 0,
            offset: 11,
            timestamp_millis: Some(1_700_000_000_000),
            key: Some(b"o1".to_vec()),
            value: Some(value.to_vec()),
        };
        assert_ne!(fingerprint(&raw(b"a")), fingerprint(&raw(b"b")));
        assert_eq!(fingerprint(&raw(b"a")), fingerprint(&raw(b"a")));
        let o = Offsets(
            BTreeMap::from([(0, 12), (3, 7)]),
            BTreeMap::from([(0, fingerprint(&raw(b"a"))), (3, 7)]),
        );
        assert_eq!(
            o.to_json(),
            format!(
                r#"{{"0":12,"3":7,"@last":{{"0":"{:016x}","3":"0000000000000007"}}}}"#,
                fingerprint(&raw(b"a"))
            )
        );
        assert_eq!(Offsets::from_json(&o.to_json()), Some(o));
        assert_eq!(wire(&[0, 0, 0, 1, 2, 9, 9]), Some((258, &[9u8, 9][..])));
        assert_eq!(wire(&[1, 0, 0, 1, 2]), None);
        assert_eq!(wire(&[0, 0, 0]), None);
    }

    /// A table pinned by an earlier version of evolve, which mapped a
    /// `oneOf` of strings to `jsonb` where this one maps it to `text`: no
    /// drift while its schema is still the subject's latest, and the
    /// mapping's difference shown once the subject has a newer schema.
    #[test]
    fn drift_compares_a_kafka_table_only_with_a_newer_schema() {
        use evolve_core::control::{TableEnvelope, TableFormat};
        let schema = serde_json::json!({"type": "object", "properties": {
            "id": {"type": "integer"},
            "tag": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "minLength": 9}]}},
            "required": ["id"]})
        .to_string();
        let latest = |id: u32| {
            let fields = json::reader_columns(&schema, false).unwrap();
            let version = crate::sink::registry::VersionedSchema {
                id,
                version: 1,
                schema_type: "JSON".into(),
                schema: schema.clone(),
                references: Vec::new(),
            };
            pinned(
                fields,
                TableEnvelope::None,
                TableFormat::Json,
                "csr",
                "t-value".into(),
                version,
                Vec::new(),
            )
        };
        let now = latest(5);
        assert_eq!(now.columns[1].type_name, "text");
        let mut earlier = now.columns.clone();
        earlier[1].type_oid = 3802;
        earlier[1].type_name = "jsonb".into();
        earlier[1].kind = evolve_core::document::TypeKind::from_builtin_oid(3802);
        let mut table = TableInfo::running_for_test("t_v1", earlier);
        table.kafka = Some(now.info);
        let drift = |latest: Pinned| {
            let columns = drift_columns(&table, 5, latest);
            let upstream = crate::drift::Upstream::Found {
                schema: table.upstream_schema.clone(),
                name: table.upstream_table.clone(),
                columns,
            };
            crate::drift::compare(&table, &upstream)
        };
        assert_eq!(drift(latest(5)), None);
        let newer = drift(latest(6)).expect("a newer schema is compared");
        assert_eq!(newer.signal, crate::drift::Signal::TypeDrift);
        assert!(
            newer.added_upstream.is_empty() && newer.dropped_upstream.is_empty(),
            "{newer:?}"
        );
        assert_eq!(newer.type_changed.len(), 1, "{newer:?}");
    }

    fn text(d: &Datum) -> &str {
        match d {
            Datum::Text(b) => std::str::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// A reader schema whose types come from references: stored with them
    /// (and an older store's form without them still read), mapped to
    /// columns, and a record of a newer writer version with the same
    /// references decoded into a document.
    #[test]
    fn a_schema_with_references_is_stored_mapped_and_decoded() {
        use crate::store::ReferencedSchema;
        use apache_avro::types::Value;

        let reference = |name: &str, subject: &str, schema: serde_json::Value| ReferencedSchema {
            name: name.into(),
            subject: subject.into(),
            version: 1,
            schema: schema.to_string(),
        };
        let country = serde_json::json!({"type": "enum", "name": "Country", "namespace": "shop",
                                         "symbols": ["NL", "DE"]});
        let address = serde_json::json!({"type": "record", "name": "Address", "namespace": "shop",
            "fields": [{"name": "street", "type": "string"}, {"name": "country", "type": "shop.Country"}]});
        let money = serde_json::json!({"type": "fixed", "name": "Money", "namespace": "shop",
                                       "size": 4, "logicalType": "decimal", "precision": 8, "scale": 2});
        let references = vec![
            reference("shop.Country", "country", country),
            reference("shop.Address", "address", address),
            reference("shop.Money", "money", money),
        ];
        let v1 = serde_json::json!({"type": "record", "name": "Order", "namespace": "shop", "fields": [
            {"name": "id", "type": "int"},
            {"name": "ship_to", "type": "shop.Address"},
            {"name": "origin", "type": "shop.Country"},
            {"name": "bill_to", "type": ["null", "shop.Address"], "default": null},
            {"name": "total", "type": "shop.Money"}]});
        let mut v2 = v1.clone();
        v2["fields"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "note", "type": ["null", "string"], "default": null}));

        let info = crate::store::KafkaTableInfo {
            registry: "csr".into(),
            envelope: "none".into(),
            format: "avro".into(),
            subject: "orders-value".into(),
            schema_id: 3,
            version: 1,
            schema: v1.to_string(),
            references: references.clone(),
            message: None,
            record_type: None,
            key_format: None,
        };
        let stored = serde_json::to_string(&info).unwrap();
        let info: crate::store::KafkaTableInfo = serde_json::from_str(&stored).unwrap();
        assert_eq!(info.references, references);
        // The form stored before references were followed: no key, read
        // as none; a schema without references is stored that way still.
        let plain = crate::store::KafkaTableInfo {
            references: Vec::new(),
            message: None,
            record_type: None,
            ..info.clone()
        };
        let older = serde_json::to_string(&plain).unwrap();
        assert!(!older.contains("references"), "{older}");
        let read: crate::store::KafkaTableInfo = serde_json::from_str(&older).unwrap();
        assert_eq!(read, plain);

        let mut table = TableInfo::running_for_test("orders_v1", Vec::new());
        table.kafka = Some(info);
        let mut reader = Reader::new(&table).unwrap();
        let columns: Vec<(&str, &str, bool)> = avro::described(&reader.fields);
        assert_eq!(
            columns,
            [
                ("id", "integer", true),
                ("ship_to", "jsonb", true),
                ("origin", "text", true),
                ("bill_to", "jsonb", false),
                ("total", "numeric(8,2)", true),
            ]
        );

        // Written with version 2, fetched by id with the same references.
        let writer = avro::parse(&v2.to_string(), &references).unwrap();
        let street = |s: &str, c: (u32, &str)| {
            Value::Record(vec![
                ("street".into(), Value::String(s.into())),
                ("country".into(), Value::Enum(c.0, c.1.into())),
            ])
        };
        let value = Value::Record(vec![
            ("id".into(), Value::Int(5)),
            ("ship_to".into(), street("Main 1", (0, "NL"))),
            ("origin".into(), Value::Enum(1, "DE".into())),
            (
                "bill_to".into(),
                Value::Union(1, Box::new(street("Side 2", (1, "DE")))),
            ),
            (
                "total".into(),
                Value::Decimal(apache_avro::Decimal::from(vec![0, 0, 0x04, 0xd2])),
            ),
            (
                "note".into(),
                Value::Union(1, Box::new(Value::String("rush".into()))),
            ),
        ]);
        let datum = apache_avro::writer::datum::GenericDatumWriter::builder(writer.root())
            .schemata(avro::schemata(&writer))
            .unwrap()
            .build()
            .unwrap()
            .write_value_to_vec(value)
            .unwrap();
        let mut writers = Writers::new(&[]).unwrap();
        writers.schemas.insert(
            ("csr".into(), 4),
            Ok(Arc::new(WriterSchema::Avro {
                names: avro::schema_names(&writer),
                schema: Box::new(writer),
                decoding: Box::new(avro::parse_for_decoding(&v2.to_string(), &references).unwrap()),
            })),
        );
        writers.schemas.insert(
            ("csr".into(), 5),
            Err("names writer schema id 5, which cannot be read: the references of writer schema id 5 form a cycle".into()),
        );
        let mut payload = vec![0, 0, 0, 0, 4];
        payload.extend(datum);
        let raw = Raw {
            partition: 0,
            offset: 7,
            timestamp_millis: None,
            key: None,
            value: Some(payload),
        };
        let Decoded::Change(change) = decode(&mut reader, &writers, "orders", &raw).unwrap() else {
            panic!("not decoded");
        };
        let new = change.new.unwrap();
        let texts: Vec<&str> = new.iter().map(text).collect();
        assert_eq!(
            texts,
            [
                "5",
                r#"{"street":"Main 1","country":"NL"}"#,
                "DE",
                r#"{"street":"Side 2","country":"DE"}"#,
                "12.34",
                "orders/0/7",
            ]
        );
        let unreadable = Raw {
            offset: 8,
            value: Some(vec![0, 0, 0, 0, 5, 0]),
            ..raw
        };
        let Decoded::Undecodable(why) =
            decode(&mut reader, &writers, "orders", &unreadable).unwrap()
        else {
            panic!("decoded");
        };
        assert_eq!(
            why,
            "record at partition 0 offset 8 names writer schema id 5, which cannot be read: the references of writer schema id 5 form a cycle"
        );

        // Without its references the schema does not parse; a reference
        // that defines another type than its name says so.
        if let Some(k) = table.kafka.as_mut() {
            k.references.clear();
        }
        let Err(e) = Reader::new(&table) else {
            panic!("read without its references");
        };
        assert!(e.to_string().contains("shop.Address"), "{e}");
        let e = avro::parse(&v1.to_string(), &references[..1]).unwrap_err();
        assert_eq!(
            e,
            "it uses the type \"shop.Address\", which neither it nor its references define; register it with a reference to the subject version that defines \"shop.Address\""
        );
        let location = serde_json::json!({"type": "record", "name": "Location", "namespace": "shop",
            "fields": [{"name": "street", "type": "string"}]});
        let wrong = vec![
            references[0].clone(),
            reference("shop.Address", "address", location),
        ];
        let e = avro::parse(&v1.to_string(), &wrong).unwrap_err();
        assert!(
            e.starts_with(
                "its reference \"shop.Address\" (subject \"address\" version 1) defines the type \"shop.Location\", not \"shop.Address\"; point the reference at the version that defines \"shop.Address\""
            ),
            "{e}"
        );
    }
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever bytes follow a record's wire header, and whatever its
        /// key holds, decoding ends in a row or a reported undecodable
        /// record, never a panic.
        #[test]
        fn arbitrary_records_never_panic(
            datum in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
            key in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24)),
        ) {
            let (mut reader, writers) = fuzz_reader();
            // A key in the wire format names the one writer schema there
            // is (the stream fetches every id a batch names before it
            // decodes): its datum is arbitrary too.
            let key = key.map(|mut key| {
                if key.len() >= 5 && key[0] == 0 {
                    key[1..5].copy_from_slice(&[0, 0, 0, 4]);
                }
                key
            });
            let raw = fuzz_record(1, key, &datum);
            match decode(&mut reader, &writers, "orders", &raw) {
                Ok(Decoded::Change(change)) => {
                    let new = change.new.unwrap();
                    proptest::prop_assert_eq!(new.len(), reader.fields.len() + 1);
                }
                Ok(Decoded::Undecodable(why)) => proptest::prop_assert!(why.contains("offset 1"), "{}", why),
                Ok(Decoded::Nothing | Decoded::Skipped) => proptest::prop_assert!(false, "nothing for a record with a value"),
                Err(e) => proptest::prop_assert!(false, "{}", e),
            }
        }
    }

    /// A record of [`fuzz_reader`]'s schema, encoded.
    fn fuzz_datum() -> Vec<u8> {
        use apache_avro::types::Value;
        let (_, writers) = fuzz_reader();
        let WriterSchema::Avro { schema: writer, .. } =
            &**writers.schemas[&("csr".to_string(), 4)].as_ref().unwrap()
        else {
            unreachable!("the fuzz writer is Avro")
        };
        let value = Value::Record(vec![
            ("id".into(), Value::Long(1)),
            ("qty".into(), Value::Int(-2)),
            ("customer".into(), Value::String("Ada".into())),
            ("blob".into(), Value::Bytes(vec![0, 255])),
            ("tags".into(), Value::Array(vec![Value::String("a".into())])),
            (
                "attrs".into(),
                Value::Map([("x".to_string(), Value::Long(7))].into()),
            ),
            (
                "note".into(),
                Value::Union(1, Box::new(Value::String("rush".into()))),
            ),
            ("state".into(), Value::Enum(1, "DONE".into())),
            (
                // The two bytes 0x04d2, fewer than decimal(10,2) could
                // need: how Java's and apache-avro's writers encode 12.34.
                "total".into(),
                Value::Decimal(apache_avro::Decimal::from(vec![0x04, 0xd2])),
            ),
            ("code".into(), Value::Fixed(3, vec![1, 2, 3])),
            ("at".into(), Value::TimestampMicros(1_700_000_000_000_000)),
            ("day".into(), Value::Date(19_000)),
            (
                "uuid".into(),
                Value::String("6f1c7e0a-2b3c-4d5e-8f90-a1b2c3d4e5f6".into()),
            ),
            ("ratio".into(), Value::Double(0.5)),
            ("ok".into(), Value::Boolean(true)),
            (
                "ship_to".into(),
                Value::Record(vec![
                    ("street".into(), Value::String("Main 1".into())),
                    ("no".into(), Value::Union(1, Box::new(Value::Int(4)))),
                    (
                        "fee".into(),
                        Value::Decimal(apache_avro::Decimal::from(vec![0xfb, 0x2e])),
                    ),
                ]),
            ),
        ]);
        apache_avro::writer::datum::GenericDatumWriter::builder(writer.root())
            .schemata(avro::schemata(writer))
            .unwrap()
            .build()
            .unwrap()
            .write_value_to_vec(value)
            .unwrap()
    }

    #[test]
    fn the_fuzzed_schemas_record_decodes() {
        let (mut reader, writers) = fuzz_reader();
        let raw = fuzz_record(1, Some(b"order-1".to_vec()), &fuzz_datum());
        let change = match decode(&mut reader, &writers, "orders", &raw).unwrap() {
            Decoded::Change(change) => change,
            Decoded::Undecodable(why) => panic!("{why}"),
            Decoded::Nothing | Decoded::Skipped => panic!("nothing"),
        };
        let new = change.new.unwrap();
        assert_eq!(text(&new[0]), "1");
        assert_eq!(text(&new[2]), "Ada");
        assert_eq!(text(&new[8]), "12.34");
        // Inside a jsonb column, a JSON number (-12.34: 0xfb2e).
        assert_eq!(text(&new[15]), r#"{"street":"Main 1","no":4,"fee":-12.34}"#);
        assert_eq!(text(new.last().unwrap()), r#""order-1""#);
    }

    /// A table's key format is pinned in its stored settings; settings
    /// stored before key formats were (no `key_format`) read every key
    /// as then: the schema a wire header names when the registry has it,
    /// else text. A pinned format reads every key its way: text (bytea's
    /// hex form when not UTF-8 or holding a NUL) never parsed as the wire
    /// format, bytes always hex, registry keys only with the header.
    #[test]
    fn keys_are_read_as_the_pinned_key_format_and_older_tables_guess() {
        use evolve_core::control::{KeyFormat, TableFormat};
        let older = r#"{"registry":"csr","envelope":"upsert","subject":"orders-value",
            "schema_id":4,"version":1,
            "schema":"{\"type\":\"record\",\"name\":\"O\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}"#;
        let info: crate::store::KafkaTableInfo = serde_json::from_str(older).unwrap();
        assert_eq!(info.key_format, None);
        assert!(
            !serde_json::to_string(&info).unwrap().contains("key_format"),
            "an older table's settings are written back as they were"
        );
        let mut table = TableInfo::running_for_test("orders_v1", Vec::new());
        table.kafka = Some(info.clone());
        assert_eq!(Reader::new(&table).unwrap().keys, KeyReading::Guess);
        let pinned = crate::store::KafkaTableInfo {
            key_format: Some("text".into()),
            ..info
        };
        let stored = serde_json::to_string(&pinned).unwrap();
        assert!(stored.contains(r#""key_format":"text""#), "{stored}");
        table.kafka = Some(serde_json::from_str(&stored).unwrap());
        assert_eq!(
            Reader::new(&table).unwrap().keys,
            KeyReading::Pinned(KeyFormat::Text)
        );
        table.kafka.as_mut().unwrap().key_format = Some("yaml".into());
        assert!(Reader::new(&table).is_err());

        // A key that looks like the wire format, naming the writer
        // schema the registry has (id 4), and that is no record of it.
        let (mut reader, writers) = fuzz_reader();
        let wire_like = vec![0, 0, 0, 0, 4, 0xff];
        let key = |reader: &mut Reader, key: &[u8]| {
            let raw = fuzz_record(7, Some(key.to_vec()), &fuzz_datum());
            match decode(reader, &writers, "orders", &raw).unwrap() {
                Decoded::Change(change) => {
                    Ok(text(change.new.unwrap().last().unwrap()).to_string())
                }
                Decoded::Undecodable(why) => Err(why),
                Decoded::Nothing | Decoded::Skipped => panic!("nothing"),
            }
        };
        assert_eq!(reader.keys, KeyReading::Guess);
        let guessed = key(&mut reader, &wire_like).unwrap_err();
        assert!(
            guessed.contains("its key cannot be decoded with schema id 4"),
            "{guessed}"
        );
        assert_eq!(key(&mut reader, b"k1").unwrap(), r#""k1""#);

        reader.keys = KeyReading::Pinned(KeyFormat::Text);
        assert_eq!(
            key(&mut reader, &wire_like).unwrap(),
            r#""\\x0000000004ff""#
        );
        assert_eq!(key(&mut reader, b"k1").unwrap(), r#""k1""#);
        assert_eq!(key(&mut reader, b"\0k").unwrap(), r#""\\x006b""#);
        assert_eq!(key(&mut reader, &[0xc3, 0xa9]).unwrap(), r#""é""#);

        reader.keys = KeyReading::Pinned(KeyFormat::Bytes);
        assert_eq!(key(&mut reader, b"k1").unwrap(), r#""\\x6b31""#);

        reader.keys = KeyReading::Pinned(KeyFormat::Registry(TableFormat::Avro));
        let bare = key(&mut reader, b"k1").unwrap_err();
        assert!(
            bare.starts_with(
                "record at partition 0 offset 7: its key has no schema registry header"
            ),
            "{bare}"
        );
        let broken = key(&mut reader, &wire_like).unwrap_err();
        assert!(
            broken.contains("its key cannot be decoded with schema id 4"),
            "{broken}"
        );
        reader.keys = KeyReading::Pinned(KeyFormat::Registry(TableFormat::Json));
        let other = key(&mut reader, &wire_like).unwrap_err();
        assert!(
            other.contains("its key names writer schema id 4, which is an Avro schema, and the table reads JSON keys"),
            "{other}"
        );
    }

    /// A record whose datum claims a 200,000,000-byte string and holds 3
    /// bytes is an undecodable record of its table, named by its offset.
    #[test]
    fn a_record_claiming_more_bytes_than_it_holds_is_undecodable() {
        let (mut reader, writers) = fuzz_reader();
        // id 0, qty 0, then the string's length, zigzag-encoded as Avro's
        // varint.
        let mut datum = vec![0, 0];
        let mut n: u64 = 400_000_000;
        while n >= 0x80 {
            datum.push((n as u8) | 0x80);
            n >>= 7;
        }
        datum.push(n as u8);
        datum.extend_from_slice(b"abc");
        let raw = fuzz_record(9, Some(b"k".to_vec()), &datum);
        let Decoded::Undecodable(why) = decode(&mut reader, &writers, "orders", &raw).unwrap()
        else {
            panic!("decoded");
        };
        assert!(
            why.starts_with(
                "record at partition 0 offset 9 cannot be decoded with writer schema id 4"
            ),
            "{why}"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// A good record with bytes changed, cut short or lengthened:
        /// decoded into a row or reported undecodable, never a panic.
        #[test]
        fn damaged_records_never_panic(
            changes in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 0..4),
            cut in proptest::option::of(proptest::prelude::any::<usize>()),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
        ) {
            let (mut reader, writers) = fuzz_reader();
            let mut datum = fuzz_datum();
            for (at, byte) in changes {
                let at = at % datum.len();
                datum[at] = byte;
            }
            if let Some(cut) = cut {
                datum.truncate(cut % (datum.len() + 1));
            }
            datum.extend_from_slice(&tail);
            let raw = fuzz_record(1, Some(b"k".to_vec()), &datum);
            match decode(&mut reader, &writers, "orders", &raw) {
                Ok(Decoded::Change(_)) | Ok(Decoded::Undecodable(_)) => {}
                Ok(Decoded::Nothing | Decoded::Skipped) => proptest::prop_assert!(false, "nothing for a record with a value"),
                Err(e) => proptest::prop_assert!(false, "{}", e),
            }
        }
    }

    /// A record at `offset` of partition 0 with `key`, and `datum` after
    /// the wire header naming writer schema id 4.
    fn fuzz_record(offset: i64, key: Option<Vec<u8>>, datum: &[u8]) -> Raw {
        let mut value = vec![0, 0, 0, 0, 4];
        value.extend_from_slice(datum);
        Raw {
            partition: 0,
            offset,
            timestamp_millis: None,
            key,
            value: Some(value),
        }
    }

    /// An ENVELOPE UPSERT reader of a schema with every kind of field,
    /// and that schema as writer schema id 4.
    fn fuzz_reader() -> (Reader, Writers) {
        let schema = serde_json::json!({"type": "record", "name": "Order", "namespace": "shop", "fields": [
            {"name": "id", "type": "long"},
            {"name": "qty", "type": "int"},
            {"name": "customer", "type": "string"},
            {"name": "blob", "type": "bytes"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "long"}},
            {"name": "note", "type": ["null", "string"], "default": null},
            {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "DONE"]}},
            {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 3}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "uuid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "ratio", "type": "double"},
            {"name": "ok", "type": "boolean"},
            {"name": "ship_to", "type": {"type": "record", "name": "Address",
                "fields": [{"name": "street", "type": "string"}, {"name": "no", "type": ["null", "int"], "default": null},
                           {"name": "fee", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}}]}}]});
        let info = crate::store::KafkaTableInfo {
            registry: "csr".into(),
            envelope: "upsert".into(),
            format: "avro".into(),
            subject: "orders-value".into(),
            schema_id: 4,
            version: 1,
            schema: schema.to_string(),
            references: Vec::new(),
            message: None,
            record_type: None,
            key_format: None,
        };
        let mut table = TableInfo::running_for_test("orders_v1", Vec::new());
        table.kafka = Some(info);
        let reader = Reader::new(&table).unwrap();
        let writer = avro::parse(&schema.to_string(), &[]).unwrap();
        let mut writers = Writers::new(&[]).unwrap();
        writers.schemas.insert(
            ("csr".into(), 4),
            Ok(Arc::new(WriterSchema::Avro {
                names: avro::schema_names(&writer),
                schema: Box::new(writer),
                decoding: Box::new(avro::parse_for_decoding(&schema.to_string(), &[]).unwrap()),
            })),
        );
        (reader, writers)
    }

    /// A `FORMAT PROTOBUF` table: the record's message indexes name the
    /// message its bytes are, a key in the wire format is read with its
    /// own schema, and a record of another message, of no message, of a
    /// writer schema the reader cannot read or of another format is
    /// undecodable with the reason.
    #[test]
    fn protobuf_records_are_read_by_their_message_indexes() {
        use prost_reflect::prost::Message as _;
        const V1: &str = r#"syntax = "proto3"; package shop;
            message Order { int64 id = 1; string customer = 2; }
            message Key { int64 id = 1; }"#;
        const V2: &str = r#"syntax = "proto3"; package shop;
            message Order { int64 id = 1; string customer = 2; string note = 3; }
            message Key { int64 id = 1; }"#;
        const BROKEN: &str = r#"syntax = "proto3"; package shop;
            message Order { string id = 1; string customer = 2; }"#;
        let info = crate::store::KafkaTableInfo {
            registry: "csr".into(),
            envelope: "upsert".into(),
            format: "protobuf".into(),
            subject: "orders-value".into(),
            schema_id: 4,
            version: 1,
            schema: V1.to_string(),
            references: Vec::new(),
            message: None,
            record_type: None,
            key_format: None,
        };
        let mut table = TableInfo::running_for_test("orders_v1", Vec::new());
        table.kafka = Some(info);
        let mut reader = Reader::new(&table).unwrap();
        let columns: Vec<(&str, &str, bool)> = avro::described(&reader.fields);
        assert_eq!(
            columns,
            [("id", "bigint", true), ("customer", "text", true)]
        );

        let parse = |text: &str| evolve_compat::protobuf::parse(text, &[]).unwrap();
        let mut writers = Writers::new(&[]).unwrap();
        // Key's id made a string: incompatible, in a message the Order
        // table does not read.
        const KEY_CHANGED: &str = r#"syntax = "proto3"; package shop;
            message Order { int64 id = 1; string customer = 2; }
            message Key { string id = 1; }"#;
        for (id, text) in [(4, V1), (5, V2), (6, BROKEN), (8, KEY_CHANGED)] {
            let schema = WriterSchema::Protobuf(parse(text));
            writers
                .schemas
                .insert(("csr".into(), id), Ok(Arc::new(schema)));
        }
        let avro = avro::parse(r#"{"type":"record","name":"Order","fields":[]}"#, &[]).unwrap();
        writers.schemas.insert(
            ("csr".into(), 7),
            Ok(Arc::new(WriterSchema::Avro {
                names: avro::schema_names(&avro),
                decoding: Box::new(avro.clone()),
                schema: Box::new(avro),
            })),
        );
        let v2 = parse(V2);
        let encoded = |message: usize, text: &str| {
            let m = v2.file().messages().nth(message).unwrap();
            prost_reflect::DynamicMessage::parse_text_format(m, text)
                .unwrap()
                .encode_to_vec()
        };
        // Wire header with `id`, then message indexes, then the message.
        let framed = |id: u8, indexes: &[u8], body: &[u8]| {
            let mut out = vec![0, 0, 0, 0, id];
            out.extend_from_slice(indexes);
            out.extend_from_slice(body);
            out
        };
        let order = encoded(0, r#"id: 1 customer: "a" note: "n""#);
        let record = |key: Vec<u8>, value: Vec<u8>| Raw {
            partition: 0,
            offset: 9,
            timestamp_millis: None,
            key: Some(key),
            value: Some(value),
        };
        let key = framed(5, &[2, 2], &encoded(1, "id: 1"));
        let values = |decoded: Decoded| match decoded {
            Decoded::Change(c) => c
                .new
                .unwrap()
                .iter()
                .map(|d| match d {
                    Datum::Text(b) => String::from_utf8(b.to_vec()).unwrap(),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>(),
            Decoded::Undecodable(why) => vec![why],
            Decoded::Nothing => Vec::new(),
            Decoded::Skipped => vec!["skipped".to_string()],
        };
        let mut read = |raw: Raw| values(decode(&mut reader, &writers, "orders", &raw).unwrap());
        // Message index [0] as the single zero byte, a newer writer.
        assert_eq!(
            read(record(key.clone(), framed(5, &[0], &order))),
            ["1", "a", r#"{"id":1}"#]
        );
        // [0] written in full.
        assert_eq!(
            read(record(key.clone(), framed(4, &[2, 0], &order)))[..2],
            ["1", "a"]
        );
        // Another message's incompatible change is not the table's.
        assert_eq!(
            read(record(key.clone(), framed(8, &[0], &order)))[..2],
            ["1", "a"]
        );
        let mut why = |raw: Raw| read(raw).remove(0);
        let other = why(record(
            key.clone(),
            framed(5, &[2, 2], &encoded(1, "id: 2")),
        ));
        assert!(
            other.contains(
                "it is a shop.Key message (message indexes [1]), and the table reads shop.Order"
            ),
            "{other}"
        );
        let missing = why(record(key.clone(), framed(5, &[2, 8], &order)));
        assert!(
            missing.contains("message indexes [4] name no message"),
            "{missing}"
        );
        let broken = why(record(key.clone(), framed(6, &[0], &order)));
        assert!(
            broken.contains(
                "has writer schema id 6, which the pinned reader schema (id 4) cannot read"
            ),
            "{broken}"
        );
        let avro = why(record(key.clone(), framed(7, &[], &[])));
        assert!(
            avro.contains("it is an Avro schema, and the table reads Protobuf (FORMAT PROTOBUF)"),
            "{avro}"
        );
        let garbage = why(record(key.clone(), framed(5, &[0], &[0x0a, 0xff])));
        assert!(garbage.contains("not a shop.Order message"), "{garbage}");

        // The record type of a record, as a table pinned from a named
        // subject tells its records by.
        let v2_writer = WriterSchema::Protobuf(parse(V2));
        assert!(v2_writer.is_type(&[2, 2], "shop.Key"));
        assert!(!v2_writer.is_type(&[2, 2], "shop.Order"));
        assert!(v2_writer.is_type(&[0], "shop.Order"));
        assert!(!v2_writer.is_type(&[2, 8], "shop.Order"));
        assert!(!v2_writer.is_type(&[2, 8], "shop.Key"));

        // A table of the second message (MESSAGE 'shop.Key') reads
        // records whose indexes are [1], and refuses the first message's.
        table.kafka.as_mut().unwrap().message = Some("shop.Key".into());
        let mut keys = Reader::new(&table).unwrap();
        let mut read = |raw: Raw| values(decode(&mut keys, &writers, "orders", &raw).unwrap());
        assert_eq!(
            read(record(
                key.clone(),
                framed(5, &[2, 2], &encoded(1, "id: 2"))
            )),
            ["2", r#"{"id":1}"#]
        );
        // Its own message's incompatible change stalls it.
        let changed = read(record(
            key.clone(),
            framed(8, &[2, 2], &encoded(1, "id: 2")),
        ))
        .remove(0);
        assert!(
            changed.contains(
                "has writer schema id 8, which the pinned reader schema (id 4) cannot read"
            ) && changed.contains("shop.Key"),
            "{changed}"
        );
        let first = read(record(key, framed(5, &[0], &order))).remove(0);
        assert!(
            first.contains("it is a shop.Order message (message indexes [0]), and the table reads shop.Key; a table of shop.Order is created with FORMAT PROTOBUF MESSAGE 'shop.Order'"),
            "{first}"
        );
    }
}
