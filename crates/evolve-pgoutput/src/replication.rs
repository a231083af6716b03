//! The streaming replication protocol's own messages: the CopyData payloads
//! exchanged in COPY BOTH mode after `START_REPLICATION`.

use crate::error::{DecodeError, DecodeErrorKind};
use crate::lsn::Lsn;
use crate::reader::Reader;

/// Microseconds from the Unix epoch (1970-01-01) to the PostgreSQL epoch
/// (2000-01-01), both UTC. Timestamps on the wire count microseconds since
/// the PostgreSQL epoch: subtract this from Unix microseconds to get one.
pub const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A message from the server inside COPY BOTH: the payload of one CopyData
/// (`d`) message of a `START_REPLICATION` connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationMessage<'a> {
    /// WAL data (`w`); for a logical slot, `data` is one message of the output
    /// plugin (for pgoutput, see [`LogicalMessage`](crate::LogicalMessage)).
    XLogData {
        /// The WAL position this data starts at; for pgoutput, the LSN the
        /// message is about (a change's LSN, a commit's end LSN).
        wal_start: Lsn,
        /// The current end of WAL on the server.
        wal_end: Lsn,
        /// The server's clock at transmission, in microseconds since
        /// 2000-01-01 UTC.
        server_time: i64,
        /// The payload, borrowed from the input.
        data: &'a [u8],
    },
    /// A primary keepalive (`k`).
    PrimaryKeepalive {
        /// The current end of WAL on the server.
        wal_end: Lsn,
        /// The server's clock at transmission, in microseconds since
        /// 2000-01-01 UTC.
        server_time: i64,
        /// The server asks for a standby status update soon, or it may
        /// disconnect the client (`wal_sender_timeout`).
        reply_requested: bool,
    },
}

/// Size of the XLogData header: type byte, two LSNs and a timestamp.
const XLOG_DATA_HEADER: usize = 1 + 8 + 8 + 8;

impl<'a> ReplicationMessage<'a> {
    /// Decode one CopyData payload; the whole buffer must be the message.
    ///
    /// Errors name the message and the byte offset in `payload`.
    pub fn parse(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let Some(&tag) = payload.first() else {
            return Err(DecodeError {
                what: "replication message",
                offset: 0,
                kind: DecodeErrorKind::Truncated {
                    expected: "a message type ('w' or 'k')",
                },
            });
        };
        match tag {
            b'w' => {
                let mut r = Reader::new(payload, 1, "XLogData message");
                let wal_start = r.lsn("the WAL start")?;
                let wal_end = r.lsn("the WAL end")?;
                let server_time = r.i64("the server time")?;
                Ok(ReplicationMessage::XLogData {
                    wal_start,
                    wal_end,
                    server_time,
                    data: r.rest(),
                })
            }
            b'k' => {
                let mut r = Reader::new(payload, 1, "primary keepalive message");
                let wal_end = r.lsn("the WAL end")?;
                let server_time = r.i64("the server time")?;
                let reply_requested = r.bool("a reply-requested flag (0 or 1)")?;
                if r.remaining() > 0 {
                    return Err(r.error_at(
                        r.pos(),
                        DecodeErrorKind::TrailingBytes {
                            count: r.remaining(),
                        },
                    ));
                }
                Ok(ReplicationMessage::PrimaryKeepalive {
                    wal_end,
                    server_time,
                    reply_requested,
                })
            }
            tag => Err(DecodeError {
                what: "replication message",
                offset: 0,
                kind: DecodeErrorKind::UnknownMessageType { tag },
            }),
        }
    }

    /// Append this message as the server sends it (for tests and synthetic
    /// streams; [`parse`](Self::parse) reads it back).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_time,
                data,
            } => {
                out.reserve(XLOG_DATA_HEADER + data.len());
                out.push(b'w');
                out.extend_from_slice(&wal_start.0.to_be_bytes());
                out.extend_from_slice(&wal_end.0.to_be_bytes());
                out.extend_from_slice(&server_time.to_be_bytes());
                out.extend_from_slice(data);
            }
            ReplicationMessage::PrimaryKeepalive {
                wal_end,
                server_time,
                reply_requested,
            } => {
                out.push(b'k');
                out.extend_from_slice(&wal_end.0.to_be_bytes());
                out.extend_from_slice(&server_time.to_be_bytes());
                out.push(u8::from(reply_requested));
            }
        }
    }
}

