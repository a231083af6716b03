//! One test per rule; the expected documents were taken from PostgreSQL 15
//! (`coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}')::text`, spaces removed).

use super::*;

fn doc(columns: &[Column], values: &[Option<&str>]) -> Result<String, DocumentError> {
    let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.map(str::as_bytes)).collect();
    let mut out = b"prefix:".to_vec();
    encode_row(columns, &values, &mut out)?;
    let s = String::from_utf8(out).expect("documents are UTF-8");
    Ok(s.strip_prefix("prefix:").expect("prefix kept").to_owned())
}

fn one(kind: TypeKind, value: &str) -> Result<String, DocumentError> {
    doc(&[Column::new("v", kind)], &[Some(value)])
}

/// The document of a single column `v`, without the `{"v":` and `}`.
fn value(kind: TypeKind, text: &str) -> String {
    let d = one(kind, text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    d.strip_prefix("{\"v\":")
        .and_then(|d| d.strip_suffix('}'))
        .unwrap_or_else(|| panic!("{text:?} gave {d}"))
        .to_owned()
}

fn array(element: TypeKind) -> TypeKind {
    TypeKind::Array {
        element: Box::new(element),
        delimiter: b',',
    }
}

fn composite(fields: &[(&str, TypeKind)]) -> TypeKind {
    TypeKind::Composite {
        fields: fields
            .iter()
            .map(|(n, k)| (n.to_string(), k.clone()))
            .collect(),
    }
}

#[test]
fn keys_are_in_jsonb_order_and_nulls_are_stripped() {
    let columns = [
        Column::new("bb", TypeKind::Integer),
        Column::new("a", TypeKind::Integer),
        Column::new("c", TypeKind::Text),
        Column::new("B", TypeKind::Integer),
        Column::new("aaa", TypeKind::Integer),
    ];
    assert_eq!(
        doc(
            &columns,
            &[Some("1"), Some("2"), None, Some("3"), Some("4")]
        )
        .unwrap(),
        r#"{"B":3,"a":2,"bb":1,"aaa":4}"#
    );
    assert_eq!(
        doc(&columns, &[None, None, None, None, None]).unwrap(),
        "{}"
    );
    assert_eq!(doc(&[], &[]).unwrap(), "{}");
}

#[test]
fn duplicate_column_names_keep_the_last() {
    let columns = [
        Column::new("a", TypeKind::Integer),
        Column::new("a", TypeKind::Integer),
    ];
    assert_eq!(
        doc(&columns, &[Some("1"), Some("2")]).unwrap(),
        r#"{"a":2}"#
    );
    // The last one wins before nulls are stripped, as in jsonb.
    assert_eq!(doc(&columns, &[Some("1"), None]).unwrap(), "{}");
}

#[test]
fn booleans() {
    assert_eq!(value(TypeKind::Bool, "t"), "true");
    assert_eq!(value(TypeKind::Bool, "f"), "false");
    assert!(one(TypeKind::Bool, "true").is_err());
}

#[test]
fn numbers_go_through_numeric() {
    assert_eq!(value(TypeKind::Integer, "-32768"), "-32768");
    assert_eq!(value(TypeKind::Numeric, "1.50"), "1.50");
    assert_eq!(
        value(TypeKind::Numeric, "0.00000000000000000001"),
        "0.00000000000000000001"
    );
    assert_eq!(value(TypeKind::Float, "1.5e-07"), "0.00000015");
    assert_eq!(value(TypeKind::Float, "-0"), "0");
    assert_eq!(
        value(TypeKind::Float, "1e+300"),
        format!("1{}", "0".repeat(300))
    );
    assert!(one(TypeKind::Integer, "12a").is_err());
}

#[test]
fn nan_and_infinity_become_strings() {
    assert_eq!(value(TypeKind::Numeric, "NaN"), r#""NaN""#);
    assert_eq!(value(TypeKind::Float, "Infinity"), r#""Infinity""#);
    assert_eq!(value(TypeKind::Float, "-Infinity"), r#""-Infinity""#);
}

#[test]
fn oid_money_and_point_are_text() {
    assert_eq!(TypeKind::from_builtin_oid(26), TypeKind::Text);
    assert_eq!(TypeKind::from_builtin_oid(790), TypeKind::Text);
    assert_eq!(TypeKind::from_builtin_oid(600), TypeKind::Text);
    assert_eq!(TypeKind::from_builtin_oid(23), TypeKind::Integer);
    assert_eq!(value(TypeKind::Text, "12345"), r#""12345""#);
    assert_eq!(value(TypeKind::Text, "$12.34"), r#""$12.34""#);
}

#[test]
fn dates_and_timestamps() {
    assert_eq!(value(TypeKind::Date, "0044-03-15 BC"), r#""0044-03-15 BC""#);
    assert_eq!(value(TypeKind::Date, "infinity"), r#""infinity""#);
    assert_eq!(
        value(TypeKind::Timestamp, "0044-03-15 10:00:00.5 BC"),
        r#""0044-03-15T10:00:00.5 BC""#
    );
    assert_eq!(
        value(TypeKind::TimestampTz, "2024-01-02 03:04:05.123456+00"),
        r#""2024-01-02T03:04:05.123456+00:00""#
    );
    assert_eq!(
        value(TypeKind::TimestampTz, "0044-03-15 10:00:00.5+00 BC"),
        r#""0044-03-15T10:00:00.5+00:00 BC""#
    );
    let e = one(TypeKind::Date, "01/02/2024").unwrap_err();
    assert!(e.to_string().contains("DateStyle"), "{e}");
}

#[test]
fn text_is_escaped_like_escape_json() {
    assert_eq!(
        value(TypeKind::Text, "a\u{1}\u{7f}/\u{8}\u{c}\n\r\t\"\\é😀\u{1f}"),
        "\"a\\u0001\u{7f}/\\b\\f\\n\\r\\t\\\"\\\\é😀\\u001f\""
    );
    assert_eq!(value(TypeKind::Text, "ab   "), r#""ab   ""#);
}

#[test]
fn bad_text_is_refused() {
    let e = doc(&[Column::new("v", TypeKind::Text)], &[Some("a\0b")]).unwrap_err();
    assert!(matches!(
        e,
        DocumentError::Value {
            problem: ValueProblem::NulByte,
            ..
        }
    ));
    let mut out = Vec::new();
    let e = encode_row(
        &[Column::new("v", TypeKind::Text)],
        &[Some(&b"\xff"[..])],
        &mut out,
    )
    .unwrap_err();
    assert!(matches!(
        e,
        DocumentError::Value {
            problem: ValueProblem::InvalidUtf8,
            ..
        }
    ));
    assert!(out.is_empty(), "out is left as it was on error");
}

#[test]
fn json_is_parsed_into_jsonb() {
    assert_eq!(
        value(
            TypeKind::Json,
            r#"{"a":1.0e2,"b":1E+2,"a":3,"c":-0,"d":1.50e1,"e":{"x":null},"f":[null]}"#
        ),
        r#"{"a":3,"b":100,"c":0,"d":15.0,"e":{},"f":[null]}"#
    );
    assert_eq!(
        value(TypeKind::Json, r#""\u00e9\/\u001f\b""#),
        "\"é/\\u001f\\b\""
    );
    assert_eq!(value(TypeKind::Json, r#""\ud83d\ude00""#), "\"😀\"");
    assert_eq!(value(TypeKind::Json, " [ 1 , 2 ] "), "[1,2]");
    assert_eq!(value(TypeKind::Json, r#"{"":1}"#), r#"{"":1}"#);
    assert_eq!(
        value(TypeKind::Json, r#"{"a":1,"a":null,"b":2}"#),
        r#"{"b":2}"#
    );
    assert_eq!(
        value(
            TypeKind::Jsonb,
            r#"[{"a": null, "b": [null, {"c": null}]}]"#
        ),
        r#"[{"b":[null,{}]}]"#
    );
    assert_eq!(value(TypeKind::Json, "{}"), "{}");
    assert_eq!(value(TypeKind::Json, "[]"), "[]");
}

#[test]
fn a_json_null_column_is_stripped() {
    let columns = [
        Column::new("j", TypeKind::Jsonb),
        Column::new("k", TypeKind::Json),
    ];
    assert_eq!(
        doc(&columns, &[Some("null"), Some(" null ")]).unwrap(),
        "{}"
    );
    let fields = composite(&[("j", TypeKind::Json)]);
    assert_eq!(value(fields, "(null)"), "{}");
    assert_eq!(value(array(TypeKind::Jsonb), "{null,NULL}"), "[null,null]");
}

#[test]
fn json_the_server_refuses_is_refused() {
    for bad in [
        "01",
        "1.",
        "-",
        "1f2",
        "truex",
        r#""\u0000""#,
        r#""\ud83d""#,
        r#""\ude00""#,
        r#""\ud83dx""#,
        "[1,]",
        "{\"a\"}",
        "{\"a\":1,}",
        "[1 2]",
        "",
        " ",
        "\"a\u{1}\"",
        "\"\\x\"",
        "{1:2}",
        "'a'",
        "[1]]",
        "1e1000000000000",
    ] {
        assert!(one(TypeKind::Json, bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn deep_json_does_not_overflow_the_stack() {
    let depth = 200_000;
    let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert_eq!(value(TypeKind::Json, &text), text);
    let text = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    assert_eq!(value(TypeKind::Jsonb, &text), text);
}

#[test]
fn arrays_nest_drop_bounds_and_keep_nulls() {
    assert_eq!(value(array(TypeKind::Integer), "[2:3]={1,2}"), "[1,2]");
    assert_eq!(
        value(array(TypeKind::Integer), "{{1,2},{3,NULL}}"),
        "[[1,2],[3,null]]"
    );
    assert_eq!(value(array(TypeKind::Integer), "{}"), "[]");
    assert_eq!(
        value(array(TypeKind::Text), r#"{"",NULL,"NULL","a\"b"}"#),
        r#"["",null,"NULL","a\"b"]"#
    );
    assert_eq!(
        value(
            array(TypeKind::TimestampTz),
            r#"{"2020-01-01 00:00:00+00"}"#
        ),
        r#"["2020-01-01T00:00:00+00:00"]"#
    );
    assert_eq!(value(array(TypeKind::Integer), "1 2 3"), "[1,2,3]");
    let boxes = TypeKind::Array {
        element: Box::new(TypeKind::Text),
        delimiter: b';',
    };
    assert_eq!(
        value(boxes, "{(1,1),(0,0);(2,2),(1,1)}"),
        r#"["(1,1),(0,0)","(2,2),(1,1)"]"#
    );
    assert!(one(array(TypeKind::Integer), "{1,x}").is_err());
}

#[test]
fn composites_become_sorted_objects() {
    let c2 = composite(&[("x", TypeKind::Integer), ("b b", TypeKind::Text)]);
    let c1 = composite(&[
        ("bb", TypeKind::Integer),
        ("a", c2),
        ("c", TypeKind::Text),
        ("d", TypeKind::TimestampTz),
        ("e", array(TypeKind::Integer)),
    ]);
    assert_eq!(
        value(
            c1.clone(),
            r#"(1,"(2,""q""""u"")",,"2020-01-01 00:00:00+00","{1,2}")"#
        ),
        r#"{"a":{"x":2,"b b":"q\"u"},"d":"2020-01-01T00:00:00+00:00","e":[1,2],"bb":1}"#
    );
    assert_eq!(
        value(
            array(c1),
            r#"{"(1,\"(2,\"\"q\"\"\"\"u\"\")\",\"\",\"2020-01-01 00:00:00+00\",\"{1,2}\")",NULL}"#
        ),
        r#"[{"a":{"x":2,"b b":"q\"u"},"c":"","d":"2020-01-01T00:00:00+00:00","e":[1,2],"bb":1},null]"#
    );
    let e = one(composite(&[("x", TypeKind::Integer)]), "(1,2)").unwrap_err();
    assert!(e.to_string().contains("too many fields"), "{e}");
}

#[test]
fn errors_name_column_value_and_problem() {
    let long = format!("{{{}", "1,".repeat(100));
    let e = doc(
        &[Column::new("tags", array(TypeKind::Integer))],
        &[Some(&long)],
    )
    .unwrap_err();
    let DocumentError::Value {
        column,
        value,
        problem,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(column, "tags");
    assert_eq!(value.chars().count(), 61);
    assert!(value.ends_with('…'));
    assert!(
        !e.to_string().contains("1,1,"),
        "no row value in the message: {e}"
    );
    assert!(matches!(problem, ValueProblem::Array { .. }));
    assert!(
        e.to_string()
            .starts_with("column \"tags\": malformed array literal"),
        "{e}"
    );
    assert_eq!(
        doc(&[Column::new("a", TypeKind::Text)], &[]).unwrap_err(),
        DocumentError::ValueCount {
            columns: 1,
            values: 0
        }
    );
}

#[test]
fn types_nested_too_deep_are_refused() {
    let mut kind = TypeKind::Integer;
    for _ in 1..MAX_TYPE_DEPTH {
        kind = array(kind);
    }
    assert!(RowEncoder::new(vec![Column::new("ok", kind.clone())]).is_ok());
    let err = RowEncoder::new(vec![Column::new("deep", array(kind))]).unwrap_err();
    assert_eq!(
        err,
        DocumentError::TypeTooDeep {
            column: "deep".into()
        }
    );
}

#[test]
fn row_encoder_matches_encode_row_and_keys_alias() {
    let columns = vec![
        Column::new("id", TypeKind::Integer),
        Column::new("name", TypeKind::Text),
        Column::new("at", TypeKind::Timestamp),
    ];
    let values: [Option<&[u8]>; 3] = [Some(b"7"), Some(b"x"), Some(b"2024-01-02 03:04:05")];
    let encoder = RowEncoder::new(columns.clone()).unwrap();
    let (mut a, mut b, mut k) = (Vec::new(), Vec::new(), Vec::new());
    encoder.encode(&values, &mut a).unwrap();
    encode_row(&columns, &values, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, br#"{"at":"2024-01-02T03:04:05","id":7,"name":"x"}"#);
    encode_key(&columns[..1], &values[..1], &mut k).unwrap();
    assert_eq!(k, br#"{"id":7}"#);
}

#[test]
fn the_type_catalog_resolves_domains_arrays_and_composites() {
    let base = |oid: u32| PgType {
        oid,
        typtype: b'b',
        typelem: 0,
        typdelim: b',',
        typbasetype: 0,
        typrelid: 0,
        array_subscript: false,
    };
    let array_of = |oid: u32, element: u32| PgType {
        typelem: element,
        array_subscript: true,
        ..base(oid)
    };
    let mut catalog = TypeCatalog::new();
    catalog.add_type(base(23)); // int4
    catalog.add_type(base(25)); // text
    catalog.add_type(base(1184)); // timestamptz
    catalog.add_type(array_of(1007, 23)); // int4[]
    catalog.add_type(PgType {
        typdelim: b';',
        ..base(603) // box
    });
    catalog.add_type(array_of(1020, 603)); // box[]
    // point has an element type but another subscript handler: not an
    // array.
    catalog.add_type(PgType {
        typelem: 701,
        ..base(600)
    });
    catalog.add_type(PgType {
        typtype: b'd',
        typbasetype: 1007,
        ..base(90_000)
    }); // a domain over int4[]
    catalog.add_type(PgType {
        typtype: b'c',
        typrelid: 90_002,
        ..base(90_001)
    });
    catalog.add_attribute(90_002, "n".into(), 90_000);
    catalog.add_attribute(90_002, "at".into(), 1184);
    catalog.add_type(PgType {
        typtype: b'd',
        typbasetype: 90_003,
        ..base(90_003)
    }); // a domain over itself: a broken catalog
    catalog.add_type(PgType {
        typtype: b'e',
        ..base(90_004)
    }); // an enum

    assert_eq!(catalog.kind(23), Some(TypeKind::Integer));
    assert_eq!(catalog.kind(25), Some(TypeKind::Text));
    assert_eq!(catalog.kind(1007), Some(array(TypeKind::Integer)));
    assert_eq!(
        catalog.kind(1020),
        Some(TypeKind::Array {
            element: Box::new(TypeKind::Text),
            delimiter: b';'
        })
    );
    assert_eq!(catalog.kind(600), Some(TypeKind::Text));
    assert_eq!(catalog.kind(90_000), Some(array(TypeKind::Integer)));
    assert_eq!(
        catalog.kind(90_001),
        Some(TypeKind::Composite {
            fields: vec![
                ("n".into(), array(TypeKind::Integer)),
                ("at".into(), TypeKind::TimestampTz)
            ]
        })
    );
    assert_eq!(catalog.kind(90_004), Some(TypeKind::Text));
    assert_eq!(catalog.kind(90_003), None);
    assert_eq!(catalog.kind(12_345), None);
}
