//! A source's task: apply the replication stream to the state, one
//! upstream transaction per SQLite transaction, and confirm positions to
//! the slot once every sink has committed them. Tables whose snapshot is
//! being copied (by their [`crate::hydrate`] task) get their changes kept
//! as pending until the copy is in; then they are applied here
//! ([`replay_pending`]) and the table runs like the others.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::change::{ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};
use evolve_pgoutput::{LogicalDecoder, LogicalMessage, OldTuple, TupleData, Value};
use pgwire_replication::{ReplicationClient, ReplicationEvent};
use rusqlite::params;
use tokio::sync::watch;

use crate::apply::{TableRuntime, Txn};
use crate::bus::{Bus, Committed};
use crate::config::Connection;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::position::Position;
use crate::status::StatusBoard;
use crate::store::{SourceInfo, Store, TableState};
use crate::supervise::{Task, Verdict, supervise};
use crate::swap::{MESSAGE_PREFIX, parse_apply_message};
use crate::upstream;

/// What a source task needs.
pub(crate) struct SourceContext {
    pub source: SourceInfo,
    pub connection: Connection,
    pub state_dir: PathBuf,
    /// The applied position, for the sinks.
    pub applied: watch::Sender<Position>,
    /// The sinks of this source's interfaces: interface id and the sink's
    /// committed ("effective") position.
    pub sinks: Vec<(i64, watch::Receiver<Position>)>,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
    /// Where committed transactions are published.
    pub bus: Bus,
    /// How long feed entries are kept after every sink has them.
    pub retain_history: Duration,
}

/// Runs the source until `stop`, retrying after transient failures.
pub(crate) async fn run(mut ctx: SourceContext) {
    let (name, status, stop) = (
        ctx.source.name.clone(),
        ctx.status.clone(),
        ctx.stop.clone(),
    );
    let task = Task {
        kind: ObjectKind::Source,
        name: &name,
        status: &status,
        stop,
        starting: Some("starting"),
    };
    supervise(task, &mut ctx, |ctx| Box::pin(run_once(ctx)), |_, e| {
        if e.is_permanent() {
            // Retrying would fail the same way while the slot keeps WAL
            // upstream: stop, and say so.
            Verdict::Stop {
                shown: format!(
                    "{e}\nnot retried: fix the cause, then restart the pipeline (its slot keeps WAL upstream meanwhile)"
                ),
            }
        } else {
            Verdict::Retry
        }
    })
    .await
}

async fn run_once(ctx: &mut SourceContext) -> Result<()> {
    let name = ctx.source.name.clone();
    let mut store = Store::open(&ctx.state_dir)?;
    let client = upstream::connect(&ctx.source.connection, &ctx.connection).await?;
    let slot = upstream::slot_status(&client, &ctx.source.slot).await?;
    let slot = match slot {
        Some(s) if s.wal_status.as_deref() != Some("lost") => s,
        Some(_) => {
            return Err(PipelineError::SlotLost {
                source_name: name,
                slot: ctx.source.slot.clone(),
                detail: "Its wal_status is \"lost\": the WAL it needed was removed.".into(),
            });
        }
        None => {
            return Err(PipelineError::SlotLost {
                source_name: name,
                slot: ctx.source.slot.clone(),
                detail: "The slot does not exist upstream.".into(),
            });
        }
    };

    let interfaces = store.interfaces()?;
    let mut tables = Vec::new();
    for info in store.tables_of(&name)? {
        let ids = interfaces
            .iter()
            .filter(|i| i.table == info.name)
            .map(|i| i.id)
            .collect();
        tables.push(TableRuntime::new(info, ids)?);
    }
    for table in &tables {
        let state = match table.info.state {
            TableState::Running => "running",
            TableState::Stalled => "stalled",
            TableState::Copied => "catching up",
            TableState::Pending | TableState::Snapshotting => "snapshotting",
        };
        if table.info.state.is_hydrated() {
            ctx.status.set(
                ObjectKind::Table,
                &table.info.name,
                state,
                table.info.error.clone(),
            );
        }
    }
    drop(client);
    stream(ctx, &mut store, tables, slot.confirmed_flush.into()).await
}

/// PostgreSQL's commit timestamps count from 2000-01-01.
fn unix_micros(pg_micros: i64) -> i64 {
    pg_micros.saturating_add(evolve_pgoutput::POSTGRES_EPOCH_UNIX_MICROS)
}

