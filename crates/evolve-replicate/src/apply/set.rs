//! Applying a group of upstream transactions set by set: per node table
//! one `DELETE ... USING unnest(...)`, one `INSERT ... SELECT FROM
//! unnest(...)` and one `UPDATE ... FROM unnest(...)`, each for the keys
//! that expect no row or a row before the group, and counted; all sent at
//! once in the node transaction that records the group's last position.
//! A count that is off, or a unique violation, means a key was found
//! otherwise than its first change expects: the group is then written
//! again, checked, with a statement that finds those keys first (the
//! conflict check) and `INSERT ... ON CONFLICT DO UPDATE` in place of the
//! plain insert and update, and groups stay checked for [`REST`].
//!
//! The group is folded per key first: what the node must hold after it
//! (the key's last image, its columns merged over the key's updates, or
//! no row), and what the key's first change expects before it (an insert
//! expects no row, an update or a delete one). Within one upstream
//! transaction and across the group the changes of different keys
//! commute on the key, so the net effect per key is the effect of the
//! changes in order; a key that was deleted and inserted again is
//! deleted and inserted again, so that columns the upstream does not send
//! get the node's default as they would row by row.
//!
//! Conflicts come from the check: a first insert that finds a row is
//! `insert_exists`, a first update or delete that finds none is
//! `update_missing` or `delete_missing`. The set statements implement the
//! resolutions `update` (and `update_if_newer` without
//! `track_commit_timestamp`, which then means the same), `insert_or_skip`
//! and `insert_or_error` for an update that sent every column, and `skip`
//! for a delete; each conflict is logged as the row-by-row path logs it.
//! Anything else (another resolution, a transform, a truncate, a key that
//! changes, a table the node lacks, a value the node refuses, an update
//! that left a value unsent) rolls the node transaction back and the group
//! takes the row-by-row path, which gives the exact halt, filter or
//! resolution; the set path then rests for [`REST`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_core::change::{Bytes, ChangeKind, Datum, RowChange, TableSchema};
use evolve_core::conflict::{ColumnMatch, ColumnValue, ConflictType, Resolver};
use evolve_pg::quote_ident;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use super::{Applied, Applier, Attempt, Logged, Transaction, count, json_of};
use crate::error::{ReplicateError, Result};
use crate::node::NodeTable;

/// How long groups go row by row after the set path declined one.
pub(super) const REST: Duration = Duration::from_secs(1);

/// Where a row change is in the group: (transaction, row).
type At = (usize, usize);

/// One key of a node table, folded over the group's changes.
struct Key {
    values: Vec<Bytes>,
    /// The key's first change in the group, and its kind.
    first: At,
    first_kind: ChangeKind,
    /// A row is there after the changes so far.
    present: bool,
    /// A delete came before the key's last insert.
    replace: bool,
    /// Per upstream column, the value the last insert or the updates after
    /// it sent (`None`: not sent since).
    image: Vec<Option<Option<Bytes>>>,
}

/// A node table's share of the group.
struct Table {
    schema: Arc<TableSchema>,
    node: NodeTable,
    matched: ColumnMatch,
    keys: Vec<Key>,
    index: HashMap<Vec<Bytes>, usize>,
}

impl Table {
    /// Whether the node table has a column besides its key that takes
    /// an upstream value (an update has something to set).
    fn updates_columns(&self) -> bool {
        self.matched
            .values
            .iter()
            .enumerate()
            .any(|(n, v)| matches!(v, ColumnValue::Source(_)) && !self.matched.key.contains(&n))
    }
}

/// One statement to send and its parameters.
struct Sent<'a> {
    statement: Statement,
    params: Vec<Box<dyn ToSql + Sync + Send + 'a>>,
}

