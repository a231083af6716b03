//! pgoutput's logical replication messages (protocol versions 1 and 2), the
//! `data` of each XLogData message on a logical slot.

use std::borrow::Cow;

use crate::error::{DecodeError, DecodeErrorKind, EncodeError};
use crate::lsn::Lsn;
use crate::reader::Reader;

/// One pgoutput message: a transaction boundary, a description of a
/// relation or type, a row change, a truncate, a logical decoding message,
/// or (protocol 2) a boundary of a streamed in-progress transaction.
///
/// Strings and values borrow from the input when decoded
/// ([`Cow::Borrowed`]); [`into_owned`](Self::into_owned) detaches a message
/// from its buffer.
///
/// The `xid` field of [`Relation`], [`Type`], [`Insert`], [`Update`],
/// [`Delete`], [`Truncate`] and [`Message`] is `Some` exactly for messages
/// of a streamed transaction (protocol 2, between [`StreamStart`] and
/// [`LogicalMessage::StreamStop`]), where the server prefixes them with the
/// transaction's ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalMessage<'a> {
    /// `B`: a transaction starts.
    Begin(Begin),
    /// `C`: the transaction started by the last [`Begin`] committed.
    Commit(Commit),
    /// `O`: the transaction came from another node (replication origin).
    Origin(Origin<'a>),
    /// `R`: the description of a table, sent before the first change to
    /// it in this session and again whenever its definition changed.
    Relation(Relation<'a>),
    /// `Y`: the name of a non-built-in type used by a following relation.
    Type(Type<'a>),
    /// `I`: a row was inserted.
    Insert(Insert<'a>),
    /// `U`: a row was updated.
    Update(Update<'a>),
    /// `D`: a row was deleted.
    Delete(Delete<'a>),
    /// `T`: tables were truncated.
    Truncate(Truncate),
    /// `M`: a message from `pg_logical_emit_message` (only with the
    /// `messages` option).
    Message(Message<'a>),
    /// `S` (protocol 2): a segment of a streamed in-progress transaction
    /// starts; its messages carry the transaction's ID.
    StreamStart(StreamStart),
    /// `E` (protocol 2): the current segment of a streamed transaction ends.
    StreamStop,
    /// `c` (protocol 2): a streamed transaction committed.
    StreamCommit(StreamCommit),
    /// `A` (protocol 2): a streamed transaction or subtransaction aborted.
    StreamAbort(StreamAbort),
}

/// The start of a transaction (`B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    /// The LSN of the transaction's commit record.
    pub final_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 UTC.
    pub commit_time: i64,
    /// The transaction's ID.
    pub xid: u32,
}

/// The commit of the current transaction (`C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Flags; currently always 0.
    pub flags: u8,
    /// The LSN of the commit record (the [`Begin::final_lsn`]).
    pub commit_lsn: Lsn,
    /// The LSN just past the commit record: where to resume after this
    /// transaction, and what to confirm once it is stored.
    pub end_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 UTC.
    pub commit_time: i64,
}

/// The replication origin of the current transaction (`O`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    /// The LSN of the commit on the origin server.
    pub commit_lsn: Lsn,
    /// The origin's name.
    pub name: Cow<'a, str>,
}

/// A table's description (`R`).
///
/// Row changes name their table by [`oid`](Self::oid) only, so a client
/// keeps the latest `Relation` per OID ([`into_owned`](Self::into_owned)
/// detaches it from the input buffer) and reads tuple values by position in
/// [`columns`](Self::columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation<'a> {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// The table's OID.
    pub oid: u32,
    /// The schema; empty for `pg_catalog`.
    pub namespace: Cow<'a, str>,
    /// The table's name.
    pub name: Cow<'a, str>,
    /// The table's `REPLICA IDENTITY`, which decides what old values
    /// updates and deletes carry.
    pub replica_identity: ReplicaIdentity,
    /// The published columns in table order (generated and dropped columns
    /// are not sent; with a column list, only the listed ones).
    pub columns: Vec<Column<'a>>,
}

/// A column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column<'a> {
    /// Flags: [`Column::KEY`] or 0.
    pub flags: u8,
    /// The column's name.
    pub name: Cow<'a, str>,
    /// The OID of the column's type.
    pub type_oid: u32,
    /// The type modifier (`atttypmod`), -1 for none; e.g. `varchar(10)` is
    /// 14 (length + 4).
    pub type_modifier: i32,
}

/// A table's replica identity (`pg_class.relreplident`): which old values
/// an update or delete carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplicaIdentity {
    /// `d`: the primary key's columns (others null), only when the key
    /// changed (updates) or always (deletes); nothing without a primary key.
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: the whole old row.
    Full,
    /// `i`: the columns of the chosen unique index (others null).
    Index,
}

