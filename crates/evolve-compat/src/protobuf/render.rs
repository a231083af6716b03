//! A compiled file written back as `.proto` text.
//!
//! Confluent Schema Registry stores a schema registered as a serialized
//! `FileDescriptorProto` (what its Python serializer sends) as the `.proto`
//! text it renders from the descriptor, and so serves text for it; this is
//! that renderer. It writes what the descriptor says, in one layout: the
//! syntax, the package, imports (`public` and `weak` too), options (the
//! standard ones and custom ones by their extension's full name), messages
//! with their fields (proto2 and proto3 labels, proto3 `optional`, `map<K,
//! V>`, oneofs, defaults, `json_name` when not the default), nested
//! messages and enums, extension ranges, reserved ranges and names,
//! `extend` blocks, enums (with `allow_alias` and value options) and
//! services. Type names are written fully qualified (`.pkg.Message`), so
//! they resolve as compiled whatever the scope.
//!
//! A descriptor it cannot write faithfully (a group, an editions file, an
//! option whose extension is not known, options on an extension range) is
//! an error; [`super::render`] also compiles the text again and gives up
//! unless the result is the same file, so a caller never stores a text
//! that means something else.

use std::fmt::Write;

use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
use prost_reflect::prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, ServiceDescriptorProto,
};
use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, Kind, Value};

/// Why a descriptor is not rendered (internal: the caller falls back).
#[derive(Debug)]
pub(super) struct Unsupported(#[allow(dead_code)] pub String);

type Result<T> = std::result::Result<T, Unsupported>;

fn unsupported<T>(what: impl Into<String>) -> Result<T> {
    Err(Unsupported(what.into()))
}

/// The largest field number plus one, as reserved and extension ranges
/// store `max` (their ends are exclusive).
const FIELD_NUMBER_END: i32 = 536_870_912;

pub(super) fn render(file: &FileDescriptor) -> Result<String> {
    let proto = file.file_descriptor_proto();
    let pool = file.parent_pool();
    let proto3 = match proto.syntax.as_deref() {
        None | Some("proto2") => false,
        Some("proto3") => true,
        Some(other) => return unsupported(format!("syntax {other:?}")),
    };
    let mut r = Renderer {
        pool,
        proto3,
        out: String::new(),
        depth: 0,
    };
    r.line(if proto3 {
        "syntax = \"proto3\";"
    } else {
        "syntax = \"proto2\";"
    });
    if let Some(package) = proto.package.as_deref().filter(|p| !p.is_empty()) {
        r.line(&format!("package {package};"));
    }
    if !proto.dependency.is_empty() {
        r.out.push('\n');
    }
    for (i, dependency) in proto.dependency.iter().enumerate() {
        let index = i32::try_from(i).unwrap_or(i32::MAX);
        let kind = if proto.public_dependency.contains(&index) {
            "public "
        } else if proto.weak_dependency.contains(&index) {
            "weak "
        } else {
            ""
        };
        r.line(&format!("import {kind}{};", quote(dependency)));
    }
    let options = file.options();
    if has_options(&options) {
        r.out.push('\n');
        r.option_statements(&options)?;
    }
    let package = proto.package.as_deref().unwrap_or("");
    for message in &proto.message_type {
        r.out.push('\n');
        r.message(&join(package, message.name()), message)?;
    }
    for e in &proto.enum_type {
        r.out.push('\n');
        r.enumeration(&join(package, e.name()), e)?;
    }
    for extension in &proto.extension {
        r.out.push('\n');
        r.extensions(package, std::slice::from_ref(extension))?;
    }
    for service in &proto.service {
        r.out.push('\n');
        r.service(&join(package, service.name()), service)?;
    }
    Ok(r.out)
}

struct Renderer<'p> {
    pool: &'p DescriptorPool,
    proto3: bool,
    out: String,
    depth: usize,
}

