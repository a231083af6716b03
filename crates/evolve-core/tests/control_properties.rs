//! Property tests for the control language: nothing panics on any input,
//! errors point inside the input, spans are sound, and every statement's
//! canonical text parses back to the same statement, also when re-spaced,
//! commented and re-cased.

use evolve_core::conflict::ConflictType;
use evolve_core::control::{
    Absorb, AlterMaterializedView, AlterReplica, ApplyReplacement, ControlError,
    CreateMaterializedView, CreateReplacement, CreateReplica, CreateSink, CreateSource,
    CreateTable, CreateTransform, Drop, EnableReplica, KafkaSink, KafkaTable, ObjectKind,
    QualifiedName, RefreshReferences, Show, ShowConflictResolvers, SinkEnvelope, SinkFormat,
    SourceKind, Span, Statement, TableEnvelope, TableFormat, parse,
};
use std::time::Duration;

use evolve_core::control::{format_duration, parse_duration};
use evolve_core::migration::line_col;
use proptest::prelude::*;

/// Checks what holds for every result of `parse(input)`.
fn check_result(input: &str, result: &Result<Vec<Statement>, ControlError>) {
    match result {
        Ok(statements) => {
            let mut end = 0;
            for statement in statements {
                let span = statement.span();
                assert!(
                    span.start >= end && span.start < span.end,
                    "{input:?}: {span:?}"
                );
                assert!(input.get(span.range()).is_some(), "{input:?}: {span:?}");
                end = span.end;
                round_trip(statement);
            }
        }
        Err(e) => check_error(input, e),
    }
}

fn check_error(input: &str, e: &ControlError) {
    let p = e.position;
    assert!(p.offset <= input.len(), "{input:?}: {e}");
    assert!(input.is_char_boundary(p.offset), "{input:?}: {e}");
    assert_eq!(
        (p.line, p.column),
        line_col(input, p.offset),
        "{input:?}: {e}"
    );
    assert!(!e.message.is_empty());
    let shown = e.to_string();
    assert!(shown.starts_with("ERROR:  "), "{shown}");
    assert!(shown.contains(&format!("\nLINE {}: ", p.line)), "{shown}");
}

fn round_trip(statement: &Statement) {
    let sql = statement.to_sql();
    let again = parse(&sql).unwrap_or_else(|e| panic!("{statement:?}\n{sql}\n{e}"));
    assert_eq!(again.len(), 1, "{sql}");
    assert!(
        again[0].eq_ignoring_span(statement),
        "{sql}\n{statement:?}\n{:?}",
        again[0]
    );
}

// ---------------------------------------------------------------- strategies

/// A table's `EXCLUDE COLUMNS` and `TEXT COLUMNS` lists from generated
/// `(column, list)` pairs (list 0 or 1; others in neither), each column
/// in at most one list, once.
fn column_lists(columns: Vec<(String, u8)>) -> (Vec<String>, Vec<String>) {
    let mut seen = Vec::new();
    let (mut exclude, mut text) = (Vec::new(), Vec::new());
    for (column, list) in columns {
        if seen.contains(&column) {
            continue;
        }
        seen.push(column.clone());
        match list {
            0 => exclude.push(column),
            1 => text.push(column),
            _ => {}
        }
    }
    (exclude, text)
}

/// Identifiers of every kind: plain, keywords, mixed case, quotes, dots,
/// spaces, non-ASCII, control characters; 1 to 63 bytes, no NUL.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z_][a-z0-9_$]{0,20}",
        2 => prop::sample::select(vec![
            "select", "table", "from", "source", "sources", "if", "exists", "show", "data", "t",
            "public", "with", "text", "as", "jsonb", "create", "absorb", "set", "reset", "auto",
            "\"", "'", ";", "--", "/*",
        ])
        .prop_map(String::from),
        2 => "[A-Za-z0-9 _\"'.é;$(),*/-]{1,20}",
        1 => "\\PC{1,12}",
        1 => "[\\x01-\\x7f]{1,8}",
    ]
    .prop_filter("a valid identifier", |s| {
        !s.is_empty() && s.len() <= 63 && !s.contains('\0')
    })
}

