//! Reading what the user wrote (pure): `--set "column = expression"` and
//! backfill files.
//!
//! A backfill file holds one `UPDATE table SET column = expression [, ...]
//! [WHERE condition]` statement, optionally preceded by `-- evolve:batch N`;
//! the job is named after the file (`B001__postal_code.sql` is job
//! `B001__postal_code`). The statement is never run as written: evolve runs
//! its assignments and condition in keyset batches.

use crate::sql::Assignment;

/// A backfill as the user described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The table as typed (`name` or `schema.name`, quoted parts kept).
    pub table: String,
    pub set: Vec<Assignment>,
    pub filter: Option<String>,
    /// `-- evolve:batch N` of a file.
    pub batch: Option<u64>,
}

/// Byte offsets of the characters outside quotes, comments and
/// parentheses.
fn top_level(text: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let Some(c) = rest.chars().next() else { break };
        if c == '\'' || c == '"' {
            i = quote_end(text, i, c).unwrap_or(text.len());
            continue;
        }
        if let Some(tag) = dollar_tag(rest) {
            i += rest[tag.len()..]
                .find(tag)
                .map(|k| 2 * tag.len() + k)
                .unwrap_or(rest.len());
            continue;
        }
        if rest.starts_with("--") {
            i += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        if let Some(comment) = rest.strip_prefix("/*") {
            i += comment.find("*/").map(|k| k + 4).unwrap_or(rest.len());
            continue;
        }
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push((i, c)),
            _ => {}
        }
        i += c.len_utf8();
    }
    out
}

/// `$tag$` at the start of `rest`, if it opens a dollar quote (`$1` is a
/// parameter, not a tag).
fn dollar_tag(rest: &str) -> Option<&str> {
    let inner = rest.strip_prefix('$')?;
    let end = inner.find('$')?;
    let tag = &inner[..end];
    (tag.chars().all(|t| t.is_alphanumeric() || t == '_')
        && !tag.starts_with(|t: char| t.is_ascii_digit()))
    .then(|| &rest[..end + 2])
}

/// The end of the quoted text opening at `i` (`'...'` or `"..."`, doubled
/// quotes inside), or None when it never closes.
fn quote_end(text: &str, i: usize, q: char) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = text[j..].find(q)?;
        j += k + 1;
        if text[j..].starts_with(q) {
            j += 1;
            continue;
        }
        return Some(j);
    }
}

/// False when the text has an unbalanced quote or parenthesis, a comment,
/// an unterminated dollar quote or a semicolon outside quotes: such text
/// would swallow or end the SQL around it.
fn balanced(text: &str) -> bool {
    let mut depth = 0i64;
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let Some(c) = rest.chars().next() else { break };
        if c == '\'' || c == '"' {
            match quote_end(text, i, c) {
                Some(j) => {
                    i = j;
                    continue;
                }
                None => return false,
            }
        }
        if let Some(tag) = dollar_tag(rest) {
            match rest[tag.len()..].find(tag) {
                Some(k) => {
                    i += 2 * tag.len() + k;
                    continue;
                }
                None => return false,
            }
        }
        if rest.starts_with("--") || rest.starts_with("/*") || c == ';' {
            return false;
        }
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
        i += c.len_utf8();
    }
    depth == 0
}

