//! Talking to the upstream PostgreSQL: ordinary sessions (catalog,
//! publication, slot, COPY) and replication sessions (temporary slot with an
//! exported snapshot, the stream).

use evolve_core::document::{ATTRIBUTES_QUERY, Column, PgType, TYPES_QUERY, TypeCatalog};
use evolve_pg::{PgError, SslMode, TlsSettings, Verification, quote_ident, quote_literal};
use evolve_pgoutput::Lsn;
use pgwire_replication::{ReplicationClient, ReplicationConfig, TlsConfig};
use tokio_postgres::Client;

use crate::config::Connection;
use crate::error::{PipelineError, Result};
use crate::store::{ColumnInfo, TableInfo};

/// The session settings under which every text value is read, both by COPY
/// and by the walsender's output plugin: what `evolve_core::document`
/// requires (ISO dates, UTC, shortest-exact floats) and the defaults that
/// `to_jsonb` on a default session sees (interval and bytea output).
pub const SESSION_SETTINGS: &[(&str, &str)] = &[
    ("DateStyle", "ISO"),
    ("TimeZone", "UTC"),
    ("extra_float_digits", "1"),
    ("IntervalStyle", "postgres"),
    ("bytea_output", "hex"),
];

/// Opens an ordinary session on `connection` (named `name` in messages),
/// with [`SESSION_SETTINGS`].
pub async fn connect(name: &str, connection: &Connection) -> Result<Client> {
    connect_as(name, connection, "evolve-pipeline").await
}

/// [`connect`] under `application_name` `application`.
pub async fn connect_as(name: &str, connection: &Connection, application: &str) -> Result<Client> {
    let kind = connection.kind();
    if kind != crate::config::ConnectionKind::Postgres {
        return Err(PipelineError::Refused {
            sqlstate: "42809",
            primary: format!(
                "connection \"{name}\" is a {} connection; a PostgreSQL source or session needs a PostgreSQL url",
                if kind == crate::config::ConnectionKind::Kafka {
                    "kafka://"
                } else {
                    kind.as_str()
                }
            ),
            detail: None,
            hint: None,
        });
    }
    let client = evolve_pg::connect(connection.url(), application)
        .await
        .map_err(|e| connect_error(name, connection, &e.to_string()))?;
    let mut sql = String::new();
    for (setting, value) in SESSION_SETTINGS {
        sql.push_str(&format!("SET {setting} = {};", quote_literal(value)));
    }
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| PipelineError::database("set session settings", &e))?;
    Ok(client)
}

/// A connection failure of `connection` (named `name`), with the client's
/// reason and the target without its password.
pub(crate) fn connect_error(name: &str, connection: &Connection, reason: &str) -> PipelineError {
    let target = evolve_pg::parse_url(connection.url())
        .map(|(c, _)| evolve_pg::describe_target(&c))
        .unwrap_or_else(|_| connection.redacted());
    // evolve_pg's message already names the target; keep its reason only.
    let reason = reason
        .split_once(": ")
        .map(|(_, r)| r)
        .unwrap_or(reason)
        .split("; check")
        .next()
        .unwrap_or(reason)
        .to_string();
    PipelineError::Connect {
        connection: name.to_string(),
        target,
        reason,
    }
}

/// What the pipeline pins of an upstream table when it is created.
#[derive(Clone, Debug)]
pub struct UpstreamTable {
    /// `pg_class.oid`.
    pub oid: u32,
    /// The schema.
    pub schema: String,
    /// The table.
    pub name: String,
    /// Every non-dropped column, attnum order, with kinds and key flags
    /// (EXCLUDE/TEXT not applied yet).
    pub columns: Vec<ColumnInfo>,
    /// Generated columns (pgoutput does not send them).
    pub generated: Vec<String>,
}

