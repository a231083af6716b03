//! The SQL of a backfill and a rewrite, generated from names and types
//! read from the catalog (pure: no I/O). Identifiers are always quoted;
//! key values travel as one bound `text[]` parameter and are cast back to
//! each key column's type, so any key type and any number of key columns
//! work the same way. That text reads back as the same key only because
//! every session that writes it pins how values print ([`PINNED_OUTPUT`]).
//! Expressions (`--set`, `--where`) are the user's SQL, spliced in
//! parentheses as a migration file's text would be.

use evolve_pg::{QualifiedName, dollar_quote, quote_ident, quote_literal};

/// The settings that decide how a key is written as text, and the values
/// evolve pins wherever a key is turned into text: its own sessions
/// (`worker::connect`) and the capture function, whatever the writer's
/// session says. With them the text reads back as the same value in any
/// session: ISO dates whatever the writer's `DateStyle` (only the output
/// format is pinned, so the day/month order of input stays the user's),
/// floats to their last bit, `postgres` intervals, hex bytea.
pub const PINNED_OUTPUT: [(&str, &str); 4] = [
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
];

/// One primary-key column: its name and its type as `format_type` prints
/// it (already valid SQL, qualified and quoted where needed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyColumn {
    pub name: String,
    pub type_sql: String,
}

/// `column = expression` of a backfill.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Assignment {
    pub column: String,
    pub expr: String,
    /// The column's type, when it has no `=` (`json`, `xml`, `point`):
    /// the idempotence predicate then compares the column's text with the
    /// expression's, cast to that type. Found each run, not stored.
    #[serde(skip)]
    pub compare_as: Option<String>,
}

