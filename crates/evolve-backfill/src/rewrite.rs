//! `evolve rewrite`: a table's shape changed online.
//!
//! 0. **Refused** before anything runs: a partitioned table, a partition
//!    and a table in an inheritance tree (one plain table cannot take
//!    their place), before PostgreSQL 18 a table a partitioned table
//!    references (its foreign key cannot be added back `NOT VALID`), and a
//!    table whose row-level security policies apply to the role (the copy
//!    would see only some rows; evolve's sessions run with `row_security =
//!    off`, see `worker::connect`). So is an `--alter` PostgreSQL refuses
//!    on the shadow, in particular a type change of a column a generated
//!    column reads, named with both columns and the way out (the
//!    generated column dropped and added back by the same rewrite, or its
//!    expression dropped).
//! 1. **Setup**, one transaction: a shadow table `_evolve_rw_<oid>_new`
//!    made `LIKE` the original (defaults, constraints, generated columns,
//!    identity, storage, compression, comments, statistics), with what
//!    `LIKE` leaves out set by hand (reloptions, UNLOGGED, the tablespace,
//!    per-column statistics targets and options), the `--alter` actions
//!    applied and its primary key; `NOT VALID` checks are left off it (the
//!    copy would fail on the old rows that break them) and added back in
//!    the swap. Then a log table `_evolve_rw_<oid>_log` and a trigger on
//!    the original that writes the key of every row an INSERT, UPDATE or
//!    DELETE touches into the log, in the writer's own transaction (a
//!    TRUNCATE is refused while the rewrite runs), with the output
//!    settings pinned so the key reads back the same in evolve's session.
//!    Its row in `evolve_rewrites` (with the original's columns) is
//!    written in the same transaction. Generated columns come with `LIKE
//!    ... INCLUDING GENERATED` and are computed by the shadow itself: the
//!    copy and the replay leave them out of their INSERTs (`OVERRIDING
//!    SYSTEM VALUE` does not cover them; a generated key still bounds the
//!    copy's batches), and the swap's rebuild
//!    (`evolve_migrate::RebuildPlan::for_table_swap`) leaves the table's
//!    own generated columns alone, as they go with the old table.
//! 2. **Copy** in key order, in throttled batches like a backfill, each
//!    batch and its progress in one transaction (a row whose key the
//!    shadow has is skipped; one that breaks another unique constraint
//!    fails the batch, after one replay of the log in case a writer moved
//!    the value); then the log is replayed, so that the shadow is the
//!    table as of one moment, and the other indexes and index-backed
//!    constraints are built on it, each in its original's tablespace.
//! 3. **Replay**: log entries are taken off the log in batches; for each
//!    key the shadow's row is deleted and the original's current row (if
//!    any) copied again, so the order of changes never matters (all the
//!    batch's rows are deleted before any is inserted, and a batch that
//!    still breaks a unique index is taken again with the whole log).
//! 4. **Swap**: first the indexes created on the original since step 2
//!    (or between runs) are built on the shadow, and the shadow's copies
//!    of indexes dropped from it are dropped. Then one transaction under
//!    `lock_timeout` with retry: ACCESS EXCLUSIVE on the original; refused
//!    if a column was added to it (or dropped or changed) since the shadow
//!    was made, which the swap would undo; if an index was created or
//!    dropped after the shadow's were brought up to date, the transaction
//!    rolls back and they are brought up to date again (at most
//!    `INDEX_CHANGE_TRIES` times); the last of the log replayed, the
//!    dependents (views, materialized views, BEGIN ATOMIC functions)
//!    captured and dropped by `evolve-migrate`'s rebuild, the original
//!    renamed to `_evolve_rw_<oid>_old` and stripped of its triggers,
//!    rules, policies and foreign keys, the shadow renamed to the table's
//!    name and given them (foreign keys in both directions `NOT VALID`),
//!    indexes' names swapped (their comments and their constraints'
//!    follow), sequences moved (`OWNED BY`, identity values and names),
//!    grants, owner, comment, row security, replica identity and
//!    publications (with column lists and row filters) restored,
//!    dependents recreated.
//! 5. **After**: materialized views refreshed, the foreign keys that were
//!    valid validated (one that was `NOT VALID` stays so), and the old
//!    table dropped, unless `--keep-old`: then changes to the new table
//!    keep being logged, and `--revert` replays them into the old table
//!    and swaps back.
//!
//! A run stopped at any moment leaves either the state before a step or
//! after it: the next run reads `evolve_rewrites` and goes on from there.
//! Until the swap, `--abort` removes it all, whatever became of the table.

use std::time::Instant;

use evolve_pg::{Client, QualifiedName, quote_ident, quote_literal, shell_word};

use crate::sql::{self, KeyColumn};
use crate::throttle::BatchSizer;
use crate::worker::{self, Table, in_transaction, wait_while_throttled};
use crate::{BackfillError, BatchOptions, Event};

/// A rewrite to run.
#[derive(Clone, Debug)]
pub struct RewriteOptions {
    pub database_url: String,
    /// The table as typed (`name` or `schema.name`).
    pub table: String,
    /// `ALTER TABLE` actions, e.g. `ALTER COLUMN id TYPE bigint`.
    pub alters: Vec<String>,
    pub keep_old: bool,
    pub batches: BatchOptions,
}

/// How many times the swap is tried again after an index was created on
/// the table or dropped from it between building the shadow's indexes
/// and the swap's lock.
const INDEX_CHANGE_TRIES: u32 = 5;

/// The state table, in the first schema of the search_path.
pub const STATE_TABLE: &str = "evolve_rewrites";

/// Actions a rewrite cannot express: they rename, move or re-parent the
/// table or its columns, which the copy matches by name.
const REFUSED: [&str; 9] = [
    "rename",
    "set schema",
    "owner",
    "attach",
    "detach",
    "inherit",
    "no inherit",
    "of ",
    "not of",
];

struct Rewrite<'a> {
    client: Client,
    state: String,
    table: QualifiedName,
    opts: &'a RewriteOptions,
}

/// Names of everything a rewrite of the table with this oid creates.
struct Names {
    shadow: QualifiedName,
    log: QualifiedName,
    old: QualifiedName,
    function: QualifiedName,
}

fn names(schema: &str, oid: u32) -> Names {
    let n = |suffix: &str| QualifiedName::new(schema, format!("_evolve_rw_{oid}_{suffix}"));
    Names {
        shadow: n("new"),
        log: n("log"),
        old: n("old"),
        function: n("capture"),
    }
}

const TRIGGER: &str = "_evolve_rw_capture";

/// Makes the capture triggers on `table` fire in every session, also
/// under `session_replication_role = replica` (a subscription's apply
/// worker, a data-only restore), whose writes would otherwise be lost by
/// the swap.
fn enable_always(table: &QualifiedName) -> String {
    format!(
        "ALTER TABLE {table} ENABLE ALWAYS TRIGGER {}; ALTER TABLE {table} ENABLE ALWAYS TRIGGER {}",
        quote_ident(TRIGGER),
        quote_ident(&format!("{TRIGGER}_truncate"))
    )
}

fn err(table: &QualifiedName, reason: impl Into<String>) -> BackfillError {
    BackfillError::Rewrite {
        table: table.shown(),
        reason: reason.into(),
    }
}

/// Checks each `--alter` before anything runs.
fn check_alters(alters: &[String]) -> Result<(), String> {
    if alters.is_empty() {
        return Err(
            "a rewrite needs at least one --alter, e.g. --alter \"ALTER COLUMN id TYPE bigint\""
                .into(),
        );
    }
    for a in alters {
        let t = a.trim();
        crate::script::check_condition(t).map_err(|_| {
            format!("--alter {a:?} is not one ALTER TABLE action (unbalanced quote or parenthesis, a comment, or a semicolon)")
        })?;
        let lower = t.to_ascii_lowercase();
        let lower = lower.split_whitespace().collect::<Vec<_>>().join(" ") + " ";
        if let Some(word) = REFUSED.iter().find(|w| lower.starts_with(*w)) {
            return Err(format!(
                "--alter {a:?} cannot be done by a rewrite ({} changes the table's identity, not its shape); run it as a plain ALTER TABLE",
                word.trim().to_uppercase()
            ));
        }
        if lower.starts_with("alter ") && has_word(&lower, "type") && has_word(&lower, "using") {
            return Err(format!(
                "--alter {a:?} converts with USING, which a rewrite cannot apply (it copies rows with the new type's assignment cast); add a column of the new type, fill it with evolve backfill, and switch to it instead"
            ));
        }
        if lower.contains(" rename ") {
            return Err(format!(
                "--alter {a:?} renames; a rewrite copies columns by name, so rename with a plain ALTER TABLE before or after"
            ));
        }
    }
    Ok(())
}

/// Whether `word` (lower case) is in `text` (lower case) as a word of its
/// own: not part of a longer name or of a quoted one.
fn has_word(text: &str, word: &str) -> bool {
    let name = |c: char| c.is_alphanumeric() || c == '_' || c == '$' || c == '"';
    text.match_indices(word).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(name)
            && !text[at + word.len()..].chars().next().is_some_and(name)
    })
}

/// Refuses a table the swap cannot replace by one plain table: a
/// partitioned table (the new one would be a plain table without its
/// partitions), a partition (swapping it would detach it from its parent,
/// whose rows it holds) and a table in an inheritance tree (parent: the
/// children would stay attached to the old table and be read twice;
/// child: it would leave its parent).
async fn refuse_structure(
    c: &Client,
    oid: u32,
    table: &QualifiedName,
) -> Result<(), BackfillError> {
    let r = c
        .query_one(
            "SELECT c.relkind::text, c.relispartition,
                    (SELECT string_agg(i.inhparent::regclass::text, ', ' ORDER BY i.inhseqno)
                     FROM pg_inherits i WHERE i.inhrelid = c.oid),
                    (SELECT string_agg(i.inhrelid::regclass::text, ', ' ORDER BY i.inhrelid::regclass::text)
                     FROM pg_inherits i WHERE i.inhparent = c.oid),
                    (SELECT string_agg(format('%I on %s', k.conname, k.conrelid::regclass), ', ' ORDER BY k.conname)
                     FROM pg_constraint k JOIN pg_class r ON r.oid = k.conrelid
                     WHERE k.confrelid = c.oid AND k.contype = 'f' AND k.conparentid = 0
                       AND r.relkind = 'p' AND current_setting('server_version_num')::int < 180000)
             FROM pg_class c WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    let (kind, partition, parents, children): (String, bool, Option<String>, Option<String>) =
        (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
    let partitioned_references: Option<String> = r.try_get(4)?;
    let reason = if kind == "p" {
        "it is a partitioned table, and a rewrite makes one plain table in its place (its partitions would be dropped); change it with a plain ALTER TABLE, which changes every partition".to_string()
    } else if partition {
        format!(
            "it is a partition of {}, and swapping it would take it (and its rows) out of that table; a partition's columns follow its parent's: change {0} with a plain ALTER TABLE",
            parents.unwrap_or_default()
        )
    } else if let Some(parents) = parents {
        format!(
            "it inherits from {parents}, and the new table would not; change it with a plain ALTER TABLE"
        )
    } else if let Some(children) = children {
        format!(
            "tables inherit from it ({children}) and would stay with the old table; change it with a plain ALTER TABLE, which changes them too"
        )
    } else if let Some(fks) = partitioned_references {
        // The swap re-adds foreign keys NOT VALID, which PostgreSQL before
        // 18 refuses on a partitioned table; added valid, it would check
        // every referencing row under the swap's lock.
        format!(
            "partitioned tables reference it (foreign key {fks}), and before PostgreSQL 18 a foreign key on a partitioned table cannot be added back NOT VALID, only checked row by row under the swap's lock; drop that foreign key first and add it back after the rewrite, or change the table with a plain ALTER TABLE"
        )
    } else {
        return Ok(());
    };
    Err(err(table, reason))
}

/// A generated column of the table: its name and the `--alter` actions
/// that drop it, add it back as it is, and make it a plain column.
struct GeneratedColumn {
    name: String,
    drop: String,
    add: String,
    drop_expression: String,
}

/// The table's generated columns.
async fn generated_columns(
    c: &Client,
    oid: u32,
) -> Result<Vec<GeneratedColumn>, tokio_postgres::Error> {
    c.query(
        "SELECT a.attname::text, format('DROP COLUMN %I', a.attname),
                format('ADD COLUMN %I %s GENERATED ALWAYS AS (%s) %s', a.attname,
                       format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid),
                       CASE a.attgenerated WHEN 's' THEN 'STORED' ELSE 'VIRTUAL' END),
                format('ALTER COLUMN %I DROP EXPRESSION', a.attname)
         FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> ''
         ORDER BY a.attnum",
        &[&oid],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(GeneratedColumn {
            name: r.try_get(0)?,
            drop: r.try_get(1)?,
            add: r.try_get(2)?,
            drop_expression: r.try_get(3)?,
        })
    })
    .collect()
}

