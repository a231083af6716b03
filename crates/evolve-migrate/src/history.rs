//! The history table, in Flyway's shape so that an existing
//! `flyway_schema_history` can be adopted and continued.
//!
//! ```sql
//! installed_rank INT PRIMARY KEY, version VARCHAR(50), description VARCHAR(200) NOT NULL,
//! type VARCHAR(20) NOT NULL, script VARCHAR(1000) NOT NULL, checksum INT,
//! installed_by VARCHAR(100) NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT now(),
//! execution_time INT NOT NULL, success BOOLEAN NOT NULL
//! ```
//!
//! Files marked `-- evolve:no-transaction` also keep a row in a companion
//! table `<history>_progress` while they run: how many statements are done,
//! so that a failed or interrupted file resumes where it stopped. A second
//! companion, `<history>_rebuilt`, records the views and materialized views
//! a migration dropped and recreated around its ALTERs, in the same
//! transaction as its history row.

use evolve_pg::{QualifiedName, quote_ident};
use serde::Serialize;
use tokio_postgres::Client;

use crate::MigrateError;

/// Flyway's `type` for SQL migrations, versioned and repeatable alike.
pub const TYPE_SQL: &str = "SQL";
pub const TYPE_BASELINE: &str = "BASELINE";
/// Flyway's type of a baseline migration (`B<version>__...`) that ran.
pub const TYPE_SQL_BASELINE: &str = "SQL_BASELINE";
/// Written by `repair` for an applied migration whose file was removed.
pub const TYPE_DELETE: &str = "DELETE";
/// Flyway records schema creation with this type; it is not a migration.
pub const TYPE_SCHEMA: &str = "SCHEMA";

/// Whether a history row records one of Flyway's Java-based migrations
/// (`JDBC`, `SPRING_JDBC`, and `JAVA`/`SPRING` of older Flyway versions),
/// which evolve cannot run.
pub fn is_java_migration(kind: &str) -> bool {
    matches!(
        kind,
        "JDBC" | "SPRING_JDBC" | "JAVA" | "SPRING" | "JDBC_STATE_SCRIPT"
    )
}

pub const BASELINE_DESCRIPTION: &str = "<< Flyway Baseline >>";

/// One row of the history table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    pub installed_rank: i32,
    pub version: Option<String>,
    pub description: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub script: String,
    pub checksum: Option<i32>,
    pub installed_by: String,
    /// `YYYY-MM-DDTHH:MM:SS.mmm`, in the server's time zone, as stored.
    pub installed_on: String,
    pub execution_time: i32,
    pub success: bool,
}

/// Progress of a no-transaction file that has not finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub installed_rank: i32,
    pub statements_done: i32,
    /// Checksum of the statements done, so an edit to them is noticed.
    pub done_checksum: i32,
}

/// The widths of the history's text columns, in characters (`None`: no
/// limit).
#[derive(Clone, Copy, Debug)]
pub struct Widths {
    pub version: Option<usize>,
    pub description: Option<usize>,
    pub script: Option<usize>,
}

/// A history table and its progress companion.
#[derive(Clone, Debug)]
pub struct History {
    pub table: QualifiedName,
    pub progress: QualifiedName,
    /// `<history>_rebuilt`: the views and materialized views each migration
    /// dropped and recreated around its ALTERs.
    pub rebuilt: QualifiedName,
    /// `<history>_pipeline`: what `apply --pipeline` had the pipeline do
    /// around each migration (created by the first such run).
    pub pipeline: QualifiedName,
}

const COLUMNS: [(&str, &[&str]); 10] = [
    ("installed_rank", &["integer", "bigint"]),
    ("version", &["character varying", "text"]),
    ("description", &["character varying", "text"]),
    ("type", &["character varying", "text"]),
    ("script", &["character varying", "text"]),
    ("checksum", &["integer", "bigint"]),
    ("installed_by", &["character varying", "text"]),
    (
        "installed_on",
        &["timestamp without time zone", "timestamp with time zone"],
    ),
    ("execution_time", &["integer", "bigint"]),
    ("success", &["boolean"]),
];

impl History {
    /// Resolves `--history-table` (`name` or `schema.name`); a bare name
    /// lives in the connection's current schema.
    pub async fn resolve(
        client: &Client,
        schema: Option<&str>,
        name: &str,
    ) -> Result<History, MigrateError> {
        let schema = match schema {
            Some(s) => s.to_string(),
            None => {
                let row = client.query_one("SELECT current_schema()", &[]).await?;
                row.try_get::<_, Option<String>>(0)?.ok_or_else(|| MigrateError::History {
                    table: name.to_string(),
                    reason: "the connection has no current schema (search_path is empty); name the schema in --history-table".into(),
                })?
            }
        };
        Ok(History {
            table: QualifiedName::new(schema.clone(), name),
            progress: QualifiedName::new(schema.clone(), format!("{name}_progress")),
            rebuilt: QualifiedName::new(schema.clone(), format!("{name}_rebuilt")),
            pipeline: QualifiedName::new(schema, format!("{name}_pipeline")),
        })
    }

