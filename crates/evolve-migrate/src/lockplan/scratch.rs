//! The probe's scratch copy of the target's schema, read from the catalog
//! without a lock on any real relation.
//!
//! `pg_dump --schema-only` (and `pg_get_indexdef`, `pg_get_viewdef`,
//! `pg_get_constraintdef` of a CHECK, `pg_get_expr` with a relation, a
//! trigger's WHEN, `pg_get_partkeydef`, `pg_get_statisticsobjdef`) opens the
//! relation it describes with ACCESS SHARE to name the columns of the
//! expressions it prints: behind another session's ACCESS EXCLUSIVE it
//! waits, and while it holds its lock it blocks that session's next ALTER.
//! Here every real relation is only read about in the catalog tables
//! (`pg_class`, `pg_attribute`, `pg_constraint`, `pg_index`, `pg_depend`,
//! ...) and with printing functions that open none: `format_type`,
//! `pg_get_functiondef` and `pg_get_function_arguments`/`_result`,
//! `pg_get_constraintdef` of a primary key, unique or foreign key and of a
//! domain's CHECK, `pg_get_triggerdef` of a trigger without WHEN,
//! `pg_get_expr(expr, 0)` of expressions without columns (defaults,
//! partition bounds).
//!
//! An expression over a table's own columns (a CHECK constraint, an index's
//! expressions and predicate, a generated column, a policy without
//! subqueries, a partition key, an extended statistics expression) is
//! printed by `pg_get_expr(expr, shadow)`, where `shadow` is a temporary
//! table of this session (in the target database, rolled back at once)
//! with the real table's name and its column names at the same attnums,
//! dropped columns included: the deparser opens the shadow, never the real
//! table, and the text is what `pg_get_expr` would print on the real one.
//!
//! Reproduced exactly: schemas, extensions (`CREATE EXTENSION`, which
//! brings their own objects), collations, enums, domains (base type,
//! default, NOT NULL, CHECK constraints), composite and range types,
//! functions and procedures (`pg_get_functiondef`), sequences and their
//! parameters and owners, tables (unlogged, access method, storage
//! parameters, partitioning with bounds and keys, inheritance, `OF type`)
//! with their columns (types, collations, NOT NULL, defaults, identity,
//! generated expressions), CHECK, primary key, unique, exclusion and foreign key
//! constraints (NOT VALID, deferrable, NO INHERIT), indexes (assembled from
//! `pg_index`: unique, method, columns, expressions, collations, operator
//! classes and their options, ordering, INCLUDE, NULLS NOT DISTINCT,
//! storage parameters, predicate; partitioned indexes attached as in the
//! target), CLUSTER ON, replica identity, triggers without WHEN (enabled
//! state included), row level security and policies without subqueries,
//! extended statistics.
//!
//! Approximated, with the same names, columns and dependencies on columns
//! of relations, since that is what the locks and rebuilds of the probed
//! statements depend on:
//! - views and materialized views: a placeholder query with the same
//!   output columns (names, types, typmods, collations) that reads the same
//!   columns of the same relations (from `pg_depend` of the view's
//!   `_RETURN` rule), `WHERE false`; materialized views populated or not as
//!   in the target, their indexes copied; storage parameters kept except
//!   `check_option` (a placeholder is not updatable). The text of a real
//!   view needs `pg_get_viewdef`, which locks every relation it reads.
//! - triggers with WHEN: the same trigger (timing, events, UPDATE OF
//!   columns, FOR EACH, transition tables, constraint trigger, function and
//!   arguments) with a WHEN over the same columns of its table.
//! - policies whose expressions have subqueries: the same policy (command,
//!   roles, permissive) with expressions over the same columns of the same
//!   relations.
//! - rules other than a view's `_RETURN`: `DO [INSTEAD] NOTHING` for the
//!   same event.
//! - SQL-standard function bodies (`BEGIN ATOMIC`, `RETURN`) that read
//!   relations: the same signature with a string body (not checked, so not
//!   depending on those relations).
//!
//! Not copied: rows, dropped columns (attnums are dense in the copy, which
//! changes nothing the probe reads but the 1600-column limit), owners,
//! privileges, comments, tablespaces, event triggers, publications, subscriptions,
//! foreign tables and servers, aggregates, user-defined operators, casts,
//! operator classes, text search objects and base types outside extensions,
//! a range's canonical function and a user-defined subtype difference.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use evolve_pg::{Client, quote_ident, quote_literal};
use tokio_postgres::Row;

use crate::MigrateError;

/// One statement of the copy; `what` names its object in errors.
pub(super) struct Step {
    pub what: String,
    pub sql: String,
}

/// Settings of the session that reads the catalog: names come out
/// qualified (`search_path` empty), literals in one fixed form, and a lock
/// that something unforeseen would wait for fails instead of hanging.
const SESSION: &str = "SET search_path = '';
    SET standard_conforming_strings = on;
    SET DateStyle = 'ISO, YMD';
    SET IntervalStyle = 'postgres';
    SET extra_float_digits = 3;
    SET lock_timeout = '5s';
    SET statement_timeout = 0";

/// Settings of the session that loads the copy.
pub(super) const LOADER: &str = "SET search_path = '';
    SET check_function_bodies = off;
    SET standard_conforming_strings = on;
    SET client_min_messages = warning";

/// A user namespace: not a system one, not another session's temp schema.
const USER_NS: &str = "n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'";

fn not_extension(class: &str, oid: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = '{class}'::regclass
                     AND e.objid = {oid} AND e.deptype = 'e')"
    )
}

struct Column {
    num: i16,
    name: String,
    dropped: bool,
    ty: String,
    not_null: bool,
    local: bool,
    identity: String,
    generated: String,
    collate: Option<String>,
    default: Option<String>,
    /// The relation whose row type the column has (table order).
    rowtype_of: Option<u32>,
    /// Identity sequence: (quoted name, options).
    identity_seq: Option<(String, String)>,
}

struct PartKey {
    strategy: String,
    attrs: Vec<i16>,
    opclasses: Vec<String>,
    collations: Vec<String>,
    has_exprs: bool,
}

struct Rel {
    oid: u32,
    /// Quoted schema and `schema.name`.
    schema: String,
    qname: String,
    /// A typed table's type.
    of_type: Option<String>,
    relname: String,
    kind: char,
    persistence: char,
    options: Vec<String>,
    am: Option<String>,
    bound: Option<String>,
    parents: Vec<u32>,
    partition: bool,
    rls: bool,
    force_rls: bool,
    replident: char,
    populated: bool,
    partkey: Option<PartKey>,
    columns: Vec<Column>,
}

impl Rel {
    fn column(&self, num: i16) -> Option<&Column> {
        self.columns.iter().find(|c| c.num == num && !c.dropped)
    }
}

struct Index {
    oid: u32,
    name: String,
    rel: u32,
    unique: bool,
    nkey: usize,
    keys: Vec<i16>,
    opclasses: Vec<String>,
    collations: Vec<String>,
    options: Vec<i16>,
    am: String,
    can_order: bool,
    reloptions: Vec<String>,
    nulls_not_distinct: bool,
    clustered: bool,
    replident: bool,
    constraint: Option<u32>,
    opclass_options: Vec<String>,
    partitioned: bool,
    parent: Option<u32>,
    has_exprs: bool,
    has_pred: bool,
}

struct Constraint {
    oid: u32,
    rel: u32,
    name: String,
    kind: char,
    local: bool,
    no_inherit: bool,
    validated: bool,
    parent: bool,
    index: u32,
    def: Option<String>,
    deferrable: bool,
    deferred: bool,
    operators: Vec<String>,
}

struct Trigger {
    oid: u32,
    rel: u32,
    name: String,
    def: Option<String>,
    tgtype: i16,
    enabled: String,
    attrs: Vec<i16>,
    args: Vec<u8>,
    nargs: i16,
    constraint: bool,
    deferrable: bool,
    deferred: bool,
    function: String,
    old_table: Option<String>,
    new_table: Option<String>,
    from: Option<String>,
}

struct Policy {
    oid: u32,
    rel: u32,
    name: String,
    cmd: String,
    permissive: bool,
    roles: Vec<String>,
    has_qual: bool,
    has_check: bool,
    sublinks: bool,
}

struct Statistics {
    oid: u32,
    name: String,
    rel: u32,
    keys: Vec<i16>,
    kinds: Vec<String>,
    has_exprs: bool,
}

/// Texts printed against shadow tables.
#[derive(Default)]
struct Deparsed {
    checks: HashMap<u32, String>,
    index: HashMap<u32, (Option<String>, Option<String>)>,
    generated: HashMap<(u32, i16), String>,
    policies: HashMap<u32, (Option<String>, Option<String>)>,
    partkeys: HashMap<u32, String>,
    stats: HashMap<u32, String>,
}

/// Dependencies of a view's rule, a policy or a trigger on relation
/// columns: owner oid -> [(relation, attnum or 0)].
type Deps = HashMap<u32, Vec<(u32, i16)>>;

fn step(out: &mut Vec<Step>, what: impl Into<String>, sql: impl Into<String>) {
    out.push(Step {
        what: what.into(),
        sql: sql.into(),
    });
}

/// Items ordered so that each comes after the items it depends on (deps
/// outside `items` ignored, cycles broken in input order).
fn topo<K: Copy + Eq + Hash>(items: &[K], deps: impl Fn(K) -> Vec<K>) -> Vec<K> {
    let set: HashSet<K> = items.iter().copied().collect();
    let mut done: HashSet<K> = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for &start in items {
        if done.contains(&start) {
            continue;
        }
        // Iterative DFS: (item, its deps, next dep index).
        let mut stack: Vec<(K, Vec<K>, usize)> = vec![(start, deps(start), 0)];
        let mut on_path: HashSet<K> = HashSet::from([start]);
        while let Some((k, ds, i)) = stack.last_mut() {
            if *i < ds.len() {
                let d = ds[*i];
                *i += 1;
                if set.contains(&d) && !done.contains(&d) && !on_path.contains(&d) {
                    on_path.insert(d);
                    let dd = deps(d);
                    stack.push((d, dd, 0));
                }
            } else {
                let k = *k;
                stack.pop();
                on_path.remove(&k);
                if done.insert(k) {
                    out.push(k);
                }
            }
        }
    }
    out
}

