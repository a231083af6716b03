//! A replica: its slot and publication upstream, and the task that
//! applies the stream to its node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evolve_core::change::{Bytes, ChangeKind, Datum, RowChange};
use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_pg::quote_ident;
use evolve_pipeline::source::postgres::PostgresSource;
use evolve_pipeline::source::{ChangeStream, Source, SourceEvent};
use evolve_pipeline::{Connection, Position, SourceInfo};
use tokio::sync::watch;

use crate::apply::{Applier, Transaction};
use crate::error::{ReplicateError, Result};

/// What a replica is.
#[derive(Clone, Debug)]
pub struct ReplicaSpec {
    /// Its name (slot and publication are `evolve_replica_<name>`).
    pub name: String,
    /// The upstream's connection url.
    pub upstream: String,
    /// The node's connection url.
    pub node: String,
    /// The upstream tables it replicates, as (schema, name).
    pub tables: Vec<(String, String)>,
    pub resolvers: Resolvers,
    /// At most one per table.
    pub transforms: Vec<crate::Transform>,
}

/// What a running replica shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// `starting`, `running`, `retrying` (after a transient error) or
    /// `halted`.
    pub state: String,
    pub error: Option<String>,
    /// The position of the last transaction applied to the node.
    pub position: Position,
    /// Conflicts by type and resolution since the task started.
    pub conflicts: BTreeMap<(ConflictType, Resolver), u64>,
}

/// What a replica's initial copy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyReport {
    pub tables: u64,
    /// Rows read from the upstream.
    pub rows: u64,
    /// Conflicts by type and resolution.
    pub conflicts: BTreeMap<(ConflictType, Resolver), u64>,
    /// The snapshot's position: the stream starts after it.
    pub position: Position,
}

impl CopyReport {
    fn add(&mut self, applied: &crate::apply::Applied) {
        for (k, n) in &applied.conflicts {
            *self.conflicts.entry(*k).or_default() += n;
        }
    }
}

/// Rows loaded per node transaction while copying.
const COPY_BATCH: usize = 5_000;

/// A replica and its task's status.
pub struct Replica {
    spec: ReplicaSpec,
    status: Arc<Mutex<ReplicaStatus>>,
}

/// At most this many upstream transactions share one node transaction.
const GROUP_TRANSACTIONS: usize = 1_000;
/// A group is applied once it holds this many row changes ...
const GROUP_ROWS: usize = 20_000;
/// ... or once it has been open this long.
const GROUP_AGE: Duration = Duration::from_millis(50);

/// The first wait after a transient failure; it doubles up to 10 s.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

impl Replica {
    /// The replica's slot and publication name.
    pub fn slot_name(name: &str) -> String {
        format!("evolve_replica_{name}")
    }

