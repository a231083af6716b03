//! `evolve plan`: for every statement of the pending migrations, the lock
//! it takes on each relation and for how long, whether it rewrites or
//! scans the table, how big that table is, which dependents `apply` will
//! rebuild, and the safer form when there is one.
//!
//! What a statement does is read by [`evolve_core::migration::effects`]
//! (pure); whether it rewrites is decided here from the live catalog:
//! `pg_cast` and the type's length-coercion support function for `ALTER
//! COLUMN ... TYPE`, `pg_proc.provolatile` of the functions a new column's
//! default calls, the session's `TimeZone` for timestamp <-> timestamptz,
//! a valid `CHECK (c IS NOT NULL)` for `SET NOT NULL`. Statements earlier
//! in the plan are followed: a table created earlier is new and empty, a
//! column added earlier exists, a check constraint added and validated
//! earlier counts, `SET TimeZone` changes the session of its file.
//!
//! The catalog is read in a fixed number of batched queries, whatever the
//! number of statements (names resolved with `to_regclass`/`to_regtype`
//! over bound arrays); dependents are captured by the rebuild machinery
//! (`rebuild::plan_targets`) only for the columns `pg_depend` says have
//! any.
//!
//! `--probe` ([`probe`]) checks the prediction on a scratch database made
//! from the target's schema only, read from the catalog without a lock on
//! any real relation ([`scratch`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use evolve_core::migration::effects::{self, Action, Effects, LockMode, RelKind, RelName};
use evolve_core::migration::{Script, Statement, StatementKind, line_col, parse_script};
use evolve_pg::{Client, quote_ident, shell_word};
use serde::Serialize;

use crate::plan::{Plan, StepOptions};
use crate::{MigrateError, Options};

mod probe;
mod scratch;

/// How long a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// Until the file's transaction commits.
    Transaction,
    /// For the statement only (no-transaction file, or a statement that
    /// runs outside a transaction).
    Statement,
}

/// One lock of a planned statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedLock {
    /// `schema.name`, unquoted.
    pub relation: String,
    pub mode: LockMode,
    pub held: Held,
    /// `relation` is a partition (at any level) of this partitioned table,
    /// which the statement names and reaches through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_of: Option<String>,
    /// The partition is locked only if the statement's rows reach it (an
    /// `INSERT` routes rows to it, an `UPDATE` or `DELETE` does not prune
    /// it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub if_reached: bool,
}

impl PlannedLock {
    fn new(relation: String, mode: LockMode, held: Held) -> PlannedLock {
        PlannedLock {
            relation,
            mode,
            held,
            partition_of: None,
            if_reached: false,
        }
    }
}

/// A dependent `apply` drops and recreates around the statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedRebuild {
    pub name: String,
    pub kind: String,
    pub depth: u32,
}

/// What the probe saw for one statement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProbeResult {
    /// The strongest lock the statement's backend held (or waited for) on
    /// each relation that existed before it, tables, views and
    /// materialized views only.
    pub locks: Vec<ProbeLock>,
    /// Whether any of those relations got a new relfilenode.
    pub rewrites: bool,
    /// Where prediction and probe differ; empty when they agree.
    pub disagreements: Vec<String>,
    /// The statement failed on the scratch copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeLock {
    pub relation: String,
    pub mode: LockMode,
}

/// One statement of the plan. This is the documented shape of `evolve
/// plan --format json` (see the README); fields may be added.
#[derive(Clone, Debug, Serialize)]
pub struct PlannedStatement {
    pub file: String,
    pub line: u32,
    pub sql: String,
    pub locks: Vec<PlannedLock>,
    pub rewrites: bool,
    pub scans: bool,
    /// The main table's `reltuples` (`None`: never analysed, or no table).
    pub table_rows: Option<i64>,
    /// The main table's `pg_total_relation_size`.
    pub table_bytes: Option<i64>,
    /// Order of magnitude of the time the lock is held: `instant`,
    /// `under a second`, `seconds`, `minutes`, `hours`.
    pub locked_time: String,
    pub rebuilds: Vec<PlannedRebuild>,
    pub advice: Vec<String>,
    /// Why: the facts the prediction rests on.
    pub notes: Vec<String>,
    /// `false` for statements whose locks evolve does not predict.
    pub analysed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeResult>,
    /// With a pipeline to ask ([`check_contracts`]): the consumer
    /// contracts the statement breaks, each `breaks: ...`, and what it
    /// cannot check, each `warning: ...`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contracts: Vec<String>,
    #[serde(skip)]
    pub(crate) no_transaction: bool,
    #[serde(skip)]
    pub(crate) rebuild_sql: (Vec<String>, Vec<String>),
    #[serde(skip)]
    pub(crate) concurrently: bool,
    #[serde(skip)]
    pub(crate) file_index: usize,
    /// The rows of a `COPY ... FROM STDIN`, which the probe sends.
    #[serde(skip)]
    pub(crate) copy_rows: Option<String>,
}

/// `evolve plan` output.
#[derive(Clone, Debug, Serialize)]
pub struct LockPlan {
    pub statements: Vec<PlannedStatement>,
    /// Whether `--probe` ran.
    pub probed: bool,
    /// Statements where the probe disagreed with the prediction.
    pub disagreements: usize,
    /// Statements that failed on the probe's scratch copy (they would
    /// fail `apply` too; the first is the cause, the later ones ran after
    /// it).
    pub probe_failures: usize,
}

/// Asks `coordinator` (a running pipeline) which consumers read the
/// columns each statement of `plan` drops, renames or retypes, and records
/// in [`PlannedStatement::contracts`] the contracts it would break (as
/// `migrate apply --pipeline` refuses them) unless the field is in
/// `allowed`; how many statements break one.
pub async fn check_contracts(
    opts: &Options,
    plan: &mut LockPlan,
    coordinator: &dyn crate::coordinate::Coordinator,
    allowed: &[String],
) -> Result<usize, MigrateError> {
    let c = crate::connect(opts).await?;
    let mut breaking = 0;
    for st in &mut plan.statements {
        let changes = crate::coordinate::column_changes(std::slice::from_ref(&st.sql))?;
        if changes.is_empty() {
            continue;
        }
        let request = crate::coordinate::request(&c.client, &changes).await?;
        if request.columns.is_empty() {
            continue;
        }
        let answer = coordinator.affected(&request).await.map_err(|e| {
            MigrateError::Usage(format!(
                "the pipeline at {} could not be asked about {}:{}: {e}",
                coordinator.target(),
                st.file,
                st.line
            ))
        })?;
        match crate::coordinate::contract_breaks(&changes, &answer, allowed) {
            Ok(warnings) => st
                .contracts
                .extend(warnings.into_iter().map(|w| format!("warning: {w}"))),
            Err(breaks) => {
                breaking += 1;
                st.contracts.push(format!("breaks: {breaks}"));
            }
        }
    }
    Ok(breaking)
}

/// A migration file to plan.
struct PlanFile {
    script: String,
    parsed: Script,
    skip: usize,
    /// Whether `apply` runs it outside a transaction.
    no_transaction: bool,
}

/// `evolve plan`: `files` (in that order) or, when empty, the migrations
/// `apply` would run now; `probe` checks each prediction on a scratch copy
/// of the schema.
pub async fn lock_plan(
    opts: &Options,
    files: &[PathBuf],
    probe: bool,
) -> Result<LockPlan, MigrateError> {
    let c = crate::connect(opts).await?;
    // Printing a table's CHECK constraints, indexes and views, and reading
    // its size, take ACCESS SHARE on it for a moment: behind another
    // session's ACCESS EXCLUSIVE the plan would wait as long as that
    // session does. It waits a few seconds, then says who holds the table.
    c.client
        .batch_execute(&format!(
            "SET lock_timeout = '{}ms'",
            PLAN_LOCK_TIMEOUT.as_millis()
        ))
        .await?;
    match plan_on(&c, opts, files, probe).await {
        Err(MigrateError::Pg(e))
            if e.sqlstate() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
        {
            Err(MigrateError::Usage(format!(
                "evolve plan waited {} s to read a table's definition that another session holds locked ({}): \
                 nothing was applied; run it again when that session's transaction has ended \
                 (pg_locks and pg_stat_activity show which)",
                PLAN_LOCK_TIMEOUT.as_secs(),
                e
            )))
        }
        other => other,
    }
}

/// How long the plan's catalog reads wait behind another session's lock.
const PLAN_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

