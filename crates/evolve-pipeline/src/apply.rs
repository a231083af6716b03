//! Applying a source's row changes to the tables' documents.
//!
//! One upstream transaction is collected in a [`Txn`]: an overlay of the
//! keys it touched, each with its document before the transaction and its
//! current one. At commit, `Txn::write` writes, in the store transaction
//! the source's task has open (its group commit), the rows whose document
//! changed and one feed entry per changed key and interface (the net
//! effect of the transaction: an insert then a delete of the same key
//! leaves nothing, an update that leaves the document as it was emits
//! nothing), and, for each replacement whose differing keys the store
//! keeps, whether each written key's documents now differ between its two
//! tables; the group's commit records the source's applied position.

use std::collections::{HashMap, HashSet};

use evolve_core::change::{Datum, TableSchema};
use evolve_core::document::RowEncoder;

use crate::position::Position;
use rusqlite::params;

use crate::bus::Change;
use crate::doc::splice_members;
use crate::error::{PipelineError, Result};
use crate::store::{ColumnInfo, Store, TableInfo, TableState, TrackedReplacement};
use crate::upstream::document_columns;

/// A table as the stream applies to it.
pub struct TableRuntime {
    /// The catalog entry (state, snapshot position).
    pub info: TableInfo,
    encoder: RowEncoder,
    key_encoder: RowEncoder,
    doc_names: Vec<String>,
    /// The interfaces that read this table (feed entries go to each).
    pub interfaces: Vec<i64>,
    /// Positions in the latest schema the source sent of the document's
    /// and the key's columns.
    mapping: Option<Mapping>,
    /// What the store held for the keys of this table's recent inserts.
    inserts: Inserts,
}

/// How many of a table's recent inserts found their key new in the store,
/// and how many found a document there already.
///
/// An upstream insert is of a key the table does not hold (its primary
/// key says so), so the store's document is not read before one: the
/// write inserts the row unless the key has a document, and reads that
/// document only then (one descent of the store's index instead of two).
/// A source whose inserts may hit a key that is there (a Kafka topic read
/// with `ENVELOPE UPSERT`, where every record is an insert) would pay a
/// refused insert and a read for those; once more than one in 16 of a
/// table's inserts found their key, its inserts read first again.
#[derive(Clone, Copy, Debug, Default)]
struct Inserts {
    new: u32,
    found: u32,
}

impl Inserts {
    /// Whether the next insert is written without reading first.
    fn expect_new(&self) -> bool {
        self.found.saturating_mul(16) <= self.new.saturating_add(64)
    }

    fn count(&mut self, new: bool) {
        if self.new.saturating_add(self.found) >= 1 << 20 {
            // Recent ones count: a table whose inserts change their ways
            // is read the right way again soon.
            self.new /= 2;
            self.found /= 2;
        }
        if new {
            self.new += 1;
        } else {
            self.found += 1;
        }
    }
}

#[derive(Clone, Debug)]
struct Mapping {
    doc: Vec<usize>,
    key: Vec<usize>,
}

impl TableRuntime {
    /// Prepares the encoders of `info`'s pinned columns.
    pub fn new(info: TableInfo, interfaces: Vec<i64>) -> Result<TableRuntime> {
        let doc_columns = document_columns(info.document_columns());
        let key_columns = document_columns(info.key_columns());
        let fail = |e: evolve_core::document::DocumentError| PipelineError::Document {
            table: info.name.clone(),
            message: e.to_string(),
        };
        let encoder = RowEncoder::new(doc_columns).map_err(fail)?;
        let key_encoder = RowEncoder::new(key_columns).map_err(fail)?;
        let doc_names = info.document_columns().map(|c| c.name.clone()).collect();
        Ok(TableRuntime {
            info,
            encoder,
            key_encoder,
            doc_names,
            interfaces,
            mapping: None,
            inserts: Inserts::default(),
        })
    }

    /// Whether a transaction whose commit record is at `final_lsn` applies
    /// to this table: it is running, and the transaction is not in its
    /// snapshot (committed at or after the snapshot's consistent point).
    pub fn applies(&self, final_lsn: Position) -> bool {
        self.info.state == TableState::Running
            && self.info.snapshot_lsn.is_some_and(|s| final_lsn >= s)
    }