fn to_wire(pos: Position) -> pgwire_replication::Lsn {
    pgwire_replication::Lsn::from_u64(pos.lsn().0)
}

fn from_wire(lsn: pgwire_replication::Lsn) -> Position {
    Position::from_lsn(evolve_pgoutput::Lsn(lsn.as_u64()))
}

/// Applies the stream until `stop`.
async fn stream(
    ctx: &mut SourceContext,
    store: &mut Store,
    mut tables: Vec<TableRuntime>,
    confirmed: Position,
) -> Result<()> {
    let name = ctx.source.name.clone();
    let mut by_oid: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, t) in tables.iter().enumerate() {
        by_oid.entry(t.info.upstream_oid).or_default().push(i);
    }
    let mut interfaces: Vec<i64> = tables
        .iter()
        .flat_map(|t| t.interfaces.iter().copied())
        .collect();
    interfaces.sort_unstable();
    interfaces.dedup();

    let config = upstream::replication_config(
        &ctx.source.connection,
        &ctx.connection,
        &ctx.source.slot,
        &ctx.source.publication,
    )?
    .with_start_lsn(to_wire(confirmed));
    let mut repl = ReplicationClient::connect(config)
        .await
        .map_err(|e| upstream::replication_connect_error(&name, &ctx.connection, &e))?;

    // `applied`: the last upstream transaction taken into the store,
    // committed or in the open group; `stored`: the last one committed
    // (what sinks, subscribers and the slot may see).
    let mut applied = store.applied_lsn(&name)?;
    let mut stored = applied;
    let mut group: Option<Group> = None;
    ctx.applied.send_replace(applied);
    let mut acked = confirmed;
    let mut idle = Position::ZERO;
    let mut txn: Option<Txn> = None;
    let mut skip = false;
    let mut commit_time: i64 = 0;
    let mut txn_rows: u64 = 0;
    let mut decoder = LogicalDecoder::new();
    let mut deferral = Deferral::default();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    ctx.status.set(ObjectKind::Source, &name, "running", None);
    loop {
        tokio::select! {
            // In this order: the tick is never starved by a busy stream,
            // and the group is committed when the stream has nothing
            // ready.
            biased;
            _ = ctx.stop.changed() => {
                // Commit the open group (complete upstream transactions
                // only), confirm what the sinks have committed before
                // leaving, and give the replication worker a moment to send
                // it.
                flush(ctx, store, &name, &mut group, applied, &mut stored)?;
                let target = ack_target(ctx, stored, txn.is_none(), idle).max(acked);
                if target > confirmed {
                    repl.update_applied_lsn(to_wire(target));
                    let metrics = repl.metrics();
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
                    while from_wire(metrics.last_applied_lsn()) < target
                        && tokio::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                if applied > stored {
                    store.conn.execute(
                        "UPDATE sources SET applied_lsn = ?2 WHERE name = ?1 AND applied_lsn < ?2",
                        params![name, applied.to_sql()],
                    ).map_err(|e| PipelineError::store("record applied position", e))?;
                }
                let _ = repl.shutdown().await;
                return Ok(());
            }
            _ = tick.tick() => {
                flush(ctx, store, &name, &mut group, applied, &mut stored)?;
                if txn.is_none() {
                    for t in 0..tables.len() {
                        if tables[t].info.state.is_hydrated() {
                            continue;
                        }
                        if let Some(fresh) = store.table(&tables[t].info.name)?
                            && fresh.state == TableState::Copied
                            && let Some(point) = fresh.snapshot_lsn
                        {
                            replay_pending(ctx, store, &mut tables, t, point, &deferral)?;
                        }
                    }
                }
                if applied > stored {
                    store.conn.execute(
                        "UPDATE sources SET applied_lsn = ?2 WHERE name = ?1 AND applied_lsn < ?2",
                        params![name, applied.to_sql()],
                    ).map_err(|e| PipelineError::store("record applied position", e))?;
                    stored = applied;
                }
                let target = ack_target(ctx, stored, txn.is_none(), idle);
                if target > acked {
                    repl.update_applied_lsn(to_wire(target));
                    acked = target;
                }
                let now_micros = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64);
                let committed_before =
                    now_micros.saturating_sub(ctx.retain_history.as_micros() as i64);
                for &interface in &interfaces {
                    let mut horizon = stored;
                    for (i, rx) in &ctx.sinks {
                        if *i == interface {
                            horizon = horizon.min(*rx.borrow());
                        }
                    }
                    let hydrated = tables.iter().any(|t| {
                        t.interfaces.contains(&interface)
                            && matches!(t.info.state, TableState::Running | TableState::Stalled)
                    });
                    store.prune_feed_retained(
                        interface,
                        horizon,
                        committed_before,
                        hydrated.then_some(stored),
                    )?;
                }
            }
            event = repl.recv() => {
                let event = match event {
                    Ok(Some(event)) => event,
                    Ok(None) => return Err(PipelineError::Replication {
                        source_name: name,
                        message: "the server ended the stream".into(),
                    }),
                    Err(e) => return Err(upstream::replication_connect_error(&name, &ctx.connection, &e)),
                };
                match event {
                    ReplicationEvent::Begin { final_lsn, commit_time_micros, .. } => {
                        let final_lsn = from_wire(final_lsn);
                        skip = final_lsn < applied;
                        let mut t = Txn::new(final_lsn);
                        if ctx.bus.wants_rows() {
                            t.rows = Some(Vec::new());
                        }
                        txn = Some(t);
                        commit_time = unix_micros(commit_time_micros);
                        txn_rows = 0;
                    }
                    ReplicationEvent::XLogData { data, .. } => {
                        let message = decoder.decode(&data).map_err(|e| PipelineError::Replication {
                            source_name: name.clone(),
                            message: e.to_string(),
                        })?;
                        if matches!(
                            message,
                            LogicalMessage::Insert(_) | LogicalMessage::Update(_) | LogicalMessage::Delete(_)
                        ) {
                            txn_rows += 1;
                        }
                        // A long transaction does not keep the store
                        // locked: the group before it is committed, and its
                        // reads run outside a transaction until its commit.
                        if group.as_ref().is_some_and(|g| g.began.elapsed() >= GROUP_AGE) {
                            flush(ctx, store, &name, &mut group, applied, &mut stored)?;
                        }
                        on_message(
                            ctx,
                            store,
                            &mut tables,
                            &by_oid,
                            &mut deferral,
                            txn.as_mut().filter(|_| !skip),
                            &data,
                            message,
                        )?;
                    }
                    ReplicationEvent::Message { prefix, content, .. } if prefix == MESSAGE_PREFIX => {
                        if let Some(t) = txn.as_mut().filter(|_| !skip)
                            && let Some(replacement) = parse_apply_message(&ctx.source.slot, &content)
                        {
                            t.swap(replacement.to_string());
                        }
                    }
                    ReplicationEvent::Commit { end_lsn, .. } => {
                        let end_lsn = from_wire(end_lsn);
                        if let Some(mut t) = txn.take()
                            && !skip
                            && end_lsn > applied
                        {
                            let rows = t.rows.take();
                            let changes = if t.is_empty() && rows.as_ref().is_none_or(Vec::is_empty) {
                                Vec::new()
                            } else {
                                if group.is_none() {
                                    group = Some(Group::begin(store)?);
                                }
                                t.write(store, &mut tables, end_lsn, commit_time, true)?
                            };
                            applied = end_lsn;
                            let full = match group.as_mut() {
                                Some(g) => g.add(txn_rows, Committed {
                                    source: name.clone(),
                                    pos: end_lsn,
                                    commit_time_micros: commit_time,
                                    changes,
                                    rows,
                                }),
                                None => {
                                    // Nothing to write and no group open:
                                    // the position only (stored at the next
                                    // tick; nothing is lost without it).
                                    ctx.applied.send_replace(applied);
                                    ctx.status.count(ObjectKind::Source, &name, txn_rows, Some(commit_time));
                                    false
                                }
                            };
                            if full {
                                flush(ctx, store, &name, &mut group, applied, &mut stored)?;
                            }
                        }
                    }
                    ReplicationEvent::KeepAlive { wal_end, .. } if txn.is_none() => {
                        idle = idle.max(from_wire(wal_end));
                    }
                    _ => {}
                }
            }
            _ = std::future::ready(()), if group.is_some() => {
                flush(ctx, store, &name, &mut group, applied, &mut stored)?;
            }
        }
    }
}

