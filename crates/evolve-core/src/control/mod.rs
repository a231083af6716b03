//! The pipeline's control language: `CREATE SOURCE`, `CREATE TABLE ... FROM
//! SOURCE`, the interface `CREATE [REPLACEMENT] MATERIALIZED VIEW`, `CREATE
//! SINK`, `ALTER`, `DROP` and `SHOW`, parsed into typed [`Statement`]s.
//!
//! ```text
//! CREATE SOURCE [IF NOT EXISTS] src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
//! CREATE SOURCE [IF NOT EXISTS] shop FROM MYSQL CONNECTION my_conn;
//! CREATE TABLE [IF NOT EXISTS] orders_v1 FROM SOURCE src (REFERENCE public.orders)
//!   [WITH (EXCLUDE COLUMNS (a, b), TEXT COLUMNS (c))];
//! CREATE SOURCE [IF NOT EXISTS] ev FROM KAFKA CONNECTION k (TOPIC 'orders');
//! CREATE TABLE [IF NOT EXISTS] orders_v1 FROM SOURCE ev
//!   [KEY FORMAT {TEXT | BYTES | AVRO | JSON | PROTOBUF} VALUE]
//!   FORMAT {AVRO | JSON | PROTOBUF [MESSAGE 'shop.Order']}
//!   USING CONFLUENT SCHEMA REGISTRY CONNECTION csr [SUBJECT 'orders-shop.Order']
//!   [ENVELOPE UPSERT | ENVELOPE NONE | ENVELOPE DEBEZIUM] [WITH (..)];
//! CREATE MATERIALIZED VIEW [IF NOT EXISTS] orders_json [WITH (ABSORB = {'auto' | 'manual'})] AS
//!   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
//! CREATE REPLACEMENT MATERIALIZED VIEW [IF NOT EXISTS] orders_json_v2 FOR orders_json AS
//!   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v2 t;
//! ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2 [WITH (WAIT = '60s')];
//! ALTER MATERIALIZED VIEW orders_json SET (ABSORB = {'auto' | 'manual'});
//! ALTER MATERIALIZED VIEW orders_json RESET (ABSORB);
//! ALTER SOURCE src REFRESH REFERENCES;
//! CREATE SINK [IF NOT EXISTS] orders_sink FROM orders_json
//!   INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');
//! CREATE SINK [IF NOT EXISTS] orders_kafka FROM orders_json
//!   INTO KAFKA CONNECTION k (TOPIC 'orders')
//!   [FORMAT JSON | FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr]
//!   [ENVELOPE UPSERT | ENVELOPE DEBEZIUM];
//! DROP {SOURCE | TABLE | MATERIALIZED VIEW | SINK} [IF EXISTS] name;
//! SHOW {SOURCES | TABLES | MATERIALIZED VIEWS | SINKS};
//! ```
//!
//! and the statements of replicas into nodes at other schema versions
//! (run by `evolve-replicate` behind the pipeline's admin API):
//!
//! ```text
//! CREATE REPLICA [IF NOT EXISTS] node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn
//!   [WITH (TABLES (public.orders, public.customers), COPY DATA = {true | false})];
//! ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'ignore';
//! ALTER REPLICA node_b RESET CONFLICT RESOLVER target_column_missing;
//! CREATE TRANSFORM [IF NOT EXISTS] split_name ON REPLICA node_b FOR TABLE public.customers
//!   SET first_name = split_part(NEW.name, ' ', 1), last_name = split_part(NEW.name, ' ', 2)
//!   [WHERE NEW.status <> 'test'];
//! DROP {REPLICA | TRANSFORM} [IF EXISTS] name;
//! SHOW {REPLICAS | TRANSFORMS};
//! SHOW CONFLICT RESOLVERS FOR REPLICA node_b;
//! ```
//!
//! A conflict type and its resolver are checked when the statement is
//! parsed ([`crate::conflict`]): an unknown type or resolver, or a
//! resolver the type does not allow, is an error (SQLSTATE `22023`) whose
//! message is [`crate::conflict::ConflictError`]'s, naming the allowed
//! ones. The resolver is a string literal (`'ignore'`) or a bare word.
//! A transform's `SET` expressions and its `WHERE` condition are SQL text
//! that the node evaluates: each is kept verbatim (its bytes from its
//! first token to its last), the `SET` list split at commas outside
//! parentheses, brackets and quotes; a `SET` expression ends at such a
//! comma or a `WHERE`, the condition at the end of the statement.
//! Dollar-quoted strings and `E'...'` strings are refused there (the
//! control language's lexer does not read them).
//!
//! Lexical rules are PostgreSQL's: keywords are case-insensitive; unquoted
//! identifiers are folded to lower case (ASCII letters only) and quoted ones
//! (`"Orders"`, `""` for a quote) keep their case; string literals are
//! single-quoted with `''` for a quote and backslashes taken literally;
//! `--` and nested `/* */` comments; statements are separated by `;` (the
//! last one may omit it, empty statements are ignored). Words that
//! PostgreSQL reserves (`select`, `table`, `from`, ...) are names only when
//! quoted, and identifiers longer than PostgreSQL's 63 bytes are refused
//! rather than truncated.
//!
//! Options in parentheses may be written with or without `=`
//! (`PUBLICATION = 'p'`), and each may be given once.
//!
//! `ABSORB` is the one option of a materialized view ([`Absorb`]): its value
//! is the string literal `'auto'` or `'manual'` in any case, and `manual`
//! when it is not given; `RESET (ABSORB)` sets it back to `manual`. A
//! replacement takes no options (`WITH` after `CREATE REPLACEMENT
//! MATERIALIZED VIEW` is refused): applying it leaves the options of the
//! materialized view it replaces as they are, and those are changed with
//! `ALTER MATERIALIZED VIEW ... SET`.
//!
//! A Kafka sink ([`KafkaSink`]) writes `FORMAT JSON` when no format is
//! given and `ENVELOPE UPSERT` when no envelope is; `FORMAT` comes before
//! `ENVELOPE`, each at most once. `FORMAT AVRO ...` is parsed (the
//! registry connection kept) for the pipeline to refuse until it is built.
//!
//! `IF NOT EXISTS` asks for nothing to happen when an object of that kind
//! and name exists, whatever its definition, as in PostgreSQL. `WAIT` is
//! the one option of `APPLY REPLACEMENT`: how long to wait for the
//! replacement to be hydrated before applying it, a duration literal
//! ([`parse_duration`]).
//!
//! A materialized view is only ever the schema-agnostic interface over one
//! ingestion table, so its query is matched against that one form (tokens,
//! so white space, comments and case do not matter):
//!
//! ```text
//! SELECT coalesce(jsonb_strip_nulls(to_jsonb(ALIAS)), '{}'::jsonb) AS data FROM TABLE [[AS] ALIAS]
//! ```
//!
//! where the cast may also be `::JSONB`, `CAST('{}' AS jsonb)` or left out
//! (PostgreSQL resolves the literal to `jsonb` either way), `AS` before
//! `data` and before the alias is optional, and without an alias `to_jsonb`
//! names the table itself. Anything else is refused with an error whose hint
//! shows the accepted form.
//!
//! [`parse`] never panics and runs in time linear in the input. Errors are
//! [`ControlError`]s in PostgreSQL's shape (primary message, detail, hint,
//! position) and display like psql's. [`Statement::to_sql`] renders the
//! canonical text of a statement, which parses back to the same statement.

