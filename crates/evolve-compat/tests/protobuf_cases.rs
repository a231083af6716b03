//! Data-driven Protobuf compatibility cases (tests/data/protobuf-cases.txt)
//! and properties of `protobuf::parse` and `protobuf::check`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use evolve_compat::Reference;
use evolve_compat::protobuf::{self, ProtobufSchema};
use proptest::prelude::*;

const CASES: &str = include_str!("data/protobuf-cases.txt");

/// Every incompatible kind the engine can report; each needs a case.
const INCOMPATIBLE_KINDS: [&str; 11] = [
    "PACKAGE_CHANGED",
    "MESSAGE_REMOVED",
    "FIELD_KIND_CHANGED",
    "FIELD_SCALAR_KIND_CHANGED",
    "FIELD_NAMED_TYPE_CHANGED",
    "FIELD_NUMERIC_LABEL_CHANGED",
    "REQUIRED_FIELD_ADDED",
    "REQUIRED_FIELD_REMOVED",
    "ONEOF_FIELD_REMOVED",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
    "FIELD_MOVED_TO_EXISTING_ONEOF",
];

#[derive(Default)]
struct Case {
    name: String,
    line: usize,
    compatible: Option<bool>,
    /// (kind, path), sorted.
    expected: BTreeSet<(String, String)>,
    writer: String,
    reader: String,
    writer_refs: Vec<Reference>,
    reader_refs: Vec<Reference>,
}

/// Where the lines of a case's body go.
enum Target {
    Header,
    Writer,
    Reader,
    WriterRef(usize),
    ReaderRef(usize),
    BothRef(usize, usize),
}

fn parse_cases(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut target = Target::Header;
    for (index, line) in text.lines().enumerate() {
        let line_number = index + 1;
        if let Some(name) = line.strip_prefix("=== ") {
            cases.push(Case {
                name: name.trim().to_owned(),
                line: line_number,
                ..Case::default()
            });
            target = Target::Header;
            continue;
        }
        let Some(case) = cases.last_mut() else {
            continue; // the preamble
        };
        if let Some(section) = line.strip_prefix("--- ") {
            let words: Vec<&str> = section.split_whitespace().collect();
            let reference = |name: &str| Reference {
                name: name.to_owned(),
                schema: String::new(),
            };
            target = match words.as_slice() {
                ["writer"] => Target::Writer,
                ["reader"] => Target::Reader,
                ["writer", "import", name] => {
                    case.writer_refs.push(reference(name));
                    Target::WriterRef(case.writer_refs.len() - 1)
                }
                ["reader", "import", name] => {
                    case.reader_refs.push(reference(name));
                    Target::ReaderRef(case.reader_refs.len() - 1)
                }
                ["both", "import", name] => {
                    case.writer_refs.push(reference(name));
                    case.reader_refs.push(reference(name));
                    Target::BothRef(case.writer_refs.len() - 1, case.reader_refs.len() - 1)
                }
                _ => panic!("line {line_number}: unknown section {section:?}"),
            };
            continue;
        }
        let push = |text: &mut String| {
            text.push_str(line);
            text.push('\n');
        };
        match target {
            Target::Header => match line.trim() {
                "" => {}
                "compatible" => case.compatible = Some(true),
                "incompatible" => case.compatible = Some(false),
                finding => {
                    let (kind, path) = finding
                        .split_once(' ')
                        .unwrap_or_else(|| panic!("line {line_number}: expected KIND PATH"));
                    case.expected
                        .insert((kind.to_owned(), path.trim().to_owned()));
                }
            },
            Target::Writer => push(&mut case.writer),
            Target::Reader => push(&mut case.reader),
            Target::WriterRef(i) => push(&mut case.writer_refs[i].schema),
            Target::ReaderRef(i) => push(&mut case.reader_refs[i].schema),
            Target::BothRef(w, r) => {
                push(&mut case.writer_refs[w].schema);
                push(&mut case.reader_refs[r].schema);
            }
        }
    }
    for case in &cases {
        let compatible = case.compatible.unwrap_or_else(|| {
            panic!(
                "case {:?} says neither compatible nor incompatible",
                case.name
            )
        });
        assert_eq!(
            compatible,
            case.expected.is_empty(),
            "case {:?}: an incompatible case lists its findings, a compatible one none",
            case.name
        );
    }
    cases
}

