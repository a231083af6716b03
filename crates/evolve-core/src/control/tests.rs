//! Unit tests for the control language: every statement form, lexical
//! variants, canonical rendering, and every error with its exact text,
//! position and hint.

use super::*;

const INTERFACE: &str = "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data";

/// Parses one statement, checks that its canonical text parses back to it,
/// and returns it with its span cleared.
fn one(input: &str) -> Statement {
    let statements = parse(input).unwrap_or_else(|e| panic!("{input:?}:\n{e}"));
    assert_eq!(statements.len(), 1, "{input:?}: {statements:?}");
    let statement = statements.into_iter().next().unwrap();
    let sql = statement.to_sql();
    let again = parse(&sql).unwrap_or_else(|e| panic!("canonical {sql:?}:\n{e}"));
    assert_eq!(again.len(), 1, "{sql:?}");
    assert!(again[0].eq_ignoring_span(&statement), "{sql:?}: {again:?}");
    assert_eq!(
        again[0].span(),
        Span {
            start: 0,
            end: sql.len()
        },
        "{sql:?}"
    );
    statement.with_span(Span::default())
}

fn err(input: &str) -> ControlError {
    match parse(input) {
        Ok(statements) => panic!("{input:?} parsed: {statements:?}"),
        Err(e) => {
            assert!(e.position.offset <= input.len());
            assert_eq!(
                (e.position.line, e.position.column),
                crate::migration::line_col(input, e.position.offset)
            );
            e
        }
    }
}

/// The error's message, offset and hint.
#[track_caller]
fn check(input: &str, message: &str, offset: usize, hint: Option<&str>) -> ControlError {
    let e = err(input);
    assert_eq!(e.message, message, "{input:?}\n{e}");
    assert_eq!(e.position.offset, offset, "{input:?}\n{e}");
    assert_eq!(e.hint.as_deref(), hint, "{input:?}\n{e}");
    e
}

fn s(v: &str) -> String {
    v.to_owned()
}

fn source(name: &str, connection: &str, publication: &str) -> Statement {
    Statement::CreateSource(CreateSource {
        name: s(name),
        if_not_exists: false,
        kind: SourceKind::Postgres,
        connection: s(connection),
        publication: s(publication),
        span: Span::default(),
    })
}

fn table(
    name: &str,
    src: &str,
    schema: &str,
    upstream: &str,
    exclude: &[&str],
    text: &[&str],
) -> Statement {
    Statement::CreateTable(CreateTable {
        name: s(name),
        if_not_exists: false,
        source: s(src),
        reference: QualifiedName::new(schema, upstream),
        exclude_columns: exclude.iter().map(|c| s(c)).collect(),
        text_columns: text.iter().map(|c| s(c)).collect(),
        kafka: None,
        span: Span::default(),
    })
}

fn view(name: &str, table: &str) -> Statement {
    view_absorbing(name, table, Absorb::Manual)
}

fn view_absorbing(name: &str, table: &str, absorb: Absorb) -> Statement {
    Statement::CreateMaterializedView(CreateMaterializedView {
        name: s(name),
        if_not_exists: false,
        table: s(table),
        absorb,
        span: Span::default(),
    })
}

fn alter_view(name: &str, absorb: Absorb) -> Statement {
    Statement::AlterMaterializedView(AlterMaterializedView {
        name: s(name),
        absorb,
        span: Span::default(),
    })
}

fn drop(kind: ObjectKind, name: &str, if_exists: bool) -> Statement {
    Statement::Drop(Drop {
        kind,
        name: s(name),
        if_exists,
        span: Span::default(),
    })
}

fn show(kind: ObjectKind) -> Statement {
    Statement::Show(Show {
        kind,
        span: Span::default(),
    })
}

// ---------------------------------------------------------------- statements

#[test]
fn create_source() {
    let expected = source("src", "pg_conn", "evolve_pub");
    assert_eq!(
        one("CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');"),
        expected
    );
    assert_eq!(
        one("create source SRC from Postgres connection PG_CONN (publication = 'evolve_pub')"),
        expected
    );
    assert_eq!(
        one("CREATE SOURCE \"Src\" FROM POSTGRES CONNECTION \"pg\"\"conn\" (PUBLICATION 'It''s')"),
        source("Src", "pg\"conn", "It's")
    );
    // The literal is the publication's name as is: no folding, backslashes literal.
    assert_eq!(
        one(r"CREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICATION 'Pub\n')"),
        source("s", "c", r"Pub\n")
    );
    assert_eq!(
        source("src", "pg_conn", "evolve_pub").to_sql(),
        "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')"
    );
    assert_eq!(
        source("Src", "pg\"conn", "It's").to_sql(),
        "CREATE SOURCE \"Src\" FROM POSTGRES CONNECTION \"pg\"\"conn\" (PUBLICATION 'It''s')"
    );
}

#[test]
fn create_table() {
    assert_eq!(
        one("CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders);"),
        table("orders_v1", "src", "public", "orders", &[], &[])
    );
    assert_eq!(
        one("CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE orders)"),
        table("orders_v1", "src", "public", "orders", &[], &[])
    );
    assert_eq!(
        one("CREATE TABLE t FROM SOURCE src (REFERENCE \"Sales\".\"Orders\")"),
        table("t", "src", "Sales", "Orders", &[], &[])
    );
    assert_eq!(
        one("CREATE TABLE t FROM SOURCE src (REFERENCE = Sales . \"select\")"),
        table("t", "src", "sales", "select", &[], &[])
    );
    assert_eq!(
        one(
            "CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders) \
             WITH (EXCLUDE COLUMNS (a, b), TEXT COLUMNS (c))"
        ),
        table("orders_v1", "src", "public", "orders", &["a", "b"], &["c"])
    );
    assert_eq!(
        one("create table T from source S (reference O) \
             with (text columns = (\"C\", d), exclude columns = (B, a))"),
        table("t", "s", "public", "o", &["b", "a"], &["C", "d"])
    );
    assert_eq!(
        one("CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (TEXT COLUMNS (priority))"),
        table("t", "s", "public", "o", &[], &["priority"])
    );
    assert_eq!(
        table("orders_v1", "src", "public", "orders", &["a", "b"], &["c"]).to_sql(),
        "CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders) \
         WITH (EXCLUDE COLUMNS (a, b), TEXT COLUMNS (c))"
    );
    assert_eq!(
        table("t", "s", "public", "o", &[], &["Prio rity", "text"]).to_sql(),
        "CREATE TABLE t FROM SOURCE s (REFERENCE public.o) WITH (TEXT COLUMNS (\"Prio rity\", \"text\"))"
    );
    assert_eq!(
        table("t", "s", "public", "o", &[], &[]).to_sql(),
        "CREATE TABLE t FROM SOURCE s (REFERENCE public.o)"
    );
}

#[test]
fn create_materialized_view() {
    let expected = view("orders_json", "orders_v1");
    for input in [
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;",
        "create materialized view ORDERS_JSON as select COALESCE(JSONB_STRIP_NULLS(TO_JSONB(T)), '{}'::JSONB) as DATA from ORDERS_V1 T",
        "CREATE MATERIALIZED VIEW orders_json AS\n  SELECT coalesce( jsonb_strip_nulls ( to_jsonb ( t ) ) , '{}' :: jsonb ) AS data\n  FROM orders_v1 AS t",
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), CAST('{}' AS jsonb)) AS data FROM orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), cast ('{}' as JSONB)) AS data FROM orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}') AS data FROM orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::\"jsonb\") \"data\" FROM orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(orders_v1)), '{}'::jsonb) AS data FROM orders_v1",
        "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(\"row\")), '{}'::jsonb) AS data FROM orders_v1 \"row\"",
        "CREATE MATERIALIZED VIEW orders_json AS /* the interface */ SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), -- nulls\n'{}'::jsonb) AS data FROM orders_v1 t",
    ] {
        assert_eq!(one(input), expected, "{input}");
    }
    assert_eq!(
        expected.to_sql(),
        format!("CREATE MATERIALIZED VIEW orders_json AS {INTERFACE} FROM orders_v1 t")
    );
    assert_eq!(
        one(&format!(
            "CREATE MATERIALIZED VIEW \"V\" AS {INTERFACE} FROM \"T\" t"
        )),
        view("V", "T")
    );
    assert_eq!(
        view("V", "t").to_sql(),
        format!("CREATE MATERIALIZED VIEW \"V\" AS {INTERFACE} FROM t t")
    );
}

#[test]
fn create_materialized_view_with_absorb() {
    let auto = view_absorbing("orders_json", "orders_v1", Absorb::Auto);
    for input in [
        "CREATE MATERIALIZED VIEW orders_json WITH (ABSORB = 'auto') AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;",
        "create materialized view Orders_Json with (absorb 'AUTO') as select coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) as data from orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json WITH(Absorb='Auto')AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json WITH ( -- absorb\n ABSORB /* = */ = 'aUTO' ) AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t",
    ] {
        assert_eq!(one(input), auto, "{input}");
    }
    assert_eq!(
        auto.to_sql(),
        format!(
            "CREATE MATERIALIZED VIEW orders_json WITH (ABSORB = 'auto') AS {INTERFACE} FROM orders_v1 t"
        )
    );
    // 'manual' is the default, so its canonical text has no WITH.
    let manual = view("orders_json", "orders_v1");
    for input in [
        "CREATE MATERIALIZED VIEW orders_json WITH (ABSORB = 'manual') AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t",
        "CREATE MATERIALIZED VIEW orders_json WITH (absorb 'MANUAL') AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t",
    ] {
        assert_eq!(one(input), manual, "{input}");
    }
    assert_eq!(
        manual.to_sql(),
        format!("CREATE MATERIALIZED VIEW orders_json AS {INTERFACE} FROM orders_v1 t")
    );
    assert_eq!(Absorb::default(), Absorb::Manual);
    assert_eq!(Absorb::Auto.as_str(), "auto");
    assert_eq!(Absorb::Manual.to_string(), "manual");
}

#[test]
fn create_replacement() {
    let expected = Statement::CreateReplacement(CreateReplacement {
        name: s("orders_json_v2"),
        if_not_exists: false,
        target: s("orders_json"),
        table: s("orders_v2"),
        span: Span::default(),
    });
    assert_eq!(
        one(&format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS {INTERFACE} FROM orders_v2 t;"
        )),
        expected
    );
    assert_eq!(
        one(
            "create replacement materialized view Orders_Json_V2 for ORDERS_JSON as \
             select coalesce(jsonb_strip_nulls(to_jsonb(x)), cast('{}' as jsonb)) data from orders_v2 x"
        ),
        expected
    );
    assert_eq!(
        expected.to_sql(),
        format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS {INTERFACE} FROM orders_v2 t"
        )
    );
}

#[test]
fn alter_statements() {
    let apply = Statement::ApplyReplacement(ApplyReplacement {
        view: s("orders_json"),
        replacement: s("orders_json_v2"),
        wait: None,
        span: Span::default(),
    });
    assert_eq!(
        one("ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2;"),
        apply
    );
    assert_eq!(
        one("alter materialized view Orders_Json apply replacement \"orders_json_v2\""),
        apply
    );
    assert_eq!(
        apply.to_sql(),
        "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2"
    );
    let refresh = Statement::RefreshReferences(RefreshReferences {
        source: s("src"),
        span: Span::default(),
    });
    let auto = alter_view("orders_json", Absorb::Auto);
    assert_eq!(
        one("ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'auto');"),
        auto
    );
    assert_eq!(
        one("alter materialized view Orders_Json set (absorb 'Auto')"),
        auto
    );
    assert_eq!(
        auto.to_sql(),
        "ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'auto')"
    );
    assert_eq!(auto.object_kind(), ObjectKind::MaterializedView);
    let manual = alter_view("orders_json", Absorb::Manual);
    assert_eq!(
        one("ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'MANUAL')"),
        manual
    );
    // RESET is SET to the default.
    assert_eq!(
        one("ALTER MATERIALIZED VIEW orders_json RESET (ABSORB);"),
        manual
    );
    assert_eq!(
        one("alter materialized view \"orders_json\" reset ( absorb )"),
        manual
    );
    assert_eq!(
        manual.to_sql(),
        "ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'manual')"
    );
    // The option's words are names elsewhere, quoted in canonical text.
    assert_eq!(
        one("ALTER MATERIALIZED VIEW set SET (absorb 'auto')"),
        alter_view("set", Absorb::Auto)
    );
    assert_eq!(
        alter_view("reset", Absorb::Auto).to_sql(),
        "ALTER MATERIALIZED VIEW \"reset\" SET (ABSORB = 'auto')"
    );
    assert_eq!(one("ALTER SOURCE src REFRESH REFERENCES;"), refresh);
    assert_eq!(one("alter source SRC refresh references"), refresh);
    assert_eq!(refresh.to_sql(), "ALTER SOURCE src REFRESH REFERENCES");
}

