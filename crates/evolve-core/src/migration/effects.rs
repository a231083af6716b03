//! What one migration statement does to the relations it names: the lock
//! each one takes, and the facts a plan has to look up in the live catalog
//! to know whether the statement rewrites or scans the table (the old and
//! new type of a column, the functions of a default, an existing check
//! constraint, the session's time zone).
//!
//! Pure: statements are parsed with squawk's PostgreSQL parser (never by
//! pattern on the raw text), and nothing here reads a catalog. The caller
//! (`evolve plan`) resolves the names, answers the questions and decides.
//!
//! Lock modes follow PostgreSQL's documentation of each statement (and
//! `AlterTableGetLockLevel` for `ALTER TABLE`): an `ALTER TABLE` with
//! several actions takes the strongest of their locks.

use std::fmt;

use serde::{Serialize, Serializer};
use squawk_lexer::TokenKind;
use squawk_syntax::ast::{self, AstNode, SourceFile};
use squawk_syntax::{SyntaxKind, SyntaxNode};

use super::alter::split_name;
use super::classify::lex;

/// PostgreSQL's table lock modes, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockMode {
    AccessShare,
    RowShare,
    RowExclusive,
    ShareUpdateExclusive,
    Share,
    ShareRowExclusive,
    Exclusive,
    AccessExclusive,
}

impl LockMode {
    /// As PostgreSQL's documentation writes it: `ACCESS EXCLUSIVE`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::AccessShare => "ACCESS SHARE",
            LockMode::RowShare => "ROW SHARE",
            LockMode::RowExclusive => "ROW EXCLUSIVE",
            LockMode::ShareUpdateExclusive => "SHARE UPDATE EXCLUSIVE",
            LockMode::Share => "SHARE",
            LockMode::ShareRowExclusive => "SHARE ROW EXCLUSIVE",
            LockMode::Exclusive => "EXCLUSIVE",
            LockMode::AccessExclusive => "ACCESS EXCLUSIVE",
        }
    }

    /// From `pg_locks.mode` (`AccessExclusiveLock`).
    pub fn from_pg_locks(mode: &str) -> Option<LockMode> {
        Some(match mode {
            "AccessShareLock" => LockMode::AccessShare,
            "RowShareLock" => LockMode::RowShare,
            "RowExclusiveLock" => LockMode::RowExclusive,
            "ShareUpdateExclusiveLock" => LockMode::ShareUpdateExclusive,
            "ShareLock" => LockMode::Share,
            "ShareRowExclusiveLock" => LockMode::ShareRowExclusive,
            "ExclusiveLock" => LockMode::Exclusive,
            "AccessExclusiveLock" => LockMode::AccessExclusive,
            _ => return None,
        })
    }

    /// What the mode blocks, for people.
    pub fn blocks(self) -> &'static str {
        match self {
            LockMode::AccessShare => "only ACCESS EXCLUSIVE",
            LockMode::RowShare => "EXCLUSIVE and ACCESS EXCLUSIVE",
            LockMode::RowExclusive => "SHARE and stronger (index builds, not reads or writes)",
            LockMode::ShareUpdateExclusive => {
                "schema changes, VACUUM and other SHARE UPDATE EXCLUSIVE; not reads or writes"
            }
            LockMode::Share => "writes (reads go on)",
            LockMode::ShareRowExclusive => "writes (reads go on)",
            LockMode::Exclusive => "writes and SELECT ... FOR UPDATE (plain reads go on)",
            LockMode::AccessExclusive => "everything, reads included",
        }
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for LockMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A relation as written, folded like PostgreSQL folds unquoted names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelName {
    pub schema: Option<String>,
    pub name: String,
}

impl RelName {
    fn parse(text: &str) -> Option<RelName> {
        let (schema, name) = split_name(text)?;
        Some(RelName { schema, name })
    }
}

impl fmt::Display for RelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One lock the statement takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    pub relation: RelName,
    pub mode: LockMode,
    /// `relation` names an index: the lock is on the index's table (which
    /// the caller looks up) as well as on the index.
    pub on_index_table: bool,
    /// When `relation` is a partitioned table (which the caller looks up):
    /// how the statement locks its partitions, at every level. `None`
    /// when it does not reach them (`ONLY`, or a change of the parent
    /// alone such as `RENAME TO` or `OWNER TO`).
    pub partitions: Option<PartitionLock>,
}

/// The lock a statement on a partitioned table takes on its partitions,
/// as PostgreSQL 15 takes it (observed in `pg_locks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionLock {
    pub mode: LockMode,
    /// Only the partitions the statement's rows reach (an `INSERT` locks
    /// the partitions it routes rows to, an `UPDATE` or `DELETE` those
    /// its condition does not prune); otherwise every partition.
    pub reached_only: bool,
}

/// What a relation created by a statement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelKind {
    Table,
    View,
    MaterializedView,
    Index,
    Sequence,
}