fn schema(
    case: &Case,
    side: &str,
    text: &str,
    refs: &[Reference],
) -> Result<ProtobufSchema, String> {
    protobuf::parse(text, refs).map_err(|e| {
        format!(
            "case {:?} (line {}): {side} does not parse: {e}",
            case.name, case.line
        )
    })
}

/// Runs one case; `Err` describes the disagreement.
fn run(case: &Case) -> Result<(), String> {
    let writer = schema(case, "writer", &case.writer, &case.writer_refs)?;
    let reader = schema(case, "reader", &case.reader, &case.reader_refs)?;
    let found = protobuf::check(&reader, &writer);
    let got: BTreeSet<(String, String)> = found
        .iter()
        .map(|i| (i.kind.clone(), i.path.clone()))
        .collect();
    if got != case.expected {
        let mut report = format!("case {:?} (line {}):\n", case.name, case.line);
        for (kind, path) in case.expected.difference(&got) {
            let _ = writeln!(report, "    missing    {kind} {path}");
        }
        for i in &found {
            if !case.expected.contains(&(i.kind.clone(), i.path.clone())) {
                let _ = writeln!(
                    report,
                    "    unexpected {} {}: {}",
                    i.kind, i.path, i.message
                );
            }
        }
        return Err(report);
    }
    for i in &found {
        if i.message.is_empty() || i.message.contains('\n') {
            return Err(format!(
                "case {:?}: message is not one sentence: {:?}",
                case.name, i.message
            ));
        }
    }
    for (side, schema) in [("writer", &writer), ("reader", &reader)] {
        let itself = protobuf::check(schema, schema);
        if !itself.is_empty() {
            return Err(format!(
                "case {:?}: the {side} cannot read itself: {itself:?}",
                case.name
            ));
        }
    }
    Ok(())
}

#[test]
fn protobuf_cases() {
    let cases = parse_cases(CASES);
    let failures: Vec<String> = cases.iter().filter_map(|c| run(c).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} protobuf cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn cases_cover_every_kind_and_both_verdicts() {
    let cases = parse_cases(CASES);
    let kinds: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.expected.iter().map(|(k, _)| k.as_str()))
        .collect();
    let missing: Vec<&str> = INCOMPATIBLE_KINDS
        .into_iter()
        .filter(|k| !kinds.contains(k))
        .collect();
    assert!(missing.is_empty(), "no case for {missing:?}");
    let unknown: Vec<&&str> = kinds
        .iter()
        .filter(|k| !INCOMPATIBLE_KINDS.contains(k))
        .collect();
    assert!(unknown.is_empty(), "cases expect unknown kinds {unknown:?}");
    assert!(cases.iter().any(|c| c.expected.is_empty()));
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique");
}

#[test]
fn canonical_form_is_deterministic_for_every_case_schema() {
    for case in parse_cases(CASES) {
        for (text, refs) in [
            (&case.writer, &case.writer_refs),
            (&case.reader, &case.reader_refs),
        ] {
            let a = protobuf::parse(text, refs).expect("parses");
            let b = protobuf::parse(text, refs).expect("parses");
            assert_eq!(
                protobuf::canonical_form(&a),
                protobuf::canonical_form(&b),
                "{}",
                case.name
            );
        }
    }
}