impl Renderer<'_> {
    fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn open(&mut self, text: &str) {
        self.line(&format!("{text} {{"));
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }

    /// `option NAME = VALUE;` for every option set in `options`.
    fn option_statements(&mut self, options: &DynamicMessage) -> Result<()> {
        for (name, value) in option_assignments(options)? {
            self.line(&format!("option {name} = {value};"));
        }
        Ok(())
    }

    fn message(&mut self, full_name: &str, message: &DescriptorProto) -> Result<()> {
        let Some(descriptor) = self.pool.get_message_by_name(full_name) else {
            return unsupported(format!("message {full_name} is not in the pool"));
        };
        self.open(&format!("message {}", message.name()));
        self.option_statements(&descriptor.options())?;
        // Map entries are written as their `map<K, V>` fields; the other
        // nested messages go before the first map field whose entry comes
        // after them, so that recompiling lists the nested types (map
        // entries included) in the same order.
        let entry_of = |field: &FieldDescriptorProto| -> Option<usize> {
            if field.label() != Label::Repeated || field.r#type() != Type::Message {
                return None;
            }
            let name = field.type_name().strip_prefix('.')?;
            let short = name.strip_prefix(full_name)?.strip_prefix('.')?;
            message.nested_type.iter().position(|n| {
                n.name() == short && n.options.as_ref().is_some_and(|o| o.map_entry())
            })
        };
        let mut nested_written = vec![false; message.nested_type.len()];
        let mut oneof_written = vec![false; message.oneof_decl.len()];
        for field in &message.field {
            if let Some(entry) = entry_of(field) {
                let earlier = message.nested_type.iter().zip(nested_written.iter_mut());
                for (nested, written) in earlier.take(entry) {
                    if !*written {
                        *written = true;
                        if nested.options.as_ref().is_some_and(|o| o.map_entry()) {
                            return unsupported("a map entry without its field");
                        }
                        self.message(&join(full_name, nested.name()), nested)?;
                    }
                }
                nested_written[entry] = true;
                self.map_field(full_name, field, &message.nested_type[entry])?;
                continue;
            }
            match field.oneof_index {
                Some(index) if !field.proto3_optional() => {
                    let index = usize::try_from(index).unwrap_or(usize::MAX);
                    if oneof_written.get(index).copied().unwrap_or(true) {
                        // Written with the oneof's first field.
                        if index >= oneof_written.len() {
                            return unsupported("a field of an undeclared oneof");
                        }
                        continue;
                    }
                    oneof_written[index] = true;
                    let name = message.oneof_decl[index].name();
                    let Some(oneof) = descriptor.oneofs().find(|o| o.name() == name) else {
                        return unsupported(format!("oneof {name} is not in the pool"));
                    };
                    self.open(&format!("oneof {name}"));
                    self.option_statements(&oneof.options())?;
                    for member in message
                        .field
                        .iter()
                        .filter(|f| f.oneof_index == Some(index as i32))
                    {
                        self.field(full_name, member, true)?;
                    }
                    self.close();
                }
                _ => self.field(full_name, field, false)?,
            }
        }
        for (i, nested) in message.nested_type.iter().enumerate() {
            if nested_written[i] {
                continue;
            }
            if nested.options.as_ref().is_some_and(|o| o.map_entry()) {
                return unsupported("a map entry without its field");
            }
            self.message(&join(full_name, nested.name()), nested)?;
        }
        for e in &message.enum_type {
            self.enumeration(&join(full_name, e.name()), e)?;
        }
        self.extensions(full_name, &message.extension)?;
        for range in &message.extension_range {
            if range.options.is_some() {
                return unsupported("options on an extension range");
            }
            self.line(&format!(
                "extensions {};",
                range_text(
                    range.start(),
                    range.end().saturating_sub(1),
                    FIELD_NUMBER_END - 1
                )
            ));
        }
        for range in &message.reserved_range {
            self.line(&format!(
                "reserved {};",
                range_text(
                    range.start(),
                    range.end().saturating_sub(1),
                    FIELD_NUMBER_END - 1
                )
            ));
        }
        for name in &message.reserved_name {
            self.line(&format!("reserved {};", quote(name)));
        }
        self.close();
        Ok(())
    }

    /// One field of message `scope`; `in_oneof` fields have no label.
    fn field(&mut self, scope: &str, field: &FieldDescriptorProto, in_oneof: bool) -> Result<()> {
        let label = if in_oneof { "" } else { self.label(field) };
        let options = match self.pool.get_message_by_name(scope) {
            Some(m) => match m.get_field(field.number() as u32) {
                Some(f) => f.options(),
                None => return unsupported(format!("field {} of {scope}", field.number())),
            },
            None => return unsupported(format!("message {scope} is not in the pool")),
        };
        let brackets = self.field_options(field, &options)?;
        self.line(&format!(
            "{label}{} {} = {}{brackets};",
            type_name(field)?,
            field.name(),
            field.number()
        ));
        Ok(())
    }

    fn label(&self, field: &FieldDescriptorProto) -> &'static str {
        match field.label() {
            Label::Repeated => "repeated ",
            Label::Required => "required ",
            Label::Optional if !self.proto3 || field.proto3_optional() => "optional ",
            Label::Optional => "",
        }
    }

    fn map_field(
        &mut self,
        scope: &str,
        field: &FieldDescriptorProto,
        entry: &DescriptorProto,
    ) -> Result<()> {
        let part = |number: i32| -> Result<String> {
            match entry.field.iter().find(|f| f.number() == number) {
                Some(f) => type_name(f),
                None => unsupported("a map entry without a key or value"),
            }
        };
        let options = match self
            .pool
            .get_message_by_name(scope)
            .and_then(|m| m.get_field(field.number() as u32))
        {
            Some(f) => f.options(),
            None => return unsupported(format!("field {} of {scope}", field.number())),
        };
        let brackets = self.field_options(field, &options)?;
        self.line(&format!(
            "map<{}, {}> {} = {}{brackets};",
            part(1)?,
            part(2)?,
            field.name(),
            field.number()
        ));
        Ok(())
    }

    /// ` [default = ..., json_name = "...", OPTION = VALUE, ...]`, or
    /// nothing.
    fn field_options(
        &self,
        field: &FieldDescriptorProto,
        options: &DynamicMessage,
    ) -> Result<String> {
        let mut parts = Vec::new();
        if let Some(default) = &field.default_value {
            parts.push(format!("default = {}", default_text(field, default)?));
        }
        if let Some(json_name) = &field.json_name
            && *json_name != default_json_name(field.name())
        {
            parts.push(format!("json_name = {}", quote(json_name)));
        }
        for (name, value) in option_assignments(options)? {
            parts.push(format!("{name} = {value}"));
        }
        Ok(if parts.is_empty() {
            String::new()
        } else {
            format!(" [{}]", parts.join(", "))
        })
    }

    /// `extend` blocks for `extensions` declared in `scope` (a package or a
    /// message), one block per extension so that their order is kept.
    fn extensions(&mut self, scope: &str, extensions: &[FieldDescriptorProto]) -> Result<()> {
        for extension in extensions {
            let full_name = join(scope, extension.name());
            let Some(descriptor) = self.pool.get_extension_by_name(&full_name) else {
                return unsupported(format!("extension {full_name} is not in the pool"));
            };
            let brackets = self.field_options(extension, &descriptor.options())?;
            let label = match extension.label() {
                Label::Repeated => "repeated ",
                Label::Required => "required ",
                Label::Optional if !self.proto3 || extension.proto3_optional() => "optional ",
                Label::Optional => "",
            };
            self.open(&format!("extend {}", extension.extendee()));
            self.line(&format!(
                "{label}{} {} = {}{brackets};",
                type_name(extension)?,
                extension.name(),
                extension.number()
            ));
            self.close();
        }
        Ok(())
    }

    fn enumeration(&mut self, full_name: &str, e: &EnumDescriptorProto) -> Result<()> {
        let Some(descriptor) = self.pool.get_enum_by_name(full_name) else {
            return unsupported(format!("enum {full_name} is not in the pool"));
        };
        self.open(&format!("enum {}", e.name()));
        self.option_statements(&descriptor.options())?;
        for value in &e.value {
            // By name: with `allow_alias`, numbers are not unique.
            let Some(described) = descriptor.get_value_by_name(value.name()) else {
                return unsupported(format!("enum value {} is not in the pool", value.name()));
            };
            let mut parts = Vec::new();
            for (name, v) in option_assignments(&described.options())? {
                parts.push(format!("{name} = {v}"));
            }
            let brackets = if parts.is_empty() {
                String::new()
            } else {
                format!(" [{}]", parts.join(", "))
            };
            self.line(&format!("{} = {}{brackets};", value.name(), value.number()));
        }
        for range in &e.reserved_range {
            self.line(&format!(
                "reserved {};",
                range_text(range.start(), range.end(), i32::MAX)
            ));
        }
        for name in &e.reserved_name {
            self.line(&format!("reserved {};", quote(name)));
        }
        self.close();
        Ok(())
    }

    fn service(&mut self, full_name: &str, service: &ServiceDescriptorProto) -> Result<()> {
        let Some(descriptor) = self.pool.get_service_by_name(full_name) else {
            return unsupported(format!("service {full_name} is not in the pool"));
        };
        self.open(&format!("service {}", service.name()));
        self.option_statements(&descriptor.options())?;
        for method in &service.method {
            let Some(described) = descriptor.methods().find(|m| m.name() == method.name()) else {
                return unsupported(format!("method {} is not in the pool", method.name()));
            };
            let stream = |yes: bool| if yes { "stream " } else { "" };
            let head = format!(
                "rpc {} ({}{}) returns ({}{})",
                method.name(),
                stream(method.client_streaming()),
                method.input_type(),
                stream(method.server_streaming()),
                method.output_type()
            );
            let options = described.options();
            if has_options(&options) {
                self.open(&head);
                self.option_statements(&options)?;
                self.close();
            } else {
                self.line(&format!("{head};"));
            }
        }
        self.close();
        Ok(())
    }
}

