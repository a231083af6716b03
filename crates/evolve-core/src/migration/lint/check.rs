//! The rules, statement by statement, over one file.

// One arm per statement kind reads better than guards folded into the match.
#![allow(clippy::collapsible_match)]

use std::collections::{BTreeMap, BTreeSet};

use squawk_syntax::ast::{self, AstNode};
use squawk_syntax::{SyntaxKind, SyntaxNode};

use super::model::{Model, Table, View};
use super::types::{NON_VOLATILE_FUNCTIONS, VOLATILE_FUNCTIONS, is_utc, normalize_type, rewrites};
use super::{Config, Raw};
use crate::migration::Script;

/// PostgreSQL's longest identifier in bytes (NAMEDATALEN - 1).
const MAX_IDENT_BYTES: usize = 63;

/// What one file has done so far.
struct File<'a> {
    /// The file runs in one transaction.
    in_tx: bool,
    /// Tables created in this file (empty when the rules look at them).
    created: BTreeSet<String>,
    /// Materialized views created in this file.
    created_views: BTreeSet<String>,
    utc: bool,
    lock_timeout: bool,
    statement_timeout: bool,
    reported_lock_timeout: bool,
    reported_statement_timeout: bool,
    /// `BEGIN` offset in a no-transaction file, until its COMMIT.
    open_tx: Option<usize>,
    /// Tables with a VALIDATE in this file of a constraint the files did
    /// not add: a SET NOT NULL after it is taken as backed by it.
    validated_unknown: BTreeSet<String>,
    /// NOT VALID constraints added in this transaction.
    not_valid_here: BTreeSet<String>,
    config: &'a Config,
    out: &'a mut Vec<Raw>,
}

impl File<'_> {
    fn push(&mut self, rule: &'static str, offset: usize, message: String) {
        self.out.push(Raw {
            rule,
            offset,
            message,
        });
    }

    /// A statement that takes a strong lock on an existing table: the
    /// (opt-in) timeout rules want a SET before it.
    fn strong_lock(&mut self, offset: usize, what: &str) {
        if !self.lock_timeout
            && !self.reported_lock_timeout
            && self.config.level("require-lock-timeout").is_some()
        {
            self.reported_lock_timeout = true;
            self.push(
                "require-lock-timeout",
                offset,
                format!(
                    "{what} waits for its lock behind any long transaction and every query queues behind it; put SET lock_timeout = '2s' before it (evolve migrate sets its own lock_timeout per statement)"
                ),
            );
        }
        if !self.statement_timeout
            && !self.reported_statement_timeout
            && self.config.level("require-statement-timeout").is_some()
        {
            self.reported_statement_timeout = true;
            self.push(
                "require-statement-timeout",
                offset,
                format!(
                    "{what} can run long under its lock; put SET statement_timeout = '5s' before it"
                ),
            );
        }
    }
}

/// Runs every rule over `stmts` (one file) and updates `model`.
pub(super) fn lint_file(
    model: &mut Model,
    stmts: &[ast::Stmt],
    script: &Script,
    config: &Config,
    out: &mut Vec<Raw>,
) {
    let mut f = File {
        in_tx: !script.directives.no_transaction,
        created: BTreeSet::new(),
        created_views: BTreeSet::new(),
        utc: model.utc,
        lock_timeout: false,
        statement_timeout: false,
        reported_lock_timeout: false,
        reported_statement_timeout: false,
        open_tx: None,
        validated_unknown: BTreeSet::new(),
        not_valid_here: BTreeSet::new(),
        config,
        out,
    };
    for stmt in stmts {
        statement(model, &mut f, stmt);
        identifier_lengths(&mut f, stmt.syntax());
    }
    if let Some(at) = f.open_tx {
        f.push(
            "ban-uncommitted-transaction",
            at,
            "BEGIN opens a transaction this file never commits, so its statements are rolled back when the session ends; add COMMIT at the end".into(),
        );
    }
}

fn start(node: &SyntaxNode) -> usize {
    usize::from(node.text_range().start())
}

/// An identifier token folded as PostgreSQL folds it.
fn fold(text: &str) -> String {
    match text.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => text.to_lowercase(),
    }
}

fn is_name_token(kind: SyntaxKind) -> bool {
    kind == SyntaxKind::IDENT || kind.is_keyword()
}

/// The name parts under `node` (identifiers and keywords used as names:
/// a column called `name` or `type` is a keyword token), folded.
fn names(node: &SyntaxNode) -> Vec<String> {
    node.descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| is_name_token(t.kind()) && t.kind() != SyntaxKind::ONLY_KW)
        .map(|t| fold(t.text()))
        .collect()
}

/// (schema, name) of a possibly qualified name.
fn qualified(node: &SyntaxNode) -> Option<(Option<String>, String)> {
    let mut parts = names(node);
    let name = parts.pop()?;
    Some((parts.pop(), name))
}

fn last_name(node: &SyntaxNode) -> Option<String> {
    qualified(node).map(|(_, n)| n)
}

fn has_token(node: &SyntaxNode, kind: SyntaxKind) -> bool {
    node.descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .any(|t| t.kind() == kind)
}

