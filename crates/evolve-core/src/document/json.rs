//! `json` and `jsonb` values: parsed as PostgreSQL's JSON parser reads them
//! into jsonb, written back canonically with null object members stripped.
//!
//! What the server does, and this module with it:
//!
//! - the lexer of `src/common/jsonapi.c`: white space is space, tab, CR and
//!   LF; numbers are `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` and a
//!   number or keyword must not run into a letter, digit, `_` or non-ASCII
//!   byte (`01`, `1f2`, `truex` are errors); inside strings raw control
//!   characters are errors and the escapes are `\" \\ \/ \b \f \n \r \t
//!   \uXXXX`, a high surrogate must be followed by a `\u` low surrogate, a
//!   low surrogate must not stand alone;
//! - into jsonb: `\u0000` is refused ("unsupported Unicode escape sequence"),
//!   numbers go through `numeric_in` (see `number`), object keys are sorted
//!   by length then bytes and of duplicate keys the last one wins;
//! - `jsonb_strip_nulls`: members whose value is `null` are dropped from
//!   every object at every depth (after duplicates are resolved, so
//!   `{"a":1,"a":null}` becomes `{}`); array elements are never dropped.
//!
//! Parsing fills a flat pre-order list of nodes and writing walks it with an
//! explicit stack, so nesting depth is limited by memory only, never by the
//! call stack.

use super::number::write_numeric;
use super::{Emitted, ValueProblem, escape::write_json_string, jsonb_key_cmp};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tag {
    Null,
    True,
    False,
    /// `buf[start..start + len]` is the number as `numeric_out` prints it.
    Number,
    /// `buf[start..start + len]` is the unescaped UTF-8 string.
    String,
    /// Children follow; `end` is the index after the subtree.
    Array,
    /// Key (a `String` node) and value subtree pairs follow; `end` is the
    /// index after the subtree.
    Object,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    tag: Tag,
    start: usize,
    len: usize,
    end: usize,
}

struct Tree {
    nodes: Vec<Node>,
    buf: Vec<u8>,
}

impl Tree {
    fn next_sibling(&self, i: usize) -> usize {
        match self.nodes[i].tag {
            Tag::Array | Tag::Object => self.nodes[i].end,
            _ => i + 1,
        }
    }

    fn bytes(&self, i: usize) -> &[u8] {
        let n = &self.nodes[i];
        &self.buf[n.start..n.start + n.len]
    }
}

fn error(offset: usize, reason: &'static str) -> ValueProblem {
    ValueProblem::Json { offset, reason }
}

/// Writes the json/jsonb text `text` canonically; [`Emitted::Null`] (with
/// `null` written) when the whole value is `null`.
pub(super) fn encode_json(text: &[u8], out: &mut Vec<u8>) -> Result<Emitted, ValueProblem> {
    if std::str::from_utf8(text).is_err() {
        return Err(ValueProblem::InvalidUtf8);
    }
    let tree = parse(text)?;
    if tree.nodes[0].tag == Tag::Null {
        out.extend_from_slice(b"null");
        return Ok(Emitted::Null);
    }
    write(&tree, out);
    Ok(Emitted::Value)
}