mod error;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

pub use error::{ControlError, Position};
pub use parser::parse;

use crate::conflict::{ConflictType, Resolver};

/// PostgreSQL's longest identifier in bytes (`NAMEDATALEN - 1`).
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// A byte range `start..end` in the parsed input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// The span as a range, for slicing the input.
    pub fn range(self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// A possibly schema-qualified table name; `schema` is `public` when the
/// statement names only the table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QualifiedName {
    pub schema: String,
    pub name: String,
}

impl QualifiedName {
    pub fn new(schema: impl Into<String>, name: impl Into<String>) -> Self {
        QualifiedName {
            schema: schema.into(),
            name: name.into(),
        }
    }

    /// `schema.name`, each part quoted only where needed ([`sql_ident`]).
    pub fn to_sql(&self) -> String {
        format!("{}.{}", sql_ident(&self.schema), sql_ident(&self.name))
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_sql())
    }
}

/// The kinds of objects in the pipeline's catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    Source,
    Table,
    MaterializedView,
    Sink,
    /// A replica into a node at another schema version (`evolve-replicate`).
    Replica,
    /// A transform of a replica's rows for one table.
    Transform,
}

impl ObjectKind {
    /// The keywords naming one object: `SOURCE`, `MATERIALIZED VIEW`, ...
    pub fn keyword(self) -> &'static str {
        match self {
            ObjectKind::Source => "SOURCE",
            ObjectKind::Table => "TABLE",
            ObjectKind::MaterializedView => "MATERIALIZED VIEW",
            ObjectKind::Sink => "SINK",
            ObjectKind::Replica => "REPLICA",
            ObjectKind::Transform => "TRANSFORM",
        }
    }

    /// The keywords of `SHOW`: `SOURCES`, `MATERIALIZED VIEWS`, ...
    pub fn plural_keyword(self) -> &'static str {
        match self {
            ObjectKind::Source => "SOURCES",
            ObjectKind::Table => "TABLES",
            ObjectKind::MaterializedView => "MATERIALIZED VIEWS",
            ObjectKind::Sink => "SINKS",
            ObjectKind::Replica => "REPLICAS",
            ObjectKind::Transform => "TRANSFORMS",
        }
    }

    /// The noun for messages: `source`, `materialized view`, ...
    pub fn noun(self) -> &'static str {
        match self {
            ObjectKind::Source => "source",
            ObjectKind::Table => "table",
            ObjectKind::MaterializedView => "materialized view",
            ObjectKind::Sink => "sink",
            ObjectKind::Replica => "replica",
            ObjectKind::Transform => "transform",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.noun())
    }
}