fn statement(model: &mut Model, f: &mut File<'_>, stmt: &ast::Stmt) {
    let node = stmt.syntax();
    let at = start(node);
    match stmt {
        ast::Stmt::Begin(_) => {
            if f.in_tx {
                f.push("transaction-nesting", at, "BEGIN in a file that evolve runs in a transaction of its own: PostgreSQL warns and the file's COMMIT ends evolve's transaction early; remove it, or start the file with '-- evolve:no-transaction' to manage transactions yourself".into());
            } else if f.open_tx.is_none() {
                f.open_tx = Some(at);
                f.not_valid_here.clear();
            }
        }
        ast::Stmt::Commit(_) | ast::Stmt::Rollback(_) => {
            if f.in_tx {
                f.push("transaction-nesting", at, "COMMIT or ROLLBACK in a file that evolve runs in a transaction of its own ends that transaction, so a failure after it leaves the migration half applied; remove it, or start the file with '-- evolve:no-transaction'".into());
            }
            f.open_tx = None;
            f.not_valid_here.clear();
        }
        ast::Stmt::Set(_) => set(f, node),
        ast::Stmt::CreateTable(t) => create_table(model, f, t),
        ast::Stmt::CreateTableAs(t) => {
            if let Some(n) = t.table_name().and_then(|n| last_name(n.syntax())) {
                f.created.insert(n.clone());
                model.tables.insert(n, Table::default());
            }
        }
        ast::Stmt::AlterTable(a) => alter_table(model, f, a),
        ast::Stmt::CreateIndex(i) => create_index(model, f, i),
        ast::Stmt::DropIndex(d) => {
            if d.concurrently_token().is_some() {
                if f.in_tx {
                    f.push("ban-concurrent-index-creation-in-transaction", at, "DROP INDEX CONCURRENTLY cannot run inside a transaction and this file runs in one; start the file with '-- evolve:no-transaction'".into());
                } else if d.if_exists().is_none() {
                    f.push("prefer-robust-stmts", at, "DROP INDEX CONCURRENTLY in a no-transaction file fails when rerun after a failure that came later in the file; write DROP INDEX CONCURRENTLY IF EXISTS".into());
                }
            } else {
                f.push("require-concurrent-index-deletion", at, "DROP INDEX takes an ACCESS EXCLUSIVE lock on its table, which blocks reads and writes while it waits for running queries; use DROP INDEX CONCURRENTLY in a file that starts with '-- evolve:no-transaction'".into());
            }
        }
        ast::Stmt::Reindex(r) => {
            let concurrently = has_token(node, SyntaxKind::CONCURRENTLY_KW);
            if concurrently && f.in_tx {
                f.push("ban-concurrent-index-creation-in-transaction", at, "REINDEX CONCURRENTLY cannot run inside a transaction and this file runs in one; start the file with '-- evolve:no-transaction'".into());
            } else if !concurrently {
                let target = r.reindex_target().and_then(|t| last_name(t.syntax()));
                if !target.as_deref().is_some_and(|t| f.created.contains(t)) {
                    f.push("require-concurrent-reindex", at, "REINDEX blocks writes to the table while the index is rebuilt, and holds ACCESS EXCLUSIVE on the index, so reads that plan on the table wait too; use REINDEX ... CONCURRENTLY (PostgreSQL 12+) in a file that starts with '-- evolve:no-transaction'".into());
                }
            }
        }
        ast::Stmt::Refresh(r) => {
            let Some(name) = r.view_ref().and_then(|v| last_name(v.syntax())) else {
                return;
            };
            let with_no_data = r
                .data_option()
                .is_some_and(|d| has_token(d.syntax(), SyntaxKind::NO_KW));
            let unpopulated = model.views.get(&name).is_some_and(|v| v.unpopulated);
            if r.concurrently_token().is_none()
                && !with_no_data
                && !unpopulated
                && !f.created_views.contains(&name)
            {
                f.push("require-concurrent-refresh", at, format!("REFRESH MATERIALIZED VIEW {name} takes an ACCESS EXCLUSIVE lock on {name}, so every read of it waits until the refresh ends; use REFRESH MATERIALIZED VIEW CONCURRENTLY {name} (it needs a unique index on {name}) or 'evolve refresh'"));
            }
            if !with_no_data && let Some(v) = model.views.get_mut(&name) {
                v.unpopulated = false;
            }
        }
        ast::Stmt::Cluster(_) => {
            f.push("prefer-repack", at, "CLUSTER rewrites the table under an ACCESS EXCLUSIVE lock that blocks reads and writes for the whole rewrite; use pg_repack, which rewrites online".into());
        }
        ast::Stmt::Vacuum(v) => {
            let full = v.full_token().is_some()
                || v.vacuum_option_list()
                    .is_some_and(|o| has_token(o.syntax(), SyntaxKind::FULL_KW));
            if full {
                f.push("prefer-repack", at, "VACUUM FULL rewrites the table under an ACCESS EXCLUSIVE lock that blocks reads and writes for the whole rewrite; use pg_repack, which rewrites online".into());
            }
        }
        ast::Stmt::Truncate(t) => {
            if t.drop_behavior()
                .is_some_and(|d| has_token(d.syntax(), SyntaxKind::CASCADE_KW))
            {
                f.push("ban-truncate-cascade", at, "TRUNCATE ... CASCADE also empties every table with a foreign key to these tables, and the tables that reference those; name each table to empty and drop CASCADE".into());
            }
        }
        ast::Stmt::DropTable(d) => {
            let cascade = d
                .drop_behavior()
                .is_some_and(|b| has_token(b.syntax(), SyntaxKind::CASCADE_KW));
            for p in d.table_name_refs() {
                let p = p.syntax();
                let Some(name) = last_name(p) else { continue };
                if !f.created.contains(&name) {
                    f.push("ban-drop-table", start(p), format!("DROP TABLE {name} breaks every client that still reads or writes {name}; first deploy code that no longer uses it, then drop it in a later migration{}", if cascade { " (CASCADE also drops the views that read it)" } else { "" }));
                }
                f.created.remove(&name);
                model.drop_table(&name);
            }
        }
        ast::Stmt::DropView(d) => {
            for p in d.view_refs() {
                if let Some(name) = last_name(p.syntax()) {
                    model.drop_view(&name);
                }
            }
        }
        ast::Stmt::DropMaterializedView(d) => {
            for p in d.view_refs() {
                if let Some(name) = last_name(p.syntax()) {
                    model.drop_view(&name);
                    f.created_views.remove(&name);
                }
            }
        }
        ast::Stmt::DropDatabase(_) => {
            f.push("ban-drop-database", at, "DROP DATABASE in a migration removes every table and cannot be undone; drop databases by hand, outside migrations".into());
        }
        ast::Stmt::CreateView(v) => {
            if let Some(name) = v.view().and_then(|v| last_name(v.syntax())) {
                let idents = all_names(node);
                let reads = matview_reads(model, &idents, &name);
                model.views.insert(
                    name,
                    View {
                        idents,
                        matview: false,
                        reads,
                        unpopulated: false,
                    },
                );
            }
        }
        ast::Stmt::CreateMaterializedView(m) => create_matview(model, f, m),
        ast::Stmt::AlterView(_) | ast::Stmt::AlterMaterializedView(_) => {
            if let Some((old, new)) = rename_to(node) {
                model.rename_table(&old, &new);
            }
        }
        ast::Stmt::CreateDomain(d) => {
            let name = d
                .domain()
                .and_then(|n| last_name(n.syntax()))
                .unwrap_or_default();
            // PostgreSQL adds a column of a domain with constraints (CHECK
            // or NOT NULL) by rewriting the table, default or not.
            if has_token(node, SyntaxKind::CHECK_KW) || has_token(node, SyntaxKind::NOT_KW) {
                model.checked_domains.insert(name.clone());
            }
            if has_token(node, SyntaxKind::CHECK_KW) {
                f.push("ban-create-domain-with-constraint", at, format!("CREATE DOMAIN {name} with a CHECK: changing that check later has to scan every column of the domain, and it cannot be added NOT VALID; put the CHECK on the table columns instead"));
            }
        }
        ast::Stmt::AlterDomain(d) => {
            if (has_token(node, SyntaxKind::ADD_KW) && has_token(node, SyntaxKind::CONSTRAINT_KW)
                || has_token(node, SyntaxKind::ADD_KW) && has_token(node, SyntaxKind::CHECK_KW)
                || has_token(node, SyntaxKind::SET_KW) && has_token(node, SyntaxKind::NOT_KW))
                && let Some(name) = d.domain_ref().and_then(|n| last_name(n.syntax()))
            {
                model.checked_domains.insert(name);
            }
            if has_token(node, SyntaxKind::ADD_KW) && has_token(node, SyntaxKind::CONSTRAINT_KW)
                || has_token(node, SyntaxKind::ADD_KW) && has_token(node, SyntaxKind::CHECK_KW)
            {
                f.push("ban-alter-domain-with-add-constraint", at, "ALTER DOMAIN ... ADD CONSTRAINT checks every column of the domain in every table under lock; add the CHECK ... NOT VALID on the table columns and VALIDATE it in a later migration".into());
            }
        }
        ast::Stmt::AlterType(t) => {
            if let Some(ast::AlterTypeAction::AddValue(v)) = t.action()
                && v.value_position().is_none()
            {
                f.push("require-enum-value-ordering", at, "ALTER TYPE ... ADD VALUE without BEFORE or AFTER puts the value last in the enum's sort order; say where it goes with BEFORE 'value' or AFTER 'value'".into());
            }
        }
        ast::Stmt::Update(u) => {
            if let Some(set) = u.set_clause() {
                let cols: Vec<(String, usize)> = set
                    .syntax()
                    .descendants()
                    .filter_map(ast::SetSingleColumn::cast)
                    .filter_map(|c| {
                        let t = c.column_target()?;
                        Some((names(t.syntax()).first()?.clone(), start(t.syntax())))
                    })
                    .collect();
                duplicates(f, &cols, "UPDATE ... SET assigns");
            }
        }
        ast::Stmt::Insert(i) => {
            if let Some(list) = i.column_target_list() {
                let cols: Vec<(String, usize)> = list
                    .syntax()
                    .children()
                    .filter_map(|c| Some((names(&c).first()?.clone(), start(&c))))
                    .collect();
                duplicates(f, &cols, "INSERT names");
            }
        }
        _ => {}
    }
}

