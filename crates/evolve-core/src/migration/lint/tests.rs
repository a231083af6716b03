//! Unit tests of the lint rules: one `check` per case, findings rendered
//! as `file:line:col rule`.
use super::*;
use crate::migration::parse_script;

/// evolve's own rules, which the first tests are about.
const OWN: &[&str] = &[
    "syntax-error",
    "matview-select-star",
    "matview-chain-depth",
    "alter-type-rewrite",
    "rename-column-used-by-view",
    "require-concurrent-refresh",
];

fn run(files: &[(&str, &str)], options: &Options<'_>) -> Vec<Finding> {
    let parsed: Vec<Script> = files
        .iter()
        .map(|(_, t)| parse_script(t).expect("parse"))
        .collect();
    let inputs: Vec<LintInput> = files
        .iter()
        .zip(&parsed)
        .map(|((name, text), parsed)| LintInput {
            script: name,
            text,
            parsed,
        })
        .collect();
    lint_with(&inputs, options)
}

fn render(findings: Vec<Finding>, rules: &[&str]) -> Vec<String> {
    findings
        .into_iter()
        .filter(|f| rules.is_empty() || rules.contains(&f.rule))
        .map(|f| format!("{}:{}:{} {}", f.script, f.line, f.column, f.rule))
        .collect()
}

/// Findings of evolve's own rules.
fn check(files: &[(&str, &str)], expected: &[&str]) {
    assert_eq!(render(run(files, &Options::default()), OWN), expected);
}

/// Findings of every rule.
fn check_all(files: &[(&str, &str)], expected: &[&str]) {
    assert_eq!(render(run(files, &Options::default()), &[]), expected);
}

/// Findings of every rule with a catalog.
fn check_catalog(catalog: &CatalogFacts, files: &[(&str, &str)], expected: &[&str]) {
    let options = Options {
        config: None,
        catalog: Some(catalog),
    };
    assert_eq!(render(run(files, &options), &[]), expected);
}

#[test]
fn select_star_in_a_matview() {
    check(
        &[(
            "V1",
            "CREATE TABLE t (a int);\nCREATE MATERIALIZED VIEW m AS SELECT * FROM t;",
        )],
        &["V1:2:38 matview-select-star"],
    );
    check(
        &[("V1", "CREATE MATERIALIZED VIEW m AS SELECT t.* FROM t")],
        &["V1:1:38 matview-select-star"],
    );
    check(
        &[(
            "V1",
            "CREATE MATERIALIZED VIEW m AS SELECT a, count(*) FROM t GROUP BY a",
        )],
        &[],
    );
    check(&[("V1", "CREATE VIEW v AS SELECT * FROM t")], &[]);
}

#[test]
fn chains_deeper_than_two_layers() {
    let files = [
        (
            "V1",
            "CREATE MATERIALIZED VIEW daily AS SELECT d, sum(x) AS s FROM t GROUP BY d",
        ),
        (
            "V2",
            "CREATE MATERIALIZED VIEW monthly AS SELECT sum(s) AS s FROM daily",
        ),
        (
            "V3",
            "CREATE MATERIALIZED VIEW yearly AS SELECT sum(s) AS s FROM monthly",
        ),
    ];
    check(&files[..2], &[]);
    check(&files, &["V3:1:1 matview-chain-depth"]);
}

#[test]
fn type_changes_that_rewrite() {
    let create = (
        "V1",
        "CREATE TABLE orders (id int, status varchar(20), total numeric(10,2), n integer)",
    );
    let alter = |sql: &'static str| [create, ("V2", sql)];
    check(
        &alter("ALTER TABLE orders ALTER COLUMN status TYPE varchar(40)"),
        &[],
    );
    check(
        &alter("ALTER TABLE orders ALTER COLUMN status TYPE text"),
        &[],
    );
    check(
        &alter("ALTER TABLE orders ALTER COLUMN total TYPE numeric(12, 2)"),
        &[],
    );
    check(
        &alter("ALTER TABLE orders ALTER COLUMN status TYPE varchar(10)"),
        &["V2:1:20 alter-type-rewrite"],
    );
    check(
        &alter("ALTER TABLE orders ALTER COLUMN n TYPE bigint"),
        &["V2:1:20 alter-type-rewrite"],
    );
    check(
        &alter("ALTER TABLE orders ALTER COLUMN total TYPE numeric(12,3)"),
        &["V2:1:20 alter-type-rewrite"],
    );
    check(
        &alter("ALTER TABLE orders ALTER COLUMN status TYPE varchar(40) USING upper(status)"),
        &["V2:1:20 alter-type-rewrite"],
    );
    // Unknown old type: nothing to say.
    check(
        &[("V1", "ALTER TABLE other ALTER COLUMN x TYPE bigint")],
        &[],
    );
    // A column added later is known too.
    check(
        &[
            create,
            ("V2", "ALTER TABLE orders ADD COLUMN code char(3)"),
            ("V3", "ALTER TABLE orders ALTER code TYPE char(5)"),
        ],
        &["V3:1:20 alter-type-rewrite"],
    );
}