/// Splits a list that `pg_get_expr` printed (`a, lower(b), (c + 1)`) at its
/// top-level commas.
fn split_list(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            cur.push(c);
            if c == q {
                if chars.peek() == Some(&q) {
                    cur.push(q);
                    chars.next();
                } else {
                    quote = None;
                }
            }
            continue;
        }
        match c {
            '\'' | '"' => {
                quote = Some(c);
                cur.push(c);
            }
            '(' | '[' => {
                depth += 1;
                cur.push(c);
            }
            ')' | ']' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// `WITH (name='value', ...)` from `reloptions`-style `name=value` items.
fn with_options(options: &[String]) -> String {
    if options.is_empty() {
        return String::new();
    }
    let items: Vec<String> = options
        .iter()
        .map(|o| match o.split_once('=') {
            Some((k, v)) => format!("{k}={}", quote_literal(v)),
            None => o.clone(),
        })
        .collect();
    format!(" WITH ({})", items.join(", "))
}

fn get_opt(r: &Row, i: usize) -> Result<Option<String>, MigrateError> {
    Ok(r.try_get::<_, Option<String>>(i)?)
}

/// Reads the schema of the database `c` is connected to and returns the
/// statements that rebuild it in an empty database.
pub(super) async fn read(c: &Client) -> Result<Vec<Step>, MigrateError> {
    c.batch_execute(SESSION).await?;
    let version: i32 = c
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .try_get(0)?;
    let mut out = Vec::new();

    // Schemas and extensions.
    for r in c
        .query(
            &format!(
                "SELECT format('%I', n.nspname) FROM pg_namespace n
                 WHERE {USER_NS} AND n.nspname <> 'public' AND {}
                 ORDER BY n.oid",
                not_extension("pg_namespace", "n.oid")
            ),
            &[],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        step(
            &mut out,
            format!("schema {name}"),
            format!("CREATE SCHEMA IF NOT EXISTS {name}"),
        );
    }
    for r in c
        .query(
            "SELECT format('%I', x.extname), format('%I', n.nspname), x.extversion
             FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace
             WHERE x.extname <> 'plpgsql' ORDER BY x.oid",
            &[],
        )
        .await?
    {
        let (name, schema, version): (String, String, String) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        step(
            &mut out,
            format!("extension {name}"),
            format!(
                "CREATE EXTENSION IF NOT EXISTS {name} WITH SCHEMA {schema} VERSION {}",
                quote_literal(&version)
            ),
        );
    }

    // Collations.
    let icu_locale = if version >= 150000 {
        "coalesce(co.colliculocale, co.collcollate)"
    } else {
        "co.collcollate"
    };
    for r in c
        .query(
            &format!(
                "SELECT format('%I.%I', n.nspname, co.collname), co.collprovider::text,
                        co.collcollate, co.collctype, {icu_locale}, co.collisdeterministic
                 FROM pg_collation co JOIN pg_namespace n ON n.oid = co.collnamespace
                 WHERE {USER_NS} AND {} ORDER BY co.oid",
                not_extension("pg_collation", "co.oid")
            ),
            &[],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        let provider: String = r.try_get(1)?;
        let deterministic: bool = r.try_get(5)?;
        let locale = if provider == "i" {
            format!(
                "provider = icu, locale = {}",
                quote_literal(&get_opt(&r, 4)?.unwrap_or_default())
            )
        } else {
            format!(
                "provider = libc, lc_collate = {}, lc_ctype = {}",
                quote_literal(&get_opt(&r, 2)?.unwrap_or_default()),
                quote_literal(&get_opt(&r, 3)?.unwrap_or_default())
            )
        };
        step(
            &mut out,
            format!("collation {name}"),
            format!("CREATE COLLATION {name} ({locale}, deterministic = {deterministic})"),
        );
    }

    // Types: enums, composite, range, domains (constraints and defaults
    // after the functions they may call).
    let type_rows = c
        .query(
            &format!(
                "SELECT t.oid, format('%I.%I', n.nspname, t.typname), t.typtype::text,
                    array(SELECT quote_literal(e.enumlabel) FROM pg_enum e
                          WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder),
                    CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END,
                    t.typnotnull,
                    CASE WHEN t.typtype = 'd' AND t.typdefaultbin IS NOT NULL
                         THEN pg_get_expr(t.typdefaultbin, 0) END,
                    (SELECT format('%I.%I', cn.nspname, co.collname) FROM pg_collation co
                       JOIN pg_namespace cn ON cn.oid = co.collnamespace
                     WHERE co.oid = t.typcollation AND t.typtype = 'd'
                       AND t.typcollation <> (SELECT b.typcollation FROM pg_type b WHERE b.oid = t.typbasetype)),
                    array(SELECT format('%I %s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                        (SELECT ' COLLATE ' || format('%I.%I', cn.nspname, co.collname)
                                           FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
                                           JOIN pg_type at ON at.oid = a.atttypid
                                          WHERE co.oid = a.attcollation AND a.attcollation <> at.typcollation))
                          FROM pg_attribute a
                          WHERE t.typtype = 'c' AND a.attrelid = t.typrelid AND a.attnum > 0
                            AND NOT a.attisdropped ORDER BY a.attnum),
                    CASE WHEN t.typtype = 'r' THEN format_type(rg.rngsubtype, NULL) END,
                    (SELECT format('%I.%I', on_.nspname, oc.opcname) FROM pg_opclass oc
                       JOIN pg_namespace on_ ON on_.oid = oc.opcnamespace WHERE oc.oid = rg.rngsubopc),
                    (SELECT format('%I.%I', cn.nspname, co.collname) FROM pg_collation co
                       JOIN pg_namespace cn ON cn.oid = co.collnamespace WHERE co.oid = rg.rngcollation),
                    (SELECT format('%I.%I', pn.nspname, p.proname) FROM pg_proc p
                       JOIN pg_namespace pn ON pn.oid = p.pronamespace
                     WHERE p.oid = rg.rngsubdiff AND pn.nspname = 'pg_catalog'),
                    array(SELECT CASE WHEN d.typelem <> 0 AND d.typlen = -1 THEN d.typelem ELSE d.oid END
                          FROM pg_type d WHERE d.oid = ANY(
                            CASE t.typtype WHEN 'd' THEN ARRAY[t.typbasetype]
                                           WHEN 'r' THEN ARRAY[rg.rngsubtype]
                                           WHEN 'c' THEN array(SELECT a.atttypid FROM pg_attribute a
                                                               WHERE a.attrelid = t.typrelid AND a.attnum > 0)
                                           ELSE '{{}}'::oid[] END))
                 FROM pg_type t
                 JOIN pg_namespace n ON n.oid = t.typnamespace
                 LEFT JOIN pg_range rg ON rg.rngtypid = t.oid
                 WHERE {USER_NS} AND t.typtype IN ('e', 'd', 'c', 'r')
                   AND (t.typtype <> 'c' OR (SELECT r.relkind FROM pg_class r WHERE r.oid = t.typrelid) = 'c')
                   AND {} ORDER BY t.oid",
                not_extension("pg_type", "t.oid")
            ),
            &[],
        )
        .await?;
    let mut type_sql: HashMap<u32, (String, String)> = HashMap::new();
    let mut type_deps: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut type_order = Vec::new();
    let mut domain_late: Vec<(String, String)> = Vec::new();
    let mut domains: Vec<(u32, String)> = Vec::new();
    for r in &type_rows {
        let oid: u32 = r.try_get(0)?;
        let name: String = r.try_get(1)?;
        let kind: String = r.try_get(2)?;
        let sql = match kind.as_str() {
            "e" => {
                let labels: Vec<String> = r.try_get(3)?;
                format!("CREATE TYPE {name} AS ENUM ({})", labels.join(", "))
            }
            "d" => {
                let base: String = r.try_get(4)?;
                let not_null: bool = r.try_get(5)?;
                if let Some(d) = get_opt(r, 6)? {
                    domain_late.push((
                        format!("default of domain {name}"),
                        format!("ALTER DOMAIN {name} SET DEFAULT {d}"),
                    ));
                }
                domains.push((oid, name.clone()));
                format!(
                    "CREATE DOMAIN {name} AS {base}{}{}",
                    get_opt(r, 7)?
                        .map(|c| format!(" COLLATE {c}"))
                        .unwrap_or_default(),
                    if not_null { " NOT NULL" } else { "" }
                )
            }
            "c" => {
                let attrs: Vec<String> = r.try_get(8)?;
                format!("CREATE TYPE {name} AS ({})", attrs.join(", "))
            }
            _ => {
                let mut parts = vec![format!("SUBTYPE = {}", r.try_get::<_, String>(9)?)];
                if let Some(o) = get_opt(r, 10)? {
                    parts.push(format!("SUBTYPE_OPCLASS = {o}"));
                }
                if let Some(co) = get_opt(r, 11)? {
                    parts.push(format!("COLLATION = {co}"));
                }
                if let Some(f) = get_opt(r, 12)? {
                    parts.push(format!("SUBTYPE_DIFF = {f}"));
                }
                format!("CREATE TYPE {name} AS RANGE ({})", parts.join(", "))
            }
        };
        type_deps.insert(oid, r.try_get(13)?);
        type_sql.insert(oid, (name, sql));
        type_order.push(oid);
    }
    for oid in topo(&type_order, |t| {
        type_deps.get(&t).cloned().unwrap_or_default()
    }) {
        let (name, sql) = &type_sql[&oid];
        step(&mut out, format!("type {name}"), sql.clone());
    }
    let domain_oids: Vec<u32> = domains.iter().map(|d| d.0).collect();
    for r in c
        .query(
            "SELECT format('%I.%I', n.nspname, t.typname), format('%I', k.conname),
                    pg_get_constraintdef(k.oid)
             FROM pg_constraint k JOIN pg_type t ON t.oid = k.contypid
             JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE k.contypid = ANY($1) AND k.contype = 'c' ORDER BY k.oid",
            &[&domain_oids],
        )
        .await?
    {
        let (domain, name, def): (String, String, String) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        domain_late.push((
            format!("constraint {name} of domain {domain}"),
            format!("ALTER DOMAIN {domain} ADD CONSTRAINT {name} {def}"),
        ));
    }

    // Functions. SQL-standard bodies that read relations cannot be printed
    // without locking those relations: a placeholder with the signature.
    let sqlbody = if version >= 140000 {
        "p.prosqlbody IS NOT NULL"
    } else {
        "false"
    };
    let fn_rows = c
        .query(
            &format!(
                "WITH f AS (
                   SELECT p.oid, p.prokind::text AS kind,
                          format('%I.%I', n.nspname, p.proname) AS name,
                          {sqlbody} AND EXISTS (
                            SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                              AND d.objid = p.oid AND d.refclassid = 'pg_class'::regclass) AS reads,
                          EXISTS (SELECT 1 FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]) || p.prorettype) u(t)
                                  JOIN pg_type ty ON ty.oid = u.t
                                  JOIN pg_type b ON b.oid = CASE WHEN ty.typelem <> 0 AND ty.typlen = -1
                                                                 THEN ty.typelem ELSE ty.oid END
                                  JOIN pg_class r ON r.oid = b.typrelid AND r.relkind <> 'c') AS late
                   FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                   WHERE {USER_NS} AND p.prokind IN ('f', 'p', 'w') AND {}
                     -- Not a range type's constructors, which come with it.
                     AND NOT EXISTS (SELECT 1 FROM pg_depend i WHERE i.classid = 'pg_proc'::regclass
                                     AND i.objid = p.oid AND i.deptype = 'i'))
                 SELECT f.oid, f.kind, f.name, f.reads, f.late,
                        CASE WHEN f.reads THEN NULL ELSE pg_get_functiondef(f.oid) END,
                        pg_get_function_arguments(f.oid), pg_get_function_result(f.oid),
                        array(SELECT d.refobjid FROM pg_depend d
                              WHERE d.classid = 'pg_proc'::regclass AND d.objid = f.oid
                                AND d.refclassid = 'pg_proc'::regclass)
                 FROM f ORDER BY f.oid",
                not_extension("pg_proc", "p.oid")
            ),
            &[],
        )
        .await?;
    let mut fn_sql: HashMap<u32, (String, String, bool)> = HashMap::new();
    let mut fn_deps: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut fn_order = Vec::new();
    for r in &fn_rows {
        let oid: u32 = r.try_get(0)?;
        let kind: String = r.try_get(1)?;
        let name: String = r.try_get(2)?;
        let reads: bool = r.try_get(3)?;
        let late: bool = r.try_get(4)?;
        let args: String = r.try_get(6)?;
        let sql = match get_opt(r, 5)? {
            Some(def) if !reads => def,
            _ if kind == "p" => {
                format!("CREATE PROCEDURE {name}({args}) LANGUAGE sql AS ''")
            }
            _ => format!(
                "CREATE FUNCTION {name}({args}) RETURNS {} LANGUAGE sql AS 'SELECT NULL'",
                get_opt(r, 7)?.unwrap_or_else(|| "void".into())
            ),
        };
        fn_deps.insert(oid, r.try_get(8)?);
        fn_sql.insert(oid, (name, sql, late || reads));
        fn_order.push(oid);
    }
    let fn_order = topo(&fn_order, |f| fn_deps.get(&f).cloned().unwrap_or_default());
    let mut late_functions = Vec::new();
    for oid in &fn_order {
        let (name, sql, late) = &fn_sql[oid];
        if *late {
            late_functions.push((format!("function {name}"), sql.clone()));
        } else {
            step(&mut out, format!("function {name}"), sql.clone());
        }
    }
    for (what, sql) in domain_late {
        step(&mut out, what, sql);
    }

    // Sequences (identity sequences come with their columns).
    let seq_opts = "format(' INCREMENT BY %s MINVALUE %s MAXVALUE %s START WITH %s CACHE %s%s',
                           s.seqincrement, s.seqmin, s.seqmax, s.seqstart, s.seqcache,
                           CASE WHEN s.seqcycle THEN ' CYCLE' ELSE ' NO CYCLE' END)";
    for r in c
        .query(
            &format!(
                "SELECT format('%I.%I', n.nspname, c.relname), c.relpersistence::text,
                        ' AS ' || format_type(s.seqtypid, NULL) || {seq_opts}
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 JOIN pg_sequence s ON s.seqrelid = c.oid
                 WHERE c.relkind = 'S' AND {USER_NS} AND c.relpersistence <> 't' AND {}
                   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                                   AND d.objid = c.oid AND d.deptype = 'i')
                 ORDER BY c.oid",
                not_extension("pg_class", "c.oid")
            ),
            &[],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        let unlogged = r.try_get::<_, String>(1)? == "u";
        step(
            &mut out,
            format!("sequence {name}"),
            format!(
                "CREATE {}SEQUENCE {name}{}",
                if unlogged { "UNLOGGED " } else { "" },
                r.try_get::<_, String>(2)?
            ),
        );
    }

    // Relations: tables, partitioned tables, views, materialized views.
    let rel_rows = c
        .query(
            &format!(
                "SELECT c.oid, format('%I.%I', n.nspname, c.relname), c.relname::text,
                        c.relkind::text, c.relpersistence::text, coalesce(c.reloptions, '{{}}'),
                        (SELECT format('%I', am.amname) FROM pg_am am
                          WHERE am.oid = c.relam AND am.amname <> 'heap' AND c.relkind IN ('r', 'm')),
                        CASE WHEN c.relispartition THEN pg_get_expr(c.relpartbound, 0) END,
                        array(SELECT i.inhparent FROM pg_inherits i WHERE i.inhrelid = c.oid
                              ORDER BY i.inhseqno),
                        c.relispartition, c.relrowsecurity, c.relforcerowsecurity,
                        c.relreplident::text, c.relispopulated,
                        pt.partstrat::text, pt.partattrs::int2[],
                        array(SELECT format('%I.%I', on_.nspname, oc.opcname)
                              FROM unnest(pt.partclass::oid[]) WITH ORDINALITY u(o, k)
                              JOIN pg_opclass oc ON oc.oid = u.o
                              JOIN pg_namespace on_ ON on_.oid = oc.opcnamespace ORDER BY u.k),
                        array(SELECT coalesce((SELECT format('%I.%I', cn.nspname, co.collname)
                                               FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
                                               WHERE co.oid = u.o), '')
                              FROM unnest(pt.partcollation::oid[]) WITH ORDINALITY u(o, k) ORDER BY u.k),
                        pt.partexprs IS NOT NULL, format('%I', n.nspname),
                        CASE WHEN c.reloftype <> 0 THEN format_type(c.reloftype, NULL) END
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_partitioned_table pt ON pt.partrelid = c.oid
                 WHERE c.relkind IN ('r', 'p', 'v', 'm') AND {USER_NS} AND c.relpersistence <> 't'
                   AND {} ORDER BY c.oid",
                not_extension("pg_class", "c.oid")
            ),
            &[],
        )
        .await?;
    let mut rels: HashMap<u32, Rel> = HashMap::new();
    let mut rel_order: Vec<u32> = Vec::new();
    for r in &rel_rows {
        let oid: u32 = r.try_get(0)?;
        let kind: String = r.try_get(3)?;
        let persistence: String = r.try_get(4)?;
        let replident: String = r.try_get(12)?;
        let partkey = match get_opt(r, 14)? {
            Some(strategy) => Some(PartKey {
                strategy,
                attrs: r.try_get(15)?,
                opclasses: r.try_get(16)?,
                collations: r.try_get(17)?,
                has_exprs: r.try_get(18)?,
            }),
            None => None,
        };
        rels.insert(
            oid,
            Rel {
                oid,
                schema: r.try_get(19)?,
                of_type: get_opt(r, 20)?,
                qname: r.try_get(1)?,
                relname: r.try_get(2)?,
                kind: kind.chars().next().unwrap_or('r'),
                persistence: persistence.chars().next().unwrap_or('p'),
                options: r.try_get(5)?,
                am: get_opt(r, 6)?,
                bound: get_opt(r, 7)?,
                parents: r.try_get(8)?,
                partition: r.try_get(9)?,
                rls: r.try_get(10)?,
                force_rls: r.try_get(11)?,
                replident: replident.chars().next().unwrap_or('d'),
                populated: r.try_get(13)?,
                partkey,
                columns: Vec::new(),
            },
        );
        rel_order.push(oid);
    }
    let rel_oids: Vec<u32> = rel_order.clone();
    for r in c
        .query(
            &format!(
                "SELECT a.attrelid, a.attnum, a.attname::text, a.attisdropped,
                        CASE WHEN NOT a.attisdropped THEN format_type(a.atttypid, a.atttypmod) END,
                        a.attnotnull, a.attislocal, a.attidentity::text, a.attgenerated::text,
                        (SELECT format('%I.%I', cn.nspname, co.collname) FROM pg_collation co
                           JOIN pg_namespace cn ON cn.oid = co.collnamespace
                         WHERE co.oid = a.attcollation AND a.attcollation <> t.typcollation),
                        CASE WHEN a.attgenerated = '' AND ad.adbin IS NOT NULL THEN pg_get_expr(ad.adbin, 0) END,
                        (SELECT r.oid FROM pg_type b JOIN pg_class r ON r.oid = b.typrelid AND r.relkind <> 'c'
                         WHERE b.oid = CASE WHEN t.typelem <> 0 AND t.typlen = -1 THEN t.typelem ELSE t.oid END),
                        (SELECT format('%I.%I', sn.nspname, sc.relname) FROM pg_depend d
                           JOIN pg_class sc ON sc.oid = d.objid JOIN pg_namespace sn ON sn.oid = sc.relnamespace
                         WHERE a.attidentity <> '' AND d.classid = 'pg_class'::regclass AND d.refobjid = a.attrelid
                           AND d.refobjsubid = a.attnum AND d.deptype = 'i' AND sc.relkind = 'S' LIMIT 1),
                        (SELECT {seq_opts} FROM pg_depend d JOIN pg_sequence s ON s.seqrelid = d.objid
                         WHERE a.attidentity <> '' AND d.classid = 'pg_class'::regclass AND d.refobjid = a.attrelid
                           AND d.refobjsubid = a.attnum AND d.deptype = 'i' LIMIT 1)
                 FROM pg_attribute a
                 LEFT JOIN pg_type t ON t.oid = a.atttypid
                 LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                 WHERE a.attrelid = ANY($1) AND a.attnum > 0
                 ORDER BY a.attrelid, a.attnum"
            ),
            &[&rel_oids],
        )
        .await?
    {
        let rel: u32 = r.try_get(0)?;
        let identity_seq = match (get_opt(&r, 12)?, get_opt(&r, 13)?) {
            (Some(n), Some(o)) => Some((n, o)),
            _ => None,
        };
        let col = Column {
            num: r.try_get(1)?,
            name: r.try_get(2)?,
            dropped: r.try_get(3)?,
            ty: get_opt(&r, 4)?.unwrap_or_default(),
            not_null: r.try_get(5)?,
            local: r.try_get(6)?,
            identity: r.try_get(7)?,
            generated: r.try_get(8)?,
            collate: get_opt(&r, 9)?,
            default: get_opt(&r, 10)?,
            rowtype_of: r.try_get(11)?,
            identity_seq,
        };
        if let Some(rel) = rels.get_mut(&rel) {
            rel.columns.push(col);
        }
    }

    // Constraints, indexes, triggers, policies, statistics of those relations.
    let con_rows = c
        .query(
            "SELECT k.oid, k.conrelid, format('%I', k.conname), k.contype::text, k.conislocal,
                    k.connoinherit, k.convalidated, k.conparentid <> 0, k.conindid,
                    CASE WHEN k.contype IN ('p', 'u', 'f') THEN pg_get_constraintdef(k.oid) END,
                    k.condeferrable, k.condeferred,
                    array(SELECT format('%I.%s', on_.nspname, o.oprname)
                          FROM unnest(k.conexclop) WITH ORDINALITY u(op, i)
                          JOIN pg_operator o ON o.oid = u.op
                          JOIN pg_namespace on_ ON on_.oid = o.oprnamespace ORDER BY u.i)
             FROM pg_constraint k
             WHERE k.conrelid = ANY($1) AND k.contype IN ('c', 'p', 'u', 'f', 'x')
             ORDER BY k.oid",
            &[&rel_oids],
        )
        .await?;
    let mut constraints = Vec::new();
    for r in &con_rows {
        let kind: String = r.try_get(3)?;
        constraints.push(Constraint {
            oid: r.try_get(0)?,
            rel: r.try_get(1)?,
            name: r.try_get(2)?,
            kind: kind.chars().next().unwrap_or('c'),
            local: r.try_get(4)?,
            no_inherit: r.try_get(5)?,
            validated: r.try_get(6)?,
            parent: r.try_get(7)?,
            index: r.try_get(8)?,
            def: get_opt(r, 9)?,
            deferrable: r.try_get(10)?,
            deferred: r.try_get(11)?,
            operators: r.try_get(12)?,
        });
    }
    let nulls_not_distinct = if version >= 150000 {
        "i.indnullsnotdistinct"
    } else {
        "false"
    };
    let mut indexes = Vec::new();
    for r in c
        .query(
            &format!(
                "SELECT i.indexrelid, format('%I', ic.relname), i.indrelid, i.indisunique,
                        i.indnkeyatts::int8, i.indkey::int2[],
                        array(SELECT format('%I.%I', on_.nspname, oc.opcname)
                              FROM unnest(i.indclass::oid[]) WITH ORDINALITY u(o, k)
                              JOIN pg_opclass oc ON oc.oid = u.o
                              JOIN pg_namespace on_ ON on_.oid = oc.opcnamespace ORDER BY u.k),
                        array(SELECT coalesce((SELECT format('%I.%I', cn.nspname, co.collname)
                                               FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
                                               WHERE co.oid = u.o), '')
                              FROM unnest(i.indcollation::oid[]) WITH ORDINALITY u(o, k) ORDER BY u.k),
                        i.indoption::int2[], format('%I', am.amname),
                        coalesce(pg_indexam_has_property(am.oid, 'can_order'), false),
                        coalesce(ic.reloptions, '{{}}'), {nulls_not_distinct}, i.indisclustered,
                        i.indisreplident,
                        (SELECT k.oid FROM pg_constraint k WHERE k.conindid = i.indexrelid
                           AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x')),
                        array(SELECT coalesce(array_to_string(a.attoptions, E'\\n'), '')
                              FROM pg_attribute a WHERE a.attrelid = i.indexrelid AND a.attnum > 0
                              ORDER BY a.attnum),
                        ic.relkind = 'I',
                        (SELECT h.inhparent FROM pg_inherits h WHERE h.inhrelid = i.indexrelid),
                        i.indexprs IS NOT NULL, i.indpred IS NOT NULL
                 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                 JOIN pg_am am ON am.oid = ic.relam
                 WHERE i.indrelid = ANY($1) ORDER BY i.indexrelid"
            ),
            &[&rel_oids],
        )
        .await?
    {
        let nkey: i64 = r.try_get(4)?;
        indexes.push(Index {
            oid: r.try_get(0)?,
            name: r.try_get(1)?,
            rel: r.try_get(2)?,
            unique: r.try_get(3)?,
            nkey: usize::try_from(nkey).unwrap_or(0),
            keys: r.try_get(5)?,
            opclasses: r.try_get(6)?,
            collations: r.try_get(7)?,
            options: r.try_get(8)?,
            am: r.try_get(9)?,
            can_order: r.try_get(10)?,
            reloptions: r.try_get(11)?,
            nulls_not_distinct: r.try_get(12)?,
            clustered: r.try_get(13)?,
            replident: r.try_get(14)?,
            constraint: r.try_get(15)?,
            opclass_options: r.try_get(16)?,
            partitioned: r.try_get(17)?,
            parent: r.try_get(18)?,
            has_exprs: r.try_get(19)?,
            has_pred: r.try_get(20)?,
        });
    }
    let tgparent = if version >= 130000 {
        "g.tgparentid = 0"
    } else {
        "true"
    };
    let mut triggers = Vec::new();
    for r in c
        .query(
            &format!(
                "SELECT g.oid, g.tgrelid, format('%I', g.tgname),
                        CASE WHEN g.tgqual IS NULL THEN pg_get_triggerdef(g.oid) END,
                        g.tgtype, g.tgenabled::text, g.tgattr::int2[], g.tgargs, g.tgnargs,
                        g.tgconstraint <> 0, g.tgdeferrable, g.tginitdeferred,
                        format('%I.%I', pn.nspname, p.proname),
                        CASE WHEN g.tgoldtable IS NOT NULL THEN format('%I', g.tgoldtable) END,
                        CASE WHEN g.tgnewtable IS NOT NULL THEN format('%I', g.tgnewtable) END,
                        (SELECT format('%I.%I', rn.nspname, rc.relname) FROM pg_class rc
                           JOIN pg_namespace rn ON rn.oid = rc.relnamespace WHERE rc.oid = g.tgconstrrelid)
                 FROM pg_trigger g JOIN pg_proc p ON p.oid = g.tgfoid
                 JOIN pg_namespace pn ON pn.oid = p.pronamespace
                 WHERE g.tgrelid = ANY($1) AND NOT g.tgisinternal AND {tgparent}
                 ORDER BY g.oid"
            ),
            &[&rel_oids],
        )
        .await?
    {
        triggers.push(Trigger {
            oid: r.try_get(0)?,
            rel: r.try_get(1)?,
            name: r.try_get(2)?,
            def: get_opt(&r, 3)?,
            tgtype: r.try_get(4)?,
            enabled: r.try_get(5)?,
            attrs: r.try_get(6)?,
            args: r.try_get(7)?,
            nargs: r.try_get(8)?,
            constraint: r.try_get(9)?,
            deferrable: r.try_get(10)?,
            deferred: r.try_get(11)?,
            function: r.try_get(12)?,
            old_table: get_opt(&r, 13)?,
            new_table: get_opt(&r, 14)?,
            from: get_opt(&r, 15)?,
        });
    }
    let mut policies = Vec::new();
    for r in c
        .query(
            "SELECT p.oid, p.polrelid, format('%I', p.polname), p.polcmd::text, p.polpermissive,
                    array(SELECT CASE WHEN u.r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(u.r)) END
                          FROM unnest(p.polroles) u(r)),
                    p.polqual IS NOT NULL, p.polwithcheck IS NOT NULL,
                    coalesce(p.polqual::text, '') LIKE '%{SUBLINK%'
                      OR coalesce(p.polwithcheck::text, '') LIKE '%{SUBLINK%'
             FROM pg_policy p WHERE p.polrelid = ANY($1) ORDER BY p.oid",
            &[&rel_oids],
        )
        .await?
    {
        policies.push(Policy {
            oid: r.try_get(0)?,
            rel: r.try_get(1)?,
            name: r.try_get(2)?,
            cmd: r.try_get(3)?,
            permissive: r.try_get(4)?,
            roles: r.try_get(5)?,
            has_qual: r.try_get(6)?,
            has_check: r.try_get(7)?,
            sublinks: r.try_get(8)?,
        });
    }
    let mut statistics = Vec::new();
    let stxexprs = if version >= 140000 {
        "s.stxexprs IS NOT NULL"
    } else {
        "false"
    };
    for r in c
        .query(
            &format!(
                "SELECT s.oid, format('%I.%I', n.nspname, s.stxname), s.stxrelid,
                        s.stxkeys::int2[], s.stxkind::text[], {stxexprs}
                 FROM pg_statistic_ext s JOIN pg_namespace n ON n.oid = s.stxnamespace
                 WHERE s.stxrelid = ANY($1) ORDER BY s.oid"
            ),
            &[&rel_oids],
        )
        .await?
    {
        statistics.push(Statistics {
            oid: r.try_get(0)?,
            name: r.try_get(1)?,
            rel: r.try_get(2)?,
            keys: r.try_get(3)?,
            kinds: r.try_get(4)?,
            has_exprs: r.try_get(5)?,
        });
    }
    let mut deps: HashMap<char, Deps> = HashMap::new();
    for r in c
        .query(
            "SELECT 'v', r.ev_class, d.refobjid, d.refobjsubid FROM pg_depend d
               JOIN pg_rewrite r ON r.oid = d.objid
              WHERE d.classid = 'pg_rewrite'::regclass AND r.rulename = '_RETURN'
                AND r.ev_class = ANY($1) AND d.refclassid = 'pg_class'::regclass
                AND d.deptype = 'n' AND d.refobjid <> r.ev_class
             UNION ALL
             SELECT 'p', d.objid, d.refobjid, d.refobjsubid FROM pg_depend d
              JOIN pg_policy p ON p.oid = d.objid
              WHERE d.classid = 'pg_policy'::regclass AND p.polrelid = ANY($1)
                AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'n'
             UNION ALL
             SELECT 't', d.objid, d.refobjid, d.refobjsubid FROM pg_depend d
              JOIN pg_trigger g ON g.oid = d.objid
              WHERE d.classid = 'pg_trigger'::regclass AND g.tgrelid = ANY($1)
                AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'n'
                AND d.refobjid = g.tgrelid AND d.refobjsubid > 0
             ORDER BY 1, 2, 3, 4",
            &[&rel_oids],
        )
        .await?
    {
        let kind: String = r.try_get(0)?;
        deps.entry(kind.chars().next().unwrap_or('v'))
            .or_default()
            .entry(r.try_get(1)?)
            .or_default()
            .push((
                r.try_get(2)?,
                i16::try_from(r.try_get::<_, i32>(3)?).unwrap_or(0),
            ));
    }
    // Expressions over own columns, printed against shadow tables.
    let mut need: Vec<u32> = Vec::new();
    let mut add = |oid: u32| {
        if !need.contains(&oid) {
            need.push(oid);
        }
    };
    for k in &constraints {
        if k.kind == 'c' && k.local {
            add(k.rel);
        }
    }
    for i in &indexes {
        if i.has_exprs || i.has_pred {
            add(i.rel);
        }
    }
    for r in rels.values() {
        if r.columns.iter().any(|c| !c.generated.is_empty())
            || r.partkey.as_ref().is_some_and(|p| p.has_exprs)
        {
            add(r.oid);
        }
    }
    for p in &policies {
        if !p.sublinks {
            add(p.rel);
        }
    }
    for s in &statistics {
        if s.has_exprs {
            add(s.rel);
        }
    }
    need.sort_unstable();
    let deparsed = deparse(c, &rels, &need, version).await?;

    // Tables, in inheritance and row type order.
    let tables: Vec<u32> = rel_order
        .iter()
        .copied()
        .filter(|o| matches!(rels[o].kind, 'r' | 'p'))
        .collect();
    let table_order = topo(&tables, |t| {
        let r = &rels[&t];
        let mut d = r.parents.clone();
        d.extend(r.columns.iter().filter_map(|c| c.rowtype_of));
        d
    });
    let mut late_not_null = Vec::new();
    for oid in &table_order {
        let r = &rels[oid];
        let sql = create_table(r, &rels, &deparsed, &mut late_not_null)?;
        step(&mut out, format!("table {}", r.qname), sql);
    }
    for (what, sql) in late_not_null {
        step(&mut out, what, sql);
    }

    // Views and materialized views: placeholders with the same columns
    // that read the same columns.
    let views: Vec<u32> = rel_order
        .iter()
        .copied()
        .filter(|o| matches!(rels[o].kind, 'v' | 'm'))
        .collect();
    let view_deps = deps.remove(&'v').unwrap_or_default();
    let view_order = topo(&views, |v| {
        view_deps
            .get(&v)
            .map(|d| d.iter().map(|x| x.0).collect())
            .unwrap_or_default()
    });
    for oid in &view_order {
        let r = &rels[oid];
        let cols: Vec<String> = r
            .columns
            .iter()
            .filter(|c| !c.dropped)
            .map(|c| {
                format!(
                    "NULL::{}{} AS {}",
                    c.ty,
                    c.collate
                        .as_ref()
                        .map(|x| format!(" COLLATE {x}"))
                        .unwrap_or_default(),
                    quote_ident(&c.name)
                )
            })
            .collect();
        let (from, reads) = view_reads(view_deps.get(oid), &rels);
        let mut sql = format!(
            "SELECT {}{}{}",
            cols.join(", "),
            if from.is_empty() {
                String::new()
            } else {
                format!(" FROM {}", from.join(", "))
            },
            if reads.is_empty() {
                " WHERE false".to_string()
            } else {
                format!(" WHERE false AND ({})", reads.join(" OR "))
            }
        );
        let options: Vec<String> = r
            .options
            .iter()
            .filter(|o| !o.starts_with("check_option="))
            .cloned()
            .collect();
        if r.kind == 'm' {
            sql = format!(
                "CREATE MATERIALIZED VIEW {}{}{} AS {sql} WITH {}DATA",
                r.qname,
                r.am.as_ref()
                    .map(|a| format!(" USING {a}"))
                    .unwrap_or_default(),
                with_options(&options),
                if r.populated { "" } else { "NO " }
            );
            step(&mut out, format!("materialized view {}", r.qname), sql);
        } else {
            sql = format!("CREATE VIEW {}{} AS {sql}", r.qname, with_options(&options));
            step(&mut out, format!("view {}", r.qname), sql);
        }
    }
    for (what, sql) in late_functions {
        step(&mut out, what, sql);
    }

    // Defaults, sequence owners.
    for oid in &table_order {
        let r = &rels[oid];
        for col in r.columns.iter().filter(|c| !c.dropped) {
            if let Some(d) = &col.default {
                step(
                    &mut out,
                    format!("default of {}.{}", r.qname, quote_ident(&col.name)),
                    format!(
                        "ALTER TABLE ONLY {} ALTER COLUMN {} SET DEFAULT {d}",
                        r.qname,
                        quote_ident(&col.name)
                    ),
                );
            }
        }
    }
    for r in c
        .query(
            &format!(
                "SELECT format('%I.%I', n.nspname, s.relname),
                        format('%I.%I.%I', tn.nspname, t.relname, a.attname)
                 FROM pg_depend d
                 JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
                 JOIN pg_namespace n ON n.oid = s.relnamespace
                 JOIN pg_class t ON t.oid = d.refobjid
                 JOIN pg_namespace tn ON tn.oid = t.relnamespace
                 JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
                 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
                   AND d.deptype = 'a' AND d.refobjid = ANY($1) AND {USER_NS}"
            ),
            &[&rel_oids],
        )
        .await?
    {
        let (seq, col): (String, String) = (r.try_get(0)?, r.try_get(1)?);
        step(
            &mut out,
            format!("owner of sequence {seq}"),
            format!("ALTER SEQUENCE {seq} OWNED BY {col}"),
        );
    }

    // Constraints and indexes, parents before partitions and children.
    let position: HashMap<u32, usize> = table_order
        .iter()
        .chain(view_order.iter())
        .enumerate()
        .map(|(i, o)| (*o, i))
        .collect();
    let pos = |rel: u32| position.get(&rel).copied().unwrap_or(usize::MAX);
    let mut constraints: Vec<&Constraint> = constraints
        .iter()
        .filter(|k| rels.contains_key(&k.rel))
        .collect();
    constraints.sort_by_key(|k| (pos(k.rel), k.oid));
    let index_by_oid: HashMap<u32, &Index> = indexes.iter().map(|i| (i.oid, i)).collect();
    for k in constraints.iter().filter(|k| k.kind == 'c' && k.local) {
        let r = &rels[&k.rel];
        let Some(expr) = deparsed.checks.get(&k.oid) else {
            continue;
        };
        step(
            &mut out,
            format!("constraint {} of {}", k.name, r.qname),
            format!(
                "ALTER TABLE {}{} ADD CONSTRAINT {} CHECK ({expr}){}{}",
                if k.no_inherit { "ONLY " } else { "" },
                r.qname,
                k.name,
                if k.no_inherit { " NO INHERIT" } else { "" },
                if k.validated { "" } else { " NOT VALID" }
            ),
        );
    }
    for k in constraints
        .iter()
        .filter(|k| matches!(k.kind, 'p' | 'u' | 'x'))
    {
        let r = &rels[&k.rel];
        let def = if k.kind == 'x' {
            let Some(ix) = index_by_oid.get(&k.index) else {
                continue;
            };
            let (keys, include) = index_elements(ix, r, &deparsed)?;
            let elems: Vec<String> = keys
                .iter()
                .zip(k.operators.iter())
                .map(|(e, op)| format!("{e} WITH OPERATOR({op})"))
                .collect();
            let pred = deparsed.index.get(&ix.oid).and_then(|d| d.1.clone());
            format!(
                "EXCLUDE USING {} ({}){}{}{}{}",
                ix.am,
                elems.join(", "),
                if include.is_empty() {
                    String::new()
                } else {
                    format!(" INCLUDE ({})", include.join(", "))
                },
                with_options(&ix.reloptions),
                pred.map(|p| format!(" WHERE ({p})")).unwrap_or_default(),
                match (k.deferrable, k.deferred) {
                    (true, true) => " DEFERRABLE INITIALLY DEFERRED",
                    (true, false) => " DEFERRABLE",
                    _ => "",
                }
            )
        } else {
            match &k.def {
                Some(d) => d.clone(),
                None => continue,
            }
        };
        step(
            &mut out,
            format!("constraint {} of {}", k.name, r.qname),
            format!(
                "ALTER TABLE ONLY {} ADD CONSTRAINT {} {def}",
                r.qname, k.name
            ),
        );
    }
    let mut indexes_sorted: Vec<&Index> = indexes
        .iter()
        .filter(|i| rels.contains_key(&i.rel))
        .collect();
    indexes_sorted.sort_by_key(|i| (pos(i.rel), i.oid));
    for ix in &indexes_sorted {
        if ix.constraint.is_some() {
            continue;
        }
        let r = &rels[&ix.rel];
        let (keys, include) = index_elements(ix, r, &deparsed)?;
        let pred = deparsed.index.get(&ix.oid).and_then(|d| d.1.clone());
        step(
            &mut out,
            format!("index {} of {}", ix.name, r.qname),
            format!(
                "CREATE {}INDEX {} ON {}{} USING {} ({}){}{}{}{}",
                if ix.unique { "UNIQUE " } else { "" },
                ix.name,
                if ix.partitioned { "ONLY " } else { "" },
                r.qname,
                ix.am,
                keys.join(", "),
                if include.is_empty() {
                    String::new()
                } else {
                    format!(" INCLUDE ({})", include.join(", "))
                },
                if ix.nulls_not_distinct {
                    " NULLS NOT DISTINCT"
                } else {
                    ""
                },
                with_options(&ix.reloptions),
                pred.map(|p| format!(" WHERE ({p})")).unwrap_or_default()
            ),
        );
    }
    // The index's schema is its table's.
    let index_qname = |ix: &Index| format!("{}.{}", rels[&ix.rel].schema, ix.name);
    for ix in &indexes_sorted {
        if let Some(parent) = ix.parent.and_then(|p| index_by_oid.get(&p)) {
            step(
                &mut out,
                format!("index {} as a partition of {}", ix.name, parent.name),
                format!(
                    "ALTER INDEX {} ATTACH PARTITION {}",
                    index_qname(parent),
                    index_qname(ix)
                ),
            );
        }
    }
    for k in constraints
        .iter()
        .filter(|k| k.kind == 'f' && !k.parent && k.local)
    {
        let r = &rels[&k.rel];
        if let Some(def) = &k.def {
            step(
                &mut out,
                format!("constraint {} of {}", k.name, r.qname),
                format!("ALTER TABLE {} ADD CONSTRAINT {} {def}", r.qname, k.name),
            );
        }
    }
    for ix in &indexes_sorted {
        let r = &rels[&ix.rel];
        if ix.clustered {
            step(
                &mut out,
                format!("CLUSTER ON of {}", r.qname),
                format!("ALTER TABLE {} CLUSTER ON {}", r.qname, ix.name),
            );
        }
        if ix.replident && r.replident == 'i' {
            step(
                &mut out,
                format!("replica identity of {}", r.qname),
                format!(
                    "ALTER TABLE ONLY {} REPLICA IDENTITY USING INDEX {}",
                    r.qname, ix.name
                ),
            );
        }
    }
    for oid in &table_order {
        let r = &rels[oid];
        let ident = match r.replident {
            'f' => "FULL",
            'n' => "NOTHING",
            _ => "",
        };
        if !ident.is_empty() {
            step(
                &mut out,
                format!("replica identity of {}", r.qname),
                format!("ALTER TABLE ONLY {} REPLICA IDENTITY {ident}", r.qname),
            );
        }
    }

    // Triggers, rules, row level security, policies, statistics.
    let trigger_deps = deps.remove(&'t').unwrap_or_default();
    let mut triggers: Vec<&Trigger> = triggers
        .iter()
        .filter(|t| rels.contains_key(&t.rel))
        .collect();
    triggers.sort_by_key(|t| pos(t.rel));
    for t in triggers {
        let r = &rels[&t.rel];
        let sql = match &t.def {
            Some(d) => d.clone(),
            None => {
                let cols: Vec<String> = trigger_deps
                    .get(&t.oid)
                    .map(|d| {
                        let mut cols: Vec<String> = Vec::new();
                        for (_, n) in d {
                            if let Some(c) = r.column(*n).map(|c| quote_ident(&c.name))
                                && !cols.contains(&c)
                            {
                                cols.push(c);
                            }
                        }
                        cols
                    })
                    .unwrap_or_default();
                trigger_sql(t, r, &cols)
            }
        };
        step(&mut out, format!("trigger {} of {}", t.name, r.qname), sql);
        let enable = match t.enabled.as_str() {
            "D" => "DISABLE TRIGGER",
            "R" => "ENABLE REPLICA TRIGGER",
            "A" => "ENABLE ALWAYS TRIGGER",
            _ => "",
        };
        if !enable.is_empty() {
            step(
                &mut out,
                format!("trigger {} of {}", t.name, r.qname),
                format!("ALTER TABLE {} {enable} {}", r.qname, t.name),
            );
        }
    }
    for r in c
        .query(
            "SELECT r.ev_class, format('%I', r.rulename), r.ev_type::text, r.is_instead,
                    r.ev_enabled::text
             FROM pg_rewrite r WHERE r.ev_class = ANY($1) AND r.rulename <> '_RETURN'
             ORDER BY r.oid",
            &[&rel_oids],
        )
        .await?
    {
        let rel: u32 = r.try_get(0)?;
        let Some(rel) = rels.get(&rel) else { continue };
        let name: String = r.try_get(1)?;
        let event = match r.try_get::<_, String>(2)?.as_str() {
            "2" => "UPDATE",
            "3" => "INSERT",
            "4" => "DELETE",
            _ => continue,
        };
        let instead: bool = r.try_get(3)?;
        step(
            &mut out,
            format!("rule {name} of {}", rel.qname),
            format!(
                "CREATE RULE {name} AS ON {event} TO {} DO {}NOTHING",
                rel.qname,
                if instead { "INSTEAD " } else { "ALSO " }
            ),
        );
        if r.try_get::<_, String>(4)? == "D" {
            step(
                &mut out,
                format!("rule {name} of {}", rel.qname),
                format!("ALTER TABLE {} DISABLE RULE {name}", rel.qname),
            );
        }
    }
    for oid in table_order.iter().chain(view_order.iter()) {
        let r = &rels[oid];
        if r.rls {
            step(
                &mut out,
                format!("row level security of {}", r.qname),
                format!("ALTER TABLE {} ENABLE ROW LEVEL SECURITY", r.qname),
            );
        }
        if r.force_rls {
            step(
                &mut out,
                format!("row level security of {}", r.qname),
                format!("ALTER TABLE {} FORCE ROW LEVEL SECURITY", r.qname),
            );
        }
    }
    let policy_deps = deps.remove(&'p').unwrap_or_default();
    for p in &policies {
        let Some(r) = rels.get(&p.rel) else { continue };
        let (qual, check) = if p.sublinks {
            let e = policy_reads(policy_deps.get(&p.oid), &rels, p.rel);
            (
                p.has_qual.then(|| e.clone()),
                p.has_check.then(|| e.clone()),
            )
        } else {
            deparsed.policies.get(&p.oid).cloned().unwrap_or_default()
        };
        let cmd = match p.cmd.as_str() {
            "r" => "SELECT",
            "a" => "INSERT",
            "w" => "UPDATE",
            "d" => "DELETE",
            _ => "ALL",
        };
        step(
            &mut out,
            format!("policy {} of {}", p.name, r.qname),
            format!(
                "CREATE POLICY {} ON {} AS {} FOR {cmd} TO {}{}{}",
                p.name,
                r.qname,
                if p.permissive {
                    "PERMISSIVE"
                } else {
                    "RESTRICTIVE"
                },
                if p.roles.is_empty() {
                    "PUBLIC".to_string()
                } else {
                    p.roles.join(", ")
                },
                qual.map(|q| format!(" USING ({q})")).unwrap_or_default(),
                check
                    .map(|q| format!(" WITH CHECK ({q})"))
                    .unwrap_or_default()
            ),
        );
    }
    for s in &statistics {
        let Some(r) = rels.get(&s.rel) else { continue };
        let mut elems: Vec<String> = s
            .keys
            .iter()
            .filter_map(|n| r.column(*n).map(|c| quote_ident(&c.name)))
            .collect();
        if s.has_exprs {
            let Some(e) = deparsed.stats.get(&s.oid) else {
                continue;
            };
            elems.extend(split_list(e).into_iter().map(|e| format!("({e})")));
        }
        let kinds: Vec<&str> = s
            .kinds
            .iter()
            .filter_map(|k| match k.as_str() {
                "d" => Some("ndistinct"),
                "f" => Some("dependencies"),
                "m" => Some("mcv"),
                _ => None,
            })
            .collect();
        let kinds = if elems.len() == 1 || kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        };
        step(
            &mut out,
            format!("statistics {}", s.name),
            format!(
                "CREATE STATISTICS {}{kinds} ON {} FROM {}",
                s.name,
                elems.join(", "),
                r.qname
            ),
        );
    }
    Ok(out)
}

