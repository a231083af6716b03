//! `evolve lint`: rules over migration files, read in the order they apply.
//!
//! Each rule has a name, a level and a message that says how to do the
//! thing safely. The rules see only the files (no database): what a file
//! creates is remembered for the files after it, so a rule can know a
//! column's type or which views read a table when the files created them.

use std::collections::BTreeMap;

use serde::Serialize;
use squawk_syntax::ast::{self, AstNode, SourceFile};

use super::{Script, line_col};

/// How bad a finding is. `evolve lint` exits 1 when any is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Warning,
    Error,
}

/// One rule, for listing and documentation.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rule {
    pub name: &'static str,
    pub level: Level,
    pub summary: &'static str,
}

pub const RULES: [Rule; 4] = [
    Rule {
        name: "matview-select-star",
        level: Level::Warning,
        summary: "a materialized view defined with SELECT * depends on every column, so any type change anywhere in its tables is blocked",
    },
    Rule {
        name: "matview-chain-depth",
        level: Level::Warning,
        summary: "materialized views stacked more than two layers deep must be refreshed in order and rebuilt together",
    },
    Rule {
        name: "alter-type-rewrite",
        level: Level::Error,
        summary: "ALTER COLUMN TYPE that rewrites the whole table under an ACCESS EXCLUSIVE lock",
    },
    Rule {
        name: "rename-column-used-by-view",
        level: Level::Error,
        summary: "RENAME COLUMN of a column a view reads: PostgreSQL accepts it and the view keeps the old output name",
    },
];

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub level: Level,
    pub script: String,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

/// A file to lint: its name, text and parsed script.
pub struct LintInput<'a> {
    pub script: &'a str,
    pub text: &'a str,
    pub parsed: &'a Script,
}

#[derive(Default)]
struct Model {
    /// table -> column -> type as written (normalized).
    columns: BTreeMap<String, BTreeMap<String, String>>,
    /// matview -> matviews it reads (created in the files).
    matviews: BTreeMap<String, Vec<String>>,
    /// view or matview -> (identifier tokens of its definition).
    views: BTreeMap<String, Vec<String>>,
}

