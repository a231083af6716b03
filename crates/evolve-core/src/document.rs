//! Row documents: PostgreSQL's `to_jsonb` computed outside the server.
//!
//! The pipeline's interface serves one JSON document per upstream row, defined
//! as what PostgreSQL computes for
//!
//! ```sql
//! coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb)
//! ```
//!
//! over the table's row `t`. Rows arrive from logical replication (pgoutput)
//! as the text output of each column, so this module recomputes that document
//! from the text values and a little type metadata ([`TypeKind`], which
//! [`TypeCatalog`] derives from the rows of `pg_type` and `pg_attribute` the
//! caller reads), without asking the server. The result is
//! written as canonical bytes: jsonb's key order (by length first, then
//! bytewise; of duplicate keys the last wins), no whitespace at all
//! (`{"a":1,"bb":[1,2]}`, where the server's jsonb text output would say
//! `{"a": 1, "bb": [1, 2]}`), numbers as `numeric_out` prints them. Identical
//! content therefore always gives identical bytes.
//!
//! # The rules (PostgreSQL 15's `datum_to_jsonb`, checked against a server)
//!
//! | [`TypeKind`] | text output | document |
//! |---|---|---|
//! | `Bool` | `t` / `f` | `true` / `false` |
//! | `Integer`, `Numeric`, `Float` | `1.50`, `1e+300`, `-0`, `NaN` | a number re-read by `numeric_in` and printed by `numeric_out`: `1.50`, `1000…0` (301 digits), `0`; output containing `n` or `N` (`NaN`, `Infinity`, `-Infinity`) becomes a string |
//! | `Date` | `2024-01-02`, `0044-03-15 BC`, `infinity` | the same string |
//! | `Timestamp` | `2024-01-02 03:04:05.5` | `"2024-01-02T03:04:05.5"` (`" BC"` stays at the end) |
//! | `TimestampTz` | `2024-01-02 03:04:05+00` | `"2024-01-02T03:04:05+00:00"` (an offset of whole hours gains `:00`) |
//! | `Json`, `Jsonb` | any JSON text | parsed as jsonb parses it: keys reordered, duplicate keys resolved (last wins), numbers through `numeric_in` (`1.0e2` → `100`, `1.500e1` → `15.00`, `-0.0` → `0.0`), `\u` escapes decoded (`\u0000` is an error, as in the server) |
//! | `Array` | `{1,2,NULL}`, `[0:1]={a,b}`, `{{1,2},{3,4}}` | nested JSON arrays, lower bounds dropped, `NULL` → `null` (kept: nulls are stripped only from objects) |
//! | `Composite` | `(1,"a b",)` | an object of the fields in jsonb key order; an empty unquoted field is SQL NULL and is stripped, `""` is the empty string |
//! | `Text` | anything | a JSON string, escaped as `escape_json` does: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u001f`; `/`, DEL and non-ASCII are not escaped |
//!
//! Then every object field whose value is JSON `null` is removed, at every
//! depth (`jsonb_strip_nulls`): SQL NULL columns and composite fields, `null`
//! members of json/jsonb values, and a json/jsonb column whose whole value is
//! `null`. An object that becomes empty stays as `{}`; a row whose columns are
//! all NULL is `{}`.
//!
//! # What the caller must guarantee
//!
//! - The values are the types' text output functions, from a session with
//!   `DateStyle = ISO` and `TimeZone = UTC` (other time zones work too: the
//!   offset is taken from the text), the default `extra_float_digits` (so the
//!   float text is the shortest exact one, as the server's own `to_jsonb`
//!   sees it), and a UTF8 database.
//! - Domains are resolved to their base type's kind (PostgreSQL's
//!   `getBaseType`), at every level: a domain column, a domain array element,
//!   a domain composite field.
//! - Scalar kinds are chosen by type OID, not by `typcategory`: only the
//!   twelve built-in types of [`TypeKind::from_builtin_oid`] are special; `oid`,
//!   `money`, `point` and every other type are [`TypeKind::Text`].
//! - Arrays are the types PostgreSQL's `get_element_type` calls arrays
//!   (`typelem <> 0` and `typsubscript = 'array_subscript_handler'`), which
//!   includes `int2vector` and `oidvector` (their `1 2 3` output is accepted);
//!   `delimiter` is the element type's `typdelim` (`;` for `box`, else `,`).
//! - A composite's `fields` are all its non-dropped attributes in `attnum`
//!   order.
//!
//! Not reproduced: user-defined types with a cast to `json` (PostgreSQL calls
//! the cast; here such a type is whatever kind the caller gives it).
//!
//! # Performance
//!
//! Everything is written straight into the caller's `Vec<u8>`. Scalars,
//! arrays and composites need no allocation beyond a field list per composite
//! value and a copy of array elements that had backslash escapes; json/jsonb
//! values are parsed into a small flat tree first (their keys must be
//! sorted). Neither parsing nor writing recurses on the value's own nesting,
//! so deeply nested json cannot overflow the stack; recursion follows only
//! the type ([`MAX_TYPE_DEPTH`]). [`RowEncoder`] sorts the keys of a row type
//! once; [`encode_row`] does it on every call.

