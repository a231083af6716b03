//! The embedded store: `state_dir/pipeline.db`, SQLite in WAL mode with
//! `synchronous=FULL`. It holds the catalog (sources, tables with their
//! pinned columns, interfaces, sinks), each table's current documents
//! (`rows`: key bytes → document bytes), each source's applied position,
//! and each interface's change feed (`feed_log`: one record per interface
//! and upstream transaction holding its changes in order, each a key with
//! its old and new document; see `crate::feed`), which sinks that fell
//! behind and subscribers read and which is pruned once every sink has
//! committed it. For each pending replacement whose two tables are
//! hydrated it keeps the keys whose documents differ between them
//! (`differing_keys`), written in the same transactions as the documents,
//! so that the swap reads only those.
//!
//! Positions are LSNs stored as integers: a transaction's position is the
//! end LSN of its commit record (what the slot is confirmed with).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::position::Position;
use evolve_core::change::TableSchema;
use evolve_core::document::TypeKind;
use rusqlite::{Connection, OptionalExtension, params};

use crate::doc::{kind_from_json, kind_to_json};
use crate::error::{ObjectKind, PipelineError, Result};

/// A source: an upstream database reached through a named connection, with
/// a publication and a logical replication slot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceInfo {
    /// Its name.
    pub name: String,
    /// The connection's name in the config file.
    pub connection: String,
    /// The upstream publication.
    pub publication: String,
    /// Whether the pipeline created the publication (and drops it with the
    /// source).
    pub publication_created: bool,
    /// The upstream logical replication slot.
    pub slot: String,
    /// The end LSN of the last upstream transaction applied to the state.
    #[serde(serialize_with = "ser_lsn")]
    pub applied_lsn: Position,
    /// `DROP SOURCE` was run: the source no longer streams, and leaves the
    /// catalog once its slot is dropped upstream.
    pub dropping: bool,
    /// Why the last `DROP SOURCE` could not drop the slot.
    pub drop_error: Option<String>,
    /// What kind of upstream it reads (`sources.kind`): the engine starts
    /// the matching implementation of `Source`.
    pub kind: SourceKind,
}

/// The kind of upstream a source reads: data in the catalog, as
/// [`SinkKind`] is for sinks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// PostgreSQL: a publication and a logical replication slot. Every
    /// source of a store written before kinds were recorded.
    #[default]
    Postgres,
    /// MySQL or MariaDB: the row-based binlog (no slot, no publication;
    /// `slot` and `publication` are kept as names only).
    Mysql,
    /// A Kafka topic (named by `publication`; `slot` is kept as a name
    /// only): positions count the source's transactions and the resume
    /// state holds the topic's offsets ([`crate::source::kafka`]).
    Kafka,
}

impl SourceKind {
    /// The catalog's name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Postgres => "postgres",
            SourceKind::Mysql => "mysql",
            SourceKind::Kafka => "kafka",
        }
    }

    /// The kind named `s`, if this release knows it.
    pub fn parse(s: &str) -> Option<SourceKind> {
        match s {
            "postgres" => Some(SourceKind::Postgres),
            "mysql" => Some(SourceKind::Mysql),
            "kafka" => Some(SourceKind::Kafka),
            _ => None,
        }
    }
}

fn ser_lsn<S: serde::Serializer>(lsn: &Position, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&lsn.to_string())
}

/// One upstream column as pinned when the table was created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnInfo {
    /// The attribute name.
    pub name: String,
    /// `attnum`.
    pub attnum: i16,
    /// `atttypid`.
    pub type_oid: u32,
    /// `atttypmod`.
    pub typmod: i32,
    /// `format_type(atttypid, atttypmod)`.
    pub type_name: String,
    /// `attnotnull`.
    pub not_null: bool,
    /// How its text becomes JSON (TEXT COLUMNS are [`TypeKind::Text`]).
    pub kind: TypeKind,
    /// In EXCLUDE COLUMNS: not part of the document.
    pub excluded: bool,
    /// In TEXT COLUMNS.
    pub as_text: bool,
    /// Part of the key (primary key or replica identity index).
    pub key: bool,
    /// The labels of the enums a column's type is or holds (an array's
    /// elements, a domain's base type, a composite's attributes, a range's
    /// subtype, at any depth) when it was pinned, by enum and then in each
    /// enum's sort order: renaming one upstream changes documents without
    /// a row change. `None` for types without an enum, and for tables
    /// pinned before labels were kept (before arrays, domains, composites
    /// and ranges of enums were: those are `None` too).
    pub labels: Option<Vec<String>>,
}

/// The lifecycle of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableState {
    /// Created; its snapshot has not started.
    Pending,
    /// Its snapshot is being copied (restarted from scratch after a crash).
    Snapshotting,
    /// Its snapshot is copied; the source's task has still to apply what
    /// the stream brought for it meanwhile (its pending changes).
    Copied,
    /// Snapshot done; the stream applies to it.
    Running,
    /// The stream can no longer apply to it (see the error).
    Stalled,
}

impl TableState {
    /// The state's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            TableState::Pending => "pending",
            TableState::Snapshotting => "snapshotting",
            TableState::Copied => "copied",
            TableState::Running => "running",
            TableState::Stalled => "stalled",
        }
    }

    /// Whether the stream applies to the table directly (otherwise its
    /// changes are kept as pending until its snapshot is in).
    pub fn is_hydrated(self) -> bool {
        matches!(self, TableState::Running | TableState::Stalled)
    }

    /// The state named `s`, as stored; `None` for any other text (a store
    /// written by a newer release, or damaged).
    fn parse(s: &str) -> Option<TableState> {
        Some(match s {
            "pending" => TableState::Pending,
            "snapshotting" => TableState::Snapshotting,
            "copied" => TableState::Copied,
            "running" => TableState::Running,
            "stalled" => TableState::Stalled,
            _ => return None,
        })
    }
}

/// A versioned ingestion of one upstream table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Internal id (keys its rows).
    pub id: i64,
    /// Its name, e.g. `orders_v1`.
    pub name: String,
    /// The source it reads.
    pub source: String,
    /// The upstream schema.
    pub upstream_schema: String,
    /// The upstream table.
    pub upstream_table: String,
    /// The upstream table's OID when the table was created.
    pub upstream_oid: u32,
    /// Every upstream column, pinned, in attnum order.
    pub columns: Vec<ColumnInfo>,
    /// Its state.
    pub state: TableState,
    /// Why it is stalled.
    pub error: Option<String>,
    /// The snapshot's consistent point: the stream applies to this table
    /// the transactions whose commit LSN is at or after it.
    pub snapshot_lsn: Option<Position>,
    /// Rows copied by the snapshot so far.
    pub rows_copied: u64,
    /// How a table of a Kafka source reads its records; `None` for the
    /// tables of other sources.
    pub kafka: Option<KafkaTableInfo>,
}

/// How a Kafka table reads its topic: the registry, the envelope, and the
/// reader schema pinned at `CREATE TABLE` (the subject's latest version
/// then).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KafkaTableInfo {
    /// The registry's connection, by name.
    pub registry: String,
    /// `upsert`, `none` or `debezium`.
    pub envelope: String,
    /// `avro` or `json` (JSON Schema); stores written before JSON tables
    /// leave it out, and it is read as `avro`.
    #[serde(default = "avro_format")]
    pub format: String,
    /// The value subject (TopicNameStrategy: `<topic>-value`).
    pub subject: String,
    /// The pinned reader schema's registry id and subject version.
    pub schema_id: u32,
    pub version: i64,
    /// The pinned reader schema (Avro or JSON Schema, as JSON text).
    pub schema: String,
    /// The schemas its references name, through every level, each after
    /// the ones it references, as fetched at `CREATE TABLE`: with them the
    /// schema parses without the registry. Empty for a schema without
    /// references, and in stores written before references were followed
    /// (the key is left out then, and read as empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<ReferencedSchema>,
    /// A Protobuf table's message (a full name): the one `MESSAGE` named,
    /// else the file's first. Left out for Avro and JSON tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Pinned from a subject `SUBJECT` named (a topic of several record
    /// types): the record type the table reads (the reader's full name),
    /// records of other types being other tables'. `None` for the topic's
    /// `<topic>-value`, every record the table's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_type: Option<String>,
    /// How the records' keys are written, decided at `CREATE TABLE`
    /// (`KeyFormat::as_str`: `text`, `bytes`, or the registry format of
    /// the `<topic>-key` subject's schema, `avro`, `json`, `protobuf`).
    /// `None` for an `ENVELOPE NONE` table, which reads no keys, and in
    /// stores written before key formats were pinned: such a table reads
    /// each key as it did then, with the schema its header names when it
    /// looks like Confluent's wire format and the registry has that id,
    /// else as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_format: Option<String>,
}

impl KafkaTableInfo {
    /// The `FORMAT ...` clause that pins a table like this one again (a
    /// newer version of it, or its drift check).
    pub fn spec(&self) -> evolve_core::control::KafkaTable {
        use evolve_core::control::{TableEnvelope, TableFormat};
        evolve_core::control::KafkaTable {
            registry: self.registry.clone(),
            envelope: TableEnvelope::parse(&self.envelope).unwrap_or_default(),
            format: TableFormat::parse(&self.format).unwrap_or_default(),
            key_format: self
                .key_format
                .as_deref()
                .and_then(evolve_core::control::KeyFormat::parse),
            message: self.message.clone(),
            subject: self.record_type.as_ref().map(|_| self.subject.clone()),
        }
    }
}

fn avro_format() -> String {
    "avro".into()
}

/// A schema that a reference names, as fetched from the registry
/// (`crate::sink::registry::resolve_references`): the reference and the
/// text of the version it names.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReferencedSchema {
    /// The full name the reference gives the type.
    pub name: String,
    pub subject: String,
    /// The version fetched (the registry's number for it).
    pub version: i64,
    /// Avro, as JSON text.
    pub schema: String,
}

impl ColumnInfo {
    /// Whether the table reads it from upstream: a document column, or a
    /// key column (excluded from the document or not).
    pub fn is_read(&self) -> bool {
        !self.excluded || self.key
    }

    /// A column for the engine's unit tests: no type modifier, not null
    /// when it is a key column, neither excluded nor read as text.
    #[cfg(test)]
    pub(crate) fn for_test(
        name: &str,
        attnum: i16,
        type_oid: u32,
        kind: TypeKind,
        key: bool,
    ) -> ColumnInfo {
        ColumnInfo {
            name: name.into(),
            attnum,
            type_oid,
            typmod: -1,
            type_name: String::new(),
            not_null: key,
            kind,
            excluded: false,
            as_text: false,
            key,
            labels: None,
        }
    }
}

impl TableInfo {
    /// Table `name` of source `src` ([`Store::in_memory_with_source`])
    /// over `public.t` (OID 4242) with `columns`, running from position
    /// 1, for the engine's unit tests.
    #[cfg(test)]
    pub(crate) fn running_for_test(name: &str, columns: Vec<ColumnInfo>) -> TableInfo {
        TableInfo {
            id: 0,
            name: name.into(),
            source: "src".into(),
            upstream_schema: "public".into(),
            upstream_table: "t".into(),
            upstream_oid: 4242,
            columns,
            state: TableState::Running,
            error: None,
            snapshot_lsn: Some(Position::from_u64(1)),
            rows_copied: 0,
            kafka: None,
        }
    }

    /// `schema.table` upstream.
    pub fn reference(&self) -> String {
        format!("{}.{}", self.upstream_schema, self.upstream_table)
    }

