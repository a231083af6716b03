//! Whether Java's `java.util.regex.Pattern.compile` refuses a pattern.
//!
//! Confluent loads a JSON Schema with Everit's loader (json-sKema for
//! 2019-09 and 2020-12), whose `JavaUtilRegexpFactory` compiles every
//! `pattern` and `patternProperties` name with `Pattern.compile` while the
//! schema loads; a `PatternSyntaxException` makes the registration 42201.
//! Java's syntax is not ECMA-262's and not what this crate's matcher
//! ([`super::regex`]) supports (lookaround, backreferences, `\p{..}`,
//! possessive quantifiers and inline flags are Java, and fine).
//!
//! This is a checker, not a parser: it reports only errors `Pattern`
//! certainly reports (an unclosed or unmatched group, an unclosed class, a
//! reversed range, a quantifier with nothing to repeat, a malformed `{n,m}`,
//! an escape Java does not define, a bad inline flag or group name, a
//! backreference to a group name not defined before it), and accepts what
//! it is unsure of, so that no pattern Java takes is ever refused.
//! Patterns in comments mode (`(?x)`) are not checked: white space and `#`
//! comments change what the rest means.
//! Reference: OpenJDK java.base/java/util/regex/Pattern.java (`expr`,
//! `sequence`, `closure`, `escape`, `clazz`, `group0`, `addFlag`).

/// The reason `Pattern.compile(pattern)` throws, or `None` when it
/// compiles (or this checker cannot tell).
pub(crate) fn java_syntax_error(pattern: &str) -> Option<String> {
    if pattern.contains("(?") && comments_flag(pattern) {
        return None;
    }
    let mut checker = Checker {
        chars: pattern.chars().collect(),
        pos: 0,
        depth: 0,
        names: Vec::new(),
    };
    checker.expr().err()
}

/// Whether an inline flag group turns on `x` (comments mode).
fn comments_flag(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(i, _)| {
        pattern[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
            .take_while(|c| *c != '-')
            .any(|c| c == 'x')
    })
}

/// Deepest group nesting checked; deeper patterns are taken as they are.
const MAX_DEPTH: usize = 200;

struct Checker {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
    /// Named groups defined so far.
    names: Vec<String>,
}

type Checked = Result<(), String>;