fn duplicates(f: &mut File<'_>, cols: &[(String, usize)], what: &str) {
    let mut seen = BTreeSet::new();
    for (c, at) in cols {
        if !seen.insert(c) {
            f.push(
                "ban-duplicate-column-assignments",
                *at,
                format!("{what} column {c} twice; PostgreSQL refuses the statement; keep one"),
            );
        }
    }
}

/// `ALTER ... old RENAME TO new`.
fn rename_to(node: &SyntaxNode) -> Option<(String, String)> {
    let toks: Vec<_> = node
        .descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| !t.kind().is_trivia())
        .collect();
    let i = toks
        .iter()
        .position(|t| t.kind() == SyntaxKind::RENAME_KW)?;
    if toks.get(i + 1)?.kind() != SyntaxKind::TO_KW {
        return None;
    }
    let new = fold(toks.get(i + 2)?.text());
    // The relation: the last name before RENAME.
    let old = toks[..i]
        .iter()
        .rev()
        .find(|t| {
            is_name_token(t.kind())
                && !matches!(t.kind(), SyntaxKind::VIEW_KW | SyntaxKind::EXISTS_KW)
        })
        .map(|t| fold(t.text()))?;
    Some((old, new))
}

/// Every identifier and keyword of `node`, folded.
fn all_names(node: &SyntaxNode) -> BTreeSet<String> {
    names(node).into_iter().collect()
}

fn matview_reads(model: &Model, idents: &BTreeSet<String>, name: &str) -> Vec<String> {
    model
        .views
        .iter()
        .filter(|(n, v)| v.matview && n.as_str() != name && idents.contains(n.as_str()))
        .map(|(n, _)| n.clone())
        .collect()
}