async fn plan_on(
    c: &crate::Connected,
    opts: &Options,
    files: &[PathBuf],
    probe: bool,
) -> Result<LockPlan, MigrateError> {
    let plan_files = if files.is_empty() {
        let set = c.load(opts).await?;
        let rows = c.history.rows(&c.client).await?;
        let progress = c.history.progress(&c.client).await?;
        let plan = Plan::new(&set, &rows, &progress);
        let steps = plan
            .steps(&StepOptions::default(), &progress)
            .map_err(MigrateError::Usage)?;
        steps
            .into_iter()
            .map(|s| PlanFile {
                script: s.file.script.clone(),
                parsed: s.file.parsed.clone(),
                skip: s.resume.map(|r| r.statements_done).unwrap_or(0),
                no_transaction: crate::apply::no_transaction(s.file, false),
            })
            .collect::<Vec<_>>()
    } else {
        let mut out = Vec::new();
        for path in files {
            let text = std::fs::read_to_string(path).map_err(|e| MigrateError::Read {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let parsed = parse_script(&text).map_err(|e| MigrateError::Script {
                script: path.display().to_string(),
                reason: e.to_string(),
            })?;
            out.push(PlanFile {
                script: path.display().to_string(),
                no_transaction: crate::apply::script_no_transaction(&parsed, false),
                parsed,
                skip: 0,
            });
        }
        out
    };
    let texts: Vec<Vec<String>> = plan_files
        .iter()
        .map(|f| f.parsed.statements.iter().map(|s| s.text.clone()).collect())
        .collect();
    let analysed = analyze_all(&texts)?;
    let mut items = Vec::new();
    for (fi, (file, fx)) in plan_files.iter().zip(analysed).enumerate() {
        for (si, (stmt, fx)) in file.parsed.statements.iter().zip(fx).enumerate() {
            if si < file.skip {
                continue;
            }
            let fx = fx.map_err(|e| syntax_error(&file.script, stmt, &e))?;
            items.push(Item {
                file_index: fi,
                script: file.script.clone(),
                line: stmt.line,
                sql: stmt.text.clone(),
                copy_rows: stmt.copy_data.clone(),
                no_transaction: file.no_transaction || stmt.kind == StatementKind::NonTransactional,
                file_no_transaction: file.no_transaction,
                rebuild_off: file.parsed.directives.rebuild_dependents_off,
                fx,
            });
        }
    }
    let statements = predict(&c.client, &items).await?;
    let mut plan = LockPlan {
        statements,
        probed: false,
        disagreements: 0,
        probe_failures: 0,
    };
    if probe {
        probe_on(opts, &c.client, &mut plan).await?;
    }
    Ok(plan)
}

/// `--probe` on a plan [`lock_plan`] made without it: checks each
/// prediction on a scratch copy of the schema (see [`lock_plan`]). The
/// prediction reads the real tables' definitions and sizes, which takes
/// ACCESS SHARE on them for a moment; the probe takes no lock on any real
/// relation.
pub async fn probe_lock_plan(opts: &Options, plan: &mut LockPlan) -> Result<(), MigrateError> {
    let client = evolve_pg::connect(&opts.database_url, "evolve plan probe").await?;
    probe_on(opts, &client, plan).await
}

async fn probe_on(
    opts: &Options,
    client: &Client,
    plan: &mut LockPlan,
) -> Result<(), MigrateError> {
    probe::run(opts, client, &mut plan.statements).await?;
    plan.probed = true;
    plan.disagreements = plan
        .statements
        .iter()
        .filter(|s| {
            s.probe
                .as_ref()
                .is_some_and(|p| !p.disagreements.is_empty())
        })
        .count();
    plan.probe_failures = plan
        .statements
        .iter()
        .filter(|s| s.probe.as_ref().is_some_and(|p| p.error.is_some()))
        .count();
    Ok(())
}

/// Line and column (1-based) of `offset` in `text`.
fn offset_position(text: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(text.len());
    let mut offset = offset;
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    line_col(text, offset)
}

/// A statement the parser rejects, as `plan` and `apply --dry-run` refuse
/// it: the file, the line and column in it, the parser's message and the
/// statement's start.
fn syntax_error(script: &str, stmt: &Statement, e: &effects::SyntaxError) -> MigrateError {
    let (line, column) = offset_position(&stmt.text, e.offset);
    let line = stmt.line + line - 1;
    let column = if line == stmt.line {
        stmt.column + column - 1
    } else {
        column
    };
    MigrateError::Script {
        script: script.to_string(),
        reason: format!(
            "line {line}, column {column}: {}: {}; fix the statement, nothing was planned or applied",
            e.message,
            effects::one_line(&stmt.text)
                .chars()
                .take(80)
                .collect::<String>()
        ),
    }
}

/// The first statement of `files` (each a script's name, its statements
/// and how many of them a resumed run skips) that the parser rejects, as
/// [`syntax_error`] says it: what `apply --dry-run` checks, as `plan` does.
pub(crate) fn check_syntax(files: &[(&str, &Script, usize)]) -> Result<(), MigrateError> {
    let texts: Vec<Vec<String>> = files
        .iter()
        .map(|(_, script, skip)| {
            script
                .statements
                .iter()
                .skip(*skip)
                .map(|s| s.text.clone())
                .collect()
        })
        .collect();
    for ((name, script, skip), analysed) in files.iter().zip(analyze_all(&texts)?) {
        for (stmt, fx) in script.statements.iter().skip(*skip).zip(analysed) {
            if let Err(e) = fx {
                return Err(syntax_error(name, stmt, &e));
            }
        }
    }
    Ok(())
}

/// Runs the parser over every statement on a thread with a stack that
/// fits what `parse_script` bounded.
fn analyze_all(
    files: &[Vec<String>],
) -> Result<Vec<Vec<Result<Effects, effects::SyntaxError>>>, MigrateError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("evolve-plan-parser".into())
            .stack_size(1 << 30)
            .spawn_scoped(scope, || {
                files
                    .iter()
                    .map(|f| f.iter().map(|s| effects::analyze(s)).collect())
                    .collect()
            })
            .map_err(|e| MigrateError::Usage(format!("cannot start the parser thread: {e}")))?
            .join()
            .map_err(|_| {
                MigrateError::Usage(
                    "the SQL parser failed; please report it together with the migration files"
                        .into(),
                )
            })
    })
}

struct Item {
    file_index: usize,
    script: String,
    line: u32,
    sql: String,
    copy_rows: Option<String>,
    no_transaction: bool,
    file_no_transaction: bool,
    rebuild_off: bool,
    fx: Effects,
}

/// A relation as the catalog has it.
#[derive(Clone, Debug)]
struct CatalogRel {
    oid: u32,
    schema: String,
    name: String,
    rows: f64,
    bytes: i64,
    /// For an index: its table.
    index_table: Option<(u32, String, String)>,
}

#[derive(Clone, Debug)]
struct CatalogColumn {
    type_oid: u32,
    typmod: i32,
    typname: String,
    type_display: String,
    not_null: bool,
    /// Its collation (`attcollation`, 0 for a type without one) and that
    /// collation's name.
    collation: (u32, String),
    /// The indexes that read the column (key, expression or predicate).
    indexes: Vec<ColumnIndex>,
    /// Tables whose foreign keys reference the column: a type change
    /// re-adds those constraints under ACCESS EXCLUSIVE on each.
    referenced_by: Vec<RelName>,
}

/// An index over a column, as `ALTER COLUMN ... TYPE` treats it: an index
/// whose expression or predicate reads the column is always built anew; a
/// key column's index is kept only when the new type gets the same
/// operator class (`CheckIndexCompatible`).
#[derive(Clone, Debug)]
struct ColumnIndex {
    name: String,
    expression_or_predicate: bool,
    am: u32,
    opclass: u32,
    opclass_default: bool,
    /// The key column's collation in the index (`indcollation`): the
    /// column's unless the index names another.
    collation: u32,
}

#[derive(Clone, Debug)]
struct TypeInfo {
    oid: u32,
    /// The collation a column of it gets without `COLLATE`
    /// (`typcollation`, 0 for a type without one), and its name.
    collation: (u32, String),
    typname: String,
    has_length_cast: bool,
    length_support: bool,
    domain_constraints: bool,
}

/// A table as the plan goes along.
#[derive(Clone, Debug, Default)]
struct TableState {
    catalog: Option<u32>,
    created_in: Option<String>,
    added: HashSet<String>,
    /// Current column name -> its catalog name.
    renamed: HashMap<String, String>,
    dropped_columns: HashSet<String>,
    /// (constraint name, column, validated).
    not_null_checks: Vec<(Option<String>, String, bool)>,
    dropped: bool,
}

type Key = (String, String);

struct Catalog {
    current_schema: String,
    time_zone: String,
    /// Resolved name text -> relation.
    rels: HashMap<RelName, CatalogRel>,
    columns: HashMap<(u32, String), CatalogColumn>,
    /// (table oid, constraint name, column, validated), from CHECK (c IS NOT NULL).
    checks: Vec<(u32, String, String, bool)>,
    /// (table oid, constraint name) -> referenced table of a foreign key.
    fk_refs: HashMap<(u32, String), String>,
    types_by_text: HashMap<String, TypeInfo>,
    types_by_oid: HashMap<u32, TypeInfo>,
    casts: HashMap<(u32, u32), String>,
    /// (index access method, type) -> its default operator class (0: none).
    default_opclass: HashMap<(u32, u32), u32>,
    /// PRIMARY KEY USING INDEX: the index -> its key columns.
    index_columns: HashMap<RelName, Vec<String>>,
    /// Partitioned table as written -> its default partition.
    default_partitions: HashMap<RelName, RelName>,
    /// Partitioned table's oid -> its partitions at every level, as
    /// (schema, name), parents before their partitions.
    partitions: HashMap<u32, Vec<Key>>,
    /// `ALTER COLUMN ... TYPE ... COLLATE name`: the name as written ->
    /// the collation's oid (absent: no such collation).
    collations: HashMap<String, u32>,
    volatility: HashMap<String, char>,
}

fn names_of(fx: &Effects) -> Vec<RelName> {
    let mut out: Vec<RelName> = fx.locks.iter().map(|l| l.relation.clone()).collect();
    for a in &fx.actions {
        match a {
            Action::Uses { table, .. }
            | Action::AddColumn { table, .. }
            | Action::DropColumn { table, .. }
            | Action::RenameColumn { table, .. }
            | Action::AlterType { table, .. }
            | Action::SetNotNull { table, .. }
            | Action::AlterColumnOther { table, .. }
            | Action::AddCheck { table, .. }
            | Action::AddIndexConstraint { table, .. }
            | Action::ValidateConstraint { table, .. }
            | Action::Rewrite { table, .. }
            | Action::Scan { table, .. }
            | Action::Truncate { table } => out.push(table.clone()),
            Action::AddForeignKey {
                table, referenced, ..
            } => {
                out.push(table.clone());
                out.push(referenced.clone());
            }
            Action::CreateRelation { relation, .. } | Action::DropRelation { relation, .. } => {
                out.push(relation.clone())
            }
            Action::RenameRelation { from, .. } => out.push(from.clone()),
            _ => {}
        }
    }
    out
}

