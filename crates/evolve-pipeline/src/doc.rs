//! Helpers around `evolve_core::document`: pinned [`TypeKind`]s as JSON for
//! the catalog, and the splice that keeps an unchanged TOASTed value.
//!
//! pgoutput does not resend a TOASTed value an update left alone (it sends
//! the `u` marker instead). The table's row is only kept as its document, so
//! the new document is encoded without those columns and their members are
//! copied from the current document, into their place in jsonb key order.

use evolve_core::document::TypeKind;
use serde_json::{Value, json};

/// A [`TypeKind`] as JSON, for the catalog's pinned columns.
pub fn kind_to_json(kind: &TypeKind) -> Value {
    match kind {
        TypeKind::Bool => json!("bool"),
        TypeKind::Integer => json!("integer"),
        TypeKind::Numeric => json!("numeric"),
        TypeKind::Float => json!("float"),
        TypeKind::Json => json!("json"),
        TypeKind::Jsonb => json!("jsonb"),
        TypeKind::Date => json!("date"),
        TypeKind::Timestamp => json!("timestamp"),
        TypeKind::TimestampTz => json!("timestamptz"),
        TypeKind::Text => json!("text"),
        TypeKind::Array { element, delimiter } => {
            json!({"array": kind_to_json(element), "delimiter": delimiter})
        }
        TypeKind::Composite { fields } => json!({
            "composite": fields
                .iter()
                .map(|(name, kind)| json!([name, kind_to_json(kind)]))
                .collect::<Vec<_>>()
        }),
    }
}

/// The inverse of [`kind_to_json`]; `None` for anything else.
pub fn kind_from_json(value: &Value) -> Option<TypeKind> {
    Some(match value {
        Value::String(s) => match s.as_str() {
            "bool" => TypeKind::Bool,
            "integer" => TypeKind::Integer,
            "numeric" => TypeKind::Numeric,
            "float" => TypeKind::Float,
            "json" => TypeKind::Json,
            "jsonb" => TypeKind::Jsonb,
            "date" => TypeKind::Date,
            "timestamp" => TypeKind::Timestamp,
            "timestamptz" => TypeKind::TimestampTz,
            "text" => TypeKind::Text,
            _ => return None,
        },
        Value::Object(map) => {
            if let Some(element) = map.get("array") {
                TypeKind::Array {
                    element: Box::new(kind_from_json(element)?),
                    delimiter: u8::try_from(map.get("delimiter")?.as_u64()?).ok()?,
                }
            } else {
                let mut fields = Vec::new();
                for field in map.get("composite")?.as_array()? {
                    let pair = field.as_array()?;
                    fields.push((
                        pair.first()?.as_str()?.to_string(),
                        kind_from_json(pair.get(1)?)?,
                    ));
                }
                TypeKind::Composite { fields }
            }
        }
        _ => return None,
    })
}

/// One top-level member of a compact JSON object: the decoded key, and the
/// byte range of `"key":value` in the document.
#[derive(Debug, PartialEq, Eq)]
struct Member {
    key: Vec<u8>,
    start: usize,
    end: usize,
}