fn qualified() -> impl Strategy<Value = QualifiedName> {
    (name(), name()).prop_map(|(schema, name)| QualifiedName::new(schema, name))
}

fn kind() -> impl Strategy<Value = ObjectKind> {
    prop::sample::select(vec![
        ObjectKind::Source,
        ObjectKind::Table,
        ObjectKind::MaterializedView,
        ObjectKind::Sink,
        ObjectKind::Replica,
        ObjectKind::Transform,
    ])
}

fn absorb() -> impl Strategy<Value = Absorb> {
    prop::sample::select(vec![Absorb::Manual, Absorb::Auto])
}

/// Boxed: the nested strategies' value trees are too large for a test
/// thread's stack otherwise.
fn statement() -> BoxedStrategy<Statement> {
    prop_oneof![4 => pipeline_statement(), 1 => replica_statement()].boxed()
}

/// The replicas' statements but transforms (whose SQL is kept verbatim,
/// so re-spacing and re-casing it changes it).
fn replica_statement() -> BoxedStrategy<Statement> {
    let span = Span::default();
    let conflict = prop::sample::select(ConflictType::all().to_vec());
    prop_oneof![
        (
            name(),
            any::<bool>(),
            name(),
            name(),
            prop::collection::vec(qualified(), 0..4),
            any::<bool>()
        )
            .prop_map(
                move |(name, if_not_exists, source, connection, tables, copy_data)| {
                    let mut unique: Vec<QualifiedName> = Vec::new();
                    for t in tables {
                        if !unique.contains(&t) {
                            unique.push(t);
                        }
                    }
                    Statement::CreateReplica(CreateReplica {
                        name,
                        if_not_exists,
                        source,
                        connection,
                        enabled: !copy_data || unique.len().is_multiple_of(2),
                        tables: unique,
                        copy_data,
                        span,
                    })
                }
            ),
        (
            name(),
            conflict,
            any::<prop::sample::Index>(),
            any::<bool>()
        )
            .prop_map(move |(name, conflict, which, set)| {
                let allowed = conflict.allowed();
                Statement::AlterReplica(AlterReplica {
                    name,
                    conflict,
                    resolver: set.then(|| allowed[which.index(allowed.len())]),
                    span,
                })
            }),
        name().prop_map(move |replica| {
            Statement::ShowConflictResolvers(ShowConflictResolvers { replica, span })
        }),
        (name(), any::<bool>()).prop_map(move |(name, enabled)| {
            Statement::EnableReplica(EnableReplica {
                name,
                enabled,
                span,
            })
        }),
    ]
    .boxed()
}

/// SQL expressions as a transform keeps them.
fn expression() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "NEW.a",
        "split_part(NEW.name, ' ', 1)",
        "coalesce(NEW.\"X,y\", 'a, b')",
        "(ARRAY[1, 2])[1] + -3",
        "CASE WHEN NEW.a > 0 THEN 'p' ELSE 'n' END",
        "(SELECT 1 WHERE true)",
        "NEW.a::text || 'é'",
        "1 -- one\n + 2",
        "f(/* c, d */ NEW.a)",
    ])
    .prop_map(String::from)
}

fn transform_statement() -> impl Strategy<Value = Statement> {
    (
        name(),
        any::<bool>(),
        name(),
        qualified(),
        prop::collection::vec((name(), expression()), 1..4),
        prop::option::of(expression()),
    )
        .prop_map(|(name, if_not_exists, replica, table, sets, filter)| {
            let mut unique: Vec<(String, String)> = Vec::new();
            for (c, e) in sets {
                if !unique.iter().any(|(u, _)| *u == c) {
                    unique.push((c, e));
                }
            }
            Statement::CreateTransform(CreateTransform {
                name,
                if_not_exists,
                replica,
                table,
                sets: unique,
                filter: filter.map(|f| format!("NEW.ok AND {f} IS NOT NULL")),
                span: Span::default(),
            })
        })
}

