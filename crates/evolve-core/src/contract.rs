//! Consumer contracts: which fields of an interface's documents a view
//! (or materialized view) reads, found by parsing its definition with the
//! PostgreSQL parser. Pure.
//!
//! A sink table holds `key jsonb` and `data jsonb`, the interface's
//! documents. A consumer reads a field when its definition applies a JSON
//! operator with a constant to a document column: `data->>'f'`,
//! `data->'f'`, `data #>> '{a,b}'`, `data #> '{a,b}'`, `data['f']`,
//! `data ? 'f'`, `data ?| ARRAY['a','b']`, `data ?& '{a,b}'`, and
//! `jsonb_extract_path(_text)(data, 'a', 'b')` (also through `VARIADIC
//! ARRAY[...]`, as `pg_get_viewdef` prints it); chains (`(data->'a')->>'b'`)
//! read the path `a.b`. A cast of the field's value
//! (`(data->>'qty')::bigint`) is kept with the read, so that a type change
//! upstream can be checked against it. Every other use of a document
//! column, a bare `data` handed to a function, compared, cast or
//! returned, is a read of the whole document: [`Analysis::whole_document`]
//! says where.
//!
//! Views over views are followed by column: each analysed relation tells
//! what its output columns are ([`Column`]): a document (a document column
//! or a sub-document passed through), the fields it was computed from, or
//! nothing of the interface. A view over it then reads those fields when
//! it uses such a column.
//!
//! Column references are matched to the relations named in the
//! definition's `FROM` items (by alias, else by the relation's own name,
//! ignoring the schema); an unqualified name is matched against every
//! relation of the definition that has a column of that name. The match
//! errs on the side of reporting a read, never of missing one.

use std::collections::{BTreeMap, BTreeSet};

use squawk_syntax::ast::{AstNode, SourceFile};
use squawk_syntax::{SyntaxKind, SyntaxNode};

/// A field read: its path in the document (`["addr", "city"]`) and the
/// type its value is cast to, if the reader casts it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Read {
    /// The path from the document's top level; never empty.
    pub path: Vec<String>,
    /// The cast applied to the field's value, as written (`numeric`,
    /// `bigint`), lower case.
    pub cast: Option<String>,
}

impl Read {
    /// The top-level field, which is the upstream column's name.
    pub fn field(&self) -> &str {
        &self.path[0]
    }

    /// `a.b`, for people.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// What one output column of a relation is, for the relations over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Column {
    /// A document, or the sub-document at `path` of one.
    Document { path: Vec<String> },
    /// A value computed from these fields.
    Fields(BTreeSet<Read>),
    /// Nothing of the interface.
    Other,
}

/// A relation a definition may read: its name and what its columns are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The relation's own name (no schema).
    pub name: String,
    /// Its columns that carry something of the interface, by name.
    pub columns: BTreeMap<String, Column>,
}

impl Input {
    /// A sink table: `key` and `data` are documents.
    pub fn sink_table(name: &str) -> Input {
        let document = Column::Document { path: Vec::new() };
        Input {
            name: name.to_string(),
            columns: BTreeMap::from([
                ("key".to_string(), document.clone()),
                ("data".to_string(), document),
            ]),
        }
    }
}

/// What a definition reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// The fields read.
    pub reads: BTreeSet<Read>,
    /// The expressions that use a whole document (or sub-document) in a
    /// way no field can be named for, as written (at most 120 characters
    /// each).
    pub whole_document: Vec<String>,
    /// The output columns, in order, by name, for the relations over this
    /// one.
    pub columns: Vec<(String, Column)>,
}

/// Why a definition could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the definition does not parse: {0}")]
pub struct ContractError(pub String);

/// Reads the fields `definition` (a `SELECT`, as `pg_get_viewdef` prints
/// it) takes from `inputs`.
pub fn analyze(definition: &str, inputs: &[Input]) -> Result<Analysis, ContractError> {
    let parse = SourceFile::parse(definition);
    if let Some(e) = parse.errors().first() {
        return Err(ContractError(format!("{e:?}")));
    }
    let root = parse.tree().syntax().clone();
    let scope = Scope::new(&root, inputs);
    let mut analysis = Analysis::default();
    scope.reads_in(
        &root,
        &mut analysis.reads,
        &mut analysis.whole_document,
        None,
    );
    analysis.columns = scope.output_columns(&root);
    Ok(analysis)
}