/// Reads table `schema.name` from the upstream catalog, with its key: the
/// primary key, or the replica identity index. Refuses tables whose
/// updates and deletes logical replication cannot identify.
pub async fn inspect_table(
    client: &Client,
    source: &str,
    schema: &str,
    name: &str,
) -> Result<UpstreamTable> {
    let reference = format!("{schema}.{name}");
    let row = client
        .query_opt(
            "SELECT c.oid, c.relkind::text, c.relreplident::text \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &name],
        )
        .await
        .map_err(|e| PipelineError::database("read the upstream catalog", &e))?;
    let Some(row) = row else {
        return Err(PipelineError::UpstreamTableNotFound {
            reference,
            source_name: source.to_string(),
        });
    };
    let oid: u32 = row.get(0);
    let relkind: String = row.get(1);
    let replident: String = row.get(2);
    if relkind != "r" {
        let (what, way_out) = match relkind.as_str() {
            "p" => (
                "a partitioned table".to_string(),
                "its changes are published per partition: create a table version of each partition (REFERENCE the partition)",
            ),
            "v" => ("a view".to_string(), "reference the tables it reads"),
            "m" => (
                "a materialized view".to_string(),
                "reference the tables it reads",
            ),
            "f" => (
                "a foreign table".to_string(),
                "reference the table on its own server, through a source there",
            ),
            other => (
                format!("a relation of kind '{other}'"),
                "reference an ordinary table",
            ),
        };
        return Err(PipelineError::Refused {
            sqlstate: "42809",
            primary: format!(
                "upstream relation \"{reference}\" of source \"{source}\" is {what}, which logical replication does not stream as a table; {way_out}"
            ),
            detail: None,
            hint: None,
        });
    }
    let key_query = match replident.as_str() {
        "d" | "f" => "indisprimary",
        "i" => "indisreplident",
        _ => {
            return Err(PipelineError::NoReplicaIdentity {
                reference,
                detail: "Its REPLICA IDENTITY is NOTHING: logical replication cannot send its updates and deletes.".into(),
            });
        }
    };
    let key_names: Vec<String> = client
        .query(
            &format!(
                "SELECT a.attname::text FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indrelid = $1 AND i.{key_query} ORDER BY a.attnum"
            ),
            &[&oid],
        )
        .await
        .map_err(|e| PipelineError::database("read the upstream table's key", &e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if key_names.is_empty() {
        return Err(PipelineError::NoReplicaIdentity {
            reference,
            detail: if replident == "f" {
                "Its REPLICA IDENTITY is FULL but it has no primary key: the interface needs a key to identify its rows.".into()
            } else {
                "Without one, logical replication cannot identify the rows its updates and deletes change (adding the table to a publication would make them fail).".into()
            },
        });
    }
    let catalog = type_catalog(client).await?;
    let rows = client
        .query(
            "SELECT attname::text, attnum, atttypid, atttypmod, format_type(atttypid, atttypmod), \
                    attnotnull, attgenerated <> '' \
             FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             ORDER BY attnum",
            &[&oid],
        )
        .await
        .map_err(|e| PipelineError::database("read the upstream table's columns", &e))?;
    let mut columns = Vec::new();
    let mut generated = Vec::new();
    for row in rows {
        let name: String = row.get(0);
        let type_oid: u32 = row.get(2);
        if row.get::<_, bool>(6) {
            generated.push(name.clone());
        }
        let kind = catalog
            .kind(type_oid)
            .ok_or_else(|| PipelineError::BadColumn {
                reference: reference.clone(),
                column: name.clone(),
                reason: format!("has a type (OID {type_oid}) that cannot be mapped to JSON"),
            })?;
        columns.push(ColumnInfo {
            key: key_names.contains(&name),
            name,
            attnum: row.get(1),
            type_oid,
            typmod: row.get(3),
            type_name: row.get(4),
            not_null: row.get(5),
            kind,
            excluded: false,
            as_text: false,
            labels: None,
        });
    }
    // Enum labels, pinned: renaming one changes documents without a row
    // change.
    let types: Vec<u32> = columns.iter().map(|c| c.type_oid).collect();
    let labels = client
        .query(ENUM_LABELS, &[&types])
        .await
        .map_err(|e| PipelineError::database("read the upstream table's enum labels", &e))?;
    for row in labels {
        let type_oid: u32 = row.get(0);
        let found: Vec<String> = row.get(2);
        for c in columns.iter_mut().filter(|c| c.type_oid == type_oid) {
            c.labels = Some(found.clone());
        }
    }
    Ok(UpstreamTable {
        oid,
        schema: schema.to_string(),
        name: name.to_string(),
        columns,
        generated,
    })
}

/// The document columns of pinned `columns` (EXCLUDE removed, TEXT applied).
pub fn document_columns<'a>(columns: impl Iterator<Item = &'a ColumnInfo>) -> Vec<Column> {
    columns
        .map(|c| Column::new(c.name.clone(), c.kind.clone()))
        .collect()
}

/// Creates publication `name` (empty) unless it exists; true if created.
pub async fn ensure_publication(client: &Client, name: &str) -> Result<bool> {
    let exists = client
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
        .await
        .map_err(|e| PipelineError::database("read pg_publication", &e))?
        .is_some();
    if exists {
        return Ok(false);
    }
    client
        .batch_execute(&format!("CREATE PUBLICATION {}", quote_ident(name)))
        .await
        .map_err(|e| PipelineError::database(format!("CREATE PUBLICATION {name}"), &e))?;
    Ok(true)
}

/// Adds `schema.table` to publication `publication` unless it is in it.
pub async fn add_to_publication(
    client: &Client,
    publication: &str,
    schema: &str,
    table: &str,
) -> Result<()> {
    let row = client
        .query_opt(
            "SELECT puballtables FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| PipelineError::database("read pg_publication", &e))?;
    let Some(row) = row else {
        return Err(PipelineError::Database {
            context: format!("add {schema}.{table} to publication {publication}"),
            message: format!("publication \"{publication}\" does not exist upstream"),
        });
    };
    if row.get::<_, bool>(0) {
        return Ok(());
    }
    let member = client
        .query_opt(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
            &[&publication, &schema, &table],
        )
        .await
        .map_err(|e| PipelineError::database("read pg_publication_tables", &e))?
        .is_some();
    if !member {
        client
            .batch_execute(&format!(
                "ALTER PUBLICATION {} ADD TABLE {}.{}",
                quote_ident(publication),
                quote_ident(schema),
                quote_ident(table)
            ))
            .await
            .map_err(|e| {
                PipelineError::database(
                    format!("ALTER PUBLICATION {publication} ADD TABLE {schema}.{table}"),
                    &e,
                )
            })?;
    }
    Ok(())
}

/// What publication `publication` does to the changes of one upstream
/// table, as [`publication_gaps`] reads it from the catalog.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishedTable {
    /// The table's OID.
    pub oid: u32,
    /// `schema.table`, quoted where needed (by the server's `quote_ident`).
    pub name: String,
    /// The publication's name, quoted where needed.
    pub publication: String,
    /// In the publication (listed, or through `FOR ALL TABLES`, `FOR
    /// TABLES IN SCHEMA` or a partitioned parent).
    pub member: bool,
    /// A partition published as its partitioned ancestor in the
    /// publication (`publish_via_partition_root`).
    pub as_root: bool,
    /// Operations the publication does not publish (`insert`, `update`,
    /// `delete`, `truncate`).
    pub unpublished_operations: Vec<&'static str>,
    /// The table's row filter (`WHERE`), PostgreSQL 15 and later.
    pub row_filter: Option<String>,
    /// Columns a column list leaves out, PostgreSQL 15 and later: each
    /// name, and as `quote_ident` writes it.
    pub unpublished_columns: Vec<(String, String)>,
}

impl PublishedTable {
    /// Why changes of this table the pipeline needs would not reach the
    /// stream, and the way out: the first of a partition published as its
    /// root, a table not in the publication (when `membership` counts:
    /// CREATE TABLE adds it itself), operations not published, a row
    /// filter, or a column list without a column `needs` says is read.
    /// `None` when every change arrives.
    pub fn gap(&self, membership: bool, needs: impl Fn(&str) -> bool) -> Option<(String, String)> {
        let p = &self.publication;
        let t = &self.name;
        let readd = format!(
            "BEGIN; ALTER PUBLICATION {p} DROP TABLE {t}; ALTER PUBLICATION {p} ADD TABLE {t}; COMMIT;"
        );
        if self.as_root {
            return Some((
                format!(
                    "publication {p} publishes partition {t} as its partitioned root (publish_via_partition_root), so no change reaches a table over the partition"
                ),
                format!("ALTER PUBLICATION {p} SET (publish_via_partition_root = false);"),
            ));
        }
        if !self.member && membership {
            return Some((
                format!(
                    "upstream table {t} is not in publication {p} (it was removed from it), so its changes do not reach the stream"
                ),
                format!("ALTER PUBLICATION {p} ADD TABLE {t};"),
            ));
        }
        if !self.unpublished_operations.is_empty() {
            return Some((
                format!(
                    "publication {p} does not publish {} of {t}, so those changes never reach the stream",
                    self.unpublished_operations.join(", ")
                ),
                format!(
                    "ALTER PUBLICATION {p} SET (publish = 'insert, update, delete, truncate');"
                ),
            ));
        }
        if let Some(filter) = &self.row_filter {
            return Some((
                format!(
                    "publication {p} publishes only the rows of {t} WHERE {filter}, and the interface needs every row"
                ),
                readd,
            ));
        }
        let hidden: Vec<&str> = self
            .unpublished_columns
            .iter()
            .filter(|(c, _)| needs(c))
            .map(|(_, shown)| shown.as_str())
            .collect();
        if !hidden.is_empty() {
            return Some((
                format!(
                    "publication {p} publishes {t} with a column list that leaves out {}, which the table reads",
                    hidden.join(", ")
                ),
                format!("{readd} (or EXCLUDE COLUMNS those columns in a new table version)"),
            ));
        }
        None
    }
}

/// For each type OID in `$1` that is an enum or holds one (an array's
/// elements, a domain's base type, a composite type's attributes, a
/// range's subtype, a multirange's range, at any depth): the OID,
/// `format_type`, the labels of every enum it holds, by enum OID and
/// then in the enum's sort order, and whether it is an enum itself.
/// Types without an enum have no row.
/// Pinned with a table ([`ColumnInfo::labels`]), compared by
/// [`relabeled_enums`].
const ENUM_LABELS: &str = "\
    WITH RECURSIVE r(root, t) AS ( \
      SELECT o, o FROM unnest($1::oid[]) AS o \
      UNION \
      SELECT r.root, x.t FROM r \
      JOIN pg_catalog.pg_type ty ON ty.oid = r.t \
      CROSS JOIN LATERAL ( \
        SELECT ty.typelem WHERE ty.typelem <> 0 AND ty.typlen = -1 \
        UNION ALL SELECT ty.typbasetype WHERE ty.typtype = 'd' \
        UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a \
          WHERE ty.typtype = 'c' AND a.attrelid = ty.typrelid AND a.attnum > 0 AND NOT a.attisdropped \
        UNION ALL SELECT g.rngsubtype FROM pg_catalog.pg_range g \
          WHERE ty.typtype = 'r' AND g.rngtypid = ty.oid \
        UNION ALL SELECT g.rngtypid FROM pg_catalog.pg_range g \
          WHERE ty.typtype = 'm' AND g.rngmultitypid = ty.oid \
      ) AS x(t) \
    ) \
    SELECT o.root, format_type(o.root, NULL), \
           ARRAY(SELECT e.enumlabel::text FROM r AS r2 \
                 JOIN pg_catalog.pg_enum e ON e.enumtypid = r2.t \
                 WHERE r2.root = o.root ORDER BY e.enumtypid, e.enumsortorder), \
           EXISTS (SELECT FROM pg_catalog.pg_enum e WHERE e.enumtypid = o.root) \
    FROM (SELECT DISTINCT root FROM r \
          WHERE EXISTS (SELECT FROM pg_catalog.pg_enum e WHERE e.enumtypid = r.t)) AS o";

/// Why the documents of table versions `tables` no longer match their
/// upstream rows without a row change to stream, by table version name:
/// a label of a pinned enum column that the enum no longer has (renamed
/// with `ALTER TYPE ... RENAME VALUE`), from the catalog as it is now.
pub async fn relabeled_enums(
    client: &Client,
    tables: &[&TableInfo],
) -> Result<Vec<(String, String)>> {
    let types: Vec<u32> = tables
        .iter()
        .flat_map(|t| t.columns.iter())
        .filter(|c| c.labels.is_some() && c.is_read())
        .map(|c| c.type_oid)
        .collect();
    if types.is_empty() {
        return Ok(Vec::new());
    }
    let rows = client
        .query(ENUM_LABELS, &[&types])
        .await
        .map_err(|e| PipelineError::database("read the upstream enums' labels", &e))?;
    let mut out = Vec::new();
    for t in tables {
        for c in t.columns.iter().filter(|c| c.is_read()) {
            let Some(pinned) = &c.labels else { continue };
            let Some(now) = rows.iter().find(|r| r.get::<_, u32>(0) == c.type_oid) else {
                continue;
            };
            let labels: Vec<String> = now.get(2);
            let gone: Vec<String> = pinned
                .iter()
                .filter(|l| !labels.contains(l))
                .map(|l| quote_literal(l))
                .collect();
            if gone.is_empty() {
                continue;
            }
            let type_name: String = now.get(1);
            let what = if now.get::<_, bool>(3) {
                format!(
                    "enum type {type_name} of column \"{}\" of upstream table \"{}\" no longer has",
                    c.name,
                    t.reference()
                )
            } else {
                format!(
                    "type {type_name} of column \"{}\" of upstream table \"{}\" holds an enum that no longer has",
                    c.name,
                    t.reference()
                )
            };
            out.push((
                t.name.clone(),
                format!(
                    "{what} the value{} {} (renamed with ALTER TYPE ... RENAME VALUE), which documents still show; way out: a new version of the table through a replacement (ABSORB = 'auto' makes both)",
                    if gone.len() == 1 { "" } else { "s" },
                    gone.join(", ")
                ),
            ));
            break;
        }
    }
    Ok(out)
}

/// What publication `publication` does to the changes of the tables with
/// OIDs `oids`, from the catalog as it is now; tables that no longer
/// exist are left out, and so is everything when the publication does not
/// exist (the stream says so itself).
pub async fn publication_gaps(
    client: &Client,
    publication: &str,
    oids: &[u32],
) -> Result<Vec<PublishedTable>> {
    let read =
        |e: tokio_postgres::Error| PipelineError::database("read the publication's settings", &e);
    let Some(p) = client
        .query_opt(
            "SELECT current_setting('server_version_num')::int >= 150000, quote_ident(pubname) \
             FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(read)?
    else {
        return Ok(Vec::new());
    };
    // The publication's settings are read again with its tables, in one
    // statement: read apart, a `SET (publish_via_partition_root = ...)`
    // committed between the two reads would mix the settings of one
    // moment with the member tables of another (a partition then seems
    // removed from the publication).
    let lists: bool = p.get(0);
    let shown: String = p.get(1);
    // Row filters and column lists (and their columns in
    // pg_publication_tables) came with PostgreSQL 15.
    let (filter, listed) = if lists {
        (
            "pt.rowfilter",
            "ARRAY(SELECT x.v FROM pg_catalog.pg_attribute a, \
                     unnest(ARRAY[a.attname::text, quote_ident(a.attname)]) WITH ORDINALITY x(v, i) \
                   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                     AND a.attgenerated = '' AND pt.tablename IS NOT NULL \
                     AND NOT (a.attname = ANY (pt.attnames)) ORDER BY a.attnum, x.i)",
        )
    } else {
        ("NULL::text", "ARRAY[]::text[]")
    };
    let rows = client
        .query(
            &format!(
                "SELECT c.oid, quote_ident(n.nspname) || '.' || quote_ident(c.relname), \
                        c.relispartition AND EXISTS ( \
                          SELECT 1 FROM pg_catalog.pg_partition_ancestors(c.oid) a \
                          JOIN pg_catalog.pg_class ac ON ac.oid = a.relid \
                          JOIN pg_catalog.pg_namespace an ON an.oid = ac.relnamespace \
                          JOIN pg_catalog.pg_publication_tables apt ON apt.pubname = $1 \
                            AND apt.schemaname = an.nspname AND apt.tablename = ac.relname \
                          WHERE a.relid <> c.oid), \
                        pt.tablename IS NOT NULL, {filter}, {listed}, \
                        pub.pubinsert, pub.pubupdate, pub.pubdelete, pub.pubtruncate, pub.pubviaroot \
                 FROM unnest($2::oid[]) AS o(oid) \
                 JOIN pg_catalog.pg_publication pub ON pub.pubname = $1 \
                 JOIN pg_catalog.pg_class c ON c.oid = o.oid \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 LEFT JOIN pg_catalog.pg_publication_tables pt \
                   ON pt.pubname = $1 AND pt.schemaname = n.nspname AND pt.tablename = c.relname"
            ),
            &[&publication, &oids],
        )
        .await
        .map_err(read)?;
    Ok(rows
        .iter()
        .map(|r| {
            // A partition whose published ancestor stands for it.
            let under_root: bool = r.get(2);
            let via_root: bool = r.get(10);
            let unpublished_operations = ["insert", "update", "delete", "truncate"]
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !r.get::<_, bool>(6 + *i))
                .map(|(_, op)| op)
                .collect();
            PublishedTable {
                oid: r.get(0),
                name: r.get(1),
                member: r.get(3),
                as_root: via_root && under_root,
                unpublished_operations,
                publication: shown.clone(),
                row_filter: r.get(4),
                // Each name, then as quoted.
                unpublished_columns: r
                    .get::<_, Vec<String>>(5)
                    .chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].clone()))
                    .collect(),
            }
        })
        .collect())
}