mod catalog;
mod datetime;
mod escape;
mod json;
mod number;
mod pgtext;

use std::borrow::Cow;
use std::cmp::Ordering;

pub use catalog::{ATTRIBUTES_QUERY, PgType, TYPES_QUERY, TypeCatalog};

/// How deeply [`TypeKind`]s may nest (arrays and composites inside each
/// other). Deeper types are refused with [`DocumentError::TypeTooDeep`]
/// rather than risking the stack.
pub const MAX_TYPE_DEPTH: usize = 100;

/// What the encoder must know about a column's type, built from
/// `pg_type`/`pg_attribute` by [`TypeCatalog`] (see the module
/// documentation for the rules).
///
/// Domains are not a kind of their own: the caller resolves a domain to its
/// base type, because `to_jsonb` does (`getBaseType`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeKind {
    /// `bool`: `t`/`f` become `true`/`false`.
    Bool,
    /// `int2`, `int4`, `int8` (not `oid`, which is [`TypeKind::Text`]): a
    /// JSON number.
    Integer,
    /// `numeric`: a JSON number with its scale kept (`1.50`), `NaN` and
    /// `±Infinity` as strings.
    Numeric,
    /// `float4`, `float8`: a JSON number in plain decimal (`1e+300` is
    /// written with 301 digits), `NaN` and `±Infinity` as strings.
    Float,
    /// `json`: parsed and written as jsonb would store it.
    Json,
    /// `jsonb`: as [`TypeKind::Json`] (the text is already canonical apart
    /// from whitespace).
    Jsonb,
    /// `date`: a string, as the ISO text output.
    Date,
    /// `timestamp`: a string with `T` between date and time.
    Timestamp,
    /// `timestamptz`: a string with `T` and a `+HH:MM` offset.
    TimestampTz,
    /// An array type, of any number of dimensions.
    Array {
        /// The element type's kind (domains resolved).
        element: Box<TypeKind>,
        /// The element type's `typdelim`: `b','`, except `b';'` for `box`.
        delimiter: u8,
    },
    /// A composite type: an object of its fields.
    Composite {
        /// Every non-dropped attribute, in `attnum` order, with its kind.
        fields: Vec<(String, TypeKind)>,
    },
    /// Everything else (`text`, `varchar`, `bpchar`, `uuid`, `time`,
    /// `timetz`, `interval`, enums, ranges, `bytea`, `money`, `inet`, `oid`,
    /// geometric types, ...): a JSON string of the text output.
    Text,
}

impl TypeKind {
    /// The kind of a built-in scalar type, by OID: the twelve types
    /// `to_jsonb` treats specially, and [`TypeKind::Text`] for any other OID.
    /// Arrays, composites and domains are the caller's to recognise.
    pub fn from_builtin_oid(oid: u32) -> TypeKind {
        match oid {
            16 => TypeKind::Bool,
            20 | 21 | 23 => TypeKind::Integer,
            1700 => TypeKind::Numeric,
            700 | 701 => TypeKind::Float,
            114 => TypeKind::Json,
            3802 => TypeKind::Jsonb,
            1082 => TypeKind::Date,
            1114 => TypeKind::Timestamp,
            1184 => TypeKind::TimestampTz,
            _ => TypeKind::Text,
        }
    }
}

