//! Migration scripts: directives and statements. How the split works, and
//! why it is sound, is described in the [`migration`](crate::migration)
//! module documentation.

use std::ops::Range;

use squawk_lexer::TokenKind;
use squawk_syntax::SyntaxKind;
use squawk_syntax::ast::SourceFile;

use super::classify::{self, Head, Token, lex};
use super::lines::{LineCursor, line_col};

/// The deepest nesting [`parse_script`] accepts, counted as described in the
/// module documentation (open brackets plus tokens without a comma at each
/// level). Real migrations stay far below it; PostgreSQL itself gives up on
/// much shallower expressions (`stack depth limit exceeded`).
pub const MAX_NESTING: usize = 50_000;
/// Parser thread stack: a fixed part plus a part per nesting level, with a
/// wide margin over the ~3 KiB per level squawk needs in a debug build.
const STACK_BASE: usize = 8 << 20;
const STACK_PER_LEVEL: usize = 6 << 10;

/// Directive comments start with this, after `--` and optional spaces.
const DIRECTIVE_PREFIX: &str = "evolve:";
const NO_TRANSACTION: &str = "no-transaction";
const POPULATE_IN_TRANSACTION: &str = "populate-in-transaction";
const REBUILD_DEPENDENTS_OFF: &str = "rebuild-dependents off";
const PHASE: &str = "phase";
const BACKFILL: &str = "backfill";

/// A parsed migration script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// The `-- evolve:` directives at the top of the file.
    pub directives: Directives,
    /// The statements, in file order. Empty for an empty or comment-only file.
    pub statements: Vec<Statement>,
}

/// Directives: comment lines `-- evolve:NAME` before the first statement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// `-- evolve:no-transaction`: run the statements outside a transaction.
    pub no_transaction: bool,
    /// `-- evolve:populate-in-transaction`: materialized views rebuilt
    /// around an ALTER are recreated WITH DATA inside the transaction.
    pub populate_in_transaction: bool,
    /// `-- evolve:rebuild-dependents off`: no automatic rebuild of the views
    /// an ALTER in this file would break.
    pub rebuild_dependents_off: bool,
    /// `-- evolve:phase expand|backfill|switch|contract`: the file's step
    /// in an expand/contract change (`evolve change` writes it).
    pub phase: Option<Phase>,
    /// `-- evolve:backfill NAME`: the file's one `UPDATE` is handed to the
    /// backfill job `NAME` instead of running in the file's transaction.
    pub backfill: Option<String>,
}

/// The step of an expand/contract change a file belongs to, in the order
/// they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// New structure added beside the old, kept in step by a trigger.
    Expand,
    /// Existing rows given the new structure's values.
    Backfill,
    /// The new structure verified complete and made authoritative.
    Switch,
    /// The old structure and the trigger removed.
    Contract,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 4] = [
        Phase::Expand,
        Phase::Backfill,
        Phase::Switch,
        Phase::Contract,
    ];

    /// The name used in directives and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Expand => "expand",
            Phase::Backfill => "backfill",
            Phase::Switch => "switch",
            Phase::Contract => "contract",
        }
    }

    /// The phase named `name` (any letter case).
    pub fn parse(name: &str) -> Option<Phase> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(name.trim()))
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One statement of a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The statement exactly as in the file, from its first to its last
    /// non-trivia token: without the terminating ';' and without the
    /// whitespace and comments around it (comments inside are kept).
    pub text: String,
    /// Byte offset of `text`'s first byte in the file.
    pub offset: usize,
    /// 1-based line of `offset` (see [`line_col`]).
    pub line: u32,
    /// 1-based column of `offset`, counted in characters.
    pub column: u32,
    /// Whether it controls transactions, must run outside one, or neither.
    pub kind: StatementKind,
    /// For `COPY ... FROM STDIN`, the rows that follow it in the script (as
    /// psql and Flyway read them): the lines after the one the statement
    /// ends on, up to the line `\.`, line terminators included.
    pub copy_data: Option<String>,
}