    /// The columns of the document, in attnum order.
    pub fn document_columns(&self) -> impl Iterator<Item = &ColumnInfo> {
        self.columns.iter().filter(|c| !c.excluded)
    }

    /// The key columns, in attnum order.
    pub fn key_columns(&self) -> impl Iterator<Item = &ColumnInfo> {
        self.columns.iter().filter(|c| c.key)
    }
}

/// The stable interface over a table: one document per upstream row.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceInfo {
    /// Internal id (keys its feed).
    pub id: i64,
    /// Its name.
    pub name: String,
    /// The table it currently reads.
    pub table: String,
    /// `ABSORB = 'auto'`: evolve absorbs upstream schema changes itself.
    pub absorb_auto: bool,
}

/// One column of a materialized view's output: name, type, NOT NULL.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct OutputColumn {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub not_null: bool,
}

/// A replacement of an interface: the same interface over another table
/// (`CREATE REPLACEMENT MATERIALIZED VIEW name FOR target AS ... FROM
/// table t`), swapped in by `ALTER MATERIALIZED VIEW target APPLY
/// REPLACEMENT name`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReplacementInfo {
    /// Its name.
    pub name: String,
    /// The interface it replaces.
    pub target: String,
    /// The table it reads.
    pub table: String,
    /// APPLY was requested: the source's stream swaps it in at the
    /// upstream position of the request.
    pub applying: bool,
    /// Why the last APPLY failed.
    pub error: Option<String>,
}

/// A replacement whose differing keys the store keeps: `differing_keys`
/// holds, for it, exactly the keys whose documents differ between table
/// `old` (its interface's) and table `new` (its own), as of the last
/// committed transaction. Every transaction that writes documents of
/// either table updates those keys in the same store transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TrackedReplacement {
    /// The replacement's name.
    pub name: String,
    /// The id of the table its interface reads.
    pub old: i64,
    /// The id of the table it reads.
    pub new: i64,
}

/// A PostgreSQL sink of an interface.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SinkInfo {
    /// Its name (also its row in `evolve_sink_progress`).
    pub name: String,
    /// What kind of destination it writes to.
    pub kind: SinkKind,
    /// The interface it follows.
    pub interface: String,
    /// The connection's name in the config file.
    pub connection: String,
    /// The target table's schema.
    pub target_schema: String,
    /// The target table.
    pub target_table: String,
    /// A Kafka sink's topic, format and envelope (`target_schema` and
    /// `target_table` are empty then); `None` for a PostgreSQL sink.
    pub kafka: Option<KafkaTarget>,
}

impl SinkInfo {
    /// Where it writes, for people: `schema.table`, or `topic 'orders'
    /// (json, upsert)`.
    pub fn target(&self) -> String {
        match &self.kafka {
            None => format!("{}.{}", self.target_schema, self.target_table),
            Some(k) => format!(
                "topic '{}' ({}, {})",
                k.topic,
                k.format.as_str(),
                k.envelope.as_str()
            ),
        }
    }
}

/// What a Kafka sink writes: columns `topic`, `format` and `envelope` of
/// the catalog's `sinks`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KafkaTarget {
    /// The topic the interface's changes go to.
    pub topic: String,
    /// How keys and values are encoded.
    pub format: KafkaFormat,
    /// What a record's value holds.
    pub envelope: KafkaEnvelope,
    /// `FORMAT AVRO`'s schema registry connection.
    pub registry: Option<String>,
}

/// How a Kafka sink encodes keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaFormat {
    /// The key document and the value as JSON text.
    Json,
    /// Avro records in Confluent's wire format (magic byte, schema id),
    /// the documents as strings (`connect.name` `io.debezium.data.Json`),
    /// the schemas registered in a schema registry.
    Avro,
}

impl KafkaFormat {
    /// The catalog's name of the format.
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaFormat::Json => "json",
            KafkaFormat::Avro => "avro",
        }
    }

    /// The format named `s`, if this release knows it.
    pub fn parse(s: &str) -> Option<KafkaFormat> {
        match s {
            "json" => Some(KafkaFormat::Json),
            "avro" => Some(KafkaFormat::Avro),
            _ => None,
        }
    }
}

/// What a Kafka sink's record value holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaEnvelope {
    /// The document; a delete is a tombstone (no value).
    Upsert,
    /// `{"before": .., "after": .., "op": "r" | "c" | "u" | "d"}`.
    Debezium,
}

impl KafkaEnvelope {
    /// The catalog's name of the envelope.
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaEnvelope::Upsert => "upsert",
            KafkaEnvelope::Debezium => "debezium",
        }
    }

    /// The envelope named `s`, if this release knows it.
    pub fn parse(s: &str) -> Option<KafkaEnvelope> {
        match s {
            "upsert" => Some(KafkaEnvelope::Upsert),
            "debezium" => Some(KafkaEnvelope::Debezium),
            _ => None,
        }
    }
}

/// The kind of destination a sink writes to: data in the catalog, so
/// that the engine starts the right implementation of `Sink`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    /// A PostgreSQL table `(key jsonb PRIMARY KEY, data jsonb NOT NULL)`
    /// with `evolve_sink_progress` beside it.
    Postgres,
    /// A Kafka topic written by a transactional producer, with the
    /// sink's position in the progress topic `_evolve_sink_progress`.
    Kafka,
}

impl SinkKind {
    /// The catalog's name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Postgres => "postgres",
            SinkKind::Kafka => "kafka",
        }
    }

    /// The kind named `s`, if this release knows it.
    pub fn parse(s: &str) -> Option<SinkKind> {
        match s {
            "postgres" => Some(SinkKind::Postgres),
            "kafka" => Some(SinkKind::Kafka),
            _ => None,
        }
    }
}

/// The fields a subscriber declared it reads (`evolve subscribe NAME
/// --fields a,b --as CONSUMER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declaration {
    /// The interface it follows.
    pub interface: String,
    /// Its name.
    pub consumer: String,
    /// The field paths, dotted.
    pub fields: Vec<String>,
    /// When, in seconds since the epoch.
    pub declared_at: i64,
}