#[test]
fn create_sink() {
    let sink = |schema: &str, name: &str| {
        Statement::CreateSink(CreateSink {
            name: s("orders_sink"),
            if_not_exists: false,
            from: s("orders_json"),
            connection: s("sink_conn"),
            table: QualifiedName::new(schema, name),
            kafka: None,
            span: Span::default(),
        })
    };
    let base = "CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn";
    assert_eq!(
        one(&format!("{base} (TABLE 'public.orders_json');")),
        sink("public", "orders_json")
    );
    assert_eq!(
        one(&format!("{base} (TABLE 'orders_json')")),
        sink("public", "orders_json")
    );
    assert_eq!(
        one(&format!("{base} (table = 'Public.Orders_Json')")),
        sink("public", "orders_json")
    );
    assert_eq!(
        one(&format!(
            "{base} (TABLE ' \"My Schema\" . \"Or\"\"ders\" ')"
        )),
        sink("My Schema", "Or\"ders")
    );
    assert_eq!(one(&format!("{base} (TABLE 'it''s.x')")), sink("it's", "x"));
    assert_eq!(
        sink("public", "orders_json").to_sql(),
        format!("{base} (TABLE 'public.orders_json')")
    );
    assert_eq!(
        sink("it's", "Or\"ders").to_sql(),
        format!("{base} (TABLE '\"it''s\".\"Or\"\"ders\"')")
    );
    assert_eq!(
        one("create sink S from V into postgres connection C (table 'x')"),
        Statement::CreateSink(CreateSink {
            name: s("s"),
            if_not_exists: false,
            from: s("v"),
            connection: s("c"),
            table: QualifiedName::new("public", "x"),
            kafka: None,
            span: Span::default(),
        })
    );
}

/// `INTO KAFKA`: the topic, the defaults (JSON, UPSERT), each format and
/// envelope, and the canonical text, which spells the defaults out.
#[test]
fn create_kafka_sink() {
    let sink = |format: SinkFormat, envelope: SinkEnvelope| {
        Statement::CreateSink(CreateSink {
            name: s("orders_kafka"),
            if_not_exists: false,
            from: s("orders_json"),
            connection: s("k"),
            table: QualifiedName::new("", ""),
            kafka: Some(KafkaSink {
                topic: s("Orders.v1-x_y"),
                format,
                envelope,
            }),
            span: Span::default(),
        })
    };
    let base =
        "CREATE SINK orders_kafka FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'Orders.v1-x_y')";
    assert_eq!(
        one(&format!("{base};")),
        sink(SinkFormat::Json, SinkEnvelope::Upsert)
    );
    assert_eq!(
        one(&format!("{base} FORMAT JSON ENVELOPE DEBEZIUM")),
        sink(SinkFormat::Json, SinkEnvelope::Debezium)
    );
    assert_eq!(
        one(&format!("{base} envelope upsert")),
        sink(SinkFormat::Json, SinkEnvelope::Upsert)
    );
    assert_eq!(
        one(&format!(
            "{base} FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE DEBEZIUM"
        )),
        sink(
            SinkFormat::Avro { registry: s("csr") },
            SinkEnvelope::Debezium
        )
    );
    assert_eq!(
        sink(SinkFormat::Json, SinkEnvelope::Upsert).to_sql(),
        format!("{base} FORMAT JSON ENVELOPE UPSERT")
    );
    assert_eq!(
        one("create sink K from V into kafka connection C (topic = 'Orders.v1-x_y')"),
        Statement::CreateSink(CreateSink {
            name: s("k"),
            from: s("v"),
            connection: s("c"),
            ..match sink(SinkFormat::Json, SinkEnvelope::Upsert) {
                Statement::CreateSink(c) => c,
                _ => unreachable!(),
            }
        })
    );
}

#[test]
fn create_kafka_sink_errors() {
    let base = "CREATE SINK s FROM v INTO KAFKA CONNECTION k";
    check(
        "CREATE SINK s FROM v INTO KAFK CONNECTION k (TOPIC 't')",
        "syntax error at or near \"KAFK\"",
        26,
        Some("Did you mean KAFKA?"),
    );
    check(
        "CREATE SINK s FROM v INTO S3 CONNECTION k (TOPIC 't')",
        "syntax error at or near \"S3\"",
        26,
        Some("Expected POSTGRES or KAFKA."),
    );
    let e = check(
        &format!("{base} (TOPIC 'has space')"),
        "invalid topic name 'has space'",
        52,
        Some("Choose a topic name like 'orders' or 'shop.orders-v1'."),
    );
    assert!(e.detail.as_deref().unwrap().contains("1 to 249"), "{e}");
    check(
        &format!("{base} (TOPIC '')"),
        "invalid topic name ''",
        52,
        Some("Choose a topic name like 'orders' or 'shop.orders-v1'."),
    );
    check(
        &format!("{base} (TABLE 't')"),
        "syntax error at or near \"TABLE\"",
        46,
        Some("Expected TOPIC."),
    );
    check(
        &format!("{base} (TOPIC 't') FORMAT XML"),
        "syntax error at or near \"XML\"",
        64,
        Some("Expected JSON or AVRO."),
    );
    check(
        &format!("{base} (TOPIC 't') ENVELOPE NONE"),
        "syntax error at or near \"NONE\"",
        66,
        Some("Expected UPSERT or DEBEZIUM."),
    );
    check(
        &format!("{base} (TOPIC 't') ENVELOPE UPSERT FORMAT JSON"),
        "conflicting or redundant options near FORMAT",
        73,
        Some("Write FORMAT ... ENVELOPE ..., once each."),
    );
    check(
        &format!("{base} (TOPIC 't') ENVELOP UPSERT"),
        "syntax error at or near \"ENVELOP\"",
        57,
        Some("Did you mean ENVELOPE?"),
    );
    check(
        &format!("{base} (TOPIC 't') FORMAT AVRO USING CONFLUENT CONNECTION c"),
        "syntax error at or near \"CONNECTION\"",
        85,
        Some("Expected SCHEMA."),
    );
}

#[test]
fn drop_statements() {
    use ObjectKind::*;
    assert_eq!(
        one("DROP TABLE orders_v1;"),
        drop(Table, "orders_v1", false)
    );
    assert_eq!(
        one("DROP MATERIALIZED VIEW orders_json"),
        drop(MaterializedView, "orders_json", false)
    );
    assert_eq!(
        one("DROP SINK orders_sink"),
        drop(Sink, "orders_sink", false)
    );
    assert_eq!(one("DROP SOURCE src"), drop(Source, "src", false));
    assert_eq!(
        one("drop table if exists Orders_V1"),
        drop(Table, "orders_v1", true)
    );
    assert_eq!(
        one("DROP MATERIALIZED VIEW IF EXISTS \"J\""),
        drop(MaterializedView, "J", true)
    );
    assert_eq!(one("DROP SINK IF EXISTS \"if\""), drop(Sink, "if", true));
    assert_eq!(
        one("DROP SOURCE IF EXISTS exists"),
        drop(Source, "exists", true)
    );
    // `if` alone is a name, as in PostgreSQL.
    assert_eq!(one("DROP SOURCE if"), drop(Source, "if", false));
    assert_eq!(one("DROP SOURCE if;"), drop(Source, "if", false));
    assert_eq!(drop(Source, "if", false).to_sql(), "DROP SOURCE \"if\"");
    assert_eq!(
        drop(MaterializedView, "v", true).to_sql(),
        "DROP MATERIALIZED VIEW IF EXISTS v"
    );
}

#[test]
fn show_statements() {
    use ObjectKind::*;
    assert_eq!(one("SHOW SOURCES;"), show(Source));
    assert_eq!(one("show tables"), show(Table));
    assert_eq!(one("Show Materialized Views"), show(MaterializedView));
    assert_eq!(one("SHOW SINKS"), show(Sink));
    assert_eq!(show(MaterializedView).to_sql(), "SHOW MATERIALIZED VIEWS");
    assert_eq!(show(Sink).to_string(), "SHOW SINKS");
}

#[test]
fn many_statements_with_spans_and_comments() {
    let input = "-- setup\nSHOW SOURCES ;;\n/* a /* nested */ comment */ DROP SINK x;\n\tSHOW TABLES -- done\n";
    let statements = parse(input).unwrap();
    assert_eq!(statements.len(), 3);
    let texts: Vec<&str> = statements
        .iter()
        .map(|s| &input[s.span().range()])
        .collect();
    assert_eq!(texts, ["SHOW SOURCES", "DROP SINK x", "SHOW TABLES"]);
    assert_eq!(statements[1].object_kind(), ObjectKind::Sink);

    assert_eq!(parse("").unwrap(), []);
    assert_eq!(parse(" ; ;; -- nothing\n/* */").unwrap(), []);
    assert_eq!(parse("\u{feff}SHOW SINKS").unwrap().len(), 1);

    let script = "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders) WITH (EXCLUDE COLUMNS (a, b), TEXT COLUMNS (c));
CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v2 t;
ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2;
CREATE MATERIALIZED VIEW orders_auto WITH (ABSORB = 'auto') AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'manual');
ALTER SOURCE src REFRESH REFERENCES;
CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');
DROP TABLE orders_v1;  DROP MATERIALIZED VIEW orders_json;  DROP SINK orders_sink;  DROP SOURCE src;
SHOW SOURCES;  SHOW TABLES;  SHOW MATERIALIZED VIEWS;  SHOW SINKS;
";
    let statements = parse(script).unwrap();
    assert_eq!(statements.len(), 17);
    for statement in &statements {
        let text = &script[statement.span().range()];
        assert!(!text.ends_with(';'));
        // The canonical text of these is their own text.
        assert_eq!(statement.to_sql(), text);
    }
}

#[test]
fn identifiers_fold_ascii_only() {
    assert_eq!(
        one("DROP TABLE Größe"),
        drop(ObjectKind::Table, "größe", false)
    );
    assert_eq!(
        drop(ObjectKind::Table, "größe", false).to_sql(),
        "DROP TABLE \"größe\""
    );
    assert_eq!(one("DROP TABLE a$1"), drop(ObjectKind::Table, "a$1", false));
    assert_eq!(one("DROP TABLE _x"), drop(ObjectKind::Table, "_x", false));
    // Non-reserved keywords are names.
    assert_eq!(
        one("DROP TABLE source"),
        drop(ObjectKind::Table, "source", false)
    );
    assert_eq!(
        one("DROP TABLE \"table\""),
        drop(ObjectKind::Table, "table", false)
    );
    let longest = "a".repeat(63);
    assert_eq!(
        one(&format!("DROP TABLE {longest}")),
        drop(ObjectKind::Table, &longest, false)
    );
}

