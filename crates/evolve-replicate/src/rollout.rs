//! The rollout's check: before the first node is migrated, every statement
//! of the pending migrations is held against each replica's resolvers and
//! transforms, and a rollout that would halt replication is refused with
//! the fix.
//!
//! While the rollout runs, the upstream is ahead of the replicas' nodes
//! not migrated yet (when the upstream comes first in the node order) or
//! behind the nodes migrated before it. Each direction has its rules, the
//! ones PGD's rolling-upgrade guide gives:
//!
//! | statement | upstream ahead of the node | node ahead of the upstream |
//! |---|---|---|
//! | a new table | `target_table_missing = skip` | nothing |
//! | a new column | `target_column_missing = ignore` | `source_column_missing = use_default_value`, and a default when NOT NULL |
//! | a dropped column | the node's column NULL-able or with a default (a prior `DROP NOT NULL` or `SET DEFAULT`), `source_column_missing = use_default_value` | `target_column_missing = ignore` |
//! | a type change | the node's type takes the new one by assignment cast, its input function reads the new type's text (see below), and `target_column_type_mismatch` is not `error`; or a transform computes the column | the same, the other way |
//!
//! A type change is held against what the apply does with the values: it
//! gives their text form to the node type's input function, as native
//! logical replication does, so a value is never changed silently; an
//! assignment cast would round `numeric` into `integer`. Among the pairs
//! of PostgreSQL's own types that have an assignment cast, a few have
//! values whose text the other's input refuses ([`refused_values`]:
//! `numeric(10,2)` prints `5.00`, which `integer` does not read); a change
//! that makes one of them is refused with the rows that would halt, and a
//! transform that converts explicitly is the fix. And with
//! `target_column_type_mismatch = 'error'` any difference of PostgreSQL's
//! own types halts.
//!
//! The pure rules are [`findings`]; what they need from the node's catalog
//! comes through [`NodeFacts`].

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_core::migration::effects::{self, Action, RelKind};

use crate::Transform;

/// A schema change a statement makes, for the check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    NewTable {
        table: (String, String),
    },
    /// A table dropped: a node ahead of the upstream lacks it while the
    /// upstream still sends it.
    DroppedTable {
        table: (String, String),
    },
    /// A table renamed: what dropping `from` and creating `to` would find,
    /// and a replica of `from` replicates it as `to` from then on (a
    /// publication follows the table, not its name).
    RenamedTable {
        from: (String, String),
        to: (String, String),
    },
    NewColumn {
        table: (String, String),
        column: String,
        /// NOT NULL and no default: a node ahead of the upstream cannot
        /// fill it.
        needs_value: bool,
    },
    DroppedColumn {
        table: (String, String),
        column: String,
    },
    TypeChange {
        table: (String, String),
        column: String,
        /// The new type as written.
        type_text: String,
    },
}

/// The schema changes of one statement (`search_path` taken as `public`
/// for unqualified names). A statement the parser rejects changes nothing
/// the check knows of; `evolve migrate` reports it when it runs.
pub fn changes(statement: &str) -> Vec<Change> {
    let Ok(fx) = effects::analyze(statement) else {
        return Vec::new();
    };
    let name = |r: &effects::RelName| {
        (
            r.schema.clone().unwrap_or_else(|| "public".to_string()),
            r.name.clone(),
        )
    };
    let drops_table = statement
        .trim_start()
        .get(..10)
        .is_some_and(|s| s.eq_ignore_ascii_case("drop table"));
    fx.actions
        .iter()
        .flat_map(|a| match a {
            // A rename is a drop of the old name and a new one: the
            // side not yet migrated sends (or has) the old name only.
            Action::RenameColumn { table, from, to } => vec![
                Change::DroppedColumn {
                    table: name(table),
                    column: from.clone(),
                },
                Change::NewColumn {
                    table: name(table),
                    column: to.clone(),
                    needs_value: false,
                },
            ],
            Action::RenameRelation { from, to } => {
                let old = name(from);
                let new = (old.0.clone(), to.clone());
                vec![Change::RenamedTable { from: old, to: new }]
            }
            Action::DropRelation { relation, .. } if drops_table => vec![Change::DroppedTable {
                table: name(relation),
            }],
            a => Vec::from_iter(one_change(a, &name, statement)),
        })
        .collect()
}

/// The change of an action that maps to one.
fn one_change(
    a: &Action,
    name: &dyn Fn(&effects::RelName) -> (String, String),
    statement: &str,
) -> Option<Change> {
    match a {
        Action::CreateRelation {
            relation,
            kind: RelKind::Table,
            ..
        } => Some(Change::NewTable {
            table: name(relation),
        }),
        Action::AddColumn {
            table,
            column,
            default,
            identity,
            serial,
            generated_stored,
            ..
        } => Some(Change::NewColumn {
            table: name(table),
            column: column.clone(),
            needs_value: default.is_none()
                && !identity
                && !serial
                && !generated_stored
                && is_not_null(statement, column),
        }),
        Action::DropColumn { table, column, .. } => Some(Change::DroppedColumn {
            table: name(table),
            column: column.clone(),
        }),
        Action::AlterType {
            table,
            column,
            type_text,
            ..
        } => Some(Change::TypeChange {
            table: name(table),
            column: column.clone(),
            type_text: type_text.clone(),
        }),
        _ => None,
    }
}

