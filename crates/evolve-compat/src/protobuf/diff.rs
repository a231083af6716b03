//! Confluent's Protobuf compatibility rules over compiled descriptors.
//!
//! A port of protobuf-provider's `diff` package (Confluent's
//! `SchemaDiff.compare(original, update)`): here the writer is Confluent's
//! `original` and the reader its `update`, so `check(new, old)` is
//! Confluent's BACKWARD. Only the differences Confluent counts as
//! incompatible are reported; the compatible ones (messages, enums, enum
//! constants, fields and oneofs added or removed, renames, messages
//! reordered, string↔bytes, a string/bytes field made repeated) are
//! silent.
//!
//! How the walk goes:
//! - The package is compared first (`PACKAGE_CHANGED`, path `#/`).
//! - The messages of the two main files are matched by simple name, level
//!   by level (top-level messages, then the messages nested in each
//!   matched pair); a writer message the reader lacks is
//!   `MESSAGE_REMOVED`. Map entry messages are not messages here.
//! - Within a matched pair, fields are matched by number wherever they
//!   sit (top level or a oneof) and their types compared: kind (scalar,
//!   enum counting as a scalar, message, map), then the wire-compatible
//!   scalar group and the label, or the message type's name, or the map's
//!   key and value.
//! - The oneof rules are those of Confluent's current `MessageSchemaDiff`:
//!   the fields of a reader oneof that existed in the writer must come
//!   from one writer oneof or be a single top-level field
//!   (`MULTIPLE_FIELDS_MOVED_TO_ONEOF` when several top-level fields moved
//!   in, `FIELD_MOVED_TO_EXISTING_ONEOF` otherwise); a field removed from a
//!   oneof that still exists, under its name or renamed (a reader oneof
//!   holding any of its other members), is `ONEOF_FIELD_REMOVED` unless it
//!   moved elsewhere in the message; removing a whole oneof is compatible.
//! - A field of message type whose type has the same package-relative name
//!   on both sides, and is defined outside the main file on either side
//!   (a reference or a well-known type), has that pair of messages
//!   compared as well; an incompatible difference inside adds
//!   `FIELD_NAMED_TYPE_CHANGED` to the field. Types of the main files are
//!   compared by the message walk instead.
//!
//! `PACKAGE_CHANGED` is incompatible, as in Confluent since 2024
//! (confluentinc/schema-registry#3004); earlier releases allowed it.
//!
//! Where this deliberately differs from Confluent:
//! - Labels. Confluent's parser (Wire) has no label for proto3 fields
//!   without one, nor for oneof members, and only compares labels when
//!   both sides have one, so `int32 a = 1;` → `repeated int32 a = 1;`
//!   passes there although packed repeated numbers cannot be read as a
//!   singular field. Here every field has a label (no label and oneof
//!   membership count as `optional`), so any change among optional,
//!   required and repeated of a numeric field (enums included) is
//!   `FIELD_NUMERIC_LABEL_CHANGED`.
//! - Paths name messages by full name (`#/acme.Order/3`) where Confluent
//!   uses the package-relative name (`#/Order/3`); oneof-level findings are
//!   `#/acme.Order/<oneof name>`, and a field removed from a oneof is
//!   `#/acme.Order/<number>` (Confluent: `#/Order/<oneof>/<number>`).
//! - A referenced type is compared whenever it comes from outside the main
//!   file; Confluent skips the comparison when both sides reference the
//!   same subject and version, which give the same answer.
//! - Referenced types are compared once per pair, from a queue rather than
//!   by recursion (long chains of references cannot exhaust the stack). A
//!   pair is incompatible when it or a pair it depends on (its nested
//!   messages, the referenced types of its fields) has a finding of its
//!   own, so on a cycle of two or more referenced types every field of the
//!   cycle gets `FIELD_NAMED_TYPE_CHANGED`; Confluent's depth-first walk
//!   stops where it re-enters a message and flags only the fields on the
//!   way there. The verdict is the same. A message's field of its own type
//!   is not flagged, as in Confluent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use prost_reflect::{Cardinality, FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};

