//! The reader/writer check: does `reader` accept every value `writer`
//! accepts?
//!
//! # Model
//!
//! The rules are Karapace's (`compatibility/jsonschema/checks.py`), whose
//! verdicts the reference cases encode, with Confluent's rules
//! (`json/diff/*SchemaDiff.java`) where Karapace has none or errs, and
//! Confluent's `Difference` names for the kinds.
//!
//! * A schema is split into conjuncts: its own keywords (the *base*), each
//!   of `allOf`/`anyOf`/`oneOf`/`not`, and (2019-09 on) a `$ref` beside
//!   other keywords. Every reader conjunct must accept the writer; a
//!   writer is accepted when one of its conjuncts is.
//! * A base is typed by `type`; without one it is an enum when it has
//!   `enum`/`const`, else — as in Karapace — an *object* schema. So `{}`
//!   and `true` read objects only: `true` cannot read `{"type":
//!   "integer"}` although JSON Schema says it can. The reference verdicts
//!   require this (`TRUE_SCHEMA` against every non-object writer).
//! * At the top level two boolean schemas are always compatible and a
//!   `false` writer is only compatible with a boolean reader (Karapace's
//!   verdicts). Below the top level `false` means what it says: a `false`
//!   writer produces nothing, a `false` reader accepts nothing.
//! * `additionalProperties`, `additionalItems` and `items` treat `true`
//!   and `{}` as absent (their spec default).
//! * `unevaluatedProperties` and `unevaluatedItems` (2019-09 on) are the
//!   content model for what neither the schema's own keywords nor its
//!   in-place subschemas (`allOf`, `anyOf`, `oneOf`, `$ref`,
//!   `dependentSchemas`, `then`, `else`, nested up to a bound) evaluate:
//!   closed, partially open or open exactly as `additionalProperties` and
//!   `items` are. A property an in-place subschema declares is read under
//!   that subschema's schema for it.
//! * `contains` is compared with its bounds: the writer's matching items
//!   must match the reader's, `minContains` may only fall and
//!   `maxContains` only rise (and only over the same `contains`).
//! * `propertyNames` with `type`, `enum`, `const`, `maxLength`,
//!   `minLength` and `pattern` is compared against the names the writer
//!   may produce (its declared names when closed, its own
//!   `propertyNames`, else every string).
//! * Keywords the checker does not read ([`NOT_UNDERSTOOD`]) are compared
//!   by value at every pair of positions: a difference is
//!   `KEYWORD_NOT_UNDERSTOOD`. `$dynamicRef`-style references, whose
//!   targets are not followed, are reported whenever the schemas differ.
//! * Recursion through `$ref` is memoized on (reader, writer) pairs: a pair
//!   met again while it is being checked is assumed compatible (the
//!   greatest fixpoint, as Confluent does). A step and depth budget stops
//!   pathological inputs; exceeding it is reported as `SCHEMA_TOO_COMPLEX`.
//!
//! Paths are JSON pointers into the reader (`#/properties/a/maxLength`);
//! after a `$ref` they continue from its target (`#/$defs/Foo/…`, or
//! `name#/…` inside a referenced schema).

use super::regex::Regex;
use super::{Draft, JsonSchema, display_pointer, escape_token, is_annotation, navigate};
use crate::Incompatibility;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;
use std::sync::LazyLock;

/// Adds an incompatibility to `$out`. The path and message are built in
/// [`make_note`], not in the caller, so that the frames of the recursive
/// functions stay small (deeply nested schemas recurse deeply).
macro_rules! note {
    ($out:expr, $kind:expr, $path:expr, $($message:tt)+) => {
        $out.push(make_note($kind, &|| ($path).to_string(), &|| format!($($message)+)))
    };
}

/// A list of the one incompatibility described as for [`note!`].
macro_rules! noted {
    ($kind:expr, $path:expr, $($message:tt)+) => {{
        let mut one = Vec::new();
        note!(one, $kind, $path, $($message)+);
        one
    }};
}

#[inline(never)]
fn make_note(
    kind: &str,
    path: &dyn Fn() -> String,
    message: &dyn Fn() -> String,
) -> Incompatibility {
    Incompatibility {
        kind: kind.to_string(),
        path: path(),
        message: message(),
    }
}

/// The writer's schema for properties an open content model allows.
static TRUE: Value = Value::Bool(true);
/// `"unevaluatedItems": false` with nothing else evaluating items.
static FALSE: Value = Value::Bool(false);

/// Distinct (reader, writer) pairs examined before giving up.
const MAX_STEPS: usize = 100_000;
/// Nested pair checks before giving up.
const MAX_DEPTH: usize = 128;

/// Keywords the base comparison evaluates; a schema whose other keywords
/// are only combinators and annotations has no base of its own.
const BASE_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "maxProperties",
    "minProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxLength",
    "minLength",
    "pattern",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "multipleOf",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
];

/// Keywords of the vocabularies the checker does not read: a change that
/// touches one (added, removed or changed) is reported as incompatible.
const NOT_UNDERSTOOD: &[&str] = &[
    "if",
    "then",
    "else",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
];

/// Keywords whose target may change without the keyword's own value
/// changing: reported whenever the two schemas differ at all.
const DYNAMIC_REFERENCES: &[&str] = &["$dynamicRef", "$recursiveRef", "$recursiveAnchor"];

/// Keywords that 2019-09 introduced: earlier drafts' validators ignore
/// them, so the checker does not read them there either.
const FROM_2019: &[&str] = &[
    "unevaluatedProperties",
    "unevaluatedItems",
    "minContains",
    "maxContains",
];

/// How many in-place subschemas (`allOf`, `anyOf`, `oneOf`, `$ref`,
/// `dependentSchemas`, `then`, `else`) the `unevaluated*` models look
/// through, and how deep.
const MAX_IN_PLACE: usize = 64;
const MAX_IN_PLACE_DEPTH: usize = 8;

/// The writer's property names when it may produce any.
static ANY_STRING: LazyLock<Value> = LazyLock::new(|| serde_json::json!({"type": "string"}));

pub(super) fn check(reader: &JsonSchema, writer: &JsonSchema) -> Vec<Incompatibility> {
    let identical = reader.docs().len() == writer.docs().len()
        && reader
            .docs()
            .iter()
            .zip(writer.docs())
            .all(|(a, b)| a.name == b.name && a.root == b.root);
    let mut checker = Checker {
        identical,
        memo: FastMap::default(),
        targets: FastMap::default(),
        regexes: HashMap::new(),
        steps: 0,
        depth: 0,
        low: usize::MAX,
        exhausted: false,
    };
    let r = checker.deref(View::root(reader));
    let w = checker.deref(View::root(writer));
    let mut out = match (r.value, w.value) {
        (Value::Bool(_), Value::Bool(_)) => Vec::new(),
        (_, Value::Bool(false)) => noted!(
            "TYPE_CHANGED",
            &*r.ptr,
            "the writer schema is false, which the reader, not being a boolean schema, does not accept"
        ),
        _ => checker.rec(r, w),
    };
    if checker.exhausted {
        note!(
            out,
            "SCHEMA_TOO_COMPLEX",
            &*View::root(reader).ptr,
            "the schemas are too large or too deeply recursive to compare (more than {MAX_STEPS} subschema pairs or {MAX_DEPTH} levels); treated as incompatible"
        );
    }
    let mut seen = HashSet::new();
    out.retain(|i| seen.insert(i.clone()));
    out
}

/// Appends `src` to `dst`, skipping what is already there.
fn merge(dst: &mut Vec<Incompatibility>, src: Vec<Incompatibility>) {
    if src.is_empty() {
        return;
    }
    if dst.len().saturating_mul(src.len()) <= 4096 {
        for i in src {
            if !dst.contains(&i) {
                dst.push(i);
            }
        }
    } else {
        let mut seen: HashSet<Incompatibility> = dst.iter().cloned().collect();
        for i in src {
            if seen.insert(i.clone()) {
                dst.push(i);
            }
        }
    }
}

/// Which conjunct of a schema a view looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Part {
    Whole,
    Base,
    AllOf,
    AnyOf,
    OneOf,
    Not,
    Ref,
}

impl Part {
    fn keyword(self) -> &'static str {
        match self {
            Part::AllOf => "allOf",
            Part::AnyOf => "anyOf",
            Part::OneOf => "oneOf",
            Part::Not => "not",
            Part::Ref => "$ref",
            Part::Whole | Part::Base => "",
        }
    }

    fn is_combined(self) -> bool {
        matches!(self, Part::AllOf | Part::AnyOf | Part::OneOf)
    }
}

/// A subschema of one side, with its location.
#[derive(Clone)]
struct View<'a> {
    schema: &'a JsonSchema,
    doc: usize,
    value: &'a Value,
    ptr: Rc<Pointer<'a>>,
    part: Part,
}

/// A JSON pointer, built as a chain of segments and rendered only when an
/// incompatibility is reported.
enum Pointer<'a> {
    /// `#`, `name#` or the target of a `$ref` (`#/$defs/a`).
    Root(String),
    Child(Rc<Pointer<'a>>, Segment<'a>, Option<Segment<'a>>),
}

#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

impl fmt::Display for Pointer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pointer::Root(root) => f.write_str(root),
            Pointer::Child(parent, first, second) => {
                parent.fmt(f)?;
                for segment in std::iter::once(first).chain(second) {
                    match segment {
                        Segment::Key(key) => write!(f, "/{}", escape_token(key))?,
                        Segment::Index(i) => write!(f, "/{i}")?,
                    }
                }
                Ok(())
            }
        }
    }
}

impl<'a> View<'a> {
    fn root(schema: &'a JsonSchema) -> View<'a> {
        let docs = schema.docs();
        View {
            schema,
            doc: 0,
            value: &docs[0].root,
            ptr: Rc::new(Pointer::Root(display_pointer(docs, 0, ""))),
            part: Part::Whole,
        }
    }

    fn with_pointer(&self, ptr: Pointer<'a>, value: &'a Value) -> View<'a> {
        View {
            schema: self.schema,
            doc: self.doc,
            value,
            ptr: Rc::new(ptr),
            part: Part::Whole,
        }
    }

