//! The PostgreSQL sink: a table `(key jsonb PRIMARY KEY, data jsonb NOT
//! NULL)` kept equal to an interface, and `evolve_sink_progress(sink text
//! PRIMARY KEY, lsn pg_lsn NOT NULL)` beside it.
//!
//! A write inserts the documents of keys new to the interface and updates
//! the others ([`Written::Exact`]); a table changed by hand, out of step
//! with the interface, makes that fail, and the write is done again with
//! upserts, which are right whatever the table holds.
//!
//! A target table the sink creates has `fillfactor` [`FILLFACTOR`]: every
//! update of a document leaves the key as it was, so with room on its
//! page PostgreSQL writes it as a heap-only tuple, without a new entry in
//! the `jsonb` key's index (whose comparisons are the costly part of the
//! sink's writes). A table the user made is used as it is.
//!
//! It holds the [`Sink`] contract with PostgreSQL transactions: the
//! initial load, and each write of consecutive upstream transactions, is
//! one sink transaction that also upserts the sink's row of the progress
//! table, so the position and what it covers commit together; the
//! position is read back from that row.
//!
//! The initial load streams the documents with `COPY ... FROM STDIN
//! (FORMAT binary)`, chunk by chunk as the store's reader hands them
//! over: straight into the target table when it has no rows, otherwise
//! into a temporary table that one `INSERT ... SELECT ... ON CONFLICT`
//! then upserts into the target. A load beside the table's copy then
//! applies its catch-up changes as upserts (the table may have held
//! rows), in the same transaction. Either way, readers of the target see
//! its rows as they were until the load commits, then all of them.
//!
//! A target table that is missing when the sink connects (dropped by
//! hand) is created again, and the sink's progress record deleted in the
//! same transaction: the sink loads it anew. Each session checks that its
//! role holds `SELECT`, `INSERT`, `UPDATE` and `DELETE` on both tables
//! and refuses, naming the `GRANT`, when it does not; `CREATE` on the
//! schema is needed only to create a table that is missing.

use std::collections::HashSet;
use std::pin::pin;

use crate::position::Position;
use bytes::{BufMut, Bytes, BytesMut};
use evolve_pg::quote_ident;
use futures_util::SinkExt;
use tokio_postgres::Client;

use super::{Documents, Sink};
use crate::config::Connection;
use crate::error::{PipelineError, Result};
use crate::store::{FeedEntry, SinkInfo};

/// The progress table's name (in the target table's schema).
pub const PROGRESS_TABLE: &str = "evolve_sink_progress";

/// The `fillfactor` of a target table the sink creates. 500,000 documents
/// upserted into an empty table, then updated twice, in random order in
/// transactions of 1,000 (PostgreSQL 15, 2 vCPU): 37.2 s at 100 (1% of
/// the updates heap-only), 30.0 s at 90, 26.4 s at 80 (39%), 27.4 s at 70;
/// the table is 22% larger once loaded (188 MB against 154 MB) and no
/// larger after the updates (401 MB against 421 MB).
pub const FILLFACTOR: u32 = 80;

/// The temporary table an initial load into a table with rows goes
/// through (dropped at commit).
const LOAD_TABLE: &str = "evolve_sink_load";

/// The header of `COPY ... (FORMAT binary)` data: signature, flags, no
/// header extension.
const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// `jsonb`'s binary format version.
const JSONB_VERSION: u8 = 1;

/// Quoted `schema.table` of the sink's target and progress tables.
pub(crate) struct Targets {
    pub table: String,
    pub progress: String,
}

impl Targets {
    pub fn new(schema: &str, table: &str) -> Targets {
        Targets {
            table: format!("{}.{}", quote_ident(schema), quote_ident(table)),
            progress: format!("{}.{}", quote_ident(schema), quote_ident(PROGRESS_TABLE)),
        }
    }
}