/// Splits at top-level commas.
fn split_commas(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, c) in top_level(text) {
        if c == ',' {
            parts.push(&text[start..i]);
            start = i + 1;
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The offset of a top-level keyword (a whole word, any case).
fn find_keyword(text: &str, word: &str) -> Option<usize> {
    let top: std::collections::BTreeSet<usize> =
        top_level(text).into_iter().map(|(i, _)| i).collect();
    top.iter().copied().find(|&i| {
        let candidate = &text[i..];
        let word_here = candidate.len() >= word.len()
            && candidate.is_char_boundary(word.len())
            && candidate[..word.len()].eq_ignore_ascii_case(word);
        let before_ok = !text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"' || c == '$');
        let after_ok = word_here
            && candidate[word.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        word_here && before_ok && after_ok && (i..i + word.len()).all(|p| top.contains(&p))
    })
}

/// Reads one identifier (quoted or not) at the start of `text`; returns it
/// (unquoted parts folded to lower case) and the rest.
fn identifier(text: &str) -> Option<(String, &str)> {
    let text = text.trim_start();
    if let Some(quoted) = text.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == '"' {
                if quoted[i + 1..].starts_with('"') {
                    name.push('"');
                    chars.next();
                } else {
                    return (!name.is_empty()).then(|| (name, &quoted[i + 1..]));
                }
            } else {
                name.push(c);
            }
        }
        None
    } else {
        let end = text
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(text.len());
        let word = &text[..end];
        (!word.is_empty() && !word.starts_with(|c: char| c.is_ascii_digit()))
            .then(|| (word.to_lowercase(), &text[end..]))
    }
}

/// Parses `column = expression`.
pub fn parse_assignment(text: &str) -> Result<Assignment, String> {
    let bad = || {
        format!(
            "--set {text:?} is not an assignment; write it as \"column = expression\", e.g. --set \"postal_code = postcode\""
        )
    };
    let (column, rest) = identifier(text).ok_or_else(bad)?;
    let rest = rest.trim_start();
    let expr = rest.strip_prefix('=').ok_or_else(bad)?;
    if expr.starts_with('=') {
        return Err(bad());
    }
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(bad());
    }
    if !balanced(expr) {
        return Err(format!(
            "--set {text:?}: the expression has an unbalanced quote or parenthesis, a comment or a semicolon; give one expression"
        ));
    }
    Ok(Assignment {
        column,
        expr: expr.to_string(),
        compare_as: None,
    })
}

/// Checks a `--where` condition the same way as a `--set` expression.
pub fn check_condition(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() || !balanced(t) {
        return Err(format!(
            "--where {text:?} is not one condition (unbalanced quote or parenthesis, a comment, or a semicolon)"
        ));
    }
    Ok(t.to_string())
}