/// PostgreSQL's refusal to change the type of a column that a generated
/// column reads (SQLSTATE 0A000, "cannot alter type of a column used by a
/// generated column"): the column and the generated column, from its
/// DETAIL (`Column "a" is used by generated column "g".`).
fn retyped_under_generated(db: &tokio_postgres::error::DbError) -> Option<(String, String)> {
    if db.code() != &tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED
        || !db
            .message()
            .starts_with("cannot alter type of a column used by a generated column")
    {
        return None;
    }
    let detail = db.detail()?.strip_prefix("Column \"")?;
    let (column, by) = detail.split_once("\" is used by generated column \"")?;
    let by = by.trim_end_matches('.').strip_suffix('"')?;
    Some((column.to_string(), by.to_string()))
}

/// The refusal of `alters`, which retype `column`, read by the generated
/// column `by`, with the ways out: the same rewrite with `by` dropped and
/// added back (PostgreSQL drops before it retypes and adds after, so the
/// new table has it, computed from the new type, as its last column), or
/// with its expression dropped (a plain column keeping its values).
fn retype_refusal(
    table: &QualifiedName,
    alters: &[String],
    column: &str,
    by: &str,
    generated: &[GeneratedColumn],
) -> String {
    let shown = alters
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = format!(
        "--alter {shown} cannot be applied: it changes the type of column {column}, which the generated column {by} reads, and PostgreSQL cannot change the type of a column a generated column uses"
    );
    if let Some(g) = generated.iter().find(|g| g.name == by) {
        let with = |extra: &[&String]| {
            let mut all = alters.to_vec();
            all.extend(extra.iter().map(|s| s.to_string()));
            finish_command(table, &all)
        };
        out.push_str(&format!(
            "; drop {by} and add it back in the same rewrite ({}: {by} then comes last among the columns), or make it a plain column that keeps its values ({})",
            with(&[&g.drop, &g.add]),
            with(&[&g.drop_expression]),
        ));
    } else {
        out.push_str(&format!(
            "; drop {by} in the same rewrite and add it back after"
        ));
    }
    out
}

/// The columns of a table as name and facts, alternately: what a swap
/// needs to be unchanged since the table it swaps in was made (position,
/// type, collation, NOT NULL, generated), so that a column added, dropped,
/// retyped or re-added meanwhile is found before the swap would undo it.
async fn column_signature(c: &Client, oid: u32) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = c
        .query(
            "SELECT attname::text,
                    format('#%s type %s(%s) collation %s%s%s', attnum, atttypid, atttypmod, attcollation,
                           CASE WHEN attnotnull THEN ' not null' ELSE '' END,
                           CASE WHEN attgenerated <> '' THEN ' generated' ELSE '' END)
             FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped
             ORDER BY attnum",
            &[&oid],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len() * 2);
    for r in rows {
        out.push(r.try_get(0)?);
        out.push(r.try_get(1)?);
    }
    Ok(out)
}

