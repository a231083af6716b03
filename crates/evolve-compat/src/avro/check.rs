//! The reader/writer walk behind [`super::check`].

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use apache_avro::Schema;
use apache_avro::schema::{
    Alias, DecimalSchema, EnumSchema, FixedSchema, InnerDecimalSchema, Name, RecordField,
    RecordSchema, UuidSchema,
};

use super::{MAX_DEPTH, MAX_INCOMPATIBILITIES, NamedTypes};
use crate::Incompatibility;

pub(super) fn check<'a>(
    reader: &'a Schema,
    reader_names: &NamedTypes<'a>,
    writer: &'a Schema,
    writer_names: &NamedTypes<'a>,
) -> Vec<Incompatibility> {
    let mut checker = Checker {
        reader_names,
        writer_names,
        records: HashMap::new(),
        depth: 0,
    };
    let mut out = Out::loud();
    checker.walk(reader, writer, &mut Vec::new(), Ctx::default(), &mut out);
    out.issues
        .into_iter()
        .map(|issue| Incompatibility {
            kind: issue.kind.as_str().to_owned(),
            path: if issue.path.is_empty() {
                "/".to_owned()
            } else {
                issue.path
            },
            message: issue.message,
        })
        .collect()
}

/// Java's `SchemaIncompatibilityType`, plus our depth guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    NameMismatch,
    FixedSizeMismatch,
    MissingEnumSymbols,
    ReaderFieldMissingDefaultValue,
    TypeMismatch,
    MissingUnionBranch,
    NestingTooDeep,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::NameMismatch => "NAME_MISMATCH",
            Kind::FixedSizeMismatch => "FIXED_SIZE_MISMATCH",
            Kind::MissingEnumSymbols => "MISSING_ENUM_SYMBOLS",
            Kind::ReaderFieldMissingDefaultValue => "READER_FIELD_MISSING_DEFAULT_VALUE",
            Kind::TypeMismatch => "TYPE_MISMATCH",
            Kind::MissingUnionBranch => "MISSING_UNION_BRANCH",
            Kind::NestingTooDeep => "NESTING_TOO_DEEP",
        }
    }
}

/// An incompatibility, located relative to where its walk started (the
/// root, or the record pair whose result is memoized): `""` there,
/// `/fields/0/type` below.
#[derive(Clone, Debug)]
struct Issue {
    kind: Kind,
    path: String,
    message: String,
}

/// One step of a location.
#[derive(Clone, Copy, Debug)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

fn render(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        let _ = match seg {
            Seg::Key(key) => write!(s, "/{key}"),
            Seg::Index(i) => write!(s, "/{i}"),
        };
    }
    s
}

/// Where issues go. A quiet one (probing a reader union's branches) only
/// wants the verdict, so it skips building messages.
struct Out {
    issues: Vec<Issue>,
    quiet: bool,
}

impl Out {
    fn loud() -> Out {
        Out {
            issues: Vec::new(),
            quiet: false,
        }
    }

    fn quiet() -> Out {
        Out {
            issues: Vec::new(),
            quiet: true,
        }
    }

    fn report(&mut self, kind: Kind, path: &[Seg], message: impl FnOnce() -> String) {
        if self.quiet || self.issues.len() >= MAX_INCOMPATIBILITIES {
            return;
        }
        self.issues.push(Issue {
            kind,
            path: render(path),
            message: message(),
        });
    }

    /// Adds issues found below `prefix`.
    fn extend_below(&mut self, prefix: &[Seg], issues: &[Issue]) {
        if self.quiet || issues.is_empty() {
            return;
        }
        let prefix = render(prefix);
        for issue in issues {
            if self.issues.len() >= MAX_INCOMPATIBILITIES {
                return;
            }
            self.issues.push(Issue {
                kind: issue.kind,
                path: format!("{prefix}{}", issue.path),
                message: issue.message.clone(),
            });
        }
    }
}

/// What a message says about where it is: the innermost reader field, and
/// the writer union branch being read, if any.
#[derive(Clone, Copy, Default)]
struct Ctx<'a> {
    field: Option<(&'a Name, &'a str)>,
    writer_branch: Option<usize>,
}

