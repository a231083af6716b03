//! What a source delivers to the pipeline, whatever its upstream.
//!
//! A [`Source`] is one upstream the pipeline reads: a PostgreSQL
//! database through a logical replication slot ([`postgres`]), or a MySQL
//! or MariaDB server through its row-based binlog ([`mysql`]), or a Kafka
//! topic of Avro records ([`kafka`]); the catalog's `sources.kind` says
//! which. The engine
//! (the source's task in `stream.rs` and the snapshot tasks in
//! `crate::hydrate`) knows sources only through these traits, so it never
//! sees the upstream's protocol: it sees transactions of typed row changes
//! ([`evolve_core::change`]), each with an opaque [`Position`].
//!
//! # The contract every source keeps
//!
//! **Transactions, whole and in commit order.** A [`ChangeStream`] yields
//! [`SourceEvent::Begin`], then the transaction's schema announcements,
//! rows and markers in the order the upstream made them, then
//! [`SourceEvent::Commit`]. Transactions never interleave and come in the
//! order they committed upstream; an aborted transaction is never
//! delivered. Events outside a transaction are only
//! [`SourceEvent::Schema`] and [`SourceEvent::Idle`].
//!
//! **Positions.** Each transaction has two positions: its *commit
//! position* (on `Begin`), which orders it against snapshots, and its *end
//! position* (on `Commit`), which is where a stream resumes after it.
//! Both grow strictly from one transaction to the next, and a
//! transaction's end is after its commit position (a snapshot at `P` is
//! caught up with the transactions that end after `P`). A stream opened
//! at `from` delivers every transaction whose end position is after
//! `from`, and may deliver some before it again (the engine skips those by
//! their position: replays are expected, gaps never happen).
//!
//! **Resume states.** A position is 64 bits; where an upstream's own
//! coordinate of a point in its stream does not fit in them (a binlog's
//! GTID state), the source gives the engine that coordinate with each
//! commit ([`ChangeStream::resume_state`]). The engine stores it in the
//! same store transaction as the applied position (`sources.resume_state`)
//! and hands it back when it reopens the stream
//! ([`Source::stream_resuming`]); the position stays what orders
//! transactions. A resume state may stand for a point before the
//! transaction's end, where the stream must start to deliver everything
//! after it (a binlog whose XA transaction was prepared before it and is
//! committed after it: the prepare holds its changes); the stream then
//! delivers again what the engine skips by position. Sources without one
//! (PostgreSQL: an LSN is its own coordinate) keep the defaults.
//!
//! **Snapshots and the seam.** A [`TableSnapshot`] is one table's rows as
//! of a position `P` ([`TableSnapshot::position`]): a transaction whose
//! commit position is before `P` is in the snapshot, one at or after `P`
//! is not and will be delivered by the stream. The engine joins a copy to
//! the stream at exactly that seam, so nothing is lost or applied twice.
//!
//! **Schemas.** Before a table's first row in a stream, and again whenever
//! its columns change, the stream sends [`SourceEvent::Schema`] with the
//! table's columns (name, type, type modifier, which are the key, and the
//! column's number where the source knows it, so that a column dropped
//! and re-added under its name is told apart) as of that point; every row
//! carries that schema. Tables are identified by a
//! number that the source keeps stable across renames
//! ([`crate::store::TableInfo::upstream_oid`]): PostgreSQL's OIDs; MySQL
//! keeps the id a table had under its first name and follows renames
//! through the schema history. A schema without columns says the table is
//! gone from the stream: dropped, or its name taken by another table; the
//! tables reading it stall with that reason.
//!
//! **Schema history.** The engine records every schema a stream announces
//! inside a transaction in the store, keyed by the source, the table and
//! the transaction's end position, in the store transaction that stores
//! that position (`schema_history`; a version equal to the table's last
//! one is not recorded again). When it reopens the stream after `from`, it
//! hands each table's latest version at or before `from` back
//! ([`Source::stream_resuming`]): what a table's columns were at the
//! point the stream resumes from, whatever the upstream's catalog says
//! now. A source that must know a table's columns before its stream shows
//! them (MySQL: a DDL statement says which columns it removes, not which
//! remain) takes them from there; the catalog as it is now may already be
//! past statements the stream has still to deliver.
//!
//! **Row images.** Values are in the upstream's text form. An update's new
//! image may say [`Datum::Unchanged`] for a large value it did not send; an
//! old image carries the key columns only unless the upstream logs whole
//! rows, the others being [`Datum::Missing`]. A truncate is one
//! [`ChangeKind::Truncate`] row per table.
//!
//! **Confirmation.** [`ChangeStream::confirm`] tells the source that
//! everything up to a position is durable downstream (the store applied it
//! and every sink committed it); the source may then let its upstream
//! release that history. Nothing is released before it is confirmed, so
//! after a crash anywhere the upstream still has everything after the
//! store's applied position, where the stream resumes.
//!
//! **Failures.** An error whose [`PipelineError::is_permanent`] is true
//! (the slot is gone, the publication cannot be read) stops the source with
//! that error and is not retried: retrying would fail the same way. Any
//! other error (the connection dropped, the server restarted) ends the
//! stream, and the engine opens a new one after its applied position
//! after a backoff. A row the engine cannot turn into a document stalls
//! that table only, and so does a record the source cannot read for one
//! table ([`SourceEvent::Undecodable`]); the source goes on.
//!
//! **Snapshot rows** carry the values of the table's document columns
//! (attnum order), then of its key columns that are not document columns
//! (a Kafka table's record key), in that order.
//!
//! [`Datum::Unchanged`]: evolve_core::change::Datum::Unchanged
//! [`Datum::Missing`]: evolve_core::change::Datum::Missing
//! [`ChangeKind::Truncate`]: evolve_core::change::ChangeKind::Truncate
//! [`PipelineError::is_permanent`]: crate::error::PipelineError::is_permanent

