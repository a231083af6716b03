//! Protobuf: compiling `.proto` texts (with their imports) and Confluent's
//! compatibility rules between two of them.
//!
//! [`parse`] compiles with protox from memory only: the main text, the
//! texts of its references (Confluent `references`, one per import path),
//! the well-known types bundled with protox
//! (`google/protobuf/timestamp.proto` and friends) and the imports
//! Confluent bundles besides (`confluent/meta.proto`,
//! `confluent/type/decimal.proto`, `google/type/date.proto` and the other
//! `google/type` files; see [`bundled_imports`]). Nothing is read from the
//! file system.
//!
//! [`render`] writes a compiled schema back as `.proto` text, which is what
//! Confluent stores for a schema registered as a serialized descriptor.
//!
//! [`check`] ports the rules of Confluent's protobuf-provider diff
//! (`SchemaDiff`, `MessageSchemaDiff`, `OneOfDiff`, `FieldSchemaDiff`)
//! onto compiled descriptors and keeps only the incompatible differences;
//! see the `diff` module for the rules and where they differ from
//! Confluent's.

mod bundled;
mod diff;
mod render;

use std::collections::HashMap;
use std::sync::Arc;

use prost_reflect::prost::Message;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::{DynamicMessage, FileDescriptor, ReflectMessage};
use protox::file::{File, FileResolver, GoogleFileResolver};

use crate::{Incompatibility, Reference, SchemaError, SchemaType};

/// A compiled `.proto` text: the descriptor of the main file, which holds
/// the pool of every file it imports.
#[derive(Clone, Debug)]
pub struct ProtobufSchema {
    file: FileDescriptor,
}

impl ProtobufSchema {
    /// The main file's descriptor; its pool holds every file it imports.
    pub fn file(&self) -> &FileDescriptor {
        &self.file
    }
}

/// The name the main text is compiled under; it shows in error positions
/// (`schema.proto:3:5: ...`). A reference of the same name moves it aside.
const MAIN_FILE_NAME: &str = "schema.proto";

/// Compiles a `.proto` text. `references` are its imports:
/// [`Reference::name`] is the import path as written in
/// `import "x.proto";`, [`Reference::schema`] its text. An import that is
/// neither a reference nor a bundled well-known type is an error naming
/// it. The main text and the references may also be in the `serialized`
/// format (base64 of a `FileDescriptorProto`), as Confluent accepts them.
/// Errors are one line, with the `file:line:column` protox reports.
pub fn parse(text: &str, references: &[Reference]) -> Result<ProtobufSchema, SchemaError> {
    let mut main_name = MAIN_FILE_NAME.to_owned();
    let mut counter = 0;
    while references.iter().any(|r| r.name == main_name) {
        counter += 1;
        main_name = format!("schema_{counter}.proto");
    }
    let sources = Arc::new(Sources {
        main_name: main_name.clone(),
        main_text: text.to_owned(),
        // Later entries win, as in Confluent's reference map.
        references: references
            .iter()
            .map(|r| (r.name.clone(), r.schema.clone()))
            .collect(),
    });
    let mut compiler = protox::Compiler::with_file_resolver(MemoryResolver {
        sources: Arc::clone(&sources),
        google: GoogleFileResolver::new(),
    });
    compiler
        .open_file(&main_name)
        .map_err(|err| compile_error(&err, &sources))?;
    let file = compiler
        .descriptor_pool()
        .get_file_by_name(&main_name)
        .ok_or_else(|| error(format!("{main_name} is missing after compiling it")))?;
    Ok(ProtobufSchema { file })
}

/// A canonical text of the main file, for deduplicating ids: the protobuf
/// text format of its `FileDescriptorProto` without its name and source
/// positions. Whitespace, comments and the spelling of type names
/// (`Status` or `.acme.Order.Status`) do not change it; any change to a
/// declaration, an import, an option or a resolved type does. The texts of
/// the references are not part of it. A `.proto` text and the serialized
/// descriptor of the same file (what Confluent's serializers send) have
/// the same form: both are compiled descriptors, whose `json_name`s the
/// pool fills in, and `syntax = "proto2"` is written as the absence of a
/// syntax, as protox writes it. Deterministic for a given
/// protox/prost-reflect version (it may change when they are upgraded).
pub fn canonical_form(schema: &ProtobufSchema) -> String {
    let proto_descriptor = prost_reflect::prost_types::FileDescriptorProto::default().descriptor();
    // Decoding the file's own encoding keeps custom options, which the
    // prost-types struct would drop; they print as unknown fields.
    let encoded = schema.file.encode_to_vec();
    match DynamicMessage::decode(proto_descriptor, encoded.as_slice()) {
        Ok(mut message) => {
            message.clear_field_by_name("name");
            message.clear_field_by_name("source_code_info");
            if message
                .get_field_by_name("syntax")
                .is_some_and(|s| s.as_str() == Some("proto2"))
            {
                message.clear_field_by_name("syntax");
            }
            message.to_text_format_with_options(&FormatOptions::new().skip_unknown_fields(false))
        }
        // Cannot happen for an encoding prost-reflect produced itself;
        // fall back to the raw bytes, which are deterministic too.
        Err(_) => {
            let mut proto = schema.file.file_descriptor_proto().clone();
            proto.name = None;
            proto.source_code_info = None;
            if proto.syntax.as_deref() == Some("proto2") {
                proto.syntax = None;
            }
            proto
                .encode_to_vec()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }
    }
}

