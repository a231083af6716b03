//! The live-catalog facts `evolve lint --database-url` gives its rules:
//! column types, NOT NULL columns and `CHECK (col IS NOT NULL)` constraints,
//! sizes, and the views that read each column, for the tables the files
//! name, the volatility of the functions they name (what a default
//! calls), and which of the domains they name have a constraint. Six
//! catalog queries and the TimeZone setting, whatever the number of
//! names; names are bound as values.

use evolve_core::migration::lint::{CatalogFacts, TableFacts};
use tokio_postgres::Client;

use crate::MigrateError;

/// Relations (tables, partitioned tables, materialized views) named in
/// `$1`, the first on the search path for each name. A partitioned table
/// has no storage of its own: its size and rows are its partitions'
/// (leaves at any depth; rows -1 when none was ever analyzed).
const RELATIONS: &str = "
SELECT DISTINCT ON (c.relname) c.oid, c.relname, c.relkind = 'm',
       CASE WHEN c.relkind <> 'p' THEN c.reltuples::float8 ELSE
         (SELECT coalesce(CASE WHEN bool_and(l.reltuples < 0) THEN -1
                               ELSE sum(greatest(l.reltuples, 0)) END, 0)::float8
          FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid
          WHERE t.isleaf) END,
       CASE WHEN c.relkind <> 'p' THEN pg_relation_size(c.oid)::int8 ELSE
         (SELECT coalesce(sum(pg_relation_size(t.relid)), 0)::int8
          FROM pg_partition_tree(c.oid) t WHERE t.isleaf) END,
       c.relkind = 'p'
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = ANY($1) AND c.relkind IN ('r', 'p', 'm')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY c.relname, NOT pg_table_is_visible(c.oid), n.nspname";

const COLUMNS: &str = "
SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped";

/// CHECK constraints of one column whose whole expression is
/// `col IS NOT NULL`.
const CHECKS: &str = "
SELECT c.conrelid, c.conname, a.attname, c.convalidated
FROM pg_constraint c
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
WHERE c.conrelid = ANY($1) AND c.contype = 'c' AND cardinality(c.conkey) = 1
  AND pg_get_constraintdef(c.oid) = 'CHECK ((' || quote_ident(a.attname) || ' IS NOT NULL))'
     || CASE WHEN c.convalidated THEN '' ELSE ' NOT VALID' END";

/// Views and materialized views reading a column, directly.
const READERS: &str = "
SELECT DISTINCT d.refobjid, a.attname, v.relname
FROM pg_depend d
JOIN pg_rewrite r ON r.oid = d.objid AND d.classid = 'pg_rewrite'::regclass
JOIN pg_class v ON v.oid = r.ev_class
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY($1)
  AND d.refobjsubid > 0 AND v.oid <> d.refobjid";

/// Functions named in `$1` that are on the search path (any schema on it,
/// `pg_catalog` included): whether one of that name is VOLATILE, so an
/// overload the rules cannot tell apart counts as volatile.
const FUNCTIONS: &str = "
SELECT p.proname::text, bool_or(p.provolatile = 'v')
FROM pg_proc p
WHERE p.proname = ANY($1) AND p.prokind = 'f' AND pg_function_is_visible(p.oid)
GROUP BY p.proname";

/// Domains named in `$1` on the search path with a constraint (CHECK or
/// NOT NULL), their own or one of the domains they are based on.
const CHECKED_DOMAINS: &str = "
WITH RECURSIVE chain (named, oid) AS (
  SELECT t.typname::text, t.oid FROM pg_type t
  WHERE t.typtype = 'd' AND t.typname = ANY($1) AND pg_type_is_visible(t.oid)
  UNION ALL
  SELECT chain.named, b.oid FROM chain
  JOIN pg_type d ON d.oid = chain.oid
  JOIN pg_type b ON b.oid = d.typbasetype AND b.typtype = 'd'
)
SELECT DISTINCT chain.named FROM chain JOIN pg_type t ON t.oid = chain.oid
WHERE t.typnotnull OR EXISTS (SELECT 1 FROM pg_constraint c WHERE c.contypid = t.oid)";

/// Reads the facts for `tables` (names as PostgreSQL stores them; every
/// name the files use, which covers the functions they call).
pub async fn lint_catalog(
    database_url: &str,
    tables: &[String],
) -> Result<CatalogFacts, MigrateError> {
    let client = evolve_pg::connect(database_url, "evolve lint").await?;
    catalog_facts(&client, tables).await
}

/// [`lint_catalog`] on an open connection.
pub async fn catalog_facts(
    client: &Client,
    tables: &[String],
) -> Result<CatalogFacts, MigrateError> {
    let mut facts = CatalogFacts {
        timezone: Some(
            client
                .query_one("SELECT current_setting('TimeZone')", &[])
                .await?
                .try_get(0)?,
        ),
        ..CatalogFacts::default()
    };
    for r in client.query(FUNCTIONS, &[&tables]).await? {
        facts.functions.insert(r.try_get(0)?, r.try_get(1)?);
    }
    for r in client.query(CHECKED_DOMAINS, &[&tables]).await? {
        facts.checked_domains.insert(r.try_get(0)?);
    }
    let mut by_oid = std::collections::BTreeMap::new();
    for r in client.query(RELATIONS, &[&tables]).await? {
        let oid: u32 = r.try_get(0)?;
        let name: String = r.try_get(1)?;
        let rows: f64 = r.try_get(3)?;
        let bytes: i64 = r.try_get(4)?;
        facts.tables.insert(
            name.clone(),
            TableFacts {
                matview: r.try_get(2)?,
                partitioned: r.try_get(5)?,
                // -1 means never vacuumed or analyzed.
                rows: (rows >= 0.0).then_some(rows as u64),
                bytes: u64::try_from(bytes).unwrap_or(0),
                ..TableFacts::default()
            },
        );
        by_oid.insert(oid, name);
    }
    let oids: Vec<u32> = by_oid.keys().copied().collect();
    if oids.is_empty() {
        return Ok(facts);
    }
    let oid_array = &oids;
    for r in client.query(COLUMNS, &[oid_array]).await? {
        let Some(t) = by_oid
            .get(&r.try_get::<_, u32>(0)?)
            .and_then(|n| facts.tables.get_mut(n))
        else {
            continue;
        };
        let col: String = r.try_get(1)?;
        if r.try_get::<_, bool>(3)? {
            t.not_null.insert(col.clone());
        }
        t.columns.insert(col, r.try_get(2)?);
    }
    for r in client.query(CHECKS, &[oid_array]).await? {
        if let Some(t) = by_oid
            .get(&r.try_get::<_, u32>(0)?)
            .and_then(|n| facts.tables.get_mut(n))
        {
            t.not_null_checks
                .insert(r.try_get(1)?, (r.try_get(2)?, r.try_get(3)?));
        }
    }
    for r in client.query(READERS, &[oid_array]).await? {
        if let Some(t) = by_oid
            .get(&r.try_get::<_, u32>(0)?)
            .and_then(|n| facts.tables.get_mut(n))
        {
            t.readers
                .entry(r.try_get(1)?)
                .or_default()
                .insert(r.try_get(2)?);
        }
    }
    Ok(facts)
}
