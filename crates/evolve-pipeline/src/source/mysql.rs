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
//! and are sent as NULL, as Debezium does; so are the other dates MySQL
//! may store and PostgreSQL has not (a zero year, month or day,
//! `2024-00-15`, and a day past its month's end with
//! `ALLOW_INVALID_DATES`), in DATE, DATETIME and TIMESTAMP columns alike.
//! MariaDB's JSON, UUID, INET4
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
//!   TABLE` (also the `... SELECT` form, whose statement comes inside
//!   the event group that logs the new table's rows) remove it, and `DROP
//!   DATABASE` every table of the database. A statement that removes or
//!   replaces rows without logging them (`ALTER TABLE ... TRUNCATE`,
//!   `DROP`, `EXCHANGE` or `CONVERT PARTITION`, `IMPORT TABLESPACE`), and
//!   a write logged as its text by a session whose `binlog_format` is
//!   `STATEMENT` or `MIXED` (`INSERT`, `REPLACE`, `UPDATE`, `DELETE`, `LOAD
//!   DATA`), stall the tables they write
//!   ([`SourceEvent::Undecodable`], with the way out): evolve cannot tell
//!   which rows changed (every table of the source, for a multi-table
//!   write whose tables this reading cannot tell). The stream
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
//! | `DROP TABLE`, `CREATE OR REPLACE TABLE` (`... SELECT` too), `DROP DATABASE` | the table stalls: `upstream table "db.a" was dropped or replaced by another table of that name; ...`; a table re-created under the name is not merged into it |
//! | `ALTER TABLE ... TRUNCATE`, `DROP`, `EXCHANGE` or `CONVERT PARTITION`, `IMPORT TABLESPACE` | the table stalls: `ALTER TABLE ... TRUNCATE PARTITION at ... removed or replaced rows of upstream table "db.a" without logging them as rows, ...` (`tests/mysql_statements.rs`) |
//! | a write by a session with `binlog_format` `STATEMENT` or `MIXED` | the tables it writes stall: `the UPDATE at ... was logged as a statement, not as the rows it changed: ...; set binlog_format = 'ROW' upstream ...` (`tests/mysql_statements.rs`) |
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
//! the source are created again. A user who lost REPLICATION SLAVE (MariaDB
//! answers the binlog dump with error 1045, "Access denied ... (using
//! password: YES)", which reads as a wrong password and is not one;
//! MySQL with 1227), or whose password the server refuses when the stream
//! connects (1045: changed upstream, or the user dropped), is permanent
//! too: the error names the account and the GRANT, or the connection whose
//! url to fix, and the source resumes at its position once restarted.
//! So is a query of the binlog's metadata refused for a privilege (error
//! 1227, [`PipelineError::AccessDenied`]): `SHOW MASTER STATUS` and `SHOW
//! BINARY LOGS` need REPLICATION CLIENT (MariaDB's BINLOG MONITOR), and
//! the stream runs them when it opens at a file and offset, MySQL's
//! snapshot when it reads its position; the error names the privilege
//! the server's message asks for (never SUPER, which it offers as the
//! other way) and the GRANT. Every session of a running source (the
//! stream, a snapshot and its lock, the drift poll) takes a refused
//! password as such (`session`), and a table whose snapshot is refused
//! stalls until the pipeline restarts. So does a table the user may not
//! read (error 1142, SELECT denied on the table; 1143, on some of its
//! columns), and a source whose user has no privilege at all on the url's
//! database (1044, at login): the error names the account, the table and
//! the exact `GRANT SELECT ON db.table TO 'user'@'host';`
//! (`select_denied`), and the restarted pipeline copies the table
//! (the stream keeps its changes meanwhile, as it does during any copy).
//! `information_schema` hides what the user may not read, so CREATE TABLE
//! and the drift poll try a `SELECT ... LIMIT 0` of a table or columns it
//! does not show, and report a refusal as such, not as a missing table
//! or dropped columns.
//! Lost connections, restarts and timeouts
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
mod ddl;
pub mod gtid;
pub mod rows;
mod snapshot;
mod stream;
mod types;

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
use super::{ChangeStream, Source, SourceEvent, TableSnapshot, civil_from_days};
use crate::config::Connection;
use crate::drift::{Upstream, UpstreamColumn};
use crate::error::{PipelineError, Result};
use crate::position::Position;
use crate::store::{ColumnInfo, SourceInfo, TableInfo};
use crate::upstream::UpstreamTable;
use ddl::*;
pub use snapshot::MysqlSnapshot;
use snapshot::*;
pub use stream::MysqlStream;
use stream::*;
use types::*;

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
    let opts = opts(name, connection)?;
    match Conn::new(opts.clone()).await {
        Ok(conn) => Ok(conn),
        // No privilege on the url's database: the GRANT, not "check the
        // url" (the url is right).
        Err(mysql_async::Error::Server(server))
            if server.code == stream::ER_DBACCESS_DENIED_ERROR =>
        {
            Err(database_denied(name, connection, opts, server).await)
        }
        Err(e) => Err(connect_error(name, connection, e)),
    }
}

