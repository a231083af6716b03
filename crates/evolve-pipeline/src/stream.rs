//! A source's task: apply its stream (a [`Source`]'s transactions of row
//! changes) to the state, consecutive upstream transactions grouped into
//! one SQLite transaction, and confirm positions to the source once every
//! sink has committed them. Tables whose snapshot is being copied (by
//! their [`crate::hydrate`] task) get their changes kept as pending until
//! the copy is in; then they are applied here ([`replay_pending`]) and the
//! table runs like the others.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::change::{ChangeKind, RowChange, TableSchema};
use rusqlite::params;
use tokio::sync::watch;

use crate::apply::{TableRuntime, Txn};
use crate::bus::{Bus, Committed};
use crate::error::{ObjectKind, PipelineError, Result};
use crate::pending::{self, Record};
use crate::position::Position;
use crate::source::{ChangeStream, Source, SourceEvent};
use crate::status::StatusBoard;
use crate::store::{SourceInfo, Store, TableState, TrackedReplacement};
use crate::supervise::{Task, Verdict, supervise};
use crate::swap::{MESSAGE_PREFIX, parse_apply_message};

/// What a source task needs.
pub(crate) struct SourceContext<S> {
    pub source: SourceInfo,
    /// The upstream.
    pub upstream: S,
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
pub(crate) async fn run<S: Source>(mut ctx: SourceContext<S>) {
    let (name, status, stop) = (
        ctx.source.name.clone(),
        ctx.status.clone(),
        ctx.stop.clone(),
    );
    // A binlog has no slot holding history for the source.
    let holds = match ctx.source.kind {
        crate::store::SourceKind::Postgres => " (its slot keeps WAL upstream meanwhile)",
        // A binlog or a topic has no slot holding history for the source.
        crate::store::SourceKind::Mysql | crate::store::SourceKind::Kafka => "",
    };
    let task = Task {
        kind: ObjectKind::Source,
        name: &name,
        status: &status,
        stop,
        starting: Some("starting"),
    };
    supervise(
        task,
        &mut ctx,
        |ctx| Box::pin(run_once(ctx)),
        |_, e| {
            if e.is_permanent() {
                // Retrying would fail the same way while the slot keeps WAL
                // upstream: stop, and say so.
                let way_out = if e.is_missing_publication() {
                    // The hint says what to do: a restart cannot help.
                    ""
                } else {
                    ": fix the cause, then restart the pipeline"
                };
                Verdict::Stop {
                    shown: format!("{e}\nnot retried{way_out}{holds}"),
                }
            } else {
                Verdict::Retry
            }
        },
    )
    .await
}

async fn run_once<S: Source>(ctx: &mut SourceContext<S>) -> Result<()> {
    let name = ctx.source.name.clone();
    let mut store = Store::open(&ctx.state_dir)?;
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
    let applied = store.applied_lsn(&name)?;
    let resume = store.resume_state(&name)?;
    let schemas = store.schemas_at(&name, applied)?;
    let stream = ctx
        .upstream
        .stream_resuming(applied, resume, schemas)
        .await?;
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
    apply_stream(ctx, &mut store, tables, stream).await
}

/// Applies the stream until `stop`.
async fn apply_stream<C: ChangeStream, S>(
    ctx: &mut SourceContext<S>,
    store: &mut Store,
    mut tables: Vec<TableRuntime>,
    mut stream: C,
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

    // `applied`: the last upstream transaction taken into the store,
    // committed or in the open group; `stored`: the last one committed
    // (what sinks, subscribers and the source may see).
    let mut applied = store.applied_lsn(&name)?;
    // The source's resume state of `applied` (see the source contract),
    // stored with it; `None` until a transaction is applied here.
    let mut resume: Option<String> = None;
    let mut stored = applied;
    let mut group: Option<Group> = None;
    ctx.applied.send_replace(applied);
    let mut idle = Position::ZERO;
    let mut txn: Option<Txn> = None;
    let mut skip = false;
    let mut commit_time: i64 = 0;
    let mut txn_rows: u64 = 0;
    // The schemas the open transaction announced, recorded with it.
    let mut txn_schemas: Vec<(u32, Arc<TableSchema>)> = Vec::new();
    let mut deferral = Deferral::default();
    // Records a stalled table could not read since it stalled, by table.
    let mut undecodable: HashMap<usize, u64> = HashMap::new();
    // The upstream must not have confirmed more than this store knows.
    let mut recorded = Recorded {
        upto: store.confirmed_lsn(&name)?,
        at: None,
    };
    if let Some(upstream) = stream.upstream_confirmed()
        && let Some(known) = recorded.upto
        && upstream > known.max(applied)
    {
        return Err(PipelineError::StateBehind {
            source_name: name.clone(),
            upstream: upstream.to_string(),
            state: known.max(applied).to_string(),
        });
    }
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut gap_check = tokio::time::interval(GAP_CHECK);
    gap_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ctx.status.set(ObjectKind::Source, &name, "running", None);
    // A transaction a stream that failed was receiving comes again.
    ctx.status.source_receiving(&name, None);
    loop {
        tokio::select! {
            // In this order: the tick is never starved by a busy stream,
            // and the group is committed when the stream has nothing
            // ready.
            biased;
            _ = ctx.stop.changed() => {
                // Commit the open group (complete upstream transactions
                // only), confirm what the sinks have committed, and let the
                // source send it before leaving.
                flush(ctx, store, &name, &mut group, applied, resume.as_deref(), &mut stored)?;
                let target = ack_target(ctx, stored, txn.is_none(), idle);
                confirm(store, &name, &mut stream, target, stored, &mut recorded)?;
                if applied > stored {
                    record_applied(store, &name, applied, resume.as_deref())?;
                }
                stream.close().await;
                return Ok(());
            }
            _ = tick.tick() => {
                flush(ctx, store, &name, &mut group, applied, resume.as_deref(), &mut stored)?;
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
                    track_replacements(store, &tables)?;
                }
                if applied > stored {
                    record_applied(store, &name, applied, resume.as_deref())?;
                    stored = applied;
                }
                let target = ack_target(ctx, stored, txn.is_none(), idle);
                confirm(store, &name, &mut stream, target, stored, &mut recorded)?;
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
                    // Where the interface's feed starts, once its table
                    // is hydrated: not before the table's snapshot.
                    let start = tables
                        .iter()
                        .filter(|t| {
                            t.interfaces.contains(&interface)
                                && matches!(t.info.state, TableState::Running | TableState::Stalled)
                        })
                        .map(|t| t.info.snapshot_lsn.unwrap_or(Position::ZERO).max(stored))
                        .max();
                    store.prune_feed_retained(interface, horizon, committed_before, start)?;
                }
            }
            _ = gap_check.tick(), if txn.is_none() => {
                let running: Vec<usize> = (0..tables.len())
                    .filter(|&t| tables[t].info.state == TableState::Running)
                    .collect();
                for (name, problem) in find_gaps(&mut stream, &tables, &running).await {
                    if let Some(t) = tables.iter().position(|t| t.info.name == name)
                        && tables[t].info.state == TableState::Running
                    {
                        stall(&ctx.status, store, &mut tables[t], problem)?;
                    }
                }
            }
            event = stream.next() => match event? {
                SourceEvent::Begin { commit, commit_time_micros } => {
                    skip = commit < applied;
                    let mut t = Txn::new(commit);
                    if ctx.bus.wants_rows() {
                        t.rows = Some(Vec::new());
                    }
                    txn = Some(t);
                    commit_time = commit_time_micros;
                    txn_rows = 0;
                    txn_schemas.clear();
                }
                SourceEvent::Schema { table, schema } => {
                    let at = txn.as_ref().map(|t| t.final_lsn);
                    if at.is_some() && !skip {
                        txn_schemas.push((table, Arc::clone(&schema)));
                    }
                    // A column a running table reads is missing: the
                    // upstream's settings may be why (a column list), and
                    // then they are the reason it stalls with.
                    let lacking: Vec<usize> = by_oid
                        .get(&table)
                        .map_or(&[][..], Vec::as_slice)
                        .iter()
                        .copied()
                        .filter(|&t| {
                            tables[t].info.state == TableState::Running
                                && read_columns(&tables[t]).any(|c| schema.column(c).is_none())
                        })
                        .collect();
                    let gaps = find_gaps(&mut stream, &tables, &lacking).await;
                    on_schema(ctx, store, &mut tables, &by_oid, &mut deferral, table, schema, at, &gaps)?;
                }
                SourceEvent::Row { table, change } => {
                    if change.kind != ChangeKind::Truncate {
                        txn_rows += 1;
                        if txn_rows == RECEIVING_ROWS {
                            ctx.status.source_receiving(&name, Some(commit_time));
                        }
                    }
                    // A long transaction does not keep the store locked:
                    // the group before it is committed, and its reads run
                    // outside a transaction until its commit.
                    if group.as_ref().is_some_and(|g| g.began.elapsed() >= GROUP_AGE) {
                        flush(ctx, store, &name, &mut group, applied, resume.as_deref(), &mut stored)?;
                    }
                    if let Some(txn) = txn.as_mut().filter(|_| !skip) {
                        on_row(ctx, store, &mut tables, &by_oid, &mut deferral, txn, table, change)?;
                    }
                }
                SourceEvent::Undecodable { table, problem } => {
                    if let Some(txn) = txn.as_mut().filter(|_| !skip) {
                        on_undecodable(ctx, store, &mut tables, &by_oid, &mut undecodable, txn, table, problem)?;
                    }
                }
                SourceEvent::Marker { prefix, content } => {
                    if prefix == MESSAGE_PREFIX
                        && let Some(t) = txn.as_mut().filter(|_| !skip)
                        && let Some(replacement) = parse_apply_message(&ctx.source.slot, &content)
                    {
                        t.swap(replacement.to_string());
                    }
                }
                SourceEvent::Commit { end } => {
                    if txn_rows >= RECEIVING_ROWS {
                        ctx.status.source_receiving(&name, None);
                    }
                    // Records of this transaction its tables left out as
                    // other tables' (counted once it applies).
                    let skipped = stream.take_skipped();
                    if let Some(mut t) = txn.take()
                        && !skip
                        && end > applied
                    {
                        for (oid, n) in skipped {
                            for &i in by_oid.get(&oid).map_or(&[][..], Vec::as_slice) {
                                ctx.status.skipped_streamed(&tables[i].info.name, n);
                            }
                        }
                        let rows = t.rows.take();
                        let writes = !t.is_empty() || rows.as_ref().is_some_and(|r| !r.is_empty());
                        let changes = if !writes && txn_schemas.is_empty() {
                            Vec::new()
                        } else {
                            let g = match group.as_mut() {
                                Some(g) => g,
                                None => group.insert(Group::begin(store)?),
                            };
                            // The schema history (see the source contract),
                            // in the commit that stores the position.
                            store.record_schemas(&name, end, &txn_schemas)?;
                            if writes {
                                t.write(store, &mut tables, &mut g.tracked, end, commit_time)?
                            } else {
                                Vec::new()
                            }
                        };
                        applied = end;
                        resume = stream.resume_state(end);
                        let full = match group.as_mut() {
                            Some(g) => g.add(txn_rows, Committed {
                                source: name.clone(),
                                pos: end,
                                commit_time_micros: commit_time,
                                changes,
                                rows,
                                published_through: 0,
                            }),
                            None => {
                                // Nothing to write and no group open: the
                                // position only (stored at the next tick;
                                // nothing is lost without it).
                                ctx.status.source_committed(&name, end, commit_time);
                                ctx.applied.send_replace(applied);
                                ctx.status.count(ObjectKind::Source, &name, txn_rows, Some(commit_time));
                                false
                            }
                        };
                        if full {
                            flush(ctx, store, &name, &mut group, applied, resume.as_deref(), &mut stored)?;
                        }
                    }
                }
                SourceEvent::Idle { upto } => {
                    if txn.is_none() {
                        idle = idle.max(upto);
                    }
                }
            },
            _ = std::future::ready(()), if group.is_some() => {
                flush(ctx, store, &name, &mut group, applied, resume.as_deref(), &mut stored)?;
            }
        }
    }
}