fn quoted(name: &RelName) -> String {
    match &name.schema {
        Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&name.name)),
        None => quote_ident(&name.name),
    }
}

async fn read_catalog(client: &Client, items: &[Item]) -> Result<Catalog, MigrateError> {
    let row = client
        .query_one(
            "SELECT coalesce(current_schema(), 'public')::text, current_setting('TimeZone')",
            &[],
        )
        .await?;
    let current_schema: String = row.try_get(0)?;
    let time_zone: String = row.try_get(1)?;

    // 1. Relations, by name.
    let mut names: Vec<RelName> = Vec::new();
    let mut seen = HashSet::new();
    for item in items {
        for n in names_of(&item.fx) {
            if seen.insert(n.clone()) {
                names.push(n);
            }
        }
    }
    let texts: Vec<String> = names.iter().map(quoted).collect();
    let rows = client
        .query(
            "SELECT u.i::int8, c.oid, n.nspname::text, c.relname::text, c.relkind::text,
                    CASE WHEN c.relkind = 'p' THEN
                        (SELECT CASE WHEN bool_or(l.reltuples < 0) THEN -1
                                     ELSE coalesce(sum(l.reltuples), 0) END::float8
                         FROM pg_partition_tree(c.oid) pt
                         JOIN pg_class l ON l.oid = pt.relid
                         WHERE pt.isleaf AND l.relkind = 'r')
                    ELSE c.reltuples::float8 END,
                    CASE WHEN c.relkind = 'p' THEN
                        (SELECT coalesce(sum(pg_total_relation_size(pt.relid)), 0)::int8
                         FROM pg_partition_tree(c.oid) pt)
                    ELSE pg_total_relation_size(c.oid) END,
                    ix.indrelid, tn.nspname::text, t.relname::text,
                    t.reltuples::float8, pg_total_relation_size(t.oid)
             FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i)
             JOIN pg_class c ON c.oid = to_regclass(u.name)
             JOIN pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_index ix ON ix.indexrelid = c.oid
             LEFT JOIN pg_class t ON t.oid = ix.indrelid
             LEFT JOIN pg_namespace tn ON tn.oid = t.relnamespace",
            &[&texts],
        )
        .await?;
    let mut rels = HashMap::new();
    let mut partitioned: Vec<u32> = Vec::new();
    for r in rows {
        let i: i64 = r.try_get(0)?;
        if r.try_get::<_, String>(4)? == "p" {
            partitioned.push(r.try_get(1)?);
        }
        let Some(name) = usize::try_from(i - 1).ok().and_then(|i| names.get(i)) else {
            continue;
        };
        let index_table: Option<(u32, String, String)> = match (
            r.try_get::<_, Option<u32>>(7)?,
            r.try_get::<_, Option<String>>(8)?,
            r.try_get::<_, Option<String>>(9)?,
        ) {
            (Some(oid), Some(s), Some(n)) => Some((oid, s, n)),
            _ => None,
        };
        if let Some((oid, s, n)) = &index_table {
            let table = RelName {
                schema: Some(s.clone()),
                name: n.clone(),
            };
            rels.entry(table).or_insert(CatalogRel {
                oid: *oid,
                schema: s.clone(),
                name: n.clone(),
                rows: r.try_get::<_, Option<f64>>(10)?.unwrap_or(-1.0),
                bytes: r.try_get::<_, Option<i64>>(11)?.unwrap_or(0),
                index_table: None,
            });
        }
        rels.insert(
            name.clone(),
            CatalogRel {
                oid: r.try_get(1)?,
                schema: r.try_get(2)?,
                name: r.try_get(3)?,
                rows: r.try_get(5)?,
                bytes: r.try_get(6)?,
                index_table,
            },
        );
    }

    // The partitions of the partitioned tables named, at every level: a
    // statement that reaches them locks them too.
    let mut partitions: HashMap<u32, Vec<Key>> = HashMap::new();
    if !partitioned.is_empty() {
        let rows = client
            .query(
                "SELECT p.oid, n.nspname::text, c.relname::text
                 FROM unnest($1::oid[]) AS p(oid)
                 CROSS JOIN LATERAL pg_partition_tree(p.oid) t
                 JOIN pg_class c ON c.oid = t.relid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE t.level > 0
                 ORDER BY p.oid, t.level, n.nspname, c.relname",
                &[&partitioned],
            )
            .await?;
        for r in rows {
            partitions
                .entry(r.try_get(0)?)
                .or_default()
                .push((r.try_get(1)?, r.try_get(2)?));
        }
        // A partitioned table without partitions is still one.
        for oid in partitioned {
            partitions.entry(oid).or_default();
        }
    }

    // 2. Columns and constraints of the tables whose columns are touched.
    let mut oids: Vec<u32> = Vec::new();
    for item in items {
        for a in &item.fx.actions {
            let table = match a {
                Action::AddColumn { table, .. }
                | Action::DropColumn { table, .. }
                | Action::RenameColumn { table, .. }
                | Action::AlterType { table, .. }
                | Action::SetNotNull { table, .. }
                | Action::AlterColumnOther { table, .. }
                | Action::ValidateConstraint { table, .. }
                | Action::AddIndexConstraint {
                    table,
                    primary_key_index: Some(_),
                    ..
                } => table,
                _ => continue,
            };
            if let Some(r) = rels.get(table)
                && !oids.contains(&r.oid)
            {
                oids.push(r.oid);
            }
        }
    }
    let rows = client
        .query(
            "SELECT a.attrelid, a.attname::text, a.atttypid, a.atttypmod, t.typname::text,
                    format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attcollation,
                    coalesce(nullif(a.attcollation, 0)::regcollation::text, '')
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
             WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&oids],
        )
        .await?;
    let mut columns = HashMap::new();
    let mut old_types: Vec<u32> = Vec::new();
    for r in rows {
        let col = CatalogColumn {
            type_oid: r.try_get(2)?,
            typmod: r.try_get(3)?,
            typname: r.try_get(4)?,
            type_display: r.try_get(5)?,
            not_null: r.try_get(6)?,
            collation: (r.try_get(7)?, r.try_get(8)?),
            indexes: Vec::new(),
            referenced_by: Vec::new(),
        };
        if !old_types.contains(&col.type_oid) {
            old_types.push(col.type_oid);
        }
        columns.insert((r.try_get(0)?, r.try_get(1)?), col);
    }
    // The indexes over those columns: key columns with their operator
    // class, and indexes whose expression or predicate reads the column.
    let rows = client
        .query(
            "SELECT a.attrelid, a.attname::text, i.indexrelid::regclass::text,
                    NOT k.key, ic.relam, coalesce(k.opclass, 0::oid),
                    coalesce(oc.opcdefault, false), coalesce(k.collation, 0::oid)
             FROM pg_attribute a
             JOIN pg_index i ON i.indrelid = a.attrelid
             JOIN pg_class ic ON ic.oid = i.indexrelid
             CROSS JOIN LATERAL (
                 SELECT true AS key, i.indclass[p.n - 1] AS opclass,
                        i.indcollation[p.n - 1] AS collation
                 FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS p(att, n)
                 WHERE p.att = a.attnum
                 UNION ALL
                 SELECT false, NULL::oid, NULL::oid
                 WHERE (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)
                   AND EXISTS (SELECT 1 FROM pg_depend d
                               WHERE d.classid = 'pg_class'::regclass
                                 AND d.objid = i.indexrelid
                                 AND d.refclassid = 'pg_class'::regclass
                                 AND d.refobjid = a.attrelid
                                 AND d.refobjsubid = a.attnum)
             ) k
             LEFT JOIN pg_opclass oc ON oc.oid = k.opclass
             WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&oids],
        )
        .await?;
    let fk_rows = client
        .query(
            "SELECT c.confrelid, a.attname::text, n.nspname::text, r.relname::text
             FROM pg_constraint c
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = ANY(c.confkey)
             JOIN pg_class r ON r.oid = c.conrelid
             JOIN pg_namespace n ON n.oid = r.relnamespace
             WHERE c.contype = 'f' AND c.confrelid = ANY($1) AND c.conrelid <> c.confrelid
             ORDER BY 3, 4",
            &[&oids],
        )
        .await?;
    for r in fk_rows {
        let key: (u32, String) = (r.try_get(0)?, r.try_get(1)?);
        let referencing = RelName {
            schema: Some(r.try_get(2)?),
            name: r.try_get(3)?,
        };
        if let Some(c) = columns.get_mut(&key)
            && !c.referenced_by.contains(&referencing)
        {
            c.referenced_by.push(referencing);
        }
    }
    let mut ams: Vec<u32> = Vec::new();
    for r in rows {
        let key: (u32, String) = (r.try_get(0)?, r.try_get(1)?);
        let index = ColumnIndex {
            name: r.try_get(2)?,
            expression_or_predicate: r.try_get(3)?,
            am: r.try_get(4)?,
            opclass: r.try_get(5)?,
            opclass_default: r.try_get(6)?,
            collation: r.try_get(7)?,
        };
        if !ams.contains(&index.am) {
            ams.push(index.am);
        }
        if let Some(c) = columns.get_mut(&key) {
            c.indexes.push(index);
        }
    }
    let rows = client
        .query(
            "SELECT c.conrelid, c.conname::text, c.contype::text, c.convalidated,
                    pg_get_constraintdef(c.oid), format('%s.%s', n.nspname, r.relname)
             FROM pg_constraint c
             LEFT JOIN pg_class r ON r.oid = c.confrelid
             LEFT JOIN pg_namespace n ON n.oid = r.relnamespace
             WHERE c.conrelid = ANY($1) AND c.contype IN ('c', 'f')",
            &[&oids],
        )
        .await?;
    let mut checks = Vec::new();
    let mut fk_refs = HashMap::new();
    for r in rows {
        let oid: u32 = r.try_get(0)?;
        let name: String = r.try_get(1)?;
        let kind: String = r.try_get(2)?;
        if kind == "f" {
            fk_refs.insert((oid, name), r.try_get(5)?);
        } else if let Some(col) = effects::check_not_null_column(&r.try_get::<_, String>(4)?) {
            checks.push((oid, name, col, r.try_get(3)?));
        }
    }

    // PRIMARY KEY USING INDEX: the index's key columns.
    let mut pk_indexes: Vec<RelName> = Vec::new();
    for item in items {
        for a in &item.fx.actions {
            if let Action::AddIndexConstraint {
                primary_key_index: Some(i),
                ..
            } = a
                && !pk_indexes.contains(i)
            {
                pk_indexes.push(i.clone());
            }
        }
    }
    let pk_texts: Vec<String> = pk_indexes.iter().map(quoted).collect();
    let rows = client
        .query(
            "SELECT u.i::int8, array_agg(a.attname::text ORDER BY a.attnum)
             FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i)
             JOIN pg_index x ON x.indexrelid = to_regclass(u.name)
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)
             GROUP BY u.i",
            &[&pk_texts],
        )
        .await?;
    let mut index_columns = HashMap::new();
    for r in rows {
        let i: i64 = r.try_get(0)?;
        if let Some(name) = usize::try_from(i - 1).ok().and_then(|i| pk_indexes.get(i)) {
            index_columns.insert(name.clone(), r.try_get::<_, Vec<String>>(1)?);
        }
    }

    // A partition added to a table with a default partition: that one is
    // locked and read.
    let mut parents: Vec<RelName> = Vec::new();
    for item in items {
        for a in &item.fx.actions {
            if let Action::DefaultPartition { parent, .. } = a
                && !parents.contains(parent)
            {
                parents.push(parent.clone());
            }
        }
    }
    let parent_texts: Vec<String> = parents.iter().map(quoted).collect();
    let rows = client
        .query(
            "SELECT u.i::int8, n.nspname::text, d.relname::text
             FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i)
             JOIN pg_partitioned_table pp ON pp.partrelid = to_regclass(u.name)
             JOIN pg_class d ON d.oid = pp.partdefid
             JOIN pg_namespace n ON n.oid = d.relnamespace",
            &[&parent_texts],
        )
        .await?;
    let mut default_partitions = HashMap::new();
    for r in rows {
        let i: i64 = r.try_get(0)?;
        if let Some(name) = usize::try_from(i - 1).ok().and_then(|i| parents.get(i)) {
            default_partitions.insert(
                name.clone(),
                RelName {
                    schema: Some(r.try_get(1)?),
                    name: r.try_get(2)?,
                },
            );
        }
    }

    // The collations type changes name.
    let mut collation_names: Vec<String> = Vec::new();
    for item in items {
        for a in &item.fx.actions {
            if let Action::AlterType {
                collation: Some(c), ..
            } = a
                && !collation_names.contains(c)
            {
                collation_names.push(c.clone());
            }
        }
    }
    let mut collations = HashMap::new();
    if !collation_names.is_empty() {
        for r in client
            .query(
                "SELECT u.name, c.oid FROM unnest($1::text[]) AS u(name)
                 JOIN pg_collation c ON c.oid = to_regcollation(u.name)",
                &[&collation_names],
            )
            .await?
        {
            collations.insert(r.try_get::<_, String>(0)?, r.try_get::<_, u32>(1)?);
        }
    }

    // 3. Types: the new ones by name, the old ones by oid.
    let mut type_texts: Vec<String> = Vec::new();
    let mut functions: Vec<String> = Vec::new();
    for item in items {
        for a in &item.fx.actions {
            match a {
                Action::AlterType { type_text, .. } => type_texts.push(type_text.clone()),
                Action::AddColumn {
                    type_text,
                    default_functions,
                    serial,
                    ..
                } => {
                    if !serial {
                        type_texts.push(type_text.clone());
                    }
                    functions.extend(default_functions.iter().cloned());
                }
                _ => {}
            }
        }
    }
    type_texts.sort();
    type_texts.dedup();
    functions.sort();
    functions.dedup();
    const TYPE_INFO: &str = "t.oid, t.typcollation,
                    coalesce(nullif(t.typcollation, 0)::regcollation::text, ''), t.typname::text,
                    lc.castfunc IS NOT NULL AND lc.castfunc <> 0,
                    coalesce(p.prosupport <> 0, false),
                    t.typtype = 'd' AND EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contypid = t.oid)";
    let rows = client
        .query(
            &format!(
                "SELECT u.name, {TYPE_INFO}
                 FROM unnest($1::text[]) AS u(name)
                 JOIN pg_type t ON t.oid = to_regtype(u.name)
                 LEFT JOIN pg_cast lc ON lc.castsource = t.oid AND lc.casttarget = t.oid
                 LEFT JOIN pg_proc p ON p.oid = lc.castfunc"
            ),
            &[&type_texts],
        )
        .await?;
    let type_info = |r: &tokio_postgres::Row, at: usize| -> Result<TypeInfo, MigrateError> {
        Ok(TypeInfo {
            oid: r.try_get(at)?,
            collation: (r.try_get(at + 1)?, r.try_get(at + 2)?),
            typname: r.try_get(at + 3)?,
            has_length_cast: r.try_get(at + 4)?,
            length_support: r.try_get(at + 5)?,
            domain_constraints: r.try_get(at + 6)?,
        })
    };
    let mut types_by_text = HashMap::new();
    let mut new_types: Vec<u32> = Vec::new();
    for r in &rows {
        let info = type_info(r, 1)?;
        new_types.push(info.oid);
        types_by_text.insert(r.try_get::<_, String>(0)?, info);
    }
    let all: Vec<u32> = old_types.iter().chain(&new_types).copied().collect();
    let rows = client
        .query(
            &format!(
                "SELECT {TYPE_INFO} FROM pg_type t
                 LEFT JOIN pg_cast lc ON lc.castsource = t.oid AND lc.casttarget = t.oid
                 LEFT JOIN pg_proc p ON p.oid = lc.castfunc
                 WHERE t.oid = ANY($1)"
            ),
            &[&all],
        )
        .await?;
    let mut types_by_oid = HashMap::new();
    for r in &rows {
        let info = type_info(r, 0)?;
        types_by_oid.insert(info.oid, info);
    }
    let rows = client
        .query(
            "SELECT castsource, casttarget, castmethod::text FROM pg_cast
             WHERE castsource = ANY($1) AND casttarget = ANY($2)",
            &[&old_types, &new_types],
        )
        .await?;
    let mut casts = HashMap::new();
    for r in rows {
        casts.insert((r.try_get(0)?, r.try_get(1)?), r.try_get(2)?);
    }
    // The default operator class of each new type for each index access
    // method in use: an exact match first, else one of a type the new type
    // is binary-coercible to (or a domain's base type), as
    // GetDefaultOpClass chooses.
    let rows = client
        .query(
            "SELECT am.oid, ty.oid,
                    (SELECT oc.oid FROM pg_opclass oc
                     WHERE oc.opcmethod = am.oid AND oc.opcdefault
                       AND (oc.opcintype = ty.oid
                            OR oc.opcintype = (SELECT t.typbasetype FROM pg_type t
                                               WHERE t.oid = ty.oid AND t.typtype = 'd')
                            OR EXISTS (SELECT 1 FROM pg_cast k
                                       WHERE k.castsource = ty.oid
                                         AND k.casttarget = oc.opcintype
                                         AND k.castmethod = 'b'))
                     ORDER BY oc.opcintype = ty.oid DESC, oc.oid LIMIT 1)
             FROM unnest($1::oid[]) AS am(oid) CROSS JOIN unnest($2::oid[]) AS ty(oid)",
            &[&ams, &new_types],
        )
        .await?;
    let mut default_opclass = HashMap::new();
    for r in rows {
        let oc: Option<u32> = r.try_get(2)?;
        default_opclass.insert((r.try_get(0)?, r.try_get(1)?), oc.unwrap_or(0));
    }

    // 4. The volatility of the functions new columns' defaults call.
    let rows = client
        .query(
            "SELECT u.name, max(p.provolatile::text)
             FROM unnest($1::text[]) AS u(name) JOIN pg_proc p ON p.proname = u.name
             GROUP BY u.name",
            &[&functions],
        )
        .await?;
    let mut volatility = HashMap::new();
    for r in rows {
        let v: Option<String> = r.try_get(1)?;
        if let Some(c) = v.and_then(|v| v.chars().next()) {
            volatility.insert(r.try_get(0)?, c);
        }
    }
    Ok(Catalog {
        current_schema,
        time_zone,
        rels,
        columns,
        checks,
        fk_refs,
        types_by_text,
        types_by_oid,
        casts,
        default_opclass,
        index_columns,
        default_partitions,
        partitions,
        collations,
        volatility,
    })
}

