//! What backfills and rewrites share: their sessions' settings, the
//! table's catalog facts, the throttle's reading of the server, batch
//! transactions under `lock_timeout` with retry, and per-job advisory
//! locks.

use std::time::{Duration, Instant};

use evolve_pg::{Client, QualifiedName, SessionInfo};

use crate::sql::{self, KeyColumn};
use crate::throttle::{Observed, Pause, decide};
use crate::{BackfillError, BatchOptions, Event};

/// Opens one of evolve's backfill or rewrite sessions and pins what it
/// must not inherit from the connection string, the role or the database
/// (`SET` in the session beats them all):
///
/// - `row_security = off`: a table whose policies apply to the role would
///   otherwise be read through them, and a backfill would skip the rows
///   they hide (and verify without them) or a rewrite leave them behind.
///   Off, PostgreSQL refuses such a query instead of filtering it; such
///   tables are refused before anything runs ([`refuse_row_security`]).
/// - the output settings of [`sql::PINNED_OUTPUT`]: keys travel between
///   statements, runs and sessions as text, which must read back as the
///   same value (`extra_float_digits = 0` would round float keys; a
///   `SQL, DMY` date would read back as another day).
/// - `statement_timeout = 0`: batches are bounded by `--batch` and
///   `--batch-time`, and the verify query must read the whole table; a
///   database's `statement_timeout` would otherwise cancel them.
/// - `lock_timeout` (`Some`: `--lock-timeout`): every statement that takes
///   a lock gives up in time, not only the batches (preparing a batch
///   waits for the table's locks too).
pub(crate) async fn connect(
    url: &str,
    application_name: &str,
    lock_timeout: Option<Duration>,
) -> Result<Client, BackfillError> {
    let client = evolve_pg::connect(url, application_name).await?;
    let mut settings = String::from("SET row_security = off; SET statement_timeout = 0;");
    for (name, value) in sql::PINNED_OUTPUT {
        settings.push_str(&format!(
            " SET {name} = {};",
            evolve_pg::quote_literal(value)
        ));
    }
    if let Some(t) = lock_timeout {
        settings.push_str(&format!(" SET lock_timeout = {};", t.as_millis().max(1)));
    }
    client.batch_execute(&settings).await?;
    Ok(client)
}

