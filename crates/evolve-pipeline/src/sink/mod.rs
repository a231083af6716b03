//! Sinks: destinations kept equal to an interface, exactly once.
//!
//! The driver here is the same for every destination: it has the
//! destination load the interface's documents when it has never been
//! loaded, then hands it the interface's changes, whole upstream
//! transactions in commit order, as the source applies them, and reports
//! how far the destination has committed (the source confirms its slot
//! only up to what every sink has committed). The changes come from the
//! bus, in memory, as the source publishes each committed group; from the
//! store's feed only when the sink starts and whenever it fell more than
//! [`BUS_BACKLOG`] transactions or [`BUS_BACKLOG_BYTES`] behind. A destination implements [`Sink`];
//! [`postgres::PostgresSink`] is the PostgreSQL table sink,
//! [`kafka::KafkaSink`] the Kafka topic sink.
//!
//! # Initial loads
//!
//! A load is [`Documents`]: chunks of (key, document), a position `at`, and
//! the interface's changes between the two, so a load holds a few chunks
//! in memory whatever the table's size. It comes one of two ways:
//!
//! - **Beside the snapshot** ([`Taps`]): when the interface's table is
//!   still to be copied and the destination can take documents before their
//!   position is known ([`Sink::LOADS_BESIDE_SNAPSHOT`]), the sink listens
//!   to the table's copy and writes each chunk as the copy stores it, so
//!   the destination's load and the store's copy run at the same time.
//!   When the copy is in at the snapshot's position `C`, the load waits
//!   until the source has applied the table's pending changes (the table
//!   is running), takes the source's applied position `at`, and catches up
//!   with the interface's feed entries in `(C, at]`: the changes of the
//!   transactions the stream kept while the copy ran, fed when they are
//!   replayed, and any the stream applied since. The destination commits
//!   documents, catch-up and `at` as one unit. A copy that stops (a failure,
//!   a restart) ends the load with nothing committed, and the sink
//!   listens again, or loads from the store once the table is running.
//! - **From the store**: otherwise, once the table is running, every
//!   document as of the source's applied position, read in one consistent
//!   store read; nothing to catch up.

pub(crate) mod kafka;
mod postgres;
pub(crate) mod registry;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::position::Position;
use tokio::sync::{broadcast, mpsc, watch};

use crate::bus::{Bus, Committed};
use crate::config::Connection;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;
use crate::store::{FeedEntry, SinkInfo, SinkKind, Store};
use crate::supervise::{Task, Verdict, supervise};

pub use kafka::{PROGRESS_TOPIC, TRANSACTION_TIMEOUT};
pub(crate) use kafka::{
    ensure_topics as ensure_kafka_topics, forget as forget_kafka, is_kafka,
    missing_topics as missing_kafka_topics, not_kafka, not_postgres, register_avro_schemas,
};
pub use postgres::{FILLFACTOR as SINK_FILLFACTOR, PROGRESS_TABLE};
pub(crate) use postgres::{PostgresSink, Targets, check_new_target, ensure_tables};

/// Feed entries read at once (whole transactions are never split).
const FEED_BATCH: usize = 10_000;

/// How often a sink waiting for its table's snapshot looks at the store
/// (one small read): its initial load starts this soon after the snapshot
/// is in.
const SNAPSHOT_POLL: Duration = Duration::from_millis(20);

/// Bytes of keys and documents per chunk of an initial load, at most
/// (a chunk holds one document at least).
const LOAD_CHUNK_BYTES: usize = 1 << 20;

/// Chunks an initial load reads ahead of the destination.
const LOAD_READ_AHEAD: usize = 2;

/// Key and document pairs, as the store holds them.
pub(crate) type Chunk = Vec<(Vec<u8>, Vec<u8>)>;

/// How long a table's copy waits for a sink loading beside it to take a
/// chunk before it leaves that sink out (the sink then loads from the
/// store once the table is running): a slow destination never holds the
/// copy up for longer.
const TAP_WAIT: Duration = Duration::from_secs(10);

/// What a table's copy hands to the sinks loading beside it.
#[derive(Clone)]
pub(crate) enum Tapped {
    /// Documents as the copy stored them.
    Rows(Chunk),
    /// The copy is in the store, at the snapshot's position.
    Copied(Position),
}

/// How long a copy that is starting waits for the sinks expected to
/// listen to it ([`Taps::expect`]) to listen or to say they will not.
const TAP_EXPECT: Duration = Duration::from_secs(5);

