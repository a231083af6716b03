//! What `apply` does before it migrates, as Flyway's migrate does it:
//! create the configured schemas that are missing (and record that in the
//! history with a `SCHEMA` row), and under `baselineOnMigrate` baseline a
//! database whose history table does not exist yet but whose schemas are
//! not empty. Callers hold the migration lock.

use evolve_core::migration::Version;
use evolve_pg::{Client, quote_ident};

use crate::history::{BASELINE_DESCRIPTION, TYPE_BASELINE};
use crate::{ApplyOptions, Event, History, HistoryRow, MigrateError, Options, callbacks};

/// The description of Flyway's schema creation row.
pub const SCHEMA_DESCRIPTION: &str = "<< Flyway Schema Creation >>";

/// Creates the schemas of `opts.schemas` that do not exist (unless
/// `create_schemas` is off); returns those it created.
pub(crate) async fn create_schemas(
    opts: &Options,
    client: &Client,
    history: &History,
) -> Result<Vec<String>, MigrateError> {
    if !opts.create_schemas || opts.schemas.is_empty() {
        return Ok(Vec::new());
    }
    let existing: Vec<String> = client
        .query(
            "SELECT nspname::text FROM pg_namespace WHERE nspname = ANY($1)",
            &[&opts.schemas],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let missing: Vec<String> = opts
        .schemas
        .iter()
        .filter(|s| !existing.contains(s))
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(missing);
    }
    let mut sql = String::from("BEGIN;");
    for s in &missing {
        sql.push_str(&format!(" CREATE SCHEMA {};", quote_ident(s)));
    }
    sql.push_str(" COMMIT;");
    if let Err(e) = client.batch_execute(&sql).await {
        let _ = client.batch_execute("ROLLBACK").await;
        let err = MigrateError::from(e);
        return Err(MigrateError::History {
            table: history.table.plain(),
            reason: format!(
                "schemas {} (Flyway's schemas) do not exist and cannot be created: {err}; create them, or set createSchemas = false",
                missing.join(", ")
            ),
        });
    }
    Ok(missing)
}

