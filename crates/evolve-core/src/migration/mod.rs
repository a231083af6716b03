//! Migration files: names, versions, checksums and scripts.
//!
//! A migration directory holds Flyway-style files:
//!
//! - `V<version>__<description>.sql`: a versioned migration, applied once, in
//!   version order ([`parse_file_name`], [`Version`]);
//! - `R__<description>.sql`: a repeatable migration, applied again whenever its
//!   checksum changes;
//! - `B<version>__<description>.sql`: a baseline migration, run on an empty
//!   database instead of the versioned migrations up to its version;
//! - `<event>.sql` and `<event>__<description>.sql`: Flyway's SQL callbacks
//!   ([`parse_callback_name`]), not migrations.
//!
//! [`flyway_checksum`] computes the same checksum Flyway stores in its history
//! table, so a history written by Flyway is accepted as is. [`parse_script`]
//! reads a file's `-- evolve:` directives and splits it into statements that
//! can be sent to PostgreSQL one by one.
//!
//! Everything here is pure: the caller reads the files and prefixes error
//! messages with the file name where the error itself does not carry it
//! ([`EncodingError`], [`ScriptError`]).
//!
//! # How a script is split into statements
//!
//! PostgreSQL itself only ever sees one statement at a time from us, so the
//! split has to agree with PostgreSQL's grammar on where statements end. A
//! `;` ends a statement unless it is
//!
//! 1. inside a token: a string (`'..'`, `E'..\'..'`, `U&'..'`, ...), a
//!    dollar-quoted body (`$$..$$`, `$tag$..$tag$`, which is where `DO` blocks
//!    and most function bodies live), a quoted identifier, or a comment
//!    (`--` to the end of the line, nested `/* /* */ */`); or
//! 2. inside one of the two constructs of the grammar that hold several
//!    statements: a `BEGIN ATOMIC ... END` function body, and the
//!    parenthesized action list of `CREATE RULE ... DO (..; ..)`.
//!
//! Case 1 is decided by squawk's lexer and case 2 by squawk's parser
//! (`squawk-syntax`, a full PostgreSQL grammar), never by regex. Walking the
//! lexer's tokens in order, every `;` that is not inside a `BEGIN ATOMIC`
//! body or a rule action list (as the parser reports them) ends the current
//! statement, and every other non-trivia token belongs to the current one.
//! Whitespace and comments between statements belong to none, and a
//! statement's text runs from its first to its last non-trivia token.
//!
//! That makes the split sound by construction, also for files squawk reports
//! syntax errors in (which are not refused: PostgreSQL is the authority on
//! syntax and reports errors when the statement runs): the statements are
//! disjoint, in file order, and every byte of the file that is not
//! whitespace, a comment or a terminating `;` lies in exactly one of them.
//! What a syntax error can do is make the parser see a `BEGIN ATOMIC` body
//! that never ends, which then extends to the end of the file, as it does
//! for PostgreSQL's own `psql`.
//!
//! ## Deeply nested SQL
//!
//! squawk's parser is recursive, so SQL nested thousands of levels deep
//! would overflow the stack. Before parsing, the lexer's tokens give a bound
//! of the recursion depth (open brackets plus the tokens since the last
//! comma or `;` at each open level); input above [`MAX_NESTING`] is refused
//! with [`ScriptError::TooDeeplyNested`], and the parser runs on a helper
//! thread whose stack is sized for the bound, so the caller's stack size
//! never matters. A panic inside the parser becomes
//! [`ScriptError::ParserFailed`].

mod alter;
mod checksum;
mod classify;
pub mod effects;
mod lines;
pub mod lint;
mod name;
mod script;
mod version;

pub use alter::{AlterAction, BlockedAlter, blocked_alters};
pub use checksum::{EncodingError, flyway_checksum};
pub use lines::line_col;
pub use name::{
    CALLBACK_EVENTS, CallbackName, MigrationKind, MigrationName, NameError, is_undo_file_name,
    parse_callback_name, parse_file_name,
};
pub use script::{
    Directives, MAX_NESTING, Phase, Script, ScriptError, Statement, StatementKind, parse_script,
};
pub use version::Version;