/// A non-built-in type's name (`Y`), sent before a [`Relation`] that uses
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type<'a> {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// The type's OID.
    pub oid: u32,
    /// The schema; empty for `pg_catalog`.
    pub namespace: Cow<'a, str>,
    /// The type's name.
    pub name: Cow<'a, str>,
}

/// An inserted row (`I`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert<'a> {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// The table's OID (see [`Relation`]).
    pub oid: u32,
    /// The new row.
    pub new: TupleData<'a>,
}

/// An updated row (`U`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// The table's OID (see [`Relation`]).
    pub oid: u32,
    /// The old key or old row, when the replica identity provides one (see
    /// [`ReplicaIdentity`]).
    pub old: Option<OldTuple<'a>>,
    /// The new row. Unchanged values stored out of line (TOAST) are
    /// [`Value::UnchangedToast`].
    pub new: TupleData<'a>,
}

/// A deleted row (`D`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete<'a> {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// The table's OID (see [`Relation`]).
    pub oid: u32,
    /// The old key or old row (tables with `REPLICA IDENTITY NOTHING`, or
    /// `DEFAULT` without a primary key, send no deletes).
    pub old: OldTuple<'a>,
}

/// The old values of an updated or deleted row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple<'a> {
    /// `K`: the replica identity key's columns; the others are
    /// [`Value::Null`].
    Key(TupleData<'a>),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Full(TupleData<'a>),
}

impl<'a> OldTuple<'a> {
    /// The values, key or full.
    pub fn tuple(&self) -> &TupleData<'a> {
        match self {
            OldTuple::Key(tuple) | OldTuple::Full(tuple) => tuple,
        }
    }

    /// Detach from the input buffer.
    pub fn into_owned(self) -> OldTuple<'static> {
        match self {
            OldTuple::Key(tuple) => OldTuple::Key(tuple.into_owned()),
            OldTuple::Full(tuple) => OldTuple::Full(tuple.into_owned()),
        }
    }
}

/// Truncated tables (`T`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// Option bits: [`Truncate::CASCADE`], [`Truncate::RESTART_IDENTITY`].
    pub options: u8,
    /// The truncated tables' OIDs (those published; see [`Relation`]).
    pub relation_oids: Vec<u32>,
}

/// A logical decoding message (`M`), from `pg_logical_emit_message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// The streamed transaction's ID (see [`LogicalMessage`]).
    pub xid: Option<u32>,
    /// Emitted as part of a transaction (delivered between its [`Begin`]
    /// and [`Commit`], and only if it commits) rather than at once.
    pub transactional: bool,
    /// The message's LSN.
    pub lsn: Lsn,
    /// The prefix given by the emitter.
    pub prefix: Cow<'a, str>,
    /// The content, as bytes.
    pub content: Cow<'a, [u8]>,
}

/// The start of a segment of a streamed transaction (`S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStart {
    /// The streamed transaction's ID.
    pub xid: u32,
    /// This is the transaction's first segment.
    pub first_segment: bool,
}

/// The commit of a streamed transaction (`c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCommit {
    /// The transaction's ID.
    pub xid: u32,
    /// Flags; currently always 0.
    pub flags: u8,
    /// The LSN of the commit record.
    pub commit_lsn: Lsn,
    /// The LSN just past the commit record.
    pub end_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 UTC.
    pub commit_time: i64,
}

/// The abort of a streamed transaction or of one of its subtransactions
/// (`A`); the changes streamed for it must be discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAbort {
    /// The top-level transaction's ID.
    pub xid: u32,
    /// The aborted subtransaction's ID; equal to `xid` when the whole
    /// transaction aborted.
    pub subxid: u32,
}

/// The column values of a row, in the [`Relation`]'s column order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TupleData<'a> {
    /// One value per column.
    pub values: Vec<Value<'a>>,
}

