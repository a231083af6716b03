//! Sinks: destinations kept equal to an interface, exactly once.
//!
//! The driver here is the same for every destination: it waits for the
//! interface's table to be copied, has the destination load the
//! interface's documents as of the source's applied position when it has
//! never been loaded, then hands it the interface's feed, whole upstream
//! transactions in commit order, as the source applies them, and reports
//! how far the destination has committed (the source confirms its slot
//! only up to what every sink has committed). A destination implements
//! [`Sink`]; [`postgres::PostgresSink`] is the PostgreSQL table sink.

mod postgres;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use crate::position::Position;
use tokio::sync::watch;

use crate::config::Connection;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;
use crate::store::{FeedEntry, SinkInfo, SinkKind, Store};
use crate::supervise::{Task, Verdict, supervise};

pub use postgres::PROGRESS_TABLE;
pub(crate) use postgres::{PostgresSink, Targets, ensure_tables, progress};

/// Feed entries read at once (whole transactions are never split).
const FEED_BATCH: usize = 10_000;

/// Key and document pairs, as the store holds them.
pub(crate) type Documents = Vec<(Vec<u8>, Vec<u8>)>;

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
///    interface as of `at`.
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
pub(crate) trait Sink: Send {
    /// The destination's committed position, `None` before its first load.
    fn position(&mut self) -> impl Future<Output = Result<Option<Position>>> + Send;

    /// Writes every document of the interface as of `at`, and `at`.
    fn load(&mut self, docs: &Documents, at: Position) -> impl Future<Output = Result<()>> + Send;

    /// Applies consecutive upstream transactions (`entries`, in order) and
    /// records `at`, the last one's position.
    fn write(
        &mut self,
        entries: &[FeedEntry],
        at: Position,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// What a sink task needs.
pub(crate) struct SinkContext {
    pub sink: SinkInfo,
    pub connection: Connection,
    pub state_dir: PathBuf,
    pub interface_id: i64,
    pub table: String,
    pub source: String,
    /// The source's applied position.
    pub applied: watch::Receiver<Position>,
    /// Everything at or below this is committed in the sink (or has
    /// nothing for it).
    pub effective: watch::Sender<Position>,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
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
        |ctx| Box::pin(run_once(ctx)),
        |_, _| Verdict::Retry,
    )
    .await
}

/// One session with the destination, until `stop` or a failure: the
/// implementation of [`Sink`] the catalog's kind names.
async fn run_once(ctx: &mut SinkContext) -> Result<()> {
    match ctx.sink.kind {
        SinkKind::Postgres => {
            let sink = PostgresSink::open(&ctx.sink, &ctx.connection).await?;
            drive(ctx, sink).await
        }
    }
}

async fn drive(ctx: &mut SinkContext, mut sink: impl Sink) -> Result<()> {
    let name = ctx.sink.name.clone();
    let store = Store::open(&ctx.state_dir)?;
    let mut pos = match sink.position().await? {
        Some(pos) => pos,
        None => {
            ctx.status.set(
                ObjectKind::Sink,
                &name,
                "waiting for its table's snapshot",
                None,
            );
            loop {
                let table = store.table(&ctx.table)?;
                if table.is_some_and(|t| t.state.is_hydrated()) {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = ctx.stop.changed() => return Ok(()),
                }
            }
            let (at, docs) = read_initial(ctx, &store)?;
            sink.load(&docs, at).await?;
            tracing::info!(sink = %name, rows = docs.len(), position = %at, "sink loaded");
            at
        }
    };
    ctx.effective.send_replace(pos);
    ctx.status.set(ObjectKind::Sink, &name, "running", None);
    loop {
        let upto = *ctx.applied.borrow_and_update();
        loop {
            let entries = store.feed(ctx.interface_id, pos, upto, FEED_BATCH)?;
            if entries.is_empty() {
                break;
            }
            // Whole upstream transactions, in order: written together at
            // the last one's position.
            let at = entries.last().map_or(pos, |e| e.pos);
            sink.write(&entries, at).await?;
            pos = at;
            ctx.effective.send_replace(pos);
        }
        if upto > pos {
            pos = upto;
            ctx.effective.send_replace(pos);
        }
        tokio::select! {
            changed = ctx.applied.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            _ = ctx.stop.changed() => return Ok(()),
        }
    }
}

/// The interface's documents and the source position they are at, read in
/// one SQLite transaction.
fn read_initial(ctx: &SinkContext, store: &Store) -> Result<(Position, Documents)> {
    let fail = |e: rusqlite::Error| PipelineError::store("read the interface's documents", e);
    // One read transaction: the documents and the position they are at.
    store.conn.execute_batch("BEGIN").map_err(fail)?;
    let read = (|| {
        let at = store.applied_lsn(&ctx.source)?;
        let table = store
            .table(&ctx.table)?
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: ctx.table.clone(),
            })?;
        Ok::<_, PipelineError>((at, store.docs(table.id)?))
    })();
    store.conn.execute_batch("COMMIT").map_err(fail)?;
    read
}