    /// The subschema at `keyword`.
    fn child(&self, keyword: &'a str, value: &'a Value) -> View<'a> {
        let ptr = Pointer::Child(Rc::clone(&self.ptr), Segment::Key(keyword), None);
        self.with_pointer(ptr, value)
    }

    /// The subschema at `keyword/name`.
    fn child2(&self, keyword: &'a str, name: &'a str, value: &'a Value) -> View<'a> {
        let ptr = Pointer::Child(
            Rc::clone(&self.ptr),
            Segment::Key(keyword),
            Some(Segment::Key(name)),
        );
        self.with_pointer(ptr, value)
    }

    /// The subschema at `keyword/i`.
    fn item(&self, keyword: &'a str, i: usize, value: &'a Value) -> View<'a> {
        let ptr = Pointer::Child(
            Rc::clone(&self.ptr),
            Segment::Key(keyword),
            Some(Segment::Index(i)),
        );
        self.with_pointer(ptr, value)
    }

    /// The writer's implicit schema for values an open model allows.
    fn anything(&self) -> View<'a> {
        View {
            schema: self.schema,
            doc: self.doc,
            value: &TRUE,
            ptr: Rc::clone(&self.ptr),
            part: Part::Whole,
        }
    }

    fn with_part(&self, part: Part) -> View<'a> {
        View {
            part,
            ..self.clone()
        }
    }

    fn get(&self, keyword: &str) -> Option<&'a Value> {
        self.value.get(keyword)
    }

    fn at(&self, keyword: &str) -> String {
        format!("{}/{}", self.ptr, escape_token(keyword))
    }

    fn draft(&self) -> Draft {
        self.schema.draft(self.doc)
    }

    fn is_false(&self) -> bool {
        matches!(self.value, Value::Bool(false))
    }

    /// The `i`th subschema of this view's combinator.
    fn branch(&self, i: usize) -> Option<View<'a>> {
        let keyword = self.part.keyword();
        let item = self.get(keyword)?.as_array()?.get(i)?;
        Some(self.item(keyword, i, item))
    }

    fn branch_count(&self) -> usize {
        self.get(self.part.keyword())
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    }
}

/// What an open, closed or partially open model says about a value it
/// has no specific schema for.
enum Extra<'a> {
    Open,
    Closed,
    Schema(View<'a>),
}

/// A schema's type as the comparison sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    Boolean,
    Integer,
    Number,
    String,
    Array,
    Object,
    /// No `type`, no `enum`: an object schema in Karapace's model.
    Untyped,
    Enum,
}

impl Kind {
    fn from_name(name: &str) -> Kind {
        match name {
            "null" => Kind::Null,
            "boolean" => Kind::Boolean,
            "integer" => Kind::Integer,
            "number" => Kind::Number,
            "string" => Kind::String,
            "array" => Kind::Array,
            "object" => Kind::Object,
            _ => Kind::Untyped,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Boolean => "booleans",
            Kind::Integer => "integers",
            Kind::Number => "numbers",
            Kind::String => "strings",
            Kind::Array => "arrays",
            Kind::Object => "objects",
            Kind::Untyped => "objects (a schema without a type)",
            Kind::Enum => "enumerated values",
        }
    }

    fn is_numeric(self) -> bool {
        matches!(self, Kind::Integer | Kind::Number)
    }

    fn is_object_like(self) -> bool {
        matches!(self, Kind::Object | Kind::Untyped)
    }

    /// Whether a reader of this kind is compared with a writer of `other`
    /// rather than rejected outright.
    fn related(self, other: Kind) -> bool {
        self == other
            || (self.is_numeric() && other.is_numeric())
            || (self.is_object_like() && other.is_object_like())
    }
}

/// An upper or lower bound on numbers.
#[derive(Clone, Copy)]
struct Bound {
    value: f64,
    exclusive: bool,
    keyword: &'static str,
}

enum Memo {
    /// Being checked, at this depth.
    InProgress(usize),
    Done(Vec<Incompatibility>),
}

type Key = (usize, Part, usize, Part);

/// FxHash: the memo keys are addresses, which need no DoS-proof hashing.
#[derive(Default)]
struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

struct Checker<'a> {
    /// The two sides are the same documents.
    identical: bool,
    memo: FastMap<Key, Memo>,
    /// `$ref` node → its target, resolved once.
    targets: FastMap<usize, Option<View<'a>>>,
    regexes: HashMap<String, Option<Regex>>,
    steps: usize,
    depth: usize,
    /// The shallowest in-progress pair the current computation relied on.
    low: usize,
    exhausted: bool,
}

fn address(value: &Value) -> usize {
    std::ptr::from_ref(value) as usize
}

