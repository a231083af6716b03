use super::*;

use LockMode::*;

fn rel(s: &str) -> RelName {
    RelName::parse(s).expect("name")
}

#[track_caller]
fn locks(sql: &str) -> Vec<(String, LockMode)> {
    let fx = analyze(sql).expect("parses");
    assert!(fx.known, "{sql} is analysed");
    fx.locks
        .iter()
        .map(|l| (l.relation.to_string(), l.mode))
        .collect()
}

#[track_caller]
fn actions(sql: &str) -> Vec<Action> {
    analyze(sql).expect("parses").actions
}

#[test]
fn lock_modes_of_the_reference_table() {
    let ae = |t: &str| vec![(t.to_string(), AccessExclusive)];
    for sql in [
        "ALTER TABLE t ADD COLUMN c int",
        "ALTER TABLE t ADD COLUMN c timestamptz DEFAULT now()",
        "ALTER TABLE t DROP COLUMN c",
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT 1",
        "ALTER TABLE t ALTER COLUMN c DROP DEFAULT",
        "ALTER TABLE t ALTER COLUMN c DROP NOT NULL",
        "ALTER TABLE t RENAME COLUMN c TO d",
        "ALTER TABLE t RENAME TO u",
        "ALTER TABLE t OWNER TO someone",
        "ALTER TABLE t ALTER COLUMN c SET STORAGE EXTERNAL",
        "ALTER TABLE t ALTER COLUMN c TYPE bigint",
        "ALTER TABLE t SET UNLOGGED",
        "ALTER TABLE t ALTER COLUMN c SET NOT NULL",
        "ALTER TABLE t ADD CONSTRAINT k CHECK (c > 0)",
        "ALTER TABLE t ADD CONSTRAINT k CHECK (c > 0) NOT VALID",
        "ALTER TABLE t ADD CONSTRAINT k UNIQUE USING INDEX i",
        "ALTER TABLE t ADD CONSTRAINT k UNIQUE (c)",
        "ALTER TABLE t DROP CONSTRAINT k",
        "VACUUM FULL t",
        "TRUNCATE t",
        "DROP TABLE t",
        "REFRESH MATERIALIZED VIEW t",
        "CLUSTER t USING i",
    ] {
        assert_eq!(locks(sql), ae("t"), "{sql}");
    }
    for sql in [
        "ALTER TABLE t VALIDATE CONSTRAINT k",
        "ALTER TABLE t ALTER COLUMN c SET STATISTICS 500",
        "ALTER TABLE t SET (fillfactor = 70)",
        "ALTER TABLE t SET (autovacuum_vacuum_scale_factor = 0.01)",
        "ALTER TABLE t ALTER COLUMN c SET (n_distinct = 100)",
        "ALTER TABLE t CLUSTER ON i",
        "CREATE INDEX CONCURRENTLY i ON t (c)",
        "VACUUM t",
    ] {
        assert_eq!(
            locks(sql),
            vec![("t".to_string(), ShareUpdateExclusive)],
            "{sql}"
        );
    }
    for sql in [
        "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()",
        "ALTER TABLE t DISABLE TRIGGER tr",
        "ALTER TABLE t ENABLE TRIGGER ALL",
    ] {
        assert_eq!(
            locks(sql),
            vec![("t".to_string(), ShareRowExclusive)],
            "{sql}"
        );
    }
    assert_eq!(
        locks("ALTER TABLE t ADD CONSTRAINT fk FOREIGN KEY (c) REFERENCES s.u (id) NOT VALID"),
        vec![
            ("s.u".to_string(), ShareRowExclusive),
            ("t".to_string(), ShareRowExclusive)
        ]
    );
    assert_eq!(
        locks("CREATE UNIQUE INDEX i ON s.t (c)"),
        vec![("s.t".to_string(), Share)]
    );
    assert_eq!(
        locks("REFRESH MATERIALIZED VIEW CONCURRENTLY m"),
        vec![("m".to_string(), Exclusive)]
    );
    assert_eq!(
        locks("LOCK TABLE a, b IN SHARE ROW EXCLUSIVE MODE"),
        vec![
            ("a".to_string(), ShareRowExclusive),
            ("b".to_string(), ShareRowExclusive)
        ]
    );
    // The strongest action wins.
    assert_eq!(
        locks("ALTER TABLE t SET (fillfactor = 70), ADD COLUMN c int"),
        vec![("t".to_string(), AccessExclusive)]
    );
    let fx = analyze("DROP INDEX CONCURRENTLY IF EXISTS s.i").expect("parses");
    assert!(fx.concurrently);
    assert_eq!(
        fx.locks,
        vec![Lock {
            relation: rel("s.i"),
            mode: ShareUpdateExclusive,
            on_index_table: true,
            partitions: None,
        }]
    );
}

