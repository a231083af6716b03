//! Drift polls: every table's pinned columns compared with its upstream
//! catalog (see [`crate::drift`] for what is compared and reported), one
//! monitoring session per source. A controller: a client of the
//! [`Pipeline`] façade, run by `GET /drift`, `REFRESH REFERENCES` and the
//! absorb controller's loop.

use std::time::SystemTime;

use tokio_postgres::Client;

use crate::drift::{DriftBoard, DriftRow, POLL_TIMEOUT, Upstream, UpstreamColumn, compare};
use crate::error::{ObjectKind, PipelineError, Result};
use crate::pipeline::Pipeline;
use crate::store::{SourceInfo, TableInfo};

/// One line of an error: its primary line and detail, no hint.
fn one_line(e: &PipelineError) -> String {
    match e.detail() {
        Some(detail) => format!("{}: {}", e.primary(), detail.lines().next().unwrap_or("")),
        None => e.primary(),
    }
}

/// Reads what the catalog says of `table`'s pinned OID and name.
async fn read_upstream(client: &Client, table: &TableInfo) -> Result<Upstream> {
    let rows = client
        .query(
            "SELECT c.oid, n.nspname::text, c.relname::text \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') \
               AND (c.oid = $1 OR (n.nspname = $2 AND c.relname = $3))",
            &[
                &table.upstream_oid,
                &table.upstream_schema,
                &table.upstream_table,
            ],
        )
        .await
        .map_err(|e| PipelineError::database("read the upstream catalog", &e))?;
    let Some(found) = rows
        .iter()
        .find(|r| r.get::<_, u32>(0) == table.upstream_oid)
    else {
        return Ok(Upstream::Missing {
            recreated_oid: rows.first().map(|r| r.get(0)),
        });
    };
    let columns = client
        .query(
            "SELECT attname::text, attnum, atttypid, atttypmod, format_type(atttypid, atttypmod) \
             FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             ORDER BY attnum",
            &[&table.upstream_oid],
        )
        .await
        .map_err(|e| PipelineError::database("read the upstream table's columns", &e))?
        .iter()
        .map(|r| UpstreamColumn {
            name: r.get(0),
            attnum: r.get(1),
            type_oid: r.get(2),
            typmod: r.get(3),
            type_name: r.get(4),
        })
        .collect();
    Ok(Upstream::Found {
        schema: found.get(1),
        name: found.get(2),
        columns,
    })
}

/// Polls one source's upstream catalog for `tables` (all of that source):
/// one row per table, `None` where it matches.
async fn poll_source(
    pipeline: &Pipeline,
    source: &SourceInfo,
    tables: Vec<TableInfo>,
) -> Vec<(String, Option<DriftRow>)> {
    let read = async {
        let connection = pipeline.config().connection(&source.connection)?;
        if source.kind == crate::store::SourceKind::Mysql {
            // Tables renamed upstream are looked for under the name the
            // stream followed them to (the schema history's).
            let now = pipeline.upstream_schemas(&source.name)?;
            return poll_mysql(source, connection, &tables, &now).await;
        }
        if source.kind == crate::store::SourceKind::Kafka {
            return poll_kafka(pipeline, &tables).await;
        }
        pipeline
            .monitor()
            .with_session(
                &source.name,
                &source.connection,
                connection,
                POLL_TIMEOUT,
                async |client| {
                    let mut out = Vec::with_capacity(tables.len());
                    for table in &tables {
                        let upstream = read_upstream(client, table).await?;
                        out.push((
                            table.name.clone(),
                            compare(table, &upstream).map(|d| DriftRow::new(table, d)),
                        ));
                    }
                    Ok(out)
                },
            )
            .await
    };
    let error = match read.await {
        Ok(rows) => return rows,
        Err(e) => one_line(&e),
    };
    tables
        .iter()
        .map(|t| (t.name.clone(), Some(DriftRow::unknown(t, error.clone()))))
        .collect()
}