/// One change of an interface's feed: the net effect of one upstream
/// transaction on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedEntry {
    /// The transaction's position (end LSN of its commit).
    pub pos: Position,
    /// The key document.
    pub key: Vec<u8>,
    /// The document before, `None` for an insert.
    pub old: Option<Vec<u8>>,
    /// The document after, `None` for a delete.
    pub new: Option<Vec<u8>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sources (
    name TEXT PRIMARY KEY,
    connection TEXT NOT NULL,
    publication TEXT NOT NULL,
    publication_created INTEGER NOT NULL,
    slot TEXT NOT NULL,
    applied_lsn INTEGER NOT NULL DEFAULT 0,
    dropping INTEGER NOT NULL DEFAULT 0,
    drop_error TEXT
);
CREATE TABLE IF NOT EXISTS tables (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL REFERENCES sources(name),
    upstream_schema TEXT NOT NULL,
    upstream_table TEXT NOT NULL,
    upstream_oid INTEGER NOT NULL,
    columns TEXT NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    snapshot_lsn INTEGER,
    rows_copied INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS interfaces (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    table_name TEXT NOT NULL REFERENCES tables(name),
    absorb TEXT NOT NULL DEFAULT 'manual',
    output TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sinks (
    name TEXT PRIMARY KEY,
    interface TEXT NOT NULL REFERENCES interfaces(name),
    connection TEXT NOT NULL,
    target_schema TEXT NOT NULL,
    target_table TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rows (
    tbl INTEGER NOT NULL,
    key BLOB NOT NULL,
    doc BLOB NOT NULL,
    PRIMARY KEY (tbl, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS feed_log (
    interface INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    part INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    entries INTEGER NOT NULL,
    changes BLOB NOT NULL,
    PRIMARY KEY (interface, pos, part)
);
CREATE TABLE IF NOT EXISTS feed_horizon (interface INTEGER PRIMARY KEY, pos INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS feed_horizon_forget AFTER DELETE ON interfaces BEGIN DELETE FROM feed_horizon WHERE interface = old.id; END;
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl INTEGER NOT NULL,
    final_lsn INTEGER NOT NULL,
    end_lsn INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    message BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_by_table ON pending (tbl, seq);
CREATE TABLE IF NOT EXISTS subscriber_fields (
    interface TEXT NOT NULL,
    consumer TEXT NOT NULL,
    fields TEXT NOT NULL,
    declared_at INTEGER NOT NULL,
    PRIMARY KEY (interface, consumer)
);
CREATE TRIGGER IF NOT EXISTS subscriber_fields_forget AFTER DELETE ON interfaces BEGIN DELETE FROM subscriber_fields WHERE interface = old.name; END;
CREATE TABLE IF NOT EXISTS replacements (
    name TEXT PRIMARY KEY,
    target TEXT NOT NULL UNIQUE REFERENCES interfaces(name),
    table_name TEXT NOT NULL REFERENCES tables(name),
    applying INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS differing_keys (
    replacement TEXT NOT NULL,
    key BLOB NOT NULL,
    PRIMARY KEY (replacement, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS schema_history (
    source TEXT NOT NULL,
    upstream_oid INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    schema TEXT NOT NULL,
    PRIMARY KEY (source, upstream_oid, pos)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS schema_history_forget AFTER DELETE ON sources BEGIN DELETE FROM schema_history WHERE source = old.name; END;
CREATE TRIGGER IF NOT EXISTS differing_keys_forget AFTER DELETE ON replacements BEGIN DELETE FROM differing_keys WHERE replacement = old.name; END;
";

/// A connection to the store. Each task opens its own; SQLite's WAL mode
/// lets readers run beside the one writer.
pub struct Store {
    pub(crate) conn: Connection,
}

impl Store {
    /// Opens (creating if needed) `state_dir/pipeline.db`.
    /// Takes the engine lock of `state_dir` (`engine.lock`: an exclusive
    /// advisory lock, which the operating system drops with the process,
    /// SIGKILL included), held as long as the file returned is: one engine
    /// per state directory, since two would stream the same slot and write
    /// the same sinks against each other. The lock file holds the process
    /// id, for the refusal's message.
    pub fn lock_engine(state_dir: &Path) -> Result<std::fs::File> {
        use std::io::{Read, Seek, Write};
        let path = state_dir.join("engine.lock");
        let io = |what: &str, e: std::io::Error| PipelineError::Store {
            context: format!("{what} {}", path.display()),
            message: e.to_string(),
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io("open", e))?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0).map_err(|e| io("write", e))?;
                file.rewind().map_err(|e| io("write", e))?;
                write!(file, "{}", std::process::id()).map_err(|e| io("write", e))?;
                Ok(file)
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                Err(PipelineError::Refused {
                    sqlstate: "55006",
                    primary: format!(
                        "state directory {} is in use by another running pipeline{}",
                        state_dir.display(),
                        if pid.is_empty() {
                            String::new()
                        } else {
                            format!(" (process {pid})")
                        }
                    ),
                    detail: None,
                    hint: Some(
                        "Stop that evolve pipeline run first, or give this one a state_dir of its own; two would stream the same slot and write the same sinks."
                            .into(),
                    ),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(io("lock", e)),
        }
    }

    pub fn open(state_dir: &Path) -> Result<Store> {
        // Made private to its user when evolve creates it: the store holds
        // upstream rows.
        let mut dir = std::fs::DirBuilder::new();
        dir.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
        dir.create(state_dir).map_err(|e| PipelineError::Store {
            context: format!("create state directory {}", state_dir.display()),
            message: format!(
                "{e}; set state_dir in evolve.toml to a directory this user can create and write"
            ),
        })?;
        let path = state_dir.join("pipeline.db");
        let ctx = || format!("open {}", path.display());
        let conn = Connection::open(&path).map_err(|e| PipelineError::store(ctx(), e))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| PipelineError::store(ctx(), e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| PipelineError::store(ctx(), e))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| PipelineError::store(ctx(), e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| PipelineError::store(ctx(), e))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| PipelineError::store(ctx(), e))?;
        upgrade(&conn).map_err(|e| PipelineError::store(ctx(), e))?;
        Ok(Store { conn })
    }

    // ---------------------------------------------------------- sources

    /// Records that `consumer`, a subscriber of `interface`, reads
    /// `fields` (replacing what it declared before).
    pub fn declare_fields(
        &self,
        interface: &str,
        consumer: &str,
        fields: &[String],
        declared_at: i64,
    ) -> Result<()> {
        let fields = serde_json::to_string(fields).unwrap_or_else(|_| "[]".into());
        self.conn
            .execute(
                "INSERT INTO subscriber_fields (interface, consumer, fields, declared_at) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (interface, consumer) \
                 DO UPDATE SET fields = excluded.fields, declared_at = excluded.declared_at",
                params![interface, consumer, fields, declared_at],
            )
            .map_err(|e| PipelineError::store("declare subscriber fields", e))?;
        Ok(())
    }

    /// Forgets what `consumer` declared (of `interface`, or of every
    /// interface); how many declarations were forgotten.
    pub fn forget_fields(&self, interface: Option<&str>, consumer: &str) -> Result<usize> {
        self.conn
            .execute(
                "DELETE FROM subscriber_fields WHERE consumer = ?1 AND (?2 IS NULL OR interface = ?2)",
                params![consumer, interface],
            )
            .map_err(|e| PipelineError::store("forget subscriber fields", e))
    }

    /// Every declaration, by interface and consumer.
    pub fn declared_fields(&self) -> Result<Vec<Declaration>> {
        let fail = |e| PipelineError::store("read subscriber fields", e);
        let mut stmt = self
            .conn
            .prepare(
                "SELECT interface, consumer, fields, declared_at FROM subscriber_fields \
                 ORDER BY interface, consumer",
            )
            .map_err(fail)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .map_err(fail)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(fail)?;
        Ok(rows
            .into_iter()
            .map(|(interface, consumer, fields, declared_at)| Declaration {
                interface,
                consumer,
                fields: serde_json::from_str(&fields).unwrap_or_default(),
                declared_at,
            })
            .collect())
    }

    /// Inserts a source.
    pub fn insert_source(&self, s: &SourceInfo) -> Result<()> {
        self.insert_source_confirmed(s, s.applied_lsn)
    }

    /// Inserts a source whose upstream has confirmed `confirmed` (a new
    /// slot's `confirmed_flush_lsn`; see [`Store::confirmed_lsn`]).
    pub fn insert_source_confirmed(&self, s: &SourceInfo, confirmed: Position) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO sources (name, connection, publication, publication_created, slot, applied_lsn, kind, confirmed_lsn) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    s.name,
                    s.connection,
                    s.publication,
                    s.publication_created,
                    s.slot,
                    s.applied_lsn.to_sql(),
                    s.kind.as_str(),
                    confirmed.to_sql()
                ],
            )
            .map_err(|e| PipelineError::store("insert source", e))?;
        Ok(())
    }

    /// Inserts a source whose applied position goes with resume state
    /// `resume_state` (see [`Store::resume_state`]), in one statement.
    pub fn insert_source_resuming(&self, s: &SourceInfo, resume_state: Option<&str>) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO sources (name, connection, publication, publication_created, slot, applied_lsn, kind, resume_state, confirmed_lsn) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?6)",
                params![
                    s.name,
                    s.connection,
                    s.publication,
                    s.publication_created,
                    s.slot,
                    s.applied_lsn.to_sql(),
                    s.kind.as_str(),
                    resume_state
                ],
            )
            .map_err(|e| PipelineError::store("insert source", e))?;
        Ok(())
    }

    /// The furthest position source `source` asked its upstream to
    /// confirm, or its applied position if that is further: recorded
    /// before a confirmation past the applied position is sent (an idle
    /// stream confirms the WAL position that holds nothing for it), so the
    /// upstream's confirmed position is never past it. `None` for a source
    /// of an older store that has not confirmed past its applied position
    /// since: its confirmations were not recorded.
    pub fn confirmed_lsn(&self, source: &str) -> Result<Option<Position>> {
        self.conn
            .query_row(
                "SELECT CASE WHEN confirmed_lsn IS NULL THEN NULL \
                        ELSE max(confirmed_lsn, applied_lsn) END \
                 FROM sources WHERE name = ?1",
                [source],
                |r| r.get::<_, Option<i64>>(0),
            )
            .map(|p| p.map(Position::from_sql))
            .map_err(|e| PipelineError::store("read confirmed position", e))
    }

    /// Records that source `source` asks its upstream to confirm `upto`
    /// ([`Store::confirmed_lsn`]), before it does.
    pub fn record_confirmed(&self, source: &str, upto: Position) -> Result<()> {
        self.conn
            .execute(
                "UPDATE sources SET confirmed_lsn = ?2 \
                 WHERE name = ?1 AND (confirmed_lsn IS NULL OR confirmed_lsn < ?2)",
                params![source, upto.to_sql()],
            )
            .map_err(|e| PipelineError::store("record confirmed position", e))?;
        Ok(())
    }

    /// The source's resume state: the upstream's own coordinate of its
    /// applied position (a MySQL source's GTID state), stored in the same
    /// transaction as the position; `None` when its positions need none.
    pub fn resume_state(&self, source: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT resume_state FROM sources WHERE name = ?1",
                [source],
                |r| r.get::<_, Option<String>>(0),
            )
            .map_err(|e| PipelineError::store("read the resume state", e))
    }

    /// The source named `name`.
    pub fn source(&self, name: &str) -> Result<Option<SourceInfo>> {
        self.conn
            .query_row(
                "SELECT name, connection, publication, publication_created, slot, applied_lsn, \
                        dropping, drop_error, kind \
                 FROM sources WHERE name = ?1",
                [name],
                source_row,
            )
            .optional()
            .map_err(|e| PipelineError::store("read source", e))
    }

    /// Every source, by name.
    pub fn sources(&self) -> Result<Vec<SourceInfo>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT name, connection, publication, publication_created, slot, applied_lsn, \
                        dropping, drop_error, kind \
                 FROM sources ORDER BY name",
            )
            .map_err(|e| PipelineError::store("list sources", e))?;
        let rows = stmt
            .query_map([], source_row)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| PipelineError::store("list sources", e))?;
        Ok(rows)
    }

    /// Marks source `name` as being dropped, with why the last attempt
    /// could not drop its slot (`None` while one runs).
    pub fn set_source_dropping(&self, name: &str, error: Option<&str>) -> Result<()> {
        self.conn
            .execute(
                "UPDATE sources SET dropping = 1, drop_error = ?2 WHERE name = ?1",
                params![name, error],
            )
            .map_err(|e| PipelineError::store("mark source as being dropped", e))?;
        Ok(())
    }

    /// Deletes a source.
    pub fn delete_source(&self, name: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM sources WHERE name = ?1", [name])
            .map_err(|e| PipelineError::store("delete source", e))?;
        Ok(())
    }

    /// The source's applied position.
    pub fn applied_lsn(&self, source: &str) -> Result<Position> {
        self.conn
            .query_row(
                "SELECT applied_lsn FROM sources WHERE name = ?1",
                [source],
                |r| r.get::<_, i64>(0),
            )
            .map(Position::from_sql)
            .map_err(|e| PipelineError::store("read applied position", e))
    }

    // ----------------------------------------------------------- tables

    /// Inserts a table; returns its id.
    pub fn insert_table(&self, t: &TableInfo) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO tables (name, source, upstream_schema, upstream_table, upstream_oid, columns, state, kafka) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    t.name,
                    t.source,
                    t.upstream_schema,
                    t.upstream_table,
                    t.upstream_oid,
                    columns_to_json(&t.columns),
                    t.state.as_str(),
                    t.kafka
                        .as_ref()
                        .map(|k| serde_json::to_string(k).unwrap_or_default())
                ],
            )
            .map_err(|e| PipelineError::store("insert table", e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The table named `name`.
    pub fn table(&self, name: &str) -> Result<Option<TableInfo>> {
        let mut tables = self.tables_where("name = ?1", [name])?;
        Ok(tables.pop())
    }

    /// Every table, by name.
    pub fn tables(&self) -> Result<Vec<TableInfo>> {
        self.tables_where("1 = 1", [])
    }

    /// The tables of a source, by name.
    pub fn tables_of(&self, source: &str) -> Result<Vec<TableInfo>> {
        self.tables_where("source = ?1", [source])
    }

    fn tables_where<P: rusqlite::Params>(&self, filter: &str, p: P) -> Result<Vec<TableInfo>> {
        let sql = format!(
            "SELECT id, name, source, upstream_schema, upstream_table, upstream_oid, columns, \
                    state, error, snapshot_lsn, rows_copied, kafka \
             FROM tables WHERE {filter} ORDER BY name"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(|e| PipelineError::store("list tables", e))?;
        let rows = stmt
            .query_map(p, |r| {
                let columns: String = r.get(6)?;
                let state: String = r.get(7)?;
                Ok((
                    TableInfo {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        source: r.get(2)?,
                        upstream_schema: r.get(3)?,
                        upstream_table: r.get(4)?,
                        upstream_oid: r.get(5)?,
                        columns: Vec::new(),        // set from `columns` below
                        state: TableState::Pending, // set from `state` below
                        error: r.get(8)?,
                        snapshot_lsn: r.get::<_, Option<i64>>(9)?.map(Position::from_sql),
                        rows_copied: r.get::<_, i64>(10)? as u64,
                        kafka: None, // set from `kafka` below
                    },
                    state,
                    columns,
                    r.get::<_, Option<String>>(11)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| PipelineError::store("list tables", e))?;
        rows.into_iter()
            .map(|(mut table, state, columns, kafka)| {
                if let Some(kafka) = kafka {
                    table.kafka =
                        Some(
                            serde_json::from_str(&kafka).map_err(|e| PipelineError::Store {
                                context: format!("read table \"{}\"", table.name),
                                message: format!(
                                    "its Kafka settings are not ones this release can read ({e}): \
                                 the state store was written by a newer release or is damaged"
                                ),
                            })?,
                        );
                }
                // An empty list would ingest no column at all.
                table.columns =
                    columns_from_json(&columns).ok_or_else(|| PipelineError::Store {
                        context: format!("read table \"{}\"", table.name),
                        message: "its pinned column list is not one this release can read: the \
                                  state store was written by a newer release or is damaged; run \
                                  the release that wrote it, or restore pipeline.db from a backup"
                            .into(),
                    })?;
                // Never a guess: taken as pending, the table would be
                // copied again, and a copy starts by deleting its rows.
                table.state = TableState::parse(&state).ok_or_else(|| PipelineError::Store {
                    context: format!("read table \"{}\"", table.name),
                    message: format!(
                        "its state \"{state}\" is not one this release knows (pending, \
                              snapshotting, copied, running, stalled): the state store was \
                             written by a newer release or is damaged; run the release that \
                             wrote it, or restore pipeline.db from a backup"
                    ),
                })?;
                Ok(table)
            })
            .collect()
    }

    /// Sets a table's state (and error, and snapshot position).
    pub fn set_table_state(
        &self,
        id: i64,
        state: TableState,
        error: Option<&str>,
        snapshot_lsn: Option<Position>,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE tables SET state = ?2, error = ?3, snapshot_lsn = ?4 WHERE id = ?1",
                params![
                    id,
                    state.as_str(),
                    error,
                    snapshot_lsn.map(Position::to_sql)
                ],
            )
            .map_err(|e| PipelineError::store("update table state", e))?;
        Ok(())
    }

    /// A store in memory with the schema, for the engine's unit tests.
    #[cfg(test)]
    pub(crate) fn in_memory() -> Store {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        conn.pragma_update(None, "foreign_keys", "ON")
            .expect("foreign keys");
        conn.execute_batch(SCHEMA).expect("the schema");
        upgrade(&conn).expect("the added columns");
        Store { conn }
    }

    /// [`Store::in_memory`] with source `src` (PostgreSQL, applied at
    /// position 1), for the engine's unit tests.
    #[cfg(test)]
    pub(crate) fn in_memory_with_source() -> Store {
        let store = Store::in_memory();
        store
            .insert_source(&SourceInfo {
                name: "src".into(),
                connection: "pg".into(),
                publication: "pub".into(),
                publication_created: true,
                slot: "evolve_src".into(),
                applied_lsn: Position::from_u64(1),
                dropping: false,
                drop_error: None,
                kind: SourceKind::Postgres,
            })
            .expect("the source");
        store
    }

    /// Deletes a table and its rows.
    pub fn delete_table(&mut self, name: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction()
            .map_err(|e| PipelineError::store("drop table", e))?;
        tx.execute(
            "DELETE FROM rows WHERE tbl = (SELECT id FROM tables WHERE name = ?1)",
            [name],
        )
        .and_then(|_| {
            tx.execute(
                "DELETE FROM pending WHERE tbl = (SELECT id FROM tables WHERE name = ?1)",
                [name],
            )
        })
        .and_then(|_| tx.execute("DELETE FROM tables WHERE name = ?1", [name]))
        .and_then(|_| tx.commit())
        .map_err(|e| PipelineError::store("drop table", e))?;
        Ok(())
    }

    // ------------------------------------------------------- interfaces

    /// Inserts an interface whose query outputs `output`.
    pub(crate) fn insert_interface(
        &self,
        name: &str,
        table: &str,
        output: &[OutputColumn],
    ) -> Result<()> {
        let output = serde_json::to_string(output).map_err(|e| PipelineError::Store {
            context: "insert materialized view".into(),
            message: e.to_string(),
        })?;
        self.conn
            .execute(
                "INSERT INTO interfaces (name, table_name, output) VALUES (?1, ?2, ?3)",
                [name, table, &output],
            )
            .map_err(|e| PipelineError::store("insert materialized view", e))?;
        Ok(())
    }

    /// The output columns of interface `name`'s query, as recorded when it
    /// was created.
    pub(crate) fn interface_output(&self, name: &str) -> Result<Option<Vec<OutputColumn>>> {
        let context = || format!("read the output of materialized view \"{name}\"");
        let Some(text) = self
            .conn
            .query_row(
                "SELECT output FROM interfaces WHERE name = ?1",
                [name],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| PipelineError::store(context(), e))?
        else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| PipelineError::Store {
                context: context(),
                message: format!(
                    "the recorded output is unreadable ({e}); the state store is damaged"
                ),
            })
    }

    /// Sets an interface's ABSORB option.
    pub fn set_absorb(&self, name: &str, auto: bool) -> Result<()> {
        self.conn
            .execute(
                "UPDATE interfaces SET absorb = ?2 WHERE name = ?1",
                params![name, if auto { "auto" } else { "manual" }],
            )
            .map_err(|e| PipelineError::store("alter materialized view", e))?;
        Ok(())
    }

    /// Every interface, by name.
    pub fn interfaces(&self) -> Result<Vec<InterfaceInfo>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, name, table_name, absorb FROM interfaces ORDER BY name")
            .map_err(|e| PipelineError::store("list materialized views", e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(InterfaceInfo {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    table: r.get(2)?,
                    absorb_auto: r.get::<_, String>(3)? == "auto",
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| PipelineError::store("list materialized views", e))?;
        Ok(rows)
    }

    /// The interface named `name`.
    pub fn interface(&self, name: &str) -> Result<Option<InterfaceInfo>> {
        Ok(self.interfaces()?.into_iter().find(|i| i.name == name))
    }

    /// Deletes an interface and its feed.
    pub fn delete_interface(&mut self, name: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction()
            .map_err(|e| PipelineError::store("drop materialized view", e))?;
        tx.execute(
            "DELETE FROM feed_log WHERE interface = (SELECT id FROM interfaces WHERE name = ?1)",
            [name],
        )
        .and_then(|_| tx.execute("DELETE FROM interfaces WHERE name = ?1", [name]))
        .and_then(|_| tx.commit())
        .map_err(|e| PipelineError::store("drop materialized view", e))?;
        Ok(())
    }

    // ----------------------------------------------------- replacements

    /// Inserts a replacement of interface `target` reading `table`.
    pub fn insert_replacement(&self, name: &str, target: &str, table: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO replacements (name, target, table_name) VALUES (?1, ?2, ?3)",
                [name, target, table],
            )
            .map_err(|e| PipelineError::store("insert replacement", e))?;
        Ok(())
    }

    /// Every pending replacement, by name.
    pub fn replacements(&self) -> Result<Vec<ReplacementInfo>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, target, table_name, applying, error FROM replacements ORDER BY name",
            )
            .map_err(|e| PipelineError::store("list replacements", e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ReplacementInfo {
                    name: r.get(0)?,
                    target: r.get(1)?,
                    table: r.get(2)?,
                    applying: r.get(3)?,
                    error: r.get(4)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| PipelineError::store("list replacements", e))?;
        Ok(rows)
    }

    /// The replacement named `name`.
    pub fn replacement(&self, name: &str) -> Result<Option<ReplacementInfo>> {
        Ok(self.replacements()?.into_iter().find(|r| r.name == name))
    }

    /// Marks a replacement as requested to apply (or not), clearing its
    /// error.
    pub fn set_replacement_applying(&self, name: &str, applying: bool) -> Result<()> {
        self.conn
            .execute(
                "UPDATE replacements SET applying = ?2, error = NULL WHERE name = ?1",
                params![name, applying],
            )
            .map_err(|e| PipelineError::store("update replacement", e))?;
        Ok(())
    }

    /// Records why replacement `name` could not be applied: it is no
    /// longer being applied, so it can be applied again or dropped.
    pub fn set_replacement_error(&self, name: &str, error: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE replacements SET applying = 0, error = ?2 WHERE name = ?1",
                params![name, error],
            )
            .map_err(|e| PipelineError::store("update replacement", e))?;
        Ok(())
    }

    /// Deletes a replacement (and the keys kept for it).
    pub fn delete_replacement(&self, name: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM replacements WHERE name = ?1", [name])
            .map_err(|e| PipelineError::store("drop replacement", e))?;
        Ok(())
    }

    /// The replacements whose differing keys are kept (see
    /// [`TrackedReplacement`]), by name.
    pub(crate) fn tracked_replacements(&self) -> Result<Vec<TrackedReplacement>> {
        let fail = |e| PipelineError::store("list the replacements' differing keys", e);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, tracked_old, tracked_new FROM replacements \
                 WHERE tracked_old IS NOT NULL AND tracked_new IS NOT NULL ORDER BY name",
            )
            .map_err(fail)?;
        stmt.query_map([], |r| {
            Ok(TrackedReplacement {
                name: r.get(0)?,
                old: r.get(1)?,
                new: r.get(2)?,
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(fail)
    }

    /// The replacements whose differing keys are not kept yet, with the
    /// ids of their interface's table and their own: (name, old, new).
    pub(crate) fn untracked_replacements(&self) -> Result<Vec<(String, i64, i64)>> {
        let fail = |e| PipelineError::store("list the replacements' differing keys", e);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT r.name, o.id, n.id FROM replacements r \
                 JOIN interfaces i ON i.name = r.target \
                 JOIN tables o ON o.name = i.table_name \
                 JOIN tables n ON n.name = r.table_name \
                 WHERE r.tracked_old IS NULL OR r.tracked_new IS NULL ORDER BY r.name",
            )
            .map_err(fail)?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(fail)
    }

    /// Records that `differing_keys` now holds replacement `name`'s keys
    /// whose documents differ between tables `old` and `new`.
    pub(crate) fn set_tracked(&self, name: &str, old: i64, new: i64) -> Result<()> {
        self.conn
            .execute(
                "UPDATE replacements SET tracked_old = ?2, tracked_new = ?3 WHERE name = ?1",
                params![name, old, new],
            )
            .map_err(|e| PipelineError::store("record a replacement's differing keys", e))?;
        Ok(())
    }

    /// Stops keeping the differing keys of every replacement that
    /// compares table `tbl` (its documents are about to be copied again).
    pub(crate) fn untrack_table(&self, tbl: i64) -> Result<()> {
        let fail = |e| PipelineError::store("forget a replacement's differing keys", e);
        self.conn
            .execute(
                "DELETE FROM differing_keys WHERE replacement IN \
                 (SELECT name FROM replacements WHERE tracked_old = ?1 OR tracked_new = ?1)",
                [tbl],
            )
            .map_err(fail)?;
        self.conn
            .execute(
                "UPDATE replacements SET tracked_old = NULL, tracked_new = NULL \
                 WHERE tracked_old = ?1 OR tracked_new = ?1",
                [tbl],
            )
            .map_err(fail)?;
        Ok(())
    }

    /// Records whether `key`'s documents differ between replacement
    /// `name`'s two tables.
    pub(crate) fn set_differing(&self, name: &str, key: &[u8], differs: bool) -> Result<()> {
        let sql = if differs {
            "INSERT OR IGNORE INTO differing_keys (replacement, key) VALUES (?1, ?2)"
        } else {
            "DELETE FROM differing_keys WHERE replacement = ?1 AND key = ?2"
        };
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params![name, key]))
            .map_err(|e| PipelineError::store("record a replacement's differing key", e))?;
        Ok(())
    }

    // ------------------------------------------------------------ sinks

    /// Inserts a sink.
    pub fn insert_sink(&self, s: &SinkInfo) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO sinks (name, interface, connection, target_schema, target_table, kind, \
                 topic, format, envelope, registry) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    s.name,
                    s.interface,
                    s.connection,
                    s.target_schema,
                    s.target_table,
                    s.kind.as_str(),
                    s.kafka.as_ref().map(|k| k.topic.as_str()),
                    s.kafka.as_ref().map(|k| k.format.as_str()),
                    s.kafka.as_ref().map(|k| k.envelope.as_str()),
                    s.kafka.as_ref().and_then(|k| k.registry.as_deref()),
                ],
            )
            .map_err(|e| PipelineError::store("insert sink", e))?;
        Ok(())
    }

    /// Every sink, by name.
    pub fn sinks(&self) -> Result<Vec<SinkInfo>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT name, interface, connection, target_schema, target_table, kind, \
                 topic, format, envelope, registry FROM sinks ORDER BY name",
            )
            .map_err(|e| PipelineError::store("list sinks", e))?;
        #[allow(clippy::type_complexity)]
        let rows = stmt
            .query_map([], |r| {
                let kind: String = r.get(5)?;
                let kafka: (
                    Option<String>,
                    Option<String>,
                    Option<String>,
                    Option<String>,
                ) = (r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?);
                Ok((
                    SinkInfo {
                        name: r.get(0)?,
                        kind: SinkKind::Postgres, // set from `kind` below
                        interface: r.get(1)?,
                        connection: r.get(2)?,
                        target_schema: r.get(3)?,
                        target_table: r.get(4)?,
                        kafka: None,
                    },
                    kind,
                    kafka,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| PipelineError::store("list sinks", e))?;
        rows.into_iter()
            .map(|(mut sink, kind, (topic, format, envelope, registry))| {
                let unknown = |what: &str, value: &str| PipelineError::Store {
                    context: format!("read sink \"{}\"", sink.name),
                    message: format!(
                        "its {what} \"{value}\" is not one this release knows: the state \
                         store was written by a newer release or is damaged; run the release that \
                         wrote it, or restore pipeline.db from a backup"
                    ),
                };
                sink.kind = SinkKind::parse(&kind).ok_or_else(|| PipelineError::Store {
                    context: format!("read sink \"{}\"", sink.name),
                    message: format!(
                        "its kind \"{kind}\" is not one this release knows (postgres, kafka): the state \
                         store was written by a newer release or is damaged; run the release that \
                         wrote it, or restore pipeline.db from a backup"
                    ),
                })?;
                if sink.kind == SinkKind::Kafka {
                    let format = format.unwrap_or_default();
                    let envelope = envelope.unwrap_or_default();
                    sink.kafka = Some(KafkaTarget {
                        topic: topic.unwrap_or_default(),
                        format: KafkaFormat::parse(&format)
                            .ok_or_else(|| unknown("format", &format))?,
                        envelope: KafkaEnvelope::parse(&envelope)
                            .ok_or_else(|| unknown("envelope", &envelope))?,
                        registry,
                    });
                }
                Ok(sink)
            })
            .collect()
    }

    /// Deletes a sink.
    pub fn delete_sink(&self, name: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM sinks WHERE name = ?1", [name])
            .map_err(|e| PipelineError::store("drop sink", e))?;
        Ok(())
    }

    /// The objects that depend on `kind` `name` (what blocks its drop).
    pub fn dependents(&self, kind: ObjectKind, name: &str) -> Result<Vec<(ObjectKind, String)>> {
        Ok(match kind {
            ObjectKind::Source => self
                .tables_of(name)?
                .into_iter()
                .map(|t| (ObjectKind::Table, t.name))
                .collect(),
            ObjectKind::Table => self
                .interfaces()?
                .into_iter()
                .filter(|i| i.table == name)
                .map(|i| (ObjectKind::Interface, i.name))
                .chain(
                    self.replacements()?
                        .into_iter()
                        .filter(|r| r.table == name)
                        .map(|r| (ObjectKind::Interface, r.name)),
                )
                .collect(),
            ObjectKind::Interface => self
                .sinks()?
                .into_iter()
                .filter(|s| s.interface == name)
                .map(|s| (ObjectKind::Sink, s.name))
                .chain(
                    self.replacements()?
                        .into_iter()
                        .filter(|r| r.target == name)
                        .map(|r| (ObjectKind::Interface, r.name)),
                )
                .collect(),
            ObjectKind::Sink => Vec::new(),
        })
    }

    // ------------------------------------------------------------- rows

    /// The current document of `key` in table `tbl`.
    pub fn doc(&self, tbl: i64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT doc FROM rows WHERE tbl = ?1 AND key = ?2")
            .map_err(|e| PipelineError::store("read document", e))?;
        stmt.query_row(params![tbl, key], |r| r.get(0))
            .optional()
            .map_err(|e| PipelineError::store("read document", e))
    }

    /// Every (key, document) of table `tbl`, in key order.
    pub fn docs(&self, tbl: i64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, doc FROM rows WHERE tbl = ?1 ORDER BY key")
            .map_err(|e| PipelineError::store("read documents", e))?;
        let rows = stmt
            .query_map([tbl], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| PipelineError::store("read documents", e))?;
        Ok(rows)
    }

    /// Every (key, document) of table `tbl`, in key order, handed to
    /// `each` in chunks of at most `rows` documents and about `bytes`
    /// bytes of keys and documents (a chunk holds one document at least),
    /// read with one cursor, so that only the chunk being filled is in
    /// memory here. Inside [`Store::read_consistent`] the chunks are one
    /// consistent cut. Stops early, without an error, when `each` returns
    /// false.
    pub fn docs_in_chunks(
        &self,
        tbl: i64,
        rows: usize,
        bytes: usize,
        mut each: impl FnMut(Vec<(Vec<u8>, Vec<u8>)>) -> bool,
    ) -> Result<()> {
        let fail = |e: rusqlite::Error| PipelineError::store("read documents", e);
        let rows = rows.max(1);
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, doc FROM rows WHERE tbl = ?1 ORDER BY key")
            .map_err(fail)?;
        let mut cursor = stmt.query([tbl]).map_err(fail)?;
        let mut chunk = Vec::with_capacity(rows.min(4_096));
        let mut size = 0;
        while let Some(row) = cursor.next().map_err(fail)? {
            let (key, doc): (Vec<u8>, Vec<u8>) =
                (row.get(0).map_err(fail)?, row.get(1).map_err(fail)?);
            size += key.len() + doc.len();
            chunk.push((key, doc));
            if chunk.len() >= rows || size >= bytes {
                let full = std::mem::replace(&mut chunk, Vec::with_capacity(rows.min(4_096)));
                size = 0;
                if !each(full) {
                    return Ok(());
                }
            }
        }
        if !chunk.is_empty() {
            each(chunk);
        }
        Ok(())
    }

    /// Runs `read` in one read transaction: everything it reads is of one
    /// state of the store, whatever other connections commit meanwhile.
    pub fn read_consistent<T>(&self, read: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let fail = |e: rusqlite::Error| PipelineError::store("read a consistent state", e);
        self.conn.execute_batch("BEGIN").map_err(fail)?;
        let result = read(self);
        // A read transaction has nothing to keep: COMMIT only ends it.
        let ended = self.conn.execute_batch("COMMIT").map_err(fail);
        let value = result?;
        ended?;
        Ok(value)
    }

    /// The number of documents of table `tbl`.
    pub fn doc_count(&self, tbl: i64) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM rows WHERE tbl = ?1", [tbl], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(|e| PipelineError::store("count documents", e))
    }

    // --------------------------------------------------- schema history

    /// Records, inside the store transaction the caller has open, the
    /// columns of upstream tables that source `source`'s stream announced
    /// in the transaction ending at `pos`: each table's version from `pos`
    /// on. A version equal to the table's latest one is not recorded
    /// again (a stream announces its tables anew each time it opens), and
    /// versions no stream can reopen before are dropped: those older than
    /// the table's latest version at or before the source's applied
    /// position.
    pub(crate) fn record_schemas(
        &self,
        source: &str,
        pos: Position,
        schemas: &[(u32, Arc<TableSchema>)],
    ) -> Result<()> {
        let fail = |e: rusqlite::Error| PipelineError::store("record upstream schemas", e);
        for (oid, schema) in schemas {
            let text = serde_json::to_string(&**schema).map_err(|e| PipelineError::Store {
                context: "record upstream schemas".into(),
                message: e.to_string(),
            })?;
            let latest: Option<String> = self
                .conn
                .prepare_cached(
                    "SELECT schema FROM schema_history WHERE source = ?1 AND upstream_oid = ?2 \
                     ORDER BY pos DESC LIMIT 1",
                )
                .and_then(|mut s| s.query_row(params![source, oid], |r| r.get(0)).optional())
                .map_err(fail)?;
            if latest.as_deref() == Some(text.as_str()) {
                continue;
            }
            self.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO schema_history (source, upstream_oid, pos, schema) \
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut s| s.execute(params![source, oid, pos.to_sql(), text]))
                .map_err(fail)?;
            self.conn
                .prepare_cached(
                    "DELETE FROM schema_history WHERE source = ?1 AND upstream_oid = ?2 AND pos < \
                     (SELECT max(pos) FROM schema_history WHERE source = ?1 AND upstream_oid = ?2 \
                      AND pos <= (SELECT applied_lsn FROM sources WHERE name = ?1))",
                )
                .and_then(|mut s| s.execute(params![source, oid]))
                .map_err(fail)?;
        }
        Ok(())
    }

    /// The columns of each upstream table of `source` as of position
    /// `pos`: its latest recorded version at or before it.
    pub fn schemas_at(
        &self,
        source: &str,
        pos: Position,
    ) -> Result<HashMap<u32, Arc<TableSchema>>> {
        let fail = |e: rusqlite::Error| PipelineError::store("read upstream schemas", e);
        let mut stmt = self
            .conn
            .prepare(
                "SELECT h.upstream_oid, h.schema FROM schema_history h WHERE h.source = ?1 \
                 AND h.pos = (SELECT max(pos) FROM schema_history \
                              WHERE source = ?1 AND upstream_oid = h.upstream_oid AND pos <= ?2)",
            )
            .map_err(fail)?;
        let rows = stmt
            .query_map(params![source, pos.to_sql()], |r| {
                Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(fail)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(fail)?;
        rows.into_iter()
            .map(|(oid, text)| {
                let schema: TableSchema =
                    serde_json::from_str(&text).map_err(|e| PipelineError::Store {
                        context: "read upstream schemas".into(),
                        message: format!(
                            "the recorded schema of upstream table {oid} does not decode ({e}); the state store is damaged"
                        ),
                    })?;
                Ok((oid, Arc::new(schema)))
            })
            .collect()
    }

    // ------------------------------------------------------------- feed

    /// Appends `changes` (one upstream transaction's, committed at
    /// `committed_at`, Unix microseconds) to their interfaces' feeds at
    /// `pos`, inside the store transaction the caller has open: per
    /// interface, its changes in order, in as few records as
    /// [`crate::feed::PART_BYTES`] allows.
    pub(crate) fn append_feed(
        &self,
        pos: Position,
        committed_at: i64,
        changes: &[crate::bus::Change],
    ) -> Result<()> {
        let fail = |e: rusqlite::Error| PipelineError::store("apply an upstream transaction", e);
        let mut insert = self
            .conn
            .prepare_cached(
                "INSERT INTO feed_log (interface, pos, part, committed_at, entries, changes) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(fail)?;
        let mut done: Vec<i64> = Vec::new();
        let mut parts = crate::feed::Parts::default();
        for (i, first) in changes.iter().enumerate() {
            let interface = first.interface;
            if done.contains(&interface) {
                continue;
            }
            done.push(interface);
            let mut write = |part: i64, entries: i64, bytes: &[u8]| {
                insert
                    .execute(params![
                        interface,
                        pos.to_sql(),
                        part,
                        committed_at,
                        entries,
                        bytes
                    ])
                    .map(drop)
                    .map_err(fail)
            };
            for c in changes[i..].iter().filter(|c| c.interface == interface) {
                parts.push(&c.key, c.old.as_deref(), c.new.as_deref(), &mut write)?;
            }
            parts.finish(&mut write)?;
        }
        Ok(())
    }

    /// Feed entries of `interface` with `after < pos <= upto`, in order, at
    /// most `limit` of them but never part of a transaction: a
    /// transaction that would go past the limit is left out (unless it is
    /// the first, which is then read whole).
    pub fn feed(
        &self,
        interface: i64,
        after: Position,
        upto: Position,
        limit: usize,
    ) -> Result<Vec<FeedEntry>> {
        let fail = |e: rusqlite::Error| PipelineError::store("read feed", e);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT pos, entries, changes FROM feed_log \
                 WHERE interface = ?1 AND pos > ?2 AND pos <= ?3 ORDER BY pos, part",
            )
            .map_err(fail)?;
        let mut rows = stmt
            .query(params![interface, after.to_sql(), upto.to_sql()])
            .map_err(fail)?;
        let mut out: Vec<FeedEntry> = Vec::new();
        // The transaction being read: its position and entries so far.
        let mut open: Option<Position> = None;
        let mut txn: Vec<FeedEntry> = Vec::new();
        let take = |out: &mut Vec<FeedEntry>, txn: &mut Vec<FeedEntry>| -> bool {
            if out.is_empty() || out.len() + txn.len() <= limit {
                out.append(txn);
                true
            } else {
                false
            }
        };
        while let Some(row) = rows.next().map_err(fail)? {
            let pos = Position::from_sql(row.get(0).map_err(fail)?);
            if open.is_some_and(|o| o != pos) && (!take(&mut out, &mut txn) || out.len() >= limit) {
                return Ok(out);
            }
            open = Some(pos);
            let blob = row
                .get_ref(2)
                .and_then(|v| Ok(v.as_blob()?))
                .map_err(fail)?;
            crate::feed::decode_entries(blob, |key, old, new| {
                txn.push(FeedEntry {
                    pos,
                    key: key.to_vec(),
                    old: old.map(<[u8]>::to_vec),
                    new: new.map(<[u8]>::to_vec),
                });
                Ok::<_, crate::feed::Damaged>(())
            })
            .map_err(|e| damaged_feed("read feed", e))?;
        }
        take(&mut out, &mut txn);
        Ok(out)
    }

    /// Deletes the feed entries of `interface` at or before `upto` and
    /// raises its horizon accordingly (see [`Store::feed_horizon`]).
    pub fn prune_feed(&self, interface: i64, upto: Position) -> Result<usize> {
        self.prune_feed_retained(interface, upto, i64::MAX, None)
    }

    /// The source task's upkeep of `interface`'s feed, each tick. With
    /// `start`, the interface's table is hydrated and `start` is the
    /// applied position: if no horizon is recorded yet, the feed is
    /// complete from there on, and that becomes the horizon. Then the
    /// entries at or before `upto` (what every sink has committed) whose
    /// upstream commit time is before `committed_before` (Unix
    /// microseconds: now minus `retain_history`) are deleted, oldest
    /// first and stopping at the first entry that is kept, so that what
    /// remains is every entry after the horizon. Deleting and raising the
    /// horizon are one store transaction. Returns the entries deleted.
    pub fn prune_feed_retained(
        &self,
        interface: i64,
        upto: Position,
        committed_before: i64,
        start: Option<Position>,
    ) -> Result<usize> {
        let fail = |e: rusqlite::Error| PipelineError::store("prune feed", e);
        if let Some(start) = start
            && self.feed_horizon(interface)?.is_none()
        {
            self.conn
                .execute(
                    "INSERT OR IGNORE INTO feed_horizon (interface, pos) VALUES (?1, ?2)",
                    params![interface, start.to_sql()],
                )
                .map_err(fail)?;
        }
        // Reads first, so that a tick with nothing to prune writes nothing.
        let oldest: Option<(i64, i64)> = self
            .conn
            .prepare_cached(
                "SELECT pos, committed_at FROM feed_log WHERE interface = ?1 ORDER BY pos, part \
                 LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row([interface], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(fail)?;
        match oldest {
            Some((pos, at)) if pos <= upto.to_sql() && at < committed_before => {}
            _ => return Ok(0),
        }
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(fail)?;
        // The first entry to keep bounds what goes.
        let kept: Option<i64> = tx
            .prepare_cached(
                "SELECT pos FROM feed_log \
                 WHERE interface = ?1 AND (pos > ?2 OR committed_at >= ?3) \
                 ORDER BY pos, part LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![interface, upto.to_sql(), committed_before], |r| {
                    r.get(0)
                })
                .optional()
            })
            .map_err(fail)?;
        let through = match kept {
            Some(pos) => (pos - 1).min(upto.to_sql()),
            None => upto.to_sql(),
        };
        let last: Option<i64> = tx
            .prepare_cached(
                "SELECT pos FROM feed_log WHERE interface = ?1 AND pos <= ?2 \
                 ORDER BY pos DESC LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![interface, through], |r| r.get(0))
                    .optional()
            })
            .map_err(fail)?;
        let Some(last) = last else {
            return Ok(0);
        };
        let deleted: i64 = tx
            .query_row(
                "SELECT coalesce(sum(entries), 0) FROM feed_log WHERE interface = ?1 AND pos <= ?2",
                params![interface, last],
                |r| r.get(0),
            )
            .map_err(fail)?;
        tx.execute(
            "DELETE FROM feed_log WHERE interface = ?1 AND pos <= ?2",
            params![interface, last],
        )
        .map_err(fail)?;
        tx.execute(
            "INSERT INTO feed_horizon (interface, pos, pruned) VALUES (?1, ?2, ?2) \
             ON CONFLICT (interface) DO UPDATE SET pos = max(pos, excluded.pos), \
             pruned = max(coalesce(pruned, excluded.pruned), excluded.pruned)",
            params![interface, last],
        )
        .map_err(fail)?;
        tx.commit().map_err(fail)?;
        Ok(deleted as usize)
    }

    /// The last position of `interface`'s feed whose entries pruning
    /// deleted: a sink whose destination is at an earlier position (its
    /// database restored from a backup, say) cannot be brought up to date
    /// from the feed. `None` before anything was pruned (and in stores
    /// that did not record it). Unlike [`Store::feed_horizon`], which
    /// starts where the feed was complete when the interface was hydrated,
    /// it moves only when entries are deleted.
    pub fn feed_pruned(&self, interface: i64) -> Result<Option<Position>> {
        self.conn
            .prepare_cached("SELECT pruned FROM feed_horizon WHERE interface = ?1")
            .and_then(|mut s| {
                s.query_row([interface], |r| r.get::<_, Option<i64>>(0))
                    .optional()
            })
            .map(|pos| pos.flatten().map(Position::from_sql))
            .map_err(|e| PipelineError::store("read feed horizon", e))
    }

    /// The horizon of `interface`'s feed: every feed entry after it is
    /// kept (entries at or before it may have been pruned), so the
    /// interface's changes can be replayed from any position at or after
    /// it. `None` while the source's task has not yet recorded where the
    /// feed starts (then only the current position is safe).
    pub fn feed_horizon(&self, interface: i64) -> Result<Option<Position>> {
        self.conn
            .prepare_cached("SELECT pos FROM feed_horizon WHERE interface = ?1")
            .and_then(|mut s| s.query_row([interface], |r| r.get(0)).optional())
            .map(|pos| pos.map(Position::from_sql))
            .map_err(|e| PipelineError::store("read feed horizon", e))
    }
}

