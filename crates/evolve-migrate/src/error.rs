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
    /// An entry of the migrations directory that evolve refuses to read.
    #[error("{path} {reason}")]
    Entry { path: PathBuf, reason: String },
    #[error(
        "migrations directory {dir} holds more than {limit} entries; point --dir at the migrations themselves"
    )]
    TooManyEntries { dir: PathBuf, limit: usize },
    #[error("{0}")]
    Name(String),
    #[error("migration {script}: {reason}")]
    Script { script: String, reason: String },
    #[error(
        "migration {script}: line {line}: placeholder {placeholder} has no value, so nothing was applied; give it one (--placeholder NAME=VALUE, flyway.placeholders.NAME or FLYWAY_PLACEHOLDERS_NAME), or turn replacement off (--no-placeholder-replacement)"
    )]
    Placeholder {
        script: String,
        line: u32,
        placeholder: String,
    },
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
    #[error(
        "callbacks {first} and {second} have the same name, and Flyway refuses that; rename or remove one of them"
    )]
    DuplicateCallback { first: String, second: String },
    #[error("callback {script} failed at line {line}, column {column}: {error}\n  {outcome}")]
    Callback {
        script: String,
        line: u32,
        column: u32,
        error: String,
        outcome: String,
    },
    #[error(transparent)]
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
    /// Flyway's `lockRetryCount` ran out.
    #[error(
        "another migration run still holds the migration lock on {table}{} after {waited_ms} ms of waiting, the most lockRetryCount allows (one second a retry); wait for it to finish, or raise lockRetryCount (-1 waits without limit)",
        holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    LockWaitLimit {
        table: String,
        holder: Option<SessionInfo>,
        waited_ms: u64,
    },
    /// Flyway's `connectRetries` ran out.
    #[error("{error} (tried {attempts} times over {waited_s} s, as connectRetries allows)")]
    ConnectRetries {
        attempts: u32,
        waited_s: u64,
        error: PgError,
    },
    /// Flyway's `initSql` failed on a new connection.
    #[error("initSql {reason}; fix initSql (evolve runs it on every connection it opens)")]
    InitSql { reason: String },
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
        crate::describe_blockers(.blockers, .role)
    )]
    LockTimeout {
        script: String,
        line: u32,
        attempts: u32,
        lock_timeout_ms: u64,
        blockers: Vec<SessionInfo>,
        /// The role evolve migrates as.
        role: String,
    },
    #[error(
        "migration {script}: INVALID index {index} is still being built by {} after {waited_s} s of waiting, so evolve leaves it alone; let that build finish (or stop it with SELECT pg_cancel_backend(pid)) and run 'evolve migrate apply' again",
        evolve_pg::describe_sessions(.builders)
    )]
    IndexBuilding {
        script: String,
        index: String,
        waited_s: u64,
        builders: Vec<SessionInfo>,
    },
    /// `--pipeline`: a step of the coordination failed; `message` says
    /// whether the file ran, which table and step, and the way out.
    #[error("migration {script} {message}")]
    Coordination { script: String, message: String },
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
