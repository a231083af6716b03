//! A source's task: snapshot the tables that need it, then apply the
//! replication stream to the state, one upstream transaction per SQLite
//! transaction, and confirm positions to the slot once every sink has
//! committed them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use evolve_pg::{quote_ident, quote_literal};
use evolve_pgoutput::{LogicalDecoder, LogicalMessage, Lsn};
use futures_util::StreamExt;
use pgwire_replication::{ReplicationClient, ReplicationEvent};
use rusqlite::params;
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::apply::{TableRuntime, Txn};
use crate::bus::{Bus, Committed};
use crate::config::Connection;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::status::StatusBoard;
use crate::store::{SourceInfo, Store, TableState};
use crate::upstream::{self, CopyTextReader};

/// Rows per SQLite transaction while copying a snapshot.
const SNAPSHOT_BATCH: usize = 5_000;

/// What a source task needs.
pub(crate) struct SourceContext {
    pub source: SourceInfo,
    pub connection: Connection,
    pub state_dir: PathBuf,
    /// The applied position, for the sinks.
    pub applied: watch::Sender<Lsn>,
    /// The sinks of this source's interfaces: interface id and the sink's
    /// committed ("effective") position.
    pub sinks: Vec<(i64, watch::Receiver<Lsn>)>,
    pub stop: watch::Receiver<bool>,
    pub status: StatusBoard,
    /// Where committed transactions are published.
    pub bus: Bus,
}

