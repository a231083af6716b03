//! `evolve deps`: what depends on a table or one of its columns.
//!
//! PostgreSQL refuses `ALTER COLUMN ... TYPE` and `DROP COLUMN` on a column
//! that something else reads: views and materialized views (through their
//! `_RETURN` rule in `pg_rewrite`), row-level security policies, trigger
//! `WHEN` clauses, generated columns (`pg_attrdef`) and SQL-standard
//! (`BEGIN ATOMIC`) function bodies (`pg_proc`). All of them are recorded in
//! `pg_depend` as normal (`n`) dependencies on the table's column, so the
//! walk follows exactly those, level by level: depth 1 depends on the table
//! directly, depth n on a view or materialized view at depth n-1. An object
//! reachable along several paths gets its deepest depth (the order in which
//! dependents must be dropped) and the path that gives it.

use std::collections::BTreeMap;

use evolve_pg::{Client, QualifiedName, quote_ident};
use serde::Serialize;

use crate::MigrateError;

/// What kind of object depends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DependentKind {
    View,
    MaterializedView,
    Policy,
    Trigger,
    GeneratedColumn,
    Function,
}

impl DependentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DependentKind::View => "view",
            DependentKind::MaterializedView => "materialized view",
            DependentKind::Policy => "policy",
            DependentKind::Trigger => "trigger",
            DependentKind::GeneratedColumn => "generated column",
            DependentKind::Function => "function",
        }
    }
}

/// One dependent object. This is also the documented shape of
/// `evolve deps --format json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dependent {
    /// The object's oid in its catalog (pg_class for views and
    /// materialized views): names are for people, the oid identifies it
    /// even when a schema name contains a dot.
    #[serde(skip)]
    pub oid: u32,
    pub depth: u32,
    pub kind: DependentKind,
    /// `schema.name` for views and materialized views, `name on
    /// schema.table` for policies and triggers, `schema.table.column` for
    /// generated columns, `schema.name(argument types)` for functions.
    /// Names are as stored, unquoted.
    pub name: String,
    pub owner: String,
    /// Materialized views only: whether it holds data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub populated: Option<bool>,
    /// Indexes on a materialized view (`pg_get_indexdef`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<String>,
    /// From the table to this object, each step a name.
    pub path: Vec<String>,
}

/// `evolve deps` output.
#[derive(Clone, Debug, Serialize)]
pub struct DepsReport {
    /// `schema.table` or `schema.table.column`.
    pub target: String,
    /// Sorted by depth, then name.
    pub dependents: Vec<Dependent>,
}

/// Lists everything that depends on `target` (`table`, `schema.table`,
/// `table.column` or `schema.table.column`; unquoted parts fold to lower
/// case, double-quoted parts are kept).
pub async fn deps(client: &Client, target: &str) -> Result<DepsReport, MigrateError> {
    let (table_oid, table, column) = resolve(client, target).await?;
    let target = match &column {
        Some((_, name)) => format!("{}.{name}", table.plain()),
        None => table.plain(),
    };
    // Relations found so far: oid -> (depth, path).
    let mut relations: BTreeMap<u32, (u32, Vec<String>)> = BTreeMap::new();
    let mut others: BTreeMap<(u32, u32), (u32, Vec<String>)> = BTreeMap::new();
    let mut frontier: Vec<(u32, Vec<String>)> = vec![(table_oid, vec![table.plain()])];
    let mut level = 1u32;
    while !frontier.is_empty() {
        if level > 100 {
            return Err(MigrateError::Usage(format!(
                "dependents of {target} nest deeper than 100 levels; this looks like a catalog cycle"
            )));
        }
        let oids: Vec<u32> = frontier.iter().map(|(oid, _)| *oid).collect();
        let attnum = if level == 1 {
            column.as_ref().map(|(n, _)| *n)
        } else {
            None
        };
        let rows = client
            .query(
                "SELECT d.refobjid, d.classid::regclass::text, d.objid, r.ev_class
                 FROM pg_depend d
                 LEFT JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid
                 WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY($1)
                   AND d.deptype = 'n'
                   AND ($2::int2 IS NULL OR d.refobjsubid = $2)
                   AND d.classid IN ('pg_rewrite'::regclass, 'pg_policy'::regclass,
                                     'pg_trigger'::regclass, 'pg_attrdef'::regclass,
                                     'pg_proc'::regclass)
                 ORDER BY 1, 3",
                &[&oids, &attnum],
            )
            .await?;
        let mut next: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for row in rows {
            let parent: u32 = row.try_get(0)?;
            let class: String = row.try_get(1)?;
            let objid: u32 = row.try_get(2)?;
            let rel: Option<u32> = row.try_get(3)?;
            let parent_path = frontier
                .iter()
                .find(|(oid, _)| *oid == parent)
                .map(|(_, p)| p.clone())
                .unwrap_or_default();
            match rel {
                Some(rel) if class == "pg_rewrite" => {
                    if rel == parent {
                        continue;
                    }
                    let deeper = relations.get(&rel).is_none_or(|(d, _)| *d < level);
                    if deeper {
                        let name = relation_name(client, rel).await?;
                        let mut path = parent_path;
                        path.push(name);
                        relations.insert(rel, (level, path.clone()));
                        next.insert(rel, path);
                    }
                }
                _ => {
                    let class_oid = class_oid(&class);
                    let deeper = others
                        .get(&(class_oid, objid))
                        .is_none_or(|(d, _)| *d < level);
                    if deeper {
                        others.insert((class_oid, objid), (level, parent_path));
                    }
                }
            }
        }
        frontier = next.into_iter().collect();
        level += 1;
    }

    let mut dependents = Vec::new();
    for (oid, (depth, path)) in relations {
        dependents.push(describe_relation(client, oid, depth, path).await?);
    }
    for ((class, objid), (depth, path)) in others {
        if let Some(d) = describe_other(client, class, objid, depth, path).await? {
            dependents.push(d);
        }
    }
    dependents.sort_by(|a, b| (a.depth, &a.name).cmp(&(b.depth, &b.name)));
    Ok(DepsReport { target, dependents })
}

