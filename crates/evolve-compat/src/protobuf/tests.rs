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

/// A small deterministic generator of random `.proto` files (xorshift),
/// for the render round-trip property: every construct the renderer
/// writes, in random combinations.
struct ProtoGen {
    state: u64,
}

impl ProtoGen {
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    fn file(&mut self) -> String {
        let proto3 = self.chance(60);
        let meta = self.chance(40);
        let date = self.chance(30);
        let mut out = String::new();
        out.push_str(if proto3 {
            "syntax = \"proto3\";\n"
        } else {
            "syntax = \"proto2\";\n"
        });
        if self.chance(70) {
            out.push_str("package gen.pkg;\n");
        }
        out.push_str("import \"google/protobuf/timestamp.proto\";\n");
        if meta {
            out.push_str("import \"confluent/meta.proto\";\n");
        }
        if date {
            out.push_str("import public \"google/type/date.proto\";\n");
        }
        if self.chance(50) {
            out.push_str("option java_package = \"com.example.gen\";\n");
        }
        if self.chance(30) {
            out.push_str("option optimize_for = CODE_SIZE;\n");
        }
        if meta && self.chance(50) {
            out.push_str(
                "option (confluent.file_meta) = { doc: \"file \\\"doc\\\"\" params { key: \"owner\" value: \"team\" } };\n",
            );
        }
        let messages = 1 + self.below(3) as usize;
        let enums = self.below(3) as usize;
        let mut types: Vec<String> = vec!["google.protobuf.Timestamp".into()];
        if date {
            types.push("google.type.Date".into());
        }
        types.extend((0..messages).map(|i| format!("M{i}")));
        let enum_types: Vec<String> = (0..enums).map(|i| format!("E{i}")).collect();
        for i in 0..messages {
            self.message(
                &mut out,
                &format!("M{i}"),
                proto3,
                meta,
                &types,
                &enum_types,
                0,
            );
        }
        for e in &enum_types {
            self.enumeration(&mut out, e, 0);
        }
        if !proto3 && self.chance(50) {
            out.push_str("extend M0 { optional string gen_ext = 1000; }\n");
        }
        if self.chance(30) {
            out.push_str(
                "service Svc { rpc Get (M0) returns (stream M0); rpc Put (stream M0) returns (M0) { option deprecated = true; } }\n",
            );
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        out: &mut String,
        name: &str,
        proto3: bool,
        meta: bool,
        types: &[String],
        enums: &[String],
        depth: usize,
    ) {
        let indent = "  ".repeat(depth);
        out.push_str(&format!("{indent}message {name} {{\n"));
        if self.chance(15) {
            out.push_str(&format!("{indent}  option deprecated = true;\n"));
        }
        if meta && self.chance(30) {
            out.push_str(&format!(
                "{indent}  option (confluent.message_meta).doc = \"msg\";\n"
            ));
        }
        let mut number = 0;
        let fields = self.below(6);
        for f in 0..fields {
            number += 1 + self.below(3);
            let choice = self.below(10);
            if choice < 2 && depth < 2 {
                let nested = format!("N{f}");
                self.message(out, &nested, proto3, meta, types, enums, depth + 1);
                let label = if proto3 { "" } else { "optional " };
                out.push_str(&format!(
                    "{indent}  {label}{nested} nested_{f} = {number};\n"
                ));
                continue;
            }
            if choice == 2 {
                let key = self.pick(&["string", "int32", "int64", "bool", "uint32", "sfixed64"]);
                let value = self.type_name(types, enums);
                out.push_str(&format!(
                    "{indent}  map<{key}, {value}> map_{f} = {number};\n"
                ));
                continue;
            }
            if choice == 3 {
                out.push_str(&format!("{indent}  oneof choice_{f} {{\n"));
                let members = 1 + self.below(3);
                for m in 0..members {
                    let ty = self.type_name(types, enums);
                    out.push_str(&format!("{indent}    {ty} one_{f}_{m} = {number};\n"));
                    number += 1;
                }
                out.push_str(&format!("{indent}  }}\n"));
                continue;
            }
            let scalar = self.chance(60);
            let ty = if scalar {
                self.pick(&[
                    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
                    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
                ])
                .to_owned()
            } else {
                self.type_name(types, enums)
            };
            let label = match (proto3, self.below(3)) {
                (true, 0) => "",
                (true, 1) => "repeated ",
                (true, _) => "optional ",
                (false, 0) => "optional ",
                (false, 1) => "repeated ",
                (false, _) => "required ",
            };
            let mut options = Vec::new();
            if self.chance(15) {
                options.push("deprecated = true".to_owned());
            }
            if self.chance(15) {
                options.push(format!("json_name = \"custom{f}\""));
            }
            if label == "repeated "
                && scalar
                && !matches!(ty.as_str(), "string" | "bytes")
                && self.chance(40)
            {
                options.push(format!("packed = {}", self.chance(50)));
            }
            if !proto3 && label != "repeated " && scalar && self.chance(50) {
                let default = match ty.as_str() {
                    "string" => "\"a \\\"quoted\\\" \\n line\"".to_owned(),
                    "bytes" => "\"\\001\\377x\"".to_owned(),
                    "bool" => "true".to_owned(),
                    "double" | "float" => self.pick(&["1.5", "-inf", "nan", "1e+20"]).to_owned(),
                    "uint32" | "uint64" | "fixed32" | "fixed64" => "7".to_owned(),
                    _ => "-3".to_owned(),
                };
                options.push(format!("default = {default}"));
            }
            if meta && self.chance(20) {
                options.push(
                    "(confluent.field_meta) = { doc: \"pii\" tags: [\"PII\", \"GDPR\"] }"
                        .to_owned(),
                );
            }
            let options = if options.is_empty() {
                String::new()
            } else {
                format!(" [{}]", options.join(", "))
            };
            out.push_str(&format!(
                "{indent}  {label}{ty} field_{f}_x = {number}{options};\n"
            ));
        }
        if self.chance(30) {
            self.enumeration(out, "Inner", depth + 1);
        }
        if self.chance(30) {
            out.push_str(&format!("{indent}  reserved 500, 510 to 520;\n"));
            out.push_str(&format!("{indent}  reserved \"gone\", \"old\";\n"));
        }
        if self.chance(20) {
            out.push_str(&format!("{indent}  reserved 10000 to max;\n"));
        }
        if !proto3 && name == "M0" {
            out.push_str(&format!("{indent}  extensions 1000 to 1999;\n"));
        }
        out.push_str(&format!("{indent}}}\n"));
    }

    fn type_name(&mut self, types: &[String], enums: &[String]) -> String {
        if !enums.is_empty() && self.chance(30) {
            return enums[self.below(enums.len() as u64) as usize].clone();
        }
        types[self.below(types.len() as u64) as usize].clone()
    }

    fn enumeration(&mut self, out: &mut String, name: &str, depth: usize) {
        let indent = "  ".repeat(depth);
        out.push_str(&format!("{indent}enum {name} {{\n"));
        let alias = self.chance(30);
        if alias {
            out.push_str(&format!("{indent}  option allow_alias = true;\n"));
        }
        let values = 1 + self.below(4);
        for v in 0..values {
            let deprecated = if self.chance(20) {
                " [deprecated = true]"
            } else {
                ""
            };
            out.push_str(&format!("{indent}  {name}_V{v} = {v}{deprecated};\n"));
        }
        if alias {
            out.push_str(&format!("{indent}  {name}_ALIAS = 0;\n"));
        }
        if self.chance(30) {
            out.push_str(&format!("{indent}  reserved 100 to 110, 200 to max;\n"));
            out.push_str(&format!("{indent}  reserved \"{name}_OLD\";\n"));
        }
        out.push_str(&format!("{indent}}}\n"));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// A random file renders, and the rendered text compiles to the same
    /// canonical form (so a descriptor sent by a serializer and its
    /// rendering are one schema), with the same imports.
    #[test]
    fn rendered_text_compiles_to_the_same_file(seed in 1u64..u64::MAX) {
        let text = ProtoGen { state: seed }.file();
        let schema = parse(&text, &[]).unwrap_or_else(|e| panic!("generated text does not compile: {e}\n{text}"));
        let rendered = render::render(&schema.file)
            .unwrap_or_else(|e| panic!("not rendered: {e:?}\n{text}"));
        let back = parse(&rendered, &[]).unwrap_or_else(|e| panic!("rendered text does not compile: {e}\n{rendered}"));
        assert!(
            canonical_form(&back) == canonical_form(&schema),
            "rendering changed the file:\n{text}\n---\n{rendered}"
        );
        // The serialized form renders to the same text.
        let serialized = super::serialized(&schema);
        let from_descriptor = parse(&serialized, &[]).expect("serialized form parses");
        proptest::prop_assert_eq!(canonical_form(&from_descriptor), canonical_form(&schema));
        proptest::prop_assert_eq!(render(&from_descriptor, &[]), Some(rendered));
    }
}

#[test]
fn confluents_bundled_imports_compile_without_references() {
    for name in bundled_imports() {
        let text =
            format!("syntax = \"proto3\";\nimport \"{name}\";\nmessage Uses {{ int32 a = 1; }}\n");
        parse(&text, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let names: Vec<&str> = bundled_imports().collect();
    for wanted in [
        "confluent/meta.proto",
        "confluent/type/decimal.proto",
        "google/type/date.proto",
        "google/type/money.proto",
        "google/type/latlng.proto",
        "google/type/timeofday.proto",
        "google/type/dayofweek.proto",
        "google/type/month.proto",
        "google/type/color.proto",
        "google/type/postal_address.proto",
        "google/type/phone_number.proto",
        "google/type/interval.proto",
        "google/type/expr.proto",
        "google/type/fraction.proto",
        "google/type/calendar_period.proto",
        "google/type/quaternion.proto",
        "google/type/datetime.proto",
        "google/type/decimal.proto",
    ] {
        assert!(names.contains(&wanted), "{wanted} is not bundled");
    }
    let schema = parse(
        "syntax = \"proto3\";\nimport \"confluent/type/decimal.proto\";\nimport \"google/type/date.proto\";\n\
         import \"confluent/meta.proto\";\n\
         message P {\n  confluent.type.Decimal amount = 1 [(confluent.field_meta).params = { key: \"precision\" value: \"8\" }];\n  google.type.Date day = 2;\n}\n",
        &[],
    )
    .expect("compiles");
    assert!(canonical_form(&schema).contains(".confluent.type.Decimal"));
    // A reference of a bundled name wins, as Confluent's references do.
    let own = reference(
        "google/type/date.proto",
        "syntax = \"proto3\";\npackage google.type;\nmessage Date { string iso = 1; }\n",
    );
    let schema = parse(
        "syntax = \"proto3\";\nimport \"google/type/date.proto\";\nmessage P { google.type.Date d = 1; }\n",
        &[own],
    )
    .expect("compiles");
    let date = schema
        .file()
        .parent_pool()
        .get_message_by_name("google.type.Date")
        .expect("Date");
    assert!(date.get_field_by_name("iso").is_some());
}

#[test]
fn a_serialized_descriptor_and_its_text_have_one_canonical_form() {
    // What Confluent's Python serializer registers for
    // `message Ping { int64 id = 1; string note_text = 2; }` in package
    // audit2 (a FileDescriptorProto without json_name, base64).
    let serialized = "ChFhdWRpdDIvcGluZy5wcm90bxIGYXVkaXQyIiUKBFBpbmcSCgoCaWQYASABKAMSEQoJbm90ZV90ZXh0GAIgASgJYgZwcm90bzM=";
    assert!(is_serialized(serialized));
    let text = "syntax = \"proto3\";\npackage audit2;\n\n// a comment\nmessage Ping {\n  int64 id = 1;\n  string note_text = 2;\n}\n";
    assert!(!is_serialized(text));
    let from_descriptor = parse(serialized, &[]).expect("descriptor");
    let from_text = parse(text, &[]).expect("text");
    assert_eq!(canonical_form(&from_descriptor), canonical_form(&from_text));
    let one_line = parse(
        "syntax = \"proto3\"; package audit2; message Ping { int64 id = 1; string note_text = 2; }",
        &[],
    )
    .expect("text");
    assert_eq!(canonical_form(&one_line), canonical_form(&from_text));
    // Rendered from the descriptor: text, without the comment, the same file.
    let rendered = render(&from_descriptor, &[]).expect("rendered");
    assert_eq!(
        rendered,
        "syntax = \"proto3\";\npackage audit2;\n\nmessage Ping {\n  int64 id = 1;\n  string note_text = 2;\n}\n"
    );
    assert_eq!(render(&from_text, &[]), Some(rendered));
    // proto2 written out or left implicit is the same file.
    let implicit = parse("message M { optional int32 a = 1; }", &[]).expect("proto2");
    let explicit = parse(
        "syntax = \"proto2\";\nmessage M { optional int32 a = 1; }",
        &[],
    )
    .expect("proto2");
    assert_eq!(canonical_form(&implicit), canonical_form(&explicit));
}