/// Refuses a table whose row-level security policies apply to the
/// connecting role: evolve's sessions run with `row_security = off`, so
/// every query on it would fail (rather than quietly see only some rows).
/// `what` starts the message (`backfill j`, `rewrite of public.t`).
pub(crate) async fn refuse_row_security(
    client: &Client,
    oid: u32,
    table: &QualifiedName,
    what: &str,
) -> Result<(), BackfillError> {
    let r = client
        .query_one(
            "SELECT row_security_active(c.oid), current_user::text,
                    pg_has_role(c.relowner, 'USAGE'), c.relforcerowsecurity
             FROM pg_class c WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    let (active, user, owner, force): (bool, String, bool, bool) =
        (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
    if !active {
        return Ok(());
    }
    let table = table.shown();
    let way_out = if owner && force {
        format!(
            "run it as a role with BYPASSRLS (or a superuser), or run ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY first (the owner then bypasses the policies) and FORCE again after"
        )
    } else {
        "run it as a role with BYPASSRLS (or a superuser), or as the table's owner (without FORCE ROW LEVEL SECURITY)".to_string()
    };
    Err(BackfillError::Usage(format!(
        "{what}: the row-level security policies of {table} apply to role {user}{}, so evolve would not see every row; {way_out}",
        if force {
            " (FORCE ROW LEVEL SECURITY)"
        } else {
            ""
        },
    )))
}

/// Whether `e` is PostgreSQL refusing a query that row-level security
/// would have filtered (42501 under `row_security = off`).
pub(crate) fn is_row_security(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
        && e.as_db_error()
            .is_some_and(|d| d.message().contains("row-level security"))
}

/// `e` as an error of `what` on `table`: when row-level security came to
/// apply after the checks at the start (policies forced meanwhile), the
/// refusal with its way out rather than the server's bare 42501.
pub(crate) fn row_security_error(
    e: tokio_postgres::Error,
    table: &QualifiedName,
    what: &str,
) -> BackfillError {
    if !is_row_security(&e) {
        return e.into();
    }
    BackfillError::Usage(format!(
        "{what}: row-level security now applies to its role on {} ({}), so it stopped rather than see only some rows; nothing was lost: run it as a role with BYPASSRLS (or a superuser), or as the table's owner without FORCE ROW LEVEL SECURITY, to go on",
        table.shown(),
        evolve_pg::PgError::Query(e)
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
    ))
}

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
                    CASE WHEN c.relkind = 'p'
                         THEN (SELECT coalesce(sum(greatest(l.reltuples, 0)), 0)
                               FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid
                               WHERE t.isleaf)
                         ELSE greatest(c.reltuples, 0) END::int8
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
    // A partitioned table has no statistics of its own: its leaves'.
    let mut estimated_rows: i64 = row.try_get(4)?;
    if estimated_rows == 0 {
        // Never analysed (or empty): count, at most a million rows, so
        // that a big table the statistics have not caught up with is not
        // read whole before the first batch just to size a progress bar.
        // The estimate only sizes the progress bar: a lock held on the
        // table (lock_timeout) or a table the role may not read in full
        // (row security, refused by the caller with its reasons) leaves it
        // unknown rather than stopping here.
        estimated_rows = match client
            .query_one(
                &format!("SELECT count(*) FROM (SELECT FROM {qualified} LIMIT 1000000) s"),
                &[],
            )
            .await
        {
            Ok(r) => r.try_get(0)?,
            Err(e)
                if evolve_pg::is_lock_timeout(&e)
                    || e.code()
                        == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) =>
            {
                0
            }
            Err(e) => return Err(e.into()),
        };
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
    Ok(typed_columns(client, oid)
        .await?
        .into_iter()
        .map(|c| (c.name, c.generated))
        .collect())
}

/// A column of a table, with its type as `format_type` prints it.
pub(crate) struct Column {
    pub name: String,
    pub generated: bool,
    pub type_sql: String,
}

/// The columns of table `oid`, in order.
pub(crate) async fn typed_columns(client: &Client, oid: u32) -> Result<Vec<Column>, BackfillError> {
    Ok(client
        .query(
            "SELECT attname::text, attgenerated <> '', format_type(atttypid, atttypmod)
             FROM pg_attribute
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&oid],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(Column {
                name: r.try_get(0)?,
                generated: r.try_get(1)?,
                type_sql: r.try_get(2)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?)
}

/// Refuses limits the role cannot see the figures of. PostgreSQL shows
/// `pg_stat_replication`'s lag columns only to superusers and members of
/// `pg_read_all_stats` (to anyone else they are NULL, as if no replica
/// were there), so `--max-lag` would never pause: refused before anything
/// runs, with the grant that lets it work. `what` starts the message.
pub(crate) async fn check_limits(
    client: &Client,
    opts: &BatchOptions,
    what: &str,
) -> Result<(), BackfillError> {
    if opts.limits.max_lag.is_none() {
        return Ok(());
    }
    let r = client
        .query_one(
            "SELECT pg_has_role('pg_read_all_stats', 'USAGE'), current_user::text",
            &[],
        )
        .await?;
    let (allowed, user): (bool, String) = (r.try_get(0)?, r.try_get(1)?);
    if allowed {
        return Ok(());
    }
    Err(BackfillError::Usage(format!(
        "{what}: --max-lag cannot be honoured: role {user} may not read the replicas' replay lag (pg_stat_replication shows it only to members of pg_read_all_stats), so it would never pause; have a superuser run: GRANT pg_read_all_stats TO {}, or leave --max-lag out",
        evolve_pg::quote_ident(&user)
    )))
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

/// Why an attempt that failed with `e` may simply be tried again: its
/// `lock_timeout` expired (`lock_timeout`), or the server rolled it back to
/// break a deadlock (`deadlock`) or because it could not be serialized
/// (`serialization_failure`). Nothing of such an attempt is kept.
pub(crate) fn retry_cause(e: &tokio_postgres::Error) -> Option<&'static str> {
    use tokio_postgres::error::SqlState;
    match e.code() {
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => Some("lock_timeout"),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => Some("deadlock"),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => Some("serialization_failure"),
        _ => None,
    }
}

/// Runs `body` in one transaction under `lock_timeout`. When the timeout
/// expires, or the server rolls the transaction back for a deadlock or a
/// serialization failure, the transaction is rolled back, the pause
/// reported, and `body` tried again after a backoff, up to `lock_retries`
/// times in all. Any other error rolls back and is returned as
/// `Ok(Err(e))` for the caller to describe.
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
                let Some(cause) = retry_cause(&e) else {
                    return Ok((Err(e), attempt));
                };
                if attempt > opts.lock_retries {
                    return Err(if cause == "lock_timeout" {
                        BackfillError::LockTimeout {
                            what: what.to_string(),
                            table: table.plain(),
                            attempts: attempt,
                            lock_timeout_ms: opts.lock_timeout.as_millis() as u64,
                        }
                    } else {
                        BackfillError::Conflict {
                            what: what.to_string(),
                            table: table.plain(),
                            attempts: attempt,
                            cause: cause.replace('_', " "),
                        }
                    });
                }
                let wait = crate::with_jitter(crate::backoff(opts.lock_retry_delay, attempt));
                let wait_ms = wait.as_millis() as u64;
                let pause = match cause {
                    "lock_timeout" => Pause::LockWait { attempt, wait_ms },
                    _ => Pause::Conflict {
                        cause: cause.to_string(),
                        attempt,
                        wait_ms,
                    },
                };
                tracing::info!(what, reason = %pause, "retry");
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
            // The pid and the program, not the query: that is the other
            // run's batch statement, a screenful that says nothing more.
            let holder = holder(client, key)
                .await?
                .map(|h| {
                    format!(
                        "pid {}, {}, {}",
                        h.pid,
                        if h.application_name.is_empty() {
                            "no application_name"
                        } else {
                            &h.application_name
                        },
                        h.state
                    )
                })
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

/// A key for messages: `(7)`, `('eu', 42)`.
pub(crate) fn describe_key(parts: &[Option<String>]) -> String {
    format!(
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
    )
}

/// The keys of a batch for messages: after the previous batch's last key
/// (none for the first batch) up to the batch's own last key (none when
/// it could not be read): `after (50) up to (60)`, `from the first up to
/// (10)`, `after (49000)`.
pub(crate) fn describe_range(
    after: Option<&[Option<String>]>,
    end: Option<&[Option<String>]>,
) -> String {
    let start = match after {
        Some(k) => format!("after {}", describe_key(k)),
        None => "from the first".to_string(),
    };
    match end {
        Some(k) => format!("{start} up to {}", describe_key(k)),
        None => start,
    }
}

#[cfg(test)]
mod tests {
    use super::describe_range;

    #[test]
    fn ranges_read_as_words_whichever_end_is_known() {
        let k = |v: &str| vec![Some(v.to_string())];
        assert_eq!(
            describe_range(Some(&k("50")), Some(&k("60"))),
            "after (50) up to (60)"
        );
        assert_eq!(
            describe_range(None, Some(&k("10"))),
            "from the first up to (10)"
        );
        assert_eq!(describe_range(Some(&k("49000")), None), "after (49000)");
        assert_eq!(describe_range(None, None), "from the first");
        assert_eq!(
            describe_range(Some(&[Some("eu".into()), None]), None),
            "after ('eu', NULL)"
        );
    }
}
