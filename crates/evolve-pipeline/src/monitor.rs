//! Monitoring's view of the upstream servers: one session per source,
//! shared by every reader of `GET /status`, `GET /metrics` and `GET
//! /drift`, so that however many clients scrape at once the upstream sees
//! at most one monitoring connection per source (besides the pipeline's
//! own replication and snapshot sessions).
//!
//! Readers of a source queue for its session. The positions
//! (`pg_current_wal_lsn()` and the slot's) are kept for [`POSITIONS_TTL`]
//! and served from memory to every reader in that time, an unanswered
//! read included, so a flood of scrapers costs the upstream one query a
//! second. A session that fails is dropped and opened again by the next
//! reader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evolve_pgoutput::Lsn;
use tokio_postgres::Client;

use crate::config::Connection;
use crate::error::{PipelineError, Result};
use crate::upstream;

/// How long the upstream positions of a source are served from memory.
pub const POSITIONS_TTL: Duration = Duration::from_secs(1);

/// A source's upstream WAL positions, as `/status` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Positions {
    /// `pg_current_wal_lsn()`.
    pub current: Lsn,
    /// The slot's `confirmed_flush_lsn`.
    pub confirmed: Option<Lsn>,
    /// WAL the slot retains, in bytes.
    pub retained_bytes: Option<i64>,
}

impl Positions {
    /// How far the source is behind its upstream, in WAL bytes, when it
    /// has applied everything up to `applied`. The slot's confirmed
    /// position counts as applied: it moves past WAL that holds nothing
    /// for this source (and starts where the slot was created), which the
    /// applied position does not.
    pub fn lag_bytes(&self, applied: crate::position::Position) -> u64 {
        let done = applied.lsn().max(self.confirmed.unwrap_or_default());
        self.current.0.saturating_sub(done.0)
    }
}

/// One source's monitoring: its session, and its positions as last read.
#[derive(Default)]
struct Source {
    session: tokio::sync::Mutex<Session>,
    /// Held while the positions are read, so that readers who find them
    /// stale wait for one reading instead of each making one.
    refreshing: tokio::sync::Mutex<()>,
    positions: Mutex<Option<(Instant, Option<Positions>)>>,
}

#[derive(Default)]
struct Session {
    client: Option<Client>,
}

/// The monitoring sessions, by source name. Cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct Monitor {
    sources: Arc<Mutex<HashMap<String, Arc<Source>>>>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Monitor {
    fn source(&self, source: &str) -> Arc<Source> {
        let mut map = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(source.to_string()).or_default())
    }

    /// Closes the sessions of sources not in `sources`.
    pub fn retain(&self, sources: &[&str]) {
        let mut map = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|name, _| sources.contains(&name.as_str()));
    }

    /// Runs `read` on source `source`'s monitoring session (opened on
    /// `connection`, named `connection_name`, when it has none), within
    /// `timeout`; a failure or a timeout closes the session.
    pub async fn with_session<T>(
        &self,
        source: &str,
        connection_name: &str,
        connection: &Connection,
        timeout: Duration,
        read: impl AsyncFnOnce(&Client) -> Result<T>,
    ) -> Result<T> {
        let shared = self.source(source);
        let mut session = shared.session.lock().await;
        run(&mut session, connection_name, connection, timeout, read).await
    }

    /// The upstream positions of source `source` (slot `slot`), at most
    /// [`POSITIONS_TTL`] old; `None` when the server did not answer within
    /// `timeout`. Readers that queue while one reads get its figures.
    pub async fn positions(
        &self,
        source: &str,
        connection_name: &str,
        connection: &Connection,
        slot: &str,
        timeout: Duration,
    ) -> Option<Positions> {
        let shared = self.source(source);
        let cached = || {
            let positions = shared.positions.lock().unwrap_or_else(|p| p.into_inner());
            positions.filter(|(at, _)| at.elapsed() < POSITIONS_TTL)
        };
        if let Some((_, positions)) = cached() {
            return positions;
        }
        let _refreshing = shared.refreshing.lock().await;
        if let Some((_, positions)) = cached() {
            return positions;
        }
        let mut session = shared.session.lock().await;
        let fresh = run(
            &mut session,
            connection_name,
            connection,
            timeout,
            async |client| {
                let row = client
                    .query_one("SELECT pg_current_wal_lsn()::text", &[])
                    .await
                    .map_err(|e| PipelineError::database("read pg_current_wal_lsn()", &e))?;
                let current: Lsn =
                    row.get::<_, String>(0)
                        .parse()
                        .map_err(|_| PipelineError::Replication {
                            source_name: source.to_string(),
                            message: "pg_current_wal_lsn() is not a position".into(),
                        })?;
                let slot = upstream::slot_status(client, slot).await?;
                Ok(Positions {
                    current,
                    confirmed: slot.as_ref().map(|s| s.confirmed_flush),
                    retained_bytes: slot.and_then(|s| s.retained_bytes),
                })
            },
        )
        .await
        .ok();
        *shared.positions.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), fresh));
        fresh
    }
}

/// [`Monitor::with_session`] on a locked session.
async fn run<T>(
    session: &mut Session,
    connection_name: &str,
    connection: &Connection,
    timeout: Duration,
    read: impl AsyncFnOnce(&Client) -> Result<T>,
) -> Result<T> {
    let attempt = async {
        if session.client.as_ref().is_none_or(Client::is_closed) {
            session.client = Some(upstream::connect(connection_name, connection).await?);
        }
        let client = session.client.as_ref().expect("opened above");
        read(client).await
    };
    let result = match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(PipelineError::Connect {
            connection: connection_name.to_string(),
            target: connection.redacted(),
            reason: format!("the server did not answer within {} s", timeout.as_secs()),
        }),
    };
    if result.is_err() {
        session.client = None;
    }
    result
}
