//! `apply --pipeline`: migrations coordinated with a running pipeline, so
//! that no upstream `DROP COLUMN`, `ALTER COLUMN ... TYPE` or `RENAME
//! COLUMN` ever stalls a table the pipeline ingests.
//!
//! Before a file runs, its statements are parsed ([`column_changes`],
//! squawk's parser through `evolve_core::migration::effects`), the tables
//! they alter resolved on the migration's connection (OID, schema, name),
//! and the pipeline asked which of its table versions ingest those columns
//! ([`Coordinator::affected`], the admin API's `POST /coordinate`, with
//! the upstream named by `system_identifier` and `current_database()`).
//! For each such table version and each materialized view reading it
//! ([`plan`]):
//!
//! 1. before the file: the next version of the table with the columns
//!    excluded (`CREATE TABLE orders_v2 FROM SOURCE ... WITH (EXCLUDE
//!    COLUMNS (note))`), a replacement of the view over it, a wait until
//!    it is hydrated, `APPLY REPLACEMENT`, and `DROP TABLE` of the old
//!    version: it pins the columns, so it would stall at the first row
//!    change after the file's commit, and status would show it stalled;
//! 2. the file runs (in its transaction, with the coordination recorded
//!    beside its history row, `<history>_pipeline`);
//! 3. after the commit: for retyped or renamed columns the next version
//!    again, with them included (their new type or name), hydrated and
//!    applied; then the excluding version is dropped.
//!
//! When a step before the file fails or times out, what it did is undone
//! (a created version that was not applied is dropped; a view already
//! swapped is swapped back onto its old version, or onto a new copy of it
//! once it was dropped) and the file is not run; when the file fails, the
//! views are moved back onto a new copy of their old version the same
//! way, so the pipeline ends as it began.
//!
//! evolve-migrate knows no HTTP: the binary implements [`Coordinator`]
//! over the admin API, and this module decides every step.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use evolve_core::control::{
    ApplyReplacement, CreateReplacement, CreateTable, Drop, ObjectKind, QualifiedName, Span,
    Statement as Control,
};
use evolve_core::migration::effects::{self, Action};
use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use crate::MigrateError;
use crate::files::MigrationFile;

/// The future of a [`Coordinator`] call; the error is one line.
pub type CoordinatorFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// A running pipeline, as `apply --pipeline` uses it.
///
/// The contract:
///
/// - [`affected`](Self::affected) only reads: it answers which table
///   versions of the pipeline ingest the columns of `request` (the admin
///   API's `POST /coordinate`; the shapes here are its JSON).
/// - [`execute`](Self::execute) runs one statement of the pipeline's
///   control language, in full or not at all, and returns once it is
///   done (an `APPLY REPLACEMENT` once the swap is applied).
/// - [`wait_hydrated`](Self::wait_hydrated) returns once the replacement
///   named is hydrated, and fails at once when its table stalls, or when
///   `timeout` passes first.
/// - Every failure is one line that says what failed (an unreachable
///   pipeline names its address); no call ever shows a token or password.
/// - Calls are made one at a time, in the order the steps need.
pub trait Coordinator: std::fmt::Debug + Send + Sync {
    /// The pipeline's address, for messages and the history (no secret).
    fn target(&self) -> String;

    /// Which table versions ingest the columns of `request`.
    fn affected<'a>(&'a self, request: &'a Request) -> CoordinatorFuture<'a, Answer>;

    /// Runs one control statement.
    fn execute<'a>(&'a self, statement: &'a str) -> CoordinatorFuture<'a, ()>;

    /// Waits until replacement `name` is hydrated, at most `timeout`.
    fn wait_hydrated<'a>(&'a self, name: &'a str, timeout: Duration) -> CoordinatorFuture<'a, ()>;
}

/// What identifies the upstream database, as the server says it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamIdentity {
    /// `pg_control_system().system_identifier`, in decimal.
    pub system_identifier: String,
    /// `current_database()`.
    pub database: String,
}

/// One column asked about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskedColumn {
    pub schema: String,
    pub table: String,
    pub oid: Option<u32>,
    pub column: String,
    /// `drop`, `retype` or `rename`.
    pub action: String,
}

/// The question to the pipeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub upstream: UpstreamIdentity,
    pub columns: Vec<AskedColumn>,
    /// The columns each table asked about has now, by `(schema, table)`
    /// (not sent: a new version may exclude only columns that exist).
    #[serde(skip)]
    pub existing: Vec<(String, String, Vec<String>)>,
}

/// A pending replacement, by name and the view it replaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacementRef {
    pub name: String,
    pub target: String,
}

/// A source the pipeline could not match with the upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unverified {
    pub source: String,
    pub error: String,
}

