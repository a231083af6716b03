//! Applying upstream transactions to a node: each one atomically, in
//! commit order, with the replica's position in the same node
//! transaction, every conflict resolved by its resolver and written to
//! `evolve_conflict_history` in that transaction too.
//!
//! Apply order, as PGD documents it: the upstream table is matched to the
//! node's by qualified name and its columns by name
//! ([`evolve_core::conflict::match_columns`]: `target_table_missing`,
//! `target_column_missing`, `source_column_missing`,
//! `target_column_type_mismatch`), then the node row is looked up by key,
//! then row conflicts are resolved (`insert_exists`, `update_missing`,
//! `delete_missing`, `multiple_unique_conflicts`). A group of
//! transactions goes set by set first ([`Applier::apply_group`], the `set`
//! module); what the set statements cannot do goes row by row: each row
//! is one statement whose CTE reads the node's row before the change (for the
//! conflict's `local_tuple`) and whose data-modifying part applies it, so
//! a conflict costs no extra round trip. Values travel in their text form
//! and are given to the node type's input function, as native logical
//! replication does: cast to the type without its modifier
//! (`$n::text::character varying`), the assignment to the column applying
//! the modifier ([`NodeTable::type_names`]), so that a value that does not
//! fit is refused, never cut to fit.
//!
//! A transaction too large to hold in memory comes in [`Part`]s as the
//! stream delivers it, applied row by row in one node transaction that
//! its COMMIT commits with the position ([`Applier::begin_streamed`],
//! [`Applier::apply_part`], [`Applier::commit_streamed`]); its conflicts
//! are written as each part goes, and its halt is recorded at the end
//! its COMMIT gives ([`Applier::streamed_halt`]).
//!
//! What is logged: each row conflict once per row; `target_table_missing`
//! once per row it skips; `target_column_missing` once per row whose
//! non-NULL value was dropped (the divergence the resolver accepted);
//! `source_column_missing` and converted types (`target_column_type_mismatch`)
//! once per match (when the upstream's or the node's table changes). A halt
//! is logged once, after its transaction is rolled back, when a conflict
//! caused it: a resolver of a row conflict, a match that cannot be applied
//! (`target_column_missing = 'error'`, a NOT NULL column the upstream does
//! not send, a type the node does not convert), a non-NULL value under
//! `ignore_if_null`, a unique violation other than the key
//! (`multiple_unique_conflicts`), or a converted value the node refuses
//! (`target_column_type_mismatch`). The halt itself is recorded on the
//! node (`evolve_replica_progress`), whatever caused it, for `evolve
//! replicate skip` and `evolve rollout` to read.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use evolve_core::change::{ChangeKind, Datum, RowChange, TableSchema};
use evolve_core::conflict::{
    ColumnMatch, ColumnValue, ConflictType, Resolver, Resolvers, TypeRelation, match_columns,
};
use evolve_pg::quote_ident;
use evolve_pipeline::Position;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use crate::error::{ReplicateError, Result};
use crate::node::{self, NodeTable};
use crate::transform::Transform;

mod set;

/// The node's tables evolve writes, created when a replica starts. A
/// progress table of an earlier version gets the columns of a halt
/// (`halted_lsn`, `halt`) only when it lacks them: `ALTER TABLE` needs its
/// owner, and a role the owner granted the table to must still start.
pub const NODE_SETUP: &str = "
CREATE TABLE IF NOT EXISTS evolve_replica_progress (
    replica text PRIMARY KEY,
    lsn pg_lsn NOT NULL,
    skip_lsn pg_lsn,
    halted_lsn pg_lsn,
    halt text
);
DO $evolve$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'evolve_replica_progress'::regclass
                     AND attname = 'halted_lsn' AND NOT attisdropped) THEN
        ALTER TABLE evolve_replica_progress ADD COLUMN halted_lsn pg_lsn, ADD COLUMN halt text;
    END IF;
END $evolve$;
CREATE TABLE IF NOT EXISTS evolve_conflict_history (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    replica text NOT NULL,
    conflict_type text NOT NULL,
    resolution text NOT NULL,
    schema_name text NOT NULL,
    table_name text NOT NULL,
    key jsonb,
    remote_tuple jsonb,
    local_tuple jsonb,
    remote_lsn pg_lsn NOT NULL,
    remote_commit_time timestamptz,
    detail text
)";

/// Creates evolve's tables on the node ([`NODE_SETUP`]) and refuses them
/// when they were there already, owned by a role that could run code
/// with the connecting role's privileges through them
/// ([`evolve_pg::check_state_table`]).
pub async fn setup_node(client: &Client) -> Result<()> {
    client
        .batch_execute(NODE_SETUP)
        .await
        .map_err(|e| ReplicateError::node("create evolve's tables on the node", &e))?;
    node_tables_owned(client)
        .await
        .map_err(|(table, e)| match e {
            evolve_pg::OwnerError::Database(e) => {
                ReplicateError::node(format!("check the owner of {table} on the node"), &e)
            }
            evolve_pg::OwnerError::Refused(reason) => ReplicateError::Node {
                context: format!("table {table} on the node"),
                message: reason,
            },
        })
}

/// The tables [`NODE_SETUP`] creates.
pub const NODE_TABLES: [&str; 2] = ["evolve_replica_progress", "evolve_conflict_history"];

/// Checks the owner of each of [`NODE_TABLES`] that is there
/// ([`evolve_pg::check_state_table`]); the first refused, with why.
pub(crate) async fn node_tables_owned(
    client: &Client,
) -> std::result::Result<(), (&'static str, evolve_pg::OwnerError)> {
    for table in NODE_TABLES {
        evolve_pg::check_state_table(client, table)
            .await
            .map_err(|e| (table, e))?;
    }
    Ok(())
}

/// One upstream transaction: its end position, its commit time (Unix
/// microseconds) and its row changes with their upstream table ids.
#[derive(Clone, Debug)]
pub struct Transaction {
    pub end: Position,
    pub commit_time_micros: i64,
    pub rows: Vec<(u32, RowChange)>,
}

/// A part of an upstream transaction too large to hold in memory at once
/// (the read loop hands one over each time the transaction it reads has
/// gathered [`crate::Replica::part_rows`] rows): its rows in stream order,
/// applied row by row inside the one node transaction opened at its first
/// part ([`Applier::begin_streamed`]), which the last part, the upstream's
/// COMMIT, commits with the replica's position.
#[derive(Clone, Debug)]
pub struct Part {
    /// The transaction's commit position as its BEGIN gives it (where its
    /// commit record starts, `final_lsn`); its end is known only at COMMIT.
    pub commit: Position,
    pub commit_time_micros: i64,
    pub rows: Vec<(u32, RowChange)>,
    /// On the last part: the transaction's end (the COMMIT's).
    pub end: Option<Position>,
}

/// What becomes of a large transaction's parts, decided at its first
/// part ([`Applier::begin_streamed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamedAs {
    /// Applied in the node transaction.
    Apply,
    /// The node has it already: its parts are passed over.
    Applied,
    /// It is the transaction `evolve replicate skip` named: its parts are
    /// passed over and its COMMIT moves the position past it.
    Skip(Position),
}

/// A large upstream transaction applied part by part: what its node
/// transaction has done so far. Its conflicts are written to
/// `evolve_conflict_history` as each part is applied (so that memory
/// does not grow with them), under the LSN `0/0` until COMMIT gives the
/// transaction's end, which its node transaction then sets on them.
pub struct Streamed {
    commit: Position,
    commit_time_micros: i64,
    /// What becomes of its parts.
    pub how: StreamedAs,
    applied: Applied,
    schemas_logged: std::collections::HashSet<u32>,
    /// The first row its parts wrote to `evolve_conflict_history`.
    first_logged: Option<i64>,
    /// The conflict whose resolver halted a part, logged once the node
    /// transaction is rolled back and the COMMIT gave the end.
    halted: Option<Box<(Position, i64, Logged)>>,
    /// Parts applied in its node transaction.
    pub parts: u64,
}

/// What applying a transaction did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Rows changed on the node.
    pub rows: u64,
    /// Conflicts met, by type and resolution.
    pub conflicts: BTreeMap<(ConflictType, Resolver), u64>,
    /// The transaction was at or below the replica's position (already
    /// applied) or was the one to skip.
    pub skipped: bool,
    /// Rows a transform's filter dropped.
    pub filtered: u64,
}

/// The node table a row goes to, and how.
struct Target<'a> {
    schema: &'a Arc<TableSchema>,
    node: &'a NodeTable,
    matched: &'a ColumnMatch,
    transform: Option<&'a (Transform, Vec<String>)>,
    table: &'a str,
    converted: &'a Arc<Vec<Converted>>,
}

/// A node column whose values are converted from another built-in type
/// (a `target_column_type_mismatch` resolved by `transform`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Converted {
    column: String,
    from: String,
    to: String,
}

/// How a transaction's statements are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// All at once, results read after.
    Pipelined,
    /// One at a time, each result read before the next is sent.
    Sequential,
}

/// What one node transaction has done so far.
#[derive(Default)]
struct Attempt {
    applied: Applied,
    /// Conflicts to log, with their transaction's end and commit time.
    logged: Vec<(Position, i64, Logged)>,
    /// Tables whose schema-level conflicts this attempt logs.
    schemas_logged: std::collections::HashSet<u32>,
    /// Rows the set path's inserts add to the node's tables, counted
    /// into [`Applier`]'s `added` only once the attempt commits.
    added: u64,
    /// The conflict whose resolver halted the attempt, logged and counted
    /// after its rollback ([`Applier::record_halt`]).
    halted: Option<Box<(Position, i64, Logged)>>,
}

/// One row's statement and how to read its result.
struct Step {
    statement: Statement,
    params: Vec<Option<String>>,
    /// The node table, quoted, for messages.
    table: String,
    /// The row's key as JSON, for messages and the history.
    key: Option<String>,
    kind: StepKind,
    /// The node table's converted columns: a value the node refuses
    /// (SQLSTATE class 22) is their `target_column_type_mismatch`.
    converted: Arc<Vec<Converted>>,
}