/// Columns added since the first release of the store: added to an older
/// `pipeline.db` when it is opened.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("sources", "dropping", "INTEGER NOT NULL DEFAULT 0"),
    ("sources", "drop_error", "TEXT"),
    ("interfaces", "absorb", "TEXT NOT NULL DEFAULT 'manual'"),
    // Every source of an older store reads PostgreSQL.
    ("sources", "kind", "TEXT NOT NULL DEFAULT 'postgres'"),
    // Every sink of an older store writes to a PostgreSQL table.
    ("sinks", "kind", "TEXT NOT NULL DEFAULT 'postgres'"),
    // A Kafka sink's topic, format and envelope; NULL for the PostgreSQL
    // sinks of an older store.
    ("sinks", "topic", "TEXT"),
    ("sinks", "format", "TEXT"),
    ("sinks", "envelope", "TEXT"),
    // FORMAT AVRO's registry connection.
    ("sinks", "registry", "TEXT"),
    // The source's own coordinate of `applied_lsn` (a MySQL source's GTID
    // state), written with it; NULL for the sources of an older store and
    // for sources whose positions need none.
    ("sources", "resume_state", "TEXT"),
    // The furthest position the source asked its upstream to confirm
    // (see [`Store::confirmed_lsn`]); NULL for the sources of an older
    // store, whose confirmations were not recorded.
    ("sources", "confirmed_lsn", "INTEGER"),
    // A Kafka table's registry, envelope and pinned reader schema (JSON);
    // NULL for the tables of other sources.
    ("tables", "kafka", "TEXT"),
    // Every interface of an older store is of the one interface form.
    (
        "interfaces",
        "output",
        r#"TEXT NOT NULL DEFAULT '[{"name":"data","type":"jsonb","not_null":true}]'"#,
    ),
    // The tables whose differing keys `differing_keys` holds for the
    // replacement; NULL until its two tables are hydrated and compared
    // (and for the replacements of an older store, whose swap then
    // compares every key).
    ("replacements", "tracked_old", "INTEGER"),
    ("replacements", "tracked_new", "INTEGER"),
    // The last feed position pruning deleted (see [`Store::feed_pruned`]);
    // NULL until something is pruned, and in older stores, whose pruning
    // was not recorded apart from the horizon.
    ("feed_horizon", "pruned", "INTEGER"),
];