fn pipeline_statement() -> BoxedStrategy<Statement> {
    let span = Span::default();
    prop_oneof![
        (name(), any::<bool>(), name(), "[^\0]{1,20}", any::<bool>()).prop_map(
            move |(name, if_not_exists, connection, publication, mysql)| {
                // A MySQL source has no publication.
                let (kind, publication) = if mysql {
                    (SourceKind::Mysql, String::new())
                } else {
                    (SourceKind::Postgres, publication)
                };
                Statement::CreateSource(CreateSource {
                    name,
                    if_not_exists,
                    kind,
                    connection,
                    publication,
                    span,
                })
            }
        ),
        (
            name(),
            any::<bool>(),
            name(),
            qualified(),
            prop::collection::vec((name(), 0..3u8), 0..6)
        )
            .prop_map(move |(name, if_not_exists, source, reference, columns)| {
                let (exclude_columns, text_columns) = column_lists(columns);
                Statement::CreateTable(CreateTable {
                    name,
                    if_not_exists,
                    source,
                    reference,
                    exclude_columns,
                    text_columns,
                    kafka: None,
                    span,
                })
            }),
        (
            (name(), any::<bool>(), name(), name()),
            (0..3usize, 0..3usize),
            (prop::option::of(name()), prop::option::of(name())),
            prop::collection::vec((name(), 0..3u8), 0..4),
        )
            .prop_map(
                move |(
                    (name, if_not_exists, source, registry),
                    (format, envelope),
                    (message, subject),
                    columns,
                )| {
                    let format =
                        [TableFormat::Avro, TableFormat::Json, TableFormat::Protobuf][format];
                    let envelope = [
                        TableEnvelope::Upsert,
                        TableEnvelope::None,
                        TableEnvelope::Debezium,
                    ][envelope];
                    let (exclude_columns, text_columns) = column_lists(columns);
                    Statement::CreateTable(CreateTable {
                        name,
                        if_not_exists,
                        source,
                        reference: QualifiedName::new("", ""),
                        exclude_columns,
                        text_columns,
                        kafka: Some(KafkaTable {
                            registry,
                            envelope,
                            format,
                            key_format: None,
                            // MESSAGE belongs to Protobuf.
                            message: message.filter(|_| format == TableFormat::Protobuf),
                            subject,
                        }),
                        span,
                    })
                }
            ),
        (name(), any::<bool>(), name(), absorb()).prop_map(
            move |(name, if_not_exists, table, absorb)| {
                Statement::CreateMaterializedView(CreateMaterializedView {
                    name,
                    if_not_exists,
                    table,
                    absorb,
                    span,
                })
            }
        ),
        (name(), any::<bool>(), name(), name()).prop_map(
            move |(name, if_not_exists, target, table)| {
                Statement::CreateReplacement(CreateReplacement {
                    name,
                    if_not_exists,
                    target,
                    table,
                    span,
                })
            }
        ),
        (name(), name(), prop::option::of(any::<u64>())).prop_map(
            move |(view, replacement, wait)| {
                Statement::ApplyReplacement(ApplyReplacement {
                    view,
                    replacement,
                    wait: wait.map(Duration::from_millis),
                    span,
                })
            }
        ),
        (name(), absorb()).prop_map(move |(name, absorb)| {
            Statement::AlterMaterializedView(AlterMaterializedView { name, absorb, span })
        }),
        (
            (name(), any::<bool>(), name(), name()),
            "[A-Za-z0-9_-][A-Za-z0-9._-]{0,30}",
            prop::option::of(name()),
            any::<bool>(),
        )
            .prop_map(
                move |((name, if_not_exists, from, connection), topic, registry, debezium)| {
                    Statement::CreateSink(CreateSink {
                        name,
                        if_not_exists,
                        from,
                        connection,
                        table: QualifiedName::new("", ""),
                        kafka: Some(KafkaSink {
                            topic,
                            format: registry
                                .map_or(SinkFormat::Json, |registry| SinkFormat::Avro { registry }),
                            envelope: if debezium {
                                SinkEnvelope::Debezium
                            } else {
                                SinkEnvelope::Upsert
                            },
                        }),
                        span,
                    })
                }
            ),
        name().prop_map(
            move |source| Statement::RefreshReferences(RefreshReferences { source, span })
        ),
        (name(), any::<bool>(), name(), name(), qualified()).prop_map(
            move |(name, if_not_exists, from, connection, table)| {
                Statement::CreateSink(CreateSink {
                    name,
                    if_not_exists,
                    from,
                    connection,
                    table,
                    kafka: None,
                    span,
                })
            }
        ),
        (kind(), name(), any::<bool>()).prop_map(move |(kind, name, if_exists)| {
            Statement::Drop(Drop {
                kind,
                name,
                if_exists,
                span,
            })
        }),
        kind().prop_map(move |kind| Statement::Show(Show { kind, span })),
    ]
    .boxed()
}

