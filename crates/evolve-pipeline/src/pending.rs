//! The stored form of a pending change: what the stream keeps for a table
//! whose snapshot is not in yet (the `pending` table's `message` column).
//!
//! A record is a table's schema or one of its row changes, whatever the
//! source: `0x00 0x01`, then `S` and the schema (its qualified name and
//! each column's name, type OID, type modifier, flags (key; attnum
//! follows) and attnum when known) or `W` and
//! the row (its kind, then the old and new images, each absent or a count
//! of values: NULL, unchanged, missing, or text with its length), or `X`
//! and why the source could not read a record for the table. Integers
//! are big-endian. Rows are stored without their schema: a schema record
//! comes before the first row of each table in a session, and a row means
//! the latest schema before it. The leading zero byte sets these records
//! apart from the raw pgoutput messages that earlier versions stored (a
//! pgoutput message starts with its tag letter), which are still read.

use bytes::Bytes;
use evolve_core::change::{ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};

const MAGIC: [u8; 2] = [0x00, 0x01];

/// One decoded record.
#[derive(Debug, PartialEq)]
pub enum Record {
    Schema(TableSchema),
    /// A row change in the latest schema's columns.
    Row {
        kind: ChangeKind,
        old: Option<Vec<Datum>>,
        new: Option<Vec<Datum>>,
    },
    /// A record the source could not read for the table, and why
    /// (`SourceEvent::Undecodable`).
    Undecodable(String),
}

/// An undecodable record's record: `X` and the problem.
pub fn encode_undecodable(problem: &str) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(b'X');
    put_str(&mut out, problem);
    out
}

/// Whether `bytes` is a record of this format (not a raw pgoutput message).
pub fn is_record(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// A schema record.
pub fn encode_schema(schema: &TableSchema) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(b'S');
    put_str(&mut out, &schema.schema);
    put_str(&mut out, &schema.name);
    put_u32(&mut out, schema.columns.len() as u32);
    for c in &schema.columns {
        put_str(&mut out, &c.name);
        put_u32(&mut out, c.type_oid);
        out.extend_from_slice(&c.typmod.to_be_bytes());
        // Bit 0: a key column; bit 1: its attnum follows (records
        // written before attnums were kept have neither bit 1 nor one).
        out.push(u8::from(c.key) | (u8::from(c.attnum.is_some()) << 1));
        if let Some(attnum) = c.attnum {
            out.extend_from_slice(&attnum.to_be_bytes());
        }
    }
    out
}

/// A row record.
pub fn encode_row(change: &RowChange) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(b'W');
    out.push(match change.kind {
        ChangeKind::Insert => b'I',
        ChangeKind::Update => b'U',
        ChangeKind::Delete => b'D',
        ChangeKind::Truncate => b'T',
    });
    for image in [&change.old, &change.new] {
        match image {
            None => out.push(0),
            Some(values) => {
                out.push(1);
                put_u32(&mut out, values.len() as u32);
                for v in values {
                    match v {
                        Datum::Null => out.push(0),
                        Datum::Unchanged => out.push(1),
                        Datum::Missing => out.push(2),
                        Datum::Text(t) => {
                            out.push(3);
                            put_u32(&mut out, t.len() as u32);
                            out.extend_from_slice(t);
                        }
                    }
                }
            }
        }
    }
    out
}

/// Decodes a record (its values share `bytes`); an error says what is
/// wrong with it.
pub fn decode(bytes: Bytes) -> Result<Record, String> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(2)? != MAGIC[..] {
        return Err("not a pending-change record".into());
    }
    let record = match r.u8()? {
        b'S' => {
            let schema = r.string()?;
            let name = r.string()?;
            let n = r.u32()? as usize;
            let mut columns = Vec::with_capacity(n.min(1_600));
            for _ in 0..n {
                let name = r.string()?;
                let type_oid = r.u32()?;
                let typmod = r.u32()? as i32;
                let flags = r.u8()?;
                let attnum = if flags & 2 != 0 {
                    let b = r.take(2)?;
                    Some(i16::from_be_bytes([b[0], b[1]]))
                } else {
                    None
                };
                columns.push(ColumnSchema {
                    name,
                    type_oid,
                    typmod,
                    key: flags & 1 != 0,
                    attnum,
                });
            }
            Record::Schema(TableSchema {
                schema,
                name,
                columns,
            })
        }
        b'W' => {
            let kind = match r.u8()? {
                b'I' => ChangeKind::Insert,
                b'U' => ChangeKind::Update,
                b'D' => ChangeKind::Delete,
                b'T' => ChangeKind::Truncate,
                other => return Err(format!("unknown row kind {other}")),
            };
            let old = r.image()?;
            let new = r.image()?;
            Record::Row { kind, old, new }
        }
        b'X' => Record::Undecodable(r.string()?),
        other => return Err(format!("unknown record tag {other}")),
    };
    if r.at != r.bytes.len() {
        return Err(format!("{} bytes after the record", r.bytes.len() - r.at));
    }
    Ok(record)
}