// Stable keys for the catalogs that hold non-relation dependents.
const POLICY: u32 = 1;
const TRIGGER: u32 = 2;
const ATTRDEF: u32 = 3;
const PROC: u32 = 4;

fn class_oid(class: &str) -> u32 {
    match class {
        "pg_policy" => POLICY,
        "pg_trigger" => TRIGGER,
        "pg_attrdef" => ATTRDEF,
        _ => PROC,
    }
}

/// Resolves the user's `target` to a table oid, its name, and the column's
/// attnum and name if one was given.
async fn resolve(
    client: &Client,
    target: &str,
) -> Result<(u32, QualifiedName, Option<(i16, String)>), MigrateError> {
    let parts = split_target(target).map_err(MigrateError::Usage)?;
    let lookup = |schema: Option<&str>, table: &str| {
        let regclass = match schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(table)),
            None => quote_ident(table),
        };
        async move {
            let row = client
                .query_opt(
                    "SELECT c.oid, n.nspname::text, c.relname::text
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                    &[&regclass],
                )
                .await?;
            row.map(|r| {
                Ok::<_, MigrateError>((
                    r.try_get::<_, u32>(0)?,
                    QualifiedName::new(r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?),
                ))
            })
            .transpose()
        }
    };
    let (found, column) = match parts.as_slice() {
        [t] => (lookup(None, t).await?, None),
        [a, b] => match lookup(Some(a), b).await? {
            Some(found) => (Some(found), None),
            None => (lookup(None, a).await?, Some(b.clone())),
        },
        [s, t, c] => (lookup(Some(s), t).await?, Some(c.clone())),
        _ => unreachable!("split_target returns one to three parts"),
    };
    let Some((oid, table)) = found else {
        return Err(MigrateError::Usage(format!(
            "table {target:?} does not exist; name it as table, schema.table or schema.table.column (the search_path applies)"
        )));
    };
    let column = match column {
        None => None,
        Some(name) => {
            let row = client
                .query_opt(
                    "SELECT attnum FROM pg_attribute
                     WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped",
                    &[&oid, &name],
                )
                .await?;
            match row {
                Some(r) => Some((r.try_get::<_, i16>(0)?, name)),
                None => {
                    return Err(MigrateError::Usage(format!(
                        "column {name:?} of table {} does not exist",
                        table.plain()
                    )));
                }
            }
        }
    };
    Ok((oid, table, column))
}

