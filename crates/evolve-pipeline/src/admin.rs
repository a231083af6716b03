//! The admin API: the control language over HTTP, status and metrics.
//!
//! [`serve`] runs the API and [`Pipeline::run`] together until shutdown
//! (`evolve pipeline run`); [`router`] is the API alone (tests drive it in
//! process). It listens where `admin_listen` says, loopback by default.
//! Every request passes [`crate::access`]'s rules first: its `Host` must
//! name the API, a browser page of another origin is refused, and with
//! `admin_token` set every endpoint but `/metrics` needs `Authorization:
//! Bearer TOKEN`. Refusals are `403` (`42501`) and `401` (`28000`) with
//! the error object of `POST /sql`.
//!
//! # `POST /sql`
//!
//! The body is `{"sql": "..."}` with `Content-Type: application/json`, or
//! the statements' text with `Content-Type: application/sql` (UTF-8);
//! other content types are refused with `415`. The whole
//! text is parsed first ([`evolve_core::control::parse`]): a syntax error
//! anywhere in it applies nothing. The statements then run in order, one at a time and
//! each on its own, like psql without a transaction: when one fails, the
//! statements before it stay applied, and nothing of the failing one or
//! of those after it is. Requests run one after another, never
//! interleaved. `ALTER MATERIALIZED VIEW ... APPLY REPLACEMENT` returns
//! once the swap is applied (up to 30 s; see `crate::swap`), and with
//! `WITH (WAIT = '60s')` first waits up to that long for the replacement
//! to be hydrated; `ALTER
//! SOURCE ... REFRESH REFERENCES` polls the source's upstream catalog and
//! names the tables that differ in `notice` (`GET /drift` has the rows). A
//! success is `200` with
//!
//! ```json
//! {"results": [
//!   {"statement": "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')",
//!    "status": "CREATE SOURCE"},
//!   {"statement": "SHOW SOURCES", "status": "SHOW",
//!    "columns": ["name", "connection", "publication", "slot"],
//!    "rows": [{"name": "src", "connection": "pg_conn", "publication": "evolve_pub", "slot": "evolve_src"}]}
//! ]}
//! ```
//!
//! where `statement` is the canonical text ([`Statement::to_sql`]),
//! `status` the command tag (`CREATE SOURCE`, `DROP SINK`, `SHOW`, ...),
//! `columns` and `rows` come with `SHOW` (`columns` gives the order), and
//! `notice` with `DROP ... IF EXISTS` of an object that does not exist
//! and `CREATE ... IF NOT EXISTS` of one that does (nothing changed). A
//! failure is a `4xx` (`400` syntax or not supported, `409` conflicts,
//! `422` objects or upstream tables that do not exist or cannot be used),
//! or `502` when a database could not be reached or failed, with the
//! results of the statements applied before it:
//!
//! ```json
//! {"results": [...],
//!  "error": {"code": "42601", "message": "syntax error at or near \"CREAT\"",
//!            "detail": null, "hint": "Did you mean CREATE?",
//!            "position": {"offset": 0, "line": 1, "column": 1},
//!            "statement": null}}
//! ```
//!
//! `code` is a SQLSTATE in PostgreSQL's classes; `position` is a byte
//! offset in the body and its 1-based line and column (characters): where
//! the parser stopped, or the start of the failing statement, whose
//! canonical text is `statement`.
//!
//! The statements of replicas and transforms (`CREATE REPLICA`, `ALTER
//! REPLICA`, `CREATE TRANSFORM`, `DROP`/`SHOW` of `REPLICA`s and
//! `TRANSFORM`s, `SHOW CONFLICT RESOLVERS`: [`is_extension`]) are not the
//! pipeline's: they run through the [`StatementHandler`] that whoever
//! starts the API registers ([`serve_with`], [`router_with`],
//! [`execute_with`]; `evolve pipeline run` registers `evolve-replicate`'s),
//! and without one they are refused (`0A000`). The pipeline itself never
//! depends on what implements it.
//!
//! # `GET /status`
//!
//! `{"objects": [...]}`, every object of the catalog in the order sources,
//! tables, materialized views, sinks, each with `kind`, `name`, `state`
//! (`starting`, `snapshotting`, `running`, `retrying` (a failure retried with backoff), `stalled` (stopped until someone acts), for a table not yet
//! picked up `pending`, for a source whose `DROP SOURCE` has not finished
//! `dropping`) and `error`; sources add `connection`,
//! `slot`, `applied_lsn`, and, read from the upstream server when it
//! answers within 3 s, `lag_bytes` (WAL written upstream that the pipeline
//! has not applied) and `retained_wal_bytes` (WAL the slot keeps), with a
//! `warning` past 1 GiB, plus `lag_seconds` (how far behind its upstream
//! commit the latest transaction was applied, or the age of a large one it
//! is still receiving; 0 when none was applied in the last 10 s and none is
//! being received) and `rows_per_second` (row changes applied, over the
//! last 10 s); tables add `source`, `reference`, `rows_copied` (by the
//! snapshot), `rows_per_second` while copying, and `documents`;
//! materialized views `table` and `documents`, and the state `stale` with
//! the reason when their table is stalled (readers and sinks keep its last
//! consistent state); pending replacements appear as materialized views
//! with `replacement_for`, `table`, `rows_copied`, `hydrated` and the state
//! `hydrating`, `hydrated` or `applying`; sinks `from`, `connection`,
//! `target` and `lag_seconds`, the pipeline's freshness: upstream commit
//! to sink commit (the age of the oldest transaction the source applied
//! that the sink has not committed, else the delay of its last write in
//! the last 10 s, else 0). Connections appear by their name in `evolve.toml`, never as
//! URLs. A [`StatementHandler`]'s objects follow ([`StatementHandler::status`]):
//! replicas with `source`, `connection` (the node's), `applied_lsn` (the
//! last transaction applied to the node), `conflicts` (since the
//! pipeline started, by conflict type, then resolution) and
//! `large_transaction_parts` (parts of large upstream transactions
//! applied to the node, each a savepoint of the transaction's one node
//! transaction, since the pipeline started).
//!
//! # `GET /drift`
//!
//! `{"tables": [...]}`: every table whose pinned columns differ from its
//! upstream table now, or that is stalled, by table name; empty when
//! everything matches ([`crate::drift`] has the rules and the row's
//! fields: `table`, `source`, `upstream`, `signal`, `status`,
//! `added_upstream`, `dropped_upstream`, `type_changed`, `error`,
//! `detail`, and when they apply `renamed_to` and `recreated_oid`). Each request reads the upstream catalogs, one session per
//! source, within 10 s; a source that cannot be read gives each of its
//! tables a row with signal `unknown` and the connection error (the
//! connection by its name, never its URL). `?source=NAME` polls that
//! source only; a source that does not exist is a `422` with code
//! `42704`.
//!
//! # `GET /metrics`
//!
//! The same in Prometheus' text format: `evolve_pipeline_object_state`
//! (1 per object and state), `evolve_pipeline_documents`,
//! `evolve_pipeline_snapshot_rows_copied`, `evolve_pipeline_lag_bytes`,
//! `evolve_pipeline_lag_seconds`, `evolve_pipeline_rows_per_second`,
//! `evolve_pipeline_retained_wal_bytes`, and
//! `evolve_pipeline_statements_total` by result, and for replicas
//! `evolve_pipeline_conflicts_total` by conflict type and resolution and
//! `evolve_pipeline_large_transaction_parts_total`.
//!
//! # `GET /subscribe/{name}`
//!
//! Materialized view `name`'s changes as they happen: `200` with
//! `Content-Type: application/x-ndjson` and a body that does not end on
//! its own, one JSON object per line, each line sent as soon as it is
//! produced ([`crate::subscribe`] documents the format and the
//! guarantees). Query parameters: `snapshot=true` sends every document
//! first; `as_of=0/16B3748` starts at that position (a `ts` the stream
//! reported) instead of now. For example, `GET
//! /subscribe/orders_json?snapshot=true`:
//!
//! ```text
//! {"type":"change","ts":"0/1A2B3C8","diff":1,"key":{"id":1},"data":{"id":1,"customer":"ada"}}
//! {"type":"change","ts":"0/1A2B3C8","diff":1,"key":{"id":3},"data":{"id":3,"customer":"cy"}}
//! {"type":"progress","ts":"0/1A2B3C8"}
//! {"type":"change","ts":"0/1A2B5F0","diff":-1,"key":{"id":1},"data":{"id":1,"customer":"ada"}}
//! {"type":"change","ts":"0/1A2B5F0","diff":1,"key":{"id":1},"data":{"id":1,"customer":"ada l."}}
//! {"type":"progress","ts":"0/1A2B5F0"}
//! ```
//!
//! An update is a `-1` and a `+1` at the same `ts`; a `progress` line says
//! everything up to its `ts` has been sent. A reader that falls more than
//! [`crate::bus::CAPACITY`] transactions behind gets an `error` line
//! (`53400`) and the stream ends; so does one whose materialized view is
//! dropped (`42704`). Refused before the stream starts, with the error
//! object of `POST /sql`: `404` (`42704`) for a materialized view that
//! does not exist, `400` for an unknown parameter or a bad value
//! (`22023`), an `as_of` that is not a position (`22P02`), or one out of
//! range (`22023`): before what the change feed retains (`retain_history`
//! in `evolve.toml`; the message names the earliest position), or ahead of
//! the pipeline's applied position. While the materialized view's table is
//! still being hydrated the answer is a `200` that sends nothing until it
//! runs (an `as_of` out of range then ends it with an `error` line).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::position::Position;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use evolve_core::control::{self, Absorb, ControlError, ObjectKind as Kind, Statement};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, watch};