/// PostgreSQL's `JSON_ALPHANUMERIC_CHAR`.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn parse(text: &[u8]) -> Result<Tree, ValueProblem> {
    #[derive(PartialEq)]
    enum Expect {
        Value,
        /// After `[`.
        ValueOrClose,
        /// After `{`.
        KeyOrClose,
        /// After `,` in an object.
        Key,
        /// After a complete value.
        After,
    }
    let mut tree = Tree {
        nodes: Vec::new(),
        buf: Vec::with_capacity(text.len()),
    };
    let mut open: Vec<usize> = Vec::new();
    let mut expect = Expect::Value;
    let mut p = 0;
    loop {
        while p < text.len() && is_json_space(text[p]) {
            p += 1;
        }
        let b = text.get(p).copied();
        match expect {
            Expect::After => {
                let Some(&top) = open.last() else {
                    if b.is_none() {
                        return Ok(tree);
                    }
                    return Err(error(p, "expected end of input"));
                };
                match (tree.nodes[top].tag, b) {
                    (Tag::Array, Some(b',')) => expect = Expect::Value,
                    (Tag::Object, Some(b',')) => expect = Expect::Key,
                    (Tag::Array, Some(b']')) | (Tag::Object, Some(b'}')) => {
                        open.pop();
                        tree.nodes[top].end = tree.nodes.len();
                    }
                    (_, None) => return Err(error(p, "unexpected end of input")),
                    (Tag::Array, _) => return Err(error(p, "expected \",\" or \"]\"")),
                    _ => return Err(error(p, "expected \",\" or \"}\"")),
                }
                p += 1;
            }
            Expect::KeyOrClose | Expect::Key => {
                if expect == Expect::KeyOrClose && b == Some(b'}') {
                    let top = open.pop().unwrap_or_default();
                    tree.nodes[top].end = tree.nodes.len();
                    p += 1;
                    expect = Expect::After;
                    continue;
                }
                if b != Some(b'"') {
                    return Err(error(p, "expected string"));
                }
                p = parse_string(text, p, &mut tree)?;
                while p < text.len() && is_json_space(text[p]) {
                    p += 1;
                }
                if text.get(p) != Some(&b':') {
                    return Err(error(p, "expected \":\""));
                }
                p += 1;
                expect = Expect::Value;
            }
            Expect::Value | Expect::ValueOrClose => {
                if expect == Expect::ValueOrClose && b == Some(b']') {
                    let top = open.pop().unwrap_or_default();
                    tree.nodes[top].end = tree.nodes.len();
                    p += 1;
                    expect = Expect::After;
                    continue;
                }
                match b {
                    Some(b'{') => {
                        open.push(tree.nodes.len());
                        push(&mut tree, Tag::Object, 0, 0);
                        p += 1;
                        expect = Expect::KeyOrClose;
                        continue;
                    }
                    Some(b'[') => {
                        open.push(tree.nodes.len());
                        push(&mut tree, Tag::Array, 0, 0);
                        p += 1;
                        expect = Expect::ValueOrClose;
                        continue;
                    }
                    Some(b'"') => p = parse_string(text, p, &mut tree)?,
                    Some(b'-' | b'0'..=b'9') => p = parse_number(text, p, &mut tree)?,
                    Some(b) if is_word_byte(b) => {
                        let len = text[p..].iter().take_while(|&&b| is_word_byte(b)).count();
                        let tag = match &text[p..p + len] {
                            b"true" => Tag::True,
                            b"false" => Tag::False,
                            b"null" => Tag::Null,
                            _ => return Err(error(p, "invalid token")),
                        };
                        push(&mut tree, tag, 0, 0);
                        p += len;
                    }
                    None => return Err(error(p, "unexpected end of input")),
                    Some(_) => return Err(error(p, "unexpected character")),
                }
                expect = Expect::After;
            }
        }
    }
}

fn push(tree: &mut Tree, tag: Tag, start: usize, len: usize) {
    let index = tree.nodes.len();
    tree.nodes.push(Node {
        tag,
        start,
        len,
        end: index + 1,
    });
}

