//! Dates and timestamps: from the ISO text output (`DateStyle = ISO`) to the
//! XSD form `to_jsonb` writes (`JsonEncodeDateTime` with `USE_XSD_DATES`).
//!
//! The two forms differ only in the separator between date and time (`T`
//! instead of a space) and in the offset, which XSD always writes with
//! minutes (`+00:00`) where ISO leaves them out when zero (`+00`). Both keep
//! a year of four or more digits, the fraction of seconds as printed, and a
//! trailing ` BC`; `infinity` and `-infinity` are the same in both.

use super::ValueProblem;

/// Writes a `date` value as a JSON string.
pub(super) fn write_date(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueProblem> {
    let bad = ValueProblem::DateTime("date");
    if is_special(text) {
        return write_quoted(&[text], out);
    }
    let i = date_part(text).ok_or(bad.clone())?;
    let rest = &text[i..];
    if !(rest.is_empty() || rest == b" BC") {
        return Err(bad);
    }
    write_quoted(&[text], out)
}

/// Writes a `timestamp` (`with_tz` false) or `timestamptz` value as a JSON
/// string.
pub(super) fn write_timestamp(
    text: &[u8],
    with_tz: bool,
    out: &mut Vec<u8>,
) -> Result<(), ValueProblem> {
    let bad = ValueProblem::DateTime(if with_tz { "timestamptz" } else { "timestamp" });
    if is_special(text) {
        return write_quoted(&[text], out);
    }
    let date_end = date_part(text).ok_or(bad.clone())?;
    let rest = &text[date_end..];
    // " HH:MM:SS"
    let time_ok = rest.len() >= 9
        && rest[0] == b' '
        && two_digits(&rest[1..3])
        && rest[3] == b':'
        && two_digits(&rest[4..6])
        && rest[6] == b':'
        && two_digits(&rest[7..9]);
    if !time_ok {
        return Err(bad);
    }
    let time_start = date_end + 1;
    let mut i = date_end + 9;
    // Optional fraction of seconds.
    if text.get(i) == Some(&b'.') {
        let digits = count_digits(&text[i + 1..]);
        if digits == 0 {
            return Err(bad);
        }
        i += 1 + digits;
    }
    let time_end = i;
    // The offset: [+-]HH, [+-]HH:MM or [+-]HH:MM:SS.
    let mut offset: &[u8] = &[];
    if with_tz {
        let start = i;
        if !matches!(text.get(i), Some(b'+' | b'-'))
            || !text.get(i + 1..i + 3).is_some_and(two_digits)
        {
            return Err(bad);
        }
        i += 3;
        for _ in 0..2 {
            if text.get(i) == Some(&b':') && text.get(i + 1..i + 3).is_some_and(two_digits) {
                i += 3;
            } else {
                break;
            }
        }
        offset = &text[start..i];
    }
    let era = &text[i..];
    if !(era.is_empty() || era == b" BC") {
        return Err(bad);
    }
    let minutes: &[u8] = if with_tz && offset.len() == 3 {
        b":00"
    } else {
        b""
    };
    write_quoted(
        &[
            &text[..date_end],
            b"T",
            &text[time_start..time_end],
            offset,
            minutes,
            era,
        ],
        out,
    )
}

fn is_special(text: &[u8]) -> bool {
    text == b"infinity" || text == b"-infinity"
}

/// The length of a leading `YYYY-MM-DD` (a year of at least four digits).
fn date_part(text: &[u8]) -> Option<usize> {
    let year = count_digits(text);
    if year < 4 {
        return None;
    }
    let rest = text.get(year..year + 6)?;
    (rest[0] == b'-' && two_digits(&rest[1..3]) && rest[3] == b'-' && two_digits(&rest[4..6]))
        .then_some(year + 6)
}

fn two_digits(s: &[u8]) -> bool {
    s.len() == 2 && s.iter().all(u8::is_ascii_digit)
}

fn count_digits(s: &[u8]) -> usize {
    s.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// Writes the concatenated parts between double quotes; they are ASCII
/// without anything JSON would escape (checked by the callers' parsing).
fn write_quoted(parts: &[&[u8]], out: &mut Vec<u8>) -> Result<(), ValueProblem> {
    out.push(b'"');
    for part in parts {
        out.extend_from_slice(part);
    }
    out.push(b'"');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> Result<String, ValueProblem> {
        let mut out = Vec::new();
        write_date(text.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn ts(text: &str, tz: bool) -> Result<String, ValueProblem> {
        let mut out = Vec::new();
        write_timestamp(text.as_bytes(), tz, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn dates_keep_their_iso_text() {
        assert_eq!(date("2024-01-02").unwrap(), r#""2024-01-02""#);
        assert_eq!(date("0044-03-15 BC").unwrap(), r#""0044-03-15 BC""#);
        assert_eq!(date("5874897-12-31").unwrap(), r#""5874897-12-31""#);
        assert_eq!(date("infinity").unwrap(), r#""infinity""#);
        assert_eq!(date("-infinity").unwrap(), r#""-infinity""#);
    }

    #[test]
    fn non_iso_dates_are_refused() {
        for s in [
            "01/02/2024",
            "02.01.2024",
            "2024-1-2",
            "24-01-02",
            "2024-01-02 AD",
            "",
        ] {
            assert_eq!(date(s), Err(ValueProblem::DateTime("date")), "{s}");
        }
    }

    #[test]
    fn timestamps_get_a_t() {
        // Checked against PostgreSQL 15's to_jsonb.
        assert_eq!(
            ts("2024-01-02 03:04:05", false).unwrap(),
            r#""2024-01-02T03:04:05""#
        );
        assert_eq!(
            ts("0044-03-15 10:00:00.5 BC", false).unwrap(),
            r#""0044-03-15T10:00:00.5 BC""#
        );
        assert_eq!(
            ts("294276-12-31 23:59:59.999999", false).unwrap(),
            r#""294276-12-31T23:59:59.999999""#
        );
        assert_eq!(ts("infinity", false).unwrap(), r#""infinity""#);
    }

    #[test]
    fn timestamptz_offsets_gain_minutes() {
        let cases = [
            (
                "2024-01-02 03:04:05.123456+00",
                r#""2024-01-02T03:04:05.123456+00:00""#,
            ),
            (
                "4713-01-01 00:00:00+00 BC",
                r#""4713-01-01T00:00:00+00:00 BC""#,
            ),
            (
                "2000-01-01 05:30:00+05:30",
                r#""2000-01-01T05:30:00+05:30""#,
            ),
            ("1999-12-31 19:00:00-05", r#""1999-12-31T19:00:00-05:00""#),
            (
                "1800-01-01 00:19:32+00:19:32",
                r#""1800-01-01T00:19:32+00:19:32""#,
            ),
            ("-infinity", r#""-infinity""#),
        ];
        for (input, expected) in cases {
            assert_eq!(ts(input, true).unwrap(), expected, "{input}");
        }
    }

    #[test]
    fn malformed_timestamps_are_refused() {
        for s in [
            "2024-01-02",
            "2024-01-02T03:04:05",
            "2024-01-02 03:04",
            "2024-01-02 03:04:05.",
            "01/02/2024 03:04:05",
        ] {
            assert!(ts(s, false).is_err(), "{s}");
        }
        assert!(ts("2024-01-02 03:04:05", true).is_err());
        assert!(ts("2024-01-02 03:04:05+00", false).is_err());
        assert!(ts("2024-01-02 03:04:05+0", true).is_err());
        assert!(ts("2024-01-02 03:04:05 PST", true).is_err());
    }
}