/// Whether `ADD [COLUMN] column ...` in `statement` says NOT NULL (the
/// effects do not carry it): the column's definition is read from its
/// name, as a whole word after `ADD` or `COLUMN` (not inside the table's
/// name or another column's), to the next comma outside parentheses (not
/// the one of `numeric(10,2)`).
fn is_not_null(statement: &str, column: &str) -> bool {
    let lower = statement.to_ascii_lowercase();
    let column = column.to_ascii_lowercase();
    let quoted = format!("\"{}\"", column.replace('"', "\"\""));
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let bytes = lower.as_bytes();
    for name in [column.as_str(), quoted.as_str()] {
        if name.is_empty() {
            continue;
        }
        let mut from = 0;
        while let Some(found) = lower[from..].find(name) {
            let at = from + found;
            from = at + name.len();
            let before_ok = at == 0 || !word(bytes[at - 1]);
            let after_ok = from >= bytes.len() || !word(bytes[from]);
            let head = lower[..at].trim_end();
            let after_add = head.ends_with(" add")
                || head.ends_with(" column")
                || head.ends_with(" if not exists");
            if !(before_ok && after_ok && after_add) {
                continue;
            }
            let mut depth = 0i32;
            let mut end = lower.len();
            for (i, c) in lower[from..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' | ';' if depth <= 0 => {
                        end = from + i;
                        break;
                    }
                    _ => {}
                }
            }
            // The definition outside parentheses (not a CHECK's `IS NOT
            // NULL`).
            let mut outside = String::new();
            let mut depth = 0i32;
            for c in lower[from..end].chars() {
                match c {
                    '(' => {
                        depth += 1;
                        outside.push(' ');
                    }
                    ')' => {
                        depth -= 1;
                        outside.push(' ');
                    }
                    c if depth <= 0 => outside.push(c),
                    _ => {}
                }
            }
            let words: Vec<&str> = outside.split_whitespace().collect();
            return words.windows(2).any(|w| w == ["not", "null"]);
        }
    }
    false
}

/// What the check asks of a node's catalog.
pub trait NodeFacts {
    /// Whether the node's column is NOT NULL without a default (a row
    /// without it cannot be inserted).
    fn needs_value(&self, table: &(String, String), column: &str) -> bool;
    /// Whether values of type `from` (as written, or the column's type on
    /// the other side) convert to the column's type by assignment cast.
    fn converts(&self, table: &(String, String), column: &str, type_text: &str) -> bool;
    /// How the values of the column cross between the upstream and the
    /// node while they differ, the side `ahead` migrated first (the new
    /// type `type_text` and the node's column type before the change);
    /// `None` when the node does not know one of the types.
    fn conversion(
        &self,
        table: &(String, String),
        column: &str,
        type_text: &str,
        ahead: Ahead,
    ) -> Option<Conversion>;
}

/// The values of a column while the upstream and a node have it at
/// different types: sent as `from`, applied to a column of type `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversion {
    pub from: String,
    pub to: String,
    /// `from` is one of PostgreSQL's own types, which the apply compares
    /// with the node's (a `target_column_type_mismatch`); a type of the
    /// upstream's own is not compared.
    pub compared: bool,
    /// The values whose text `to`'s input function refuses
    /// ([`refused_values`]), when some are.
    pub refused: Option<String>,
}

/// The values of type `from` whose text form the input function of type
/// `to` refuses, among the pairs of PostgreSQL's own types with an
/// assignment cast (`pg_cast` says nothing of text forms; these are the
/// pairs whose output the other's input does not read): `None` when every
/// value converts (a value too long or too large for `to` aside, which
/// fails on any path). Types are `(OID, typmod)`.
pub fn refused_values(from: (u32, i32), to: (u32, i32)) -> Option<String> {
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    const INT8: u32 = 20;
    const FLOAT4: u32 = 700;
    const FLOAT8: u32 = 701;
    const NUMERIC: u32 = 1700;
    const MONEY: u32 = 790;
    const INTERVAL: u32 = 1186;
    const TIME: u32 = 1083;
    const INET: u32 = 869;
    const CIDR: u32 = 650;
    const MACADDR8: u32 = 774;
    const MACADDR: u32 = 829;
    // text, varchar, bpchar, name: any text is read.
    const STRINGS: [u32; 4] = [25, 1043, 1042, 19];
    let integer = |oid| [INT2, INT4, INT8].contains(&oid);
    if from.0 == to.0 || STRINGS.contains(&to.0) {
        return None;
    }
    match (from.0, to.0) {
        (NUMERIC, t) if integer(t) => {
            // numeric's typmod: ((precision << 16) | scale) + 4, the scale
            // an 11-bit signed number.
            let scale = (from.1 >= 4).then(|| (((from.1 - 4) & 0x7ff) ^ 1024) - 1024);
            Some(match scale {
                Some(scale) if scale > 0 => format!(
                    "every value (numeric with scale {scale} prints {scale} decimal places, e.g. 5.{})",
                    "0".repeat(scale as usize)
                ),
                _ => "values with a fractional part (e.g. 5.5)".to_string(),
            })
        }
        (FLOAT4 | FLOAT8, t) if integer(t) => {
            Some("values with a fractional part or an exponent (e.g. 5.5, 1e+20)".to_string())
        }
        (MONEY, _) => Some("every value (money prints a currency symbol, e.g. $5.00)".to_string()),
        (INTERVAL, TIME) => {
            Some("intervals of a day or more, or negative ones (e.g. 1 day 02:00:00)".to_string())
        }
        (INET, CIDR) => {
            Some("addresses with bits set right of their mask (e.g. 10.1.2.3/24)".to_string())
        }
        (MACADDR8, MACADDR) => Some("every value (macaddr reads 6-byte addresses)".to_string()),
        _ => None,
    }
}

/// A replica as the check sees it.
#[derive(Clone, Debug)]
pub struct ReplicaView {
    pub name: String,
    /// The node's name in the rollout.
    pub node: String,
    pub resolvers: Resolvers,
    pub transforms: Vec<Transform>,
    /// The upstream tables it replicates, as (schema, name); empty: not
    /// known, and every table's change is checked.
    pub tables: Vec<(String, String)>,
}

/// Which side the rollout migrates first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ahead {
    /// The upstream is migrated before the node.
    Upstream,
    /// The node is migrated before the upstream.
    Node,
}

/// A change that would halt a replica, with the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub replica: String,
    pub node: String,
    pub problem: String,
    pub fix: String,
}

fn resolver_fix(replica: &str, conflict: ConflictType, resolver: Resolver) -> String {
    format!("ALTER REPLICA {replica} SET CONFLICT RESOLVER {conflict} = '{resolver}'")
}