impl Ctx<'_> {
    /// `" (writer union branch 1)"`, or nothing.
    fn branch(&self) -> String {
        self.writer_branch
            .map(|i| format!(" (writer union branch {i})"))
            .unwrap_or_default()
    }

    /// `" in field \"age\" of record \"User\""`, or nothing at the root.
    fn place(&self) -> String {
        self.field
            .map(|(record, field)| {
                format!(
                    " in field \"{field}\" of record \"{}\"",
                    record.fullname(None)
                )
            })
            .unwrap_or_default()
    }

    fn inner(self) -> Self {
        Ctx {
            writer_branch: None,
            ..self
        }
    }
}

/// A schema as the checker sees it: references resolved, logical types
/// reduced to the type they annotate.
#[derive(Clone, Copy)]
enum View<'a> {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Array(&'a Schema),
    Map(&'a Schema),
    Union(&'a [Schema]),
    Record(&'a RecordSchema),
    Enum(&'a EnumSchema),
    Fixed(&'a FixedSchema),
    /// A reference to a type that is not defined (parsing rules it out).
    Unresolved,
}

fn view<'a>(schema: &'a Schema, names: &NamedTypes<'a>) -> View<'a> {
    match schema {
        Schema::Null => View::Null,
        Schema::Boolean => View::Boolean,
        Schema::Int | Schema::Date | Schema::TimeMillis => View::Int,
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => View::Long,
        Schema::Float => View::Float,
        Schema::Double => View::Double,
        Schema::Bytes
        | Schema::BigDecimal
        | Schema::Uuid(UuidSchema::Bytes)
        | Schema::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Bytes,
            ..
        }) => View::Bytes,
        Schema::String | Schema::Uuid(UuidSchema::String) => View::String,
        Schema::Array(a) => View::Array(&a.items),
        Schema::Map(m) => View::Map(&m.types),
        Schema::Union(u) => View::Union(u.variants()),
        Schema::Record(r) => View::Record(r),
        Schema::Enum(e) => View::Enum(e),
        Schema::Fixed(f)
        | Schema::Duration(f)
        | Schema::Uuid(UuidSchema::Fixed(f))
        | Schema::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Fixed(f),
            ..
        }) => View::Fixed(f),
        Schema::Ref { name } => match names.get(name) {
            // Definitions are never references themselves, so this is one step.
            Some(s) if !matches!(s, Schema::Ref { .. }) => view(s, names),
            _ => View::Unresolved,
        },
    }
}

/// Names a type for a message: `long (timestamp-millis)`, `record "a.B"`.
fn describe(schema: &Schema, names: &NamedTypes<'_>) -> String {
    let named = |kind: &str, name: &Name| format!("{kind} \"{}\"", name.fullname(None));
    match schema {
        Schema::Null => "null".to_owned(),
        Schema::Boolean => "boolean".to_owned(),
        Schema::Int => "int".to_owned(),
        Schema::Long => "long".to_owned(),
        Schema::Float => "float".to_owned(),
        Schema::Double => "double".to_owned(),
        Schema::Bytes => "bytes".to_owned(),
        Schema::String => "string".to_owned(),
        Schema::Date => "int (date)".to_owned(),
        Schema::TimeMillis => "int (time-millis)".to_owned(),
        Schema::TimeMicros => "long (time-micros)".to_owned(),
        Schema::TimestampMillis => "long (timestamp-millis)".to_owned(),
        Schema::TimestampMicros => "long (timestamp-micros)".to_owned(),
        Schema::TimestampNanos => "long (timestamp-nanos)".to_owned(),
        Schema::LocalTimestampMillis => "long (local-timestamp-millis)".to_owned(),
        Schema::LocalTimestampMicros => "long (local-timestamp-micros)".to_owned(),
        Schema::LocalTimestampNanos => "long (local-timestamp-nanos)".to_owned(),
        Schema::BigDecimal => "bytes (big-decimal)".to_owned(),
        Schema::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Bytes,
            ..
        }) => "bytes (decimal)".to_owned(),
        Schema::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Fixed(f),
            ..
        }) => format!("{} (decimal)", named("fixed", &f.name)),
        Schema::Uuid(UuidSchema::String) => "string (uuid)".to_owned(),
        Schema::Uuid(UuidSchema::Bytes) => "bytes (uuid)".to_owned(),
        Schema::Uuid(UuidSchema::Fixed(f)) => format!("{} (uuid)", named("fixed", &f.name)),
        Schema::Duration(f) => format!("{} (duration)", named("fixed", &f.name)),
        Schema::Array(_) => "array".to_owned(),
        Schema::Map(_) => "map".to_owned(),
        Schema::Union(_) => "union".to_owned(),
        Schema::Record(r) => named("record", &r.name),
        Schema::Enum(e) => named("enum", &e.name),
        Schema::Fixed(f) => named("fixed", &f.name),
        Schema::Ref { name } => match names.get(name) {
            Some(s) if !matches!(s, Schema::Ref { .. }) => describe(s, names),
            _ => format!("undefined type \"{}\"", name.fullname(None)),
        },
    }
}

