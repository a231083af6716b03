//! A small regular-expression matcher for JSON Schema's `pattern` and
//! `patternProperties`.
//!
//! JSON Schema patterns are ECMA-262 regular expressions and match
//! anywhere in the string (a search, not a full match). This supports the
//! part of that syntax schemas use: literals and escapes, `.`, classes
//! (`[a-z]`, `[^…]`, `\d \w \s` and their negations), groups (plain,
//! `(?:…)`, `(?<name>…)`), alternation, the quantifiers `* + ? {n} {n,}
//! {n,m}` (greedy or lazy, which is the same for a yes/no answer), `^`,
//! `$`, `\b` and `\B`. Backreferences, lookaround and `\p{…}` are refused:
//! [`Regex::new`] returns `None` and callers decide what an unknown match
//! means.
//!
//! Matching is a Pike VM: time linear in the text times the program, no
//! backtracking, so no pattern can make it run away.

/// Largest `{n,m}` bound accepted.
const MAX_REPEAT: u32 = 1000;
/// Largest compiled program accepted.
const MAX_PROGRAM: usize = 20_000;
/// Deepest group nesting accepted.
const MAX_NESTING: usize = 64;

/// A compiled pattern.
#[derive(Debug)]
pub(crate) struct Regex {
    program: Vec<Inst>,
}

#[derive(Debug, Clone)]
enum Inst {
    Char(char),
    Any,
    Class(Class),
    Start,
    End,
    /// `\b` (true) or `\B` (false).
    WordBoundary(bool),
    Split(usize, usize),
    Jump(usize),
    Match,
}

#[derive(Debug, Clone)]
struct Class {
    negated: bool,
    items: Vec<Item>,
}

#[derive(Debug, Clone)]
enum Item {
    Range(char, char),
    /// `\d` (false) or `\D` (true).
    Digit(bool),
    Word(bool),
    Space(bool),
}

#[derive(Debug, Clone)]
enum Ast {
    Empty,
    Char(char),
    Any,
    Class(Class),
    Start,
    End,
    WordBoundary(bool),
    Concat(Vec<Ast>),
    Alt(Vec<Ast>),
    Repeat(Box<Ast>, u32, Option<u32>),
}

impl Regex {
    /// Compiles `pattern`, or `None` when it uses syntax this matcher does
    /// not support or is not a valid pattern.
    pub(crate) fn new(pattern: &str) -> Option<Regex> {
        let mut parser = Parser {
            chars: pattern.chars().collect(),
            pos: 0,
        };
        let ast = parser.alternation(0)?;
        if parser.pos != parser.chars.len() {
            return None;
        }
        let mut program = Vec::new();
        compile(&ast, &mut program)?;
        program.push(Inst::Match);
        (program.len() <= MAX_PROGRAM).then_some(Regex { program })
    }

    /// Whether the pattern matches somewhere in `text`.
    /// Whether the pattern matches every string: it has no anchors or
    /// word boundaries and matches the empty string, so a search finds an
    /// empty match at the start of any text.
    pub(crate) fn matches_every_string(&self) -> bool {
        let anchored = self
            .program
            .iter()
            .any(|i| matches!(i, Inst::Start | Inst::End | Inst::WordBoundary(_)));
        !anchored && self.is_match("")
    }

    pub(crate) fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let mut current = Threads::new(self.program.len());
        let mut next = Threads::new(self.program.len());
        let mut stack = Vec::new();
        for pos in 0..=chars.len() {
            // A new thread at every position: the search is unanchored.
            if self.add(&mut current, &mut stack, 0, pos, &chars) {
                return true;
            }
            let Some(&c) = chars.get(pos) else { break };
            for i in 0..current.dense.len() {
                let pc = current.dense[i];
                let advances = match &self.program[pc] {
                    Inst::Char(x) => *x == c,
                    Inst::Any => !is_line_terminator(c),
                    Inst::Class(class) => class.matches(c),
                    _ => false,
                };
                if advances && self.add(&mut next, &mut stack, pc + 1, pos + 1, &chars) {
                    return true;
                }
            }
            std::mem::swap(&mut current, &mut next);
            next.clear();
        }
        false
    }

    /// Adds the thread at `pc` and everything reachable from it without
    /// consuming input; true when that reaches `Match`.
    fn add(
        &self,
        threads: &mut Threads,
        stack: &mut Vec<usize>,
        pc: usize,
        pos: usize,
        chars: &[char],
    ) -> bool {
        stack.clear();
        stack.push(pc);
        while let Some(pc) = stack.pop() {
            if pc >= self.program.len() || !threads.insert(pc) {
                continue;
            }
            match &self.program[pc] {
                Inst::Match => return true,
                Inst::Jump(to) => stack.push(*to),
                Inst::Split(a, b) => {
                    stack.push(*b);
                    stack.push(*a);
                }
                Inst::Start => {
                    if pos == 0 {
                        stack.push(pc + 1);
                    }
                }
                Inst::End => {
                    if pos == chars.len() {
                        stack.push(pc + 1);
                    }
                }
                Inst::WordBoundary(want) => {
                    let before = pos > 0 && is_word(chars[pos - 1]);
                    let after = chars.get(pos).is_some_and(|c| is_word(*c));
                    if (before != after) == *want {
                        stack.push(pc + 1);
                    }
                }
                Inst::Char(_) | Inst::Any | Inst::Class(_) => {}
            }
        }
        false
    }
}

