//! `evolve backfill run | status | pause | resume | cancel`.
//!
//! A job's row in `evolve_backfill_jobs` holds its definition (table,
//! assignments, condition), where it is (the last key of the last batch
//! that committed, rows changed, batches, keys walked) and its state:
//! `running` (or crashed while running: the next run resumes), `paused`,
//! `cancelled`, `failed` and `done`. Each batch updates the row in the
//! batch's own transaction.

use std::time::Instant;

use evolve_pg::Client;
use serde::Serialize;
use tokio_postgres::types::ToSql;

use crate::sql::{self, Assignment};
use crate::throttle::{BatchSizer, Pause};
use crate::worker::{self, describe_range, in_transaction, wait_while_throttled};
use crate::{BackfillError, BackfillOptions, Event, JOBS_TABLE};

/// One job as `evolve backfill status` shows it (also its JSON shape).
#[derive(Clone, Debug, Serialize)]
pub struct JobStatus {
    pub name: String,
    pub table: String,
    pub state: String,
    /// Whether a run holds the job's lock right now.
    pub running: bool,
    pub rows_done: i64,
    pub batches: i64,
    pub keys_seen: i64,
    pub started_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the job stores to recognise itself on the next run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
struct Definition {
    table: String,
    set: Vec<Assignment>,
    filter: Option<String>,
}

async fn ensure_jobs_table(client: &Client) -> Result<(), BackfillError> {
    // Under a transaction-scoped lock, so two first runs never race.
    client
        .batch_execute(&format!(
            "BEGIN;
             SELECT pg_advisory_xact_lock({key});
             CREATE TABLE IF NOT EXISTS {JOBS_TABLE} (
               name text PRIMARY KEY,
               table_name text NOT NULL,
               definition jsonb NOT NULL,
               last_key text[],
               rows_done int8 NOT NULL DEFAULT 0,
               batches int8 NOT NULL DEFAULT 0,
               keys_seen int8 NOT NULL DEFAULT 0,
               state text NOT NULL,
               error text,
               started_at timestamptz NOT NULL DEFAULT now(),
               updated_at timestamptz NOT NULL DEFAULT now(),
               finished_at timestamptz);
             COMMIT",
            key = worker::lock_key("backfill", "")
        ))
        .await?;
    owned_state_table(client, JOBS_TABLE, "backfill jobs table").await
}

/// Refuses evolve's table `table` (`what` in messages) when its owner
/// could run code with the connecting role's privileges through it
/// ([`evolve_pg::check_state_table`]).
///
/// A table made by another role that the connecting role may not read
/// and write (the usual case when two ordinary roles take turns) is
/// refused too, with the `GRANT` that lets it, rather than left to fail
/// with a bare `permission denied` at the first write.
pub(crate) async fn owned_state_table(
    client: &Client,
    table: &str,
    what: &str,
) -> Result<(), BackfillError> {
    evolve_pg::check_state_table(client, table)
        .await
        .map_err(|e| match e {
            evolve_pg::OwnerError::Database(e) => BackfillError::from(evolve_pg::PgError::from(e)),
            evolve_pg::OwnerError::Refused(reason) => {
                BackfillError::Usage(format!("{what} {table}: {reason}"))
            }
        })?;
    let row = client
        .query_opt(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname),
                    pg_get_userbyid(c.relowner)::text, current_user::text,
                    has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE')
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = to_regclass($1)",
            &[&table],
        )
        .await?;
    if let Some(r) = row {
        let (name, owner, us, allowed): (String, String, String, bool) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
        if !allowed {
            return Err(BackfillError::Usage(format!(
                "{what} {name} belongs to role {owner}, and role {us} may not read and write it; have {owner} (or a superuser) run: GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {}; or run evolve as {owner}",
                evolve_pg::quote_ident(&us)
            )));
        }
    }
    Ok(())
}