/// Flyway's record of the schemas it created: a `SCHEMA` row, at rank 0
/// in an empty history, its script the schemas quoted and joined by `,`.
pub(crate) async fn record_schemas(
    opts: &Options,
    client: &Client,
    history: &History,
    created: &[String],
    on_event: &mut dyn FnMut(Event),
) -> Result<(), MigrateError> {
    let script = created
        .iter()
        .map(|s| format!("\"{}\"", s.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(",");
    client
        .execute(
            &format!(
                "INSERT INTO {t} (installed_rank, version, description, type, script, checksum,
                                  installed_by, execution_time, success)
                 SELECT coalesce(max(installed_rank) + 1, 0), NULL, $1, 'SCHEMA', $2, NULL,
                        coalesce($3, current_user), 0, true
                 FROM {t}",
                t = history.table
            ),
            &[&SCHEMA_DESCRIPTION, &script, &opts.installed_by],
        )
        .await?;
    on_event(Event::SchemasCreated {
        table: history.table.plain(),
        schemas: created.to_vec(),
    });
    Ok(())
}

/// The schemas baselineOnMigrate looks at: Flyway's schemas, else the
/// history table's.
fn schemas_to_check(opts: &Options, history: &History) -> Vec<String> {
    if opts.schemas.is_empty() {
        vec![history.table.schema.clone()]
    } else {
        opts.schemas.clone()
    }
}

/// evolve's own state tables, which other verbs (`evolve refresh`,
/// `evolve backfill`, `evolve rewrite`) create where they run: not the
/// user's schema, so they do not make it non-empty.
const STATE_TABLES: [&str; 3] = [
    "evolve_refresh_log",
    "evolve_backfill_jobs",
    "evolve_rewrites",
];

/// Those of `schemas` that hold something, by Flyway's test: a table,
/// view, sequence, type or function that no extension owns (evolve's
/// companion tables of the history and its [`STATE_TABLES`] do not count).
async fn non_empty(
    client: &Client,
    schemas: &[String],
    history: &History,
) -> Result<Vec<String>, MigrateError> {
    let companions = vec![
        history.progress.name.clone(),
        history.rebuilt.name.clone(),
        history.pipeline.name.clone(),
    ];
    let own: Vec<String> = STATE_TABLES.iter().map(|t| t.to_string()).collect();
    let rows = client
        .query(
            "SELECT n.nspname::text FROM pg_namespace n
             WHERE n.nspname = ANY($1) AND EXISTS (
                 SELECT c.oid FROM pg_class c
                 LEFT JOIN pg_depend d ON d.objid = c.oid AND d.deptype = 'e'
                 WHERE c.relnamespace = n.oid AND d.objid IS NULL
                   AND c.relkind IN ('r', 'v', 'S', 't')
                   AND NOT (n.nspname = $2 AND c.relname::text = ANY($3))
                   AND NOT c.relname::text = ANY($4)
               UNION ALL
                 SELECT t.oid FROM pg_type t
                 LEFT JOIN pg_depend d ON d.objid = t.oid AND d.deptype = 'e'
                 WHERE t.typnamespace = n.oid AND d.objid IS NULL
                   AND t.typcategory NOT IN ('A', 'C')
               UNION ALL
                 SELECT p.oid FROM pg_proc p
                 LEFT JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
                 WHERE p.pronamespace = n.oid AND d.objid IS NULL
             )",
            &[&schemas, &history.table.schema, &companions, &own],
        )
        .await?;
    let found: Vec<String> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    // In the order they are configured.
    Ok(schemas
        .iter()
        .filter(|s| found.contains(s))
        .cloned()
        .collect())
}

/// Whether baselineOnMigrate would baseline now: no history table, and a
/// schema that is not empty.
pub(crate) async fn baseline_due(
    opts: &Options,
    client: &Client,
    history: &History,
) -> Result<bool, MigrateError> {
    if history.exists(client).await? {
        return Ok(false);
    }
    let schemas = schemas_to_check(opts, history);
    Ok(!non_empty(client, &schemas, history).await?.is_empty())
}

/// Flyway's guard before migrating (see
/// [`ApplyOptions::require_history_or_empty`]): no history table, no
/// baselineOnMigrate, and a schema holding something is refused, naming
/// the schemas and the ways out.
pub(crate) async fn refuse_non_empty(
    opts: &Options,
    apply_opts: &ApplyOptions,
    client: &Client,
    history: &History,
) -> Result<(), MigrateError> {
    if !apply_opts.require_history_or_empty
        || apply_opts.baseline_on_migrate.is_some()
        || history.exists(client).await?
    {
        return Ok(());
    }
    let schemas = schemas_to_check(opts, history);
    let non_empty = non_empty(client, &schemas, history).await?;
    if non_empty.is_empty() {
        return Ok(());
    }
    Err(MigrateError::History {
        table: history.table.plain(),
        reason: format!(
            "does not exist, but schema{} {} already hold{} tables, views, types or functions (Flyway refuses this too: \"Found non-empty schema(s) but no schema history table\"), and running the files over them could create what is there again; run 'evolve migrate baseline --version V' first (files at or below V never run; --version 0 runs every file), set baselineOnMigrate = true, or pass --history-table if the history lives elsewhere",
            if non_empty.len() == 1 { "" } else { "s" },
            non_empty.join(", "),
            if non_empty.len() == 1 { "s" } else { "" },
        ),
    })
}

/// The baseline row baselineOnMigrate writes, as `--dry-run` assumes it.
pub(crate) fn baseline_row(version: &Version, apply_opts: &ApplyOptions) -> HistoryRow {
    let description = apply_opts
        .baseline_description
        .clone()
        .unwrap_or_else(|| BASELINE_DESCRIPTION.to_string());
    HistoryRow {
        installed_rank: 1,
        version: Some(version.as_str().to_string()),
        description: description.clone(),
        kind: TYPE_BASELINE.to_string(),
        script: description,
        checksum: None,
        installed_by: String::new(),
        installed_on: String::new(),
        execution_time: 0,
        success: true,
    }
}

/// Before `apply` migrates: the missing schemas created (and recorded),
/// the baseline of baselineOnMigrate (with its callbacks), the history
/// table created.
pub(crate) async fn prepare(
    opts: &Options,
    apply_opts: &ApplyOptions,
    client: &Client,
    reset: &str,
    history: &History,
    files: &crate::MigrationSet,
    on_event: &mut dyn FnMut(Event),
) -> Result<(), MigrateError> {
    let created = create_schemas(opts, client, history).await?;
    if created.is_empty() {
        // Created schemas come with the history table, as in Flyway.
        refuse_non_empty(opts, apply_opts, client, history).await?;
    } else {
        if history.ensure(client).await? {
            on_event(Event::HistoryCreated {
                table: history.table.plain(),
            });
        }
        record_schemas(opts, client, history, &created, on_event).await?;
    }
    if let Some(version) = &apply_opts.baseline_on_migrate
        && !history.exists(client).await?
    {
        let schemas = schemas_to_check(opts, history);
        let non_empty = non_empty(client, &schemas, history).await?;
        if !non_empty.is_empty() {
            let row = baseline_row(version, apply_opts);
            callbacks::around(
                client,
                reset,
                files,
                "beforeBaseline",
                "afterBaseline",
                "afterBaselineError",
                async {
                    if history.ensure(client).await? {
                        on_event(Event::HistoryCreated {
                            table: history.table.plain(),
                        });
                    }
                    client
                        .query_one(
                            &history.insert_sql(),
                            &[
                                &row.version,
                                &row.description,
                                &row.kind,
                                &row.script,
                                &None::<i32>,
                                &opts.installed_by,
                                &0i32,
                                &true,
                            ],
                        )
                        .await?;
                    Ok(())
                },
            )
            .await?;
            on_event(Event::Baselined {
                table: history.table.plain(),
                version: version.as_str().to_string(),
                non_empty_schemas: non_empty,
            });
        }
    }
    if history.ensure(client).await? {
        on_event(Event::HistoryCreated {
            table: history.table.plain(),
        });
    }
    Ok(())
}
