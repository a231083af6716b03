//! The lexer: PostgreSQL's token rules, reduced to what the control language
//! needs (identifiers, string literals, punctuation, comments), plus just
//! enough of the rest (numbers, operators) to name any stray token in an
//! error.

use super::error::ControlError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    /// An unquoted identifier or keyword, folded to lower case.
    Word(String),
    /// A double-quoted identifier's value.
    Quoted(String),
    /// A string literal's value.
    Str(String),
    /// `(`, `)`, `,`, `;`, `.`, `[`, `]` or a lone `:`.
    Punct(char),
    /// `::`
    Cast,
    /// A run of operator characters (`=`, `<>`, ...).
    Op,
    Number,
    /// Any other character.
    Other,
    Eof,
    /// The lexer stopped here with an error ([`Lexed::error`]).
    Error,
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub tok: Tok,
    pub start: usize,
    pub end: usize,
}

/// The tokens of an input, ending with [`Tok::Eof`], or with [`Tok::Error`]
/// when the lexer stopped at an error.
pub(super) struct Lexed {
    pub tokens: Vec<Token>,
    pub error: Option<ControlError>,
}

/// Words PostgreSQL reserves (`RESERVED_KEYWORD` in its `kwlist.h`): they are
/// names only when quoted.
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "column",
    "constraint",
    "create",
    "current_catalog",
    "current_date",
    "current_role",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "from",
    "grant",
    "group",
    "having",
    "in",
    "initially",
    "intersect",
    "into",
    "lateral",
    "leading",
    "limit",
    "localtime",
    "localtimestamp",
    "not",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "placing",
    "primary",
    "references",
    "returning",
    "select",
    "session_user",
    "some",
    "symmetric",
    "system_user",
    "table",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "when",
    "where",
    "window",
    "with",
];

/// The control language's own keywords that PostgreSQL does not reserve.
/// They are fine as bare names, but [`super::sql_ident`] quotes them anyway
/// so canonical text never reads ambiguously.
const CONTROL_KEYWORDS: &[&str] = &[
    "absorb",
    "alter",
    "apply",
    "columns",
    "conflict",
    "connection",
    "copy",
    "drop",
    "exclude",
    "exists",
    "if",
    "materialized",
    "postgres",
    "publication",
    "reference",
    "refresh",
    "replacement",
    "replica",
    "replicas",
    "reset",
    "resolver",
    "resolvers",
    "set",
    "show",
    "sink",
    "sinks",
    "source",
    "sources",
    "tables",
    "text",
    "transform",
    "transforms",
    "view",
    "views",
    "wait",
];

/// The words that start a statement.
pub(super) const STATEMENT_STARTS: &[&str] = &["create", "alter", "drop", "show"];

pub(super) fn is_reserved(word: &str) -> bool {
    RESERVED.contains(&word)
}

