//! The MySQL and MariaDB source: the row-based binlog, read as a replica
//! reads it (`COM_BINLOG_DUMP` or `COM_BINLOG_DUMP_GTID` through
//! `mysql_async`, events parsed by `mysql_common`), and table snapshots in
//! a consistent-snapshot transaction.
//!
//! MariaDB's compressed binlog events (`log_bin_compress = ON`: statements
//! and rows events from `log_bin_compress_min_len` bytes on, zlib
//! compressed) are read as the events they compress (module
//! [`compressed`]): the compressed part is inflated, the event rebuilt with
//! its uncompressed type and parsed by `mysql_common`, and it goes where
//! that event goes, with the same position, GTID, DDL and TRUNCATE
//! handling. A compressed event that cannot be inflated (a damaged zlib
//! stream, a length other than the one it declares, a declared length
//! above 1 GiB) stops the stream with an error naming its type and
//! position.
//!
//! # Positions
//!
//! A binlog's own coordinates (a file and an offset) belong to the server
//! that wrote it: a replica has the same transactions at other offsets of
//! files of its own. A [`Position`] is what the store, the feed, the bus
//! and every sink order transactions by, and a source's connection may be
//! pointed at another server of its replication topology (a failover)
//! while they keep the positions they have; so positions count GTIDs.
//!
//! **GTID positions.** When the server has GTIDs (MariaDB always logs
//! them; MySQL with `gtid_mode = ON`), the stream keeps a GTID state
//! (module [`gtid`]): MariaDB's list of the last `domain-server-sequence`
//! GTID of each replication domain (`0-1-42,1-2-7`), MySQL's set of the
//! transactions executed (`uuid:1-42`), advanced by the GTID event that
//! opens each event group of the binlog (a transaction, or a statement
//! such as DDL). A position is `2^62 + count` ([`GTID_POSITIONS`],
//! [`gtid_position`]): the count is the sum of the list's sequence numbers
//! (MariaDB) or the number of transactions in the set (MySQL). Every event
//! group raises it (by one on MySQL, by the step of its domain's sequence
//! number on MariaDB), so positions grow along the binlog; and a replica
//! that has the same transactions (GTID replication with
//! `log_slave_updates = ON`) has the same GTID state after each of them,
//! so a transaction has the same position on the primary and on every
//! replica, whatever their files and offsets. MariaDB numbers a domain's
//! GTIDs in order unless several servers write into one domain without
//! `gtid_strict_mode`; a binlog whose sequence numbers go back within a
//! domain stops the stream with an error saying so. Users read positions
//! in the LSN notation: `40000000/2A` is count 42 ([`mariadb_position`]
//! and [`mysql_position`] give the position of a GTID list or set).
//!
//! A transaction's **commit** position is the state's position before its
//! event group, its **end** position the state's after it: below its end,
//! at or above the end of every transaction before it, and at or above a
//! snapshot's position exactly when the transaction is not in the
//! snapshot. The engine stores the end position of the last transaction it
//! applied together with the GTID state after it, in the same store
//! transaction (`sources.resume_state`; the source contract's resume
//! states, [`ChangeStream::resume_state`]); the stream reopens after that
//! state ([`Source::stream_resuming`]): on MariaDB as its replicas ask
//! with `MASTER_USE_GTID` (`@mariadb_slave_capability = 4`, so GTID
//! events come as they are, `@slave_connect_state` = the list,
//! `@slave_gtid_strict_mode = 1`, so a server whose binlog lacks a GTID of
//! the list refuses rather than starting elsewhere, then
//! `COM_BINLOG_DUMP`), on MySQL with `COM_BINLOG_DUMP_GTID` and the set.
//! The server finds the GTIDs in its own files. `CREATE SOURCE` stores the
//! binlog's end as such a state: MariaDB's `BINLOG_GTID_POS` of the
//! binlog file and offset `SHOW MASTER STATUS` gives, MySQL's
//! `Executed_Gtid_Set` read with them.
//!
//! **File and offset positions** are the fallback for a MySQL server
//! without GTIDs. The file's sequence number (the digits after the last
//! `.` of `binlog.000042`) goes in the high 32 bits, the offset in the low
//! 32: `Position = seq << 32 | offset` ([`binlog_position`]). Files are
//! numbered in the order the server writes them and offsets grow within a
//! file, so the order of positions is the order of the binlog; users read
//! them as `seq/offset` in hexadecimal (`2A/1F3` is offset 0x1F3 of file
//! number 42). A transaction's end position is the end of its commit
//! event (`XID`, or a `COMMIT` query for non-transactional tables), its
//! commit position the end of the event before its `BEGIN`; the stream
//! reopens at the file and offset stored. Limits: offsets fit in 32 bits
//! by the binlog format; sequence numbers must stay below 2^30 (so that
//! file positions stay below GTID positions), which a server reaches
//! after a billion rotations; the base name of the files is not in the
//! position, so a server whose `log_bin` base name changes is a new
//! history (the stream then finds no file of the number it needs and
//! says so). Such positions mean nothing on another server: a source on a
//! MySQL server without GTIDs cannot follow a failover, and keeps file
//! positions if `gtid_mode` is turned on later (create it again to have
//! GTID positions).
//!
//! **Older stores.** A MariaDB source of a store written before GTID
//! positions has a file and offset and no GTID state: its stream resumes
//! after `BINLOG_GTID_POS` of that file and offset (the same point), and
//! its positions are GTID positions from its first transaction on, above
//! every file position, so they keep growing. A table whose snapshot
//! position is still a file position takes every GTID position as after
//! it: were the stream behind such a table's snapshot when the pipeline
//! stopped for the upgrade, the transactions between the two would be
//! applied to it again (its documents end the same, its feed would show
//! them twice); stop the pipeline with its tables caught up to upgrade.
//!
//! # Failover
//!
//! The source reads the server its connection names when the pipeline
//! starts (the url is looked up by the connection's name in
//! `evolve.toml`): to move a source to another server of its topology,
//! change the url and restart the pipeline; nothing in the catalog
//! changes. The server must have the source's GTIDs in its binlog (a
//! GTID replica with `log_slave_updates = ON`, promoted or not); the
//! stream resumes after the last transaction the pipeline applied, the
//! positions carry on, and nothing is lost or applied twice
//! (`tests/mysql_gtid.rs` fails a MariaDB primary over to its replica
//! between two runs). A server that lacks them (binlogs purged, a replica
//! that had not received the last transactions applied, a diverged one)
//! refuses the source's GTID state, and the source stalls (see
//! "Confirmation and failures") rather than skipping anything. A MariaDB
//! server's snapshots take its binlog's GTID state, so its binlog must
//! carry every domain of the source's state (MariaDB keeps them across
//! rotations and purges; `RESET MASTER` and `FLUSH BINARY LOGS
//! DELETE_DOMAIN_ID` drop them).
//!
//! # TLS
//!
//! The MySQL client's options as url parameters (`MysqlTls`): every
//! session of the source (catalog reads, snapshots, the binlog) opens
//! with them.
//!
//! # Snapshots
//!
//! `START TRANSACTION WITH CONSISTENT SNAPSHOT` in REPEATABLE READ, then
//! MariaDB's `binlog_snapshot_file` and `binlog_snapshot_position` status
//! variables: inside such a transaction they are the binlog position the
//! snapshot is consistent with, taken by the server under the same lock
//! that orders commits into the binlog, so no `FLUSH TABLES WITH READ
//! LOCK` is needed and writers never wait. The snapshot's position is the
//! GTID state at that file and offset, `BINLOG_GTID_POS(file, offset)`,
//! which reads the binlog up to that very offset (`@@gtid_binlog_pos` is
//! the server's state when it is read, not the snapshot's, and is not
//! used). The rows are read with one `SELECT` in the binary protocol
//! (exact floats, as in the binlog) and streamed in chunks of
//! [`CHUNK_ROWS`].
//!
//! MySQL has no such variables. Its snapshots start under a table lock
//! instead of a global one (Materialize's protocol): a second session
//! takes `LOCK TABLES ... READ` on the one table, which waits until every
//! transaction writing it has ended and holds new ones back; the snapshot
//! session starts its consistent read; the second session reads the
//! binlog position (`SHOW MASTER STATUS`: the executed GTID set, or file
//! and offset without GTIDs) and unlocks. No transaction of the table
//! commits in between, so the read holds exactly the table's
//! transactions up to that position. Writers of that table wait for
//! those few statements (`lock_wait_timeout` bounds the lock's own wait
//! for a long transaction, and the copy is then retried); other tables
//! are not locked. It needs the `LOCK TABLES` privilege, which CREATE
//! SOURCE checks on MySQL. The protocol's test runs it on MariaDB, under
//! concurrent inserts, and checks each position against the rows read.
//!
//! # Schemas and values
//!
//! Tables are identified by a 32-bit FNV-1a hash of `database\0table`
//! of the name a table version was created with (MySQL has no table
//! OIDs; a binlog `table_id` changes whenever the server's table cache
//! does); a renamed table keeps it under its new name (see "Schema
//! changes"). Each
//! `TABLE_MAP` event's full metadata (`binlog_row_metadata=FULL`: column
//! names, types, signedness, charsets, ENUM and SET values, primary key)
//! gives the table's columns; a [`SourceEvent::Schema`] goes out before its
//! first row and whenever they change. MySQL types map onto PostgreSQL
//! types, whose OIDs the schema carries, so documents are PostgreSQL's
//! `to_jsonb` of the mapped type:
//!
//! | MySQL / MariaDB                      | PostgreSQL    | text sent               |
//! |--------------------------------------|---------------|-------------------------|
//! | TINYINT, SMALLINT, YEAR              | int2          | `-12`, YEAR `2024` (`0000` as `0`) |
//! | SMALLINT UNSIGNED, MEDIUMINT, INT    | int4          |                         |
//! | INT UNSIGNED, BIGINT                 | int8          |                         |
//! | BIGINT UNSIGNED, DECIMAL(p,s)        | numeric       | exact, scale kept       |
//! | FLOAT / DOUBLE                       | float4 / float8 | shortest round trip   |
//! | BIT(n)                               | bit(n)        | `0101`                  |
//! | CHAR, VARCHAR, TEXT, ENUM, SET       | text          | UTF-8; SET as `a,b`     |
//! | BINARY, VARBINARY, BLOB, GEOMETRY    | bytea         | `\x0aff`, BINARY padded |
//! | DATE                                 | date          | `2024-01-31`            |
//! | TIME(fsp)                            | interval      | `-838:59:59.5`          |
//! | DATETIME(fsp)                        | timestamp     | `2024-01-31 12:00:00.25`|
//! | TIMESTAMP(fsp)                       | timestamptz   | UTC, `...+00`           |
//! | JSON (MySQL; MariaDB's JSON alias)   | jsonb         | the JSON text           |
//! | UUID (MariaDB)                       | uuid          | `a0eebc99-9c0b-...`     |
//! | INET4, INET6 (MariaDB)               | inet          | `192.0.2.1`, `2001:db8::1`, `::ffff:1.2.3.4` |
//!
//! Character data in utf8mb4, utf8mb3 and ascii is sent as is, latin1
//! (MySQL's cp1252) is converted to UTF-8; other charsets are refused at
//! `CREATE TABLE`. Zero dates (`0000-00-00`) have no PostgreSQL value
//! and are sent as NULL, as Debezium does. MariaDB's JSON, UUID, INET4
//! and INET6 reach the binlog as plain strings (`longtext`, fixed binary
//! strings of 16, 4 and 16 bytes): the stream knows them from the
//! catalog, read when it starts. The binlog drops trailing zero bytes of
//! such strings, restored from the type's length; a UUID's bytes are in
//! their canonical order there (MariaDB's records reverse the groups of
//! some versions, its binlog does not); an INET6 address is written as
//! PostgreSQL writes an `inet`
//! (compressed zeros, IPv4-mapped and -compatible addresses dotted).
//! Types without a mapping (such as MySQL 9's VECTOR) are refused at
//! `CREATE TABLE` unless listed in EXCLUDE COLUMNS.
//!
//! # Schema changes
//!
//! The binlog logs DDL as statements (`QUERY` events, even with ROW
//! logging) between transactions, in commit order, and every row event
//! after it comes with a table map of the table's columns then. Drift
//! detection uses both, as PostgreSQL's uses Relation messages and the
//! catalog:
//!
//! - **The table map** gives each table's columns (names, types,
//!   signedness, charsets, the primary key) at that binlog position; the
//!   stream sends a [`SourceEvent::Schema`] whenever they differ from the
//!   last one sent. A column added is ignored by the table versions that
//!   did not pin it (`column_drift`, ingestion goes on); a pinned column
//!   of another mapped type stalls the table at the next row of it
//!   (`type_drift` first, from the catalog, then `stalled`), as with
//!   PostgreSQL.
//! - **The DDL statements** say what a table map cannot: which columns
//!   stopped existing under their name. `ALTER TABLE ... DROP [COLUMN]`,
//!   `CHANGE [COLUMN] old new` (to another name) and `RENAME COLUMN old TO
//!   new` remove `old`; `ALTER TABLE ... RENAME TO` and `RENAME TABLE`
//!   move the table to its new name, unless the same statement gives its
//!   name to another table; that, `DROP TABLE` and `CREATE OR REPLACE
//!   TABLE` remove it. The stream
//!   reads only these forms out of a statement (`parse_ddl`: a tokenizer
//!   that knows comments, quoting and MySQL's executable comments, not a
//!   grammar), so a statement it does not know is never an error: it is
//!   nothing, and the next table map shows what it did to the columns.
//!   For a table the catalog reads, the statement becomes a transaction of
//!   its own at the statement's position (its commit position the end of
//!   the event before it, its end position the statement's end, ordered
//!   against snapshots as any transaction is), holding the table's schema
//!   after it: the last one sent (or, for a table whose table map the
//!   stream has not met since it opened, its columns where the stream
//!   resumed: the version of the store's schema history at that position,
//!   see [`crate::source`], "Schema history"; `information_schema`'s when
//!   the stream opened, for a table no stream has announced yet) without
//!   the removed columns; a table renamed is its last schema under the new
//!   name, and its ids go with it (the stream reads the new name's rows
//!   under them, and a version created over the new name adds its own); a
//!   table removed is a schema without columns. So a
//!   column dropped and re-added with the same name and type (which the
//!   next table map and the catalog show exactly as before) stalls the
//!   tables that ingest it at the drop, and old values are never merged
//!   with the new column. Excluded columns (`EXCLUDE COLUMNS`) may go:
//!   that is the planned drop, with no stall.
//!
//! The outcomes, each tested in `tests/mysql_absorb.rs`:
//!
//! | upstream statement | outcome |
//! |---|---|
//! | `ALTER TABLE ... ADD COLUMN` | ingestion goes on; drift `column_drift` |
//! | `ALTER TABLE ... MODIFY` (another mapped type) | drift `type_drift`; the table stalls at its next row |
//! | `ALTER TABLE ... DROP COLUMN` of an ingested column | the table stalls at the statement; the source's other tables go on |
//! | the same, of an excluded column | nothing |
//! | `DROP COLUMN` then `ADD COLUMN`, same name and type | the table stalls at the drop |
//! | `ALTER TABLE ... RENAME COLUMN a TO b` | the table stalls at the statement; drift says `column "a" was renamed to "b"` |
//! | `TRUNCATE TABLE` | every document of the table is deleted (one change per row downstream); the table goes on |
//! | `RENAME TABLE a TO b`, `ALTER TABLE a RENAME TO b` | the table goes on, reading `db.b`, after restarts too; drift `table_renamed`: `upstream table "db.a" was renamed to "db.b"` |
//! | `RENAME TABLE a TO a_old, a_new TO a` (the cut-over of gh-ost and pt-online-schema-change) | the table stalls: `upstream table "db.a" was dropped or replaced by another table of that name; ...`; a version over `db.a` recovers with a minimal diff, which `ABSORB = 'auto'` runs by itself |
//! | `DROP TABLE`, `CREATE OR REPLACE TABLE` | the table stalls: `upstream table "db.a" was dropped or replaced by another table of that name; ...`; a table re-created under the name is not merged into it |
//!
//! A renamed table is followed as PostgreSQL's are by their OIDs: the
//! binlog names tables, so the new name goes into the schema history with
//! the rename's position, and a stream reopened after it reads the table
//! under that name (one reopened before it meets the statement again).
//!
//! Drift polls ([`read_upstreams`]) read `information_schema.COLUMNS`
//! with the same type mapping. MySQL has no table OIDs and no stable
//! column numbers, so a table is looked up by its name (the pinned one,
//! or the one the schema history followed it to) and a column by its name
//! (see [`read_upstreams`]); what the catalog cannot show (a re-added
//! column) is the stall's error.
//! Changes within one mapped type (`varchar(10)` to `varchar(20)`, `int`
//! to `int unsigned` when both map to the same PostgreSQL type) change no
//! document and are not drift.
//!
//! # Replacement swaps
//!
//! `APPLY REPLACEMENT` swaps at a marker in the stream (`swap.rs`):
//! PostgreSQL's is a transactional logical decoding message; a binlog
//! carries only row changes and statements, so the marker is a row.
//! [`write_marker`] upserts the source's row of [`MARKER_TABLE`]
//! (`evolve_markers`, created in the connection's database on first use;
//! the user needs CREATE, INSERT and UPDATE on it) with the swap's
//! message, in a transaction of its own. The stream turns the new image
//! of every row written into that table into a [`SourceEvent::Marker`],
//! inside that transaction, so the engine meets it in commit order with
//! every other change: all transactions committed before it were applied
//! to both the old and the hydrated new table version, none after it, and
//! the interface switches tables in the store transaction of that commit.
//! The seam is exact for the same reason the marker is: the binlog orders
//! commits, and the marker is one. (Taking `SHOW MASTER STATUS` at APPLY
//! time as the swap position would be exact too, but an idle upstream
//! would never bring the stream to a transaction there; the marker is one
//! itself.) Hydration needs nothing more than the snapshot above: a copy
//! at the GTID state of `binlog_snapshot_position` joined to the stream
//! from there.
//!
//! # Confirmation and failures
//!
//! A binlog has no slot: [`ChangeStream::confirm`] only remembers, and the
//! server keeps files by its own expiry (`binlog_expire_logs_seconds`).
//! When the history a stream must resume from is gone, the error is
//! permanent ([`PipelineError::BinlogPurged`]): it names the position
//! (with its GTID state: `binlog position 40000000/2A (GTID 0-1-42) ... is
//! no longer on the server`) and the way out. For a GTID state the server
//! itself refuses (error 1236, its message in the detail: purged files, or
//! a server that never had those transactions), and another server of the
//! topology that has them can serve the stream (see "Failover"); for a
//! file and offset, the file is gone. Otherwise the source's tables and
//! the source are created again. Lost connections, restarts and timeouts
//! (a heartbeat is asked for every second) are transient: the engine
//! reopens the stream from the last applied position.
//!
//! # XA transactions
//!
//! MariaDB (10.5 and later) logs an XA transaction's changes at `XA
//! PREPARE`, as an event group of their own (its GTID event flagged
//! `FL_PREPARED_XA`, with the xid), and its `XA COMMIT` or `XA ROLLBACK`
//! later as another group (flagged `FL_COMPLETED_XA`); other transactions
//! commit in between. The stream holds a prepare's changes, undelivered,
//! and delivers them at the `XA COMMIT` as a transaction at that group's
//! position, the commit's place in the binlog: readers see them exactly
//! when the upstream's readers do. An `XA ROLLBACK` drops them. `XA COMMIT
//! ... ONE PHASE` is logged as an ordinary transaction.
//!
//! While a prepared transaction is held, the resume state stored with each
//! later commit is the GTID state before its prepare, so a stream reopened
//! after a restart or a crash reads the prepare again (and the engine skips
//! the transactions it delivers again by their positions); a table created
//! meanwhile gets its share of the changes too, since its snapshot cannot
//! see them. `CREATE SOURCE` refuses to start while the server has a
//! prepared XA transaction (`XA RECOVER`), whose prepare would lie before
//! the source's first position. An `XA COMMIT` whose prepare the stream
//! never read all the same (a user who may not see other users'
//! transactions in `XA RECOVER`) stalls every table of the source that its
//! position concerns, with the xid and the way out, rather than losing its
//! changes silently. MySQL logs XA transactions without MariaDB's flags:
//! a MySQL stream that meets one stops with an error saying so (`XA
//! COMMIT ... ONE PHASE` works there too).
//!
//! The columns a stream resumes with come from the store's schema
//! history, not from the catalog as it is when the stream reopens: a
//! pipeline stopped before an `ALTER TABLE` and started after later ones
//! reads each statement against the columns of its own binlog position
//! (`tests/mysql_absorb.rs` stops the pipeline across two statements).
//!
//! Not done yet: XA transactions on MySQL (see above). A column dropped
//! and re-added while a table version is between the end of its copy and
//! its catch-up (a fraction of a second) is seen only in the table map
//! after it, not as a drop.

