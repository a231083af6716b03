//! Running migrations.
//!
//! A versioned or repeatable file runs in one transaction together with its
//! history row: `BEGIN; SET LOCAL lock_timeout`, each statement, the INSERT
//! into the history, `COMMIT`. Any failure rolls back both. When
//! `lock_timeout` expires (SQLSTATE 55P03) the whole file is rolled back and
//! retried with backoff; a second connection watches the running statement
//! and names the sessions that block it.
//!
//! A file marked `-- evolve:no-transaction` (or `executeInTransaction=false`
//! in its script configuration, or whose every statement PostgreSQL refuses
//! in a transaction, as Flyway decides) runs one statement at a time in
//! autocommit. `COPY ... FROM STDIN` sends the rows that follow it in the
//! file through the COPY protocol, so a file holding one runs statement by
//! statement in its transaction. Its history row is written first with `success = false` and
//! a progress row counts the statements done, so a failure (or a crash)
//! leaves a record that the next `apply` resumes from. Before it re-runs a
//! `CREATE INDEX CONCURRENTLY`, it drops the INVALID index a failed build of
//! that same index left behind.

use std::time::{Duration, Instant};

use evolve_core::migration::{Statement, blocked_alters, flyway_checksum, line_col};
use evolve_pg::{Client, QualifiedName, SessionInfo, blocking_sessions, describe_db_error};
use futures_util::StreamExt;
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::Statement as Prepared;
use tokio_postgres::error::ErrorPosition;

use crate::callbacks;
use crate::coordinate;
use crate::files::{CallbackFile, MigrationFile, MigrationSet};
use crate::history::{History, TYPE_SQL, Widths};
use crate::plan::{Plan, Resume, Step, StepOptions};
use crate::rebuild::{self, RebuildPlan};
use crate::{ApplyOptions, ApplyReport, Event, MigrateError, Options, connect, lock};

