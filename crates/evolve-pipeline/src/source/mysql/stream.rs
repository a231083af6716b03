//! The binlog stream: events read as a replica reads them, table maps
//! turned into schemas, row images into changes, GTIDs and XA
//! transactions tracked, and DDL applied to the schema history.

use super::*;

/// A table map turned into a schema and conversions.
pub(super) struct Mapped {
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
    pub(super) name: String,
    pub(super) binlog: BinlogStream,
    /// The file events are read from, and its number (file and offset
    /// positions; with GTIDs, the file only, for errors).
    pub(super) file: String,
    pub(super) seq: u32,
    /// A format description event was read (events have their checksums
    /// taken off from there on).
    pub(super) described: bool,
    /// Where the last event read ended in that file.
    pub(super) last_end: u32,
    /// Where the stream was opened, as errors name it.
    pub(super) needed: String,
    /// The session's user, quoted as GRANT names it (`'evolve'@'%'`).
    pub(super) account: String,
    /// GTID positions: the state after the last event group and the group
    /// being read. `None`: file and offset positions.
    pub(super) gtid: Option<GtidTrack>,
    /// The GTID states of the [`SourceEvent::Commit`]s in `queue`, in order.
    pub(super) commit_states: VecDeque<String>,
    /// The last commit [`ChangeStream::next`] returned, with its GTID state.
    pub(super) delivered: Option<(Position, String)>,
    pub(super) in_transaction: bool,
    pub(super) queue: VecDeque<SourceEvent>,
    pub(super) charsets: HashMap<u16, String>,
    /// The ids of the tables the catalog reads, with their JSON columns.
    pub(super) wanted: HashMap<u32, HashMap<String, Declared>>,
    /// The tables the catalog reads by their upstream name now, with the
    /// ids they are read under ([`table_id`] of the name a table version
    /// was created with): a table renamed on its own keeps its ids under
    /// its new name, and a table version created over the new name adds
    /// its own.
    pub(super) names: HashMap<(String, String), Vec<u32>>,
    /// The latest table map of each binlog table id, and what it maps to
    /// (`None`: a table nobody reads).
    pub(super) maps: HashMap<u64, (TableMapEvent<'static>, Option<Arc<Mapped>>)>,
    /// The schema last sent for each table.
    pub(super) schemas: HashMap<u32, Arc<TableSchema>>,
    /// Each table's columns where the stream resumed (the schema history's,
    /// or `information_schema`'s when the stream was opened for a table it
    /// has none of): what a DDL statement changes when no schema was sent
    /// yet.
    pub(super) base: HashMap<u32, Arc<TableSchema>>,
    /// The id of [`MARKER_TABLE`] in the connection's database.
    pub(super) marker: Option<u32>,
    /// XA transactions prepared and not committed or rolled back yet,
    /// oldest first (see "XA transactions").
    pub(super) prepared: Vec<PreparedXa>,
    /// The XA prepare being read: its events collect in `queue`, which
    /// [`ChangeStream::next`] hands out only once the prepare has ended.
    pub(super) preparing: Option<PreparedXa>,
    /// The XA transaction whose `XA COMMIT` or `XA ROLLBACK` group is
    /// being read.
    pub(super) completing: Option<Xid>,
    /// When the binlog read fails for want of events: [`READ_TIMEOUT`]
    /// after the last event read (or after the stream was opened). It is
    /// kept here, not in [`ChangeStream::next`]'s future: the engine drops
    /// that future whenever another arm of its `select!` wins (every
    /// 200 ms at least), and a timeout started by each call would never
    /// run out.
    pub(super) read_deadline: tokio::time::Instant,
}

/// A prepared XA transaction the stream holds until its `XA COMMIT`.
pub(super) struct PreparedXa {
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
pub(super) enum Gtid {
    MariaDb(MariaGtid),
    /// Source UUID, tag (`""` for none), transaction number.
    MySql(Uuid, String, u64),
}

/// A stream's GTID state and the event group it is in.
pub(super) struct GtidTrack {
    /// After the last event group read to its end.
    pub(super) state: GtidState,
    /// The GTID of the event group being read.
    pub(super) group: Option<Gtid>,
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

/// ER_ACCESS_DENIED_ERROR. After the session was authenticated, it is
/// MariaDB's answer to a binlog dump by a user without REPLICATION SLAVE
/// ("Access denied for user ... (using password: YES)", which reads as a
/// wrong password and is not one); when connecting, a password or user
/// the server no longer has.
pub(super) const ER_ACCESS_DENIED_ERROR: u16 = 1045;

/// ER_SPECIFIC_ACCESS_DENIED_ERROR: "you need (at least one of) the ...
/// privilege(s)", MySQL's answer to a binlog dump without REPLICATION
/// SLAVE.
const ER_SPECIFIC_ACCESS_DENIED_ERROR: u16 = 1227;

/// The privilege a 1227 message names (`you need (at least one of) the
/// REPLICATION SLAVE privilege(s)`), if it names one in plain words; of
/// several (any one will do), REPLICATION SLAVE when it is one of them,
/// else the first that is not SUPER (which no one should grant for this:
/// MySQL says `the SUPER, REPLICATION CLIENT privilege(s)`, MariaDB `the
/// SUPER, BINLOG MONITOR privilege(s)`).
fn needed_privilege(message: &str) -> Option<&str> {
    let after = &message[message.find("the ")? + "the ".len()..];
    let named = after[..after.find(" privilege")?].trim();
    let each = || named.split(',').map(str::trim);
    let privilege = if each().any(|p| p == "REPLICATION SLAVE") {
        "REPLICATION SLAVE"
    } else {
        each().find(|p| *p != "SUPER").or_else(|| each().next())?
    };
    (!privilege.is_empty()
        && privilege
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b' ' || b == b'_'))
    .then_some(privilege)
}

/// A query of the server's binlog metadata (`what`: `reading the binlog
/// position (SHOW MASTER STATUS)`) that the server refused with `code`
/// and `message`: when that is a refusal for the user's privileges (1227;
/// 1045 in a session already authenticated), a permanent error naming the
/// privilege and the GRANT for `account` (quoted, `'evolve'@'%'`). The
/// privilege is the one the message names, else REPLICATION CLIENT (the
/// one MySQL's SHOW MASTER STATUS and SHOW BINARY LOGS need; MariaDB calls
/// it BINLOG MONITOR and names it).
pub(super) fn metadata_denied(
    account: &str,
    what: &str,
    code: u16,
    message: &str,
) -> Option<PipelineError> {
    if !matches!(
        code,
        ER_ACCESS_DENIED_ERROR | ER_SPECIFIC_ACCESS_DENIED_ERROR
    ) {
        return None;
    }
    let privilege = match code {
        ER_SPECIFIC_ACCESS_DENIED_ERROR => {
            needed_privilege(message).unwrap_or("REPLICATION CLIENT")
        }
        _ => "REPLICATION CLIENT",
    };
    let said = message.trim().trim_end_matches('.');
    Some(PipelineError::AccessDenied {
        sqlstate: "42501",
        primary: format!("user {account} lacks {privilege}, which {what} needs"),
        detail: format!("The server refused it with error {code}: {said}."),
        hint: format!("GRANT {privilege} ON *.* TO {account};"),
    })
}

/// ER_DBACCESS_DENIED_ERROR: "Access denied for user ... to database ...",
/// a user without any privilege on the connection's database (at login,
/// or on a statement naming that database).
pub(super) const ER_DBACCESS_DENIED_ERROR: u16 = 1044;

/// ER_TABLEACCESS_DENIED_ERROR: "SELECT command denied to user ... for
/// table ...".
pub(super) const ER_TABLEACCESS_DENIED_ERROR: u16 = 1142;

/// ER_COLUMNACCESS_DENIED_ERROR: "SELECT command denied to user ... for
/// column ... in table ...".
pub(super) const ER_COLUMNACCESS_DENIED_ERROR: u16 = 1143;

/// A name as GRANT takes it: bare when it is a plain identifier, in
/// backquotes otherwise.
fn grant_ident(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        && !name.bytes().all(|b| b.is_ascii_digit());
    if plain {
        name.to_string()
    } else {
        quote_ident(name)
    }
}

/// Whether `e` is the server refusing a read for the user's privileges on
/// the table, a column of it, or its database (see [`select_denied`]).
pub(super) fn read_denied(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if matches!(
        s.code,
        ER_TABLEACCESS_DENIED_ERROR | ER_COLUMNACCESS_DENIED_ERROR | ER_DBACCESS_DENIED_ERROR
    ))
}

/// A read of table `database.table` (`table` `None`: of database
/// `database`, as a session that names it at login) that the server
/// refused with `code` and `message` for the user's privileges: SELECT on
/// the table (1142) or on one of its columns (1143), or any privilege on
/// the database (1044). Permanent, naming the account (`account`, quoted
/// as GRANT names it: `'evolve'@'%'`), the table, what needs it (`what`:
/// `its snapshot`) and the exact GRANT; `None` for any other error.
/// Retrying cannot help: the server answers the same until someone grants
/// the privilege.
pub(super) fn select_denied(
    account: &str,
    database: &str,
    table: Option<&str>,
    what: &str,
    code: u16,
    message: &str,
) -> Option<PipelineError> {
    let db = grant_ident(database);
    let (lacks, on) = match (code, table) {
        (ER_TABLEACCESS_DENIED_ERROR, Some(t)) => (
            format!("SELECT on table {database}.{t}"),
            format!("{db}.{}", grant_ident(t)),
        ),
        (ER_COLUMNACCESS_DENIED_ERROR, Some(t)) => (
            format!("SELECT on columns of table {database}.{t}"),
            format!("{db}.{}", grant_ident(t)),
        ),
        (ER_DBACCESS_DENIED_ERROR, Some(t)) => (
            format!("any privilege on database {database} (table {database}.{t})"),
            format!("{db}.*"),
        ),
        (ER_DBACCESS_DENIED_ERROR, None) => (
            format!("any privilege on database {database}"),
            format!("{db}.*"),
        ),
        _ => return None,
    };
    let said = message.trim().trim_end_matches('.');
    let grant = format!("GRANT SELECT ON {on} TO {account};");
    Some(PipelineError::AccessDenied {
        sqlstate: "42501",
        primary: format!("user {account} lacks {lacks}, which {what} needs: run {grant}"),
        detail: format!("The server refused it with error {code}: {said}."),
        hint: format!(
            "{grant} Then restart the pipeline: it reads on from where it stopped, losing and repeating nothing."
        ),
    })
}

/// A session on connection `name` (`target`, without its password) that
/// the server refused when it connected with `message` (error 1045: its
/// password changed upstream, or the user is gone): permanent, naming the
/// connection whose url to fix.
pub(super) fn login_refused(name: &str, target: &str, message: &str) -> PipelineError {
    let said = message.trim().trim_end_matches('.');
    PipelineError::AccessDenied {
        sqlstate: "28000",
        primary: format!("the server refused the user of connection \"{name}\" ({target})"),
        detail: format!("The server says: {said}."),
        hint: format!(
            "The user's password changed upstream or the user is gone: put the user's current password in connection \"{name}\"'s url in the config file, or create the user again upstream."
        ),
    }
}

/// A binlog dump the server refused for the user's privileges: permanent
/// (SQLSTATE 42501), naming the account and the GRANT. `account` is the
/// session's `CURRENT_USER()`, quoted (`'evolve'@'%'`).
fn dump_denied(name: &str, account: &str, code: u16, message: &str) -> PipelineError {
    let privilege = match code {
        ER_SPECIFIC_ACCESS_DENIED_ERROR => needed_privilege(message).unwrap_or("REPLICATION SLAVE"),
        _ => "REPLICATION SLAVE",
    };
    PipelineError::Replication {
        source_name: name.to_string(),
        message: format!(
            "user {account} lacks {privilege}, which reading the binlog needs (the server refused the binlog dump with error {code}, access denied; the password was accepted): GRANT {privilege} ON *.* TO {account}; (SQLSTATE 42501)"
        ),
    }
}

/// A binlog stream's error; `by_gtid`: it was opened after a GTID state;
/// `account`: the session's user, quoted, as GRANT names it.
pub(super) fn stream_error(
    name: &str,
    needed: &str,
    account: &str,
    by_gtid: bool,
    e: mysql_async::Error,
) -> PipelineError {
    if let mysql_async::Error::Server(server) = &e
        && matches!(
            server.code,
            ER_ACCESS_DENIED_ERROR | ER_SPECIFIC_ACCESS_DENIED_ERROR
        )
    {
        return dump_denied(name, account, server.code, &server.message);
    }
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
                } else if let Some(rows) = statement_rows(&sql, &query.schema()) {
                    // Row-based logging never logs these as text.
                    let at = self.event_at(&header);
                    let inside = self.in_transaction;
                    self.on_statement_rows(rows, &at, header.timestamp(), log_pos)?;
                    if !inside {
                        self.finish_group()?;
                    }
                } else if self.in_transaction {
                    // DDL within an event group that also logs rows
                    // (`CREATE OR REPLACE TABLE ... SELECT`): the table it
                    // replaces is gone before the new one's rows.
                    let ddl = parse_ddl(&sql, &query.schema());
                    if !ddl.is_empty() {
                        let at = self.event_at(&header);
                        self.on_ddl(ddl, &at, header.timestamp(), log_pos)?;
                    }
                } else {
                    let default = query.schema();
                    if let Some((database, table)) = truncated_table(&sql, &default) {
                        self.on_truncate(&database, &table, header.timestamp(), log_pos)?;
                    } else {
                        let ddl = parse_ddl(&sql, &default);
                        if !ddl.is_empty() {
                            let at = self.event_at(&header);
                            self.on_ddl(ddl, &at, header.timestamp(), log_pos)?;
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
    /// catalog reads, drops or renames the table (or its database), or
    /// changes its rows without logging them (a partition truncated): a
    /// transaction of its own at the statement's position (`at` names it
    /// in errors), or part of the one it is in (`CREATE OR REPLACE TABLE
    /// ... SELECT`), with the table's schema after it (see the module
    /// docs, "Schema changes"), or the table's stall.
    fn on_ddl(&mut self, ddl: Vec<Ddl>, at: &str, timestamp: u32, log_pos: u32) -> Result<()> {
        // Each table's schema after the changes so far, in the order
        // they came: a statement's changes apply one after the other.
        let mut schemas: Vec<(u32, TableSchema)> = Vec::new();
        let mut stalls: Vec<(u32, String)> = Vec::new();
        fn set(schemas: &mut Vec<(u32, TableSchema)>, oid: u32, schema: TableSchema) {
            match schemas.iter_mut().find(|(o, _)| *o == oid) {
                Some((_, s)) => *s = schema,
                None => schemas.push((oid, schema)),
            }
        }
        for change in ddl {
            let current = |schemas: &Vec<(u32, TableSchema)>, oid: u32| -> Option<TableSchema> {
                schemas
                    .iter()
                    .find(|(o, _)| *o == oid)
                    .map(|(_, s)| s.clone())
                    .or_else(|| {
                        self.schemas
                            .get(&oid)
                            .or_else(|| self.base.get(&oid))
                            .map(|s| (**s).clone())
                    })
            };
            match change {
                Ddl::Columns { table, removed } => {
                    for oid in self.ids_of(&table.0, &table.1) {
                        let Some(before) = current(&schemas, oid) else {
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
                        set(&mut schemas, oid, TableSchema { columns, ..before });
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
                        if let Some(before) = current(&schemas, oid)
                            && !before.columns.is_empty()
                        {
                            let schema = TableSchema {
                                schema: to.0.clone(),
                                name: to.1.clone(),
                                columns: before.columns,
                            };
                            set(&mut schemas, oid, schema);
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
                        set(&mut schemas, oid, gone_schema(&table));
                    }
                }
                // Every table of the database is gone with it.
                Ddl::Database { database } => {
                    let mut dropped: Vec<(String, String)> = self
                        .names
                        .keys()
                        .filter(|(db, _)| *db == database)
                        .cloned()
                        .collect();
                    dropped.sort();
                    for table in dropped {
                        for oid in self.names.remove(&table).unwrap_or_default() {
                            set(&mut schemas, oid, gone_schema(&table));
                        }
                    }
                }
                // Rows changed that the binlog does not show: the table
                // cannot follow them.
                Ddl::Rows { tables, statement } => {
                    for (database, table) in tables {
                        for oid in self.ids_of(&database, &table) {
                            stalls.push((
                                oid,
                                format!(
                                    "{statement} at {at} removed or replaced rows of upstream table \"{database}.{table}\" without logging them as rows, so evolve cannot tell which; create the table again (a new table version's snapshot reads the table as it is)"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        let mut events = Vec::new();
        for (oid, problem) in stalls {
            events.push(SourceEvent::Undecodable {
                table: oid,
                problem,
            });
        }
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
        if self.in_transaction {
            self.queue.extend(events);
            return Ok(());
        }
        self.begin(timestamp)?;
        self.queue.extend(events);
        self.push_commit(log_pos)
    }

    /// A statement that changed rows was logged as its text (`rows`), not
    /// as the rows it changed: every table of the source it may have
    /// written stalls at it, rather than missing its changes. A part of the
    /// transaction it is in, or a transaction of its own.
    fn on_statement_rows(
        &mut self,
        rows: StatementRows,
        at: &str,
        timestamp: u32,
        log_pos: u32,
    ) -> Result<()> {
        let mut oids: Vec<u32> = match &rows.tables {
            Some(tables) => tables
                .iter()
                .flat_map(|(database, table)| self.ids_of(database, table))
                .collect(),
            None => self.wanted.keys().copied().collect(),
        };
        oids.sort_unstable();
        oids.dedup();
        if oids.is_empty() {
            return Ok(());
        }
        let which = if rows.tables.is_some() {
            ""
        } else {
            " (evolve cannot tell which tables it wrote, so every table of the source stalls)"
        };
        let problem = format!(
            "the {} at {at} was logged as a statement, not as the rows it changed{which}: the session that ran it had binlog_format STATEMENT or MIXED; set binlog_format = 'ROW' upstream (SET GLOBAL binlog_format = 'ROW' and in the server's configuration file; sessions keep theirs until they reconnect), then create the table again (a new table version's snapshot reads the table as it is)",
            rows.kind
        );
        let inside = self.in_transaction;
        if !inside {
            self.begin(timestamp)?;
        }
        for table in oids {
            self.queue.push_back(SourceEvent::Undecodable {
                table,
                problem: problem.clone(),
            });
        }
        if !inside {
            self.push_commit(log_pos)?;
        }
        Ok(())
    }
}

/// The schema without columns that says `table` is gone.
fn gone_schema(table: &(String, String)) -> TableSchema {
    TableSchema {
        schema: table.0.clone(),
        name: table.1.clone(),
        columns: Vec::new(),
    }
}

impl MysqlStream {
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
            attnum: None,
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
                    return Err(stream_error(
                        &self.name,
                        &self.needed,
                        &self.account,
                        by_gtid,
                        e,
                    ));
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

    #[test]
    fn a_refused_binlog_dump_names_the_privilege_and_the_grant() {
        assert_eq!(
            needed_privilege(
                "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation"
            ),
            Some("REPLICATION SLAVE")
        );
        assert_eq!(needed_privilege("Access denied for user 'x'@'%'"), None);
        assert_eq!(
            needed_privilege(
                "Access denied; you need (at least one of) the SUPER, REPLICATION SLAVE privilege(s) for this operation"
            ),
            Some("REPLICATION SLAVE")
        );
        assert_eq!(
            needed_privilege(
                "Access denied; you need (at least one of) the BINLOG MONITOR privilege(s) for this operation"
            ),
            Some("BINLOG MONITOR")
        );
        for (code, message) in [
            (
                1045,
                "Access denied for user 'r'@'localhost' (using password: YES)",
            ),
            (
                1227,
                "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation",
            ),
        ] {
            let e = dump_denied("s", "'r'@'%'", code, message);
            assert!(e.is_permanent(), "{e}");
            let shown = e.to_string();
            assert!(
                shown.contains("user 'r'@'%' lacks REPLICATION SLAVE"),
                "{shown}"
            );
            assert!(
                shown.contains("GRANT REPLICATION SLAVE ON *.* TO 'r'@'%';"),
                "{shown}"
            );
            assert!(!shown.contains("using password"), "{shown}");
        }
    }

    /// The metadata queries a running source makes (the binlog position,
    /// its files, the GTID state there) refused for a privilege: MySQL's
    /// and MariaDB's words for it, each a permanent error naming the
    /// privilege (never SUPER) and the GRANT.
    #[test]
    fn a_refused_metadata_query_names_the_privilege_and_the_grant() {
        for (code, message, privilege) in [
            // MySQL 8.0, SHOW MASTER STATUS and SHOW BINARY LOGS without
            // REPLICATION CLIENT.
            (
                1227,
                "Access denied; you need (at least one of) the SUPER, REPLICATION CLIENT privilege(s) for this operation",
                "REPLICATION CLIENT",
            ),
            // MySQL 8.4, SHOW BINARY LOG STATUS.
            (
                1227,
                "Access denied; you need (at least one of) the REPLICATION CLIENT privilege(s) for this operation",
                "REPLICATION CLIENT",
            ),
            // MariaDB 10.5 and later, SHOW MASTER STATUS, SHOW BINARY LOGS.
            (
                1227,
                "Access denied; you need (at least one of) the SUPER, BINLOG MONITOR privilege(s) for this operation",
                "BINLOG MONITOR",
            ),
            // Words evolve does not know: the privilege MySQL calls it by.
            (
                1227,
                "Access denied; you need the right privileges",
                "REPLICATION CLIENT",
            ),
            (
                1045,
                "Access denied for user 'r'@'localhost' (using password: YES)",
                "REPLICATION CLIENT",
            ),
        ] {
            let e = metadata_denied(
                "'r'@'%'",
                "reading the binlog position (SHOW MASTER STATUS)",
                code,
                message,
            )
            .unwrap_or_else(|| panic!("{code} {message}"));
            assert!(e.is_permanent(), "{e}");
            assert_eq!(
                e.primary(),
                format!(
                    "user 'r'@'%' lacks {privilege}, which reading the binlog position (SHOW MASTER STATUS) needs"
                )
            );
            assert_eq!(
                e.hint().as_deref(),
                Some(format!("GRANT {privilege} ON *.* TO 'r'@'%';").as_str())
            );
            assert!(e.detail().unwrap().contains(&code.to_string()), "{e}");
        }
        // Not a refusal: the caller reports it as the query's failure.
        assert!(metadata_denied("'r'@'%'", "x", 1064, "You have an error").is_none());
        assert!(metadata_denied("'r'@'%'", "x", 2013, "Lost connection").is_none());
    }

    /// A read of a table refused for the user's privileges (MariaDB's and
    /// MySQL's words): permanent, one line naming the account, the table
    /// and the exact GRANT; names quoted only where GRANT needs it.
    #[test]
    fn a_refused_select_names_the_table_and_the_grant() {
        for (code, table, message, lacks, on) in [
            (
                1142,
                Some("orders"),
                "SELECT command denied to user 'r'@'localhost' for table `shop`.`orders`",
                "SELECT on table shop.orders",
                "shop.orders",
            ),
            (
                1143,
                Some("orders"),
                "SELECT command denied to user 'r'@'localhost' for column 'total' in table 'orders'",
                "SELECT on columns of table shop.orders",
                "shop.orders",
            ),
            (
                1044,
                Some("orders"),
                "Access denied for user 'r'@'%' to database 'shop'",
                "any privilege on database shop (table shop.orders)",
                "shop.*",
            ),
            (
                1044,
                None,
                "Access denied for user 'r'@'%' to database 'shop'",
                "any privilege on database shop",
                "shop.*",
            ),
        ] {
            let e = select_denied("'r'@'%'", "shop", table, "its snapshot", code, message)
                .unwrap_or_else(|| panic!("{code} {message}"));
            assert!(e.is_permanent(), "{e}");
            assert_eq!(
                e.primary(),
                format!(
                    "user 'r'@'%' lacks {lacks}, which its snapshot needs: run GRANT SELECT ON {on} TO 'r'@'%';"
                )
            );
            assert!(
                e.detail().unwrap().contains(&format!("error {code}")),
                "{e}"
            );
            assert!(
                e.hint()
                    .unwrap()
                    .starts_with(&format!("GRANT SELECT ON {on} TO 'r'@'%';")),
                "{e}"
            );
        }
        let e = select_denied("'r'@'%'", "my-shop", Some("1"), "x", 1142, "denied").unwrap();
        assert!(
            e.primary()
                .ends_with("run GRANT SELECT ON `my-shop`.`1` TO 'r'@'%';"),
            "{e}"
        );
        // Not a refusal of the read: the caller reports it as it is.
        assert!(select_denied("'r'@'%'", "shop", Some("t"), "x", 1146, "no such table").is_none());
        assert!(select_denied("'r'@'%'", "shop", None, "x", 1142, "denied").is_none());
        assert!(select_denied("'r'@'%'", "shop", Some("t"), "x", 1045, "denied").is_none());
    }

    /// A session refused at login (1045) names the connection whose url
    /// to fix, permanently, and never a password.
    #[test]
    fn a_refused_login_names_the_connection_to_fix() {
        let e = login_refused(
            "my",
            "mysql://r@db:3306/shop",
            "Access denied for user 'r'@'10.0.0.2' (using password: YES)",
        );
        assert!(e.is_permanent(), "{e}");
        assert_eq!(
            e.primary(),
            "the server refused the user of connection \"my\" (mysql://r@db:3306/shop)"
        );
        let shown = e.to_string();
        assert!(shown.contains("connection \"my\"'s url"), "{shown}");
        assert!(shown.contains("'r'@'10.0.0.2'"), "{shown}");
    }
}