use crate::access::{Access, SqlBody};
use crate::error::{ObjectKind, PipelineError};
use crate::pipeline::{Pipeline, TableSpec};
use crate::store::TableState;

/// `retained_wal_bytes` past this gets a warning in `/status`.
pub const RETAINED_WAL_WARNING_BYTES: i64 = 1 << 30;

/// How long a status report is served to every reader (see
/// [`Admin::status`]).
const REPORT_TTL: Duration = Duration::from_secs(1);

/// How long `/status` waits for an upstream server's positions.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

// ------------------------------------------------------------- responses

/// The answer to `POST /sql`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SqlResponse {
    /// One per statement applied, in order.
    pub results: Vec<StatementResult>,
    /// Why the request stopped, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SqlError>,
}

/// One statement that was applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatementResult {
    /// Its canonical text.
    pub statement: String,
    /// The command tag: `CREATE SOURCE`, `DROP TABLE`, `SHOW`, ...
    pub status: String,
    /// `SHOW`: the columns, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    /// `SHOW`: one object per row, keyed by column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<serde_json::Map<String, Value>>>,
    /// A notice, e.g. `DROP ... IF EXISTS` of a missing object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// A refused or failed statement, in PostgreSQL's shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SqlError {
    /// A SQLSTATE: `42601` syntax, `0A000` not supported, `42704` no such
    /// object, `42710` exists already, ...
    pub code: String,
    /// The primary line.
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// Where in the request's text.
    pub position: Option<ErrorPosition>,
    /// The failing statement's canonical text, when it parsed.
    pub statement: Option<String>,
}

/// A position in the request's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorPosition {
    /// Byte offset.
    pub offset: usize,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
}

impl StatementResult {
    /// The result of `statement` with command tag `status` and nothing
    /// else.
    pub fn tag(statement: &Statement, status: &str) -> StatementResult {
        StatementResult {
            statement: statement.to_sql(),
            status: status.to_string(),
            columns: None,
            rows: None,
            notice: None,
        }
    }

    /// The result of a `SHOW`: `columns` in order, and one row per
    /// element of `rows`, its values in the order of `columns`.
    pub fn show(statement: &Statement, columns: &[&str], rows: Vec<Vec<Value>>) -> StatementResult {
        let mut result = StatementResult::tag(statement, "SHOW");
        result.columns = Some(columns.iter().map(|c| c.to_string()).collect());
        result.rows = Some(
            rows.into_iter()
                .map(|row| {
                    columns
                        .iter()
                        .map(|c| c.to_string())
                        .zip(row)
                        .collect::<serde_json::Map<_, _>>()
                })
                .collect(),
        );
        result
    }
}

// ------------------------------------------------------------ extension

/// A boxed future of a [`StatementHandler`].
pub type HandlerFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs the statements the pipeline does not run itself ([`is_extension`]:
/// replicas and transforms), for the admin API; registered by whoever
/// starts it ([`serve_with`], [`router_with`], [`execute_with`]).
///
/// The contract:
///
/// - [`execute`](Self::execute) is called with one statement for which
///   [`is_extension`] is true, after the whole request parsed, and never
///   for two statements at once (`POST /sql` requests run one after
///   another). It runs the statement in full or not at all: when it
///   fails, its catalog and what it manages elsewhere are as they were
///   (the statements before it in the request stay applied, as the
///   module docs say).
/// - Its [`StatementResult`] carries the statement's canonical text
///   ([`Statement::to_sql`]) and command tag ([`StatementResult::tag`],
///   [`StatementResult::show`]), and `notice` when `IF [NOT] EXISTS`
///   changed nothing.
/// - A failure is a [`PipelineError`] in PostgreSQL's shape: the API
///   answers with its SQLSTATE (a `Refused` error's own), its detail and
///   hint, at the statement's position, like the pipeline's own errors.
///   Errors and logs name connections by their name in `evolve.toml` and
///   never hold a password.
/// - [`run`](Self::run) does the handler's work beside the pipeline under
///   [`serve_with`]: it starts with the server and must return soon after
///   `stop` turns true. An `Err` stops the server as a failure of the
///   pipeline does; `Ok` before `stop` stops nothing. By default there is
///   no such work.
pub trait StatementHandler: Send + Sync {
    /// Runs `statement` on `pipeline`'s behalf.
    fn execute<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        statement: &'a Statement,
    ) -> HandlerFuture<'a, Result<StatementResult, PipelineError>>;

    /// Objects of the handler's own for `/status` and `/metrics` (replicas),
    /// appended after the pipeline's.
    fn status<'a>(&'a self) -> HandlerFuture<'a, Vec<ObjectReport>> {
        Box::pin(async { Vec::new() })
    }

    /// The handler's objects that read source `source` (replicas), as
    /// `(kind, name)`: `DROP SOURCE` refuses while there are any, as it
    /// does for the pipeline's own tables. By default there are none.
    fn source_dependents<'a>(
        &'a self,
        source: &'a str,
    ) -> HandlerFuture<'a, Vec<(String, String)>> {
        let _ = source;
        Box::pin(async { Vec::new() })
    }

    /// Background work until `stop` turns true.
    fn run<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        stop: watch::Receiver<bool>,
    ) -> HandlerFuture<'a, Result<(), PipelineError>> {
        let _ = (pipeline, stop);
        Box::pin(async { Ok(()) })
    }
}

