//! `POST /coordinate`: which table versions ingest the upstream columns a
//! migration is about to drop, retype or rename, so that the migration
//! (`evolve migrate apply --pipeline URL`) can move their interfaces onto
//! versions without those columns first, and no table stalls.
//!
//! # The upstream's identity
//!
//! The migration names the database it runs on by what the server itself
//! says, not by how it was reached: `system_identifier` (of
//! `pg_control_system()`, set once by `initdb` and kept by physical
//! replicas, so a primary and its standbys are the same upstream) and
//! `current_database()`. Host names, ports, poolers and proxies differ
//! between the migration's connection and the pipeline's, and two servers
//! may both have a database `shop` on port 5432; these two values do not
//! lie. The pipeline reads them for each source through its monitoring
//! session (`crate::monitor`: no handler opens an upstream connection
//! of its own), and compares. Within a matched upstream, tables are
//! matched by the OID the migration sends (a table renamed upstream is
//! still the one ingested), else by schema and name.
//!
//! # Request
//!
//! `Content-Type: application/json` (`415` otherwise: a web page cannot
//! send it across origins without a preflight, which is never answered),
//! with the admin token like every other endpoint:
//!
//! ```json
//! {"upstream": {"system_identifier": "7301234567890123456", "database": "shop"},
//!  "columns": [{"schema": "public", "table": "orders", "oid": 16385,
//!               "column": "note", "action": "drop"}]}
//! ```
//!
//! `action` is `drop`, `retype` or `rename` (echoed, not interpreted);
//! `oid` may be left out.
//!
//! # Answer
//!
//! `200` with
//!
//! ```json
//! {"sources": ["src"],
//!  "unverified": [],
//!  "tables": [{"table": "orders_v1", "source": "src", "schema": "public",
//!              "upstream_table": "orders", "state": "running", "error": null,
//!              "columns": ["note"], "exclude_columns": [], "text_columns": [],
//!              "interfaces": ["orders_json"], "replacements": [], "pending": []}],
//!  "names": ["orders_json", "orders_v1"]}
//! ```
//!
//! - `sources`: the sources that read this upstream database.
//! - `unverified`: sources whose upstream did not answer within
//!   [`IDENTIFY_TIMEOUT`] and that have a table of the same schema and
//!   name as one asked about, each `{"source", "error"}`: the caller
//!   cannot know whether they ingest the columns, and should stop.
//! - `tables`: every table version of a matched source that ingests
//!   (pins and does not exclude) at least one of the columns, with
//!   `columns` the ones it ingests, its EXCLUDE and TEXT COLUMNS, the
//!   materialized views that read it (`interfaces`), the pending
//!   replacements that read it (`replacements`, `{"name", "target"}`),
//!   and the pending replacements of its interfaces over other tables
//!   (`pending`): an interface has at most one, so those stand in the way.
//! - `names`: every table and materialized view (replacements included)
//!   of the catalog, so that the caller picks names that are free.
//!
//! Errors have the shape of `POST /sql`'s: `400` (`22P02`) for a body
//! that is not such an object, `415` for another content type, `500`
//! when the catalog cannot be read.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::admin::{SqlError, SqlResponse};
use crate::error::PipelineError;
use crate::pipeline::Pipeline;

/// How long the identity of one source's upstream is waited for.
pub const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// At most this many columns in one request.
const MAX_COLUMNS: usize = 10_000;

/// What identifies an upstream database, as the server says it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamIdentity {
    /// `pg_control_system().system_identifier`, in decimal.
    pub system_identifier: String,
    /// `current_database()`.
    pub database: String,
}

/// One column a migration drops, retypes or renames.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnChange {
    pub schema: String,
    pub table: String,
    /// The table's OID upstream, when the migration resolved it.
    #[serde(default)]
    pub oid: Option<u32>,
    pub column: String,
    /// `drop`, `retype` or `rename`.
    pub action: String,
}

/// The body of `POST /coordinate`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinateRequest {
    pub upstream: UpstreamIdentity,
    pub columns: Vec<ColumnChange>,
}

/// A source that could not be matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unverified {
    pub source: String,
    pub error: String,
}

/// A pending replacement, by name and the interface it replaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacementRef {
    pub name: String,
    pub target: String,
}

