//! `evolve migrate`: migrations as code for PostgreSQL.
//!
//! Flyway-style files (`V<version>__<description>.sql`, `R__<description>.sql`)
//! applied in order, each in one transaction together with its history row;
//! Flyway's history table and checksums, so an existing
//! `flyway_schema_history` can be adopted; `lock_timeout` on every
//! transaction with retry that names the blocking session; a session
//! advisory lock so two runs never interleave; files marked
//! `-- evolve:no-transaction` run statement by statement and resume where
//! they stopped.
//!
//! The operations take [`Options`] and report through [`Event`]s and
//! serializable reports; rendering is the caller's business.

mod apply;
mod bootstrap;
mod callbacks;
pub mod change;
pub mod coordinate;
mod deps;
mod error;
mod files;
mod flyway_config;
mod history;
pub mod lint_catalog;
mod lock;
mod lockplan;
mod naming;
mod placeholders;
mod plan;
mod rebuild;
mod refresh;

use std::path::{Path, PathBuf};
use std::time::Duration;

use evolve_core::migration::Version;
use evolve_pg::{Client, SessionInfo};
use serde::Serialize;

pub use callbacks::EVENTS as CALLBACK_EVENTS;
pub use deps::{Dependent, DependentKind, DepsReport, to_dot, to_mermaid};
pub use error::MigrateError;
pub use files::{CallbackFile, MigrationFile, MigrationSet, ScriptConfig, Symlinks};
pub use flyway_config::{
    CONF_ENVIRONMENT, ConfigError, ConfigFiles, FlywayConfig, conf_environment_error, config_files,
    expand_conf_env, from_env, parse_conf, parse_toml, parse_toml_in, parse_toml_with,
    toml_environment,
};
pub use history::{BASELINE_DESCRIPTION, History, HistoryRow};
pub use lock::{flyway_lock_key, lock_key};
pub use lockplan::{
    Held, LockPlan, PlannedLock, PlannedRebuild, PlannedStatement, ProbeLock, ProbeResult,
    check_contracts, lock_plan, probe_lock_plan,
};
pub use naming::{Named, Naming};
pub use placeholders::{BuiltIns, Placeholders};
pub use plan::{Kind, MigrationStatus, Plan, State, StepOptions, Target};
pub use rebuild::{Captured, RebuildPlan, plan_targets};
pub use refresh::{MatviewStatus, Refreshed};

/// Default history table name.
pub const DEFAULT_HISTORY_TABLE: &str = "evolve_schema_history";

/// What every verb needs to know.
#[derive(Clone, Debug)]
pub struct Options {
    pub database_url: String,
    pub dir: PathBuf,
    /// `(schema, name)`; no schema means the connection's current schema.
    pub history_table: (Option<String>, String),
    /// `lock_timeout` set on every migration transaction.
    pub lock_timeout: Duration,
    /// How many times a file is retried after `lock_timeout` expires.
    pub lock_retries: u32,
    /// First wait before a retry; doubled each time, at most 30 s.
    pub retry_delay: Duration,
    /// Wait for another run's migration lock (true) or fail at once.
    pub wait_for_lock: bool,
    /// Recorded as `installed_by`; defaults to the database user.
    pub installed_by: Option<String>,
    /// How the walk of `dir` treats symbolic links.
    pub symlinks: Symlinks,
    /// How long `apply` waits for another backend's build of an INVALID
    /// index (a `CREATE INDEX CONCURRENTLY` still running, e.g. of a run
    /// that was killed) before it refuses to drop the index.
    pub index_build_wait: Duration,
    /// Flyway's placeholders, replaced in every file before it is parsed.
    pub placeholders: Placeholders,
    /// Flyway's naming settings: which files are migrations.
    pub naming: Naming,
    /// Flyway's `initSql`: run on every connection evolve opens, right after
    /// connecting (placeholders replaced). The settings it makes outlast the
    /// `RESET ALL` that ends each migration.
    pub init_sql: Option<String>,
    /// Flyway's `connectRetries`: how many times a connection that cannot
    /// be opened is tried again, waiting 1 s, then twice as long each time,
    /// at most `connect_retries_interval`.
    pub connect_retries: u32,
    /// Flyway's `connectRetriesInterval`.
    pub connect_retries_interval: Duration,
    /// How long to wait at most for another run's migration lock (Flyway's
    /// `lockRetryCount`, one second a retry); `None`: without limit.
    pub lock_wait_limit: Option<Duration>,
    /// Flyway's default schema (`defaultSchema`, else the first of
    /// `schemas`): put first on the search_path of the session that runs
    /// migrations and callbacks, as Flyway puts it. Without it, the schema
    /// of `history_table` (when it names one) is put first.
    pub default_schema: Option<String>,
    /// Flyway's schemas, the default schema first: `apply` and `baseline`
    /// create the missing ones (unless `create_schemas` is false) and
    /// record that in the history as Flyway does; `baselineOnMigrate`
    /// looks whether they are empty. Empty: the history table's schema.
    pub schemas: Vec<String>,
    /// Flyway's `createSchemas`.
    pub create_schemas: bool,
    /// Flyway's `ignoreMigrationPatterns`: the states `validate` (and the
    /// check `apply` makes first) accept; by default future migrations
    /// only, as Flyway's `*:future`.
    pub ignore_patterns: IgnorePatterns,
    /// Where `database_url` came from (`--database-url`, `flyway.url in
    /// flyway.conf`, ...), named in a connection error's way out.
    pub database_url_given: &'static str,
    /// Flyway's `failOnMissingLocations`: when `dir` does not exist, fail
    /// (true) or, as Flyway does by default, warn and read no files, so
    /// that every applied version is `future` and `status` still lists
    /// the history (false).
    pub fail_on_missing_dir: bool,
    /// Flyway's `executeInTransaction`: with false, every migration and
    /// callback runs outside a transaction unless its script
    /// configuration file says `executeInTransaction=true`.
    pub execute_in_transaction: bool,
    /// A setting of the Flyway configuration that Flyway refuses (an
    /// `ignoreMigrationPatterns` entry that is not a pattern), with the way
    /// out: every verb that connects refuses to run, before anything is
    /// read or applied (set by [`FlywayConfig::configure`]).
    pub refused_setting: Option<String>,
}

