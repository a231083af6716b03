//! Avro records as the pipeline's rows: the columns of a Kafka table (one
//! per field of its pinned reader schema) and each record's values in the
//! text form of the PostgreSQL type its field maps to, so that a document
//! is what `to_jsonb` gives for a row of those types.
//!
//! | Avro (after `["null", T]` unions) | column type | document value |
//! |---|---|---|
//! | `boolean` | `boolean` | `true` / `false` |
//! | `int`, `long` | `integer`, `bigint` | a number |
//! | `float`, `double` | `real`, `double precision` | a number; `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | `string`, `enum` | `text` | a string (an enum's symbol) |
//! | `bytes`, `fixed` | `bytea` | `"\\x0102"` |
//! | `decimal` (bytes or fixed) | `numeric(p,s)` | a number with its scale (`1.50`) |
//! | `uuid` | `uuid` | a string |
//! | `date` | `date` | `"2024-05-01"` |
//! | `time-millis`, `time-micros` | `time` | `"12:30:00.5"` |
//! | `timestamp-millis/micros/nanos` | `timestamptz` | `"2024-05-01T12:30:00.5+00:00"` (nanoseconds cut to microseconds) |
//! | `local-timestamp-*` | `timestamp` | `"2024-05-01T12:30:00.5"` |
//! | `record`, `array`, `map`, other unions, `duration` | `jsonb` | the value as JSON, nested values mapped as above, a union as its branch's value (no wrapper) |
//!
//! A field that is null (or a `null` union branch) is left out of the
//! document, as `jsonb_strip_nulls` leaves out SQL NULLs. A field whose
//! type is a named type from one of the schema's references (Confluent
//! `references`) maps as that type does written in place: a referenced
//! record is a `jsonb` object, a referenced enum `text`.

use std::collections::HashMap;
use std::fmt::Write as _;

use apache_avro::schema::{Name, Schema};
use apache_avro::types::Value;
use bytes::Bytes;
use evolve_compat::avro::AvroSchema;
use evolve_core::change::Datum;
use evolve_core::document::TypeKind;

use crate::source::civil_from_days;
use crate::store::ReferencedSchema;

/// One field of the reader schema as a column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvroColumn {
    pub name: String,
    /// The PostgreSQL type it maps to: OID, type modifier, name.
    pub type_oid: u32,
    pub typmod: i32,
    pub type_name: String,
    /// The field cannot be null (no `null` branch).
    pub not_null: bool,
}

impl AvroColumn {
    /// How its text becomes JSON.
    pub fn kind(&self) -> TypeKind {
        TypeKind::from_builtin_oid(self.type_oid)
    }
}

const JSONB: (u32, &str) = (3802, "jsonb");

/// Columns as `(name, type, not null)`, as tests compare them.
#[cfg(test)]
pub fn described(columns: &[AvroColumn]) -> Vec<(&str, &str, bool)> {
    columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_name.as_str(), c.not_null))
        .collect()
}

/// Parses a schema with the schemas its references name (dependencies
/// first, as `crate::sink::registry::resolve_references` gives them), by
/// evolve's compatibility engine, so that the decoder and the
/// compatibility check read the same types. When it does not parse and a
/// reference defines a type other than the name it is listed under, the
/// reason says so (the likely cause); when it uses a type that no
/// reference defines, the reason names the type.
pub fn parse(text: &str, references: &[ReferencedSchema]) -> Result<AvroSchema, String> {
    evolve_compat::avro::parse(text, &super::compat_references(references)).map_err(|e| {
        let mismatch = references.iter().find_map(|r| {
            let defined = defined_name(&r.schema)?;
            (defined != r.name).then(|| {
                format!(
                    "its reference \"{}\" (subject \"{}\" version {}) defines the type \"{defined}\", not \"{}\"; point the reference at the version that defines \"{}\" ({e})",
                    r.name, r.subject, r.version, r.name, r.name
                )
            })
        });
        // apache-avro reports a type name it finds no definition of as
        // "Unknown primitive type: NAME".
        let unknown = e
            .message
            .strip_prefix("Unknown primitive type: ")
            .filter(|_| !references.is_empty());
        mismatch.unwrap_or_else(|| match unknown {
            Some(name) => format!(
                "it uses the type \"{name}\", which neither it nor its references define; register it with a reference to the subject version that defines \"{name}\""
            ),
            None => e.to_string(),
        })
    })
}

