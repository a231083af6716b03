//! MariaDB's compressed binlog events (`log_bin_compress = ON`), taken
//! apart into the events they compress (see the parent module's docs).
//!
//! MariaDB writes a statement of at least `log_bin_compress_min_len` bytes
//! (10 to 1024), and a rows event of row images at least that long, as a
//! compressed event of its own type: `QUERY_COMPRESSED_EVENT` (165) for `QUERY_EVENT`,
//! `WRITE_ROWS_COMPRESSED_EVENT_V1`, `UPDATE_..._V1` and `DELETE_..._V1`
//! (166 to 168) for the version 1 rows events (23 to 25), and
//! `WRITE_ROWS_COMPRESSED_EVENT` to `DELETE_ROWS_COMPRESSED_EVENT` (169 to
//! 171) for the version 2 ones (30 to 32). The event is its counterpart
//! with one part replaced by a compressed record, and the format
//! description gives both types the same post-header length:
//!
//! - a query event's statement text, everything after the post-header,
//!   the status variables, the default database and its NUL byte;
//! - a rows event's rows, everything after the post-header (the table id
//!   and flags, and in version 2 the extra data, whose length counts its
//!   own two bytes), the column count (a length-encoded integer) and the
//!   column bitmaps (one, two for an update, of `(columns + 7) / 8`
//!   bytes each).
//!
//! The record ([`inflate`]): a header byte whose high bit is set, whose
//! bits 4 to 6 name the algorithm (0, zlib, the only one MariaDB has) and
//! whose low 3 bits give the number of length bytes (1 to 4); the length
//! of the part uncompressed, big-endian in that many bytes; then zlib's
//! `compress()` output (with its zlib header and Adler-32 trailer) up to
//! the end of the event, its checksum excepted.
//!
//! This is what MariaDB's `binlog_buf_compress` writes and
//! `query_event_uncompress`, `row_log_event_uncompress` and
//! `binlog_buf_uncompress` read (`sql/log_event.cc`; the writers are
//! `Query_compressed_log_event::write` and `Rows_log_event::write_compressed`
//! in `sql/log_event_server.cc`). Where MariaDB reads the header byte it
//! ignores bit 3, and so does [`inflate`].
//!
//! Pure: no I/O. Every input, however malformed, gives an error, never a
//! panic.

use flate2::{Decompress, FlushDecompress, Status};
use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{
    BinlogEventFooter, BinlogEventHeader, Event, FormatDescriptionEvent,
};

/// The most an event may declare its compressed part to inflate to: a
/// binlog event is at most `max_allowed_packet` long, itself at most
/// 1 GiB, so a larger length is a damaged (or hostile) event, refused
/// before anything is allocated for it.
pub const MAX_INFLATED: usize = 1 << 30;

/// MariaDB's compressed event types: `(type, MariaDB's name, the type it
/// compresses)`.
const TYPES: [(u8, &str, EventType); 7] = [
    (165, "Query_compressed", EventType::QUERY_EVENT),
    (
        166,
        "Write_rows_compressed_v1",
        EventType::WRITE_ROWS_EVENT_V1,
    ),
    (
        167,
        "Update_rows_compressed_v1",
        EventType::UPDATE_ROWS_EVENT_V1,
    ),
    (
        168,
        "Delete_rows_compressed_v1",
        EventType::DELETE_ROWS_EVENT_V1,
    ),
    (169, "Write_rows_compressed", EventType::WRITE_ROWS_EVENT),
    (170, "Update_rows_compressed", EventType::UPDATE_ROWS_EVENT),
    (171, "Delete_rows_compressed", EventType::DELETE_ROWS_EVENT),
];

/// The event type a compressed event of type `kind` stands for; `None`
/// when `kind` is not one of MariaDB's compressed types.
pub fn counterpart(kind: u8) -> Option<EventType> {
    TYPES.iter().find(|t| t.0 == kind).map(|t| t.2)
}

/// MariaDB's name of compressed event type `kind`, as `SHOW BINLOG EVENTS`
/// and `mariadb-binlog` print it (`Write_rows_compressed_v1`).
pub fn type_name(kind: u8) -> &'static str {
    TYPES
        .iter()
        .find(|t| t.0 == kind)
        .map_or("unknown", |t| t.1)
}