/// The sinks listening to a table's next copy, by table name. A sink
/// listens ([`Taps::listen`]) while its table is not running; a copy takes
/// the listeners when its snapshot is open ([`Taps::take`]) and hands them
/// every chunk it stores, then the snapshot's position. Kept by the
/// pipeline across the restarts of its tasks.
///
/// A sink task started for a table still to be copied is *expected*
/// ([`Taps::expect`]) until it listens or finds it needs no load (it has a
/// position, or it failed to start): a copy that starts meanwhile waits
/// for that, at most [`TAP_EXPECT`], so a sink that is still connecting
/// does not miss the copy.
#[derive(Clone, Default)]
pub(crate) struct Taps {
    tables: Arc<Mutex<HashMap<String, Listeners>>>,
    decided: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct Listeners {
    senders: Vec<mpsc::Sender<Tapped>>,
    /// Sinks expected to listen or to say they will not.
    expected: usize,
}

/// A sink expected to listen to its table's next copy ([`Taps::expect`]);
/// dropped, it no longer is.
pub(crate) struct Expected {
    taps: Taps,
    table: String,
}

impl Expected {
    /// Listens to the table's next copy.
    pub fn listen(self) -> mpsc::Receiver<Tapped> {
        self.taps.listen(&self.table)
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        let mut tables = self.taps.lock();
        if let Some(l) = tables.get_mut(&self.table) {
            l.expected = l.expected.saturating_sub(1);
        }
        drop(tables);
        self.taps.decided.notify_waiters();
    }
}

impl Taps {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Listeners>> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sink task of `table` is starting.
    pub fn expect(&self, table: &str) -> Expected {
        self.lock().entry(table.to_string()).or_default().expected += 1;
        Expected {
            taps: self.clone(),
            table: table.to_string(),
        }
    }

    /// Listens to the next copy of `table` to start.
    pub fn listen(&self, table: &str) -> mpsc::Receiver<Tapped> {
        let (tx, rx) = mpsc::channel(LOAD_READ_AHEAD);
        let mut tables = self.lock();
        let listeners = tables.entry(table.to_string()).or_default();
        listeners.senders.retain(|l| !l.is_closed());
        listeners.senders.push(tx);
        rx
    }

    /// The listeners of `table`, for a copy that starts now, once every
    /// sink expected has listened or said it will not (at most
    /// [`TAP_EXPECT`]).
    pub async fn take(&self, table: &str) -> Tee {
        let deadline = tokio::time::Instant::now() + TAP_EXPECT;
        loop {
            let decided = self.decided.notified();
            let expected = self.lock().get(table).map_or(0, |l| l.expected);
            if expected == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, decided).await.is_err() {
                tracing::info!(
                    table,
                    expected,
                    "sinks expected to load beside the copy did not start in time; they load after it"
                );
                break;
            }
        }
        let mut tables = self.lock();
        let senders = tables
            .get_mut(table)
            .map(|l| std::mem::take(&mut l.senders))
            .unwrap_or_default();
        if tables.get(table).is_some_and(|l| l.expected == 0) {
            tables.remove(table);
        }
        let outs = senders.into_iter().filter(|l| !l.is_closed()).collect();
        Tee { outs }
    }
}

/// A copy's side of [`Taps`]: the sinks it hands its chunks to. Dropped
/// before [`Tee::copied`], it tells them the copy stopped.
pub(crate) struct Tee {
    outs: Vec<mpsc::Sender<Tapped>>,
}

impl Tee {
    /// Hands `rows`, just stored, to every listener (`rows` is left
    /// empty).
    pub async fn rows(&mut self, rows: &mut Chunk) {
        if self.outs.is_empty() || rows.is_empty() {
            rows.clear();
            return;
        }
        let chunk = std::mem::replace(rows, Vec::with_capacity(rows.capacity()));
        self.send(Tapped::Rows(chunk)).await;
    }

    /// Tells every listener the copy is in, at `at`.
    pub async fn copied(&mut self, at: Position) {
        self.send(Tapped::Copied(at)).await;
        self.outs.clear();
    }

    /// Sends `message` to every listener (copies to all but the last),
    /// leaving out those that are gone or take longer than [`TAP_WAIT`].
    async fn send(&mut self, message: Tapped) {
        let outs = std::mem::take(&mut self.outs);
        let mut message = Some(message);
        let last = outs.len().saturating_sub(1);
        for (i, out) in outs.into_iter().enumerate() {
            let this = if i == last {
                message.take()
            } else {
                message.clone()
            };
            let Some(this) = this else { break };
            match tokio::time::timeout(TAP_WAIT, out.send(this)).await {
                Ok(Ok(())) => self.outs.push(out),
                Ok(Err(_)) => {}
                Err(_) => tracing::info!(
                    "a sink loading beside a snapshot took no chunk for {TAP_WAIT:?}; it loads after the copy"
                ),
            }
        }
    }
}