/// One column of the row: its name (the document's key) and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The attribute name, used as the key as is.
    pub name: String,
    /// How its text output becomes JSON.
    pub kind: TypeKind,
}

impl Column {
    /// A column named `name` of kind `kind`.
    pub fn new(name: impl Into<String>, kind: TypeKind) -> Column {
        Column {
            name: name.into(),
            kind,
        }
    }
}

/// A row (or key) that could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The number of values differs from the number of columns.
    #[error("{values} values for {columns} columns")]
    ValueCount {
        /// How many columns were given.
        columns: usize,
        /// How many values were given.
        values: usize,
    },
    /// A column's type nests arrays and composites deeper than
    /// [`MAX_TYPE_DEPTH`].
    #[error("column \"{column}\": its type nests deeper than {MAX_TYPE_DEPTH} levels")]
    TypeTooDeep {
        /// The column's name.
        column: String,
    },
    /// A column's value is not what its type's output function produces, or
    /// is something PostgreSQL's own `to_jsonb` refuses too. The message
    /// names the column and the problem, never the value (messages reach
    /// logs and status, where row values must not appear); the value is in
    /// its field for a caller that may show it.
    #[error("column \"{column}\": {problem}")]
    Value {
        /// The column's name.
        column: String,
        /// The value, lossily decoded and cut to about 60 characters.
        value: String,
        /// What was wrong with it.
        problem: ValueProblem,
    },
}

/// What was wrong with a value, in [`DocumentError::Value`]. Byte offsets
/// count from the start of the innermost value being read (an array element
/// or a composite field is read on its own).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueProblem {
    /// Not UTF-8; the pipeline needs a UTF8 database.
    #[error("not valid UTF-8 (the database encoding must be UTF8)")]
    InvalidUtf8,
    /// A NUL byte, which no PostgreSQL text output contains.
    #[error("contains a NUL byte")]
    NulByte,
    /// A `bool` value other than `t` or `f`.
    #[error("not a boolean output (t or f)")]
    Bool,
    /// Not a number `numeric_in` accepts.
    #[error("not a valid number")]
    Number,
    /// A number outside `numeric`'s range (at most 131072 digits before the
    /// point and 16383 after it), as the server says for the same value.
    #[error("value overflows numeric format")]
    NumericOverflow,
    /// A date or timestamp not in ISO format.
    #[error("not an ISO {0} (is the session's DateStyle ISO?)")]
    DateTime(&'static str),
    /// Not JSON as PostgreSQL's parser reads it, or JSON jsonb cannot hold.
    #[error("invalid json at byte {offset}: {reason}")]
    Json {
        /// Where.
        offset: usize,
        /// Why.
        reason: &'static str,
    },
    /// Not an array literal as `array_in` reads it.
    #[error("malformed array literal at byte {offset}: {reason}")]
    Array {
        /// Where.
        offset: usize,
        /// Why.
        reason: &'static str,
    },
    /// Not a composite literal as `record_in` reads it, or one with a
    /// different number of fields than the type.
    #[error("malformed record literal at byte {offset}: {reason}")]
    Composite {
        /// Where.
        offset: usize,
        /// Why.
        reason: &'static str,
    },
}

/// Encodes one row into `out` (appended; nothing is cleared): the document
/// `coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb)` PostgreSQL computes,
/// in canonical compact form. `values[i]` is the text output of `columns[i]`
/// as pgoutput delivers it, `None` for SQL NULL.
///
/// On error `out` is left as it was. This sorts the column names on every
/// call; [`RowEncoder`] sorts them once.
pub fn encode_row(
    columns: &[Column],
    values: &[Option<&[u8]>],
    out: &mut Vec<u8>,
) -> Result<(), DocumentError> {
    let plan = compile_columns(columns)?;
    encode_with_plan(columns, &plan, values, out)
}

/// Encodes a row's primary key, `{"id":1}`, given only the key columns and
/// their values: the same encoding as [`encode_row`] (an alias of it), so
/// equal keys always give equal bytes.
pub fn encode_key(
    columns: &[Column],
    values: &[Option<&[u8]>],
    out: &mut Vec<u8>,
) -> Result<(), DocumentError> {
    encode_row(columns, values, out)
}