/// Appends to `out` the body (post-header and what follows) of the event
/// of type `to` that a compressed event with body `data` (its checksum cut
/// off) stands for: `data` up to its compressed record, then the record
/// inflated. `fde` is the format description the event came with, whose
/// post-header lengths place the record as `mysql_common` will read the
/// event of type `to`. On an error `out` may hold part of the body.
pub fn uncompress(
    to: EventType,
    data: &[u8],
    fde: &FormatDescriptionEvent<'_>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let head = if to == EventType::QUERY_EVENT {
        query_head(data, fde)?
    } else {
        rows_head(to, data, fde)?
    };
    let record = match data.get(head..) {
        Some(record) if !record.is_empty() => record,
        _ => {
            return Err(format!(
                "its body of {} bytes ends before its compressed part, which starts at byte {head}",
                data.len()
            ));
        }
    };
    out.extend_from_slice(&data[..head]);
    inflate_into(record, out)
}

/// The event of type `to` that MariaDB's compressed event `event` stands
/// for, as `mysql_common` reads it: the same header (timestamp, server,
/// end position, flags) with type `to` and the new size, and the body
/// with its compressed part inflated ([`uncompress`]).
pub fn inflate_event(event: &Event, to: EventType) -> Result<Event, String> {
    let header = event.header();
    let mut raw = vec![0; BinlogEventHeader::LEN];
    uncompress(to, event.data(), event.fde(), &mut raw)?;
    // The reader cut the checksum off the event's data, and cuts as many
    // bytes off the rebuilt event's, without checking them.
    let trailer = usize::try_from(header.event_size())
        .unwrap_or(usize::MAX)
        .saturating_sub(BinlogEventHeader::LEN + event.data().len())
        .min(BinlogEventFooter::BINLOG_CHECKSUM_LEN);
    raw.resize(raw.len() + trailer, 0);
    let size = u32::try_from(raw.len()).map_err(|_| {
        format!(
            "it inflates to {} bytes, more than an event holds",
            raw.len()
        )
    })?;
    raw[..4].copy_from_slice(&header.timestamp().to_le_bytes());
    raw[4] = to as u8;
    raw[5..9].copy_from_slice(&header.server_id().to_le_bytes());
    raw[9..13].copy_from_slice(&size.to_le_bytes());
    raw[13..17].copy_from_slice(&header.log_pos().to_le_bytes());
    raw[17..19].copy_from_slice(&header.flags_raw().to_le_bytes());
    Event::read(event.fde(), raw.as_slice()).map_err(|e| e.to_string())
}

/// Where a query event's statement text starts: after the post-header, the
/// status variables, the default database and its NUL byte.
fn query_head(data: &[u8], fde: &FormatDescriptionEvent<'_>) -> Result<usize, String> {
    let post = usize::from(fde.get_event_type_header_length(EventType::QUERY_EVENT));
    if post < 13 {
        return Err(format!(
            "the format description gives query events a post-header of {post} bytes, fewer than the 13 they have"
        ));
    }
    let [_, _, _, _, _, _, _, _, db_len, _, _, vars_lo, vars_hi, ..] = *data else {
        return Err(format!(
            "its body is {} bytes long, shorter than a query event's post-header",
            data.len()
        ));
    };
    Ok(post + usize::from(u16::from_le_bytes([vars_lo, vars_hi])) + usize::from(db_len) + 1)
}