/// Whether a `TimeZone` setting is UTC all year (timestamp <-> timestamptz
/// then keeps every stored value).
fn is_utc(tz: &str) -> bool {
    let tz = tz.trim().to_ascii_lowercase();
    let tz = tz.strip_prefix("etc/").unwrap_or(&tz);
    matches!(
        tz,
        "utc"
            | "uct"
            | "gmt"
            | "gmt0"
            | "gmt+0"
            | "gmt-0"
            | "zulu"
            | "universal"
            | "greenwich"
            | "z"
    )
}

struct Sim<'a> {
    cat: &'a Catalog,
    tables: HashMap<Key, TableState>,
    created_types: HashSet<String>,
    created_functions: HashMap<String, char>,
}

impl Sim<'_> {
    /// The key a name refers to at this point of the plan.
    fn key(&self, name: &RelName) -> Key {
        if let Some(s) = &name.schema {
            return (s.clone(), name.name.clone());
        }
        let here = (self.cat.current_schema.clone(), name.name.clone());
        if self
            .tables
            .get(&here)
            .is_some_and(|t| t.created_in.is_some() || t.catalog.is_none())
        {
            return here;
        }
        match self.cat.rels.get(name) {
            Some(r) => (r.schema.clone(), r.name.clone()),
            None => here,
        }
    }

    fn state(&mut self, name: &RelName) -> Option<&mut TableState> {
        let key = self.key(name);
        if !self.tables.contains_key(&key) {
            let r = self.cat.rels.get(name)?;
            self.tables.insert(
                key.clone(),
                TableState {
                    catalog: Some(r.oid),
                    ..TableState::default()
                },
            );
        }
        self.tables.get_mut(&key).filter(|t| !t.dropped)
    }

    fn catalog_rel(&self, name: &RelName) -> Option<&CatalogRel> {
        self.cat.rels.get(name)
    }
}