impl Applier {
    /// Applies `txns` (all past the replica's position, none to skip) in
    /// one node transaction set by set; `None` when the group is to take
    /// the row-by-row path (nothing of it was applied).
    pub(super) async fn apply_set(
        &mut self,
        client: &mut Client,
        txns: &[&Transaction],
    ) -> Result<Option<Applied>> {
        if self.set_off_until.is_some_and(|t| Instant::now() < t) {
            return Ok(None);
        }
        if txns
            .iter()
            .any(|t| t.rows.iter().any(|(_, c)| c.kind == ChangeKind::Truncate))
        {
            return Ok(None);
        }
        let Some(last) = txns.last().map(|t| t.end) else {
            return Ok(None);
        };
        if self.added >= self.replan_at {
            self.statements.clear();
            self.replan_at = self.added.saturating_mul(2);
        }
        // Without conflicts lately the group goes unchecked: the writes'
        // own counts tell whether any key was found otherwise than its
        // first change expects, and then it goes again, checked.
        let mut checked = self.set_checked_until.is_some_and(|t| Instant::now() < t);
        loop {
            let tx = client
                .transaction()
                .await
                .map_err(|e| ReplicateError::node("begin a node transaction", &e))?;
            match self.write_set(&tx, txns, checked).await {
                Ok(Written::Done(mut attempt)) => {
                    self.finish(tx, last, &mut attempt).await?;
                    // A group declined or sent again added nothing.
                    self.added += attempt.added;
                    self.groups.0 += 1;
                    return Ok(Some(attempt.applied));
                }
                Ok(Written::Conflicts) if !checked => {
                    tx.rollback()
                        .await
                        .map_err(|e| ReplicateError::node("roll back a node transaction", &e))?;
                    self.set_checked_until = Some(Instant::now() + REST);
                    self.checked_again += 1;
                    checked = true;
                }
                declined => {
                    if let Err(e) = &declined {
                        tracing::debug!(replica = %self.replica, error = %e, "set-based apply declined the group");
                    }
                    tx.rollback()
                        .await
                        .map_err(|e| ReplicateError::node("roll back a node transaction", &e))?;
                    self.set_off_until = Some(Instant::now() + REST);
                    return Ok(None);
                }
            }
        }
    }