impl<'a> Checker<'a> {
    /// Follows `$ref`s that replace their schema (all of them before
    /// 2019-09; a `$ref` without sibling assertions after).
    fn deref(&mut self, mut view: View<'a>) -> View<'a> {
        for _ in 0..64 {
            let Some(map) = view.value.as_object() else {
                return view;
            };
            if !map.contains_key("$ref") {
                return view;
            }
            let pure = map.keys().all(|k| k == "$ref" || is_annotation(k));
            if view.draft().ref_has_siblings() && !pure {
                return view;
            }
            match self.target(&view) {
                Some(target) => view = target,
                None => return view,
            }
        }
        view
    }

    /// Where the `$ref` of `view` points.
    fn target(&mut self, view: &View<'a>) -> Option<View<'a>> {
        let key = address(view.value);
        if let Some(cached) = self.targets.get(&key) {
            return cached.clone();
        }
        let schema = view.schema;
        let found = view
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| schema.resolve(view.doc, reference))
            .and_then(|(doc, pointer)| {
                let value = navigate(&schema.docs()[doc].root, &pointer)?;
                Some(View {
                    schema,
                    doc,
                    value,
                    ptr: Rc::new(Pointer::Root(display_pointer(schema.docs(), doc, &pointer))),
                    part: Part::Whole,
                })
            });
        self.targets.insert(key, found.clone());
        found
    }

    fn regex(&mut self, pattern: &str) -> Option<&Regex> {
        if !self.regexes.contains_key(pattern) {
            self.regexes
                .insert(pattern.to_string(), Regex::new(pattern));
        }
        self.regexes.get(pattern).and_then(Option::as_ref)
    }

    fn matches(&mut self, pattern: &str, text: &str) -> Option<bool> {
        if !self.regexes.contains_key(pattern) {
            self.regexes
                .insert(pattern.to_string(), Regex::new(pattern));
        }
        self.regexes
            .get(pattern)
            .and_then(Option::as_ref)
            .map(|r| r.is_match(text))
    }

    /// The memoized, budgeted check of one (reader, writer) pair.
    fn rec(&mut self, r: View<'a>, w: View<'a>) -> Vec<Incompatibility> {
        if self.exhausted {
            return Vec::new();
        }
        let r = if r.part == Part::Whole {
            self.deref(r)
        } else {
            r
        };
        let w = if w.part == Part::Whole {
            self.deref(w)
        } else {
            w
        };
        let key = (address(r.value), r.part, address(w.value), w.part);
        match self.memo.get(&key) {
            Some(Memo::Done(result)) => return result.clone(),
            Some(Memo::InProgress(depth)) => {
                self.low = self.low.min(*depth);
                return Vec::new();
            }
            None => {}
        }
        self.steps += 1;
        if self.steps > MAX_STEPS || self.depth >= MAX_DEPTH {
            self.exhausted = true;
            return Vec::new();
        }
        self.depth += 1;
        let depth = self.depth;
        self.memo.insert(key, Memo::InProgress(depth));
        let outer_low = std::mem::replace(&mut self.low, usize::MAX);
        let result = self.compute(r, w);
        let low = self.low;
        // A result that leaned on the assumption about an enclosing pair
        // still being checked is only provisional: do not keep it.
        if low >= depth && !self.exhausted {
            self.memo.insert(key, Memo::Done(result.clone()));
        } else {
            self.memo.remove(&key);
        }
        self.low = outer_low.min(low);
        self.depth -= 1;
        result
    }

    fn compute(&mut self, r: View<'a>, w: View<'a>) -> Vec<Incompatibility> {
        if w.part == Part::Whole && w.is_false() {
            return Vec::new();
        }
        if r.part == Part::Whole && r.is_false() {
            return reader_is_false(&r);
        }
        let mut out = self.not_understood(&r, &w);
        let rest = self.compute_parts(r, w);
        merge(&mut out, rest);
        out
    }

    /// Keywords the checker does not read that differ between `r` and `w`.
    fn not_understood(&self, r: &View<'a>, w: &View<'a>) -> Vec<Incompatibility> {
        let mut out = Vec::new();
        let (rm, wm) = (r.value.as_object(), w.value.as_object());
        if rm.is_none() && wm.is_none() {
            return out;
        }
        let get = |m: Option<&'a Map<String, Value>>, k: &str| m.and_then(|m| m.get(k));
        for &keyword in NOT_UNDERSTOOD {
            let (a, b) = (get(rm, keyword), get(wm, keyword));
            if a.is_none() && b.is_none() {
                continue;
            }
            if DYNAMIC_REFERENCES.contains(&keyword) && !self.identical {
                note!(
                    out,
                    "KEYWORD_NOT_UNDERSTOOD",
                    r.at(keyword),
                    "the checker does not understand keyword {keyword:?} (it does not follow dynamic references), and the schemas differ; treated as incompatible"
                );
            } else if !option_eq(a, b) {
                note!(
                    out,
                    "KEYWORD_NOT_UNDERSTOOD",
                    r.at(keyword),
                    "the checker does not understand keyword {keyword:?}, which differs between the reader and the writer here; treated as incompatible"
                );
            }
        }
        for &keyword in FROM_2019 {
            let (a, b) = (get(rm, keyword), get(wm, keyword));
            let ignored = (a.is_some() && r.draft() < Draft::D2019)
                || (b.is_some() && w.draft() < Draft::D2019);
            if ignored && !option_eq(a, b) {
                let draft = if r.draft() < Draft::D2019 {
                    r.draft()
                } else {
                    w.draft()
                };
                note!(
                    out,
                    "KEYWORD_NOT_UNDERSTOOD",
                    r.at(keyword),
                    "keyword {keyword:?} is not part of {}, which the schema uses, so validators ignore it; treated as incompatible (name 2019-09 or 2020-12 in \"$schema\" for it to apply)",
                    draft.name()
                );
            }
        }
        out
    }

    fn compute_parts(&mut self, r: View<'a>, w: View<'a>) -> Vec<Incompatibility> {
        let mut reader_parts = parts(&r);
        if reader_parts.len() > 1 {
            return self.every_reader_part(reader_parts, &w);
        }
        let mut writer_parts = parts(&w);
        match (reader_parts.pop(), writer_parts.len()) {
            (Some(rp), 1) => match writer_parts.pop() {
                Some(wp) => self.compare_parts(rp, wp),
                None => Vec::new(),
            },
            (Some(rp), _) => self.some_writer_part(rp, writer_parts),
            (None, _) => Vec::new(),
        }
    }

    /// Every conjunct of the reader must accept the writer.
    fn every_reader_part(
        &mut self,
        reader_parts: Vec<View<'a>>,
        w: &View<'a>,
    ) -> Vec<Incompatibility> {
        let mut out = Vec::new();
        for part in reader_parts {
            let result = self.rec(part, w.clone());
            merge(&mut out, result);
        }
        out
    }

    /// The writer's values satisfy all its conjuncts, so one of them being
    /// accepted is enough. Tries the most alike first and, if none is
    /// accepted, reports against that one.
    fn some_writer_part(
        &mut self,
        rp: View<'a>,
        mut writer_parts: Vec<View<'a>>,
    ) -> Vec<Incompatibility> {
        writer_parts.sort_by_key(|p| {
            if p.part == rp.part {
                0
            } else if p.part == Part::Base {
                1
            } else {
                2
            }
        });
        let mut first = None;
        for wp in writer_parts {
            let result = self.rec(rp.clone(), wp);
            if result.is_empty() {
                return result;
            }
            first.get_or_insert(result);
        }
        first.unwrap_or_default()
    }

    fn ref_target(&mut self, view: &View<'a>) -> Option<View<'a>> {
        let target = self.target(view)?;
        Some(self.deref(target))
    }

    fn compare_parts(&mut self, r: View<'a>, w: View<'a>) -> Vec<Incompatibility> {
        if r.part == Part::Ref {
            return match self.ref_target(&r) {
                Some(target) => self.rec(target, w),
                None => Vec::new(),
            };
        }
        if w.part == Part::Ref {
            return match self.ref_target(&w) {
                Some(target) => self.rec(r, target),
                None => Vec::new(),
            };
        }
        if r.part.is_combined() && w.part.is_combined() {
            return self.combined_both(r, w);
        }
        if r.part.is_combined() && r.branch_count() == 1 {
            return match r.branch(0) {
                Some(only) => self.rec(only, w),
                None => Vec::new(),
            };
        }
        if w.part.is_combined() && w.branch_count() == 1 {
            return match w.branch(0) {
                Some(only) => self.rec(r, only),
                None => Vec::new(),
            };
        }
        match (r.part, w.part) {
            (Part::AnyOf | Part::OneOf, _) => self.some_reader_branch(r, &w),
            (Part::AllOf, _) => self.every_reader_branch(&r, &w),
            (_, Part::AnyOf | Part::OneOf) => self.every_writer_branch(&r, &w),
            (_, Part::AllOf) => self.some_writer_branch(&r, &w),
            (Part::Not, Part::Not) => self.not_not(&r, &w),
            (Part::Not, _) => {
                if self.excludes_nothing_of(&r, &w) {
                    Vec::new()
                } else {
                    noted!(
                        "TYPE_CHANGED",
                        &*r.ptr,
                        "the reader excludes values with \"not\" that the writer may produce"
                    )
                }
            }
            (_, Part::Not) => noted!(
                "TYPE_CHANGED",
                &*r.ptr,
                "the writer is only a \"not\" schema, which produces values of any type; the reader does not accept them all"
            ),
            _ => self.compare_base(&r, None, &w, None),
        }
    }

    /// A reader `anyOf`/`oneOf` accepts a writer one of its subschemas
    /// accepts.
    fn some_reader_branch(&mut self, r: View<'a>, w: &View<'a>) -> Vec<Incompatibility> {
        for i in 0..r.branch_count() {
            if let Some(branch) = r.branch(i)
                && self.rec(branch, w.clone()).is_empty()
            {
                return Vec::new();
            }
        }
        noted!(
            "TYPE_CHANGED",
            r.at(r.part.keyword()),
            "none of the reader's {} subschemas accepts what the writer produces",
            r.part.keyword()
        )
    }

    /// A reader `allOf` needs every subschema to accept the writer.
    fn every_reader_branch(&mut self, r: &View<'a>, w: &View<'a>) -> Vec<Incompatibility> {
        let mut out = Vec::new();
        for i in 0..r.branch_count() {
            if let Some(branch) = r.branch(i) {
                let result = self.rec(branch, w.clone());
                merge(&mut out, result);
            }
        }
        out
    }

    /// A writer `anyOf`/`oneOf` may produce what any subschema accepts.
    fn every_writer_branch(&mut self, r: &View<'a>, w: &View<'a>) -> Vec<Incompatibility> {
        let mut out = Vec::new();
        for j in 0..w.branch_count() {
            if let Some(branch) = w.branch(j) {
                let result = self.rec(r.clone(), branch);
                merge(&mut out, result);
            }
        }
        out
    }

    /// A writer `allOf` produces values all its subschemas accept: one of
    /// them being accepted is enough.
    fn some_writer_branch(&mut self, r: &View<'a>, w: &View<'a>) -> Vec<Incompatibility> {
        let mut first = None;
        for j in 0..w.branch_count() {
            if let Some(branch) = w.branch(j) {
                let result = self.rec(r.clone(), branch);
                if result.is_empty() {
                    return result;
                }
                first.get_or_insert(result);
            }
        }
        first.unwrap_or_default()
    }

    fn not_not(&mut self, r: &View<'a>, w: &View<'a>) -> Vec<Incompatibility> {
        let (Some(rn), Some(wn)) = (r.get("not"), w.get("not")) else {
            return Vec::new();
        };
        // ¬WN ⊆ ¬RN exactly when RN ⊆ WN: the roles swap.
        let swapped = self.rec(w.child("not", wn), r.child("not", rn));
        if swapped.is_empty() {
            Vec::new()
        } else {
            noted!(
                "NOT_TYPE_EXTENDED",
                r.at("not"),
                "the reader's not-schema excludes values the writer's did not exclude"
            )
        }
    }

    /// Whether `r`'s `not` cannot match anything `w` produces: its
    /// declared types and `w`'s do not meet.
    fn excludes_nothing_of(&mut self, r: &View<'a>, w: &View<'a>) -> bool {
        let Some(not) = r.get("not") else {
            return true;
        };
        let not = self.deref(r.child("not", not));
        if not.is_false() {
            return true;
        }
        let (Some(excluded), Some(produced)) = (declared_types(not.value), declared_types(w.value))
        else {
            return false;
        };
        excluded.iter().all(|a| {
            produced.iter().all(|b| {
                let (a, b) = (Kind::from_name(a), Kind::from_name(b));
                a != b && !(a.is_numeric() && b.is_numeric())
            })
        })
    }

    /// Both sides are `allOf`/`anyOf`/`oneOf`.
    fn combined_both(&mut self, r: View<'a>, w: View<'a>) -> Vec<Incompatibility> {
        let (n, m) = (r.branch_count(), w.branch_count());
        if n == 1 || m == 1 {
            let r = if n == 1 { r.branch(0) } else { Some(r) };
            let w = if m == 1 { w.branch(0) } else { Some(w) };
            return match (r, w) {
                (Some(r), Some(w)) => self.rec(r, w),
                _ => Vec::new(),
            };
        }
        let (rk, wk) = (r.part, w.part);
        let keyword = rk.keyword();
        if rk != wk && rk != Part::AnyOf {
            return noted!(
                "COMBINED_TYPE_CHANGED",
                r.at(keyword),
                "the reader combines its subschemas with {keyword} where the writer used {}",
                wk.keyword()
            );
        }
        let branches = |v: &View<'a>, count: usize| -> Vec<View<'a>> {
            (0..count).filter_map(|i| v.branch(i)).collect()
        };
        let (rb, wb) = (branches(&r, n), branches(&w, m));
        match (rk, wk) {
            (Part::AllOf, _) => {
                // Every reader subschema must hold for the writer's values;
                // one writer subschema implying it is enough.
                let mut missing = Vec::new();
                for (i, ri) in rb.iter().enumerate() {
                    if !wb
                        .iter()
                        .any(|wj| self.rec(ri.clone(), wj.clone()).is_empty())
                    {
                        missing.push(i.to_string());
                    }
                }
                if missing.is_empty() {
                    return Vec::new();
                }
                let kind = if n > m {
                    "PRODUCT_TYPE_EXTENDED"
                } else {
                    "COMBINED_TYPE_SUBSCHEMAS_CHANGED"
                };
                noted!(
                    kind,
                    r.at(keyword),
                    "the reader's allOf subschemas {} are implied by none of the writer's",
                    missing.join(", ")
                )
            }
            (_, Part::AllOf) => {
                for ri in &rb {
                    for wj in &wb {
                        if self.rec(ri.clone(), wj.clone()).is_empty() {
                            return Vec::new();
                        }
                    }
                }
                noted!(
                    "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
                    r.at(keyword),
                    "none of the reader's {keyword} subschemas accepts any of the writer's allOf subschemas"
                )
            }
            _ => {
                // Each writer alternative must be accepted by some reader
                // alternative.
                let mut missing = Vec::new();
                for (j, wj) in wb.iter().enumerate() {
                    if !rb
                        .iter()
                        .any(|ri| self.rec(ri.clone(), wj.clone()).is_empty())
                    {
                        missing.push(j.to_string());
                    }
                }
                if missing.is_empty() {
                    return Vec::new();
                }
                let kind = if n < m {
                    "SUM_TYPE_NARROWED"
                } else {
                    "COMBINED_TYPE_SUBSCHEMAS_CHANGED"
                };
                noted!(
                    kind,
                    r.at(keyword),
                    "the writer's {} subschemas {} are accepted by none of the reader's {keyword} subschemas",
                    wk.keyword(),
                    missing.join(", ")
                )
            }
        }
    }

    /// Compares two bases, `rt`/`wt` selecting one type of a `type` list.
    fn compare_base(
        &mut self,
        r: &View<'a>,
        rt: Option<&'a str>,
        w: &View<'a>,
        wt: Option<&'a str>,
    ) -> Vec<Incompatibility> {
        if wt.is_none()
            && let Some(types) = type_list(w.value)
        {
            // Every type the writer may produce must be read.
            let mut out = Vec::new();
            for t in types {
                let result = self.compare_base(r, rt, w, Some(t));
                merge(&mut out, result);
            }
            return out;
        }
        if rt.is_none()
            && let Some(types) = type_list(r.value)
        {
            let wk = kind(w.value, wt);
            let mut related = None;
            for t in types {
                let result = self.compare_base(r, Some(t), w, wt);
                if result.is_empty() {
                    return result;
                }
                if related.is_none() && Kind::from_name(t).related(wk) {
                    related = Some(result);
                }
            }
            return related.unwrap_or_else(|| {
                noted!(
                    "TYPE_CHANGED",
                    &*r.ptr,
                    "none of the reader's types accepts {} from the writer",
                    wk.describe()
                )
            });
        }
        let (mut kr, kw) = (kind(r.value, rt), kind(w.value, wt));
        if kr == Kind::Untyped && r.part == Part::Base && has_other_conjuncts(r.value) {
            // Keywords beside `$ref` or a combinator, without a `type`: the
            // other conjuncts say what the type is, so these keywords apply
            // to whatever the writer produces.
            match kw {
                Kind::Untyped => {}
                Kind::Enum => return self.base_reads_enum(r, w),
                _ => kr = kw,
            }
        }
        self.compare_kinds(r, kr, w, kw)
    }

    /// An untyped reader conjunct reading an enum: each value must pass
    /// the keywords for its own type.
    fn base_reads_enum(&mut self, r: &View<'_>, w: &View<'_>) -> Vec<Incompatibility> {
        let values = enum_values(w.value).unwrap_or_default();
        let bad: Vec<&Value> = values
            .into_iter()
            .filter(|v| !self.value_valid(r, value_kind(v), v))
            .collect();
        if bad.is_empty() {
            return Vec::new();
        }
        noted!(
            "TYPE_CHANGED",
            &*r.ptr,
            "the writer's enum has values the reader rejects: {}",
            list_values(&bad)
        )
    }

    fn compare_kinds(
        &mut self,
        r: &View<'a>,
        kr: Kind,
        w: &View<'a>,
        kw: Kind,
    ) -> Vec<Incompatibility> {
        if kr == Kind::Enum || kw == Kind::Enum {
            return self.compare_enums(r, kr, w, kw);
        }
        let mut out = Vec::new();
        match (kr, kw) {
            (Kind::Integer | Kind::Number, Kind::Integer | Kind::Number) => {
                self.numeric(r, w, kw == Kind::Integer, &mut out);
                if kr == Kind::Integer && kw == Kind::Number {
                    note!(
                        out,
                        "TYPE_NARROWED",
                        &*r.ptr,
                        "the reader accepts only integers but the writer produces any number"
                    );
                }
            }
            (Kind::Object | Kind::Untyped, Kind::Object | Kind::Untyped) => {
                self.object(r, w, &mut out);
                if kr == Kind::Untyped && kw == Kind::Untyped {
                    // Neither says which type it holds: the other types'
                    // keywords apply too.
                    self.string(r, w, &mut out);
                    self.numeric(r, w, false, &mut out);
                    self.array(r, w, &mut out);
                }
            }
            (Kind::String, Kind::String) => self.string(r, w, &mut out),
            (Kind::Array, Kind::Array) => self.array(r, w, &mut out),
            (Kind::Null, Kind::Null) | (Kind::Boolean, Kind::Boolean) => {}
            _ => return type_changed(r, kr, kw),
        }
        if enum_values(r.value).is_some() {
            reader_enum(r, w, kw, &mut out);
        }
        out
    }

    /// One side, at least, is an enum (or `const`) without a type.
    fn compare_enums(
        &mut self,
        r: &View<'_>,
        kr: Kind,
        w: &View<'_>,
        kw: Kind,
    ) -> Vec<Incompatibility> {
        let mut out = Vec::new();
        if kr == Kind::Enum && (kw == Kind::Enum || enum_values(w.value).is_some()) {
            self.enum_subset(r, w, &mut out);
            return out;
        }
        if kr == Kind::Enum {
            // The writer's whole type must be among the values.
            let all: &[Value] = match kw {
                Kind::Boolean => &[Value::Bool(true), Value::Bool(false)],
                Kind::Null => &[Value::Null],
                _ => return type_changed(r, kr, kw),
            };
            let allowed = enum_values(r.value).unwrap_or_default();
            if !all.iter().all(|v| allowed.iter().any(|a| json_eq(a, v))) {
                return type_changed(r, kr, kw);
            }
            return out;
        }
        // A typed reader reads an enum whose values it accepts.
        let values = enum_values(w.value).unwrap_or_default();
        let bad: Vec<&Value> = values
            .into_iter()
            .filter(|v| !self.value_valid(r, kr, v))
            .collect();
        if !bad.is_empty() {
            note!(
                out,
                "TYPE_CHANGED",
                &*r.ptr,
                "the reader accepts {} but the writer's enum has values it rejects: {}",
                kr.describe(),
                list_values(&bad)
            );
        }
        out
    }

    fn enum_subset(&mut self, r: &View<'_>, w: &View<'_>, out: &mut Vec<Incompatibility>) {
        let allowed = enum_values(r.value).unwrap_or_default();
        let produced = enum_values(w.value).unwrap_or_default();
        let missing: Vec<&Value> = produced
            .into_iter()
            .filter(|v| !allowed.iter().any(|a| json_eq(a, v)))
            .collect();
        if !missing.is_empty() {
            note!(
                out,
                "ENUM_ARRAY_NARROWED",
                r.at(enum_keyword(r.value)),
                "the reader no longer accepts the writer's values {}",
                list_values(&missing)
            );
        }
    }

    /// Whether the scalar `value` is valid under reader base `r` of kind
    /// `kr` (false when that cannot be told).
    fn value_valid(&mut self, r: &View<'_>, kr: Kind, value: &Value) -> bool {
        let type_ok = match kr {
            Kind::Null => value.is_null(),
            Kind::Boolean => value.is_boolean(),
            Kind::Integer => is_integer(value),
            Kind::Number => value.is_number(),
            Kind::String => value.is_string(),
            Kind::Array | Kind::Object | Kind::Untyped | Kind::Enum => false,
        };
        if !type_ok {
            return false;
        }
        if let Some(allowed) = enum_values(r.value)
            && !allowed.iter().any(|a| json_eq(a, value))
        {
            return false;
        }
        match value {
            Value::String(s) => {
                let length = s.chars().count() as u64;
                if count(r.value, "maxLength").is_some_and(|max| length > max)
                    || count(r.value, "minLength").is_some_and(|min| length < min)
                {
                    return false;
                }
                match r.get("pattern").and_then(Value::as_str) {
                    Some(pattern) => self.matches(pattern, s).unwrap_or(false),
                    None => true,
                }
            }
            Value::Number(n) => {
                let Some(x) = n.as_f64() else { return false };
                let point = Bound {
                    value: x,
                    exclusive: false,
                    keyword: "",
                };
                let above = upper(r).is_some_and(|u| exceeds_upper(point, u));
                let below = lower(r).is_some_and(|l| exceeds_lower(point, l));
                let multiple = r
                    .get("multipleOf")
                    .and_then(Value::as_f64)
                    .is_none_or(|m| is_multiple(x, m));
                !above && !below && multiple
            }
            _ => true,
        }
    }

    fn numeric(
        &mut self,
        r: &View<'_>,
        w: &View<'_>,
        writer_integer: bool,
        out: &mut Vec<Incompatibility>,
    ) {
        if let Some(ru) = upper(r) {
            let wu = upper(w).map(|b| if writer_integer { integral_upper(b) } else { b });
            match wu {
                None => note!(
                    out,
                    if ru.exclusive {
                        "EXCLUSIVE_MAXIMUM_ADDED"
                    } else {
                        "MAXIMUM_ADDED"
                    },
                    r.at(ru.keyword),
                    "the reader adds the upper bound {} {}; the writer allowed larger numbers",
                    ru.keyword,
                    number(ru.value)
                ),
                Some(wu) if exceeds_upper(wu, ru) => {
                    let kind = if !ru.exclusive {
                        "MAXIMUM_DECREASED"
                    } else if wu.value == ru.value {
                        "EXCLUSIVE_MAXIMUM_ADDED"
                    } else {
                        "EXCLUSIVE_MAXIMUM_DECREASED"
                    };
                    note!(
                        out,
                        kind,
                        r.at(ru.keyword),
                        "the reader lowers the upper bound to {} {}; the writer allowed up to {}{}",
                        ru.keyword,
                        number(ru.value),
                        number(wu.value),
                        if wu.exclusive { " (exclusive)" } else { "" }
                    );
                }
                Some(_) => {}
            }
        }
        if let Some(rl) = lower(r) {
            let wl = lower(w).map(|b| if writer_integer { integral_lower(b) } else { b });
            match wl {
                None => note!(
                    out,
                    if rl.exclusive {
                        "EXCLUSIVE_MINIMUM_ADDED"
                    } else {
                        "MINIMUM_ADDED"
                    },
                    r.at(rl.keyword),
                    "the reader adds the lower bound {} {}; the writer allowed smaller numbers",
                    rl.keyword,
                    number(rl.value)
                ),
                Some(wl) if exceeds_lower(wl, rl) => {
                    let kind = if !rl.exclusive {
                        "MINIMUM_INCREASED"
                    } else if wl.value == rl.value {
                        "EXCLUSIVE_MINIMUM_ADDED"
                    } else {
                        "EXCLUSIVE_MINIMUM_INCREASED"
                    };
                    note!(
                        out,
                        kind,
                        r.at(rl.keyword),
                        "the reader raises the lower bound to {} {}; the writer allowed down to {}{}",
                        rl.keyword,
                        number(rl.value),
                        number(wl.value),
                        if wl.exclusive { " (exclusive)" } else { "" }
                    );
                }
                Some(_) => {}
            }
        }
        if let Some(rm) = r.get("multipleOf").and_then(Value::as_f64) {
            match w.get("multipleOf").and_then(Value::as_f64) {
                Some(wm) if is_multiple(wm, rm) => {}
                Some(wm) => note!(
                    out,
                    if rm > wm {
                        "MULTIPLE_OF_EXPANDED"
                    } else {
                        "MULTIPLE_OF_CHANGED"
                    },
                    r.at("multipleOf"),
                    "the reader requires multiples of {} but the writer's multiples of {} are not all such",
                    number(rm),
                    number(wm)
                ),
                None if writer_integer && is_multiple(1.0, rm) => {}
                None => note!(
                    out,
                    "MULTIPLE_OF_ADDED",
                    r.at("multipleOf"),
                    "the reader adds multipleOf {}; the writer allowed other numbers",
                    number(rm)
                ),
            }
        }
    }

    fn string(&mut self, r: &View<'_>, w: &View<'_>, out: &mut Vec<Incompatibility>) {
        if let Some(rmax) = count(r.value, "maxLength") {
            match count(w.value, "maxLength") {
                None => note!(
                    out,
                    "MAX_LENGTH_ADDED",
                    r.at("maxLength"),
                    "the reader adds maxLength {rmax}; the writer allowed longer strings"
                ),
                Some(wmax) if wmax > rmax => note!(
                    out,
                    "MAX_LENGTH_DECREASED",
                    r.at("maxLength"),
                    "the reader lowers maxLength from {wmax} to {rmax}"
                ),
                Some(_) => {}
            }
        }
        if let Some(rmin) = count(r.value, "minLength").filter(|m| *m > 0) {
            match count(w.value, "minLength").filter(|m| *m > 0) {
                None => note!(
                    out,
                    "MIN_LENGTH_ADDED",
                    r.at("minLength"),
                    "the reader adds minLength {rmin}; the writer allowed shorter strings"
                ),
                Some(wmin) if wmin < rmin => note!(
                    out,
                    "MIN_LENGTH_INCREASED",
                    r.at("minLength"),
                    "the reader raises minLength from {wmin} to {rmin}"
                ),
                Some(_) => {}
            }
        }
        if let Some(rp) = r.get("pattern").and_then(Value::as_str) {
            match w.get("pattern").and_then(Value::as_str) {
                None => note!(
                    out,
                    "PATTERN_ADDED",
                    r.at("pattern"),
                    "the reader adds the pattern {rp:?}; the writer allowed any string"
                ),
                Some(wp) if wp != rp => note!(
                    out,
                    "PATTERN_CHANGED",
                    r.at("pattern"),
                    "the reader changes the pattern from {wp:?} to {rp:?}"
                ),
                Some(_) => {}
            }
        }
    }

    fn array(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        let rm = self.array_model(r);
        let wm = self.array_model(w);
        match (&rm.items, &wm.items) {
            (Items::Any, _) => {}
            (Items::List(ri), Items::List(wi)) => {
                let result = self.rec(ri.clone(), wi.clone());
                merge(out, result);
            }
            (Items::List(ri), Items::Any) => note!(
                out,
                "SCHEMA_ADDED",
                &*ri.ptr,
                "the reader adds an items schema; the writer allowed items of any kind"
            ),
            (Items::List(_), Items::Tuple(_)) => note!(
                out,
                "TYPE_CHANGED",
                &*r.ptr,
                "the reader expects a list (one items schema) but the writer produces tuples (positional items)"
            ),
            (Items::Tuple(_), Items::List(_)) => note!(
                out,
                "TYPE_CHANGED",
                &*r.ptr,
                "the reader expects tuples (positional items) but the writer produces a list (one items schema)"
            ),
            (Items::Tuple(ri), Items::Tuple(_) | Items::Any) => {
                let empty = Vec::new();
                let wi = match &wm.items {
                    Items::Tuple(wi) => wi,
                    _ => &empty,
                };
                self.tuples(r, &rm, ri, wi, &wm.extra, out);
            }
        }
        array_counts(r, w, out);
        self.contains(r, w, out);
    }

    fn tuples(
        &mut self,
        r: &View<'a>,
        rm: &ArrayModel<'a>,
        ri: &[View<'a>],
        wi: &[View<'a>],
        w_extra: &Extra<'a>,
        out: &mut Vec<Incompatibility>,
    ) {
        for (a, b) in ri.iter().zip(wi) {
            let result = self.rec(a.clone(), b.clone());
            merge(out, result);
        }
        let extra_path = r.at(rm.extra_keyword);
        // Positions the writer describes and the reader leaves to its
        // additional items.
        for (i, item) in wi.iter().enumerate().skip(ri.len()) {
            if item.is_false() {
                continue;
            }
            match &rm.extra {
                Extra::Open => {}
                Extra::Closed => note!(
                    out,
                    "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                    extra_path.clone(),
                    "the reader allows at most {} items, but the writer may produce an item at position {i}",
                    ri.len()
                ),
                Extra::Schema(s) => {
                    let result = self.rec(s.clone(), item.clone());
                    if !result.is_empty() {
                        merge(out, result);
                        note!(
                            out,
                            "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                            extra_path.clone(),
                            "the writer's item at position {i} is not accepted by the reader's schema for additional items"
                        );
                    }
                }
            }
        }
        // Positions the reader describes and the writer left open.
        for item in ri.iter().skip(wi.len()) {
            match w_extra {
                Extra::Closed => {}
                Extra::Open => {
                    if !matches!(item.value, Value::Bool(true)) {
                        note!(
                            out,
                            "ITEM_ADDED_TO_OPEN_CONTENT_MODEL",
                            &*item.ptr,
                            "the reader constrains an item position where the writer allowed any value"
                        );
                    }
                }
                Extra::Schema(s) => {
                    if s.is_false() {
                        continue;
                    }
                    let result = self.rec(item.clone(), s.clone());
                    if !result.is_empty() {
                        merge(out, result);
                        note!(
                            out,
                            "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                            &*item.ptr,
                            "the reader's item schema does not accept what the writer's additional items schema allows"
                        );
                    }
                }
            }
        }
        match (&rm.extra, w_extra) {
            (Extra::Open, _)
            | (Extra::Closed, Extra::Closed)
            | (Extra::Schema(_), Extra::Closed) => {}
            (Extra::Closed, _) => note!(
                out,
                "ADDITIONAL_ITEMS_REMOVED",
                extra_path,
                "the reader no longer allows additional items; the writer did"
            ),
            (Extra::Schema(_), Extra::Open) => note!(
                out,
                "ADDITIONAL_ITEMS_NARROWED",
                extra_path,
                "the reader adds a schema for additional items; the writer allowed any"
            ),
            (Extra::Schema(rs), Extra::Schema(ws)) => {
                let result = self.rec(rs.clone(), ws.clone());
                merge(out, result);
            }
        }
    }

    /// The schema `view`'s object model gives a property `name` it does not
    /// declare.
    fn cover(&mut self, view: &View<'a>, name: &str) -> Extra<'a> {
        if let Some(found) = self.pattern_cover(view, name) {
            return found;
        }
        if view.get("additionalProperties").is_some()
            || !has_unevaluated(view, "unevaluatedProperties")
        {
            return extra(view, "additionalProperties");
        }
        // `unevaluatedProperties`: what the in-place subschemas evaluate
        // is theirs, the rest is the keyword's.
        for sub in self.in_place(view) {
            if let Some((key, schema)) = sub
                .get("properties")
                .and_then(Value::as_object)
                .and_then(|p| p.get_key_value(name))
            {
                return Extra::Schema(sub.child2("properties", key, schema));
            }
            if let Some(found) = self.pattern_cover(&sub, name) {
                return found;
            }
            for keyword in ["additionalProperties", "unevaluatedProperties"] {
                if sub.get(keyword).is_some() {
                    return extra(&sub, keyword);
                }
            }
        }
        extra(view, "unevaluatedProperties")
    }

    fn pattern_cover(&mut self, view: &View<'a>, name: &str) -> Option<Extra<'a>> {
        let patterns = view.get("patternProperties").and_then(Value::as_object)?;
        for (pattern, schema) in patterns {
            if self.matches(pattern, name) == Some(true) {
                return Some(Extra::Schema(view.child2(
                    "patternProperties",
                    pattern,
                    schema,
                )));
            }
        }
        None
    }

    /// What `view`'s object model says about the properties it neither
    /// declares nor matches by pattern, and the keyword that says it.
    fn rest_of_object(&mut self, view: &View<'a>) -> (Extra<'a>, &'static str) {
        if view.get("additionalProperties").is_some()
            || !has_unevaluated(view, "unevaluatedProperties")
        {
            return (extra(view, "additionalProperties"), "additionalProperties");
        }
        let evaluated_elsewhere = self.in_place(view).iter().any(|sub| {
            sub.get("additionalProperties").is_some() || sub.get("unevaluatedProperties").is_some()
        });
        if evaluated_elsewhere {
            return (Extra::Open, "unevaluatedProperties");
        }
        (
            extra(view, "unevaluatedProperties"),
            "unevaluatedProperties",
        )
    }

    /// The subschemas applied to the same value as `view` (`allOf`,
    /// `anyOf`, `oneOf`, `$ref`, `dependentSchemas`, `then`, `else`),
    /// nested ones included, within a bound.
    fn in_place(&mut self, view: &View<'a>) -> Vec<View<'a>> {
        let mut out: Vec<View<'a>> = Vec::new();
        let mut stack = vec![(view.clone(), 0)];
        while let Some((v, depth)) = stack.pop() {
            if depth >= MAX_IN_PLACE_DEPTH || out.len() >= MAX_IN_PLACE {
                continue;
            }
            let Some(map) = v.value.as_object() else {
                continue;
            };
            let mut subs = Vec::new();
            for keyword in ["allOf", "anyOf", "oneOf"] {
                for (i, item) in map
                    .get(keyword)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    subs.push(v.item(keyword, i, item));
                }
            }
            for (name, schema) in map
                .get("dependentSchemas")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                subs.push(v.child2("dependentSchemas", name, schema));
            }
            for keyword in ["then", "else"] {
                if let Some(schema) = map.get(keyword) {
                    subs.push(v.child(keyword, schema));
                }
            }
            if map.get("$ref").is_some_and(Value::is_string)
                && let Some(target) = self.ref_target(&v)
            {
                subs.push(target);
            }
            for sub in subs {
                let sub = self.deref(sub);
                if out.iter().any(|o| std::ptr::eq(o.value, sub.value)) {
                    continue;
                }
                out.push(sub.clone());
                stack.push((sub, depth + 1));
            }
        }
        out
    }

    /// [`ArrayModel::of`], with `unevaluatedItems` (2019-09 on) closing or
    /// partially opening the positions nothing else evaluates.
    fn array_model(&mut self, view: &View<'a>) -> ArrayModel<'a> {
        let mut model = ArrayModel::of(view);
        if !has_unevaluated(view, "unevaluatedItems") {
            return model;
        }
        let own = match &model.items {
            Items::List(_) => return model,
            Items::Tuple(_) if view.get(model.extra_keyword).is_some() => return model,
            Items::Tuple(items) => items.clone(),
            Items::Any if view.get("items").is_some() => return model,
            Items::Any => Vec::new(),
        };
        // Positions the in-place subschemas evaluate.
        let mut longest: Vec<View<'a>> = Vec::new();
        for sub in self.in_place(view) {
            if sub.get("unevaluatedItems").is_some() {
                return model;
            }
            let inner = ArrayModel::of(&sub);
            match inner.items {
                Items::List(_) => return model,
                Items::Any if sub.get("items").is_some() => return model,
                Items::Any => {}
                Items::Tuple(items) => {
                    if sub.get(inner.extra_keyword).is_some() {
                        return model;
                    }
                    if items.len() > longest.len() {
                        longest = items;
                    }
                }
            }
        }
        let mut positions = own;
        let start = positions.len();
        positions.extend(longest.into_iter().skip(start));
        let rest = extra(view, "unevaluatedItems");
        model = match (positions.is_empty(), rest) {
            (_, Extra::Open) => model,
            (true, Extra::Closed) => ArrayModel {
                items: Items::List(view.child("unevaluatedItems", &FALSE)),
                extra: Extra::Open,
                extra_keyword: "unevaluatedItems",
            },
            (true, Extra::Schema(schema)) => ArrayModel {
                items: Items::List(schema),
                extra: Extra::Open,
                extra_keyword: "unevaluatedItems",
            },
            (false, rest) => ArrayModel {
                items: Items::Tuple(positions),
                extra: rest,
                extra_keyword: "unevaluatedItems",
            },
        };
        model
    }

    fn object(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        self.object_properties(r, w, out);
        self.property_names(r, w, out);
        self.object_required(r, w, out);
        self.dependencies(r, w, out);
        object_counts(r, w, out);
        self.object_additional(r, w, out);
    }

    /// Properties both declare, and those only one of them declares.
    fn object_properties(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        let rprops = r
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY);
        let wprops = w
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY);
        for (name, ws) in wprops {
            let wv = w.child2("properties", name, ws);
            match rprops.get(name) {
                Some(rs) => {
                    let result = self.rec(r.child2("properties", name, rs), wv);
                    merge(out, result);
                }
                None => self.property_only_in_writer(r, name, wv, out),
            }
        }
        for (name, rs) in rprops {
            if !wprops.contains_key(name) {
                self.property_only_in_reader(w, name, r.child2("properties", name, rs), out);
            }
        }
    }

    /// A property the writer declares and the reader does not: the
    /// reader's content model decides.
    fn property_only_in_writer(
        &mut self,
        r: &View<'a>,
        name: &str,
        wv: View<'a>,
        out: &mut Vec<Incompatibility>,
    ) {
        if wv.is_false() {
            return;
        }
        match self.cover(r, name) {
            Extra::Open => {}
            Extra::Closed => note!(
                out,
                "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                r.child2("properties", name, &TRUE).ptr,
                "the reader's closed content model rejects property {name:?}, which the writer allows"
            ),
            Extra::Schema(s) => {
                let result = self.rec(s, wv);
                if !result.is_empty() {
                    merge(out, result);
                    note!(
                        out,
                        "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                        r.child2("properties", name, &TRUE).ptr,
                        "property {name:?}, which the writer allows, is not accepted by the reader's schema for undeclared properties"
                    );
                }
            }
        }
    }

    /// A property the reader declares and the writer does not: the
    /// writer's content model says what it may have held.
    fn property_only_in_reader(
        &mut self,
        w: &View<'a>,
        name: &str,
        rv: View<'a>,
        out: &mut Vec<Incompatibility>,
    ) {
        match self.cover(w, name) {
            Extra::Closed => {}
            Extra::Open => {
                if !matches!(rv.value, Value::Bool(true)) {
                    note!(
                        out,
                        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                        &*rv.ptr,
                        "the writer's open content model allows property {name:?} with any value; the reader now constrains it"
                    );
                }
            }
            Extra::Schema(s) => {
                if s.is_false() {
                    return;
                }
                let result = self.rec(rv.clone(), s);
                if !result.is_empty() {
                    merge(out, result);
                    note!(
                        out,
                        "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                        &*rv.ptr,
                        "the reader's schema for the new property {name:?} does not accept what the writer's schema for undeclared properties allows"
                    );
                }
            }
        }
    }

    fn object_required(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        let rprops = r
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY);
        let wprops = w
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY);
        let wreq = strings(w.get("required"));
        for (i, name) in strings(r.get("required")).into_iter().enumerate() {
            if wreq.contains(&name) {
                continue;
            }
            let has_default = rprops.get(name).is_some_and(|s| {
                s.get("default").is_some()
                    || self
                        .deref(r.child2("properties", name, s))
                        .get("default")
                        .is_some()
            });
            if has_default {
                continue;
            }
            let reader_only = rprops.contains_key(name) && !wprops.contains_key(name);
            if reader_only && !matches!(self.cover(w, name), Extra::Open) {
                note!(
                    out,
                    "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
                    r.child2("properties", name, &TRUE).ptr.to_string(),
                    "the reader requires the new property {name:?} without a default; the writer never produced it"
                );
            } else {
                note!(
                    out,
                    "REQUIRED_ATTRIBUTE_ADDED",
                    format!("{}/required/{i}", r.ptr),
                    "the reader requires property {name:?} without a default; the writer did not require it"
                );
            }
        }
    }

    /// `additionalProperties` and `patternProperties`.
    fn object_additional(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        let (r_extra, keyword) = self.rest_of_object(r);
        let (w_extra, _) = self.rest_of_object(w);
        let ap_path = r.at(keyword);
        let what = if keyword == "additionalProperties" {
            "additional"
        } else {
            "unevaluated"
        };
        match (&r_extra, &w_extra) {
            (Extra::Open, _)
            | (Extra::Closed, Extra::Closed)
            | (Extra::Schema(_), Extra::Closed) => {}
            (Extra::Closed, _) => note!(
                out,
                "ADDITIONAL_PROPERTIES_REMOVED",
                ap_path,
                "the reader no longer allows {what} properties; the writer did"
            ),
            (Extra::Schema(_), Extra::Open) => note!(
                out,
                "ADDITIONAL_PROPERTIES_NARROWED",
                ap_path,
                "the reader adds a schema for {what} properties; the writer allowed any value"
            ),
            (Extra::Schema(rs), Extra::Schema(ws)) => {
                let result = self.rec(rs.clone(), ws.clone());
                merge(out, result);
            }
        }

        let rpat = r.get("patternProperties").and_then(Value::as_object);
        let wpat = w.get("patternProperties").and_then(Value::as_object);
        for (pattern, ws) in wpat.into_iter().flatten() {
            let wv = w.child2("patternProperties", pattern, ws);
            if wv.is_false() {
                continue;
            }
            if let Some(rs) = rpat.and_then(|p| p.get(pattern)) {
                let result = self.rec(r.child2("patternProperties", pattern, rs), wv);
                merge(out, result);
                continue;
            }
            let path = r.at("patternProperties") + "/" + &escape_token(pattern);
            match &r_extra {
                Extra::Open => {}
                Extra::Closed => note!(
                    out,
                    "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                    path,
                    "the reader's closed content model rejects properties matching {pattern:?}, which the writer allows"
                ),
                Extra::Schema(s) => {
                    let result = self.rec(s.clone(), wv);
                    if !result.is_empty() {
                        merge(out, result);
                        note!(
                            out,
                            "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                            path,
                            "properties matching {pattern:?}, which the writer allows, are not accepted by the reader's schema for additional properties"
                        );
                    }
                }
            }
        }
        for (pattern, rs) in rpat.into_iter().flatten() {
            if wpat.is_some_and(|p| p.contains_key(pattern)) {
                continue;
            }
            let written = match &w_extra {
                Extra::Open => w.anything(),
                Extra::Closed => continue,
                Extra::Schema(s) => s.clone(),
            };
            let rv = r.child2("patternProperties", pattern, rs);
            let result = self.rec(rv.clone(), written);
            if !result.is_empty() {
                merge(out, result);
                note!(
                    out,
                    "ADDITIONAL_PROPERTIES_NARROWED",
                    &*rv.ptr,
                    "the reader constrains properties matching {pattern:?} more than the writer constrained its additional properties"
                );
            }
        }
    }

    fn dependencies(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        let w_arrays = dependency_arrays(w.value);
        for (keyword, name, needed) in dependency_arrays(r.value) {
            let path = format!("{}/{}/{}", r.ptr, keyword, escape_token(name));
            let written: Vec<&str> = w_arrays
                .iter()
                .filter(|(_, n, _)| *n == name)
                .flat_map(|(_, _, deps)| deps.iter().copied())
                .collect();
            if written.is_empty() && !w_arrays.iter().any(|(_, n, _)| *n == name) {
                note!(
                    out,
                    "DEPENDENCY_ARRAY_ADDED",
                    path,
                    "the reader requires {} whenever {name:?} is present; the writer did not",
                    needed.join(", ")
                );
                continue;
            }
            let missing: Vec<&str> = needed
                .iter()
                .copied()
                .filter(|d| !written.contains(d))
                .collect();
            if !missing.is_empty() {
                let kind = if written.iter().all(|d| needed.contains(d)) {
                    "DEPENDENCY_ARRAY_EXTENDED"
                } else {
                    "DEPENDENCY_ARRAY_CHANGED"
                };
                note!(
                    out,
                    kind,
                    path,
                    "the reader also requires {} whenever {name:?} is present",
                    missing.join(", ")
                );
            }
        }
        let w_schemas = dependency_schemas(w.value);
        for (keyword, name, schema) in dependency_schemas(r.value) {
            let rv = r.child2(keyword, name, schema);
            match w_schemas.iter().find(|(_, n, _)| *n == name) {
                Some((wkeyword, _, ws)) => {
                    let result = self.rec(rv, w.child2(wkeyword, name, ws));
                    merge(out, result);
                }
                None => note!(
                    out,
                    "DEPENDENCY_SCHEMA_ADDED",
                    &*rv.ptr,
                    "the reader adds a schema that applies whenever {name:?} is present; the writer had none"
                ),
            }
        }
    }

    /// `propertyNames`: every name the writer may give a property must be
    /// one the reader accepts.
    fn property_names(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        let Some(names) = r.get("propertyNames") else {
            return;
        };
        let rn = self.deref(r.child("propertyNames", names));
        if is_trivial(rn.value) {
            return;
        }
        let path = r.at("propertyNames");
        let readable = rn.value.as_object().is_some_and(|map| {
            map.keys()
                .all(|k| NAME_KEYWORDS.contains(&k.as_str()) || is_annotation(k))
        }) && declared_types(rn.value).is_none_or(|types| types.contains(&"string"));
        if !rn.is_false() && !readable {
            if !w.get("propertyNames").is_some_and(|wn| json_eq(wn, names)) {
                note!(
                    out,
                    "KEYWORD_NOT_UNDERSTOOD",
                    path,
                    "the checker reads \"propertyNames\" only with type, enum, const, maxLength, minLength and pattern, and the reader's differs from the writer's; treated as incompatible"
                );
            }
            return;
        }
        // The names the writer may produce: those it declares when its
        // model is closed, else those its own propertyNames allows.
        let (rest, _) = self.rest_of_object(w);
        let patterns = w
            .get("patternProperties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.values().any(|s| !matches!(s, Value::Bool(false))));
        if matches!(rest, Extra::Closed) && !patterns {
            let declared: Vec<&'a String> = w
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(_, s)| !matches!(s, Value::Bool(false)))
                .map(|(name, _)| name)
                .collect();
            let rejected: Vec<&str> = declared
                .into_iter()
                .filter(|name| {
                    !self.value_valid(&rn, Kind::String, &Value::String((*name).clone()))
                })
                .map(String::as_str)
                .collect();
            if !rejected.is_empty() {
                note!(
                    out,
                    "PROPERTY_NAMES_NARROWED",
                    path,
                    "the reader's propertyNames rejects the writer's properties {}",
                    rejected.join(", ")
                );
            }
            return;
        }
        if let Some(wn) = w.get("propertyNames") {
            if json_eq(wn, names) {
                return;
            }
            let wn = self.deref(w.child("propertyNames", wn));
            if let Some(values) = enum_values(wn.value) {
                let rejected: Vec<&Value> = values
                    .into_iter()
                    .filter(|v| !self.value_valid(&rn, Kind::String, v))
                    .collect();
                if !rejected.is_empty() {
                    note!(
                        out,
                        "PROPERTY_NAMES_NARROWED",
                        path,
                        "the reader's propertyNames rejects names the writer's allows: {}",
                        list_values(&rejected)
                    );
                }
                return;
            }
            if !rn.is_false() && enum_values(rn.value).is_none() {
                let mut found = Vec::new();
                self.string(&rn, &wn, &mut found);
                if found.is_empty() {
                    return;
                }
                merge(out, found);
            }
            note!(
                out,
                "PROPERTY_NAMES_NARROWED",
                path,
                "the reader's propertyNames rejects names the writer's allows"
            );
            return;
        }
        let any = View {
            schema: w.schema,
            doc: w.doc,
            value: &ANY_STRING,
            ptr: Rc::clone(&w.ptr),
            part: Part::Whole,
        };
        let mut found = Vec::new();
        if !rn.is_false() && enum_values(rn.value).is_none() {
            self.string(&rn, &any, &mut found);
            let every = |c: &mut Self| {
                rn.get("pattern")
                    .and_then(Value::as_str)
                    .is_some_and(|p| c.regex(p).is_some_and(Regex::matches_every_string))
            };
            // A pattern that matches every string restricts nothing.
            if found.iter().all(|i| i.kind == "PATTERN_ADDED") && every(self) {
                found.retain(|i| i.kind != "PATTERN_ADDED");
            }
            if found.is_empty() {
                return;
            }
        }
        merge(out, found);
        note!(
            out,
            "PROPERTY_NAMES_NARROWED",
            path,
            "the reader restricts property names, which the writer left free"
        );
    }

    /// `contains` with `minContains`/`maxContains`: arrays the writer
    /// produces must hold as many matching items as the reader requires.
    fn contains(&mut self, r: &View<'a>, w: &View<'a>, out: &mut Vec<Incompatibility>) {
        let Some(rc) = r.get("contains") else {
            return;
        };
        let (rmin, rmax) = contains_bounds(r);
        if rmin == 0 && rmax.is_none() {
            return;
        }
        let rv = r.child("contains", rc);
        let Some(wc) = w.get("contains") else {
            // Every item matching, and enough of them, also does.
            let enough = rmax.is_none()
                && count(w.value, "minItems").unwrap_or(0) >= rmin
                && match ArrayModel::of(w).items {
                    Items::List(wi) => self.rec(rv.clone(), wi).is_empty(),
                    _ => false,
                };
            if !enough {
                note!(
                    out,
                    "CONTAINS_ADDED",
                    r.at("contains"),
                    "the reader requires {} item(s) matching \"contains\"; the writer's arrays need not hold any",
                    rmin
                );
            }
            return;
        };
        let wv = w.child("contains", wc);
        let (wmin, wmax) = contains_bounds(w);
        if !self.rec(rv.clone(), wv.clone()).is_empty() {
            note!(
                out,
                "CONTAINS_CHANGED",
                r.at("contains"),
                "the reader's \"contains\" schema does not accept every item the writer's matches"
            );
            return;
        }
        if wmin < rmin {
            note!(
                out,
                "MIN_CONTAINS_INCREASED",
                r.at("minContains"),
                "the reader requires at least {rmin} matching item(s); the writer {wmin}"
            );
        }
        if let Some(rmax) = rmax {
            // Only the same "contains" bounds the same items.
            let same = json_eq(rc, wc) || self.rec(wv, rv).is_empty();
            match wmax {
                _ if !same => note!(
                    out,
                    "CONTAINS_CHANGED",
                    r.at("maxContains"),
                    "the reader bounds the items matching a \"contains\" schema other than the writer's"
                ),
                None => note!(
                    out,
                    "MAX_CONTAINS_ADDED",
                    r.at("maxContains"),
                    "the reader allows at most {rmax} matching item(s); the writer set no bound"
                ),
                Some(wmax) if wmax > rmax => note!(
                    out,
                    "MAX_CONTAINS_DECREASED",
                    r.at("maxContains"),
                    "the reader lowers maxContains from {wmax} to {rmax}"
                ),
                Some(_) => {}
            }
        }
    }
}

/// `maxProperties` and `minProperties`.
fn object_counts(r: &View<'_>, w: &View<'_>, out: &mut Vec<Incompatibility>) {
    if let Some(rmax) = count(r.value, "maxProperties") {
        match count(w.value, "maxProperties") {
            None => note!(
                out,
                "MAX_PROPERTIES_ADDED",
                r.at("maxProperties"),
                "the reader adds maxProperties {rmax}; the writer allowed more properties"
            ),
            Some(wmax) if wmax > rmax => note!(
                out,
                "MAX_PROPERTIES_DECREASED",
                r.at("maxProperties"),
                "the reader lowers maxProperties from {wmax} to {rmax}"
            ),
            Some(_) => {}
        }
    }
    if let Some(rmin) = count(r.value, "minProperties").filter(|m| *m > 0) {
        match count(w.value, "minProperties").filter(|m| *m > 0) {
            None => note!(
                out,
                "MIN_PROPERTIES_ADDED",
                r.at("minProperties"),
                "the reader adds minProperties {rmin}; the writer allowed fewer properties"
            ),
            Some(wmin) if wmin < rmin => note!(
                out,
                "MIN_PROPERTIES_INCREASED",
                r.at("minProperties"),
                "the reader raises minProperties from {wmin} to {rmin}"
            ),
            Some(_) => {}
        }
    }
}

/// `maxItems`, `minItems` and `uniqueItems`.
fn array_counts(r: &View<'_>, w: &View<'_>, out: &mut Vec<Incompatibility>) {
    if let Some(rmax) = count(r.value, "maxItems") {
        match count(w.value, "maxItems") {
            None => note!(
                out,
                "MAX_ITEMS_ADDED",
                r.at("maxItems"),
                "the reader adds maxItems {rmax}; the writer allowed longer arrays"
            ),
            Some(wmax) if wmax > rmax => note!(
                out,
                "MAX_ITEMS_DECREASED",
                r.at("maxItems"),
                "the reader lowers maxItems from {wmax} to {rmax}"
            ),
            Some(_) => {}
        }
    }
    if let Some(rmin) = count(r.value, "minItems").filter(|m| *m > 0) {
        match count(w.value, "minItems").filter(|m| *m > 0) {
            None => note!(
                out,
                "MIN_ITEMS_ADDED",
                r.at("minItems"),
                "the reader adds minItems {rmin}; the writer allowed shorter arrays"
            ),
            Some(wmin) if wmin < rmin => note!(
                out,
                "MIN_ITEMS_INCREASED",
                r.at("minItems"),
                "the reader raises minItems from {wmin} to {rmin}"
            ),
            Some(_) => {}
        }
    }
    let unique = |v: &View<'_>| v.get("uniqueItems") == Some(&Value::Bool(true));
    if unique(r) && !unique(w) {
        note!(
            out,
            "UNIQUE_ITEMS_ADDED",
            r.at("uniqueItems"),
            "the reader requires unique items; the writer allowed duplicates"
        );
    }
}

/// Whether `view` has `keyword` (`unevaluatedProperties` or
/// `unevaluatedItems`) in a draft that knows it, with something to say.
fn has_unevaluated(view: &View<'_>, keyword: &str) -> bool {
    view.draft() >= Draft::D2019 && view.get(keyword).is_some_and(|v| !is_trivial(v))
}

/// Two optional keyword values are the same (numbers by value).
fn option_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => json_eq(a, b),
        _ => false,
    }
}