use crate::Incompatibility;

pub(super) fn check(reader: &FileDescriptor, writer: &FileDescriptor) -> Vec<Incompatibility> {
    let mut diff = Diff {
        writer_main: writer.name().to_owned(),
        reader_main: reader.name().to_owned(),
        pairs: Vec::new(),
        pair_index: HashMap::new(),
        current: None,
    };
    let mut out = Vec::new();
    if writer.package_name() != reader.package_name() {
        out.push(Incompatibility {
            kind: "PACKAGE_CHANGED".to_owned(),
            path: "#/".to_owned(),
            message: format!(
                "the package changed from {} to {}, so every message has a new full name",
                package_display(writer.package_name()),
                package_display(reader.package_name())
            ),
        });
    }
    let mut root = Findings::default();
    diff.match_messages(writer.messages(), reader.messages(), &mut root);
    // Pairs are compared in the order they are found (a queue, not
    // recursion, so that long chains of referenced types cannot exhaust
    // the stack); comparing one may find more.
    let mut next = 0;
    while next < diff.pairs.len() {
        diff.compare_pair(next);
        next += 1;
    }
    let incompatible = diff.incompatible_pairs();
    let items = root
        .items
        .into_iter()
        .chain(diff.pairs.into_iter().flat_map(|pair| pair.items));
    for item in items {
        match item {
            Item::Found(found) => out.push(found),
            Item::NamedType { target, found } if incompatible[target] => out.push(found),
            Item::NamedType { .. } => {}
        }
    }
    let mut seen = HashSet::new();
    out.retain(|i| seen.insert(i.clone()));
    out
}

struct Diff {
    writer_main: String,
    reader_main: String,
    /// Every message pair (writer, reader) to compare, in the order found.
    pairs: Vec<Pair>,
    /// `pairs` by (writer full name, reader full name).
    pair_index: HashMap<(String, String), usize>,
    /// The pair being compared.
    current: Option<usize>,
}

/// A writer message and the reader message it is matched with.
struct Pair {
    writer: MessageDescriptor,
    reader: MessageDescriptor,
    /// What comparing them found, in order.
    items: Vec<Item>,
    /// Pairs whose incompatibility makes this one incompatible: its nested
    /// messages and the referenced types of its fields.
    depends_on: Vec<usize>,
}

/// What comparing a pair (or the top-level messages) found.
#[derive(Default)]
struct Findings {
    items: Vec<Item>,
    depends_on: Vec<usize>,
}

impl Findings {
    fn push(&mut self, found: Incompatibility) {
        self.items.push(Item::Found(found));
    }
}

enum Item {
    /// An incompatibility found directly.
    Found(Incompatibility),
    /// `FIELD_NAMED_TYPE_CHANGED` for a field whose message type, defined
    /// outside the main file, is compared as pair `target`: reported if
    /// that pair turns out incompatible.
    NamedType {
        target: usize,
        found: Incompatibility,
    },
}

/// A field's type as Confluent's `FieldSchemaDiff` sees it.
enum FieldType {
    Scalar { group: ScalarGroup, name: String },
    Message(MessageDescriptor),
    Map(Box<FieldType>, Box<FieldType>),
}

/// Wire-compatible groups of scalar types (enums read as `int32`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ScalarGroup {
    Varint,
    Zigzag,
    StringOrBytes,
    Fixed32,
    Fixed64,
    Float,
    Double,
}

/// What part of a field a type belongs to, for messages.
#[derive(Clone, Copy)]
enum Part {
    Field,
    MapKey,
    MapValue,
}

/// The field being compared, for paths and messages.
struct FieldAt<'a> {
    message: &'a str,
    name: &'a str,
    number: u32,
}

impl<'a> FieldAt<'a> {
    fn of(message: &'a str, field: &'a FieldDescriptor) -> FieldAt<'a> {
        FieldAt {
            message,
            name: field.name(),
            number: field.number(),
        }
    }

    fn path(&self) -> String {
        format!("#/{}/{}", self.message, self.number)
    }

    fn describe(&self, part: Part) -> String {
        let field = format!("field {} ({}) of {}", self.number, self.name, self.message);
        match part {
            Part::Field => field,
            Part::MapKey => format!("the map key of {field}"),
            Part::MapValue => format!("the map value of {field}"),
        }
    }
}