/// One thing a statement does that the plan follows or asks the catalog
/// about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    CreateRelation {
        relation: RelName,
        kind: RelKind,
        if_not_exists: bool,
    },
    DropRelation {
        relation: RelName,
        if_exists: bool,
    },
    RenameRelation {
        from: RelName,
        to: String,
    },
    /// The statement needs `table` to exist (unless `if_exists`).
    Uses {
        table: RelName,
        if_exists: bool,
    },
    AddColumn {
        table: RelName,
        column: String,
        /// As written, e.g. `varchar(20)`.
        type_text: String,
        /// The default as written.
        default: Option<String>,
        /// Functions the default calls (last name part, folded).
        default_functions: Vec<String>,
        generated_stored: bool,
        identity: bool,
        /// serial, bigserial, smallserial: a `nextval` default.
        serial: bool,
        /// A CHECK, UNIQUE, PRIMARY KEY or REFERENCES on the new column
        /// makes PostgreSQL read the table (or build an index).
        checks_rows: bool,
        builds_index: bool,
    },
    DropColumn {
        table: RelName,
        column: String,
        if_exists: bool,
    },
    RenameColumn {
        table: RelName,
        from: String,
        to: String,
    },
    AlterType {
        table: RelName,
        column: String,
        type_text: String,
        /// `USING` expression, unless it is the column itself.
        using: Option<String>,
        /// `COLLATE` name as written (`"C"`, `pg_catalog."POSIX"`);
        /// without one the column takes the new type's default collation.
        collation: Option<String>,
    },
    SetNotNull {
        table: RelName,
        column: String,
    },
    /// Metadata-only change of a column (default, DROP NOT NULL, storage,
    /// statistics, ...) that still needs the column to exist.
    AlterColumnOther {
        table: RelName,
        column: String,
    },
    AddCheck {
        table: RelName,
        name: Option<String>,
        /// `CHECK (c IS NOT NULL)`: the column `c`.
        not_null_of: Option<String>,
        not_valid: bool,
    },
    AddForeignKey {
        table: RelName,
        referenced: RelName,
        not_valid: bool,
    },
    /// UNIQUE, PRIMARY KEY or EXCLUDE; `using_index` when an existing index
    /// is attached (no build).
    AddIndexConstraint {
        table: RelName,
        using_index: bool,
        /// `PRIMARY KEY USING INDEX i`: the index whose columns PostgreSQL
        /// sets NOT NULL, reading every row unless that is proven.
        primary_key_index: Option<RelName>,
    },
    ValidateConstraint {
        table: RelName,
        name: String,
    },
    /// The table gets new storage: every row is copied.
    Rewrite {
        table: RelName,
        reason: &'static str,
    },
    /// Every row is read (no rewrite).
    Scan {
        table: RelName,
        reason: &'static str,
    },
    /// The relation is emptied (new, empty storage; nothing is copied).
    Truncate {
        table: RelName,
    },
    /// A partition is added to or detached from `parent`: its default
    /// partition, if it has one, is locked ACCESS EXCLUSIVE, and when one
    /// is added (CREATE TABLE ... PARTITION OF, ATTACH PARTITION) also read
    /// to prove none of its rows belongs to the new one.
    DefaultPartition {
        parent: RelName,
        scanned: bool,
    },
    CreateFunction {
        /// Last name part, folded.
        name: String,
        /// `i`, `s` or `v`, as `pg_proc.provolatile`.
        volatility: char,
    },
    CreateType {
        name: RelName,
    },
    /// `SET [SESSION|LOCAL] TimeZone`; `None` for DEFAULT / RESET.
    SetTimeZone(Option<String>),
}

/// Everything [`analyze`] found in one statement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// The locks on relations that exist before the statement runs.
    pub locks: Vec<Lock>,
    pub actions: Vec<Action>,
    /// `CREATE INDEX CONCURRENTLY`, `DROP INDEX CONCURRENTLY`, ...
    pub concurrently: bool,
    /// False for statements this analysis does not cover: their locks are
    /// not predicted (the probe still observes them).
    pub known: bool,
}

impl Effects {
    fn lock(&mut self, relation: RelName, mode: LockMode) {
        self.lock_with(relation, mode, false);
    }

    fn lock_with(&mut self, relation: RelName, mode: LockMode, on_index_table: bool) {
        if let Some(l) = self
            .locks
            .iter_mut()
            .find(|l| l.relation == relation && l.on_index_table == on_index_table)
        {
            l.mode = l.mode.max(mode);
        } else {
            self.locks.push(Lock {
                relation,
                mode,
                on_index_table,
                partitions: None,
            });
        }
    }

    /// The statement also locks `relation`'s partitions (when it is a
    /// partitioned table) in `mode`, or, with `reached_only`, those its
    /// rows reach; `relation` is locked already.
    fn lock_partitions(&mut self, relation: &RelName, mode: LockMode, reached_only: bool) {
        if let Some(l) = self
            .locks
            .iter_mut()
            .find(|l| &l.relation == relation && !l.on_index_table)
        {
            l.partitions = Some(match l.partitions {
                Some(p) => PartitionLock {
                    mode: p.mode.max(mode),
                    reached_only: p.reached_only && reached_only,
                },
                None => PartitionLock { mode, reached_only },
            });
        }
    }
}

/// A statement squawk's parser rejects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("syntax error: {message}")]
pub struct SyntaxError {
    /// Byte offset in the statement.
    pub offset: usize,
    pub message: String,
}