/// Rewrites canonical text without changing its meaning: every space
/// outside quotes becomes some white space or a comment, and every letter
/// outside quotes (keywords, and identifiers the canonical text left bare,
/// which are lower case) may change case.
fn disguise(sql: &str, noise: &[u8]) -> String {
    const SPACES: [&str; 6] = [" ", "\n", "  \t", " /* x /* y */ */ ", " -- c\n", "\r\n"];
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for (i, c) in sql.chars().enumerate() {
        let n = usize::from(noise.get(i % noise.len().max(1)).copied().unwrap_or(0));
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    out.push(c);
                }
                ' ' => out.push_str(SPACES[n % SPACES.len()]),
                c if c.is_ascii_alphabetic() && n % 2 == 1 => out.push(c.to_ascii_uppercase()),
                c => out.push(c),
            },
        }
    }
    out
}

/// Valid statements, as text.
fn valid_text() -> impl Strategy<Value = String> {
    prop_oneof![
        statement().prop_map(|s| s.to_sql()),
        prop::sample::select(vec![
            "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');",
            "CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders) WITH (EXCLUDE COLUMNS (a, b), TEXT COLUMNS (c));",
            "CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;",
            "CREATE REPLACEMENT MATERIALIZED VIEW v2 FOR v AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), CAST('{}' AS jsonb)) AS data FROM orders_v2 AS t",
            "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2;",
            "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2 WITH (WAIT = '1min30s');",
            "CREATE SOURCE IF NOT EXISTS src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'p'); CREATE SINK IF NOT EXISTS s FROM v INTO POSTGRES CONNECTION c (TABLE 'x')",
            "CREATE MATERIALIZED VIEW j WITH (ABSORB = 'auto') AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t",
            "ALTER MATERIALIZED VIEW orders_json SET (ABSORB 'Manual'); ALTER MATERIALIZED VIEW j RESET (ABSORB)",
            "ALTER SOURCE src REFRESH REFERENCES",
            "CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.\"Orders\"');",
            "DROP TABLE IF EXISTS \"Orders\"; SHOW MATERIALIZED VIEWS; -- done",
            "/* one */ SHOW SOURCES; SHOW TABLES;; SHOW SINKS",
            "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION c WITH (TABLES (public.orders, x), COPY DATA = true);",
            "ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'ignore'; ALTER REPLICA node_b RESET CONFLICT RESOLVER insert_exists",
            "CREATE TRANSFORM s ON REPLICA r FOR TABLE public.c SET a = split_part(NEW.n, ' ', 1), b = ARRAY[NEW.x, 2] WHERE NEW.s <> 'test';",
            "SHOW CONFLICT RESOLVERS FOR REPLICA r; SHOW REPLICAS; SHOW TRANSFORMS; DROP TRANSFORM IF EXISTS t; DROP REPLICA r",
        ])
        .prop_map(String::from),
    ]
}

/// Characters worth inserting: the ones the grammar cares about.
fn interesting_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::sample::select(vec![
            '\'', '"', ';', '(', ')', ',', '.', ':', '-', '/', '*', ' ', '\n', '\r', 'a', 'Z', '0',
            '=', '$', '\0', 'é', '\u{feff}',
        ]),
        any::<char>(),
    ]
}