/// `minContains` (default 1) and `maxContains` of a schema with
/// `contains`; earlier drafts than 2019-09 have neither.
fn contains_bounds(view: &View<'_>) -> (u64, Option<u64>) {
    if view.draft() < Draft::D2019 {
        return (1, None);
    }
    (
        count(view.value, "minContains").unwrap_or(1),
        count(view.value, "maxContains"),
    )
}

/// Keywords a `propertyNames` schema may hold for the checker to read it.
const NAME_KEYWORDS: &[&str] = &["type", "enum", "const", "maxLength", "minLength", "pattern"];

fn type_changed(r: &View<'_>, kr: Kind, kw: Kind) -> Vec<Incompatibility> {
    noted!(
        "TYPE_CHANGED",
        &*r.ptr,
        "the reader accepts {} but the writer produces {}",
        kr.describe(),
        kw.describe()
    )
}

/// A typed reader with an `enum` (or `const`): the writer's values must be
/// among them.
fn reader_enum(r: &View<'_>, w: &View<'_>, kw: Kind, out: &mut Vec<Incompatibility>) {
    let Some(allowed) = enum_values(r.value) else {
        return;
    };
    let keyword = enum_keyword(r.value);
    match enum_values(w.value) {
        Some(produced) => {
            let missing: Vec<&Value> = produced
                .into_iter()
                .filter(|v| !allowed.iter().any(|a| json_eq(a, v)))
                .collect();
            if !missing.is_empty() {
                note!(
                    out,
                    "ENUM_ARRAY_NARROWED",
                    r.at(keyword),
                    "the reader no longer accepts the writer's values {}",
                    list_values(&missing)
                );
            }
        }
        None => note!(
            out,
            "ENUM_ARRAY_NARROWED",
            r.at(keyword),
            "the reader restricts values to {} where the writer allowed any {}",
            list_values(&allowed),
            kw.describe()
        ),
    }
}