/// The schema in Confluent's `serialized` format: the base64 of the main
/// file's `FileDescriptorProto` (what `?format=serialized` returns and what
/// Confluent's Python serializer registers).
pub fn serialized(schema: &ProtobufSchema) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(schema.file.encode_to_vec())
}

/// The schema as `.proto` text, rendered from its compiled descriptor:
/// what Confluent stores for a schema registered in the `serialized`
/// format, and what `normalize` stores (no comments, one layout, fully
/// qualified type names). `references` are those the schema was compiled
/// with. `None` when the descriptor holds something the renderer does not
/// write (groups, options it cannot name, editions) or when the rendered
/// text does not compile back to the same [`canonical_form`]: the caller
/// then keeps the text it has, so nothing is ever lost.
pub fn render(schema: &ProtobufSchema, references: &[Reference]) -> Option<String> {
    let text = render::render(&schema.file).ok()?;
    let back = parse(&text, references).ok()?;
    (canonical_form(&back) == canonical_form(schema)).then_some(text)
}

/// The import paths Confluent resolves without a reference and so does
/// [`parse`], beside protox's `google/protobuf/*`: `confluent/meta.proto`,
/// `confluent/type/decimal.proto`, `confluent/type/variant.proto` and
/// Google's common types (`google/type/date.proto`, `money.proto`, ...).
pub fn bundled_imports() -> impl Iterator<Item = &'static str> {
    bundled::names()
}

/// Whether `text` is a schema in the `serialized` format (base64 of a
/// `FileDescriptorProto`, as Confluent's Python serializer sends it)
/// rather than `.proto` source.
pub fn is_serialized(text: &str) -> bool {
    decode_serialized(text).is_some()
}

/// The bytes of the `FileDescriptorProto` when `text` is a schema in the
/// `serialized` format (base64 of one) rather than `.proto` source: only
/// base64 characters, no white space (a `.proto` text always has some),
/// and bytes that decode as a descriptor. The bytes rather than the
/// decoded struct, which would drop custom options (extension fields).
fn decode_serialized(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = text.trim();
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    prost_reflect::prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok()?;
    Some(bytes)
}

/// Every reason `reader` cannot read data written with `writer`; empty
/// means compatible. Confluent's BACKWARD verdict is `check(new, old)`
/// (Confluent's `compare(original = old, update = new)`).
pub fn check(reader: &ProtobufSchema, writer: &ProtobufSchema) -> Vec<Incompatibility> {
    diff::check(&reader.file, &writer.file)
}

fn error(message: String) -> SchemaError {
    SchemaError {
        schema_type: SchemaType::Protobuf,
        message,
        missing_import: None,
    }
}

/// protox's `Debug` rendering is the one with `file:line:column`; its
/// `Display` has the message only. Errors without a position (an early end
/// of file, a duplicate package) get the file's name, and the end of the
/// file as the position of an early end.
fn compile_error(err: &protox::Error, sources: &Sources) -> SchemaError {
    if let Some(missing) = missing_import(err) {
        return missing;
    }
    let mut message = format!("{err:?}");
    if let Some(file) = err.file()
        && !message.starts_with(&format!("{file}:"))
    {
        let position = match sources.text(file) {
            Some(text) if message.ends_with("end of file") => {
                let (line, column) = end_position(text);
                format!("{line}:{column}: ")
            }
            _ => " ".to_owned(),
        };
        message = format!("{file}:{position}{message}");
    }
    error(message.replace(['\r', '\n'], " "))
}

