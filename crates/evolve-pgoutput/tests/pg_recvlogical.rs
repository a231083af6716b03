//! The decoder against a real PostgreSQL: changes made with SQL are streamed
//! by the real client, `pg_recvlogical -P pgoutput`, into a file, and the
//! file is decoded message by message and compared with what was done.
//!
//! pg_recvlogical writes each XLogData payload followed by a `\n` byte.
//! pgoutput's messages are binary and may contain `\n` themselves, so the
//! file is split by decoding: each message's length is what
//! `decode_prefix` consumed, and a `\n` must follow it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use evolve_pgoutput::{LogicalDecoder, LogicalMessage, Lsn, OldTuple, Relation, TupleData, Value};
use tokio_postgres::{Client, NoTls};

/// A pg_recvlogical run that takes longer than this has hung.
const RECV_TIMEOUT: Duration = Duration::from_secs(120);

/// 2024-01-01 in microseconds since 2000-01-01: commit times must be later.
const RECENT_PG_MICROS: i64 = 8766 * 86_400 * 1_000_000;

struct Db {
    client: Client,
    /// libpq connection string for the tools.
    conninfo: String,
    name: String,
    scratch: PathBuf,
}

async fn db(hint: &str) -> Db {
    let test_db = evolve_test::fresh_db(hint).await;
    let (client, connection) = tokio_postgres::connect(&test_db.url, NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let cluster = evolve_test::shared();
    let scratch = std::env::temp_dir().join(format!(
        "evolve-pgoutput-{}-{}",
        std::process::id(),
        test_db.name
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    Db {
        client,
        conninfo: format!(
            "host=127.0.0.1 port={} user=postgres dbname={}",
            cluster.port(),
            test_db.name
        ),
        name: test_db.name,
        scratch,
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Run pg_recvlogical with `args` (after `-d conninfo`), failing the test on
/// a non-zero exit or after [`RECV_TIMEOUT`].
async fn pg_recvlogical(conninfo: &str, args: &[&str]) -> Output {
    let bin = evolve_test::shared().bin("pg_recvlogical");
    let mut cmd = Command::new(&bin);
    cmd.arg("-d").arg(conninfo).args(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{} -d '{conninfo}' {}", bin.display(), args.join(" "));
    tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{shown}: {e}"));
        let start = Instant::now();
        loop {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            if start.elapsed() > RECV_TIMEOUT {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "{shown} still running after {RECV_TIMEOUT:?}; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().expect("output");
        assert!(
            out.status.success(),
            "{shown} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    })
    .await
    .expect("pg_recvlogical thread")
}

async fn create_slot(conninfo: &str, slot: &str) {
    pg_recvlogical(
        conninfo,
        &["--slot", slot, "--create-slot", "-P", "pgoutput"],
    )
    .await;
}

/// Stream `slot` into a file up to the current end of WAL and return the
/// file's bytes. Something is written after the end position so that
/// pg_recvlogical sees WAL beyond it and stops.
async fn receive(db: &Db, conninfo: &str, slot: &str, options: &[&str]) -> Vec<u8> {
    let endpos: String = db
        .client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .expect("end position")
        .get(0);
    db.client
        .batch_execute("INSERT INTO unpublished VALUES (0)")
        .await
        .expect("write past the end position");
    let file = db.scratch.join(format!("{slot}.out"));
    let file_arg = file.to_str().expect("UTF-8 temp path").to_owned();
    let endpos_arg = format!("--endpos={endpos}");
    let mut args = vec![
        "--slot",
        slot,
        "--start",
        "--no-loop",
        "-f",
        &file_arg,
        &endpos_arg,
    ];
    for option in options {
        args.extend(["-o", option]);
    }
    pg_recvlogical(conninfo, &args).await;
    std::fs::read(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
}

async fn drop_slot(db: &Db, slot: &str) {
    pg_recvlogical(&db.conninfo, &["--slot", slot, "--drop-slot"]).await;
}

/// Split pg_recvlogical's output into messages (each followed by `\n`).
fn decode_file(bytes: &[u8]) -> Vec<(LogicalMessage<'_>, bool)> {
    let mut decoder = LogicalDecoder::new();
    let mut messages = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let in_stream = decoder.in_stream();
        let (message, used) = decoder
            .decode_prefix(&bytes[pos..])
            .unwrap_or_else(|e| panic!("message at file byte {pos}: {e}"));
        pos += used;
        assert_eq!(
            bytes.get(pos),
            Some(&b'\n'),
            "pg_recvlogical's newline after the message ending at file byte {pos}"
        );
        pos += 1;
        messages.push((message, in_stream));
    }
    messages
}

/// Renders messages as short lines, naming relations and types from the
/// Relation and Type messages seen so far, as a client would.
#[derive(Default)]
struct Render {
    relations: HashMap<u32, Relation<'static>>,
    types: HashMap<u32, String>,
}

impl Render {
    fn line(&mut self, message: &LogicalMessage<'_>) -> String {
        match message {
            LogicalMessage::Begin(_) => "BEGIN".into(),
            LogicalMessage::Commit(_) => "COMMIT".into(),
            LogicalMessage::Origin(o) => format!("ORIGIN {} {}", o.name, o.commit_lsn),
            LogicalMessage::Type(t) => {
                self.types
                    .insert(t.oid, format!("{}.{}", t.namespace, t.name));
                format!("TYPE {}.{}", t.namespace, t.name)
            }
            LogicalMessage::Relation(r) => {
                let columns: Vec<String> = r
                    .columns
                    .iter()
                    .map(|c| {
                        let ty = self
                            .types
                            .get(&c.type_oid)
                            .cloned()
                            .unwrap_or_else(|| c.type_oid.to_string());
                        let key = if c.is_key() { " key" } else { "" };
                        format!("{} {ty}({}){key}", c.name, c.type_modifier)
                    })
                    .collect();
                let line = format!(
                    "RELATION {}.{} {:?} [{}]",
                    r.namespace,
                    r.name,
                    r.replica_identity,
                    columns.join(", ")
                );
                self.relations.insert(r.oid, r.clone().into_owned());
                line
            }
            LogicalMessage::Insert(i) => {
                format!("INSERT {} {}", self.name(i.oid), tuple(&i.new))
            }
            LogicalMessage::Update(u) => {
                let old = match &u.old {
                    None => String::new(),
                    Some(OldTuple::Key(t)) => format!(" key={}", tuple(t)),
                    Some(OldTuple::Full(t)) => format!(" old={}", tuple(t)),
                };
                format!("UPDATE {}{old} new={}", self.name(u.oid), tuple(&u.new))
            }
            LogicalMessage::Delete(d) => {
                let old = match &d.old {
                    OldTuple::Key(t) => format!("key={}", tuple(t)),
                    OldTuple::Full(t) => format!("old={}", tuple(t)),
                };
                format!("DELETE {} {old}", self.name(d.oid))
            }
            LogicalMessage::Truncate(t) => {
                let names: Vec<&str> = t.relation_oids.iter().map(|&oid| self.name(oid)).collect();
                format!(
                    "TRUNCATE [{}] cascade={} restart_identity={}",
                    names.join(", "),
                    t.cascade(),
                    t.restart_identity()
                )
            }
            LogicalMessage::Message(m) => format!(
                "MESSAGE transactional={} {}={}",
                m.transactional,
                m.prefix,
                String::from_utf8_lossy(&m.content)
            ),
            LogicalMessage::StreamStart(s) => format!("STREAM START first={}", s.first_segment),
            LogicalMessage::StreamStop => "STREAM STOP".into(),
            LogicalMessage::StreamCommit(_) => "STREAM COMMIT".into(),
            LogicalMessage::StreamAbort(_) => "STREAM ABORT".into(),
        }
    }

    fn name(&self, oid: u32) -> &str {
        self.relations
            .get(&oid)
            .map_or("<unknown relation>", |r| &r.name)
    }
}

fn tuple(t: &TupleData<'_>) -> String {
    let values: Vec<String> = t
        .iter()
        .map(|v| match v {
            Value::Null => "NULL".into(),
            Value::UnchangedToast => "TOAST".into(),
            Value::Text(b) if b.len() > 20 => format!("<{} bytes>", b.len()),
            Value::Text(b) => format!("'{}'", String::from_utf8_lossy(b)),
            Value::Binary(b) if b.len() > 20 => format!("b<{} bytes>", b.len()),
            Value::Binary(b) => format!("b{b:?}"),
        })
        .collect();
    format!("({})", values.join(", "))
}

async fn oid_of(client: &Client, table: &str) -> u32 {
    client
        .query_one("SELECT $1::text::regclass::oid", &[&table])
        .await
        .expect("oid")
        .get(0)
}

/// The lower 32 bits of the current transaction's ID (the wire's xid).
async fn current_xid(client: &Client) -> u32 {
    let full: i64 = client
        .query_one("SELECT txid_current()", &[])
        .await
        .expect("txid")
        .get(0);
    (full & 0xFFFF_FFFF) as u32
}

const SCHEMA: &str = "
    CREATE TYPE mood AS ENUM ('sad', 'happy');
    CREATE TABLE pk_t (id int PRIMARY KEY, name varchar(10), mood mood);
    CREATE TABLE full_t (id int, price numeric(10,2), note text);
    ALTER TABLE full_t REPLICA IDENTITY FULL;
    CREATE TABLE toast_t (id int PRIMARY KEY, note text, big text);
    -- Stored out of line and uncompressed, so any value over ~2 kB is TOASTed.
    ALTER TABLE toast_t ALTER COLUMN big SET STORAGE EXTERNAL;
    CREATE TABLE unpublished (id int);
    CREATE PUBLICATION pub FOR TABLE pk_t, full_t, toast_t;
";

#[tokio::test]
async fn protocol_1_decodes_what_pg_recvlogical_receives() {
    let db = db("pgoutput").await;
    let c = &db.client;
    c.batch_execute(SCHEMA).await.expect("schema");
    let text_slot = format!("{}_text", db.name);
    let binary_slot = format!("{}_binary", db.name);
    create_slot(&db.conninfo, &text_slot).await;
    create_slot(&db.conninfo, &binary_slot).await;

    // One transaction per statement (a multi-statement simple query would
    // be a single implicit transaction).
    let big = "x".repeat(10_000);
    for statement in [
        "INSERT INTO pk_t VALUES (1, 'one', 'happy'), (2, NULL, 'sad')",
        "INSERT INTO full_t VALUES (1, 9.5, 'first')",
        &format!("INSERT INTO toast_t VALUES (1, 'small', '{big}')"),
        "UPDATE toast_t SET note = 'changed' WHERE id = 1",
        "UPDATE pk_t SET id = 10 WHERE id = 1",
        "UPDATE pk_t SET name = 'two' WHERE id = 2",
        "UPDATE full_t SET price = 10 WHERE id = 1",
        "DELETE FROM pk_t WHERE id = 2",
        "DELETE FROM full_t",
    ] {
        c.batch_execute(statement).await.expect(statement);
    }

    // One transaction of several statements, with a transactional message
    // and a change to a table outside the publication.
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute(
        "INSERT INTO pk_t VALUES (3, 'three', NULL);
         INSERT INTO full_t VALUES (2, NULL, NULL);
         UPDATE pk_t SET mood = 'sad' WHERE id = 3;
         SELECT pg_logical_emit_message(true, 'prefix', 'content');
         INSERT INTO unpublished VALUES (1);
         DELETE FROM pk_t WHERE id = 3;",
    )
    .await
    .expect("multi-statement transaction");
    let multi_xid = current_xid(c).await;
    c.batch_execute("COMMIT").await.unwrap();

    let origin = format!("{}_origin", db.name);
    for statement in [
        "SELECT pg_logical_emit_message(false, 'nontx', 'now')".to_owned(),
        format!("SELECT pg_replication_origin_create('{origin}')"),
        format!("SELECT pg_replication_origin_session_setup('{origin}')"),
        "BEGIN; SELECT pg_replication_origin_xact_setup('0/ABCDEF', now());
         INSERT INTO pk_t VALUES (4, 'four', NULL); COMMIT"
            .to_owned(),
        "SELECT pg_replication_origin_session_reset()".to_owned(),
        "TRUNCATE pk_t, full_t".to_owned(),
        "TRUNCATE toast_t RESTART IDENTITY CASCADE".to_owned(),
    ] {
        c.batch_execute(&statement).await.expect(&statement);
    }

    let bytes = receive(
        &db,
        &db.conninfo,
        &text_slot,
        &["proto_version=1", "publication_names=pub", "messages=true"],
    )
    .await;
    let messages = decode_file(&bytes);
    let mut render = Render::default();
    let lines: Vec<String> = messages.iter().map(|(m, _)| render.line(m)).collect();
    let mood: u32 = c
        .query_one("SELECT 'mood'::regtype::oid", &[])
        .await
        .unwrap()
        .get(0);
    let origin_line = format!("ORIGIN {origin} 0/ABCDEF");
    let expected = [
        "BEGIN",
        "TYPE public.mood",
        "RELATION public.pk_t Default [id 23(-1) key, name 1043(14), mood public.mood(-1)]",
        "INSERT pk_t ('1', 'one', 'happy')",
        "INSERT pk_t ('2', NULL, 'sad')",
        "COMMIT",
        "BEGIN",
        "RELATION public.full_t Full [id 23(-1) key, price 1700(655366) key, note 25(-1) key]",
        "INSERT full_t ('1', '9.50', 'first')",
        "COMMIT",
        "BEGIN",
        "RELATION public.toast_t Default [id 23(-1) key, note 25(-1), big 25(-1)]",
        "INSERT toast_t ('1', 'small', <10000 bytes>)",
        "COMMIT",
        "BEGIN",
        "UPDATE toast_t new=('1', 'changed', TOAST)",
        "COMMIT",
        "BEGIN",
        "UPDATE pk_t key=('1', NULL, NULL) new=('10', 'one', 'happy')",
        "COMMIT",
        "BEGIN",
        "UPDATE pk_t new=('2', 'two', 'sad')",
        "COMMIT",
        "BEGIN",
        "UPDATE full_t old=('1', '9.50', 'first') new=('1', '10.00', 'first')",
        "COMMIT",
        "BEGIN",
        "DELETE pk_t key=('2', NULL, NULL)",
        "COMMIT",
        "BEGIN",
        "DELETE full_t old=('1', '10.00', 'first')",
        "COMMIT",
        "BEGIN",
        "INSERT pk_t ('3', 'three', NULL)",
        "INSERT full_t ('2', NULL, NULL)",
        "UPDATE pk_t new=('3', 'three', 'sad')",
        "MESSAGE transactional=true prefix=content",
        "DELETE pk_t key=('3', NULL, NULL)",
        "COMMIT",
        "MESSAGE transactional=false nontx=now",
        "BEGIN",
        &origin_line,
        "INSERT pk_t ('4', 'four', NULL)",
        "COMMIT",
        // A truncate gives its tables new storage, which invalidates them
        // in pgoutput's cache: their Relation (and Type) messages are sent
        // again although nothing about them changed.
        "BEGIN",
        "TYPE public.mood",
        "RELATION public.pk_t Default [id 23(-1) key, name 1043(14), mood public.mood(-1)]",
        "RELATION public.full_t Full [id 23(-1) key, price 1700(655366) key, note 25(-1) key]",
        "TRUNCATE [pk_t, full_t] cascade=false restart_identity=false",
        "COMMIT",
        "BEGIN",
        "RELATION public.toast_t Default [id 23(-1) key, note 25(-1), big 25(-1)]",
        "TRUNCATE [toast_t] cascade=true restart_identity=true",
        "COMMIT",
    ];
    let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    assert_eq!(lines, expected, "\nfull decode:\n{}", lines.join("\n"));

    // What the renderings leave out.
    assert!(messages.iter().all(|(_, in_stream)| !in_stream));
    let relation_oids: HashMap<&str, u32> = render
        .relations
        .values()
        .map(|r| (&*r.name, r.oid))
        .collect();
    for table in ["pk_t", "full_t", "toast_t"] {
        assert_eq!(relation_oids[table], oid_of(c, table).await, "{table}");
    }
    assert_eq!(render.types.keys().copied().collect::<Vec<_>>(), [mood]);
    let toasted = messages.iter().find_map(|(m, _)| match m {
        LogicalMessage::Insert(i) if i.oid == relation_oids["toast_t"] => i.new.get(2).cloned(),
        _ => None,
    });
    assert_eq!(toasted.as_ref().and_then(Value::as_str), Some(big.as_str()));
    check_transactions(&messages);

    // The multi-statement transaction's xid, and its message's LSN inside it.
    let (begin, commit, message_lsn) = messages
        .iter()
        .enumerate()
        .find_map(|(i, (m, _))| match m {
            LogicalMessage::Message(msg) if msg.transactional => Some((i, msg.lsn)),
            _ => None,
        })
        .map(|(i, lsn)| {
            let begin = messages[..i].iter().rev().find_map(|(m, _)| match m {
                LogicalMessage::Begin(b) => Some(*b),
                _ => None,
            });
            let commit = messages[i..].iter().find_map(|(m, _)| match m {
                LogicalMessage::Commit(c) => Some(*c),
                _ => None,
            });
            (begin.unwrap(), commit.unwrap(), lsn)
        })
        .expect("transactional message");
    assert_eq!(begin.xid, multi_xid);
    assert!(
        message_lsn < commit.commit_lsn,
        "{message_lsn} < {}",
        commit.commit_lsn
    );

    // The same changes in binary format.
    let bytes = receive(
        &db,
        &db.conninfo,
        &binary_slot,
        &["proto_version=1", "publication_names=pub", "binary=true"],
    )
    .await;
    let messages = decode_file(&bytes);
    let mut render = Render::default();
    let lines: Vec<String> = messages.iter().map(|(m, _)| render.line(m)).collect();
    for line in [
        "INSERT pk_t (b[0, 0, 0, 1], b[111, 110, 101], b[104, 97, 112, 112, 121])",
        "INSERT toast_t (b[0, 0, 0, 1], b[115, 109, 97, 108, 108], b<10000 bytes>)",
        "UPDATE toast_t new=(b[0, 0, 0, 1], b[99, 104, 97, 110, 103, 101, 100], TOAST)",
        "DELETE pk_t key=(b[0, 0, 0, 2], NULL, NULL)",
    ] {
        assert!(
            lines.iter().any(|l| l == line),
            "{line} missing from:\n{}",
            lines.join("\n")
        );
    }
    // Without the messages option, no logical decoding messages.
    assert!(!lines.iter().any(|l| l.starts_with("MESSAGE")));
    check_transactions(&messages);

    drop_slot(&db, &text_slot).await;
    drop_slot(&db, &binary_slot).await;
    c.batch_execute(&format!("SELECT pg_replication_origin_drop('{origin}')"))
        .await
        .unwrap();
}

/// Begin and Commit pair up: the commit is the one Begin announced, LSNs
/// grow, times are plausible.
fn check_transactions(messages: &[(LogicalMessage<'_>, bool)]) {
    let mut open = None;
    let mut last_end = Lsn::INVALID;
    let mut transactions = 0;
    for (message, _) in messages {
        match message {
            LogicalMessage::Begin(b) => {
                assert!(open.is_none(), "nested Begin");
                assert!(b.commit_time > RECENT_PG_MICROS, "{b:?}");
                open = Some(*b);
            }
            LogicalMessage::Commit(c) => {
                let b = open.take().expect("Commit without Begin");
                assert_eq!(c.flags, 0);
                assert_eq!(b.final_lsn, c.commit_lsn);
                assert_eq!(b.commit_time, c.commit_time);
                assert!(c.commit_lsn < c.end_lsn, "{c:?}");
                assert!(last_end < c.end_lsn, "{last_end} then {c:?}");
                last_end = c.end_lsn;
                transactions += 1;
            }
            _ => {}
        }
    }
    assert!(open.is_none(), "transaction left open");
    assert!(transactions > 0);
}

#[tokio::test]
async fn protocol_2_streams_large_transactions() {
    let db = db("pgoutput_stream").await;
    let c = &db.client;
    c.batch_execute(
        "CREATE TABLE big_t (id int PRIMARY KEY, pad text);
         CREATE TABLE unpublished (id int);
         CREATE PUBLICATION pub FOR TABLE big_t;",
    )
    .await
    .expect("schema");
    let slot = format!("{}_stream", db.name);
    create_slot(&db.conninfo, &slot).await;

    const ROWS: usize = 3000;
    c.batch_execute("INSERT INTO big_t VALUES (0, 'small')")
        .await
        .unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute(&format!(
        "INSERT INTO big_t SELECT g, repeat('p', 200) FROM generate_series(1, {ROWS}) g"
    ))
    .await
    .unwrap();
    let committed_xid = current_xid(c).await;
    c.batch_execute("COMMIT").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute(&format!(
        "INSERT INTO big_t SELECT g, repeat('q', 200) FROM generate_series({}, {}) g",
        ROWS + 1,
        2 * ROWS
    ))
    .await
    .unwrap();
    let aborted_xid = current_xid(c).await;
    c.batch_execute("ROLLBACK").await.unwrap();

    // The smallest work memory makes the server stream the big transactions
    // while they are in progress; it is set for the walsender's session
    // only, through the connection's options.
    let conninfo = format!("{} options=-clogical_decoding_work_mem=64kB", db.conninfo);
    let bytes = receive(
        &db,
        &conninfo,
        &slot,
        &["proto_version=2", "publication_names=pub", "streaming=on"],
    )
    .await;
    let messages = decode_file(&bytes);

    // The small transaction is sent whole, as with protocol 1.
    let mut render = Render::default();
    let lines: Vec<String> = messages
        .iter()
        .take(4)
        .map(|(m, _)| render.line(m))
        .collect();
    assert_eq!(
        lines,
        [
            "BEGIN",
            "RELATION public.big_t Default [id 23(-1) key, pad 25(-1)]",
            "INSERT big_t ('0', 'small')",
            "COMMIT"
        ]
    );
    assert!(matches!(&messages[1].0, LogicalMessage::Relation(r) if r.xid.is_none()));
    assert!(matches!(&messages[2].0, LogicalMessage::Insert(i) if i.xid.is_none()));
    check_transactions(&messages[..4]);

    // Then the two big ones, streamed in segments, every change inside a
    // segment carrying its transaction's ID.
    let mut segments: HashMap<u32, usize> = HashMap::new();
    let mut inserts: HashMap<u32, Vec<i32>> = HashMap::new();
    let mut current = None;
    let mut commits = vec![];
    let mut aborts = vec![];
    for (message, in_stream) in &messages[4..] {
        match message {
            LogicalMessage::StreamStart(s) => {
                assert!(!in_stream && current.is_none());
                let seen = segments.entry(s.xid).or_default();
                assert_eq!(s.first_segment, *seen == 0, "{s:?}");
                *seen += 1;
                current = Some(s.xid);
            }
            LogicalMessage::StreamStop => {
                assert!(in_stream);
                current.take().expect("Stream Stop outside a segment");
            }
            LogicalMessage::Relation(r) => {
                assert!(in_stream);
                assert_eq!(r.xid, current);
                assert_eq!(r.name, "big_t");
            }
            LogicalMessage::Insert(i) => {
                assert!(in_stream);
                assert_eq!(i.xid, current, "{i:?}");
                let id = i.new.get(0).and_then(Value::as_str).expect("id");
                let pad = i.new.get(1).and_then(Value::as_str).expect("pad");
                assert_eq!(pad.len(), 200);
                inserts
                    .entry(i.xid.unwrap())
                    .or_default()
                    .push(id.parse().unwrap());
            }
            LogicalMessage::StreamCommit(s) => {
                assert!(!in_stream && current.is_none());
                assert_eq!(s.flags, 0);
                assert!(s.commit_lsn < s.end_lsn);
                assert!(s.commit_time > RECENT_PG_MICROS);
                commits.push(s.xid);
            }
            LogicalMessage::StreamAbort(a) => {
                assert!(!in_stream && current.is_none());
                aborts.push((a.xid, a.subxid));
            }
            other => panic!("unexpected after the small transaction: {other:?}"),
        }
    }
    assert_eq!(commits, [committed_xid]);
    assert_eq!(aborts, [(aborted_xid, aborted_xid)]);
    assert!(
        segments[&committed_xid] >= 2,
        "a {ROWS}-row transaction with 64kB of work memory should need several segments: {segments:?}"
    );
    let expected: Vec<i32> = (1..=ROWS as i32).collect();
    assert_eq!(inserts[&committed_xid], expected);
    // The aborted one was streamed at least partly before it was aborted.
    assert!(!inserts[&aborted_xid].is_empty());
    assert!(inserts[&aborted_xid].iter().all(|&id| id > ROWS as i32));

    drop_slot(&db, &slot).await;
}