fn reader_is_false(r: &View<'_>) -> Vec<Incompatibility> {
    noted!(
        "TYPE_CHANGED",
        &*r.ptr,
        "the reader's schema here is false and rejects every value, but the writer's accepts some"
    )
}

/// The conjuncts of a whole schema (a part is its own only conjunct).
fn parts<'a>(view: &View<'a>) -> Vec<View<'a>> {
    if view.part != Part::Whole {
        return vec![view.clone()];
    }
    let Some(map) = view.value.as_object() else {
        return vec![view.with_part(Part::Base)];
    };
    let mut parts = Vec::new();
    if map.get("$ref").is_some_and(Value::is_string) {
        parts.push(view.with_part(Part::Ref));
    }
    if map.keys().any(|k| BASE_KEYWORDS.contains(&k.as_str())) {
        parts.push(view.with_part(Part::Base));
    }
    for part in [Part::AllOf, Part::AnyOf, Part::OneOf] {
        if map
            .get(part.keyword())
            .and_then(Value::as_array)
            .is_some_and(|items| !items.is_empty())
        {
            parts.push(view.with_part(part));
        }
    }
    if map
        .get("not")
        .is_some_and(|n| n.is_object() || n.is_boolean())
    {
        parts.push(view.with_part(Part::Not));
    }
    if parts.is_empty() {
        parts.push(view.with_part(Part::Base));
    }
    parts
}