/// A row type prepared once for many rows: the key order of the row and of
/// every composite inside it is computed up front.
#[derive(Clone, Debug)]
pub struct RowEncoder {
    columns: Vec<Column>,
    plan: ObjectPlan,
}

impl RowEncoder {
    /// Prepares `columns`; refuses types nested deeper than
    /// [`MAX_TYPE_DEPTH`].
    pub fn new(columns: Vec<Column>) -> Result<RowEncoder, DocumentError> {
        let plan = compile_columns(&columns)?;
        Ok(RowEncoder { columns, plan })
    }

    /// The columns, in the order values are expected.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Encodes one row into `out` exactly as [`encode_row`] does.
    pub fn encode(&self, values: &[Option<&[u8]>], out: &mut Vec<u8>) -> Result<(), DocumentError> {
        encode_with_plan(&self.columns, &self.plan, values, out)
    }
}

// ------------------------------------------------------------------ plans

/// The precomputed key order of an object (a row or a composite type).
#[derive(Clone, Debug)]
struct ObjectPlan {
    /// Field indices in jsonb key order, of equal names only the last.
    order: Vec<usize>,
    /// One plan per field, in field order.
    fields: Vec<Plan>,
}

#[derive(Clone, Debug)]
enum Plan {
    Leaf,
    Array(Box<Plan>),
    Composite(ObjectPlan),
}

/// jsonb's key order: shorter first, then bytewise.
pub(crate) fn jsonb_key_cmp(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Field indices sorted into jsonb key order, keeping only the last of equal
/// names (jsonb's `uniqueifyJsonbObject`).
fn key_order<'a>(names: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let names: Vec<&[u8]> = names.map(str::as_bytes).collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| jsonb_key_cmp(names[a], names[b]).then(a.cmp(&b)));
    let mut kept: Vec<usize> = Vec::with_capacity(order.len());
    for i in order {
        match kept.last_mut() {
            Some(last) if names[*last] == names[i] => *last = i,
            _ => kept.push(i),
        }
    }
    kept
}

fn compile_columns(columns: &[Column]) -> Result<ObjectPlan, DocumentError> {
    let mut fields = Vec::with_capacity(columns.len());
    for column in columns {
        match compile(&column.kind, 1) {
            Some(plan) => fields.push(plan),
            None => {
                return Err(DocumentError::TypeTooDeep {
                    column: column.name.clone(),
                });
            }
        }
    }
    Ok(ObjectPlan {
        order: key_order(columns.iter().map(|c| c.name.as_str())),
        fields,
    })
}

fn compile(kind: &TypeKind, depth: usize) -> Option<Plan> {
    if depth > MAX_TYPE_DEPTH {
        return None;
    }
    Some(match kind {
        TypeKind::Array { element, .. } => Plan::Array(Box::new(compile(element, depth + 1)?)),
        TypeKind::Composite { fields } => {
            let mut plans = Vec::with_capacity(fields.len());
            for (_, kind) in fields {
                plans.push(compile(kind, depth + 1)?);
            }
            Plan::Composite(ObjectPlan {
                order: key_order(fields.iter().map(|(name, _)| name.as_str())),
                fields: plans,
            })
        }
        _ => Plan::Leaf,
    })
}

// --------------------------------------------------------------- encoding

/// What a value turned into: JSON `null` is removed from objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Emitted {
    Value,
    Null,
}

fn encode_with_plan(
    columns: &[Column],
    plan: &ObjectPlan,
    values: &[Option<&[u8]>],
    out: &mut Vec<u8>,
) -> Result<(), DocumentError> {
    if values.len() != columns.len() {
        return Err(DocumentError::ValueCount {
            columns: columns.len(),
            values: values.len(),
        });
    }
    // Room for the whole object at once: each member's name, text and
    // punctuation (escapes and timestamps' zones may add a little).
    let estimate = values
        .iter()
        .zip(columns)
        .filter_map(|(v, c)| v.map(|v| v.len() + c.name.len() + 6))
        .sum::<usize>();
    out.reserve(estimate + 2);
    let start = out.len();
    out.push(b'{');
    let mut first = true;
    for &i in &plan.order {
        let Some(text) = values[i] else { continue };
        let column = &columns[i];
        let mark = out.len();
        if !first {
            out.push(b',');
        }
        escape::write_json_string(column.name.as_bytes(), out);
        out.push(b':');
        match encode_value(&column.kind, &plan.fields[i], text, out) {
            Ok(Emitted::Value) => first = false,
            Ok(Emitted::Null) => out.truncate(mark),
            Err(problem) => {
                out.truncate(start);
                return Err(DocumentError::Value {
                    column: column.name.clone(),
                    value: truncate_for_message(text),
                    problem,
                });
            }
        }
    }
    out.push(b'}');
    Ok(())
}