pub mod kafka;
pub mod mysql;
pub mod postgres;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use evolve_core::change::{RowChange, TableSchema};

use crate::error::Result;
use crate::position::Position;
use crate::store::TableInfo;

/// One event of a source's stream (see the module's contract).
#[derive(Clone, Debug, PartialEq)]
pub enum SourceEvent {
    /// A transaction starts; `commit` is its commit position (ordered
    /// against snapshot positions), `commit_time_micros` its upstream commit
    /// time in Unix microseconds.
    Begin {
        commit: Position,
        commit_time_micros: i64,
    },
    /// Table `table`'s columns from here on.
    Schema {
        table: u32,
        schema: Arc<TableSchema>,
    },
    /// A row of table `table` changed.
    Row { table: u32, change: RowChange },
    /// A record of table `table` that the source cannot turn into a row
    /// for it (a Kafka record whose writer schema the table's reader
    /// schema cannot read, a corrupt payload): the table stalls at this
    /// transaction with `problem` (which names the record, never its
    /// values), as it does for a row the engine cannot encode, and
    /// later ones are counted while it is stalled.
    Undecodable { table: u32, problem: String },
    /// A transactional message written upstream for the pipeline (the
    /// replacement swap's marker), in the transaction's order.
    Marker { prefix: String, content: Vec<u8> },
    /// The transaction started by the last `Begin` committed; the stream
    /// resumes after `end`.
    Commit { end: Position },
    /// No transaction is open and the upstream has nothing for this
    /// source before `upto`: confirming `upto` releases nothing that the
    /// pipeline still needs.
    Idle { upto: Position },
}

/// An upstream the pipeline reads.
pub trait Source: Send + Sync {
    /// Its stream of transactions.
    type Stream: ChangeStream;
    /// A snapshot of one table.
    type Snapshot: TableSnapshot;

    /// Opens the stream after `from` (the store's applied position; the
    /// upstream's confirmed one may be further back, held there by a sink,
    /// and what lies between is in the store already). Checks
    /// that the upstream still has the history after `from`; when it does
    /// not, the error is permanent.
    fn stream(&self, from: Position) -> impl Future<Output = Result<Self::Stream>> + Send;