/// Flyway's `ignoreMigrationPatterns` (`<type>:<state>`, type `*`,
/// `versioned` or `repeatable`, state `*`, `pending`, `missing`,
/// `ignored` or `future`): which migrations in which state `validate`
/// accepts, and the check `apply` makes first. The default is Flyway's
/// `*:future`; a list given in the configuration replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgnorePatterns {
    /// Pending files, and repeatable files changed since they ran.
    pub pending: ByType,
    /// Applied migrations whose file is gone (`missing-file`).
    pub missing: ByType,
    /// Pending files below the applied version (`ignored-out-of-order`);
    /// `apply` leaves them, unless out of order.
    pub ignored: ByType,
    /// Applied versions above every file's (`future`).
    pub future: ByType,
}

impl Default for IgnorePatterns {
    fn default() -> IgnorePatterns {
        IgnorePatterns {
            pending: ByType::NONE,
            missing: ByType::NONE,
            ignored: ByType::NONE,
            future: ByType::ALL,
        }
    }
}

impl IgnorePatterns {
    /// Nothing ignored: a list that names no pattern.
    pub const NONE: IgnorePatterns = IgnorePatterns {
        pending: ByType::NONE,
        missing: ByType::NONE,
        ignored: ByType::NONE,
        future: ByType::NONE,
    };
}

/// One state of [`IgnorePatterns`], for versioned (and baseline) and for
/// repeatable migrations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByType {
    pub versioned: bool,
    pub repeatable: bool,
}

impl ByType {
    pub const NONE: ByType = ByType {
        versioned: false,
        repeatable: false,
    };
    pub const ALL: ByType = ByType {
        versioned: true,
        repeatable: true,
    };

    /// Whether migrations of `kind` are ignored.
    pub fn of(self, kind: Kind) -> bool {
        match kind {
            Kind::Repeatable => self.repeatable,
            Kind::Versioned | Kind::Baseline => self.versioned,
        }
    }
}

impl Options {
    pub fn new(database_url: impl Into<String>, dir: impl Into<PathBuf>) -> Options {
        Options {
            database_url: database_url.into(),
            dir: dir.into(),
            history_table: (None, DEFAULT_HISTORY_TABLE.to_string()),
            lock_timeout: Duration::from_secs(3),
            lock_retries: 5,
            retry_delay: Duration::from_millis(500),
            wait_for_lock: true,
            installed_by: None,
            symlinks: Symlinks::WithinDir,
            index_build_wait: Duration::from_secs(300),
            placeholders: Placeholders::default(),
            naming: Naming::default(),
            init_sql: None,
            connect_retries: 0,
            connect_retries_interval: Duration::from_secs(120),
            lock_wait_limit: None,
            default_schema: None,
            schemas: Vec::new(),
            create_schemas: true,
            ignore_patterns: IgnorePatterns::default(),
            database_url_given: "--database-url",
            fail_on_missing_dir: false,
            execute_in_transaction: true,
            refused_setting: None,
        }
    }
}

/// Options of `apply`.
#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    /// Flyway's `target`: how far the versioned migrations go (default:
    /// latest).
    pub target: Target,
    pub out_of_order: bool,
    pub dry_run: bool,
    /// Recreate rebuilt materialized views WITH DATA inside the file's
    /// transaction (no reader ever sees an unpopulated matview; the base
    /// table stays locked while they populate) instead of refreshing them
    /// after the commit.
    pub populate_in_transaction: bool,
    /// Flyway's `group`: every pending migration in one transaction, so one
    /// failure rolls back all of them.
    pub group: bool,
    /// Flyway's `mixed`: a file with a statement PostgreSQL refuses in a
    /// transaction runs outside one, as if it began with
    /// `-- evolve:no-transaction`.
    pub mixed: bool,
    /// `--until-phase P`: stop before the first pending file whose
    /// `-- evolve:phase` is later than `P`, or earlier than a phase this run
    /// already applied (the next change); files without a phase never stop
    /// it (see [`change::until_phase`]). Repeatable files run only when the
    /// run is not stopped.
    pub until_phase: Option<evolve_core::migration::Phase>,
    /// Runs the backfill jobs that files marked `-- evolve:backfill NAME`
    /// hand off to; `None` runs such files as written.
    pub backfill: Option<std::sync::Arc<dyn change::BackfillRunner>>,
    /// Flyway's `baselineOnMigrate` with `baselineVersion`: when the history
    /// table does not exist and one of the schemas is not empty, record a
    /// baseline at this version first (files at or below it never run).
    pub baseline_on_migrate: Option<Version>,
    /// The baseline row's description (default: `<< Flyway Baseline >>`).
    pub baseline_description: Option<String>,
    /// Flyway's `validateOnMigrate = false`: apply without refusing edited
    /// or missing applied files (and without the validate callbacks).
    pub skip_validation: bool,
    /// Flyway's guard: refuse to migrate when the history table does not
    /// exist yet but the schemas hold objects (Flyway: "Found non-empty
    /// schema(s) ... but no schema history table"), unless
    /// `baseline_on_migrate` baselines them. Files written for an empty
    /// database would otherwise run again over what is there. The binary
    /// sets it, as Flyway's migrate does; library callers that apply to
    /// databases they set up themselves (a demo, a rollout's nodes) may
    /// leave it off.
    pub require_history_or_empty: bool,
    /// `--pipeline URL`: before each file, the pipeline that ingests this
    /// database moves the interfaces off the columns the file drops,
    /// retypes or renames (see [`coordinate`]).
    pub pipeline: Option<std::sync::Arc<dyn coordinate::Coordinator>>,
    /// `--pipeline-timeout`: how long each wait for a replacement to be
    /// hydrated may take [default: [`DEFAULT_PIPELINE_TIMEOUT`]].
    pub pipeline_timeout: Option<Duration>,
    /// `--allow-breaking-contract FIELD`: fields (`interface.field` or
    /// `field`) a file may take from consumers that read them.
    pub allow_breaking_contract: Vec<String>,
}

