//! evolve's schema registry: Confluent Schema Registry's REST API over the
//! compatibility engine of `evolve-compat`.
//!
//! - [`record`]: the `_schemas` log records (Confluent's format), and
//!   reading a Confluent or Karapace export.
//! - [`contract`] (pure): data contracts' metadata and rule sets, and
//!   the configuration's defaults and overrides merged on registration.
//! - [`guid`] (pure): a schema's `guid`, Confluent 8.x's MD5 of it.
//! - [`state`] (pure): the state a log replays into, and every operation
//!   as a function from state to the records it appends.
//! - [`store`]: the append-only log behind the [`store::Log`] trait, in
//!   SQLite (default) or PostgreSQL (several instances share one log);
//!   [`kafka`]: the log in a `_schemas` Kafka topic, written by one
//!   instance at a time through a fenced transactional producer;
//!   [`forward`]: the other instances send their writes to it over HTTP.
//! - [`service`]: one registry instance: its state, catching up with the
//!   log, writes that retry when another instance appended first.
//! - [`http`]: the axum router (routes, content types, errors, basic
//!   auth, metrics, access logs) and [`serve`] (TCP or TLS).
//! - [`access`]: the `Host` and `Origin` checks that keep web pages in a
//!   browser out (DNS rebinding, cross-site writes).

pub mod access;
pub mod auth;
pub mod contract;
pub mod error;
pub mod forward;
pub mod guid;
pub mod http;
pub mod kafka;
pub mod metrics;
mod parser;
pub mod record;
pub mod serve;
pub mod service;
pub mod state;
pub mod store;