/// One column value of a [`TupleData`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// `n`: SQL NULL.
    Null,
    /// `u`: a value stored out of line (TOASTed) that the update did not
    /// change; the server does not send it again.
    UnchangedToast,
    /// `t`: the value in the type's text format, in the connection's
    /// client encoding.
    Text(Cow<'a, [u8]>),
    /// `b`: the value in the type's binary format (only with the `binary`
    /// option).
    Binary(Cow<'a, [u8]>),
}

impl Column<'_> {
    /// [`Column::flags`] bit: the column is part of the replica identity
    /// key (every column is, under `REPLICA IDENTITY FULL`).
    pub const KEY: u8 = 1;

    /// Whether the column is part of the replica identity key.
    pub fn is_key(&self) -> bool {
        self.flags & Column::KEY != 0
    }

    /// Detach from the input buffer.
    pub fn into_owned(self) -> Column<'static> {
        Column {
            flags: self.flags,
            name: owned_str(self.name),
            type_oid: self.type_oid,
            type_modifier: self.type_modifier,
        }
    }
}

impl Relation<'_> {
    /// Detach from the input buffer: one allocation per name.
    pub fn into_owned(self) -> Relation<'static> {
        Relation {
            xid: self.xid,
            oid: self.oid,
            namespace: owned_str(self.namespace),
            name: owned_str(self.name),
            replica_identity: self.replica_identity,
            columns: self.columns.into_iter().map(Column::into_owned).collect(),
        }
    }
}

impl ReplicaIdentity {
    /// The `relreplident` byte: `d`, `n`, `f` or `i`.
    pub fn as_byte(self) -> u8 {
        match self {
            ReplicaIdentity::Default => b'd',
            ReplicaIdentity::Nothing => b'n',
            ReplicaIdentity::Full => b'f',
            ReplicaIdentity::Index => b'i',
        }
    }

    /// The replica identity for a `relreplident` byte.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            b'd' => Some(ReplicaIdentity::Default),
            b'n' => Some(ReplicaIdentity::Nothing),
            b'f' => Some(ReplicaIdentity::Full),
            b'i' => Some(ReplicaIdentity::Index),
            _ => None,
        }
    }
}

impl Truncate {
    /// [`Truncate::options`] bit: `TRUNCATE ... CASCADE`.
    pub const CASCADE: u8 = 1;
    /// [`Truncate::options`] bit: `TRUNCATE ... RESTART IDENTITY`.
    pub const RESTART_IDENTITY: u8 = 2;

    /// Whether the truncate was `CASCADE`.
    pub fn cascade(&self) -> bool {
        self.options & Truncate::CASCADE != 0
    }

    /// Whether the truncate was `RESTART IDENTITY`.
    pub fn restart_identity(&self) -> bool {
        self.options & Truncate::RESTART_IDENTITY != 0
    }
}

impl<'a> TupleData<'a> {
    /// The number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value of the column at `index`.
    pub fn get(&self, index: usize) -> Option<&Value<'a>> {
        self.values.get(index)
    }

    /// The values in column order.
    pub fn iter(&self) -> std::slice::Iter<'_, Value<'a>> {
        self.values.iter()
    }

    /// Detach from the input buffer: one allocation per text or binary
    /// value.
    pub fn into_owned(self) -> TupleData<'static> {
        TupleData {
            values: self.values.into_iter().map(Value::into_owned).collect(),
        }
    }
}

impl<'a, 'b> IntoIterator for &'b TupleData<'a> {
    type Item = &'b Value<'a>;
    type IntoIter = std::slice::Iter<'b, Value<'a>>;

    fn into_iter(self) -> Self::IntoIter {
        self.values.iter()
    }
}

impl Value<'_> {
    /// The bytes of a [`Value::Text`] or [`Value::Binary`]; `None` for
    /// [`Value::Null`] and [`Value::UnchangedToast`].
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Text(bytes) | Value::Binary(bytes) => Some(bytes),
            Value::Null | Value::UnchangedToast => None,
        }
    }

    /// The text of a [`Value::Text`] that is valid UTF-8 (always so when
    /// the client encoding is UTF-8); `None` otherwise.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// Detach from the input buffer.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Null => Value::Null,
            Value::UnchangedToast => Value::UnchangedToast,
            Value::Text(bytes) => Value::Text(Cow::Owned(bytes.into_owned())),
            Value::Binary(bytes) => Value::Binary(Cow::Owned(bytes.into_owned())),
        }
    }
}