/// `CREATE SOURCE name FROM POSTGRES CONNECTION connection (PUBLICATION
/// 'publication')`, `CREATE SOURCE name FROM MYSQL CONNECTION
/// connection` (MySQL and MariaDB, read from the binlog: no options), or
/// `CREATE SOURCE name FROM KAFKA CONNECTION connection (TOPIC 'topic')`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateSource {
    pub name: String,
    /// `IF NOT EXISTS`: an existing source of this name is left as it is.
    pub if_not_exists: bool,
    /// What kind of upstream the source reads.
    pub kind: SourceKind,
    pub connection: String,
    /// The upstream publication's name, exactly as written in the literal;
    /// empty for a MySQL source; the topic for a Kafka source.
    pub publication: String,
    pub span: Span,
}

/// The kind of upstream a source reads (`FROM POSTGRES`, `FROM MYSQL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// PostgreSQL, through a logical replication slot and a publication.
    #[default]
    Postgres,
    /// MySQL or MariaDB, through the row-based binlog.
    Mysql,
    /// A Kafka topic of Avro records (Confluent's wire format).
    Kafka,
}

/// How a Kafka table reads its topic's records: `[KEY FORMAT TEXT |
/// BYTES | AVRO | JSON | PROTOBUF VALUE] FORMAT AVRO | JSON | PROTOBUF
/// [MESSAGE 'name'] USING CONFLUENT SCHEMA REGISTRY CONNECTION registry
/// [SUBJECT 'subject'] [ENVELOPE UPSERT | ENVELOPE NONE | ENVELOPE
/// DEBEZIUM]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaTable {
    /// The registry's connection, by its name in `evolve.toml`.
    pub registry: String,
    /// What a record means.
    pub envelope: TableEnvelope,
    /// How a record's value is written.
    pub format: TableFormat,
    /// `KEY FORMAT ... VALUE FORMAT ...`: how a record's key is written.
    /// `None` leaves it to `CREATE TABLE`, which looks for the topic's
    /// `<topic>-key` subject in the registry. Only keyed envelopes read
    /// keys, so `ENVELOPE NONE` has none.
    pub key_format: Option<KeyFormat>,
    /// `FORMAT PROTOBUF MESSAGE 'name'`: the message the table reads (a
    /// full name); `None` reads the schema file's first message.
    pub message: Option<String>,
    /// `SUBJECT 'name'`: the subject whose latest schema is pinned, for a
    /// topic of several record types (Confluent's RecordNameStrategy or
    /// TopicRecordNameStrategy); `None` is the topic's `<topic>-value`.
    pub subject: Option<String>,
}

/// `FORMAT` of a Kafka table: how its records' values are written, each
/// after Confluent's wire header (a zero byte, the schema's id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TableFormat {
    /// `FORMAT AVRO` (Confluent's Avro serializer).
    #[default]
    Avro,
    /// `FORMAT JSON`: JSON text under a JSON Schema (Confluent's JSON
    /// Schema serializer).
    Json,
    /// `FORMAT PROTOBUF`: a Protobuf message after Confluent's message
    /// indexes (Confluent's Protobuf serializer).
    Protobuf,
}

impl TableFormat {
    /// The format's keyword: `avro`, `json` or `protobuf`.
    pub fn as_str(self) -> &'static str {
        match self {
            TableFormat::Avro => "avro",
            TableFormat::Json => "json",
            TableFormat::Protobuf => "protobuf",
        }
    }

    /// The schema type a registry gives schemas of this format: `AVRO`,
    /// `JSON` or `PROTOBUF`.
    pub fn schema_type(self) -> &'static str {
        match self {
            TableFormat::Avro => "AVRO",
            TableFormat::Json => "JSON",
            TableFormat::Protobuf => "PROTOBUF",
        }
    }

    /// The format named `word` (any case).
    pub fn parse(word: &str) -> Option<TableFormat> {
        match word.to_ascii_lowercase().as_str() {
            "avro" => Some(TableFormat::Avro),
            "json" => Some(TableFormat::Json),
            "protobuf" => Some(TableFormat::Protobuf),
            _ => None,
        }
    }
}

/// `KEY FORMAT` of a Kafka table: how its records' keys are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// `KEY FORMAT TEXT`: a key is its UTF-8 text (JSON's string), else
    /// (not UTF-8, or holding a NUL, which PostgreSQL's text cannot) its
    /// bytes in bytea's hex form, `"\\x0102"`.
    Text,
    /// `KEY FORMAT BYTES`: a key is its bytes in bytea's hex form.
    Bytes,
    /// `KEY FORMAT AVRO | JSON | PROTOBUF`: a key is written in
    /// Confluent's wire format as a value of that format is, and read with
    /// the schema its header names.
    Registry(TableFormat),
}

impl KeyFormat {
    /// The format's keyword: `text`, `bytes`, `avro`, `json` or
    /// `protobuf`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyFormat::Text => "text",
            KeyFormat::Bytes => "bytes",
            KeyFormat::Registry(format) => format.as_str(),
        }
    }

    /// The key format named `word` (any case).
    pub fn parse(word: &str) -> Option<KeyFormat> {
        match word.to_ascii_lowercase().as_str() {
            "text" => Some(KeyFormat::Text),
            "bytes" => Some(KeyFormat::Bytes),
            other => TableFormat::parse(other).map(KeyFormat::Registry),
        }
    }
}

