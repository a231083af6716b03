//! Byte offsets to lines and columns.

/// Maps a byte offset in `text` to a 1-based `(line, column)`.
///
/// Lines end at `"\n"`, `"\r\n"` or a lone `"\r"` (the same rule as
/// [`flyway_checksum`](super::flyway_checksum) and most editors). Columns
/// count characters, not bytes, and a byte-order mark at the start of the text
/// is not counted. An offset past the end is clamped to the end, and an offset
/// inside a multi-byte character is moved back to that character's start.
pub fn line_col(text: &str, offset: usize) -> (u32, u32) {
    let mut cursor = LineCursor::new(text);
    cursor.advance_to(offset);
    cursor.position()
}

/// Computes line and column for increasing offsets in one pass over the text.
#[derive(Debug)]
pub(crate) struct LineCursor<'a> {
    text: &'a str,
    /// Byte offset reached so far (always a char boundary).
    offset: usize,
    line: u32,
    column: u32,
}

impl<'a> LineCursor<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let offset = if text.starts_with('\u{feff}') {
            '\u{feff}'.len_utf8()
        } else {
            0
        };
        LineCursor {
            text,
            offset,
            line: 1,
            column: 1,
        }
    }

    /// Moves forward to `offset` (clamped as [`line_col`] describes). Offsets
    /// behind the current one leave the cursor where it is.
    pub(crate) fn advance_to(&mut self, offset: usize) {
        let target = offset.min(self.text.len());
        let Some(rest) = self.text.get(self.offset..) else {
            return;
        };
        let mut chars = rest.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            let start = self.offset + i;
            let end = start + c.len_utf8();
            if end > target {
                self.offset = start;
                return;
            }
            let crlf = c == '\r' && chars.peek().is_some_and(|&(_, next)| next == '\n');
            if c == '\n' || (c == '\r' && !crlf) {
                self.line = self.line.saturating_add(1);
                self.column = 1;
            } else {
                self.column = self.column.saturating_add(1);
            }
        }
        self.offset = self.text.len();
    }

    /// The current 1-based `(line, column)`.
    pub(crate) fn position(&self) -> (u32, u32) {
        (self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, offset: usize, expected: (u32, u32)) {
        assert_eq!(line_col(text, offset), expected, "{text:?} at {offset}");
    }

    #[test]
    fn lines_and_columns() {
        check("", 0, (1, 1));
        check("", 5, (1, 1));
        check("abc", 0, (1, 1));
        check("abc", 2, (1, 3));
        check("abc", 3, (1, 4));
        check("abc", 99, (1, 4));
        check("a\nb", 2, (2, 1));
        check("a\nb", 3, (2, 2));
        check("a\r\nb", 1, (1, 2));
        check("a\r\nb", 2, (1, 3));
        check("a\r\nb", 3, (2, 1));
        check("a\rb", 2, (2, 1));
        check("a\r\rb", 3, (3, 1));
        check("\n\n\nx", 3, (4, 1));
    }

    #[test]
    fn columns_count_characters() {
        check("é=1", 2, (1, 2));
        check("日本語 x", 10, (1, 5));
        // Inside a multi-byte character: its start.
        check("日本", 4, (1, 2));
        check("a🚀b", 5, (1, 3));
    }

    #[test]
    fn byte_order_mark_is_not_a_column() {
        check("\u{feff}select 1", 3, (1, 1));
        check("\u{feff}select 1", 0, (1, 1));
        check("\u{feff}a\nb", 5, (2, 1));
    }

    #[test]
    fn cursor_matches_line_col_for_increasing_offsets() {
        let text = "a\r\nbé\rc\n\u{feff}d";
        let mut cursor = LineCursor::new(text);
        for offset in 0..=text.len() + 1 {
            cursor.advance_to(offset);
            assert_eq!(cursor.position(), line_col(text, offset), "offset {offset}");
        }
    }
}
