//! `evolve refresh`: materialized views refreshed in dependency order, and
//! a record of when, so that staleness can be seen.
//!
//! A materialized view that reads another (directly or through plain
//! views) is refreshed after it: lowest layer first, so each layer reads
//! fresh input. A populated matview with a unique index that has no WHERE
//! clause and no expressions is refreshed CONCURRENTLY (readers keep
//! reading); any other plainly. Each is analysed afterwards.
//!
//! PostgreSQL does not record refresh times, so evolve records each refresh
//! in `evolve_refresh_log` (in the connection's current schema), keyed by
//! the matview's name as [`QualifiedName::shown`] writes it (`public.daily`,
//! `"x.y".mv`: a part quoted where it must be, so two matviews never share
//! a record, and names that need no quotes keep the plain form), and
//! `--status` reports, per matview, its last refresh and whether something
//! it reads was refreshed after it started: a monthly view refreshed before
//! its daily input is stale, which nothing else would tell you.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use evolve_pg::{Client, QualifiedName};
use serde::Serialize;

use crate::MigrateError;

const LOG_TABLE: &str = "evolve_refresh_log";

/// One materialized view and what it reads.
#[derive(Clone, Debug)]
struct Matview {
    oid: u32,
    name: QualifiedName,
    populated: bool,
    can_concurrently: bool,
    /// Matviews it reads, directly or through plain views.
    reads: BTreeSet<u32>,
}

/// One refresh that ran.
#[derive(Clone, Debug, Serialize)]
pub struct Refreshed {
    pub name: String,
    pub concurrently: bool,
    pub duration_ms: u64,
}

/// `evolve refresh --status`, one row per materialized view.
#[derive(Clone, Debug, Serialize)]
pub struct MatviewStatus {
    pub name: String,
    pub populated: bool,
    /// Whether a refresh can be CONCURRENTLY (populated, unique index
    /// without WHERE or expressions).
    pub concurrently: bool,
    /// Matviews it reads, directly or through views.
    pub reads: Vec<String>,
    /// When evolve last refreshed it (server time), if ever.
    pub last_refresh: Option<String>,
    /// True when something it reads was refreshed after its last refresh
    /// started; None when evolve has no record of refreshing it.
    pub stale: Option<bool>,
    /// What made it stale.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale_because: Vec<String>,
}

async fn matviews(client: &Client) -> Result<BTreeMap<u32, Matview>, MigrateError> {
    let rows = client
        .query(
            "SELECT c.oid, n.nspname::text, c.relname::text, c.relispopulated,
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique
                            AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL)
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relkind = 'm' AND n.nspname NOT IN ('pg_catalog', 'information_schema')",
            &[],
        )
        .await?;
    let mut out = BTreeMap::new();
    for r in rows {
        let oid: u32 = r.try_get(0)?;
        let populated: bool = r.try_get(3)?;
        out.insert(
            oid,
            Matview {
                oid,
                name: QualifiedName::new(r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?),
                populated,
                can_concurrently: populated && r.try_get::<_, bool>(4)?,
                reads: BTreeSet::new(),
            },
        );
    }
    let edges = client
        .query(
            "WITH RECURSIVE reads(mv, rel) AS (
                 SELECT r.ev_class, d.refobjid
                 FROM pg_rewrite r
                 JOIN pg_class c ON c.oid = r.ev_class AND c.relkind = 'm'
                 JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                                 AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> r.ev_class
               UNION
                 SELECT reads.mv, d.refobjid
                 FROM reads
                 JOIN pg_class v ON v.oid = reads.rel AND v.relkind = 'v'
                 JOIN pg_rewrite r ON r.ev_class = v.oid
                 JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                                 AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> v.oid
             )
             SELECT DISTINCT reads.mv, reads.rel FROM reads
             JOIN pg_class c ON c.oid = reads.rel AND c.relkind = 'm'",
            &[],
        )
        .await?;
    for e in edges {
        let (mv, rel): (u32, u32) = (e.try_get(0)?, e.try_get(1)?);
        if let Some(m) = out.get_mut(&mv) {
            m.reads.insert(rel);
        }
    }
    Ok(out)
}

/// Matviews in dependency order (everything a matview reads comes before
/// it), ties by name.
fn layered(all: &BTreeMap<u32, Matview>) -> Result<Vec<u32>, MigrateError> {
    let mut done: BTreeSet<u32> = BTreeSet::new();
    let mut order = Vec::new();
    while done.len() < all.len() {
        let mut ready: Vec<&Matview> = all
            .values()
            .filter(|m| !done.contains(&m.oid))
            .filter(|m| {
                m.reads
                    .iter()
                    .all(|r| done.contains(r) || !all.contains_key(r))
            })
            .collect();
        if ready.is_empty() {
            return Err(MigrateError::Usage(
                "materialized views read each other in a cycle; refresh them by name".into(),
            ));
        }
        ready.sort_by_key(|m| m.name.shown());
        for m in ready {
            done.insert(m.oid);
            order.push(m.oid);
        }
    }
    Ok(order)
}

async fn ensure_log(client: &Client) -> Result<(), MigrateError> {
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {LOG_TABLE} (
                 matview text NOT NULL,
                 started_at timestamptz NOT NULL,
                 finished_at timestamptz NOT NULL,
                 concurrent boolean NOT NULL,
                 duration_ms integer NOT NULL
             )"
        ))
        .await?;
    evolve_pg::check_state_table(client, LOG_TABLE)
        .await
        .map_err(|e| match e {
            evolve_pg::OwnerError::Database(e) => MigrateError::from(e),
            evolve_pg::OwnerError::Refused(reason) => {
                MigrateError::Usage(format!("refresh log {LOG_TABLE}: {reason}"))
            }
        })
}