/// [`poll_source`] for a MySQL source: its `information_schema`, read in
/// one session within [`POLL_TIMEOUT`].
async fn poll_mysql(
    source: &SourceInfo,
    connection: &crate::config::Connection,
    tables: &[TableInfo],
    now: &std::collections::HashMap<u32, std::sync::Arc<evolve_core::change::TableSchema>>,
) -> Result<Vec<(String, Option<DriftRow>)>> {
    let read = crate::source::mysql::read_upstreams(&source.connection, connection, tables, now);
    let upstreams = tokio::time::timeout(POLL_TIMEOUT, read)
        .await
        .map_err(|_| PipelineError::Connect {
            connection: source.connection.clone(),
            target: connection.redacted(),
            reason: format!(
                "the server did not answer within {} s",
                POLL_TIMEOUT.as_secs()
            ),
        })??;
    Ok(tables
        .iter()
        .zip(upstreams)
        .map(|(table, upstream)| {
            let row = match upstream {
                Ok(upstream) => compare(table, &upstream).map(|d| DriftRow::new(table, d)),
                Err(e) => Some(DriftRow::unknown(table, one_line(&e))),
            };
            (table.name.clone(), row)
        })
        .collect())
}

/// [`poll_source`] for a Kafka source: each table's pinned reader schema
/// against its subject's latest version in the registry (fields matched
/// by name), within [`POLL_TIMEOUT`].
async fn poll_kafka(
    pipeline: &Pipeline,
    tables: &[TableInfo],
) -> Result<Vec<(String, Option<DriftRow>)>> {
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        let Some(kafka) = &table.kafka else {
            continue;
        };
        let registry = pipeline.config().connection(&kafka.registry)?;
        let read = crate::source::kafka::upstream_columns(table, registry);
        let columns = tokio::time::timeout(POLL_TIMEOUT, read)
            .await
            .map_err(|_| PipelineError::Connect {
                connection: kafka.registry.clone(),
                target: registry.redacted(),
                reason: format!(
                    "the schema registry did not answer within {} s",
                    POLL_TIMEOUT.as_secs()
                ),
            })??;
        let upstream = Upstream::Found {
            schema: table.upstream_schema.clone(),
            name: table.upstream_table.clone(),
            columns,
        };
        out.push((
            table.name.clone(),
            compare(table, &upstream).map(|d| DriftRow::new(table, d)),
        ));
    }
    Ok(out)
}

/// What one poll saw: every table of the catalog, and for each polled
/// table its row (`None` where it matches), by table name.
struct Poll {
    catalog: Vec<String>,
    polled: Vec<(String, Option<DriftRow>)>,
}

async fn poll(pipeline: &Pipeline, source: Option<&str>) -> Result<Poll> {
    let sources = pipeline.sources()?;
    if let Some(name) = source
        && !sources.iter().any(|s| s.name == name)
    {
        return Err(PipelineError::UnknownObject {
            kind: ObjectKind::Source,
            name: name.to_string(),
        });
    }
    let tables = pipeline.tables()?;
    let catalog = tables.iter().map(|t| t.name.clone()).collect();
    let polls = sources
        .iter()
        .filter(|s| source.is_none_or(|name| name == s.name))
        .map(|s| {
            let mine: Vec<TableInfo> = tables
                .iter()
                .filter(|t| t.source == s.name)
                .cloned()
                .collect();
            poll_source(pipeline, s, mine)
        });
    let mut polled: Vec<(String, Option<DriftRow>)> = futures_util::future::join_all(polls)
        .await
        .into_iter()
        .flatten()
        .collect();
    polled.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Poll { catalog, polled })
}

/// Compares every table of `source` (or of every source) with its upstream
/// catalog, one session per source: the tables that differ, by table name;
/// empty when everything matches. A source whose upstream cannot be read
/// within [`POLL_TIMEOUT`] gives each of its tables a row with signal
/// `unknown` and the error. An unknown `source` is an error.
pub async fn drift(pipeline: &Pipeline, source: Option<&str>) -> Result<Vec<DriftRow>> {
    Ok(poll(pipeline, source)
        .await?
        .polled
        .into_iter()
        .filter_map(|(_, row)| row)
        .collect())
}

/// Polls like [`drift`], records the result of every polled table in
/// `board` (forgetting tables no longer in the catalog), and returns the
/// rows that differ.
pub async fn poll_into(
    board: &DriftBoard,
    pipeline: &Pipeline,
    source: Option<&str>,
) -> Result<Vec<DriftRow>> {
    let poll = poll(pipeline, source).await?;
    board.record(&poll.catalog, &poll.polled, SystemTime::now());
    Ok(poll.polled.into_iter().filter_map(|(_, row)| row).collect())
}