fn owned_str(s: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(s.into_owned())
}

/// The smallest encoded column of a Relation: flags, an empty name's NUL,
/// type OID, type modifier.
const MIN_COLUMN_SIZE: usize = 1 + 1 + 4 + 4;

/// What each message type is called in errors.
fn message_name(tag: u8) -> Option<&'static str> {
    Some(match tag {
        b'B' => "Begin message",
        b'C' => "Commit message",
        b'O' => "Origin message",
        b'R' => "Relation message",
        b'Y' => "Type message",
        b'I' => "Insert message",
        b'U' => "Update message",
        b'D' => "Delete message",
        b'T' => "Truncate message",
        b'M' => "logical decoding message",
        b'S' => "Stream Start message",
        b'E' => "Stream Stop message",
        b'c' => "Stream Commit message",
        b'A' => "Stream Abort message",
        _ => return None,
    })
}

impl<'a> LogicalMessage<'a> {
    /// Decode one pgoutput message; the whole buffer must be the message
    /// (the `data` of one XLogData message).
    ///
    /// `in_stream` says whether the message arrived between a
    /// [`StreamStart`] and a [`LogicalMessage::StreamStop`] (protocol 2),
    /// where the server adds a transaction ID to the messages that can be
    /// part of a transaction; [`LogicalDecoder`] tracks this for you.
    ///
    /// Errors name the message and the byte offset in `data`. Never panics,
    /// and allocates no more than the input's size justifies.
    pub fn parse(data: &'a [u8], in_stream: bool) -> Result<Self, DecodeError> {
        let (message, used) = LogicalMessage::parse_prefix(data, in_stream)?;
        let extra = data.len().saturating_sub(used);
        if extra > 0 {
            return Err(DecodeError {
                what: message_name(data.first().copied().unwrap_or_default())
                    .unwrap_or("logical replication message"),
                offset: used,
                kind: DecodeErrorKind::TrailingBytes { count: extra },
            });
        }
        Ok(message)
    }

