//! The set-based apply of a group against the row-by-row apply of its
//! transactions: the same generated transactions (inserts, updates and
//! deletes of the same keys inside and across transactions, keys the node
//! has and lacks, a column the node lacks and one only the node has) into
//! two nodes that start equal, one group at a time on one and one
//! transaction at a time on the other. Both end with the same rows and
//! the same conflicts, every conflict type the set path resolves occurs,
//! and groups the set path cannot take (a truncate, a resolver it does
//! not implement) are applied row by row with the same result. A group
//! without conflicts is written unchecked (plain inserts and updates), and
//! one whose unchecked write meets a conflict is written again, checked.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use evolve_core::change::{Bytes, ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};
use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_pipeline::Position;
use evolve_replicate::apply::{Applier, Transaction};
use tokio_postgres::Client;

/// A deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn schema() -> Arc<TableSchema> {
    let column = |name: &str, type_oid: u32, key: bool| ColumnSchema {
        name: name.into(),
        type_oid,
        typmod: -1,
        key,
        attnum: None,
    };
    Arc::new(TableSchema {
        schema: "public".into(),
        name: "t".into(),
        columns: vec![
            column("id", 20, true),
            column("v", 25, false),
            column("n", 23, false),
            // The node has no `x`: target_column_missing.
            column("x", 25, false),
        ],
    })
}

fn text(s: impl ToString) -> Datum {
    Datum::Text(Bytes::from(s.to_string()))
}

/// Transactions over upstream rows `26..=75` (the nodes start with
/// `1..=50`): inserts of keys the upstream lacks (some the node has),
/// updates and deletes of keys it has (some the node lacks).
fn workload(seed: u64, transactions: usize) -> Vec<Transaction> {
    let schema = schema();
    let mut rng = Rng(seed);
    let mut upstream: BTreeMap<i64, ()> = (26..=75).map(|k| (k, ())).collect();
    let mut out = Vec::new();
    for t in 0..transactions {
        let mut rows = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let image = |rng: &mut Rng, id: i64| {
                vec![
                    text(id),
                    text(format!("v{}", rng.below(1000))),
                    if rng.below(4) == 0 {
                        Datum::Null
                    } else {
                        text(rng.below(100))
                    },
                    if rng.below(2) == 0 {
                        Datum::Null
                    } else {
                        text("x")
                    },
                ]
            };
            let kind = rng.below(3);
            let change = if kind == 0 || upstream.is_empty() {
                let id = loop {
                    let id = 1 + rng.below(110) as i64;
                    if !upstream.contains_key(&id) {
                        break id;
                    }
                };
                upstream.insert(id, ());
                RowChange {
                    table: Arc::clone(&schema),
                    kind: ChangeKind::Insert,
                    old: None,
                    new: Some(image(&mut rng, id)),
                }
            } else {
                let keys: Vec<i64> = upstream.keys().copied().collect();
                let id = keys[rng.below(keys.len() as u64) as usize];
                if kind == 1 {
                    RowChange {
                        table: Arc::clone(&schema),
                        kind: ChangeKind::Update,
                        old: None,
                        new: Some(image(&mut rng, id)),
                    }
                } else {
                    upstream.remove(&id);
                    RowChange {
                        table: Arc::clone(&schema),
                        kind: ChangeKind::Delete,
                        old: Some(vec![
                            text(id),
                            Datum::Missing,
                            Datum::Missing,
                            Datum::Missing,
                        ]),
                        new: None,
                    }
                }
            };
            rows.push((16384, change));
        }
        out.push(Transaction {
            end: Position::from_u64(0x1000 + 0x100 * t as u64),
            commit_time_micros: 1_700_000_000_000_000 + t as i64,
            rows,
        });
    }
    out
}

const NODE: &str = "
CREATE TABLE t (id int8 PRIMARY KEY, v text, n int4, d text NOT NULL DEFAULT 'dflt');
INSERT INTO t SELECT g, 'node' || g, g, 'kept' FROM generate_series(1, 50) g;";

async fn node(name: &str) -> (evolve_test::TestDb, Client) {
    let db = evolve_test::fresh_db(name).await;
    let client = connect(&db.url).await;
    client.batch_execute(NODE).await.unwrap();
    (db, client)
}

fn resolvers(insert_exists: Resolver) -> Resolvers {
    let mut r = Resolvers::default();
    r.set(ConflictType::TargetColumnMissing, Resolver::Ignore)
        .unwrap();
    r.set(ConflictType::InsertExists, insert_exists).unwrap();
    r
}

/// The node's rows and its conflict history (order within a transaction
/// aside: the history's order there is not meaningful).
async fn state(client: &Client) -> (Vec<String>, Vec<String>) {
    let table = rows(client, "SELECT * FROM t ORDER BY id").await;
    let mut history = rows(
        client,
        "SELECT conflict_type, resolution, schema_name, table_name, key, remote_tuple,
                local_tuple, remote_lsn, remote_commit_time, detail
         FROM evolve_conflict_history",
    )
    .await;
    history.sort();
    (table, history)
}

type Counts = BTreeMap<(ConflictType, Resolver), u64>;