/// The FROM items and column reads of a placeholder view that make it
/// depend on the same columns of the same relations.
fn view_reads(
    deps: Option<&Vec<(u32, i16)>>,
    rels: &HashMap<u32, Rel>,
) -> (Vec<String>, Vec<String>) {
    let mut from = Vec::new();
    let mut reads = Vec::new();
    let mut aliases: HashMap<u32, String> = HashMap::new();
    for (rel, num) in deps.map(|d| d.as_slice()).unwrap_or_default() {
        let Some(r) = rels.get(rel) else { continue };
        let n = aliases.len() + 1;
        let alias = aliases
            .entry(*rel)
            .or_insert_with(|| {
                from.push(format!("{} AS evolve_d{n}", r.qname));
                format!("evolve_d{n}")
            })
            .clone();
        if let Some(c) = r.column(*num) {
            reads.push(format!("({alias}.{} IS NULL)", quote_ident(&c.name)));
        }
    }
    (from, reads)
}

/// A placeholder policy expression over the same columns of its own table
/// (unqualified) and of the relations its subqueries read.
fn policy_reads(deps: Option<&Vec<(u32, i16)>>, rels: &HashMap<u32, Rel>, own: u32) -> String {
    let mut reads = Vec::new();
    let mut others: Vec<(u32, Vec<String>)> = Vec::new();
    for (rel, num) in deps.map(|d| d.as_slice()).unwrap_or_default() {
        let Some(r) = rels.get(rel) else { continue };
        let col = r.column(*num).map(|c| quote_ident(&c.name));
        if *rel == own {
            if let Some(c) = col {
                reads.push(format!("({c} IS NULL)"));
            }
            continue;
        }
        let at = match others.iter().position(|o| o.0 == *rel) {
            Some(i) => i,
            None => {
                others.push((*rel, Vec::new()));
                others.len() - 1
            }
        };
        if let Some(c) = col {
            others[at].1.push(format!("(evolve_d.{c} IS NULL)"));
        }
    }
    for (rel, cols) in others {
        reads.push(format!(
            "EXISTS (SELECT FROM {} AS evolve_d{})",
            rels[&rel].qname,
            if cols.is_empty() {
                String::new()
            } else {
                format!(" WHERE {}", cols.join(" OR "))
            }
        ));
    }
    if reads.is_empty() {
        "true".into()
    } else {
        reads.join(" OR ")
    }
}