enum StepKind {
    Truncate,
    /// Returns (the node's row before, rows written, rows the filter let
    /// through).
    Insert {
        resolver: Resolver,
        remote: String,
        names: (String, String),
    },
    /// Returns (rows updated, rows the filter let through, rows the
    /// filter took off the node); `insert` is the planned insert for
    /// update_missing's insert resolvers.
    Update {
        resolver: Resolver,
        complete: bool,
        insert: Option<Box<Step>>,
        remote: String,
        names: (String, String),
    },
    /// Returns (rows deleted, whether the transform's filter passes the
    /// old row: 1 when there is none to ask).
    Delete {
        resolver: Resolver,
        names: (String, String),
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    Filtered,
    /// The update found no row: its planned insert is to run.
    Insert,
}

/// How an upstream table maps onto the node, for one schema of it.
struct Mapped {
    schema: Arc<TableSchema>,
    target: Option<(NodeTable, ColumnMatch)>,
    /// The table's transform, with the node's names of the upstream's
    /// column types (for `NEW`).
    transform: Option<(Transform, Vec<String>)>,
    /// Its schema-level conflicts are to be logged (the first transaction
    /// that uses this match does).
    log_pending: bool,
    /// The node columns converted from another type.
    converted: Arc<Vec<Converted>>,
    /// When the node's catalog was read for it.
    read_at: std::time::Instant,
}

/// How long a match is used before the node's catalog is read again, so
/// that a table or column the node gains (a rollout's DDL) is seen while
/// the replica runs.
const MATCH_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// Rows added to the node's tables after which the applier's prepared
/// statements are first dropped and prepared again; each time after that,
/// once the rows added have doubled. PostgreSQL plans a prepared statement
/// for its parameters five times, then keeps one generic plan while the
/// table's statistics stand: made while a table was small (before
/// autovacuum's next `ANALYZE`), the set-based `UPDATE ... FROM unnest`'s
/// plan is a hash join over a sequential scan of the table, and it stays
/// one as the table grows. Prepared again, the statements are planned for
/// the tables as they now are, in a number of rounds that grows with the
/// logarithm of the rows.
const REPLAN_FIRST_ROWS: u64 = 1_000;

/// Applies transactions to one node for one replica.
pub struct Applier {
    replica: String,
    resolvers: Resolvers,
    transforms: Vec<Transform>,
    tables: HashMap<u32, Mapped>,
    statements: HashMap<String, Statement>,
    /// Rows the set-based path inserted (or upserted where no row was
    /// expected) since the applier was made.
    added: u64,
    /// `added` at which the prepared statements are dropped, to be
    /// prepared again: see [`REPLAN_FIRST_ROWS`].
    replan_at: u64,
    commit_timestamps: bool,
    position: Position,
    skip: Option<Position>,
    /// Conflicts since the applier was made, by type and resolution.
    pub counts: BTreeMap<(ConflictType, Resolver), u64>,
    /// The conflict that halted the last transaction, once logged
    /// ([`Applier::take_halt`]).
    halt: Option<(ConflictType, Resolver)>,
    /// The conflict a match that cannot be applied met, for the row that
    /// met it to log ([`Applier::plan_row`]).
    match_halt: Option<Logged>,
    /// The conflict that halted a copy's batch, for [`Applier::record_halt`]
    /// once the copy's node transaction is rolled back.
    load_halt: Option<Box<(Position, i64, Logged)>>,
    /// Groups are applied row by row until then (the set-based path met
    /// something only that path handles).
    set_off_until: Option<std::time::Instant>,
    /// Groups are checked for conflicts before they are written until
    /// then (one met some lately).
    set_checked_until: Option<std::time::Instant>,
    /// How groups were applied: set-based, and row by row.
    pub groups: (u64, u64),
    /// Set-based groups written again, checked, after their unchecked
    /// write found a key otherwise than its first change expected.
    pub checked_again: u64,
    /// The node refused to prepare a statement: its SQLSTATE and its
    /// error in one line, for the row that needed it to halt with.
    prepare_refused: Option<(String, String)>,
    /// A statement met a node table other than the match read (a column
    /// or table dropped, a type changed on the node since): the
    /// transaction is tried once more with the node's catalog read again.
    catalog_changed: std::sync::atomic::AtomicBool,
}

/// SQLSTATEs of a statement built for a node table as it no longer is:
/// undefined column, undefined table, datatype mismatch.
const CATALOG_CHANGED: [&str; 3] = ["42703", "42P01", "42804"];

/// The `detail` of a conflict whose resolver halted the replica (a
/// conflict of the match, or a value the node refused, says why after a
/// colon).
const HALTED: &str = "halted the replica";

/// Replica `replica`'s position on the node and the transaction it is to
/// skip, when the node has its progress row.
pub(crate) async fn stored_position(
    client: &Client,
    replica: &str,
) -> Result<Option<(Position, Option<Position>)>> {
    let row = client
        .query_opt(
            "SELECT (lsn - '0/0')::int8, (skip_lsn - '0/0')::int8 FROM evolve_replica_progress WHERE replica = $1",
            &[&replica],
        )
        .await
        .map_err(|e| ReplicateError::node("read the replica's position", &e))?;
    Ok(row.map(|row| {
        (
            Position::from_u64(row.get::<_, i64>(0) as u64),
            row.get::<_, Option<i64>>(1)
                .map(|s| Position::from_u64(s as u64)),
        )
    }))
}

/// The halt replica `replica` has recorded on the node, if it is halted:
/// the upstream transaction's end position and the halt's message. A
/// node whose progress table predates the halt columns has none.
pub(crate) async fn recorded_halt(
    client: &Client,
    replica: &str,
) -> Result<Option<(Position, String)>> {
    let row = client
        .query_opt(
            "SELECT ((to_jsonb(p)->>'halted_lsn')::pg_lsn - '0/0')::int8, to_jsonb(p)->>'halt'
             FROM evolve_replica_progress p WHERE replica = $1",
            &[&replica],
        )
        .await
        .map_err(|e| ReplicateError::node("read the replica's halt", &e))?;
    Ok(row.and_then(|row| {
        let lsn = row.get::<_, Option<i64>>(0)?;
        Some((
            Position::from_u64(lsn as u64),
            row.get::<_, Option<String>>(1).unwrap_or_default(),
        ))
    }))
}

/// A conflict to log.
struct Logged {
    conflict: ConflictType,
    resolution: Resolver,
    schema: String,
    table: String,
    key: Option<String>,
    remote: Option<String>,
    local: Option<String>,
    detail: Option<String>,
}

impl Logged {
    /// A row's conflict in table `names`; `halts` when its resolver halts
    /// the replica (its detail says so, and [`Applier::record_halt`] logs
    /// it after the rollback).
    fn row(
        conflict: ConflictType,
        resolution: Resolver,
        names: &(String, String),
        key: &str,
        remote: Option<String>,
        local: Option<String>,
        halts: bool,
    ) -> Logged {
        Logged {
            conflict,
            resolution,
            schema: names.0.clone(),
            table: names.1.clone(),
            key: Some(key.to_string()),
            remote,
            local,
            detail: halts.then(|| HALTED.into()),
        }
    }

    /// Whether its resolver halted the replica.
    fn halts(&self) -> bool {
        self.detail
            .as_deref()
            .is_some_and(|d| d.starts_with(HALTED))
    }
}

impl Applier {
    /// Prepares the node (its progress and conflict tables) and reads the
    /// replica's position there.
    pub async fn open(
        client: &Client,
        replica: &str,
        resolvers: Resolvers,
        transforms: Vec<Transform>,
    ) -> Result<Applier> {
        setup_node(client).await?;
        let commit_timestamps: bool = client
            .query_one(
                "SELECT current_setting('track_commit_timestamp')::bool",
                &[],
            )
            .await
            .map_err(|e| ReplicateError::node("read track_commit_timestamp", &e))?
            .get(0);
        let mut applier = Applier {
            replica: replica.to_string(),
            resolvers,
            transforms,
            tables: HashMap::new(),
            statements: HashMap::new(),
            added: 0,
            replan_at: REPLAN_FIRST_ROWS,
            commit_timestamps,
            position: Position::ZERO,
            skip: None,
            counts: BTreeMap::new(),
            halt: None,
            match_halt: None,
            load_halt: None,
            set_off_until: None,
            set_checked_until: None,
            groups: (0, 0),
            checked_again: 0,
            prepare_refused: None,
            catalog_changed: std::sync::atomic::AtomicBool::new(false),
        };
        applier.read_position(client).await?;
        Ok(applier)
    }

    /// The conflict whose resolver halted the last transaction, logged on
    /// the node, once: for the replica's count of conflicts.
    pub fn take_halt(&mut self) -> Option<(ConflictType, Resolver)> {
        self.halt.take()
    }

    /// The position of the last transaction applied to the node.
    pub fn position(&self) -> Position {
        self.position
    }

    /// Reads the node's catalog again before the next row of every table
    /// (a rollout's marker says the node's schema changed).
    pub fn refresh_matches(&mut self) {
        if let Some(stale) = std::time::Instant::now().checked_sub(MATCH_AGE) {
            for m in self.tables.values_mut() {
                m.read_at = stale;
            }
        }
    }

    async fn read_position(&mut self, client: &Client) -> Result<()> {
        if let Some((position, skip)) = stored_position(client, &self.replica).await? {
            self.position = position;
            self.skip = skip;
        }
        Ok(())
    }