/// How a statement relates to transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatementKind {
    /// `BEGIN`, `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK`, `ABORT`,
    /// `SAVEPOINT`, `RELEASE`, `PREPARE TRANSACTION`, `COMMIT PREPARED`,
    /// `ROLLBACK PREPARED`.
    TransactionControl,
    /// A statement PostgreSQL refuses inside a transaction block whatever the
    /// objects involved: `CREATE [UNIQUE] INDEX CONCURRENTLY`,
    /// `DROP INDEX CONCURRENTLY`, `REINDEX ... CONCURRENTLY`,
    /// `REINDEX SCHEMA|DATABASE|SYSTEM`, `VACUUM`, `CREATE|DROP DATABASE`,
    /// `ALTER DATABASE ... SET TABLESPACE`, `CREATE|DROP TABLESPACE`,
    /// `ALTER SYSTEM`, `ALTER TABLE ... DETACH PARTITION ... CONCURRENTLY`,
    /// `CLUSTER` without a table, `DISCARD ALL`. (`ALTER TYPE ... ADD VALUE`
    /// is allowed in a transaction since PostgreSQL 12 and is not here.)
    NonTransactional,
    /// Everything else.
    Other,
}

impl Statement {
    /// For `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name ON ...`,
    /// the index's schema and name as PostgreSQL stores them: a quoted name
    /// unquoted (`"My Idx"` is `My Idx`), an unquoted one folded to lower
    /// case, both truncated to 63 bytes. The schema is the table's when the
    /// table is schema-qualified (an index lives in its table's schema), and
    /// `None` otherwise. Returns `None` for any other statement and for an
    /// unnamed index.
    pub fn concurrent_index_name(&self) -> Option<(Option<String>, String)> {
        if self.kind != StatementKind::NonTransactional {
            return None;
        }
        classify::concurrent_index_name(&Head::of(&self.text))
    }
}

/// A script that cannot be split into statements safely.
///
/// Messages do not name the file; the caller prefixes it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// A `-- evolve:` comment with a name that is not a directive.
    #[error(
        "unknown directive \"-- evolve:{name}\" on line {line}; the known directives are \"-- evolve:{NO_TRANSACTION}\", \"-- evolve:{POPULATE_IN_TRANSACTION}\", \"-- evolve:{REBUILD_DEPENDENTS_OFF}\", \"-- evolve:{PHASE} expand|backfill|switch|contract\" and \"-- evolve:{BACKFILL} NAME\""
    )]
    UnknownDirective {
        /// The text after `evolve:`.
        name: String,
        /// 1-based line of the comment.
        line: u32,
    },
    /// A `-- evolve:` comment after the first statement, where it would be
    /// ignored.
    #[error(
        "directive \"-- evolve:{name}\" on line {line} comes after the first statement, where it would be ignored; move it to the top of the file, before the first statement"
    )]
    LateDirective {
        /// The text after `evolve:`.
        name: String,
        /// 1-based line of the comment.
        line: u32,
    },
    /// SQL nested deeper than [`MAX_NESTING`].
    #[error(
        "SQL at line {line}, column {column} is nested too deeply to split safely (more than {MAX_NESTING} levels of brackets, or of operators without a comma between them); split the statement or simplify the expression"
    )]
    TooDeeplyNested {
        /// 1-based line where the limit was passed.
        line: u32,
        /// 1-based column (in characters) where the limit was passed.
        column: u32,
    },
    /// A `/*` comment that never ends: it would hide every statement after
    /// it (PostgreSQL and psql refuse it too).
    #[error(
        "the /* comment at line {line}, column {column} is never closed, so it would hide the rest of the file; close it with */ (comments nest: each /* inside it needs its own */)"
    )]
    UnterminatedComment {
        /// 1-based line of its `/*`.
        line: u32,
        /// 1-based column (in characters) of its `/*`.
        column: u32,
    },
    /// `COPY ... FROM STDIN` whose data never ends.
    #[error(
        "the COPY ... FROM STDIN at line {line} has no line \"\\.\" after its data, so the rest of the file would be read as rows; end the data with a line holding only \\."
    )]
    UnterminatedCopy {
        /// 1-based line of the statement.
        line: u32,
    },
    /// A script larger than the parser can address.
    #[error(
        "script is {bytes} bytes, more than the 4 GiB the SQL parser can read; split it into smaller migrations"
    )]
    TooLarge {
        /// The script's size in bytes.
        bytes: usize,
    },
    /// The SQL parser could not run or failed. This is a bug in evolve or
    /// squawk (or a system out of threads), never a problem of the script.
    #[error(
        "internal error in the SQL parser ({message}); please report it together with the migration file"
    )]
    ParserFailed {
        /// What went wrong.
        message: String,
    },
}