/// The findings of `change` for `replica`, the side `ahead` migrated
/// first; `facts` about the replica's node.
pub fn findings(
    change: &Change,
    replica: &ReplicaView,
    ahead: Ahead,
    facts: &dyn NodeFacts,
) -> Vec<Finding> {
    let r = &replica.resolvers;
    let mut out = Vec::new();
    let mut refuse = |problem: String, fix: String| {
        out.push(Finding {
            replica: replica.name.clone(),
            node: replica.node.clone(),
            problem,
            fix,
        })
    };
    let want = |conflict: ConflictType, resolver: Resolver| r.get(conflict) != resolver;
    let transformed = |table: &(String, String), column: &str| {
        replica.transforms.iter().any(|t| {
            t.schema == table.0 && t.table == table.1 && t.sets.iter().any(|(c, _)| c == column)
        })
    };
    let at = |t: &(String, String)| format!("{}.{}", t.0, t.1);
    match (change, ahead) {
        (Change::RenamedTable { from, to }, ahead) => {
            let dropped = Change::DroppedTable {
                table: from.clone(),
            };
            let created = Change::NewTable { table: to.clone() };
            out.extend(findings(&dropped, replica, ahead, facts));
            out.extend(findings(&created, replica, ahead, facts));
        }
        (Change::NewTable { table }, Ahead::Upstream) => {
            if want(ConflictType::TargetTableMissing, Resolver::Skip) {
                refuse(
                    format!(
                        "new table {} reaches node {} before it has it",
                        at(table),
                        replica.node
                    ),
                    resolver_fix(
                        &replica.name,
                        ConflictType::TargetTableMissing,
                        Resolver::Skip,
                    ),
                );
            }
        }
        (Change::NewTable { .. }, Ahead::Node) => {}
        (Change::DroppedTable { table }, Ahead::Node) => {
            if want(ConflictType::TargetTableMissing, Resolver::Skip) {
                refuse(
                    format!(
                        "table {} is gone from node {} while the upstream still sends it",
                        at(table),
                        replica.node
                    ),
                    resolver_fix(
                        &replica.name,
                        ConflictType::TargetTableMissing,
                        Resolver::Skip,
                    ),
                );
            }
        }
        (Change::DroppedTable { .. }, Ahead::Upstream) => {}
        (Change::NewColumn { table, column, .. }, Ahead::Upstream)
        | (Change::DroppedColumn { table, column }, Ahead::Node) => {
            if want(ConflictType::TargetColumnMissing, Resolver::Ignore) {
                refuse(
                    format!(
                        "column {}.{column} is sent to node {} while it does not have it",
                        at(table),
                        replica.node
                    ),
                    resolver_fix(
                        &replica.name,
                        ConflictType::TargetColumnMissing,
                        Resolver::Ignore,
                    ),
                );
            }
        }
        (
            Change::NewColumn {
                table,
                column,
                needs_value,
            },
            Ahead::Node,
        ) => {
            if *needs_value && !transformed(table, column) {
                refuse(
                    format!(
                        "new column {}.{column} is NOT NULL without a default on node {}, which the upstream cannot fill until it is migrated",
                        at(table),
                        replica.node
                    ),
                    format!("give {column} a DEFAULT in the migration, or add it NULL-able first"),
                );
            } else if want(ConflictType::SourceColumnMissing, Resolver::UseDefaultValue) {
                refuse(
                    format!(
                        "the upstream does not send new column {}.{column} yet",
                        at(table)
                    ),
                    resolver_fix(
                        &replica.name,
                        ConflictType::SourceColumnMissing,
                        Resolver::UseDefaultValue,
                    ),
                );
            }
        }
        (Change::DroppedColumn { table, column }, Ahead::Upstream) => {
            if transformed(table, column) {
                return out;
            }
            if facts.needs_value(table, column) {
                refuse(
                    format!(
                        "dropped column {}.{column} is NOT NULL without a default on node {}, so rows without it cannot be applied there",
                        at(table),
                        replica.node
                    ),
                    format!(
                        "a migration before this one: ALTER TABLE {} ALTER COLUMN {column} DROP NOT NULL (or SET DEFAULT ...)",
                        at(table)
                    ),
                );
            } else if want(ConflictType::SourceColumnMissing, Resolver::UseDefaultValue) {
                refuse(
                    format!("the upstream stops sending column {}.{column}", at(table)),
                    resolver_fix(
                        &replica.name,
                        ConflictType::SourceColumnMissing,
                        Resolver::UseDefaultValue,
                    ),
                );
            }
        }
        (
            Change::TypeChange {
                table,
                column,
                type_text,
            },
            ahead,
        ) => {
            if transformed(table, column) {
                return out;
            }
            let transform_fix = |example: &str| {
                format!(
                    "CREATE TRANSFORM ... ON REPLICA {} FOR TABLE {} SET {column} = {example} (drop it once every node has the new type)",
                    replica.name,
                    at(table)
                )
            };
            let conversion = facts.conversion(table, column, type_text, ahead);
            if !facts.converts(table, column, type_text) {
                refuse(
                    format!(
                        "column {}.{column} changes to {type_text}, which does not convert by assignment cast between the upstream and node {}",
                        at(table),
                        replica.node
                    ),
                    transform_fix("<expression over NEW>"),
                );
            } else if let Some(c) = conversion {
                if c.compared && !want(ConflictType::TargetColumnTypeMismatch, Resolver::Error) {
                    refuse(
                        format!(
                            "column {}.{column} reaches node {} as {} while it has {}, and target_column_type_mismatch is error, so every row of the table would halt the replica",
                            at(table),
                            replica.node,
                            c.from,
                            c.to
                        ),
                        resolver_fix(
                            &replica.name,
                            ConflictType::TargetColumnTypeMismatch,
                            Resolver::Transform,
                        ),
                    );
                } else if let Some(values) = &c.refused {
                    refuse(
                        format!(
                            "column {}.{column} reaches node {} as {} while it has {}, and {}'s input function refuses the text of {values}: each row with such a value would halt the replica",
                            at(table),
                            replica.node,
                            c.from,
                            c.to,
                            c.to
                        ),
                        transform_fix(&format!("NEW.{column}::{}", c.to)),
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Facts;

    impl NodeFacts for Facts {
        fn needs_value(&self, _: &(String, String), column: &str) -> bool {
            column == "strict"
        }
        fn converts(&self, _: &(String, String), _: &str, type_text: &str) -> bool {
            type_text != "boolean"
        }
        /// `amount` was numeric(10,2); `integer` is the new type.
        fn conversion(
            &self,
            _: &(String, String),
            column: &str,
            type_text: &str,
            ahead: Ahead,
        ) -> Option<Conversion> {
            if column != "amount" {
                return None;
            }
            let old = ((1700, (10 << 16) + 2 + 4), "numeric(10,2)");
            let new = ((23, -1), type_text);
            let (from, to) = match ahead {
                Ahead::Upstream => (new, old),
                Ahead::Node => (old, new),
            };
            Some(Conversion {
                from: from.1.to_string(),
                to: to.1.to_string(),
                compared: true,
                refused: refused_values(from.0, to.0),
            })
        }
    }

    fn replica(resolvers: Resolvers) -> ReplicaView {
        ReplicaView {
            name: "node_b".into(),
            node: "b".into(),
            resolvers,
            transforms: Vec::new(),
            tables: Vec::new(),
        }
    }

    fn window() -> Resolvers {
        let mut r = Resolvers::default();
        r.set(ConflictType::TargetTableMissing, Resolver::Skip)
            .unwrap();
        r.set(ConflictType::TargetColumnMissing, Resolver::Ignore)
            .unwrap();
        r
    }

    /// A rename moves a column or table away from the name the side not
    /// yet migrated has, and a dropped table is gone from a node ahead
    /// while the upstream still sends it: the check sees them (before, it
    /// said nothing would halt, and the replica halted mid-rollout at the
    /// first row under the new name).
    /// A replica's publication lists its tables: a table it does not
    /// replicate, or one created, sends it nothing, so the check found
    /// problems the replica would never meet; a renamed table is followed
    /// under its new name.
    #[test]
    fn only_the_replicas_tables_are_checked() {
        let orders = ("public".to_string(), "orders".to_string());
        let mut r = replica(Resolvers::default());
        r.tables = vec![orders.clone()];
        let all: Vec<Change> = [
            "CREATE TABLE audit (id int)",
            "ALTER TABLE audit ADD COLUMN note text",
            "ALTER TABLE customers DROP COLUMN email",
            "ALTER TABLE orders ADD COLUMN remark text",
            "ALTER TABLE orders RENAME TO purchases",
            "ALTER TABLE purchases ADD COLUMN total numeric",
            "DROP TABLE customers",
        ]
        .iter()
        .flat_map(|s| changes(s))
        .collect();
        let reached: Vec<String> = replicated(&all, &r.tables)
            .iter()
            .map(|c| format!("{c:?}"))
            .collect();
        assert_eq!(reached.len(), 3, "{reached:#?}");
        assert!(reached[0].contains("remark"), "{reached:?}");
        assert!(reached[1].contains("RenamedTable"), "{reached:?}");
        assert!(reached[2].contains("total"), "{reached:?}");
        // The upstream ahead: the findings are those of the replica's
        // table only (its new column, and the renamed table the node
        // lacks under its new name).
        let found: Vec<Finding> = replicated(&all, &r.tables)
            .into_iter()
            .flat_map(|c| findings(c, &r, Ahead::Upstream, &Facts))
            .collect();
        assert!(
            found
                .iter()
                .all(|f| !f.problem.contains("audit") && !f.problem.contains("customers")),
            "{found:#?}"
        );
        assert!(
            found.iter().any(|f| f.problem.contains("public.purchases")),
            "{found:#?}"
        );
        // Unknown tables (an empty list): every change, as before.
        assert_eq!(replicated(&all, &[]).len(), all.len());
    }

    #[test]
    fn renames_and_dropped_tables_are_checked() {
        let t = ("public".to_string(), "orders".to_string());
        assert_eq!(
            changes("ALTER TABLE orders RENAME COLUMN note TO remark"),
            [
                Change::DroppedColumn {
                    table: t.clone(),
                    column: "note".into()
                },
                Change::NewColumn {
                    table: t.clone(),
                    column: "remark".into(),
                    needs_value: false
                },
            ]
        );
        assert_eq!(
            changes("ALTER TABLE orders RENAME TO purchases"),
            [Change::RenamedTable {
                from: t.clone(),
                to: ("public".into(), "purchases".into())
            }]
        );
        assert_eq!(
            changes("DROP TABLE orders"),
            [Change::DroppedTable { table: t.clone() }]
        );
        assert!(
            changes("DROP VIEW orders_view")
                .iter()
                .all(|c| !matches!(c, Change::DroppedTable { .. }))
        );
        let defaults = replica(Resolvers::default());
        let found = |statement: &str, ahead: Ahead, r: &ReplicaView| -> Vec<String> {
            changes(statement)
                .iter()
                .flat_map(|c| findings(c, r, ahead, &Facts))
                .map(|f| f.fix)
                .collect()
        };
        // The upstream ahead sends `remark`, which the node lacks.
        let fixes = found(
            "ALTER TABLE orders RENAME COLUMN note TO remark",
            Ahead::Upstream,
            &defaults,
        );
        assert!(
            fixes
                .iter()
                .any(|f| f.contains("target_column_missing = 'ignore'")),
            "{fixes:?}"
        );
        // A node ahead has dropped the table the upstream still sends.
        let fixes = found("DROP TABLE orders", Ahead::Node, &defaults);
        assert_eq!(
            fixes,
            ["ALTER REPLICA node_b SET CONFLICT RESOLVER target_table_missing = 'skip'"]
        );
        assert!(found("DROP TABLE orders", Ahead::Node, &replica(window())).is_empty());
        assert!(found("DROP TABLE orders", Ahead::Upstream, &defaults).is_empty());
    }

    /// NOT NULL is read from the new column's own definition: not from
    /// the first place its name occurs (inside the table's name, `b` in
    /// `table`), nor cut at the comma of `numeric(10,2)`. Before, both
    /// said "nullable", and a node ahead got a NOT NULL column without a
    /// default that the upstream does not send: every insert halted.
    #[test]
    fn not_null_is_read_from_the_columns_own_definition() {
        let needs = |statement: &str| -> Vec<(String, bool)> {
            changes(statement)
                .into_iter()
                .filter_map(|c| match c {
                    Change::NewColumn {
                        column,
                        needs_value,
                        ..
                    } => Some((column, needs_value)),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            needs("ALTER TABLE t ADD COLUMN a int, ADD COLUMN b int NOT NULL"),
            [("a".to_string(), false), ("b".to_string(), true)]
        );
        assert_eq!(
            needs("ALTER TABLE t ADD COLUMN amount numeric(10,2) NOT NULL"),
            [("amount".to_string(), true)]
        );
        assert_eq!(
            needs("ALTER TABLE orders_with_idx ADD COLUMN idx int, ADD COLUMN id int NOT NULL"),
            [("idx".to_string(), false), ("id".to_string(), true)]
        );
        assert_eq!(
            needs("ALTER TABLE t ADD \"Note\" text NOT NULL"),
            [("Note".to_string(), true)]
        );
        assert_eq!(
            needs("ALTER TABLE t ADD COLUMN n text NULL, ADD COLUMN m text CHECK (m IS NOT NULL)"),
            [("n".to_string(), false), ("m".to_string(), false)]
        );
    }

    /// The pairs whose text the other type's input refuses, and the
    /// values named.
    #[test]
    fn refused_values_name_the_rows_that_would_halt() {
        let numeric = |p: i32, s: i32| (1700, (p << 16) + s + 4);
        assert_eq!(
            refused_values(numeric(10, 2), (23, -1)).as_deref(),
            Some("every value (numeric with scale 2 prints 2 decimal places, e.g. 5.00)")
        );
        assert_eq!(
            refused_values(numeric(10, 0), (20, -1)).as_deref(),
            Some("values with a fractional part (e.g. 5.5)")
        );
        assert_eq!(
            refused_values((1700, -1), (21, -1)).as_deref(),
            Some("values with a fractional part (e.g. 5.5)")
        );
        assert!(refused_values((701, -1), (23, -1)).is_some());
        assert!(refused_values((790, -1), (1700, -1)).is_some());
        // Widening, the same type, and into text all read every value.
        for (from, to) in [
            ((23, -1), numeric(10, 2)),
            ((23, -1), (20, -1)),
            (numeric(10, 2), numeric(12, 2)),
            (numeric(10, 2), (701, -1)),
            ((1700, -1), (25, -1)),
            ((1082, -1), (1114, -1)),
        ] {
            assert_eq!(refused_values(from, to), None, "{from:?} -> {to:?}");
        }
    }

    /// numeric(10,2) into integer has an assignment cast, but the apply
    /// gives the text `5.00` to integer's input, which refuses it: only
    /// the direction that sends numeric to an integer column is refused,
    /// with a transform as the fix; `error` refuses any direction.
    #[test]
    fn a_type_change_the_text_does_not_survive_is_refused() {
        let t = ("public".to_string(), "load".to_string());
        let change = Change::TypeChange {
            table: t,
            column: "amount".into(),
            type_text: "integer".into(),
        };
        let f = findings(&change, &replica(window()), Ahead::Node, &Facts);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].problem,
            "column public.load.amount reaches node b as numeric(10,2) while it has integer, and integer's input function refuses the text of every value (numeric with scale 2 prints 2 decimal places, e.g. 5.00): each row with such a value would halt the replica"
        );
        assert_eq!(
            f[0].fix,
            "CREATE TRANSFORM ... ON REPLICA node_b FOR TABLE public.load SET amount = NEW.amount::integer (drop it once every node has the new type)"
        );
        assert!(findings(&change, &replica(window()), Ahead::Upstream, &Facts).is_empty());
        let mut strict = window();
        strict
            .set(ConflictType::TargetColumnTypeMismatch, Resolver::Error)
            .unwrap();
        let f = findings(&change, &replica(strict), Ahead::Upstream, &Facts);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].fix,
            "ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_type_mismatch = 'transform'"
        );
    }

    #[test]
    fn statements_become_the_changes_the_check_knows() {
        assert_eq!(
            changes("CREATE TABLE audit (id int PRIMARY KEY)"),
            vec![Change::NewTable {
                table: ("public".into(), "audit".into())
            }]
        );
        assert_eq!(
            changes("ALTER TABLE shop.orders ADD COLUMN region text NOT NULL"),
            vec![Change::NewColumn {
                table: ("shop".into(), "orders".into()),
                column: "region".into(),
                needs_value: true
            }]
        );
        assert_eq!(
            changes("ALTER TABLE orders ADD COLUMN region text NOT NULL DEFAULT 'eu'"),
            vec![Change::NewColumn {
                table: ("public".into(), "orders".into()),
                column: "region".into(),
                needs_value: false
            }]
        );
        assert_eq!(
            changes("ALTER TABLE orders DROP COLUMN note, ALTER COLUMN status TYPE text"),
            vec![
                Change::DroppedColumn {
                    table: ("public".into(), "orders".into()),
                    column: "note".into()
                },
                Change::TypeChange {
                    table: ("public".into(), "orders".into()),
                    column: "status".into(),
                    type_text: "text".into()
                }
            ]
        );
        assert!(changes("CREATE INDEX ON orders (status)").is_empty());
        assert!(changes("this is not sql").is_empty());
    }

    #[test]
    fn each_change_is_refused_without_its_resolver_and_passes_with_it() {
        let t = ("public".to_string(), "orders".to_string());
        let cases = [
            // (change, ahead, findings under the defaults, under the window)
            (Change::NewTable { table: t.clone() }, Ahead::Upstream, 1, 0),
            (Change::NewTable { table: t.clone() }, Ahead::Node, 0, 0),
            (
                Change::NewColumn {
                    table: t.clone(),
                    column: "c".into(),
                    needs_value: false,
                },
                Ahead::Upstream,
                1,
                0,
            ),
            (
                Change::NewColumn {
                    table: t.clone(),
                    column: "c".into(),
                    needs_value: true,
                },
                Ahead::Node,
                1,
                1,
            ),
            (
                Change::DroppedColumn {
                    table: t.clone(),
                    column: "loose".into(),
                },
                Ahead::Upstream,
                0,
                0,
            ),
            (
                Change::DroppedColumn {
                    table: t.clone(),
                    column: "strict".into(),
                },
                Ahead::Upstream,
                1,
                1,
            ),
            (
                Change::DroppedColumn {
                    table: t.clone(),
                    column: "loose".into(),
                },
                Ahead::Node,
                1,
                0,
            ),
            (
                Change::TypeChange {
                    table: t.clone(),
                    column: "status".into(),
                    type_text: "text".into(),
                },
                Ahead::Upstream,
                0,
                0,
            ),
            (
                Change::TypeChange {
                    table: t.clone(),
                    column: "status".into(),
                    type_text: "boolean".into(),
                },
                Ahead::Upstream,
                1,
                1,
            ),
        ];
        for (n, (change, ahead, strict, windowed)) in cases.into_iter().enumerate() {
            let got = findings(&change, &replica(Resolvers::default()), ahead, &Facts);
            assert_eq!(got.len(), strict, "case {n} under the defaults: {got:?}");
            let got = findings(&change, &replica(window()), ahead, &Facts);
            assert_eq!(got.len(), windowed, "case {n} in the window: {got:?}");
        }
        // Each finding names its fix.
        let f = findings(
            &Change::NewTable { table: t.clone() },
            &replica(Resolvers::default()),
            Ahead::Upstream,
            &Facts,
        );
        assert_eq!(
            f[0].fix,
            "ALTER REPLICA node_b SET CONFLICT RESOLVER target_table_missing = 'skip'"
        );
        let f = findings(
            &Change::DroppedColumn {
                table: t.clone(),
                column: "strict".into(),
            },
            &replica(window()),
            Ahead::Upstream,
            &Facts,
        );
        assert!(f[0].fix.contains("DROP NOT NULL"), "{f:?}");
        // A transform of the column answers a type change.
        let mut with = replica(window());
        with.transforms.push(Transform {
            name: "as_bool".into(),
            schema: "public".into(),
            table: "orders".into(),
            sets: vec![("status".into(), "NEW.status = 'y'".into())],
            filter: None,
        });
        let f = findings(
            &Change::TypeChange {
                table: t,
                column: "status".into(),
                type_text: "boolean".into(),
            },
            &with,
            Ahead::Upstream,
            &Facts,
        );
        assert!(f.is_empty(), "{f:?}");
    }
}

/// A rollout: the nodes in order (names and connection urls), which of
/// them is the replicas' upstream, the replicas into the others with
/// their node's url.
#[derive(Clone, Debug)]
pub struct RolloutSpec {
    pub dir: std::path::PathBuf,
    pub nodes: Vec<(String, String)>,
    pub upstream: String,
    pub replicas: Vec<(ReplicaView, String)>,
    /// How long each replica may take to catch up after a node.
    pub catchup_timeout: std::time::Duration,
}

/// One step of a rollout, as it is reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The check found nothing that would halt a replica.
    Checked {
        statements: usize,
        replicas: usize,
    },
    /// The node had no pending migration (a rollout resumed after it).
    AlreadyMigrated {
        node: String,
    },
    Migrated {
        node: String,
        applied: usize,
    },
    /// Every replica has the upstream's transactions up to the marker
    /// written after the node's migrations.
    CaughtUp {
        node: String,
        millis: u64,
    },
}

/// Why a rollout did not run or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(
        "the rollout would halt replication: {}",
        .0.iter().map(|f| format!("{} (replica {} into node {}); fix: {}", f.problem, f.replica, f.node, f.fix)).collect::<Vec<_>>().join("; ")
    )]
    Refused(Vec<Finding>),
    #[error("node {node}: {message}")]
    Node { node: String, message: String },
    #[error("{}", catch_up_message(.node, .replica, .at, .marker, .timeout, .halt.as_ref()))]
    CatchUp {
        node: String,
        replica: String,
        at: String,
        marker: String,
        timeout: std::time::Duration,
        /// The halt the node records for the replica: the upstream
        /// transaction's end and why.
        halt: Option<(String, String)>,
    },
}