fn plain(key: &Key) -> String {
    format!("{}.{}", key.0, key.1)
}

/// The table `key` as an argument of a printed command line: written so
/// that PostgreSQL reads it back as the same table (`public."Orders"`, a
/// part quoted where it must be; `evolve rewrite` and `evolve change`
/// resolve it with `to_regclass`), then quoted for the shell, so that a
/// pasted command neither names another table nor runs what a name holds.
fn table_arg(key: &Key) -> String {
    shell_word(&evolve_pg::QualifiedName::new(key.0.clone(), key.1.clone()).shown())
}

/// A column as an argument of a printed command line: quoted as
/// PostgreSQL needs it (`evolve change` folds an unquoted one to lower
/// case), then for the shell.
fn column_arg(column: &str) -> String {
    let mut chars = column.chars();
    let bare = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if bare {
        shell_word(column)
    } else {
        shell_word(&quote_ident(column))
    }
}

fn magnitude(seconds: f64) -> &'static str {
    if seconds < 1.0 {
        "under a second"
    } else if seconds < 60.0 {
        "seconds"
    } else if seconds < 3600.0 {
        "minutes"
    } else {
        "hours"
    }
}

/// Throughputs behind the order of magnitude: a rewrite copies the table
/// and rebuilds its indexes, a scan only reads.
const REWRITE_BYTES_PER_S: f64 = 50e6;
const SCAN_BYTES_PER_S: f64 = 250e6;

