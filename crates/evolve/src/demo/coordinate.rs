//! The tour's [`Coordinator`]: evolve-migrate's steps run on the tour's
//! in-process pipeline (the same calls the admin API's `POST /coordinate`,
//! `POST /sql` and `GET /status` make), each statement printed as the
//! tour prints its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_migrate::coordinate::{Answer, Coordinator, CoordinatorFuture, Request};
use evolve_pipeline::{Pipeline, TableState, admin};

/// Between two looks at a replacement being hydrated.
const POLL: Duration = Duration::from_millis(50);

pub struct InProcess {
    pub pipeline: Arc<Pipeline>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InProcess")
    }
}

/// `value` as another type of the same JSON shape.
fn reshape<T: serde::de::DeserializeOwned>(value: &impl serde::Serialize) -> Result<T, String> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .map_err(|e| e.to_string())
}

impl Coordinator for InProcess {
    fn target(&self) -> String {
        "the tour's pipeline".into()
    }

    fn affected<'a>(&'a self, request: &'a Request) -> CoordinatorFuture<'a, Answer> {
        Box::pin(async move {
            let request: evolve_pipeline::coordinate::CoordinateRequest = reshape(request)?;
            let answer = evolve_pipeline::coordinate::coordinate(&self.pipeline, &request)
                .await
                .map_err(|e| e.primary())?;
            reshape(&answer)
        })
    }

    fn execute<'a>(&'a self, statement: &'a str) -> CoordinatorFuture<'a, ()> {
        Box::pin(async move {
            let _ = super::stage::say(format!("evolve=> {statement};"));
            let response = admin::execute(&self.pipeline, statement).await;
            match response.error {
                None => {
                    for r in &response.results {
                        let _ = super::stage::say(&r.status);
                    }
                    Ok(())
                }
                Some(e) => Err(e.message),
            }
        })
    }

    fn wait_hydrated<'a>(&'a self, name: &'a str, timeout: Duration) -> CoordinatorFuture<'a, ()> {
        Box::pin(async move {
            let start = Instant::now();
            loop {
                let replacements = self.pipeline.replacements().map_err(|e| e.primary())?;
                let Some(r) = replacements.iter().find(|r| r.name == name) else {
                    return Err(format!("replacement {name} is not in the catalog"));
                };
                let tables = self.pipeline.tables().map_err(|e| e.primary())?;
                match tables.iter().find(|t| t.name == r.table) {
                    Some(t) if t.state == TableState::Running => {
                        let _ = super::stage::say(format!(
                            "  {} hydrated while the load went on: {} rows copied ({:.1} s)",
                            t.name,
                            t.rows_copied,
                            start.elapsed().as_secs_f64()
                        ));
                        return Ok(());
                    }
                    Some(t) if t.state == TableState::Stalled => {
                        return Err(format!(
                            "table {} is stalled: {}",
                            t.name,
                            t.error.as_deref().unwrap_or_default()
                        ));
                    }
                    _ => {}
                }
                if start.elapsed() >= timeout {
                    return Err(format!("replacement {name} was not hydrated in time"));
                }
                tokio::time::sleep(POLL).await;
            }
        })
    }
}