fn join(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_owned()
    } else {
        format!("{scope}.{name}")
    }
}

/// `N`, `N to M` or `N to max` (`max` being the largest value allowed).
fn range_text(start: i32, last: i32, max: i32) -> String {
    if last == start {
        start.to_string()
    } else if last == max {
        format!("{start} to max")
    } else {
        format!("{start} to {last}")
    }
}

/// A field's type as written in `.proto`: a scalar's keyword, or the
/// fully qualified name of a message or enum.
fn type_name(field: &FieldDescriptorProto) -> Result<String> {
    Ok(match field.r#type() {
        Type::Double => "double".into(),
        Type::Float => "float".into(),
        Type::Int64 => "int64".into(),
        Type::Uint64 => "uint64".into(),
        Type::Int32 => "int32".into(),
        Type::Fixed64 => "fixed64".into(),
        Type::Fixed32 => "fixed32".into(),
        Type::Bool => "bool".into(),
        Type::String => "string".into(),
        Type::Bytes => "bytes".into(),
        Type::Uint32 => "uint32".into(),
        Type::Sfixed32 => "sfixed32".into(),
        Type::Sfixed64 => "sfixed64".into(),
        Type::Sint32 => "sint32".into(),
        Type::Sint64 => "sint64".into(),
        Type::Message | Type::Enum => {
            let name = field.type_name();
            if name.starts_with('.') {
                name.to_owned()
            } else {
                format!(".{name}")
            }
        }
        Type::Group => return unsupported("a group field"),
    })
}

