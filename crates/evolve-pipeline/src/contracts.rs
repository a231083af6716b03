//! Consumer contracts: which fields of each interface its consumers read,
//! so that an upstream change that takes a field away is seen before it
//! runs (`GET /contracts`, `evolve contracts`, `migrate apply --pipeline`,
//! `evolve plan --pipeline`, the drift board).
//!
//! The consumers of an interface are
//!
//! - the views and materialized views built on a PostgreSQL sink's table,
//!   directly or over other such views: found by walking `pg_depend` from
//!   the sink table through `pg_rewrite` in the sink database, each
//!   definition (`pg_get_viewdef`) parsed by [`evolve_core::contract`];
//! - subscribers that declared the fields they read (`evolve subscribe
//!   NAME --fields a,b [--as CONSUMER]`, `GET /subscribe/{name}?fields=a,b`),
//!   kept in the store until `evolve contracts --forget CONSUMER`.
//!
//! A consumer's `reads` are field paths (`total`, `addr.city`) with the
//! cast it applies, if any; the first part of a path is the upstream
//! column. What cannot be resolved to fields (a document handed whole to a
//! function, a key computed at run time, a view passing the document on
//! whole) is listed in `whole_document`: such a consumer is shown, and
//! warned about, but cannot be checked field by field.
//!
//! Walking a sink database reads only the catalog, with the sink's own
//! connection. A sink whose database cannot be read is listed in
//! `unread` with the error; it never fails the answer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use evolve_core::contract::{self, Column, Input, Read};
use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use crate::error::PipelineError;
use crate::pipeline::Pipeline;
use crate::store::SinkKind;

/// How long walking one sink database may take.
pub const WALK_TIMEOUT: Duration = Duration::from_secs(10);

/// One field a consumer reads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FieldRead {
    /// The path, dotted (`addr.city`).
    pub field: String,
    /// The path, one part per level.
    pub path: Vec<String>,
    /// The type the value is cast to.
    #[serde(default)]
    pub cast: Option<String>,
}

impl From<&Read> for FieldRead {
    fn from(r: &Read) -> FieldRead {
        FieldRead {
            field: r.dotted(),
            path: r.path.clone(),
            cast: r.cast.clone(),
        }
    }
}

/// A consumer of an interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumer {
    /// `view`, `materialized view` or `subscriber`.
    pub kind: String,
    /// `schema.name` for a view, the declared name for a subscriber.
    pub name: String,
    /// How it reaches the interface: `sink orders_sink (public.orders_json)`
    /// or `subscribe`.
    pub via: String,
    /// The fields it reads.
    pub reads: Vec<FieldRead>,
    /// What it uses whole, as written.
    #[serde(default)]
    pub whole_document: Vec<String>,
}

/// A sink whose database could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unread {
    pub sink: String,
    pub error: String,
}

/// A sink of an interface, for the caller that walks it itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkRef {
    pub name: String,
    /// `postgres` or `kafka`.
    pub kind: String,
    /// The target table's schema (empty for Kafka).
    pub schema: String,
    /// The target table (empty for Kafka).
    pub table: String,
}

/// The contracts of one interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceContract {
    pub interface: String,
    /// The table version it reads now.
    pub table: String,
    pub sinks: Vec<SinkRef>,
    pub consumers: Vec<Consumer>,
    #[serde(default)]
    pub unread: Vec<Unread>,
}

/// The answer of `GET /contracts`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contracts {
    pub interfaces: Vec<InterfaceContract>,
}

impl Contracts {
    /// Every consumer of `interface` reading upstream column `column`
    /// (a path starting with it), with the reads concerned.
    pub fn readers<'a>(
        &'a self,
        interface: &str,
        column: &str,
    ) -> Vec<(&'a Consumer, Vec<&'a FieldRead>)> {
        self.interfaces
            .iter()
            .filter(|i| i.interface == interface)
            .flat_map(|i| i.consumers.iter())
            .filter_map(|c| {
                let reads: Vec<&FieldRead> = c
                    .reads
                    .iter()
                    .filter(|r| r.path.first().map(String::as_str) == Some(column))
                    .collect();
                (!reads.is_empty()).then_some((c, reads))
            })
            .collect()
    }
}