/// `ENVELOPE` of a Kafka table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TableEnvelope {
    /// `ENVELOPE UPSERT` (the default): a record is the row of its key; a
    /// tombstone (no value) deletes it.
    #[default]
    Upsert,
    /// `ENVELOPE NONE`: every record is a row of its own, keyed by its
    /// topic, partition and offset (append-only).
    None,
    /// `ENVELOPE DEBEZIUM`: a record is a Debezium change event of the row
    /// of its key (`before`, `after`, `op`): `c`, `r` and `u` make the row
    /// `after`, `d` and a tombstone delete it.
    Debezium,
}

impl TableEnvelope {
    /// The envelope's keyword: `upsert`, `none` or `debezium`.
    pub fn as_str(self) -> &'static str {
        match self {
            TableEnvelope::Upsert => "upsert",
            TableEnvelope::None => "none",
            TableEnvelope::Debezium => "debezium",
        }
    }

    /// Whether a record's key is the row's key (`UPSERT`, `DEBEZIUM`),
    /// not its topic, partition and offset (`NONE`).
    pub fn keyed(self) -> bool {
        self != TableEnvelope::None
    }

    /// The envelope named `word` (any case).
    pub fn parse(word: &str) -> Option<TableEnvelope> {
        match word.to_ascii_lowercase().as_str() {
            "upsert" => Some(TableEnvelope::Upsert),
            "none" => Some(TableEnvelope::None),
            "debezium" => Some(TableEnvelope::Debezium),
            _ => None,
        }
    }
}

/// `CREATE TABLE name FROM SOURCE source (REFERENCE schema.table)
/// [WITH (EXCLUDE COLUMNS (..), TEXT COLUMNS (..))]`, or for a Kafka
/// source `CREATE TABLE name FROM SOURCE source FORMAT ... USING CONFLUENT
/// SCHEMA REGISTRY CONNECTION registry [SUBJECT '..'] [ENVELOPE ...] [WITH
/// (..)]` ([`KafkaTable`]; the source's topic is the table's upstream).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateTable {
    pub name: String,
    /// `IF NOT EXISTS`: an existing table of this name is left as it is.
    pub if_not_exists: bool,
    pub source: String,
    /// The upstream table.
    pub reference: QualifiedName,
    /// Upstream columns not ingested, in statement order; empty when the
    /// option is absent (an empty list cannot be written).
    pub exclude_columns: Vec<String>,
    /// Upstream columns ingested as their text representation, in statement
    /// order; disjoint from `exclude_columns`.
    pub text_columns: Vec<String>,
    /// `FORMAT ...`: a table of a Kafka source (whose `reference` is
    /// empty).
    pub kafka: Option<KafkaTable>,
    pub span: Span,
}

/// The `ABSORB` option of a materialized view: who absorbs upstream schema
/// changes behind the interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Absorb {
    /// An operator creates and applies each replacement (the default).
    #[default]
    Manual,
    /// The pipeline absorbs upstream schema changes on its own.
    Auto,
}

impl Absorb {
    /// The option's value as written in a statement: `manual` or `auto`.
    pub fn as_str(self) -> &'static str {
        match self {
            Absorb::Manual => "manual",
            Absorb::Auto => "auto",
        }
    }
}

impl fmt::Display for Absorb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `CREATE MATERIALIZED VIEW name [WITH (ABSORB = 'auto' | 'manual')] AS
/// SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM table t`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateMaterializedView {
    pub name: String,
    /// `IF NOT EXISTS`: an existing materialized view of this name is left
    /// as it is.
    pub if_not_exists: bool,
    /// The ingestion table the interface reads.
    pub table: String,
    /// [`Absorb::Manual`] when the statement has no `WITH`.
    pub absorb: Absorb,
    pub span: Span,
}

/// `CREATE REPLACEMENT MATERIALIZED VIEW name FOR target AS SELECT ... FROM table t`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateReplacement {
    pub name: String,
    /// `IF NOT EXISTS`: an existing materialized view or replacement of
    /// this name is left as it is.
    pub if_not_exists: bool,
    /// The materialized view this one will replace.
    pub target: String,
    /// The ingestion table the replacement reads.
    pub table: String,
    pub span: Span,
}

/// `ALTER MATERIALIZED VIEW view APPLY REPLACEMENT replacement [WITH (WAIT
/// = 'duration')]`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApplyReplacement {
    pub view: String,
    pub replacement: String,
    /// `WAIT`: how long to wait for the replacement to be hydrated; `None`
    /// refuses one that is not hydrated yet.
    pub wait: Option<Duration>,
    pub span: Span,
}

/// `ALTER MATERIALIZED VIEW name SET (ABSORB = 'auto' | 'manual')` or
/// `ALTER MATERIALIZED VIEW name RESET (ABSORB)` (which sets
/// [`Absorb::Manual`])
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AlterMaterializedView {
    pub name: String,
    /// The option's new value.
    pub absorb: Absorb,
    pub span: Span,
}

/// `ALTER SOURCE source REFRESH REFERENCES`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefreshReferences {
    pub source: String,
    pub span: Span,
}