/// Parses a migration script into its directives and statements.
///
/// Directives are comment lines `-- evolve:NAME` at the very top of the file,
/// before the first statement; blank lines and other comments may precede
/// and follow them. The known ones are `no-transaction` and
/// `populate-in-transaction`. An unknown one (`-- evolve:no-transactoin`) is
/// an error naming it, its line and the known ones, and so is a `-- evolve:`
/// comment after the first statement, which would otherwise be silently
/// ignored. Only `--` comments are directives; `/* evolve:... */` is an
/// ordinary comment.
///
/// Statements are split by squawk's PostgreSQL lexer and parser as the
/// [`migration`](crate::migration) module documentation describes: dollar-quoted bodies, nested
/// comments, quoted identifiers and strings, `BEGIN ATOMIC ... END` bodies
/// and `DO` blocks containing semicolons all stay one statement. Empty
/// statements (`;;`) and comment-only files give no statements. Syntax errors
/// do not make the script fail: PostgreSQL reports them when the statement
/// runs.
pub fn parse_script(text: &str) -> Result<Script, ScriptError> {
    if u32::try_from(text.len()).is_err() {
        return Err(ScriptError::TooLarge { bytes: text.len() });
    }
    let nesting = nesting_bound(text)?;
    // Only `BEGIN ATOMIC` bodies and `CREATE RULE` action lists hold a `;`
    // that does not end a statement; without either word the parser has
    // nothing to find, and most migration files never pay for it.
    let bodies = if lex(text).any(|t| t.is_word("atomic") || t.is_word("rule")) {
        multi_statement_bodies(text, nesting)?
    } else {
        Vec::new()
    };
    split(text, &bodies)
}

/// A bound of how deep squawk's parser recurses on `text`: the number of open
/// brackets plus, at each open level, the significant tokens since the last
/// comma or `;`. Each level of the parser's recursion belongs to a construct
/// that started at a token and is still open, and in SQL's grammar a comma or
/// `;` at a bracket level closes everything opened after that bracket, so the
/// parser's depth is at most a small constant times this bound (the constant
/// is what [`STACK_PER_LEVEL`] pays for). Errors when the bound passes
/// [`MAX_NESTING`].
fn nesting_bound(text: &str) -> Result<usize, ScriptError> {
    // Tokens since the last comma, one entry per open bracket level; the
    // first entry is the statement level and is never closed.
    let mut levels: Vec<usize> = vec![0];
    let mut tokens = 0usize;
    let mut max = 0usize;
    for token in lex(text) {
        if token.is_trivia() {
            continue;
        }
        match token.kind {
            TokenKind::OpenParen | TokenKind::OpenBracket => levels.push(0),
            TokenKind::CloseParen | TokenKind::CloseBracket => {
                if levels.len() > 1 {
                    tokens -= levels.pop().unwrap_or_default();
                }
            }
            TokenKind::Comma | TokenKind::Semi => {
                if let Some(top) = levels.last_mut() {
                    tokens -= *top;
                    *top = 0;
                }
            }
            _ => {
                if let Some(top) = levels.last_mut() {
                    *top += 1;
                    tokens += 1;
                }
            }
        }
        let depth = tokens + (levels.len() - 1);
        if depth > MAX_NESTING {
            let (line, column) = line_col(text, token.offset);
            return Err(ScriptError::TooDeeplyNested { line, column });
        }
        max = max.max(depth);
    }
    Ok(max)
}