/// The relations a definition names, and what their columns are.
struct Scope<'a> {
    /// Qualifier (alias or relation name) to input.
    qualified: BTreeMap<String, &'a Input>,
    /// The inputs named in a `FROM` item anywhere in the definition.
    named: Vec<&'a Input>,
}

impl<'a> Scope<'a> {
    fn new(root: &SyntaxNode, inputs: &'a [Input]) -> Scope<'a> {
        let mut qualified = BTreeMap::new();
        let mut named: Vec<&Input> = Vec::new();
        for item in root
            .descendants()
            .filter(|n| n.kind() == SyntaxKind::RELATION_FROM_ITEM)
        {
            let Some(relation) = item
                .children()
                .find(|n| n.kind() == SyntaxKind::RELATION_NAME_REF)
            else {
                continue;
            };
            let Some(name) = relation
                .descendants()
                .filter(|n| n.kind() == SyntaxKind::PATH_SEGMENT_REF)
                .last()
                .map(|n| ident(&n))
            else {
                continue;
            };
            let Some(input) = inputs.iter().find(|i| i.name == name) else {
                continue;
            };
            let alias = item
                .descendants()
                .find(|n| n.kind() == SyntaxKind::TABLE_ALIAS)
                .and_then(|a| {
                    a.children_with_tokens()
                        .filter_map(|t| t.into_token())
                        .find(|t| !t.kind().is_trivia() && t.kind() != SyntaxKind::AS_KW)
                        .map(|t| normalize_ident(t.text()))
                });
            qualified.insert(alias.unwrap_or_else(|| name.clone()), input);
            qualified.entry(name).or_insert(input);
            if !named.iter().any(|n| std::ptr::eq(*n, input)) {
                named.push(input);
            }
        }
        Scope { qualified, named }
    }

    /// The column a node refers to, if it is a reference to a column of an
    /// input that carries something of the interface.
    fn column_of(&self, node: &SyntaxNode) -> Option<&'a Column> {
        match node.kind() {
            SyntaxKind::FIELD_EXPR => {
                let refs: Vec<SyntaxNode> = node
                    .children()
                    .filter(|n| n.kind() == SyntaxKind::NAME_REF)
                    .collect();
                let [qualifier, column] = refs.as_slice() else {
                    return None;
                };
                let input = self.qualified.get(&ident(qualifier))?;
                input.columns.get(&ident(column))
            }
            // (`USING (key)` lists are COLUMN_NAME_REF: a join on the key
            // compares keys, it reads no field.)
            SyntaxKind::NAME_REF => {
                let parent = node.parent()?;
                if parent.kind() == SyntaxKind::FIELD_EXPR {
                    return None;
                }
                // A function's name is not a column.
                if parent.kind() == SyntaxKind::CALL_EXPR
                    && parent.first_child().as_ref() == Some(node)
                {
                    return None;
                }
                let name = ident(node);
                self.named.iter().find_map(|i| i.columns.get(&name))
            }
            _ => None,
        }
    }

    /// Adds what the expressions under `node` read. `target`, when given,
    /// is the one expression whose own value is an output column: a
    /// document it yields as a whole is passed on, not read.
    fn reads_in(
        &self,
        node: &SyntaxNode,
        reads: &mut BTreeSet<Read>,
        whole: &mut Vec<String>,
        target: Option<&SyntaxNode>,
    ) {
        for n in node.descendants() {
            let Some(column) = self.column_of(&n) else {
                continue;
            };
            match column {
                Column::Other => {}
                Column::Fields(fields) => reads.extend(fields.iter().cloned()),
                Column::Document { path } => {
                    let (top, outcome) = climb(&n, path.clone());
                    let yields_document = matches!(outcome, Climbed::Document(_));
                    match outcome {
                        Climbed::Read(r) => reads.extend(r),
                        Climbed::Document(path) | Climbed::Unknown(path) => {
                            let passed_on =
                                yields_document && target.is_some_and(|t| unparen(t) == top);
                            if passed_on {
                                continue;
                            }
                            if path.is_empty() {
                                whole.push(excerpt(&context(&top)));
                            } else {
                                reads.insert(Read { path, cast: None });
                            }
                        }
                    }
                }
            }
        }
    }