/// A message's fields by number, with the (non-synthetic) oneof each sits
/// in, and its oneofs in declaration order.
struct Members {
    fields: BTreeMap<u32, (FieldDescriptor, Option<String>)>,
    oneofs: Vec<(String, Vec<FieldDescriptor>)>,
}

impl Members {
    fn of(message: &MessageDescriptor) -> Members {
        let fields = message
            .fields()
            .map(|f| {
                let oneof = f
                    .containing_oneof()
                    .filter(|o| !o.is_synthetic())
                    .map(|o| o.name().to_owned());
                (f.number(), (f, oneof))
            })
            .collect();
        let oneofs = message
            .oneofs()
            .filter(|o| !o.is_synthetic())
            .map(|o| (o.name().to_owned(), o.fields().collect()))
            .collect();
        Members { fields, oneofs }
    }

    fn top_level(&self, number: u32) -> Option<&FieldDescriptor> {
        match self.fields.get(&number) {
            Some((field, None)) => Some(field),
            _ => None,
        }
    }

    /// The oneof of these (reader) members that continues writer oneof
    /// `name` of `writer`: the one of the same name, else the one holding
    /// any of its members (a renamed oneof).
    fn successor<'m>(&'m self, writer: &Members, name: &str) -> Option<&'m str> {
        if let Some((same, _)) = self.oneofs.iter().find(|(n, _)| n == name) {
            return Some(same);
        }
        let (_, members) = writer.oneofs.iter().find(|(n, _)| n == name)?;
        members
            .iter()
            .find_map(|f| match self.fields.get(&f.number()) {
                Some((_, Some(oneof))) => Some(oneof.as_str()),
                _ => None,
            })
    }
}

impl Diff {
    /// Confluent's `compareTypeElements` for messages: match by simple
    /// name; a writer message the reader lacks is removed; a matched pair
    /// is queued for comparison.
    fn match_messages(
        &mut self,
        writer: impl Iterator<Item = MessageDescriptor>,
        reader: impl Iterator<Item = MessageDescriptor>,
        out: &mut Findings,
    ) {
        let reader: Vec<MessageDescriptor> = reader.filter(|m| !m.is_map_entry()).collect();
        for w in writer.filter(|m| !m.is_map_entry()) {
            match reader.iter().find(|r| r.name() == w.name()) {
                Some(r) => {
                    let pair = self.pair(&w, r);
                    out.depends_on.push(pair);
                }
                None => out.push(Incompatibility {
                    kind: "MESSAGE_REMOVED".to_owned(),
                    path: format!("#/{}", w.full_name()),
                    message: format!(
                        "message {} was removed, so data written with it cannot be read",
                        w.full_name()
                    ),
                }),
            }
        }
    }

    /// The index of the pair (`w`, `r`), queued if new.
    fn pair(&mut self, w: &MessageDescriptor, r: &MessageDescriptor) -> usize {
        let key = (w.full_name().to_owned(), r.full_name().to_owned());
        if let Some(&index) = self.pair_index.get(&key) {
            return index;
        }
        let index = self.pairs.len();
        self.pairs.push(Pair {
            writer: w.clone(),
            reader: r.clone(),
            items: Vec::new(),
            depends_on: Vec::new(),
        });
        self.pair_index.insert(key, index);
        index
    }

    /// Confluent's `MessageSchemaDiff.compare`, for pair `index`.
    fn compare_pair(&mut self, index: usize) {
        let w = self.pairs[index].writer.clone();
        let r = self.pairs[index].reader.clone();
        self.current = Some(index);
        let mut found = Findings::default();
        self.compare_fields(&w, &r, &mut found);
        self.match_messages(w.child_messages(), r.child_messages(), &mut found);
        let pair = &mut self.pairs[index];
        pair.items = found.items;
        pair.depends_on = found.depends_on;
    }