/// Creates the target and progress tables if missing; refuses a target of
/// another shape. A target table created here is empty, so sink `sink`'s
/// progress record, if it has one, describes rows that are gone (the
/// table was dropped by hand): it is deleted in the same transaction, and
/// the sink loads the table anew rather than following on from it.
pub(crate) async fn ensure_tables(
    client: &Client,
    schema: &str,
    table: &str,
    sink: &str,
) -> Result<()> {
    let targets = Targets::new(schema, table);
    let plain = format!("{schema}.{table}");
    let columns = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[&targets.table],
        )
        .await
        .map_err(|e| PipelineError::database(format!("read the shape of {plain}"), &e))?;
    if columns.is_empty() {
        // One transaction: a crash between the two never leaves a new,
        // empty table beside the old record.
        let created = async {
            client.batch_execute("BEGIN").await?;
            client
                .batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {} (key jsonb PRIMARY KEY, data jsonb NOT NULL) \
                     WITH (fillfactor = {FILLFACTOR}); \
                     CREATE TABLE IF NOT EXISTS {} (sink text PRIMARY KEY, lsn pg_lsn NOT NULL)",
                    targets.table, targets.progress
                ))
                .await?;
            let forgotten = client
                .execute(
                    &format!("DELETE FROM {} WHERE sink = $1", targets.progress),
                    &[&sink],
                )
                .await?;
            client.batch_execute("COMMIT").await?;
            Ok::<_, tokio_postgres::Error>(forgotten)
        };
        match created.await {
            Ok(0) => {}
            Ok(_) => tracing::warn!(
                sink,
                table = %plain,
                "the sink's table was missing (dropped by hand?) while its progress record was there; created it again, and the sink loads it anew"
            ),
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(PipelineError::database(
                    format!("create sink table {plain}"),
                    &e,
                ));
            }
        }
    } else {
        let found: Vec<(String, String, bool)> = columns
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let expected = [
            ("key".to_string(), "jsonb".to_string(), true),
            ("data".to_string(), "jsonb".to_string(), true),
        ];
        if found != expected {
            let describe = |cols: &[(String, String, bool)]| {
                cols.iter()
                    .map(|(n, t, nn)| format!("{n} {t}{}", if *nn { " NOT NULL" } else { "" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(PipelineError::SinkShape {
                table: plain,
                problem: format!(
                    "It has columns ({}); a sink needs (key jsonb PRIMARY KEY, data jsonb NOT NULL).",
                    describe(&found)
                ),
            });
        }
        let pk: Vec<String> = client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
                &[&targets.table],
            )
            .await
            .map_err(|e| PipelineError::database(format!("read the key of {plain}"), &e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if pk != ["key"] {
            return Err(PipelineError::SinkShape {
                table: plain,
                problem: "Its primary key is not (key).".into(),
            });
        }
    }
    // Created only when missing: `CREATE TABLE IF NOT EXISTS` needs CREATE
    // on the schema even when the table is there, which a role given only
    // the sink's tables does not have.
    let progress_exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&targets.progress])
        .await
        .map_err(|e| PipelineError::database("look for the sink progress table", &e))?
        .get(0);
    if !progress_exists {
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} (sink text PRIMARY KEY, lsn pg_lsn NOT NULL)",
                targets.progress
            ))
            .await
            .map_err(|e| PipelineError::database("create the sink progress table", &e))?;
    }
    for (table, shown) in [
        (&targets.table, plain.clone()),
        (&targets.progress, format!("{schema}.{PROGRESS_TABLE}")),
    ] {
        check_privileges(client, table, &shown).await?;
    }
    // Both are written with the sink connection's privileges: refused when
    // their owner could run code with them (triggers, rules, defaults).
    for (table, shown) in [
        (&targets.table, plain),
        (&targets.progress, format!("{schema}.{PROGRESS_TABLE}")),
    ] {
        evolve_pg::check_state_table(client, table)
            .await
            .map_err(|e| match e {
                evolve_pg::OwnerError::Database(e) => {
                    PipelineError::database(format!("check the owner of {shown}"), &e)
                }
                evolve_pg::OwnerError::Refused(reason) => PipelineError::Refused {
                    sqlstate: "42501",
                    primary: format!("sink table \"{shown}\" cannot be written: {reason}"),
                    detail: None,
                    hint: None,
                },
            })?;
    }
    Ok(())
}

/// The privileges a sink's session uses on each of its tables.
const PRIVILEGES: [&str; 4] = ["SELECT", "INSERT", "UPDATE", "DELETE"];

