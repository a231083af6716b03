//! What backfills and rewrites share: the table's catalog facts, the
//! throttle's reading of the server, batch transactions under
//! `lock_timeout` with retry, and per-job advisory locks.

use std::time::{Duration, Instant};

use evolve_pg::{Client, QualifiedName, SessionInfo};

use crate::sql::KeyColumn;
use crate::throttle::{Observed, Pause, decide};
use crate::{BackfillError, BatchOptions, Event};

/// A table as the catalog describes it.
#[derive(Clone, Debug)]
pub(crate) struct Table {
    pub oid: u32,
    pub name: QualifiedName,
    /// The primary key's columns, in index order.
    pub key: Vec<KeyColumn>,
    pub estimated_rows: u64,
}

/// Resolves a table name as the user typed it (the search_path applies;
/// quoted parts keep their case).
pub(crate) async fn resolve_table(client: &Client, text: &str) -> Result<Table, BackfillError> {
    let (schema, name) = QualifiedName::parse_user(text).map_err(BackfillError::Usage)?;
    let regclass = match &schema {
        Some(s) => format!(
            "{}.{}",
            evolve_pg::quote_ident(s),
            evolve_pg::quote_ident(&name)
        ),
        None => evolve_pg::quote_ident(&name),
    };
    let row = client
        .query_opt(
            "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text,
                    greatest(c.reltuples, 0)::int8
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = to_regclass($1)",
            &[&regclass],
        )
        .await?;
    let Some(row) = row else {
        return Err(BackfillError::Usage(format!(
            "table {text:?} does not exist; name it as table or schema.table (the search_path applies)"
        )));
    };
    let oid: u32 = row.try_get(0)?;
    let qualified = QualifiedName::new(row.try_get::<_, String>(1)?, row.try_get::<_, String>(2)?);
    let relkind: String = row.try_get(3)?;
    if relkind != "r" && relkind != "p" {
        return Err(BackfillError::Usage(format!(
            "{} is not a table; name a table",
            qualified.plain()
        )));
    }
    let key = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
             FROM pg_index i
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = $1 AND i.indisprimary
             ORDER BY k.ord",
            &[&oid],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(KeyColumn {
                name: r.try_get(0)?,
                type_sql: r.try_get(1)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    if key.is_empty() {
        return Err(BackfillError::Usage(format!(
            "table {} has no primary key; evolve walks the primary key in batches, so add one first (ALTER TABLE ... ADD PRIMARY KEY)",
            qualified.plain()
        )));
    }
    let mut estimated_rows: i64 = row.try_get(4)?;
    if estimated_rows == 0 {
        // Never analysed (or empty): count, which is cheap for a table
        // the statistics have not caught up with yet.
        estimated_rows = client
            .query_one(&format!("SELECT count(*) FROM {qualified}"), &[])
            .await?
            .try_get(0)?;
    }
    Ok(Table {
        oid,
        name: qualified,
        key,
        estimated_rows: estimated_rows.max(0) as u64,
    })
}

/// The table's columns that can be written: (name, generated).
pub(crate) async fn columns(
    client: &Client,
    oid: u32,
) -> Result<Vec<(String, bool)>, BackfillError> {
    Ok(client
        .query(
            "SELECT attname::text, attgenerated <> '' FROM pg_attribute
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&oid],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?)
}

/// Reads what the throttle decides on; only what a limit is set for.
async fn observe(client: &Client, opts: &BatchOptions) -> Result<Observed, BackfillError> {
    let mut observed = Observed::default();
    if opts.limits.max_lag.is_some() {
        let row = client
            .query_opt(
                "SELECT coalesce(application_name, '')::text,
                        (extract(epoch FROM replay_lag) * 1000)::int8
                 FROM pg_stat_replication WHERE replay_lag IS NOT NULL
                 ORDER BY replay_lag DESC LIMIT 1",
                &[],
            )
            .await?;
        if let Some(r) = row {
            let ms: i64 = r.try_get(1)?;
            observed.replica = Some((r.try_get(0)?, Duration::from_millis(ms.max(0) as u64)));
        }
    }
    if opts.limits.max_slot_wal.is_some() {
        let row = client
            .query_opt(
                "SELECT slot_name::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8
                 FROM pg_replication_slots
                 WHERE slot_type = 'logical' AND restart_lsn IS NOT NULL
                 ORDER BY restart_lsn LIMIT 1",
                &[],
            )
            .await?;
        if let Some(r) = row {
            let bytes: i64 = r.try_get(1)?;
            observed.slot = Some((r.try_get(0)?, bytes.max(0) as u64));
        }
    }
    Ok(observed)
}

/// Waits while a limit is exceeded, reporting each pause (and each change
/// of reason) and the resume. `requested` is asked too (a paused job).
pub(crate) async fn wait_while_throttled(
    client: &Client,
    job: &str,
    opts: &BatchOptions,
    on_event: &mut dyn FnMut(&Event),
    requested: &mut impl AsyncFnMut(&Client) -> Result<Option<Pause>, BackfillError>,
) -> Result<(), BackfillError> {
    let mut paused: Option<(Instant, Pause)> = None;
    loop {
        let pause = match requested(client).await? {
            Some(p) => Some(p),
            None => decide(&observe(client, opts).await?, &opts.limits),
        };
        match pause {
            Some(p) => {
                let new_reason = paused.as_ref().is_none_or(|(_, old)| {
                    std::mem::discriminant(old) != std::mem::discriminant(&p)
                });
                if new_reason {
                    tracing::info!(job, reason = %p, "paused");
                    on_event(&Event::Paused {
                        job: job.to_string(),
                        message: p.to_string(),
                        pause: p.clone(),
                    });
                    let since = paused.map(|(s, _)| s).unwrap_or_else(Instant::now);
                    paused = Some((since, p));
                }
                tokio::time::sleep(opts.poll).await;
            }
            None => {
                if let Some((since, _)) = paused {
                    on_event(&Event::Resumed {
                        job: job.to_string(),
                        paused_ms: since.elapsed().as_millis() as u64,
                    });
                }
                return Ok(());
            }
        }
    }
}

/// Runs `body` in one transaction under `lock_timeout`. When the timeout
/// expires the transaction is rolled back, the pause reported, and `body`
/// tried again after a backoff, up to `lock_retries` times. Any other
/// error rolls back and is returned as `Ok(Err(e))` for the caller to
/// describe.
pub(crate) async fn in_transaction<T>(
    client: &Client,
    what: &str,
    table: &QualifiedName,
    opts: &BatchOptions,
    on_event: &mut dyn FnMut(&Event),
    body: &mut impl AsyncFnMut(&Client) -> Result<T, tokio_postgres::Error>,
) -> Result<(Result<T, tokio_postgres::Error>, u32), BackfillError> {
    let begin = format!(
        "BEGIN; SET LOCAL lock_timeout = {}",
        opts.lock_timeout.as_millis().max(1)
    );
    let mut attempt = 1u32;
    loop {
        client.batch_execute(&begin).await?;
        let result = match body(client).await {
            Ok(v) => client.batch_execute("COMMIT").await.map(|()| v),
            Err(e) => Err(e),
        };
        match result {
            Ok(v) => return Ok((Ok(v), attempt)),
            Err(e) => {
                // After a failed COMMIT the transaction is already gone.
                let _ = client.batch_execute("ROLLBACK").await;
                if !evolve_pg::is_lock_timeout(&e) {
                    return Ok((Err(e), attempt));
                }
                if attempt > opts.lock_retries {
                    return Err(BackfillError::LockTimeout {
                        what: what.to_string(),
                        table: table.plain(),
                        attempts: attempt,
                        lock_timeout_ms: opts.lock_timeout.as_millis() as u64,
                    });
                }
                let wait = crate::with_jitter(crate::backoff(opts.lock_retry_delay, attempt));
                let pause = Pause::LockWait {
                    attempt,
                    wait_ms: wait.as_millis() as u64,
                };
                tracing::info!(what, reason = %pause, "lock wait");
                on_event(&Event::Paused {
                    job: what.to_string(),
                    message: pause.to_string(),
                    pause,
                });
                tokio::time::sleep(wait).await;
                on_event(&Event::Resumed {
                    job: what.to_string(),
                    paused_ms: wait.as_millis() as u64,
                });
                attempt += 1;
            }
        }
    }
}

/// A stable 64-bit advisory lock key (FNV-1a) for a job, so every evolve
/// process agrees on it.
pub(crate) fn lock_key(scope: &str, name: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("evolve {scope}:{name}").bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// Takes the session advisory lock `key`, or says who holds it. A run
/// that has just exited may still hold it for a moment (its backend ends
/// after the client has gone), so a held lock is tried again for up to
/// two seconds before it counts as held.
pub(crate) async fn lock(client: &Client, key: i64) -> Result<Result<(), String>, BackfillError> {
    let try_lock = client.prepare("SELECT pg_try_advisory_lock($1)").await?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let got: bool = client.query_one(&try_lock, &[&key]).await?.try_get(0)?;
        if got {
            return Ok(Ok(()));
        }
        if Instant::now() >= deadline {
            let holder = holder(client, key)
                .await?
                .map(|h| h.to_string())
                .unwrap_or_else(|| "another session".into());
            return Ok(Err(holder));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The session holding advisory lock `key`, if any.
pub(crate) async fn holder(
    client: &Client,
    key: i64,
) -> Result<Option<SessionInfo>, BackfillError> {
    let classid = (key >> 32) & 0xffff_ffff;
    let objid = key & 0xffff_ffff;
    let pids: Vec<i32> = client
        .query(
            "SELECT pid FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND objsubid = 1
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND classid = $1::int8::oid AND objid = $2::int8::oid",
            &[&classid, &objid],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    Ok(evolve_pg::sessions(client, &pids).await?.into_iter().next())
}

/// A key for messages: `(7)`, `('eu', 42)`; `the start` for none.
pub(crate) fn describe_key(key: Option<&[Option<String>]>) -> String {
    match key {
        None => "the start".to_string(),
        Some(parts) => format!(
            "({})",
            parts
                .iter()
                .map(|p| match p.as_deref() {
                    None => "NULL".to_string(),
                    Some(v) if v.parse::<f64>().is_ok() => v.to_string(),
                    Some(v) => evolve_pg::quote_literal(v),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
