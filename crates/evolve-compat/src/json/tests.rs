//! Unit tests: one `check(reader, writer, expected)` call per rule, where
//! `expected` lists the (kind, path) of every incompatibility.

use super::{JsonSchema, canonical_form, check as compat, parse};
use crate::Reference;
use proptest::prelude::*;
use serde_json::{Value, json};

fn schema(text: &str) -> JsonSchema {
    parse(text, &[]).unwrap_or_else(|e| panic!("{text} should parse: {e}"))
}

/// Checks that `reader` reading `writer` yields exactly the incompatibilities
/// `expected` as (kind, path), in any order, each with a message.
fn check(reader: &str, writer: &str, expected: &[(&str, &str)]) {
    check_schemas(&schema(reader), &schema(writer), expected);
}

fn check_schemas(reader: &JsonSchema, writer: &JsonSchema, expected: &[(&str, &str)]) {
    let found = compat(reader, writer);
    let mut got: Vec<(String, String)> = found
        .iter()
        .map(|i| (i.kind.clone(), i.path.clone()))
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = expected
        .iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect();
    want.sort();
    assert_eq!(
        got,
        want,
        "\nreader {}\nwriter {}\nfound {found:#?}",
        canonical_form(reader),
        canonical_form(writer)
    );
    assert!(found.iter().all(|i| !i.message.is_empty()));
}

fn with_refs(text: &str, refs: &[(&str, &str)]) -> JsonSchema {
    let refs: Vec<Reference> = refs
        .iter()
        .map(|(name, schema)| Reference {
            name: name.to_string(),
            schema: schema.to_string(),
        })
        .collect();
    parse(text, &refs).unwrap_or_else(|e| panic!("{text} should parse: {e}"))
}

/// The message of a schema that does not parse; every such error is shown
/// as a JSON Schema error.
fn parse_error(text: &str) -> String {
    match parse(text, &[]) {
        Ok(_) => panic!("{text} should not parse"),
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("invalid JSON Schema: "), "{shown}");
            e.message
        }
    }
}

#[test]
fn identical_schemas_are_compatible() {
    for s in [
        r#"true"#,
        r#"false"#,
        r#"{}"#,
        r#"{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}"#,
        r#"{"type":"array","prefixItems":[{"type":"string"}],"items":false}"#,
        r#"{"anyOf":[{"type":"string"},{"type":"null"}]}"#,
        r##"{"definitions":{"n":{"type":"object","properties":{"next":{"$ref":"#/definitions/n"}}}},"$ref":"#/definitions/n"}"##,
    ] {
        check(s, s, &[]);
    }
}