#[test]
fn sql_ident_quotes_only_when_needed() {
    for (name, sql) in [
        ("orders", "orders"),
        ("_a1$", "_a1$"),
        ("Orders", "\"Orders\""),
        ("1a", "\"1a\""),
        ("a b", "\"a b\""),
        ("a\"b", "\"a\"\"b\""),
        ("select", "\"select\""),
        ("table", "\"table\""),
        ("source", "\"source\""),
        ("show", "\"show\""),
        ("absorb", "\"absorb\""),
        ("set", "\"set\""),
        ("reset", "\"reset\""),
        ("auto", "auto"),
        ("größe", "\"größe\""),
        ("", "\"\""),
    ] {
        assert_eq!(sql_ident(name), sql);
    }
    assert_eq!(sql_literal("it's"), "'it''s'");
    assert_eq!(
        QualifiedName::new("public", "Orders").to_string(),
        "public.\"Orders\""
    );
}

// ---------------------------------------------------------------- errors

const SUPPORTED_HINT: &str = "The supported statements are CREATE SOURCE, CREATE TABLE ... FROM SOURCE, \
CREATE [REPLACEMENT] MATERIALIZED VIEW, CREATE SINK, CREATE REPLICA, CREATE TRANSFORM, \
ALTER SOURCE ... REFRESH REFERENCES, \
ALTER MATERIALIZED VIEW ... {APPLY REPLACEMENT | SET | RESET}, \
ALTER REPLICA ... {SET | RESET} CONFLICT RESOLVER, \
DROP {SOURCE | TABLE | MATERIALIZED VIEW | SINK | REPLICA | TRANSFORM} and \
SHOW {SOURCES | TABLES | MATERIALIZED VIEWS | SINKS | REPLICAS | TRANSFORMS | \
CONFLICT RESOLVERS FOR REPLICA ...}.";

#[test]
fn misspelled_keywords_get_suggestions() {
    let e = check(
        "CREATE SOURCE src FORM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');",
        "syntax error at or near \"FORM\"",
        18,
        Some("Did you mean FROM?"),
    );
    assert_eq!(e.detail, None);
    assert_eq!(
        e.to_string(),
        "ERROR:  syntax error at or near \"FORM\"\n\
         LINE 1: CREATE SOURCE src FORM POSTGRES CONNECTION pg_conn (PUBLICAT...\n\
         \x20                         ^\n\
         HINT:  Did you mean FROM?"
    );
    check(
        "CRATE SOURCE s",
        "syntax error at or near \"CRATE\"",
        0,
        Some("Did you mean CREATE?"),
    );
    check(
        "CREATE SORCE s",
        "syntax error at or near \"SORCE\"",
        7,
        Some("Did you mean SOURCE?"),
    );
    check(
        "CREATE MATERIALISED VIEW v",
        "syntax error at or near \"MATERIALISED\"",
        7,
        Some("Did you mean MATERIALIZED?"),
    );
    check(
        "CREATE MATERIALIZED VEIW v",
        "syntax error at or near \"VEIW\"",
        20,
        Some("Did you mean VIEW?"),
    );
    check(
        "SHOW SOURCE",
        "syntax error at or near \"SOURCE\"",
        5,
        Some("Did you mean SOURCES?"),
    );
    check(
        "DROP SOURCES x",
        "syntax error at or near \"SOURCES\"",
        5,
        Some("Did you mean SOURCE?"),
    );
    check(
        "DROP TABLE IF EXIST x",
        "syntax error at or near \"EXIST\"",
        14,
        Some("Did you mean EXISTS?"),
    );
    check(
        "ALTER SOURCE s REFRESH REFERENCE",
        "syntax error at or near \"REFERENCE\"",
        23,
        Some("Did you mean REFERENCES?"),
    );
    check(
        "ALTER MATERIALIZED VIEW v APLY REPLACEMENT w",
        "syntax error at or near \"APLY\"",
        26,
        Some("Did you mean APPLY?"),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WIHT (TEXT COLUMNS (a))",
        "syntax error at or near \"WIHT\"",
        43,
        Some("Did you mean WITH?"),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (EXLCUDE COLUMNS (a))",
        "syntax error at or near \"EXLCUDE\"",
        49,
        Some("Did you mean EXCLUDE?"),
    );
    check(
        "CREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICTION 'p')",
        "syntax error at or near \"PUBLICTION\"",
        44,
        Some("Did you mean PUBLICATION?"),
    );
    check(
        "CREATE SINK k FROM v INTO POSTGRES CONECTION c (TABLE 't')",
        "syntax error at or near \"CONECTION\"",
        35,
        Some("Did you mean CONNECTION?"),
    );
    // Not close to anything expected: the expectation.
    check(
        "CREATE SOURCE s FROM ORACLE CONNECTION c (PUBLICATION 'p')",
        "syntax error at or near \"ORACLE\"",
        21,
        Some("Expected POSTGRES, MYSQL or KAFKA."),
    );
}

#[test]
fn unknown_statements_list_the_supported_ones() {
    check(
        "CREATE INDEX i ON t (a)",
        "syntax error at or near \"INDEX\"",
        7,
        Some(SUPPORTED_HINT),
    );
    check(
        "SELEC 1",
        "syntax error at or near \"SELEC\"",
        0,
        Some(SUPPORTED_HINT),
    );
    check(
        "SELECT 1;",
        "syntax error at or near \"SELECT\"",
        0,
        Some(SUPPORTED_HINT),
    );
    check(
        "CREATE VIEW v AS SELECT 1",
        "syntax error at or near \"VIEW\"",
        7,
        Some(SUPPORTED_HINT),
    );
    check(
        "ALTER TABLE t ADD x int",
        "syntax error at or near \"TABLE\"",
        6,
        Some(SUPPORTED_HINT),
    );
    check(
        "DROP INDEX i",
        "syntax error at or near \"INDEX\"",
        5,
        Some(SUPPORTED_HINT),
    );
    check(
        "SHOW ALL",
        "syntax error at or near \"ALL\"",
        5,
        Some(SUPPORTED_HINT),
    );
    check(
        "(",
        "syntax error at or near \"(\"",
        0,
        Some(SUPPORTED_HINT),
    );
    check(
        "\"create\" source",
        "syntax error at or near \"\"create\"\"",
        0,
        Some(SUPPORTED_HINT),
    );
    check(
        "CREATE",
        "syntax error at end of input",
        6,
        Some(SUPPORTED_HINT),
    );
    // After a valid statement, the second one is checked the same way.
    check(
        "SHOW SINKS; VACUUM",
        "syntax error at or near \"VACUUM\"",
        12,
        Some(SUPPORTED_HINT),
    );
}

#[test]
fn syntax_errors_name_what_was_expected() {
    check(
        "CREATE SOURCE",
        "syntax error at end of input",
        13,
        Some("Expected a name."),
    );
    check(
        "CREATE SOURCE select FROM POSTGRES CONNECTION c (PUBLICATION 'p')",
        "syntax error at or near \"select\"",
        14,
        Some(
            "Expected a name. SELECT is a reserved keyword; write \"select\" in double quotes to use it as a name.",
        ),
    );
    check(
        "CREATE SOURCE s FROM POSTGRES CONNECTION c",
        "syntax error at end of input",
        42,
        Some("Expected \"(\"."),
    );
    check(
        "CREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICATION p)",
        "syntax error at or near \"p\"",
        56,
        Some("Expected a string literal."),
    );
    check(
        "CREATE SOURCE s FROM POSTGRES CONNECTION c ()",
        "syntax error at or near \")\"",
        44,
        Some("Expected PUBLICATION."),
    );
    check(
        "CREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICATION 'p' PUBLICATION 'q')",
        "syntax error at or near \"PUBLICATION\"",
        60,
        Some("Expected \",\" or \")\"."),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH ()",
        "syntax error at or near \")\"",
        49,
        Some("Expected EXCLUDE or TEXT."),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (TEXT (a))",
        "syntax error at or near \"(\"",
        54,
        Some("Expected COLUMNS."),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) x",
        "syntax error at or near \"x\"",
        43,
        Some("Expected WITH, \";\" or end of input."),
    );
    check(
        "SHOW SINKS x",
        "syntax error at or near \"x\"",
        11,
        Some("Expected \";\" or end of input."),
    );
    check(
        "DROP TABLE IF EXISTS",
        "syntax error at end of input",
        20,
        Some("Expected a name."),
    );
    check(
        "DROP TABLE a.b",
        "syntax error at or near \".\"",
        12,
        Some("Expected \";\" or end of input."),
    );
    check(
        "DROP TABLE 'a'",
        "syntax error at or near \"'a'\"",
        11,
        Some("Expected a name."),
    );
    check(
        "DROP TABLE a b",
        "syntax error at or near \"b\"",
        13,
        Some("Expected \";\" or end of input."),
    );
    check(
        "SHOW $",
        "syntax error at or near \"$\"",
        5,
        Some(SUPPORTED_HINT),
    );
    check(
        "DROP TABLE a = 1",
        "syntax error at or near \"=\"",
        13,
        Some("Expected \";\" or end of input."),
    );
    check(
        "DROP TABLE 12",
        "syntax error at or near \"12\"",
        11,
        Some("Expected a name."),
    );
}

#[test]
fn missing_semicolon_between_statements() {
    check(
        "SHOW SOURCES SHOW TABLES",
        "syntax error at or near \"SHOW\"",
        13,
        Some("End the previous statement with \";\"."),
    );
    check(
        "DROP TABLE t\nCREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICATION 'p')",
        "syntax error at or near \"CREATE\"",
        13,
        Some("End the previous statement with \";\"."),
    );
    check(
        &format!("CREATE MATERIALIZED VIEW v AS {INTERFACE} FROM t1 t\nDROP TABLE t0"),
        "syntax error at or near \"DROP\"",
        109,
        Some("End the previous statement with \";\"."),
    );
    check(
        &format!(
            "CREATE MATERIALIZED VIEW v AS {INTERFACE} FROM t1 ALTER SOURCE s REFRESH REFERENCES"
        ),
        "syntax error at or near \"ALTER\"",
        107,
        Some("End the previous statement with \";\"."),
    );
}

#[test]
fn duplicate_options_and_columns() {
    let e = check(
        "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'a', PUBLICATION 'b')",
        "conflicting or redundant options",
        69,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("PUBLICATION is specified more than once.")
    );
    let e = check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o, REFERENCE p)",
        "conflicting or redundant options",
        43,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("REFERENCE is specified more than once.")
    );
    let e = check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (TEXT COLUMNS (a), EXCLUDE COLUMNS (b), text columns (c))",
        "conflicting or redundant options",
        88,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("TEXT COLUMNS is specified more than once.")
    );
    let e = check(
        "CREATE SINK k FROM v INTO POSTGRES CONNECTION c (TABLE 'a', TABLE 'a')",
        "conflicting or redundant options",
        60,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("TABLE is specified more than once.")
    );

    let e = check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (EXCLUDE COLUMNS (a, b, A))",
        "column \"a\" specified more than once",
        72,
        None,
    );
    assert_eq!(e.detail.as_deref(), Some("EXCLUDE COLUMNS lists it twice."));
    // Quoted names keep their case, so "A" and a differ.
    assert_eq!(
        one("CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (EXCLUDE COLUMNS (a, \"A\"))"),
        table("t", "s", "public", "o", &["a", "A"], &[])
    );

    let both = "An excluded column is not ingested, so it cannot be ingested as text; \
                remove it from one of the lists.";
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (EXCLUDE COLUMNS (a, b), TEXT COLUMNS (c, B))",
        "column \"b\" is in both EXCLUDE COLUMNS and TEXT COLUMNS",
        90,
        Some(both),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (TEXT COLUMNS (c), EXCLUDE COLUMNS (c))",
        "column \"c\" is in both TEXT COLUMNS and EXCLUDE COLUMNS",
        84,
        Some(both),
    );
}

#[test]
fn empty_column_lists() {
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (EXCLUDE COLUMNS ())",
        "empty column list in EXCLUDE COLUMNS",
        66,
        Some("List at least one column, or leave out EXCLUDE COLUMNS."),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (TEXT COLUMNS = ( ))",
        "empty column list in TEXT COLUMNS",
        66,
        Some("List at least one column, or leave out TEXT COLUMNS."),
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (TEXT COLUMNS (a,))",
        "syntax error at or near \")\"",
        65,
        Some("Expected a name."),
    );
}