/// Whether the reader's primitive reads the writer's, promotions included.
fn promotes(reader: View<'_>, writer: View<'_>) -> bool {
    use View::*;
    matches!(
        (reader, writer),
        (Null, Null)
            | (Boolean, Boolean)
            | (Int, Int)
            | (Long, Int | Long)
            | (Float, Int | Long | Float)
            | (Double, Int | Long | Float | Double)
            | (Bytes, Bytes | String)
            | (String, String | Bytes)
    )
}

/// Equal unqualified names, or a reader alias equal to the writer's full
/// name (aliases are stored qualified by the reader's namespace).
fn names_match(reader: &Name, reader_aliases: &Option<Vec<Alias>>, writer: &Name) -> bool {
    reader.name() == writer.name()
        || reader_aliases
            .iter()
            .flatten()
            .any(|alias| alias.fully_qualified_name(None).as_ref() == writer)
}

/// Whether the two would be paired by the specification's "match" (same
/// kind, same name), regardless of what lies inside.
fn same_kind(reader: View<'_>, writer: View<'_>) -> bool {
    match (reader, writer) {
        (View::Record(r), View::Record(w)) => names_match(&r.name, &r.aliases, &w.name),
        (View::Enum(r), View::Enum(w)) => names_match(&r.name, &r.aliases, &w.name),
        (View::Fixed(r), View::Fixed(w)) => names_match(&r.name, &r.aliases, &w.name),
        (View::Array(_), View::Array(_)) | (View::Map(_), View::Map(_)) => true,
        (r, w) => promotes(r, w),
    }
}

/// The writer's field with this exact name (not a writer alias: Java's
/// `Schema.getField` does not look at those either).
fn field_named<'a>(record: &'a RecordSchema, name: &str) -> Option<&'a RecordField> {
    // `lookup` also holds the writer's field aliases, which may shadow a name.
    let &i = record.lookup.get(name)?;
    match record.fields.get(i) {
        Some(field) if field.name == name => Some(field),
        _ => record.fields.iter().find(|f| f.name == name),
    }
}

/// The writer field a reader field reads: by its name, else by its aliases.
fn writer_field<'a>(
    writer: &'a RecordSchema,
    reader_field: &RecordField,
) -> Option<&'a RecordField> {
    field_named(writer, &reader_field.name).or_else(|| {
        reader_field
            .aliases
            .iter()
            .find_map(|alias| field_named(writer, alias))
    })
}

enum Memo {
    InProgress,
    Done {
        compatible: bool,
        issues: Vec<Issue>,
    },
}

struct Checker<'a, 'n> {
    reader_names: &'n NamedTypes<'a>,
    writer_names: &'n NamedTypes<'a>,
    /// Record pairs, by the identity of their definitions (a recursive
    /// reference resolves to the one definition of its name), with their
    /// issues located relative to the pair.
    records: HashMap<(*const RecordSchema, *const RecordSchema), Memo>,
    depth: usize,
}

