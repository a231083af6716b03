//! The PostgreSQL source: a logical replication slot read with the
//! `pgoutput` plugin, and table snapshots taken with a temporary slot's
//! exported snapshot.
//!
//! Positions are LSNs ([`Position::from_lsn`]): a transaction's commit
//! position is its commit record's LSN (pgoutput's Begin `final_lsn`), its
//! end position the end of that record (Commit `end_lsn`). A snapshot's
//! position is the temporary slot's consistent point, which pgoutput
//! compares with commit record LSNs in the same way. Tables are identified
//! by their OID, which a rename keeps. Confirmation is the standby status
//! update's flush position, so the slot's `confirmed_flush_lsn` follows it;
//! the slot itself is the upstream's record of what may be released.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use evolve_core::change::{ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};
use evolve_pg::{quote_ident, quote_literal};
use evolve_pgoutput::{LogicalDecoder, LogicalMessage, OldTuple, TupleData, Value};
use futures_util::StreamExt;
use pgwire_replication::{ReplicationClient, ReplicationEvent};

use super::{ChangeStream, Source, SourceEvent, TableSnapshot};
use crate::config::Connection;
use crate::error::{PipelineError, Result};
use crate::position::Position;
use crate::store::{SourceInfo, TableInfo};
use crate::upstream::{self, CopyTextReader, ExportedSnapshot};

/// A PostgreSQL source: its catalog entry and its connection.
pub struct PostgresSource {
    source: SourceInfo,
    connection: Connection,
}

impl PostgresSource {
    pub fn new(source: SourceInfo, connection: Connection) -> PostgresSource {
        PostgresSource { source, connection }
    }
}

/// The `application_name` of a stream's catalog session.
const CATALOG_APPLICATION: &str = "evolve-pipeline-stream";

/// How long [`PostgresStream::wait_visible`] waits at most.
const VISIBLE_WAIT: Duration = Duration::from_secs(10);

fn to_wire(pos: Position) -> pgwire_replication::Lsn {
    pgwire_replication::Lsn::from_u64(pos.lsn().0)
}

fn from_wire(lsn: pgwire_replication::Lsn) -> Position {
    Position::from_lsn(evolve_pgoutput::Lsn(lsn.as_u64()))
}

/// PostgreSQL's commit timestamps count from 2000-01-01.
fn unix_micros(pg_micros: i64) -> i64 {
    pg_micros.saturating_add(evolve_pgoutput::POSTGRES_EPOCH_UNIX_MICROS)
}

impl Source for PostgresSource {
    type Stream = PostgresStream;
    type Snapshot = PostgresSnapshot;

    /// Streams the transactions that end after `from`, the store's applied
    /// position. The slot's confirmed position may be further back (a sink
    /// that has not committed everything holds it there), but what lies
    /// between is in the store already: asked to start at `from`, the
    /// server decodes those transactions without handing them to pgoutput
    /// (it skips every transaction whose commit record starts before the
    /// start; PostgreSQL's `START_REPLICATION` starts at the later of the
    /// position asked and the slot's `confirmed_flush_lsn`), so a restart
    /// behind a slow sink does not send them again. The slot is still
    /// acknowledged only up to its confirmed position until the engine
    /// confirms more.
    async fn stream(&self, from: Position) -> Result<PostgresStream> {
        let name = &self.source.name;
        let slot_name = &self.source.slot;
        let client = upstream::connect(&self.source.connection, &self.connection).await?;
        let slot = upstream::slot_status(&client, slot_name).await?;
        drop(client);
        let slot = match slot {
            Some(s) if s.wal_status.as_deref() != Some("lost") => s,
            Some(_) => {
                return Err(PipelineError::SlotLost {
                    source_name: name.clone(),
                    slot: slot_name.clone(),
                    detail: "Its wal_status is \"lost\": the WAL it needed was removed.".into(),
                });
            }
            None => {
                return Err(PipelineError::SlotLost {
                    source_name: name.clone(),
                    slot: slot_name.clone(),
                    detail: "The slot does not exist upstream.".into(),
                });
            }
        };
        let confirmed = Position::from_lsn(slot.confirmed_flush);
        let config = upstream::replication_config(
            &self.source.connection,
            &self.connection,
            slot_name,
            &self.source.publication,
        )?
        .with_start_lsn(to_wire(confirmed.max(from)))
        .with_ack_lsn(to_wire(confirmed));
        let repl = ReplicationClient::connect(config)
            .await
            .map_err(|e| upstream::replication_connect_error(name, &self.connection, &e))?;
        // Opened now rather than at the first Relation message, so that
        // the stream's first schema is not held up by a connection.
        let catalog = upstream::connect_as(
            &self.source.connection,
            &self.connection,
            CATALOG_APPLICATION,
        )
        .await?;
        Ok(PostgresStream {
            name: name.clone(),
            connection_name: self.source.connection.clone(),
            publication: self.source.publication.clone(),
            connection: self.connection.clone(),
            catalog: Some(catalog),
            unnumbered: false,
            xid: None,
            repl,
            decoder: Decoder::default(),
            queue: VecDeque::new(),
            in_transaction: false,
            sent: confirmed,
            started_at: confirmed,
        })
    }