    /// Decode the pgoutput message at the start of `data` and return it with
    /// the number of bytes it took; whatever follows is left alone. For
    /// framings that put several messages in one buffer, such as the
    /// output file of `pg_recvlogical` (each message followed by `\n`).
    ///
    /// See [`parse`](Self::parse) for `in_stream` and errors.
    pub fn parse_prefix(data: &'a [u8], in_stream: bool) -> Result<(Self, usize), DecodeError> {
        let Some(&tag) = data.first() else {
            return Err(DecodeError {
                what: "logical replication message",
                offset: 0,
                kind: DecodeErrorKind::Truncated {
                    expected: "a message type",
                },
            });
        };
        let Some(what) = message_name(tag) else {
            return Err(DecodeError {
                what: "logical replication message",
                offset: 0,
                kind: DecodeErrorKind::UnknownMessageType { tag },
            });
        };
        let mut r = Reader::new(data, 1, what);
        let message = match tag {
            b'B' => LogicalMessage::Begin(Begin {
                final_lsn: r.lsn("the final LSN")?,
                commit_time: r.i64("the commit time")?,
                xid: r.u32("a transaction ID")?,
            }),
            b'C' => LogicalMessage::Commit(Commit {
                flags: r.u8("the commit flags")?,
                commit_lsn: r.lsn("the commit LSN")?,
                end_lsn: r.lsn("the end LSN")?,
                commit_time: r.i64("the commit time")?,
            }),
            b'O' => LogicalMessage::Origin(Origin {
                commit_lsn: r.lsn("the origin's commit LSN")?,
                name: Cow::Borrowed(r.cstr("an origin name")?),
            }),
            b'R' => LogicalMessage::Relation(parse_relation(&mut r, in_stream)?),
            b'Y' => LogicalMessage::Type(Type {
                xid: stream_xid(&mut r, in_stream)?,
                oid: r.u32("a type OID")?,
                namespace: Cow::Borrowed(r.cstr("a namespace")?),
                name: Cow::Borrowed(r.cstr("a type name")?),
            }),
            b'I' => {
                let xid = stream_xid(&mut r, in_stream)?;
                let oid = r.u32("a relation OID")?;
                expect_byte(&mut r, b'N', "a new tuple ('N')")?;
                LogicalMessage::Insert(Insert {
                    xid,
                    oid,
                    new: parse_tuple(&mut r)?,
                })
            }
            b'U' => LogicalMessage::Update(parse_update(&mut r, in_stream)?),
            b'D' => {
                let xid = stream_xid(&mut r, in_stream)?;
                let oid = r.u32("a relation OID")?;
                let at = r.pos();
                let expected = "an old key or old tuple ('K' or 'O')";
                let old = match r.u8(expected)? {
                    b'K' => OldTuple::Key(parse_tuple(&mut r)?),
                    b'O' => OldTuple::Full(parse_tuple(&mut r)?),
                    found => {
                        return Err(
                            r.error_at(at, DecodeErrorKind::UnexpectedByte { expected, found })
                        );
                    }
                };
                LogicalMessage::Delete(Delete { xid, oid, old })
            }
            b'T' => {
                let xid = stream_xid(&mut r, in_stream)?;
                let count = r.count32("a relation count")?;
                let options = r.u8("the truncate options")?;
                let mut relation_oids = Vec::with_capacity(r.capacity_for(count, 4));
                for _ in 0..count {
                    relation_oids.push(r.u32("a relation OID")?);
                }
                LogicalMessage::Truncate(Truncate {
                    xid,
                    options,
                    relation_oids,
                })
            }
            b'M' => {
                let xid = stream_xid(&mut r, in_stream)?;
                let transactional = r.bool("the transactional flag (0 or 1)")?;
                let lsn = r.lsn("the message LSN")?;
                let prefix = Cow::Borrowed(r.cstr("a message prefix")?);
                let len = r.count32("a content length")?;
                let content = Cow::Borrowed(r.bytes(len, "the message content")?);
                LogicalMessage::Message(Message {
                    xid,
                    transactional,
                    lsn,
                    prefix,
                    content,
                })
            }
            b'S' => LogicalMessage::StreamStart(StreamStart {
                xid: r.u32("a transaction ID")?,
                first_segment: r.bool("the first-segment flag (0 or 1)")?,
            }),
            b'E' => LogicalMessage::StreamStop,
            b'c' => LogicalMessage::StreamCommit(StreamCommit {
                xid: r.u32("a transaction ID")?,
                flags: r.u8("the commit flags")?,
                commit_lsn: r.lsn("the commit LSN")?,
                end_lsn: r.lsn("the end LSN")?,
                commit_time: r.i64("the commit time")?,
            }),
            b'A' => LogicalMessage::StreamAbort(StreamAbort {
                xid: r.u32("a transaction ID")?,
                subxid: r.u32("a subtransaction ID")?,
            }),
            // `message_name` knows exactly the tags above.
            _ => {
                return Err(DecodeError {
                    what: "logical replication message",
                    offset: 0,
                    kind: DecodeErrorKind::UnknownMessageType { tag },
                });
            }
        };
        Ok((message, r.pos()))
    }