/// A replica that did not catch up: halted (why, and the ways past it), or
/// only slow.
fn catch_up_message(
    node: &str,
    replica: &str,
    at: &str,
    marker: &str,
    timeout: &std::time::Duration,
    halt: Option<&(String, String)>,
) -> String {
    match halt {
        Some((lsn, why)) => format!(
            "replica {replica} did not catch up within {timeout:?} after node {node}: it is halted at the upstream transaction finished at {lsn}: {why}; the rollout stopped: fix the cause (the replica tries again by itself, every {}s at most) or skip that transaction with `evolve replicate skip {replica} --lsn {lsn}`, then run the rollout again to continue with the next node",
            crate::replica::HALT_RETRY_MAX.as_secs()
        ),
        None => format!(
            "replica {replica} did not catch up within {timeout:?} after node {node} (it is at {at}, the marker at {marker}, and not halted): the rollout stopped; run it again to continue with the next node once it has (SHOW REPLICAS shows whether it runs)"
        ),
    }
}

/// A type change's column, for [`Facts`]: (table, column, new type).
type ColumnChange = ((String, String), String, String);

struct Facts {
    needs_value: std::collections::HashSet<((String, String), String)>,
    converts: std::collections::HashSet<ColumnChange>,
    conversions: std::collections::HashMap<(ColumnChange, Ahead), Conversion>,
}

