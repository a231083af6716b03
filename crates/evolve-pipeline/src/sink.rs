//! The PostgreSQL sink: a table `(key jsonb PRIMARY KEY, data jsonb NOT
//! NULL)` kept equal to an interface, and `evolve_sink_progress(sink text
//! PRIMARY KEY, lsn pg_lsn NOT NULL)` beside it.
//!
//! Exactly once: each upstream transaction's feed entries are written in
//! one sink transaction that also upserts the sink's position; on restart
//! the sink reads that position and skips every feed entry at or below it.
//! A sink without a progress row starts with the interface's documents as
//! of the source's applied position, in one transaction with that position.

use std::path::PathBuf;
use std::time::Duration;

use evolve_pg::quote_ident;
use evolve_pgoutput::Lsn;
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::config::Connection;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;
use crate::store::{FeedEntry, SinkInfo, Store};
use crate::supervise::{Task, Verdict, supervise};

/// The progress table's name (in the target table's schema).
pub const PROGRESS_TABLE: &str = "evolve_sink_progress";

/// Feed entries read at once (whole transactions are never split).
const FEED_BATCH: usize = 10_000;

/// Rows per statement of the initial load.
const LOAD_BATCH: usize = 2_000;

/// Quoted `schema.table` of the sink's target and progress tables.
pub(crate) struct Targets {
    pub table: String,
    pub progress: String,
}

impl Targets {
    pub fn new(schema: &str, table: &str) -> Targets {
        Targets {
            table: format!("{}.{}", quote_ident(schema), quote_ident(table)),
            progress: format!("{}.{}", quote_ident(schema), quote_ident(PROGRESS_TABLE)),
        }
    }
}

