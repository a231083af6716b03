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

use crate::apply::{Applier, Part, StreamedAs, Transaction};
use crate::error::{ReplicateError, Result};

/// What a replica is.
#[derive(Clone, Debug)]
pub struct ReplicaSpec {
    /// Its name (slot and publication are `evolve_replica_<name>`).
    pub name: String,
    /// The upstream's connection url.
    pub upstream: String,
    /// The upstream connection's name in `evolve.toml`, for messages.
    pub upstream_connection: String,
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
    /// Parts of large upstream transactions applied in node transactions
    /// that committed, since the task started ([`Replica::part_rows`]).
    pub parts: u64,
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
    /// Copy the tables into the node before streaming, unless the node
    /// has the replica's position already (`COPY DATA = true`).
    copy_first: bool,
    /// Wakes a halted replica waiting to try again ([`Replica::retry_now`]).
    wake: tokio::sync::Notify,
    /// An upstream transaction still open that has gathered this many
    /// rows goes to the node in parts ([`PART_ROWS`]).
    part_rows: usize,
}

/// At most this many upstream transactions share one node transaction.
const GROUP_TRANSACTIONS: usize = 1_000;
/// A group is applied once it holds this many row changes ...
const GROUP_ROWS: usize = 20_000;
/// ... or once it has been open this long.
const GROUP_AGE: Duration = Duration::from_millis(50);

/// An upstream transaction that has gathered this many rows before its
/// COMMIT is applied in parts of this many rows as they arrive, all in one
/// node transaction committed at its COMMIT, rather than held whole: the
/// read loop fills one part while at most two more are handed over and not
/// yet applied (three when the COMMIT hands over the last), so an `UPDATE`
/// of 50 million rows needs the memory of a few parts. It is
/// `GROUP_ROWS`, the most rows a group of small transactions hands the
/// apply loop at once, so a part costs what a full group costs, and a
/// transaction of up to that many rows goes in a group, set by set, as
/// before; a part that large keeps the round trips and the savepoints (one
/// per part, a subtransaction on the node) of a large transaction few.
pub const PART_ROWS: usize = GROUP_ROWS;

/// What the read loop hands the apply loop, in stream order.
enum Work {
    Group(Vec<Transaction>),
    /// A part of a large transaction: the first opens its node
    /// transaction, the last (with its end) commits it, and nothing else
    /// comes between them but [`Work::Refresh`].
    Part(Part),
    /// Read the node's catalog again before the next row.
    Refresh,
}

/// The first wait after a transient failure; it doubles up to 10 s.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The first wait before a halted replica tries its transaction again
/// ([`Replica::run_retrying`]); it doubles up to [`HALT_RETRY_MAX`].
const FIRST_HALT_RETRY: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a halted replica: a cause fixed
/// on the node (a column added, a row removed) is seen within it, and
/// within `evolve rollout`'s default catch-up time.
pub const HALT_RETRY_MAX: Duration = Duration::from_secs(30);

/// Where a replica's node url comes from, for connection errors.
const NODE_GIVEN: &str = "the replica's node connection in the pipeline's config";

