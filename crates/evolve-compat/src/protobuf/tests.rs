use super::*;

fn reference(name: &str, schema: &str) -> Reference {
    Reference {
        name: name.to_owned(),
        schema: schema.to_owned(),
    }
}

fn parse_error(text: &str, references: &[Reference]) -> String {
    match parse(text, references) {
        Ok(_) => panic!("expected an error for {text:?}"),
        Err(err) => {
            assert_eq!(err.schema_type, SchemaType::Protobuf);
            assert!(
                !err.message.contains('\n'),
                "not one line: {:?}",
                err.message
            );
            err.message
        }
    }
}

#[test]
fn syntax_error_has_line_and_column() {
    let message = parse_error("syntax = \"proto3\";\nmessage A {\n  int32 a = ;\n}\n", &[]);
    assert!(message.starts_with("schema.proto:3:13: "), "{message}");
}

#[test]
fn unknown_type_has_line_and_column() {
    let message = parse_error(
        "syntax = \"proto3\";\nmessage A {\n  Missing a = 1;\n}\n",
        &[],
    );
    assert!(message.starts_with("schema.proto:3:"), "{message}");
    assert!(message.contains("Missing"), "{message}");
}

#[test]
fn missing_import_is_named() {
    let message = parse_error(
        "syntax = \"proto3\";\nimport \"other.proto\";\nmessage A { int32 a = 1; }\n",
        &[reference("unrelated.proto", "syntax = \"proto3\";")],
    );
    assert!(
        message.starts_with("import \"other.proto\" not found (at schema.proto:2:1): "),
        "{message}"
    );
    let err = parse(
        "syntax = \"proto3\";\nimport \"other.proto\";\nmessage A { int32 a = 1; }\n",
        &[],
    )
    .unwrap_err();
    assert!(message.ends_with("; pass it as a reference"), "{message}");
    assert_eq!(err.missing_import.as_deref(), Some("other.proto"));
}

#[test]
fn missing_import_of_a_reference_names_both() {
    let err = parse(
        "syntax = \"proto3\";\nimport \"common.proto\";\nmessage A { C c = 1; }\n",
        &[reference(
            "common.proto",
            "syntax = \"proto3\";\nimport \"money.proto\";\nmessage C { int32 x = 1; }\n",
        )],
    )
    .unwrap_err();
    assert!(
        err.message
            .starts_with("import \"money.proto\" not found (at common.proto:2:1)"),
        "{}",
        err.message
    );
    assert_eq!(err.missing_import.as_deref(), Some("money.proto"));
}

#[test]
fn error_in_reference_names_the_reference() {
    let message = parse_error(
        "syntax = \"proto3\";\nimport \"other.proto\";\nmessage A { int32 a = 1; }\n",
        &[reference(
            "other.proto",
            "syntax = \"proto3\";\nmessage B {",
        )],
    );
    assert!(message.starts_with("other.proto:2:"), "{message}");
}

#[test]
fn display_is_one_line_with_the_type() {
    let err = parse("message {", &[]).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.starts_with("invalid Protobuf schema: schema.proto:1:"),
        "{shown}"
    );
}

#[test]
fn imports_come_from_references_and_bundled_types() {
    let schema = parse(
        "syntax = \"proto3\";\npackage acme;\nimport \"common/money.proto\";\n\
         import \"google/protobuf/timestamp.proto\";\n\
         message Order { common.Money total = 1; google.protobuf.Timestamp at = 2; }\n",
        &[reference(
            "common/money.proto",
            "syntax = \"proto3\";\npackage common;\nmessage Money { int64 units = 1; }\n",
        )],
    )
    .expect("parses");
    assert_eq!(schema.file.package_name(), "acme");
    assert_eq!(schema.file.messages().len(), 1);
}

