//! Replacement swaps: an interface moves from the table it reads to its
//! replacement's table at one upstream position.
//!
//! `ALTER MATERIALIZED VIEW x APPLY REPLACEMENT r` marks `r` as applying
//! and writes a transactional logical decoding message upstream
//! (`pg_logical_emit_message(true, 'evolve', 'apply-replacement <slot>
//! <r>')`, committed with `synchronous_commit = local` so that the stream
//! can decode it at once). The message is a transaction of its own in the
//! WAL, so the source's stream meets it at one commit position `P`, in
//! commit order with every row change: everything before `P` was applied
//! to both tables (the replacement's table is hydrated: it follows the
//! same stream), and from `P` on the interface reads the new table. In the
//! store transaction of `P`, [`apply`] writes one feed entry per key whose
//! document differs between the two tables: an insert for a key only the
//! new table has, a delete for one only the old table has, an update
//! otherwise, nothing for equal documents. Sinks and subscribers read
//! those entries like any transaction's, at `P`, so each receives exactly
//! the changes and nothing else. The interface then names the new table
//! and the replacement is gone, in that same transaction.
//!
//! The keys whose documents differ are known before `P`: once both tables
//! of a replacement are hydrated, [`track`] compares them once (both read
//! in key order and merged) and the store keeps the keys that differ
//! (`differing_keys`); from then on every transaction that writes a
//! document of either table records, in the same store transaction,
//! whether that key's documents now differ (`Txn::write`). So the swap
//! reads and writes only the differing keys, whatever the size of the
//! tables, and a crash at any point leaves the keys consistent with the
//! documents. A replacement whose keys are not kept yet (applied before
//! the comparison ran, or from a store written before evolve kept them)
//! is swapped by the same merge over every key.
//!
//! The old table keeps ingesting until it is dropped (`DROP TABLE`), so an
//! operator can compare or roll forward again.

use std::collections::HashMap;
use std::time::Instant;

use crate::position::Position;
use rusqlite::params;

use crate::apply::TableRuntime;
use crate::bus::Change;
use crate::error::{PipelineError, Result};
use crate::store::{Store, TrackedReplacement};

/// Per table id, the keys a transaction changed with their documents
/// before it.
pub(crate) type Before = HashMap<i64, Vec<(Vec<u8>, Option<Vec<u8>>)>>;

/// The prefix of evolve's logical decoding messages.
pub const MESSAGE_PREFIX: &str = "evolve";

/// The content of the message that applies replacement `name` in the
/// pipeline whose source slot is `slot`.
pub fn apply_message(slot: &str, name: &str) -> String {
    format!("apply-replacement {slot} {name}")
}

/// The replacement a message asks slot `slot` to apply, if it is one.
pub fn parse_apply_message<'a>(slot: &str, content: &'a [u8]) -> Option<&'a str> {
    let text = std::str::from_utf8(content).ok()?;
    let rest = text.strip_prefix("apply-replacement ")?;
    let (for_slot, name) = rest.split_once(' ')?;
    (for_slot == slot).then_some(name)
}