/// Every document of an interface as of one position, [`Documents::at`],
/// in chunks, and the interface's changes between the documents and that
/// position ([`Documents::catch_up`]); see the module's "Initial loads".
pub(crate) struct Documents {
    at: Position,
    origin: Origin,
    rows: u64,
    ended: bool,
}

/// Where a load's documents come from.
enum Origin {
    /// The store, read by a thread of its own inside one store read
    /// transaction (one consistent cut, whatever the source commits
    /// meanwhile), a few chunks ahead of the destination, in key order.
    Store(mpsc::Receiver<Read>),
    /// The table's copy, as it stores them; then the feed.
    Tap(Box<Tap>),
}

/// A load beside a table's copy.
struct Tap {
    rx: mpsc::Receiver<Tapped>,
    /// What the copy sent first (taken by the first [`Documents::next`]).
    first: Option<Tapped>,
    store: Store,
    source: String,
    table: String,
    interface: i64,
    /// The feed is read after this position.
    after: Position,
    /// The copy stopped before its end.
    interrupted: bool,
    /// The engine's stop signal: waiting for the table to run ends with
    /// it (the source's stream, which makes the table run, is stopped
    /// too, and the engine restarts only once every task has stopped).
    stop: watch::Receiver<bool>,
}

/// What the store's reader sends.
enum Read {
    At(Position),
    Rows(Chunk),
    End,
    Failed(PipelineError),
}

impl Documents {
    /// Starts reading the documents of `table` (of source `source`) and
    /// the source's applied position they are at, `rows` documents per
    /// chunk at most.
    async fn read(state_dir: &Path, source: &str, table: &str, rows: usize) -> Result<Documents> {
        let (tx, mut chunks) = mpsc::channel(LOAD_READ_AHEAD);
        let (state_dir, source, table) = (
            state_dir.to_path_buf(),
            source.to_string(),
            table.to_string(),
        );
        std::thread::Builder::new()
            .name("evolve-sink-load".into())
            .spawn(move || {
                if let Err(e) = read_documents(&state_dir, &source, &table, rows, &tx) {
                    let _ = tx.blocking_send(Read::Failed(e));
                }
            })
            .map_err(|e| PipelineError::Store {
                context: "read the interface's documents".into(),
                message: format!("could not start the reading thread: {e}"),
            })?;
        match chunks.recv().await {
            Some(Read::At(at)) => Ok(Documents {
                at,
                origin: Origin::Store(chunks),
                rows: 0,
                ended: false,
            }),
            Some(Read::Failed(e)) => Err(e),
            _ => Err(reader_stopped()),
        }
    }

    /// The documents of a copy that has just sent `first`, then the feed
    /// of interface `interface` up to the source's applied position once
    /// the table runs.
    fn tapped(ctx: &SinkContext, rx: mpsc::Receiver<Tapped>, first: Tapped) -> Result<Documents> {
        Ok(Documents {
            at: Position::ZERO,
            origin: Origin::Tap(Box::new(Tap {
                rx,
                first: Some(first),
                store: Store::open(&ctx.state_dir)?,
                source: ctx.source.clone(),
                table: ctx.table.clone(),
                interface: ctx.interface_id,
                after: Position::ZERO,
                interrupted: false,
                stop: ctx.stop.clone(),
            })),
            rows: 0,
            ended: false,
        })
    }

    /// The source position the load is at. Known once [`Documents::next`]
    /// has said there are no more documents (for a load from the store,
    /// from the start).
    pub fn at(&self) -> Position {
        self.at
    }

    /// The documents read so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Whether the load ended because the table's copy it followed
    /// stopped (the sink then listens again, or loads from the store).
    fn interrupted(&self) -> bool {
        matches!(&self.origin, Origin::Tap(tap) if tap.interrupted)
    }