#[test]
fn lexical_errors() {
    check(
        "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub);",
        "unterminated quoted string at or near \"'evolve_pub);\"",
        64,
        None,
    );
    check(
        "DROP TABLE \"orders",
        "unterminated quoted identifier at or near \"\"orders\"",
        11,
        None,
    );
    check(
        "DROP TABLE \"\"",
        "zero-length delimited identifier at or near \"\"\"\"",
        11,
        None,
    );
    check(
        "SHOW /* a /* b */ SINKS",
        "unterminated /* comment at or near \"/* a /* b */ SINKS\"",
        5,
        None,
    );
    check(
        "DROP TABLE \"a\0b\"",
        "invalid byte sequence for encoding \"UTF8\": 0x00",
        13,
        None,
    );
    check(
        "SHOW SINKS -- \0",
        "invalid byte sequence for encoding \"UTF8\": 0x00",
        14,
        None,
    );
    check(
        "SHOW SINKS \0",
        "invalid byte sequence for encoding \"UTF8\": 0x00",
        11,
        None,
    );
    // A long token is cut in the message.
    let e = check(
        &format!("DROP TABLE '{}", "x".repeat(100)),
        &format!(
            "unterminated quoted string at or near \"'{}...\"",
            "x".repeat(63)
        ),
        11,
        None,
    );
    assert!(e.message.len() < 120);
    // An earlier syntax error wins over a later lexical one, as in PostgreSQL.
    check(
        "SHOW SINK; DROP TABLE 'x",
        "syntax error at or near \"SINK\"",
        5,
        Some("Did you mean SINKS?"),
    );
    // A lexical error where a keyword is expected is reported as itself.
    check(
        "CREATE SOURCE s \"",
        "unterminated quoted identifier at or near \"\"\"",
        16,
        None,
    );
    check(
        &format!("CREATE MATERIALIZED VIEW v AS {INTERFACE} FROM t '"),
        "unterminated quoted string at or near \"'\"",
        106,
        None,
    );
}

#[test]
fn identifiers_longer_than_postgres_allows() {
    let long = "a".repeat(64);
    let e = check(
        &format!("DROP TABLE {long}"),
        &format!("identifier \"{long}\" is too long"),
        11,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("It is 64 bytes long; identifiers are at most 63 bytes, as in PostgreSQL.")
    );
    let quoted = "é".repeat(32);
    check(
        &format!("DROP TABLE \"{quoted}\""),
        &format!("identifier \"{quoted}\" is too long"),
        11,
        None,
    );
    check(
        &format!("CREATE SINK k FROM v INTO POSTGRES CONNECTION c (TABLE 'public.{long}')"),
        &format!("identifier \"{long}\" is too long"),
        55,
        None,
    );
}

#[test]
fn qualified_names() {
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE a.b.c)",
        "improper qualified name (too many dotted names): a.b.c",
        40,
        None,
    );
    check(
        "CREATE TABLE t FROM SOURCE s (REFERENCE a.)",
        "syntax error at or near \")\"",
        42,
        Some("Expected a name."),
    );
    let sink = "CREATE SINK k FROM v INTO POSTGRES CONNECTION c (TABLE ";
    let hint = "Write 'schema.table' or 'table'; double-quote a part to keep its case or special \
                characters, as in 'public.\"Orders\"'.";
    for literal in [
        "''",
        "'a..b'",
        "'.a'",
        "'a.'",
        "'a b'",
        "'\"a'",
        "'\"\".a'",
        "'a.\"b\"c'",
        "'  '",
    ] {
        let e = check(
            &format!("{sink}{literal})"),
            "invalid name syntax",
            55,
            Some(hint),
        );
        assert_eq!(
            e.detail,
            Some(format!("TABLE {literal} is not a table name."))
        );
    }
    check(
        &format!("{sink}'a.b.\"C\"')"),
        "improper qualified name (too many dotted names): a.b.C",
        55,
        None,
    );
    check(
        "CREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICATION '')",
        "publication name cannot be empty",
        56,
        None,
    );
}

#[test]
fn only_the_interface_form_is_accepted() {
    let form = "The only accepted form is: CREATE MATERIALIZED VIEW view_name AS SELECT \
                coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM table_name t";
    let message = "unsupported materialized view definition";
    let prefix = "CREATE MATERIALIZED VIEW v AS ";
    let cases: &[(&str, usize, &str)] = &[
        (
            "SELECT * FROM t",
            7,
            "Found \"*\" where the interface form has coalesce.",
        ),
        (
            "SELECT a, b FROM t",
            7,
            "Found \"a\" where the interface form has coalesce.",
        ),
        (
            "TABLE t",
            0,
            "Found \"TABLE\" where the interface form has select.",
        ),
        (
            "",
            0,
            "Found the end of the input where the interface form has select.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '[]'::jsonb) AS data FROM o t",
            48,
            "Found \"'[]'\" where the interface form has '{}'.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::json) AS data FROM o t",
            54,
            "Found \"json\" where the interface form has jsonb.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS doc FROM o t",
            64,
            "Found \"doc\" where the interface form has data.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS \"Data\" FROM o t",
            64,
            "Found \"\"Data\"\" where the interface form has data.",
        ),
        (
            "SELECT coalesce(to_jsonb(t), '{}'::jsonb) AS data FROM o t",
            16,
            "Found \"to_jsonb\" where the interface form has jsonb_strip_nulls.",
        ),
        (
            "SELECT jsonb_strip_nulls(to_jsonb(t)) AS data FROM o t",
            7,
            "Found \"jsonb_strip_nulls\" where the interface form has coalesce.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t.*)), '{}'::jsonb) AS data FROM o t",
            44,
            "Found \".\" where the interface form has \")\".",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM o t WHERE t.a > 1",
            78,
            "Found \"WHERE\" after the end of the interface form.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM o t, p",
            77,
            "Found \",\" after the end of the interface form.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM public.o t",
            80,
            "Found \".\" after the end of the interface form.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM o",
            43,
            "to_jsonb(t) does not take the row of the table in FROM; write to_jsonb(o).",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(x)), '{}'::jsonb) AS data FROM orders t",
            43,
            "to_jsonb(x) does not take the row of the table in FROM; write to_jsonb(t).",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(\"T\")), '{}'::jsonb) AS data FROM o t",
            43,
            "to_jsonb(\"T\") does not take the row of the table in FROM; write to_jsonb(t).",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), CAST('{}' AS json)) AS data FROM o t",
            61,
            "Found \"json\" where the interface form has jsonb.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM select t",
            74,
            "Found \"select\" where the interface form has a table name.",
        ),
        (
            "SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM o AS",
            78,
            "Found the end of the input where the interface form has an alias.",
        ),
        (
            "(SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM o t)",
            0,
            "Found \"(\" where the interface form has select.",
        ),
    ];
    for (query, offset, detail) in cases {
        let input = format!("{prefix}{query}");
        let e = check(&input, message, prefix.len() + offset, Some(form));
        assert_eq!(e.detail.as_deref(), Some(*detail), "{input}");
    }

    let replacement_form = "The only accepted form is: CREATE REPLACEMENT MATERIALIZED VIEW view_name \
                            FOR target_view AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), \
                            '{}'::jsonb) AS data FROM table_name t";
    let e = check(
        "CREATE REPLACEMENT MATERIALIZED VIEW v2 FOR v AS SELECT count(*) AS data FROM o",
        message,
        56,
        Some(replacement_form),
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("Found \"count\" where the interface form has coalesce.")
    );
    // After WITH (...), the query is matched the same way.
    let e = check(
        "CREATE MATERIALIZED VIEW v WITH (absorb = 'auto') AS SELECT 1",
        message,
        60,
        Some(form),
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("Found \"1\" where the interface form has coalesce.")
    );
    // Before AS, errors are ordinary syntax errors.
    check(
        "CREATE MATERIALIZED VIEW v SELECT 1",
        "syntax error at or near \"SELECT\"",
        27,
        Some("Expected WITH or AS."),
    );
    check(
        "CREATE REPLACEMENT MATERIALIZED VIEW v2 AS SELECT 1",
        "syntax error at or near \"AS\"",
        40,
        Some("Expected FOR."),
    );
}

#[test]
fn error_display_is_psqls() {
    let e = err("SHOW SINKS;\n\tDROP  TABLE x y;");
    assert_eq!(
        e.to_string(),
        "ERROR:  syntax error at or near \"y\"\n\
         LINE 2:  DROP  TABLE x y;\n\
         \x20                      ^\n\
         HINT:  Expected \";\" or end of input."
    );
    assert_eq!(
        e.position,
        Position {
            offset: 27,
            line: 2,
            column: 16
        }
    );
    let e = err("CREATE SOURCE s FROM POSTGRES CONNECTION c (PUBLICATION 'a', PUBLICATION 'b')");
    assert_eq!(
        e.to_string(),
        format!(
            "ERROR:  conflicting or redundant options\n\
             LINE 1: ...CE s FROM POSTGRES CONNECTION c (PUBLICATION 'a', PUBLICATIO...\n\
             {}^\n\
             DETAIL:  PUBLICATION is specified more than once.",
            " ".repeat(61)
        )
    );
    // Cut on both sides around the error in a long line.
    let e = err(&format!(
        "DROP TABLE a{} b{}",
        "x".repeat(60),
        "y".repeat(60)
    ));
    assert_eq!(
        e.excerpt(),
        format!(
            "LINE 1: ...{} b{}...\n{}^",
            "x".repeat(49),
            "y".repeat(9),
            " ".repeat(61)
        )
    );
    // At the end of the input, the caret is after the last character.
    let e = err("SHOW\r\n");
    assert_eq!(e.excerpt(), "LINE 2: \n        ^");
    let e = err("-- é\nSHOW é");
    assert_eq!(e.excerpt(), "LINE 2: SHOW é\n             ^");
    assert_eq!(e.position.column, 6);
    // Errors built by other layers: clamped to a character boundary.
    let e = ControlError::new("DROP TABLE é", 12, "table \"é\" does not exist")
        .with_hint("Create it first.");
    assert_eq!(e.position.offset, 11);
    assert_eq!(
        e.to_string(),
        "ERROR:  table \"é\" does not exist\nLINE 1: DROP TABLE é\n                   ^\nHINT:  Create it first."
    );
    let e = ControlError::new("\u{feff}SHOW x", 8, "m");
    assert_eq!(e.excerpt(), "LINE 1: SHOW x\n             ^");
}

#[test]
fn suggestions_count_a_transposition_as_one_edit() {
    let distance = strsim::osa_distance;
    assert_eq!(distance("form", "from"), 1);
    assert_eq!(distance("sorce", "source"), 1);
    assert_eq!(distance("", "abc"), 3);
    assert_eq!(distance("abc", "abc"), 0);
    assert_eq!(distance("kitten", "sitting"), 3);
    assert_eq!(distance("ca", "abc"), 3);
}

#[test]
fn large_inputs_take_linear_time() {
    // Quadratic work anywhere would make these take minutes.
    let columns: Vec<String> = (0..50_000).map(|i| format!("c{i}")).collect();
    let input = format!(
        "CREATE TABLE t FROM SOURCE s (REFERENCE o) WITH (EXCLUDE COLUMNS ({}), TEXT COLUMNS ({}))",
        columns[..25_000].join(", "),
        columns[25_000..].join(", ")
    );
    let Statement::CreateTable(t) = one(&input) else {
        panic!("not a table");
    };
    assert_eq!(t.exclude_columns.len() + t.text_columns.len(), 50_000);
    let shows = "SHOW SINKS;".repeat(50_000);
    assert_eq!(parse(&shows).unwrap().len(), 50_000);
    let comments = format!("{}SHOW", "/*".repeat(100_000));
    check(
        &comments,
        &format!(
            "unterminated /* comment at or near \"{}...\"",
            "/*".repeat(32)
        ),
        0,
        None,
    );
    let long_line = format!("SHOW {}", "x".repeat(1_000_000));
    assert!(err(&long_line).excerpt().len() < 200);
    let long_word = format!("SHOW SINKS; DROP TABLE {}", "x".repeat(1_000_000));
    let e = err(&long_word);
    assert_eq!(
        e.message,
        format!("identifier \"{}...\" is too long", "x".repeat(64))
    );
}

