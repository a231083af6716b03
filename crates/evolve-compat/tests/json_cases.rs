//! Karapace's JSON Schema compatibility verdicts, run against our engine.
//!
//! The cases live outside the crate, in
//! `shared/registry-cases/karapace-jsonschema-compat-cases.json` beside the
//! checkout (see that directory's README). Each case is a reader/writer
//! pair and whether the reader accepts every value valid under the writer.
//! Every case must agree; the test lists every disagreement at once.
//!
//! Some reference verdicts are not what plain JSON Schema semantics say;
//! the engine matches them anyway (see `evolve_compat::json`'s model):
//!
//! * `true` (and any schema without `type`) reads objects only, so
//!   `TRUE_SCHEMA` cannot read a `BOOLEAN_SCHEMA`, `INT_SCHEMA`, … writer,
//!   although `true` accepts every value.
//! * `FALSE_SCHEMA` reading `TRUE_SCHEMA` is compatible, although `false`
//!   rejects everything `true` accepts.
//! * A `false` writer, which produces nothing, is incompatible with every
//!   non-boolean reader (`A_INT_OBJECT_SCHEMA`, `NOT_OF_TRUE_SCHEMA`, …).
//! * A property `{}` added to an open model (`A_OBJECT_SCHEMA` reading
//!   `OBJECT_SCHEMA`) is incompatible, and `patternProperties` with `{}`
//!   does not cover an integer property (`PATTERN_PROPERTY_ASTAR` reading
//!   `B_INT_OBJECT_SCHEMA`), because `{}` reads objects only.
//! * A tuple reader cannot read a list writer of the same items
//!   (`TUPLE_OF_INT_OPEN_SCHEMA` reading `ARRAY_OF_INT_SCHEMA`).

use evolve_compat::json;
use serde_json::Value;
use std::path::Path;

const CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/registry-cases/karapace-jsonschema-compat-cases.json"
);

#[test]
fn karapace_jsonschema_verdicts() {
    let path = Path::new(CASES);
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!(
            "SKIPPED: karapace_jsonschema_verdicts: {} not found",
            path.display()
        );
        return;
    };
    let data: Value = serde_json::from_str(&text).expect("the cases file is JSON");
    let cases = data["cases"].as_array().expect("a `cases` array");
    assert!(!cases.is_empty(), "no cases in {}", path.display());

    // EVOLVE_DUMP_JSON_CASES=1 prints every case's findings.
    let dump = std::env::var_os("EVOLVE_DUMP_JSON_CASES").is_some();
    let mut failures = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let id = format!(
            "#{index} {}: {} reads {}",
            case["test"].as_str().unwrap_or("?"),
            case["reader_name"].as_str().unwrap_or("?"),
            case["writer_name"].as_str().unwrap_or("?"),
        );
        let expected = case["compatible"]
            .as_bool()
            .expect("`compatible` is a bool");
        let reader = json::parse(&case["reader"].to_string(), &[]);
        let writer = json::parse(&case["writer"].to_string(), &[]);
        let (reader, writer) = match (reader, writer) {
            (Ok(r), Ok(w)) => (r, w),
            (r, w) => {
                failures.push(format!(
                    "{id}: a schema did not parse: reader {:?}, writer {:?}",
                    r.err(),
                    w.err()
                ));
                continue;
            }
        };
        let found = json::check(&reader, &writer);
        if dump {
            eprintln!("{id}: expected {}", verdict(expected));
            for i in &found {
                eprintln!("    {} at {}: {}", i.kind, i.path, i.message);
            }
        }
        if found.is_empty() != expected {
            let detail: Vec<String> = found
                .iter()
                .map(|i| format!("    {} at {}: {}", i.kind, i.path, i.message))
                .collect();
            failures.push(format!(
                "{id}: expected {}, got {}{}{}\n  reader {}\n  writer {}",
                verdict(expected),
                verdict(found.is_empty()),
                if detail.is_empty() { "" } else { "\n" },
                detail.join("\n"),
                case["reader"],
                case["writer"],
            ));
        }
    }
    eprintln!(
        "karapace_jsonschema_verdicts: {}/{} cases agree",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn verdict(compatible: bool) -> &'static str {
    if compatible {
        "compatible"
    } else {
        "incompatible"
    }
}