impl<'a> Checker<'a, '_> {
    /// Whether `reader` reads everything `writer` writes; reports why not.
    fn walk(
        &mut self,
        reader: &'a Schema,
        writer: &'a Schema,
        path: &mut Vec<Seg>,
        ctx: Ctx<'a>,
        out: &mut Out,
    ) -> bool {
        if self.depth >= MAX_DEPTH {
            out.report(Kind::NestingTooDeep, path, || {
                format!(
                    "types nest more than {MAX_DEPTH} levels deep{}; what lies deeper is not \
                     checked",
                    ctx.place()
                )
            });
            return false;
        }
        self.depth += 1;
        let compatible = self.walk_views(reader, writer, path, ctx, out);
        self.depth -= 1;
        compatible
    }

    fn walk_views(
        &mut self,
        reader: &'a Schema,
        writer: &'a Schema,
        path: &mut Vec<Seg>,
        ctx: Ctx<'a>,
        out: &mut Out,
    ) -> bool {
        let r = view(reader, self.reader_names);
        let w = view(writer, self.writer_names);
        match (r, w) {
            (View::Union(reader_branches), View::Union(writer_branches)) => {
                let mut compatible = true;
                for (i, branch) in writer_branches.iter().enumerate() {
                    path.push(Seg::Index(i));
                    let branch_ctx = Ctx {
                        writer_branch: Some(i),
                        ..ctx
                    };
                    compatible &=
                        self.union_reads(reader_branches, branch, true, path, branch_ctx, out);
                    path.pop();
                }
                compatible
            }
            (_, View::Union(writer_branches)) => {
                let mut compatible = true;
                for (i, branch) in writer_branches.iter().enumerate() {
                    let branch_ctx = Ctx {
                        writer_branch: Some(i),
                        ..ctx
                    };
                    compatible &= self.walk(reader, branch, path, branch_ctx, out);
                }
                compatible
            }
            (View::Union(reader_branches), _) => {
                self.union_reads(reader_branches, writer, false, path, ctx, out)
            }
            (View::Record(r), View::Record(w)) => self.records(r, w, path, out),
            (View::Enum(r), View::Enum(w)) => {
                let names = check_names(&r.name, &r.aliases, &w.name, "enum", path, out);
                let symbols = enum_symbols(r, w, path, out);
                names && symbols
            }
            (View::Fixed(r), View::Fixed(w)) => {
                let names = check_names(&r.name, &r.aliases, &w.name, "fixed", path, out);
                let size = r.size == w.size;
                if !size {
                    path.push(Seg::Key("size"));
                    out.report(Kind::FixedSizeMismatch, path, || {
                        format!(
                            "reader fixed \"{}\" has size {} but writer fixed \"{}\" has size {}",
                            r.name.fullname(None),
                            r.size,
                            w.name.fullname(None),
                            w.size
                        )
                    });
                    path.pop();
                }
                names && size
            }
            (View::Array(r), View::Array(w)) => {
                path.push(Seg::Key("items"));
                let compatible = self.walk(r, w, path, ctx.inner(), out);
                path.pop();
                compatible
            }
            (View::Map(r), View::Map(w)) => {
                path.push(Seg::Key("values"));
                let compatible = self.walk(r, w, path, ctx.inner(), out);
                path.pop();
                compatible
            }
            (r, w) if promotes(r, w) => true,
            _ => {
                out.report(Kind::TypeMismatch, path, || {
                    format!(
                        "reader type {} cannot read writer type {}{}{}",
                        describe(reader, self.reader_names),
                        describe(writer, self.writer_names),
                        ctx.branch(),
                        ctx.place()
                    )
                });
                false
            }
        }
    }

    /// Whether some branch of a reader union reads `writer` (a non-union;
    /// when it is a branch of a writer union, `path` ends with its index).
    fn union_reads(
        &mut self,
        reader_branches: &'a [Schema],
        writer: &'a Schema,
        writer_is_branch: bool,
        path: &mut Vec<Seg>,
        ctx: Ctx<'a>,
        out: &mut Out,
    ) -> bool {
        // Only a branch of the same kind and name can read it (any other
        // would fail on the kind or the name), so only those are walked.
        let w = view(writer, self.writer_names);
        let reader_names = self.reader_names;
        let mut same = reader_branches
            .iter()
            .enumerate()
            .filter(|(_, branch)| same_kind(view(branch, reader_names), w));
        let first_same = same.next();
        for (_, branch) in first_same.into_iter().chain(same) {
            let mut probe = Out::quiet();
            if self.walk(branch, writer, &mut Vec::new(), Ctx::default(), &mut probe) {
                return true;
            }
        }
        out.report(Kind::MissingUnionBranch, path, || {
            format!(
                "no branch of the reader union can read writer type {}{}{}",
                describe(writer, self.writer_names),
                ctx.branch(),
                ctx.place()
            )
        });
        // Say why the first branch of the same kind and name does not read it.
        if let Some((i, branch)) = first_same
            && !out.quiet
        {
            let writer_index = if writer_is_branch { path.pop() } else { None };
            path.push(Seg::Index(i));
            self.walk(branch, writer, path, ctx.inner(), out);
            path.pop();
            path.extend(writer_index);
        }
        false
    }

    /// Two records, each pair walked once: a pair met again while it is
    /// being walked (a recursive type) is assumed compatible, and a pair
    /// walked before gives its memoized result.
    fn records(
        &mut self,
        r: &'a RecordSchema,
        w: &'a RecordSchema,
        path: &[Seg],
        out: &mut Out,
    ) -> bool {
        let key: (*const RecordSchema, *const RecordSchema) = (r, w);
        match self.records.get(&key) {
            Some(Memo::InProgress) => return true,
            Some(Memo::Done { compatible, issues }) => {
                out.extend_below(path, issues);
                return *compatible;
            }
            None => {}
        }
        self.records.insert(key, Memo::InProgress);
        let mut local = Out::loud();
        let compatible = self.record_fields(r, w, &mut Vec::new(), &mut local);
        out.extend_below(path, &local.issues);
        self.records.insert(
            key,
            Memo::Done {
                compatible,
                issues: local.issues,
            },
        );
        compatible
    }

    fn record_fields(
        &mut self,
        r: &'a RecordSchema,
        w: &'a RecordSchema,
        path: &mut Vec<Seg>,
        out: &mut Out,
    ) -> bool {
        let mut compatible = check_names(&r.name, &r.aliases, &w.name, "record", path, out);
        path.push(Seg::Key("fields"));
        for (i, field) in r.fields.iter().enumerate() {
            path.push(Seg::Index(i));
            match writer_field(w, field) {
                Some(writer_field) => {
                    path.push(Seg::Key("type"));
                    let ctx = Ctx {
                        field: Some((&r.name, &field.name)),
                        writer_branch: None,
                    };
                    compatible &= self.walk(&field.schema, &writer_field.schema, path, ctx, out);
                    path.pop();
                }
                None if field.default.is_some() => {}
                None => {
                    compatible = false;
                    out.report(Kind::ReaderFieldMissingDefaultValue, path, || {
                        format!(
                            "reader field \"{}\" in record \"{}\" has no default and the writer \
                             has no field with that name or an alias",
                            field.name,
                            r.name.fullname(None)
                        )
                    });
                }
            }
            path.pop();
        }
        path.pop();
        compatible
    }
}

