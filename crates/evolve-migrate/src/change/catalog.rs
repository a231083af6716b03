//! What `evolve change` reads from the live catalog, the checks that need
//! the server (types, casts, expressions, NULLs, keys), and writing the
//! files.

use std::path::PathBuf;

use evolve_pg::{Client, QualifiedName, quote_ident};
use serde::Serialize;

use super::{
    Change, ColumnGrant, ColumnInfo, Resolved, TableInfo, change_id, fold_ident, generate,
};
use crate::files::MigrationSet;
use crate::{MigrateError, Options};

/// What `evolve change` wrote. This is also the documented shape of its
/// `--format json` output.
#[derive(Clone, Debug, Serialize)]
pub struct ChangeWritten {
    /// The change's name: the trigger's, the function's and the backfill
    /// job's.
    pub change: String,
    pub table: String,
    pub files: Vec<WrittenFile>,
    /// The backfill job the backfill step hands off to, when there is one.
    pub backfill_job: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WrittenFile {
    pub path: PathBuf,
    pub version: String,
    pub phase: String,
}

fn usage<T>(message: impl Into<String>) -> Result<T, MigrateError> {
    Err(MigrateError::Usage(message.into()))
}

/// Resolves `typed` (`name` or `schema.name`, quoted parts kept) to a table.
async fn resolve_table(client: &Client, typed: &str) -> Result<(u32, QualifiedName), MigrateError> {
    let row = client
        .query_opt(
            "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.oid = to_regclass($1)",
            &[&typed],
        )
        .await
        .map_err(|e| {
            MigrateError::Usage(format!(
                "table name {typed:?} cannot be read ({e}); write it as name or schema.name"
            ))
        })?;
    let Some(row) = row else {
        return usage(format!(
            "table {typed} does not exist; check the name (schema.table) and --database-url"
        ));
    };
    let kind: String = row.get(3);
    let name = QualifiedName::new(row.get::<_, String>(1), row.get::<_, String>(2));
    if kind != "r" && kind != "p" {
        return usage(format!(
            "{} is not a table; evolve change works on tables",
            name.plain()
        ));
    }
    Ok((row.get(0), name))
}

async fn describe_table(
    client: &Client,
    oid: u32,
    name: QualifiedName,
) -> Result<TableInfo, MigrateError> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                    pg_get_expr(d.adbin, d.adrelid), a.attgenerated <> '', a.attidentity <> '',
                    CASE WHEN a.attcollation <> t.typcollation
                         THEN format('%I.%I', cn.nspname, co.collname) END,
                    a.attinhcount > 0,
                    coalesce((SELECT array_agg(format('%s %s', x.privilege_type,
                                                      CASE WHEN x.grantee = 0 THEN 'PUBLIC'
                                                           ELSE quote_ident(r.rolname) END)
                                               || CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
                                               ORDER BY x.privilege_type, r.rolname)
                                FROM aclexplode(a.attacl) AS x
                                LEFT JOIN pg_roles r ON r.oid = x.grantee), '{}'),
                    col_description(a.attrelid, a.attnum)
               FROM pg_attribute a
               JOIN pg_type t ON t.oid = a.atttypid
               LEFT JOIN pg_collation co ON co.oid = a.attcollation
               LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
               LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[&oid],
        )
        .await?;
    let columns = rows
        .iter()
        .map(|r| {
            let generated: bool = r.get(4);
            ColumnInfo {
                name: r.get(0),
                type_sql: r.get(1),
                not_null: r.get(2),
                default: if generated { None } else { r.get(3) },
                generated,
                identity: r.get(5),
                collation: r.get(6),
                inherited: r.get(7),
                grants: r
                    .get::<_, Vec<String>>(8)
                    .iter()
                    .filter_map(|g| {
                        let (privilege, rest) = g.split_once(' ')?;
                        let (grantee, option) = match rest.strip_suffix(" WITH GRANT OPTION") {
                            Some(grantee) => (grantee, true),
                            None => (rest, false),
                        };
                        Some(ColumnGrant {
                            privilege: privilege.to_string(),
                            grantee: grantee.to_string(),
                            grant_option: option,
                        })
                    })
                    .collect(),
                comment: r.get(9),
            }
        })
        .collect();
    let primary_key = client
        .query(
            "SELECT a.attname::text
               FROM pg_index i
               JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              WHERE i.indrelid = $1 AND i.indisprimary
              ORDER BY k.ord",
            &[&oid],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Indexes, constraints and owned sequences that go with a column.
    let column_uses = client
        .query(
            "SELECT a.attname::text,
                    CASE WHEN d.classid = 'pg_class'::regclass AND c.relkind = 'i'
                           THEN 'index ' || d.objid::regclass::text
                         WHEN d.classid = 'pg_class'::regclass AND c.relkind = 'S'
                           THEN 'sequence ' || d.objid::regclass::text
                         ELSE 'constraint ' || quote_ident(con.conname) || ' on ' || con.conrelid::regclass::text
                    END
               FROM pg_depend d
               JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
               LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
               LEFT JOIN pg_constraint con ON d.classid = 'pg_constraint'::regclass AND con.oid = d.objid
              WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = $1 AND d.refobjsubid > 0
                AND ((d.classid = 'pg_class'::regclass AND c.relkind IN ('i', 'S'))
                     OR (d.classid = 'pg_constraint'::regclass AND con.oid IS NOT NULL))
              ORDER BY 1, 2",
            &[&oid],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let kind = client
        .query_one(
            "SELECT c.relkind = 'p',
                    (SELECT format('%s.%s', n.nspname, p.relname)
                       FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                       JOIN pg_namespace n ON n.oid = p.relnamespace
                      WHERE i.inhrelid = c.oid ORDER BY i.inhseqno LIMIT 1),
                    coalesce((SELECT array_agg(format('%s.%s', n.nspname, k.relname) ORDER BY n.nspname, k.relname)
                                FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                                JOIN pg_namespace n ON n.oid = k.relnamespace
                               WHERE i.inhparent = c.oid), '{}')
               FROM pg_class c WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    // Names a generated constraint or index must not take: the table's
    // constraints and every relation of its schema.
    let taken_names = client
        .query(
            "SELECT conname::text FROM pg_constraint WHERE conrelid = $1
             UNION
             SELECT c.relname::text FROM pg_class c
              WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = $1)",
            &[&oid],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(TableInfo {
        name,
        columns,
        primary_key,
        column_uses,
        column_dependents: Vec::new(),
        partitioned: kind.get(0),
        parent: kind.get(1),
        children: kind.get(2),
        taken_names,
    })
}

/// Views, materialized views, policies, triggers, generated columns and
/// functions that read `column`.
async fn dependents_of(
    client: &Client,
    table: &QualifiedName,
    column: &str,
) -> Result<Vec<(String, String)>, MigrateError> {
    let target = format!("{table}.{}", quote_ident(column));
    let report = crate::deps::deps(client, &target).await?;
    Ok(report
        .dependents
        .into_iter()
        .map(|d| {
            (
                column.to_string(),
                format!("{} {}", d.kind.as_str(), d.name),
            )
        })
        .collect())
}

/// What reads `column` of table `oid` directly (not through a view): the
/// plain views, `(oid, "view schema.name")`, and everything else, named.
async fn direct_readers(
    client: &Client,
    oid: u32,
    column: &str,
) -> Result<(Vec<(u32, String)>, Vec<String>), MigrateError> {
    let rows = client
        .query(
            "SELECT DISTINCT v.oid,
                    CASE WHEN r.oid IS NOT NULL AND r.rulename = '_RETURN' THEN
                           CASE v.relkind WHEN 'v' THEN 'view ' ELSE 'materialized view ' END
                           || format('%s.%s', vn.nspname, v.relname)
                         ELSE pg_describe_object(d.classid, d.objid, d.objsubid) END,
                    r.rulename = '_RETURN' AND v.relkind = 'v'
               FROM pg_attribute a
               JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = a.attrelid
                                AND d.refobjsubid = a.attnum AND d.deptype = 'n'
               LEFT JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid
               LEFT JOIN pg_class v ON v.oid = r.ev_class
               LEFT JOIN pg_namespace vn ON vn.oid = v.relnamespace
              WHERE a.attrelid = $1 AND a.attname = $2
                AND d.classid NOT IN ('pg_class'::regclass, 'pg_constraint'::regclass)
              ORDER BY 2",
            &[&oid, &column],
        )
        .await?;
    let mut views = Vec::new();
    let mut others = Vec::new();
    for r in rows {
        let name: String = r.get(1);
        if r.get::<_, Option<bool>>(2) == Some(true) {
            views.push((r.get(0), name));
        } else {
            others.push(name);
        }
    }
    Ok((views, others))
}

/// The `CREATE OR REPLACE VIEW` of each view that reads `col` directly,
/// reading the merge of the new columns in its place. The text is the
/// view's own definition as PostgreSQL prints it, with the column renamed
/// to a unique marker (in a transaction that is rolled back) so that every
/// reference to it, with the alias the view gives the table, can be told
/// apart; each becomes the merge expression over the same alias, cast to
/// the column's type, so the view keeps its columns and types.
async fn split_views(
    client: &Client,
    table: &QualifiedName,
    col: &ColumnInfo,
    into: &[(String, String)],
    merge: &str,
    views: &[(u32, String)],
) -> Result<Vec<(String, String)>, MigrateError> {
    if views.is_empty() {
        return Ok(Vec::new());
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let marker = format!("evolve_split_{}_{nanos}", std::process::id());
    let qual = format!("{marker}_q");
    let t = table.to_string();
    let alias = quote_ident(&table.name);
    let computed = into
        .iter()
        .map(|(n, e)| format!("({e}) AS {}", quote_ident(n)))
        .collect::<Vec<_>>()
        .join(", ");
    client.batch_execute("BEGIN").await?;
    let result = async {
        client
            .batch_execute("SET LOCAL lock_timeout = '5s'; SET LOCAL search_path = ''")
            .await?;
        // The merge with every column qualified (two relations in FROM
        // make PostgreSQL qualify them), as PostgreSQL prints it.
        client
            .batch_execute(&format!(
                "CREATE TEMP VIEW {qual} AS SELECT ({merge}) AS {marker}
                 FROM (SELECT {alias}.*, {computed} FROM {t} AS {alias}) AS {qual}, (SELECT) AS {marker}_o"
            ))
            .await?;
        let printed: String = client
            .query_one(
                "SELECT pg_get_viewdef(c.oid, false) FROM pg_class c
                 WHERE c.relname = $1 AND c.relnamespace = pg_my_temp_schema()",
                &[&qual],
            )
            .await?
            .get(0);
        let merged = printed
            .trim()
            .strip_prefix("SELECT ")
            .and_then(|rest| rest.find(&format!(" AS {marker}")).map(|end| &rest[..end]))
            .ok_or_else(|| {
                MigrateError::Usage(format!(
                    "--merge {merge:?} could not be read back from PostgreSQL to redefine the views over the new columns; drop and recreate them in a migration of their own around this change"
                ))
            })?
            .to_string();
        client
            .batch_execute(&format!(
                "ALTER TABLE {t} RENAME COLUMN {} TO {marker}",
                quote_ident(&col.name)
            ))
            .await?;
        let mut out = Vec::new();
        for (oid, label) in views {
            let row = client
                .query_one(
                    "SELECT format('%I.%I', n.nspname, c.relname), pg_get_viewdef(c.oid, true),
                            coalesce(c.reloptions, '{}')
                       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE c.oid = $1",
                    &[oid],
                )
                .await?;
            let (name, def, options): (String, String, Vec<String>) =
                (row.get(0), row.get(1), row.get(2));
            let def = replace_marker(&def, &marker, |qualifier| {
                let e = match qualifier {
                    Some(q) => merged.replace(&format!("{qual}."), &format!("{q}.")),
                    None => format!("({merge})"),
                };
                format!("(({e})::{})", col.type_sql)
            });
            let with = if options.is_empty() {
                String::new()
            } else {
                let items: Vec<String> = options
                    .iter()
                    .map(|o| match o.split_once('=') {
                        Some((k, v)) => format!("{k}={}", evolve_pg::quote_literal(v)),
                        None => o.clone(),
                    })
                    .collect();
                format!(" WITH ({})", items.join(", "))
            };
            out.push((
                label.clone(),
                format!(
                    "CREATE OR REPLACE VIEW {name}{with} AS\n{};\n",
                    def.trim().trim_end_matches(';')
                ),
            ));
        }
        Ok::<_, MigrateError>(out)
    }
    .await;
    client.batch_execute("ROLLBACK").await?;
    match result {
        Err(MigrateError::Pg(e))
            if e.sqlstate() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
        {
            usage(format!(
                "reading the views of {} to redefine them over the new columns waited 5 s for a lock on the table ({e}); nothing was written; run evolve change again when the table is not busy",
                table.plain()
            ))
        }
        other => other,
    }
}

/// `def` with every reference to the column `marker` (`alias.marker` or a
/// bare `marker`, outside literals and quoted names) replaced by
/// `with(alias)`.
fn replace_marker(def: &str, marker: &str, with: impl Fn(Option<&str>) -> String) -> String {
    let b = def.as_bytes();
    let mut out = String::with_capacity(def.len());
    let mut i = 0;
    // (start in `out`, text) of the identifier just before a '.', if any.
    let mut last_ident: Option<(usize, String)> = None;
    let mut after_dot = false;
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() {
                if b[i] == c {
                    if i + 1 < b.len() && b[i + 1] == c {
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                i += 1;
            }
            let text = &def[start..i];
            let at = out.len();
            out.push_str(text);
            last_ident = (c == b'"').then(|| (at, text.to_string()));
            after_dot = false;
            continue;
        }
        if ident_char(c) && (i == 0 || !ident_char(b[i - 1])) {
            let start = i;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            let word = &def[start..i];
            if word == marker {
                match (&last_ident, after_dot) {
                    (Some((at, q)), true) => {
                        let q = q.clone();
                        out.truncate(*at);
                        out.push_str(&with(Some(&q)));
                    }
                    _ => out.push_str(&with(None)),
                }
                last_ident = None;
            } else {
                let at = out.len();
                out.push_str(word);
                last_ident = Some((at, word.to_string()));
            }
            after_dot = false;
            continue;
        }
        if c == b'.' && last_ident.is_some() && !after_dot {
            after_dot = true;
            out.push('.');
            i += 1;
            continue;
        }
        last_ident = None;
        after_dot = false;
        // Whole characters: `c` may start a multi-byte one.
        let len = def[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&def[i..i + len]);
        i += len;
    }
    out
}

/// Prepares `sql` to check that the expression in it works on the table.
async fn check_sql(
    client: &Client,
    sql: &str,
    what: &str,
    table: &QualifiedName,
) -> Result<Vec<u32>, MigrateError> {
    match client.prepare(sql).await {
        Ok(stmt) => Ok(stmt.columns().iter().map(|c| c.type_().oid()).collect()),
        Err(e) => usage(format!(
            "{what} does not work on table {}: {}; fix the expression",
            table.plain(),
            e.as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string())
        )),
    }
}

/// Refuses a change whose backfill compares values of type `ty` (the
/// column `column` of the table, when given, holds such values) that
/// PostgreSQL cannot compare: `evolve backfill` skips the rows whose column
/// is already `NOT DISTINCT FROM` the new value, which needs an equality
/// operator (json, xml and point have none; an array or row of them fails
/// only on a value, so one stored value is tried too). Without this the
/// expand step applied and the backfill job then failed.
async fn check_comparable(
    client: &Client,
    table: &QualifiedName,
    ty: &str,
    column: Option<&str>,
    what: &str,
) -> Result<(), MigrateError> {
    let mut failed = client
        .prepare(&format!("SELECT NULL::{ty} IS DISTINCT FROM NULL::{ty}"))
        .await
        .err();
    if let (None, Some(c)) = (&failed, column) {
        let c = quote_ident(c);
        failed = client
            .query_one(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM (SELECT {c} AS v FROM {table} WHERE {c} IS NOT NULL LIMIT 1) AS x
                     WHERE x.v IS DISTINCT FROM x.v)"
                ),
                &[],
            )
            .await
            .err();
    }
    match failed {
        None => Ok(()),
        Some(e) => usage(format!(
            "{what} has type {ty}, whose values PostgreSQL cannot compare ({}), and the backfill job compares them to skip rows that are done; {}",
            e.as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string()),
            if ty.starts_with("json") {
                "change the column to jsonb first (evolve change change-type TABLE COLUMN jsonb --using 'COLUMN::jsonb'), or use jsonb for the new column"
            } else {
                "change it to a type with an equality operator first, or change the table with 'evolve rewrite'"
            }
        )),
    }
}