/// Swaps replacement `name` in at position `pos`, inside the store
/// transaction the caller has open. `tracked` lists the replacements whose
/// differing keys the store keeps, up to date with this transaction's
/// documents; the applied one leaves it. `before` holds, per table id, the
/// documents that the transaction at `pos` changed as they were before it;
/// `changes` (the transaction's fed changes) is updated: the interface's
/// entries of this transaction are replaced by the swap's net ones. A
/// replacement that cannot be applied is left in place with its error.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    store: &Store,
    tables: &mut [TableRuntime],
    tracked: &mut Vec<TrackedReplacement>,
    name: &str,
    pos: Position,
    before: &Before,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let fail = |e: rusqlite::Error| PipelineError::store("apply a replacement", e);
    let Some(replacement) = store.replacement(name)? else {
        tracing::warn!(replacement = %name, "an APPLY REPLACEMENT message names a replacement that no longer exists; ignored");
        return Ok(());
    };
    if !replacement.applying {
        tracing::warn!(replacement = %name, "an APPLY REPLACEMENT message for a replacement not being applied; ignored");
        return Ok(());
    }
    let refuse = |error: String| -> Result<()> {
        tracing::warn!(replacement = %name, %error, "replacement not applied");
        store.set_replacement_error(name, &error)
    };
    let Some(interface) = store.interface(&replacement.target)? else {
        return refuse(format!(
            "materialized view \"{}\" does not exist",
            replacement.target
        ));
    };
    let Some(old) = tables.iter().position(|t| t.info.name == interface.table) else {
        return refuse(format!(
            "table \"{}\" of materialized view \"{}\" is not read by this source",
            interface.table, interface.name
        ));
    };
    let Some(new) = tables.iter().position(|t| t.info.name == replacement.table) else {
        return refuse(format!(
            "table \"{}\" of replacement \"{name}\" is not read by the source of \"{}\"",
            replacement.table, interface.name
        ));
    };
    if !tables[new].info.state.is_hydrated() {
        return refuse(format!(
            "replacement \"{name}\" is not hydrated: its table \"{}\" is {}",
            replacement.table,
            tables[new].info.state.as_str()
        ));
    }
    let (old_id, new_id) = (tables[old].info.id, tables[new].info.id);

    // The interface's changes in this transaction came from the old
    // table; the swap's comparison replaces them (the transaction's feed
    // is written from `changes` after its swaps).
    changes.retain(|c| c.interface != interface.id);

    // Keys this same transaction changed in the old table are compared
    // with the document the interface showed before it, after the others.
    let changed_here: HashMap<&[u8], &Option<Vec<u8>>> = before
        .get(&old_id)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|(key, orig)| (key.as_slice(), orig))
        .collect();
    let mut push = |key: &[u8], before: Option<&[u8]>, after: Option<&[u8]>| {
        if !changed_here.contains_key(key) {
            changes.push(Change {
                interface: interface.id,
                key: key.to_vec(),
                old: before.map(<[u8]>::to_vec),
                new: after.map(<[u8]>::to_vec),
            });
        }
    };

    // Every key whose document differs between the two tables: the keys
    // the store keeps for the replacement when it keeps them for these
    // two tables, otherwise both tables read once in key order and merged.
    let keys_kept = tracked
        .iter()
        .any(|t| t.name == name && t.old == old_id && t.new == new_id);
    tracked.retain(|t| t.name != name);
    let started = Instant::now();
    let differing = if keys_kept {
        kept_differences(store, name, old_id, new_id, |key, before, after| {
            push(key, before, after);
            Ok(())
        })?
    } else {
        merge_differences(store, old_id, new_id, |key, before, after| {
            push(key, before, after);
            Ok(())
        })?
    };
    let compared = started.elapsed();
    for (key, orig) in before.get(&old_id).map_or(&[][..], Vec::as_slice) {
        let now = store.doc(new_id, key)?;
        if *orig != now {
            changes.push(Change {
                interface: interface.id,
                key: key.clone(),
                old: orig.clone(),
                new: now,
            });
        }
    }
    store
        .conn
        .execute(
            "UPDATE interfaces SET table_name = ?2 WHERE id = ?1",
            params![interface.id, replacement.table],
        )
        .map_err(fail)?;
    store.delete_replacement(name)?;
    tables[old].interfaces.retain(|&i| i != interface.id);
    tables[new].interfaces.push(interface.id);
    tracing::info!(
        materialized_view = %interface.name,
        replacement = %name,
        from = %interface.table,
        to = %replacement.table,
        position = %pos,
        differing,
        compared = if keys_kept { "the differing keys kept" } else { "every key" },
        seconds = compared.as_secs_f64(),
        "replacement applied"
    );
    Ok(())
}

