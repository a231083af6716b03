//! Errors in PostgreSQL's shape, displayed like psql displays them.

use std::fmt;

use crate::migration::line_col;

/// Where an error is: a byte offset in the input (always a character
/// boundary, at most the input's length) and the 1-based line and column
/// (columns count characters), as [`line_col`] computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    pub offset: usize,
    pub line: u32,
    pub column: u32,
}

/// An error in a control statement, in PostgreSQL's shape.
///
/// `message` is the primary line (lower-case start, no period, as
/// PostgreSQL writes them); `detail` and `hint` are complete sentences.
/// [`Display`](fmt::Display) renders it as psql would:
///
/// ```text
/// ERROR:  syntax error at or near "FORM"
/// LINE 1: CREATE SOURCE src FORM POSTGRES CONNECTION pg_conn (PUBLICA...
///                           ^
/// HINT:  Did you mean FROM?
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    pub position: Position,
    /// The SQLSTATE when it is not a syntax error (`42601`), five ASCII
    /// characters ([`ControlError::sqlstate`]); kept small so errors stay
    /// cheap to return.
    sqlstate: Option<[u8; 5]>,
    /// The `LINE n: ...` line and the caret line under it.
    excerpt: String,
}

/// psql's limits for the `LINE` excerpt: at most this many columns of the
/// line are shown ...
const DISPLAY_SIZE: usize = 60;
/// ... and the cut on the right stays this far from the error if it can.
const MIN_RIGHT_CUT: usize = 10;

impl ControlError {
    /// An error at byte `offset` of `input` (clamped to the input and moved
    /// back to a character boundary). Other layers use this too, to report
    /// errors about a statement (an object that does not exist, say) at the
    /// statement's [`Span`](super::Span).
    pub fn new(input: &str, offset: usize, message: impl Into<String>) -> Self {
        let mut offset = offset.min(input.len());
        while !input.is_char_boundary(offset) {
            offset -= 1;
        }
        let (line, column) = line_col(input, offset);
        ControlError {
            message: message.into(),
            detail: None,
            hint: None,
            sqlstate: None,
            position: Position {
                offset,
                line,
                column,
            },
            excerpt: excerpt(input, offset, line),
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The error with SQLSTATE `sqlstate` (five ASCII characters, as
    /// `22023`; anything else is ignored).
    pub fn with_sqlstate(mut self, sqlstate: &str) -> Self {
        if let Ok(code) = <[u8; 5]>::try_from(sqlstate.as_bytes())
            && code.is_ascii()
        {
            self.sqlstate = Some(code);
        }
        self
    }

    /// The SQLSTATE, when it is not a syntax error's (`42601`): `22023`
    /// for a conflict type or resolver that is not valid.
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate
            .as_ref()
            .and_then(|code| std::str::from_utf8(code).ok())
    }

    /// The two lines psql shows under the message: `LINE n: <text>` and a
    /// caret under the error's position.
    pub fn excerpt(&self) -> &str {
        &self.excerpt
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ERROR:  {}\n{}", self.message, self.excerpt)?;
        if let Some(detail) = &self.detail {
            write!(f, "\nDETAIL:  {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\nHINT:  {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ControlError {}

/// libpq's `reportErrorPosition`: the line holding `offset`, cut to
/// [`DISPLAY_SIZE`] columns around the error with `...` where it was cut,
/// tabs shown as spaces, and a caret line. Every character counts as one
/// column.
fn excerpt(input: &str, offset: usize, line: u32) -> String {
    let body_start = if input.starts_with('\u{feff}') && offset >= 3 {
        3
    } else {
        0
    };
    let line_start = input[body_start..offset]
        .rfind(['\n', '\r'])
        .map_or(body_start, |i| body_start + i + 1);
    let line_end = input[offset..]
        .find(['\n', '\r'])
        .map_or(input.len(), |i| offset + i);
    let chars: Vec<char> = input[line_start..line_end]
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .collect();
    let loc = input[line_start..offset].chars().count();

    let (mut begin, mut end) = (0, chars.len());
    let (mut begin_cut, mut end_cut) = (false, false);
    if end - begin > DISPLAY_SIZE {
        if begin + DISPLAY_SIZE >= loc + MIN_RIGHT_CUT {
            end = begin + DISPLAY_SIZE;
            end_cut = true;
        } else {
            if loc + MIN_RIGHT_CUT < end {
                end = loc + MIN_RIGHT_CUT;
                end_cut = true;
            }
            if end - begin > DISPLAY_SIZE {
                begin = end - DISPLAY_SIZE;
                begin_cut = true;
            }
        }
    }

    let mut prefix = format!("LINE {line}: ");
    if begin_cut {
        prefix.push_str("...");
    }
    let caret = prefix.chars().count() + (loc - begin);
    let mut out = prefix;
    out.extend(&chars[begin..end]);
    if end_cut {
        out.push_str("...");
    }
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', caret));
    out.push('^');
    out
}