/// Where a rows event's rows start: after the post-header, the column count
/// and the column bitmaps, read as `mysql_common` reads them.
fn rows_head(
    to: EventType,
    data: &[u8],
    fde: &FormatDescriptionEvent<'_>,
) -> Result<usize, String> {
    let post = fde.get_event_type_header_length(to);
    // The table id (4 bytes when the post-header is 6 bytes long, as old
    // servers wrote it, else 6) and the flags.
    let mut at: usize = if post == 6 { 4 } else { 6 } + 2;
    if post == fde.get_event_type_header_length(EventType::WRITE_ROWS_EVENT) {
        let extra = match data.get(at..at + 2) {
            Some(&[lo, hi]) => usize::from(u16::from_le_bytes([lo, hi])),
            _ => return Err("it ends inside its post-header".into()),
        };
        if extra < 2 {
            return Err(format!(
                "its extra data is {extra} bytes long, less than the 2 bytes of the length itself"
            ));
        }
        at += extra;
    }
    let columns = match data.get(at..) {
        Some(&[first @ 0..=0xfa, ..]) => {
            at += 1;
            u64::from(first)
        }
        Some(&[0xfc, a, b, ..]) => {
            at += 3;
            u64::from(u16::from_le_bytes([a, b]))
        }
        Some(&[0xfd, a, b, c, ..]) => {
            at += 4;
            u64::from_le_bytes([a, b, c, 0, 0, 0, 0, 0])
        }
        Some(&[0xfe, a, b, c, d, e, f, g, h, ..]) => {
            at += 9;
            u64::from_le_bytes([a, b, c, d, e, f, g, h])
        }
        Some(&[bad @ (0xfb | 0xff), ..]) => {
            return Err(format!("its column count starts with byte {bad:#04x}"));
        }
        _ => return Err("it ends before its column count".into()),
    };
    let bitmaps: u64 = if matches!(
        to,
        EventType::UPDATE_ROWS_EVENT | EventType::UPDATE_ROWS_EVENT_V1
    ) {
        2
    } else {
        1
    };
    let bitmap_bytes = columns
        .div_ceil(8)
        .checked_mul(bitmaps)
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| n.checked_add(at))
        .filter(|end| *end <= data.len())
        .ok_or_else(|| format!("it ends inside the column bitmaps of its {columns} columns"))?;
    Ok(bitmap_bytes)
}

/// Inflates MariaDB's compressed record `record` (see the module docs):
/// exactly the length its header declares, at most [`MAX_INFLATED`]
/// bytes, from a zlib stream that ends with its valid Adler-32 checksum at
/// the end of the record.
pub fn inflate(record: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    inflate_into(record, &mut out)?;
    Ok(out)
}