fn put_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&n.to_be_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

struct Reader {
    bytes: Bytes,
    at: usize,
}

impl Reader {
    fn take(&mut self, n: usize) -> Result<Bytes, String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| format!("record ends inside a field at byte {}", self.at))?;
        let out = self.bytes.slice(self.at..end);
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a name is not UTF-8".to_string())
    }

    fn image(&mut self) -> Result<Option<Vec<Datum>>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => {
                let n = self.u32()? as usize;
                let mut values = Vec::with_capacity(n.min(1_600));
                for _ in 0..n {
                    values.push(match self.u8()? {
                        0 => Datum::Null,
                        1 => Datum::Unchanged,
                        2 => Datum::Missing,
                        3 => {
                            let len = self.u32()? as usize;
                            Datum::Text(self.take(len)?)
                        }
                        other => return Err(format!("unknown value tag {other}")),
                    });
                }
                Ok(Some(values))
            }
            other => Err(format!("unknown image tag {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn row_change(
        schema: &Arc<TableSchema>,
        kind: ChangeKind,
        old: Option<Vec<Datum>>,
        new: Option<Vec<Datum>>,
    ) -> RowChange {
        RowChange {
            table: Arc::clone(schema),
            kind,
            old,
            new,
        }
    }

    fn decode(bytes: &[u8]) -> Result<Record, String> {
        super::decode(Bytes::copy_from_slice(bytes))
    }

    fn schema() -> TableSchema {
        TableSchema {
            schema: "public".into(),
            name: "orders".into(),
            columns: vec![
                ColumnSchema {
                    name: "id".into(),
                    type_oid: 20,
                    typmod: -1,
                    key: true,
                    attnum: None,
                },
                ColumnSchema {
                    name: "note".into(),
                    type_oid: 1043,
                    typmod: 24,
                    key: false,
                    attnum: Some(3),
                },
            ],
        }
    }

    #[test]
    fn records_read_back_as_written() {
        let s = schema();
        assert_eq!(decode(&encode_schema(&s)), Ok(Record::Schema(s.clone())));
        let table = Arc::new(s);
        let text = |t: &'static str| Datum::Text(Bytes::from_static(t.as_bytes()));
        let changes = [
            row_change(
                &table,
                ChangeKind::Insert,
                None,
                Some(vec![text("1"), Datum::Null]),
            ),
            row_change(
                &table,
                ChangeKind::Update,
                Some(vec![text("1"), Datum::Missing]),
                Some(vec![text("2"), Datum::Unchanged]),
            ),
            row_change(
                &table,
                ChangeKind::Delete,
                Some(vec![text(""), Datum::Missing]),
                None,
            ),
            row_change(&table, ChangeKind::Truncate, None, None),
        ];
        for change in changes {
            let bytes = encode_row(&change);
            assert!(is_record(&bytes));
            assert_eq!(
                decode(&bytes),
                Ok(Record::Row {
                    kind: change.kind,
                    old: change.old.clone(),
                    new: change.new.clone(),
                })
            );
        }
    }

    #[test]
    fn pgoutput_messages_are_not_records() {
        for tag in [b'R', b'I', b'U', b'D', b'T'] {
            assert!(!is_record(&[tag, 0, 0, 0, 1]));
        }
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_panic() {
        let table = Arc::new(schema());
        let row = encode_row(&row_change(
            &table,
            ChangeKind::Insert,
            None,
            Some(vec![Datum::Text(Bytes::from_static(b"12345")), Datum::Null]),
        ));
        for end in 0..row.len() {
            assert!(decode(&row[..end]).is_err(), "cut at {end}");
        }
        let mut long = row.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        let mut huge = encode_schema(&schema());
        // A column count far beyond the bytes there are.
        huge[3 + 4 + 6 + 4 + 6..3 + 4 + 6 + 4 + 6 + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&huge).is_err());
    }
}