#[test]
fn renaming_a_column_a_view_reads() {
    let base = [
        ("V1", "CREATE TABLE orders (id int, status text, note text)"),
        (
            "V2",
            "CREATE VIEW open_orders AS SELECT id, status FROM orders WHERE status = 'open'",
        ),
    ];
    check(
        &[
            base[0],
            base[1],
            ("V3", "ALTER TABLE orders RENAME COLUMN status TO state"),
        ],
        &["V3:1:20 rename-column-used-by-view"],
    );
    check(
        &[
            base[0],
            base[1],
            ("V3", "ALTER TABLE orders RENAME COLUMN note TO remark"),
        ],
        &[],
    );
}

#[test]
fn dropped_views_are_not_named_by_a_rename() {
    let files = [
        ("V1", "CREATE TABLE orders (id int, status text)"),
        (
            "V2",
            "CREATE VIEW open_orders AS SELECT id, status FROM orders",
        ),
        ("V3", "DROP VIEW IF EXISTS open_orders"),
        ("V4", "ALTER TABLE orders RENAME COLUMN status TO state"),
    ];
    check(&files, &[]);
    let files = [
        ("V1", "CREATE TABLE orders (id int, status text)"),
        (
            "V2",
            "CREATE MATERIALIZED VIEW mo AS SELECT id, status FROM orders",
        ),
        ("V3", "DROP MATERIALIZED VIEW mo"),
        ("V4", "ALTER TABLE orders RENAME COLUMN status TO state"),
    ];
    check(&files, &[]);
    // A dropped table takes its views with it.
    let files = [
        ("V1", "CREATE TABLE orders (id int, status text)"),
        (
            "V2",
            "CREATE VIEW open_orders AS SELECT id, status FROM orders",
        ),
        (
            "V3",
            "DROP TABLE orders CASCADE; CREATE TABLE orders (id int, status text)",
        ),
        ("V4", "ALTER TABLE orders RENAME COLUMN status TO state"),
    ];
    check(&files, &[]);
}

#[test]
fn a_renamed_table_keeps_its_column_types_and_views() {
    let files = [
        ("V1", "CREATE TABLE orders (id int, code char(3))"),
        ("V2", "ALTER TABLE orders RENAME TO purchases"),
        ("V3", "ALTER TABLE purchases ALTER COLUMN code TYPE char(5)"),
    ];
    check(&files, &["V3:1:23 alter-type-rewrite"]);
    let files = [
        ("V1", "CREATE TABLE orders (id int, status text)"),
        ("V2", "CREATE VIEW v AS SELECT status FROM orders"),
        ("V3", "ALTER TABLE orders RENAME TO purchases"),
        ("V4", "ALTER TABLE purchases RENAME COLUMN status TO state"),
    ];
    check(&files, &["V4:1:23 rename-column-used-by-view"]);
    // A renamed column keeps its type under the new name.
    let files = [
        ("V1", "CREATE TABLE orders (id int, code char(3))"),
        ("V2", "ALTER TABLE orders RENAME COLUMN code TO sku"),
        ("V3", "ALTER TABLE orders ALTER COLUMN sku TYPE char(5)"),
    ];
    check(&files, &["V3:1:20 alter-type-rewrite"]);
}

#[test]
fn a_matview_recreated_under_its_name_is_not_a_layer_of_itself() {
    let mut files = vec![(
        "V1",
        "CREATE MATERIALIZED VIEW daily AS SELECT d, sum(x) AS s FROM t GROUP BY d",
    )];
    for v in ["V2", "V3", "V4", "V5"] {
        files.push((
            v,
            "DROP MATERIALIZED VIEW daily; CREATE MATERIALIZED VIEW daily AS SELECT d, sum(x) AS s FROM t GROUP BY d",
        ));
    }
    check(&files, &[]);
}