/// How long `apply --pipeline` waits for a replacement to be hydrated by
/// default.
pub const DEFAULT_PIPELINE_TIMEOUT: Duration = Duration::from_secs(600);

/// What happens while a verb runs, in order. Serialized as one JSON object
/// per line with a `type` tag (`--format json`); new types may be added.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// Another run holds the migration lock; this one waits.
    LockWait {
        table: String,
        holder: Option<SessionInfo>,
    },
    LockAcquired {
        table: String,
        waited_ms: u64,
    },
    HistoryCreated {
        table: String,
    },
    /// Flyway's schemas that did not exist were created, and recorded in
    /// the history as Flyway records it (a `SCHEMA` row).
    SchemasCreated {
        table: String,
        schemas: Vec<String>,
    },
    /// baselineOnMigrate: the history table did not exist and these schemas
    /// were not empty, so the database was baselined at `version`.
    Baselined {
        table: String,
        version: String,
        non_empty_schemas: Vec<String>,
    },
    /// A migration was applied (or, for a resumed no-transaction file,
    /// finished).
    Applied {
        script: String,
        version: Option<String>,
        description: String,
        /// `versioned`, `repeatable` or `baseline` (a `B` file, recorded as
        /// Flyway's `SQL_BASELINE`).
        kind: Kind,
        statements: usize,
        execution_time_ms: u64,
        attempts: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        resumed_at_statement: Option<usize>,
        out_of_order: bool,
    },
    /// `--dry-run`: this migration would run.
    WouldApply {
        script: String,
        version: Option<String>,
        description: String,
        /// As [`Event::Applied`]'s.
        kind: Kind,
        statements: usize,
        transaction: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        resume_at_statement: Option<usize>,
    },
    /// `lock_timeout` expired; the file is rolled back and retried.
    LockRetry {
        script: String,
        line: u32,
        attempt: u32,
        retries: u32,
        wait_ms: u64,
        blockers: Vec<SessionInfo>,
        /// The role evolve migrates as (see [`describe_blockers`]).
        role: String,
    },
    /// The INVALID index the file creates again is still being built by
    /// another backend (a concurrent build of a run that was killed, or of
    /// someone else): `apply` waits for that build, at most `max_wait_ms`,
    /// instead of dropping the index under it.
    IndexBuildWait {
        script: String,
        index: String,
        builders: Vec<SessionInfo>,
        max_wait_ms: u64,
    },
    /// An INVALID index left by a failed `CREATE INDEX CONCURRENTLY` was
    /// found where the file creates that index again, and dropped.
    InvalidIndexDropped {
        script: String,
        index: String,
    },
    /// Views and materialized views that blocked the file's ALTERs were
    /// dropped and recreated around it, in its transaction.
    Rebuilt {
        script: String,
        /// Bottom-up.
        dependents: Vec<String>,
    },
    /// `--dry-run`: the file's ALTERs would rebuild these dependents.
    WouldRebuild {
        script: String,
        /// In order, deepest first.
        drop: Vec<String>,
        /// In order, bottom-up, after the file's statements.
        create: Vec<String>,
        /// After the commit, bottom-up.
        refresh_after_commit: Vec<String>,
        /// For each of those, what its unreadable window will depend on.
        refresh_estimates: Vec<RefreshEstimate>,
    },
    /// A rebuilt materialized view was refreshed after the commit.
    /// `unreadable_ms` is how long it stood unpopulated (reads failed).
    Refreshed {
        name: String,
        refresh_ms: u64,
        unreadable_ms: u64,
    },
    /// A file marked `-- evolve:backfill NAME` handed its UPDATE to the
    /// backfill job; `outcome` says how it runs.
    BackfillHandedOff {
        script: String,
        job: String,
        outcome: String,
    },
    /// `--pipeline`: the pipeline moved the materialized views reading
    /// `old_table` onto `table` around the file: `when` is `before` (the
    /// columns excluded, before the file ran) or `after` (after its
    /// commit: retyped or renamed columns included again, old versions
    /// dropped).
    Coordinated {
        script: String,
        pipeline: String,
        when: String,
        views: Vec<String>,
        old_table: String,
        table: String,
        columns: String,
        steps: Vec<String>,
    },
    /// `--pipeline` with `--dry-run`: the steps the pipeline would take
    /// around the file, before it and after its commit.
    WouldCoordinate {
        script: String,
        pipeline: String,
        views: Vec<String>,
        old_table: String,
        columns: String,
        before: Vec<String>,
        /// The file's statements, one line each, between the two.
        statements: Vec<String>,
        after: Vec<String>,
    },
    /// `--pipeline`: the file failed, and the views were moved back onto
    /// the versions they read before it.
    CoordinationUndone {
        script: String,
        views: Vec<String>,
        table: String,
    },
    /// `--until-phase`: the run stopped before this file.
    StoppedAtPhase {
        script: String,
        /// The file's phase.
        phase: String,
        until: String,
    },
    /// `repair` changed the history.
    Repaired {
        script: String,
        version: Option<String>,
        action: RepairAction,
    },
}

/// How long a rebuilt materialized view may stay unreadable after the
/// commit: its size now, and how long its last refresh through evolve took.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RefreshEstimate {
    pub name: String,
    /// Its rows: counted (`rows_counted`), else the planner's estimate;
    /// `None` when a large matview was never analysed.
    pub rows: Option<i64>,
    pub rows_counted: bool,
    pub bytes: i64,
    pub last_refresh_ms: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairAction {
    RemovedFailedRow,
    RealignedChecksum,
    MarkedDeleted,
}

