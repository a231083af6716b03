//! The append-only log the registry's state is replayed from.
//!
//! Each record sits at an offset (1, 2, ...). An append names the offset
//! the writer last saw and succeeds only if nobody appended since: two
//! instances that register at once cannot both win, the loser catches up
//! and decides again (and then finds the schema already registered). That
//! is what makes "concurrent registrations of the same schema yield one id
//! and one version" hold across processes.
//!
//! The registry reads forward only: it asks for the records after the
//! offset of the last one it applied, which never decreases. A log may
//! rely on that and forget records once read past (the Kafka log,
//! [`crate::kafka`], does: it numbers the records itself).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio_postgres::Client;

use crate::kafka::{KafkaLog, KafkaSpec};
use crate::record::Record;

/// A store that failed: what, where (never a password), and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// The log behind a registry.
pub trait Log: Send + Sync + 'static {
    /// Every record after `offset`, in order, with its offset.
    fn read_after(
        &self,
        offset: i64,
    ) -> impl Future<Output = Result<Vec<(i64, Record)>, StoreError>> + Send;

    /// Appends `records` at `after + 1, after + 2, ...` if the log still
    /// ends at `after`, durably and all or nothing. `Ok(false)` when
    /// another writer appended first.
    fn append(
        &self,
        after: i64,
        records: &[Record],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Where the log is, for messages (no secrets).
    fn describe(&self) -> String;
}

/// Where a registry keeps its log, as `--storage` spells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageSpec {
    Sqlite(PathBuf),
    Postgres(String),
    /// `kafka://BROKERS[/TOPIC][?OPTIONS]`: a `_schemas` topic.
    Kafka(KafkaSpec),
}

impl std::str::FromStr for StorageSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<StorageSpec, String> {
        if let Some(path) = s.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err("--storage sqlite: needs a file path, e.g. sqlite:registry.db".into());
            }
            Ok(StorageSpec::Sqlite(PathBuf::from(path)))
        } else if let Some(url) = s.strip_prefix("postgres:") {
            let url = if url.starts_with("//") {
                format!("postgres:{url}")
            } else {
                url.to_owned()
            };
            Ok(StorageSpec::Postgres(url))
        } else if s.starts_with("postgresql://") {
            Ok(StorageSpec::Postgres(s.to_owned()))
        } else if s.starts_with("kafka://") {
            KafkaSpec::parse(s).map(StorageSpec::Kafka)
        } else {
            Err(format!(
                "storage {:?} is not understood; use sqlite:PATH, postgres://user@host/db or kafka://host:port/_schemas",
                evolve_pg::redact_url(s)
            ))
        }
    }
}

/// Any store, so that a registry can be chosen at run time.
pub enum Storage {
    Sqlite(SqliteLog),
    Postgres(PostgresLog),
    Kafka(Box<KafkaLog>),
}

impl Storage {
    pub async fn open(spec: &StorageSpec) -> Result<Storage, StoreError> {
        Ok(match spec {
            StorageSpec::Sqlite(path) => Storage::Sqlite(SqliteLog::open(path)?),
            StorageSpec::Postgres(url) => Storage::Postgres(PostgresLog::open(url).await?),
            StorageSpec::Kafka(spec) => Storage::Kafka(Box::new(KafkaLog::open(spec).await?)),
        })
    }
}

impl Log for Storage {
    async fn read_after(&self, offset: i64) -> Result<Vec<(i64, Record)>, StoreError> {
        match self {
            Storage::Sqlite(l) => l.read_after(offset).await,
            Storage::Postgres(l) => l.read_after(offset).await,
            Storage::Kafka(l) => l.read_after(offset).await,
        }
    }

    async fn append(&self, after: i64, records: &[Record]) -> Result<bool, StoreError> {
        match self {
            Storage::Sqlite(l) => l.append(after, records).await,
            Storage::Postgres(l) => l.append(after, records).await,
            Storage::Kafka(l) => l.append(after, records).await,
        }
    }

    fn describe(&self) -> String {
        match self {
            Storage::Sqlite(l) => l.describe(),
            Storage::Postgres(l) => l.describe(),
            Storage::Kafka(l) => l.describe(),
        }
    }
}

fn decode_rows(rows: Vec<(i64, String, Option<String>)>) -> Result<Vec<(i64, Record)>, StoreError> {
    rows.into_iter()
        .map(|(offset, key, value)| {
            Record::from_json(&key, value.as_deref())
                .map(|r| (offset, r))
                .map_err(|e| {
                    StoreError(format!("log record at offset {offset} is unreadable: {e}"))
                })
        })
        .collect()
}

// ---- SQLite ---------------------------------------------------------------