    /// Creates the replica upstream: a publication of its tables and a
    /// logical slot, both `evolve_replica_<name>`; the stream starts at
    /// the slot's creation. Nothing is created when a table is missing
    /// or the slot cannot be made.
    pub async fn create(spec: ReplicaSpec) -> Result<Replica> {
        let slot = Self::slot_name(&spec.name);
        let client = Self::upstream(&spec).await?;
        Self::create_publication(&client, &spec, &slot).await?;
        if let Err(e) = client
            .query_one(
                "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
        {
            let _ = client
                .batch_execute(&format!("DROP PUBLICATION {}", quote_ident(&slot)))
                .await;
            return Err(ReplicateError::node(
                format!("create replication slot {slot}"),
                &e,
            ));
        }
        Ok(Replica::new(spec))
    }

    /// As [`Replica::create`], then copies the tables into the node first
    /// (`COPY DATA = true`): the slot is created with an exported snapshot,
    /// the tables are read under it and loaded through the same column
    /// matching, transforms and resolvers as the stream's rows, and the
    /// replica's position on the node is the slot's consistent point, where
    /// its stream begins: nothing is in both, nothing in neither. A failed
    /// copy drops the slot and the publication again.
    pub async fn create_copying(spec: ReplicaSpec) -> Result<(Replica, CopyReport)> {
        let slot = Self::slot_name(&spec.name);
        let client = Self::upstream(&spec).await?;
        Self::create_publication(&client, &spec, &slot).await?;
        let connection = Connection::new(spec.upstream.clone());
        let copied = match evolve_pipeline::upstream::create_slot_exporting(
            &spec.name,
            &connection,
            &slot,
            &slot,
            false,
        )
        .await
        {
            Ok(exported) => {
                let copied = Self::copy(&spec, &connection, &exported).await;
                // Ends the replication session; the slot stays.
                drop(exported);
                copied
            }
            Err(e) => Err(e.into()),
        };
        match copied {
            Ok(report) => Ok((Replica::new(spec), report)),
            Err(e) => {
                let _ = client
                    .batch_execute(&format!(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = {};
                         DROP PUBLICATION IF EXISTS {}",
                        evolve_pg::quote_literal(&slot),
                        quote_ident(&slot)
                    ))
                    .await;
                Err(e)
            }
        }
    }

    async fn upstream(spec: &ReplicaSpec) -> Result<tokio_postgres::Client> {
        evolve_pg::connect(&spec.upstream, "evolve replicate")
            .await
            .map_err(|e| ReplicateError::Node {
                context: format!("connect to the upstream of replica {}", spec.name),
                message: e.to_string(),
            })
    }

    async fn create_publication(
        client: &tokio_postgres::Client,
        spec: &ReplicaSpec,
        slot: &str,
    ) -> Result<()> {
        let tables: Vec<String> = spec
            .tables
            .iter()
            .map(|(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t)))
            .collect();
        client
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE {}",
                quote_ident(slot),
                tables.join(", ")
            ))
            .await
            .map_err(|e| ReplicateError::node(format!("create publication {slot}"), &e))
    }

    /// Copies every table of the replica under `exported`'s snapshot.
    async fn copy(
        spec: &ReplicaSpec,
        connection: &Connection,
        exported: &evolve_pipeline::upstream::ExportedSnapshot,
    ) -> Result<CopyReport> {
        let at = Position::from_lsn(exported.consistent_point);
        let up = evolve_pipeline::upstream::connect(&spec.name, connection).await?;
        up.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            evolve_pg::quote_literal(&exported.snapshot_name)
        ))
        .await
        .map_err(|e| ReplicateError::node("start the snapshot transaction", &e))?;
        let mut node = evolve_pg::connect(&spec.node, "evolve replicate")
            .await
            .map_err(|e| ReplicateError::Node {
                context: format!("connect to the node of replica {}", spec.name),
                message: e.to_string(),
            })?;
        let mut applier = Applier::open(
            &node,
            &spec.name,
            spec.resolvers.clone(),
            spec.transforms.clone(),
        )
        .await?;
        let mut report = CopyReport {
            position: at,
            ..CopyReport::default()
        };
        for (schema, table) in &spec.tables {
            let (oid, table_schema) = crate::node::upstream_table(&up, schema, table).await?;
            let columns: Vec<String> = table_schema
                .columns
                .iter()
                .map(|c| quote_ident(&c.name))
                .collect();
            let copy = format!(
                "COPY (SELECT {} FROM {}.{}) TO STDOUT",
                columns.join(", "),
                quote_ident(schema),
                quote_ident(table)
            );
            let out = up
                .copy_out(copy.as_str())
                .await
                .map_err(|e| ReplicateError::node(format!("COPY {schema}.{table}"), &e))?;
            futures_util::pin_mut!(out);
            let mut reader = evolve_pipeline::upstream::CopyTextReader::default();
            let mut batch: Vec<(u32, RowChange)> = Vec::new();
            while let Some(chunk) = futures_util::StreamExt::next(&mut out).await {
                let chunk = chunk
                    .map_err(|e| ReplicateError::node(format!("COPY {schema}.{table}"), &e))?;
                reader.feed(&chunk, |values| {
                    batch.push((
                        oid,
                        RowChange {
                            table: Arc::clone(&table_schema),
                            kind: ChangeKind::Insert,
                            old: None,
                            new: Some(
                                values
                                    .iter()
                                    .map(|v| match v {
                                        Some(t) => Datum::Text(Bytes::copy_from_slice(t)),
                                        None => Datum::Null,
                                    })
                                    .collect(),
                            ),
                        },
                    ));
                    Ok::<(), ReplicateError>(())
                })?;
                if batch.len() >= COPY_BATCH {
                    report.rows += batch.len() as u64;
                    let applied = applier
                        .load(&mut node, at, std::mem::take(&mut batch))
                        .await?;
                    report.add(&applied);
                }
            }
            report.rows += batch.len() as u64;
            let applied = applier.load(&mut node, at, batch).await?;
            report.add(&applied);
            report.tables += 1;
        }
        up.batch_execute("COMMIT")
            .await
            .map_err(|e| ReplicateError::node("end the snapshot transaction", &e))?;
        applier.set_position(&node, at).await?;
        Ok(report)
    }

    /// A replica created before.
    pub fn new(spec: ReplicaSpec) -> Replica {
        Replica {
            spec,
            status: Arc::new(Mutex::new(ReplicaStatus {
                state: "starting".into(),
                ..ReplicaStatus::default()
            })),
        }
    }

    /// Its status now.
    pub fn status(&self) -> ReplicaStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn set(&self, f: impl FnOnce(&mut ReplicaStatus)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
        }
    }

    /// Applies the stream to the node until `stop`, retrying transient
    /// failures with backoff; a halt ends it with the error (the task does
    /// not crash-loop: it waits to be told what to do).
    pub async fn run(&self, mut stop: watch::Receiver<bool>) -> Result<()> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            match self.run_once(stop.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_permanent() => {
                    tracing::error!(replica = %self.spec.name, error = %e, "replica halted");
                    self.set(|s| {
                        s.state = "halted".into();
                        s.error = Some(e.to_string());
                    });
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(replica = %self.spec.name, error = %e, "replica failed; retrying");
                    self.set(|s| {
                        s.state = "retrying".into();
                        s.error = Some(e.to_string());
                    });
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return Ok(()),
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    async fn run_once(&self, mut stop: watch::Receiver<bool>) -> Result<()> {
        let spec = &self.spec;
        let slot = Self::slot_name(&spec.name);
        let mut node = evolve_pg::connect(&spec.node, "evolve replicate")
            .await
            .map_err(|e| ReplicateError::Node {
                context: format!("connect to the node of replica {}", spec.name),
                message: e.to_string(),
            })?;
        let mut applier = Applier::open(
            &node,
            &spec.name,
            spec.resolvers.clone(),
            spec.transforms.clone(),
        )
        .await?;
        let source = PostgresSource::new(
            SourceInfo {
                name: spec.name.clone(),
                connection: format!("the upstream of replica {}", spec.name),
                publication: slot.clone(),
                publication_created: true,
                slot,
                applied_lsn: applier.position(),
                dropping: false,
                drop_error: None,
            },
            Connection::new(spec.upstream.clone()),
        );
        let mut stream = source.stream(applier.position()).await?;
        // What the node has is durable: the slot may release it.
        stream.confirm(applier.position());
        self.set(|s| {
            s.state = "running".into();
            s.error = None;
            s.position = applier.position();
        });
        let mut current: Option<Transaction> = None;
        // Committed upstream transactions not yet on the node: applied as
        // one node transaction when the stream has nothing more ready, or
        // at the group's limits.
        let mut group: Vec<Transaction> = Vec::new();
        let mut group_rows = 0usize;
        let mut group_began = tokio::time::Instant::now();
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => {
                    self.flush(&mut applier, &mut node, &mut stream, &mut group).await?;
                    stream.close().await;
                    return Ok(());
                }
                event = stream.next() => match event? {
                    SourceEvent::Begin { commit_time_micros, .. } => {
                        current = Some(Transaction {
                            end: Position::ZERO,
                            commit_time_micros,
                            rows: Vec::new(),
                        });
                    }
                    SourceEvent::Row { table, change } => {
                        if let Some(t) = current.as_mut() {
                            t.rows.push((table, change));
                        }
                    }
                    SourceEvent::Commit { end } => {
                        if let Some(mut t) = current.take() {
                            t.end = end;
                            if group.is_empty() {
                                group_began = tokio::time::Instant::now();
                            }
                            group_rows += t.rows.len();
                            group.push(t);
                            if group.len() >= GROUP_TRANSACTIONS
                                || group_rows >= GROUP_ROWS
                                || group_began.elapsed() >= GROUP_AGE
                            {
                                self.flush(&mut applier, &mut node, &mut stream, &mut group).await?;
                                group_rows = 0;
                            }
                        }
                    }
                    SourceEvent::Idle { upto } => {
                        if current.is_none() && group.is_empty() {
                            stream.confirm(upto);
                        }
                    }
                    // A rollout migrated a node: what it has now is read
                    // before the next row.
                    SourceEvent::Marker { prefix, content }
                        if prefix == "evolve" && content.starts_with(b"rollout ") =>
                    {
                        applier.refresh_matches();
                    }
                    SourceEvent::Schema { .. } | SourceEvent::Marker { .. } => {}
                },
                _ = std::future::ready(()), if !group.is_empty() => {
                    self.flush(&mut applier, &mut node, &mut stream, &mut group).await?;
                    group_rows = 0;
                }
            }
        }
    }

    /// Applies the group to the node and confirms it upstream.
    async fn flush<S: ChangeStream>(
        &self,
        applier: &mut Applier,
        node: &mut tokio_postgres::Client,
        stream: &mut S,
        group: &mut Vec<Transaction>,
    ) -> Result<()> {
        let Some(last) = group.last().map(|t| t.end) else {
            return Ok(());
        };
        let applied = applier.apply_group(node, group).await?;
        group.clear();
        stream.confirm(last);
        self.set(|s| {
            s.position = last;
            for (k, n) in &applied.conflicts {
                *s.conflicts.entry(*k).or_default() += n;
            }
        });
        Ok(())
    }

    /// Skips the upstream transaction that finished at `lsn` on the node
    /// (as `ALTER SUBSCRIPTION ... SKIP` does): the next run moves the
    /// replica's position past it without applying it.
    pub async fn skip(node: &str, name: &str, lsn: Position) -> Result<()> {
        let client = evolve_pg::connect(node, "evolve replicate")
            .await
            .map_err(|e| ReplicateError::Node {
                context: format!("connect to the node of replica {name}"),
                message: e.to_string(),
            })?;
        client
            .batch_execute(crate::apply::NODE_SETUP)
            .await
            .map_err(|e| ReplicateError::node("create evolve's tables on the node", &e))?;
        client
            .execute(
                "INSERT INTO evolve_replica_progress (replica, lsn, skip_lsn)
                 VALUES ($1, '0/0', $2::text::pg_lsn)
                 ON CONFLICT (replica) DO UPDATE SET skip_lsn = EXCLUDED.skip_lsn",
                &[&name, &lsn.to_string()],
            )
            .await
            .map_err(|e| ReplicateError::node("record the transaction to skip", &e))?;
        Ok(())
    }
}