fn create_matview(model: &mut Model, f: &mut File<'_>, m: &ast::CreateMaterializedView) {
    let node = m.syntax();
    let Some(name) = m.view().and_then(|v| last_name(v.syntax())) else {
        return;
    };
    if let Some(query) = m.query()
        && let Some(star) = star_target(query.syntax())
    {
        f.push("matview-select-star", star, format!("materialized view {name} is defined with SELECT *, so it depends on every column of what it reads and blocks any type change there; list the columns it needs"));
    }
    let idents = all_names(node);
    // A matview dropped and created again under its name is not a layer of
    // itself.
    let reads = matview_reads(model, &idents, &name);
    let unpopulated = m
        .data_option()
        .is_some_and(|d| has_token(d.syntax(), SyntaxKind::NO_KW));
    model.views.insert(
        name.clone(),
        View {
            idents,
            matview: true,
            reads,
            unpopulated,
        },
    );
    f.created_views.insert(name.clone());
    let depth = model.chain_depth(&name);
    if depth > 2 {
        f.push("matview-chain-depth", start(node), format!("materialized view {name} is layer {depth} of a chain of materialized views; more than two layers must always be refreshed in order (use 'evolve refresh') and are rebuilt together by any change below them; consider a plain view for the upper layers"));
    }
}

/// Offset of a `*` or `x.*` target in the top-level select list.
fn star_target(query: &SyntaxNode) -> Option<usize> {
    let list = query.descendants().find_map(ast::TargetList::cast)?;
    list.targets().find_map(|t| {
        let text = t.syntax().text().to_string();
        let text = text.trim();
        (text == "*" || text.ends_with(".*")).then(|| start(t.syntax()))
    })
}

fn set(f: &mut File<'_>, node: &SyntaxNode) {
    let toks: Vec<String> = node
        .descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| !t.kind().is_trivia())
        .map(|t| t.text().to_string())
        .collect();
    let lower: Vec<String> = toks.iter().map(|t| t.to_lowercase()).collect();
    let mut i = 1;
    if matches!(lower.get(i).map(String::as_str), Some("local" | "session")) {
        i += 1;
    }
    let (param, value) = match (
        lower.get(i).map(String::as_str),
        lower.get(i + 1).map(String::as_str),
    ) {
        (Some("time"), Some("zone")) => ("timezone".to_string(), toks.get(i + 2)),
        (Some(p), _) => {
            let v = if matches!(lower.get(i + 1).map(String::as_str), Some("=" | "to")) {
                toks.get(i + 2)
            } else {
                None
            };
            (fold(p), v)
        }
        _ => return,
    };
    let value = value
        .map(|v| v.trim_matches('\'').to_string())
        .unwrap_or_default();
    match param.as_str() {
        "timezone" => f.utc = is_utc(&value),
        "lock_timeout" => f.lock_timeout = value != "0",
        "statement_timeout" => f.statement_timeout = value != "0",
        _ => {}
    }
}

/// Column facts of a `CREATE TABLE` column or `ADD COLUMN`.
struct ColumnDef {
    name: String,
    at: usize,
    ty: Option<String>,
    ty_at: usize,
    not_null: bool,
    default: Option<ast::Expr>,
    generated: bool,
    primary_key: bool,
    unique: bool,
    references: bool,
    check_not_null: bool,
    /// Any CHECK on the column: checked against every existing row.
    check: bool,
}

fn column_def(
    name_node: &SyntaxNode,
    ty: Option<ast::Type>,
    constraints: &SyntaxNode,
) -> Option<ColumnDef> {
    let name = names(name_node).pop()?;
    let mut c = ColumnDef {
        name,
        at: start(name_node),
        ty: ty
            .as_ref()
            .map(|t| normalize_type(&t.syntax().text().to_string())),
        ty_at: ty
            .as_ref()
            .map(|t| start(t.syntax()))
            .unwrap_or(start(name_node)),
        not_null: false,
        default: None,
        generated: false,
        primary_key: false,
        unique: false,
        references: false,
        check_not_null: false,
        check: false,
    };
    for con in constraints.descendants().filter_map(ast::Constraint::cast) {
        match con {
            ast::Constraint::NotNullConstraint(_) => c.not_null = true,
            ast::Constraint::DefaultConstraint(d) => c.default = d.expr(),
            ast::Constraint::GeneratedConstraint(g) => {
                c.generated = !has_token(g.syntax(), SyntaxKind::VIRTUAL_KW);
            }
            ast::Constraint::PrimaryKeyConstraint(_) => {
                c.primary_key = true;
                c.not_null = true;
            }
            ast::Constraint::UniqueConstraint(_) => c.unique = true,
            ast::Constraint::ReferencesConstraint(_) => c.references = true,
            ast::Constraint::CheckConstraint(k) => {
                c.check = true;
                if k.expr()
                    .is_some_and(|e| not_null_check(&e).as_deref() == Some(c.name.as_str()))
                {
                    c.check_not_null = true;
                }
            }
            _ => {}
        }
    }
    Some(c)
}

/// `col IS NOT NULL` -> col.
fn not_null_check(e: &ast::Expr) -> Option<String> {
    let ast::Expr::BinExpr(b) = e else {
        return None;
    };
    let toks: Vec<String> = b
        .syntax()
        .descendants_with_tokens()
        .filter_map(|t| t.into_token())
        .filter(|t| !t.kind().is_trivia())
        .map(|t| t.text().to_lowercase())
        .collect();
    let n = toks.len();
    if n >= 4 && toks[n - 3] == "is" && toks[n - 2] == "not" && toks[n - 1] == "null" {
        return Some(fold(&names(b.lhs()?.syntax()).pop()?));
    }
    None
}

const SERIALS: &[&str] = &[
    "serial",
    "serial4",
    "bigserial",
    "serial8",
    "smallserial",
    "serial2",
];

