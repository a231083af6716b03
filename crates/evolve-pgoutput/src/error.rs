//! Errors of the decoders and encoders.

use std::fmt;

/// Why a message could not be decoded: what was being decoded, at which
/// byte, and what was wrong.
///
/// Displayed as one sentence, e.g.
/// `truncated Relation message at byte 17: expected a column name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DecodeError {
    /// The message being decoded, e.g. `"Relation message"`,
    /// `"XLogData message"`, or `"logical replication message"` when its
    /// type was not known yet.
    pub what: &'static str,
    /// Offset of the offending byte (or of the field that could not be
    /// read) from the start of the buffer given to the parser.
    pub offset: usize,
    /// What was wrong.
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    /// The input ended before the message did (see
    /// [`DecodeErrorKind::Truncated`]). A client that received the whole
    /// message from the server has a protocol mismatch, not a short read.
    pub fn is_truncated(&self) -> bool {
        matches!(self.kind, DecodeErrorKind::Truncated { .. })
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let adjective = if self.is_truncated() {
            "truncated"
        } else {
            "invalid"
        };
        write!(
            f,
            "{adjective} {} at byte {}: {}",
            self.what, self.offset, self.kind
        )
    }
}

/// What was wrong with a message; part of a [`DecodeError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input ended where a field was expected; `expected` names the
    /// field, e.g. `"a column name"` (strings need their NUL terminator).
    Truncated {
        /// The field that could not be read.
        expected: &'static str,
    },
    /// A string field is not valid UTF-8; the error's offset is the first
    /// invalid byte.
    InvalidUtf8 {
        /// The string field.
        field: &'static str,
    },
    /// A byte with a fixed set of meanings (a tuple value kind, a replica
    /// identity, a flag) has none of them.
    UnexpectedByte {
        /// What was allowed there.
        expected: &'static str,
        /// The byte found instead.
        found: u8,
    },
    /// The first byte is not a message type this decoder knows. Protocol
    /// version 3 (two-phase commit) and 4 messages are among them.
    UnknownMessageType {
        /// The type byte.
        tag: u8,
    },
    /// A length or count field is negative.
    NegativeLength {
        /// The length or count field.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// The message ended before the buffer did (only from the parsers that
    /// require the buffer to hold exactly one message).
    TrailingBytes {
        /// How many bytes were left over.
        count: usize,
    },
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeErrorKind::Truncated { expected } => write!(f, "expected {expected}"),
            DecodeErrorKind::InvalidUtf8 { field } => {
                write!(f, "expected {field} in UTF-8, found invalid UTF-8")
            }
            DecodeErrorKind::UnexpectedByte { expected, found } => {
                write!(f, "expected {expected}, found {}", ShowByte(*found))
            }
            DecodeErrorKind::UnknownMessageType { tag } => {
                write!(f, "unknown message type {}", ShowByte(*tag))
            }
            DecodeErrorKind::NegativeLength { field, value } => {
                write!(f, "expected {field}, found negative value {value}")
            }
            DecodeErrorKind::TrailingBytes { count } => {
                let s = if *count == 1 { "" } else { "s" };
                write!(f, "{count} unexpected byte{s} after the end of the message")
            }
        }
    }
}

/// A byte as `'X' (0x58)` when it is printable ASCII, else as `0x0a`.
struct ShowByte(u8);

impl fmt::Display for ShowByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() {
            write!(f, "'{}' (0x{:02x})", char::from(self.0), self.0)
        } else {
            write!(f, "0x{:02x}", self.0)
        }
    }
}

/// Why a message could not be encoded: a value the wire format cannot
/// carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A string contains a NUL byte, which would end it early on the wire.
    #[error("cannot encode {field}: it contains a NUL byte")]
    InteriorNul {
        /// The string field.
        field: &'static str,
    },
    /// A byte string or list is longer than its length field can say
    /// (Int32 for values and relation lists, Int16 for columns).
    #[error("cannot encode {field}: {len} is more than the protocol's maximum of {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The largest length the protocol can carry there.
        max: usize,
    },
}
