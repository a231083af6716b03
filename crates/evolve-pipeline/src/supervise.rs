//! One object's task (a source's stream, a table's snapshot, a sink) run
//! until it is done or the pipeline stops, with the same rule for every
//! kind: a failure is either transient, retried with backoff (500 ms,
//! doubling to 10 s) while the object shows `stalled` with the error, or
//! permanent, when retrying would fail the same way (a slot that is gone,
//! a row no document can hold): the object shows `stalled` with the error
//! and what to do, and is not tried again until the pipeline restarts.

use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;

/// The first wait after a failure; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What a failed attempt means.
pub(crate) enum Verdict {
    /// Try again after the backoff.
    Retry,
    /// Do not try again; `shown` is the object's error (the failure and
    /// the way out).
    Stop { shown: String },
}

/// Which object a task runs, and where it reports.
pub(crate) struct Task<'a> {
    pub kind: ObjectKind,
    pub name: &'a str,
    pub status: &'a StatusBoard,
    pub stop: watch::Receiver<bool>,
    /// The state shown before each attempt, if any (e.g. `starting`).
    pub starting: Option<&'static str>,
}

/// Runs `attempt` on `ctx` until it returns `Ok`, `judge` says a failure
/// is permanent, or `stop` turns true (checked before each attempt and
/// during the backoff; an attempt itself watches `stop` as it needs to,
/// so that it can end cleanly). The attempt's future is boxed: one
/// allocation per attempt, and a future the compiler can see is `Send`.
pub(crate) async fn supervise<C: Send>(
    mut task: Task<'_>,
    ctx: &mut C,
    mut attempt: impl for<'c> FnMut(&'c mut C) -> BoxFuture<'c, Result<()>>,
    mut judge: impl FnMut(&mut C, &PipelineError) -> Verdict,
) {
    let (kind, name) = (task.kind, task.name);
    let mut backoff = FIRST_BACKOFF;
    loop {
        if *task.stop.borrow() {
            return;
        }
        if let Some(state) = task.starting {
            task.status.set(kind, name, state, None);
        }
        let Err(e) = attempt(ctx).await else {
            return;
        };
        match judge(ctx, &e) {
            Verdict::Retry => {
                tracing::warn!(%kind, name, error = %e, "{kind} failed; retrying");
                task.status.set(kind, name, "stalled", Some(e.to_string()));
            }
            Verdict::Stop { shown } => {
                tracing::error!(%kind, name, error = %e, "{kind} stopped; it is not retried until the pipeline restarts");
                task.status.set(kind, name, "stalled", Some(shown));
                let _ = task.stop.changed().await;
                return;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = task.stop.changed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