impl NodeFacts for Facts {
    fn needs_value(&self, table: &(String, String), column: &str) -> bool {
        self.needs_value
            .contains(&(table.clone(), column.to_string()))
    }
    fn converts(&self, table: &(String, String), column: &str, type_text: &str) -> bool {
        self.converts
            .contains(&(table.clone(), column.to_string(), type_text.to_string()))
    }
    fn conversion(
        &self,
        table: &(String, String),
        column: &str,
        type_text: &str,
        ahead: Ahead,
    ) -> Option<Conversion> {
        self.conversions
            .get(&(
                (table.clone(), column.to_string(), type_text.to_string()),
                ahead,
            ))
            .cloned()
    }
}

/// Where a node's url comes from, for connection errors: `--nodes` names
/// connections of the config (`--config`, `evolve.toml` by default).
const NODE_GIVEN: &str = "the node's connection in the config (--config)";

async fn connect(node: &str, url: &str) -> Result<tokio_postgres::Client, RolloutError> {
    evolve_pg::connect(url, "evolve rollout")
        .await
        .map_err(|e| RolloutError::Node {
            node: node.to_string(),
            message: e.given_by(NODE_GIVEN).to_string(),
        })
}

/// `evolve migrate`'s options for the node at `url`.
fn migrate_options(url: &str, dir: &std::path::Path) -> evolve_migrate::Options {
    let mut opts = evolve_migrate::Options::new(url.to_string(), dir);
    opts.database_url_given = NODE_GIVEN;
    opts
}