    /// Applies `txn` in one node transaction, unless the node has it
    /// already (or it is the one to skip, which only moves the position).
    /// Its statements are sent at once (pipelined); when that meets
    /// anything but plain success (an update to turn into an insert, a row
    /// the node refuses) the node transaction is rolled back and the
    /// transaction applied again one statement at a time, which gives the
    /// exact halt or the conflict's order.
    ///
    /// A statement that meets a node table other than the one its match
    /// read (the node's schema changed while the replica applies: a column
    /// or table dropped) does not halt: the node's catalog is read again
    /// and the transaction tried once more, resolved for the node as it
    /// now is.
    pub async fn apply(&mut self, client: &mut Client, txn: &Transaction) -> Result<Applied> {
        self.catalog_changed
            .store(false, std::sync::atomic::Ordering::Relaxed);
        match self.apply_once(client, txn, true).await {
            Err(_) if self.reread_changed_catalog(&txn.end) => {
                self.apply_once(client, txn, false).await
            }
            other => other,
        }
    }

    /// After a failed attempt at the transaction at `at`: whether one of
    /// its statements met a node table other than the one its match read,
    /// and if so the node's catalog is read again (matches and prepared
    /// statements dropped), for the caller to try once more.
    fn reread_changed_catalog(&mut self, at: &Position) -> bool {
        if !self
            .catalog_changed
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return false;
        }
        tracing::info!(replica = %self.replica, lsn = %at, "the node's schema changed while applying: reading its catalog again");
        self.refresh_matches();
        self.statements.clear();
        true
    }

