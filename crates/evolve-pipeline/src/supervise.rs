//! One object's task (a source's stream, a table's snapshot, a sink) run
//! until it is done or the pipeline stops, with the same rule for every
//! kind: a failure is either transient, retried with backoff (500 ms,
//! doubling to 10 s) while the object shows `retrying` with the error, or
//! permanent, when retrying would fail the same way (a slot that is gone,
//! a row no document can hold): the object shows `stalled` with the error
//! and what to do, and is not tried again until the pipeline restarts.
//! So `stalled` always asks for someone to act, and `retrying` passes by
//! itself once the cause does (a server back up, a broker reachable).
//!
//! An attempt watches `stop` itself, so that it ends cleanly (a source
//! commits its open group, a sink its open transaction). One that has not
//! ended [`STOP_GRACE`] after `stop` is dropped: the engine's restart waits
//! for every task, so a task that waits for another one without watching
//! `stop` would otherwise hold the whole pipeline still. Dropping is safe
//! for exactly-once: every attempt keeps its position in the same
//! transaction as its writes (the store's, a sink database's, a Kafka
//! transaction), and a transaction left open is rolled back with its
//! connection.

use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;

/// The first wait after a failure; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How long an attempt may take to end once `stop` turned true before it
/// is dropped (a clean stop takes milliseconds; a source's stream close is
/// bounded by 3 s).
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

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
    task: Task<'_>,
    ctx: &mut C,
    attempt: impl for<'c> FnMut(&'c mut C) -> BoxFuture<'c, Result<()>>,
    judge: impl FnMut(&mut C, &PipelineError) -> Verdict,
) {
    supervise_within(task, ctx, attempt, judge, STOP_GRACE).await;
}

