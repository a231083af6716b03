//! Lexical facts about single statements: what kind of statement it is, and
//! which index a `CREATE INDEX CONCURRENTLY` builds.
//!
//! Both only look at the first few tokens of a statement, as produced by
//! squawk's lexer (the one its parser uses), so they work on statements that
//! squawk cannot fully parse and never look inside strings or comments.

use squawk_lexer::TokenKind;

use super::script::StatementKind;

/// PostgreSQL truncates identifiers to `NAMEDATALEN - 1` bytes.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// A token with its byte offset and text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token<'a> {
    pub(crate) kind: TokenKind,
    pub(crate) offset: usize,
    pub(crate) text: &'a str,
}

impl Token<'_> {
    /// Whitespace and comments.
    pub(crate) fn is_trivia(&self) -> bool {
        matches!(
            self.kind,
            TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment { .. }
        )
    }

    /// Byte offset just past the token.
    pub(crate) fn end(&self) -> usize {
        self.offset + self.text.len()
    }

    /// Whether this is the unquoted word `word` (ASCII case-insensitive).
    /// Quoted identifiers never match, as in PostgreSQL.
    pub(crate) fn is_word(&self, word: &str) -> bool {
        self.kind == TokenKind::Ident && self.text.eq_ignore_ascii_case(word)
    }
}

/// Lexes `text` with squawk's lexer. Stops early only if a token length does
/// not land on the text (which the lexer never produces).
pub(crate) fn lex(text: &str) -> impl Iterator<Item = Token<'_>> {
    let mut offset: usize = 0;
    squawk_lexer::tokenize(text).map_while(move |token| {
        let start = offset;
        let end = start.checked_add(usize::try_from(token.len).ok()?)?;
        let token_text = text.get(start..end)?;
        offset = end;
        Some(Token {
            kind: token.kind,
            offset: start,
            text: token_text,
        })
    })
}

/// The statement's leading significant tokens, enough for [`classify`] and
/// [`concurrent_index_name`] (which look at fixed positions near the start),
/// plus what they need to know about the rest.
#[derive(Debug, Default)]
pub(crate) struct Head<'a> {
    /// The first [`Head::CAPACITY`] significant tokens.
    tokens: Vec<Token<'a>>,
    /// How many significant tokens the statement has in all.
    count: usize,
    /// The last significant token.
    last: Option<Token<'a>>,
    /// Whether the words `FROM STDIN` follow each other somewhere.
    from_stdin: bool,
}

impl<'a> Head<'a> {
    const CAPACITY: usize = 48;

    /// Adds the next significant token of the statement.
    pub(crate) fn push(&mut self, token: Token<'a>) {
        if self.tokens.len() < Self::CAPACITY {
            self.tokens.push(token);
        }
        self.count += 1;
        if token.is_word("stdin") && self.last.is_some_and(|t| t.is_word("from")) {
            self.from_stdin = true;
        }
        self.last = Some(token);
    }

    /// `COPY ... FROM STDIN ...`: its data follows the statement in the
    /// script, as psql and Flyway read it.
    pub(crate) fn is_copy_from_stdin(&self) -> bool {
        self.from_stdin && self.word(0, "copy")
    }

    /// The head of a statement given as text.
    pub(crate) fn of(text: &'a str) -> Self {
        let mut head = Head::default();
        for token in lex(text).filter(|t| !t.is_trivia()) {
            head.push(token);
        }
        head
    }

    fn word(&self, i: usize, word: &str) -> bool {
        self.tokens.get(i).is_some_and(|t| t.is_word(word))
    }

    fn kind(&self, i: usize) -> Option<TokenKind> {
        self.tokens.get(i).map(|t| t.kind)
    }

    /// The index just past the parenthesized list that starts at `open`, or
    /// `None` when it does not close within the head.
    fn skip_parens(&self, open: usize) -> Option<usize> {
        let mut depth = 0usize;
        for (i, token) in self.tokens.iter().enumerate().skip(open) {
            match token.kind {
                TokenKind::OpenParen => depth += 1,
                TokenKind::CloseParen => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ if depth == 0 => return None,
                _ => {}
            }
        }
        None
    }
}

