//! The normalized text of an Avro schema: one text for every way of
//! writing the same schema.
//!
//! Confluent Schema Registry compares Avro schemas by Avro Java's
//! `Schema.toString()`, so `{"name":"com.x.Order",...}` and
//! `{"name":"Order","namespace":"com.x",...}`, or `{"type":"string"}` and
//! `"string"`, are one schema there. This form keeps what `toString()`
//! keeps (docs, defaults, aliases, field order, logical types and every
//! custom property) and drops what it drops, in one spelling:
//!
//! - named types carry their full name (`"name":"com.x.Order"`, no
//!   `namespace`, except `"namespace":""` for a type of the null namespace
//!   inside a namespaced one), aliases too (sorted), and a use of a named
//!   type is its full name, resolved as Java resolves it (the enclosing
//!   namespace first, then the null namespace);
//! - a type with nothing but its `type` is that type's name
//!   (`{"type":"long"}` is `"long"`);
//! - keys come in a fixed order: `name`, `type`, then `fields`, `symbols`,
//!   `items`, `values` or `size`, then the other attributes sorted, each
//!   value as compact JSON with sorted keys;
//! - attributes Java reserves and ignores where they appear (a `doc` on an
//!   array or a primitive, a `namespace` on a named type whose name is
//!   qualified) are dropped, as is a field's `"order":"ascending"` (the
//!   default).
//!
//! It is computed from the JSON rather than from apache-avro's parsed
//! schema, which does not keep the custom properties of primitives and
//! logical types. Only meant for texts that parse as Avro schemas.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

use crate::Reference;

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// Attributes Avro Java reserves on every schema (`Schema.SCHEMA_RESERVED`):
/// never custom properties, kept only where they mean something.
const SCHEMA_RESERVED: [&str; 10] = [
    "doc",
    "fields",
    "items",
    "name",
    "namespace",
    "size",
    "symbols",
    "values",
    "type",
    "aliases",
];

/// Attributes Avro Java reserves on a record field (`FIELD_RESERVED`).
const FIELD_RESERVED: [&str; 6] = ["default", "doc", "name", "order", "type", "aliases"];

/// The normalized text of `text`, an Avro schema whose named types may
/// come from `references` (Confluent's, each an Avro schema defining named
/// types); `None` when `text` is not JSON.
pub fn normalized_form(text: &str, references: &[Reference]) -> Option<String> {
    let root: Value = serde_json::from_str(text).ok()?;
    let mut defined = HashSet::new();
    for reference in references {
        if let Ok(value) = serde_json::from_str::<Value>(&reference.schema) {
            collect(&value, "", &mut defined);
        }
    }
    collect(&root, "", &mut defined);
    let mut out = String::with_capacity(text.len());
    Writer { defined: &defined }.schema(&root, "", &mut out);
    Some(out)
}

/// A named type's full name and the namespace its nested definitions
/// inherit: a dotted name is full whatever `namespace` says; otherwise
/// `namespace` (empty meaning none), else the enclosing one.
fn full_name(object: &serde_json::Map<String, Value>, enclosing: &str) -> (String, String) {
    let name = object.get("name").and_then(Value::as_str).unwrap_or("");
    if let Some((space, _)) = name.rsplit_once('.') {
        return (name.to_owned(), space.to_owned());
    }
    let space = match object.get("namespace") {
        Some(Value::String(space)) => space.as_str(),
        Some(Value::Null) => "",
        _ => enclosing,
    };
    if space.is_empty() {
        (name.to_owned(), String::new())
    } else {
        (format!("{space}.{name}"), space.to_owned())
    }
}

fn is_named(kind: &str) -> bool {
    matches!(kind, "record" | "error" | "enum" | "fixed")
}

/// Every named type `value` defines, by full name.
fn collect(value: &Value, enclosing: &str, defined: &mut HashSet<String>) {
    match value {
        Value::Array(branches) => {
            for branch in branches {
                collect(branch, enclosing, defined);
            }
        }
        Value::Object(object) => {
            let kind = object.get("type");
            match kind.and_then(Value::as_str) {
                Some(k) if is_named(k) => {
                    let (name, space) = full_name(object, enclosing);
                    defined.insert(name);
                    for field in object
                        .get("fields")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(t) = field.get("type") {
                            collect(t, &space, defined);
                        }
                    }
                }
                Some("array") => {
                    if let Some(items) = object.get("items") {
                        collect(items, enclosing, defined);
                    }
                }
                Some("map") => {
                    if let Some(values) = object.get("values") {
                        collect(values, enclosing, defined);
                    }
                }
                Some(_) => {}
                None => {
                    if let Some(inner) = kind {
                        collect(inner, enclosing, defined);
                    }
                }
            }
        }
        _ => {}
    }
}

struct Writer<'d> {
    defined: &'d HashSet<String>,
}

