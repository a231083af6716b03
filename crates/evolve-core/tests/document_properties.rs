//! Property tests for `evolve_core::document`: no input panics, every
//! document is valid JSON, json/jsonb encoding is idempotent, and values
//! written the way PostgreSQL's output functions write them (`array_out`,
//! `record_out`, JSON with arbitrary spacing, duplicates and escapes) come
//! out as a simple model of the rules says.

use evolve_core::document::{Column, TypeKind, encode_row};
use proptest::prelude::*;

// ------------------------------------------------------------- strategies

fn scalar_kind() -> impl Strategy<Value = TypeKind> {
    prop_oneof![
        Just(TypeKind::Bool),
        Just(TypeKind::Integer),
        Just(TypeKind::Numeric),
        Just(TypeKind::Float),
        Just(TypeKind::Json),
        Just(TypeKind::Jsonb),
        Just(TypeKind::Date),
        Just(TypeKind::Timestamp),
        Just(TypeKind::TimestampTz),
        Just(TypeKind::Text),
    ]
}

fn any_kind() -> impl Strategy<Value = TypeKind> {
    scalar_kind().prop_recursive(4, 16, 4, |inner| {
        prop_oneof![
            (inner.clone(), prop::sample::select(vec![b',', b';'])).prop_map(
                |(element, delimiter)| {
                    TypeKind::Array {
                        element: Box::new(element),
                        delimiter,
                    }
                }
            ),
            prop::collection::vec(("[a-c]{0,2}", inner), 0..4)
                .prop_map(|fields| TypeKind::Composite { fields }),
        ]
    })
}

/// Bytes that look a bit like text outputs: mostly the characters the
/// parsers care about.
fn value_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        "[-+0-9.eE:TBC ,;(){}\\[\\]\"\\\\ntrufalsNUL\u{e9}]{0,40}".prop_map(String::into_bytes),
    ]
}

/// A JSON value model: what a json text means after jsonb reads it.
#[derive(Clone, Debug)]
enum J {
    Null,
    Bool(bool),
    Int(i64),
    /// Digits before and after the point: printed as is by numeric_out.
    Dec(u32, String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

fn json_model() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::Int),
        (any::<u32>(), "[0-9]{1,5}").prop_map(|(i, f)| J::Dec(i, f)),
        any::<String>()
            .prop_filter("no NUL", |s| !s.contains('\0'))
            .prop_map(J::Str),
    ];
    leaf.prop_recursive(5, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
            prop::collection::vec(("[a-cé\"\\\\\u{1}]{0,3}", inner), 0..6).prop_map(J::Obj),
        ]
    })
}

/// Writes `s` as a JSON string, choosing escapes by `style`.
fn json_string_text(s: &str, style: u8, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if style % 2 == 1 => out.push_str("\\/"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if style % 3 == 1 && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The model written as JSON text with spacing and escapes chosen by
/// `style`.
fn json_text(j: &J, style: u8, out: &mut String) {
    let space = match style % 4 {
        0 => "",
        1 => " ",
        2 => "\n\t",
        _ => "\r\n ",
    };
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Int(i) => out.push_str(&i.to_string()),
        J::Dec(i, f) => out.push_str(&format!("{i}.{f}")),
        J::Str(s) => json_string_text(s, style, out),
        J::Arr(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(space);
                json_text(item, style.wrapping_add(1), out);
            }
            out.push_str(space);
            out.push(']');
        }
        J::Obj(members) => {
            out.push('{');
            for (n, (k, v)) in members.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(space);
                json_string_text(k, style, out);
                out.push_str(space);
                out.push(':');
                json_text(v, style.wrapping_add(1), out);
            }
            out.push('}');
        }
    }
}

