//! JSON Schema: parsing, canonical form, and the question "does `reader`
//! accept all data valid under `writer`?".
//!
//! The rules follow Karapace's and Confluent's JSON Schema checkers (see
//! [`check`] for the model and where it departs from plain JSON Schema
//! semantics). Schemas are draft-07 unless `$schema` names another draft;
//! 2019-09/2020-12 keywords that matter for compatibility (`$defs`,
//! `prefixItems`, `dependentRequired`, `dependentSchemas`, `$anchor`,
//! `$ref` beside other keywords, `unevaluatedProperties`,
//! `unevaluatedItems`, `minContains`, `maxContains`) are understood.
//! Keywords of the 2020-12 vocabularies the checker does not read (`if`,
//! `then`, `else`, `$dynamicRef`, `$dynamicAnchor`, and 2019-09's
//! `$recursiveRef` and `$recursiveAnchor`) make any change that touches them incompatible
//! (`KEYWORD_NOT_UNDERSTOOD`), as do the 2019-09 keywords in a schema of
//! an earlier draft, whose validators ignore them.
//!
//! Pure: no I/O. A `$ref` is resolved against the schema itself, the
//! `$id`s inside it and the [`Reference`]s given to
//! [`parse`], never fetched.

mod check;
mod java_regex;
mod regex;
#[cfg(test)]
mod tests;

use crate::{Incompatibility, Reference, SchemaError, SchemaType};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A parsed JSON Schema, with the schemas it references.
#[derive(Clone, Debug)]
pub struct JsonSchema {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The schema itself first, then its references in the order given.
    docs: Vec<Doc>,
    /// Every `$id` (as written, and resolved against its document's base)
    /// → (document, JSON pointer of the schema that declares it).
    ids: HashMap<String, (usize, String)>,
    /// (document, anchor name) → JSON pointer, from `$anchor` and from
    /// draft-07 `"$id": "#name"`.
    anchors: HashMap<(usize, String), String>,
    /// The first `pattern` or `patternProperties` name of the schema
    /// itself (not of its references) that Java's `java.util.regex`
    /// refuses (see [`JsonSchema::java_pattern_error`]).
    java_pattern_error: Option<SchemaError>,
}

#[derive(Debug)]
struct Doc {
    /// The reference name; empty for the schema itself.
    name: String,
    /// The base URI relative `$ref`s are resolved against: the root `$id`,
    /// else the reference name.
    base: String,
    draft: Draft,
    root: Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Draft {
    D4,
    D6,
    D7,
    D2019,
    D2020,
}

impl Draft {
    fn of(root: &Value) -> Draft {
        let Some(uri) = root.get("$schema").and_then(Value::as_str) else {
            return Draft::D7;
        };
        if uri.contains("2020-12") {
            Draft::D2020
        } else if uri.contains("2019-09") {
            Draft::D2019
        } else if uri.contains("draft-04") {
            Draft::D4
        } else if uri.contains("draft-06") {
            Draft::D6
        } else {
            Draft::D7
        }
    }

    fn name(self) -> &'static str {
        match self {
            Draft::D4 => "draft-04",
            Draft::D6 => "draft-06",
            Draft::D7 => "draft-07",
            Draft::D2019 => "2019-09",
            Draft::D2020 => "2020-12",
        }
    }

    /// Whether `$ref` is applied beside its sibling keywords (2019-09 on)
    /// rather than replacing them.
    fn ref_has_siblings(self) -> bool {
        self >= Draft::D2019
    }
}

/// Keywords that never restrict which values are valid.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$comment",
    "$defs",
    "definitions",
    "$vocabulary",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
];

fn is_annotation(keyword: &str) -> bool {
    ANNOTATIONS.contains(&keyword)
}