/// `CREATE SINK name FROM view INTO POSTGRES CONNECTION connection (TABLE 'schema.table')`,
/// or `... INTO KAFKA CONNECTION connection (TOPIC 'topic') [FORMAT ...] [ENVELOPE ...]`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateSink {
    pub name: String,
    /// `IF NOT EXISTS`: an existing sink of this name is left as it is.
    pub if_not_exists: bool,
    /// The materialized view whose changes the sink receives.
    pub from: String,
    pub connection: String,
    /// The sink table, read from the literal with identifier rules
    /// (`'public."Orders"'`; `public` when only the table is named).
    /// Empty (both parts) for a Kafka sink.
    pub table: QualifiedName,
    /// `INTO KAFKA`: the topic, format and envelope; `None` for `INTO
    /// POSTGRES`.
    pub kafka: Option<KafkaSink>,
    pub span: Span,
}

/// What `INTO KAFKA CONNECTION c (TOPIC 'topic') [FORMAT ...] [ENVELOPE
/// ...]` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaSink {
    /// The topic, as written (Kafka topic names are case-sensitive).
    pub topic: String,
    /// How keys and values are encoded.
    pub format: SinkFormat,
    /// What a record's value holds.
    pub envelope: SinkEnvelope,
}

/// `FORMAT` of a Kafka sink.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum SinkFormat {
    /// `FORMAT JSON` (the default): the key and the document as JSON text.
    #[default]
    Json,
    /// `FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION registry`.
    Avro {
        /// The registry's connection, by its name in `evolve.toml`.
        registry: String,
    },
}

/// `ENVELOPE` of a Kafka sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SinkEnvelope {
    /// `ENVELOPE UPSERT` (the default): the value is the document, a
    /// delete is a tombstone (no value).
    #[default]
    Upsert,
    /// `ENVELOPE DEBEZIUM`: the value is `{"before":..,"after":..,"op":..}`.
    Debezium,
}

impl SinkFormat {
    /// The format's keyword: `json` or `avro`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SinkFormat::Json => "json",
            SinkFormat::Avro { .. } => "avro",
        }
    }
}

impl SinkEnvelope {
    /// The envelope's keyword: `upsert` or `debezium`.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkEnvelope::Upsert => "upsert",
            SinkEnvelope::Debezium => "debezium",
        }
    }

    /// The envelope named `s` (lower case), if there is one.
    pub fn parse(s: &str) -> Option<SinkEnvelope> {
        match s {
            "upsert" => Some(SinkEnvelope::Upsert),
            "debezium" => Some(SinkEnvelope::Debezium),
            _ => None,
        }
    }
}

/// `CREATE REPLICA name FROM SOURCE source INTO POSTGRES CONNECTION
/// connection [WITH (TABLES (schema.table, ...), COPY DATA = true)]`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateReplica {
    pub name: String,
    /// `IF NOT EXISTS`: an existing replica of this name is left as it is.
    pub if_not_exists: bool,
    /// The pipeline source whose upstream the replica reads.
    pub source: String,
    /// The node's connection, by its name in `evolve.toml`.
    pub connection: String,
    /// The upstream tables it replicates, in statement order, each once;
    /// empty when `TABLES` is not given (the source's publication's
    /// tables).
    pub tables: Vec<QualifiedName>,
    /// `COPY DATA`: copy the tables before streaming (`false` when not
    /// given).
    pub copy_data: bool,
    /// `ENABLED`: the replica starts at once (`true` when not given); a
    /// disabled one waits for `ALTER REPLICA ... ENABLE`.
    pub enabled: bool,
    pub span: Span,
}

/// `ALTER REPLICA name ENABLE` or `ALTER REPLICA name DISABLE`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EnableReplica {
    pub name: String,
    pub enabled: bool,
    pub span: Span,
}

/// `ALTER REPLICA name SET CONFLICT RESOLVER conflict_type = 'resolver'`
/// or `ALTER REPLICA name RESET CONFLICT RESOLVER conflict_type`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AlterReplica {
    pub name: String,
    pub conflict: ConflictType,
    /// The resolver set (one the type allows); `None` is `RESET`, back to
    /// the type's default.
    pub resolver: Option<Resolver>,
    pub span: Span,
}

/// `CREATE TRANSFORM name ON REPLICA replica FOR TABLE schema.table SET
/// column = expression [, ...] [WHERE condition]`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreateTransform {
    pub name: String,
    /// `IF NOT EXISTS`: an existing transform of this name is left as it is.
    pub if_not_exists: bool,
    pub replica: String,
    /// The upstream table whose rows it transforms.
    pub table: QualifiedName,
    /// Node columns, each once, with the SQL expression (over `NEW`, the
    /// incoming row) that computes each, verbatim.
    pub sets: Vec<(String, String)>,
    /// The SQL condition (over `NEW`) a row must meet to be applied,
    /// verbatim.
    pub filter: Option<String>,
    pub span: Span,
}

/// `SHOW CONFLICT RESOLVERS FOR REPLICA name`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShowConflictResolvers {
    pub replica: String,
    pub span: Span,
}

/// `DROP {SOURCE | TABLE | MATERIALIZED VIEW | SINK | REPLICA | TRANSFORM}
/// [IF EXISTS] name`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Drop {
    pub kind: ObjectKind,
    pub name: String,
    pub if_exists: bool,
    pub span: Span,
}

