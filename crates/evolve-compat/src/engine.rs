//! One entry point over the three formats.

use crate::{
    Finding, Incompatibility, Mode, Reference, SchemaError, SchemaType, avro, check_with, json,
    protobuf,
};

/// A parsed schema of any of the three types.
#[derive(Clone, Debug)]
pub enum Schema {
    Avro(avro::AvroSchema),
    Protobuf(protobuf::ProtobufSchema),
    Json(json::JsonSchema),
}

impl Schema {
    /// Parses `text` as a schema of type `schema_type`, with the schemas it
    /// references, as a new schema: what [`Schema::new_schema_error`]
    /// answers is an error too.
    pub fn parse(
        schema_type: SchemaType,
        text: &str,
        references: &[Reference],
    ) -> Result<Schema, SchemaError> {
        let schema = Schema::parse_stored(schema_type, text, references)?;
        match schema.new_schema_error() {
            Some(e) => Err(e.clone()),
            None => Ok(schema),
        }
    }

    /// Parses a schema that was accepted before (read back from a store,
    /// taken by an earlier release): as [`Schema::parse`], but what only
    /// new schemas are refused for ([`Schema::new_schema_error`]) is not
    /// an error, so that what was stored keeps working.
    pub fn parse_stored(
        schema_type: SchemaType,
        text: &str,
        references: &[Reference],
    ) -> Result<Schema, SchemaError> {
        Ok(match schema_type {
            SchemaType::Avro => Schema::Avro(avro::parse(text, references)?),
            SchemaType::Protobuf => Schema::Protobuf(protobuf::parse(text, references)?),
            SchemaType::Json => Schema::Json(json::parse_stored(text, references)?),
        })
    }

    /// Why this schema, which parses, is refused when offered as a new
    /// one: for a JSON Schema, a pattern of its own that Java's
    /// `java.util.regex` refuses ([`json::JsonSchema::java_pattern_error`]);
    /// never for Avro and Protobuf.
    pub fn new_schema_error(&self) -> Option<&SchemaError> {
        match self {
            Schema::Json(s) => s.java_pattern_error(),
            Schema::Avro(_) | Schema::Protobuf(_) => None,
        }
    }

    pub fn schema_type(&self) -> SchemaType {
        match self {
            Schema::Avro(_) => SchemaType::Avro,
            Schema::Protobuf(_) => SchemaType::Protobuf,
            Schema::Json(_) => SchemaType::Json,
        }
    }

    /// A deterministic text for deduplicating schemas: two schemas with the
    /// same canonical form are the same schema.
    pub fn canonical_form(&self) -> String {
        match self {
            Schema::Avro(s) => avro::canonical_form(s),
            Schema::Protobuf(s) => protobuf::canonical_form(s),
            Schema::Json(s) => json::canonical_form(s),
        }
    }
}

/// Every reason `reader` cannot read data written with `writer`. Schemas
/// of different types never can.
pub fn can_read(reader: &Schema, writer: &Schema) -> Vec<Incompatibility> {
    match (reader, writer) {
        (Schema::Avro(r), Schema::Avro(w)) => avro::check(r, w),
        (Schema::Protobuf(r), Schema::Protobuf(w)) => protobuf::check(r, w),
        (Schema::Json(r), Schema::Json(w)) => json::check(r, w),
        _ => vec![Incompatibility {
            kind: "SCHEMA_TYPE_CHANGED".into(),
            path: "#".into(),
            message: format!(
                "a {:?} schema cannot read data written with a {:?} schema",
                reader.schema_type(),
                writer.schema_type()
            ),
        }],
    }
}

/// Checks `new` against `previous` (newest first) as `mode` requires.
pub fn check(mode: Mode, new: &Schema, previous: &[Schema]) -> Vec<Finding> {
    check_with(mode, new, previous, can_read)
}