    /// Detach from the input buffer (copies names, prefixes and values).
    pub fn into_owned(self) -> LogicalMessage<'static> {
        match self {
            LogicalMessage::Begin(m) => LogicalMessage::Begin(m),
            LogicalMessage::Commit(m) => LogicalMessage::Commit(m),
            LogicalMessage::Origin(m) => LogicalMessage::Origin(Origin {
                commit_lsn: m.commit_lsn,
                name: owned_str(m.name),
            }),
            LogicalMessage::Relation(m) => LogicalMessage::Relation(m.into_owned()),
            LogicalMessage::Type(m) => LogicalMessage::Type(Type {
                xid: m.xid,
                oid: m.oid,
                namespace: owned_str(m.namespace),
                name: owned_str(m.name),
            }),
            LogicalMessage::Insert(m) => LogicalMessage::Insert(Insert {
                xid: m.xid,
                oid: m.oid,
                new: m.new.into_owned(),
            }),
            LogicalMessage::Update(m) => LogicalMessage::Update(Update {
                xid: m.xid,
                oid: m.oid,
                old: m.old.map(OldTuple::into_owned),
                new: m.new.into_owned(),
            }),
            LogicalMessage::Delete(m) => LogicalMessage::Delete(Delete {
                xid: m.xid,
                oid: m.oid,
                old: m.old.into_owned(),
            }),
            LogicalMessage::Truncate(m) => LogicalMessage::Truncate(m),
            LogicalMessage::Message(m) => LogicalMessage::Message(Message {
                xid: m.xid,
                transactional: m.transactional,
                lsn: m.lsn,
                prefix: owned_str(m.prefix),
                content: Cow::Owned(m.content.into_owned()),
            }),
            LogicalMessage::StreamStart(m) => LogicalMessage::StreamStart(m),
            LogicalMessage::StreamStop => LogicalMessage::StreamStop,
            LogicalMessage::StreamCommit(m) => LogicalMessage::StreamCommit(m),
            LogicalMessage::StreamAbort(m) => LogicalMessage::StreamAbort(m),
        }
    }

    /// Append this message as pgoutput writes it, for tests and synthetic
    /// streams: [`parse`](Self::parse) reads it back (with `in_stream` true
    /// exactly when the message's `xid` is `Some`), and every message
    /// `parse` accepts encodes back to the same bytes.
    ///
    /// Fails, leaving `out` as it was, on a string with a NUL byte or a
    /// length the wire format cannot carry.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let start = out.len();
        let result = self.encode_unchecked(out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_unchecked(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            LogicalMessage::Begin(m) => {
                out.push(b'B');
                put_lsn(out, m.final_lsn);
                out.extend_from_slice(&m.commit_time.to_be_bytes());
                out.extend_from_slice(&m.xid.to_be_bytes());
            }
            LogicalMessage::Commit(m) => {
                out.push(b'C');
                out.push(m.flags);
                put_lsn(out, m.commit_lsn);
                put_lsn(out, m.end_lsn);
                out.extend_from_slice(&m.commit_time.to_be_bytes());
            }
            LogicalMessage::Origin(m) => {
                out.push(b'O');
                put_lsn(out, m.commit_lsn);
                put_cstr(out, &m.name, "an origin name")?;
            }
            LogicalMessage::Relation(m) => {
                out.push(b'R');
                put_xid(out, m.xid);
                out.extend_from_slice(&m.oid.to_be_bytes());
                put_cstr(out, &m.namespace, "a namespace")?;
                put_cstr(out, &m.name, "a relation name")?;
                out.push(m.replica_identity.as_byte());
                put_len16(out, m.columns.len(), "a relation's column list")?;
                for column in &m.columns {
                    out.push(column.flags);
                    put_cstr(out, &column.name, "a column name")?;
                    out.extend_from_slice(&column.type_oid.to_be_bytes());
                    out.extend_from_slice(&column.type_modifier.to_be_bytes());
                }
            }
            LogicalMessage::Type(m) => {
                out.push(b'Y');
                put_xid(out, m.xid);
                out.extend_from_slice(&m.oid.to_be_bytes());
                put_cstr(out, &m.namespace, "a namespace")?;
                put_cstr(out, &m.name, "a type name")?;
            }
            LogicalMessage::Insert(m) => {
                out.push(b'I');
                put_xid(out, m.xid);
                out.extend_from_slice(&m.oid.to_be_bytes());
                out.push(b'N');
                put_tuple(out, &m.new)?;
            }
            LogicalMessage::Update(m) => {
                out.push(b'U');
                put_xid(out, m.xid);
                out.extend_from_slice(&m.oid.to_be_bytes());
                if let Some(old) = &m.old {
                    put_old(out, old)?;
                }
                out.push(b'N');
                put_tuple(out, &m.new)?;
            }
            LogicalMessage::Delete(m) => {
                out.push(b'D');
                put_xid(out, m.xid);
                out.extend_from_slice(&m.oid.to_be_bytes());
                put_old(out, &m.old)?;
            }
            LogicalMessage::Truncate(m) => {
                out.push(b'T');
                put_xid(out, m.xid);
                put_len32(out, m.relation_oids.len(), "a truncate's relation list")?;
                out.push(m.options);
                for oid in &m.relation_oids {
                    out.extend_from_slice(&oid.to_be_bytes());
                }
            }
            LogicalMessage::Message(m) => {
                out.push(b'M');
                put_xid(out, m.xid);
                out.push(u8::from(m.transactional));
                put_lsn(out, m.lsn);
                put_cstr(out, &m.prefix, "a message prefix")?;
                put_len32(out, m.content.len(), "a message's content")?;
                out.extend_from_slice(&m.content);
            }
            LogicalMessage::StreamStart(m) => {
                out.push(b'S');
                out.extend_from_slice(&m.xid.to_be_bytes());
                out.push(u8::from(m.first_segment));
            }
            LogicalMessage::StreamStop => out.push(b'E'),
            LogicalMessage::StreamCommit(m) => {
                out.push(b'c');
                out.extend_from_slice(&m.xid.to_be_bytes());
                out.push(m.flags);
                put_lsn(out, m.commit_lsn);
                put_lsn(out, m.end_lsn);
                out.extend_from_slice(&m.commit_time.to_be_bytes());
            }
            LogicalMessage::StreamAbort(m) => {
                out.push(b'A');
                out.extend_from_slice(&m.xid.to_be_bytes());
                out.extend_from_slice(&m.subxid.to_be_bytes());
            }
        }
        Ok(())
    }
}