/// Runs (or resumes) a backfill to the end, then verifies it.
pub async fn run(
    opts: &BackfillOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<JobStatus, BackfillError> {
    let started = Instant::now();
    let job = opts.name.as_str();
    if job.trim().is_empty() {
        return Err(BackfillError::Usage(
            "a backfill needs a name; pass --name".into(),
        ));
    }
    let spec = &opts.spec;
    if spec.set.is_empty() {
        return Err(BackfillError::Usage(
            "a backfill needs at least one --set \"column = expression\"".into(),
        ));
    }
    let client = worker::connect(
        &opts.database_url,
        "evolve backfill",
        Some(opts.batches.lock_timeout),
    )
    .await?;
    let table = worker::resolve_table(&client, &spec.table).await?;
    let columns = worker::typed_columns(&client, table.oid).await?;
    for a in &spec.set {
        match columns
            .iter()
            .find(|c| c.name == a.column)
            .map(|c| c.generated)
        {
            None => {
                return Err(BackfillError::Usage(format!(
                    "column {:?} of table {} does not exist; --set names a column of the table",
                    a.column,
                    table.name.plain()
                )));
            }
            Some(true) => {
                return Err(BackfillError::Usage(format!(
                    "column {:?} of table {} is generated; it cannot be set",
                    a.column,
                    table.name.plain()
                )));
            }
            Some(_) => {}
        }
        if table.key.iter().any(|k| k.name == a.column) {
            return Err(BackfillError::Usage(format!(
                "column {:?} is part of the primary key of {}; a backfill walks that key and cannot change it",
                a.column,
                table.name.plain()
            )));
        }
    }
    worker::refuse_row_security(&client, table.oid, &table.name, &format!("backfill {job}"))
        .await?;
    worker::check_limits(&client, &opts.batches, &format!("backfill {job}")).await?;
    let what = format!("backfill {job}");
    let filter = spec.filter.as_deref();
    // Preparing checks the expressions against the table before any batch.
    // It waits for the table's locks like a batch (a session holding the
    // table in ACCESS EXCLUSIVE), so it runs under lock_timeout with the
    // batches' retries. A column whose type has no `=` (json, xml, point)
    // is compared by its text in the predicate that skips rows done.
    let mut set = spec.set.clone();
    let mut prepare = async |c: &Client| {
        for a in &mut set {
            let probe = format!(
                "SELECT {col} IS DISTINCT FROM {col} FROM {} LIMIT 0",
                table.name,
                col = evolve_pg::quote_ident(&a.column)
            );
            // In a savepoint: the batches' transaction goes on after a
            // probe PostgreSQL refuses.
            c.batch_execute("SAVEPOINT evolve_equality").await?;
            a.compare_as = match c.prepare(&probe).await {
                Ok(_) => {
                    c.batch_execute("RELEASE SAVEPOINT evolve_equality").await?;
                    None
                }
                Err(e)
                    if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) =>
                {
                    c.batch_execute("ROLLBACK TO SAVEPOINT evolve_equality")
                        .await?;
                    columns
                        .iter()
                        .find(|col| col.name == a.column)
                        .map(|col| col.type_sql.clone())
                }
                Err(e) => return Err(e),
            };
        }
        let first_sql = sql::batch_update(&table.name, &table.key, &set, filter, true);
        let next_sql = sql::batch_update(&table.name, &table.key, &set, filter, false);
        Ok((c.prepare(&first_sql).await?, c.prepare(&next_sql).await?))
    };
    let (prepared, _) = in_transaction(
        &client,
        &what,
        &table.name,
        &opts.batches,
        on_event,
        &mut prepare,
    )
    .await?;
    let (first, next) = prepared.map_err(|e| {
        BackfillError::Usage(format!(
            "backfill {job}: the --set/--where expressions do not work on {}: {}",
            table.name.plain(),
            evolve_pg::PgError::Query(e)
        ))
    })?;

    ensure_jobs_table(&client).await?;
    let key = worker::lock_key("backfill", job);
    if let Err(holder) = worker::lock(&client, key).await? {
        return Err(BackfillError::Running {
            job: job.to_string(),
            holder,
        });
    }
    let definition = Definition {
        table: table.name.plain(),
        set: spec.set.clone(),
        filter: spec.filter.clone(),
    };
    let definition_json =
        serde_json::to_string(&definition).map_err(|e| BackfillError::Usage(e.to_string()))?;
    let existing = client
        .query_opt(
            &format!(
                "SELECT definition::text, state, last_key, rows_done, batches FROM {JOBS_TABLE} WHERE name = $1"
            ),
            &[&job],
        )
        .await?;
    let (mut last_key, resumed, rows_done, batches): (Option<Vec<Option<String>>>, bool, i64, i64) =
        match existing {
            None => {
                client
                    .execute(
                        &format!(
                            "INSERT INTO {JOBS_TABLE} (name, table_name, definition, state)
                             VALUES ($1, $2, $3::text::jsonb, 'running')"
                        ),
                        &[&job, &table.name.plain(), &definition_json],
                    )
                    .await?;
                (None, false, 0, 0)
            }
            Some(row) => {
                let stored: String = row.try_get(0)?;
                let state: String = row.try_get(1)?;
                let same =
                    serde_json::from_str::<Definition>(&stored).is_ok_and(|d| d == definition);
                if !same && state != "done" && state != "cancelled" {
                    return Err(BackfillError::Usage(format!(
                        "backfill {job} exists for another change (state {state}); choose another --name, or 'evolve backfill cancel {job}' first"
                    )));
                }
                if state == "done" || state == "cancelled" || !same {
                    // A finished job runs again from the start (the
                    // predicate makes that harmless).
                    client
                        .execute(
                            &format!(
                                "UPDATE {JOBS_TABLE} SET table_name = $2, definition = $3::text::jsonb, state = 'running',
                                   last_key = NULL, rows_done = 0, batches = 0, keys_seen = 0, error = NULL,
                                   started_at = now(), updated_at = now(), finished_at = NULL
                                 WHERE name = $1"
                            ),
                            &[&job, &table.name.plain(), &definition_json],
                        )
                        .await?;
                    (None, false, 0, 0)
                } else {
                    let resumed_state = if state == "paused" {
                        "paused"
                    } else {
                        "running"
                    };
                    client
                        .execute(
                            &format!(
                                "UPDATE {JOBS_TABLE} SET state = $2, error = NULL, updated_at = now() WHERE name = $1"
                            ),
                            &[&job, &resumed_state],
                        )
                        .await?;
                    let batches: i64 = row.try_get(4)?;
                    (row.try_get(2)?, batches > 0, row.try_get(3)?, batches)
                }
            }
        };
    on_event(&Event::Started {
        job: job.to_string(),
        table: table.name.plain(),
        resumed,
        rows_done: rows_done as u64,
        batches: batches as u64,
        estimated_rows: table.estimated_rows,
    });

    // From here the job's row is this run's: whatever stops the run
    // records why in it, so `status` does not show a dead run as running.
    let walked: Result<i64, BackfillError> = async {
        let progress = client
            .prepare(&format!(
                "UPDATE {JOBS_TABLE} SET last_key = $2, rows_done = rows_done + $3, batches = batches + 1,
                   keys_seen = keys_seen + $4, updated_at = now()
                 WHERE name = $1 RETURNING rows_done, batches, keys_seen"
            ))
            .await?;
        let state_sql = client
            .prepare(&format!("SELECT state FROM {JOBS_TABLE} WHERE name = $1"))
            .await?;
        let mut sizer = BatchSizer::new(
            spec.batch.unwrap_or(opts.batches.batch),
            opts.batches.batch_time,
        );
        let mut cancelled = false;
        loop {
            let mut requested = async |c: &Client| -> Result<Option<Pause>, BackfillError> {
                let state: String = c.query_one(&state_sql, &[&job]).await?.try_get(0)?;
                match state.as_str() {
                    "paused" => Ok(Some(Pause::Requested)),
                    "cancelled" => {
                        cancelled = true;
                        Ok(None)
                    }
                    _ => Ok(None),
                }
            };
            wait_while_throttled(&client, job, &opts.batches, on_event, &mut requested).await?;
            if cancelled {
                let rows: i64 = client
                    .query_one(
                        &format!("SELECT rows_done FROM {JOBS_TABLE} WHERE name = $1"),
                        &[&job],
                    )
                    .await?
                    .try_get(0)?;
                return Err(BackfillError::Cancelled {
                    job: job.to_string(),
                    rows_done: rows as u64,
                });
            }
            let size = sizer.size() as i64;
            let batch_started = Instant::now();
            let mut body = async |c: &Client| {
                let row = match &last_key {
                    None => c.query_one(&first, &[&size]).await?,
                    Some(k) => c.query_one(&next, &[k, &size]).await?,
                };
                let updated: i64 = row.try_get(0)?;
                let scanned: i64 = row.try_get(1)?;
                let end: Option<Vec<Option<String>>> = row.try_get(2)?;
                let totals = match &end {
                    Some(end) => {
                        let r = c
                            .query_one(&progress, &[&job, end, &updated, &scanned])
                            .await?;
                        Some((
                            r.try_get::<_, i64>(0)?,
                            r.try_get::<_, i64>(1)?,
                            r.try_get::<_, i64>(2)?,
                        ))
                    }
                    None => None,
                };
                Ok((updated, scanned, end, totals))
            };
            let (result, _) = in_transaction(
                &client,
                &what,
                &table.name,
                &opts.batches,
                on_event,
                &mut body,
            )
            .await?;
            let (updated, scanned, end, totals) = match result {
                Ok(r) => r,
                Err(e) => {
                    let end_sql = sql::batch_end(&table.name, &table.key, last_key.is_none());
                    let params: Vec<&(dyn ToSql + Sync)> = match &last_key {
                        None => vec![&size],
                        Some(k) => vec![k, &size],
                    };
                    let end: Option<Vec<Option<String>>> = client
                        .query_one(&end_sql, &params)
                        .await
                        .ok()
                        .and_then(|r| r.try_get(0).ok());
                    let range = describe_range(last_key.as_deref(), end.as_deref());
                    let way_out = batch_way_out(&e);
                    let error = evolve_pg::PgError::Query(e).to_string();
                    client
                        .execute(
                            &format!(
                                "UPDATE {JOBS_TABLE} SET state = 'failed', error = $2, updated_at = now() WHERE name = $1"
                            ),
                            &[&job, &format!("keys {range}: {error}")],
                        )
                        .await?;
                    return Err(BackfillError::Batch {
                        job: job.to_string(),
                        table: table.name.plain(),
                        range,
                        error,
                        way_out,
                    });
                }
            };
            let Some((rows_done, batches, keys_seen)) = totals else {
                break;
            };
            let took = batch_started.elapsed();
            let next_size = sizer.observe(took, scanned as u64);
            on_event(&Event::Batch {
                job: job.to_string(),
                batch: batches as u64,
                rows: updated as u64,
                scanned: scanned as u64,
                rows_done: rows_done as u64,
                keys_seen: keys_seen as u64,
                next_size,
                ms: took.as_millis() as u64,
            });
            last_key = end;
            if scanned < size {
                break;
            }
            tokio::time::sleep(opts.batches.nice_wait(took)).await;
        }
        // The verify query reads the whole table: under lock_timeout with
        // the batches' retries, like them.
        let verify_sql = sql::verify(&table.name, &set, filter);
        let mut verify = async |c: &Client| c.query_one(&verify_sql, &[]).await;
        let (counted, _) = in_transaction(
            &client,
            &what,
            &table.name,
            &opts.batches,
            on_event,
            &mut verify,
        )
        .await?;
        let remaining: i64 = counted
            .map_err(|e| {
                BackfillError::Usage(format!(
                    "backfill {job} walked the whole table, but the query that counts the rows of {} still to change failed: {}; {}",
                    table.name.plain(),
                    evolve_pg::PgError::Query(e),
                    "run it again to verify (the batches are done)"
                ))
            })?
            .try_get(0)?;
        Ok(remaining)
    }
    .await;
    let remaining = match walked {
        Ok(r) => r,
        Err(e) => {
            if !matches!(
                e,
                BackfillError::Cancelled { .. } | BackfillError::Batch { .. }
            ) {
                // Best effort: the connection may be what failed.
                let first_line = e.to_string();
                let _ = client
                    .execute(
                        &format!(
                            "UPDATE {JOBS_TABLE} SET state = 'failed', error = $2, updated_at = now()
                             WHERE name = $1 AND state = 'running'"
                        ),
                        &[&job, &first_line],
                    )
                    .await;
            }
            return Err(e);
        }
    };
    let status = if remaining == 0 {
        client
            .execute(
                &format!(
                    "UPDATE {JOBS_TABLE} SET state = 'done', updated_at = now(), finished_at = now() WHERE name = $1"
                ),
                &[&job],
            )
            .await?;
        job_status(&client, Some(job)).await?.pop()
    } else {
        // The next run walks the table again.
        client
            .execute(
                &format!(
                    "UPDATE {JOBS_TABLE} SET state = 'failed', last_key = NULL, error = $2, updated_at = now() WHERE name = $1"
                ),
                &[&job, &format!("{remaining} rows still need the change after the last batch")],
            )
            .await?;
        None
    };
    let (rows_done, batches): (i64, i64) = {
        let r = client
            .query_one(
                &format!("SELECT rows_done, batches FROM {JOBS_TABLE} WHERE name = $1"),
                &[&job],
            )
            .await?;
        (r.try_get(0)?, r.try_get(1)?)
    };
    on_event(&Event::Finished {
        job: job.to_string(),
        rows_done: rows_done as u64,
        batches: batches as u64,
        remaining: remaining as u64,
        ms: started.elapsed().as_millis() as u64,
    });
    match status {
        Some(s) => Ok(s),
        None => Err(BackfillError::Unverified {
            job: job.to_string(),
            table: table.name.plain(),
            remaining: remaining as u64,
        }),
    }
}