    async fn snapshot(&self, table: &TableInfo) -> Result<PostgresSnapshot> {
        let client = upstream::connect(&self.source.connection, &self.connection).await?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut temp_slot = self.source.slot.clone();
        temp_slot.truncate(40);
        let temp_slot = format!("{temp_slot}_s{}_{nanos}", table.id);
        let exported = upstream::export_snapshot(
            &self.source.name,
            &self.connection,
            &self.source.publication,
            &temp_slot,
        )
        .await?;
        let columns: Vec<String> = table
            .document_columns()
            .map(|c| quote_ident(&c.name))
            .collect();
        let copy = format!(
            "COPY (SELECT {} FROM {}.{}) TO STDOUT",
            columns.join(", "),
            quote_ident(&table.upstream_schema),
            quote_ident(&table.upstream_table)
        );
        client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
                quote_literal(&exported.snapshot_name)
            ))
            .await
            .map_err(|e| PipelineError::database("start the snapshot transaction", &e))?;
        let what = format!("COPY {}", table.reference());
        let out = client
            .copy_out(copy.as_str())
            .await
            .map_err(|e| PipelineError::database(what.clone(), &e))?;
        Ok(PostgresSnapshot {
            position: Position::from_lsn(exported.consistent_point),
            _exported: exported,
            client,
            out: Box::pin(out),
            reader: CopyTextReader::default(),
            what,
        })
    }
}

/// A slot's stream.
pub struct PostgresStream {
    name: String,
    connection_name: String,
    publication: String,
    connection: Connection,
    /// A session for catalog lookups (`application_name`
    /// `evolve-pipeline-stream`, opened with the stream and again when it
    /// failed): column numbers and publication checks
    /// ([`PostgresStream::number_columns`], [`ChangeStream::gaps`]).
    catalog: Option<tokio_postgres::Client>,
    /// The queue holds schemas whose columns are not numbered yet.
    unnumbered: bool,
    /// The transaction being decoded (its xid), and whether catalog
    /// sessions see it yet ([`PostgresStream::wait_visible`]).
    xid: Option<(u32, bool)>,
    repl: ReplicationClient,
    decoder: Decoder,
    /// Events decoded and not yet taken (a truncate of several tables).
    queue: VecDeque<SourceEvent>,
    in_transaction: bool,
    /// The last position confirmed to the server.
    sent: Position,
    started_at: Position,
}