/// Refuses sink table `table` (quoted; `shown` in messages) when the
/// session's role lacks one of [`PRIVILEGES`] on it, naming the `GRANT`
/// that gives them: otherwise the first write that needs the missing one
/// (an update, a delete) would fail, and fail again at every retry.
/// (`has_table_privilege` with a list is true when *any* of them is held,
/// so each is asked for alone.)
async fn check_privileges(client: &Client, table: &str, shown: &str) -> Result<()> {
    let row = client
        .query_one(
            "SELECT current_user::text, \
                    array(SELECT p FROM unnest($2::text[]) AS p \
                          WHERE NOT has_table_privilege(to_regclass($1), p))",
            &[&table, &PRIVILEGES.as_slice()],
        )
        .await
        .map_err(|e| PipelineError::database(format!("read the privileges on {shown}"), &e))?;
    let (role, missing): (String, Vec<String>) = (row.get(0), row.get(1));
    if missing.is_empty() {
        return Ok(());
    }
    Err(PipelineError::Refused {
        sqlstate: "42501",
        primary: format!(
            "role \"{role}\" may not {} sink table \"{shown}\"",
            missing.join(", ")
        ),
        detail: Some(format!(
            "A sink's session needs {} on its table and on {PROGRESS_TABLE}.",
            PRIVILEGES.join(", ")
        )),
        hint: Some(format!(
            "GRANT {} ON {table} TO {};",
            PRIVILEGES.join(", "),
            quote_ident(&role)
        )),
    })
}

/// `CREATE SINK`'s check of its target (once [`ensure_tables`] made or
/// checked it), for sink `sink`, new to the pipeline: the table must be
/// empty, and no progress record of that name may be there. Such a record
/// was left by an earlier sink of the name (a `DROP SINK` that could not
/// reach the database, a pipeline whose state was lost); the new sink
/// would follow on from it, through a change feed that does not hold
/// what changed since, leaving rows out of date for good.
pub(crate) async fn check_new_target(
    client: &Client,
    schema: &str,
    table: &str,
    sink: &str,
) -> Result<()> {
    let targets = Targets::new(schema, table);
    let plain = format!("{schema}.{table}");
    if let Some(left) = progress(client, &targets, sink).await? {
        return Err(PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "sink table \"{plain}\" has a progress record of sink \"{sink}\" (at {left}) that this pipeline did not write"
            ),
            detail: Some(
                "It was left by an earlier sink of that name (a DROP SINK that could not reach the database, or a pipeline whose state was lost); what changed since it is not in the change feed, so the new sink cannot follow on from it.".into(),
            ),
            hint: Some(format!(
                "Drop the table and CREATE SINK again (the sink creates it and loads it), or empty it and run DELETE FROM {} WHERE sink = {}.",
                targets.progress,
                evolve_pg::quote_literal(sink)
            )),
        });
    }
    let rows: bool = client
        .query_one(
            &format!("SELECT EXISTS (SELECT 1 FROM {})", targets.table),
            &[],
        )
        .await
        .map_err(|e| PipelineError::database("read the sink table", &e))?
        .get(0);
    if rows {
        return Err(PipelineError::SinkShape {
            table: plain,
            problem: format!(
                "It has rows, and no progress record of sink \"{sink}\" says what they are."
            ),
        });
    }
    Ok(())
}

/// The sink's recorded position, if it has one.
async fn progress(client: &Client, targets: &Targets, sink: &str) -> Result<Option<Position>> {
    let row = client
        .query_opt(
            &format!("SELECT lsn::text FROM {} WHERE sink = $1", targets.progress),
            &[&sink],
        )
        .await
        .map_err(|e| PipelineError::database("read the sink's progress", &e))?;
    Ok(row.and_then(|r| r.get::<_, String>(0).parse().ok()))
}

/// A connected PostgreSQL sink, its statements prepared.
pub(crate) struct PostgresSink {
    name: String,
    client: Client,
    targets: Targets,
    statements: Statements,
    /// Rows this sink added to its table since it connected.
    inserted: u64,
    /// `inserted` at which the statements are prepared again.
    replan_at: u64,
}