/// Removes `schema.table` from `publication` if it is a member.
pub async fn remove_from_publication(
    client: &Client,
    publication: &str,
    schema: &str,
    table: &str,
) -> Result<()> {
    let member = client
        .query_opt(
            "SELECT 1 FROM pg_publication p JOIN pg_publication_rel r ON r.prpubid = p.oid \
             JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE p.pubname = $1 AND n.nspname = $2 AND c.relname = $3",
            &[&publication, &schema, &table],
        )
        .await
        .map_err(|e| PipelineError::database("read pg_publication_rel", &e))?
        .is_some();
    if member {
        client
            .batch_execute(&format!(
                "ALTER PUBLICATION {} DROP TABLE {}.{}",
                quote_ident(publication),
                quote_ident(schema),
                quote_ident(table)
            ))
            .await
            .map_err(|e| PipelineError::database("ALTER PUBLICATION ... DROP TABLE", &e))?;
    }
    Ok(())
}

/// The state of a replication slot upstream.
#[derive(Clone, Debug)]
pub struct SlotStatus {
    /// `confirmed_flush_lsn`.
    pub confirmed_flush: Lsn,
    /// `wal_status` (`reserved`, `extended`, `unreserved`, `lost`).
    pub wal_status: Option<String>,
    /// `pg_current_wal_lsn() - restart_lsn`, bytes of WAL the slot retains.
    pub retained_bytes: Option<i64>,
}

