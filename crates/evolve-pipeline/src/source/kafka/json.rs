//! JSON records under a JSON Schema (`FORMAT JSON`, Confluent's JSON
//! Schema serializer: the wire header, then JSON text) as the pipeline's
//! rows: the columns of a Kafka table (one per property of its pinned
//! reader schema's top-level object) and each record's values in the text
//! form of the PostgreSQL type its property maps to, so that a document
//! is what `to_jsonb` gives for a row of those types. Pure, no I/O.
//!
//! | JSON Schema `type` (with or without `"null"`; or the types of a `oneOf` / `anyOf` whose branches each name one) | column type | document value |
//! |---|---|---|
//! | `"integer"` | `bigint` | a number |
//! | `"number"` | `numeric` | the number as written, exponent expanded (`1.5e2` is `150`) |
//! | `"string"` | `text` | a string |
//! | `"boolean"` | `boolean` | `true` / `false` |
//! | `"object"`, `"array"`, several types, none (`$ref`, `oneOf`, ...) | `jsonb` | the value as JSON |
//!
//! A property that is null or absent is left out of the document, as
//! `jsonb_strip_nulls` leaves out SQL NULLs; properties the reader schema
//! does not list are not columns. Columns come in the order of the
//! properties' names. A column is `NOT NULL` when the property is
//! `required` and its type does not admit `"null"`.

use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;

use super::avro::AvroColumn;
use bytes::Bytes;
use evolve_core::change::Datum;

const BIGINT: (u32, &str) = (20, "bigint");
const NUMERIC: (u32, &str) = (1700, "numeric");
const TEXT: (u32, &str) = (25, "text");
const BOOLEAN: (u32, &str) = (16, "boolean");
const JSONB: (u32, &str) = (3802, "jsonb");

/// The columns of a reader schema (its JSON text): one per property of
/// its top-level object, or with `debezium` of the object its `after`
/// property holds ([`debezium_row`]).
pub fn reader_columns(schema: &str, debezium: bool) -> Result<Vec<AvroColumn>, String> {
    let root: Value =
        serde_json::from_str(schema).map_err(|e| format!("the schema is not JSON: {e}"))?;
    let Some(object) = as_object_schema(&root) else {
        return Err(
            "the schema is not an object with properties; a Kafka table's values must be JSON objects"
                .into(),
        );
    };
    let object = if debezium {
        debezium_row(object)?
    } else {
        object
    };
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = object.get("properties").and_then(Value::as_object) else {
        return Err("its properties are not an object".into());
    };
    let mut out = Vec::with_capacity(properties.len());
    for (name, property) in properties {
        let types = property_types(property);
        let nullable = types.is_empty() || types.contains(&"null");
        let mut non_null: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
        // Branches of one type (`{"oneOf": [{"type": "string", "maxLength":
        // 3}, {"type": "string", "minLength": 9}]}`) are that type.
        non_null.sort_unstable();
        non_null.dedup();
        let (type_oid, type_name) = match non_null.as_slice() {
            ["integer"] => BIGINT,
            ["number"] => NUMERIC,
            ["string"] => TEXT,
            ["boolean"] => BOOLEAN,
            _ => JSONB,
        };
        out.push(AvroColumn {
            name: name.clone(),
            type_oid,
            typmod: -1,
            type_name: type_name.to_string(),
            not_null: required.contains(&name.as_str()) && !nullable,
        });
    }
    Ok(out)
}

/// The types a property's schema allows: its `type` (a name or a list),
/// or the `type` of each branch of its `oneOf` / `anyOf` when every
/// branch names one (`{"oneOf": [{"type": "null"}, {"type": "string"}]}`,
/// as Confluent's JSON Schema converter writes an optional field); none
/// when they cannot be told (a `$ref`, a branch without a type).
fn property_types(property: &Value) -> Vec<&str> {
    match property.get("type") {
        Some(Value::String(t)) => return vec![t.as_str()],
        Some(Value::Array(ts)) => return ts.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Vec::new(),
        None => {}
    }
    let branches = ["oneOf", "anyOf"]
        .iter()
        .find_map(|k| property.get(*k).and_then(Value::as_array));
    let Some(branches) = branches else {
        return Vec::new();
    };
    let types: Option<Vec<&str>> = branches
        .iter()
        .map(|b| b.get("type").and_then(Value::as_str))
        .collect();
    types.unwrap_or_default()
}