/// Classifies a statement by its leading keywords.
///
/// The non-transactional list holds only statements PostgreSQL refuses inside
/// a transaction block whatever the objects involved (checked against
/// `PreventInTransactionBlock` calls in PostgreSQL's source):
/// `CREATE [UNIQUE] INDEX CONCURRENTLY`, `DROP INDEX CONCURRENTLY`,
/// `REINDEX ... CONCURRENTLY`, `REINDEX SCHEMA|DATABASE|SYSTEM`, `VACUUM`,
/// `CREATE|DROP DATABASE`, `ALTER DATABASE ... SET TABLESPACE`,
/// `CREATE|DROP TABLESPACE`, `ALTER SYSTEM`, `ALTER TABLE ... DETACH PARTITION
/// ... CONCURRENTLY`, `CLUSTER` without a table, and `DISCARD ALL`. Statements
/// whose refusal depends on options or on the objects (`CREATE SUBSCRIPTION`
/// with a slot, `CLUSTER` of a partitioned table) are left as `Other`, and so
/// is `ALTER TYPE ... ADD VALUE`, which PostgreSQL 12+ allows in a transaction.
pub(crate) fn classify(head: &Head<'_>) -> StatementKind {
    use StatementKind::{NonTransactional, Other, TransactionControl};
    let w = |i: usize, word: &str| head.word(i, word);
    let Some(first) = head.tokens.first() else {
        return Other;
    };
    if first.kind != TokenKind::Ident {
        return Other;
    }
    let first = first.text.to_ascii_lowercase();
    match first.as_str() {
        "begin" | "commit" | "end" | "rollback" | "abort" | "savepoint" | "release" => {
            TransactionControl
        }
        "start" | "prepare" if w(1, "transaction") => TransactionControl,
        "vacuum" => NonTransactional,
        "create" => {
            let index = if w(1, "unique") { 2 } else { 1 };
            if (w(index, "index") && w(index + 1, "concurrently"))
                || w(1, "database")
                || w(1, "tablespace")
            {
                NonTransactional
            } else {
                Other
            }
        }
        "drop" => {
            if (w(1, "index") && w(2, "concurrently")) || w(1, "database") || w(1, "tablespace") {
                NonTransactional
            } else {
                Other
            }
        }
        "alter" => {
            let detach_concurrently = w(1, "table")
                && head
                    .tokens
                    .windows(2)
                    .any(|pair| pair[0].is_word("detach") && pair[1].is_word("partition"))
                && head.last.is_some_and(|t| t.is_word("concurrently"));
            if w(1, "system")
                || (w(1, "database") && w(3, "set") && w(4, "tablespace"))
                || detach_concurrently
            {
                NonTransactional
            } else {
                Other
            }
        }
        "reindex" => classify_reindex(head),
        "cluster" => {
            // CLUSTER [VERBOSE] | CLUSTER (options): every table, one
            // transaction each. With a table name it is transactional.
            let end = if w(1, "verbose") {
                Some(2)
            } else if head.kind(1) == Some(TokenKind::OpenParen) {
                head.skip_parens(1)
            } else {
                Some(1)
            };
            if end == Some(head.count) {
                NonTransactional
            } else {
                Other
            }
        }
        "discard" if w(1, "all") => NonTransactional,
        _ => Other,
    }
}

/// `REINDEX [ ( option [, ...] ) ] { INDEX | TABLE | SCHEMA | DATABASE | SYSTEM } [ CONCURRENTLY ] [ name ]`,
/// where the options may include `CONCURRENTLY [ boolean ]`.
fn classify_reindex(head: &Head<'_>) -> StatementKind {
    let mut concurrently = false;
    let mut target = 1;
    if head.kind(1) == Some(TokenKind::OpenParen) {
        let Some(end) = head.skip_parens(1) else {
            return StatementKind::Other;
        };
        // Options are `name [value]`, separated by commas.
        let options = head.tokens.get(2..end - 1).unwrap_or_default();
        for option in options.split(|t| t.kind == TokenKind::Comma) {
            if let [name, value @ ..] = option
                && name.is_word("concurrently")
            {
                concurrently = match value {
                    [] => true,
                    [value] => !is_false(value),
                    _ => concurrently,
                };
            }
        }
        target = end;
    }
    let whole_database = ["schema", "database", "system"]
        .iter()
        .any(|word| head.word(target, word));
    if concurrently || whole_database || head.word(target + 1, "concurrently") {
        StatementKind::NonTransactional
    } else {
        StatementKind::Other
    }
}

/// Whether an option value is one of PostgreSQL's spellings of false.
fn is_false(value: &Token<'_>) -> bool {
    let text = value.text.trim_matches('\'');
    ["false", "off", "0"]
        .iter()
        .any(|word| text.eq_ignore_ascii_case(word))
}