/// At most this many upstream transactions share one store commit.
const GROUP_TRANSACTIONS: usize = 1_000;
/// A group is committed once it holds this many row changes.
const GROUP_ROWS: u64 = 20_000;
/// ... or once it has been open this long.
const GROUP_AGE: Duration = Duration::from_millis(50);

/// Group commit: consecutive upstream transactions written in one store
/// transaction (`BEGIN IMMEDIATE` ... `COMMIT`), with the applied position
/// of the last one in the same commit. The group is committed as soon as
/// the stream has nothing more ready, and at the latest after
/// [`GROUP_TRANSACTIONS`], [`GROUP_ROWS`] or [`GROUP_AGE`] (so the store's
/// write lock is never held longer, and never while waiting for the
/// network); only then are its transactions published on the bus and shown
/// to sinks and the slot. A crash loses the open group only: the slot was
/// not confirmed past it, so the stream sends it again, and positions
/// already stored are skipped. The group opens at the first transaction
/// that writes; the reads of current documents of the transactions after
/// it run inside the open transaction.
struct Group {
    began: std::time::Instant,
    rows: u64,
    /// The group's transactions, in commit order, with their row counts.
    committed: Vec<(u64, Committed)>,
}

impl Group {
    fn begin(store: &Store) -> Result<Group> {
        store
            .conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| PipelineError::store("begin a store transaction", e))?;
        Ok(Group {
            began: std::time::Instant::now(),
            rows: 0,
            committed: Vec::new(),
        })
    }

    /// Adds a written transaction; true when the group should be committed
    /// now.
    fn add(&mut self, rows: u64, committed: Committed) -> bool {
        self.rows += rows;
        self.committed.push((rows, committed));
        self.committed.len() >= GROUP_TRANSACTIONS
            || self.rows >= GROUP_ROWS
            || self.began.elapsed() >= GROUP_AGE
    }
}

