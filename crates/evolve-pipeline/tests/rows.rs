//! Typed row changes on the bus: what a follower of rows receives for
//! inserts, updates (a TOASTed value left alone, a key changed), deletes
//! (key-only and full old rows) and a truncate, each in its upstream
//! transaction at its position, in order, with the table's schema at that
//! position; and nothing collected while nobody follows rows.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use evolve_core::change::{ChangeKind, Datum, RowChange};
use evolve_pipeline::Pipeline;
use evolve_pipeline::bus::Committed;
use tokio::sync::broadcast;

const WAIT: Duration = Duration::from_secs(30);

fn text(s: &str) -> Datum {
    Datum::Text(evolve_core::change::Bytes::copy_from_slice(s.as_bytes()))
}

/// Transactions from the follower until one has rows for which `done`
/// holds; every transaction seen, in order.
async fn until(
    rx: &mut broadcast::Receiver<Arc<Committed>>,
    done: impl Fn(&[RowChange]) -> bool,
) -> Vec<Arc<Committed>> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let committed = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("the transaction arrives on the bus")
            .expect("the follower keeps up");
        let finished = committed.rows.as_deref().is_some_and(&done);
        seen.push(committed);
        if finished {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_follower_gets_each_transaction_typed_in_order() {
    let env = env("rows_typed").await;
    let up = connect(&env.up.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, note text, qty numeric(8, 2));
         CREATE TABLE audit (id int PRIMARY KEY, what text);
         ALTER TABLE audit REPLICA IDENTITY FULL;
         INSERT INTO orders VALUES (1, 'first', 1.50);",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders", "audit"]).await;
    let running = Running::start(pipeline.clone());
    let sink = connect(&env.sink.url).await;
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;

    // Nobody follows rows: the transaction carries none.
    let mut plain = pipeline.bus().subscribe();
    up.batch_execute("INSERT INTO orders VALUES (2, 'second', 2)")
        .await
        .unwrap();
    let committed = tokio::time::timeout(WAIT, plain.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(committed.rows.is_none(), "{committed:?}");
    assert_eq!(committed.changes.len(), 1);

    let mut follower = pipeline.bus().follow_rows();
    // Random hex: pglz cannot shrink it under the TOAST threshold, so it is
    // stored out of line and an update that leaves it alone does not send it.
    // Three simple queries: in one, BEGIN would take the INSERT into its
    // transaction.
    up.batch_execute(
        "INSERT INTO orders SELECT 3, string_agg(md5(random()::text), ''), 3.25 FROM generate_series(1, 400)",
    )
    .await
    .unwrap();
    let big: String = up
        .query_one("SELECT note FROM orders WHERE id = 3", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(big.len(), 12_800);
    up.batch_execute(
        "BEGIN;
         UPDATE orders SET qty = 4 WHERE id = 3;
         UPDATE orders SET id = 30 WHERE id = 2;
         DELETE FROM orders WHERE id = 1;
         INSERT INTO audit VALUES (1, 'a');
         DELETE FROM audit WHERE id = 1;
         COMMIT;",
    )
    .await
    .unwrap();
    up.batch_execute("TRUNCATE audit").await.unwrap();
    let seen = until(&mut follower.rx, |rows| {
        rows.iter().any(|r| r.kind == ChangeKind::Truncate)
    })
    .await;
    let transactions: Vec<&Arc<Committed>> = seen
        .iter()
        .filter(|c| c.rows.as_ref().is_some_and(|r| !r.is_empty()))
        .collect();
    assert_eq!(transactions.len(), 3, "{seen:#?}");
    assert!(
        transactions.windows(2).all(|w| w[0].pos < w[1].pos),
        "positions increase"
    );

    // 1. The insert, with the table's schema.
    let rows = transactions[0].rows.as_ref().unwrap();
    assert_eq!(rows.len(), 1);
    let insert = &rows[0];
    assert_eq!(
        (insert.table.schema.as_str(), insert.table.name.as_str()),
        ("public", "orders")
    );
    let columns: Vec<(&str, u32, i32, bool)> = insert
        .table
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_oid, c.typmod, c.key))
        .collect();
    assert_eq!(
        columns,
        [
            ("id", 23, -1, true),
            ("note", 25, -1, false),
            ("qty", 1700, (8 << 16) + 2 + 4, false)
        ]
    );
    assert_eq!(insert.kind, ChangeKind::Insert);
    assert_eq!(insert.old, None);
    assert!(
        insert.new.as_deref() == Some(&[text("3"), text(&big), text("3.25")][..]),
        "the inserted row as sent"
    );

    // 2. Five changes of one transaction, in upstream order.
    let rows = transactions[1].rows.as_ref().unwrap();
    let kinds: Vec<(&str, ChangeKind)> = rows
        .iter()
        .map(|r| (r.table.name.as_str(), r.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("orders", ChangeKind::Update),
            ("orders", ChangeKind::Update),
            ("orders", ChangeKind::Delete),
            ("audit", ChangeKind::Insert),
            ("audit", ChangeKind::Delete),
        ]
    );
    // The TOASTed note the update left alone is said so, not guessed.
    assert_eq!(rows[0].old, None, "the key did not change");
    let new = rows[0].new.as_deref().unwrap();
    assert_eq!(new.len(), 3);
    assert!(
        new[0] == text("3") && new[1] == Datum::Unchanged && new[2] == text("4.00"),
        "the update's new row: {:?}, {}, {:?}",
        new[0],
        if new[1] == Datum::Unchanged {
            "unchanged"
        } else {
            "the value"
        },
        new[2]
    );
    // A key change carries the old key only.
    assert_eq!(
        rows[1].old.as_deref(),
        Some(&[text("2"), Datum::Missing, Datum::Missing][..])
    );
    assert_eq!(
        rows[1].new.as_deref(),
        Some(&[text("30"), text("second"), text("2.00")][..])
    );
    assert_eq!(rows[1].key(), vec![&text("30")]);
    assert_eq!(
        rows[2].old.as_deref(),
        Some(&[text("1"), Datum::Missing, Datum::Missing][..])
    );
    assert_eq!(rows[2].key(), vec![&text("1")]);
    // REPLICA IDENTITY FULL: the whole old row.
    assert_eq!(rows[4].old.as_deref(), Some(&[text("1"), text("a")][..]));
    assert_eq!(rows[4].new, None);

    // 3. The truncate, without row images.
    let rows = transactions[2].rows.as_ref().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].table.name.as_str(), rows[0].kind),
        ("audit", ChangeKind::Truncate)
    );
    assert_eq!((&rows[0].old, &rows[0].new), (&None, &None));

    // The documents went their usual way meanwhile.
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    drop(follower);
    assert!(!pipeline.bus().wants_rows());
    running.stop().await;
}