/// `SHOW {SOURCES | TABLES | MATERIALIZED VIEWS | SINKS | REPLICAS |
/// TRANSFORMS}`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Show {
    pub kind: ObjectKind,
    pub span: Span,
}

/// One statement of the control language.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Statement {
    CreateSource(CreateSource),
    CreateTable(CreateTable),
    CreateMaterializedView(CreateMaterializedView),
    CreateReplacement(CreateReplacement),
    ApplyReplacement(ApplyReplacement),
    AlterMaterializedView(AlterMaterializedView),
    RefreshReferences(RefreshReferences),
    CreateSink(CreateSink),
    Drop(Drop),
    Show(Show),
    CreateReplica(CreateReplica),
    AlterReplica(AlterReplica),
    EnableReplica(EnableReplica),
    CreateTransform(CreateTransform),
    ShowConflictResolvers(ShowConflictResolvers),
}

impl Statement {
    /// The statement's bytes in the parsed input, from its first token to
    /// its last, without the terminating `;`.
    pub fn span(&self) -> Span {
        match self {
            Statement::CreateSource(s) => s.span,
            Statement::CreateTable(s) => s.span,
            Statement::CreateMaterializedView(s) => s.span,
            Statement::CreateReplacement(s) => s.span,
            Statement::ApplyReplacement(s) => s.span,
            Statement::AlterMaterializedView(s) => s.span,
            Statement::RefreshReferences(s) => s.span,
            Statement::CreateSink(s) => s.span,
            Statement::Drop(s) => s.span,
            Statement::Show(s) => s.span,
            Statement::CreateReplica(s) => s.span,
            Statement::AlterReplica(s) => s.span,
            Statement::EnableReplica(s) => s.span,
            Statement::CreateTransform(s) => s.span,
            Statement::ShowConflictResolvers(s) => s.span,
        }
    }

    /// The same statement with another span.
    pub fn with_span(mut self, span: Span) -> Statement {
        match &mut self {
            Statement::CreateSource(s) => s.span = span,
            Statement::CreateTable(s) => s.span = span,
            Statement::CreateMaterializedView(s) => s.span = span,
            Statement::CreateReplacement(s) => s.span = span,
            Statement::ApplyReplacement(s) => s.span = span,
            Statement::AlterMaterializedView(s) => s.span = span,
            Statement::RefreshReferences(s) => s.span = span,
            Statement::CreateSink(s) => s.span = span,
            Statement::Drop(s) => s.span = span,
            Statement::Show(s) => s.span = span,
            Statement::CreateReplica(s) => s.span = span,
            Statement::AlterReplica(s) => s.span = span,
            Statement::EnableReplica(s) => s.span = span,
            Statement::CreateTransform(s) => s.span = span,
            Statement::ShowConflictResolvers(s) => s.span = span,
        }
        self
    }

    /// Equality of everything but the spans.
    pub fn eq_ignoring_span(&self, other: &Statement) -> bool {
        self.clone().with_span(Span::default()) == other.clone().with_span(Span::default())
    }

    /// The kind of object the statement creates, alters, drops or shows.
    pub fn object_kind(&self) -> ObjectKind {
        match self {
            Statement::CreateSource(_) | Statement::RefreshReferences(_) => ObjectKind::Source,
            Statement::CreateTable(_) => ObjectKind::Table,
            Statement::CreateMaterializedView(_)
            | Statement::CreateReplacement(_)
            | Statement::ApplyReplacement(_)
            | Statement::AlterMaterializedView(_) => ObjectKind::MaterializedView,
            Statement::CreateSink(_) => ObjectKind::Sink,
            Statement::Drop(d) => d.kind,
            Statement::Show(s) => s.kind,
            Statement::CreateReplica(_)
            | Statement::AlterReplica(_)
            | Statement::EnableReplica(_)
            | Statement::ShowConflictResolvers(_) => ObjectKind::Replica,
            Statement::CreateTransform(_) => ObjectKind::Transform,
        }
    }