/// Commits the open group, if any, with `applied` as the source's
/// position; then publishes its transactions and the new position.
fn flush(
    ctx: &SourceContext,
    store: &Store,
    name: &str,
    group: &mut Option<Group>,
    applied: Position,
    stored: &mut Position,
) -> Result<()> {
    let Some(g) = group.take() else {
        return Ok(());
    };
    let fail = |e: rusqlite::Error| PipelineError::store("commit upstream transactions", e);
    if applied > *stored {
        store
            .conn
            .execute(
                "UPDATE sources SET applied_lsn = ?2 WHERE name = ?1 AND applied_lsn < ?2",
                params![name, applied.to_sql()],
            )
            .map_err(fail)?;
    }
    store.conn.execute_batch("COMMIT").map_err(fail)?;
    *stored = applied.max(*stored);
    ctx.applied.send_replace(*stored);
    for (rows, committed) in g.committed {
        ctx.status.count(
            ObjectKind::Source,
            name,
            rows,
            Some(committed.commit_time_micros),
        );
        ctx.bus.publish(committed);
    }
    Ok(())
}

/// The position to confirm to the slot (see [`confirmable`]).
fn ack_target(
    ctx: &SourceContext,
    applied: Position,
    between_transactions: bool,
    idle: Position,
) -> Position {
    confirmable(
        applied,
        ctx.sinks.iter().map(|(_, rx)| *rx.borrow()),
        between_transactions,
        idle,
    )
}

/// The confirmed-position rule: the applied position, or less if a sink
/// has committed less (a sink with nothing pending reports the applied
/// position); the keepalive's WAL position `idle` when every sink is caught
/// up and no transaction is open, so an idle pipeline holds no WAL.
fn confirmable(
    applied: Position,
    sinks: impl IntoIterator<Item = Position>,
    between_transactions: bool,
    idle: Position,
) -> Position {
    let target = sinks.into_iter().fold(applied, Position::min);
    if target == applied && between_transactions && idle > target {
        idle
    } else {
        target
    }
}

/// What the stream keeps for tables whose snapshot is not in yet: the
/// latest Relation message of each upstream table (raw), and which tables
/// already have it among their pending messages in this session.
#[derive(Default)]
struct Deferral {
    relations: HashMap<u32, Vec<u8>>,
    relation_kept: HashSet<usize>,
    /// Each upstream table's schema as of its last Relation message, for
    /// typed rows.
    schemas: HashMap<u32, Arc<TableSchema>>,
}

