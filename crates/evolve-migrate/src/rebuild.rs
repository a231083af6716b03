//! Rebuilding the views and materialized views that an ALTER would break.
//!
//! PostgreSQL refuses `ALTER COLUMN ... TYPE` and `DROP COLUMN` on a column
//! that a view reads, even when nothing would be rewritten. Inside the
//! file's one transaction evolve:
//!
//! 1. captures each dependent completely from the catalogs, with an empty
//!    `search_path` so every name comes out qualified: definition,
//!    reloptions, owner, tablespace, populated state, indexes, comments on
//!    it and its columns, table and column privileges (from `relacl` and
//!    `attacl`), rules other than `_RETURN`, triggers;
//! 2. drops the dependents top-down (deepest first), never with CASCADE, so
//!    anything not captured makes the drop fail and the file roll back;
//! 3. runs the file's statements;
//! 4. recreates the dependents bottom-up, materialized views `WITH NO DATA`
//!    (or `WITH DATA` under `-- evolve:populate-in-transaction`), and
//!    restores every attachment.
//!
//! After the commit, outside the transaction, the materialized views that
//! were populated are refreshed bottom-up (each layer reads fresh input)
//! and analysed. The base table's lock is held only for the transaction.

use evolve_core::migration::blocked_alters;
use evolve_pg::{Client, QualifiedName, quote_ident};
use serde::Serialize;

use crate::MigrateError;
use crate::deps::{DependentKind, deps};
use crate::files::MigrationFile;

/// One captured view or materialized view and everything to recreate it.
#[derive(Clone, Debug, Serialize)]
pub struct Captured {
    pub name: String,
    pub kind: DependentKind,
    pub materialized: bool,
    pub depth: u32,
    pub populated: bool,
    #[serde(skip)]
    drop_sql: String,
    /// CREATE, OWNER, indexes, comments, grants, rules, triggers, in order.
    #[serde(skip)]
    create_sql: Vec<String>,
    #[serde(skip)]
    qualified: String,
    /// Its key in `evolve_refresh_log`: `schema.name`, a part quoted where
    /// it must be ([`evolve_pg::QualifiedName::shown`]), as `evolve
    /// refresh` keys it.
    #[serde(skip)]
    pub(crate) log_name: String,
}

impl Captured {
    fn is_view(&self) -> bool {
        matches!(
            self.kind,
            DependentKind::View | DependentKind::MaterializedView
        )
    }

    /// `REFRESH MATERIALIZED VIEW` statement.
    pub fn refresh_sql(&self) -> String {
        format!("REFRESH MATERIALIZED VIEW {}", self.qualified)
    }

    pub fn analyze_sql(&self) -> String {
        format!("ANALYZE {}", self.qualified)
    }
}

/// What a file's ALTERs need rebuilt, bottom-up (lowest depth first).
#[derive(Clone, Debug, Default)]
pub struct RebuildPlan {
    pub dependents: Vec<Captured>,
}

impl RebuildPlan {
    /// Drops: policies and triggers first (their expressions may read a
    /// view or call a function), then views and materialized views,
    /// deepest first, then functions (a view may call one).
    pub fn drops(&self) -> impl Iterator<Item = (&Captured, &str)> {
        let on_tables = self.of(|k| matches!(k, DependentKind::Policy | DependentKind::Trigger));
        let views = self.dependents.iter().rev().filter(|c| c.is_view());
        let functions = self.of(|k| k == DependentKind::Function);
        on_tables
            .chain(views)
            .chain(functions)
            .map(|c| (c, c.drop_sql.as_str()))
    }

    /// Creation statements, the drops' order reversed: functions, views and
    /// materialized views bottom-up, then policies and triggers.
    pub fn creates(&self) -> impl Iterator<Item = (&Captured, &str)> {
        let functions = self.of(|k| k == DependentKind::Function);
        let views = self.dependents.iter().filter(|c| c.is_view());
        let on_tables = self.of(|k| matches!(k, DependentKind::Policy | DependentKind::Trigger));
        functions
            .chain(views)
            .chain(on_tables)
            .flat_map(|c| c.create_sql.iter().map(move |s| (c, s.as_str())))
    }

    fn of(&self, kind: impl Fn(DependentKind) -> bool) -> impl Iterator<Item = &Captured> {
        self.dependents.iter().filter(move |c| kind(c.kind))
    }

    /// Materialized views to refresh after the commit, bottom-up.
    pub fn to_refresh(&self) -> impl Iterator<Item = &Captured> {
        self.dependents
            .iter()
            .filter(|c| c.materialized && c.populated)
    }
}