    /// Folds the group, sends its statements and reads the conflicts:
    /// the attempt to finish, or `None` to decline.
    async fn write_set(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        txns: &[&Transaction],
        checked: bool,
    ) -> Result<Written> {
        let mut attempt = Attempt::default();
        let mut logged: Vec<(At, Logged)> = Vec::new();
        let mut tables: Vec<Table> = Vec::new();
        let mut by_id: HashMap<u32, usize> = HashMap::new();
        let mut changes = 0u64;
        for (ti, txn) in txns.iter().enumerate() {
            for (ri, (id, change)) in txn.rows.iter().enumerate() {
                let at = (ti, ri);
                let slot = match by_id.get(id) {
                    Some(&s) => {
                        let known = &tables[s].schema;
                        if !Arc::ptr_eq(known, &change.table) && **known != *change.table {
                            // The upstream's table changed inside the group.
                            return Ok(Written::Declined);
                        }
                        s
                    }
                    None => {
                        let Some(table) = self
                            .set_table(tx, txn, *id, change, at, &mut attempt, &mut logged)
                            .await?
                        else {
                            return Ok(Written::Declined);
                        };
                        tables.push(table);
                        by_id.insert(*id, tables.len() - 1);
                        tables.len() - 1
                    }
                };
                let table = &mut tables[slot];
                if let Some(new) = &change.new {
                    for &(i, resolver) in &table.matched.missing_on_target {
                        if let Some(Datum::Text(_)) = new.get(i) {
                            if resolver == Resolver::IgnoreIfNull {
                                return Ok(Written::Declined);
                            }
                            count(
                                &mut attempt.applied,
                                ConflictType::TargetColumnMissing,
                                resolver,
                            );
                            logged.push((
                                at,
                                Logged {
                                    conflict: ConflictType::TargetColumnMissing,
                                    resolution: resolver,
                                    schema: table.schema.schema.clone(),
                                    table: table.schema.name.clone(),
                                    key: Some(
                                        json_of(&table.schema, &super::key_image(change), true)
                                            .to_string(),
                                    ),
                                    remote: Some(json_of(&table.schema, new, false).to_string()),
                                    local: None,
                                    detail: Some(format!(
                                        "column \"{}\" dropped",
                                        table.schema.columns[i].name
                                    )),
                                },
                            ));
                        }
                    }
                }
                if !fold(table, at, change) {
                    return Ok(Written::Declined);
                }
                changes += 1;
            }
        }

        // Checks first (they read the node as the group found it), then
        // deletes, then upserts, in the order the tables first appear
        // (deletes in reverse).
        // Each write is split by what the keys expect to find when it
        // runs, and counts what it did: (statement's index, count wanted
        // for an unchecked group).
        let mut sends: Vec<Sent<'_>> = Vec::new();
        if checked {
            for t in &tables {
                sends.push(self.check(tx, t).await?);
            }
        }
        let mut counted: Vec<(usize, i64)> = Vec::new();
        for t in tables.iter().rev() {
            for expect_row in [true, false] {
                let keys: Vec<&Key> = t
                    .keys
                    .iter()
                    .filter(|k| {
                        (!k.present || k.replace)
                            && (k.first_kind != ChangeKind::Insert) == expect_row
                    })
                    .collect();
                if keys.is_empty() {
                    continue;
                }
                let wanted = if expect_row { keys.len() as i64 } else { 0 };
                counted.push((sends.len(), wanted));
                sends.push(self.delete(tx, t, &keys).await?);
            }
        }
        for t in &tables {
            for expect_row in [false, true] {
                let keys: Vec<&Key> = t
                    .keys
                    .iter()
                    .filter(|k| {
                        k.present
                            && (k.first_kind != ChangeKind::Insert && !k.replace) == expect_row
                    })
                    .collect();
                if keys.is_empty() {
                    continue;
                }
                // Checked, the upsert implements the resolutions and
                // counts the rows inserted: all of them where no row is
                // expected. Unchecked, no conflict is expected: a plain
                // INSERT of the keys that expect no row (a unique
                // violation sends the group again, checked) and an UPDATE
                // of those that expect one, each counting every key; the
                // node then does no speculative insertion and no tuple
                // lock, as its own apply worker does not.
                if !expect_row {
                    attempt.added += keys.len() as u64;
                }
                let (statement, wanted) = if checked {
                    let wanted = if expect_row { 0 } else { keys.len() as i64 };
                    (self.upsert(tx, t, &keys).await?, wanted)
                } else if expect_row && t.updates_columns() {
                    (self.update(tx, t, &keys).await?, keys.len() as i64)
                } else if expect_row {
                    (self.upsert(tx, t, &keys).await?, 0)
                } else {
                    (self.insert(tx, t, &keys).await?, keys.len() as i64)
                };
                match statement {
                    Some(s) => {
                        counted.push((sends.len(), wanted));
                        sends.push(s);
                    }
                    None => return Ok(Written::Declined),
                }
            }
        }
        let params: Vec<Vec<&(dyn ToSql + Sync)>> = sends
            .iter()
            .map(|s| s.params.iter().map(|p| p.as_ref() as _).collect())
            .collect();
        let results = futures_util::future::join_all(
            sends
                .iter()
                .zip(&params)
                .map(|(s, p)| tx.query(&s.statement, p)),
        )
        .await;
        let unique_violation = results.iter().any(|r| {
            r.as_ref()
                .is_err_and(|e| e.code() == Some(&SqlState::UNIQUE_VIOLATION))
        });
        let mut results: Vec<Vec<tokio_postgres::Row>> = match results.into_iter().collect() {
            Ok(results) => results,
            Err(_) if unique_violation && !checked => return Ok(Written::Conflicts),
            Err(_) => return Ok(Written::Declined),
        };
        if !checked {
            for (i, wanted) in counted {
                let got = results[i].first().map_or(0, |r| r.get::<_, i64>(0));
                if got != wanted {
                    return Ok(Written::Conflicts);
                }
            }
        }
        let checks: Vec<Vec<tokio_postgres::Row>> = if checked {
            results.drain(..tables.len()).collect()
        } else {
            Vec::new()
        };

        for (t, rows) in tables.iter().zip(checks) {
            for row in rows {
                let i = row.get::<_, i32>(0) as usize;
                let local: Option<String> = row.get(1);
                let Some(key) = t.keys.get(i) else {
                    return Ok(Written::Declined);
                };
                let (ti, ri) = key.first;
                let change = &txns[ti].rows[ri].1;
                let Some(l) = self.conflict(t, key, change, local) else {
                    return Ok(Written::Declined);
                };
                count(&mut attempt.applied, l.conflict, l.resolution);
                logged.push((key.first, l));
            }
        }
        logged.sort_by_key(|(at, _)| *at);
        attempt.logged = logged
            .into_iter()
            .map(|((ti, _), l)| (txns[ti].end, txns[ti].commit_time_micros, l))
            .collect();
        attempt.applied.rows += changes;
        Ok(Written::Done(attempt))
    }