/// The log in an SQLite file (WAL journal, synchronous=FULL: an append is
/// on disk when it returns). Several processes may share the file.
pub struct SqliteLog {
    path: PathBuf,
    connection: Arc<Mutex<rusqlite::Connection>>,
}

const SQLITE_SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS schemas_log (
        log_offset INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        value TEXT
    );";

impl SqliteLog {
    pub fn open(path: &Path) -> Result<SqliteLog, StoreError> {
        let fail = |e: rusqlite::Error| StoreError(sqlite_open_error(path, &e));
        let connection = rusqlite::Connection::open(path).map_err(fail)?;
        connection
            .busy_timeout(std::time::Duration::from_secs(10))
            .map_err(fail)?;
        connection
            .execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
            .map_err(fail)?;
        connection.execute_batch(SQLITE_SCHEMA).map_err(fail)?;
        Ok(SqliteLog {
            path: path.to_owned(),
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut rusqlite::Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let connection = Arc::clone(&self.connection);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = connection
                .lock()
                .map_err(|_| StoreError("registry store connection is poisoned".into()))?;
            work(&mut guard)
                .map_err(|e| StoreError(format!("registry store {}: {e}", path.display())))
        })
        .await
        .map_err(|e| StoreError(format!("registry store task failed: {e}")))?
    }
}

impl Log for SqliteLog {
    async fn read_after(&self, offset: i64) -> Result<Vec<(i64, Record)>, StoreError> {
        let rows = self
            .blocking(move |c| {
                let mut statement = c.prepare_cached(
                    "SELECT log_offset, key, value FROM schemas_log WHERE log_offset > ?1 ORDER BY log_offset",
                )?;
                let rows = statement
                    .query_map([offset], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?;
        decode_rows(rows)
    }

    async fn append(&self, after: i64, records: &[Record]) -> Result<bool, StoreError> {
        let rows: Vec<(String, Option<String>)> = records
            .iter()
            .map(|r| (r.key.to_json(), r.value_json()))
            .collect();
        self.blocking(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let end: i64 = tx.query_row(
                "SELECT coalesce(max(log_offset), 0) FROM schemas_log",
                [],
                |r| r.get(0),
            )?;
            if end != after {
                return Ok(false);
            }
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO schemas_log (log_offset, key, value) VALUES (?1, ?2, ?3)",
                )?;
                for (i, (key, value)) in rows.iter().enumerate() {
                    insert.execute(rusqlite::params![after + 1 + i as i64, key, value])?;
                }
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }
}

/// Why an SQLite store cannot be opened, naming the file once (rusqlite
/// appends the path to SQLite's "unable to open database file") and the
/// way out.
fn sqlite_open_error(path: &Path, e: &rusqlite::Error) -> String {
    let shown = e.to_string();
    let reason = shown
        .strip_suffix(&format!(": {}", path.display()))
        .unwrap_or(&shown);
    let hint = match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => "give another --storage sqlite:PATH",
        Some(rusqlite::ErrorCode::ReadOnly) => "check that the file is writable",
        _ => "check that the directory exists and is writable",
    };
    format!("registry store sqlite:{}: {reason}; {hint}", path.display())
}

// ---- PostgreSQL -------------------------------------------------------------

/// The log in a PostgreSQL table, `evolve_registry_log`, so that several
/// registry instances behind a load balancer share one store. An append is
/// one INSERT of every record at its offset; the primary key turns a
/// concurrent append at the same offset into a conflict.
pub struct PostgresLog {
    target: String,
    url: String,
    /// The session; replaced by a new one when the server closed it.
    client: Mutex<Arc<Client>>,
    /// Held while a new session is opened, so one caller opens it.
    reconnecting: tokio::sync::Mutex<()>,
}

impl PostgresLog {
    pub async fn open(url: &str) -> Result<PostgresLog, StoreError> {
        let target = evolve_pg::redact_url(url);
        let client = pg_session(url, &target).await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS evolve_registry_log (
                     log_offset bigint PRIMARY KEY,
                     key text NOT NULL,
                     value text
                 )",
            )
            .await
            .map_err(|e| pg_error(&target, e))?;
        Ok(PostgresLog {
            target,
            url: url.to_string(),
            client: Mutex::new(Arc::new(client)),
            reconnecting: tokio::sync::Mutex::new(()),
        })
    }

    /// The session, a new one when the server closed the last (a restart,
    /// a failover, an administrator's `pg_terminate_backend`).
    async fn session(&self) -> Result<Arc<Client>, StoreError> {
        let current = Arc::clone(&self.client.lock().unwrap_or_else(|p| p.into_inner()));
        if !current.is_closed() {
            return Ok(current);
        }
        let _one = self.reconnecting.lock().await;
        let current = Arc::clone(&self.client.lock().unwrap_or_else(|p| p.into_inner()));
        if !current.is_closed() {
            return Ok(current);
        }
        let fresh = Arc::new(pg_session(&self.url, &self.target).await?);
        *self.client.lock().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&fresh);
        tracing::warn!(store = %self.target, "the registry store's session was closed; reconnected");
        Ok(fresh)
    }
}