/// The client's standby status update (`r`), as the payload of a CopyData
/// message to send to the server.
///
/// `write`, `flush` and `apply` are the positions the client has received,
/// durably stored and applied; for a logical slot, `flush` is what the
/// server may forget (the slot's `confirmed_flush_lsn` advances to it), so
/// it must only cover what is safely stored downstream. `client_time` is
/// microseconds since 2000-01-01 UTC (see [`POSTGRES_EPOCH_UNIX_MICROS`]);
/// `reply_requested` asks the server to answer with a keepalive at once.
pub fn encode_standby_status_update(
    write: Lsn,
    flush: Lsn,
    apply: Lsn,
    client_time: i64,
    reply_requested: bool,
) -> [u8; 34] {
    let mut out = [0u8; 34];
    out[0] = b'r';
    out[1..9].copy_from_slice(&write.0.to_be_bytes());
    out[9..17].copy_from_slice(&flush.0.to_be_bytes());
    out[17..25].copy_from_slice(&apply.0.to_be_bytes());
    out[25..33].copy_from_slice(&client_time.to_be_bytes());
    out[33] = u8::from(reply_requested);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xlog(data: &[u8]) -> Vec<u8> {
        let mut b = vec![b'w'];
        b.extend_from_slice(&0x0000_0001_0000_0028u64.to_be_bytes());
        b.extend_from_slice(&0x0000_0001_0000_0100u64.to_be_bytes());
        b.extend_from_slice(&(-5i64).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    fn keepalive(reply: u8) -> Vec<u8> {
        let mut b = vec![b'k'];
        b.extend_from_slice(&0x16_B374_D848u64.to_be_bytes());
        b.extend_from_slice(&774_000_000_000_000i64.to_be_bytes());
        b.push(reply);
        b
    }

    #[test]
    fn parses_xlog_data() {
        let bytes = xlog(b"B\x00\n");
        let msg = ReplicationMessage::parse(&bytes).unwrap();
        assert_eq!(
            msg,
            ReplicationMessage::XLogData {
                wal_start: "1/28".parse().unwrap(),
                wal_end: "1/100".parse().unwrap(),
                server_time: -5,
                data: b"B\x00\n",
            }
        );
        let mut again = Vec::new();
        msg.encode(&mut again);
        assert_eq!(again, bytes);
        // Empty data is allowed: the payload is whatever follows the header.
        assert!(matches!(
            ReplicationMessage::parse(&xlog(b"")),
            Ok(ReplicationMessage::XLogData { data: [], .. })
        ));
    }

    #[test]
    fn parses_keepalives() {
        for (byte, reply_requested) in [(0, false), (1, true)] {
            let bytes = keepalive(byte);
            let msg = ReplicationMessage::parse(&bytes).unwrap();
            assert_eq!(
                msg,
                ReplicationMessage::PrimaryKeepalive {
                    wal_end: Lsn(0x16_B374_D848),
                    server_time: 774_000_000_000_000,
                    reply_requested,
                }
            );
            let mut again = Vec::new();
            msg.encode(&mut again);
            assert_eq!(again, bytes);
        }
    }

    #[test]
    fn every_truncation_fails() {
        let xlog = xlog(b"");
        for len in 0..xlog.len() {
            let err = ReplicationMessage::parse(&xlog[..len]).unwrap_err();
            assert!(err.is_truncated(), "{err}");
            // The error points at the start of the field that was cut.
            let field_start = [0, 1, 9, 17].into_iter().rfind(|&start| start <= len);
            assert_eq!(Some(err.offset), field_start, "{err}");
        }
        let keepalive = keepalive(1);
        for len in 0..keepalive.len() {
            let err = ReplicationMessage::parse(&keepalive[..len]).unwrap_err();
            assert!(err.is_truncated(), "{err}");
        }
        assert_eq!(
            ReplicationMessage::parse(&xlog[..10])
                .unwrap_err()
                .to_string(),
            "truncated XLogData message at byte 9: expected the WAL end"
        );
        assert_eq!(
            ReplicationMessage::parse(&[]).unwrap_err().to_string(),
            "truncated replication message at byte 0: expected a message type ('w' or 'k')"
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            ReplicationMessage::parse(b"r123").unwrap_err().to_string(),
            "invalid replication message at byte 0: unknown message type 'r' (0x72)"
        );
        assert_eq!(
            ReplicationMessage::parse(&keepalive(2))
                .unwrap_err()
                .to_string(),
            "invalid primary keepalive message at byte 17: expected a reply-requested flag (0 or 1), found 0x02"
        );
        let mut long = keepalive(0);
        long.push(0);
        assert_eq!(
            ReplicationMessage::parse(&long).unwrap_err().to_string(),
            "invalid primary keepalive message at byte 18: 1 unexpected byte after the end of the message"
        );
    }

    #[test]
    fn encodes_standby_status_update() {
        let bytes = encode_standby_status_update(
            Lsn(0x0102_0304_0506_0708),
            Lsn(0x1112_1314_1516_1718),
            Lsn(0x2122_2324_2526_2728),
            0x3132_3334_3536_3738,
            true,
        );
        let expected: Vec<u8> = [b'r']
            .into_iter()
            .chain(0x0102_0304_0506_0708u64.to_be_bytes())
            .chain(0x1112_1314_1516_1718u64.to_be_bytes())
            .chain(0x2122_2324_2526_2728u64.to_be_bytes())
            .chain(0x3132_3334_3536_3738u64.to_be_bytes())
            .chain([1])
            .collect();
        assert_eq!(bytes.as_slice(), expected.as_slice());
        assert_eq!(
            encode_standby_status_update(Lsn(0), Lsn(0), Lsn(0), 0, false)[33],
            0
        );
    }

    #[test]
    fn epoch_offset_is_thirty_years() {
        // 10957 days from 1970-01-01 to 2000-01-01.
        assert_eq!(POSTGRES_EPOCH_UNIX_MICROS, 10_957 * 86_400 * 1_000_000);
    }
}