/// A table version that ingests some of the columns asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AffectedTable {
    pub table: String,
    pub source: String,
    pub schema: String,
    pub upstream_table: String,
    pub state: String,
    pub error: Option<String>,
    pub columns: Vec<String>,
    pub exclude_columns: Vec<String>,
    pub text_columns: Vec<String>,
    pub interfaces: Vec<String>,
    pub replacements: Vec<ReplacementRef>,
    pub pending: Vec<ReplacementRef>,
    /// Consumers of its interfaces reading the columns asked about.
    pub readers: Vec<ContractReader>,
    /// Consumers of its interfaces that read whole documents.
    pub whole_document_readers: Vec<ContractReader>,
    /// Sinks whose databases the pipeline could not read, with the error.
    pub unread_sinks: Vec<String>,
}

/// A consumer reading a field of an interface (the pipeline's consumer
/// contracts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContractReader {
    pub interface: String,
    /// `view`, `materialized view` or `subscriber`.
    pub kind: String,
    pub consumer: String,
    pub via: String,
    /// The field path, dotted; empty for a whole-document reader.
    pub field: String,
    /// The cast it applies to the field's value.
    pub cast: Option<String>,
}

/// Why `changes` break a consumer contract of `answer`, unless every
/// field concerned is in `allowed` (`field` or `interface.field`), and
/// the warnings to print otherwise (consumers that read whole documents,
/// sinks whose databases could not be read). Pure.
///
/// A dropped or renamed column breaks every consumer reading a field of
/// it; a retyped one breaks a consumer that casts the field's value to a
/// type the new type's text form does not always cast to
/// ([`evolve_core::contract::text_casts`]).
pub fn contract_breaks(
    changes: &[ColumnChange],
    answer: &Answer,
    allowed: &[String],
) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    // (what the file does, the consumers it breaks, their fields)
    let mut breaks: Vec<(String, Vec<String>, BTreeSet<String>)> = Vec::new();
    for t in &answer.tables {
        for u in &t.unread_sinks {
            warnings.push(format!("the consumers of sink {u} could not be checked"));
        }
        for w in &t.whole_document_readers {
            let line = format!(
                "{} {} reads whole documents of {}; its use of {}.{} cannot be checked",
                w.kind,
                w.consumer,
                w.interface,
                t.upstream_table,
                t.columns.join(", ")
            );
            if !warnings.contains(&line) {
                warnings.push(line);
            }
        }
        for r in &t.readers {
            let column = r.field.split('.').next().unwrap_or_default();
            let Some(change) = changes.iter().find(|c| {
                c.column == column
                    && c.table == t.upstream_table
                    && c.schema.as_deref().is_none_or(|s| s == t.schema)
            }) else {
                continue;
            };
            let what = match &change.action {
                ColumnAction::Drop => format!(
                    "the file drops column {}.{}.{}",
                    t.schema, t.upstream_table, column
                ),
                ColumnAction::Rename { to } => format!(
                    "the file renames column {}.{}.{} to {to}",
                    t.schema, t.upstream_table, column
                ),
                ColumnAction::Retype { type_text } => match &r.cast {
                    Some(cast) if !evolve_core::contract::text_casts(type_text, cast) => {
                        format!(
                            "the file changes the type of column {}.{}.{} to {type_text}, whose text form does not always cast to {cast}",
                            t.schema, t.upstream_table, column
                        )
                    }
                    _ => continue,
                },
            };
            let qualified = format!("{}.{}", r.interface, r.field);
            if allowed
                .iter()
                .any(|a| *a == r.field || *a == qualified || *a == column)
            {
                continue;
            }
            let reader = format!(
                "{} {} ({}) reads field {} of {}{}",
                r.kind,
                r.consumer,
                r.via,
                r.field,
                r.interface,
                r.cast
                    .as_deref()
                    .map(|c| format!(" as {c}"))
                    .unwrap_or_default()
            );
            match breaks.iter_mut().find(|(w, _, _)| *w == what) {
                Some((_, readers, fields)) => {
                    if !readers.contains(&reader) {
                        readers.push(reader);
                    }
                    fields.insert(qualified);
                }
                None => breaks.push((what, vec![reader], BTreeSet::from([qualified]))),
            }
        }
    }
    if breaks.is_empty() {
        return Ok(warnings);
    }
    let mut message = String::new();
    let mut fields = BTreeSet::new();
    for (n, (what, readers, f)) in breaks.into_iter().enumerate() {
        if n > 0 {
            message.push_str("; ");
        }
        message.push_str(&format!("{what}, and {}", readers.join(", and ")));
        fields.extend(f);
    }
    Err(format!(
        "{message}; change the consumers first, or pass --allow-breaking-contract FIELD (for {}) to break them on purpose",
        fields.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// The pipeline's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Answer {
    pub sources: Vec<String>,
    pub unverified: Vec<Unverified>,
    pub tables: Vec<AffectedTable>,
    pub names: Vec<String>,
}

/// What a statement does to a column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnAction {
    Drop,
    Retype { type_text: String },
    Rename { to: String },
}