    /// Which pairs are incompatible: those with a finding of their own,
    /// and those that depend on an incompatible one, through any number
    /// of references (cycles included).
    fn incompatible_pairs(&self) -> Vec<bool> {
        let mut dependents = vec![Vec::new(); self.pairs.len()];
        for (index, pair) in self.pairs.iter().enumerate() {
            for &target in &pair.depends_on {
                dependents[target].push(index);
            }
        }
        let mut incompatible: Vec<bool> = self
            .pairs
            .iter()
            .map(|p| p.items.iter().any(|i| matches!(i, Item::Found(_))))
            .collect();
        let mut work: Vec<usize> = (0..self.pairs.len()).filter(|&i| incompatible[i]).collect();
        while let Some(index) = work.pop() {
            for &dependent in &dependents[index] {
                if !incompatible[dependent] {
                    incompatible[dependent] = true;
                    work.push(dependent);
                }
            }
        }
        incompatible
    }

    fn compare_fields(&mut self, w: &MessageDescriptor, r: &MessageDescriptor, out: &mut Findings) {
        let message = r.full_name();
        let wm = Members::of(w);
        let rm = Members::of(r);

        // Writer top-level fields that did not move into a reader oneof.
        let mut w_top: BTreeSet<u32> = wm
            .fields
            .iter()
            .filter(|(_, (_, oneof))| oneof.is_none())
            .map(|(n, _)| *n)
            .collect();

        // Oneofs may not join fields that could be set together before:
        // the members a reader oneof had in the writer must all come from
        // one writer oneof, or be a single top-level field.
        for (oneof, fields) in &rm.oneofs {
            let mut groups = BTreeSet::new();
            let mut from_top_level = Vec::new();
            for f in fields {
                w_top.remove(&f.number());
                match wm.fields.get(&f.number()) {
                    Some((_, Some(w_oneof))) => {
                        groups.insert(format!("oneof {w_oneof}"));
                    }
                    Some((wf, None)) => {
                        groups.insert(format!("field {}", wf.number()));
                        from_top_level.push(format!("{} ({})", wf.number(), wf.name()));
                    }
                    None => {}
                }
            }
            if groups.len() > 1 {
                let path = format!("#/{message}/{oneof}");
                if from_top_level.len() > 1 {
                    out.push(Incompatibility {
                        kind: "MULTIPLE_FIELDS_MOVED_TO_ONEOF".to_owned(),
                        path,
                        message: format!(
                            "fields {} of {message} were moved into oneof {oneof}, so data \
                             that sets more than one of them cannot be read",
                            from_top_level.join(", ")
                        ),
                    });
                } else {
                    out.push(Incompatibility {
                        kind: "FIELD_MOVED_TO_EXISTING_ONEOF".to_owned(),
                        path,
                        message: format!(
                            "oneof {oneof} of {message} now holds fields that were not \
                             exclusive before ({}), so data that sets more than one of them \
                             cannot be read",
                            groups.into_iter().collect::<Vec<_>>().join(", ")
                        ),
                    });
                }
            }
        }

        let numbers: BTreeSet<u32> = wm.fields.keys().chain(rm.fields.keys()).copied().collect();
        for number in numbers {
            let wf = wm.fields.get(&number);
            let rf = rm.fields.get(&number);
            let at = |f| FieldAt::of(message, f);
            if let (Some((wf, _)), Some((rf, _))) = (wf, rf) {
                let at = at(rf);
                self.compare_types(
                    field_type(wf),
                    field_type(rf),
                    Some(wf.cardinality()),
                    Some(rf.cardinality()),
                    &at,
                    Part::Field,
                    out,
                );
            }
            // Removed from a oneof that the reader still has, under its
            // name or renamed (removing the whole oneof is compatible, as
            // is moving the field elsewhere).
            if let (Some((wf, Some(w_oneof))), None) = (wf, rf)
                && let Some(r_oneof) = rm.successor(&wm, w_oneof)
            {
                let renamed = if r_oneof == w_oneof {
                    String::new()
                } else {
                    format!(" (now named {r_oneof})")
                };
                out.push(Incompatibility {
                    kind: "ONEOF_FIELD_REMOVED".to_owned(),
                    path: at(wf).path(),
                    message: format!(
                        "{} was removed from oneof {w_oneof}{renamed}, so data that sets it \
                         reads as none of the oneof's fields set",
                        at(wf).describe(Part::Field)
                    ),
                });
            }
            let in_w_top = w_top.contains(&number);
            let r_top = rm.top_level(number);
            match (in_w_top, r_top) {
                (true, None) => {
                    if let Some((wf, _)) = wf
                        && wf.is_required()
                    {
                        out.push(Incompatibility {
                            kind: "REQUIRED_FIELD_REMOVED".to_owned(),
                            path: at(wf).path(),
                            message: format!(
                                "required {} was removed; required fields can never be \
                                 removed, since readers that still require them reject data \
                                 without them",
                                at(wf).describe(Part::Field)
                            ),
                        });
                    }
                }
                (false, Some(rf)) if rf.is_required() => out.push(Incompatibility {
                    kind: "REQUIRED_FIELD_ADDED".to_owned(),
                    path: at(rf).path(),
                    message: format!(
                        "required {} was added, so data written without it cannot be read",
                        at(rf).describe(Part::Field)
                    ),
                }),
                _ => {}
            }
        }
    }

