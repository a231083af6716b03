use serde::Serialize;
use tokio_postgres::Client;

/// What `pg_stat_activity` says about one backend, trimmed for messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    pub pid: i32,
    pub application_name: String,
    pub state: String,
    /// The session's current or last query, as far as PostgreSQL keeps it
    /// (`track_activity_query_size`, 1 kB by default).
    pub query: String,
}

impl std::fmt::Display for SessionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let app = if self.application_name.is_empty() {
            "(no application_name)"
        } else {
            &self.application_name
        };
        write!(
            f,
            "pid {} ({app}, {}): {}",
            self.pid,
            self.state,
            self.query.replace(['\n', '\r'], " ")
        )
    }
}

/// Sessions for a message: `pid 12 (app, state): query; pid 13 ...`, or a
/// phrase saying none could be named.
pub fn describe_sessions(sessions: &[SessionInfo]) -> String {
    if sessions.is_empty() {
        "a session that had finished before it could be named".to_string()
    } else {
        sessions
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

const SESSION_COLUMNS: &str = "pid, coalesce(application_name, ''), coalesce(state, 'unknown'), \
     coalesce(query, '')";

/// The sessions that block backend `pid` right now (`pg_blocking_pids`).
pub async fn blocking_sessions(
    client: &Client,
    pid: i32,
) -> Result<Vec<SessionInfo>, tokio_postgres::Error> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM pg_stat_activity \
         WHERE pid = ANY(pg_blocking_pids($1)) ORDER BY pid"
    );
    rows_to_sessions(client.query(&sql, &[&pid]).await?)
}

/// The sessions with the given pids.
pub async fn sessions(
    client: &Client,
    pids: &[i32],
) -> Result<Vec<SessionInfo>, tokio_postgres::Error> {
    let sql =
        format!("SELECT {SESSION_COLUMNS} FROM pg_stat_activity WHERE pid = ANY($1) ORDER BY pid");
    rows_to_sessions(client.query(&sql, &[&pids]).await?)
}

fn rows_to_sessions(
    rows: Vec<tokio_postgres::Row>,
) -> Result<Vec<SessionInfo>, tokio_postgres::Error> {
    rows.into_iter()
        .map(|r| {
            Ok(SessionInfo {
                pid: r.try_get(0)?,
                application_name: r.try_get(1)?,
                state: r.try_get(2)?,
                query: r.try_get(3)?,
            })
        })
        .collect()
}