#[test]
fn types_widen_but_do_not_narrow_or_change() {
    check(r#"{"type":"number"}"#, r#"{"type":"integer"}"#, &[]);
    check(
        r#"{"type":"integer"}"#,
        r#"{"type":"number"}"#,
        &[("TYPE_NARROWED", "#")],
    );
    check(
        r#"{"type":"string"}"#,
        r#"{"type":"integer"}"#,
        &[("TYPE_CHANGED", "#")],
    );
    check(r#"{"type":["string","null"]}"#, r#"{"type":"string"}"#, &[]);
    check(
        r#"{"type":"string"}"#,
        r#"{"type":["string","null"]}"#,
        &[("TYPE_CHANGED", "#")],
    );
    check(
        r#"{"type":["string","null"],"maxLength":3}"#,
        r#"{"type":"string"}"#,
        &[("MAX_LENGTH_ADDED", "#/maxLength")],
    );
    // Karapace's model: a schema without a type reads objects only.
    check(r#"true"#, r#"{"type":"object"}"#, &[]);
    check(r#"{}"#, r#"{"type":"integer"}"#, &[("TYPE_CHANGED", "#")]);
}

#[test]
fn enums_extend_but_do_not_narrow() {
    check(r#"{"enum":["a","b","c"]}"#, r#"{"enum":["a","b"]}"#, &[]);
    check(
        r#"{"enum":["a"]}"#,
        r#"{"enum":["a","b"]}"#,
        &[("ENUM_ARRAY_NARROWED", "#/enum")],
    );
    check(r#"{"enum":[1,"x"]}"#, r#"{"const":1.0}"#, &[]);
    check(
        r#"{"const":"x"}"#,
        r#"{"enum":["x","y"]}"#,
        &[("ENUM_ARRAY_NARROWED", "#/const")],
    );
    // A typed reader reads an enum whose values it accepts.
    check(
        r#"{"type":"string","maxLength":1}"#,
        r#"{"enum":["a","b"]}"#,
        &[],
    );
    check(
        r#"{"type":"string","pattern":"^a"}"#,
        r#"{"enum":["ab","b"]}"#,
        &[("TYPE_CHANGED", "#")],
    );
    check(
        r#"{"enum":[true,false,null]}"#,
        r#"{"type":"boolean"}"#,
        &[],
    );
    check(
        r#"{"type":"string","enum":["a"]}"#,
        r#"{"type":"string"}"#,
        &[("ENUM_ARRAY_NARROWED", "#/enum")],
    );
    check(
        r#"{"type":"string","enum":["a","b"]}"#,
        r#"{"type":"string","enum":["b"]}"#,
        &[],
    );
}

#[test]
fn numeric_bounds_may_relax_but_not_tighten() {
    check(
        r#"{"type":"number","maximum":10}"#,
        r#"{"type":"number","maximum":5}"#,
        &[],
    );
    check(
        r#"{"type":"number","maximum":5}"#,
        r#"{"type":"number","maximum":10}"#,
        &[("MAXIMUM_DECREASED", "#/maximum")],
    );
    check(
        r#"{"type":"number","minimum":0}"#,
        r#"{"type":"number"}"#,
        &[("MINIMUM_ADDED", "#/minimum")],
    );
    check(
        r#"{"type":"number","exclusiveMinimum":5}"#,
        r#"{"type":"number","minimum":5}"#,
        &[("EXCLUSIVE_MINIMUM_ADDED", "#/exclusiveMinimum")],
    );
    check(
        r#"{"type":"number","exclusiveMaximum":5}"#,
        r#"{"type":"number","exclusiveMaximum":6}"#,
        &[("EXCLUSIVE_MAXIMUM_DECREASED", "#/exclusiveMaximum")],
    );
    check(
        r#"{"type":"number","maximum":10}"#,
        r#"{"type":"number","exclusiveMaximum":10}"#,
        &[],
    );
    // Integers below 10 exclusive are at most 9.
    check(
        r#"{"type":"integer","maximum":9}"#,
        r#"{"type":"integer","exclusiveMaximum":10}"#,
        &[],
    );
    check(
        r#"{"type":"number","maximum":9}"#,
        r#"{"type":"number","exclusiveMaximum":10}"#,
        &[("MAXIMUM_DECREASED", "#/maximum")],
    );
    // Draft-04 spells exclusivity as a boolean beside the bound.
    check(
        r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"number","maximum":5,"exclusiveMaximum":true}"#,
        r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"number","maximum":5}"#,
        &[("EXCLUSIVE_MAXIMUM_ADDED", "#/maximum")],
    );
}

#[test]
fn multiple_of_may_divide_the_writers() {
    check(
        r#"{"type":"number","multipleOf":2}"#,
        r#"{"type":"number","multipleOf":4}"#,
        &[],
    );
    check(
        r#"{"type":"number","multipleOf":0.1}"#,
        r#"{"type":"number","multipleOf":0.3}"#,
        &[],
    );
    check(
        r#"{"type":"number","multipleOf":4}"#,
        r#"{"type":"number","multipleOf":2}"#,
        &[("MULTIPLE_OF_EXPANDED", "#/multipleOf")],
    );
    check(
        r#"{"type":"number","multipleOf":2}"#,
        r#"{"type":"number","multipleOf":3}"#,
        &[("MULTIPLE_OF_CHANGED", "#/multipleOf")],
    );
    check(
        r#"{"type":"number","multipleOf":2}"#,
        r#"{"type":"number"}"#,
        &[("MULTIPLE_OF_ADDED", "#/multipleOf")],
    );
    check(
        r#"{"type":"number","multipleOf":1}"#,
        r#"{"type":"integer"}"#,
        &[],
    );
}

#[test]
fn string_constraints_may_relax_but_not_tighten() {
    check(
        r#"{"type":"string","maxLength":5}"#,
        r#"{"type":"string","maxLength":3}"#,
        &[],
    );
    check(
        r#"{"type":"string","maxLength":3}"#,
        r#"{"type":"string","maxLength":5}"#,
        &[("MAX_LENGTH_DECREASED", "#/maxLength")],
    );
    check(
        r#"{"type":"string","minLength":2}"#,
        r#"{"type":"string","minLength":1}"#,
        &[("MIN_LENGTH_INCREASED", "#/minLength")],
    );
    check(
        r#"{"type":"string","minLength":0}"#,
        r#"{"type":"string"}"#,
        &[],
    );
    check(
        r#"{"type":"string"}"#,
        r#"{"type":"string","pattern":"^a"}"#,
        &[],
    );
    check(
        r#"{"type":"string","pattern":"^b"}"#,
        r#"{"type":"string","pattern":"^a"}"#,
        &[("PATTERN_CHANGED", "#/pattern")],
    );
    check(
        r#"{"type":"string","pattern":"^b"}"#,
        r#"{"type":"string"}"#,
        &[("PATTERN_ADDED", "#/pattern")],
    );
}

#[test]
fn properties_and_the_open_content_model() {
    let open_a = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
    // Removing a property from an open model: the reader ignores it.
    check(r#"{"type":"object"}"#, open_a, &[]);
    // Adding one: the writer may have put anything there.
    check(
        open_a,
        r#"{"type":"object"}"#,
        &[("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "#/properties/a")],
    );
    check(
        r#"{"type":"object","properties":{"a":true}}"#,
        r#"{"type":"object"}"#,
        &[],
    );
    check(
        r#"{"type":"object","properties":{"a":{"type":"string","maxLength":2}}}"#,
        open_a,
        &[("MAX_LENGTH_ADDED", "#/properties/a/maxLength")],
    );
}

#[test]
fn properties_and_the_closed_content_model() {
    let closed_a =
        r#"{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}"#;
    let closed_ab = r#"{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"additionalProperties":false}"#;
    // An optional property added to a closed model: the writer never wrote it.
    check(closed_ab, closed_a, &[]);
    check(
        closed_a,
        closed_ab,
        &[(
            "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
            "#/properties/b",
        )],
    );
    // A property the writer forbade may be removed.
    check(
        closed_a,
        r#"{"type":"object","properties":{"a":{"type":"string"},"b":false},"additionalProperties":false}"#,
        &[],
    );
    // Opening the model is fine; closing it is not.
    check(
        r#"{"type":"object","properties":{"a":{"type":"string"}}}"#,
        closed_a,
        &[],
    );
    check(
        closed_a,
        r#"{"type":"object","properties":{"a":{"type":"string"}}}"#,
        &[("ADDITIONAL_PROPERTIES_REMOVED", "#/additionalProperties")],
    );
}

#[test]
fn properties_and_the_partially_open_content_model() {
    let strings = r#"{"type":"object","additionalProperties":{"type":"string"}}"#;
    check(
        strings,
        r#"{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}"#,
        &[],
    );
    check(
        strings,
        r#"{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}"#,
        &[
            ("TYPE_CHANGED", "#/additionalProperties"),
            (
                "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "#/properties/a",
            ),
        ],
    );
    check(
        r#"{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}"#,
        r#"{"type":"object","properties":{"x-a":{"type":"string"}},"additionalProperties":false}"#,
        &[],
    );
    check(
        r#"{"type":"object","properties":{"x-a":{"type":"string","maxLength":2}}}"#,
        r#"{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}"#,
        &[
            ("MAX_LENGTH_ADDED", "#/properties/x-a/maxLength"),
            (
                "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "#/properties/x-a",
            ),
        ],
    );
    check(
        strings,
        r#"{"type":"object"}"#,
        &[("ADDITIONAL_PROPERTIES_NARROWED", "#/additionalProperties")],
    );
    check(
        r#"{"type":"object","additionalProperties":{"type":"number"}}"#,
        r#"{"type":"object","additionalProperties":{"type":"integer"}}"#,
        &[],
    );
    check(
        r#"{"type":"object","additionalProperties":false}"#,
        r#"{"type":"object","patternProperties":{"^x-":{}},"additionalProperties":false}"#,
        &[(
            "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
            "#/patternProperties/^x-",
        )],
    );
}

#[test]
fn required_may_be_removed_or_added_with_a_default() {
    let optional = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
    let required = r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}"#;
    check(optional, required, &[]);
    check(
        required,
        optional,
        &[("REQUIRED_ATTRIBUTE_ADDED", "#/required/0")],
    );
    check(
        r#"{"type":"object","properties":{"a":{"type":"string","default":""}},"required":["a"]}"#,
        optional,
        &[],
    );
    let closed = r#"{"type":"object","properties":{},"additionalProperties":false}"#;
    check(
        r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}"#,
        closed,
        &[(
            "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
            "#/properties/a",
        )],
    );
    check(
        r#"{"type":"object","properties":{"a":{"type":"string","default":"x"}},"required":["a"],"additionalProperties":false}"#,
        closed,
        &[],
    );
}

#[test]
fn dependencies_may_be_dropped_but_not_added() {
    check(
        r#"{"type":"object"}"#,
        r#"{"type":"object","dependentRequired":{"a":["b"]}}"#,
        &[],
    );
    check(
        r#"{"type":"object","dependentRequired":{"a":["b"]}}"#,
        r#"{"type":"object"}"#,
        &[("DEPENDENCY_ARRAY_ADDED", "#/dependentRequired/a")],
    );
    check(
        r#"{"type":"object","dependencies":{"a":["b","c"]}}"#,
        r#"{"type":"object","dependencies":{"a":["b"]}}"#,
        &[("DEPENDENCY_ARRAY_EXTENDED", "#/dependencies/a")],
    );
    check(
        r#"{"type":"object","dependencies":{"a":["b"]}}"#,
        r#"{"type":"object","dependentRequired":{"a":["b","c"]}}"#,
        &[],
    );
    check(
        r#"{"type":"object","dependentSchemas":{"a":{"required":["b"]}}}"#,
        r#"{"type":"object"}"#,
        &[("DEPENDENCY_SCHEMA_ADDED", "#/dependentSchemas/a")],
    );
}

#[test]
fn property_counts_may_relax_but_not_tighten() {
    check(
        r#"{"type":"object","maxProperties":2}"#,
        r#"{"type":"object","maxProperties":3}"#,
        &[("MAX_PROPERTIES_DECREASED", "#/maxProperties")],
    );
    check(
        r#"{"type":"object","minProperties":1}"#,
        r#"{"type":"object"}"#,
        &[("MIN_PROPERTIES_ADDED", "#/minProperties")],
    );
    check(
        r#"{"type":"object"}"#,
        r#"{"type":"object","minProperties":1}"#,
        &[],
    );
}

#[test]
fn array_items_lists_and_counts() {
    check(
        r#"{"type":"array","items":{"type":"number"}}"#,
        r#"{"type":"array","items":{"type":"integer"}}"#,
        &[],
    );
    check(
        r#"{"type":"array","items":{"type":"integer"}}"#,
        r#"{"type":"array","items":{"type":"string"}}"#,
        &[("TYPE_CHANGED", "#/items")],
    );
    check(
        r#"{"type":"array"}"#,
        r#"{"type":"array","items":{"type":"string"}}"#,
        &[],
    );
    check(
        r#"{"type":"array","items":{"type":"string"}}"#,
        r#"{"type":"array"}"#,
        &[("SCHEMA_ADDED", "#/items")],
    );
    check(
        r#"{"type":"array","maxItems":2,"minItems":1,"uniqueItems":true}"#,
        r#"{"type":"array","maxItems":3}"#,
        &[
            ("MAX_ITEMS_DECREASED", "#/maxItems"),
            ("MIN_ITEMS_ADDED", "#/minItems"),
            ("UNIQUE_ITEMS_ADDED", "#/uniqueItems"),
        ],
    );
}

#[test]
fn array_tuples_draft07_and_2020() {
    let closed_1 = r#"{"type":"array","items":[{"type":"integer"}],"additionalItems":false}"#;
    let open_2 = r#"{"type":"array","items":[{"type":"integer"},{"type":"integer"}]}"#;
    // Reading a closed one-tuple with a two-tuple: position 1 never written.
    check(open_2, closed_1, &[]);
    check(
        closed_1,
        open_2,
        &[
            (
                "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                "#/additionalItems",
            ),
            ("ADDITIONAL_ITEMS_REMOVED", "#/additionalItems"),
        ],
    );
    check(
        r#"{"type":"array","items":[{"type":"integer"}],"additionalItems":{"type":"string"}}"#,
        r#"{"type":"array","items":[{"type":"integer"},{"type":"integer"}],"additionalItems":false}"#,
        &[
            ("TYPE_CHANGED", "#/additionalItems"),
            (
                "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "#/additionalItems",
            ),
        ],
    );
    let s2020 = r#""$schema":"https://json-schema.org/draft/2020-12/schema""#;
    check(
        &format!(
            r#"{{{s2020},"type":"array","prefixItems":[{{"type":"integer"}}],"items":false}}"#
        ),
        &format!(r#"{{{s2020},"type":"array","prefixItems":[{{"type":"integer"}}]}}"#),
        &[("ADDITIONAL_ITEMS_REMOVED", "#/items")],
    );
    check(
        &format!(
            r#"{{{s2020},"type":"array","prefixItems":[{{"type":"number"}}],"items":{{"type":"string"}}}}"#
        ),
        &format!(
            r#"{{{s2020},"type":"array","prefixItems":[{{"type":"integer"}}],"items":{{"type":"string","maxLength":3}}}}"#
        ),
        &[],
    );
    check(
        &format!(
            r#"{{{s2020},"type":"array","prefixItems":[{{"type":"integer"}},{{"type":"string"}}]}}"#
        ),
        &format!(r#"{{{s2020},"type":"array","prefixItems":[{{"type":"integer"}}]}}"#),
        &[("ITEM_ADDED_TO_OPEN_CONTENT_MODEL", "#/prefixItems/1")],
    );
}

#[test]
fn one_of_and_any_of_may_extend_all_of_may_narrow() {
    let s_or_i = r#"{"oneOf":[{"type":"string"},{"type":"integer"}]}"#;
    check(s_or_i, r#"{"oneOf":[{"type":"string"}]}"#, &[]);
    check(s_or_i, r#"{"type":"integer"}"#, &[]);
    check(
        r#"{"oneOf":[{"type":"string"},{"type":"boolean"}]}"#,
        r#"{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"boolean"}]}"#,
        &[("SUM_TYPE_NARROWED", "#/oneOf")],
    );
    check(
        r#"{"anyOf":[{"type":"string"},{"type":"number"}]}"#,
        r#"{"anyOf":[{"type":"integer"},{"type":"string"}]}"#,
        &[],
    );
    check(
        r#"{"anyOf":[{"type":"string"},{"type":"boolean"}]}"#,
        r#"{"anyOf":[{"type":"string"},{"type":"null"}]}"#,
        &[("COMBINED_TYPE_SUBSCHEMAS_CHANGED", "#/anyOf")],
    );
    check(
        r#"{"oneOf":[{"type":"string"},{"type":"integer"}]}"#,
        r#"{"anyOf":[{"type":"string"},{"type":"integer"}]}"#,
        &[("COMBINED_TYPE_CHANGED", "#/oneOf")],
    );
    check(
        r#"{"anyOf":[{"type":"string"},{"type":"integer"}]}"#,
        s_or_i,
        &[],
    );
    let a = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
    let b = r#"{"required":["b"]}"#;
    let c = r#"{"required":["c"]}"#;
    check(
        &format!(r#"{{"allOf":[{a}]}}"#),
        &format!(r#"{{"allOf":[{a},{b}]}}"#),
        &[],
    );
    check(
        &format!(r#"{{"allOf":[{a},{b},{c}]}}"#),
        &format!(r#"{{"allOf":[{a},{b}]}}"#),
        &[("PRODUCT_TYPE_EXTENDED", "#/allOf")],
    );
    check(
        &format!(r#"{{"allOf":[{a},{c}]}}"#),
        a,
        &[("REQUIRED_ATTRIBUTE_ADDED", "#/allOf/1/required/0")],
    );
}

#[test]
fn keywords_beside_a_combinator_are_compared_too() {
    check(
        r#"{"type":"object","properties":{"a":{"type":"string","maxLength":1}},"oneOf":[{"required":["a"]},{"required":["b"]}]}"#,
        r#"{"type":"object","properties":{"a":{"type":"string"}},"oneOf":[{"required":["a"]},{"required":["b"]}]}"#,
        &[("MAX_LENGTH_ADDED", "#/properties/a/maxLength")],
    );
}

#[test]
fn not_is_contravariant() {
    check(r#"{"not":{"type":"string"}}"#, r#"{"type":"integer"}"#, &[]);
    check(
        r#"{"not":{"type":"integer"}}"#,
        r#"{"type":"number"}"#,
        &[("TYPE_CHANGED", "#")],
    );
    check(
        r#"{"not":{"type":"string"}}"#,
        r#"{"not":{"type":["string","integer"]}}"#,
        &[],
    );
    check(
        r#"{"not":{"type":["string","integer"]}}"#,
        r#"{"not":{"type":"string"}}"#,
        &[("NOT_TYPE_EXTENDED", "#/not")],
    );
}

#[test]
fn boolean_schemas_at_the_top_and_below() {
    // Karapace's verdicts at the top level.
    check("false", "true", &[]);
    check("true", "false", &[]);
    check(r#"{"type":"object"}"#, "false", &[("TYPE_CHANGED", "#")]);
    check("false", r#"{"type":"object"}"#, &[("TYPE_CHANGED", "#")]);
    // Below it, false means what it says.
    check(
        r#"{"type":"object","properties":{"a":{"type":"integer"}}}"#,
        r#"{"type":"object","properties":{"a":false}}"#,
        &[],
    );
    check(
        r#"{"type":"object","properties":{"a":false}}"#,
        r#"{"type":"object","properties":{"a":{"type":"integer"}}}"#,
        &[("TYPE_CHANGED", "#/properties/a")],
    );
}

#[test]
fn local_refs_are_followed() {
    check(
        r##"{"$defs":{"p":{"type":"integer","minimum":1}},"type":"array","items":{"$ref":"#/$defs/p"}}"##,
        r#"{"type":"array","items":{"type":"integer","minimum":0}}"#,
        &[("MINIMUM_INCREASED", "#/$defs/p/minimum")],
    );
    check(
        r##"{"definitions":{"a b":{"type":"number"}},"properties":{"x":{"$ref":"#/definitions/a%20b"}}}"##,
        r##"{"definitions":{"n":{"type":"integer"}},"properties":{"x":{"$ref":"#/definitions/n"}}}"##,
        &[],
    );
    // Anchors and ids.
    check(
        r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"s":{"$anchor":"str","type":"string","maxLength":2}},"$ref":"#str"}"##,
        r#"{"type":"string"}"#,
        &[("MAX_LENGTH_ADDED", "#/$defs/s/maxLength")],
    );
    check(
        r#"{"$id":"https://example.com/root.json","definitions":{"s":{"$id":"s.json","type":"string"}},"$ref":"s.json"}"#,
        r#"{"type":"string"}"#,
        &[],
    );
}

#[test]
fn ref_beside_other_keywords_depends_on_the_draft() {
    // Draft-07: siblings of $ref are ignored.
    check(
        r##"{"definitions":{"s":{"type":"string"}},"$ref":"#/definitions/s","maxLength":1}"##,
        r#"{"type":"string"}"#,
        &[],
    );
    // 2020-12: they apply too.
    check(
        r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":1}"##,
        r#"{"type":"string"}"#,
        &[("MAX_LENGTH_ADDED", "#/maxLength")],
    );
    check(
        r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":3}"##,
        r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":2}"##,
        &[],
    );
    check(
        r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":1}"##,
        r#"{"enum":["a","b"]}"#,
        &[],
    );
}

#[test]
fn refs_to_other_schemas_use_the_references() {
    let customer_v1 = r#"{"type":"object","properties":{"id":{"type":"integer"}}}"#;
    let customer_v2 = r#"{"type":"object","properties":{"id":{"type":"integer","maximum":10}}}"#;
    let order = r#"{"type":"object","properties":{"customer":{"$ref":"customer.json"}}}"#;
    let reader = with_refs(order, &[("customer.json", customer_v2)]);
    let writer = with_refs(order, &[("customer.json", customer_v1)]);
    check_schemas(
        &reader,
        &writer,
        &[("MAXIMUM_ADDED", "customer.json#/properties/id/maximum")],
    );
    check_schemas(&writer, &reader, &[]);
    // By $id and with a fragment.
    let reader = with_refs(
        r#"{"$ref":"https://example.com/defs.json#/$defs/id"}"#,
        &[(
            "defs.json",
            r#"{"$id":"https://example.com/defs.json","$defs":{"id":{"type":"number"}}}"#,
        )],
    );
    check_schemas(&reader, &schema(r#"{"type":"integer"}"#), &[]);
}

#[test]
fn recursive_schemas_terminate() {
    let list = |item: &str| {
        format!(
            r##"{{"definitions":{{"node":{{"type":"object","properties":{{"value":{item},"next":{{"$ref":"#/definitions/node"}}}}}}}},"$ref":"#/definitions/node"}}"##
        )
    };
    check(
        &list(r#"{"type":"number"}"#),
        &list(r#"{"type":"integer"}"#),
        &[],
    );
    check(
        &list(r#"{"type":"integer"}"#),
        &list(r#"{"type":"number"}"#),
        &[("TYPE_NARROWED", "#/definitions/node/properties/value")],
    );
    // Mutual recursion, and recursion through the root and combinators.
    let tree = r##"{"definitions":{"a":{"type":"object","properties":{"b":{"$ref":"#/definitions/b"}}},"b":{"anyOf":[{"type":"null"},{"$ref":"#/definitions/a"}]}},"properties":{"root":{"$ref":"#/definitions/a"},"self":{"$ref":"#"}}}"##;
    check(tree, tree, &[]);
    check(
        r##"{"anyOf":[{"type":"string"},{"$ref":"#"}]}"##,
        r##"{"anyOf":[{"$ref":"#"},{"type":"string"}]}"##,
        &[],
    );
}

#[test]
fn parse_rejects_what_is_not_a_schema() {
    assert!(parse_error("{").contains("not valid JSON"));
    assert!(parse_error("[]").contains("must be a JSON object or a boolean"));
    assert!(parse_error(r#"{"type":5}"#).contains("\"type\""));
    assert!(parse_error(r#"{"type":"text"}"#).contains("\"type\""));
    assert!(parse_error(r#"{"required":"a"}"#).contains("\"required\""));
    assert!(parse_error(r#"{"properties":{"a":3}}"#).contains("#/properties/a"));
    assert!(parse_error(r#"{"maxLength":-1}"#).contains("non-negative"));
    assert!(parse_error(r#"{"anyOf":[]}"#).contains("non-empty"));
    assert!(parse_error(r##"{"$ref":"#/definitions/missing"}"##).contains("resolves to nothing"));
    assert!(parse_error(r#"{"$ref":"other.json"}"#).contains("resolves to nothing"));
    assert!(parse_error(r##"{"$ref":"#"}"##).contains("refers back to itself"));
    assert!(
        parse_error(r##"{"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"}"##)
            .contains("refers back to itself")
    );
    assert!(
        parse_error(r##"{"required":["a"],"$ref":"#/required"}"##)
            .contains("does not point to a schema")
    );
    // A long chain of aliases: each `$ref` is followed once (following
    // every chain to its end took minutes for 5,000 links, and held a
    // registry's request that long); a broken or looping end is still
    // found, whichever link is checked first.
    let chain = |links: usize, end: &str| {
        let mut defs: Vec<String> = (0..links)
            .map(|i| format!(r##""d{i}":{{"$ref":"#/$defs/d{}"}}"##, i + 1))
            .collect();
        defs.push(format!(r#""d{links}":{end}"#));
        format!(
            r##"{{"$defs":{{{}}},"$ref":"#/$defs/d0"}}"##,
            defs.join(",")
        )
    };
    assert!(parse(&chain(5_000, r#"{"type":"string"}"#), &[]).is_ok());
    assert!(
        parse_error(&chain(5_000, r##"{"$ref":"#/$defs/missing"}"##))
            .contains("resolves to nothing")
    );
    assert!(
        parse_error(&chain(5_000, r##"{"$ref":"#/$defs/d2500"}"##))
            .contains("refers back to itself")
    );
    let bad_reference = parse(
        r#"{"$ref":"x.json"}"#,
        &[Reference {
            name: "x.json".into(),
            schema: "{".into(),
        }],
    );
    assert!(bad_reference.is_err_and(|e| e.message.contains("reference \"x.json\"")));
    assert!(
        parse(
            r##"{"enum":[{"type":5}],"default":{"$ref":"#/nowhere"}}"##,
            &[]
        )
        .is_ok()
    );
}

#[test]
fn canonical_form_sorts_keys_and_drops_whitespace() {
    let a = schema(r#"{ "type": "object", "properties": { "b": {"type":"string"}, "a": {} } }"#);
    let b = schema(r#"{"properties":{"a":{},"b":{"type":"string"}},"type":"object"}"#);
    assert_eq!(canonical_form(&a), canonical_form(&b));
    assert_eq!(
        canonical_form(&a),
        r#"{"properties":{"a":{},"b":{"type":"string"}},"type":"object"}"#
    );
    assert_eq!(canonical_form(&schema("true")), "true");
}

/// `depth` levels of `{"properties":{"a": …}}` around `leaf`.
fn nested(depth: usize, leaf: &str) -> String {
    let mut text = leaf.to_string();
    for _ in 0..depth {
        text = format!(r#"{{"properties":{{"a":{text}}}}}"#);
    }
    text
}

#[test]
fn deep_nesting_is_checked_without_overflow() {
    // 63 levels is as deep as the JSON parser's limit allows.
    let reader = nested(63, r#"{"type":"integer"}"#);
    let writer = nested(63, r#"{"type":"number"}"#);
    let found = compat(&schema(&reader), &schema(&writer));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind, "TYPE_NARROWED");
    assert!(parse(&nested(200, "{}"), &[]).is_err());
    let nots = format!("{}true{}", r#"{"not":"#.repeat(120), "}".repeat(120));
    let s = schema(&nots);
    assert!(compat(&s, &s).is_empty());
}

#[test]
fn long_ref_chains_and_huge_unions_stop_at_the_budget() {
    // A chain of 2000 definitions, each holding the next.
    let mut defs = serde_json::Map::new();
    for i in 0..2000 {
        defs.insert(
            format!("d{i}"),
            json!({"type":"object","properties":{"x":{"$ref": format!("#/definitions/d{}", i + 1)}}}),
        );
    }
    defs.insert("d2000".into(), json!({"type":"integer"}));
    let chain = json!({"definitions": defs, "$ref": "#/definitions/d0"}).to_string();
    let s = schema(&chain);
    let found = compat(&s, &s);
    assert!(
        found.iter().any(|i| i.kind == "SCHEMA_TOO_COMPLEX"),
        "{found:?}"
    );

    let union = |kind: &str, keyword: &str| {
        let branches: Vec<Value> = (0..400)
            .map(|i| json!({"type": kind, keyword: i}))
            .collect();
        json!({"anyOf": branches}).to_string()
    };
    let found = compat(
        &schema(&union("string", "maxLength")),
        &schema(&union("integer", "maximum")),
    );
    assert!(!found.is_empty());
}

/// Schema-flavoured random JSON.
fn arb_json() -> impl Strategy<Value = Value> {
    let keyword = prop::sample::select(vec![
        "type",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "items",
        "prefixItems",
        "additionalItems",
        "enum",
        "const",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "$ref",
        "definitions",
        "$defs",
        "$id",
        "$anchor",
        "$schema",
        "maximum",
        "exclusiveMinimum",
        "multipleOf",
        "maxLength",
        "pattern",
        "minItems",
        "uniqueItems",
        "dependencies",
        "dependentRequired",
        "default",
        "a",
        "^a",
    ]);
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..70).prop_map(|n| json!(n)),
        Just(json!(0.5)),
        prop::sample::select(vec![
            "null",
            "boolean",
            "integer",
            "number",
            "string",
            "array",
            "object",
            "#",
            "#/definitions/a",
            "#/$defs/a",
            "#/properties/a",
            "#a",
            "x.json",
            "https://json-schema.org/draft/2020-12/schema",
            "^a*",
            "(a+)+$",
            "a",
        ])
        .prop_map(|s| json!(s)),
        Just(json!({})),
    ];
    leaf.prop_recursive(6, 96, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keyword.clone(), inner.clone(), 0..5)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            prop::collection::btree_map(prop::sample::select(vec!["a", "b", "^a"]), inner, 0..3)
                .prop_map(|m| json!({ "properties": m, "definitions": { "a": m.get("a").cloned().unwrap_or(json!(true)) } })),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_and_check_never_panic(a in arb_json(), b in arb_json(), text in ".{0,40}") {
        let _ = parse(&text, &[]);
        let reference = Reference { name: "x.json".into(), schema: b.to_string() };
        let parsed_a = parse(&a.to_string(), std::slice::from_ref(&reference));
        let parsed_b = parse(&b.to_string(), &[]);
        if let Ok(a) = &parsed_a {
            let own = compat(a, a);
            prop_assert!(own.is_empty(), "not compatible with itself: {own:#?}");
            let _ = canonical_form(a);
        }
        if let (Ok(a), Ok(b)) = (&parsed_a, &parsed_b) {
            let _ = compat(a, b);
            let _ = compat(b, a);
        }
    }
}

/// Mostly valid schemas, recursive through `#` and `#/definitions/a`.
fn arb_schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::sample::select(vec![
            "null", "boolean", "integer", "number", "string", "array", "object",
        ])
        .prop_map(|t| json!({ "type": t })),
        Just(json!(true)),
        Just(json!(false)),
        Just(json!({})),
        Just(json!({"$ref": "#"})),
        Just(json!({"$ref": "#/definitions/a"})),
        Just(json!({"enum": ["x", 1, null]})),
        (0u64..4).prop_map(|n| json!({"type": "string", "maxLength": n})),
        (-2i64..3).prop_map(|n| json!({"type": "integer", "minimum": n})),
        Just(json!({"type": ["string", "null"]})),
        Just(json!({"type": "object", "propertyNames": {"maxLength": 2}})),
        Just(json!({"type": "array", "contains": {"type": "string"}, "minContains": 2})),
        Just(json!({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}})),
        Just(json!({"type": "object", "unevaluatedProperties": false})),
    ];
    leaf.prop_recursive(5, 48, 4, |inner| {
        let names = prop::sample::select(vec!["a", "b", "c"]);
        prop_oneof![
            (
                prop::collection::btree_map(names.clone(), inner.clone(), 0..3),
                prop::collection::vec(names, 0..2),
                prop_oneof![Just(None), Just(Some(json!(false))), inner.clone().prop_map(Some)],
            )
                .prop_map(|(props, required, additional)| {
                    let mut s = json!({"type": "object", "properties": props, "required": required});
                    if let Some(a) = additional {
                        s["additionalProperties"] = a;
                    }
                    s
                }),
            inner.clone().prop_map(|i| json!({"type": "array", "items": i})),
            (prop::collection::vec(inner.clone(), 1..3), any::<bool>())
                .prop_map(|(items, closed)| json!({"type": "array", "items": items, "additionalItems": !closed})),
            (prop::sample::select(vec!["anyOf", "oneOf", "allOf"]), prop::collection::vec(inner.clone(), 1..3))
                .prop_map(|(k, v)| json!({ k: v })),
            inner.clone().prop_map(|i| json!({"not": i})),
            inner.prop_map(|i| json!({"type": "object", "patternProperties": {"^a": i}})),
        ]
    })
}

fn with_definition(definition: Value, body: Value) -> Value {
    match body {
        Value::Object(mut map) => {
            map.insert("definitions".into(), json!({ "a": definition }));
            Value::Object(map)
        }
        other => json!({"definitions": {"a": definition}, "allOf": [other]}),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn valid_schemas_are_compatible_with_themselves(
        d1 in arb_schema(), b1 in arb_schema(), d2 in arb_schema(), b2 in arb_schema(),
    ) {
        let a = with_definition(d1, b1);
        let b = with_definition(d2, b2);
        // A `$ref` to itself with nothing around it is refused; skip those.
        let (Ok(a), Ok(b)) = (parse(&a.to_string(), &[]), parse(&b.to_string(), &[])) else {
            return Ok(());
        };
        let own = compat(&a, &a);
        prop_assert!(own.is_empty(), "{} is not compatible with itself: {own:#?}", canonical_form(&a));
        let _ = compat(&a, &b);
        let _ = compat(&b, &a);
    }
}

const D2020: &str = r#""$schema":"https://json-schema.org/draft/2020-12/schema""#;

/// A 2020-12 schema from the keywords `body` (an object's inside).
fn s2020(body: &str) -> String {
    if body.is_empty() {
        format!("{{{D2020}}}")
    } else {
        format!("{{{D2020},{body}}}")
    }
}

#[test]
fn unevaluated_properties_close_and_partially_open_like_additional_properties() {
    let open = s2020(r#""type":"object","properties":{"a":{"type":"string"}}"#);
    let closed = s2020(
        r#""type":"object","properties":{"a":{"type":"string"}},"unevaluatedProperties":false"#,
    );
    let partial = s2020(
        r#""type":"object","properties":{"a":{"type":"string"}},"unevaluatedProperties":{"type":"integer"}"#,
    );
    let with_b =
        s2020(r#""type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}}"#);
    // Closing is narrowing; the writer closed reads under any reader.
    check(
        &closed,
        &open,
        &[("ADDITIONAL_PROPERTIES_REMOVED", "#/unevaluatedProperties")],
    );
    check(&open, &closed, &[]);
    check(
        &partial,
        &open,
        &[("ADDITIONAL_PROPERTIES_NARROWED", "#/unevaluatedProperties")],
    );
    check(&open, &partial, &[]);
    check(
        &closed,
        &partial,
        &[("ADDITIONAL_PROPERTIES_REMOVED", "#/unevaluatedProperties")],
    );
    // A property the closed reader no longer declares.
    check(
        &closed,
        &with_b,
        &[
            (
                "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                "#/properties/b",
            ),
            ("ADDITIONAL_PROPERTIES_REMOVED", "#/unevaluatedProperties"),
        ],
    );
    // A property the partially open reader does not cover.
    let partial_strings = s2020(
        r#""type":"object","properties":{"a":{"type":"string"}},"unevaluatedProperties":{"type":"string"}"#,
    );
    let closed_with_b = s2020(
        r#""type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"unevaluatedProperties":false"#,
    );
    let closed_with_int_b = s2020(
        r#""type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"unevaluatedProperties":false"#,
    );
    check(&partial_strings, &closed_with_b, &[]);
    check(
        &partial_strings,
        &closed_with_int_b,
        &[
            ("TYPE_CHANGED", "#/unevaluatedProperties"),
            (
                "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "#/properties/b",
            ),
        ],
    );
    // The writer's closed model: a new optional property is fine.
    check(&closed_with_b, &closed, &[]);
    // `true` and `{}` leave the model open.
    let trivially_open =
        s2020(r#""type":"object","properties":{"a":{"type":"string"}},"unevaluatedProperties":{}"#);
    check(&trivially_open, &open, &[]);
}

#[test]
fn unevaluated_properties_see_what_in_place_subschemas_evaluate() {
    let base = r##""$defs":{"base":{"properties":{"id":{"type":"integer"}}}}"##;
    let closed = s2020(&format!(
        r##"{base},"type":"object","allOf":[{{"$ref":"#/$defs/base"}}],"properties":{{"name":{{"type":"string"}}}},"unevaluatedProperties":false"##
    ));
    let open = s2020(&format!(
        r##"{base},"type":"object","allOf":[{{"$ref":"#/$defs/base"}}],"properties":{{"name":{{"type":"string"}}}}"##
    ));
    check(&closed, &closed, &[]);
    check(&open, &closed, &[]);
    check(
        &closed,
        &open,
        &[("ADDITIONAL_PROPERTIES_REMOVED", "#/unevaluatedProperties")],
    );
    // "id" is evaluated by the allOf, so a closed writer holding it reads.
    let plain = s2020(
        r#""type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}},"additionalProperties":false"#,
    );
    check(&closed, &plain, &[]);
    // ... and one with a string "id" does not, through the allOf.
    let string_id = s2020(
        r#""type":"object","properties":{"id":{"type":"string"},"name":{"type":"string"}},"additionalProperties":false"#,
    );
    let found = compat(&schema(&closed), &schema(&string_id));
    assert!(found.iter().any(|i| i.kind == "TYPE_CHANGED"), "{found:#?}");
    // An in-place subschema with additionalProperties evaluates everything.
    let everything = s2020(
        r#""type":"object","allOf":[{"additionalProperties":{"type":"string"}}],"unevaluatedProperties":false"#,
    );
    let strings = s2020(r#""type":"object","additionalProperties":{"type":"string"}"#);
    check(&everything, &strings, &[]);
}

#[test]
fn unevaluated_properties_before_2019_are_not_read() {
    let closed = r#"{"type":"object","properties":{"a":{}},"unevaluatedProperties":false}"#;
    let open = r#"{"type":"object","properties":{"a":{}}}"#;
    check(
        closed,
        open,
        &[("KEYWORD_NOT_UNDERSTOOD", "#/unevaluatedProperties")],
    );
    // Draft-07 validators ignore it on the writer: not closed either.
    check(
        open,
        closed,
        &[("KEYWORD_NOT_UNDERSTOOD", "#/unevaluatedProperties")],
    );
    check(closed, closed, &[]);
    let found = compat(&schema(closed), &schema(open));
    assert!(found[0].message.contains("draft-07"), "{found:#?}");
}

#[test]
fn unevaluated_items_close_and_partially_open_like_items() {
    let tuple_open = s2020(r#""type":"array","prefixItems":[{"type":"string"}]"#);
    let tuple_closed =
        s2020(r#""type":"array","prefixItems":[{"type":"string"}],"unevaluatedItems":false"#);
    let tuple_ints = s2020(
        r#""type":"array","prefixItems":[{"type":"string"}],"unevaluatedItems":{"type":"integer"}"#,
    );
    let longer_closed = s2020(
        r#""type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"unevaluatedItems":false"#,
    );
    let longer_strings = s2020(
        r#""type":"array","prefixItems":[{"type":"string"},{"type":"string"}],"unevaluatedItems":false"#,
    );
    check(
        &tuple_closed,
        &tuple_open,
        &[("ADDITIONAL_ITEMS_REMOVED", "#/unevaluatedItems")],
    );
    check(&tuple_open, &tuple_closed, &[]);
    check(
        &tuple_ints,
        &tuple_open,
        &[("ADDITIONAL_ITEMS_NARROWED", "#/unevaluatedItems")],
    );
    check(
        &tuple_closed,
        &longer_closed,
        &[(
            "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
            "#/unevaluatedItems",
        )],
    );
    check(&tuple_ints, &longer_closed, &[]);
    check(
        &tuple_ints,
        &longer_strings,
        &[
            ("TYPE_CHANGED", "#/unevaluatedItems"),
            (
                "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "#/unevaluatedItems",
            ),
        ],
    );
    check(&longer_closed, &tuple_closed, &[]);
    // Without prefixItems it is the schema of every item.
    let all_ints = s2020(r#""type":"array","unevaluatedItems":{"type":"integer"}"#);
    let ints = s2020(r#""type":"array","items":{"type":"integer"}"#);
    let strings = s2020(r#""type":"array","items":{"type":"string"}"#);
    let any = s2020(r#""type":"array""#);
    check(&all_ints, &ints, &[]);
    check(&ints, &all_ints, &[]);
    check(
        &all_ints,
        &strings,
        &[("TYPE_CHANGED", "#/unevaluatedItems")],
    );
    check(&all_ints, &any, &[("SCHEMA_ADDED", "#/unevaluatedItems")]);
    // items beside it evaluates every position: nothing is left to it.
    let evaluated = s2020(r#""type":"array","items":{"type":"integer"},"unevaluatedItems":false"#);
    check(&evaluated, &ints, &[]);
    // An in-place subschema's prefixItems are evaluated.
    let composed = s2020(
        r#""type":"array","allOf":[{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]}],"unevaluatedItems":false"#,
    );
    check(&composed, &longer_closed, &[]);
    check(
        &composed,
        &tuple_open,
        &[
            (
                "ITEM_ADDED_TO_OPEN_CONTENT_MODEL",
                "#/allOf/0/prefixItems/1",
            ),
            ("ADDITIONAL_ITEMS_REMOVED", "#/unevaluatedItems"),
        ],
    );
}

#[test]
fn contains_may_relax_but_not_tighten() {
    let none = s2020(r#""type":"array""#);
    let contains = s2020(r#""type":"array","contains":{"type":"string"}"#);
    let two = s2020(r#""type":"array","contains":{"type":"string"},"minContains":2"#);
    let at_most_two = s2020(r#""type":"array","contains":{"type":"string"},"maxContains":2"#);
    let at_most_three = s2020(r#""type":"array","contains":{"type":"string"},"maxContains":3"#);
    let short = s2020(r#""type":"array","contains":{"type":"string","maxLength":3}"#);
    let zero = s2020(r#""type":"array","contains":{"type":"string"},"minContains":0"#);
    check(&none, &contains, &[]);
    check(&contains, &none, &[("CONTAINS_ADDED", "#/contains")]);
    check(&zero, &none, &[]);
    check(&contains, &two, &[]);
    check(
        &two,
        &contains,
        &[("MIN_CONTAINS_INCREASED", "#/minContains")],
    );
    check(&at_most_three, &at_most_two, &[]);
    check(
        &at_most_two,
        &at_most_three,
        &[("MAX_CONTAINS_DECREASED", "#/maxContains")],
    );
    check(
        &at_most_two,
        &contains,
        &[("MAX_CONTAINS_ADDED", "#/maxContains")],
    );
    check(&contains, &short, &[]);
    check(&short, &contains, &[("CONTAINS_CHANGED", "#/contains")]);
    // Every item a string and at least one: contains holds.
    let nonempty_strings = s2020(r#""type":"array","items":{"type":"string"},"minItems":1"#);
    check(&contains, &nonempty_strings, &[]);
    let strings = s2020(r#""type":"array","items":{"type":"string"}"#);
    check(&contains, &strings, &[("CONTAINS_ADDED", "#/contains")]);
    // Draft-07 has contains but no minContains.
    check(
        r#"{"type":"array","contains":{"type":"string"},"minContains":2}"#,
        r#"{"type":"array","contains":{"type":"string"}}"#,
        &[("KEYWORD_NOT_UNDERSTOOD", "#/minContains")],
    );
}

#[test]
fn property_names_may_relax_but_not_tighten() {
    let free = r#"{"type":"object"}"#;
    let short = r#"{"type":"object","propertyNames":{"maxLength":3}}"#;
    let shorter = r#"{"type":"object","propertyNames":{"maxLength":2}}"#;
    check(free, short, &[]);
    check(
        short,
        free,
        &[
            ("MAX_LENGTH_ADDED", "#/propertyNames/maxLength"),
            ("PROPERTY_NAMES_NARROWED", "#/propertyNames"),
        ],
    );
    check(short, shorter, &[]);
    check(
        shorter,
        short,
        &[
            ("MAX_LENGTH_DECREASED", "#/propertyNames/maxLength"),
            ("PROPERTY_NAMES_NARROWED", "#/propertyNames"),
        ],
    );
    // A closed writer produces only its declared names.
    let closed =
        r#"{"type":"object","properties":{"ab":{},"abcd":{}},"additionalProperties":false}"#;
    check(
        r#"{"type":"object","propertyNames":{"maxLength":3},"properties":{"ab":{},"abcd":{}}}"#,
        closed,
        &[("PROPERTY_NAMES_NARROWED", "#/propertyNames")],
    );
    check(
        r#"{"type":"object","propertyNames":{"pattern":"^ab"},"properties":{"ab":{},"abcd":{}}}"#,
        closed,
        &[],
    );
    // A writer enum of names.
    check(
        short,
        r#"{"type":"object","propertyNames":{"enum":["a","bb"]}}"#,
        &[],
    );
    check(
        shorter,
        r#"{"type":"object","propertyNames":{"enum":["a","bbb"]}}"#,
        &[("PROPERTY_NAMES_NARROWED", "#/propertyNames")],
    );
    // A pattern that matches every string restricts nothing.
    check(
        r#"{"type":"object","propertyNames":{"pattern":"a*"}}"#,
        free,
        &[],
    );
    check(
        r#"{"type":"object","propertyNames":{"pattern":"^a"}}"#,
        free,
        &[
            ("PATTERN_ADDED", "#/propertyNames/pattern"),
            ("PROPERTY_NAMES_NARROWED", "#/propertyNames"),
        ],
    );
    // Keywords it cannot read in a names schema.
    check(
        r#"{"type":"object","propertyNames":{"not":{"const":"x"}}}"#,
        free,
        &[("KEYWORD_NOT_UNDERSTOOD", "#/propertyNames")],
    );
}

/// Every keyword of the 2020-12 vocabularies (core, applicator,
/// unevaluated, validation, meta-data, format-annotation, content) is
/// either read by the checker or makes a change touching it incompatible.
#[test]
fn keywords_not_understood_make_any_change_incompatible() {
    let cases = [
        (
            "if",
            r#"{"properties":{"a":{"const":1}}}"#,
            r#"{"required":["a"]}"#,
        ),
        ("then", r#"{"required":["b"]}"#, r#"{"required":["c"]}"#),
        ("else", r#"{"required":["b"]}"#, r#"{"required":["c"]}"#),
    ];
    for (keyword, one, other) in cases {
        let with = format!(r#"{{"type":"object",{keyword:?}:{one}}}"#);
        let changed = format!(r#"{{"type":"object",{keyword:?}:{other}}}"#);
        let without = r#"{"type":"object"}"#;
        let path = format!("#/{keyword}");
        let expected = [("KEYWORD_NOT_UNDERSTOOD", path.as_str())];
        check(&with, without, &expected);
        check(without, &with, &expected);
        check(&with, &changed, &expected);
        check(&with, &with, &[]);
        let found = compat(&schema(&with), &schema(without));
        assert!(
            found[0].message.contains("does not understand"),
            "{found:#?}"
        );
    }
    // Inside a property too.
    check(
        r#"{"type":"object","properties":{"p":{"type":"object","if":{"required":["a"]},"then":{"required":["b"]}}}}"#,
        r#"{"type":"object","properties":{"p":{"type":"object"}}}"#,
        &[
            ("KEYWORD_NOT_UNDERSTOOD", "#/properties/p/if"),
            ("KEYWORD_NOT_UNDERSTOOD", "#/properties/p/then"),
        ],
    );
    // A dynamic reference's target may change while it stays the same.
    let tree = |leaf: &str| {
        s2020(&format!(
            r##""$dynamicAnchor":"node","type":"object","properties":{{"children":{{"type":"array","items":{{"$dynamicRef":"#node"}}}},"leaf":{leaf}}}"##
        ))
    };
    let (a, b) = (tree(r#"{"type":"string"}"#), tree(r#"{"type":"integer"}"#));
    check(&a, &a, &[]);
    check(
        &s2020(r#""$dynamicAnchor":"a","type":"object""#),
        &s2020(r#""$dynamicAnchor":"b","type":"object""#),
        &[("KEYWORD_NOT_UNDERSTOOD", "#/$dynamicAnchor")],
    );
    // 2019-09's recursive references, likewise.
    let recursive = |leaf: &str| {
        format!(
            r##"{{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"type":"object","properties":{{"next":{{"$recursiveRef":"#"}},"leaf":{leaf}}}}}"##
        )
    };
    let (ra, rb) = (
        recursive(r#"{"type":"string"}"#),
        recursive(r#"{"type":"integer"}"#),
    );
    check(&ra, &ra, &[]);
    let found = compat(&schema(&ra), &schema(&rb));
    for path in ["#/$recursiveAnchor", "#/properties/next/$recursiveRef"] {
        assert!(
            found
                .iter()
                .any(|i| i.kind == "KEYWORD_NOT_UNDERSTOOD" && i.path == path),
            "{path}: {found:#?}"
        );
    }
    let found = compat(&schema(&a), &schema(&b));
    assert!(
        found.iter().any(|i| i.kind == "KEYWORD_NOT_UNDERSTOOD"
            && i.path == "#/properties/children/items/$dynamicRef"),
        "{found:#?}"
    );
}

#[test]
fn annotations_never_make_a_change_incompatible() {
    for keyword in [
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
        "contentEncoding",
        "contentMediaType",
        "$comment",
    ] {
        let value = if matches!(keyword, "deprecated" | "readOnly" | "writeOnly") {
            "true".to_string()
        } else if keyword == "examples" {
            r#"["x"]"#.to_string()
        } else {
            r#""base64""#.to_string()
        };
        let with = format!(r#"{{"type":"string",{keyword:?}:{value}}}"#);
        check(&with, r#"{"type":"string"}"#, &[]);
        check(r#"{"type":"string"}"#, &with, &[]);
    }
    check(
        r#"{"type":"string","contentSchema":{"type":"integer"},"contentMediaType":"application/json"}"#,
        r#"{"type":"string"}"#,
        &[],
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Adding, removing or changing a keyword the checker does not read,
    /// anywhere in a schema, is never compatible.
    #[test]
    fn a_change_to_an_unread_keyword_is_incompatible(
        body in arb_schema(),
        keyword in prop::sample::select(vec!["if", "then", "else"]),
        value in prop_oneof![
            Just(json!({"required": ["a"]})),
            Just(json!({"type": "string"})),
            Just(json!(false)),
        ],
    ) {
        // A `false` writer at the top is a case of its own (see `check`).
        if body == json!(false) {
            return Ok(());
        }
        let Ok(plain) = parse(&body.to_string(), &[]) else { return Ok(()); };
        let mut changed = body.clone();
        match &mut changed {
            Value::Object(map) => {
                map.insert(keyword.to_string(), value);
            }
            other => *other = json!({ keyword: value, "allOf": [other.clone()] }),
        }
        // The body may hold the keyword with that value already: no change.
        if changed == body {
            return Ok(());
        }
        let changed = parse(&changed.to_string(), &[]).expect("still a schema");
        for (reader, writer) in [(&changed, &plain), (&plain, &changed)] {
            let found = compat(reader, writer);
            prop_assert!(
                found.iter().any(|i| i.kind == "KEYWORD_NOT_UNDERSTOOD"),
                "{} reading {}: {found:#?}",
                canonical_form(reader),
                canonical_form(writer)
            );
        }
    }
}

#[test]
fn nesting_beyond_the_parsers_limit_is_named() {
    let mut text = "{}".to_owned();
    for _ in 0..70 {
        text = format!(r#"{{"type":"object","properties":{{"a":{text}}}}}"#);
    }
    let message = parse_error(&text);
    assert!(
        message.contains("nested deeper than 128 levels of JSON objects and arrays"),
        "{message}"
    );
    assert!(message.contains("$defs"), "{message}");
}

#[test]
fn patterns_java_refuses_refuse_new_schemas_but_not_stored_ones() {
    use crate::{Schema, SchemaType};
    let bad = r#"{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2,1}$"}},"patternProperties":{"^x":{}}}"#;
    // Offered as new: refused, naming the first pattern Java refuses.
    let message = parse_error(bad);
    assert!(message.contains(r#""^[A-Z]{2,1}$""#), "{message}");
    assert!(message.contains("#/properties/code/pattern"), "{message}");
    assert!(message.contains("java.util.regex"), "{message}");
    assert!(Schema::parse(SchemaType::Json, bad, &[]).is_err());
    // Read back as stored: kept, with the reason still told.
    let stored = super::parse_stored(bad, &[]).expect("a stored schema parses");
    let reason = stored.java_pattern_error().expect("the pattern is noted");
    assert!(
        reason.message.contains("#/properties/code/pattern"),
        "{reason}"
    );
    let any = Schema::parse_stored(SchemaType::Json, bad, &[]).expect("parses");
    assert_eq!(any.new_schema_error(), Some(reason));
    // A stored schema still takes part in checks: dropping the pattern
    // relaxes it.
    let fixed = schema(
        r#"{"type":"object","properties":{"code":{"type":"string"}},"patternProperties":{"^x":{}}}"#,
    );
    assert!(fixed.java_pattern_error().is_none());
    assert_eq!(compat(&fixed, &stored), []);
    // Structural errors are errors either way.
    assert!(super::parse_stored(r#"{"type":5,"pattern":"("}"#, &[]).is_err());
    // A reference was accepted on its own: its patterns are not the new
    // schema's.
    let references = [Reference {
        name: "common.json".into(),
        schema: r#"{"type":"string","pattern":"a{2,1}"}"#.into(),
    }];
    let referring = parse(r#"{"$ref":"common.json"}"#, &references).expect("parses");
    assert!(referring.java_pattern_error().is_none());
    // Patterns Java takes are never noted.
    let good = super::parse_stored(r#"{"type":"string","pattern":"^(?=.*\\d).{8,}$"}"#, &[])
        .expect("parses");
    assert!(good.java_pattern_error().is_none());
}