/// Calls `each` with (key, old document, new document) for each key the
/// store keeps for replacement `name` whose documents differ between
/// tables `old` and `new`, in key order; returns how many. Reads only
/// those keys' documents.
fn kept_differences(
    store: &Store,
    name: &str,
    old: i64,
    new: i64,
    mut each: impl FnMut(&[u8], Option<&[u8]>, Option<&[u8]>) -> Result<()>,
) -> Result<usize> {
    let fail = |e: rusqlite::Error| PipelineError::store("apply a replacement", e);
    let mut read = store
        .conn
        .prepare_cached(
            "SELECT d.key, o.doc, n.doc FROM differing_keys d \
             LEFT JOIN rows o ON o.tbl = ?2 AND o.key = d.key \
             LEFT JOIN rows n ON n.tbl = ?3 AND n.key = d.key \
             WHERE d.replacement = ?1 AND o.doc IS NOT n.doc \
             ORDER BY d.key",
        )
        .map_err(fail)?;
    let mut rows = read.query(params![name, old, new]).map_err(fail)?;
    let mut written = 0;
    while let Some(row) = rows.next().map_err(fail)? {
        let bytes = |i: usize| -> Result<Option<&[u8]>> {
            row.get_ref(i)
                .map_err(fail)?
                .as_bytes_or_null()
                .map_err(|e| PipelineError::Store {
                    context: "apply a replacement".into(),
                    message: format!(
                        "a stored key or document is not text ({e}); the state store is damaged"
                    ),
                })
        };
        let key = bytes(0)?.unwrap_or_default();
        each(key, bytes(1)?, bytes(2)?)?;
        written += 1;
    }
    Ok(written)
}

/// Starts keeping the differing keys of every replacement that is not
/// tracked yet and whose two tables (its interface's and its own) are
/// among `tables` and hydrated, inside the store transaction the caller
/// has open: the two tables are compared once, and the keys whose
/// documents differ are recorded with the pair of tables. From then on
/// `Txn::write` keeps them up to date. Returns the replacements now
/// tracked.
pub(crate) fn track(store: &Store, tables: &[TableRuntime]) -> Result<Vec<String>> {
    let fail = |e: rusqlite::Error| PipelineError::store("compare a replacement's documents", e);
    let hydrated = |id: i64| {
        tables
            .iter()
            .any(|t| t.info.id == id && t.info.state.is_hydrated())
    };
    let mut tracked = Vec::new();
    for (name, old, new) in store.untracked_replacements()? {
        if !hydrated(old) || !hydrated(new) {
            continue;
        }
        let started = Instant::now();
        store
            .conn
            .execute("DELETE FROM differing_keys WHERE replacement = ?1", [&name])
            .map_err(fail)?;
        let differing = {
            let mut insert = store
                .conn
                .prepare_cached("INSERT INTO differing_keys (replacement, key) VALUES (?1, ?2)")
                .map_err(fail)?;
            merge_differences(store, old, new, |key, _, _| {
                insert.execute(params![name, key]).map(drop).map_err(fail)
            })?
        };
        store.set_tracked(&name, old, new)?;
        tracing::info!(
            replacement = %name,
            differing,
            seconds = started.elapsed().as_secs_f64(),
            "replacement compared; its differing keys are kept from now on"
        );
        tracked.push(name);
    }
    Ok(tracked)
}

