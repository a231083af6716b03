//! Sinks: destinations kept equal to an interface, exactly once.
//!
//! The driver here is the same for every destination: it waits for the
//! interface's table to be copied, has the destination load the
//! interface's documents as of the source's applied position when it has
//! never been loaded (streamed from the store in chunks, [`Documents`], so
//! a load holds a few chunks in memory whatever the table's size), then
//! hands it the interface's feed, whole upstream
//! transactions in commit order, as the source applies them, and reports
//! how far the destination has committed (the source confirms its slot
//! only up to what every sink has committed). A destination implements
//! [`Sink`]; [`postgres::PostgresSink`] is the PostgreSQL table sink,
//! [`kafka::KafkaSink`] the Kafka topic sink.

mod kafka;
mod postgres;
mod registry;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::position::Position;
use tokio::sync::{mpsc, watch};

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
pub use postgres::PROGRESS_TABLE;
pub(crate) use postgres::{PostgresSink, Targets, ensure_tables, progress};

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

/// Every document of an interface as of one position, [`Documents::at`],
/// read from the store in key order, in chunks, by a thread of its own
/// inside one store read transaction (one consistent cut, whatever the
/// source commits meanwhile), a few chunks ahead of the destination.
pub(crate) struct Documents {
    at: Position,
    chunks: mpsc::Receiver<Read>,
    rows: u64,
    ended: bool,
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
                chunks,
                rows: 0,
                ended: false,
            }),
            Some(Read::Failed(e)) => Err(e),
            _ => Err(reader_stopped()),
        }
    }

    /// The source position the documents are at.
    pub fn at(&self) -> Position {
        self.at
    }

    /// The documents read so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The next chunk (never empty), or `None` once every document was
    /// read. A destination commits a load only after `None`.
    pub async fn next(&mut self) -> Result<Option<Chunk>> {
        if self.ended {
            return Ok(None);
        }
        match self.chunks.recv().await {
            Some(Read::Rows(chunk)) => {
                self.rows += chunk.len() as u64;
                Ok(Some(chunk))
            }
            Some(Read::End) => {
                self.ended = true;
                Ok(None)
            }
            Some(Read::Failed(e)) => Err(e),
            Some(Read::At(_)) | None => Err(reader_stopped()),
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
///    interface as of [`Documents::at`], in chunks; it commits only after
///    [`Documents::next`] said there are no more (an error from it is the
///    load's error), and a reader never sees part of a load either.
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

    /// Writes every document of `docs`, and [`Documents::at`]; returns
    /// the rows the destination took (its own triggers or rules may make
    /// that differ from [`Documents::rows`]).
    fn load(&mut self, docs: &mut Documents) -> impl Future<Output = Result<u64>> + Send;

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
        SinkKind::Kafka => {
            let sink =
                kafka::KafkaSink::open(&ctx.sink, &ctx.connection, ctx.registry.as_ref()).await?;
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
                    _ = tokio::time::sleep(SNAPSHOT_POLL) => {}
                    _ = ctx.stop.changed() => return Ok(()),
                }
            }
            ctx.status.set(
                ObjectKind::Sink,
                &name,
                "loading its table's documents",
                None,
            );
            let mut docs =
                Documents::read(&ctx.state_dir, &ctx.source, &ctx.table, ctx.load_rows).await?;
            let at = docs.at();
            let written = sink.load(&mut docs).await?;
            tracing::info!(sink = %name, documents = docs.rows(), written, position = %at, "sink loaded");
            at
        }
    };
    ctx.effective.send_replace(pos);
    ctx.status.sink_committed(&name, &ctx.source, pos, false);
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
            ctx.status.sink_committed(&name, &ctx.source, pos, true);
            ctx.effective.send_replace(pos);
        }
        if upto > pos {
            pos = upto;
            ctx.status.sink_committed(&name, &ctx.source, pos, false);
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