    /// Whether the table exists, and if it does, that it has Flyway's
    /// columns with compatible types.
    pub async fn exists(&self, client: &Client) -> Result<bool, MigrateError> {
        let rows = client
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, NULL), a.attnotnull, c.relkind::text,
                        a.atthasdef
                 FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&self.table.schema, &self.table.name],
            )
            .await?;
        if rows.is_empty() {
            return Ok(false);
        }
        let relkind: String = rows[0].try_get(3)?;
        if relkind != "r" && relkind != "p" {
            return Err(self.shape(format!("it is not a table (relkind {relkind})")));
        }
        self.owned(client, &self.table).await?;
        let mut present = std::collections::HashMap::new();
        for r in &rows {
            if let Some(name) = r.try_get::<_, Option<String>>(0)? {
                let ty: String = r.try_get(1)?;
                let not_null: bool = r.try_get(2)?;
                let has_default: bool = r.try_get(4)?;
                // A column evolve does not write that must be written: the
                // history of another Flyway version (version_rank of
                // Flyway 4 and older), whose rows evolve cannot add.
                if not_null && !has_default && !COLUMNS.iter().any(|(c, _)| *c == name) {
                    let reason = if name == "version_rank" {
                        "has column version_rank (NOT NULL), which the history of Flyway 4 and older has and evolve cannot fill; upgrade the table by running Flyway 5 or later against it once, then run evolve again".to_string()
                    } else {
                        format!(
                            "has column {name} (NOT NULL, no default), which neither Flyway nor evolve writes; drop it or give it a default, or choose another table with --history-table"
                        )
                    };
                    return Err(MigrateError::History {
                        table: self.table.plain(),
                        reason,
                    });
                }
                present.insert(name, ty);
            }
        }
        for (col, types) in COLUMNS {
            match present.get(col) {
                None => return Err(self.shape(format!("column {col} is missing"))),
                Some(ty) if !types.contains(&ty.as_str()) => {
                    return Err(
                        self.shape(format!("column {col} has type {ty}, expected {}", types[0]))
                    );
                }
                Some(_) => {}
            }
        }
        Ok(true)
    }

    fn shape(&self, reason: String) -> MigrateError {
        MigrateError::HistoryShape {
            table: self.table.plain(),
            reason,
        }
    }

    /// Creates the history table (and its schema) unless it exists. Returns
    /// true when it was created. Callers hold the migration lock.
    pub async fn ensure(&self, client: &Client) -> Result<bool, MigrateError> {
        let created = if self.exists(client).await? {
            false
        } else {
            let t = &self.table;
            // CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
            // when the schema exists, which a migrating role often lacks.
            let schema_exists: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                    &[&t.schema],
                )
                .await?
                .try_get(0)?;
            let create_schema = if schema_exists {
                String::new()
            } else {
                format!("CREATE SCHEMA {};", quote_ident(&t.schema))
            };
            let pk = quote_ident(&format!("{}_pk", t.name));
            let idx = quote_ident(&format!("{}_s_idx", t.name));
            client
                .batch_execute(&format!(
                    "BEGIN;
                     {create_schema}
                     CREATE TABLE {t} (
                         installed_rank INT NOT NULL,
                         version VARCHAR(50),
                         description VARCHAR(200) NOT NULL,
                         type VARCHAR(20) NOT NULL,
                         script VARCHAR(1000) NOT NULL,
                         checksum INT,
                         installed_by VARCHAR(100) NOT NULL,
                         installed_on TIMESTAMP NOT NULL DEFAULT now(),
                         execution_time INT NOT NULL,
                         success BOOLEAN NOT NULL,
                         CONSTRAINT {pk} PRIMARY KEY (installed_rank)
                     );
                     CREATE INDEX {idx} ON {t} (success);
                     COMMIT;"
                ))
                .await
                .map_err(|e| {
                    let err = MigrateError::from(e);
                    MigrateError::History {
                        table: t.plain(),
                        reason: format!("cannot be created: {err}"),
                    }
                })?;
            true
        };
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} (
                     installed_rank INT PRIMARY KEY,
                     statements_done INT NOT NULL,
                     done_checksum INT NOT NULL
                 );
                 CREATE TABLE IF NOT EXISTS {} (
                     installed_rank INT NOT NULL,
                     dependent TEXT NOT NULL,
                     kind TEXT NOT NULL,
                     depth INT NOT NULL
                 )",
                self.progress, self.rebuilt
            ))
            .await
            .map_err(|e| {
                let err = MigrateError::from(e);
                MigrateError::History {
                    table: self.progress.plain(),
                    reason: format!("cannot be created: {err}"),
                }
            })?;
        self.owned(client, &self.progress).await?;
        self.owned(client, &self.rebuilt).await?;
        Ok(created)
    }

    /// Refuses `table`, found in place, when its owner could run code with
    /// the connecting role's privileges through it
    /// ([`evolve_pg::check_state_table`]).
    async fn owned(&self, client: &Client, table: &QualifiedName) -> Result<(), MigrateError> {
        evolve_pg::check_state_table(client, &table.to_string())
            .await
            .map_err(|e| match e {
                evolve_pg::OwnerError::Database(e) => MigrateError::from(e),
                evolve_pg::OwnerError::Refused(reason) => MigrateError::History {
                    table: table.plain(),
                    reason,
                },
            })
    }

    /// Creates `<history>_pipeline` unless it exists: one row per table
    /// version a migration had the pipeline move off its columns, written
    /// in the migration's transaction (`state` `excluded`) and marked
    /// `done` once the steps after its commit are. Flyway's own table is
    /// left in its shape; Flyway ignores this one.
    pub async fn ensure_pipeline(&self, client: &Client) -> Result<(), MigrateError> {
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} (
                     installed_rank INT NOT NULL,
                     pipeline TEXT NOT NULL,
                     upstream TEXT NOT NULL,
                     columns TEXT NOT NULL,
                     views TEXT NOT NULL,
                     old_table TEXT NOT NULL,
                     excluding_table TEXT NOT NULL,
                     final_table TEXT NOT NULL,
                     state TEXT NOT NULL,
                     recorded_on TIMESTAMPTZ NOT NULL DEFAULT now()
                 )",
                self.pipeline
            ))
            .await
            .map_err(|e| {
                let err = MigrateError::from(e);
                MigrateError::History {
                    table: self.pipeline.plain(),
                    reason: format!("cannot be created: {err}"),
                }
            })?;
        self.owned(client, &self.pipeline).await
    }

    /// How many characters the `version`, `description` and `script`
    /// columns hold (`None`: no limit); an absent table has the widths
    /// evolve creates it with.
    pub async fn widths(&self, client: &Client) -> Result<Widths, MigrateError> {
        let rows = client
            .query(
                "SELECT a.attname::text,
                        CASE WHEN a.atttypid = 'varchar'::regtype AND a.atttypmod > 4
                             THEN a.atttypmod - 4 END
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
                &[&self.table.schema, &self.table.name],
            )
            .await?;
        if rows.is_empty() {
            return Ok(Widths {
                version: Some(50),
                description: Some(200),
                script: Some(1000),
            });
        }
        let mut widths = Widths {
            version: None,
            description: None,
            script: None,
        };
        for r in rows {
            let name: String = r.try_get(0)?;
            let width = r
                .try_get::<_, Option<i32>>(1)?
                .and_then(|w| usize::try_from(w).ok());
            match name.as_str() {
                "version" => widths.version = width,
                "description" => widths.description = width,
                "script" => widths.script = width,
                _ => {}
            }
        }
        Ok(widths)
    }

    /// All rows in installed order. An absent table reads as empty.
    pub async fn rows(&self, client: &Client) -> Result<Vec<HistoryRow>, MigrateError> {
        if !self.exists(client).await? {
            return Ok(Vec::new());
        }
        let rows = client
            .query(
                &format!(
                    "SELECT installed_rank::int4, version::text, description::text, type::text,
                            script::text, checksum::int4, installed_by::text,
                            to_char(installed_on, 'YYYY-MM-DD\"T\"HH24:MI:SS.MS'),
                            execution_time::int4, success
                     FROM {} ORDER BY installed_rank",
                    self.table
                ),
                &[],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                Ok(HistoryRow {
                    installed_rank: r.try_get(0)?,
                    version: r.try_get(1)?,
                    description: r.try_get(2)?,
                    kind: r.try_get(3)?,
                    script: r.try_get(4)?,
                    checksum: r.try_get(5)?,
                    installed_by: r.try_get(6)?,
                    installed_on: r.try_get(7)?,
                    execution_time: r.try_get(8)?,
                    success: r.try_get(9)?,
                })
            })
            .collect()
    }

    /// Progress rows of unfinished no-transaction files.
    pub async fn progress(&self, client: &Client) -> Result<Vec<Progress>, MigrateError> {
        let exists: bool = client
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&self.progress.to_string()],
            )
            .await?
            .try_get(0)?;
        if !exists {
            return Ok(Vec::new());
        }
        let rows = client
            .query(
                &format!(
                    "SELECT installed_rank, statements_done, done_checksum FROM {} ORDER BY 1",
                    self.progress
                ),
                &[],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                Ok(Progress {
                    installed_rank: r.try_get(0)?,
                    statements_done: r.try_get(1)?,
                    done_checksum: r.try_get(2)?,
                })
            })
            .collect()
    }

    /// The INSERT that records a migration; parameters: version,
    /// description, type, script, checksum, installed_by (NULL for
    /// current_user), execution_time, success. Returns the installed_rank.
    pub fn insert_sql(&self) -> String {
        format!(
            "INSERT INTO {t} (installed_rank, version, description, type, script, checksum,
                              installed_by, execution_time, success)
             SELECT coalesce(max(installed_rank), 0) + 1, $1, $2, $3, $4, $5,
                    coalesce($6, current_user), $7, $8
             FROM {t}
             RETURNING installed_rank",
            t = self.table
        )
    }
}