/// [`parse`] of the form of a schema (and of its references) that
/// records are decoded with: each `decimal` whose type is `bytes` made
/// plain `bytes`, and read as a decimal with the reader schema's scale
/// when the record's values are mapped. apache-avro (0.22) refuses, when
/// it resolves a record against a reader schema, a bytes decimal whose
/// value is shorter than the precision could need: `12.34` as
/// `decimal(10,2)` is the two bytes `0x04d2`, which is how Java's and
/// apache-avro's own writers encode it, and "Precision 10 too small to
/// hold decimal values with 2 bytes" would make every such record
/// undecodable. The bytes are the same either way; only that check goes.
pub fn parse_for_decoding(
    text: &str,
    references: &[ReferencedSchema],
) -> Result<AvroSchema, String> {
    let references: Vec<ReferencedSchema> = references
        .iter()
        .map(|r| ReferencedSchema {
            schema: bytes_decimals_as_bytes(&r.schema),
            ..r.clone()
        })
        .collect();
    parse(&bytes_decimals_as_bytes(text), &references)
}

/// `text` with every `{"type": "bytes", "logicalType": "decimal", ...}`
/// made `{"type": "bytes", ...}`; `text` itself when it is not JSON (the
/// parse then says why).
fn bytes_decimals_as_bytes(text: &str) -> String {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                if o.get("type").and_then(|t| t.as_str()) == Some("bytes")
                    && o.get("logicalType").and_then(|t| t.as_str()) == Some("decimal")
                {
                    o.remove("logicalType");
                }
                o.values_mut().for_each(walk);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(mut v) => {
            walk(&mut v);
            v.to_string()
        }
        Err(_) => text.to_string(),
    }
}

/// The full name of the named type a schema's text defines at its top.
fn defined_name(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let name = value.get("name")?.as_str()?;
    let namespace = value.get("namespace").and_then(|n| n.as_str());
    Some(
        Name::new_with_enclosing_namespace(name, namespace)
            .ok()?
            .fullname(None),
    )
}

/// The named types of a parsed schema and of its references, for the
/// `Ref`s inside them.
pub fn schema_names(schema: &AvroSchema) -> HashMap<Name, Schema> {
    named_types_of(std::iter::once(schema.root()).chain(schema.references()))
}

/// The named types that a parsed schema's references define.
pub fn referenced_names(schema: &AvroSchema) -> HashMap<Name, Schema> {
    named_types_of(schema.references())
}

/// The schemas a datum reader resolves names with: the references, each
/// after the ones it uses, then the schema itself.
pub fn schemata(schema: &AvroSchema) -> Vec<&Schema> {
    schema
        .references()
        .iter()
        .chain(std::iter::once(schema.root()))
        .collect()
}