    /// A table's first change in the group: its mapping onto the node (and
    /// the schema-level conflicts to log), or `None` when the set path
    /// does not apply to it.
    #[allow(clippy::too_many_arguments)]
    async fn set_table(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        txn: &Transaction,
        id: u32,
        change: &RowChange,
        at: At,
        attempt: &mut Attempt,
        logged: &mut Vec<(At, Logged)>,
    ) -> Result<Option<Table>> {
        let schema = Arc::clone(&change.table);
        let resolvers = self.resolvers.clone();
        let mapped = match self.mapped(tx, txn, id, &schema).await {
            Ok(mapped) => mapped,
            Err(e) => {
                // The row-by-row path meets the halt again and logs it.
                self.match_halt = None;
                return Err(e);
            }
        };
        if mapped.transform.is_some() {
            return Ok(None);
        }
        let Some((node, matched)) = mapped.target.clone() else {
            return Ok(None);
        };
        if matched.key.is_empty()
            || matched
                .key
                .iter()
                .any(|&k| !matches!(matched.values[k], ColumnValue::Source(_)))
        {
            return Ok(None);
        }
        if mapped.log_pending && attempt.schemas_logged.insert(id) {
            for l in super::schema_conflicts(&schema, &matched, &resolvers) {
                count(&mut attempt.applied, l.conflict, l.resolution);
                logged.push((at, l));
            }
        }
        Ok(Some(Table {
            schema,
            node,
            matched,
            keys: Vec::new(),
            index: HashMap::new(),
        }))
    }