/// Lints `files` in the order they apply.
pub fn lint(files: &[LintInput<'_>]) -> Vec<Finding> {
    let mut model = Model::default();
    let mut out = Vec::new();
    for file in files {
        for stmt in &file.parsed.statements {
            let at = |offset_in_stmt: usize| line_col(file.text, stmt.offset + offset_in_stmt);
            let parse = SourceFile::parse(&stmt.text);
            for s in parse.tree().stmts() {
                match s {
                    ast::Stmt::CreateTable(t) => model_table(&mut model, &t),
                    ast::Stmt::CreateMaterializedView(m) => {
                        let Some(name) = m.view().and_then(|v| last_ident(v.syntax())) else {
                            continue;
                        };
                        if let Some(query) = m.query()
                            && let Some(star) = star_target(query.syntax())
                        {
                            let (line, column) = at(star);
                            out.push(Finding {
                                rule: "matview-select-star",
                                level: Level::Warning,
                                script: file.script.to_string(),
                                line,
                                column,
                                message: format!(
                                    "materialized view {name} is defined with SELECT *, so it depends on every column of what it reads and blocks any type change there; list the columns it needs"
                                ),
                            });
                        }
                        let idents = identifiers(m.syntax());
                        let reads: Vec<String> = model
                            .matviews
                            .keys()
                            .filter(|mv| idents.contains(mv))
                            .cloned()
                            .collect();
                        model.matviews.insert(name.clone(), reads);
                        let depth = chain_depth(&model.matviews, &name, 0);
                        if depth > 2 {
                            let (line, column) = at(0);
                            out.push(Finding {
                                rule: "matview-chain-depth",
                                level: Level::Warning,
                                script: file.script.to_string(),
                                line,
                                column,
                                message: format!(
                                    "materialized view {name} is layer {depth} of a chain of materialized views; more than two layers must always be refreshed in order (use 'evolve refresh') and are rebuilt together by any change below them; consider a plain view for the upper layers"
                                ),
                            });
                        }
                        model.views.insert(name, idents);
                    }
                    ast::Stmt::CreateView(v) => {
                        if let Some(name) = v.view().and_then(|v| last_ident(v.syntax())) {
                            model.views.insert(name, identifiers(v.syntax()));
                        }
                    }
                    ast::Stmt::AlterTable(a) => {
                        let Some(table) =
                            a.table_relation_name().and_then(|r| last_ident(r.syntax()))
                        else {
                            continue;
                        };
                        for action in a.actions() {
                            lint_action(&mut model, &table, &action, file, stmt, &mut out);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn lint_action(
    model: &mut Model,
    table: &str,
    action: &ast::AlterTableAction,
    file: &LintInput<'_>,
    stmt: &super::Statement,
    out: &mut Vec<Finding>,
) {
    let offset = usize::from(action.syntax().text_range().start());
    let (line, column) = line_col(file.text, stmt.offset + offset);
    match action {
        ast::AlterTableAction::AddColumn(add) => {
            if let (Some(name), Some(ty)) = (
                add.column_name().and_then(|n| last_ident(n.syntax())),
                add.ty(),
            ) {
                model
                    .columns
                    .entry(table.to_string())
                    .or_default()
                    .insert(name, normalize_type(&ty.syntax().text().to_string()));
            }
        }
        ast::AlterTableAction::AlterColumn(c) => {
            let Some(ast::AlterColumnOption::SetType(set)) = c.option() else {
                return;
            };
            let Some(col) = c.column_name_ref().and_then(|n| last_ident(n.syntax())) else {
                return;
            };
            let Some(new) = set
                .ty()
                .map(|t| normalize_type(&t.syntax().text().to_string()))
            else {
                return;
            };
            let old = model
                .columns
                .get(table)
                .and_then(|cols| cols.get(&col))
                .cloned();
            if let Some(old) = old {
                if set.using_expr().is_some() || rewrites(&old, &new) {
                    out.push(Finding {
                        rule: "alter-type-rewrite",
                        level: Level::Error,
                        script: file.script.to_string(),
                        line,
                        column,
                        message: format!(
                            "changing {table}.{col} from {old} to {new} rewrites the whole table under an ACCESS EXCLUSIVE lock; changes that do not rewrite are varchar widening, varchar to text, numeric precision increase at the same scale and dropping a length limit; otherwise add a new column, backfill it in batches and swap"
                        ),
                    });
                }
                if let Some(cols) = model.columns.get_mut(table) {
                    cols.insert(col, new);
                }
            }
        }
        ast::AlterTableAction::RenameColumn(r) => {
            let Some(old) = r.column_name_ref().and_then(|n| last_ident(n.syntax())) else {
                return;
            };
            let readers: Vec<&String> = model
                .views
                .iter()
                .filter(|(_, idents)| idents.iter().any(|i| i == table) && idents.contains(&old))
                .map(|(name, _)| name)
                .collect();
            if !readers.is_empty() {
                out.push(Finding {
                    rule: "rename-column-used-by-view",
                    level: Level::Error,
                    script: file.script.to_string(),
                    line,
                    column,
                    message: format!(
                        "renaming {table}.{old} is accepted by PostgreSQL, but {} keep{} the old output name {old}, so readers of the view and of the table disagree; add the new column name to the views in the same migration (CREATE OR REPLACE VIEW ... AS SELECT {old} AS <new name>)",
                        readers.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                        if readers.len() == 1 { "s" } else { "" }
                    ),
                });
            }
        }
        _ => {}
    }
}

fn model_table(model: &mut Model, t: &ast::CreateTable) {
    let Some(name) = t.table_name().and_then(|n| last_ident(n.syntax())) else {
        return;
    };
    let mut cols = BTreeMap::new();
    for node in t.syntax().descendants() {
        if let Some(col) = ast::Column::cast(node)
            && let (Some(n), Some(ty)) = (col.name(), col.ty())
            && let Some(n) = last_ident(n.syntax())
        {
            cols.insert(n, normalize_type(&ty.syntax().text().to_string()));
        }
    }
    model.columns.insert(name, cols);
}

/// The last identifier of a (possibly qualified) name, folded.
fn last_ident(node: &squawk_syntax::SyntaxNode) -> Option<String> {
    identifiers(node).pop()
}

/// Every identifier token under `node`, folded as PostgreSQL folds them.
fn identifiers(node: &squawk_syntax::SyntaxNode) -> Vec<String> {
    node.descendants_with_tokens()
        .filter_map(|e| e.into_token())
        .filter(|t| t.kind() == squawk_syntax::SyntaxKind::IDENT)
        .map(|t| {
            let text = t.text();
            match text.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                Some(inner) => inner.replace("\"\"", "\""),
                None => text.to_lowercase(),
            }
        })
        .collect()
}

/// Offset of a `*` or `x.*` target in the top-level select list.
fn star_target(query: &squawk_syntax::SyntaxNode) -> Option<usize> {
    let list = query.descendants().find_map(ast::TargetList::cast)?;
    list.targets().find_map(|t| {
        let text = t.syntax().text().to_string();
        let text = text.trim();
        (text == "*" || text.ends_with(".*")).then(|| usize::from(t.syntax().text_range().start()))
    })
}

fn chain_depth(graph: &BTreeMap<String, Vec<String>>, name: &str, guard: usize) -> usize {
    if guard > 64 {
        return guard;
    }
    1 + graph
        .get(name)
        .map(|reads| {
            reads
                .iter()
                .map(|r| chain_depth(graph, r, guard + 1))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Lower case, single spaces, common aliases spelled one way.
fn normalize_type(ty: &str) -> String {
    let t = ty
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let t = t.replace(" (", "(").replace(", ", ",");
    for (alias, canonical) in [
        ("character varying", "varchar"),
        ("int4", "integer"),
        ("int8", "bigint"),
        ("int2", "smallint"),
        ("decimal", "numeric"),
        ("timestamp without time zone", "timestamp"),
        ("timestamp with time zone", "timestamptz"),
    ] {
        if let Some(rest) = t.strip_prefix(alias) {
            return format!("{canonical}{rest}");
        }
    }
    if t == "int" {
        return "integer".into();
    }
    t
}

/// Splits `varchar(20)` into ("varchar", [20]).
fn type_args(ty: &str) -> (&str, Vec<u32>) {
    match ty.split_once('(') {
        Some((base, rest)) => {
            let args = rest
                .trim_end_matches(')')
                .split(',')
                .filter_map(|a| a.trim().parse().ok())
                .collect();
            (base, args)
        }
        None => (ty, Vec::new()),
    }
}

/// Whether PostgreSQL rewrites the table for `old` to `new`: everything
/// except the binary-coercible changes it knows to skip.
fn rewrites(old: &str, new: &str) -> bool {
    if old == new {
        return false;
    }
    let (ob, oa) = type_args(old);
    let (nb, na) = type_args(new);
    match (ob, nb) {
        ("varchar", "varchar") => {
            !(na.is_empty() || oa.first().zip(na.first()).is_some_and(|(o, n)| n >= o))
        }
        ("varchar", "text") | ("text", "varchar") if na.is_empty() => false,
        ("numeric", "numeric") => {
            if na.is_empty() {
                return false;
            }
            if oa.is_empty() {
                return true;
            }
            let (op, os) = (oa[0], oa.get(1).copied().unwrap_or(0));
            let (np, ns) = (na[0], na.get(1).copied().unwrap_or(0));
            !(np >= op && ns == os)
        }
        ("varbit" | "bit varying", "varbit" | "bit varying") => {
            !(na.is_empty() || oa.first().zip(na.first()).is_some_and(|(o, n)| n >= o))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration::parse_script;

    /// Lints files given as (name, text) and renders findings one per line.
    fn check(files: &[(&str, &str)], expected: &[&str]) {
        let parsed: Vec<Script> = files
            .iter()
            .map(|(_, t)| parse_script(t).expect("parse"))
            .collect();
        let inputs: Vec<LintInput> = files
            .iter()
            .zip(&parsed)
            .map(|((name, text), parsed)| LintInput {
                script: name,
                text,
                parsed,
            })
            .collect();
        let got: Vec<String> = lint(&inputs)
            .into_iter()
            .map(|f| format!("{}:{}:{} {}", f.script, f.line, f.column, f.rule))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn select_star_in_a_matview() {
        check(
            &[(
                "V1",
                "CREATE TABLE t (a int);\nCREATE MATERIALIZED VIEW m AS SELECT * FROM t;",
            )],
            &["V1:2:38 matview-select-star"],
        );
        check(
            &[("V1", "CREATE MATERIALIZED VIEW m AS SELECT t.* FROM t")],
            &["V1:1:38 matview-select-star"],
        );
        check(
            &[(
                "V1",
                "CREATE MATERIALIZED VIEW m AS SELECT a, count(*) FROM t GROUP BY a",
            )],
            &[],
        );
        check(&[("V1", "CREATE VIEW v AS SELECT * FROM t")], &[]);
    }

    #[test]
    fn chains_deeper_than_two_layers() {
        let files = [
            (
                "V1",
                "CREATE MATERIALIZED VIEW daily AS SELECT d, sum(x) AS s FROM t GROUP BY d",
            ),
            (
                "V2",
                "CREATE MATERIALIZED VIEW monthly AS SELECT sum(s) AS s FROM daily",
            ),
            (
                "V3",
                "CREATE MATERIALIZED VIEW yearly AS SELECT sum(s) AS s FROM monthly",
            ),
        ];
        check(&files[..2], &[]);
        check(&files, &["V3:1:1 matview-chain-depth"]);
    }

    #[test]
    fn type_changes_that_rewrite() {
        let create = (
            "V1",
            "CREATE TABLE orders (id int, status varchar(20), total numeric(10,2), n integer)",
        );
        let alter = |sql: &'static str| [create, ("V2", sql)];
        check(
            &alter("ALTER TABLE orders ALTER COLUMN status TYPE varchar(40)"),
            &[],
        );
        check(
            &alter("ALTER TABLE orders ALTER COLUMN status TYPE text"),
            &[],
        );
        check(
            &alter("ALTER TABLE orders ALTER COLUMN total TYPE numeric(12, 2)"),
            &[],
        );
        check(
            &alter("ALTER TABLE orders ALTER COLUMN status TYPE varchar(10)"),
            &["V2:1:20 alter-type-rewrite"],
        );
        check(
            &alter("ALTER TABLE orders ALTER COLUMN n TYPE bigint"),
            &["V2:1:20 alter-type-rewrite"],
        );
        check(
            &alter("ALTER TABLE orders ALTER COLUMN total TYPE numeric(12,3)"),
            &["V2:1:20 alter-type-rewrite"],
        );
        check(
            &alter("ALTER TABLE orders ALTER COLUMN status TYPE varchar(40) USING upper(status)"),
            &["V2:1:20 alter-type-rewrite"],
        );
        // Unknown old type: nothing to say.
        check(
            &[("V1", "ALTER TABLE other ALTER COLUMN x TYPE bigint")],
            &[],
        );
        // A column added later is known too.
        check(
            &[
                create,
                ("V2", "ALTER TABLE orders ADD COLUMN code char(3)"),
                ("V3", "ALTER TABLE orders ALTER code TYPE char(5)"),
            ],
            &["V3:1:20 alter-type-rewrite"],
        );
    }

    #[test]
    fn renaming_a_column_a_view_reads() {
        let base = [
            ("V1", "CREATE TABLE orders (id int, status text, note text)"),
            (
                "V2",
                "CREATE VIEW open_orders AS SELECT id, status FROM orders WHERE status = 'open'",
            ),
        ];
        check(
            &[
                base[0],
                base[1],
                ("V3", "ALTER TABLE orders RENAME COLUMN status TO state"),
            ],
            &["V3:1:20 rename-column-used-by-view"],
        );
        check(
            &[
                base[0],
                base[1],
                ("V3", "ALTER TABLE orders RENAME COLUMN note TO remark"),
            ],
            &[],
        );
    }
}
