//! Subscriptions: an interface's documents and changes as a stream of JSON
//! lines, from a consistent starting position, then live
//! (`evolve subscribe NAME`, `GET /subscribe/{name}`, [`subscribe`]).
//!
//! # Lines
//!
//! Every item of a [`Subscription`] is one JSON object on one line (JSON
//! Lines, UTF-8, ending in `\n`), with a `type` tag first. The types are:
//!
//! ```text
//! {"type":"change","ts":"0/16B3748","diff":1,"key":{"id":4},"data":{"id":4,"customer":"dee"}}
//! {"type":"change","ts":"0/16B3748","diff":-1,"key":{"id":1},"data":{"id":1,"customer":"ada"}}
//! {"type":"progress","ts":"0/16B3748"}
//! {"type":"error","code":"53400","message":"subscriber fell behind by 4105 transactions and was cut off","hint":"..."}
//! ```
//!
//! - `change`: one document entering (`diff` 1) or leaving (`diff` -1) the
//!   interface at position `ts`. `key` is the key document and `data` the
//!   document (for -1, the one that leaves), exactly the interface's
//!   documents: `coalesce(jsonb_strip_nulls(to_jsonb(row)), '{}')` in
//!   PostgreSQL's jsonb text (keys in jsonb order, no spaces), embedded as
//!   they are stored. An insert is one +1, a delete one -1, and an update
//!   a -1 of the old document followed by a +1 of the new one at the same
//!   `ts`. Members come in the order `type`, `ts`, `diff`, `key`, `data`.
//! - `progress`: every change at or before `ts` has been sent, and every
//!   later line has a larger `ts`. It follows each upstream transaction
//!   that changed the interface; transactions that did not (other tables
//!   of the source, updates that left every document as it was) move it
//!   at most once per second. A reader that applies changes only when it
//!   sees their progress line applies each upstream transaction
//!   atomically.
//! - `error`: the last line of a stream that could not go on: `code` (a
//!   SQLSTATE), `message`, and `detail` and `hint` when there are any.
//!   `53400` is a reader that fell behind (see below); `42704` an
//!   interface dropped while subscribed; `XX000` the embedded store
//!   failing.
//!
//! Readers should ignore types and members they do not know: more may
//! come. Documents are always JSON text (bytea values are hex strings in
//! them), so nothing needs base64.
//!
//! # Positions
//!
//! `ts` is an upstream position (the end LSN of a transaction's commit
//! record) in PostgreSQL's `pg_lsn` text form, `X/Y` with both halves in
//! upper-case hexadecimal. Positions order as the pair of numbers, not as
//! strings (`0/9` < `0/10`).
//!
//! # Where a subscription starts
//!
//! A subscription first follows the pipeline's change bus ([`crate::bus`]),
//! then reads, in one read transaction of the embedded store, the
//! interface, its table, the applied position `P` (the source's applied
//! position, or the table's snapshot point when that is later: the
//! documents are exactly the interface at `P`), and whatever it is asked
//! to send. Transactions at or before `P` are skipped on the bus and every
//! later one is sent: nothing is lost or sent twice between the two.
//!
//! - Plain: `{"type":"progress","ts":P}`, then live.
//! - `snapshot`: every document as a +1 change at `P`, in key order, then
//!   the progress line at `P`, then live.
//! - `as_of` `T` (at most `P`, at least the interface's feed horizon): the
//!   interface's changes after `T`, from its change feed, each transaction
//!   followed by its progress line, then progress at `P`, then live. With
//!   `snapshot`, first the documents as they were at `T` (the current ones,
//!   with each key changed after `T` taken as it was before its first
//!   change after `T`) as +1 changes at `T` and progress at `T`.
//!
//! The feed horizon: the change feed keeps each interface's changes until
//! every sink has committed them and they are older (by upstream commit
//! time) than `retain_history` in `evolve.toml` (ten minutes by default);
//! the horizon is the highest position pruned, and also no earlier than
//! where the feed of the interface starts (recorded once its first table
//! runs; an APPLY REPLACEMENT since does not move it, since the feed goes
//! on through the swap). An
//! `as_of` before it is refused ([`SubscribeError::TooOld`]); one after `P`
//! too ([`SubscribeError::Ahead`]), after waiting up to a second for `P`
//! to be recorded (the store records positions of transactions that
//! changed nothing up to 200 ms late).
//!
//! While the interface's table is not hydrated yet (its snapshot is being
//! copied), the subscription sends nothing and waits; it starts as above
//! once the table runs (an `as_of` out of range is then an `error` line,
//! since the subscription has already started).
//!
//! # Slow readers, many readers
//!
//! Any number of subscriptions may run; each has its own store connection
//! and its place on the bus, and the pipeline never waits for one. A
//! subscription more than [`bus::CAPACITY`] transactions behind the bus
//! goes on sending what it has (a snapshot from its read transaction, the
//! transaction whose lines it is sending) while the reader takes lines,
//! then reads what it missed from the change feed (after its last
//! progress line, as `as_of` would) and follows the bus again. It is cut
//! off when the reader takes nothing for [`READER_STUCK`] while it is
//! behind, when the feed no longer holds its last progress position, or
//! when it falls behind again without a progress line since it last read
//! the feed: an `error` line with code `53400` ends it, and its hint
//! names the last progress position it sent, from which a new
//! subscription can resume with `as_of`. At most [`LINES_BUFFERED`] lines wait for the
//! reader; a snapshot is read from the store as the reader takes it (the
//! read transaction stays open meanwhile) rather than held in memory.
//! Dropping the [`Subscription`] ends it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::position::Position;
use bytes::Bytes;
use futures_util::Stream;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::runtime::Handle;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::bus::{self, Bus, Committed};
use crate::error::{ObjectKind, PipelineError};
use crate::pipeline::Pipeline;
use crate::store::Store;