#[test]
fn absorb_option_errors() {
    let create =
        |options: &str| format!("CREATE MATERIALIZED VIEW v {options} AS {INTERFACE} FROM o t");
    let values = Some("ABSORB is 'auto' or 'manual'.");
    // Bad values, at the literal.
    check(
        &create("WITH (ABSORB = 'sometimes')"),
        "invalid value for option ABSORB: \"sometimes\"",
        42,
        values,
    );
    check(
        &create("WITH (ABSORB ' auto')"),
        "invalid value for option ABSORB: \" auto\"",
        40,
        values,
    );
    check(
        &create("WITH (ABSORB '')"),
        "invalid value for option ABSORB: \"\"",
        40,
        values,
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB = 'never')",
        "invalid value for option ABSORB: \"never\"",
        40,
        values,
    );
    // The value is a string literal.
    let literal = Some("Expected a string literal: ABSORB is 'auto' or 'manual'.");
    check(
        &create("WITH (ABSORB = auto)"),
        "syntax error at or near \"auto\"",
        42,
        literal,
    );
    check(
        &create("WITH (ABSORB)"),
        "syntax error at or near \")\"",
        39,
        literal,
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB = true)",
        "syntax error at or near \"true\"",
        40,
        literal,
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB = 'auto",
        "unterminated quoted string at or near \"'auto\"",
        40,
        None,
    );
    // Once only.
    let e = check(
        &create("WITH (ABSORB 'auto', absorb 'manual')"),
        "conflicting or redundant options",
        48,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("ABSORB is specified more than once.")
    );
    let e = check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB 'auto', ABSORB 'auto')",
        "conflicting or redundant options",
        46,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("ABSORB is specified more than once.")
    );
    // Unknown options.
    check(
        &create("WITH (ABSORBE = 'auto')"),
        "syntax error at or near \"ABSORBE\"",
        33,
        Some("Did you mean ABSORB?"),
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSROB = 'auto')",
        "syntax error at or near \"ABSROB\"",
        31,
        Some("Did you mean ABSORB?"),
    );
    check(
        &create("WITH (REFRESH = 'auto')"),
        "syntax error at or near \"REFRESH\"",
        33,
        Some("Expected ABSORB."),
    );
    check(
        &create("WITH ()"),
        "syntax error at or near \")\"",
        33,
        Some("Expected ABSORB."),
    );
    check(
        "ALTER MATERIALIZED VIEW v RESET (TEXT)",
        "syntax error at or near \"TEXT\"",
        33,
        Some("Expected ABSORB."),
    );
    // Parentheses are required.
    check(
        &create("WITH ABSORB = 'auto'"),
        "syntax error at or near \"ABSORB\"",
        32,
        Some("Expected \"(\"."),
    );
    check(
        "ALTER MATERIALIZED VIEW v SET ABSORB = 'auto'",
        "syntax error at or near \"ABSORB\"",
        30,
        Some("Expected \"(\"."),
    );
    check(
        "ALTER MATERIALIZED VIEW v RESET ABSORB",
        "syntax error at or near \"ABSORB\"",
        32,
        Some("Expected \"(\"."),
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB = 'auto'",
        "syntax error at end of input",
        46,
        Some("Expected \",\" or \")\"."),
    );
    // RESET takes names only.
    let reset = Some("Write RESET (ABSORB), or SET (ABSORB = '...') to set a value.");
    check(
        "ALTER MATERIALIZED VIEW v RESET (ABSORB = 'auto')",
        "RESET must not include values for parameters",
        40,
        reset,
    );
    check(
        "ALTER MATERIALIZED VIEW v RESET (ABSORB 'auto')",
        "RESET must not include values for parameters",
        40,
        reset,
    );
    // What may follow the view's name.
    check(
        &create("WIHT (ABSORB = 'auto')"),
        "syntax error at or near \"WIHT\"",
        27,
        Some("Did you mean WITH?"),
    );
    check(
        "CREATE MATERIALIZED VIEW v WITH (ABSORB = 'auto')",
        "syntax error at end of input",
        49,
        Some("Expected AS."),
    );
    check(
        "ALTER MATERIALIZED VIEW v UNSET (ABSORB)",
        "syntax error at or near \"UNSET\"",
        26,
        Some("Expected APPLY, SET or RESET."),
    );
    check(
        "ALTER MATERIALIZED VIEW v RESTE (ABSORB)",
        "syntax error at or near \"RESTE\"",
        26,
        Some("Did you mean RESET?"),
    );
    check(
        "ALTER MATERIALIZED VIEW v",
        "syntax error at end of input",
        25,
        Some("Expected APPLY, SET or RESET."),
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB = 'auto') SET",
        "syntax error at or near \"SET\"",
        48,
        Some("Expected \";\" or end of input."),
    );
    check(
        "ALTER MATERIALIZED VIEW v SET (ABSORB = 'auto') DROP TABLE t",
        "syntax error at or near \"DROP\"",
        48,
        Some("End the previous statement with \";\"."),
    );
}

#[test]
fn a_replacement_takes_no_options() {
    let detail = Some(
        "Applying a replacement leaves the options of the materialized view it replaces as \
         they are.",
    );
    let e = check(
        &format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW v2 FOR v WITH (ABSORB = 'auto') AS {INTERFACE} FROM o t"
        ),
        "a replacement materialized view takes no options",
        46,
        Some(
            "Options belong to the materialized view itself; change them with \
             ALTER MATERIALIZED VIEW v SET (...).",
        ),
    );
    assert_eq!(e.detail.as_deref(), detail);
    let e = check(
        "CREATE REPLACEMENT MATERIALIZED VIEW v2 FOR \"V\" WITH (ABSORB = 'manual')",
        "a replacement materialized view takes no options",
        48,
        Some(
            "Options belong to the materialized view itself; change them with \
             ALTER MATERIALIZED VIEW \"V\" SET (...).",
        ),
    );
    assert_eq!(e.detail.as_deref(), detail);
    // Before FOR, the target is not known yet.
    check(
        &format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW v2 WITH (ABSORB = 'auto') FOR v AS {INTERFACE} FROM o t"
        ),
        "a replacement materialized view takes no options",
        40,
        Some(
            "Options belong to the materialized view itself; change them with \
             ALTER MATERIALIZED VIEW target_view SET (...).",
        ),
    );
}

#[test]
fn if_not_exists_on_every_create() {
    let create = |statement: Statement| match statement {
        Statement::CreateSource(mut s) => {
            s.if_not_exists = true;
            Statement::CreateSource(s)
        }
        Statement::CreateTable(mut s) => {
            s.if_not_exists = true;
            Statement::CreateTable(s)
        }
        Statement::CreateMaterializedView(mut s) => {
            s.if_not_exists = true;
            Statement::CreateMaterializedView(s)
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        one("CREATE SOURCE IF NOT EXISTS src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'p')"),
        create(source("src", "pg_conn", "p"))
    );
    assert_eq!(
        create(source("src", "pg_conn", "p")).to_sql(),
        "CREATE SOURCE IF NOT EXISTS src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'p')"
    );
    assert_eq!(
        one(
            "create table if not exists Orders_V1 from source src (reference orders) \
             with (exclude columns (a))"
        ),
        create(table("orders_v1", "src", "public", "orders", &["a"], &[]))
    );
    assert_eq!(
        create(table("orders_v1", "src", "public", "orders", &[], &[])).to_sql(),
        "CREATE TABLE IF NOT EXISTS orders_v1 FROM SOURCE src (REFERENCE public.orders)"
    );
    assert_eq!(
        one(&format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS orders_json WITH (ABSORB = 'auto') AS \
             {INTERFACE} FROM orders_v1 t"
        )),
        create(view_absorbing("orders_json", "orders_v1", Absorb::Auto))
    );
    assert_eq!(
        create(view("orders_json", "orders_v1")).to_sql(),
        format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS orders_json AS {INTERFACE} FROM orders_v1 t"
        )
    );
    let replacement = Statement::CreateReplacement(CreateReplacement {
        name: s("v2"),
        if_not_exists: true,
        target: s("v"),
        table: s("orders_v2"),
        span: Span::default(),
    });
    assert_eq!(
        one(&format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW IF NOT EXISTS v2 FOR v AS {INTERFACE} FROM orders_v2 t"
        )),
        replacement
    );
    assert_eq!(
        replacement.to_sql(),
        format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW IF NOT EXISTS v2 FOR v AS {INTERFACE} FROM orders_v2 t"
        )
    );
    let sink = Statement::CreateSink(CreateSink {
        name: s("orders_sink"),
        if_not_exists: true,
        from: s("orders_json"),
        connection: s("sink_conn"),
        table: QualifiedName::new("public", "orders_json"),
        kafka: None,
        span: Span::default(),
    });
    assert_eq!(
        one(
            "CREATE SINK IF  NOT /* c */ EXISTS orders_sink FROM orders_json \
             INTO POSTGRES CONNECTION sink_conn (TABLE 'orders_json')"
        ),
        sink
    );
    assert_eq!(
        sink.to_sql(),
        "CREATE SINK IF NOT EXISTS orders_sink FROM orders_json \
         INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json')"
    );
    // `if` alone is still a name, and a quoted "if" is one too.
    assert_eq!(
        one("CREATE SOURCE if FROM POSTGRES CONNECTION c (PUBLICATION 'p')"),
        source("if", "c", "p")
    );
    assert_eq!(
        one("CREATE SOURCE IF NOT EXISTS \"if\" FROM POSTGRES CONNECTION c (PUBLICATION 'p')"),
        create(source("if", "c", "p"))
    );
    assert_eq!(
        create(source("if", "c", "p")).to_sql(),
        "CREATE SOURCE IF NOT EXISTS \"if\" FROM POSTGRES CONNECTION c (PUBLICATION 'p')"
    );
    // Misspelled or incomplete.
    check(
        "CREATE TABLE IF NOT EXIST t FROM SOURCE s (REFERENCE o)",
        "syntax error at or near \"EXIST\"",
        20,
        Some("Did you mean EXISTS?"),
    );
    check(
        "CREATE SINK IF NOT s FROM v INTO POSTGRES CONNECTION c (TABLE 'x')",
        "syntax error at or near \"s\"",
        19,
        Some("Expected EXISTS."),
    );
}