/// PostgreSQL's `escape_json`.
fn escape_json(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The canonical document of the model: keys by length then bytes, the last
/// of duplicates, null members dropped.
fn canonical(j: &J) -> String {
    match j {
        J::Null => "null".into(),
        J::Bool(b) => b.to_string(),
        J::Int(i) => i.to_string(),
        J::Dec(i, f) => format!("{i}.{f}"),
        J::Str(s) => escape_json(s),
        J::Arr(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        J::Obj(members) => {
            let mut last: Vec<(&String, &J)> = Vec::new();
            for (k, v) in members {
                last.retain(|(key, _)| *key != k);
                last.push((k, v));
            }
            last.retain(|(_, v)| !matches!(v, J::Null));
            last.sort_by(|a, b| {
                a.0.len()
                    .cmp(&b.0.len())
                    .then(a.0.as_bytes().cmp(b.0.as_bytes()))
            });
            let parts: Vec<String> = last
                .iter()
                .map(|(k, v)| format!("{}:{}", escape_json(k), canonical(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// `array_out`'s quoting of one element.
fn array_element(s: &str, delimiter: char) -> String {
    let needs_quotes = s.is_empty()
        || s.eq_ignore_ascii_case("NULL")
        || s.chars().any(|c| {
            matches!(
                c,
                '"' | '\\' | '{' | '}' | ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}'
            ) || c == delimiter
        });
    if !needs_quotes {
        return s.to_owned();
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `record_out`'s quoting of one field.
fn record_field(s: &str) -> String {
    let needs_quotes = s.is_empty()
        || s.chars().any(|c| {
            matches!(
                c,
                '"' | '\\' | '(' | ')' | ',' | ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}'
            )
        });
    if !needs_quotes {
        return s.to_owned();
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn encode_one(
    kind: TypeKind,
    value: Option<&[u8]>,
) -> Result<Vec<u8>, evolve_core::document::DocumentError> {
    let mut out = Vec::new();
    encode_row(&[Column::new("v", kind)], &[value], &mut out)?;
    Ok(out)
}

/// `{"v":X}` → `X`; `{}` → `None`.
fn inner_value(doc: &[u8]) -> Option<&[u8]> {
    doc.strip_prefix(b"{\"v\":").map(|d| &d[..d.len() - 1])
}

fn no_nul_string() -> impl Strategy<Value = String> {
    any::<String>().prop_filter("no NUL", |s| !s.contains('\0'))
}

// ------------------------------------------------------------- properties

proptest! {
    #[test]
    fn arbitrary_values_never_panic_and_documents_are_json(
        kinds in prop::collection::vec(any_kind(), 1..4),
        values in prop::collection::vec(prop::option::of(value_bytes()), 1..4),
    ) {
        let columns: Vec<Column> = kinds
            .into_iter()
            .enumerate()
            .map(|(i, kind)| Column::new(format!("c{i}"), kind))
            .collect();
        let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
        let mut out = b"keep".to_vec();
        match encode_row(&columns, &values, &mut out) {
            Ok(()) => {
                let doc = &out[4..];
                let parsed: serde_json::Value = serde_json::from_slice(doc)
                    .map_err(|e| TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(doc))))?;
                prop_assert!(parsed.is_object());
            }
            Err(_) => prop_assert_eq!(&out, b"keep"),
        }
    }

    #[test]
    fn arbitrary_json_text_never_panics(text in value_bytes(), jsonb in any::<bool>()) {
        let kind = if jsonb { TypeKind::Jsonb } else { TypeKind::Json };
        if let Ok(doc) = encode_one(kind, Some(&text)) {
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&doc).is_ok());
        }
    }

    #[test]
    fn json_is_read_as_the_model_says(model in json_model(), style in any::<u8>()) {
        let mut text = String::new();
        json_text(&model, style, &mut text);
        let doc = encode_one(TypeKind::Json, Some(text.as_bytes()))
            .map_err(|e| TestCaseError::fail(format!("{e} for {text}")))?;
        let expected = match model {
            J::Null => "{}".to_owned(),
            ref m => format!("{{\"v\":{}}}", canonical(m)),
        };
        prop_assert_eq!(String::from_utf8(doc).unwrap(), expected, "input {}", text);
    }

    #[test]
    fn jsonb_encoding_is_idempotent(model in json_model(), style in any::<u8>()) {
        let mut text = String::new();
        json_text(&model, style, &mut text);
        let first = encode_one(TypeKind::Jsonb, Some(text.as_bytes())).unwrap();
        // The value inside, encoded again, gives the same document...
        if let Some(value) = inner_value(&first) {
            let second = encode_one(TypeKind::Jsonb, Some(value)).unwrap();
            prop_assert_eq!(&second, &first);
        }
        // ...and the whole document read as jsonb is itself.
        let whole = encode_one(TypeKind::Jsonb, Some(&first)).unwrap();
        prop_assert_eq!(inner_value(&whole).unwrap(), &first[..]);
    }

    #[test]
    fn array_out_text_reads_back(
        elements in prop::collection::vec(prop::option::of(no_nul_string()), 0..6),
        semicolon in any::<bool>(),
        lower in -3i32..3,
    ) {
        let delimiter = if semicolon { ';' } else { ',' };
        let mut text = String::new();
        if lower != 1 && !elements.is_empty() {
            text.push_str(&format!("[{}:{}]=", lower, lower + elements.len() as i32 - 1));
        }
        text.push('{');
        let parts: Vec<String> = elements
            .iter()
            .map(|e| match e {
                None => "NULL".to_owned(),
                Some(s) => array_element(s, delimiter),
            })
            .collect();
        text.push_str(&parts.join(&delimiter.to_string()));
        text.push('}');
        let kind = TypeKind::Array { element: Box::new(TypeKind::Text), delimiter: delimiter as u8 };
        let doc = encode_one(kind, Some(text.as_bytes()))
            .map_err(|e| TestCaseError::fail(format!("{e} for {text}")))?;
        let expected: Vec<String> = elements
            .iter()
            .map(|e| e.as_deref().map_or_else(|| "null".to_owned(), escape_json))
            .collect();
        prop_assert_eq!(String::from_utf8(doc).unwrap(), format!("{{\"v\":[{}]}}", expected.join(",")));
    }

    #[test]
    fn record_out_text_reads_back(fields in prop::collection::vec(prop::option::of(no_nul_string()), 0..6)) {
        let text = format!(
            "({})",
            fields
                .iter()
                .map(|f| f.as_deref().map_or_else(String::new, record_field))
                .collect::<Vec<_>>()
                .join(",")
        );
        let names: Vec<String> = (0..fields.len()).map(|i| "f".repeat(fields.len() - i)).collect();
        let kind = TypeKind::Composite {
            fields: names.iter().map(|n| (n.clone(), TypeKind::Text)).collect(),
        };
        let doc = encode_one(kind, Some(text.as_bytes()))
            .map_err(|e| TestCaseError::fail(format!("{e} for {text}")))?;
        // Names get shorter along the fields, so jsonb order is reversed.
        let expected: Vec<String> = names
            .iter()
            .zip(&fields)
            .rev()
            .filter_map(|(n, f)| f.as_deref().map(|f| format!("\"{n}\":{}", escape_json(f))))
            .collect();
        prop_assert_eq!(String::from_utf8(doc).unwrap(), format!("{{\"v\":{{{}}}}}", expected.join(",")));
    }

    #[test]
    fn numbers_are_plain_decimals(mantissa in any::<i64>(), scale in 0u32..20, exponent in -40i32..40) {
        let text = format!("{}e{exponent}", mantissa as f64 / 10f64.powi(scale as i32));
        if let Ok(doc) = encode_one(TypeKind::Float, Some(text.as_bytes())) {
            let value = inner_value(&doc).unwrap();
            prop_assert!(value.iter().all(|b| b.is_ascii_digit() || *b == b'.' || *b == b'-'));
            // The same number, as JSON, reads back as the same decimal.
            let again = encode_one(TypeKind::Json, Some(value)).unwrap();
            prop_assert_eq!(again, doc);
        }
    }
}
