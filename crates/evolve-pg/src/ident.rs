use std::fmt;

/// Quotes an identifier for PostgreSQL: always double-quoted, inner quotes
/// doubled. `"; DROP TABLE x; --` stays a name.
pub fn quote_ident(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Quotes a string literal (standard_conforming_strings on). Prefer bound
/// parameters; this exists for the few utility statements (SET, COMMENT)
/// that cannot take parameters.
pub fn quote_literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// Quotes `body` (a function body, a `DO` block) between dollar tags:
/// `$evolve$`, or `$evolve1$`, `$evolve2$`, ... when the body holds that
/// tag (a quoted identifier may) or ends in a way that would meet the
/// closing tag early (`...$evolve` before `$evolve$`), so nothing in the
/// body can end it.
pub fn dollar_quote(body: &str) -> String {
    let tag = (0u64..)
        .map(|n| match n {
            0 => "$evolve$".to_string(),
            n => format!("$evolve{n}$"),
        })
        .find(|tag| format!("{body}{tag}").find(tag.as_str()) == Some(body.len()))
        .expect("a finite body leaves some tag free");
    format!("{tag}{body}{tag}")
}

/// A name part as [`QualifiedName::shown`] writes it: bare when it is a
/// lower-case word (`[a-z_][a-z0-9_]*`, which folding leaves as it is),
/// quoted otherwise.
fn shown_part(part: &str) -> String {
    let mut chars = part.chars();
    let bare = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if bare {
        part.to_string()
    } else {
        quote_ident(part)
    }
}

/// `text` as one word of a POSIX shell command line: as it is when it
/// holds only characters no shell treats specially, else single-quoted.
pub fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.,/=".contains(c))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A schema-qualified name. `Display` renders it quoted and ready to splice
/// into SQL.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QualifiedName {
    pub schema: String,
    pub name: String,
}

impl QualifiedName {
    pub fn new(schema: impl Into<String>, name: impl Into<String>) -> Self {
        QualifiedName {
            schema: schema.into(),
            name: name.into(),
        }
    }

    /// `schema.name` unquoted, for messages.
    pub fn plain(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// `schema.name` with a part quoted where it must be to read back as
    /// the same name ([`QualifiedName::parse_user`] reads it): `public.orders`,
    /// `public."Orders"`, `"x.y".z`. Unlike [`QualifiedName::plain`], two
    /// names never show the same, so it can key state by name and be typed
    /// back on a command line.
    pub fn shown(&self) -> String {
        format!("{}.{}", shown_part(&self.schema), shown_part(&self.name))
    }

    /// Parses `name` or `schema.name` as a user would type it on a command
    /// line: unquoted parts are folded to lower case, double-quoted parts are
    /// kept as written. Returns the schema (if given) and the name.
    pub fn parse_user(input: &str) -> Result<(Option<String>, String), String> {
        let parts = split_identifier_path(input)?;
        match parts.as_slice() {
            [name] => Ok((None, name.clone())),
            [schema, name] => Ok((Some(schema.clone()), name.clone())),
            _ => Err(format!(
                "{input:?} is not a valid name; use name or schema.name (double-quote parts with dots or capitals)"
            )),
        }
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}",
            quote_ident(&self.schema),
            quote_ident(&self.name)
        )
    }
}

fn split_identifier_path(input: &str) -> Result<Vec<String>, String> {
    let bad = || format!("{input:?} is not a valid name; use name or schema.name");
    let mut parts = Vec::new();
    let mut chars = input.chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return Err(bad()),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                if c == '"' || c.is_whitespace() {
                    return Err(bad());
                }
                part.extend(c.to_lowercase());
                chars.next();
            }
        }
        if part.is_empty() {
            return Err(bad());
        }
        parts.push(part);
        match chars.next() {
            None => return Ok(parts),
            Some('.') => continue,
            Some(_) => return Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_always_quoted() {
        assert_eq!(quote_ident("users"), r#""users""#);
        assert_eq!(
            quote_ident(r#""; DROP TABLE x; --"#),
            r#""""; DROP TABLE x; --""#
        );
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(QualifiedName::new("a b", "C").to_string(), r#""a b"."C""#);
    }

    #[test]
    fn dollar_quotes_take_a_tag_the_body_cannot_end() {
        assert_eq!(dollar_quote("BEGIN END"), "$evolve$BEGIN END$evolve$");
        assert_eq!(
            dollar_quote(r#"SELECT "a$evolve$; DROP TABLE v; --""#),
            r#"$evolve1$SELECT "a$evolve$; DROP TABLE v; --"$evolve1$"#
        );
        assert_eq!(
            dollar_quote("x$evolve$ y$evolve1$"),
            "$evolve2$x$evolve$ y$evolve1$$evolve2$"
        );
        // The body's end and the closing tag would make the tag early.
        assert_eq!(dollar_quote("x$evolve"), "$evolve1$x$evolve$evolve1$");
    }

    #[test]
    fn shown_names_read_back_as_the_same_name_and_never_collide() {
        for (schema, name, shown) in [
            ("public", "orders", "public.orders"),
            ("public", "Orders", r#"public."Orders""#),
            ("x.y", "z", r#""x.y".z"#),
            ("x", "y.z", r#"x."y.z""#),
            ("s", "a\"b", r#"s."a""b""#),
            ("s", "1t", r#"s."1t""#),
            ("s", "user", "s.user"),
        ] {
            let q = QualifiedName::new(schema, name);
            assert_eq!(q.shown(), shown);
            let (s, n) = QualifiedName::parse_user(&q.shown()).unwrap();
            assert_eq!((s.as_deref(), n.as_str()), (Some(schema), name));
        }
        assert_eq!(shell_word("public.orders"), "public.orders");
        assert_eq!(shell_word(r#"public."Orders""#), r#"'public."Orders"'"#);
        assert_eq!(shell_word("o$(touch x)'"), r"'o$(touch x)'\'''");
    }

    #[test]
    fn user_names_fold_like_postgres() {
        assert_eq!(QualifiedName::parse_user("Hist"), Ok((None, "hist".into())));
        assert_eq!(
            QualifiedName::parse_user(r#"ops."My ""T""#),
            Ok((Some("ops".into()), r#"My "T"#.into()))
        );
        assert!(QualifiedName::parse_user("a.b.c").is_err());
        assert!(QualifiedName::parse_user("").is_err());
        assert!(QualifiedName::parse_user("a.").is_err());
        assert!(QualifiedName::parse_user("\"open").is_err());
        assert!(QualifiedName::parse_user("a b").is_err());
    }
}