/// Writes the JSON for one non-NULL value of kind `kind`.
fn encode_value(
    kind: &TypeKind,
    plan: &Plan,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<Emitted, ValueProblem> {
    match (kind, plan) {
        (TypeKind::Bool, _) => match text {
            b"t" => out.extend_from_slice(b"true"),
            b"f" => out.extend_from_slice(b"false"),
            _ => return Err(ValueProblem::Bool),
        },
        (TypeKind::Integer | TypeKind::Numeric | TypeKind::Float, _) => {
            // datum_to_jsonb: "Invalid numeric output will always have an 'N'
            // or 'n' in it": NaN, Infinity, -Infinity become strings.
            if text.iter().any(|&b| b == b'n' || b == b'N') {
                write_text(text, out)?;
            } else {
                number::write_numeric(text, out)?;
            }
        }
        (TypeKind::Json | TypeKind::Jsonb, _) => return json::encode_json(text, out),
        (TypeKind::Date, _) => datetime::write_date(text, out)?,
        (TypeKind::Timestamp, _) => datetime::write_timestamp(text, false, out)?,
        (TypeKind::TimestampTz, _) => datetime::write_timestamp(text, true, out)?,
        (TypeKind::Array { element, delimiter }, Plan::Array(element_plan)) => {
            pgtext::encode_array(
                text,
                *delimiter,
                out,
                |element_text, out| match element_text {
                    None => {
                        out.extend_from_slice(b"null");
                        Ok(())
                    }
                    Some(t) => encode_value(element, element_plan, t, out).map(|_| ()),
                },
            )?;
        }
        (TypeKind::Composite { fields }, Plan::Composite(object)) => {
            let values = pgtext::parse_record(text, fields.len())?;
            write_object(fields, object, &values, out)?;
        }
        // Text, or a plan that does not match the kind (impossible: plans are
        // compiled from the kinds they are used with).
        _ => write_text(text, out)?,
    }
    Ok(Emitted::Value)
}

fn write_object(
    fields: &[(String, TypeKind)],
    plan: &ObjectPlan,
    values: &[Option<Cow<'_, [u8]>>],
    out: &mut Vec<u8>,
) -> Result<(), ValueProblem> {
    out.push(b'{');
    let mut first = true;
    for &i in &plan.order {
        let Some(text) = &values[i] else { continue };
        let (name, kind) = &fields[i];
        let mark = out.len();
        if !first {
            out.push(b',');
        }
        escape::write_json_string(name.as_bytes(), out);
        out.push(b':');
        match encode_value(kind, &plan.fields[i], text, out)? {
            Emitted::Value => first = false,
            Emitted::Null => out.truncate(mark),
        }
    }
    out.push(b'}');
    Ok(())
}

/// A text output as a JSON string: UTF-8 checked, escaped as `escape_json`.
fn write_text(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueProblem> {
    check_text(text)?;
    escape::write_json_string(text, out);
    Ok(())
}

fn check_text(text: &[u8]) -> Result<(), ValueProblem> {
    if std::str::from_utf8(text).is_err() {
        return Err(ValueProblem::InvalidUtf8);
    }
    if text.contains(&0) {
        return Err(ValueProblem::NulByte);
    }
    Ok(())
}

/// The value for an error message: lossy UTF-8, at most 60 characters.
fn truncate_for_message(text: &[u8]) -> String {
    const MAX: usize = 60;
    let lossy = String::from_utf8_lossy(text);
    let mut chars = lossy.chars();
    let mut short: String = chars.by_ref().take(MAX).collect();
    if chars.next().is_some() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests;