/// The hygiene rules on a column's declared type.
fn type_rules(f: &mut File<'_>, table: &str, c: &ColumnDef) {
    let Some(ty) = c.ty.as_deref() else { return };
    let base = ty.split(['(', '[']).next().unwrap_or(ty).trim();
    let col = format!("{table}.{}", c.name);
    match base {
        "int4" | "serial" | "serial4" => f.push("prefer-bigint-over-int", c.ty_at, format!("{col} is a 32-bit {base}, which runs out at 2147483647 and then needs a rewrite of the table to widen; use bigint")),
        "int2" | "smallserial" | "serial2" => f.push("prefer-bigint-over-smallint", c.ty_at, format!("{col} is a smallint, which runs out at 32767 and then needs a rewrite of the table to widen; use bigint")),
        "timestamp" => f.push("prefer-timestamptz", c.ty_at, format!("{col} is timestamp without time zone, which stores wall-clock times that mean different instants to writers in different TimeZones; use timestamptz")),
        "char" | "bpchar" if ty != "\"char\"" => f.push("ban-char-field", c.ty_at, format!("{col} is char(n), which pads values with spaces and is no faster than text; use text (with a CHECK on length if needed)")),
        "varchar" if ty.contains('(') => f.push("prefer-text-field", c.ty_at, format!("{col} is {ty}; changing the limit later is an ALTER under ACCESS EXCLUSIVE (and a rewrite when it shrinks); use text with a CHECK (length({}) <= n), which can be replaced NOT VALID", c.name)),
        _ => {}
    }
    if SERIALS.contains(&base) {
        f.push("prefer-identity", c.ty_at, format!("{col} is {base}; identity columns (bigint GENERATED ALWAYS AS IDENTITY) have no separate sequence ownership and permissions to keep in step"));
    }
}

fn create_table(model: &mut Model, f: &mut File<'_>, t: &ast::CreateTable) {
    let Some((schema, name)) = t.table_name().and_then(|n| qualified(n.syntax())) else {
        return;
    };
    let at = start(t.syntax());
    if schema.is_none() {
        f.push("require-table-schema", at, format!("CREATE TABLE {name} does not name a schema, so the table lands in the first schema of search_path; write schema.{name}"));
    }
    if !f.in_tx && t.if_not_exists().is_none() {
        f.push("prefer-robust-stmts", at, format!("CREATE TABLE {name} in a no-transaction file fails when the file is rerun after a later statement failed; write CREATE TABLE IF NOT EXISTS {name}"));
    }
    let mut table = Table {
        partitioned: t.partition_by().is_some(),
        ..Table::default()
    };
    let mut seen: Vec<(String, usize)> = Vec::new();
    if let Some(args) = t.table_arg_list() {
        for arg in args.args() {
            match arg {
                ast::TableArg::Column(col) => {
                    let Some(n) = col.name() else { continue };
                    let Some(c) = column_def(n.syntax(), col.ty(), col.syntax()) else {
                        continue;
                    };
                    type_rules(f, &name, &c);
                    if c.not_null || c.check_not_null {
                        table.not_null_ok.insert(c.name.clone());
                    }
                    if let Some(ty) = &c.ty {
                        table.columns.insert(c.name.clone(), ty.clone());
                    }
                    seen.push((c.name, c.at));
                }
                ast::TableArg::TableConstraint(ast::TableConstraint::CheckConstraint(k)) => {
                    if let Some(col) = k.expr().and_then(|e| not_null_check(&e)) {
                        table.not_null_ok.insert(col);
                    }
                }
                ast::TableArg::TableConstraint(ast::TableConstraint::PrimaryKeyConstraint(p)) => {
                    for c in names(p.syntax()) {
                        table.not_null_ok.insert(c);
                    }
                }
                _ => {}
            }
        }
    }
    duplicates(f, &seen, &format!("CREATE TABLE {name} defines"));
    f.created.insert(name.clone());
    model.tables.insert(name, table);
}

fn create_index(model: &mut Model, f: &mut File<'_>, i: &ast::CreateIndex) {
    let at = start(i.syntax());
    let table = i
        .table_relation_name()
        .and_then(|r| last_name(r.syntax()))
        .unwrap_or_default();
    let empty = is_new(model, f, &table);
    let relation = i.table_relation_name();
    let only = relation.as_ref().and_then(|r| r.only_token()).is_some();
    if model.tables.get(&table).is_some_and(|t| t.partitioned) {
        if i.concurrently_token().is_some() {
            f.push("concurrent-index-on-partitioned-table", at, format!("CREATE INDEX CONCURRENTLY on {table} fails: PostgreSQL cannot build an index on a partitioned table concurrently; {PARTITIONED_INDEX}"));
        } else if !only && !empty {
            f.push("require-concurrent-index-creation", at, format!("CREATE INDEX on partitioned table {table} holds a SHARE lock on it and on every partition, blocking writes to all of them while each partition's index builds, and CONCURRENTLY is refused on a partitioned table; {PARTITIONED_INDEX}"));
            f.strong_lock(at, &format!("CREATE INDEX on {table}"));
        }
        return;
    }
    if i.concurrently_token().is_some() {
        if f.in_tx {
            f.push("ban-concurrent-index-creation-in-transaction", at, format!("CREATE INDEX CONCURRENTLY on {table} cannot run inside a transaction and this file runs in one; start the file with '-- evolve:no-transaction' (evolve migrate then drops an INVALID index a failed build left before building it again)"));
        }
    } else if !empty {
        f.push("require-concurrent-index-creation", at, format!("CREATE INDEX on {table} holds a SHARE lock that blocks every write to {table} while the index builds; use CREATE INDEX CONCURRENTLY in a file that starts with '-- evolve:no-transaction'"));
        f.strong_lock(at, &format!("CREATE INDEX on {table}"));
    }
}