#[test]
fn timestamp_to_timestamptz_under_utc_is_no_rewrite() {
    let create = ("V1", "CREATE TABLE e (at timestamp)");
    check(
        &[
            create,
            ("V2", "ALTER TABLE e ALTER COLUMN at TYPE timestamptz"),
        ],
        &["V2:1:15 alter-type-rewrite"],
    );
    for set in [
        "SET timezone = 'UTC';",
        "SET TimeZone TO 'UTC';",
        "SET TIME ZONE 'UTC';",
        "SET LOCAL timezone = 'Etc/UTC';",
    ] {
        let text = format!("{set}\nALTER TABLE e ALTER COLUMN at TYPE timestamp with time zone");
        check(&[create, ("V2", &text)], &[]);
    }
    // The setting does not carry over to the next file.
    check(
        &[
            create,
            ("V2", "SET timezone = 'UTC'"),
            ("V3", "ALTER TABLE e ALTER COLUMN at TYPE timestamptz"),
        ],
        &["V3:1:15 alter-type-rewrite"],
    );
}

/// A temporal column without a precision holds six fractional digits, the
/// most there are: a change to precision 6 keeps every value (no rewrite,
/// observed as an unchanged relfilenode on PostgreSQL 15), one to fewer
/// digits rounds them (a rewrite).
#[test]
fn temporal_precision_six_is_what_a_column_without_one_holds() {
    let create = (
        "V1",
        "CREATE TABLE e (at timestamp, tz timestamptz(3), t time, ttz time with time zone)",
    );
    let utc = "SET timezone = 'UTC';\n";
    for (change, rewrites) in [
        ("at TYPE timestamp(6)", false),
        ("at TYPE timestamp(3)", true),
        ("tz TYPE timestamptz(6)", false),
        ("tz TYPE timestamptz(4)", false),
        ("tz TYPE timestamptz(2)", true),
        ("at TYPE timestamptz(6)", false),
        ("at TYPE timestamp(6) with time zone", false),
        ("at TYPE timestamptz(5)", true),
        ("t TYPE time(6)", false),
        ("t TYPE time(2)", true),
        ("ttz TYPE time(6) with time zone", false),
        ("ttz TYPE timetz(1)", true),
    ] {
        let text = format!("{utc}ALTER TABLE e ALTER COLUMN {change}");
        let found = run(&[create, ("V2", &text)], &Options::default());
        assert_eq!(
            found.iter().any(|f| f.rule == "alter-type-rewrite"),
            rewrites,
            "{change}: {found:?}"
        );
    }
}

#[test]
fn columns_named_like_keywords_are_seen() {
    let files = [
        (
            "V1",
            "CREATE TABLE item (id int, name varchar(10), type char(2), value text, data text, label text)",
        ),
        ("V2", "CREATE VIEW named AS SELECT name, label FROM item"),
        ("V3", "ALTER TABLE item ALTER COLUMN type TYPE char(4)"),
        ("V4", "ALTER TABLE item RENAME COLUMN name TO title"),
        ("V5", "ALTER TABLE item RENAME COLUMN label TO tag"),
        (
            "V6",
            "ALTER TABLE item ALTER COLUMN value TYPE int USING value::int",
        ),
    ];
    check(
        &files,
        &[
            "V3:1:18 alter-type-rewrite",
            "V4:1:18 rename-column-used-by-view",
            "V5:1:18 rename-column-used-by-view",
            "V6:1:18 alter-type-rewrite",
        ],
    );
}

#[test]
fn a_file_that_does_not_parse_is_an_error() {
    let found = run(&[("V1", "SELECT 1;\nSELEC 1;")], &Options::default());
    assert!(!found.is_empty());
    assert_eq!(found[0].rule, "syntax-error");
    assert_eq!(found[0].level, Level::Error);
    assert_eq!((found[0].line, found[0].column), (2, 1));
}