    /// The next chunk (never empty), or `None` once every document was
    /// read; [`Documents::at`] is known then.
    pub async fn next(&mut self) -> Result<Option<Chunk>> {
        if self.ended {
            return Ok(None);
        }
        let chunk = match &mut self.origin {
            Origin::Store(chunks) => match chunks.recv().await {
                Some(Read::Rows(chunk)) => Some(chunk),
                Some(Read::End) => None,
                Some(Read::Failed(e)) => return Err(e),
                Some(Read::At(_)) | None => return Err(reader_stopped()),
            },
            Origin::Tap(tap) => {
                let got = match tap.first.take() {
                    Some(first) => Some(first),
                    None => tap.rx.recv().await,
                };
                match got {
                    Some(Tapped::Rows(chunk)) => Some(chunk),
                    Some(Tapped::Copied(point)) => {
                        tap.after = point;
                        self.at = tap.running_at().await?;
                        None
                    }
                    None => {
                        tap.interrupted = true;
                        return Err(PipelineError::Store {
                            context: "load beside the table's snapshot".into(),
                            message: "the snapshot's copy stopped before its end; nothing of the load is committed".into(),
                        });
                    }
                }
            }
        };
        match chunk {
            Some(chunk) => {
                self.rows += chunk.len() as u64;
                Ok(Some(chunk))
            }
            None => {
                self.ended = true;
                Ok(None)
            }
        }
    }

    /// After the documents: the interface's changes between them and
    /// [`Documents::at`], consecutive upstream transactions in commit
    /// order (a batch never splits one), or `None` when there are no more.
    /// A load applies them in turn, after the documents, in the same unit
    /// that records `at`.
    pub async fn catch_up(&mut self) -> Result<Option<Vec<FeedEntry>>> {
        let Origin::Tap(tap) = &mut self.origin else {
            return Ok(None);
        };
        if !self.ended || tap.after >= self.at {
            return Ok(None);
        }
        let entries = tap
            .store
            .feed(tap.interface, tap.after, self.at, FEED_BATCH)?;
        match entries.last() {
            Some(last) => {
                tap.after = last.pos;
                Ok(Some(entries))
            }
            None => {
                tap.after = self.at;
                Ok(None)
            }
        }
    }
}

impl Tap {
    /// Waits until the table runs (the source has applied its pending
    /// changes, feeding them) and returns the source's applied position.
    /// Fails, committing nothing, when the engine stops the tasks first.
    async fn running_at(&mut self) -> Result<Position> {
        loop {
            let (table, at) = self.store.read_consistent(|store| {
                Ok((store.table(&self.table)?, store.applied_lsn(&self.source)?))
            })?;
            match table {
                None => {
                    return Err(PipelineError::UnknownObject {
                        kind: ObjectKind::Table,
                        name: self.table.clone(),
                    });
                }
                Some(t) if t.state.is_hydrated() => return Ok(at),
                Some(_) => {
                    let stopped = *self.stop.borrow()
                        || tokio::select! {
                            _ = tokio::time::sleep(SNAPSHOT_POLL) => false,
                            changed = self.stop.changed() => changed.is_err() || *self.stop.borrow(),
                        };
                    if stopped {
                        return Err(PipelineError::Store {
                            context: "load beside the table's snapshot".into(),
                            message: "the pipeline stopped its tasks before the table ran; nothing of the load is committed, and it starts again".into(),
                        });
                    }
                }
            }
        }
    }
}

fn reader_stopped() -> PipelineError {
    PipelineError::Store {
        context: "read the interface's documents".into(),
        message: "the reading thread stopped before the last document; the load is retried".into(),
    }
}

/// The store's side of [`Documents`]: the applied position and every
/// document of the table, in one read transaction, sent as they are read.
/// Ends early, fine, when the receiver is gone.
fn read_documents(
    state_dir: &Path,
    source: &str,
    table: &str,
    rows: usize,
    tx: &mpsc::Sender<Read>,
) -> Result<()> {
    let store = Store::open(state_dir)?;
    store.read_consistent(|store| {
        let at = store.applied_lsn(source)?;
        let table = store
            .table(table)?
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: table.to_string(),
            })?;
        if tx.blocking_send(Read::At(at)).is_err() {
            return Ok(());
        }
        let mut open = true;
        store.docs_in_chunks(table.id, rows, LOAD_CHUNK_BYTES, |chunk| {
            open = tx.blocking_send(Read::Rows(chunk)).is_ok();
            open
        })?;
        if open {
            let _ = tx.blocking_send(Read::End);
        }
        Ok(())
    })
}