/// The name check of a named type, located at `/name`.
fn check_names(
    reader: &Name,
    reader_aliases: &Option<Vec<Alias>>,
    writer: &Name,
    kind: &str,
    path: &mut Vec<Seg>,
    out: &mut Out,
) -> bool {
    if names_match(reader, reader_aliases, writer) {
        return true;
    }
    path.push(Seg::Key("name"));
    out.report(Kind::NameMismatch, path, || {
        let writer = writer.fullname(None);
        format!(
            "reader {kind} \"{}\" cannot read writer {kind} \"{writer}\": the names differ \
             and the reader has no alias \"{writer}\"",
            reader.fullname(None)
        )
    });
    path.pop();
    false
}

/// Every writer symbol must be a reader symbol, unless the reader has a
/// default symbol (one of its own, as Java requires).
fn enum_symbols(r: &EnumSchema, w: &EnumSchema, path: &mut Vec<Seg>, out: &mut Out) -> bool {
    let reader_symbols: HashSet<&str> = r.symbols.iter().map(String::as_str).collect();
    let mut missing: Vec<&str> = w
        .symbols
        .iter()
        .map(String::as_str)
        .filter(|s| !reader_symbols.contains(s))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if r.default
        .as_deref()
        .is_some_and(|d| reader_symbols.contains(d))
    {
        return true;
    }
    missing.sort_unstable();
    path.push(Seg::Key("symbols"));
    out.report(Kind::MissingEnumSymbols, path, || {
        let list = missing
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let plural = if missing.len() == 1 { "" } else { "s" };
        format!(
            "reader enum \"{}\" lacks writer symbol{plural} {list} and has no default symbol",
            r.name.fullname(None)
        )
    });
    path.pop();
    false
}