/// Rows added to the sink's table after which its statements are first
/// prepared again; each time after that, once the rows added have doubled.
/// PostgreSQL plans a prepared statement for its parameters five times,
/// then keeps one generic plan while the table's statistics stand. Made
/// while the table was small (before autovacuum's next `ANALYZE`), the
/// update's generic plan is a hash join over a sequential scan of the
/// table, and it stays one as the table grows: 300,000 rows later, an
/// update of 10 keys took 76 ms instead of well under one. Prepared again,
/// the statements are planned for the table as it now is (the planner
/// reads its current size), in a number of rounds that grows with the
/// logarithm of the rows.
const REPLAN_FIRST_ROWS: u64 = 1_000;

struct Statements {
    upsert: tokio_postgres::Statement,
    /// A plain insert: fails (`unique_violation`) on a key the table holds.
    insert: tokio_postgres::Statement,
    /// An update that fails (`division_by_zero`) unless it found every
    /// key: see [`Written::Exact`].
    update: tokio_postgres::Statement,
    delete: tokio_postgres::Statement,
    progress: tokio_postgres::Statement,
}

/// How a write applies documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    /// An insert where the interface had no document (the feed entry's
    /// `old` is `None`), an update where it had one. In PostgreSQL alone,
    /// 300,000 new `jsonb` keys take 3.6–4.0 s as an `INSERT` against
    /// 6.1–6.3 s as an upsert (which descends the key's index twice), and
    /// updates 4.85 s against 6.2–6.4 s (BENCHMARKS.md). It holds while
    /// the table is in step with the interface; a table someone changed
    /// by hand makes the statement fail, and the transaction is written
    /// again with [`Written::Upserted`].
    Exact,
    /// An upsert for every document: right whatever the table holds.
    Upserted,
}

impl Statements {
    /// Prepares the statements on `client` for `targets`.
    async fn prepare(client: &Client, targets: &Targets) -> Result<Statements> {
        let prepare = |sql: String| async move {
            client
                .prepare(&sql)
                .await
                .map_err(|e| PipelineError::database("prepare sink statements", &e))
        };
        let documents = "SELECT k::jsonb, d::jsonb FROM unnest($1::text[], $2::text[]) AS u(k, d)";
        let (upsert, insert, update, delete, progress) = futures_util::try_join!(
            prepare(format!(
                "INSERT INTO {} (key, data) {documents} ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
                targets.table
            )),
            prepare(format!(
                "INSERT INTO {} (key, data) {documents}",
                targets.table
            )),
            prepare(format!(
                "WITH u AS (UPDATE {} AS t SET data = v.d::jsonb FROM unnest($1::text[], $2::text[]) AS v(k, d) \
                 WHERE t.key = v.k::jsonb RETURNING 1) \
                 SELECT 1 / (count(*) = cardinality($1::text[]))::int FROM u",
                targets.table
            )),
            // `= ANY` of an array is an index condition whatever the
            // table's statistics say; `IN (SELECT ... FROM unnest(...))`
            // was planned as a join, and over a table whose statistics
            // said it was empty (an initial load cut short, then
            // analyzed) as a nested loop testing every row against every
            // key: minutes for a few thousand deletes.
            prepare(format!(
                "DELETE FROM {} WHERE key = ANY ($1::text[]::jsonb[])",
                targets.table
            )),
            prepare(format!(
                "INSERT INTO {} (sink, lsn) VALUES ($1, $2::text::pg_lsn) \
                 ON CONFLICT (sink) DO UPDATE SET lsn = EXCLUDED.lsn",
                targets.progress
            )),
        )?;
        Ok(Statements {
            upsert,
            insert,
            update,
            delete,
            progress,
        })
    }
}

impl PostgresSink {
    /// Connects, creates the target and progress tables when missing (or
    /// refuses a target of another shape) and prepares the statements.
    pub(crate) async fn open(sink: &SinkInfo, connection: &Connection) -> Result<PostgresSink> {
        let client = evolve_pg::connect(connection.url(), "evolve-pipeline-sink")
            .await
            .map_err(|e| {
                crate::upstream::connect_error(&sink.connection, connection, &e.to_string())
            })?;
        ensure_tables(&client, &sink.target_schema, &sink.target_table, &sink.name).await?;
        let targets = Targets::new(&sink.target_schema, &sink.target_table);
        let statements = Statements::prepare(&client, &targets).await?;
        Ok(PostgresSink {
            name: sink.name.clone(),
            client,
            targets,
            statements,
            inserted: 0,
            replan_at: REPLAN_FIRST_ROWS,
        })
    }

