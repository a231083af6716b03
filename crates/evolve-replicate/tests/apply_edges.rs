//! Edges of the apply a release review found: each test is one finding,
//! applied through [`Applier`] into a real node (no upstream needed), by
//! the row-by-row path (`apply`) and the set path (`apply_group`) where
//! both can meet it.

mod common;

use std::sync::Arc;

use common::*;
use evolve_core::change::{Bytes, ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};
use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_pipeline::Position;
use evolve_replicate::Transform;
use evolve_replicate::apply::{Applier, Transaction};

fn column(name: &str, type_oid: u32, key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.into(),
        type_oid,
        typmod: -1,
        key,
        attnum: None,
    }
}

/// Upstream table `public.t (id int8 key, v text, status text)`.
fn schema() -> Arc<TableSchema> {
    Arc::new(TableSchema {
        schema: "public".into(),
        name: "t".into(),
        columns: vec![
            column("id", 20, true),
            column("v", 25, false),
            column("status", 25, false),
        ],
    })
}

fn text(s: impl ToString) -> Datum {
    Datum::Text(Bytes::from(s.to_string()))
}

fn image(id: i64, v: &str, status: Option<&str>) -> Vec<Datum> {
    vec![text(id), text(v), status.map_or(Datum::Null, text)]
}

fn change(kind: ChangeKind, id: i64, v: &str, status: Option<&str>) -> (u32, RowChange) {
    let (old, new) = match kind {
        ChangeKind::Delete => (Some(vec![text(id), Datum::Missing, Datum::Missing]), None),
        _ => (None, Some(image(id, v, status))),
    };
    (
        16384,
        RowChange {
            table: schema(),
            kind,
            old,
            new,
        },
    )
}

fn txn(n: u64, rows: Vec<(u32, RowChange)>) -> Transaction {
    Transaction {
        end: Position::from_u64(0x1000 + 0x100 * n),
        commit_time_micros: 1_700_000_000_000_000 + n as i64,
        rows,
    }
}

async fn node(name: &str, ddl: &str) -> (evolve_test::TestDb, tokio_postgres::Client) {
    let db = evolve_test::fresh_db(name).await;
    let client = connect(&db.url).await;
    client.batch_execute(ddl).await.unwrap();
    (db, client)
}

/// A node whose key is `GENERATED ALWAYS AS IDENTITY` (as the upstream's
/// often is) takes the upstream's rows, as native logical replication
/// does: an insert with the upstream's key is not refused with `cannot
/// insert a non-DEFAULT value into column "id"`, nor an update with
/// `column "id" can only be updated to DEFAULT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_key_generated_always_as_identity_takes_the_upstreams_rows() {
    use ChangeKind::{Delete, Insert, Update};
    let ddl =
        "CREATE TABLE t (id int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text, status text)";
    let txns = vec![
        txn(
            1,
            vec![change(Insert, 1, "a", None), change(Insert, 2, "b", None)],
        ),
        txn(2, vec![change(Update, 1, "a2", Some("x"))]),
        txn(
            3,
            vec![change(Delete, 2, "", None), change(Insert, 3, "c", None)],
        ),
        // update_missing turned insert.
        txn(4, vec![change(Update, 7, "seven", None)]),
    ];
    let want = [
        "(1,a2,x)".to_string(),
        "(3,c,)".to_string(),
        "(7,seven,)".to_string(),
    ];
    // Row by row.
    let (_a_db, mut a) = node("identity_rows", ddl).await;
    let mut applier = Applier::open(&a, "r", Resolvers::default(), Vec::new())
        .await
        .unwrap();
    for t in &txns {
        if let Err(e) = applier.apply(&mut a, t).await {
            panic!("row by row: {e}");
        }
    }
    assert_eq!(rows(&a, "SELECT * FROM t ORDER BY id").await, want);
    // Set by set.
    let (_b_db, mut b) = node("identity_set", ddl).await;
    let mut applier = Applier::open(&b, "r", Resolvers::default(), Vec::new())
        .await
        .unwrap();
    for t in &txns {
        if let Err(e) = applier.apply_group(&mut b, std::slice::from_ref(t)).await {
            panic!("set by set: {e}");
        }
    }
    assert_eq!(rows(&b, "SELECT * FROM t ORDER BY id").await, want);
}