    /// [`Applier::apply`], once; `retry`: a halt the node's changed schema
    /// caused is not recorded (the caller tries again).
    async fn apply_once(
        &mut self,
        client: &mut Client,
        txn: &Transaction,
        retry: bool,
    ) -> Result<Applied> {
        self.prepare_refused = None;
        if txn.end <= self.position {
            return Ok(Applied {
                skipped: true,
                ..Applied::default()
            });
        }
        let skipping = self.skip == Some(txn.end);
        for mode in [Mode::Pipelined, Mode::Sequential] {
            let tx = client
                .transaction()
                .await
                .map_err(|e| ReplicateError::node("begin a node transaction", &e))?;
            let mut attempt = Attempt::default();
            if skipping {
                attempt.applied.skipped = true;
                tracing::warn!(replica = %self.replica, lsn = %txn.end, "skipping the upstream transaction as asked");
            } else {
                match self.write(&tx, txn, mode, &mut attempt).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tx.rollback().await.map_err(|e| {
                            ReplicateError::node("roll back a node transaction", &e)
                        })?;
                        continue;
                    }
                    Err(e) => {
                        drop(tx);
                        if retry
                            && self
                                .catalog_changed
                                .load(std::sync::atomic::Ordering::Relaxed)
                        {
                            return Err(e);
                        }
                        self.record_halt(client, &e, attempt.halted.take(), true)
                            .await;
                        return Err(e);
                    }
                }
            }
            self.finish(tx, txn.end, &mut attempt).await?;
            if skipping {
                self.skip = None;
            }
            return Ok(attempt.applied);
        }
        unreachable!("the sequential attempt either writes or fails")
    }

    /// Loads rows copied from a snapshot (inserts, through the same
    /// matching, transforms and resolvers) inside the copy's node
    /// transaction `tx` (under a savepoint, so that a pipelined attempt
    /// that meets a conflict is rolled back alone and done again one row
    /// at a time), without moving the replica's position; `at` is the
    /// snapshot's position, for the conflict history.
    pub async fn load(
        &mut self,
        tx: &mut tokio_postgres::Transaction<'_>,
        at: Position,
        rows: Vec<(u32, RowChange)>,
    ) -> Result<Applied> {
        let txn = Transaction {
            end: at,
            commit_time_micros: 0,
            rows,
        };
        for mode in [Mode::Pipelined, Mode::Sequential] {
            let sp = tx
                .savepoint("evolve_load")
                .await
                .map_err(|e| ReplicateError::node("begin a savepoint", &e))?;
            let mut attempt = Attempt::default();
            let written = match self.write(&sp, &txn, mode, &mut attempt).await {
                Ok(written) => written,
                Err(e) => {
                    self.load_halt = attempt.halted.take();
                    return Err(e);
                }
            };
            if !written {
                sp.rollback()
                    .await
                    .map_err(|e| ReplicateError::node("roll back a savepoint", &e))?;
                continue;
            }
            for (end, time, l) in std::mem::take(&mut attempt.logged) {
                self.log(&sp, end, time, l).await?;
            }
            sp.commit()
                .await
                .map_err(|e| ReplicateError::node("release a savepoint", &e))?;
            for id in std::mem::take(&mut attempt.schemas_logged) {
                if let Some(m) = self.tables.get_mut(&id) {
                    m.log_pending = false;
                }
            }
            for (k, n) in &attempt.applied.conflicts {
                *self.counts.entry(*k).or_default() += n;
            }
            return Ok(attempt.applied);
        }
        unreachable!("the sequential attempt either writes or fails")
    }

    /// Records `at` as the replica's position on the node (after a copy:
    /// the stream starts there), in `client`'s transaction if it is one.
    pub async fn set_position<C: tokio_postgres::GenericClient>(
        &mut self,
        client: &C,
        at: Position,
    ) -> Result<()> {
        client
            .execute(
                "INSERT INTO evolve_replica_progress (replica, lsn) VALUES ($1, $2::text::pg_lsn)
                 ON CONFLICT (replica) DO UPDATE SET lsn = EXCLUDED.lsn",
                &[&self.replica, &at.to_string()],
            )
            .await
            .map_err(|e| ReplicateError::node("record the replica's position", &e))?;
        self.position = at;
        Ok(())
    }

    /// Applies consecutive transactions in one node transaction, each
    /// pipelined; their conflicts as one. Falls back to [`Applier::apply`]
    /// for each when anything but plain success happens, so that a halt
    /// comes at its own transaction with the ones before it applied.
    pub async fn apply_group(
        &mut self,
        client: &mut Client,
        txns: &[Transaction],
    ) -> Result<Applied> {
        let pending: Vec<&Transaction> = txns.iter().filter(|t| t.end > self.position).collect();
        let skipping = pending.iter().any(|t| self.skip == Some(t.end));
        if !pending.is_empty()
            && !skipping
            && let Some(applied) = self.apply_set(client, &pending).await?
        {
            return Ok(applied);
        }
        let one_by_one = pending.len() <= 1 || skipping;
        self.groups.1 += 1;
        // What the set path's statements met is not this path's.
        self.prepare_refused = None;
        if !one_by_one {
            let tx = client
                .transaction()
                .await
                .map_err(|e| ReplicateError::node("begin a node transaction", &e))?;
            let mut attempt = Attempt::default();
            let mut clean = true;
            for txn in &pending {
                match self.write(&tx, txn, Mode::Pipelined, &mut attempt).await {
                    Ok(true) => {}
                    Ok(false) | Err(_) => {
                        clean = false;
                        break;
                    }
                }
            }
            if clean {
                let last = pending.last().map_or(self.position, |t| t.end);
                self.finish(tx, last, &mut attempt).await?;
                return Ok(attempt.applied);
            }
            tx.rollback()
                .await
                .map_err(|e| ReplicateError::node("roll back a node transaction", &e))?;
        }
        let mut total = Applied::default();
        for txn in txns {
            let applied = self.apply(client, txn).await?;
            total.rows += applied.rows;
            total.filtered += applied.filtered;
            for (k, n) in applied.conflicts {
                *total.conflicts.entry(k).or_default() += n;
            }
        }
        Ok(total)
    }

    /// Decides, at the first part of a large upstream transaction, what
    /// becomes of it, before its end is known (only its COMMIT gives it).
    ///
    /// Already applied: the stream starts at the replica's position (the
    /// node's, or the slot's confirmed position if that is later, and
    /// never later than the node's: confirmation follows the node's commit),
    /// and the server sends only transactions whose commit record starts
    /// at or after that start. Commit records do not overlap in the WAL, so
    /// a transaction whose commit record starts (`commit`, BEGIN's
    /// `final_lsn`) before the position, the end of one the node
    /// committed, ended at or before it: it is applied (this never happens
    /// with PostgreSQL's stream and is checked all the same); one starting
    /// at or after the position ends after it: it is not.
    ///
    /// To skip: `evolve replicate skip` arms only the halted transaction's
    /// end `s`, and a halt is met at the first transaction not applied, so
    /// the stream begins with it. A transaction whose commit record starts
    /// before `s` ends at or before `s` (a later commit record would start
    /// after `s`); being after the position, it is that one. A
    /// transaction starting at or after `s` is after it. The COMMIT checks
    /// that its end is `s` ([`Applier::commit_streamed`]).
    pub fn begin_streamed(&self, first: &Part) -> Streamed {
        let how = if first.commit < self.position {
            StreamedAs::Applied
        } else {
            match self.skip {
                Some(s) if first.commit < s => StreamedAs::Skip(s),
                _ => StreamedAs::Apply,
            }
        };
        if let StreamedAs::Skip(s) = how {
            tracing::warn!(replica = %self.replica, lsn = %s, "skipping the upstream transaction as asked");
        }
        Streamed {
            commit: first.commit,
            commit_time_micros: first.commit_time_micros,
            how,
            applied: Applied::default(),
            schemas_logged: std::collections::HashSet::new(),
            first_logged: None,
            halted: None,
            parts: 0,
        }
    }

    /// Applies a part's rows in the large transaction's node transaction
    /// `tx`, row by row (pipelined, and again one statement at a time under
    /// a savepoint when that meets anything but plain success, as
    /// [`Applier::apply`] does for a whole transaction), its conflicts
    /// written to the history in `tx`. A statement that meets a node table
    /// other than its match read has the part tried once more (from its
    /// savepoint) with the node's catalog read again. A halt's LSN is
    /// unknown until the COMMIT ([`Applier::streamed_halt`]).
    pub async fn apply_part(
        &mut self,
        tx: &mut tokio_postgres::Transaction<'_>,
        s: &mut Streamed,
        rows: Vec<(u32, RowChange)>,
    ) -> Result<()> {
        let txn = Transaction {
            // Not known before the COMMIT.
            end: Position::ZERO,
            commit_time_micros: s.commit_time_micros,
            rows,
        };
        self.catalog_changed
            .store(false, std::sync::atomic::Ordering::Relaxed);
        match self.part_once(tx, s, &txn).await {
            Err(_) if self.reread_changed_catalog(&s.commit) => self.part_once(tx, s, &txn).await,
            other => other,
        }
    }

    /// [`Applier::apply_part`], once.
    async fn part_once(
        &mut self,
        tx: &mut tokio_postgres::Transaction<'_>,
        s: &mut Streamed,
        txn: &Transaction,
    ) -> Result<()> {
        s.halted = None;
        for mode in [Mode::Pipelined, Mode::Sequential] {
            self.prepare_refused = None;
            let sp = tx
                .savepoint("evolve_part")
                .await
                .map_err(|e| ReplicateError::node("begin a savepoint", &e))?;
            let mut attempt = Attempt {
                schemas_logged: s.schemas_logged.clone(),
                ..Attempt::default()
            };
            match self.write(&sp, txn, mode, &mut attempt).await {
                Ok(true) => {}
                Ok(false) => {
                    sp.rollback()
                        .await
                        .map_err(|e| ReplicateError::node("roll back a savepoint", &e))?;
                    continue;
                }
                Err(e) => {
                    s.halted = attempt.halted.take();
                    return Err(e);
                }
            }
            for (end, time, l) in std::mem::take(&mut attempt.logged) {
                let id = self.log(&sp, end, time, l).await?;
                s.first_logged.get_or_insert(id);
            }
            sp.commit()
                .await
                .map_err(|e| ReplicateError::node("release a savepoint", &e))?;
            s.schemas_logged = attempt.schemas_logged;
            s.applied.rows += attempt.applied.rows;
            s.applied.filtered += attempt.applied.filtered;
            for (k, n) in attempt.applied.conflicts {
                *s.applied.conflicts.entry(k).or_default() += n;
            }
            s.parts += 1;
            return Ok(());
        }
        unreachable!("the sequential attempt either writes or fails")
    }

    /// The COMMIT of a large transaction that ended at `end`: in its node
    /// transaction `tx` (none when the node has it already), its conflicts
    /// get their LSN, the replica's position becomes `end`, and it commits
    /// (the rows, their conflicts and the position at once, as for a
    /// small one); a skipped one only moves the position.
    pub async fn commit_streamed(
        &mut self,
        tx: Option<tokio_postgres::Transaction<'_>>,
        s: Streamed,
        end: Position,
    ) -> Result<Applied> {
        let skipped = Applied {
            skipped: true,
            ..Applied::default()
        };
        let Some(tx) = tx else {
            return Ok(skipped);
        };
        if end <= self.position {
            // What [`Applier::begin_streamed`] rules out: the node has it.
            tx.rollback()
                .await
                .map_err(|e| ReplicateError::node("roll back a node transaction", &e))?;
            return Ok(skipped);
        }
        if let StreamedAs::Skip(to_skip) = s.how {
            if end != to_skip {
                // Ruled out as well: nothing is lost, the node
                // transaction is rolled back and the position stays.
                drop(tx);
                return Err(ReplicateError::Halted {
                    replica: self.replica.clone(),
                    lsn: end,
                    message: format!(
                        "the transaction to skip was to finish at {to_skip}, and the one that began before it finished at {end}: nothing was skipped"
                    ),
                });
            }
            let mut attempt = Attempt {
                applied: skipped,
                ..Attempt::default()
            };
            self.finish(tx, end, &mut attempt).await?;
            self.skip = None;
            return Ok(attempt.applied);
        }
        if let Some(first) = s.first_logged {
            tx.execute(
                "UPDATE evolve_conflict_history SET remote_lsn = $1::text::pg_lsn
                 WHERE id >= $2 AND replica = $3 AND remote_lsn = '0/0'",
                &[&end.to_string(), &first, &self.replica],
            )
            .await
            .map_err(|e| ReplicateError::node("write evolve_conflict_history", &e))?;
        }
        let mut attempt = Attempt {
            applied: s.applied,
            schemas_logged: s.schemas_logged,
            ..Attempt::default()
        };
        self.finish(tx, end, &mut attempt).await?;
        Ok(attempt.applied)
    }

    /// The halt `e` a part of a large transaction met, once its node
    /// transaction is rolled back and its COMMIT gave its `end`: the halt
    /// at that LSN, recorded as [`Applier::apply`] records one (its
    /// conflict logged and counted once, the halt in the progress row for
    /// `evolve replicate skip`).
    pub async fn streamed_halt(
        &mut self,
        client: &mut Client,
        s: Streamed,
        mut e: ReplicateError,
        end: Position,
    ) -> ReplicateError {
        if let ReplicateError::Halted { lsn, .. } = &mut e {
            *lsn = end;
        }
        let conflict = s.halted.map(|mut c| {
            c.0 = end;
            c
        });
        self.record_halt(client, &e, conflict, true).await;
        e
    }

    /// Writes `txn`'s rows in `tx`: true when done, false when a pipelined
    /// attempt met something only the sequential one handles.
    async fn write(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        txn: &Transaction,
        mode: Mode,
        attempt: &mut Attempt,
    ) -> Result<bool> {
        let mut steps = Vec::with_capacity(txn.rows.len());
        let mut logged = Vec::new();
        // A resolver that halts pushes its conflict last, then fails.
        let halted = |logged: &mut Vec<Logged>, attempt: &mut Attempt| {
            if let Some(l) = logged.pop().filter(Logged::halts) {
                attempt.halted = Some(Box::new((txn.end, txn.commit_time_micros, l)));
            }
        };
        for (table, change) in &txn.rows {
            match self
                .plan_row(tx, txn, *table, change, attempt, &mut logged)
                .await
            {
                Ok(Some(step)) => steps.push(step),
                Ok(None) => {}
                Err(e) => {
                    halted(&mut logged, attempt);
                    // A statement the node refuses to prepare, for a
                    // reason of its table, halts at this transaction (to
                    // be fixed or skipped), not as a transient failure.
                    // A value that is not text the node can read is this
                    // transaction's, not a failure retrying helps.
                    if matches!(&e, ReplicateError::Node { context, .. } if context == NOT_UTF8) {
                        return Err(self.halt(
                            txn,
                            format!(
                                "a value the upstream sent for {}.{} is not UTF-8 (an upstream database in SQL_ASCII stores bytes unconverted): correct the value upstream",
                                quote_ident(&change.table.schema),
                                quote_ident(&change.table.name)
                            ),
                        ));
                    }
                    if let Some((_, error)) = self.prepare_refused.take() {
                        return Err(self.halt(
                            txn,
                            format!(
                                "the node refused the statement that applies a row of {}.{}: {error}",
                                quote_ident(&change.table.schema),
                                quote_ident(&change.table.name)
                            ),
                        ));
                    }
                    return Err(e);
                }
            }
        }
        let mut applied = Applied::default();
        match mode {
            Mode::Sequential => {
                for step in &steps {
                    if let Err(e) = self
                        .run_step(tx, txn, step, &mut applied, &mut logged)
                        .await
                    {
                        halted(&mut logged, attempt);
                        return Err(e);
                    }
                }
            }
            Mode::Pipelined => {
                let params: Vec<Vec<&(dyn ToSql + Sync)>> =
                    steps.iter().map(|s| refs(&s.params)).collect();
                let results = futures_util::future::join_all(
                    steps
                        .iter()
                        .zip(&params)
                        .map(|(s, p)| tx.query(&s.statement, p)),
                )
                .await;
                for (step, rows) in steps.iter().zip(results) {
                    let Ok(rows) = rows else {
                        return Ok(false);
                    };
                    match self.outcome(txn, step, &rows, &mut applied, &mut logged) {
                        Ok(Outcome::Insert) | Err(_) => return Ok(false),
                        Ok(_) => {}
                    }
                }
            }
        }
        attempt.applied.rows += applied.rows;
        attempt.applied.filtered += applied.filtered;
        for (k, n) in applied.conflicts {
            *attempt.applied.conflicts.entry(k).or_default() += n;
        }
        attempt.logged.extend(
            logged
                .into_iter()
                .map(|l| (txn.end, txn.commit_time_micros, l)),
        );
        Ok(true)
    }

    /// Logs the attempt's conflicts, records the last transaction's
    /// position, commits, and only then takes the attempt's effects in.
    async fn finish(
        &mut self,
        tx: tokio_postgres::Transaction<'_>,
        last: Position,
        attempt: &mut Attempt,
    ) -> Result<()> {
        for (end, time, l) in std::mem::take(&mut attempt.logged) {
            self.log(&tx, end, time, l).await?;
        }
        // A skip or a halt the position has passed is done with.
        tx.execute(
            "INSERT INTO evolve_replica_progress AS p (replica, lsn) VALUES ($1, $2::text::pg_lsn)
             ON CONFLICT (replica) DO UPDATE SET lsn = EXCLUDED.lsn,
                 skip_lsn = CASE WHEN p.skip_lsn <= EXCLUDED.lsn THEN NULL ELSE p.skip_lsn END,
                 halted_lsn = CASE WHEN p.halted_lsn <= EXCLUDED.lsn THEN NULL ELSE p.halted_lsn END,
                 halt = CASE WHEN p.halted_lsn <= EXCLUDED.lsn THEN NULL ELSE p.halt END",
            &[&self.replica, &last.to_string()],
        )
        .await
        .map_err(|e| ReplicateError::node("record the replica's position", &e))?;
        tx.commit()
            .await
            .map_err(|e| ReplicateError::node("commit a node transaction", &e))?;
        self.position = last;
        for id in std::mem::take(&mut attempt.schemas_logged) {
            if let Some(m) = self.tables.get_mut(&id) {
                m.log_pending = false;
            }
        }
        for (k, n) in &attempt.applied.conflicts {
            *self.counts.entry(*k).or_default() += n;
        }
        Ok(())
    }

    /// Records halt `e` on the node, in a node transaction of its own (the
    /// halted one was rolled back): the transaction's end and the message
    /// in the replica's progress row (`mark`; not for a copy's halt, which
    /// no skip passes), which `evolve replicate skip` checks the LSN it is
    /// given against and `evolve rollout` reports; and `conflict`, when a
    /// conflict caused it, logged and counted: `evolve_conflict_history`
    /// and `SHOW REPLICAS` show each halt. A halt the node has recorded
    /// already (the same transaction, the same message: a retry, or a
    /// restart, that met it again) is logged and counted once. A failure
    /// to record is a warning; the halt is what the caller reports.
    async fn record_halt(
        &mut self,
        client: &mut Client,
        e: &ReplicateError,
        conflict: Option<Box<(Position, i64, Logged)>>,
        mark: bool,
    ) {
        let ReplicateError::Halted { lsn, message, .. } = e else {
            return;
        };
        let recorded = async {
            let tx = client
                .transaction()
                .await
                .map_err(|e| ReplicateError::node("begin a node transaction", &e))?;
            let again = mark
                && tx
                    .query_opt(
                        "SELECT 1 FROM evolve_replica_progress
                         WHERE replica = $1 AND halted_lsn = $2::text::pg_lsn AND halt = $3
                         FOR UPDATE",
                        &[&self.replica, &lsn.to_string(), message],
                    )
                    .await
                    .map_err(|e| ReplicateError::node("read the replica's halt", &e))?
                    .is_some();
            if again {
                return Ok(None);
            }
            let mut logged = None;
            if let Some(conflict) = conflict {
                let (end, time, l) = *conflict;
                logged = Some((l.conflict, l.resolution));
                self.log(&tx, end, time, l).await?;
            }
            if mark {
                tx.execute(
                    "INSERT INTO evolve_replica_progress (replica, lsn, halted_lsn, halt)
                     VALUES ($1, '0/0', $2::text::pg_lsn, $3)
                     ON CONFLICT (replica) DO UPDATE
                         SET halted_lsn = EXCLUDED.halted_lsn, halt = EXCLUDED.halt",
                    &[&self.replica, &lsn.to_string(), message],
                )
                .await
                .map_err(|e| ReplicateError::node("record the replica's halt", &e))?;
            }
            tx.commit()
                .await
                .map_err(|e| ReplicateError::node("commit a node transaction", &e))?;
            Ok::<_, ReplicateError>(logged)
        }
        .await;
        match recorded {
            Ok(Some(key)) => {
                *self.counts.entry(key).or_default() += 1;
                self.halt = Some(key);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(replica = %self.replica, error = %e, "the halt of the replica could not be recorded on the node")
            }
        }
    }

    /// Records the halt `e` of a copy's batch ([`Applier::load`]) once the
    /// copy's node transaction is rolled back: its conflict, if one caused
    /// it, is logged and counted.
    pub(crate) async fn record_load_halt(&mut self, client: &mut Client, e: &ReplicateError) {
        let conflict = self.load_halt.take();
        self.record_halt(client, e, conflict, false).await;
    }

    fn halt(&self, txn: &Transaction, message: String) -> ReplicateError {
        ReplicateError::Halted {
            replica: self.replica.clone(),
            lsn: txn.end,
            message,
        }
    }

    /// The mapping of upstream table `id` in `schema`, built from the
    /// node's catalog when the schema is new.
    async fn mapped(
        &mut self,
        client: &tokio_postgres::Transaction<'_>,
        txn: &Transaction,
        id: u32,
        schema: &Arc<TableSchema>,
    ) -> Result<&mut Mapped> {
        let same_schema = |m: &Mapped| Arc::ptr_eq(&m.schema, schema) || *m.schema == **schema;
        let fresh = self
            .tables
            .get(&id)
            .is_some_and(|m| same_schema(m) && m.read_at.elapsed() < MATCH_AGE);
        if !fresh {
            let previous = self
                .tables
                .get(&id)
                .filter(|m| same_schema(m))
                .map(|m| (m.target.clone(), m.log_pending));
            let transform = self
                .transforms
                .iter()
                .find(|t| t.schema == schema.schema && t.table == schema.name)
                .cloned();
            let transformed: Vec<&str> = transform
                .iter()
                .flat_map(|t| t.sets.iter().map(|(c, _)| c.as_str()))
                .collect();
            let mut converted = Vec::new();
            let target = match node::table(client.client(), &schema.schema, &schema.name).await? {
                None => None,
                Some(node_table) => {
                    let mut relations = Vec::with_capacity(node_table.table.columns.len());
                    for (t, declared) in node_table.table.columns.iter().zip(&node_table.declared) {
                        let relation = match schema.column(&t.name) {
                            Some(i) => {
                                node::relation(client.client(), &schema.columns[i], t, declared)
                                    .await?
                            }
                            None => TypeRelation::Same,
                        };
                        relations.push((t.name.clone(), relation));
                    }
                    let matched = match match_columns(
                        schema,
                        &node_table.table,
                        &self.resolvers,
                        &transformed,
                        |_, t| {
                            relations
                                .iter()
                                .find(|(name, _)| *name == t.name)
                                .map_or(TypeRelation::Same, |(_, r)| r.clone())
                        },
                    ) {
                        Ok(matched) => matched,
                        Err(h) => {
                            // The row that met it logs the conflict.
                            self.match_halt = h.conflict.map(|conflict| Logged {
                                conflict,
                                resolution: self.resolvers.get(conflict),
                                schema: schema.schema.clone(),
                                table: schema.name.clone(),
                                key: None,
                                remote: None,
                                local: None,
                                detail: Some(format!("{HALTED}: {}", h.message)),
                            });
                            return Err(self.halt(txn, h.to_string()));
                        }
                    };
                    for (n, value) in matched.values.iter().enumerate() {
                        if let (
                            ColumnValue::Source(_),
                            Some((column, TypeRelation::Converts { from, to })),
                        ) = (value, relations.get(n))
                        {
                            converted.push(Converted {
                                column: column.clone(),
                                from: from.clone(),
                                to: to.clone(),
                            });
                        }
                    }
                    if let Some(t) = &transform
                        && let Some(&k) = matched
                            .key
                            .iter()
                            .find(|&&k| matched.values[k] == ColumnValue::Transform)
                    {
                        return Err(self.halt(
                            txn,
                            format!(
                                "transform {} sets key column \"{}\" of {}, which rows are found by: drop that SET from the transform",
                                t.name,
                                node_table.table.columns[k].name,
                                node_table.table.reference()
                            ),
                        ));
                    }
                    Some((node_table, matched))
                }
            };
            let transform = match transform {
                Some(t) => {
                    let types = node::type_names(client.client(), schema).await?;
                    Some((t, types))
                }
                None => None,
            };
            // The same match as before logs nothing again, unless what
            // it was to log is not committed yet (read again in the middle
            // of a large transaction, whose node transaction may still be
            // rolled back).
            let log_pending = previous.is_none_or(|(p, pending)| pending || p != target);
            self.tables.insert(
                id,
                Mapped {
                    schema: Arc::clone(schema),
                    target,
                    transform,
                    log_pending,
                    converted: Arc::new(converted),
                    read_at: std::time::Instant::now(),
                },
            );
        }
        Ok(self.tables.get_mut(&id).expect("inserted above"))
    }

    async fn statement(
        &mut self,
        client: &tokio_postgres::Transaction<'_>,
        sql: String,
    ) -> Result<Statement> {
        if let Some(s) = self.statements.get(&sql) {
            return Ok(s.clone());
        }
        let s = match client.prepare(&sql).await {
            Ok(s) => s,
            Err(e) => {
                if let Some(db) = e.as_db_error() {
                    let code = db.code().code().to_string();
                    if CATALOG_CHANGED.contains(&code.as_str()) {
                        self.catalog_changed
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    self.prepare_refused = Some((code, one_line(db)));
                }
                return Err(ReplicateError::node(format!("prepare {sql}"), &e));
            }
        };
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    /// Plans one row change: its statement (none for a row of a table the
    /// node lacks), with the conflicts found while matching it logged and
    /// counted.
    async fn plan_row(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        txn: &Transaction,
        id: u32,
        change: &RowChange,
        attempt: &mut Attempt,
        logged: &mut Vec<Logged>,
    ) -> Result<Option<Step>> {
        let schema = Arc::clone(&change.table);
        let resolvers = self.resolvers.clone();
        let mapped = match self.mapped(tx, txn, id, &schema).await {
            Ok(mapped) => mapped,
            Err(e) => {
                // A match that halts: its conflict, with the row that met
                // it, is logged once the transaction is rolled back.
                if let Some(mut l) = self.match_halt.take() {
                    l.key = Some(json_of(&schema, &key_image(change), true).to_string());
                    l.remote = change
                        .new
                        .as_ref()
                        .map(|n| json_of(&schema, n, false).to_string());
                    logged.push(l);
                }
                return Err(e);
            }
        };
        let transform = mapped.transform.clone();
        let converted = Arc::clone(&mapped.converted);
        let Some((node, matched)) = mapped.target.clone() else {
            let resolver = resolvers.get(ConflictType::TargetTableMissing);
            let halts = resolver == Resolver::Error;
            logged.push(Logged {
                conflict: ConflictType::TargetTableMissing,
                resolution: resolver,
                schema: schema.schema.clone(),
                table: schema.name.clone(),
                key: Some(json_of(&schema, &key_image(change), true).to_string()),
                remote: change
                    .new
                    .as_ref()
                    .map(|n| json_of(&schema, n, false).to_string()),
                local: None,
                detail: halts.then(|| HALTED.into()),
            });
            if halts {
                return Err(self.halt(
                    txn,
                    format!(
                        "the node has no table {}.{} that the upstream sends: create it on the node, or set target_table_missing to skip (target_table_missing)",
                        schema.schema, schema.name
                    ),
                ));
            }
            count(
                &mut attempt.applied,
                ConflictType::TargetTableMissing,
                resolver,
            );
            return Ok(None);
        };
        if mapped.log_pending && attempt.schemas_logged.insert(id) {
            for l in schema_conflicts(&schema, &matched, &resolvers) {
                count(&mut attempt.applied, l.conflict, l.resolution);
                logged.push(l);
            }
        }
        // Values of columns the node lacks: dropped, or halting for
        // ignore_if_null when not NULL.
        if let Some(new) = &change.new {
            for &(i, resolver) in &matched.missing_on_target {
                if let Some(Datum::Text(_)) = new.get(i) {
                    let column = &schema.columns[i].name;
                    if resolver == Resolver::IgnoreIfNull {
                        logged.push(Logged {
                            conflict: ConflictType::TargetColumnMissing,
                            resolution: resolver,
                            schema: schema.schema.clone(),
                            table: schema.name.clone(),
                            key: Some(json_of(&schema, &key_image(change), true).to_string()),
                            remote: Some(json_of(&schema, new, false).to_string()),
                            local: None,
                            detail: Some(HALTED.into()),
                        });
                        return Err(self.halt(
                            txn,
                            format!(
                                "the node's table {} has no column \"{column}\" and the upstream sent a value for it: add the column on the node, or set target_column_missing to ignore (target_column_missing)",
                                node.table.reference()
                            ),
                        ));
                    }
                    count(
                        &mut attempt.applied,
                        ConflictType::TargetColumnMissing,
                        resolver,
                    );
                    logged.push(Logged {
                        conflict: ConflictType::TargetColumnMissing,
                        resolution: resolver,
                        schema: schema.schema.clone(),
                        table: schema.name.clone(),
                        key: Some(json_of(&schema, &key_image(change), true).to_string()),
                        remote: Some(json_of(&schema, new, false).to_string()),
                        local: None,
                        detail: Some(format!("column \"{column}\" dropped")),
                    });
                }
            }
        }
        let table = format!(
            "{}.{}",
            quote_ident(&node.table.schema),
            quote_ident(&node.table.name)
        );
        let target = Target {
            schema: &schema,
            node: &node,
            matched: &matched,
            transform: transform.as_ref(),
            table: &table,
            converted: &converted,
        };
        let step = match change.kind {
            ChangeKind::Truncate => Step {
                statement: self.statement(tx, format!("TRUNCATE {table}")).await?,
                params: Vec::new(),
                table: table.clone(),
                key: None,
                kind: StepKind::Truncate,
                converted: Arc::clone(&converted),
            },
            ChangeKind::Insert => {
                let new = change.new.as_deref().unwrap_or(&[]);
                self.plan_insert(tx, txn, &target, new, None).await?
            }
            ChangeKind::Update => {
                let new = change.new.as_deref().unwrap_or(&[]);
                let old_key = change
                    .old
                    .as_deref()
                    .filter(|old| key_values(&matched, old).is_some());
                // Found by the new image, the node's key must be part of
                // the upstream's identity, which an update that does not
                // change it keeps: a node key column besides it may have
                // changed, and the new value would miss the node's row
                // (and update_missing insert a second one).
                if old_key.is_none()
                    && let Some(column) = unidentified_key(&schema, &node, &matched)
                {
                    return Err(self.halt(txn, unidentified(&table, column, "an update")));
                }
                let key_from = old_key.unwrap_or(new);
                let Some(key) = key_values(&matched, key_from) else {
                    return Err(self.halt(
                        txn,
                        format!("an update of {table} came without its key values"),
                    ));
                };
                let mut params: Vec<Option<String>> = Vec::new();
                let mut sets = Vec::new();
                for (n, value) in matched.values.iter().enumerate() {
                    let column = quote_ident(&node.table.columns[n].name);
                    // A key column the update does not change is not
                    // set: the row is found by it, and a key `GENERATED
                    // ALWAYS AS IDENTITY` can only be updated to DEFAULT.
                    if let Some(k) = matched.key.iter().position(|&k| k == n)
                        && let ColumnValue::Source(i) = value
                        && let Some(Datum::Text(t)) = new.get(*i)
                        && key[k].as_deref() == Some(&t[..])
                    {
                        continue;
                    }
                    match value {
                        ColumnValue::Source(i) => {
                            match new.get(*i) {
                                Some(Datum::Text(t)) => params.push(Some(text(t)?.to_string())),
                                Some(Datum::Null) => params.push(None),
                                _ => continue,
                            }
                            sets.push(format!(
                                "{column} = ${}::text::{}",
                                params.len(),
                                node.type_names[n]
                            ));
                        }
                        ColumnValue::Transform => {
                            if let Some((t, _)) = &transform
                                && let Some(e) = t.expression(&node.table.columns[n].name)
                            {
                                sets.push(format!("{column} = ({e})"));
                            }
                        }
                        ColumnValue::Default => {}
                    }
                }
                let (with_new, from_new, filter) = match &transform {
                    Some((t, types)) => {
                        let cte = new_row(&schema, types, new, change.old.as_deref(), &mut params)
                            .map_err(|c| self.unsent(txn, &table, t, &c))?;
                        (format!("{cte}, "), " FROM \"new\"", t.condition())
                    }
                    None => (String::new(), "", "true".to_string()),
                };
                let cond = key_condition(&node, &matched, &key, &mut params)?;
                // A row the filter rejects after the update leaves the
                // node (as PostgreSQL's row filters turn such an update
                // into a delete): the node keeps no row the filter
                // rejects, and none with its values from before.
                let (passed, gone, removed) = if transform.is_some() {
                    (
                        format!("(SELECT count(*) FROM \"new\" WHERE {filter})"),
                        format!(
                            ", gone AS (DELETE FROM {table} t WHERE {cond} AND NOT EXISTS (SELECT 1 FROM \"new\" WHERE {filter}) RETURNING 1)"
                        ),
                        "(SELECT count(*) FROM gone)",
                    )
                } else {
                    ("1::int8".to_string(), String::new(), "0::int8")
                };
                // Nothing the node has changed: touch nothing but find
                // (and lock) the row; a key generated always as identity,
                // or a generated column, may not even be set to itself.
                let write = if sets.is_empty() {
                    let also = if from_new.is_empty() { "" } else { ", \"new\"" };
                    format!(
                        "SELECT 1 FROM {table} AS t{also} WHERE {cond} AND {filter} FOR UPDATE OF t"
                    )
                } else {
                    format!(
                        "UPDATE {table} AS t SET {}{from_new} WHERE {cond} AND {filter} RETURNING 1",
                        sets.join(", ")
                    )
                };
                let sql = format!(
                    "WITH {with_new}upd AS ({write}){gone}
                     SELECT (SELECT count(*) FROM upd), {passed}, {removed}"
                );
                let resolver = resolvers.get(ConflictType::UpdateMissing);
                let complete = matched.values.iter().all(|v| match v {
                    ColumnValue::Source(i) => {
                        matches!(new.get(*i), Some(Datum::Text(_) | Datum::Null))
                    }
                    _ => true,
                });
                let insert = match resolver {
                    Resolver::InsertOrSkip | Resolver::InsertOrError if complete => Some(Box::new(
                        self.plan_insert(tx, txn, &target, new, change.old.as_deref())
                            .await?,
                    )),
                    _ => None,
                };
                Step {
                    statement: self.statement(tx, sql).await?,
                    params,
                    table: table.clone(),
                    key: Some(json_of(&schema, key_from, true).to_string()),
                    kind: StepKind::Update {
                        resolver,
                        complete,
                        insert,
                        remote: json_of(&schema, new, false).to_string(),
                        names: (schema.schema.clone(), schema.name.clone()),
                    },
                    converted: Arc::clone(&converted),
                }
            }
            ChangeKind::Delete => {
                let old = change.old.as_deref().unwrap_or(&[]);
                let Some(key) = key_values(&matched, old) else {
                    if let Some(column) = unidentified_key(&schema, &node, &matched) {
                        return Err(self.halt(txn, unidentified(&table, column, "a delete")));
                    }
                    return Err(self.halt(
                        txn,
                        format!("a delete of {table} came without its key values"),
                    ));
                };
                let mut params: Vec<Option<String>> = Vec::new();
                // With a filter and the whole old row (REPLICA IDENTITY
                // FULL upstream), a row the filter rejects was never on
                // the node: its delete is filtered, not delete_missing.
                let mut with_old = String::new();
                let mut passed = "1::int8".to_string();
                if let Some((t, types)) = &transform
                    && t.filter.is_some()
                {
                    let mut p = Vec::new();
                    if let Ok(cte) = new_row(&schema, types, old, None, &mut p) {
                        params = p;
                        with_old = format!("{cte}, ");
                        passed = format!("(SELECT count(*) FROM \"new\" WHERE {})", t.condition());
                    }
                }
                let cond = key_condition(&node, &matched, &key, &mut params)?;
                let sql = format!(
                    "WITH {with_old}del AS (DELETE FROM {table} t WHERE {cond} RETURNING 1)
                     SELECT (SELECT count(*) FROM del), {passed}"
                );
                Step {
                    statement: self.statement(tx, sql).await?,
                    params,
                    table: table.clone(),
                    key: Some(json_of(&schema, old, true).to_string()),
                    kind: StepKind::Delete {
                        resolver: resolvers.get(ConflictType::DeleteMissing),
                        names: (schema.schema.clone(), schema.name.clone()),
                    },
                    converted: Arc::clone(&converted),
                }
            }
        };
        Ok(Some(step))
    }

    /// Plans the insert of `new`, resolving `insert_exists`. `old` is the
    /// update's old row for an update turned insert (values an update did
    /// not send are taken from it for the transform's `NEW`).
    async fn plan_insert(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        txn: &Transaction,
        row: &Target<'_>,
        new: &[Datum],
        old: Option<&[Datum]>,
    ) -> Result<Step> {
        let (schema, node, matched, table) = (row.schema, row.node, row.matched, row.table);
        let resolver = self.resolvers.get(ConflictType::InsertExists);
        let mut params: Vec<Option<String>> = Vec::new();
        let mut columns = Vec::new();
        let mut values = Vec::new();
        let mut param_of = HashMap::new();
        for (n, value) in matched.values.iter().enumerate() {
            match value {
                ColumnValue::Source(i) => {
                    match new.get(*i) {
                        Some(Datum::Text(t)) => params.push(Some(text(t)?.to_string())),
                        Some(Datum::Null) => params.push(None),
                        // Not sent: the node's default.
                        _ => continue,
                    }
                    param_of.insert(n, params.len());
                    values.push(format!("${}::text::{}", params.len(), node.type_names[n]));
                }
                ColumnValue::Transform => {
                    let Some(e) = row
                        .transform
                        .and_then(|(t, _)| t.expression(&node.table.columns[n].name))
                    else {
                        continue;
                    };
                    values.push(format!("({e})"));
                }
                ColumnValue::Default => continue,
            }
            columns.push(quote_ident(&node.table.columns[n].name));
        }
        let mut cond = Vec::new();
        let mut key_columns = Vec::new();
        for &k in &matched.key {
            let Some(p) = param_of.get(&k) else {
                return Err(self.halt(
                    txn,
                    format!("an insert into {table} came without its key values"),
                ));
            };
            let name = quote_ident(&node.table.columns[k].name);
            cond.push(format!("t.{name} = ${p}::text::{}", node.type_names[k]));
            key_columns.push(name);
        }
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !key_columns.contains(c))
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        let action = match resolver {
            Resolver::Update | Resolver::UpdateIfNewer if !updates.is_empty() => {
                let mut action = format!("DO UPDATE SET {}", updates.join(", "));
                if resolver == Resolver::UpdateIfNewer && self.commit_timestamps {
                    params.push(Some(txn.commit_time_micros.to_string()));
                    action.push_str(&format!(
                        " WHERE pg_xact_commit_timestamp(t.xmin) IS NULL OR pg_xact_commit_timestamp(t.xmin) < to_timestamp(${}::text::float8 / 1e6)",
                        params.len()
                    ));
                }
                action
            }
            _ => "DO NOTHING".to_string(),
        };
        let cond = cond.join(" AND ");
        let (with_new, source, passed) = match row.transform {
            Some((t, types)) => {
                let cte = new_row(schema, types, new, old, &mut params)
                    .map_err(|c| self.unsent(txn, table, t, &c))?;
                let filter = t.condition();
                (
                    format!("{cte}, "),
                    format!("SELECT {} FROM \"new\" WHERE {filter}", values.join(", ")),
                    format!("(SELECT count(*) FROM \"new\" WHERE {filter})"),
                )
            }
            None => (
                String::new(),
                format!("VALUES ({})", values.join(", ")),
                "1::int8".to_string(),
            ),
        };
        let sql = format!(
            "WITH {with_new}old AS (SELECT to_jsonb(t)::text AS j FROM {table} t WHERE {cond}),
                  ins AS (INSERT INTO {table} AS t ({}) OVERRIDING SYSTEM VALUE {source} ON CONFLICT ({}) {action} RETURNING 1)
             SELECT (SELECT j FROM old), (SELECT count(*) FROM ins), {passed}",
            columns.join(", "),
            key_columns.join(", ")
        );
        Ok(Step {
            statement: self.statement(tx, sql).await?,
            params,
            table: table.to_string(),
            key: Some(json_of(schema, new, true).to_string()),
            kind: StepKind::Insert {
                resolver,
                remote: json_of(schema, new, false).to_string(),
                names: (schema.schema.clone(), schema.name.clone()),
            },
            converted: Arc::clone(row.converted),
        })
    }

    /// What a step's result means: done (counted), a conflict to log, an
    /// update that found no row and is to become its planned insert, or
    /// a halt.
    fn outcome(
        &self,
        txn: &Transaction,
        step: &Step,
        rows: &[tokio_postgres::Row],
        applied: &mut Applied,
        logged: &mut Vec<Logged>,
    ) -> Result<Outcome> {
        let int = |i: usize| rows.first().map_or(0, |r| r.get::<_, i64>(i));
        let table = &step.table;
        let key = step.key.clone().unwrap_or_default();
        match &step.kind {
            StepKind::Truncate => Ok(Outcome::Done),
            StepKind::Insert {
                resolver,
                remote,
                names,
            } => {
                if int(2) == 0 {
                    applied.filtered += 1;
                    return Ok(Outcome::Filtered);
                }
                let local: Option<String> = rows.first().and_then(|r| r.get(0));
                let written = int(1) > 0;
                if local.is_none() {
                    applied.rows += 1;
                    return Ok(Outcome::Done);
                }
                let resolution = match resolver {
                    Resolver::Error => Resolver::Error,
                    _ if written => {
                        applied.rows += 1;
                        Resolver::Update
                    }
                    Resolver::Update => Resolver::Update,
                    _ => Resolver::Skip,
                };
                let halts = resolution == Resolver::Error;
                logged.push(Logged::row(
                    ConflictType::InsertExists,
                    resolution,
                    names,
                    &key,
                    Some(remote.clone()),
                    local,
                    halts,
                ));
                if halts {
                    return Err(self.halt(
                        txn,
                        format!(
                            "a row of {table} with key {key} exists on the node already (insert_exists)"
                        ),
                    ));
                }
                count(applied, ConflictType::InsertExists, resolution);
                Ok(Outcome::Done)
            }
            StepKind::Update {
                resolver,
                complete,
                insert,
                remote,
                names,
            } => {
                if int(0) > 0 {
                    applied.rows += 1;
                    return Ok(Outcome::Done);
                }
                if int(1) == 0 {
                    // The transform's filter dropped the row (and took
                    // the node's off, if it had one).
                    applied.filtered += 1;
                    applied.rows += int(2) as u64;
                    return Ok(Outcome::Filtered);
                }
                if insert.is_some() {
                    return Ok(Outcome::Insert);
                }
                let halts = matches!(resolver, Resolver::InsertOrError | Resolver::Error);
                let resolution = if halts { *resolver } else { Resolver::Skip };
                logged.push(Logged::row(
                    ConflictType::UpdateMissing,
                    resolution,
                    names,
                    &key,
                    Some(remote.clone()),
                    None,
                    halts,
                ));
                if halts {
                    return Err(self.halt(
                        txn,
                        format!(
                            "the row of {table} with key {key} that an update names is not on the node{} (update_missing)",
                            if *complete {
                                ""
                            } else {
                                ", and the update did not send every column"
                            }
                        ),
                    ));
                }
                count(applied, ConflictType::UpdateMissing, resolution);
                Ok(Outcome::Done)
            }
            StepKind::Delete { resolver, names } => {
                if int(0) > 0 {
                    applied.rows += 1;
                    return Ok(Outcome::Done);
                }
                if int(1) == 0 {
                    // The transform's filter rejects the old row: it was
                    // never on the node.
                    applied.filtered += 1;
                    return Ok(Outcome::Filtered);
                }
                let halts = *resolver == Resolver::Error;
                logged.push(Logged::row(
                    ConflictType::DeleteMissing,
                    *resolver,
                    names,
                    &key,
                    None,
                    None,
                    halts,
                ));
                if halts {
                    return Err(self.halt(
                        txn,
                        format!(
                            "the row of {table} with key {key} that a delete names is not on the node (delete_missing)"
                        ),
                    ));
                }
                count(applied, ConflictType::DeleteMissing, *resolver);
                Ok(Outcome::Done)
            }
        }
    }

    /// Runs `step` and what its outcome asks for (an update turned
    /// insert), one round trip at a time.
    async fn run_step(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        txn: &Transaction,
        step: &Step,
        applied: &mut Applied,
        logged: &mut Vec<Logged>,
    ) -> Result<()> {
        let rows = match tx.query(&step.statement, &refs(&step.params)).await {
            Ok(rows) => rows,
            Err(e) => return Err(self.node_refused(txn, step, &e, logged)),
        };
        if self.outcome(txn, step, &rows, applied, logged)? == Outcome::Insert
            && let StepKind::Update {
                insert: Some(insert),
                resolver,
                remote,
                names,
                ..
            } = &step.kind
        {
            let rows = match tx.query(&insert.statement, &refs(&insert.params)).await {
                Ok(rows) => rows,
                Err(e) => return Err(self.node_refused(txn, insert, &e, logged)),
            };
            if self.outcome(txn, insert, &rows, applied, logged)? != Outcome::Filtered {
                count(applied, ConflictType::UpdateMissing, *resolver);
                logged.push(Logged {
                    conflict: ConflictType::UpdateMissing,
                    resolution: *resolver,
                    schema: names.0.clone(),
                    table: names.1.clone(),
                    key: step.key.clone(),
                    remote: Some(remote.clone()),
                    local: None,
                    detail: None,
                });
            }
        }
        Ok(())
    }

    /// A row whose transform needs a value the upstream did not send.
    fn unsent(
        &self,
        txn: &Transaction,
        table: &str,
        t: &Transform,
        why: &NewRow,
    ) -> ReplicateError {
        let message = match why {
            NewRow::Unsent(column) => format!(
                "transform {} of {table} reads NEW, and an update left column \"{column}\" unsent (an unchanged TOASTed value): set REPLICA IDENTITY FULL on the upstream table so updates carry whole rows",
                t.name
            ),
            NewRow::NotUtf8 => format!(
                "a value the upstream sent for {table} is not UTF-8 (an upstream database in SQL_ASCII stores bytes unconverted): correct the value upstream"
            ),
        };
        self.halt(txn, message)
    }

    /// The node refused `step`'s row: the replica halts with the
    /// server's error. A unique constraint other than the key is
    /// `multiple_unique_conflicts`, and a value the node does not take
    /// (a data exception, SQLSTATE class 22) in a table with converted
    /// columns is their `target_column_type_mismatch`: that conflict is
    /// pushed to `logged`, to be logged as the halt's.
    fn node_refused(
        &self,
        txn: &Transaction,
        step: &Step,
        e: &tokio_postgres::Error,
        logged: &mut Vec<Logged>,
    ) -> ReplicateError {
        let table = &step.table;
        let Some(db) = e.as_db_error() else {
            return ReplicateError::node(format!("apply to {table}"), e);
        };
        if CATALOG_CHANGED.contains(&db.code().code()) {
            self.catalog_changed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let error = evolve_pg::describe_db_error(db, None).replace('\n', " ");
        let conflict = if db.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION {
            Some((
                ConflictType::MultipleUniqueConflicts,
                Resolver::Error,
                String::new(),
            ))
        } else if db.code().code().starts_with("22") && !step.converted.is_empty() {
            // The converted column whose type the error names, or all.
            let named: Vec<&Converted> = step
                .converted
                .iter()
                .filter(|c| db.message().contains(&c.to))
                .collect();
            let columns: Vec<String> = if named.is_empty() {
                step.converted.iter().collect::<Vec<_>>()
            } else {
                named
            }
            .iter()
            .map(|c| {
                format!(
                    "column \"{}\" converted from {} to {}",
                    c.column, c.from, c.to
                )
            })
            .collect();
            Some((
                ConflictType::TargetColumnTypeMismatch,
                self.resolvers.get(ConflictType::TargetColumnTypeMismatch),
                format!(": {}", columns.join(", ")),
            ))
        } else {
            None
        };
        let remote = match &step.kind {
            StepKind::Insert { remote, .. } | StepKind::Update { remote, .. } => {
                Some(remote.clone())
            }
            _ => None,
        };
        let names = match &step.kind {
            StepKind::Insert { names, .. }
            | StepKind::Update { names, .. }
            | StepKind::Delete { names, .. } => Some(names),
            StepKind::Truncate => None,
        };
        let what = match (&conflict, names) {
            (Some((c, resolution, columns)), Some(names)) => {
                logged.push(Logged {
                    conflict: *c,
                    resolution: *resolution,
                    schema: names.0.clone(),
                    table: names.1.clone(),
                    key: step.key.clone(),
                    remote,
                    local: None,
                    detail: Some(format!("{HALTED}: {error}")),
                });
                format!(" ({c}{columns})")
            }
            _ => String::new(),
        };
        let key = step
            .key
            .as_deref()
            .map_or(String::new(), |k| format!(" with key {k}"));
        self.halt(
            txn,
            format!("the node refused a row of {table}{key}: {error}{what}"),
        )
    }

    async fn log(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        end: Position,
        commit_time_micros: i64,
        l: Logged,
    ) -> Result<i64> {
        let time = commit_time_micros.to_string();
        let lsn = end.to_string();
        let row = tx.query_one(
            "INSERT INTO evolve_conflict_history
                 (replica, conflict_type, resolution, schema_name, table_name, key, remote_tuple,
                  local_tuple, remote_lsn, remote_commit_time, detail)
             VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb, $8::text::jsonb, $9::text::pg_lsn,
                     to_timestamp($10::text::float8 / 1e6), $11)
             RETURNING id",
            &[
                &self.replica,
                &l.conflict.name(),
                &l.resolution.name(),
                &l.schema,
                &l.table,
                &l.key,
                &l.remote,
                &l.local,
                &lsn,
                &time,
                &l.detail,
            ],
        )
        .await
        .map_err(|e| ReplicateError::node("write evolve_conflict_history", &e))?;
        Ok(row.get(0))
    }
}