#[test]
fn advice_knows_the_file_runs_in_one_transaction() {
    // In a transaction a failure rolls everything back: no IF NOT EXISTS advice.
    check_all(&[("V1", "CREATE TABLE public.t (id bigint)")], &[]);
    check_all(
        &[(
            "V1",
            "-- evolve:no-transaction\nCREATE TABLE public.t (id bigint)",
        )],
        &["V1:2:1 prefer-robust-stmts"],
    );
    // CONCURRENTLY fails in a transaction.
    check_all(
        &[("V1", "CREATE INDEX CONCURRENTLY i ON public.t (a)")],
        &["V1:1:1 ban-concurrent-index-creation-in-transaction"],
    );
    check_all(
        &[(
            "V1",
            "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY i ON public.t (a)",
        )],
        &[],
    );
    // BEGIN/COMMIT inside evolve's transaction.
    check_all(
        &[("V1", "BEGIN;\nSELECT 1;\nCOMMIT;")],
        &["V1:1:1 transaction-nesting", "V1:3:1 transaction-nesting"],
    );
    check_all(
        &[("V1", "-- evolve:no-transaction\nBEGIN;\nSELECT 1;")],
        &["V1:2:1 ban-uncommitted-transaction"],
    );
    // NOT VALID and VALIDATE in the same file: the same transaction.
    check_all(
        &[(
            "V1",
            "ALTER TABLE public.t ADD CONSTRAINT c CHECK (a > 0) NOT VALID;\nALTER TABLE public.t VALIDATE CONSTRAINT c;",
        )],
        &["V1:2:22 constraint-missing-not-valid"],
    );
    check_all(
        &[
            (
                "V1",
                "ALTER TABLE public.t ADD CONSTRAINT c CHECK (a > 0) NOT VALID",
            ),
            ("V2", "ALTER TABLE public.t VALIDATE CONSTRAINT c"),
        ],
        &[],
    );
}

#[test]
fn tables_created_in_the_file_are_empty() {
    check_all(
        &[(
            "V1",
            "CREATE TABLE public.t (id bigint, a text);\nCREATE INDEX i ON public.t (a);\nALTER TABLE public.t ADD COLUMN b uuid DEFAULT gen_random_uuid();\nALTER TABLE public.t ALTER COLUMN a SET NOT NULL;\nALTER TABLE public.t ADD CONSTRAINT u UNIQUE (a);",
        )],
        &[],
    );
}

