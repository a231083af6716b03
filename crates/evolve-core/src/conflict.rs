//! Conflicts of replication into nodes at other schema versions, and their
//! resolvers: EDB PGD's model on plain PostgreSQL.
//!
//! While a rolling upgrade is under way the nodes disagree about the
//! schema: one has a column the upstream does not send yet, another
//! dropped one the upstream still sends. Every such mismatch, and every
//! row conflict (the row an insert adds exists already, the row an update
//! or delete names does not), is a [`ConflictType`] with PGD's name; each
//! replica has a [`Resolver`] for each type, from the resolvers PGD allows
//! for it ([`ConflictType::allowed`]), defaulting as PGD does
//! ([`ConflictType::default_resolver`]). `target_column_type_mismatch` is
//! evolve's own: PGD casts silently where it can, and a cast that changes
//! values silently is a divergence an operator should be able to see (or
//! refuse).
//!
//! PostgreSQL 18 logs conflicts under names of its own; those that mean
//! the same as PGD's (`insert_exists`, `update_missing`, `delete_missing`,
//! `multiple_unique_conflicts`) are the same words, and the others
//! (`update_origin_differs`, `delete_origin_differs`, `update_exists`)
//! concern multi-origin setups that one stream into a node cannot have.

use std::collections::BTreeMap;
use std::fmt;

/// A named conflict type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConflictType {
    /// The upstream sends a table the node does not have.
    TargetTableMissing,
    /// The upstream sends a column the node's table does not have.
    TargetColumnMissing,
    /// The node's table has a column the upstream does not send.
    SourceColumnMissing,
    /// A column has another type (or modifier) on the node than the
    /// upstream sends.
    TargetColumnTypeMismatch,
    /// An insert's key exists on the node.
    InsertExists,
    /// The row an update names is not on the node.
    UpdateMissing,
    /// The row a delete names is not on the node.
    DeleteMissing,
    /// A row violates more than one unique constraint of the node.
    MultipleUniqueConflicts,
}

/// What is done about a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resolver {
    /// Leave the change (or table) out.
    Skip,
    /// Halt the replica with the conflict (it is not retried).
    Error,
    /// Drop the column's value.
    Ignore,
    /// Drop the column's value when it is NULL; a value halts the replica.
    IgnoreIfNull,
    /// The node's default fills the column (NULL when it has none).
    UseDefaultValue,
    /// The incoming row replaces the existing one.
    Update,
    /// The incoming row replaces the existing one when its commit is newer
    /// than the one that wrote the existing row; otherwise it is skipped.
    UpdateIfNewer,
    /// The update is applied as an insert of its new row; a row with a
    /// column the update did not send (a TOASTed value) is skipped.
    InsertOrSkip,
    /// As `insert_or_skip`, but a row that cannot be inserted halts.
    InsertOrError,
    /// The value is converted to the node's type, or a transform of the
    /// replica computes the column.
    Transform,
}

const ALL_TYPES: [ConflictType; 8] = [
    ConflictType::TargetTableMissing,
    ConflictType::TargetColumnMissing,
    ConflictType::SourceColumnMissing,
    ConflictType::TargetColumnTypeMismatch,
    ConflictType::InsertExists,
    ConflictType::UpdateMissing,
    ConflictType::DeleteMissing,
    ConflictType::MultipleUniqueConflicts,
];

const ALL_RESOLVERS: [Resolver; 10] = [
    Resolver::Skip,
    Resolver::Error,
    Resolver::Ignore,
    Resolver::IgnoreIfNull,
    Resolver::UseDefaultValue,
    Resolver::Update,
    Resolver::UpdateIfNewer,
    Resolver::InsertOrSkip,
    Resolver::InsertOrError,
    Resolver::Transform,
];