/// Connection `name` could not be opened.
fn connect_error(name: &str, connection: &Connection, e: mysql_async::Error) -> PipelineError {
    PipelineError::Connect {
        connection: name.to_string(),
        target: target(connection),
        // The operating system's words once, not wrapped twice in
        // "Input/output error".
        reason: match &e {
            mysql_async::Error::Io(mysql_async::IoError::Io(io)) => io.to_string(),
            other => other.to_string(),
        },
    }
}

/// A session of a running source (its stream, a snapshot, the drift
/// poll) on connection `name`: [`connect`], except that a server refusing
/// the user (error 1045 when connecting: a password changed upstream, a
/// user dropped) is a permanent error naming the connection whose url to
/// fix ([`PipelineError::AccessDenied`]), not a connection failure to
/// retry forever.
///
/// A user without any privilege on the url's database (error 1044 at
/// login) is permanent too, naming the account and the GRANT
/// ([`select_denied`]).
async fn session(name: &str, connection: &Connection) -> Result<Conn> {
    let opts = opts(name, connection)?;
    match Conn::new(opts.clone()).await {
        Ok(conn) => Ok(conn),
        Err(mysql_async::Error::Server(server))
            if server.code == stream::ER_ACCESS_DENIED_ERROR =>
        {
            Err(login_refused(name, &target(connection), &server.message))
        }
        Err(mysql_async::Error::Server(server))
            if server.code == stream::ER_DBACCESS_DENIED_ERROR =>
        {
            Err(database_denied(name, connection, opts, server).await)
        }
        Err(e) => Err(connect_error(name, connection, e)),
    }
}

/// Connection `name` was refused at login for its database (error 1044:
/// the user has no privilege on the url's database): permanent, naming
/// the account and the GRANT ([`select_denied`]).
async fn database_denied(
    name: &str,
    connection: &Connection,
    opts: Opts,
    server: mysql_async::ServerError,
) -> PipelineError {
    let database = opts.db_name().unwrap_or_default().to_string();
    // The account as GRANT names it, from a session without the
    // database (its host is the account's, not the client's).
    let without: Opts = OptsBuilder::from_opts(opts).db_name(None::<String>).into();
    let account = match Conn::new(without).await {
        Ok(mut conn) => {
            let account = current_account(&mut conn).await;
            let _ = conn.disconnect().await;
            account.ok()
        }
        Err(_) => None,
    }
    .unwrap_or_else(|| "the connection's user".into());
    let what = format!("each session of connection \"{name}\"");
    select_denied(
        &account,
        &database,
        None,
        &what,
        server.code,
        &server.message,
    )
    .unwrap_or_else(|| connect_error(name, connection, mysql_async::Error::Server(server)))
}

