//! Protobuf records (`FORMAT PROTOBUF`, Confluent's Protobuf serializer:
//! the wire header, the message indexes that name the record's message in
//! the schema's file, then the message's binary encoding) as the
//! pipeline's rows: the columns of a Kafka table (one per field of the
//! pinned reader schema's first message, in declaration order) and each
//! record's values in the text form of the PostgreSQL type its field maps
//! to, so that a document is what `to_jsonb` gives for a row of those
//! types. Pure, no I/O.
//!
//! | Protobuf field | column type | document value |
//! |---|---|---|
//! | `bool` | `boolean` | `true` / `false` |
//! | `int32`, `sint32`, `sfixed32` | `integer` | a number |
//! | `int64`, `sint64`, `sfixed64`, `uint32`, `fixed32` | `bigint` | a number |
//! | `uint64`, `fixed64` | `numeric` | a number |
//! | `float`, `double` | `real`, `double precision` | a number; `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | `string` | `text` | a string |
//! | `bytes` | `bytea` | `"\\x0102"` |
//! | an enum | `text` | the value's name (a number the enum does not name: its digits) |
//! | `google.protobuf.Timestamp` | `timestamptz` | `"2024-05-01T12:30:00.5+00:00"` (nanoseconds cut to microseconds) |
//! | `google.protobuf.Int32Value` and the other wrappers | the wrapped type's | as the wrapped type |
//! | another message, `repeated`, `map` | `jsonb` | the value as JSON: a message an object of its fields by name, nested values mapped as above, a map an object keyed by the key's text |
//!
//! Which fields can be null follows Protobuf's field presence. A field
//! without presence (a proto3 scalar, enum or string not marked
//! `optional`) always has a value: absent from the encoding it is its
//! default (`0`, `""`, `false`, the enum's first value), as every
//! Protobuf reader sees it, and its column is `NOT NULL`. A field with
//! presence (a message, a proto3 `optional` or proto2 `optional` field, a
//! `oneof` member) that is absent is NULL, left out of the document as
//! `jsonb_strip_nulls` leaves out SQL NULLs. A `repeated` or `map` field
//! is never null: absent, it is `[]` or `{}`. A proto2 `required` field
//! is `NOT NULL`. Inside a `jsonb` value the same holds for each nested
//! message's fields. Fields of the encoding that the reader's message
//! does not declare (a newer writer's) are skipped, as Protobuf readers
//! skip them.
//!
//! The reader's message is the one `FORMAT PROTOBUF MESSAGE 'shop.Order'`
//! names, else the first message of the pinned schema's file (message
//! index `[0]`, what Confluent's serializer writes for a file's first
//! message); a record whose message indexes name another message of its
//! writer schema cannot be read by the table.

use std::fmt::Write as _;

use bytes::Bytes;
use evolve_core::change::Datum;
use prost_reflect::{
    Cardinality, DynamicMessage, FieldDescriptor, FileDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage as _, Value,
};

use super::avro::{AvroColumn, float, hex, string, timestamp};

const BOOLEAN: (u32, &str) = (16, "boolean");
const INTEGER: (u32, &str) = (23, "integer");
const BIGINT: (u32, &str) = (20, "bigint");
const NUMERIC: (u32, &str) = (1700, "numeric");
const REAL: (u32, &str) = (700, "real");
const DOUBLE: (u32, &str) = (701, "double precision");
const TEXT: (u32, &str) = (25, "text");
const BYTEA: (u32, &str) = (17, "bytea");
const TIMESTAMPTZ: (u32, &str) = (1184, "timestamp with time zone");
const JSONB: (u32, &str) = (3802, "jsonb");

/// The most message indexes a record may give: deeper nesting than any
/// schema evolve compiles has, and a bound on what a damaged record makes
/// the decoder allocate.
const MAX_INDEXES: u64 = 64;