/// Refuses `DROP SOURCE` of a source that objects of `handler` read
/// (replicas), naming them, as PostgreSQL refuses to drop what others
/// depend on.
async fn refuse_source_dependents(
    handler: Option<&dyn StatementHandler>,
    statement: &Statement,
) -> Result<(), PipelineError> {
    let (Some(handler), Statement::Drop(d)) = (handler, statement) else {
        return Ok(());
    };
    if d.kind != Kind::Source {
        return Ok(());
    }
    let dependents = handler.source_dependents(&d.name).await;
    if dependents.is_empty() {
        return Ok(());
    }
    Err(PipelineError::Refused {
        sqlstate: "2BP01",
        primary: format!(
            "cannot drop source \"{}\" because other objects depend on it",
            d.name
        ),
        detail: Some(
            dependents
                .iter()
                .map(|(kind, name)| format!("{kind} \"{name}\" depends on it."))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        hint: Some("Drop the dependent objects first.".into()),
    })
}

/// Whether `statement` is not the pipeline's own but a
/// [`StatementHandler`]'s: one about replicas or transforms.
pub fn is_extension(statement: &Statement) -> bool {
    matches!(statement.object_kind(), Kind::Replica | Kind::Transform)
}

impl SqlError {
    fn from_control(code: &str, e: &ControlError) -> SqlError {
        SqlError {
            code: code.to_string(),
            message: e.message.clone(),
            detail: e.detail.clone(),
            hint: e.hint.clone(),
            position: Some(ErrorPosition {
                offset: e.position.offset,
                line: e.position.line,
                column: e.position.column,
            }),
            statement: None,
        }
    }

    /// The HTTP status the error is answered with.
    pub fn http_status(&self) -> StatusCode {
        match self.code.as_str() {
            "42601" | "0A000" | "22021" => StatusCode::BAD_REQUEST,
            "42710" | "2BP01" => StatusCode::CONFLICT,
            c if c.starts_with("08") || c.starts_with("58") || c == "55000" => {
                StatusCode::BAD_GATEWAY
            }
            "XX000" => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

/// A pipeline error's SQLSTATE.
fn sqlstate(e: &PipelineError) -> &'static str {
    match e {
        PipelineError::Config { .. } => "F0000",
        PipelineError::UnknownConnection { .. } | PipelineError::UnknownObject { .. } => "42704",
        PipelineError::AlreadyExists { .. } | PipelineError::SlotExists { .. } => "42710",
        PipelineError::InvalidName { .. } => "42602",
        PipelineError::HasDependents { .. } => "2BP01",
        PipelineError::UpstreamTableNotFound { .. } => "42P01",
        PipelineError::NoReplicaIdentity { .. } => "42P10",
        PipelineError::BadColumn { .. } => "42703",
        PipelineError::SinkShape { .. } => "42809",
        PipelineError::Connect { .. } => "08006",
        PipelineError::Database { .. } | PipelineError::Replication { .. } => "58000",
        PipelineError::SlotLost { .. }
        | PipelineError::BinlogPurged { .. }
        | PipelineError::OffsetsLost { .. }
        | PipelineError::StateBehind { .. } => "55000",
        PipelineError::Document { .. } | PipelineError::Store { .. } => "XX000",
        PipelineError::Refused { sqlstate, .. } | PipelineError::AccessDenied { sqlstate, .. } => {
            sqlstate
        }
    }
}

// ------------------------------------------------------------- execution

/// How long `APPLY REPLACEMENT` waits for the stream to swap.
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// Parses `input` and runs its statements in order against `pipeline`
/// (see the module docs for what is applied when one fails), with no
/// [`StatementHandler`].
pub async fn execute(pipeline: &Pipeline, input: &str) -> SqlResponse {
    execute_with(pipeline, None, input).await
}

/// [`execute`], with `handler` running the statements that are not the
/// pipeline's ([`is_extension`]).
pub async fn execute_with(
    pipeline: &Pipeline,
    handler: Option<&dyn StatementHandler>,
    input: &str,
) -> SqlResponse {
    let statements = match control::parse(input) {
        Ok(s) => s,
        Err(e) => {
            return SqlResponse {
                results: Vec::new(),
                error: Some(SqlError::from_control(e.sqlstate().unwrap_or("42601"), &e)),
            };
        }
    };
    let mut results = Vec::with_capacity(statements.len());
    for statement in &statements {
        let ran = if is_extension(statement) {
            match handler {
                Some(handler) => handler.execute(pipeline, statement).await,
                None => Err(no_handler(statement)),
            }
        } else {
            match refuse_source_dependents(handler, statement).await {
                Ok(()) => run_statement(pipeline, statement).await,
                Err(e) => Err(e),
            }
        };
        match ran {
            Ok(result) => results.push(result),
            Err(e) => {
                let control = ControlError::new(input, statement.span().start, e.primary());
                let mut error = SqlError::from_control(sqlstate(&e), &control);
                error.detail = e.detail();
                error.hint = e.hint();
                error.statement = Some(statement.to_sql());
                return SqlResponse {
                    results,
                    error: Some(error),
                };
            }
        }
    }
    SqlResponse {
        results,
        error: None,
    }
}

/// The refusal of a statement [`is_extension`] says is not the
/// pipeline's, when no [`StatementHandler`] is registered.
fn no_handler(statement: &Statement) -> PipelineError {
    PipelineError::Refused {
        sqlstate: "0A000",
        primary: format!(
            "{} statements are not supported by this admin API",
            statement.object_kind().keyword()
        ),
        detail: Some(
            "Replicas and transforms are run by evolve-replicate, which this server was started without."
                .into(),
        ),
        hint: Some("Run them against `evolve pipeline run`.".into()),
    }
}

fn engine_kind(kind: Kind) -> Option<ObjectKind> {
    match kind {
        Kind::Source => Some(ObjectKind::Source),
        Kind::Table => Some(ObjectKind::Table),
        Kind::MaterializedView => Some(ObjectKind::Interface),
        Kind::Sink => Some(ObjectKind::Sink),
        Kind::Replica | Kind::Transform => None,
    }
}

async fn run_statement(
    pipeline: &Pipeline,
    statement: &Statement,
) -> Result<StatementResult, PipelineError> {
    let tag = |status: &str| StatementResult {
        statement: statement.to_sql(),
        status: status.to_string(),
        columns: None,
        rows: None,
        notice: None,
    };
    match statement {
        Statement::CreateSource(s) => {
            let created = match s.kind {
                evolve_core::control::SourceKind::Mysql => {
                    pipeline.create_mysql_source(&s.name, &s.connection).await
                }
                evolve_core::control::SourceKind::Kafka => {
                    pipeline
                        .create_kafka_source(&s.name, &s.connection, &s.publication)
                        .await
                }
                evolve_core::control::SourceKind::Postgres => {
                    pipeline
                        .create_source(&s.name, &s.connection, &s.publication)
                        .await
                }
            };
            let mut result = tag("CREATE SOURCE");
            result.notice = skip_existing(created, s.if_not_exists, ObjectKind::Source, &s.name)?;
            Ok(result)
        }
        Statement::CreateTable(s) => {
            let created = pipeline
                .create_table(&TableSpec {
                    name: s.name.clone(),
                    source: s.source.clone(),
                    schema: s.reference.schema.clone(),
                    table: s.reference.name.clone(),
                    exclude: s.exclude_columns.clone(),
                    text: s.text_columns.clone(),
                    kafka: s.kafka.clone(),
                })
                .await;
            let mut result = tag("CREATE TABLE");
            result.notice = skip_existing(created, s.if_not_exists, ObjectKind::Table, &s.name)?;
            Ok(result)
        }
        Statement::CreateMaterializedView(s) => {
            let created = pipeline.create_interface(&s.name, &s.table);
            let mut result = tag("CREATE MATERIALIZED VIEW");
            result.notice =
                skip_existing(created, s.if_not_exists, ObjectKind::Interface, &s.name)?;
            if result.notice.is_none() && s.absorb == Absorb::Auto {
                pipeline.set_absorb(&s.name, true)?;
            }
            Ok(result)
        }
        Statement::CreateSink(s) => {
            let created = match &s.kafka {
                Some(k) => {
                    pipeline
                        .create_kafka_sink_as(&s.name, &s.from, &s.connection, k)
                        .await
                }
                None => {
                    pipeline
                        .create_sink(
                            &s.name,
                            &s.from,
                            &s.connection,
                            &s.table.schema,
                            &s.table.name,
                        )
                        .await
                }
            };
            let mut result = tag("CREATE SINK");
            result.notice = skip_existing(created, s.if_not_exists, ObjectKind::Sink, &s.name)?;
            Ok(result)
        }
        Statement::Drop(d) => {
            let dropped = match d.kind {
                Kind::Source => pipeline.drop_source(&d.name).await,
                Kind::Table => pipeline.drop_table(&d.name).await,
                Kind::MaterializedView => pipeline.drop_interface(&d.name),
                Kind::Sink => pipeline.drop_sink(&d.name).await,
                Kind::Replica | Kind::Transform => Err(no_handler(statement)),
            };
            let mut result = tag(&format!("DROP {}", d.kind.keyword()));
            match dropped {
                Ok(()) => {}
                Err(PipelineError::UnknownObject { kind, name })
                    if d.if_exists && Some(kind) == engine_kind(d.kind) && name == d.name =>
                {
                    result.notice = Some(format!("{kind} \"{name}\" does not exist, skipping"));
                }
                Err(e) => return Err(e),
            }
            Ok(result)
        }
        Statement::Show(s) => {
            let Some((columns, rows)) = show(pipeline, s.kind)? else {
                return Err(no_handler(statement));
            };
            Ok(StatementResult::show(statement, columns, rows))
        }
        Statement::CreateReplacement(s) => {
            let created = pipeline.create_replacement(&s.name, &s.target, &s.table);
            let mut result = tag("CREATE MATERIALIZED VIEW");
            result.notice =
                skip_existing(created, s.if_not_exists, ObjectKind::Interface, &s.name)?;
            Ok(result)
        }
        Statement::ApplyReplacement(s) => {
            if let Some(wait) = s.wait {
                pipeline
                    .wait_hydrated(&s.view, &s.replacement, wait)
                    .await?;
            }
            pipeline
                .apply_replacement(&s.view, &s.replacement, APPLY_WAIT)
                .await?;
            Ok(tag("ALTER MATERIALIZED VIEW"))
        }
        Statement::RefreshReferences(r) => {
            // Polls the source's upstream catalog now: the drift of each of
            // its tables, as `GET /drift?source=` gives it.
            let rows =
                crate::poll::poll_into(pipeline.drift_board(), pipeline, Some(&r.source)).await?;
            let mut result = tag("ALTER SOURCE");
            if !rows.is_empty() {
                result.notice = Some(format!(
                    "{} table(s) of source \"{}\" differ from upstream: {}",
                    rows.len(),
                    r.source,
                    rows.iter()
                        .map(|d| format!("{} ({})", d.table, d.signal))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Ok(result)
        }
        Statement::AlterMaterializedView(s) => {
            pipeline.set_absorb(&s.name, s.absorb == Absorb::Auto)?;
            Ok(tag("ALTER MATERIALIZED VIEW"))
        }
        Statement::CreateReplica(_)
        | Statement::AlterReplica(_)
        | Statement::EnableReplica(_)
        | Statement::CreateTransform(_)
        | Statement::ShowConflictResolvers(_) => Err(no_handler(statement)),
    }
}

/// What `CREATE ... IF NOT EXISTS` of `kind` `name` answers: no notice
/// when it was created; when an object of that kind and name exists and
/// the statement says `IF NOT EXISTS`, a notice, and nothing was changed
/// (every create verb checks for the name before anything else).
fn skip_existing<T>(
    created: Result<T, PipelineError>,
    if_not_exists: bool,
    kind: ObjectKind,
    name: &str,
) -> Result<Option<String>, PipelineError> {
    match created {
        Ok(_) => Ok(None),
        Err(PipelineError::AlreadyExists { kind: k, name: n })
            if if_not_exists && k == kind && n == name =>
        {
            Ok(Some(format!("{k} \"{n}\" already exists, skipping")))
        }
        Err(e) => Err(e),
    }
}

type Rows = (&'static [&'static str], Vec<Vec<Value>>);

/// The pipeline's own `SHOW`s; `None` for kinds that are not its own.
fn show(pipeline: &Pipeline, kind: Kind) -> Result<Option<Rows>, PipelineError> {
    Ok(Some(match kind {
        Kind::Source => (
            &["name", "connection", "publication", "slot"],
            pipeline
                .sources()?
                .into_iter()
                .map(|s| {
                    vec![
                        s.name.into(),
                        s.connection.into(),
                        s.publication.into(),
                        s.slot.into(),
                    ]
                })
                .collect(),
        ),
        Kind::Table => (
            &[
                "name",
                "source",
                "reference",
                "key",
                "columns",
                "state",
                "reader_schema",
            ],
            pipeline
                .tables()?
                .into_iter()
                .map(|t| {
                    let key: Vec<&str> = t.key_columns().map(|c| c.name.as_str()).collect();
                    vec![
                        t.name.clone().into(),
                        t.source.clone().into(),
                        t.reference().into(),
                        key.join(", ").into(),
                        t.document_columns().count().into(),
                        json!(t.state),
                        // A Kafka table's pinned reader schema, and the
                        // schemas it references.
                        t.kafka.as_ref().map_or(Value::Null, |k| {
                            let mut pinned =
                                format!("{} id {} (version {})", k.subject, k.schema_id, k.version);
                            if let Some(message) = &k.message {
                                pinned.push_str(&format!(" message {message}"));
                            }
                            for (i, r) in k.references.iter().enumerate() {
                                pinned.push_str(if i == 0 { " referencing " } else { ", " });
                                pinned.push_str(&format!(
                                    "{} ({} version {})",
                                    r.name, r.subject, r.version
                                ));
                            }
                            if let Some(key) = &k.key_format {
                                pinned.push_str(&format!("; key format {key}"));
                            }
                            pinned.into()
                        }),
                    ]
                })
                .collect(),
        ),
        Kind::MaterializedView => (
            &["name", "table", "absorb"],
            pipeline
                .interfaces()?
                .into_iter()
                .map(|i| {
                    let absorb = if i.absorb_auto { "auto" } else { "manual" };
                    vec![i.name.into(), i.table.into(), absorb.into()]
                })
                .collect(),
        ),
        Kind::Sink => (
            &["name", "from", "connection", "table"],
            pipeline
                .sinks()?
                .into_iter()
                .map(|s| {
                    let target = s.target();
                    vec![
                        s.name.into(),
                        s.interface.into(),
                        s.connection.into(),
                        target.into(),
                    ]
                })
                .collect(),
        ),
        Kind::Replica | Kind::Transform => return Ok(None),
    }))
}

// ------------------------------------------------------------------ status

/// The answer to `GET /status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Sources, tables, materialized views, sinks.
    pub objects: Vec<ObjectReport>,
}

/// One object in `/status` (fields that do not apply to its kind are left
/// out).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectReport {
    /// `source`, `table`, `materialized view`, `sink`.
    pub kind: String,
    pub name: String,
    /// `starting`, `pending`, `snapshotting`, `running`, `retrying`, `stalled`.
    pub state: String,
    /// The last error, when stalled or retrying.
    pub error: Option<String>,
    /// A source's or sink's connection name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    /// A source's slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// A source's applied position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_lsn: Option<String>,
    /// A source's WAL written upstream and not applied yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<u64>,
    /// Sources: how far behind its upstream commit the latest transaction
    /// was applied, in seconds; 0 when none was applied in the last 10 s
    /// (`lag_bytes` then shows WAL still to decode). Sinks: the age of the
    /// oldest upstream transaction the source applied and the sink has not
    /// committed yet, or else how long after its upstream commit the
    /// sink committed its last write in the last 10 s, or 0 (upstream
    /// commit to sink commit, the pipeline's freshness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    /// Sources: row changes applied per second; tables: rows copied per
    /// second by the snapshot (over the last 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_per_second: Option<f64>,
    /// WAL the source's slot keeps upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_wal_bytes: Option<i64>,
    /// Something to look at, e.g. retained WAL past the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// A table's source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A table's upstream `schema.table`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Rows a table's snapshot copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_copied: Option<u64>,
    /// A Kafka table pinned with `SUBJECT`: the records of its topic's
    /// other record types it left out (other tables' rows), by its
    /// snapshot and its stream, since the pipeline started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_records: Option<u64>,
    /// A table's or materialized view's current documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<u64>,
    /// A materialized view's table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// A sink's materialized view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// A sink's target table, `schema.table`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Replacements: the materialized view it replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement_for: Option<String>,
    /// Replacements: whether its table's snapshot is in and it follows
    /// the stream (APPLY REPLACEMENT needs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hydrated: Option<bool>,
    /// Replicas: the conflicts met since the pipeline started, by conflict
    /// type and then resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<BTreeMap<String, BTreeMap<String, u64>>>,
    /// Replicas: parts of large upstream transactions applied to the node
    /// (each part a savepoint in the transaction's one node transaction),
    /// counted when that commits, since the pipeline started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large_transaction_parts: Option<u64>,
}

/// Every object with its state, from the catalog and the running tasks.
pub async fn status(pipeline: &Pipeline) -> Result<StatusReport, PipelineError> {
    let board = pipeline.status();
    let live = |kind: ObjectKind, name: &str| {
        board
            .iter()
            .find(|s| s.kind == kind && s.name == name)
            .map(|s| (s.state.clone(), s.error.clone()))
    };
    let mut objects = Vec::new();
    let sources = pipeline.sources()?;
    pipeline
        .monitor()
        .retain(&sources.iter().map(|s| s.name.as_str()).collect::<Vec<_>>());
    for s in sources {
        let (state, error) = if s.dropping {
            ("dropping".into(), s.drop_error.clone())
        } else {
            live(ObjectKind::Source, &s.name).unwrap_or_else(|| ("starting".into(), None))
        };
        let positions = match pipeline.config().connection(&s.connection) {
            Ok(conn) => {
                pipeline
                    .monitor()
                    .positions(&s.name, &s.connection, conn, &s.slot, UPSTREAM_TIMEOUT)
                    .await
            }
            Err(_) => None,
        };
        let retained = positions.and_then(|p| p.retained_bytes);
        let lag_bytes = positions.map(|p| p.lag_bytes(s.applied_lsn));
        objects.push(ObjectReport {
            kind: ObjectKind::Source.as_str().into(),
            name: s.name.clone(),
            state,
            error,
            connection: Some(s.connection.clone()),
            slot: Some(s.slot.clone()),
            applied_lsn: Some(s.applied_lsn.to_string()),
            lag_bytes,
            lag_seconds: pipeline
                .status_board()
                .lag_seconds(&s.name)
                .map(|l| (l * 10.0).round() / 10.0),
            rows_per_second: pipeline
                .status_board()
                .rows_per_second(ObjectKind::Source, &s.name)
                .map(|r| r.round()),
            retained_wal_bytes: retained,
            warning: retained.filter(|r| *r > RETAINED_WAL_WARNING_BYTES).map(|r| {
                format!(
                    "slot {} retains {} MiB of WAL upstream; is a sink behind, or the pipeline stopped?",
                    s.slot,
                    r >> 20
                )
            }),
            ..ObjectReport::default()
        });
    }
    let tables = pipeline.tables()?;
    let mut table_docs = Vec::with_capacity(tables.len());
    for t in &tables {
        let documents = match pipeline.document_count(&t.name) {
            Ok(documents) => documents,
            // Dropped since the list was read (a DROP TABLE beside the
            // report): it is gone, and the report does not fail.
            Err(PipelineError::UnknownObject { .. }) => continue,
            Err(e) => return Err(e),
        };
        let (state, error) = live(ObjectKind::Table, &t.name)
            .unwrap_or_else(|| (json_str(&json!(t.state)), t.error.clone()));
        table_docs.push((t.name.clone(), state.clone(), documents));
        objects.push(ObjectReport {
            kind: ObjectKind::Table.as_str().into(),
            name: t.name.clone(),
            state,
            error,
            source: Some(t.source.clone()),
            reference: Some(t.reference()),
            rows_copied: Some(t.rows_copied),
            skipped_records: t
                .kafka
                .as_ref()
                .and_then(|k| k.record_type.as_ref())
                .map(|_| pipeline.status_board().skipped(&t.name).unwrap_or(0)),
            rows_per_second: matches!(t.state, TableState::Pending | TableState::Snapshotting)
                .then(|| {
                    pipeline
                        .status_board()
                        .rows_per_second(ObjectKind::Table, &t.name)
                        .map(|r| r.round())
                })
                .flatten(),
            documents: Some(documents),
            ..ObjectReport::default()
        });
    }
    for i in pipeline.interfaces()? {
        let (mut state, documents) = table_docs
            .iter()
            .find(|(name, _, _)| *name == i.table)
            .map(|(_, state, docs)| (state.clone(), Some(*docs)))
            .unwrap_or_else(|| ("starting".into(), None));
        let mut error = None;
        if state == "stalled" {
            // Readers and sinks keep the last consistent state.
            state = "stale".into();
            error = Some(format!(
                "table \"{}\" is stalled ({}); readers and sinks keep its last consistent state until a replacement is applied",
                i.table,
                tables
                    .iter()
                    .find(|t| t.name == i.table)
                    .and_then(|t| t.error.clone())
                    .unwrap_or_default()
            ));
        }
        objects.push(ObjectReport {
            kind: ObjectKind::Interface.as_str().into(),
            name: i.name.clone(),
            state,
            error,
            table: Some(i.table.clone()),
            documents,
            ..ObjectReport::default()
        });
    }
    for r in pipeline.replacements()? {
        let table = tables.iter().find(|t| t.name == r.table);
        let hydrated = table.is_some_and(|t| t.state == TableState::Running);
        let state = if r.applying {
            "applying"
        } else if hydrated {
            "hydrated"
        } else {
            "hydrating"
        };
        objects.push(ObjectReport {
            kind: ObjectKind::Interface.as_str().into(),
            name: r.name.clone(),
            state: state.into(),
            error: r.error.clone(),
            table: Some(r.table.clone()),
            rows_copied: table.map(|t| t.rows_copied),
            documents: table_docs
                .iter()
                .find(|(name, _, _)| *name == r.table)
                .map(|(_, _, docs)| *docs),
            replacement_for: Some(r.target.clone()),
            hydrated: Some(hydrated),
            ..ObjectReport::default()
        });
    }
    for s in pipeline.sinks()? {
        let (state, error) =
            live(ObjectKind::Sink, &s.name).unwrap_or_else(|| ("starting".into(), None));
        objects.push(ObjectReport {
            kind: ObjectKind::Sink.as_str().into(),
            name: s.name.clone(),
            state,
            error,
            connection: Some(s.connection.clone()),
            from: Some(s.interface.clone()),
            target: Some(s.target()),
            lag_seconds: pipeline
                .status_board()
                .sink_lag_seconds(&s.name)
                .map(|l| (l * 10.0).round() / 10.0),
            ..ObjectReport::default()
        });
    }
    Ok(StatusReport { objects })
}

fn json_str(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Prometheus' escaping of a label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The status report and statement counters in Prometheus' text format.
pub fn metrics_text(report: &StatusReport, statements_ok: u64, statements_failed: u64) -> String {
    let mut out = String::new();
    let mut family = |name: &str, help: &str, kind: &str, samples: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let object =
        |o: &ObjectReport| format!("kind=\"{}\",name=\"{}\"", label(&o.kind), label(&o.name));
    family(
        "evolve_pipeline_object_state",
        "1 for the state each object of the catalog is in.",
        "gauge",
        report
            .objects
            .iter()
            .map(|o| {
                (
                    format!("{},state=\"{}\"", object(o), label(&o.state)),
                    "1".into(),
                )
            })
            .collect(),
    );
    family(
        "evolve_pipeline_documents",
        "Documents (upstream rows) a table or materialized view holds.",
        "gauge",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.documents?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_snapshot_rows_copied",
        "Rows a table's snapshot copied.",
        "gauge",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.rows_copied?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_skipped_records_total",
        "Records of other record types a Kafka table pinned with SUBJECT left out of its topic (other tables' rows), since the pipeline started.",
        "counter",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.skipped_records?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_lag_bytes",
        "WAL written upstream that a source has not applied.",
        "gauge",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.lag_bytes?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_lag_seconds",
        "Sources: how far behind its upstream commit the latest transaction was applied; sinks: upstream commit to sink commit (the oldest transaction not committed yet, else the last one).",
        "gauge",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.lag_seconds?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_rows_per_second",
        "Row changes a source applied, or rows a table's snapshot copied, per second over 10 s.",
        "gauge",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.rows_per_second?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_retained_wal_bytes",
        "WAL a source's replication slot keeps upstream.",
        "gauge",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.retained_wal_bytes?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_conflicts_total",
        "Conflicts a replica met since the pipeline started, by type and resolution.",
        "counter",
        report
            .objects
            .iter()
            .flat_map(|o| {
                o.conflicts
                    .iter()
                    .flatten()
                    .flat_map(move |(conflict, by)| {
                        by.iter().map(move |(resolution, n)| {
                            (
                                format!(
                                    "{},conflict_type=\"{}\",resolution=\"{}\"",
                                    object(o),
                                    label(conflict),
                                    label(resolution)
                                ),
                                n.to_string(),
                            )
                        })
                    })
            })
            .collect(),
    );
    family(
        "evolve_pipeline_large_transaction_parts_total",
        "Parts of large upstream transactions a replica applied to its node (savepoints of one node transaction each), since the pipeline started.",
        "counter",
        report
            .objects
            .iter()
            .filter_map(|o| Some((object(o), o.large_transaction_parts?.to_string())))
            .collect(),
    );
    family(
        "evolve_pipeline_statements_total",
        "Control statements run through POST /sql, by result.",
        "counter",
        vec![
            ("result=\"ok\"".into(), statements_ok.to_string()),
            ("result=\"error\"".into(), statements_failed.to_string()),
        ],
    );
    out
}

// -------------------------------------------------------------------- http

/// When a drift poll started, its `?source=`, and its rows.
type LastDrift = (Instant, Option<String>, crate::drift::DriftReport);

struct Admin {
    pipeline: Arc<Pipeline>,
    /// Runs the statements that are not the pipeline's.
    handler: Option<Arc<dyn StatementHandler>>,
    /// Who may call.
    access: Access,
    /// `/sql` requests run one at a time.
    sql: Mutex<()>,
    /// The last status report, when its reading started, and
    /// [`Admin::statements_run`] then.
    report: std::sync::Mutex<Option<(Instant, u64, StatusReport)>>,
    /// Held while a status report is read, so that one reader reads it.
    reading_report: Mutex<()>,
    /// The last drift poll, its `?source=` and when it started.
    drift: Mutex<Option<LastDrift>>,
    statements_ok: AtomicU64,
    statements_failed: AtomicU64,
    /// Set when the server shuts down: open subscriptions end then, so
    /// the graceful shutdown does not wait for them forever.
    stopping: watch::Receiver<bool>,
    /// Keeps `stopping` open for a router without a server.
    _never: Option<watch::Sender<bool>>,
}

/// The admin API over `pipeline` (without running it; see [`serve`]).
pub fn router(pipeline: Arc<Pipeline>) -> Router {
    router_with(pipeline, None)
}

/// [`router`], with `handler` running the statements that are not the
/// pipeline's (its [`StatementHandler::run`] is not started here).
pub fn router_with(pipeline: Arc<Pipeline>, handler: Option<Arc<dyn StatementHandler>>) -> Router {
    // Subscriptions of this router end only with their clients.
    let (never, stopping) = watch::channel(false);
    build_router(pipeline, handler, stopping, Some(never))
}

fn build_router(
    pipeline: Arc<Pipeline>,
    handler: Option<Arc<dyn StatementHandler>>,
    stopping: watch::Receiver<bool>,
    never: Option<watch::Sender<bool>>,
) -> Router {
    let admin = Arc::new(Admin {
        access: Access::new(pipeline.config()),
        pipeline,
        handler,
        sql: Mutex::new(()),
        report: std::sync::Mutex::new(None),
        reading_report: Mutex::new(()),
        drift: Mutex::new(None),
        statements_ok: AtomicU64::new(0),
        statements_failed: AtomicU64::new(0),
        stopping,
        _never: never,
    });
    Router::new()
        .route("/sql", post(sql))
        .route("/status", get(status_handler))
        .route("/drift", get(drift_handler))
        .route("/metrics", get(metrics))
        .route("/subscribe/{name}", get(subscribe_handler))
        .route("/contracts", get(contracts_handler))
        .route(
            "/contracts/{consumer}",
            axum::routing::delete(forget_handler),
        )
        .route(
            "/coordinate",
            post({
                let pipeline = Arc::clone(&admin.pipeline);
                move |headers: axum::http::HeaderMap, body: Bytes| {
                    crate::coordinate::handle(Arc::clone(&pipeline), headers, body)
                }
            }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&admin),
            guard,
        ))
        .with_state(admin)
}

impl Admin {
    /// The status report, shared by every reader from memory: the last one
    /// while it is under [`REPORT_TTL`] old and no statement ran through
    /// `POST /sql` since it was read (so a caller sees what its
    /// statements did). One reader reads the next one; meanwhile the
    /// others take the last while it is under twice that age, and wait
    /// for the new one otherwise. However many scrapers poll, the report
    /// is read about once a second and nobody queues behind the reading
    /// (whose upstream figures come from [`crate::monitor`]'s own cache).
    async fn status(&self) -> Result<StatusReport, PipelineError> {
        let cached = |max_age: Duration| {
            let last = self.report.lock().unwrap_or_else(|p| p.into_inner());
            last.as_ref()
                .filter(|(started, run, _)| {
                    started.elapsed() < max_age && *run == self.statements_run()
                })
                .map(|(_, _, report)| report.clone())
        };
        if let Some(report) = cached(REPORT_TTL) {
            return Ok(report);
        }
        let _reading = match self.reading_report.try_lock() {
            Ok(reading) => reading,
            Err(_) => {
                if let Some(report) = cached(2 * REPORT_TTL) {
                    return Ok(report);
                }
                self.reading_report.lock().await
            }
        };
        if let Some(report) = cached(REPORT_TTL) {
            return Ok(report);
        }
        let (started, run) = (Instant::now(), self.statements_run());
        let mut report = status(&self.pipeline).await?;
        if let Some(handler) = &self.handler {
            report.objects.extend(handler.status().await);
        }
        *self.report.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((started, run, report.clone()));
        Ok(report)
    }

    /// Statements run through `POST /sql` so far, failed ones included.
    fn statements_run(&self) -> u64 {
        self.statements_ok.load(Ordering::Relaxed) + self.statements_failed.load(Ordering::Relaxed)
    }
}

impl Admin {
    /// A drift poll for a request that arrived now, shared like
    /// [`Admin::status`] by the requests for the same source that arrive
    /// while one is polling.
    async fn drift(
        &self,
        source: Option<&str>,
    ) -> Result<crate::drift::DriftReport, PipelineError> {
        let asked = Instant::now();
        let mut last = self.drift.lock().await;
        if let Some((started, polled, report)) = &*last
            && *started >= asked
            && polled.as_deref() == source
        {
            return Ok(report.clone());
        }
        let started = Instant::now();
        let tables =
            crate::poll::poll_into(self.pipeline.drift_board(), &self.pipeline, source).await?;
        let readers = drift_readers(&self.pipeline, &tables).await?;
        let report = crate::drift::DriftReport { tables, readers };
        *last = Some((started, source.map(str::to_string), report.clone()));
        Ok(report)
    }
}

/// The consumers reading the columns `rows` report dropped or retyped
/// upstream; the sinks' databases are walked only when there are such
/// columns.
async fn drift_readers(
    pipeline: &Pipeline,
    rows: &[crate::drift::DriftRow],
) -> Result<Vec<crate::drift::DriftReader>, PipelineError> {
    let lost: Vec<(&str, &str)> = rows
        .iter()
        .flat_map(|r| {
            r.dropped_upstream
                .iter()
                .map(String::as_str)
                .chain(r.type_changed.iter().map(|c| c.column.as_str()))
                .map(move |c| (r.table.as_str(), c))
        })
        .collect();
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let contracts = crate::contracts::contracts(pipeline, None, true).await?;
    let mut readers = Vec::new();
    for (table, column) in lost {
        for interface in contracts.interfaces.iter().filter(|i| i.table == table) {
            for (consumer, reads) in contracts.readers(&interface.interface, column) {
                for r in reads {
                    readers.push(crate::drift::DriftReader {
                        table: table.to_string(),
                        column: column.to_string(),
                        interface: interface.interface.clone(),
                        consumer: format!("{} {}", consumer.kind, consumer.name),
                        field: r.field.clone(),
                        cast: r.cast.clone(),
                    });
                }
            }
        }
    }
    Ok(readers)
}

/// [`Access::check`] before every handler.
async fn guard(
    State(admin): State<Arc<Admin>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match admin
        .access
        .check(request.method(), request.uri().path(), request.headers())
    {
        Ok(body) => {
            if let Some(body) = body {
                request.extensions_mut().insert(body);
            }
            next.run(request).await
        }
        Err(refusal) => {
            let mut response =
                plain_error(refusal.status, refusal.code, refusal.message, refusal.hint);
            if refusal.status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
            }
            response
        }
    }
}

/// `POST /sql`'s JSON body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlRequest {
    sql: String,
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let text = serde_json::to_string(body).unwrap_or_else(|_| "{}".into());
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

fn plain_error(status: StatusCode, code: &str, message: String, hint: Option<&str>) -> Response {
    let response = SqlResponse {
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
    json_response(status, &response)
}

async fn sql(
    State(admin): State<Arc<Admin>>,
    kind: Option<axum::Extension<SqlBody>>,
    body: Bytes,
) -> Response {
    let Ok(text) = std::str::from_utf8(&body) else {
        return plain_error(
            StatusCode::BAD_REQUEST,
            "22021",
            "the request body is not valid UTF-8".into(),
            Some("Send the statements' text in UTF-8."),
        );
    };
    let text = match kind.map(|k| k.0) {
        Some(SqlBody::Json) => match serde_json::from_str::<SqlRequest>(text) {
            Ok(request) => request.sql,
            Err(e) => {
                return plain_error(
                    StatusCode::BAD_REQUEST,
                    "22P02",
                    format!("the request body is not {{\"sql\": \"...\"}}: {e}"),
                    Some("Send a JSON object with one key, sql, whose value is the statements."),
                );
            }
        },
        _ => text.to_string(),
    };
    let response = {
        let _one_at_a_time = admin.sql.lock().await;
        execute_with(&admin.pipeline, admin.handler.as_deref(), &text).await
    };
    admin
        .statements_ok
        .fetch_add(response.results.len() as u64, Ordering::Relaxed);
    match &response.error {
        None => json_response(StatusCode::OK, &response),
        Some(error) => {
            admin.statements_failed.fetch_add(1, Ordering::Relaxed);
            json_response(error.http_status(), &response)
        }
    }
}

async fn status_handler(State(admin): State<Arc<Admin>>) -> Response {
    match admin.status().await {
        Ok(report) => json_response(StatusCode::OK, &report),
        Err(e) => plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate(&e),
            e.primary(),
            None,
        ),
    }
}

/// `GET /drift`'s query.
#[derive(Deserialize)]
struct DriftQuery {
    source: Option<String>,
}

async fn drift_handler(
    State(admin): State<Arc<Admin>>,
    axum::extract::Query(query): axum::extract::Query<DriftQuery>,
) -> Response {
    match admin.drift(query.source.as_deref()).await {
        Ok(report) => json_response(StatusCode::OK, &report),
        Err(e @ PipelineError::UnknownObject { .. }) => plain_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            sqlstate(&e),
            e.primary(),
            Some("SHOW SOURCES lists the sources."),
        ),
        Err(e) => plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate(&e),
            e.primary(),
            None,
        ),
    }
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    match admin.status().await {
        Ok(report) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            metrics_text(
                &report,
                admin.statements_ok.load(Ordering::Relaxed),
                admin.statements_failed.load(Ordering::Relaxed),
            ),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.primary()).into_response(),
    }
}