#[test]
fn apply_with_wait() {
    let apply = |wait: Option<Duration>| {
        Statement::ApplyReplacement(ApplyReplacement {
            view: s("orders_json"),
            replacement: s("orders_json_v2"),
            wait,
            span: Span::default(),
        })
    };
    let base = "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2";
    assert_eq!(
        one(&format!("{base} WITH (WAIT = '60s');")),
        apply(Some(Duration::from_secs(60)))
    );
    assert_eq!(
        one(&format!("{base} with (wait '1min30s')")),
        apply(Some(Duration::from_secs(90)))
    );
    assert_eq!(
        one(&format!("{base} WITH (WAIT = '1500ms')")),
        apply(Some(Duration::from_millis(1500)))
    );
    assert_eq!(
        one(&format!("{base} WITH (WAIT = '0s')")),
        apply(Some(Duration::ZERO))
    );
    assert_eq!(
        apply(Some(Duration::from_secs(120))).to_sql(),
        format!("{base} WITH (WAIT = '120s')")
    );
    assert_eq!(
        apply(Some(Duration::from_millis(250))).to_sql(),
        format!("{base} WITH (WAIT = '250ms')")
    );
    assert_eq!(apply(None).to_sql(), base);
    // A name `wait` is quoted in canonical text.
    assert_eq!(
        one("ALTER MATERIALIZED VIEW wait APPLY REPLACEMENT r WITH (WAIT = '1s')"),
        Statement::ApplyReplacement(ApplyReplacement {
            view: s("wait"),
            replacement: s("r"),
            wait: Some(Duration::from_secs(1)),
            span: Span::default(),
        })
    );
    let values = Some(
        "WAIT is a duration: numbers each with a unit (ms, s, m or min, h, d), as in '60s', \
         '500ms' or '1m30s'.",
    );
    for (bad, near) in [
        ("'soon'", "\"soon\""),
        ("'60'", "\"60\""),
        ("'60 s'", "\"60 s\""),
        ("''", "\"\""),
        ("'-1s'", "\"-1s\""),
        ("'99999999999999999999s'", "\"99999999999999999999s\""),
    ] {
        check(
            &format!("{base} WITH (WAIT = {bad})"),
            &format!("invalid value for option WAIT: {near}"),
            base.len() + 14,
            values,
        );
    }
    check(
        &format!("{base} WITH (WAIT = 60)"),
        "syntax error at or near \"60\"",
        base.len() + 14,
        Some(
            "Expected a string literal: WAIT is a duration: numbers each with a unit (ms, s, m or \
             min, h, d), as in '60s', '500ms' or '1m30s'.",
        ),
    );
    let e = check(
        &format!("{base} WITH (WAIT '1s', WAIT '2s')"),
        "conflicting or redundant options",
        base.len() + 18,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("WAIT is specified more than once.")
    );
    check(
        &format!("{base} WITH (ABSORB 'auto')"),
        "syntax error at or near \"ABSORB\"",
        base.len() + 7,
        Some("Expected WAIT."),
    );
    check(
        &format!("{base} WAIT '1s'"),
        "syntax error at or near \"WAIT\"",
        base.len() + 1,
        Some("Expected WITH, \";\" or end of input."),
    );
}

#[test]
fn durations_parse_and_print() {
    assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
    assert_eq!(parse_duration("2min"), Some(Duration::from_secs(120)));
    assert_eq!(parse_duration("1d12h"), Some(Duration::from_secs(129_600)));
    assert_eq!(
        parse_duration("1h1m1s1ms"),
        Some(Duration::from_millis(3_661_001))
    );
    for bad in [
        "", "s", "60", "1.5s", " 1s", "1s ", "1w", "1S", "-1s", "1sm",
    ] {
        assert_eq!(parse_duration(bad), None, "{bad:?}");
    }
    assert_eq!(
        parse_duration(&format!("{}ms", u64::MAX)),
        Some(Duration::from_millis(u64::MAX))
    );
    assert_eq!(parse_duration(&format!("{}s", u64::MAX)), None);
    assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    assert_eq!(format_duration(Duration::from_millis(90_001)), "90001ms");
    assert_eq!(format_duration(Duration::ZERO), "0s");
    assert_eq!(wait_option(Duration::from_secs(60)), " WITH (WAIT = '60s')");
}

// ---------------------------------------------------------------- replicas

use crate::conflict::{ConflictError, ConflictType, Resolver};

fn replica(name: &str, source: &str, connection: &str, tables: &[(&str, &str)]) -> Statement {
    Statement::CreateReplica(CreateReplica {
        name: s(name),
        if_not_exists: false,
        source: s(source),
        connection: s(connection),
        tables: tables
            .iter()
            .map(|(schema, t)| QualifiedName::new(*schema, *t))
            .collect(),
        copy_data: false,
        enabled: true,
        span: Span::default(),
    })
}

fn transform(
    name: &str,
    replica: &str,
    table: (&str, &str),
    sets: &[(&str, &str)],
    filter: Option<&str>,
) -> Statement {
    Statement::CreateTransform(CreateTransform {
        name: s(name),
        if_not_exists: false,
        replica: s(replica),
        table: QualifiedName::new(table.0, table.1),
        sets: sets.iter().map(|(c, e)| (s(c), s(e))).collect(),
        filter: filter.map(s),
        span: Span::default(),
    })
}

#[test]
fn create_replica() {
    let plain = replica("node_b", "src", "node_b_conn", &[]);
    assert_eq!(
        one("CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn;"),
        plain
    );
    assert_eq!(
        plain.to_sql(),
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn"
    );
    assert_eq!(plain.object_kind(), ObjectKind::Replica);
    let Statement::CreateReplica(mut with) = replica(
        "node_b",
        "src",
        "node_b_conn",
        &[("public", "orders"), ("public", "customers")],
    ) else {
        unreachable!()
    };
    with.copy_data = true;
    let with = Statement::CreateReplica(with);
    assert_eq!(
        one(
            "create replica Node_B from source src into postgres connection node_b_conn\n  \
             WITH (TABLES (public.orders, customers), COPY DATA = true)"
        ),
        with
    );
    assert_eq!(
        with.to_sql(),
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn \
         WITH (TABLES (public.orders, public.customers), COPY DATA = true)"
    );
    // `=` is optional, the value may be a literal or on/off, and false is
    // the default (so it is not written).
    assert_eq!(
        one(
            "CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c WITH (COPY DATA 'OFF', TABLES = (\"Shop\".\"Orders\"))"
        ),
        replica("r", "s", "c", &[("Shop", "Orders")])
    );
    assert_eq!(
        one("CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c WITH (COPY DATA = false)")
            .to_sql(),
        "CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c"
    );
    // PostgreSQL's spellings of a boolean option.
    let copies = |value: &str| {
        let Statement::CreateReplica(r) = one(&format!(
            "CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c WITH (COPY DATA = {value})"
        )) else {
            unreachable!()
        };
        r.copy_data
    };
    for yes in [
        "true", "TRUE", "t", "yes", "Y", "on", "1", "'on'", "' yes '",
    ] {
        assert!(copies(yes), "{yes}");
    }
    for no in ["false", "f", "fal", "no", "N", "off", "OFF", "0", "'0'"] {
        assert!(!copies(no), "{no}");
    }
    for neither in ["o", "2", "'yess'", "''", "10"] {
        assert!(
            parse(&format!(
                "CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c WITH (COPY DATA = {neither})"
            ))
            .is_err(),
            "{neither}"
        );
    }
    let Statement::CreateReplica(r) =
        one("CREATE REPLICA IF NOT EXISTS r FROM SOURCE s INTO POSTGRES CONNECTION c")
    else {
        unreachable!()
    };
    assert!(r.if_not_exists);
}

#[test]
fn create_replica_errors() {
    let head = "CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c";
    check(
        "CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONECTION c",
        "syntax error at or near \"CONECTION\"",
        45,
        Some("Did you mean CONNECTION?"),
    );
    check(
        "CREATE REPLICA r FROM SOURCE s TO POSTGRES CONNECTION c",
        "syntax error at or near \"TO\"",
        31,
        Some("Expected INTO."),
    );
    check(
        "CREATE REPLCA r",
        "syntax error at or near \"REPLCA\"",
        7,
        Some("Did you mean REPLICA?"),
    );
    let input = format!("{head} WITH (TABLE (public.orders))");
    check(
        &input,
        "syntax error at or near \"TABLE\"",
        head.len() + 7,
        Some("Did you mean TABLES?"),
    );
    let input = format!("{head} WITH (TABLES ())");
    check(
        &input,
        "empty table list in TABLES",
        head.len() + 15,
        Some(
            "List at least one table, or leave out TABLES to replicate the tables of the source's publication.",
        ),
    );
    let input = format!("{head} WITH (TABLES (orders, public.orders))");
    let e = check(
        &input,
        "table \"public.orders\" specified more than once",
        head.len() + 23,
        None,
    );
    assert_eq!(e.detail.as_deref(), Some("TABLES lists it twice."));
    let input = format!("{head} WITH (COPY DATA = maybe)");
    check(
        &input,
        "invalid value for option COPY DATA: \"maybe\"",
        head.len() + 19,
        Some("COPY DATA is true or false (or on, off, yes, no, 1, 0)."),
    );
    let input = format!("{head} WITH (COPY DATA = true, COPY DATA = false)");
    let e = check(
        &input,
        "conflicting or redundant options",
        head.len() + 25,
        None,
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("COPY DATA is specified more than once.")
    );
    let input = format!("{head} WITH (COPY = true)");
    check(
        &input,
        "syntax error at or near \"=\"",
        head.len() + 12,
        Some("Expected DATA."),
    );
    let input = format!("{head} SHOW REPLICAS");
    check(
        &input,
        "syntax error at or near \"SHOW\"",
        head.len() + 1,
        Some("End the previous statement with \";\"."),
    );
}

#[test]
fn replicas_created_disabled_and_enabled_later() {
    let Statement::CreateReplica(mut off) = replica("node_b", "src", "c", &[("public", "t")])
    else {
        unreachable!()
    };
    off.copy_data = true;
    off.enabled = false;
    let off = Statement::CreateReplica(off);
    assert_eq!(
        one(
            "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION c \
             WITH (TABLES (t), COPY DATA = true, ENABLED = off)"
        ),
        off
    );
    assert_eq!(
        off.to_sql(),
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION c \
         WITH (TABLES (public.t), COPY DATA = true, ENABLED = false)"
    );
    for (sql, enabled) in [
        ("ALTER REPLICA node_b ENABLE", true),
        ("alter replica node_b disable;", false),
    ] {
        let statement = one(sql);
        assert_eq!(
            statement,
            Statement::EnableReplica(EnableReplica {
                name: s("node_b"),
                enabled,
                span: Span::default(),
            })
        );
        assert_eq!(statement.object_kind(), ObjectKind::Replica);
        assert_eq!(one(&statement.to_sql()), statement);
    }
    let e = parse("ALTER REPLICA node_b ENABLE now").unwrap_err();
    assert!(
        e.message.contains("syntax error at or near \"now\""),
        "{e:?}"
    );
    let e = parse("ALTER REPLICA node_b START").unwrap_err();
    assert!(
        e.message.contains("syntax error at or near \"START\""),
        "{e:?}"
    );
    let e =
        parse("CREATE REPLICA r FROM SOURCE s INTO POSTGRES CONNECTION c WITH (ENABLED = maybe)")
            .unwrap_err();
    assert!(
        e.message.contains("invalid value for option ENABLED"),
        "{e:?}"
    );
}

#[test]
fn alter_replica_resolvers() {
    assert_eq!(
        one("ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'ignore';"),
        Statement::AlterReplica(AlterReplica {
            name: s("node_b"),
            conflict: ConflictType::TargetColumnMissing,
            resolver: Some(Resolver::Ignore),
            span: Span::default(),
        })
    );
    let reset = one("ALTER REPLICA node_b RESET CONFLICT RESOLVER target_column_missing");
    assert_eq!(
        reset,
        Statement::AlterReplica(AlterReplica {
            name: s("node_b"),
            conflict: ConflictType::TargetColumnMissing,
            resolver: None,
            span: Span::default(),
        })
    );
    assert_eq!(
        reset.to_sql(),
        "ALTER REPLICA node_b RESET CONFLICT RESOLVER target_column_missing"
    );
    // Names in any case; the resolver may be a bare word.
    let set = one("alter replica \"Node\" set conflict resolver INSERT_EXISTS = skip");
    assert_eq!(
        set.to_sql(),
        "ALTER REPLICA \"Node\" SET CONFLICT RESOLVER insert_exists = 'skip'"
    );
    for &conflict in ConflictType::all() {
        for &resolver in conflict.allowed() {
            let sql = format!(
                "ALTER REPLICA r SET CONFLICT RESOLVER {conflict} = '{}'",
                resolver.name().to_uppercase()
            );
            let Statement::AlterReplica(a) = one(&sql) else {
                unreachable!()
            };
            assert_eq!((a.conflict, a.resolver), (conflict, Some(resolver)));
        }
    }
}

