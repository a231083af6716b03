//! Errors in PostgreSQL's shape: a primary line, an optional detail and an
//! optional hint. Nothing here ever holds a password: connection strings
//! reach messages only through [`evolve_pg::redact_url`], and connections are
//! named by their name in the config file.

use std::fmt;

/// The kinds of catalog objects, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// A connection to an upstream database (publication + slot).
    Source,
    /// A versioned ingestion of one upstream table.
    Table,
    /// The stable JSON interface over a table ("materialized view").
    Interface,
    /// A destination of an interface's changes.
    Sink,
}

impl ObjectKind {
    /// `source`, `table`, `materialized view`, `sink`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Source => "source",
            ObjectKind::Table => "table",
            ObjectKind::Interface => "materialized view",
            ObjectKind::Sink => "sink",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything the pipeline can refuse or fail with.
///
/// [`Display`](fmt::Display) renders `ERROR: primary`, then `DETAIL:` and
/// `HINT:` lines when there are any; [`primary`](Self::primary),
/// [`detail`](Self::detail) and [`hint`](Self::hint) give the parts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The config file is missing, unreadable or invalid.
    #[error("{}", render(self))]
    Config {
        /// What is wrong, naming the file and the setting.
        message: String,
    },
    /// A connection name that is not in the config file.
    #[error("{}", render(self))]
    UnknownConnection {
        /// The name used.
        name: String,
        /// The names the config file defines.
        known: Vec<String>,
    },
    /// An object of that name exists already.
    #[error("{}", render(self))]
    AlreadyExists {
        /// Its kind.
        kind: ObjectKind,
        /// Its name.
        name: String,
    },
    /// No object of that name.
    #[error("{}", render(self))]
    UnknownObject {
        /// The kind looked for.
        kind: ObjectKind,
        /// The name looked for.
        name: String,
    },
    /// A name that cannot be used.
    #[error("{}", render(self))]
    InvalidName {
        /// The kind of object.
        kind: ObjectKind,
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The object cannot be dropped while others depend on it.
    #[error("{}", render(self))]
    HasDependents {
        /// Its kind.
        kind: ObjectKind,
        /// Its name.
        name: String,
        /// The objects that depend on it.
        dependents: Vec<(ObjectKind, String)>,
    },
    /// The upstream reference names no table.
    #[error("{}", render(self))]
    UpstreamTableNotFound {
        /// `schema.table` as given.
        reference: String,
        /// The source.
        source_name: String,
    },
    /// The upstream table has neither a primary key nor a replica identity
    /// index, or its replica identity is NOTHING.
    #[error("{}", render(self))]
    NoReplicaIdentity {
        /// `schema.table`.
        reference: String,
        /// Why, in detail.
        detail: String,
    },
    /// A column in EXCLUDE COLUMNS or TEXT COLUMNS that cannot be used.
    #[error("{}", render(self))]
    BadColumn {
        /// `schema.table`.
        reference: String,
        /// The column.
        column: String,
        /// Why.
        reason: String,
    },
    /// A database could not be reached.
    #[error("{}", render(self))]
    Connect {
        /// The connection's name in the config file.
        connection: String,
        /// `user@host:port/db` or the redacted URL.
        target: String,
        /// The reason given by the client or the server.
        reason: String,
    },
    /// A statement on a database failed.
    #[error("{}", render(self))]
    Database {
        /// What was being done.
        context: String,
        /// The server's error, described (SQLSTATE, message, detail, hint).
        message: String,
    },
    /// The source's replication slot is gone or invalidated upstream.
    #[error("{}", render(self))]
    SlotLost {
        /// The source.
        source_name: String,
        /// The slot.
        slot: String,
        /// What the server says about it.
        detail: String,
    },
    /// The upstream confirmed a position past everything the state
    /// directory applied or asked it to confirm: the state is older than
    /// the upstream's record of it (restored from a backup, or copied), and
    /// the changes between are gone upstream.
    #[error("{}", render(self))]
    StateBehind {
        /// The source.
        source_name: String,
        /// The upstream's confirmed position.
        upstream: String,
        /// The furthest position the state knows.
        state: String,
    },
    /// A Kafka source's topic no longer holds the offsets its stream must
    /// resume from: records removed by retention or compaction before the
    /// source read them, or a topic deleted and created again (its end is
    /// before where the source has read).
    #[error("{}", render(self))]
    OffsetsLost {
        /// The source.
        source_name: String,
        /// Which partition, and what it holds now.
        detail: String,
    },
    /// A MySQL source's binlog no longer holds the position its stream must
    /// resume from (the files were purged, or it is another server's).
    #[error("{}", render(self))]
    BinlogPurged {
        /// The source.
        source_name: String,
        /// The position needed (`file number/offset`, hexadecimal).
        needed: String,
        /// What the server has.
        detail: String,
    },
    /// A replication slot of the name the source would use exists already.
    #[error("{}", render(self))]
    SlotExists {
        /// The slot.
        slot: String,
    },
    /// The logical replication stream failed or sent something unexpected.
    #[error("{}", render(self))]
    Replication {
        /// The source.
        source_name: String,
        /// What happened.
        message: String,
    },
    /// A sink's target table exists with another shape.
    #[error("{}", render(self))]
    SinkShape {
        /// The target table, `schema.table`.
        table: String,
        /// What differs.
        problem: String,
    },
    /// A row could not be turned into a document.
    #[error("{}", render(self))]
    Document {
        /// The table.
        table: String,
        /// The encoder's error.
        message: String,
    },
    /// A statement refused for a reason of its own (replacements), with
    /// its SQLSTATE.
    #[error("{}", render(self))]
    Refused {
        /// The SQLSTATE, in PostgreSQL's classes.
        sqlstate: &'static str,
        /// The primary line.
        primary: String,
        /// The detail line.
        detail: Option<String>,
        /// The hint line.
        hint: Option<String>,
    },
    /// The upstream refused one of the pipeline's sessions for its user:
    /// a privilege the user lacks (SQLSTATE 42501) or a password or user
    /// the server no longer has (28000). Permanent: it fails the same way
    /// until someone grants the privilege or fixes the url.
    #[error("{}", render(self))]
    AccessDenied {
        /// `42501` (a privilege) or `28000` (the login).
        sqlstate: &'static str,
        /// What was refused, naming the account or the connection.
        primary: String,
        /// What the server said.
        detail: String,
        /// The way out: the GRANT, or the url to fix.
        hint: String,
    },
    /// The embedded store failed.
    #[error("{}", render(self))]
    Store {
        /// What was being done.
        context: String,
        /// SQLite's error.
        message: String,
    },
}

/// `Result` with [`PipelineError`].
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

impl PipelineError {
    /// The primary line (no `ERROR:` prefix).
    pub fn primary(&self) -> String {
        match self {
            PipelineError::Config { message } => message.clone(),
            PipelineError::UnknownConnection { name, .. } => {
                format!("connection \"{name}\" does not exist")
            }
            PipelineError::AlreadyExists { kind, name } => {
                format!("{kind} \"{name}\" already exists")
            }
            PipelineError::UnknownObject { kind, name } => {
                format!("{kind} \"{name}\" does not exist")
            }
            PipelineError::InvalidName { kind, name, reason } => {
                format!("invalid {kind} name \"{name}\": {reason}")
            }
            PipelineError::HasDependents { kind, name, .. } => {
                format!("cannot drop {kind} \"{name}\" because other objects depend on it")
            }
            PipelineError::UpstreamTableNotFound {
                reference,
                source_name,
            } => {
                format!("upstream table \"{reference}\" does not exist in source \"{source_name}\"")
            }
            PipelineError::NoReplicaIdentity { reference, .. } => {
                format!(
                    "upstream table \"{reference}\" has no primary key or replica identity index"
                )
            }
            PipelineError::BadColumn {
                reference,
                column,
                reason,
            } => format!("column \"{column}\" of upstream table \"{reference}\" {reason}"),
            PipelineError::Connect {
                connection, target, ..
            } => format!("could not connect to connection \"{connection}\" ({target})"),
            PipelineError::Database { context, .. } => format!("{context} failed"),
            PipelineError::SlotLost {
                source_name, slot, ..
            } => format!(
                "replication slot \"{slot}\" of source \"{source_name}\" is missing or invalidated"
            ),
            PipelineError::StateBehind {
                source_name,
                upstream,
                state,
            } => format!(
                "the state of source \"{source_name}\" ends at {state}, but its upstream confirmed {upstream}: the state directory is older than the upstream's record of it"
            ),
            PipelineError::OffsetsLost { source_name, .. } => format!(
                "the Kafka topic of source \"{source_name}\" no longer holds the offsets the source must resume from"
            ),
            PipelineError::BinlogPurged {
                source_name,
                needed,
                ..
            } => format!(
                "binlog position {needed} of source \"{source_name}\" is no longer on the server"
            ),
            PipelineError::SlotExists { slot } => {
                format!("replication slot \"{slot}\" already exists upstream")
            }
            PipelineError::Replication {
                source_name,
                message,
            } => {
                format!("replication stream of source \"{source_name}\" failed: {message}")
            }
            PipelineError::SinkShape { table, .. } => {
                format!("sink table \"{table}\" has the wrong shape")
            }
            PipelineError::Document { table, message } => {
                format!("could not build the document of a row of table \"{table}\": {message}")
            }
            PipelineError::Store { context, message } => {
                format!("embedded store: {context}: {message}")
            }
            PipelineError::Refused { primary, .. } => primary.clone(),
            PipelineError::AccessDenied { primary, .. } => primary.clone(),
        }
    }