/// What `statement` (one statement, as [`super::parse_script`] splits
/// them) locks and does. Never panics; a statement the parser rejects is
/// an error with its position. The parser recurses: run this on a thread
/// whose stack fits what `parse_script` bounded (see its docs).
pub fn analyze(statement: &str) -> Result<Effects, SyntaxError> {
    let parse = SourceFile::parse(statement);
    if let Some(e) = parse.errors().into_iter().next() {
        return Err(SyntaxError {
            offset: usize::from(e.range().start()),
            message: e.message().to_string(),
        });
    }
    let mut fx = Effects {
        known: true,
        ..Effects::default()
    };
    let Some(stmt) = parse.tree().stmts().next() else {
        return Ok(fx);
    };
    match stmt {
        ast::Stmt::AlterTable(a) => alter_table(&a, &mut fx),
        ast::Stmt::CreateIndex(c) => {
            let table = c
                .table_relation_name()
                .and_then(|r| r.table_name_ref())
                .and_then(|n| RelName::parse(&text(n.syntax())));
            let Some(table) = table else {
                fx.known = false;
                return Ok(fx);
            };
            fx.concurrently = c.concurrently_token().is_some();
            let mode = if fx.concurrently {
                LockMode::ShareUpdateExclusive
            } else {
                LockMode::Share
            };
            fx.lock(table.clone(), mode);
            // Each partition's index is built under the same lock, unless
            // ONLY makes an invalid index on the parent alone.
            if c.table_relation_name()
                .and_then(|r| r.only_token())
                .is_none()
            {
                fx.lock_partitions(&table, mode, false);
            }
            if let Some(name) = c
                .index()
                .and_then(|i| i.path())
                .and_then(|p| RelName::parse(&text(p.syntax())))
            {
                let name = RelName {
                    schema: name.schema.or_else(|| table.schema.clone()),
                    name: name.name,
                };
                fx.actions.push(Action::CreateRelation {
                    relation: name,
                    kind: RelKind::Index,
                    if_not_exists: c.if_not_exists().is_some(),
                });
            }
            fx.actions.push(Action::Uses {
                table: table.clone(),
                if_exists: false,
            });
            fx.actions.push(Action::Scan {
                table,
                reason: "builds the index from every row",
            });
        }
        ast::Stmt::DropIndex(d) => {
            fx.concurrently = d.concurrently_token().is_some();
            let mode = if fx.concurrently {
                LockMode::ShareUpdateExclusive
            } else {
                LockMode::AccessExclusive
            };
            for i in d.index_refs() {
                if let Some(name) = RelName::parse(&text(i.syntax())) {
                    fx.lock_with(name.clone(), mode, true);
                    fx.actions.push(Action::DropRelation {
                        relation: name,
                        if_exists: d.if_exists().is_some(),
                    });
                }
            }
        }
        ast::Stmt::Reindex(_) => reindex(statement, &mut fx),
        ast::Stmt::CreateTable(c) => {
            let Some(name) = c
                .table_name()
                .and_then(|t| t.path())
                .and_then(|p| RelName::parse(&text(p.syntax())))
            else {
                fx.known = false;
                return Ok(fx);
            };
            for node in c.syntax().descendants() {
                if let Some(r) = ast::ReferencesConstraint::cast(node.clone()) {
                    if let Some(t) = r.table().and_then(|t| RelName::parse(&text(t.syntax()))) {
                        fx.lock(t, LockMode::ShareRowExclusive);
                    }
                } else if let Some(f) = ast::ForeignKeyConstraint::cast(node.clone())
                    && let Some(t) = f
                        .table_name_ref()
                        .and_then(|t| RelName::parse(&text(t.syntax())))
                {
                    fx.lock(t, LockMode::ShareRowExclusive);
                }
            }
            if let Some(parent) = c.partition_of().and_then(|p| {
                let w = words(&text(p.syntax()));
                let at = w.iter().position(|w| w.upper == "OF")?;
                name_at(&w, at + 1)
            }) {
                fx.lock(parent.clone(), LockMode::AccessExclusive);
                fx.actions.push(Action::DefaultPartition {
                    parent,
                    scanned: true,
                });
            }
            fx.actions.push(Action::CreateRelation {
                relation: name,
                kind: RelKind::Table,
                if_not_exists: c.if_not_exists().is_some(),
            });
        }
        ast::Stmt::CreateTableAs(c) => {
            if let Some(name) = first_path(c.syntax()).and_then(|p| RelName::parse(&p)) {
                fx.actions.push(Action::CreateRelation {
                    relation: name,
                    kind: RelKind::Table,
                    if_not_exists: false,
                });
            }
        }
        ast::Stmt::CreateView(v) => {
            if let Some(name) = v
                .view()
                .and_then(|v| v.path())
                .and_then(|p| RelName::parse(&text(p.syntax())))
            {
                fx.actions.push(Action::CreateRelation {
                    relation: name,
                    kind: RelKind::View,
                    if_not_exists: v.or_replace().is_some(),
                });
            }
        }
        ast::Stmt::CreateMaterializedView(v) => {
            if let Some(name) = v
                .view()
                .and_then(|v| v.path())
                .and_then(|p| RelName::parse(&text(p.syntax())))
            {
                fx.actions.push(Action::CreateRelation {
                    relation: name,
                    kind: RelKind::MaterializedView,
                    if_not_exists: v.if_not_exists().is_some(),
                });
            }
        }
        ast::Stmt::CreateSequence(s) => {
            if let Some(name) = first_path(s.syntax()).and_then(|p| RelName::parse(&p)) {
                fx.actions.push(Action::CreateRelation {
                    relation: name,
                    kind: RelKind::Sequence,
                    if_not_exists: true,
                });
            }
        }
        ast::Stmt::DropTable(d) => {
            let if_exists = d.if_exists().is_some();
            for t in d.table_name_refs() {
                drop_relation(&text(t.syntax()), if_exists, &mut fx);
            }
        }
        ast::Stmt::DropView(d) => {
            let if_exists = d.if_exists().is_some();
            for t in d.view_refs() {
                drop_relation(&text(t.syntax()), if_exists, &mut fx);
            }
        }
        ast::Stmt::DropMaterializedView(d) => {
            let if_exists = d.if_exists().is_some();
            for t in d.view_refs() {
                drop_relation(&text(t.syntax()), if_exists, &mut fx);
            }
        }
        ast::Stmt::Truncate(t) => {
            for r in t
                .table_list()
                .into_iter()
                .flat_map(|l| l.table_relation_names())
            {
                if let Some(name) = r
                    .table_name_ref()
                    .and_then(|n| RelName::parse(&text(n.syntax())))
                {
                    fx.lock(name.clone(), LockMode::AccessExclusive);
                    if r.only_token().is_none() {
                        fx.lock_partitions(&name, LockMode::AccessExclusive, false);
                    }
                    fx.actions.push(Action::Truncate { table: name });
                }
            }
            // CASCADE also empties (and locks) every table whose foreign
            // keys reference these: which ones is in the catalog.
            if has_words(statement, &["CASCADE"]) {
                fx.known = false;
            }
        }
        ast::Stmt::Refresh(r) => {
            let Some(name) = r.view_ref().and_then(|v| RelName::parse(&text(v.syntax()))) else {
                fx.known = false;
                return Ok(fx);
            };
            if r.concurrently_token().is_some() {
                fx.lock(name.clone(), LockMode::Exclusive);
                fx.actions.push(Action::Scan {
                    table: name,
                    reason: "runs the view's query and applies the difference",
                });
            } else {
                fx.lock(name.clone(), LockMode::AccessExclusive);
                fx.actions.push(Action::Rewrite {
                    table: name,
                    reason: "runs the view's query into new storage",
                });
            }
        }
        ast::Stmt::Vacuum(_) => vacuum(statement, &mut fx),
        ast::Stmt::Cluster(c) => {
            let table = c
                .table_name_ref()
                .and_then(|t| RelName::parse(&text(t.syntax())));
            match table {
                Some(t) => {
                    fx.lock(t.clone(), LockMode::AccessExclusive);
                    fx.actions.push(Action::Rewrite {
                        table: t,
                        reason: "CLUSTER copies the table in index order",
                    });
                }
                None => fx.known = false,
            }
        }
        ast::Stmt::Lock(_) => {
            let words = words(statement);
            let mode = lock_mode_of(&words).unwrap_or(LockMode::AccessExclusive);
            let mut i = 1;
            let mut only = false;
            while i < words.len() && words[i].upper != "IN" && words[i].upper != "NOWAIT" {
                if matches!(words[i].upper.as_str(), "TABLE" | "ONLY")
                    || matches!(words[i].kind, TokenKind::Comma | TokenKind::Star)
                {
                    only = words[i].upper == "ONLY";
                    i += 1;
                    continue;
                }
                if let Some(name) = name_at(&words, i) {
                    fx.lock(name.clone(), mode);
                    if !only {
                        fx.lock_partitions(&name, mode, false);
                    }
                }
                i += 1;
                while words.get(i).is_some_and(|w| w.kind == TokenKind::Dot) {
                    i += 2;
                }
            }
        }
        ast::Stmt::CreateTrigger(t) => {
            match t
                .on_relation()
                .and_then(|o| o.relation_name_ref())
                .and_then(|r| RelName::parse(&text(r.syntax())))
            {
                Some(table) => {
                    fx.lock(table.clone(), LockMode::ShareRowExclusive);
                    // A row trigger is cloned onto every partition.
                    if has_words(statement, &["FOR", "EACH", "ROW"])
                        || has_words(statement, &["FOR", "ROW"])
                    {
                        fx.lock_partitions(&table, LockMode::ShareRowExclusive, false);
                    }
                    fx.actions.push(Action::Uses {
                        table,
                        if_exists: false,
                    });
                }
                None => fx.known = false,
            }
        }
        ast::Stmt::Insert(i) => {
            match i
                .relation_name_ref()
                .and_then(|r| RelName::parse(&text(r.syntax())))
            {
                Some(t) => {
                    fx.lock(t.clone(), LockMode::RowExclusive);
                    fx.lock_partitions(&t, LockMode::RowExclusive, true);
                    fx.actions.push(Action::Uses {
                        table: t,
                        if_exists: false,
                    });
                }
                None => fx.known = false,
            }
        }
        ast::Stmt::Update(u) => dml(
            u.relation_name()
                .and_then(|r| r.relation_name_ref())
                .map(|r| text(r.syntax())),
            "UPDATE reads the rows it matches (every row without an index on the condition)",
            &mut fx,
        ),
        ast::Stmt::Delete(d) => dml(
            d.relation_name()
                .and_then(|r| r.relation_name_ref())
                .map(|r| text(r.syntax())),
            "DELETE reads the rows it matches (every row without an index on the condition)",
            &mut fx,
        ),
        ast::Stmt::CreateFunction(f) => {
            let name = f
                .name()
                .and_then(|n| RelName::parse(&text(n.syntax())))
                .map(|n| n.name);
            if let Some(name) = name {
                let mut volatility = 'v';
                // Options outside the body: IMMUTABLE / STABLE / VOLATILE.
                if let Some(options) = f.option_list() {
                    for w in words(&text(options.syntax())) {
                        match w.upper.as_str() {
                            "IMMUTABLE" => volatility = 'i',
                            "STABLE" => volatility = 's',
                            "VOLATILE" => volatility = 'v',
                            _ => {}
                        }
                    }
                }
                fx.actions.push(Action::CreateFunction { name, volatility });
            }
        }
        ast::Stmt::CreateType(t) => {
            if let Some(name) = t
                .type_name()
                .and_then(|n| RelName::parse(&text(n.syntax())))
            {
                fx.actions.push(Action::CreateType { name });
            }
        }
        ast::Stmt::CreateDomain(d) => {
            if let Some(name) = d.domain().and_then(|n| RelName::parse(&text(n.syntax()))) {
                fx.actions.push(Action::CreateType { name });
            }
        }
        ast::Stmt::Set(_) | ast::Stmt::Reset(_) => set_time_zone(statement, &mut fx),
        // A SELECT of a function can run any statement (a migration
        // function): only the session settings and advisory locks are
        // known to lock no relation.
        ast::Stmt::Select(s) => {
            fx.known = functions_called(s.syntax())
                .iter()
                .all(|f| HARMLESS_FUNCTIONS.contains(&f.as_str()));
        }
        // CASCADE drops the columns, defaults and views that use the type
        // or function: what it locks is in the catalog, not the text.
        ast::Stmt::DropFunction(_) | ast::Stmt::DropType(_) => {
            fx.known = !has_words(statement, &["CASCADE"]);
        }
        // A DO block runs whatever it holds (EXECUTE included): unknown,
        // never "no locks".
        ast::Stmt::Do(_) => fx.known = false,
        ast::Stmt::CreateSchema(_)
        | ast::Stmt::CreateExtension(_)
        | ast::Stmt::CreateProcedure(_)
        | ast::Stmt::AlterType(_)
        | ast::Stmt::Grant(_)
        | ast::Stmt::Revoke(_)
        | ast::Stmt::Begin(_)
        | ast::Stmt::Commit(_)
        | ast::Stmt::Rollback(_)
        | ast::Stmt::EmptyStmt(_) => {}
        _ => fx.known = false,
    }
    Ok(fx)
}