/// For `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name ON [ONLY] table ...`,
/// the index's schema (the table's, when the table is schema-qualified) and
/// name, both as PostgreSQL stores them.
pub(crate) fn concurrent_index_name(head: &Head<'_>) -> Option<(Option<String>, String)> {
    let w = |i: usize, word: &str| head.word(i, word);
    let mut i = if w(1, "unique") { 2 } else { 1 };
    if !(w(0, "create") && w(i, "index") && w(i + 1, "concurrently")) {
        return None;
    }
    i += 2;
    if w(i, "if") && w(i + 1, "not") && w(i + 2, "exists") {
        i += 3;
    }
    if w(i, "on") {
        // An unnamed index: PostgreSQL picks the name.
        return None;
    }
    let name = identifier(head.tokens.get(i)?)?;
    i += 1;
    if !w(i, "on") {
        return None;
    }
    i += 1;
    if w(i, "only") {
        i += 1;
    }
    let mut parts = vec![identifier(head.tokens.get(i)?)?];
    i += 1;
    while head.kind(i) == Some(TokenKind::Dot) {
        parts.push(identifier(head.tokens.get(i + 1)?)?);
        i += 2;
    }
    // table, schema.table or database.schema.table.
    let schema = match parts.len() {
        1 => None,
        2 | 3 => parts.into_iter().rev().nth(1),
        _ => return None,
    };
    Some((schema, name))
}

/// An identifier as PostgreSQL stores it: quoted ones unquoted (`"My ""x"""`
/// is `My "x"`), unquoted ones folded to lower case (ASCII letters only, as
/// PostgreSQL does in UTF-8 databases), both truncated to 63 bytes. `None`
/// for anything else, including `U&"..."` identifiers and `""`.
fn identifier(token: &Token<'_>) -> Option<String> {
    let name = match token.kind {
        TokenKind::Ident => token.text.to_ascii_lowercase(),
        TokenKind::QuotedIdent {
            terminated: true,
            uescape: false,
        } => {
            let inner = token.text.strip_prefix('"')?.strip_suffix('"')?;
            inner.replace("\"\"", "\"")
        }
        _ => return None,
    };
    if name.is_empty() {
        return None;
    }
    Some(truncate_identifier(name))
}

