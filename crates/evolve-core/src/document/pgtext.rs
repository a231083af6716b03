//! Reading the text output of arrays (`array_out`) and composites
//! (`record_out`) the way `array_in` and `record_in` read it.

use std::borrow::Cow;

use super::ValueProblem;

/// PostgreSQL's `MAXDIM`.
const MAX_DIMS: usize = 6;

/// `array_isspace`: the white space `array_in` skips.
fn array_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn array_error(offset: usize, reason: &'static str) -> ValueProblem {
    ValueProblem::Array { offset, reason }
}

fn record_error(offset: usize, reason: &'static str) -> ValueProblem {
    ValueProblem::Composite { offset, reason }
}

/// Writes the array literal `text` as (nested) JSON arrays: `[` and `]` for
/// every brace level, the elements through `element` (`None` for `NULL`).
/// Dimension decorations (`[0:1]={a,b}`) are checked against the contents
/// and otherwise ignored, as `to_jsonb` ignores lower bounds. The
/// space-separated output of `int2vector` and `oidvector` (`1 2 3`) is read
/// too. On error, what was written to `out` is unspecified.
pub(super) fn encode_array<F>(
    text: &[u8],
    delimiter: u8,
    out: &mut Vec<u8>,
    mut element: F,
) -> Result<(), ValueProblem>
where
    F: FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<(), ValueProblem>,
{
    let mut p = skip_space(text, 0);
    // Dimension decoration.
    let mut declared = [0i64; MAX_DIMS + 1];
    let mut declared_dims = 0;
    while text.get(p) == Some(&b'[') {
        if declared_dims >= MAX_DIMS {
            return Err(array_error(p, "more than 6 dimensions"));
        }
        p += 1;
        let (first, q) = bound(text, p).ok_or(array_error(p, "missing array dimension value"))?;
        p = q;
        let (lower, upper) = if text.get(p) == Some(&b':') {
            let (upper, q) =
                bound(text, p + 1).ok_or(array_error(p + 1, "missing array dimension value"))?;
            p = q;
            (first, upper)
        } else {
            (1, first)
        };
        if text.get(p) != Some(&b']') {
            return Err(array_error(p, "missing \"]\" after array dimensions"));
        }
        p += 1;
        if upper < lower {
            return Err(array_error(
                p,
                "upper bound cannot be less than lower bound",
            ));
        }
        declared_dims += 1;
        declared[declared_dims] = upper.saturating_sub(lower).saturating_add(1);
        p = skip_space(text, p);
    }
    if declared_dims > 0 {
        if text.get(p) != Some(&b'=') {
            return Err(array_error(p, "missing \"=\" after array dimensions"));
        }
        p = skip_space(text, p + 1);
    }
    if text.get(p) != Some(&b'{') {
        if declared_dims == 0
            && text[p..]
                .iter()
                .all(|&b| b.is_ascii_digit() || b == b'-' || b == b' ')
        {
            return encode_vector(&text[p..], out, element);
        }
        return Err(array_error(
            p,
            "array value must start with \"{\" or dimension information",
        ));
    }
    p += 1;
    out.push(b'[');

    #[derive(PartialEq)]
    enum Expect {
        /// After `{`: an element, a `{` or (only for `{}`) a `}`.
        ItemOrClose,
        /// After a delimiter: an element or a `{`.
        Item,
        /// After an element or a `}`: a delimiter or a `}`.
        DelimiterOrClose,
    }
    let mut expect = Expect::ItemOrClose;
    let mut depth = 1;
    let mut ndim = 0; // the depth of the elements, once known
    let mut counts = [0i64; MAX_DIMS + 1];
    let mut dims = [0i64; MAX_DIMS + 1]; // 0: not known yet
    let mut scratch = Vec::new();
    loop {
        p = skip_space(text, p);
        let Some(&b) = text.get(p) else {
            return Err(array_error(p, "unexpected end of input"));
        };
        match expect {
            Expect::ItemOrClose | Expect::Item if b == b'{' => {
                if ndim != 0 && depth >= ndim {
                    return Err(array_error(p, "unexpected \"{\""));
                }
                if depth >= MAX_DIMS {
                    return Err(array_error(p, "more than 6 dimensions"));
                }
                counts[depth] += 1;
                depth += 1;
                counts[depth] = 0;
                out.push(b'[');
                p += 1;
                expect = Expect::ItemOrClose;
            }
            Expect::ItemOrClose if b == b'}' => {
                // Only the whole array may be empty: `{}`.
                if depth != 1 {
                    return Err(array_error(p, "empty sub-array"));
                }
                p = skip_space(text, p + 1);
                if p != text.len() {
                    return Err(array_error(p, "junk after closing right brace"));
                }
                if declared_dims > 0 {
                    return Err(array_error(
                        p,
                        "specified array dimensions do not match array contents",
                    ));
                }
                out.push(b']');
                return Ok(());
            }
            Expect::ItemOrClose | Expect::Item => {
                if b == b'}' || b == delimiter {
                    return Err(array_error(p, "unexpected delimiter or \"}\""));
                }
                if ndim == 0 {
                    ndim = depth;
                } else if depth != ndim {
                    return Err(array_error(p, "elements at different depths"));
                }
                counts[depth] += 1;
                let (value, q) = read_element(text, p, delimiter, &mut scratch)?;
                p = q;
                match value {
                    Element::Null => element(None, out)?,
                    Element::Borrowed(start, end) => element(Some(&text[start..end]), out)?,
                    Element::Scratch => element(Some(&scratch), out)?,
                }
                expect = Expect::DelimiterOrClose;
            }
            Expect::DelimiterOrClose if b == delimiter => {
                out.push(b',');
                p += 1;
                expect = Expect::Item;
            }
            Expect::DelimiterOrClose if b == b'}' => {
                if dims[depth] == 0 {
                    dims[depth] = counts[depth];
                } else if dims[depth] != counts[depth] {
                    return Err(array_error(
                        p,
                        "multidimensional arrays must have sub-arrays with matching dimensions",
                    ));
                }
                out.push(b']');
                p += 1;
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Expect::DelimiterOrClose => {
                return Err(array_error(p, "expected a delimiter or \"}\""));
            }
        }
    }
    p = skip_space(text, p);
    if p != text.len() {
        return Err(array_error(p, "junk after closing right brace"));
    }
    if declared_dims > 0 && (declared_dims != ndim || (1..=ndim).any(|d| declared[d] != dims[d])) {
        return Err(array_error(
            0,
            "specified array dimensions do not match array contents",
        ));
    }
    Ok(())
}

/// `int2vector`/`oidvector` output: numbers separated by spaces.
fn encode_vector<F>(text: &[u8], out: &mut Vec<u8>, mut element: F) -> Result<(), ValueProblem>
where
    F: FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<(), ValueProblem>,
{
    out.push(b'[');
    let mut first = true;
    for item in text.split(|&b| b == b' ').filter(|s| !s.is_empty()) {
        if !first {
            out.push(b',');
        }
        first = false;
        element(Some(item), out)?;
    }
    out.push(b']');
    Ok(())
}

/// A dimension bound as `array_in` reads it: `[0-9+-]+`, then `atoi`.
fn bound(text: &[u8], start: usize) -> Option<(i64, usize)> {
    let len = text[start.min(text.len())..]
        .iter()
        .take_while(|&&b| b.is_ascii_digit() || b == b'+' || b == b'-')
        .count();
    if len == 0 {
        return None;
    }
    let token = &text[start..start + len];
    // atoi: optional sign, digits, stop at anything else.
    let (negative, digits) = match token[0] {
        b'-' => (true, &token[1..]),
        b'+' => (false, &token[1..]),
        _ => (false, token),
    };
    let mut value: i64 = 0;
    for &d in digits.iter().take_while(|d| d.is_ascii_digit()) {
        value = value.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    Some((if negative { -value } else { value }, start + len))
}

fn skip_space(text: &[u8], mut p: usize) -> usize {
    while p < text.len() && array_isspace(text[p]) {
        p += 1;
    }
    p
}

enum Element {
    Null,
    Borrowed(usize, usize),
    Scratch,
}

/// Reads one element starting at `p` (not white space, not a delimiter or
/// brace): returns it and the position after it (and after trailing white
/// space). Unescaped elements are borrowed from `text`; escaped ones are
/// decoded into `scratch`.
fn read_element(
    text: &[u8],
    start: usize,
    delimiter: u8,
    scratch: &mut Vec<u8>,
) -> Result<(Element, usize), ValueProblem> {
    let mut p = start;
    if text[p] == b'"' {
        p += 1;
        let content = p;
        let mut escaped = false;
        loop {
            match text.get(p) {
                None => return Err(array_error(p, "unterminated quoted element")),
                Some(b'\\') => {
                    escaped = true;
                    p += 2;
                    if p > text.len() {
                        return Err(array_error(p - 1, "unexpected end of input after \\"));
                    }
                }
                Some(b'"') => break,
                Some(_) => p += 1,
            }
        }
        let end = p;
        p = skip_space(text, p + 1);
        match text.get(p) {
            Some(&b) if b == delimiter || b == b'}' => {}
            _ => return Err(array_error(p, "incorrectly quoted array element")),
        }
        if !escaped {
            return Ok((Element::Borrowed(content, end), p));
        }
        scratch.clear();
        unescape_into(&text[content..end], scratch);
        return Ok((Element::Scratch, p));
    }
    // Unquoted: up to a delimiter or brace, backslash escapes, trailing
    // unescaped white space trimmed.
    let mut escaped = false;
    let mut end = p; // end of the last significant byte
    loop {
        match text.get(p) {
            None => return Err(array_error(p, "unexpected end of input")),
            Some(b'\\') => {
                escaped = true;
                p += 2;
                if p > text.len() {
                    return Err(array_error(p - 1, "unexpected end of input after \\"));
                }
                end = p;
            }
            Some(&b) if b == delimiter || b == b'}' => break,
            Some(b'{' | b'"') => {
                return Err(array_error(p, "unexpected character in unquoted element"));
            }
            Some(&b) => {
                p += 1;
                if !array_isspace(b) {
                    end = p;
                }
            }
        }
    }
    let raw = &text[start..end];
    if !escaped {
        if raw.eq_ignore_ascii_case(b"NULL") {
            return Ok((Element::Null, p));
        }
        return Ok((Element::Borrowed(start, end), p));
    }
    scratch.clear();
    unescape_into(raw, scratch);
    Ok((Element::Scratch, p))
}

/// Drops the backslash of every `\x` pair.
fn unescape_into(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() {
            i += 1;
        }
        out.push(raw[i]);
        i += 1;
    }
}

/// Splits a record literal (`record_out`'s `(1,"a b",)`) into its `fields`
/// values as `record_in` does: an empty unquoted field is NULL, `""` is the
/// empty string, `""` inside quotes is a `"`, a backslash takes the next
/// byte literally.
pub(super) fn parse_record(
    text: &[u8],
    fields: usize,
) -> Result<Vec<Option<Cow<'_, [u8]>>>, ValueProblem> {
    let mut p = skip_space(text, 0);
    if text.get(p) != Some(&b'(') {
        return Err(record_error(p, "missing left parenthesis"));
    }
    p += 1;
    let mut values = Vec::with_capacity(fields);
    for i in 0..fields {
        if i > 0 {
            if text.get(p) != Some(&b',') {
                return Err(record_error(p, "too few fields for the type"));
            }
            p += 1;
        }
        match text.get(p) {
            Some(b',' | b')') => {
                values.push(None);
                continue;
            }
            None => return Err(record_error(p, "unexpected end of input")),
            Some(_) => {}
        }
        // Find the end, noting whether the value can be borrowed: no
        // backslash, and quotes (if any) only around the whole value.
        let start = p;
        let mut in_quote = false;
        let mut simple = true;
        while let Some(&ch) = text
            .get(p)
            .filter(|&&ch| in_quote || (ch != b',' && ch != b')'))
        {
            match ch {
                b'\\' => {
                    simple = false;
                    p += 2;
                }
                b'"' => {
                    if !in_quote {
                        in_quote = true;
                        simple &= p == start;
                    } else if text.get(p + 1) == Some(&b'"') {
                        simple = false;
                        p += 1;
                    } else {
                        in_quote = false;
                    }
                    p += 1;
                }
                _ => {
                    // Anything after a closing quote makes it not simple.
                    simple &= text[start] != b'"' || in_quote;
                    p += 1;
                }
            }
        }
        if p >= text.len() {
            return Err(record_error(text.len(), "unexpected end of input"));
        }
        let raw = &text[start..p];
        let value = if simple && raw.first() == Some(&b'"') && raw.len() >= 2 {
            Cow::Borrowed(&raw[1..raw.len() - 1])
        } else if simple && raw.first() != Some(&b'"') {
            Cow::Borrowed(raw)
        } else {
            Cow::Owned(unquote_record_field(raw))
        };
        values.push(Some(value));
    }
    if text.get(p) != Some(&b')') {
        return Err(record_error(p, "too many fields for the type"));
    }
    p = skip_space(text, p + 1);
    if p != text.len() {
        return Err(record_error(p, "junk after right parenthesis"));
    }
    Ok(values)
}