fn create_table(
    r: &Rel,
    rels: &HashMap<u32, Rel>,
    deparsed: &Deparsed,
    late_not_null: &mut Vec<(String, String)>,
) -> Result<String, MigrateError> {
    let unlogged = if r.persistence == 'u' {
        "UNLOGGED "
    } else {
        ""
    };
    let parent = r.parents.first().and_then(|p| rels.get(p));
    // Partitions and typed tables take their columns from the parent or
    // the type, with NOT NULL as an option.
    let opts: Vec<String> = r
        .columns
        .iter()
        .filter(|c| !c.dropped && c.not_null)
        .map(|c| format!("{} WITH OPTIONS NOT NULL", quote_ident(&c.name)))
        .collect();
    let opts = if opts.is_empty() {
        String::new()
    } else {
        format!(" ({})", opts.join(", "))
    };
    let mut sql = if r.partition
        && let Some(parent) = parent
    {
        format!(
            "CREATE {unlogged}TABLE {} PARTITION OF {}{opts} {}",
            r.qname,
            parent.qname,
            r.bound.clone().unwrap_or_else(|| "DEFAULT".into())
        )
    } else if let Some(ty) = &r.of_type
        && r.parents.is_empty()
    {
        format!("CREATE {unlogged}TABLE {} OF {ty}{opts}", r.qname)
    } else {
        let inherits = !r.parents.is_empty();
        let mut cols = Vec::new();
        for c in r.columns.iter().filter(|c| !c.dropped) {
            if inherits && !c.local {
                if c.not_null {
                    late_not_null.push((
                        format!("NOT NULL of {}.{}", r.qname, quote_ident(&c.name)),
                        format!(
                            "ALTER TABLE ONLY {} ALTER COLUMN {} SET NOT NULL",
                            r.qname,
                            quote_ident(&c.name)
                        ),
                    ));
                }
                continue;
            }
            let mut col = format!("{} {}", quote_ident(&c.name), c.ty);
            if let Some(co) = &c.collate {
                col.push_str(&format!(" COLLATE {co}"));
            }
            if !c.generated.is_empty() {
                let expr = deparsed
                    .generated
                    .get(&(r.oid, c.num))
                    .cloned()
                    .unwrap_or_else(|| "NULL".into());
                col.push_str(&format!(" GENERATED ALWAYS AS ({expr}) STORED"));
            }
            if !c.identity.is_empty() {
                let (seq, opts) = c.identity_seq.clone().unwrap_or_default();
                col.push_str(&format!(
                    " GENERATED {} AS IDENTITY{}",
                    if c.identity == "a" {
                        "ALWAYS"
                    } else {
                        "BY DEFAULT"
                    },
                    if seq.is_empty() {
                        String::new()
                    } else {
                        format!(" (SEQUENCE NAME {seq}{opts})")
                    }
                ));
            }
            if c.not_null {
                col.push_str(" NOT NULL");
            }
            cols.push(col);
        }
        let mut s = format!("CREATE {unlogged}TABLE {} ({})", r.qname, cols.join(", "));
        if inherits {
            let names: Vec<String> = r
                .parents
                .iter()
                .filter_map(|p| rels.get(p).map(|p| p.qname.clone()))
                .collect();
            s.push_str(&format!(" INHERITS ({})", names.join(", ")));
        }
        s
    };
    if let Some(pk) = &r.partkey {
        let exprs = match deparsed.partkeys.get(&r.oid) {
            Some(e) => split_list(e),
            None => Vec::new(),
        };
        let mut exprs = exprs.into_iter();
        let mut elems = Vec::new();
        for (i, num) in pk.attrs.iter().enumerate() {
            let mut e = if *num == 0 {
                format!("({})", exprs.next().unwrap_or_else(|| "NULL".into()))
            } else {
                r.column(*num)
                    .map(|c| quote_ident(&c.name))
                    .unwrap_or_default()
            };
            if let Some(co) = pk.collations.get(i).filter(|c| !c.is_empty()) {
                e.push_str(&format!(" COLLATE {co}"));
            }
            if let Some(oc) = pk.opclasses.get(i) {
                e.push_str(&format!(" {oc}"));
            }
            elems.push(e);
        }
        let strategy = match pk.strategy.as_str() {
            "l" => "LIST",
            "h" => "HASH",
            _ => "RANGE",
        };
        sql.push_str(&format!(" PARTITION BY {strategy} ({})", elems.join(", ")));
    }
    if let Some(am) = &r.am {
        sql.push_str(&format!(" USING {am}"));
    }
    sql.push_str(&with_options(&r.options));
    Ok(sql)
}