/// protoc's default `json_name`: the name with each `_x` turned into `X`.
fn default_json_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A proto2 default as written after `default =`: the descriptor keeps a
/// string's default as is, a bytes default C-escaped, an enum's as the
/// value's name, numbers (`inf`, `nan` too) as text.
fn default_text(field: &FieldDescriptorProto, default: &str) -> Result<String> {
    Ok(match field.r#type() {
        Type::String => quote(default),
        Type::Bytes => format!("\"{default}\""),
        Type::Group | Type::Message => return unsupported("a default on a message field"),
        // protox keeps a float's default in full decimal (`1e20` as
        // `100000000000000000000`), which reads back as an integer literal
        // too large; the shortest form reads back as the same number.
        Type::Double | Type::Float => match default.parse::<f64>() {
            Ok(x) if x.is_finite() => format!("{x:?}"),
            _ => default.to_owned(),
        },
        _ => default.to_owned(),
    })
}

/// Whether any option is set (known, extension or unknown).
fn has_options(options: &DynamicMessage) -> bool {
    options.fields().next().is_some()
        || options.extensions().next().is_some()
        || options.unknown_fields().next().is_some()
}

/// `(name, value)` for every option set in `options`, as written after
/// `option` or inside `[...]`: a repeated option once per element, an
/// extension as `(.full.name)`. An option the pool has no extension for
/// (an unknown field) cannot be named, so it is an error.
fn option_assignments(options: &DynamicMessage) -> Result<Vec<(String, String)>> {
    if options.unknown_fields().next().is_some() {
        return unsupported("an option whose extension is not known");
    }
    let mut out = Vec::new();
    for (field, value) in options.fields() {
        push_option(&mut out, field.name().to_owned(), &field.kind(), value)?;
    }
    for (extension, value) in options.extensions() {
        push_option(
            &mut out,
            format!("(.{})", extension.full_name()),
            &extension.kind(),
            value,
        )?;
    }
    Ok(out)
}

fn push_option(
    out: &mut Vec<(String, String)>,
    name: String,
    kind: &Kind,
    value: &Value,
) -> Result<()> {
    match value {
        Value::List(items) => {
            for item in items {
                out.push((name.clone(), option_value(kind, item)?));
            }
        }
        Value::Map(_) => return unsupported("a map-valued option"),
        _ => out.push((name, option_value(kind, value)?)),
    }
    Ok(())
}

fn option_value(kind: &Kind, value: &Value) -> Result<String> {
    Ok(match value {
        Value::Bool(b) => b.to_string(),
        Value::I32(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        Value::U32(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::F32(x) => float_text(f64::from(*x), format!("{x:?}")),
        Value::F64(x) => float_text(*x, format!("{x:?}")),
        Value::String(s) => quote(s),
        Value::Bytes(b) => quote_bytes(b),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => match e.get_value(*n) {
                Some(v) => v.name().to_owned(),
                None => return unsupported(format!("enum number {n} has no name")),
            },
            _ => return unsupported("an enum number of a non-enum option"),
        },
        Value::Message(m) => {
            if m.unknown_fields().next().is_some() {
                return unsupported("an option message with unknown fields");
            }
            format!("{{ {} }}", m.to_text_format())
        }
        Value::List(_) | Value::Map(_) => return unsupported("a nested list or map option"),
    })
}

fn float_text(x: f64, shortest: String) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x == f64::INFINITY {
        "inf".into()
    } else if x == f64::NEG_INFINITY {
        "-inf".into()
    } else {
        shortest
    }
}

/// A string literal: quotes, backslashes and control characters escaped,
/// everything else as is (UTF-8).
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A bytes literal: printable ASCII as is, every other byte in octal.
fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}
