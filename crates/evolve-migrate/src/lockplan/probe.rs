//! `evolve plan --probe`: each statement run on a scratch database made
//! from the target's schema only (a new database on the same server,
//! loaded with the copy [`scratch`] reads from the catalog without a lock
//! on any real relation; no row of a real table is read and no statement
//! touches the real tables), in a transaction that is rolled
//! back after the backend's own locks (`pg_locks`) and every relation's
//! `relfilenode` were read; then applied for real on the scratch copy, so
//! the next statement sees its effects. A statement that cannot run in a
//! transaction (`CREATE INDEX CONCURRENTLY`, `VACUUM FULL`, ...) runs on
//! its own while a second session holds ROW EXCLUSIVE on its table, so it
//! stops at its lock and the lock can be read. The scratch database is
//! dropped at the end, also on error.

use std::collections::HashMap;
use std::time::Duration;

use evolve_core::migration::effects::LockMode;
use evolve_pg::{Client, quote_ident};

use super::{PlannedStatement, ProbeLock, ProbeResult, scratch};
use crate::{MigrateError, Options};

pub(super) async fn run(
    opts: &Options,
    client: &Client,
    statements: &mut [PlannedStatement],
) -> Result<(), MigrateError> {
    let row = client
        .query_one(
            "SELECT current_user::text, r.rolcreatedb OR r.rolsuper,
                    current_setting('TimeZone'), current_setting('search_path')
             FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await?;
    let role: String = row.try_get(0)?;
    let can_create: bool = row.try_get(1)?;
    if !can_create {
        return Err(MigrateError::Usage(format!(
            "role {role} cannot create the probe's scratch database: it lacks the CREATEDB privilege; grant it (ALTER ROLE {} CREATEDB), probe as a role that has it, or run evolve plan without --probe",
            quote_ident(&role)
        )));
    }
    let settings = (row.try_get::<_, String>(2)?, row.try_get::<_, String>(3)?);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let scratch = format!("evolve_probe_{}_{nanos}", std::process::id());
    client
        .batch_execute(&format!(
            "CREATE DATABASE {} TEMPLATE template0",
            quote_ident(&scratch)
        ))
        .await?;
    let result = probe_in(opts, &scratch, &settings, statements).await;
    let dropped = client
        .batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&scratch)
        ))
        .await;
    result?;
    dropped?;
    Ok(())
}

/// `url` pointing at database `db` instead.
fn with_dbname(url: &str, db: &str) -> String {
    let t = url.trim();
    if t.starts_with("postgres://") || t.starts_with("postgresql://") {
        let sep = if t.contains('?') { '&' } else { '?' };
        format!("{t}{sep}dbname={db}")
    } else {
        format!("{t} dbname={db}")
    }
}

/// `url` (as [`with_dbname`] makes it) with `password` in it.
fn with_password(url: &str, password: &[u8]) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut encoded = String::new();
        for &b in password {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                encoded.push(char::from(b));
            } else {
                encoded.push_str(&format!("%{b:02X}"));
            }
        }
        format!("{url}&password={encoded}")
    } else {
        let text = String::from_utf8_lossy(password)
            .replace('\\', "\\\\")
            .replace('\'', "\\'");
        format!("{url} password='{text}'")
    }
}

async fn connect_scratch(url: &str, scratch: &str) -> Result<Client, MigrateError> {
    let mut scratch_url = with_dbname(url, scratch);
    // The target's password (from the string, PGPASSWORD or the password
    // file's line for the target's database) is the scratch copy's too:
    // no password file has a line for the copy's made-up name.
    if let Some(password) = evolve_pg::parse_url(url)?.0.get_password() {
        scratch_url = with_password(&scratch_url, password);
    }
    let c = evolve_pg::connect(&scratch_url, "evolve plan probe").await?;
    let db: String = c
        .query_one("SELECT current_database()::text", &[])
        .await?
        .try_get(0)?;
    if db != scratch {
        // Never probe anything but the scratch copy.
        return Err(MigrateError::Usage(format!(
            "the probe connected to database {db} instead of its scratch copy {scratch}; nothing was run there; give --database-url without a service or options that fix the database"
        )));
    }
    Ok(c)
}