/// Whether a schema has conjuncts besides its own keywords.
fn has_other_conjuncts(value: &Value) -> bool {
    let Some(map) = value.as_object() else {
        return false;
    };
    map.contains_key("$ref")
        || map.contains_key("not")
        || ["allOf", "anyOf", "oneOf"].iter().any(|k| {
            map.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        })
}

/// The kind of a JSON value, as a schema type.
fn value_kind(value: &Value) -> Kind {
    match value {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Boolean,
        Value::Number(_) if is_integer(value) => Kind::Integer,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    }
}

/// A `type` list of two or more names.
fn type_list(value: &Value) -> Option<Vec<&str>> {
    let items = value.get("type")?.as_array()?;
    if items.len() < 2 {
        return None;
    }
    let mut names: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
    names.dedup();
    Some(names)
}

fn declared_types(value: &Value) -> Option<Vec<&str>> {
    match value.get("type")? {
        Value::String(s) => Some(vec![s.as_str()]),
        Value::Array(items) => Some(items.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn kind(value: &Value, selected: Option<&str>) -> Kind {
    let name = selected.or_else(|| match value.get("type") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Array(items)) if items.len() == 1 => items[0].as_str(),
        _ => None,
    });
    match name {
        Some(name) => Kind::from_name(name),
        None if value.get("enum").is_some() || value.get("const").is_some() => Kind::Enum,
        None => Kind::Untyped,
    }
}

fn enum_values(value: &Value) -> Option<Vec<&Value>> {
    if let Some(items) = value.get("enum").and_then(Value::as_array) {
        return Some(items.iter().collect());
    }
    value.get("const").map(|c| vec![c])
}

fn enum_keyword(value: &Value) -> &'static str {
    if value.get("enum").is_some() {
        "enum"
    } else {
        "const"
    }
}