    /// Counts `rows` the sink added to its table, and prepares the
    /// statements again once the table may have outgrown their plans: see
    /// [`REPLAN_FIRST_ROWS`].
    async fn grown(&mut self, rows: u64) -> Result<()> {
        self.inserted += rows;
        if self.inserted >= self.replan_at {
            self.statements = Statements::prepare(&self.client, &self.targets).await?;
            self.replan_at = self.inserted.saturating_mul(2);
        }
        Ok(())
    }
}

impl Sink for PostgresSink {
    const LOADS_BESIDE_SNAPSHOT: bool = true;

    async fn position(&mut self) -> Result<Option<Position>> {
        progress(&self.client, &self.targets, &self.name).await
    }

    /// One transaction: every document (`COPY`), then the position.
    async fn load(&mut self, docs: &mut Documents) -> Result<u64> {
        let fail = |what: &str| {
            let what = format!("{what} of sink \"{}\"", self.name);
            move |e: tokio_postgres::Error| PipelineError::database(what, &e)
        };
        let tx = self
            .client
            .transaction()
            .await
            .map_err(fail("begin the initial load"))?;
        let empty: bool = tx
            .query_one(
                &format!("SELECT NOT EXISTS (SELECT FROM {})", self.targets.table),
                &[],
            )
            .await
            .map_err(fail("look for rows before the initial load"))?
            .get(0);
        let into = if empty {
            self.targets.table.clone()
        } else {
            let staging = format!("pg_temp.{}", quote_ident(LOAD_TABLE));
            tx.batch_execute(&format!(
                "CREATE TEMPORARY TABLE {} (key jsonb NOT NULL, data jsonb NOT NULL) ON COMMIT DROP",
                quote_ident(LOAD_TABLE)
            ))
            .await
            .map_err(fail("create the initial load's temporary table"))?;
            staging
        };
        let copy = tx
            .copy_in::<_, Bytes>(&format!(
                "COPY {into} (key, data) FROM STDIN (FORMAT binary)"
            ))
            .await
            .map_err(fail("start the initial load"))?;
        let mut copy = pin!(copy);
        let mut buf = BytesMut::with_capacity(super::LOAD_CHUNK_BYTES + 4_096);
        buf.put_slice(COPY_HEADER);
        // Dropped before its end, the COPY is aborted and the transaction
        // rolled back: nothing of a failed load is ever committed.
        while let Some(chunk) = docs.next().await? {
            for (key, doc) in &chunk {
                buf.put_i16(2);
                put_jsonb(&mut buf, key)?;
                put_jsonb(&mut buf, doc)?;
            }
            copy.send(buf.split().freeze())
                .await
                .map_err(fail("write the initial load"))?;
        }
        buf.put_i16(-1);
        copy.send(buf.split().freeze())
            .await
            .map_err(fail("write the initial load"))?;
        let copied = copy
            .as_mut()
            .finish()
            .await
            .map_err(fail("write the initial load"))?;
        let written = if empty {
            copied
        } else {
            tx.execute(
                &format!(
                    "INSERT INTO {} (key, data) SELECT key, data FROM {into} \
                     ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
                    self.targets.table
                ),
                &[],
            )
            .await
            .map_err(fail("write the initial load"))?
        };
        // The changes between the documents and the load's position, in
        // turn, as upserts: the table may hold rows the load did not
        // write.
        while let Some(entries) = docs.catch_up().await? {
            let writes = statements_for(&self.statements, &entries, Written::Upserted)?;
            let tx = &tx;
            let rows = futures_util::future::join_all(writes.iter().map(
                |(statement, arrays)| async move { tx.execute(*statement, &params(arrays)).await },
            ));
            for written in rows.await {
                written.map_err(fail("catch up after the initial load"))?;
            }
        }
        tx.execute(
            &self.statements.progress,
            &[&self.name, &docs.at().to_string()],
        )
        .await
        .map_err(fail("record the position"))?;
        tx.commit().await.map_err(fail("commit the initial load"))?;
        // Statistics for the rows just loaded: those of a load cut short
        // (autovacuum's ANALYZE of its dead rows says the table is empty)
        // would plan the next writes as scans of the whole table. Best
        // effort: a table of another owner is skipped with a warning.
        if let Err(e) = self
            .client
            .batch_execute(&format!("ANALYZE {}", self.targets.table))
            .await
        {
            tracing::debug!(sink = %self.name, error = %e, "could not analyze the sink's table after its initial load");
        }
        // Counted; the statements are prepared again, if need be, at the
        // next write.
        self.inserted += written;
        Ok(written)
    }