fn node_error(node: &str, e: impl std::fmt::Display) -> RolloutError {
    RolloutError::Node {
        node: node.to_string(),
        message: e.to_string(),
    }
}

/// OIDs below this are PostgreSQL's own, the same on every server.
const FIRST_USER_OID: u32 = 16_384;

/// What the node's catalog says for `changes` (the type changes in both
/// directions: the node's type from the new one, and the new one from the
/// node's).
async fn facts(node: &str, url: &str, changes: &[Change]) -> Result<Facts, RolloutError> {
    let client = connect(node, url).await?;
    let mut facts = Facts {
        needs_value: Default::default(),
        converts: Default::default(),
        conversions: Default::default(),
    };
    for change in changes {
        match change {
            Change::DroppedColumn { table, column } => {
                let strict = client
                    .query_opt(
                        "SELECT 1 FROM pg_attribute a
                         JOIN pg_class c ON c.oid = a.attrelid
                         JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3
                           AND a.attnotnull AND NOT a.atthasdef AND a.attidentity = ''",
                        &[&table.0, &table.1, column],
                    )
                    .await
                    .map_err(|e| node_error(node, e))?
                    .is_some();
                if strict {
                    facts.needs_value.insert((table.clone(), column.clone()));
                }
            }
            Change::TypeChange {
                table,
                column,
                type_text,
            } => {
                // Both ways: the upstream's values reach the node before
                // or after it changes the column.
                let row = client
                    .query_opt(
                        "SELECT EXISTS (SELECT 1 FROM pg_cast
                                        WHERE castsource = to_regtype($4) AND casttarget = a.atttypid
                                          AND castcontext IN ('a', 'i'))
                                OR to_regtype($4) = a.atttypid,
                                EXISTS (SELECT 1 FROM pg_cast
                                        WHERE casttarget = to_regtype($4) AND castsource = a.atttypid
                                          AND castcontext IN ('a', 'i'))
                                OR to_regtype($4) = a.atttypid,
                                a.atttypid::int8, a.atttypmod, format_type(a.atttypid, a.atttypmod)
                         FROM pg_attribute a
                         JOIN pg_class c ON c.oid = a.attrelid
                         JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3
                           AND NOT a.attisdropped",
                        &[&table.0, &table.1, column, type_text],
                    )
                    .await
                    .map_err(|e| node_error(node, e))?;
                let Some(r) = row else {
                    continue;
                };
                let key = (table.clone(), column.clone(), type_text.clone());
                if r.get::<_, Option<bool>>(0) == Some(true)
                    && r.get::<_, Option<bool>>(1) == Some(true)
                {
                    facts.converts.insert(key.clone());
                }
                // The new type with its modifier, as the node reads it
                // (to_regtype drops the modifier): the column type of a
                // statement selecting a NULL of it, prepared, not run.
                let Ok(statement) = client.prepare(&format!("SELECT NULL::{type_text}")).await
                else {
                    continue;
                };
                let Some(c) = statement.columns().first() else {
                    continue;
                };
                let new = (c.type_().oid(), c.type_modifier());
                let new_name: String = client
                    .query_one(
                        "SELECT format_type($1::int8::oid, $2)",
                        &[&i64::from(new.0), &new.1],
                    )
                    .await
                    .map_err(|e| node_error(node, e))?
                    .get(0);
                let old = (r.get::<_, i64>(2) as u32, r.get::<_, i32>(3));
                let old_name: String = r.get(4);
                // The upstream ahead sends the new type to the node's old
                // column; a node ahead has the new type and is sent the
                // old one.
                for (ahead, (from, from_name), (to, to_name)) in [
                    (Ahead::Upstream, (new, &new_name), (old, &old_name)),
                    (Ahead::Node, (old, &old_name), (new, &new_name)),
                ] {
                    facts.conversions.insert(
                        (key.clone(), ahead),
                        Conversion {
                            from: from_name.clone(),
                            to: to_name.clone(),
                            compared: from.0 < FIRST_USER_OID,
                            refused: refused_values(from, to),
                        },
                    );
                }
            }
            _ => {}
        }
    }
    Ok(facts)
}