/// How an index reaches a partitioned table without blocking writes.
const PARTITIONED_INDEX: &str = "create it with CREATE INDEX ... ON ONLY (an invalid index, nothing built), build each partition's index with CREATE INDEX CONCURRENTLY in a file that starts with '-- evolve:no-transaction', then ALTER INDEX ... ATTACH PARTITION each of them (the parent's index becomes valid once every partition has one attached)";

/// Whether `table` is known to be empty: created in this file, or empty in
/// the catalog.
fn is_new(model: &Model, f: &File<'_>, table: &str) -> bool {
    f.created.contains(table)
        || f.created_views.contains(table)
        || model.tables.get(table).is_some_and(|t| t.empty)
}

fn alter_table(model: &mut Model, f: &mut File<'_>, a: &ast::AlterTable) {
    let Some(table) = a.table_relation_name().and_then(|r| last_name(r.syntax())) else {
        return;
    };
    if a.table_relation_name()
        .and_then(|r| qualified(r.syntax()))
        .is_some_and(|(s, _)| s.is_none())
    {
        f.push("require-table-schema", start(a.syntax()), format!("ALTER TABLE {table} does not name a schema, so it changes whichever {table} search_path finds first; write schema.{table}"));
    }
    let empty = is_new(model, f, &table);
    if !empty {
        f.strong_lock(start(a.syntax()), &format!("ALTER TABLE {table}"));
    }
    for action in a.actions() {
        alter_action(model, f, &table, empty, &action);
    }
}

