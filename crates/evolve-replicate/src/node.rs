//! What a target node's catalog says: its tables as
//! [`TargetTable`]s, each column's type as the node spells it, and how an
//! upstream type relates to a node type.

use evolve_core::change::ColumnSchema;
use evolve_core::conflict::{TargetColumn, TargetTable, TypeRelation};
use tokio_postgres::Client;

use crate::error::{ReplicateError, Result};

/// A node table with what the apply statements need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTable {
    pub table: TargetTable,
    /// Each column's type without its modifier (`character varying`,
    /// `numeric`, `bpchar`, `"bit"`), the type values are cast to:
    /// `$n::text::character varying`. The column's modifier is then
    /// applied by the assignment to the column, which refuses a value that
    /// does not fit (`value too long for type character varying(3)`) and
    /// rounds a numeric scale, as the type's input function with the
    /// column's modifier does in native logical replication. An explicit
    /// cast to `character varying(3)` would silently cut the value to fit.
    pub type_names: Vec<String>,
    /// Each column's type with its modifier, for messages.
    pub declared: Vec<String>,
}

/// Reads table `schema.name` of the node, `None` when it has none. Its key
/// is the primary key, or else the replica identity's index.
pub async fn table(client: &Client, schema: &str, name: &str) -> Result<Option<NodeTable>> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid::oid::int8, a.atttypmod, a.attnotnull,
                    a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
                    format_type(a.atttypid, -1),
                    coalesce(a.attnum = ANY (k.key), false),
                    format_type(a.atttypid, a.atttypmod)
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             LEFT JOIN LATERAL (
                 SELECT i.indkey::int2[] AS key FROM pg_index i
                 WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)
                 ORDER BY i.indisprimary DESC LIMIT 1) k ON true
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')
             ORDER BY a.attnum",
            &[&schema, &name],
        )
        .await
        .map_err(|e| ReplicateError::node("read the node's catalog", &e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(rows.len());
    let mut type_names = Vec::with_capacity(rows.len());
    let mut declared = Vec::with_capacity(rows.len());
    for r in rows {
        columns.push(TargetColumn {
            name: r.get(0),
            type_oid: r.get::<_, i64>(1) as u32,
            typmod: r.get(2),
            not_null: r.get(3),
            has_default: r.get(4),
            key: r.get(6),
        });
        // `format_type` with a modifier of -1 (not NULL) names the type
        // itself: `bpchar`, not `character`, which would mean `char(1)`.
        type_names.push(r.get(5));
        declared.push(r.get(7));
    }
    Ok(Some(NodeTable {
        table: TargetTable {
            schema: schema.to_string(),
            name: name.to_string(),
            columns,
        },
        type_names,
        declared,
    }))
}

/// The node's names of the upstream table's column types, for values
/// typed as the upstream sent them (a transform's `NEW`): PostgreSQL's own
/// types as `format_type` prints them, others (the upstream's enums,
/// domains) as `text`.
pub async fn type_names(
    client: &Client,
    schema: &evolve_core::change::TableSchema,
) -> Result<Vec<String>> {
    let mut names = Vec::with_capacity(schema.columns.len());
    for c in &schema.columns {
        if c.type_oid >= FIRST_USER_OID {
            names.push("text".to_string());
            continue;
        }
        let name: String = client
            .query_one(
                "SELECT format_type($1::int8::oid, $2)",
                &[&i64::from(c.type_oid), &c.typmod],
            )
            .await
            .map_err(|e| ReplicateError::node("read a type's name", &e))?
            .get(0);
        names.push(name);
    }
    Ok(names)
}

/// OIDs below this are PostgreSQL's own, the same on every server.
const FIRST_USER_OID: u32 = 16_384;

/// How an upstream column's type relates to a node column's (`declared`:
/// the node column's type as [`NodeTable::declared`] has it): the same
/// type and modifier; PostgreSQL's own types that differ, with an
/// assignment (or implicit) cast in the node's `pg_cast` or the same type
/// with another modifier (a length coercion); or neither. A type of the
/// upstream's own (an enum, a domain) has an OID the node does not share,
/// so it is not compared: its text form is given to the node type's input
/// function, and a value that does not parse halts at apply.
pub async fn relation(
    client: &Client,
    source: &ColumnSchema,
    target: &TargetColumn,
    declared: &str,
) -> Result<TypeRelation> {
    if source.type_oid == target.type_oid && source.typmod == target.typmod {
        return Ok(TypeRelation::Same);
    }
    if source.type_oid >= FIRST_USER_OID {
        return Ok(TypeRelation::UpstreamType);
    }
    let row = client
        .query_one(
            "SELECT $1::int8::oid = $2::int8::oid
                    OR EXISTS (SELECT 1 FROM pg_cast
                               WHERE castsource = $1::int8::oid AND casttarget = $2::int8::oid
                                 AND castcontext IN ('a', 'i')),
                    format_type($1::int8::oid, $3)",
            &[
                &i64::from(source.type_oid),
                &i64::from(target.type_oid),
                &source.typmod,
            ],
        )
        .await
        .map_err(|e| ReplicateError::node("read pg_cast", &e))?;
    let (from, to) = (row.get::<_, String>(1), declared.to_string());
    Ok(if row.get::<_, bool>(0) {
        TypeRelation::Converts { from, to }
    } else {
        TypeRelation::Incompatible { from, to }
    })
}

/// An upstream table's OID and its columns as pgoutput describes them
/// (generated columns left out; the key is the replica identity: the
/// primary key, the identity index, or every column under FULL), so that
/// a copy's rows and the stream's share one schema.
pub async fn upstream_table(
    client: &Client,
    schema: &str,
    name: &str,
) -> Result<(u32, std::sync::Arc<evolve_core::change::TableSchema>)> {
    let rows = client
        .query(
            "SELECT c.oid::int8, a.attname::text, a.atttypid::oid::int8, a.atttypmod,
                    CASE c.relreplident WHEN 'f' THEN true WHEN 'n' THEN false
                         ELSE coalesce(a.attnum = ANY (k.key), false) END
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                                AND a.attgenerated = ''
             LEFT JOIN LATERAL (
                 SELECT i.indkey::int2[] AS key FROM pg_index i
                 WHERE i.indrelid = c.oid
                   AND ((c.relreplident = 'd' AND i.indisprimary)
                        OR (c.relreplident = 'i' AND i.indisreplident))) k ON true
             WHERE n.nspname = $1 AND c.relname = $2
             ORDER BY a.attnum",
            &[&schema, &name],
        )
        .await
        .map_err(|e| ReplicateError::node("read the upstream's catalog", &e))?;
    let Some(first) = rows.first() else {
        return Err(ReplicateError::Node {
            context: format!("copy {schema}.{name}"),
            message: format!("the upstream has no table {schema}.{name}"),
        });
    };
    let oid = first.get::<_, i64>(0) as u32;
    let columns = rows
        .iter()
        .map(|r| evolve_core::change::ColumnSchema {
            name: r.get(1),
            type_oid: r.get::<_, i64>(2) as u32,
            typmod: r.get(3),
            key: r.get(4),
            attnum: None,
        })
        .collect();
    Ok((
        oid,
        std::sync::Arc::new(evolve_core::change::TableSchema {
            schema: schema.to_string(),
            name: name.to_string(),
            columns,
        }),
    ))
}