async fn predict(client: &Client, items: &[Item]) -> Result<Vec<PlannedStatement>, MigrateError> {
    let cat = read_catalog(client, items).await?;
    let mut sim = Sim {
        cat: &cat,
        tables: HashMap::new(),
        created_types: HashSet::new(),
        created_functions: HashMap::new(),
    };
    let mut out = Vec::new();
    let mut time_zone = cat.time_zone.clone();
    let mut last_file = usize::MAX;
    // Columns whose dependents the rebuild machinery must look at.
    let mut rebuild_targets: Vec<(usize, u32, String, String)> = Vec::new();
    // Partitions created by earlier statements of the plan, by parent.
    let mut new_partitions: HashMap<Key, Vec<Key>> = HashMap::new();
    for (idx, item) in items.iter().enumerate() {
        if item.file_index != last_file {
            // apply ends every file with RESET ALL.
            time_zone = cat.time_zone.clone();
            last_file = item.file_index;
        }
        let held = if item.no_transaction {
            Held::Statement
        } else {
            Held::Transaction
        };
        let fail = |reason: String| MigrateError::Script {
            script: item.script.clone(),
            reason: format!(
                "line {}: {reason}; nothing was planned or applied",
                item.line
            ),
        };
        let mut st = PlannedStatement {
            file: item.script.clone(),
            line: item.line,
            sql: item.sql.clone(),
            locks: Vec::new(),
            rewrites: false,
            scans: false,
            table_rows: None,
            table_bytes: None,
            locked_time: "instant".into(),
            rebuilds: Vec::new(),
            advice: Vec::new(),
            notes: Vec::new(),
            analysed: item.fx.known,
            probe: None,
            contracts: Vec::new(),
            no_transaction: item.no_transaction,
            rebuild_sql: (Vec::new(), Vec::new()),
            concurrently: item.fx.concurrently,
            file_index: item.file_index,
            copy_rows: item.copy_rows.clone(),
        };
        // The main table: the first one locked.
        let mut main: Option<(Key, Option<CatalogRel>, Option<String>)> = None;
        let created_here: HashSet<RelName> = item
            .fx
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::CreateRelation { relation, .. } => Some(relation.clone()),
                _ => None,
            })
            .collect();
        let if_exists = item.fx.actions.iter().any(|a| {
            matches!(
                a,
                Action::Uses {
                    if_exists: true,
                    ..
                } | Action::DropRelation {
                    if_exists: true,
                    ..
                }
            )
        });
        for lock in &item.fx.locks {
            let (name, rel) = if lock.on_index_table {
                match sim
                    .catalog_rel(&lock.relation)
                    .and_then(|r| r.index_table.clone())
                {
                    Some((_, s, n)) => {
                        let name = RelName {
                            schema: Some(s),
                            name: n,
                        };
                        let rel = sim.catalog_rel(&name).cloned();
                        (name, rel)
                    }
                    None => (lock.relation.clone(), None),
                }
            } else {
                (
                    lock.relation.clone(),
                    sim.catalog_rel(&lock.relation).cloned(),
                )
            };
            let key = sim.key(&name);
            let exists = sim.state(&name).is_some();
            if !exists && !lock.on_index_table && !if_exists {
                return Err(fail(format!(
                    "relation {} does not exist in the database and no earlier pending migration creates it; create it first or fix the name",
                    name
                )));
            }
            if !exists {
                continue;
            }
            let created_in = sim.tables.get(&key).and_then(|t| t.created_in.clone());
            st.locks
                .push(PlannedLock::new(plain(&key), lock.mode, held));
            if let Some(partition) = lock.partitions {
                let parent = plain(&key);
                let mut partitions: Vec<Key> = match (&created_in, &rel) {
                    (None, Some(r)) => cat.partitions.get(&r.oid).cloned().unwrap_or_default(),
                    _ => Vec::new(),
                };
                partitions.extend(new_partitions.get(&key).into_iter().flatten().cloned());
                for p in partitions {
                    // Dropped by an earlier statement of the plan.
                    if sim.tables.get(&p).is_some_and(|t| t.dropped) {
                        continue;
                    }
                    st.locks.push(PlannedLock {
                        partition_of: Some(parent.clone()),
                        if_reached: partition.reached_only,
                        ..PlannedLock::new(plain(&p), partition.mode, held)
                    });
                }
            }
            if main.is_none() {
                main = Some((
                    key,
                    if created_in.is_some() { None } else { rel },
                    created_in,
                ));
            }
        }
        let main_state_new = main.as_ref().is_some_and(|m| m.2.is_some());
        let main_rows = main.as_ref().and_then(|m| m.1.as_ref()).map(|r| r.rows);
        let main_bytes = main.as_ref().and_then(|m| m.1.as_ref()).map(|r| r.bytes);
        let empty = main_state_new || main_bytes == Some(0);
        let mut rewrite_reasons: Vec<String> = Vec::new();
        let mut scan_reasons: Vec<String> = Vec::new();
        for action in &item.fx.actions {
            match action {
                Action::Uses { table, if_exists } => {
                    if sim.state(table).is_none() && !if_exists {
                        return Err(fail(format!(
                            "table {table} does not exist in the database and no earlier pending migration creates it; create it first or fix the name"
                        )));
                    }
                }
                Action::CreateRelation {
                    relation,
                    kind,
                    if_not_exists,
                } => {
                    let key = sim.key(relation);
                    let exists = sim.state(relation).is_some();
                    if exists && *if_not_exists {
                        continue;
                    }
                    // CREATE TABLE ... PARTITION OF: later statements on
                    // the parent reach it.
                    if *kind == RelKind::Table {
                        for a in &item.fx.actions {
                            if let Action::DefaultPartition { parent, .. } = a {
                                new_partitions
                                    .entry(sim.key(parent))
                                    .or_default()
                                    .push(key.clone());
                            }
                        }
                    }
                    sim.tables.insert(
                        key,
                        TableState {
                            created_in: Some(item.script.clone()),
                            ..TableState::default()
                        },
                    );
                    let partitioned = main
                        .as_ref()
                        .and_then(|m| m.1.as_ref())
                        .is_some_and(|r| cat.partitions.contains_key(&r.oid));
                    if *kind == RelKind::Index
                        && partitioned
                        && let Some((key, _, None)) = &main
                        && (item.fx.concurrently || !empty)
                        && item
                            .fx
                            .locks
                            .first()
                            .is_some_and(|l| l.partitions.is_some())
                    {
                        st.advice.push(format!(
                            "{refused}{table} is partitioned: create the index with CREATE INDEX ... ON ONLY {table} (an invalid index, nothing built), build each partition's with CREATE INDEX CONCURRENTLY in a file marked -- evolve:no-transaction, then ALTER INDEX ... ATTACH PARTITION each of them (the parent's index becomes valid once every partition has one)",
                            refused = if item.fx.concurrently {
                                "PostgreSQL refuses CREATE INDEX CONCURRENTLY on a partitioned table; "
                            } else {
                                ""
                            },
                            table = plain(key)
                        ));
                    } else if *kind == RelKind::Index
                        && !partitioned
                        && let Some((key, _, created)) = &main
                        && created.is_none()
                        && !item.fx.concurrently
                        && !empty
                    {
                        st.advice.push(format!(
                            "build it with CREATE INDEX CONCURRENTLY in a file marked -- evolve:no-transaction: SHARE UPDATE EXCLUSIVE on {} lets reads and writes go on while it builds",
                            plain(key)
                        ));
                    }
                }
                Action::DropRelation { relation, .. } => {
                    if let Some(t) = sim.state(relation) {
                        t.dropped = true;
                    }
                    if item.fx.locks.iter().any(|l| l.on_index_table) && !item.fx.concurrently {
                        st.advice.push(
                            "DROP INDEX CONCURRENTLY (in a file marked -- evolve:no-transaction) takes SHARE UPDATE EXCLUSIVE: reads and writes go on".into(),
                        );
                    }
                }
                Action::RenameRelation { from, to } => {
                    let key = sim.key(from);
                    if let Some(state) = sim.state(from).cloned() {
                        sim.tables.remove(&key);
                        sim.tables.insert((key.0, to.clone()), state);
                    }
                }
                Action::CreateFunction { name, volatility } => {
                    sim.created_functions.insert(name.clone(), *volatility);
                }
                Action::CreateType { name } => {
                    sim.created_types.insert(name.name.clone());
                }
                Action::SetTimeZone(tz) => {
                    time_zone = tz.clone().unwrap_or_else(|| cat.time_zone.clone());
                }
                Action::AddColumn {
                    table,
                    column,
                    type_text,
                    default,
                    default_functions,
                    generated_stored,
                    identity,
                    serial,
                    checks_rows,
                    builds_index,
                } => {
                    let Some(state) = sim.state(table) else {
                        if if_exists {
                            continue;
                        }
                        return Err(fail(format!(
                            "table {table} does not exist in the database and no earlier pending migration creates it; create it first or fix the name"
                        )));
                    };
                    state.added.insert(column.clone());
                    state.dropped_columns.remove(column);
                    let new_type = cat.types_by_text.get(type_text);
                    if !serial
                        && new_type.is_none()
                        && !sim.created_types.contains(&type_base(type_text))
                    {
                        return Err(fail(format!(
                            "type {type_text} of new column {table}.{column} does not exist; create it first or fix the type name"
                        )));
                    }
                    if *serial {
                        rewrite_reasons.push(format!("{type_text} gives the column a nextval() default, which is volatile: every row is written"));
                    } else if *identity {
                        rewrite_reasons.push(
                            "an IDENTITY column is filled from its sequence for every row".into(),
                        );
                    } else if *generated_stored {
                        rewrite_reasons.push(
                            "a GENERATED ... STORED column is computed and written for every row"
                                .into(),
                        );
                    } else if new_type.is_some_and(|t| t.domain_constraints) {
                        // PostgreSQL 15 checks the domain's constraints
                        // against every row by rewriting the table, with
                        // a default (even a constant one) or without.
                        rewrite_reasons.push(format!(
                            "domain {type_text} has constraints, checked for every row: PostgreSQL rewrites the table, with or without a default"
                        ));
                    } else if let Some(d) = default {
                        let volatile: Vec<&String> = default_functions
                            .iter()
                            .filter(|f| {
                                sim.created_functions
                                    .get(*f)
                                    .or(cat.volatility.get(*f))
                                    .is_none_or(|v| *v == 'v')
                            })
                            .collect();
                        if volatile.is_empty() {
                            st.notes.push(format!(
                                "default {} is not volatile: stored once in the catalog, no rewrite",
                                effects::one_line(d)
                            ));
                        } else {
                            rewrite_reasons.push(format!(
                                "default {} calls volatile {}: each row gets its own value, so every row is written",
                                effects::one_line(d),
                                volatile.iter().map(|f| format!("{f}()")).collect::<Vec<_>>().join(", ")
                            ));
                            st.advice.push(format!(
                                "add {column} without a default (or with a constant one), fill it in batches (evolve backfill), then SET DEFAULT {}: no rewrite under ACCESS EXCLUSIVE",
                                effects::one_line(d)
                            ));
                        }
                    }
                    if *checks_rows {
                        scan_reasons.push(
                            "a constraint on the new column is checked against every row".into(),
                        );
                    }
                    if *builds_index {
                        scan_reasons.push(
                            "a UNIQUE or PRIMARY KEY on the new column builds an index".into(),
                        );
                    }
                }
                Action::DropColumn {
                    table,
                    column,
                    if_exists: col_if_exists,
                } => {
                    let exists = column_exists(&mut sim, table, column);
                    if !exists && !col_if_exists && !if_exists {
                        return Err(fail(missing_column(table, column)));
                    }
                    if let Some(state) = sim.state(table) {
                        state.added.remove(column);
                        state.dropped_columns.insert(column.clone());
                    }
                    if let Some(oid) = catalog_oid(&mut sim, table) {
                        let catalog_name = catalog_column(&mut sim, table, column);
                        rebuild_targets.push((idx, oid, catalog_name, column.clone()));
                    }
                }
                Action::RenameColumn { table, from, to } => {
                    if !column_exists(&mut sim, table, from) && !if_exists {
                        return Err(fail(missing_column(table, from)));
                    }
                    let original = catalog_column(&mut sim, table, from);
                    if let Some(state) = sim.state(table) {
                        if state.added.remove(from) {
                            state.added.insert(to.clone());
                        } else {
                            state.renamed.remove(from);
                            state.renamed.insert(to.clone(), original);
                        }
                    }
                }
                Action::AlterColumnOther { table, column } => {
                    if !column_exists(&mut sim, table, column) && !if_exists {
                        return Err(fail(missing_column(table, column)));
                    }
                }
                Action::AlterType {
                    table,
                    column,
                    type_text,
                    using,
                    collation,
                } => {
                    if !column_exists(&mut sim, table, column) {
                        if if_exists {
                            continue;
                        }
                        return Err(fail(missing_column(table, column)));
                    }
                    let Some(new) = cat.types_by_text.get(type_text) else {
                        if sim.created_types.contains(&type_base(type_text)) {
                            rewrite_reasons.push(format!(
                                "{type_text} is created in this plan: evolve assumes a rewrite"
                            ));
                            continue;
                        }
                        return Err(fail(format!(
                            "type {type_text} does not exist; create it first or fix the type name"
                        )));
                    };
                    let old = catalog_oid(&mut sim, table).and_then(|oid| {
                        let name = catalog_column(&mut sim, table, column);
                        let added = sim.state(table).is_some_and(|t| t.added.contains(column));
                        if added {
                            None
                        } else {
                            cat.columns.get(&(oid, name)).cloned()
                        }
                    });
                    let Some(old) = old else {
                        rewrite_reasons.push(format!(
                            "column {column} is added earlier in this plan, so its type change is decided by PostgreSQL at run time: evolve assumes a rewrite"
                        ));
                        continue;
                    };
                    // The collation the column ends with: the COLLATE
                    // clause's, else the new type's default one (also when
                    // the column had another: PostgreSQL does not keep it).
                    let new_collation = match collation {
                        Some(name) => match cat.collations.get(name) {
                            Some(oid) => (*oid, name.clone()),
                            None => {
                                return Err(fail(format!(
                                    "collation {name} does not exist; create it first or fix its name"
                                )));
                            }
                        },
                        None => new.collation.clone(),
                    };
                    let collation_changes =
                        old.collation.0 != 0 && new_collation.0 != old.collation.0;
                    if collation_changes && collation.is_none() {
                        st.notes.push(format!(
                            "without COLLATE, {column} takes {type_text}'s default collation {}, not its own {}: write COLLATE {} to keep it",
                            new_collation.1, old.collation.1, old.collation.1
                        ));
                    }
                    let decision =
                        type_change(&cat, &old, new, type_text, using.as_deref(), &time_zone);
                    // Foreign keys of other tables that reference the
                    // column are dropped and added again: ACCESS EXCLUSIVE
                    // on each referencing table, whose rows are checked
                    // again when the values change (a rewrite).
                    if old.type_oid != new.oid || old.typmod != new_typmod_of(type_text, new) {
                        for referencing in &old.referenced_by {
                            let relation = plain(&sim.key(referencing));
                            if let Some(l) = st.locks.iter_mut().find(|l| l.relation == relation) {
                                l.mode = l.mode.max(LockMode::AccessExclusive);
                            } else {
                                st.locks.push(PlannedLock::new(
                                    relation.clone(),
                                    LockMode::AccessExclusive,
                                    held,
                                ));
                            }
                            if decision.is_err() {
                                scan_reasons.push(format!(
                                    "the foreign key of {relation} that references {column} is added again and checks every row of {relation}"
                                ));
                            } else {
                                st.notes.push(format!(
                                    "the foreign key of {relation} that references {column} is added again: ACCESS EXCLUSIVE on {relation} (its rows are not checked again when the values keep their form)"
                                ));
                            }
                        }
                    }
                    match decision {
                        Ok(note) => {
                            st.notes.push(note);
                            // No rewrite, but PostgreSQL builds anew every
                            // index whose operator class does not carry
                            // over, every index whose key follows the
                            // column's collation when that changes (one
                            // that names its own is kept), and every
                            // expression or partial index on the column:
                            // each reads the whole table.
                            let mut rebuilt: Vec<&str> = old
                                .indexes
                                .iter()
                                .filter(|i| {
                                    i.expression_or_predicate
                                        || (old.type_oid != new.oid
                                            && i.opclass_default
                                            && cat.default_opclass.get(&(i.am, new.oid))
                                                != Some(&i.opclass))
                                        || (collation_changes && i.collation == old.collation.0)
                                })
                                .map(|i| i.name.as_str())
                                .collect();
                            rebuilt.dedup();
                            if !rebuilt.is_empty() {
                                scan_reasons.push(format!(
                                    "the table keeps its storage, but PostgreSQL builds index{} {} anew from every row under ACCESS EXCLUSIVE (an expression or partial index on {column}, an operator class that does not carry over to {type_text}, or a key in {column}'s collation, which changes)",
                                    if rebuilt.len() == 1 { "" } else { "es" },
                                    rebuilt.join(", ")
                                ));
                            }
                        }
                        Err(reason) => {
                            rewrite_reasons.push(reason);
                            let t = table_arg(&sim.key(table));
                            if matches!(old.typname.as_str(), "int4" | "int2")
                                && new.typname == "int8"
                            {
                                st.advice.push(format!(
                                    "evolve rewrite {t} --alter {} copies the table online (shadow table, captured changes, batched copy) and swaps it in a short transaction",
                                    shell_word(&format!(
                                        "ALTER COLUMN {} TYPE bigint",
                                        quote_ident(column)
                                    ))
                                ));
                            } else {
                                st.advice.push(format!(
                                    "expand/contract: evolve change change-type {t} {} {} adds a new column kept in step by a trigger, backfills it in batches and switches over, with no long lock",
                                    column_arg(column),
                                    shell_word(&effects::one_line(type_text))
                                ));
                            }
                        }
                    }
                    if let Some(oid) = catalog_oid(&mut sim, table) {
                        let catalog_name = catalog_column(&mut sim, table, column);
                        rebuild_targets.push((idx, oid, catalog_name, column.clone()));
                    }
                }
                Action::SetNotNull { table, column } => {
                    if !column_exists(&mut sim, table, column) {
                        if if_exists {
                            continue;
                        }
                        return Err(fail(missing_column(table, column)));
                    }
                    if let Some(note) = proven_not_null(&mut sim, table, column) {
                        st.notes.push(note);
                    } else {
                        scan_reasons.push(format!(
                            "no valid CHECK ({column} IS NOT NULL) exists, so every row is read under ACCESS EXCLUSIVE"
                        ));
                        st.advice.push(format!(
                            "add CHECK ({} IS NOT NULL) NOT VALID, VALIDATE it in a later migration (SHARE UPDATE EXCLUSIVE: reads and writes go on), then SET NOT NULL skips the scan; evolve change set-not-null {} {} writes these files",
                            quote_ident(column),
                            table_arg(&sim.key(table)),
                            column_arg(column)
                        ));
                    }
                }
                Action::AddCheck {
                    table,
                    name,
                    not_null_of,
                    not_valid,
                } => {
                    if let (Some(col), Some(state)) = (not_null_of, sim.state(table)) {
                        state
                            .not_null_checks
                            .push((name.clone(), col.clone(), !not_valid));
                    }
                    if *not_valid {
                        st.notes
                            .push("NOT VALID: existing rows are not checked".into());
                    } else {
                        scan_reasons
                            .push("the CHECK constraint is checked against every row".into());
                        st.advice.push(
                            "add it NOT VALID (no scan, short ACCESS EXCLUSIVE) and VALIDATE CONSTRAINT in a later migration (SHARE UPDATE EXCLUSIVE: reads and writes go on)".into(),
                        );
                    }
                }
                Action::AddForeignKey { not_valid, .. } => {
                    if *not_valid {
                        st.notes
                            .push("NOT VALID: existing rows are not checked".into());
                    } else {
                        scan_reasons
                            .push("every row is checked against the referenced table".into());
                        st.advice.push(
                            "add it NOT VALID and VALIDATE CONSTRAINT in a later migration: the check then runs under SHARE UPDATE EXCLUSIVE (and ROW SHARE on the referenced table), so writes go on".into(),
                        );
                    }
                }
                Action::AddIndexConstraint {
                    table,
                    using_index,
                    primary_key_index,
                } => {
                    // PRIMARY KEY USING INDEX sets the index's columns NOT
                    // NULL, which reads every row unless that is proven.
                    if let Some(index) = primary_key_index {
                        match cat.index_columns.get(index).cloned() {
                            Some(columns) => {
                                for column in columns {
                                    match proven_not_null(&mut sim, table, &column) {
                                        Some(note) => st.notes.push(note),
                                        None => scan_reasons.push(format!(
                                            "PRIMARY KEY sets {column} NOT NULL, and no valid CHECK ({column} IS NOT NULL) exists, so every row is read under ACCESS EXCLUSIVE"
                                        )),
                                    }
                                }
                            }
                            None => scan_reasons.push(format!(
                                "PRIMARY KEY sets the columns of {index} NOT NULL; evolve cannot read them, so it assumes every row is read"
                            )),
                        }
                    }
                    if !using_index {
                        scan_reasons.push("the constraint's index is built from every row".into());
                        st.advice.push(format!(
                            "CREATE UNIQUE INDEX CONCURRENTLY on {} first (in a file marked -- evolve:no-transaction), then ADD CONSTRAINT ... USING INDEX: the lock is then short",
                            plain(&sim.key(table))
                        ));
                    }
                }
                Action::ValidateConstraint { table, name } => {
                    scan_reasons.push(format!("VALIDATE reads every row to check {name}"));
                    let mut validated_in_plan = false;
                    if let Some(state) = sim.state(table) {
                        for c in &mut state.not_null_checks {
                            if c.0.as_deref() == Some(name.as_str()) {
                                c.2 = true;
                                validated_in_plan = true;
                            }
                        }
                    }
                    if !validated_in_plan
                        && let Some(oid) = catalog_oid(&mut sim, table)
                        && let Some(referenced) = cat.fk_refs.get(&(oid, name.clone()))
                    {
                        st.locks.push(PlannedLock::new(
                            referenced.clone(),
                            LockMode::RowShare,
                            held,
                        ));
                    }
                }
                Action::Rewrite { reason, .. } => {
                    rewrite_reasons.push((*reason).to_string());
                    if item.sql.to_ascii_uppercase().contains("REFRESH") {
                        st.advice.push("REFRESH MATERIALIZED VIEW CONCURRENTLY (needs a unique index) takes EXCLUSIVE: reads go on".into());
                    } else {
                        st.advice.push("an online copy avoids the long ACCESS EXCLUSIVE: evolve rewrite (or pg_repack for VACUUM FULL / CLUSTER)".into());
                    }
                }
                Action::Scan { reason, .. } => scan_reasons.push((*reason).to_string()),
                Action::DefaultPartition { parent, scanned } => {
                    if let Some(default) = cat.default_partitions.get(parent) {
                        let key = sim.key(default);
                        let relation = plain(&key);
                        if !st.locks.iter().any(|l| l.relation == relation) {
                            st.locks.push(PlannedLock::new(
                                relation,
                                LockMode::AccessExclusive,
                                held,
                            ));
                        }
                        if *scanned {
                            scan_reasons.push(format!(
                            "the default partition {} is read under ACCESS EXCLUSIVE to prove none of its rows belongs to the new partition (a CHECK constraint on it that excludes the new bound skips the scan)",
                            plain(&key)
                        ));
                        }
                    }
                }
                Action::Truncate { .. } => st
                    .notes
                    .push("TRUNCATE gives the table new, empty storage: instant".into()),
            }
        }
        let _ = created_here;
        if item.fx.concurrently && !item.file_no_transaction {
            st.advice.push(
                "PostgreSQL refuses this inside a transaction: mark the file -- evolve:no-transaction (or apply with --mixed)".into(),
            );
        }
        st.rewrites = !rewrite_reasons.is_empty();
        st.scans = st.rewrites || !scan_reasons.is_empty();
        for r in rewrite_reasons {
            st.notes.push(format!("rewrite: {r}"));
        }
        for r in scan_reasons {
            st.notes.push(format!("scan: {r}"));
        }
        if let Some((key, rel, created)) = &main {
            if let Some(file) = created {
                st.table_rows = Some(0);
                st.table_bytes = Some(0);
                st.notes.push(format!(
                    "{} is created by {file} earlier in this plan: it is new and empty",
                    plain(key)
                ));
            } else if let Some(r) = rel {
                st.table_rows = (r.rows >= 0.0).then_some(r.rows as i64);
                st.table_bytes = Some(r.bytes);
            }
        }
        let bytes = st.table_bytes.unwrap_or(0) as f64;
        st.locked_time = if st.rewrites && !main_state_new {
            magnitude(bytes / REWRITE_BYTES_PER_S).into()
        } else if st.scans && !main_state_new {
            magnitude(bytes / SCAN_BYTES_PER_S).into()
        } else {
            "instant".into()
        };
        if main_rows.is_some_and(|r| r < 0.0) && (st.rewrites || st.scans) {
            st.notes.push("the table was never analysed: its row count is unknown; the size is from its files".into());
        }
        if !item.no_transaction
            && st.locks.iter().any(|l| l.mode == LockMode::AccessExclusive)
            && st.locked_time != "instant"
        {
            st.notes.push(
                "ACCESS EXCLUSIVE blocks reads and writes until the file's transaction commits"
                    .into(),
            );
        }
        out.push(st);
    }
    rebuilds(client, items, &mut out, &rebuild_targets).await?;
    Ok(out)
}