    /// The top-level `SELECT`'s output columns, by name.
    fn output_columns(&self, root: &SyntaxNode) -> Vec<(String, Column)> {
        let Some(list) = root
            .descendants()
            .find(|n| n.kind() == SyntaxKind::TARGET_LIST)
        else {
            return Vec::new();
        };
        let mut columns = Vec::new();
        for (i, target) in list
            .children()
            .filter(|n| n.kind() == SyntaxKind::TARGET)
            .enumerate()
        {
            let expr = target
                .children()
                .find(|n| n.kind() != SyntaxKind::AS_NAME)
                .unwrap_or(target.clone());
            let name = output_name(&target, &expr).unwrap_or_else(|| format!("?column{i}?"));
            let unwrapped = unparen(&expr);
            let column = match self.document_yielded(&unwrapped) {
                Some(path) => Column::Document { path },
                None => {
                    let mut reads = BTreeSet::new();
                    let mut whole = Vec::new();
                    self.reads_in(&target, &mut reads, &mut whole, None);
                    if reads.is_empty() {
                        Column::Other
                    } else {
                        Column::Fields(reads)
                    }
                }
            };
            columns.push((name, column));
        }
        columns
    }

    /// When `expr` is a document column, or a sub-document taken from one
    /// by constant paths, the path it yields.
    fn document_yielded(&self, expr: &SyntaxNode) -> Option<Vec<String>> {
        for n in expr.descendants() {
            if let Some(Column::Document { path }) = self.column_of(&n) {
                let (top, outcome) = climb(&n, path.clone());
                if top == *expr
                    && let Climbed::Document(path) = outcome
                {
                    return Some(path);
                }
            }
        }
        None
    }
}

/// Where climbing from a document reference ended.
enum Climbed {
    /// The expression reads these fields (a text value, a presence test).
    Read(Vec<Read>),
    /// The expression still is a document, or the sub-document at this
    /// path of one.
    Document(Vec<String>),
    /// The expression uses the document (or the sub-document at this path)
    /// in a way no field can be named for: a key computed at run time, a
    /// function that is not a JSON accessor.
    Unknown(Vec<String>),
}