/// The `title` of a JSON Schema's text: the record type Confluent's
/// RecordNameStrategy names a subject by.
pub fn title(schema: &str) -> Option<String> {
    let root: Value = serde_json::from_str(schema).ok()?;
    root.get("title")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// `schema` when it is an object schema with properties.
fn as_object_schema(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    schema.as_object().filter(|o| {
        o.get("type").and_then(Value::as_str) == Some("object") && o.contains_key("properties")
    })
}

/// The row's object schema of a Debezium change event's schema (`envelope`,
/// Confluent's JSON Schema converter's form of Debezium's envelope): the
/// schema of its `after` property, an object, or a `oneOf` / `anyOf` of
/// `null` and an object, as the converter writes an optional struct.
pub fn debezium_row(
    envelope: &serde_json::Map<String, Value>,
) -> Result<&serde_json::Map<String, Value>, String> {
    let properties = envelope.get("properties").and_then(Value::as_object);
    let field = |name: &str| properties.and_then(|p| p.get(name));
    let (Some(after), Some(_)) = (field("after"), field("op")) else {
        return Err(
            "the schema has no properties \"after\" and \"op\"; ENVELOPE DEBEZIUM reads Debezium's change events"
                .into(),
        );
    };
    if let Some(object) = as_object_schema(after) {
        return Ok(object);
    }
    let branches = ["oneOf", "anyOf"]
        .iter()
        .find_map(|k| after.get(*k).and_then(Value::as_array));
    let objects: Vec<&serde_json::Map<String, Value>> = branches
        .into_iter()
        .flatten()
        .filter_map(as_object_schema)
        .collect();
    match objects.as_slice() {
        [row] => Ok(row),
        _ => Err(
            "the property \"after\" is not an object schema (or oneOf null and one); ENVELOPE DEBEZIUM reads Debezium's change events"
                .into(),
        ),
    }
}

/// A Debezium change event's JSON text: its `op`, and its `after` as JSON
/// text (`None` when null or absent).
pub fn debezium_event(datum: &[u8]) -> Result<(String, Option<&str>), String> {
    let fields: HashMap<String, &RawValue> = serde_json::from_slice(datum)
        .map_err(|e| format!("the change event is not a JSON object: {e}"))?;
    let op = fields
        .get("op")
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .ok_or("the change event has no op")?;
    let after = fields
        .get("after")
        .map(|raw| raw.get())
        .filter(|raw| *raw != "null");
    Ok((op, after))
}

/// The values of a record's JSON text, one per column of
/// [`reader_columns`], in the columns' text form.
pub fn record_values(datum: &[u8], columns: &[AvroColumn]) -> Result<Vec<Datum>, String> {
    let fields: HashMap<String, &RawValue> = serde_json::from_slice(datum)
        .map_err(|e| format!("the value is not a JSON object: {e}"))?;
    let mut out = Vec::with_capacity(columns.len());
    for column in columns {
        let raw = match fields.get(&column.name) {
            None => {
                out.push(Datum::Null);
                continue;
            }
            Some(raw) => raw.get(),
        };
        if raw == "null" {
            out.push(Datum::Null);
            continue;
        }
        let wrong = || {
            format!(
                "property {:?} is {}, where the reader schema has {}",
                column.name,
                kind(raw),
                column.type_name
            )
        };
        let text = match column.type_oid {
            oid if oid == BIGINT.0 => raw
                .parse::<i64>()
                .map(|_| raw.to_string())
                .map_err(|_| wrong())?,
            oid if oid == NUMERIC.0 => plain_decimal(raw).ok_or_else(wrong)?,
            oid if oid == TEXT.0 => serde_json::from_str::<String>(raw).map_err(|_| wrong())?,
            oid if oid == BOOLEAN.0 => match raw {
                "true" => "t".to_string(),
                "false" => "f".to_string(),
                _ => return Err(wrong()),
            },
            _ => raw.to_string(),
        };
        out.push(Datum::Text(Bytes::from(text)));
    }
    Ok(out)
}

/// A key's JSON text (after the wire header), as compact JSON.
pub fn key_json(datum: &[u8]) -> Result<String, String> {
    serde_json::from_slice::<Value>(datum)
        .map(|v| v.to_string())
        .map_err(|e| format!("its key is not JSON: {e}"))
}

/// What a JSON value is, for messages.
fn kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

/// A JSON number as PostgreSQL's `numeric` reads it and writes it back:
/// the exponent applied, the scale what `numeric_in` keeps (the digits
/// after the point less the exponent, at least none). `None` for anything
/// but a JSON number.
fn plain_decimal(raw: &str) -> Option<String> {
    let (negative, rest) = match raw.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty()
        || !digits_only(int)
        || !digits_only(frac)
        || (mantissa.contains('.') && frac.is_empty())
    {
        return None;
    }
    // The value is digits × 10^(exponent − frac.len()).
    let digits = format!("{int}{frac}");
    let scale = i64::try_from(frac.len()).ok()?.checked_sub(exponent)?;
    if !(-1000..=1000).contains(&scale) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    let mut out = String::new();
    if scale <= 0 {
        out.push_str(if digits.is_empty() { "0" } else { digits });
        if !digits.is_empty() {
            out.push_str(&"0".repeat(usize::try_from(-scale).ok()?));
        }
    } else {
        let scale = usize::try_from(scale).ok()?;
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (whole, fraction) = padded.split_at(padded.len() - scale);
        out.push_str(whole);
        out.push('.');
        out.push_str(fraction);
    }
    if negative && out.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        out.insert(0, '-');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kafka::avro::described;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the bytes, reading them never panics; and a JSON
        /// number's plain form is the same number.
        #[test]
        fn reading_never_panics_and_numbers_keep_their_value(
            datum in prop::collection::vec(any::<u8>(), 0..64),
            text in ".{0,24}",
            int in "-?[0-9]{1,12}",
            frac in prop::option::of("[0-9]{1,8}"),
            exponent in prop::option::of(-30i32..30),
        ) {
            let columns = reader_columns(
                r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"},"c":{"type":"string"},"d":{"type":"boolean"},"e":{}}}"#,
                false,
            ).unwrap();
            let _ = debezium_event(&datum);
            let _ = debezium_event(text.as_bytes());
            let _ = record_values(&datum, &columns);
            let _ = record_values(text.as_bytes(), &columns);
            let _ = key_json(&datum);
            let _ = plain_decimal(&text);
            let _ = reader_columns(&text, false);
            let raw = format!(
                "{int}{}{}",
                frac.map(|f| format!(".{f}")).unwrap_or_default(),
                exponent.map(|e| format!("e{e}")).unwrap_or_default()
            );
            let plain = plain_decimal(&raw).unwrap();
            prop_assert!(!plain.contains(['e', 'E']), "{raw} gave {plain}");
            let (a, b): (f64, f64) = (raw.parse().unwrap(), plain.parse().unwrap());
            prop_assert!((a - b).abs() <= a.abs() * 1e-12, "{raw} gave {plain}");
        }
    }

    #[test]
    fn numbers_are_written_as_numeric_writes_them() {
        for (raw, want) in [
            ("0", "0"),
            ("12", "12"),
            ("-12.50", "-12.50"),
            ("1e2", "100"),
            ("1.5e2", "150"),
            ("1.50e1", "15.0"),
            ("1.5E-3", "0.0015"),
            ("-0.0", "0.0"),
            ("0.000", "0.000"),
            (
                "123456789012345678901234567890.123456789",
                "123456789012345678901234567890.123456789",
            ),
            ("2e-2", "0.02"),
        ] {
            assert_eq!(plain_decimal(raw).as_deref(), Some(want), "{raw}");
        }
        for raw in ["", "-", "1.", ".5", "1e", "abc", "\"1\"", "1e99999", "true"] {
            assert_eq!(plain_decimal(raw), None, "{raw}");
        }
    }

    #[test]
    fn properties_are_columns_and_values_their_text() {
        let columns = reader_columns(
            r#"{"type":"object","required":["id","qty"],"properties":{
                "id":{"type":"integer"},"name":{"type":["string","null"]},
                "qty":{"type":["integer","null"]},"price":{"type":"number"},
                "ok":{"type":"boolean"},"tags":{"type":"array"},"any":{}}}"#,
            false,
        )
        .unwrap();
        let described: Vec<(&str, &str, bool)> = described(&columns);
        assert_eq!(
            described,
            [
                ("any", "jsonb", false),
                ("id", "bigint", true),
                ("name", "text", false),
                ("ok", "boolean", false),
                ("price", "numeric", false),
                ("qty", "bigint", false),
                ("tags", "jsonb", false),
            ]
        );
        let values = record_values(
            br#"{"id": 7, "name": "a\"b", "price": 1.5e1, "ok": true, "tags": [1, {"x": null}], "extra": 1, "qty": null}"#,
            &columns,
        )
        .unwrap();
        let texts: Vec<Option<String>> = values
            .iter()
            .map(|d| match d {
                Datum::Text(b) => Some(String::from_utf8(b.to_vec()).unwrap()),
                _ => None,
            })
            .collect();
        assert_eq!(
            texts,
            [
                None,
                Some("7".into()),
                Some("a\"b".into()),
                Some("t".into()),
                Some("15".into()),
                None,
                Some(r#"[1, {"x": null}]"#.into()),
            ]
        );
        let e = record_values(br#"{"id": "7"}"#, &columns).unwrap_err();
        assert_eq!(
            e,
            "property \"id\" is a string, where the reader schema has bigint"
        );
        assert!(record_values(b"[1]", &columns).is_err());
        assert!(reader_columns(r#"{"type":"string"}"#, false).is_err());
        assert_eq!(
            title(r#"{"title":"shop.Order","type":"object"}"#).as_deref(),
            Some("shop.Order")
        );
        assert_eq!(title(r#"{"type":"object"}"#), None);
        assert_eq!(key_json(br#" {"id": 1} "#).unwrap(), r#"{"id":1}"#);
    }

    /// Optional fields as Confluent's JSON Schema converter writes them, a
    /// `oneOf` of `null` and a type, are columns of that type (branches of
    /// one type too); a `oneOf` whose branches do not each name a type, or
    /// name several, is `jsonb`.
    #[test]
    fn optional_fields_written_as_one_of_keep_their_type() {
        let columns = reader_columns(
            r##"{"type":"object","required":["a","b"],"properties":{
                "a":{"oneOf":[{"type":"null"},{"type":"integer","connect.type":"int32"}]},
                "b":{"anyOf":[{"type":"string"},{"type":"null"}]},
                "c":{"oneOf":[{"type":"number"}]},
                "d":{"oneOf":[{"type":"null"},{"$ref":"#/definitions/x"}]},
                "e":{"oneOf":[{"type":"string"},{"type":"integer"}]},
                "f":{"oneOf":[{"type":"string","maxLength":3},{"type":"null"},{"type":"string","minLength":9}]}}}"##,
            false,
        )
        .unwrap();
        let described: Vec<(&str, &str, bool)> = described(&columns);
        assert_eq!(
            described,
            [
                ("a", "bigint", false),
                ("b", "text", false),
                ("c", "numeric", false),
                ("d", "jsonb", false),
                ("e", "jsonb", false),
                ("f", "text", false),
            ]
        );
        let values =
            record_values(br#"{"a": 5, "b": null, "c": 1.50, "e": "x"}"#, &columns).unwrap();
        let texts: Vec<String> = values.iter().map(|d| format!("{d:?}")).collect();
        assert!(
            texts[0].contains("\"5\"") && texts[1] == "Null" && texts[2].contains("1.50"),
            "{texts:?}"
        );
    }

    /// A Debezium envelope as Confluent's JSON Schema converter writes
    /// it: `after` a oneOf of null and the row's object; the columns are
    /// the row's, and an event gives its op and its after.
    #[test]
    fn a_debezium_envelope_gives_its_rows_columns_and_events_their_op() {
        let row = r#"{"type":"object","title":"shop.orders.Value","required":["id"],
            "properties":{"id":{"type":"integer","connect.type":"int32"},"note":{"type":"string"}}}"#;
        let envelope = format!(
            r#"{{"type":"object","title":"shop.orders.Envelope","required":["op"],"properties":{{
                "before":{{"oneOf":[{{"type":"null"}},{row}]}},
                "after":{{"oneOf":[{{"type":"null"}},{row}]}},
                "op":{{"type":"string"}},"ts_ms":{{"type":"integer"}}}}}}"#
        );
        let columns = reader_columns(&envelope, true).unwrap();
        let described: Vec<(&str, &str, bool)> = described(&columns);
        assert_eq!(described, [("id", "bigint", true), ("note", "text", false)]);
        let (op, after) =
            debezium_event(br#"{"before":null,"after":{"id":3,"note":"n"},"op":"c"}"#).unwrap();
        assert_eq!((op.as_str(), after), ("c", Some(r#"{"id":3,"note":"n"}"#)));
        let (op, after) = debezium_event(br#"{"before":{"id":3},"after":null,"op":"d"}"#).unwrap();
        assert_eq!((op.as_str(), after), ("d", None));
        assert_eq!(
            debezium_event(br#"{"after":null}"#).unwrap_err(),
            "the change event has no op"
        );
        // Not an envelope: no after, or an after that is not an object.
        let plain = r#"{"type":"object","properties":{"id":{"type":"integer"}}}"#;
        assert!(
            reader_columns(plain, true)
                .unwrap_err()
                .contains("no properties \"after\"")
        );
        let scalar =
            r#"{"type":"object","properties":{"after":{"type":"string"},"op":{"type":"string"}}}"#;
        assert!(
            reader_columns(scalar, true)
                .unwrap_err()
                .contains("not an object schema")
        );
    }
}