/// Lines that may wait for the reader of a subscription.
pub const LINES_BUFFERED: usize = 256;

/// The SQLSTATE of the error line that cuts off a reader that fell behind
/// (`configuration_limit_exceeded`).
pub const FELL_BEHIND: &str = "53400";

/// Transactions that change nothing for the interface move its progress
/// at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How often a live subscription checks that its interface still exists.
const CATALOG_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How often a subscription waiting for its table looks again.
const WAIT_RETRY: Duration = Duration::from_millis(200);

/// How long an `as_of` after the recorded applied position is given to be
/// recorded before it is refused.
const AHEAD_GRACE: Duration = Duration::from_secs(1);

/// How often a sender blocked on a slow reader checks whether it fell
/// behind.
const LAG_CHECK_EVERY: Duration = Duration::from_millis(100);

/// How long a subscription behind the bus waits for a reader that takes
/// nothing before it stops sending.
pub const READER_STUCK: Duration = Duration::from_secs(5);

/// What to send before the live changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// Send every document first (as of `as_of`, or of the current
    /// position).
    pub snapshot: bool,
    /// Start at this position rather than at the current one.
    pub as_of: Option<Position>,
}

/// Why a subscription could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubscribeError {
    /// The interface does not exist, or the store failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// `as_of` is before the interface's feed horizon.
    #[error("{}", render(self))]
    TooOld {
        /// The interface.
        interface: String,
        /// The position asked for.
        as_of: Position,
        /// The earliest position the feed can start from.
        horizon: Position,
    },
    /// `as_of` is after the pipeline's applied position.
    #[error("{}", render(self))]
    Ahead {
        /// The interface.
        interface: String,
        /// The position asked for.
        as_of: Position,
        /// The position the interface's documents are at.
        applied: Position,
    },
}

impl SubscribeError {
    /// The SQLSTATE: the pipeline error's, or `22023`
    /// (`invalid_parameter_value`) for an `as_of` out of range.
    pub fn code(&self) -> &'static str {
        match self {
            SubscribeError::Pipeline(PipelineError::UnknownObject { .. }) => "42704",
            SubscribeError::Pipeline(_) => "XX000",
            SubscribeError::TooOld { .. } | SubscribeError::Ahead { .. } => "22023",
        }
    }

    /// The primary line.
    pub fn primary(&self) -> String {
        match self {
            SubscribeError::Pipeline(e) => e.primary(),
            SubscribeError::TooOld {
                interface,
                as_of,
                horizon,
            } => format!(
                "as_of {as_of} is before the retained history of materialized view \"{interface}\", which starts after {horizon}"
            ),
            SubscribeError::Ahead {
                interface,
                as_of,
                applied,
            } => format!(
                "as_of {as_of} is ahead of the pipeline's applied position {applied} for materialized view \"{interface}\""
            ),
        }
    }

    /// The detail line, when there is one.
    pub fn detail(&self) -> Option<String> {
        match self {
            SubscribeError::Pipeline(e) => e.detail(),
            SubscribeError::TooOld { horizon, .. } => Some(format!(
                "Changes at or before {horizon} are no longer in the change feed: they were pruned once every sink had them and they were older than retain_history, or they came before the feed started."
            )),
            SubscribeError::Ahead { .. } => None,
        }
    }

    /// The hint line, when there is one.
    pub fn hint(&self) -> Option<String> {
        match self {
            SubscribeError::Pipeline(e) => e.hint(),
            SubscribeError::TooOld { horizon, .. } => Some(format!(
                "Subscribe with --snapshot (snapshot=true) and no --as-of, or with --as-of {horizon} or later; to keep more history, raise retain_history in evolve.toml."
            )),
            SubscribeError::Ahead { .. } => Some(
                "Use a position a subscription reported (a progress line's ts), or subscribe without --as-of."
                    .into(),
            ),
        }
    }
}