/// Reserved by PostgreSQL or a keyword of the control language.
pub(super) fn is_keyword(word: &str) -> bool {
    is_reserved(word) || CONTROL_KEYWORDS.contains(&word)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// PostgreSQL's `ident_start`: letters, `_`, and every non-ASCII character.
fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_cont(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

fn is_op_char(b: u8) -> bool {
    matches!(
        b,
        b'+' | b'-'
            | b'*'
            | b'/'
            | b'<'
            | b'>'
            | b'='
            | b'~'
            | b'!'
            | b'@'
            | b'#'
            | b'%'
            | b'^'
            | b'&'
            | b'|'
            | b'`'
            | b'?'
    )
}

/// At most this many characters of a token are quoted in a message.
const NEAR_CHARS: usize = 64;

/// `"text"` for `at or near` messages: the token's source text, cut after
/// [`NEAR_CHARS`] characters.
pub(super) fn near(text: &str) -> String {
    match text.char_indices().nth(NEAR_CHARS) {
        Some((cut, _)) => format!("\"{}...\"", &text[..cut]),
        None => format!("\"{text}\""),
    }
}

/// Splits `input` into tokens. Works on bytes: every byte of a non-ASCII
/// character is an identifier byte, and every other decision is taken at an
/// ASCII byte, so every token boundary is a character boundary.
pub(super) fn lex(input: &str) -> Lexed {
    let b = input.as_bytes();
    let len = b.len();
    let mut tokens = Vec::new();
    let mut i = if input.starts_with('\u{feff}') { 3 } else { 0 };
    let error =
        |at: usize, message: String| -> ControlError { ControlError::new(input, at, message) };
    let fail = |tokens: &mut Vec<Token>, err: ControlError| -> Option<ControlError> {
        let at = err.position.offset;
        tokens.push(Token {
            tok: Tok::Error,
            start: at,
            end: at,
        });
        Some(err)
    };
    loop {
        // White space and comments.
        loop {
            if i < len && is_space(b[i]) {
                i += 1;
            } else if b[i..].starts_with(b"--") {
                while i < len && b[i] != b'\n' && b[i] != b'\r' {
                    if b[i] == 0 {
                        return Lexed {
                            error: fail(&mut tokens, nul_error(input, i)),
                            tokens,
                        };
                    }
                    i += 1;
                }
            } else if b[i..].starts_with(b"/*") {
                let start = i;
                let mut depth = 0usize;
                loop {
                    if i >= len {
                        let err = error(
                            start,
                            format!(
                                "unterminated /* comment at or near {}",
                                near(&input[start..])
                            ),
                        );
                        return Lexed {
                            error: fail(&mut tokens, err),
                            tokens,
                        };
                    }
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else if b[i] == 0 {
                        return Lexed {
                            error: fail(&mut tokens, nul_error(input, i)),
                            tokens,
                        };
                    } else {
                        i += 1;
                    }
                }
            } else {
                break;
            }
        }
        if i >= len {
            tokens.push(Token {
                tok: Tok::Eof,
                start: len,
                end: len,
            });
            return Lexed {
                tokens,
                error: None,
            };
        }
        let start = i;
        let c = b[i];
        let tok = match c {
            0 => {
                return Lexed {
                    error: fail(&mut tokens, nul_error(input, i)),
                    tokens,
                };
            }
            b'\'' | b'"' => match quoted(input, i) {
                Ok((value, end)) => {
                    i = end;
                    if c == b'\'' {
                        Tok::Str(value)
                    } else {
                        Tok::Quoted(value)
                    }
                }
                Err(err) => {
                    return Lexed {
                        error: fail(&mut tokens, err),
                        tokens,
                    };
                }
            },
            c if is_ident_start(c) => {
                while i < len && is_ident_cont(b[i]) {
                    i += 1;
                }
                Tok::Word(input[start..i].to_ascii_lowercase())
            }
            b'0'..=b'9' => {
                while i < len && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                    i += 1;
                }
                Tok::Number
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                i += 2;
                Tok::Cast
            }
            b'(' | b')' | b',' | b';' | b'.' | b'[' | b']' | b':' => {
                i += 1;
                Tok::Punct(char::from(c))
            }
            c if is_op_char(c) => {
                while i < len
                    && is_op_char(b[i])
                    && !(i > start && (b[i..].starts_with(b"--") || b[i..].starts_with(b"/*")))
                {
                    i += 1;
                }
                Tok::Op
            }
            _ => {
                // ASCII (every non-ASCII byte starts an identifier).
                i += 1;
                Tok::Other
            }
        };
        tokens.push(Token { tok, start, end: i });
    }
}

fn nul_error(input: &str, at: usize) -> ControlError {
    ControlError::new(
        input,
        at,
        "invalid byte sequence for encoding \"UTF8\": 0x00",
    )
}

/// A string literal (`'`) or quoted identifier (`"`) starting at `start`,
/// with the delimiter doubled inside: its value and the offset after it.
fn quoted(input: &str, start: usize) -> Result<(String, usize), ControlError> {
    let b = input.as_bytes();
    let quote = b[start];
    let mut value = String::new();
    let mut from = start + 1;
    let mut i = from;
    loop {
        match b.get(i) {
            None => {
                let what = if quote == b'\'' {
                    "unterminated quoted string"
                } else {
                    "unterminated quoted identifier"
                };
                return Err(ControlError::new(
                    input,
                    start,
                    format!("{what} at or near {}", near(&input[start..])),
                ));
            }
            Some(0) => return Err(nul_error(input, i)),
            Some(&c) if c == quote => {
                value.push_str(&input[from..i]);
                if b.get(i + 1) == Some(&quote) {
                    value.push(char::from(quote));
                    i += 2;
                    from = i;
                } else {
                    i += 1;
                    break;
                }
            }
            Some(_) => i += 1,
        }
    }
    if quote == b'"' && value.is_empty() {
        return Err(ControlError::new(
            input,
            start,
            format!(
                "zero-length delimited identifier at or near {}",
                near(&input[start..i])
            ),
        ));
    }
    Ok((value, i))
}