impl ConflictType {
    /// Every conflict type, in a fixed order (the order `SHOW` lists them).
    pub fn all() -> &'static [ConflictType] {
        &ALL_TYPES
    }

    /// Its name, as PGD spells it.
    pub fn name(self) -> &'static str {
        match self {
            ConflictType::TargetTableMissing => "target_table_missing",
            ConflictType::TargetColumnMissing => "target_column_missing",
            ConflictType::SourceColumnMissing => "source_column_missing",
            ConflictType::TargetColumnTypeMismatch => "target_column_type_mismatch",
            ConflictType::InsertExists => "insert_exists",
            ConflictType::UpdateMissing => "update_missing",
            ConflictType::DeleteMissing => "delete_missing",
            ConflictType::MultipleUniqueConflicts => "multiple_unique_conflicts",
        }
    }

    /// The conflict type called `name` (case-insensitive).
    pub fn parse(name: &str) -> Result<ConflictType, ConflictError> {
        let lower = name.to_ascii_lowercase();
        ALL_TYPES
            .iter()
            .copied()
            .find(|t| t.name() == lower)
            .ok_or_else(|| ConflictError::UnknownType(name.to_string()))
    }

    /// The resolvers allowed for it, PGD's matrix (`transform` for our
    /// type mismatch).
    pub fn allowed(self) -> &'static [Resolver] {
        use Resolver::*;
        match self {
            ConflictType::TargetTableMissing => &[Skip, Error],
            ConflictType::TargetColumnMissing => &[Ignore, IgnoreIfNull, Error],
            ConflictType::SourceColumnMissing => &[UseDefaultValue, Error],
            ConflictType::TargetColumnTypeMismatch => &[Transform, Error],
            ConflictType::InsertExists => &[Update, UpdateIfNewer, Skip, Error],
            ConflictType::UpdateMissing => &[InsertOrSkip, InsertOrError, Skip, Error],
            ConflictType::DeleteMissing => &[Skip, Error],
            ConflictType::MultipleUniqueConflicts => &[Error],
        }
    }

    /// PGD's default. `target_table_missing` defaults in PGD to
    /// `skip_if_recently_dropped`, which only PGD's server can detect, so
    /// here to `error` (what community PostgreSQL does).
    /// `target_column_type_mismatch` is ours: with `transform`, the
    /// default, a built-in type the node's assignment cast converts to is
    /// converted (as native replication converts it, and logged once per
    /// match, so the difference is seen), and one it does not is computed
    /// by the replica's transform of that column or halts; with `error`
    /// any built-in type difference halts.
    pub fn default_resolver(self) -> Resolver {
        match self {
            ConflictType::TargetTableMissing => Resolver::Error,
            ConflictType::TargetColumnMissing => Resolver::IgnoreIfNull,
            ConflictType::SourceColumnMissing => Resolver::UseDefaultValue,
            ConflictType::TargetColumnTypeMismatch => Resolver::Transform,
            ConflictType::InsertExists => Resolver::UpdateIfNewer,
            ConflictType::UpdateMissing => Resolver::InsertOrSkip,
            ConflictType::DeleteMissing => Resolver::Skip,
            ConflictType::MultipleUniqueConflicts => Resolver::Error,
        }
    }

    /// Whether it is about the schema (tables and columns) rather than
    /// rows.
    pub fn is_schema(self) -> bool {
        matches!(
            self,
            ConflictType::TargetTableMissing
                | ConflictType::TargetColumnMissing
                | ConflictType::SourceColumnMissing
                | ConflictType::TargetColumnTypeMismatch
        )
    }
}

impl fmt::Display for ConflictType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Resolver {
    /// Its name, as PGD spells it.
    pub fn name(self) -> &'static str {
        match self {
            Resolver::Skip => "skip",
            Resolver::Error => "error",
            Resolver::Ignore => "ignore",
            Resolver::IgnoreIfNull => "ignore_if_null",
            Resolver::UseDefaultValue => "use_default_value",
            Resolver::Update => "update",
            Resolver::UpdateIfNewer => "update_if_newer",
            Resolver::InsertOrSkip => "insert_or_skip",
            Resolver::InsertOrError => "insert_or_error",
            Resolver::Transform => "transform",
        }
    }

    /// The resolver called `name` (case-insensitive).
    pub fn parse(name: &str) -> Result<Resolver, ConflictError> {
        let lower = name.to_ascii_lowercase();
        ALL_RESOLVERS
            .iter()
            .copied()
            .find(|r| r.name() == lower)
            .ok_or_else(|| ConflictError::UnknownResolver(name.to_string()))
    }
}