/// Functions a migration's `SELECT` calls that lock no relation.
const HARMLESS_FUNCTIONS: &[&str] = &[
    "set_config",
    "current_setting",
    "pg_advisory_lock",
    "pg_advisory_xact_lock",
    "pg_advisory_unlock",
    "pg_try_advisory_lock",
    "pg_try_advisory_xact_lock",
    "pg_sleep",
    "now",
    "version",
    "current_database",
    "current_user",
];

fn alter_table(a: &ast::AlterTable, fx: &mut Effects) {
    let Some(table) = a
        .table_relation_name()
        .and_then(|r| r.table_name_ref())
        .and_then(|n| RelName::parse(&text(n.syntax())))
    else {
        fx.known = false;
        return;
    };
    let if_exists = a.if_exists().is_some();
    let only = a
        .table_relation_name()
        .and_then(|r| r.only_token())
        .is_some();
    fx.actions.push(Action::Uses {
        table: table.clone(),
        if_exists,
    });
    use LockMode::{AccessExclusive, Share, ShareRowExclusive, ShareUpdateExclusive};
    for action in a.actions() {
        let action_text = text(action.syntax());
        // What the action does to the partitions of a partitioned table
        // (PostgreSQL 15, observed in pg_locks): the changes of columns
        // and constraints recurse under the parent's lock, an index
        // constraint builds each partition's index under SHARE; a change
        // of the parent's own name, owner, schema, replica identity, row
        // security or triggers stays on it (ATTACH and DETACH lock their
        // partition by name).
        let recurses = match &action {
            ast::AlterTableAction::AddColumn(_)
            | ast::AlterTableAction::DropColumn(_)
            | ast::AlterTableAction::RenameColumn(_)
            | ast::AlterTableAction::AlterColumn(_)
            | ast::AlterTableAction::ValidateConstraint(_) => Some(None),
            ast::AlterTableAction::AddConstraint(c) => match c.constraint() {
                Some(
                    ast::Constraint::UniqueConstraint(_)
                    | ast::Constraint::PrimaryKeyConstraint(_)
                    | ast::Constraint::ExcludeConstraint(_),
                ) => Some(Some(Share)),
                _ => Some(None),
            },
            _ => None,
        };
        let mode = match action {
            ast::AlterTableAction::AddColumn(c) => {
                add_column(&table, &c, fx);
                AccessExclusive
            }
            ast::AlterTableAction::DropColumn(d) => {
                if let Some(column) = d.column_name_ref().and_then(|c| column(c.syntax())) {
                    fx.actions.push(Action::DropColumn {
                        table: table.clone(),
                        column,
                        if_exists: d.if_exists().is_some(),
                    });
                }
                AccessExclusive
            }
            ast::AlterTableAction::RenameColumn(r) => {
                let from = r.column_name_ref().and_then(|c| column(c.syntax()));
                let to = r.column_name().and_then(|c| column(c.syntax()));
                if let (Some(from), Some(to)) = (from, to) {
                    fx.actions.push(Action::RenameColumn {
                        table: table.clone(),
                        from,
                        to,
                    });
                }
                AccessExclusive
            }
            ast::AlterTableAction::TableRenameTo(r) => {
                if let Some(to) = r
                    .table_name()
                    .and_then(|t| RelName::parse(&text(t.syntax())))
                {
                    fx.actions.push(Action::RenameRelation {
                        from: table.clone(),
                        to: to.name,
                    });
                }
                AccessExclusive
            }
            ast::AlterTableAction::AlterColumn(c) => {
                let Some(col) = c.column_name_ref().and_then(|c| column(c.syntax())) else {
                    fx.known = false;
                    continue;
                };
                match c.option() {
                    Some(ast::AlterColumnOption::SetType(t)) => {
                        let type_text = t.ty().map(|t| text(t.syntax())).unwrap_or_default();
                        // `USING col` and `USING col::newtype` (the very
                        // type of the change) convert as if there were no
                        // USING; a cast to another type is an expression.
                        let same_type = |ty: Option<ast::Type>| {
                            ty.is_some_and(|ty| {
                                one_line(&text(ty.syntax()))
                                    .eq_ignore_ascii_case(&one_line(&type_text))
                            })
                        };
                        let using = t
                            .using_expr()
                            .and_then(|u| u.expr())
                            .filter(|e| {
                                let inner = match e {
                                    ast::Expr::CastExpr(c) if same_type(c.ty()) => c.expr(),
                                    ast::Expr::CastExpr(_) => return true,
                                    e => Some(e.clone()),
                                };
                                inner.is_none_or(|i| {
                                    split_name(&text(i.syntax())).map(|(_, n)| n)
                                        != Some(col.clone())
                                })
                            })
                            .map(|e| text(e.syntax()));
                        let collation = t
                            .collate()
                            .and_then(|c| c.collation_ref())
                            .map(|c| text(c.syntax()).trim().to_string());
                        fx.actions.push(Action::AlterType {
                            table: table.clone(),
                            column: col,
                            type_text,
                            using,
                            collation,
                        });
                        AccessExclusive
                    }
                    Some(ast::AlterColumnOption::SetNotNull(_)) => {
                        fx.actions.push(Action::SetNotNull {
                            table: table.clone(),
                            column: col,
                        });
                        AccessExclusive
                    }
                    Some(
                        ast::AlterColumnOption::SetStatistics(_)
                        | ast::AlterColumnOption::SetOptions(_)
                        | ast::AlterColumnOption::SetOptionsList(_)
                        | ast::AlterColumnOption::ResetOptions(_),
                    ) => {
                        fx.actions.push(Action::AlterColumnOther {
                            table: table.clone(),
                            column: col,
                        });
                        ShareUpdateExclusive
                    }
                    Some(ast::AlterColumnOption::AddGenerated(_)) => {
                        // ADD GENERATED ... AS IDENTITY on an existing column
                        // only attaches a sequence.
                        fx.actions.push(Action::AlterColumnOther {
                            table: table.clone(),
                            column: col,
                        });
                        AccessExclusive
                    }
                    Some(ast::AlterColumnOption::SetExpression(_)) => {
                        fx.actions.push(Action::Rewrite {
                            table: table.clone(),
                            reason: "SET EXPRESSION recomputes the generated column for every row",
                        });
                        AccessExclusive
                    }
                    Some(_) => {
                        fx.actions.push(Action::AlterColumnOther {
                            table: table.clone(),
                            column: col,
                        });
                        AccessExclusive
                    }
                    None => {
                        fx.known = false;
                        AccessExclusive
                    }
                }
            }
            ast::AlterTableAction::AddConstraint(c) => {
                let not_valid = has_words(&action_text, &["NOT", "VALID"]);
                match c.constraint() {
                    Some(ast::Constraint::CheckConstraint(check)) => {
                        let name = check
                            .constraint_name_clause()
                            .and_then(|n| n.constraint_name())
                            .and_then(|n| column(n.syntax()));
                        let not_null_of =
                            check.expr().and_then(|e| is_not_null_of(&text(e.syntax())));
                        fx.actions.push(Action::AddCheck {
                            table: table.clone(),
                            name,
                            not_null_of,
                            not_valid,
                        });
                        AccessExclusive
                    }
                    Some(ast::Constraint::ForeignKeyConstraint(f)) => {
                        if let Some(referenced) = f
                            .table_name_ref()
                            .and_then(|t| RelName::parse(&text(t.syntax())))
                        {
                            fx.lock(referenced.clone(), ShareRowExclusive);
                            fx.actions.push(Action::AddForeignKey {
                                table: table.clone(),
                                referenced,
                                not_valid,
                            });
                        }
                        ShareRowExclusive
                    }
                    Some(
                        con @ (ast::Constraint::UniqueConstraint(_)
                        | ast::Constraint::PrimaryKeyConstraint(_)
                        | ast::Constraint::ExcludeConstraint(_)),
                    ) => {
                        let using_index = has_words(&action_text, &["USING", "INDEX"])
                            && !has_words(&action_text, &["USING", "INDEX", "TABLESPACE"]);
                        let primary_key_index = if using_index
                            && matches!(con, ast::Constraint::PrimaryKeyConstraint(_))
                        {
                            let w = words(&action_text);
                            w.windows(2)
                                .position(|p| p[0].upper == "USING" && p[1].upper == "INDEX")
                                .and_then(|at| name_at(&w, at + 2))
                                .map(|i| RelName {
                                    schema: i.schema.or_else(|| table.schema.clone()),
                                    name: i.name,
                                })
                        } else {
                            None
                        };
                        fx.actions.push(Action::AddIndexConstraint {
                            table: table.clone(),
                            using_index,
                            primary_key_index,
                        });
                        AccessExclusive
                    }
                    _ => AccessExclusive,
                }
            }
            ast::AlterTableAction::ValidateConstraint(v) => {
                if let Some(name) = v.constraint_name_ref().and_then(|n| column(n.syntax())) {
                    fx.actions.push(Action::ValidateConstraint {
                        table: table.clone(),
                        name,
                    });
                }
                ShareUpdateExclusive
            }
            ast::AlterTableAction::DisableTrigger(_)
            | ast::AlterTableAction::EnableTrigger(_)
            | ast::AlterTableAction::EnableAlwaysTrigger(_)
            | ast::AlterTableAction::EnableReplicaTrigger(_) => ShareRowExclusive,
            // Every storage parameter takes SHARE UPDATE EXCLUSIVE except
            // user_catalog_table (reloptions.c).
            ast::AlterTableAction::SetOptions(_) | ast::AlterTableAction::ResetOptions(_)
                if has_words(&action_text, &["USER_CATALOG_TABLE"]) =>
            {
                AccessExclusive
            }
            ast::AlterTableAction::SetOptions(_)
            | ast::AlterTableAction::ResetOptions(_)
            | ast::AlterTableAction::ClusterOn(_)
            | ast::AlterTableAction::SetWithoutCluster(_) => ShareUpdateExclusive,
            ast::AlterTableAction::SetLogged(_) => {
                fx.actions.push(Action::Rewrite {
                    table: table.clone(),
                    reason: "SET LOGGED writes the whole table to the WAL",
                });
                AccessExclusive
            }
            ast::AlterTableAction::SetUnlogged(_) => {
                fx.actions.push(Action::Rewrite {
                    table: table.clone(),
                    reason: "SET UNLOGGED copies the table into new storage",
                });
                AccessExclusive
            }
            ast::AlterTableAction::SetTablespace(_) => {
                fx.actions.push(Action::Rewrite {
                    table: table.clone(),
                    reason: "SET TABLESPACE copies the table's files",
                });
                AccessExclusive
            }
            ast::AlterTableAction::SetAccessMethod(_) => {
                fx.actions.push(Action::Rewrite {
                    table: table.clone(),
                    reason: "SET ACCESS METHOD rewrites the table",
                });
                AccessExclusive
            }
            // The parent gets SHARE UPDATE EXCLUSIVE, the table attached
            // ACCESS EXCLUSIVE while its rows are checked against the
            // bound (and the parent's indexes are built on it).
            ast::AlterTableAction::AttachPartition(_) => {
                match partition_name(&action_text) {
                    Some(partition) => {
                        fx.lock(partition.clone(), AccessExclusive);
                        fx.actions.push(Action::Scan {
                            table: partition,
                            reason: "ATTACH PARTITION reads the partition's rows under ACCESS EXCLUSIVE to check them against the bound (unless a valid CHECK implies it) and builds the parent's indexes on it",
                        });
                        fx.actions.push(Action::DefaultPartition {
                            parent: table.clone(),
                            scanned: true,
                        });
                    }
                    None => fx.known = false,
                }
                ShareUpdateExclusive
            }
            // The partition detached is locked like the parent.
            ast::AlterTableAction::DetachPartition(_) => {
                let mode = if has_words(&action_text, &["CONCURRENTLY"]) {
                    fx.concurrently = true;
                    ShareUpdateExclusive
                } else {
                    AccessExclusive
                };
                match partition_name(&action_text) {
                    Some(partition) => fx.lock(partition, mode),
                    None => fx.known = false,
                }
                fx.actions.push(Action::DefaultPartition {
                    parent: table.clone(),
                    scanned: false,
                });
                mode
            }
            _ => AccessExclusive,
        };
        fx.lock(table.clone(), mode);
        if !only && let Some(partition_mode) = recurses {
            fx.lock_partitions(&table, partition_mode.unwrap_or(mode), false);
        }
    }
}