/// Key elements and INCLUDE columns of an index, as CREATE INDEX writes
/// them.
fn index_elements(
    ix: &Index,
    r: &Rel,
    deparsed: &Deparsed,
) -> Result<(Vec<String>, Vec<String>), MigrateError> {
    let exprs = deparsed
        .index
        .get(&ix.oid)
        .and_then(|d| d.0.clone())
        .map(|e| split_list(&e))
        .unwrap_or_default();
    let mut exprs = exprs.into_iter();
    let column = |num: i16| -> Result<String, MigrateError> {
        r.column(num)
            .map(|c| quote_ident(&c.name))
            .ok_or_else(|| {
                MigrateError::Usage(format!(
                    "index {} of {} names column {num}, which the catalog does not have; run evolve plan without --probe",
                    ix.name, r.qname
                ))
            })
    };
    let mut keys = Vec::new();
    let mut include = Vec::new();
    for (i, num) in ix.keys.iter().enumerate() {
        if i >= ix.nkey {
            include.push(column(*num)?);
            continue;
        }
        let mut e = if *num == 0 {
            match exprs.next() {
                Some(x) => format!("({x})"),
                None => {
                    return Err(MigrateError::Usage(format!(
                        "the expressions of index {} of {} could not be read; run evolve plan without --probe",
                        ix.name, r.qname
                    )));
                }
            }
        } else {
            column(*num)?
        };
        if let Some(co) = ix.collations.get(i).filter(|c| !c.is_empty()) {
            e.push_str(&format!(" COLLATE {co}"));
        }
        if let Some(oc) = ix.opclasses.get(i) {
            e.push_str(&format!(" {oc}"));
            if let Some(o) = ix.opclass_options.get(i).filter(|o| !o.is_empty()) {
                let items: Vec<String> = o.lines().map(str::to_string).collect();
                e.push_str(&with_options(&items).replacen(" WITH ", " ", 1));
            }
        }
        if ix.can_order {
            let opt = ix.options.get(i).copied().unwrap_or(0);
            let desc = opt & 1 != 0;
            let nulls_first = opt & 2 != 0;
            if desc {
                e.push_str(" DESC");
                if !nulls_first {
                    e.push_str(" NULLS LAST");
                }
            } else if nulls_first {
                e.push_str(" NULLS FIRST");
            }
        }
        keys.push(e);
    }
    Ok((keys, include))
}