/// The columns of a reader schema, one per field of its top-level record.
/// A field whose type is a named type from a reference (`referenced`,
/// [`referenced_names`]) maps as that type does written in place.
pub fn reader_columns(
    schema: &Schema,
    referenced: &HashMap<Name, Schema>,
) -> Result<Vec<AvroColumn>, String> {
    let Schema::Record(record) = schema else {
        return Err(
            "the schema is not a record; a Kafka table's values must be Avro records".into(),
        );
    };
    let mut out = Vec::with_capacity(record.fields.len());
    for field in &record.fields {
        let (inner, nullable) = unwrap_nullable(&field.schema);
        let inner = resolve(inner, referenced);
        let (type_oid, typmod, type_name) = match inner {
            Schema::Boolean => (16, -1, "boolean".to_string()),
            Schema::Int => (23, -1, "integer".into()),
            Schema::Long => (20, -1, "bigint".into()),
            Schema::Float => (700, -1, "real".into()),
            Schema::Double => (701, -1, "double precision".into()),
            Schema::String | Schema::Enum(_) | Schema::Null => (25, -1, "text".into()),
            Schema::Bytes | Schema::Fixed(_) => (17, -1, "bytea".into()),
            Schema::Decimal(d) => {
                let (p, s) = (d.precision, d.scale);
                (
                    1700,
                    ((p as i32) << 16 | s as i32) + 4,
                    format!("numeric({p},{s})"),
                )
            }
            Schema::BigDecimal => (1700, -1, "numeric".into()),
            Schema::Uuid(_) => (2950, -1, "uuid".into()),
            Schema::Date => (1082, -1, "date".into()),
            Schema::TimeMillis | Schema::TimeMicros => (1083, -1, "time without time zone".into()),
            Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => {
                (1184, -1, "timestamp with time zone".into())
            }
            Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => (1114, -1, "timestamp without time zone".into()),
            Schema::Record(_)
            | Schema::Array(_)
            | Schema::Map(_)
            | Schema::Union(_)
            | Schema::Duration(_)
            | Schema::Ref { .. } => (JSONB.0, -1, JSONB.1.into()),
        };
        out.push(AvroColumn {
            name: field.name.clone(),
            type_oid,
            typmod,
            type_name,
            not_null: !nullable,
        });
    }
    Ok(out)
}

/// The full name of a record schema (`shop.Order`): the record type
/// Confluent's RecordNameStrategy names a subject by.
pub fn record_name(schema: &Schema) -> Option<String> {
    match schema {
        Schema::Record(r) => Some(r.name.fullname(None)),
        _ => None,
    }
}

/// Whether `schema` is a record whose full name ([`record_name`]) is
/// `wanted`, compared without building the name.
pub fn is_record(schema: &Schema, wanted: &str) -> bool {
    let Schema::Record(r) = schema else {
        return false;
    };
    match (
        r.name.namespace().filter(|n| !n.is_empty()),
        wanted.rsplit_once('.'),
    ) {
        (Some(namespace), Some((ns, name))) => namespace == ns && r.name.name() == name,
        (None, None) => r.name.name() == wanted,
        _ => false,
    }
}

/// The row record of a Debezium change event's schema: the record of its
/// `after` field (`["null", Value]`, `Value` defined there or named
/// after `before` defined it), found through `names` ([`schema_names`]).
pub fn debezium_row<'a>(
    envelope: &'a Schema,
    names: &'a HashMap<Name, Schema>,
) -> Result<&'a Schema, String> {
    let Schema::Record(record) = envelope else {
        return Err(
            "the schema is not a record; a Debezium change event is a record of before, after and op"
                .into(),
        );
    };
    let field = |name: &str| record.fields.iter().find(|f| f.name == name);
    let (Some(after), Some(_)) = (field("after"), field("op")) else {
        return Err(format!(
            "record {} has no fields \"after\" and \"op\"; ENVELOPE DEBEZIUM reads Debezium's change events",
            record.name
        ));
    };
    let (inner, _) = unwrap_nullable(&after.schema);
    match resolve(inner, names) {
        row @ Schema::Record(_) => Ok(row),
        _ => Err(format!(
            "the field \"after\" of record {} is not a record (or null); ENVELOPE DEBEZIUM reads Debezium's change events",
            record.name
        )),
    }
}

/// A decoded Debezium change event's `op` and its `after` (`None` when
/// null).
pub fn debezium_event(value: &Value) -> Result<(&str, Option<&Value>), String> {
    let Value::Record(fields) = value else {
        return Err("the change event is not an Avro record".into());
    };
    let get = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| strip_union(v))
    };
    let op = match get("op") {
        Some(Value::String(op) | Value::Enum(_, op)) => op.as_str(),
        _ => return Err("the change event has no op".into()),
    };
    let after = get("after").filter(|v| !matches!(v, Value::Null));
    Ok((op, after))
}

/// The definition of a `Ref` found in `names`; any other schema as it is.
fn resolve<'a>(schema: &'a Schema, names: &'a HashMap<Name, Schema>) -> &'a Schema {
    match schema {
        Schema::Ref { name } => names.get(name).unwrap_or(schema),
        other => other,
    }
}