/// What changed between two [`column_signature`]s, in words (`added
/// extra; changed v`), or `None` when nothing did.
fn column_drift(recorded: &[String], now: &[String]) -> Option<String> {
    let pairs = |s: &[String]| -> Vec<(String, String)> {
        s.chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect()
    };
    let (was, is) = (pairs(recorded), pairs(now));
    let names = |v: Vec<&(String, String)>| {
        v.iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let added: Vec<_> = is
        .iter()
        .filter(|(n, _)| !was.iter().any(|(w, _)| w == n))
        .collect();
    let dropped: Vec<_> = was
        .iter()
        .filter(|(n, _)| !is.iter().any(|(i, _)| i == n))
        .collect();
    let changed: Vec<_> = is
        .iter()
        .filter(|(n, f)| was.iter().any(|(w, g)| w == n && g != f))
        .collect();
    let mut parts = Vec::new();
    for (word, list) in [("added", added), ("dropped", dropped), ("changed", changed)] {
        if !list.is_empty() {
            parts.push(format!("{word} {}", names(list)));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The command that finishes a rewrite of `table` with these `--alter`s:
/// what messages tell the user to run.
fn finish_command(table: &QualifiedName, alters: &[String]) -> String {
    let mut out = format!("evolve rewrite {}", shell_word(&table.shown()));
    for a in alters {
        out.push_str(&format!(" --alter {}", shell_word(a)));
    }
    out
}

/// Whether `e` is a unique or an exclusion constraint refusing a row.
fn is_constraint_conflict(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
        || e.code() == Some(&SqlState::EXCLUSION_VIOLATION)
}

/// The server's error on one line (its detail, if any, after a colon), to
/// sit inside a message that goes on with the way out.
fn one_line(e: tokio_postgres::Error) -> String {
    evolve_pg::PgError::Query(e)
        .to_string()
        .lines()
        .map(|l| l.trim().trim_end_matches('.'))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// `evolve rewrite TABLE --abort` for `table`.
fn abort_command(table: &QualifiedName) -> String {
    format!("evolve rewrite {} --abort", shell_word(&table.shown()))
}

async fn ensure_state_table(client: &Client) -> Result<String, BackfillError> {
    let schema: Option<String> = client
        .query_one("SELECT current_schema()::text", &[])
        .await?
        .try_get(0)?;
    let Some(schema) = schema else {
        return Err(BackfillError::Usage(
            "the search_path names no existing schema, so evolve has nowhere to keep the rewrite's state; set search_path".into(),
        ));
    };
    let state = QualifiedName::new(schema, STATE_TABLE).to_string();
    client
        .batch_execute(&format!(
            "BEGIN;
             SELECT pg_advisory_xact_lock({key});
             CREATE TABLE IF NOT EXISTS {state} (
               table_name text PRIMARY KEY,
               table_oid oid NOT NULL,
               alters text[] NOT NULL,
               keep_old bool NOT NULL,
               phase text NOT NULL,
               last_key text[],
               rows_copied int8 NOT NULL DEFAULT 0,
               batches int8 NOT NULL DEFAULT 0,
               index_pairs text[] NOT NULL DEFAULT '{{}}',
               after_swap text[] NOT NULL DEFAULT '{{}}',
               started_at timestamptz NOT NULL DEFAULT now(),
               updated_at timestamptz NOT NULL DEFAULT now(),
               columns text[],
               deferred text[] NOT NULL DEFAULT '{{}}');
             COMMIT",
            key = worker::lock_key("rewrite", "")
        ))
        .await?;
    crate::job::owned_state_table(client, &state, "rewrite state table").await?;
    // A table made by an earlier evolve lacks the later columns.
    let missing: bool = client
        .query_one(
            "SELECT count(*) < 2 FROM pg_attribute
             WHERE attrelid = to_regclass($1) AND attname IN ('columns', 'deferred') AND NOT attisdropped",
            &[&state],
        )
        .await?
        .try_get(0)?;
    if missing {
        let upgrade = format!(
            "ALTER TABLE {state} ADD COLUMN IF NOT EXISTS columns text[],
               ADD COLUMN IF NOT EXISTS deferred text[] NOT NULL DEFAULT '{{}}'"
        );
        client.batch_execute(&upgrade).await.map_err(|e| {
            BackfillError::Usage(format!(
                "rewrite state table {state} was made by an earlier evolve and cannot be brought up to date: {}; have its owner run: {}",
                evolve_pg::PgError::Query(e),
                upgrade.split_whitespace().collect::<Vec<_>>().join(" ")
            ))
        })?;
    }
    Ok(state)
}

struct StateRow {
    oid: u32,
    alters: Vec<String>,
    keep_old: bool,
    phase: String,
    last_key: Option<Vec<Option<String>>>,
    rows_copied: i64,
    batches: i64,
    index_pairs: Vec<String>,
    /// [`column_signature`] of the table the next swap swaps out, as it
    /// was when the table swapped in was made (none: recorded by an
    /// earlier evolve, not checked).
    columns: Option<Vec<String>>,
    /// Run in the swap right after the renames, on the new table: the
    /// `NOT VALID` checks the copy had to do without.
    deferred: Vec<String>,
}

impl Rewrite<'_> {
    async fn state_row(&self) -> Result<Option<StateRow>, BackfillError> {
        let row = self
            .client
            .query_opt(
                &format!(
                    "SELECT table_oid, alters, keep_old, phase, last_key, rows_copied, batches, index_pairs,
                            columns, deferred
                     FROM {} WHERE table_name = $1",
                    self.state
                ),
                &[&self.table.shown()],
            )
            .await?;
        row.map(|r| {
            Ok(StateRow {
                oid: r.try_get(0)?,
                alters: r.try_get(1)?,
                keep_old: r.try_get(2)?,
                phase: r.try_get(3)?,
                last_key: r.try_get(4)?,
                rows_copied: r.try_get(5)?,
                batches: r.try_get(6)?,
                index_pairs: r.try_get(7)?,
                columns: r.try_get(8)?,
                deferred: r.try_get(9)?,
            })
        })
        .transpose()
    }

    async fn set_phase(&self, phase: &str) -> Result<(), BackfillError> {
        self.client
            .execute(
                &format!(
                    "UPDATE {} SET phase = $2, updated_at = now() WHERE table_name = $1",
                    self.state
                ),
                &[&self.table.shown(), &phase],
            )
            .await?;
        Ok(())
    }

    fn what(&self) -> String {
        format!("rewrite of {}", self.table.shown())
    }

    /// Columns copied from `from` into `to`: those of `from` that `to`
    /// has and does not generate.
    async fn copy_columns(&self, from: u32, to: u32) -> Result<Vec<String>, BackfillError> {
        let from_cols = worker::columns(&self.client, from).await?;
        let to_cols = worker::columns(&self.client, to).await?;
        Ok(from_cols
            .into_iter()
            .filter(|(c, _)| to_cols.iter().any(|(t, generated)| t == c && !generated))
            .map(|(c, _)| c)
            .collect())
    }

    async fn oid_of(&self, name: &QualifiedName) -> Result<Option<u32>, BackfillError> {
        Ok(self
            .client
            .query_one("SELECT to_regclass($1)::oid", &[&name.to_string()])
            .await?
            .try_get(0)?)
    }

    /// Step 1, in one transaction.
    async fn setup(
        &self,
        table: &Table,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        check_alters(&self.opts.alters).map_err(BackfillError::Usage)?;
        let n = names(&table.name.schema, table.oid);
        let t = &table.name;
        // What `LIKE` does not carry over: options, persistence and
        // tablespace (an UNLOGGED table stays unlogged, a table and its
        // indexes stay where they were put).
        let (reloptions, persistence, tablespace): (Vec<String>, String, String) = {
            let r = self
                .client
                .query_one(
                    "SELECT coalesce(c.reloptions::text[], '{}'), c.relpersistence::text,
                            coalesce((SELECT spcname::text FROM pg_tablespace WHERE oid = c.reltablespace), '')
                     FROM pg_class c WHERE c.oid = $1",
                    &[&table.oid],
                )
                .await?;
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)
        };
        let pk: (u32, String, String, String) = {
            let r = self
                .client
                .query_one(
                    "SELECT i.indexrelid, c.relname::text, pg_get_constraintdef(k.oid),
                            coalesce((SELECT spcname::text FROM pg_tablespace WHERE oid = c.reltablespace), '')
                     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                     JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.contype = 'p'
                     WHERE i.indrelid = $1 AND i.indisprimary",
                    &[&table.oid],
                )
                .await?;
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)
        };
        let alter_list = self.opts.alters.join(", ");
        let alters = self.opts.alters.clone();
        let key = table.key.clone();
        let state = self.state.clone();
        let what = self.what();
        let mut body = async |c: &Client| -> Result<Result<(), String>, tokio_postgres::Error> {
            // What reads the table must be something the swap can rebuild:
            // found out now, not after the copy.
            match evolve_migrate::RebuildPlan::for_table_swap(c, &what, vec![t.to_string()], false)
                .await
            {
                Ok(_) => {}
                Err(evolve_migrate::MigrateError::Pg(evolve_pg::PgError::Query(e))) => {
                    return Err(e);
                }
                Err(e) => {
                    c.batch_execute("ROLLBACK").await?;
                    return Ok(Err(e.to_string()));
                }
            }
            c.query_one(
                "SELECT set_config('default_tablespace', $1, true)",
                &[&tablespace],
            )
            .await?;
            c.batch_execute(&format!(
                "CREATE {unlogged}TABLE {shadow} (LIKE {t} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED
                   INCLUDING IDENTITY INCLUDING STORAGE INCLUDING COMMENTS INCLUDING COMPRESSION
                   INCLUDING STATISTICS)",
                unlogged = if persistence == "u" { "UNLOGGED " } else { "" },
                shadow = n.shadow
            ))
            .await?;
            // Per-column statistics targets and options (n_distinct), which
            // LIKE does not copy; before the --alter, which may set them.
            for r in c
                .query(
                    "SELECT format('ALTER TABLE %s ALTER COLUMN %I SET STATISTICS %s', $2::text, attname, attstattarget)
                     FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attstattarget >= 0
                     UNION ALL
                     SELECT format('ALTER TABLE %s ALTER COLUMN %I SET (%s)', $2::text, attname, array_to_string(attoptions, ', '))
                     FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attoptions IS NOT NULL",
                    &[&table.oid, &n.shadow.to_string()],
                )
                .await?
            {
                c.batch_execute(&r.try_get::<_, String>(0)?).await?;
            }
            // The replay updates rows the copy brought over, which
            // PostgreSQL refuses for a GENERATED ALWAYS identity column;
            // the shadow's are BY DEFAULT until the swap makes them ALWAYS
            // again (see `capture_moved`).
            c.batch_execute(&sql::identity_by_default(
                &n.shadow,
                &always_identity(c, &n.shadow).await?,
            ))
            .await?;
            if !reloptions.is_empty() {
                c.batch_execute(&format!(
                    "ALTER TABLE {} SET ({})",
                    n.shadow,
                    reloptions.join(", ")
                ))
                .await?;
            }
            // The generated columns as a `--alter` adds them, for the way
            // out of PostgreSQL's refusal to retype a column one reads.
            let generated = generated_columns(c, table.oid).await?;
            if let Err(e) = c
                .execute(&format!("ALTER TABLE {} {alter_list}", n.shadow), &[])
                .await
            {
                let Some(db) = e.as_db_error() else {
                    return Err(e);
                };
                let reason = match retyped_under_generated(db) {
                    Some((column, by)) => retype_refusal(t, &alters, &column, &by, &generated),
                    None => format!(
                        "--alter {} cannot be applied: {}",
                        alters
                            .iter()
                            .map(|a| format!("{a:?}"))
                            .collect::<Vec<_>>()
                            .join(" "),
                        evolve_pg::PgError::Query(e)
                            .to_string()
                            .replace(&n.shadow.name, &t.name)
                    ),
                };
                c.batch_execute("ROLLBACK").await?;
                return Ok(Err(reason));
            }
            // LIKE makes a NOT VALID check valid, and the copy would then
            // fail on the old rows that break it: the shadow does without
            // it, and the swap adds it back NOT VALID (with its comment),
            // as the new shape has it (the --alter may have changed it).
            let mut deferred: Vec<String> = Vec::new();
            let saved: String = c
                .query_one("SELECT current_setting('search_path')", &[])
                .await?
                .try_get(0)?;
            c.batch_execute("SELECT set_config('search_path', '', true)")
                .await?;
            let not_valid = c
                .query(
                    "SELECT s.conname::text, pg_get_constraintdef(s.oid), obj_description(o.oid, 'pg_constraint')
                     FROM pg_constraint s JOIN pg_constraint o ON o.conrelid = $1 AND o.conname = s.conname
                                                             AND o.contype = 'c' AND NOT o.convalidated
                     WHERE s.conrelid = to_regclass($2) AND s.contype = 'c'",
                    &[&table.oid, &n.shadow.to_string()],
                )
                .await?;
            c.query_one("SELECT set_config('search_path', $1, true)", &[&saved])
                .await?;
            for r in not_valid {
                let name: String = r.try_get(0)?;
                let def: String = r.try_get(1)?;
                let comment: Option<String> = r.try_get(2)?;
                c.batch_execute(&format!(
                    "ALTER TABLE {} DROP CONSTRAINT {}",
                    n.shadow,
                    quote_ident(&name)
                ))
                .await?;
                deferred.push(format!(
                    "ALTER TABLE {t} ADD CONSTRAINT {} {def} NOT VALID",
                    quote_ident(&name)
                ));
                if let Some(comment) = comment {
                    deferred.push(format!(
                        "COMMENT ON CONSTRAINT {} ON {t} IS {}",
                        quote_ident(&name),
                        quote_literal(&comment)
                    ));
                }
            }
            let shadow_pk = format!("_evolve_rw_{}", pk.0);
            c.query_one(
                "SELECT set_config('default_tablespace', $1, true)",
                &[&pk.3],
            )
            .await?;
            if let Err(e) = c
                .execute(
                    &format!(
                        "ALTER TABLE {} ADD CONSTRAINT {} {}",
                        n.shadow,
                        quote_ident(&shadow_pk),
                        pk.2
                    ),
                    &[],
                )
                .await
            {
                c.batch_execute("ROLLBACK").await?;
                return Ok(Err(format!(
                    "the new shape cannot keep the primary key {}: {}",
                    pk.2,
                    evolve_pg::PgError::Query(e)
                )));
            }
            // The copy must work on the new shape (a type change without an
            // assignment cast needs USING, which only rewrites rows in place).
            let columns: Vec<String> = c
                .query(
                    "SELECT a.attname::text FROM pg_attribute a
                     JOIN pg_attribute b ON b.attrelid = to_regclass($2)::oid AND b.attname = a.attname
                                        AND b.attnum > 0 AND NOT b.attisdropped AND b.attgenerated = ''
                     WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                    &[&table.oid, &n.shadow.to_string()],
                )
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if let Err(e) = c
                .prepare(&sql::copy_batch(t, &n.shadow, &key, &columns, false))
                .await
            {
                c.batch_execute("ROLLBACK").await?;
                return Ok(Err(format!(
                    "its rows cannot be copied into the new shape (a type change that needs USING cannot be done online; add a column and backfill it instead): {}",
                    evolve_pg::PgError::Query(e)
                )));
            }
            c.batch_execute(&format!(
                "CREATE TABLE {log} (id bigserial PRIMARY KEY, k text[] NOT NULL);
                 {function};
                 CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {t}
                   FOR EACH ROW EXECUTE FUNCTION {fname}();
                 CREATE TRIGGER {trigger_t} BEFORE TRUNCATE ON {t}
                   FOR EACH STATEMENT EXECUTE FUNCTION {fname}();
                 {always}",
                always = enable_always(t),
                log = n.log,
                function = sql::capture_function(&n.function, &n.log, &key),
                trigger = quote_ident(TRIGGER),
                trigger_t = quote_ident(&format!("{TRIGGER}_truncate")),
                fname = n.function,
            ))
            .await?;
            let signature = column_signature(c, table.oid).await?;
            c.execute(
                &format!(
                    "INSERT INTO {state} (table_name, table_oid, alters, keep_old, phase, index_pairs, columns, deferred)
                     VALUES ($1, $2, $3, false, 'copy', $4, $5, $6)"
                ),
                &[
                    &t.shown(),
                    &table.oid,
                    &alters,
                    &vec![pk.1.clone(), shadow_pk.clone()],
                    &signature,
                    &deferred,
                ],
            )
            .await?;
            Ok(Ok(()))
        };
        let (result, _) = in_transaction(
            &self.client,
            &self.what(),
            t,
            &self.opts.batches,
            on_event,
            &mut body,
        )
        .await?;
        result?.map_err(|reason| err(t, reason))?;
        Ok(())
    }

    /// Step 2.
    async fn copy(
        &self,
        table: &Table,
        row: &StateRow,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        let n = names(&table.name.schema, row.oid);
        let shadow_oid = self.oid_of(&n.shadow).await?.ok_or_else(|| {
            err(
                &table.name,
                format!(
                    "its shadow table {} is missing; give the rewrite up with: {}, then run it again",
                    n.shadow.shown(),
                    abort_command(&table.name)
                ),
            )
        })?;
        let columns = self.copy_columns(table.oid, shadow_oid).await?;
        // Preparing waits for the table's locks like a batch does.
        let first_sql = sql::copy_batch(&table.name, &n.shadow, &table.key, &columns, true);
        let next_sql = sql::copy_batch(&table.name, &n.shadow, &table.key, &columns, false);
        let mut prepare = async |c: &Client| -> Result<_, tokio_postgres::Error> {
            Ok((c.prepare(&first_sql).await?, c.prepare(&next_sql).await?))
        };
        let (prepared, _) = in_transaction(
            &self.client,
            &self.what(),
            &table.name,
            &self.opts.batches,
            on_event,
            &mut prepare,
        )
        .await?;
        let (first, next) = prepared.map_err(|e| {
            err(
                &table.name,
                format!(
                    "its rows cannot be copied into the new shape (a type change that needs USING?): {}",
                    evolve_pg::PgError::Query(e)
                ),
            )
        })?;
        let progress = self
            .client
            .prepare(&format!(
                "UPDATE {} SET last_key = $2, rows_copied = rows_copied + $3, batches = batches + 1,
                   updated_at = now() WHERE table_name = $1 RETURNING rows_copied, batches",
                self.state
            ))
            .await?;
        let what = self.what();
        on_event(&Event::Phase {
            table: table.name.shown(),
            phase: "copy".into(),
        });
        on_event(&Event::Started {
            job: what.clone(),
            table: table.name.shown(),
            resumed: row.batches > 0,
            rows_done: row.rows_copied as u64,
            batches: row.batches as u64,
            estimated_rows: table.estimated_rows,
        });
        let mut last_key = row.last_key.clone();
        let mut keys_seen = row.rows_copied as u64;
        let mut sizer = BatchSizer::new(self.opts.batches.batch, self.opts.batches.batch_time);
        // Whether the batch at `last_key` met a unique or exclusion
        // constraint of the shadow once already.
        let mut caught_up = false;
        loop {
            wait_while_throttled(
                &self.client,
                &what,
                &self.opts.batches,
                on_event,
                &mut async |_| Ok(None),
            )
            .await?;
            let size = sizer.size() as i64;
            let started = Instant::now();
            let t = table.name.shown();
            let mut body = async |c: &Client| {
                let r = match &last_key {
                    None => c.query_one(&first, &[&size]).await?,
                    Some(k) => c.query_one(&next, &[k, &size]).await?,
                };
                let copied: i64 = r.try_get(0)?;
                let scanned: i64 = r.try_get(1)?;
                let end: Option<Vec<Option<String>>> = r.try_get(2)?;
                let totals = match &end {
                    Some(end) => {
                        let p = c.query_one(&progress, &[&t, end, &scanned]).await?;
                        Some((p.try_get::<_, i64>(0)?, p.try_get::<_, i64>(1)?))
                    }
                    None => None,
                };
                Ok((copied, scanned, end, totals))
            };
            let (result, _) = in_transaction(
                &self.client,
                &what,
                &table.name,
                &self.opts.batches,
                on_event,
                &mut body,
            )
            .await?;
            let (copied, scanned, end, totals) = match result {
                Ok(r) => r,
                Err(e) if worker::is_row_security(&e) => {
                    return Err(worker::row_security_error(e, &table.name, &what));
                }
                Err(e) if !caught_up && is_constraint_conflict(&e) => {
                    // The shadow may hold a unique value that a writer has
                    // moved since to a row of this batch (the shadow's
                    // unique constraints: an --alter's, or the indexes of
                    // a run killed after the copy): replaying the log makes
                    // the copied rows current, and the batch is tried once
                    // more; a conflict then is in the rows themselves.
                    caught_up = true;
                    self.replay_log(
                        &table.name,
                        &n.shadow,
                        &n.log,
                        &table.key,
                        &columns,
                        on_event,
                    )
                    .await?;
                    continue;
                }
                Err(e) => {
                    // Where the failed batch would have ended, for the message.
                    let end_sql = sql::batch_end(&table.name, &table.key, last_key.is_none());
                    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = match &last_key {
                        None => vec![&size],
                        Some(k) => vec![k, &size],
                    };
                    let end: Option<Vec<Option<String>>> = self
                        .client
                        .query_one(&end_sql, &params)
                        .await
                        .ok()
                        .and_then(|r| r.try_get(0).ok());
                    return Err(err(
                        &table.name,
                        format!(
                            "the copy of its keys {} into the new shape failed and was rolled back: {}; fix those rows (or the --alter) and run it again to resume at that batch, or give the rewrite up with: {}",
                            worker::describe_range(last_key.as_deref(), end.as_deref()),
                            one_line(e),
                            abort_command(&table.name)
                        ),
                    ));
                }
            };
            caught_up = false;
            let Some((done, batches)) = totals else { break };
            keys_seen += scanned as u64;
            let took = started.elapsed();
            let next_size = sizer.observe(took, scanned as u64);
            on_event(&Event::Batch {
                job: what.clone(),
                batch: batches as u64,
                rows: copied as u64,
                scanned: scanned as u64,
                rows_done: done as u64,
                keys_seen,
                next_size,
                ms: took.as_millis() as u64,
            });
            last_key = end;
            if scanned < size {
                break;
            }
            tokio::time::sleep(self.opts.batches.nice_wait(took)).await;
        }
        // The batches copied rows as of different moments: a unique value
        // moved meanwhile from a row copied early to one copied late is in
        // the shadow twice. The log has the keys of every row changed since
        // its copy, so replaying it to the end first (the last batch takes
        // all the entries its snapshot sees) makes the shadow the table as
        // of one moment, on which the unique indexes can be built.
        self.replay_log(
            &table.name,
            &n.shadow,
            &n.log,
            &table.key,
            &columns,
            on_event,
        )
        .await?;
        self.build_indexes(table, &n, shadow_oid, on_event).await?;
        self.set_phase("replay").await
    }

    /// The original's other indexes and index-backed constraints, built on
    /// the shadow after the copy (each in its own transaction; one that
    /// exists already is skipped, so a rerun builds only what is missing).
    async fn build_indexes(
        &self,
        table: &Table,
        n: &Names,
        shadow_oid: u32,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        let rows = self
            .client
            .query(
                "SELECT i.indexrelid, ic.relname::text, pg_get_indexdef(i.indexrelid),
                        k.oid IS NOT NULL, pg_get_constraintdef(k.oid),
                        quote_ident(ic.relname), quote_ident(n.nspname) || '.' || quote_ident(c.relname),
                        coalesce((SELECT spcname::text FROM pg_tablespace WHERE oid = ic.reltablespace), '')
                 FROM pg_index i
                 JOIN pg_class ic ON ic.oid = i.indexrelid
                 JOIN pg_class c ON c.oid = i.indrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.conrelid = i.indrelid
                                          AND k.contype IN ('u', 'x')
                 WHERE i.indrelid = $1 AND NOT i.indisprimary
                 ORDER BY i.indexrelid",
                &[&table.oid],
            )
            .await?;
        let mut pairs: Vec<String> = Vec::new();
        // The copies of indexes dropped from the original since they were
        // built (between runs, or while the log was replayed) go too: the
        // swap would otherwise bring them back under their copies' names.
        let current: Vec<String> = rows
            .iter()
            .map(|r| {
                r.try_get::<_, u32>(0)
                    .map(|oid| format!("_evolve_rw_{oid}"))
            })
            .collect::<Result<_, _>>()?;
        let stale = self
            .client
            .query(
                "SELECT c.relname::text, k.oid IS NOT NULL
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.conrelid = i.indrelid
                 WHERE i.indrelid = $1 AND NOT i.indisprimary
                   AND c.relname ~ '^_evolve_rw_[0-9]+$' AND NOT (c.relname = ANY ($2))",
                &[&shadow_oid, &current],
            )
            .await?;
        for r in stale {
            let name: String = r.try_get(0)?;
            let constraint: bool = r.try_get(1)?;
            let statement = if constraint {
                format!(
                    "ALTER TABLE {} DROP CONSTRAINT {}",
                    n.shadow,
                    quote_ident(&name)
                )
            } else {
                format!("DROP INDEX {}", QualifiedName::new(&n.shadow.schema, name))
            };
            self.client.batch_execute(&statement).await?;
        }
        for r in rows {
            let index_oid: u32 = r.try_get(0)?;
            let name: String = r.try_get(1)?;
            let def: String = r.try_get(2)?;
            let is_constraint: bool = r.try_get(3)?;
            let constraint_def: Option<String> = r.try_get(4)?;
            let quoted_name: String = r.try_get(5)?;
            let quoted_table: String = r.try_get(6)?;
            let tablespace: String = r.try_get(7)?;
            let shadow_name = format!("_evolve_rw_{index_oid}");
            pairs.push(name.clone());
            pairs.push(shadow_name.clone());
            let exists: bool = self
                .client
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                                    WHERE i.indrelid = $1 AND c.relname = $2)",
                    &[&shadow_oid, &shadow_name],
                )
                .await?
                .try_get(0)?;
            if exists {
                continue;
            }
            let statement = if is_constraint {
                format!(
                    "ALTER TABLE {} ADD CONSTRAINT {} {}",
                    n.shadow,
                    quote_ident(&shadow_name),
                    constraint_def.unwrap_or_default()
                )
            } else {
                // CREATE [UNIQUE] INDEX name ON [ONLY] table USING ...
                let unique = def.starts_with("CREATE UNIQUE INDEX ");
                let head = format!(
                    "CREATE {}INDEX {quoted_name} ON {quoted_table} ",
                    if unique { "UNIQUE " } else { "" }
                );
                let Some(rest) = def.strip_prefix(&head) else {
                    return Err(err(
                        &table.name,
                        format!(
                            "index {name} has a definition evolve cannot move ({def}); drop it and recreate it after the rewrite"
                        ),
                    ));
                };
                format!(
                    "CREATE {}INDEX {} ON {} {rest}",
                    if unique { "UNIQUE " } else { "" },
                    quote_ident(&shadow_name),
                    n.shadow
                )
            };
            // In the original index's tablespace (pg_get_indexdef leaves it
            // out; default_tablespace '' is the database's).
            let mut body = async |c: &Client| {
                c.query_one(
                    "SELECT set_config('default_tablespace', $1, true)",
                    &[&tablespace],
                )
                .await?;
                c.batch_execute(&statement).await
            };
            let (result, _) = in_transaction(
                &self.client,
                &self.what(),
                &table.name,
                &self.opts.batches,
                on_event,
                &mut body,
            )
            .await?;
            result.map_err(|e| {
                err(
                    &table.name,
                    format!(
                        "index {name} cannot be built on the new shape: {}; fix that and run it again, or give the rewrite up with: {}",
                        one_line(e),
                        abort_command(&table.name)
                    ),
                )
            })?;
        }
        self.client
            .execute(
                &format!(
                    "UPDATE {} SET index_pairs = index_pairs[1:2] || $2 WHERE table_name = $1",
                    self.state
                ),
                &[&table.name.shown(), &pairs],
            )
            .await?;
        Ok(())
    }

    /// Runs `drops` and deletes the table's state row, in one transaction
    /// under `lock_timeout` with retry: the server's error, if they failed
    /// (and nothing was dropped).
    async fn drop_with_state(
        &self,
        drops: &str,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<Result<(), tokio_postgres::Error>, BackfillError> {
        let state = &self.state;
        let shown = self.table.shown();
        let mut body = async |c: &Client| {
            c.batch_execute(drops).await?;
            c.execute(
                &format!("DELETE FROM {state} WHERE table_name = $1"),
                &[&shown],
            )
            .await?;
            Ok(())
        };
        let (result, _) = in_transaction(
            &self.client,
            &self.what(),
            &self.table,
            &self.opts.batches,
            on_event,
            &mut body,
        )
        .await?;
        Ok(result)
    }

    /// Brings the capture of a rewrite set up by an earlier evolve up to
    /// date: its function `SECURITY DEFINER` (writers without rights on
    /// the log failed) and its triggers `ENABLE ALWAYS` (writes under
    /// `session_replication_role = replica` were not captured). Changes
    /// such writes made before this cannot be found again; the way out for
    /// them is `--abort` and a new rewrite.
    async fn current_capture(
        &self,
        table: &Table,
        n: &Names,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        let r = self
            .client
            .query_one(
                "SELECT coalesce((SELECT p.prosecdef FROM pg_proc p WHERE p.oid = to_regprocedure($1 || '()')), true),
                        coalesce((SELECT bool_and(t.tgenabled = 'A') FROM pg_trigger t
                                  WHERE t.tgrelid = $2 AND t.tgname::text IN ($3::text, $3::text || '_truncate')), true)",
                &[&n.function.to_string(), &table.oid, &TRIGGER],
            )
            .await?;
        let (definer, always): (bool, bool) = (r.try_get(0)?, r.try_get(1)?);
        if definer && always {
            return Ok(());
        }
        let function = sql::capture_function(&n.function, &n.log, &table.key).replacen(
            "CREATE FUNCTION",
            "CREATE OR REPLACE FUNCTION",
            1,
        );
        let upgrade = format!("{function}; {}", enable_always(&table.name));
        let mut body = async |c: &Client| c.batch_execute(&upgrade).await;
        let (result, _) = in_transaction(
            &self.client,
            &self.what(),
            &table.name,
            &self.opts.batches,
            on_event,
            &mut body,
        )
        .await?;
        result.map_err(|e| {
            err(
                &table.name,
                format!(
                    "its change capture, set up by an earlier evolve, cannot be brought up to date: {}; give the rewrite up with: {}, then run it again",
                    one_line(e),
                    abort_command(&table.name)
                ),
            )
        })
    }

    /// Step 3: replays the log from `from` onto `to` until less than one
    /// batch was left.
    async fn replay(
        &self,
        from: &QualifiedName,
        to: &QualifiedName,
        log: &QualifiedName,
        key: &[KeyColumn],
        columns: &[String],
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        on_event(&Event::Phase {
            table: self.table.shown(),
            phase: "replay".into(),
        });
        self.replay_log(from, to, log, key, columns, on_event).await
    }

    /// Replays the log in batches until one takes less than a full batch,
    /// that is every entry its snapshot saw.
    async fn replay_log(
        &self,
        from: &QualifiedName,
        to: &QualifiedName,
        log: &QualifiedName,
        key: &[KeyColumn],
        columns: &[String],
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        // The batch adapts like the copy's; less than a full batch taken
        // means the log was drained to less than one batch.
        let mut sizer = BatchSizer::new(self.opts.batches.batch, self.opts.batches.batch_time);
        loop {
            wait_while_throttled(
                &self.client,
                &self.what(),
                &self.opts.batches,
                on_event,
                &mut async |_| Ok(None),
            )
            .await?;
            let size = sizer.size() as i64;
            let started = Instant::now();
            let mut body =
                async |c: &Client| replay_batch(c, from, to, log, key, columns, size).await;
            let (result, _) = in_transaction(
                &self.client,
                &self.what(),
                from,
                &self.opts.batches,
                on_event,
                &mut body,
            )
            .await?;
            let taken = match result {
                Ok(n) => n,
                Err(e) if worker::is_row_security(&e) => {
                    return Err(worker::row_security_error(e, from, &self.what()));
                }
                Err(e) => {
                    return Err(err(
                        &self.table,
                        format!(
                            "replaying the changes made to {} meanwhile into {} failed and was rolled back: {}; fix those rows (or the --alter) and run it again, or give the rewrite up with: {}",
                            from.shown(),
                            to.shown(),
                            one_line(e),
                            abort_command(&self.table)
                        ),
                    ));
                }
            };
            let took = started.elapsed();
            sizer.observe(took, taken);
            on_event(&Event::Replayed {
                table: self.table.shown(),
                entries: taken,
                ms: took.as_millis() as u64,
            });
            if taken < size as u64 {
                return Ok(());
            }
        }
    }
}