impl ColumnAction {
    fn as_str(&self) -> &'static str {
        match self {
            ColumnAction::Drop => "drop",
            ColumnAction::Retype { .. } => "retype",
            ColumnAction::Rename { .. } => "rename",
        }
    }
}

/// A column that a statement of the file drops, retypes or renames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnChange {
    /// The schema as written, if it was.
    pub schema: Option<String>,
    pub table: String,
    pub column: String,
    pub action: ColumnAction,
}

/// The column changes of `statements` (each one statement), in order.
/// Pure; runs squawk's parser on a thread with a large stack, as
/// `evolve plan` does. A statement the parser rejects changes nothing
/// here (PostgreSQL will refuse it when the file runs).
pub fn column_changes(statements: &[String]) -> Result<Vec<ColumnChange>, MigrateError> {
    let analyzed = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("evolve-coordinate-parser".into())
            .stack_size(1 << 30)
            .spawn_scoped(scope, || {
                statements
                    .iter()
                    .map(|s| effects::analyze(s).ok())
                    .collect::<Vec<_>>()
            })
            .map_err(|e| MigrateError::Usage(format!("cannot start the parser thread: {e}")))?
            .join()
            .map_err(|_| {
                MigrateError::Usage(
                    "the SQL parser failed; please report it together with the migration file"
                        .into(),
                )
            })
    })?;
    let mut out = Vec::new();
    for fx in analyzed.into_iter().flatten() {
        for action in fx.actions {
            let (table, column, action) = match action {
                Action::DropColumn { table, column, .. } => (table, column, ColumnAction::Drop),
                Action::AlterType {
                    table,
                    column,
                    type_text,
                    ..
                } => (table, column, ColumnAction::Retype { type_text }),
                Action::RenameColumn { table, from, to } => {
                    (table, from, ColumnAction::Rename { to })
                }
                _ => continue,
            };
            out.push(ColumnChange {
                schema: table.schema,
                table: table.name,
                column,
                action,
            });
        }
    }
    Ok(out)
}

/// The upstream's identity and each changed column's table resolved on
/// the migration's connection (tables that do not exist yet, created by
/// the file itself, are left out: nothing ingests them).
pub async fn request(client: &Client, changes: &[ColumnChange]) -> Result<Request, MigrateError> {
    let row = client
        .query_one(
            "SELECT system_identifier::text, current_database()::text FROM pg_control_system()",
            &[],
        )
        .await?;
    let upstream = UpstreamIdentity {
        system_identifier: row.try_get(0)?,
        database: row.try_get(1)?,
    };
    let mut columns = Vec::new();
    let mut existing = Vec::new();
    for c in changes {
        let name = match &c.schema {
            Some(s) => format!(
                "{}.{}",
                evolve_pg::quote_ident(s),
                evolve_pg::quote_ident(&c.table)
            ),
            None => evolve_pg::quote_ident(&c.table).to_string(),
        };
        let found = client
            .query_opt(
                "SELECT c.oid, n.nspname::text, c.relname::text FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE c.oid = to_regclass($1::text)",
                &[&name],
            )
            .await?;
        let Some(found) = found else { continue };
        let oid: u32 = found.try_get(0)?;
        let (schema, table): (String, String) = (found.try_get(1)?, found.try_get(2)?);
        if !existing
            .iter()
            .any(|(s, t, _): &(String, String, Vec<String>)| *s == schema && *t == table)
        {
            let names = client
                .query(
                    "SELECT attname::text FROM pg_attribute \
                     WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    &[&oid],
                )
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<String>, _>>()?;
            existing.push((schema, table, names));
        }
        let asked = AskedColumn {
            oid: Some(found.try_get(0)?),
            schema: found.try_get(1)?,
            table: found.try_get(2)?,
            column: c.column.clone(),
            action: c.action.as_str().to_string(),
        };
        if !columns.contains(&asked) {
            columns.push(asked);
        }
    }
    Ok(Request {
        upstream,
        columns,
        existing,
    })
}

