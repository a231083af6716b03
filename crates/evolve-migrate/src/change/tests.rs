use evolve_core::migration::{Phase, StatementKind, parse_script};
use evolve_pg::QualifiedName;

use super::*;

fn table() -> TableInfo {
    let col = |name: &str, ty: &str, not_null: bool, default: Option<&str>| ColumnInfo {
        name: name.into(),
        type_sql: ty.into(),
        not_null,
        default: default.map(String::from),
        generated: false,
        identity: false,
        collation: None,
        inherited: false,
        grants: Vec::new(),
        comment: None,
    };
    TableInfo {
        name: QualifiedName::new("app", "Users"),
        columns: vec![
            col("id", "bigint", true, None),
            col("na\"me", "text", true, Some("'anon'::text")),
            col("qty", "integer", false, None),
        ],
        primary_key: vec!["id".into()],
        column_uses: Vec::new(),
        column_dependents: Vec::new(),
        partitioned: false,
        parent: None,
        children: Vec::new(),
        taken_names: Vec::new(),
    }
}

fn rename() -> Change {
    Change::RenameColumn {
        table: "app.Users".into(),
        old: "na\"me".into(),
        new: "full name".into(),
    }
}

#[test]
fn every_file_parses_and_names_its_phase() {
    let files = generate(&rename(), &table(), &Resolved::default()).unwrap();
    let phases: Vec<Phase> = files.iter().map(|f| f.phase).collect();
    assert_eq!(phases, Phase::ALL);
    for f in &files {
        let script = parse_script(&f.sql).unwrap();
        assert_eq!(script.directives.phase, Some(f.phase), "{}", f.sql);
        assert!(f.sql.contains("-- Compatible"), "{}", f.sql);
    }
    let backfill = parse_script(&files[1].sql).unwrap();
    assert_eq!(
        backfill.directives.backfill.as_deref(),
        Some("rename_users_na_me_to_full_name")
    );
    assert_eq!(backfill.statements.len(), 1);
    assert_eq!(
        backfill.statements[0].text,
        r#"UPDATE "app"."Users" SET "full name" = "na""me""#
    );
}