/// The session's user as GRANT names it: `'evolve'@'%'`.
async fn current_account(conn: &mut Conn) -> Result<String> {
    let user: Option<String> = conn
        .query_first("SELECT CURRENT_USER()")
        .await
        .map_err(|e| query_error("read the session's user (CURRENT_USER())", e))?;
    let user = user.unwrap_or_default();
    Ok(match user.rsplit_once('@') {
        Some((u, h)) => format!("'{u}'@'{h}'"),
        None => format!("'{user}'"),
    })
}

/// A query of the binlog's metadata on `conn` failed with `e`: a refusal
/// for the user's privileges is permanent, naming the privilege and the
/// GRANT ([`metadata_denied`]; `what` says what needs it, as `reading the
/// binlog position (SHOW MASTER STATUS)`); anything else is a
/// [`query_error`].
async fn metadata_error(conn: &mut Conn, what: &str, e: mysql_async::Error) -> PipelineError {
    if let mysql_async::Error::Server(server) = &e {
        // The session itself still works: it says who it is.
        let account = current_account(conn)
            .await
            .unwrap_or_else(|_| "the connection's user".into());
        if let Some(denied) = metadata_denied(&account, what, server.code, &server.message) {
            return denied;
        }
    }
    query_error(what, e)
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
    let what = "reading the binlog position (SHOW MASTER STATUS)";
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Ok(row) => row,
        // ER_PARSE_ERROR: MySQL 8.4 has only the new name.
        Err(mysql_async::Error::Server(e)) if e.code == 1064 => {
            match conn.query_first("SHOW BINARY LOG STATUS").await {
                Ok(row) => row,
                Err(e) => return Err(metadata_error(conn, what, e).await),
            }
        }
        Err(e) => return Err(metadata_error(conn, what, e).await),
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
    let text: Option<Option<String>> = match conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, offset))
        .await
    {
        Ok(text) => text,
        Err(e) => {
            let needs =
                format!("mapping binlog position {file}:{offset} to GTIDs (BINLOG_GTID_POS)");
            return Err(metadata_error(conn, &needs, e).await);
        }
    };
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
        let quoted = current_account(&mut conn)
            .await
            .unwrap_or_else(|_| "''".into());
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
    // The user's SELECT on the table, first: `information_schema` hides a
    // table the user has no privilege on, which would read as missing.
    let what = format!("read {reference} (SELECT)");
    if let Err(e) = conn
        .query_drop(format!(
            "SELECT 1 FROM {} LIMIT 0",
            quoted_table(database, table)
        ))
        .await
        && read_denied(&e)
    {
        let mut refused = read_error(&mut conn, database, table, "its snapshot", &what, e).await;
        // Nothing runs yet: the way out is the GRANT, then the statement.
        if let PipelineError::AccessDenied { hint, .. } = &mut refused
            && let Some(end) = hint.find(';')
        {
            *hint = format!("{} Then create the table again.", &hint[..=end]);
        }
        return Err(refused);
    }
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
            labels: None,
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
    .map_err(|e| query_error(&what, e))?;
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
/// in one session. A table the user may not read is that table's error
/// (naming the GRANT), not the others'; a session that cannot be opened
/// is the whole poll's.
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
) -> Result<Vec<Result<Upstream>>> {
    let mut conn = session(name, connection).await?;
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
        // `information_schema` hides what the user may not read: a table
        // or columns it hides are not dropped. Read them (none of their
        // rows) to tell; refused, the poll names the GRANT.
        let hidden: Vec<String> = table
            .document_columns()
            .filter(|c| {
                !columns
                    .as_ref()
                    .is_some_and(|seen| seen.iter().any(|s| s.name == c.name))
            })
            .map(|c| quote_ident(&c.name))
            .collect();
        if !hidden.is_empty()
            && let Err(e) = conn
                .query_drop(format!(
                    "SELECT {} FROM {} LIMIT 0",
                    hidden.join(", "),
                    quoted_table(database, table_name)
                ))
                .await
            && read_denied(&e)
        {
            let what = format!("read {database}.{table_name} (SELECT)");
            out.push(Err(read_error(
                &mut conn,
                database,
                table_name,
                "the drift poll",
                &what,
                e,
            )
            .await));
            continue;
        }
        out.push(Ok(match columns {
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
        }));
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
                attnum: None,
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
        let logs: std::result::Result<Vec<(String, u64)>, _> = conn
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
            .await;
        let logs = match logs {
            Ok(logs) => logs,
            Err(e) => {
                let what = "listing the binlog files (SHOW BINARY LOGS)";
                return Err(metadata_error(conn, what, e).await);
            }
        };
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
        let mut conn = session(&self.source.connection, &self.connection).await?;
        let account = current_account(&mut conn).await?;
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
                    .map_err(|e| stream_error(name, &needed, &account, false, e))?;
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
                            .map_err(|e| stream_error(name, &needed, &account, true, e))?
                    }
                    GtidState::MySql(set) => {
                        let request = BinlogStreamRequest::new(id)
                            .with_gtid()
                            .with_gtid_set(mysql_sids(set)?);
                        conn.get_binlog_stream(request)
                            .await
                            .map_err(|e| stream_error(name, &needed, &account, true, e))?
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
            account,
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
        let mut conn = session(&self.source.connection, &self.connection).await?;
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
            let mut lock = session(&self.source.connection, &self.connection).await?;
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
        let upstream = (table.upstream_schema.clone(), table.upstream_table.clone());
        let task = tokio::spawn(copy_rows(conn, sql, convs, tx, what.clone(), upstream));
        Ok(MysqlSnapshot { position, rx, task })
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
            seen.len() >= 10,
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
        // Rows changed without row events: the partition and tablespace
        // clauses, before the columns and a rename of the same statement.
        let rows = |tables: &[(&str, &str)], statement: &'static str| Ddl::Rows {
            tables: tables.iter().map(|(d, n)| t(d, n)).collect(),
            statement,
        };
        assert_eq!(
            d("ALTER TABLE p TRUNCATE PARTITION p0, p1"),
            [rows(&[("shop", "p")], "ALTER TABLE ... TRUNCATE PARTITION")]
        );
        assert_eq!(
            d("ALTER TABLE p DROP PARTITION IF EXISTS p0"),
            [rows(&[("shop", "p")], "ALTER TABLE ... DROP PARTITION")]
        );
        assert_eq!(
            d("ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE other.swap WITHOUT VALIDATION"),
            [rows(
                &[("shop", "p"), ("other", "swap")],
                "ALTER TABLE ... EXCHANGE PARTITION"
            )]
        );
        assert_eq!(
            d("ALTER TABLE p CONVERT PARTITION p0 TO TABLE p0_old"),
            [rows(&[("shop", "p")], "ALTER TABLE ... CONVERT PARTITION")]
        );
        assert_eq!(
            d("ALTER TABLE p CONVERT TABLE q TO PARTITION p2 VALUES LESS THAN (30)"),
            [
                rows(
                    &[("shop", "p")],
                    "ALTER TABLE ... CONVERT TABLE ... TO PARTITION"
                ),
                Ddl::Gone {
                    table: t("shop", "q"),
                    to: None
                }
            ]
        );
        assert_eq!(
            d("ALTER TABLE p IMPORT TABLESPACE"),
            [rows(&[("shop", "p")], "ALTER TABLE ... IMPORT TABLESPACE")]
        );
        for nothing in [
            "ALTER TABLE p REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))",
            "ALTER TABLE p ADD PARTITION (PARTITION p9 VALUES LESS THAN (90))",
            "ALTER TABLE p REMOVE PARTITIONING",
            "ALTER TABLE p ALGORITHM=INSTANT, ADD COLUMN x int",
        ] {
            assert_eq!(d(nothing), [], "{nothing}");
        }
        assert_eq!(
            d("ALTER TABLE orders DROP COLUMN a, RENAME TO orders_old, ALGORITHM=INSTANT"),
            [
                columns(t("shop", "orders"), &["a"]),
                Ddl::Gone {
                    table: t("shop", "orders"),
                    to: Some(t("shop", "orders_old"))
                }
            ]
        );
        // A database's tables go with it.
        for sql in [
            "DROP DATABASE shop2",
            "drop schema if exists `shop2`",
            "CREATE OR REPLACE DATABASE shop2",
        ] {
            assert_eq!(
                d(sql),
                [Ddl::Database {
                    database: "shop2".into()
                }],
                "{sql}"
            );
        }
        for nothing in [
            "DROP TEMPORARY TABLE t",
            "CREATE TABLE t (id int)",
            "CREATE TABLE IF NOT EXISTS t (a int)",
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

    #[test]
    fn writes_logged_as_statements_name_the_tables_they_write() {
        let w = |sql: &str| statement_rows(sql, "shop");
        let one = |kind: &'static str, d: &str, t: &str| {
            Some(StatementRows {
                kind,
                tables: Some(vec![(d.to_string(), t.to_string())]),
            })
        };
        let unknown = |kind: &'static str| Some(StatementRows { kind, tables: None });
        assert_eq!(w("INSERT INTO a VALUES (1)"), one("INSERT", "shop", "a"));
        assert_eq!(
            w("/* app */ insert low_priority ignore `my db`.`a``b` (x) SELECT 1"),
            one("INSERT", "my db", "a`b")
        );
        assert_eq!(w("REPLACE b SET x = 1"), one("REPLACE", "shop", "b"));
        assert_eq!(
            w("UPDATE other.t AS x SET n = 1 WHERE id = 2"),
            one("UPDATE", "other", "t")
        );
        assert_eq!(w("UPDATE IGNORE t x SET n = 1"), one("UPDATE", "shop", "t"));
        assert_eq!(w("DELETE FROM t WHERE id = 1"), one("DELETE", "shop", "t"));
        assert_eq!(w("DELETE QUICK FROM t"), one("DELETE", "shop", "t"));
        assert_eq!(
            w("LOAD DATA INFILE '/tmp/x' IGNORE INTO TABLE t FIELDS TERMINATED BY ','"),
            one("LOAD DATA", "shop", "t")
        );
        // Several tables: which of them changed is not for this reading.
        assert_eq!(
            w("UPDATE a JOIN b ON a.id = b.id SET a.n = b.n"),
            unknown("UPDATE")
        );
        assert_eq!(w("UPDATE a, b SET a.n = 1"), unknown("UPDATE"));
        assert_eq!(w("DELETE a FROM a JOIN b USING (id)"), unknown("DELETE"));
        assert_eq!(w("DELETE FROM a USING a JOIN b"), unknown("DELETE"));
        for nothing in [
            "BEGIN",
            "SAVEPOINT x",
            "ROLLBACK TO SAVEPOINT x",
            "SELECT 1",
            "CREATE TABLE t (id int)",
            "LOAD INDEX INTO CACHE t",
            "",
        ] {
            assert_eq!(w(nothing), None, "{nothing}");
        }
        // A long statement is read from its head.
        let long = format!("INSERT INTO t VALUES {}", "(1, 'x'),".repeat(100_000));
        assert_eq!(w(&long), one("INSERT", "shop", "t"));
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
            let _ = statement_rows(&sql, "shop");
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
            let _ = statement_rows(&sql, "shop");
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
        // Dates PostgreSQL does not have are NULL, as zero dates are.
        for (y, m, d) in [
            (2024, 0, 15),
            (2024, 2, 0),
            (2023, 2, 29),
            (2024, 4, 31),
            (0, 1, 1),
        ] {
            for conv in [Conv::Date, Conv::DateTime, Conv::Timestamp { epoch: false }] {
                assert_eq!(
                    value_text(Value::Date(y, m, d, 10, 0, 0, 0), &conv).unwrap(),
                    None,
                    "{y}-{m}-{d} {conv:?}"
                );
            }
        }
        assert_eq!(
            text(Value::Date(2000, 2, 29, 0, 0, 0, 0), &Conv::Date),
            "2000-02-29"
        );
        assert_eq!(
            text(Value::Date(1, 1, 1, 0, 0, 0, 0), &Conv::Date),
            "0001-01-01"
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