fn upgrade(conn: &Connection) -> rusqlite::Result<()> {
    convert_feed(conn)?;
    for (table, column, definition) in ADDED_COLUMNS {
        let present: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
            [table, column],
            |r| r.get(0),
        )?;
        if !present {
            conn.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {definition}"
            ))?;
        }
    }
    Ok(())
}

/// Rewrites the feed of a store written before the feed was kept as one
/// record per transaction (`feed`: one row per change, in `seq` order)
/// into `feed_log`, and drops the old table, in one transaction.
fn convert_feed(conn: &Connection) -> rusqlite::Result<()> {
    let old: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'feed')",
        [],
        |r| r.get(0),
    )?;
    if !old {
        return Ok(());
    }
    let timed: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('feed') WHERE name = 'committed_at')",
        [],
        |r| r.get(0),
    )?;
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut read = tx.prepare(&format!(
            "SELECT interface, pos, key, old_doc, new_doc, {} FROM feed \
             ORDER BY interface, pos, seq",
            if timed { "committed_at" } else { "0" }
        ))?;
        let mut insert = tx.prepare(
            "INSERT INTO feed_log (interface, pos, part, committed_at, entries, changes) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let mut rows = read.query([])?;
        let mut write = |o: (i64, i64, i64), part: i64, entries: i64, bytes: &[u8]| {
            insert
                .execute(params![o.0, o.1, part, o.2, entries, bytes])
                .map(drop)
        };
        // (interface, pos, committed_at) of the record being built.
        let mut open: Option<(i64, i64, i64)> = None;
        let mut parts = crate::feed::Parts::default();
        while let Some(row) = rows.next()? {
            let this: (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(5)?);
            let key: Vec<u8> = row.get(2)?;
            let old_doc: Option<Vec<u8>> = row.get(3)?;
            let new_doc: Option<Vec<u8>> = row.get(4)?;
            let record = match open {
                Some(o) if (o.0, o.1) == (this.0, this.1) => o,
                Some(o) => {
                    parts.finish(&mut |p, e, b| write(o, p, e, b))?;
                    this
                }
                None => this,
            };
            open = Some(record);
            parts.push(
                &key,
                old_doc.as_deref(),
                new_doc.as_deref(),
                &mut |p, e, b| write(record, p, e, b),
            )?;
        }
        if let Some(o) = open {
            parts.finish(&mut |p, e, b| write(o, p, e, b))?;
        }
    }
    tx.execute_batch("DROP TABLE feed")?;
    tx.commit()
}

