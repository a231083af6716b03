//! Karapace's Avro compatibility verdicts (shared/registry-cases), run
//! through `evolve_compat::avro`: every case must agree.
//!
//! Each case is a reader, a writer and whether the reader can read what the
//! writer wrote. Some also give the location Karapace's checker reports
//! (always, in the original test, a member of the reported locations; for
//! the union cases, the whole set) — those are checked too, with the kind
//! the test's name implies. Messages are ours, so they are not compared.
//!
//! The file lives beside the checkout (`../shared` from the repository);
//! when it is absent the test says so loudly and passes.

use std::collections::BTreeSet;
use std::fmt::Write;

use evolve_compat::avro;
use serde_json::Value;

const CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/registry-cases/karapace-avro-compat-cases.json"
);

#[test]
fn karapace_avro_cases() {
    let text = match std::fs::read_to_string(CASES) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("SKIPPED: karapace Avro compatibility cases not found at {CASES}: {e}");
            return;
        }
    };
    let file: Value = serde_json::from_str(&text).expect("the cases file is JSON");
    let cases = file["cases"].as_array().expect("a `cases` array");
    assert!(!cases.is_empty(), "no cases in {CASES}");

    let mut failures = String::new();
    for (index, case) in cases.iter().enumerate() {
        if let Err(why) = run(case) {
            let test = case["test"].as_str().unwrap_or("?");
            let msg = case["msg"]
                .as_str()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            let _ = writeln!(failures, "case {index} {test}{msg}: {why}");
        }
    }
    let failed = failures.lines().count();
    eprintln!(
        "karapace Avro cases: {}/{} agree",
        cases.len() - failed,
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{failed} of {} cases disagree:\n{failures}",
        cases.len()
    );
}

fn run(case: &Value) -> Result<(), String> {
    let reader = parse(&case["reader"]).map_err(|e| format!("reader does not parse: {e}"))?;
    let writer = parse(&case["writer"]).map_err(|e| format!("writer does not parse: {e}"))?;
    let expected = case["compatible"]
        .as_bool()
        .ok_or("no `compatible` verdict")?;
    let found = avro::check(&reader, &writer);
    let describe = || {
        found
            .iter()
            .map(|i| format!("\n    {} at {}: {}", i.kind, i.path, i.message))
            .collect::<String>()
    };
    if found.is_empty() != expected {
        return Err(format!(
            "expected {}, got {}{}",
            verdict(expected),
            verdict(found.is_empty()),
            describe()
        ));
    }

    let Some(location) = case.get("expected_location") else {
        return Ok(());
    };
    let test = case["test"].as_str().unwrap_or_default();
    let kind = test
        .strip_prefix("test_schema_compatibility_")
        .map(str::to_uppercase)
        .ok_or_else(|| format!("no incompatibility kind in the test name {test:?}"))?;
    let paths: BTreeSet<&str> = found
        .iter()
        .filter(|i| i.kind == kind)
        .map(|i| i.path.as_str())
        .collect();
    match location {
        // The union cases: exactly these locations, and nothing else.
        Value::Array(locations) => {
            let want: BTreeSet<&str> = locations.iter().filter_map(Value::as_str).collect();
            let all: BTreeSet<&str> = found.iter().map(|i| i.path.as_str()).collect();
            if paths != want || all != want {
                return Err(format!("expected {kind} at {want:?}, got{}", describe()));
            }
        }
        Value::String(location) => {
            if !paths.contains(location.as_str()) {
                return Err(format!("expected {kind} at {location}, got{}", describe()));
            }
        }
        other => return Err(format!("unexpected expected_location {other}")),
    }
    Ok(())
}

/// Parses a case's schema as Karapace did.
///
/// Karapace parsed one schema of these cases leniently
/// (`validate_enum_symbols=False`): an enum whose `default` is not one of
/// its symbols (case "changing a default value in enum is a backward
/// compatible change", reader `{"symbols":["A"],"default":"B"}`). The Avro
/// specification says the default "must be a member of the symbols array",
/// and Java's parser (hence Confluent) rejects it, as `avro::parse` does.
/// A checker treats such a default as absent (Java's `SchemaCompatibility`
/// only honours a default that is a reader symbol), so the lenient parse is
/// reproduced here by dropping it; the verdict is then the reference one.
fn parse(schema: &Value) -> Result<avro::AvroSchema, String> {
    let text = schema.to_string();
    match avro::parse(&text, &[]) {
        Ok(parsed) => Ok(parsed),
        Err(strict) => {
            let mut lenient = schema.clone();
            if !drop_invalid_enum_defaults(&mut lenient) {
                return Err(strict.to_string());
            }
            avro::parse(&lenient.to_string(), &[])
                .map_err(|e| format!("{strict}; also without invalid enum defaults: {e}"))
        }
    }
}

/// Removes every enum `default` that is not one of the enum's symbols;
/// returns whether there was one.
fn drop_invalid_enum_defaults(schema: &mut Value) -> bool {
    match schema {
        Value::Object(object) => {
            let mut dropped = false;
            if object.get("type").and_then(Value::as_str) == Some("enum") {
                let symbols = object.get("symbols").and_then(Value::as_array);
                let default = object.get("default");
                let valid = matches!(
                    (symbols, default),
                    (Some(symbols), Some(default)) if symbols.contains(default)
                );
                if default.is_some() && !valid {
                    object.remove("default");
                    dropped = true;
                }
            }
            for value in object.values_mut() {
                dropped |= drop_invalid_enum_defaults(value);
            }
            dropped
        }
        Value::Array(items) => items.iter_mut().fold(false, |dropped, item| {
            drop_invalid_enum_defaults(item) | dropped
        }),
        _ => false,
    }
}

fn verdict(compatible: bool) -> &'static str {
    if compatible {
        "compatible"
    } else {
        "incompatible"
    }
}