/// `record_in`'s decoding of one field's raw text.
fn unquote_record_field(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut in_quote = false;
    let mut i = 0;
    while i < raw.len() {
        let ch = raw[i];
        i += 1;
        match ch {
            b'\\' => {
                if let Some(&next) = raw.get(i) {
                    out.push(next);
                    i += 1;
                }
            }
            b'"' if !in_quote => in_quote = true,
            b'"' if raw.get(i) == Some(&b'"') => {
                out.push(b'"');
                i += 1;
            }
            b'"' => in_quote = false,
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(text: &str) -> Result<String, ValueProblem> {
        let mut out = Vec::new();
        encode_array(text.as_bytes(), b',', &mut out, |e, out| {
            match e {
                None => out.extend_from_slice(b"null"),
                Some(t) => {
                    out.push(b'<');
                    out.extend_from_slice(t);
                    out.push(b'>');
                }
            }
            Ok(())
        })?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn record(text: &str, fields: usize) -> Result<Vec<Option<String>>, ValueProblem> {
        Ok(parse_record(text.as_bytes(), fields)?
            .into_iter()
            .map(|v| v.map(|v| String::from_utf8(v.into_owned()).unwrap()))
            .collect())
    }

    #[test]
    fn arrays_nest_and_keep_nulls() {
        assert_eq!(array("{}").unwrap(), "[]");
        assert_eq!(array("{1,2,NULL}").unwrap(), "[<1>,<2>,null]");
        assert_eq!(array("{{1,2},{3,NULL}}").unwrap(), "[[<1>,<2>],[<3>,null]]");
        assert_eq!(array("{{{{{{1}}}}}}").unwrap(), "[[[[[[<1>]]]]]]");
    }

    #[test]
    fn array_quoting_follows_array_in() {
        // Checked against PostgreSQL 15 ('<literal>'::text[]).
        assert_eq!(
            array(r#"{"",NULL,"NULL","a\"b","a b",nULl}"#).unwrap(),
            r#"[<>,null,<NULL>,<a"b>,<a b>,null]"#
        );
        assert_eq!(array(r#"{ 1 , 2 }"#).unwrap(), "[<1>,<2>]");
        assert_eq!(array(r#"{"a" ,b}"#).unwrap(), "[<a>,<b>]");
        assert_eq!(array(r#"{a\ b , c\\ }"#).unwrap(), r#"[<a b>,<c\>]"#);
        assert_eq!(array(r#"{\NULL}"#).unwrap(), "[<NULL>]");
    }

    #[test]
    fn dimension_decorations_are_dropped_but_checked() {
        assert_eq!(array("[2:3]={1,2}").unwrap(), "[<1>,<2>]");
        assert_eq!(array("[3]={1,2,3}").unwrap(), "[<1>,<2>,<3>]");
        assert_eq!(array("[1:2][1:1]={{1},{2}}").unwrap(), "[[<1>],[<2>]]");
        assert!(array("[1:2]={1,2,3}").is_err());
        assert!(array("[2:1]={}").is_err());
        assert!(array("[1:2]{1,2}").is_err());
    }

    #[test]
    fn malformed_arrays_are_refused() {
        for s in [
            "1,2",
            "x",
            "{",
            "{1",
            "{1,}",
            "{1,,2}",
            "{{},{}}",
            "{{1},{2,3}}",
            "{1,{2}}",
            "{{1},2}",
            "{{{{{{{1}}}}}}}",
            "{1}x",
            r#"{"a"b}"#,
            r#"{a"b}"#,
            r#"{"a}"#,
            "{a\\",
        ] {
            assert!(array(s).is_err(), "{s:?} was accepted");
        }
    }

    #[test]
    fn vectors_are_read() {
        assert_eq!(array("1 2 3").unwrap(), "[<1>,<2>,<3>]");
        assert_eq!(array("").unwrap(), "[]");
    }

    #[test]
    fn records_follow_record_in() {
        assert_eq!(
            record(r#"(1,"a ""b""",)"#, 3).unwrap(),
            vec![Some("1".into()), Some(r#"a "b""#.into()), None]
        );
        assert_eq!(
            record(r#"("",x)"#, 2).unwrap(),
            vec![Some(String::new()), Some("x".into())]
        );
        assert_eq!(
            record(
                r#"(1,"(2,""q""""u"")",,"2020-01-01 00:00:00+00","{1,2}")"#,
                5
            )
            .unwrap(),
            vec![
                Some("1".into()),
                Some(r#"(2,"q""u")"#.into()),
                None,
                Some("2020-01-01 00:00:00+00".into()),
                Some("{1,2}".into())
            ]
        );
        assert_eq!(
            record(r#"(a\,b,"c\"d")"#, 2).unwrap(),
            vec![Some("a,b".into()), Some("c\"d".into())]
        );
        assert_eq!(record("()", 0).unwrap(), vec![]);
        assert_eq!(record("(,)", 2).unwrap(), vec![None, None]);
        assert_eq!(
            record(r#"(a"b c"d)"#, 1).unwrap(),
            vec![Some("ab cd".into())]
        );
    }

    #[test]
    fn records_with_the_wrong_field_count_are_refused() {
        assert!(record("(1,2)", 3).is_err());
        assert!(record("(1,2,3)", 2).is_err());
        assert!(record("1,2", 2).is_err());
        assert!(record("(1,2) x", 2).is_err());
        assert!(record(r#"(1,"2)"#, 2).is_err());
        assert!(record("(1,2\\", 2).is_err());
    }
}