/// A destination of one interface's changes.
///
/// The driver relies on exactly this; every implementation holds it:
///
/// 1. **The position lives in the destination.** [`position`] returns the
///    position of the last write (or load) the destination has durably
///    committed, read from the destination itself, never from the
///    pipeline's state: a pipeline that lost or restored its state cannot
///    make a destination repeat or skip a transaction. `None` means it has
///    never been loaded.
/// 2. **Writes are atomic with their position.** [`load`] and [`write`]
///    each commit what they are given together with the position `at`, as
///    one unit: after any failure or crash either all of it is committed
///    and [`position`] says `at`, or none of it is and [`position`] says
///    what it said before. An error from either leaves the destination in
///    one of those two states; the driver then opens a new session and
///    asks [`position`] again.
/// 3. **Transactions whole and in order.** [`write`] gets consecutive
///    upstream transactions (the entries of one share a position; they are
///    in commit order, each key at most once per transaction) and applies
///    each transaction's changes in turn; a reader of the destination never
///    sees part of one. [`load`] replaces nothing: the driver calls it only
///    on a destination that has no position, with every document of the
///    interface in chunks, then the changes [`Documents::catch_up`] hands
///    over (applied in turn, as [`write`] applies them), as of
///    [`Documents::at`], which is known once [`Documents::next`] said there
///    are no more documents; it commits only after [`Documents::catch_up`]
///    said there are no more changes (an error from either is the load's
///    error), and a reader never sees part of a load either. A destination
///    that needs `at` before the documents leaves
///    [`LOADS_BESIDE_SNAPSHOT`] false: it is then only handed loads whose
///    `at` is known from the start and that have nothing to catch up.
/// 4. **Never twice.** The driver passes only transactions above the
///    destination's position, so a destination needs no deduplication of
///    its own.
///
/// A destination that cannot hold its position inside its own commits (a
/// topic without transactions, say) cannot be a sink.
///
/// [`position`]: Sink::position
/// [`load`]: Sink::load
/// [`write`]: Sink::write
/// [`LOADS_BESIDE_SNAPSHOT`]: Sink::LOADS_BESIDE_SNAPSHOT
pub(crate) trait Sink: Send {
    /// Whether [`Sink::load`] takes documents before [`Documents::at`] is
    /// known, and catches up: a load then runs beside the table's copy.
    const LOADS_BESIDE_SNAPSHOT: bool = false;

    /// The most changes one [`Sink::write`] takes while the sink catches up
    /// from the store's feed (whole upstream transactions: one larger than
    /// this is written alone). A destination whose commits cost a fixed
    /// time of their own takes more at once.
    const CATCH_UP_BATCH: usize = FEED_BATCH;

    /// The destination's committed position, `None` before its first load.
    fn position(&mut self) -> impl Future<Output = Result<Option<Position>>> + Send;

    /// Writes every document of `docs`, its catch-up changes, and
    /// [`Documents::at`]; returns the rows the destination took (its own
    /// triggers or rules may make that differ from [`Documents::rows`]).
    fn load(&mut self, docs: &mut Documents) -> impl Future<Output = Result<u64>> + Send;