/// The slot named `slot`, if it exists.
pub async fn slot_status(client: &Client, slot: &str) -> Result<Option<SlotStatus>> {
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text, wal_status, \
                    (pg_current_wal_lsn() - restart_lsn)::int8 \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| PipelineError::database("read pg_replication_slots", &e))?;
    Ok(row.map(|row| SlotStatus {
        confirmed_flush: row
            .get::<_, Option<String>>(0)
            .and_then(|s| s.parse().ok())
            .unwrap_or_default(),
        wal_status: row.get(1),
        retained_bytes: row.get(2),
    }))
}

/// Creates logical slot `slot` with pgoutput (no snapshot).
pub async fn create_slot(client: &Client, slot: &str) -> Result<()> {
    if slot_status(client, slot).await?.is_some() {
        return Err(PipelineError::SlotExists {
            slot: slot.to_string(),
        });
    }
    client
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .map_err(|e| PipelineError::database(format!("create replication slot {slot}"), &e))?;
    Ok(())
}

/// Drops logical slot `slot` if it exists.
pub async fn drop_slot(client: &Client, slot: &str) -> Result<()> {
    client
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| PipelineError::database(format!("drop replication slot {slot}"), &e))?;
    Ok(())
}

/// Waits up to 5 s until no session holds slot `slot` (a replication
/// session that just ended releases it a moment later).
pub async fn wait_slot_released(client: &Client, slot: &str) -> Result<()> {
    for _ in 0..50 {
        let active: Option<bool> = client
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| PipelineError::database("read pg_replication_slots", &e))?
            .map(|r| r.get(0));
        if active != Some(true) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Drops logical slot `slot` if it exists, waiting up to 5 s for a
/// session that is ending to release it.
pub async fn drop_slot_released(client: &Client, slot: &str) -> Result<()> {
    let mut attempt = 0;
    loop {
        match drop_slot(client, slot).await {
            Err(_) if attempt < 25 => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            result => return result,
        }
    }
}

/// A replication-session config for `connection`: host, port, user,
/// password and database from its url, [`SESSION_SETTINGS`] as startup
/// options, and the url's TLS parameters as `replication_tls` maps them.
pub fn replication_config(
    name: &str,
    connection: &Connection,
    slot: &str,
    publication: &str,
) -> Result<ReplicationConfig> {
    let bad = |reason: String| PipelineError::Connect {
        connection: name.to_string(),
        target: connection.redacted(),
        reason,
    };
    let (config, tls) = evolve_pg::parse_url(connection.url()).map_err(|e| {
        bad(match e {
            PgError::BadUrl { reason, .. } => format!("invalid connection url: {reason}"),
            other => other.to_string(),
        })
    })?;
    let user = config
        .get_user()
        .ok_or_else(|| bad("the url names no user".into()))?
        .to_string();
    let (host, unix) = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => (h.clone(), false),
        Some(tokio_postgres::config::Host::Unix(p)) => (p.display().to_string(), true),
        None => ("localhost".to_string(), false),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let password = config
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let database = config.get_dbname().unwrap_or(&user).to_string();
    let options: Vec<String> = SESSION_SETTINGS
        .iter()
        .map(|(k, v)| format!("-c {k}={}", v.replace(' ', "\\ ")))
        .collect();
    let tls = if unix {
        // As libpq: no TLS over Unix-domain sockets, whatever the mode.
        TlsConfig::disabled()
    } else {
        replication_tls(&tls, &host).map_err(bad)?
    };
    Ok(ReplicationConfig::new(
        host,
        user,
        password,
        database,
        slot,
        publication_names(publication),
    )
    .with_port(port)
    .with_tls(tls)
    .with_options(options.join(" "))
    .with_application_name("evolve-pipeline")
    .with_status_interval(std::time::Duration::from_secs(1)))
}

/// `publication` as an element of `START_REPLICATION`'s
/// `publication_names` list, which the server splits at commas and folds
/// to lower case like identifiers: always double-quoted, so `MyPub`,
/// `a,b` and `it's` each name the one publication that CREATE SOURCE
/// created. (pgwire-replication doubles the single quotes of the string
/// literal around the list.)
fn publication_names(publication: &str) -> String {
    format!("\"{}\"", publication.replace('"', "\"\""))
}

/// pgwire-replication's TLS for the url's TLS settings (see `evolve_pg::tls`)
/// on a TCP connection to `host`.
///
/// pgwire-replication 0.5 cannot express two of libpq's combinations, and
/// they are refused rather than weakened: `allow` (it has no plain-then-TLS
/// retry) and `prefer` with `sslrootcert` (its `prefer` never verifies).
/// Its `verify-ca` also checks the host name (with rustls 0.23.46 its
/// name-skipping verifier no longer recognises the name error), so a
/// certificate that does not name the host fails there; the error says so.
fn replication_tls(settings: &TlsSettings, host: &str) -> std::result::Result<TlsConfig, String> {
    let unverified = |mode| TlsConfig {
        mode,
        ..TlsConfig::disabled()
    };
    let root = settings.root_cert.clone();
    let tls = match (settings.mode, settings.verification()) {
        (SslMode::Disable, _) => return Ok(TlsConfig::disabled()),
        (SslMode::Allow, _) => {
            return Err("sslmode=allow is not supported for replication sessions (pgwire-replication has no plain-then-TLS retry); use sslmode=prefer or a stronger mode".into());
        }
        (SslMode::Prefer, Verification::Unverified) => {
            unverified(pgwire_replication::SslMode::Prefer)
        }
        (SslMode::Prefer, _) => {
            return Err("sslmode=prefer with sslrootcert is not supported for replication sessions (pgwire-replication's prefer never verifies the certificate); use sslmode=verify-ca or verify-full".into());
        }
        (_, Verification::Unverified) => unverified(pgwire_replication::SslMode::Require),
        (_, Verification::Chain) => TlsConfig::verify_ca(root),
        (_, Verification::ChainAndHostName) => {
            let tls = TlsConfig::verify_full(root);
            // pgwire-replication refuses verify-full for an IP address
            // unless the name to check is given; libpq checks the
            // certificate's IP addresses, which rustls does for this name.
            if host.parse::<std::net::IpAddr>().is_ok() {
                tls.with_sni_hostname(host)
            } else {
                tls
            }
        }
    };
    Ok(match (&settings.client_cert, &settings.client_key) {
        (Some(cert), Some(key)) => tls.with_client_cert(cert, key),
        _ => tls,
    })
}

/// How long [`probe_stream`] waits for the server to accept the stream.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the stream of `slot` with `publication` once, as the source
/// will, and ends it at once: the server's refusal (an unusable
/// publication list, a missing privilege, no free WAL sender) as an
/// error. Nothing is consumed from the slot.
pub async fn probe_stream(
    name: &str,
    connection: &Connection,
    slot: &str,
    publication: &str,
) -> Result<()> {
    let config = replication_config(name, connection, slot, publication)?;
    let mut session = ReplicationClient::connect(config)
        .await
        .map_err(|e| replication_connect_error(name, connection, &e))?;
    let started = tokio::time::timeout(PROBE_TIMEOUT, session.wait_started()).await;
    let _ = session.shutdown().await;
    match started {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(replication_connect_error(name, connection, &e)),
        Err(_) => Err(PipelineError::Replication {
            source_name: name.to_string(),
            message: format!(
                "the server did not start the replication stream within {} s",
                PROBE_TIMEOUT.as_secs()
            ),
        }),
    }
}

/// A temporary slot with an exported snapshot, alive while this lives.
pub struct ExportedSnapshot {
    /// The replication session holding the slot and the snapshot.
    _session: ReplicationClient,
    /// The slot's consistent point: transactions committed before it are
    /// in the snapshot, those committed at or after it are not.
    pub consistent_point: Lsn,
    /// The snapshot's name for `SET TRANSACTION SNAPSHOT`.
    pub snapshot_name: String,
}

/// Creates a temporary logical slot with an exported snapshot.
pub async fn export_snapshot(
    name: &str,
    connection: &Connection,
    publication: &str,
    temp_slot: &str,
) -> Result<ExportedSnapshot> {
    create_slot_exporting(name, connection, publication, temp_slot, true).await
}

/// Creates logical slot `slot` (pgoutput) with an exported snapshot, the
/// slot's stream starting exactly where the snapshot ends; temporary (gone
/// with the session) or not.
pub async fn create_slot_exporting(
    name: &str,
    connection: &Connection,
    publication: &str,
    slot: &str,
    temporary: bool,
) -> Result<ExportedSnapshot> {
    let config = replication_config(name, connection, slot, publication)?;
    let mut session = ReplicationClient::connect_gated(config)
        .await
        .map_err(|e| replication_connect_error(name, connection, &e))?;
    let rows = session
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput (SNAPSHOT 'export')",
            quote_ident(slot),
            if temporary { " TEMPORARY" } else { "" }
        ))
        .await
        .map_err(|e| replication_connect_error(name, connection, &e))?;
    let row = rows.first().ok_or_else(|| PipelineError::Replication {
        source_name: name.to_string(),
        message: "CREATE_REPLICATION_SLOT returned no row".into(),
    })?;
    let text = |i: usize| -> Result<String> {
        row.get(i)
            .and_then(|v| v.as_ref())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .ok_or_else(|| PipelineError::Replication {
                source_name: name.to_string(),
                message: format!("CREATE_REPLICATION_SLOT returned no column {i}"),
            })
    };
    let consistent_point: Lsn = text(1)?.parse().map_err(|e| PipelineError::Replication {
        source_name: name.to_string(),
        message: format!("consistent point: {e}"),
    })?;
    Ok(ExportedSnapshot {
        _session: session,
        consistent_point,
        snapshot_name: text(2)?,
    })
}