fn render(e: &SubscribeError) -> String {
    let mut out = format!("ERROR: {}", e.primary());
    if let Some(detail) = e.detail() {
        out.push_str("\nDETAIL: ");
        out.push_str(&detail);
    }
    if let Some(hint) = e.hint() {
        out.push_str("\nHINT: ");
        out.push_str(&hint);
    }
    out
}

// ------------------------------------------------------------------ lines

fn change_line(ts: Position, diff: i8, key: &[u8], data: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(64 + key.len() + data.len());
    line.extend_from_slice(b"{\"type\":\"change\",\"ts\":\"");
    line.extend_from_slice(ts.to_string().as_bytes());
    line.extend_from_slice(if diff > 0 {
        b"\",\"diff\":1,\"key\":"
    } else {
        b"\",\"diff\":-1,\"key\":"
    });
    line.extend_from_slice(key);
    line.extend_from_slice(b",\"data\":");
    line.extend_from_slice(data);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn progress_line(ts: Position) -> Bytes {
    Bytes::from(format!("{{\"type\":\"progress\",\"ts\":\"{ts}\"}}\n"))
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn error_line(code: &str, message: &str, detail: Option<&str>, hint: Option<&str>) -> Bytes {
    let mut line = format!(
        "{{\"type\":\"error\",\"code\":{},\"message\":{}",
        json_string(code),
        json_string(message)
    );
    if let Some(detail) = detail {
        line.push_str(",\"detail\":");
        line.push_str(&json_string(detail));
    }
    if let Some(hint) = hint {
        line.push_str(",\"hint\":");
        line.push_str(&json_string(hint));
    }
    line.push_str("}\n");
    Bytes::from(line)
}

/// The lines of one change: -1 of the old document, +1 of the new one.
fn change_lines(
    ts: Position,
    key: &[u8],
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> [Option<Bytes>; 2] {
    [
        old.map(|doc| change_line(ts, -1, key, doc)),
        new.map(|doc| change_line(ts, 1, key, doc)),
    ]
}

// ----------------------------------------------------------- subscription

/// A running subscription: its lines, in order (see the module docs).
/// Also a [`Stream`] of them. Dropping it ends the subscription.
pub struct Subscription {
    lines: mpsc::Receiver<Bytes>,
}

impl Subscription {
    /// The next line, or `None` when the subscription has ended (after
    /// an error line, or when the pipeline is gone).
    pub async fn next_line(&mut self) -> Option<Bytes> {
        self.lines.recv().await
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

impl Stream for Subscription {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.lines.poll_recv(cx)
    }
}

/// Subscribes to interface `interface` of `pipeline` (which must be
/// running, or be run, for anything past the start to arrive). Fails when
/// the interface does not exist or `as_of` is out of range; once it
/// returns, problems arrive as an `error` line.
pub async fn subscribe(
    pipeline: &Pipeline,
    interface: &str,
    opts: SubscribeOptions,
) -> Result<Subscription, SubscribeError> {
    let (out, lines) = mpsc::channel(LINES_BUFFERED);
    let follower = Follower {
        bus: pipeline.bus().clone(),
        state_dir: pipeline.config().state_dir.clone(),
        name: interface.to_string(),
        opts,
        out,
    };
    match follower.begin().await? {
        Begun::Waiting => {
            tokio::spawn(follower.wait_then_follow());
        }
        Begun::Ready(start, catch_up) => {
            tokio::spawn(follower.follow(start, catch_up));
        }
    }
    Ok(Subscription { lines })
}

type BusReceiver = broadcast::Receiver<Arc<Committed>>;

/// Where a subscription starts, as read in its read transaction.
#[derive(Clone, Debug)]
struct Start {
    /// The interface's id (its changes on the bus carry it).
    interface: i64,
    /// Its table's id.
    table: i64,
    /// The table's source.
    source: String,
    /// `P`: the position of the documents read.
    at: Position,
}

/// What the read transaction found.
enum Found {
    /// The table is not hydrated yet.
    Waiting,
    /// Lines are being sent from `Start`.
    Ready(Start),
}

/// How sending the start of a subscription (in the blocking task) ended.
enum CatchUp {
    /// Everything up to `P` was sent.
    Done,
    /// The reader went away.
    ReaderGone,
    /// The subscription is this many transactions behind the bus and the
    /// reader took nothing for [`READER_STUCK`].
    Stuck(usize),
    /// The store failed.
    Failed(PipelineError),
}

/// The blocking task's result: the bus receiver back, the store
/// connection for later checks, and how it ended.
type Blocking = (BusReceiver, Option<Store>, CatchUp, Option<Position>);

enum Begun {
    Waiting,
    Ready(Start, JoinHandle<Blocking>),
}

/// What a live subscription waits for.
enum Event {
    /// Time to check that the interface still exists.
    Check,
    /// Time to send the progress of transactions that changed nothing.
    ProgressDue,
    /// A transaction from the bus (or why there is none).
    Received(Result<Arc<Committed>, broadcast::error::RecvError>),
}

/// Why sending stopped.
enum Stop {
    ReaderGone,
    /// Behind the bus by this many transactions, the reader taking nothing.
    Stuck(usize),
    Failed(PipelineError),
}

impl From<rusqlite::Error> for Stop {
    fn from(e: rusqlite::Error) -> Stop {
        Stop::Failed(PipelineError::store("read a subscription's start", e))
    }
}

struct Follower {
    bus: Bus,
    state_dir: PathBuf,
    name: String,
    opts: SubscribeOptions,
    out: mpsc::Sender<Bytes>,
}

impl Follower {
    /// Follows the bus, then reads the start in a blocking task, which
    /// goes on sending the lines up to `P` once the start is known.
    async fn begin(&self) -> Result<Begun, SubscribeError> {
        let deadline = Instant::now() + AHEAD_GRACE;
        let mut bus = self.bus.subscribe();
        loop {
            let (found_tx, found_rx) = oneshot::channel();
            let job = Job {
                state_dir: self.state_dir.clone(),
                name: self.name.clone(),
                opts: self.opts,
                out: self.out.clone(),
                handle: Handle::current(),
            };
            let task = tokio::task::spawn_blocking(move || job.run(bus, found_tx));
            match found_rx.await {
                Ok(Ok(Found::Ready(start))) => return Ok(Begun::Ready(start, task)),
                Ok(Ok(Found::Waiting)) => return Ok(Begun::Waiting),
                Ok(Err(SubscribeError::Ahead { .. })) if Instant::now() < deadline => {
                    bus = match task.await {
                        Ok((bus, ..)) => bus,
                        Err(_) => self.bus.subscribe(),
                    };
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(SubscribeError::Pipeline(PipelineError::Store {
                        context: "start a subscription".into(),
                        message: "the reading task failed".into(),
                    }));
                }
            }
        }
    }

    /// Waits for the interface's table to be hydrated, then follows.
    async fn wait_then_follow(self) {
        loop {
            tokio::select! {
                _ = self.out.closed() => return,
                _ = tokio::time::sleep(WAIT_RETRY) => {}
            }
            match self.begin().await {
                Ok(Begun::Waiting) => {}
                Ok(Begun::Ready(start, catch_up)) => return self.follow(start, catch_up).await,
                Err(e) => {
                    let detail = e.detail();
                    let hint = e.hint();
                    let line =
                        error_line(e.code(), &e.primary(), detail.as_deref(), hint.as_deref());
                    let _ = self.out.send(line).await;
                    return;
                }
            }
        }
    }

    /// Follows from `start` ([`Follower::follow_from`]); a subscription
    /// that falls behind the bus at the end of a transaction reads what it
    /// missed from the change feed, after its last progress line, and
    /// follows again, as a subscription `as_of` that position would. It
    /// is cut off when it fell behind in the middle of a transaction's
    /// lines, when the feed no longer holds that position, or when it has
    /// sent no progress since it last read the feed (a reader that takes
    /// nothing).
    async fn follow(mut self, start: Start, catch_up: JoinHandle<Blocking>) {
        let mut next = Some((start, catch_up));
        let mut read_feed_at: Option<Position> = None;
        while let Some((start, catch_up)) = next.take() {
            let Some((behind, sent, boundary)) = self.follow_from(start, catch_up).await else {
                return;
            };
            // The reader has everything up to the feed's start too.
            let last_progress = sent.or(read_feed_at);
            if !boundary || last_progress.is_none() || last_progress == read_feed_at {
                return self.cut_off(behind, last_progress).await;
            }
            self.opts = SubscribeOptions {
                snapshot: false,
                as_of: last_progress,
            };
            match self.begin().await {
                Ok(Begun::Ready(start, catch_up)) => {
                    tracing::debug!(
                        materialized_view = %self.name,
                        behind,
                        "subscriber fell behind the bus; reading the change feed after its last progress"
                    );
                    read_feed_at = last_progress;
                    next = Some((start, catch_up));
                }
                _ => return self.cut_off(behind, last_progress).await,
            }
        }
    }

    /// Waits for the lines up to `P` to be sent, then sends the bus's
    /// transactions after `P` until the reader goes, falls behind, or the
    /// interface is dropped. Falling behind returns how far, the last
    /// progress position sent, and whether it was at a transaction's end.
    async fn follow_from(
        &self,
        start: Start,
        catch_up: JoinHandle<Blocking>,
    ) -> Option<(usize, Option<Position>, bool)> {
        let Ok((mut bus, mut store, result, mut last_progress)) = catch_up.await else {
            let line = error_line(
                "XX000",
                "the subscription's reading task failed",
                None,
                None,
            );
            let _ = self.out.send(line).await;
            return None;
        };
        match result {
            CatchUp::Done => {}
            CatchUp::ReaderGone => return None,
            CatchUp::Stuck(behind) => return Some((behind, last_progress, false)),
            CatchUp::Failed(e) => {
                self.fail(&e).await;
                return None;
            }
        }
        let mut progressed = Instant::now();
        let mut accepted_at = Instant::now();
        // A position past the last progress line, of transactions that
        // did not change the interface.
        let mut unsent: Option<Position> = None;
        let mut check =
            tokio::time::interval_at(Instant::now() + CATALOG_CHECK_EVERY, CATALOG_CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let behind = bus.len();
            if behind > bus::CAPACITY {
                return Some((behind, last_progress, true));
            }
            let event = tokio::select! {
                biased;
                _ = self.out.closed() => return None,
                _ = check.tick() => Event::Check,
                _ = tokio::time::sleep_until(progressed + PROGRESS_EVERY), if unsent.is_some() => {
                    Event::ProgressDue
                }
                received = bus.recv() => Event::Received(received),
            };
            let mut lines: Vec<Bytes> = Vec::new();
            // The position of the progress line that ends `lines`.
            let progress = match event {
                Event::Check => {
                    let exists =
                        interface_exists(&mut store, &self.state_dir, start.interface, &self.name)
                            .await;
                    match exists {
                        Ok(true) => continue,
                        Ok(false) => {
                            let message =
                                format!("{} \"{}\" was dropped", ObjectKind::Interface, self.name);
                            let line = error_line("42704", &message, None, None);
                            let _ = self.out.send(line).await;
                            return None;
                        }
                        Err(e) => {
                            self.fail(&e).await;
                            return None;
                        }
                    }
                }
                Event::ProgressDue => unsent.take(),
                Event::Received(Ok(committed)) => {
                    if committed.source != start.source || committed.pos <= start.at {
                        continue;
                    }
                    for change in &committed.changes {
                        if change.interface != start.interface {
                            continue;
                        }
                        let [old, new] = change_lines(
                            committed.pos,
                            &change.key,
                            change.old.as_deref(),
                            change.new.as_deref(),
                        );
                        lines.extend(old);
                        lines.extend(new);
                    }
                    if lines.is_empty() && Instant::now() < progressed + PROGRESS_EVERY {
                        unsent = Some(committed.pos);
                        continue;
                    }
                    unsent = None;
                    Some(committed.pos)
                }
                Event::Received(Err(broadcast::error::RecvError::Lagged(missed))) => {
                    return Some((missed as usize + bus::CAPACITY, last_progress, true));
                }
                Event::Received(Err(broadcast::error::RecvError::Closed)) => return None,
            };
            if let Some(pos) = progress {
                lines.push(progress_line(pos));
            }
            for line in lines {
                match send_live(&self.out, &bus, line, &mut accepted_at).await {
                    Ok(()) => {}
                    // The reader is stuck: cut off, wherever it is.
                    Err(Stop::Stuck(behind)) => return Some((behind, last_progress, false)),
                    Err(_) => return None,
                }
            }
            if progress.is_some() {
                last_progress = progress;
                progressed = Instant::now();
            }
        }
    }

    /// Ends the stream with the line saying the reader fell behind.
    async fn cut_off(&self, behind: usize, last_progress: Option<Position>) {
        let message = format!("subscriber fell behind by {behind} transactions and was cut off");
        let detail = format!(
            "A subscription may be at most {} transactions behind the pipeline, which never waits for a subscriber.",
            bus::CAPACITY
        );
        let hint = match last_progress {
            Some(ts) => format!(
                "Subscribe again with --as-of {ts} (as_of={ts}), the last progress position sent, to resume (or with --snapshot if that is older than retain_history), and read the lines as they come."
            ),
            None => "Subscribe again, and read the lines as they come.".to_string(),
        };
        let line = error_line(FELL_BEHIND, &message, Some(&detail), Some(&hint));
        let _ = self.out.send(line).await;
    }

    async fn fail(&self, e: &PipelineError) {
        let detail = e.detail();
        let hint = e.hint();
        let line = error_line("XX000", &e.primary(), detail.as_deref(), hint.as_deref());
        let _ = self.out.send(line).await;
    }
}

/// Sends a live line, giving up when the reader went away, or when the
/// subscription is behind the bus and the reader has taken nothing for
/// [`READER_STUCK`] (since `accepted_at`, which a line taken moves).
async fn send_live(
    out: &mpsc::Sender<Bytes>,
    bus: &BusReceiver,
    line: Bytes,
    accepted_at: &mut Instant,
) -> Result<(), Stop> {
    let since = *accepted_at;
    let lagging = async {
        loop {
            tokio::time::sleep(LAG_CHECK_EVERY).await;
            let behind = bus.len();
            if behind > bus::CAPACITY && since.elapsed() >= READER_STUCK {
                return behind;
            }
        }
    };
    tokio::select! {
        sent = out.send(line) => {
            *accepted_at = Instant::now();
            sent.map_err(|_| Stop::ReaderGone)
        }
        behind = lagging => Err(Stop::Stuck(behind)),
    }
}

/// Whether interface `id` still exists under `name`.
async fn interface_exists(
    store: &mut Option<Store>,
    state_dir: &std::path::Path,
    id: i64,
    name: &str,
) -> Result<bool, PipelineError> {
    let held = store.take();
    let state_dir = state_dir.to_path_buf();
    let name = name.to_string();
    let (held, result) = tokio::task::spawn_blocking(move || {
        let held = match held {
            Some(s) => s,
            None => match Store::open(&state_dir) {
                Ok(s) => s,
                Err(e) => return (None, Err(e)),
            },
        };
        let result = held
            .conn
            .query_row(
                "SELECT 1 FROM interfaces WHERE id = ?1 AND name = ?2",
                params![id, name],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| PipelineError::store("check a subscription's materialized view", e));
        (Some(held), result)
    })
    .await
    .map_err(|_| PipelineError::Store {
        context: "check a subscription's materialized view".into(),
        message: "the reading task failed".into(),
    })?;
    *store = held;
    result
}

// ------------------------------------------------------- the blocking part

/// The start of a subscription, read and sent from a blocking task.
struct Job {
    state_dir: PathBuf,
    name: String,
    opts: SubscribeOptions,
    out: mpsc::Sender<Bytes>,
    handle: Handle,
}

impl Job {
    fn run(
        self,
        bus: BusReceiver,
        found: oneshot::Sender<Result<Found, SubscribeError>>,
    ) -> Blocking {
        let store = match Store::open(&self.state_dir) {
            Ok(store) => store,
            Err(e) => {
                let _ = found.send(Err(e.into()));
                return (bus, None, CatchUp::Done, None);
            }
        };
        let mut sender = Sender {
            out: &self.out,
            bus: &bus,
            handle: &self.handle,
            last_progress: None,
            accepted_at: std::time::Instant::now(),
        };
        let result = self.read_and_send(&store.conn, &mut sender, found);
        let last_progress = sender.last_progress;
        (bus, Some(store), result, last_progress)
    }

    fn read_and_send(
        &self,
        conn: &Connection,
        sender: &mut Sender<'_>,
        found: oneshot::Sender<Result<Found, SubscribeError>>,
    ) -> CatchUp {
        let tx = match conn.unchecked_transaction() {
            Ok(tx) => tx,
            Err(e) => {
                let _ = found.send(Err(PipelineError::store("start a subscription", e).into()));
                return CatchUp::Done;
            }
        };
        let start = match self.find_start(&tx) {
            Ok(Found::Ready(start)) => start,
            other => {
                let _ = found.send(other);
                return CatchUp::Done;
            }
        };
        if found.send(Ok(Found::Ready(start.clone()))).is_err() {
            return CatchUp::ReaderGone;
        }
        match self.send_start(&tx, &start, sender) {
            Ok(()) => CatchUp::Done,
            Err(Stop::ReaderGone) => CatchUp::ReaderGone,
            // Only a stuck reader stops the sending.
            Err(Stop::Stuck(behind)) => CatchUp::Stuck(behind),
            Err(Stop::Failed(e)) => CatchUp::Failed(e),
        }
    }

    /// Reads the interface, its table and the positions, and checks
    /// `as_of`.
    fn find_start(&self, tx: &Connection) -> Result<Found, SubscribeError> {
        let fail = |e: rusqlite::Error| PipelineError::store("start a subscription", e);
        let Some((interface, table_name)) = tx
            .query_row(
                "SELECT id, table_name FROM interfaces WHERE name = ?1",
                [&self.name],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
            )
            .optional()
            .map_err(fail)?
        else {
            return Err(PipelineError::UnknownObject {
                kind: ObjectKind::Interface,
                name: self.name.clone(),
            }
            .into());
        };
        let Some((table, source, state, snapshot_lsn)) = tx
            .query_row(
                "SELECT id, source, state, snapshot_lsn FROM tables WHERE name = ?1",
                [&table_name],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                    ))
                },
            )
            .optional()
            .map_err(fail)?
        else {
            return Err(PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: table_name,
            }
            .into());
        };
        // Running or stalled: the documents are complete (a stalled table
        // keeps its last consistent state).
        if state != "running" && state != "stalled" {
            return Ok(Found::Waiting);
        }
        let applied: i64 = tx
            .query_row(
                "SELECT applied_lsn FROM sources WHERE name = ?1",
                [&source],
                |r| r.get(0),
            )
            .map_err(fail)?;
        let horizon: Option<i64> = tx
            .query_row(
                "SELECT pos FROM feed_horizon WHERE interface = ?1",
                [interface],
                |r| r.get(0),
            )
            .optional()
            .map_err(fail)?;
        let snapshot = Position::from_u64(snapshot_lsn.unwrap_or(0) as u64);
        // Before the source applies a transaction at or after the
        // table's snapshot point, the documents are the snapshot's.
        let at = Position::from_u64(applied as u64).max(snapshot);
        if let Some(as_of) = self.opts.as_of {
            if as_of > at {
                return Err(SubscribeError::Ahead {
                    interface: self.name.clone(),
                    as_of,
                    applied: at,
                });
            }
            // No horizon recorded yet: where the feed starts is not known.
            // Once recorded (when the interface's first table runs), it
            // bounds the feed alone: a swap since then replaced the table
            // (and its snapshot point) but not the interface's feed, which
            // goes on through the swap.
            let horizon = horizon.map_or(at, |h| Position::from_u64(h as u64));
            if as_of < horizon {
                return Err(SubscribeError::TooOld {
                    interface: self.name.clone(),
                    as_of,
                    horizon,
                });
            }
        }
        Ok(Found::Ready(Start {
            interface,
            table,
            source,
            at,
        }))
    }

    /// Sends everything up to `P` (see the module docs).
    fn send_start(
        &self,
        tx: &Connection,
        start: &Start,
        sender: &mut Sender<'_>,
    ) -> Result<(), Stop> {
        let at = start.at;
        let Some(as_of) = self.opts.as_of else {
            if self.opts.snapshot {
                let mut docs =
                    tx.prepare("SELECT key, doc FROM rows WHERE tbl = ?1 ORDER BY key")?;
                let mut rows = docs.query([start.table])?;
                while let Some(row) = rows.next()? {
                    sender.send(change_line(at, 1, bytes_at(row, 0)?, bytes_at(row, 1)?))?;
                }
            }
            return sender.progress(at);
        };
        let (after, upto) = (as_of, at);
        if self.opts.snapshot {
            // Each key changed after `as_of`, as it was before its first
            // change after `as_of` (None: absent).
            let mut before: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            crate::store::for_each_feed_entry(
                tx,
                start.interface,
                after,
                upto,
                |_, key, old, _| -> Result<(), Stop> {
                    if !before.contains_key(key) {
                        before.insert(key.to_vec(), old.map(<[u8]>::to_vec));
                    }
                    Ok(())
                },
            )?;
            let mut changed = before.into_iter().peekable();
            let mut docs = tx.prepare("SELECT key, doc FROM rows WHERE tbl = ?1 ORDER BY key")?;
            let mut rows = docs.query([start.table])?;
            while let Some(row) = rows.next()? {
                let key = bytes_at(row, 0)?;
                while let Some((k, old)) = changed.next_if(|(k, _)| k.as_slice() < key) {
                    if let Some(old) = old {
                        sender.send(change_line(as_of, 1, &k, &old))?;
                    }
                }
                match changed.next_if(|(k, _)| k.as_slice() == key) {
                    Some((_, Some(old))) => sender.send(change_line(as_of, 1, key, &old))?,
                    Some((_, None)) => {}
                    None => sender.send(change_line(as_of, 1, key, bytes_at(row, 1)?))?,
                }
            }
            for (k, old) in changed {
                if let Some(old) = old {
                    sender.send(change_line(as_of, 1, &k, &old))?;
                }
            }
            sender.progress(as_of)?;
        }
        let mut open: Option<Position> = None;
        crate::store::for_each_feed_entry(
            tx,
            start.interface,
            after,
            upto,
            |pos, key, old, new| -> Result<(), Stop> {
                if let Some(prev) = open
                    && prev != pos
                {
                    sender.progress(prev)?;
                }
                open = Some(pos);
                for line in change_lines(pos, key, old, new).into_iter().flatten() {
                    sender.send(line)?;
                }
                Ok(())
            },
        )?;
        if let Some(prev) = open {
            sender.progress(prev)?;
        }
        sender.progress(at)
    }
}

