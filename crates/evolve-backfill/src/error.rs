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
    #[error(
        "backfill {job} stopped: the batch of {table} keys {range} failed and was rolled back: {error}\n  fix the expression or those rows, then run it again to resume at that batch"
    )]
    Batch {
        job: String,
        table: String,
        range: String,
        error: String,
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