/// A replication-session error, phrased for the connection `name`.
pub fn replication_connect_error(
    name: &str,
    connection: &Connection,
    e: &pgwire_replication::PgWireError,
) -> PipelineError {
    match e {
        pgwire_replication::PgWireError::Server(message) => PipelineError::Replication {
            source_name: name.to_string(),
            message: message.clone(),
        },
        pgwire_replication::PgWireError::Tls(message) => {
            let (target, settings) = match evolve_pg::parse_url(connection.url()) {
                Ok((config, settings)) => (evolve_pg::describe_target(&config), settings),
                Err(_) => (connection.redacted(), TlsSettings::default()),
            };
            PipelineError::Connect {
                connection: name.to_string(),
                target,
                reason: replication_tls_reason(message, &settings),
            }
        }
        other => connect_error(name, connection, &other.to_string()),
    }
}

/// pgwire-replication's TLS error, phrased as `evolve_pg` phrases its own.
fn replication_tls_reason(message: &str, settings: &TlsSettings) -> String {
    let root = settings
        .root_cert
        .as_deref()
        .map_or_else(String::new, |p| p.display().to_string());
    let detail = message
        .strip_prefix("TLS handshake failed: ")
        .unwrap_or(message);
    let certificate = detail.strip_prefix("invalid peer certificate: ");
    if message.starts_with("server does not support TLS") {
        format!(
            "server does not support TLS but sslmode={}; turn ssl on in the server or use sslmode=prefer",
            settings.mode
        )
    } else if certificate == Some("UnknownIssuer") {
        format!(
            "certificate verify failed: the server's certificate is not signed by a CA in sslrootcert {root}"
        )
    } else if let Some(c) = certificate.filter(|c| c.contains("not valid for name")) {
        if settings.verification() == Verification::Chain {
            format!(
                "certificate verify failed: {c}; replication sessions check the host name under sslmode={} too (pgwire-replication 0.5): connect by a name the certificate lists",
                settings.mode
            )
        } else {
            format!("certificate verify failed: {c}; connect by a name the certificate lists")
        }
    } else if let Some(c) = certificate {
        format!("certificate verify failed: {c}")
    } else {
        let line = detail.lines().next().unwrap_or("");
        match line.strip_prefix("TLS config error: ") {
            Some(rest) => format!("TLS configuration: {rest}"),
            None => format!("TLS: {line}"),
        }
    }
}