    /// Maps the pinned columns onto the columns of the table's schema as
    /// the source sent it, by name. An error means the table must stall: a
    /// pinned column missing or of another type; one whose number the
    /// source knows and that is not the pinned one (dropped and re-added
    /// under its name, or names swapped by renames: its values are not the
    /// pinned column's); a type modifier changed in a way that changes
    /// stored values ([`typmod_changes_values`]: rows the upstream
    /// rewrote without a change to decode); or a key column no longer in
    /// the key.
    pub fn on_schema(&mut self, schema: &TableSchema) -> std::result::Result<(), String> {
        let reference = self.info.reference();
        let find = |pinned: &ColumnInfo| -> std::result::Result<usize, String> {
            let name = &pinned.name;
            let at = schema.column(name).ok_or_else(|| {
                format!(
                    "column \"{name}\" of upstream table \"{reference}\" was dropped or renamed"
                )
            })?;
            let found = &schema.columns[at];
            if found.type_oid != pinned.type_oid {
                return Err(format!(
                    "column \"{name}\" of upstream table \"{reference}\" changed type (OID {} to {})",
                    pinned.type_oid, found.type_oid
                ));
            }
            if let Some(attnum) = found.attnum
                && attnum != pinned.attnum
            {
                return Err(format!(
                    "column \"{name}\" of upstream table \"{reference}\" is no longer the column pinned (attnum {} is now {attnum}): it was dropped and re-added, or renamed in place of another, so its values are not the pinned column's",
                    pinned.attnum
                ));
            }
            if typmod_changes_values(pinned.type_oid, pinned.typmod, found.typmod) {
                return Err(format!(
                    "column \"{name}\" of upstream table \"{reference}\" changed type from {} to {}, which rewrote its stored values without changes to stream",
                    pinned.type_name,
                    typmod_shown(found.type_oid, found.typmod)
                ));
            }
            Ok(at)
        };
        let mut doc = Vec::new();
        for c in self.info.document_columns() {
            doc.push(find(c)?);
        }
        let mut key = Vec::new();
        for c in self.info.key_columns() {
            let at = find(c)?;
            // Updates and deletes identify rows by the replica identity's
            // columns; the pinned key must be among them.
            if !schema.columns[at].key {
                return Err(format!(
                    "the replica identity of upstream table \"{}\" no longer includes key column \"{}\", so its updates and deletes cannot be matched to documents",
                    reference, c.name
                ));
            }
            key.push(at);
        }
        self.mapping = Some(Mapping { doc, key });
        Ok(())
    }

    /// Prepares for rows in `copy` order: the document columns in attnum
    /// order, then the key columns that are not document columns (see the
    /// source contract's snapshot rows).
    pub fn set_copy_mapping(&mut self) {
        let doc: Vec<usize> = (0..self.doc_names.len()).collect();
        let mut key: Vec<usize> = self
            .info
            .document_columns()
            .enumerate()
            .filter(|(_, c)| c.key)
            .map(|(i, _)| i)
            .collect();
        let after = self.doc_names.len();
        key.extend(
            self.info
                .columns
                .iter()
                .filter(|c| c.key && c.excluded)
                .enumerate()
                .map(|(i, _)| after + i),
        );
        self.mapping = Some(Mapping { doc, key });
    }

    fn mapping(&self) -> Result<&Mapping> {
        self.mapping
            .as_ref()
            .ok_or_else(|| PipelineError::Document {
                table: self.info.name.clone(),
                message: "a change arrived before the table's schema".into(),
            })
    }

    fn document_error(&self, e: impl std::fmt::Display) -> PipelineError {
        PipelineError::Document {
            table: self.info.name.clone(),
            message: e.to_string(),
        }
    }

    /// The key and document of a row given as text values (COPY), `None`
    /// for NULL.
    pub fn encode_values(&self, values: &[Option<&[u8]>]) -> Result<(Vec<u8>, Vec<u8>)> {
        let m = self.mapping()?;
        let doc_values: Vec<Option<&[u8]>> = m
            .doc
            .iter()
            .map(|&i| values.get(i).copied().flatten())
            .collect();
        let key_values: Vec<Option<&[u8]>> = m
            .key
            .iter()
            .map(|&i| values.get(i).copied().flatten())
            .collect();
        let mut key = Vec::new();
        self.key_encoder
            .encode(&key_values, &mut key)
            .map_err(|e| self.document_error(e))?;
        let mut doc = Vec::new();
        self.encoder
            .encode(&doc_values, &mut doc)
            .map_err(|e| self.document_error(e))?;
        Ok((key, doc))
    }

    fn key_of(&self, row: &[Datum]) -> Result<Option<Vec<u8>>> {
        let m = self.mapping()?;
        let mut values = Vec::with_capacity(m.key.len());
        for &i in &m.key {
            match row.get(i) {
                Some(Datum::Text(b)) => values.push(Some(b.as_ref())),
                Some(Datum::Null) => values.push(None),
                // An unchanged TOASTed key value, or one the image does not
                // carry: the caller takes the key from elsewhere.
                _ => return Ok(None),
            }
        }
        let mut key = Vec::new();
        self.key_encoder
            .encode(&values, &mut key)
            .map_err(|e| self.document_error(e))?;
        Ok(Some(key))
    }

    /// The document of `row`; unchanged TOASTed values are taken from
    /// `previous`, the row's current document.
    fn doc_of(&self, row: &[Datum], previous: Option<&[u8]>) -> Result<Vec<u8>> {
        let m = self.mapping()?;
        let mut values = Vec::with_capacity(m.doc.len());
        let mut toasted: Vec<&str> = Vec::new();
        for (n, &i) in m.doc.iter().enumerate() {
            match row.get(i) {
                Some(Datum::Text(b)) => values.push(Some(b.as_ref())),
                Some(Datum::Unchanged) => {
                    toasted.push(&self.doc_names[n]);
                    values.push(None);
                }
                _ => values.push(None),
            }
        }
        let mut doc = Vec::new();
        self.encoder
            .encode(&values, &mut doc)
            .map_err(|e| self.document_error(e))?;
        if toasted.is_empty() {
            return Ok(doc);
        }
        let Some(previous) = previous else {
            tracing::warn!(
                table = %self.info.name,
                "an update kept TOASTed values of a row the table does not hold; they are missing from its document"
            );
            return Ok(doc);
        };
        splice_members(&doc, previous, &toasted).ok_or_else(|| {
            self.document_error("the stored document is not a JSON object (store corrupted?)")
        })
    }
}

