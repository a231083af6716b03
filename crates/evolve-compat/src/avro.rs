//! Avro: parsing, Parsing Canonical Form, and "can `reader` read what
//! `writer` wrote?" by the specification's schema resolution rules.
//!
//! Parsing is apache-avro's; the compatibility walk is our own (see
//! [`check`]), because apache-avro's `schema_compatibility` stops at the
//! first error, has no locations and ignores reader aliases on named types.
//! The rules are those of Apache Avro Java's `SchemaCompatibility`, which
//! Confluent Schema Registry calls with reader = new, writer = old for
//! BACKWARD:
//!
//! - promotions int→long→float→double (also int→float, int→double,
//!   long→double) and string↔bytes;
//! - named types (record, enum, fixed) match when their unqualified names
//!   are equal or a reader alias equals the writer's full name; fixed sizes
//!   must be equal;
//! - every reader field is found in the writer by its name or one of its
//!   aliases, or has a default; writer-only fields are skipped;
//! - every writer enum symbol is a reader symbol, unless the reader enum has
//!   a default symbol;
//! - every branch of a writer union is readable: by the reader itself, or by
//!   some branch of a reader union;
//! - logical types are judged by their underlying type (a `decimal` over
//!   `bytes` reads `bytes`), as Java does;
//! - each pair of (reader, writer) record definitions is walked once; a pair
//!   met again while it is being walked (a recursive type) is assumed
//!   compatible, as Java does.
//!
//! Every incompatibility is reported, each with a JSON-pointer-like location
//! in the reader schema as Java writes it: `/` for the root, then `fields`,
//! a field's position, `type`, `items`, `values`, `name`, `size`, `symbols`.
//! Union branches follow Java too: where a writer union branch has no
//! reader branch that can read it, the location ends with the index of the
//! *writer's* branch (`/fields/1/type/1` for writer `["int","string"]` read
//! as `["int"]`). When a reader branch has the right kind and name but
//! differs deeper down, its own incompatibilities follow, located under the
//! *reader's* branch index.
//!
//! The kinds are Java's `SchemaIncompatibilityType` names:
//! `NAME_MISMATCH`, `FIXED_SIZE_MISMATCH`, `MISSING_ENUM_SYMBOLS`,
//! `READER_FIELD_MISSING_DEFAULT_VALUE`, `TYPE_MISMATCH`,
//! `MISSING_UNION_BRANCH`; plus `NESTING_TOO_DEEP` for a chain of more than
//! [`MAX_DEPTH`] nested types, which is not walked further (no schema a
//! person writes comes near it). At most [`MAX_INCOMPATIBILITIES`] are
//! listed.

mod canonical;
mod check;
mod normalize;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::Name;

use crate::{Incompatibility, Reference, SchemaError, SchemaType};

/// How deep the compatibility walk nests (types within types, named types
/// followed by reference included) before it gives up on a branch with a
/// `NESTING_TOO_DEEP` incompatibility instead of overflowing the stack.
pub const MAX_DEPTH: usize = 400;

/// The most incompatibilities [`check`] lists; only pathological schemas
/// (a type reached by exponentially many paths) come near it.
pub const MAX_INCOMPATIBILITIES: usize = 1000;

/// A parsed Avro schema: the schema itself and the named types of the
/// schemas it references, by which its `Ref`s are resolved.
#[derive(Clone, Debug)]
pub struct AvroSchema {
    root: Schema,
    references: Vec<Schema>,
}

/// Parses a schema. `references` are named types defined in other schemas
/// (Confluent `references`): each one's `schema` is the Avro text of a
/// record, enum or fixed, parsed first so that the main schema may use it
/// by name. References may use each other, in any order; the same text
/// given twice counts once.
///
/// Never panics: apache-avro 0.22 has a few panicking paths for malformed
/// schemas (its canonical-form code, reached when a field default is
/// invalid), which are caught and reported as a [`SchemaError`].
pub fn parse(text: &str, references: &[Reference]) -> Result<AvroSchema, SchemaError> {
    let reference_texts = reference_texts(references)?;
    let parsed = guard(|| {
        if reference_texts.is_empty() {
            Schema::parse_str(text).map(|root| (root, Vec::new()))
        } else {
            Schema::parse_str_with_list(text, &reference_texts)
        }
    })?;
    let (root, references) = parsed.map_err(|e| {
        error(crate::explain_nesting(
            with_causes(&e),
            "define the inner named types in schemas it references instead",
        ))
    })?;
    Ok(AvroSchema { root, references })
}

/// An error's message followed by its causes' (apache-avro's "Failed to
/// parse schema from JSON" says where only in its cause: `EOF while
/// parsing a value at line 1 column 0`).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

impl AvroSchema {
    /// The schema itself. The named types it takes from its references
    /// appear in it as `Schema::Ref`s.
    pub fn root(&self) -> &Schema {
        &self.root
    }

    /// The referenced schemas, parsed, in the order [`parse`] was given
    /// them (exact duplicates left out); a type one of them takes from
    /// another is a `Schema::Ref` in it.
    pub fn references(&self) -> &[Schema] {
        &self.references
    }
}

