//! A table's snapshot, copied beside the stream.
//!
//! Each table that is not hydrated yet gets its own task (started by
//! [`crate::Pipeline::run`], and kept across the restarts that catalog
//! changes cause). The task creates a temporary logical slot with an
//! exported snapshot, copies the table under that snapshot in a
//! `REPEATABLE READ` transaction, writes the documents in batches, and
//! ends by marking the table [`TableState::Copied`] with the slot's
//! consistent point `C`. It writes nothing but the table's own documents
//! and catalog row, so the source's stream keeps applying to the other
//! tables meanwhile; for this table the stream keeps the changes of every
//! transaction as *pending* (raw pgoutput messages in the store, with the
//! transaction's commit positions), and once the copy is in, the source's
//! task applies the pending changes of the transactions committed at or
//! after `C` and marks the table running, in one store transaction (see
//! `source::replay_pending`). A crash during the copy restarts it from
//! scratch under a new snapshot; the pending changes are kept, and the
//! new `C` selects from them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::position::Position;
use evolve_pg::{quote_ident, quote_literal};
use futures_util::StreamExt;
use rusqlite::params;
use tokio::sync::watch;

use crate::apply::TableRuntime;
use crate::config::Connection;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;
use crate::store::{SourceInfo, Store, TableInfo, TableState};
use crate::supervise::{Task, Verdict, supervise};
use crate::upstream::{self, CopyTextReader};

/// Rows per store transaction while copying.
const BATCH: usize = 5_000;

/// What a hydrator needs.
pub(crate) struct HydrateContext {
    pub source: SourceInfo,
    pub connection: Connection,
    pub state_dir: PathBuf,
    pub table: TableInfo,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
}

/// Copies the table until done or `stop`, retrying after transient
/// failures. A row the encoder refuses fails every copy the same way, and
/// each copy reads the whole table upstream again: the table stalls, as it
/// does when a streamed row cannot be encoded, and keeps none of its
/// partial copy.
pub(crate) async fn run(mut ctx: HydrateContext) {
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
            _ => Verdict::Retry,
        },
    )
    .await
}

/// One copy, ended early (and fine) when the pipeline stops.
async fn attempt(ctx: &mut HydrateContext) -> Result<()> {
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
fn stall(ctx: &HydrateContext, problem: &str) -> Result<()> {
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
async fn copy(ctx: &HydrateContext) -> Result<u64> {
    let info = &ctx.table;
    let id = info.id;
    let mut store = Store::open(&ctx.state_dir)?;
    let fail = |e: rusqlite::Error| PipelineError::store("snapshot", e);
    {
        let tx = store.conn.transaction().map_err(fail)?;
        tx.execute("DELETE FROM rows WHERE tbl = ?1", [id])
            .map_err(fail)?;
        tx.execute(
            "UPDATE tables SET state = 'snapshotting', rows_copied = 0, snapshot_lsn = NULL \
             WHERE id = ?1",
            [id],
        )
        .map_err(fail)?;
        tx.commit().map_err(fail)?;
    }
    ctx.status
        .set(ObjectKind::Table, &info.name, "snapshotting", None);
    let client = upstream::connect(&ctx.source.connection, &ctx.connection).await?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut temp_slot = ctx.source.slot.clone();
    temp_slot.truncate(40);
    let temp_slot = format!("{temp_slot}_s{id}_{nanos}");
    let snapshot = upstream::export_snapshot(
        &ctx.source.name,
        &ctx.connection,
        &ctx.source.publication,
        &temp_slot,
    )
    .await?;
    let columns: Vec<String> = info
        .document_columns()
        .map(|c| quote_ident(&c.name))
        .collect();
    let copy = format!(
        "COPY (SELECT {} FROM {}.{}) TO STDOUT",
        columns.join(", "),
        quote_ident(&info.upstream_schema),
        quote_ident(&info.upstream_table)
    );
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            quote_literal(&snapshot.snapshot_name)
        ))
        .await
        .map_err(|e| PipelineError::database("start the snapshot transaction", &e))?;
    let out = client
        .copy_out(copy.as_str())
        .await
        .map_err(|e| PipelineError::database(format!("COPY {}", info.reference()), &e))?;
    futures_util::pin_mut!(out);
    let mut table = TableRuntime::new(info.clone(), Vec::new())?;
    table.set_copy_mapping();
    let mut reader = CopyTextReader::default();
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(BATCH);
    let mut copied: u64 = 0;
    let started = Instant::now();
    let mut reported = Instant::now();
    while let Some(chunk) = out.next().await {
        let chunk =
            chunk.map_err(|e| PipelineError::database(format!("COPY {}", info.reference()), &e))?;
        reader.feed(&chunk, |row| {
            batch.push(table.encode_values(row)?);
            Ok::<(), PipelineError>(())
        })?;
        if batch.len() >= BATCH {
            copied += batch.len() as u64;
            write_batch(&mut store, id, &batch, copied, None)?;
            ctx.status
                .count(ObjectKind::Table, &info.name, batch.len() as u64, None);
            batch.clear();
            if reported.elapsed() >= Duration::from_secs(1) {
                reported = Instant::now();
                let rate = copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
                tracing::info!(table = %info.name, rows = copied, rows_per_second = rate as u64, "snapshot progress");
            }
        }
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| PipelineError::database("end the snapshot transaction", &e))?;
    copied += batch.len() as u64;
    write_batch(
        &mut store,
        id,
        &batch,
        copied,
        Some(snapshot.consistent_point.into()),
    )?;
    drop(snapshot);
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