/// Parses a backfill file's text; `file` names it in errors.
pub fn parse_file(file: &str, text: &str) -> Result<Spec, String> {
    let mut batch = None;
    let mut body = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(directive) = trimmed.strip_prefix("-- evolve:") {
            let mut words = directive.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("batch"), Some(n), None) => {
                    batch = Some(n.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("{file}: -- evolve:batch {n:?} is not a positive number")
                    })?);
                }
                _ => {
                    return Err(format!(
                        "{file}: unknown directive {trimmed:?}; backfill files know -- evolve:batch N"
                    ));
                }
            }
        } else if !trimmed.starts_with("--") {
            body.push_str(line);
            body.push('\n');
        }
    }
    let body = body.trim().trim_end_matches(';').trim();
    let shape = || {
        format!(
            "{file} must hold one statement \"UPDATE table SET column = expression [WHERE condition]\""
        )
    };
    let (update, rest) = identifier(body).ok_or_else(shape)?;
    if update != "update" {
        return Err(shape());
    }
    // table or schema.table
    let rest = rest.trim_start();
    let (_, after_name) = identifier(rest).ok_or_else(shape)?;
    let after_name = match after_name.strip_prefix('.') {
        Some(r) => identifier(r).ok_or_else(shape)?.1,
        None => after_name,
    };
    let table = rest[..rest.len() - after_name.len()].trim().to_string();
    let (set_word, assignments) = identifier(after_name).ok_or_else(shape)?;
    if set_word != "set" {
        return Err(shape());
    }
    let (assignments, filter) = match find_keyword(assignments, "where") {
        Some(i) => (
            &assignments[..i],
            Some(check_condition(&assignments[i + 5..]).map_err(|e| format!("{file}: {e}"))?),
        ),
        None => (assignments, None),
    };
    if find_keyword(assignments, "from").is_some()
        || find_keyword(assignments, "returning").is_some()
    {
        return Err(format!(
            "{file}: UPDATE ... FROM and RETURNING are not backfills; use a subquery in the expression"
        ));
    }
    let set = split_commas(assignments)
        .into_iter()
        .map(|a| parse_assignment(a).map_err(|e| format!("{file}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Spec {
        table,
        set,
        filter,
        batch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn assignments() {
        let a = parse_assignment(" postal_code = upper(postcode) ").unwrap();
        assert_eq!(a.column, "postal_code");
        assert_eq!(a.expr, "upper(postcode)");
        let q = parse_assignment(r#""Postal ""Code""" = 'x=y'"#).unwrap();
        assert_eq!(q.column, "Postal \"Code\"");
        assert_eq!(q.expr, "'x=y'");
        assert!(parse_assignment("a == b").is_err());
        assert!(parse_assignment("= b").is_err());
        assert!(parse_assignment("a =").is_err());
        assert!(parse_assignment("a = 1); DROP TABLE t; --").is_err());
        assert!(parse_assignment("a = 'unterminated").is_err());
        assert!(parse_assignment("a = (1").is_err());
        assert!(parse_assignment("a = 1 -- comment").is_err());
        assert!(parse_assignment("a = $$x$$").is_ok());
    }

    #[test]
    fn files() {
        let spec = parse_file(
            "B001__postal_code.sql",
            "-- copies postcode\n-- evolve:batch 500\nUPDATE public.restaurants\n  SET postal_code = coalesce(postcode, 'n/a, none'), \"Flag\" = (a = b)\n  WHERE postal_code IS DISTINCT FROM (SELECT 'where')\n;\n",
        )
        .unwrap();
        assert_eq!(spec.table, "public.restaurants");
        assert_eq!(spec.batch, Some(500));
        assert_eq!(spec.set.len(), 2);
        assert_eq!(spec.set[0].expr, "coalesce(postcode, 'n/a, none')");
        assert_eq!(spec.set[1].column, "Flag");
        assert_eq!(
            spec.filter.as_deref(),
            Some("postal_code IS DISTINCT FROM (SELECT 'where')")
        );
        let no_where = parse_file("f.sql", "update \"T\" set a = 1").unwrap();
        assert_eq!(no_where.table, "\"T\"");
        assert_eq!(no_where.filter, None);
        assert!(parse_file("f.sql", "DELETE FROM t").is_err());
        assert!(parse_file("f.sql", "UPDATE t SET a = 1; DROP TABLE t").is_err());
        assert!(parse_file("f.sql", "UPDATE t SET a = b.x FROM b").is_err());
        assert!(parse_file("f.sql", "-- evolve:batch zero\nUPDATE t SET a = 1").is_err());
        assert!(parse_file("f.sql", "-- evolve:fast\nUPDATE t SET a = 1").is_err());
    }

    proptest! {
        /// Never panics, whatever the input.
        #[test]
        fn parsers_never_panic(s in "\\PC{0,80}") {
            let _ = parse_assignment(&s);
            let _ = parse_file("f.sql", &s);
            let _ = check_condition(&s);
        }

        /// An accepted expression spliced in parentheses stays one
        /// expression: it has no top-level semicolon and its parentheses
        /// and quotes balance.
        #[test]
        fn accepted_expressions_are_balanced(s in "[a-z0-9 ()';,=\"-]{1,40}") {
            if let Ok(a) = parse_assignment(&format!("c = {s}")) {
                prop_assert!(!a.expr.contains(';') || a.expr.contains('\'') || a.expr.contains('"'));
                let opens = a.expr.chars().filter(|c| *c == '(').count();
                let closes = a.expr.chars().filter(|c| *c == ')').count();
                if !a.expr.contains('\'') && !a.expr.contains('"') {
                    prop_assert_eq!(opens, closes);
                }
            }
        }
    }
}