#[test]
fn rename_quotes_identifiers_and_moves_not_null_and_default() {
    let files = generate(&rename(), &table(), &Resolved::default()).unwrap();
    let expand = &files[0].sql;
    assert!(expand.contains(r#"ALTER TABLE "app"."Users" ADD COLUMN "full name" text;"#));
    assert!(expand.contains(r#"CHECK ("full name" IS NOT NULL) NOT VALID"#));
    assert!(expand.contains(r#"NEW."na""me" := NEW."full name";"#));
    assert!(expand.contains(r#"NEW."full name" := NEW."na""me";"#));
    let switch = &files[2].sql;
    assert!(switch.contains(r#"WHERE "full name"::text IS DISTINCT FROM "na""me"::text"#));
    assert!(switch.contains("VALIDATE CONSTRAINT"));
    assert!(switch.contains(r#"ALTER COLUMN "full name" SET NOT NULL"#));
    let contract = &files[3].sql;
    assert!(contract.contains(r#"DROP COLUMN "na""me""#));
    assert!(contract.contains(r#"ALTER COLUMN "full name" SET DEFAULT 'anon'::text"#));
    // The default moves only once the old column is gone: before, it
    // would hide writes through the old column.
    assert!(!expand.contains("SET DEFAULT") && !switch.contains("SET DEFAULT"));
}

#[test]
fn bad_input_names_the_object_and_the_way_out() {
    let err = |change: Change| {
        generate(&change, &table(), &Resolved::default())
            .unwrap_err()
            .0
    };
    let e = err(Change::RenameColumn {
        table: "app.Users".into(),
        old: "nope".into(),
        new: "x".into(),
    });
    assert!(
        e.contains("column \"nope\" of table app.Users does not exist"),
        "{e}"
    );
    let e = err(Change::RenameColumn {
        table: "app.Users".into(),
        old: "qty".into(),
        new: "id".into(),
    });
    assert!(e.contains("already exists"), "{e}");
    let e = err(Change::RenameColumn {
        table: "app.Users".into(),
        old: "id".into(),
        new: "key".into(),
    });
    assert!(e.contains("primary key"), "{e}");
    let mut t = table();
    t.column_dependents = vec![("qty".into(), "view app.v".into())];
    let e = generate(
        &Change::RenameColumn {
            table: "app.Users".into(),
            old: "qty".into(),
            new: "amount".into(),
        },
        &t,
        &Resolved::default(),
    )
    .unwrap_err()
    .0;
    assert!(e.contains("read by view app.v"), "{e}");
    let e = err(Change::SetNotNull {
        table: "app.Users".into(),
        column: "id".into(),
        default: None,
    });
    assert!(e.contains("already NOT NULL"), "{e}");
}

#[test]
fn change_type_renames_the_shadow_into_place_at_the_switch() {
    let resolved = Resolved {
        new_type: Some("bigint".into()),
        ..Resolved::default()
    };
    let change = Change::ChangeType {
        table: "app.Users".into(),
        column: "qty".into(),
        to: "bigint".into(),
        using: None,
    };
    let files = generate(&change, &table(), &resolved).unwrap();
    assert!(
        files[0]
            .sql
            .contains(r#"ADD COLUMN "_evolve_new_qty" bigint;"#)
    );
    let switch = &files[2].sql;
    let old = switch
        .find(r#"RENAME COLUMN "qty" TO "_evolve_old_qty""#)
        .unwrap();
    let new = switch
        .find(r#"RENAME COLUMN "_evolve_new_qty" TO "qty""#)
        .unwrap();
    assert!(old < new);
    assert!(files[3].sql.contains(r#"DROP COLUMN "_evolve_old_qty""#));
}

/// Views over the column are rebuilt by `evolve migrate apply` around the
/// switch: its first ALTER names the column before the renames, in the form
/// `blocked_alters` sees, so they are captured reading the old name and
/// recreated over the renamed new column.
#[test]
fn change_type_switch_rebuilds_the_views_over_the_column() {
    let resolved = Resolved {
        new_type: Some("bigint".into()),
        ..Resolved::default()
    };
    let change = Change::ChangeType {
        table: "app.Users".into(),
        column: "qty".into(),
        to: "bigint".into(),
        using: None,
    };
    let mut t = table();
    t.column_dependents = vec![
        ("qty".into(), "view app.v".into()),
        ("qty".into(), "materialized view app.m".into()),
    ];
    let files = generate(&change, &t, &resolved).unwrap();
    let switch = parse_script(&files[2].sql).unwrap();
    assert!(!switch.directives.rebuild_dependents_off);
    let first_alter = switch
        .statements
        .iter()
        .position(|s| !evolve_core::migration::blocked_alters(&s.text).is_empty())
        .expect("an ALTER that rebuilds the dependents");
    let blocked = evolve_core::migration::blocked_alters(&switch.statements[first_alter].text);
    assert_eq!(blocked[0].column, "qty");
    let rename = switch
        .statements
        .iter()
        .position(|s| s.text.contains("RENAME COLUMN"))
        .unwrap();
    assert!(first_alter < rename, "{}", files[2].sql);
    assert!(
        switch.statements[first_alter]
            .text
            .ends_with(r#"ALTER COLUMN "qty" TYPE integer"#)
    );

    // What apply cannot rebuild still refuses, naming it.
    t.column_dependents = vec![("qty".into(), "generated column app.Users.twice".into())];
    let e = generate(&change, &t, &resolved).unwrap_err().0;
    assert!(
        e.contains("read by generated column app.Users.twice"),
        "{e}"
    );

    // A split drops the column the view names.
    t.column_dependents = vec![("qty".into(), "view app.v".into())];
    let split = Change::SplitColumn {
        table: "app.Users".into(),
        column: "qty".into(),
        into: vec![("a".into(), "qty".into()), ("b".into(), "qty".into())],
        merge: "a".into(),
    };
    let resolved = Resolved {
        into_types: vec!["integer".into(), "integer".into()],
        ..Resolved::default()
    };
    let e = generate(&split, &t, &resolved).unwrap_err().0;
    assert!(
        e.contains("view app.v") && e.contains("contract step drops"),
        "{e}"
    );

    // Redefined over the new columns at the switch, the view no longer
    // stops the contract step.
    let redefine = "CREATE OR REPLACE VIEW app.v AS\n SELECT ((a)::integer) AS qty;\n";
    let views = Resolved {
        split_views: vec![("view app.v".into(), redefine.into())],
        ..resolved.clone()
    };
    let files = generate(&split, &t, &views).unwrap();
    assert_eq!(files.len(), 4);
    let switch = &files[2].sql;
    assert!(switch.contains(redefine), "{switch}");
    assert!(
        switch.find("DO $evolve$") < switch.find(redefine),
        "the views change after the verify: {switch}"
    );
    assert!(files[3].sql.contains(r#"DROP COLUMN "qty""#));
    // Anything else that reads the column directly still refuses.
    let blocked = Resolved {
        split_blockers: vec!["policy p on table app.\"Users\"".into()],
        ..views
    };
    let e = generate(&split, &t, &blocked).unwrap_err().0;
    assert!(
        e.contains("policy p on table") && e.contains("only plain views"),
        "{e}"
    );
}

#[test]
fn foreign_key_builds_its_index_concurrently_outside_a_transaction() {
    let resolved = Resolved {
        references: Some(QualifiedName::new("app", "customers")),
        has_index: false,
        ..Resolved::default()
    };
    let change = Change::AddForeignKey {
        table: "app.Users".into(),
        columns: vec!["qty".into()],
        references: "app.customers".into(),
        to: vec!["id".into()],
    };
    let files = generate(&change, &table(), &resolved).unwrap();
    assert_eq!(files.len(), 3);
    let index = parse_script(&files[0].sql).unwrap();
    assert!(index.directives.no_transaction);
    assert_eq!(index.statements[0].kind, StatementKind::NonTransactional);
    assert!(files[1].sql.contains("NOT VALID"));
    assert!(files[2].sql.contains("VALIDATE CONSTRAINT"));
}

#[test]
fn until_phase_stops_at_a_later_phase_and_at_the_next_change() {
    use Phase::*;
    let p = [
        None,
        Some(Expand),
        Some(Backfill),
        Some(Switch),
        Some(Contract),
        None,
        Some(Expand),
    ];
    assert_eq!(until_phase(&p, Expand), 2);
    assert_eq!(until_phase(&p[2..], Switch), 2);
    // The contract, the plain file after it, not the next change's expand.
    assert_eq!(until_phase(&p[4..], Contract), 2);
    assert_eq!(until_phase(&p[4..], Expand), 0);
    assert_eq!(until_phase(&[None, None], Expand), 2);
}

#[test]
fn names_from_the_command_line_fold_like_postgresql() {
    assert_eq!(fold_ident("Name"), "name");
    assert_eq!(fold_ident("\"Name\""), "Name");
    assert_eq!(fold_ident("\"a\"\"b\""), "a\"b");
}

/// Every statement of every file of `change` on `table`, as the real
/// parser splits them.
fn statements(change: &Change, table: &TableInfo, resolved: &Resolved) -> Vec<String> {
    generate(change, table, resolved)
        .unwrap()
        .iter()
        .flat_map(|f| {
            parse_script(&f.sql)
                .unwrap_or_else(|e| panic!("{e:?}\n{}", f.sql))
                .statements
        })
        .map(|s| s.text)
        .collect()
}

/// A name is never SQL: one with a line break cannot end the comment it
/// is shown in, and one with `$evolve$` cannot end a function body. The
/// files of every change over such a column hold the same statements as
/// over a plain one.
#[test]
fn hostile_names_stay_names_in_comments_and_bodies() {
    let resolved = Resolved {
        new_type: Some("bigint".into()),
        into_types: vec!["text".into(), "text".into()],
        references: Some(QualifiedName::new("app", "customers")),
        ..Resolved::default()
    };
    let changes = |column: &str| {
        vec![
            Change::RenameColumn {
                table: "app.Users".into(),
                old: column.into(),
                new: "renamed".into(),
            },
            Change::ChangeType {
                table: "app.Users".into(),
                column: column.into(),
                to: "bigint".into(),
                using: None,
            },
            Change::SetNotNull {
                table: "app.Users".into(),
                column: column.into(),
                default: Some("0".into()),
            },
            Change::SplitColumn {
                table: "app.Users".into(),
                column: column.into(),
                into: vec![("a".into(), "'x'".into()), ("b".into(), "'y'".into())],
                merge: "a || b".into(),
            },
            Change::AddForeignKey {
                table: "app.Users".into(),
                columns: vec![column.into()],
                references: "app.customers".into(),
                to: vec!["id".into()],
            },
        ]
    };
    let with_column = |name: &str| {
        let mut t = table();
        t.columns[2].name = name.into();
        t
    };
    let plain = changes("qty")
        .iter()
        .map(|c| statements(c, &with_column("qty"), &resolved).len())
        .collect::<Vec<_>>();
    for hostile in [
        "c\nDROP TABLE victim;\n--",
        "c\rDROP TABLE victim;\r--",
        "a$evolve$; DROP TABLE victim; --",
        "a$evolve",
    ] {
        let t = with_column(hostile);
        for (change, expected) in changes(hostile).iter().zip(&plain) {
            let found = statements(change, &t, &resolved);
            assert_eq!(found.len(), *expected, "{hostile:?} {change:?}: {found:#?}");
            assert!(
                !found.iter().any(|s| s.starts_with("DROP TABLE victim")),
                "{hostile:?} {change:?}: {found:#?}"
            );
        }
    }
    let e = generate(
        &Change::RenameColumn {
            table: "app.Users".into(),
            old: "qty".into(),
            new: "x\nDROP TABLE victim; --".into(),
        },
        &table(),
        &Resolved::default(),
    )
    .unwrap_err()
    .0;
    assert!(e.contains("holds a control character"), "{e}");
}

/// Names PostgreSQL would cut keep their label, as PostgreSQL's own do:
/// the index of a foreign key on a table with a 63-byte name is not
/// named like the table.
#[test]
fn long_names_keep_their_label() {
    let long = "t".repeat(63);
    assert_eq!(object_name(&long, "qty", "idx").len(), 63);
    assert!(object_name(&long, "qty", "idx").ends_with("_qty_idx"));
    assert_eq!(
        object_name("orders", "customer_id", "fkey"),
        "orders_customer_id_fkey"
    );
    let both = object_name(&"a".repeat(40), &"b".repeat(40), "not_null");
    assert_eq!(
        both,
        format!("{}_{}_not_null", "a".repeat(27), "b".repeat(26))
    );
    let multibyte = object_name(&"é".repeat(40), "qty", "idx");
    assert!(
        multibyte.len() <= 63 && multibyte.ends_with("_qty_idx"),
        "{multibyte}"
    );

    let mut t = table();
    t.name = QualifiedName::new("app", long.clone());
    let resolved = Resolved {
        references: Some(QualifiedName::new("app", "customers")),
        ..Resolved::default()
    };
    let files = generate(
        &Change::AddForeignKey {
            table: format!("app.{long}"),
            columns: vec!["qty".into()],
            references: "app.customers".into(),
            to: vec!["id".into()],
        },
        &t,
        &resolved,
    )
    .unwrap();
    let index = &files[0].sql;
    assert!(index.contains("_qty_idx\" ON"), "{index}");
    assert!(!index.contains(&format!("EXISTS \"{long}\" ON")), "{index}");
    assert!(
        files[1].sql.contains("_qty_fkey\" FOREIGN KEY"),
        "{}",
        files[1].sql
    );
}

/// Every PL/pgSQL body (trigger functions and `DO` blocks) says that a
/// name which is both a column and a PL/pgSQL variable (`found`, `tg_op`)
/// is the column.
#[test]
fn plpgsql_bodies_resolve_names_to_columns() {
    let resolved = Resolved {
        new_type: Some("bigint".into()),
        ..Resolved::default()
    };
    let change = Change::ChangeType {
        table: "app.Users".into(),
        column: "qty".into(),
        to: "bigint".into(),
        using: None,
    };
    let files = generate(&change, &table(), &resolved).unwrap();
    let mut bodies = 0;
    for f in &files {
        for (at, _) in f.sql.match_indices("$evolve$\n") {
            if f.sql[..at].ends_with("AS ") || f.sql[..at].ends_with("DO ") {
                bodies += 1;
                assert!(
                    f.sql[at..].starts_with("$evolve$\n#variable_conflict use_column\n"),
                    "{}",
                    f.sql
                );
            }
        }
    }
    assert_eq!(bodies, 3, "expand and switch functions, switch check");
}

/// Tables whose rows a row trigger does not all see, and partitioned
/// tables for a foreign key, are refused with the way out.
#[test]
fn inheritance_and_partitions_are_refused_where_the_files_would_not_work() {
    let mut parent = table();
    parent.children = vec!["app.users_old".into()];
    let e = generate(&rename(), &parent, &Resolved::default())
        .unwrap_err()
        .0;
    assert!(
        e.contains("table app.Users has inheritance children (app.users_old)"),
        "{e}"
    );
    // A partitioned table's row triggers are cloned onto its partitions.
    parent.partitioned = true;
    generate(&rename(), &parent, &Resolved::default()).unwrap();
    let fk = Change::AddForeignKey {
        table: "app.Users".into(),
        columns: vec!["qty".into()],
        references: "app.customers".into(),
        to: vec!["id".into()],
    };
    let resolved = Resolved {
        references: Some(QualifiedName::new("app", "customers")),
        ..Resolved::default()
    };
    let e = generate(&fk, &parent, &resolved).unwrap_err().0;
    assert!(
        e.contains("app.Users is a partitioned table")
            && e.contains("each partition (app.users_old)"),
        "{e}"
    );

    let mut partition = table();
    partition.parent = Some("app.all_users".into());
    partition.columns[1].inherited = true;
    let e = generate(&rename(), &partition, &Resolved::default())
        .unwrap_err()
        .0;
    assert!(
        e.contains("is inherited from app.all_users") && e.contains("on app.all_users instead"),
        "{e}"
    );
}

/// Generated constraint and index names skip the names in use, numbered
/// as PostgreSQL numbers its own; a column's collation goes to the column
/// that replaces it.
#[test]
fn generated_columns_and_names_fit_what_exists() {
    let mut t = table();
    t.taken_names = vec![
        "Users_full name_not_null".into(),
        "Users_full name_not_null1".into(),
    ];
    t.columns[1].collation = Some(r#""pg_catalog"."C""#.into());
    let files = generate(&rename(), &t, &Resolved::default()).unwrap();
    assert!(
        files[0]
            .sql
            .contains(r#"ADD COLUMN "full name" text COLLATE "pg_catalog"."C";"#),
        "{}",
        files[0].sql
    );
    assert!(
        files[0]
            .sql
            .contains(r#"CONSTRAINT "Users_full name_not_null2" CHECK"#),
        "{}",
        files[0].sql
    );
    assert!(
        files[2]
            .sql
            .contains(r#"DROP CONSTRAINT "Users_full name_not_null2""#)
    );

    // A type without a collation takes none.
    let change = Change::ChangeType {
        table: "app.Users".into(),
        column: "na\"me".into(),
        to: "bytea".into(),
        using: Some("convert_to(\"na\"\"me\", 'UTF8')".into()),
    };
    let resolved = Resolved {
        new_type: Some("bytea".into()),
        ..Resolved::default()
    };
    let files = generate(&change, &t, &resolved).unwrap();
    assert!(
        files[0]
            .sql
            .contains(r#"ADD COLUMN "_evolve_new_na""me" bytea;"#),
        "{}",
        files[0].sql
    );
}

/// The column's own privileges and comment are given to the column that
/// takes its place, in the expand step.
#[test]
fn column_privileges_and_comment_move_with_the_column() {
    let mut t = table();
    t.columns[1].grants = vec![
        ColumnGrant {
            privilege: "SELECT".into(),
            grantee: "\"App Role\"".into(),
            grant_option: false,
        },
        ColumnGrant {
            privilege: "UPDATE".into(),
            grantee: "PUBLIC".into(),
            grant_option: true,
        },
    ];
    t.columns[1].comment = Some("it's the name".into());
    let files = generate(&rename(), &t, &Resolved::default()).unwrap();
    let expand = &files[0].sql;
    assert!(
        expand.contains(r#"GRANT SELECT ("full name") ON "app"."Users" TO "App Role";"#),
        "{expand}"
    );
    assert!(
        expand.contains(
            r#"GRANT UPDATE ("full name") ON "app"."Users" TO PUBLIC WITH GRANT OPTION;"#
        ),
        "{expand}"
    );
    assert!(
        expand.contains(r#"COMMENT ON COLUMN "app"."Users"."full name" IS 'it''s the name';"#),
        "{expand}"
    );
}