/// Parses a JSON Schema offered as a new one (draft-07 when `$schema` is
/// absent; 2019-09 and 2020-12 understood). `references` are the schemas a
/// `$ref` may name by [`Reference::name`] (Confluent's `references`).
///
/// Errors: the text is not JSON; it is not an object or boolean schema; a
/// known keyword has the wrong type (`"type": 5`, `"required": "a"`); a
/// `$ref` resolves to nothing, to something that is not a schema, or only
/// to itself; a `pattern` or `patternProperties` name of the schema itself
/// is one Java's `java.util.regex` refuses (Confluent compiles each one
/// with it when it loads the schema), see
/// [`JsonSchema::java_pattern_error`]. A schema accepted before, read back
/// from where it is stored, is read with [`parse_stored`] instead, which
/// does not refuse it for its patterns.
pub fn parse(text: &str, references: &[Reference]) -> Result<JsonSchema, SchemaError> {
    let schema = parse_stored(text, references)?;
    match schema.java_pattern_error() {
        Some(e) => Err(e.clone()),
        None => Ok(schema),
    }
}

/// Parses a JSON Schema that was accepted before (a registry's stored
/// schema, one that earlier releases of evolve took): as [`parse`], except
/// that a pattern Java refuses is not an error, only reported by
/// [`JsonSchema::java_pattern_error`]. Such a pattern is treated as any
/// pattern the checker's matcher cannot run.
pub fn parse_stored(text: &str, references: &[Reference]) -> Result<JsonSchema, SchemaError> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        error(crate::explain_nesting(
            format!("not valid JSON: {e}"),
            "move inner schemas into \"$defs\" and refer to them with \"$ref\"",
        ))
    })?;
    let mut docs = vec![make_doc(String::new(), root)?];
    for reference in references {
        let value: Value = serde_json::from_str(&reference.schema).map_err(|e| {
            error(format!(
                "reference {:?} is not valid JSON: {e}",
                reference.name
            ))
        })?;
        docs.push(make_doc(reference.name.clone(), value)?);
    }

    let mut walker = Walker {
        ids: HashMap::new(),
        anchors: HashMap::new(),
        refs: Vec::new(),
        java_pattern_error: None,
    };
    for (index, doc) in docs.iter().enumerate() {
        walker.schema(index, doc, &doc.root, "", 0)?;
    }
    let Walker {
        ids,
        anchors,
        refs,
        java_pattern_error,
    } = walker;
    let schema = JsonSchema {
        inner: Arc::new(Inner {
            docs,
            ids,
            anchors,
            java_pattern_error,
        }),
    };
    // Chains share their tails (`a -> b -> c`, `b -> c`): each `$ref` is
    // followed once, not once per chain it is part of.
    let mut good = HashSet::new();
    for (doc, pointer) in refs {
        schema.check_ref_chain(doc, &pointer, &mut good)?;
    }
    Ok(schema)
}

/// A canonical text for deduplicating schemas: object keys sorted, no
/// insignificant whitespace. References are not included.
pub fn canonical_form(schema: &JsonSchema) -> String {
    let mut out = String::new();
    write_canonical(&schema.inner.docs[0].root, &mut out);
    out
}

/// Every reason `reader` does not accept all data valid under `writer`;
/// empty means compatible.
pub fn check(reader: &JsonSchema, writer: &JsonSchema) -> Vec<Incompatibility> {
    check::check(reader, writer)
}

fn error(message: String) -> SchemaError {
    SchemaError {
        schema_type: SchemaType::Json,
        message,
        missing_import: None,
    }
}

fn make_doc(name: String, root: Value) -> Result<Doc, SchemaError> {
    if !matches!(root, Value::Object(_) | Value::Bool(_)) {
        let what = if name.is_empty() {
            "the schema".to_string()
        } else {
            format!("reference {name:?}")
        };
        return Err(error(format!(
            "{what} must be a JSON object or a boolean, found {}",
            describe(&root)
        )));
    }
    let draft = Draft::of(&root);
    let base = root
        .get(if draft == Draft::D4 { "id" } else { "$id" })
        .and_then(Value::as_str)
        .map(|id| strip_empty_fragment(id).to_string())
        .unwrap_or_else(|| name.clone());
    Ok(Doc {
        name,
        base,
        draft,
        root,
    })
}