/// The transaction ID that prefixes a message inside a stream.
fn stream_xid(r: &mut Reader<'_>, in_stream: bool) -> Result<Option<u32>, DecodeError> {
    if in_stream {
        r.u32("the streamed transaction's ID").map(Some)
    } else {
        Ok(None)
    }
}

fn expect_byte(r: &mut Reader<'_>, want: u8, expected: &'static str) -> Result<(), DecodeError> {
    let at = r.pos();
    match r.u8(expected)? {
        found if found == want => Ok(()),
        found => Err(r.error_at(at, DecodeErrorKind::UnexpectedByte { expected, found })),
    }
}

fn parse_relation<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Relation<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let oid = r.u32("a relation OID")?;
    let namespace = Cow::Borrowed(r.cstr("a namespace")?);
    let name = Cow::Borrowed(r.cstr("a relation name")?);
    let at = r.pos();
    let expected = "a replica identity ('d', 'n', 'f' or 'i')";
    let found = r.u8(expected)?;
    let replica_identity = ReplicaIdentity::from_byte(found)
        .ok_or_else(|| r.error_at(at, DecodeErrorKind::UnexpectedByte { expected, found }))?;
    let count = r.count16("a column count")?;
    let mut columns = Vec::with_capacity(r.capacity_for(count, MIN_COLUMN_SIZE));
    for _ in 0..count {
        columns.push(Column {
            flags: r.u8("the column flags")?,
            name: Cow::Borrowed(r.cstr("a column name")?),
            type_oid: r.u32("a column type OID")?,
            type_modifier: r.i32("a column type modifier")?,
        });
    }
    Ok(Relation {
        xid,
        oid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

fn parse_update<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Update<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let oid = r.u32("a relation OID")?;
    let at = r.pos();
    let expected = "an old key, old tuple or new tuple ('K', 'O' or 'N')";
    let old = match r.u8(expected)? {
        b'K' => Some(OldTuple::Key(parse_tuple(r)?)),
        b'O' => Some(OldTuple::Full(parse_tuple(r)?)),
        b'N' => None,
        found => return Err(r.error_at(at, DecodeErrorKind::UnexpectedByte { expected, found })),
    };
    if old.is_some() {
        expect_byte(r, b'N', "a new tuple ('N')")?;
    }
    Ok(Update {
        xid,
        oid,
        old,
        new: parse_tuple(r)?,
    })
}

fn parse_tuple<'a>(r: &mut Reader<'a>) -> Result<TupleData<'a>, DecodeError> {
    let count = r.count16("a column count")?;
    // Every value takes at least its kind byte.
    let mut values = Vec::with_capacity(r.capacity_for(count, 1));
    for _ in 0..count {
        let at = r.pos();
        let expected = "a column value kind ('n', 'u', 't' or 'b')";
        let value = match r.u8(expected)? {
            b'n' => Value::Null,
            b'u' => Value::UnchangedToast,
            b't' => {
                let len = r.count32("a text value's length")?;
                Value::Text(Cow::Borrowed(r.bytes(len, "a text value")?))
            }
            b'b' => {
                let len = r.count32("a binary value's length")?;
                Value::Binary(Cow::Borrowed(r.bytes(len, "a binary value")?))
            }
            found => {
                return Err(r.error_at(at, DecodeErrorKind::UnexpectedByte { expected, found }));
            }
        };
        values.push(value);
    }
    Ok(TupleData { values })
}