/// The byte ranges of the outermost `BEGIN ATOMIC ... END` bodies and rule
/// action lists, in file order: the only places where a `;` outside a token
/// does not end a statement. Runs squawk's parser on a thread whose stack
/// fits `nesting` levels of recursion.
fn multi_statement_bodies(text: &str, nesting: usize) -> Result<Vec<Range<usize>>, ScriptError> {
    let stack_size = nesting
        .saturating_mul(STACK_PER_LEVEL)
        .saturating_add(STACK_BASE);
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("evolve-sql-parser".to_owned())
            .stack_size(stack_size)
            .spawn_scoped(scope, || find_bodies(text))
            .map_err(|e| ScriptError::ParserFailed {
                message: format!("could not start the parser thread: {e}"),
            })?;
        parser.join().map_err(|panic| ScriptError::ParserFailed {
            message: panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the parser panicked".to_owned()),
        })
    })
}

/// See [`multi_statement_bodies`]. The syntax tree is dropped here, on the
/// parser thread, because dropping a deep tree recurses too.
fn find_bodies(text: &str) -> Vec<Range<usize>> {
    let parse = SourceFile::parse(text);
    let mut bodies: Vec<Range<usize>> = Vec::new();
    // Pre-order: an outer body comes before the bodies nested in it.
    for node in parse.syntax_node().descendants() {
        if matches!(node.kind(), SyntaxKind::ATOMIC_BODY | SyntaxKind::RULE_DO) {
            let range = node.text_range();
            let body = usize::from(range.start())..usize::from(range.end());
            if bodies.last().is_none_or(|outer| body.start >= outer.end) {
                bodies.push(body);
            }
        }
    }
    bodies
}

/// A statement being collected.
struct Pending<'a> {
    start: usize,
    end: usize,
    head: Head<'a>,
}

/// Splits `text` at every `;` outside `bodies` and reads the directives.
/// The data of a `COPY ... FROM STDIN` (the lines after the statement, up
/// to `\.`) is taken as it is and never lexed: rows are not SQL, and a
/// quote in one would swallow the rest of the file.
fn split(text: &str, bodies: &[Range<usize>]) -> Result<Script, ScriptError> {
    let mut directives = Directives::default();
    let mut statements = Vec::new();
    // Statement starts and directive comments come in file order, so one
    // cursor computes all their positions in a single pass.
    let mut cursor = LineCursor::new(text);
    let mut pending: Option<Pending<'_>> = None;
    let mut seen_statement = false;
    let mut bodies = bodies.iter().peekable();
    let mut start = 0;

    'segments: loop {
        for token in lex(&text[start..]) {
            let token = Token {
                offset: token.offset + start,
                ..token
            };
            match token.kind {
                TokenKind::LineComment => {
                    let Some(name) = directive_name(token.text) else {
                        continue;
                    };
                    // `-- evolve:ignore[-file] RULE` is for `evolve lint`, anywhere.
                    if name.split_whitespace().next().is_some_and(|w| {
                        w.eq_ignore_ascii_case("ignore") || w.eq_ignore_ascii_case("ignore-file")
                    }) {
                        continue;
                    }
                    cursor.advance_to(token.offset);
                    let (line, _) = cursor.position();
                    let name = name.to_owned();
                    if seen_statement {
                        return Err(ScriptError::LateDirective { name, line });
                    }
                    match name.as_str() {
                        NO_TRANSACTION => directives.no_transaction = true,
                        POPULATE_IN_TRANSACTION => directives.populate_in_transaction = true,
                        REBUILD_DEPENDENTS_OFF => directives.rebuild_dependents_off = true,
                        _ => match name.split_once(char::is_whitespace) {
                            Some((PHASE, value)) if Phase::parse(value).is_some() => {
                                directives.phase = Phase::parse(value);
                            }
                            Some((BACKFILL, job)) if !job.trim().is_empty() => {
                                directives.backfill = Some(job.trim().to_owned());
                            }
                            _ => return Err(ScriptError::UnknownDirective { name, line }),
                        },
                    }
                }
                TokenKind::BlockComment { terminated: false } => {
                    let (line, column) = line_col(text, token.offset);
                    return Err(ScriptError::UnterminatedComment { line, column });
                }
                _ if token.is_trivia() => {}
                TokenKind::Semi if !in_body(&mut bodies, token.offset) => {
                    let Some(done) = pending.take() else {
                        continue;
                    };
                    let copy = done.head.is_copy_from_stdin();
                    let mut statement = finish(text, done, &mut cursor);
                    if copy {
                        let (data, next) =
                            copy_data(text, token.end()).ok_or(ScriptError::UnterminatedCopy {
                                line: statement.line,
                            })?;
                        statement.copy_data = Some(data.to_owned());
                        statements.push(statement);
                        start = next;
                        continue 'segments;
                    }
                    statements.push(statement);
                }
                _ => {
                    seen_statement = true;
                    pending
                        .get_or_insert_with(|| Pending {
                            start: token.offset,
                            end: token.offset,
                            head: Head::default(),
                        })
                        .push(token);
                }
            }
        }
        break;
    }
    if let Some(done) = pending.take() {
        statements.push(finish(text, done, &mut cursor));
    }
    Ok(Script {
        directives,
        statements,
    })
}