/// The table named after `ATTACH PARTITION` / `DETACH PARTITION`.
fn partition_name(action_text: &str) -> Option<RelName> {
    let words = words(action_text);
    let at = words.iter().position(|w| w.upper == "PARTITION")?;
    name_at(&words, at + 1)
}

fn add_column(table: &RelName, c: &ast::AddColumn, fx: &mut Effects) {
    let Some(name) = c.column_name().and_then(|n| column(n.syntax())) else {
        fx.known = false;
        return;
    };
    let type_text = c.ty().map(|t| text(t.syntax())).unwrap_or_default();
    let serial = matches!(
        type_text.to_ascii_lowercase().as_str(),
        "serial" | "serial4" | "serial2" | "serial8" | "bigserial" | "smallserial"
    );
    let mut default = None;
    let mut default_functions = Vec::new();
    let mut generated_stored = false;
    let mut identity = false;
    let mut checks_rows = false;
    let mut builds_index = false;
    for constraint in c.constraints() {
        match constraint {
            ast::Constraint::DefaultConstraint(d) => {
                if let Some(e) = d.expr() {
                    default = Some(text(e.syntax()));
                    default_functions = functions_called(e.syntax());
                }
            }
            ast::Constraint::GeneratedConstraint(g) => {
                if has_words(&text(g.syntax()), &["IDENTITY"]) {
                    identity = true;
                } else {
                    generated_stored = true;
                }
            }
            ast::Constraint::CheckConstraint(_) => checks_rows = true,
            ast::Constraint::ReferencesConstraint(r) => {
                checks_rows = true;
                if let Some(t) = r.table().and_then(|t| RelName::parse(&text(t.syntax()))) {
                    fx.lock(t, LockMode::ShareRowExclusive);
                }
            }
            ast::Constraint::UniqueConstraint(_)
            | ast::Constraint::PrimaryKeyConstraint(_)
            | ast::Constraint::ExcludeConstraint(_) => builds_index = true,
            _ => {}
        }
    }
    fx.actions.push(Action::AddColumn {
        table: table.clone(),
        column: name,
        type_text,
        default,
        default_functions,
        generated_stored,
        identity,
        serial,
        checks_rows,
        builds_index,
    });
}