impl fmt::Display for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A conflict-resolver name or choice that is not valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConflictError {
    UnknownType(String),
    UnknownResolver(String),
    NotAllowed {
        conflict: ConflictType,
        resolver: Resolver,
    },
}

impl fmt::Display for ConflictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |list: &mut dyn Iterator<Item = &'static str>| -> String {
            list.collect::<Vec<_>>().join(", ")
        };
        match self {
            ConflictError::UnknownType(name) => write!(
                f,
                "unknown conflict type \"{name}\"; the conflict types are {}",
                names(&mut ALL_TYPES.iter().map(|t| t.name()))
            ),
            ConflictError::UnknownResolver(name) => write!(
                f,
                "unknown conflict resolver \"{name}\"; the resolvers are {}",
                names(&mut ALL_RESOLVERS.iter().map(|r| r.name()))
            ),
            ConflictError::NotAllowed { conflict, resolver } => write!(
                f,
                "conflict resolver \"{resolver}\" is not allowed for {conflict}; use one of {}",
                names(&mut conflict.allowed().iter().map(|r| r.name()))
            ),
        }
    }
}

impl std::error::Error for ConflictError {}

/// A replica's resolvers: the ones set, the default for the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolvers {
    set: BTreeMap<ConflictType, Resolver>,
}

impl Resolvers {
    /// The resolver for `conflict`.
    pub fn get(&self, conflict: ConflictType) -> Resolver {
        self.set
            .get(&conflict)
            .copied()
            .unwrap_or_else(|| conflict.default_resolver())
    }

    /// Sets the resolver for `conflict`, when it is allowed for it.
    pub fn set(&mut self, conflict: ConflictType, resolver: Resolver) -> Result<(), ConflictError> {
        if !conflict.allowed().contains(&resolver) {
            return Err(ConflictError::NotAllowed { conflict, resolver });
        }
        self.set.insert(conflict, resolver);
        Ok(())
    }

    /// Back to the default for `conflict`.
    pub fn reset(&mut self, conflict: ConflictType) {
        self.set.remove(&conflict);
    }

    /// Every conflict type with its resolver and whether it is the
    /// default, in [`ConflictType::all`]'s order.
    pub fn list(&self) -> Vec<(ConflictType, Resolver, bool)> {
        ALL_TYPES
            .iter()
            .map(|&t| (t, self.get(t), !self.set.contains_key(&t)))
            .collect()
    }

    /// The ones set, for storing.
    pub fn explicit(&self) -> impl Iterator<Item = (ConflictType, Resolver)> + '_ {
        self.set.iter().map(|(t, r)| (*t, *r))
    }
}

/// A column of a node's table, from the node's catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetColumn {
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
    pub not_null: bool,
    /// A default (or identity, or generation) fills it when no value comes.
    pub has_default: bool,
    /// Part of the key rows are found by (the primary key, or the replica
    /// identity's index).
    pub key: bool,
}

/// A node's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetTable {
    pub schema: String,
    pub name: String,
    pub columns: Vec<TargetColumn>,
}