/// Statements of the copy sent to the scratch database at once; when one
/// fails, its batch (rolled back whole) is run again statement by
/// statement to name the object.
const LOAD_BATCH: usize = 200;

/// Loads the target's schema, read by [`scratch::read`] without a lock on
/// any real relation, into the scratch database.
async fn load_schema(opts: &Options, scratch_db: &str) -> Result<(), MigrateError> {
    let steps = {
        let reader = evolve_pg::connect(&opts.database_url, "evolve plan probe").await?;
        scratch::read(&reader).await.map_err(|e| match e {
            MigrateError::Pg(e)
                if e.sqlstate() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
            {
                MigrateError::Usage(format!(
                    "the probe's catalog read waited 5 s for a lock ({e}), which it should never take; nothing was applied; run evolve plan without --probe and report it"
                ))
            }
            other => other,
        })?
    };
    let loader = connect_scratch(&opts.database_url, scratch_db).await?;
    loader.batch_execute(scratch::LOADER).await?;
    for batch in steps.chunks(LOAD_BATCH) {
        let sql: Vec<&str> = batch.iter().map(|s| s.sql.as_str()).collect();
        if loader.batch_execute(&sql.join(";\n")).await.is_ok() {
            continue;
        }
        for s in batch {
            loader.batch_execute(&s.sql).await.map_err(|e| {
                MigrateError::Usage(format!(
                    "the probe could not copy {} into its scratch database ({}); run evolve plan without --probe",
                    s.what,
                    describe(&e)
                ))
            })?;
        }
    }
    Ok(())
}

const RELATIONS: &str = "SELECT c.oid, c.relfilenode, n.nspname::text, c.relname::text
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind IN ('r', 'p', 'm', 'v', 'f')
       AND n.nspname NOT IN ('pg_catalog', 'information_schema')
       AND n.nspname NOT LIKE 'pg_toast%'";

/// oid -> (relfilenode, schema.name).
async fn relations(c: &Client) -> Result<HashMap<u32, (u32, String)>, MigrateError> {
    let mut out = HashMap::new();
    for r in c.query(RELATIONS, &[]).await? {
        let schema: String = r.try_get(2)?;
        let name: String = r.try_get(3)?;
        out.insert(r.try_get(0)?, (r.try_get(1)?, format!("{schema}.{name}")));
    }
    Ok(out)
}

/// Relation locks of backend `pid` (granted or awaited): oid -> mode.
async fn locks_of(c: &Client, pid: i32) -> Result<Vec<(u32, LockMode)>, MigrateError> {
    let rows = c
        .query(
            "SELECT l.relation, l.mode FROM pg_locks l
             WHERE l.pid = $1 AND l.locktype = 'relation'
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&pid],
        )
        .await?;
    let mut out = Vec::new();
    for r in rows {
        let mode: String = r.try_get(1)?;
        if let (Some(oid), Some(mode)) = (
            r.try_get::<_, Option<u32>>(0)?,
            LockMode::from_pg_locks(&mode),
        ) {
            out.push((oid, mode));
        }
    }
    Ok(out)
}

async fn reset(c: &Client, settings: &(String, String)) -> Result<(), MigrateError> {
    c.batch_execute("RESET ALL").await?;
    c.query(
        "SELECT set_config('TimeZone', $1, false), set_config('search_path', $2, false)",
        &[&settings.0, &settings.1],
    )
    .await?;
    Ok(())
}

pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