/// The last line of a failed batch's message: what to do before running
/// it again. A cancelled statement (57014) says nothing about the rows:
/// evolve's sessions run with `statement_timeout = 0`, so another session
/// cancelled it (or a `statement_timeout` set inside the expression's
/// functions); neither does a refusal by row-level security.
fn batch_way_out(e: &tokio_postgres::Error) -> String {
    if worker::is_row_security(e) {
        "row-level security applies to the role on a table the batch reads: run it as a role with BYPASSRLS (or a superuser), or as that table's owner without FORCE ROW LEVEL SECURITY, to resume at that batch".to_string()
    } else if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
        "the statement was cancelled (by pg_cancel_backend from another session, or a statement_timeout, which evolve sets to 0 in its own sessions), not failed on those rows: run it again to resume at that batch".to_string()
    } else {
        "fix the expression or those rows, then run it again to resume at that batch".to_string()
    }
}

async fn jobs_table_exists(client: &Client) -> Result<bool, BackfillError> {
    Ok(client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&JOBS_TABLE])
        .await?
        .try_get(0)?)
}

async fn job_status(client: &Client, name: Option<&str>) -> Result<Vec<JobStatus>, BackfillError> {
    if !jobs_table_exists(client).await? {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            &format!(
                "SELECT name, table_name, state, rows_done, batches, keys_seen,
                        started_at::text, updated_at::text, finished_at::text, error
                 FROM {JOBS_TABLE} WHERE $1::text IS NULL OR name = $1 ORDER BY started_at, name"
            ),
            &[&name],
        )
        .await?;
    let mut out = Vec::new();
    for r in rows {
        let name: String = r.try_get(0)?;
        let key = worker::lock_key("backfill", &name);
        out.push(JobStatus {
            running: worker::holder(client, key).await?.is_some(),
            name,
            table: r.try_get(1)?,
            state: r.try_get(2)?,
            rows_done: r.try_get(3)?,
            batches: r.try_get(4)?,
            keys_seen: r.try_get(5)?,
            started_at: r.try_get(6)?,
            updated_at: r.try_get(7)?,
            finished_at: r.try_get(8)?,
            error: r.try_get(9)?,
        });
    }
    Ok(out)
}