/// Creates the target and progress tables if missing; refuses a target of
/// another shape.
pub(crate) async fn ensure_tables(client: &Client, schema: &str, table: &str) -> Result<()> {
    let targets = Targets::new(schema, table);
    let plain = format!("{schema}.{table}");
    let columns = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[&targets.table],
        )
        .await
        .map_err(|e| PipelineError::database(format!("read the shape of {plain}"), &e))?;
    if columns.is_empty() {
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} (key jsonb PRIMARY KEY, data jsonb NOT NULL)",
                targets.table
            ))
            .await
            .map_err(|e| PipelineError::database(format!("create sink table {plain}"), &e))?;
    } else {
        let found: Vec<(String, String, bool)> = columns
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let expected = [
            ("key".to_string(), "jsonb".to_string(), true),
            ("data".to_string(), "jsonb".to_string(), true),
        ];
        if found != expected {
            let describe = |cols: &[(String, String, bool)]| {
                cols.iter()
                    .map(|(n, t, nn)| format!("{n} {t}{}", if *nn { " NOT NULL" } else { "" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(PipelineError::SinkShape {
                table: plain,
                problem: format!(
                    "It has columns ({}); a sink needs (key jsonb PRIMARY KEY, data jsonb NOT NULL).",
                    describe(&found)
                ),
            });
        }
        let pk: Vec<String> = client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
                &[&targets.table],
            )
            .await
            .map_err(|e| PipelineError::database(format!("read the key of {plain}"), &e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if pk != ["key"] {
            return Err(PipelineError::SinkShape {
                table: plain,
                problem: "Its primary key is not (key).".into(),
            });
        }
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {} (sink text PRIMARY KEY, lsn pg_lsn NOT NULL)",
            targets.progress
        ))
        .await
        .map_err(|e| PipelineError::database("create the sink progress table", &e))?;
    Ok(())
}

/// The sink's recorded position, if it has one.
pub(crate) async fn progress(
    client: &Client,
    targets: &Targets,
    sink: &str,
) -> Result<Option<Lsn>> {
    let row = client
        .query_opt(
            &format!("SELECT lsn::text FROM {} WHERE sink = $1", targets.progress),
            &[&sink],
        )
        .await
        .map_err(|e| PipelineError::database("read the sink's progress", &e))?;
    Ok(row.and_then(|r| r.get::<_, String>(0).parse().ok()))
}

/// What a sink task needs.
pub(crate) struct SinkContext {
    pub sink: SinkInfo,
    pub connection: Connection,
    pub state_dir: PathBuf,
    pub interface_id: i64,
    pub table: String,
    pub source: String,
    /// The source's applied position.
    pub applied: watch::Receiver<Lsn>,
    /// Everything at or below this is committed in the sink (or has
    /// nothing for it).
    pub effective: watch::Sender<Lsn>,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
}

/// Runs the sink until `stop`, retrying after failures.
pub(crate) async fn run(mut ctx: SinkContext) {
    let (name, status, stop) = (ctx.sink.name.clone(), ctx.status.clone(), ctx.stop.clone());
    let task = Task {
        kind: ObjectKind::Sink,
        name: &name,
        status: &status,
        stop,
        starting: Some("starting"),
    };
    supervise(
        task,
        &mut ctx,
        |ctx| Box::pin(run_once(ctx)),
        |_, _| Verdict::Retry,
    )
    .await
}

struct Statements {
    upsert: tokio_postgres::Statement,
    delete: tokio_postgres::Statement,
    progress: tokio_postgres::Statement,
}

async fn run_once(ctx: &mut SinkContext) -> Result<()> {
    let name = ctx.sink.name.clone();
    let store = Store::open(&ctx.state_dir)?;
    let mut client = evolve_pg::connect(ctx.connection.url(), "evolve-pipeline-sink")
        .await
        .map_err(|e| {
            crate::upstream::connect_error(&ctx.sink.connection, &ctx.connection, &e.to_string())
        })?;
    ensure_tables(&client, &ctx.sink.target_schema, &ctx.sink.target_table).await?;
    let targets = Targets::new(&ctx.sink.target_schema, &ctx.sink.target_table);
    let prepare = |sql: String| {
        let client = &client;
        async move {
            client
                .prepare(&sql)
                .await
                .map_err(|e| PipelineError::database("prepare sink statements", &e))
        }
    };
    let statements = Statements {
        upsert: prepare(format!(
            "INSERT INTO {} (key, data) SELECT k::jsonb, d::jsonb FROM unnest($1::text[], $2::text[]) AS u(k, d) \
             ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
            targets.table
        ))
        .await?,
        delete: prepare(format!(
            "DELETE FROM {} WHERE key IN (SELECT k::jsonb FROM unnest($1::text[]) AS u(k))",
            targets.table
        ))
        .await?,
        progress: prepare(format!(
            "INSERT INTO {} (sink, lsn) VALUES ($1, $2::text::pg_lsn) \
             ON CONFLICT (sink) DO UPDATE SET lsn = EXCLUDED.lsn",
            targets.progress
        ))
        .await?,
    };

    let mut pos = match progress(&client, &targets, &name).await? {
        Some(pos) => pos,
        None => {
            ctx.status.set(
                ObjectKind::Sink,
                &name,
                "waiting for its table's snapshot",
                None,
            );
            loop {
                let table = store.table(&ctx.table)?;
                if table.is_some_and(|t| t.state.is_hydrated()) {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = ctx.stop.changed() => return Ok(()),
                }
            }
            let (at, docs) = read_initial(ctx, &store)?;
            initial_load(ctx, at, docs, &mut client, &statements).await?
        }
    };
    ctx.effective.send_replace(pos);
    ctx.status.set(ObjectKind::Sink, &name, "running", None);
    loop {
        let upto = *ctx.applied.borrow_and_update();
        loop {
            let entries = store.feed(ctx.interface_id, pos, upto, FEED_BATCH)?;
            if entries.is_empty() {
                break;
            }
            // Whole upstream transactions, in order: written together as
            // one sink transaction at the last one's position.
            let at = entries.last().map_or(pos, |e| e.pos);
            write_transactions(&client, &statements, &name, at, &entries).await?;
            pos = at;
            ctx.effective.send_replace(pos);
        }
        if upto > pos {
            pos = upto;
            ctx.effective.send_replace(pos);
        }
        tokio::select! {
            changed = ctx.applied.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            _ = ctx.stop.changed() => return Ok(()),
        }
    }
}

/// The interface's documents and the source position they are at, read in
/// one SQLite transaction.
type Documents = Vec<(Vec<u8>, Vec<u8>)>;

fn read_initial(ctx: &SinkContext, store: &Store) -> Result<(Lsn, Documents)> {
    let fail = |e: rusqlite::Error| PipelineError::store("read the interface's documents", e);
    // One read transaction: the documents and the position they are at.
    store.conn.execute_batch("BEGIN").map_err(fail)?;
    let read = (|| {
        let at = store.applied_lsn(&ctx.source)?;
        let table = store
            .table(&ctx.table)?
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: ctx.table.clone(),
            })?;
        Ok::<_, PipelineError>((at, store.docs(table.id)?))
    })();
    store.conn.execute_batch("COMMIT").map_err(fail)?;
    read
}

/// Writes every document of the interface as of the source's applied
/// position, with that position, in one transaction.
async fn initial_load(
    ctx: &SinkContext,
    at: Lsn,
    docs: Documents,
    client: &mut Client,
    statements: &Statements,
) -> Result<Lsn> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| PipelineError::database("begin the sink's initial load", &e))?;
    for chunk in docs.chunks(LOAD_BATCH) {
        let keys = chunk
            .iter()
            .map(|(k, _)| utf8(k))
            .collect::<Result<Vec<&str>>>()?;
        let data = chunk
            .iter()
            .map(|(_, d)| utf8(d))
            .collect::<Result<Vec<&str>>>()?;
        tx.execute(&statements.upsert, &[&keys, &data])
            .await
            .map_err(|e| PipelineError::database("write the sink's initial load", &e))?;
    }
    tx.execute(&statements.progress, &[&ctx.sink.name, &at.to_string()])
        .await
        .map_err(|e| PipelineError::database("record the sink's position", &e))?;
    tx.commit()
        .await
        .map_err(|e| PipelineError::database("commit the sink's initial load", &e))?;
    tracing::info!(sink = %ctx.sink.name, rows = docs.len(), position = %at, "sink loaded");
    Ok(at)
}