impl TargetTable {
    /// `schema.name`, for messages.
    pub fn reference(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// How a source column's type relates to a node column's, as the node's
/// catalog says (the caller asks it). `from` and `to` are the two types as
/// the node prints them (with their modifiers), for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeRelation {
    /// The same type and modifier.
    Same,
    /// PostgreSQL's own types that differ in type or modifier, where the
    /// node has an assignment (or implicit) cast from one to the other
    /// (`integer` to `bigint`, `varchar(20)` to `text`, `numeric(10,2)` to
    /// `numeric(12,2)`): a `target_column_type_mismatch`. The value is
    /// converted and a value that does not fit fails at apply.
    Converts { from: String, to: String },
    /// A type of the upstream's own (an enum, a domain): its OID is the
    /// upstream's, which the node's cannot be compared to, so it is no
    /// conflict and its values go to the node type's input function as
    /// text (an unknown label fails at apply).
    UpstreamType,
    /// No assignment cast.
    Incompatible { from: String, to: String },
}

/// Where a node column's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnValue {
    /// The source column at this index (of the source's schema).
    Source(usize),
    /// A transform of the replica computes it.
    Transform,
    /// The node's default (the column is left out of inserts, and of
    /// updates, so its value on the node is kept).
    Default,
}

/// How one source table maps onto one node table: decided once per schema
/// of either, applied to every row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnMatch {
    /// Per node column, in its order.
    pub values: Vec<ColumnValue>,
    /// The node columns that identify a row, as indexes of `values`.
    pub key: Vec<usize>,
    /// Source columns the node lacks, with the resolver that decides about
    /// each row's value (`ignore`: dropped; `ignore_if_null`: dropped when
    /// NULL, a value halts).
    pub missing_on_target: Vec<(usize, Resolver)>,
    /// The conflicts the match met, resolved (counted once per schema):
    /// `source_column_missing` per column filled by its default,
    /// `target_column_type_mismatch` per column converted to another type
    /// or computed by a transform for lack of a cast, and
    /// `target_column_missing` per column dropped.
    pub conflicts: Vec<(ConflictType, String)>,
}

/// What halts the replica: a conflict whose resolution is to halt (its
/// type), or a node table replication cannot apply to at all (`None`);
/// and one line naming the object and the ways out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    pub conflict: Option<ConflictType>,
    pub message: String,
}

