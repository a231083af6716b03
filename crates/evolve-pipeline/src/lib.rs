//! Change data capture from PostgreSQL into a stable JSON interface.
//!
//! # Objects
//!
//! - A **source** ([`Pipeline::create_source`]) is an upstream database
//!   reached through a named connection of `evolve.toml` ([`Config`]), with
//!   a publication (created if missing) and one logical replication slot
//!   (`evolve_<name>`, pgoutput, created with the source).
//! - A **table** ([`Pipeline::create_table`]) is a versioned ingestion of
//!   one upstream table: its columns (name, attnum, type OID, typmod, JSON
//!   kind, key flag) are pinned when it is created, with optional EXCLUDE
//!   COLUMNS and TEXT COLUMNS; the upstream table is added to the
//!   publication. A table needs a key: its primary key, or its replica
//!   identity index; tables with neither (or with REPLICA IDENTITY NOTHING)
//!   are refused, since logical replication could not send their updates
//!   and deletes (adding them to a publication would make those fail).
//! - An **interface** ([`Pipeline::create_interface`], the "materialized
//!   view") is the stable output over a table: one document per upstream
//!   row, exactly `coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}')`
//!   ([`evolve_core::document`]), keyed by the key columns' document.
//!   Interfaces name their table, so a later replacement can swap it.
//! - A **sink** ([`Pipeline::create_sink`]) writes an interface into a
//!   PostgreSQL table `(key jsonb PRIMARY KEY, data jsonb NOT NULL)`.
//!
//! # What is stored where
//!
//! Everything of the pipeline's own lives in `state_dir/pipeline.db`
//! (SQLite, WAL, `synchronous=FULL`; see [`store`]): the catalog, each
//! table's current documents (key bytes → document bytes), each source's
//! applied position, and each interface's change feed (per upstream
//! transaction, one record of its changes in order: key, old and new
//! document) until every sink of the interface has committed it.
//! Each sink's own position lives in its database, in
//! `evolve_sink_progress(sink, lsn)` beside the target table. Upstream,
//! the slot's confirmed position is what the server keeps WAL for.
//!
//! # Positions
//!
//! Transactions are ordered by [`Position`], opaque past the source: for
//! a PostgreSQL source, the end LSN of the transaction's commit record,
//! shown in LSN notation. Three positions move, always in this order:
//!
//! 1. *applied* (SQLite): consecutive upstream transactions' document
//!    changes, their feed entries and the applied position of the last of
//!    them are one SQLite transaction (group commit), in commit order; an
//!    upstream transaction is never split across two. Transactions at or
//!    below the applied position are skipped when the stream replays them
//!    after a restart.
//! 2. *sink* (the sink's database): the feed entries of consecutive upstream
//!    transactions become one sink transaction, each upstream
//!    transaction's changes in turn, that also upserts the sink's row of
//!    `evolve_sink_progress` with the last one's position; entries at or
//!    below it are skipped on restart (the `Sink` contract of `sink/mod.rs`). Nothing else
//!    is written: a key whose document did not change has no feed entry.
//! 3. *confirmed* (the slot): the minimum of the applied position and every
//!    sink's position (a sink that has nothing pending counts as caught up);
//!    when all are caught up and no transaction is open, the keepalive's WAL
//!    position, so an idle pipeline does not hold WAL. After a crash or a
//!    restart the stream starts after the applied position (the server
//!    keeps everything after the confirmed one, which is never later, and
//!    skips the transactions in between without sending them), and the
//!    skips above make any replay lose and duplicate nothing.
//!
//! # The seam between snapshot and stream
//!
//! A table is snapshotted by a task of its own (`hydrate`), beside the
//! stream, which goes on for the source's other tables. The task creates a
//! **temporary** logical slot with an exported snapshot
//! (`CREATE_REPLICATION_SLOT ... TEMPORARY LOGICAL pgoutput (SNAPSHOT
//! 'export')`), copies the table in text format in a `REPEATABLE READ`
//! transaction under that snapshot (`SET TRANSACTION SNAPSHOT`), stores the
//! documents in batches, and marks the table `copied` with the slot's
//! consistent point `C` (a crash before that restarts the copy from
//! scratch). Meanwhile the source's stream keeps the table's changes as
//! *pending* records (`pending`: the typed row changes, with the
//! table's schema), written with each upstream transaction's commit. Once the copy is in, the source's task applies the
//! pending changes of the transactions whose commit LSN is at or after `C`
//! and marks the table running, in one store transaction (PostgreSQL's
//! table synchronization uses the same rule). The snapshot holds exactly
//! the transactions committed before `C`; no transaction is in both, none
//! in neither: the seam is exact.
//!
//! We chose one temporary slot per table, also for a source's first table,
//! so that there is one code path, the source's slot exists before any
//! table (and from then on keeps the WAL every table needs), and a table
//! added later works exactly like the first. The table is added to the
//! publication before the temporary slot is created; the slot's consistent
//! point comes after every transaction that was running then, so every
//! transaction committed at or after `C` began after the table was
//! published and is decoded with it. Copies outlive the restarts that
//! catalog changes cause.
//!
//! # Replacements and drift
//!
//! A replacement ([`Pipeline::create_replacement`]) is the same interface
//! over a new version of its table; once that table is hydrated,
//! [`Pipeline::apply_replacement`] swaps it in at one upstream position: a
//! transactional logical decoding message written upstream, met by the
//! stream in commit order, at whose commit the interface switches tables
//! and one feed entry is written per key whose document differs
//! (`swap`). Those keys are known by then: the two tables are compared
//! once when both are hydrated, and from then on every transaction that
//! writes either table records, in the same store transaction, whether
//! each key it wrote now differs, so the swap reads only the differing
//! keys. [`drift`] compares each table's pinned columns with the
//! upstream catalog (added, dropped, dropped-and-re-added, retyped
//! columns; renamed or dropped tables); [`absorb`] runs the whole flow for
//! interfaces with `ABSORB = 'auto'`. A replacement does not inherit its
//! target's settings: the interface keeps its own (its name, its ABSORB
//! option, its sinks and subscribers) and only the table under it changes.

