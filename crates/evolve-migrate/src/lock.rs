//! The migration lock: a session-level advisory lock keyed on the history
//! table, held for a whole run on a connection of its own that stays idle.
//!
//! It must never be taken inside a transaction on the connection that runs
//! migrations: `CREATE INDEX CONCURRENTLY` waits for every open transaction
//! to end, and would wait on that one forever. Nor is it waited for with a
//! blocking `pg_advisory_lock`: a waiting run's statement would be active
//! all the while, with a snapshot, and the holder's `CREATE INDEX
//! CONCURRENTLY` waits for old snapshots. A waiting run polls
//! `pg_try_advisory_lock` instead and stays idle in between.
//!
//! Two keys are held: evolve's own ([`lock_key`]) and Flyway's
//! ([`flyway_lock_key`], the key Flyway's PostgreSQL advisory lock takes on
//! the same table), so that evolve and Flyway started together on one
//! database wait for each other instead of interleaving. Flyway takes its
//! key per migration, by default as a transaction-level lock; a session
//! lock on the same key conflicts with it all the same.

use std::time::{Duration, Instant};

use evolve_pg::{Client, QualifiedName, SessionInfo, sessions};

use crate::{Event, MigrateError};

/// Holds the lock until dropped (the connection closes, the server releases it).
pub struct MigrationLock {
    _client: Client,
}

/// A stable 64-bit key for the table (FNV-1a), so every evolve process
/// agrees on it.
pub fn lock_key(table: &QualifiedName) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("evolve migrate:{}.{}", table.schema, table.name).bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// The key of Flyway's advisory lock on history table `table`: its
/// `PostgreSQLAdvisoryLockTemplate` locks `0x466C79776179` ("Flyway" in
/// ASCII) plus Java's `String.hashCode()` of the table as Flyway prints it
/// (`"schema"."name"`, quotes doubled).
pub fn flyway_lock_key(table: &QualifiedName) -> i64 {
    const MAGIC: i64 = 0x466C_7977_6179;
    let quoted = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let text = format!("{}.{}", quoted(&table.schema), quoted(&table.name));
    let hash = text.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    MAGIC + i64::from(hash)
}

/// Takes both keys at once, or neither.
async fn try_both(
    client: &Client,
    try_lock: &tokio_postgres::Statement,
    keys: [i64; 2],
) -> Result<bool, MigrateError> {
    let got: bool = client.query_one(try_lock, &[&keys[0]]).await?.try_get(0)?;
    if !got {
        return Ok(false);
    }
    let got: bool = client.query_one(try_lock, &[&keys[1]]).await?.try_get(0)?;
    if !got {
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&keys[0]])
            .await?;
    }
    Ok(got)
}

/// The holder of whichever key is taken.
async fn holder_of(client: &Client, keys: [i64; 2]) -> Result<Option<SessionInfo>, MigrateError> {
    for key in keys {
        if let Some(h) = holder(client, key).await? {
            return Ok(Some(h));
        }
    }
    Ok(None)
}

/// Takes the migration lock on `table`: at once, or (with
/// `opts.wait_for_lock`) after waiting for the run that holds it, at most
/// `opts.lock_wait_limit`.
pub async fn acquire(
    opts: &crate::Options,
    table: &QualifiedName,
    on_event: &mut dyn FnMut(Event),
) -> Result<MigrationLock, MigrateError> {
    let client = crate::open(opts, "evolve migrate (lock)").await?;
    let keys = [lock_key(table), flyway_lock_key(table)];
    let try_lock = client.prepare("SELECT pg_try_advisory_lock($1)").await?;
    if try_both(&client, &try_lock, keys).await? {
        return Ok(MigrationLock { _client: client });
    }
    let holder = holder_of(&client, keys).await?;
    if !opts.wait_for_lock {
        return Err(MigrateError::Locked {
            table: table.plain(),
            holder,
        });
    }
    let limit = opts.lock_wait_limit;
    if limit == Some(Duration::ZERO) {
        return Err(MigrateError::LockWaitLimit {
            table: table.plain(),
            holder,
            waited_ms: 0,
        });
    }
    on_event(Event::LockWait {
        table: table.plain(),
        holder,
    });
    let started = Instant::now();
    let mut delay = FIRST_POLL;
    loop {
        let mut sleep = crate::with_jitter(delay);
        if let Some(limit) = limit {
            sleep = sleep.min(limit.saturating_sub(started.elapsed()));
        }
        tokio::time::sleep(sleep).await;
        if try_both(&client, &try_lock, keys).await? {
            break;
        }
        if limit.is_some_and(|limit| started.elapsed() >= limit) {
            return Err(MigrateError::LockWaitLimit {
                table: table.plain(),
                holder: holder_of(&client, keys).await?,
                waited_ms: started.elapsed().as_millis() as u64,
            });
        }
        delay = (delay * 2).min(LAST_POLL);
    }
    on_event(Event::LockAcquired {
        table: table.plain(),
        waited_ms: started.elapsed().as_millis() as u64,
    });
    Ok(MigrationLock { _client: client })
}

/// A waiting run polls for the lock after this, doubling the wait up to
/// [`LAST_POLL`] (each with up to a quarter of jitter).
const FIRST_POLL: Duration = Duration::from_millis(50);
const LAST_POLL: Duration = Duration::from_secs(1);

async fn holder(client: &Client, key: i64) -> Result<Option<SessionInfo>, MigrateError> {
    let classid = (key >> 32) & 0xffff_ffff;
    let objid = key & 0xffff_ffff;
    let pids: Vec<i32> = client
        .query(
            "SELECT pid FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND objsubid = 1
               AND pid <> pg_backend_pid()
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND classid = $1::int8::oid AND objid = $2::int8::oid",
            &[&classid, &objid],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    Ok(sessions(client, &pids).await?.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flyways_key_is_flyways() {
        // Read from pg_locks (classid << 32 | objid) while Flyway 13.12.1
        // migrated with its default table.
        let key = flyway_lock_key(&QualifiedName::new("public", "flyway_schema_history"));
        assert_eq!(key, 77_433_833_903_597);
        assert_ne!(
            key,
            lock_key(&QualifiedName::new("public", "flyway_schema_history"))
        );
    }
}