/// The Avro Parsing Canonical Form of the schema (specification, "Parsing
/// Canonical Form for Schemas"): full names, only the attributes that
/// matter for reading data (`name`, `type`, `fields`, `symbols`, `items`,
/// `values`, `size`), in that order, logical types reduced to their
/// underlying type, no whitespace. Named types from references appear by
/// name. Deterministic: equal forms mean the same binary encoding.
///
/// It drops `default`, `aliases`, `doc`, `order` and logical types, all of
/// which matter to compatibility: two schemas with the same form may still
/// differ in what they can read.
pub fn canonical_form(schema: &AvroSchema) -> String {
    canonical::canonical_form(&schema.root, &named_types(schema))
}

/// The normalized text of an Avro schema `text` (with the `references`
/// it was parsed with): the same text for every way of writing the same
/// schema, as Avro Java's `Schema.toString()` sees them (full names,
/// `{"type":"long"}` as `"long"`, one key order), keeping what that keeps
/// (docs, defaults, aliases, orders, logical types, custom properties).
/// Confluent compares Avro schemas this way. `None` when `text` is not
/// JSON. See the `normalize` module for the exact rules.
pub fn normalized_form(text: &str, references: &[Reference]) -> Option<String> {
    normalize::normalized_form(text, references)
}

/// Every reason `reader` cannot read data written with `writer`, by the
/// Avro specification's schema resolution; empty means compatible.
pub fn check(reader: &AvroSchema, writer: &AvroSchema) -> Vec<Incompatibility> {
    let reader_names = named_types(reader);
    let writer_names = named_types(writer);
    check::check(&reader.root, &reader_names, &writer.root, &writer_names)
}

/// The named types a schema can refer to, by full name and by alias.
type NamedTypes<'a> = HashMap<&'a Name, &'a Schema>;

fn named_types(schema: &AvroSchema) -> NamedTypes<'_> {
    let mut names = HashMap::new();
    let mut aliases = Vec::new();
    for s in std::iter::once(&schema.root).chain(&schema.references) {
        collect_named(s, &mut names, &mut aliases);
    }
    // A definition's own name wins over another type's alias.
    for (alias, s) in aliases {
        names.entry(alias).or_insert(s);
    }
    names
}

fn collect_named<'a>(
    schema: &'a Schema,
    names: &mut NamedTypes<'a>,
    aliases: &mut Vec<(&'a Name, &'a Schema)>,
) {
    use apache_avro::schema::{Alias, DecimalSchema, InnerDecimalSchema, UuidSchema};
    use std::borrow::Cow;

    let mut define = |name: &'a Name, type_aliases: &'a Option<Vec<Alias>>| {
        names.entry(name).or_insert(schema);
        for alias in type_aliases.iter().flatten() {
            // Aliases are stored fully qualified, so this always borrows.
            if let Cow::Borrowed(alias) = alias.fully_qualified_name(None) {
                aliases.push((alias, schema));
            }
        }
    };
    match schema {
        Schema::Record(r) => {
            define(&r.name, &r.aliases);
            for field in &r.fields {
                collect_named(&field.schema, names, aliases);
            }
        }
        Schema::Enum(e) => define(&e.name, &e.aliases),
        Schema::Fixed(f)
        | Schema::Duration(f)
        | Schema::Uuid(UuidSchema::Fixed(f))
        | Schema::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Fixed(f),
            ..
        }) => define(&f.name, &f.aliases),
        Schema::Array(a) => collect_named(&a.items, names, aliases),
        Schema::Map(m) => collect_named(&m.types, names, aliases),
        Schema::Union(u) => {
            for variant in u.variants() {
                collect_named(variant, names, aliases);
            }
        }
        _ => {}
    }
}

/// Checks each reference up front, so that apache-avro's list parser only
/// ever sees named-type definitions (it keys them by name and would panic
/// on, or silently mis-key, anything else), and drops exact duplicates.
fn reference_texts(references: &[Reference]) -> Result<Vec<&str>, SchemaError> {
    let mut texts = Vec::with_capacity(references.len());
    let mut seen: HashMap<Name, serde_json::Value> = HashMap::new();
    for reference in references {
        let refname = &reference.name;
        let value: serde_json::Value = serde_json::from_str(&reference.schema)
            .map_err(|e| error(format!("reference \"{refname}\" is not valid JSON: {e}")))?;
        let not_named = || {
            error(format!(
                "reference \"{refname}\" is not a named Avro type (a record, enum or fixed \
                 with a name)"
            ))
        };
        let object = value.as_object().ok_or_else(not_named)?;
        match object.get("type").and_then(|t| t.as_str()) {
            Some("record" | "enum" | "fixed") => {}
            _ => return Err(not_named()),
        }
        let name = object
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or_else(not_named)?;
        let namespace = object.get("namespace").and_then(|n| n.as_str());
        let name = Name::new_with_enclosing_namespace(name, namespace)
            .map_err(|e| error(format!("reference \"{refname}\": {e}")))?;
        if let Some(previous) = seen.get(&name) {
            if *previous == value {
                continue;
            }
            return Err(error(format!(
                "references define the type \"{}\" twice, differently",
                name.fullname(None)
            )));
        }
        seen.insert(name, value);
        texts.push(reference.schema.as_str());
    }
    Ok(texts)
}

/// Runs apache-avro's parser, turning a panic inside it into an error.
fn guard<T>(parse: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, SchemaError> {
    std::panic::catch_unwind(parse)
        .map_err(|_| error("the schema is malformed (the Avro parser failed on it)".to_owned()))
}

fn error(message: String) -> SchemaError {
    SchemaError {
        schema_type: SchemaType::Avro,
        message,
        missing_import: None,
    }
}