/// An import that is neither a reference nor bundled, named first:
/// `import "common.proto" not found (at schema.proto:2:1): it is neither
/// given nor bundled (...); pass it as a reference`. protox names it only in its `Display`
/// (`import 'common.proto' not found`), its position in its `Debug`.
fn missing_import(err: &protox::Error) -> Option<SchemaError> {
    if !err.is_file_not_found() {
        return None;
    }
    let shown = err.to_string();
    let name = shown
        .strip_prefix("import '")
        .or_else(|| shown.strip_prefix("file '"))?
        .strip_suffix("' not found")?;
    let debug = format!("{err:?}");
    let place = match debug.strip_suffix(&format!(": {shown}")) {
        Some(position) if !position.is_empty() => format!(" (at {position})"),
        _ => err.file().map(|f| format!(" (in {f})")).unwrap_or_default(),
    };
    let mut error = error(
        format!(
            "import \"{name}\" not found{place}: it is neither given nor bundled (google/protobuf/*, google/type/*, confluent/*); pass it as a reference"
        )
        .replace(['\r', '\n'], " "),
    );
    error.missing_import = Some(name.to_owned());
    Some(error)
}

/// The 1-based line and column just past the end of `text`.
fn end_position(text: &str) -> (usize, usize) {
    let line = text.matches('\n').count() + 1;
    let last_line = text.rsplit('\n').next().unwrap_or("");
    (line, last_line.chars().count() + 1)
}

/// The texts a compilation may open: the main one and the references.
struct Sources {
    main_name: String,
    main_text: String,
    references: HashMap<String, String>,
}

impl Sources {
    fn text(&self, name: &str) -> Option<&str> {
        if name == self.main_name {
            Some(&self.main_text)
        } else {
            self.references.get(name).map(String::as_str)
        }
    }
}

/// Serves the [`Sources`], then protox's well-known types, then the
/// imports Confluent bundles ([`bundled`]), all from memory; nothing is
/// looked up on the file system. A reference of a bundled name wins, as
/// Confluent's references do.
struct MemoryResolver {
    sources: Arc<Sources>,
    google: GoogleFileResolver,
}

impl FileResolver for MemoryResolver {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.sources.text(name) {
            Some(text) => {
                if let Some(mut bytes) = decode_serialized(text) {
                    // The file is opened under the name it is imported by:
                    // a `name` field appended last wins when decoded.
                    bytes.push(0x0a);
                    prost_reflect::prost::encoding::encode_varint(name.len() as u64, &mut bytes);
                    bytes.extend_from_slice(name.as_bytes());
                    return File::decode_file_descriptor_proto(bytes.as_slice())
                        .map_err(protox::Error::new);
                }
                if let Some((line, column)) = too_deep(text) {
                    return Err(protox::Error::new(NestingTooDeep {
                        file: name.to_owned(),
                        line,
                        column,
                    }));
                }
                File::from_source(name, text)
            }
            None => match self.google.open_file(name) {
                Err(err) if err.is_file_not_found() => match bundled::source(name) {
                    Some(text) => File::from_source(name, text),
                    None => Err(err),
                },
                other => other,
            },
        }
    }
}

/// How deeply brackets may nest in a text. protox stops nested messages at
/// 31 levels, but the text-format values of options (`option (x) = { a {
/// b { ... } } }`) are parsed by recursion without a limit, and a few
/// hundred levels overflow the stack, which aborts the process.
const MAX_NESTING: usize = 64;

/// Where the brackets (`{ [ < (`) of `text` first nest deeper than
/// [`MAX_NESTING`], if they do: 1-based line and column. Brackets in
/// comments (`//`, `/* */`, and the `#` of text-format values) and string
/// literals do not count.
fn too_deep(text: &str) -> Option<(usize, usize)> {
    enum State {
        Code,
        LineComment,
        BlockComment,
        Literal(char),
    }
    let mut state = State::Code;
    let mut depth = 0usize;
    let (mut line, mut column) = (1, 0);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            column = 0;
        } else {
            column += 1;
        }
        match state {
            State::Code => match c {
                '/' if chars.peek() == Some(&'/') => state = State::LineComment,
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    column += 1;
                    state = State::BlockComment;
                }
                '#' => state = State::LineComment,
                '"' | '\'' => state = State::Literal(c),
                '{' | '[' | '<' | '(' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some((line, column));
                    }
                }
                '}' | ']' | '>' | ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
            State::LineComment => {
                if c == '\n' {
                    state = State::Code;
                }
            }
            State::BlockComment => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    column += 1;
                    state = State::Code;
                }
            }
            State::Literal(quote) => {
                if c == '\\' {
                    // The escaped character cannot end the literal.
                    if chars.next_if(|&n| n != '\n').is_some() {
                        column += 1;
                    }
                } else if c == quote || c == '\n' {
                    state = State::Code;
                }
            }
        }
    }
    None
}

/// A text [`too_deep`] refuses.
struct NestingTooDeep {
    file: String,
    line: usize,
    column: usize,
}

impl std::fmt::Display for NestingTooDeep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: brackets nest deeper than {MAX_NESTING} levels, which is not supported",
            self.file, self.line, self.column
        )
    }
}

impl std::fmt::Debug for NestingTooDeep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for NestingTooDeep {}

#[cfg(test)]
mod tests;