    /// `SELECT i, to_jsonb(node row)` for the keys whose first change
    /// finds the node otherwise than it expects.
    async fn check<'a>(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        t: &'a Table,
    ) -> Result<Sent<'a>> {
        let (node, matched) = (&t.node, &t.matched);
        let mut columns = vec!["i".to_string(), "e".to_string()];
        let mut arrays = vec!["$1::int4[]".to_string(), "$2::bool[]".to_string()];
        let mut cond = Vec::new();
        for (n, &k) in matched.key.iter().enumerate() {
            columns.push(format!("k{n}"));
            arrays.push(format!("${}::text[]", n + 3));
            cond.push(format!(
                "t.{} = u.k{n}::{}",
                quote_ident(&node.table.columns[k].name),
                node.type_names[k]
            ));
        }
        let sql = format!(
            "SELECT u.i, to_jsonb(t)::text FROM unnest({}) AS u({}) LEFT JOIN {} t ON {} WHERE u.e <> (t.ctid IS NOT NULL)",
            arrays.join(", "),
            columns.join(", "),
            target(node),
            cond.join(" AND ")
        );
        let mut params: Vec<Box<dyn ToSql + Sync + Send + 'a>> = vec![
            Box::new((0..t.keys.len() as i32).collect::<Vec<i32>>()),
            Box::new(
                t.keys
                    .iter()
                    .map(|k| k.first_kind != ChangeKind::Insert)
                    .collect::<Vec<bool>>(),
            ),
        ];
        for n in 0..matched.key.len() {
            params.push(Box::new(
                t.keys
                    .iter()
                    .map(|k| utf8(&k.values[n]))
                    .collect::<Result<Vec<Option<&str>>>>()?,
            ));
        }
        Ok(Sent {
            statement: self.statement(tx, sql).await?,
            params,
        })
    }

    /// The delete of `gone` (keys the group leaves without a row or
    /// replaces); it returns the rows deleted.
    async fn delete<'a>(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        t: &'a Table,
        gone: &[&'a Key],
    ) -> Result<Sent<'a>> {
        let (node, matched) = (&t.node, &t.matched);
        let mut columns = Vec::new();
        let mut arrays = Vec::new();
        let mut cond = Vec::new();
        let mut params: Vec<Box<dyn ToSql + Sync + Send + 'a>> = Vec::new();
        for (n, &k) in matched.key.iter().enumerate() {
            columns.push(format!("k{n}"));
            arrays.push(format!("${}::text[]", n + 1));
            cond.push(format!(
                "t.{} = u.k{n}::{}",
                quote_ident(&node.table.columns[k].name),
                node.type_names[k]
            ));
            params.push(Box::new(
                gone.iter()
                    .map(|key| utf8(&key.values[n]))
                    .collect::<Result<Vec<Option<&str>>>>()?,
            ));
        }
        let sql = format!(
            "WITH d AS (DELETE FROM {} t USING unnest({}) AS u({}) WHERE {} RETURNING 1)
             SELECT count(*) FROM d",
            target(node),
            arrays.join(", "),
            columns.join(", "),
            cond.join(" AND ")
        );
        Ok(Sent {
            statement: self.statement(tx, sql).await?,
            params,
        })
    }

    /// The upsert of `rows` (keys the group leaves with a row): their
    /// images, in the node's column types; it returns the rows inserted
    /// (not updated). `None` when an image lacks a column's value.
    async fn upsert<'a>(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        t: &'a Table,
        rows: &[&'a Key],
    ) -> Result<Option<Sent<'a>>> {
        let Some(image) = Image::of(t, rows)? else {
            return Ok(None);
        };
        let key_columns = image.key_columns(t);
        let updates: Vec<String> = image
            .columns
            .iter()
            .filter(|c| !key_columns.contains(c))
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        let action = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        let sql = format!(
            "WITH w AS (INSERT INTO {} AS t ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM unnest({}) AS u({}) ON CONFLICT ({}) {action}
                        RETURNING t.xmax = 0 AS inserted)
             SELECT count(*) FILTER (WHERE inserted) FROM w",
            target(&t.node),
            image.columns.join(", "),
            image.values.join(", "),
            image.arrays.join(", "),
            image.aliases.join(", "),
            key_columns.join(", ")
        );
        Ok(Some(Sent {
            statement: self.statement(tx, sql).await?,
            params: image.params,
        }))
    }

    /// The plain insert of `rows` (keys that expect no row, in an
    /// unchecked group); it returns the rows inserted, and fails with a
    /// unique violation when one is there. `None` as for [`upsert`].
    ///
    /// [`upsert`]: Applier::upsert
    async fn insert<'a>(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        t: &'a Table,
        rows: &[&'a Key],
    ) -> Result<Option<Sent<'a>>> {
        let Some(image) = Image::of(t, rows)? else {
            return Ok(None);
        };
        let sql = format!(
            "WITH w AS (INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM unnest({}) AS u({}) RETURNING 1)
             SELECT count(*) FROM w",
            target(&t.node),
            image.columns.join(", "),
            image.values.join(", "),
            image.arrays.join(", "),
            image.aliases.join(", "),
        );
        Ok(Some(Sent {
            statement: self.statement(tx, sql).await?,
            params: image.params,
        }))
    }

    /// The update of `rows` (keys that expect a row, in an unchecked
    /// group) to their images, found by key; it returns the rows updated.
    /// `None` as for [`upsert`]. Only for a table that
    /// [`Table::updates_columns`].
    ///
    /// [`upsert`]: Applier::upsert
    async fn update<'a>(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        t: &'a Table,
        rows: &[&'a Key],
    ) -> Result<Option<Sent<'a>>> {
        let Some(image) = Image::of(t, rows)? else {
            return Ok(None);
        };
        let key_columns = image.key_columns(t);
        let mut sets = Vec::new();
        let mut cond = Vec::new();
        for (c, v) in image.columns.iter().zip(&image.values) {
            if key_columns.contains(c) {
                cond.push(format!("t.{c} = {v}"));
            } else {
                sets.push(format!("{c} = {v}"));
            }
        }
        let sql = format!(
            "WITH w AS (UPDATE {} AS t SET {} FROM unnest({}) AS u({}) WHERE {} RETURNING 1)
             SELECT count(*) FROM w",
            target(&t.node),
            sets.join(", "),
            image.arrays.join(", "),
            image.aliases.join(", "),
            cond.join(" AND "),
        );
        Ok(Some(Sent {
            statement: self.statement(tx, sql).await?,
            params: image.params,
        }))
    }

    /// The conflict a key's first change met, when the set statements
    /// implement its resolution.
    fn conflict(
        &self,
        t: &Table,
        key: &Key,
        change: &RowChange,
        local: Option<String>,
    ) -> Option<Logged> {
        let schema = &t.schema;
        let names = (schema.schema.clone(), schema.name.clone());
        match key.first_kind {
            ChangeKind::Insert => {
                let resolver = self.resolvers.get(ConflictType::InsertExists);
                let updates = resolver == Resolver::Update
                    || (resolver == Resolver::UpdateIfNewer && !self.commit_timestamps);
                let new = change.new.as_deref()?;
                updates.then(|| Logged {
                    conflict: ConflictType::InsertExists,
                    resolution: Resolver::Update,
                    schema: names.0,
                    table: names.1,
                    key: Some(json_of(schema, new, true).to_string()),
                    remote: Some(json_of(schema, new, false).to_string()),
                    local,
                    detail: None,
                })
            }
            ChangeKind::Update => {
                let resolver = self.resolvers.get(ConflictType::UpdateMissing);
                let new = change.new.as_deref()?;
                // Row by row the update turns into an insert only when it
                // sent every column.
                let complete = t.matched.values.iter().all(|v| match v {
                    ColumnValue::Source(i) => {
                        matches!(new.get(*i), Some(Datum::Text(_) | Datum::Null))
                    }
                    _ => true,
                });
                let inserts = matches!(resolver, Resolver::InsertOrSkip | Resolver::InsertOrError);
                let key_from = change
                    .old
                    .as_deref()
                    .filter(|old| super::key_values(&t.matched, old).is_some())
                    .unwrap_or(new);
                (inserts && complete).then(|| Logged {
                    conflict: ConflictType::UpdateMissing,
                    resolution: resolver,
                    schema: names.0,
                    table: names.1,
                    key: Some(json_of(schema, key_from, true).to_string()),
                    remote: Some(json_of(schema, new, false).to_string()),
                    local: None,
                    detail: None,
                })
            }
            ChangeKind::Delete => {
                let resolver = self.resolvers.get(ConflictType::DeleteMissing);
                let old = change.old.as_deref()?;
                (resolver == Resolver::Skip).then(|| Logged {
                    conflict: ConflictType::DeleteMissing,
                    resolution: Resolver::Skip,
                    schema: names.0,
                    table: names.1,
                    key: Some(json_of(schema, old, true).to_string()),
                    remote: None,
                    local: None,
                    detail: None,
                })
            }
            ChangeKind::Truncate => None,
        }
    }
}