#[test]
fn add_column_reports_what_decides_the_rewrite() {
    let Action::AddColumn {
        default_functions,
        serial,
        identity,
        generated_stored,
        ..
    } = actions("ALTER TABLE t ADD COLUMN c double precision DEFAULT round(random() * 10)")
        .remove(1)
    else {
        panic!("add column")
    };
    assert_eq!(default_functions, vec!["round", "random"]);
    assert!(!serial && !identity && !generated_stored);
    let serial = actions("alter table t add column id bigserial");
    assert!(matches!(&serial[1], Action::AddColumn { serial: true, .. }));
    let identity = actions("ALTER TABLE t ADD COLUMN id int GENERATED ALWAYS AS IDENTITY");
    assert!(matches!(
        &identity[1],
        Action::AddColumn { identity: true, .. }
    ));
    let generated = actions("ALTER TABLE t ADD COLUMN d int GENERATED ALWAYS AS (c * 2) STORED");
    assert!(matches!(
        &generated[1],
        Action::AddColumn {
            generated_stored: true,
            ..
        }
    ));
    let uuid = actions("ALTER TABLE t ADD \"Key\" uuid NOT NULL DEFAULT public.gen_random_uuid()");
    assert!(matches!(
        &uuid[1],
        Action::AddColumn { column, default_functions, .. }
            if column == "Key" && default_functions == &vec!["gen_random_uuid".to_string()]
    ));
}

#[test]
fn type_changes_checks_and_constraints() {
    assert_eq!(
        actions("ALTER TABLE Orders ALTER COLUMN Amount TYPE numeric(12, 2)")[1],
        Action::AlterType {
            table: rel("orders"),
            column: "amount".into(),
            type_text: "numeric(12, 2)".into(),
            using: None,
            collation: None,
        }
    );
    assert!(matches!(
        &actions("ALTER TABLE t ALTER c SET DATA TYPE text COLLATE pg_catalog.\"C\"")[1],
        Action::AlterType { type_text, collation: Some(c), .. }
            if type_text == "text" && c == "pg_catalog.\"C\""
    ));
    // `USING c::int` for `TYPE int` is the conversion PostgreSQL makes
    // without USING; pg_cast then decides the rewrite.
    assert!(matches!(
        &actions("ALTER TABLE t ALTER c TYPE int USING c::int")[1],
        Action::AlterType { using: None, .. }
    ));
    assert!(matches!(
        &actions("ALTER TABLE t ALTER c TYPE varchar(20) USING c::varchar(5)")[1],
        Action::AlterType { using: Some(u), .. } if u == "c::varchar(5)"
    ));
    assert!(matches!(
        &actions("ALTER TABLE t ALTER c TYPE int USING c")[1],
        Action::AlterType { using: None, .. }
    ));
    assert_eq!(
        actions("ALTER TABLE t ADD CONSTRAINT t_c_nn CHECK ((\"C\" IS NOT NULL)) NOT VALID")[1],
        Action::AddCheck {
            table: rel("t"),
            name: Some("t_c_nn".into()),
            not_null_of: Some("C".into()),
            not_valid: true
        }
    );
    assert!(matches!(
        &actions("ALTER TABLE t ADD CHECK (c > 0)")[1],
        Action::AddCheck {
            not_null_of: None,
            not_valid: false,
            ..
        }
    ));
    assert!(matches!(
        &actions("ALTER TABLE t ADD CONSTRAINT p PRIMARY KEY USING INDEX i")[1],
        Action::AddIndexConstraint {
            using_index: true,
            ..
        }
    ));
    assert!(matches!(
        &actions("ALTER TABLE t ADD CONSTRAINT p PRIMARY KEY (id)")[1],
        Action::AddIndexConstraint {
            using_index: false,
            ..
        }
    ));
    assert_eq!(
        actions("ALTER TABLE t VALIDATE CONSTRAINT k")[1],
        Action::ValidateConstraint {
            table: rel("t"),
            name: "k".into()
        }
    );
}