/// Calls `each` with (key, old document, new document) for every key
/// whose document differs between tables `old` and `new`, in key order;
/// returns how many.
///
/// Both tables are read once in key order, and their current rows are
/// compared where SQLite holds them (borrowed, never copied): only what
/// `each` copies is copied, so the comparison of two equal tables
/// allocates nothing per row. Keys compare as bytes, as SQLite's `ORDER
/// BY key` orders them (memcmp, then length).
fn merge_differences(
    store: &Store,
    old: i64,
    new: i64,
    mut each: impl FnMut(&[u8], Option<&[u8]>, Option<&[u8]>) -> Result<()>,
) -> Result<usize> {
    use rusqlite::fallible_streaming_iterator::FallibleStreamingIterator;
    use std::cmp::Ordering;

    let fail = |e: rusqlite::Error| PipelineError::store("compare a replacement's documents", e);
    fn bytes<'r>(row: &'r rusqlite::Row<'_>, column: usize) -> Result<&'r [u8]> {
        let damaged = |e: &dyn std::fmt::Display| PipelineError::Store {
            context: "compare a replacement's documents".into(),
            message: format!(
                "a stored key or document is not text ({e}); the state store is damaged"
            ),
        };
        row.get_ref(column)
            .map_err(|e| damaged(&e))?
            .as_bytes()
            .map_err(|e| damaged(&e))
    }
    let read = "SELECT key, doc FROM rows WHERE tbl = ?1 ORDER BY key";
    let mut old_rows = store.conn.prepare(read).map_err(fail)?;
    let mut new_rows = store.conn.prepare(read).map_err(fail)?;
    let mut olds = old_rows.query([old]).map_err(fail)?;
    let mut news = new_rows.query([new]).map_err(fail)?;
    olds.advance().map_err(fail)?;
    news.advance().map_err(fail)?;
    let mut written = 0;
    loop {
        let (o, n) = (olds.get(), news.get());
        #[allow(clippy::type_complexity)]
        let (order, entry): (Ordering, Option<(&[u8], Option<&[u8]>, Option<&[u8]>)>) = match (o, n)
        {
            (None, None) => break,
            (Some(o), None) => (
                Ordering::Less,
                Some((bytes(o, 0)?, Some(bytes(o, 1)?), None)),
            ),
            (None, Some(n)) => (
                Ordering::Greater,
                Some((bytes(n, 0)?, None, Some(bytes(n, 1)?))),
            ),
            (Some(o), Some(n)) => {
                let (ok, nk) = (bytes(o, 0)?, bytes(n, 0)?);
                match ok.cmp(nk) {
                    Ordering::Equal => {
                        let (before, after) = (bytes(o, 1)?, bytes(n, 1)?);
                        (
                            Ordering::Equal,
                            (before != after).then_some((ok, Some(before), Some(after))),
                        )
                    }
                    Ordering::Less => (Ordering::Less, Some((ok, Some(bytes(o, 1)?), None))),
                    Ordering::Greater => (Ordering::Greater, Some((nk, None, Some(bytes(n, 1)?)))),
                }
            }
        };
        if let Some((key, before, after)) = entry {
            each(key, before, after)?;
            written += 1;
        }
        if order != Ordering::Greater {
            olds.advance().map_err(fail)?;
        }
        if order != Ordering::Less {
            news.advance().map_err(fail)?;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use evolve_core::document::TypeKind;

    use super::*;
    use crate::store::{ColumnInfo, TableInfo, TableState};

    /// A store with tables `t_v1` (read by interface `t_json`) and `t_v2`
    /// (replacement `t_json_v2`, being applied), both running, holding
    /// `old` and `new` as (key, document) rows.
    fn setup(old: &[(&str, &str)], new: &[(&str, &str)]) -> (Store, Vec<TableRuntime>, i64) {
        let store = Store::in_memory_with_source();
        let mut tables = Vec::new();
        for (name, rows) in [("t_v1", old), ("t_v2", new)] {
            let column = ColumnInfo::for_test;
            let mut info = TableInfo::running_for_test(
                name,
                vec![
                    column("id", 1, 23, TypeKind::Integer, true),
                    column("note", 2, 25, TypeKind::Text, false),
                ],
            );
            info.id = store.insert_table(&info).unwrap();
            for (key, doc) in rows {
                store
                    .conn
                    .execute(
                        "INSERT INTO rows (tbl, key, doc) VALUES (?1, ?2, ?3)",
                        params![info.id, key.as_bytes(), doc.as_bytes()],
                    )
                    .unwrap();
            }
            tables.push(TableRuntime::new(info, Vec::new()).unwrap());
        }
        store
            .insert_interface("t_json", "t_v1", &crate::pipeline::interface_output())
            .unwrap();
        let interface = store.interface("t_json").unwrap().unwrap().id;
        tables[0].interfaces.push(interface);
        store
            .insert_replacement("t_json_v2", "t_json", "t_v2")
            .unwrap();
        store.set_replacement_applying("t_json_v2", true).unwrap();
        (store, tables, interface)
    }

    type Entry = (String, Option<String>, Option<String>);

    fn text(b: &Option<Vec<u8>>) -> Option<String> {
        b.as_ref().map(|b| String::from_utf8(b.clone()).unwrap())
    }

    /// Swaps at position 10 with `before` (the old table's keys the same
    /// transaction changed, with their documents before it) and
    /// `earlier` (that transaction's own fed entries); the changes fed,
    /// sorted, and the feed rows at position 10, which must be the same.
    /// With `keep`, the tables are compared first ([`track`]) and the swap
    /// reads the differing keys kept; otherwise it merges both tables.
    fn swap(
        store: &Store,
        tables: &mut [TableRuntime],
        interface: i64,
        before: &[(&str, Option<&str>)],
        earlier: &[(&str, Option<&str>, Option<&str>)],
        keep: bool,
    ) -> Vec<Entry> {
        if keep {
            assert_eq!(track(store, tables).unwrap(), ["t_json_v2"]);
        }
        let mut tracked = store.tracked_replacements().unwrap();
        assert_eq!(tracked.len(), usize::from(keep));
        let mut b = Before::new();
        b.insert(
            tables[0].info.id,
            before
                .iter()
                .map(|(k, d)| (k.as_bytes().to_vec(), d.map(|d| d.as_bytes().to_vec())))
                .collect(),
        );
        let bytes = |d: &Option<&str>| d.map(|d| d.as_bytes().to_vec());
        let mut changes = Vec::new();
        for (key, old, new) in earlier {
            changes.push(Change {
                interface,
                key: key.as_bytes().to_vec(),
                old: bytes(old),
                new: bytes(new),
            });
        }
        apply(
            store,
            tables,
            &mut tracked,
            "t_json_v2",
            Position::from_u64(10),
            &b,
            &mut changes,
        )
        .unwrap();
        assert!(
            tracked.is_empty(),
            "the applied replacement is no longer tracked"
        );
        let kept: i64 = store
            .conn
            .query_row("SELECT count(*) FROM differing_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 0, "the keys kept for it are gone with it");
        let mut fed: Vec<Entry> = changes
            .iter()
            .map(|c| {
                (
                    String::from_utf8(c.key.clone()).unwrap(),
                    text(&c.old),
                    text(&c.new),
                )
            })
            .collect();
        fed.sort();
        // As `Txn::write` does after its swaps.
        store
            .append_feed(Position::from_u64(10), 0, &changes)
            .unwrap();
        let mut stored: Vec<Entry> = store
            .feed(
                interface,
                Position::ZERO,
                Position::from_u64(10),
                usize::MAX,
            )
            .unwrap()
            .into_iter()
            .map(|f| {
                (
                    String::from_utf8(f.key).unwrap(),
                    text(&f.old),
                    text(&f.new),
                )
            })
            .collect();
        stored.sort();
        assert_eq!(fed, stored, "the changes published are the ones stored");
        fed
    }

    fn e(key: &str, old: Option<&str>, new: Option<&str>) -> Entry {
        (key.into(), old.map(Into::into), new.map(Into::into))
    }

    #[test]
    fn a_swap_feeds_exactly_the_keys_whose_documents_differ() {
        // (old table, new table, before, earlier entries, fed)
        type Case = (
            Vec<(&'static str, &'static str)>,
            Vec<(&'static str, &'static str)>,
            Vec<(&'static str, Option<&'static str>)>,
            Vec<(&'static str, Option<&'static str>, Option<&'static str>)>,
            Vec<Entry>,
        );
        let cases: Vec<Case> = vec![
            // Equal tables: nothing.
            (
                vec![("1", "a"), ("2", "b")],
                vec![("1", "a"), ("2", "b")],
                vec![],
                vec![],
                vec![],
            ),
            // Both empty: nothing.
            (vec![], vec![], vec![], vec![], vec![]),
            // A differing document, a key only the old table has, one only
            // the new table has, interleaved in key order.
            (
                vec![("1", "a"), ("2", "b"), ("4", "d")],
                vec![("1", "a"), ("2", "B"), ("3", "c")],
                vec![],
                vec![],
                vec![
                    e("2", Some("b"), Some("B")),
                    e("3", None, Some("c")),
                    e("4", Some("d"), None),
                ],
            ),
            // Everything differs: the old table's rows all leave, the new
            // one's all enter.
            (
                vec![("1", "a")],
                vec![("2", "b")],
                vec![],
                vec![],
                vec![e("1", Some("a"), None), e("2", None, Some("b"))],
            ),
            // The swap's own transaction changed key 1 in the old table
            // (from "x" to "a", fed as such): the interface showed "x"
            // before it, so it gets "x" -> the new table's "A", once; its
            // earlier entry is replaced.
            (
                vec![("1", "a")],
                vec![("1", "A")],
                vec![("1", Some("x"))],
                vec![("1", Some("x"), Some("a"))],
                vec![e("1", Some("x"), Some("A"))],
            ),
            // ... and when the new table's document is what the interface
            // showed before, nothing is fed for that key at all.
            (
                vec![("1", "a")],
                vec![("1", "x")],
                vec![("1", Some("x"))],
                vec![("1", Some("x"), Some("a"))],
                vec![],
            ),
            // A row the transaction inserted into the old table only: the
            // interface never showed it, and the new table has none.
            (
                vec![("1", "a"), ("5", "e")],
                vec![("1", "a")],
                vec![("5", None)],
                vec![("5", None, Some("e"))],
                vec![],
            ),
        ];
        for (n, (old, new, before, earlier, want)) in cases.into_iter().enumerate() {
            // The merge over every key, and the differing keys kept.
            for keep in [false, true] {
                let (store, mut tables, interface) = setup(&old, &new);
                let got = swap(&store, &mut tables, interface, &before, &earlier, keep);
                assert_eq!(got, want, "case {n}, keys kept: {keep}");
                // The interface reads the new table, the replacement is gone.
                assert_eq!(store.interface("t_json").unwrap().unwrap().table, "t_v2");
                assert!(store.replacement("t_json_v2").unwrap().is_none());
                assert_eq!(tables[1].interfaces, vec![interface], "case {n}");
                assert!(tables[0].interfaces.is_empty(), "case {n}");
            }
        }
    }

    #[test]
    fn a_swap_that_cannot_apply_keeps_the_replacement_with_its_error() {
        let (store, mut tables, interface) = setup(&[("1", "a")], &[("1", "b")]);
        tables[1].info.state = TableState::Snapshotting;
        let mut changes = Vec::new();
        apply(
            &store,
            &mut tables,
            &mut Vec::new(),
            "t_json_v2",
            Position::from_u64(10),
            &Before::new(),
            &mut changes,
        )
        .unwrap();
        assert!(changes.is_empty());
        // Nor are its tables compared while one is not hydrated.
        assert!(track(&store, &tables).unwrap().is_empty());
        assert!(store.tracked_replacements().unwrap().is_empty());
        assert_eq!(store.interface("t_json").unwrap().unwrap().table, "t_v1");
        let replacement = store.replacement("t_json_v2").unwrap().unwrap();
        assert!(
            replacement
                .error
                .as_deref()
                .is_some_and(|e| e.contains("is not hydrated")),
            "{:?}",
            replacement.error
        );
        assert_eq!(tables[0].interfaces, vec![interface]);
    }

    /// One row operation on the old table (0), the new one (1) or both,
    /// on keys 1 to 5 with a note from a small set, so that documents
    /// often become equal again.
    #[derive(Clone, Debug)]
    enum Op {
        Upsert(usize, i32, Option<&'static str>),
        Delete(usize, i32),
        Truncate(usize),
    }

    /// A fed change: key, old and new document.
    type Fed = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let side = prop_oneof![Just(0usize), Just(1), Just(2)];
        let note = prop_oneof![Just(None), Just(Some("a")), Just(Some("b"))];
        prop_oneof![
            6 => (side.clone(), 1..6i32, note).prop_map(|(s, k, n)| Op::Upsert(s, k, n)),
            3 => (side.clone(), 1..6i32).prop_map(|(s, k)| Op::Delete(s, k)),
            1 => side.prop_map(Op::Truncate),
        ]
    }

    /// Applies `ops` (and the swap, with `swap`) as one upstream
    /// transaction at `pos`, the way the stream writes it; what was fed.
    fn transaction(
        store: &mut Store,
        tables: &mut [TableRuntime],
        pos: u64,
        ops: &[Op],
        swap: bool,
    ) -> Vec<Change> {
        use crate::apply::Txn;
        use evolve_core::change::{Bytes, Datum};
        let row = |k: i32, note: Option<&str>| {
            vec![
                Datum::Text(Bytes::from(k.to_string())),
                note.map_or(Datum::Null, |n| Datum::Text(Bytes::from(n.to_string()))),
            ]
        };
        let mut txn = Txn::new(Position::from_u64(pos));
        for op in ops {
            let (Op::Upsert(side, ..) | Op::Delete(side, _) | Op::Truncate(side)) = op;
            for t in [0, 1].into_iter().filter(|t| side == t || *side == 2) {
                match op {
                    Op::Upsert(_, k, note) => txn.insert(store, tables, t, &row(*k, *note)),
                    Op::Delete(_, k) => txn.delete(store, tables, t, &row(*k, None)),
                    Op::Truncate(_) => txn.truncate(store, tables, t),
                }
                .unwrap();
            }
        }
        if swap {
            txn.swap("t_json_v2".into());
        }
        txn.commit(store, tables, "src", Position::from_u64(pos), 0)
            .unwrap()
    }

    /// The keys whose documents differ between the two tables, read from
    /// the documents themselves.
    fn differing(store: &Store, tables: &[TableRuntime]) -> Vec<Vec<u8>> {
        let old: HashMap<Vec<u8>, Vec<u8>> =
            store.docs(tables[0].info.id).unwrap().into_iter().collect();
        let new: HashMap<Vec<u8>, Vec<u8>> =
            store.docs(tables[1].info.id).unwrap().into_iter().collect();
        let mut keys: Vec<Vec<u8>> = old
            .keys()
            .chain(new.keys())
            .filter(|k| old.get(*k) != new.get(*k))
            .cloned()
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn kept(store: &Store) -> Vec<Vec<u8>> {
        store
            .conn
            .prepare("SELECT key FROM differing_keys ORDER BY key")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    proptest::proptest! {
        /// Whatever the transactions do to either table (inserts, updates,
        /// deletes, TRUNCATE, a key made equal again), the keys kept are
        /// exactly the differing ones after each, and the swap feeds
        /// exactly the keys whose document the interface showed differs
        /// from the new table's, with those documents.
        #[test]
        fn the_keys_kept_are_exactly_the_differing_ones(
            start in proptest::collection::vec(op(), 0..8),
            before in proptest::collection::vec(proptest::collection::vec(op(), 1..5), 0..8),
            last in proptest::collection::vec(op(), 0..4),
        ) {
            let (mut store, mut tables, interface) = setup(&[], &[]);
            let schema = evolve_core::change::TableSchema {
                schema: "public".into(),
                name: "t".into(),
                columns: ["id", "note"]
                    .iter()
                    .enumerate()
                    .map(|(i, name)| evolve_core::change::ColumnSchema {
                        name: (*name).into(),
                        type_oid: if i == 0 { 23 } else { 25 },
                        typmod: -1,
                        key: i == 0,
                        attnum: None,
                    })
                    .collect(),
            };
            for t in tables.iter_mut() {
                t.on_schema(&schema).unwrap();
            }
            // Before the comparison: nothing is kept.
            transaction(&mut store, &mut tables, 2, &start, false);
            proptest::prop_assert!(kept(&store).is_empty());
            proptest::prop_assert_eq!(track(&store, &tables).unwrap(), ["t_json_v2"]);
            proptest::prop_assert_eq!(kept(&store), differing(&store, &tables));
            for (n, ops) in before.iter().enumerate() {
                transaction(&mut store, &mut tables, 3 + n as u64, ops, false);
                proptest::prop_assert_eq!(kept(&store), differing(&store, &tables), "after transaction {}", n);
            }
            // The swap's own transaction changes rows too: the interface
            // goes from what it showed before it to the new table after it.
            let showed: HashMap<Vec<u8>, Vec<u8>> =
                store.docs(tables[0].info.id).unwrap().into_iter().collect();
            let fed = transaction(&mut store, &mut tables, 100, &last, true);
            let now: HashMap<Vec<u8>, Vec<u8>> =
                store.docs(tables[1].info.id).unwrap().into_iter().collect();
            let mut want: Vec<Fed> = showed
                .keys()
                .chain(now.keys())
                .filter(|k| showed.get(*k) != now.get(*k))
                .map(|k| (k.clone(), showed.get(k).cloned(), now.get(k).cloned()))
                .collect();
            want.sort();
            want.dedup();
            let mut got: Vec<Fed> = fed
                .into_iter()
                .filter(|c| c.interface == interface)
                .map(|c| (c.key, c.old, c.new))
                .collect();
            got.sort();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(store.interface("t_json").unwrap().unwrap().table, "t_v2");
            proptest::prop_assert!(kept(&store).is_empty());
        }
    }

    #[test]
    fn apply_messages_name_their_slot() {
        let m = apply_message("evolve_src", "orders_json_v2");
        assert_eq!(
            parse_apply_message("evolve_src", m.as_bytes()),
            Some("orders_json_v2")
        );
        assert_eq!(parse_apply_message("evolve_other", m.as_bytes()), None);
        assert_eq!(parse_apply_message("evolve_src", b"\xff"), None);
        assert_eq!(
            parse_apply_message("evolve_src", b"apply-replacement"),
            None
        );
    }
}