/// Column `i`'s bytes (keys and documents are stored as blobs).
fn bytes_at<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<&'r [u8]> {
    opt_bytes_at(row, i)?.ok_or(rusqlite::Error::InvalidColumnType(
        i,
        "NULL".into(),
        rusqlite::types::Type::Null,
    ))
}

fn opt_bytes_at<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<&'r [u8]>> {
    match row.get_ref(i)? {
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b)),
        ValueRef::Null => Ok(None),
        other => Err(rusqlite::Error::InvalidColumnType(
            i,
            "a key or document".into(),
            other.data_type(),
        )),
    }
}

/// Sends lines from the blocking task, waiting for the reader but not
/// past the point where the subscription falls behind the bus.
struct Sender<'a> {
    out: &'a mpsc::Sender<Bytes>,
    bus: &'a BusReceiver,
    handle: &'a Handle,
    last_progress: Option<Position>,
    /// When the reader last took a line: falling behind the bus stops the
    /// sending only once the reader has taken nothing for
    /// [`READER_STUCK`] (what the bus sends meanwhile is read from the
    /// change feed afterwards).
    accepted_at: std::time::Instant,
}

impl Sender<'_> {
    fn send(&mut self, line: Bytes) -> Result<(), Stop> {
        let line = match self.out.try_send(line) {
            Ok(()) => {
                self.sent();
                return Ok(());
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(Stop::ReaderGone),
            Err(mpsc::error::TrySendError::Full(line)) => line,
        };
        loop {
            let behind = self.bus.len();
            if behind > bus::CAPACITY && self.accepted_at.elapsed() >= READER_STUCK {
                return Err(Stop::Stuck(behind));
            }
            let reserved = self
                .handle
                .block_on(tokio::time::timeout(LAG_CHECK_EVERY, self.out.reserve()));
            match reserved {
                Ok(Ok(permit)) => {
                    permit.send(line);
                    self.sent();
                    return Ok(());
                }
                Ok(Err(_)) => return Err(Stop::ReaderGone),
                Err(_) => {}
            }
        }
    }

    fn sent(&mut self) {
        self.accepted_at = std::time::Instant::now();
    }

    /// A progress line at `ts`, unless the last one was at `ts` already.
    fn progress(&mut self, ts: Position) -> Result<(), Stop> {
        if self.last_progress == Some(ts) {
            return Ok(());
        }
        self.send(progress_line(ts))?;
        self.last_progress = Some(ts);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_their_members_in_order() {
        let ts: Position = "0/16B3748".parse().unwrap();
        assert_eq!(
            change_line(ts, 1, br#"{"id":1}"#, br#"{"id":1,"n":"a"}"#),
            Bytes::from_static(
                b"{\"type\":\"change\",\"ts\":\"0/16B3748\",\"diff\":1,\"key\":{\"id\":1},\"data\":{\"id\":1,\"n\":\"a\"}}\n"
            )
        );
        assert_eq!(
            change_line(ts, -1, b"{}", b"{}"),
            Bytes::from_static(
                b"{\"type\":\"change\",\"ts\":\"0/16B3748\",\"diff\":-1,\"key\":{},\"data\":{}}\n"
            )
        );
        assert_eq!(
            progress_line(ts),
            Bytes::from_static(b"{\"type\":\"progress\",\"ts\":\"0/16B3748\"}\n")
        );
        let line = error_line(FELL_BEHIND, "a \"quoted\"\nmessage", None, Some("h"));
        assert_eq!(
            line,
            Bytes::from_static(
                b"{\"type\":\"error\",\"code\":\"53400\",\"message\":\"a \\\"quoted\\\"\\nmessage\",\"hint\":\"h\"}\n"
            )
        );
        let parsed: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed["message"], "a \"quoted\"\nmessage");
    }

    #[test]
    fn an_update_is_a_retraction_then_an_insertion() {
        let lines: Vec<Bytes> = change_lines(Position::from_u64(1), b"1", Some(b"2"), Some(b"3"))
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with(
                b"{\"type\":\"change\",\"ts\":\"0/1\",\"diff\":-1,\"key\":1,\"data\":2}"
            )
        );
        assert!(
            lines[1].starts_with(
                b"{\"type\":\"change\",\"ts\":\"0/1\",\"diff\":1,\"key\":1,\"data\":3}"
            )
        );
        assert_eq!(
            change_lines(Position::from_u64(1), b"1", None, Some(b"3"))
                .into_iter()
                .flatten()
                .count(),
            1
        );
        assert_eq!(
            change_lines(Position::from_u64(1), b"1", Some(b"2"), None)
                .into_iter()
                .flatten()
                .count(),
            1
        );
    }

    #[test]
    fn errors_read_like_postgres() {
        let e = SubscribeError::TooOld {
            interface: "orders_json".into(),
            as_of: Position::from_u64(0x10),
            horizon: Position::from_u64(0x20),
        };
        assert_eq!(e.code(), "22023");
        assert!(e.to_string().starts_with(
            "ERROR: as_of 0/10 is before the retained history of materialized view \"orders_json\", which starts after 0/20\nDETAIL: "
        ));
        assert!(e.hint().unwrap().contains("--snapshot"));
        assert!(e.hint().unwrap().contains("retain_history"));
        let e = SubscribeError::from(PipelineError::UnknownObject {
            kind: ObjectKind::Interface,
            name: "nope".into(),
        });
        assert_eq!(e.code(), "42704");
        assert_eq!(e.primary(), "materialized view \"nope\" does not exist");
    }
}
