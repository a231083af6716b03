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
//! | a type change | the node's type takes the new one by assignment cast, or a transform computes the column | the same, the other way |
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
    fx.actions
        .iter()
        .filter_map(|a| match a {
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
        })
        .collect()
}

/// Whether `ADD COLUMN column ...` in `statement` says NOT NULL (the
/// effects do not carry it).
fn is_not_null(statement: &str, column: &str) -> bool {
    let lower = statement.to_ascii_lowercase();
    let Some(at) = lower.find(&column.to_ascii_lowercase()) else {
        return false;
    };
    let rest = &lower[at..];
    let end = rest.find(',').unwrap_or(rest.len());
    rest[..end].contains("not null")
}

/// What the check asks of a node's catalog.
pub trait NodeFacts {
    /// Whether the node's column is NOT NULL without a default (a row
    /// without it cannot be inserted).
    fn needs_value(&self, table: &(String, String), column: &str) -> bool;
    /// Whether values of type `from` (as written, or the column's type on
    /// the other side) convert to the column's type by assignment cast.
    fn converts(&self, table: &(String, String), column: &str, type_text: &str) -> bool;
}

/// A replica as the check sees it.
#[derive(Clone, Debug)]
pub struct ReplicaView {
    pub name: String,
    /// The node's name in the rollout.
    pub node: String,
    pub resolvers: Resolvers,
    pub transforms: Vec<Transform>,
}

/// Which side the rollout migrates first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
            _,
        ) => {
            if !transformed(table, column) && !facts.converts(table, column, type_text) {
                refuse(
                    format!(
                        "column {}.{column} changes to {type_text}, which does not convert by assignment cast between the upstream and node {}",
                        at(table),
                        replica.node
                    ),
                    format!(
                        "CREATE TRANSFORM ... ON REPLICA {} FOR TABLE {} SET {column} = <expression over NEW>",
                        replica.name,
                        at(table)
                    ),
                );
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
    }

    fn replica(resolvers: Resolvers) -> ReplicaView {
        ReplicaView {
            name: "node_b".into(),
            node: "b".into(),
            resolvers,
            transforms: Vec::new(),
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