/// CREATE TRIGGER for a trigger with WHEN, which `pg_get_triggerdef`
/// cannot print without locking its table: the WHEN reads the same
/// columns (`cols`).
fn trigger_sql(t: &Trigger, r: &Rel, cols: &[String]) -> String {
    const ROW: i16 = 1;
    const BEFORE: i16 = 2;
    const INSERT: i16 = 4;
    const DELETE: i16 = 8;
    const UPDATE: i16 = 16;
    const TRUNCATE: i16 = 32;
    const INSTEAD: i16 = 64;
    let timing = if t.tgtype & BEFORE != 0 {
        "BEFORE"
    } else if t.tgtype & INSTEAD != 0 {
        "INSTEAD OF"
    } else {
        "AFTER"
    };
    let mut events = Vec::new();
    if t.tgtype & INSERT != 0 {
        events.push("INSERT".to_string());
    }
    if t.tgtype & DELETE != 0 {
        events.push("DELETE".to_string());
    }
    if t.tgtype & UPDATE != 0 {
        let of: Vec<String> = t
            .attrs
            .iter()
            .filter_map(|n| r.column(*n).map(|c| quote_ident(&c.name)))
            .collect();
        if of.is_empty() {
            events.push("UPDATE".to_string());
        } else {
            events.push(format!("UPDATE OF {}", of.join(", ")));
        }
    }
    if t.tgtype & TRUNCATE != 0 {
        events.push("TRUNCATE".to_string());
    }
    let row = t.tgtype & ROW != 0;
    let prefix = if t.tgtype & (INSERT | UPDATE) != 0 {
        "NEW"
    } else {
        "OLD"
    };
    let when = if row && !cols.is_empty() {
        cols.iter()
            .map(|c| format!("({prefix}.{c} IS NULL)"))
            .collect::<Vec<_>>()
            .join(" OR ")
    } else {
        "true".into()
    };
    let mut referencing = Vec::new();
    if let Some(o) = &t.old_table {
        referencing.push(format!("OLD TABLE AS {o}"));
    }
    if let Some(n) = &t.new_table {
        referencing.push(format!("NEW TABLE AS {n}"));
    }
    let args: Vec<String> = t
        .args
        .split(|b| *b == 0)
        .take(usize::try_from(t.nargs).unwrap_or(0))
        .map(|a| quote_literal(&String::from_utf8_lossy(a)))
        .collect();
    format!(
        "CREATE {}TRIGGER {} {timing} {} ON {}{}{}{} FOR EACH {} WHEN ({when}) EXECUTE FUNCTION {}({})",
        if t.constraint { "CONSTRAINT " } else { "" },
        t.name,
        events.join(" OR "),
        r.qname,
        t.from
            .as_ref()
            .filter(|_| t.constraint)
            .map(|f| format!(" FROM {f}"))
            .unwrap_or_default(),
        if t.constraint {
            match (t.deferrable, t.deferred) {
                (true, true) => " DEFERRABLE INITIALLY DEFERRED",
                (true, false) => " DEFERRABLE INITIALLY IMMEDIATE",
                _ => " NOT DEFERRABLE",
            }
        } else {
            ""
        },
        if referencing.is_empty() {
            String::new()
        } else {
            format!(" REFERENCING {}", referencing.join(" "))
        },
        if row { "ROW" } else { "STATEMENT" },
        t.function,
        args.join(", ")
    )
}