/// `GET /contracts[?interface=NAME][&walk=false]`: what each interface's
/// consumers read ([`crate::contracts`]).
async fn contracts_handler(
    State(admin): State<Arc<Admin>>,
    axum::extract::Query(query): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let mut only = None;
    let mut walk = true;
    for (key, value) in query {
        match (key.as_str(), value.as_str()) {
            ("interface", _) => only = Some(value),
            ("walk", "false" | "0") => walk = false,
            ("walk", "true" | "1" | "") => walk = true,
            _ => {
                return plain_error(
                    StatusCode::BAD_REQUEST,
                    "22023",
                    format!("unknown parameter \"{key}\" (or value {value:?})"),
                    Some("GET /contracts takes interface=NAME and walk=false."),
                );
            }
        }
    }
    match crate::contracts::contracts(&admin.pipeline, only.as_deref(), walk).await {
        Ok(answer) => json_response(StatusCode::OK, &answer),
        Err(e @ PipelineError::UnknownObject { .. }) => plain_error(
            StatusCode::NOT_FOUND,
            sqlstate(&e),
            e.primary(),
            Some("SHOW MATERIALIZED VIEWS lists the materialized views."),
        ),
        Err(e) => plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate(&e),
            e.primary(),
            None,
        ),
    }
}