/// A table version that ingests some of the columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AffectedTable {
    pub table: String,
    pub source: String,
    pub schema: String,
    pub upstream_table: String,
    pub state: String,
    pub error: Option<String>,
    /// The columns asked about that its documents hold.
    pub columns: Vec<String>,
    pub exclude_columns: Vec<String>,
    pub text_columns: Vec<String>,
    /// Materialized views reading it.
    pub interfaces: Vec<String>,
    /// Pending replacements reading it.
    pub replacements: Vec<ReplacementRef>,
    /// Pending replacements of its interfaces, over other tables.
    pub pending: Vec<ReplacementRef>,
    /// The consumers of its interfaces that read the columns asked about
    /// (`crate::contracts`), one per field read.
    #[serde(default)]
    pub readers: Vec<ContractReader>,
    /// The consumers of its interfaces that read whole documents, whose
    /// fields cannot be checked.
    #[serde(default)]
    pub whole_document_readers: Vec<ContractReader>,
    /// Sinks of its interfaces whose databases could not be read, with
    /// the error.
    #[serde(default)]
    pub unread_sinks: Vec<String>,
}

/// A consumer reading a field of an interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractReader {
    pub interface: String,
    /// `view`, `materialized view` or `subscriber`.
    pub kind: String,
    pub consumer: String,
    pub via: String,
    /// The field path, dotted; empty for a whole-document reader.
    pub field: String,
    /// The cast it applies.
    #[serde(default)]
    pub cast: Option<String>,
}

/// The answer of `POST /coordinate`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinateResponse {
    pub sources: Vec<String>,
    pub unverified: Vec<Unverified>,
    pub tables: Vec<AffectedTable>,
    pub names: Vec<String>,
}

/// The upstream identity of source `source`, through its monitoring
/// session.
async fn identify(
    pipeline: &Pipeline,
    source: &crate::store::SourceInfo,
) -> Result<UpstreamIdentity, PipelineError> {
    let connection = pipeline.config().connection(&source.connection)?;
    pipeline
        .monitor()
        .with_session(
            &source.name,
            &source.connection,
            connection,
            IDENTIFY_TIMEOUT,
            async |client| {
                let row = client
                    .query_one(
                        "SELECT system_identifier::text, current_database()::text \
                         FROM pg_control_system()",
                        &[],
                    )
                    .await
                    .map_err(|e| PipelineError::database("read the upstream's identity", &e))?;
                Ok(UpstreamIdentity {
                    system_identifier: row.get(0),
                    database: row.get(1),
                })
            },
        )
        .await
}

/// One line of an error.
fn one_line(e: &PipelineError) -> String {
    match e.detail() {
        Some(detail) => format!("{}: {}", e.primary(), detail.lines().next().unwrap_or("")),
        None => e.primary(),
    }
}