/// Takes up to `size` entries off the log and makes `to` match `from` for
/// their keys. Returns how many entries it took. Runs inside a
/// transaction.
///
/// When those entries break one of `to`'s unique or exclusion constraints
/// (a unique value moved to a row whose entry is further down the log:
/// `to` still has it on the row it left), the batch is taken again with
/// every entry of the log, which leaves `to` equal to `from` as of one
/// snapshot (see [`sql::replay`]): a conflict then is a real one (an
/// `--alter` that adds a constraint the rows break).
async fn replay_batch(
    c: &Client,
    from: &QualifiedName,
    to: &QualifiedName,
    log: &QualifiedName,
    key: &[KeyColumn],
    columns: &[String],
    size: i64,
) -> Result<u64, tokio_postgres::Error> {
    // The key's types in `to`, which an --alter may have changed (integer
    // to text): the logged keys are cast to them to find `to`'s rows.
    let mut to_key = Vec::with_capacity(key.len());
    for k in key {
        let type_sql: Option<String> = c
            .query_opt(
                "SELECT format_type(atttypid, NULL) FROM pg_attribute
                 WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped",
                &[&to.to_string(), &k.name],
            )
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
        to_key.push(KeyColumn {
            name: k.name.clone(),
            type_sql: type_sql.unwrap_or_else(|| k.type_sql.clone()),
        });
    }
    let statement = sql::replay(from, to, log, key, &to_key, columns);
    c.batch_execute("SAVEPOINT _evolve_rw_replay").await?;
    let row = match c.query_one(&statement, &[&Some(size)]).await {
        Ok(row) => row,
        Err(e) if is_constraint_conflict(&e) => {
            c.batch_execute("ROLLBACK TO SAVEPOINT _evolve_rw_replay")
                .await?;
            c.query_one(&statement, &[&None::<i64>]).await?
        }
        Err(e) => return Err(e),
    };
    c.batch_execute("RELEASE SAVEPOINT _evolve_rw_replay")
        .await?;
    Ok(row.try_get::<_, i64>(0)? as u64)
}