pub mod compressed;
pub mod gtid;
pub mod rows;

use std::collections::{HashMap, HashSet, VecDeque};

/// The MySQL client the source uses, for the workspace's tools that talk to
/// the same upstream (`evolve demo mysql`) without a client of their own.
pub use mysql_async;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::change::{Bytes, ChangeKind, ColumnSchema, Datum, RowChange, TableSchema};
use evolve_core::document::TypeKind;
use futures_util::StreamExt;
use mysql_async::binlog::events::{
    BinlogEventHeader, Event, EventData, OptionalMetaExtractor, OptionalMetadataField,
    RowsEventData, TableMapEvent,
};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, OptsBuilder, Value};
use tokio::sync::mpsc;

use self::gtid::{Flavor, GtidList, GtidSet, GtidState, MariaGtid, Uuid, XaGroup, Xid};
use super::{ChangeStream, Source, SourceEvent, TableSnapshot};
use crate::config::Connection;
use crate::drift::{Upstream, UpstreamColumn};
use crate::error::{PipelineError, Result};
use crate::position::Position;
use crate::store::{ColumnInfo, SourceInfo, TableInfo};
use crate::upstream::UpstreamTable;

/// Rows per chunk of a snapshot.
pub const CHUNK_ROWS: usize = 1_000;
/// With a heartbeat every second, this long without an event means the
/// connection is dead.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The heartbeat period asked of the server, in nanoseconds.
const HEARTBEAT_NANOS: u64 = 1_000_000_000;

// ------------------------------------------------------------ positions

/// The position of `offset` in binlog file number `seq`.
pub fn binlog_position(seq: u32, offset: u32) -> Position {
    Position::from_u64((u64::from(seq) << 32) | u64::from(offset))
}

/// The file number and offset of a position.
pub fn binlog_coordinates(position: Position) -> (u32, u32) {
    let v = position.as_u64();
    ((v >> 32) as u32, v as u32)
}

/// The first GTID position: file and offset positions stay below it
/// (their file numbers are below 2^30), GTID positions are this plus the
/// state's count (see the module docs, "Positions").
pub const GTID_POSITIONS: u64 = 1 << 62;

/// The position of a GTID state whose count ([`GtidState::count`]) is
/// `count`; `None` past the 2^62 positions there are.
pub fn gtid_position(count: u64) -> Option<Position> {
    (count < GTID_POSITIONS).then(|| Position::from_u64(GTID_POSITIONS + count))
}

/// Whether `position` is a GTID position rather than a file and offset.
pub fn is_gtid_position(position: Position) -> bool {
    position.as_u64() >= GTID_POSITIONS
}

/// The position of MariaDB GTID list `list` (`@@gtid_binlog_pos`'s
/// form): where a source that applied up to it stands, on any server
/// of the topology.
pub fn mariadb_position(list: &str) -> Option<Position> {
    gtid_position(GtidList::parse(list).ok()?.count())
}

/// The position of MySQL GTID set `set` (`@@gtid_executed`'s form).
pub fn mysql_position(set: &str) -> Option<Position> {
    gtid_position(GtidSet::parse(set).ok()?.count())
}

/// The position of `state`, or the error saying it has none.
fn state_position(state: &GtidState) -> Result<Position> {
    gtid_position(state.count()).ok_or_else(|| PipelineError::Database {
        context: "turn a GTID state into a position".into(),
        message: format!(
            "GTID state {state} counts {} transactions, more than the 2^62 positions evolve has",
            state.count()
        ),
    })
}

/// The sequence number of a binlog file name (`binlog.000042` is 42).
fn file_seq(file: &str) -> Option<u32> {
    let (_, digits) = file.rsplit_once('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok().filter(|&n| n < (1 << 30))
}

/// A table's id: FNV-1a over `database\0table`.
pub fn table_id(database: &str, table: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in database.bytes().chain([0]).chain(table.bytes()) {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

// ------------------------------------------------------------ sessions

/// The MySQL client's TLS options, as query parameters of the url
/// (`?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/mysql/ca.pem`): `ssl-mode`
/// `DISABLED` (the default), `REQUIRED` (TLS, the certificate not
/// checked), `VERIFY_CA` (checked against `ssl-ca`), `VERIFY_IDENTITY`
/// (and the host name); `ssl-cert` with `ssl-key` for a client
/// certificate. Only `ssl-ca` is trusted (no built-in roots).
/// `PREFERRED`, the MySQL client's default, is refused: the binlog
/// reader cannot fall back to plain TCP, so it would mean TLS or nothing
/// without saying which.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MysqlTls {
    mode: Option<String>,
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

/// Splits the TLS parameters off `url`: the url mysql_async reads, and the
/// TLS options.
fn split_tls(url: &str) -> std::result::Result<(String, MysqlTls), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), MysqlTls::default()));
    };
    let mut tls = MysqlTls::default();
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value);
        let slot = match key.to_ascii_lowercase().replace('_', "-").as_str() {
            "ssl-mode" => &mut tls.mode,
            "ssl-ca" => &mut tls.ca,
            "ssl-cert" => &mut tls.cert,
            "ssl-key" => &mut tls.key,
            _ => {
                rest.push(pair);
                continue;
            }
        };
        if value.is_empty() {
            return Err(format!("{key} has no value"));
        }
        *slot = Some(value);
    }
    let url = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((url, tls))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl MysqlTls {
    /// mysql_async's TLS options, or `None` for plain TCP.
    fn ssl_opts(&self) -> std::result::Result<Option<mysql_async::SslOpts>, String> {
        let mode = self
            .mode
            .as_deref()
            .map(str::to_ascii_uppercase)
            .unwrap_or_else(|| "DISABLED".into());
        let (verify_chain, verify_name) = match mode.as_str() {
            "DISABLED" => {
                if self.ca.is_some() || self.cert.is_some() || self.key.is_some() {
                    return Err("ssl-ca, ssl-cert and ssl-key need ssl-mode=REQUIRED, VERIFY_CA or VERIFY_IDENTITY".into());
                }
                return Ok(None);
            }
            "PREFERRED" => {
                return Err("ssl-mode=PREFERRED is not supported (the binlog reader cannot fall back to plain TCP); say REQUIRED, VERIFY_CA or VERIFY_IDENTITY, or DISABLED".into());
            }
            "REQUIRED" => (false, false),
            "VERIFY_CA" => (true, false),
            "VERIFY_IDENTITY" => (true, true),
            other => {
                return Err(format!(
                    "ssl-mode={other} is not one of DISABLED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY"
                ));
            }
        };
        if verify_chain && self.ca.is_none() {
            return Err(format!(
                "ssl-mode={mode} needs ssl-ca, the PEM file of the CA certificates to check the server's certificate against"
            ));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err("ssl-cert and ssl-key go together: give both or neither".into());
        }
        // mysql_async builds rustls configurations with the process's
        // default provider; two are compiled in, so name one.
        let _ = tokio_rustls::rustls::crypto::CryptoProvider::install_default(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        );
        let path = |p: &str| std::path::PathBuf::from(p).into();
        let mut opts = mysql_async::SslOpts::default()
            .with_disable_built_in_roots(true)
            .with_danger_accept_invalid_certs(!verify_chain)
            .with_danger_skip_domain_validation(!verify_name);
        if let Some(ca) = &self.ca {
            opts = opts.with_root_certs(vec![path(ca)]);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            opts = opts.with_client_identity(Some(mysql_async::ClientIdentity::new(
                path(cert),
                path(key),
            )));
        }
        Ok(Some(opts))
    }
}

/// The connection's options: its url, never connecting through a socket
/// it was not given, with the TLS options of [`MysqlTls`].
fn opts(name: &str, connection: &Connection) -> Result<Opts> {
    let bad = |why: String| PipelineError::Config {
        message: format!(
            "connection \"{name}\" ({}): {why}; write it as mysql://user:password@host:port/database[?ssl-mode=VERIFY_IDENTITY&ssl-ca=/path/ca.pem]",
            connection.redacted()
        ),
    };
    let (url, tls) = split_tls(connection.url()).map_err(bad)?;
    let opts = Opts::from_url(&url).map_err(|e| {
        bad(match e {
            mysql_async::UrlError::UnknownParameter { param } => {
                format!("unknown parameter \"{param}\"")
            }
            mysql_async::UrlError::UnsupportedScheme { scheme } => {
                format!("scheme \"{scheme}\" is not mysql")
            }
            _ => "it cannot be read".to_string(),
        })
    })?;
    let ssl = tls.ssl_opts().map_err(bad)?;
    Ok(OptsBuilder::from_opts(opts)
        .prefer_socket(false)
        .ssl_opts(ssl)
        .into())
}

fn target(connection: &Connection) -> String {
    connection.redacted()
}

/// A session on connection `name`.
pub async fn connect(name: &str, connection: &Connection) -> Result<Conn> {
    let conn = Conn::new(opts(name, connection)?)
        .await
        .map_err(|e| PipelineError::Connect {
            connection: name.to_string(),
            target: target(connection),
            // The operating system's words once, not wrapped twice in
            // "Input/output error".
            reason: match &e {
                mysql_async::Error::Io(mysql_async::IoError::Io(io)) => io.to_string(),
                other => other.to_string(),
            },
        })?;
    Ok(conn)
}

fn query_error(what: &str, e: mysql_async::Error) -> PipelineError {
    PipelineError::Database {
        context: what.to_string(),
        message: e.to_string(),
    }
}

/// The server's current binlog file and offset, and (MySQL) its executed
/// GTID set: `SHOW MASTER STATUS` (MySQL 8.4's `SHOW BINARY LOG
/// STATUS`), which reads them together.
async fn master_status(conn: &mut Conn) -> Result<(String, u32, Option<String>)> {
    let what = "read the binlog position (SHOW MASTER STATUS)";
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Ok(row) => row,
        // ER_PARSE_ERROR: MySQL 8.4 has only the new name.
        Err(mysql_async::Error::Server(e)) if e.code == 1064 => conn
            .query_first("SHOW BINARY LOG STATUS")
            .await
            .map_err(|e| query_error(what, e))?,
        Err(e) => return Err(query_error(what, e)),
    };
    let row = row.ok_or_else(|| PipelineError::Refused {
        sqlstate: "55000",
        primary: "the server writes no binlog".into(),
        detail: None,
        hint: Some("Enable log_bin in the server's configuration and restart it.".into()),
    })?;
    let file: String = row.get_opt("File").and_then(|v| v.ok()).unwrap_or_default();
    let offset: u64 = row
        .get_opt("Position")
        .and_then(|v| v.ok())
        .unwrap_or_default();
    let executed: Option<String> = row.get_opt("Executed_Gtid_Set").and_then(|v| v.ok());
    Ok((file, u32::try_from(offset).unwrap_or(u32::MAX), executed))
}

/// The file and offset position of `offset` in binlog file `file`.
fn file_position(file: &str, offset: u32) -> Result<Position> {
    let seq = file_seq(file).ok_or_else(|| PipelineError::Refused {
        sqlstate: "55000",
        primary: format!("binlog file name \"{file}\" has no sequence number evolve can read"),
        detail: None,
        hint: Some(
            "Use the server's default binlog names (log_bin = name, files name.000001, ...)."
                .into(),
        ),
    })?;
    Ok(binlog_position(seq, offset))
}

/// Which GTIDs the server's binlog has: MariaDB's always, MySQL's when
/// `gtid_mode` is ON; `None` for a MySQL server without them.
async fn gtid_flavor(conn: &mut Conn) -> Result<Option<Flavor>> {
    if is_mariadb(conn).await? {
        return Ok(Some(Flavor::MariaDb));
    }
    let mode: Option<Option<String>> = conn
        .query_first("SELECT @@global.gtid_mode")
        .await
        .map_err(|e| query_error("read gtid_mode", e))?;
    Ok(mode
        .flatten()
        .filter(|m| m.eq_ignore_ascii_case("ON"))
        .map(|_| Flavor::MySql))
}

/// MariaDB's GTID state at `offset` of binlog file `file`
/// (`BINLOG_GTID_POS`); `None` when the server cannot say (the file is
/// gone, or the offset is not between two events).
async fn mariadb_gtid_at(conn: &mut Conn, file: &str, offset: u32) -> Result<Option<GtidList>> {
    let what = || format!("map binlog position {file}:{offset} to GTIDs (BINLOG_GTID_POS)");
    let text: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, offset))
        .await
        .map_err(|e| query_error(&what(), e))?;
    match text.flatten() {
        None => Ok(None),
        Some(text) => GtidList::parse(&text)
            .map(Some)
            .map_err(|message| PipelineError::Database {
                context: what(),
                message,
            }),
    }
}

/// Where a stream starts on this server now: the binlog's end, as a GTID
/// state when the server has GTIDs (`flavor`), else as a file and offset.
async fn current_start(
    conn: &mut Conn,
    flavor: Option<Flavor>,
) -> Result<(Position, Option<GtidState>)> {
    let (file, offset, executed) = master_status(conn).await?;
    let state = match flavor {
        None => return Ok((file_position(&file, offset)?, None)),
        Some(Flavor::MariaDb) => mariadb_gtid_at(conn, &file, offset)
            .await?
            .map(GtidState::MariaDb)
            .ok_or_else(|| PipelineError::Database {
                context: "read the binlog's GTID position".into(),
                message: format!("BINLOG_GTID_POS('{file}', {offset}) is NULL"),
            })?,
        Some(Flavor::MySql) => GtidState::MySql(
            GtidSet::parse(executed.as_deref().unwrap_or_default()).map_err(|message| {
                PipelineError::Database {
                    context: "read the executed GTID set (SHOW MASTER STATUS)".into(),
                    message,
                }
            })?,
        ),
    };
    Ok((state_position(&state)?, Some(state)))
}

/// Whether the server is MariaDB.
async fn is_mariadb(conn: &mut Conn) -> Result<bool> {
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(|e| query_error("read the server version", e))?;
    Ok(version.is_some_and(|v| v.contains("MariaDB")))
}

/// `CREATE SOURCE ... FROM MYSQL`: checks that the server logs full row
/// images with their metadata and that the user may read the binlog and
/// the tables; returns the binlog's current position, where the source's
/// stream starts, with the GTID state it stands for when the server has
/// GTIDs (the source's resume state, [`Store::insert_source_resuming`]).
///
/// [`Store::insert_source_resuming`]: crate::store::Store::insert_source_resuming
pub async fn check_server(
    source: &str,
    name: &str,
    connection: &Connection,
) -> Result<(Position, Option<String>)> {
    let mut conn = connect(name, connection).await?;
    type Settings = (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let settings: Option<Settings> = conn
        .query_first(
            "SELECT CAST(@@global.log_bin AS CHAR), @@global.binlog_format, \
             @@global.binlog_row_image, @@global.binlog_row_metadata",
        )
        .await
        .map_err(|e| {
            let message = e.to_string();
            if message.contains("binlog_row_metadata") {
                PipelineError::Refused {
                    sqlstate: "0A000",
                    primary: format!(
                        "MySQL source \"{source}\" needs binlog_row_metadata, which connection \"{name}\"'s server does not have"
                    ),
                    detail: Some(message),
                    hint: Some("Use MySQL 8.0.1 or later, or MariaDB 10.5 or later.".into()),
                }
            } else {
                query_error("read the binlog settings", e)
            }
        })?;
    let (log_bin, format, image, metadata) = settings.unwrap_or_default();
    let mut wrong = Vec::new();
    let mut fixes = Vec::new();
    let is =
        |v: &Option<String>, want: &str| v.as_deref().is_some_and(|v| v.eq_ignore_ascii_case(want));
    if !is(&log_bin, "1") && !is(&log_bin, "ON") {
        wrong.push("log_bin is OFF".to_string());
        fixes.push("set log_bin in the server's configuration file and restart it".to_string());
    }
    for (setting, value, want) in [
        ("binlog_format", &format, "ROW"),
        ("binlog_row_image", &image, "FULL"),
        ("binlog_row_metadata", &metadata, "FULL"),
    ] {
        if !is(value, want) {
            wrong.push(format!(
                "{setting} is {}",
                value.as_deref().unwrap_or("unset")
            ));
            fixes.push(format!("SET GLOBAL {setting} = '{want}'"));
        }
    }
    if !wrong.is_empty() {
        return Err(PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "MySQL source \"{source}\" cannot read connection \"{name}\"'s binlog: {}",
                wrong.join(", ")
            ),
            detail: Some(
                "evolve reads full row images with their column names: it needs log_bin = ON, binlog_format = ROW, binlog_row_image = FULL and binlog_row_metadata = FULL.".into(),
            ),
            hint: Some(format!(
                "{}; set them in the server's configuration file too, so that a restart keeps them (sessions already open keep their binlog_format).",
                fixes.join("; ")
            )),
        });
    }
    let granted: Vec<Option<String>> = conn
        .query(
            "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES \
             WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                                    SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
             UNION SELECT CONCAT('SCHEMA ', PRIVILEGE_TYPE) FROM information_schema.SCHEMA_PRIVILEGES \
             WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                                    SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')",
        )
        .await
        .map_err(|e| query_error("read the user's privileges", e))?;
    let has = |p: &str| granted.iter().any(|g| g.as_deref() == Some(p));
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") {
        missing.push("REPLICATION SLAVE");
    }
    if !has("REPLICATION CLIENT") && !has("BINLOG MONITOR") {
        missing.push("REPLICATION CLIENT");
    }
    if !has("SELECT") && !has("SCHEMA SELECT") {
        missing.push("SELECT");
    }
    // A MySQL snapshot starts under a table lock (see `locked_start`).
    let mariadb = is_mariadb(&mut conn).await?;
    if !mariadb && !has("LOCK TABLES") && !has("SCHEMA LOCK TABLES") {
        missing.push("LOCK TABLES");
    }
    if !missing.is_empty() {
        let user: Option<String> = conn
            .query_first("SELECT CURRENT_USER()")
            .await
            .ok()
            .flatten();
        let user = user.unwrap_or_default();
        let quoted = match user.rsplit_once('@') {
            Some((u, h)) => format!("'{u}'@'{h}'"),
            None => format!("'{user}'"),
        };
        return Err(PipelineError::Refused {
            sqlstate: "42501",
            primary: format!(
                "MySQL source \"{source}\": user {quoted} of connection \"{name}\" lacks {}",
                missing.join(", ")
            ),
            detail: Some("Reading the binlog needs REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB), and snapshots need SELECT on the tables (and LOCK TABLES on MySQL, whose snapshot starts under a table lock).".into()),
            hint: Some(format!("GRANT {} ON *.* TO {quoted};", missing.join(", "))),
        });
    }
    let flavor = gtid_flavor(&mut conn).await?;
    let (position, state) = current_start(&mut conn, flavor).await?;
    // Read after the start: an XA transaction prepared now was logged
    // before it (at XA PREPARE), and its XA COMMIT would bring changes the
    // stream never read. `XA RECOVER` shows every user's transactions to
    // a user who may see them; one who may not sees only their own.
    let prepared: Vec<mysql_async::Row> = conn
        .query("XA RECOVER FORMAT='SQL'")
        .await
        .unwrap_or_default();
    let _ = conn.disconnect().await;
    if !prepared.is_empty() {
        let xids: Vec<String> = prepared
            .iter()
            .take(5)
            .map(|row| match row.as_ref(3) {
                Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => "?".into(),
            })
            .collect();
        return Err(PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "MySQL source \"{source}\" cannot start while connection \"{name}\"'s server has {} prepared XA transaction(s): {}",
                prepared.len(),
                xids.join(", ")
            ),
            detail: Some("A prepared XA transaction's changes are logged at XA PREPARE, before the binlog position a new source starts from, so its XA COMMIT would bring changes the source never read.".into()),
            hint: Some("End them first (XA COMMIT or XA ROLLBACK with the xid XA RECOVER lists), then create the source again.".into()),
        });
    }
    Ok((position, state.map(|s| s.to_string())))
}