/// Answers `request` from the catalog.
pub async fn coordinate(
    pipeline: &Pipeline,
    request: &CoordinateRequest,
) -> Result<CoordinateResponse, PipelineError> {
    let sources = pipeline.sources()?;
    let tables = pipeline.tables()?;
    let interfaces = pipeline.interfaces()?;
    let replacements = pipeline.replacements()?;
    let mut answer = CoordinateResponse::default();
    let names: BTreeSet<String> = tables
        .iter()
        .map(|t| t.name.clone())
        .chain(interfaces.iter().map(|i| i.name.clone()))
        .chain(replacements.iter().map(|r| r.name.clone()))
        .collect();
    answer.names = names.into_iter().collect();
    let by_name = |t: &crate::store::TableInfo, c: &ColumnChange| {
        t.upstream_schema == c.schema && t.upstream_table == c.table
    };
    for source in sources.iter().filter(|s| !s.dropping) {
        let mine: Vec<_> = tables.iter().filter(|t| t.source == source.name).collect();
        if mine.is_empty() {
            continue;
        }
        match identify(pipeline, source).await {
            Ok(identity) if identity == request.upstream => {}
            Ok(_) => continue,
            Err(e) => {
                if mine
                    .iter()
                    .any(|t| request.columns.iter().any(|c| by_name(t, c)))
                {
                    answer.unverified.push(Unverified {
                        source: source.name.clone(),
                        error: one_line(&e),
                    });
                }
                continue;
            }
        }
        answer.sources.push(source.name.clone());
        for t in mine {
            let asked: Vec<&ColumnChange> = request
                .columns
                .iter()
                .filter(|c| match c.oid {
                    Some(oid) => oid == t.upstream_oid,
                    None => by_name(t, c),
                })
                .collect();
            let mut columns: Vec<String> = Vec::new();
            for c in &asked {
                if t.document_columns().any(|p| p.name == c.column) && !columns.contains(&c.column)
                {
                    columns.push(c.column.clone());
                }
            }
            if columns.is_empty() {
                continue;
            }
            let reading: Vec<String> = interfaces
                .iter()
                .filter(|i| i.table == t.name)
                .map(|i| i.name.clone())
                .collect();
            answer.tables.push(AffectedTable {
                table: t.name.clone(),
                source: t.source.clone(),
                schema: t.upstream_schema.clone(),
                upstream_table: t.upstream_table.clone(),
                state: t.state.as_str().to_string(),
                error: t.error.clone(),
                columns,
                exclude_columns: t
                    .columns
                    .iter()
                    .filter(|c| c.excluded)
                    .map(|c| c.name.clone())
                    .collect(),
                text_columns: t
                    .columns
                    .iter()
                    .filter(|c| c.as_text)
                    .map(|c| c.name.clone())
                    .collect(),
                replacements: replacements
                    .iter()
                    .filter(|r| r.table == t.name)
                    .map(|r| ReplacementRef {
                        name: r.name.clone(),
                        target: r.target.clone(),
                    })
                    .collect(),
                pending: replacements
                    .iter()
                    .filter(|r| r.table != t.name && reading.contains(&r.target))
                    .map(|r| ReplacementRef {
                        name: r.name.clone(),
                        target: r.target.clone(),
                    })
                    .collect(),
                interfaces: reading,
                readers: Vec::new(),
                whole_document_readers: Vec::new(),
                unread_sinks: Vec::new(),
            });
        }
    }
    if !answer.tables.is_empty() {
        let contracts = crate::contracts::contracts(pipeline, None, true).await?;
        for t in &mut answer.tables {
            for c in contracts
                .interfaces
                .iter()
                .filter(|c| t.interfaces.contains(&c.interface))
            {
                for u in &c.unread {
                    t.unread_sinks.push(format!("{}: {}", u.sink, u.error));
                }
                for column in &t.columns {
                    for (consumer, reads) in contracts.readers(&c.interface, column) {
                        for r in reads {
                            t.readers.push(ContractReader {
                                interface: c.interface.clone(),
                                kind: consumer.kind.clone(),
                                consumer: consumer.name.clone(),
                                via: consumer.via.clone(),
                                field: r.field.clone(),
                                cast: r.cast.clone(),
                            });
                        }
                    }
                }
                for consumer in c.consumers.iter().filter(|c| !c.whole_document.is_empty()) {
                    t.whole_document_readers.push(ContractReader {
                        interface: c.interface.clone(),
                        kind: consumer.kind.clone(),
                        consumer: consumer.name.clone(),
                        via: consumer.via.clone(),
                        field: String::new(),
                        cast: None,
                    });
                }
            }
        }
    }
    Ok(answer)
}

fn error(status: StatusCode, code: &str, message: String, hint: Option<&str>) -> Response {
    let body = SqlResponse {
        results: Vec::new(),
        error: Some(SqlError {
            code: code.into(),
            message,
            detail: None,
            hint: hint.map(str::to_string),
            position: None,
            statement: None,
        }),
    };
    json(status, &body)
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    let text = serde_json::to_string(body).unwrap_or_else(|_| "{}".into());
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// The `POST /coordinate` handler (after the admin API's access rules).
pub async fn handle(pipeline: Arc<Pipeline>, headers: HeaderMap, body: Bytes) -> Response {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    if media.as_deref() != Some("application/json") {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "0A000",
            "POST /coordinate takes Content-Type: application/json only".into(),
            Some("Send the request as application/json."),
        );
    }
    let request: CoordinateRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "22P02",
                format!("the request body is not a coordination request: {e}"),
                Some(
                    "Send {\"upstream\": {\"system_identifier\", \"database\"}, \"columns\": [{\"schema\", \"table\", \"column\", \"action\"}]}.",
                ),
            );
        }
    };
    if request.columns.len() > MAX_COLUMNS {
        return error(
            StatusCode::BAD_REQUEST,
            "22023",
            format!(
                "the request names {} columns, more than {MAX_COLUMNS}",
                request.columns.len()
            ),
            Some("Ask about fewer columns at a time."),
        );
    }
    match coordinate(&pipeline, &request).await {
        Ok(answer) => json(StatusCode::OK, &answer),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "XX000",
            e.primary(),
            None,
        ),
    }
}
