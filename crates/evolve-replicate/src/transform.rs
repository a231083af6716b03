//! Transforms: SQL expressions over the incoming row that the node
//! evaluates inside the apply statement.
//!
//! `CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE
//! public.customers SET first_name = split_part(NEW.name, ' ', 1) WHERE
//! NEW.status <> 'test'`: each `SET` computes a node column from `NEW`,
//! the upstream's row with every column it sends, typed as the upstream
//! types them (the upstream's own types as `text`); a row the `WHERE`
//! filter rejects is dropped (inserts and updates, and deletes that
//! carry the whole old row, REPLICA IDENTITY FULL upstream; other deletes
//! find rows by key only), and an update after which the row no longer passes takes
//! the node's row off, as PostgreSQL's row filters turn such an update
//! into a delete: the node holds no row the filter rejects. Apply order, as PGD documents it: columns are matched first
//! (a column a transform sets needs no upstream column and no type match),
//! then the transform runs, then the node row is looked up, then conflicts
//! are resolved. A transform may not set a key column. An expression the
//! node cannot evaluate halts the replica with the server's error and the
//! transaction's LSN.

/// One table's transform on a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transform {
    pub name: String,
    /// The upstream table it applies to.
    pub schema: String,
    pub table: String,
    /// Node columns and the SQL expressions (over `NEW`) that compute them.
    pub sets: Vec<(String, String)>,
    /// Rows for which this SQL condition (over `NEW`) is not true are
    /// dropped.
    pub filter: Option<String>,
}

impl Transform {
    /// The filter as SQL (`true` when there is none).
    pub(crate) fn condition(&self) -> String {
        match &self.filter {
            Some(f) => format!("({f})"),
            None => "true".to_string(),
        }
    }

    /// The expression that sets node column `column`.
    pub(crate) fn expression(&self, column: &str) -> Option<&str> {
        self.sets
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, e)| e.as_str())
    }
}