fn drop_relation(name: &str, if_exists: bool, fx: &mut Effects) {
    if let Some(name) = RelName::parse(name) {
        fx.lock(name.clone(), LockMode::AccessExclusive);
        fx.lock_partitions(&name, LockMode::AccessExclusive, false);
        fx.actions.push(Action::DropRelation {
            relation: name,
            if_exists,
        });
    }
}

fn dml(name: Option<String>, reason: &'static str, fx: &mut Effects) {
    match name.as_deref().and_then(RelName::parse) {
        Some(t) => {
            fx.lock(t.clone(), LockMode::RowExclusive);
            fx.lock_partitions(&t, LockMode::RowExclusive, true);
            fx.actions.push(Action::Uses {
                table: t.clone(),
                if_exists: false,
            });
            fx.actions.push(Action::Scan { table: t, reason });
        }
        None => fx.known = false,
    }
}

/// `REINDEX [(...)] INDEX|TABLE [CONCURRENTLY] name`.
fn reindex(statement: &str, fx: &mut Effects) {
    let words = words(statement);
    let mut i = 1;
    if words.get(i).is_some_and(|w| w.kind == TokenKind::OpenParen) {
        while i < words.len() && words[i].kind != TokenKind::CloseParen {
            i += 1;
        }
        i += 1;
    }
    let target = words.get(i).map(|w| w.upper.clone()).unwrap_or_default();
    i += 1;
    if words.get(i).is_some_and(|w| w.upper == "CONCURRENTLY") {
        fx.concurrently = true;
        i += 1;
    }
    let Some(name) = name_at(&words, i) else {
        fx.known = false;
        return;
    };
    match target.as_str() {
        "INDEX" => {
            let mode = if fx.concurrently {
                LockMode::ShareUpdateExclusive
            } else {
                LockMode::Share
            };
            fx.lock_with(name.clone(), mode, true);
            fx.actions.push(Action::Scan {
                table: name,
                reason: if fx.concurrently {
                    "REINDEX CONCURRENTLY builds the index anew from every row of its table"
                } else {
                    "REINDEX rebuilds the index from every row of its table, holding ACCESS EXCLUSIVE on the index: queries planned on the table wait, reads included"
                },
            });
        }
        "TABLE" => {
            let mode = if fx.concurrently {
                LockMode::ShareUpdateExclusive
            } else {
                LockMode::Share
            };
            fx.lock(name.clone(), mode);
            fx.actions.push(Action::Scan {
                table: name,
                reason: "REINDEX rebuilds every index from the table's rows",
            });
        }
        _ => fx.known = false,
    }
}