/// [`inflate`], appending to `out`.
fn inflate_into(record: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let Some((&header, rest)) = record.split_first() else {
        return Err("its compressed record is empty".into());
    };
    if header & 0x80 == 0 {
        return Err(format!(
            "its compressed record's header byte {header:#04x} lacks the compressed flag 0x80"
        ));
    }
    let algorithm = (header >> 4) & 0x07;
    if algorithm != 0 {
        return Err(format!(
            "its compressed record's header byte {header:#04x} names compression algorithm {algorithm}; MariaDB has only zlib (0)"
        ));
    }
    let width = usize::from(header & 0x07);
    if !(1..=4).contains(&width) {
        return Err(format!(
            "its compressed record's header byte {header:#04x} gives {width} length bytes, not 1 to 4"
        ));
    }
    let Some((length, stream)) = rest.split_at_checked(width) else {
        return Err(format!(
            "its compressed record ends inside its {width} length bytes"
        ));
    };
    let declared = length
        .iter()
        .fold(0usize, |n, byte| (n << 8) | usize::from(*byte));
    if declared == 0 {
        return Err("its compressed record declares a length of 0 bytes".into());
    }
    if declared > MAX_INFLATED {
        return Err(format!(
            "its compressed record declares {declared} bytes, more than the {MAX_INFLATED} a binlog event can hold"
        ));
    }
    let start = out.len();
    let mut zlib = Decompress::new(true);
    loop {
        let produced = out.len() - start;
        // Room for one byte past the declared length, to see a longer
        // stream; grown as the output comes, not allocated up front.
        if out.len() == out.capacity() {
            let room = (declared + 1 - produced).min(produced.max(64 * 1024));
            out.reserve_exact(room);
        }
        let read = usize::try_from(zlib.total_in()).unwrap_or(usize::MAX);
        let status = zlib
            .decompress_vec(
                stream.get(read..).unwrap_or_default(),
                out,
                FlushDecompress::None,
            )
            .map_err(|e| format!("its zlib stream is corrupt: {e}"))?;
        let now = out.len() - start;
        if now > declared {
            return Err(format!(
                "its zlib stream inflates to more than the {declared} bytes it declares"
            ));
        }
        if status == Status::StreamEnd {
            break;
        }
        let moved = usize::try_from(zlib.total_in()).unwrap_or(usize::MAX) != read;
        if !moved && now == produced {
            return Err(format!(
                "its zlib stream is cut short: it ends without its end marker, after inflating {now} of the {declared} bytes it declares"
            ));
        }
    }
    let inflated = out.len() - start;
    let read = usize::try_from(zlib.total_in()).unwrap_or(usize::MAX);
    if read != stream.len() {
        return Err(format!(
            "{} bytes follow the end of its zlib stream",
            stream.len().saturating_sub(read)
        ));
    }
    if inflated != declared {
        return Err(format!(
            "its zlib stream inflates to {inflated} bytes, and it declares {declared}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::ZlibEncoder;
    use mysql_async::binlog::{BinlogChecksumAlg, BinlogVersion};
    use proptest::prelude::*;
    use std::io::Write;

    /// A record as MariaDB's `binlog_buf_compress` writes it: the fewest
    /// length bytes that hold the length.
    fn record(plain: &[u8]) -> Vec<u8> {
        let len = u32::try_from(plain.len()).unwrap();
        let width = match len {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            0x1_0000..=0xff_ffff => 3,
            _ => 4,
        };
        record_with(plain, width, 0x80 | width as u8)
    }

    fn record_with(plain: &[u8], width: usize, header: u8) -> Vec<u8> {
        let mut out = vec![header];
        out.extend_from_slice(&(plain.len() as u32).to_be_bytes()[4 - width..]);
        out.extend_from_slice(&zlib(plain));
        out
    }

    fn zlib(plain: &[u8]) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(plain).unwrap();
        encoder.finish().unwrap()
    }

    /// MariaDB's format description: 13-byte query post-headers, 8 for
    /// version 1 rows events, 10 for version 2 (MariaDB gives its
    /// compressed types the same).
    fn mariadb_fde() -> FormatDescriptionEvent<'static> {
        let mut lengths = vec![0u8; 171];
        lengths[EventType::QUERY_EVENT as usize - 1] = 13;
        for t in 23..=25 {
            lengths[t - 1] = 8;
        }
        for t in 30..=32 {
            lengths[t - 1] = 10;
        }
        for t in 165..=171 {
            lengths[t - 1] = lengths[usize::from(counterpart(t as u8).unwrap() as u8) - 1];
        }
        FormatDescriptionEvent::new(BinlogVersion::Version4).with_event_type_header_lengths(lengths)
    }

    #[test]
    fn records_round_trip_with_one_to_four_length_bytes() {
        for len in [1usize, 10, 255, 256, 65_535, 65_536, 70_000, 16_777_216] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let rec = record(&plain);
            let width = usize::from(rec[0] & 0x07);
            let expected_width = match len {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                0x1_0000..=0xff_ffff => 3,
                _ => 4,
            };
            assert_eq!(width, expected_width, "{len}");
            assert_eq!(inflate(&rec).unwrap(), plain, "{len}");
        }
        // More length bytes than needed read the same, as MariaDB reads them.
        for width in 1..=4 {
            let rec = record_with(b"0123456789", width, 0x80 | width as u8);
            assert_eq!(inflate(&rec).unwrap(), b"0123456789");
        }
        // Bit 3 of the header is ignored, as MariaDB ignores it.
        let rec = record_with(b"0123456789", 1, 0x89);
        assert_eq!(inflate(&rec).unwrap(), b"0123456789");
    }

    #[test]
    fn bad_headers_are_refused() {
        let plain = b"INSERT INTO t VALUES (1)";
        let e = inflate(&record_with(plain, 1, 0x01)).unwrap_err();
        assert!(e.contains("lacks the compressed flag 0x80"), "{e}");
        for header in [0x91, 0xa1, 0xf1] {
            let e = inflate(&record_with(plain, 1, header)).unwrap_err();
            assert!(e.contains("names compression algorithm"), "{e}");
            assert!(e.contains("only zlib (0)"), "{e}");
        }
        for header in [0x80, 0x85, 0x87] {
            let e = inflate(&record_with(plain, 1, header)).unwrap_err();
            assert!(e.contains("length bytes, not 1 to 4"), "{e}");
        }
        assert_eq!(inflate(&[]).unwrap_err(), "its compressed record is empty");
        let e = inflate(&[0x83, 0x00, 0x01]).unwrap_err();
        assert!(e.contains("ends inside its 3 length bytes"), "{e}");
    }

    #[test]
    fn truncated_and_damaged_streams_are_refused() {
        let plain: Vec<u8> = b"a row image that is long enough ".repeat(20);
        let rec = record(&plain);
        for cut in [rec.len() - 1, rec.len() - 4, rec.len() / 2, 3] {
            let e = inflate(&rec[..cut]).unwrap_err();
            assert!(
                e.contains("is cut short") || e.contains("corrupt"),
                "cut at {cut}: {e}"
            );
        }
        // Only the header and the length: no stream at all.
        assert_eq!(
            inflate(&rec[..3]).unwrap_err(),
            "its zlib stream is cut short: it ends without its end marker, after inflating 0 of the 640 bytes it declares"
        );
        // A wrong Adler-32 checksum.
        let mut bad = rec.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x55;
        let e = inflate(&bad).unwrap_err();
        assert!(e.contains("corrupt"), "{e}");
        // Bytes after the stream's end.
        let mut long = rec.clone();
        long.extend_from_slice(b"xyz");
        assert_eq!(
            inflate(&long).unwrap_err(),
            "3 bytes follow the end of its zlib stream"
        );
    }

    #[test]
    fn declared_lengths_must_match() {
        let plain = b"0123456789abcdef";
        let mut shorter = record(plain);
        shorter[1] = 10;
        assert_eq!(
            inflate(&shorter).unwrap_err(),
            "its zlib stream inflates to more than the 10 bytes it declares"
        );
        let mut longer = record(plain);
        longer[1] = 17;
        assert_eq!(
            inflate(&longer).unwrap_err(),
            "its zlib stream inflates to 16 bytes, and it declares 17"
        );
        let mut zero = record(plain);
        zero[1] = 0;
        assert_eq!(
            inflate(&zero).unwrap_err(),
            "its compressed record declares a length of 0 bytes"
        );
        // A hostile length is refused before anything is inflated.
        let huge = record_with(plain, 4, 0x84);
        let mut huge = huge;
        huge[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = inflate(&huge).unwrap_err();
        assert!(
            e.contains("declares 4294967295 bytes, more than the 1073741824"),
            "{e}"
        );
        // A small stream of zeros that inflates far past its declared length
        // stops one byte past it.
        let bomb = record_with(&vec![0u8; 8 << 20], 1, 0x81);
        let mut bomb = bomb;
        bomb[1] = 200;
        assert_eq!(
            inflate(&bomb).unwrap_err(),
            "its zlib stream inflates to more than the 200 bytes it declares"
        );
    }

    /// A query event's body: post-header, status variables, database, NUL,
    /// statement.
    fn query_body(db: &str, vars: &[u8], statement: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_le_bytes()); // thread id
        body.extend_from_slice(&0u32.to_le_bytes()); // execution time
        body.push(db.len() as u8);
        body.extend_from_slice(&0u16.to_le_bytes()); // error code
        body.extend_from_slice(&(vars.len() as u16).to_le_bytes());
        body.extend_from_slice(vars);
        body.extend_from_slice(db.as_bytes());
        body.push(0);
        body.extend_from_slice(statement);
        body
    }

    #[test]
    fn query_events_inflate_their_statement() {
        let fde = mariadb_fde();
        let statement = b"ALTER TABLE orders DROP COLUMN note";
        let plain = query_body("shop", &[0, 0, 0, 0, 0], statement);
        let mut compressed = plain[..plain.len() - statement.len()].to_vec();
        compressed.extend_from_slice(&record(statement));
        let mut out = Vec::new();
        uncompress(EventType::QUERY_EVENT, &compressed, &fde, &mut out).unwrap();
        assert_eq!(out, plain);
        // The body ends right after the database: nothing to inflate.
        let head = &compressed[..plain.len() - statement.len()];
        let e = uncompress(EventType::QUERY_EVENT, head, &fde, &mut Vec::new()).unwrap_err();
        assert!(e.contains("before its compressed part"), "{e}");
        let e = uncompress(EventType::QUERY_EVENT, &head[..10], &fde, &mut Vec::new()).unwrap_err();
        assert!(
            e.contains("shorter than a query event's post-header"),
            "{e}"
        );
    }

    /// A rows event's body: table id, flags, the version 2 extra data, the
    /// column count, the bitmaps, the rows.
    fn rows_body(v2: bool, columns: u64, bitmaps: usize, rows: &[u8]) -> (Vec<u8>, usize) {
        let mut body = vec![42, 0, 0, 0, 0, 0, 1, 0];
        if v2 {
            body.extend_from_slice(&5u16.to_le_bytes());
            body.extend_from_slice(&[1, 2, 3]);
        }
        if columns < 251 {
            body.push(columns as u8);
        } else {
            body.push(0xfc);
            body.extend_from_slice(&(columns as u16).to_le_bytes());
        }
        let bitmap = columns.div_ceil(8) as usize;
        body.extend(std::iter::repeat_n(0xff, bitmap * bitmaps));
        let head = body.len();
        body.extend_from_slice(rows);
        (body, head)
    }

    #[test]
    fn rows_events_inflate_their_rows() {
        let fde = mariadb_fde();
        let rows: Vec<u8> = b"\xf8\x01\x00\x00\x00\x01a\x10\x00hello world note".repeat(3);
        for (kind, v2, bitmaps) in [
            (166u8, false, 1),
            (167, false, 2),
            (168, false, 1),
            (169, true, 1),
            (170, true, 2),
            (171, true, 1),
        ] {
            for columns in [3u64, 9, 300] {
                let to = counterpart(kind).unwrap();
                let (plain, head) = rows_body(v2, columns, bitmaps, &rows);
                let mut compressed = plain[..head].to_vec();
                compressed.extend_from_slice(&record(&rows));
                let mut out = Vec::new();
                uncompress(to, &compressed, &fde, &mut out).unwrap();
                assert_eq!(out, plain, "{} with {columns} columns", type_name(kind));
                // Cut inside the bitmaps or before the rows.
                let e = uncompress(to, &compressed[..head - 1], &fde, &mut Vec::new()).unwrap_err();
                assert!(e.contains("column bitmaps"), "{e}");
                let e = uncompress(to, &compressed[..head], &fde, &mut Vec::new()).unwrap_err();
                assert!(e.contains("before its compressed part"), "{e}");
            }
        }
        let e = uncompress(
            EventType::WRITE_ROWS_EVENT,
            &[42, 0, 0, 0, 0, 0, 1, 0, 1, 0, 3],
            &fde,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.contains("less than the 2 bytes"), "{e}");
        let e = uncompress(
            EventType::WRITE_ROWS_EVENT_V1,
            &[42, 0, 0, 0, 0, 0, 1, 0, 0xfb, 0],
            &fde,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert_eq!(e, "its column count starts with byte 0xfb");
        // A column count whose bitmaps could not fit in any event.
        let mut huge = vec![42, 0, 0, 0, 0, 0, 1, 0, 0xfe];
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        let e = uncompress(
            EventType::UPDATE_ROWS_EVENT_V1,
            &huge,
            &fde,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.contains("column bitmaps"), "{e}");
    }

    /// An event as the binlog holds it: the header, the body, and a
    /// checksum when `fde` says there is one.
    fn raw_event(kind: u8, body: &[u8], checksum: bool) -> Vec<u8> {
        let size = (BinlogEventHeader::LEN + body.len() + if checksum { 4 } else { 0 }) as u32;
        let mut raw = Vec::new();
        raw.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        raw.push(kind);
        raw.extend_from_slice(&7u32.to_le_bytes());
        raw.extend_from_slice(&size.to_le_bytes());
        raw.extend_from_slice(&4242u32.to_le_bytes());
        raw.extend_from_slice(&0x0008u16.to_le_bytes());
        raw.extend_from_slice(body);
        if checksum {
            raw.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        }
        raw
    }

    #[test]
    fn compressed_events_read_as_their_counterparts() {
        let statement = b"TRUNCATE TABLE orders";
        let query = query_body("shop", &[], statement);
        let query_head = query.len() - statement.len();
        let rows: Vec<u8> = b"\xf8\x01\x00\x00\x00\x01a\x10\x00hello world note".repeat(2);
        for checksum in [true, false] {
            let alg = if checksum {
                BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32
            } else {
                BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF
            };
            let fde = mariadb_fde().with_footer(BinlogEventFooter::new(alg));
            let mut cases = vec![(165u8, query.clone(), query_head, statement.to_vec())];
            for (kind, v2, bitmaps) in [(166u8, false, 1), (167, false, 2), (171, true, 1)] {
                let (plain, head) = rows_body(v2, 3, bitmaps, &rows);
                cases.push((kind, plain, head, rows.clone()));
            }
            for (kind, plain, head, part) in cases {
                let to = counterpart(kind).unwrap();
                let mut body = plain[..head].to_vec();
                body.extend_from_slice(&record(&part));
                let event = Event::read(&fde, raw_event(kind, &body, checksum).as_slice()).unwrap();
                assert_eq!(event.read_data().unwrap(), None, "{}", type_name(kind));
                let inflated = inflate_event(&event, to).unwrap();
                let plain_event =
                    Event::read(&fde, raw_event(to as u8, &plain, checksum).as_slice()).unwrap();
                assert_eq!(
                    inflated.header(),
                    plain_event.header(),
                    "{}",
                    type_name(kind)
                );
                assert_eq!(inflated.data(), plain_event.data());
                let data = inflated.read_data().unwrap();
                assert!(data.is_some());
                assert_eq!(data, plain_event.read_data().unwrap());
            }
        }
    }

    #[test]
    fn the_types_and_their_names() {
        assert_eq!(counterpart(165), Some(EventType::QUERY_EVENT));
        assert_eq!(counterpart(166), Some(EventType::WRITE_ROWS_EVENT_V1));
        assert_eq!(counterpart(168), Some(EventType::DELETE_ROWS_EVENT_V1));
        assert_eq!(counterpart(170), Some(EventType::UPDATE_ROWS_EVENT));
        assert_eq!(counterpart(164), None);
        assert_eq!(counterpart(172), None);
        assert_eq!(type_name(167), "Update_rows_compressed_v1");
        assert_eq!(type_name(171), "Delete_rows_compressed");
        assert_eq!(type_name(2), "unknown");
    }

    proptest! {
        #[test]
        fn arbitrary_records_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = inflate(&bytes);
        }

        #[test]
        fn arbitrary_bodies_never_panic(
            kind in 165u8..=171,
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let fde = mariadb_fde();
            let mut out = Vec::new();
            let _ = uncompress(counterpart(kind).unwrap(), &bytes, &fde, &mut out);
        }

        #[test]
        fn records_round_trip(plain in proptest::collection::vec(any::<u8>(), 1..2000)) {
            prop_assert_eq!(inflate(&record(&plain)).unwrap(), plain);
        }

        #[test]
        fn damaged_records_are_errors_or_their_own_bytes(
            plain in proptest::collection::vec(any::<u8>(), 1..500),
            at in any::<usize>(),
            flip in 1u8..=255,
        ) {
            let mut rec = record(&plain);
            let at = at % rec.len();
            rec[at] ^= flip;
            // Whatever a damaged record gives, it is exactly as long as
            // it declares.
            if let Ok(out) = inflate(&rec) {
                let width = usize::from(rec[0] & 0x07);
                let declared = rec[1..1 + width].iter().fold(0usize, |n, b| (n << 8) | usize::from(*b));
                prop_assert_eq!(out.len(), declared);
            }
        }
    }
}