#[test]
fn session_time_zone() {
    for (sql, tz) in [
        ("SET TimeZone = 'UTC'", Some("UTC")),
        ("SET LOCAL TIME ZONE 'Europe/Berlin'", Some("Europe/Berlin")),
        ("set timezone to utc", Some("utc")),
        ("SET TIME ZONE DEFAULT", None),
        ("RESET timezone", None),
        ("RESET ALL", None),
    ] {
        assert_eq!(
            actions(sql),
            vec![Action::SetTimeZone(tz.map(str::to_string))],
            "{sql}"
        );
    }
    assert_eq!(actions("SET lock_timeout = '1s'"), vec![]);
}

#[test]
fn syntax_errors_have_a_position() {
    let e = analyze("ALTER TABLE t ADD COLUMN").unwrap_err();
    assert!(e.offset <= "ALTER TABLE t ADD COLUMN".len(), "{e:?}");
    assert!(analyze("SELEC 1").is_err());
    // Odd input never panics.
    for sql in [
        "",
        ";",
        "ALTER",
        "ALTER TABLE",
        "CREATE INDEX ON",
        "(((",
        "'",
    ] {
        let _ = analyze(sql);
    }
}

#[test]
fn relations_created_dropped_and_functions() {
    assert_eq!(
        actions("CREATE TABLE s.t (id int PRIMARY KEY, u int REFERENCES u)"),
        vec![Action::CreateRelation {
            relation: rel("s.t"),
            kind: RelKind::Table,
            if_not_exists: false
        }]
    );
    assert_eq!(
        locks("CREATE TABLE t (id int, u int REFERENCES u (id))"),
        vec![("u".to_string(), ShareRowExclusive)]
    );
    assert!(
        actions("CREATE INDEX i ON s.t (c)").contains(&Action::CreateRelation {
            relation: rel("s.i"),
            kind: RelKind::Index,
            if_not_exists: false
        })
    );
    assert_eq!(
        actions("CREATE FUNCTION f() RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 1 $$"),
        vec![Action::CreateFunction {
            name: "f".into(),
            volatility: 'i'
        }]
    );
    assert_eq!(
        actions("CREATE FUNCTION g() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
        vec![Action::CreateFunction {
            name: "g".into(),
            volatility: 'v'
        }]
    );
    assert!(
        !analyze("CREATE PUBLICATION p FOR ALL TABLES")
            .unwrap()
            .known
    );
}

#[test]
fn typmods_and_length_coercions() {
    assert_eq!(type_modifiers("numeric(12, 2)"), Some(vec![12, 2]));
    assert_eq!(type_modifiers("varchar(20)[]"), Some(vec![20]));
    assert_eq!(type_modifiers("text"), Some(vec![]));
    assert_eq!(type_modifiers("varchar(n)"), None);
    assert_eq!(typmod("varchar", &[20], "varchar(20)"), Some(24));
    assert_eq!(
        typmod("numeric", &[10, 2], "numeric(10,2)"),
        Some((10 << 16 | 2) + 4)
    );
    assert_eq!(typmod("bpchar", &[], "char"), Some(5));
    assert_eq!(typmod("text", &[], "text"), Some(-1));
    assert!(length_change_is_noop("varchar", 14, 24));
    assert!(length_change_is_noop("varchar", 14, -1));
    assert!(!length_change_is_noop("varchar", 24, 14));
    assert!(!length_change_is_noop("varchar", -1, 14));
    let num = |p: i32, s: i32| ((p << 16) | s) + 4;
    assert!(length_change_is_noop("numeric", num(10, 2), num(12, 2)));
    assert!(!length_change_is_noop("numeric", num(10, 2), num(12, 3)));
    assert!(!length_change_is_noop("numeric", num(10, 2), num(8, 2)));
    assert!(!length_change_is_noop("bpchar", 14, 24));
    // Six fractional digits are what a temporal column without a
    // precision holds.
    assert!(length_change_is_noop("timestamp", -1, 6));
    assert!(length_change_is_noop("timetz", 2, 6));
    assert!(!length_change_is_noop("timestamptz", -1, 5));
    assert!(length_change_is_noop("time", 3, 4));
    assert!(!length_change_is_noop("time", 4, 3));
    assert_eq!(
        check_not_null_column("CHECK ((c IS NOT NULL))"),
        Some("c".into())
    );
    assert_eq!(
        check_not_null_column("CHECK ((\"Odd\" IS NOT NULL)) NOT VALID"),
        Some("Odd".into())
    );
    assert_eq!(check_not_null_column("CHECK ((c > 0))"), None);
}

/// A DO block, a procedure call or a SELECT of a function can run any DDL:
/// its locks are unknown, never "none" (PostgreSQL runs `ALTER TABLE ...
/// TYPE bigint` from a DO block under ACCESS EXCLUSIVE with a rewrite).
#[test]
fn code_that_runs_other_statements_is_not_analysed() {
    for sql in [
        "DO $$ BEGIN EXECUTE 'ALTER TABLE t ALTER COLUMN c TYPE bigint'; END $$",
        "DO LANGUAGE plpgsql $$ BEGIN ALTER TABLE t ADD COLUMN u uuid DEFAULT gen_random_uuid(); END $$",
        "SELECT migrate_orders()",
        "SELECT public.migrate_orders(1, 'x')",
        "SELECT * FROM migrate_orders()",
        "CALL migrate_orders()",
        "DROP TYPE mood CASCADE",
        "DROP FUNCTION f() CASCADE",
    ] {
        assert!(!analyze(sql).expect("parses").known, "{sql} claimed known");
    }
    // Plain settings and a bare SELECT are still analysed (no locks).
    for sql in [
        "SELECT 1",
        "SELECT set_config('lock_timeout', '1s', false)",
        "SELECT pg_advisory_xact_lock(42)",
        "DROP TYPE mood",
        "DROP FUNCTION f()",
    ] {
        assert!(analyze(sql).expect("parses").known, "{sql} not analysed");
    }
}

/// ATTACH PARTITION: SHARE UPDATE EXCLUSIVE on the parent, ACCESS
/// EXCLUSIVE on the table attached, whose rows are read (observed on 15:
/// `pt2 AccessExclusiveLock`, `pt SharedUpdateExclusiveLock`). DETACH
/// locks the partition too.
#[test]
fn attach_and_detach_partition_lock_the_partition() {
    let fx = analyze("ALTER TABLE pt ATTACH PARTITION pt2 FOR VALUES FROM (10) TO (20)").unwrap();
    let mut got: Vec<(String, LockMode)> = fx
        .locks
        .iter()
        .map(|l| (l.relation.to_string(), l.mode))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("pt".to_string(), ShareUpdateExclusive),
            ("pt2".to_string(), AccessExclusive)
        ]
    );
    assert!(
        fx.actions
            .iter()
            .any(|a| matches!(a, Action::Scan { table, .. } if *table == rel("pt2"))),
        "{:?}",
        fx.actions
    );
    let mut got = locks("ALTER TABLE pt DETACH PARTITION pt1");
    got.sort();
    assert_eq!(
        got,
        vec![
            ("pt".to_string(), AccessExclusive),
            ("pt1".to_string(), AccessExclusive)
        ]
    );
    let mut got = locks("ALTER TABLE pt DETACH PARTITION app.pt1 CONCURRENTLY");
    got.sort();
    assert_eq!(
        got,
        vec![
            ("app.pt1".to_string(), ShareUpdateExclusive),
            ("pt".to_string(), ShareUpdateExclusive)
        ]
    );
}