pub(crate) async fn run(
    opts: &Options,
    apply_opts: &ApplyOptions,
    on_event: &mut dyn FnMut(Event),
) -> Result<ApplyReport, MigrateError> {
    let started = Instant::now();
    let connected = connect(opts).await?;
    connected.refuse_beside_flyway(opts).await?;
    let files = connected.load(opts).await?;
    let crate::Connected {
        client,
        history,
        reset,
    } = connected;
    let step_opts = StepOptions {
        target: apply_opts.target.clone(),
        out_of_order: apply_opts.out_of_order,
        ignore: opts.ignore_patterns,
    };

    if apply_opts.dry_run {
        // Reads only: no lock, no history table created, no baseline.
        crate::bootstrap::refuse_non_empty(opts, apply_opts, &client, &history).await?;
        let baseline = match &apply_opts.baseline_on_migrate {
            Some(v) if crate::bootstrap::baseline_due(opts, &client, &history).await? => {
                Some(crate::bootstrap::baseline_row(v, apply_opts))
            }
            _ => None,
        };
        let (plan, mut steps) = plan_steps(
            &files,
            &history,
            &client,
            &step_opts,
            apply_opts,
            baseline.as_ref(),
        )
        .await?;
        stop_at_phase(&mut steps, apply_opts, on_event);
        // A statement the parser rejects would fail when it runs: said
        // now, as `plan` says it.
        let to_check: Vec<(&str, &evolve_core::migration::Script, usize)> = steps
            .iter()
            .map(|s| {
                (
                    s.file.script.as_str(),
                    &s.file.parsed,
                    s.resume.as_ref().map_or(0, |r| r.statements_done),
                )
            })
            .collect();
        crate::lockplan::check_syntax(&to_check)?;
        for step in &steps {
            if !no_transaction(step.file, apply_opts.mixed)
                && !step.file.parsed.directives.rebuild_dependents_off
            {
                let populate = apply_opts.populate_in_transaction
                    || step.file.parsed.directives.populate_in_transaction;
                // Reads the catalogs only; dropped and recreated nothing.
                let plan = rebuild::plan(&client, step.file, populate).await?;
                if !plan.dependents.is_empty() {
                    on_event(Event::WouldRebuild {
                        script: step.file.script.clone(),
                        drop: plan.drops().map(|(_, sql)| sql.to_string()).collect(),
                        create: plan.creates().map(|(_, sql)| sql.to_string()).collect(),
                        refresh_after_commit: plan.to_refresh().map(|m| m.refresh_sql()).collect(),
                        refresh_estimates: rebuild::estimates(&client, &plan).await?,
                    });
                }
            }
            if let Some(coordinator) = &apply_opts.pipeline {
                let plans = coordinate_plan(
                    &client,
                    step.file,
                    coordinator.as_ref(),
                    &apply_opts.allow_breaking_contract,
                    "would not run",
                )
                .await?;
                for p in &plans {
                    on_event(Event::WouldCoordinate {
                        script: step.file.script.clone(),
                        pipeline: coordinator.target(),
                        views: p.views.iter().map(|v| v.view.clone()).collect(),
                        old_table: p.old_table.clone(),
                        columns: p.columns_text(),
                        before: p.before().iter().map(coordinate::Step::text).collect(),
                        statements: step
                            .file
                            .parsed
                            .statements
                            .iter()
                            .map(|s| evolve_core::migration::effects::one_line(&s.text))
                            .collect(),
                        after: p.after().iter().map(coordinate::Step::text).collect(),
                    });
                }
            }
            on_event(Event::WouldApply {
                script: step.file.script.clone(),
                version: step.file.version().map(|v| v.as_str().to_string()),
                description: step.file.name.description.clone(),
                kind: step.file.kind(),
                statements: step.file.parsed.statements.len(),
                transaction: !no_transaction(step.file, apply_opts.mixed),
                resume_at_statement: step.resume.as_ref().map(|r| r.statements_done + 1),
            });
        }
        return Ok(ApplyReport {
            history_table: history.table.plain(),
            dry_run: true,
            applied: steps.len(),
            current_version: plan.current_version.map(|v| v.as_str().to_string()),
            elapsed_ms: started.elapsed().as_millis() as u64,
        });
    }

    // A file that could never run or be recorded (a COMMIT inside a
    // transaction, a name longer than the history's column) is refused
    // before anything is created: no history table, no schema, no lock.
    refuse_unrunnable(&files, &history, &client, &step_opts, apply_opts).await?;
    // Everything below happens under the lock, so the history read here is
    // the one this run continues.
    let _lock = lock::acquire(opts, &history.table, on_event).await?;
    crate::bootstrap::prepare(
        opts, apply_opts, &client, &reset, &history, &files, on_event,
    )
    .await?;
    // Progress of a failed row that is gone (Flyway's repair removes failed
    // rows and knows nothing of this table) would be taken for the progress
    // of the next row given that rank.
    client
        .execute(
            &format!(
                "DELETE FROM {p} WHERE NOT EXISTS (SELECT 1 FROM {t} h WHERE h.installed_rank = {p}.installed_rank AND NOT h.success)",
                p = history.progress,
                t = history.table
            ),
            &[],
        )
        .await?;
    // validateOnMigrate = false: Flyway runs no validation, and so none of
    // its callbacks.
    let validate = !apply_opts.skip_validation;
    if validate {
        callbacks::run(&client, &reset, &files, "beforeValidate").await?;
    }
    let (plan, mut steps) =
        match plan_steps(&files, &history, &client, &step_opts, apply_opts, None).await {
            Ok(planned) => planned,
            Err(e @ MigrateError::Invalid { .. }) if validate => {
                callbacks::run(&client, &reset, &files, "afterValidateError").await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
    if validate {
        callbacks::run(&client, &reset, &files, "afterValidate").await?;
    }
    stop_at_phase(&mut steps, apply_opts, on_event);
    let group = apply_opts.group && group_transaction(&steps, apply_opts.mixed)?;
    if apply_opts.pipeline.is_some() {
        if group && !steps.is_empty() {
            return Err(MigrateError::Usage(
                "--pipeline moves the pipeline around each file, and --group puts every file in one transaction; apply without --group".into(),
            ));
        }
        history.ensure_pipeline(&client).await?;
    }

    let mut runner = Runner::new(opts, client, history, reset, &files).await?;
    runner.populate_in_transaction = apply_opts.populate_in_transaction;
    runner.mixed = apply_opts.mixed;
    runner.group = group;
    runner.backfill = apply_opts.backfill.clone();
    runner.coordinator = apply_opts.pipeline.clone();
    runner.allow_breaking_contract = apply_opts.allow_breaking_contract.clone();
    runner.pipeline_timeout = apply_opts
        .pipeline_timeout
        .unwrap_or(crate::DEFAULT_PIPELINE_TIMEOUT);
    let reset = runner.reset.clone();
    callbacks::run(&runner.client, &reset, &files, "beforeMigrate").await?;
    let mut current = plan.current_version.clone();
    let applied = match runner.run_steps(&steps, &mut current, on_event).await {
        Ok(applied) => applied,
        Err(e) => {
            callbacks::run(&runner.client, &reset, &files, "afterMigrateError").await?;
            return Err(e);
        }
    };
    if applied > 0 {
        callbacks::run(&runner.client, &reset, &files, "afterMigrateApplied").await?;
    }
    callbacks::run(&runner.client, &reset, &files, "afterMigrate").await?;
    Ok(ApplyReport {
        history_table: runner.history.table.plain(),
        dry_run: false,
        applied,
        current_version: current.map(|v| v.as_str().to_string()),
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The pipeline's steps around `file`: its column changes, the tables
/// they alter resolved on `client`, the pipeline's answer; `outcome` (`was
/// not run`, `would not run`) starts the message of a refusal.
async fn coordinate_plan(
    client: &Client,
    file: &MigrationFile,
    coordinator: &dyn coordinate::Coordinator,
    allowed: &[String],
    outcome: &str,
) -> Result<Vec<coordinate::TablePlan>, MigrateError> {
    let changes = coordinate::file_changes(file)?;
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let request = coordinate::request(client, &changes).await?;
    if request.columns.is_empty() {
        return Ok(Vec::new());
    }
    let refuse = |message: String| MigrateError::Coordination {
        script: file.script.clone(),
        message: format!("{outcome}: {message}"),
    };
    let asked = request
        .columns
        .iter()
        .map(|c| format!("{}.{}.{}", c.schema, c.table, c.column))
        .collect::<Vec<_>>()
        .join(", ");
    let answer = coordinator.affected(&request).await.map_err(|e| {
        refuse(format!(
            "the pipeline could not be asked which tables ingest {asked}: {e}"
        ))
    })?;
    for warning in coordinate::contract_breaks(&changes, &answer, allowed).map_err(refuse)? {
        tracing::warn!(script = %file.script, "{warning}");
    }
    coordinate::plan(&changes, &request, &answer).map_err(refuse)
}

/// `--until-phase`: drops the steps from the first one the phase limit
/// stops at (see [`crate::change::until_phase`]), and says where it stopped.
fn stop_at_phase(
    steps: &mut Vec<Step<'_>>,
    apply_opts: &ApplyOptions,
    on_event: &mut dyn FnMut(Event),
) {
    let Some(until) = apply_opts.until_phase else {
        return;
    };
    let phases: Vec<_> = steps
        .iter()
        .map(|s| s.file.parsed.directives.phase)
        .collect();
    let keep = crate::change::until_phase(&phases, until);
    if let Some(next) = steps.get(keep) {
        on_event(Event::StoppedAtPhase {
            script: next.file.script.clone(),
            phase: next
                .file
                .parsed
                .directives
                .phase
                .map(|p| p.as_str().to_string())
                .unwrap_or_default(),
            until: until.as_str().to_string(),
        });
    }
    steps.truncate(keep);
}

/// Reads the history, and returns the plan and the steps `apply` runs,
/// after refusing invalid states and files that cannot run (before any of
/// them runs).
/// `baseline` is a row `--dry-run` takes as written (baselineOnMigrate).
async fn plan_steps<'a>(
    files: &'a MigrationSet,
    history: &History,
    client: &Client,
    step_opts: &StepOptions,
    apply_opts: &ApplyOptions,
    baseline: Option<&crate::HistoryRow>,
) -> Result<(Plan<'a>, Vec<Step<'a>>), MigrateError> {
    let mut rows = history.rows(client).await?;
    rows.extend(baseline.cloned());
    let progress = history.progress(client).await?;
    let plan = Plan::new(files, &rows, &progress);
    check_target(&plan, step_opts)?;
    if !apply_opts.skip_validation {
        check(&plan, step_opts)?;
    }
    let steps = plan
        .steps(step_opts, &progress)
        .map_err(|p| MigrateError::Invalid { problems: vec![p] })?;
    check_steps(&steps, history, client, apply_opts).await?;
    Ok((plan, steps))
}

/// The files' own problems among the steps the history read now gives
/// (read-only: an absent history table reads as empty), before anything is
/// created; the run's own planning under the lock checks them again, with
/// validation and its callbacks.
async fn refuse_unrunnable(
    files: &MigrationSet,
    history: &History,
    client: &Client,
    step_opts: &StepOptions,
    apply_opts: &ApplyOptions,
) -> Result<(), MigrateError> {
    let rows = history.rows(client).await?;
    let progress = history.progress(client).await?;
    let plan = Plan::new(files, &rows, &progress);
    check_target(&plan, step_opts)?;
    let Ok(steps) = plan.steps(step_opts, &progress) else {
        // Said by the run's own planning, after validation's callbacks.
        return Ok(());
    };
    check_steps(&steps, history, client, apply_opts).await
}

/// Each step's file can run as the run would run it, and its row fits the
/// history table's columns.
async fn check_steps(
    steps: &[Step<'_>],
    history: &History,
    client: &Client,
    apply_opts: &ApplyOptions,
) -> Result<(), MigrateError> {
    let widths = history.widths(client).await?;
    for step in steps {
        check_runnable(step.file, apply_opts.mixed)?;
        check_fits(step.file, &widths, history)?;
    }
    Ok(())
}

/// A file whose path, description or version is longer than the history
/// column that records it would fail only when its row is written, after
/// the files before it ran: refuse it up front.
fn check_fits(
    file: &MigrationFile,
    widths: &Widths,
    history: &History,
) -> Result<(), MigrateError> {
    let fields = [
        (
            "script",
            "its path below the migrations directory",
            file.script.as_str(),
            widths.script,
            "shorten its directories or its name",
        ),
        (
            "description",
            "its description",
            file.name.description.as_str(),
            widths.description,
            "shorten its name",
        ),
        (
            "version",
            "its version",
            file.version().map(|v| v.as_str()).unwrap_or_default(),
            widths.version,
            "give it a shorter version",
        ),
    ];
    for (column, what, value, width, fix) in fields {
        let n = value.chars().count();
        if let Some(w) = width
            && n > w
        {
            return Err(MigrateError::Entry {
                path: file.path.clone(),
                reason: format!(
                    "cannot be recorded: {what} has {n} characters and column {column} of history table {} holds {w}; {fix}",
                    history.table.plain()
                ),
            });
        }
    }
    Ok(())
}

/// A target version that no migration has (no file, no history row) is a
/// typo more often than not: refused, as Flyway refuses it ("No migration
/// with a target version ... could be found"), unless written `V?`.
fn check_target(plan: &Plan<'_>, opts: &StepOptions) -> Result<(), MigrateError> {
    let crate::Target::Version(target) = &opts.target else {
        return Ok(());
    };
    let known = plan.migrations.iter().any(|m| {
        m.version
            .as_deref()
            .and_then(|v| evolve_core::migration::Version::parse(v).ok())
            .is_some_and(|v| v == *target)
    });
    if known {
        return Ok(());
    }
    Err(MigrateError::Usage(format!(
        "no migration has target version {target} (no file, no history row), as Flyway requires of a target; give --target (or flyway.target) the version of a migration, {target}? to go up to it all the same, or latest, current or next"
    )))
}

fn check(plan: &Plan<'_>, opts: &StepOptions) -> Result<(), MigrateError> {
    let problems = plan.problems(opts);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(MigrateError::Invalid { problems })
    }
}

/// Whether `file` runs outside a transaction, as Flyway decides it: the
/// file says so (`-- evolve:no-transaction`, or `executeInTransaction=false`
/// in its script configuration), every statement of it is one PostgreSQL
/// refuses in a transaction (Flyway runs such a file without one, `mixed`
/// or not), or `mixed` lets a file that mixes both kinds run without one.
/// `executeInTransaction=true` keeps it in one whatever it holds.
pub(crate) fn no_transaction(file: &MigrationFile, mixed: bool) -> bool {
    if file
        .config
        .as_ref()
        .is_some_and(|c| c.execute_in_transaction == Some(true))
    {
        return false;
    }
    script_no_transaction(&file.parsed, mixed)
}

/// [`no_transaction`] for a script without a configuration file.
pub(crate) fn script_no_transaction(script: &evolve_core::migration::Script, mixed: bool) -> bool {
    use evolve_core::migration::StatementKind;
    let statements = &script.statements;
    let non_transactional = |s: &Statement| s.kind == StatementKind::NonTransactional;
    script.directives.no_transaction
        || (!statements.is_empty() && statements.iter().all(non_transactional))
        || (mixed && statements.iter().any(non_transactional))
}

/// Whether `group` can put every step in one transaction: yes when all of
/// them run in one; with `mixed`, steps that cannot make each file run on
/// its own instead (Flyway runs the whole group outside a transaction
/// then); without it, a mix is refused as Flyway refuses it.
fn group_transaction(steps: &[Step<'_>], mixed: bool) -> Result<bool, MigrateError> {
    let outside = steps.iter().find(|s| no_transaction(s.file, mixed));
    match outside {
        None => Ok(true),
        Some(_) if mixed => Ok(false),
        Some(step) if steps.iter().any(|s| !no_transaction(s.file, mixed)) => {
            Err(MigrateError::Script {
                script: step.file.script.clone(),
                reason: "runs outside a transaction, and group = true puts the pending migrations in one transaction; set mixed = true (--mixed) to run each of them on its own, or apply this file without --group".into(),
            })
        }
        Some(_) => Ok(false),
    }
}

/// A transactional file may not end its own transaction, nor contain a
/// statement PostgreSQL refuses inside one (which, without `mixed`, means
/// it mixes such statements with others, as Flyway refuses it).
fn check_runnable(file: &MigrationFile, mixed: bool) -> Result<(), MigrateError> {
    if no_transaction(file, mixed) {
        return Ok(());
    }
    use evolve_core::migration::StatementKind;
    let forced = file
        .config
        .as_ref()
        .filter(|c| c.execute_in_transaction == Some(true));
    for s in &file.parsed.statements {
        let reason = match (&s.kind, forced) {
            (StatementKind::TransactionControl, _) => format!(
                "line {}: {} would end the transaction that evolve runs the file in; remove it, or make '-- evolve:no-transaction' the first line",
                s.line,
                first_words(&s.text)
            ),
            (StatementKind::NonTransactional, Some(config)) => format!(
                "line {}: {} cannot run inside a transaction, and {} says executeInTransaction=true; set it to false",
                s.line,
                first_words(&s.text),
                config.script
            ),
            (StatementKind::NonTransactional, None) => format!(
                "line {}: {} cannot run inside a transaction, and the file also holds statements that run in one, a mix Flyway refuses too; move it to a file of its own, make '-- evolve:no-transaction' the first line, or set mixed = true (--mixed) to run such files outside a transaction",
                s.line,
                first_words(&s.text)
            ),
            (StatementKind::Other, _) => continue,
        };
        return Err(MigrateError::Script {
            script: file.script.clone(),
            reason,
        });
    }
    Ok(())
}

/// The first words of a statement for a message: its keywords upper-cased,
/// names as written (PostgreSQL folds an unquoted name to lower case, so
/// upper-casing it would name another object).
fn first_words(text: &str) -> String {
    const KEYWORDS: [&str; 36] = [
        "abort",
        "all",
        "alter",
        "analyze",
        "begin",
        "cluster",
        "commit",
        "concurrently",
        "create",
        "database",
        "detach",
        "discard",
        "drop",
        "end",
        "exists",
        "full",
        "if",
        "index",
        "not",
        "on",
        "partition",
        "prepare",
        "prepared",
        "reindex",
        "release",
        "rollback",
        "savepoint",
        "schema",
        "start",
        "system",
        "table",
        "tablespace",
        "transaction",
        "unique",
        "vacuum",
        "work",
    ];
    text.split_whitespace()
        .take(4)
        .map(|w| {
            if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(w)) {
                w.to_uppercase()
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a file failed.
struct Failure {
    /// Where in the file: the error's own position when the server sent one,
    /// else the start of the failing statement.
    line: u32,
    column: u32,
    statement: Option<String>,
    /// What evolve was doing, when it was not the file's own statement.
    context: Option<String>,
    error: tokio_postgres::Error,
    blockers: Vec<SessionInfo>,
}

struct Runner<'o> {
    opts: &'o Options,
    client: Client,
    monitor: Client,
    pid: i32,
    /// The role migrations run as (named when it cannot see a blocker's
    /// query).
    role: String,
    history: History,
    /// Ends every migration: `RESET ALL` and the session's own settings.
    reset: String,
    insert: Prepared,
    begin_sql: String,
    populate_in_transaction: bool,
    /// The migrations directory's callbacks.
    files: &'o MigrationSet,
    mixed: bool,
    /// Every step runs in one transaction, begun by `run_steps`.
    group: bool,
    /// Whether an `afterVersioned` is still due (Flyway's rule: before the
    /// first repeatable migration, else at the end).
    versioned_callback_due: bool,
    /// Runs the jobs of `-- evolve:backfill` files.
    backfill: Option<std::sync::Arc<dyn crate::change::BackfillRunner>>,
    /// `--pipeline`.
    coordinator: Option<std::sync::Arc<dyn coordinate::Coordinator>>,
    /// `--allow-breaking-contract`.
    allow_breaking_contract: Vec<String>,
    pipeline_timeout: std::time::Duration,
    /// The coordination of the file running now, recorded with its
    /// history row.
    coordinating: Vec<coordinate::TablePlan>,
    /// Under `group`: the `applied` events of the group, said once it has
    /// committed (a failure rolls every one of them back).
    deferred: Vec<Event>,
}

/// Where a statement of a transaction comes from.
enum Piece<'a> {
    File(usize),
    Callback(&'a CallbackFile, &'a Statement),
}

/// How a transactional attempt ended badly.
enum Attempt {
    /// PostgreSQL refused something: maybe retried.
    Failed(Failure),
    /// evolve refused before running: never retried.
    Refused(MigrateError),
}

impl From<Failure> for Attempt {
    fn from(f: Failure) -> Self {
        Attempt::Failed(f)
    }
}

impl<'o> Runner<'o> {
    async fn new(
        opts: &'o Options,
        client: Client,
        history: History,
        reset: String,
        files: &'o MigrationSet,
    ) -> Result<Self, MigrateError> {
        let monitor = crate::open(opts, "evolve migrate (monitor)").await?;
        let row = client
            .query_one("SELECT pg_backend_pid(), current_user::text", &[])
            .await?;
        let pid: i32 = row.try_get(0)?;
        let role: String = row.try_get(1)?;
        let insert = client.prepare(&history.insert_sql()).await?;
        let begin_sql = format!(
            "BEGIN; SET LOCAL lock_timeout = {}",
            opts.lock_timeout.as_millis()
        );
        Ok(Runner {
            opts,
            client,
            monitor,
            pid,
            role,
            history,
            reset,
            insert,
            begin_sql,
            populate_in_transaction: false,
            files,
            mixed: false,
            group: false,
            versioned_callback_due: true,
            backfill: None,
            coordinator: None,
            allow_breaking_contract: Vec::new(),
            pipeline_timeout: crate::DEFAULT_PIPELINE_TIMEOUT,
            coordinating: Vec::new(),
            deferred: Vec::new(),
        })
    }

    /// Runs `steps` in order (in one transaction under `group`), with the
    /// `afterVersioned` and `beforeRepeatables` callbacks where Flyway runs
    /// them; returns how many ran and raises `current` to the highest
    /// version applied.
    async fn run_steps(
        &mut self,
        steps: &[Step<'_>],
        current: &mut Option<evolve_core::migration::Version>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<usize, MigrateError> {
        if self.group && !steps.is_empty() {
            self.client.batch_execute(&self.begin_sql).await?;
        }
        let mut rebuilt = Vec::new();
        let mut applied = 0;
        for step in steps {
            if step.file.version().is_none() && self.versioned_callback_due {
                self.versioned_callback_due = false;
                self.group_callbacks("afterVersioned").await?;
                self.group_callbacks("beforeRepeatables").await?;
            }
            if let Err(e) = self.run_step(step, &mut rebuilt, on_event).await {
                if self.group {
                    let _ = self
                        .client
                        .batch_execute(&format!("ROLLBACK; {}", self.reset))
                        .await;
                }
                return Err(e);
            }
            applied += 1;
            if let Some(v) = step.file.version()
                && current.as_ref().is_none_or(|c| v > c)
            {
                *current = Some(v.clone());
            }
        }
        if self.group && !steps.is_empty() {
            self.client
                .batch_execute(&format!("COMMIT; {}", self.reset))
                .await?;
            for e in std::mem::take(&mut self.deferred) {
                on_event(e);
            }
            for (file, plan) in &rebuilt {
                self.after_rebuild(file, plan, on_event).await?;
            }
        }
        if self.versioned_callback_due {
            callbacks::run(&self.client, &self.reset, self.files, "afterVersioned").await?;
        }
        Ok(applied)
    }

    /// Runs the callbacks of `event` between two steps: inside the group's
    /// transaction under `group`, else each in its own.
    async fn group_callbacks(&self, event: &str) -> Result<(), MigrateError> {
        if !self.group {
            return callbacks::run(&self.client, &self.reset, self.files, event).await;
        }
        for file in self.files.callbacks_of(event) {
            for stmt in &file.parsed.statements {
                if let Err(e) = self.client.batch_execute(&stmt.text).await {
                    return Err(callbacks::failed(
                        file,
                        Some((stmt, position_in(&e, &stmt.text).unwrap_or(0))),
                        &e,
                        "the group's transaction was rolled back; none of the pending migrations was applied",
                    ));
                }
            }
        }
        Ok(())
    }

    /// How many times a file is retried after a lock timeout: never inside
    /// a group, whose transaction a failure ends.
    fn lock_retries(&self) -> u32 {
        if self.group {
            0
        } else {
            self.opts.lock_retries
        }
    }

    /// Runs one step; under `--pipeline`, with the pipeline moved off the
    /// columns it changes before it, and onto their new shape after its
    /// commit (see [`coordinate`]).
    async fn run_step<'f>(
        &mut self,
        step: &Step<'f>,
        rebuilt: &mut Vec<(&'f MigrationFile, RebuildPlan)>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), MigrateError> {
        let Some(coordinator) = self.coordinator.clone() else {
            return self.run_step_alone(step, rebuilt, on_event).await;
        };
        let file = step.file;
        let plans = coordinate_plan(
            &self.client,
            file,
            coordinator.as_ref(),
            &self.allow_breaking_contract,
            "was not run",
        )
        .await?;
        if plans.is_empty() {
            return self.run_step_alone(step, rebuilt, on_event).await;
        }
        let not_run = |message: String| MigrateError::Coordination {
            script: file.script.clone(),
            message: format!("was not run: {message}"),
        };
        if no_transaction(file, self.mixed) || step.resume.is_some() {
            return Err(not_run(format!(
                "it runs outside a transaction and changes columns the pipeline ingests ({} of table {}); put those statements in a transactional file of their own",
                plans[0].columns_text(),
                plans[0].old_table
            )));
        }
        let timeout = self.pipeline_timeout;
        coordinate::before(coordinator.as_ref(), &plans, timeout)
            .await
            .map_err(not_run)?;
        for p in &plans {
            on_event(Event::Coordinated {
                script: file.script.clone(),
                pipeline: coordinator.target(),
                when: "before".into(),
                views: p.views.iter().map(|v| v.view.clone()).collect(),
                old_table: p.old_table.clone(),
                table: p.excluding.table.clone(),
                columns: p.columns_text(),
                steps: p.before().iter().map(coordinate::Step::text).collect(),
            });
        }
        self.coordinating = plans.clone();
        let ran = self.run_step_alone(step, rebuilt, on_event).await;
        self.coordinating.clear();
        if let Err(e) = ran {
            return match coordinate::undo_all(coordinator.as_ref(), &plans, timeout).await {
                Ok(()) => {
                    for p in &plans {
                        on_event(Event::CoordinationUndone {
                            script: file.script.clone(),
                            views: p.views.iter().map(|v| v.view.clone()).collect(),
                            table: p.restore.table.clone(),
                        });
                    }
                    Err(e)
                }
                Err(u) => Err(MigrateError::Coordination {
                    script: file.script.clone(),
                    message: format!(
                        "failed ({}), and moving the pipeline back failed too: {u}; finish by hand with the statements `evolve migrate apply --dry-run --pipeline` prints",
                        e.to_string().lines().next().unwrap_or("")
                    ),
                }),
            };
        }
        coordinate::after(coordinator.as_ref(), &plans, timeout)
            .await
            .map_err(|e| MigrateError::Coordination {
                script: file.script.clone(),
                message: format!(
                    "was applied, but the pipeline's steps after it did not finish: {e}; the materialized views read {}, which is consistent; run the remaining statements with evolve sql",
                    plans
                        .iter()
                        .map(|p| p.excluding.table.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        self.client
            .execute(
                &format!(
                    "UPDATE {t} SET state = 'done' WHERE installed_rank = (SELECT max(installed_rank) FROM {t})",
                    t = self.history.pipeline
                ),
                &[],
            )
            .await?;
        for p in plans.iter().filter(|p| p.including.is_some()) {
            on_event(Event::Coordinated {
                script: file.script.clone(),
                pipeline: coordinator.target(),
                when: "after".into(),
                views: p.views.iter().map(|v| v.view.clone()).collect(),
                old_table: p.excluding.table.clone(),
                table: p.final_table().to_string(),
                columns: p.columns_text(),
                steps: p.after().iter().map(coordinate::Step::text).collect(),
            });
        }
        Ok(())
    }

    /// Records the coordination of the file running now beside its
    /// history row `rank`, in its transaction.
    async fn record_coordination(&self, rank: i32) -> Result<(), tokio_postgres::Error> {
        let Some(coordinator) = &self.coordinator else {
            return Ok(());
        };
        let target = coordinator.target();
        for p in &self.coordinating {
            let upstream = format!("{}.{}", p.schema, p.upstream_table);
            let views = p
                .views
                .iter()
                .map(|v| v.view.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            self.client
                .execute(
                    &format!(
                        "INSERT INTO {} (installed_rank, pipeline, upstream, columns, views, old_table, excluding_table, final_table, state) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'excluded')",
                        self.history.pipeline
                    ),
                    &[
                        &rank,
                        &target,
                        &upstream,
                        &p.columns_text(),
                        &views,
                        &p.old_table,
                        &p.excluding.table,
                        &p.final_table(),
                    ],
                )
                .await?;
        }
        Ok(())
    }

    async fn run_step_alone<'f>(
        &mut self,
        step: &Step<'f>,
        rebuilt: &mut Vec<(&'f MigrationFile, RebuildPlan)>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), MigrateError> {
        let started = Instant::now();
        let file = step.file;
        let handed_off = match (&file.parsed.directives.backfill, self.backfill.clone()) {
            (Some(job), Some(runner)) if step.resume.is_none() => {
                Some(self.hand_off(file, job, runner.as_ref(), on_event).await?)
            }
            _ => None,
        };
        let attempts = if let Some(empty) = &handed_off {
            // Only the history row: the job does the UPDATE.
            self.run_transactional(empty, on_event).await?.0
        } else if no_transaction(file, self.mixed) {
            self.run_no_transaction(file, step.resume.as_ref(), on_event)
                .await?
        } else {
            let (attempts, plan) = self.run_transactional(file, on_event).await?;
            if let Some(plan) = plan {
                if self.group {
                    rebuilt.push((file, plan));
                } else {
                    self.after_rebuild(file, &plan, on_event).await?;
                }
            }
            attempts
        };
        let applied = Event::Applied {
            script: file.script.clone(),
            version: file.version().map(|v| v.as_str().to_string()),
            description: file.name.description.clone(),
            kind: file.kind(),
            statements: file.parsed.statements.len(),
            execution_time_ms: started.elapsed().as_millis() as u64,
            attempts,
            resumed_at_statement: step.resume.as_ref().map(|r| r.statements_done + 1),
            out_of_order: step.out_of_order,
        };
        if self.group {
            self.deferred.push(applied);
        } else {
            on_event(applied);
        }
        Ok(())
    }

    /// Hands a `-- evolve:backfill` file's UPDATE to its job, and returns
    /// the file without statements, whose run records it as applied.
    async fn hand_off(
        &self,
        file: &MigrationFile,
        job: &str,
        runner: &dyn crate::change::BackfillRunner,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<MigrationFile, MigrateError> {
        let [statement] = file.parsed.statements.as_slice() else {
            return Err(MigrateError::Script {
                script: file.script.clone(),
                reason: format!(
                    "hands off to backfill job {job} and must hold exactly one UPDATE statement, not {}; keep other statements in files of their own",
                    file.parsed.statements.len()
                ),
            });
        };
        let handoff = crate::change::BackfillHandoff {
            job: job.to_string(),
            script: file.script.clone(),
            statement: statement.text.clone(),
        };
        let outcome = runner
            .hand_off(&handoff)
            .await
            .map_err(|reason| MigrateError::Script {
                script: file.script.clone(),
                reason,
            })?;
        on_event(Event::BackfillHandedOff {
            script: file.script.clone(),
            job: job.to_string(),
            outcome,
        });
        Ok(MigrationFile {
            name: file.name.clone(),
            script: file.script.clone(),
            path: file.path.clone(),
            checksum: file.checksum,
            text: String::new(),
            parsed: evolve_core::migration::Script {
                directives: file.parsed.directives.clone(),
                statements: Vec::new(),
            },
            config: file.config.clone(),
        })
    }

    /// Runs a file in one transaction with its history row (under `group`,
    /// in the group's). Returns the number of attempts it took, and what
    /// was rebuilt, to refresh after the commit.
    async fn run_transactional(
        &mut self,
        file: &MigrationFile,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(u32, Option<RebuildPlan>), MigrateError> {
        let needs_rebuild = !file.parsed.directives.rebuild_dependents_off
            && file
                .parsed
                .statements
                .iter()
                .any(|s| !blocked_alters(&s.text).is_empty());
        let mut attempt = 0;
        // Columns PostgreSQL refused to alter at run time because of views
        // (an ALTER the parser could not see): the file is retried once with
        // the rebuild for them.
        let mut refused_targets: Option<Vec<String>> = None;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = if needs_rebuild || refused_targets.is_some() {
                self.try_rebuild_transaction(
                    file,
                    started,
                    refused_targets.clone().unwrap_or_default(),
                )
                .await
            } else {
                self.try_transaction(file, started)
                    .await
                    .map(|()| None)
                    .map_err(Attempt::Failed)
            };
            let failure = match result {
                Ok(plan) => return Ok((attempt, plan)),
                Err(Attempt::Failed(f)) => f,
                Err(Attempt::Refused(e)) => {
                    let _ = self.client.batch_execute("ROLLBACK").await;
                    return Err(e);
                }
            };
            // The transaction is aborted or gone; end it whatever its state.
            let _ = self.client.batch_execute("ROLLBACK").await;
            if self.group {
                return self
                    .retry_or_fail(
                        file,
                        failure,
                        attempt,
                        on_event,
                        "the group's transaction was rolled back; none of the pending migrations was applied",
                    )
                    .await
                    .map(|()| (attempt, None));
            }
            if refused_targets.is_none() && !file.parsed.directives.rebuild_dependents_off {
                let targets = rebuild::targets_from_refusal(&self.client, &failure.error).await?;
                if !targets.is_empty() {
                    refused_targets = Some(targets);
                    attempt -= 1;
                    continue;
                }
            }
            self.retry_or_fail(
                file,
                failure,
                attempt,
                on_event,
                "the transaction was rolled back; nothing of this file was applied",
            )
            .await?;
        }
    }

    async fn try_transaction(&self, file: &MigrationFile, started: Instant) -> Result<(), Failure> {
        let at_start = |error| Failure {
            line: 1,
            column: 1,
            statement: None,
            context: None,
            error,
            blockers: Vec::new(),
        };
        if file.parsed.statements.iter().any(|s| s.copy_data.is_some()) {
            // COPY's rows go through the COPY protocol, which a batch of
            // simple queries cannot carry: one statement at a time.
            if !self.group {
                self.client
                    .batch_execute(&self.begin_sql)
                    .await
                    .map_err(at_start)?;
            }
            let first = file.parsed.statements.first();
            let (line, column) = first.map(|s| (s.line, s.column)).unwrap_or((1, 1));
            self.each_callbacks_in_transaction("beforeEachMigrate", line, column)
                .await?;
            for stmt in &file.parsed.statements {
                if let Err(w) = self.execute_statement(stmt).await {
                    let within = position_in(&w.error, &stmt.text).unwrap_or(0);
                    let (line, column) = locate(file, stmt, within);
                    return Err(Failure {
                        line,
                        column,
                        statement: Some(stmt.text.clone()),
                        context: None,
                        error: w.error,
                        blockers: w.blockers,
                    });
                }
            }
            let end = file_end(file);
            self.each_callbacks_in_transaction("afterEachMigrate", end.0, end.1)
                .await?;
            return self.record_and_commit(file, started).await;
        }
        // One round trip for the whole file: BEGIN, SET LOCAL and every
        // statement as one simple query. PostgreSQL still runs them one at a
        // time (each parsed-analysed just before it runs, so DDL is visible
        // to what follows); the error's position, or else the count of
        // statements that completed, says which one failed.
        // The beforeEachMigrate and afterEachMigrate callbacks run in the
        // same transaction, around the file's statements.
        let mut sql = String::with_capacity(file.text.len() + self.begin_sql.len() + 16);
        let mut pieces = Vec::with_capacity(file.parsed.statements.len());
        fn push<'a>(
            pieces: &mut Vec<(usize, Piece<'a>)>,
            piece: Piece<'a>,
            text: &str,
            sql: &mut String,
        ) {
            if !sql.is_empty() {
                sql.push_str(";\n");
            }
            pieces.push((sql.len(), piece));
            sql.push_str(text);
        }
        // BEGIN and SET LOCAL complete first (the group's ran before).
        let mut opening = 0;
        if !self.group {
            sql.push_str(&self.begin_sql);
            opening = 2;
        }
        for cb in self.files.callbacks_of("beforeEachMigrate") {
            for stmt in &cb.parsed.statements {
                push(&mut pieces, Piece::Callback(cb, stmt), &stmt.text, &mut sql);
            }
        }
        for (i, stmt) in file.parsed.statements.iter().enumerate() {
            push(&mut pieces, Piece::File(i), &stmt.text, &mut sql);
        }
        for cb in self.files.callbacks_of("afterEachMigrate") {
            for stmt in &cb.parsed.statements {
                push(&mut pieces, Piece::Callback(cb, stmt), &stmt.text, &mut sql);
            }
        }
        if sql.is_empty() {
            return self.record_and_commit(file, started).await;
        }
        if let Err(w) = self.execute_watched(&sql).await {
            let by_position = position_in(&w.error, &sql).and_then(|at| {
                let i = pieces.iter().rposition(|(start, _)| *start <= at)?;
                Some((i, at - pieces[i].0))
            });
            let by_count = w
                .completed
                .checked_sub(opening)
                .filter(|&i| i < pieces.len());
            let Some((i, within)) = by_position.or(by_count.map(|i| (i, 0))) else {
                return Err(at_start(w.error));
            };
            return Err(match &pieces[i].1 {
                Piece::File(n) => {
                    let stmt = &file.parsed.statements[*n];
                    let (line, column) = locate(file, stmt, within);
                    Failure {
                        line,
                        column,
                        statement: Some(stmt.text.clone()),
                        context: None,
                        error: w.error,
                        blockers: w.blockers,
                    }
                }
                Piece::Callback(cb, stmt) => {
                    let (line, column) = if within > 0 && within <= stmt.text.len() {
                        line_col(&cb.text, stmt.offset + within)
                    } else {
                        (stmt.line, stmt.column)
                    };
                    Failure {
                        line: 1,
                        column: 1,
                        statement: Some(stmt.text.clone()),
                        context: Some(format!(
                            "running callback {} (line {line}, column {column})",
                            cb.script
                        )),
                        error: w.error,
                        blockers: w.blockers,
                    }
                }
            });
        }
        self.record_and_commit(file, started).await
    }

    /// Inserts `file`'s history row; returns it (installed_rank).
    async fn insert_history(
        &self,
        file: &MigrationFile,
        execution_time_ms: i32,
        success: bool,
    ) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
        let version = file.version().map(|v| v.as_str().to_string());
        self.client
            .query_one(
                &self.insert,
                &[
                    &version,
                    &file.name.description,
                    &if file.is_baseline() {
                        crate::history::TYPE_SQL_BASELINE
                    } else {
                        TYPE_SQL
                    },
                    &file.script,
                    &file.checksum,
                    &self.opts.installed_by,
                    &execution_time_ms,
                    &success,
                ],
            )
            .await
    }

    /// Inserts the history row and commits.
    async fn record_and_commit(
        &self,
        file: &MigrationFile,
        started: Instant,
    ) -> Result<(), Failure> {
        let elapsed = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        let end = file_end(file);
        if !self.coordinating.is_empty() {
            // The history row, the coordination and the commit: one
            // transaction.
            let fail = |statement: &str, error| Failure {
                line: end.0,
                column: end.1,
                statement: Some(statement.into()),
                context: None,
                error,
                blockers: Vec::new(),
            };
            let row = self
                .insert_history(file, elapsed, true)
                .await
                .map_err(|e| fail("(recording the migration in the history table)", e))?;
            let rank: i32 = row
                .try_get(0)
                .map_err(|e| fail("(recording the migration in the history table)", e))?;
            self.record_coordination(rank)
                .await
                .map_err(|e| fail("(recording the pipeline's coordination)", e))?;
            return self
                .client
                .batch_execute(&format!("COMMIT; {}", self.reset))
                .await
                .map_err(|e| fail("COMMIT", e));
        }
        // The history row and COMMIT go out together (tokio-postgres
        // pipelines concurrent requests): if the INSERT fails, the COMMIT of
        // the aborted transaction is a ROLLBACK, so nothing is half-written.
        // RESET ALL keeps settings a file changed with SET from leaking into
        // the next file.
        let insert = self.insert_history(file, elapsed, true);
        let commit_sql = if self.group {
            String::new()
        } else {
            format!("COMMIT; {}", self.reset)
        };
        let commit = self.client.batch_execute(&commit_sql);
        let (inserted, committed) = tokio::join!(insert, commit);
        let fail = |statement: &str, error| Failure {
            line: end.0,
            column: end.1,
            statement: Some(statement.into()),
            context: None,
            error,
            blockers: Vec::new(),
        };
        inserted.map_err(|e| fail("(recording the migration in the history table)", e))?;
        committed.map_err(|e| fail("COMMIT", e))?;
        Ok(())
    }

    /// The transactional path for a file whose ALTERs views would block:
    /// capture, drop top-down, statements, recreate bottom-up, history row,
    /// commit. Statements run one by one here (a rebuild is rare and slow
    /// anyway), so every failure names its statement or dependent.
    async fn try_rebuild_transaction(
        &self,
        file: &MigrationFile,
        started: Instant,
        extra_targets: Vec<String>,
    ) -> Result<Option<RebuildPlan>, Attempt> {
        let at_start = |error| Failure {
            line: 1,
            column: 1,
            statement: None,
            context: None,
            error,
            blockers: Vec::new(),
        };
        if !self.group {
            self.client
                .batch_execute(&self.begin_sql)
                .await
                .map_err(at_start)?;
        }
        let populate =
            self.populate_in_transaction || file.parsed.directives.populate_in_transaction;
        let plan = rebuild::plan_with(&self.client, file, populate, extra_targets)
            .await
            .map_err(Attempt::Refused)?;
        let first = file.parsed.statements.first();
        let (line, column) = first.map(|s| (s.line, s.column)).unwrap_or((1, 1));
        for (dependent, sql) in plan.drops() {
            self.execute_watched(sql).await.map_err(|w| Failure {
                line,
                column,
                statement: Some(sql.to_string()),
                context: Some(format!("dropping dependent {}", dependent.name)),
                error: w.error,
                blockers: w.blockers,
            })?;
        }
        self.each_callbacks_in_transaction("beforeEachMigrate", line, column)
            .await?;
        for stmt in &file.parsed.statements {
            if let Err(w) = self.execute_statement(stmt).await {
                let within = position_in(&w.error, &stmt.text).unwrap_or(0);
                let (line, column) = locate(file, stmt, within);
                return Err(Failure {
                    line,
                    column,
                    statement: Some(stmt.text.clone()),
                    context: None,
                    error: w.error,
                    blockers: w.blockers,
                }
                .into());
            }
        }
        let end = file_end(file);
        for (dependent, sql) in plan.creates() {
            self.execute_watched(sql).await.map_err(|w| Failure {
                line: end.0,
                column: end.1,
                statement: Some(sql.to_string()),
                context: Some(format!(
                    "recreating {} {} after the file's statements; the file must leave every column it reads in place, or drop and recreate the dependent itself",
                    dependent.kind.as_str(),
                    dependent.name
                )),
                error: w.error,
                blockers: w.blockers,
            })?;
        }
        self.each_callbacks_in_transaction("afterEachMigrate", end.0, end.1)
            .await?;
        // The history row, what was rebuilt, and the commit: one
        // transaction, so the record can never disagree with the catalog.
        let elapsed = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        let fail = |statement: &str, error| Failure {
            line: end.0,
            column: end.1,
            statement: Some(statement.into()),
            context: None,
            error,
            blockers: Vec::new(),
        };
        let row = self
            .insert_history(file, elapsed, true)
            .await
            .map_err(|e| fail("(recording the migration in the history table)", e))?;
        let rank: i32 = row
            .try_get(0)
            .map_err(|e| fail("(recording the migration in the history table)", e))?;
        for d in &plan.dependents {
            let kind = d.kind.as_str();
            let depth = i32::try_from(d.depth).unwrap_or(i32::MAX);
            self.client
                .execute(
                    &format!(
                        "INSERT INTO {} (installed_rank, dependent, kind, depth) VALUES ($1, $2, $3, $4)",
                        self.history.rebuilt
                    ),
                    &[&rank, &d.name, &kind, &depth],
                )
                .await
                .map_err(|e| fail("(recording the rebuilt dependents)", e))?;
        }
        self.record_coordination(rank)
            .await
            .map_err(|e| fail("(recording the pipeline's coordination)", e))?;
        if !self.group {
            self.client
                .batch_execute(&format!("COMMIT; {}", self.reset))
                .await
                .map_err(|e| fail("COMMIT", e))?;
        }
        Ok(Some(plan))
    }

    /// The `beforeEachMigrate` or `afterEachMigrate` callbacks, statement
    /// by statement in the migration's transaction; a failure is placed at
    /// `line`, `column` of the migration.
    async fn each_callbacks_in_transaction(
        &self,
        event: &str,
        line: u32,
        column: u32,
    ) -> Result<(), Failure> {
        for cb in self.files.callbacks_of(event) {
            for stmt in &cb.parsed.statements {
                self.execute_watched(&stmt.text)
                    .await
                    .map_err(|w| Failure {
                        line,
                        column,
                        statement: Some(stmt.text.clone()),
                        context: Some(format!(
                            "running callback {} (line {}, column {})",
                            cb.script, stmt.line, stmt.column
                        )),
                        error: w.error,
                        blockers: w.blockers,
                    })?;
            }
        }
        Ok(())
    }

    /// After the commit: refresh the recreated materialized views that held
    /// data, bottom-up, then ANALYZE them; report how long each was
    /// unreadable.
    async fn after_rebuild(
        &self,
        file: &MigrationFile,
        plan: &RebuildPlan,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), MigrateError> {
        let committed = Instant::now();
        // A file whose ALTERs had nothing to rebuild says nothing of it.
        if !plan.dependents.is_empty() {
            on_event(Event::Rebuilt {
                script: file.script.clone(),
                dependents: plan.dependents.iter().map(|d| d.name.clone()).collect(),
            });
        }
        for m in plan.to_refresh() {
            let refresh_ms =
                crate::refresh::refresh_recorded(&self.client, &m.log_name, &m.refresh_sql())
                    .await?;
            on_event(Event::Refreshed {
                name: m.name.clone(),
                refresh_ms,
                unreadable_ms: committed.elapsed().as_millis() as u64,
            });
        }
        for m in plan.dependents.iter().filter(|d| d.materialized) {
            self.client.batch_execute(&m.analyze_sql()).await?;
        }
        Ok(())
    }

    /// Decides what a failure means: a lock timeout with retries left waits
    /// and returns Ok (the caller retries); anything else is the error.
    async fn retry_or_fail(
        &self,
        file: &MigrationFile,
        failure: Failure,
        attempt: u32,
        on_event: &mut dyn FnMut(Event),
        outcome: &str,
    ) -> Result<(), MigrateError> {
        if evolve_pg::is_lock_timeout(&failure.error) {
            if attempt <= self.lock_retries() {
                let wait = backoff(self.opts.retry_delay, attempt);
                on_event(Event::LockRetry {
                    script: file.script.clone(),
                    line: failure.line,
                    attempt,
                    retries: self.lock_retries(),
                    wait_ms: wait.as_millis() as u64,
                    blockers: failure.blockers,
                    role: self.role.clone(),
                });
                tokio::time::sleep(wait).await;
                return Ok(());
            }
            return Err(MigrateError::LockTimeout {
                script: file.script.clone(),
                line: failure.line,
                attempts: attempt,
                lock_timeout_ms: self.opts.lock_timeout.as_millis() as u64,
                blockers: failure.blockers,
                role: self.role.clone(),
            });
        }
        let (line, column) = (failure.line, failure.column);
        let error = match failure.error.as_db_error() {
            Some(db) => describe_db_error(db, None),
            None => failure.error.to_string(),
        };
        let mut statement = failure
            .statement
            .as_deref()
            .map(|s| format!("\n  statement: {}", excerpt(s)))
            .unwrap_or_default();
        if let Some(context) = &failure.context {
            statement = format!("\n  while {context}{statement}");
        }
        Err(MigrateError::Statement {
            script: file.script.clone(),
            line,
            column,
            error: format!("{error}{statement}"),
            outcome: outcome.to_string(),
        })
    }

    /// Runs `sql` (one statement or several) as one simple query; while it
    /// runs longer than a moment, asks the monitor connection who blocks it,
    /// so a lock timeout can name them.
    async fn execute_watched(&self, sql: &str) -> Result<(), Watched> {
        let exec = async {
            let stream = self
                .client
                .simple_query_raw(sql)
                .await
                .map_err(|e| (e, 0))?;
            futures_util::pin_mut!(stream);
            let mut completed = 0;
            while let Some(message) = stream.next().await {
                match message {
                    Ok(SimpleQueryMessage::CommandComplete(_)) => completed += 1,
                    Ok(_) => {}
                    Err(e) => return Err((e, completed)),
                }
            }
            Ok(())
        };
        self.watch(exec).await
    }

    /// Runs one statement of a file: `COPY ... FROM STDIN` with its rows
    /// (sent as Flyway sends them, through the COPY protocol), anything
    /// else as a simple query; watched as [`Runner::execute_watched`].
    async fn execute_statement(&self, stmt: &Statement) -> Result<(), Watched> {
        let Some(data) = &stmt.copy_data else {
            return self.execute_watched(&stmt.text).await;
        };
        let exec = async {
            use futures_util::SinkExt;
            let sink = self
                .client
                .copy_in::<_, std::io::Cursor<Vec<u8>>>(stmt.text.as_str())
                .await
                .map_err(|e| (e, 0))?;
            futures_util::pin_mut!(sink);
            sink.send(std::io::Cursor::new(data.clone().into_bytes()))
                .await
                .map_err(|e| (e, 0))?;
            sink.finish().await.map_err(|e| (e, 0))?;
            Ok(())
        };
        self.watch(exec).await
    }

    /// Awaits `exec`; while it runs longer than a moment, asks the monitor
    /// connection who blocks it, so a lock timeout can name them.
    async fn watch(
        &self,
        exec: impl std::future::Future<Output = Result<(), (tokio_postgres::Error, usize)>>,
    ) -> Result<(), Watched> {
        tokio::pin!(exec);
        let mut blockers = Vec::new();
        let mut delay = Duration::from_millis(50);
        loop {
            tokio::select! {
                result = &mut exec => {
                    return result.map_err(|(error, completed)| Watched { error, completed, blockers });
                }
                _ = tokio::time::sleep(delay) => {
                    if let Ok(found) = blocking_sessions(&self.monitor, self.pid).await
                        && !found.is_empty()
                    {
                        blockers = found;
                    }
                    delay = Duration::from_millis(200);
                }
            }
        }
    }

    /// Runs a no-transaction file statement by statement, recording
    /// progress after each. Returns the number of attempts of the slowest
    /// statement.
    async fn run_no_transaction(
        &mut self,
        file: &MigrationFile,
        resume: Option<&Resume>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<u32, MigrateError> {
        let statements = &file.parsed.statements;
        let started = Instant::now();
        let (rank, done) = match resume {
            Some(r) => {
                let done = r.statements_done.min(statements.len());
                if prefix_checksum(statements, done) != r.done_checksum {
                    return Err(MigrateError::Script {
                        script: file.script.clone(),
                        reason: format!(
                            "{} since; undo or finish {} by hand, then run 'evolve migrate repair' to remove the failed row",
                            if done == 1 {
                                "the statement that already ran was edited".to_string()
                            } else {
                                format!("the {done} statements that already ran were edited")
                            },
                            if done == 1 { "it" } else { "them" }
                        ),
                    });
                }
                (r.installed_rank, done)
            }
            None => {
                let row = self.insert_history(file, 0, false).await?;
                let rank: i32 = row.try_get(0)?;
                self.client
                    .execute(
                        &format!(
                            "INSERT INTO {} (installed_rank, statements_done, done_checksum) VALUES ($1, 0, $2)
                             ON CONFLICT (installed_rank) DO UPDATE SET statements_done = 0, done_checksum = excluded.done_checksum",
                            self.history.progress
                        ),
                        &[&rank, &prefix_checksum(statements, 0)],
                    )
                    .await?;
                (rank, 0)
            }
        };
        callbacks::run(&self.client, &self.reset, self.files, "beforeEachMigrate").await?;
        self.client
            .batch_execute(&format!(
                "SET lock_timeout = {}",
                self.opts.lock_timeout.as_millis()
            ))
            .await?;
        let mut max_attempts = 1;
        for (i, stmt) in statements.iter().enumerate().skip(done) {
            let mut attempt = 0;
            loop {
                attempt += 1;
                if let Some((schema, name)) = stmt.concurrent_index_name() {
                    self.drop_invalid_index(file, schema.as_deref(), &name, on_event)
                        .await?;
                }
                match self.execute_statement(stmt).await {
                    Ok(()) => break,
                    Err(w) => {
                        let within = position_in(&w.error, &stmt.text).unwrap_or(0);
                        let (line, column) = locate(file, stmt, within);
                        let failure = Failure {
                            line,
                            column,
                            statement: Some(stmt.text.clone()),
                            context: None,
                            error: w.error,
                            blockers: w.blockers,
                        };
                        let done = match i {
                            0 if statements.len() == 1 => "its statement was not applied".into(),
                            0 => format!("none of its {} statements was applied", statements.len()),
                            1 => format!(
                                "statement 1 of {} is applied and recorded",
                                statements.len()
                            ),
                            _ => format!(
                                "statements 1 to {i} of {} are applied and recorded",
                                statements.len()
                            ),
                        };
                        let outcome = format!(
                            "this file runs outside a transaction: {done}; fix the cause and run 'evolve migrate apply' to resume at statement {} (line {})",
                            i + 1,
                            stmt.line
                        );
                        if let Err(e) = self
                            .retry_or_fail(file, failure, attempt, on_event, &outcome)
                            .await
                        {
                            self.client.batch_execute(&self.reset).await?;
                            callbacks::run(
                                &self.client,
                                &self.reset,
                                self.files,
                                "afterEachMigrateError",
                            )
                            .await?;
                            return Err(e);
                        }
                    }
                }
            }
            max_attempts = max_attempts.max(attempt);
            self.client
                .execute(
                    &format!(
                        "UPDATE {} SET statements_done = $2, done_checksum = $3 WHERE installed_rank = $1",
                        self.history.progress
                    ),
                    &[
                        &rank,
                        &i32::try_from(i + 1).unwrap_or(i32::MAX),
                        &prefix_checksum(statements, i + 1),
                    ],
                )
                .await?;
        }
        self.client.batch_execute(&self.reset).await?;
        callbacks::run(&self.client, &self.reset, self.files, "afterEachMigrate").await?;
        let elapsed = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        let t = &self.history.table;
        self.client
            .execute(
                &format!(
                    "UPDATE {t} SET success = true, execution_time = $2, checksum = $3, installed_on = now() WHERE installed_rank = $1"
                ),
                &[&rank, &elapsed, &file.checksum],
            )
            .await?;
        self.client
            .execute(
                &format!(
                    "DELETE FROM {} WHERE installed_rank = $1",
                    self.history.progress
                ),
                &[&rank],
            )
            .await?;
        Ok(max_attempts)
    }

    /// A failed `CREATE INDEX CONCURRENTLY` leaves an INVALID index behind,
    /// which makes the same statement fail ("already exists") or, with IF
    /// NOT EXISTS, silently keep the useless index. Drop it first, unless
    /// another backend is still building it (an index is INVALID while its
    /// concurrent build runs, e.g. the build of a run that was killed): wait
    /// for that build, at most `index_build_wait`, then look again.
    async fn drop_invalid_index(
        &self,
        file: &MigrationFile,
        schema: Option<&str>,
        name: &str,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), MigrateError> {
        let mut waited: Option<Instant> = None;
        loop {
            let row = self
                .client
                .query_opt(
                    "SELECT n.nspname::text, c.oid, i.indrelid FROM pg_index i
                     JOIN pg_class c ON c.oid = i.indexrelid
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.relname = $1 AND NOT i.indisvalid
                       AND CASE WHEN $2::text IS NULL THEN pg_catalog.pg_table_is_visible(c.oid)
                                ELSE n.nspname = $2 END",
                    &[&name, &schema],
                )
                .await?;
            let Some(row) = row else {
                return Ok(());
            };
            let nsp: String = row.try_get(0)?;
            let index = QualifiedName::new(nsp, name);
            let builders = self
                .index_builders(row.try_get(1)?, row.try_get(2)?)
                .await?;
            if builders.is_empty() {
                self.client
                    .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"))
                    .await?;
                on_event(Event::InvalidIndexDropped {
                    script: file.script.clone(),
                    index: index.plain(),
                });
                return Ok(());
            }
            let since = match waited {
                Some(since) => since,
                None => {
                    on_event(Event::IndexBuildWait {
                        script: file.script.clone(),
                        index: index.plain(),
                        builders: builders.clone(),
                        max_wait_ms: self.opts.index_build_wait.as_millis() as u64,
                    });
                    *waited.insert(Instant::now())
                }
            };
            if since.elapsed() >= self.opts.index_build_wait {
                return Err(MigrateError::IndexBuilding {
                    script: file.script.clone(),
                    index: index.plain(),
                    waited_s: since.elapsed().as_secs(),
                    builders,
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The other backends that are building index `index` of table `table`
    /// right now. `pg_stat_progress_create_index` names the index to roles
    /// that may see the backend; for the others (the row's columns are
    /// NULL), a build in this database holding a lock on the table counts.
    async fn index_builders(
        &self,
        index: u32,
        table: u32,
    ) -> Result<Vec<SessionInfo>, MigrateError> {
        let pids: Vec<i32> = self
            .monitor
            .query(
                "SELECT p.pid FROM pg_stat_progress_create_index p
                 WHERE p.pid <> $3
                   AND p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND (p.index_relid = $1
                        OR (p.index_relid IS NULL AND EXISTS (
                              SELECT 1 FROM pg_locks l
                              WHERE l.pid = p.pid AND l.locktype = 'relation'
                                AND l.database = p.datid AND l.relation = $2)))
                 ORDER BY p.pid",
                &[&index, &table, &self.pid],
            )
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        if pids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(evolve_pg::sessions(&self.monitor, &pids).await?)
    }
}

/// A failed query: the error, how many statements of it completed, and
/// who blocked it last.
struct Watched {
    error: tokio_postgres::Error,
    completed: usize,
    blockers: Vec<SessionInfo>,
}

/// The byte offset in `sql` of the server's error position (a 1-based
/// character index into the query string), when it sent one.
pub(crate) fn position_in(error: &tokio_postgres::Error, sql: &str) -> Option<usize> {
    match error.as_db_error()?.position()? {
        ErrorPosition::Original(pos) => Some(
            sql.char_indices()
                .nth((*pos as usize).saturating_sub(1))
                .map(|(i, _)| i)
                .unwrap_or(sql.len()),
        ),
        ErrorPosition::Internal { .. } => None,
    }
}

/// Line and column in the file of byte `within` of statement `stmt`.
fn locate(file: &MigrationFile, stmt: &Statement, within: usize) -> (u32, u32) {
    if within == 0 || within > stmt.text.len() {
        (stmt.line, stmt.column)
    } else {
        line_col(&file.text, stmt.offset + within)
    }
}

/// Checksum of the first `n` statements, to notice edits to the part of a
/// no-transaction file that already ran.
fn prefix_checksum(statements: &[Statement], n: usize) -> i32 {
    let joined = statements[..n.min(statements.len())]
        .iter()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n;\n");
    flyway_checksum(joined.as_bytes()).unwrap_or(0)
}

fn file_end(file: &MigrationFile) -> (u32, u32) {
    file.parsed
        .statements
        .last()
        .map(|s| (s.line, s.column))
        .unwrap_or((1, 1))
}

/// `base`, doubled per attempt, at most 30 s, with up to a quarter of jitter
/// so that several waiting deploys do not retry in step.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    crate::with_jitter(exp.min(Duration::from_secs(30)))
}

/// `n` with its noun: `1 statement`, `2 statements` (`one` and `many` are
/// the noun's forms).
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn excerpt(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 200 {
        let cut: String = one_line.chars().take(200).collect();
        format!("{cut}...")
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_millis(100);
        let b1 = backoff(base, 1);
        let b3 = backoff(base, 3);
        assert!(b1 >= base && b1 <= base * 5 / 4, "{b1:?}");
        assert!(b3 >= base * 4 && b3 <= base * 5, "{b3:?}");
        assert!(backoff(base, 40) <= Duration::from_millis(37_500));
    }
}
