//! ALTER TABLE actions that PostgreSQL refuses while other objects read the
//! column: `ALTER COLUMN ... TYPE` and `DROP COLUMN` ("cannot alter type of
//! a column used by a view or rule", "cannot drop column ... because other
//! objects depend on it"). Found with squawk's parser, never by pattern.

use squawk_syntax::ast::{self, AstNode, SourceFile};

/// What the statement does to the column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlterAction {
    /// `ALTER [COLUMN] c [SET DATA] TYPE ...`
    SetType,
    /// `DROP [COLUMN] [IF EXISTS] c`
    DropColumn,
}

/// One column change that dependents may block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedAlter {
    /// As written, folded like PostgreSQL folds unquoted names.
    pub schema: Option<String>,
    pub table: String,
    pub column: String,
    pub action: AlterAction,
}

/// The column changes in one statement that dependents could block. Only
/// `ALTER TABLE` statements are parsed; anything else gives nothing.
pub fn blocked_alters(statement: &str) -> Vec<BlockedAlter> {
    let head: String = statement
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase();
    // Short statements only: the parser recurses, and ALTER TABLE is short.
    if head != "ALTER TABLE" || statement.len() > 64 * 1024 {
        return Vec::new();
    }
    let parse = SourceFile::parse(statement);
    let mut out = Vec::new();
    for stmt in parse.tree().stmts() {
        let ast::Stmt::AlterTable(alter) = stmt else {
            continue;
        };
        let Some(name) = alter
            .table_relation_name()
            .and_then(|r| r.table_name_ref())
            .map(|n| n.syntax().text().to_string())
        else {
            continue;
        };
        let Some((schema, table)) = split_name(&name) else {
            continue;
        };
        for action in alter.actions() {
            let (column, kind) = match action {
                ast::AlterTableAction::AlterColumn(c)
                    if matches!(c.option(), Some(ast::AlterColumnOption::SetType(_))) =>
                {
                    (c.column_name_ref(), AlterAction::SetType)
                }
                ast::AlterTableAction::DropColumn(d) => {
                    (d.column_name_ref(), AlterAction::DropColumn)
                }
                _ => continue,
            };
            let Some(column) = column.and_then(|c| fold(c.syntax().text().to_string().trim()))
            else {
                continue;
            };
            out.push(BlockedAlter {
                schema: schema.clone(),
                table: table.clone(),
                column,
                action: kind,
            });
        }
    }
    out
}

/// `a`, `s.a`, `"S"."A"` into (schema, name), folding unquoted parts.
pub(super) fn split_name(name: &str) -> Option<(Option<String>, String)> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut in_quotes = false;
    let mut chars = name.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if in_quotes && chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            '"' => {
                in_quotes = !in_quotes;
                current.push('"');
            }
            '.' if !in_quotes => parts.push(std::mem::take(&mut current)),
            c if c.is_whitespace() && !in_quotes => {}
            c => current.push(c),
        }
    }
    parts.push(current);
    let mut folded = parts.iter().map(|p| fold(p)).collect::<Option<Vec<_>>>()?;
    match folded.len() {
        1 => Some((None, folded.remove(0))),
        2 => {
            let table = folded.remove(1);
            Some((Some(folded.remove(0)), table))
        }
        // db.schema.table: the database part is the current one.
        3 => {
            let table = folded.remove(2);
            Some((Some(folded.remove(1)), table))
        }
        _ => None,
    }
}

/// An identifier as PostgreSQL stores it: quoted kept (quotes undoubled),
/// unquoted lower-cased.
fn fold(part: &str) -> Option<String> {
    if part.is_empty() {
        return None;
    }
    if let Some(inner) = part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
        return Some(inner.to_string());
    }
    Some(part.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(sql: &str, expected: &[(Option<&str>, &str, &str, AlterAction)]) {
        let got: Vec<_> = blocked_alters(sql)
            .into_iter()
            .map(|b| (b.schema, b.table, b.column, b.action))
            .collect();
        let expected: Vec<_> = expected
            .iter()
            .map(|(s, t, c, a)| (s.map(str::to_string), t.to_string(), c.to_string(), *a))
            .collect();
        assert_eq!(got, expected, "{sql}");
    }

    #[test]
    fn finds_type_changes_and_drops() {
        use AlterAction::*;
        check(
            "ALTER TABLE orders ALTER COLUMN status TYPE text",
            &[(None, "orders", "status", SetType)],
        );
        check(
            "alter table Sales.\"Orders\" alter status set data type varchar(40), drop column IF EXISTS \"Note\", add column x int",
            &[
                (Some("sales"), "Orders", "status", SetType),
                (Some("sales"), "Orders", "Note", DropColumn),
            ],
        );
        check(
            "ALTER TABLE ONLY orders DROP region CASCADE",
            &[(None, "orders", "region", DropColumn)],
        );
        check(
            "ALTER TABLE IF EXISTS orders ALTER COLUMN a SET NOT NULL",
            &[],
        );
        check("ALTER TABLE orders RENAME COLUMN a TO b", &[]);
        check("ALTER VIEW v ALTER COLUMN a SET DEFAULT 1", &[]);
        check("SELECT 1", &[]);
        check("ALTER TABLE", &[]);
        check("ALTER TABLE orders ALTER COLUMN", &[]);
    }
}