impl Writer<'_> {
    /// The full name a use of `name` in namespace `enclosing` means:
    /// `enclosing.name` when such a type is defined, else `name` itself
    /// (Avro Java's `Names.get`).
    fn resolve(&self, name: &str, enclosing: &str) -> String {
        if name.contains('.') || enclosing.is_empty() {
            return name.to_owned();
        }
        let qualified = format!("{enclosing}.{name}");
        if self.defined.contains(&qualified) {
            qualified
        } else {
            name.to_owned()
        }
    }

    fn schema(&self, value: &Value, enclosing: &str, out: &mut String) {
        match value {
            Value::String(name) => {
                if PRIMITIVES.contains(&name.as_str()) {
                    write_string(name, out);
                } else {
                    write_string(&self.resolve(name, enclosing), out);
                }
            }
            Value::Array(branches) => {
                out.push('[');
                for (i, branch) in branches.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.schema(branch, enclosing, out);
                }
                out.push(']');
            }
            Value::Object(object) => self.object(object, enclosing, out),
            other => write_json(other, out),
        }
    }

    fn object(&self, object: &serde_json::Map<String, Value>, enclosing: &str, out: &mut String) {
        let kind = match object.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            // `{"type": <schema>}`: the schema itself, when that is all.
            Some(inner) if object.len() == 1 => return self.schema(inner, enclosing, out),
            _ => return write_json(&Value::Object(object.clone()), out),
        };
        if is_named(kind) {
            return self.named(kind, object, enclosing, out);
        }
        let mut rest = properties(object, &SCHEMA_RESERVED);
        match kind {
            "array" | "map" => {
                let (key, part) = if kind == "array" {
                    ("items", object.get("items"))
                } else {
                    ("values", object.get("values"))
                };
                out.push_str("{\"type\":");
                write_string(kind, out);
                out.push_str(",\"");
                out.push_str(key);
                out.push_str("\":");
                match part {
                    Some(part) => self.schema(part, enclosing, out),
                    None => out.push_str("null"),
                }
                write_rest(&mut rest, out);
                out.push('}');
            }
            _ if PRIMITIVES.contains(&kind) => {
                if rest.is_empty() {
                    write_string(kind, out);
                } else {
                    out.push_str("{\"type\":");
                    write_string(kind, out);
                    write_rest(&mut rest, out);
                    out.push('}');
                }
            }
            // A use of a named type (`{"type":"com.x.Order"}`): Java takes
            // the type and ignores the rest.
            _ => write_string(&self.resolve(kind, enclosing), out),
        }
    }

    fn named(
        &self,
        kind: &str,
        object: &serde_json::Map<String, Value>,
        enclosing: &str,
        out: &mut String,
    ) {
        let (name, space) = full_name(object, enclosing);
        let mut reserved: Vec<&str> = SCHEMA_RESERVED.to_vec();
        if kind == "enum" {
            reserved.push("default");
        }
        let mut rest = properties(object, &reserved);
        if let Some(doc) = object.get("doc") {
            rest.insert("doc".into(), json_text(doc));
        }
        if let Some(aliases) = object.get("aliases").and_then(Value::as_array) {
            let full: BTreeSet<String> = aliases
                .iter()
                .filter_map(Value::as_str)
                .map(|alias| {
                    if alias.contains('.') || space.is_empty() {
                        alias.to_owned()
                    } else {
                        format!("{space}.{alias}")
                    }
                })
                .collect();
            if !full.is_empty() {
                rest.insert("aliases".into(), json_text(&Value::from_iter(full)));
            }
        }
        out.push_str("{\"name\":");
        write_string(&name, out);
        if space.is_empty() && !enclosing.is_empty() {
            // A type of the null namespace inside a namespaced one: without
            // this, its unqualified name would take the enclosing namespace.
            out.push_str(",\"namespace\":\"\"");
        }
        out.push_str(",\"type\":");
        write_string(kind, out);
        match kind {
            "enum" => {
                if let Some(default) = object.get("default") {
                    rest.insert("default".into(), json_text(default));
                }
                out.push_str(",\"symbols\":");
                write_json(object.get("symbols").unwrap_or(&Value::Null), out);
            }
            "fixed" => {
                out.push_str(",\"size\":");
                write_json(object.get("size").unwrap_or(&Value::Null), out);
            }
            _ => {
                out.push_str(",\"fields\":[");
                let fields = object.get("fields").and_then(Value::as_array);
                for (i, field) in fields.into_iter().flatten().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.field(field, &space, out);
                }
                out.push(']');
            }
        }
        write_rest(&mut rest, out);
        out.push('}');
    }

    fn field(&self, field: &Value, space: &str, out: &mut String) {
        let Some(object) = field.as_object() else {
            return write_json(field, out);
        };
        let mut rest = properties(object, &FIELD_RESERVED);
        for key in ["default", "doc"] {
            if let Some(value) = object.get(key) {
                rest.insert(key.into(), json_text(value));
            }
        }
        if let Some(order) = object.get("order").and_then(Value::as_str) {
            let order = order.to_ascii_lowercase();
            if order != "ascending" {
                rest.insert("order".into(), json_text(&Value::from(order)));
            }
        }
        if let Some(aliases) = object.get("aliases").and_then(Value::as_array) {
            let sorted: BTreeSet<&str> = aliases.iter().filter_map(Value::as_str).collect();
            if !sorted.is_empty() {
                rest.insert("aliases".into(), json_text(&Value::from_iter(sorted)));
            }
        }
        out.push_str("{\"name\":");
        write_json(object.get("name").unwrap_or(&Value::Null), out);
        out.push_str(",\"type\":");
        match object.get("type") {
            Some(t) => self.schema(t, space, out),
            None => out.push_str("null"),
        }
        write_rest(&mut rest, out);
        out.push('}');
    }
}

/// The attributes of `object` that are not `reserved`, as compact JSON by
/// key.
fn properties(
    object: &serde_json::Map<String, Value>,
    reserved: &[&str],
) -> BTreeMap<String, String> {
    object
        .iter()
        .filter(|(key, _)| !reserved.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), json_text(value)))
        .collect()
}

/// `,"key":value` for each entry, in key order.
fn write_rest(rest: &mut BTreeMap<String, String>, out: &mut String) {
    for (key, value) in std::mem::take(rest) {
        out.push(',');
        write_string(&key, out);
        out.push(':');
        out.push_str(&value);
    }
}

fn json_text(value: &Value) -> String {
    let mut out = String::new();
    write_json(value, &mut out);
    out
}

/// Compact JSON with object keys sorted, whatever order the map keeps.
fn write_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_json(&object[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(text: &str, out: &mut String) {
    out.push_str(&Value::from(text).to_string());
}
