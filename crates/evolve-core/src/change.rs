//! Row changes as a source delivers them, before any document is made of
//! them: the typed change model below the pipeline's JSON interface.
//!
//! A source turns its upstream's stream into [`RowChange`]s: the upstream
//! table, the schema of that table at the change's position (column names,
//! types, which columns are the key), and the old and new values in
//! PostgreSQL's text form, the form every PostgreSQL client reads and every
//! PostgreSQL target accepts as a typed parameter's input. A value the
//! upstream did not send is said so ([`Datum::Unchanged`] for a TOASTed
//! value an update left alone, [`Datum::Missing`] for the non-key columns
//! of an old row that carries only its key), never guessed. Documents are
//! computed from these values ([`crate::document`]); consumers that apply
//! rows elsewhere (replication into nodes at other schema versions) take
//! them as they are.

use std::sync::Arc;

pub use bytes::Bytes;

/// One column value of a changed row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Datum {
    /// SQL NULL.
    Null,
    /// The value in PostgreSQL's text output form (`int4out`, `textout`, ...),
    /// shared with the buffer it arrived in.
    Text(Bytes),
    /// A TOASTed value the update did not change and the upstream did not
    /// send again; it is whatever the row held before.
    Unchanged,
    /// Not part of this row image: the old row of an update or delete
    /// carries only the key columns unless the table's replica identity is
    /// FULL.
    Missing,
}

impl Datum {
    /// The text form, for [`Datum::Text`].
    pub fn text(&self) -> Option<&[u8]> {
        match self {
            Datum::Text(t) => Some(t),
            _ => None,
        }
    }
}

/// A column of an upstream table, as the change's position knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ColumnSchema {
    pub name: String,
    /// The type's OID in the upstream (PostgreSQL's `pg_type.oid`).
    pub type_oid: u32,
    /// `atttypmod`, -1 for none (e.g. 14 for `varchar(10)`).
    pub typmod: i32,
    /// Part of the key that identifies the row (the primary key or the
    /// replica identity's index).
    pub key: bool,
    /// The column's number where the source knows it (PostgreSQL's
    /// `attnum`, looked up when the schema arrives); `None` otherwise.
    /// A column dropped and re-added under its name has a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attnum: Option<i16>,
}

/// An upstream table's identity and columns at one position. Shared by
/// every change of that table until its schema changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TableSchema {
    /// The schema (namespace) the table is in.
    pub schema: String,
    pub name: String,
    /// The columns in table order (those the upstream publishes).
    pub columns: Vec<ColumnSchema>,
}

impl TableSchema {
    /// The index of column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The indexes of the key columns, in table order.
    pub fn key(&self) -> impl Iterator<Item = usize> + '_ {
        self.columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.key)
            .map(|(i, _)| i)
    }
}

/// What happened to a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
    /// Every row of the table was removed; no row images.
    Truncate,
}

/// One row change of one upstream transaction. The transaction and its
/// position are the caller's: changes come in the order the upstream made
/// them, grouped by transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowChange {
    pub table: Arc<TableSchema>,
    pub kind: ChangeKind,
    /// The row before: for updates (when the key changed, or the replica
    /// identity is FULL) and deletes; one value per column of `table`.
    pub old: Option<Vec<Datum>>,
    /// The row after: for inserts and updates; one value per column.
    pub new: Option<Vec<Datum>>,
}

impl RowChange {
    /// The key values of the row: from the new image, falling back to the
    /// old one for deletes and for key values an update left unsent.
    pub fn key(&self) -> Vec<&Datum> {
        self.table
            .key()
            .map(|i| {
                let from_new = self.new.as_ref().and_then(|n| n.get(i));
                match from_new {
                    Some(d @ (Datum::Text(_) | Datum::Null)) => d,
                    _ => self
                        .old
                        .as_ref()
                        .and_then(|o| o.get(i))
                        .unwrap_or(&Datum::Missing),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<TableSchema> {
        Arc::new(TableSchema {
            schema: "public".into(),
            name: "orders".into(),
            columns: vec![
                ColumnSchema {
                    name: "id".into(),
                    type_oid: 23,
                    typmod: -1,
                    key: true,
                    attnum: None,
                },
                ColumnSchema {
                    name: "note".into(),
                    type_oid: 25,
                    typmod: -1,
                    key: false,
                    attnum: None,
                },
            ],
        })
    }

    #[test]
    fn keys_come_from_the_new_row_then_the_old() {
        let t = table();
        assert_eq!(t.column("note"), Some(1));
        assert_eq!(t.key().collect::<Vec<_>>(), vec![0]);
        let insert = RowChange {
            table: Arc::clone(&t),
            kind: ChangeKind::Insert,
            old: None,
            new: Some(vec![Datum::Text(Bytes::from_static(b"7")), Datum::Null]),
        };
        assert_eq!(insert.key(), vec![&Datum::Text(Bytes::from_static(b"7"))]);
        let delete = RowChange {
            table: Arc::clone(&t),
            kind: ChangeKind::Delete,
            old: Some(vec![Datum::Text(Bytes::from_static(b"8")), Datum::Missing]),
            new: None,
        };
        assert_eq!(delete.key(), vec![&Datum::Text(Bytes::from_static(b"8"))]);
        let update = RowChange {
            table: t,
            kind: ChangeKind::Update,
            old: Some(vec![Datum::Text(Bytes::from_static(b"9")), Datum::Missing]),
            new: Some(vec![
                Datum::Unchanged,
                Datum::Text(Bytes::from_static(b"x")),
            ]),
        };
        assert_eq!(update.key(), vec![&Datum::Text(Bytes::from_static(b"9"))]);
        assert_eq!(update.new.as_ref().unwrap()[1].text(), Some(&b"x"[..]));
    }
}