/// What happens to one table version and the views reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePlan {
    pub source: String,
    /// `schema.table` upstream.
    pub schema: String,
    pub upstream_table: String,
    /// The version read now.
    pub old_table: String,
    /// The columns of the file it ingests, with what the file does.
    pub columns: Vec<(String, ColumnAction)>,
    /// The version without them, swapped in before the file.
    pub excluding: Version,
    /// The version with retyped and renamed columns included again,
    /// swapped in after the commit.
    pub including: Option<Version>,
    /// A version like the old one, created only when the file fails after
    /// the old one was dropped, to move the views back.
    pub restore: Version,
    /// The materialized views reading `old_table`, each with its
    /// replacement names.
    pub views: Vec<ViewPlan>,
}

/// One new table version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub table: String,
    pub exclude: Vec<String>,
    pub text: Vec<String>,
}

/// The replacements of one view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewPlan {
    pub view: String,
    /// Over the excluding version.
    pub before: String,
    /// Over the including version.
    pub after: Option<String>,
    /// Over the old version (or its restored copy), if a step or the
    /// file fails.
    pub back: String,
}

/// The table version after `name`: its `_vN` suffix incremented
/// (`orders_v1` → `orders_v2`, `_v2` appended otherwise), skipping names
/// taken; the pipeline's absorb controller names versions the same way.
fn next_version(name: &str, taken: &BTreeSet<String>) -> String {
    let (stem, mut n) = match name.rfind("_v") {
        Some(at) if at + 2 < name.len() && name[at + 2..].bytes().all(|b| b.is_ascii_digit()) => {
            (&name[..at], name[at + 2..].parse::<u64>().unwrap_or(1) + 1)
        }
        _ => (name, 2),
    };
    loop {
        let mut stem = stem.to_string();
        let suffix = format!("_v{n}");
        while stem.len() + suffix.len() > 63 {
            stem.pop();
        }
        let candidate = format!("{stem}{suffix}");
        if !taken.contains(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

/// A replacement of `view` over table version `table`: the view's name
/// with the table's `_vN` suffix (`orders_json_v2` over `orders_v2`), as
/// the README's manual flow names it, made unique.
fn replacement_name(view: &str, table: &str, taken: &BTreeSet<String>) -> String {
    let suffix = table
        .rfind("_v")
        .map(|at| &table[at..])
        .filter(|s| s.len() > 2 && s[2..].bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or("_v");
    let mut n = 1;
    loop {
        let tail = if n == 1 {
            suffix.to_string()
        } else {
            format!("{suffix}_{n}")
        };
        let mut stem = view.to_string();
        while stem.len() + tail.len() > 63 {
            stem.pop();
        }
        let candidate = format!("{stem}{tail}");
        if !taken.contains(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

/// The steps for `answer`, or why the file must not run. Pure.
pub fn plan(
    changes: &[ColumnChange],
    request: &Request,
    answer: &Answer,
) -> Result<Vec<TablePlan>, String> {
    if let Some(u) = answer.unverified.first() {
        return Err(format!(
            "pipeline source {} could not be matched with this database ({}); make its upstream reachable from the pipeline, then apply again",
            u.source, u.error
        ));
    }
    let mut taken: BTreeSet<String> = answer.names.iter().cloned().collect();
    let mut plans = Vec::new();
    for t in &answer.tables {
        let what = format!(
            "table {} ingests {}.{} column{} {}",
            t.table,
            t.schema,
            t.upstream_table,
            if t.columns.len() == 1 { "" } else { "s" },
            t.columns.join(", ")
        );
        if t.state == "stalled" {
            return Err(format!(
                "{what} and is stalled ({}); recover it with a replacement first, then apply again",
                t.error.as_deref().unwrap_or("no error recorded")
            ));
        }
        if t.interfaces.is_empty() {
            return Err(format!(
                "{what} and no materialized view reads it, so nothing can be swapped and the file would stall it; drop it (DROP TABLE {}) or read it from a materialized view, then apply again",
                evolve_core::control::sql_ident(&t.table)
            ));
        }
        if let Some(r) = t.replacements.first().or(t.pending.first()) {
            return Err(format!(
                "{what}, and materialized view {} has a pending replacement {}; apply it or drop it (DROP MATERIALIZED VIEW {}), then apply again",
                r.target,
                r.name,
                evolve_core::control::sql_ident(&r.name)
            ));
        }
        // What the file does to the columns of this upstream table (all
        // of them, not only the ingested ones: a dropped excluded column
        // leaves the exclusion list too).
        let oid = request
            .columns
            .iter()
            .find(|c| c.schema == t.schema && c.table == t.upstream_table)
            .and_then(|c| c.oid);
        let mine: Vec<&ColumnChange> = changes
            .iter()
            .filter(|c| {
                c.table == t.upstream_table
                    && c.schema.as_deref().is_none_or(|s| s == t.schema)
                    && request.columns.iter().any(|a| {
                        a.column == c.column
                            && a.table == t.upstream_table
                            && a.schema == t.schema
                            && a.oid == oid
                    })
            })
            .collect();
        let columns: Vec<(String, ColumnAction)> = t
            .columns
            .iter()
            .filter_map(|name| {
                mine.iter()
                    .find(|c| &c.column == name)
                    .map(|c| (name.clone(), c.action.clone()))
            })
            .collect();
        if columns.is_empty() {
            continue;
        }
        // The old version's choices, for the columns upstream has now (an
        // excluded column dropped by an earlier file is gone).
        let now = request
            .existing
            .iter()
            .find(|(s, n, _)| *s == t.schema && *n == t.upstream_table)
            .map(|(_, _, c)| c);
        let present = |list: &[String]| -> Vec<String> {
            list.iter()
                .filter(|c| now.is_none_or(|now| now.contains(c)))
                .cloned()
                .collect()
        };
        let (old_exclude, old_text) = (present(&t.exclude_columns), present(&t.text_columns));
        let mut exclude = old_exclude.clone();
        exclude.extend(columns.iter().map(|(c, _)| c.clone()));
        let text: Vec<String> = old_text
            .iter()
            .filter(|c| !columns.iter().any(|(x, _)| x == *c))
            .cloned()
            .collect();
        let excluding = Version {
            table: next_version(&t.table, &taken),
            exclude,
            text,
        };
        taken.insert(excluding.table.clone());
        let comes_back = columns
            .iter()
            .any(|(_, a)| !matches!(a, ColumnAction::Drop));
        let including = comes_back.then(|| {
            // The old version's choices, after the file: dropped columns
            // gone, renamed ones under their new names.
            let after = |list: &[String]| -> Vec<String> {
                list.iter()
                    .filter_map(|c| {
                        match mine
                            .iter()
                            .rev()
                            .find(|m| &m.column == c)
                            .map(|m| &m.action)
                        {
                            Some(ColumnAction::Drop) => None,
                            Some(ColumnAction::Rename { to }) => Some(to.clone()),
                            _ => Some(c.clone()),
                        }
                    })
                    .collect()
            };
            let version = Version {
                table: next_version(&excluding.table, &taken),
                exclude: after(&old_exclude),
                text: after(&old_text),
            };
            taken.insert(version.table.clone());
            version
        });
        let restore = Version {
            table: next_version(
                including.as_ref().map_or(&excluding.table, |v| &v.table),
                &taken,
            ),
            exclude: old_exclude.clone(),
            text: old_text.clone(),
        };
        taken.insert(restore.table.clone());
        let mut views = Vec::new();
        for view in &t.interfaces {
            let before = replacement_name(view, &excluding.table, &taken);
            taken.insert(before.clone());
            let after = including.as_ref().map(|v| {
                let name = replacement_name(view, &v.table, &taken);
                taken.insert(name.clone());
                name
            });
            let back = replacement_name(view, &t.table, &taken);
            taken.insert(back.clone());
            views.push(ViewPlan {
                view: view.clone(),
                before,
                after,
                back,
            });
        }
        plans.push(TablePlan {
            source: t.source.clone(),
            schema: t.schema.clone(),
            upstream_table: t.upstream_table.clone(),
            old_table: t.table.clone(),
            columns,
            excluding,
            including,
            restore,
            views,
        });
    }
    Ok(plans)
}

const NO_SPAN: Span = Span { start: 0, end: 0 };

/// One step: a statement of the control language, or a wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Execute(String),
    /// Wait until this replacement is hydrated.
    WaitHydrated(String),
}

impl Step {
    /// As `--dry-run` prints it.
    pub fn text(&self) -> String {
        match self {
            Step::Execute(sql) => format!("{sql};"),
            Step::WaitHydrated(name) => format!("-- wait until {name} is hydrated"),
        }
    }
}

impl TablePlan {
    fn create_table(&self, v: &Version) -> Step {
        Step::Execute(
            Control::CreateTable(CreateTable {
                name: v.table.clone(),
                if_not_exists: false,
                source: self.source.clone(),
                reference: QualifiedName::new(&self.schema, &self.upstream_table),
                exclude_columns: v.exclude.clone(),
                text_columns: v.text.clone(),
                kafka: None,
                span: NO_SPAN,
            })
            .to_sql(),
        )
    }

    fn swap(view: &str, replacement: &str, table: &str) -> [Step; 3] {
        [
            Step::Execute(
                Control::CreateReplacement(CreateReplacement {
                    name: replacement.to_string(),
                    if_not_exists: false,
                    target: view.to_string(),
                    table: table.to_string(),
                    span: NO_SPAN,
                })
                .to_sql(),
            ),
            Step::WaitHydrated(replacement.to_string()),
            Step::Execute(
                Control::ApplyReplacement(ApplyReplacement {
                    view: view.to_string(),
                    replacement: replacement.to_string(),
                    wait: None,
                    span: NO_SPAN,
                })
                .to_sql(),
            ),
        ]
    }

    fn drop(kind: ObjectKind, name: &str) -> Step {
        Step::Execute(
            Control::Drop(Drop {
                kind,
                name: name.to_string(),
                if_exists: true,
                span: NO_SPAN,
            })
            .to_sql(),
        )
    }

    /// The steps before the file: the excluding version, each view
    /// swapped onto it, and the old version dropped (it pins the columns,
    /// and would stall at the file's first row change after the commit).
    pub fn before(&self) -> Vec<Step> {
        let mut steps = vec![self.create_table(&self.excluding)];
        for v in &self.views {
            steps.extend(Self::swap(&v.view, &v.before, &self.excluding.table));
        }
        steps.push(Self::drop(ObjectKind::Table, &self.old_table));
        steps
    }

    /// The steps after the commit: for retyped or renamed columns, the
    /// including version, each view swapped onto it, and the excluding
    /// version dropped.
    pub fn after(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        if let Some(including) = &self.including {
            steps.push(self.create_table(including));
            for v in &self.views {
                if let Some(after) = &v.after {
                    steps.extend(Self::swap(&v.view, after, &including.table));
                }
            }
            steps.push(Self::drop(ObjectKind::Table, &self.excluding.table));
        }
        steps
    }

    /// The table the views read at the end.
    pub fn final_table(&self) -> &str {
        self.including
            .as_ref()
            .map_or(&self.excluding.table, |v| &v.table)
    }

    /// `note (drop), qty (retype to bigint)`.
    pub fn columns_text(&self) -> String {
        self.columns
            .iter()
            .map(|(c, a)| match a {
                ColumnAction::Drop => format!("{c} (drop)"),
                ColumnAction::Retype { type_text } => format!("{c} (type {type_text})"),
                ColumnAction::Rename { to } => format!("{c} (rename to {to})"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How far the steps before a file got, for one plan, to undo them.
#[derive(Clone, Default)]
struct Done {
    /// The excluding version was created.
    created: bool,
    /// Replacements created and not applied.
    replacements: Vec<String>,
    /// Views swapped onto the excluding version (indexes in `views`).
    swapped: Vec<usize>,
    /// The old version was dropped.
    old_dropped: bool,
}

/// A step that failed, as one line: the table, the step, the error.
fn failed(plan: &TablePlan, step: &Step, error: &str) -> String {
    format!(
        "table {} ({}.{}): step `{}` failed: {error}",
        plan.old_table,
        plan.schema,
        plan.upstream_table,
        step.text().trim_end_matches(';')
    )
}

async fn run_step(
    coordinator: &dyn Coordinator,
    step: &Step,
    timeout: Duration,
) -> Result<(), String> {
    match step {
        Step::Execute(sql) => coordinator.execute(sql).await,
        Step::WaitHydrated(name) => coordinator.wait_hydrated(name, timeout).await,
    }
}

/// Runs the steps before the file; on a failure undoes what they did and
/// returns the failure with the outcome of the undo.
pub async fn before(
    coordinator: &dyn Coordinator,
    plans: &[TablePlan],
    timeout: Duration,
) -> Result<(), String> {
    let mut done = vec![Done::default(); plans.len()];
    for (p, plan) in plans.iter().enumerate() {
        let steps = plan.before();
        for (i, step) in steps.iter().enumerate() {
            if let Err(e) = run_step(coordinator, step, timeout).await {
                let line = failed(plan, step, &e);
                return Err(match undo(coordinator, plans, &done, timeout).await {
                    Ok(()) => format!("{line}; the pipeline was left as it was"),
                    Err(u) => format!("{line}; undoing the steps before it failed too: {u}"),
                });
            }
            // The layout of `before`: the table, per view its
            // replacement, the wait and the APPLY, then the old table.
            let d = &mut done[p];
            if i == 0 {
                d.created = true;
            } else if i == steps.len() - 1 {
                d.old_dropped = true;
            } else {
                let (v, at) = ((i - 1) / 3, (i - 1) % 3);
                if at == 0 {
                    d.replacements.push(plan.views[v].before.clone());
                } else if at == 2 {
                    d.replacements.retain(|r| *r != plan.views[v].before);
                    d.swapped.push(v);
                }
            }
        }
    }
    Ok(())
}

/// Puts the pipeline back as it was before [`before`]: replacements not
/// applied dropped, views swapped back onto their old version (or, once
/// it was dropped, onto a new version like it), the excluding versions
/// dropped.
async fn undo(
    coordinator: &dyn Coordinator,
    plans: &[TablePlan],
    done: &[Done],
    timeout: Duration,
) -> Result<(), String> {
    for (plan, d) in plans.iter().zip(done) {
        let mut steps = Vec::new();
        for r in &d.replacements {
            steps.push(TablePlan::drop(ObjectKind::MaterializedView, r));
        }
        if !d.swapped.is_empty() {
            let back_to = if d.old_dropped {
                steps.push(plan.create_table(&plan.restore));
                &plan.restore.table
            } else {
                &plan.old_table
            };
            for &v in &d.swapped {
                let view = &plan.views[v];
                steps.extend(TablePlan::swap(&view.view, &view.back, back_to));
            }
        }
        if d.created {
            steps.push(TablePlan::drop(ObjectKind::Table, &plan.excluding.table));
        }
        for step in &steps {
            run_step(coordinator, step, timeout)
                .await
                .map_err(|e| failed(plan, step, &e))?;
        }
    }
    Ok(())
}

/// After the file failed (and was rolled back): every view moved onto a
/// new version like the one it read before (the old one was dropped),
/// the excluding versions dropped.
pub async fn undo_all(
    coordinator: &dyn Coordinator,
    plans: &[TablePlan],
    timeout: Duration,
) -> Result<(), String> {
    let done: Vec<Done> = plans
        .iter()
        .map(|p| Done {
            created: true,
            replacements: Vec::new(),
            swapped: (0..p.views.len()).collect(),
            old_dropped: true,
        })
        .collect();
    undo(coordinator, plans, &done, timeout).await
}

/// The steps after the commit. A failure is left as it is (the file is
/// applied; the views read the excluding version, which is consistent)
/// and returned.
pub async fn after(
    coordinator: &dyn Coordinator,
    plans: &[TablePlan],
    timeout: Duration,
) -> Result<(), String> {
    for plan in plans {
        for step in plan.after() {
            run_step(coordinator, &step, timeout)
                .await
                .map_err(|e| failed(plan, &step, &e))?;
        }
    }
    Ok(())
}

/// The parsed changes of `file` that the pipeline is to be asked about.
pub(crate) fn file_changes(file: &MigrationFile) -> Result<Vec<ColumnChange>, MigrateError> {
    let statements: Vec<String> = file
        .parsed
        .statements
        .iter()
        .map(|s| s.text.clone())
        .collect();
    column_changes(&statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(sql: &[&str]) -> Vec<ColumnChange> {
        column_changes(&sql.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn finds_drops_retypes_and_renames() {
        let found = changes(&[
            "ALTER TABLE orders DROP COLUMN note",
            "ALTER TABLE public.orders ALTER COLUMN qty TYPE bigint, ADD COLUMN x int",
            "ALTER TABLE \"Orders\" RENAME COLUMN a TO b",
            "CREATE INDEX ON orders (qty)",
            "this is not sql",
        ]);
        assert_eq!(
            found,
            vec![
                ColumnChange {
                    schema: None,
                    table: "orders".into(),
                    column: "note".into(),
                    action: ColumnAction::Drop
                },
                ColumnChange {
                    schema: Some("public".into()),
                    table: "orders".into(),
                    column: "qty".into(),
                    action: ColumnAction::Retype {
                        type_text: "bigint".into()
                    }
                },
                ColumnChange {
                    schema: None,
                    table: "Orders".into(),
                    column: "a".into(),
                    action: ColumnAction::Rename { to: "b".into() }
                },
            ]
        );
    }

    fn request(columns: &[(&str, &str)]) -> Request {
        Request {
            upstream: UpstreamIdentity {
                system_identifier: "1".into(),
                database: "shop".into(),
            },
            columns: columns
                .iter()
                .map(|(c, a)| AskedColumn {
                    schema: "public".into(),
                    table: "orders".into(),
                    oid: Some(16385),
                    column: c.to_string(),
                    action: a.to_string(),
                })
                .collect(),
            existing: Vec::new(),
        }
    }

    fn affected(columns: &[&str]) -> AffectedTable {
        AffectedTable {
            table: "orders_v1".into(),
            source: "src".into(),
            schema: "public".into(),
            upstream_table: "orders".into(),
            state: "running".into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            exclude_columns: vec!["secret".into()],
            text_columns: vec!["qty".into()],
            interfaces: vec!["orders_json".into()],
            ..AffectedTable::default()
        }
    }

    #[test]
    fn a_drop_is_one_swap_then_the_old_version_goes() {
        let c = changes(&["ALTER TABLE orders DROP COLUMN note"]);
        let answer = Answer {
            tables: vec![affected(&["note"])],
            names: vec!["orders_v1".into(), "orders_v2".into(), "orders_json".into()],
            ..Answer::default()
        };
        let plans = plan(&c, &request(&[("note", "drop")]), &answer).unwrap();
        let texts = |steps: Vec<Step>| steps.iter().map(Step::text).collect::<Vec<_>>();
        assert_eq!(
            texts(plans[0].before()),
            [
                "CREATE TABLE orders_v3 FROM SOURCE src (REFERENCE public.orders) WITH (EXCLUDE COLUMNS (secret, note), TEXT COLUMNS (qty));",
                "CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v3 FOR orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v3 t;",
                "-- wait until orders_json_v3 is hydrated",
                "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v3;",
                "DROP TABLE IF EXISTS orders_v1;",
            ]
        );
        assert!(plans[0].after().is_empty());
        assert_eq!(plans[0].restore.table, "orders_v4");
        assert_eq!(plans[0].restore.exclude, ["secret"]);
        assert_eq!(plans[0].views[0].back, "orders_json_v1");
        assert_eq!(plans[0].final_table(), "orders_v3");
    }

    #[test]
    fn a_type_change_excludes_then_includes() {
        let c = changes(&["ALTER TABLE orders ALTER COLUMN qty TYPE bigint"]);
        let answer = Answer {
            tables: vec![affected(&["qty"])],
            names: vec!["orders_v1".into(), "orders_json".into()],
            ..Answer::default()
        };
        let plans = plan(&c, &request(&[("qty", "retype")]), &answer).unwrap();
        let p = &plans[0];
        assert_eq!(p.excluding.exclude, ["secret", "qty"]);
        assert!(p.excluding.text.is_empty());
        let including = p.including.as_ref().unwrap();
        assert_eq!(including.table, "orders_v3");
        assert_eq!(including.exclude, ["secret"]);
        assert_eq!(including.text, ["qty"]);
        let after: Vec<String> = p.after().iter().map(Step::text).collect();
        assert_eq!(after.len(), 5, "{after:?}");
        assert!(after[0].starts_with("CREATE TABLE orders_v3 "), "{after:?}");
        assert_eq!(after[4], "DROP TABLE IF EXISTS orders_v2;");
        assert_eq!(p.restore.table, "orders_v4");
    }

    #[test]
    fn a_rename_includes_the_new_name() {
        let c = changes(&["ALTER TABLE orders RENAME COLUMN qty TO quantity"]);
        let answer = Answer {
            tables: vec![affected(&["qty"])],
            ..Answer::default()
        };
        let plans = plan(&c, &request(&[("qty", "rename")]), &answer).unwrap();
        assert_eq!(plans[0].including.as_ref().unwrap().text, ["quantity"]);
    }

    #[test]
    fn refusals_name_the_table_and_the_way_out() {
        let c = changes(&["ALTER TABLE orders DROP COLUMN note"]);
        let r = request(&[("note", "drop")]);
        let mut orphan = affected(&["note"]);
        orphan.interfaces.clear();
        let e = plan(
            &c,
            &r,
            &Answer {
                tables: vec![orphan],
                ..Answer::default()
            },
        )
        .unwrap_err();
        assert!(
            e.contains("table orders_v1 ingests public.orders column note"),
            "{e}"
        );
        assert!(e.contains("DROP TABLE orders_v1"), "{e}");
        let mut pending = affected(&["note"]);
        pending.pending = vec![ReplacementRef {
            name: "orders_json_x".into(),
            target: "orders_json".into(),
        }];
        let e = plan(
            &c,
            &r,
            &Answer {
                tables: vec![pending],
                ..Answer::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("pending replacement orders_json_x"), "{e}");
        let e = plan(
            &c,
            &r,
            &Answer {
                unverified: vec![Unverified {
                    source: "src".into(),
                    error: "timeout".into(),
                }],
                ..Answer::default()
            },
        )
        .unwrap_err();
        assert!(
            e.starts_with("pipeline source src could not be matched"),
            "{e}"
        );
    }

    #[test]
    fn names_follow_the_convention_and_fit() {
        let taken: BTreeSet<String> = ["orders_v2".to_string()].into();
        assert_eq!(next_version("orders_v1", &taken), "orders_v3");
        assert_eq!(next_version("orders", &BTreeSet::new()), "orders_v2");
        let long = "x".repeat(63);
        assert!(next_version(&long, &BTreeSet::new()).len() <= 63);
        assert_eq!(
            replacement_name("orders_json", "orders_v2", &BTreeSet::new()),
            "orders_json_v2"
        );
        let taken: BTreeSet<String> = ["orders_json_v2".to_string()].into();
        assert_eq!(
            replacement_name("orders_json", "orders_v2", &taken),
            "orders_json_v2_2"
        );
    }
}