/// Finds what the file's statements would be refused for and captures it.
/// Runs inside the file's transaction, before its statements.
pub async fn plan(
    client: &Client,
    file: &MigrationFile,
    populate_in_transaction: bool,
) -> Result<RebuildPlan, MigrateError> {
    plan_with(client, file, populate_in_transaction, Vec::new()).await
}

/// The columns behind a refusal PostgreSQL reported at run time (SQLSTATE
/// 0A000, "cannot alter type of a column used by a view or rule", from an
/// ALTER the parser could not see, such as one inside a DO block): its
/// DETAIL names one view and the column; every table column of that name
/// the view reads is a target.
pub async fn targets_from_refusal(
    client: &Client,
    error: &tokio_postgres::Error,
) -> Result<Vec<String>, MigrateError> {
    let Some(db) = error.as_db_error() else {
        return Ok(Vec::new());
    };
    if db.code() != &tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED
        || !db
            .message()
            .starts_with("cannot alter type of a column used by a view or rule")
    {
        return Ok(Vec::new());
    }
    // rule _RETURN on [materialized ]view NAME depends on column "COL"
    let Some(detail) = db.detail() else {
        return Ok(Vec::new());
    };
    let Some((head, column)) = detail.split_once(" depends on column ") else {
        return Ok(Vec::new());
    };
    let view = head.rsplit(' ').next().unwrap_or_default();
    let column = column.trim().trim_matches('"');
    let rows = client
        .query(
            "SELECT DISTINCT format('%I.%I.%I', n.nspname, c.relname, a.attname)
             FROM pg_class v
             JOIN pg_rewrite r ON r.ev_class = v.oid
             JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                             AND d.refclassid = 'pg_class'::regclass
             JOIN pg_class c ON c.oid = d.refobjid AND c.relkind IN ('r', 'p')
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.refobjsubid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE v.relname = $1 AND a.attname = $2",
            &[&view, &column],
        )
        .await?;
    rows.iter()
        .map(|r| r.try_get(0).map_err(MigrateError::from))
        .collect()
}

/// [`plan`] with extra targets (`schema.table.column`, quoted).
pub async fn plan_with(
    client: &Client,
    file: &MigrationFile,
    populate_in_transaction: bool,
    extra_targets: Vec<String>,
) -> Result<RebuildPlan, MigrateError> {
    let mut targets = extra_targets;
    for stmt in &file.parsed.statements {
        for b in blocked_alters(&stmt.text) {
            let target = match &b.schema {
                Some(s) => format!(
                    "{}.{}.{}",
                    quote_ident(s),
                    quote_ident(&b.table),
                    quote_ident(&b.column)
                ),
                None => format!("{}.{}", quote_ident(&b.table), quote_ident(&b.column)),
            };
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
    }
    plan_targets(client, &file.script, targets, populate_in_transaction).await
}

/// Captures the dependents of `targets` (`schema.table` or
/// `schema.table.column`, quoted), for a change that `script` names in
/// errors. Runs inside the transaction that will drop and recreate them.
/// A generated column that reads a target is refused: the change would
/// have to drop and re-add it, which this rebuild does not do.
pub async fn plan_targets(
    client: &Client,
    script: &str,
    targets: Vec<String>,
    populate_in_transaction: bool,
) -> Result<RebuildPlan, MigrateError> {
    plan_targets_inner(client, script, targets, populate_in_transaction, false).await
}

impl RebuildPlan {
    /// [`plan_targets`] for a change that puts a whole new table in the
    /// place of each target table (`evolve rewrite`'s swap), where the new
    /// table already has the target's own generated columns: those are
    /// left out of the plan rather than refused (the caller drops them
    /// with the old table). Only a generation expression that reads the
    /// target's columns directly is left out (a generation expression
    /// reads its own table's columns only, so it is the target's); a plain
    /// default, or anything found further down, is refused as
    /// [`plan_targets`] refuses it.
    pub async fn for_table_swap(
        client: &Client,
        script: &str,
        targets: Vec<String>,
        populate_in_transaction: bool,
    ) -> Result<RebuildPlan, MigrateError> {
        plan_targets_inner(client, script, targets, populate_in_transaction, true).await
    }
}

/// Whether the `pg_attrdef` entry `oid` is a generation expression (not a
/// plain default).
async fn is_generation_expression(client: &Client, oid: u32) -> Result<bool, MigrateError> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_attrdef d
                            JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                            WHERE d.oid = $1 AND a.attgenerated <> '')",
            &[&oid],
        )
        .await?
        .try_get(0)?)
}