    /// [`Source::stream`] after `from` and the resume state stored with
    /// it ([`ChangeStream::resume_state`] of the transaction that ended at
    /// `from`; `None` when there is none), with the schema history's
    /// columns of each table as of `from` (see "Schema history" above). What
    /// the engine calls.
    fn stream_resuming(
        &self,
        from: Position,
        state: Option<String>,
        schemas: HashMap<u32, Arc<TableSchema>>,
    ) -> impl Future<Output = Result<Self::Stream>> + Send {
        let _ = (state, schemas);
        self.stream(from)
    }

    /// Starts a snapshot of `table`'s document columns (in the order of
    /// [`TableInfo::document_columns`]), consistent with a position of
    /// this source's stream.
    fn snapshot(&self, table: &TableInfo) -> impl Future<Output = Result<Self::Snapshot>> + Send;
}

/// A source's stream of transactions.
pub trait ChangeStream: Send {
    /// The next event. A stream does not end: the upstream closing it is
    /// an error. Cancel-safe: the engine awaits it in a `select!` and may
    /// drop the future at any await; nothing it took from the upstream is
    /// lost then (the next call delivers it).
    fn next(&mut self) -> impl Future<Output = Result<SourceEvent>> + Send;

    /// Everything up to `upto` is durable downstream.
    fn confirm(&mut self, upto: Position);

    /// The upstream's own coordinate of `end` (see "Resume states" in the
    /// module docs), asked right after [`ChangeStream::next`] returned
    /// [`SourceEvent::Commit`] with that `end`; `None` when positions are
    /// coordinates enough.
    fn resume_state(&self, end: Position) -> Option<String> {
        let _ = end;
        None
    }

    /// The position the upstream has confirmed for this stream (and will
    /// not send again), where it keeps one: PostgreSQL's slot's
    /// `confirmed_flush_lsn` when the stream opened. The engine refuses
    /// to go on when it is past everything its store applied or confirmed
    /// (a state directory restored from a backup). `None` by default.
    fn upstream_confirmed(&self) -> Option<Position> {
        None
    }

    /// Why the documents of table versions `tables` (running, of this
    /// source) stop matching their upstream rows without an event to show
    /// it, by table version name, from the upstream as it is now
    /// (PostgreSQL: a table removed from the publication, a row filter, a
    /// column list, operations not published, a partition published as its
    /// root, an enum value renamed). The engine asks between transactions,
    /// every few seconds and when a schema lacks a column a table reads,
    /// and stalls each table named with the reason, which says the way
    /// out. None by default.
    fn gaps(
        &mut self,
        tables: &[&TableInfo],
    ) -> impl Future<Output = Result<Vec<(String, String)>>> + Send {
        let _ = tables;
        std::future::ready(Ok(Vec::new()))
    }

    /// The records of the transaction whose [`SourceEvent::Commit`]
    /// [`ChangeStream::next`] just returned that the source read and left
    /// out as another table's (a Kafka table pinned with `SUBJECT` skips
    /// the records of its topic's other record types), by table, each
    /// with its count; asked at each commit, and cleared by the asking.
    /// None by default.
    fn take_skipped(&mut self) -> Vec<(u32, u64)> {
        Vec::new()
    }

    /// Ends the stream, making sure the last confirmation reached the
    /// upstream (waiting a few seconds at most).
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// One table's rows as of [`TableSnapshot::position`].
pub trait TableSnapshot: Send {
    /// The position the snapshot is consistent with.
    fn position(&self) -> Position;

    /// Reads the next rows, calling `row` for each with its values in text
    /// form (`None` for NULL). Returns false once every row was read.
    fn next_rows<F>(&mut self, row: F) -> impl Future<Output = Result<bool>> + Send
    where
        F: FnMut(&[Option<&[u8]>]) -> Result<()> + Send;

    /// The records the snapshot has read so far and left out as another
    /// table's (see [`ChangeStream::take_skipped`]). 0 by default.
    fn skipped(&self) -> u64 {
        0
    }

    /// Ends the snapshot after its last row; an error means the copy is
    /// not complete.
    fn finish(self) -> impl Future<Output = Result<()>> + Send;
}

/// The civil date (year, month, day) `days` after 1970-01-01, in the
/// proleptic Gregorian calendar (Howard Hinnant's `civil_from_days`): how
/// the MySQL and Kafka sources write day counts as PostgreSQL dates.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}
