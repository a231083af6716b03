//! Parsing Canonical Form, written over apache-avro's schema tree.
//!
//! apache-avro 0.22 has `Schema::canonical_form`, but it keeps `order`,
//! `precision` and `scale`, writes `{"type":"int"}` for a logical type
//! instead of `"int"`, and panics on some custom attributes, so it is not
//! used.

use std::collections::HashSet;
use std::fmt::Write;

use apache_avro::Schema;
use apache_avro::schema::{DecimalSchema, FixedSchema, InnerDecimalSchema, Name, UuidSchema};

use super::NamedTypes;

pub(super) fn canonical_form<'a>(schema: &'a Schema, names: &NamedTypes<'a>) -> String {
    let mut pcf = Pcf {
        names,
        out: String::new(),
        defined: HashSet::new(),
    };
    pcf.schema(schema);
    pcf.out
}

struct Pcf<'a, 'n> {
    names: &'n NamedTypes<'a>,
    out: String,
    /// Named types already written in full; later uses are by name.
    defined: HashSet<&'a Name>,
}

impl<'a> Pcf<'a, '_> {
    fn schema(&mut self, schema: &'a Schema) {
        match schema {
            Schema::Null => self.out.push_str("\"null\""),
            Schema::Boolean => self.out.push_str("\"boolean\""),
            Schema::Int | Schema::Date | Schema::TimeMillis => self.out.push_str("\"int\""),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.out.push_str("\"long\""),
            Schema::Float => self.out.push_str("\"float\""),
            Schema::Double => self.out.push_str("\"double\""),
            Schema::Bytes
            | Schema::BigDecimal
            | Schema::Uuid(UuidSchema::Bytes)
            | Schema::Decimal(DecimalSchema {
                inner: InnerDecimalSchema::Bytes,
                ..
            }) => self.out.push_str("\"bytes\""),
            Schema::String | Schema::Uuid(UuidSchema::String) => self.out.push_str("\"string\""),
            Schema::Array(a) => {
                self.out.push_str("{\"type\":\"array\",\"items\":");
                self.schema(&a.items);
                self.out.push('}');
            }
            Schema::Map(m) => {
                self.out.push_str("{\"type\":\"map\",\"values\":");
                self.schema(&m.types);
                self.out.push('}');
            }
            Schema::Union(u) => {
                self.out.push('[');
                for (i, variant) in u.variants().iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.schema(variant);
                }
                self.out.push(']');
            }
            Schema::Record(r) => {
                if !self.open_named(&r.name) {
                    return;
                }
                self.out.push_str(",\"type\":\"record\",\"fields\":[");
                for (i, field) in r.fields.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.out.push_str("{\"name\":");
                    self.string(&field.name);
                    self.out.push_str(",\"type\":");
                    self.schema(&field.schema);
                    self.out.push('}');
                }
                self.out.push_str("]}");
            }
            Schema::Enum(e) => {
                if !self.open_named(&e.name) {
                    return;
                }
                self.out.push_str(",\"type\":\"enum\",\"symbols\":[");
                for (i, symbol) in e.symbols.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.string(symbol);
                }
                self.out.push_str("]}");
            }
            Schema::Fixed(f)
            | Schema::Duration(f)
            | Schema::Uuid(UuidSchema::Fixed(f))
            | Schema::Decimal(DecimalSchema {
                inner: InnerDecimalSchema::Fixed(f),
                ..
            }) => self.fixed(f),
            Schema::Ref { name } => {
                // The definition's own name, also when referred to by alias.
                let name = self.names.get(name).and_then(|s| s.name()).unwrap_or(name);
                self.string(&name.fullname(None));
            }
        }
    }

    fn fixed(&mut self, f: &'a FixedSchema) {
        if self.open_named(&f.name) {
            let _ = write!(self.out, ",\"type\":\"fixed\",\"size\":{}}}", f.size);
        }
    }

    /// Writes `{"name":"full.name"` and returns true the first time a named
    /// type is met; writes just `"full.name"` and returns false after.
    fn open_named(&mut self, name: &'a Name) -> bool {
        let first = self.defined.insert(name);
        if first {
            self.out.push_str("{\"name\":");
        }
        self.string(&name.fullname(None));
        first
    }

    /// A JSON string. Names and symbols are plain identifiers after
    /// apache-avro's validation, but escape anyway.
    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", u32::from(c));
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}