/// A document or key as text. They are written by evolve_core::document
/// from UTF-8 text; anything else is a corrupt store, never written as
/// something else.
fn utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| PipelineError::Store {
        context: "read a document for the sink".into(),
        message: format!("the document is not UTF-8 ({e}); the state store is damaged"),
    })
}

/// Consecutive upstream transactions' changes (`entries`, in order) and
/// the position `pos` of the last one, in one sink transaction: each
/// upstream transaction's deletes and upserts in turn, so every row change
/// reaches the sink as it happened upstream, and readers of the sink see
/// every transaction whole and in order, never part of one. The statements
/// are pipelined: one round trip whatever their number.
async fn write_transactions(
    client: &Client,
    statements: &Statements,
    sink: &str,
    pos: Lsn,
    entries: &[FeedEntry],
) -> Result<()> {
    let mut writes = Vec::new();
    let mut start = 0;
    while start < entries.len() {
        let at = entries[start].pos;
        let end = entries[start..]
            .iter()
            .position(|e| e.pos != at)
            .map_or(entries.len(), |n| start + n);
        let (keys, data, deleted) = changes(&entries[start..end])?;
        if !deleted.is_empty() {
            writes.push((&statements.delete, vec![deleted]));
        }
        if !keys.is_empty() {
            writes.push((&statements.upsert, vec![keys, data]));
        }
        start = end;
    }
    let fail = |e: tokio_postgres::Error| PipelineError::database("write to the sink", &e);
    let position = pos.to_string();
    let progress_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&sink, &position];
    // Sent in this order on first poll; a failure aborts the transaction,
    // and the COMMIT after it then rolls back.
    let begin = client.batch_execute("BEGIN");
    let rows = futures_util::future::join_all(writes.iter().map(|(statement, arrays)| {
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = arrays
            .iter()
            .map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        async move { client.execute(*statement, &params).await }
    }));
    let progress = client.execute(&statements.progress, &progress_params);
    let commit = client.batch_execute("COMMIT");
    let (begin, rows, progress, commit) = tokio::join!(biased; begin, rows, progress, commit);
    begin.map_err(fail)?;
    for written in rows {
        written.map_err(fail)?;
    }
    progress.map_err(fail)?;
    commit.map_err(fail)
}

/// One upstream transaction's keys and documents to upsert, and keys to
/// delete (the feed has one entry per key and transaction).
#[allow(clippy::type_complexity)]
fn changes(entries: &[FeedEntry]) -> Result<(Vec<&str>, Vec<&str>, Vec<&str>)> {
    let mut keys = Vec::new();
    let mut data = Vec::new();
    let mut deleted = Vec::new();
    for e in entries {
        match &e.new {
            Some(doc) => {
                keys.push(utf8(&e.key)?);
                data.push(utf8(doc)?);
            }
            None => deleted.push(utf8(&e.key)?),
        }
    }
    Ok((keys, data, deleted))
}
