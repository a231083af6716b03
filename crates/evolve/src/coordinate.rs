//! `evolve migrate apply --pipeline URL`: evolve-migrate's
//! [`Coordinator`] over the pipeline's admin API (`POST /coordinate`,
//! `POST /sql`, `GET /status`), with the admin token as `evolve sql`
//! sends it. evolve-migrate decides the steps; this only carries them.

use std::time::{Duration, Instant};

use evolve_migrate::coordinate::{Answer, Coordinator, CoordinatorFuture, Request};
use evolve_pipeline::admin::{ObjectReport, SqlResponse, StatusReport};
use hyper::{Method, StatusCode};

use crate::pipeline::AdminUrl;

/// How long one request may take (an APPLY returns within 30 s of the
/// swap's request; a wait is a loop of short requests).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// How often a wait looks at `/status`.
const POLL: Duration = Duration::from_millis(200);

/// The pipeline's admin API.
#[derive(Debug)]
pub struct HttpCoordinator {
    admin: AdminUrl,
}

impl HttpCoordinator {
    pub fn new(admin: AdminUrl) -> HttpCoordinator {
        HttpCoordinator { admin }
    }

    /// One request within [`REQUEST_TIMEOUT`], its errors as one line.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, hyper::body::Bytes), String> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.admin.request_json(method, path, body))
            .await
        {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(one_line(&e.to_string())),
            Err(_) => Err(format!(
                "the pipeline's admin API at {} did not answer {path} within {} s",
                self.admin.url,
                REQUEST_TIMEOUT.as_secs()
            )),
        }
    }

    async fn status(&self) -> Result<StatusReport, String> {
        let (status, body) = self.call(Method::GET, "/status", None).await?;
        if !status.is_success() {
            return Err(error_line(&body).unwrap_or_else(|| {
                one_line(&self.admin.unexpected("/status", status, &body).to_string())
            }));
        }
        serde_json::from_slice(&body)
            .map_err(|_| one_line(&self.admin.unexpected("/status", status, &body).to_string()))
    }
}

/// The first line of `text`.
fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

/// The admin API's error object in `body` as one line: message, detail,
/// hint.
fn error_line(body: &[u8]) -> Option<String> {
    let error = serde_json::from_slice::<SqlResponse>(body).ok()?.error?;
    let mut line = error.message;
    for part in [error.detail, error.hint].into_iter().flatten() {
        line.push_str(" (");
        line.push_str(&one_line(&part));
        line.push(')');
    }
    Some(line)
}

impl Coordinator for HttpCoordinator {
    fn target(&self) -> String {
        self.admin.url.clone()
    }

    fn affected<'a>(&'a self, request: &'a Request) -> CoordinatorFuture<'a, Answer> {
        Box::pin(async move {
            let body = serde_json::to_string(request).map_err(|e| e.to_string())?;
            let (status, body) = self.call(Method::POST, "/coordinate", Some(body)).await?;
            if status == StatusCode::NOT_FOUND {
                return Err(format!(
                    "the pipeline's admin API at {} has no /coordinate endpoint; upgrade evolve pipeline run to this release",
                    self.admin.url
                ));
            }
            if !status.is_success() {
                return Err(error_line(&body).unwrap_or_else(|| {
                    one_line(
                        &self
                            .admin
                            .unexpected("/coordinate", status, &body)
                            .to_string(),
                    )
                }));
            }
            serde_json::from_slice(&body).map_err(|_| {
                one_line(
                    &self
                        .admin
                        .unexpected("/coordinate", status, &body)
                        .to_string(),
                )
            })
        })
    }

    fn execute<'a>(&'a self, statement: &'a str) -> CoordinatorFuture<'a, ()> {
        Box::pin(async move {
            let body = serde_json::to_string(&serde_json::json!({ "sql": statement }))
                .map_err(|e| e.to_string())?;
            let (status, body) = self.call(Method::POST, "/sql", Some(body)).await?;
            if let Some(line) = error_line(&body) {
                return Err(line);
            }
            if !status.is_success() {
                return Err(one_line(
                    &self.admin.unexpected("/sql", status, &body).to_string(),
                ));
            }
            Ok(())
        })
    }