#[test]
fn reference_named_like_the_main_file_is_fine() {
    let schema = parse(
        "syntax = \"proto3\";\nimport \"schema.proto\";\nmessage A { B b = 1; }\n",
        &[reference(
            "schema.proto",
            "syntax = \"proto3\";\nmessage B { int32 x = 1; }\n",
        )],
    )
    .expect("parses");
    assert_eq!(
        schema.file.messages().next().map(|m| m.name().to_owned()),
        Some("A".to_owned())
    );
}

#[test]
fn canonical_form_ignores_formatting_and_spelling() {
    let a = parse(
        "syntax = \"proto3\";\npackage acme;\n// a comment\nmessage Order {\n  Status s = 1;\n  message Status { int32 x = 1; }\n}\n",
        &[],
    )
    .unwrap();
    let b = parse(
        "syntax=\"proto3\"; package acme; message Order { .acme.Order.Status s = 1; message Status { int32 x = 1; } }",
        &[],
    )
    .unwrap();
    let c = parse(
        "syntax=\"proto3\"; package acme; message Order { .acme.Order.Status s = 1; message Status { int64 x = 1; } }",
        &[],
    )
    .unwrap();
    assert_eq!(canonical_form(&a), canonical_form(&b));
    assert_ne!(canonical_form(&a), canonical_form(&c));
    assert_eq!(canonical_form(&a), canonical_form(&a.clone()));
}

#[test]
fn canonical_form_keeps_custom_options() {
    let options = "syntax = \"proto3\";\npackage opts;\nimport \"google/protobuf/descriptor.proto\";\n\
                   extend google.protobuf.MessageOptions { string tag = 50001; }\n";
    let a = parse(
        &format!("{options}message A {{ option (opts.tag) = \"x\"; int32 a = 1; }}"),
        &[],
    )
    .unwrap();
    let b = parse(
        &format!("{options}message A {{ option (opts.tag) = \"y\"; int32 a = 1; }}"),
        &[],
    )
    .unwrap();
    assert_ne!(canonical_form(&a), canonical_form(&b));
}

#[test]
fn deep_option_values_are_refused_not_a_stack_overflow() {
    let head = "syntax = \"proto2\";\nimport \"google/protobuf/descriptor.proto\";\n\
                message V { optional V v = 1; optional int32 x = 2; }\n\
                extend google.protobuf.MessageOptions { optional V o = 5000; }\n";
    let value = |depth: usize| format!("{{ {} x: 1 {} }}", "v { ".repeat(depth), "}".repeat(depth));
    // Deep but within the limit: fine.
    parse(
        &format!("{head}message A {{ option (o) = {}; }}", value(40)),
        &[],
    )
    .expect("parses");
    for depth in [65, 1_000, 100_000] {
        let message = parse_error(
            &format!("{head}message A {{ option (o) = {}; }}", value(depth)),
            &[],
        );
        assert!(message.starts_with("schema.proto:5:"), "{message}");
        assert!(message.contains("deeper than 64 levels"), "{message}");
    }
    // Also in a reference, and with the other bracket styles.
    let deep = format!(
        "syntax = \"proto3\"; message B {{ option (x) = {}{}; }}",
        "<a ".repeat(500),
        ">".repeat(500)
    );
    let message = parse_error(
        "syntax = \"proto3\";\nimport \"b.proto\";\nmessage A { int32 a = 1; }\n",
        &[reference("b.proto", &deep)],
    );
    assert!(message.starts_with("b.proto:1:"), "{message}");
}

#[test]
fn brackets_in_comments_and_strings_do_not_count() {
    let noise = "{[<(".repeat(100);
    let text = format!(
        "syntax = \"proto3\";\n// {noise}\n/* {noise} */\nmessage A {{\n  string a = 1 [json_name = \"{noise}\"];\n}}\n"
    );
    parse(&text, &[]).expect("parses");
}

#[test]
fn deeply_nested_messages_are_an_error() {
    let text = format!(
        "syntax = \"proto3\"; {} {}",
        "message M { ".repeat(60),
        "}".repeat(60)
    );
    let message = parse_error(&text, &[]);
    assert!(message.contains("schema.proto:1:"), "{message}");
}