impl ChangeStream for PostgresStream {
    async fn next(&mut self) -> Result<SourceEvent> {
        loop {
            // Before any event of the queue is taken: a call cancelled
            // while numbering left it to this one.
            if self.unnumbered {
                self.number_columns().await?;
                self.unnumbered = false;
            }
            if let Some(event) = self.queue.pop_front() {
                return Ok(event);
            }
            let event = match self.repl.recv().await {
                Ok(Some(event)) => event,
                Ok(None) => {
                    return Err(PipelineError::Replication {
                        source_name: self.name.clone(),
                        message: "the server ended the stream".into(),
                    });
                }
                Err(e) => {
                    return Err(upstream::replication_connect_error(
                        &self.name,
                        &self.connection,
                        &e,
                    ));
                }
            };
            match event {
                ReplicationEvent::Begin {
                    final_lsn,
                    xid,
                    commit_time_micros,
                } => {
                    self.in_transaction = true;
                    self.xid = Some((xid, false));
                    return Ok(SourceEvent::Begin {
                        commit: from_wire(final_lsn),
                        commit_time_micros: unix_micros(commit_time_micros),
                    });
                }
                ReplicationEvent::XLogData { data, .. } => {
                    self.decoder
                        .decode(&data, &mut self.queue)
                        .map_err(|message| PipelineError::Replication {
                            source_name: self.name.clone(),
                            message,
                        })?;
                    self.unnumbered = self
                        .queue
                        .iter()
                        .any(|e| matches!(e, SourceEvent::Schema { .. }));
                }
                ReplicationEvent::Message {
                    prefix, content, ..
                } if self.in_transaction => {
                    return Ok(SourceEvent::Marker {
                        prefix,
                        content: content.to_vec(),
                    });
                }
                ReplicationEvent::Commit { end_lsn, .. } => {
                    self.in_transaction = false;
                    self.xid = None;
                    return Ok(SourceEvent::Commit {
                        end: from_wire(end_lsn),
                    });
                }
                ReplicationEvent::KeepAlive { wal_end, .. } if !self.in_transaction => {
                    return Ok(SourceEvent::Idle {
                        upto: from_wire(wal_end),
                    });
                }
                _ => {}
            }
        }
    }

    /// The publication's settings now ([`upstream::publication_gaps`]),
    /// including those of the transaction being decoded, and enum values
    /// renamed since a table pinned them ([`upstream::relabeled_enums`]).
    async fn gaps(&mut self, tables: &[&TableInfo]) -> Result<Vec<(String, String)>> {
        self.wait_visible().await?;
        let publication = self.publication.clone();
        let client = self.catalog().await?;
        let mut oids: Vec<u32> = tables.iter().map(|t| t.upstream_oid).collect();
        oids.sort_unstable();
        oids.dedup();
        let found = upstream::publication_gaps(client, &publication, &oids).await?;
        let mut gaps = Vec::new();
        for table in tables {
            let Some(published) = found.iter().find(|p| p.oid == table.upstream_oid) else {
                continue;
            };
            let reads = |c: &str| table.columns.iter().any(|p| p.name == c && p.is_read());
            if let Some((problem, fix)) = published.gap(true, reads) {
                gaps.push((
                    table.name.clone(),
                    format!(
                        "{problem}; way out: {fix} then a new version of the table through a replacement (ABSORB = 'auto' makes both)"
                    ),
                ));
            }
        }
        for (name, problem) in upstream::relabeled_enums(client, tables).await? {
            if !gaps.iter().any(|(n, _)| *n == name) {
                gaps.push((name, problem));
            }
        }
        Ok(gaps)
    }

    fn upstream_confirmed(&self) -> Option<Position> {
        Some(self.started_at)
    }

    fn confirm(&mut self, upto: Position) {
        if upto > self.sent {
            self.repl.update_applied_lsn(to_wire(upto));
            self.sent = upto;
        }
    }

    async fn close(self) {
        let PostgresStream {
            mut repl,
            sent,
            started_at,
            ..
        } = self;
        if sent > started_at {
            // The replication worker sends status updates on its own
            // schedule: give it a moment to send the last one.
            let metrics = repl.metrics();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
            while from_wire(metrics.last_applied_lsn()) < sent
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let _ = repl.shutdown().await;
    }
}

impl PostgresStream {
    /// Gives the columns of each schema just decoded their `attnum`
    /// (pgoutput's Relation message names columns without numbers), so
    /// that a column dropped and re-added under its name, or names swapped
    /// by renames, is not taken for the pinned column. The numbers are the
    /// catalog's now, which may be later than the message: a column
    /// re-added after it shows its new number early, and the table stalls
    /// at this schema rather than at the re-add (it must stall at one of
    /// them; none of its rows after the stall is applied either way). A
    /// table gone from the catalog keeps names only. Run by
    /// [`ChangeStream::next`] before it hands out a queued event, again
    /// when a cancelled call was numbering (numbering twice is harmless).
    async fn number_columns(&mut self) -> Result<()> {
        self.wait_visible().await?;
        for i in 0..self.queue.len() {
            let SourceEvent::Schema { table, schema } = &self.queue[i] else {
                continue;
            };
            let (oid, schema) = (*table, Arc::clone(schema));
            let attnums = self.attnums(oid).await?;
            if attnums.is_empty() {
                continue;
            }
            let mut numbered = (*schema).clone();
            for c in &mut numbered.columns {
                c.attnum = attnums.get(&c.name).copied();
            }
            let numbered = Arc::new(numbered);
            self.decoder.schemas.insert(oid, Arc::clone(&numbered));
            if let SourceEvent::Schema { schema, .. } = &mut self.queue[i] {
                *schema = numbered;
            }
        }
        Ok(())
    }

