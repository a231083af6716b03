//! `evolve change`: a breaking schema change written as versioned files
//! that old and new application versions survive, one file per step.
//!
//! Every change follows the same four phases (a change may skip those it
//! does not need), each named in its file by `-- evolve:phase`:
//!
//! 1. **expand**: the new structure is added beside the old one (`ADD
//!    COLUMN` without a default, `CHECK ... NOT VALID`, `FOREIGN KEY ... NOT
//!    VALID`, `CREATE INDEX CONCURRENTLY` in a no-transaction file), and a
//!    `BEFORE INSERT OR UPDATE` trigger keeps old and new in step in both
//!    directions: a row written through the old shape gets the new values,
//!    one written through the new shape gets the old. The trigger only
//!    assigns to `NEW` and never runs a statement against the table, so it
//!    cannot fire itself (no recursion to guard against). It compares
//!    values by their text (`::text`), not with the type's `=`: a `citext`
//!    value changed only in case is a change to copy, and a type without
//!    `=` would fail every write.
//! 2. **backfill**: existing rows get the new values. The file holds one
//!    `UPDATE` and `-- evolve:backfill NAME`: `evolve migrate apply` hands it
//!    to the `evolve backfill` job `NAME` (keyset batches, progress,
//!    throttling) instead of running it in one transaction; Flyway and
//!    `evolve migrate apply` without a backfill runner run it as written.
//! 3. **switch**: a verify query refuses the file, naming the job, while a
//!    row still needs the backfill; then the new structure is made
//!    authoritative (`VALIDATE`, `SET NOT NULL` over a valid check, renames).
//! 4. **contract**: the trigger and the old structure are dropped.
//!
//! The generator ([`generate`]) is pure: it takes the table as the catalog
//! describes it ([`TableInfo`]) and returns the files' SQL. Reading the
//! catalog and the checks that need the server are in `catalog`.

pub(crate) mod catalog;

use evolve_core::migration::Phase;
use evolve_pg::{QualifiedName, dollar_quote, quote_ident, quote_literal, shell_word};

/// Marks where a generated function body or `DO` block starts and ends.
/// [`Gen::file`] replaces each pair with dollar quotes whose tag the body
/// does not hold ([`dollar_quote`]): a quoted identifier in the body may
/// hold `$evolve$`. NUL, because neither PostgreSQL names and text nor
/// command-line arguments can hold it.
const TAG: &str = "\0";
/// The longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes).
const MAX_IDENT: usize = 63;
/// The first line of every generated trigger function and `DO` block
/// (both PL/pgSQL): a name in their SQL
/// (the column, or one in an `--using`, `--into` or `--merge` expression)
/// that is also a PL/pgSQL variable (`found`, `new`, `tg_op`) means the
/// column. Without it such a statement fails with "column reference is
/// ambiguous", and so does every write to the table.
const VARIABLE_CONFLICT: &str = "#variable_conflict use_column\n";

/// A change as the user asked for it. Column names are as stored (the
/// caller folds unquoted names); expressions are SQL over the table's
/// columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    RenameColumn {
        table: String,
        old: String,
        new: String,
    },
    ChangeType {
        table: String,
        column: String,
        /// The new type as typed.
        to: String,
        using: Option<String>,
    },
    SetNotNull {
        table: String,
        column: String,
        default: Option<String>,
    },
    SplitColumn {
        table: String,
        column: String,
        /// `(new column, expression over the old columns)`.
        into: Vec<(String, String)>,
        /// The old column's value from the new columns.
        merge: String,
    },
    AddForeignKey {
        table: String,
        columns: Vec<String>,
        references: String,
        to: Vec<String>,
    },
}

impl Change {
    /// The table as typed.
    pub fn table(&self) -> &str {
        match self {
            Change::RenameColumn { table, .. }
            | Change::ChangeType { table, .. }
            | Change::SetNotNull { table, .. }
            | Change::SplitColumn { table, .. }
            | Change::AddForeignKey { table, .. } => table,
        }
    }

    /// The verb, as on the command line.
    pub fn verb(&self) -> &'static str {
        match self {
            Change::RenameColumn { .. } => "rename-column",
            Change::ChangeType { .. } => "change-type",
            Change::SetNotNull { .. } => "set-not-null",
            Change::SplitColumn { .. } => "split-column",
            Change::AddForeignKey { .. } => "add-foreign-key",
        }
    }
}

/// A column as the catalog describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnInfo {
    pub name: String,
    /// `format_type(atttypid, atttypmod)`: `integer`, `character varying(20)`.
    pub type_sql: String,
    pub not_null: bool,
    /// `pg_get_expr` of the default.
    pub default: Option<String>,
    pub generated: bool,
    pub identity: bool,
    /// The column's collation (`"pg_catalog"."C"`, quoted) when it is not
    /// its type's default.
    pub collation: Option<String>,
    /// Inherited from a parent table (every column of a partition is).
    pub inherited: bool,
    /// Privileges granted on the column itself (`GRANT SELECT (c)`).
    pub grants: Vec<ColumnGrant>,
    /// `COMMENT ON COLUMN`.
    pub comment: Option<String>,
}

/// One privilege granted on a column, from its ACL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnGrant {
    /// `SELECT`, `INSERT`, `UPDATE` or `REFERENCES`.
    pub privilege: String,
    /// The role, quoted, or `PUBLIC`.
    pub grantee: String,
    pub grant_option: bool,
}

/// The table a change applies to, and what the catalog says about the
/// objects involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub name: QualifiedName,
    pub columns: Vec<ColumnInfo>,
    pub primary_key: Vec<String>,
    /// Indexes and constraints (other than NOT NULL) per column:
    /// `(column, "index users_email_key")`.
    pub column_uses: Vec<(String, String)>,
    /// Objects that read a column, as `evolve deps` names them:
    /// `(column, "view public.v")`. Views, materialized views, policies,
    /// triggers and functions are rebuilt around the switch or contract
    /// step by `evolve migrate apply`; anything else refuses the change.
    pub column_dependents: Vec<(String, String)>,
    /// A partitioned table.
    pub partitioned: bool,
    /// The table it inherits from or is a partition of (`schema.name`).
    pub parent: Option<String>,
    /// Its partitions, or the tables that inherit from it (`schema.name`).
    pub children: Vec<String>,
    /// Names a generated constraint or index must not take: the table's
    /// constraints and the relations of its schema.
    pub taken_names: Vec<String>,
}