/// The statements of the migrations pending on any node.
async fn pending_changes(spec: &RolloutSpec) -> Result<(usize, Vec<Change>), RolloutError> {
    let mut scripts = std::collections::BTreeSet::new();
    for (node, url) in &spec.nodes {
        let status = evolve_migrate::status(&migrate_options(url, &spec.dir))
            .await
            .map_err(|e| node_error(node, e))?;
        for m in status.migrations {
            if m.state == evolve_migrate::State::Pending {
                scripts.insert(m.script);
            }
        }
    }
    let mut statements = 0;
    let mut changes = Vec::new();
    for script in scripts {
        let path = spec.dir.join(&script);
        let text = std::fs::read_to_string(&path).map_err(|e| RolloutError::Node {
            node: spec.upstream.clone(),
            message: format!("read {}: {e}", path.display()),
        })?;
        let parsed =
            evolve_core::migration::parse_script(&text).map_err(|e| RolloutError::Node {
                node: spec.upstream.clone(),
                message: format!("{}: {e}", path.display()),
            })?;
        for s in parsed.statements {
            statements += 1;
            changes.extend(self::changes(&s.text));
        }
    }
    Ok((statements, changes))
}

/// The changes of `changes` (in order) that reach a replica of `tables`:
/// its publication lists them (following a renamed one under its new
/// name), so a table created, or one it does not replicate, sends it
/// nothing. Empty `tables`: every change.
pub fn replicated<'a>(changes: &'a [Change], tables: &[(String, String)]) -> Vec<&'a Change> {
    if tables.is_empty() {
        return changes.iter().collect();
    }
    let mut published: std::collections::BTreeSet<(String, String)> =
        tables.iter().cloned().collect();
    let mut out = Vec::new();
    for change in changes {
        let reaches = match change {
            Change::NewTable { .. } => false,
            Change::DroppedTable { table } => published.remove(table),
            Change::RenamedTable { from, to } => {
                let renamed = published.remove(from);
                if renamed {
                    published.insert(to.clone());
                }
                renamed
            }
            Change::NewColumn { table, .. }
            | Change::DroppedColumn { table, .. }
            | Change::TypeChange { table, .. } => published.contains(table),
        };
        if reaches {
            out.push(change);
        }
    }
    out
}