//! # Applying the stream
//!
//! Each transaction collects an overlay of the keys it touches (`apply`):
//! inserts, updates (a changed key deletes the old key's document),
//! deletes (with REPLICA IDENTITY DEFAULT the old key tuple, with FULL the
//! old row: the key is always read from the pinned key columns, since under
//! FULL every column is flagged as key) and TRUNCATE (every document of the
//! table is deleted). An unchanged TOASTed value (`u`) keeps the member the
//! current document has for that column. At commit only keys whose
//! document differs from before the transaction are written and fed.
//! The table's schema as the source sends it (for PostgreSQL, its Relation
//! message) is matched to the pinned columns by name; a pinned column that
//! is gone or has another type stalls that table (the others go on), which
//! a replacement will resolve.
//!
//! # Sources
//!
//! The engine reads upstreams only through the [`source::Source`] trait,
//! whose documentation is the contract every source keeps (transactions
//! whole and in commit order, positions, the snapshot seam, schemas, row
//! images, confirmation, failures); [`source::postgres`] implements it for
//! PostgreSQL, the only place that speaks pgoutput and LSNs, and
//! [`source::mysql`] for MySQL and MariaDB from the row-based binlog (its
//! positions count GTIDs, the same on every server of a replication
//! topology, with binlog file numbers and offsets for MySQL servers
//! without GTIDs; its values are mapped onto PostgreSQL types). The
//! catalog's `sources.kind` picks one.
//!
//! # Sessions
//!
//! Every upstream session, ordinary or replication, runs with
//! `DateStyle=ISO`, `TimeZone=UTC`, `extra_float_digits=1`,
//! `IntervalStyle=postgres` and `bytea_output=hex`
//! ([`upstream::SESSION_SETTINGS`]), so the text values are the ones
//! `evolve_core::document` expects and `to_jsonb` on a default session sees.
//!
//! # Tests
//!
//! `tests/pipeline.rs` runs the pipeline in-process against two throwaway
//! clusters (upstream and sink); `tests/crash.rs` runs it as a child process
//! (`src/bin/evolve-pipeline-run.rs`, a test helper) and kills it with
//! SIGKILL while the upstream keeps writing (also while a replacement's
//! differing keys are kept), then counts every write the sink received
//! with a trigger; `tests/replacement.rs` runs the flows
//! that absorb upstream schema changes (added column, planned drop, type
//! change, unplanned drop, `ABSORB = 'auto'`, TRUNCATE, replica identity
//! changes, a rename) and counts the sink's writes for each;
//! `tests/drift.rs`, `tests/subscribe.rs`, `tests/tls.rs` and
//! `tests/admin.rs` cover drift, subscribers, TLS and the admin API.
//!
//! # Limits
//!
//! The admin API ([`admin`]) listens on loopback by default, and needs a
//! bearer token (`admin_token`) anywhere else. The documents of one very
//! large upstream transaction or a TRUNCATE are held in memory, as are the
//! changes of one swap while they are published to subscribers; a sink's
//! initial load holds a few chunks of documents, whatever the size of the
//! table. The stream is correct but not yet as fast as PostgreSQL's own
//! logical replication (BENCHMARKS.md).

pub mod absorb;
pub mod access;
pub mod admin;
mod apply;
pub mod bus;
pub mod config;
pub mod contracts;
pub mod coordinate;
mod doc;
pub mod drift;
pub mod error;
mod feed;
mod hydrate;
mod monitor;
mod pending;
mod pipeline;
pub mod poll;
pub mod position;
pub mod preflight;
mod sink;
pub mod source;
pub mod status;
pub mod store;
mod stream;
pub mod subscribe;
mod supervise;
mod swap;
pub mod upstream;

pub use config::{Config, Connection, ConnectionKind, KafkaOptions};
pub use error::{ObjectKind, PipelineError, Result};
pub use pipeline::{Pipeline, TableSpec};
pub use position::Position;
pub use sink::{PROGRESS_TABLE, PROGRESS_TOPIC, SINK_FILLFACTOR, TRANSACTION_TIMEOUT};
pub use status::ObjectStatus;
pub use store::{
    ColumnInfo, InterfaceInfo, KafkaEnvelope, KafkaFormat, KafkaTarget, SinkInfo, SinkKind,
    SourceInfo, TableInfo, TableState,
};