/// Every job (or the one named) with its progress.
pub async fn status(
    database_url: &str,
    name: Option<&str>,
) -> Result<Vec<JobStatus>, BackfillError> {
    let client = worker::connect(database_url, "evolve backfill", None).await?;
    let jobs = job_status(&client, name).await?;
    if let (Some(name), true) = (name, jobs.is_empty()) {
        return Err(no_such_job(name));
    }
    Ok(jobs)
}

fn no_such_job(name: &str) -> BackfillError {
    BackfillError::Usage(format!(
        "backfill job {name} does not exist; 'evolve backfill status' lists the jobs"
    ))
}

/// Sets a job's state from one of `from` to `to`.
async fn transition(
    database_url: &str,
    name: &str,
    from: &[&str],
    to: &str,
    verb: &str,
) -> Result<JobStatus, BackfillError> {
    let client = worker::connect(database_url, "evolve backfill", None).await?;
    if !jobs_table_exists(&client).await? {
        return Err(no_such_job(name));
    }
    let from: Vec<String> = from.iter().map(|s| s.to_string()).collect();
    let row = client
        .query_opt(
            &format!(
                "WITH old AS (SELECT state FROM {JOBS_TABLE} WHERE name = $1 FOR UPDATE)
                 UPDATE {JOBS_TABLE} j SET state = CASE WHEN old.state = ANY($2) THEN $3 ELSE old.state END,
                   updated_at = now()
                 FROM old WHERE j.name = $1 RETURNING old.state"
            ),
            &[&name, &from, &to],
        )
        .await?;
    let Some(row) = row else {
        return Err(no_such_job(name));
    };
    let old: String = row.try_get(0)?;
    if !from.contains(&old) {
        return Err(BackfillError::Usage(format!(
            "backfill {name} is {old}, so it cannot be {verb}{}",
            match old.as_str() {
                "done" | "cancelled" => "; 'evolve backfill run' starts it again",
                _ => "",
            }
        )));
    }
    Ok(job_status(&client, Some(name)).await?.remove(0))
}

/// Asks a job to pause before its next batch (a run waits until resumed).
pub async fn pause(database_url: &str, name: &str) -> Result<JobStatus, BackfillError> {
    transition(
        database_url,
        name,
        &["running", "failed"],
        "paused",
        "paused",
    )
    .await
}

/// Lets a paused job go on.
pub async fn resume(database_url: &str, name: &str) -> Result<JobStatus, BackfillError> {
    transition(database_url, name, &["paused"], "running", "resumed").await
}

/// Stops a job after its current batch; a later run starts it afresh.
pub async fn cancel(database_url: &str, name: &str) -> Result<JobStatus, BackfillError> {
    transition(
        database_url,
        name,
        &["running", "paused", "failed"],
        "cancelled",
        "cancelled",
    )
    .await
}