/// `status`: every migration, file or history row.
#[derive(Clone, Debug, Serialize)]
pub struct StatusReport {
    pub history_table: String,
    /// False when the history table does not exist yet.
    pub history_exists: bool,
    pub current_version: Option<String>,
    pub migrations: Vec<MigrationStatus>,
}

/// `apply`: what ran.
#[derive(Clone, Debug, Serialize)]
pub struct ApplyReport {
    pub history_table: String,
    pub dry_run: bool,
    pub applied: usize,
    pub current_version: Option<String>,
    pub elapsed_ms: u64,
}

/// `validate`: nothing to report when valid; problems come as an error.
#[derive(Clone, Debug, Serialize)]
pub struct ValidateReport {
    pub history_table: String,
    pub applied: usize,
    pub pending: usize,
}

/// `repair` and `baseline`: how many rows changed.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeReport {
    pub history_table: String,
    pub changed: usize,
}

/// `d` plus up to a quarter of it, so that several waiting runs do not
/// retry in step.
pub(crate) fn with_jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    d + d.mul_f64(f64::from(nanos % 1000) / 4000.0)
}

/// The sessions that block a migration, for a message: `pid 12 (app,
/// idle in transaction): BEGIN; LOCK TABLE t` for each, joined with `; `.
/// The query is PostgreSQL's text with its white space collapsed and
/// without a final semicolon; when `role` (the migrating role) may not see
/// another role's query, the text says so and how to allow it.
pub fn describe_blockers(blockers: &[SessionInfo], role: &str) -> String {
    if blockers.is_empty() {
        return evolve_pg::describe_sessions(blockers);
    }
    blockers
        .iter()
        .map(|s| {
            let app = if s.application_name.is_empty() {
                "no application_name"
            } else {
                &s.application_name
            };
            if s.query == "<insufficient privilege>" {
                return format!(
                    "pid {} ({app}): its query is hidden from role {role} (GRANT pg_read_all_stats TO {} lets evolve name it)",
                    s.pid,
                    evolve_pg::quote_ident(role)
                );
            }
            let query = s.query.split_whitespace().collect::<Vec<_>>().join(" ");
            let query = query.trim_end_matches([';', ' ']);
            if query.is_empty() {
                format!("pid {} ({app}, {})", s.pid, s.state)
            } else {
                format!("pid {} ({app}, {}): {query}", s.pid, s.state)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) struct Connected {
    pub client: Client,
    pub history: History,
    /// What ends each migration and callback: `RESET ALL` (so a file's SET
    /// does not leak into the next), then the settings `initSql` made and
    /// the default schema on the search_path.
    pub reset: String,
}

pub(crate) async fn connect(opts: &Options) -> Result<Connected, MigrateError> {
    if let Some(refused) = &opts.refused_setting {
        return Err(MigrateError::Usage(refused.clone()));
    }
    let client = open(opts, "evolve migrate").await?;
    let (setup, reset) = session_settings(&client, opts).await?;
    if !setup.is_empty() {
        client.batch_execute(&setup).await?;
    }
    let (schema, name) = &opts.history_table;
    let history = History::resolve(&client, schema.as_deref(), name).await?;
    Ok(Connected {
        client,
        history,
        reset,
    })
}

/// Opens a connection as Flyway opens one: retried `connect_retries`
/// times with Flyway's backoff when the server cannot be reached, then
/// `init_sql` run on it.
pub(crate) async fn open(opts: &Options, application_name: &str) -> Result<Client, MigrateError> {
    let started = std::time::Instant::now();
    let mut wait = Duration::from_secs(1);
    let mut attempt: u32 = 1;
    let client = loop {
        let connected = evolve_pg::connect(&opts.database_url, application_name)
            .await
            .map_err(|e| e.given_by(opts.database_url_given));
        match connected {
            Ok(client) => break client,
            Err(e @ evolve_pg::PgError::Connect { .. })
                if attempt <= opts.connect_retries && transient(&e) =>
            {
                tracing::warn!(
                    "{e}; retrying in {} s (retry {attempt} of {}, as connectRetries allows)",
                    wait.as_secs_f64(),
                    opts.connect_retries
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(opts.connect_retries_interval.max(Duration::from_secs(1)));
                attempt += 1;
            }
            Err(error) if attempt > 1 => {
                return Err(MigrateError::ConnectRetries {
                    attempts: attempt,
                    waited_s: started.elapsed().as_secs(),
                    error,
                });
            }
            Err(e) => return Err(e.into()),
        }
    };
    if let Some(sql) = &opts.init_sql {
        init_sql(&client, opts, sql).await?;
    }
    Ok(client)
}

/// A refusal that trying again does not change: the server rejected the
/// credentials (SQLSTATE class 28).
fn transient(e: &evolve_pg::PgError) -> bool {
    match e {
        evolve_pg::PgError::Connect { reason, .. } => !reason
            .split_whitespace()
            .nth(1)
            .is_some_and(|code| code.starts_with("28")),
        _ => false,
    }
}

/// Runs Flyway's `initSql` on a new connection, statement by statement
/// outside a transaction, placeholders replaced.
async fn init_sql(client: &Client, opts: &Options, sql: &str) -> Result<(), MigrateError> {
    let p = &opts.placeholders;
    let text = if p.replace && !p.prefix.is_empty() && sql.contains(p.prefix.as_str()) {
        let row = client
            .query_one(
                "SELECT current_user::text, current_database()::text,
                        to_char(localtimestamp, 'YYYY-MM-DD HH24:MI:SS'),
                        coalesce(current_schema()::text, '')",
                &[],
            )
            .await?;
        let current_schema: String = row.try_get(3)?;
        let built_ins = BuiltIns {
            user: row.try_get(0)?,
            database: row.try_get(1)?,
            timestamp: row.try_get(2)?,
            default_schema: opts
                .history_table
                .0
                .clone()
                .or_else(|| opts.default_schema.clone())
                .unwrap_or(current_schema),
            table: opts.history_table.1.clone(),
            working_directory: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        };
        p.replace(sql, &built_ins, "")
            .map_err(|m| MigrateError::InitSql {
                reason: format!(
                    "line {}: placeholder {} has no value (give it one with flyway.placeholders.NAME)",
                    m.line, m.placeholder
                ),
            })?
    } else {
        sql.to_string()
    };
    let script =
        evolve_core::migration::parse_script(&text).map_err(|e| MigrateError::InitSql {
            reason: format!("cannot be read: {e}"),
        })?;
    for stmt in &script.statements {
        if let Err(e) = client.batch_execute(&stmt.text).await {
            let error = match e.as_db_error() {
                Some(db) => evolve_pg::describe_db_error(db, None),
                None => e.to_string(),
            };
            let error = error.lines().next().unwrap_or_default().to_string();
            return Err(MigrateError::InitSql {
                reason: format!("failed at line {}: {error}", stmt.line),
            });
        }
    }
    Ok(())
}

/// The names of the settings `SET name ...` and `set_config('name', ...)`
/// in `sql` set, lower-cased (PostgreSQL's names ignore case).
fn set_names(sql: &str) -> Vec<String> {
    let Ok(script) = evolve_core::migration::parse_script(sql) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for stmt in &script.statements {
        let text = stmt.text.trim();
        let mut words = text.split_whitespace();
        if words.next().is_some_and(|w| w.eq_ignore_ascii_case("set")) {
            let mut name = words.next().unwrap_or_default();
            if name.eq_ignore_ascii_case("session") {
                name = words.next().unwrap_or_default();
            }
            let name = name.split('=').next().unwrap_or_default();
            let skip = [
                "local",
                "role",
                "constraints",
                "transaction",
                "authorization",
                "characteristics",
                "time",
                "names",
                "schema",
            ];
            if !name.is_empty() && !skip.iter().any(|s| name.eq_ignore_ascii_case(s)) {
                names.push(name.trim_matches('"').to_lowercase());
            }
        }
        let lower = text.to_lowercase();
        let mut rest = lower.as_str();
        while let Some(at) = rest.find("set_config") {
            rest = &rest[at + "set_config".len()..];
            let arg = rest.trim_start().strip_prefix('(').map(str::trim_start);
            if let Some(quoted) = arg.and_then(|a| a.strip_prefix('\''))
                && let Some(end) = quoted.find('\'')
            {
                names.push(quoted[..end].to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The settings the migrating session keeps: what `initSql` set, and
/// Flyway's default schema first on the search_path (unless it is first
/// already). Returns the statement that makes them (empty when there is
/// nothing to do) and the one that ends each migration (`RESET ALL`, then
/// that statement).
async fn session_settings(
    client: &Client,
    opts: &Options,
) -> Result<(String, String), MigrateError> {
    let mut sets: Vec<(String, String)> = Vec::new();
    if let Some(sql) = &opts.init_sql {
        // pg_settings lists what initSql set, but for custom (dotted)
        // variables, which it never lists: those are named in initSql.
        let named = set_names(sql);
        for row in client
            .query(
                "SELECT name::text, current_setting(name) FROM pg_settings
                 WHERE source = 'session'
                 UNION
                 SELECT n, current_setting(n, true) FROM unnest($1::text[]) n
                 WHERE current_setting(n, true) IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM pg_settings s WHERE s.name = n)
                 ORDER BY 1",
                &[&named],
            )
            .await?
        {
            sets.push((row.try_get(0)?, row.try_get(1)?));
        }
    }
    // Flyway's default schema: `defaultSchema` (or the first of `schemas`),
    // else the schema `--history-table` names, which is where Flyway,
    // configured with that table, would keep it and run migrations.
    if let Some(schema) = opts
        .default_schema
        .as_ref()
        .or(opts.history_table.0.as_ref())
    {
        let path: String = client
            .query_one("SHOW search_path", &[])
            .await?
            .try_get(0)?;
        // Flyway's rule: left alone when the schema leads already.
        if path != *schema && !path.starts_with(&format!("{schema},")) {
            let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
            let path = if path.trim().is_empty() {
                quoted
            } else {
                format!("{quoted},{path}")
            };
            sets.retain(|(name, _)| name != "search_path");
            sets.push(("search_path".into(), path));
        }
    }
    if sets.is_empty() {
        return Ok((String::new(), "RESET ALL".into()));
    }
    let setup = format!(
        "SELECT {}",
        sets.iter()
            .map(|(name, value)| format!(
                "set_config({}, {}, false)",
                evolve_pg::quote_literal(name),
                evolve_pg::quote_literal(value)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let reset = format!("RESET ALL; {setup}");
    Ok((setup, reset))
}

impl Connected {
    /// Refuses to go on with evolve's default history table when it does
    /// not exist but Flyway's does in the same schema: the database is
    /// migrated by Flyway, and evolve would start a second history beside
    /// it (and run every file again).
    pub(crate) async fn refuse_beside_flyway(&self, opts: &Options) -> Result<(), MigrateError> {
        if opts.history_table != (None, DEFAULT_HISTORY_TABLE.to_string())
            || self.history.exists(&self.client).await?
        {
            return Ok(());
        }
        let flyway = History::resolve(
            &self.client,
            Some(&self.history.table.schema),
            "flyway_schema_history",
        )
        .await?;
        if flyway.exists(&self.client).await.unwrap_or(false) {
            return Err(MigrateError::History {
                table: self.history.table.plain(),
                reason: format!(
                    "does not exist, but Flyway's history {} does: this database is migrated by Flyway; pass --history-table flyway_schema_history (or run evolve where its flyway.conf or flyway.toml is) to continue that history",
                    flyway.table.plain()
                ),
            });
        }
        Ok(())
    }

    /// The migrations of `opts.dir`, placeholders replaced with the values
    /// of this connection.
    pub(crate) async fn load(&self, opts: &Options) -> Result<MigrationSet, MigrateError> {
        let built_ins = if opts.placeholders.replace {
            let row = self
                .client
                .query_one(
                    "SELECT current_user::text, current_database()::text,
                            to_char(localtimestamp, 'YYYY-MM-DD HH24:MI:SS')",
                    &[],
                )
                .await?;
            BuiltIns {
                user: row.try_get(0)?,
                database: row.try_get(1)?,
                timestamp: row.try_get(2)?,
                default_schema: self.history.table.schema.clone(),
                table: self.history.table.name.clone(),
                working_directory: std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
            }
        } else {
            BuiltIns::default()
        };
        if !opts.fail_on_missing_dir
            && std::fs::symlink_metadata(&opts.dir)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            tracing::warn!(
                "migrations directory {} does not exist, so there are no migrations to read (Flyway skips a missing location too); create it, pass --dir, or set failOnMissingLocations = true to make this an error",
                opts.dir.display()
            );
            return Ok(MigrationSet::default());
        }
        let mut set = MigrationSet::load_named(
            &opts.dir,
            opts.symlinks,
            &opts.naming,
            &opts.placeholders,
            &built_ins,
        )?;
        if !opts.execute_in_transaction {
            set.execute_outside_transactions();
        }
        Ok(set)
    }
}

/// `evolve deps`: everything that depends on a table or one of its columns
/// (`table`, `schema.table`, `table.column`, `schema.table.column`).
pub async fn dependents(database_url: &str, target: &str) -> Result<DepsReport, MigrateError> {
    let client = evolve_pg::connect(database_url, "evolve deps").await?;
    deps::deps(&client, target).await
}

/// `evolve refresh`: refreshes `names` (every materialized view when
/// empty) in dependency order, CONCURRENTLY where possible, and records
/// each refresh.
pub async fn refresh_matviews(
    database_url: &str,
    names: &[String],
    on_refreshed: &mut dyn FnMut(&Refreshed),
) -> Result<Vec<Refreshed>, MigrateError> {
    let client = evolve_pg::connect(database_url, "evolve refresh").await?;
    refresh::refresh(&client, names, on_refreshed).await
}

/// `evolve refresh --status`.
pub async fn refresh_status(database_url: &str) -> Result<Vec<MatviewStatus>, MigrateError> {
    let client = evolve_pg::connect(database_url, "evolve refresh").await?;
    refresh::status(&client).await
}

/// `evolve migrate status`.
pub async fn status(opts: &Options) -> Result<StatusReport, MigrateError> {
    let c = connect(opts).await?;
    c.refuse_beside_flyway(opts).await?;
    let files = c.load(opts).await?;
    callbacks::around(
        &c.client,
        &c.reset,
        &files,
        "beforeInfo",
        "afterInfo",
        "afterInfoError",
        async {
            let history_exists = c.history.exists(&c.client).await?;
            let rows = c.history.rows(&c.client).await?;
            let progress = c.history.progress(&c.client).await?;
            let plan = Plan::new(&files, &rows, &progress);
            Ok(StatusReport {
                history_table: c.history.table.plain(),
                history_exists,
                current_version: plan
                    .current_version
                    .as_ref()
                    .map(|v| v.as_str().to_string()),
                migrations: plan.migrations,
            })
        },
    )
    .await
}

/// `evolve migrate validate`: fails when an applied file was edited or is
/// missing, a migration failed or is pending (as Flyway's validate fails;
/// see [`Options::ignore_patterns`]), or a pending file sorts before an
/// applied one.
pub async fn validate(opts: &Options) -> Result<ValidateReport, MigrateError> {
    let c = connect(opts).await?;
    c.refuse_beside_flyway(opts).await?;
    let files = c.load(opts).await?;
    callbacks::around(
        &c.client,
        &c.reset,
        &files,
        "beforeValidate",
        "afterValidate",
        "afterValidateError",
        validate_loaded(&c, &files, opts),
    )
    .await
}

async fn validate_loaded(
    c: &Connected,
    files: &MigrationSet,
    opts: &Options,
) -> Result<ValidateReport, MigrateError> {
    let rows = c.history.rows(&c.client).await?;
    let progress = c.history.progress(&c.client).await?;
    let plan = Plan::new(files, &rows, &progress);
    let mut problems = plan.problems(&StepOptions {
        ignore: opts.ignore_patterns,
        ..StepOptions::default()
    });
    let next = next_version(files, &rows);
    for m in plan.deleted_on_disk() {
        problems.push(format!(
            "migration {} has version {}, which 'evolve migrate repair' marked deleted, so apply never runs it; rename it to version {next} (or above), or remove it if its changes are already in the database",
            m.script,
            m.version.as_deref().unwrap_or_default()
        ));
    }
    for m in plan.failed() {
        let resumable = m.statements_done.is_some() && m.kind != Kind::Repeatable;
        let way_out = if m.kind == Kind::Repeatable {
            "run 'evolve migrate apply' to run it again, or run 'evolve migrate repair' to remove the failed row"
        } else if resumable {
            "run 'evolve migrate apply' to resume it, or fix it by hand and run 'evolve migrate repair'"
        } else {
            "evolve has no record of how far it got, so apply cannot resume it; make sure its effects are complete or undone, then run 'evolve migrate repair' to remove the failed row"
        };
        problems.push(format!(
            "migration {} failed{}; {way_out}",
            m.script,
            m.note
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ));
    }
    // Pending migrations fail validation, as in Flyway, unless its
    // ignoreMigrationPatterns lets them be.
    for m in &plan.migrations {
        if opts.ignore_patterns.pending.of(m.kind) {
            continue;
        }
        match m.state {
            State::Pending => problems.push(format!(
                "migration {} is pending (not applied yet); run 'evolve migrate apply', or set ignoreMigrationPatterns = *:pending to validate without applying it",
                m.script
            )),
            State::Outdated => problems.push(format!(
                "repeatable migration {} changed since it last ran; run 'evolve migrate apply' to run it again, or set ignoreMigrationPatterns = *:pending to validate without it",
                m.script
            )),
            _ => {}
        }
    }
    if !problems.is_empty() {
        return Err(MigrateError::Invalid { problems });
    }
    let count = |s: State| plan.migrations.iter().filter(|m| m.state == s).count();
    Ok(ValidateReport {
        history_table: c.history.table.plain(),
        applied: count(State::Applied),
        pending: count(State::Pending) + count(State::Outdated),
    })
}

/// `evolve migrate apply`.
pub async fn apply(
    opts: &Options,
    apply_opts: &ApplyOptions,
    on_event: &mut dyn FnMut(Event),
) -> Result<ApplyReport, MigrateError> {
    apply::run(opts, apply_opts, on_event).await
}

/// `evolve migrate baseline --version V`: records that the database is
/// already at `version`; files at or below it are never applied.
pub async fn baseline(
    opts: &Options,
    version: &Version,
    description: Option<&str>,
    on_event: &mut dyn FnMut(Event),
) -> Result<ChangeReport, MigrateError> {
    let c = connect(opts).await?;
    c.refuse_beside_flyway(opts).await?;
    let files = if opts.dir.is_dir() {
        c.load(opts).await?
    } else {
        MigrationSet::default()
    };
    let _lock = lock::acquire(opts, &c.history.table, on_event).await?;
    let created = bootstrap::create_schemas(opts, &c.client, &c.history).await?;
    if c.history.ensure(&c.client).await? {
        on_event(Event::HistoryCreated {
            table: c.history.table.plain(),
        });
    }
    let report = callbacks::around(
        &c.client,
        &c.reset,
        &files,
        "beforeBaseline",
        "afterBaseline",
        "afterBaselineError",
        baseline_row(opts, &c, version, description),
    )
    .await?;
    // As Flyway records it then: the baseline first, the schemas after.
    if !created.is_empty() {
        bootstrap::record_schemas(opts, &c.client, &c.history, &created, on_event).await?;
    }
    Ok(report)
}

async fn baseline_row(
    opts: &Options,
    c: &Connected,
    version: &Version,
    description: Option<&str>,
) -> Result<ChangeReport, MigrateError> {
    let rows = c.history.rows(&c.client).await?;
    let description = description.unwrap_or(BASELINE_DESCRIPTION);
    // Flyway's rule: the same baseline again is done already; another one
    // is refused.
    if let Some(row) = rows.iter().find(|r| r.kind == history::TYPE_BASELINE) {
        let same_version = row
            .version
            .as_deref()
            .and_then(|v| Version::parse(v).ok())
            .is_some_and(|v| v == *version);
        if same_version && row.description == description {
            return Ok(ChangeReport {
                history_table: c.history.table.plain(),
                changed: 0,
            });
        }
        return Err(MigrateError::History {
            table: c.history.table.plain(),
            reason: format!(
                "is already baselined at version {} ({:?}), so it cannot be baselined at version {version} ({description:?}); baseline it at that version and description again (nothing to do), or leave it as it is",
                row.version.as_deref().unwrap_or_default(),
                row.description
            ),
        });
    }
    if let Some(row) = rows.iter().find(|r| r.kind != history::TYPE_SCHEMA) {
        return Err(MigrateError::History {
            table: c.history.table.plain(),
            reason: format!(
                "already has migrations (first: {}), so it cannot be baselined; baseline only a database that evolve has not migrated",
                row.script
            ),
        });
    }
    c.client
        .query_one(
            &c.history.insert_sql(),
            &[
                &version.as_str(),
                &description,
                &history::TYPE_BASELINE,
                &description,
                &None::<i32>,
                &opts.installed_by,
                &0i32,
                &true,
            ],
        )
        .await?;
    Ok(ChangeReport {
        history_table: c.history.table.plain(),
        changed: 1,
    })
}

/// `evolve migrate repair`: removes failed rows (and their progress),
/// realigns the recorded checksum and description of applied files that
/// were edited on purpose, and marks applied migrations whose files were
/// deleted as deleted.
pub async fn repair(
    opts: &Options,
    on_event: &mut dyn FnMut(Event),
) -> Result<ChangeReport, MigrateError> {
    let c = connect(opts).await?;
    c.refuse_beside_flyway(opts).await?;
    let files = c.load(opts).await?;
    let _lock = lock::acquire(opts, &c.history.table, on_event).await?;
    if !c.history.exists(&c.client).await? {
        return Ok(ChangeReport {
            history_table: c.history.table.plain(),
            changed: 0,
        });
    }
    c.history.ensure(&c.client).await?;
    callbacks::run(&c.client, &c.reset, &files, "beforeRepair").await?;
    let Connected {
        mut client,
        history,
        reset,
    } = c;
    match repair_rows(opts, &mut client, &history, &files, on_event).await {
        Ok(report) => {
            callbacks::run(&client, &reset, &files, "afterRepair").await?;
            Ok(report)
        }
        Err(e) => {
            callbacks::run(&client, &reset, &files, "afterRepairError").await?;
            Err(e)
        }
    }
}

async fn repair_rows(
    opts: &Options,
    client: &mut Client,
    history: &History,
    files: &MigrationSet,
    on_event: &mut dyn FnMut(Event),
) -> Result<ChangeReport, MigrateError> {
    let rows = history.rows(client).await?;
    let progress = history.progress(client).await?;
    let plan = Plan::new(files, &rows, &progress);
    let t = &history.table;
    let tx = client.transaction().await?;
    let mut changed = 0;
    if let Some(java) = plan.migrations.iter().find(|m| {
        m.state == State::Failed
            && rows.iter().any(|r| {
                Some(r.installed_rank) == m.installed_rank && history::is_java_migration(&r.kind)
            })
    }) {
        return Err(MigrateError::History {
            table: history.table.plain(),
            reason: format!(
                "migration {} is a failed Java-based migration, which evolve cannot repair; repair it with Flyway, which has its class",
                java.script
            ),
        });
    }
    for m in &plan.migrations {
        let action = match m.state {
            State::Failed => {
                let rank = m.installed_rank.unwrap_or_default();
                tx.execute(
                    &format!("DELETE FROM {t} WHERE installed_rank = $1 AND NOT success"),
                    &[&rank],
                )
                .await?;
                tx.execute(
                    &format!("DELETE FROM {} WHERE installed_rank = $1", history.progress),
                    &[&rank],
                )
                .await?;
                RepairAction::RemovedFailedRow
            }
            State::Edited => {
                tx.execute(
                    &format!(
                        "UPDATE {t} SET checksum = $1, description = $2, script = $3 WHERE installed_rank = $4"
                    ),
                    &[
                        &m.checksum,
                        &m.description,
                        &m.script,
                        &m.installed_rank.unwrap_or_default(),
                    ],
                )
                .await?;
                RepairAction::RealignedChecksum
            }
            // A future migration is left alone, as Flyway's repair leaves it:
            // the newer files that applied it still hold it.
            State::MissingFile => {
                tx.query_one(
                    &history.insert_sql(),
                    &[
                        &m.version,
                        &m.description,
                        &history::TYPE_DELETE,
                        &m.script,
                        &m.checksum,
                        &opts.installed_by,
                        &0i32,
                        &true,
                    ],
                )
                .await?;
                RepairAction::MarkedDeleted
            }
            _ => continue,
        };
        changed += 1;
        on_event(Event::Repaired {
            script: m.script.clone(),
            version: m.version.clone(),
            action,
        });
    }
    tx.commit().await?;
    Ok(ChangeReport {
        history_table: t.plain(),
        changed,
    })
}

/// `evolve migrate new DESCRIPTION`: creates the next versioned file in
/// `dir` and returns its path. Its version is one above the highest
/// version (first part + 1) among the files and, when `history` gives a
/// database, among every version its history table ever recorded (deleted,
/// failed and baseline rows included), so a version is never reused. Never
/// overwrites a file.
pub async fn new_migration(
    dir: &Path,
    symlinks: Symlinks,
    description: &str,
    history: Option<&Options>,
) -> Result<PathBuf, MigrateError> {
    new_migration_named(dir, symlinks, &Naming::default(), description, history).await
}

/// [`new_migration`] under Flyway's naming settings `naming` (the file is
/// named with its versioned prefix, separator and first suffix).
pub async fn new_migration_named(
    dir: &Path,
    symlinks: Symlinks,
    naming: &Naming,
    description: &str,
    history: Option<&Options>,
) -> Result<PathBuf, MigrateError> {
    let description = description.trim();
    if description.is_empty()
        || description
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
    {
        return Err(MigrateError::Usage(format!(
            "description {description:?} cannot be part of a file name; use words, digits and punctuation other than slashes"
        )));
    }
    // The history's description column holds 200 characters.
    let chars = description.chars().count();
    if chars > 200 {
        return Err(MigrateError::Usage(format!(
            "the description has {chars} characters, and the history table records at most 200; shorten it"
        )));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(MigrateError::Usage(format!(
            "{} is a file, not a directory; give --dir a directory (it is created when missing)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| MigrateError::Create {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let off = Placeholders {
        replace: false,
        ..Placeholders::default()
    };
    let files = MigrationSet::load_named(dir, symlinks, naming, &off, &BuiltIns::default())?;
    let rows = match history {
        Some(opts) => {
            let c = connect(opts).await?;
            c.history.rows(&c.client).await?
        }
        None => Vec::new(),
    };
    let next = next_version(&files, &rows);
    let name = naming.versioned_file_name(&next, description);
    if name.len() > 255 {
        return Err(MigrateError::Usage(format!(
            "the file name would be {} bytes, more than the 255 a file system allows; shorten the description",
            name.len()
        )));
    }
    let path = dir.join(&name);
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| MigrateError::Create {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    writeln!(f, "-- {description}").map_err(|e| MigrateError::Create {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(path)
}

/// The version `new` gives the next file: one above the highest among the
/// files and every history row.
fn next_version(files: &MigrationSet, rows: &[HistoryRow]) -> String {
    let recorded = rows
        .iter()
        .filter_map(|r| r.version.as_deref())
        .filter_map(|v| Version::parse(v).ok());
    files
        .versioned
        .keys()
        .chain(files.baseline.keys())
        .cloned()
        .chain(recorded)
        .max()
        .map(|v| next_major(&v))
        .unwrap_or_else(|| "1".to_string())
}

/// One above the first part of `v`: 41 -> 42, 1.2 -> 2, 2024_01_01 -> 2025.
fn next_major(v: &Version) -> String {
    let first = v.as_str().split('.').next().unwrap_or("0");
    let mut digits: Vec<u8> = first.trim_start_matches('0').bytes().collect();
    // Decimal increment on the digit string: versions may exceed u64.
    let mut i = digits.len();
    loop {
        if i == 0 {
            digits.insert(0, b'1');
            break;
        }
        i -= 1;
        if digits[i] == b'9' {
            digits[i] = b'0';
        } else {
            digits[i] += 1;
            break;
        }
    }
    String::from_utf8(digits).unwrap_or_else(|_| "1".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_names_finds_what_init_sql_sets() {
        assert_eq!(
            set_names(
                "SET search_path = a, b; set SESSION App.Marker TO 'x';\nSET LOCAL x.y = 1; SET ROLE r; SET TIME ZONE 'UTC';\nSELECT set_config('my.var', 'v', false), SET_CONFIG( 'other.v', '1', false);"
            ),
            ["app.marker", "my.var", "other.v", "search_path"]
        );
        assert_eq!(set_names("SET x.y=1"), ["x.y"]);
    }

    #[test]
    fn next_major_increments_the_first_part() {
        let check = |v: &str, expected: &str| {
            let v = Version::parse(v).expect("valid version");
            assert_eq!(next_major(&v), expected);
        };
        check("41", "42");
        check("1.2", "2");
        check("009", "10");
        check("99999999999999999999999", "100000000000000000000000");
        check("0", "1");
    }
}