/// Truncates to at most 63 bytes without splitting a character.
fn truncate_identifier(mut name: String) -> String {
    if name.len() > MAX_IDENTIFIER_BYTES {
        let mut end = MAX_IDENTIFIER_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use StatementKind::{NonTransactional, Other, TransactionControl};

    fn check_kind(statement: &str, expected: StatementKind) {
        assert_eq!(classify(&Head::of(statement)), expected, "{statement:?}");
    }

    fn check_index(statement: &str, expected: Option<(Option<&str>, &str)>) {
        let actual = concurrent_index_name(&Head::of(statement));
        let expected = expected.map(|(s, n)| (s.map(str::to_owned), n.to_owned()));
        assert_eq!(actual, expected, "{statement:?}");
    }

    #[test]
    fn transaction_control() {
        for s in [
            "BEGIN",
            "begin transaction isolation level serializable",
            "BEGIN WORK",
            "START TRANSACTION",
            "start transaction read only",
            "COMMIT",
            "commit and chain",
            "END",
            "end transaction",
            "ROLLBACK",
            "ROLLBACK TO SAVEPOINT s",
            "ABORT",
            "SAVEPOINT s",
            "RELEASE SAVEPOINT s",
            "release s",
            "PREPARE TRANSACTION 'x'",
            "COMMIT PREPARED 'x'",
            "ROLLBACK PREPARED 'x'",
        ] {
            check_kind(s, TransactionControl);
        }
    }

    #[test]
    fn non_transactional() {
        for s in [
            "CREATE INDEX CONCURRENTLY i ON t (a)",
            "create unique index concurrently if not exists i on t (a)",
            "CREATE INDEX CONCURRENTLY ON t (a)",
            "DROP INDEX CONCURRENTLY i",
            "drop index concurrently if exists s.i",
            "REINDEX INDEX CONCURRENTLY i",
            "reindex table concurrently t",
            "REINDEX (VERBOSE) TABLE CONCURRENTLY t",
            "REINDEX (CONCURRENTLY) TABLE t",
            "REINDEX (CONCURRENTLY true, VERBOSE) TABLE t",
            "REINDEX SCHEMA s",
            "REINDEX DATABASE",
            "REINDEX (VERBOSE) SYSTEM d",
            "VACUUM",
            "vacuum (analyze, verbose) t",
            "VACUUM FULL t",
            "CREATE DATABASE d",
            "DROP DATABASE IF EXISTS d",
            "DROP DATABASE d WITH (FORCE)",
            "ALTER DATABASE d SET TABLESPACE ts",
            "CREATE TABLESPACE ts LOCATION '/x'",
            "DROP TABLESPACE ts",
            "ALTER SYSTEM SET work_mem = '64MB'",
            "alter system reset all",
            "ALTER TABLE p DETACH PARTITION c CONCURRENTLY",
            "ALTER TABLE IF EXISTS s.p DETACH PARTITION s.c CONCURRENTLY",
            "CLUSTER",
            "CLUSTER VERBOSE",
            "CLUSTER (VERBOSE)",
            "DISCARD ALL",
        ] {
            check_kind(s, NonTransactional);
        }
    }

    #[test]
    fn other() {
        for s in [
            "CREATE INDEX i ON t (a)",
            "CREATE INDEX \"concurrently\" ON t (a)",
            "create table concurrently_t (a int)",
            "DROP INDEX i",
            "DROP TABLE database",
            "REINDEX INDEX i",
            "REINDEX TABLE t",
            "REINDEX (CONCURRENTLY false) TABLE t",
            "REINDEX (concurrently off, verbose) INDEX i",
            "REINDEX (VERBOSE) TABLE t",
            "ANALYZE",
            "ANALYZE t",
            "ALTER DATABASE d SET work_mem = '1MB'",
            "ALTER DATABASE d RENAME TO e",
            "ALTER TABLESPACE ts RENAME TO u",
            "ALTER TABLE p DETACH PARTITION c",
            "ALTER TABLE p DETACH PARTITION c FINALIZE",
            "ALTER TYPE mood ADD VALUE 'meh'",
            "CLUSTER t",
            "CLUSTER VERBOSE t USING i",
            "CLUSTER (VERBOSE) t",
            "CLUSTER i ON t",
            "DISCARD PLANS",
            "REFRESH MATERIALIZED VIEW CONCURRENTLY mv",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "PREPARE q AS SELECT 1",
            "START",
            "CREATE SUBSCRIPTION s CONNECTION 'x' PUBLICATION p",
            "DO $$ BEGIN COMMIT; END $$",
            "select 'vacuum'",
            "\"begin\"",
            "(select 1)",
            "",
        ] {
            check_kind(s, Other);
        }
    }

    #[test]
    fn concurrent_index_names() {
        check_index(
            "CREATE INDEX CONCURRENTLY idx ON t (a)",
            Some((None, "idx")),
        );
        check_index(
            "create unique index concurrently Idx_A on public.t using btree (a)",
            Some((Some("public"), "idx_a")),
        );
        check_index(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS \"My Idx\" ON \"Sales\".\"Orders\" (a)",
            Some((Some("Sales"), "My Idx")),
        );
        check_index(
            "CREATE INDEX CONCURRENTLY \"a\"\"b\" ON ONLY s.t (a)",
            Some((Some("s"), "a\"b")),
        );
        check_index(
            "CREATE INDEX CONCURRENTLY i ON db.s.t (a)",
            Some((Some("s"), "i")),
        );
        // Only ASCII letters are folded, as in a UTF-8 database.
        check_index(
            "CREATE INDEX CONCURRENTLY ÉTÉ ON t (a)",
            Some((None, "ÉtÉ")),
        );
        check_index(
            "CREATE INDEX\n  -- the name\n  CONCURRENTLY /* x */ i\nON t (a)",
            Some((None, "i")),
        );
        let long = "x".repeat(70);
        check_index(
            &format!("CREATE INDEX CONCURRENTLY {long} ON t (a)"),
            Some((None, &"x".repeat(63))),
        );
        let long = "é".repeat(40);
        check_index(
            &format!("CREATE INDEX CONCURRENTLY \"{long}\" ON t (a)"),
            Some((None, &"é".repeat(31))),
        );
        check_index("CREATE INDEX CONCURRENTLY ON t (a)", None);
        check_index("CREATE INDEX CONCURRENTLY ON s.t (a)", None);
        check_index("CREATE INDEX i ON t (a)", None);
        check_index("DROP INDEX CONCURRENTLY i", None);
        check_index("CREATE INDEX CONCURRENTLY U&\"i\" ON t (a)", None);
        check_index("CREATE INDEX CONCURRENTLY \"\" ON t (a)", None);
        check_index("CREATE INDEX CONCURRENTLY \"unterminated ON t (a)", None);
        check_index("CREATE INDEX CONCURRENTLY i", None);
        check_index("CREATE INDEX CONCURRENTLY i ON", None);
        check_index("CREATE INDEX CONCURRENTLY i ON s.", None);
    }
}