fn quoted_list(key: &[KeyColumn], prefix: &str) -> String {
    key.iter()
        .map(|k| format!("{prefix}{}", quote_ident(&k.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `("a", "b")`.
pub fn key_tuple(key: &[KeyColumn]) -> String {
    format!("({})", quoted_list(key, ""))
}

/// `"a", "b"` in descending order, for the batch's last key.
fn key_desc(key: &[KeyColumn]) -> String {
    key.iter()
        .map(|k| format!("{} DESC", quote_ident(&k.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `ARRAY["a"::text, "b"::text]`: a key as the text array it is stored and
/// bound as.
pub fn key_as_text(key: &[KeyColumn]) -> String {
    let parts: Vec<String> = key
        .iter()
        .map(|k| format!("{}::text", quote_ident(&k.name)))
        .collect();
    format!("ARRAY[{}]", parts.join(", "))
}

/// `(($n::text[])[1]::int4, ($n::text[])[2]::text)`: the bound key cast
/// back to the key's types.
pub fn bound_key(key: &[KeyColumn], param: usize) -> String {
    let parts: Vec<String> = key
        .iter()
        .enumerate()
        .map(|(i, k)| format!("(${param}::text[])[{}]::{}", i + 1, k.type_sql))
        .collect();
    format!("({})", parts.join(", "))
}

/// The idempotence predicate: true for a row that some assignment would
/// still change (`col IS DISTINCT FROM (expr)` for each, joined by OR),
/// so running a batch twice changes nothing the second time.
pub fn predicate(set: &[Assignment]) -> String {
    let parts: Vec<String> = set
        .iter()
        .map(|a| match &a.compare_as {
            None => format!("{} IS DISTINCT FROM ({})", quote_ident(&a.column), a.expr),
            Some(ty) => format!(
                "{}::text IS DISTINCT FROM (({})::{ty})::text",
                quote_ident(&a.column),
                a.expr
            ),
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// The rows a backfill must still change: the user's filter (if any) and
/// the predicate.
pub fn pending_condition(set: &[Assignment], filter: Option<&str>) -> String {
    match filter {
        Some(f) => format!("({f}) AND {}", predicate(set)),
        None => predicate(set),
    }
}

/// The keys of the next batch: after the bound last key (`$1`, omitted for
/// the first batch), in key order, at most `$2` (or `$1`) of them.
fn next_keys(table: &QualifiedName, key: &[KeyColumn], first: bool) -> String {
    let (after, limit) = if first {
        (String::new(), "$1")
    } else {
        (
            format!(" WHERE {} > {}", key_tuple(key), bound_key(key, 1)),
            "$2",
        )
    };
    format!(
        "SELECT {cols} FROM {table}{after} ORDER BY {cols} LIMIT {limit}",
        cols = quoted_list(key, ""),
    )
}

/// One backfill batch as a single statement. Parameters: the last key
/// (`text[]`, not for the first batch) and the batch size (`int8`).
/// Returns one row: rows updated, keys scanned, the batch's last key
/// (`text[]`, NULL when no key was left).
///
/// The update reads the batch as a key range (after the bound key, up to
/// the batch's last key, both index conditions) rather than as a list of
/// keys to look up one by one.
pub fn batch_update(
    table: &QualifiedName,
    key: &[KeyColumn],
    set: &[Assignment],
    filter: Option<&str>,
    first: bool,
) -> String {
    let assignments: Vec<String> = set
        .iter()
        .map(|a| format!("{} = ({})", quote_ident(&a.column), a.expr))
        .collect();
    let lower = if first {
        String::new()
    } else {
        format!("{} > {} AND ", key_tuple(key), bound_key(key, 1))
    };
    let upper: Vec<String> = key
        .iter()
        .map(|k| format!("(SELECT {} FROM last)", quote_ident(&k.name)))
        .collect();
    format!(
        "WITH batch AS MATERIALIZED ({keys}), \
         last AS MATERIALIZED (SELECT {cols} FROM batch ORDER BY {desc} LIMIT 1), \
         updated AS (UPDATE {table} SET {assignments} \
           WHERE {lower}{tuple} <= ({upper}) AND {pending} RETURNING 1) \
         SELECT (SELECT count(*) FROM updated)::int8, (SELECT count(*) FROM batch)::int8, \
           (SELECT {as_text} FROM last)",
        keys = next_keys(table, key, first),
        cols = quoted_list(key, ""),
        desc = key_desc(key),
        assignments = assignments.join(", "),
        tuple = key_tuple(key),
        upper = upper.join(", "),
        pending = pending_condition(set, filter),
        as_text = key_as_text(key),
    )
}

/// The last key of the batch that starts after the bound key: where a
/// failed batch would have ended, for its error message. Same parameters
/// as [`batch_update`].
pub fn batch_end(table: &QualifiedName, key: &[KeyColumn], first: bool) -> String {
    format!(
        "WITH batch AS MATERIALIZED ({keys}) SELECT (SELECT {as_text} FROM batch ORDER BY {desc} LIMIT 1)",
        keys = next_keys(table, key, first),
        as_text = key_as_text(key),
        desc = key_desc(key),
    )
}

/// The verify query: how many rows still need the change (must be 0).
pub fn verify(table: &QualifiedName, set: &[Assignment], filter: Option<&str>) -> String {
    format!(
        "SELECT count(*)::int8 FROM {table} WHERE {}",
        pending_condition(set, filter)
    )
}

/// One copy batch of a rewrite: the next rows of `from` after the bound
/// key, inserted into `to` (rows the log replay already put there are
/// kept). Parameters and result row as [`batch_update`].
///
/// Only a row whose key `to` has already is skipped (`ON CONFLICT` on the
/// key): a row that breaks another unique or exclusion constraint of
/// `to` (one an `--alter` adds) fails the batch, where `ON CONFLICT DO
/// NOTHING` without a target would leave the row out of the new table.
pub fn copy_batch(
    from: &QualifiedName,
    to: &QualifiedName,
    key: &[KeyColumn],
    columns: &[String],
    first: bool,
) -> String {
    let cols = columns
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    // The batch keeps the key for the bound even when it is not copied
    // (a generated key, which `to` computes).
    let selected = columns
        .iter()
        .map(|c| quote_ident(c))
        .chain(
            key.iter()
                .filter(|k| !columns.contains(&k.name))
                .map(|k| quote_ident(&k.name)),
        )
        .collect::<Vec<_>>()
        .join(", ");
    let (after, limit) = if first {
        (String::new(), "$1")
    } else {
        (
            format!(" WHERE {} > {}", key_tuple(key), bound_key(key, 1)),
            "$2",
        )
    };
    format!(
        "WITH batch AS MATERIALIZED (SELECT {selected} FROM {from}{after} ORDER BY {keys} LIMIT {limit}), \
         copied AS (INSERT INTO {to} ({cols}) OVERRIDING SYSTEM VALUE SELECT {cols} FROM batch \
           ON CONFLICT {tuple} DO NOTHING RETURNING 1) \
         SELECT (SELECT count(*) FROM copied)::int8, (SELECT count(*) FROM batch)::int8, \
           (SELECT {as_text} FROM batch ORDER BY {desc} LIMIT 1)",
        keys = quoted_list(key, ""),
        tuple = key_tuple(key),
        as_text = key_as_text(key),
        desc = key_desc(key),
    )
}

/// One replay batch as a single statement: takes up to `$1` entries off
/// the change log, oldest first (all of them when `$1` is NULL), and makes
/// `to` match `from` for their keys (each once): `to`'s rows of those keys
/// are all deleted first, then `from`'s current rows of them inserted
/// (the insert reads the delete's count before its first row, so the
/// delete is done by then).
/// Deleting before inserting matters for `to`'s unique indexes: writers
/// may have exchanged unique values between two rows (or moved one from a
/// deleted row to a new one), and an update in place of one row would
/// meet the other's old value still there. Returns one row: the entries
/// taken.
///
/// A batch of all the entries a snapshot sees leaves `to` equal to
/// `from` as of that snapshot (every row changed since it was copied has
/// an entry), so it can never break a unique index that `from` keeps; a
/// batch of only some of them can, when the value's other row is in a
/// later entry (see `rewrite::replay_batch`).
///
/// `key` has the key's types in `from` (the log's text is cast to them),
/// `to_key` its types in `to` (without type modifiers, so a cast never
/// truncates), to which the keys are cast again to find `to`'s rows: an
/// `--alter` may have retyped the key to one the old type does not
/// compare with (integer to text).
pub fn replay(
    from: &QualifiedName,
    to: &QualifiedName,
    log: &QualifiedName,
    key: &[KeyColumn],
    to_key: &[KeyColumn],
    columns: &[String],
) -> String {
    let cols = columns
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    let casts: Vec<String> = key
        .iter()
        .enumerate()
        .map(|(i, k)| format!("(k[{}])::{} AS _k{}", i + 1, k.type_sql, i + 1))
        .collect();
    let to_keys: Vec<String> = key
        .iter()
        .zip(to_key)
        .enumerate()
        .map(|(i, (k, t))| {
            if k.type_sql == t.type_sql {
                format!("keys._k{}", i + 1)
            } else {
                format!("keys._k{}::{}", i + 1, t.type_sql)
            }
        })
        .collect();
    let to_keys = format!("({})", to_keys.join(", "));
    let qualified = |alias: &str| format!("({})", quoted_list(key, &format!("{alias}.")));
    let updates: Vec<String> = columns
        .iter()
        .filter(|c| !key.iter().any(|k| &k.name == *c))
        .map(|c| format!("{0} = EXCLUDED.{0}", quote_ident(c)))
        .collect();
    let on_conflict = if updates.is_empty() {
        "DO NOTHING".to_string()
    } else {
        format!("DO UPDATE SET {}", updates.join(", "))
    };
    format!(
        "WITH taken AS (DELETE FROM {log} WHERE id IN (SELECT id FROM {log} ORDER BY id LIMIT $1) RETURNING k), \
         keys AS (SELECT DISTINCT {casts} FROM taken), \
         gone AS (DELETE FROM {to} t USING keys WHERE {t_key} = {to_keys} RETURNING 1), \
         copied AS (INSERT INTO {to} ({cols}) OVERRIDING SYSTEM VALUE \
           SELECT {cols} FROM {from} f WHERE {f_key} IN (SELECT * FROM keys) \
             AND (SELECT count(*) FROM gone) >= 0 \
           ON CONFLICT {tuple} {on_conflict} RETURNING 1) \
         SELECT (SELECT count(*) FROM taken)::int8, (SELECT count(*) FROM gone), (SELECT count(*) FROM copied)",
        casts = casts.join(", "),
        t_key = qualified("t"),
        f_key = qualified("f"),
        tuple = key_tuple(key),
    )
}

/// Makes `columns` of `table` (GENERATED ALWAYS identity columns)
/// GENERATED BY DEFAULT; empty when there are none.
pub fn identity_by_default(table: &QualifiedName, columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| {
            format!(
                "ALTER TABLE {table} ALTER COLUMN {} SET GENERATED BY DEFAULT;",
                quote_ident(c)
            )
        })
        .collect()
}

/// The capture function: every row an INSERT, UPDATE or DELETE touches
/// has its key written to the log, in the writer's transaction: the new
/// key, and the old one too when a DELETE or an UPDATE of the key itself
/// leaves it behind. A TRUNCATE (the statement trigger) is refused with
/// the way out, since the log cannot record it row by row.
///
/// The function carries [`PINNED_OUTPUT`] as `SET` clauses: the key is
/// written as text in the writer's session, and the replay reads it back
/// in evolve's, so a writer's `DateStyle = 'SQL, DMY'` or
/// `extra_float_digits = 0` must not change that text.
///
/// It is `SECURITY DEFINER` (with `search_path` pinned to `pg_catalog,
/// pg_temp`; every name in it is qualified): it runs in every writer's
/// session, and an application role that may write the table has no
/// rights on evolve's log, whose insert would otherwise fail every write
/// while the rewrite runs. The triggers that call it are `ENABLE ALWAYS`
/// (see `rewrite`), so writes under `session_replication_role = replica`
/// are captured too.
pub fn capture_function(
    function: &QualifiedName,
    log: &QualifiedName,
    key: &[KeyColumn],
) -> String {
    let parts = |rec: &str| -> Vec<String> {
        key.iter()
            .map(|k| format!("{rec}.{}", quote_ident(&k.name)))
            .collect()
    };
    let as_text =
        |rec: &str| -> Vec<String> { parts(rec).iter().map(|p| format!("{p}::text")).collect() };
    let of = |rec: &str| {
        let texts = as_text(rec);
        format!(
            "INSERT INTO {log} (k) VALUES (ARRAY[{}]);",
            texts.join(", ")
        )
    };
    let body = format!(
        "\n\
         BEGIN\n\
           IF TG_OP = 'TRUNCATE' THEN\n\
             RAISE EXCEPTION 'TRUNCATE of % is refused while evolve rewrite runs on it', TG_TABLE_NAME\n\
               USING HINT = 'wait for the rewrite to finish, or give it up with evolve rewrite --abort';\n\
           END IF;\n\
           IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND ROW({old_key}) IS DISTINCT FROM ROW({new_key})) THEN {old} END IF;\n\
           IF TG_OP <> 'DELETE' THEN {new} END IF;\n\
           RETURN NULL;\n\
         END\n",
        // Compared as text: the key type's own `=` may live in a schema
        // outside the pinned search_path (citext), and a key whose text
        // changed is at worst logged once more than needed.
        old_key = as_text("OLD").join(", "),
        new_key = as_text("NEW").join(", "),
        old = of("OLD"),
        new = of("NEW"),
    );
    let settings: String = PINNED_OUTPUT
        .iter()
        .map(|(name, value)| format!(" SET {name} = {}", quote_literal(value)))
        .collect();
    format!(
        "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER \
         SET search_path = pg_catalog, pg_temp{settings} AS {};\n\
         REVOKE ALL ON FUNCTION {function}() FROM PUBLIC",
        dollar_quote(&body)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t() -> QualifiedName {
        QualifiedName::new("public", "orders")
    }

    fn key(names: &[(&str, &str)]) -> Vec<KeyColumn> {
        names
            .iter()
            .map(|(n, t)| KeyColumn {
                name: n.to_string(),
                type_sql: t.to_string(),
            })
            .collect()
    }

    fn set(column: &str, expr: &str) -> Vec<Assignment> {
        vec![Assignment {
            column: column.into(),
            expr: expr.into(),
            compare_as: None,
        }]
    }

    #[test]
    fn first_and_next_batches_seek_after_the_last_key() {
        let k = key(&[("region", "text"), ("id", "bigint")]);
        let first = batch_update(&t(), &k, &set("total", "price * qty"), None, true);
        assert!(
            first.contains(
                r#"SELECT "region", "id" FROM "public"."orders" ORDER BY "region", "id" LIMIT $1"#
            ),
            "{first}"
        );
        let next = batch_update(&t(), &k, &set("total", "price * qty"), None, false);
        assert!(
            next.contains(
                r#"WHERE ("region", "id") > (($1::text[])[1]::text, ($1::text[])[2]::bigint) ORDER BY "region", "id" LIMIT $2"#
            ),
            "{next}"
        );
        assert!(next.contains(r#"ORDER BY "region" DESC, "id" DESC LIMIT 1"#));
        // The update reads a key range, both bounds index conditions.
        assert!(
            next.contains(
                r#"WHERE ("region", "id") > (($1::text[])[1]::text, ($1::text[])[2]::bigint) AND ("region", "id") <= ((SELECT "region" FROM last), (SELECT "id" FROM last)) AND"#
            ),
            "{next}"
        );
        assert!(next.contains(r#"SET "total" = (price * qty)"#));
        assert!(next.contains(r#""total" IS DISTINCT FROM (price * qty)"#));
    }

    #[test]
    fn the_filter_is_added_to_the_predicate() {
        let s = vec![
            Assignment {
                column: "a".into(),
                expr: "x".into(),
                compare_as: None,
            },
            Assignment {
                column: "b".into(),
                expr: "y + 1".into(),
                compare_as: Some("json".into()),
            },
        ];
        assert_eq!(
            pending_condition(&s, Some("created < now()")),
            r#"(created < now()) AND ("a" IS DISTINCT FROM (x) OR "b"::text IS DISTINCT FROM ((y + 1)::json)::text)"#
        );
        assert_eq!(
            verify(&t(), &s[..1], None),
            r#"SELECT count(*)::int8 FROM "public"."orders" WHERE ("a" IS DISTINCT FROM (x))"#
        );
    }

    #[test]
    fn replay_is_one_statement_that_upserts_each_key_once() {
        let k = key(&[("a", "integer"), ("b", "uuid")]);
        let sql = replay(
            &t(),
            &QualifiedName::new("public", "shadow"),
            &QualifiedName::new("public", "log"),
            &k,
            &key(&[("a", "text"), ("b", "uuid")]),
            &["a".into(), "b".into(), "v".into()],
        );
        // The shadow's rows are found by the key cast to its own types.
        assert!(
            sql.contains(r#"WHERE (t."a", t."b") = (keys._k1::text, keys._k2) RETURNING 1"#),
            "{sql}"
        );
        assert!(
            sql.contains("SELECT DISTINCT (k[1])::integer AS _k1, (k[2])::uuid AS _k2 FROM taken"),
            "{sql}"
        );
        assert!(
            sql.contains(r#"ON CONFLICT ("a", "b") DO UPDATE SET "v" = EXCLUDED."v""#),
            "{sql}"
        );
        assert!(
            sql.contains(r#"WHERE (f."a", f."b") IN (SELECT * FROM keys)"#),
            "{sql}"
        );
        let only_key = replay(&t(), &t(), &t(), &k[..1], &k[..1], &["a".into()]);
        assert!(
            only_key.contains(r#"ON CONFLICT ("a") DO NOTHING"#),
            "{only_key}"
        );
    }

    #[test]
    fn the_copy_skips_only_rows_whose_key_is_there() {
        let k = key(&[("a", "integer"), ("b", "text")]);
        let sql = copy_batch(
            &t(),
            &QualifiedName::new("public", "shadow"),
            &k,
            &["a".into(), "b".into(), "v".into()],
            false,
        );
        assert!(
            sql.contains(r#"ON CONFLICT ("a", "b") DO NOTHING"#),
            "{sql}"
        );
    }

    /// A generated key is not written (the new table computes it) but
    /// still bounds the batch.
    #[test]
    fn a_key_left_out_of_the_copy_still_bounds_the_batch() {
        let k = key(&[("id", "integer")]);
        let sql = copy_batch(
            &t(),
            &QualifiedName::new("public", "shadow"),
            &k,
            &["a".into(), "v".into()],
            false,
        );
        assert!(sql.contains(r#"(SELECT "a", "v", "id" FROM "#), "{sql}");
        assert!(
            sql.contains(r#"INSERT INTO "public"."shadow" ("a", "v") OVERRIDING SYSTEM VALUE SELECT "a", "v" FROM batch"#),
            "{sql}"
        );
    }

    #[test]
    fn the_capture_function_pins_how_keys_are_written() {
        let f = capture_function(
            &QualifiedName::new("public", "f"),
            &QualifiedName::new("public", "log"),
            &key(&[("d", "date")]),
        );
        assert!(
            f.contains(
                "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET DateStyle = 'ISO' SET IntervalStyle = 'postgres' SET extra_float_digits = '3' SET bytea_output = 'hex' AS"
            ),
            "{f}"
        );
    }

    fn ident() -> impl Strategy<Value = String> {
        // Names with quotes, dots, spaces and dollar signs included.
        proptest::string::string_regex("[a-zA-Z_\"'. $;-]{1,12}").unwrap()
    }

    proptest! {
        /// Whatever the names, every identifier comes out quoted: the
        /// generated SQL holds each name only inside double quotes, with
        /// inner quotes doubled, so a name never ends its quoting early.
        #[test]
        fn names_never_escape_their_quotes(names in proptest::collection::vec(ident(), 1..4), col in ident()) {
            let k: Vec<KeyColumn> = names.iter().map(|n| KeyColumn { name: n.clone(), type_sql: "text".into() }).collect();
            let sql = batch_update(&QualifiedName::new("s", "t"), &k, &set(&col, "1"), None, false);
            // Remove every quoted identifier; what is left has no quote.
            let mut rest = String::new();
            let mut in_quotes = false;
            let mut chars = sql.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '"' {
                    if in_quotes && chars.peek() == Some(&'"') {
                        chars.next();
                        continue;
                    }
                    in_quotes = !in_quotes;
                    continue;
                }
                if !in_quotes {
                    rest.push(c);
                }
            }
            prop_assert!(!in_quotes);
            prop_assert!(!rest.contains(';'), "{}", rest);
            // The bound key: once to find the batch, once as its lower bound.
            prop_assert_eq!(rest.matches("$1").count(), 2 * k.len());
            prop_assert_eq!(rest.matches("$2").count(), 1);
        }

        /// The bound key has one element per key column, in order, each
        /// cast to its column's type.
        #[test]
        fn bound_key_casts_each_position(types in proptest::collection::vec("[a-z]{1,8}", 1..6)) {
            let k: Vec<KeyColumn> = types.iter().enumerate().map(|(i, t)| KeyColumn { name: format!("k{i}"), type_sql: t.clone() }).collect();
            let b = bound_key(&k, 1);
            for (i, t) in types.iter().enumerate() {
                let part = format!("($1::text[])[{}]::{}", i + 1, t);
                prop_assert!(b.contains(&part));
            }
            prop_assert_eq!(b.matches("$1").count(), types.len());
        }
    }
}
