//! Errors of replicas.

use evolve_pipeline::Position;

/// What stopped a replica's work.
#[derive(Debug, thiserror::Error)]
pub enum ReplicateError {
    /// A statement on the node failed for a reason of the node's (the
    /// connection, a restart): retried.
    #[error("{context}: {message}")]
    Node { context: String, message: String },
    /// The upstream's stream failed.
    #[error(transparent)]
    Source(#[from] evolve_pipeline::PipelineError),
    /// The replica's replication stream failed (the server's words).
    #[error("replication stream of replica \"{replica}\" failed: {message}")]
    Stream {
        replica: String,
        message: String,
        /// Whether retrying cannot help ([`evolve_pipeline::PipelineError::is_permanent`]).
        permanent: bool,
    },
    /// An upstream transaction cannot be applied: a conflict whose
    /// resolver is `error`, or the node refused a row. The replica halts
    /// there until the cause is fixed or the transaction skipped; under
    /// the pipeline it tries again by itself
    /// ([`crate::Replica::run_retrying`], every
    /// [`crate::replica::HALT_RETRY_MAX`] at most).
    #[error(
        "replica {replica} halted at the upstream transaction finished at {lsn}: {message}; fix the cause (the pipeline tries the transaction again by itself, every 30 s at most), or skip the transaction with `evolve replicate skip {replica} --lsn {lsn}`"
    )]
    Halted {
        replica: String,
        /// The transaction's end position, in LSN notation.
        lsn: Position,
        message: String,
    },
}

impl ReplicateError {
    /// An error of replica `replica`'s stream: the stream's own failures
    /// named as the replica's (the source it reads is the pipeline's
    /// machinery, not an object of the catalog).
    pub(crate) fn stream(replica: &str, e: evolve_pipeline::PipelineError) -> ReplicateError {
        match e {
            evolve_pipeline::PipelineError::Replication { ref message, .. } => {
                ReplicateError::Stream {
                    replica: replica.to_string(),
                    message: message.clone(),
                    permanent: e.is_permanent(),
                }
            }
            other => ReplicateError::Source(other),
        }
    }

    pub(crate) fn node(context: impl Into<String>, e: &tokio_postgres::Error) -> ReplicateError {
        ReplicateError::Node {
            context: context.into(),
            message: match e.as_db_error() {
                Some(db) => evolve_pg::describe_db_error(db, None),
                None => e.to_string(),
            },
        }
    }

    /// Whether retrying cannot help.
    pub fn is_permanent(&self) -> bool {
        match self {
            ReplicateError::Halted { .. } => true,
            ReplicateError::Source(e) => e.is_permanent(),
            ReplicateError::Stream { permanent, .. } => *permanent,
            ReplicateError::Node { .. } => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, ReplicateError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica's stream failure names the replica, not a source of that
    /// name, and keeps whether retrying can help.
    #[test]
    fn a_stream_failure_is_the_replicas() {
        let failed = |message: &str| {
            ReplicateError::stream(
                "rep_c",
                evolve_pipeline::PipelineError::Replication {
                    source_name: "rep_c".into(),
                    message: message.into(),
                },
            )
        };
        let e = failed("publication \"p\" does not exist (SQLSTATE 42704)");
        assert_eq!(
            e.to_string(),
            "replication stream of replica \"rep_c\" failed: publication \"p\" does not exist (SQLSTATE 42704)"
        );
        assert!(e.is_permanent());
        assert!(!failed("the server ended the stream").is_permanent());
        let other = ReplicateError::stream(
            "rep_c",
            evolve_pipeline::PipelineError::Connect {
                connection: "pg_conn".into(),
                target: "u@h:5432/db".into(),
                reason: "refused".into(),
            },
        );
        assert!(matches!(other, ReplicateError::Source(_)), "{other:?}");
        assert!(
            other.to_string().contains("connection \"pg_conn\""),
            "{other}"
        );
    }
}
