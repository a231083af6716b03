use std::path::PathBuf;

use evolve_pg::{PgError, SessionInfo};

/// Everything `evolve migrate` can refuse or fail with. Each message is one
/// line that names the file or object, what is wrong and the way out; some
/// variants carry further indented lines (the server's detail and hint).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    #[error("migrations directory {dir} cannot be read: {reason}; create it or pass --dir")]
    Dir { dir: PathBuf, reason: String },
    #[error("migration file {path} cannot be read: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{0}")]
    Name(String),
    #[error("migration {script}: {reason}")]
    Script { script: String, reason: String },
    #[error(
        "migrations {first} and {second} both have version {version}; give one of them another version"
    )]
    DuplicateVersion {
        version: String,
        first: String,
        second: String,
    },
    #[error(
        "repeatable migrations {first} and {second} both have description {description:?}; rename one of them"
    )]
    DuplicateRepeatable {
        description: String,
        first: String,
        second: String,
    },
    #[error("{0}")]
    Pg(#[from] PgError),
    #[error("history table {table}: {reason}")]
    History { table: String, reason: String },
    #[error(
        "history table {table} has the wrong shape: {reason}; it is not an evolve or Flyway history table, choose another with --history-table"
    )]
    HistoryShape { table: String, reason: String },
    /// Validation found problems; each is one line.
    #[error("{}", .problems.join("\n"))]
    Invalid { problems: Vec<String> },
    #[error(
        "another migration run holds the migration lock on {table}{}; wait for it to finish or retry later",
        holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    Locked {
        table: String,
        holder: Option<SessionInfo>,
    },
    #[error("migration {script} failed at line {line}, column {column}: {error}\n  {outcome}")]
    Statement {
        script: String,
        line: u32,
        column: u32,
        error: String,
        outcome: String,
    },
    #[error(
        "migration {script} could not take its locks within {lock_timeout_ms} ms after {attempts} attempts (line {line}); blocked by {}; retry when it has finished, or raise --lock-timeout/--lock-retries",
        evolve_pg::describe_sessions(.blockers)
    )]
    LockTimeout {
        script: String,
        line: u32,
        attempts: u32,
        lock_timeout_ms: u64,
        blockers: Vec<SessionInfo>,
    },
    #[error("{0}")]
    Usage(String),
    #[error("cannot create {path}: {reason}")]
    Create { path: PathBuf, reason: String },
}

impl From<tokio_postgres::Error> for MigrateError {
    fn from(e: tokio_postgres::Error) -> Self {
        MigrateError::Pg(PgError::Query(e))
    }
}