    fn wait_hydrated<'a>(&'a self, name: &'a str, timeout: Duration) -> CoordinatorFuture<'a, ()> {
        Box::pin(async move {
            let start = Instant::now();
            loop {
                let report = self.status().await?;
                let Some(replacement) = report
                    .objects
                    .iter()
                    .find(|o| o.name == name && o.replacement_for.is_some())
                else {
                    return Err(format!(
                        "replacement {name} is not in the pipeline's catalog (was it dropped?)"
                    ));
                };
                let table: Option<&ObjectReport> = replacement.table.as_ref().and_then(|t| {
                    report
                        .objects
                        .iter()
                        .find(|o| o.kind == "table" && &o.name == t)
                });
                if let Some(t) = table.filter(|t| t.state == "stalled") {
                    return Err(format!(
                        "table {} of replacement {name} is stalled: {}",
                        t.name,
                        t.error.as_deref().unwrap_or("no error recorded")
                    ));
                }
                if replacement.hydrated == Some(true) {
                    return Ok(());
                }
                if start.elapsed() >= timeout {
                    return Err(format!(
                        "replacement {name} was not hydrated within {} (it is {}, {} rows copied); raise --pipeline-timeout",
                        evolve_core::control::format_duration(timeout),
                        replacement.state,
                        replacement.rows_copied.unwrap_or_default()
                    ));
                }
                tokio::time::sleep(POLL.min(timeout.saturating_sub(start.elapsed()))).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use evolve_pipeline::coordinate as pipeline;

    /// The pipeline's answer and evolve-migrate's reading of it are one
    /// JSON contract.
    #[test]
    fn the_answer_reads_as_migrate_expects() {
        let answer = pipeline::CoordinateResponse {
            sources: vec!["src".into()],
            unverified: vec![pipeline::Unverified {
                source: "other".into(),
                error: "timeout".into(),
            }],
            tables: vec![pipeline::AffectedTable {
                table: "orders_v1".into(),
                source: "src".into(),
                schema: "public".into(),
                upstream_table: "orders".into(),
                state: "running".into(),
                error: None,
                columns: vec!["note".into()],
                exclude_columns: vec!["secret".into()],
                text_columns: vec![],
                interfaces: vec!["orders_json".into()],
                replacements: vec![],
                pending: vec![pipeline::ReplacementRef {
                    name: "r".into(),
                    target: "orders_json".into(),
                }],
                readers: vec![pipeline::ContractReader {
                    interface: "orders_json".into(),
                    kind: "view".into(),
                    consumer: "public.lines".into(),
                    via: "sink s (public.orders_json)".into(),
                    field: "note".into(),
                    cast: Some("text".into()),
                }],
                whole_document_readers: vec![],
                unread_sinks: vec!["k: refused".into()],
            }],
            names: vec!["orders_v1".into()],
        };
        let read: evolve_migrate::coordinate::Answer =
            serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap();
        assert_eq!(read.tables[0].table, "orders_v1");
        assert_eq!(read.tables[0].exclude_columns, ["secret"]);
        assert_eq!(read.tables[0].pending[0].name, "r");
        assert_eq!(read.unverified[0].source, "other");
        let r = &read.tables[0].readers[0];
        assert_eq!(
            (r.consumer.as_str(), r.field.as_str(), r.cast.as_deref()),
            ("public.lines", "note", Some("text"))
        );
        assert_eq!(read.tables[0].unread_sinks, ["k: refused"]);
        let request = evolve_migrate::coordinate::Request {
            upstream: evolve_migrate::coordinate::UpstreamIdentity {
                system_identifier: "1".into(),
                database: "shop".into(),
            },
            columns: vec![evolve_migrate::coordinate::AskedColumn {
                schema: "public".into(),
                table: "orders".into(),
                oid: Some(1),
                column: "note".into(),
                action: "drop".into(),
            }],
            existing: Vec::new(),
        };
        let sent: pipeline::CoordinateRequest =
            serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap();
        assert_eq!(sent.columns[0].oid, Some(1));
        assert_eq!(sent.upstream.database, "shop");
    }
}
