//! The type catalog: which [`TypeKind`] each type OID of a server is, the
//! way `to_jsonb` categorises types (PostgreSQL's `json_categorize_type`).
//!
//! The caller runs [`TYPES_QUERY`] and [`ATTRIBUTES_QUERY`] on the server
//! (this crate does no I/O) and feeds the rows in; [`TypeCatalog::kind`]
//! then resolves domains to their base type, recognises arrays (a
//! `typelem` and `array_subscript_handler`, as `get_element_type` says)
//! and composites (`typtype = 'c'`, their non-dropped attributes in attnum
//! order), and among the rest leaves only the built-in OIDs of
//! [`TypeKind::from_builtin_oid`] special; everything else (enums, ranges,
//! `oid`, `money`, ...) is text.

use std::collections::HashMap;

use super::{MAX_TYPE_DEPTH, TypeKind};

/// Every type, one [`PgType`] per row: `oid`, `typtype`, `typelem`,
/// `typdelim`, `typbasetype`, `typrelid`, and whether `typsubscript` is
/// `array_subscript_handler`.
pub const TYPES_QUERY: &str = "SELECT oid, typtype, typelem, typdelim, typbasetype, typrelid, \
     typsubscript = 'array_subscript_handler'::regproc \
     FROM pg_type";

/// Every composite type's non-dropped attributes in attnum order:
/// `attrelid`, `attname`, `atttypid`, for [`TypeCatalog::add_attribute`].
pub const ATTRIBUTES_QUERY: &str = "SELECT a.attrelid, a.attname::text, a.atttypid \
     FROM pg_attribute a JOIN pg_type t ON t.typrelid = a.attrelid \
     WHERE t.typtype = 'c' AND a.attnum > 0 AND NOT a.attisdropped \
     ORDER BY a.attrelid, a.attnum";

/// One row of [`TYPES_QUERY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgType {
    /// `oid`.
    pub oid: u32,
    /// `typtype`: `b` base, `c` composite, `d` domain, `e` enum, ...
    pub typtype: u8,
    /// `typelem`: the element type of an array, else 0.
    pub typelem: u32,
    /// `typdelim`: the delimiter of this type's array literals.
    pub typdelim: u8,
    /// `typbasetype`: a domain's base type, else 0.
    pub typbasetype: u32,
    /// `typrelid`: a composite type's relation, else 0.
    pub typrelid: u32,
    /// `typsubscript = 'array_subscript_handler'`.
    pub array_subscript: bool,
}

/// A server's types, to map a type OID to a [`TypeKind`].
#[derive(Clone, Debug, Default)]
pub struct TypeCatalog {
    types: HashMap<u32, PgType>,
    /// Composite relation OID → attributes in attnum order.
    attributes: HashMap<u32, Vec<(String, u32)>>,
}

impl TypeCatalog {
    /// An empty catalog.
    pub fn new() -> TypeCatalog {
        TypeCatalog::default()
    }

    /// Adds a row of [`TYPES_QUERY`].
    pub fn add_type(&mut self, t: PgType) {
        self.types.insert(t.oid, t);
    }

    /// Adds a row of [`ATTRIBUTES_QUERY`]: attribute `name` of type
    /// `type_oid` of composite relation `relid`, in attnum order.
    pub fn add_attribute(&mut self, relid: u32, name: String, type_oid: u32) {
        self.attributes
            .entry(relid)
            .or_default()
            .push((name, type_oid));
    }

    /// The kind of type `oid`; `None` for an OID not in the catalog (at any
    /// level) or a type nested deeper than [`MAX_TYPE_DEPTH`].
    pub fn kind(&self, oid: u32) -> Option<TypeKind> {
        self.kind_at(oid, 0)
    }

    fn kind_at(&self, oid: u32, depth: usize) -> Option<TypeKind> {
        if depth > MAX_TYPE_DEPTH {
            return None;
        }
        let t = self.types.get(&oid)?;
        Some(match t.typtype {
            b'd' => return self.kind_at(t.typbasetype, depth + 1),
            b'c' => {
                let mut fields = Vec::new();
                for (name, typid) in self.attributes.get(&t.typrelid).into_iter().flatten() {
                    fields.push((name.clone(), self.kind_at(*typid, depth + 1)?));
                }
                TypeKind::Composite { fields }
            }
            b'b' if t.array_subscript && t.typelem != 0 => TypeKind::Array {
                element: Box::new(self.kind_at(t.typelem, depth + 1)?),
                delimiter: self.types.get(&t.typelem)?.typdelim,
            },
            _ => TypeKind::from_builtin_oid(oid),
        })
    }
}