/// The top-level members of a compact JSON object (as `document` writes
/// them: no white space); `None` if `doc` is not one.
fn members(doc: &[u8]) -> Option<Vec<Member>> {
    let mut out = Vec::new();
    if doc.first() != Some(&b'{') || doc.last() != Some(&b'}') {
        return None;
    }
    let mut i = 1;
    let end = doc.len() - 1;
    while i < end {
        let start = i;
        let (key, after_key) = read_string(doc, i)?;
        if doc.get(after_key) != Some(&b':') {
            return None;
        }
        let value_end = skip_value(doc, after_key + 1)?;
        out.push(Member {
            key,
            start,
            end: value_end,
        });
        i = value_end;
        match doc.get(i) {
            Some(b',') => i += 1,
            Some(b'}') if i == end => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Reads the JSON string at `at`; returns its decoded bytes and the index
/// after the closing quote.
fn read_string(doc: &[u8], at: usize) -> Option<(Vec<u8>, usize)> {
    if doc.get(at) != Some(&b'"') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = at + 1;
    loop {
        match *doc.get(i)? {
            b'"' => return Some((out, i + 1)),
            b'\\' => {
                let c = *doc.get(i + 1)?;
                i += 2;
                match c {
                    b'"' | b'\\' | b'/' => out.push(c),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let hex = std::str::from_utf8(doc.get(i..i + 4)?).ok()?;
                        let code = u32::from_str_radix(hex, 16).ok()?;
                        i += 4;
                        // The encoder escapes only control characters this way.
                        let c = char::from_u32(code)?;
                        let mut buf = [0; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                    _ => return None,
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
}

/// The index just past the JSON value starting at `at`.
fn skip_value(doc: &[u8], at: usize) -> Option<usize> {
    match *doc.get(at)? {
        b'"' => Some(read_string(doc, at)?.1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match *doc.get(i)? {
                    b'"' => {
                        i = read_string(doc, i)?.1;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while let Some(&b) = doc.get(i) {
                if matches!(b, b',' | b'}' | b']') {
                    break;
                }
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

/// jsonb's key order: shorter first, then bytewise.
fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `new_doc` with the members named `names` copied from `old_doc` (those
/// `old_doc` has), in jsonb key order. `None` if either is not a compact
/// JSON object.
pub fn splice_members(new_doc: &[u8], old_doc: &[u8], names: &[&str]) -> Option<Vec<u8>> {
    let new_members = members(new_doc)?;
    let old_members = members(old_doc)?;
    let mut parts: Vec<(&[u8], &[u8])> = new_members
        .iter()
        .filter(|m| !names.iter().any(|n| n.as_bytes() == m.key))
        .map(|m| (m.key.as_slice(), &new_doc[m.start..m.end]))
        .collect();
    for m in &old_members {
        if names.iter().any(|n| n.as_bytes() == m.key) {
            parts.push((m.key.as_slice(), &old_doc[m.start..m.end]));
        }
    }
    parts.sort_by(|a, b| key_cmp(a.0, b.0));
    let mut out = Vec::with_capacity(new_doc.len() + old_doc.len());
    out.push(b'{');
    for (i, (_, raw)) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(raw);
    }
    out.push(b'}');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        let kind = TypeKind::Composite {
            fields: vec![
                ("a".into(), TypeKind::Integer),
                (
                    "b".into(),
                    TypeKind::Array {
                        element: Box::new(TypeKind::TimestampTz),
                        delimiter: b';',
                    },
                ),
            ],
        };
        assert_eq!(kind_from_json(&kind_to_json(&kind)), Some(kind));
        assert_eq!(kind_from_json(&json!("nope")), None);
    }

    #[test]
    fn members_of_nested_documents() {
        let doc = br#"{"a":1,"bb":{"x":[1,"}",{"y":null}]},"c\"d":"q\\","e":true}"#;
        let m = members(doc).unwrap();
        let keys: Vec<&[u8]> = m.iter().map(|m| m.key.as_slice()).collect();
        assert_eq!(keys, vec![&b"a"[..], b"bb", b"c\"d", b"e"]);
        assert_eq!(
            &doc[m[1].start..m[1].end],
            br#""bb":{"x":[1,"}",{"y":null}]}"#
        );
        assert_eq!(&doc[m[3].start..m[3].end], br#""e":true"#);
        assert_eq!(members(b"{}").unwrap(), vec![]);
        assert!(members(b"{\"a\"}").is_none());
        assert!(members(b"[1]").is_none());
    }

    #[test]
    fn splice_keeps_key_order() {
        let old = br#"{"id":1,"big":"xxxx","note":"a"}"#;
        let new = br#"{"id":1,"note":"b"}"#;
        assert_eq!(
            splice_members(new, old, &["big"]).unwrap(),
            br#"{"id":1,"big":"xxxx","note":"b"}"#.to_vec()
        );
        // A name the old document lacks is simply absent.
        assert_eq!(
            splice_members(new, br#"{"id":1}"#, &["big"]).unwrap(),
            new.to_vec()
        );
        assert_eq!(
            splice_members(br#"{}"#, br#"{"a":[1,{"b":2}]}"#, &["a"]).unwrap(),
            br#"{"a":[1,{"b":2}]}"#.to_vec()
        );
    }
}