fn list_values(values: &[&Value]) -> String {
    const SHOWN: usize = 5;
    let mut shown: Vec<String> = values
        .iter()
        .take(SHOWN)
        .map(|v| super::describe(v))
        .collect();
    if values.len() > SHOWN {
        shown.push(format!("and {} more", values.len() - SHOWN));
    }
    shown.join(", ")
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|other| json_eq(v, other)))
        }
        _ => a == b,
    }
}

fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn count(value: &Value, keyword: &str) -> Option<u64> {
    super::non_negative_integer(value.get(keyword)?)
}

fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn dependency_arrays(value: &Value) -> Vec<(&'static str, &String, Vec<&str>)> {
    let mut out = Vec::new();
    for keyword in ["dependencies", "dependentRequired"] {
        for (name, deps) in value
            .get(keyword)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if deps.is_array() {
                out.push((keyword, name, strings(Some(deps))));
            }
        }
    }
    out
}

fn dependency_schemas(value: &Value) -> Vec<(&'static str, &String, &Value)> {
    let mut out = Vec::new();
    for keyword in ["dependencies", "dependentSchemas"] {
        for (name, schema) in value
            .get(keyword)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if schema.is_object() || schema.is_boolean() {
                out.push((keyword, name, schema));
            }
        }
    }
    out
}