    /// The detail line, when there is one.
    pub fn detail(&self) -> Option<String> {
        match self {
            PipelineError::UnknownConnection { known, .. } => Some(if known.is_empty() {
                "The config file defines no connections.".to_string()
            } else {
                format!("Defined connections: {}.", known.join(", "))
            }),
            PipelineError::HasDependents { dependents, .. } => Some(
                dependents
                    .iter()
                    .map(|(kind, name)| format!("{kind} \"{name}\" depends on it."))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            PipelineError::NoReplicaIdentity { detail, .. } => Some(detail.clone()),
            PipelineError::Connect { reason, .. } => Some(reason.clone()),
            PipelineError::Database { message, .. } => Some(message.clone()),
            PipelineError::SlotLost { detail, .. } => Some(detail.clone()),
            PipelineError::BinlogPurged { detail, .. } => Some(detail.clone()),
            PipelineError::OffsetsLost { detail, .. } => Some(detail.clone()),
            PipelineError::SinkShape { problem, .. } => Some(problem.clone()),
            PipelineError::Refused { detail, .. } => detail.clone(),
            PipelineError::AccessDenied { detail, .. } => Some(detail.clone()),
            _ => None,
        }
    }

    /// The hint line, when there is one.
    pub fn hint(&self) -> Option<String> {
        match self {
            PipelineError::UnknownConnection { .. } => {
                Some("Add a [connections.NAME] section with a url to evolve.toml.".into())
            }
            PipelineError::HasDependents { .. } => {
                Some("Drop the dependent objects first.".into())
            }
            PipelineError::UnknownObject { kind, .. } => Some(match kind {
                ObjectKind::Source => {
                    "SHOW SOURCES lists the sources there are; CREATE SOURCE makes one.".into()
                }
                ObjectKind::Table => {
                    "SHOW TABLES lists the tables there are; CREATE TABLE ... FROM SOURCE makes one."
                        .into()
                }
                ObjectKind::Interface => "SHOW MATERIALIZED VIEWS lists the materialized views there are; CREATE MATERIALIZED VIEW makes one.".into(),
                ObjectKind::Sink => {
                    "SHOW SINKS lists the sinks there are; CREATE SINK makes one.".into()
                }
            }),
            PipelineError::UpstreamTableNotFound { .. } => Some(
                "Check the spelling, and that the source's connection reaches the right database (REFERENCE schema.table).".into(),
            ),
            PipelineError::NoReplicaIdentity { reference, .. } => Some(format!(
                "Add a primary key (ALTER TABLE {reference} ADD PRIMARY KEY (...)) or choose a unique index on NOT NULL columns (ALTER TABLE {reference} REPLICA IDENTITY USING INDEX ...)."
            )),
            PipelineError::BadColumn { .. } => {
                Some("List only existing columns that are not part of the key.".into())
            }
            PipelineError::Connect { .. } => Some(
                "Check the connection's url in the config file and that the server is running."
                    .into(),
            ),
            PipelineError::SlotLost { .. } => Some(
                "The stream cannot resume without loss: drop the source's tables and the source, then create them again.".into(),
            ),
            PipelineError::StateBehind { .. } => Some(
                "Was it restored from a backup, or copied from another pipeline? The changes between are gone from the upstream, so resuming would lose them: restore the state directory that goes with the upstream, or drop the source's tables and the source, then create them again.".into(),
            ),
            PipelineError::OffsetsLost { .. } => Some(
                "The stream cannot resume without loss: drop the source's tables and the source, then create them again (their snapshots start from what the topic holds); keep records longer (retention.ms) so that a stopped pipeline can catch up.".into(),
            ),
            PipelineError::BinlogPurged { .. } => Some(
                "The stream cannot resume without loss: drop the source's tables and the source, then create them again (their snapshots start from the binlog the server has); keep binlogs longer (binlog_expire_logs_seconds) so that a stopped pipeline can catch up.".into(),
            ),
            PipelineError::SlotExists { slot } => Some(format!(
                "Another pipeline may own it; if not, drop it upstream with SELECT pg_drop_replication_slot('{slot}')."
            )),
            PipelineError::SinkShape { .. } => Some(
                "A sink table has exactly (key jsonb PRIMARY KEY, data jsonb NOT NULL); name a new table, or drop this one.".into(),
            ),
            PipelineError::Refused { hint, .. } => hint.clone(),
            PipelineError::AccessDenied { hint, .. } => Some(hint.clone()),
            _ if self.is_missing_publication() => Some(
                "PostgreSQL decodes each change with the catalog as it was when the change was written, so a change written while the publication was missing cannot be decoded, even once it exists again: drop the source's tables and the source, then create them again (their snapshots read the upstream as it is now).".into(),
            ),
            _ => None,
        }
    }

    /// Whether a replication stream failed because its publication does
    /// not exist (at the position of the change being decoded).
    pub fn is_missing_publication(&self) -> bool {
        match self {
            PipelineError::Replication { message, .. } => {
                server_sqlstate(message) == Some("42704")
                    && message.contains("publication \"")
                    && message.contains("does not exist")
            }
            _ => false,
        }
    }

    /// Whether retrying cannot help until someone changes something: a
    /// slot that is gone, or a replication stream the server refuses for
    /// a reason that does not pass by itself (an object that does not
    /// exist, a missing privilege, a bad parameter, failed
    /// authentication). Connection failures, a slot in use, too many
    /// connections and server shutdowns are transient.
    pub fn is_permanent(&self) -> bool {
        match self {
            PipelineError::SlotLost { .. }
            | PipelineError::BinlogPurged { .. }
            | PipelineError::OffsetsLost { .. }
            | PipelineError::StateBehind { .. }
            | PipelineError::AccessDenied { .. } => true,
            PipelineError::Replication { message, .. } => {
                server_sqlstate(message).is_some_and(permanent_sqlstate)
            }
            _ => false,
        }
    }

    pub(crate) fn store(context: impl Into<String>, e: rusqlite::Error) -> PipelineError {
        PipelineError::Store {
            context: context.into(),
            message: e.to_string(),
        }
    }

    pub(crate) fn database(context: impl Into<String>, e: &tokio_postgres::Error) -> PipelineError {
        let message = match e.as_db_error() {
            Some(db) => evolve_pg::describe_db_error(db, None),
            None => e.to_string(),
        };
        PipelineError::Database {
            context: context.into(),
            message,
        }
    }
}

/// The SQLSTATE of a server error as pgwire-replication words it
/// (`message (SQLSTATE 42704)`).
fn server_sqlstate(message: &str) -> Option<&str> {
    let at = message.rfind("(SQLSTATE ")?;
    let code = message[at + "(SQLSTATE ".len()..].strip_suffix(')')?;
    (code.len() == 5 && code.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(code)
}

/// SQLSTATEs after which a replication stream fails again the same way:
/// invalid authorization (28), invalid catalog name (3D), syntax errors
/// and access rule violations (42: a missing publication or privilege),
/// and invalid parameter values (22023: `invalid publication_names
/// syntax`).
fn permanent_sqlstate(code: &str) -> bool {
    code.starts_with("28") || code.starts_with("3D") || code.starts_with("42") || code == "22023"
}

fn render(e: &PipelineError) -> String {
    let mut out = format!("ERROR: {}", e.primary());
    if let Some(detail) = e.detail() {
        out.push_str("\nDETAIL: ");
        out.push_str(&detail);
    }
    if let Some(hint) = e.hint() {
        out.push_str("\nHINT: ");
        out.push_str(&hint);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_primary_detail_hint() {
        let e = PipelineError::HasDependents {
            kind: ObjectKind::Table,
            name: "orders_v1".into(),
            dependents: vec![(ObjectKind::Interface, "orders_json".into())],
        };
        assert_eq!(
            e.to_string(),
            "ERROR: cannot drop table \"orders_v1\" because other objects depend on it\n\
             DETAIL: materialized view \"orders_json\" depends on it.\n\
             HINT: Drop the dependent objects first."
        );
    }

    #[test]
    fn permanent_and_transient_failures() {
        let replication = |message: &str| PipelineError::Replication {
            source_name: "s".into(),
            message: message.into(),
        };
        for permanent in [
            "publication \"mypub\" does not exist (SQLSTATE 42704)",
            "invalid publication_names syntax (SQLSTATE 22023)",
            "permission denied to start WAL sender (SQLSTATE 42501)",
            "password authentication failed for user \"x\" (SQLSTATE 28P01)",
            "database \"nope\" does not exist (SQLSTATE 3D000)",
        ] {
            assert!(replication(permanent).is_permanent(), "{permanent}");
        }
        for transient in [
            "replication slot \"s\" is active for PID 7 (SQLSTATE 55006)",
            "sorry, too many clients already (SQLSTATE 53300)",
            "terminating connection due to administrator command (SQLSTATE 57P01)",
            "the server ended the stream",
            "mentions (SQLSTATE 42704) but not at the end",
        ] {
            assert!(!replication(transient).is_permanent(), "{transient}");
        }
        assert!(
            PipelineError::SlotLost {
                source_name: "s".into(),
                slot: "evolve_s".into(),
                detail: "gone".into(),
            }
            .is_permanent()
        );
        assert!(
            !PipelineError::Connect {
                connection: "up".into(),
                target: "u@h:5432/db".into(),
                reason: "connection refused".into(),
            }
            .is_permanent()
        );
    }
}
