//! Backfills and online rewrites for PostgreSQL.
//!
//! A **backfill** (`evolve backfill`) sets columns of every row of a table
//! to an expression, in keyset batches along the primary key: each batch
//! starts after the last key the previous one saw (any key type, composite
//! and sparse keys alike), runs as one transaction under `lock_timeout`
//! (retried with backoff when it expires), and changes only rows the
//! idempotence predicate selects (`column IS DISTINCT FROM expression`, so
//! a batch run twice changes nothing the second time). The batch's
//! progress (last key, rows, batches) is written to `evolve_backfill_jobs`
//! in the same transaction, so a run killed at any moment resumes at the
//! next batch. A session advisory lock per job keeps two runs of one job
//! apart. A batch rolled back by a deadlock or a serialization failure is
//! retried like one whose `lock_timeout` expired. Before each batch the throttle reads `pg_stat_replication` and
//! `pg_replication_slots` and waits while a replica lags or a logical slot
//! retains too much WAL; the batch size adapts to a target batch time. At
//! the end a verify query counts the rows that still need the change.
//!
//! Both run in sessions that pin what would otherwise change their
//! results: `row_security = off` (a table whose policies apply to the
//! role is refused, never read in part), the settings that decide how a
//! key reads as text ([`sql::PINNED_OUTPUT`]), `statement_timeout = 0`,
//! and `lock_timeout` for every statement, not only the batches.
//!
//! A **rewrite** (`evolve rewrite`) changes a table's shape without
//! holding ACCESS EXCLUSIVE for the copy: see [`rewrite`].
//!
//! The pure parts (the SQL, the throttle decision, the batch-size
//! controller, reading `--set` and backfill files) are in [`sql`],
//! [`throttle`] and [`script`].

mod error;
mod job;
pub mod rewrite;
pub mod script;
pub mod sql;
pub mod throttle;
mod worker;

use std::time::Duration;

use serde::Serialize;

pub use error::BackfillError;
pub use job::{JobStatus, cancel, pause, resume, run, status};
pub use script::Spec;
pub use throttle::{BatchSizer, Limits, Pause};

/// The progress table, created on first use in the first schema of the
/// `search_path`.
pub const JOBS_TABLE: &str = "evolve_backfill_jobs";

/// How batches run: shared by backfills and the rewrite's copy.
#[derive(Clone, Debug)]
pub struct BatchOptions {
    /// First batch size; with `batch_time` it adapts from there.
    pub batch: u64,
    /// Target duration of one batch; `None` keeps the size fixed.
    pub batch_time: Option<Duration>,
    pub limits: Limits,
    /// `lock_timeout` of every statement evolve runs: the batches, and
    /// what takes the table's locks around them (preparing the batch
    /// statements, the verify query, the swap).
    pub lock_timeout: Duration,
    /// How many times a batch (or such a statement) is retried after its
    /// lock_timeout expired or the server rolled it back for a deadlock or
    /// a serialization failure.
    pub lock_retries: u32,
    /// First wait before such a retry, doubled each time (at most 30 s).
    pub lock_retry_delay: Duration,
    /// How often a paused run looks again.
    pub poll: Duration,
    /// After each batch, wait this many times the batch's own duration
    /// before the next (gh-ost's `--nice-ratio`): 1 leaves the server half
    /// the time, 0 (the default) runs batches back to back.
    pub nice: f64,
}

impl BatchOptions {
    /// The wait after a batch that took `took` (see [`BatchOptions::nice`]).
    pub fn nice_wait(&self, took: Duration) -> Duration {
        if self.nice > 0.0 && self.nice.is_finite() {
            took.mul_f64(self.nice)
        } else {
            Duration::ZERO
        }
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            batch: 5000,
            batch_time: Some(Duration::from_millis(200)),
            limits: Limits::default(),
            lock_timeout: Duration::from_secs(3),
            lock_retries: 5,
            lock_retry_delay: Duration::from_millis(500),
            poll: Duration::from_secs(1),
            nice: 0.0,
        }
    }
}

/// A backfill to run.
#[derive(Clone, Debug)]
pub struct BackfillOptions {
    pub database_url: String,
    /// The job's name: its row in the progress table and its lock.
    pub name: String,
    pub spec: Spec,
    pub batches: BatchOptions,
}

/// What a backfill or a rewrite reports as it goes. This is also the
/// documented shape of `--format json`: one JSON object per line with a
/// `type` tag; new types and fields may be added.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A backfill run began (`resumed`: it continues a job that had made
    /// progress before).
    Started {
        job: String,
        table: String,
        resumed: bool,
        rows_done: u64,
        batches: u64,
        /// The planner's estimate of the table's rows.
        estimated_rows: u64,
    },
    /// A batch committed (a backfill's update or a rewrite's copy).
    Batch {
        job: String,
        batch: u64,
        /// Rows this batch changed (or copied).
        rows: u64,
        /// Keys it walked.
        scanned: u64,
        rows_done: u64,
        keys_seen: u64,
        /// The size of the next batch.
        next_size: u64,
        ms: u64,
    },
    /// Work waits; `message` says why in words.
    Paused {
        job: String,
        #[serde(flatten)]
        pause: Pause,
        message: String,
    },
    /// Work goes on after a pause.
    Resumed { job: String, paused_ms: u64 },
    /// A backfill ended and its verify query found `remaining` rows still
    /// to change (0 on success).
    Finished {
        job: String,
        rows_done: u64,
        batches: u64,
        remaining: u64,
        ms: u64,
    },
    /// A rewrite entered a phase: `copy`, `replay`, `swap`, `validate`,
    /// `refresh`, `cleanup`, `done`.
    Phase { table: String, phase: String },
    /// A batch of log entries replayed onto the shadow table.
    Replayed {
        table: String,
        entries: u64,
        ms: u64,
    },
    /// The swap committed after `attempts` tries, holding the table's lock
    /// for `ms`.
    Swapped {
        table: String,
        attempts: u32,
        ms: u64,
        rebuilt: Vec<String>,
    },
}

/// `d` plus up to a quarter of it, so that waiting runs do not retry in
/// step.
pub(crate) fn with_jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    d + d.mul_f64(f64::from(nanos % 1000) / 4000.0)
}

/// The wait before retry `attempt` (1-based): doubled each time, at most
/// 30 s.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(Duration::from_secs(30))
}