/// The message a table reads: `name` (a full name, with or without the
/// leading dot) among the messages the file defines, nested ones
/// included; without a name, the file's first.
pub fn reader_message(
    file: &FileDescriptor,
    name: Option<&str>,
) -> Result<MessageDescriptor, String> {
    let Some(name) = name else {
        return file.messages().next().ok_or_else(|| {
            "the schema defines no message; a Kafka table's values must be Protobuf messages".into()
        });
    };
    let name = name.strip_prefix('.').unwrap_or(name);
    let mut all: Vec<MessageDescriptor> = file.messages().collect();
    let mut i = 0;
    while i < all.len() {
        let nested: Vec<MessageDescriptor> = all[i]
            .child_messages()
            .filter(|m| !m.is_map_entry())
            .collect();
        all.extend(nested);
        i += 1;
    }
    if let Some(found) = all.iter().find(|m| m.full_name() == name) {
        return Ok(found.clone());
    }
    let names: Vec<&str> = all.iter().map(|m| m.full_name()).collect();
    Err(format!(
        "it defines no message {name:?} (MESSAGE names one by its full name: {})",
        if names.is_empty() {
            "it defines none".to_string()
        } else {
            names.join(", ")
        }
    ))
}

/// The columns of `message`: one per field, in declaration order.
pub fn reader_columns(message: &MessageDescriptor) -> Vec<AvroColumn> {
    message
        .fields()
        .map(|field| {
            let ((type_oid, type_name), nullable) = column_type(&field);
            AvroColumn {
                name: field.name().to_string(),
                type_oid,
                typmod: -1,
                type_name: type_name.to_string(),
                not_null: !nullable,
            }
        })
        .collect()
}

/// A field's column type, and whether it can be null.
fn column_type(field: &FieldDescriptor) -> ((u32, &'static str), bool) {
    if field.is_list() || field.is_map() {
        return (JSONB, false);
    }
    let presence = field.supports_presence() && field.cardinality() != Cardinality::Required;
    match field.kind() {
        Kind::Message(m) => (message_type(&m).unwrap_or(JSONB), presence),
        kind => (scalar_type(&kind), presence),
    }
}

/// The column type of a message that maps to a scalar: a timestamp or a
/// wrapper.
fn message_type(message: &MessageDescriptor) -> Option<(u32, &'static str)> {
    if message.full_name() == "google.protobuf.Timestamp" {
        return Some(TIMESTAMPTZ);
    }
    wrapped(message).map(|field| scalar_type(&field.kind()))
}

/// The `value` field of a wrapper of `google/protobuf/wrappers.proto`.
fn wrapped(message: &MessageDescriptor) -> Option<FieldDescriptor> {
    const WRAPPERS: [&str; 9] = [
        "google.protobuf.DoubleValue",
        "google.protobuf.FloatValue",
        "google.protobuf.Int64Value",
        "google.protobuf.UInt64Value",
        "google.protobuf.Int32Value",
        "google.protobuf.UInt32Value",
        "google.protobuf.BoolValue",
        "google.protobuf.StringValue",
        "google.protobuf.BytesValue",
    ];
    if !WRAPPERS.contains(&message.full_name()) {
        return None;
    }
    message.get_field(1)
}

fn scalar_type(kind: &Kind) -> (u32, &'static str) {
    match kind {
        Kind::Bool => BOOLEAN,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => INTEGER,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint32 | Kind::Fixed32 => BIGINT,
        Kind::Uint64 | Kind::Fixed64 => NUMERIC,
        Kind::Float => REAL,
        Kind::Double => DOUBLE,
        Kind::String | Kind::Enum(_) => TEXT,
        Kind::Bytes => BYTEA,
        Kind::Message(_) => JSONB,
    }
}

/// The full names of `message` and of every message its fields use, at
/// any depth (map values included): the types a reader of `message`
/// decodes.
pub fn reachable(message: &MessageDescriptor) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![message.clone()];
    while let Some(m) = todo.pop() {
        if !seen.insert(m.full_name().to_string()) {
            continue;
        }
        for field in m.fields() {
            if let Kind::Message(used) = field.kind() {
                todo.push(used);
            }
        }
    }
    seen
}