/// A transform's `WHERE` keeps rows it rejects off the node: an update
/// after which the row no longer passes removes the node's row (as
/// PostgreSQL's row filters turn such an update into a delete), instead
/// of leaving it with the values from before; an update after which it
/// passes brings it (update_missing, insert_or_skip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_the_transform_filter_rejects_takes_the_row_off_the_node() {
    use ChangeKind::{Insert, Update};
    let (_db, mut n) = node(
        "filter_update",
        "CREATE TABLE t (id int8 PRIMARY KEY, v text, status text, upper_v text)",
    )
    .await;
    let transform = Transform {
        name: "only_live".into(),
        schema: "public".into(),
        table: "t".into(),
        sets: vec![("upper_v".into(), "upper(NEW.v)".into())],
        filter: Some("NEW.status IS DISTINCT FROM 'test'".into()),
    };
    let mut applier = Applier::open(&n, "r", Resolvers::default(), vec![transform])
        .await
        .unwrap();
    let txns = vec![
        txn(
            1,
            vec![
                change(Insert, 1, "a", Some("live")),
                change(Insert, 2, "b", Some("test")),
            ],
        ),
        // 1 turns test: it leaves the node; 2 turns live: it arrives.
        txn(
            2,
            vec![
                change(Update, 1, "a2", Some("test")),
                change(Update, 2, "b2", Some("live")),
            ],
        ),
    ];
    for t in &txns {
        applier.apply(&mut n, t).await.unwrap();
    }
    assert_eq!(
        rows(&n, "SELECT * FROM t ORDER BY id").await,
        ["(2,b2,live,B2)"],
        "the node holds exactly the rows the filter passes"
    );
}

/// A node whose schema changes while the replica applies to it (a
/// column dropped, a table dropped, between two transactions, well within
/// the time a match is kept) is read again and the next transaction
/// resolved by the resolvers for the node as it now is, instead of halting
/// the replica on the statement prepared for the node as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_schema_change_between_transactions_is_matched_again_not_a_halt() {
    use ChangeKind::{Insert, Update};
    let (_db, mut n) = node(
        "node_ddl",
        "CREATE TABLE t (id int8 PRIMARY KEY, v text, status text)",
    )
    .await;
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    resolvers
        .set(ConflictType::TargetTableMissing, Resolver::Skip)
        .unwrap();
    let mut applier = Applier::open(&n, "r", resolvers, Vec::new()).await.unwrap();
    let t1 = txn(1, vec![change(Insert, 1, "a", Some("s"))]);
    applier.apply(&mut n, &t1).await.unwrap();
    // Row by row and set by set, a column dropped.
    n.batch_execute("ALTER TABLE t DROP COLUMN status")
        .await
        .unwrap();
    let t2 = txn(2, vec![change(Update, 1, "b", Some("s2"))]);
    if let Err(e) = applier.apply(&mut n, &t2).await {
        panic!("row by row after DROP COLUMN: {e}");
    }
    let t3 = txn(3, vec![change(Insert, 2, "c", Some("s3"))]);
    if let Err(e) = applier.apply_group(&mut n, std::slice::from_ref(&t3)).await {
        panic!("set by set after DROP COLUMN: {e}");
    }
    assert_eq!(
        rows(&n, "SELECT * FROM t ORDER BY id").await,
        ["(1,b)", "(2,c)"]
    );
    // The table dropped: target_table_missing = skip.
    n.batch_execute("DROP TABLE t").await.unwrap();
    let t4 = txn(4, vec![change(Insert, 3, "d", None)]);
    match applier.apply(&mut n, &t4).await {
        Ok(applied) => assert_eq!(
            applied
                .conflicts
                .get(&(ConflictType::TargetTableMissing, Resolver::Skip)),
            Some(&1)
        ),
        Err(e) => panic!("after DROP TABLE: {e}"),
    }
    assert_eq!(applier.position(), t4.end);
}

/// A statement the node refuses to prepare for a reason of its table (here
/// a column the node computes itself, `GENERATED ALWAYS AS ... STORED`,
/// that the upstream sends) halts the replica at the transaction, with
/// one line naming the table and the way out, so that it is recorded and
/// `evolve replicate skip` can pass it; it is not retried as a transient
/// failure of the node without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_the_node_refuses_to_prepare_halts_at_the_transaction() {
    use ChangeKind::Insert;
    let (_db, mut n) = node(
        "prepare_refused",
        "CREATE TABLE t (id int8 PRIMARY KEY, v text, status text GENERATED ALWAYS AS (upper(v)) STORED)",
    )
    .await;
    let mut applier = Applier::open(&n, "r", Resolvers::default(), Vec::new())
        .await
        .unwrap();
    let t1 = txn(1, vec![change(Insert, 1, "a", Some("s"))]);
    let e = applier.apply(&mut n, &t1).await.unwrap_err();
    let message = e.to_string();
    assert!(
        matches!(e, evolve_replicate::ReplicateError::Halted { .. }),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains("\"public\".\"t\""), "{message}");
    assert!(message.contains("status"), "{message}");
    // Recorded on the node: skippable.
    let halted: Option<String> = n
        .query_one(
            "SELECT halted_lsn::text FROM evolve_replica_progress WHERE replica = 'r'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(halted.as_deref(), Some(t1.end.to_string().as_str()));
}