impl TableInfo {
    pub fn column(&self, name: &str) -> Option<&ColumnInfo> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// What the catalog resolved for one change beyond the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// change-type: the new type, as `format_type` prints it.
    pub new_type: Option<String>,
    /// change-type: the new type has a collation (the shadow column then
    /// takes the column's own).
    pub new_type_collatable: bool,
    /// split-column: the type of each new column's expression.
    pub into_types: Vec<String>,
    /// add-foreign-key: the referenced table.
    pub references: Option<QualifiedName>,
    /// add-foreign-key: an index on the table starts with the columns.
    pub has_index: bool,
    /// split-column: the views that read the column directly, as `deps`
    /// names them (`view public.v`), each with the `CREATE OR REPLACE
    /// VIEW` that makes it read the merge of the new columns instead; the
    /// switch step runs them, so the contract step can drop the column.
    pub split_views: Vec<(String, String)>,
    /// split-column: what else reads the column directly (materialized
    /// views, policies, triggers, functions, rules), which the contract
    /// step could not drop it under.
    pub split_blockers: Vec<String>,
}

/// One generated file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeFile {
    pub phase: Phase,
    /// The file name's description (`rename_users_name_to_full_name_expand`).
    pub description: String,
    /// The whole file.
    pub sql: String,
}

/// A change that cannot be generated: one line naming the object, what is
/// wrong and the way out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChangeError(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, ChangeError> {
    Err(ChangeError(message.into()))
}

/// Folds a name typed on the command line as PostgreSQL folds an
/// identifier: `"Mixed"` keeps its case (doubled quotes undone), anything
/// else is lower-cased.
pub fn fold_ident(typed: &str) -> String {
    let t = typed.trim();
    match t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) if !inner.is_empty() => inner.replace("\"\"", "\""),
        _ => t.to_lowercase(),
    }
}

/// `name` cut to PostgreSQL's identifier length on a character boundary.
fn ident_name(name: &str) -> String {
    clip(name, MAX_IDENT).to_string()
}