fn put_lsn(out: &mut Vec<u8>, lsn: Lsn) {
    out.extend_from_slice(&lsn.0.to_be_bytes());
}

fn put_xid(out: &mut Vec<u8>, xid: Option<u32>) {
    if let Some(xid) = xid {
        out.extend_from_slice(&xid.to_be_bytes());
    }
}

fn put_cstr(out: &mut Vec<u8>, s: &str, field: &'static str) -> Result<(), EncodeError> {
    if s.as_bytes().contains(&0) {
        return Err(EncodeError::InteriorNul { field });
    }
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

fn put_len16(out: &mut Vec<u8>, len: usize, field: &'static str) -> Result<(), EncodeError> {
    let value = i16::try_from(len).map_err(|_| EncodeError::TooLong {
        field,
        len,
        max: i16::MAX as usize,
    })?;
    out.extend_from_slice(&value.to_be_bytes());
    Ok(())
}

fn put_len32(out: &mut Vec<u8>, len: usize, field: &'static str) -> Result<(), EncodeError> {
    let value = i32::try_from(len).map_err(|_| EncodeError::TooLong {
        field,
        len,
        max: i32::MAX as usize,
    })?;
    out.extend_from_slice(&value.to_be_bytes());
    Ok(())
}

fn put_old(out: &mut Vec<u8>, old: &OldTuple<'_>) -> Result<(), EncodeError> {
    let (tag, tuple) = match old {
        OldTuple::Key(tuple) => (b'K', tuple),
        OldTuple::Full(tuple) => (b'O', tuple),
    };
    out.push(tag);
    put_tuple(out, tuple)
}

fn put_tuple(out: &mut Vec<u8>, tuple: &TupleData<'_>) -> Result<(), EncodeError> {
    put_len16(out, tuple.values.len(), "a tuple's column list")?;
    for value in &tuple.values {
        match value {
            Value::Null => out.push(b'n'),
            Value::UnchangedToast => out.push(b'u'),
            Value::Text(bytes) => {
                out.push(b't');
                put_len32(out, bytes.len(), "a text value")?;
                out.extend_from_slice(bytes);
            }
            Value::Binary(bytes) => {
                out.push(b'b');
                put_len32(out, bytes.len(), "a binary value")?;
                out.extend_from_slice(bytes);
            }
        }
    }
    Ok(())
}

/// Decodes a stream of pgoutput messages, keeping track of whether it is
/// inside a streamed transaction's segment (protocol 2), where messages
/// carry a transaction ID: after a [`StreamStart`] until the next
/// [`LogicalMessage::StreamStop`].
///
/// With protocol 1 it never enters a stream, and decoding is plain
/// [`LogicalMessage::parse`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogicalDecoder {
    in_stream: bool,
}

impl LogicalDecoder {
    /// A decoder outside any stream.
    pub fn new() -> Self {
        LogicalDecoder::default()
    }

    /// Whether the last message decoded left us inside a streamed segment.
    pub fn in_stream(&self) -> bool {
        self.in_stream
    }

    /// Decode one message (the whole buffer) and update the stream state.
    /// On error the state is unchanged.
    pub fn decode<'a>(&mut self, data: &'a [u8]) -> Result<LogicalMessage<'a>, DecodeError> {
        let message = LogicalMessage::parse(data, self.in_stream)?;
        self.track(&message);
        Ok(message)
    }

    /// Decode the message at the start of `data`, returning it with the
    /// number of bytes it took (see [`LogicalMessage::parse_prefix`]), and
    /// update the stream state.
    pub fn decode_prefix<'a>(
        &mut self,
        data: &'a [u8],
    ) -> Result<(LogicalMessage<'a>, usize), DecodeError> {
        let (message, used) = LogicalMessage::parse_prefix(data, self.in_stream)?;
        self.track(&message);
        Ok((message, used))
    }

    fn track(&mut self, message: &LogicalMessage<'_>) {
        match message {
            LogicalMessage::StreamStart(_) => self.in_stream = true,
            LogicalMessage::StreamStop => self.in_stream = false,
            _ => {}
        }
    }
}