/// `T` of `["null", T]` (either order) and whether null is allowed.
fn unwrap_nullable(schema: &Schema) -> (&Schema, bool) {
    match schema {
        Schema::Union(u) => {
            let variants = u.variants();
            let non_null: Vec<&Schema> = variants
                .iter()
                .filter(|v| !matches!(v, Schema::Null))
                .collect();
            let nullable = non_null.len() < variants.len();
            match non_null.as_slice() {
                [one] => (one, nullable),
                [] => (&Schema::Null, true),
                _ => (schema, nullable),
            }
        }
        Schema::Null => (schema, true),
        other => (other, false),
    }
}

/// The named types of a schema, for the `Ref`s inside it.
pub fn named_types(schema: &Schema) -> HashMap<Name, Schema> {
    named_types_of(std::iter::once(schema))
}

/// The named types of several schemas together.
fn named_types_of<'a>(schemas: impl IntoIterator<Item = &'a Schema>) -> HashMap<Name, Schema> {
    use apache_avro::schema::{DecimalSchema, InnerDecimalSchema, UuidSchema};

    fn walk(s: &Schema, out: &mut HashMap<Name, Schema>, depth: usize) {
        if depth > 400 {
            return;
        }
        match s {
            Schema::Record(r) => {
                out.insert(r.name.clone(), s.clone());
                for f in &r.fields {
                    walk(&f.schema, out, depth + 1);
                }
            }
            Schema::Enum(e) => {
                out.insert(e.name.clone(), s.clone());
            }
            Schema::Fixed(f)
            | Schema::Duration(f)
            | Schema::Uuid(UuidSchema::Fixed(f))
            | Schema::Decimal(DecimalSchema {
                inner: InnerDecimalSchema::Fixed(f),
                ..
            }) => {
                out.insert(f.name.clone(), s.clone());
            }
            Schema::Array(a) => walk(&a.items, out, depth + 1),
            Schema::Map(m) => walk(&m.types, out, depth + 1),
            Schema::Union(u) => {
                for v in u.variants() {
                    walk(v, out, depth + 1);
                }
            }
            _ => {}
        }
    }
    let mut out = HashMap::new();
    for schema in schemas {
        walk(schema, &mut out, 0);
    }
    out
}

/// The values of a record read with the reader schema, one per column of
/// [`reader_columns`], in the columns' text form.
pub fn record_values(
    value: &Value,
    schema: &Schema,
    columns: &[AvroColumn],
    names: &HashMap<Name, Schema>,
) -> Result<Vec<Datum>, String> {
    let (Value::Record(fields), Schema::Record(record)) = (value, schema) else {
        return Err("the record is not an Avro record".into());
    };
    if fields.len() != columns.len() || record.fields.len() != columns.len() {
        return Err(format!(
            "the record has {} fields where the reader schema has {}",
            fields.len(),
            columns.len()
        ));
    }
    let mut out = Vec::with_capacity(columns.len());
    for ((column, (_, v)), field) in columns.iter().zip(fields).zip(&record.fields) {
        let v = strip_union(v);
        if matches!(v, Value::Null) {
            out.push(Datum::Null);
            continue;
        }
        let mut text = String::new();
        if column.type_oid == JSONB.0 {
            json(v, &field.schema, names, &mut text, 0)?;
        } else {
            let (inner, _) = unwrap_nullable(&field.schema);
            scalar(v, resolve(inner, names), &mut text)?;
        }
        out.push(Datum::Text(Bytes::from(text)));
    }
    Ok(out)
}

/// A key as JSON text: a record key read with its writer schema (`names`:
/// [`schema_names`] of it).
pub fn key_json(
    value: &Value,
    schema: &Schema,
    names: &HashMap<Name, Schema>,
) -> Result<String, String> {
    let mut out = String::new();
    json(strip_union(value), schema, names, &mut out, 0)?;
    Ok(out)
}

fn strip_union(v: &Value) -> &Value {
    let mut v = v;
    while let Value::Union(_, inner) = v {
        v = inner;
    }
    v
}