/// Prints the expressions over the columns of `need` (relation oids)
/// against shadow tables: temporary tables of this session with the real
/// table's name and its column names at the same attnums, so that the
/// deparser opens them and never the real ones. Tables with the same name
/// in different schemas take turns; each turn is rolled back, which drops
/// its shadows.
/// Shadow tables per transaction: each holds a lock until the rollback,
/// and the lock table has room for some thousands.
const SHADOWS_PER_TURN: usize = 200;

async fn deparse(
    c: &Client,
    rels: &HashMap<u32, Rel>,
    need: &[u32],
    version: i32,
) -> Result<Deparsed, MigrateError> {
    let mut out = Deparsed::default();
    let mut pending: Vec<u32> = need.to_vec();
    while !pending.is_empty() {
        let mut names: HashSet<&str> = HashSet::new();
        let mut turn = Vec::new();
        let mut later = Vec::new();
        for oid in pending {
            let r = &rels[&oid];
            if turn.len() < SHADOWS_PER_TURN && names.insert(r.relname.as_str()) {
                turn.push(oid);
            } else {
                later.push(oid);
            }
        }
        pending = later;
        let mut sql = String::from("BEGIN;\n");
        for oid in &turn {
            let r = &rels[oid];
            let live: HashSet<&str> = r
                .columns
                .iter()
                .filter(|c| !c.dropped)
                .map(|c| c.name.as_str())
                .collect();
            let mut cols = Vec::new();
            let mut drops = Vec::new();
            for col in &r.columns {
                if col.dropped {
                    let mut name = format!("evolve_dropped_{}", col.num);
                    while live.contains(name.as_str()) {
                        name.push('_');
                    }
                    cols.push(format!("{} int", quote_ident(&name)));
                    drops.push(format!("DROP COLUMN {}", quote_ident(&name)));
                } else {
                    cols.push(format!("{} int", quote_ident(&col.name)));
                }
            }
            let shadow = format!("pg_temp.{}", quote_ident(&r.relname));
            sql.push_str(&format!(
                "CREATE TEMP TABLE {shadow} ({});\n",
                cols.join(", ")
            ));
            if !drops.is_empty() {
                sql.push_str(&format!("ALTER TABLE {shadow} {};\n", drops.join(", ")));
            }
        }
        if let Err(e) = c.batch_execute(&sql).await {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(MigrateError::Usage(format!(
                "the probe could not create the temporary tables it prints expressions with ({}); the role needs the TEMPORARY privilege on the database, or run evolve plan without --probe",
                super::probe::describe(&e)
            )));
        }
        let result = deparse_turn(c, rels, &turn, version, &mut out).await;
        c.batch_execute("ROLLBACK").await?;
        result?;
    }
    Ok(out)
}

