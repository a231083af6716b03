use super::*;

fn read(path: &str) -> Read {
    Read {
        path: path.split('.').map(str::to_string).collect(),
        cast: None,
    }
}

fn cast(path: &str, to: &str) -> Read {
    Read {
        cast: Some(to.to_string()),
        ..read(path)
    }
}

fn sink() -> Vec<Input> {
    vec![Input::sink_table("orders_json")]
}

fn fields(a: &Analysis) -> Vec<String> {
    a.reads
        .iter()
        .map(|r| match &r.cast {
            Some(c) => format!("{}::{c}", r.dotted()),
            None => r.dotted(),
        })
        .collect()
}

#[test]
fn a_view_as_pg_get_viewdef_prints_it_reads_each_field_with_its_cast() {
    // The text of pg_get_viewdef on PostgreSQL 15.
    let def = " SELECT (orders_json.data ->> 'id'::text) AS id,
    ((orders_json.data ->> 'total'::text))::numeric AS total,
    (orders_json.data #>> '{addr,city}'::text[]) AS city,
    ((orders_json.data -> 'addr'::text) ->> 'zip'::text) AS zip
   FROM orders_json
  WHERE ((orders_json.data ? 'region'::text) AND (orders_json.data['flag'::text] IS NOT NULL));";
    let a = analyze(def, &sink()).unwrap();
    assert_eq!(
        fields(&a),
        [
            "addr.city",
            "addr.zip",
            "flag",
            "id",
            "region",
            "total::numeric"
        ]
    );
    assert!(a.whole_document.is_empty(), "{:?}", a.whole_document);
    let names: Vec<&str> = a.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "total", "city", "zip"]);
    assert_eq!(
        a.columns[1].1,
        Column::Fields(BTreeSet::from([cast("total", "numeric")]))
    );
}

#[test]
fn extract_path_functions_presence_operators_and_unqualified_names() {
    let def = "SELECT jsonb_extract_path_text(data, VARIADIC ARRAY['a'::text, 'b'::text]) AS x,
        jsonb_extract_path(data, 'c') AS c, (key ->> 'id'::text) AS kid
      FROM orders_json WHERE data ?| ARRAY['p'::text, 'q'::text] AND data ?& '{r,s}'::text[]";
    let a = analyze(def, &sink()).unwrap();
    assert_eq!(fields(&a), ["a.b", "c", "id", "p", "q", "r", "s"]);
    assert_eq!(
        a.columns[1].1,
        Column::Document {
            path: vec!["c".into()]
        }
    );
}

#[test]
fn left_associative_chains_without_parentheses_read_the_whole_path() {
    let a = analyze(
        "SELECT d.data -> 'addr' ->> 'zip' AS zip, (d.data -> 'q')::int AS q FROM orders_json d",
        &sink(),
    )
    .unwrap();
    assert_eq!(fields(&a), ["addr.zip", "q::int"]);
}

#[test]
fn whole_documents_are_reported_where_they_are_used() {
    let a = analyze(
        "SELECT md5(orders_json.data::text) AS h, orders_json.data AS doc, \
         orders_json.data ->> lower('X') AS dynamic FROM orders_json \
         WHERE orders_json.data @> '{\"a\": 1}'",
        &sink(),
    )
    .unwrap();
    assert!(a.reads.is_empty(), "{:?}", a.reads);
    assert_eq!(a.whole_document.len(), 4, "{:?}", a.whole_document);
    assert!(a.whole_document.iter().any(|w| w.contains("data::text")));
    // Passed on whole: the relations over this one can still name fields.
    assert_eq!(a.columns[1].1, Column::Document { path: vec![] });
}

#[test]
fn views_over_views_read_through_their_columns() {
    let v1 = analyze(
        "SELECT (s.data ->> 'id'::text) AS id, upper((s.data ->> 'city'::text)) AS city, \
         s.data AS doc, 1 AS one FROM orders_json s",
        &sink(),
    )
    .unwrap();
    let inputs = vec![Input {
        name: "v1".into(),
        columns: v1.columns.iter().cloned().collect(),
    }];
    let v2 = analyze(
        "SELECT v1.id, (v1.doc ->> 'note'::text) AS note, v1.one FROM v1 WHERE v1.city <> ''",
        &inputs,
    )
    .unwrap();
    assert_eq!(fields(&v2), ["city", "id", "note"]);
    assert!(v2.whole_document.is_empty());
}

#[test]
fn relations_are_matched_by_alias_and_other_tables_are_not_read() {
    let inputs = vec![
        Input::sink_table("orders_json"),
        Input::sink_table("customers_json"),
    ];
    let a = analyze(
        "SELECT (o.data ->> 'q'::text) AS q, (c.data ->> 'name'::text) AS name, (x.data ->> 'z') \
         FROM orders_json o JOIN customers_json c USING (key) JOIN other x ON true",
        &inputs,
    )
    .unwrap();
    assert_eq!(fields(&a), ["name", "q"]);
}

#[test]
fn quoted_keys_and_array_literals() {
    assert_eq!(
        text_array("{a,\"b c\",\"d\\\"e\"}"),
        Some(vec!["a".into(), "b c".into(), "d\"e".into()])
    );
    assert_eq!(text_array("{a,NULL}"), None);
    assert_eq!(text_array("{}"), Some(vec![]));
    let a = analyze(
        "SELECT (t.data ->> 'it''s'::text) AS x FROM orders_json t",
        &sink(),
    )
    .unwrap();
    assert_eq!(fields(&a), ["it's"]);
}

#[test]
fn a_definition_that_does_not_parse_is_an_error_not_a_panic() {
    assert!(analyze("SELECT FROM WHERE (((", &sink()).is_err());
}

#[test]
fn text_forms_that_cast_and_those_that_do_not() {
    assert!(text_casts("bigint", "numeric"));
    assert!(text_casts("integer", "bigint"));
    assert!(!text_casts("bigint", "integer"));
    assert!(!text_casts("text", "numeric"));
    assert!(text_casts("text", "text"));
    assert!(text_casts("numeric(12,2)", "character varying"));
    assert!(!text_casts("numeric", "integer"));
    assert!(text_casts("timestamp with time zone", "date"));
    assert!(!text_casts("some_enum", "some_enum"));
    assert!(!text_casts("text", "uuid"));
}

proptest::proptest! {
    #[test]
    fn never_panics(s in "\\PC{0,200}") {
        let _ = analyze(&s, &sink());
    }
}