    /// Confluent's `FieldSchemaDiff.compareLabelsAndTypes`. Labels are
    /// `None` for map keys and values.
    #[allow(clippy::too_many_arguments)]
    fn compare_types(
        &mut self,
        w: FieldType,
        r: FieldType,
        w_label: Option<Cardinality>,
        r_label: Option<Cardinality>,
        at: &FieldAt<'_>,
        part: Part,
        out: &mut Findings,
    ) {
        match (w, r) {
            (
                FieldType::Scalar {
                    group: w_group,
                    name: w_name,
                },
                FieldType::Scalar {
                    group: r_group,
                    name: r_name,
                },
            ) => {
                if w_group != r_group {
                    out.push(Incompatibility {
                        kind: "FIELD_SCALAR_KIND_CHANGED".to_owned(),
                        path: at.path(),
                        message: format!(
                            "{} changed from {w_name} to {r_name}, which is not wire-compatible",
                            at.describe(part)
                        ),
                    });
                } else if let (Some(w_label), Some(r_label)) = (w_label, r_label)
                    && w_label != r_label
                    && w_group != ScalarGroup::StringOrBytes
                {
                    out.push(Incompatibility {
                        kind: "FIELD_NUMERIC_LABEL_CHANGED".to_owned(),
                        path: at.path(),
                        message: format!(
                            "{} changed from {} to {}, which is not wire-compatible for a \
                             numeric field",
                            at.describe(part),
                            label_display(w_label),
                            label_display(r_label)
                        ),
                    });
                }
            }
            (FieldType::Message(w_message), FieldType::Message(r_message)) => {
                self.compare_message_types(&w_message, &r_message, at, part, out);
            }
            (FieldType::Map(w_key, w_value), FieldType::Map(r_key, r_value)) => {
                self.compare_types(*w_key, *r_key, None, None, at, Part::MapKey, out);
                self.compare_types(*w_value, *r_value, None, None, at, Part::MapValue, out);
            }
            (w, r) => out.push(Incompatibility {
                kind: "FIELD_KIND_CHANGED".to_owned(),
                path: at.path(),
                message: format!(
                    "{} changed from {} to {}, which is not wire-compatible",
                    at.describe(part),
                    w.display(),
                    r.display()
                ),
            }),
        }
    }