/// `VACUUM [FULL] [(options)] [table, ...]`.
fn vacuum(statement: &str, fx: &mut Effects) {
    let words = words(statement);
    let mut full = false;
    let mut i = 1;
    let mut tables = Vec::new();
    while i < words.len() {
        let w = &words[i];
        if w.kind == TokenKind::OpenParen && tables.is_empty() {
            // Option list: FULL [true|on], ANALYZE, ...
            let mut j = i + 1;
            while j < words.len() && words[j].kind != TokenKind::CloseParen {
                if words[j].upper == "FULL" {
                    let off = words
                        .get(j + 1)
                        .is_some_and(|v| matches!(v.upper.as_str(), "FALSE" | "OFF" | "0"));
                    full |= !off;
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        match w.upper.as_str() {
            "FULL" if tables.is_empty() => full = true,
            "FREEZE" | "VERBOSE" | "ANALYZE" | "ANALYSE" if tables.is_empty() => {}
            _ if w.kind == TokenKind::Comma => {}
            _ if w.kind == TokenKind::OpenParen => {
                // A column list after a table name.
                while i < words.len() && words[i].kind != TokenKind::CloseParen {
                    i += 1;
                }
            }
            _ => {
                if let Some(name) = name_at(&words, i) {
                    tables.push(name);
                    while words.get(i + 1).is_some_and(|w| w.kind == TokenKind::Dot) {
                        i += 2;
                    }
                }
            }
        }
        i += 1;
    }
    if tables.is_empty() {
        fx.known = false;
        return;
    }
    for t in tables {
        if full {
            fx.lock(t.clone(), LockMode::AccessExclusive);
            fx.actions.push(Action::Rewrite {
                table: t,
                reason: "VACUUM FULL copies the table into new storage",
            });
        } else {
            fx.lock(t.clone(), LockMode::ShareUpdateExclusive);
            fx.actions.push(Action::Scan {
                table: t,
                reason: "VACUUM reads the table",
            });
        }
    }
}

/// `SET [SESSION|LOCAL] TIME ZONE x`, `SET timezone = x`, `RESET timezone`,
/// `RESET ALL`.
fn set_time_zone(statement: &str, fx: &mut Effects) {
    let words = words(statement);
    let mut i = 1;
    if words
        .get(i)
        .is_some_and(|w| w.upper == "SESSION" || w.upper == "LOCAL")
    {
        i += 1;
    }
    let reset = words.first().is_some_and(|w| w.upper == "RESET");
    let is_tz = match (words.get(i), words.get(i + 1)) {
        (Some(a), Some(b)) if a.upper == "TIME" && b.upper == "ZONE" => {
            i += 2;
            true
        }
        (Some(a), _) if a.upper == "TIMEZONE" => {
            i += 1;
            true
        }
        (Some(a), _) if reset && a.upper == "ALL" => {
            fx.actions.push(Action::SetTimeZone(None));
            return;
        }
        _ => false,
    };
    if !is_tz {
        return;
    }
    if reset {
        fx.actions.push(Action::SetTimeZone(None));
        return;
    }
    if words
        .get(i)
        .is_some_and(|w| w.kind == TokenKind::Eq || w.upper == "TO")
    {
        i += 1;
    }
    let value = words.get(i).map(|w| {
        let raw = w.raw.as_str();
        if raw.starts_with('\'') {
            raw.trim_matches('\'').replace("''", "'")
        } else {
            raw.trim_matches('"').to_string()
        }
    });
    match value {
        Some(v) if v.eq_ignore_ascii_case("default") || v.eq_ignore_ascii_case("local") => {
            fx.actions.push(Action::SetTimeZone(None))
        }
        Some(v) => fx.actions.push(Action::SetTimeZone(Some(v))),
        None => {}
    }
}

/// The column a `pg_get_constraintdef` text such as `CHECK ((c IS NOT
/// NULL))` proves NOT NULL, if that is all the constraint says.
pub fn check_not_null_column(definition: &str) -> Option<String> {
    let rest = definition.trim().strip_prefix("CHECK")?;
    let rest = rest.trim_end().strip_suffix("NOT VALID").unwrap_or(rest);
    is_not_null_of(rest)
}

/// The numbers in a type's modifier list: `numeric(12, 2)` gives
/// `[12, 2]`, `varchar(20)[]` gives `[20]`, `text` nothing. `None` when a
/// modifier is not a plain number.
pub fn type_modifiers(type_text: &str) -> Option<Vec<i32>> {
    let words = words(type_text);
    let Some(open) = words.iter().position(|w| w.kind == TokenKind::OpenParen) else {
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    for w in &words[open + 1..] {
        match w.kind {
            TokenKind::CloseParen => return Some(out),
            TokenKind::Comma => {}
            _ => out.push(w.raw.parse().ok()?),
        }
    }
    None
}

/// The `atttypmod` PostgreSQL stores for a type (`pg_type.typname`) given
/// its modifiers, for the types whose length coercion evolve understands;
/// `-1` without modifiers. `None` when it cannot tell.
pub fn typmod(typname: &str, modifiers: &[i32], type_text: &str) -> Option<i32> {
    const VARHDRSZ: i32 = 4;
    match (typname, modifiers) {
        // `char` / `character` alone means char(1).
        ("bpchar", []) if !type_text.trim().eq_ignore_ascii_case("bpchar") => Some(1 + VARHDRSZ),
        (_, []) => Some(-1),
        ("varchar" | "bpchar", [n]) => n.checked_add(VARHDRSZ),
        ("numeric", [p]) => Some((p << 16) + VARHDRSZ),
        ("numeric", [p, s]) => Some(((p << 16) | (s & 0x7ff)) + VARHDRSZ),
        ("timestamp" | "timestamptz" | "time" | "timetz" | "bit" | "varbit", [n]) => Some(*n),
        _ => None,
    }
}

/// The most fractional digits of seconds PostgreSQL keeps for timestamp,
/// timestamptz, time and timetz: what a column without a precision has.
pub const MAX_TEMPORAL_PRECISION: i32 = 6;

/// Whether changing a column of type `typname` from typmod `old` to `new`
/// keeps every stored value valid, so PostgreSQL's length-coercion
/// support function skips the rewrite: longer varchar and bit varying,
/// more numeric precision at the same scale, more fractional seconds (or
/// the most there are, which is what a temporal column without a
/// precision holds: `TemporalSimplify` in PostgreSQL's datetime.c).
pub fn length_change_is_noop(typname: &str, old: i32, new: i32) -> bool {
    if old == new {
        return true;
    }
    match typname {
        "varchar" | "varbit" => new == -1 || (old != -1 && new >= old),
        "timestamp" | "timestamptz" | "time" | "timetz" => {
            new == -1 || new == MAX_TEMPORAL_PRECISION || (old != -1 && new >= old)
        }
        "numeric" => {
            if new == -1 {
                return true;
            }
            if old == -1 {
                return false;
            }
            let (old, new) = (old - 4, new - 4);
            (old & 0x7ff) == (new & 0x7ff) && (new >> 16) >= (old >> 16)
        }
        _ => false,
    }
}

/// `A single statement`'s text for messages: white space collapsed.
pub fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `LOCK [TABLE] t IN <mode> MODE`.
fn lock_mode_of(words: &[Word]) -> Option<LockMode> {
    let start = words.iter().position(|w| w.upper == "IN")? + 1;
    let end = words.iter().position(|w| w.upper == "MODE")?;
    let mode: Vec<&str> = words
        .get(start..end)?
        .iter()
        .map(|w| w.upper.as_str())
        .collect();
    Some(match mode.as_slice() {
        ["ACCESS", "SHARE"] => LockMode::AccessShare,
        ["ROW", "SHARE"] => LockMode::RowShare,
        ["ROW", "EXCLUSIVE"] => LockMode::RowExclusive,
        ["SHARE", "UPDATE", "EXCLUSIVE"] => LockMode::ShareUpdateExclusive,
        ["SHARE"] => LockMode::Share,
        ["SHARE", "ROW", "EXCLUSIVE"] => LockMode::ShareRowExclusive,
        ["EXCLUSIVE"] => LockMode::Exclusive,
        ["ACCESS", "EXCLUSIVE"] => LockMode::AccessExclusive,
        _ => return None,
    })
}

/// For `c IS NOT NULL` (in any number of parentheses), the column.
fn is_not_null_of(expr: &str) -> Option<String> {
    let words: Vec<Word> = words(expr)
        .into_iter()
        .filter(|w| !matches!(w.kind, TokenKind::OpenParen | TokenKind::CloseParen))
        .collect();
    match words.as_slice() {
        [c, is, not, null]
            if is.upper == "IS"
                && not.upper == "NOT"
                && null.upper == "NULL"
                && matches!(c.kind, TokenKind::Ident | TokenKind::QuotedIdent { .. }) =>
        {
            split_name(&c.raw).map(|(_, n)| n)
        }
        _ => None,
    }
}

/// The names of the functions `expr` calls: last part, folded.
fn functions_called(expr: &SyntaxNode) -> Vec<String> {
    let mut out = Vec::new();
    for node in expr.descendants() {
        if node.kind() != SyntaxKind::CALL_EXPR {
            continue;
        }
        let Some(callee) = node.first_child() else {
            continue;
        };
        if let Some((_, name)) = split_name(&text(&callee))
            && !out.contains(&name)
        {
            out.push(name);
        }
    }
    out
}

/// A column or constraint name as stored.
fn column(node: &SyntaxNode) -> Option<String> {
    split_name(&text(node)).map(|(_, n)| n)
}

fn text(node: &SyntaxNode) -> String {
    node.text().to_string()
}

/// The text of the first `PATH` node under `node`.
fn first_path(node: &SyntaxNode) -> Option<String> {
    node.descendants()
        .find(|n| n.kind() == SyntaxKind::PATH)
        .map(|p| text(&p))
}

/// A significant token, upper-cased when it is a word.
#[derive(Debug)]
struct Word {
    kind: TokenKind,
    raw: String,
    upper: String,
}

fn words(text: &str) -> Vec<Word> {
    lex(text)
        .filter(|t| !t.is_trivia())
        .map(|t| Word {
            kind: t.kind,
            raw: t.text.to_string(),
            upper: if t.kind == TokenKind::Ident {
                t.text.to_ascii_uppercase()
            } else {
                String::new()
            },
        })
        .collect()
}

/// Whether the unquoted words `seq` appear in order, next to each other.
fn has_words(text: &str, seq: &[&str]) -> bool {
    let words = words(text);
    words
        .windows(seq.len())
        .any(|w| w.iter().zip(seq).all(|(a, b)| a.upper == *b))
}

/// `name` or `schema.name` starting at word `i`.
fn name_at(words: &[Word], i: usize) -> Option<RelName> {
    let is_name = |w: &Word| matches!(w.kind, TokenKind::Ident | TokenKind::QuotedIdent { .. });
    let first = words.get(i).filter(|w| is_name(w))?;
    let mut raw = first.raw.clone();
    if words.get(i + 1).is_some_and(|w| w.kind == TokenKind::Dot)
        && let Some(second) = words.get(i + 2).filter(|w| is_name(w))
    {
        raw = format!("{raw}.{}", second.raw);
    }
    RelName::parse(&raw)
}

#[cfg(test)]
mod tests;