/// Confluent's message indexes at the start of `datum` (what follows the
/// schema id), and the message's encoding after them: a count, then that
/// many indexes, each a zigzag varint; a count of zero (one zero byte) is
/// `[0]`, the file's first message.
pub fn message_indexes(datum: &[u8]) -> Result<(Vec<usize>, &[u8]), String> {
    let bad = |what: &str| {
        format!("its message indexes (after the schema id) are not Confluent's: {what}")
    };
    let mut rest = datum;
    let count = zigzag(&mut rest).ok_or_else(|| bad("no count"))?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    let count = u64::try_from(count)
        .ok()
        .filter(|c| *c <= MAX_INDEXES)
        .ok_or_else(|| bad(&format!("a count of {count}")))?;
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let index = zigzag(&mut rest).ok_or_else(|| bad("fewer indexes than its count"))?;
        let index = usize::try_from(index).map_err(|_| bad(&format!("an index of {index}")))?;
        indexes.push(index);
    }
    Ok((indexes, rest))
}

/// A zigzag-encoded varint from the front of `bytes`, which it advances.
fn zigzag(bytes: &mut &[u8]) -> Option<i64> {
    let mut n: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some((n >> 1) as i64 ^ -((n & 1) as i64));
        }
    }
    None
}

/// The message `indexes` name in `file`: the top-level message at the
/// first index, then nested messages at the others. Confluent's clients
/// count nested messages two ways: the Java serializer counts those of
/// the `.proto` text, where the entries a `map` field implies do not
/// appear, and the Python serializer counts a descriptor's nested types,
/// those entries included. The first is read; when `wanted` is given and
/// the first is not it, the second is read too, and taken if it is.
pub fn message_at(
    file: &FileDescriptor,
    indexes: &[usize],
    wanted: Option<&str>,
) -> Option<MessageDescriptor> {
    let walk = |map_entries: bool| {
        let (first, nested) = indexes.split_first()?;
        let mut message = file.messages().nth(*first)?;
        for index in nested {
            let child = message
                .child_messages()
                .filter(|m| map_entries || !m.is_map_entry())
                .nth(*index)?;
            message = child;
        }
        Some(message)
    };
    let java = walk(false);
    match wanted {
        Some(name) if java.as_ref().is_none_or(|m| m.full_name() != name) => {
            walk(true).filter(|m| m.full_name() == name).or(java)
        }
        _ => java,
    }
}

/// The values of a record's message encoding (after the message
/// indexes), one per column of [`reader_columns`] of `message`, in the
/// columns' text form.
pub fn record_values(
    encoded: &[u8],
    message: &MessageDescriptor,
    columns: &[AvroColumn],
) -> Result<Vec<Datum>, String> {
    message_values(&decode(encoded, message)?, columns)
}

/// The values of a decoded message, one per column of [`reader_columns`]
/// of its descriptor, in the columns' text form.
pub fn message_values(
    decoded: &DynamicMessage,
    columns: &[AvroColumn],
) -> Result<Vec<Datum>, String> {
    let message = decoded.descriptor();
    if message.fields().len() != columns.len() {
        return Err(format!(
            "the message {} has {} fields where the table has {} columns",
            message.full_name(),
            message.fields().len(),
            columns.len()
        ));
    }
    let mut out = Vec::with_capacity(columns.len());
    for (field, column) in message.fields().zip(columns) {
        if !column.not_null && !field.is_list() && !field.is_map() && !decoded.has_field(&field) {
            out.push(Datum::Null);
            continue;
        }
        let value = decoded.get_field(&field);
        let mut text = String::new();
        if column.type_oid == JSONB.0 {
            json(&value, &field.kind(), &mut text, 0)?;
        } else {
            scalar(&value, &field.kind(), &mut text)?;
        }
        out.push(Datum::Text(Bytes::from(text)));
    }
    Ok(out)
}

/// The row message of a Debezium change event message (`envelope`, as
/// Confluent's Protobuf converter writes Debezium's envelope): the type of
/// its `after` field, a message, beside a string field `op`.
pub fn debezium_row(envelope: &MessageDescriptor) -> Result<MessageDescriptor, String> {
    let after = envelope.get_field_by_name("after");
    let op = envelope.get_field_by_name("op");
    let (Some(after), Some(op)) = (after, op) else {
        return Err(format!(
            "message {} has no fields \"after\" and \"op\"; ENVELOPE DEBEZIUM reads Debezium's change events",
            envelope.full_name()
        ));
    };
    match (after.kind(), op.kind()) {
        (Kind::Message(row), Kind::String) if !after.is_list() && !after.is_map() => Ok(row),
        _ => Err(format!(
            "message {}'s \"after\" is not a message or its \"op\" not a string; ENVELOPE DEBEZIUM reads Debezium's change events",
            envelope.full_name()
        )),
    }
}