/// Generated schemas: a few messages with fields of assorted types,
/// labels and oneofs, to run `check` on pairs of them.
fn arb_schema() -> impl Strategy<Value = String> {
    const TYPES: [&str; 14] = [
        "int32",
        "int64",
        "uint32",
        "bool",
        "sint32",
        "sint64",
        "fixed32",
        "sfixed64",
        "double",
        "string",
        "bytes",
        "E",
        "M0",
        "map<string, M1>",
    ];
    let field = (0..TYPES.len(), 0..3usize, any::<bool>());
    let message = prop::collection::btree_map(1u32..10, field, 0..6);
    (
        any::<bool>(),
        // M0 and M1 always exist so that fields may use them.
        prop::collection::vec(message, 2..4),
        prop::sample::select(vec!["", "package a;", "package b;"]),
    )
        .prop_map(|(proto2, messages, package)| {
            let mut text = format!(
                "syntax = \"{}\";\n{package}\nenum E {{ E0 = 0; E1 = 1; }}\n",
                if proto2 { "proto2" } else { "proto3" }
            );
            for (index, fields) in messages.iter().enumerate() {
                let mut top = String::new();
                let mut oneof = String::new();
                for (number, (ty, label, in_oneof)) in fields.iter() {
                    let ty = TYPES[*ty];
                    let is_map = ty.starts_with("map");
                    if *in_oneof && !is_map {
                        let _ = writeln!(oneof, "    {ty} f{number} = {number};");
                        continue;
                    }
                    let label = match (is_map, label, proto2) {
                        (true, _, _) => "",
                        (false, 0, true) => "optional ",
                        (false, 0, false) => "",
                        (false, 1, _) => "repeated ",
                        (false, _, true) => "required ",
                        (false, _, false) => "optional ",
                    };
                    let _ = writeln!(top, "  {label}{ty} f{number} = {number};");
                }
                let _ = write!(text, "message M{index} {{\n{top}");
                if !oneof.is_empty() {
                    let _ = write!(text, "  oneof o {{\n{oneof}  }}\n");
                }
                text.push_str("}\n");
            }
            text
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_never_panics_on_any_text(text in ".{0,200}") {
        let _ = protobuf::parse(&text, &[]);
    }

    #[test]
    fn parse_never_panics_on_proto_like_text(
        tokens in prop::collection::vec(
            prop::sample::select(vec![
                "syntax", "=", "\"proto3\"", "\"proto2\"", ";", "message", "M", "{", "}", "int32",
                "string", "map", "<", ">", ",", "oneof", "o", "repeated", "optional", "required",
                "enum", "E", "1", "2", "0", "-1", "999999999999", "package", "a.b", "import",
                "\"x.proto\"", "\"google/protobuf/any.proto\"", "option", "(", ")", "[", "]",
                "default", "reserved", "to", "max", "extend", "extensions", "group", "service",
                "rpc", "returns", "stream", ".", "\n", "//", "/*", "*/", "'", "\\", "\u{0}",
                "edition", "\"2023\"",
            ]),
            0..60,
        ),
    ) {
        let text = tokens.join(" ");
        let refs = [Reference { name: "x.proto".to_owned(), schema: text.clone() }];
        let _ = protobuf::parse(&text, &[]);
        let _ = protobuf::parse(&text, &refs);
    }

    #[test]
    fn check_never_panics_and_every_schema_reads_itself(a in arb_schema(), b in arb_schema()) {
        let (Ok(a), Ok(b)) = (protobuf::parse(&a, &[]), protobuf::parse(&b, &[])) else {
            return Ok(());
        };
        prop_assert!(protobuf::check(&a, &a).is_empty());
        prop_assert!(protobuf::check(&b, &b).is_empty());
        let _ = protobuf::check(&a, &b);
        let _ = protobuf::check(&b, &a);
        let _ = protobuf::canonical_form(&a);
    }
}

/// Each message of a long chain refers to the next one, in a reference;
/// the last one changes. Comparing walks the whole chain.
#[test]
fn long_chains_of_referenced_types_do_not_exhaust_the_stack() {
    const LENGTH: usize = 3_000;
    let chain = |last_type: &str| {
        let mut text = String::from("syntax = \"proto3\";\npackage chain;\n");
        for i in 0..LENGTH - 1 {
            let _ = writeln!(text, "message C{i} {{ C{} next = 1; }}", i + 1);
        }
        let _ = writeln!(text, "message C{} {{ {last_type} value = 1; }}", LENGTH - 1);
        text
    };
    let main =
        "syntax = \"proto3\";\nimport \"chain.proto\";\nmessage Head { chain.C0 first = 1; }\n";
    let reference = |text: String| {
        [Reference {
            name: "chain.proto".to_owned(),
            schema: text,
        }]
    };
    let writer = protobuf::parse(main, &reference(chain("int32"))).expect("writer parses");
    let reader = protobuf::parse(main, &reference(chain("string"))).expect("reader parses");
    let found = protobuf::check(&reader, &writer);
    let count = |kind: &str| found.iter().filter(|i| i.kind == kind).count();
    assert_eq!(count("FIELD_SCALAR_KIND_CHANGED"), 1);
    // C0 .. C(n-2), and Head.
    assert_eq!(count("FIELD_NAMED_TYPE_CHANGED"), LENGTH);
    assert!(protobuf::check(&writer, &writer).is_empty());
}