/// [`supervise`], dropping an attempt `grace` after the stop.
async fn supervise_within<C: Send>(
    mut task: Task<'_>,
    ctx: &mut C,
    mut attempt: impl for<'c> FnMut(&'c mut C) -> BoxFuture<'c, Result<()>>,
    mut judge: impl FnMut(&mut C, &PipelineError) -> Verdict,
    grace: Duration,
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
        let outcome = {
            let run = attempt(ctx);
            let mut stop = task.stop.clone();
            tokio::select! {
                outcome = run => outcome,
                () = stopped_for(&mut stop, grace) => {
                    tracing::warn!(%kind, name, "{kind} did not end within {} ms of the pipeline's stop; dropped", grace.as_millis());
                    return;
                }
            }
        };
        let Err(e) = outcome else {
            return;
        };
        match judge(ctx, &e) {
            Verdict::Retry => {
                tracing::warn!(%kind, name, error = %e, "{kind} failed; retrying");
                task.status.set(kind, name, "retrying", Some(e.to_string()));
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

/// Returns `grace` after `stop` turned true (or its sender went away).
async fn stopped_for(stop: &mut watch::Receiver<bool>, grace: Duration) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    tokio::time::sleep(grace).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    const GRACE: Duration = Duration::from_millis(400);

    /// Lets `supervised` run, checks it is still running, sends the stop,
    /// and returns how long it took to end after that.
    async fn time_to_stop(
        supervised: tokio::task::JoinHandle<()>,
        stop_tx: watch::Sender<bool>,
    ) -> Duration {
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!supervised.is_finished(), "the attempt runs until the stop");
        let stopped_at = tokio::time::Instant::now();
        stop_tx.send(true).unwrap();
        supervised.await.unwrap();
        stopped_at.elapsed()
    }

    /// An attempt that ignores `stop` (it waits for something that never
    /// comes) is dropped the grace after the stop, so the engine's
    /// restart, which waits for every task, goes on.
    #[tokio::test]
    async fn an_attempt_that_ignores_the_stop_is_dropped_after_the_grace() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let status = StatusBoard::default();
        let attempts = Arc::new(AtomicU32::new(0));
        let dropped = Arc::new(AtomicU32::new(0));
        struct OnDrop(Arc<AtomicU32>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (a, d) = (attempts.clone(), dropped.clone());
        let supervised = tokio::spawn(async move {
            let task = Task {
                kind: ObjectKind::Sink,
                name: "s",
                status: &status,
                stop: stop_rx,
                starting: None,
            };
            let mut ctx = ();
            supervise_within(
                task,
                &mut ctx,
                |_| {
                    a.fetch_add(1, Ordering::SeqCst);
                    let guard = OnDrop(d.clone());
                    Box::pin(async move {
                        let _guard = guard;
                        std::future::pending::<()>().await;
                        Ok(())
                    })
                },
                |_, _| Verdict::Retry,
                GRACE,
            )
            .await;
        });
        let waited = time_to_stop(supervised, stop_tx).await;
        assert!(
            waited >= GRACE && waited < GRACE + Duration::from_secs(2),
            "supervise returned {waited:?} after the stop"
        );
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "the attempt was dropped");
    }

    /// An attempt that ends by itself when `stop` turns true is not cut
    /// short: supervise returns as soon as it has ended.
    #[tokio::test]
    async fn an_attempt_that_watches_the_stop_ends_without_the_grace() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let status = StatusBoard::default();
        let supervised = tokio::spawn(async move {
            let task = Task {
                kind: ObjectKind::Source,
                name: "s",
                status: &status,
                stop: stop_rx.clone(),
                starting: None,
            };
            let mut ctx = stop_rx;
            supervise_within(
                task,
                &mut ctx,
                |stop| {
                    Box::pin(async move {
                        let _ = stop.changed().await;
                        // The clean stop's own work.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok(())
                    })
                },
                |_, _| Verdict::Retry,
                GRACE,
            )
            .await;
        });
        let waited = time_to_stop(supervised, stop_tx).await;
        assert!(
            waited >= Duration::from_millis(100) && waited < GRACE,
            "supervise returned {waited:?} after the stop"
        );
    }

    /// Runs `supervise` on a task of its own for object `name`, each
    /// attempt failing as `fails` says for its number (0, 1, ...), with
    /// `judge`'s verdict; the attempts that do not fail run until aborted.
    fn spawn_failing(
        status: &Arc<StatusBoard>,
        name: &'static str,
        fails: fn(u32) -> bool,
        judge: fn(&PipelineError) -> Verdict,
    ) -> (tokio::task::JoinHandle<()>, Arc<AtomicU32>) {
        let attempts = Arc::new(AtomicU32::new(0));
        let (board, a) = (status.clone(), attempts.clone());
        let supervised = tokio::spawn(async move {
            let (_stop_tx, stop_rx) = watch::channel(false);
            let task = Task {
                kind: ObjectKind::Sink,
                name,
                status: &board,
                stop: stop_rx,
                starting: Some("starting"),
            };
            supervise_within(
                task,
                &mut (),
                |_| {
                    let n = a.fetch_add(1, Ordering::SeqCst);
                    Box::pin(async move {
                        if fails(n) {
                            Err(PipelineError::Replication {
                                source_name: "s".into(),
                                message: "connection refused".into(),
                            })
                        } else {
                            std::future::pending().await
                        }
                    })
                },
                |_, e| judge(e),
                GRACE,
            )
            .await;
        });
        (supervised, attempts)
    }

    /// A failure that is retried shows `retrying` with its error until an
    /// attempt succeeds; one that is not shows `stalled` with the way out,
    /// and no attempt follows.
    #[tokio::test]
    async fn retried_failures_show_retrying_and_permanent_ones_stalled() {
        let status = Arc::new(StatusBoard::default());
        let (supervised, attempts) =
            spawn_failing(&status, "flaky", |n| n == 0, |_| Verdict::Retry);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let shown = status.get(ObjectKind::Sink, "flaky").unwrap();
        assert_eq!(shown.state, "retrying");
        assert!(shown.error.unwrap().contains("connection refused"));
        // After the backoff (500 ms), the second attempt runs.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        assert_eq!(
            status.get(ObjectKind::Sink, "flaky").unwrap().state,
            "starting"
        );
        supervised.abort();

        let (supervised, attempts) = spawn_failing(
            &status,
            "gone",
            |_| true,
            |e| Verdict::Stop {
                shown: format!("{e}\nnot retried"),
            },
        );
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let shown = status.get(ObjectKind::Sink, "gone").unwrap();
        assert_eq!(shown.state, "stalled");
        assert!(shown.error.unwrap().ends_with("not retried"));
        assert_eq!(attempts.load(Ordering::SeqCst), 1, "not tried again");
        supervised.abort();
    }
}