    /// Tries the entries as [`Written::Exact`]; when the table is out of
    /// step with the interface (a key to insert that it holds, one to
    /// update that it lacks), that transaction rolls back and the same
    /// changes are written again as [`Written::Upserted`].
    async fn write(&mut self, entries: Vec<FeedEntry>, at: Position) -> Result<()> {
        let position = at.to_string();
        let mut how = Written::Exact;
        loop {
            let writes = statements_for(&self.statements, &entries, how)?;
            match commit_writes(
                &self.client,
                &self.statements,
                &self.name,
                &position,
                &writes,
            )
            .await
            {
                Err(e) if how == Written::Exact && out_of_step(&e) => {
                    tracing::info!(
                        sink = %self.name,
                        position = %position,
                        "the sink's table is out of step with its interface (changed by hand?); writing these changes as upserts"
                    );
                    how = Written::Upserted;
                }
                written => {
                    written.map_err(|e| PipelineError::database("write to the sink", &e))?;
                    break;
                }
            }
        }
        let added = entries
            .iter()
            .filter(|e| e.old.is_none() && e.new.is_some())
            .count();
        self.grown(added as u64).await
    }
}

/// Whether a [`Written::Exact`] write failed because the table is out of
/// step with the interface: a key inserted that the table held
/// (`unique_violation`), or an update that missed a key (the statement's
/// `division_by_zero`). Nothing else in the write raises either.
fn out_of_step(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code()
        .is_some_and(|c| *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DIVISION_BY_ZERO)
}

/// A document or key as text. They are written by evolve_core::document
/// from UTF-8 text; anything else is a corrupt store, never written as
/// something else.
fn utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| PipelineError::Store {
        context: "read a document for the sink".into(),
        message: format!("the document is not UTF-8 ({e}); the state store is damaged"),
    })
}

/// A key or document as a `jsonb` field of binary COPY data: its length,
/// the format version, the JSON text.
fn put_jsonb(buf: &mut BytesMut, text: &[u8]) -> Result<()> {
    utf8(text)?;
    let len = i32::try_from(text.len() + 1).map_err(|_| PipelineError::Store {
        context: "read a document for the sink".into(),
        message: format!(
            "a document of {} bytes is larger than a COPY field can hold; the state store is damaged",
            text.len()
        ),
    })?;
    buf.put_i32(len);
    buf.put_u8(JSONB_VERSION);
    buf.put_slice(text);
    Ok(())
}

/// The statements for consecutive upstream transactions' changes (see
/// [`statements_for`]) and the position `pos` of the last one, in one sink
/// transaction, so readers of the sink see every transaction whole and in
/// order, never part of one. The statements are pipelined: one round trip
/// whatever their number. On failure the transaction is rolled back and
/// the connection is ready for the next.
async fn commit_writes(
    client: &Client,
    statements: &Statements,
    sink: &str,
    pos: &str,
    writes: &[(&tokio_postgres::Statement, Vec<Vec<&str>>)],
) -> std::result::Result<(), tokio_postgres::Error> {
    let progress_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&sink, &pos];
    // Sent in this order on first poll; a failure aborts the transaction,
    // and the COMMIT after it then rolls back. The first error in this
    // order is the cause; those after it only say the transaction failed.
    let begin = client.batch_execute("BEGIN");
    let rows =
        futures_util::future::join_all(writes.iter().map(|(statement, arrays)| async move {
            client.execute(*statement, &params(arrays)).await
        }));
    let progress = client.execute(&statements.progress, &progress_params);
    let commit = client.batch_execute("COMMIT");
    let (begin, rows, progress, commit) = tokio::join!(biased; begin, rows, progress, commit);
    begin?;
    for written in rows {
        written?;
    }
    progress?;
    commit
}

