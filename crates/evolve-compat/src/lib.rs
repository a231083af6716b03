//! evolve's schema compatibility engine: Avro, Protobuf and JSON Schema,
//! with Confluent Schema Registry's seven modes.
//!
//! Pure: no files, sockets, clock or environment. Schemas come in as text
//! (with the texts of the schemas they reference) and verdicts go out as
//! lists of [`Incompatibility`], every one of them, each with a kind, a
//! location and a sentence; an empty list means compatible.
//!
//! Each format implements one question, "can `reader` read everything
//! written with `writer`?" ([`avro::check`], [`protobuf::check`],
//! [`json::check`]); [`check`] turns it into the modes: BACKWARD asks it
//! with reader = the new schema and writer = the old one, FORWARD the other
//! way round, FULL both, and the TRANSITIVE variants against every older
//! version, newest first, instead of only the latest.

pub mod avro;
pub mod json;
pub mod protobuf;

use serde::Serialize;

/// A schema format, as named in the registry's `schemaType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

/// One way in which a reader cannot read what a writer wrote.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Incompatibility {
    /// A stable name in Confluent's vocabulary where it has one, e.g.
    /// `READER_FIELD_MISSING_DEFAULT_VALUE`, `FIELD_KIND_CHANGED`,
    /// `PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL`.
    pub kind: String,
    /// Where: a JSON pointer into the schema for Avro (`/fields/1/type`)
    /// and JSON Schema (`#/properties/foo`), `#/Message/2` (message, field
    /// number) for Protobuf.
    pub path: String,
    /// One sentence a person can act on.
    pub message: String,
}

/// A schema that another one references by name (Confluent's
/// `references`): an Avro named type defined elsewhere, a Protobuf import,
/// a JSON Schema `$ref` target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The name it is referenced by: the Avro full name, the Protobuf
    /// import path (`other.proto`), the JSON Schema `$ref` URI.
    pub name: String,
    /// Its text.
    pub schema: String,
}

/// A schema that cannot be used: it does not parse, or is not a valid
/// schema of its type. One line, saying what and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {schema_type:?} schema: {message}")]
pub struct SchemaError {
    pub schema_type: SchemaType,
    pub message: String,
}