/// Why `column` of `table` has no NULL (already NOT NULL, or a valid
/// `CHECK (column IS NOT NULL)` in the catalog or validated earlier in the
/// plan), so setting it NOT NULL reads no row; `None` when nothing proves
/// it.
fn proven_not_null(sim: &mut Sim<'_>, table: &RelName, column: &str) -> Option<String> {
    let cat = sim.cat;
    let oid = catalog_oid(sim, table);
    let name = catalog_column(sim, table, column);
    let added = sim.state(table).is_some_and(|t| t.added.contains(column));
    let already = !added
        && oid
            .and_then(|o| cat.columns.get(&(o, name.clone())))
            .is_some_and(|c| c.not_null);
    let in_plan = sim.state(table).and_then(|t| {
        t.not_null_checks
            .iter()
            .find(|(_, c, valid)| c == column && *valid)
            .cloned()
    });
    let in_catalog = oid.and_then(|o| {
        cat.checks
            .iter()
            .find(|(t, _, c, valid)| *t == o && *c == name && *valid)
            .cloned()
    });
    if already {
        Some(format!("{column} is already NOT NULL: nothing to check"))
    } else if let Some((n, _, _)) = in_plan {
        Some(format!(
            "CHECK constraint {} (validated earlier in this plan) proves {column} IS NOT NULL: no scan",
            n.unwrap_or_else(|| "(unnamed)".into())
        ))
    } else if let Some((_, n, _, _)) = in_catalog {
        Some(format!(
            "valid CHECK constraint {n} proves {column} IS NOT NULL: no scan"
        ))
    } else {
        None
    }
}