/// A set of program counters with O(1) insert and clear-by-iteration.
struct Threads {
    dense: Vec<usize>,
    present: Vec<bool>,
}

impl Threads {
    fn new(size: usize) -> Threads {
        Threads {
            dense: Vec::with_capacity(size),
            present: vec![false; size],
        }
    }

    fn insert(&mut self, pc: usize) -> bool {
        if self.present[pc] {
            return false;
        }
        self.present[pc] = true;
        self.dense.push(pc);
        true
    }

    fn clear(&mut self) {
        for pc in self.dense.drain(..) {
            self.present[pc] = false;
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

fn is_line_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

impl Class {
    fn matches(&self, c: char) -> bool {
        let hit = self.items.iter().any(|item| match *item {
            Item::Range(lo, hi) => lo <= c && c <= hi,
            Item::Digit(negated) => c.is_ascii_digit() != negated,
            Item::Word(negated) => is_word(c) != negated,
            Item::Space(negated) => is_space(c) != negated,
        });
        hit != self.negated
    }

    fn single(item: Item) -> Class {
        Class {
            negated: false,
            items: vec![item],
        }
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn alternation(&mut self, depth: usize) -> Option<Ast> {
        if depth > MAX_NESTING {
            return None;
        }
        let mut branches = vec![self.concatenation(depth)?];
        while self.eat('|') {
            branches.push(self.concatenation(depth)?);
        }
        Some(if branches.len() == 1 {
            branches.pop().unwrap_or(Ast::Empty)
        } else {
            Ast::Alt(branches)
        })
    }

    fn concatenation(&mut self, depth: usize) -> Option<Ast> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom(depth)?;
            let quantifiable = !matches!(atom, Ast::Start | Ast::End | Ast::WordBoundary(_));
            match self.quantifier()? {
                Some((min, max)) if quantifiable => {
                    items.push(Ast::Repeat(Box::new(atom), min, max));
                }
                Some(_) => return None,
                None => items.push(atom),
            }
        }
        Some(match items.len() {
            0 => Ast::Empty,
            1 => items.pop().unwrap_or(Ast::Empty),
            _ => Ast::Concat(items),
        })
    }

    /// `Some(None)`: no quantifier here; `None`: a malformed one.
    fn quantifier(&mut self) -> Option<Option<(u32, Option<u32>)>> {
        let bounds = match self.peek() {
            Some('*') => {
                self.pos += 1;
                (0, None)
            }
            Some('+') => {
                self.pos += 1;
                (1, None)
            }
            Some('?') => {
                self.pos += 1;
                (0, Some(1))
            }
            Some('{') => match self.braces() {
                Some(bounds) => bounds,
                // Not a quantifier: `{` is then a literal (Annex B).
                None => return Some(None),
            },
            _ => return Some(None),
        };
        self.eat('?'); // lazy: the same for a yes/no answer
        if bounds.0 > MAX_REPEAT || bounds.1.is_some_and(|m| m > MAX_REPEAT || m < bounds.0) {
            return None;
        }
        Some(Some(bounds))
    }

    /// Parses `{n}`, `{n,}` or `{n,m}` at the cursor, consuming it only
    /// when it is one.
    fn braces(&mut self) -> Option<(u32, Option<u32>)> {
        let start = self.pos;
        let result = (|| {
            if !self.eat('{') {
                return None;
            }
            let min = self.number()?;
            let max = if self.eat(',') {
                if self.peek() == Some('}') {
                    None
                } else {
                    Some(self.number()?)
                }
            } else {
                Some(min)
            };
            self.eat('}').then_some((min, max))
        })();
        if result.is_none() {
            self.pos = start;
        }
        result
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.pos;
        let mut value: u32 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            value = value.saturating_mul(10).saturating_add(d);
            self.pos += 1;
        }
        (self.pos > start).then_some(value)
    }

    fn atom(&mut self, depth: usize) -> Option<Ast> {
        let c = self.next()?;
        Some(match c {
            '^' => Ast::Start,
            '$' => Ast::End,
            '.' => Ast::Any,
            '(' => {
                if self.eat('?') {
                    match self.next()? {
                        ':' => {}
                        '<' if !matches!(self.peek(), Some('=') | Some('!')) => {
                            // A named group: skip the name.
                            loop {
                                let n = self.next()?;
                                if n == '>' {
                                    break;
                                }
                                if !(n.is_alphanumeric() || n == '_' || n == '$') {
                                    return None;
                                }
                            }
                        }
                        _ => return None, // lookaround and the like
                    }
                }
                let inner = self.alternation(depth + 1)?;
                if !self.eat(')') {
                    return None;
                }
                inner
            }
            '[' => Ast::Class(self.class()?),
            '\\' => self.escape()?,
            '*' | '+' | '?' | ')' => return None,
            '{' => {
                self.pos -= 1;
                if self.braces().is_some() {
                    return None; // a quantifier with nothing to repeat
                }
                self.pos += 1;
                Ast::Char('{')
            }
            other => Ast::Char(other),
        })
    }

    fn escape(&mut self) -> Option<Ast> {
        let c = self.next()?;
        Some(match c {
            'd' => Ast::Class(Class::single(Item::Digit(false))),
            'D' => Ast::Class(Class::single(Item::Digit(true))),
            'w' => Ast::Class(Class::single(Item::Word(false))),
            'W' => Ast::Class(Class::single(Item::Word(true))),
            's' => Ast::Class(Class::single(Item::Space(false))),
            'S' => Ast::Class(Class::single(Item::Space(true))),
            'b' => Ast::WordBoundary(true),
            'B' => Ast::WordBoundary(false),
            _ => Ast::Char(self.character_escape(c)?),
        })
    }

    /// The character an escape `\c…` stands for, outside or inside a class.
    fn character_escape(&mut self, c: char) -> Option<char> {
        Some(match c {
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            'f' => '\u{0C}',
            'v' => '\u{0B}',
            '0' if !self.peek().is_some_and(|d| d.is_ascii_digit()) => '\0',
            'x' => {
                let hi = self.next()?.to_digit(16)?;
                let lo = self.next()?.to_digit(16)?;
                char::from_u32(hi * 16 + lo)?
            }
            'u' => {
                if self.eat('{') {
                    let mut value: u32 = 0;
                    let mut digits = 0;
                    while let Some(d) = self.peek().and_then(|c| c.to_digit(16)) {
                        value = value.checked_mul(16)?.checked_add(d)?;
                        digits += 1;
                        self.pos += 1;
                    }
                    if digits == 0 || !self.eat('}') {
                        return None;
                    }
                    char::from_u32(value)?
                } else {
                    let mut value = 0;
                    for _ in 0..4 {
                        value = value * 16 + self.next()?.to_digit(16)?;
                    }
                    // A lone surrogate cannot occur in a Rust string.
                    char::from_u32(value)?
                }
            }
            'c' => {
                let letter = self.next()?;
                if !letter.is_ascii_alphabetic() {
                    return None;
                }
                char::from_u32(letter as u32 % 32)?
            }
            // Backreferences, named backreferences, Unicode properties.
            '1'..='9' | 'k' | 'p' | 'P' => return None,
            other if other.is_alphanumeric() => return None,
            other => other,
        })
    }

    fn class(&mut self) -> Option<Class> {
        let negated = self.eat('^');
        let mut items = Vec::new();
        loop {
            let c = self.next()?;
            if c == ']' {
                break;
            }
            let lo = self.class_atom(c)?;
            if self.peek() == Some('-')
                && self.peek_at(1).is_some_and(|n| n != ']')
                && let Item::Range(lo, _) = lo
            {
                self.pos += 1;
                let next = self.next()?;
                match self.class_atom(next)? {
                    Item::Range(hi, _) if lo <= hi => items.push(Item::Range(lo, hi)),
                    Item::Range(..) => return None,
                    // `[a-\d]`: Annex B reads the `-` literally.
                    other => {
                        items.push(Item::Range(lo, lo));
                        items.push(Item::Range('-', '-'));
                        items.push(other);
                    }
                }
                continue;
            }
            items.push(lo);
        }
        Some(Class { negated, items })
    }

    fn class_atom(&mut self, c: char) -> Option<Item> {
        if c != '\\' {
            return Some(Item::Range(c, c));
        }
        let e = self.next()?;
        Some(match e {
            'd' => Item::Digit(false),
            'D' => Item::Digit(true),
            'w' => Item::Word(false),
            'W' => Item::Word(true),
            's' => Item::Space(false),
            'S' => Item::Space(true),
            'b' => Item::Range('\u{08}', '\u{08}'),
            '-' => Item::Range('-', '-'),
            other => {
                let ch = self.character_escape(other)?;
                Item::Range(ch, ch)
            }
        })
    }
}

/// Appends the program for `ast`; `None` when it grows past the limit.
fn compile(ast: &Ast, program: &mut Vec<Inst>) -> Option<()> {
    if program.len() > MAX_PROGRAM {
        return None;
    }
    match ast {
        Ast::Empty => {}
        Ast::Char(c) => program.push(Inst::Char(*c)),
        Ast::Any => program.push(Inst::Any),
        Ast::Class(class) => program.push(Inst::Class(class.clone())),
        Ast::Start => program.push(Inst::Start),
        Ast::End => program.push(Inst::End),
        Ast::WordBoundary(b) => program.push(Inst::WordBoundary(*b)),
        Ast::Concat(items) => {
            for item in items {
                compile(item, program)?;
            }
        }
        Ast::Alt(branches) => {
            // split L1, next; L1: branch; jump end; next: split …
            let mut jumps = Vec::new();
            for (i, branch) in branches.iter().enumerate() {
                if i + 1 < branches.len() {
                    let split = program.len();
                    program.push(Inst::Split(split + 1, 0));
                    compile(branch, program)?;
                    jumps.push(program.len());
                    program.push(Inst::Jump(0));
                    let next = program.len();
                    program[split] = Inst::Split(split + 1, next);
                } else {
                    compile(branch, program)?;
                }
            }
            let end = program.len();
            for j in jumps {
                program[j] = Inst::Jump(end);
            }
        }
        Ast::Repeat(inner, min, max) => {
            for _ in 0..*min {
                compile(inner, program)?;
                if program.len() > MAX_PROGRAM {
                    return None;
                }
            }
            match max {
                None => {
                    let split = program.len();
                    program.push(Inst::Split(split + 1, 0));
                    compile(inner, program)?;
                    program.push(Inst::Jump(split));
                    let end = program.len();
                    program[split] = Inst::Split(split + 1, end);
                }
                Some(max) => {
                    let mut splits = Vec::new();
                    for _ in *min..*max {
                        splits.push(program.len());
                        program.push(Inst::Split(0, 0));
                        compile(inner, program)?;
                        if program.len() > MAX_PROGRAM {
                            return None;
                        }
                    }
                    let end = program.len();
                    for s in splits {
                        program[s] = Inst::Split(s + 1, end);
                    }
                }
            }
        }
    }
    (program.len() <= MAX_PROGRAM).then_some(())
}

#[cfg(test)]
mod tests {
    use super::Regex;