/// Names that are SQL (a schema, table and columns with quotes,
/// semicolons and capitals) are data: rows reach the node's table of that
/// name by both paths, and a transform over them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_are_quoted_by_both_paths() {
    use ChangeKind::{Delete, Insert, Update};
    let (_db, mut n) = node(
        "hostile_names",
        r#"CREATE SCHEMA "We""ird; DROP TABLE x; --";
           CREATE TABLE "We""ird; DROP TABLE x; --"."T a""b" ("i""d" int8 PRIMARY KEY, "Val" text, "st;atus" text);
           CREATE TABLE x (y int);"#,
    )
    .await;
    let schema = Arc::new(TableSchema {
        schema: "We\"ird; DROP TABLE x; --".into(),
        name: "T a\"b".into(),
        columns: vec![
            column("i\"d", 20, true),
            column("Val", 25, false),
            column("st;atus", 25, false),
        ],
    });
    let row = |kind: ChangeKind, id: i64, v: &str| {
        let (old, new) = match kind {
            Delete => (Some(vec![text(id), Datum::Missing, Datum::Missing]), None),
            _ => (None, Some(vec![text(id), text(v), text("s")])),
        };
        (
            16384u32,
            RowChange {
                table: Arc::clone(&schema),
                kind,
                old,
                new,
            },
        )
    };
    let txns = [
        txn(
            1,
            vec![
                row(Insert, 1, "a"),
                row(Insert, 2, "b"),
                row(Insert, 3, "c"),
            ],
        ),
        txn(2, vec![row(Update, 1, "a2"), row(Delete, 2, "")]),
        // insert_exists (update), update_missing (insert_or_skip).
        txn(3, vec![row(Insert, 3, "c2"), row(Update, 9, "z")]),
    ];
    let mut applier = Applier::open(&n, "r", Resolvers::default(), Vec::new())
        .await
        .unwrap();
    applier.apply_group(&mut n, &txns[..2]).await.unwrap();
    applier.apply(&mut n, &txns[2]).await.unwrap();
    let table = r#"SELECT * FROM "We""ird; DROP TABLE x; --"."T a""b" ORDER BY 1"#;
    assert_eq!(rows(&n, table).await, ["(1,a2,s)", "(3,c2,s)", "(9,z,s)"]);
    assert_eq!(rows(&n, "SELECT count(*) FROM x").await, ["(0)"]);
    // A transform reading and filtering on such a column.
    let transform = Transform {
        name: "t".into(),
        schema: schema.schema.clone(),
        table: schema.name.clone(),
        sets: vec![("Val".into(), r#"upper(NEW."Val")"#.into())],
        filter: Some(r#"NEW."i""d" < 100"#.into()),
    };
    let mut applier = Applier::open(&n, "r", Resolvers::default(), vec![transform])
        .await
        .unwrap();
    applier
        .apply(
            &mut n,
            &txn(4, vec![row(Insert, 4, "d"), row(Insert, 400, "no")]),
        )
        .await
        .unwrap();
    assert_eq!(
        rows(&n, table).await,
        ["(1,a2,s)", "(3,c2,s)", "(4,D,s)", "(9,z,s)"]
    );
}

/// An update that changes nothing the node has (every other column is
/// one the upstream does not send, or the node computes) finds the row
/// without writing a column: a generated column first in the table is
/// not set to itself (`column "total" can only be updated to DEFAULT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_of_nothing_the_node_has_writes_no_column() {
    use ChangeKind::{Insert, Update};
    let (_db, mut n) = node(
        "update_nothing",
        "CREATE TABLE t (id int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                         total int8 GENERATED ALWAYS AS (id * 2) STORED,
                         extra text DEFAULT 'd')",
    )
    .await;
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    let mut applier = Applier::open(&n, "r", resolvers, Vec::new()).await.unwrap();
    for t in [
        txn(1, vec![change(Insert, 1, "a", None)]),
        txn(2, vec![change(Update, 1, "b", None)]),
    ] {
        if let Err(e) = applier.apply(&mut n, &t).await {
            panic!("{e}");
        }
    }
    assert_eq!(rows(&n, "SELECT * FROM t").await, ["(1,2,d)"]);
}