async fn probe_in(
    opts: &Options,
    scratch: &str,
    settings: &(String, String),
    statements: &mut [PlannedStatement],
) -> Result<(), MigrateError> {
    load_schema(opts, scratch).await?;
    let probe = connect_scratch(&opts.database_url, scratch).await?;
    let observer = connect_scratch(&opts.database_url, scratch).await?;
    let blocker = connect_scratch(&opts.database_url, scratch).await?;
    let pid: i32 = probe
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .try_get(0)?;
    reset(&probe, settings).await?;
    let mut file = usize::MAX;
    let mut broken: Option<String> = None;
    for st in statements.iter_mut() {
        if st.file_index != file {
            reset(&probe, settings).await?;
            file = st.file_index;
        }
        if let Some(b) = &broken {
            st.probe = Some(ProbeResult {
                error: Some(format!("not probed: {b}")),
                ..ProbeResult::default()
            });
            continue;
        }
        let before = relations(&observer).await?;
        let outside = st.no_transaction || st.concurrently;
        let (locks, error) = if outside {
            run_outside(&probe, &observer, &blocker, pid, st).await?
        } else {
            run_rolled_back(&probe, pid, st).await?
        };
        let after = if outside {
            relations(&observer).await?
        } else {
            // Rolled back: read the rewrite inside the transaction (done by
            // run_rolled_back), then apply it for the next statements.
            HashMap::new()
        };
        let (locks, rewrites) = match (outside, locks) {
            (true, l) => (l.map(|l| l.0).unwrap_or_default(), changed(&before, &after)),
            (false, Some((l, files))) => (l, files),
            (false, None) => (Vec::new(), false),
        };
        let mut result = ProbeResult {
            locks: Vec::new(),
            rewrites,
            disagreements: Vec::new(),
            error: error.clone(),
        };
        let mut strongest: HashMap<String, LockMode> = HashMap::new();
        for (oid, mode) in locks {
            if let Some((_, name)) = before.get(&oid) {
                let e = strongest.entry(name.clone()).or_insert(mode);
                *e = (*e).max(mode);
            }
        }
        let mut seen: Vec<(String, LockMode)> = strongest.into_iter().collect();
        seen.sort();
        result.locks = seen
            .iter()
            .map(|(r, m)| ProbeLock {
                relation: r.clone(),
                mode: *m,
            })
            .collect();
        if error.is_none() {
            if !outside && let Err(e) = apply_committed(&probe, st).await {
                broken = Some(format!(
                    "an earlier statement failed on the scratch copy ({e})"
                ));
            }
            compare(st, &seen, &mut result);
        } else {
            broken = Some("an earlier statement failed on the scratch copy".into());
        }
        st.probe = Some(result);
    }
    Ok(())
}

fn changed(before: &HashMap<u32, (u32, String)>, after: &HashMap<u32, (u32, String)>) -> bool {
    before
        .iter()
        .any(|(oid, (node, _))| *node != 0 && after.get(oid).is_some_and(|(n, _)| n != node))
}

type Observed = Option<(Vec<(u32, LockMode)>, bool)>;

/// BEGIN; the rebuild's drops; the statement; read locks and relfilenodes;
/// ROLLBACK.
async fn run_rolled_back(
    probe: &Client,
    pid: i32,
    st: &PlannedStatement,
) -> Result<(Observed, Option<String>), MigrateError> {
    let before = relations(probe).await?;
    probe.batch_execute("BEGIN").await?;
    let mut error = None;
    for d in &st.rebuild_sql.0 {
        if let Err(e) = probe.batch_execute(d).await {
            error = Some(format!("rebuild drop failed: {}", describe(&e)));
            break;
        }
    }
    if error.is_none()
        && let Err(e) = run_statement(probe, st).await
    {
        error = Some(describe(&e));
    }
    let observed = if error.is_none() {
        let locks = locks_of(probe, pid).await?;
        let after = relations(probe).await?;
        Some((locks, changed(&before, &after)))
    } else {
        None
    };
    probe.batch_execute("ROLLBACK").await?;
    Ok((observed, error))
}

/// The statement for real on the scratch copy, with the rebuild around it.
async fn apply_committed(probe: &Client, st: &PlannedStatement) -> Result<(), String> {
    let fail = |e: tokio_postgres::Error| async move {
        let _ = probe.batch_execute("ROLLBACK").await;
        Err(describe(&e))
    };
    let mut before = vec!["BEGIN".to_string()];
    before.extend(st.rebuild_sql.0.iter().cloned());
    for s in &before {
        if let Err(e) = probe.batch_execute(s).await {
            return fail(e).await;
        }
    }
    if let Err(e) = run_statement(probe, st).await {
        return fail(e).await;
    }
    let mut after = st.rebuild_sql.1.clone();
    after.push("COMMIT".into());
    for s in &after {
        if let Err(e) = probe.batch_execute(s).await {
            return fail(e).await;
        }
    }
    Ok(())
}