impl Deferral {
    fn keep(&mut self, txn: &mut Txn, t: usize, oid: u32, data: &[u8]) {
        if !self.relation_kept.contains(&t)
            && let Some(relation) = self.relations.get(&oid)
        {
            txn.defer(t, relation);
            self.relation_kept.insert(t);
        }
        txn.defer(t, data);
    }
}

fn stall(
    ctx: &SourceContext,
    store: &Store,
    table: &mut TableRuntime,
    problem: String,
) -> Result<()> {
    tracing::warn!(table = %table.info.name, %problem, "table stalled");
    store.set_table_state(
        table.info.id,
        TableState::Stalled,
        Some(&problem),
        table.info.snapshot_lsn,
    )?;
    table.info.state = TableState::Stalled;
    table.info.error = Some(problem.clone());
    ctx.status.set(
        ObjectKind::Table,
        &table.info.name,
        "stalled",
        Some(problem),
    );
    Ok(())
}

/// The outcome of applying one row change to table `t`: a row that cannot
/// be made a document (a value the encoder refuses) stalls that table with
/// the error, without any of this transaction's changes, as a schema
/// mismatch does; the source and its other tables go on. Other failures
/// (the store) fail the source, which retries.
fn stall_on_row_error(
    ctx: &SourceContext,
    store: &Store,
    tables: &mut [TableRuntime],
    txn: &mut Txn,
    t: usize,
    applied: Result<()>,
) -> Result<()> {
    match applied {
        Err(e @ PipelineError::Document { .. }) => {
            txn.forget(t);
            stall(ctx, store, &mut tables[t], e.primary())
        }
        other => other,
    }
}

