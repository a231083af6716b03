//! Flyway's SQL callbacks: `<event>.sql` and `<event>__<description>.sql`
//! files in the migrations directory, run when their event happens, in
//! Flyway's order (the file without a description first, then by
//! description), placeholders replaced, never recorded in the history.
//!
//! As in Flyway, a callback of a verb's own events (`beforeMigrate`,
//! `afterValidate`, ...) runs in a transaction of its own, or statement by
//! statement outside one when it holds a statement PostgreSQL refuses in a
//! transaction or its script configuration file (`beforeMigrate.sql.conf`)
//! says `executeInTransaction=false` (`true` keeps it in one).
//! `beforeEachMigrate` and `afterEachMigrate` run inside the migration's
//! transaction, so they roll back with a migration that fails.

use evolve_core::migration::{Statement, StatementKind, line_col};
use evolve_pg::{Client, describe_db_error};

use crate::MigrateError;
use crate::files::{CallbackFile, MigrationSet};

/// The events evolve runs callbacks for.
pub const EVENTS: [&str; 21] = [
    "beforeMigrate",
    "beforeEachMigrate",
    "afterEachMigrate",
    "afterEachMigrateError",
    "afterVersioned",
    "beforeRepeatables",
    "afterMigrateApplied",
    "afterMigrate",
    "afterMigrateError",
    "beforeValidate",
    "afterValidate",
    "afterValidateError",
    "beforeRepair",
    "afterRepair",
    "afterRepairError",
    "beforeBaseline",
    "afterBaseline",
    "afterBaselineError",
    "beforeInfo",
    "afterInfo",
    "afterInfoError",
];

/// Whether a callback runs in a transaction: as its script configuration
/// says, else when none of its statements ends one or must run outside
/// one.
fn transactional(file: &CallbackFile) -> bool {
    if let Some(in_transaction) = file.config.as_ref().and_then(|c| c.execute_in_transaction) {
        return in_transaction;
    }
    file.parsed
        .statements
        .iter()
        .all(|s| s.kind == StatementKind::Other)
}

/// Runs the callbacks of `event`, each in a transaction of its own (or in
/// autocommit when it cannot run in one); `reset` (`RESET ALL` and the
/// session's own settings, see [`crate::Connected`]) follows each.
pub(crate) async fn run(
    client: &Client,
    reset: &str,
    files: &MigrationSet,
    event: &str,
) -> Result<(), MigrateError> {
    for file in files.callbacks_of(event) {
        if transactional(file) {
            // Statement by statement, so that a failure names its line
            // (an error without a position, such as a division by zero,
            // tells nothing of which statement of a batch failed).
            client.batch_execute("BEGIN").await?;
            for stmt in &file.parsed.statements {
                if let Err(e) = client.batch_execute(&stmt.text).await {
                    let _ = client.batch_execute(&format!("ROLLBACK; {reset}")).await;
                    let within = crate::apply::position_in(&e, &stmt.text).unwrap_or(0);
                    return Err(failed(
                        file,
                        Some((stmt, within)),
                        &e,
                        "its transaction was rolled back; fix it and run again",
                    ));
                }
            }
            if let Err(e) = client.batch_execute(&format!("COMMIT; {reset}")).await {
                let _ = client.batch_execute(&format!("ROLLBACK; {reset}")).await;
                return Err(failed(
                    file,
                    None,
                    &e,
                    "its transaction was rolled back at its commit; fix it and run again",
                ));
            }
        } else {
            for (i, stmt) in file.parsed.statements.iter().enumerate() {
                if let Err(e) = client.batch_execute(&stmt.text).await {
                    let within = crate::apply::position_in(&e, &stmt.text).unwrap_or(0);
                    return Err(failed(
                        file,
                        Some((stmt, within)),
                        &e,
                        &format!(
                            "it runs outside a transaction: its statements before statement {} stay applied; fix it and run again",
                            i + 1
                        ),
                    ));
                }
            }
            client.batch_execute(reset).await?;
        }
    }
    Ok(())
}

/// The callback error for a failure at byte `within` of `stmt`.
pub(crate) fn failed(
    file: &CallbackFile,
    at: Option<(&Statement, usize)>,
    error: &tokio_postgres::Error,
    outcome: &str,
) -> MigrateError {
    let (line, column) = match at {
        Some((stmt, within)) if within > 0 && within <= stmt.text.len() => {
            line_col(&file.text, stmt.offset + within)
        }
        Some((stmt, _)) => (stmt.line, stmt.column),
        None => (1, 1),
    };
    let error = match error.as_db_error() {
        Some(db) => describe_db_error(db, None),
        None => error.to_string(),
    };
    MigrateError::Callback {
        script: file.script.clone(),
        line,
        column,
        error,
        outcome: outcome.to_string(),
    }
}

/// Runs the callbacks of `event` around a verb: `before` first, then the
/// verb; after it, `after` when it succeeded and `error_event` when it
/// failed (the verb's error is the one returned).
pub(crate) async fn around<T, F>(
    client: &Client,
    reset: &str,
    files: &MigrationSet,
    before: &str,
    after: &str,
    error_event: &str,
    verb: F,
) -> Result<T, MigrateError>
where
    F: std::future::Future<Output = Result<T, MigrateError>>,
{
    run(client, reset, files, before).await?;
    match verb.await {
        Ok(t) => {
            run(client, reset, files, after).await?;
            Ok(t)
        }
        Err(e) => {
            run(client, reset, files, error_event).await?;
            Err(e)
        }
    }
}