/// Applies `txns` in groups of `group` on `set` and one by one on `rows`;
/// the groups the set path took and the conflicts counted on each.
async fn apply_both(
    set: &mut Client,
    rows: &mut Client,
    resolvers: Resolvers,
    txns: &[Transaction],
    group: usize,
) -> (u64, Counts, Counts) {
    let mut a = Applier::open(set, "r", resolvers.clone(), Vec::new())
        .await
        .unwrap();
    let mut b = Applier::open(rows, "r", resolvers, Vec::new())
        .await
        .unwrap();
    for chunk in txns.chunks(group) {
        a.apply_group(set, chunk).await.unwrap();
    }
    for t in txns {
        b.apply(rows, t).await.unwrap();
    }
    assert_eq!(a.position(), txns.last().unwrap().end);
    assert_eq!(b.position(), txns.last().unwrap().end);
    (a.groups.0, a.counts.clone(), b.counts.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_based_groups_end_as_row_by_row_transactions() {
    let (_a_db, mut a) = node("set_a").await;
    let (_b_db, mut b) = node("set_b").await;
    let txns = workload(0x5eed, 120);
    let changes: usize = txns.iter().map(|t| t.rows.len()).sum();
    let (set_groups, set_counts, row_counts) =
        apply_both(&mut a, &mut b, resolvers(Resolver::Update), &txns, 20).await;
    assert_eq!(set_groups, 6, "every group of 20 took the set path");
    assert_eq!(set_counts, row_counts);
    let seen = |c: ConflictType, r: Resolver| set_counts.get(&(c, r)).copied().unwrap_or(0);
    for (c, r) in [
        (ConflictType::InsertExists, Resolver::Update),
        (ConflictType::UpdateMissing, Resolver::InsertOrSkip),
        (ConflictType::DeleteMissing, Resolver::Skip),
        (ConflictType::TargetColumnMissing, Resolver::Ignore),
    ] {
        assert!(
            seen(c, r) > 0,
            "{c} / {r} never happened in {changes} changes"
        );
    }
    let (a_state, b_state) = (state(&a).await, state(&b).await);
    assert_eq!(a_state.0, b_state.0, "rows differ");
    assert_eq!(a_state.1, b_state.1, "conflict histories differ");
    let history: i64 = a
        .query_one("SELECT count(*) FROM evolve_conflict_history", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(history as u64, set_counts.values().sum::<u64>());
    // A key deleted and inserted again within a group gets the node's
    // default for the column the upstream does not send, as row by row.
    let defaults: i64 = a
        .query_one("SELECT count(*) FROM t WHERE d = 'dflt'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(defaults > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_the_set_path_cannot_take_go_row_by_row() {
    // `skip` for insert_exists is not a set statement: every group with
    // such a conflict goes row by row, with the same result.
    let (_a_db, mut a) = node("set_skip_a").await;
    let (_b_db, mut b) = node("set_skip_b").await;
    let txns = workload(0xfeed, 60);
    let (set_groups, set_counts, row_counts) =
        apply_both(&mut a, &mut b, resolvers(Resolver::Skip), &txns, 30).await;
    assert_eq!(set_counts, row_counts);
    assert!(
        set_counts
            .get(&(ConflictType::InsertExists, Resolver::Skip))
            .is_some_and(|n| *n > 0)
    );
    assert_eq!(set_groups, 0);
    assert_eq!(state(&a).await, state(&b).await);

    // A truncate in a group.
    let (_c_db, mut c) = node("set_trunc_a").await;
    let (_d_db, mut d) = node("set_trunc_b").await;
    let mut txns = workload(0xbeef, 10);
    let schema = schema();
    txns[4].rows.push((
        16384,
        RowChange {
            table: schema,
            kind: ChangeKind::Truncate,
            old: None,
            new: None,
        },
    ));
    let (set_groups, set_counts, row_counts) =
        apply_both(&mut c, &mut d, resolvers(Resolver::Update), &txns, 10).await;
    assert_eq!(set_groups, 0);
    assert_eq!(set_counts, row_counts);
    assert_eq!(state(&c).await, state(&d).await);
}

/// A row of table `t` as the upstream sends it.
fn row(kind: ChangeKind, id: i64, v: &str) -> (u32, RowChange) {
    let image = vec![text(id), text(v), text(id * 10), Datum::Null];
    let (old, new) = match kind {
        ChangeKind::Delete => (
            Some(vec![
                text(id),
                Datum::Missing,
                Datum::Missing,
                Datum::Missing,
            ]),
            None,
        ),
        _ => (None, Some(image)),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchecked_groups_write_plainly_and_a_conflict_sends_the_group_again_checked() {
    use ChangeKind::{Delete, Insert, Update};
    // Without conflicts: inserts of keys the node lacks, updates and a
    // delete of keys it has, in one unchecked group.
    let quiet = vec![
        txn(1, (51..=60).map(|k| row(Insert, k, "new")).collect()),
        txn(2, (1..=10).map(|k| row(Update, k, "upd")).collect()),
        txn(3, vec![row(Delete, 11, ""), row(Update, 55, "again")]),
    ];
    let (_a_db, mut a) = node("unchecked_a").await;
    let (_b_db, mut b) = node("unchecked_b").await;
    let mut set = Applier::open(&a, "r", resolvers(Resolver::Update), Vec::new())
        .await
        .unwrap();
    set.apply_group(&mut a, &quiet).await.unwrap();
    assert_eq!((set.groups, set.checked_again), ((1, 0), 0));
    // Only the schema's own conflict: the node's `d`, which the upstream
    // does not send, takes its default.
    assert_eq!(
        set.counts.keys().collect::<Vec<_>>(),
        [&(ConflictType::SourceColumnMissing, Resolver::UseDefaultValue)]
    );

    // An insert of a key the node has: the plain insert's unique
    // violation sends the group again, checked, and the set path
    // resolves it.
    let exists = vec![txn(4, vec![row(Insert, 61, "new"), row(Insert, 5, "dup")])];
    set.apply_group(&mut a, &exists).await.unwrap();
    assert_eq!((set.groups, set.checked_again), ((2, 0), 1));
    assert_eq!(
        set.counts
            .get(&(ConflictType::InsertExists, Resolver::Update)),
        Some(&1)
    );

    // An update of a key the node lacks, with a fresh applier (so
    // unchecked again): the update's count is short.
    let mut again = Applier::open(&a, "r", resolvers(Resolver::Update), Vec::new())
        .await
        .unwrap();
    let missing = vec![txn(5, vec![row(Update, 99, "gone"), row(Update, 1, "u2")])];
    again.apply_group(&mut a, &missing).await.unwrap();
    assert_eq!((again.groups, again.checked_again), ((1, 0), 1));
    assert_eq!(
        again
            .counts
            .get(&(ConflictType::UpdateMissing, Resolver::InsertOrSkip)),
        Some(&1)
    );

    // The same transactions row by row, by two appliers as well (each
    // logs the schema's conflict once), end the same.
    let mut rows = Applier::open(&b, "r", resolvers(Resolver::Update), Vec::new())
        .await
        .unwrap();
    for t in quiet.iter().chain(&exists) {
        rows.apply(&mut b, t).await.unwrap();
    }
    let mut rows = Applier::open(&b, "r", resolvers(Resolver::Update), Vec::new())
        .await
        .unwrap();
    for t in &missing {
        rows.apply(&mut b, t).await.unwrap();
    }
    assert_eq!(state(&a).await, state(&b).await);
    let changed: i64 = a
        .query_one(
            "SELECT count(*) FROM t WHERE v IN ('upd', 'again', 'dup', 'u2', 'gone')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(changed, 12, "upd on 2-4 and 6-10, again, dup, u2, gone");
}

/// The set path's update is planned for the node's table as it is: planned
/// while the table held 5 rows, it would scan the whole table for each
/// group after 30,000 rows arrived; prepared again as the rows added
/// double, it looks the keys up in the index. Counted by PostgreSQL's own
/// statistics of the table (flushed by the applier's own connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_set_paths_updates_look_keys_up_after_the_table_grew() {
    use ChangeKind::{Insert, Update};
    let db = evolve_test::fresh_db("replan").await;
    let mut node = connect(&db.url).await;
    node.batch_execute(
        "CREATE TABLE t (id int8 PRIMARY KEY, v text, n int4, d text NOT NULL DEFAULT 'dflt');
         INSERT INTO t SELECT g, 'node' || g, g, 'kept' FROM generate_series(1, 5) g;",
    )
    .await
    .unwrap();
    // (sequential scans, index scans) of `t`, the applier's statistics
    // flushed first.
    let scans = async |node: &Client| -> (i64, i64) {
        node.batch_execute("SELECT pg_stat_force_next_flush()")
            .await
            .unwrap();
        let row = node
            .query_one(
                "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_user_tables \
                 WHERE relid = 't'::regclass",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    let mut applier = Applier::open(&node, "r", resolvers(Resolver::Update), Vec::new())
        .await
        .unwrap();
    // Groups of updates of keys 1..=5, at positions `from..from + times`.
    let updates = async |node: &mut Client, applier: &mut Applier, from: u64, times: u64| {
        for n in from..from + times {
            let group = [txn(n, (1..=5).map(|k| row(Update, k, "u")).collect())];
            applier.apply_group(node, &group).await.unwrap();
        }
    };
    // More than the five custom plans: the generic one is made now.
    updates(&mut node, &mut applier, 1, 8).await;
    let grow = [txn(
        9,
        (6..=30_005).map(|k| row(Insert, k, "new")).collect(),
    )];
    applier.apply_group(&mut node, &grow).await.unwrap();
    let (seq_before, idx_before) = scans(&node).await;
    updates(&mut node, &mut applier, 10, 10).await;
    let (seq_after, idx_after) = scans(&node).await;
    assert_eq!(applier.groups, (19, 0), "every group set-based");
    assert_eq!(
        seq_after - seq_before,
        0,
        "sequential scans of the 30,005-row table by 10 updates of 5 keys"
    );
    assert!(
        idx_after - idx_before >= 10 * 5,
        "index lookups by 10 updates of 5 keys: {}",
        idx_after - idx_before
    );
}