    fn matches(pattern: &str, text: &str) -> bool {
        Regex::new(pattern)
            .unwrap_or_else(|| panic!("pattern {pattern:?} should compile"))
            .is_match(text)
    }

    #[test]
    fn searches_anywhere_unless_anchored() {
        assert!(matches("a", "bab"));
        assert!(matches("^a*", "b"));
        assert!(matches("a*", ""));
        assert!(!matches("^a+$", "aab"));
        assert!(matches("^a+$", "aaa"));
        assert!(matches("b$", "ab"));
        assert!(!matches("^b", "ab"));
    }

    #[test]
    fn classes_escapes_and_groups() {
        assert!(matches(r"^\d{3}-\d{4}$", "555-1234"));
        assert!(!matches(r"^\d{3}-\d{4}$", "55-1234"));
        assert!(matches("^[a-z_][a-z0-9_]*$", "snake_case9"));
        assert!(!matches("^[a-z_][a-z0-9_]*$", "Camel"));
        assert!(matches("^[^0-9]+$", "abc"));
        assert!(matches("^(?:foo|bar)+$", "foobarfoo"));
        assert!(matches("^(?<word>x)y", "xy"));
        assert!(matches(r"^x-\w+$", "x-custom_1"));
        assert!(matches(r"\bcat\b", "a cat!"));
        assert!(!matches(r"\bcat\b", "concatenate"));
        assert!(matches(r"^\u0041\x42$", "AB"));
        assert!(matches("^a{2,3}$", "aaa"));
        assert!(!matches("^a{2,3}$", "aaaa"));
        assert!(matches("^a{2,}$", "aaaa"));
        assert!(matches("^x{$", "x{"));
        assert!(matches("^.$", "é"));
        assert!(!matches("^.$", "\n"));
    }

    #[test]
    fn refuses_what_it_cannot_match_and_does_not_run_away() {
        assert!(Regex::new(r"(a)\1").is_none());
        assert!(Regex::new("(?=a)").is_none());
        assert!(Regex::new(r"\p{L}").is_none());
        assert!(Regex::new("(").is_none());
        assert!(Regex::new("*").is_none());
        assert!(Regex::new("a{5000}").is_none());
        assert!(Regex::new("[z-a]").is_none());
        let evil = Regex::new("^(a+)+$").expect("compiles");
        let text = format!("{}b", "a".repeat(5000));
        assert!(!evil.is_match(&text));
        let nested = Regex::new("(a*)*b").expect("compiles");
        assert!(!nested.is_match(&"a".repeat(2000)));
    }
}