/// Follows JSON operators with constant operands up from a reference to a
/// document, and returns the outermost expression reached and what it is.
fn climb(reference: &SyntaxNode, mut path: Vec<String>) -> (SyntaxNode, Climbed) {
    let mut node = reference.clone();
    loop {
        let Some(parent) = parent_skipping_parens(&node) else {
            return (node, Climbed::Document(path));
        };
        match parent.kind() {
            SyntaxKind::BIN_EXPR => {
                let Some((lhs, op, rhs)) = binary(&parent) else {
                    return (node, Climbed::Document(path));
                };
                if unparen(&lhs) != node {
                    return (node, Climbed::Document(path));
                }
                // squawk groups `a -> 'x' ->> 'y'` as `a -> ('x' ->> 'y')`;
                // PostgreSQL's operators associate to the left.
                let (first, rest) = right_chain(&rhs);
                match op.as_str() {
                    "->" | "->>" => {
                        let Some(key) = string_constant(&first) else {
                            return (parent, Climbed::Unknown(path));
                        };
                        path.push(key);
                        let mut text = op == "->>";
                        for (op, operand) in rest {
                            match (op.as_str(), string_constant(&operand)) {
                                ("->" | "->>", Some(key)) if !text => {
                                    path.push(key);
                                    text = op == "->>";
                                }
                                _ => return (parent, Climbed::Unknown(path)),
                            }
                        }
                        if text {
                            return (
                                parent.clone(),
                                Climbed::Read(vec![cast_read(&parent, path)]),
                            );
                        }
                        node = parent;
                    }
                    "#>" | "#>>" => {
                        let Some(keys) = string_constant(&rhs).and_then(|s| text_array(&s)) else {
                            return (parent, Climbed::Unknown(path));
                        };
                        if keys.is_empty() {
                            return (parent, Climbed::Document(path));
                        }
                        path.extend(keys);
                        if op == "#>>" {
                            return (
                                parent.clone(),
                                Climbed::Read(vec![cast_read(&parent, path)]),
                            );
                        }
                        node = parent;
                    }
                    "?" => {
                        return match string_constant(&rhs) {
                            Some(key) => {
                                path.push(key);
                                (parent, Climbed::Read(vec![Read { path, cast: None }]))
                            }
                            None => (parent, Climbed::Unknown(path)),
                        };
                    }
                    "?|" | "?&" => {
                        let keys = string_list(&rhs);
                        return match keys {
                            Some(keys) if !keys.is_empty() => {
                                let reads = keys
                                    .into_iter()
                                    .map(|k| {
                                        let mut p = path.clone();
                                        p.push(k);
                                        Read {
                                            path: p,
                                            cast: None,
                                        }
                                    })
                                    .collect();
                                (parent, Climbed::Read(reads))
                            }
                            _ => (parent, Climbed::Unknown(path)),
                        };
                    }
                    _ => return (node, Climbed::Document(path)),
                }
            }
            SyntaxKind::INDEX_EXPR => {
                let children: Vec<SyntaxNode> = parent.children().collect();
                if children.first().map(unparen).as_ref() != Some(&node) {
                    return (node, Climbed::Document(path));
                }
                match children.get(1).and_then(string_constant) {
                    Some(key) if children.len() == 2 => {
                        path.push(key);
                        node = parent;
                    }
                    _ => return (parent, Climbed::Unknown(path)),
                }
            }
            SyntaxKind::ARG => {
                let Some(call) = parent.parent().and_then(|l| l.parent()) else {
                    return (node, Climbed::Document(path));
                };
                if call.kind() != SyntaxKind::CALL_EXPR {
                    return (node, Climbed::Document(path));
                }
                let function = call.first_child().map(|n| ident(&n)).unwrap_or_default();
                let text = match function.as_str() {
                    "jsonb_extract_path_text" | "json_extract_path_text" => true,
                    "jsonb_extract_path" | "json_extract_path" => false,
                    _ => return (node, Climbed::Document(path)),
                };
                let args: Vec<SyntaxNode> = parent
                    .parent()
                    .map(|l| {
                        l.children()
                            .filter(|n| n.kind() == SyntaxKind::ARG)
                            .collect()
                    })
                    .unwrap_or_default();
                if args.first() != Some(&parent) {
                    return (call, Climbed::Unknown(path));
                }
                let mut keys = Vec::new();
                for arg in &args[1..] {
                    let value = arg.children().next();
                    let list = value.as_ref().and_then(|v| {
                        string_constant(v)
                            .map(|s| vec![s])
                            .or_else(|| string_list(v))
                    });
                    match list {
                        Some(list) => keys.extend(list),
                        None => return (call, Climbed::Unknown(path)),
                    }
                }
                if keys.is_empty() {
                    return (call, Climbed::Document(path));
                }
                path.extend(keys);
                if text {
                    return (call.clone(), Climbed::Read(vec![cast_read(&call, path)]));
                }
                node = call;
            }
            SyntaxKind::CAST_EXPR if !path.is_empty() => {
                // `(data->'qty')::int`: jsonb cast to a scalar.
                return (parent.clone(), Climbed::Read(vec![cast_read(&node, path)]));
            }
            _ => return (node, Climbed::Document(path)),
        }
    }
}

/// The read of `path`, with the cast applied to `expr`'s value if any.
fn cast_read(expr: &SyntaxNode, path: Vec<String>) -> Read {
    let cast = parent_skipping_parens(expr)
        .filter(|p| p.kind() == SyntaxKind::CAST_EXPR)
        .and_then(|p| {
            p.children()
                .find(|c| format!("{:?}", c.kind()).ends_with("_TYPE"))
                .map(|t| t.text().to_string().to_lowercase())
        });
    Read { path, cast }
}

