use evolve_pg::PgError;

/// Everything a backfill or a rewrite can refuse or fail with: one line
/// that names the job or table, what went wrong and the way out (the
/// server's detail and hint may follow on indented lines).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackfillError {
    /// Bad input, found before anything ran.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Migrate(#[from] evolve_migrate::MigrateError),
    #[error(
        "backfill {job} is already running ({holder}); wait for it to finish, or stop it with 'evolve backfill cancel {job}'"
    )]
    Running { job: String, holder: String },
    /// `way_out` is the last line: what to do before running it again
    /// (it depends on why the batch failed).
    #[error(
        "backfill {job} stopped: the batch of {table} keys {range} failed and was rolled back: {error}\n  {way_out}"
    )]
    Batch {
        job: String,
        table: String,
        range: String,
        error: String,
        way_out: String,
    },
    #[error(
        "{what} could not take its locks within {lock_timeout_ms} ms in {attempts} attempts; retry when the sessions holding locks on {table} are done, or raise --lock-timeout/--lock-retries"
    )]
    LockTimeout {
        what: String,
        table: String,
        attempts: u32,
        lock_timeout_ms: u64,
    },
    /// The last attempt `--lock-retries` allows was rolled back by a
    /// deadlock or a serialization failure (`cause`).
    #[error(
        "{what} gave up: its last attempt (number {attempts}, as --lock-retries allows) was rolled back by a {cause}; retry when the sessions writing to {table} are done, or raise --lock-retries/--lock-retry-delay"
    )]
    Conflict {
        what: String,
        table: String,
        attempts: u32,
        cause: String,
    },
    #[error(
        "backfill {job} walked the whole table but {remaining} rows of {table} still need the change (written while it ran?); run it again, or make the writers set the column too"
    )]
    Unverified {
        job: String,
        table: String,
        remaining: u64,
    },
    #[error(
        "backfill {job} was cancelled after {rows_done} rows; a new run starts it from the beginning"
    )]
    Cancelled { job: String, rows_done: u64 },
    #[error("rewrite of {table}: {reason}")]
    Rewrite { table: String, reason: String },
}

impl From<tokio_postgres::Error> for BackfillError {
    fn from(e: tokio_postgres::Error) -> Self {
        BackfillError::Pg(PgError::Query(e))
    }
}