#[test]
fn alter_replica_refuses_resolvers_with_the_allowed_list() {
    let head = "ALTER REPLICA r SET CONFLICT RESOLVER ";
    let cases = [
        (
            "target_colum_missing = 'ignore'",
            0,
            ConflictError::UnknownType(s("target_colum_missing")),
        ),
        (
            "target_column_missing = 'apply_remote'",
            24,
            ConflictError::UnknownResolver(s("apply_remote")),
        ),
        (
            "delete_missing = 'update'",
            17,
            ConflictError::NotAllowed {
                conflict: ConflictType::DeleteMissing,
                resolver: Resolver::Update,
            },
        ),
        (
            "target_column_missing = 'use_default_value'",
            24,
            ConflictError::NotAllowed {
                conflict: ConflictType::TargetColumnMissing,
                resolver: Resolver::UseDefaultValue,
            },
        ),
    ];
    for (rest, at, expected) in cases {
        let input = format!("{head}{rest}");
        let e = check(&input, &expected.to_string(), head.len() + at, None);
        assert_eq!(e.sqlstate(), Some("22023"), "{input}");
    }
    // Syntax errors have no SQLSTATE of their own.
    assert_eq!(err("ALTER REPLICA r SET").sqlstate(), None);
    let e = err("ALTER REPLICA r SET CONFLICT RESOLVER delete_missing = 'update'");
    assert_eq!(
        e.message,
        "conflict resolver \"update\" is not allowed for delete_missing; use one of skip, error"
    );
    let e = err("ALTER REPLICA r RESET CONFLICT RESOLVER nope");
    assert!(
        e.message.starts_with(
            "unknown conflict type \"nope\"; the conflict types are target_table_missing, "
        ),
        "{e}"
    );
    check(
        "ALTER REPLICA r RESET CONFLICT RESOLVER insert_exists = 'skip'",
        "RESET must not include a value",
        54,
        Some(
            "Write RESET CONFLICT RESOLVER insert_exists, or SET CONFLICT RESOLVER insert_exists = '...' to set one.",
        ),
    );
    check(
        "ALTER REPLICA r SET CONFLICT RESOLVER insert_exists 'skip'",
        "syntax error at or near \"'skip'\"",
        52,
        Some("Expected \"=\"."),
    );
    check(
        "ALTER REPLICA r SET CONFLICT RESOLVERS insert_exists = 'skip'",
        "syntax error at or near \"RESOLVERS\"",
        29,
        Some("Did you mean RESOLVER?"),
    );
    check(
        "ALTER REPLICA r DROP CONFLICT RESOLVER insert_exists",
        "syntax error at or near \"DROP\"",
        16,
        Some("Expected SET, RESET, ENABLE or DISABLE."),
    );
    check(
        "ALTER REPLICA r SET CONFLICT RESOLVER insert_exists = (",
        "syntax error at or near \"(\"",
        54,
        Some("Expected a string literal."),
    );
}

#[test]
fn create_transform_keeps_its_sql_verbatim() {
    let issue = "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers\n  \
                 SET first_name = split_part(NEW.name, ' ', 1), last_name = split_part(NEW.name, ' ', 2)\n  \
                 [WHERE NEW.status <> 'test'];";
    let issue = issue.replace(['[', ']'], "");
    let expected = transform(
        "split_name",
        "node_b",
        ("public", "customers"),
        &[
            ("first_name", "split_part(NEW.name, ' ', 1)"),
            ("last_name", "split_part(NEW.name, ' ', 2)"),
        ],
        Some("NEW.status <> 'test'"),
    );
    assert_eq!(one(&issue), expected);
    assert_eq!(
        expected.to_sql(),
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers \
         SET first_name = split_part(NEW.name, ' ', 1), last_name = split_part(NEW.name, ' ', 2) \
         WHERE NEW.status <> 'test'"
    );
    assert_eq!(expected.object_kind(), ObjectKind::Transform);
    // Commas inside parentheses, brackets, strings and quoted names do
    // not split; white space and comments inside an expression are kept,
    // those around it are not.
    assert_eq!(
        one(
            "create transform t on replica r for table orders set \"Total\" = /* c */ coalesce(NEW.a, NEW.b) + (ARRAY[1, 2])[1] ,\n\
             note = 'a, b' || NEW.\"x,y\" -- trailing\n, tags = ARRAY[NEW.a,\n NEW.b]::text[]"
        ),
        transform(
            "t",
            "r",
            ("public", "orders"),
            &[
                ("Total", "coalesce(NEW.a, NEW.b) + (ARRAY[1, 2])[1]"),
                ("note", "'a, b' || NEW.\"x,y\""),
                ("tags", "ARRAY[NEW.a,\n NEW.b]::text[]"),
            ],
            None,
        )
    );
    // WHERE in a subquery belongs to the expression; the filter runs to
    // the end of the statement, commas and all.
    assert_eq!(
        one(
            "CREATE TRANSFORM t ON REPLICA r FOR TABLE s.o SET a = (SELECT 1 WHERE true) \
             WHERE NEW.id IN (1, 2) -- end\n;SHOW TRANSFORMS"
                .split(';')
                .next()
                .unwrap()
        ),
        transform(
            "t",
            "r",
            ("s", "o"),
            &[("a", "(SELECT 1 WHERE true)")],
            Some("NEW.id IN (1, 2)")
        )
    );
    // An internal line comment stays, and the canonical text still parses.
    let commented =
        one("CREATE TRANSFORM t ON REPLICA r FOR TABLE o SET a = 1 -- one\n + 2, b = 3");
    assert_eq!(
        commented,
        transform(
            "t",
            "r",
            ("public", "o"),
            &[("a", "1 -- one\n + 2"), ("b", "3")],
            None
        )
    );
    // `=-` is `=` and a sign, as in PostgreSQL.
    assert_eq!(
        one("CREATE TRANSFORM t ON REPLICA r FOR TABLE o SET a=-1, b =+NEW.b"),
        transform(
            "t",
            "r",
            ("public", "o"),
            &[("a", "-1"), ("b", "+NEW.b")],
            None
        )
    );
    let Statement::CreateTransform(t) =
        one("CREATE TRANSFORM IF NOT EXISTS t ON REPLICA r FOR TABLE o SET a = NEW.b")
    else {
        unreachable!()
    };
    assert!(t.if_not_exists);
    // Two statements.
    let statements =
        parse("CREATE TRANSFORM t ON REPLICA r FOR TABLE o SET a = f(NEW.b); DROP TRANSFORM t")
            .unwrap();
    assert_eq!(statements.len(), 2);
    assert_eq!(statements[0].span(), Span { start: 0, end: 60 });
}

#[test]
fn create_transform_errors() {
    let head = "CREATE TRANSFORM t ON REPLICA r FOR TABLE o SET ";
    let at = head.len();
    check(
        &format!("{head}a = , b = 1"),
        "syntax error at or near \",\"",
        at + 4,
        Some("Expected an expression."),
    );
    check(
        &format!("{head}a ="),
        "syntax error at end of input",
        at + 3,
        Some("Expected an expression."),
    );
    check(
        &format!("{head}a = 1 WHERE"),
        "syntax error at end of input",
        at + 11,
        Some("Expected an expression."),
    );
    check(
        &format!("{head}a = f(NEW.b))"),
        "syntax error at or near \")\"",
        at + 12,
        Some("\")\" closes nothing here."),
    );
    check(
        &format!("{head}a = f(NEW.b]"),
        "syntax error at or near \"]\"",
        at + 11,
        Some("\"]\" closes nothing here."),
    );
    check(
        &format!("{head}a = f(NEW.b, 1"),
        "syntax error at end of input",
        at + 14,
        Some("Expected \")\": a \"(\" is not closed."),
    );
    check(
        &format!("{head}a = f(NEW.b; SHOW REPLICAS"),
        "syntax error at or near \";\"",
        at + 11,
        Some("Expected \")\": a \"(\" is not closed."),
    );
    check(
        &format!("{head}a = $$x$$"),
        "dollar quoting and parameters are not supported in transforms",
        at + 4,
        Some("Write strings as standard literals: 'it''s'."),
    );
    check(
        &format!("{head}a = E'\\n'"),
        "escape string constants (E'...') are not supported in transforms",
        at + 4,
        Some("Write a standard literal, with chr() for special characters: 'a' || chr(10) || 'b'."),
    );
    check(
        &format!("{head}a = 'x\n"),
        "unterminated quoted string at or near \"'x\n\"",
        at + 4,
        None,
    );
    let e = check(
        &format!("{head}a = 1, A = 2"),
        "column \"a\" specified more than once",
        at + 7,
        None,
    );
    assert_eq!(e.detail.as_deref(), Some("SET assigns it twice."));
    check(
        &format!("{head}a := 1"),
        "syntax error at or near \":\"",
        at + 2,
        Some("Expected \"=\"."),
    );
    check(
        &format!("{head}a = 1 WHERE NEW.x\nSHOW REPLICAS"),
        "syntax error at or near \"SHOW\"",
        at + 18,
        Some("End the previous statement with \";\"."),
    );
    check(
        "CREATE TRANSFORM t ON REPLICA r FOR o SET a = 1",
        "syntax error at or near \"o\"",
        36,
        Some("Expected TABLE."),
    );
    check(
        "CREATE TRANSFORM t ON REPLICA r FOR TABLE o WHERE true",
        "syntax error at or near \"WHERE\"",
        44,
        Some("Expected SET."),
    );
    check(
        "CREATE TRANSFORM t ON REPLICA r FOR TABLE o SET where = 1",
        "syntax error at or near \"where\"",
        48,
        Some(
            "Expected a name. WHERE is a reserved keyword; write \"where\" in double quotes to use it as a name.",
        ),
    );
}

#[test]
fn drop_and_show_of_replicas() {
    use ObjectKind::*;
    assert_eq!(one("DROP REPLICA node_b;"), drop(Replica, "node_b", false));
    assert_eq!(
        one("drop transform if exists Split_Name"),
        drop(Transform, "split_name", true)
    );
    assert_eq!(
        drop(Replica, "r", true).to_sql(),
        "DROP REPLICA IF EXISTS r"
    );
    assert_eq!(one("SHOW REPLICAS"), show(Replica));
    assert_eq!(one("show transforms;"), show(Transform));
    assert_eq!(show(Transform).to_sql(), "SHOW TRANSFORMS");
    let resolvers = one("SHOW CONFLICT RESOLVERS FOR REPLICA node_b");
    assert_eq!(
        resolvers,
        Statement::ShowConflictResolvers(ShowConflictResolvers {
            replica: s("node_b"),
            span: Span::default(),
        })
    );
    assert_eq!(resolvers.object_kind(), Replica);
    assert_eq!(
        resolvers.to_sql(),
        "SHOW CONFLICT RESOLVERS FOR REPLICA node_b"
    );
    check(
        "SHOW REPLICA",
        "syntax error at or near \"REPLICA\"",
        5,
        Some("Did you mean REPLICAS?"),
    );
    check(
        "SHOW CONFLICT RESOLVERS node_b",
        "syntax error at or near \"node_b\"",
        24,
        Some("Expected FOR."),
    );
    check(
        "DROP REPLICAS x",
        "syntax error at or near \"REPLICAS\"",
        5,
        Some("Did you mean REPLICA?"),
    );
    // Keywords of the replica statements are quoted in canonical text.
    assert_eq!(sql_ident("replica"), "\"replica\"");
    assert_eq!(
        drop(Transform, "transform", false).to_sql(),
        "DROP TRANSFORM \"transform\""
    );
}