/// The parent, skipping parentheses.
fn parent_skipping_parens(node: &SyntaxNode) -> Option<SyntaxNode> {
    let mut parent = node.parent()?;
    while parent.kind() == SyntaxKind::PAREN_EXPR {
        parent = parent.parent()?;
    }
    Some(parent)
}

/// `node` without the parentheses around it.
fn unparen(node: &SyntaxNode) -> SyntaxNode {
    let mut node = node.clone();
    while node.kind() == SyntaxKind::PAREN_EXPR {
        match node.children().next() {
            Some(inner) => node = inner,
            None => break,
        }
    }
    node
}

/// A binary expression's operands and operator text.
fn binary(node: &SyntaxNode) -> Option<(SyntaxNode, String, SyntaxNode)> {
    let mut operands = node.children().filter(|c| !is_operator(c));
    let lhs = operands.next()?;
    let rhs = operands.next()?;
    let op = node
        .children()
        .find(is_operator)
        .map(|o| o.text().to_string())
        .or_else(|| {
            node.children_with_tokens()
                .filter_map(|t| t.into_token())
                .find(|t| !t.kind().is_trivia())
                .map(|t| t.text().to_string())
        })?;
    Some((lhs, op.split_whitespace().collect(), rhs))
}

fn is_operator(node: &SyntaxNode) -> bool {
    node.kind() == SyntaxKind::CUSTOM_OP || format!("{:?}", node.kind()).ends_with("_OP")
}

/// `'x' ->> 'y'` as squawk groups it to the right of a JSON operator: the
/// first operand and the (operator, operand) pairs after it.
fn right_chain(rhs: &SyntaxNode) -> (SyntaxNode, Vec<(String, SyntaxNode)>) {
    let rhs = unparen(rhs);
    if rhs.kind() != SyntaxKind::BIN_EXPR {
        return (rhs, Vec::new());
    }
    match binary(&rhs) {
        Some((lhs, op, rest)) if matches!(op.as_str(), "->" | "->>") => {
            let (next, mut more) = right_chain(&rest);
            let mut chain = vec![(op, next)];
            chain.append(&mut more);
            (lhs, chain)
        }
        _ => (rhs, Vec::new()),
    }
}

/// A string constant, possibly cast (`'total'::text`), unquoted.
fn string_constant(node: &SyntaxNode) -> Option<String> {
    let node = unparen(node);
    match node.kind() {
        SyntaxKind::CAST_EXPR => string_constant(&node.first_child()?),
        SyntaxKind::LITERAL => {
            let token = node.first_token()?;
            if token.kind() != SyntaxKind::STRING {
                return None;
            }
            let text = token.text();
            let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
            Some(inner.replace("''", "'"))
        }
        _ => None,
    }
}

/// `ARRAY['a', 'b']` or `'{a,b}'`, as strings.
fn string_list(node: &SyntaxNode) -> Option<Vec<String>> {
    let node = unparen(node);
    if let Some(s) = string_constant(&node) {
        return text_array(&s);
    }
    let node = if node.kind() == SyntaxKind::CAST_EXPR {
        node.first_child()?
    } else {
        node
    };
    if node.kind() != SyntaxKind::ARRAY_EXPR {
        return None;
    }
    node.children().map(|c| string_constant(&c)).collect()
}