/// Parses the number at `start` into a `Number` node; returns the position
/// after it.
fn parse_number(text: &[u8], start: usize, tree: &mut Tree) -> Result<usize, ValueProblem> {
    let digits = |p: usize| {
        text[p.min(text.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut p = start;
    if text[p] == b'-' {
        p += 1;
    }
    match text.get(p) {
        Some(b'0') => p += 1,
        Some(b'1'..=b'9') => p += digits(p),
        _ => return Err(error(start, "invalid number")),
    }
    if text.get(p) == Some(&b'.') {
        let n = digits(p + 1);
        if n == 0 {
            return Err(error(start, "invalid number"));
        }
        p += 1 + n;
    }
    if let Some(b'e' | b'E') = text.get(p) {
        p += 1;
        if let Some(b'+' | b'-') = text.get(p) {
            p += 1;
        }
        let n = digits(p);
        if n == 0 {
            return Err(error(start, "invalid number"));
        }
        p += n;
    }
    if text.get(p).is_some_and(|&b| is_word_byte(b)) {
        return Err(error(start, "invalid number"));
    }
    let at = tree.buf.len();
    write_numeric(&text[start..p], &mut tree.buf)?;
    push(tree, Tag::Number, at, tree.buf.len() - at);
    Ok(p)
}

fn hex4(text: &[u8], p: usize) -> Option<u32> {
    let digits = text.get(p..p + 4)?;
    let mut value = 0;
    for &d in digits {
        value = value * 16 + char::from(d).to_digit(16)?;
    }
    Some(value)
}

/// Parses the string whose opening quote is at `start` into a `String`
/// node; returns the position after the closing quote.
fn parse_string(text: &[u8], start: usize, tree: &mut Tree) -> Result<usize, ValueProblem> {
    let at = tree.buf.len();
    let mut p = start + 1;
    let mut run = p;
    loop {
        let Some(&b) = text.get(p) else {
            return Err(error(p, "unterminated string"));
        };
        match b {
            b'"' => {
                tree.buf.extend_from_slice(&text[run..p]);
                p += 1;
                break;
            }
            0..=0x1f => return Err(error(p, "control character in string")),
            b'\\' => {
                tree.buf.extend_from_slice(&text[run..p]);
                let Some(&e) = text.get(p + 1) else {
                    return Err(error(p, "unterminated string"));
                };
                p += 2;
                let simple = match e {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        let code = hex4(text, p).ok_or(error(
                            p - 2,
                            "\"\\u\" must be followed by four hexadecimal digits",
                        ))?;
                        p += 4;
                        let c = if (0xD800..0xDC00).contains(&code) {
                            let low = if text.get(p..p + 2) == Some(b"\\u") {
                                hex4(text, p + 2)
                            } else {
                                None
                            };
                            match low {
                                Some(low @ 0xDC00..0xE000) => {
                                    p += 6;
                                    0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                                }
                                _ => {
                                    return Err(error(
                                        p,
                                        "Unicode low surrogate must follow a high surrogate",
                                    ));
                                }
                            }
                        } else if (0xDC00..0xE000).contains(&code) {
                            return Err(error(
                                p - 6,
                                "Unicode low surrogate must follow a high surrogate",
                            ));
                        } else if code == 0 {
                            return Err(error(
                                p - 6,
                                "unsupported Unicode escape sequence (\\u0000 cannot be converted to text)",
                            ));
                        } else {
                            code
                        };
                        // Surrogates are excluded above, so this is a char.
                        let ch = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
                        let mut utf8 = [0u8; 4];
                        tree.buf
                            .extend_from_slice(ch.encode_utf8(&mut utf8).as_bytes());
                        run = p;
                        continue;
                    }
                    _ => return Err(error(p - 2, "invalid escape sequence")),
                };
                tree.buf.push(simple);
                run = p;
            }
            _ => p += 1,
        }
    }
    push(tree, Tag::String, at, tree.buf.len() - at);
    Ok(p)
}

/// Writes the tree canonically: objects with members sorted, deduplicated
/// (last wins) and null members removed.
fn write(tree: &Tree, out: &mut Vec<u8>) {
    // Members still to write of every open object live in `members`, one
    // range per object, innermost last.
    let mut members: Vec<usize> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    open(tree, 0, out, &mut stack, &mut members);
    while let Some(frame) = stack.last_mut() {
        match frame {
            Frame::Array { next, end, first } => {
                if *next == *end {
                    out.push(b']');
                    stack.pop();
                    continue;
                }
                let child = *next;
                if !*first {
                    out.push(b',');
                }
                *first = false;
                *next = tree.next_sibling(child);
                open(tree, child, out, &mut stack, &mut members);
            }
            Frame::Object { pos, hi, lo } => {
                if *pos == *hi {
                    let lo = *lo;
                    out.push(b'}');
                    stack.pop();
                    members.truncate(lo);
                    continue;
                }
                let key = members[*pos];
                if *pos != *lo {
                    out.push(b',');
                }
                *pos += 1;
                write_json_string(tree.bytes(key), out);
                out.push(b':');
                open(tree, key + 1, out, &mut stack, &mut members);
            }
        }
    }
}

enum Frame {
    /// The next child to write, the end of the array's subtree, and whether
    /// no child was written yet.
    Array {
        next: usize,
        end: usize,
        first: bool,
    },
    /// The object's members (key indices) are `members[lo..hi]`; `pos` is
    /// the next to write.
    Object { pos: usize, hi: usize, lo: usize },
}

/// Writes node `i`, or for a container its opening bracket and a frame.
fn open(
    tree: &Tree,
    i: usize,
    out: &mut Vec<u8>,
    stack: &mut Vec<Frame>,
    members: &mut Vec<usize>,
) {
    let node = tree.nodes[i];
    match node.tag {
        Tag::Null => out.extend_from_slice(b"null"),
        Tag::True => out.extend_from_slice(b"true"),
        Tag::False => out.extend_from_slice(b"false"),
        Tag::Number => out.extend_from_slice(tree.bytes(i)),
        Tag::String => write_json_string(tree.bytes(i), out),
        Tag::Array => {
            out.push(b'[');
            stack.push(Frame::Array {
                next: i + 1,
                end: node.end,
                first: true,
            });
        }
        Tag::Object => {
            out.push(b'{');
            let lo = members.len();
            let mut k = i + 1;
            while k < node.end {
                members.push(k);
                k = tree.next_sibling(k + 1);
            }
            // Stable: equal keys stay in input order, so the last of each
            // run is the one jsonb keeps.
            members[lo..].sort_by(|&a, &b| jsonb_key_cmp(tree.bytes(a), tree.bytes(b)));
            let mut kept = lo;
            for j in lo..members.len() {
                let key = members[j];
                if kept > lo && tree.bytes(members[kept - 1]) == tree.bytes(key) {
                    members[kept - 1] = key;
                } else {
                    members[kept] = key;
                    kept += 1;
                }
            }
            members.truncate(kept);
            // jsonb_strip_nulls, after the duplicates are resolved.
            let mut hi = lo;
            for j in lo..members.len() {
                let key = members[j];
                if tree.nodes[key + 1].tag != Tag::Null {
                    members[hi] = key;
                    hi += 1;
                }
            }
            members.truncate(hi);
            stack.push(Frame::Object { pos: lo, hi, lo });
        }
    }
}