/// Runs the source until `stop`, retrying after failures.
pub(crate) async fn run(mut ctx: SourceContext) {
    let mut backoff = Duration::from_millis(500);
    loop {
        if *ctx.stop.borrow() {
            return;
        }
        ctx.status
            .set(ObjectKind::Source, &ctx.source.name, "starting", None);
        match run_once(&mut ctx).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(source = %ctx.source.name, error = %e, "source failed; retrying");
                ctx.status.set(
                    ObjectKind::Source,
                    &ctx.source.name,
                    "stalled",
                    Some(e.to_string()),
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = ctx.stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

async fn run_once(ctx: &mut SourceContext) -> Result<()> {
    let name = ctx.source.name.clone();
    let mut store = Store::open(&ctx.state_dir)?;
    let client = upstream::connect(&ctx.source.connection, &ctx.connection).await?;
    let slot = upstream::slot_status(&client, &ctx.source.slot).await?;
    let slot = match slot {
        Some(s) if s.wal_status.as_deref() != Some("lost") => s,
        Some(_) => {
            return Err(PipelineError::SlotLost {
                source_name: name,
                slot: ctx.source.slot.clone(),
                detail: "Its wal_status is \"lost\": the WAL it needed was removed.".into(),
            });
        }
        None => {
            return Err(PipelineError::SlotLost {
                source_name: name,
                slot: ctx.source.slot.clone(),
                detail: "The slot does not exist upstream.".into(),
            });
        }
    };

    let interfaces = store.interfaces()?;
    let mut tables = Vec::new();
    for info in store.tables_of(&name)? {
        let ids = interfaces
            .iter()
            .filter(|i| i.table == info.name)
            .map(|i| i.id)
            .collect();
        tables.push(TableRuntime::new(info, ids)?);
    }
    for table in tables.iter_mut() {
        if matches!(
            table.info.state,
            TableState::Pending | TableState::Snapshotting
        ) {
            ctx.status
                .set(ObjectKind::Table, &table.info.name, "snapshotting", None);
            hydrate(ctx, &client, &mut store, table).await?;
        }
        ctx.status.set(
            ObjectKind::Table,
            &table.info.name,
            match table.info.state {
                TableState::Stalled => "stalled",
                _ => "running",
            },
            table.info.error.clone(),
        );
    }
    drop(client);
    stream(ctx, &mut store, tables, slot.confirmed_flush).await
}

/// Copies `table`'s rows under a temporary slot's exported snapshot and
/// marks it running from the slot's consistent point.
async fn hydrate(
    ctx: &SourceContext,
    client: &Client,
    store: &mut Store,
    table: &mut TableRuntime,
) -> Result<()> {
    let id = table.info.id;
    let fail = |e: rusqlite::Error| PipelineError::store("snapshot", e);
    store
        .conn
        .execute("DELETE FROM rows WHERE tbl = ?1", [id])
        .map_err(fail)?;
    store
        .conn
        .execute(
            "UPDATE tables SET state = 'snapshotting', rows_copied = 0 WHERE id = ?1",
            [id],
        )
        .map_err(fail)?;
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
    let columns: Vec<String> = table
        .info
        .document_columns()
        .map(|c| quote_ident(&c.name))
        .collect();
    let copy = format!(
        "COPY (SELECT {} FROM {}.{}) TO STDOUT",
        columns.join(", "),
        quote_ident(&table.info.upstream_schema),
        quote_ident(&table.info.upstream_table)
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
        .map_err(|e| PipelineError::database(format!("COPY {}", table.info.reference()), &e))?;
    futures_util::pin_mut!(out);
    table.set_copy_mapping();
    let mut reader = CopyTextReader::default();
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(SNAPSHOT_BATCH);
    let mut copied: u64 = 0;
    let started = std::time::Instant::now();
    while let Some(chunk) = out.next().await {
        let chunk = chunk
            .map_err(|e| PipelineError::database(format!("COPY {}", table.info.reference()), &e))?;
        reader.feed(&chunk, |row| {
            batch.push(table.encode_values(row)?);
            Ok::<(), PipelineError>(())
        })?;
        if batch.len() >= SNAPSHOT_BATCH {
            copied += batch.len() as u64;
            write_snapshot_batch(store, id, &batch, copied, None)?;
            batch.clear();
            tracing::info!(
                table = %table.info.name,
                rows = copied,
                rows_per_second = (copied as f64 / started.elapsed().as_secs_f64().max(1e-3)) as u64,
                "snapshot progress"
            );
        }
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| PipelineError::database("end the snapshot transaction", &e))?;
    copied += batch.len() as u64;
    let point = snapshot.consistent_point;
    write_snapshot_batch(store, id, &batch, copied, Some(point))?;
    drop(snapshot);
    table.clear_mapping();
    table.info.state = TableState::Running;
    table.info.snapshot_lsn = Some(point);
    table.info.rows_copied = copied;
    tracing::info!(table = %table.info.name, rows = copied, "snapshot done");
    Ok(())
}

fn write_snapshot_batch(
    store: &mut Store,
    id: i64,
    batch: &[(Vec<u8>, Vec<u8>)],
    copied: u64,
    done_at: Option<Lsn>,
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
    tx.execute(
        "UPDATE tables SET rows_copied = ?2 WHERE id = ?1",
        params![id, copied as i64],
    )
    .map_err(fail)?;
    if let Some(lsn) = done_at {
        tx.execute(
            "UPDATE tables SET state = 'running', error = NULL, snapshot_lsn = ?2 WHERE id = ?1",
            params![id, lsn.0 as i64],
        )
        .map_err(fail)?;
    }
    tx.commit().map_err(fail)
}

/// PostgreSQL's commit timestamps count from 2000-01-01.
fn unix_micros(pg_micros: i64) -> i64 {
    pg_micros.saturating_add(evolve_pgoutput::POSTGRES_EPOCH_UNIX_MICROS)
}

fn to_wire(lsn: Lsn) -> pgwire_replication::Lsn {
    pgwire_replication::Lsn::from_u64(lsn.0)
}

fn from_wire(lsn: pgwire_replication::Lsn) -> Lsn {
    Lsn(lsn.as_u64())
}

/// Applies the stream until `stop`.
async fn stream(
    ctx: &mut SourceContext,
    store: &mut Store,
    mut tables: Vec<TableRuntime>,
    confirmed: Lsn,
) -> Result<()> {
    let name = ctx.source.name.clone();
    let mut by_oid: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, t) in tables.iter().enumerate() {
        by_oid.entry(t.info.upstream_oid).or_default().push(i);
    }
    let mut interfaces: Vec<i64> = tables
        .iter()
        .flat_map(|t| t.interfaces.iter().copied())
        .collect();
    interfaces.sort_unstable();
    interfaces.dedup();

    let config = upstream::replication_config(
        &ctx.source.connection,
        &ctx.connection,
        &ctx.source.slot,
        &ctx.source.publication,
    )?
    .with_start_lsn(to_wire(confirmed));
    let mut repl = ReplicationClient::connect(config)
        .await
        .map_err(|e| upstream::replication_connect_error(&name, &ctx.connection, &e))?;

    let mut applied = store.applied_lsn(&name)?;
    let mut stored = applied;
    ctx.applied.send_replace(applied);
    let mut acked = confirmed;
    let mut idle = Lsn(0);
    let mut txn: Option<Txn> = None;
    let mut skip = false;
    let mut commit_time: i64 = 0;
    let mut decoder = LogicalDecoder::new();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    ctx.status.set(ObjectKind::Source, &name, "running", None);
    loop {
        tokio::select! {
            _ = ctx.stop.changed() => {
                // Confirm what the sinks have committed before leaving, and
                // give the replication worker a moment to send it.
                let target = ack_target(ctx, applied, txn.is_none(), idle).max(acked);
                if target > confirmed {
                    repl.update_applied_lsn(to_wire(target));
                    let metrics = repl.metrics();
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
                    while from_wire(metrics.last_applied_lsn()) < target
                        && tokio::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                if applied > stored {
                    store.conn.execute(
                        "UPDATE sources SET applied_lsn = ?2 WHERE name = ?1 AND applied_lsn < ?2",
                        params![name, applied.0 as i64],
                    ).map_err(|e| PipelineError::store("record applied position", e))?;
                }
                let _ = repl.shutdown().await;
                return Ok(());
            }
            event = repl.recv() => {
                let event = match event {
                    Ok(Some(event)) => event,
                    Ok(None) => return Err(PipelineError::Replication {
                        source_name: name,
                        message: "the server ended the stream".into(),
                    }),
                    Err(e) => return Err(upstream::replication_connect_error(&name, &ctx.connection, &e)),
                };
                match event {
                    ReplicationEvent::Begin { final_lsn, commit_time_micros, .. } => {
                        let final_lsn = from_wire(final_lsn);
                        skip = final_lsn < applied;
                        txn = Some(Txn::new(final_lsn));
                        commit_time = unix_micros(commit_time_micros);
                    }
                    ReplicationEvent::XLogData { data, .. } => {
                        let message = decoder.decode(&data).map_err(|e| PipelineError::Replication {
                            source_name: name.clone(),
                            message: e.to_string(),
                        })?;
                        on_message(ctx, store, &mut tables, &by_oid, txn.as_mut().filter(|_| !skip), message)?;
                    }
                    ReplicationEvent::Commit { end_lsn, .. } => {
                        let end_lsn = from_wire(end_lsn);
                        if let Some(t) = txn.take()
                            && !skip
                            && end_lsn > applied
                        {
                            let changes = if t.is_empty() {
                                Vec::new()
                            } else {
                                let changes = t.commit(store, &tables, &name, end_lsn, commit_time)?;
                                stored = end_lsn;
                                changes
                            };
                            applied = end_lsn;
                            ctx.applied.send_replace(applied);
                            ctx.bus.publish(Committed {
                                source: name.clone(),
                                pos: end_lsn,
                                commit_time_micros: commit_time,
                                changes,
                            });
                        }
                    }
                    ReplicationEvent::KeepAlive { wal_end, .. } if txn.is_none() => {
                        idle = idle.max(from_wire(wal_end));
                    }
                    _ => {}
                }
            }
            _ = tick.tick() => {
                if applied > stored {
                    store.conn.execute(
                        "UPDATE sources SET applied_lsn = ?2 WHERE name = ?1 AND applied_lsn < ?2",
                        params![name, applied.0 as i64],
                    ).map_err(|e| PipelineError::store("record applied position", e))?;
                    stored = applied;
                }
                let target = ack_target(ctx, applied, txn.is_none(), idle);
                if target > acked {
                    repl.update_applied_lsn(to_wire(target));
                    acked = target;
                }
                for &interface in &interfaces {
                    let mut horizon = applied;
                    for (i, rx) in &ctx.sinks {
                        if *i == interface {
                            horizon = horizon.min(*rx.borrow());
                        }
                    }
                    store.prune_feed(interface, horizon)?;
                }
            }
        }
    }
}

/// The position to confirm: the applied one, or less if a sink is behind;
/// the idle keepalive position when everything is caught up.
fn ack_target(ctx: &SourceContext, applied: Lsn, between_transactions: bool, idle: Lsn) -> Lsn {
    let mut target = applied;
    for (_, rx) in &ctx.sinks {
        target = target.min(*rx.borrow());
    }
    if target == applied && between_transactions && idle > target {
        target = idle;
    }
    target
}

fn on_message(
    ctx: &SourceContext,
    store: &Store,
    tables: &mut [TableRuntime],
    by_oid: &HashMap<u32, Vec<usize>>,
    txn: Option<&mut Txn>,
    message: LogicalMessage<'_>,
) -> Result<()> {
    let none: &[usize] = &[];
    match message {
        LogicalMessage::Relation(relation) => {
            for &t in by_oid.get(&relation.oid).map_or(none, Vec::as_slice) {
                if let Err(problem) = tables[t].on_relation(&relation)
                    && tables[t].info.state == TableState::Running
                {
                    tracing::warn!(table = %tables[t].info.name, %problem, "table stalled");
                    store.set_table_state(
                        tables[t].info.id,
                        TableState::Stalled,
                        Some(&problem),
                        tables[t].info.snapshot_lsn,
                    )?;
                    tables[t].info.state = TableState::Stalled;
                    tables[t].info.error = Some(problem.clone());
                    ctx.status.set(
                        ObjectKind::Table,
                        &tables[t].info.name,
                        "stalled",
                        Some(problem),
                    );
                }
            }
        }
        LogicalMessage::Insert(m) => {
            if let Some(txn) = txn {
                for &t in by_oid.get(&m.oid).map_or(none, Vec::as_slice) {
                    if tables[t].applies(txn.final_lsn) {
                        txn.insert(store, tables, t, &m.new)?;
                    }
                }
            }
        }
        LogicalMessage::Update(m) => {
            if let Some(txn) = txn {
                for &t in by_oid.get(&m.oid).map_or(none, Vec::as_slice) {
                    if tables[t].applies(txn.final_lsn) {
                        txn.update(store, tables, t, m.old.as_ref(), &m.new)?;
                    }
                }
            }
        }
        LogicalMessage::Delete(m) => {
            if let Some(txn) = txn {
                for &t in by_oid.get(&m.oid).map_or(none, Vec::as_slice) {
                    if tables[t].applies(txn.final_lsn) {
                        txn.delete(store, tables, t, &m.old)?;
                    }
                }
            }
        }
        LogicalMessage::Truncate(m) => {
            if let Some(txn) = txn {
                for oid in &m.relation_oids {
                    for &t in by_oid.get(oid).map_or(none, Vec::as_slice) {
                        if tables[t].applies(txn.final_lsn) {
                            txn.truncate(store, tables, t)?;
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}