/// A scalar in its PostgreSQL type's text output.
fn scalar(v: &Value, schema: &Schema, out: &mut String) -> Result<(), String> {
    match v {
        Value::Boolean(b) => out.push(if *b { 't' } else { 'f' }),
        Value::Int(n) => write!(out, "{n}").unwrap_or(()),
        Value::Long(n) => write!(out, "{n}").unwrap_or(()),
        Value::Float(f) => float(f64::from(*f), Some(*f), out, false),
        Value::Double(f) => float(*f, None, out, false),
        Value::String(s) => out.push_str(s),
        Value::Enum(_, symbol) => out.push_str(symbol),
        Value::Bytes(b) | Value::Fixed(_, b) => match schema {
            // A decimal of `bytes`, read as plain bytes (see
            // [`parse_for_decoding`]).
            Schema::Decimal(d) => decimal(b, d.scale, out),
            _ => hex(b, out),
        },
        Value::Decimal(d) => {
            let scale = match schema {
                Schema::Decimal(d) => d.scale,
                _ => 0,
            };
            let bytes = Vec::<u8>::try_from(d).map_err(|e| e.to_string())?;
            decimal(&bytes, scale, out);
        }
        Value::BigDecimal(d) => out.push_str(&d.to_plain_string()),
        Value::Uuid(u) => write!(out, "{u}").unwrap_or(()),
        Value::Date(days) => date(i64::from(*days), out),
        Value::TimeMillis(ms) => time(i64::from(*ms) * 1_000, out),
        Value::TimeMicros(us) => time(*us, out),
        Value::TimestampMillis(ms) => timestamp(ms.saturating_mul(1_000), true, ' ', out),
        Value::TimestampMicros(us) => timestamp(*us, true, ' ', out),
        Value::TimestampNanos(ns) => timestamp(ns.div_euclid(1_000), true, ' ', out),
        Value::LocalTimestampMillis(ms) => timestamp(ms.saturating_mul(1_000), false, ' ', out),
        Value::LocalTimestampMicros(us) => timestamp(*us, false, ' ', out),
        Value::LocalTimestampNanos(ns) => timestamp(ns.div_euclid(1_000), false, ' ', out),
        other => {
            return Err(format!(
                "a {} value where the reader schema has a scalar",
                variant_name(other)
            ));
        }
    }
    Ok(())
}

fn variant_name(v: &Value) -> &'static str {
    match v {
        Value::Record(_) => "record",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Duration(_) => "duration",
        Value::Null => "null",
        _ => "other",
    }
}