/// The error for a feed record that does not decode.
fn damaged_feed(context: &str, e: crate::feed::Damaged) -> PipelineError {
    PipelineError::Store {
        context: context.into(),
        message: format!("{e}; the state store is damaged"),
    }
}

/// Calls `each` with (position, key, old document, new document) for
/// every feed entry of `interface` with `after < pos <= upto`, in order,
/// reading through `conn` (a subscriber's read transaction).
pub(crate) fn for_each_feed_entry<E: From<rusqlite::Error>>(
    conn: &Connection,
    interface: i64,
    after: Position,
    upto: Position,
    mut each: impl FnMut(Position, &[u8], Option<&[u8]>, Option<&[u8]>) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut stmt = conn.prepare_cached(
        "SELECT pos, changes FROM feed_log \
         WHERE interface = ?1 AND pos > ?2 AND pos <= ?3 ORDER BY pos, part",
    )?;
    let mut rows = stmt.query(params![interface, after.to_sql(), upto.to_sql()])?;
    while let Some(row) = rows.next()? {
        let pos = Position::from_sql(row.get(0)?);
        let blob = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        // Decoding errors and `each`'s errors are told apart: the first
        // become a conversion failure of the column.
        let mut failed: Option<E> = None;
        let decoded = crate::feed::decode_entries(blob, |key, old, new| {
            each(pos, key, old, new).map_err(|e| {
                failed = Some(e);
                crate::feed::Damaged(String::new())
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        decoded.map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Blob, Box::new(e))
        })?;
    }
    Ok(())
}

fn source_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SourceInfo> {
    Ok(SourceInfo {
        name: r.get(0)?,
        connection: r.get(1)?,
        publication: r.get(2)?,
        publication_created: r.get(3)?,
        slot: r.get(4)?,
        applied_lsn: Position::from_sql(r.get(5)?),
        dropping: r.get(6)?,
        drop_error: r.get(7)?,
        kind: {
            let kind: String = r.get(8)?;
            SourceKind::parse(&kind).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    8,
                    rusqlite::types::Type::Text,
                    format!(
                        "source kind \"{kind}\" is not one this release knows (postgres, mysql, kafka): \
                         the state store was written by a newer release or is damaged; run the \
                         release that wrote it, or restore pipeline.db from a backup"
                    )
                    .into(),
                )
            })?
        },
    })
}