/// A key the transaction touched in table `t`: its document before the
/// transaction and now.
#[derive(Debug)]
struct Touched {
    t: usize,
    key: Vec<u8>,
    /// The document before, once `before` says it is known.
    orig: Option<Vec<u8>>,
    cur: Option<Vec<u8>>,
    before: Before,
}

/// How the document of a touched key before the transaction is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    /// Read from the store (`orig`).
    Read,
    /// Read from the store for an insert (`orig`; counted as the table's
    /// insert found new or not when written).
    ReadForInsert,
    /// Not read yet: the key's first change was an insert. The write
    /// inserts the row if the store has none for the key (then there was
    /// none before), and otherwise reads the store's document first.
    Unread,
}

/// How [`Txn::set`] learns a key's document in the store, the first time
/// the transaction touches the key.
enum Original {
    /// The caller has just read it (or listed it).
    Known(Option<Vec<u8>>),
    /// Read it from the store now; the reason is kept for the write.
    Read(Before),
    /// Not read: an insert of a key the table is expected not to hold
    /// ([`Before::Unread`]).
    Unread,
}

/// One upstream transaction being collected.
pub struct Txn {
    /// Its commit record's LSN (from Begin).
    pub final_lsn: Position,
    /// The keys touched, in the order first touched.
    touched: Vec<Touched>,
    /// Per table index, each touched key's place in `touched`.
    index: HashMap<usize, HashMap<Vec<u8>, usize>>,
    /// Changes kept for tables whose snapshot is not in yet: table index
    /// and `pending` record.
    deferred: Vec<(usize, Vec<u8>)>,
    /// Replacements to swap in at this transaction's position.
    swaps: Vec<String>,
    /// Its typed row changes, when the bus wants them.
    pub rows: Option<Vec<evolve_core::change::RowChange>>,
}

impl Txn {
    /// An empty transaction committing at `final_lsn`.
    pub fn new(final_lsn: Position) -> Txn {
        Txn {
            final_lsn,
            touched: Vec::new(),
            index: HashMap::new(),
            deferred: Vec::new(),
            swaps: Vec::new(),
            rows: None,
        }
    }