/// The table's `GENERATED ALWAYS AS IDENTITY` columns.
async fn always_identity(
    c: &Client,
    table: &QualifiedName,
) -> Result<Vec<String>, tokio_postgres::Error> {
    c.query(
        "SELECT attname::text FROM pg_attribute
         WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attidentity = 'a'
         ORDER BY attnum",
        &[&table.to_string()],
    )
    .await?
    .iter()
    .map(|r| r.try_get(0))
    .collect()
}

/// What the swap moves from one table to the other, captured under the
/// table's lock with an empty search_path (every name qualified).
struct Moved {
    /// Run on the table that is swapped out (after its rename).
    strip: Vec<String>,
    /// Run on other tables before the rename (incoming foreign keys).
    before: Vec<String>,
    /// Run after the renames.
    after: Vec<String>,
    /// Foreign keys re-added NOT VALID, validated after the commit.
    validate: Vec<String>,
}

async fn capture_moved(
    c: &Client,
    from_oid: u32,
    to_oid: u32,
    table: &QualifiedName,
    swapped_out: &QualifiedName,
) -> Result<Moved, tokio_postgres::Error> {
    let mut m = Moved {
        strip: Vec::new(),
        before: Vec::new(),
        after: Vec::new(),
        validate: Vec::new(),
    };
    // Triggers (not internal, not the capture's own).
    for r in c
        .query(
            "SELECT t.tgname::text, pg_get_triggerdef(t.oid), t.tgenabled::text
             FROM pg_trigger t WHERE t.tgrelid = $1 AND NOT t.tgisinternal
               AND t.tgname NOT LIKE '\\_evolve\\_rw\\_capture%' ORDER BY t.tgname",
            &[&from_oid],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        let def: String = r.try_get(1)?;
        let enabled: String = r.try_get(2)?;
        m.strip.push(format!(
            "DROP TRIGGER {} ON {swapped_out}",
            quote_ident(&name)
        ));
        m.after.push(def);
        let state = match enabled.as_str() {
            "D" => Some("DISABLE"),
            "R" => Some("ENABLE REPLICA"),
            "A" => Some("ENABLE ALWAYS"),
            _ => None,
        };
        if let Some(s) = state {
            m.after.push(format!(
                "ALTER TABLE {table} {s} TRIGGER {}",
                quote_ident(&name)
            ));
        }
    }
    // Rules: their definitions name the table, which after the renames is
    // the new one.
    for r in c
        .query(
            "SELECT r.rulename::text, pg_get_ruledef(r.oid), r.ev_enabled::text,
                    obj_description(r.oid, 'pg_rewrite')
             FROM pg_rewrite r WHERE r.ev_class = $1 AND r.rulename <> '_RETURN'
             ORDER BY r.rulename",
            &[&from_oid],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        let def: String = r.try_get(1)?;
        let enabled: String = r.try_get(2)?;
        let comment: Option<String> = r.try_get(3)?;
        m.strip
            .push(format!("DROP RULE {} ON {swapped_out}", quote_ident(&name)));
        m.after.push(def);
        let state = match enabled.as_str() {
            "D" => Some("DISABLE"),
            "R" => Some("ENABLE REPLICA"),
            "A" => Some("ENABLE ALWAYS"),
            _ => None,
        };
        if let Some(s) = state {
            m.after.push(format!(
                "ALTER TABLE {table} {s} RULE {}",
                quote_ident(&name)
            ));
        }
        if let Some(comment) = comment {
            m.after.push(format!(
                "COMMENT ON RULE {} ON {table} IS {}",
                quote_ident(&name),
                quote_literal(&comment)
            ));
        }
    }
    // Policies and row security.
    for r in c
        .query(
            "SELECT p.polname::text,
                    format('CREATE POLICY %I ON %s AS %s FOR %s TO %s%s%s', p.polname, $2::text,
                        CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
                        CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT'
                                      WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
                        CASE WHEN p.polroles = '{0}' THEN 'PUBLIC'
                             ELSE (SELECT string_agg(quote_ident(r.rolname), ', ' ORDER BY r.rolname)
                                   FROM pg_roles r WHERE r.oid = ANY (p.polroles)) END,
                        coalesce(' USING (' || pg_get_expr(p.polqual, p.polrelid) || ')', ''),
                        coalesce(' WITH CHECK (' || pg_get_expr(p.polwithcheck, p.polrelid) || ')', ''))
             FROM pg_policy p WHERE p.polrelid = $1 ORDER BY p.polname",
            &[&from_oid, &table.to_string()],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        m.strip.push(format!("DROP POLICY {} ON {swapped_out}", quote_ident(&name)));
        m.after.push(r.try_get(1)?);
    }
    let r = c
        .query_one(
            "SELECT c.relrowsecurity, c.relforcerowsecurity, pg_get_userbyid(c.relowner)::text,
                    obj_description(c.oid, 'pg_class'), c.relreplident::text,
                    (SELECT quote_ident(ic.relname) FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                     WHERE i.indrelid = c.oid AND i.indisreplident),
                    array(SELECT format('GRANT %s ON %s TO %s%s', a.privilege_type, $2::text,
                                        CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                             ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                                        CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
                          FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner),
                    array(SELECT format('GRANT %s (%I) ON %s TO %s%s', a.privilege_type, att.attname, $2::text,
                                        CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                             ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                                        CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
                          FROM pg_attribute att, aclexplode(att.attacl) a
                          WHERE att.attrelid = c.oid AND att.attnum > 0 AND NOT att.attisdropped
                            AND att.attacl IS NOT NULL),
                    current_setting('server_version_num')::int >= 150000
             FROM pg_class c WHERE c.oid = $1",
            &[&from_oid, &table.to_string()],
        )
        .await?;
    let (rls, force): (bool, bool) = (r.try_get(0)?, r.try_get(1)?);
    let owner: String = r.try_get(2)?;
    let comment: Option<String> = r.try_get(3)?;
    let replident: String = r.try_get(4)?;
    let replident_index: Option<String> = r.try_get(5)?;
    let grants: Vec<String> = r.try_get(6)?;
    let column_grants: Vec<String> = r.try_get(7)?;
    let pg15: bool = r.try_get(8)?;
    m.after.push(format!(
        "ALTER TABLE {table} OWNER TO {}",
        quote_ident(&owner)
    ));
    m.after.extend(grants);
    m.after.extend(column_grants);
    if rls {
        m.after
            .push(format!("ALTER TABLE {table} ENABLE ROW LEVEL SECURITY"));
    }
    if force {
        m.after
            .push(format!("ALTER TABLE {table} FORCE ROW LEVEL SECURITY"));
    }
    if let Some(comment) = comment {
        m.after.push(format!(
            "COMMENT ON TABLE {table} IS {}",
            quote_literal(&comment)
        ));
    }
    match (replident.as_str(), replident_index) {
        ("f", _) => m
            .after
            .push(format!("ALTER TABLE {table} REPLICA IDENTITY FULL")),
        ("n", _) => m
            .after
            .push(format!("ALTER TABLE {table} REPLICA IDENTITY NOTHING")),
        ("i", Some(index)) => m.after.push(format!(
            "ALTER TABLE {table} REPLICA IDENTITY USING INDEX {index}"
        )),
        _ => {}
    }
    // Publications, with the column list and row filter each publishes
    // the table with (PostgreSQL 15 on).
    let publications = if pg15 {
        "SELECT quote_ident(p.pubname),
                CASE WHEN pr.prattrs IS NULL THEN ''
                     ELSE ' (' || (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
                                   FROM unnest(pr.prattrs::int2[]) WITH ORDINALITY AS k(attnum, ord)
                                   JOIN pg_attribute a ON a.attrelid = pr.prrelid AND a.attnum = k.attnum) || ')'
                END || coalesce(' WHERE (' || pg_get_expr(pr.prqual, pr.prrelid) || ')', '')
         FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
         WHERE pr.prrelid = $1 ORDER BY p.pubname"
    } else {
        "SELECT quote_ident(p.pubname), ''
         FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
         WHERE pr.prrelid = $1 ORDER BY p.pubname"
    };
    for r in c.query(publications, &[&from_oid]).await? {
        let p: String = r.try_get(0)?;
        let how: String = r.try_get(1)?;
        m.strip
            .push(format!("ALTER PUBLICATION {p} DROP TABLE {swapped_out}"));
        m.after
            .push(format!("ALTER PUBLICATION {p} ADD TABLE {table}{how}"));
    }
    // Comments on indexes and on the constraints they back: after the
    // index names are exchanged, the names the table swapped out had
    // belong to the indexes (and constraints) of the one swapped in.
    for r in c
        .query(
            "SELECT format('COMMENT ON INDEX %s IS %L', i.indexrelid::regclass::text, d.description)
             FROM pg_index i JOIN pg_description d ON d.classoid = 'pg_class'::regclass
                                                  AND d.objoid = i.indexrelid AND d.objsubid = 0
             WHERE i.indrelid = $1
             UNION ALL
             SELECT format('COMMENT ON CONSTRAINT %I ON %s IS %L', k.conname, $2::text, d.description)
             FROM pg_constraint k JOIN pg_description d ON d.classoid = 'pg_constraint'::regclass
                                                       AND d.objoid = k.oid AND d.objsubid = 0
             WHERE k.conrelid = $1 AND k.contype IN ('p', 'u', 'x')",
            &[&from_oid, &table.to_string()],
        )
        .await?
    {
        m.after.push(r.try_get(0)?);
    }
    // Identity columns that are GENERATED ALWAYS on the table swapped out
    // are again on the one swapped in; the table swapped out, which a
    // revert replays into, has them BY DEFAULT.
    for r in c
        .query(
            "SELECT a.attname::text FROM pg_attribute a
             JOIN pg_attribute b ON b.attrelid = $2 AND b.attname = a.attname
                                AND NOT b.attisdropped AND b.attidentity = 'd'
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity = 'a'
             ORDER BY a.attnum",
            &[&from_oid, &to_oid],
        )
        .await?
    {
        let column: String = r.try_get(0)?;
        m.after.push(format!(
            "ALTER TABLE {table} ALTER COLUMN {} SET GENERATED ALWAYS",
            quote_ident(&column)
        ));
        m.strip.push(format!(
            "ALTER TABLE {swapped_out} ALTER COLUMN {} SET GENERATED BY DEFAULT",
            quote_ident(&column)
        ));
    }
    // Owned sequences (serial columns) move; identity values carry over,
    // and identity sequences exchange names, so the new table's is called
    // what the old one's was (not after the shadow).
    for r in c
        .query(
            "SELECT d.objid::regclass::text, a.attname::text, a.attidentity <> '',
                    (SELECT format_type(s.seqtypid, NULL) FROM pg_sequence s WHERE s.seqrelid = d.objid),
                    (SELECT format_type(b.atttypid, NULL) FROM pg_attribute b
                     WHERE b.attrelid = $2 AND b.attname = a.attname AND NOT b.attisdropped),
                    (SELECT relname::text FROM pg_class WHERE oid = d.objid),
                    (SELECT t.objid::regclass::text FROM pg_depend t
                     JOIN pg_attribute b ON b.attrelid = t.refobjid AND b.attnum = t.refobjsubid
                     WHERE t.classid = 'pg_class'::regclass AND t.refclassid = 'pg_class'::regclass
                       AND t.refobjid = $2 AND t.deptype = 'i' AND b.attname = a.attname
                       AND (SELECT relkind FROM pg_class WHERE oid = t.objid) = 'S'),
                    (SELECT c2.relname::text FROM pg_depend t
                     JOIN pg_attribute b ON b.attrelid = t.refobjid AND b.attnum = t.refobjsubid
                     JOIN pg_class c2 ON c2.oid = t.objid
                     WHERE t.classid = 'pg_class'::regclass AND t.refclassid = 'pg_class'::regclass
                       AND t.refobjid = $2 AND t.deptype = 'i' AND b.attname = a.attname
                       AND c2.relkind = 'S'),
                    (SELECT quote_ident(n.nspname) FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace
                     WHERE s.oid = d.objid),
                    d.objid
             FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
             WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
               AND d.refobjid = $1 AND d.deptype IN ('a', 'i')
               AND (SELECT relkind FROM pg_class WHERE oid = d.objid) = 'S'",
            &[&from_oid, &to_oid],
        )
        .await?
    {
        let seq: String = r.try_get(0)?;
        let column: String = r.try_get(1)?;
        let identity: bool = r.try_get(2)?;
        if identity {
            m.after.push(format!(
                "SELECT setval(pg_get_serial_sequence({}, {}), s.last_value, s.is_called) FROM {seq} s",
                quote_literal(&table.to_string()),
                quote_literal(&column)
            ));
            let seq_name: String = r.try_get(5)?;
            let to_seq: Option<String> = r.try_get(6)?;
            let to_seq_name: Option<String> = r.try_get(7)?;
            let seq_schema: String = r.try_get(8)?;
            let seq_oid: u32 = r.try_get(9)?;
            if let (Some(to_seq), Some(to_seq_name)) = (to_seq, to_seq_name) {
                let tmp = format!("_evolve_rw_seq_{seq_oid}");
                m.after.push(format!(
                    "ALTER SEQUENCE {seq} RENAME TO {tmp_q}; ALTER SEQUENCE {to_seq} RENAME TO {name};
                     ALTER SEQUENCE {seq_schema}.{tmp_q} RENAME TO {to_name}",
                    tmp_q = quote_ident(&tmp),
                    name = quote_ident(&seq_name),
                    to_name = quote_ident(&to_seq_name),
                ));
            }
        } else {
            m.after.push(format!(
                "ALTER SEQUENCE {seq} OWNED BY {table}.{}",
                quote_ident(&column)
            ));
            // A serial column's sequence follows its new integer type, so
            // integer to bigint really gets past 2^31.
            let seq_type: Option<String> = r.try_get(3)?;
            let column_type: Option<String> = r.try_get(4)?;
            if let Some(t) = column_type.filter(|t| {
                ["smallint", "integer", "bigint"].contains(&t.as_str()) && Some(t) != seq_type.as_ref()
            }) {
                m.after.push(format!("ALTER SEQUENCE {seq} AS {t}"));
            }
        }
    }
    // Foreign keys: outgoing (self-references included) and incoming. One
    // that was NOT VALID stays so (its old rows may break it); the others
    // are validated after the commit.
    for r in c
        .query(
            "SELECT k.conname::text, k.conrelid::regclass::text, pg_get_constraintdef(k.oid),
                    k.conrelid = $1, k.convalidated, obj_description(k.oid, 'pg_constraint'),
                    k.conrelid = $2
             FROM pg_constraint k
             WHERE k.contype = 'f' AND (k.conrelid = $1 OR k.confrelid = $1)
               -- A partitioned table's foreign key has a clone on each
               -- partition, which goes and comes back with it.
               AND k.conparentid = 0
             ORDER BY k.conrelid, k.conname",
            &[&from_oid, &to_oid],
        )
        .await?
    {
        let name: String = r.try_get(0)?;
        let on: String = r.try_get(1)?;
        let def: String = r.try_get(2)?;
        let outgoing: bool = r.try_get(3)?;
        let validated: bool = r.try_get(4)?;
        let comment: Option<String> = r.try_get(5)?;
        // A foreign key of the table swapped in that references the one
        // swapped out (an --alter's `REFERENCES` the table itself): after
        // the renames it references itself, under the table's name (its
        // definition names the table, which is then the new one).
        let from_swapped_in: bool = r.try_get(6)?;
        let target = if outgoing || from_swapped_in {
            table.to_string()
        } else {
            on.clone()
        };
        if outgoing {
            m.strip.push(format!(
                "ALTER TABLE {swapped_out} DROP CONSTRAINT {}",
                quote_ident(&name)
            ));
        } else {
            m.before.push(format!(
                "ALTER TABLE {on} DROP CONSTRAINT {}",
                quote_ident(&name)
            ));
        }
        let def = def.trim_end_matches(" NOT VALID");
        m.after.push(format!(
            "ALTER TABLE {target} ADD CONSTRAINT {} {def} NOT VALID",
            quote_ident(&name)
        ));
        if let Some(comment) = comment {
            m.after.push(format!(
                "COMMENT ON CONSTRAINT {} ON {target} IS {}",
                quote_ident(&name),
                quote_literal(&comment)
            ));
        }
        if validated {
            m.validate.push(format!(
                "ALTER TABLE {target} VALIDATE CONSTRAINT {}",
                quote_ident(&name)
            ));
        }
    }
    Ok(m)
}

/// What one swap does.
struct SwapPlan<'a> {
    /// The table now under the name (with the capture trigger).
    from: &'a QualifiedName,
    from_oid: u32,
    /// The table that takes the name.
    to: &'a QualifiedName,
    /// The name `from` gets.
    from_new_name: &'a str,
    log: &'a QualifiedName,
    function: &'a QualifiedName,
    key: &'a [KeyColumn],
    columns: &'a [String],
    /// Index name pairs whose names are exchanged.
    index_pairs: &'a [String],
    /// Keep logging changes of the swapped-in table (for --revert).
    capture_after: bool,
    /// The phase recorded with the swap.
    phase: &'a str,
    /// [`column_signature`] `from` must still have (see [`StateRow`]).
    columns_before: Option<&'a [String]>,
    /// Run right after the renames (see [`StateRow`]).
    deferred: &'a [String],
    /// What to do when `from` changed since `to` was made.
    changed_way_out: String,
}

/// Why a swap did not happen.
enum NoSwap {
    /// It failed and rolled back; the generic way out follows.
    Failed(String),
    /// `from` changed since `to` was made: the whole message.
    Changed(String),
    /// An index was created on `from` or dropped from it since `to`'s
    /// indexes were built: what changed.
    Indexes(String),
}

impl Rewrite<'_> {
    /// Step 4, one transaction, retried when its lock_timeout expires.
    /// `Ok(Some(what))` when nothing was swapped because an index was
    /// created on `from` or dropped from it since `to`'s indexes were
    /// built (only checked for the swap in, `p.phase == "swapped"`).
    async fn swap(
        &self,
        p: &SwapPlan<'_>,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<Option<String>, BackfillError> {
        on_event(&Event::Phase {
            table: self.table.shown(),
            phase: "swap".into(),
        });
        let table = &self.table;
        let state = &self.state;
        let what = self.what();
        let mut rebuilt_names = Vec::new();
        let mut lock_ms = 0;
        let mut body = async |c: &Client| -> Result<Result<(), NoSwap>, tokio_postgres::Error> {
            c.batch_execute(&format!("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", p.from))
                .await?;
            let locked = Instant::now();
            // Under the lock nothing changes `from` any more: a column or an
            // index added since `to` was made would be lost by the swap.
            let mut changed = Vec::new();
            if let Some(before) = p.columns_before
                && let Some(drift) = column_drift(before, &column_signature(c, p.from_oid).await?)
            {
                changed.push(format!("its columns changed ({drift})"));
            }
            let unpaired: Vec<String> = c
                .query(
                    "SELECT quote_ident(ic.relname) FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                     WHERE i.indrelid = $1 AND NOT (ic.relname = ANY ($2)) ORDER BY 1",
                    &[&p.from_oid, &p.index_pairs],
                )
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if !changed.is_empty() {
                c.batch_execute("ROLLBACK").await?;
                return Ok(Err(NoSwap::Changed(format!(
                    "{} after {} was made, which does not have that; nothing was swapped: {}",
                    changed.join(" and "),
                    p.to.shown(),
                    p.changed_way_out
                ))));
            }
            // An index created on `from` or dropped from it since `to`'s
            // indexes were built: built or dropped there first (outside
            // this lock), then the swap is tried again.
            if p.phase == "swapped" {
                let gone: Vec<String> = c
                    .query(
                        "SELECT quote_ident(x.name) FROM unnest($2::text[]) WITH ORDINALITY x(name, i)
                         WHERE x.i % 2 = 1 AND NOT EXISTS (
                           SELECT FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                           WHERE i.indrelid = $1 AND ic.relname = x.name)
                         ORDER BY x.i",
                        &[&p.from_oid, &p.index_pairs],
                    )
                    .await?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
                let mut what = Vec::new();
                if !unpaired.is_empty() {
                    what.push(format!("index {} was created on it", unpaired.join(", ")));
                }
                if !gone.is_empty() {
                    what.push(format!("index {} was dropped from it", gone.join(", ")));
                }
                if !what.is_empty() {
                    c.batch_execute("ROLLBACK").await?;
                    return Ok(Err(NoSwap::Indexes(what.join(" and "))));
                }
            }
            while replay_batch(c, p.from, p.to, p.log, p.key, p.columns, 10_000).await? > 0 {}
            let plan = match evolve_migrate::RebuildPlan::for_table_swap(
                c,
                &what,
                vec![p.from.to_string()],
                false,
            )
            .await
            {
                Ok(plan) => plan,
                Err(evolve_migrate::MigrateError::Pg(evolve_pg::PgError::Query(e))) => {
                    return Err(e);
                }
                Err(e) => {
                    c.batch_execute("ROLLBACK").await?;
                    return Ok(Err(NoSwap::Failed(e.to_string())));
                }
            };
            let own = format!(" on {}", p.from.shown());
            let dependents: Vec<&evolve_migrate::Captured> = plan
                .dependents
                .iter()
                .filter(|d| !d.name.ends_with(&own))
                .collect();
            let saved: String = c
                .query_one("SELECT current_setting('search_path')", &[])
                .await?
                .try_get(0)?;
            c.batch_execute("SELECT set_config('search_path', '', true)")
                .await?;
            let swapped_out = QualifiedName::new(&table.schema, p.from_new_name);
            let to_oid: u32 = c
                .query_one("SELECT to_regclass($1)::oid", &[&p.to.to_string()])
                .await?
                .try_get(0)?;
            let moved = capture_moved(c, p.from_oid, to_oid, table, &swapped_out).await?;
            for (d, sql) in plan.drops() {
                if dependents.iter().any(|x| std::ptr::eq(*x, d)) {
                    c.batch_execute(sql).await?;
                }
            }
            c.batch_execute(&format!(
                "DROP TRIGGER {trigger} ON {from}; DROP TRIGGER {trigger_t} ON {from}",
                trigger = quote_ident(TRIGGER),
                trigger_t = quote_ident(&format!("{TRIGGER}_truncate")),
                from = p.from
            ))
            .await?;
            for s in &moved.before {
                c.batch_execute(s).await?;
            }
            c.batch_execute(&format!(
                "ALTER TABLE {} RENAME TO {}; ALTER TABLE {} RENAME TO {}",
                p.from,
                quote_ident(p.from_new_name),
                p.to,
                quote_ident(&table.name)
            ))
            .await?;
            for (i, pair) in p.index_pairs.chunks(2).enumerate() {
                let [a, b] = pair else { continue };
                let tmp = format!("_evolve_rw_swap_{i}");
                let q = |n: &str| QualifiedName::new(&table.schema, n).to_string();
                c.batch_execute(&format!(
                    "ALTER INDEX {} RENAME TO {}; ALTER INDEX {} RENAME TO {}; ALTER INDEX {} RENAME TO {}",
                    q(a),
                    quote_ident(&tmp),
                    q(b),
                    quote_ident(a),
                    q(&tmp),
                    quote_ident(b)
                ))
                .await?;
            }
            for s in p.deferred.iter().chain(&moved.strip).chain(&moved.after) {
                c.batch_execute(s).await?;
            }
            for (d, sql) in plan.creates() {
                if !dependents.iter().any(|x| std::ptr::eq(*x, d)) {
                    continue;
                }
                if let Err(e) = c.batch_execute(sql).await {
                    if e.as_db_error().is_none() {
                        return Err(e);
                    }
                    c.batch_execute("ROLLBACK").await?;
                    return Ok(Err(NoSwap::Failed(format!(
                        "{} {} cannot be recreated on the new shape: {}",
                        d.kind.as_str(),
                        d.name,
                        evolve_pg::PgError::Query(e)
                    ))));
                }
            }
            if p.capture_after {
                c.batch_execute(&format!(
                    "CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table}
                       FOR EACH ROW EXECUTE FUNCTION {f}();
                     CREATE TRIGGER {trigger_t} BEFORE TRUNCATE ON {table}
                       FOR EACH STATEMENT EXECUTE FUNCTION {f}();
                     {always}",
                    always = enable_always(table),
                    trigger = quote_ident(TRIGGER),
                    trigger_t = quote_ident(&format!("{TRIGGER}_truncate")),
                    f = p.function
                ))
                .await?;
            }
            let refresh: Vec<String> = dependents
                .iter()
                .filter(|d| d.materialized && d.populated)
                .flat_map(|d| [d.refresh_sql(), d.analyze_sql()])
                .collect();
            let after: Vec<String> = moved
                .validate
                .iter()
                .cloned()
                .chain(refresh)
                .chain([format!("ANALYZE {table}")])
                .collect();
            c.query_one("SELECT set_config('search_path', $1, true)", &[&saved])
                .await?;
            // What a --revert must find unchanged on the table now swapped in.
            let signature = column_signature(c, to_oid).await?;
            c.execute(
                &format!(
                    "UPDATE {state} SET phase = $2, after_swap = $3, keep_old = $4, columns = $5,
                       deferred = '{{}}', updated_at = now()
                     WHERE table_name = $1"
                ),
                &[
                    &table.shown(),
                    &p.phase,
                    &after,
                    &p.capture_after,
                    &signature,
                ],
            )
            .await?;
            rebuilt_names = dependents.iter().map(|d| d.name.clone()).collect();
            lock_ms = locked.elapsed().as_millis() as u64;
            Ok(Ok(()))
        };
        let (result, attempts) = in_transaction(
            &self.client,
            &self.what(),
            table,
            &self.opts.batches,
            on_event,
            &mut body,
        )
        .await?;
        let abort = format!(
            "; the table is unchanged and its changes are still captured: fix that and run evolve rewrite again, or drop the shadow with: {}",
            abort_command(table)
        );
        match result {
            Ok(Ok(())) => {}
            Ok(Err(NoSwap::Failed(reason))) => {
                return Err(err(table, format!("the swap failed: {reason}{abort}")));
            }
            Ok(Err(NoSwap::Changed(reason))) => return Err(err(table, reason)),
            Ok(Err(NoSwap::Indexes(what))) => return Ok(Some(what)),
            Err(e) => {
                return Err(err(
                    table,
                    format!("the swap failed: {}{abort}", evolve_pg::PgError::Query(e)),
                ));
            }
        }
        on_event(&Event::Swapped {
            table: table.shown(),
            attempts,
            ms: lock_ms,
            rebuilt: rebuilt_names,
        });
        Ok(None)
    }

    /// Step 5: what the swap left for after its commit (validations,
    /// refreshes, ANALYZE), then the cleanup. Each is idempotent, so a
    /// failure is fixed and `finish` (the command that runs them again)
    /// goes on from there. They run with `row_security` on, as they would
    /// anywhere else: a materialized view's owner sees through its
    /// policies what it would see in a plain REFRESH.
    async fn after_swap(
        &self,
        drop: &[QualifiedName],
        finish: &str,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), BackfillError> {
        on_event(&Event::Phase {
            table: self.table.shown(),
            phase: "validate".into(),
        });
        let statements: Vec<String> = self
            .client
            .query_one(
                &format!(
                    "SELECT after_swap FROM {} WHERE table_name = $1",
                    self.state
                ),
                &[&self.table.shown()],
            )
            .await?
            .try_get(0)?;
        for s in &statements {
            let mut body = async |c: &Client| {
                c.batch_execute(&format!("SET LOCAL row_security = on; {s}"))
                    .await
            };
            let (result, _) = in_transaction(
                &self.client,
                &self.what(),
                &self.table,
                &self.opts.batches,
                on_event,
                &mut body,
            )
            .await?;
            result.map_err(|e| {
                err(
                    &self.table,
                    format!(
                        "the new table is in place, but after the swap {s} failed: {}\n  fix that, then finish with: {finish}",
                        evolve_pg::PgError::Query(e)
                    ),
                )
            })?;
        }
        on_event(&Event::Phase {
            table: self.table.shown(),
            phase: "cleanup".into(),
        });
        for d in drop {
            let sql = if d.name.ends_with("_capture") {
                format!("DROP FUNCTION IF EXISTS {d}()")
            } else {
                format!("DROP TABLE IF EXISTS {d}")
            };
            let mut body = async |c: &Client| c.batch_execute(&sql).await;
            let (result, _) = in_transaction(
                &self.client,
                &self.what(),
                &self.table,
                &self.opts.batches,
                on_event,
                &mut body,
            )
            .await?;
            result.map_err(|e| {
                err(
                    &self.table,
                    format!(
                        "the swap is done but {} cannot be dropped: {}; drop it by hand",
                        d.shown(),
                        evolve_pg::PgError::Query(e)
                    ),
                )
            })?;
        }
        Ok(())
    }
}