fn columns_to_json(columns: &[ColumnInfo]) -> String {
    let list: Vec<serde_json::Value> = columns
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "attnum": c.attnum,
                "type_oid": c.type_oid,
                "typmod": c.typmod,
                "type_name": c.type_name,
                "not_null": c.not_null,
                "kind": kind_to_json(&c.kind),
                "excluded": c.excluded,
                "as_text": c.as_text,
                "key": c.key,
                "labels": c.labels,
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

fn columns_from_json(text: &str) -> Option<Vec<ColumnInfo>> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut out = Vec::new();
    for c in value.as_array()? {
        out.push(ColumnInfo {
            name: c.get("name")?.as_str()?.to_string(),
            attnum: i16::try_from(c.get("attnum")?.as_i64()?).ok()?,
            type_oid: u32::try_from(c.get("type_oid")?.as_u64()?).ok()?,
            typmod: i32::try_from(c.get("typmod")?.as_i64()?).ok()?,
            type_name: c.get("type_name")?.as_str()?.to_string(),
            not_null: c.get("not_null")?.as_bool()?,
            kind: kind_from_json(c.get("kind")?)?,
            excluded: c.get("excluded")?.as_bool()?,
            as_text: c.get("as_text")?.as_bool()?,
            key: c.get("key")?.as_bool()?,
            labels: match c.get("labels") {
                None | Some(serde_json::Value::Null) => None,
                Some(labels) => Some(
                    labels
                        .as_array()?
                        .iter()
                        .map(|l| l.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()?,
                ),
            },
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store written before sources had a kind opens with every source
    /// reading PostgreSQL; new sources keep the kind they were given.
    #[test]
    fn sources_of_an_older_store_read_postgres() {
        let dir =
            std::env::temp_dir().join(format!("evolve-store-kind-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let old = Connection::open(dir.join("pipeline.db")).unwrap();
            old.execute_batch(
                "CREATE TABLE sources (name TEXT PRIMARY KEY, connection TEXT NOT NULL, \
                 publication TEXT NOT NULL, publication_created INTEGER NOT NULL, \
                 slot TEXT NOT NULL, applied_lsn INTEGER NOT NULL DEFAULT 0); \
                 INSERT INTO sources VALUES ('old', 'pg', 'pub', 0, 'evolve_old', 42);",
            )
            .unwrap();
        }
        let store = Store::open(&dir).unwrap();
        let old = store.source("old").unwrap().unwrap();
        assert_eq!(old.kind, SourceKind::Postgres);
        assert_eq!(old.applied_lsn, Position::from_u64(42));
        store
            .insert_source(&SourceInfo {
                name: "shop".into(),
                connection: "my".into(),
                publication: String::new(),
                publication_created: false,
                slot: "evolve_shop".into(),
                applied_lsn: Position::ZERO,
                dropping: false,
                drop_error: None,
                kind: SourceKind::Mysql,
            })
            .unwrap();
        let kinds: Vec<(String, SourceKind)> = store
            .sources()
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("old".into(), SourceKind::Postgres),
                ("shop".into(), SourceKind::Mysql)
            ]
        );
        // A kind this release does not know is an error that says so.
        store
            .conn
            .execute("UPDATE sources SET kind = 'oracle' WHERE name = 'old'", [])
            .unwrap();
        let e = store.source("old").unwrap_err().to_string();
        assert!(
            e.contains("source kind \"oracle\" is not one this release knows"),
            "{e}"
        );
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn catalog_round_trip_and_feed_limits() {
        let dir = std::env::temp_dir().join(format!("evolve-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        store
            .insert_source(&SourceInfo {
                name: "src".into(),
                connection: "pg".into(),
                publication: "pub".into(),
                publication_created: true,
                slot: "evolve_src".into(),
                applied_lsn: Position::from_u64(5),
                dropping: false,
                drop_error: None,
                kind: SourceKind::Postgres,
            })
            .unwrap();
        let table = TableInfo {
            id: 0,
            name: "t_v1".into(),
            source: "src".into(),
            upstream_schema: "public".into(),
            upstream_table: "t".into(),
            upstream_oid: 1234,
            columns: vec![ColumnInfo {
                name: "id".into(),
                attnum: 1,
                type_oid: 23,
                typmod: -1,
                type_name: "integer".into(),
                not_null: true,
                kind: TypeKind::Integer,
                excluded: false,
                as_text: false,
                key: true,
                labels: None,
            }],
            state: TableState::Pending,
            error: None,
            snapshot_lsn: None,
            rows_copied: 0,
            kafka: None,
        };
        let id = store.insert_table(&table).unwrap();
        let read = store.table("t_v1").unwrap().unwrap();
        assert_eq!(read.columns, table.columns);
        assert_eq!(read.id, id);
        store
            .insert_interface("t_json", "t_v1", &crate::pipeline::interface_output())
            .unwrap();
        assert_eq!(
            store.dependents(ObjectKind::Table, "t_v1").unwrap(),
            vec![(ObjectKind::Interface, "t_json".to_string())]
        );
        let iface = store.interface("t_json").unwrap().unwrap().id;
        let change = |key: &str| crate::bus::Change {
            interface: iface,
            key: key.as_bytes().to_vec(),
            old: None,
            new: Some(b"{}".to_vec()),
        };
        for (pos, keys) in [(10, vec!["a", "b"]), (20, vec!["c"]), (30, vec!["d"])] {
            let changes: Vec<_> = keys.into_iter().map(change).collect();
            store
                .append_feed(Position::from_u64(pos), 0, &changes)
                .unwrap();
        }
        let keys = |v: Vec<FeedEntry>| -> Vec<String> {
            v.into_iter()
                .map(|e| String::from_utf8(e.key).unwrap())
                .collect()
        };
        assert_eq!(
            keys(
                store
                    .feed(iface, Position::ZERO, Position::from_u64(30), 100)
                    .unwrap()
            ),
            ["a", "b", "c", "d"]
        );
        // Transaction 20 would go past the limit: it is left for the
        // next read.
        assert_eq!(
            keys(
                store
                    .feed(iface, Position::ZERO, Position::from_u64(30), 2)
                    .unwrap()
            ),
            ["a", "b"]
        );
        assert_eq!(
            keys(
                store
                    .feed(iface, Position::ZERO, Position::from_u64(30), 3)
                    .unwrap()
            ),
            ["a", "b", "c"]
        );
        // A transaction bigger than the limit is read whole.
        assert_eq!(
            keys(
                store
                    .feed(iface, Position::ZERO, Position::from_u64(30), 1)
                    .unwrap()
            ),
            ["a", "b"]
        );
        assert_eq!(
            keys(
                store
                    .feed(iface, Position::from_u64(10), Position::from_u64(20), 100)
                    .unwrap()
            ),
            ["c"]
        );
        assert_eq!(store.prune_feed(iface, Position::from_u64(20)).unwrap(), 3);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store written when the feed was one row per change has its
    /// entries rewritten into one record per interface and transaction
    /// when it is opened, in order, with their commit times; the old
    /// table is gone and new transactions append after them.
    #[test]
    fn the_feed_of_an_older_store_is_converted() {
        let dir = std::env::temp_dir().join(format!("evolve-store-feed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let store = Store::open(&dir).unwrap();
            store
                .conn
                .execute_batch(
                    "DROP TABLE feed_log; \
                     CREATE TABLE feed (seq INTEGER PRIMARY KEY AUTOINCREMENT, \
                     interface INTEGER NOT NULL, pos INTEGER NOT NULL, key BLOB NOT NULL, \
                     old_doc BLOB, new_doc BLOB, committed_at INTEGER NOT NULL DEFAULT 0); \
                     INSERT INTO feed (interface, pos, key, old_doc, new_doc, committed_at) VALUES \
                     (7, 20, x'62', NULL, x'7b7d', 200), \
                     (7, 10, x'61', x'7b7d', NULL, 100), \
                     (8, 10, x'78', NULL, x'5b5d', 100), \
                     (7, 20, x'63', x'7b7d', x'5b5d', 200);",
                )
                .unwrap();
        }
        let store = Store::open(&dir).unwrap();
        let gone: bool = store
            .conn
            .query_row(
                "SELECT NOT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'feed')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(gone, "the old feed table is dropped");
        let entry = |pos: u64, key: &str, old: Option<&str>, new: Option<&str>| FeedEntry {
            pos: Position::from_u64(pos),
            key: key.as_bytes().to_vec(),
            old: old.map(|d| d.as_bytes().to_vec()),
            new: new.map(|d| d.as_bytes().to_vec()),
        };
        store
            .append_feed(
                Position::from_u64(30),
                300,
                &[crate::bus::Change {
                    interface: 7,
                    key: b"d".to_vec(),
                    old: None,
                    new: Some(b"{}".to_vec()),
                }],
            )
            .unwrap();
        assert_eq!(
            store
                .feed(7, Position::ZERO, Position::from_u64(30), 100)
                .unwrap(),
            vec![
                entry(10, "a", Some("{}"), None),
                entry(20, "b", None, Some("{}")),
                entry(20, "c", Some("{}"), Some("[]")),
                entry(30, "d", None, Some("{}")),
            ]
        );
        assert_eq!(
            store
                .feed(8, Position::ZERO, Position::from_u64(30), 100)
                .unwrap(),
            vec![entry(10, "x", None, Some("[]"))]
        );
        let times: Vec<(i64, i64, i64)> = store
            .conn
            .prepare(
                "SELECT pos, committed_at, entries FROM feed_log WHERE interface = 7 ORDER BY pos",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(times, vec![(10, 100, 1), (20, 200, 2), (30, 300, 1)]);
        // Nothing pruned yet: no sink position can be behind a deletion.
        assert_eq!(store.feed_pruned(7).unwrap(), None);
        // Pruning through 20 deletes three entries and keeps the horizon.
        assert_eq!(store.prune_feed(7, Position::from_u64(20)).unwrap(), 3);
        assert_eq!(store.feed_horizon(7).unwrap(), Some(Position::from_u64(20)));
        assert_eq!(store.feed_pruned(7).unwrap(), Some(Position::from_u64(20)));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A transaction larger than a record's part is kept in several
    /// parts and read back whole and in order.
    #[test]
    fn large_transactions_are_split_into_parts() {
        let store = Store::in_memory();
        let doc = vec![b'x'; 300_000];
        let changes: Vec<crate::bus::Change> = (0..10u8)
            .map(|i| crate::bus::Change {
                interface: 1,
                key: vec![i],
                old: None,
                new: Some(doc.clone()),
            })
            .collect();
        store
            .append_feed(Position::from_u64(10), 0, &changes)
            .unwrap();
        let parts: i64 = store
            .conn
            .query_row("SELECT count(*) FROM feed_log", [], |r| r.get(0))
            .unwrap();
        assert_eq!(parts, 3, "four entries of 300,000 bytes fill a part");
        let read = store
            .feed(1, Position::ZERO, Position::from_u64(10), 1)
            .unwrap();
        let keys: Vec<u8> = read.iter().map(|e| e.key[0]).collect();
        assert_eq!(keys, (0..10).collect::<Vec<u8>>());
    }

    /// A store from before Kafka sinks (no `topic`, `format`, `envelope`)
    /// gets the columns when opened; its sinks stay PostgreSQL sinks, and
    /// a Kafka sink round-trips through the new columns.
    /// A Kafka table's stored settings give back the clause that pinned
    /// it (what a newer version and drift pin again): the message of a
    /// Protobuf table, the subject of a table of one record type, and no
    /// subject for one of the topic's `<topic>-value`; settings stored
    /// before those fields existed read as before.
    #[test]
    fn kafka_table_settings_give_back_their_clause() {
        use evolve_core::control::{KafkaTable, TableEnvelope, TableFormat};
        let stored = r#"{"registry":"csr","envelope":"debezium","format":"protobuf",
            "subject":"ev-shop.Order","schema_id":3,"version":2,"schema":"",
            "message":"shop.Order","record_type":"shop.Order"}"#;
        let info: KafkaTableInfo = serde_json::from_str(stored).unwrap();
        assert_eq!(
            info.spec(),
            KafkaTable {
                registry: "csr".into(),
                envelope: TableEnvelope::Debezium,
                format: TableFormat::Protobuf,
                key_format: None,
                message: Some("shop.Order".into()),
                subject: Some("ev-shop.Order".into()),
            }
        );
        let older = r#"{"registry":"csr","envelope":"upsert","subject":"ev-value",
            "schema_id":3,"version":2,"schema":""}"#;
        let info: KafkaTableInfo = serde_json::from_str(older).unwrap();
        assert_eq!(
            info.spec(),
            KafkaTable {
                registry: "csr".into(),
                envelope: TableEnvelope::Upsert,
                format: TableFormat::Avro,
                key_format: None,
                message: None,
                subject: None,
            }
        );
        let written = serde_json::to_string(&info).unwrap();
        assert!(
            !written.contains("message") && !written.contains("record_type"),
            "{written}"
        );
    }

    #[test]
    fn kafka_columns_are_added_to_an_older_store() {
        let dir = std::env::temp_dir().join(format!("evolve-store-kafka-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        store
            .conn
            .execute_batch(
                "INSERT INTO sources (name, connection, publication, publication_created, slot) \
                 VALUES ('src', 'pg', 'pub', 1, 'evolve_src');
                 INSERT INTO tables (name, source, upstream_schema, upstream_table, upstream_oid, columns, state) \
                 VALUES ('t_v1', 'src', 'public', 't', 1, '[]', 'pending');
                 INSERT INTO interfaces (name, table_name, output) VALUES ('t_json', 't_v1', '[]');
                 ALTER TABLE sinks DROP COLUMN topic;
                 ALTER TABLE sinks DROP COLUMN format;
                 ALTER TABLE sinks DROP COLUMN envelope;
                 INSERT INTO sinks (name, interface, connection, target_schema, target_table) \
                 VALUES ('old', 't_json', 'sink', 'public', 't_json');",
            )
            .unwrap();
        drop(store);
        let store = Store::open(&dir).unwrap();
        let sinks = store.sinks().unwrap();
        assert_eq!(sinks.len(), 1);
        assert_eq!(sinks[0].kind, SinkKind::Postgres);
        assert_eq!(sinks[0].kafka, None);
        assert_eq!(sinks[0].target(), "public.t_json");
        let kafka = SinkInfo {
            name: "to_kafka".into(),
            kind: SinkKind::Kafka,
            interface: "t_json".into(),
            connection: "k".into(),
            target_schema: String::new(),
            target_table: String::new(),
            kafka: Some(KafkaTarget {
                topic: "orders".into(),
                format: KafkaFormat::Json,
                envelope: KafkaEnvelope::Debezium,
                registry: None,
            }),
        };
        store.insert_sink(&kafka).unwrap();
        let sinks = store.sinks().unwrap();
        assert_eq!(sinks[1], kafka);
        assert_eq!(sinks[1].target(), "topic 'orders' (json, debezium)");
        let avro = SinkInfo {
            name: "to_kafka_avro".into(),
            kafka: Some(KafkaTarget {
                topic: "orders_avro".into(),
                format: KafkaFormat::Avro,
                envelope: KafkaEnvelope::Upsert,
                registry: Some("csr".into()),
            }),
            ..kafka.clone()
        };
        store.insert_sink(&avro).unwrap();
        assert_eq!(store.sinks().unwrap()[2], avro);
        store
            .conn
            .execute("DELETE FROM sinks WHERE name = 'to_kafka_avro'", [])
            .unwrap();
        store
            .conn
            .execute(
                "UPDATE sinks SET envelope = 'avro-ish' WHERE name = 'to_kafka'",
                [],
            )
            .unwrap();
        let e = store.sinks().unwrap_err();
        assert!(
            e.primary().contains(
                "read sink \"to_kafka\": its envelope \"avro-ish\" is not one this release knows"
            ),
            "{e}"
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An older store's sources get a resume state column, NULL (they
    /// resume from their position alone); a source inserted with a resume
    /// state reads it back.
    #[test]
    fn resume_states_are_added_to_an_older_store() {
        let dir =
            std::env::temp_dir().join(format!("evolve-store-resume-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let old = Connection::open(dir.join("pipeline.db")).unwrap();
            old.execute_batch(
                "CREATE TABLE sources (name TEXT PRIMARY KEY, connection TEXT NOT NULL, \
                 publication TEXT NOT NULL, publication_created INTEGER NOT NULL, \
                 slot TEXT NOT NULL, applied_lsn INTEGER NOT NULL DEFAULT 0, \
                 kind TEXT NOT NULL DEFAULT 'postgres'); \
                 INSERT INTO sources VALUES ('old', 'my', '', 0, 'evolve_old', 42, 'mysql');",
            )
            .unwrap();
        }
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.resume_state("old").unwrap(), None);
        assert_eq!(store.applied_lsn("old").unwrap(), Position::from_u64(42));
        let shop = SourceInfo {
            name: "shop".into(),
            connection: "my".into(),
            publication: String::new(),
            publication_created: false,
            slot: "evolve_shop".into(),
            applied_lsn: Position::from_u64((1 << 62) + 42),
            dropping: false,
            drop_error: None,
            kind: SourceKind::Mysql,
        };
        store.insert_source_resuming(&shop, Some("0-1-42")).unwrap();
        assert_eq!(store.source("shop").unwrap().unwrap(), shop);
        assert_eq!(
            store.resume_state("shop").unwrap().as_deref(),
            Some("0-1-42")
        );
        assert!(store.resume_state("nothere").is_err());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The schema history: each table's latest version at or before a
    /// position; an unchanged schema is not recorded again; versions
    /// older than the one in force at the applied position go; dropping
    /// the source forgets them.
    #[test]
    fn schema_history_answers_by_position_and_keeps_what_a_stream_can_need() {
        use evolve_core::change::ColumnSchema;
        let store = Store::in_memory_with_source();
        store
            .conn
            .execute("UPDATE sources SET applied_lsn = 0", [])
            .unwrap();
        let schema = |columns: &[&str]| {
            Arc::new(TableSchema {
                schema: "db".into(),
                name: "orders".into(),
                columns: columns
                    .iter()
                    .map(|c| ColumnSchema {
                        name: c.to_string(),
                        type_oid: 23,
                        typmod: -1,
                        key: *c == "id",
                        attnum: None,
                    })
                    .collect(),
            })
        };
        let at = |n: u64| Position::from_u64(n);
        let (v1, v2) = (schema(&["id", "a", "z"]), schema(&["id", "a"]));
        store
            .record_schemas("src", at(10), &[(7, v1.clone())])
            .unwrap();
        store
            .record_schemas("src", at(20), &[(7, v2.clone()), (8, v1.clone())])
            .unwrap();
        // The same columns again (a stream reopened): not a new version.
        store
            .record_schemas("src", at(30), &[(7, v2.clone())])
            .unwrap();
        let versions = |store: &Store| -> i64 {
            store
                .conn
                .query_row("SELECT count(*) FROM schema_history", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(versions(&store), 3);
        assert!(store.schemas_at("src", at(9)).unwrap().is_empty());
        let mid = store.schemas_at("src", at(15)).unwrap();
        assert_eq!((mid.len(), &mid[&7]), (1, &v1));
        let late = store.schemas_at("src", at(35)).unwrap();
        assert_eq!((late.len(), &late[&7], &late[&8]), (2, &v2, &v1));
        // Applied past 20: a stream reopens at 20 or later, so table 7's
        // version of 10 is never needed again once another is recorded.
        store
            .conn
            .execute("UPDATE sources SET applied_lsn = 25 WHERE name = 'src'", [])
            .unwrap();
        store
            .record_schemas("src", at(40), &[(7, v1.clone())])
            .unwrap();
        assert_eq!(versions(&store), 3);
        assert!(!store.schemas_at("src", at(15)).unwrap().contains_key(&7));
        assert_eq!(&store.schemas_at("src", at(25)).unwrap()[&7], &v2);
        assert_eq!(&store.schemas_at("src", at(40)).unwrap()[&7], &v1);
        store.conn.execute("DELETE FROM sources", []).unwrap();
        assert_eq!(versions(&store), 0);
    }
}