    /// Applies consecutive upstream transactions (`entries`, in order) and
    /// records `at`, the last one's position.
    fn write(
        &mut self,
        entries: Vec<FeedEntry>,
        at: Position,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// What a sink task needs.
pub(crate) struct SinkContext {
    pub sink: SinkInfo,
    pub connection: Connection,
    /// `FORMAT AVRO`'s schema registry connection.
    pub registry: Option<Connection>,
    pub state_dir: PathBuf,
    pub interface_id: i64,
    pub table: String,
    pub source: String,
    /// Documents per chunk of the initial load.
    pub load_rows: usize,
    /// The source's applied position.
    pub applied: watch::Receiver<Position>,
    /// Everything at or below this is committed in the sink (or has
    /// nothing for it).
    pub effective: watch::Sender<Position>,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
    /// Where it listens to its table's copy.
    pub taps: Taps,
    /// Set when the task starts for a table still to be copied (see
    /// [`Taps::expect`]).
    pub expected: Option<Expected>,
    /// The source's committed transactions, followed live.
    pub bus: Bus,
}

impl SinkContext {
    /// The sink has committed everything up to `pos` (`wrote`: it wrote
    /// the transaction at `pos` just now): for the source's confirmation
    /// and the status.
    fn committed(&self, pos: Position, wrote: bool) {
        self.status
            .sink_committed(&self.sink.name, &self.source, pos, wrote);
        self.effective.send_replace(pos);
    }
}

/// Runs the sink until `stop`, retrying after failures.
pub(crate) async fn run(mut ctx: SinkContext) {
    let (name, status, stop) = (ctx.sink.name.clone(), ctx.status.clone(), ctx.stop.clone());
    let task = Task {
        kind: ObjectKind::Sink,
        name: &name,
        status: &status,
        stop,
        starting: Some("starting"),
    };
    supervise(
        task,
        &mut ctx,
        // A session that ends in an error because the engine is stopping
        // (a load abandoned uncommitted) has stopped, not failed.
        |ctx| {
            Box::pin(async move {
                let ended = run_once(ctx).await;
                match ended {
                    Err(_) if *ctx.stop.borrow() => Ok(()),
                    other => other,
                }
            })
        },
        |_, _| Verdict::Retry,
    )
    .await
}

/// One session with the destination, until `stop` or a failure: the
/// implementation of [`Sink`] the catalog's kind names.
async fn run_once(ctx: &mut SinkContext) -> Result<()> {
    // Whatever this attempt finds (a position, a failure to start), a copy
    // starting now no longer waits for this sink beyond it.
    let expected = ctx.expected.take();
    match ctx.sink.kind {
        SinkKind::Postgres => {
            let sink = PostgresSink::open(&ctx.sink, &ctx.connection).await?;
            drive(ctx, sink, expected).await
        }
        SinkKind::Kafka => {
            let sink =
                kafka::KafkaSink::open(&ctx.sink, &ctx.connection, ctx.registry.as_ref()).await?;
            drive(ctx, sink, expected).await
        }
    }
}

async fn drive<S: Sink>(
    ctx: &mut SinkContext,
    mut sink: S,
    expected: Option<Expected>,
) -> Result<()> {
    let name = ctx.sink.name.clone();
    let mut store = Store::open(&ctx.state_dir)?;
    let mut pos = match sink.position().await? {
        Some(pos) => {
            refuse_pruned_past(ctx, &store, pos)?;
            pos
        }
        None => match load(ctx, &mut store, &mut sink, expected).await? {
            Some(pos) => pos,
            None => return Ok(()),
        },
    };
    ctx.committed(pos, false);
    ctx.status.set(ObjectKind::Sink, &name, "running", None);
    // Following the bus from before the store is read: every transaction
    // the store has not committed by then is on the bus. Not followed while
    // the sink is behind, so a sink that falls behind makes the bus hold
    // nothing for it.
    // With the receiver: the bytes the bus had published when it was
    // subscribed, then through the last transaction taken.
    let mut bus: Option<(broadcast::Receiver<Arc<Committed>>, u64)> = None;
    loop {
        // From the store's feed: what was committed before the bus was
        // followed (or while the sink had fallen behind it).
        let upto = store.applied_lsn(&ctx.source)?;
        let mut reading = read_feed(store, ctx.interface_id, pos, upto, S::CATCH_UP_BATCH);
        store = loop {
            let (read, entries) = reading.await.map_err(|e| PipelineError::Store {
                context: "read feed".into(),
                message: e.to_string(),
            })?;
            let entries = entries?;
            // A long catch-up stops between its transactions: each one
            // committed its position.
            if *ctx.stop.borrow() {
                return Ok(());
            }
            if entries.is_empty() {
                break read;
            }
            // Whole upstream transactions, in order: written together at
            // the last one's position, while the next batch is read.
            let at = entries.last().map_or(pos, |e| e.pos);
            reading = read_feed(read, ctx.interface_id, at, upto, S::CATCH_UP_BATCH);
            sink.write(entries, at).await?;
            pos = at;
            ctx.committed(pos, true);
            // The bus fills for a receiver taken before this read: let it
            // go once it holds more than a backlog (the store has it all).
            if bus
                .as_ref()
                .is_some_and(|(live, through)| behind(ctx, live, *through))
            {
                bus = None;
            }
        };
        if upto > pos {
            pos = upto;
            ctx.committed(pos, false);
        }
        let Some((live, through)) = bus.as_mut() else {
            // Caught up with what the store had: follow the bus, and read
            // the store once more for what it committed meanwhile.
            let live = ctx.bus.subscribe();
            bus = Some((live, ctx.bus.published()));
            continue;
        };
        match follow(ctx, &mut sink, live, through, &mut pos).await? {
            Followed::Stopped => return Ok(()),
            Followed::Behind => {
                tracing::debug!(sink = %name, position = %pos, "the sink fell behind the bus; reading the store's feed");
                bus = None;
            }
        }
    }
}

/// Refuses a destination at `pos` when the feed's entries after it were
/// pruned: its position went back (a database restored from a backup, a
/// progress record edited), and the changes since are gone from the
/// store, so following on would leave its rows out of date for good. The
/// sink stays `retrying` with this error until it is recreated. (Pruning
/// only deletes what every sink had committed, so a destination whose
/// position never went back is never refused.)
fn refuse_pruned_past(ctx: &SinkContext, store: &Store, pos: Position) -> Result<()> {
    let Some(pruned) = store.feed_pruned(ctx.interface_id)? else {
        return Ok(());
    };
    if pos >= pruned {
        return Ok(());
    }
    let way_out = match ctx.sink.kind {
        SinkKind::Postgres => format!(
            "drop the sink's table {}.{} (the sink creates it and loads every document anew), or DROP SINK {} and CREATE SINK again",
            ctx.sink.target_schema, ctx.sink.target_table, ctx.sink.name
        ),
        SinkKind::Kafka => format!(
            "DROP SINK {} and CREATE SINK again into a new topic (its initial load writes every document)",
            ctx.sink.name
        ),
    };
    Err(PipelineError::Refused {
        sqlstate: "55000",
        primary: format!(
            "sink \"{}\" is at position {pos}, but the changes of its materialized view up to {pruned} were pruned from the store: its destination went back (restored from a backup?), and what changed since cannot be replayed",
            ctx.sink.name
        ),
        detail: None,
        hint: Some(format!("To bring it up to date, {way_out}.")),
    })
}

/// The feed's transactions of `interface` after `after` and up to `upto`,
/// at most `limit` changes (whole transactions), read on a blocking
/// thread: a sink catching up from the store reads its next batch while it
/// writes the last one. The store comes back with them.
fn read_feed(
    store: Store,
    interface: i64,
    after: Position,
    upto: Position,
    limit: usize,
) -> tokio::task::JoinHandle<(Store, Result<Vec<FeedEntry>>)> {
    tokio::task::spawn_blocking(move || {
        let entries = store.feed(interface, after, upto, limit);
        (store, entries)
    })
}

/// Transactions the bus may hold for a sink before it reads the store's
/// feed instead (and the bus holds nothing for it): what a slow sink costs
/// in memory stays bounded, whatever the source's pace.
const BUS_BACKLOG: usize = 1_024;

/// ... or this many bytes of keys and documents ([`Committed::size`]),
/// whichever comes first: a backlog of large transactions is bounded too.
const BUS_BACKLOG_BYTES: u64 = 8 << 20;

/// Whether the bus holds more than a backlog for `bus`, whose last
/// transaction taken was published through `through` bytes.
fn behind(ctx: &SinkContext, bus: &broadcast::Receiver<Arc<Committed>>, through: u64) -> bool {
    bus.len() > BUS_BACKLOG || ctx.bus.published().saturating_sub(through) > BUS_BACKLOG_BYTES
}

/// How following the bus ended.
enum Followed {
    Stopped,
    /// The sink fell more than [`BUS_BACKLOG`] transactions or
    /// [`BUS_BACKLOG_BYTES`] behind (or
    /// more than [`crate::bus::CAPACITY`]: some are gone): it reads the
    /// store's feed, then follows again.
    Behind,
}

/// What one batch took from the bus.
enum Taken {
    /// A full batch: there may be more.
    More,
    /// Everything the bus held.
    All,
    Ended(Followed),
}

/// Follows the source's committed transactions on the bus, from `pos`:
/// the interface's changes are handed to the sink from memory, as the
/// source publishes them, never read back from the store. The source
/// publishes a group's transactions before it moves its applied position
/// (`stream::flush`), so once the sink has taken everything the bus holds
/// after seeing a position, it has every transaction up to that position,
/// and may record it as committed (the transactions with nothing for this
/// interface, and those with no document at all, which are not published).
async fn follow<S: Sink>(
    ctx: &mut SinkContext,
    sink: &mut S,
    bus: &mut broadcast::Receiver<Arc<Committed>>,
    through: &mut u64,
    pos: &mut Position,
) -> Result<Followed> {
    loop {
        let applied = *ctx.applied.borrow_and_update();
        loop {
            if behind(ctx, bus, *through) {
                return Ok(Followed::Behind);
            }
            let mut entries = Vec::new();
            let mut at = *pos;
            let mut taken = Taken::More;
            while entries.len() < FEED_BATCH {
                match bus.try_recv() {
                    Ok(committed) => {
                        *through = committed.published_through;
                        if committed.source != ctx.source || committed.pos <= *pos {
                            continue;
                        }
                        at = committed.pos;
                        entries.extend(
                            committed
                                .changes
                                .iter()
                                .filter(|c| c.interface == ctx.interface_id)
                                .map(|c| FeedEntry {
                                    pos: committed.pos,
                                    key: c.key.clone(),
                                    old: c.old.clone(),
                                    new: c.new.clone(),
                                }),
                        );
                    }
                    Err(broadcast::error::TryRecvError::Empty) => {
                        taken = Taken::All;
                        break;
                    }
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                        taken = Taken::Ended(Followed::Behind);
                        break;
                    }
                    Err(broadcast::error::TryRecvError::Closed) => {
                        taken = Taken::Ended(Followed::Stopped);
                        break;
                    }
                }
            }
            let wrote = !entries.is_empty();
            if wrote {
                sink.write(entries, at).await?;
            }
            if at > *pos {
                *pos = at;
                ctx.committed(at, wrote);
            }
            match taken {
                Taken::Ended(ended) => return Ok(ended),
                Taken::All => break,
                Taken::More => {}
            }
        }
        if applied > *pos {
            *pos = applied;
            ctx.committed(applied, false);
        }
        tokio::select! {
            changed = ctx.applied.changed() => {
                if changed.is_err() {
                    return Ok(Followed::Stopped);
                }
            }
            _ = ctx.stop.changed() => return Ok(Followed::Stopped),
        }
    }
}

/// The initial load (see the module's "Initial loads"): beside the
/// table's copy when the destination can and a copy starts while the sink
/// listens, otherwise from the store once the table runs. Returns the
/// position loaded, or `None` when `stop` came first.
async fn load<S: Sink>(
    ctx: &mut SinkContext,
    store: &mut Store,
    sink: &mut S,
    expected: Option<Expected>,
) -> Result<Option<Position>> {
    let name = ctx.sink.name.clone();
    ctx.status.set(
        ObjectKind::Sink,
        &name,
        "waiting for its table's snapshot",
        None,
    );
    let listen = || S::LOADS_BESIDE_SNAPSHOT.then(|| ctx.taps.listen(&ctx.table));
    let mut tap = match expected {
        Some(expected) if S::LOADS_BESIDE_SNAPSHOT => Some(expected.listen()),
        _ => listen(),
    };
    loop {
        let table = store.table(&ctx.table)?;
        if table.is_some_and(|t| t.state.is_hydrated()) {
            drop(tap);
            ctx.status.set(
                ObjectKind::Sink,
                &name,
                "loading its table's documents",
                None,
            );
            let mut docs =
                Documents::read(&ctx.state_dir, &ctx.source, &ctx.table, ctx.load_rows).await?;
            let written = sink.load(&mut docs).await?;
            tracing::info!(sink = %name, documents = docs.rows(), written, position = %docs.at(), "sink loaded");
            return Ok(Some(docs.at()));
        }
        let tapped = async {
            match tap.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let first = tokio::select! {
            first = tapped => first,
            _ = tokio::time::sleep(SNAPSHOT_POLL) => continue,
            _ = ctx.stop.changed() => return Ok(None),
        };
        let (Some(first), Some(rx)) = (first, tap.take()) else {
            // The copy that took this listener stopped before its
            // first chunk: listen to the next one.
            tap = listen();
            continue;
        };
        ctx.status.set(
            ObjectKind::Sink,
            &name,
            "loading its table's documents beside its snapshot",
            None,
        );
        let mut docs = Documents::tapped(ctx, rx, first)?;
        match sink.load(&mut docs).await {
            Ok(written) => {
                tracing::info!(sink = %name, documents = docs.rows(), written, position = %docs.at(), "sink loaded beside the snapshot");
                return Ok(Some(docs.at()));
            }
            Err(e) if docs.interrupted() => {
                tracing::info!(sink = %name, error = %e, "the table's copy stopped; the sink loads again");
                tap = listen();
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{TableInfo, TableState};

    /// A load beside a snapshot waits for its table to run, which only the
    /// source's stream makes happen; when the engine stops its tasks (to
    /// restart them after a catalog change, the stream included) the wait
    /// ends, or the restart would wait for it forever.
    #[tokio::test]
    async fn waiting_for_the_table_to_run_ends_when_the_engine_stops() {
        let store = Store::in_memory_with_source();
        store
            .insert_table(&TableInfo {
                state: TableState::Copied,
                ..TableInfo::running_for_test("t_v1", Vec::new())
            })
            .unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let (_copy, rx) = mpsc::channel(1);
        let mut tap = Tap {
            rx,
            first: None,
            store,
            source: "src".into(),
            table: "t_v1".into(),
            interface: 1,
            after: Position::ZERO,
            interrupted: false,
            stop,
        };
        let waiting = tokio::spawn(async move { tap.running_at().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "the table is only copied");
        stop_tx.send_replace(true);
        let ended = tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("the wait ends once the engine stops")
            .unwrap();
        let error = ended.unwrap_err().to_string();
        assert!(
            error.contains("stopped its tasks before the table ran"),
            "{error}"
        );
    }
}