/// Connects, finds the table and takes the rewrite's lock. With
/// `missing_ok`, a table that no longer exists is named as typed (in the
/// first schema of the search_path when no schema is given), so that
/// `--abort` can still remove what a rewrite of it left.
async fn start(opts: &RewriteOptions, missing_ok: bool) -> Result<Rewrite<'_>, BackfillError> {
    let client = worker::connect(
        &opts.database_url,
        "evolve rewrite",
        Some(opts.batches.lock_timeout),
    )
    .await?;
    let state = ensure_state_table(&client).await?;
    let (schema, name) = QualifiedName::parse_user(&opts.table).map_err(BackfillError::Usage)?;
    let regclass = match &schema {
        Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&name)),
        None => quote_ident(&name),
    };
    let found: Option<(String, String)> = client
        .query_opt(
            "SELECT n.nspname::text, c.relname::text FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)",
            &[&regclass],
        )
        .await?
        .map(|r| Ok::<_, tokio_postgres::Error>((r.try_get(0)?, r.try_get(1)?)))
        .transpose()?;
    let table = match (found, missing_ok) {
        (Some((schema, name)), _) => QualifiedName::new(schema, name),
        (None, true) => {
            let current: Option<String> = client
                .query_one("SELECT current_schema()::text", &[])
                .await?
                .try_get(0)?;
            QualifiedName::new(schema.or(current).unwrap_or_default(), name)
        }
        (None, false) => {
            return Err(BackfillError::Usage(format!(
                "table {:?} does not exist; name it as table or schema.table (the search_path applies)",
                opts.table
            )));
        }
    };
    let key = worker::lock_key("rewrite", &table.shown());
    if let Err(holder) = worker::lock(&client, key).await? {
        return Err(err(
            &table,
            format!("another rewrite of it is running ({holder}); wait for it to finish"),
        ));
    }
    Ok(Rewrite {
        client,
        state,
        table,
        opts,
    })
}