// ------------------------------------------------------------ type kinds

/// Reads the upstream catalog's types into a [`TypeCatalog`], which maps a
/// type OID to a [`TypeKind`](evolve_core::document::TypeKind).
pub async fn type_catalog(client: &Client) -> Result<TypeCatalog> {
    let fail = |e: tokio_postgres::Error| PipelineError::database("read pg_type", &e);
    let mut catalog = TypeCatalog::new();
    for row in client.query(TYPES_QUERY, &[]).await.map_err(fail)? {
        let typtype: i8 = row.get(1);
        let typdelim: i8 = row.get(3);
        catalog.add_type(PgType {
            oid: row.get(0),
            typtype: typtype as u8,
            typelem: row.get(2),
            typdelim: typdelim as u8,
            typbasetype: row.get(4),
            typrelid: row.get(5),
            array_subscript: row.get(6),
        });
    }
    for row in client.query(ATTRIBUTES_QUERY, &[]).await.map_err(fail)? {
        catalog.add_attribute(row.get(0), row.get(1), row.get(2));
    }
    Ok(catalog)
}

// ------------------------------------------------------------ COPY text

/// Splits COPY's text format into rows: fields separated by tabs, rows by
/// newlines, `\N` for NULL, backslash escapes decoded.
#[derive(Default)]
pub struct CopyTextReader {
    pending: Vec<u8>,
}