/// The layers inside the crate, lowest first; a module may use modules of
/// its own layer and of the layers below, never above (doc comments and
/// test modules aside):
///
/// 0. model: errors, positions, configuration, documents, status, the bus;
/// 1. the store (which alone owns the state database's SQL) and the drift
///    comparison over its catalog types;
/// 2. the engine: upstream sessions, monitoring, apply and swap, sources,
///    snapshots, sinks and their supervision;
/// 3. the façade ([`Pipeline`], under one catalog lock) and its preflight
///    checks;
/// 4. controllers, clients of the façade: absorb, drift polls,
///    subscriptions, consumer contracts;
/// 5. the admin API and its access rules.
#[cfg(test)]
mod layers {
    const LAYERS: &[(&str, usize, &str)] = &[
        ("error", 0, include_str!("error.rs")),
        ("position", 0, include_str!("position.rs")),
        ("config", 0, include_str!("config.rs")),
        ("doc", 0, include_str!("doc.rs")),
        ("feed", 0, include_str!("feed.rs")),
        ("status", 0, include_str!("status.rs")),
        ("bus", 0, include_str!("bus.rs")),
        ("store", 1, include_str!("store.rs")),
        ("drift", 1, include_str!("drift.rs")),
        ("upstream", 2, include_str!("upstream.rs")),
        ("monitor", 2, include_str!("monitor.rs")),
        ("apply", 2, include_str!("apply.rs")),
        ("swap", 2, include_str!("swap.rs")),
        ("hydrate", 2, include_str!("hydrate.rs")),
        ("pending", 0, include_str!("pending.rs")),
        ("source", 2, include_str!("source/mod.rs")),
        ("source", 2, include_str!("source/postgres.rs")),
        ("source", 2, include_str!("source/mysql.rs")),
        ("source", 2, include_str!("source/mysql/gtid.rs")),
        ("source", 2, include_str!("source/mysql/types.rs")),
        ("source", 2, include_str!("source/mysql/ddl.rs")),
        ("source", 2, include_str!("source/mysql/snapshot.rs")),
        ("source", 2, include_str!("source/mysql/stream.rs")),
        ("source", 2, include_str!("source/mysql/rows.rs")),
        ("source", 2, include_str!("source/mysql/compressed.rs")),
        ("source", 2, include_str!("source/kafka.rs")),
        ("source", 2, include_str!("source/kafka/last.rs")),
        ("source", 2, include_str!("source/kafka/json.rs")),
        ("source", 2, include_str!("source/kafka/avro.rs")),
        ("stream", 2, include_str!("stream.rs")),
        ("sink", 2, include_str!("sink/mod.rs")),
        ("sink", 2, include_str!("sink/postgres.rs")),
        ("supervise", 2, include_str!("supervise.rs")),
        ("pipeline", 3, include_str!("pipeline.rs")),
        ("preflight", 3, include_str!("preflight.rs")),
        ("absorb", 4, include_str!("absorb.rs")),
        ("poll", 4, include_str!("poll.rs")),
        ("subscribe", 4, include_str!("subscribe.rs")),
        ("contracts", 4, include_str!("contracts.rs")),
        ("admin", 5, include_str!("admin.rs")),
        ("access", 5, include_str!("access.rs")),
        ("coordinate", 5, include_str!("coordinate.rs")),
    ];

    fn layer(module: &str) -> Option<usize> {
        LAYERS
            .iter()
            .find(|(name, _, _)| *name == module)
            .map(|(_, layer, _)| *layer)
    }

    /// The modules a file's code (not its comments or tests) names as
    /// `crate::NAME`.
    fn uses(text: &str) -> Vec<String> {
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
        let mut out = Vec::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        out
    }

    #[test]
    fn no_module_uses_a_layer_above_its_own() {
        let mut wrong = Vec::new();
        for (module, own, text) in LAYERS {
            for used in uses(text) {
                match layer(&used) {
                    Some(l) if l > *own => {
                        wrong.push(format!("{module} (layer {own}) uses {used} (layer {l})"))
                    }
                    Some(_) => {}
                    None => wrong.push(format!("{module} uses {used}, which has no layer")),
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn every_module_has_a_layer() {
        let declared = include_str!("lib.rs")
            .lines()
            .filter_map(|l| {
                l.strip_prefix("pub mod ")
                    .or_else(|| l.strip_prefix("mod "))
                    .and_then(|r| r.strip_suffix(';'))
            })
            .collect::<Vec<_>>();
        assert!(declared.len() > 20, "{declared:?}");
        for module in declared {
            assert!(layer(module).is_some(), "module {module} has no layer");
        }
    }

    #[test]
    fn an_upward_use_is_caught() {
        assert_eq!(
            uses("use crate::pipeline::Pipeline;\n/// [`crate::admin`]\n"),
            ["pipeline"]
        );
        assert_eq!(layer("store"), Some(1));
    }
}