    /// The canonical text of the statement, without a terminating `;`:
    /// keywords in upper case, single spaces, identifiers quoted only where
    /// needed ([`sql_ident`]), the reference and sink table always
    /// schema-qualified, the interface query in its one form with alias `t`,
    /// `WITH (ABSORB = 'auto')` only when it is not the default, `WAIT`
    /// as [`format_duration`] writes it, `RESET (ABSORB)` written as
    /// `SET (ABSORB = 'manual')`, `COPY DATA = true` only when it is true,
    /// resolvers as string literals, and a transform's expressions as
    /// they were written.
    /// For every statement `s` that [`parse`] returned,
    /// `parse(&s.to_sql())` is `[s]` up to spans.
    pub fn to_sql(&self) -> String {
        match self {
            Statement::CreateSource(s) if s.kind == SourceKind::Mysql => format!(
                "CREATE SOURCE {}{} FROM MYSQL CONNECTION {}",
                if_not_exists(s.if_not_exists),
                sql_ident(&s.name),
                sql_ident(&s.connection),
            ),
            Statement::CreateSource(s) if s.kind == SourceKind::Kafka => format!(
                "CREATE SOURCE {}{} FROM KAFKA CONNECTION {} (TOPIC {})",
                if_not_exists(s.if_not_exists),
                sql_ident(&s.name),
                sql_ident(&s.connection),
                sql_literal(&s.publication)
            ),
            Statement::CreateSource(s) => format!(
                "CREATE SOURCE {}{} FROM POSTGRES CONNECTION {} (PUBLICATION {})",
                if_not_exists(s.if_not_exists),
                sql_ident(&s.name),
                sql_ident(&s.connection),
                sql_literal(&s.publication)
            ),
            Statement::CreateTable(s) => {
                let mut sql = format!(
                    "CREATE TABLE {}{} FROM SOURCE {}",
                    if_not_exists(s.if_not_exists),
                    sql_ident(&s.name),
                    sql_ident(&s.source),
                );
                match &s.kafka {
                    Some(k) => sql.push_str(&format!(
                        "{} FORMAT {}{} USING CONFLUENT SCHEMA REGISTRY CONNECTION {}{} ENVELOPE {}",
                        k.key_format
                            .map(|f| format!(" KEY FORMAT {} VALUE", f.as_str().to_ascii_uppercase()))
                            .unwrap_or_default(),
                        k.format.as_str().to_ascii_uppercase(),
                        k.message
                            .as_ref()
                            .map(|m| format!(" MESSAGE {}", sql_literal(m)))
                            .unwrap_or_default(),
                        sql_ident(&k.registry),
                        k.subject
                            .as_ref()
                            .map(|s| format!(" SUBJECT {}", sql_literal(s)))
                            .unwrap_or_default(),
                        k.envelope.as_str().to_ascii_uppercase()
                    )),
                    None => sql.push_str(&format!(" (REFERENCE {})", s.reference.to_sql())),
                }
                let mut options = Vec::new();
                if !s.exclude_columns.is_empty() {
                    options.push(format!(
                        "EXCLUDE COLUMNS ({})",
                        ident_list(&s.exclude_columns)
                    ));
                }
                if !s.text_columns.is_empty() {
                    options.push(format!("TEXT COLUMNS ({})", ident_list(&s.text_columns)));
                }
                if !options.is_empty() {
                    sql.push_str(" WITH (");
                    sql.push_str(&options.join(", "));
                    sql.push(')');
                }
                sql
            }
            Statement::CreateMaterializedView(s) => format!(
                "CREATE MATERIALIZED VIEW {}{}{} AS {}",
                if_not_exists(s.if_not_exists),
                sql_ident(&s.name),
                match s.absorb {
                    Absorb::Manual => String::new(),
                    Absorb::Auto => format!(" WITH ({})", absorb_option(s.absorb)),
                },
                interface_query(&s.table)
            ),
            Statement::CreateReplacement(s) => format!(
                "CREATE REPLACEMENT MATERIALIZED VIEW {}{} FOR {} AS {}",
                if_not_exists(s.if_not_exists),
                sql_ident(&s.name),
                sql_ident(&s.target),
                interface_query(&s.table)
            ),
            Statement::ApplyReplacement(s) => {
                let mut sql = format!(
                    "ALTER MATERIALIZED VIEW {} APPLY REPLACEMENT {}",
                    sql_ident(&s.view),
                    sql_ident(&s.replacement)
                );
                if let Some(wait) = s.wait {
                    sql.push_str(&wait_option(wait));
                }
                sql
            }
            Statement::AlterMaterializedView(s) => format!(
                "ALTER MATERIALIZED VIEW {} SET ({})",
                sql_ident(&s.name),
                absorb_option(s.absorb)
            ),
            Statement::RefreshReferences(s) => {
                format!("ALTER SOURCE {} REFRESH REFERENCES", sql_ident(&s.source))
            }
            Statement::CreateSink(s) => match &s.kafka {
                None => format!(
                    "CREATE SINK {}{} FROM {} INTO POSTGRES CONNECTION {} (TABLE {})",
                    if_not_exists(s.if_not_exists),
                    sql_ident(&s.name),
                    sql_ident(&s.from),
                    sql_ident(&s.connection),
                    sql_literal(&s.table.to_sql())
                ),
                Some(k) => format!(
                    "CREATE SINK {}{} FROM {} INTO KAFKA CONNECTION {} (TOPIC {}) FORMAT {} ENVELOPE {}",
                    if_not_exists(s.if_not_exists),
                    sql_ident(&s.name),
                    sql_ident(&s.from),
                    sql_ident(&s.connection),
                    sql_literal(&k.topic),
                    match &k.format {
                        SinkFormat::Json => "JSON".to_string(),
                        SinkFormat::Avro { registry } => format!(
                            "AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION {}",
                            sql_ident(registry)
                        ),
                    },
                    k.envelope.as_str().to_ascii_uppercase()
                ),
            },
            Statement::Drop(s) => format!(
                "DROP {}{} {}",
                s.kind.keyword(),
                if s.if_exists { " IF EXISTS" } else { "" },
                sql_ident(&s.name)
            ),
            Statement::Show(s) => format!("SHOW {}", s.kind.plural_keyword()),
            Statement::CreateReplica(s) => {
                let mut sql = format!(
                    "CREATE REPLICA {}{} FROM SOURCE {} INTO POSTGRES CONNECTION {}",
                    if_not_exists(s.if_not_exists),
                    sql_ident(&s.name),
                    sql_ident(&s.source),
                    sql_ident(&s.connection)
                );
                let mut options = Vec::new();
                if !s.tables.is_empty() {
                    let tables: Vec<String> = s.tables.iter().map(QualifiedName::to_sql).collect();
                    options.push(format!("TABLES ({})", tables.join(", ")));
                }
                if s.copy_data {
                    options.push("COPY DATA = true".to_string());
                }
                if !s.enabled {
                    options.push("ENABLED = false".to_string());
                }
                if !options.is_empty() {
                    sql.push_str(" WITH (");
                    sql.push_str(&options.join(", "));
                    sql.push(')');
                }
                sql
            }
            Statement::EnableReplica(s) => format!(
                "ALTER REPLICA {} {}",
                sql_ident(&s.name),
                if s.enabled { "ENABLE" } else { "DISABLE" }
            ),
            Statement::AlterReplica(s) => match s.resolver {
                Some(resolver) => format!(
                    "ALTER REPLICA {} SET CONFLICT RESOLVER {} = {}",
                    sql_ident(&s.name),
                    s.conflict.name(),
                    sql_literal(resolver.name())
                ),
                None => format!(
                    "ALTER REPLICA {} RESET CONFLICT RESOLVER {}",
                    sql_ident(&s.name),
                    s.conflict.name()
                ),
            },
            Statement::CreateTransform(s) => {
                let sets: Vec<String> = s
                    .sets
                    .iter()
                    .map(|(column, expression)| format!("{} = {expression}", sql_ident(column)))
                    .collect();
                let mut sql = format!(
                    "CREATE TRANSFORM {}{} ON REPLICA {} FOR TABLE {} SET {}",
                    if_not_exists(s.if_not_exists),
                    sql_ident(&s.name),
                    sql_ident(&s.replica),
                    s.table.to_sql(),
                    sets.join(", ")
                );
                if let Some(filter) = &s.filter {
                    sql.push_str(" WHERE ");
                    sql.push_str(filter);
                }
                sql
            }
            Statement::ShowConflictResolvers(s) => format!(
                "SHOW CONFLICT RESOLVERS FOR REPLICA {}",
                sql_ident(&s.replica)
            ),
        }
    }
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_sql())
    }
}

