//! Flyway's migration checksum.

use super::lines::line_col;

/// A migration file that is not valid UTF-8.
///
/// The message does not name the file; the caller prefixes it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "file is not valid UTF-8: invalid byte at byte offset {offset} (line {line}); save the file as UTF-8"
)]
pub struct EncodingError {
    /// Byte offset of the first invalid byte.
    pub offset: usize,
    /// 1-based line of that byte.
    pub line: u32,
}

/// Flyway's checksum of a migration file.
///
/// This is Flyway's `ChecksumCalculator`: a `java.util.zip.CRC32` (the IEEE
/// CRC-32, as computed by `crc32fast`) updated with the UTF-8 bytes of each
/// line as Java's `BufferedReader.readLine()` splits them. That means:
///
/// - the terminators `"\n"`, `"\r\n"` and a lone `"\r"` are all removed, and
///   nothing is put between lines, so line endings never change the checksum;
/// - a final line terminator does not produce an extra empty line;
/// - a leading U+FEFF byte-order mark is removed from the first line;
/// - the result is the CRC cast to `i32`, as Flyway stores it.
///
/// Flyway decodes with replacement characters, which would hide a file saved
/// in the wrong encoding; here input that is not UTF-8 is an error giving the
/// offset of the first invalid byte.
pub fn flyway_checksum(contents: &[u8]) -> Result<i32, EncodingError> {
    let text = std::str::from_utf8(contents).map_err(|e| {
        let offset = e.valid_up_to();
        // The prefix up to the error is valid UTF-8 by definition.
        let valid = contents
            .get(..offset)
            .and_then(|prefix| std::str::from_utf8(prefix).ok())
            .unwrap_or_default();
        EncodingError {
            offset,
            line: line_col(valid, offset).0,
        }
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut crc = crc32fast::Hasher::new();
    for line in text.split(['\n', '\r']) {
        // Splitting on both bytes yields an empty piece between the two bytes
        // of "\r\n" and after a final terminator; empty lines add no bytes to
        // the CRC, so feeding them (or not) gives the same result as readLine.
        crc.update(line.as_bytes());
    }
    // Flyway stores the unsigned CRC's bits as a Java int.
    Ok(crc.finalize() as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(contents: &[u8], expected: Result<i32, &str>) {
        let actual = flyway_checksum(contents).map_err(|e| e.to_string());
        assert_eq!(
            actual,
            expected.map_err(str::to_owned),
            "contents {:?}",
            String::from_utf8_lossy(contents)
        );
    }

    // Expected values were produced by Flyway's algorithm run in Java 17, not
    // by this code: for each input,
    //
    //   CRC32 crc32 = new CRC32();
    //   BufferedReader r = new BufferedReader(
    //       new InputStreamReader(new ByteArrayInputStream(bytes), UTF_8), 4096);
    //   String line = r.readLine();
    //   if (line != null) {
    //       if (line.startsWith("\uFEFF")) line = line.substring(1);
    //       do { crc32.update(line.getBytes(UTF_8)); } while ((line = r.readLine()) != null);
    //   }
    //   return (int) crc32.getValue();
    //
    // (java.util.zip.CRC32 + BufferedReader.readLine, as in Flyway's
    // ChecksumCalculator). Some were also cross-checked with Python's
    // zlib.crc32 over the concatenated lines.

    #[test]
    fn line_endings_and_bom_do_not_matter() {
        const EXPECTED: i32 = 169406234;
        check(
            "\u{feff}CREATE TABLE t (id int);\r\n\r\nINSERT INTO t VALUES (1);\r\n".as_bytes(),
            Ok(EXPECTED),
        );
        check(
            b"CREATE TABLE t (id int);\n\nINSERT INTO t VALUES (1);\n",
            Ok(EXPECTED),
        );
        check(
            b"CREATE TABLE t (id int);\r\rINSERT INTO t VALUES (1);\r",
            Ok(EXPECTED),
        );
        // Without a trailing newline.
        check(
            b"CREATE TABLE t (id int);\n\nINSERT INTO t VALUES (1);",
            Ok(EXPECTED),
        );
    }

    #[test]
    fn java_vectors() {
        check(b"", Ok(0));
        check(b"\n", Ok(0));
        check(b"\n\n", Ok(0));
        check("\u{feff}".as_bytes(), Ok(0));
        check(b"select 1", Ok(245801405));
        check(b"a\r\nb\rc\nd", Ok(-310194927));
        check(
            "-- Grüße, 日本語, emoji 🚀\nINSERT INTO t (name) VALUES ('Zoë');\n".as_bytes(),
            Ok(1889155372),
        );
        // Only one leading BOM is removed, and only on the first line.
        check("\u{feff}\u{feff}select 1;\n".as_bytes(), Ok(1918699538));
        check("select 1;\n\u{feff}select 2;\n".as_bytes(), Ok(-921921223));
    }

    #[test]
    fn invalid_utf8_names_the_first_bad_byte() {
        check(
            b"select 1;\nselect '\xff';",
            Err(
                "file is not valid UTF-8: invalid byte at byte offset 18 (line 2); save the file as UTF-8",
            ),
        );
        check(
            b"\xc3",
            Err(
                "file is not valid UTF-8: invalid byte at byte offset 0 (line 1); save the file as UTF-8",
            ),
        );
        // A UTF-16 byte-order mark.
        check(
            b"\xff\xfes\x00",
            Err(
                "file is not valid UTF-8: invalid byte at byte offset 0 (line 1); save the file as UTF-8",
            ),
        );
    }
}