/// Splits `a.b.c` into identifier parts, folding unquoted parts to lower
/// case as PostgreSQL does.
fn split_target(target: &str) -> Result<Vec<String>, String> {
    let bad = || {
        format!("{target:?} is not a valid name; use table, schema.table or schema.table.column")
    };
    let mut parts = Vec::new();
    let mut rest = target.trim();
    loop {
        let (part, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let mut part = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                if c == '"' {
                    if quoted[i + 1..].starts_with('"') {
                        part.push('"');
                        chars.next();
                    } else {
                        end = Some(i + 1);
                        break;
                    }
                } else {
                    part.push(c);
                }
            }
            let end = end.ok_or_else(bad)?;
            (part, &quoted[end..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            let raw = &rest[..end];
            if raw.is_empty() || raw.contains(['"', ' ']) {
                return Err(bad());
            }
            (raw.to_lowercase(), &rest[end..])
        };
        if part.is_empty() {
            return Err(bad());
        }
        parts.push(part);
        if after.is_empty() {
            break;
        }
        rest = after.strip_prefix('.').ok_or_else(bad)?;
    }
    if parts.len() > 3 {
        return Err(bad());
    }
    Ok(parts)
}

async fn relation_name(client: &Client, oid: u32) -> Result<String, MigrateError> {
    let row = client
        .query_one(
            "SELECT n.nspname::text || '.' || c.relname::text
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    Ok(row.try_get(0)?)
}

async fn describe_relation(
    client: &Client,
    oid: u32,
    depth: u32,
    path: Vec<String>,
) -> Result<Dependent, MigrateError> {
    let row = client
        .query_one(
            "SELECT c.relkind::text, pg_get_userbyid(c.relowner)::text, c.relispopulated,
                    array(SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
                          WHERE i.indrelid = c.oid ORDER BY i.indexrelid)
             FROM pg_class c WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    let relkind: String = row.try_get(0)?;
    let matview = relkind == "m";
    Ok(Dependent {
        oid,
        depth,
        kind: if matview {
            DependentKind::MaterializedView
        } else {
            DependentKind::View
        },
        name: path.last().cloned().unwrap_or_default(),
        owner: row.try_get(1)?,
        populated: matview.then(|| row.try_get(2)).transpose()?,
        indexes: row.try_get(3)?,
        path,
    })
}

async fn describe_other(
    client: &Client,
    class: u32,
    objid: u32,
    depth: u32,
    path: Vec<String>,
) -> Result<Option<Dependent>, MigrateError> {
    let (sql, kind) = match class {
        POLICY => (
            "SELECT format('%s on %s.%s', p.polname, n.nspname, c.relname), pg_get_userbyid(c.relowner)::text
             FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.oid = $1",
            DependentKind::Policy,
        ),
        TRIGGER => (
            "SELECT format('%s on %s.%s', t.tgname, n.nspname, c.relname), pg_get_userbyid(c.relowner)::text
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.oid = $1",
            DependentKind::Trigger,
        ),
        ATTRDEF => (
            "SELECT format('%s.%s.%s', n.nspname, c.relname, a.attname), pg_get_userbyid(c.relowner)::text
             FROM pg_attrdef d
             JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
             JOIN pg_class c ON c.oid = d.adrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE d.oid = $1",
            DependentKind::GeneratedColumn,
        ),
        _ => (
            "SELECT n.nspname::text || '.' || p.proname::text
                        || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                    pg_get_userbyid(p.proowner)::text
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = $1",
            DependentKind::Function,
        ),
    };
    let Some(row) = client.query_opt(sql, &[&objid]).await? else {
        return Ok(None);
    };
    let name: String = row.try_get(0)?;
    let mut path = path;
    path.push(name.clone());
    Ok(Some(Dependent {
        oid: objid,
        depth,
        kind,
        name,
        owner: row.try_get(1)?,
        populated: None,
        indexes: Vec::new(),
        path,
    }))
}

/// The dependency graph in Graphviz `dot`: an edge from each object to
/// what depends on it.
pub fn to_dot(report: &DepsReport) -> String {
    let mut out = String::from("digraph deps {\n  rankdir=LR;\n  node [shape=box];\n");
    out.push_str(&format!("  {} [style=bold];\n", dot_id(&report.target)));
    for d in &report.dependents {
        let shape = match d.kind {
            DependentKind::View => "box",
            DependentKind::MaterializedView => "box3d",
            _ => "ellipse",
        };
        out.push_str(&format!(
            "  {} [shape={shape}, label={}];\n",
            dot_id(&d.name),
            dot_id(&format!("{}\\n{}", d.name, d.kind.as_str()))
        ));
    }
    for (from, to) in edges(report) {
        out.push_str(&format!("  {} -> {};\n", dot_id(&from), dot_id(&to)));
    }
    out.push_str("}\n");
    out
}

/// The dependency graph as a Mermaid flowchart.
pub fn to_mermaid(report: &DepsReport) -> String {
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let mut id_of = |name: &str| {
        let n = ids.len();
        ids.entry(name.to_string())
            .or_insert_with(|| format!("n{n}"))
            .clone()
    };
    let mut out = String::from("flowchart LR\n");
    let target = id_of(&report.target);
    out.push_str(&format!(
        "  {target}[\"{}\"]\n",
        mermaid_text(&report.target)
    ));
    for d in &report.dependents {
        let id = id_of(&d.name);
        let label = format!("{}<br/>{}", mermaid_text(&d.name), d.kind.as_str());
        let node = match d.kind {
            DependentKind::View => format!("{id}[\"{label}\"]"),
            DependentKind::MaterializedView => format!("{id}[(\"{label}\")]"),
            _ => format!("{id}([\"{label}\"])"),
        };
        out.push_str(&format!("  {node}\n"));
    }
    for (from, to) in edges(report) {
        let (from, to) = (id_of(&from), id_of(&to));
        out.push_str(&format!("  {from} --> {to}\n"));
    }
    out
}

/// Edges along each dependent's path; the first step is the table, which
/// the graphs show as the target (table or column).
fn edges(report: &DepsReport) -> Vec<(String, String)> {
    let mut edges = Vec::new();
    for d in &report.dependents {
        let mut prev = report.target.clone();
        for step in d.path.iter().skip(1) {
            let edge = (prev.clone(), step.clone());
            if !edges.contains(&edge) {
                edges.push(edge);
            }
            prev = step.clone();
        }
    }
    edges
}

fn dot_id(s: &str) -> String {
    format!(
        "\"{}\"",
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace("\\\\n", "\\n")
    )
}

fn mermaid_text(s: &str) -> String {
    s.replace('"', "#quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> DepsReport {
        let dep = |depth, kind, name: &str, path: &[&str]| Dependent {
            oid: 0,
            depth,
            kind,
            name: name.into(),
            owner: "app".into(),
            populated: None,
            indexes: vec![],
            path: path.iter().map(|s| s.to_string()).collect(),
        };
        DepsReport {
            target: "public.orders.status".into(),
            dependents: vec![
                dep(
                    1,
                    DependentKind::MaterializedView,
                    "public.daily",
                    &["public.orders", "public.daily"],
                ),
                dep(
                    2,
                    DependentKind::MaterializedView,
                    "public.monthly",
                    &["public.orders", "public.daily", "public.monthly"],
                ),
                dep(
                    1,
                    DependentKind::Policy,
                    "p on orders",
                    &["public.orders", "p on orders"],
                ),
            ],
        }
    }

    #[test]
    fn dot_draws_each_edge_once() {
        let dot = to_dot(&report());
        assert!(dot.starts_with("digraph deps {"));
        assert_eq!(
            dot.matches("\"public.orders.status\" -> \"public.daily\";")
                .count(),
            1
        );
        assert_eq!(
            dot.matches("\"public.daily\" -> \"public.monthly\";")
                .count(),
            1
        );
        assert!(
            dot.contains(
                "\"public.monthly\" [shape=box3d, label=\"public.monthly\\nmaterialized view\"];"
            ),
            "{dot}"
        );
        assert!(dot.contains("\"public.orders.status\" -> \"p on orders\";"));
    }

    #[test]
    fn mermaid_names_nodes_and_edges() {
        let m = to_mermaid(&report());
        assert!(
            m.starts_with("flowchart LR\n  n0[\"public.orders.status\"]\n"),
            "{m}"
        );
        assert!(
            m.contains("n1[(\"public.daily<br/>materialized view\")]"),
            "{m}"
        );
        assert!(m.contains("n0 --> n1\n"));
        assert!(m.contains("n1 --> n2\n"));
        assert!(m.contains("n3([\"p on orders<br/>policy\"])"), "{m}");
    }

    #[test]
    fn targets_split_like_postgres_names() {
        assert_eq!(split_target("Orders"), Ok(vec!["orders".to_string()]));
        assert_eq!(
            split_target(r#"sales."Order ""Lines""".status"#),
            Ok(vec![
                "sales".into(),
                r#"Order "Lines""#.into(),
                "status".into()
            ])
        );
        assert!(split_target("a.b.c.d").is_err());
        assert!(split_target("a..b").is_err());
        assert!(split_target("\"open").is_err());
        assert!(split_target("").is_err());
    }
}