#[test]
fn squawk_rules_on_existing_tables() {
    let cases: &[(&str, &[&str])] = &[
        (
            "CREATE INDEX i ON public.t (a)",
            &["require-concurrent-index-creation"],
        ),
        ("DROP INDEX i", &["require-concurrent-index-deletion"]),
        ("REINDEX TABLE public.t", &["require-concurrent-reindex"]),
        (
            "ALTER TABLE public.t ADD COLUMN b uuid DEFAULT gen_random_uuid()",
            &["adding-field-with-default"],
        ),
        (
            "ALTER TABLE public.t ADD COLUMN b timestamptz DEFAULT now()",
            &[],
        ),
        (
            "ALTER TABLE public.t ADD COLUMN b jsonb DEFAULT '{}'::jsonb NOT NULL",
            &[],
        ),
        (
            "ALTER TABLE public.t ADD COLUMN b bigint GENERATED ALWAYS AS (a * 2) STORED",
            &["adding-field-with-default"],
        ),
        (
            "ALTER TABLE public.t ADD COLUMN b bigserial",
            &["adding-field-with-default", "prefer-identity"],
        ),
        (
            "ALTER TABLE public.t ADD COLUMN b text NOT NULL",
            &["adding-required-field"],
        ),
        (
            "ALTER TABLE public.t ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES public.u (id)",
            &["adding-foreign-key-constraint"],
        ),
        (
            "ALTER TABLE public.t ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES public.u (id) NOT VALID",
            &[],
        ),
        (
            "ALTER TABLE public.t ADD CONSTRAINT c CHECK (a > 0)",
            &["constraint-missing-not-valid"],
        ),
        (
            "ALTER TABLE public.t ADD CONSTRAINT u UNIQUE (a)",
            &["disallowed-unique-constraint"],
        ),
        (
            "ALTER TABLE public.t ADD CONSTRAINT u UNIQUE USING INDEX i",
            &[],
        ),
        (
            "ALTER TABLE public.t ADD PRIMARY KEY (id)",
            &["adding-serial-primary-key-field"],
        ),
        (
            "ALTER TABLE public.t ALTER COLUMN a SET NOT NULL",
            &["adding-not-nullable-field"],
        ),
        (
            "ALTER TABLE public.t ALTER COLUMN a DROP NOT NULL",
            &["ban-drop-not-null"],
        ),
        (
            "ALTER TABLE public.t ALTER COLUMN a TYPE bigint",
            &["changing-column-type"],
        ),
        ("ALTER TABLE public.t DROP COLUMN a", &["ban-drop-column"]),
        (
            "ALTER TABLE public.t RENAME COLUMN a TO b",
            &["renaming-column"],
        ),
        ("ALTER TABLE public.t RENAME TO u", &["renaming-table"]),
        (
            "ALTER TABLE public.t DETACH PARTITION public.p",
            &["require-concurrent-partition-detach"],
        ),
        ("DROP TABLE public.t", &["ban-drop-table"]),
        ("DROP DATABASE d", &["ban-drop-database"]),
        ("TRUNCATE public.t CASCADE", &["ban-truncate-cascade"]),
        ("VACUUM FULL public.t", &["prefer-repack"]),
        ("CLUSTER public.t USING i", &["prefer-repack"]),
        (
            "CREATE DOMAIN pos AS int CHECK (VALUE > 0)",
            &["ban-create-domain-with-constraint"],
        ),
        (
            "ALTER DOMAIN pos ADD CONSTRAINT c CHECK (VALUE > 1)",
            &["ban-alter-domain-with-add-constraint"],
        ),
        (
            "ALTER TYPE mood ADD VALUE 'meh'",
            &["require-enum-value-ordering"],
        ),
        ("ALTER TYPE mood ADD VALUE 'meh' AFTER 'ok'", &[]),
        (
            "UPDATE public.t SET a = 1, a = 2",
            &["ban-duplicate-column-assignments"],
        ),
        (
            "REFRESH MATERIALIZED VIEW m",
            &["require-concurrent-refresh"],
        ),
        ("REFRESH MATERIALIZED VIEW CONCURRENTLY m", &[]),
        (
            "CREATE TABLE public.t (id int, small smallint, s serial, at timestamp, c char(2), v varchar(9))",
            &[
                "prefer-bigint-over-int",
                "prefer-bigint-over-smallint",
                "prefer-bigint-over-int",
                "prefer-identity",
                "prefer-timestamptz",
                "ban-char-field",
                "prefer-text-field",
            ],
        ),
        ("CREATE TABLE t (id bigint)", &[]),
    ];
    for (sql, rules) in cases {
        let got: Vec<&str> = run(&[("V1", sql)], &Options::default())
            .into_iter()
            .map(|f| f.rule)
            .collect();
        assert_eq!(&got, rules, "{sql}");
    }
}

#[test]
fn varchar_widening_is_no_rewrite_and_squawk_is_wrong() {
    check_all(
        &[
            ("V1", "CREATE TABLE public.t (id bigint, s varchar(10))"),
            ("V2", "ALTER TABLE public.t ALTER COLUMN s TYPE varchar(20)"),
        ],
        &["V1:1:37 prefer-text-field"],
    );
}

#[test]
fn set_not_null_backed_by_a_valid_check() {
    check_all(
        &[
            (
                "V1",
                "ALTER TABLE public.t ADD CONSTRAINT a_nn CHECK (a IS NOT NULL) NOT VALID",
            ),
            ("V2", "ALTER TABLE public.t VALIDATE CONSTRAINT a_nn"),
            ("V3", "ALTER TABLE public.t ALTER COLUMN a SET NOT NULL"),
        ],
        &[],
    );
}

#[test]
fn the_catalog_gives_types_checks_sizes_and_readers() {
    let mut t = TableFacts {
        bytes: 8192,
        rows: Some(1000),
        ..TableFacts::default()
    };
    t.columns.insert("s".into(), "character varying(10)".into());
    t.columns.insert("n".into(), "integer".into());
    t.not_null_checks.insert("a_nn".into(), ("a".into(), true));
    t.readers
        .insert("n".into(), ["v_orders".to_string()].into());
    let mut catalog = CatalogFacts::default();
    catalog.tables.insert("orders".into(), t);
    catalog.tables.insert("fresh".into(), TableFacts::default());
    check_catalog(
        &catalog,
        &[(
            "V9",
            "ALTER TABLE public.orders ALTER COLUMN s TYPE varchar(20);\nALTER TABLE public.orders ALTER COLUMN n TYPE bigint;\nALTER TABLE public.orders ALTER COLUMN a SET NOT NULL;\nCREATE INDEX i ON public.fresh (x);\nALTER TABLE public.orders RENAME COLUMN n TO m;",
        )],
        &[
            "V9:2:27 alter-type-rewrite",
            "V9:5:27 renaming-column",
            "V9:5:27 rename-column-used-by-view",
        ],
    );
}