impl fmt::Display for Halt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.conflict {
            Some(c) => write!(f, "{} ({c})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Matches the source table's columns onto the node table's by name, in
/// PGD's order: columns the node lacks (`target_column_missing`), columns
/// the source lacks (`source_column_missing`), then types
/// (`target_column_type_mismatch`); `transformed` names the node columns a
/// transform of the replica computes, which need no source column and no
/// type match. `relation` tells how two types relate on the node.
///
/// With `target_column_type_mismatch = 'transform'` a built-in type the
/// node converts to is a conflict of the match (logged once per match by
/// the apply); with `error` it halts, naming both types and the ways out.
/// Types of the upstream's own ([`TypeRelation::UpstreamType`]) are never
/// a conflict: their OIDs say nothing on the node.
pub fn match_columns(
    source: &crate::change::TableSchema,
    target: &TargetTable,
    resolvers: &Resolvers,
    transformed: &[&str],
    relation: impl Fn(&crate::change::ColumnSchema, &TargetColumn) -> TypeRelation,
) -> Result<ColumnMatch, Halt> {
    let table = target.reference();
    let mut conflicts = Vec::new();
    let mut missing_on_target = Vec::new();
    for (i, c) in source.columns.iter().enumerate() {
        if target.columns.iter().any(|t| t.name == c.name) {
            continue;
        }
        let resolver = resolvers.get(ConflictType::TargetColumnMissing);
        if resolver == Resolver::Error {
            return Err(Halt {
                conflict: Some(ConflictType::TargetColumnMissing),
                message: format!(
                    "node table {table} has no column \"{}\" that the upstream sends: add it on the node, or set target_column_missing to ignore or ignore_if_null",
                    c.name
                ),
            });
        }
        conflicts.push((
            ConflictType::TargetColumnMissing,
            format!("column \"{}\" {}", c.name, resolver.name()),
        ));
        missing_on_target.push((i, resolver));
    }
    let mut values = Vec::with_capacity(target.columns.len());
    let mut key = Vec::new();
    for (n, t) in target.columns.iter().enumerate() {
        if t.key {
            key.push(n);
        }
        if transformed.contains(&t.name.as_str()) {
            if let Some(i) = source.column(&t.name)
                && let TypeRelation::Incompatible { from, to } = relation(&source.columns[i], t)
            {
                if resolvers.get(ConflictType::TargetColumnTypeMismatch) == Resolver::Error {
                    return Err(Halt {
                        conflict: Some(ConflictType::TargetColumnTypeMismatch),
                        message: format!(
                            "column \"{}\" of node table {table} is {to}, which the upstream's {from} does not convert to, and target_column_type_mismatch is error: set it to transform to let the replica's transform compute the column, or change its type on the node",
                            t.name
                        ),
                    });
                }
                conflicts.push((
                    ConflictType::TargetColumnTypeMismatch,
                    format!("column \"{}\" computed by a transform", t.name),
                ));
            }
            values.push(ColumnValue::Transform);
            continue;
        }
        let Some(i) = source.column(&t.name) else {
            if t.key {
                return Err(Halt {
                    conflict: Some(ConflictType::SourceColumnMissing),
                    message: format!(
                        "key column \"{}\" of node table {table} is not sent by the upstream, so rows cannot be found: key the node table by columns the upstream sends, or compute it with a transform",
                        t.name
                    ),
                });
            }
            let resolver = resolvers.get(ConflictType::SourceColumnMissing);
            if resolver == Resolver::Error || (t.not_null && !t.has_default) {
                return Err(Halt {
                    conflict: Some(ConflictType::SourceColumnMissing),
                    message: if t.not_null && !t.has_default {
                        format!(
                            "column \"{}\" of node table {table} is NOT NULL without a default and the upstream does not send it: give it a default on the node (ALTER TABLE {table} ALTER COLUMN {} SET DEFAULT ...) or drop its NOT NULL (ALTER TABLE {table} ALTER COLUMN {} DROP NOT NULL)",
                            t.name, t.name, t.name
                        )
                    } else {
                        format!(
                            "column \"{}\" of node table {table} is not sent by the upstream: set source_column_missing to use_default_value, or compute it with a transform",
                            t.name
                        )
                    },
                });
            }
            conflicts.push((
                ConflictType::SourceColumnMissing,
                format!("column \"{}\" {}", t.name, resolver.name()),
            ));
            values.push(ColumnValue::Default);
            continue;
        };
        match relation(&source.columns[i], t) {
            TypeRelation::Same | TypeRelation::UpstreamType => {}
            TypeRelation::Converts { from, to } => {
                if resolvers.get(ConflictType::TargetColumnTypeMismatch) == Resolver::Error {
                    return Err(Halt {
                        conflict: Some(ConflictType::TargetColumnTypeMismatch),
                        message: format!(
                            "column \"{}\" of node table {table} is {to} and the upstream sends {from}, and target_column_type_mismatch is error: set it to transform to convert the values, or change the column's type on the node to {from}",
                            t.name
                        ),
                    });
                }
                conflicts.push((
                    ConflictType::TargetColumnTypeMismatch,
                    format!("column \"{}\" converted from {from} to {to}", t.name),
                ));
            }
            TypeRelation::Incompatible { from, to } => {
                return Err(Halt {
                    conflict: Some(ConflictType::TargetColumnTypeMismatch),
                    message: format!(
                        "column \"{}\" of node table {table} is {to}, which the upstream's {from} does not convert to by assignment cast: compute it with a transform of the replica, or change its type on the node",
                        t.name
                    ),
                });
            }
        }
        values.push(ColumnValue::Source(i));
    }
    if key.is_empty() {
        return Err(Halt {
            conflict: None,
            message: format!(
                "node table {table} has no primary key or replica identity index, so rows cannot be found: add a primary key on the node"
            ),
        });
    }
    Ok(ColumnMatch {
        values,
        key,
        missing_on_target,
        conflicts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_case_insensitive() {
        for &t in ConflictType::all() {
            assert_eq!(ConflictType::parse(t.name()), Ok(t));
            assert_eq!(ConflictType::parse(&t.name().to_uppercase()), Ok(t));
        }
        for r in ALL_RESOLVERS {
            assert_eq!(Resolver::parse(r.name()), Ok(r));
        }
        assert_eq!(
            ConflictType::parse("target_colum_missing")
                .unwrap_err()
                .to_string(),
            "unknown conflict type \"target_colum_missing\"; the conflict types are target_table_missing, target_column_missing, source_column_missing, target_column_type_mismatch, insert_exists, update_missing, delete_missing, multiple_unique_conflicts"
        );
        assert!(
            Resolver::parse("apply_remote")
                .unwrap_err()
                .to_string()
                .starts_with(
                    "unknown conflict resolver \"apply_remote\"; the resolvers are skip, error, "
                )
        );
    }

    #[test]
    fn every_default_is_allowed_and_every_type_allows_error() {
        for &t in ConflictType::all() {
            assert!(t.allowed().contains(&t.default_resolver()), "{t}");
            assert!(t.allowed().contains(&Resolver::Error), "{t}");
        }
    }

    #[test]
    fn the_matrix_refuses_resolvers_of_other_types_naming_the_allowed_ones() {
        // (conflict, resolver, allowed)
        let cases = [
            ("target_table_missing", "skip", true),
            ("target_table_missing", "ignore", false),
            ("target_column_missing", "ignore", true),
            ("target_column_missing", "ignore_if_null", true),
            ("target_column_missing", "use_default_value", false),
            ("source_column_missing", "use_default_value", true),
            ("source_column_missing", "skip", false),
            ("target_column_type_mismatch", "transform", true),
            ("target_column_type_mismatch", "ignore", false),
            ("insert_exists", "update_if_newer", true),
            ("insert_exists", "insert_or_skip", false),
            ("update_missing", "insert_or_error", true),
            ("update_missing", "update", false),
            ("delete_missing", "skip", true),
            ("delete_missing", "insert_or_skip", false),
            ("multiple_unique_conflicts", "error", true),
            ("multiple_unique_conflicts", "skip", false),
        ];
        for (conflict, resolver, allowed) in cases {
            let mut rs = Resolvers::default();
            let t = ConflictType::parse(conflict).unwrap();
            let r = Resolver::parse(resolver).unwrap();
            assert_eq!(rs.set(t, r).is_ok(), allowed, "{conflict} = {resolver}");
            assert_eq!(rs.get(t) == r, allowed || t.default_resolver() == r);
        }
        let mut rs = Resolvers::default();
        let e = rs
            .set(ConflictType::DeleteMissing, Resolver::Update)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "conflict resolver \"update\" is not allowed for delete_missing; use one of skip, error"
        );
    }

    fn source() -> crate::change::TableSchema {
        let col = |name: &str, type_oid, key| crate::change::ColumnSchema {
            name: name.into(),
            type_oid,
            typmod: -1,
            key,
            attnum: None,
        };
        crate::change::TableSchema {
            schema: "public".into(),
            name: "orders".into(),
            columns: vec![
                col("id", 23, true),
                col("status", 1043, false),
                col("note", 25, false),
            ],
        }
    }

    fn node(columns: &[(&str, u32, bool, bool, bool)]) -> TargetTable {
        TargetTable {
            schema: "public".into(),
            name: "orders".into(),
            columns: columns
                .iter()
                .map(
                    |&(name, type_oid, not_null, has_default, key)| TargetColumn {
                        name: name.into(),
                        type_oid,
                        typmod: -1,
                        not_null,
                        has_default,
                        key,
                    },
                )
                .collect(),
        }
    }

    /// Same type OID: the same; 1043 to 25 (varchar to text) and 23 to 20
    /// (integer to bigint) convert; an OID of the upstream's own is not
    /// compared; anything else does not convert.
    fn relation(s: &crate::change::ColumnSchema, t: &TargetColumn) -> TypeRelation {
        let name = |oid| format!("type{oid}");
        match (s.type_oid, t.type_oid) {
            (a, b) if a == b => TypeRelation::Same,
            (a, _) if a >= 16_384 => TypeRelation::UpstreamType,
            (1043, 25) | (23, 20) => TypeRelation::Converts {
                from: name(s.type_oid),
                to: name(t.type_oid),
            },
            _ => TypeRelation::Incompatible {
                from: name(s.type_oid),
                to: name(t.type_oid),
            },
        }
    }

    #[test]
    fn columns_match_by_name_in_any_order() {
        let t = node(&[
            ("note", 25, false, false, false),
            ("id", 23, true, false, true),
            ("status", 1043, false, false, false),
        ]);
        let m = match_columns(&source(), &t, &Resolvers::default(), &[], relation).unwrap();
        assert_eq!(
            m.values,
            vec![
                ColumnValue::Source(2),
                ColumnValue::Source(0),
                ColumnValue::Source(1)
            ]
        );
        assert_eq!(m.key, vec![1]);
        assert!(m.conflicts.is_empty() && m.missing_on_target.is_empty());
    }

    #[test]
    fn each_schema_mismatch_is_its_conflict_type_with_its_resolver() {
        let rs = Resolvers::default();
        // The node lacks `note` (ignore_if_null by default), has an extra
        // `region` with a default, and `status` is text.
        let t = node(&[
            ("id", 23, true, false, true),
            ("status", 25, false, false, false),
            ("region", 25, true, true, false),
        ]);
        let m = match_columns(&source(), &t, &rs, &[], relation).unwrap();
        assert_eq!(
            m.values,
            vec![
                ColumnValue::Source(0),
                ColumnValue::Source(1),
                ColumnValue::Default
            ]
        );
        assert_eq!(m.missing_on_target, vec![(2, Resolver::IgnoreIfNull)]);
        // A type the assignment cast converts (varchar to text) is a
        // conflict, resolved by converting.
        let types: Vec<ConflictType> = m.conflicts.iter().map(|c| c.0).collect();
        assert_eq!(
            types,
            vec![
                ConflictType::TargetColumnMissing,
                ConflictType::TargetColumnTypeMismatch,
                ConflictType::SourceColumnMissing
            ]
        );
        assert_eq!(
            m.conflicts[1].1,
            "column \"status\" converted from type1043 to type25"
        );
        // target_column_missing = error halts, naming the column.
        let mut strict = Resolvers::default();
        strict
            .set(ConflictType::TargetColumnMissing, Resolver::Error)
            .unwrap();
        let h = match_columns(&source(), &t, &strict, &[], relation).unwrap_err();
        assert_eq!(h.conflict, Some(ConflictType::TargetColumnMissing));
        assert!(h.message.contains("\"note\""), "{h}");
        // A NOT NULL column without a default that the source lacks halts
        // with both fixes, whatever the resolver.
        let t = node(&[
            ("id", 23, true, false, true),
            ("status", 1043, false, false, false),
            ("note", 25, false, false, false),
            ("region", 25, true, false, false),
        ]);
        let h = match_columns(&source(), &t, &rs, &[], relation).unwrap_err();
        assert_eq!(h.conflict, Some(ConflictType::SourceColumnMissing));
        assert!(
            h.message.contains("SET DEFAULT") && h.message.contains("DROP NOT NULL"),
            "{h}"
        );
        // ... unless a transform computes it.
        let m = match_columns(&source(), &t, &rs, &["region"], relation).unwrap();
        assert_eq!(m.values[3], ColumnValue::Transform);
        // A type without an assignment cast is resolved by a transform of
        // the column (counted), or halts with `error`...
        let t = node(&[
            ("id", 23, true, false, true),
            ("status", 16, false, false, false),
            ("note", 25, false, false, false),
        ]);
        let m = match_columns(&source(), &t, &rs, &["status"], relation).unwrap();
        assert_eq!(m.values[1], ColumnValue::Transform);
        assert_eq!(m.conflicts.len(), 1);
        assert_eq!(m.conflicts[0].0, ConflictType::TargetColumnTypeMismatch);
        let mut no = Resolvers::default();
        no.set(ConflictType::TargetColumnTypeMismatch, Resolver::Error)
            .unwrap();
        let h = match_columns(&source(), &t, &no, &["status"], relation).unwrap_err();
        assert_eq!(h.conflict, Some(ConflictType::TargetColumnTypeMismatch));
        // ... and without a transform halts, naming the way out.
        let t = node(&[
            ("id", 23, true, false, true),
            ("status", 16, false, false, false),
            ("note", 25, false, false, false),
        ]);
        let h = match_columns(&source(), &t, &rs, &[], relation).unwrap_err();
        assert_eq!(h.conflict, Some(ConflictType::TargetColumnTypeMismatch));
        assert!(h.message.contains("transform"), "{h}");
        // A node key the source does not send cannot find rows.
        let t = node(&[
            ("uid", 2950, true, false, true),
            ("id", 23, true, false, false),
        ]);
        let h = match_columns(&source(), &t, &rs, &[], relation).unwrap_err();
        assert!(h.message.contains("key column \"uid\""), "{h}");
        // A node table without a key is no conflict: it cannot be applied to.
        let t = node(&[("id", 23, true, false, false)]);
        let h = match_columns(&source(), &t, &rs, &[], relation).unwrap_err();
        assert_eq!(h.conflict, None);
        assert!(h.message.contains("add a primary key"), "{h}");
    }

    /// With `error`, a built-in type difference the node converts halts,
    /// naming the column, both types and the ways out; a type of the
    /// upstream's own is never compared.
    #[test]
    fn a_type_difference_halts_under_error_and_converts_under_transform() {
        let t = node(&[
            ("id", 20, true, false, true),
            ("status", 1043, false, false, false),
            ("note", 25, false, false, false),
        ]);
        let m = match_columns(&source(), &t, &Resolvers::default(), &[], relation).unwrap();
        assert_eq!(
            m.conflicts,
            vec![(
                ConflictType::TargetColumnTypeMismatch,
                "column \"id\" converted from type23 to type20".to_string()
            )]
        );
        let mut strict = Resolvers::default();
        strict
            .set(ConflictType::TargetColumnTypeMismatch, Resolver::Error)
            .unwrap();
        let h = match_columns(&source(), &t, &strict, &[], relation).unwrap_err();
        assert_eq!(h.conflict, Some(ConflictType::TargetColumnTypeMismatch));
        assert_eq!(
            h.message,
            "column \"id\" of node table public.orders is type20 and the upstream sends type23, and target_column_type_mismatch is error: set it to transform to convert the values, or change the column's type on the node to type23"
        );
        // An enum of the upstream's (OID 16384 and above) is not compared.
        let mut own = source();
        own.columns[1].type_oid = 16_500;
        let t = node(&[
            ("id", 23, true, false, true),
            ("status", 16_900, false, false, false),
            ("note", 25, false, false, false),
        ]);
        let m = match_columns(&own, &t, &strict, &[], relation).unwrap();
        assert!(m.conflicts.is_empty(), "{:?}", m.conflicts);
        assert_eq!(m.values[1], ColumnValue::Source(1));
    }

    #[test]
    fn set_and_reset_show_in_the_list() {
        let mut rs = Resolvers::default();
        assert!(rs.list().iter().all(|(_, _, default)| *default));
        rs.set(ConflictType::TargetColumnMissing, Resolver::Ignore)
            .unwrap();
        let listed = rs.list();
        assert_eq!(listed.len(), 8);
        assert!(listed.contains(&(ConflictType::TargetColumnMissing, Resolver::Ignore, false)));
        assert!(listed.contains(&(ConflictType::InsertExists, Resolver::UpdateIfNewer, true)));
        assert_eq!(rs.explicit().count(), 1);
        rs.reset(ConflictType::TargetColumnMissing);
        assert_eq!(
            rs.get(ConflictType::TargetColumnMissing),
            Resolver::IgnoreIfNull
        );
        assert_eq!(rs, Resolvers::default());
    }
}
