//! One `check(reader, writer, expected)` helper, one test per rule.

use proptest::prelude::*;

use super::{AvroSchema, canonical_form, check as check_schemas, parse};
use crate::Reference;

fn schema(text: &str) -> AvroSchema {
    parse(text, &[]).unwrap_or_else(|e| panic!("{e}\nin {text}"))
}

/// Checks `reader` against `writer` and compares the (kind, path) pairs,
/// in order.
#[track_caller]
fn check(reader: &str, writer: &str, expected: &[(&str, &str)]) {
    check_parsed(&schema(reader), &schema(writer), expected);
}

#[track_caller]
fn check_parsed(reader: &AvroSchema, writer: &AvroSchema, expected: &[(&str, &str)]) {
    let found = check_schemas(reader, writer);
    let got: Vec<(&str, &str)> = found
        .iter()
        .map(|i| (i.kind.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(got, expected, "incompatibilities: {found:#?}");
}

/// The messages, for the tests that look at them.
fn messages(reader: &str, writer: &str) -> Vec<String> {
    check_schemas(&schema(reader), &schema(writer))
        .into_iter()
        .map(|i| i.message)
        .collect()
}

fn record(name: &str, fields: &str) -> String {
    format!(r#"{{"type":"record","name":"{name}","fields":[{fields}]}}"#)
}

const OK: &[(&str, &str)] = &[];

// --- primitives and promotions ---

#[test]
fn identical_primitives_are_compatible() {
    for t in [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ] {
        check(&format!("\"{t}\""), &format!("\"{t}\""), OK);
    }
}

#[test]
fn numeric_promotions_widen_only() {
    let widen = [
        ("long", "int"),
        ("float", "int"),
        ("double", "int"),
        ("float", "long"),
        ("double", "long"),
        ("double", "float"),
    ];
    for (reader, writer) in widen {
        check(&format!("\"{reader}\""), &format!("\"{writer}\""), OK);
        check(
            &format!("\"{writer}\""),
            &format!("\"{reader}\""),
            &[("TYPE_MISMATCH", "/")],
        );
    }
}

#[test]
fn string_and_bytes_read_each_other() {
    check(r#""string""#, r#""bytes""#, OK);
    check(r#""bytes""#, r#""string""#, OK);
    check(r#""string""#, r#""int""#, &[("TYPE_MISMATCH", "/")]);
}

#[test]
fn type_mismatch_message_names_the_field_and_types() {
    let reader = record("User", r#"{"name":"age","type":"int"}"#);
    let writer = record("User", r#"{"name":"age","type":"long"}"#);
    assert_eq!(
        messages(&reader, &writer),
        [r#"reader type int cannot read writer type long in field "age" of record "User""#]
    );
}

// --- records and fields ---

#[test]
fn added_field_needs_a_default() {
    let old = record("User", r#"{"name":"id","type":"long"}"#);
    let with_default = record(
        "User",
        r#"{"name":"id","type":"long"},{"name":"email","type":"string","default":""}"#,
    );
    let without = record(
        "User",
        r#"{"name":"id","type":"long"},{"name":"email","type":"string"}"#,
    );
    check(&with_default, &old, OK);
    check(
        &without,
        &old,
        &[("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/1")],
    );
    assert_eq!(
        messages(&without, &old),
        [
            r#"reader field "email" in record "User" has no default and the writer has no field with that name or an alias"#
        ]
    );
}

#[test]
fn null_default_counts_as_a_default() {
    let old = record("User", r#"{"name":"id","type":"long"}"#);
    let new = record(
        "User",
        r#"{"name":"id","type":"long"},{"name":"nick","type":["null","string"],"default":null}"#,
    );
    check(&new, &old, OK);
}

#[test]
fn writer_only_fields_are_ignored() {
    let reader = record("User", r#"{"name":"id","type":"long"}"#);
    let writer = record(
        "User",
        r#"{"name":"id","type":"long"},{"name":"email","type":"string"}"#,
    );
    check(&reader, &writer, OK);
}

#[test]
fn field_types_are_checked_recursively() {
    let reader = record(
        "Outer",
        r#"{"name":"a","type":"int"},{"name":"inner","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"}]}}"#,
    );
    let writer = record(
        "Outer",
        r#"{"name":"a","type":"int"},{"name":"inner","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"long"}]}}"#,
    );
    check(
        &reader,
        &writer,
        &[("TYPE_MISMATCH", "/fields/1/type/fields/0/type")],
    );
}

#[test]
fn reader_field_alias_finds_a_renamed_writer_field() {
    let writer = record("User", r#"{"name":"mail","type":"string"}"#);
    let renamed = record(
        "User",
        r#"{"name":"email","type":"string","aliases":["e_mail","mail"]}"#,
    );
    check(&renamed, &writer, OK);
    // The alias leads to the writer field, whose type is then checked.
    let renamed_int = record(
        "User",
        r#"{"name":"email","type":"int","aliases":["mail"]}"#,
    );
    check(
        &renamed_int,
        &writer,
        &[("TYPE_MISMATCH", "/fields/0/type")],
    );
}

#[test]
fn writer_field_aliases_are_not_used() {
    // Only the reader's aliases count, as in Java.
    let writer = record(
        "User",
        r#"{"name":"mail","type":"string","aliases":["email"]}"#,
    );
    let reader = record("User", r#"{"name":"email","type":"string"}"#);
    check(
        &reader,
        &writer,
        &[("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/0")],
    );
}

#[test]
fn field_name_wins_over_an_alias() {
    let writer = record(
        "R",
        r#"{"name":"a","type":"int"},{"name":"b","type":"string"}"#,
    );
    let reader = record("R", r#"{"name":"a","type":"int","aliases":["b"]}"#);
    check(&reader, &writer, OK);
}

#[test]
fn record_names_compare_unqualified() {
    let reader = r#"{"type":"record","name":"User","namespace":"a","fields":[]}"#;
    let writer = r#"{"type":"record","name":"User","namespace":"b","fields":[]}"#;
    check(reader, writer, OK);
    check(
        &record("Customer", ""),
        &record("User", ""),
        &[("NAME_MISMATCH", "/name")],
    );
}

#[test]
fn record_alias_matches_the_writer_full_name() {
    let writer = r#"{"type":"record","name":"User","namespace":"old","fields":[]}"#;
    let qualified = r#"{"type":"record","name":"Customer","namespace":"new","aliases":["old.User"],"fields":[]}"#;
    check(qualified, writer, OK);
    // A bare alias takes the reader's namespace: "new.User" is not "old.User".
    let relative =
        r#"{"type":"record","name":"Customer","namespace":"new","aliases":["User"],"fields":[]}"#;
    check(relative, writer, &[("NAME_MISMATCH", "/name")]);
    // Without namespaces, the bare alias is the full name.
    let reader = r#"{"type":"record","name":"Customer","aliases":["User"],"fields":[]}"#;
    check(reader, &record("User", ""), OK);
}

#[test]
fn record_name_mismatch_still_checks_fields() {
    let reader = record("A", r#"{"name":"x","type":"int"}"#);
    let writer = record("B", r#"{"name":"x","type":"long"}"#);
    check(
        &reader,
        &writer,
        &[
            ("NAME_MISMATCH", "/name"),
            ("TYPE_MISMATCH", "/fields/0/type"),
        ],
    );
}

// --- enums ---

#[test]
fn enum_reader_must_know_every_writer_symbol() {
    let abc = r#"{"type":"enum","name":"E","symbols":["A","B","C"]}"#;
    let ab = r#"{"type":"enum","name":"E","symbols":["A","B"]}"#;
    check(abc, ab, OK);
    check(ab, abc, &[("MISSING_ENUM_SYMBOLS", "/symbols")]);
    assert_eq!(
        messages(ab, abc),
        [r#"reader enum "E" lacks writer symbol "C" and has no default symbol"#]
    );
}

#[test]
fn enum_default_absorbs_unknown_symbols() {
    let abc = r#"{"type":"enum","name":"E","symbols":["A","B","C"]}"#;
    let ab_default = r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#;
    check(ab_default, abc, OK);
}

#[test]
fn enum_default_not_a_symbol_is_rejected_at_parse() {
    // The specification requires the default to be a symbol; Java's parser
    // rejects it too.
    let e = parse(
        r#"{"type":"enum","name":"E","symbols":["A"],"default":"B"}"#,
        &[],
    )
    .unwrap_err();
    assert!(e.message.contains('B'), "{e}");
}

#[test]
fn enum_names_and_aliases() {
    let e1 = r#"{"type":"enum","name":"E1","symbols":["A"]}"#;
    let e2 = r#"{"type":"enum","name":"E2","symbols":["A"]}"#;
    let e2_alias = r#"{"type":"enum","name":"E2","aliases":["E1"],"symbols":["A"]}"#;
    check(e2, e1, &[("NAME_MISMATCH", "/name")]);
    check(e2_alias, e1, OK);
}

// --- fixed ---

#[test]
fn fixed_needs_same_size_and_name() {
    let f4 = r#"{"type":"fixed","name":"F","size":4}"#;
    let f8 = r#"{"type":"fixed","name":"F","size":8}"#;
    let g4 = r#"{"type":"fixed","name":"G","size":4}"#;
    let g8_alias = r#"{"type":"fixed","name":"G","aliases":["F"],"size":8}"#;
    check(f4, f4, OK);
    check(f4, f8, &[("FIXED_SIZE_MISMATCH", "/size")]);
    check(g4, f4, &[("NAME_MISMATCH", "/name")]);
    check(
        g4,
        f8,
        &[("NAME_MISMATCH", "/name"), ("FIXED_SIZE_MISMATCH", "/size")],
    );
    check(g8_alias, f4, &[("FIXED_SIZE_MISMATCH", "/size")]);
    check(r#""bytes""#, f4, &[("TYPE_MISMATCH", "/")]);
}

// --- arrays and maps ---

#[test]
fn arrays_and_maps_compare_items_and_values() {
    let array = |t: &str| format!(r#"{{"type":"array","items":"{t}"}}"#);
    let map = |t: &str| format!(r#"{{"type":"map","values":"{t}"}}"#);
    check(&array("long"), &array("int"), OK);
    check(
        &array("int"),
        &array("long"),
        &[("TYPE_MISMATCH", "/items")],
    );
    check(&map("double"), &map("float"), OK);
    check(&map("int"), &map("string"), &[("TYPE_MISMATCH", "/values")]);
    check(&map("int"), &array("int"), &[("TYPE_MISMATCH", "/")]);
    let nested = r#"{"type":"map","values":{"type":"array","items":"int"}}"#;
    let nested_long = r#"{"type":"map","values":{"type":"array","items":"long"}}"#;
    check(nested, nested_long, &[("TYPE_MISMATCH", "/values/items")]);
}

// --- unions ---

#[test]
fn reader_union_reads_a_writer_non_union() {
    check(r#"["null","string"]"#, r#""string""#, OK);
    check(r#"["null","long"]"#, r#""int""#, OK);
    check(
        r#"["null","string"]"#,
        r#""int""#,
        &[("MISSING_UNION_BRANCH", "/")],
    );
}

#[test]
fn writer_union_needs_every_branch_readable() {
    // Reader non-union: each writer branch is checked against it, at the
    // reader's location.
    check(r#""double""#, r#"["int","long","float"]"#, OK);
    check(
        r#""long""#,
        r#"["int","float","double"]"#,
        &[("TYPE_MISMATCH", "/"), ("TYPE_MISMATCH", "/")],
    );
    assert_eq!(
        messages(r#""long""#, r#"["int","float"]"#),
        ["reader type long cannot read writer type float (writer union branch 1)"]
    );
}

#[test]
fn union_to_union_locates_the_unreadable_writer_branch() {
    check(r#"["null","string","int"]"#, r#"["string","null"]"#, OK);
    // Writer branch 1 ("string") and 2 ("boolean") have no reader branch;
    // the location ends with the writer's branch index, as in Java.
    check(
        r#"["int"]"#,
        r#"["int","string","boolean"]"#,
        &[
            ("MISSING_UNION_BRANCH", "/1"),
            ("MISSING_UNION_BRANCH", "/2"),
        ],
    );
    let reader = record("R", r#"{"name":"f","type":["null","int"]}"#);
    let writer = record("R", r#"{"name":"f","type":["null","int","string"]}"#);
    check(
        &reader,
        &writer,
        &[("MISSING_UNION_BRANCH", "/fields/0/type/2")],
    );
    assert_eq!(
        messages(&reader, &writer),
        [
            r#"no branch of the reader union can read writer type string (writer union branch 2) in field "f" of record "R""#
        ]
    );
}

#[test]
fn union_branch_of_the_same_name_says_why_it_does_not_read() {
    // The nullable-record case: the record changed incompatibly inside a
    // union. Java stops at MISSING_UNION_BRANCH; we also say which field,
    // under the reader's branch index.
    let reader = record(
        "Outer",
        r#"{"name":"user","type":["null",{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"email","type":"string"}]}],"default":null}"#,
    );
    let writer = record(
        "Outer",
        r#"{"name":"user","type":["null",{"type":"record","name":"User","fields":[{"name":"id","type":"long"}]}],"default":null}"#,
    );
    check(
        &reader,
        &writer,
        &[
            ("MISSING_UNION_BRANCH", "/fields/0/type/1"),
            (
                "READER_FIELD_MISSING_DEFAULT_VALUE",
                "/fields/0/type/1/fields/1",
            ),
        ],
    );
}

#[test]
fn union_first_compatible_branch_wins() {
    // "int" is read by "long" even though "float" would also do.
    check(r#"["string","long","float"]"#, r#""int""#, OK);
    // Empty unions read nothing and write nothing.
    check(r#"[]"#, r#"[]"#, OK);
    check(r#"["int"]"#, r#"[]"#, OK);
    check(r#"[]"#, r#""int""#, &[("MISSING_UNION_BRANCH", "/")]);
}

// --- several at once ---

#[test]
fn every_incompatibility_is_reported_with_its_location() {
    let writer = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"hash","type":{"type":"fixed","name":"Hash","size":16}},
        {"name":"amount","type":["null","double"]}
    ]}"#;
    let reader = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"int"},
        {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
        {"name":"tags","type":{"type":"array","items":"int"}},
        {"name":"hash","type":{"type":"fixed","name":"Digest","size":32}},
        {"name":"amount","type":"double"},
        {"name":"customer","type":"string"}
    ]}"#;
    check(
        reader,
        writer,
        &[
            ("TYPE_MISMATCH", "/fields/0/type"),
            ("MISSING_ENUM_SYMBOLS", "/fields/1/type/symbols"),
            ("TYPE_MISMATCH", "/fields/2/type/items"),
            ("NAME_MISMATCH", "/fields/3/type/name"),
            ("FIXED_SIZE_MISMATCH", "/fields/3/type/size"),
            ("TYPE_MISMATCH", "/fields/4/type"),
            ("READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/5"),
        ],
    );
}

// --- recursive and shared types ---

const LIST_INT: &str = r#"{"type":"record","name":"List","fields":[
    {"name":"head","type":"int"},{"name":"tail","type":["null","List"],"default":null}]}"#;
const LIST_LONG: &str = r#"{"type":"record","name":"List","fields":[
    {"name":"head","type":"long"},{"name":"tail","type":["null","List"],"default":null}]}"#;

#[test]
fn recursive_types_terminate() {
    check(LIST_INT, LIST_INT, OK);
    check(LIST_LONG, LIST_INT, OK);
    // Reported once, at the outer level; the inner List is the same pair.
    check(LIST_INT, LIST_LONG, &[("TYPE_MISMATCH", "/fields/0/type")]);
}

#[test]
fn mutually_recursive_types_terminate() {
    let tree = |leaf: &str| {
        format!(
            r#"{{"type":"record","name":"Tree","fields":[
                {{"name":"value","type":"{leaf}"}},
                {{"name":"children","type":{{"type":"array","items":{{"type":"record","name":"Node","fields":[
                    {{"name":"tree","type":"Tree"}},
                    {{"name":"next","type":["null","Node"]}}]}}}}}}]}}"#
        )
    };
    check(&tree("long"), &tree("int"), OK);
    check(
        &tree("int"),
        &tree("long"),
        &[("TYPE_MISMATCH", "/fields/0/type")],
    );
}

#[test]
fn a_shared_named_type_is_reported_where_each_use_is() {
    let schema = |t: &str| {
        format!(
            r#"{{"type":"record","name":"R","fields":[
                {{"name":"a","type":{{"type":"record","name":"P","fields":[{{"name":"x","type":"{t}"}}]}}}},
                {{"name":"b","type":"P"}}]}}"#
        )
    };
    check(
        &schema("int"),
        &schema("long"),
        &[
            ("TYPE_MISMATCH", "/fields/0/type/fields/0/type"),
            ("TYPE_MISMATCH", "/fields/1/type/fields/0/type"),
        ],
    );
}

#[test]
fn deep_chains_of_named_types_are_cut_off_not_overflowed() {
    // R0 <- R1 <- ... each record holds the previous one: a chain far
    // deeper than the JSON nesting allows, through references by name. The
    // definitions sit in a field the other side lacks, so the first walk
    // of the chain starts at its top.
    let n = 2 * super::MAX_DEPTH;
    let mut chain = vec![record("R0", r#"{"name":"v","type":"int"}"#)];
    for i in 1..n {
        chain.push(record(
            &format!("R{i}"),
            &format!(r#"{{"name":"v","type":"R{}"}}"#, i - 1),
        ));
    }
    let chain = chain.join(",");
    let top = |defs: &str| {
        record(
            "Top",
            &format!(
                r#"{{"name":"{defs}","type":["null",{chain}],"default":null}},{{"name":"top","type":"R{}"}}"#,
                n - 1
            ),
        )
    };
    let reader = schema(&top("reader_defs"));
    let writer = schema(&top("writer_defs"));
    let found = check_schemas(&reader, &writer);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].kind, "NESTING_TOO_DEEP");
    assert!(found[0].path.starts_with("/fields/1/type/fields/0/type/"));
}

// --- logical types ---

#[test]
fn logical_types_are_judged_by_their_underlying_type() {
    let decimal = r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}"#;
    check(decimal, r#""bytes""#, OK);
    check(r#""bytes""#, decimal, OK);
    check(
        r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        r#"{"type":"int","logicalType":"date"}"#,
        OK,
    );
    check(
        r#"{"type":"string","logicalType":"uuid"}"#,
        r#""string""#,
        OK,
    );
    assert_eq!(
        messages(
            r#"{"type":"int","logicalType":"date"}"#,
            r#"{"type":"long","logicalType":"timestamp-millis"}"#
        ),
        ["reader type int (date) cannot read writer type long (timestamp-millis)"]
    );
}

// --- references ---

fn reference(name: &str, schema: &str) -> Reference {
    Reference {
        name: name.to_owned(),
        schema: schema.to_owned(),
    }
}

#[test]
fn references_define_types_used_by_name() {
    let address_v1 = reference(
        "com.acme.Address",
        r#"{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"city","type":"string"}]}"#,
    );
    let address_v2 = reference(
        "com.acme.Address",
        r#"{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"city","type":"string"},{"name":"zip","type":"string"}]}"#,
    );
    let main =
        r#"{"type":"record","name":"User","fields":[{"name":"home","type":"com.acme.Address"}]}"#;
    let v1 = parse(main, std::slice::from_ref(&address_v1)).expect("v1 parses");
    let v2 = parse(main, std::slice::from_ref(&address_v2)).expect("v2 parses");
    check_parsed(&v1, &v1, OK);
    check_parsed(&v1, &v2, OK);
    check_parsed(
        &v2,
        &v1,
        &[(
            "READER_FIELD_MISSING_DEFAULT_VALUE",
            "/fields/0/type/fields/1",
        )],
    );
    assert!(parse(main, &[]).is_err(), "undefined without the reference");
}

#[test]
fn references_may_use_each_other_and_repeat() {
    let city = reference(
        "City",
        r#"{"type":"enum","name":"City","symbols":["PARIS","ROME"]}"#,
    );
    let address = reference(
        "Address",
        r#"{"type":"record","name":"Address","fields":[{"name":"city","type":"City"}]}"#,
    );
    let main = r#"{"type":"record","name":"User","fields":[{"name":"home","type":"Address"},{"name":"born","type":"City"}]}"#;
    // Dependants before dependencies, and a duplicate: both fine.
    let refs = [address.clone(), city.clone(), city];
    let parsed = parse(main, &refs).expect("parses");
    check_parsed(&parsed, &parsed, OK);
    assert_eq!(
        canonical_form(&parsed),
        r#"{"name":"User","type":"record","fields":[{"name":"home","type":"Address"},{"name":"born","type":"City"}]}"#
    );
}

#[test]
fn bad_references_are_errors() {
    let main = r#""string""#;
    for bad in [
        "not json",
        r#""string""#,
        r#"{"type":"string","name":"S"}"#,
        r#"{"name":"X","type":{"type":"record","name":"Y","fields":[]}}"#,
        r#"{"type":"record","fields":[]}"#,
    ] {
        assert!(parse(main, &[reference("X", bad)]).is_err(), "{bad}");
    }
    let a = reference("A", r#"{"type":"fixed","name":"A","size":1}"#);
    let a2 = reference("A", r#"{"type":"fixed","name":"A","size":2}"#);
    assert!(parse(main, &[a, a2]).is_err());
}

// --- canonical form ---

#[test]
fn canonical_form_follows_the_specification() {
    let text = r#"{
        "type": "record", "name": "User", "namespace": "com.acme", "doc": "a user",
        "aliases": ["Person"],
        "fields": [
            {"name": "id", "type": {"type": "long"}, "doc": "id", "order": "descending"},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"}},
            {"name": "other", "type": ["null", "Kind", "com.acme.User"], "default": null},
            {"name": "hash", "type": {"type": "fixed", "name": "Hash", "namespace": "h", "size": 16}},
            {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "h.Hash"}}}
        ]
    }"#;
    let expected = concat!(
        r#"{"name":"com.acme.User","type":"record","fields":["#,
        r#"{"name":"id","type":"long"},"#,
        r#"{"name":"at","type":"long"},"#,
        r#"{"name":"price","type":"bytes"},"#,
        r#"{"name":"kind","type":{"name":"com.acme.Kind","type":"enum","symbols":["A","B"]}},"#,
        r#"{"name":"other","type":["null","com.acme.Kind","com.acme.User"]},"#,
        r#"{"name":"hash","type":{"name":"h.Hash","type":"fixed","size":16}},"#,
        r#"{"name":"m","type":{"type":"map","values":{"type":"array","items":"h.Hash"}}}"#,
        "]}"
    );
    assert_eq!(canonical_form(&schema(text)), expected);
    assert_eq!(canonical_form(&schema(r#"{"type":"int"}"#)), r#""int""#);
    // Canonical forms of canonical forms are fixed points.
    assert_eq!(canonical_form(&schema(expected)), expected);
}

// --- robustness and speed ---

#[test]
fn malformed_schemas_are_errors_not_panics() {
    for text in [
        "",
        "{",
        "42",
        "null",
        "{}",
        r#"{"type":"record"}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"Nope"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}"#,
        r#"{"type":"fixed","name":"F","size":-1}"#,
        r#"{"type":"enum","name":"E","symbols":["A","A"]}"#,
        r#"["int","int"]"#,
        r#"[["int"]]"#,
        // apache-avro 0.22 panics in its canonical-form code on this one,
        // when reporting the bad default.
        r#"{"type":"record","name":"R","fields":[{"name":"x","type":{"type":"record","name":"I","fields":[{"name":"a","type":"int","order":5}]},"default":"bad"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"x","type":{"type":"fixed","name":"F","size":4,"precision":"p"},"default":5}]}"#,
    ] {
        assert!(parse(text, &[]).is_err(), "{text}");
    }
    // Text that is not JSON says where, from the JSON parser's own words.
    for (text, at) in [
        ("", "line 1 column 0"),
        ("{\"type\": \"int\",\n", "line 2 column 0"),
    ] {
        let e = parse(text, &[]).err().unwrap().to_string();
        assert!(e.contains("Failed to parse schema from JSON: "), "{e}");
        assert!(e.contains(at), "{text:?}: {e}");
    }
}

#[test]
fn a_wide_record_checks_quickly() {
    let fields: Vec<String> = (0..200)
        .map(|i| {
            let t = match i % 4 {
                0 => r#""int""#,
                1 => r#""long""#,
                2 => r#""string""#,
                _ => r#"["null","double"],"default":null"#,
            };
            format!(r#"{{"name":"f{i}","type":{t}}}"#)
        })
        .collect();
    let wide = schema(&record("Wide", &fields.join(",")));
    let start = std::time::Instant::now();
    for _ in 0..100 {
        assert!(check_schemas(&wide, &wide).is_empty());
    }
    // Not an assertion on time (no timed tests); printed for a look.
    eprintln!("200-field self-check: {:?} each", start.elapsed() / 100);
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let words = prop_oneof![
        Just("type"),
        Just("name"),
        Just("fields"),
        Just("record"),
        Just("enum"),
        Just("fixed"),
        Just("array"),
        Just("map"),
        Just("items"),
        Just("values"),
        Just("symbols"),
        Just("size"),
        Just("default"),
        Just("aliases"),
        Just("namespace"),
        Just("logicalType"),
        Just("decimal"),
        Just("precision"),
        Just("scale"),
        Just("order"),
        Just("int"),
        Just("long"),
        Just("string"),
        Just("bytes"),
        Just("null"),
        Just("R"),
        Just("a"),
        Just("uuid"),
        Just("duration"),
        Just("date"),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-20i64..40).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        words.clone().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((words.clone(), inner), 0..6).prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}

/// Schema-shaped JSON: mostly valid schemas, with names drawn from a
/// small set so that references, recursion and clashes happen.
fn schema_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let name = prop::sample::select(vec!["A", "B", "C", "n.A", "m.B"]);
    let leaf = prop_oneof![
        prop::sample::select(vec![
            "null", "boolean", "int", "long", "float", "double", "bytes", "string", "A", "B",
            "n.A",
        ])
        .prop_map(Value::from),
        Just(json!({"type": "int", "logicalType": "date"})),
        Just(json!({"type": "long", "logicalType": "timestamp-millis"})),
        Just(json!({"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2})),
        Just(json!({"type": "string", "logicalType": "uuid"})),
        (name.clone(), 0usize..4)
            .prop_map(|(n, size)| json!({"type": "fixed", "name": n, "size": size})),
        (
            name.clone(),
            prop::sample::subsequence(vec!["X", "Y", "Z"], 0..=3),
            any::<bool>()
        )
            .prop_map(|(n, symbols, default)| {
                let mut e = json!({"type": "enum", "name": n, "symbols": symbols});
                if default && !symbols.is_empty() {
                    e["default"] = json!(symbols[0]);
                }
                e
            }),
    ];
    leaf.prop_recursive(5, 48, 5, move |inner| {
        let field = (
            prop::sample::select(vec!["f", "g", "h"]),
            inner.clone(),
            prop::option::of(prop::sample::select(vec!["f", "g", "old"])),
        )
            .prop_map(|(n, t, alias)| {
                let mut f = json!({"name": n, "type": t});
                if let Some(alias) = alias {
                    f["aliases"] = json!([alias]);
                }
                f
            });
        prop_oneof![
            inner
                .clone()
                .prop_map(|t| json!({"type": "array", "items": t})),
            inner
                .clone()
                .prop_map(|t| json!({"type": "map", "values": t})),
            prop::collection::vec(inner, 1..4).prop_map(Value::Array),
            (
                name.clone(),
                prop::collection::vec(field, 0..4),
                prop::option::of(name.clone())
            )
                .prop_map(|(n, fields, alias)| {
                    let mut r = json!({"type": "record", "name": n, "fields": fields});
                    if let Some(alias) = alias {
                        r["aliases"] = json!([alias]);
                    }
                    r
                }),
        ]
    })
}

proptest! {
    #[test]
    fn parse_never_panics_on_strings(text in "\\PC{0,64}") {
        let _ = parse(&text, &[]);
    }

    #[test]
    fn parse_never_panics_on_json(
        value in prop_oneof![json_value(), schema_json()],
        reference in prop_oneof![json_value(), schema_json()],
    ) {
        let text = value.to_string();
        if let Ok(parsed) = parse(&text, &[]) {
            let _ = canonical_form(&parsed);
            let _ = check_schemas(&parsed, &parsed);
        }
        let references = [Reference { name: "R".to_owned(), schema: reference.to_string() }];
        if let Ok(parsed) = parse(&text, &references) {
            let _ = canonical_form(&parsed);
            let _ = check_schemas(&parsed, &parsed);
        }
    }

    #[test]
    fn every_schema_reads_itself(value in prop_oneof![json_value(), schema_json()]) {
        if let Ok(parsed) = parse(&value.to_string(), &[]) {
            if std::env::var_os("AVRO_COUNT_VALID").is_some() {
                eprintln!("VALID");
            }
            let found = check_schemas(&parsed, &parsed);
            prop_assert!(found.is_empty(), "{}: {:#?}", value, found);
            // The canonical form parses to the same canonical form.
            let canonical = canonical_form(&parsed);
            let again = parse(&canonical, &[]).map(|s| canonical_form(&s));
            prop_assert_eq!(again.ok(), Some(canonical));
        }
    }
}

/// The normalized form, for schemas that parse.
fn normalized(text: &str, references: &[Reference]) -> String {
    parse(text, references).unwrap_or_else(|e| panic!("{e}\nin {text}"));
    super::normalized_form(text, references).expect("JSON")
}

#[test]
fn normalized_form_is_one_text_for_every_spelling_of_a_schema() {
    let same = [
        (
            r#"{"type":"record","name":"com.x.Order","fields":[{"name":"id","type":{"type":"long"}}]}"#,
            r#"{"type":"record","name":"Order","namespace":"com.x","fields":[{"name":"id","type":"long"}]}"#,
        ),
        (r#"{"type":"string"}"#, r#""string""#),
        // Doc on a primitive is reserved and ignored by Avro Java.
        (r#"{"type":"int","doc":"count"}"#, r#""int""#),
        // Nested types inherit the namespace; uses resolve through it.
        (
            r#"{"type":"record","name":"a.R","fields":[{"name":"n","type":{"type":"record","name":"N","fields":[]}},{"name":"m","type":["null","N"]}]}"#,
            r#"{"fields":[{"type":{"fields":[],"type":"record","name":"a.N"},"name":"n"},{"name":"m","type":["null","a.N"]}],"type":"record","name":"R","namespace":"a"}"#,
        ),
        // Ascending is the default order; aliases are a set.
        (
            r#"{"type":"record","name":"R","aliases":["B","A"],"fields":[{"name":"f","type":"int","order":"ascending","aliases":["y","x"]}]}"#,
            r#"{"type":"record","name":"R","aliases":["A","B"],"fields":[{"name":"f","type":"int","aliases":["x","y"]}]}"#,
        ),
        // A qualified name ignores the namespace attribute.
        (
            r#"{"type":"enum","name":"x.E","namespace":"ignored","symbols":["A"]}"#,
            r#"{"type":"enum","name":"E","namespace":"x","symbols":["A"]}"#,
        ),
    ];
    for (a, b) in same {
        assert_eq!(normalized(a, &[]), normalized(b, &[]), "{a}\n{b}");
    }
    assert_eq!(
        normalized(same[0].1, &[]),
        r#"{"name":"com.x.Order","type":"record","fields":[{"name":"id","type":"long"}]}"#
    );
    // What Schema.toString keeps makes another schema.
    let base = r#"{"type":"record","name":"R","fields":[{"name":"f","type":"string"}]}"#;
    let different = [
        r#"{"type":"record","name":"R","doc":"d","fields":[{"name":"f","type":"string"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"string","default":""}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"string","doc":"d"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"string","aliases":["g"]}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"string","order":"descending"}]}"#,
        r#"{"type":"record","name":"R","aliases":["Q"],"fields":[{"name":"f","type":"string"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":{"type":"string","avro.java.string":"String"}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":{"type":"string","logicalType":"uuid"}}]}"#,
        r#"{"type":"record","name":"R","owner":"team","fields":[{"name":"f","type":"string"}]}"#,
        r#"{"type":"record","name":"R","namespace":"n","fields":[{"name":"f","type":"string"}]}"#,
    ];
    let base_form = normalized(base, &[]);
    for other in different {
        assert_ne!(normalized(other, &[]), base_form, "{other}");
    }
    // A bare name resolves to the enclosing namespace only when a type of
    // that full name exists (here in a reference); else to the null
    // namespace, as Avro Java's `Names.get` (apache-avro refuses the
    // latter, so it is normalized without parsing).
    let money = Reference {
        name: "a.Money".into(),
        schema: r#"{"type":"fixed","name":"Money","namespace":"a","size":8}"#.into(),
    };
    assert_eq!(
        normalized(
            r#"{"type":"record","name":"a.R","fields":[{"name":"m","type":"Money"}]}"#,
            std::slice::from_ref(&money)
        ),
        r#"{"name":"a.R","type":"record","fields":[{"name":"m","type":"a.Money"}]}"#
    );
    let bare = Reference {
        name: "Money".into(),
        schema: r#"{"type":"fixed","name":"Money","size":8}"#.into(),
    };
    assert_eq!(
        super::normalized_form(
            r#"{"type":"record","name":"a.R","fields":[{"name":"m","type":"Money"}]}"#,
            std::slice::from_ref(&bare)
        )
        .expect("JSON"),
        r#"{"name":"a.R","type":"record","fields":[{"name":"m","type":"Money"}]}"#
    );
    // A type of the null namespace nested in a namespaced record keeps
    // saying so, and the normalized text parses back to the same form.
    let nested = r#"{"type":"record","name":"R","namespace":"a","fields":[{"name":"i","type":{"type":"record","name":"Inner","namespace":"","fields":[]}}]}"#;
    let form = normalized(nested, &[]);
    assert_eq!(
        form,
        r#"{"name":"a.R","type":"record","fields":[{"name":"i","type":{"name":"Inner","namespace":"","type":"record","fields":[]}}]}"#
    );
    assert_eq!(normalized(&form, &[]), form);
    for (a, _) in same {
        let form = normalized(a, &[]);
        assert_eq!(normalized(&form, &[]), form, "{a}");
    }
    assert_eq!(super::normalized_form("{", &[]), None);
}

#[test]
fn nesting_beyond_the_parsers_limit_is_named() {
    let mut text = r#""int""#.to_owned();
    for i in 0..50 {
        text =
            format!(r#"{{"type":"record","name":"R{i}","fields":[{{"name":"f","type":{text}}}]}}"#);
    }
    let message = parse(&text, &[]).expect_err("too deep").message;
    assert!(
        message.contains("nested deeper than 128 levels of JSON objects and arrays"),
        "{message}"
    );
    assert!(message.contains("schemas it references"), "{message}");
    assert!(!message.contains("recursion limit"), "{message}");
}