// ------------------------------------------------------------ types

/// How one column's values become text.
#[derive(Clone, Debug, PartialEq)]
enum Conv {
    Integer,
    /// A signed MEDIUMINT from the binlog: mysql_common reads its three
    /// bytes without sign extension.
    Int24,
    Decimal,
    Float,
    Double,
    Year,
    Date,
    DateTime,
    /// The binlog sends epoch seconds (`epoch`); a snapshot a UTC datetime.
    Timestamp {
        epoch: bool,
    },
    Time,
    Bit {
        bits: u32,
    },
    Text {
        charset: Charset,
    },
    Bytes {
        /// BINARY(n): the binlog drops trailing zero bytes.
        pad: Option<usize>,
    },
    Enum(Arc<[String]>),
    Set(Arc<[String]>),
    Json,
    /// MariaDB's UUID: its 16 bytes (`record`, from the binlog) or its
    /// text (a snapshot).
    Uuid {
        record: bool,
    },
    /// MariaDB's INET4 (`len` 4) and INET6 (`len` 16): the address's bytes
    /// in network order (`record`, from the binlog) or its text (a
    /// snapshot).
    Inet {
        len: usize,
        record: bool,
    },
    /// No mapping: refused at CREATE TABLE unless excluded.
    Unsupported,
}

/// A MariaDB column whose binlog type says less than its declared type:
/// JSON is `longtext` with a `json_valid` check, UUID, INET4 and INET6
/// are fixed binary strings. Read from the catalog
/// (`CatalogColumn::declared`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Declared {
    Json,
    Uuid,
    Inet4,
    Inet6,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Charset {
    Utf8,
    Latin1,
    Other,
}

fn charset_of(name: &str) -> Charset {
    match name {
        "utf8mb4" | "utf8mb3" | "utf8" | "ascii" => Charset::Utf8,
        "latin1" => Charset::Latin1,
        _ => Charset::Other,
    }
}

const INT2: u32 = 21;
const INT4: u32 = 23;
const INT8: u32 = 20;
const NUMERIC: u32 = 1700;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const BIT: u32 = 1560;
const TEXT: u32 = 25;
const BYTEA: u32 = 17;
const DATE: u32 = 1082;
const INTERVAL: u32 = 1186;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const UUID: u32 = 2950;
const INET: u32 = 869;
const JSONB: u32 = 3802;

/// The PostgreSQL type (OID, typmod) and conversion of a column described
/// by `information_schema.COLUMNS`; `None` for a type without a mapping.
fn map_catalog_type(
    data_type: &str,
    column_type: &str,
    charset: Option<&str>,
    bits: Option<u64>,
    json: bool,
) -> Option<(u32, i32, Conv)> {
    let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
    let text = |charset: Option<&str>| Conv::Text {
        charset: charset_of(charset.unwrap_or("utf8mb4")),
    };
    Some(match data_type.to_ascii_lowercase().as_str() {
        "tinyint" => (INT2, -1, Conv::Integer),
        "smallint" if unsigned => (INT4, -1, Conv::Integer),
        "smallint" => (INT2, -1, Conv::Integer),
        "mediumint" => (INT4, -1, Conv::Integer),
        "int" | "integer" if unsigned => (INT8, -1, Conv::Integer),
        "int" | "integer" => (INT4, -1, Conv::Integer),
        "bigint" if unsigned => (NUMERIC, -1, Conv::Integer),
        "bigint" => (INT8, -1, Conv::Integer),
        "decimal" | "numeric" => (NUMERIC, -1, Conv::Decimal),
        "float" => (FLOAT4, -1, Conv::Float),
        "double" | "real" | "double precision" => (FLOAT8, -1, Conv::Double),
        "year" => (INT2, -1, Conv::Year),
        "date" => (DATE, -1, Conv::Date),
        "time" => (INTERVAL, -1, Conv::Time),
        "datetime" => (TIMESTAMP, -1, Conv::DateTime),
        "timestamp" => (TIMESTAMPTZ, -1, Conv::Timestamp { epoch: false }),
        "bit" => {
            let bits = bits.unwrap_or(1).clamp(1, 64) as u32;
            (BIT, bits as i32, Conv::Bit { bits })
        }
        // A snapshot reads ENUM and SET as their text.
        "enum" | "set" => (TEXT, -1, text(Some("utf8mb4"))),
        "json" => (JSONB, -1, Conv::Json),
        "uuid" => (UUID, -1, Conv::Uuid { record: false }),
        "inet4" => (
            INET,
            -1,
            Conv::Inet {
                len: 4,
                record: false,
            },
        ),
        "inet6" => (
            INET,
            -1,
            Conv::Inet {
                len: 16,
                record: false,
            },
        ),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" if json => {
            (JSONB, -1, text(charset))
        }
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => {
            (TEXT, -1, text(charset))
        }
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "geometry"
        | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" => (BYTEA, -1, Conv::Bytes { pad: None }),
        _ => return None,
    })
}

/// The PostgreSQL type and conversion of column `i` of a table map.
fn map_binlog_type(
    column_type: ColumnType,
    meta: &[u8],
    unsigned: bool,
    charset: Option<&str>,
    declared: Option<Declared>,
    enum_values: Option<Arc<[String]>>,
    set_values: Option<Arc<[String]>>,
) -> (u32, i32, Conv) {
    use ColumnType::*;
    let meta_at = |i: usize| usize::from(meta.get(i).copied().unwrap_or(0));
    match column_type {
        MYSQL_TYPE_TINY => (INT2, -1, Conv::Integer),
        MYSQL_TYPE_SHORT if unsigned => (INT4, -1, Conv::Integer),
        MYSQL_TYPE_SHORT => (INT2, -1, Conv::Integer),
        MYSQL_TYPE_INT24 if unsigned => (INT4, -1, Conv::Integer),
        MYSQL_TYPE_INT24 => (INT4, -1, Conv::Int24),
        MYSQL_TYPE_LONG if unsigned => (INT8, -1, Conv::Integer),
        MYSQL_TYPE_LONG => (INT4, -1, Conv::Integer),
        MYSQL_TYPE_LONGLONG if unsigned => (NUMERIC, -1, Conv::Integer),
        MYSQL_TYPE_LONGLONG => (INT8, -1, Conv::Integer),
        MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL => (NUMERIC, -1, Conv::Decimal),
        MYSQL_TYPE_FLOAT => (FLOAT4, -1, Conv::Float),
        MYSQL_TYPE_DOUBLE => (FLOAT8, -1, Conv::Double),
        MYSQL_TYPE_YEAR => (INT2, -1, Conv::Year),
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => (DATE, -1, Conv::Date),
        MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2 => (INTERVAL, -1, Conv::Time),
        MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2 => (TIMESTAMP, -1, Conv::DateTime),
        MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2 => {
            (TIMESTAMPTZ, -1, Conv::Timestamp { epoch: true })
        }
        MYSQL_TYPE_BIT => {
            let bits = (meta_at(1) * 8 + meta_at(0)).clamp(1, 64) as u32;
            (BIT, bits as i32, Conv::Bit { bits })
        }
        MYSQL_TYPE_ENUM => (TEXT, -1, enum_values.map_or(Conv::Unsupported, Conv::Enum)),
        MYSQL_TYPE_SET => (TEXT, -1, set_values.map_or(Conv::Unsupported, Conv::Set)),
        MYSQL_TYPE_JSON => (JSONB, -1, Conv::Json),
        MYSQL_TYPE_GEOMETRY => (BYTEA, -1, Conv::Bytes { pad: None }),
        MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB => match charset {
            Some("binary") if declared == Some(Declared::Uuid) => {
                (UUID, -1, Conv::Uuid { record: true })
            }
            Some("binary") if matches!(declared, Some(Declared::Inet4 | Declared::Inet6)) => {
                let len = if declared == Some(Declared::Inet4) {
                    4
                } else {
                    16
                };
                (INET, -1, Conv::Inet { len, record: true })
            }
            Some("binary") => {
                let pad = (column_type == MYSQL_TYPE_STRING).then(|| string_length(meta));
                (BYTEA, -1, Conv::Bytes { pad })
            }
            other => {
                let conv = Conv::Text {
                    charset: charset_of(other.unwrap_or("utf8mb4")),
                };
                let json = declared == Some(Declared::Json);
                (if json { JSONB } else { TEXT }, -1, conv)
            }
        },
        _ => (TEXT, -1, Conv::Unsupported),
    }
}

/// A CHAR/BINARY column's length in bytes from its table-map metadata.
fn string_length(meta: &[u8]) -> usize {
    let byte0 = usize::from(meta.first().copied().unwrap_or(0));
    let byte1 = usize::from(meta.get(1).copied().unwrap_or(0));
    if (byte0 & 0x30) != 0x30 {
        byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    } else {
        byte1
    }
}

/// cp1252's 0x80..0x9F (MySQL's latin1), the rest being Latin-1.
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{81}', '\u{201A}', '\u{192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{2C6}', '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8D}', '\u{17D}', '\u{8F}',
    '\u{90}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{2DC}', '\u{2122}', '\u{161}', '\u{203A}', '\u{153}', '\u{9D}', '\u{17E}', '\u{178}',
];

fn latin1_to_utf8(bytes: &[u8]) -> Vec<u8> {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        out.push(match b {
            0x80..=0x9F => CP1252_HIGH[usize::from(b - 0x80)],
            _ => char::from(b),
        });
    }
    out.into_bytes()
}

fn hex_bytea(bytes: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(2 + bytes.len() * 2);
    out.extend_from_slice(b"\\x");
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    out
}

/// `.ffffff` without trailing zeros, empty for none.
fn fraction(micros: u32) -> String {
    if micros == 0 {
        return String::new();
    }
    let digits = format!(".{micros:06}");
    digits.trim_end_matches('0').to_string()
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Appends `v` in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut Vec<u8>, v: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = v;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for _ in (digits.len() - at)..width {
        out.push(b'0');
    }
    out.extend_from_slice(&digits[at..]);
}

/// `YYYY-MM-DD HH:MI:SS`, the fraction as [`fraction`] writes it, then
/// `zone`: what `format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}{}",
/// fraction(us))` gives, without the formatter (once per value of every
/// row the binlog sends).
#[allow(clippy::too_many_arguments)]
fn datetime_text(
    y: i64,
    mo: u32,
    d: u32,
    h: u32,
    mi: u32,
    s: u32,
    us: u32,
    zone: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    if y < 0 {
        out.push(b'-');
    }
    push_padded(&mut out, y.unsigned_abs(), if y < 0 { 3 } else { 4 });
    out.push(b'-');
    push_padded(&mut out, mo.into(), 2);
    out.push(b'-');
    push_padded(&mut out, d.into(), 2);
    out.push(b' ');
    push_padded(&mut out, h.into(), 2);
    out.push(b':');
    push_padded(&mut out, mi.into(), 2);
    out.push(b':');
    push_padded(&mut out, s.into(), 2);
    if us != 0 {
        let mut frac = [0u8; 6];
        let mut rest = us;
        for digit in frac.iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        let len = 6 - frac.iter().rev().take_while(|b| **b == b'0').count();
        out.push(b'.');
        out.extend_from_slice(&frac[..len]);
    }
    out.extend_from_slice(zone);
    out
}

fn int_text(value: &Value) -> Option<String> {
    match value {
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_string),
        _ => None,
    }
}