/// Checks the pending migrations against every replica: the findings
/// (empty when the rollout may run) and the number of statements read.
pub async fn check(spec: &RolloutSpec) -> Result<(usize, Vec<Finding>), RolloutError> {
    let (statements, changes) = pending_changes(spec).await?;
    let order = |name: &str| spec.nodes.iter().position(|(n, _)| n == name);
    let upstream_at = order(&spec.upstream);
    let mut out = Vec::new();
    for (replica, url) in &spec.replicas {
        let ahead = if upstream_at < order(&replica.node) {
            Ahead::Upstream
        } else {
            Ahead::Node
        };
        let facts = facts(&replica.node, url, &changes).await?;
        for change in replicated(&changes, &replica.tables) {
            out.extend(findings(change, replica, ahead, &facts));
        }
    }
    Ok((statements, out))
}

/// Runs the rollout: the check, then for each node in order its pending
/// migrations (as `evolve migrate apply` runs them), a marker written
/// upstream, and a wait until every replica has applied the marker's
/// transaction. A node without pending migrations is passed over, so a
/// rollout stopped after node k continues with node k + 1.
pub async fn run(
    spec: &RolloutSpec,
    on_step: &mut (dyn FnMut(&Step) + Send),
) -> Result<Vec<Step>, RolloutError> {
    let (statements, found) = check(spec).await?;
    if !found.is_empty() {
        return Err(RolloutError::Refused(found));
    }
    let mut steps = vec![Step::Checked {
        statements,
        replicas: spec.replicas.len(),
    }];
    on_step(&steps[0]);
    let upstream_url = spec
        .nodes
        .iter()
        .find(|(n, _)| *n == spec.upstream)
        .map(|(_, u)| u.clone())
        .ok_or_else(|| {
            node_error(
                &spec.upstream,
                "the upstream is not one of the rollout's nodes",
            )
        })?;
    for (node, url) in &spec.nodes {
        let opts = migrate_options(url, &spec.dir);
        let pending = evolve_migrate::status(&opts)
            .await
            .map_err(|e| node_error(node, e))?
            .migrations
            .iter()
            .filter(|m| m.state == evolve_migrate::State::Pending)
            .count();
        let step = if pending == 0 {
            Step::AlreadyMigrated { node: node.clone() }
        } else {
            let report =
                evolve_migrate::apply(&opts, &evolve_migrate::ApplyOptions::default(), &mut |_| {})
                    .await
                    .map_err(|e| node_error(node, e))?;
            Step::Migrated {
                node: node.clone(),
                applied: report.applied,
            }
        };
        on_step(&step);
        steps.push(step);
        // A marker transaction upstream, after the node's DDL: once a
        // replica has applied it, it has everything before it.
        let started = std::time::Instant::now();
        let up = connect(&spec.upstream, &upstream_url).await?;
        let marker: String = up
            .query_one(
                "SELECT pg_logical_emit_message(true, 'evolve', 'rollout ' || $1)::text",
                &[node],
            )
            .await
            .map_err(|e| node_error(&spec.upstream, e))?
            .get(0);
        for (replica, node_url) in &spec.replicas {
            let client = connect(&replica.node, node_url).await?;
            loop {
                // The halt columns by name through to_jsonb: a progress
                // table of an earlier version lacks them.
                let row = client
                    .query_opt(
                        "SELECT lsn::text, to_jsonb(p)->>'halted_lsn', to_jsonb(p)->>'halt'
                         FROM evolve_replica_progress p WHERE replica = $1",
                        &[&replica.name],
                    )
                    .await
                    .map_err(|e| node_error(&replica.node, e))?;
                let at: Option<String> = row.as_ref().map(|r| r.get(0));
                let halt: Option<(String, String)> = row.as_ref().and_then(|r| {
                    Some((
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ))
                });
                let done: bool = client
                    .query_one(
                        "SELECT coalesce($1::text::pg_lsn > $2::text::pg_lsn, false)",
                        &[&at, &marker],
                    )
                    .await
                    .map_err(|e| node_error(&replica.node, e))?
                    .get(0);
                if done {
                    break;
                }
                if started.elapsed() > spec.catchup_timeout {
                    return Err(RolloutError::CatchUp {
                        node: node.clone(),
                        replica: replica.name.clone(),
                        at: at.unwrap_or_else(|| "0/0".into()),
                        marker,
                        timeout: spec.catchup_timeout,
                        halt,
                    });
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        let step = Step::CaughtUp {
            node: node.clone(),
            millis: started.elapsed().as_millis() as u64,
        };
        on_step(&step);
        steps.push(step);
    }
    Ok(steps)
}