/// `DELETE /contracts/{consumer}[?interface=NAME]`: forgets a subscriber's
/// declared fields.
async fn forget_handler(
    State(admin): State<Arc<Admin>>,
    axum::extract::Path(consumer): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let interface = query
        .iter()
        .find(|(k, _)| k == "interface")
        .map(|(_, v)| v.as_str());
    match admin.pipeline.forget_fields(interface, &consumer) {
        Ok(n) => json_response(StatusCode::OK, &serde_json::json!({ "forgotten": n })),
        Err(e) => plain_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            sqlstate(&e),
            e.primary(),
            None,
        ),
    }
}

/// `GET /subscribe/{name}`: the stream, or the error that refused it.
async fn subscribe_handler(
    State(admin): State<Arc<Admin>>,
    axum::extract::Path(name): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    use crate::subscribe::{SubscribeError, SubscribeOptions};
    let refuse = |status: StatusCode,
                  code: &str,
                  message: String,
                  detail: Option<String>,
                  hint: Option<String>| {
        let response = SqlResponse {
            results: Vec::new(),
            error: Some(SqlError {
                code: code.into(),
                message,
                detail,
                hint,
                position: None,
                statement: None,
            }),
        };
        json_response(status, &response)
    };
    let mut opts = SubscribeOptions::default();
    let mut fields: Option<Vec<String>> = None;
    let mut consumer: Option<String> = None;
    for (key, value) in query {
        match key.as_str() {
            "fields" => match crate::contracts::parse_fields(&value) {
                Ok(f) => fields = Some(f),
                Err(message) => {
                    return refuse(StatusCode::BAD_REQUEST, "22023", message, None, None);
                }
            },
            "consumer" => {
                if value.is_empty() || value.len() > 200 || value.chars().any(char::is_control) {
                    return refuse(
                        StatusCode::BAD_REQUEST,
                        "22023",
                        format!("invalid value for parameter \"consumer\": {value:?}"),
                        None,
                        Some("Name the consumer with up to 200 printable characters.".into()),
                    );
                }
                consumer = Some(value);
            }
            "snapshot" => {
                opts.snapshot = match value.as_str() {
                    "true" | "1" | "" => true,
                    "false" | "0" => false,
                    _ => {
                        return refuse(
                            StatusCode::BAD_REQUEST,
                            "22023",
                            format!("invalid value for parameter \"snapshot\": {value:?}"),
                            None,
                            Some("Use snapshot=true or snapshot=false.".into()),
                        );
                    }
                }
            }
            "as_of" => match value.parse::<Position>() {
                Ok(lsn) => opts.as_of = Some(lsn),
                Err(_) => {
                    return refuse(
                        StatusCode::BAD_REQUEST,
                        "22P02",
                        format!("invalid input syntax for type pg_lsn: {value:?}"),
                        None,
                        Some(
                            "A position looks like 0/16B3748: the ts of a subscription's line."
                                .into(),
                        ),
                    );
                }
            },
            other => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "22023",
                    format!("unknown parameter \"{other}\""),
                    None,
                    Some(
                        "GET /subscribe/{name} takes snapshot=true, as_of=POSITION, fields=a,b and consumer=NAME."
                            .into(),
                    ),
                );
            }
        }
    }
    match crate::subscribe::subscribe(&admin.pipeline, &name, opts).await {
        Ok(subscription) => {
            if let Some(fields) = &fields {
                let consumer = consumer.as_deref().unwrap_or("subscriber");
                if let Err(e) = admin.pipeline.declare_fields(&name, consumer, fields) {
                    return refuse(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        sqlstate(&e),
                        e.primary(),
                        None,
                        None,
                    );
                }
            }
            let mut stopping = admin.stopping.clone();
            let stopped = async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            };
            let lines = futures_util::StreamExt::take_until(
                futures_util::StreamExt::map(subscription, Ok::<Bytes, std::convert::Infallible>),
                stopped,
            );
            (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, "application/x-ndjson"),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                axum::body::Body::from_stream(lines),
            )
                .into_response()
        }
        Err(e) => {
            let (status, code) = match &e {
                SubscribeError::Pipeline(p @ PipelineError::UnknownObject { .. }) => {
                    (StatusCode::NOT_FOUND, sqlstate(p))
                }
                SubscribeError::Pipeline(p) => (StatusCode::INTERNAL_SERVER_ERROR, sqlstate(p)),
                other => (StatusCode::BAD_REQUEST, other.code()),
            };
            refuse(status, code, e.primary(), e.detail(), e.hint())
        }
    }
}