/// REINDEX INDEX reads the whole table to rebuild the index (observed on
/// 15: SHARE on the table, ACCESS EXCLUSIVE on the index, new relfilenode).
#[test]
fn reindex_index_scans_its_table() {
    for sql in ["REINDEX INDEX i", "REINDEX INDEX CONCURRENTLY i"] {
        let fx = analyze(sql).unwrap();
        assert!(
            fx.actions.iter().any(|a| matches!(a, Action::Scan { .. })),
            "{sql}: {:?}",
            fx.actions
        );
    }
}

/// CREATE TABLE ... PARTITION OF takes ACCESS EXCLUSIVE on the parent
/// (observed on 15); the plan predicted no lock at all.
#[test]
fn create_table_partition_of_locks_the_parent() {
    for (sql, parent) in [
        (
            "CREATE TABLE pt3 PARTITION OF pt FOR VALUES FROM (20) TO (30)",
            "pt",
        ),
        ("CREATE TABLE app.pd PARTITION OF app.pt DEFAULT", "app.pt"),
    ] {
        assert_eq!(
            locks(sql),
            vec![(parent.to_string(), AccessExclusive)],
            "{sql}"
        );
    }
}

/// `SET (user_catalog_table = true)` takes ACCESS EXCLUSIVE (observed on
/// 15), unlike fillfactor; TRUNCATE ... CASCADE empties tables the text
/// does not name.
#[test]
fn user_catalog_table_and_truncate_cascade() {
    assert_eq!(
        locks("ALTER TABLE t SET (user_catalog_table = true)"),
        vec![("t".to_string(), AccessExclusive)]
    );
    assert_eq!(
        locks("ALTER TABLE t RESET (user_catalog_table)"),
        vec![("t".to_string(), AccessExclusive)]
    );
    assert_eq!(
        locks("ALTER TABLE t SET (fillfactor = 70, toast_tuple_target = 200)"),
        vec![("t".to_string(), ShareUpdateExclusive)]
    );
    assert!(!analyze("TRUNCATE p CASCADE").unwrap().known);
    assert!(analyze("TRUNCATE p").unwrap().known);
}

/// `USING v::text` is the plain conversion (no rewrite for varchar to
/// text on PostgreSQL 15); only another expression computes values anew.
#[test]
fn using_the_column_cast_is_no_using() {
    let using = |sql: &str| match &actions(sql)[1] {
        Action::AlterType { using, .. } => using.clone(),
        a => panic!("{a:?}"),
    };
    assert_eq!(
        using("ALTER TABLE t ALTER COLUMN v TYPE text USING v::text"),
        None
    );
    assert_eq!(
        using("ALTER TABLE t ALTER COLUMN v TYPE text USING CAST(v AS text)"),
        None
    );
    assert_eq!(
        using("ALTER TABLE t ALTER COLUMN v TYPE text USING v"),
        None
    );
    assert_eq!(
        using("ALTER TABLE t ALTER COLUMN v TYPE text USING lower(v)"),
        Some("lower(v)".into())
    );
    assert_eq!(
        using("ALTER TABLE t ALTER COLUMN v TYPE int USING length(v)::int"),
        Some("length(v)::int".into())
    );
}