/// A text array literal's elements (`{a,b}`, `{"a b",c}`); `None` when it
/// is not one this reader can be sure of.
fn text_array(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('{')?.strip_suffix('}')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => item.push(chars.next()?),
                    c => item.push(c),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if matches!(c, '{' | '}' | '"' | '\\') {
                    return None;
                }
                item.push(c);
                chars.next();
            }
            item = item.trim().to_string();
            if item.eq_ignore_ascii_case("null") {
                return None;
            }
        }
        out.push(item);
        match chars.next() {
            None => return Some(out),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

/// An output column's name: its `AS` name, else the column it is.
fn output_name(target: &SyntaxNode, expr: &SyntaxNode) -> Option<String> {
    if let Some(name) = target.children().find(|n| n.kind() == SyntaxKind::AS_NAME) {
        return name
            .descendants_with_tokens()
            .filter_map(|t| t.into_token())
            .filter(|t| !t.kind().is_trivia() && t.kind() != SyntaxKind::AS_KW)
            .last()
            .map(|t| normalize_ident(t.text()));
    }
    let expr = unparen(expr);
    match expr.kind() {
        SyntaxKind::NAME_REF => Some(ident(&expr)),
        SyntaxKind::FIELD_EXPR => expr
            .children()
            .filter(|n| n.kind() == SyntaxKind::NAME_REF)
            .last()
            .map(|n| ident(&n)),
        SyntaxKind::CALL_EXPR => expr.first_child().map(|n| ident(&n)),
        _ => None,
    }
}

/// An identifier node's name, as PostgreSQL folds it.
fn ident(node: &SyntaxNode) -> String {
    let text = node
        .descendants_with_tokens()
        .filter_map(|t| t.into_token())
        .filter(|t| !t.kind().is_trivia())
        .last()
        .map(|t| t.text().to_string())
        .unwrap_or_default();
    normalize_ident(&text)
}

fn normalize_ident(text: &str) -> String {
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => text.to_lowercase(),
    }
}

/// The expression a whole-document use sits in, for the message: up
/// through parentheses, casts and argument lists to the call or operator
/// around it.
fn context(node: &SyntaxNode) -> SyntaxNode {
    let mut n = node.clone();
    while let Some(parent) = n.parent() {
        match parent.kind() {
            SyntaxKind::PAREN_EXPR
            | SyntaxKind::CAST_EXPR
            | SyntaxKind::ARG
            | SyntaxKind::ARG_LIST => n = parent,
            k if format!("{k:?}").ends_with("_EXPR") => return parent,
            _ => break,
        }
    }
    n
}

/// An expression as written, shortened for a message.
fn excerpt(node: &SyntaxNode) -> String {
    let text: String = node
        .text()
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Whether the text form of upstream type `new_type` always casts to
/// `cast` (both as PostgreSQL prints them): the check `migrate apply
/// --pipeline` makes for a field a consumer casts when its column changes
/// type. Unknown pairs say no.
pub fn text_casts(new_type: &str, cast: &str) -> bool {
    let new = family(new_type);
    let to = family(cast);
    if to == Family::Text || (new == to && new != Family::Unknown) {
        return true;
    }
    use Family::*;
    matches!(
        (new, to),
        (Int2, Int4 | Int8 | Numeric | Float)
            | (Int4, Int8 | Numeric | Float)
            | (Int8, Numeric | Float)
            | (Numeric | Float, Numeric | Float)
            | (Date | Timestamp, Date | Timestamp)
            | (Int2 | Int4 | Int8 | Numeric | Float | Bool | Json, Json)
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Text,
    Int2,
    Int4,
    Int8,
    Numeric,
    Float,
    Bool,
    Date,
    Timestamp,
    Uuid,
    Json,
    Unknown,
}

fn family(t: &str) -> Family {
    let t = t.trim().to_ascii_lowercase();
    let base = t.split('(').next().unwrap_or("").trim().trim_matches('"');
    let base = base.strip_prefix("pg_catalog.").unwrap_or(base);
    match base {
        "text" | "varchar" | "character varying" | "char" | "character" | "bpchar" | "name"
        | "citext" => Family::Text,
        "smallint" | "int2" | "smallserial" => Family::Int2,
        "integer" | "int" | "int4" | "serial" => Family::Int4,
        "bigint" | "int8" | "bigserial" => Family::Int8,
        "numeric" | "decimal" => Family::Numeric,
        "real" | "float4" | "double precision" | "float8" | "float" => Family::Float,
        "boolean" | "bool" => Family::Bool,
        "date" => Family::Date,
        _ if base.starts_with("timestamp") => Family::Timestamp,
        "uuid" => Family::Uuid,
        "json" | "jsonb" => Family::Json,
        _ => Family::Unknown,
    }
}

#[cfg(test)]
mod tests;