/// The conflicts of a table's match that are logged once per match
/// (`target_column_missing` is logged per row instead).
fn schema_conflicts(
    schema: &TableSchema,
    matched: &ColumnMatch,
    resolvers: &Resolvers,
) -> Vec<Logged> {
    matched
        .conflicts
        .iter()
        .filter(|(c, _)| *c != ConflictType::TargetColumnMissing)
        .map(|(conflict, detail)| Logged {
            conflict: *conflict,
            resolution: match conflict {
                ConflictType::TargetColumnTypeMismatch => Resolver::Transform,
                c => resolvers.get(*c),
            },
            schema: schema.schema.clone(),
            table: schema.name.clone(),
            key: None,
            remote: None,
            local: None,
            detail: Some(detail.clone()),
        })
        .collect()
}

/// A node's error on one line: its words, detail and hint.
fn one_line(db: &tokio_postgres::error::DbError) -> String {
    evolve_pg::describe_db_error(db, None)
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn count(applied: &mut Applied, conflict: ConflictType, resolution: Resolver) {
    *applied.conflicts.entry((conflict, resolution)).or_default() += 1;
}

/// The context of [`text`]'s error, which a row's apply turns into a
/// halt at its transaction.
const NOT_UTF8: &str = "read an upstream value";

fn text(t: &[u8]) -> Result<&str> {
    std::str::from_utf8(t).map_err(|_| ReplicateError::Node {
        context: NOT_UTF8.into(),
        message: "the value is not UTF-8".into(),
    })
}

fn refs(params: &[Option<String>]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// The image an update or delete names its row by: the old one when it
/// carries the key.
fn key_image(change: &RowChange) -> Vec<Datum> {
    change
        .old
        .clone()
        .or_else(|| change.new.clone())
        .unwrap_or_default()
}

/// A node key column that is not part of the upstream's replica identity
/// (the upstream sends its old value only under REPLICA IDENTITY FULL).
pub(crate) fn unidentified_key<'a>(
    schema: &TableSchema,
    node: &'a NodeTable,
    matched: &ColumnMatch,
) -> Option<&'a str> {
    matched.key.iter().find_map(|&k| match matched.values[k] {
        ColumnValue::Source(i) if !schema.columns.get(i).is_some_and(|c| c.key) => {
            Some(node.table.columns[k].name.as_str())
        }
        _ => None,
    })
}

