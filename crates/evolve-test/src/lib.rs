//! Throwaway PostgreSQL clusters for evolve's tests, benchmarks and the
//! `evolve demo` command.
//!
//! A [`Cluster`] is a real PostgreSQL server made with `initdb` and started
//! with `pg_ctl` in a fresh temp dir (`$TMPDIR/evolve-pg-<pid>-<n>`), listening
//! only on 127.0.0.1 at a free port with `trust` authentication for the
//! `postgres` superuser (see [Passwords](#passwords)). It is configured for change capture and for speed,
//! not durability: `wal_level=logical`, `fsync=off`, `synchronous_commit=off`,
//! `full_page_writes=off`, 200 connections, 20 WAL senders and replication
//! slots. Starting one takes about two seconds, nearly all of it `initdb`.
//!
//! Tests normally share one cluster per test binary and take a fresh database
//! each:
//!
//! ```no_run
//! # async fn example() {
//! let db = evolve_test::fresh_db("orders_swap").await;
//! let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
//!     .await
//!     .unwrap();
//! tokio::spawn(connection);
//! client.batch_execute("CREATE TABLE t (id int PRIMARY KEY)").await.unwrap();
//! # }
//! ```
//!
//! Benchmarks and the demo start their own with [`Cluster::start`].
//!
//! # MariaDB
//!
//! [`MariaDb`] is the same for MySQL-protocol upstreams: a throwaway
//! MariaDB server (`mariadb-install-db` + `mariadbd`) with the row-based
//! binlog change capture reads, one shared per test binary
//! ([`shared_mariadb`]) with a fresh database per test
//! ([`fresh_mariadb_db`]); see the `mariadb` module's docs for its settings,
//! its users and `EVOLVE_MARIADB_BIN`.
//!
//! # TLS
//!
//! [`Cluster::start_with`] with [`Options::tls`] starts a cluster with
//! `ssl=on` and a certificate from a throwaway CA made for it with the
//! `openssl` command line ([`Cluster::ca_cert`] is the CA's PEM file, for
//! `sslrootcert`); [`TlsOptions`] choose the certificate's names, whether
//! plain TCP sessions are refused (`hostssl` lines only) and which roles must
//! log in with a client certificate ([`Cluster::client_certificate`]).
//!
//! [`TlsOptions::self_signed`] makes the server's certificate self-signed
//! instead, its own CA, as `openssl req -x509` makes one.
//!
//! # Settings
//!
//! [`Options::settings`] adds server settings after the harness's own, so
//! they win: a cluster with `wal_level = replica`, or with few replication
//! slots or WAL senders, for tests of what happens when the server is not
//! ready for change capture.
//!
//! ```no_run
//! # fn example() -> Result<(), evolve_test::HarnessError> {
//! use evolve_test::{Cluster, Options};
//! let cluster = Cluster::start_with(Options {
//!     settings: vec![("wal_level".into(), "replica".into())],
//!     ..Options::default()
//! })?;
//! # Ok(()) }
//! ```
//!
//! # Passwords
//!
//! [`Options::auth`] with [`Auth::Scram`] makes TCP sessions (replication
//! included) authenticate with `scram-sha-256`; Unix-socket sessions stay
//! trusted. [`Cluster::create_role`] makes roles with passwords.
//!
//! # Cleanup
//!
//! Dropping a [`Cluster`] stops the server (`pg_ctl stop -m immediate`) and
//! removes its directory. The [`shared`] cluster lives in a static and is
//! never dropped, so every cluster also has a watchdog: a small `sh` process
//! whose stdin is a pipe this process holds open. When this process exits,
//! normally, by panic, or killed with SIGKILL, the pipe closes and the
//! watchdog sends the postmaster SIGQUIT (an immediate shutdown, as
//! `pg_ctl stop -m immediate` does), waits for it to exit and removes the
//! directory. The watchdog has no stdout or stderr of ours, so test runners
//! that capture output never wait for it, and it sits in its own process
//! group, so Ctrl-C in a terminal reaches the tests but not it.
//!
//! # Running as root
//!
//! PostgreSQL refuses to run as root. When the effective uid is 0, the
//! cluster's directory is given to the `postgres` OS user (an error if it
//! does not exist) and `initdb` and `pg_ctl` run as that user. If the temp
//! dir is not traversable by other users, `/tmp` is used instead; the same
//! happens if its path is too long for a Unix socket path.
//!
//! # Environment
//!
//! - `EVOLVE_PG_BIN`: the directory holding `initdb`, `pg_ctl`, `psql`, ...;
//!   by default the highest-numbered `/usr/lib/postgresql/<version>/bin`, then
//!   `pg_config --bindir`, then `initdb` on `PATH` (see [`pg_bin_dir`]).
//! - `EVOLVE_TEST_KEEP=1`: keep every cluster running after the process ends
//!   (no cleanup, no watchdog), and print its directory, port and the command
//!   to stop it to stderr, for inspecting what a test left behind.
//! - `TMPDIR`: where cluster directories go (see above for root).
//! - `EVOLVE_KAFKA_JARS`: the directory of the Kafka jars (see below).
//!
//! # Kafka
//!
//! [`Kafka`] is a throwaway Apache Kafka broker (KRaft, one node, the
//! broker's own jars run with `java`), and [`kafka`] the one shared by a
//! test binary, as [`shared`] is for PostgreSQL; [`read_committed`] reads a
//! topic to its end as a `read_committed` consumer. The jars are fetched by
//! `cargo xtask test` into `target/kafka/jars`; without them starting a
//! broker fails and says so.

mod bin_dir;
mod cluster;
mod error;
mod kafka;
mod mariadb;
mod os;
mod tls;

use std::sync::OnceLock;

pub use bin_dir::pg_bin_dir;
pub use cluster::{Auth, Cluster, Options, Role, TestDb};
pub use error::HarnessError;
pub use kafka::{
    KAFKA_VERSION, Kafka, Record, is_unknown_topic, kafka, kafka_jars_dir, read_committed,
};
pub use mariadb::{MariaDb, MariaDbDb, MariaDbOptions, fresh_mariadb_db, shared_mariadb};
pub use tls::TlsOptions;

/// The cluster shared by every test of this process, started on first use.
///
/// # Panics
///
/// If the cluster cannot be started, with the reason (binaries missing, the
/// server log's last lines, ...). Every later call panics with the same
/// message rather than trying again.
pub fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
    match SHARED.get_or_init(|| Cluster::start().map_err(|e| e.to_string())) {
        Ok(cluster) => cluster,
        Err(message) => panic!("could not start the shared test cluster: {message}"),
    }
}

/// A fresh empty database on the [`shared`] cluster: see
/// [`Cluster::create_database`].
///
/// # Panics
///
/// If the shared cluster cannot be started or the database not created.
pub async fn fresh_db(hint: &str) -> TestDb {
    match shared().create_database(hint).await {
        Ok(db) => db,
        Err(e) => panic!("{e}"),
    }
}