/// Records the source's applied position, with its resume state,
/// outside a group.
fn record_applied(
    store: &Store,
    name: &str,
    applied: Position,
    resume: Option<&str>,
) -> Result<()> {
    store
        .conn
        .execute(
            "UPDATE sources SET applied_lsn = ?2, resume_state = ?3 \
             WHERE name = ?1 AND applied_lsn < ?2",
            params![name, applied.to_sql(), resume],
        )
        .map_err(|e| PipelineError::store("record applied position", e))?;
    Ok(())
}

/// Rows after which a transaction being received counts in the lag
/// figures ([`StatusBoard::source_receiving`]).
const RECEIVING_ROWS: u64 = 1_000;

/// At most this many upstream transactions share one store commit.
const GROUP_TRANSACTIONS: usize = 1_000;
/// A group is committed once it holds this many row changes.
const GROUP_ROWS: u64 = 10_000;
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
    /// The replacements whose differing keys the store keeps, read when
    /// the group began: no other connection can change them while the
    /// group holds the write lock, and a swap in the group takes its
    /// replacement out.
    tracked: Vec<TrackedReplacement>,
}

impl Group {
    fn begin(store: &Store) -> Result<Group> {
        store
            .conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| PipelineError::store("begin a store transaction", e))?;
        let tracked = store.tracked_replacements()?;
        Ok(Group {
            began: std::time::Instant::now(),
            rows: 0,
            committed: Vec::new(),
            tracked,
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
/// position (and `resume` as its resume state); then publishes its
/// transactions and the new position.
fn flush<S>(
    ctx: &SourceContext<S>,
    store: &Store,
    name: &str,
    group: &mut Option<Group>,
    applied: Position,
    resume: Option<&str>,
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
                "UPDATE sources SET applied_lsn = ?2, resume_state = ?3 \
                 WHERE name = ?1 AND applied_lsn < ?2",
                params![name, applied.to_sql(), resume],
            )
            .map_err(fail)?;
    }
    store.conn.execute_batch("COMMIT").map_err(fail)?;
    *stored = applied.max(*stored);
    for (_, committed) in &g.committed {
        ctx.status
            .source_committed(name, committed.pos, committed.commit_time_micros);
    }
    for (rows, committed) in g.committed {
        ctx.status.count(
            ObjectKind::Source,
            name,
            rows,
            Some(committed.commit_time_micros),
        );
        ctx.bus.publish(committed);
    }
    // After the transactions are on the bus: a sink that sees the new
    // position finds every transaction up to it there (`sink::follow`).
    ctx.applied.send_replace(*stored);
    Ok(())
}

/// The position to confirm to the slot (see [`confirmable`]).
/// The furthest position recorded as asked to be confirmed
/// ([`Store::confirmed_lsn`]), and when it was last recorded here.
struct Recorded {
    upto: Option<Position>,
    at: Option<std::time::Instant>,
}

/// How often a confirmation past the stored applied position is
/// recorded (and so sent) at most.
const RECORD_CONFIRMED_EVERY: Duration = Duration::from_secs(1);

/// Confirms `target` to the stream. A target past `stored`, the applied
/// position in the store (an idle stream's WAL position), is recorded in
/// the store before it is sent, at most every
/// [`RECORD_CONFIRMED_EVERY`] (in between, the last recorded one is
/// sent), so the upstream never confirms more than the store knows.
fn confirm<C: ChangeStream>(
    store: &Store,
    name: &str,
    stream: &mut C,
    target: Position,
    stored: Position,
    recorded: &mut Recorded,
) -> Result<()> {
    let known = recorded.upto.unwrap_or(Position::ZERO).max(stored);
    let target = if target <= known {
        target
    } else if recorded
        .at
        .is_none_or(|at| at.elapsed() >= RECORD_CONFIRMED_EVERY)
    {
        store.record_confirmed(name, target)?;
        recorded.upto = Some(target);
        recorded.at = Some(std::time::Instant::now());
        target
    } else {
        known
    };
    stream.confirm(target);
    Ok(())
}

fn ack_target<S>(
    ctx: &SourceContext<S>,
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

/// What the stream keeps for tables whose snapshot is not in yet: each
/// upstream table's latest schema, and which tables already have it among
/// their pending records in this session.
#[derive(Default)]
struct Deferral {
    schemas: HashMap<u32, Arc<TableSchema>>,
    /// The commit position of the transaction each of `schemas` came in.
    schema_at: HashMap<u32, Position>,
    schema_kept: HashSet<usize>,
}

impl Deferral {
    fn keep(&mut self, txn: &mut Txn, t: usize, oid: u32, change: &RowChange) {
        if !self.schema_kept.contains(&t)
            && let Some(schema) = self.schemas.get(&oid)
        {
            txn.defer(t, pending::encode_schema(schema));
            self.schema_kept.insert(t);
        }
        txn.defer(t, pending::encode_row(change));
    }
}

fn stall(
    status: &StatusBoard,
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
    status.set(
        ObjectKind::Table,
        &table.info.name,
        "stalled",
        Some(problem),
    );
    Ok(())
}

/// How often the source is asked for gaps its events do not show
/// ([`ChangeStream::gaps`]).
const GAP_CHECK: Duration = Duration::from_secs(5);

/// The columns table `t` reads of its upstream table: its document and
/// key columns.
fn read_columns(t: &TableRuntime) -> impl Iterator<Item = &str> {
    t.info
        .columns
        .iter()
        .filter(|c| c.is_read())
        .map(|c| c.name.as_str())
}

/// The source's gaps ([`ChangeStream::gaps`]) for tables `which`; a
/// failure to ask is logged, and asked again at the next check.
async fn find_gaps<C: ChangeStream>(
    stream: &mut C,
    tables: &[TableRuntime],
    which: &[usize],
) -> Vec<(String, String)> {
    if which.is_empty() {
        return Vec::new();
    }
    let asked: Vec<&crate::store::TableInfo> = which.iter().map(|&t| &tables[t].info).collect();
    match stream.gaps(&asked).await {
        Ok(gaps) => gaps,
        Err(e) => {
            tracing::warn!(error = %e.primary(), "could not read the upstream's publication settings");
            Vec::new()
        }
    }
}

/// A table's schema from the source, in the transaction committed at
/// `at`: each of the source's tables reading it maps its pinned columns
/// onto it, and a running table whose columns no longer match stalls,
/// unless the transaction is before its snapshot (a stream that restarted
/// from an earlier position replays schemas older than a table
/// version created after a schema change; none of their rows applies to
/// it, and the schema it was pinned to comes again before any that does).
#[allow(clippy::too_many_arguments)]
fn on_schema<S>(
    ctx: &SourceContext<S>,
    store: &Store,
    tables: &mut [TableRuntime],
    by_oid: &HashMap<u32, Vec<usize>>,
    deferral: &mut Deferral,
    oid: u32,
    schema: Arc<TableSchema>,
    at: Option<Position>,
    gaps: &[(String, String)],
) -> Result<()> {
    for &t in by_oid.get(&oid).map_or(&[][..], Vec::as_slice) {
        deferral.schema_kept.remove(&t);
        if let Err(problem) = match_schema(&mut tables[t], &schema)
            && tables[t].info.state == TableState::Running
            && at.is_none_or(|at| tables[t].applies(at))
        {
            let gap = gaps.iter().find(|(name, _)| *name == tables[t].info.name);
            let problem = gap.map_or(problem, |(_, gap)| gap.clone());
            stall(&ctx.status, store, &mut tables[t], problem)?;
        }
    }
    deferral.schemas.insert(oid, schema);
    match at {
        Some(at) => deferral.schema_at.insert(oid, at),
        None => deferral.schema_at.remove(&oid),
    };
    Ok(())
}

/// Maps table `t`'s pinned columns onto `schema` ([`TableRuntime::on_schema`]);
/// a schema without columns says the upstream table is gone from the
/// stream (the source contract): dropped, or its name taken by another
/// table (the schema names it as it was then, after a rename).
fn match_schema(table: &mut TableRuntime, schema: &TableSchema) -> std::result::Result<(), String> {
    if !schema.columns.is_empty() {
        return table.on_schema(schema);
    }
    let reference = table.info.reference();
    let now = format!("{}.{}", schema.schema, schema.name);
    let named = if now == reference {
        format!("\"{reference}\"")
    } else {
        format!("\"{reference}\" (renamed to \"{now}\")")
    };
    Err(format!(
        "upstream table {named} was dropped or replaced by another table of that name; its changes no longer reach this table"
    ))
}

/// Applies one row change of table `oid` to each of the source's tables
/// reading it: to a running table whose snapshot the transaction is not
/// in, or kept as pending for a table still copying. A row that cannot be
/// made a document (a value the encoder refuses) stalls that table with
/// the error, without any of this transaction's changes, as a schema
/// mismatch does; the source and its other tables go on. Other failures
/// (the store) fail the source, which retries. The change goes to the
/// bus's row followers when the transaction collects rows.
#[allow(clippy::too_many_arguments)]
fn on_row<S>(
    ctx: &SourceContext<S>,
    store: &Store,
    tables: &mut [TableRuntime],
    by_oid: &HashMap<u32, Vec<usize>>,
    deferral: &mut Deferral,
    txn: &mut Txn,
    oid: u32,
    change: RowChange,
) -> Result<()> {
    let Some(readers) = by_oid.get(&oid) else {
        return Ok(());
    };
    for &t in readers {
        if tables[t].applies(txn.final_lsn) {
            match apply_row(store, tables, txn, t, &change) {
                Err(e @ PipelineError::Document { .. }) => {
                    txn.forget(t);
                    stall(&ctx.status, store, &mut tables[t], e.primary())?;
                }
                other => other?,
            }
        } else if !tables[t].info.state.is_hydrated() {
            deferral.keep(txn, t, oid, &change);
        }
    }
    if let Some(rows) = txn.rows.as_mut() {
        rows.push(change);
    }
    Ok(())
}

/// A record that table `oid`'s readers cannot read
/// ([`SourceEvent::Undecodable`]): a running table whose snapshot the
/// transaction is not in stalls with `problem`, without any of this
/// transaction's changes; a stalled one counts it (shown with its error);
/// a table still copying keeps it as pending, and stalls when it is
/// replayed.
#[allow(clippy::too_many_arguments)]
fn on_undecodable<S>(
    ctx: &SourceContext<S>,
    store: &Store,
    tables: &mut [TableRuntime],
    by_oid: &HashMap<u32, Vec<usize>>,
    counts: &mut HashMap<usize, u64>,
    txn: &mut Txn,
    oid: u32,
    problem: String,
) -> Result<()> {
    for &t in by_oid.get(&oid).map_or(&[][..], Vec::as_slice) {
        if tables[t].applies(txn.final_lsn) {
            txn.forget(t);
            stall(&ctx.status, store, &mut tables[t], problem.clone())?;
            counts.insert(t, 0);
        } else if tables[t].info.state == TableState::Stalled {
            let n = counts.entry(t).or_default();
            *n += 1;
            let error = tables[t].info.error.clone().unwrap_or_default();
            ctx.status.set(
                ObjectKind::Table,
                &tables[t].info.name,
                "stalled",
                Some(format!(
                    "{error}; {n} later records not readable either since the pipeline started"
                )),
            );
        } else if !tables[t].info.state.is_hydrated() {
            txn.defer(t, pending::encode_undecodable(&problem));
        }
    }
    Ok(())
}

/// One row change applied to table `t` in `txn`.
fn apply_row(
    store: &Store,
    tables: &[TableRuntime],
    txn: &mut Txn,
    t: usize,
    change: &RowChange,
) -> Result<()> {
    match (change.kind, change.old.as_deref(), change.new.as_deref()) {
        (ChangeKind::Insert, _, Some(new)) => txn.insert(store, tables, t, new),
        (ChangeKind::Update, old, Some(new)) => txn.update(store, tables, t, old, new),
        (ChangeKind::Delete, Some(old), _) => txn.delete(store, tables, t, old),
        (ChangeKind::Truncate, _, _) => txn.truncate(store, tables, t),
        (kind, _, _) => Err(PipelineError::Document {
            table: tables[t].info.name.clone(),
            message: format!("a {kind:?} change came without the row image it needs"),
        }),
    }
}

/// Pending records read at once while replaying.
const REPLAY_PAGE: i64 = 1_000;

/// Table `t`'s snapshot is copied (state `copied`, consistent point `C`):
/// applies its pending changes of the transactions committed at or after
/// `C`, in order, and marks it running, in one store transaction. A
/// schema among them that the pinned columns do not match stalls it
/// instead, as it would have live.
fn replay_pending<S>(
    ctx: &SourceContext<S>,
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
    let mut tracked = store.tracked_replacements()?;
    let mut records = PendingReader::new(oid);
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
                    txn.write(
                        store,
                        tables,
                        &mut tracked,
                        Position::from_u64(end as u64),
                        time,
                    )?;
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
            let events = records
                .read(message)
                .map_err(|e| PipelineError::Replication {
                    source_name: ctx.source.name.clone(),
                    message: format!("a pending change of table {}: {e}", tables[t].info.name),
                })?;
            for event in events {
                let applied = match event {
                    SourceEvent::Schema { schema, .. } => {
                        if let Err(problem) = match_schema(&mut tables[t], &schema)
                            && applies
                        {
                            stalled = Some(problem);
                            break 'pages;
                        }
                        Ok(())
                    }
                    SourceEvent::Row { table, change } if applies && table == oid => {
                        apply_row(store, tables, txn, t, &change)
                    }
                    SourceEvent::Undecodable { problem, .. } if applies => {
                        stalled = Some(problem);
                        break 'pages;
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
    }
    if let Some((end, time, txn)) = current.take()
        && stalled.is_none()
    {
        txn.write(
            store,
            tables,
            &mut tracked,
            Position::from_u64(end as u64),
            time,
        )?;
    }
    let state = if stalled.is_some() {
        TableState::Stalled
    } else {
        TableState::Running
    };
    store.set_table_state(id, state, stalled.as_deref(), Some(point))?;
    tx.execute("DELETE FROM pending WHERE tbl = ?1", [id])
        .map_err(fail)?;
    tables[t].info.state = state;
    tables[t].info.error = stalled.clone();
    // A replacement over this table (or over the table it replaces) is
    // compared now, so that it is hydrated with its differing keys kept.
    // On a failure the task starts over, reading its tables again.
    crate::swap::track(store, tables)?;
    tx.commit().map_err(fail)?;
    // Back to the columns of the live stream's latest schema, unless it
    // came before the snapshot (the stream is replaying older
    // transactions; see `on_schema`).
    if stalled.is_none()
        && let Some(schema) = deferral.schemas.get(&oid)
        && deferral.schema_at.get(&oid).is_none_or(|at| *at >= point)
        && let Err(problem) = match_schema(&mut tables[t], schema)
    {
        stall(&ctx.status, store, &mut tables[t], problem)?;
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

/// Starts keeping the differing keys of the replacements whose two
/// tables are this source's and hydrated but not compared yet (created
/// over tables already hydrated, or in a store written before evolve kept
/// them): [`crate::swap::track`], in one store transaction. Only reads
/// when there is none.
fn track_replacements(store: &Store, tables: &[TableRuntime]) -> Result<()> {
    let hydrated = |id: i64| {
        tables
            .iter()
            .any(|t| t.info.id == id && t.info.state.is_hydrated())
    };
    if !store
        .untracked_replacements()?
        .iter()
        .any(|(_, old, new)| hydrated(*old) && hydrated(*new))
    {
        return Ok(());
    }
    let fail = |e: rusqlite::Error| PipelineError::store("compare a replacement's documents", e);
    let tx =
        rusqlite::Transaction::new_unchecked(&store.conn, rusqlite::TransactionBehavior::Immediate)
            .map_err(fail)?;
    crate::swap::track(store, tables)?;
    tx.commit().map_err(fail)
}

/// Reads a table's pending records in order, keeping the latest schema
/// for the rows after it. Records written by earlier versions are raw
/// pgoutput messages, read with the PostgreSQL source's decoder.
struct PendingReader {
    /// The upstream table's id.
    oid: u32,
    schema: Option<Arc<TableSchema>>,
    legacy: crate::source::postgres::Decoder,
}

impl PendingReader {
    fn new(oid: u32) -> PendingReader {
        PendingReader {
            oid,
            schema: None,
            legacy: Default::default(),
        }
    }

    fn read(&mut self, message: Vec<u8>) -> std::result::Result<VecDeque<SourceEvent>, String> {
        let mut out = VecDeque::new();
        let message = bytes::Bytes::from(message);
        if !pending::is_record(&message) {
            self.legacy.decode(&message, &mut out)?;
            return Ok(out);
        }
        match pending::decode(message)? {
            Record::Schema(schema) => {
                let schema = Arc::new(schema);
                self.schema = Some(Arc::clone(&schema));
                out.push_back(SourceEvent::Schema {
                    table: self.oid,
                    schema,
                });
            }
            Record::Undecodable(problem) => out.push_back(SourceEvent::Undecodable {
                table: self.oid,
                problem,
            }),
            Record::Row { kind, old, new } => {
                let schema = self
                    .schema
                    .clone()
                    .ok_or("a row before any schema of its table")?;
                out.push_back(SourceEvent::Row {
                    table: self.oid,
                    change: RowChange {
                        table: schema,
                        kind,
                        old,
                        new,
                    },
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use evolve_core::change::{Bytes, ColumnSchema, Datum};

    use super::*;

    /// A raw pgoutput Relation message for table 77 (`public.t`: `id int4`
    /// in the key, `note text`) and an Insert of (5, 'x'), as versions that
    /// stored raw messages kept them.
    fn legacy_messages() -> (Vec<u8>, Vec<u8>) {
        let mut relation = vec![b'R'];
        relation.extend_from_slice(&77u32.to_be_bytes());
        relation.extend_from_slice(b"public\0t\0d");
        relation.extend_from_slice(&2i16.to_be_bytes());
        for (flags, name, oid) in [(1u8, "id", 23u32), (0, "note", 25)] {
            relation.push(flags);
            relation.extend_from_slice(name.as_bytes());
            relation.push(0);
            relation.extend_from_slice(&oid.to_be_bytes());
            relation.extend_from_slice(&(-1i32).to_be_bytes());
        }
        let mut insert = vec![b'I'];
        insert.extend_from_slice(&77u32.to_be_bytes());
        insert.push(b'N');
        insert.extend_from_slice(&2i16.to_be_bytes());
        for value in ["5", "x"] {
            insert.push(b't');
            insert.extend_from_slice(&(value.len() as u32).to_be_bytes());
            insert.extend_from_slice(value.as_bytes());
        }
        (relation, insert)
    }

    #[test]
    fn pending_changes_read_back_in_both_stored_forms() {
        let schema = Arc::new(TableSchema {
            schema: "public".into(),
            name: "t".into(),
            columns: vec![
                ColumnSchema {
                    name: "id".into(),
                    type_oid: 23,
                    typmod: -1,
                    key: true,
                    attnum: None,
                },
                ColumnSchema {
                    name: "note".into(),
                    type_oid: 25,
                    typmod: -1,
                    key: false,
                    attnum: None,
                },
            ],
        });
        let change = RowChange {
            table: Arc::clone(&schema),
            kind: ChangeKind::Insert,
            old: None,
            new: Some(vec![
                Datum::Text(Bytes::from_static(b"5")),
                Datum::Text(Bytes::from_static(b"x")),
            ]),
        };
        let (relation, insert) = legacy_messages();
        let stored = [
            // Today's records.
            [
                pending::encode_schema(&schema),
                pending::encode_row(&change),
            ],
            // Raw pgoutput, from earlier versions.
            [relation, insert],
        ];
        for (n, [first, second]) in stored.into_iter().enumerate() {
            let mut reader = PendingReader::new(77);
            let got: Vec<SourceEvent> = [first, second]
                .into_iter()
                .flat_map(|m| reader.read(m).unwrap())
                .collect();
            assert_eq!(
                got,
                vec![
                    SourceEvent::Schema {
                        table: 77,
                        schema: Arc::clone(&schema)
                    },
                    SourceEvent::Row {
                        table: 77,
                        change: change.clone()
                    },
                ],
                "form {n}"
            );
        }
        // A row with no schema before it is an error, not a guess.
        let mut reader = PendingReader::new(77);
        assert!(reader.read(pending::encode_row(&change)).is_err());
    }

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