/// A Debezium change event's encoding (after the message indexes), read
/// as `envelope`: its `op`, and its `after` (`None` when absent).
pub fn debezium_event(
    encoded: &[u8],
    envelope: &MessageDescriptor,
) -> Result<(String, Option<DynamicMessage>), String> {
    let decoded = decode(encoded, envelope)?;
    let op = decoded
        .get_field_by_name("op")
        .and_then(|v| v.as_str().map(str::to_string))
        .filter(|op| !op.is_empty())
        .ok_or("the change event has no op")?;
    let after = envelope
        .get_field_by_name("after")
        .filter(|f| decoded.has_field(f))
        .and_then(|f| decoded.get_field(&f).as_message().cloned());
    Ok((op, after))
}

/// A key's message encoding (after the message indexes) as JSON text: an
/// object of its fields, mapped as a `jsonb` value's are.
pub fn key_json(encoded: &[u8], message: &MessageDescriptor) -> Result<String, String> {
    let decoded = decode(encoded, message).map_err(|e| format!("its key: {e}"))?;
    let mut out = String::new();
    message_json(&decoded, &mut out, 0)?;
    Ok(out)
}

fn decode(encoded: &[u8], message: &MessageDescriptor) -> Result<DynamicMessage, String> {
    DynamicMessage::decode(message.clone(), encoded)
        .map_err(|e| format!("not a {} message: {e}", message.full_name()))
}

/// A scalar column's value in its PostgreSQL type's text output.
fn scalar(value: &Value, kind: &Kind, out: &mut String) -> Result<(), String> {
    match value {
        Value::Bool(b) => out.push(if *b { 't' } else { 'f' }),
        Value::I32(n) => write!(out, "{n}").unwrap_or(()),
        Value::I64(n) => write!(out, "{n}").unwrap_or(()),
        Value::U32(n) => write!(out, "{n}").unwrap_or(()),
        Value::U64(n) => write!(out, "{n}").unwrap_or(()),
        Value::F32(f) => float(f64::from(*f), Some(*f), out, false),
        Value::F64(f) => float(*f, None, out, false),
        Value::String(s) => out.push_str(s),
        Value::Bytes(b) => hex(b, out),
        Value::EnumNumber(n) => enum_name(*n, kind, out),
        Value::Message(m) => {
            let descriptor = m.descriptor();
            if descriptor.full_name() == "google.protobuf.Timestamp" {
                timestamp(timestamp_micros(m), true, ' ', out);
            } else if let Some(field) = wrapped(&descriptor) {
                scalar(&m.get_field(&field), &field.kind(), out)?;
            } else {
                return Err(format!(
                    "a {} message where the reader schema has a scalar",
                    descriptor.full_name()
                ));
            }
        }
        Value::List(_) | Value::Map(_) => {
            return Err("a repeated value where the reader schema has a scalar".into());
        }
    }
    Ok(())
}

/// An enum value's name, or its number when the enum does not name it.
fn enum_name(number: i32, kind: &Kind, out: &mut String) {
    match kind.as_enum().and_then(|e| e.get_value(number)) {
        Some(v) => out.push_str(v.name()),
        None => write!(out, "{number}").unwrap_or(()),
    }
}

/// A `google.protobuf.Timestamp` as microseconds since the epoch.
fn timestamp_micros(m: &DynamicMessage) -> i64 {
    let seconds = m
        .get_field_by_number(1)
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let nanos = m
        .get_field_by_number(2)
        .and_then(|v| v.as_i32())
        .unwrap_or(0);
    seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(nanos).div_euclid(1_000))
}

