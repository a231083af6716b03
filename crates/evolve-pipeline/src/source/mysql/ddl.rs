//! DDL statements seen in the binlog's `QUERY` events: a tokenizer and
//! a reader of the statements that change a table's columns or name
//! (pure, no I/O).

/// A token of a DDL statement.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// A bare word: a keyword, a name or a number.
    Word(String),
    /// A `backquoted` name, its quotes undone.
    Quoted(String),
    /// A string literal (its text does not matter here).
    Literal,
    /// Any other character.
    Punct(char),
}

/// The tokens of `sql`: comments skipped, except the text of MySQL's
/// executable comments (`/*!50100 ... */`, MariaDB's `/*M!100100 ... */`),
/// which the server runs.
fn tokens(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = at(i) {
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == Some('*') {
            let mut j = i + 2;
            let executable = match (at(j), at(j + 1)) {
                (Some('!'), _) => {
                    j += 1;
                    true
                }
                (Some('M'), Some('!')) => {
                    j += 2;
                    true
                }
                _ => false,
            };
            if executable {
                while at(j).is_some_and(|c| c.is_ascii_digit()) {
                    j += 1;
                }
                i = j;
            } else {
                i = j;
                while i < chars.len() && !(at(i) == Some('*') && at(i + 1) == Some('/')) {
                    i += 1;
                }
                i += 2;
            }
        } else if c == '*' && at(i + 1) == Some('/') {
            // The end of an executable comment.
            i += 2;
        } else if c == '#'
            || (c == '-' && at(i + 1) == Some('-') && at(i + 2).is_none_or(char::is_whitespace))
        {
            while at(i).is_some_and(|c| c != '\n') {
                i += 1;
            }
        } else if c == '`' {
            let mut name = String::new();
            i += 1;
            loop {
                match at(i) {
                    None => break,
                    Some('`') if at(i + 1) == Some('`') => {
                        name.push('`');
                        i += 2;
                    }
                    Some('`') => {
                        i += 1;
                        break;
                    }
                    Some(c) => {
                        name.push(c);
                        i += 1;
                    }
                }
            }
            out.push(Token::Quoted(name));
        } else if c == '\'' || c == '"' {
            i += 1;
            loop {
                match at(i) {
                    None => break,
                    Some('\\') => i += 2,
                    Some(q) if q == c && at(i + 1) == Some(c) => i += 2,
                    Some(q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            out.push(Token::Literal);
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while at(i).is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// What a DDL statement does to the tables it names, as far as the stream
/// must know: which columns stop existing under their name, and which
/// tables stop existing under theirs.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Ddl {
    /// Columns of `table` dropped, or renamed away (`CHANGE`, `RENAME
    /// COLUMN`).
    Columns {
        table: (String, String),
        removed: Vec<String>,
    },
    /// `table` dropped (`to: None`) or renamed to `to`.
    Gone {
        table: (String, String),
        to: Option<(String, String)>,
    },
    /// Every table of `database` dropped (`DROP DATABASE`, `CREATE OR
    /// REPLACE DATABASE`).
    Database { database: String },
    /// Rows of `tables` removed or replaced by `statement` (`ALTER TABLE
    /// ... TRUNCATE PARTITION`, say), which the binlog logs as the
    /// statement only, never as the rows it changed.
    Rows {
        tables: Vec<(String, String)>,
        statement: &'static str,
    },
}

/// A cursor over a statement's tokens.
struct Tokens<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl<'a> Tokens<'a> {
    fn peek(&self, ahead: usize) -> Option<&'a Token> {
        self.tokens.get(self.at + ahead)
    }

    fn is(&self, ahead: usize, keyword: &str) -> bool {
        matches!(self.peek(ahead), Some(Token::Word(w)) if w.eq_ignore_ascii_case(keyword))
    }

    /// Takes `keyword` if it is next.
    fn take(&mut self, keyword: &str) -> bool {
        let found = self.is(0, keyword);
        if found {
            self.at += 1;
        }
        found
    }

    /// Takes `IF EXISTS` if it is next.
    fn if_exists(&mut self) {
        if self.is(0, "if") && self.is(1, "exists") {
            self.at += 2;
        }
    }

    fn name(&mut self) -> Option<String> {
        let name = match self.peek(0)? {
            Token::Word(w) | Token::Quoted(w) => w.clone(),
            _ => return None,
        };
        self.at += 1;
        Some(name)
    }

    /// `[database.]table`, with `default` as its database.
    fn table(&mut self, default: &str) -> Option<(String, String)> {
        let first = self.name()?;
        if self.peek(0) == Some(&Token::Punct('.')) {
            self.at += 1;
            let second = self.name()?;
            return Some((first, second));
        }
        Some((default.to_string(), first))
    }

    /// MariaDB's `WAIT n` / `NOWAIT` after a table name.
    fn wait(&mut self) {
        if self.take("nowait") {
            return;
        }
        if self.is(0, "wait") {
            self.at += 2;
        }
    }

    /// The rest of the statement split at commas outside parentheses.
    fn clauses(&self) -> Vec<&'a [Token]> {
        let rest = &self.tokens[self.at.min(self.tokens.len())..];
        let mut out = Vec::new();
        let (mut depth, mut start) = (0usize, 0);
        for (i, t) in rest.iter().enumerate() {
            match t {
                Token::Punct('(') => depth += 1,
                Token::Punct(')') => depth = depth.saturating_sub(1),
                Token::Punct(',') if depth == 0 => {
                    out.push(&rest[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&rest[start..]);
        out
    }
}

/// What `sql` (a statement the binlog logged as text, run in database
/// `default`) does to columns and tables: `ALTER TABLE` with `DROP
/// [COLUMN]`, `CHANGE [COLUMN]` to another name, `RENAME COLUMN` or
/// `RENAME [TO]`, and the partition and tablespace clauses that remove or
/// replace rows without logging them (`TRUNCATE`, `DROP`, `EXCHANGE` and
/// `CONVERT PARTITION`, `CONVERT TABLE ... TO PARTITION`, `IMPORT`);
/// `RENAME TABLE`; `DROP TABLE`; `CREATE OR REPLACE TABLE`; `DROP
/// DATABASE` and `CREATE OR REPLACE DATABASE` (and their `SCHEMA`
/// spellings). Anything else, and anything this reading does not
/// recognize, is nothing: the next table map shows added and retyped
/// columns in any case. Within one `ALTER TABLE`, the rows come first,
/// then the columns, then a rename.
pub(super) fn parse_ddl(sql: &str, default: &str) -> Vec<Ddl> {
    let tokens = tokens(sql);
    let mut t = Tokens {
        tokens: &tokens,
        at: 0,
    };
    let mut out = Vec::new();
    if t.take("alter") {
        t.take("online");
        t.take("ignore");
        if !t.take("table") {
            return out;
        }
        t.if_exists();
        let Some(table) = t.table(default) else {
            return out;
        };
        t.wait();
        let mut removed = Vec::new();
        let mut renamed = None;
        // Tables whose rows change unlogged, and tables that go.
        let mut rows: Option<(&'static str, Vec<(String, String)>)> = None;
        let mut gone = Vec::new();
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            if c.is(0, "truncate") && c.is(1, "partition") {
                rows.get_or_insert(("ALTER TABLE ... TRUNCATE PARTITION", Vec::new()));
            } else if c.is(0, "drop") && c.is(1, "partition") {
                rows.get_or_insert(("ALTER TABLE ... DROP PARTITION", Vec::new()));
            } else if c.is(0, "exchange") && c.is(1, "partition") {
                c.at += 2;
                let with = c.name().is_some() && c.take("with") && c.take("table");
                let other = if with { c.table(default) } else { None };
                let (_, tables) =
                    rows.get_or_insert(("ALTER TABLE ... EXCHANGE PARTITION", Vec::new()));
                tables.extend(other);
            } else if c.is(0, "convert") && c.is(1, "partition") {
                rows.get_or_insert(("ALTER TABLE ... CONVERT PARTITION", Vec::new()));
            } else if c.is(0, "convert") && c.is(1, "table") {
                // Rows of another table move into a partition of this one,
                // and that table is gone.
                c.at += 2;
                if let Some(other) = c.table(default) {
                    gone.push(other);
                }
                rows.get_or_insert(("ALTER TABLE ... CONVERT TABLE ... TO PARTITION", Vec::new()));
            } else if c.is(0, "import") {
                rows.get_or_insert(("ALTER TABLE ... IMPORT TABLESPACE", Vec::new()));
            } else if c.take("drop") {
                const NOT_COLUMNS: &[&str] = &[
                    "primary",
                    "index",
                    "key",
                    "foreign",
                    "constraint",
                    "check",
                    "partition",
                    "system",
                    "period",
                    "unique",
                    "fulltext",
                    "spatial",
                ];
                if NOT_COLUMNS.iter().any(|k| c.is(0, k)) {
                    continue;
                }
                c.take("column");
                c.if_exists();
                if let Some(column) = c.name() {
                    removed.push(column);
                }
            } else if c.take("change") {
                c.take("column");
                c.if_exists();
                if let (Some(old), Some(new)) = (c.name(), c.name())
                    && !old.eq_ignore_ascii_case(&new)
                {
                    removed.push(old);
                }
            } else if c.take("rename") {
                if c.take("column") {
                    c.if_exists();
                    if let Some(old) = c.name() {
                        removed.push(old);
                    }
                } else if !(c.is(0, "index") || c.is(0, "key")) {
                    if !c.take("to") {
                        c.take("as");
                    }
                    renamed = c.table(&table.0);
                }
            }
        }
        if let Some((statement, mut tables)) = rows {
            tables.insert(0, table.clone());
            out.push(Ddl::Rows { tables, statement });
        }
        out.extend(gone.into_iter().map(|table| Ddl::Gone { table, to: None }));
        if !removed.is_empty() {
            out.push(Ddl::Columns {
                table: table.clone(),
                removed,
            });
        }
        if let Some(to) = renamed {
            out.push(Ddl::Gone {
                table,
                to: Some(to),
            });
        }
    } else if t.take("rename") {
        if !(t.take("table") || t.take("tables")) {
            return out;
        }
        t.if_exists();
        let mut pairs = Vec::new();
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            let Some(from) = c.table(default) else {
                continue;
            };
            c.wait();
            if c.take("to")
                && let Some(to) = c.table(default)
            {
                pairs.push((from, to));
            }
        }
        // The renames run in order: a table whose name a later rename of
        // the statement gives to another table (an online schema change's
        // cut-over, `RENAME TABLE t TO t_old, t_new TO t`) is not followed
        // to where it went: the name holds another table now.
        for (i, (from, to)) in pairs.iter().enumerate() {
            let taken = pairs[i + 1..].iter().any(|(_, later)| later == from);
            out.push(Ddl::Gone {
                table: from.clone(),
                to: (!taken).then(|| to.clone()),
            });
        }
    } else if t.take("drop") {
        if t.take("database") || t.take("schema") {
            t.if_exists();
            if let Some(database) = t.name() {
                out.push(Ddl::Database { database });
            }
            return out;
        }
        if t.take("temporary") || !t.take("table") {
            return out;
        }
        t.if_exists();
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            if let Some(table) = c.table(default) {
                out.push(Ddl::Gone { table, to: None });
            }
        }
    } else if t.take("create") && t.take("or") && t.take("replace") {
        if t.take("database") || t.take("schema") {
            if let Some(database) = t.name() {
                out.push(Ddl::Database { database });
            }
            return out;
        }
        if t.take("temporary") || !t.take("table") {
            return out;
        }
        if let Some(table) = t.table(default) {
            out.push(Ddl::Gone { table, to: None });
        }
    }
    out
}

/// A statement that changes rows, logged as its text rather than as the
/// rows it changed (the session that ran it had `binlog_format`
/// `STATEMENT` or `MIXED`): `kind` names it (`UPDATE`), `tables` are the
/// tables it writes when this reading can tell (`INSERT`, `REPLACE` and
/// `LOAD DATA` into one table, a single-table `UPDATE` or `DELETE`), `None`
/// when it cannot (a multi-table `UPDATE` or `DELETE`, a form it does not
/// know).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct StatementRows {
    pub(super) kind: &'static str,
    pub(super) tables: Option<Vec<(String, String)>>,
}

/// The row change `sql` (run in database `default`) makes, when it is one
/// (see [`StatementRows`]); `None` for any other statement. Reads the
/// statement's first few thousand characters only: the table comes
/// before the values.
pub(super) fn statement_rows(sql: &str, default: &str) -> Option<StatementRows> {
    let head = sql.char_indices().nth(4096).map_or(sql, |(i, _)| &sql[..i]);
    let tokens = tokens(head);
    let mut t = Tokens {
        tokens: &tokens,
        at: 0,
    };
    let skip = |t: &mut Tokens<'_>, words: &[&str]| while words.iter().any(|w| t.take(w)) {};
    // What may follow a single table's name (and its alias).
    const AFTER: &[&str] = &["set", "where", "order", "limit", "returning", "partition"];
    let single = |t: &mut Tokens<'_>| -> Option<(String, String)> {
        let table = t.table(default)?;
        // An alias: `UPDATE t AS x SET`, `UPDATE t x SET`.
        if t.take("as") || (t.peek(0).is_some() && !AFTER.iter().any(|w| t.is(0, w))) {
            t.name();
        }
        Some(table)
    };
    let (kind, tables) = if t.is(0, "insert") || t.is(0, "replace") {
        let kind = if t.take("insert") {
            "INSERT"
        } else {
            "REPLACE"
        };
        t.at = 1;
        skip(
            &mut t,
            &["low_priority", "delayed", "high_priority", "ignore"],
        );
        t.take("into");
        (kind, t.table(default).map(|table| vec![table]))
    } else if t.take("update") {
        skip(&mut t, &["low_priority", "ignore"]);
        let table = single(&mut t).filter(|_| t.is(0, "set"));
        ("UPDATE", table.map(|table| vec![table]))
    } else if t.take("delete") {
        skip(&mut t, &["low_priority", "quick", "ignore"]);
        let table = if t.take("from") {
            single(&mut t).filter(|_| t.peek(0).is_none() || AFTER[1..].iter().any(|w| t.is(0, w)))
        } else {
            None
        };
        ("DELETE", table.map(|table| vec![table]))
    } else if t.take("load") {
        if !(t.take("data") || t.take("xml")) {
            return None;
        }
        let mut table = None;
        while let Some(token) = t.peek(0) {
            t.at += 1;
            if matches!(token, Token::Word(w) if w.eq_ignore_ascii_case("into")) && t.take("table")
            {
                table = t.table(default);
                break;
            }
        }
        ("LOAD DATA", table.map(|table| vec![table]))
    } else {
        return None;
    };
    Some(StatementRows { kind, tables })
}

pub(super) fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

pub(super) fn quoted_table(database: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(database), quote_ident(table))
}
