//! A schema's `guid`, as Confluent 8.x shows it (pure).
//!
//! Confluent's guid is the MD5 of the schema as stored, written as a UUID
//! (confluentinc/schema-registry:core/.../storage/MD5.java `toString`):
//! `SchemaValue.toSchemaEntity` takes `MD5.ofSchema(schema, references,
//! metadata, ruleSet)`, whose bytes are `Schema.updateHash` (the schema
//! text, each reference's name, subject and version as a 4-byte
//! big-endian int, then `1` and `Metadata.updateHash` when there is
//! metadata, `1` and `RuleSet.updateHash` when there is a rule set; see
//! client/.../rest/entities/{Schema,SchemaReference,Metadata,RuleSet,Rule}.java).
//! The same schema with the same references and data contract has the same
//! guid in every context and subject. A record that carries an `md5` field
//! (written by Confluent's metadata encoder only) is not read: its guid is
//! computed the same way.

use serde_json::Value as Json;

use crate::record::SchemaReference;

/// The guid of a schema stored with `text`, `references`, `metadata` and
/// `rule_set`, as Confluent computes it.
pub fn schema_guid(
    text: &str,
    references: &[SchemaReference],
    metadata: Option<&Json>,
    rule_set: Option<&Json>,
) -> String {
    let mut bytes = Vec::with_capacity(text.len() + 64);
    bytes.extend_from_slice(text.as_bytes());
    for r in references {
        bytes.extend_from_slice(r.name.as_bytes());
        bytes.extend_from_slice(r.subject.as_bytes());
        // Java's `int`: a version out of its range cannot have been stored.
        bytes.extend_from_slice(&(r.version as i32).to_be_bytes());
    }
    if let Some(metadata) = metadata {
        bytes.push(1);
        metadata_bytes(metadata, &mut bytes);
    }
    if let Some(rule_set) = rule_set {
        bytes.push(1);
        rule_set_bytes(rule_set, &mut bytes);
    }
    uuid_text(&md5(&bytes))
}

/// `Metadata.updateHash`: tags by name (each tag's values sorted, once),
/// properties by name, then the sensitive names sorted; an absent part is
/// an empty one.
fn metadata_bytes(metadata: &Json, out: &mut Vec<u8>) {
    if let Some(tags) = metadata.get("tags").and_then(Json::as_object) {
        let mut tags: Vec<(&String, &Json)> = tags.iter().collect();
        tags.sort_by(|a, b| a.0.cmp(b.0));
        for (name, values) in tags {
            out.extend_from_slice(name.as_bytes());
            for value in sorted_set(values) {
                out.extend_from_slice(value.as_bytes());
            }
        }
    }
    sorted_map(metadata.get("properties"), out);
    for name in sorted_set(metadata.get("sensitive").unwrap_or(&Json::Null)) {
        out.extend_from_slice(name.as_bytes());
    }
}

/// `RuleSet.updateHash`: the migration, domain and encoding rules in
/// order, then `enableAt`.
fn rule_set_bytes(rule_set: &Json, out: &mut Vec<u8>) {
    for list in ["migrationRules", "domainRules", "encodingRules"] {
        for rule in rule_set
            .get(list)
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            rule_bytes(rule, out);
        }
    }
    if let Some(at) = rule_set.get("enableAt").and_then(Json::as_str) {
        out.extend_from_slice(at.as_bytes());
    }
}

/// `Rule.updateHash`, with the constructor's defaults (kind `TRANSFORM`,
/// mode `WRITEREAD`) and its sorted tags and params.
fn rule_bytes(rule: &Json, out: &mut Vec<u8>) {
    let text = |name: &str| rule.get(name).and_then(Json::as_str);
    let mut push = |value: Option<&str>| {
        if let Some(value) = value {
            out.extend_from_slice(value.as_bytes());
        }
    };
    push(text("name"));
    push(text("doc"));
    push(Some(text("kind").unwrap_or("TRANSFORM")));
    push(Some(text("mode").unwrap_or("WRITEREAD")));
    push(text("type"));
    for tag in sorted_set(rule.get("tags").unwrap_or(&Json::Null)) {
        out.extend_from_slice(tag.as_bytes());
    }
    sorted_map(rule.get("params"), out);
    for name in ["expr", "onSuccess", "onFailure"] {
        if let Some(value) = text(name) {
            out.extend_from_slice(value.as_bytes());
        }
    }
    if rule.get("disabled").and_then(Json::as_bool) == Some(true) {
        out.push(1);
    }
}

/// The strings of a JSON array as a Java `TreeSet` holds them.
fn sorted_set(values: &Json) -> Vec<&str> {
    let mut out: Vec<&str> = values
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A JSON object of strings as a Java `TreeMap` hashes it: each key, then
/// its value, by key.
fn sorted_map(map: Option<&Json>, out: &mut Vec<u8>) {
    let Some(map) = map.and_then(Json::as_object) else {
        return;
    };
    let mut entries: Vec<(&String, &str)> = map
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k, v)))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    for (key, value) in entries {
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(value.as_bytes());
    }
}

/// 16 bytes as Java's `UUID.toString` writes them (8-4-4-4-12 lower-case
/// hex digits).
fn uuid_text(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// MD5 (RFC 1321), by the `md-5` crate. An identifier here, not a
/// safeguard: Confluent's guid is an MD5, so evolve's is too.
pub fn md5(input: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(input).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_gives_the_digests_of_rfc_1321() {
        for (input, digest) in [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ] {
            assert_eq!(hex(&md5(input.as_bytes())), digest, "{input:?}");
        }
    }

    #[test]
    fn a_guid_is_the_md5_of_the_schema_written_as_a_uuid() {
        // No references or data contract: the MD5 of the text alone.
        assert_eq!(
            schema_guid("abc", &[], None, None),
            "90015098-3cd2-4fb0-d696-3f7d28e17f72"
        );
        // Metadata adds a byte 1 then its parts in Java's sorted order,
        // whatever order the JSON gives them in.
        let a = json!({"properties": {"b": "2", "a": "1"}, "tags": {"t": ["y", "x"]}});
        let b = json!({"tags": {"t": ["x", "y"]}, "properties": {"a": "1", "b": "2"}});
        assert_eq!(
            schema_guid("s", &[], Some(&a), None),
            schema_guid("s", &[], Some(&b), None)
        );
        let mut bytes = b"s\x01txya1b2".to_vec();
        assert_eq!(
            schema_guid("s", &[], Some(&a), None),
            uuid_text(&md5(&bytes))
        );
        // Empty metadata still counts its byte 1.
        assert_ne!(
            schema_guid("s", &[], Some(&json!({})), None),
            schema_guid("s", &[], None, None)
        );
        // Rules: kind and mode default to TRANSFORM and WRITEREAD.
        let rules = json!({"domainRules": [{"name": "r", "type": "CEL", "expr": "true"}]});
        bytes = b"s\x01rTRANSFORMWRITEREADCELtrue".to_vec();
        assert_eq!(
            schema_guid("s", &[], None, Some(&rules)),
            uuid_text(&md5(&bytes))
        );
    }
}
