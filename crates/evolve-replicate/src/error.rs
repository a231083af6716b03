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
    /// An upstream transaction cannot be applied: a conflict whose
    /// resolver is `error`, or the node refused a row. The replica halts
    /// there until the cause is fixed or the transaction skipped.
    #[error(
        "replica {replica} halted at the upstream transaction finished at {lsn}: {message}; fix the cause, or skip the transaction with `evolve replicate skip {replica} --lsn {lsn}`"
    )]
    Halted {
        replica: String,
        /// The transaction's end position, in LSN notation.
        lsn: Position,
        message: String,
    },
}

impl ReplicateError {
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
            ReplicateError::Node { .. } => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, ReplicateError>;