/// The images of some keys of a node table, as `unnest` columns: per
/// node column that takes an upstream value, its quoted name, the alias
/// of its `unnest` column, the parameter (`$n::text[]`), the value
/// expression in the node's type, and the parameter's values.
struct Image<'a> {
    columns: Vec<String>,
    aliases: Vec<String>,
    arrays: Vec<String>,
    values: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send + 'a>>,
}

impl<'a> Image<'a> {
    /// `None` when a key's image lacks a column's value (not sent since
    /// its last insert: the node row keeps it, which only an update of
    /// that column says).
    fn of(t: &'a Table, rows: &[&'a Key]) -> Result<Option<Image<'a>>> {
        let (node, matched) = (&t.node, &t.matched);
        let mut image = Image {
            columns: Vec::new(),
            aliases: Vec::new(),
            arrays: Vec::new(),
            values: Vec::new(),
            params: Vec::new(),
        };
        for (n, value) in matched.values.iter().enumerate() {
            let ColumnValue::Source(i) = *value else {
                // The node's default: left out.
                continue;
            };
            let mut column = Vec::with_capacity(rows.len());
            for key in rows {
                match key.image.get(i) {
                    Some(Some(Some(v))) => column.push(utf8(v)?),
                    Some(Some(None)) => column.push(None),
                    _ => return Ok(None),
                }
            }
            let p = image.params.len() + 1;
            image.aliases.push(format!("c{p}"));
            image.arrays.push(format!("${p}::text[]"));
            image.values.push(format!("u.c{p}::{}", node.type_names[n]));
            image.columns.push(quote_ident(&node.table.columns[n].name));
            image.params.push(Box::new(column));
        }
        Ok(Some(image))
    }

    /// The node's key columns, quoted.
    fn key_columns(&self, t: &Table) -> Vec<String> {
        t.matched
            .key
            .iter()
            .map(|&k| quote_ident(&t.node.table.columns[k].name))
            .collect()
    }
}

