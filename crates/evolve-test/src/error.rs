use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Why a throwaway cluster or database could not be provided.
///
/// Every message names what failed and the way out; failures of the server
/// carry the tail of its log or of the tool's output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// No directory with `initdb` was found by the search in
    /// [`pg_bin_dir`](crate::pg_bin_dir).
    #[error(
        "PostgreSQL server binaries not found (initdb); install the postgresql package or set EVOLVE_PG_BIN"
    )]
    BinariesNotFound,

    /// `EVOLVE_PG_BIN` is set but names no directory containing `initdb`.
    #[error(
        "EVOLVE_PG_BIN={} contains no initdb; point it at the bin directory of a PostgreSQL server installation or unset it",
        .0.display()
    )]
    BadBinDir(PathBuf),

    /// Running as root and there is no `postgres` OS user to run the server as.
    #[error(
        "running as root but the postgres OS user does not exist ({detail}); PostgreSQL refuses to run as root: install the postgresql package (it creates the user) or run as a non-root user"
    )]
    NoPostgresUser {
        /// What `id` said.
        detail: String,
    },

    /// An operating-system operation failed.
    #[error("could not {action}: {source}")]
    Io {
        /// What was being done, e.g. `create directory /tmp/evolve-pg-1-0`.
        action: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A PostgreSQL tool (initdb, pg_ctl) exited unsuccessfully.
    #[error("{tool} failed ({status})\n{output}")]
    Tool {
        /// The command line, shortened to the tool and its first arguments.
        tool: String,
        /// How it exited.
        status: ExitStatus,
        /// The tail of its combined stdout and stderr, and of the server log
        /// where there is one.
        output: String,
    },

    /// The Kafka jars are not where [`kafka_jars_dir`](crate::kafka_jars_dir)
    /// says they are.
    #[error(
        "the Apache Kafka jars (kafka_2.13 {}) are not in {}; run `cargo xtask test` (it fetches them with Maven), or set EVOLVE_KAFKA_JARS to a directory holding them",
        crate::KAFKA_VERSION,
        jars.display()
    )]
    KafkaJarsMissing {
        /// Where they were looked for.
        jars: PathBuf,
    },

    /// The Kafka broker did not come up.
    #[error(
        "the test Kafka broker on 127.0.0.1:{port} did not start: {why}\nbroker log (last lines):\n{log}"
    )]
    KafkaStart {
        /// Its port.
        port: u16,
        /// What went wrong.
        why: String,
        /// The tail of its log.
        log: String,
    },

    /// Reading a topic to its end failed.
    #[error("could not read topic \"{topic}\" to its end: {why}")]
    KafkaRead {
        /// The topic.
        topic: String,
        /// What went wrong.
        why: String,
    },

    /// `CREATE DATABASE` (or the connection for it) failed.
    #[error("could not create database \"{name}\" on 127.0.0.1:{port}: {detail}")]
    CreateDatabase {
        /// The database that was being created.
        name: String,
        /// The cluster's port.
        port: u16,
        /// The server's message, or the client error.
        detail: String,
        /// The underlying error.
        #[source]
        source: tokio_postgres::Error,
    },

    /// `CREATE ROLE` (or the connection for it) failed.
    #[error("could not create role \"{name}\" on 127.0.0.1:{port}: {detail}")]
    CreateRole {
        /// The role that was being created.
        name: String,
        /// The cluster's port.
        port: u16,
        /// The server's message, or the client error.
        detail: String,
        /// The underlying error.
        #[source]
        source: tokio_postgres::Error,
    },
}

impl HarnessError {
    pub(crate) fn io(action: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            action: action.into(),
            source,
        }
    }
}