/// The halt of `what` (an update, a delete) of a table whose node key
/// has `column` besides the upstream's identity.
fn unidentified(table: &str, column: &str, what: &str) -> String {
    format!(
        "{what} of {table} cannot name the node's row: the node's key column \"{column}\" is not part of the upstream's replica identity, so the upstream does not send its old value: key the node's table as the upstream's, or set REPLICA IDENTITY FULL on the upstream table"
    )
}

/// The node key's values from `image`, `None` when one is not in it.
fn key_values(matched: &ColumnMatch, image: &[Datum]) -> Option<Vec<Option<Vec<u8>>>> {
    matched
        .key
        .iter()
        .map(|&k| match matched.values[k] {
            ColumnValue::Source(i) => match image.get(i) {
                Some(Datum::Text(t)) => Some(Some(t.to_vec())),
                Some(Datum::Null) => Some(None),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `t.k = $n::text::type AND ...` for the key values, their parameters
/// appended to `params`.
fn key_condition(
    node: &NodeTable,
    matched: &ColumnMatch,
    key: &[Option<Vec<u8>>],
    params: &mut Vec<Option<String>>,
) -> Result<String> {
    let mut cond = Vec::new();
    for (&k, value) in matched.key.iter().zip(key) {
        params.push(match value {
            Some(v) => Some(text(v)?.to_string()),
            None => None,
        });
        cond.push(format!(
            "t.{} = ${}::text::{}",
            quote_ident(&node.table.columns[k].name),
            params.len(),
            node.type_names[k]
        ));
    }
    Ok(cond.join(" AND "))
}

/// A row image as JSON (column names to their text form, NULL as null;
/// values not sent left out); with `key_only` only the key columns.
fn json_of(schema: &TableSchema, image: &[Datum], key_only: bool) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    for (c, d) in schema.columns.iter().zip(image) {
        if key_only && !c.key {
            continue;
        }
        match d {
            Datum::Text(t) => {
                object.insert(
                    c.name.clone(),
                    serde_json::Value::String(String::from_utf8_lossy(t).into_owned()),
                );
            }
            Datum::Null => {
                object.insert(c.name.clone(), serde_json::Value::Null);
            }
            _ => {}
        }
    }
    serde_json::Value::Object(object)
}

/// Why [`new_row`] cannot give `NEW`.
enum NewRow {
    /// The update did not send this column (an unchanged TOASTed value).
    Unsent(String),
    /// A value is not UTF-8.
    NotUtf8,
}

/// `"new" AS (SELECT $n::text::type AS "column", ...)`: the upstream's
/// row as a transform reads it (`NEW`), every column typed as the upstream
/// sent it; a value the update did not send comes from `old` when it has
/// it, otherwise the error is that column's name.
fn new_row(
    schema: &TableSchema,
    types: &[String],
    new: &[Datum],
    old: Option<&[Datum]>,
    params: &mut Vec<Option<String>>,
) -> std::result::Result<String, NewRow> {
    let mut columns = Vec::with_capacity(schema.columns.len());
    for (i, c) in schema.columns.iter().enumerate() {
        let value = match new.get(i) {
            Some(Datum::Unchanged) | Some(Datum::Missing) | None => old.and_then(|o| o.get(i)),
            v => v,
        };
        params.push(match value {
            // A value that is not UTF-8 is not changed to fit (the
            // caller's check of the row's values halts on it).
            Some(Datum::Text(t)) => match std::str::from_utf8(t) {
                Ok(t) => Some(t.to_string()),
                Err(_) => return Err(NewRow::NotUtf8),
            },
            Some(Datum::Null) => None,
            _ => return Err(NewRow::Unsent(c.name.clone())),
        });
        columns.push(format!(
            "${}::text::{} AS {}",
            params.len(),
            types.get(i).map_or("text", String::as_str),
            quote_ident(&c.name)
        ));
    }
    Ok(format!("\"new\" AS (SELECT {})", columns.join(", ")))
}
