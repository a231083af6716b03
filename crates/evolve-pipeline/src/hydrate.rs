//! A table's snapshot, copied beside the stream.
//!
//! Each table that is not hydrated yet gets its own task (started by
//! [`crate::Pipeline::run`], and kept across the restarts that catalog
//! changes cause). The task takes a snapshot of the table from its
//! [`Source`] (for PostgreSQL: a temporary slot's exported snapshot, read
//! with COPY in a `REPEATABLE READ` transaction), writes the documents in
//! batches, and ends by marking the table [`TableState::Copied`] with the
//! snapshot's position `C`. It writes nothing but the table's own
//! documents and catalog row, so the source's stream keeps applying to the
//! other tables meanwhile; for this table the stream keeps the changes of
//! every transaction as *pending* (`pending` records in the
//! store, with the transaction's positions), and once the copy is in, the
//! source's task applies the pending changes of the transactions committed
//! at or after `C` and marks the table running, in one store transaction
//! (see `stream::replay_pending`). A crash during the copy restarts it
//! from scratch under a new snapshot; the pending changes are kept, and
//! the new `C` selects from them.
//!
//! Each batch, once stored, is also handed to the sinks that load beside
//! the copy ([`crate::sink::Taps`]), and `C` after the last one.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::params;
use tokio::sync::watch;

use crate::apply::TableRuntime;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::position::Position;
use crate::sink::Taps;
use crate::source::{Source, TableSnapshot};
use crate::status::StatusBoard;
use crate::store::{Store, TableInfo, TableState};
use crate::supervise::{Task, Verdict, supervise};

/// Rows per store transaction while copying.
const BATCH: usize = 5_000;

/// What a hydrator needs.
pub(crate) struct HydrateContext<S> {
    /// The table's upstream.
    pub upstream: S,
    pub state_dir: PathBuf,
    pub table: TableInfo,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
    /// The sinks that load beside the copy.
    pub taps: Taps,
}

/// Copies the table until done or `stop`, retrying after transient
/// failures. A row the encoder refuses fails every copy the same way, and
/// each copy reads the whole table upstream again: the table stalls, as it
/// does when a streamed row cannot be encoded, and keeps none of its
/// partial copy. An upstream that refuses the snapshot's user
/// ([`PipelineError::AccessDenied`]) stalls it too, until the pipeline
/// restarts.
pub(crate) async fn run<S: Source>(mut ctx: HydrateContext<S>) {
    let (name, status, stop) = (ctx.table.name.clone(), ctx.status.clone(), ctx.stop.clone());
    let task = Task {
        kind: ObjectKind::Table,
        name: &name,
        status: &status,
        stop,
        starting: None,
    };
    supervise(
        task,
        &mut ctx,
        |ctx| Box::pin(attempt(ctx)),
        |ctx, e| match e {
            PipelineError::Document { .. } => {
                let problem = e.primary();
                if let Err(e) = stall(ctx, &problem) {
                    tracing::warn!(table = %ctx.table.name, error = %e, "could not record the stall");
                }
                Verdict::Stop { shown: problem }
            }
            // The upstream refuses the snapshot's user (a privilege it
            // lacks, a password it no longer takes): every copy would be
            // refused the same way. The table is stalled until the
            // pipeline restarts, and keeps nothing of this in the store,
            // so a restart after the fix copies it.
            PipelineError::AccessDenied { .. } => Verdict::Stop {
                shown: format!("{e}\nnot retried: fix the cause, then restart the pipeline"),
            },
            _ => Verdict::Retry,
        },
    )
    .await
}

/// One copy, ended early (and fine) when the pipeline stops.
async fn attempt<S: Source>(ctx: &mut HydrateContext<S>) -> Result<()> {
    let mut stop = ctx.stop.clone();
    let rows = tokio::select! {
        r = copy(ctx) => r?,
        _ = stop.changed() => return Ok(()),
    };
    let name = &ctx.table.name;
    tracing::debug!(table = %name, rows, "copy in; catching up");
    ctx.status.set(ObjectKind::Table, name, "catching up", None);
    Ok(())
}