/// The interface query over `table`, as [`Statement::to_sql`] writes it.
fn interface_query(table: &str) -> String {
    format!(
        "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM {} t",
        sql_ident(table)
    )
}

/// `ABSORB = 'auto'`
fn absorb_option(absorb: Absorb) -> String {
    format!("ABSORB = {}", sql_literal(absorb.as_str()))
}

/// `IF NOT EXISTS ` when `yes`.
fn if_not_exists(yes: bool) -> &'static str {
    if yes { "IF NOT EXISTS " } else { "" }
}

/// ` WITH (WAIT = '60s')`: the option as it follows `APPLY REPLACEMENT
/// name`, for [`Statement::to_sql`] and for clients that add it to a
/// statement that does not say it.
pub fn wait_option(wait: Duration) -> String {
    format!(" WITH (WAIT = {})", sql_literal(&format_duration(wait)))
}

/// How a duration is written, for error messages: what
/// [`parse_duration`] reads.
pub const DURATION_FORMAT: &str =
    "numbers each with a unit (ms, s, m or min, h, d), e.g. 90s, 500ms or 1h30m";

/// Reads a duration: one or more numbers each followed by a unit (`ms`,
/// `s`, `m` or `min`, `h`, `d`), added up: `60s`, `500ms`, `2min`,
/// `1m30s`, `2d`. Every duration evolve reads (options, `evolve.toml`,
/// `WAIT`) has this form. `None` when it is anything else, or more than
/// `u64::MAX` milliseconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    let mut millis: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let per: u64 = match &rest[..unit] {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit..];
        millis = millis.checked_add(number.checked_mul(per)?)?;
    }
    Some(Duration::from_millis(millis))
}

/// A duration as [`parse_duration`] reads it back: whole seconds as `60s`,
/// anything else in milliseconds (`1500ms`); sub-millisecond parts are
/// dropped.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1_000) {
        format!("{}s", millis / 1_000)
    } else {
        format!("{millis}ms")
    }
}

fn ident_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| sql_ident(n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An identifier as the control language (and PostgreSQL) reads it back:
/// bare when it is a lower-case ASCII identifier (`[a-z_][a-z0-9_$]*`) and
/// not a keyword, double-quoted with `""` escapes otherwise.
pub fn sql_ident(name: &str) -> Cow<'_, str> {
    let bytes = name.as_bytes();
    let plain = matches!(bytes.first(), Some(b'a'..=b'z' | b'_'))
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'$'))
        && !lexer::is_keyword(name);
    if plain {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(format!("\"{}\"", name.replace('"', "\"\"")))
    }
}

/// A string literal: single-quoted with `''` escapes.
pub fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}