/// The numbers in a type's modifier: `character varying(20)` -> [20].
fn modifiers(type_sql: &str) -> Vec<i64> {
    let Some(open) = type_sql.find('(') else {
        return Vec::new();
    };
    type_sql[open + 1..]
        .split([',', ')'])
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// Whether every value of `old` fits `new`: an implicit cast (PostgreSQL's
/// mark of a conversion that loses nothing) and no smaller modifier.
async fn check_conversion(
    client: &Client,
    table: &QualifiedName,
    col: &ColumnInfo,
    new_type: &str,
) -> Result<(), MigrateError> {
    let row = client
        .query_one(
            "SELECT format_type(a.atttypid, NULL), a.atttypid = t.oid,
                    EXISTS (SELECT 1 FROM pg_cast WHERE castsource = a.atttypid AND casttarget = t.oid AND castcontext = 'i'),
                    EXISTS (SELECT 1 FROM pg_cast WHERE castsource = a.atttypid AND casttarget = t.oid)
               FROM pg_attribute a, pg_type t
              WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND t.oid = to_regtype($3)",
            &[&table.to_string(), &col.name, &new_type],
        )
        .await?;
    let same: bool = row.get(1);
    let implicit: bool = row.get(2);
    let any_cast: bool = row.get(3);
    let what = format!("{}.{}", table.plain(), col.name);
    if !same && !any_cast {
        return usage(format!(
            "there is no cast from {} to {new_type} for column {what}; give --using EXPR to say how each value converts",
            col.type_sql
        ));
    }
    let (old_mods, new_mods) = (modifiers(&col.type_sql), modifiers(new_type));
    let smaller = !new_mods.is_empty()
        && (old_mods.is_empty()
            || new_mods.iter().zip(&old_mods).any(|(n, o)| n < o)
            || new_mods.len() < old_mods.len());
    if (!same && !implicit) || smaller {
        return usage(format!(
            "changing column {what} from {} to {new_type} can lose data (values that do not fit are cut, rounded or refused); give --using EXPR to say how each value converts",
            col.type_sql
        ));
    }
    Ok(())
}

/// Reads what `change` needs from the catalog and checks it against the
/// server. Returns the change with its names folded.
pub async fn describe(
    client: &Client,
    change: &Change,
) -> Result<(Change, TableInfo, Resolved), MigrateError> {
    let (oid, name) = resolve_table(client, change.table()).await?;
    let mut table = describe_table(client, oid, name.clone()).await?;
    let t = name.to_string();
    let alias = quote_ident(&name.name);
    let mut resolved = Resolved::default();
    let change = match change.clone() {
        Change::RenameColumn {
            table: tn,
            old,
            new,
        } => {
            let (old, new) = (fold_ident(&old), fold_ident(&new));
            let col = column_of(&table, &old)?;
            check_comparable(
                client,
                &name,
                &col.type_sql,
                Some(&old),
                &format!("column {}.{old}", name.plain()),
            )
            .await?;
            table.column_dependents = dependents_of(client, &name, &old).await?;
            Change::RenameColumn {
                table: tn,
                old,
                new,
            }
        }
        Change::ChangeType {
            table: tn,
            column,
            to,
            using,
        } => {
            let column = fold_ident(&column);
            let to = to.trim().to_string();
            let known: Option<String> = client
                .query_one("SELECT to_regtype($1)::text", &[&to])
                .await
                .map_err(|e| MigrateError::Usage(format!("type {to:?} cannot be read ({e}); write a type name such as bigint or varchar(20)")))?
                .get(0);
            if known.is_none() {
                return usage(format!(
                    "type {to} does not exist; check the name (\\dT in psql lists the types) or create the type in an earlier migration"
                ));
            }
            check_sql(
                client,
                &format!("SELECT NULL::{to}"),
                &format!("type {to}"),
                &name,
            )
            .await?;
            let col = column_of(&table, &column)?;
            match &using {
                Some(u) => {
                    check_sql(
                        client,
                        &format!("SELECT ({u})::{to} FROM {t} AS {alias}"),
                        &format!("--using {u:?}"),
                        &name,
                    )
                    .await?;
                }
                None => check_conversion(client, &name, &col, &to).await?,
            }
            table.column_dependents = dependents_of(client, &name, &column).await?;
            check_comparable(
                client,
                &name,
                &to,
                None,
                &format!("the new column of {}.{column}", name.plain()),
            )
            .await?;
            resolved.new_type_collatable = client
                .query_one(
                    "SELECT coalesce((SELECT typcollation <> 0 FROM pg_type WHERE oid = to_regtype($1)), false)",
                    &[&to],
                )
                .await?
                .get(0);
            resolved.new_type = Some(to.clone());
            Change::ChangeType {
                table: tn,
                column,
                to,
                using,
            }
        }
        Change::SetNotNull {
            table: tn,
            column,
            default,
        } => {
            let column = fold_ident(&column);
            let col = column_of(&table, &column)?;
            match &default {
                Some(d) => {
                    check_sql(
                        client,
                        &format!("SELECT ({d})::{}", col.type_sql),
                        &format!("--default {d:?}"),
                        &name,
                    )
                    .await?;
                    check_comparable(
                        client,
                        &name,
                        &col.type_sql,
                        Some(&column),
                        &format!("column {}.{column}", name.plain()),
                    )
                    .await?;
                }
                None if !col.not_null => {
                    let has_null: bool = client
                        .query_one(
                            &format!(
                                "SELECT EXISTS (SELECT 1 FROM {t} WHERE {} IS NULL)",
                                quote_ident(&column)
                            ),
                            &[],
                        )
                        .await?
                        .get(0);
                    if has_null {
                        return usage(format!(
                            "column {}.{column} has NULL values; give --default EXPR to fill them (and the NULLs applications still write)",
                            name.plain()
                        ));
                    }
                }
                None => {}
            }
            Change::SetNotNull {
                table: tn,
                column,
                default,
            }
        }
        Change::SplitColumn {
            table: tn,
            column,
            into,
            merge,
        } => {
            let column = fold_ident(&column);
            let col = column_of(&table, &column)?;
            let into: Vec<(String, String)> =
                into.into_iter().map(|(n, e)| (fold_ident(&n), e)).collect();
            for (n, e) in &into {
                let oids = check_sql(
                    client,
                    &format!("SELECT ({e}) FROM {t} AS {alias}"),
                    &format!("--into {n}={e:?}"),
                    &name,
                )
                .await?;
                let ty: String = client
                    .query_one(
                        "SELECT format_type($1, NULL)",
                        &[&oids.first().copied().unwrap_or(25)],
                    )
                    .await?
                    .get(0);
                // A bare literal has type unknown: store it as text.
                let ty = if ty == "unknown" {
                    "text".to_string()
                } else {
                    ty
                };
                check_comparable(client, &name, &ty, None, &format!("--into {n}")).await?;
                resolved.into_types.push(ty);
            }
            let computed = into
                .iter()
                .map(|(n, e)| format!("({e}) AS {}", quote_ident(n)))
                .collect::<Vec<_>>()
                .join(", ");
            check_sql(
                client,
                &format!("SELECT ({merge})::{} FROM (SELECT {alias}.*, {computed} FROM {t} AS {alias}) AS {alias}", col.type_sql),
                &format!("--merge {merge:?}"),
                &name,
            )
            .await?;
            table.column_dependents = dependents_of(client, &name, &column).await?;
            if !table.column_dependents.is_empty() {
                let (views, blockers) = direct_readers(client, oid, &column).await?;
                resolved.split_blockers = blockers;
                if resolved.split_blockers.is_empty() {
                    resolved.split_views =
                        split_views(client, &name, &col, &into, &merge, &views).await?;
                }
            }
            Change::SplitColumn {
                table: tn,
                column,
                into,
                merge,
            }
        }
        Change::AddForeignKey {
            table: tn,
            columns,
            references,
            to,
        } => {
            let columns: Vec<String> = columns.iter().map(|c| fold_ident(c)).collect();
            let to: Vec<String> = to.iter().map(|c| fold_ident(c)).collect();
            for c in &columns {
                column_of(&table, c)?;
            }
            let (other_oid, other) = resolve_table(client, &references).await?;
            let other_info = describe_table(client, other_oid, other.clone()).await?;
            for c in &to {
                column_of(&other_info, c)?;
            }
            // What PostgreSQL accepts as the referenced key: a unique index
            // (a primary key's or unique constraint's, or one of its own)
            // on exactly those columns, without a predicate or expressions,
            // checked immediately (not DEFERRABLE).
            let unique: bool = client
                .query_one(
                    "SELECT EXISTS (
                       SELECT 1 FROM pg_index i
                        WHERE i.indrelid = $1 AND i.indisunique AND i.indimmediate AND i.indisvalid
                          AND i.indpred IS NULL AND i.indexprs IS NULL
                          AND i.indnkeyatts = cardinality($2::text[])
                          AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
                                 FROM pg_attribute a
                                WHERE a.attrelid = i.indrelid
                                  AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1]))
                              = (SELECT array_agg(x ORDER BY x) FROM unnest($2::text[]) AS x))",
                    &[&other_oid, &to],
                )
                .await?
                .get(0);
            if !unique {
                return usage(format!(
                    "there is no primary key, unique constraint or unique index on {} ({}) that a foreign key can reference (one without a WHERE clause or expressions, not DEFERRABLE); add one first",
                    other.plain(),
                    to.join(", ")
                ));
            }
            resolved.has_index = client
                .query_one(
                    "SELECT EXISTS (
                       SELECT 1 FROM pg_index i
                        WHERE i.indrelid = $1 AND i.indisvalid AND i.indpred IS NULL
                          AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
                                 FROM pg_attribute a
                                WHERE a.attrelid = i.indrelid
                                  AND a.attnum = ANY ((i.indkey::int2[])[0:cardinality($2::text[]) - 1]))
                              = (SELECT array_agg(x ORDER BY x) FROM unnest($2::text[]) AS x))",
                    &[&oid, &columns],
                )
                .await?
                .get(0);
            resolved.references = Some(other);
            Change::AddForeignKey {
                table: tn,
                columns,
                references,
                to,
            }
        }
    };
    Ok((change, table, resolved))
}