/// The statements that apply consecutive upstream transactions' changes
/// (`entries`, in order) with their parameters. Every row change reaches
/// the sink as it happened upstream, once: consecutive transactions that
/// touch distinct keys are written together (changes of distinct keys
/// commute), and a key met again starts the next run. Per run: its
/// deletes, then its documents, as `how` says.
#[allow(clippy::type_complexity)]
fn statements_for<'a>(
    statements: &'a Statements,
    entries: &'a [FeedEntry],
    how: Written,
) -> Result<Vec<(&'a tokio_postgres::Statement, Vec<Vec<&'a str>>)>> {
    let mut writes = Vec::new();
    for run in runs(entries)? {
        let Run {
            mut inserted,
            updated,
            deleted,
        } = run;
        if !deleted.is_empty() {
            writes.push((&statements.delete, vec![deleted]));
        }
        let mut put = |statement, (keys, data): (Vec<&'a str>, Vec<&'a str>)| {
            if !keys.is_empty() {
                writes.push((statement, vec![keys, data]));
            }
        };
        match how {
            Written::Exact => {
                put(&statements.insert, inserted);
                put(&statements.update, updated);
            }
            Written::Upserted => {
                inserted.0.extend(updated.0);
                inserted.1.extend(updated.1);
                put(&statements.upsert, inserted);
            }
        }
    }
    Ok(writes)
}

/// One run's changes (its keys are distinct): keys and documents the
/// interface did not have before, keys and documents it had, keys it
/// deleted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Run<'a> {
    inserted: (Vec<&'a str>, Vec<&'a str>),
    updated: (Vec<&'a str>, Vec<&'a str>),
    deleted: Vec<&'a str>,
}

/// `entries` cut into runs of distinct keys: a run ends before the first
/// key it already holds.
fn runs(entries: &[FeedEntry]) -> Result<Vec<Run<'_>>> {
    let mut out = Vec::new();
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut start = 0;
    while start < entries.len() {
        seen.clear();
        let end = entries[start..]
            .iter()
            .position(|e| !seen.insert(&e.key))
            .map_or(entries.len(), |n| start + n);
        out.push(run(&entries[start..end])?);
        start = end;
    }
    Ok(out)
}

/// A statement's text-array parameters as `execute` takes them.
fn params<'a>(arrays: &'a [Vec<&'a str>]) -> Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)> {
    arrays
        .iter()
        .map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

/// The [`Run`] of `entries` (their keys distinct).
fn run(entries: &[FeedEntry]) -> Result<Run<'_>> {
    let mut run = Run::default();
    for e in entries {
        let key = utf8(&e.key)?;
        match (&e.old, &e.new) {
            (None, Some(doc)) => {
                run.inserted.0.push(key);
                run.inserted.1.push(utf8(doc)?);
            }
            (Some(_), Some(doc)) => {
                run.updated.0.push(key);
                run.updated.1.push(utf8(doc)?);
            }
            (_, None) => run.deleted.push(key),
        }
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pos: u64, key: &str, old: Option<&str>, new: Option<&str>) -> FeedEntry {
        FeedEntry {
            pos: Position::from_u64(pos),
            key: key.as_bytes().to_vec(),
            old: old.map(|d| d.as_bytes().to_vec()),
            new: new.map(|d| d.as_bytes().to_vec()),
        }
    }

    /// Transactions of distinct keys share a run; a key met again starts
    /// the next one, so each key is written once per change, in order. A
    /// document is inserted when the interface had none for its key.
    #[test]
    fn runs_of_distinct_keys_span_transactions() {
        let entries = [
            entry(10, "a", None, Some("1")),
            entry(10, "b", Some("0"), None),
            entry(20, "c", Some("2"), Some("3")),
            entry(30, "a", Some("1"), None),
            entry(30, "d", None, Some("4")),
            entry(40, "a", None, Some("5")),
        ];
        let run = |inserted: &[(&'static str, &'static str)],
                   updated: &[(&'static str, &'static str)],
                   deleted: &[&'static str]| Run {
            inserted: inserted.iter().copied().unzip(),
            updated: updated.iter().copied().unzip(),
            deleted: deleted.to_vec(),
        };
        assert_eq!(
            runs(&entries).unwrap(),
            vec![
                run(&[("a", "1")], &[("c", "3")], &["b"]),
                run(&[("d", "4")], &[], &["a"]),
                run(&[("a", "5")], &[], &[]),
            ]
        );
        assert!(super::runs(&[]).unwrap().is_empty());
    }
}
