//! Replication into PostgreSQL nodes at other schema versions.
//!
//! A replica reads its upstream through the pipeline's [`Source`] seam
//! (typed row changes in commit order, its own slot) and applies each
//! upstream transaction to one target node as typed rows, atomically and
//! in commit order, with the replica's position in the same node
//! transaction ([`apply`]): a crash replays from the slot's confirmed
//! position and the position on the node skips what it has, so nothing is
//! applied twice. Every mismatch between the upstream's schema and the
//! node's is a named conflict with a resolver
//! ([`evolve_core::conflict`]), as EDB PGD has them, so a rolling upgrade
//! (nodes migrated one at a time) keeps replicating where PostgreSQL's
//! own logical replication stops.
//!
//! Nothing is installed on the nodes: evolve creates two tables there,
//! `evolve_replica_progress` and `evolve_conflict_history`.
//!
//! Users drive replicas with statements through `evolve sql` (`CREATE
//! REPLICA`, `ALTER REPLICA ... SET CONFLICT RESOLVER`, `CREATE
//! TRANSFORM`, `SHOW REPLICAS`, ...), which the pipeline's admin API hands
//! to [`service::ReplicaService`], its [`StatementHandler`]; the replicas
//! are recorded in [`catalog`] (`state_dir/replicate.db`) and run beside
//! the pipeline's engine under `evolve pipeline run`.
//!
//! [`Source`]: evolve_pipeline::source::Source
//! [`StatementHandler`]: evolve_pipeline::admin::StatementHandler

pub mod apply;
pub mod catalog;
mod error;
pub mod node;
pub mod replica;
pub mod rollout;
pub mod service;
pub mod transform;

pub use apply::{Applied, Applier, Transaction};
pub use error::{ReplicateError, Result};
pub use replica::{CopyReport, Replica, ReplicaSpec};
pub use transform::Transform;