    /// Whether the transaction has nothing to write: no row of an applied
    /// table touched, nothing deferred, no swap.
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty() && self.deferred.is_empty() && self.swaps.is_empty()
    }

    /// Keeps a `pending` record for table `t`, which is not
    /// hydrated yet.
    pub fn defer(&mut self, t: usize, record: Vec<u8>) {
        self.deferred.push((t, record));
    }

    /// Swaps replacement `name` in at this transaction's position.
    pub fn swap(&mut self, name: String) {
        self.swaps.push(name);
    }

    /// Leaves table `t` out of the transaction: it stalled in the middle of
    /// it, so none of the transaction's changes apply to it.
    pub fn forget(&mut self, t: usize) {
        self.touched.retain(|touched| touched.t != t);
        self.index.clear();
        for (i, touched) in self.touched.iter().enumerate() {
            self.index
                .entry(touched.t)
                .or_default()
                .insert(touched.key.clone(), i);
        }
        self.deferred.retain(|(table, _)| *table != t);
    }

    /// The current document of `key` in table `t`, and whether it came
    /// from the store (the key not touched yet in this transaction).
    fn current(
        &self,
        store: &Store,
        tables: &[TableRuntime],
        t: usize,
        key: &[u8],
    ) -> Result<(Option<Vec<u8>>, bool)> {
        match self.index.get(&t).and_then(|keys| keys.get(key)) {
            Some(&i) => Ok((self.touched[i].cur.clone(), false)),
            None => Ok((store.doc(tables[t].info.id, key)?, true)),
        }
    }

    /// Sets `key`'s current document in table `t`; the first time the
    /// transaction touches the key, its document in the store is kept as
    /// the original, learnt as `original` says.
    fn set(
        &mut self,
        store: &Store,
        tables: &[TableRuntime],
        t: usize,
        key: Vec<u8>,
        doc: Option<Vec<u8>>,
        original: Original,
    ) -> Result<()> {
        let keys = self.index.entry(t).or_default();
        if let Some(&i) = keys.get(&key) {
            self.touched[i].cur = doc;
            return Ok(());
        }
        let (orig, before) = match original {
            Original::Known(orig) => (orig, Before::Read),
            Original::Read(before) => (store.doc(tables[t].info.id, &key)?, before),
            Original::Unread => (None, Before::Unread),
        };
        keys.insert(key.clone(), self.touched.len());
        self.touched.push(Touched {
            t,
            key,
            orig,
            cur: doc,
            before,
        });
        Ok(())
    }

    /// An inserted row of table `t`.
    pub fn insert(
        &mut self,
        store: &Store,
        tables: &[TableRuntime],
        t: usize,
        new: &[Datum],
    ) -> Result<()> {
        let table = &tables[t];
        let key = table
            .key_of(new)?
            .ok_or_else(|| table.document_error("an inserted row has no key value"))?;
        let doc = table.doc_of(new, None)?;
        let original = if table.inserts.expect_new() {
            Original::Unread
        } else {
            Original::Read(Before::ReadForInsert)
        };
        self.set(store, tables, t, key, Some(doc), original)
    }

    /// An updated row of table `t`.
    pub fn update(
        &mut self,
        store: &Store,
        tables: &[TableRuntime],
        t: usize,
        old: Option<&[Datum]>,
        new: &[Datum],
    ) -> Result<()> {
        let table = &tables[t];
        let old_key = match old {
            Some(old) => table.key_of(old)?,
            None => None,
        };
        let new_key = match table.key_of(new)? {
            Some(k) => k,
            None => old_key
                .clone()
                .ok_or_else(|| table.document_error("an updated row has no key value"))?,
        };
        let old_key = old_key.unwrap_or_else(|| new_key.clone());
        let (previous, stored) = self.current(store, tables, t, &old_key)?;
        let doc = table.doc_of(new, previous.as_deref())?;
        // The store's document of the old key, read once.
        let original = if stored {
            Original::Known(previous)
        } else {
            Original::Read(Before::Read)
        };
        if old_key != new_key {
            self.set(store, tables, t, old_key, None, original)?;
            self.set(
                store,
                tables,
                t,
                new_key,
                Some(doc),
                Original::Read(Before::Read),
            )
        } else {
            self.set(store, tables, t, new_key, Some(doc), original)
        }
    }

    /// A deleted row of table `t`.
    pub fn delete(
        &mut self,
        store: &Store,
        tables: &[TableRuntime],
        t: usize,
        old: &[Datum],
    ) -> Result<()> {
        let table = &tables[t];
        let key = table
            .key_of(old)?
            .ok_or_else(|| table.document_error("a deleted row has no key value"))?;
        self.set(store, tables, t, key, None, Original::Read(Before::Read))
    }

    /// Table `t` was truncated: every row it holds is deleted.
    pub fn truncate(&mut self, store: &Store, tables: &[TableRuntime], t: usize) -> Result<()> {
        for (key, doc) in store.docs(tables[t].info.id)? {
            self.set(store, tables, t, key, None, Original::Known(Some(doc)))?;
        }
        for touched in self.touched.iter_mut().filter(|touched| touched.t == t) {
            touched.cur = None;
        }
        Ok(())
    }

    /// Writes the transaction: changed rows, their feed entries, the
    /// deferred messages, the swaps, and the source's applied position
    /// `end_lsn`, in one SQLite transaction; feed entries carry the upstream
    /// commit time (Unix microseconds). Returns the changes of every
    /// interface (what was fed), in order.
    #[cfg(test)]
    pub fn commit(
        self,
        store: &mut Store,
        tables: &mut [TableRuntime],
        source: &str,
        end_lsn: Position,
        commit_time_micros: i64,
    ) -> Result<Vec<Change>> {
        let fail = |e: rusqlite::Error| PipelineError::store("apply an upstream transaction", e);
        let tx = rusqlite::Transaction::new_unchecked(
            &store.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(fail)?;
        let mut tracked = store.tracked_replacements()?;
        let changes = self.write(store, tables, &mut tracked, end_lsn, commit_time_micros)?;
        tx.execute(
            "UPDATE sources SET applied_lsn = ?2 WHERE name = ?1",
            params![source, end_lsn.to_sql()],
        )
        .map_err(fail)?;
        tx.commit().map_err(fail)?;
        Ok(changes)
    }

    /// Writes the transaction into the store transaction the caller has
    /// open on `store`: changed rows and their feed records (also when a
    /// hydrated table replays its pending changes: a sink loading beside
    /// its copy catches up with them); deferred messages; the differing
    /// keys of the replacements in `tracked` (read in that same store
    /// transaction; a swap takes its replacement out); swaps.
    pub(crate) fn write(
        mut self,
        store: &Store,
        tables: &mut [TableRuntime],
        tracked: &mut Vec<TrackedReplacement>,
        end_lsn: Position,
        commit_time_micros: i64,
    ) -> Result<Vec<Change>> {
        let fail = |e: rusqlite::Error| PipelineError::store("apply an upstream transaction", e);
        let conn = &store.conn;
        let mut changes = Vec::new();
        // The documents move into the changes unless the differing keys
        // or a swap still read them.
        let keep = !tracked.is_empty() || !self.swaps.is_empty();
        let mut touched = std::mem::take(&mut self.touched);
        {
            // Once the document before is known, a key that had one is
            // updated in place, one that had none inserted.
            let mut update = conn
                .prepare_cached("UPDATE rows SET doc = ?3 WHERE tbl = ?1 AND key = ?2")
                .map_err(fail)?;
            let mut insert = conn
                .prepare_cached("INSERT OR REPLACE INTO rows (tbl, key, doc) VALUES (?1, ?2, ?3)")
                .map_err(fail)?;
            let mut delete = conn
                .prepare_cached("DELETE FROM rows WHERE tbl = ?1 AND key = ?2")
                .map_err(fail)?;
            let mut insert_new = conn
                .prepare_cached(
                    "INSERT INTO rows (tbl, key, doc) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                )
                .map_err(fail)?;
            for entry in touched.iter_mut() {
                let id = tables[entry.t].info.id;
                // An inserted key not read before: written now if the
                // store has no document for it.
                let mut written = false;
                if entry.before == Before::Unread {
                    if let Some(doc) = &entry.cur {
                        written = insert_new
                            .execute(params![id, entry.key, doc])
                            .map_err(fail)?
                            == 1;
                    }
                    if !written {
                        entry.orig = store.doc(id, &entry.key)?;
                    }
                }
                if entry.before != Before::Read {
                    tables[entry.t].inserts.count(entry.orig.is_none());
                }
                if entry.orig == entry.cur {
                    continue;
                }
                let table = &tables[entry.t];
                match (&entry.orig, &entry.cur) {
                    _ if written => {}
                    (Some(_), Some(doc)) => {
                        let updated = update.execute(params![id, entry.key, doc]).map_err(fail)?;
                        if updated == 0 {
                            insert.execute(params![id, entry.key, doc]).map_err(fail)?;
                        }
                    }
                    (None, Some(doc)) => {
                        insert.execute(params![id, entry.key, doc]).map_err(fail)?;
                    }
                    (_, None) => {
                        delete.execute(params![id, entry.key]).map_err(fail)?;
                    }
                }
                let last = table.interfaces.len().saturating_sub(1);
                for (n, interface) in table.interfaces.iter().enumerate() {
                    let (key, old, new) = if n == last && !keep {
                        (
                            std::mem::take(&mut entry.key),
                            entry.orig.take(),
                            entry.cur.take(),
                        )
                    } else {
                        (entry.key.clone(), entry.orig.clone(), entry.cur.clone())
                    };
                    changes.push(Change {
                        interface: *interface,
                        key,
                        old,
                        new,
                    });
                }
            }
            if !self.deferred.is_empty() {
                let mut pending = conn
                    .prepare_cached(
                        "INSERT INTO pending (tbl, final_lsn, end_lsn, committed_at, message) \
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .map_err(fail)?;
                for (t, message) in &self.deferred {
                    pending
                        .execute(params![
                            tables[*t].info.id,
                            self.final_lsn.to_sql(),
                            end_lsn.to_sql(),
                            commit_time_micros,
                            message
                        ])
                        .map_err(fail)?;
                }
            }
        }
        self.touched = touched;
        if !tracked.is_empty() {
            self.note_differing(store, tables, tracked)?;
        }
        if !self.swaps.is_empty() {
            // What this transaction changed, per table: the documents
            // before it (a swap compares with the old table as it was).
            let mut before = crate::swap::Before::new();
            for entry in &self.touched {
                before
                    .entry(tables[entry.t].info.id)
                    .or_default()
                    .push((entry.key.clone(), entry.orig.clone()));
            }
            for name in &self.swaps {
                crate::swap::apply(store, tables, tracked, name, end_lsn, &before, &mut changes)?;
            }
        }
        // The feed is written last, once the swaps have replaced their
        // interfaces' changes: one record per interface.
        store.append_feed(end_lsn, commit_time_micros, &changes)?;
        Ok(changes)
    }

    /// For each replacement in `tracked`, records whether the documents
    /// of each key this transaction wrote in either of its two tables now
    /// differ between them (after the transaction's rows are written). A
    /// key the transaction wrote in both tables is compared in memory;
    /// otherwise the other table's document is read.
    fn note_differing(
        &self,
        store: &Store,
        tables: &[TableRuntime],
        tracked: &[TrackedReplacement],
    ) -> Result<()> {
        let index = |id: i64| tables.iter().position(|t| t.info.id == id);
        // The document `key` has now in table `id`.
        let now = |id: i64, key: &[u8]| -> Result<Option<Vec<u8>>> {
            match index(id) {
                Some(t) => Ok(self.current(store, tables, t, key)?.0),
                None => store.doc(id, key),
            }
        };
        for pair in tracked {
            let sides = [index(pair.old), index(pair.new)];
            let mut seen: HashSet<&[u8]> = HashSet::new();
            for entry in &self.touched {
                let key = &entry.key;
                if !sides.contains(&Some(entry.t)) {
                    continue;
                }
                let written = entry.orig != entry.cur;
                if !written || !seen.insert(key.as_slice()) {
                    continue;
                }
                let differs = now(pair.old, key)? != now(pair.new, key)?;
                store.set_differing(&pair.name, key, differs)?;
            }
        }
        Ok(())
    }
}

/// The net effect of one upstream transaction, table-driven, against an
/// in-memory store: what the table's documents become and which feed
/// entries (key, old, new) the interface gets.
/// Whether changing a column of type `type_oid` from type modifier `from`
/// to `to` can change the values it stores, and so their documents: the
/// upstream rewrites the table for such a change, and the rewrite reaches
/// no change stream. Lengths of `varchar` and `varbit` only constrain
/// (values that fit are kept as they are); a `numeric`'s precision only
/// constrains while its scale is kept, and dropping the modifier keeps
/// every value; a time type's fractional precision raised or dropped
/// keeps every value. Any other change (a scale, a lowered precision,
/// `char(n)`'s padding, `bit(n)`, an interval's fields, types evolve does
/// not know) counts as changing values.
pub fn typmod_changes_values(type_oid: u32, from: i32, to: i32) -> bool {
    const VARCHAR: u32 = 1043;
    const VARBIT: u32 = 1562;
    const NUMERIC: u32 = 1700;
    const TIMES: [u32; 4] = [1083, 1114, 1184, 1266];
    if from == to || type_oid == VARCHAR || type_oid == VARBIT {
        return false;
    }
    match type_oid {
        NUMERIC => to != -1 && (from == -1 || numeric_scale(from) != numeric_scale(to)),
        t if TIMES.contains(&t) => to != -1 && (from == -1 || to < from),
        _ => true,
    }
}

/// A `numeric` type modifier's scale (PostgreSQL keeps it in the low 11
/// bits, signed, of `typmod - 4`).
fn numeric_scale(typmod: i32) -> i32 {
    let low = (typmod - 4) & 0x7ff;
    if low & 0x400 != 0 { low - 0x800 } else { low }
}

/// How PostgreSQL names type `type_oid` with modifier `typmod`, for the
/// types whose modifier [`typmod_changes_values`] reads; others by OID and
/// modifier.
fn typmod_shown(type_oid: u32, typmod: i32) -> String {
    let n = |m: i32| {
        if typmod < 0 {
            String::new()
        } else {
            format!("({m})")
        }
    };
    match type_oid {
        1700 if typmod < 0 => "numeric".into(),
        1700 => format!(
            "numeric({},{})",
            ((typmod - 4) >> 16) & 0xffff,
            numeric_scale(typmod)
        ),
        1042 => format!("character{}", n(typmod - 4)),
        1043 => format!("character varying{}", n(typmod - 4)),
        1560 => format!("bit{}", n(typmod)),
        1562 => format!("bit varying{}", n(typmod)),
        1083 => format!("time{} without time zone", n(typmod)),
        1266 => format!("time{} with time zone", n(typmod)),
        1114 => format!("timestamp{} without time zone", n(typmod)),
        1184 => format!("timestamp{} with time zone", n(typmod)),
        _ => format!("type OID {type_oid} with modifier {typmod}"),
    }
}

#[cfg(test)]
mod tests {
    use evolve_core::change::{Bytes, ColumnSchema};
    use evolve_core::document::TypeKind;

    use super::*;
    use crate::store::ColumnInfo;

    /// One row operation of the transaction.
    enum Op {
        Insert(i32, Option<&'static str>, i32),
        /// Old key (when it changes), then the new row; `None` note means an
        /// unchanged TOASTed value.
        Update(Option<i32>, i32, Option<&'static str>, i32),
        Delete(i32),
        Truncate,
    }

    fn column(name: &str, attnum: i16, type_oid: u32, kind: TypeKind, key: bool) -> ColumnInfo {
        ColumnInfo::for_test(name, attnum, type_oid, kind, key)
    }

    /// A store with `t_v1` (id int key, note text, qty int), running from
    /// position 1, read by one interface; the table's runtime mapped onto
    /// the source's schema.
    fn setup() -> (Store, Vec<TableRuntime>, i64) {
        let store = Store::in_memory_with_source();
        let mut info = TableInfo::running_for_test(
            "t_v1",
            vec![
                column("id", 1, 23, TypeKind::Integer, true),
                column("note", 2, 25, TypeKind::Text, false),
                column("qty", 3, 23, TypeKind::Integer, false),
            ],
        );
        info.id = store.insert_table(&info).unwrap();
        store
            .insert_interface("t_json", "t_v1", &crate::pipeline::interface_output())
            .unwrap();
        let interface = store.interface("t_json").unwrap().unwrap().id;
        let mut table = TableRuntime::new(info, vec![interface]).unwrap();
        let col = |name: &str, type_oid, key| ColumnSchema {
            name: name.into(),
            type_oid,
            typmod: -1,
            key,
            attnum: None,
        };
        table
            .on_schema(&TableSchema {
                schema: "public".into(),
                name: "t".into(),
                columns: vec![
                    col("id", 23, true),
                    col("note", 25, false),
                    col("qty", 23, false),
                ],
            })
            .unwrap();
        (store, vec![table], interface)
    }

    fn text(t: String) -> Datum {
        Datum::Text(Bytes::from(t))
    }

    fn row(id: i32, note: Option<&str>, qty: i32) -> Vec<Datum> {
        vec![
            text(id.to_string()),
            match note {
                Some(n) => text(n.to_string()),
                None => Datum::Unchanged,
            },
            text(qty.to_string()),
        ]
    }

    fn key_only(id: i32) -> Vec<Datum> {
        vec![text(id.to_string()), Datum::Missing, Datum::Missing]
    }

    /// Applies `ops` as one transaction at position `pos`; the feed
    /// entries as (key, old, new) text.
    fn apply(
        store: &mut Store,
        tables: &mut [TableRuntime],
        pos: u64,
        ops: &[Op],
    ) -> Vec<(String, Option<String>, Option<String>)> {
        let mut txn = Txn::new(Position::from_u64(pos));
        for op in ops {
            match op {
                Op::Insert(id, note, qty) => txn.insert(store, tables, 0, &row(*id, *note, *qty)),
                Op::Update(old, id, note, qty) => {
                    let old = old.map(key_only);
                    txn.update(store, tables, 0, old.as_deref(), &row(*id, *note, *qty))
                }
                Op::Delete(id) => txn.delete(store, tables, 0, &key_only(*id)),
                Op::Truncate => txn.truncate(store, tables, 0),
            }
            .unwrap();
        }
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        txn.commit(store, tables, "src", Position::from_u64(pos), 0)
            .unwrap()
            .into_iter()
            .map(|c| (text(c.key), c.old.map(text), c.new.map(text)))
            .collect()
    }

    fn docs(store: &Store) -> Vec<String> {
        store
            .docs(store.table("t_v1").unwrap().unwrap().id)
            .unwrap()
            .into_iter()
            .map(|(_, d)| String::from_utf8(d).unwrap())
            .collect()
    }

    fn s(text: &str) -> Option<String> {
        Some(text.to_string())
    }

    #[test]
    fn the_net_effect_of_a_transaction_is_fed_once_per_key() {
        let doc = |id: i32, note: &str, qty: i32| -> String {
            format!(r#"{{"id":{id},"qty":{qty},"note":"{note}"}}"#)
        };
        let key = |id: i32| format!(r#"{{"id":{id}}}"#);
        let (mut store, mut tables, _) = setup();
        // (ops, feed entries, documents afterwards)
        type Case = (
            Vec<Op>,
            Vec<(String, Option<String>, Option<String>)>,
            Vec<String>,
        );
        let cases: Vec<Case> = vec![
            // An insert and an update of the same row: one entry, the last.
            (
                vec![
                    Op::Insert(1, Some("a"), 1),
                    Op::Update(None, 1, Some("b"), 2),
                    Op::Insert(2, Some("x"), 5),
                ],
                vec![
                    (key(1), None, s(&doc(1, "b", 2))),
                    (key(2), None, s(&doc(2, "x", 5))),
                ],
                vec![doc(1, "b", 2), doc(2, "x", 5)],
            ),
            // An unchanged TOASTed value is kept from the current document.
            (
                vec![Op::Update(None, 1, None, 3)],
                vec![(key(1), s(&doc(1, "b", 2)), s(&doc(1, "b", 3)))],
                vec![doc(1, "b", 3), doc(2, "x", 5)],
            ),
            // A key change: the old key leaves, the new one enters.
            (
                vec![Op::Update(Some(2), 20, Some("x"), 5)],
                vec![
                    (key(2), s(&doc(2, "x", 5)), None),
                    (key(20), None, s(&doc(20, "x", 5))),
                ],
                vec![doc(1, "b", 3), doc(20, "x", 5)],
            ),
            // Delete then insert the same row as it was: nothing changed.
            (
                vec![Op::Delete(1), Op::Insert(1, Some("b"), 3)],
                vec![],
                vec![doc(1, "b", 3), doc(20, "x", 5)],
            ),
            // A row inserted and deleted in one transaction never existed.
            (
                vec![Op::Insert(7, Some("t"), 7), Op::Delete(7)],
                vec![],
                vec![doc(1, "b", 3), doc(20, "x", 5)],
            ),
            // TRUNCATE, then a row: every old row leaves, the new one enters.
            (
                vec![Op::Truncate, Op::Insert(3, Some("c"), 1)],
                vec![
                    (key(1), s(&doc(1, "b", 3)), None),
                    (key(20), s(&doc(20, "x", 5)), None),
                    (key(3), None, s(&doc(3, "c", 1))),
                ],
                vec![doc(3, "c", 1)],
            ),
        ];
        for (n, (ops, fed, after)) in cases.into_iter().enumerate() {
            let mut got = apply(&mut store, &mut tables, 10 + n as u64, &ops);
            let mut want = fed;
            got.sort();
            want.sort();
            assert_eq!(got, want, "case {n}: feed entries");
            assert_eq!(docs(&store), after, "case {n}: documents");
        }
        // The source's applied position is the last transaction's.
        assert_eq!(store.applied_lsn("src").unwrap(), Position::from_u64(15));
    }

    /// How many times the store has read one document so far.
    fn reads(store: &Store) -> i32 {
        store
            .conn
            .prepare_cached("SELECT doc FROM rows WHERE tbl = ?1 AND key = ?2")
            .unwrap()
            .get_status(rusqlite::StatementStatus::Run)
    }

    #[test]
    fn an_insert_reads_the_store_only_when_its_key_is_there() {
        let doc = |id: i32, note: &str, qty: i32| -> String {
            format!(r#"{{"id":{id},"qty":{qty},"note":"{note}"}}"#)
        };
        let key = |id: i32| format!(r#"{{"id":{id}}}"#);
        let (mut store, mut tables, _) = setup();
        // New keys: written without one read.
        let fed = apply(
            &mut store,
            &mut tables,
            10,
            &[Op::Insert(1, Some("a"), 1), Op::Insert(2, Some("b"), 2)],
        );
        assert_eq!(fed.len(), 2);
        assert_eq!(reads(&store), 0, "reads for two new keys");
        // Inserts of keys the store holds (a source whose inserts are
        // upserts): each is fed as the update it is, with the document
        // before, and one that changes nothing is not fed at all.
        let fed = apply(
            &mut store,
            &mut tables,
            11,
            &[Op::Insert(1, Some("a2"), 1), Op::Insert(2, Some("b"), 2)],
        );
        assert_eq!(fed, vec![(key(1), s(&doc(1, "a", 1)), s(&doc(1, "a2", 1)))]);
        assert_eq!(docs(&store), vec![doc(1, "a2", 1), doc(2, "b", 2)]);
        assert_eq!(reads(&store), 2, "reads for two keys that were there");
        // Inserted, then deleted before the commit: nothing, and the key
        // stays as the store had it.
        let fed = apply(
            &mut store,
            &mut tables,
            12,
            &[Op::Insert(3, Some("c"), 3), Op::Delete(3)],
        );
        assert!(fed.is_empty(), "{fed:?}");
        assert_eq!(docs(&store).len(), 2);
        // A table whose inserts keep finding their keys reads first again:
        // one read per insert, no refused insert before it.
        for n in 0..200 {
            apply(
                &mut store,
                &mut tables,
                100 + n,
                &[Op::Insert(1, Some("z"), n as i32)],
            );
        }
        assert!(!tables[0].inserts.expect_new());
        let before = reads(&store);
        let fed = apply(&mut store, &mut tables, 400, &[Op::Insert(1, Some("y"), 0)]);
        assert_eq!(
            fed,
            vec![(key(1), s(&doc(1, "z", 199)), s(&doc(1, "y", 0)))]
        );
        assert_eq!(reads(&store) - before, 1);
        assert_eq!(store.applied_lsn("src").unwrap(), Position::from_u64(400));
    }

    #[test]
    fn a_transaction_before_the_snapshot_does_not_apply() {
        let (_, tables, _) = setup();
        assert!(!tables[0].applies(Position::ZERO));
        assert!(tables[0].applies(Position::from_u64(1)));
        assert!(tables[0].applies(Position::from_u64(2)));
    }

    #[test]
    fn typmod_changes_that_rewrite_values_are_told_apart() {
        let numeric = |p: i32, s: i32| ((p << 16) | (s & 0x7ff)) + 4;
        // varchar and varbit lengths only constrain.
        assert!(!typmod_changes_values(1043, 14, 24));
        assert!(!typmod_changes_values(1043, 24, -1));
        assert!(!typmod_changes_values(1562, 8, 4));
        // numeric: the scale counts, the precision does not.
        assert!(!typmod_changes_values(1700, numeric(10, 2), numeric(14, 2)));
        assert!(!typmod_changes_values(1700, numeric(10, 2), -1));
        assert!(typmod_changes_values(1700, numeric(10, 2), numeric(12, 4)));
        assert!(typmod_changes_values(1700, -1, numeric(12, 4)));
        assert!(typmod_changes_values(1700, numeric(5, -2), numeric(5, 2)));
        assert_eq!(numeric_scale(numeric(5, -2)), -2);
        assert_eq!(typmod_shown(1700, numeric(12, 4)), "numeric(12,4)");
        // Fractional seconds: raised or dropped keeps values, lowered
        // rounds them.
        for t in [1083, 1114, 1184, 1266] {
            assert!(!typmod_changes_values(t, 3, 6));
            assert!(!typmod_changes_values(t, 3, -1));
            assert!(typmod_changes_values(t, 6, 0));
            assert!(typmod_changes_values(t, -1, 3));
        }
        // char(n) pads, bit(n) is exact, intervals and unknown types count.
        assert!(typmod_changes_values(1042, 9, 14));
        assert!(typmod_changes_values(1560, 3, 5));
        assert!(typmod_changes_values(1186, 0x7fff0000, -1));
        assert!(typmod_changes_values(16_400, 1, 2));
        assert!(!typmod_changes_values(16_400, 1, 1));
        assert_eq!(typmod_shown(1042, 14), "character(10)");
        assert_eq!(typmod_shown(1114, 0), "timestamp(0) without time zone");
    }

    #[test]
    fn a_known_attnum_other_than_the_pinned_one_is_refused() {
        let (_store, mut tables, _) = setup();
        let col = |name: &str, type_oid, key, attnum| ColumnSchema {
            name: name.into(),
            type_oid,
            typmod: -1,
            key,
            attnum,
        };
        let schema = |qty: Option<i16>| TableSchema {
            schema: "public".into(),
            name: "t".into(),
            columns: vec![
                col("id", 23, true, Some(1)),
                col("note", 25, false, Some(2)),
                col("qty", 23, false, qty),
            ],
        };
        assert_eq!(tables[0].on_schema(&schema(Some(3))), Ok(()));
        assert_eq!(tables[0].on_schema(&schema(None)), Ok(()));
        let error = tables[0].on_schema(&schema(Some(4))).unwrap_err();
        assert!(
            error.starts_with(
                "column \"qty\" of upstream table \"public.t\" is no longer the column pinned (attnum 3 is now 4)"
            ),
            "{error}"
        );
    }
}