#[test]
fn replica_statements_never_panic_on_prefixes() {
    // Every prefix of every form (cut at any character boundary) parses or
    // fails with an error inside the input.
    let forms = [
        "CREATE REPLICA IF NOT EXISTS node_b FROM SOURCE src INTO POSTGRES CONNECTION c WITH (TABLES (public.orders, x), COPY DATA = true);",
        "ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'ignore';",
        "ALTER REPLICA node_b RESET CONFLICT RESOLVER target_column_missing;",
        "CREATE TRANSFORM s ON REPLICA r FOR TABLE public.c SET a = f(NEW.n, ' ', [1]), \"B\" = 'x,y' WHERE NEW.s <> 'é' -- c\n;",
        "SHOW CONFLICT RESOLVERS FOR REPLICA r; SHOW REPLICAS; SHOW TRANSFORMS; DROP TRANSFORM IF EXISTS t; DROP REPLICA r",
    ];
    for form in forms {
        for (cut, _) in form.char_indices().chain([(form.len(), ' ')]) {
            let input = &form[..cut];
            match parse(input) {
                Ok(statements) => {
                    for statement in statements {
                        let again = parse(&statement.to_sql()).unwrap();
                        assert!(again[0].eq_ignoring_span(&statement), "{input:?}");
                    }
                }
                Err(e) => {
                    assert!(e.position.offset <= input.len(), "{input:?}");
                    let _ = e.to_string();
                }
            }
        }
    }
}

#[test]
fn create_mysql_source() {
    let want = Statement::CreateSource(CreateSource {
        name: s("shop"),
        if_not_exists: false,
        kind: SourceKind::Mysql,
        connection: s("my_conn"),
        publication: String::new(),
        span: Span::default(),
    });
    assert_eq!(
        one("CREATE SOURCE shop FROM MYSQL CONNECTION my_conn;"),
        want
    );
    assert_eq!(
        one("create source shop from MySQL connection my_conn"),
        want
    );
    assert_eq!(
        want.to_sql(),
        "CREATE SOURCE shop FROM MYSQL CONNECTION my_conn"
    );
    let odd = one("CREATE SOURCE IF NOT EXISTS \"Shop\" FROM MYSQL CONNECTION \"my conn\"");
    assert_eq!(
        odd.to_sql(),
        "CREATE SOURCE IF NOT EXISTS \"Shop\" FROM MYSQL CONNECTION \"my conn\""
    );
    assert_eq!(one(&odd.to_sql()), odd);
    // A MySQL source has no publication, nor any other option.
    check(
        "CREATE SOURCE s FROM MYSQL CONNECTION c (PUBLICATION 'p')",
        "a MySQL source takes no options",
        40,
        Some("It reads the server's binlog; choose its tables with CREATE TABLE ... FROM SOURCE."),
    );
    // The table's reference is `database.table`.
    match one("CREATE TABLE orders_v1 FROM SOURCE shop (REFERENCE shop.orders)") {
        Statement::CreateTable(t) => {
            assert_eq!(
                (t.reference.schema.as_str(), t.reference.name.as_str()),
                ("shop", "orders")
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn create_kafka_source_and_table() {
    let want = Statement::CreateSource(CreateSource {
        name: s("ev"),
        if_not_exists: false,
        kind: SourceKind::Kafka,
        connection: s("k"),
        publication: s("orders"),
        span: Span::default(),
    });
    assert_eq!(
        one("CREATE SOURCE ev FROM KAFKA CONNECTION k (TOPIC 'orders');"),
        want
    );
    assert_eq!(
        want.to_sql(),
        "CREATE SOURCE ev FROM KAFKA CONNECTION k (TOPIC 'orders')"
    );
    assert_eq!(one(&want.to_sql()), want);
    let bad = err("CREATE SOURCE ev FROM KAFKA CONNECTION k (TOPIC 'a b')");
    assert_eq!(bad.message, "invalid topic name 'a b'");

    let table = one(
        "CREATE TABLE orders_v1 FROM SOURCE ev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY \
         CONNECTION csr ENVELOPE NONE WITH (EXCLUDE COLUMNS (note))",
    );
    match &table {
        Statement::CreateTable(t) => {
            assert_eq!(
                t.kafka,
                Some(KafkaTable {
                    registry: s("csr"),
                    envelope: TableEnvelope::None,
                    format: TableFormat::Avro,
                    key_format: None,
                    message: None,
                    subject: None,
                })
            );
            assert_eq!(t.exclude_columns, vec![s("note")]);
            assert_eq!(t.reference, QualifiedName::new("", ""));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        table.to_sql(),
        "CREATE TABLE orders_v1 FROM SOURCE ev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY \
         CONNECTION csr ENVELOPE NONE WITH (EXCLUDE COLUMNS (note))"
    );
    assert_eq!(one(&table.to_sql()), table);
    // UPSERT is the default envelope.
    match one(
        "CREATE TABLE t FROM SOURCE ev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    ) {
        Statement::CreateTable(t) => {
            assert_eq!(t.kafka.unwrap().envelope, TableEnvelope::Upsert);
        }
        other => panic!("{other:?}"),
    }
    let debezium = one(
        "create table t from source ev format avro using confluent schema registry connection csr envelope debezium",
    );
    match &debezium {
        Statement::CreateTable(t) => {
            assert_eq!(t.kafka.as_ref().unwrap().envelope, TableEnvelope::Debezium);
        }
        other => panic!("{other:?}"),
    }
    assert!(debezium.to_sql().ends_with(" ENVELOPE DEBEZIUM"));
    assert_eq!(one(&debezium.to_sql()), debezium);
    let json = one(
        "CREATE TABLE t FROM SOURCE ev FORMAT json USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    match &json {
        Statement::CreateTable(t) => {
            assert_eq!(t.kafka.as_ref().unwrap().format, TableFormat::Json);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        json.to_sql().contains(" FORMAT JSON USING "),
        "{}",
        json.to_sql()
    );
    assert_eq!(one(&json.to_sql()), json);
    let protobuf = one(
        "CREATE TABLE t FROM SOURCE ev FORMAT protobuf USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE NONE",
    );
    match &protobuf {
        Statement::CreateTable(t) => {
            let kafka = t.kafka.as_ref().unwrap();
            assert_eq!(kafka.format, TableFormat::Protobuf);
            assert_eq!(kafka.envelope, TableEnvelope::None);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        protobuf.to_sql().contains(" FORMAT PROTOBUF USING "),
        "{}",
        protobuf.to_sql()
    );
    assert_eq!(one(&protobuf.to_sql()), protobuf);
    let named = one(
        "CREATE TABLE t FROM SOURCE ev FORMAT PROTOBUF MESSAGE 'shop.Order' USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    match &named {
        Statement::CreateTable(t) => {
            assert_eq!(
                t.kafka.as_ref().unwrap().message.as_deref(),
                Some("shop.Order")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        named
            .to_sql()
            .contains(" FORMAT PROTOBUF MESSAGE 'shop.Order' USING "),
        "{}",
        named.to_sql()
    );
    assert_eq!(one(&named.to_sql()), named);
    let subject = one(
        "CREATE TABLE t FROM SOURCE ev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr SUBJECT 'ev-shop.Order' ENVELOPE NONE",
    );
    match &subject {
        Statement::CreateTable(t) => {
            let kafka = t.kafka.as_ref().unwrap();
            assert_eq!(kafka.subject.as_deref(), Some("ev-shop.Order"));
            assert_eq!(kafka.envelope, TableEnvelope::None);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        subject
            .to_sql()
            .ends_with(" CONNECTION csr SUBJECT 'ev-shop.Order' ENVELOPE NONE"),
        "{}",
        subject.to_sql()
    );
    assert_eq!(one(&subject.to_sql()), subject);
    // MESSAGE belongs to Protobuf only.
    err(
        "CREATE TABLE t FROM SOURCE ev FORMAT AVRO MESSAGE 'x' USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    err(
        "CREATE TABLE t FROM SOURCE ev FORMAT PROTOBUF MESSAGE shop USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    let thrift = err(
        "CREATE TABLE t FROM SOURCE ev FORMAT THRIFT USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    let hint = thrift.hint.clone().unwrap_or_default();
    assert!(
        hint.contains("AVRO") && hint.contains("JSON") && hint.contains("PROTOBUF"),
        "{thrift:?}"
    );
    let bad = err(
        "CREATE TABLE t FROM SOURCE ev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE MATERIALIZE",
    );
    let hint = bad.hint.clone().unwrap_or_default();
    assert!(
        hint.contains("UPSERT") && hint.contains("NONE") && hint.contains("DEBEZIUM"),
        "{bad:?}"
    );
}

/// `KEY FORMAT f VALUE FORMAT ...` names how a Kafka table's keys are
/// written; it round-trips through the canonical text, is left out when
/// not given, and errs clearly on an unknown format, a missing `VALUE`,
/// and `ENVELOPE NONE` (which reads no keys).
#[test]
fn kafka_table_key_format() {
    let kafka = |statement: &Statement| match statement {
        Statement::CreateTable(t) => t.kafka.clone().unwrap(),
        other => panic!("{other:?}"),
    };
    for (written, want) in [
        ("text", KeyFormat::Text),
        ("BYTES", KeyFormat::Bytes),
        ("avro", KeyFormat::Registry(TableFormat::Avro)),
        ("Json", KeyFormat::Registry(TableFormat::Json)),
        ("PROTOBUF", KeyFormat::Registry(TableFormat::Protobuf)),
    ] {
        let table = one(&format!(
            "CREATE TABLE t FROM SOURCE ev KEY FORMAT {written} VALUE FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE DEBEZIUM"
        ));
        assert_eq!(kafka(&table).key_format, Some(want));
        assert_eq!(
            table.to_sql(),
            format!(
                "CREATE TABLE t FROM SOURCE ev KEY FORMAT {} VALUE FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE DEBEZIUM",
                written.to_ascii_uppercase()
            )
        );
    }
    let plain = one(
        "CREATE TABLE t FROM SOURCE ev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    assert_eq!(kafka(&plain).key_format, None);
    assert!(!plain.to_sql().contains("KEY"), "{}", plain.to_sql());

    let unknown = err(
        "CREATE TABLE t FROM SOURCE ev KEY FORMAT STRING VALUE FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    assert_eq!(unknown.message, "syntax error at or near \"STRING\"");
    let hint = unknown.hint.clone().unwrap_or_default();
    assert!(
        ["TEXT", "BYTES", "AVRO", "JSON", "PROTOBUF"]
            .iter()
            .all(|f| hint.contains(f)),
        "{unknown:?}"
    );
    let no_value = err(
        "CREATE TABLE t FROM SOURCE ev KEY FORMAT TEXT FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    );
    assert_eq!(no_value.message, "syntax error at or near \"FORMAT\"");
    assert!(
        no_value.hint.clone().unwrap_or_default().contains("VALUE"),
        "{no_value:?}"
    );
    err("CREATE TABLE t FROM SOURCE ev KEY");
    err("CREATE TABLE t FROM SOURCE ev KEY FORMAT");
    err("CREATE TABLE t FROM SOURCE ev KEY FORMAT TEXT VALUE");
    let input = "CREATE TABLE t FROM SOURCE ev KEY FORMAT TEXT VALUE FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE NONE";
    let none = err(input);
    assert!(
        none.message
            .starts_with("KEY FORMAT is for ENVELOPE UPSERT and ENVELOPE DEBEZIUM"),
        "{none:?}"
    );
    assert_eq!(none.position.offset, input.find("KEY").unwrap());
    // Every prefix of the clause parses or errs, never panics; the ones
    // that end inside the clause err.
    let full = "CREATE TABLE t FROM SOURCE ev KEY FORMAT PROTOBUF VALUE FORMAT PROTOBUF MESSAGE 'a.B' USING CONFLUENT SCHEMA REGISTRY CONNECTION csr SUBJECT 's' ENVELOPE DEBEZIUM";
    for end in full.find("KEY").unwrap()..full.len() {
        let parsed = parse(&full[..end]);
        if end < full.find(" USING").unwrap() {
            assert!(parsed.is_err(), "{:?}", &full[..end]);
        }
    }
    assert_eq!(
        kafka(&one(full)).key_format,
        Some(KeyFormat::Registry(TableFormat::Protobuf))
    );
}