/// Where a replica's upstream url comes from, for connection errors.
const UPSTREAM_GIVEN: &str = "the upstream connection in the pipeline's config";

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

    /// Makes the publication of a replica created by an earlier release
    /// publish partitioned tables under their own names
    /// (`publish_via_partition_root`, as [`Replica::create`] makes it now),
    /// so that from here on their changes reach the node's table of that
    /// name rather than halting on partitions it does not have. A failure
    /// (the role no longer owns the publication) is logged, not fatal: the
    /// replica runs as before.
    async fn publish_via_root(spec: &ReplicaSpec, slot: &str) {
        let upgrade = async {
            let client = Self::upstream(spec).await?;
            let via_root: Option<bool> = client
                .query_opt(
                    "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
                    &[&slot],
                )
                .await
                .map_err(|e| ReplicateError::node("read the replica's publication", &e))?
                .map(|r| r.get(0));
            if via_root == Some(false) {
                client
                    .batch_execute(&format!(
                        "ALTER PUBLICATION {} SET (publish_via_partition_root = true)",
                        quote_ident(slot)
                    ))
                    .await
                    .map_err(|e| ReplicateError::node("alter the replica's publication", &e))?;
                tracing::info!(replica = %spec.name, publication = slot, "the replica's publication now publishes partitioned tables under their own names");
            }
            Ok::<(), ReplicateError>(())
        };
        if let Err(e) = upgrade.await {
            tracing::warn!(replica = %spec.name, error = %e, "the replica's publication could not be set to publish partitioned tables under their own names; a partitioned table's changes keep coming under its partitions' names");
        }
    }

    /// Creates the replica's publication upstream only: a replica with
    /// `COPY DATA = true` makes its slot when its task first starts
    /// ([`Replica::copying`]), with the snapshot its copy reads.
    pub async fn publish(spec: &ReplicaSpec) -> Result<()> {
        let slot = Self::slot_name(&spec.name);
        let client = Self::upstream(spec).await?;
        Self::create_publication(&client, spec, &slot).await
    }

    /// As [`Replica::create`], then copies the tables into the node first
    /// ([`Replica::copy_now`]). A failed copy drops the slot and the
    /// publication again.
    pub async fn create_copying(spec: ReplicaSpec) -> Result<(Replica, CopyReport)> {
        let slot = Self::slot_name(&spec.name);
        let client = Self::upstream(&spec).await?;
        Self::create_publication(&client, &spec, &slot).await?;
        match Self::copy_now(&spec).await {
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

    /// Copies the replica's tables into the node, consistent with its
    /// stream: the slot is made now (a slot left by a copy that did not
    /// finish is dropped first) with an exported snapshot, the tables are
    /// read under it and loaded through the same column matching,
    /// transforms and resolvers as the stream's rows, all in one node
    /// transaction that also records the slot's consistent point as the
    /// replica's position, where its stream begins: nothing is in both,
    /// nothing in neither, and a copy cut short leaves nothing on the node.
    pub async fn copy_now(spec: &ReplicaSpec) -> Result<CopyReport> {
        let slot = Self::slot_name(&spec.name);
        let client = Self::upstream(spec).await?;
        evolve_pipeline::upstream::drop_slot_released(&client, &slot).await?;
        let connection = Connection::new(spec.upstream.clone());
        let exported = evolve_pipeline::upstream::create_slot_exporting(
            &spec.name,
            &connection,
            &slot,
            &slot,
            false,
        )
        .await?;
        let copied = Self::copy(spec, &connection, &exported).await;
        // Ends the replication session; the slot stays.
        drop(exported);
        copied
    }

    async fn upstream(spec: &ReplicaSpec) -> Result<tokio_postgres::Client> {
        evolve_pg::connect(&spec.upstream, "evolve replicate")
            .await
            .map_err(|e| ReplicateError::Node {
                context: format!(
                    "connect to the upstream of replica {} (connection {})",
                    spec.name, spec.upstream_connection
                ),
                message: e.given_by(UPSTREAM_GIVEN).to_string(),
            })
    }

    /// A session on replica `name`'s node at `url`.
    async fn node(url: &str, name: &str) -> Result<tokio_postgres::Client> {
        evolve_pg::connect(url, "evolve replicate")
            .await
            .map_err(|e| ReplicateError::Node {
                context: format!("connect to the node of replica {name}"),
                message: e.given_by(NODE_GIVEN).to_string(),
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
                // A partitioned table's changes under its own name, as
                // the copy reads it (through the parent), not under the
                // partition that holds each row, which the node need not
                // have.
                "CREATE PUBLICATION {} FOR TABLE {} WITH (publish_via_partition_root = true)",
                quote_ident(slot),
                tables.join(", ")
            ))
            .await
            .map_err(|e| {
                let denied = e
                    .as_db_error()
                    .is_some_and(|db| db.code().code() == "42501");
                let why = if denied {
                    // The source's own publication may have been made by
                    // the tables' owner; a replica's is made by evolve.
                    " (a replica publishes its tables itself: the role of the source's connection needs CREATE on the database and must own the tables, e.g. GRANT <the tables' owner> TO <that role>)"
                } else {
                    ""
                };
                ReplicateError::node(format!("create publication {slot}{why}"), &e)
            })
    }

    /// Copies every table of the replica under `exported`'s snapshot.
    async fn copy(
        spec: &ReplicaSpec,
        connection: &Connection,
        exported: &evolve_pipeline::upstream::ExportedSnapshot,
    ) -> Result<CopyReport> {
        let at = Position::from_lsn(exported.consistent_point);
        let up = evolve_pipeline::upstream::connect(&spec.upstream_connection, connection).await?;
        up.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            evolve_pg::quote_literal(&exported.snapshot_name)
        ))
        .await
        .map_err(|e| ReplicateError::node("start the snapshot transaction", &e))?;
        let mut node = Self::node(&spec.node, &spec.name).await?;
        let mut applier = Applier::open(
            &node,
            &spec.name,
            spec.resolvers.clone(),
            spec.transforms.clone(),
        )
        .await?;
        let loaded = Self::load(spec, &up, &mut node, &mut applier, at).await;
        if let Err(e) = &loaded {
            // The copy's node transaction is rolled back: a conflict that
            // halted it is logged now.
            applier.record_load_halt(&mut node, e).await;
        }
        let report = loaded?;
        up.batch_execute("COMMIT")
            .await
            .map_err(|e| ReplicateError::node("end the snapshot transaction", &e))?;
        Ok(report)
    }

    /// Loads every table of the replica, read in `up`'s snapshot, into
    /// the node in one node transaction that records `at` as the
    /// replica's position.
    async fn load(
        spec: &ReplicaSpec,
        up: &tokio_postgres::Client,
        node: &mut tokio_postgres::Client,
        applier: &mut Applier,
        at: Position,
    ) -> Result<CopyReport> {
        let mut tx = node
            .transaction()
            .await
            .map_err(|e| ReplicateError::node("begin the copy's node transaction", &e))?;
        let mut report = CopyReport {
            position: at,
            ..CopyReport::default()
        };
        for (schema, table) in &spec.tables {
            let (oid, table_schema) = crate::node::upstream_table(up, schema, table).await?;
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
                        .load(&mut tx, at, std::mem::take(&mut batch))
                        .await?;
                    report.add(&applied);
                }
            }
            report.rows += batch.len() as u64;
            let applied = applier.load(&mut tx, at, batch).await?;
            report.add(&applied);
            report.tables += 1;
        }
        applier.set_position(&tx, at).await?;
        tx.commit()
            .await
            .map_err(|e| ReplicateError::node("commit the copy's node transaction", &e))?;
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
            copy_first: false,
            wake: tokio::sync::Notify::new(),
            part_rows: PART_ROWS,
        }
    }

    /// The replica, applying an upstream transaction in parts once it
    /// has gathered `rows` rows ([`PART_ROWS`] unless set; at least 1).
    pub fn part_rows(mut self, rows: usize) -> Replica {
        self.part_rows = rows.max(1);
        self
    }

    /// The replica, copying its tables into the node when its task
    /// starts (`copy` true) unless the node has its position already.
    pub fn copying(mut self, copy: bool) -> Replica {
        self.copy_first = copy;
        self
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

    /// As [`Replica::run`], but a halt does not end it: the replica stays
    /// `halted` (with the error) and tries the halted transaction again
    /// after a wait that doubles from 1 s up to [`HALT_RETRY_MAX`], or at
    /// once when [`Replica::retry_now`] is called, each try reading the
    /// node's catalog and the transaction to skip afresh; so a cause fixed
    /// on the node (a column added, a default set, a row removed) or a
    /// skip recorded with `evolve replicate skip` lets it go on by itself.
    /// Each try that meets the same halt again logs nothing new
    /// ([`Applier`] records a halt once). Ends when `stop` says so, or
    /// with an error retrying cannot help that is not a halt (the
    /// replica's slot or publication gone).
    pub async fn run_retrying(&self, mut stop: watch::Receiver<bool>) -> Result<()> {
        let mut wait = FIRST_HALT_RETRY;
        loop {
            let position = self.status().position;
            match self.run(stop.clone()).await {
                Err(ReplicateError::Halted { .. }) => {
                    // A try that got further starts the waits over.
                    if self.status().position != position {
                        wait = FIRST_HALT_RETRY;
                    }
                }
                other => return other,
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
                _ = stop.changed() => return Ok(()),
            }
            wait = (wait * 2).min(HALT_RETRY_MAX);
        }
    }

    /// A halted replica under [`Replica::run_retrying`] tries again now
    /// (a skip was recorded, or the catalog changed).
    pub fn retry_now(&self) {
        self.wake.notify_one();
    }

    /// Applies the stream to the node until `stop`, retrying transient
    /// failures with backoff; a halt ends it with the error (the task does
    /// not crash-loop: it waits to be told what to do, or
    /// [`Replica::run_retrying`] tries again with backoff).
    pub async fn run(&self, mut stop: watch::Receiver<bool>) -> Result<()> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            match self.run_once(stop.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_permanent() => {
                    let again = self.status().error.as_deref() == Some(&e.to_string());
                    if again {
                        tracing::debug!(replica = %self.spec.name, error = %e, "replica halted again");
                    } else {
                        tracing::error!(replica = %self.spec.name, error = %e, "replica halted");
                    }
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

    async fn run_once(&self, stop: watch::Receiver<bool>) -> Result<()> {
        let spec = &self.spec;
        let slot = Self::slot_name(&spec.name);
        let mut node = Self::node(&spec.node, &spec.name).await?;
        let mut applier = Applier::open(
            &node,
            &spec.name,
            spec.resolvers.clone(),
            spec.transforms.clone(),
        )
        .await?;
        if self.copy_first && applier.position() == Position::ZERO {
            self.set(|s| s.state = "copying".into());
            let report = Self::copy_now(spec).await?;
            tracing::info!(replica = %spec.name, tables = report.tables, rows = report.rows, "replica copied its tables into the node");
            self.set(|s| {
                for (k, n) in &report.conflicts {
                    *s.conflicts.entry(*k).or_default() += n;
                }
            });
            applier = Applier::open(
                &node,
                &spec.name,
                spec.resolvers.clone(),
                spec.transforms.clone(),
            )
            .await?;
        }
        Self::publish_via_root(spec, &slot).await;
        let source = PostgresSource::new(
            SourceInfo {
                name: spec.name.clone(),
                connection: spec.upstream_connection.clone(),
                publication: slot.clone(),
                publication_created: true,
                slot,
                applied_lsn: applier.position(),
                dropping: false,
                drop_error: None,
                kind: evolve_pipeline::store::SourceKind::Postgres,
            },
            Connection::new(spec.upstream.clone()),
        );
        let mut stream = source
            .stream(applier.position())
            .await
            .map_err(|e| ReplicateError::stream(&spec.name, e))?;
        // What the node has is durable: the slot may release it.
        stream.confirm(applier.position());
        // A halted replica trying again stays `halted` until it has applied
        // something past its halt.
        self.set(|s| {
            if s.state != "halted" {
                s.state = "running".into();
                s.error = None;
            }
            s.position = applier.position();
        });
        // The stream is read while the node applies the group before:
        // groups go to the apply loop in order, and what it applied comes
        // back to be confirmed upstream.
        let (work_tx, mut work_rx) = tokio::sync::mpsc::unbounded_channel::<Work>();
        // What the apply loop did with each piece of work: the position to
        // confirm upstream, none for a part of a transaction not committed.
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel::<Option<Position>>();
        let apply = async move {
            while let Some(work) = work_rx.recv().await {
                match work {
                    Work::Group(group) => {
                        let Some(last) = group.last().map(|t| t.end) else {
                            continue;
                        };
                        let applied = match applier.apply_group(&mut node, &group).await {
                            Ok(applied) => applied,
                            Err(e) => {
                                if let Some(halt) = applier.take_halt() {
                                    self.set(|s| *s.conflicts.entry(halt).or_default() += 1);
                                }
                                return Err(e);
                            }
                        };
                        self.set(|s| {
                            if s.state == "halted" {
                                s.state = "running".into();
                                s.error = None;
                            }
                            s.position = last;
                            for (k, n) in &applied.conflicts {
                                *s.conflicts.entry(*k).or_default() += n;
                            }
                        });
                        if done_tx.send(Some(last)).is_err() {
                            break;
                        }
                    }
                    Work::Part(first) => {
                        let streamed = self
                            .apply_streamed(&mut applier, &mut node, first, &mut work_rx, &done_tx)
                            .await;
                        match streamed {
                            Ok(Some(end)) => {
                                if done_tx.send(Some(end)).is_err() {
                                    break;
                                }
                            }
                            // Stopped before its COMMIT: rolled back.
                            Ok(None) => break,
                            Err(e) => {
                                if let Some(halt) = applier.take_halt() {
                                    self.set(|s| *s.conflicts.entry(halt).or_default() += 1);
                                }
                                return Err(e);
                            }
                        }
                    }
                    // A rollout migrated a node: what it has now is read
                    // before the next row.
                    Work::Refresh => applier.refresh_matches(),
                }
            }
            Ok::<(), ReplicateError>(())
        };
        let read = self.read(&mut stream, stop, work_tx, done_rx);
        let (applied, read) = tokio::join!(apply, read);
        stream.close().await;
        // The apply loop's error is the cause when both failed (the read
        // loop stops when the apply loop is gone).
        applied?;
        read
    }

    /// Applies a large upstream transaction from its `first` part to its
    /// COMMIT, its parts taken from `work` as the read loop hands them over
    /// (each one reported on `done`, with nothing to confirm), in one node
    /// transaction opened here: each part row by row
    /// ([`Applier::apply_part`]), and at the COMMIT the replica's position
    /// written in that transaction and committed
    /// ([`Applier::commit_streamed`]). Whether the node has it already,
    /// or it is the one to skip, is decided at the first part
    /// ([`Applier::begin_streamed`]). A halt rolls the node transaction
    /// back at once; the parts left are passed over until the COMMIT gives
    /// the transaction's end, the LSN the halt is recorded at
    /// ([`Applier::streamed_halt`]). Its end once committed; `None` when
    /// the read loop ended before the COMMIT (a stop, a failure of the
    /// stream): the node transaction is rolled back and nothing of it is
    /// confirmed upstream.
    async fn apply_streamed(
        &self,
        applier: &mut Applier,
        node: &mut tokio_postgres::Client,
        first: Part,
        work: &mut tokio::sync::mpsc::UnboundedReceiver<Work>,
        done: &tokio::sync::mpsc::UnboundedSender<Option<Position>>,
    ) -> Result<Option<Position>> {
        let mut s = applier.begin_streamed(&first);
        let mut tx = match s.how {
            StreamedAs::Applied => None,
            StreamedAs::Apply | StreamedAs::Skip(_) => Some(
                node.transaction()
                    .await
                    .map_err(|e| ReplicateError::node("begin a node transaction", &e))?,
            ),
        };
        let mut halted: Option<ReplicateError> = None;
        let mut part = first;
        let end = loop {
            if s.how == StreamedAs::Apply
                && halted.is_none()
                && !part.rows.is_empty()
                && let Some(open) = tx.as_mut()
                && let Err(e) = applier
                    .apply_part(open, &mut s, std::mem::take(&mut part.rows))
                    .await
            {
                if !matches!(e, ReplicateError::Halted { .. }) {
                    return Err(e);
                }
                // Rolled back now; the halt's LSN is the COMMIT's.
                tx = None;
                halted = Some(e);
            }
            if let Some(end) = part.end {
                break end;
            }
            if done.send(None).is_err() {
                return Ok(None);
            }
            part = loop {
                match work.recv().await {
                    Some(Work::Part(next)) => break next,
                    Some(Work::Refresh) => applier.refresh_matches(),
                    Some(Work::Group(_)) => {
                        return Err(ReplicateError::Node {
                            context: format!("apply to the node of replica {}", self.spec.name),
                            message: "a group of transactions came inside a transaction still open"
                                .into(),
                        });
                    }
                    None => return Ok(None),
                }
            };
        };
        if let Some(e) = halted {
            drop(tx);
            return Err(applier.streamed_halt(node, s, e, end).await);
        }
        let parts = s.parts;
        let applied = applier.commit_streamed(tx, s, end).await?;
        self.set(|st| {
            if st.state == "halted" {
                st.state = "running".into();
                st.error = None;
            }
            st.position = applier.position();
            st.parts += parts;
            for (k, n) in &applied.conflicts {
                *st.conflicts.entry(*k).or_default() += n;
            }
        });
        Ok(Some(end))
    }

    /// Reads the stream into groups of committed transactions and hands
    /// them to the apply loop: at once while it is idle, and while it
    /// applies one group, the next is gathered up to its limits (then the
    /// stream waits). A transaction that gathers [`Replica::part_rows`]
    /// rows before its COMMIT is handed over in parts as they fill (after
    /// the group before it), at most two in flight, so that memory holds a
    /// few parts however large the transaction. Confirms upstream what the
    /// apply loop reports: a transaction's end once the node committed it.
    async fn read<S: ChangeStream>(
        &self,
        stream: &mut S,
        mut stop: watch::Receiver<bool>,
        work: tokio::sync::mpsc::UnboundedSender<Work>,
        mut done: tokio::sync::mpsc::UnboundedReceiver<Option<Position>>,
    ) -> Result<()> {
        // The transaction being read: its rows not handed over yet, and
        // whether parts of it were.
        let mut current: Option<(Part, bool)> = None;
        let mut group: Vec<Transaction> = Vec::new();
        let mut group_rows = 0usize;
        let mut group_began = tokio::time::Instant::now();
        let mut in_flight = 0usize;
        let gone = || ReplicateError::Node {
            context: format!("apply to the node of replica {}", self.spec.name),
            message: "the apply loop ended".into(),
        };
        loop {
            let full = group.len() >= GROUP_TRANSACTIONS
                || group_rows >= GROUP_ROWS
                || (!group.is_empty() && group_began.elapsed() >= GROUP_AGE);
            // The transaction being read has a part to hand over: the
            // stream waits until it is.
            let part_full = current
                .as_ref()
                .is_some_and(|(t, _)| t.rows.len() >= self.part_rows);
            if part_full && in_flight < 2 {
                if !group.is_empty() {
                    // The transactions before it go first.
                    work.send(Work::Group(std::mem::take(&mut group)))
                        .map_err(|_| gone())?;
                    group_rows = 0;
                } else if let Some((t, parted)) = current.as_mut() {
                    let part = Part {
                        commit: t.commit,
                        commit_time_micros: t.commit_time_micros,
                        rows: std::mem::take(&mut t.rows),
                        end: None,
                    };
                    work.send(Work::Part(part)).map_err(|_| gone())?;
                    *parted = true;
                }
                in_flight += 1;
                continue;
            }
            let hand_off = !group.is_empty() && (in_flight == 0 || (full && in_flight < 2));
            if hand_off {
                work.send(Work::Group(std::mem::take(&mut group)))
                    .map_err(|_| gone())?;
                group_rows = 0;
                in_flight += 1;
                continue;
            }
            tokio::select! {
                biased;
                _ = stop.changed() => {
                    // A transaction handed over in part is left to be
                    // rolled back when this loop ends (the apply loop
                    // reads no more work): only what the node committed
                    // is confirmed.
                    if !group.is_empty() {
                        work.send(Work::Group(std::mem::take(&mut group))).map_err(|_| gone())?;
                        in_flight += 1;
                    }
                    while in_flight > 0 {
                        if let Some(end) = done.recv().await.ok_or_else(gone)? {
                            stream.confirm(end);
                        }
                        in_flight -= 1;
                    }
                    return Ok(());
                }
                end = done.recv() => {
                    if let Some(end) = end.ok_or_else(gone)? {
                        stream.confirm(end);
                    }
                    in_flight -= 1;
                }
                event = stream.next(), if !full && !part_full => match event.map_err(|e| ReplicateError::stream(&self.spec.name, e))? {
                    SourceEvent::Begin { commit, commit_time_micros } => {
                        current = Some((
                            Part {
                                commit,
                                commit_time_micros,
                                rows: Vec::new(),
                                end: None,
                            },
                            false,
                        ));
                    }
                    SourceEvent::Row { table, change } => {
                        if let Some((t, _)) = current.as_mut() {
                            t.rows.push((table, change));
                        }
                    }
                    SourceEvent::Commit { end } => match current.take() {
                        // Its last part commits it.
                        Some((mut t, true)) => {
                            t.end = Some(end);
                            work.send(Work::Part(t)).map_err(|_| gone())?;
                            in_flight += 1;
                        }
                        Some((t, false)) => {
                            if group.is_empty() {
                                group_began = tokio::time::Instant::now();
                            }
                            group_rows += t.rows.len();
                            group.push(Transaction {
                                end,
                                commit_time_micros: t.commit_time_micros,
                                rows: t.rows,
                            });
                        }
                        None => {}
                    },
                    SourceEvent::Idle { upto } => {
                        if current.is_none() && group.is_empty() && in_flight == 0 {
                            stream.confirm(upto);
                        }
                    }
                    SourceEvent::Marker { prefix, content }
                        if prefix == "evolve" && content.starts_with(b"rollout ") =>
                    {
                        if !group.is_empty() {
                            work.send(Work::Group(std::mem::take(&mut group))).map_err(|_| gone())?;
                            group_rows = 0;
                            in_flight += 1;
                        }
                        work.send(Work::Refresh).map_err(|_| gone())?;
                    }
                    // A PostgreSQL stream never has undecodable records.
                    SourceEvent::Schema { .. }
                    | SourceEvent::Marker { .. }
                    | SourceEvent::Undecodable { .. } => {}
                },
                _ = tokio::time::sleep_until(group_began + GROUP_AGE), if !group.is_empty() && !full => {}
            }
        }
    }

    /// Skips the upstream transaction that finished at `lsn` on the node
    /// (as `ALTER SUBSCRIPTION ... SKIP` does): the next try moves the
    /// replica's position past it without applying it. As PostgreSQL's,
    /// it refuses a position the replica has already applied; and since a
    /// skip is the way past a halt, it refuses any LSN but the one of the
    /// transaction the replica is halted at, as the node records it
    /// ([`Applier`] records each halt there): an LSN ahead, armed on a
    /// replica that is not halted, would throw away whichever transaction
    /// later happens to end there.
    pub async fn skip(node: &str, name: &str, lsn: Position) -> Result<()> {
        let client = Self::node(node, name).await?;
        crate::apply::setup_node(&client).await?;
        let refuse = |message: String| ReplicateError::Node {
            context: format!("replica {name} skip"),
            message,
        };
        if let Some((applied, _)) = crate::apply::stored_position(&client, name).await?
            && lsn <= applied
        {
            return Err(refuse(format!(
                "the replica has applied the upstream up to {applied}, so the transaction finished at {lsn} is behind it; give the LSN its halt names (SHOW REPLICAS), which is later"
            )));
        }
        match crate::apply::recorded_halt(&client, name).await? {
            None => {
                return Err(refuse(
                    "the replica is not halted (its node records no halt), so there is no transaction to skip; a skip is for the transaction a halt names (SHOW REPLICAS shows it)"
                        .to_string(),
                ));
            }
            Some((halted, _)) if halted != lsn => {
                return Err(refuse(format!(
                    "the replica is halted at the upstream transaction finished at {halted}, not at {lsn}; to skip it: evolve replicate skip {name} --lsn {halted}"
                )));
            }
            Some(_) => {}
        }
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