/// Records a stall found by the copy: the table's partial copy removed,
/// its state stalled with `problem` (unless it was dropped meanwhile).
fn stall<S>(ctx: &HydrateContext<S>, problem: &str) -> Result<()> {
    let mut store = Store::open(&ctx.state_dir)?;
    let fail = |e: rusqlite::Error| PipelineError::store("record a stalled snapshot", e);
    let tx = store.conn.transaction().map_err(fail)?;
    tx.execute("DELETE FROM rows WHERE tbl = ?1", [ctx.table.id])
        .map_err(fail)?;
    tx.execute(
        "UPDATE tables SET state = ?2, error = ?3, rows_copied = 0 \
         WHERE id = ?1 AND state = 'snapshotting'",
        params![ctx.table.id, TableState::Stalled.as_str(), problem],
    )
    .map_err(fail)?;
    tx.commit().map_err(fail)
}

/// One attempt: the whole copy. Returns the rows copied.
async fn copy<S: Source>(ctx: &HydrateContext<S>) -> Result<u64> {
    let info = &ctx.table;
    let id = info.id;
    let mut store = Store::open(&ctx.state_dir)?;
    let fail = |e: rusqlite::Error| PipelineError::store("snapshot", e);
    {
        let tx = rusqlite::Transaction::new_unchecked(
            &store.conn,
            rusqlite::TransactionBehavior::Deferred,
        )
        .map_err(fail)?;
        tx.execute("DELETE FROM rows WHERE tbl = ?1", [id])
            .map_err(fail)?;
        tx.execute(
            "UPDATE tables SET state = 'snapshotting', rows_copied = 0, snapshot_lsn = NULL \
             WHERE id = ?1",
            [id],
        )
        .map_err(fail)?;
        // Keys kept as differing from documents that are about to go
        // would be wrong: a replacement over this table is compared again
        // once the copy is in.
        store.untrack_table(id)?;
        tx.commit().map_err(fail)?;
    }
    ctx.status
        .set(ObjectKind::Table, &info.name, "snapshotting", None);
    let mut snapshot = ctx.upstream.snapshot(info).await?;
    // The sinks listening now load beside this copy: each chunk is
    // handed to them once it is stored.
    let mut tee = ctx.taps.take(&info.name).await;
    let mut table = TableRuntime::new(info.clone(), Vec::new())?;
    table.set_copy_mapping();
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(BATCH);
    let mut copied: u64 = 0;
    let started = Instant::now();
    let mut reported = Instant::now();
    while snapshot
        .next_rows(|row| {
            batch.push(table.encode_values(row)?);
            Ok(())
        })
        .await?
    {
        if batch.len() >= BATCH {
            copied += batch.len() as u64;
            write_batch(&mut store, id, &batch, copied, None)?;
            ctx.status
                .count(ObjectKind::Table, &info.name, batch.len() as u64, None);
            tee.rows(&mut batch).await;
            if reported.elapsed() >= Duration::from_secs(1) {
                reported = Instant::now();
                let rate = copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
                tracing::info!(table = %info.name, rows = copied, rows_per_second = rate as u64, "snapshot progress");
            }
        }
    }
    let point = snapshot.position();
    ctx.status.skipped_copied(&info.name, snapshot.skipped());
    snapshot.finish().await?;
    copied += batch.len() as u64;
    write_batch(&mut store, id, &batch, copied, Some(point))?;
    tee.rows(&mut batch).await;
    tee.copied(point).await;
    tracing::info!(
        table = %info.name,
        rows = copied,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot copied"
    );
    Ok(copied)
}

fn write_batch(
    store: &mut Store,
    id: i64,
    batch: &[(Vec<u8>, Vec<u8>)],
    copied: u64,
    done_at: Option<Position>,
) -> Result<()> {
    let fail = |e: rusqlite::Error| PipelineError::store("write snapshot rows", e);
    let tx = store.conn.transaction().map_err(fail)?;
    {
        let mut insert = tx
            .prepare_cached("INSERT OR REPLACE INTO rows (tbl, key, doc) VALUES (?1, ?2, ?3)")
            .map_err(fail)?;
        for (key, doc) in batch {
            insert.execute(params![id, key, doc]).map_err(fail)?;
        }
    }
    // The table may have been dropped meanwhile: then nothing matches.
    tx.execute(
        "UPDATE tables SET rows_copied = ?2 WHERE id = ?1 AND state = 'snapshotting'",
        params![id, copied as i64],
    )
    .map_err(fail)?;
    if let Some(lsn) = done_at {
        tx.execute(
            "UPDATE tables SET state = ?3, error = NULL, snapshot_lsn = ?2 \
             WHERE id = ?1 AND state = 'snapshotting'",
            params![id, lsn.to_sql(), TableState::Copied.as_str()],
        )
        .map_err(fail)?;
    }
    tx.commit().map_err(fail)
}
