//! evolve's schema compatibility engine: Avro, Protobuf and JSON Schema,
//! with Confluent Schema Registry's seven modes.
//!
//! Pure: no files, sockets, clock or environment. Schemas come in as text
//! (with the texts of the schemas they reference) and verdicts go out as
//! lists of [`Incompatibility`], every one of them, each with a kind, a
//! location and a sentence; an empty list means compatible.
//!
//! Each format implements one question, "can `reader` read everything
//! written with `writer`?" ([`avro::check`], [`protobuf::check`],
//! [`json::check`]); [`check`] turns it into the modes: BACKWARD asks it
//! with reader = the new schema and writer = the old one, FORWARD the other
//! way round, FULL both, and the TRANSITIVE variants against every older
//! version, newest first, instead of only the latest.

pub mod avro;
mod engine;
pub mod json;
pub mod protobuf;

pub use engine::{Schema, can_read, check};

use serde::Serialize;

/// A schema format, as named in the registry's `schemaType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    /// What a schema of this type is called in messages: "Avro schema",
    /// "Protobuf schema", "JSON Schema".
    pub fn noun(self) -> &'static str {
        match self {
            SchemaType::Avro => "Avro schema",
            SchemaType::Protobuf => "Protobuf schema",
            SchemaType::Json => "JSON Schema",
        }
    }
}

/// One way in which a reader cannot read what a writer wrote.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Incompatibility {
    /// A stable name in Confluent's vocabulary where it has one, e.g.
    /// `READER_FIELD_MISSING_DEFAULT_VALUE`, `FIELD_KIND_CHANGED`,
    /// `PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL`.
    pub kind: String,
    /// Where: a JSON pointer into the schema for Avro (`/fields/1/type`)
    /// and JSON Schema (`#/properties/foo`), `#/Message/2` (message, field
    /// number) for Protobuf.
    pub path: String,
    /// One sentence a person can act on.
    pub message: String,
}

/// A schema that another one references by name (Confluent's
/// `references`): an Avro named type defined elsewhere, a Protobuf import,
/// a JSON Schema `$ref` target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The name it is referenced by: the Avro full name, the Protobuf
    /// import path (`other.proto`), the JSON Schema `$ref` URI.
    pub name: String,
    /// Its text.
    pub schema: String,
}

/// A schema that cannot be used: it does not parse, or is not a valid
/// schema of its type. One line, saying what and where:
/// `invalid JSON Schema: ...`, `invalid Avro schema: ...`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {}: {message}", schema_type.noun())]
pub struct SchemaError {
    pub schema_type: SchemaType,
    pub message: String,
    /// The import that was not found (Protobuf), for callers to say how to
    /// pass it as a reference.
    pub missing_import: Option<String>,
}

/// How deeply JSON arrays and objects may nest in a schema text: serde_json's
/// limit, which keeps its recursive parser off the end of the stack.
pub const MAX_JSON_NESTING: usize = 128;

/// serde_json's "recursion limit exceeded at line 1 column N", said in
/// words with the limit and `way_out` (the same text otherwise).
pub(crate) fn explain_nesting(message: String, way_out: &str) -> String {
    const SERDE: &str = "recursion limit exceeded";
    if !message.contains(SERDE) {
        return message;
    }
    format!(
        "{}; {way_out}",
        message.replace(
            SERDE,
            &format!(
                "the schema is nested deeper than {MAX_JSON_NESTING} levels of JSON objects and arrays, the parser's limit,"
            )
        )
    )
}

/// Confluent Schema Registry's compatibility levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mode {
    None,
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::None,
        Mode::Backward,
        Mode::BackwardTransitive,
        Mode::Forward,
        Mode::ForwardTransitive,
        Mode::Full,
        Mode::FullTransitive,
    ];

    /// The name Confluent uses (`BACKWARD_TRANSITIVE`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::None => "NONE",
            Mode::Backward => "BACKWARD",
            Mode::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Mode::Forward => "FORWARD",
            Mode::ForwardTransitive => "FORWARD_TRANSITIVE",
            Mode::Full => "FULL",
            Mode::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    fn backward(self) -> bool {
        matches!(
            self,
            Mode::Backward | Mode::BackwardTransitive | Mode::Full | Mode::FullTransitive
        )
    }

    fn forward(self) -> bool {
        matches!(
            self,
            Mode::Forward | Mode::ForwardTransitive | Mode::Full | Mode::FullTransitive
        )
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Mode::BackwardTransitive | Mode::ForwardTransitive | Mode::FullTransitive
        )
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    /// Case-insensitive; `-` and `_` alike (`full-transitive`).
    fn from_str(s: &str) -> Result<Mode, String> {
        let wanted = s.trim().to_ascii_uppercase().replace('-', "_");
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == wanted)
            .ok_or_else(|| {
                format!(
                    "unknown compatibility mode {s:?}; use one of {}",
                    Mode::ALL.map(Mode::as_str).join(", ")
                )
            })
    }
}