/// Runs (or continues) a rewrite to the end.
pub async fn run(
    opts: &RewriteOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(), BackfillError> {
    check_alters(&opts.alters).map_err(BackfillError::Usage)?;
    let rw = start(opts, false).await?;
    let mut row = rw.state_row().await?;
    if let Some(r) = &row {
        let n = names(&rw.table.schema, r.oid);
        let swapped = r.phase != "copy" && r.phase != "replay";
        match r.phase.as_str() {
            "done" if r.keep_old && rw.oid_of(&n.old).await?.is_some() => {
                return Err(err(
                    &rw.table,
                    format!(
                        "the previous rewrite kept the old table {}; keep the new table for good with: evolve rewrite --drop-old {table}, or swap back with: evolve rewrite --revert {table}",
                        n.old.shown(),
                        table = shell_word(&rw.table.shown())
                    ),
                ));
            }
            "done" => {
                rw.client
                    .execute(
                        &format!("DELETE FROM {} WHERE table_name = $1", rw.state),
                        &[&rw.table.shown()],
                    )
                    .await?;
                row = None;
            }
            "reverted" => {
                return Err(err(
                    &rw.table,
                    format!(
                        "it was swapped back by --revert, which has not finished; finish it with: evolve rewrite --revert {}",
                        shell_word(&rw.table.shown())
                    ),
                ));
            }
            _ if r.alters != opts.alters => {
                let finish = finish_command(&rw.table, &r.alters);
                return Err(err(
                    &rw.table,
                    if swapped {
                        format!(
                            "a rewrite with other --alter ({}) has swapped already; finish it with: {finish}",
                            r.alters.join("; ")
                        )
                    } else {
                        format!(
                            "a rewrite with other --alter ({}) is under way; finish it with: {finish}, or give it up with: {}",
                            r.alters.join("; "),
                            abort_command(&rw.table)
                        )
                    },
                ));
            }
            _ => {}
        }
    }
    let table = worker::resolve_table(&rw.client, &rw.table.to_string()).await?;
    let before_swap = row
        .as_ref()
        .is_none_or(|r| r.phase == "copy" || r.phase == "replay");
    if before_swap {
        refuse_structure(&rw.client, table.oid, &rw.table).await?;
        worker::refuse_row_security(&rw.client, table.oid, &rw.table, &rw.what()).await?;
        worker::check_limits(&rw.client, &opts.batches, &rw.what()).await?;
    }
    let row = match row {
        Some(r) => r,
        None => {
            rw.setup(&table, on_event).await?;
            rw.state_row()
                .await?
                .ok_or_else(|| err(&rw.table, "its state row vanished during setup"))?
        }
    };
    let n = names(&rw.table.schema, row.oid);
    let changed_way_out = format!(
        "give the rewrite up with: {}, then run it again",
        abort_command(&rw.table)
    );
    // A column added (or dropped, retyped) since the shadow was made, e.g.
    // between a killed run and this one: the copy would go on without it.
    if before_swap
        && let Some(before) = &row.columns
        && let Some(drift) = column_drift(before, &column_signature(&rw.client, table.oid).await?)
    {
        return Err(err(
            &rw.table,
            format!(
                "its columns changed ({drift}) after {} was made, which does not have that; nothing was swapped: {changed_way_out}",
                n.shadow.shown()
            ),
        ));
    }
    if before_swap {
        rw.current_capture(&table, &n, on_event).await?;
    }
    if row.phase == "copy" {
        rw.copy(&table, &row, on_event).await?;
    }
    let row = rw
        .state_row()
        .await?
        .ok_or_else(|| err(&rw.table, "its state row vanished"))?;
    if row.phase == "replay" {
        let shadow_oid = rw.oid_of(&n.shadow).await?.ok_or_else(|| {
            err(
                &rw.table,
                format!(
                    "its shadow table {} is missing; give the rewrite up with: {}, then run it again",
                    n.shadow.shown(),
                    abort_command(&rw.table)
                ),
            )
        })?;
        let columns = rw.copy_columns(table.oid, shadow_oid).await?;
        rw.replay(
            &table.name,
            &n.shadow,
            &n.log,
            &table.key,
            &columns,
            on_event,
        )
        .await?;
        // Indexes created on the table or dropped from it while the
        // rewrite ran (or between runs) are built on the shadow or dropped
        // from it before the swap, and again if one changes before the
        // swap's lock is taken.
        let mut tries = 0;
        loop {
            rw.build_indexes(&table, &n, shadow_oid, on_event).await?;
            let row = rw
                .state_row()
                .await?
                .ok_or_else(|| err(&rw.table, "its state row vanished"))?;
            let changed = rw
                .swap(
                    &SwapPlan {
                        from: &table.name,
                        from_oid: table.oid,
                        to: &n.shadow,
                        from_new_name: &n.old.name,
                        log: &n.log,
                        function: &n.function,
                        key: &table.key,
                        columns: &columns,
                        index_pairs: &row.index_pairs,
                        capture_after: opts.keep_old,
                        phase: "swapped",
                        columns_before: row.columns.as_deref(),
                        deferred: &row.deferred,
                        changed_way_out: changed_way_out.clone(),
                    },
                    on_event,
                )
                .await?;
            let Some(what) = changed else { break };
            tries += 1;
            if tries == INDEX_CHANGE_TRIES {
                return Err(err(
                    &rw.table,
                    format!(
                        "{what} each time its indexes were brought to {} ({tries} times); nothing was swapped: run evolve rewrite again once its indexes stop changing",
                        n.shadow.shown()
                    ),
                ));
            }
        }
    }
    let row = rw
        .state_row()
        .await?
        .ok_or_else(|| err(&rw.table, "its state row vanished"))?;
    if row.phase == "swapped" {
        let drop = if row.keep_old {
            Vec::new()
        } else {
            vec![n.old.clone(), n.log.clone(), n.function.clone()]
        };
        rw.after_swap(&drop, &finish_command(&rw.table, &row.alters), on_event)
            .await?;
        rw.set_phase("done").await?;
    }
    on_event(&Event::Phase {
        table: rw.table.shown(),
        phase: "done".into(),
    });
    Ok(())
}

/// Swaps back to the old table a `--keep-old` rewrite kept, after
/// replaying into it every change made since the swap.
pub async fn revert(
    opts: &RewriteOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(), BackfillError> {
    let rw = start(opts, false).await?;
    let Some(row) = rw.state_row().await? else {
        return Err(err(
            &rw.table,
            "no rewrite of it is recorded in evolve_rewrites, so there is nothing to revert",
        ));
    };
    let n = names(&rw.table.schema, row.oid);
    let finish = format!("evolve rewrite --revert {}", shell_word(&rw.table.shown()));
    if row.phase == "reverted" {
        rw.after_swap(
            &[n.shadow.clone(), n.log.clone(), n.function.clone()],
            &finish,
            on_event,
        )
        .await?;
        rw.client
            .execute(
                &format!("DELETE FROM {} WHERE table_name = $1", rw.state),
                &[&rw.table.shown()],
            )
            .await?;
        return Ok(());
    }
    let old_oid = rw.oid_of(&n.old).await?;
    let (true, "done", Some(old_oid)) = (row.keep_old, row.phase.as_str(), old_oid) else {
        return Err(err(
            &rw.table,
            format!(
                "only a finished rewrite run with --keep-old can be reverted (this one is in phase {}{})",
                row.phase,
                if row.keep_old {
                    ""
                } else {
                    ", without --keep-old"
                }
            ),
        ));
    };
    let current = worker::resolve_table(&rw.client, &rw.table.to_string()).await?;
    refuse_structure(&rw.client, current.oid, &rw.table).await?;
    worker::refuse_row_security(&rw.client, current.oid, &rw.table, &rw.what()).await?;
    worker::check_limits(&rw.client, &opts.batches, &rw.what()).await?;
    rw.current_capture(&current, &n, on_event).await?;
    let columns = rw.copy_columns(current.oid, old_oid).await?;
    rw.replay(
        &current.name,
        &n.old,
        &n.log,
        &current.key,
        &columns,
        on_event,
    )
    .await?;
    let changed = rw
        .swap(
        &SwapPlan {
            from: &current.name,
            from_oid: current.oid,
            to: &n.old,
            from_new_name: &n.shadow.name,
            log: &n.log,
            function: &n.function,
            key: &current.key,
            columns: &columns,
            index_pairs: &row.index_pairs,
            capture_after: false,
            phase: "reverted",
            columns_before: row.columns.as_deref(),
            deferred: &[],
            changed_way_out: format!(
                "undo that change and run --revert again, or keep the new table for good with: evolve rewrite --drop-old {}",
                shell_word(&rw.table.shown())
            ),
        },
        on_event,
    )
    .await?;
    if let Some(what) = changed {
        return Err(err(&rw.table, format!("{what}; nothing was swapped back")));
    }
    rw.after_swap(
        &[n.shadow.clone(), n.log.clone(), n.function.clone()],
        &finish,
        on_event,
    )
    .await?;
    rw.client
        .execute(
            &format!("DELETE FROM {} WHERE table_name = $1", rw.state),
            &[&rw.table.shown()],
        )
        .await?;
    on_event(&Event::Phase {
        table: rw.table.shown(),
        phase: "done".into(),
    });
    Ok(())
}

/// Keeps the new table of a finished `--keep-old` rewrite for good: the
/// capture of its changes (the function, and with `CASCADE` its
/// triggers), the old table, the log and the state row are dropped in one
/// transaction.
pub async fn drop_old(
    opts: &RewriteOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(), BackfillError> {
    let rw = start(opts, true).await?;
    let Some(row) = rw.state_row().await? else {
        return Err(err(
            &rw.table,
            "no rewrite of it is recorded in evolve_rewrites, so there is no old table to drop",
        ));
    };
    let table = shell_word(&rw.table.shown());
    let refused = match (row.phase.as_str(), row.keep_old) {
        ("done", true) => None,
        ("done", false) => Some(
            "its rewrite ran without --keep-old, so its old table was dropped after the swap"
                .to_string(),
        ),
        ("reverted", _) => Some(format!(
            "it was swapped back by --revert, so the old table is the table now; finish that with: evolve rewrite --revert {table}"
        )),
        ("copy" | "replay", _) => Some(format!(
            "its rewrite has not swapped yet (phase {}), so there is no old table; finish it with: {}, or give it up with: {}",
            row.phase,
            finish_command(&rw.table, &row.alters),
            abort_command(&rw.table)
        )),
        (phase, _) => Some(format!(
            "its rewrite has swapped but not finished (phase {phase}); finish it first with: {}",
            finish_command(&rw.table, &row.alters)
        )),
    };
    if let Some(reason) = refused {
        return Err(err(&rw.table, reason));
    }
    let n = names(&rw.table.schema, row.oid);
    let result = rw
        .drop_with_state(
            &format!(
                "DROP FUNCTION IF EXISTS {function}() CASCADE;
                 DROP TABLE IF EXISTS {old}; DROP TABLE IF EXISTS {log}",
                function = n.function,
                old = n.old,
                log = n.log,
            ),
            on_event,
        )
        .await?;
    result.map_err(|e| {
        err(
            &rw.table,
            format!(
                "its old table {} could not be dropped: {}; nothing was dropped",
                n.old.shown(),
                evolve_pg::PgError::Query(e)
            ),
        )
    })?;
    on_event(&Event::Phase {
        table: rw.table.shown(),
        phase: "old table dropped".into(),
    });
    Ok(())
}

/// Gives up a rewrite that has not swapped yet: the capture triggers,
/// the shadow, the log and the state row are dropped in one transaction.
/// Nothing about the table is checked first (its columns, its row
/// security, whether it still exists): giving up must always be possible
/// before the swap. The capture function goes with `CASCADE`, which takes
/// its triggers wherever they are (on the table renamed meanwhile too).
pub async fn abort(
    opts: &RewriteOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(), BackfillError> {
    let rw = start(opts, true).await?;
    let Some(row) = rw.state_row().await? else {
        return Err(err(
            &rw.table,
            "no rewrite of it is recorded in evolve_rewrites, so there is nothing to abort",
        ));
    };
    if row.phase != "copy" && row.phase != "replay" {
        let table = shell_word(&rw.table.shown());
        let reason = match row.phase.as_str() {
            "done" if row.keep_old => format!(
                "its rewrite is done and kept the old table, so there is nothing to abort; swap back with: evolve rewrite --revert {table}, or keep the new table for good with: evolve rewrite --drop-old {table}"
            ),
            "done" => "its rewrite is done, so there is nothing to abort".to_string(),
            "reverted" => format!(
                "it was swapped back by --revert, so there is nothing to abort; finish that with: evolve rewrite --revert {table}"
            ),
            phase => format!(
                "its rewrite has swapped already (phase {phase}), so there is no shadow table to drop; finish it with: {}",
                finish_command(&rw.table, &row.alters)
            ),
        };
        return Err(err(&rw.table, reason));
    }
    let n = names(&rw.table.schema, row.oid);
    rw.drop_with_state(
        &format!(
            "DROP TRIGGER IF EXISTS {trigger} ON {table};
             DROP TRIGGER IF EXISTS {trigger_t} ON {table};
             DROP TABLE IF EXISTS {shadow}; DROP TABLE IF EXISTS {log};
             DROP FUNCTION IF EXISTS {function}() CASCADE",
            trigger = quote_ident(TRIGGER),
            trigger_t = quote_ident(&format!("{TRIGGER}_truncate")),
            table = rw.table,
            shadow = n.shadow,
            log = n.log,
            function = n.function,
        ),
        on_event,
    )
    .await??;
    on_event(&Event::Phase {
        table: rw.table.shown(),
        phase: "aborted".into(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{QualifiedName, check_alters, column_drift, finish_command};

    #[test]
    fn column_changes_are_named() {
        let sig = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let was = sig(&["id", "#1 int", "v", "#2 int", "w", "#3 text"]);
        assert_eq!(column_drift(&was, &was), None);
        let now = sig(&["id", "#1 int", "v", "#2 bigint", "extra", "#4 text"]);
        assert_eq!(
            column_drift(&was, &now).as_deref(),
            Some("added extra; dropped w; changed v")
        );
        assert_eq!(
            finish_command(
                &QualifiedName::new("public", "child"),
                &["ALTER COLUMN id TYPE bigint".to_string()]
            ),
            "evolve rewrite public.child --alter 'ALTER COLUMN id TYPE bigint'"
        );
    }

    #[test]
    fn alters_that_a_rewrite_cannot_express_are_refused() {
        let ok = |a: &str| check_alters(&[a.to_string()]);
        assert!(ok("ALTER COLUMN id TYPE bigint").is_ok());
        assert!(ok("ADD COLUMN note text DEFAULT 'x'").is_ok());
        assert!(ok("RENAME COLUMN a TO b").unwrap_err().contains("RENAME"));
        assert!(ok("rename to t2").is_err());
        assert!(ok("SET SCHEMA other").unwrap_err().contains("SET SCHEMA"));
        assert!(ok("OWNER TO bob").is_err());
        assert!(ok("ALTER COLUMN id TYPE bigint; DROP TABLE t").is_err());
        assert!(ok("ALTER COLUMN a TYPE int USING (a").is_err());
        // USING would be dropped: the copy casts the rows itself.
        for using in [
            "ALTER COLUMN v TYPE bigint USING (v * 10)",
            "alter v set data type int using(v/0)",
            "ALTER COLUMN v TYPE bigint\nUSING v::bigint",
        ] {
            assert!(ok(using).unwrap_err().contains("USING"), "{using}");
        }
        for fine in [
            "ALTER COLUMN \"using\" TYPE bigint",
            "ALTER COLUMN using_count TYPE bigint",
            "ADD CONSTRAINT no_overlap EXCLUDE USING gist (r WITH &&)",
        ] {
            assert!(ok(fine).is_ok(), "{fine}");
        }
        assert!(check_alters(&[]).is_err());
    }
}