/// A partitioned table has no storage of its own, so its size is its
/// partitions'; an index on it cannot be built CONCURRENTLY (PostgreSQL
/// refuses), and the way without a write lock is ON ONLY, each partition
/// concurrently, then ATTACH.
#[test]
fn an_index_on_a_partitioned_table() {
    let mut catalog = CatalogFacts::default();
    catalog.tables.insert(
        "events".into(),
        TableFacts {
            partitioned: true,
            bytes: 1 << 30,
            rows: Some(10_000_000),
            ..TableFacts::default()
        },
    );
    catalog.tables.insert(
        "events_2026".into(),
        TableFacts {
            bytes: 1 << 30,
            rows: Some(10_000_000),
            ..TableFacts::default()
        },
    );
    let found = run(
        &[(
            "V9",
            "-- evolve:no-transaction\nCREATE INDEX i ON public.events (a);\nCREATE INDEX CONCURRENTLY j ON public.events (a);\nCREATE INDEX k ON ONLY public.events (a);\nCREATE INDEX CONCURRENTLY IF NOT EXISTS k_2026 ON public.events_2026 (a);\nALTER INDEX public.k ATTACH PARTITION public.k_2026;",
        )],
        &Options {
            config: None,
            catalog: Some(&catalog),
        },
    );
    let got: Vec<(u32, &str)> = found
        .iter()
        .filter(|f| {
            !f.rule.starts_with("require-") || f.rule == "require-concurrent-index-creation"
        })
        .map(|f| (f.line, f.rule))
        .collect();
    assert_eq!(
        got,
        [
            (2, "require-concurrent-index-creation"),
            (3, "concurrent-index-on-partitioned-table"),
        ]
    );
    assert!(found[0].message.contains("ON ONLY"), "{}", found[0].message);
    assert!(!found[0].message.contains("use CREATE INDEX CONCURRENTLY"));
    // A partitioned table made by the files is known as one without the
    // catalog: its concurrent build fails as well; an empty one needs no
    // finding for a plain build.
    check_all(
        &[(
            "V1",
            "CREATE TABLE public.p (id bigint, a bigint) PARTITION BY RANGE (id);\nCREATE INDEX i ON public.p (a);\nCREATE INDEX CONCURRENTLY j ON public.p (a);",
        )],
        &["V1:3:1 concurrent-index-on-partitioned-table"],
    );
}

#[test]
fn ignore_comments_and_levels() {
    check_all(
        &[(
            "V1",
            "-- evolve:ignore ban-drop-table\nDROP TABLE public.t;\nDROP TABLE public.u;",
        )],
        &["V1:3:12 ban-drop-table"],
    );
    check_all(
        &[(
            "V1",
            "-- evolve:ignore-file ban-drop-table, ban-drop-column\nDROP TABLE public.t;\nDROP TABLE public.u;",
        )],
        &["V1:1:1 unused-ignore"],
    );
    check_all(
        &[("V1", "-- evolve:ignore no-such-rule\nSELECT 1;")],
        &["V1:1:1 unused-ignore"],
    );
    let config = Config::parse("[rules]\nban-drop-table = \"off\"\nrequire-timeout-settings = \"error\" # squawk's alias\n").unwrap();
    let found = run(
        &[(
            "V1",
            "DROP TABLE public.t;\nCREATE INDEX i ON public.t (a);",
        )],
        &Options {
            config: Some(&config),
            catalog: None,
        },
    );
    let got: Vec<(&str, Level)> = found.iter().map(|f| (f.rule, f.level)).collect();
    assert_eq!(
        got,
        [
            ("require-concurrent-index-creation", Level::Error),
            ("require-lock-timeout", Level::Error),
            ("require-statement-timeout", Level::Error),
        ]
    );
    assert!(
        Config::parse("nope = \"off\"")
            .unwrap_err()
            .to_string()
            .contains("\"nope\" is not a lint rule")
    );
    assert!(Config::parse("ban-drop-table = \"loud\"").is_err());
}