async fn plan_targets_inner(
    client: &Client,
    script: &str,
    targets: Vec<String>,
    populate_in_transaction: bool,
    skip_own_generated: bool,
) -> Result<RebuildPlan, MigrateError> {
    if targets.is_empty() {
        return Ok(RebuildPlan::default());
    }
    // Each dependent once (by oid), at its deepest depth.
    let mut found: Vec<(String, u32, DependentKind, u32)> = Vec::new();
    for target in &targets {
        let report = match deps(client, target).await {
            Ok(r) => r,
            // A table or column the file itself creates first has no
            // dependents yet; PostgreSQL reports anything really wrong.
            Err(MigrateError::Usage(_)) => continue,
            Err(e) => return Err(e),
        };
        for d in report.dependents {
            match d.kind {
                DependentKind::View | DependentKind::MaterializedView => {
                    match found.iter_mut().find(|(_, _, _, oid)| *oid == d.oid) {
                        Some(existing) => existing.1 = existing.1.max(d.depth),
                        None => found.push((d.name, d.depth, d.kind, d.oid)),
                    }
                }
                DependentKind::Policy | DependentKind::Trigger | DependentKind::Function => {
                    if !found.iter().any(|(_, _, _, oid)| *oid == d.oid) {
                        found.push((d.name, d.depth, d.kind, d.oid));
                    }
                }
                // Depth 1: its expression reads the target table's columns,
                // and a generation expression reads only its own table's,
                // so the column belongs to the target (which the caller
                // replaces by a table that has it already).
                DependentKind::GeneratedColumn
                    if skip_own_generated
                        && d.depth == 1
                        && is_generation_expression(client, d.oid).await? => {}
                other => {
                    return Err(MigrateError::Script {
                        script: script.to_string(),
                        reason: format!(
                            "{} is used by {} {}, which evolve cannot rebuild yet; drop and recreate it in the migration around the change",
                            report.target,
                            other.as_str(),
                            d.name
                        ),
                    });
                }
            }
        }
    }
    found.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    // Capture with an empty search_path so every name comes out qualified.
    let saved: String = client
        .query_one("SELECT current_setting('search_path')", &[])
        .await?
        .try_get(0)?;
    client
        .batch_execute("SELECT set_config('search_path', '', true)")
        .await?;
    let mut dependents = Vec::new();
    for (name, depth, kind, oid) in found {
        dependents.push(match kind {
            DependentKind::Policy | DependentKind::Trigger | DependentKind::Function => {
                capture_other(client, &name, oid, depth, kind).await?
            }
            _ => capture(client, &name, oid, depth, kind, populate_in_transaction).await?,
        });
    }
    client
        .query_one("SELECT set_config('search_path', $1, true)", &[&saved])
        .await?;
    Ok(RebuildPlan { dependents })
}