/// A subscriber's declared field list (`a,b.c`) as reads; an error names
/// what is wrong.
pub fn parse_fields(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for f in list.split(',') {
        let f = f.trim();
        if f.is_empty() || f.split('.').any(str::is_empty) {
            return Err(format!(
                "the field list {list:?} has an empty field; write fields as a,b or addr.city"
            ));
        }
        if f.len() > 1000 || f.chars().any(char::is_control) {
            return Err(format!("the field {f:?} is not a field name"));
        }
        if !out.iter().any(|o| o == f) {
            out.push(f.to_string());
        }
    }
    Ok(out)
}

/// The consumers of sink table `schema.table` in the database `client`
/// is connected to, each reached `via`.
pub async fn consumers_in(
    client: &Client,
    schema: &str,
    table: &str,
    via: &str,
) -> Result<Vec<Consumer>, String> {
    let oid: Option<u32> = client
        .query_opt(
            "SELECT c.oid FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &table],
        )
        .await
        .map_err(|e| e.to_string())?
        .map(|r| r.get(0));
    let Some(oid) = oid else {
        return Ok(Vec::new());
    };
    let rows = client
        .query(
            "WITH RECURSIVE deps(oid) AS ( \
                 SELECT r.ev_class FROM pg_catalog.pg_depend d \
                 JOIN pg_catalog.pg_rewrite r ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = r.oid \
                 WHERE d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = $1 AND r.ev_class <> $1 \
               UNION \
                 SELECT r.ev_class FROM deps \
                 JOIN pg_catalog.pg_depend d ON d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = deps.oid \
                 JOIN pg_catalog.pg_rewrite r ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = r.oid \
                 WHERE r.ev_class <> deps.oid) \
             SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text, \
                    pg_catalog.pg_get_viewdef(c.oid), \
                    ARRAY(SELECT DISTINCT d.refobjid FROM pg_catalog.pg_rewrite r \
                          JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::regclass \
                               AND d.objid = r.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass \
                          WHERE r.ev_class = c.oid AND d.refobjid <> c.oid) \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid IN (SELECT oid FROM deps) AND c.relkind IN ('v', 'm') \
             ORDER BY n.nspname, c.relname",
            &[&oid],
        )
        .await
        .map_err(|e| e.to_string())?;
    struct View {
        oid: u32,
        schema: String,
        name: String,
        kind: String,
        definition: Option<String>,
        deps: Vec<u32>,
    }
    let mut pending: Vec<View> = rows
        .iter()
        .map(|r| View {
            oid: r.get(0),
            schema: r.get(1),
            name: r.get(2),
            kind: r.get(3),
            definition: r.get(4),
            deps: r.get(5),
        })
        .collect();
    let members: BTreeSet<u32> = pending.iter().map(|v| v.oid).collect();
    let mut inputs: BTreeMap<u32, Input> = BTreeMap::from([(oid, Input::sink_table(table))]);
    let mut consumers = Vec::new();
    // Views in dependency order: each once every view it reads is done.
    while !pending.is_empty() {
        let ready: Vec<usize> = (0..pending.len())
            .filter(|&i| {
                pending[i]
                    .deps
                    .iter()
                    .all(|d| !members.contains(d) || inputs.contains_key(d))
            })
            .collect();
        // A cycle cannot happen in a catalog; take the rest as they are.
        let ready = if ready.is_empty() {
            (0..pending.len()).collect()
        } else {
            ready
        };
        for i in ready.into_iter().rev() {
            let view = pending.remove(i);
            let reading: Vec<Input> = view
                .deps
                .iter()
                .filter_map(|d| inputs.get(d).cloned())
                .collect();
            let (reads, whole, columns) = match view
                .definition
                .as_deref()
                .map(|d| contract::analyze(d, &reading))
            {
                Some(Ok(a)) => (a.reads, a.whole_document, a.columns),
                Some(Err(e)) => (
                    BTreeSet::new(),
                    vec![format!("its definition is not understood ({e})")],
                    Vec::new(),
                ),
                None => (
                    BTreeSet::new(),
                    vec!["its definition could not be read".to_string()],
                    Vec::new(),
                ),
            };
            inputs.insert(
                view.oid,
                Input {
                    name: view.name.clone(),
                    columns: columns
                        .into_iter()
                        .filter(|(_, c)| *c != Column::Other)
                        .collect(),
                },
            );
            consumers.push(Consumer {
                kind: if view.kind == "m" {
                    "materialized view".to_string()
                } else {
                    "view".to_string()
                },
                name: format!("{}.{}", view.schema, view.name),
                via: via.to_string(),
                reads: reads.iter().map(FieldRead::from).collect(),
                whole_document: whole,
            });
        }
    }
    consumers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(consumers)
}