// ---------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_strings_never_panic(input in any::<String>()) {
        check_result(&input, &parse(&input));
    }

    #[test]
    fn token_soup_never_panics(
        parts in prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec![
                    "CREATE", "SOURCE", "TABLE", "MATERIALIZED", "VIEW", "REPLACEMENT", "SINK",
                    "ALTER", "DROP", "SHOW", "FROM", "POSTGRES", "CONNECTION", "PUBLICATION",
                    "REFERENCE", "WITH", "EXCLUDE", "TEXT", "COLUMNS", "AS", "SELECT", "coalesce",
                    "jsonb_strip_nulls", "to_jsonb", "jsonb", "CAST", "data", "FOR", "APPLY",
                    "REFRESH", "REFERENCES", "INTO", "IF", "EXISTS", "SOURCES", "TABLES", "VIEWS",
                    "SINKS", "ABSORB", "SET", "RESET", "'auto'", "'manual'", "(", ")", ",", ";",
                    "NOT", "WAIT", "'60s'", "'1min30s'", "REPLICA", "REPLICAS", "TRANSFORM",
                    "TRANSFORMS", "CONFLICT", "RESOLVER", "RESOLVERS", "COPY", "ON", "WHERE",
                    "NEW", "'ignore'", "target_column_missing", "insert_exists", "[", "]", "$",
                    "E'x'", "<>",
                    ".", "::", "=", "'{}'", "'x'", "\"Q\"", "t", "x",
                    "--c\n", "/* */", "'", "\"", "/*", "\n", "é",
                ]).prop_map(String::from),
                "[a-z]{1,3}",
            ],
            0..40,
        ),
        glue in prop::sample::select(vec![" ", "", "\n"]),
    ) {
        let input = parts.join(glue);
        check_result(&input, &parse(&input));
    }

    #[test]
    fn canonical_text_round_trips(statements in prop::collection::vec(statement(), 1..4)) {
        for statement in &statements {
            round_trip(statement);
        }
        // Several at once, separated by `;`, with spans pointing at each.
        let texts: Vec<String> = statements.iter().map(|s| s.to_sql()).collect();
        let script = texts.join(";\n");
        let parsed = parse(&script).unwrap_or_else(|e| panic!("{script}\n{e}"));
        prop_assert_eq!(parsed.len(), statements.len());
        for ((got, want), text) in parsed.iter().zip(&statements).zip(&texts) {
            prop_assert!(got.eq_ignoring_span(want));
            prop_assert_eq!(&script[got.span().range()], text.as_str());
        }
    }

    #[test]
    fn transforms_round_trip(statement in transform_statement()) {
        round_trip(&statement);
    }

    #[test]
    fn durations_round_trip(millis in any::<u64>(), text in "[0-9a-z]{0,12}") {
        let duration = Duration::from_millis(millis);
        prop_assert_eq!(parse_duration(&format_duration(duration)), Some(duration));
        if let Some(d) = parse_duration(&text) {
            prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }
    }

    #[test]
    fn disguised_text_parses_the_same(
        statement in statement(),
        noise in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let sql = disguise(&statement.to_sql(), &noise);
        let parsed = parse(&sql).unwrap_or_else(|e| panic!("{sql}\n{e}"));
        prop_assert_eq!(parsed.len(), 1, "{}", sql);
        prop_assert!(parsed[0].eq_ignoring_span(&statement), "{}\n{:?}", sql, parsed[0]);
    }

    #[test]
    fn one_character_edits_parse_or_point_inside(
        text in valid_text(),
        at in any::<prop::sample::Index>(),
        insert in prop::option::of(interesting_char()),
    ) {
        let boundaries: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        let i = boundaries[at.index(boundaries.len())];
        let mut edited = text.clone();
        match insert {
            Some(c) => edited.insert(i, c),
            None if i < text.len() => {
                edited.remove(i);
            }
            None => {}
        }
        check_result(&edited, &parse(&edited));
    }
}