/// A schema with no assertions (annotations at most).
fn is_trivial(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::Object(map) => map.keys().all(|k| is_annotation(k)),
        _ => false,
    }
}

/// `keyword` (`additionalProperties`, `additionalItems`, 2020-12 `items`)
/// as a content model.
fn extra<'a>(view: &View<'a>, keyword: &'static str) -> Extra<'a> {
    match view.get(keyword) {
        None => Extra::Open,
        Some(Value::Bool(false)) => Extra::Closed,
        Some(value) if is_trivial(value) => Extra::Open,
        Some(value) => Extra::Schema(view.child(keyword, value)),
    }
}

enum Items<'a> {
    /// No item schema: any items.
    Any,
    List(View<'a>),
    Tuple(Vec<View<'a>>),
}

struct ArrayModel<'a> {
    items: Items<'a>,
    /// What positions past a tuple hold.
    extra: Extra<'a>,
    extra_keyword: &'static str,
}

impl<'a> ArrayModel<'a> {
    fn of(view: &View<'a>) -> ArrayModel<'a> {
        let tuple = |keyword: &'static str, items: &'a [Value]| {
            Items::Tuple(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| view.item(keyword, i, item))
                    .collect(),
            )
        };
        if let Some(Value::Array(items)) = view.get("prefixItems") {
            return ArrayModel {
                items: tuple("prefixItems", items),
                extra: extra(view, "items"),
                extra_keyword: "items",
            };
        }
        match view.get("items") {
            Some(Value::Array(items)) => ArrayModel {
                items: tuple("items", items),
                extra: extra(view, "additionalItems"),
                extra_keyword: "additionalItems",
            },
            Some(item) if !is_trivial(item) => ArrayModel {
                items: Items::List(view.child("items", item)),
                extra: Extra::Open,
                extra_keyword: "additionalItems",
            },
            _ => ArrayModel {
                items: Items::Any,
                extra: Extra::Open,
                extra_keyword: "additionalItems",
            },
        }
    }
}

fn upper(view: &View<'_>) -> Option<Bound> {
    let maximum = view.get("maximum").and_then(Value::as_f64);
    if view.draft() == Draft::D4 {
        return maximum.map(|value| Bound {
            value,
            exclusive: view.get("exclusiveMaximum") == Some(&Value::Bool(true)),
            keyword: "maximum",
        });
    }
    let exclusive = view.get("exclusiveMaximum").and_then(Value::as_f64);
    match (maximum, exclusive) {
        (Some(m), Some(e)) if e <= m => Some(Bound {
            value: e,
            exclusive: true,
            keyword: "exclusiveMaximum",
        }),
        (Some(m), _) => Some(Bound {
            value: m,
            exclusive: false,
            keyword: "maximum",
        }),
        (None, Some(e)) => Some(Bound {
            value: e,
            exclusive: true,
            keyword: "exclusiveMaximum",
        }),
        (None, None) => None,
    }
}

fn lower(view: &View<'_>) -> Option<Bound> {
    let minimum = view.get("minimum").and_then(Value::as_f64);
    if view.draft() == Draft::D4 {
        return minimum.map(|value| Bound {
            value,
            exclusive: view.get("exclusiveMinimum") == Some(&Value::Bool(true)),
            keyword: "minimum",
        });
    }
    let exclusive = view.get("exclusiveMinimum").and_then(Value::as_f64);
    match (minimum, exclusive) {
        (Some(m), Some(e)) if e >= m => Some(Bound {
            value: e,
            exclusive: true,
            keyword: "exclusiveMinimum",
        }),
        (Some(m), _) => Some(Bound {
            value: m,
            exclusive: false,
            keyword: "minimum",
        }),
        (None, Some(e)) => Some(Bound {
            value: e,
            exclusive: true,
            keyword: "exclusiveMinimum",
        }),
        (None, None) => None,
    }
}

/// The largest integer a bound allows, as an inclusive bound.
fn integral_upper(b: Bound) -> Bound {
    let value = if b.exclusive && b.value.fract() == 0.0 {
        b.value - 1.0
    } else {
        b.value.floor()
    };
    Bound {
        value,
        exclusive: false,
        ..b
    }
}

fn integral_lower(b: Bound) -> Bound {
    let value = if b.exclusive && b.value.fract() == 0.0 {
        b.value + 1.0
    } else {
        b.value.ceil()
    };
    Bound {
        value,
        exclusive: false,
        ..b
    }
}

/// Whether writer upper bound `w` lets through numbers reader bound `r`
/// rejects.
fn exceeds_upper(w: Bound, r: Bound) -> bool {
    w.value > r.value || (w.value == r.value && r.exclusive && !w.exclusive)
}

fn exceeds_lower(w: Bound, r: Bound) -> bool {
    w.value < r.value || (w.value == r.value && r.exclusive && !w.exclusive)
}

/// Whether `a` is an integer multiple of `b`.
fn is_multiple(a: f64, b: f64) -> bool {
    if b == 0.0 {
        return false;
    }
    let q = a / b;
    q.is_finite() && (q - q.round()).abs() <= 1e-9 * q.abs().max(1.0)
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}