impl Checker {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        self.pos += 1;
        c
    }

    fn at(&self) -> String {
        format!("near index {}", self.pos)
    }

    /// Alternatives up to the end or a `)`.
    fn expr(&mut self) -> Checked {
        loop {
            self.sequence()?;
            match self.peek() {
                Some('|') => self.pos += 1,
                Some(')') if self.depth > 0 => return Ok(()),
                Some(')') => return Err(format!("unmatched closing ')' {}", self.at())),
                _ => return Ok(()),
            }
        }
    }

    /// Atoms, each perhaps quantified, up to `|`, `)` or the end.
    fn sequence(&mut self) -> Checked {
        loop {
            match self.peek() {
                None | Some('|') | Some(')') => return Ok(()),
                Some(c @ ('*' | '+' | '?')) => {
                    return Err(format!("dangling meta character '{c}' {}", self.at()));
                }
                // Java's `atom` stops before a `{` and `closure` reads it: a
                // well-formed `{n,m}` repeats the empty atom, anything else
                // is an illegal repetition.
                Some('{') => self.quantifier()?,
                Some(_) => {
                    self.atom()?;
                    self.quantifier()?;
                }
            }
        }
    }

    fn atom(&mut self) -> Checked {
        match self.next() {
            Some('(') => self.group(),
            Some('[') => self.class(),
            Some('\\') => self.escape(false),
            _ => Ok(()),
        }
    }

    /// A quantifier after an atom, if any, with its lazy or possessive
    /// mark.
    fn quantifier(&mut self) -> Checked {
        match self.peek() {
            Some('*' | '+' | '?') => self.pos += 1,
            Some('{') => {
                self.pos += 1;
                let low = self.digits();
                if low.is_none() {
                    return Err(format!("illegal repetition {}", self.at()));
                }
                let mut high = low;
                if self.peek() == Some(',') {
                    self.pos += 1;
                    high = self.digits();
                    if high.is_none() && self.peek() != Some('}') {
                        return Err(format!("unclosed counted closure {}", self.at()));
                    }
                }
                if self.next() != Some('}') {
                    return Err(format!("unclosed counted closure {}", self.at()));
                }
                if let (Some(low), Some(high)) = (low, high)
                    && high < low
                {
                    return Err(format!("illegal repetition range {}", self.at()));
                }
            }
            _ => return Ok(()),
        }
        if matches!(self.peek(), Some('?' | '+')) {
            self.pos += 1;
        }
        Ok(())
    }

    /// Decimal digits, as a number (saturating).
    fn digits(&mut self) -> Option<u64> {
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            n = n.saturating_mul(10).saturating_add(u64::from(d));
            self.pos += 1;
        }
        (self.pos > start).then_some(n)
    }

    /// After `(`.
    fn group(&mut self) -> Checked {
        if self.depth >= MAX_DEPTH {
            self.pos = self.chars.len();
            return Ok(());
        }
        if self.peek() == Some('?') {
            self.pos += 1;
            match self.next() {
                Some(':' | '=' | '!' | '>') => {}
                Some('<') => match self.peek() {
                    Some('=' | '!') => self.pos += 1,
                    _ => self.group_name()?,
                },
                Some(c) if is_flag(c) || c == '-' => {
                    self.pos -= 1;
                    while self.peek().is_some_and(|c| is_flag(c) || c == '-') {
                        self.pos += 1;
                    }
                    match self.next() {
                        // Flags for the rest of the enclosing group.
                        Some(')') => return Ok(()),
                        Some(':') => {}
                        Some(c) => {
                            return Err(format!("unknown inline modifier '{c}' {}", self.at()));
                        }
                        None => return Err(format!("unclosed group {}", self.at())),
                    }
                }
                Some(')') => return Err(format!("unknown inline modifier ')' {}", self.at())),
                Some(c) => return Err(format!("unknown inline modifier '{c}' {}", self.at())),
                None => return Err(format!("unknown group type {}", self.at())),
            }
        }
        self.depth += 1;
        self.expr()?;
        self.depth -= 1;
        match self.next() {
            Some(')') => Ok(()),
            _ => Err(format!("unclosed group {}", self.at())),
        }
    }

    /// A named group's `name>`: a Latin letter, then Latin letters and
    /// digits, not defined before.
    fn group_name(&mut self) -> Checked {
        let name = self.name()?;
        if self.names.contains(&name) {
            return Err(format!(
                "named capturing group <{name}> is already defined {}",
                self.at()
            ));
        }
        self.names.push(name);
        Ok(())
    }

    fn name(&mut self) -> Result<String, String> {
        let mut name = String::new();
        match self.next() {
            Some(c) if c.is_ascii_alphabetic() => name.push(c),
            _ => {
                return Err(format!(
                    "capturing group name does not start with a Latin letter {}",
                    self.at()
                ));
            }
        }
        loop {
            match self.next() {
                Some('>') => return Ok(name),
                Some(c) if c.is_ascii_alphanumeric() => name.push(c),
                _ => {
                    return Err(format!(
                        "named capturing group is missing trailing '>' {}",
                        self.at()
                    ));
                }
            }
        }
    }

    /// After `[`: items up to the matching `]`; nested classes and `&&`
    /// intersections are Java's.
    fn class(&mut self) -> Checked {
        if self.depth >= MAX_DEPTH {
            self.pos = self.chars.len();
            return Ok(());
        }
        if self.peek() == Some('^') {
            self.pos += 1;
        }
        // The last plain character, the start of a possible range.
        let mut previous: Option<char> = None;
        let mut first = true;
        loop {
            let Some(c) = self.next() else {
                return Err(format!("unclosed character class {}", self.at()));
            };
            match c {
                // A `]` first is a literal in Java (`clazz`: it closes only
                // a class that has something), so `[]` is unclosed.
                ']' if first => previous = Some(']'),
                ']' => return Ok(()),
                '[' => {
                    self.depth += 1;
                    self.class()?;
                    self.depth -= 1;
                    previous = None;
                }
                '\\' => {
                    self.escape(true)?;
                    previous = None;
                }
                '-' if previous.is_some()
                    && self
                        .peek()
                        .is_some_and(|n| n != ']' && n != '[' && n != '\\') =>
                {
                    let low = previous.take().unwrap_or_default();
                    let high = self.next().unwrap_or_default();
                    if high < low {
                        return Err(format!("illegal character range {}", self.at()));
                    }
                }
                other => previous = Some(other),
            }
            first = false;
        }
    }

    /// After `\`, in a class or not.
    fn escape(&mut self, in_class: bool) -> Checked {
        let Some(c) = self.next() else {
            return Err(format!(
                "unexpected end of pattern after '\\' {}",
                self.at()
            ));
        };
        match c {
            '0' if !self.peek().is_some_and(|d| ('0'..='7').contains(&d)) => {
                return Err(format!("illegal octal escape sequence {}", self.at()));
            }
            'x' => {
                if self.peek() == Some('{') {
                    self.pos += 1;
                    let start = self.pos;
                    while self.peek().is_some_and(|h| h.is_ascii_hexdigit()) {
                        self.pos += 1;
                    }
                    if self.pos == start || self.next() != Some('}') {
                        return Err(format!("illegal hexadecimal escape sequence {}", self.at()));
                    }
                } else {
                    for _ in 0..2 {
                        if !self.next().is_some_and(|h| h.is_ascii_hexdigit()) {
                            return Err(format!(
                                "illegal hexadecimal escape sequence {}",
                                self.at()
                            ));
                        }
                    }
                }
            }
            'u' => {
                for _ in 0..4 {
                    if !self.next().is_some_and(|h| h.is_ascii_hexdigit()) {
                        return Err(format!("illegal Unicode escape sequence {}", self.at()));
                    }
                }
            }
            'c' if self.peek().is_none() => {
                return Err(format!("illegal control escape sequence {}", self.at()));
            }
            // The control letter.
            'c' => self.pos += 1,
            'p' | 'P' => match self.next() {
                Some('{') => {
                    if !self.chars[self.pos..].contains(&'}') {
                        return Err(format!("unclosed character family {}", self.at()));
                    }
                    while self.next() != Some('}') {}
                }
                Some(_) => {}
                None => return Err(format!("illegal character family {}", self.at())),
            },
            'k' if !in_class => {
                if self.next() != Some('<') {
                    return Err(format!(
                        "\\k is not followed by '<' for named capturing group {}",
                        self.at()
                    ));
                }
                let name = self.name()?;
                if !self.names.contains(&name) {
                    return Err(format!(
                        "named capturing group <{name}> does not exist {}",
                        self.at()
                    ));
                }
            }
            'Q' => {
                // Quoted up to `\E` or the end.
                while self.pos < self.chars.len() {
                    if self.peek() == Some('\\') && self.peek_at(1) == Some('E') {
                        self.pos += 2;
                        break;
                    }
                    self.pos += 1;
                }
            }
            // Letters Java's `escape` leaves undefined.
            'g' | 'i' | 'j' | 'l' | 'm' | 'o' | 'q' | 'y' | 'C' | 'F' | 'I' | 'J' | 'K' | 'L'
            | 'M' | 'O' | 'T' | 'U' | 'Y' => {
                return Err(format!(
                    "illegal/unsupported escape sequence '\\{c}' {}",
                    self.at()
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Java's inline flags (`Pattern.addFlag`): `i m s d u c x U`.
fn is_flag(c: char) -> bool {
    matches!(c, 'i' | 'm' | 's' | 'd' | 'u' | 'c' | 'x' | 'U')
}

#[cfg(test)]
mod tests {
    use super::java_syntax_error;
    use proptest::prelude::*;

    proptest! {
        /// Never panics, whatever the pattern (the parser's fuzz targets
        /// reach it).
        #[test]
        fn any_pattern_is_answered(pattern in "[\\\\()\\[\\]{}?*+|^$.,<>=!:&a-z0-9PQEkxu-]{0,40}") {
            let _ = java_syntax_error(&pattern);
        }
    }

    #[test]
    fn what_java_compiles_is_accepted() {
        for pattern in [
            "",
            "^[a-z0-9_]{3,16}$",
            "a|",
            "(?:a|b)*?c++d?+",
            "(?<year>\\d{4})-\\k<year>",
            "(?=a)(?!b)(?<=c)(?<!d)(?>e)",
            "(?i)abc(?-i:DEF)(?c)",
            "{1}a*{2}",
            "\\p{Lu}\\P{IsLatin}\\pL",
            "[a-z&&[^aeiou]]",
            "[\\w.-]+@[\\w-]+",
            "\\Q(*)\\E",
            "\\Q(unterminated",
            "(a)\\1\\2",
            "x{2}y{2,}z{2,5}",
            "\\x41\\x{1F600}\\u0041\\0101\\cA",
            "\\.\\-\\/\\@",
            "[]a]",
            "(?x) ( # a comment (",
        ] {
            assert_eq!(java_syntax_error(pattern), None, "{pattern:?}");
        }
    }

    #[test]
    fn what_java_refuses_is_named() {
        for (pattern, reason) in [
            ("(", "unclosed group"),
            ("a)", "unmatched closing ')'"),
            ("[a-", "unclosed character class"),
            ("[]", "unclosed character class"),
            ("[z-a]", "illegal character range"),
            ("*a", "dangling meta character '*'"),
            ("a**", "dangling meta character '*'"),
            ("a|+", "dangling meta character '+'"),
            ("{x}", "illegal repetition"),
            ("a{x}", "illegal repetition"),
            ("a{2", "unclosed counted closure"),
            ("a{3,1}", "illegal repetition range"),
            ("\\", "unexpected end of pattern"),
            ("\\y", "illegal/unsupported escape sequence"),
            ("\\0", "illegal octal escape sequence"),
            ("\\xZ1", "illegal hexadecimal escape sequence"),
            ("\\u12", "illegal Unicode escape sequence"),
            ("\\p{Lu", "unclosed character family"),
            ("(?z)", "unknown inline modifier 'z'"),
            ("(?<1a>x)", "does not start with a Latin letter"),
            ("(?<a>x)(?<a>y)", "already defined"),
            ("\\k<nope>", "does not exist"),
        ] {
            let error =
                java_syntax_error(pattern).unwrap_or_else(|| panic!("{pattern:?} accepted"));
            assert!(error.contains(reason), "{pattern:?}: {error}");
        }
    }
}
