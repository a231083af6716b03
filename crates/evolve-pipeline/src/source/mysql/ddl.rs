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
/// `RENAME [TO]`; `RENAME TABLE`; `DROP TABLE`; `CREATE OR REPLACE
/// TABLE`. Anything else, and anything this reading does not recognize,
/// is nothing: the next table map shows added and retyped columns in any
/// case.
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
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            if c.take("drop") {
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
        if let Some(to) = renamed {
            out.push(Ddl::Gone {
                table,
                to: Some(to),
            });
        } else if !removed.is_empty() {
            out.push(Ddl::Columns { table, removed });
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
        if t.take("temporary") || !t.take("table") {
            return out;
        }
        if let Some(table) = t.table(default) {
            out.push(Ddl::Gone { table, to: None });
        }
    }
    out
}

pub(super) fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

pub(super) fn quoted_table(database: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(database), quote_ident(table))
}