/// The data of a `COPY ... FROM STDIN` whose `;` ends at `after`: the lines
/// after the rest of that line, up to the line `\.` (white space around it
/// allowed, as Flyway reads it); and where the script goes on after that
/// line. `None` when no such line comes.
fn copy_data(text: &str, after: usize) -> Option<(&str, usize)> {
    let data_start = after + text[after..].find('\n')? + 1;
    let mut at = data_start;
    while at < text.len() {
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i + 1);
        if text[at..end].trim() == "\\." {
            return Some((&text[data_start..at], end));
        }
        at = end;
    }
    None
}

impl<'a> Pending<'a> {
    fn push(&mut self, token: Token<'a>) {
        self.end = token.end();
        self.head.push(token);
    }
}

/// Whether `offset` lies in one of `bodies`, given offsets that only grow.
fn in_body<'r>(
    bodies: &mut std::iter::Peekable<impl Iterator<Item = &'r Range<usize>>>,
    offset: usize,
) -> bool {
    while bodies.next_if(|body| body.end <= offset).is_some() {}
    bodies.peek().is_some_and(|body| body.contains(&offset))
}

fn finish(text: &str, pending: Pending<'_>, cursor: &mut LineCursor<'_>) -> Statement {
    cursor.advance_to(pending.start);
    let (line, column) = cursor.position();
    Statement {
        // Token boundaries are char boundaries, so this never falls back.
        text: text
            .get(pending.start..pending.end)
            .unwrap_or_default()
            .to_owned(),
        offset: pending.start,
        line,
        column,
        kind: classify::classify(&pending.head),
        copy_data: None,
    }
}

/// The directive named by a `--` comment (`-- evolve:NAME`), if it is one.
/// `evolve:` may be preceded by spaces and written in any letter case; the
/// name is trimmed.
fn directive_name(comment: &str) -> Option<&str> {
    let body = comment.strip_prefix("--")?.trim_start();
    let prefix = body.get(..DIRECTIVE_PREFIX.len())?;
    if !prefix.eq_ignore_ascii_case(DIRECTIVE_PREFIX) {
        return None;
    }
    Some(body.get(DIRECTIVE_PREFIX.len()..)?.trim())
}

#[cfg(test)]
mod tests;