fn strip_empty_fragment(uri: &str) -> &str {
    uri.strip_suffix('#').unwrap_or(uri)
}

fn describe(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        let short: String = text.chars().take(40).collect();
        format!("{short}…")
    } else {
        text
    }
}

/// The display form of a JSON pointer inside document `doc`: `#/a/b` for
/// the schema itself, `name#/a/b` for a reference.
fn display_pointer(docs: &[Doc], doc: usize, pointer: &str) -> String {
    format!("{}#{pointer}", docs[doc].name)
}

fn escape_token(token: &str) -> Cow<'_, str> {
    if token.contains(['~', '/']) {
        Cow::Owned(token.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(token)
    }
}

/// Follows a JSON pointer (without the leading `#`) from `root`.
fn navigate<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let rest = pointer.strip_prefix('/')?;
    let mut node = root;
    for raw in rest.split('/') {
        let token = if raw.contains('~') {
            Cow::Owned(raw.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(raw)
        };
        node = match node {
            Value::Object(map) => map.get(token.as_ref())?,
            Value::Array(items) => {
                if token.starts_with('+') || (token.len() > 1 && token.starts_with('0')) {
                    return None;
                }
                items.get(token.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(node)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// Resolves `reference` against `base` (RFC 3986, simplified: no dot
/// segment removal beyond a leading `./`).
fn join_uri(base: &str, reference: &str) -> String {
    let reference = reference.strip_prefix("./").unwrap_or(reference);
    if base.is_empty() || has_scheme(reference) {
        return reference.to_string();
    }
    if let Some(rest) = reference.strip_prefix("//") {
        let scheme = base.split_once(':').map(|(s, _)| s).unwrap_or("");
        return format!("{scheme}://{rest}");
    }
    if reference.starts_with('/') {
        // Keep the scheme and authority of the base.
        if let Some((scheme, rest)) = base.split_once("://") {
            let authority = rest.split('/').next().unwrap_or("");
            return format!("{scheme}://{authority}{reference}");
        }
        return reference.to_string();
    }
    let base = strip_empty_fragment(base.split('#').next().unwrap_or(base));
    match base.rfind('/') {
        Some(slash) => format!("{}{reference}", &base[..=slash]),
        None => reference.to_string(),
    }
}

fn has_scheme(uri: &str) -> bool {
    match uri.find(':') {
        Some(colon) => {
            let scheme = &uri[..colon];
            !scheme.is_empty()
                && scheme
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

fn last_segment(uri: &str) -> &str {
    let uri = uri.split('#').next().unwrap_or(uri);
    uri.rsplit('/').next().unwrap_or(uri)
}

impl JsonSchema {
    /// Why a new schema is refused although it parses: the first
    /// `pattern` or `patternProperties` name of the schema itself (its
    /// references are not looked at) that Java's `java.util.regex`
    /// refuses, as Confluent refuses it (it compiles each one with Java
    /// when it loads the schema). [`parse`] answers it as its error;
    /// [`parse_stored`] keeps the schema and leaves the question to the
    /// caller (a registry asks it only of schemas it does not store yet).
    pub fn java_pattern_error(&self) -> Option<&SchemaError> {
        self.inner.java_pattern_error.as_ref()
    }

    fn docs(&self) -> &[Doc] {
        &self.inner.docs
    }

    fn draft(&self, doc: usize) -> Draft {
        self.inner.docs[doc].draft
    }

    /// Resolves `reference`, written in document `doc`, to (document,
    /// JSON pointer).
    fn resolve(&self, doc: usize, reference: &str) -> Option<(usize, String)> {
        let (uri, fragment) = match reference.split_once('#') {
            Some((uri, fragment)) => (uri, percent_decode(fragment)),
            None => (reference, String::new()),
        };
        let (target, base_pointer) = if uri.is_empty() {
            (doc, String::new())
        } else {
            self.find_resource(doc, uri)?
        };
        let pointer = if fragment.is_empty() {
            base_pointer
        } else if fragment.starts_with('/') {
            format!("{base_pointer}{fragment}")
        } else {
            self.inner.anchors.get(&(target, fragment))?.clone()
        };
        navigate(&self.inner.docs[target].root, &pointer)?;
        Some((target, pointer))
    }

    /// The schema resource `uri` names: a reference by name, a schema by
    /// `$id`, or a reference whose name ends like `uri`.
    fn find_resource(&self, doc: usize, uri: &str) -> Option<(usize, String)> {
        let docs = self.docs();
        if let Some(k) = docs.iter().skip(1).position(|d| d.name == uri) {
            return Some((k + 1, String::new()));
        }
        let absolute = join_uri(&docs[doc].base, uri);
        for key in [absolute.as_str(), strip_empty_fragment(uri)] {
            if let Some(found) = self.inner.ids.get(key) {
                return Some(found.clone());
            }
        }
        if let Some(k) = docs
            .iter()
            .position(|d| !d.base.is_empty() && (d.base == absolute || d.name == absolute))
        {
            return Some((k, String::new()));
        }
        let wanted = last_segment(uri);
        let mut candidates = docs
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, d)| last_segment(&d.name) == wanted);
        match (candidates.next(), candidates.next()) {
            (Some((k, _)), None) if !wanted.is_empty() => Some((k, String::new())),
            _ => None,
        }
    }

    /// Follows the chain of `$ref`s starting at the one at `pointer`,
    /// failing when one resolves to nothing or the chain only comes back
    /// to itself. `good` holds the `$ref`s whose chains are known to be
    /// sound: reaching one ends the walk, and the walk's own `$ref`s join
    /// it when it ends well.
    fn check_ref_chain(
        &self,
        doc: usize,
        pointer: &str,
        good: &mut HashSet<(usize, String)>,
    ) -> Result<(), SchemaError> {
        let docs = self.docs();
        let mut seen = HashSet::new();
        let (mut doc, mut pointer) = (doc, pointer.to_string());
        let sound = |seen: HashSet<(usize, String)>, good: &mut HashSet<(usize, String)>| {
            good.extend(seen);
            Ok(())
        };
        loop {
            if good.contains(&(doc, pointer.clone())) {
                return sound(seen, good);
            }
            let Some(node) = navigate(&docs[doc].root, &pointer) else {
                return sound(seen, good);
            };
            let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
                return sound(seen, good);
            };
            if !seen.insert((doc, pointer.clone())) {
                return Err(error(format!(
                    "$ref {reference:?} at {} only refers back to itself",
                    display_pointer(docs, doc, &pointer)
                )));
            }
            let Some((target, target_pointer)) = self.resolve(doc, reference) else {
                return Err(error(format!(
                    "$ref {reference:?} at {} resolves to nothing; define it in the schema or pass the schema it names as a reference",
                    display_pointer(docs, doc, &pointer)
                )));
            };
            let target_node = navigate(&docs[target].root, &target_pointer);
            if !matches!(target_node, Some(Value::Object(_) | Value::Bool(_))) {
                return Err(error(format!(
                    "$ref {reference:?} at {} does not point to a schema",
                    display_pointer(docs, doc, &pointer)
                )));
            }
            // With 2019-09 on, `$ref` beside other keywords does not
            // replace the schema; such a chain is not a loop by itself.
            let replaces = !docs[doc].draft.ref_has_siblings()
                || node
                    .as_object()
                    .is_some_and(|m| m.keys().all(|k| k == "$ref" || is_annotation(k)));
            if !replaces {
                return sound(seen, good);
            }
            (doc, pointer) = (target, target_pointer);
        }
    }
}

/// Walks every subschema of the documents: checks keyword types, collects
/// `$id`s, anchors and `$ref`s.
struct Walker {
    ids: HashMap<String, (usize, String)>,
    anchors: HashMap<(usize, String), String>,
    refs: Vec<(usize, String)>,
    /// The first pattern of the schema itself (document 0) that Java
    /// refuses.
    java_pattern_error: Option<SchemaError>,
}

/// How deep subschemas may nest (the JSON parser already stops at 128
/// levels; this is a second guard).
const MAX_WALK_DEPTH: usize = 256;

const TYPE_NAMES: &[&str] = &[
    "null", "boolean", "object", "array", "number", "string", "integer",
];

impl Walker {
    fn schema(
        &mut self,
        index: usize,
        doc: &Doc,
        value: &Value,
        pointer: &str,
        depth: usize,
    ) -> Result<(), SchemaError> {
        let at = || format!("{}#{pointer}", doc.name);
        let map = match value {
            Value::Bool(_) => return Ok(()),
            Value::Object(map) => map,
            other => {
                return Err(error(format!(
                    "the schema at {} must be an object or a boolean, found {}",
                    at(),
                    describe(other)
                )));
            }
        };
        if depth > MAX_WALK_DEPTH {
            return Err(error(format!("the schema nests too deeply at {}", at())));
        }
        let wrong = |keyword: &str, expected: &str, found: &Value| {
            error(format!(
                "keyword {keyword:?} at {} must be {expected}, found {}",
                at(),
                describe(found)
            ))
        };
        let id_keyword = if doc.draft == Draft::D4 { "id" } else { "$id" };
        for (keyword, v) in map {
            if let Some(expected) = scalar_keyword_error(doc.draft, keyword, v) {
                return Err(wrong(keyword, expected, v));
            }
            let child = |segment: &str| format!("{pointer}/{}", escape_token(segment));
            // Patterns Java refuses: Confluent compiles every one with
            // java.util.regex while it loads the schema (see java_regex).
            // Noted for the schema itself, the first one only; references
            // were accepted on their own.
            let patterns: Vec<(&str, String)> = match (keyword.as_str(), v) {
                _ if index != 0 || self.java_pattern_error.is_some() => Vec::new(),
                ("pattern", Value::String(p)) => vec![(p.as_str(), child(keyword))],
                ("patternProperties", Value::Object(entries)) => entries
                    .keys()
                    .map(|p| {
                        (
                            p.as_str(),
                            format!("{}/{}", child(keyword), escape_token(p)),
                        )
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (p, at) in patterns {
                if let Some(reason) = java_regex::java_syntax_error(p) {
                    self.java_pattern_error = Some(error(format!(
                        "the pattern {p:?} at {}#{at} is not a regular expression Confluent accepts: \
                         Java's java.util.regex, which compiles it when the schema is loaded, \
                         refuses it ({reason}); correct the pattern (a character meant literally \
                         is escaped with \\)",
                        doc.name
                    )));
                    break;
                }
            }
            match keyword.as_str() {
                "$ref" => {
                    if !v.is_string() {
                        return Err(wrong(keyword, "a string", v));
                    }
                    self.refs.push((index, pointer.to_string()));
                }
                k if k == id_keyword => {
                    let Some(id) = v.as_str() else {
                        return Err(wrong(keyword, "a string", v));
                    };
                    if let Some(anchor) = id.strip_prefix('#') {
                        if !anchor.is_empty() {
                            self.anchors
                                .insert((index, anchor.to_string()), pointer.to_string());
                        }
                    } else {
                        let id = strip_empty_fragment(id);
                        let entry = (index, pointer.to_string());
                        self.ids.insert(join_uri(&doc.base, id), entry.clone());
                        self.ids.entry(id.to_string()).or_insert(entry);
                    }
                }
                "$anchor" | "$schema" | "$comment" | "$dynamicAnchor" => {
                    let Some(text) = v.as_str() else {
                        return Err(wrong(keyword, "a string", v));
                    };
                    if keyword == "$anchor" {
                        self.anchors
                            .insert((index, text.to_string()), pointer.to_string());
                    }
                }
                "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                    let Some(items) = v.as_array().filter(|items| !items.is_empty()) else {
                        return Err(wrong(keyword, "a non-empty array of schemas", v));
                    };
                    for (i, item) in items.iter().enumerate() {
                        let p = format!("{}/{i}", child(keyword));
                        self.schema(index, doc, item, &p, depth + 1)?;
                    }
                }
                "items" => match v {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            let p = format!("{}/{i}", child(keyword));
                            self.schema(index, doc, item, &p, depth + 1)?;
                        }
                    }
                    Value::Object(_) | Value::Bool(_) => {
                        self.schema(index, doc, v, &child(keyword), depth + 1)?;
                    }
                    _ => return Err(wrong(keyword, "a schema or an array of schemas", v)),
                },
                "additionalItems"
                | "additionalProperties"
                | "not"
                | "contains"
                | "propertyNames"
                | "if"
                | "then"
                | "else"
                | "unevaluatedItems"
                | "unevaluatedProperties" => {
                    if !matches!(v, Value::Object(_) | Value::Bool(_)) {
                        return Err(wrong(keyword, "a schema (an object or a boolean)", v));
                    }
                    self.schema(index, doc, v, &child(keyword), depth + 1)?;
                }
                "properties" | "patternProperties" | "definitions" | "$defs"
                | "dependentSchemas" => {
                    let Some(entries) = v.as_object() else {
                        return Err(wrong(keyword, "an object of schemas", v));
                    };
                    for (name, item) in entries {
                        let p = format!("{}/{}", child(keyword), escape_token(name));
                        self.schema(index, doc, item, &p, depth + 1)?;
                    }
                }
                "dependentRequired" => {
                    let ok = v.as_object().is_some_and(|entries| {
                        entries.values().all(|deps| {
                            deps.as_array()
                                .is_some_and(|names| names.iter().all(Value::is_string))
                        })
                    });
                    if !ok {
                        return Err(wrong(keyword, "an object of string arrays", v));
                    }
                }
                "dependencies" => {
                    let Some(entries) = v.as_object() else {
                        return Err(wrong(keyword, "an object", v));
                    };
                    for (name, item) in entries {
                        match item {
                            Value::Array(names) if names.iter().all(Value::is_string) => {}
                            Value::Object(_) | Value::Bool(_) => {
                                let p = format!("{}/{}", child(keyword), escape_token(name));
                                self.schema(index, doc, item, &p, depth + 1)?;
                            }
                            _ => {
                                return Err(wrong(
                                    keyword,
                                    "an object of string arrays or schemas",
                                    v,
                                ));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// What a keyword whose value holds no subschema should have been, when it
/// is not that.
fn scalar_keyword_error(draft: Draft, keyword: &str, v: &Value) -> Option<&'static str> {
    let (ok, expected) = match keyword {
        "type" => (
            match v {
                Value::String(s) => TYPE_NAMES.contains(&s.as_str()),
                Value::Array(items) => {
                    !items.is_empty()
                        && items
                            .iter()
                            .all(|t| t.as_str().is_some_and(|s| TYPE_NAMES.contains(&s)))
                }
                _ => false,
            },
            "a type name (null, boolean, object, array, number, string, integer) or a non-empty array of them",
        ),
        "enum" => (v.is_array(), "an array"),
        "required" => (
            v.as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            "an array of strings",
        ),
        "maxLength" | "minLength" | "maxItems" | "minItems" | "maxProperties" | "minProperties"
        | "maxContains" | "minContains" => {
            (non_negative_integer(v).is_some(), "a non-negative integer")
        }
        "maximum" | "minimum" => (v.is_number(), "a number"),
        "exclusiveMaximum" | "exclusiveMinimum" if draft == Draft::D4 => {
            (v.is_boolean(), "a boolean in draft-04")
        }
        "exclusiveMaximum" | "exclusiveMinimum" => (v.is_number(), "a number"),
        "multipleOf" => (
            v.as_f64().is_some_and(|m| m > 0.0),
            "a number greater than 0",
        ),
        "pattern" => (v.is_string(), "a string"),
        "uniqueItems" => (v.is_boolean(), "a boolean"),
        _ => return None,
    };
    (!ok).then_some(expected)
}

/// A non-negative integer keyword value (`5` or `5.0`).
fn non_negative_integer(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let f = value.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}