/// What writing a group did.
enum Written {
    /// Applied; the attempt to finish.
    Done(Attempt),
    /// Unchecked, and a write found a key otherwise than its first change
    /// expected: to be done again, checked.
    Conflicts,
    /// The set path does not take the group.
    Declined,
}

/// Folds `change` into its key's state: false when the set path cannot
/// take it (a key that changes, a key value not sent, a change the
/// key's state does not allow).
fn fold(table: &mut Table, at: At, change: &RowChange) -> bool {
    let key_of = |image: &[Datum]| -> Option<Vec<Bytes>> {
        table
            .matched
            .key
            .iter()
            .map(|&k| match table.matched.values[k] {
                ColumnValue::Source(i) => match image.get(i) {
                    Some(Datum::Text(t)) => Some(t.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    };
    let new = change.new.as_deref();
    let old = change.old.as_deref();
    // Found by its new image, an update names its node row only when the
    // node's key is the upstream's identity (the row path halts on it).
    let identified = super::unidentified_key(&table.schema, &table.node, &table.matched).is_none();
    let key = match change.kind {
        ChangeKind::Insert => new.and_then(key_of),
        ChangeKind::Update => match (old.and_then(key_of), new.and_then(key_of)) {
            (Some(o), Some(n)) if o != n => None,
            (Some(o), _) => Some(o),
            (None, n) if identified => n,
            (None, _) => None,
        },
        ChangeKind::Delete => old.and_then(key_of),
        ChangeKind::Truncate => None,
    };
    let Some(key) = key else {
        return false;
    };
    let columns = table.schema.columns.len();
    let i = match table.index.get(&key) {
        Some(&i) => i,
        None => {
            table.keys.push(Key {
                values: key.clone(),
                first: at,
                first_kind: change.kind,
                present: change.kind != ChangeKind::Insert,
                replace: false,
                image: vec![None; columns],
            });
            table.index.insert(key, table.keys.len() - 1);
            table.keys.len() - 1
        }
    };
    let k = &mut table.keys[i];
    let sent = |d: &Datum| match d {
        Datum::Text(t) => Some(Some(t.clone())),
        Datum::Null => Some(None),
        Datum::Unchanged | Datum::Missing => None,
    };
    match change.kind {
        ChangeKind::Insert => {
            if k.present {
                return false;
            }
            let Some(new) = new else {
                return false;
            };
            k.replace = k.first != at;
            k.present = true;
            k.image = (0..columns).map(|c| new.get(c).and_then(sent)).collect();
        }
        ChangeKind::Update => {
            if !k.present {
                return false;
            }
            let Some(new) = new else {
                return false;
            };
            for (c, d) in new.iter().enumerate().take(columns) {
                if let Some(v) = sent(d) {
                    k.image[c] = Some(v);
                }
            }
        }
        ChangeKind::Delete => {
            if !k.present {
                return false;
            }
            k.present = false;
            k.image = vec![None; columns];
        }
        ChangeKind::Truncate => return false,
    }
    true
}

fn target(node: &NodeTable) -> String {
    format!(
        "{}.{}",
        quote_ident(&node.table.schema),
        quote_ident(&node.table.name)
    )
}

/// A value's text (an error, which declines the group, when it is not
/// UTF-8).
fn utf8(b: &Bytes) -> Result<Option<&str>> {
    super::text(b).map(Some)
}