/// Runs `refresh_sql` (a `REFRESH MATERIALIZED VIEW`) for the materialized view
/// `name` (as `--status` shows it, [`QualifiedName::shown`]) and records it in the log,
/// as `evolve refresh` does: the rebuild's refreshes after a migration, so
/// that `--status` knows them too. The refresh's failure is an error; the
/// record is best effort (a role that may not create the log table still
/// gets its refresh), and its failure is logged as a warning.
pub(crate) async fn refresh_recorded(
    client: &Client,
    name: &str,
    refresh_sql: &str,
) -> Result<u64, MigrateError> {
    let started = Instant::now();
    let started_at: String = client
        .query_one("SELECT clock_timestamp()::text", &[])
        .await?
        .try_get(0)?;
    client.batch_execute(refresh_sql).await?;
    let duration_ms = started.elapsed().as_millis() as u64;
    let record = async {
        ensure_log(client).await?;
        client
            .execute(
                &format!(
                    "INSERT INTO {LOG_TABLE} VALUES ($1, $2::text::timestamptz, clock_timestamp(), false, $3)"
                ),
                &[&name, &started_at, &i32::try_from(duration_ms).unwrap_or(i32::MAX)],
            )
            .await?;
        Ok::<(), MigrateError>(())
    };
    if let Err(e) = record.await {
        tracing::warn!(matview = name, error = %e, "refreshed, but could not record it in {LOG_TABLE}");
    }
    Ok(duration_ms)
}

/// Refreshes `names` (all matviews when empty) in dependency order.
pub async fn refresh(
    client: &Client,
    names: &[String],
    on_refreshed: &mut dyn FnMut(&Refreshed),
) -> Result<Vec<Refreshed>, MigrateError> {
    let all = matviews(client).await?;
    let mut wanted: BTreeSet<u32> = BTreeSet::new();
    for name in names {
        let (schema, rel) = QualifiedName::parse_user(name).map_err(MigrateError::Usage)?;
        let found = all
            .values()
            .find(|m| m.name.name == rel && schema.as_ref().is_none_or(|s| *s == m.name.schema));
        match found {
            Some(m) => {
                wanted.insert(m.oid);
            }
            None => {
                return Err(MigrateError::Usage(format!(
                    "materialized view {name:?} does not exist; 'evolve refresh --status' lists them"
                )));
            }
        }
    }
    ensure_log(client).await?;
    let mut done = Vec::new();
    for oid in layered(&all)? {
        if !names.is_empty() && !wanted.contains(&oid) {
            continue;
        }
        let m = &all[&oid];
        let concurrently = m.can_concurrently;
        let started = Instant::now();
        let started_at: String = client
            .query_one("SELECT clock_timestamp()::text", &[])
            .await?
            .try_get(0)?;
        client
            .batch_execute(&format!(
                "REFRESH MATERIALIZED VIEW {}{}; ANALYZE {}",
                if concurrently { "CONCURRENTLY " } else { "" },
                m.name,
                m.name
            ))
            .await?;
        let duration_ms = started.elapsed().as_millis() as u64;
        client
            .execute(
                &format!(
                    "INSERT INTO {LOG_TABLE} VALUES ($1, $2::text::timestamptz, clock_timestamp(), $3, $4)"
                ),
                &[
                    &m.name.shown(),
                    &started_at,
                    &concurrently,
                    &i32::try_from(duration_ms).unwrap_or(i32::MAX),
                ],
            )
            .await?;
        let r = Refreshed {
            name: m.name.shown(),
            concurrently,
            duration_ms,
        };
        on_refreshed(&r);
        done.push(r);
    }
    Ok(done)
}

/// `--status`: every matview with its last refresh and staleness.
pub async fn status(client: &Client) -> Result<Vec<MatviewStatus>, MigrateError> {
    let all = matviews(client).await?;
    ensure_log(client).await?;
    let rows = client
        .query(
            &format!(
                "SELECT DISTINCT ON (matview) matview, started_at, finished_at,
                        to_char(finished_at, 'YYYY-MM-DD\"T\"HH24:MI:SS.MSOF')
                 FROM {LOG_TABLE} ORDER BY matview, finished_at DESC"
            ),
            &[],
        )
        .await?;
    // name -> (started, finished) as comparable microsecond counts.
    let mut last: BTreeMap<String, (i64, i64, String)> = BTreeMap::new();
    for r in rows {
        let name: String = r.try_get(0)?;
        let started: std::time::SystemTime = r.try_get(1)?;
        let finished: std::time::SystemTime = r.try_get(2)?;
        let micros = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0)
        };
        last.insert(name, (micros(started), micros(finished), r.try_get(3)?));
    }
    let mut out = Vec::new();
    for oid in layered(&all)? {
        let m = &all[&oid];
        let name = m.name.shown();
        let mine = last.get(&name);
        let reads: Vec<String> = m
            .reads
            .iter()
            .filter_map(|r| all.get(r).map(|x| x.name.shown()))
            .collect();
        let stale_because: Vec<String> = match mine {
            Some((started, _, _)) => reads
                .iter()
                .filter(|input| {
                    last.get(*input)
                        .is_some_and(|(_, finished, _)| finished > started)
                })
                .map(|input| format!("{input} was refreshed after it"))
                .collect(),
            None => Vec::new(),
        };
        out.push(MatviewStatus {
            name,
            populated: m.populated,
            concurrently: m.can_concurrently,
            reads,
            last_refresh: mine.map(|(_, _, text)| text.clone()),
            stale: mine.map(|_| !stale_because.is_empty()),
            stale_because,
        });
    }
    Ok(out)
}