    /// The session for catalog lookups, opened (again) when needed.
    async fn catalog(&mut self) -> Result<&tokio_postgres::Client> {
        if self.catalog.as_ref().is_none_or(|c| c.is_closed()) {
            self.catalog = Some(
                upstream::connect_as(&self.connection_name, &self.connection, CATALOG_APPLICATION)
                    .await?,
            );
        }
        self.catalog
            .as_ref()
            .ok_or_else(|| PipelineError::Replication {
                source_name: self.name.clone(),
                message: "no catalog session".into(),
            })
    }

    /// Waits until the catalog session sees the transaction being decoded:
    /// its commit record reaches the stream as soon as it is flushed,
    /// which can be a moment before the committing session makes it
    /// visible to others, and the catalog as it was before it (the column
    /// numbers before a DDL, a publication before its change) would be
    /// taken for the catalog after it. The xid is widened to 64 bits with
    /// the epoch of the session's snapshot.
    async fn wait_visible(&mut self) -> Result<()> {
        let Some((xid, false)) = self.xid else {
            return Ok(());
        };
        let deadline = tokio::time::Instant::now() + VISIBLE_WAIT;
        loop {
            let client = self.catalog().await?;
            let visible: bool = client
                .query_one(
                    "WITH s AS (SELECT pg_current_snapshot() AS snap), \
                          m AS (SELECT snap, pg_snapshot_xmax(snap)::text::bigint AS xmax FROM s) \
                     SELECT pg_visible_in_snapshot( \
                              (((xmax >> 32) - CASE WHEN $1 >= (xmax & 4294967295) THEN 1 ELSE 0 END) \
                                 * 4294967296 + $1)::text::xid8, snap) \
                     FROM m",
                    &[&i64::from(xid)],
                )
                .await
                .map_err(|e| PipelineError::database("wait for a decoded transaction's visibility", &e))?
                .get(0);
            if visible {
                self.xid = Some((xid, true));
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(PipelineError::Replication {
                    source_name: self.name.clone(),
                    message: format!(
                        "transaction {xid}, decoded from the slot, is still not visible to other sessions after {} s",
                        VISIBLE_WAIT.as_secs()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Table `oid`'s columns by name and `attnum`, from the catalog.
    async fn attnums(&mut self, oid: u32) -> Result<HashMap<String, i16>> {
        let client = self.catalog().await?;
        let rows = client
            .query(
                "SELECT attname::text, attnum FROM pg_catalog.pg_attribute \
                 WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped",
                &[&oid],
            )
            .await
            .map_err(|e| PipelineError::database("read an upstream table's column numbers", &e))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

/// pgoutput messages to [`SourceEvent`]s: the latest schema of each table
/// from its Relation messages, rows with their values shared with the
/// message's buffer.
#[derive(Default)]
pub(crate) struct Decoder {
    decoder: LogicalDecoder,
    schemas: HashMap<u32, Arc<TableSchema>>,
}

impl Decoder {
    /// Decodes one pgoutput message into `out`: a Relation gives a
    /// [`SourceEvent::Schema`], a change a [`SourceEvent::Row`] (a
    /// truncate one per table); the transaction's own framing is the
    /// stream's. An error is the decoder's message.
    pub(crate) fn decode(
        &mut self,
        data: &Bytes,
        out: &mut VecDeque<SourceEvent>,
    ) -> std::result::Result<(), String> {
        let message = self.decoder.decode(data).map_err(|e| e.to_string())?;
        let row = |schemas: &HashMap<u32, Arc<TableSchema>>,
                   oid: u32,
                   kind: ChangeKind,
                   old: Option<&OldTuple<'_>>,
                   new: Option<&TupleData<'_>>|
         -> std::result::Result<SourceEvent, String> {
            let schema = schemas.get(&oid).ok_or_else(|| {
                format!("a change of table OID {oid} arrived before its Relation message")
            })?;
            Ok(SourceEvent::Row {
                table: oid,
                change: RowChange {
                    table: Arc::clone(schema),
                    kind,
                    old: old
                        .map(|o| datums(data, schema, o.tuple(), matches!(o, OldTuple::Key(_)))),
                    new: new.map(|n| datums(data, schema, n, false)),
                },
            })
        };
        match message {
            LogicalMessage::Relation(relation) => {
                let schema = Arc::new(table_schema(&relation));
                self.schemas.insert(relation.oid, Arc::clone(&schema));
                out.push_back(SourceEvent::Schema {
                    table: relation.oid,
                    schema,
                });
            }
            LogicalMessage::Insert(m) => {
                out.push_back(row(
                    &self.schemas,
                    m.oid,
                    ChangeKind::Insert,
                    None,
                    Some(&m.new),
                )?);
            }
            LogicalMessage::Update(m) => {
                out.push_back(row(
                    &self.schemas,
                    m.oid,
                    ChangeKind::Update,
                    m.old.as_ref(),
                    Some(&m.new),
                )?);
            }
            LogicalMessage::Delete(m) => {
                out.push_back(row(
                    &self.schemas,
                    m.oid,
                    ChangeKind::Delete,
                    Some(&m.old),
                    None,
                )?);
            }
            LogicalMessage::Truncate(m) => {
                for oid in m.relation_oids {
                    out.push_back(row(&self.schemas, oid, ChangeKind::Truncate, None, None)?);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// An upstream table's schema from its Relation message.
fn table_schema(relation: &evolve_pgoutput::Relation<'_>) -> TableSchema {
    TableSchema {
        schema: if relation.namespace.is_empty() {
            "pg_catalog".to_string()
        } else {
            relation.namespace.to_string()
        },
        name: relation.name.to_string(),
        columns: relation
            .columns
            .iter()
            .map(|c| ColumnSchema {
                name: c.name.to_string(),
                type_oid: c.type_oid,
                typmod: c.type_modifier,
                key: c.is_key(),
                attnum: None,
            })
            .collect(),
    }
}

/// A row image's values, sharing `data`'s buffer: text as sent, a key-only
/// old row's other columns [`Datum::Missing`].
fn datums(data: &Bytes, schema: &TableSchema, tuple: &TupleData<'_>, key_only: bool) -> Vec<Datum> {
    let shared = |b: &std::borrow::Cow<'_, [u8]>| match b {
        std::borrow::Cow::Borrowed(s) => data.slice_ref(s),
        std::borrow::Cow::Owned(v) => Bytes::copy_from_slice(v),
    };
    tuple
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            _ if key_only && !schema.columns.get(i).is_some_and(|c| c.key) => Datum::Missing,
            Value::Null => Datum::Null,
            Value::UnchangedToast => Datum::Unchanged,
            Value::Text(b) | Value::Binary(b) => Datum::Text(shared(b)),
        })
        .collect()
}

/// A table's copy under a temporary slot's exported snapshot, in a
/// `REPEATABLE READ` transaction; the slot lives as long as this does.
pub struct PostgresSnapshot {
    position: Position,
    _exported: ExportedSnapshot,
    client: tokio_postgres::Client,
    out: Pin<Box<tokio_postgres::CopyOutStream>>,
    reader: CopyTextReader,
    /// `COPY <table>`, for errors.
    what: String,
}

impl TableSnapshot for PostgresSnapshot {
    fn position(&self) -> Position {
        self.position
    }

    async fn next_rows<F>(&mut self, row: F) -> Result<bool>
    where
        F: FnMut(&[Option<&[u8]>]) -> Result<()> + Send,
    {
        match self.out.next().await {
            Some(chunk) => {
                let chunk = chunk.map_err(|e| PipelineError::database(self.what.clone(), &e))?;
                self.reader.feed(&chunk, row)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn finish(self) -> Result<()> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| PipelineError::database("end the snapshot transaction", &e))
    }
}