/// A value as JSON text, walking its schema beside it (decimals need their
/// scale). Nested nulls are kept; the document encoder strips them as
/// `jsonb_strip_nulls` does.
fn json(
    v: &Value,
    schema: &Schema,
    names: &HashMap<Name, Schema>,
    out: &mut String,
    depth: usize,
) -> Result<(), String> {
    if depth > 400 {
        return Err("the value nests deeper than 400 levels".into());
    }
    let schema = resolve(schema, names);
    match v {
        Value::Null => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(n) => write!(out, "{n}").unwrap_or(()),
        Value::Long(n) => write!(out, "{n}").unwrap_or(()),
        Value::Float(f) => float(f64::from(*f), Some(*f), out, true),
        Value::Double(f) => float(*f, None, out, true),
        Value::Union(index, inner) => {
            let branch = match schema {
                Schema::Union(u) => u.variants().get(*index as usize).unwrap_or(schema),
                other => other,
            };
            json(inner, branch, names, out, depth + 1)?;
        }
        Value::Array(items) => {
            let item_schema = match schema {
                Schema::Array(a) => &*a.items,
                other => other,
            };
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json(item, item_schema, names, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Map(entries) => {
            let value_schema = match schema {
                Schema::Map(m) => &*m.types,
                other => other,
            };
            let mut sorted: Vec<(&String, &Value)> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(k, out);
                out.push(':');
                json(item, value_schema, names, out, depth + 1)?;
            }
            out.push('}');
        }
        Value::Record(fields) => {
            let record = match schema {
                Schema::Record(r) => Some(r),
                _ => None,
            };
            out.push('{');
            for (i, (k, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(k, out);
                out.push(':');
                let field_schema = record
                    .and_then(|r| r.fields.get(i))
                    .map_or(&Schema::Null, |f| &f.schema);
                json(item, field_schema, names, out, depth + 1)?;
            }
            out.push('}');
        }
        Value::Duration(d) => {
            write!(
                out,
                "{{\"months\":{},\"days\":{},\"millis\":{}}}",
                u32::from(d.months()),
                u32::from(d.days()),
                u32::from(d.millis())
            )
            .unwrap_or(());
        }
        Value::Decimal(_) | Value::BigDecimal(_) => {
            let mut text = String::new();
            scalar(v, schema, &mut text)?;
            out.push_str(&text);
        }
        Value::Bytes(_) if matches!(schema, Schema::Decimal(_)) => {
            let mut text = String::new();
            scalar(v, schema, &mut text)?;
            out.push_str(&text);
        }
        Value::TimestampMillis(_) | Value::TimestampMicros(_) | Value::TimestampNanos(_) => {
            let us = match v {
                Value::TimestampMillis(ms) => ms.saturating_mul(1_000),
                Value::TimestampMicros(us) => *us,
                Value::TimestampNanos(ns) => ns.div_euclid(1_000),
                _ => 0,
            };
            let mut text = String::new();
            timestamp(us, true, 'T', &mut text);
            // to_jsonb writes the offset as +00:00.
            text.push_str(":00");
            string(&text, out);
        }
        Value::LocalTimestampMillis(_)
        | Value::LocalTimestampMicros(_)
        | Value::LocalTimestampNanos(_) => {
            let us = match v {
                Value::LocalTimestampMillis(ms) => ms.saturating_mul(1_000),
                Value::LocalTimestampMicros(us) => *us,
                Value::LocalTimestampNanos(ns) => ns.div_euclid(1_000),
                _ => 0,
            };
            let mut text = String::new();
            timestamp(us, false, 'T', &mut text);
            string(&text, out);
        }
        other => {
            let mut text = String::new();
            scalar(other, schema, &mut text)?;
            string(&text, out);
        }
    }
    Ok(())
}

pub(super) fn string(s: &str, out: &mut String) {
    out.push_str(&serde_json::Value::String(s.to_string()).to_string());
}

/// PostgreSQL's float output (shortest round trip), `NaN` and
/// `±Infinity` spelled its way (as JSON strings when `in_json`).
pub(super) fn float(f: f64, single: Option<f32>, out: &mut String, in_json: bool) {
    let special = if f.is_nan() {
        Some("NaN")
    } else if f == f64::INFINITY {
        Some("Infinity")
    } else if f == f64::NEG_INFINITY {
        Some("-Infinity")
    } else {
        None
    };
    match special {
        Some(s) if in_json => string(s, out),
        Some(s) => out.push_str(s),
        None => match single {
            Some(s) => write!(out, "{s}").unwrap_or(()),
            None => write!(out, "{f}").unwrap_or(()),
        },
    }
}

/// bytea's hex output.
pub(super) fn hex(bytes: &[u8], out: &mut String) {
    out.push_str("\\x");
    for b in bytes {
        write!(out, "{b:02x}").unwrap_or(());
    }
}

/// A decimal's unscaled value (big-endian two's complement) with `scale`
/// digits after the point.
fn decimal(bytes: &[u8], scale: usize, out: &mut String) {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    // The magnitude, big-endian.
    let mut magnitude: Vec<u8> = if negative {
        let mut m: Vec<u8> = bytes.iter().map(|b| !b).collect();
        for b in m.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
        m
    } else {
        bytes.to_vec()
    };
    // Repeated division by 10 of the base-256 number.
    let mut digits = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in magnitude.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(b'0' + rem as u8);
    }
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    if negative && digits.iter().any(|&d| d != b'0') {
        out.push('-');
    }
    let point = digits.len() - scale;
    out.push_str(std::str::from_utf8(&digits[..point]).unwrap_or("0"));
    if scale > 0 {
        out.push('.');
        out.push_str(std::str::from_utf8(&digits[point..]).unwrap_or("0"));
    }
}

/// Days since 1970-01-01 as `YYYY-MM-DD` (proleptic Gregorian; `BC` for
/// years before 1, as PostgreSQL writes them).
fn date(days: i64, out: &mut String) {
    let (y, m, d) = civil_from_days(days);
    if y <= 0 {
        write!(out, "{:04}-{m:02}-{d:02} BC", 1 - y).unwrap_or(());
    } else {
        write!(out, "{y:04}-{m:02}-{d:02}").unwrap_or(());
    }
}

/// Microseconds since midnight as `HH:MM:SS[.ffffff]`, trailing zeros of
/// the fraction dropped as PostgreSQL drops them.
fn time(us: i64, out: &mut String) {
    let us = us.rem_euclid(86_400_000_000);
    let secs = us / 1_000_000;
    write!(
        out,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
    .unwrap_or(());
    let frac = us % 1_000_000;
    if frac != 0 {
        let text = format!("{frac:06}");
        out.push('.');
        out.push_str(text.trim_end_matches('0'));
    }
}

/// Microseconds since the epoch (UTC) as PostgreSQL's timestamp output
/// (`sep` between date and time), with `+00` for timestamptz in a UTC
/// session.
pub(super) fn timestamp(us: i64, tz: bool, sep: char, out: &mut String) {
    let days = us.div_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    let bc = y <= 0;
    write!(out, "{:04}-{m:02}-{d:02}{sep}", if bc { 1 - y } else { y }).unwrap_or(());
    time(us.rem_euclid(86_400_000_000), out);
    if tz {
        out.push_str("+00");
    }
    if bc {
        out.push_str(" BC");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_type_is_its_full_name() {
        for (text, full) in [
            (
                r#"{"type":"record","name":"Order","namespace":"shop.eu","fields":[]}"#,
                "shop.eu.Order",
            ),
            (
                r#"{"type":"record","name":"shop.Order","fields":[]}"#,
                "shop.Order",
            ),
            (r#"{"type":"record","name":"Order","fields":[]}"#, "Order"),
        ] {
            let schema = parse(text, &[]).unwrap();
            assert_eq!(record_name(schema.root()).as_deref(), Some(full));
            assert!(is_record(schema.root(), full), "{full}");
            for other in ["Order.x", "eu.Order", "shop.Payment", "Payment", ""] {
                assert!(!is_record(schema.root(), other), "{full} is not {other}");
            }
        }
        assert!(!is_record(&Schema::String, "string"));
    }

    #[test]
    fn a_debezium_event_schema_gives_its_after_record_and_others_are_refused() {
        let parsed = |text: &str| parse(text, &[]).unwrap();
        let event = parsed(
            r#"{"type":"record","name":"Envelope","fields":[
                {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
                    {"name":"id","type":"int"},{"name":"note","type":["null","string"]}]}]},
                {"name":"after","type":["null","Value"]},
                {"name":"op","type":"string"}]}"#,
        );
        let names = schema_names(&event);
        let row = debezium_row(event.root(), &names).unwrap();
        let columns = reader_columns(row, &HashMap::new()).unwrap();
        let named: Vec<(&str, &str, bool)> = described(&columns);
        assert_eq!(named, [("id", "integer", true), ("note", "text", false)]);
        for (text, problem) in [
            (r#""string""#, "the schema is not a record"),
            (
                r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"int"}]}"#,
                "record Order has no fields \"after\" and \"op\"",
            ),
            (
                r#"{"type":"record","name":"E","fields":[{"name":"after","type":["null","string"]},{"name":"op","type":"string"}]}"#,
                "the field \"after\" of record E is not a record",
            ),
        ] {
            let schema = parsed(text);
            let names = schema_names(&schema);
            let e = debezium_row(schema.root(), &names).unwrap_err();
            assert!(e.starts_with(problem), "{text}: {e}");
        }
        let value = Value::Record(vec![
            ("before".into(), Value::Union(0, Box::new(Value::Null))),
            (
                "after".into(),
                Value::Union(
                    1,
                    Box::new(Value::Record(vec![("id".into(), Value::Int(1))])),
                ),
            ),
            ("op".into(), Value::String("u".into())),
        ]);
        let (op, after) = debezium_event(&value).unwrap();
        assert_eq!(op, "u");
        assert!(matches!(after, Some(Value::Record(_))));
        let deleted = Value::Record(vec![
            ("after".into(), Value::Union(0, Box::new(Value::Null))),
            ("op".into(), Value::String("d".into())),
        ]);
        assert_eq!(debezium_event(&deleted).unwrap(), ("d", None));
        assert!(debezium_event(&Value::Record(vec![])).is_err());
    }

    fn text(d: &Datum) -> &str {
        match d {
            Datum::Text(b) => std::str::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decimals_dates_and_times_in_postgres_text_form() {
        let mut s = String::new();
        decimal(&[0x04, 0xd2], 2, &mut s); // 1234
        assert_eq!(s, "12.34");
        s.clear();
        decimal(&[0xfb, 0x2e], 2, &mut s); // -1234
        assert_eq!(s, "-12.34");
        s.clear();
        decimal(&[0x05], 3, &mut s);
        assert_eq!(s, "0.005");
        s.clear();
        decimal(&[], 0, &mut s);
        assert_eq!(s, "0");
        s.clear();
        date(0, &mut s);
        assert_eq!(s, "1970-01-01");
        s.clear();
        date(19_844, &mut s);
        assert_eq!(s, "2024-05-01");
        s.clear();
        date(-719_163, &mut s);
        assert_eq!(s, "0001-12-31 BC");
        s.clear();
        time(45_000_500_000, &mut s);
        assert_eq!(s, "12:30:00.5");
        s.clear();
        timestamp(1_714_566_600_000_123, true, ' ', &mut s);
        assert_eq!(s, "2024-05-01 12:30:00.000123+00");
        s.clear();
        timestamp(-1, false, ' ', &mut s);
        assert_eq!(s, "1969-12-31 23:59:59.999999");
    }

    #[test]
    fn fields_map_to_columns_and_values() {
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"Order","fields":[
                {"name":"id","type":"int"},
                {"name":"customer","type":["null","string"],"default":null},
                {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
                {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"tags","type":{"type":"array","items":"string"}},
                {"name":"ratio","type":"double"},
                {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}}
            ]}"#,
        )
        .unwrap();
        let columns = reader_columns(&schema, &HashMap::new()).unwrap();
        let types: Vec<(&str, &str, bool)> = described(&columns);
        assert_eq!(
            types,
            [
                ("id", "integer", true),
                ("customer", "text", false),
                ("total", "numeric(10,2)", true),
                ("at", "timestamp with time zone", true),
                ("tags", "jsonb", true),
                ("ratio", "double precision", true),
                ("kind", "text", true),
            ]
        );
        let value = Value::Record(vec![
            ("id".into(), Value::Int(7)),
            ("customer".into(), Value::Union(0, Box::new(Value::Null))),
            (
                "total".into(),
                Value::Decimal(apache_avro::Decimal::from(vec![0x01, 0x00])),
            ),
            ("at".into(), Value::TimestampMillis(1_714_566_600_000)),
            (
                "tags".into(),
                Value::Array(vec![Value::String("a\"b".into())]),
            ),
            ("ratio".into(), Value::Double(f64::NAN)),
            ("kind".into(), Value::Enum(1, "B".into())),
        ]);
        let names = named_types(&schema);
        let values = record_values(&value, &schema, &columns, &names).unwrap();
        assert_eq!(text(&values[0]), "7");
        assert_eq!(values[1], Datum::Null);
        assert_eq!(text(&values[2]), "2.56");
        assert_eq!(text(&values[3]), "2024-05-01 12:30:00+00");
        assert_eq!(text(&values[4]), r#"["a\"b"]"#);
        assert_eq!(text(&values[5]), "NaN");
        assert_eq!(text(&values[6]), "B");
        let not_a_record = Schema::parse_str(r#""string""#).unwrap();
        assert!(reader_columns(&not_a_record, &HashMap::new()).is_err());
    }
}