/// Runs the statement itself: `COPY ... FROM STDIN` with its rows through
/// the COPY protocol (a simple query cannot carry them), anything else as
/// a simple query.
async fn run_statement(probe: &Client, st: &PlannedStatement) -> Result<(), tokio_postgres::Error> {
    let Some(rows) = &st.copy_rows else {
        return probe.batch_execute(&st.sql).await;
    };
    use futures_util::SinkExt;
    let sink = probe
        .copy_in::<_, std::io::Cursor<Vec<u8>>>(st.sql.as_str())
        .await?;
    futures_util::pin_mut!(sink);
    sink.send(std::io::Cursor::new(rows.clone().into_bytes()))
        .await?;
    sink.finish().await.map(|_| ())
}

/// A statement that runs outside a transaction: a second session holds
/// ROW EXCLUSIVE on its first table, so the statement stops at its own
/// lock (or at the wait for older transactions a concurrent build does)
/// and the observer reads what it holds and awaits.
async fn run_outside(
    probe: &Client,
    observer: &Client,
    blocker: &Client,
    pid: i32,
    st: &PlannedStatement,
) -> Result<(Observed, Option<String>), MigrateError> {
    let table = st.locks.first().map(|l| l.relation.clone());
    let mut holding = false;
    if let Some(t) = &table {
        let (schema, name) = t.split_once('.').unwrap_or(("public", t));
        blocker.batch_execute("BEGIN").await?;
        let lock = format!(
            "LOCK TABLE {}.{} IN ROW EXCLUSIVE MODE",
            quote_ident(schema),
            quote_ident(name)
        );
        holding = blocker.batch_execute(&lock).await.is_ok();
        if !holding {
            blocker.batch_execute("ROLLBACK").await?;
        }
    }
    let run = run_statement(probe, st);
    tokio::pin!(run);
    let mut seen: Option<Vec<(u32, LockMode)>> = None;
    let mut finished: Option<Result<(), tokio_postgres::Error>> = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while finished.is_none() && seen.is_none() && tokio::time::Instant::now() < deadline {
        tokio::select! {
            r = &mut run => finished = Some(r),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                let waiting: bool = observer
                    .query_one(
                        "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1",
                        &[&pid],
                    )
                    .await?
                    .try_get(0)?;
                if waiting {
                    seen = Some(locks_of(observer, pid).await?);
                }
            }
        }
    }
    if holding {
        blocker.batch_execute("ROLLBACK").await?;
    }
    let result = match finished {
        Some(r) => r,
        None => run.await,
    };
    let error = result.err().map(|e| describe(&e));
    Ok((seen.map(|l| (l, false)), error))
}

/// Prediction against probe, relation by relation.
fn compare(st: &PlannedStatement, seen: &[(String, LockMode)], result: &mut ProbeResult) {
    // Relation -> the strongest lock predicted, and whether it is taken
    // only if the statement's rows reach it (a partition).
    let mut predicted: HashMap<String, (LockMode, bool)> = HashMap::new();
    for l in &st.locks {
        let e = predicted
            .entry(l.relation.clone())
            .or_insert((l.mode, l.if_reached));
        e.0 = e.0.max(l.mode);
        e.1 &= l.if_reached;
    }
    if !st.analysed {
        return;
    }
    let mut names: Vec<&String> = predicted.keys().collect();
    names.sort();
    for rel in names {
        let (p, if_reached) = predicted[rel];
        match seen.iter().find(|(r, _)| r == rel) {
            None if if_reached => {}
            None => result.disagreements.push(format!(
                "predicted {p} on {rel}, the probe saw no lock on it"
            )),
            Some((_, q)) if *q != p => result
                .disagreements
                .push(format!("predicted {p} on {rel}, the probe saw {q}")),
            _ => {}
        }
    }
    for (rel, q) in seen {
        if !predicted.contains_key(rel) && *q > LockMode::AccessShare {
            result.disagreements.push(format!(
                "the probe saw {q} on {rel}, which the plan did not predict"
            ));
        }
    }
    let truncate = st
        .sql
        .trim_start()
        .to_ascii_uppercase()
        .starts_with("TRUNCATE");
    if !truncate && result.rewrites != st.rewrites {
        result.disagreements.push(if st.rewrites {
            "predicted a rewrite, but the probe saw every relfilenode unchanged".into()
        } else {
            "predicted no rewrite, but the probe saw a new relfilenode".into()
        });
    }
}