/// The contracts of every interface (or of `only`): declared subscriber
/// fields, and when `walk`, the consumers found in each PostgreSQL sink's
/// database through the sink's connection.
pub async fn contracts(
    pipeline: &Pipeline,
    only: Option<&str>,
    walk: bool,
) -> Result<Contracts, PipelineError> {
    let interfaces = pipeline.interfaces()?;
    if let Some(name) = only
        && !interfaces.iter().any(|i| i.name == name)
    {
        return Err(PipelineError::UnknownObject {
            kind: crate::error::ObjectKind::Interface,
            name: name.to_string(),
        });
    }
    let sinks = pipeline.sinks()?;
    let declared = pipeline.declared_fields()?;
    let mut clients: BTreeMap<String, Result<Client, String>> = BTreeMap::new();
    let mut out = Contracts::default();
    for interface in interfaces
        .iter()
        .filter(|i| only.is_none_or(|o| o == i.name))
    {
        let mut entry = InterfaceContract {
            interface: interface.name.clone(),
            table: interface.table.clone(),
            sinks: Vec::new(),
            consumers: Vec::new(),
            unread: Vec::new(),
        };
        for sink in sinks.iter().filter(|s| s.interface == interface.name) {
            let postgres = sink.kind == SinkKind::Postgres;
            entry.sinks.push(SinkRef {
                name: sink.name.clone(),
                kind: if postgres { "postgres" } else { "kafka" }.to_string(),
                schema: sink.target_schema.clone(),
                table: sink.target_table.clone(),
            });
            if !walk || !postgres {
                continue;
            }
            if !clients.contains_key(&sink.connection) {
                let client = connect(pipeline, &sink.connection).await;
                clients.insert(sink.connection.clone(), client);
            }
            let via = format!("sink {} ({})", sink.name, sink.target());
            let found = match &clients[&sink.connection] {
                Ok(client) => tokio::time::timeout(
                    WALK_TIMEOUT,
                    consumers_in(client, &sink.target_schema, &sink.target_table, &via),
                )
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {WALK_TIMEOUT:?}"))),
                Err(e) => Err(e.clone()),
            };
            match found {
                Ok(mut consumers) => entry.consumers.append(&mut consumers),
                Err(error) => entry.unread.push(Unread {
                    sink: sink.name.clone(),
                    error,
                }),
            }
        }
        for d in declared.iter().filter(|d| d.interface == interface.name) {
            let mut reads: Vec<FieldRead> = d
                .fields
                .iter()
                .map(|f| FieldRead {
                    field: f.clone(),
                    path: f.split('.').map(str::to_string).collect(),
                    cast: None,
                })
                .collect();
            reads.sort();
            entry.consumers.push(Consumer {
                kind: "subscriber".to_string(),
                name: d.consumer.clone(),
                via: "subscribe".to_string(),
                reads,
                whole_document: Vec::new(),
            });
        }
        out.interfaces.push(entry);
    }
    Ok(out)
}

async fn connect(pipeline: &Pipeline, connection: &str) -> Result<Client, String> {
    let conn = pipeline
        .config()
        .connection(connection)
        .map_err(|e| e.primary())?;
    match tokio::time::timeout(
        WALK_TIMEOUT,
        evolve_pg::connect(conn.url(), "evolve-pipeline contracts"),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(format!("connection {connection}: {e}")),
        Err(_) => Err(format!(
            "connection {connection}: no answer within {WALK_TIMEOUT:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_fields_are_checked() {
        assert_eq!(
            parse_fields("a, b.c,a").unwrap(),
            vec!["a".to_string(), "b.c".to_string()]
        );
        assert!(parse_fields("a,,b").is_err());
        assert!(parse_fields("a..b").is_err());
    }
}