/// One value's text form for the mapped PostgreSQL type; `Ok(None)` for
/// NULL (and zero dates); `Err` says what could not be converted.
fn value_text(value: Value, conv: &Conv) -> std::result::Result<Option<Vec<u8>>, String> {
    if value == Value::NULL {
        return Ok(None);
    }
    let unexpected = |value: &Value| format!("unexpected value {value:?} for {conv:?}");
    let text: Vec<u8> = match conv {
        Conv::Integer | Conv::Decimal => match value {
            Value::Bytes(b) => b,
            other => int_text(&other)
                .ok_or_else(|| unexpected(&other))?
                .into_bytes(),
        },
        Conv::Float => match value {
            Value::Float(f) => f.to_string().into_bytes(),
            Value::Double(f) => (f as f32).to_string().into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Double => match value {
            Value::Double(f) => f.to_string().into_bytes(),
            Value::Float(f) => f64::from(f).to_string().into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Int24 => match value {
            Value::Int(v) if v >= 1 << 23 => (v - (1 << 24)).to_string().into_bytes(),
            other => int_text(&other)
                .ok_or_else(|| unexpected(&other))?
                .into_bytes(),
        },
        Conv::Year => {
            let year = int_text(&value).ok_or_else(|| unexpected(&value))?;
            // The binlog's byte 0 is year 0000, which mysql_common reads
            // as 1900 (not a valid YEAR otherwise).
            if year == "1900" {
                "0".to_string()
            } else {
                year
            }
            .into_bytes()
        }
        Conv::Date => match value {
            Value::Date(0, 0, 0, ..) => return Ok(None),
            Value::Date(y, m, d, ..) => format!("{y:04}-{m:02}-{d:02}").into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::DateTime => match value {
            Value::Date(0, 0, 0, ..) => return Ok(None),
            Value::Date(y, mo, d, h, mi, s, us) => {
                let (mo, d, h, mi, s) = (mo.into(), d.into(), h.into(), mi.into(), s.into());
                datetime_text(y.into(), mo, d, h, mi, s, us, b"")
            }
            other => return Err(unexpected(&other)),
        },
        Conv::Timestamp { epoch: true } => {
            let Value::Bytes(b) = &value else {
                return Err(unexpected(&value));
            };
            let text = std::str::from_utf8(b).map_err(|_| unexpected(&value))?;
            let (secs, micros) = text.split_once('.').unwrap_or((text, "0"));
            let secs: i64 = secs.parse().map_err(|_| unexpected(&value))?;
            let micros: u32 = micros.parse().map_err(|_| unexpected(&value))?;
            if secs == 0 && micros == 0 {
                return Ok(None);
            }
            let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
            let t = secs.rem_euclid(86_400) as u32;
            datetime_text(y, mo, d, t / 3600, t % 3600 / 60, t % 60, micros, b"+00")
        }
        Conv::Timestamp { epoch: false } => match value {
            Value::Date(0, 0, 0, ..) => return Ok(None),
            Value::Date(y, mo, d, h, mi, s, us) => {
                let (mo, d, h, mi, s) = (mo.into(), d.into(), h.into(), mi.into(), s.into());
                datetime_text(y.into(), mo, d, h, mi, s, us, b"+00")
            }
            other => return Err(unexpected(&other)),
        },
        Conv::Time => match value {
            Value::Time(negative, days, h, m, s, us) => format!(
                "{}{:02}:{m:02}:{s:02}{}",
                if negative { "-" } else { "" },
                u64::from(days) * 24 + u64::from(h),
                fraction(us)
            )
            .into_bytes(),
            other => return Err(unexpected(&other)),
        },
        Conv::Bit { bits } => {
            let bytes = match value {
                Value::Bytes(b) => b,
                Value::Int(i) => i.to_be_bytes().to_vec(),
                Value::UInt(u) => u.to_be_bytes().to_vec(),
                other => return Err(unexpected(&other)),
            };
            let total = bytes.len() * 8;
            let bits = *bits as usize;
            (0..bits)
                .map(|i| {
                    // The last `bits` bits, most significant first.
                    let at = (total + i).checked_sub(bits);
                    let set = at.is_some_and(|at| bytes[at / 8] & (0x80 >> (at % 8)) != 0);
                    if set { b'1' } else { b'0' }
                })
                .collect()
        }
        Conv::Text { charset } => {
            let Value::Bytes(b) = value else {
                return Err(unexpected(&value));
            };
            match charset {
                Charset::Utf8 => match String::from_utf8(b) {
                    Ok(s) => s.into_bytes(),
                    Err(_) => return Err("a text value is not valid UTF-8".into()),
                },
                Charset::Latin1 => latin1_to_utf8(&b),
                Charset::Other => {
                    return Err("a text value is in a charset evolve does not convert".into());
                }
            }
        }
        Conv::Bytes { pad } => {
            let Value::Bytes(mut b) = value else {
                return Err(unexpected(&value));
            };
            if let Some(n) = pad
                && b.len() < *n
            {
                b.resize(*n, 0);
            }
            hex_bytea(&b)
        }
        Conv::Enum(names) => match value {
            Value::Int(0) | Value::UInt(0) => Vec::new(),
            Value::Int(i) => names
                .get(usize::try_from(i - 1).unwrap_or(usize::MAX))
                .ok_or_else(|| format!("ENUM index {i} is out of range"))?
                .clone()
                .into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Set(names) => match value {
            Value::Bytes(b) => {
                let mut members = Vec::new();
                for (i, name) in names.iter().enumerate() {
                    if b.get(i / 8).is_some_and(|byte| byte & (1 << (i % 8)) != 0) {
                        members.push(name.as_str());
                    }
                }
                members.join(",").into_bytes()
            }
            other => return Err(unexpected(&other)),
        },
        Conv::Json => match value {
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Uuid { record } => {
            let Value::Bytes(b) = value else {
                return Err(unexpected(&value));
            };
            let bytes = if *record {
                uuid_from_binlog(&b)
            } else {
                uuid_from_text(&b)
            }
            .ok_or_else(|| format!("{} is not a UUID", String::from_utf8_lossy(&b)))?;
            uuid_text(&bytes).into_bytes()
        }
        Conv::Inet { len, record } => {
            let Value::Bytes(mut b) = value else {
                return Err(unexpected(&value));
            };
            let address = if *record {
                // A fixed binary string: the binlog drops its trailing zero bytes.
                if b.len() > *len {
                    return Err(format!("{} bytes for an address of {len}", b.len()));
                }
                b.resize(*len, 0);
                match <[u8; 4]>::try_from(b.as_slice()) {
                    Ok(v4) => std::net::IpAddr::from(v4),
                    Err(_) => std::net::IpAddr::from(
                        <[u8; 16]>::try_from(b.as_slice())
                            .map_err(|_| format!("{} bytes for an address of {len}", b.len()))?,
                    ),
                }
            } else {
                std::str::from_utf8(&b)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        format!("{} is not an IP address", String::from_utf8_lossy(&b))
                    })?
            };
            inet_text(address).into_bytes()
        }
        Conv::Unsupported => return Err("a value of a type evolve does not map".into()),
    };
    Ok(Some(text))
}

/// A MariaDB UUID's bytes from the binlog: the server writes its
/// canonical byte order there (whatever order its records keep, so that
/// a UUID replicates into a BINARY(16)), without trailing zero bytes.
fn uuid_from_binlog(bytes: &[u8]) -> Option<[u8; 16]> {
    if bytes.len() > 16 {
        return None;
    }
    let mut out = [0u8; 16];
    out[..bytes.len()].copy_from_slice(bytes);
    Some(out)
}

/// A UUID's bytes from its text (32 hex digits, dashes anywhere).
fn uuid_from_text(text: &[u8]) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut digits = text.iter().filter(|&&c| c != b'-');
    for byte in &mut out {
        let hi = char::from(*digits.next()?).to_digit(16)?;
        let lo = char::from(*digits.next()?).to_digit(16)?;
        *byte = (hi * 16 + lo) as u8;
    }
    digits.next().is_none().then_some(out)
}

/// PostgreSQL's text of a `uuid`: lowercase, `8-4-4-4-12`.
fn uuid_text(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// PostgreSQL's text of an `inet` of a single address (no prefix shown):
/// IPv4 dotted; IPv6 in lowercase hex groups without leading zeros, the
/// first longest run of at least two zero groups as `::`, and the last 32
/// bits dotted when the address is IPv4-compatible (`::a.b.c.d`, six zero
/// groups before them) or IPv4-mapped (`::ffff:a.b.c.d`), as its
/// `inet_net_ntop` writes them.
fn inet_text(address: std::net::IpAddr) -> String {
    let v6 = match address {
        std::net::IpAddr::V4(v4) => return v4.to_string(),
        std::net::IpAddr::V6(v6) => v6,
    };
    let words = v6.segments();
    // The first longest run of zero words, at least two long.
    // (first word, length) of zero runs.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, w) in words.iter().enumerate() {
        if *w == 0 {
            cur = Some(cur.map_or((i, 1), |(base, len)| (base, len + 1)));
        } else if let Some(c) = cur.take()
            && best.is_none_or(|b| c.1 > b.1)
        {
            best = Some(c);
        }
    }
    if let Some(c) = cur
        && best.is_none_or(|b| c.1 > b.1)
    {
        best = Some(c);
    }
    let best = best.filter(|b| b.1 >= 2);
    let mut out = String::with_capacity(40);
    for (i, w) in words.iter().enumerate() {
        if let Some((base, len)) = best
            && (base..base + len).contains(&i)
        {
            if i == base {
                out.push(':');
            }
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6
            && let Some((0, len)) = best
            && (len == 6 || (len == 5 && words[5] == 0xffff))
        {
            let o = v6.octets();
            out.push_str(&format!("{}.{}.{}.{}", o[12], o[13], o[14], o[15]));
            return out;
        }
        out.push_str(&format!("{w:x}"));
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        out.push(':');
    }
    out
}

// ------------------------------------------------------------ CREATE TABLE

/// `CREATE TABLE ... FROM SOURCE` of a MySQL source: the table's columns
/// from `information_schema`, mapped to PostgreSQL types; refuses a table
/// that is not there, has no primary key, or has a column evolve cannot
/// map that is not in `exclude`, and checks the user may read it.
pub async fn inspect_table(
    source: &str,
    name: &str,
    connection: &Connection,
    database: &str,
    table: &str,
    exclude: &[String],
) -> Result<UpstreamTable> {
    let reference = format!("{database}.{table}");
    let mut conn = connect(name, connection).await?;
    let Some(found) = catalog_columns(&mut conn, database, table).await? else {
        return Err(PipelineError::UpstreamTableNotFound {
            reference,
            source_name: source.to_string(),
        });
    };
    let mut columns = Vec::new();
    for c in found {
        let excluded = exclude.contains(&c.name);
        if let Some(charset) = c.unconverted_charset
            && !excluded
        {
            return Err(PipelineError::BadColumn {
                reference,
                column: c.name,
                reason: format!(
                    "is in charset {charset}, which evolve does not convert to UTF-8 (utf8mb4, utf8mb3, ascii and latin1 are); convert the column or list it in EXCLUDE COLUMNS"
                ),
            });
        }
        let (oid, typmod) = match (c.type_oid, excluded) {
            (0, true) => (TEXT, -1),
            (0, false) => {
                return Err(PipelineError::BadColumn {
                    reference,
                    column: c.name,
                    reason: format!(
                        "has type {}, which evolve does not map to a PostgreSQL type yet; list it in EXCLUDE COLUMNS",
                        c.column_type
                    ),
                });
            }
            (oid, _) => (oid, c.typmod),
        };
        columns.push(ColumnInfo {
            name: c.name,
            attnum: c.ordinal,
            type_oid: oid,
            typmod,
            type_name: c.column_type,
            not_null: c.not_null,
            kind: TypeKind::from_builtin_oid(oid),
            excluded: false,
            as_text: false,
            key: c.key,
        });
    }
    if !columns.iter().any(|c| c.key) {
        return Err(PipelineError::Refused {
            sqlstate: "55000",
            primary: format!("upstream table \"{reference}\" has no primary key"),
            detail: Some(
                "Documents are keyed by the upstream primary key, and the binlog's updates and deletes are matched to them by it.".into(),
            ),
            hint: Some(format!(
                "Add one (ALTER TABLE `{}`.`{}` ADD PRIMARY KEY (...)), then create the table again.",
                database.replace('`', "``"),
                table.replace('`', "``")
            )),
        });
    }
    conn.query_drop(format!(
        "SELECT 1 FROM {} LIMIT 0",
        quoted_table(database, table)
    ))
    .await
    .map_err(|e| query_error(&format!("read {reference} (SELECT)"), e))?;
    let _ = conn.disconnect().await;
    Ok(UpstreamTable {
        oid: table_id(database, table),
        schema: database.to_string(),
        name: table.to_string(),
        columns,
        generated: Vec::new(),
    })
}

/// MariaDB's JSON columns: `longtext` with a `json_valid` check named after
/// the column. None on MySQL, whose JSON is a type of its own.
async fn json_columns(conn: &mut Conn, database: &str, table: &str) -> Result<HashSet<String>> {
    if !is_mariadb(conn).await? {
        return Ok(HashSet::new());
    }
    let names: Vec<Option<String>> = conn
        .exec(
            "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ? \
               AND CHECK_CLAUSE = CONCAT('json_valid(`', CONSTRAINT_NAME, '`)')",
            (database, table),
        )
        .await
        .map_err(|e| query_error("read the JSON columns (CHECK_CONSTRAINTS)", e))?;
    Ok(names.into_iter().flatten().collect())
}

/// One column as `information_schema.COLUMNS` has it now, mapped.
struct CatalogColumn {
    name: String,
    ordinal: i16,
    /// The mapped PostgreSQL type; 0 for a type without a mapping.
    type_oid: u32,
    typmod: i32,
    /// `COLUMN_TYPE`, e.g. `int(11) unsigned`.
    column_type: String,
    key: bool,
    not_null: bool,
    /// A text column's charset that evolve does not convert to UTF-8.
    unconverted_charset: Option<String>,
    /// A type the binlog does not show (MariaDB's JSON, UUID, INET).
    declared: Option<Declared>,
}

/// The columns of base table `database.table` now, in ordinal order;
/// `None` when there is no such base table.
async fn catalog_columns(
    conn: &mut Conn,
    database: &str,
    table: &str,
) -> Result<Option<Vec<CatalogColumn>>> {
    // Every column is read as nullable: a server that sends NULL where
    // it should not gets an error below, not a panic in the client.
    type Row = (
        Option<String>,
        Option<u64>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<u64>,
    );
    let rows: Vec<Row> = conn
        .exec(
            "SELECT COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY, \
                    CHARACTER_SET_NAME, NUMERIC_PRECISION \
             FROM information_schema.COLUMNS c \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
               AND EXISTS (SELECT 1 FROM information_schema.TABLES t \
                           WHERE t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
                             AND t.TABLE_TYPE = 'BASE TABLE') \
             ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(|e| query_error(&format!("read the columns of {database}.{table}"), e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let json = json_columns(conn, database, table).await?;
    let mut out = Vec::with_capacity(rows.len());
    for (name, ordinal, data_type, column_type, nullable, key, charset, precision) in rows {
        let (Some(name), Some(ordinal), Some(data_type), Some(column_type)) =
            (name, ordinal, data_type, column_type)
        else {
            return Err(PipelineError::Database {
                context: format!("read the columns of {database}.{table}"),
                message: "information_schema.COLUMNS has a NULL name or type".into(),
            });
        };
        let mapped = map_catalog_type(
            &data_type,
            &column_type,
            charset.as_deref(),
            precision,
            json.contains(&name),
        );
        let declared = match data_type.to_ascii_lowercase().as_str() {
            _ if json.contains(&name) => Some(Declared::Json),
            "uuid" => Some(Declared::Uuid),
            "inet4" => Some(Declared::Inet4),
            "inet6" => Some(Declared::Inet6),
            _ => None,
        };
        let unconverted_charset = match &mapped {
            Some((
                _,
                _,
                Conv::Text {
                    charset: Charset::Other,
                },
            )) => Some(charset.clone().unwrap_or_default()),
            _ => None,
        };
        let (type_oid, typmod) = mapped.map_or((0, -1), |(oid, typmod, _)| (oid, typmod));
        out.push(CatalogColumn {
            name,
            ordinal: i16::try_from(ordinal).unwrap_or(i16::MAX),
            type_oid,
            typmod,
            column_type,
            key: key.as_deref() == Some("PRI"),
            not_null: nullable.as_deref() == Some("NO"),
            unconverted_charset,
            declared,
        });
    }
    Ok(Some(out))
}

/// Drift polls of a MySQL source's tables (see [`crate::drift`]): what
/// `information_schema` says of each table now, in `tables`' order, read
/// in one session.
///
/// MySQL has neither table OIDs nor stable column numbers: a table is
/// found by its pinned `database.table` (a renamed or dropped one is
/// [`Upstream::Missing`]; the stream has stalled it already, see the
/// module docs), and `ORDINAL_POSITION` moves whenever a column before it
/// is dropped or one is added `FIRST` or `AFTER` another. So a column of a
/// pinned name gets the pinned attnum (it is compared by name and type),
/// and only columns of other names keep their ordinal, which shows a
/// renamed column (`RENAME COLUMN` keeps its position) as renamed. A
/// column dropped and re-added under the same name and type looks the
/// same as before in the catalog; the binlog's DDL shows it, and the
/// stream stalls the table at the drop.
pub async fn read_upstreams(
    name: &str,
    connection: &Connection,
    tables: &[TableInfo],
    now: &HashMap<u32, Arc<TableSchema>>,
) -> Result<Vec<Upstream>> {
    let mut conn = connect(name, connection).await?;
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        // Under the name the stream followed a renamed table to.
        let (database, table_name) = now
            .get(&table.upstream_oid)
            .filter(|s| !s.columns.is_empty())
            .map_or((&table.upstream_schema, &table.upstream_table), |s| {
                (&s.schema, &s.name)
            });
        let columns = catalog_columns(&mut conn, database, table_name).await?;
        out.push(match columns {
            None => Upstream::Missing {
                recreated_oid: None,
            },
            Some(columns) => Upstream::Found {
                schema: database.clone(),
                name: table_name.clone(),
                columns: columns
                    .into_iter()
                    .map(|c| UpstreamColumn {
                        attnum: table
                            .columns
                            .iter()
                            .find(|p| p.name == c.name)
                            .map_or(c.ordinal, |p| p.attnum),
                        name: c.name,
                        type_oid: c.type_oid,
                        typmod: c.typmod,
                        type_name: c.column_type,
                    })
                    .collect(),
            },
        });
    }
    let _ = conn.disconnect().await;
    Ok(out)
}

/// Table `database.table`'s catalog `columns` as a schema (what the stream
/// starts from for a table whose table map it has not seen yet).
fn catalog_schema(database: &str, table: &str, columns: &[CatalogColumn]) -> Arc<TableSchema> {
    Arc::new(TableSchema {
        schema: database.to_string(),
        name: table.to_string(),
        columns: columns
            .iter()
            .map(|c| ColumnSchema {
                name: c.name.clone(),
                type_oid: if c.type_oid == 0 { TEXT } else { c.type_oid },
                typmod: c.typmod,
                key: c.key,
            })
            .collect(),
    })
}

/// The table of a `TRUNCATE [TABLE] [db.]name` statement (comments and
/// white space around it skipped, backquotes undone), with `default` as
/// its database when it names none; `None` for any other statement.
fn truncated_table(sql: &str, default: &str) -> Option<(String, String)> {
    fn skip(rest: &str) -> &str {
        let mut rest = rest.trim_start();
        while let Some(tail) = rest.strip_prefix("/*") {
            rest = tail
                .split_once("*/")
                .map_or("", |(_, after)| after)
                .trim_start();
        }
        rest
    }
    fn word<'a>(rest: &'a str, want: &str) -> Option<&'a str> {
        let head = rest.get(..want.len())?;
        let after = &rest[want.len()..];
        (head.eq_ignore_ascii_case(want)
            && !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$'))
        .then_some(after)
    }
    fn name(rest: &str) -> Option<(String, &str)> {
        if let Some(mut tail) = rest.strip_prefix('`') {
            let mut out = String::new();
            loop {
                let (part, after) = tail.split_once('`')?;
                out.push_str(part);
                if let Some(after) = after.strip_prefix('`') {
                    out.push('`');
                    tail = after;
                } else {
                    return Some((out, after));
                }
            }
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(rest.len());
        (end > 0).then(|| (rest[..end].to_string(), &rest[end..]))
    }
    let rest = word(skip(sql), "truncate")?;
    let rest = skip(rest);
    let rest = word(rest, "table").map_or(rest, skip);
    let (first, rest) = name(rest)?;
    let (database, table, rest) = match skip(rest).strip_prefix('.') {
        Some(after) => {
            let (second, rest) = name(skip(after))?;
            (first, second, rest)
        }
        None => (default.to_string(), first, rest),
    };
    skip(rest)
        .trim_end_matches(|c: char| c == ';' || c.is_whitespace())
        .is_empty()
        .then_some((database, table))
}

// ------------------------------------------------------------ DDL

/// A token of a DDL statement.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// A bare word: a keyword, a name or a number.
    Word(String),
    /// A `backquoted` name, its quotes undone.
    Quoted(String),
    /// A string literal (its text does not matter here).
    Literal,
    /// Any other character.
    Punct(char),
}

/// The tokens of `sql`: comments skipped, except the text of MySQL's
/// executable comments (`/*!50100 ... */`, MariaDB's `/*M!100100 ... */`),
/// which the server runs.
fn tokens(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = at(i) {
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == Some('*') {
            let mut j = i + 2;
            let executable = match (at(j), at(j + 1)) {
                (Some('!'), _) => {
                    j += 1;
                    true
                }
                (Some('M'), Some('!')) => {
                    j += 2;
                    true
                }
                _ => false,
            };
            if executable {
                while at(j).is_some_and(|c| c.is_ascii_digit()) {
                    j += 1;
                }
                i = j;
            } else {
                i = j;
                while i < chars.len() && !(at(i) == Some('*') && at(i + 1) == Some('/')) {
                    i += 1;
                }
                i += 2;
            }
        } else if c == '*' && at(i + 1) == Some('/') {
            // The end of an executable comment.
            i += 2;
        } else if c == '#'
            || (c == '-' && at(i + 1) == Some('-') && at(i + 2).is_none_or(char::is_whitespace))
        {
            while at(i).is_some_and(|c| c != '\n') {
                i += 1;
            }
        } else if c == '`' {
            let mut name = String::new();
            i += 1;
            loop {
                match at(i) {
                    None => break,
                    Some('`') if at(i + 1) == Some('`') => {
                        name.push('`');
                        i += 2;
                    }
                    Some('`') => {
                        i += 1;
                        break;
                    }
                    Some(c) => {
                        name.push(c);
                        i += 1;
                    }
                }
            }
            out.push(Token::Quoted(name));
        } else if c == '\'' || c == '"' {
            i += 1;
            loop {
                match at(i) {
                    None => break,
                    Some('\\') => i += 2,
                    Some(q) if q == c && at(i + 1) == Some(c) => i += 2,
                    Some(q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            out.push(Token::Literal);
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while at(i).is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// What a DDL statement does to the tables it names, as far as the stream
/// must know: which columns stop existing under their name, and which
/// tables stop existing under theirs.
#[derive(Clone, Debug, PartialEq)]
enum Ddl {
    /// Columns of `table` dropped, or renamed away (`CHANGE`, `RENAME
    /// COLUMN`).
    Columns {
        table: (String, String),
        removed: Vec<String>,
    },
    /// `table` dropped (`to: None`) or renamed to `to`.
    Gone {
        table: (String, String),
        to: Option<(String, String)>,
    },
}

/// A cursor over a statement's tokens.
struct Tokens<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl<'a> Tokens<'a> {
    fn peek(&self, ahead: usize) -> Option<&'a Token> {
        self.tokens.get(self.at + ahead)
    }

    fn is(&self, ahead: usize, keyword: &str) -> bool {
        matches!(self.peek(ahead), Some(Token::Word(w)) if w.eq_ignore_ascii_case(keyword))
    }

    /// Takes `keyword` if it is next.
    fn take(&mut self, keyword: &str) -> bool {
        let found = self.is(0, keyword);
        if found {
            self.at += 1;
        }
        found
    }

    /// Takes `IF EXISTS` if it is next.
    fn if_exists(&mut self) {
        if self.is(0, "if") && self.is(1, "exists") {
            self.at += 2;
        }
    }

    fn name(&mut self) -> Option<String> {
        let name = match self.peek(0)? {
            Token::Word(w) | Token::Quoted(w) => w.clone(),
            _ => return None,
        };
        self.at += 1;
        Some(name)
    }

    /// `[database.]table`, with `default` as its database.
    fn table(&mut self, default: &str) -> Option<(String, String)> {
        let first = self.name()?;
        if self.peek(0) == Some(&Token::Punct('.')) {
            self.at += 1;
            let second = self.name()?;
            return Some((first, second));
        }
        Some((default.to_string(), first))
    }

    /// MariaDB's `WAIT n` / `NOWAIT` after a table name.
    fn wait(&mut self) {
        if self.take("nowait") {
            return;
        }
        if self.is(0, "wait") {
            self.at += 2;
        }
    }

    /// The rest of the statement split at commas outside parentheses.
    fn clauses(&self) -> Vec<&'a [Token]> {
        let rest = &self.tokens[self.at.min(self.tokens.len())..];
        let mut out = Vec::new();
        let (mut depth, mut start) = (0usize, 0);
        for (i, t) in rest.iter().enumerate() {
            match t {
                Token::Punct('(') => depth += 1,
                Token::Punct(')') => depth = depth.saturating_sub(1),
                Token::Punct(',') if depth == 0 => {
                    out.push(&rest[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&rest[start..]);
        out
    }
}

/// What `sql` (a statement the binlog logged as text, run in database
/// `default`) does to columns and tables: `ALTER TABLE` with `DROP
/// [COLUMN]`, `CHANGE [COLUMN]` to another name, `RENAME COLUMN` or
/// `RENAME [TO]`; `RENAME TABLE`; `DROP TABLE`; `CREATE OR REPLACE
/// TABLE`. Anything else, and anything this reading does not recognize,
/// is nothing: the next table map shows added and retyped columns in any
/// case.
fn parse_ddl(sql: &str, default: &str) -> Vec<Ddl> {
    let tokens = tokens(sql);
    let mut t = Tokens {
        tokens: &tokens,
        at: 0,
    };
    let mut out = Vec::new();
    if t.take("alter") {
        t.take("online");
        t.take("ignore");
        if !t.take("table") {
            return out;
        }
        t.if_exists();
        let Some(table) = t.table(default) else {
            return out;
        };
        t.wait();
        let mut removed = Vec::new();
        let mut renamed = None;
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            if c.take("drop") {
                const NOT_COLUMNS: &[&str] = &[
                    "primary",
                    "index",
                    "key",
                    "foreign",
                    "constraint",
                    "check",
                    "partition",
                    "system",
                    "period",
                    "unique",
                    "fulltext",
                    "spatial",
                ];
                if NOT_COLUMNS.iter().any(|k| c.is(0, k)) {
                    continue;
                }
                c.take("column");
                c.if_exists();
                if let Some(column) = c.name() {
                    removed.push(column);
                }
            } else if c.take("change") {
                c.take("column");
                c.if_exists();
                if let (Some(old), Some(new)) = (c.name(), c.name())
                    && !old.eq_ignore_ascii_case(&new)
                {
                    removed.push(old);
                }
            } else if c.take("rename") {
                if c.take("column") {
                    c.if_exists();
                    if let Some(old) = c.name() {
                        removed.push(old);
                    }
                } else if !(c.is(0, "index") || c.is(0, "key")) {
                    if !c.take("to") {
                        c.take("as");
                    }
                    renamed = c.table(&table.0);
                }
            }
        }
        if let Some(to) = renamed {
            out.push(Ddl::Gone {
                table,
                to: Some(to),
            });
        } else if !removed.is_empty() {
            out.push(Ddl::Columns { table, removed });
        }
    } else if t.take("rename") {
        if !(t.take("table") || t.take("tables")) {
            return out;
        }
        t.if_exists();
        let mut pairs = Vec::new();
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            let Some(from) = c.table(default) else {
                continue;
            };
            c.wait();
            if c.take("to")
                && let Some(to) = c.table(default)
            {
                pairs.push((from, to));
            }
        }
        // The renames run in order: a table whose name a later rename of
        // the statement gives to another table (an online schema change's
        // cut-over, `RENAME TABLE t TO t_old, t_new TO t`) is not followed
        // to where it went: the name holds another table now.
        for (i, (from, to)) in pairs.iter().enumerate() {
            let taken = pairs[i + 1..].iter().any(|(_, later)| later == from);
            out.push(Ddl::Gone {
                table: from.clone(),
                to: (!taken).then(|| to.clone()),
            });
        }
    } else if t.take("drop") {
        if t.take("temporary") || !t.take("table") {
            return out;
        }
        t.if_exists();
        for clause in t.clauses() {
            let mut c = Tokens {
                tokens: clause,
                at: 0,
            };
            if let Some(table) = c.table(default) {
                out.push(Ddl::Gone { table, to: None });
            }
        }
    } else if t.take("create") && t.take("or") && t.take("replace") {
        if t.take("temporary") || !t.take("table") {
            return out;
        }
        if let Some(table) = t.table(default) {
            out.push(Ddl::Gone { table, to: None });
        }
    }
    out
}

fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn quoted_table(database: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(database), quote_ident(table))
}

// ------------------------------------------------------------ the swap's marker

/// The table, in the connection's database, that `APPLY REPLACEMENT`
/// writes its marker into: one row per source, keyed by the source's slot
/// name (see the module docs, "Replacement swaps").
pub const MARKER_TABLE: &str = "evolve_markers";

/// The database of a connection's url, where [`MARKER_TABLE`] lives.
fn marker_database(name: &str, connection: &Connection) -> Result<Option<String>> {
    Ok(opts(name, connection)?.db_name().map(str::to_string))
}

/// `APPLY REPLACEMENT` of a MySQL source: writes the swap's marker, one
/// row of [`MARKER_TABLE`] (created when missing), in a transaction of its
/// own, which the binlog carries in commit order with every other one;
/// the stream turns it into a [`SourceEvent::Marker`] of `prefix` and
/// `content`.
pub async fn write_marker(
    source: &str,
    name: &str,
    connection: &Connection,
    slot: &str,
    prefix: &str,
    content: &str,
) -> Result<()> {
    let Some(database) = marker_database(name, connection)? else {
        return Err(PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "APPLY REPLACEMENT for MySQL source \"{source}\" needs a database in connection \"{name}\"'s url"
            ),
            detail: Some(format!(
                "The swap happens at a row evolve writes into table {MARKER_TABLE} of that database, which the binlog carries in commit order."
            )),
            hint: Some("Write the url as mysql://user:password@host:port/database.".into()),
        });
    };
    let mut conn = connect(name, connection).await?;
    let table = quoted_table(&database, MARKER_TABLE);
    let refused = |e: mysql_async::Error| {
        let message = match &e {
            mysql_async::Error::Server(server) => server.message.clone(),
            other => other.to_string(),
        };
        PipelineError::Refused {
            sqlstate: "42501",
            primary: format!(
                "APPLY REPLACEMENT for MySQL source \"{source}\" could not write its marker into {database}.{MARKER_TABLE}"
            ),
            detail: Some(message),
            hint: Some(format!(
                "The user of connection \"{name}\" needs CREATE, INSERT and UPDATE on it: GRANT CREATE, INSERT, UPDATE ON {table} TO <user>;"
            )),
        }
    };
    let format: Option<String> = conn
        .query_first("SELECT @@session.binlog_format")
        .await
        .map_err(refused)?;
    if !format
        .as_deref()
        .is_some_and(|f| f.eq_ignore_ascii_case("ROW"))
    {
        return Err(PipelineError::Refused {
            sqlstate: "55000",
            primary: format!(
                "APPLY REPLACEMENT for MySQL source \"{source}\": connection \"{name}\"'s sessions log statements (binlog_format {}), so the marker would not reach the stream",
                format.unwrap_or_default()
            ),
            detail: None,
            hint: Some(
                "SET GLOBAL binlog_format = 'ROW', and in the server's configuration file.".into(),
            ),
        });
    }
    let exists: Option<u64> = conn
        .exec_first(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&database, MARKER_TABLE),
        )
        .await
        .map_err(refused)?;
    if exists.is_none() {
        conn.query_drop(format!(
            "CREATE TABLE IF NOT EXISTS {table} (slot VARCHAR(64) NOT NULL PRIMARY KEY, \
             seq BIGINT UNSIGNED NOT NULL, prefix VARCHAR(64) NOT NULL, \
             content VARBINARY(1024) NOT NULL) ENGINE=InnoDB"
        ))
        .await
        .map_err(refused)?;
    }
    // A row per source; `seq` makes every write a change the binlog logs.
    conn.exec_drop(
        format!(
            "INSERT INTO {table} (slot, seq, prefix, content) VALUES (?, 1, ?, ?) \
             ON DUPLICATE KEY UPDATE seq = seq + 1, prefix = VALUES(prefix), content = VALUES(content)"
        ),
        (slot, prefix, content.as_bytes()),
    )
    .await
    .map_err(refused)?;
    let _ = conn.disconnect().await;
    Ok(())
}

// ------------------------------------------------------------ the source

/// A MySQL or MariaDB source: its catalog entry, its connection, and the
/// upstream tables its catalog tables read (`(database, table)`).
pub struct MysqlSource {
    source: SourceInfo,
    connection: Connection,
    tables: Vec<(String, String)>,
}

impl MysqlSource {
    pub fn new(
        source: SourceInfo,
        connection: Connection,
        tables: Vec<(String, String)>,
    ) -> MysqlSource {
        MysqlSource {
            source,
            connection,
            tables,
        }
    }
}

/// The replica server id the source's binlog session registers with:
/// stable per source name, away from the ids servers usually get.
fn replica_server_id(source: &str) -> u32 {
    0x4500_0000 | (table_id(source, "") & 0x00ff_ffff)
}

fn purged(source: &str, needed: &str, detail: String) -> PipelineError {
    PipelineError::BinlogPurged {
        source_name: source.to_string(),
        needed: needed.to_string(),
        detail,
    }
}

/// A GTID position as errors name it: the position and its GTID state.
fn gtid_needed(position: Position, state: &dyn std::fmt::Display) -> String {
    format!("{position} (GTID {state})")
}

/// What a stream needs of the server after a GTID state, for errors: a
/// server whose binlog lacks it may be another member of the topology that
/// has it.
const GTID_ELSEWHERE: &str = "A server of the same replication topology whose binlog has the transactions after it (the old primary; a replica with log_slave_updates = ON that received them, or a lagging one once it has caught up) can serve the stream: point the source's connection in evolve.toml at it and restart the pipeline.";

/// Where a stream starts in the binlog.
enum Start {
    /// File and offset positions (a MySQL server without GTIDs).
    File { file: String, seq: u32, offset: u32 },
    /// After a GTID state.
    Gtid(GtidState),
}

impl MysqlSource {
    /// Where the stream that resumes after `from` starts: after the GTID
    /// state stored with it (`state`), or at its file and offset (a
    /// MySQL server without GTIDs; on MariaDB, a position of an older
    /// store, mapped to its GTID state with `BINLOG_GTID_POS`), or at the
    /// binlog's end for a source that has no position.
    async fn start(
        &self,
        conn: &mut Conn,
        flavor: Option<Flavor>,
        from: Position,
        state: Option<String>,
    ) -> Result<Start> {
        let name = &self.source.name;
        let connection = &self.source.connection;
        if let Some(text) = state {
            let needed = gtid_needed(from, &text);
            let Some(flavor) = flavor else {
                return Err(purged(
                    name,
                    &needed,
                    format!(
                        "The source's position is a GTID state, and the server of connection \"{connection}\" logs no GTIDs (gtid_mode is not ON): set gtid_mode = ON there, or point the connection at a server of the topology that has them."
                    ),
                ));
            };
            let state = GtidState::parse(flavor, &text).map_err(|e| {
                let kind = match flavor {
                    Flavor::MariaDb => "MariaDB",
                    Flavor::MySql => "MySQL",
                };
                purged(
                    name,
                    &needed,
                    format!(
                        "The server of connection \"{connection}\" is {kind}, and the source's GTID state is not one of its GTID states ({e}): the connection reaches a server outside the topology the source read."
                    ),
                )
            })?;
            // At the applied position, or before it while an XA
            // transaction was prepared there (the stream reads its prepare
            // again; what it reads before `from` is skipped).
            let at = state_position(&state)?;
            if at > from {
                return Err(PipelineError::Replication {
                    source_name: name.clone(),
                    message: format!(
                        "the stored GTID state {state} is position {at}, after the applied position {from}: the state store was changed by hand or is damaged"
                    ),
                });
            }
            return Ok(Start::Gtid(state));
        }
        if from == Position::ZERO {
            if flavor.is_some()
                && let (_, Some(state)) = current_start(conn, flavor).await?
            {
                return Ok(Start::Gtid(state));
            }
            let (file, offset, _) = master_status(conn).await?;
            let (seq, offset) = binlog_coordinates(file_position(&file, offset)?);
            return Ok(Start::File { file, seq, offset });
        }
        if is_gtid_position(from) {
            return Err(PipelineError::Replication {
                source_name: name.clone(),
                message: format!(
                    "the applied position {from} is a GTID position, but the state store has no GTID state with it: the state store was changed by hand or is damaged"
                ),
            });
        }
        let (seq, offset) = binlog_coordinates(from);
        let logs: Vec<(String, u64)> = conn
            .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
                (
                    row.get_opt::<String, _>(0)
                        .and_then(|v| v.ok())
                        .unwrap_or_default(),
                    row.get_opt::<u64, _>(1)
                        .and_then(|v| v.ok())
                        .unwrap_or_default(),
                )
            })
            .await
            .map_err(|e| query_error("list the binlog files (SHOW BINARY LOGS)", e))?;
        let needed = from.to_string();
        let Some((file, size)) = logs.iter().find(|(f, _)| file_seq(f) == Some(seq)).cloned()
        else {
            let oldest = logs.first().map_or("none".to_string(), |(f, _)| f.clone());
            return Err(purged(
                name,
                &needed,
                format!(
                    "The stream resumes in binlog file number {seq} at offset {offset}; the server's oldest binlog file is {oldest}."
                ),
            ));
        };
        if u64::from(offset) > size {
            return Err(purged(
                name,
                &needed,
                format!(
                    "Binlog file {file} holds {size} bytes, fewer than the offset {offset} the stream resumes at: the server's binlog is not the one the source read."
                ),
            ));
        }
        if flavor == Some(Flavor::MariaDb) {
            // A position of a store written before GTID positions: the
            // same point as a GTID state, from here on.
            let list = mariadb_gtid_at(conn, &file, offset).await?.ok_or_else(|| {
                purged(
                    name,
                    &needed,
                    format!(
                        "BINLOG_GTID_POS finds no GTID state at offset {offset} of binlog file {file}: the server's binlog is not the one the source read."
                    ),
                )
            })?;
            return Ok(Start::Gtid(GtidState::MariaDb(list)));
        }
        Ok(Start::File { file, seq, offset })
    }

    /// Opens the stream after `from` and its GTID state `state` (see
    /// [`Source::stream_resuming`]).
    /// Opens the stream after `from`; `schemas` are the schema history's
    /// columns of each table at `from` (see "Schema changes").
    async fn open(
        &self,
        from: Position,
        state: Option<String>,
        schemas: HashMap<u32, Arc<TableSchema>>,
    ) -> Result<MysqlStream> {
        let name = &self.source.name;
        let mut conn = connect(&self.source.connection, &self.connection).await?;
        let flavor = gtid_flavor(&mut conn).await?;
        let start = self.start(&mut conn, flavor, from, state).await?;
        let charsets: HashMap<u16, String> = conn
            .query_map(
                "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS",
                |(id, name): (Option<u64>, Option<String>)| (id, name),
            )
            .await
            .map_err(|e| query_error("read the server's collations", e))?
            .into_iter()
            .filter_map(|(id, name)| Some((u16::try_from(id?).ok()?, name?)))
            .collect();
        let mut wanted = HashMap::new();
        let mut base = HashMap::new();
        let mut names: HashMap<(String, String), Vec<u32>> = HashMap::new();
        for (database, table) in &self.tables {
            let oid = table_id(database, table);
            // Where the table is at the resume position: under the name
            // the schema history's version gives (it was renamed since the
            // table version was created), else under its own.
            let now = schemas
                .get(&oid)
                .filter(|s| !s.columns.is_empty())
                .map_or_else(
                    || (database.clone(), table.clone()),
                    |s| (s.schema.clone(), s.name.clone()),
                );
            let columns = catalog_columns(&mut conn, &now.0, &now.1)
                .await?
                .unwrap_or_default();
            wanted.insert(
                oid,
                columns
                    .iter()
                    .filter_map(|c| Some((c.name.clone(), c.declared?)))
                    .collect(),
            );
            // The table's columns where the stream resumes: from the
            // schema history, or (a table the stream never announced) from
            // the catalog as it is now.
            if let Some(schema) = schemas.get(&oid) {
                base.insert(oid, Arc::clone(schema));
            } else if !columns.is_empty() {
                base.insert(oid, catalog_schema(&now.0, &now.1, &columns));
            }
            let ids = names.entry(now).or_default();
            if !ids.contains(&oid) {
                ids.push(oid);
            }
        }
        let marker = marker_database(&self.source.connection, &self.connection)?
            .map(|database| table_id(&database, MARKER_TABLE));
        conn.query_drop(format!("SET @master_heartbeat_period = {HEARTBEAT_NANOS}"))
            .await
            .map_err(|e| query_error("ask for heartbeats", e))?;
        let id = replica_server_id(name);
        let (binlog, file, seq, offset, needed, gtid) = match start {
            Start::File { file, seq, offset } => {
                let needed = binlog_position(seq, offset).to_string();
                let request = BinlogStreamRequest::new(id)
                    .with_filename(file.as_bytes())
                    .with_pos(u64::from(offset));
                let binlog = conn
                    .get_binlog_stream(request)
                    .await
                    .map_err(|e| stream_error(name, &needed, false, e))?;
                (binlog, file, seq, offset, needed, None)
            }
            Start::Gtid(state) => {
                let needed = gtid_needed(state_position(&state)?, &state);
                let binlog = match &state {
                    GtidState::MariaDb(list) => {
                        // As a MariaDB replica asks (MASTER_USE_GTID): real
                        // GTID events (capability 4, MARIA_SLAVE_CAPABILITY_GTID),
                        // the events after `list` in each domain, and an error
                        // rather than a silent start elsewhere when the
                        // server's binlog lacks one of them (strict mode).
                        // The list is our own canonical text: digits, '-', ','.
                        for sql in [
                            "SET @mariadb_slave_capability = 4".to_string(),
                            format!("SET @slave_connect_state = '{list}'"),
                            "SET @slave_gtid_strict_mode = 1".to_string(),
                            "SET @slave_gtid_ignore_duplicates = 0".to_string(),
                        ] {
                            conn.query_drop(sql)
                                .await
                                .map_err(|e| query_error("ask for the binlog by GTID", e))?;
                        }
                        conn.get_binlog_stream(BinlogStreamRequest::new(id))
                            .await
                            .map_err(|e| stream_error(name, &needed, true, e))?
                    }
                    GtidState::MySql(set) => {
                        let request = BinlogStreamRequest::new(id)
                            .with_gtid()
                            .with_gtid_set(mysql_sids(set)?);
                        conn.get_binlog_stream(request)
                            .await
                            .map_err(|e| stream_error(name, &needed, true, e))?
                    }
                };
                let track = GtidTrack { state, group: None };
                (binlog, String::new(), 0, 0, needed, Some(track))
            }
        };
        Ok(MysqlStream {
            name: name.clone(),
            binlog,
            file,
            seq,
            described: false,
            last_end: offset,
            needed,
            gtid,
            commit_states: VecDeque::new(),
            delivered: None,
            in_transaction: false,
            queue: VecDeque::new(),
            charsets,
            wanted,
            names,
            maps: HashMap::new(),
            schemas: HashMap::new(),
            base,
            marker,
            prepared: Vec::new(),
            preparing: None,
            completing: None,
            read_deadline: tokio::time::Instant::now() + READ_TIMEOUT,
        })
    }
}

/// MySQL's GTID set as `COM_BINLOG_DUMP_GTID` sends it.
fn mysql_sids(set: &GtidSet) -> Result<Vec<mysql_async::Sid<'static>>> {
    let mut sids = Vec::new();
    for (uuid, tag, intervals) in set.blocks() {
        let sid = if tag.is_empty() {
            mysql_async::Sid::new(uuid.0)
        } else {
            // The tag's type is not exported: parse it with a dummy
            // interval, then set the real ones.
            format!("{uuid}:{tag}:1")
                .parse::<mysql_async::Sid<'static>>()
                .map_err(|e| PipelineError::Database {
                    context: "ask for the binlog by GTID".into(),
                    message: format!("tag {tag}: {e}"),
                })?
        };
        // MySQL's intervals end after their last transaction.
        sids.push(
            sid.with_intervals(
                intervals
                    .iter()
                    .map(|&(s, e)| mysql_async::GnoInterval::new(s, e + 1))
                    .collect(),
            ),
        );
    }
    Ok(sids)
}

/// Starts a snapshot's consistent read.
const SNAPSHOT_START: &str = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

/// How long the snapshot's `LOCK TABLES ... READ` waits for the table's
/// open write transactions before it gives up (and the copy is retried).
const SNAPSHOT_LOCK_WAIT_SECONDS: u32 = 10;

/// The binlog position of the consistent read `conn` has just started,
/// on MariaDB: `binlog_snapshot_file` and `binlog_snapshot_position`,
/// which MariaDB takes with the read, without a lock, mapped to GTIDs.
async fn mariadb_snapshot_position(conn: &mut Conn) -> Result<Position> {
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
async fn locked_start(
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

impl Source for MysqlSource {
    type Stream = MysqlStream;
    type Snapshot = MysqlSnapshot;

    async fn stream(&self, from: Position) -> Result<MysqlStream> {
        self.open(from, None, HashMap::new()).await
    }

    async fn stream_resuming(
        &self,
        from: Position,
        state: Option<String>,
        schemas: HashMap<u32, Arc<TableSchema>>,
    ) -> Result<MysqlStream> {
        self.open(from, state, schemas).await
    }

    async fn snapshot(&self, table: &TableInfo) -> Result<MysqlSnapshot> {
        let mut conn = connect(&self.source.connection, &self.connection).await?;
        for sql in [
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "SET time_zone = '+00:00'",
            "SET NAMES utf8mb4",
        ] {
            conn.query_drop(sql)
                .await
                .map_err(|e| query_error("start the snapshot transaction", e))?;
        }
        let position = if is_mariadb(&mut conn).await? {
            conn.query_drop(SNAPSHOT_START)
                .await
                .map_err(|e| query_error("start the snapshot transaction", e))?;
            mariadb_snapshot_position(&mut conn).await?
        } else {
            let mut lock = connect(&self.source.connection, &self.connection).await?;
            let started = locked_start(
                &mut conn,
                &mut lock,
                &table.upstream_schema,
                &table.upstream_table,
            )
            .await;
            let _ = lock.disconnect().await;
            started?
        };
        let mut convs = Vec::new();
        let mut names = Vec::new();
        for c in table.document_columns() {
            names.push(quote_ident(&c.name));
            convs.push(snapshot_conv(c));
        }
        let sql = format!(
            "SELECT {} FROM {}",
            names.join(", "),
            quoted_table(&table.upstream_schema, &table.upstream_table)
        );
        let what = format!("copy {}", table.reference());
        let (tx, rx) = mpsc::channel(2);
        let task = tokio::spawn(copy_rows(conn, sql, convs, tx, what.clone()));
        Ok(MysqlSnapshot { position, rx, task })
    }
}

/// How a snapshot's value of column `c` becomes text: from its PostgreSQL
/// type (the binary protocol gives ENUM, SET and JSON as text, BINARY
/// padded, TIMESTAMP in the session's UTC).
fn snapshot_conv(c: &ColumnInfo) -> Conv {
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

/// Reads the snapshot's rows and sends them in chunks; commits the
/// snapshot transaction at the end.
async fn copy_rows(
    mut conn: Conn,
    sql: String,
    convs: Vec<Conv>,
    tx: mpsc::Sender<Result<Chunk>>,
    what: String,
) -> Result<()> {
    let fail = |e: mysql_async::Error| query_error(&what, e);
    let outcome: Result<()> = async {
        let mut result = conn.exec_iter(sql.as_str(), ()).await.map_err(fail)?;
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
        let _ = tx
            .send(Err(PipelineError::Database {
                context: what.clone(),
                message: e.primary(),
            }))
            .await;
    }
    let _ = conn.disconnect().await;
    outcome
}

/// A table's copy in a consistent-snapshot transaction, read by a task of
/// its own.
pub struct MysqlSnapshot {
    position: Position,
    rx: mpsc::Receiver<Result<Chunk>>,
    task: tokio::task::JoinHandle<Result<()>>,
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

// ------------------------------------------------------------ the stream

/// A table map turned into a schema and conversions.
struct Mapped {
    /// The ids its rows go out under (see [`MysqlStream::names`]).
    oids: Vec<u32>,
    schema: Arc<TableSchema>,
    convs: Vec<Conv>,
    /// How its row images are read.
    layout: rows::RowLayout,
    /// The table is [`MARKER_TABLE`]: its rows are swap markers.
    marker: bool,
}

/// A source's binlog stream.
pub struct MysqlStream {
    name: String,
    binlog: BinlogStream,
    /// The file events are read from, and its number (file and offset
    /// positions; with GTIDs, the file only, for errors).
    file: String,
    seq: u32,
    /// A format description event was read (events have their checksums
    /// taken off from there on).
    described: bool,
    /// Where the last event read ended in that file.
    last_end: u32,
    /// Where the stream was opened, as errors name it.
    needed: String,
    /// GTID positions: the state after the last event group and the group
    /// being read. `None`: file and offset positions.
    gtid: Option<GtidTrack>,
    /// The GTID states of the [`SourceEvent::Commit`]s in `queue`, in order.
    commit_states: VecDeque<String>,
    /// The last commit [`ChangeStream::next`] returned, with its GTID state.
    delivered: Option<(Position, String)>,
    in_transaction: bool,
    queue: VecDeque<SourceEvent>,
    charsets: HashMap<u16, String>,
    /// The ids of the tables the catalog reads, with their JSON columns.
    wanted: HashMap<u32, HashMap<String, Declared>>,
    /// The tables the catalog reads by their upstream name now, with the
    /// ids they are read under ([`table_id`] of the name a table version
    /// was created with): a table renamed on its own keeps its ids under
    /// its new name, and a table version created over the new name adds
    /// its own.
    names: HashMap<(String, String), Vec<u32>>,
    /// The latest table map of each binlog table id, and what it maps to
    /// (`None`: a table nobody reads).
    maps: HashMap<u64, (TableMapEvent<'static>, Option<Arc<Mapped>>)>,
    /// The schema last sent for each table.
    schemas: HashMap<u32, Arc<TableSchema>>,
    /// Each table's columns where the stream resumed (the schema history's,
    /// or `information_schema`'s when the stream was opened for a table it
    /// has none of): what a DDL statement changes when no schema was sent
    /// yet.
    base: HashMap<u32, Arc<TableSchema>>,
    /// The id of [`MARKER_TABLE`] in the connection's database.
    marker: Option<u32>,
    /// XA transactions prepared and not committed or rolled back yet,
    /// oldest first (see "XA transactions").
    prepared: Vec<PreparedXa>,
    /// The XA prepare being read: its events collect in `queue`, which
    /// [`ChangeStream::next`] hands out only once the prepare has ended.
    preparing: Option<PreparedXa>,
    /// The XA transaction whose `XA COMMIT` or `XA ROLLBACK` group is
    /// being read.
    completing: Option<Xid>,
    /// When the binlog read fails for want of events: [`READ_TIMEOUT`]
    /// after the last event read (or after the stream was opened). It is
    /// kept here, not in [`ChangeStream::next`]'s future: the engine drops
    /// that future whenever another arm of its `select!` wins (every
    /// 200 ms at least), and a timeout started by each call would never
    /// run out.
    read_deadline: tokio::time::Instant,
}

/// A prepared XA transaction the stream holds until its `XA COMMIT`.
struct PreparedXa {
    xid: Xid,
    /// The GTID of its prepare, for messages.
    gtid: String,
    /// The GTID state before its prepare: where a stream must start to
    /// read its changes again.
    before: GtidState,
    /// Its schemas and rows, in order (the `Begin` left out).
    events: Vec<SourceEvent>,
}

/// One GTID of the binlog.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Gtid {
    MariaDb(MariaGtid),
    /// Source UUID, tag (`""` for none), transaction number.
    MySql(Uuid, String, u64),
}

/// A stream's GTID state and the event group it is in.
struct GtidTrack {
    /// After the last event group read to its end.
    state: GtidState,
    /// The GTID of the event group being read.
    group: Option<Gtid>,
}

impl GtidTrack {
    /// Takes the open event group, if any, into the state.
    fn finish(&mut self) -> std::result::Result<(), String> {
        match (self.group.take(), &mut self.state) {
            (None, _) => Ok(()),
            (Some(Gtid::MariaDb(gtid)), GtidState::MariaDb(list)) => {
                list.advance(gtid).map_err(|last| {
                    format!(
                        "GTID {gtid} comes after {last} in the binlog: sequence numbers go back within domain {}, which happens with gtid_strict_mode = OFF and writes on more than one server in a domain; evolve's positions need them to grow: set gtid_strict_mode = ON on every server, and give each server that takes writes a domain of its own (gtid_domain_id)",
                        gtid.domain
                    )
                })
            }
            // A transaction the set has already is one applied already: its
            // end is its commit position, so the engine skips it.
            (Some(Gtid::MySql(uuid, tag, gno)), GtidState::MySql(set)) => {
                set.insert(uuid, &tag, gno);
                Ok(())
            }
            (Some(gtid), state) => Err(format!(
                "GTID {gtid:?} does not belong to a stream of GTID state {state}"
            )),
        }
    }
}

/// MariaDB's `GTID_EVENT`, which mysql_common does not model.
const MARIADB_GTID_EVENT: u8 = 162;

/// MySQL's ER_MASTER_FATAL_ERROR_READING_BINLOG: the file or position
/// asked for is not there (MariaDB's GTID errors, a GTID state the binlog
/// does not have, come with it too).
const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// A binlog stream's error; `by_gtid`: it was opened after a GTID state.
fn stream_error(name: &str, needed: &str, by_gtid: bool, e: mysql_async::Error) -> PipelineError {
    if let mysql_async::Error::Server(server) = &e
        && server.code == ER_MASTER_FATAL_ERROR_READING_BINLOG
    {
        let said = server.message.trim().trim_end_matches('.');
        let mut detail = format!("The server says: {said}.");
        if by_gtid {
            detail.push(' ');
            detail.push_str(GTID_ELSEWHERE);
        }
        return purged(name, needed, detail);
    }
    PipelineError::Replication {
        source_name: name.to_string(),
        message: e.to_string(),
    }
}

impl MysqlStream {
    fn fail(&self, message: String) -> PipelineError {
        PipelineError::Replication {
            source_name: self.name.clone(),
            message,
        }
    }

    /// Where a transaction starting now commits: the end of the last
    /// event read (files and offsets), or the state after the last event
    /// group (GTIDs).
    fn commit_position(&self) -> Result<Position> {
        match &self.gtid {
            None => Ok(binlog_position(self.seq, self.last_end)),
            Some(track) => state_position(&track.state),
        }
    }

    /// Takes the open event group into the GTID state.
    fn finish_group(&mut self) -> Result<()> {
        if let Some(track) = self.gtid.as_mut()
            && let Err(message) = track.finish()
        {
            return Err(self.fail(message));
        }
        Ok(())
    }

    /// A transaction starts.
    fn begin(&mut self, timestamp: u32) -> Result<()> {
        self.in_transaction = true;
        self.queue.push_back(SourceEvent::Begin {
            commit: self.commit_position()?,
            commit_time_micros: i64::from(timestamp) * 1_000_000,
        });
        Ok(())
    }

    /// The transaction (or statement) whose last event ends at `log_pos`
    /// commits: it ends there (files and offsets), or at the state with
    /// its event group (GTIDs), which goes with the commit.
    fn push_commit(&mut self, log_pos: u32) -> Result<()> {
        self.in_transaction = false;
        self.finish_group()?;
        let end = match &self.gtid {
            None => binlog_position(self.seq, log_pos),
            Some(track) => {
                // While an XA transaction is prepared, a reopened stream
                // must read its prepare again: it resumes before it (the
                // transactions after it are skipped by their positions).
                let resume = self.prepared.first().map_or(&track.state, |p| &p.before);
                self.commit_states.push_back(resume.to_string());
                state_position(&track.state)?
            }
        };
        self.queue.push_back(SourceEvent::Commit { end });
        Ok(())
    }

    /// A GTID event: the event group after it has that GTID; a group left
    /// open (one whose end this reader does not know) ends here. A MariaDB
    /// group that is not a single statement is a transaction (MariaDB logs
    /// no BEGIN after its GTID event).
    fn on_gtid(&mut self, gtid: Gtid, begins: bool, timestamp: u32) -> Result<()> {
        self.finish_group()?;
        self.in_transaction = false;
        if let Some(track) = self.gtid.as_mut() {
            track.group = Some(gtid);
        }
        if begins {
            self.begin(timestamp)?;
        }
        Ok(())
    }

    /// Where the event with `header` is, as errors name it: its offset,
    /// in its file when the stream knows the file's name, and the GTID of
    /// its event group when there is one.
    fn event_at(&self, header: &BinlogEventHeader) -> String {
        let start = header.log_pos().saturating_sub(header.event_size());
        let mut at = if self.file.is_empty() {
            format!("binlog offset {start}")
        } else {
            format!("offset {start} of {}", self.file)
        };
        if let Some(Gtid::MariaDb(gtid)) = self.gtid.as_ref().and_then(|t| t.group.as_ref()) {
            at.push_str(&format!(" (GTID {gtid})"));
        }
        at
    }

    /// A MariaDB compressed event that cannot be read.
    fn compressed_failure(&self, header: &BinlogEventHeader, reason: &str) -> PipelineError {
        let kind = header.event_type_raw();
        self.fail(format!(
            "MariaDB compressed binlog event {} (type {kind}) at {} could not be read: {reason}; the stream cannot go past it (drop the source's tables and the source, then create them again)",
            compressed::type_name(kind),
            self.event_at(header)
        ))
    }

    fn on_event(&mut self, event: Event) -> Result<()> {
        let header = event.header();
        let log_pos = header.log_pos();
        let kind = header.event_type_raw();
        // MariaDB's compressed events go where the events they compress go.
        let inflated = match compressed::counterpart(kind) {
            Some(to) => Some(
                compressed::inflate_event(&event, to)
                    .map_err(|reason| self.compressed_failure(&header, &reason))?,
            ),
            None => None,
        };
        let data = match &inflated {
            Some(inflated) => inflated
                .read_data()
                .map_err(|e| self.compressed_failure(&header, &e.to_string()))?,
            None => event
                .read_data()
                .map_err(|e| self.fail(format!("a binlog event could not be read: {e}")))?,
        };
        let mut moves = log_pos != 0;
        if data.is_none() && self.gtid.is_some() && kind == MARIADB_GTID_EVENT {
            let (gtid, standalone) = MariaGtid::from_event(event.data(), header.server_id())
                .ok_or_else(|| self.fail("a MariaDB GTID event is too short".into()))?;
            let xa = gtid::xa_group(event.data()).map_err(|e| self.fail(e))?;
            if let Some(open) = &self.preparing {
                return Err(self.fail(format!(
                    "the event group of XA transaction {} (GTID {}) ended without its XA_PREPARE event",
                    open.xid, open.gtid
                )));
            }
            self.on_gtid(Gtid::MariaDb(gtid), !standalone, header.timestamp())?;
            match xa {
                None => {}
                Some(XaGroup::Prepared(xid)) => {
                    // The state before the prepare: its group is open.
                    let before = self
                        .gtid
                        .as_ref()
                        .map(|track| track.state.clone())
                        .ok_or_else(|| self.fail("a GTID event without GTID positions".into()))?;
                    self.preparing = Some(PreparedXa {
                        xid,
                        gtid: gtid.to_string(),
                        before,
                        events: Vec::new(),
                    });
                }
                Some(XaGroup::Completed(xid)) => self.completing = Some(xid),
            }
        }
        match data {
            Some(EventData::RotateEvent(rotate)) => {
                // The server's first (artificial) rotate comes before its
                // format description, so its name still carries the
                // event's checksum: it names the file asked for.
                let raw = rotate.name_raw();
                if self.gtid.is_some() {
                    // Positions are GTIDs: the file is only named in errors.
                    if self.described {
                        self.file = String::from_utf8_lossy(raw).into_owned();
                    }
                } else if self.described || !raw.starts_with(self.file.as_bytes()) {
                    let file = String::from_utf8_lossy(raw).into_owned();
                    self.file = file.clone();
                    self.seq = file_seq(&file).ok_or_else(|| {
                        self.fail(format!(
                            "binlog file name \"{file}\" has no sequence number"
                        ))
                    })?;
                }
                self.last_end = u32::try_from(rotate.position()).unwrap_or(u32::MAX);
                moves = false;
            }
            Some(EventData::GtidEvent(gtid)) if self.gtid.is_some() => {
                let tag = gtid.tag().map(|t| t.to_string()).unwrap_or_default();
                let gtid = Gtid::MySql(Uuid(gtid.sid()), tag, gtid.gno());
                self.on_gtid(gtid, false, header.timestamp())?;
            }
            Some(EventData::AnonymousGtidEvent(_)) if self.gtid.is_some() => {
                return Err(self.fail(
                    "a transaction without a GTID arrived: the server's gtid_mode is no longer ON, and the source's positions are GTIDs; set gtid_mode = ON again".into(),
                ));
            }
            Some(EventData::QueryEvent(query)) => {
                let sql = query.query();
                let word = sql.trim().to_ascii_uppercase();
                if let Some(xid) = self.completing.take() {
                    self.on_xa_end(xid, &word, header.timestamp(), log_pos)?;
                } else if !self.in_transaction && word.starts_with("XA START") {
                    return Err(self.fail(
                        "an XA transaction without MariaDB's XA GTID events: evolve reads XA transactions from MariaDB 10.5 and later; on this server, end XA transactions with XA COMMIT ... ONE PHASE, which logs them as ordinary transactions".into(),
                    ));
                } else if word == "BEGIN" {
                    if !self.in_transaction {
                        self.begin(header.timestamp())?;
                    }
                } else if (word == "COMMIT" || word == "ROLLBACK") && self.in_transaction {
                    self.push_commit(log_pos)?;
                } else if !self.in_transaction {
                    let default = query.schema();
                    if let Some((database, table)) = truncated_table(&sql, &default) {
                        self.on_truncate(&database, &table, header.timestamp(), log_pos)?;
                    } else {
                        let ddl = parse_ddl(&sql, &default);
                        if !ddl.is_empty() {
                            self.on_ddl(ddl, header.timestamp(), log_pos)?;
                        }
                    }
                    // A statement outside a transaction is an event group
                    // of its own.
                    self.finish_group()?;
                }
            }
            Some(EventData::FormatDescriptionEvent(_)) => self.described = true,
            Some(EventData::XaPrepareLogEvent(_)) => self.on_xa_prepared()?,
            Some(EventData::XidEvent(_)) if self.in_transaction => self.push_commit(log_pos)?,
            Some(EventData::TableMapEvent(map)) => self.on_table_map(map.into_owned())?,
            Some(EventData::RowsEvent(rows)) if self.in_transaction => self.on_rows(&rows)?,
            Some(EventData::HeartbeatEvent) => {
                moves = false;
                let between = !self.in_transaction
                    && self.gtid.as_ref().is_none_or(|track| track.group.is_none());
                if between {
                    self.queue.push_back(SourceEvent::Idle {
                        upto: self.commit_position()?,
                    });
                }
            }
            _ => {}
        }
        // Within a file positions only grow: an event sent out of place
        // (the format description the server repeats when a stream starts
        // inside a file) must not move the start of the next transaction
        // back before the transactions already delivered.
        if moves && log_pos >= self.last_end {
            self.last_end = log_pos;
        }
        Ok(())
    }

    /// The end of an XA transaction's prepare: its events are held (not
    /// delivered) until its `XA COMMIT`.
    fn on_xa_prepared(&mut self) -> Result<()> {
        let Some(mut prepared) = self.preparing.take() else {
            return Err(self.fail(
                "an XA_PREPARE event outside an XA transaction's event group: evolve reads XA transactions from MariaDB 10.5 and later; on this server, end XA transactions with XA COMMIT ... ONE PHASE, which logs them as ordinary transactions".into(),
            ));
        };
        // The queue holds the prepare's group only: a group is read when
        // the queue is empty.
        let mut events = std::mem::take(&mut self.queue);
        if matches!(events.front(), Some(SourceEvent::Begin { .. })) {
            events.pop_front();
        }
        prepared.events = events.into();
        self.in_transaction = false;
        self.finish_group()?;
        self.prepared.push(prepared);
        Ok(())
    }

    /// An `XA COMMIT` (`statement`, upper case) of a prepared XA
    /// transaction: a transaction at this group's position holding the
    /// prepare's changes. An `XA ROLLBACK` forgets them. An `XA COMMIT` of a
    /// transaction prepared before the stream's history began (the source
    /// was created while it was prepared) holds changes nobody read: every
    /// table of the source that it may concern stalls at it.
    fn on_xa_end(&mut self, xid: Xid, statement: &str, timestamp: u32, log_pos: u32) -> Result<()> {
        let index = self.prepared.iter().position(|p| p.xid == xid);
        if statement.starts_with("XA ROLLBACK") {
            if let Some(i) = index {
                self.prepared.remove(i);
            }
            return self.finish_group();
        }
        if !statement.starts_with("XA COMMIT") {
            let shown: String = statement.chars().take(60).collect();
            return Err(self.fail(format!(
                "the event group that ends XA transaction {xid} holds \"{shown}\", neither XA COMMIT nor XA ROLLBACK"
            )));
        }
        self.begin(timestamp)?;
        match index {
            Some(i) => {
                let prepared = self.prepared.remove(i);
                for event in prepared.events {
                    if let SourceEvent::Schema { table, schema } = &event {
                        if self.schemas.get(table) == Some(schema) {
                            continue;
                        }
                        self.schemas.insert(*table, Arc::clone(schema));
                    }
                    self.queue.push_back(event);
                }
            }
            None => {
                let at = match self.gtid.as_ref().and_then(|t| t.group.as_ref()) {
                    Some(Gtid::MariaDb(gtid)) => format!("GTID {gtid}"),
                    _ => format!("binlog offset {log_pos}"),
                };
                let problem = format!(
                    "XA transaction {xid}, committed at {at}, was prepared before the position the source's stream started from: its changes could not be read; create the table again (a new table version's snapshot reads them)"
                );
                let mut tables: Vec<u32> = self.wanted.keys().copied().collect();
                tables.sort_unstable();
                for table in tables {
                    self.queue.push_back(SourceEvent::Undecodable {
                        table,
                        problem: problem.clone(),
                    });
                }
            }
        }
        self.push_commit(log_pos)
    }

    /// `TRUNCATE TABLE` is logged as a statement, even with row-based
    /// logging: a transaction of its own with one truncate row, for a
    /// table the catalog reads.
    fn on_truncate(
        &mut self,
        database: &str,
        table: &str,
        timestamp: u32,
        log_pos: u32,
    ) -> Result<()> {
        let oids = self.ids_of(database, table);
        if oids.is_empty() {
            return Ok(());
        }
        self.begin(timestamp)?;
        for oid in oids {
            let schema = self.schemas.get(&oid).cloned().unwrap_or_else(|| {
                Arc::new(TableSchema {
                    schema: database.to_string(),
                    name: table.to_string(),
                    columns: Vec::new(),
                })
            });
            self.queue.push_back(SourceEvent::Row {
                table: oid,
                change: RowChange {
                    table: schema,
                    kind: ChangeKind::Truncate,
                    old: None,
                    new: None,
                },
            });
        }
        self.push_commit(log_pos)
    }

    /// A DDL statement that drops or renames columns of a table the
    /// catalog reads, or drops or renames the table: a transaction of its
    /// own, at the statement's position, with the table's schema after it
    /// (see the module docs, "Schema changes").
    fn on_ddl(&mut self, ddl: Vec<Ddl>, timestamp: u32, log_pos: u32) -> Result<()> {
        let mut schemas: Vec<(u32, TableSchema)> = Vec::new();
        for change in ddl {
            match change {
                Ddl::Columns { table, removed } => {
                    for oid in self.ids_of(&table.0, &table.1) {
                        let Some(before) = self.schemas.get(&oid).or_else(|| self.base.get(&oid))
                        else {
                            continue;
                        };
                        // Sent even when `before` lacks the columns
                        // already: a table without schema history seeds
                        // `base` from the catalog as it is now, maybe after
                        // this very statement.
                        let columns: Vec<ColumnSchema> = before
                            .columns
                            .iter()
                            .filter(|c| !removed.iter().any(|r| r.eq_ignore_ascii_case(&c.name)))
                            .cloned()
                            .collect();
                        schemas.push((
                            oid,
                            TableSchema {
                                schema: before.schema.clone(),
                                name: before.name.clone(),
                                columns,
                            },
                        ));
                    }
                }
                // Renamed on its own: followed. Its ids move to the new
                // name, and its schema, under that name, goes out (into the
                // schema history, where a reopened stream finds the name).
                Ddl::Gone {
                    table,
                    to: Some(to),
                } => {
                    let oids = self.names.remove(&table).unwrap_or_default();
                    for &oid in &oids {
                        if let Some(before) = self.schemas.get(&oid).or_else(|| self.base.get(&oid))
                            && !before.columns.is_empty()
                        {
                            schemas.push((
                                oid,
                                TableSchema {
                                    schema: to.0.clone(),
                                    name: to.1.clone(),
                                    columns: before.columns.clone(),
                                },
                            ));
                        }
                    }
                    let ids = self.names.entry(to).or_default();
                    for oid in oids {
                        if !ids.contains(&oid) {
                            ids.push(oid);
                        }
                    }
                }
                // Dropped, or its name given to another table in the same
                // statement: a schema without columns (the source
                // contract's "gone"); a table later created under the name
                // is not read under these ids.
                Ddl::Gone { table, to: None } => {
                    for oid in self.names.remove(&table).unwrap_or_default() {
                        schemas.push((
                            oid,
                            TableSchema {
                                schema: table.0.clone(),
                                name: table.1.clone(),
                                columns: Vec::new(),
                            },
                        ));
                    }
                }
            }
        }
        let mut events = Vec::new();
        for (oid, schema) in schemas {
            let schema = Arc::new(schema);
            self.schemas.insert(oid, Arc::clone(&schema));
            events.push(SourceEvent::Schema { table: oid, schema });
        }
        // Which ids a table's rows go out under may have changed: table
        // maps are mapped again.
        self.maps.clear();
        if events.is_empty() {
            return Ok(());
        }
        self.begin(timestamp)?;
        self.queue.extend(events);
        self.push_commit(log_pos)
    }

    fn on_table_map(&mut self, map: TableMapEvent<'static>) -> Result<()> {
        let id = map.table_id();
        if let Some((known, mapped)) = self.maps.get(&id)
            && *known == map
        {
            let mapped = mapped.clone();
            self.announce(mapped.as_deref());
            return Ok(());
        }
        let own = table_id(&map.database_name(), &map.table_name());
        let marker = self.marker == Some(own);
        let oids = if marker {
            vec![own]
        } else {
            self.ids_of(&map.database_name(), &map.table_name())
        };
        let none = HashMap::new();
        let declared = if marker {
            Some(&none)
        } else {
            oids.iter().find_map(|oid| self.wanted.get(oid))
        };
        let mapped = match declared {
            None => None,
            Some(declared) => Some(Arc::new(
                map_table(&map, oids, &self.charsets, declared, marker).map_err(|e| {
                    self.fail(format!(
                        "the table map of {}.{} could not be read: {e}",
                        map.database_name(),
                        map.table_name()
                    ))
                })?,
            )),
        };
        self.announce(mapped.as_deref());
        self.maps.insert(id, (map, mapped));
        Ok(())
    }

    /// Sends a table's schema when it is not the one last sent.
    fn announce(&mut self, mapped: Option<&Mapped>) {
        let Some(mapped) = mapped.filter(|m| !m.marker) else {
            return;
        };
        for &oid in &mapped.oids {
            if self.schemas.get(&oid) != Some(&mapped.schema) {
                // An XA prepare's schemas count as sent when it commits.
                if self.preparing.is_none() {
                    self.schemas.insert(oid, Arc::clone(&mapped.schema));
                }
                self.queue.push_back(SourceEvent::Schema {
                    table: oid,
                    schema: Arc::clone(&mapped.schema),
                });
            }
        }
    }

    /// The ids upstream table `database.table` is read under now.
    fn ids_of(&self, database: &str, table: &str) -> Vec<u32> {
        self.names
            .get(&(database.to_string(), table.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    fn on_rows(&mut self, rows: &RowsEventData<'_>) -> Result<()> {
        let Some((map, Some(mapped))) = self.maps.get(&rows.table_id()) else {
            return Ok(());
        };
        let mapped = Arc::clone(mapped);
        if mapped.marker {
            let markers = self.markers(rows, map, &mapped.schema)?;
            self.queue.extend(markers);
            return Ok(());
        }
        let kind = match rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => {
                ChangeKind::Insert
            }
            RowsEventData::UpdateRowsEventV1(_) | RowsEventData::UpdateRowsEvent(_) => {
                ChangeKind::Update
            }
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => {
                ChangeKind::Delete
            }
            RowsEventData::PartialUpdateRowsEvent(_) => {
                return Err(self.fail(
                    "a partial JSON update arrived (binlog_row_value_options = PARTIAL_JSON); set binlog_row_value_options = '' upstream".into(),
                ));
            }
        };
        let mut out = Vec::new();
        let image =
            |values: Option<rows::Image<'_>>| -> std::result::Result<Option<Vec<Datum>>, String> {
                let Some(values) = values else {
                    return Ok(None);
                };
                if values.len() != mapped.convs.len() {
                    return Err(format!(
                        "a row image has {} columns, its table map {}: the binlog is not logged with binlog_row_image = FULL",
                        values.len(),
                        mapped.convs.len()
                    ));
                }
                let mut datums = Vec::with_capacity(values.len());
                for (value, conv) in values.into_iter().zip(&mapped.convs) {
                    let value = match value {
                        BinlogValue::Value(v) => v,
                        BinlogValue::Jsonb(j) => {
                            let json = serde_json::Value::try_from(j)
                                .map_err(|e| format!("a JSON value could not be read: {e}"))?;
                            Value::Bytes(json.to_string().into_bytes())
                        }
                        BinlogValue::JsonDiff(_) => {
                            return Err("a partial JSON update arrived".into());
                        }
                    };
                    datums.push(match conv {
                        Conv::Unsupported => Datum::Missing,
                        conv => match value_text(value, conv)? {
                            Some(text) => Datum::Text(Bytes::from(text)),
                            None => Datum::Null,
                        },
                    });
                }
                Ok(Some(datums))
            };
        let read = rows::read_rows(rows, &mapped.layout, |before, after| {
            let change = RowChange {
                table: Arc::clone(&mapped.schema),
                kind,
                old: image(before)?,
                new: image(after)?,
            };
            // One table version's id mostly; a table renamed upstream and
            // read by versions created over both names has more.
            if let Some((last, others)) = mapped.oids.split_last() {
                for &oid in others {
                    out.push(SourceEvent::Row {
                        table: oid,
                        change: change.clone(),
                    });
                }
                out.push(SourceEvent::Row {
                    table: *last,
                    change,
                });
            }
            Ok(())
        });
        if let Err(e) = read {
            let table = format!("{}.{}", mapped.schema.schema, mapped.schema.name);
            return Err(self.fail(format!("{table}: {e}")));
        }
        self.queue.extend(out);
        Ok(())
    }
}

impl MysqlStream {
    /// Rows written into [`MARKER_TABLE`]: each new image is a marker.
    fn markers(
        &self,
        rows: &RowsEventData<'_>,
        map: &TableMapEvent<'static>,
        schema: &TableSchema,
    ) -> Result<Vec<SourceEvent>> {
        let mut out = Vec::new();
        if matches!(
            rows,
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_)
        ) {
            return Ok(out);
        }
        let (Some(prefix_at), Some(content_at)) =
            (schema.column("prefix"), schema.column("content"))
        else {
            return Ok(out);
        };
        for row in rows.rows(map) {
            let (_, after) =
                row.map_err(|e| self.fail(format!("a marker row could not be read: {e}")))?;
            let Some(after) = after else {
                continue;
            };
            let values = after.unwrap();
            let bytes = |i: usize| match values.get(i) {
                Some(BinlogValue::Value(Value::Bytes(b))) => Some(b.clone()),
                _ => None,
            };
            if let (Some(prefix), Some(content)) = (bytes(prefix_at), bytes(content_at)) {
                out.push(SourceEvent::Marker {
                    prefix: String::from_utf8_lossy(&prefix).into_owned(),
                    content,
                });
            }
        }
        Ok(out)
    }
}

/// A table map's columns: names, mapped types and the primary key, from
/// its full metadata.
fn map_table(
    map: &TableMapEvent<'_>,
    oids: Vec<u32>,
    charsets: &HashMap<u16, String>,
    declared: &HashMap<String, Declared>,
    marker: bool,
) -> std::result::Result<Mapped, String> {
    let count = map.columns_count() as usize;
    let meta = OptionalMetaExtractor::new(map.iter_optional_meta()).map_err(|e| e.to_string())?;
    let names: Vec<String> = meta
        .iter_column_name()
        .map(|n| n.map(|n| n.name().into_owned()))
        .collect::<std::io::Result<_>>()
        .map_err(|e| e.to_string())?;
    if names.len() != count {
        return Err("it has no column names: set binlog_row_metadata = FULL upstream".into());
    }
    let mut enums: VecDeque<Arc<[String]>> = VecDeque::new();
    let mut sets: VecDeque<Arc<[String]>> = VecDeque::new();
    for field in map.iter_optional_meta() {
        match field.map_err(|e| e.to_string())? {
            OptionalMetadataField::EnumStrValue(values) => {
                for v in values.iter_values() {
                    let v = v.map_err(|e| e.to_string())?;
                    enums.push_back(v.values().iter().map(|s| s.value().into_owned()).collect());
                }
            }
            OptionalMetadataField::SetStrValue(values) => {
                for v in values.iter_values() {
                    let v = v.map_err(|e| e.to_string())?;
                    sets.push_back(v.values().iter().map(|s| s.value().into_owned()).collect());
                }
            }
            _ => {}
        }
    }
    let keys: HashSet<u64> = meta
        .iter_primary_key()
        .collect::<std::io::Result<_>>()
        .map_err(|e| e.to_string())?;
    let mut signedness = meta.iter_signedness();
    let mut column_charsets = meta.iter_charset();
    let mut enum_set_charsets = meta.iter_enum_and_set_charset();
    let mut columns = Vec::with_capacity(count);
    let mut convs = Vec::with_capacity(count);
    for (i, name) in names.into_iter().enumerate() {
        let column_type = map
            .get_column_type(i)
            .map_err(|e| e.to_string())?
            .ok_or("a column has no type")?;
        let column_meta = map.get_column_metadata(i).unwrap_or(&[]);
        let unsigned = column_type.is_numeric_type() && signedness.next().unwrap_or(false);
        let charset = if column_type.is_character_type() {
            column_charsets
                .next()
                .transpose()
                .map_err(|e| e.to_string())?
        } else if column_type.is_enum_or_set_type() {
            enum_set_charsets
                .next()
                .transpose()
                .map_err(|e| e.to_string())?
        } else {
            None
        };
        let charset = charset.map(|id| charsets.get(&id).map_or("unknown", String::as_str));
        let enum_values = (column_type == ColumnType::MYSQL_TYPE_ENUM)
            .then(|| enums.pop_front())
            .flatten();
        let set_values = (column_type == ColumnType::MYSQL_TYPE_SET)
            .then(|| sets.pop_front())
            .flatten();
        let (type_oid, typmod, conv) = map_binlog_type(
            column_type,
            column_meta,
            unsigned,
            charset,
            declared.get(&name).copied(),
            enum_values,
            set_values,
        );
        columns.push(ColumnSchema {
            name,
            type_oid,
            typmod,
            key: keys.contains(&(i as u64)),
        });
        convs.push(conv);
    }
    Ok(Mapped {
        oids,
        schema: Arc::new(TableSchema {
            schema: map.database_name().into_owned(),
            name: map.table_name().into_owned(),
            columns,
        }),
        convs,
        layout: rows::RowLayout::of(map)?,
        marker,
    })
}

impl ChangeStream for MysqlStream {
    async fn next(&mut self) -> Result<SourceEvent> {
        loop {
            // An XA prepare's events wait in the queue for its end.
            if self.preparing.is_none()
                && let Some(event) = self.queue.pop_front()
            {
                if let SourceEvent::Commit { end } = &event
                    && self.gtid.is_some()
                {
                    self.delivered = self.commit_states.pop_front().map(|state| (*end, state));
                }
                return Ok(event);
            }
            // Cancel-safe: the deadline lives in `self`, and a dropped
            // read loses nothing (the binlog stream keeps partial packets).
            let read = tokio::time::timeout_at(self.read_deadline, self.binlog.next());
            let event = match read.await {
                Err(_) => {
                    return Err(self.fail(format!(
                        "no binlog event or heartbeat for {} s",
                        READ_TIMEOUT.as_secs()
                    )));
                }
                Ok(None) => return Err(self.fail("the server ended the binlog stream".into())),
                Ok(Some(Err(e))) => {
                    let by_gtid = self.gtid.is_some();
                    return Err(stream_error(&self.name, &self.needed, by_gtid, e));
                }
                Ok(Some(Ok(event))) => event,
            };
            self.read_deadline = tokio::time::Instant::now() + READ_TIMEOUT;
            self.on_event(event)?;
        }
    }

    /// A binlog has no slot to advance: the engine's stored position is
    /// where the next stream starts.
    fn confirm(&mut self, _upto: Position) {}

    /// The GTID state after the transaction that ended at `end`, the last
    /// one [`ChangeStream::next`] returned; `None` with file and offset
    /// positions.
    fn resume_state(&self, end: Position) -> Option<String> {
        self.delivered
            .as_ref()
            .filter(|(at, _)| *at == end)
            .map(|(_, state)| state.clone())
    }

    async fn close(self) {
        // A binlog stream has no confirmation to send; closing says goodbye
        // to the server, which a dead connection never answers: bounded, as
        // the contract asks.
        let _ = tokio::time::timeout(Duration::from_secs(3), self.binlog.close()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table-locked start of a snapshot (MySQL's), run on MariaDB
    /// while two sessions insert into the table one row per transaction,
    /// as fast as they can: each snapshot's position must count exactly
    /// the transactions its read holds. Reading the position without the
    /// lock is off by the inserts that commit between the read's start and
    /// the position.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_started_under_a_table_lock_holds_exactly_the_transactions_up_to_its_position()
     {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (server, db) = tokio::task::spawn_blocking(|| {
            let server = evolve_test::MariaDb::start().expect("start MariaDB");
            let db = server.create_database("locked_start").expect("database");
            (server, db)
        })
        .await
        .unwrap();
        let connection = Connection::new(db.url.clone());
        let mut setup = connect("my", &connection).await.unwrap();
        setup
            .query_drop("CREATE TABLE t (id int AUTO_INCREMENT PRIMARY KEY, v int NOT NULL)")
            .await
            .unwrap();
        let (_, base) = current_start(&mut setup, Some(Flavor::MariaDb))
            .await
            .unwrap();
        let base = base.unwrap().count();
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (connection, stop) = (connection.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut conn = connect("my", &connection).await.unwrap();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        conn.exec_drop("INSERT INTO t (v) VALUES (?)", (w,))
                            .await
                            .unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut seen = Vec::new();
        for _ in 0..25 {
            let mut conn = connect("my", &connection).await.unwrap();
            let mut lock = connect("my", &connection).await.unwrap();
            let position = locked_start(&mut conn, &mut lock, &db.name, "t")
                .await
                .unwrap();
            let visible: u64 = conn
                .query_first("SELECT COUNT(*) FROM t")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                position,
                gtid_position(base + visible).unwrap(),
                "a snapshot holding {visible} inserts"
            );
            seen.push(visible);
            let _ = conn.disconnect().await;
            let _ = lock.disconnect().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let mut inserted = 0;
        for w in writers {
            inserted += w.await.unwrap();
        }
        // The snapshots were taken while the inserts went on.
        seen.dedup();
        assert!(
            seen.len() >= 20,
            "snapshots at {seen:?} of {inserted} inserts"
        );
        assert!(*seen.last().unwrap() < inserted, "{seen:?} of {inserted}");
        drop(server);
    }

    #[test]
    fn datetimes_are_written_as_the_formatter_writes_them() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut draw = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let mut cases = vec![
            (0, 1, 1, 0, 0, 0, 0),
            (-5, 1, 1, 0, 0, 0, 1),
            (9999, 12, 31, 23, 59, 59, 999_999),
            (12_345, 1, 2, 3, 4, 5, 500_000),
            (1970, 1, 1, 0, 0, 0, 10),
        ];
        for _ in 0..10_000 {
            let us = match draw(3) {
                0 => 0,
                1 => draw(1_000_000) as u32,
                _ => draw(1_000) as u32 * 1_000,
            };
            cases.push((
                draw(10_000) as i64,
                draw(13) as u32,
                draw(32) as u32,
                draw(24) as u32,
                draw(60) as u32,
                draw(60) as u32,
                us,
            ));
        }
        for (y, mo, d, h, mi, s, us) in cases {
            let out = datetime_text(y, mo, d, h, mi, s, us, b"");
            let expected = format!(
                "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}{}",
                fraction(us)
            );
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }

    #[test]
    fn positions_order_files_then_offsets() {
        let a = binlog_position(1, 0xffff_fff0);
        let b = binlog_position(2, 4);
        assert!(a < b);
        assert_eq!(binlog_coordinates(b), (2, 4));
        assert_eq!(b.to_string(), "2/4");
        assert_eq!(file_seq("binlog.000042"), Some(42));
        assert_eq!(file_seq("mysql-bin.1234567"), Some(1_234_567));
        assert_eq!(file_seq("binlog"), None);
        assert_eq!(file_seq("binlog.00x1"), None);
        assert_eq!(file_seq("binlog.99999999999"), None);
        assert_ne!(table_id("a", "bc"), table_id("ab", "c"));
    }

    #[test]
    fn truncate_statements_name_their_table() {
        let t = |sql: &str| truncated_table(sql, "shop");
        let pair = |d: &str, t: &str| Some((d.to_string(), t.to_string()));
        assert_eq!(t("TRUNCATE TABLE orders"), pair("shop", "orders"));
        assert_eq!(t("truncate orders;"), pair("shop", "orders"));
        assert_eq!(
            t("/* app */ TRUNCATE TABLE `my db`.`odd``name`"),
            pair("my db", "odd`name")
        );
        assert_eq!(t("TRUNCATE TABLE other . t"), pair("other", "t"));
        assert_eq!(t("TRUNCATE TABLE t extra"), None);
        assert_eq!(t("TRUNCATED TABLE t"), None);
        assert_eq!(t("DROP TABLE t"), None);
        assert_eq!(t("TRUNCATE TABLE `unterminated"), None);
        assert_eq!(t(""), None);
    }

    #[test]
    fn ddl_statements_name_the_columns_and_tables_they_remove() {
        let d = |sql: &str| parse_ddl(sql, "shop");
        let t = |d: &str, t: &str| (d.to_string(), t.to_string());
        let columns = |table: (String, String), removed: &[&str]| Ddl::Columns {
            table,
            removed: removed.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            d("ALTER TABLE orders DROP COLUMN note"),
            [columns(t("shop", "orders"), &["note"])]
        );
        // Dropped and re-added in one statement: still dropped.
        assert_eq!(
            d(
                "alter table `my db`.`odd``t` drop `note`, add column note text, DROP INDEX i, drop primary key"
            ),
            [columns(t("my db", "odd`t"), &["note"])]
        );
        assert_eq!(
            d(
                "/* app */ ALTER ONLINE IGNORE TABLE IF EXISTS orders DROP COLUMN IF EXISTS a, \
               CHANGE COLUMN b c int, CHANGE d d bigint, RENAME COLUMN e TO f, \
               ADD CONSTRAINT x CHECK (g > 0), DROP CHECK x, DROP FOREIGN KEY fk"
            ),
            [columns(t("shop", "orders"), &["a", "b", "e"])]
        );
        assert_eq!(
            d("ALTER TABLE orders MODIFY priority bigint, ADD COLUMN region text DEFAULT 'a,b'"),
            []
        );
        assert_eq!(
            d("ALTER TABLE orders RENAME TO archive.orders_old"),
            [Ddl::Gone {
                table: t("shop", "orders"),
                to: Some(t("archive", "orders_old"))
            }]
        );
        assert_eq!(d("ALTER TABLE orders RENAME INDEX a TO b"), []);
        assert_eq!(
            d("RENAME TABLE orders TO orders_old, shop.orders_new TO orders"),
            [
                Ddl::Gone {
                    table: t("shop", "orders"),
                    to: None
                },
                Ddl::Gone {
                    table: t("shop", "orders_new"),
                    to: Some(t("shop", "orders"))
                },
            ]
        );
        assert_eq!(
            d("DROP TABLE IF EXISTS `orders`, other.t /* generated by server */"),
            [
                Ddl::Gone {
                    table: t("shop", "orders"),
                    to: None
                },
                Ddl::Gone {
                    table: t("other", "t"),
                    to: None
                },
            ]
        );
        assert_eq!(
            d("CREATE OR REPLACE TABLE orders (id int primary key)"),
            [Ddl::Gone {
                table: t("shop", "orders"),
                to: None
            }]
        );
        // MySQL's executable comments are SQL.
        assert_eq!(
            d("/*!40000 ALTER TABLE orders DROP COLUMN a */"),
            [columns(t("shop", "orders"), &["a"])]
        );
        for nothing in [
            "DROP TEMPORARY TABLE t",
            "CREATE TABLE t (id int)",
            "CREATE TABLE IF NOT EXISTS t (a int)",
            "DROP DATABASE shop",
            "ALTER DATABASE shop CHARACTER SET utf8mb4",
            "ALTER TABLE",
            "GRANT SELECT ON *.* TO x",
            "",
            "`",
            "'unterminated",
        ] {
            assert_eq!(d(nothing), [], "{nothing}");
        }
    }

    /// `name` as MySQL quotes an identifier: in backticks, a backtick in
    /// it doubled.
    fn quoted(name: &str) -> String {
        format!("`{}`", name.replace('`', "``"))
    }

    /// Words and punctuation the statement readers look for, to put
    /// arbitrary statements near the forms they recognize.
    const DDL_PIECES: &[&str] = &[
        "ALTER",
        "TABLE",
        "DROP",
        "COLUMN",
        "CHANGE",
        "RENAME",
        "TO",
        "AS",
        "IF",
        "EXISTS",
        "TRUNCATE",
        "CREATE",
        "OR",
        "REPLACE",
        "WAIT",
        "NOWAIT",
        "ONLINE",
        "IGNORE",
        "INDEX",
        "PRIMARY",
        "KEY",
        "TEMPORARY",
        "TABLES",
        ",",
        ".",
        "(",
        ")",
        "`",
        "``",
        "'",
        "\"",
        "/*",
        "*/",
        "/*!40000",
        "/*M!100100",
        "--",
        "-- ",
        "#",
        "\n",
        "\\",
        ";",
        "t",
        "`a``b`",
        "db",
        "x",
        "5",
    ];

    /// Identifiers, often with the characters that quoting and the
    /// statement readers treat specially.
    const NAME: &str = r##"([`.,;()'"#*/\\ \n-]|\PC){1,12}"##;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The binlog's statements are the server's text, whatever a
        /// client sent: reading one never panics.
        #[test]
        fn statement_readers_never_panic(sql in "\\PC{0,160}") {
            let _ = parse_ddl(&sql, "shop");
            let _ = truncated_table(&sql, "shop");
        }

        #[test]
        fn statement_readers_never_panic_on_near_misses(
            pieces in proptest::collection::vec(proptest::sample::select(DDL_PIECES), 0..24),
            spaced in proptest::collection::vec(proptest::bool::ANY, 24),
        ) {
            let mut sql = String::new();
            for (piece, space) in pieces.iter().zip(&spaced) {
                sql.push_str(piece);
                if *space {
                    sql.push(' ');
                }
            }
            let _ = parse_ddl(&sql, "shop");
            let _ = truncated_table(&sql, "shop");
        }

        /// Any identifier, quoted as MySQL quotes it, comes back as it was.
        #[test]
        fn quoted_names_come_back_as_they_were(
            db in NAME,
            table in NAME,
            column in NAME,
        ) {
            let (qd, qt, qc) = (quoted(&db), quoted(&table), quoted(&column));
            let at = (db.clone(), table.clone());
            proptest::prop_assert_eq!(
                parse_ddl(&format!("ALTER TABLE {qd}.{qt} DROP COLUMN {qc}"), "shop"),
                vec![Ddl::Columns { table: at.clone(), removed: vec![column.clone()] }]
            );
            proptest::prop_assert_eq!(
                parse_ddl(&format!("RENAME TABLE {qt} TO {qd}.{qc}"), "shop"),
                vec![Ddl::Gone {
                    table: ("shop".to_string(), table.clone()),
                    to: Some((db.clone(), column.clone())),
                }]
            );
            proptest::prop_assert_eq!(
                truncated_table(&format!("TRUNCATE TABLE {qd}.{qt}"), "shop"),
                Some(at)
            );
        }
    }

    fn text(value: Value, conv: &Conv) -> String {
        String::from_utf8(value_text(value, conv).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn values_take_the_mapped_types_text_form() {
        assert_eq!(
            text(Value::UInt(18_446_744_073_709_551_615), &Conv::Integer),
            "18446744073709551615"
        );
        assert_eq!(text(Value::Float(0.1), &Conv::Float), "0.1");
        assert_eq!(text(Value::Int(0x80_0000), &Conv::Int24), "-8388608");
        assert_eq!(text(Value::Int(0x7f_ffff), &Conv::Int24), "8388607");
        assert_eq!(text(Value::Int(0xff_ffff), &Conv::Int24), "-1");
        assert_eq!(text(Value::Double(-1.5e300), &Conv::Double).len(), 302);
        assert_eq!(text(Value::Bytes(b"1900".to_vec()), &Conv::Year), "0");
        assert_eq!(text(Value::Int(2024), &Conv::Year), "2024");
        assert_eq!(
            text(Value::Date(2024, 2, 29, 0, 0, 0, 0), &Conv::Date),
            "2024-02-29"
        );
        assert_eq!(
            value_text(Value::Date(0, 0, 0, 0, 0, 0, 0), &Conv::Date).unwrap(),
            None
        );
        assert_eq!(
            text(
                Value::Date(2024, 1, 31, 23, 59, 58, 120_000),
                &Conv::DateTime
            ),
            "2024-01-31 23:59:58.12"
        );
        assert_eq!(
            text(
                Value::Bytes(b"1706745600.000500".to_vec()),
                &Conv::Timestamp { epoch: true }
            ),
            "2024-02-01 00:00:00.0005+00"
        );
        assert_eq!(
            text(
                Value::Date(2024, 2, 1, 0, 0, 0, 0),
                &Conv::Timestamp { epoch: false }
            ),
            "2024-02-01 00:00:00+00"
        );
        assert_eq!(
            text(Value::Time(true, 34, 22, 59, 59, 0), &Conv::Time),
            "-838:59:59"
        );
        assert_eq!(
            text(Value::Time(false, 0, 1, 2, 3, 400_000), &Conv::Time),
            "01:02:03.4"
        );
        assert_eq!(
            text(Value::Bytes(vec![0b0000_0101]), &Conv::Bit { bits: 3 }),
            "101"
        );
        assert_eq!(
            text(Value::Bytes(vec![1, 0]), &Conv::Bit { bits: 10 }),
            "0100000000"
        );
        assert_eq!(
            text(Value::Bytes(vec![0xab, 0]), &Conv::Bytes { pad: Some(4) }),
            "\\xab000000"
        );
        assert_eq!(
            text(
                Value::Bytes(vec![b'a', 0x80, 0xe9]),
                &Conv::Text {
                    charset: Charset::Latin1
                }
            ),
            "a€é"
        );
        assert!(
            value_text(
                Value::Bytes(vec![0xff]),
                &Conv::Text {
                    charset: Charset::Utf8
                }
            )
            .is_err()
        );
        let names: Arc<[String]> = vec!["a".to_string(), "b".into(), "c".into()].into();
        assert_eq!(text(Value::Int(2), &Conv::Enum(Arc::clone(&names))), "b");
        assert_eq!(text(Value::Int(0), &Conv::Enum(Arc::clone(&names))), "");
        assert!(value_text(Value::Int(9), &Conv::Enum(Arc::clone(&names))).is_err());
        assert_eq!(text(Value::Bytes(vec![0b101]), &Conv::Set(names)), "a,c");
        assert_eq!(value_text(Value::NULL, &Conv::Integer).unwrap(), None);
    }

    /// The catalog and the binlog agree on every column's PostgreSQL type:
    /// a table created from `information_schema` must not stall on its
    /// first table map.
    #[test]
    fn catalog_and_binlog_map_to_the_same_types() {
        use ColumnType::*;
        // (DATA_TYPE, COLUMN_TYPE, charset, table-map type, unsigned, its charset)
        type Case<'a> = (
            &'a str,
            &'a str,
            Option<&'a str>,
            ColumnType,
            bool,
            Option<&'a str>,
        );
        let cases: &[Case<'_>] = &[
            ("tinyint", "tinyint(4)", None, MYSQL_TYPE_TINY, false, None),
            (
                "tinyint",
                "tinyint(3) unsigned",
                None,
                MYSQL_TYPE_TINY,
                true,
                None,
            ),
            (
                "smallint",
                "smallint(6)",
                None,
                MYSQL_TYPE_SHORT,
                false,
                None,
            ),
            (
                "smallint",
                "smallint(5) unsigned",
                None,
                MYSQL_TYPE_SHORT,
                true,
                None,
            ),
            (
                "mediumint",
                "mediumint(8) unsigned",
                None,
                MYSQL_TYPE_INT24,
                true,
                None,
            ),
            ("int", "int(11)", None, MYSQL_TYPE_LONG, false, None),
            ("int", "int(10) unsigned", None, MYSQL_TYPE_LONG, true, None),
            (
                "bigint",
                "bigint(20)",
                None,
                MYSQL_TYPE_LONGLONG,
                false,
                None,
            ),
            (
                "bigint",
                "bigint(20) unsigned",
                None,
                MYSQL_TYPE_LONGLONG,
                true,
                None,
            ),
            (
                "decimal",
                "decimal(10,2)",
                None,
                MYSQL_TYPE_NEWDECIMAL,
                false,
                None,
            ),
            ("float", "float", None, MYSQL_TYPE_FLOAT, false, None),
            ("double", "double", None, MYSQL_TYPE_DOUBLE, false, None),
            ("year", "year(4)", None, MYSQL_TYPE_YEAR, false, None),
            ("date", "date", None, MYSQL_TYPE_DATE, false, None),
            ("time", "time(3)", None, MYSQL_TYPE_TIME2, false, None),
            (
                "datetime",
                "datetime(6)",
                None,
                MYSQL_TYPE_DATETIME2,
                false,
                None,
            ),
            (
                "timestamp",
                "timestamp",
                None,
                MYSQL_TYPE_TIMESTAMP2,
                false,
                None,
            ),
            ("bit", "bit(5)", None, MYSQL_TYPE_BIT, false, None),
            (
                "char",
                "char(3)",
                Some("utf8mb4"),
                MYSQL_TYPE_STRING,
                false,
                Some("utf8mb4"),
            ),
            (
                "varchar",
                "varchar(20)",
                Some("latin1"),
                MYSQL_TYPE_VARCHAR,
                false,
                Some("latin1"),
            ),
            (
                "text",
                "text",
                Some("utf8mb4"),
                MYSQL_TYPE_BLOB,
                false,
                Some("utf8mb4"),
            ),
            (
                "binary",
                "binary(4)",
                None,
                MYSQL_TYPE_STRING,
                false,
                Some("binary"),
            ),
            (
                "varbinary",
                "varbinary(4)",
                None,
                MYSQL_TYPE_VARCHAR,
                false,
                Some("binary"),
            ),
            ("blob", "blob", None, MYSQL_TYPE_BLOB, false, Some("binary")),
            (
                "enum",
                "enum('a','b')",
                Some("utf8mb4"),
                MYSQL_TYPE_ENUM,
                false,
                Some("utf8mb4"),
            ),
            (
                "set",
                "set('a','b')",
                Some("utf8mb4"),
                MYSQL_TYPE_SET,
                false,
                Some("utf8mb4"),
            ),
            ("json", "json", None, MYSQL_TYPE_JSON, false, None),
        ];
        for (data_type, column_type, charset, binlog_type, unsigned, binlog_charset) in cases {
            let (catalog_oid, _, _) =
                map_catalog_type(data_type, column_type, *charset, Some(5), false).unwrap();
            let (binlog_oid, _, _) = map_binlog_type(
                *binlog_type,
                &[5, 0],
                *unsigned,
                *binlog_charset,
                None,
                Some(Arc::from(vec!["a".to_string()])),
                Some(Arc::from(vec!["a".to_string()])),
            );
            assert_eq!(catalog_oid, binlog_oid, "{column_type}");
        }
        // MariaDB's JSON is longtext with a json_valid check.
        let (oid, _, _) =
            map_catalog_type("longtext", "longtext", Some("utf8mb4"), None, true).unwrap();
        let (binlog, _, _) = map_binlog_type(
            MYSQL_TYPE_BLOB,
            &[4],
            false,
            Some("utf8mb4"),
            Some(Declared::Json),
            None,
            None,
        );
        assert_eq!((oid, binlog), (JSONB, JSONB));
        // MariaDB's UUID, INET4 and INET6 are fixed binary strings in the
        // binlog: the catalog says which.
        for (data_type, declared, len, want) in [
            ("uuid", Declared::Uuid, 16u8, UUID),
            ("inet4", Declared::Inet4, 4, INET),
            ("inet6", Declared::Inet6, 16, INET),
        ] {
            let (oid, _, _) = map_catalog_type(data_type, data_type, None, None, false).unwrap();
            let (binlog, _, _) = map_binlog_type(
                MYSQL_TYPE_STRING,
                &[0xfe, len],
                false,
                Some("binary"),
                Some(declared),
                None,
                None,
            );
            assert_eq!((oid, binlog), (want, want), "{data_type}");
        }
        assert!(map_catalog_type("inet", "inet", None, None, false).is_none());
    }

    fn uuid(text: &str) -> [u8; 16] {
        uuid_from_text(text.as_bytes()).unwrap()
    }

    #[test]
    fn uuids_come_back_from_the_binlog_and_from_text() {
        for text in [
            "6ccd780c-baba-1026-9564-5b8c656024db",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "01890a5d-ac96-774b-bcce-b30209000000",
            "00000000-0000-0000-0000-000000000000",
        ] {
            let u = uuid(text);
            assert_eq!(uuid_text(&u), text);
            // The binlog drops trailing zero bytes.
            let end = u.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
            assert_eq!(uuid_from_binlog(&u[..end]), Some(u), "{text}");
        }
        assert_eq!(
            uuid_from_text(b"A0EEBC999C0B4EF8BB6D6BB9BD380A11")
                .map(|u| uuid_text(&u))
                .as_deref(),
            Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
        );
        assert_eq!(uuid_from_text(b"a0eebc99"), None);
        assert_eq!(
            uuid_from_text(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11ff"),
            None
        );
        assert_eq!(
            uuid_from_text("é0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1".as_bytes()),
            None
        );
        assert_eq!(uuid_from_binlog(&[0; 17]), None);
    }

    #[test]
    fn inet_text_is_postgres_inet_output() {
        for (input, want) in [
            ("1.2.3.4", "1.2.3.4"),
            ("0.0.0.0", "0.0.0.0"),
            ("::", "::"),
            ("::1", "::1"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
            ("::1.2.3.4", "::1.2.3.4"),
            ("2001:db8::1", "2001:db8::1"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("2001:0db8:0000:0001:0000:0000:0000:0001", "2001:db8:0:1::1"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
            ("FE80::ABCD", "fe80::abcd"),
            ("1::", "1::"),
        ] {
            let address: std::net::IpAddr = input.parse().unwrap();
            assert_eq!(inet_text(address), want, "{input}");
        }
    }

    #[test]
    fn uuid_and_inet_values_convert_from_the_binlog_and_from_snapshots() {
        let text = |v: Value, conv: &Conv| {
            value_text(v, conv).map(|t| t.map(|t| String::from_utf8(t).unwrap()))
        };
        let m = uuid("6ccd780c-baba-1026-9564-5b8c656024db");
        assert_eq!(
            text(Value::Bytes(m.to_vec()), &Conv::Uuid { record: true }),
            Ok(Some("6ccd780c-baba-1026-9564-5b8c656024db".into()))
        );
        let trailing = uuid("01890a5d-ac96-774b-bcce-b30209000000");
        assert_eq!(
            text(
                Value::Bytes(trailing[..13].to_vec()),
                &Conv::Uuid { record: true }
            ),
            Ok(Some("01890a5d-ac96-774b-bcce-b30209000000".into()))
        );
        assert_eq!(
            text(
                Value::Bytes(b"6ccd780c-baba-1026-9564-5b8c656024db".to_vec()),
                &Conv::Uuid { record: false }
            ),
            Ok(Some("6ccd780c-baba-1026-9564-5b8c656024db".into()))
        );
        assert!(
            text(
                Value::Bytes(b"nope".to_vec()),
                &Conv::Uuid { record: false }
            )
            .is_err()
        );
        let v4 = Conv::Inet {
            len: 4,
            record: true,
        };
        assert_eq!(
            text(Value::Bytes(vec![10, 0]), &v4),
            Ok(Some("10.0.0.0".into()))
        );
        assert!(text(Value::Bytes(vec![1; 5]), &v4).is_err());
        let mut mapped = vec![0u8; 10];
        mapped.extend([0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(
            text(
                Value::Bytes(mapped),
                &Conv::Inet {
                    len: 16,
                    record: true
                }
            ),
            Ok(Some("::ffff:192.0.2.1".into()))
        );
        assert_eq!(
            text(
                Value::Bytes(b"2001:DB8::0:1".to_vec()),
                &Conv::Inet {
                    len: 16,
                    record: false
                }
            ),
            Ok(Some("2001:db8::1".into()))
        );
        assert!(
            text(
                Value::Bytes(b"300.1.1.1".to_vec()),
                &Conv::Inet {
                    len: 4,
                    record: false
                }
            )
            .is_err()
        );
        assert_eq!(text(Value::NULL, &v4), Ok(None));
    }
}