/// Which way a check ran: BACKWARD (the new schema reads data written with
/// the old one) or FORWARD (the old schema reads data written with the new).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Backward,
    Forward,
}

/// An incompatibility with the previous version it was found against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Index into the previous versions as given, newest first: 0 is the
    /// latest.
    pub against: usize,
    pub direction: Direction,
    #[serde(flatten)]
    pub incompatibility: Incompatibility,
}

/// Applies `mode` to a pairwise check `can_read(reader, writer)`.
/// `previous` is newest first; the non-transitive modes look only at the
/// first. Every finding is returned, for every version checked.
pub fn check_with<S>(
    mode: Mode,
    new: &S,
    previous: &[S],
    mut can_read: impl FnMut(&S, &S) -> Vec<Incompatibility>,
) -> Vec<Finding> {
    let count = if mode.transitive() {
        previous.len()
    } else {
        previous.len().min(1)
    };
    let mut findings = Vec::new();
    for (against, old) in previous.iter().take(count).enumerate() {
        if mode.backward() {
            findings.extend(
                can_read(new, old)
                    .into_iter()
                    .map(|incompatibility| Finding {
                        against,
                        direction: Direction::Backward,
                        incompatibility,
                    }),
            );
        }
        if mode.forward() {
            findings.extend(
                can_read(old, new)
                    .into_iter()
                    .map(|incompatibility| Finding {
                        against,
                        direction: Direction::Forward,
                        incompatibility,
                    }),
            );
        }
    }
    findings
}

#[cfg(test)]
mod mode_tests {
    use super::*;

    /// A toy format: a schema is a set of field names; a reader can read a
    /// writer when it needs no field the writer lacks.
    fn can_read(reader: &Vec<&str>, writer: &Vec<&str>) -> Vec<Incompatibility> {
        reader
            .iter()
            .filter(|f| !writer.contains(f))
            .map(|f| Incompatibility {
                kind: "MISSING".into(),
                path: format!("/{f}"),
                message: String::new(),
            })
            .collect()
    }

    #[track_caller]
    fn check(
        mode: &str,
        new: Vec<&str>,
        previous: Vec<Vec<&str>>,
        expected: &[(usize, Direction, &str)],
    ) {
        let mode: Mode = mode.parse().expect("mode");
        let got: Vec<(usize, Direction, String)> = check_with(mode, &new, &previous, can_read)
            .into_iter()
            .map(|f| (f.against, f.direction, f.incompatibility.path))
            .collect();
        let expected: Vec<(usize, Direction, String)> = expected
            .iter()
            .map(|(a, d, p)| (*a, *d, p.to_string()))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn modes_choose_direction_and_depth() {
        use Direction::{Backward as B, Forward as F};
        // v1 = [a], v2 = [a, b] (newest first below); new = [a, b, c].
        let prev = || vec![vec!["a", "b"], vec!["a"]];
        check("NONE", vec!["a", "b", "c"], prev(), &[]);
        check("BACKWARD", vec!["a", "b", "c"], prev(), &[(0, B, "/c")]);
        check(
            "backward_transitive",
            vec!["a", "b", "c"],
            prev(),
            &[(0, B, "/c"), (1, B, "/b"), (1, B, "/c")],
        );
        check("FORWARD", vec!["a"], prev(), &[(0, F, "/b")]);
        check("FORWARD_TRANSITIVE", vec!["a"], prev(), &[(0, F, "/b")]);
        check(
            "FULL",
            vec!["a", "c"],
            prev(),
            &[(0, B, "/c"), (0, F, "/b")],
        );
        check(
            "full-transitive",
            vec!["a", "c"],
            prev(),
            &[(0, B, "/c"), (0, F, "/b"), (1, B, "/c")],
        );
        check("FULL_TRANSITIVE", vec!["a"], vec![], &[]);
        assert!("SIDEWAYS".parse::<Mode>().is_err());
    }
}