/// The longest start of `name` of at most `bytes` bytes that ends on a
/// character boundary.
fn clip(name: &str, bytes: usize) -> &str {
    let mut end = name.len().min(bytes);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// `name1_name2_label` within PostgreSQL's identifier length, made as
/// PostgreSQL makes the names of the constraints and indexes it names
/// itself (`makeObjectName`): the longer of the two names is shortened
/// first, and the label is always kept, so a long table name never turns
/// an index's name into the table's own.
fn object_name(name1: &str, name2: &str, label: &str) -> String {
    let available = MAX_IDENT.saturating_sub(label.len() + 2);
    let (mut n1, mut n2) = (name1.len(), name2.len());
    while n1 + n2 > available {
        if n1 > n2 {
            n1 -= 1;
        } else {
            n2 -= 1;
        }
    }
    format!("{}_{}_{label}", clip(name1, n1), clip(name2, n2))
}

/// `text` for a `--` comment line: a line break or other control
/// character in it (a name may hold one) is written as an escape, so it
/// cannot end the comment and turn the rest of the name into SQL.
fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `sql` with each pair of [`TAG`] marks replaced by dollar quotes around
/// what they enclose.
fn quote_bodies(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    for (i, part) in sql.split(TAG).enumerate() {
        if i % 2 == 1 {
            out.push_str(&dollar_quote(part));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// Whether `evolve migrate apply` rebuilds a dependent (as `deps` names
/// it: `view public.v`) around an ALTER: views, materialized views,
/// policies, triggers and functions with SQL-standard bodies.
fn rebuildable(dependent: &str) -> bool {
    [
        "view ",
        "materialized view ",
        "policy ",
        "trigger ",
        "function ",
    ]
    .iter()
    .any(|k| dependent.starts_with(k))
}

/// A file-name-safe word: letters, digits and `_`.
fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_matches('_').to_string();
    if s.is_empty() { "x".to_string() } else { s }
}

/// The change's name: the job's, the trigger's and the files' stem.
pub fn change_id(change: &Change, table: &QualifiedName) -> String {
    let t = slug(&table.name);
    let id = match change {
        Change::RenameColumn { old, new, .. } => {
            format!("rename_{t}_{}_to_{}", slug(old), slug(new))
        }
        Change::ChangeType { column, .. } => format!("change_type_{t}_{}", slug(column)),
        Change::SetNotNull { column, .. } => format!("set_not_null_{t}_{}", slug(column)),
        Change::SplitColumn { column, .. } => format!("split_{t}_{}", slug(column)),
        Change::AddForeignKey { columns, .. } => {
            let cols: Vec<String> = columns.iter().map(|c| slug(c)).collect();
            format!("fk_{t}_{}", cols.join("_"))
        }
    };
    ident_name(&id)
}

/// Refuses expressions that would end the generated SQL around them.
fn check_expression(what: &str, expr: &str) -> Result<(), ChangeError> {
    if expr.trim().is_empty() {
        return refuse(format!("{what} is empty; give an SQL expression"));
    }
    Ok(())
}

/// Writes the files of `change` on `table`.
pub fn generate(
    change: &Change,
    table: &TableInfo,
    resolved: &Resolved,
) -> Result<Vec<ChangeFile>, ChangeError> {
    let g = Gen::new(change, table, resolved);
    match change {
        Change::RenameColumn { old, new, .. } => g.rename(old, new),
        Change::ChangeType { column, using, .. } => {
            let Some(new_type) = resolved.new_type.as_deref() else {
                return refuse("change-type needs the new type resolved from the catalog");
            };
            g.change_type(column, new_type, using.as_deref())
        }
        Change::SetNotNull {
            column, default, ..
        } => g.set_not_null(column, default.as_deref()),
        Change::SplitColumn {
            column,
            into,
            merge,
            ..
        } => g.split(column, into, &resolved.into_types, merge),
        Change::AddForeignKey { columns, to, .. } => {
            let Some(other) = resolved.references.as_ref() else {
                return refuse(
                    "add-foreign-key needs the referenced table resolved from the catalog",
                );
            };
            g.foreign_key(columns, other, to, resolved.has_index)
        }
    }
}

/// What every file of one change shares.
struct Gen<'a> {
    change: &'a Change,
    table: &'a TableInfo,
    resolved: &'a Resolved,
    /// `"schema"."table"`.
    t: String,
    id: String,
    function: String,
    trigger: String,
}

impl<'a> Gen<'a> {
    fn new(change: &'a Change, table: &'a TableInfo, resolved: &'a Resolved) -> Gen<'a> {
        let id = change_id(change, &table.name);
        let function = QualifiedName::new(
            table.name.schema.clone(),
            ident_name(&format!("evolve_{id}")),
        )
        .to_string();
        Gen {
            change,
            table,
            resolved,
            t: table.name.to_string(),
            trigger: quote_ident(&ident_name(&format!("evolve_{id}"))),
            function,
            id,
        }
    }

    fn column(&self, name: &str) -> Result<&'a ColumnInfo, ChangeError> {
        self.table.column(name).ok_or_else(|| {
            ChangeError(format!(
                "column {} of table {} does not exist; check the name (see \\d {} in psql)",
                quote_ident(name),
                self.table.name.plain(),
                self.table.name.plain()
            ))
        })
    }

    fn absent(&self, name: &str) -> Result<(), ChangeError> {
        if self.table.column(name).is_some() {
            return refuse(format!(
                "column {} of table {} already exists; choose another name, or drop it first",
                quote_ident(name),
                self.table.name.plain()
            ));
        }
        if name.is_empty() || name.len() > MAX_IDENT {
            return refuse(format!(
                "column name {name:?} must have 1 to {MAX_IDENT} bytes; choose another name"
            ));
        }
        Ok(())
    }

    /// A new column named on the command line: absent, and without a
    /// control character (legal in a quoted name, but a trap in every
    /// file and terminal that shows it).
    fn new_column(&self, name: &str) -> Result<(), ChangeError> {
        if name.chars().any(char::is_control) {
            return refuse(format!(
                "column name {name:?} holds a control character (a line break, a tab); choose a name without one"
            ));
        }
        self.absent(name)
    }

    /// A column the change replaces: nothing may read it that the change
    /// cannot carry over.
    fn replaceable(&self, col: &ColumnInfo) -> Result<(), ChangeError> {
        let what = format!("{}.{}", self.table.name.plain(), col.name);
        if col.generated || col.identity {
            return refuse(format!(
                "column {what} is {}; evolve change {} cannot move it to a new column, change it with 'evolve rewrite' instead",
                if col.generated {
                    "a generated column"
                } else {
                    "an identity column"
                },
                self.change.verb()
            ));
        }
        if self.table.primary_key.contains(&col.name) {
            return refuse(format!(
                "column {what} is part of the primary key of {}; evolve change {} cannot replace a key column, use 'evolve rewrite' instead",
                self.table.name.plain(),
                self.change.verb()
            ));
        }
        let deps: Vec<&str> = self
            .table
            .column_dependents
            .iter()
            .filter(|(c, _)| *c == col.name)
            .map(|(_, d)| d.as_str())
            .collect();
        let it = |n: usize| if n == 1 { "it" } else { "them" };
        if !deps.is_empty() {
            match self.change {
                Change::RenameColumn { new, .. } => {
                    return refuse(format!(
                        "column {what} is read by {}, whose definition names {}, so the contract step cannot drop it and rebuild {} onto {}; rename the column through a view-compatible path (a view of your own that exposes the new name) or drop {} and recreate {} in a migration of its own around this change",
                        deps.join(", "),
                        quote_ident(&col.name),
                        it(deps.len()),
                        quote_ident(new),
                        it(deps.len()),
                        it(deps.len()),
                    ));
                }
                // Views that read the column are redefined over the new
                // columns at the switch step; anything else that reads it
                // directly refuses.
                Change::SplitColumn { .. }
                    if self.resolved.split_blockers.is_empty()
                        && !self.resolved.split_views.is_empty() => {}
                Change::SplitColumn { into, .. } => {
                    let deps: Vec<&str> = if self.resolved.split_blockers.is_empty() {
                        deps.clone()
                    } else {
                        self.resolved
                            .split_blockers
                            .iter()
                            .map(String::as_str)
                            .collect()
                    };
                    return refuse(format!(
                        "column {what} is read by {}, whose definition names {}, which the contract step drops, so {} cannot be rebuilt onto {} (split-column redefines only plain views over the new columns); drop {} and recreate {} over the new columns in a migration of its own around this change",
                        deps.join(", "),
                        quote_ident(&col.name),
                        it(deps.len()),
                        into.iter()
                            .map(|(n, _)| quote_ident(n))
                            .collect::<Vec<_>>()
                            .join(", "),
                        it(deps.len()),
                        it(deps.len()),
                    ));
                }
                _ => {}
            }
        }
        let fixed: Vec<&str> = deps.iter().copied().filter(|d| !rebuildable(d)).collect();
        if !fixed.is_empty() {
            return refuse(format!(
                "column {what} is read by {}, which evolve cannot rebuild onto the new column automatically; change {} to read the new column in a migration of your own after the expand step, or drop {} before this change",
                fixed.join(", "),
                it(fixed.len()),
                it(fixed.len()),
            ));
        }
        let uses: Vec<&str> = self
            .table
            .column_uses
            .iter()
            .filter(|(c, _)| *c == col.name)
            .map(|(_, d)| d.as_str())
            .collect();
        if !uses.is_empty() {
            return refuse(format!(
                "column {what} is used by {}, which would be dropped with it at the contract step; create the same on the new column in a migration of your own first, or change the column with 'evolve rewrite'",
                uses.join(", ")
            ));
        }
        Ok(())
    }

    /// A change whose trigger keeps old and new in step: the trigger must
    /// see every row. A row trigger fires for the rows of its own table
    /// only (a partitioned table's is cloned onto every partition, an
    /// inheritance parent's is not), so a write to a child's row would go
    /// unsynced and the backfill would then copy the stale side over it.
    fn trigger_sees_every_row(&self) -> Result<(), ChangeError> {
        if !self.table.partitioned && !self.table.children.is_empty() {
            return refuse(format!(
                "table {} has inheritance children ({}), whose rows its triggers do not see, so evolve change {} could not keep their columns in step; make the change on each table in migrations of your own, or detach the children (ALTER TABLE ... NO INHERIT) around it",
                self.table.name.plain(),
                self.table.children.join(", "),
                self.change.verb()
            ));
        }
        Ok(())
    }

    /// A column the change adds a replacement for or drops: not one the
    /// table inherits, which only its parent can rename or drop.
    fn own_column(&self, col: &ColumnInfo) -> Result<(), ChangeError> {
        if col.inherited {
            let parent = self.table.parent.as_deref().unwrap_or("its parent table");
            return refuse(format!(
                "column {}.{} is inherited from {parent}, where it can only be renamed, retyped or dropped; run evolve change {} on {parent} instead",
                self.table.name.plain(),
                col.name,
                self.change.verb()
            ));
        }
        Ok(())
    }

    /// `name1_name2_label`, or with a number after the label (as PostgreSQL
    /// numbers the names it chooses) when that name is taken.
    fn free_name(&self, name1: &str, name2: &str, label: &str) -> String {
        (0..)
            .map(|n| {
                let label = if n == 0 {
                    label.to_string()
                } else {
                    format!("{label}{n}")
                };
                object_name(name1, name2, &label)
            })
            .find(|name| !self.table.taken_names.contains(name))
            .unwrap_or_default()
    }

    /// A column definition's type, with the collation of `col` when it has
    /// one of its own and the type takes one.
    fn typed_like(&self, type_sql: &str, col: &ColumnInfo, collatable: bool) -> String {
        match &col.collation {
            Some(c) if collatable => format!("{type_sql} COLLATE {c}"),
            _ => type_sql.to_string(),
        }
    }

    /// The column privileges and comment of `col`, for the column `new`
    /// that takes its place: an application whose role may use only some
    /// columns keeps using the new one, and the comment stays.
    fn carry_over(&self, col: &ColumnInfo, new: &str) -> String {
        let n = quote_ident(new);
        let mut sql = String::new();
        for g in &col.grants {
            sql.push_str(&format!(
                "GRANT {} ({n}) ON {} TO {}{};\n",
                g.privilege,
                self.t,
                g.grantee,
                if g.grant_option {
                    " WITH GRANT OPTION"
                } else {
                    ""
                }
            ));
        }
        if let Some(c) = &col.comment {
            sql.push_str(&format!(
                "COMMENT ON COLUMN {}.{n} IS {};\n",
                self.t,
                quote_literal(c)
            ));
        }
        sql
    }

    fn needs_key(&self) -> Result<(), ChangeError> {
        if self.table.primary_key.is_empty() {
            return refuse(format!(
                "table {} has no primary key, and the backfill walks the table in primary-key order; add a primary key first",
                self.table.name.plain()
            ));
        }
        Ok(())
    }

    fn header(
        &self,
        phase: Phase,
        step: usize,
        steps: usize,
        summary: &str,
        compatible: &str,
    ) -> String {
        let mut s = format!("-- evolve:phase {phase}\n");
        s.push_str(&format!(
            "-- evolve change {}: {}\n-- Step {step} of {steps} ({phase}).\n",
            self.change.verb(),
            comment_text(summary)
        ));
        for line in wrap(compatible, 74) {
            s.push_str(&format!("-- {line}\n"));
        }
        s
    }

    fn file(&self, phase: Phase, sql: String) -> ChangeFile {
        ChangeFile {
            phase,
            description: format!("{}_{}", self.id, phase.as_str()),
            sql: quote_bodies(&sql),
        }
    }

    /// `CREATE FUNCTION` and `CREATE TRIGGER` for `body` (PL/pgSQL
    /// statements before `RETURN NEW`), with `declare` variables.
    fn trigger_sql(&self, declare: &str, body: &str) -> String {
        format!(
            "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS {TAG}\n{VARIABLE_CONFLICT}{declare}BEGIN\n{body}  RETURN NEW;\nEND\n{TAG};\n\nCREATE TRIGGER {tr} BEFORE INSERT OR UPDATE ON {t}\n  FOR EACH ROW EXECUTE FUNCTION {f}();\n",
            f = self.function,
            tr = self.trigger,
            t = self.t,
        )
    }

    fn replace_function_sql(&self, declare: &str, body: &str) -> String {
        format!(
            "CREATE OR REPLACE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS {TAG}\n{VARIABLE_CONFLICT}{declare}BEGIN\n{body}  RETURN NEW;\nEND\n{TAG};\n",
            f = self.function,
        )
    }

    fn drop_trigger_sql(&self) -> String {
        format!(
            "DROP TRIGGER {tr} ON {t};\nDROP FUNCTION {f}();\n",
            tr = self.trigger,
            t = self.t,
            f = self.function
        )
    }

    /// The backfill file: `UPDATE ... SET ...` handed to job `self.id`.
    fn backfill_file(
        &self,
        step: usize,
        steps: usize,
        summary: &str,
        set: &str,
        filter: Option<&str>,
    ) -> ChangeFile {
        let mut sql = self.header(
            Phase::Backfill,
            step,
            steps,
            summary,
            "Compatible with the same application versions as the expand step. evolve migrate apply hands this UPDATE to the backfill job named below (keyset batches, resumable, throttled) and does not wait for it unless asked (--backfill wait); the switch step refuses to run until the job is done.",
        );
        let sql_head = format!("-- evolve:backfill {}\n", self.id);
        sql.insert_str(sql.find('\n').map(|i| i + 1).unwrap_or(0), &sql_head);
        sql.push_str(&format!("UPDATE {} SET {set}", self.t));
        if let Some(w) = filter {
            sql.push_str(&format!(" WHERE {w}"));
        }
        sql.push_str(";\n");
        self.file(Phase::Backfill, sql)
    }

    /// A `DO` block that refuses the switch while `pending` (a condition on
    /// the table's rows) holds for some row, naming the backfill job.
    fn verify_sql(&self, pending: &str, set: &str, filter: Option<&str>) -> String {
        let mut rerun = format!(
            "evolve backfill run --name {} --table {} --set {}",
            self.id,
            shell_word(&self.table.name.to_string()),
            shell_word(set)
        );
        if let Some(w) = filter {
            rerun.push_str(&format!(" --where {}", shell_word(w)));
        }
        let message = format!(
            "backfill job {} has not finished: rows of {} still need it",
            self.id,
            self.table.name.plain()
        );
        let hint = format!(
            "wait for it (evolve backfill status {}) or run it to the end, then apply again: {rerun}",
            self.id
        );
        format!(
            "DO {TAG}\n{VARIABLE_CONFLICT}BEGIN\n  IF EXISTS (SELECT 1 FROM {t} WHERE {pending}) THEN\n    RAISE EXCEPTION USING\n      MESSAGE = {m},\n      HINT = {h};\n  END IF;\nEND\n{TAG};\n",
            t = self.t,
            m = quote_literal(&message),
            h = quote_literal(&hint),
        )
    }

    fn not_null_via_check(&self, column: &str) -> (String, String) {
        let name = quote_ident(&self.free_name(&self.table.name.name, column, "not_null"));
        let c = quote_ident(column);
        (
            format!(
                "ALTER TABLE {} ADD CONSTRAINT {name} CHECK ({c} IS NOT NULL) NOT VALID;\n",
                self.t
            ),
            format!(
                "ALTER TABLE {t} VALIDATE CONSTRAINT {name};\nALTER TABLE {t} ALTER COLUMN {c} SET NOT NULL;\nALTER TABLE {t} DROP CONSTRAINT {name};\n",
                t = self.t
            ),
        )
    }

    fn rename(&self, old: &str, new: &str) -> Result<Vec<ChangeFile>, ChangeError> {
        let col = self.column(old)?;
        self.new_column(new)?;
        self.own_column(col)?;
        self.trigger_sees_every_row()?;
        self.replaceable(col)?;
        self.needs_key()?;
        let (o, n) = (quote_ident(old), quote_ident(new));
        let summary = format!("rename column {}.{old} to {new}", self.table.name.plain());
        let both = format!(
            "Compatible with applications that use column {o} (the current ones) and with applications that use {n}: the trigger copies every write from one to the other."
        );

        let mut expand = self.header(Phase::Expand, 1, 4, &summary, &both);
        expand.push_str(&format!(
            "\nALTER TABLE {} ADD COLUMN {n} {};\n",
            self.t,
            self.typed_like(&col.type_sql, col, true)
        ));
        let (check, switch_not_null) = self.not_null_via_check(new);
        if col.not_null {
            expand.push_str(&check);
        }
        expand.push_str(&self.carry_over(col, new));
        expand.push('\n');
        let body = format!(
            "  IF TG_OP = 'INSERT' THEN\n    IF NEW.{n} IS NULL THEN\n      NEW.{n} := NEW.{o};\n    ELSIF NEW.{o}::text IS DISTINCT FROM NEW.{n}::text THEN\n      NEW.{o} := NEW.{n};\n    END IF;\n  ELSIF NEW.{n}::text IS DISTINCT FROM NEW.{o}::text THEN\n    IF NEW.{n}::text IS DISTINCT FROM OLD.{n}::text THEN\n      NEW.{o} := NEW.{n};\n    ELSE\n      NEW.{n} := NEW.{o};\n    END IF;\n  END IF;\n"
        );
        expand.push_str(&self.trigger_sql("", &body));

        let set = format!("{n} = {o}");
        let backfill = self.backfill_file(2, 4, &summary, &set, None);

        let mut switch = self.header(
            Phase::Switch,
            3,
            4,
            &summary,
            &format!("Compatible with the same application versions as the expand step. After it, {n} holds every row's value; deploy the applications that use only {n}, then stop those that use {o} before the contract step."),
        );
        switch.push('\n');
        switch.push_str(&self.verify_sql(
            &format!("{n}::text IS DISTINCT FROM {o}::text"),
            &set,
            None,
        ));
        if col.not_null {
            switch.push_str(&switch_not_null);
        }

        let mut contract = self.header(
            Phase::Contract,
            4,
            4,
            &summary,
            &format!("Compatible only with applications that use {n}: column {o} is dropped."),
        );
        contract.push('\n');
        contract.push_str(&self.drop_trigger_sql());
        contract.push_str(&format!("ALTER TABLE {} DROP COLUMN {o};\n", self.t));
        if let Some(d) = &col.default {
            contract.push_str(&format!(
                "ALTER TABLE {} ALTER COLUMN {n} SET DEFAULT {d};\n",
                self.t
            ));
        }
        Ok(vec![
            self.file(Phase::Expand, expand),
            backfill,
            self.file(Phase::Switch, switch),
            self.file(Phase::Contract, contract),
        ])
    }

    fn change_type(
        &self,
        column: &str,
        new_type: &str,
        using: Option<&str>,
    ) -> Result<Vec<ChangeFile>, ChangeError> {
        let col = self.column(column)?;
        self.own_column(col)?;
        self.trigger_sees_every_row()?;
        self.replaceable(col)?;
        self.needs_key()?;
        if let Some(u) = using {
            check_expression("--using", u)?;
        }
        let shadow_name = ident_name(&format!("_evolve_new_{column}"));
        let old_name = ident_name(&format!("_evolve_old_{column}"));
        self.absent(&shadow_name)?;
        self.absent(&old_name)?;
        let (c, s, k) = (
            quote_ident(column),
            quote_ident(&shadow_name),
            quote_ident(&old_name),
        );
        let conv = match using {
            Some(u) => format!("({u})"),
            None => format!("{c}::{new_type}"),
        };
        let summary = format!(
            "change the type of column {}.{column} from {} to {new_type}",
            self.table.name.plain(),
            col.type_sql
        );
        let mut expand = self.header(
            Phase::Expand,
            1,
            4,
            &summary,
            &format!("Compatible with the current applications: they keep writing {c} as {}; the trigger fills {s} ({new_type}) from it.", col.type_sql),
        );
        expand.push_str(&format!(
            "\nALTER TABLE {} ADD COLUMN {s} {};\n",
            self.t,
            self.typed_like(new_type, col, self.resolved.new_type_collatable)
        ));
        let (check, switch_not_null) = self.not_null_via_check(&shadow_name);
        if col.not_null {
            expand.push_str(&check);
        }
        expand.push_str(&self.carry_over(col, &shadow_name));
        expand.push('\n');
        let forward = format!(
            "  SELECT {conv} INTO NEW.{s} FROM (SELECT NEW.*) AS {r};\n",
            r = quote_ident(&self.table.name.name)
        );
        expand.push_str(&self.trigger_sql("", &forward));

        let set = format!("{s} = {conv}");
        let backfill = self.backfill_file(2, 4, &summary, &set, None);

        let mut switch = self.header(
            Phase::Switch,
            3,
            4,
            &summary,
            &format!("Compatible with applications that write {c} as {} (their values are cast on assignment) and with those that write it as {new_type}: from here {c} has type {new_type}, and the trigger keeps the old values in {k} until the contract step.", col.type_sql),
        );
        switch.push('\n');
        switch.push_str(&self.verify_sql(
            &format!("{s}::text IS DISTINCT FROM ({conv})::text"),
            &set,
            None,
        ));
        if col.not_null {
            switch.push_str(&switch_not_null);
            switch.push_str(&format!(
                "ALTER TABLE {} ALTER COLUMN {c} DROP NOT NULL;\n",
                self.t
            ));
        }
        if col.default.is_some() {
            switch.push_str(&format!(
                "ALTER TABLE {} ALTER COLUMN {c} DROP DEFAULT;\n",
                self.t
            ));
        }
        // An ALTER TYPE to the type the column already has: no rewrite and
        // no scan, but `evolve migrate apply` rebuilds what reads the column
        // around this file, so views and materialized views are recreated
        // reading the renamed new column, not the old values in {k}.
        switch.push_str(&format!(
            "-- Rebuild what reads {} onto the new column (no rewrite: the type is unchanged).\nALTER TABLE {} ALTER COLUMN {c} TYPE {};\n",
            comment_text(&c),
            self.t,
            col.type_sql
        ));
        switch.push_str(&format!(
            "ALTER TABLE {} RENAME COLUMN {c} TO {k};\n",
            self.t
        ));
        switch.push_str(&format!(
            "ALTER TABLE {} RENAME COLUMN {s} TO {c};\n",
            self.t
        ));
        if let Some(d) = &col.default {
            switch.push_str(&format!(
                "ALTER TABLE {} ALTER COLUMN {c} SET DEFAULT {d};\n",
                self.t
            ));
        }
        let back = format!(
            "  BEGIN\n    NEW.{k} := NEW.{c}::{old};\n  EXCEPTION WHEN others THEN\n    NEW.{k} := NULL;\n  END;\n",
            old = col.type_sql
        );
        switch.push_str(&self.replace_function_sql("", &back));

        let mut contract = self.header(
            Phase::Contract,
            4,
            4,
            &summary,
            &format!("Compatible with applications that write {c} as {new_type}; the copy of the old values, {k}, is dropped."),
        );
        contract.push('\n');
        contract.push_str(&self.drop_trigger_sql());
        contract.push_str(&format!("ALTER TABLE {} DROP COLUMN {k};\n", self.t));
        Ok(vec![
            self.file(Phase::Expand, expand),
            backfill,
            self.file(Phase::Switch, switch),
            self.file(Phase::Contract, contract),
        ])
    }

    fn set_not_null(
        &self,
        column: &str,
        default: Option<&str>,
    ) -> Result<Vec<ChangeFile>, ChangeError> {
        let col = self.column(column)?;
        if col.not_null {
            return refuse(format!(
                "column {}.{column} is already NOT NULL; there is nothing to change",
                self.table.name.plain()
            ));
        }
        if let Some(d) = default {
            check_expression("--default", d)?;
            self.trigger_sees_every_row()?;
            self.needs_key()?;
        }
        let c = quote_ident(column);
        let summary = format!("make column {}.{column} NOT NULL", self.table.name.plain());
        let steps = if default.is_some() { 4 } else { 2 };
        let (check, switch_not_null) = self.not_null_via_check(column);
        let mut expand = self.header(
            Phase::Expand,
            1,
            steps,
            &summary,
            &match default {
                Some(d) => format!("Compatible with the current applications, including those that write NULL into {c}: the trigger replaces NULL with {d}."),
                None => format!("Compatible with applications that never write NULL into {c}: from here such a write fails."),
            },
        );
        expand.push('\n');
        if let Some(d) = default {
            expand.push_str(&format!(
                "ALTER TABLE {} ALTER COLUMN {c} SET DEFAULT {d};\n",
                self.t
            ));
        }
        expand.push_str(&check);
        if let Some(d) = default {
            expand.push('\n');
            expand.push_str(&self.trigger_sql(
                "",
                &format!("  IF NEW.{c} IS NULL THEN\n    NEW.{c} := {d};\n  END IF;\n"),
            ));
        }
        let mut files = vec![self.file(Phase::Expand, expand)];
        let set = default.map(|d| format!("{c} = {d}"));
        let filter = format!("{c} IS NULL");
        if let Some(set) = &set {
            files.push(self.backfill_file(2, steps, &summary, set, Some(&filter)));
        }
        let mut switch = self.header(
            Phase::Switch,
            if default.is_some() { 3 } else { 2 },
            steps,
            &summary,
            "Compatible with the same application versions as the expand step.",
        );
        switch.push('\n');
        match &set {
            Some(set) => switch.push_str(&self.verify_sql(&filter, set, Some(&filter))),
            None => switch.push_str(&format!(
                "DO {TAG}\n{VARIABLE_CONFLICT}BEGIN\n  IF EXISTS (SELECT 1 FROM {t} WHERE {filter}) THEN\n    RAISE EXCEPTION USING\n      MESSAGE = {m},\n      HINT = 'fill them first (for example with evolve change set-not-null --default EXPR), then apply again';\n  END IF;\nEND\n{TAG};\n",
                t = self.t,
                m = quote_literal(&format!("column {}.{column} still has NULL values", self.table.name.plain())),
            )),
        }
        switch.push_str(&switch_not_null);
        files.push(self.file(Phase::Switch, switch));
        if default.is_some() {
            let mut contract = self.header(
                Phase::Contract,
                4,
                4,
                &summary,
                &format!("Compatible with applications that never write NULL into {c}; the column default still fills it when an INSERT leaves it out."),
            );
            contract.push('\n');
            contract.push_str(&self.drop_trigger_sql());
            files.push(self.file(Phase::Contract, contract));
        }
        Ok(files)
    }

    fn split(
        &self,
        column: &str,
        into: &[(String, String)],
        types: &[String],
        merge: &str,
    ) -> Result<Vec<ChangeFile>, ChangeError> {
        let col = self.column(column)?;
        self.own_column(col)?;
        self.trigger_sees_every_row()?;
        self.replaceable(col)?;
        self.needs_key()?;
        if into.len() < 2 {
            return refuse(format!(
                "split-column {column} needs at least two --into \"name=EXPRESSION\"; give one for each new column"
            ));
        }
        if types.len() != into.len() {
            return refuse(
                "split-column needs the type of every --into expression from the catalog",
            );
        }
        check_expression("--merge", merge)?;
        for (i, (name, expr)) in into.iter().enumerate() {
            self.new_column(name)?;
            check_expression(&format!("--into {name}"), expr)?;
            if into[..i].iter().any(|(n, _)| n == name) {
                return refuse(format!(
                    "--into names column {name} twice; give each new column once"
                ));
            }
        }
        let c = quote_ident(column);
        let names: Vec<String> = into.iter().map(|(n, _)| quote_ident(n)).collect();
        let exprs: Vec<String> = into.iter().map(|(_, e)| format!("({e})")).collect();
        let r = quote_ident(&self.table.name.name);
        let summary = format!(
            "split column {}.{column} into {}",
            self.table.name.plain(),
            into.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let list = names.join(", ");
        let mut expand = self.header(
            Phase::Expand,
            1,
            4,
            &summary,
            &format!("Compatible with applications that use {c} (the current ones) and with applications that use {list}: the trigger computes the new columns from {c}, and {c} from the new columns."),
        );
        expand.push('\n');
        for (n, ty) in names.iter().zip(types) {
            expand.push_str(&format!("ALTER TABLE {} ADD COLUMN {n} {ty};\n", self.t));
        }
        for (n, _) in into {
            expand.push_str(&self.carry_over(
                &ColumnInfo {
                    comment: None,
                    ..col.clone()
                },
                n,
            ));
        }
        expand.push('\n');
        let vars: Vec<String> = (1..=names.len()).map(|i| format!("_evolve_{i}")).collect();
        let declare = format!(
            "DECLARE\n{}",
            vars.iter()
                .zip(types)
                .map(|(v, ty)| format!("  {v} {ty};\n"))
                .collect::<String>()
        );
        let new_row = |prefix: &str| {
            names
                .iter()
                .map(|n| format!("{prefix}.{n}::text"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let all_null = names
            .iter()
            .map(|n| format!("NEW.{n} IS NULL"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let body = format!(
            "  SELECT {exprs} INTO {vars} FROM (SELECT NEW.*) AS {r};\n  IF ({new}) IS NOT DISTINCT FROM ({vars_text}) THEN\n    NULL;\n  ELSIF (TG_OP = 'INSERT' AND NOT ({all_null}))\n     OR (TG_OP = 'UPDATE' AND ({new}) IS DISTINCT FROM ({old})) THEN\n    SELECT ({merge}) INTO NEW.{c} FROM (SELECT NEW.*) AS {r};\n  ELSE\n{assign}  END IF;\n",
            exprs = exprs.join(", "),
            vars = vars.join(", "),
            vars_text = vars
                .iter()
                .map(|v| format!("{v}::text"))
                .collect::<Vec<_>>()
                .join(", "),
            new = new_row("NEW"),
            old = new_row("OLD"),
            assign = names
                .iter()
                .zip(&vars)
                .map(|(n, v)| format!("    NEW.{n} := {v};\n"))
                .collect::<String>(),
        );
        expand.push_str(&self.trigger_sql(&declare, &body));

        let set = names
            .iter()
            .zip(&exprs)
            .map(|(n, e)| format!("{n} = {e}"))
            .collect::<Vec<_>>()
            .join(", ");
        let backfill = self.backfill_file(2, 4, &summary, &set, None);
        let mut switch = self.header(
            Phase::Switch,
            3,
            4,
            &summary,
            &format!("Compatible with the same application versions as the expand step. After it, {list} hold every row's values; deploy the applications that use only them, then stop those that use {c} before the contract step."),
        );
        switch.push('\n');
        switch.push_str(&self.verify_sql(
            &format!(
                "({}) IS DISTINCT FROM ({})",
                names
                    .iter()
                    .map(|n| format!("{n}::text"))
                    .collect::<Vec<_>>()
                    .join(", "),
                exprs
                    .iter()
                    .map(|e| format!("{e}::text"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            &set,
            None,
        ));
        if !self.resolved.split_views.is_empty() {
            let views: Vec<&str> = self
                .resolved
                .split_views
                .iter()
                .map(|(v, _)| v.as_str())
                .collect();
            switch.push_str(&format!(
                "\n-- {}\n",
                comment_text(&format!(
                    "{} read {c}: from here {} read{} ({merge}) over {list} in its place (same columns and types), so the contract step can drop {c}. Writes through {} to {c} no longer reach the table.",
                    views.join(", "),
                    if views.len() == 1 { "it" } else { "they" },
                    if views.len() == 1 { "s" } else { "" },
                    if views.len() == 1 { "it" } else { "them" },
                    merge = merge.split_whitespace().collect::<Vec<_>>().join(" "),
                ))
            ));
            for (_, sql) in &self.resolved.split_views {
                switch.push_str(sql);
            }
        }
        let mut contract = self.header(
            Phase::Contract,
            4,
            4,
            &summary,
            &format!("Compatible only with applications that use {list}: column {c} is dropped."),
        );
        contract.push('\n');
        contract.push_str(&self.drop_trigger_sql());
        contract.push_str(&format!("ALTER TABLE {} DROP COLUMN {c};\n", self.t));
        Ok(vec![
            self.file(Phase::Expand, expand),
            backfill,
            self.file(Phase::Switch, switch),
            self.file(Phase::Contract, contract),
        ])
    }

    fn foreign_key(
        &self,
        columns: &[String],
        other: &QualifiedName,
        to: &[String],
        has_index: bool,
    ) -> Result<Vec<ChangeFile>, ChangeError> {
        if columns.is_empty() || columns.len() != to.len() {
            return refuse(format!(
                "add-foreign-key needs as many --to columns as --columns ({} and {}); name one referenced column for each",
                columns.len(),
                to.len()
            ));
        }
        for c in columns {
            self.column(c)?;
        }
        if self.table.partitioned {
            return refuse(format!(
                "table {} is a partitioned table, on which PostgreSQL builds no index concurrently (and, before version 18, adds no NOT VALID foreign key); run evolve change add-foreign-key on each partition ({}), or add the foreign key to {} in a migration of your own",
                self.table.name.plain(),
                if self.table.children.is_empty() {
                    "it has none yet".to_string()
                } else {
                    self.table.children.join(", ")
                },
                self.table.name.plain()
            ));
        }
        let cols = columns
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        let refs = to
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        let name = quote_ident(&self.free_name(&self.table.name.name, &columns.join("_"), "fkey"));
        let summary = format!(
            "add a foreign key from {} ({}) to {} ({})",
            self.table.name.plain(),
            columns.join(", "),
            other.plain(),
            to.join(", ")
        );
        let compatible = format!(
            "Compatible with applications that only write {cols} values that exist in {}: from here PostgreSQL checks every new or changed row.",
            other.plain()
        );
        let steps = if has_index { 2 } else { 3 };
        let mut files = Vec::new();
        let mut step = 1;
        if !has_index {
            let mut index = self.header(Phase::Expand, step, steps, &summary, "Compatible with every application version: it only adds an index (built without blocking writes), so that the foreign key's checks and deletes on the referenced table do not scan this table.");
            index.insert_str(
                index.find('\n').map(|i| i + 1).unwrap_or(0),
                "-- evolve:no-transaction\n",
            );
            let idx =
                quote_ident(&self.free_name(&self.table.name.name, &columns.join("_"), "idx"));
            index.push_str(&format!(
                "\nCREATE INDEX CONCURRENTLY IF NOT EXISTS {idx} ON {} ({cols});\n",
                self.t
            ));
            files.push(ChangeFile {
                phase: Phase::Expand,
                description: format!("{}_index", self.id),
                sql: quote_bodies(&index),
            });
            step += 1;
        }
        let mut expand = self.header(Phase::Expand, step, steps, &summary, &compatible);
        expand.push_str(&format!(
            "\nALTER TABLE {} ADD CONSTRAINT {name} FOREIGN KEY ({cols}) REFERENCES {other} ({refs}) NOT VALID;\n",
            self.t
        ));
        files.push(self.file(Phase::Expand, expand));
        step += 1;
        let mut switch = self.header(Phase::Switch, step, steps, &summary, &compatible);
        let not_null = columns
            .iter()
            .map(|c| format!("t.{} IS NOT NULL", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(" AND ");
        let matches = columns
            .iter()
            .zip(to)
            .map(|(c, k)| format!("o.{} = t.{}", quote_ident(k), quote_ident(c)))
            .collect::<Vec<_>>()
            .join(" AND ");
        switch.push_str(&format!(
            "\nDO {TAG}\n{VARIABLE_CONFLICT}BEGIN\n  IF EXISTS (SELECT 1 FROM {t} AS t WHERE {not_null}\n             AND NOT EXISTS (SELECT 1 FROM {other} AS o WHERE {matches})) THEN\n    RAISE EXCEPTION USING\n      MESSAGE = {m},\n      HINT = 'update or delete those rows (or insert the rows they reference), then apply again';\n  END IF;\nEND\n{TAG};\nALTER TABLE {t} VALIDATE CONSTRAINT {name};\n",
            t = self.t,
            m = quote_literal(&format!(
                "rows of {} reference {} rows that do not exist, so foreign key {} cannot be validated",
                self.table.name.plain(),
                other.plain(),
                name
            )),
        ));
        files.push(self.file(Phase::Switch, switch));
        Ok(files)
    }
}

/// Words of `text` in lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// How far `apply --until-phase P` goes in `phases` (the pending files'
/// phases in apply order, `None` for a file without one): the number of
/// files it runs. It stops before the first file whose phase is later than
/// `until`, and before a file whose phase is earlier than one already run
/// (the start of the next change). Files without a phase never stop it.
pub fn until_phase(phases: &[Option<Phase>], until: Phase) -> usize {
    let mut highest: Option<Phase> = None;
    for (i, phase) in phases.iter().enumerate() {
        let Some(p) = *phase else { continue };
        if p > until || highest.is_some_and(|h| p < h) {
            return i;
        }
        highest = Some(highest.map_or(p, |h| h.max(p)));
    }
    phases.len()
}

#[cfg(test)]
mod tests;

pub use catalog::{ChangeWritten, WrittenFile, describe, write};

/// A backfill file's hand-off (`-- evolve:backfill NAME`): what `apply`
/// gives the [`BackfillRunner`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackfillHandoff {
    /// The job's name, from the directive.
    pub job: String,
    /// The file, as the history records it.
    pub script: String,
    /// The file's one `UPDATE table SET ... [WHERE ...]` statement.
    pub statement: String,
}

/// Runs or starts the backfill job a migration file hands off to. `apply`
/// calls it when it reaches such a file, then records the file as applied
/// without running its `UPDATE`; without a runner the file runs as written,
/// in one transaction, as Flyway would run it. The binary fills it with
/// `evolve backfill` (this crate sits below evolve-backfill).
pub trait BackfillRunner: std::fmt::Debug + Send + Sync {
    /// Starts (or runs to the end) the job; returns what happened in words
    /// (`started in the background as process 123`), or why it could not.
    fn hand_off<'a>(
        &'a self,
        job: &'a BackfillHandoff,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + 'a>>;
}