fn column_of(table: &TableInfo, column: &str) -> Result<ColumnInfo, MigrateError> {
    table.column(column).cloned().ok_or_else(|| {
        MigrateError::Usage(format!(
            "column {} of table {} does not exist; check the name (see \\d {} in psql)",
            quote_ident(column),
            table.name.plain(),
            table.name.plain()
        ))
    })
}

/// `evolve change`: reads the catalog, generates the files and writes them
/// into `opts.dir`, numbered after the highest version among the files and
/// the history (as `evolve migrate new` numbers). Nothing is written when
/// anything is refused; a file is never overwritten.
pub async fn write(opts: &Options, change: &Change) -> Result<ChangeWritten, MigrateError> {
    let c = crate::connect(opts).await?;
    let (change, table, resolved) = describe(&c.client, change).await?;
    let files = generate(&change, &table, &resolved).map_err(|e| MigrateError::Usage(e.0))?;
    std::fs::create_dir_all(&opts.dir).map_err(|e| MigrateError::Create {
        path: opts.dir.clone(),
        reason: e.to_string(),
    })?;
    let set = MigrationSet::load(&opts.dir, opts.symlinks)?;
    let rows = c.history.rows(&c.client).await?;
    let mut version = crate::next_version(&set, &rows);
    let mut written: Vec<WrittenFile> = Vec::new();
    for file in &files {
        let path = opts
            .dir
            .join(format!("V{version}__{}.sql", file.description));
        let result = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, file.sql.as_bytes()));
        if let Err(e) = result {
            let _ = std::fs::remove_file(&path);
            for w in &written {
                let _ = std::fs::remove_file(&w.path);
            }
            return Err(MigrateError::Create {
                path,
                reason: e.to_string(),
            });
        }
        written.push(WrittenFile {
            path,
            version: version.clone(),
            phase: file.phase.as_str().to_string(),
        });
        let v = evolve_core::migration::Version::parse(&version)
            .map_err(|e| MigrateError::Usage(e.to_string()))?;
        version = crate::next_major(&v);
    }
    let id = change_id(&change, &table.name);
    let backfill_job = files
        .iter()
        .any(|f| f.phase == evolve_core::migration::Phase::Backfill)
        .then(|| id.clone());
    Ok(ChangeWritten {
        change: id,
        table: table.name.plain(),
        files: written,
        backfill_job,
    })
}

#[cfg(test)]
mod tests {
    use super::replace_marker;

    #[test]
    fn the_marker_is_replaced_with_its_alias_outside_literals() {
        let with = |q: Option<&str>| match q {
            Some(q) => format!("<{q}>"),
            None => "<bare>".to_string(),
        };
        assert_eq!(
            replace_marker(
                "SELECT p.mk AS name, \"Odd P\".mk, upper(mk) AS s, 'p.mk' AS lit, p.mk2, mkx FROM people p",
                "mk",
                with
            ),
            "SELECT <p> AS name, <\"Odd P\">, upper(<bare>) AS s, 'p.mk' AS lit, p.mk2, mkx FROM people p"
        );
        assert_eq!(replace_marker("é.mk, \"mk\"", "mk", with), "<é>, \"mk\"");
    }
}
