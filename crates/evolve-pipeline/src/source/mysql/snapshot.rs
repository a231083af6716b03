//! A table's snapshot: the consistent read's start at a known binlog
//! position (MariaDB's `binlog_snapshot_*` variables, or MySQL's
//! table-locked start) and its rows, copied in chunks.

use super::*;

/// Starts a snapshot's consistent read.
pub(super) const SNAPSHOT_START: &str = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

/// How long the snapshot's `LOCK TABLES ... READ` waits for the table's
/// open write transactions before it gives up (and the copy is retried).
const SNAPSHOT_LOCK_WAIT_SECONDS: u32 = 10;

/// The binlog position of the consistent read `conn` has just started,
/// on MariaDB: `binlog_snapshot_file` and `binlog_snapshot_position`,
/// which MariaDB takes with the read, without a lock, mapped to GTIDs.
pub(super) async fn mariadb_snapshot_position(conn: &mut Conn) -> Result<Position> {
    let status: Vec<(Option<String>, Option<String>)> = conn
        .query("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
        .await
        .map_err(|e| query_error("read the snapshot's binlog position", e))?;
    let get = |n: &str| {
        status
            .iter()
            .find(|(k, _)| k.as_deref().is_some_and(|k| k.eq_ignore_ascii_case(n)))
            .and_then(|(_, v)| v.clone())
    };
    let (Some(file), Some(offset)) = (
        get("binlog_snapshot_file"),
        get("binlog_snapshot_position").and_then(|o| o.parse::<u32>().ok()),
    ) else {
        return Err(PipelineError::Database {
            context: "read the snapshot's binlog position".into(),
            message: "the server shows no binlog_snapshot_file and binlog_snapshot_position for the consistent read".into(),
        });
    };
    // The stream's positions are GTID positions on MariaDB: the
    // snapshot's is the GTID state at its binlog position (exact:
    // BINLOG_GTID_POS reads the binlog up to that very offset, where
    // @@gtid_binlog_pos would be the server's state now).
    let list = mariadb_gtid_at(conn, &file, offset)
        .await?
        .ok_or_else(|| PipelineError::Database {
            context: "read the snapshot's binlog position".into(),
            message: format!(
                "BINLOG_GTID_POS('{file}', {offset}) of binlog_snapshot_file and binlog_snapshot_position is NULL"
            ),
        })?;
    state_position(&GtidState::MariaDb(list))
}

/// Starts the consistent read on `conn` at a binlog position known for
/// table `database.table`, on a server that does not say where its
/// consistent reads are (MySQL): `lock`, a second session, holds `LOCK
/// TABLES ... READ` on the table while `conn` starts its read and `lock`
/// reads the binlog position (GTIDs, or file and offset without them),
/// then unlocks. The lock waits until every transaction writing the table
/// has ended, and keeps new ones from committing while it is held, so
/// the read holds exactly the table's transactions up to that position:
/// the stream takes the table's changes from there. Writers of the table
/// wait for the instant the lock is held (Materialize's protocol; other
/// tables are not locked).
pub(super) async fn locked_start(
    conn: &mut Conn,
    lock: &mut Conn,
    database: &str,
    table: &str,
) -> Result<Position> {
    let flavor = gtid_flavor(lock).await?;
    let what = format!("lock {database}.{table} for the snapshot's start (LOCK TABLES ... READ)");
    lock.query_drop(format!(
        "SET SESSION lock_wait_timeout = {SNAPSHOT_LOCK_WAIT_SECONDS}"
    ))
    .await
    .map_err(|e| query_error(&what, e))?;
    lock.query_drop(format!("LOCK TABLES {} READ", quoted_table(database, table)))
        .await
        .map_err(|e| match &e {
            // ER_TABLEACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR
            mysql_async::Error::Server(s) if s.code == 1142 || s.code == 1044 => {
                PipelineError::Refused {
                    sqlstate: "42501",
                    primary: format!(
                        "the snapshot of {database}.{table} needs the LOCK TABLES privilege: {}",
                        s.message
                    ),
                    detail: Some("A MySQL server does not say where a consistent read stands in its binlog; evolve locks the table for the instant it starts the read and reads the position.".into()),
                    hint: Some(format!("GRANT LOCK TABLES ON {}.* TO the connection's user.", quote_ident(database))),
                }
            }
            _ => query_error(&format!("{what}; a long transaction writing the table holds the lock back for more than {SNAPSHOT_LOCK_WAIT_SECONDS} s, and the copy is retried"), e),
        })?;
    let started: Result<Position> = async {
        conn.query_drop(SNAPSHOT_START)
            .await
            .map_err(|e| query_error("start the snapshot transaction", e))?;
        Ok(current_start(lock, flavor).await?.0)
    }
    .await;
    lock.query_drop("UNLOCK TABLES")
        .await
        .map_err(|e| query_error(&what, e))?;
    started
}

/// A read of table `database.table` on `conn` failed with `e` (`what`:
/// `copy shop.orders`): a refusal for the user's privileges on it is
/// permanent, naming the account (the session's `CURRENT_USER()`), the
/// table, what needs it (`needs`: `its snapshot`) and the GRANT
/// ([`select_denied`]); anything else is a [`query_error`].
pub(super) async fn read_error(
    conn: &mut Conn,
    database: &str,
    table: &str,
    needs: &str,
    what: &str,
    e: mysql_async::Error,
) -> PipelineError {
    if let mysql_async::Error::Server(server) = &e
        && read_denied(&e)
    {
        // The session itself still works: it says who it is.
        let account = current_account(conn)
            .await
            .unwrap_or_else(|_| "the connection's user".into());
        if let Some(denied) = select_denied(
            &account,
            database,
            Some(table),
            needs,
            server.code,
            &server.message,
        ) {
            return denied;
        }
    }
    query_error(what, e)
}

/// How a snapshot's value of column `c` becomes text: from its PostgreSQL
/// type (the binary protocol gives ENUM, SET and JSON as text, BINARY
/// padded, TIMESTAMP in the session's UTC).
pub(super) fn snapshot_conv(c: &ColumnInfo) -> Conv {
    match c.type_oid {
        INT2 if c.type_name.to_ascii_lowercase().starts_with("year") => Conv::Year,
        INT2 | INT4 | INT8 => Conv::Integer,
        NUMERIC => Conv::Decimal,
        FLOAT4 => Conv::Float,
        FLOAT8 => Conv::Double,
        DATE => Conv::Date,
        INTERVAL => Conv::Time,
        TIMESTAMP => Conv::DateTime,
        TIMESTAMPTZ => Conv::Timestamp { epoch: false },
        BIT => Conv::Bit {
            bits: u32::try_from(c.typmod).unwrap_or(1),
        },
        BYTEA => Conv::Bytes { pad: None },
        JSONB if c.type_name.eq_ignore_ascii_case("json") => Conv::Json,
        UUID => Conv::Uuid { record: false },
        INET => Conv::Inet {
            len: if c.type_name.eq_ignore_ascii_case("inet4") {
                4
            } else {
                16
            },
            record: false,
        },
        _ => Conv::Text {
            charset: Charset::Utf8,
        },
    }
}

type Chunk = Vec<Vec<Option<Vec<u8>>>>;

/// Reads the snapshot's rows of table `upstream` (database, table) and
/// sends them in chunks; commits the snapshot transaction at the end. A
/// read the server refuses for the user's privileges (SELECT on the table
/// or a column of it, or the database) is [`select_denied`]: permanent,
/// naming the GRANT, and sent as such (the table stalls rather than
/// copying again and again).
pub(super) async fn copy_rows(
    mut conn: Conn,
    sql: String,
    convs: Vec<Conv>,
    tx: mpsc::Sender<Result<Chunk>>,
    what: String,
    upstream: (String, String),
) -> Result<()> {
    let fail = |e: mysql_async::Error| query_error(&what, e);
    let outcome: Result<()> = async {
        let mut result = match conn.exec_iter(sql.as_str(), ()).await {
            Ok(result) => result,
            Err(e) => {
                let (database, table) = (&upstream.0, &upstream.1);
                return Err(read_error(&mut conn, database, table, "its snapshot", &what, e).await);
            }
        };
        let mut chunk: Chunk = Vec::with_capacity(CHUNK_ROWS);
        while let Some(row) = result.next().await.map_err(fail)? {
            let values = row.unwrap();
            let mut out = Vec::with_capacity(values.len());
            for (value, conv) in values.into_iter().zip(&convs) {
                out.push(
                    value_text(value, conv).map_err(|message| PipelineError::Database {
                        context: what.clone(),
                        message,
                    })?,
                );
            }
            chunk.push(out);
            if chunk.len() == CHUNK_ROWS {
                let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_ROWS));
                if tx.send(Ok(full)).await.is_err() {
                    return Ok(());
                }
            }
        }
        drop(result);
        if !chunk.is_empty() {
            let _ = tx.send(Ok(chunk)).await;
        }
        conn.query_drop("COMMIT").await.map_err(fail)?;
        Ok(())
    }
    .await;
    if let Err(e) = &outcome {
        let sent = match e {
            PipelineError::AccessDenied {
                sqlstate,
                primary,
                detail,
                hint,
            } => PipelineError::AccessDenied {
                sqlstate,
                primary: primary.clone(),
                detail: detail.clone(),
                hint: hint.clone(),
            },
            _ => PipelineError::Database {
                context: what.clone(),
                message: e.primary(),
            },
        };
        let _ = tx.send(Err(sent)).await;
    }
    let _ = conn.disconnect().await;
    outcome
}

/// A table's copy in a consistent-snapshot transaction, read by a task of
/// its own.
pub struct MysqlSnapshot {
    pub(super) position: Position,
    pub(super) rx: mpsc::Receiver<Result<Chunk>>,
    pub(super) task: tokio::task::JoinHandle<Result<()>>,
}

impl TableSnapshot for MysqlSnapshot {
    fn position(&self) -> Position {
        self.position
    }

    async fn next_rows<F>(&mut self, mut row: F) -> Result<bool>
    where
        F: FnMut(&[Option<&[u8]>]) -> Result<()> + Send,
    {
        match self.rx.recv().await {
            Some(chunk) => {
                let mut values: Vec<Option<&[u8]>> = Vec::new();
                for r in &chunk? {
                    values.clear();
                    values.extend(r.iter().map(|v| v.as_deref()));
                    row(&values)?;
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn finish(self) -> Result<()> {
        drop(self.rx);
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(PipelineError::Database {
                context: "copy a table".into(),
                message: e.to_string(),
            }),
        }
    }
}