async fn capture(
    client: &Client,
    name: &str,
    oid: u32,
    depth: u32,
    kind: DependentKind,
    populate_in_transaction: bool,
) -> Result<Captured, MigrateError> {
    // By oid: a schema or view name may itself contain a dot.
    let names = client
        .query_one(
            "SELECT n.nspname::text, c.relname::text FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    let (schema, rel): (String, String) = (names.try_get(0)?, names.try_get(1)?);
    let (schema, rel) = (schema.as_str(), rel.as_str());
    let row = client
        .query_one(
            "SELECT c.oid, pg_get_viewdef(c.oid), coalesce(c.reloptions::text[], '{}'),
                    pg_get_userbyid(c.relowner)::text, t.spcname::text, c.relispopulated,
                    array(SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
                          WHERE i.indrelid = c.oid ORDER BY i.indexrelid),
                    array(SELECT format('COMMENT ON %s %s IS %L',
                                        CASE c.relkind WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'VIEW' END,
                                        $3::text, d.description)
                          FROM pg_description d
                          WHERE d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0),
                    array(SELECT format('COMMENT ON COLUMN %s.%I IS %L', $3::text, a.attname, d.description)
                          FROM pg_description d JOIN pg_attribute a
                            ON a.attrelid = c.oid AND a.attnum = d.objsubid
                          WHERE d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid > 0
                          ORDER BY a.attnum),
                    array(SELECT format('GRANT %s ON %s TO %s%s', x.privilege_type, $3::text,
                                        CASE WHEN x.grantee = 0 THEN 'PUBLIC'
                                             ELSE quote_ident(pg_get_userbyid(x.grantee)) END,
                                        CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
                          FROM aclexplode(c.relacl) x WHERE x.grantee <> c.relowner),
                    array(SELECT format('GRANT %s (%I) ON %s TO %s%s', x.privilege_type, a.attname, $3::text,
                                        CASE WHEN x.grantee = 0 THEN 'PUBLIC'
                                             ELSE quote_ident(pg_get_userbyid(x.grantee)) END,
                                        CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
                          FROM pg_attribute a, aclexplode(a.attacl) x
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND a.attacl IS NOT NULL
                          ORDER BY a.attnum),
                    array(SELECT pg_get_ruledef(r.oid) FROM pg_rewrite r
                          WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN' ORDER BY r.rulename),
                    array(SELECT pg_get_triggerdef(g.oid) FROM pg_trigger g
                          WHERE g.tgrelid = c.oid AND NOT g.tgisinternal ORDER BY g.tgname)
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &rel, &QualifiedName::new(schema, rel).to_string()],
        )
        .await?;
    let qualified = QualifiedName::new(schema, rel).to_string();
    let materialized = kind == DependentKind::MaterializedView;
    let definition: String = row.try_get(1)?;
    let definition = definition.trim().trim_end_matches(';').to_string();
    let reloptions: Vec<String> = row.try_get(2)?;
    let owner: String = row.try_get(3)?;
    let tablespace: Option<String> = row.try_get(4)?;
    let populated: bool = row.try_get(5)?;
    let with = if reloptions.is_empty() {
        String::new()
    } else {
        format!(" WITH ({})", reloptions.join(", "))
    };
    let object = if materialized {
        "MATERIALIZED VIEW"
    } else {
        "VIEW"
    };
    let mut create_sql = Vec::new();
    if materialized {
        let space = tablespace
            .map(|t| format!(" TABLESPACE {}", quote_ident(&t)))
            .unwrap_or_default();
        let data = if populate_in_transaction && populated {
            "WITH DATA"
        } else {
            "WITH NO DATA"
        };
        create_sql.push(format!(
            "CREATE MATERIALIZED VIEW {qualified}{with}{space} AS {definition} {data}"
        ));
    } else {
        create_sql.push(format!("CREATE VIEW {qualified}{with} AS {definition}"));
    }
    create_sql.push(format!(
        "ALTER {object} {qualified} OWNER TO {}",
        quote_ident(&owner)
    ));
    for i in [6, 7, 8, 9, 10, 11, 12] {
        let stmts: Vec<String> = row.try_get(i)?;
        create_sql.extend(stmts);
    }
    Ok(Captured {
        name: name.to_string(),
        kind,
        materialized,
        depth,
        populated: populated && !populate_in_transaction,
        drop_sql: format!("DROP {object} {qualified}"),
        create_sql,
        qualified,
        log_name: evolve_pg::QualifiedName::new(schema, rel).shown(),
    })
}

/// A row-level security policy, a trigger (its WHEN clause or `UPDATE OF`
/// list reads the column) or a function with a SQL-standard body (`BEGIN
/// ATOMIC`), captured with an empty search_path: its full definition, its
/// comment, for a trigger whether it is enabled, for a function its owner
/// and EXECUTE privileges.
async fn capture_other(
    client: &Client,
    name: &str,
    oid: u32,
    depth: u32,
    kind: DependentKind,
) -> Result<Captured, MigrateError> {
    let sql = match kind {
        DependentKind::Policy => {
            "SELECT format('DROP POLICY %I ON %s', p.polname, p.polrelid::regclass),
                    array[format('CREATE POLICY %I ON %s AS %s FOR %s TO %s%s%s',
                        p.polname, p.polrelid::regclass,
                        CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
                        CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT'
                                      WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
                        CASE WHEN p.polroles = '{0}' THEN 'PUBLIC'
                             ELSE (SELECT string_agg(quote_ident(r.rolname), ', ' ORDER BY r.rolname)
                                   FROM pg_roles r WHERE r.oid = ANY (p.polroles)) END,
                        coalesce(' USING (' || pg_get_expr(p.polqual, p.polrelid) || ')', ''),
                        coalesce(' WITH CHECK (' || pg_get_expr(p.polwithcheck, p.polrelid) || ')', ''))]
                    || array(SELECT format('COMMENT ON POLICY %I ON %s IS %L', p.polname,
                                           p.polrelid::regclass, d.description)
                             FROM pg_description d
                             WHERE d.objoid = p.oid AND d.classoid = 'pg_policy'::regclass)
             FROM pg_policy p WHERE p.oid = $1"
        }
        DependentKind::Function => {
            "SELECT format('DROP %s %s', x.kind, p.oid::regprocedure),
                    array[pg_get_functiondef(p.oid),
                          format('ALTER %s %s OWNER TO %I', x.kind, p.oid::regprocedure,
                                 pg_get_userbyid(p.proowner))]
                    || array(SELECT format('COMMENT ON %s %s IS %L', x.kind, p.oid::regprocedure,
                                           d.description)
                             FROM pg_description d
                             WHERE d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass)
                    || array(SELECT format('REVOKE EXECUTE ON %s %s FROM PUBLIC', x.kind,
                                           p.oid::regprocedure)
                             WHERE p.proacl IS NOT NULL
                               AND NOT EXISTS (SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0))
                    || array(SELECT format('GRANT EXECUTE ON %s %s TO %s%s', x.kind, p.oid::regprocedure,
                                           CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                                ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                                           CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
                             FROM aclexplode(p.proacl) a WHERE a.grantee <> p.proowner)
             FROM pg_proc p,
                  LATERAL (SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END AS kind) x
             WHERE p.oid = $1"
        }
        _ => {
            "SELECT format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass),
                    array[pg_get_triggerdef(t.oid)]
                    || array(SELECT format('COMMENT ON TRIGGER %I ON %s IS %L', t.tgname,
                                           t.tgrelid::regclass, d.description)
                             FROM pg_description d
                             WHERE d.objoid = t.oid AND d.classoid = 'pg_trigger'::regclass)
                    || array(SELECT format('ALTER TABLE %s %s TRIGGER %I', t.tgrelid::regclass,
                                           CASE t.tgenabled WHEN 'D' THEN 'DISABLE'
                                                            WHEN 'R' THEN 'ENABLE REPLICA'
                                                            ELSE 'ENABLE ALWAYS' END,
                                           t.tgname)
                             WHERE t.tgenabled <> 'O')
             FROM pg_trigger t WHERE t.oid = $1"
        }
    };
    let row = client.query_one(sql, &[&oid]).await?;
    Ok(Captured {
        name: name.to_string(),
        kind,
        materialized: false,
        depth,
        populated: false,
        drop_sql: row.try_get(0)?,
        create_sql: row.try_get(1)?,
        qualified: String::new(),
        log_name: String::new(),
    })
}

/// For `--dry-run`: each matview to be refreshed after the commit, with its
/// size and the duration of its last refresh through `evolve refresh` (when
/// `evolve_refresh_log` has one), so the unreadable window can be judged.
/// Rows are counted when the matview is small (8 MB); larger ones get the
/// planner's estimate, or none when it was never analysed.
/// Matviews up to this size (main fork) are counted with `count(*)` by
/// the dry run rather than estimated.
const COUNT_ROWS_UP_TO: i64 = 8 << 20;

pub async fn estimates(
    client: &Client,
    plan: &RebuildPlan,
) -> Result<Vec<crate::RefreshEstimate>, MigrateError> {
    let log_exists: bool = client
        .query_one("SELECT to_regclass('evolve_refresh_log') IS NOT NULL", &[])
        .await?
        .try_get(0)?;
    let mut out = Vec::new();
    for m in plan.to_refresh() {
        let row = client
            .query_one(
                "SELECT c.reltuples::float8, pg_total_relation_size(c.oid),
                        pg_relation_size(c.oid), c.relispopulated
                 FROM pg_class c WHERE c.oid = to_regclass($1)",
                &[&m.qualified],
            )
            .await?;
        let reltuples: f64 = row.try_get(0)?;
        let heap_bytes: i64 = row.try_get(2)?;
        let populated: bool = row.try_get(3)?;
        let (rows, rows_counted) = if !populated {
            (Some(0), true)
        } else if heap_bytes <= COUNT_ROWS_UP_TO {
            let n: i64 = client
                .query_one(&format!("SELECT count(*) FROM {}", m.qualified), &[])
                .await?
                .try_get(0)?;
            (Some(n), true)
        } else if reltuples > 0.0 {
            (Some(reltuples as i64), false)
        } else {
            (None, false)
        };
        let last_refresh_ms = if log_exists {
            client
                .query_opt(
                    "SELECT duration_ms::int8 FROM evolve_refresh_log
                     WHERE matview = $1 ORDER BY finished_at DESC LIMIT 1",
                    &[&m.log_name],
                )
                .await?
                .map(|r| r.try_get(0))
                .transpose()?
        } else {
            None
        };
        out.push(crate::RefreshEstimate {
            name: m.name.clone(),
            rows,
            rows_counted,
            bytes: row.try_get(1)?,
            last_refresh_ms,
        });
    }
    Ok(out)
}
