//! Decoding of PostgreSQL streaming logical replication with the `pgoutput`
//! plugin, for a client that runs
//! `START_REPLICATION SLOT s LOGICAL lsn (proto_version '1' or '2', publication_names '...')`.
//!
//! Two layers, one per protocol:
//!
//! - **Replication stream** ([`ReplicationMessage`]): the payload of each
//!   CopyData message the server sends in COPY BOTH mode, either WAL data
//!   (`w`, carrying one pgoutput message) or a primary keepalive (`k`). The
//!   client answers with [`encode_standby_status_update`] (`r`). Positions
//!   are [`Lsn`]s, written `16/B374D848`.
//! - **pgoutput messages** ([`LogicalMessage`]): Begin, Commit, Origin,
//!   Relation, Type, Insert, Update, Delete, Truncate, Message (with the
//!   `messages` option) and, for protocol 2 (PostgreSQL 14+) with
//!   `streaming 'on'`, Stream Start/Stop/Commit/Abort. Inside a stream,
//!   messages carry their transaction's ID; [`LogicalDecoder`] tracks when
//!   that is the case.
//!
//! ```
//! use evolve_pgoutput::{LogicalDecoder, LogicalMessage, ReplicationMessage};
//!
//! # fn handle(copy_data: &[u8], decoder: &mut LogicalDecoder) -> Result<(), Box<dyn std::error::Error>> {
//! match ReplicationMessage::parse(copy_data)? {
//!     ReplicationMessage::XLogData { wal_start, data, .. } => match decoder.decode(data)? {
//!         LogicalMessage::Insert(insert) => {
//!             // insert.oid names a Relation received earlier; the values
//!             // borrow from `copy_data`.
//!             let _first = insert.new.get(0).and_then(|v| v.as_str());
//!         }
//!         LogicalMessage::Commit(commit) => { /* confirm commit.end_lsn once stored */ }
//!         _ => {}
//!     },
//!     ReplicationMessage::PrimaryKeepalive { reply_requested, .. } => { /* send a status update */ }
//! }
//! # Ok(()) }
//! ```
//!
//! Decoding is zero-copy: names, prefixes and column values borrow from the
//! input ([`std::borrow::Cow::Borrowed`]), the only allocations being one
//! vector per tuple, relation column list or truncate list.
//! `into_owned` detaches a message, e.g. a [`Relation`] kept in a cache.
//!
//! Every parser takes arbitrary bytes and never panics: malformed input is a
//! [`DecodeError`] naming the message, the byte offset and the problem, and
//! no length field can make it allocate more than the input's size. Encoders
//! for every message exist too, for tests and synthetic streams; whatever a
//! parser accepts encodes back to the same bytes.
//!
//! What it does not do: no I/O (no sockets, files, clock or environment;
//! timestamps are plain microseconds since 2000-01-01, see
//! [`POSTGRES_EPOCH_UNIX_MICROS`]), no replication connection or
//! authentication, no interpretation of column values (text or binary
//! formats are passed through as bytes), no tracking of relations by OID.
//! Protocol versions 3 and 4 (two-phase commit messages, parallel streaming's
//! abort LSN) are not supported: their messages are rejected as unknown or
//! as having trailing bytes.

mod error;
mod logical;
mod lsn;
mod reader;
mod replication;

#[cfg(test)]
mod tests;

pub use error::{DecodeError, DecodeErrorKind, EncodeError};
pub use logical::{
    Begin, Column, Commit, Delete, Insert, LogicalDecoder, LogicalMessage, Message, OldTuple,
    Origin, Relation, ReplicaIdentity, StreamAbort, StreamCommit, StreamStart, Truncate, TupleData,
    Type, Update, Value,
};
pub use lsn::{Lsn, LsnParseError};
pub use replication::{
    POSTGRES_EPOCH_UNIX_MICROS, ReplicationMessage, encode_standby_status_update,
};