impl CopyTextReader {
    /// Feeds a chunk; calls `row` for every complete row in it.
    pub fn feed<E>(
        &mut self,
        chunk: &[u8],
        mut row: impl FnMut(&[Option<&[u8]>]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        let mut fields: Vec<Option<Vec<u8>>> = Vec::new();
        while let Some(nl) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[start..start + nl];
            fields.clear();
            for field in line.split(|&b| b == b'\t') {
                fields.push(if field == b"\\N" {
                    None
                } else {
                    Some(unescape(field))
                });
            }
            let refs: Vec<Option<&[u8]>> = fields.iter().map(|f| f.as_deref()).collect();
            row(&refs)?;
            start += nl + 1;
        }
        self.pending.drain(..start);
        Ok(())
    }

    /// Whether bytes of an incomplete row are left over.
    pub fn has_partial_row(&self) -> bool {
        !self.pending.is_empty()
    }
}

fn unescape(field: &[u8]) -> Vec<u8> {
    if !field.contains(&b'\\') {
        return field.to_vec();
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b != b'\\' || i + 1 == field.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = field[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                let mut n = 1;
                while n < 3 && i < field.len() && (b'0'..=b'7').contains(&field[i]) {
                    value = value * 8 + u32::from(field[i] - b'0');
                    i += 1;
                    n += 1;
                }
                out.push(value as u8);
            }
            b'x' if i < field.len() && field[i].is_ascii_hexdigit() => {
                let mut value = 0u32;
                let mut n = 0;
                while n < 2 && i < field.len() && field[i].is_ascii_hexdigit() {
                    value = value * 16 + (field[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(value as u8);
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_rows_across_chunks() {
        let mut reader = CopyTextReader::default();
        let mut rows: Vec<Vec<Option<Vec<u8>>>> = Vec::new();
        let mut push = |r: &[Option<&[u8]>]| -> Result<(), ()> {
            rows.push(r.iter().map(|f| f.map(<[u8]>::to_vec)).collect());
            Ok(())
        };
        reader.feed(b"1\ta\\tb\\\\c\t\\N\n2\tx", &mut push).unwrap();
        assert!(reader.has_partial_row());
        reader.feed(b"y\\n\\101\\x41\t\n", &mut push).unwrap();
        assert!(!reader.has_partial_row());
        assert_eq!(
            rows,
            vec![
                vec![Some(b"1".to_vec()), Some(b"a\tb\\c".to_vec()), None],
                vec![Some(b"2".to_vec()), Some(b"xy\nAA".to_vec()), Some(vec![])],
            ]
        );
    }
}