async fn method_not_allowed(request: axum::extract::Request) -> Response {
    plain_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "42601",
        format!(
            "{} is not a method of {}",
            request.method(),
            request.uri().path()
        ),
        Some(
            "The admin API has POST /sql and /coordinate, DELETE /contracts/{consumer}, and GET for the rest.",
        ),
    )
}

async fn not_found() -> Response {
    plain_error(
        StatusCode::NOT_FOUND,
        "42704",
        "no such endpoint".into(),
        Some(
            "The admin API has POST /sql, GET /status, GET /drift, GET /subscribe/{name}, GET /contracts and GET /metrics.",
        ),
    )
}

// ------------------------------------------------------------------- serve

/// Why [`serve`] stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The admin API's listener failed.
    #[error("admin API: {0}")]
    Io(#[from] std::io::Error),
    /// The pipeline could not run.
    #[error("{0}")]
    Pipeline(#[from] PipelineError),
}

/// Serves the admin API on `listener` and runs `pipeline` until `shutdown`
/// completes (or either stops on its own, which stops the other). Requests
/// in flight finish; the pipeline's tasks stop at a clean point.
pub async fn serve(
    pipeline: Arc<Pipeline>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    serve_with(pipeline, None, listener, shutdown).await
}

/// [`serve`], with `handler` running the statements that are not the
/// pipeline's and its [`StatementHandler::run`] beside the pipeline.
pub async fn serve_with(
    pipeline: Arc<Pipeline>,
    handler: Option<Arc<dyn StatementHandler>>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    crate::access::check_listen(pipeline.config())?;
    let (stop, stopped) = watch::channel(false);
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let forward = async {
        let mut rx = stopped.clone();
        tokio::select! {
            _ = shutdown => {}
            _ = rx.wait_for(|stop| *stop) => {}
        }
        let _ = stop.send(true);
    };
    let server = async {
        let result = axum::serve(
            listener,
            build_router(
                Arc::clone(&pipeline),
                handler.clone(),
                stopped.clone(),
                None,
            ),
        )
        .with_graceful_shutdown(signal(stopped.clone()))
        .await;
        let _ = stop.send(true);
        result
    };
    let run = async {
        let result = crate::absorb::run_with(&pipeline, signal(stopped.clone())).await;
        let _ = stop.send(true);
        result
    };
    let extension = async {
        let Some(handler) = &handler else {
            return Ok(());
        };
        let result = handler.run(&pipeline, stopped.clone()).await;
        if result.is_err() {
            let _ = stop.send(true);
        }
        result
    };
    let ((), served, ran, extended) = tokio::join!(forward, server, run, extension);
    served?;
    ran?;
    extended?;
    Ok(())
}