/// A node keyed by more than the upstream's identity (`PRIMARY KEY (id,
/// status)` where the upstream is keyed by `id`): an update does not send
/// the old `status`, so the node's row cannot be named by it. Found by the
/// new image, the update changing `status` missed the node's row and
/// update_missing inserted a second one: the row doubled. It halts
/// instead, as native logical replication refuses it, naming the column
/// and the ways out, by both paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_a_node_key_beyond_the_upstreams_identity_cannot_name_halts() {
    use ChangeKind::{Insert, Update};
    let ddl = "CREATE TABLE t (id int8, v text, status text, PRIMARY KEY (id, status))";
    let insert = txn(1, vec![change(Insert, 1, "a", Some("eu"))]);
    let update = txn(2, vec![change(Update, 1, "a", Some("us"))]);
    for set in [false, true] {
        let (_db, mut n) = node(if set { "node_key_set" } else { "node_key_rows" }, ddl).await;
        let mut applier = Applier::open(&n, "r", Resolvers::default(), Vec::new())
            .await
            .unwrap();
        applier.apply(&mut n, &insert).await.unwrap();
        let result = if set {
            applier
                .apply_group(&mut n, std::slice::from_ref(&update))
                .await
        } else {
            applier.apply(&mut n, &update).await
        };
        let table = rows(&n, "SELECT * FROM t ORDER BY status").await;
        let e = match result {
            Ok(_) => panic!("the update applied (set path: {set}); the node has {table:?}"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("\"status\"") && e.contains("REPLICA IDENTITY FULL"),
            "{e}"
        );
        assert_eq!(table, ["(1,a,eu)"]);
    }
}

/// A value that is not UTF-8 (an upstream in SQL_ASCII sends its bytes
/// as they are) halts the replica at its transaction, naming the table,
/// so it is recorded and can be skipped: it was a failure "of the node"
/// retried without end, naming nothing; and a transform's `NEW` does not
/// change it to fit (U+FFFD) and write that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_utf8_halts_at_its_transaction() {
    let (_db, mut n) = node(
        "not_utf8",
        "CREATE TABLE t (id int8 PRIMARY KEY, v text, status text, upper_v text)",
    )
    .await;
    let bad = |n: u64, id: i64| {
        let mut row = change(ChangeKind::Insert, id, "", None);
        row.1.new.as_mut().unwrap()[1] = Datum::Text(Bytes::from(vec![b'a', 0xff, b'b']));
        txn(n, vec![row])
    };
    let mut applier = Applier::open(&n, "r", Resolvers::default(), Vec::new())
        .await
        .unwrap();
    let e = applier.apply(&mut n, &bad(1, 1)).await.unwrap_err();
    assert!(
        matches!(e, evolve_replicate::ReplicateError::Halted { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("\"public\".\"t\""), "{e}");
    let transform = Transform {
        name: "up".into(),
        schema: "public".into(),
        table: "t".into(),
        sets: vec![("upper_v".into(), "upper(NEW.v)".into())],
        filter: None,
    };
    let mut applier = Applier::open(&n, "r", Resolvers::default(), vec![transform])
        .await
        .unwrap();
    let e = applier.apply(&mut n, &bad(2, 2)).await.unwrap_err();
    assert!(
        matches!(e, evolve_replicate::ReplicateError::Halted { .. }),
        "{e}"
    );
    assert!(rows(&n, "SELECT * FROM t").await.is_empty());
}

/// A delete of a row the transform's filter kept off the node, with the
/// whole old row (REPLICA IDENTITY FULL upstream), is filtered: not a
/// `delete_missing`, which under `error` halted the replica for a row it
/// was told not to have. A row the filter passes that the node lacks is
/// still one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_of_a_row_the_filter_kept_off_is_no_delete_missing() {
    use ChangeKind::{Delete, Insert};
    let (_db, mut n) = node(
        "filter_delete",
        "CREATE TABLE t (id int8 PRIMARY KEY, v text, status text, upper_v text)",
    )
    .await;
    let transform = Transform {
        name: "only_live".into(),
        schema: "public".into(),
        table: "t".into(),
        sets: vec![("upper_v".into(), "upper(NEW.v)".into())],
        filter: Some("NEW.status IS DISTINCT FROM 'test'".into()),
    };
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::DeleteMissing, Resolver::Error)
        .unwrap();
    let mut applier = Applier::open(&n, "r", resolvers, vec![transform])
        .await
        .unwrap();
    // The delete of a FULL identity: every column of the old row.
    let full_delete = |id: i64, status: &str| {
        let mut row = change(Delete, id, "", None);
        row.1.old = Some(image(id, "x", Some(status)));
        row
    };
    let txns = [
        txn(1, vec![change(Insert, 1, "a", Some("test"))]),
        txn(2, vec![full_delete(1, "test")]),
    ];
    for t in &txns {
        if let Err(e) = applier.apply(&mut n, t).await {
            panic!("{e}");
        }
    }
    assert_eq!(history(&n, "r").await.len(), 0);
    let e = applier
        .apply(&mut n, &txn(3, vec![full_delete(2, "live")]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("delete_missing"), "{e}");
}