/// A value as JSON text. Nested nulls are kept; the document encoder
/// strips them as `jsonb_strip_nulls` does.
fn json(value: &Value, kind: &Kind, out: &mut String, depth: usize) -> Result<(), String> {
    if depth > 400 {
        return Err("the value nests deeper than 400 levels".into());
    }
    match value {
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::I32(n) => write!(out, "{n}").unwrap_or(()),
        Value::I64(n) => write!(out, "{n}").unwrap_or(()),
        Value::U32(n) => write!(out, "{n}").unwrap_or(()),
        Value::U64(n) => write!(out, "{n}").unwrap_or(()),
        Value::F32(f) => float(f64::from(*f), Some(*f), out, true),
        Value::F64(f) => float(*f, None, out, true),
        Value::String(s) => string(s, out),
        Value::Bytes(_) | Value::EnumNumber(_) => {
            let mut text = String::new();
            scalar(value, kind, &mut text)?;
            string(&text, out);
        }
        Value::Message(m) => message_json(m, out, depth + 1)?,
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json(item, kind, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let mut sorted: Vec<(String, &Value)> =
                entries.iter().map(|(k, v)| (map_key(k), v)).collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (k, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(&k, out);
                out.push(':');
                json(item, &value_kind, out, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// A message as JSON: a timestamp as `to_jsonb` writes a timestamptz, a
/// wrapper as its value, any other an object of its fields by name (a
/// field with presence that is absent left out).
fn message_json(m: &DynamicMessage, out: &mut String, depth: usize) -> Result<(), String> {
    let descriptor = m.descriptor();
    if descriptor.full_name() == "google.protobuf.Timestamp" {
        let mut text = String::new();
        timestamp(timestamp_micros(m), true, 'T', &mut text);
        // to_jsonb writes the offset as +00:00.
        text.push_str(":00");
        string(&text, out);
        return Ok(());
    }
    if let Some(field) = wrapped(&descriptor) {
        return json(&m.get_field(&field), &field.kind(), out, depth + 1);
    }
    out.push('{');
    let mut first = true;
    for field in descriptor.fields() {
        let repeated = field.is_list() || field.is_map();
        if !repeated && field.supports_presence() && !m.has_field(&field) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        string(field.name(), out);
        out.push(':');
        json(&m.get_field(&field), &field.kind(), out, depth + 1)?;
    }
    out.push('}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kafka::avro::described;
    use prost_reflect::prost::Message as _;

    fn schema(text: &str) -> evolve_compat::protobuf::ProtobufSchema {
        evolve_compat::protobuf::parse(text, &[]).unwrap()
    }

    fn text(d: &Datum) -> String {
        match d {
            Datum::Text(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => format!("{other:?}"),
        }
    }

    const ORDER: &str = r#"
        syntax = "proto3";
        package shop;
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        message Order {
            int64 id = 1;
            string name = 2;
            optional string note = 3;
            uint64 big = 4;
            float ratio = 5;
            double price = 6;
            bool active = 7;
            bytes raw = 8;
            Status status = 9;
            google.protobuf.Timestamp at = 10;
            google.protobuf.Int64Value maybe = 11;
            Address address = 12;
            repeated string tags = 13;
            map<string, int32> counts = 14;
            sint32 delta = 15;
            oneof pick { string word = 16; int32 number = 17; }
            enum Status { NEW = 0; PAID = 1; }
            message Address { string city = 1; optional string zip = 2; repeated Status seen = 3; }
        }
        message Other { int32 x = 1; }
    "#;

    #[test]
    fn fields_are_columns_with_their_types_and_presence() {
        let s = schema(ORDER);
        let message = reader_message(s.file(), None).unwrap();
        assert_eq!(message.full_name(), "shop.Order");
        let columns = reader_columns(&message);
        let expected: Vec<(&str, &str, bool)> = vec![
            ("id", "bigint", true),
            ("name", "text", true),
            ("note", "text", false),
            ("big", "numeric", true),
            ("ratio", "real", true),
            ("price", "double precision", true),
            ("active", "boolean", true),
            ("raw", "bytea", true),
            ("status", "text", true),
            ("at", "timestamp with time zone", false),
            ("maybe", "bigint", false),
            ("address", "jsonb", false),
            ("tags", "jsonb", true),
            ("counts", "jsonb", true),
            ("delta", "integer", true),
            ("word", "text", false),
            ("number", "integer", false),
        ];
        assert_eq!(described(&columns), expected);
    }

    /// Encodes the message `fields` (protobuf text format) of `message`.
    fn encode(message: &MessageDescriptor, fields: &str) -> Vec<u8> {
        DynamicMessage::parse_text_format(message.clone(), fields)
            .unwrap()
            .encode_to_vec()
    }

    #[test]
    fn values_are_their_types_text_and_absent_fields_their_defaults_or_null() {
        let s = schema(ORDER);
        let message = reader_message(s.file(), None).unwrap();
        let columns = reader_columns(&message);
        let full = encode(
            &message,
            r#"id: -5 name: "Ann" note: "hi" big: 18446744073709551615 ratio: 0.1 price: nan
               active: true raw: "\x01\xff" status: PAID at { seconds: 1714566600 nanos: 500000000 }
               maybe { value: 7 } address { city: "Oslo" seen: [PAID, NEW] }
               tags: ["a", "b"] counts { key: "z" value: 1 } counts { key: "a" value: 2 }
               delta: -3 number: 9"#,
        );
        let values = record_values(&full, &message, &columns).unwrap();
        let shown: Vec<String> = values.iter().map(text).collect();
        assert_eq!(
            shown,
            vec![
                "-5",
                "Ann",
                "hi",
                "18446744073709551615",
                "0.1",
                "NaN",
                "t",
                "\\x01ff",
                "PAID",
                "2024-05-01 12:30:00.5+00",
                "7",
                r#"{"city":"Oslo","seen":["PAID","NEW"]}"#,
                r#"["a","b"]"#,
                r#"{"a":2,"z":1}"#,
                "-3",
                "Null",
                "9",
            ]
        );
        // Nothing set: defaults where there is no presence, NULL where
        // there is, empty lists and maps.
        let values = record_values(&[], &message, &columns).unwrap();
        let shown: Vec<String> = values.iter().map(text).collect();
        assert_eq!(
            shown,
            vec![
                "0", "", "Null", "0", "0", "0", "f", "\\x", "NEW", "Null", "Null", "Null", "[]",
                "{}", "0", "Null", "Null"
            ]
        );
    }

    #[test]
    fn message_indexes_are_read_as_confluent_writes_them() {
        // [0] as one zero byte; [1] as count 1, index 1; [1, 0] in full.
        assert_eq!(
            message_indexes(&[0, 8, 1]).unwrap(),
            (vec![0], &[8u8, 1][..])
        );
        assert_eq!(message_indexes(&[2, 2, 8]).unwrap(), (vec![1], &[8u8][..]));
        assert_eq!(message_indexes(&[4, 2, 0]).unwrap(), (vec![1, 0], &[][..]));
        assert!(message_indexes(&[]).unwrap_err().contains("no count"));
        assert!(message_indexes(&[4, 2]).unwrap_err().contains("fewer"));
        // A negative count or index.
        assert!(message_indexes(&[1]).is_err());
        assert!(message_indexes(&[2, 1]).is_err());
        assert!(message_indexes(&[0xfe, 0x01]).unwrap_err().contains("127"));
        let s = schema(ORDER);
        assert_eq!(
            message_at(s.file(), &[0, 0], None).unwrap().full_name(),
            "shop.Order.Address"
        );
        assert_eq!(
            message_at(s.file(), &[1], None).unwrap().full_name(),
            "shop.Other"
        );
        assert!(message_at(s.file(), &[2], None).is_none());
        assert!(message_at(s.file(), &[0, 5], None).is_none());
        // Order's nested types as a descriptor lists them: CountsEntry
        // (the map's entry), then Address. Java counts Address as [0, 0],
        // Python as [0, 1]; [0, 1] is Address when Address is wanted.
        assert!(message_at(s.file(), &[0, 1], None).is_none());
        for indexes in [[0, 0], [0, 1]] {
            let found = message_at(s.file(), &indexes, Some("shop.Order.Address")).unwrap();
            assert_eq!(found.full_name(), "shop.Order.Address");
        }
        assert!(message_at(s.file(), &[0, 1], Some("shop.Other")).is_none());
    }

    #[test]
    fn a_newer_writers_fields_are_skipped_and_garbage_is_an_error() {
        let s = schema(ORDER);
        let message = reader_message(s.file(), None).unwrap();
        let columns = reader_columns(&message);
        let newer = schema(
            r#"syntax = "proto3"; package shop;
               message Order { int64 id = 1; string extra = 99; }"#,
        );
        let newer_message = reader_message(newer.file(), None).unwrap();
        let encoded = encode(&newer_message, r#"id: 3 extra: "x""#);
        let values = record_values(&encoded, &message, &columns).unwrap();
        assert_eq!(text(&values[0]), "3");
        assert_eq!(
            key_json(&encoded, &newer_message).unwrap(),
            r#"{"id":3,"extra":"x"}"#
        );
        let error = record_values(&[0x0a, 0xff], &message, &columns).unwrap_err();
        assert!(error.starts_with("not a shop.Order message"), "{error}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let s = schema(ORDER);
            let message = reader_message(s.file(), None).unwrap();
            let columns = reader_columns(&message);
            if let Ok((indexes, rest)) = message_indexes(&bytes) {
                let _ = message_at(s.file(), &indexes, Some("shop.Order.Address"));
                let _ = record_values(rest, &message, &columns);
                let _ = key_json(rest, &message);
            }
            let _ = record_values(&bytes, &message, &columns);
        }

        #[test]
        fn damaged_records_never_panic(at in 0usize..200, byte in proptest::prelude::any::<u8>(), cut in 0usize..200) {
            let s = schema(ORDER);
            let message = reader_message(s.file(), None).unwrap();
            let columns = reader_columns(&message);
            let mut encoded = encode(
                &message,
                r#"id: 1 name: "n" at { seconds: -62135596800 } maybe { value: 1 }
                   address { city: "c" seen: [PAID] } tags: ["t"] counts { key: "k" value: 1 }"#,
            );
            let at = at % encoded.len();
            encoded[at] = byte;
            encoded.truncate(cut.max(1));
            let _ = record_values(&encoded, &message, &columns);
            let _ = key_json(&encoded, &message);
        }
    }

    #[test]
    fn a_debezium_envelope_gives_its_rows_columns_and_events_their_op() {
        let s = schema(
            r#"syntax = "proto3"; package pg;
               import "google/protobuf/wrappers.proto";
               message Envelope { Value before = 1; Value after = 2; string op = 4; }
               message Value { int32 id = 1; google.protobuf.StringValue note = 2; }"#,
        );
        let envelope = reader_message(s.file(), None).unwrap();
        let row = debezium_row(&envelope).unwrap();
        assert_eq!(row.full_name(), "pg.Value");
        let columns = reader_columns(&row);
        let event = encode(&envelope, r#"after { id: 3 note { value: "n" } } op: "c""#);
        let (op, after) = debezium_event(&event, &envelope).unwrap();
        assert_eq!(op, "c");
        let values = message_values(&after.unwrap(), &columns).unwrap();
        assert_eq!(values.iter().map(text).collect::<Vec<_>>(), ["3", "n"]);
        let delete = encode(&envelope, r#"before { id: 3 } op: "d""#);
        let (op, after) = debezium_event(&delete, &envelope).unwrap();
        assert_eq!((op.as_str(), after.is_none()), ("d", true));
        assert_eq!(
            debezium_event(&[], &envelope).unwrap_err(),
            "the change event has no op"
        );
        let value = reader_message(s.file(), Some("pg.Value")).unwrap();
        assert!(
            debezium_row(&value)
                .unwrap_err()
                .contains("no fields \"after\" and \"op\"")
        );
    }

    #[test]
    fn the_message_is_the_first_or_the_one_named() {
        let none = schema(r#"syntax = "proto3"; package p; enum E { A = 0; }"#);
        assert!(
            reader_message(none.file(), None)
                .unwrap_err()
                .contains("no message")
        );
        let s = schema(ORDER);
        for name in ["shop.Other", ".shop.Other"] {
            assert_eq!(
                reader_message(s.file(), Some(name)).unwrap().full_name(),
                "shop.Other"
            );
        }
        assert_eq!(
            reader_message(s.file(), Some("shop.Order.Address"))
                .unwrap()
                .full_name(),
            "shop.Order.Address"
        );
        let missing = reader_message(s.file(), Some("Order")).unwrap_err();
        assert_eq!(
            missing,
            "it defines no message \"Order\" (MESSAGE names one by its full name: shop.Order, shop.Other, shop.Order.Address)"
        );
    }
}