#[allow(clippy::too_many_arguments)]
fn on_message(
    ctx: &SourceContext,
    store: &Store,
    tables: &mut [TableRuntime],
    by_oid: &HashMap<u32, Vec<usize>>,
    deferral: &mut Deferral,
    txn: Option<&mut Txn>,
    data: &[u8],
    message: LogicalMessage<'_>,
) -> Result<()> {
    let none: &[usize] = &[];
    match message {
        LogicalMessage::Relation(relation) => {
            deferral.relations.insert(relation.oid, data.to_vec());
            deferral
                .schemas
                .insert(relation.oid, Arc::new(table_schema(&relation)));
            for &t in by_oid.get(&relation.oid).map_or(none, Vec::as_slice) {
                deferral.relation_kept.remove(&t);
                if let Err(problem) = tables[t].on_relation(&relation)
                    && tables[t].info.state == TableState::Running
                {
                    stall(ctx, store, &mut tables[t], problem)?;
                }
            }
        }
        LogicalMessage::Insert(m) => {
            if let Some(txn) = txn {
                typed_row(
                    txn,
                    deferral,
                    by_oid,
                    m.oid,
                    ChangeKind::Insert,
                    None,
                    Some(&m.new),
                );
                for &t in by_oid.get(&m.oid).map_or(none, Vec::as_slice) {
                    if tables[t].applies(txn.final_lsn) {
                        let applied = txn.insert(store, tables, t, &m.new);
                        stall_on_row_error(ctx, store, tables, txn, t, applied)?;
                    } else if !tables[t].info.state.is_hydrated() {
                        deferral.keep(txn, t, m.oid, data);
                    }
                }
            }
        }
        LogicalMessage::Update(m) => {
            if let Some(txn) = txn {
                typed_row(
                    txn,
                    deferral,
                    by_oid,
                    m.oid,
                    ChangeKind::Update,
                    m.old.as_ref(),
                    Some(&m.new),
                );
                for &t in by_oid.get(&m.oid).map_or(none, Vec::as_slice) {
                    if tables[t].applies(txn.final_lsn) {
                        let applied = txn.update(store, tables, t, m.old.as_ref(), &m.new);
                        stall_on_row_error(ctx, store, tables, txn, t, applied)?;
                    } else if !tables[t].info.state.is_hydrated() {
                        deferral.keep(txn, t, m.oid, data);
                    }
                }
            }
        }
        LogicalMessage::Delete(m) => {
            if let Some(txn) = txn {
                typed_row(
                    txn,
                    deferral,
                    by_oid,
                    m.oid,
                    ChangeKind::Delete,
                    Some(&m.old),
                    None,
                );
                for &t in by_oid.get(&m.oid).map_or(none, Vec::as_slice) {
                    if tables[t].applies(txn.final_lsn) {
                        let applied = txn.delete(store, tables, t, &m.old);
                        stall_on_row_error(ctx, store, tables, txn, t, applied)?;
                    } else if !tables[t].info.state.is_hydrated() {
                        deferral.keep(txn, t, m.oid, data);
                    }
                }
            }
        }
        LogicalMessage::Truncate(m) => {
            if let Some(txn) = txn {
                for oid in &m.relation_oids {
                    typed_row(
                        txn,
                        deferral,
                        by_oid,
                        *oid,
                        ChangeKind::Truncate,
                        None,
                        None,
                    );
                    for &t in by_oid.get(oid).map_or(none, Vec::as_slice) {
                        if tables[t].applies(txn.final_lsn) {
                            txn.truncate(store, tables, t)?;
                        } else if !tables[t].info.state.is_hydrated() {
                            deferral.keep(txn, t, *oid, data);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// An upstream table's schema from its Relation message.
fn table_schema(relation: &evolve_pgoutput::Relation<'_>) -> TableSchema {
    TableSchema {
        schema: if relation.namespace.is_empty() {
            "pg_catalog".to_string()
        } else {
            relation.namespace.to_string()
        },
        name: relation.name.to_string(),
        columns: relation
            .columns
            .iter()
            .map(|c| ColumnSchema {
                name: c.name.to_string(),
                type_oid: c.type_oid,
                typmod: c.type_modifier,
                key: c.is_key(),
            })
            .collect(),
    }
}

/// A row image's values: text as sent, a key-only old row's other columns
/// [`Datum::Missing`].
fn datums(schema: &TableSchema, tuple: &TupleData<'_>, key_only: bool) -> Vec<Datum> {
    tuple
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            _ if key_only && !schema.columns.get(i).is_some_and(|c| c.key) => Datum::Missing,
            Value::Null => Datum::Null,
            Value::UnchangedToast => Datum::Unchanged,
            Value::Text(b) | Value::Binary(b) => Datum::Text(b.to_vec()),
        })
        .collect()
}

/// Adds a typed row change to `txn` when it collects them and the table is
/// one of the source's.
fn typed_row(
    txn: &mut Txn,
    deferral: &Deferral,
    by_oid: &HashMap<u32, Vec<usize>>,
    oid: u32,
    kind: ChangeKind,
    old: Option<&OldTuple<'_>>,
    new: Option<&TupleData<'_>>,
) {
    let Some(rows) = txn.rows.as_mut() else {
        return;
    };
    let (true, Some(schema)) = (by_oid.contains_key(&oid), deferral.schemas.get(&oid)) else {
        return;
    };
    rows.push(RowChange {
        table: Arc::clone(schema),
        kind,
        old: old.map(|o| datums(schema, o.tuple(), matches!(o, OldTuple::Key(_)))),
        new: new.map(|n| datums(schema, n, false)),
    });
}

/// Pending messages read at once while replaying.
const REPLAY_PAGE: i64 = 1_000;

/// Table `t`'s snapshot is copied (state `copied`, consistent point `C`):
/// applies its pending messages of the transactions committed at or after
/// `C`, in order, and marks it running, in one store transaction. A
/// Relation message among them that the pinned columns do not match stalls
/// it instead, as it would have live.
fn replay_pending(
    ctx: &SourceContext,
    store: &mut Store,
    tables: &mut [TableRuntime],
    t: usize,
    point: Position,
    deferral: &Deferral,
) -> Result<()> {
    let fail = |e: rusqlite::Error| PipelineError::store("apply a table's pending changes", e);
    let id = tables[t].info.id;
    let oid = tables[t].info.upstream_oid;
    tables[t].info.snapshot_lsn = Some(point);
    // IMMEDIATE: the replay reads before it writes, and a deferred
    // transaction could not take the write lock after another connection
    // (a copy) committed meanwhile.
    let tx =
        rusqlite::Transaction::new_unchecked(&store.conn, rusqlite::TransactionBehavior::Immediate)
            .map_err(fail)?;
    let mut decoder = LogicalDecoder::new();
    let mut last_seq = 0i64;
    let mut current: Option<(i64, i64, Txn)> = None;
    let mut replayed = 0u64;
    let mut stalled: Option<String> = None;
    'pages: loop {
        let page: Vec<(i64, i64, i64, i64, Vec<u8>)> = {
            let mut read = store
                .conn
                .prepare_cached(
                    "SELECT seq, final_lsn, end_lsn, committed_at, message FROM pending \
                     WHERE tbl = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(fail)?;
            read.query_map(params![id, last_seq, REPLAY_PAGE], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(fail)?
        };
        if page.is_empty() {
            break;
        }
        for (seq, final_lsn, end_lsn, committed_at, message) in page {
            last_seq = seq;
            if current.as_ref().is_none_or(|(end, _, _)| *end != end_lsn) {
                if let Some((end, time, txn)) = current.take() {
                    txn.write(store, tables, Position::from_u64(end as u64), time, false)?;
                }
                current = Some((
                    end_lsn,
                    committed_at,
                    Txn::new(Position::from_u64(final_lsn as u64)),
                ));
            }
            let Some((_, _, txn)) = current.as_mut() else {
                continue;
            };
            let applies = Position::from_u64(final_lsn as u64) >= point;
            let decoded = decoder
                .decode(&message)
                .map_err(|e| PipelineError::Replication {
                    source_name: ctx.source.name.clone(),
                    message: format!("a pending message of table {}: {e}", tables[t].info.name),
                })?;
            let applied = match decoded {
                LogicalMessage::Relation(relation) => {
                    if let Err(problem) = tables[t].on_relation(&relation)
                        && applies
                    {
                        stalled = Some(problem);
                        break 'pages;
                    }
                    Ok(())
                }
                LogicalMessage::Insert(m) if applies => txn.insert(store, tables, t, &m.new),
                LogicalMessage::Update(m) if applies => {
                    txn.update(store, tables, t, m.old.as_ref(), &m.new)
                }
                LogicalMessage::Delete(m) if applies => txn.delete(store, tables, t, &m.old),
                LogicalMessage::Truncate(m) if applies && m.relation_oids.contains(&oid) => {
                    txn.truncate(store, tables, t)
                }
                _ => continue,
            };
            match applied {
                // As live: the table stalls before this transaction.
                Err(e @ PipelineError::Document { .. }) => {
                    stalled = Some(e.primary());
                    break 'pages;
                }
                other => other?,
            }
            replayed += 1;
        }
    }
    if let Some((end, time, txn)) = current.take()
        && stalled.is_none()
    {
        txn.write(store, tables, Position::from_u64(end as u64), time, false)?;
    }
    let state = if stalled.is_some() {
        TableState::Stalled
    } else {
        TableState::Running
    };
    store.set_table_state(id, state, stalled.as_deref(), Some(point))?;
    tx.execute("DELETE FROM pending WHERE tbl = ?1", [id])
        .map_err(fail)?;
    tx.commit().map_err(fail)?;
    tables[t].info.state = state;
    tables[t].info.error = stalled.clone();
    // Back to the columns of the live stream's latest Relation message.
    if stalled.is_none()
        && let Some(relation) = deferral.relations.get(&oid)
        && let Ok(LogicalMessage::Relation(relation)) = LogicalDecoder::new().decode(relation)
        && let Err(problem) = tables[t].on_relation(&relation)
    {
        stall(ctx, store, &mut tables[t], problem)?;
        return Ok(());
    }
    tracing::info!(table = %tables[t].info.name, replayed, "table caught up and running");
    ctx.status.set(
        ObjectKind::Table,
        &tables[t].info.name,
        state.as_str(),
        stalled,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::confirmable;
    use crate::position::Position;

    #[test]
    fn the_slot_is_confirmed_only_up_to_what_every_sink_committed() {
        let p = Position::from_u64;
        // (applied, sinks, between transactions, idle) -> confirmed
        let cases = [
            (100, vec![], true, 0, 100),
            (100, vec![100, 100], true, 0, 100),
            (100, vec![100, 40], true, 0, 40),
            (100, vec![40, 70], false, 500, 40),
            // A sink behind: the keepalive does not move it on.
            (100, vec![90], true, 500, 90),
            // All caught up and idle: the keepalive's position.
            (100, vec![100], true, 500, 500),
            // ... but not inside an open transaction.
            (100, vec![100], false, 500, 100),
            // A keepalive behind the applied position changes nothing.
            (100, vec![100], true, 50, 100),
        ];
        for (n, (applied, sinks, between, idle, want)) in cases.into_iter().enumerate() {
            let got = confirmable(p(applied), sinks.into_iter().map(p), between, p(idle));
            assert_eq!(got, p(want), "case {n}");
        }
    }
}