fn type_base(type_text: &str) -> String {
    let base = type_text.split('(').next().unwrap_or(type_text).trim();
    let base = base.trim_end_matches("[]");
    RelName::clone(&split_rel(base)).name
}

fn split_rel(text: &str) -> RelName {
    let parts: Vec<&str> = text.split('.').collect();
    let fold = |p: &str| {
        let p = p.trim();
        match p.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
            Some(q) => q.replace("\"\"", "\""),
            None => p.to_lowercase(),
        }
    };
    match parts.as_slice() {
        [s, n] => RelName {
            schema: Some(fold(s)),
            name: fold(n),
        },
        _ => RelName {
            schema: None,
            name: fold(text),
        },
    }
}

fn missing_column(table: &RelName, column: &str) -> String {
    format!(
        "column {column} of table {table} does not exist in the database and no earlier pending migration adds it; fix the column name"
    )
}

fn catalog_oid(sim: &mut Sim<'_>, table: &RelName) -> Option<u32> {
    let state = sim.state(table)?;
    if state.created_in.is_some() {
        return None;
    }
    state.catalog
}

/// The catalog name of a column as the plan calls it now.
fn catalog_column(sim: &mut Sim<'_>, table: &RelName, column: &str) -> String {
    sim.state(table)
        .and_then(|t| t.renamed.get(column).cloned())
        .unwrap_or_else(|| column.to_string())
}

fn column_exists(sim: &mut Sim<'_>, table: &RelName, column: &str) -> bool {
    let cat = sim.cat;
    let Some(state) = sim.state(table) else {
        return false;
    };
    if state.added.contains(column) {
        return true;
    }
    if state.dropped_columns.contains(column) {
        return false;
    }
    let Some(oid) = state.catalog.filter(|_| state.created_in.is_none()) else {
        // Created in this plan: its columns are not modelled.
        return true;
    };
    let name = state
        .renamed
        .get(column)
        .cloned()
        .unwrap_or_else(|| column.to_string());
    if state.renamed.values().any(|v| v == column) && !state.renamed.contains_key(column) {
        return false;
    }
    cat.columns.contains_key(&(oid, name))
}

/// The typmod `type_text` gives (`-2` when evolve cannot read it, which
/// counts as a change).
fn new_typmod_of(type_text: &str, new: &TypeInfo) -> i32 {
    effects::type_modifiers(type_text)
        .and_then(|m| effects::typmod(&new.typname, &m, type_text))
        .unwrap_or(-2)
}

/// Ok(note) when the type change keeps the table's storage, Err(reason)
/// when PostgreSQL rewrites it.
fn type_change(
    cat: &Catalog,
    old: &CatalogColumn,
    new: &TypeInfo,
    type_text: &str,
    using: Option<&str>,
    time_zone: &str,
) -> Result<String, String> {
    let from = &old.type_display;
    if let Some(u) = using {
        return Err(format!(
            "USING {} computes every value anew",
            effects::one_line(u)
        ));
    }
    let Some(new_typmod) = effects::type_modifiers(type_text)
        .and_then(|m| effects::typmod(&new.typname, &m, type_text))
    else {
        return Err(format!(
            "evolve cannot read the modifiers of {type_text}: assuming a rewrite"
        ));
    };
    if new.domain_constraints {
        return Err(format!(
            "domain {type_text} has constraints, checked for every row"
        ));
    }
    let length_ok = |typname: &str, info: Option<&TypeInfo>| -> Result<(), String> {
        if old.typmod == new_typmod || new_typmod == -1 {
            return Ok(());
        }
        let info = info.ok_or_else(|| format!("{type_text} is unknown"))?;
        if !info.has_length_cast {
            return Ok(());
        }
        if info.length_support && effects::length_change_is_noop(typname, old.typmod, new_typmod) {
            return Ok(());
        }
        Err(format!(
            "{from} -> {type_text}: the length coercion can change stored values, so every row is rewritten"
        ))
    };
    if old.type_oid == new.oid {
        length_ok(&new.typname, cat.types_by_oid.get(&new.oid))?;
        return Ok(format!(
            "{from} -> {type_text}: same type, the new length or precision keeps every value: no rewrite"
        ));
    }
    let pair = (old.typname.as_str(), new.typname.as_str());
    if matches!(
        pair,
        ("timestamp", "timestamptz") | ("timestamptz", "timestamp")
    ) {
        if !is_utc(time_zone) {
            return Err(format!(
                "{from} -> {type_text} under TimeZone {time_zone}: values shift by the zone's offset, so every row is rewritten (no rewrite only when the session's TimeZone is UTC)"
            ));
        }
        if !effects::length_change_is_noop(&new.typname, old.typmod, new_typmod) {
            return Err(format!(
                "{from} -> {type_text}: fewer fractional digits, every row is rewritten"
            ));
        }
        return Ok(format!(
            "{from} -> {type_text} under TimeZone {time_zone}: stored values are the same: no rewrite"
        ));
    }
    match cat.casts.get(&(old.type_oid, new.oid)).map(String::as_str) {
        Some("b") => {
            if new_typmod != -1
                && cat
                    .types_by_oid
                    .get(&new.oid)
                    .is_some_and(|t| t.has_length_cast)
            {
                return Err(format!(
                    "{from} -> {type_text}: binary-coercible, but every value is checked against the new length, and PostgreSQL rewrites the table"
                ));
            }
            Ok(format!(
                "{from} -> {type_text}: binary-coercible cast (pg_cast castmethod b): no rewrite"
            ))
        }
        Some(_) => Err(format!(
            "{from} -> {type_text}: the cast converts every value (pg_cast: not binary-coercible), so every row is rewritten"
        )),
        None => Err(format!(
            "{from} -> {type_text}: no direct cast in pg_cast, values are converted through text, so every row is rewritten"
        )),
    }
}

/// The dependents `apply` rebuilds, captured by the rebuild machinery in
/// one read-only transaction, only for columns `pg_depend` says have any.
async fn rebuilds(
    client: &Client,
    items: &[Item],
    out: &mut [PlannedStatement],
    targets: &[(usize, u32, String, String)],
) -> Result<(), MigrateError> {
    if targets.is_empty() {
        return Ok(());
    }
    let oids: Vec<u32> = targets.iter().map(|t| t.1).collect();
    let cols: Vec<String> = targets.iter().map(|t| t.2.clone()).collect();
    let rows = client
        .query(
            "SELECT DISTINCT u.i::int8, format('%I.%I.%I', n.nspname, c.relname, a.attname)
             FROM unnest($1::oid[], $2::text[]) WITH ORDINALITY AS u(rel, col, i)
             JOIN pg_attribute a ON a.attrelid = u.rel AND a.attname = u.col
             JOIN pg_class c ON c.oid = u.rel
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE EXISTS (SELECT 1 FROM pg_depend d
                           WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = u.rel
                             AND d.refobjsubid = a.attnum AND d.deptype = 'n'
                             AND d.classid IN ('pg_rewrite'::regclass, 'pg_policy'::regclass,
                                               'pg_trigger'::regclass, 'pg_attrdef'::regclass,
                                               'pg_proc'::regclass))",
            &[&oids, &cols],
        )
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut by_statement: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for r in rows {
        let i: i64 = r.try_get(0)?;
        let Some(t) = usize::try_from(i - 1).ok().and_then(|i| targets.get(i)) else {
            continue;
        };
        by_statement.entry(t.0).or_default().push(r.try_get(1)?);
    }
    client.batch_execute("BEGIN READ ONLY").await?;
    let result = async {
        for (idx, targets) in by_statement {
            let item = &items[idx];
            let st = &mut out[idx];
            let held = if item.no_transaction {
                Held::Statement
            } else {
                Held::Transaction
            };
            if item.rebuild_off {
                st.advice.push(format!(
                    "the file turns the rebuild off (-- evolve:rebuild-dependents off), and objects depend on {}: PostgreSQL will refuse the statement; remove the directive or drop and recreate them in the file",
                    targets.join(", ")
                ));
                continue;
            }
            match crate::rebuild::plan_targets(client, &item.script, targets, false).await {
                Ok(plan) => {
                    for (c, _) in plan.drops() {
                        if c.materialized || matches!(c.kind, crate::DependentKind::View) {
                            st.locks.push(PlannedLock::new(c.name.clone(), LockMode::AccessExclusive, held));
                        }
                    }
                    st.rebuild_sql = (
                        plan.drops().map(|(_, s)| s.to_string()).collect(),
                        plan.creates().map(|(_, s)| s.to_string()).collect(),
                    );
                    for c in &plan.dependents {
                        st.rebuilds.push(PlannedRebuild {
                            name: c.name.clone(),
                            kind: c.kind.as_str().to_string(),
                            depth: c.depth,
                        });
                    }
                    if plan.dependents.iter().any(|c| c.materialized && c.populated) {
                        st.notes.push("rebuilt materialized views are recreated WITH NO DATA and refreshed after the commit: unreadable until then".into());
                    }
                }
                Err(MigrateError::Script { reason, .. }) => {
                    st.advice.push(format!("apply will refuse this file: {reason}"));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    .await;
    client.batch_execute("ROLLBACK").await?;
    result
}