fn alter_action(
    model: &mut Model,
    f: &mut File<'_>,
    table: &str,
    empty: bool,
    action: &ast::AlterTableAction,
) {
    let at = start(action.syntax());
    match action {
        ast::AlterTableAction::AddColumn(add) => {
            let Some(n) = add.column_name() else { return };
            let Some(c) = column_def(n.syntax(), add.ty(), add.syntax()) else {
                return;
            };
            type_rules(f, table, &c);
            if !f.in_tx && add.if_not_exists().is_none() {
                f.push("prefer-robust-stmts", at, format!("ADD COLUMN {} in a no-transaction file fails when the file is rerun after a later statement failed; write ADD COLUMN IF NOT EXISTS", c.name));
            }
            let col = format!("{table}.{}", c.name);
            if !empty {
                let base =
                    c.ty.as_deref()
                        .unwrap_or("")
                        .split('(')
                        .next()
                        .unwrap_or("")
                        .to_string();
                let serial = SERIALS.contains(&base.as_str());
                let volatile = c
                    .default
                    .as_ref()
                    .and_then(|d| volatile_call(d, &model.functions));
                let domain = base.rsplit('.').next().unwrap_or("").trim_matches('"');
                let why = if c.generated {
                    Some("a stored generated or identity column fills every row".to_string())
                } else if serial {
                    Some(format!("{base} fills every row from a sequence"))
                } else if model.checked_domains.contains(domain) {
                    Some(format!(
                        "{domain} is a domain with constraints, which PostgreSQL checks against every row, with a default or without"
                    ))
                } else {
                    volatile.map(|v| format!("the default calls {v}, which is volatile, so every row gets its own value"))
                };
                if let Some(why) = why {
                    f.push("adding-field-with-default", at, format!("ADD COLUMN {col}: {why}, which rewrites the whole table under an ACCESS EXCLUSIVE lock; add the column without a default (or with a constant one), backfill it in batches ('evolve backfill'), then SET DEFAULT"));
                }
                if c.not_null && c.default.is_none() && !c.generated && !serial {
                    f.push("adding-required-field", at, format!("ADD COLUMN {col} NOT NULL without a default fails on a table that has rows and breaks inserts of clients that do not set {}; add it with a DEFAULT, or nullable and SET NOT NULL after a backfill", c.name));
                }
                if c.primary_key {
                    f.push("adding-serial-primary-key-field", at, format!("ADD COLUMN {col} PRIMARY KEY builds the key's index under an ACCESS EXCLUSIVE lock on {table}; add the column, CREATE UNIQUE INDEX CONCURRENTLY, then ADD PRIMARY KEY USING INDEX"));
                } else if c.unique {
                    f.push("disallowed-unique-constraint", at, format!("ADD COLUMN {col} UNIQUE builds its index under an ACCESS EXCLUSIVE lock on {table}; add the column, CREATE UNIQUE INDEX CONCURRENTLY, then ADD CONSTRAINT ... UNIQUE USING INDEX"));
                }
                if c.check {
                    f.push("constraint-missing-not-valid", at, format!("ADD COLUMN {col} with a CHECK reads every row of {table} under an ACCESS EXCLUSIVE lock to check it (with a default or without); add the column, then ADD CONSTRAINT ... CHECK ... NOT VALID and VALIDATE CONSTRAINT in a later migration"));
                }
                if c.references {
                    f.push("adding-foreign-key-constraint", at, format!("ADD COLUMN {col} REFERENCES takes SHARE ROW EXCLUSIVE on {table} and the referenced table and checks every row; add the column, then ADD CONSTRAINT ... FOREIGN KEY ... NOT VALID and VALIDATE CONSTRAINT in a later migration"));
                }
            }
            let t = model.tables.entry(table.to_string()).or_default();
            if let Some(ty) = c.ty {
                t.columns.insert(c.name.clone(), ty);
            }
            if c.not_null || c.check_not_null {
                t.not_null_ok.insert(c.name);
            }
        }
        ast::AlterTableAction::AddConstraint(add) => {
            let Some(con) = add.constraint() else { return };
            let not_valid = con.is_not_valid();
            let cname = con.constraint_name().and_then(|n| names(n.syntax()).pop());
            match &con {
                ast::Constraint::ForeignKeyConstraint(_)
                | ast::Constraint::ReferencesConstraint(_) => {
                    if !not_valid && !empty {
                        f.push("adding-foreign-key-constraint", at, format!("ADD FOREIGN KEY on {table} takes SHARE ROW EXCLUSIVE on {table} and the referenced table, blocking their writes while every row is checked; add it NOT VALID, then VALIDATE CONSTRAINT in a later migration"));
                    }
                }
                ast::Constraint::CheckConstraint(k) => {
                    let nn = k.expr().and_then(|e| not_null_check(&e));
                    if !not_valid && !empty {
                        f.push("constraint-missing-not-valid", at, format!("ADD CONSTRAINT ... CHECK on {table} scans every row under an ACCESS EXCLUSIVE lock; add it NOT VALID, then VALIDATE CONSTRAINT in a later migration (SHARE UPDATE EXCLUSIVE, reads and writes go on)"));
                    }
                    let t = model.tables.entry(table.to_string()).or_default();
                    match (nn, not_valid) {
                        (Some(col), false) => {
                            t.not_null_ok.insert(col);
                        }
                        (Some(col), true) => {
                            if let Some(n) = &cname {
                                t.pending_checks.insert(n.clone(), col);
                            }
                        }
                        _ => {}
                    }
                }
                ast::Constraint::UniqueConstraint(u) => {
                    if u.using_index().is_none() && !empty {
                        f.push("disallowed-unique-constraint", at, format!("ADD UNIQUE on {table} builds its index under an ACCESS EXCLUSIVE lock that blocks reads and writes; CREATE UNIQUE INDEX CONCURRENTLY first, then ADD CONSTRAINT ... UNIQUE USING INDEX"));
                    }
                }
                ast::Constraint::PrimaryKeyConstraint(p) => {
                    if p.using_index().is_none() && !empty {
                        f.push("adding-serial-primary-key-field", at, format!("ADD PRIMARY KEY on {table} builds its index under an ACCESS EXCLUSIVE lock (and scans for NOT NULL); CREATE UNIQUE INDEX CONCURRENTLY first, then ADD PRIMARY KEY USING INDEX"));
                    }
                }
                _ => {}
            }
            if not_valid && let Some(n) = cname {
                f.not_valid_here.insert(n);
            }
        }
        ast::AlterTableAction::ValidateConstraint(v) => {
            let Some(name) = v
                .constraint_name_ref()
                .and_then(|n| names(n.syntax()).pop())
            else {
                return;
            };
            if f.in_tx && f.not_valid_here.contains(&name)
                || f.open_tx.is_some() && f.not_valid_here.contains(&name)
            {
                f.push("constraint-missing-not-valid", at, format!("VALIDATE CONSTRAINT {name} runs in the transaction that added it NOT VALID, so the ADD's lock on {table} is held for the whole validation; validate it in a later migration"));
            }
            let t = model.tables.entry(table.to_string()).or_default();
            match t.pending_checks.remove(&name) {
                Some(col) => {
                    t.not_null_ok.insert(col);
                }
                None => {
                    f.validated_unknown.insert(table.to_string());
                }
            }
        }
        ast::AlterTableAction::AlterColumn(c) => {
            let Some(col) = c.column_name_ref().and_then(|n| names(n.syntax()).pop()) else {
                return;
            };
            match c.option() {
                Some(ast::AlterColumnOption::SetType(set)) => {
                    set_type(model, f, table, &col, empty, at, &set)
                }
                Some(ast::AlterColumnOption::SetNotNull(_)) => {
                    let t = model.tables.get(table);
                    let backed = t.is_some_and(|t| t.not_null_ok.contains(&col))
                        || f.validated_unknown.contains(table);
                    if !empty && !backed {
                        f.push("adding-not-nullable-field", at, format!("SET NOT NULL on {table}.{col} scans every row under an ACCESS EXCLUSIVE lock; first ADD CONSTRAINT ... CHECK ({col} IS NOT NULL) NOT VALID, VALIDATE it in a later migration, then SET NOT NULL (no scan) and drop the check"));
                    }
                    model
                        .tables
                        .entry(table.to_string())
                        .or_default()
                        .not_null_ok
                        .insert(col);
                }
                Some(ast::AlterColumnOption::DropNotNull(_)) => {
                    if !empty {
                        f.push("ban-drop-not-null", at, format!("DROP NOT NULL on {table}.{col} lets NULLs reach clients that assume a value; make sure every reader handles NULL first"));
                    }
                    if let Some(t) = model.tables.get_mut(table) {
                        t.not_null_ok.remove(&col);
                    }
                }
                _ => {}
            }
        }
        ast::AlterTableAction::DropColumn(d) => {
            let Some(col) = d.column_name_ref().and_then(|n| names(n.syntax()).pop()) else {
                return;
            };
            if !empty {
                f.push("ban-drop-column", at, format!("DROP COLUMN {table}.{col} breaks every client that still reads or writes {col}; first deploy code that no longer uses it, then drop it in a later migration"));
            }
            if !f.in_tx && d.if_exists().is_none() {
                f.push("prefer-robust-stmts", at, format!("DROP COLUMN {col} in a no-transaction file fails when rerun after a later statement failed; write DROP COLUMN IF EXISTS"));
            }
            let cascade = d
                .drop_behavior()
                .is_some_and(|b| has_token(b.syntax(), SyntaxKind::CASCADE_KW));
            model.drop_column(table, &col, cascade);
        }
        ast::AlterTableAction::RenameColumn(r) => {
            let Some(old) = r.column_name_ref().and_then(|n| names(n.syntax()).pop()) else {
                return;
            };
            let new = r
                .column_name()
                .and_then(|n| names(n.syntax()).pop())
                .unwrap_or_default();
            if !empty {
                f.push("renaming-column", at, format!("RENAME COLUMN {table}.{old} TO {new} breaks every running client that uses {old}; add {new}, write both while clients move ('evolve change rename-column'), then drop {old}"));
            }
            let readers = model.readers(table, &old);
            if !readers.is_empty() {
                let list: Vec<&str> = readers.iter().map(String::as_str).collect();
                f.push("rename-column-used-by-view", at, format!(
                    "renaming {table}.{old} is accepted by PostgreSQL, but {} keep{} the old output name {old}, so readers of the view and of the table disagree; add the new column name to the views in the same migration (CREATE OR REPLACE VIEW ... AS SELECT {new} AS {old}, {new} ...)",
                    list.join(", "),
                    if list.len() == 1 { "s" } else { "" }
                ));
            }
            model.rename_column(table, &old, &new);
        }
        ast::AlterTableAction::TableRenameTo(r) => {
            let Some(new) = r.table_name().and_then(|n| last_name(n.syntax())) else {
                return;
            };
            if !empty {
                f.push("renaming-table", at, format!("RENAME TO {new} breaks every running client that uses {table}; create {new} as the new name while clients move (a view {table} over {new} keeps old clients working), then drop the old name"));
            }
            if f.created.remove(table) {
                f.created.insert(new.clone());
            }
            model.rename_table(table, &new);
        }
        ast::AlterTableAction::DetachPartition(_) => {
            let concurrently = has_token(action.syntax(), SyntaxKind::CONCURRENTLY_KW);
            if concurrently && f.in_tx {
                f.push("ban-concurrent-index-creation-in-transaction", at, "DETACH PARTITION CONCURRENTLY cannot run inside a transaction and this file runs in one; start the file with '-- evolve:no-transaction'".into());
            } else if !concurrently {
                f.push("require-concurrent-partition-detach", at, format!("DETACH PARTITION takes an ACCESS EXCLUSIVE lock on {table}, blocking reads and writes of every partition; use DETACH PARTITION ... CONCURRENTLY (PostgreSQL 14+) in a file that starts with '-- evolve:no-transaction'"));
            }
        }
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn set_type(
    model: &mut Model,
    f: &mut File<'_>,
    table: &str,
    col: &str,
    empty: bool,
    at: usize,
    set: &ast::SetType,
) {
    let Some(new) = set
        .ty()
        .map(|t| normalize_type(&t.syntax().text().to_string()))
    else {
        return;
    };
    let old = model
        .tables
        .get(table)
        .and_then(|t| t.columns.get(col))
        .cloned();
    if !empty {
        match &old {
            Some(old) if explicit_using(set, col) || rewrites(old, &new, f.utc) => {
                let tz = if matches!(
                    (old.split('(').next(), new.split('(').next()),
                    (Some("timestamp"), Some("timestamptz"))
                        | (Some("timestamptz"), Some("timestamp"))
                ) {
                    " (timestamp <-> timestamptz is no rewrite when the session's TimeZone is UTC: SET timezone = 'UTC' first in the same file)"
                } else {
                    ""
                };
                f.push("alter-type-rewrite", at, format!("changing {table}.{col} from {old} to {new} rewrites the whole table under an ACCESS EXCLUSIVE lock{tz}; changes that do not rewrite are varchar widening, varchar to text, numeric precision increase at the same scale and dropping a length limit; otherwise add a new column, backfill it in batches and swap ('evolve change change-type')"));
            }
            Some(_) => {}
            None => {
                f.push("changing-column-type", at, format!("changing {table}.{col} to {new} takes an ACCESS EXCLUSIVE lock and rewrites the table unless the change is binary-coercible, and the old type is not known from the files; lint with --database-url to know, or add a new column, backfill it and swap"));
            }
        }
    }
    model
        .tables
        .entry(table.to_string())
        .or_default()
        .columns
        .insert(col.to_string(), new);
}

/// A USING expression other than the column itself (`USING col` and
/// `USING col::newtype` convert as if there were none).
fn explicit_using(set: &ast::SetType, col: &str) -> bool {
    let Some(using) = set.using_expr() else {
        return false;
    };
    let Some(expr) = using.syntax().children().find_map(ast::Expr::cast) else {
        return true;
    };
    let expr = match expr {
        ast::Expr::CastExpr(c) => match c.expr() {
            Some(e) => e,
            None => return true,
        },
        e => e,
    };
    !matches!(&expr, ast::Expr::NameRef(_) if names(expr.syntax()) == [col])
}

/// The first function call in `e` that is volatile (or not known to be
/// anything else), by name: `catalog` (name -> volatile) decides when it
/// knows the name, the built-in lists otherwise.
fn volatile_call(e: &ast::Expr, catalog: &BTreeMap<String, bool>) -> Option<String> {
    let calls = std::iter::once(e.syntax().clone())
        .chain(e.syntax().descendants())
        .filter_map(ast::CallExpr::cast);
    for call in calls {
        let Some(name) = call.expr().and_then(|x| names(x.syntax()).pop()) else {
            continue;
        };
        let volatile = match catalog.get(&name) {
            Some(v) => *v,
            None => {
                VOLATILE_FUNCTIONS.contains(&name.as_str())
                    || !NON_VOLATILE_FUNCTIONS.contains(&name.as_str())
            }
        };
        if volatile {
            return Some(format!("{name}()"));
        }
    }
    None
}

fn identifier_lengths(f: &mut File<'_>, node: &SyntaxNode) {
    let mut seen = BTreeMap::new();
    for n in node
        .descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| t.kind() == SyntaxKind::IDENT)
    {
        let name = fold(n.text());
        if name.len() > MAX_IDENT_BYTES && seen.insert(name.clone(), ()).is_none() {
            let mut cut = MAX_IDENT_BYTES;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            f.push("identifier-too-long", usize::from(n.text_range().start()), format!("{name} is {} bytes, and PostgreSQL silently truncates it to {:?}, so later statements using the full name miss it; use a name of at most 63 bytes", name.len(), &name[..cut]));
        }
    }
}