    /// Confluent's `FieldSchemaDiff.compareMessageTypes`.
    fn compare_message_types(
        &mut self,
        w: &MessageDescriptor,
        r: &MessageDescriptor,
        at: &FieldAt<'_>,
        part: Part,
        out: &mut Findings,
    ) {
        if relative_name(w) != relative_name(r) {
            out.push(Incompatibility {
                kind: "FIELD_NAMED_TYPE_CHANGED".to_owned(),
                path: at.path(),
                message: format!(
                    "{} changed from message {} to message {}, a different message type",
                    at.describe(part),
                    w.full_name(),
                    r.full_name()
                ),
            });
            return;
        }
        let both_main = w.parent_file().name() == self.writer_main
            && r.parent_file().name() == self.reader_main;
        if both_main {
            // Compared by the walk over the main files' messages.
            return;
        }
        let target = self.pair(w, r);
        if self.current == Some(target) {
            // A message that contains itself: its own findings are
            // reported once, not again through the recursive field.
            return;
        }
        out.depends_on.push(target);
        out.items.push(Item::NamedType {
            target,
            found: Incompatibility {
                kind: "FIELD_NAMED_TYPE_CHANGED".to_owned(),
                path: at.path(),
                message: format!(
                    "{} is of message {}, which changed incompatibly (see the findings under \
                     #/{})",
                    at.describe(part),
                    r.full_name(),
                    r.full_name()
                ),
            },
        });
    }
}

fn field_type(field: &FieldDescriptor) -> FieldType {
    match field.kind() {
        Kind::Message(entry) if field.is_map() => FieldType::Map(
            Box::new(field_type(&entry.map_entry_key_field())),
            Box::new(field_type(&entry.map_entry_value_field())),
        ),
        kind => kind_type(kind),
    }
}

fn kind_type(kind: Kind) -> FieldType {
    let scalar = |group, name: &str| FieldType::Scalar {
        group,
        name: name.to_owned(),
    };
    match kind {
        Kind::Message(message) => FieldType::Message(message),
        Kind::Enum(e) => scalar(ScalarGroup::Varint, &format!("enum {}", e.full_name())),
        Kind::Int32 => scalar(ScalarGroup::Varint, "int32"),
        Kind::Int64 => scalar(ScalarGroup::Varint, "int64"),
        Kind::Uint32 => scalar(ScalarGroup::Varint, "uint32"),
        Kind::Uint64 => scalar(ScalarGroup::Varint, "uint64"),
        Kind::Bool => scalar(ScalarGroup::Varint, "bool"),
        Kind::Sint32 => scalar(ScalarGroup::Zigzag, "sint32"),
        Kind::Sint64 => scalar(ScalarGroup::Zigzag, "sint64"),
        Kind::String => scalar(ScalarGroup::StringOrBytes, "string"),
        Kind::Bytes => scalar(ScalarGroup::StringOrBytes, "bytes"),
        Kind::Fixed32 => scalar(ScalarGroup::Fixed32, "fixed32"),
        Kind::Sfixed32 => scalar(ScalarGroup::Fixed32, "sfixed32"),
        Kind::Fixed64 => scalar(ScalarGroup::Fixed64, "fixed64"),
        Kind::Sfixed64 => scalar(ScalarGroup::Fixed64, "sfixed64"),
        Kind::Float => scalar(ScalarGroup::Float, "float"),
        Kind::Double => scalar(ScalarGroup::Double, "double"),
    }
}

impl FieldType {
    fn display(&self) -> String {
        match self {
            FieldType::Scalar { name, .. } => name.clone(),
            FieldType::Message(message) => format!("message {}", message.full_name()),
            FieldType::Map(key, value) => format!("map<{}, {}>", key.display(), value.display()),
        }
    }
}

/// The name within its package: what Confluent compares, so that a type
/// moving between packages (or references) keeps its identity.
fn relative_name(message: &MessageDescriptor) -> &str {
    let package = message.package_name();
    if package.is_empty() {
        return message.full_name();
    }
    message
        .full_name()
        .strip_prefix(package)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(message.full_name())
}

fn label_display(label: Cardinality) -> &'static str {
    match label {
        Cardinality::Optional => "singular",
        Cardinality::Required => "required",
        Cardinality::Repeated => "repeated",
    }
}

fn package_display(package: &str) -> &str {
    if package.is_empty() {
        "(none)"
    } else {
        package
    }
}