#[test]
fn using_the_column_itself_is_no_explicit_conversion() {
    let create = ("V1", "CREATE TABLE e (at timestamp, n int)");
    check(
        &[
            create,
            (
                "V2",
                "SET timezone = 'UTC';\nALTER TABLE e ALTER COLUMN at TYPE timestamptz USING at;\nALTER TABLE e ALTER COLUMN at TYPE timestamp USING at::timestamp;",
            ),
        ],
        &[],
    );
    check(
        &[
            create,
            ("V2", "ALTER TABLE e ALTER COLUMN n TYPE text USING n + 1"),
        ],
        &["V2:1:15 alter-type-rewrite"],
    );
}

#[test]
fn an_index_on_a_matview_created_in_the_file_is_no_risk() {
    check_all(
        &[(
            "V1",
            "CREATE MATERIALIZED VIEW public.m AS SELECT 1::bigint AS x;\nCREATE UNIQUE INDEX m_x ON public.m (x);",
        )],
        &[],
    );
}

/// Found in the pre-release audit (PostgreSQL 15, relfilenode before and
/// after): a column of a domain with a CHECK or NOT NULL is added by a
/// rewrite, with or without a (constant) default; txid_current() is STABLE
/// (`pg_proc.provolatile = 's'`), so its default is stored once, no rewrite.
#[test]
fn audit_domain_columns_rewrite_and_txid_current_is_stable() {
    let rules = ["adding-field-with-default"];
    let files = [
        (
            "V1__t.sql",
            "CREATE TABLE t (id bigint PRIMARY KEY);\nCREATE DOMAIN pos AS int CHECK (VALUE > 0);\nCREATE DOMAIN plain_int AS int;",
        ),
        (
            "V2__x.sql",
            "ALTER TABLE t ADD COLUMN x bigint DEFAULT txid_current();\nALTER TABLE t ADD COLUMN d pos DEFAULT 5;\nALTER TABLE t ADD COLUMN e public.pos;\nALTER TABLE t ADD COLUMN f plain_int DEFAULT 1;",
        ),
    ];
    assert_eq!(
        render(run(&files, &Options::default()), &rules),
        [
            "V2__x.sql:2:15 adding-field-with-default",
            "V2__x.sql:3:15 adding-field-with-default"
        ]
    );
}

/// REINDEX (not CONCURRENTLY) holds ACCESS EXCLUSIVE on the index, which
/// every query planned on the table needs: reads wait too.
#[test]
fn audit_reindex_message_says_reads_wait() {
    let findings = run(
        &[("V1__r.sql", "REINDEX INDEX t_pkey;")],
        &Options::default(),
    );
    let f = findings
        .iter()
        .find(|f| f.rule == "require-concurrent-reindex")
        .expect("finding");
    assert!(f.message.contains("reads"), "{}", f.message);
}

/// text, varchar and citext convert to each other without a rewrite
/// (relfilenode unchanged on PostgreSQL 15): no alter-type-rewrite.
#[test]
fn audit_citext_text_is_no_rewrite() {
    check(
        &[
            (
                "V1__t.sql",
                "CREATE TABLE t (id bigint PRIMARY KEY, a text, b citext, c varchar(10));",
            ),
            (
                "V2__x.sql",
                "ALTER TABLE t ALTER COLUMN a TYPE citext;\nALTER TABLE t ALTER COLUMN b TYPE text;\nALTER TABLE t ALTER COLUMN c TYPE citext;\nALTER TABLE t ALTER COLUMN a TYPE varchar(5);",
            ),
        ],
        &["V2__x.sql:4:15 alter-type-rewrite"],
    );
}

/// ADD COLUMN ... CHECK reads every row (pg_stat_user_tables.seq_scan goes
/// up by one on PostgreSQL 15, default or not); on a table created in the
/// same file it is fine.
#[test]
fn audit_add_column_with_check_scans() {
    let rules = ["constraint-missing-not-valid"];
    let files = [
        ("V1__t.sql", "CREATE TABLE t (id bigint PRIMARY KEY);"),
        (
            "V2__x.sql",
            "ALTER TABLE t ADD COLUMN x int CHECK (x > 0);\nCREATE TABLE u (id bigint PRIMARY KEY);\nALTER TABLE u ADD COLUMN y int CHECK (y > 0);",
        ),
    ];
    assert_eq!(
        render(run(&files, &Options::default()), &rules),
        ["V2__x.sql:1:15 constraint-missing-not-valid"]
    );
}