async fn deparse_turn(
    c: &Client,
    rels: &HashMap<u32, Rel>,
    turn: &[u32],
    version: i32,
    out: &mut Deparsed,
) -> Result<(), MigrateError> {
    let names: Vec<String> = turn.iter().map(|o| rels[o].relname.clone()).collect();
    let rows = c
        .query(
            "SELECT u.real, c.oid FROM unnest($1::oid[], $2::text[]) AS u(real, name)
             JOIN pg_class c ON c.relname = u.name AND c.relnamespace = pg_my_temp_schema()",
            &[&turn, &names],
        )
        .await?;
    let mut real: Vec<u32> = Vec::new();
    let mut shadow: Vec<u32> = Vec::new();
    for r in rows {
        real.push(r.try_get(0)?);
        shadow.push(r.try_get(1)?);
    }
    const MAP: &str = "unnest($1::oid[], $2::oid[]) AS m(real, shadow)";
    for r in c
        .query(
            &format!(
                "SELECT k.oid, pg_get_expr(k.conbin, m.shadow) FROM {MAP}
                 JOIN pg_constraint k ON k.conrelid = m.real WHERE k.contype = 'c'"
            ),
            &[&real, &shadow],
        )
        .await?
    {
        if let Some(e) = get_opt(&r, 1)? {
            out.checks.insert(r.try_get(0)?, e);
        }
    }
    for r in c
        .query(
            &format!(
                "SELECT i.indexrelid, pg_get_expr(i.indexprs, m.shadow), pg_get_expr(i.indpred, m.shadow)
                 FROM {MAP} JOIN pg_index i ON i.indrelid = m.real
                 WHERE i.indexprs IS NOT NULL OR i.indpred IS NOT NULL"
            ),
            &[&real, &shadow],
        )
        .await?
    {
        out.index
            .insert(r.try_get(0)?, (get_opt(&r, 1)?, get_opt(&r, 2)?));
    }
    for r in c
        .query(
            &format!(
                "SELECT ad.adrelid, ad.adnum, pg_get_expr(ad.adbin, m.shadow)
                 FROM {MAP} JOIN pg_attrdef ad ON ad.adrelid = m.real
                 JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
                 WHERE a.attgenerated <> ''"
            ),
            &[&real, &shadow],
        )
        .await?
    {
        if let Some(e) = get_opt(&r, 2)? {
            out.generated.insert((r.try_get(0)?, r.try_get(1)?), e);
        }
    }
    for r in c
        .query(
            &format!(
                "SELECT p.oid, pg_get_expr(p.polqual, m.shadow), pg_get_expr(p.polwithcheck, m.shadow)
                 FROM {MAP} JOIN pg_policy p ON p.polrelid = m.real
                 WHERE coalesce(p.polqual::text, '') NOT LIKE '%{{SUBLINK%'
                   AND coalesce(p.polwithcheck::text, '') NOT LIKE '%{{SUBLINK%'"
            ),
            &[&real, &shadow],
        )
        .await?
    {
        out.policies
            .insert(r.try_get(0)?, (get_opt(&r, 1)?, get_opt(&r, 2)?));
    }
    for r in c
        .query(
            &format!(
                "SELECT pt.partrelid, pg_get_expr(pt.partexprs, m.shadow)
                 FROM {MAP} JOIN pg_partitioned_table pt ON pt.partrelid = m.real
                 WHERE pt.partexprs IS NOT NULL"
            ),
            &[&real, &shadow],
        )
        .await?
    {
        if let Some(e) = get_opt(&r, 1)? {
            out.partkeys.insert(r.try_get(0)?, e);
        }
    }
    {
        if version >= 140000 {
            for r in c
                .query(
                    &format!(
                        "SELECT s.oid, pg_get_expr(s.stxexprs, m.shadow)
                         FROM {MAP} JOIN pg_statistic_ext s ON s.stxrelid = m.real
                         WHERE s.stxexprs IS NOT NULL"
                    ),
                    &[&real, &shadow],
                )
                .await?
            {
                if let Some(e) = get_opt(&r, 1)? {
                    out.stats.insert(r.try_get(0)?, e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A schema with one of everything the copy reproduces or approximates.
    pub(crate) const RICH: &str = include_str!("scratch_rich.sql");

    fn pg_dump(url: &str) -> String {
        let out = std::process::Command::new(evolve_test::shared().bin("pg_dump"))
            .args(["--schema-only", "--no-owner", "--no-privileges", "-d", url])
            .output()
            .expect("pg_dump");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("--") && !l.starts_with('\\') && !l.trim().is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Everything but the approximated objects comes out of `pg_dump` of
    /// the copy exactly as out of `pg_dump` of the target.
    #[tokio::test]
    async fn the_copy_dumps_like_the_target_but_for_placeholders() {
        let real = evolve_test::fresh_db("scratch_real").await;
        let copy = evolve_test::fresh_db("scratch_copy").await;
        let c = evolve_pg::connect(&real.url, "test")
            .await
            .expect("connect");
        c.batch_execute(RICH).await.expect("schema");
        let steps = read(&c).await.expect("read");
        let l = evolve_pg::connect(&copy.url, "test")
            .await
            .expect("connect");
        l.batch_execute(LOADER).await.expect("settings");
        for s in &steps {
            if let Err(e) = l.batch_execute(&s.sql).await {
                panic!(
                    "{}: {}\n{}",
                    s.what,
                    super::super::probe::describe(&e),
                    s.sql
                );
            }
        }
        let a = pg_dump(&real.url);
        let b = pg_dump(&copy.url);
        let a: Vec<&str> = a.split(";\n").collect();
        let b: Vec<&str> = b.split(";\n").collect();
        // The approximated objects, and the END of a BEGIN ATOMIC body
        // that the split above cut off.
        const PLACEHOLDERS: [&str; 11] = [
            "CREATE VIEW app.open_orders ",
            "CREATE VIEW app.open_names ",
            "CREATE VIEW app.orders_rw ",
            "CREATE VIEW app.now_view ",
            "CREATE MATERIALIZED VIEW app.order_totals ",
            "CREATE MATERIALIZED VIEW app.never_filled ",
            "CREATE MATERIALIZED VIEW app.handles ",
            "CREATE TRIGGER orders_paid ",
            "CREATE CONSTRAINT TRIGGER readings_check ",
            "CREATE POLICY orders_known ",
            "CREATE FUNCTION app.customer_count() ",
        ];
        let placeholder = |s: &str| s == "END" || PLACEHOLDERS.iter().any(|p| s.starts_with(p));
        let only_a: Vec<&&str> = a
            .iter()
            .filter(|x| !b.contains(x) && !placeholder(x))
            .collect();
        let only_b: Vec<&&str> = b
            .iter()
            .filter(|x| !a.contains(x) && !placeholder(x))
            .collect();
        assert!(
            only_a.is_empty() && only_b.is_empty(),
            "only in the target: {only_a:#?}\nonly in the copy: {only_b:#?}"
        );
        for p in PLACEHOLDERS {
            assert!(
                b.iter().any(|s| s.starts_with(p)),
                "{p} missing in the copy"
            );
        }
        let count = |v: &[&str]| v.iter().filter(|s| **s != "END").count();
        assert_eq!(count(&a), count(&b));
        assert!(count(&a) > 60, "{}", count(&a));
        // The placeholders read the same columns of the same relations.
        const DEPS: &str = "SELECT CASE d.classid
                   WHEN 'pg_rewrite'::regclass THEN (SELECT 'view ' || r.ev_class::regclass::text
                                                      FROM pg_rewrite r WHERE r.oid = d.objid)
                   WHEN 'pg_policy'::regclass THEN (SELECT 'policy ' || p.polname FROM pg_policy p
                                                     WHERE p.oid = d.objid)
                   ELSE (SELECT 'trigger ' || g.tgname FROM pg_trigger g WHERE g.oid = d.objid) END
                 || ' reads ' || d.refobjid::regclass::text || coalesce('.' || a.attname, '')
             FROM pg_depend d
             LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
             WHERE d.refclassid = 'pg_class'::regclass AND d.deptype = 'n'
               AND d.classid IN ('pg_rewrite'::regclass, 'pg_policy'::regclass, 'pg_trigger'::regclass)
             ORDER BY 1";
        let deps = |rows: Vec<tokio_postgres::Row>| -> Vec<String> {
            let mut v: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            v.dedup();
            v
        };
        let want = deps(c.query(DEPS, &[]).await.expect("deps"));
        let got = deps(l.query(DEPS, &[]).await.expect("deps"));
        assert_eq!(got, want);
        assert!(
            want.contains(&"policy orders_known reads app.customers.tier".to_string()),
            "{want:#?}"
        );
    }

    #[test]
    fn lists_split_at_top_level_commas_only() {
        assert_eq!(
            split_list("(cc).b, (j ->> 'a,b'::text), lower(\"x,y\"), (arr[1, 2] + f(1, 2))"),
            [
                "(cc).b",
                "(j ->> 'a,b'::text)",
                "lower(\"x,y\")",
                "(arr[1, 2] + f(1, 2))"
            ]
        );
        assert_eq!(split_list("a"), ["a"]);
        assert_eq!(split_list("'it''s, here', b"), ["'it''s, here'", "b"]);
    }

    #[test]
    fn topo_puts_dependencies_first_and_survives_cycles() {
        let deps = |k: u32| match k {
            1 => vec![3],
            3 => vec![2],
            4 => vec![4, 1],
            _ => vec![],
        };
        assert_eq!(topo(&[1, 2, 3, 4], deps), [2, 3, 1, 4]);
        let cyc = |k: u32| if k == 1 { vec![2] } else { vec![1] };
        assert_eq!(topo(&[1, 2], cyc).len(), 2);
    }

    #[test]
    fn storage_parameters_are_quoted() {
        assert_eq!(
            with_options(&["fillfactor=70".into(), "a=it's".into()]),
            " WITH (fillfactor='70', a='it''s')"
        );
        assert_eq!(with_options(&[]), "");
    }
}
