//! The pure core of evolve.
//!
//! This crate does no I/O: it never touches files, sockets, the clock or the
//! environment. Its functions take bytes and values and return values, so the
//! crates at the edges (`evolve-migrate`, `evolve-pg`, the binary) decide where
//! data comes from and where it goes, and everything here can be unit tested,
//! property tested and fuzzed in isolation.
//!
//! Modules:
//!
//! - [`change`]: row changes as sources deliver them (the upstream table's
//!   schema at the change, old and new values in text form, unsent values
//!   said so), below documents.
//! - [`conflict`]: conflict types and resolvers of replication into nodes at
//!   other schema versions (PGD's model), and the column match they decide.
//! - [`contract`]: consumer contracts, the fields of an interface's
//!   documents a view's definition reads.
//! - [`kafka`]: Kafka client options (brokers, TLS, SASL), checked and
//!   mapped to librdkafka's settings for every part that talks to brokers.
//! - [`migration`]: migration files. Flyway-compatible file names and versions,
//!   Flyway's checksum, and the parsing of a migration script into directives
//!   and statements (split by a real PostgreSQL parser, never by regex).
//!
//! Architecture invariant: nothing in this crate may depend on tokio, a
//! database client, or `std::fs`/`std::net`/`std::env`/`std::time`. The one
//! use of the operating system is a short-lived helper thread with a large
//! stack in [`migration::parse_script`], so that deeply nested SQL cannot
//! overflow the caller's stack.

pub mod change;
pub mod conflict;
pub mod contract;
pub mod control;
pub mod document;
pub mod kafka;
pub mod migration;