async fn pg_session(url: &str, target: &str) -> Result<Client, StoreError> {
    evolve_pg::connect(url, "evolve registry")
        .await
        .map_err(|e| StoreError(pg_connect_error(target, &e)))
}

/// Why the PostgreSQL store cannot be reached: once, on one line, naming
/// the store (without its password) and `--storage`, the flag that names it.
fn pg_connect_error(target: &str, e: &evolve_pg::PgError) -> String {
    let reason = match e {
        // The way out follows the server's refusal: a wrong password
        // names the password, an unknown database its name.
        evolve_pg::PgError::Connect { reason, .. } => format!(
            "could not connect: {reason}; {}",
            evolve_pg::connect_way_out(reason, "--storage")
        ),
        evolve_pg::PgError::Tls { reason, .. } => format!("could not connect: {reason}"),
        // The message names the connection string itself.
        other => return format!("registry store: {}", one_line(&other.to_string())),
    };
    format!("registry store {target}: {}", one_line(&reason))
}

/// A failed statement on the PostgreSQL store.
fn pg_error(target: &str, e: tokio_postgres::Error) -> StoreError {
    StoreError(format!(
        "registry store {target}: {}",
        one_line(&evolve_pg::PgError::from(e).to_string())
    ))
}

/// A PostgreSQL error (detail and hint lines included) on one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

impl Log for PostgresLog {
    async fn read_after(&self, offset: i64) -> Result<Vec<(i64, Record)>, StoreError> {
        let read = async |client: &Client| {
            client
                .query(
                    "SELECT log_offset, key, value FROM evolve_registry_log WHERE log_offset > $1 ORDER BY log_offset",
                    &[&offset],
                )
                .await
        };
        let client = self.session().await?;
        let rows = match read(&client).await {
            // The session was lost under the read: once more on a new one.
            Err(_) if client.is_closed() => read(&*self.session().await?).await,
            other => other,
        }
        .map_err(|e| pg_error(&self.target, e))?;
        decode_rows(
            rows.into_iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect(),
        )
    }

    async fn append(&self, after: i64, records: &[Record]) -> Result<bool, StoreError> {
        let offsets: Vec<i64> = (0..records.len() as i64).map(|i| after + 1 + i).collect();
        let keys: Vec<String> = records.iter().map(|r| r.key.to_json()).collect();
        let values: Vec<Option<String>> = records.iter().map(Record::value_json).collect();
        // The offset just after `after` must be free and `after` must exist
        // (or be 0): a writer that missed records cannot append past them.
        let insert = async |client: &Client| {
            client
                .execute(
                    "INSERT INTO evolve_registry_log (log_offset, key, value)
                     SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])
                     WHERE $4::bigint = (SELECT coalesce(max(log_offset), 0) FROM evolve_registry_log)",
                    &[&offsets, &keys, &values, &after],
                )
                .await
        };
        let client = self.session().await?;
        // A session lost under the insert may or may not have committed it:
        // once more on a new one, which appends nothing if it had (the log
        // no longer ends at `after`), and the caller reads it back.
        let result = match insert(&client).await {
            Err(_) if client.is_closed() => insert(&*self.session().await?).await,
            other => other,
        };
        match result {
            Ok(n) => Ok(n as usize == records.len()),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                Ok(false)
            }
            Err(e) => Err(pg_error(&self.target, e)),
        }
    }

    fn describe(&self) -> String {
        self.target.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::pg_connect_error;

    fn refused(reason: &str) -> String {
        let e = evolve_pg::PgError::Connect {
            target: "postgres://registry@db:5432/registry".into(),
            reason: reason.into(),
            given: "--database-url",
        };
        pg_connect_error("postgres://registry@db:5432/registry", &e)
    }

    #[test]
    fn a_refused_connection_names_the_way_out_the_refusal_calls_for() {
        let password = refused("ERROR 28P01: password authentication failed for user \"registry\"");
        assert!(
            password.contains("check the password: the one in --storage"),
            "{password}"
        );
        assert!(!password.contains("server is running"), "{password}");
        let database = refused("FATAL 3D000: database \"registry\" does not exist");
        assert!(
            database.contains("check the database name in --storage"),
            "{database}"
        );
        let down = refused("Connection refused (os error 111)");
        assert!(
            down.ends_with("; check --storage and that the server is running"),
            "{down}"
        );
        assert!(
            down.starts_with(
                "registry store postgres://registry@db:5432/registry: could not connect:"
            ),
            "{down}"
        );
    }
}
