//! Unit tests of the pgoutput decoder over hand-built messages. The bytes are
//! written field by field with [`B`], independently of the crate's encoder,
//! so parse and encode are each checked against the documented layout.

use std::borrow::Cow;

use crate::*;

/// A message written field by field, big-endian, as the server does.
struct B(Vec<u8>);

impl B {
    fn tag(tag: u8) -> Self {
        B(vec![tag])
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// A NUL-terminated string.
    fn s(mut self, v: &str) -> Self {
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    /// A counted value of kind `t` or `b`.
    fn counted(self, kind: u8, v: &[u8]) -> Self {
        self.u8(kind).i32(v.len() as i32).raw(v)
    }
    fn done(self) -> Vec<u8> {
        self.0
    }
}

const XID: u32 = 0xDEAD_BEEF;
const OID: u32 = 16_385;
const TIME: i64 = 774_000_000_123_456;

fn text(v: &str) -> Value<'_> {
    Value::Text(Cow::Borrowed(v.as_bytes()))
}

/// A tuple with every value kind: 'n', 'u', 't' (with a '\n' and a NUL in
/// it, which must not confuse anything), 'b', and an empty 't'.
fn all_kinds_tuple(b: B) -> B {
    b.i16(5)
        .u8(b'n')
        .u8(b'u')
        .counted(b't', b"a\nb\0c")
        .counted(b'b', &[0, 0, 0, 42])
        .counted(b't', b"")
}

fn all_kinds_values() -> TupleData<'static> {
    TupleData {
        values: vec![
            Value::Null,
            Value::UnchangedToast,
            Value::Text(Cow::Borrowed(b"a\nb\0c")),
            Value::Binary(Cow::Borrowed(&[0, 0, 0, 42])),
            Value::Text(Cow::Borrowed(b"")),
        ],
    }
}

fn key_tuple(b: B) -> B {
    b.i16(2).counted(b't', b"7").u8(b'n')
}

fn key_values() -> TupleData<'static> {
    TupleData {
        values: vec![text("7"), Value::Null],
    }
}

/// Every message kind, hand-built, with the value it must decode to and
/// whether it is a streamed message (so carries a leading xid).
fn cases() -> Vec<(&'static str, Vec<u8>, LogicalMessage<'static>, bool)> {
    let streamed_xid = |b: B, in_stream: bool| if in_stream { b.u32(XID) } else { b };
    let mut cases = vec![
        (
            "Begin",
            B::tag(b'B').u64(0x16_B374_D848).i64(TIME).u32(731).done(),
            LogicalMessage::Begin(Begin {
                final_lsn: Lsn(0x16_B374_D848),
                commit_time: TIME,
                xid: 731,
            }),
            false,
        ),
        (
            "Commit",
            B::tag(b'C').u8(0).u64(0x100).u64(0x130).i64(TIME).done(),
            LogicalMessage::Commit(Commit {
                flags: 0,
                commit_lsn: Lsn(0x100),
                end_lsn: Lsn(0x130),
                commit_time: TIME,
            }),
            false,
        ),
        (
            "Origin",
            B::tag(b'O').u64(0xABCDEF).s("node_a").done(),
            LogicalMessage::Origin(Origin {
                commit_lsn: Lsn(0xABCDEF),
                name: "node_a".into(),
            }),
            false,
        ),
        (
            "Stream Start",
            B::tag(b'S').u32(XID).u8(1).done(),
            LogicalMessage::StreamStart(StreamStart {
                xid: XID,
                first_segment: true,
            }),
            false,
        ),
        (
            "Stream Start (later segment)",
            B::tag(b'S').u32(XID).u8(0).done(),
            LogicalMessage::StreamStart(StreamStart {
                xid: XID,
                first_segment: false,
            }),
            false,
        ),
        (
            "Stream Stop",
            B::tag(b'E').done(),
            LogicalMessage::StreamStop,
            false,
        ),
        (
            "Stream Commit",
            B::tag(b'c')
                .u32(XID)
                .u8(0)
                .u64(0x200)
                .u64(0x230)
                .i64(TIME)
                .done(),
            LogicalMessage::StreamCommit(StreamCommit {
                xid: XID,
                flags: 0,
                commit_lsn: Lsn(0x200),
                end_lsn: Lsn(0x230),
                commit_time: TIME,
            }),
            false,
        ),
        (
            "Stream Abort",
            B::tag(b'A').u32(XID).u32(XID + 1).done(),
            LogicalMessage::StreamAbort(StreamAbort {
                xid: XID,
                subxid: XID + 1,
            }),
            false,
        ),
    ];
    for in_stream in [false, true] {
        let xid = in_stream.then_some(XID);
        cases.extend([
            (
                "Relation",
                streamed_xid(B::tag(b'R'), in_stream)
                    .u32(OID)
                    .s("public")
                    .s("orders")
                    .u8(b'd')
                    .i16(3)
                    .u8(1)
                    .s("id")
                    .u32(23)
                    .i32(-1)
                    .u8(0)
                    .s("note")
                    .u32(1043)
                    .i32(14)
                    .u8(0)
                    .s("prix_€")
                    .u32(1700)
                    .i32(655_366)
                    .done(),
                LogicalMessage::Relation(Relation {
                    xid,
                    oid: OID,
                    namespace: "public".into(),
                    name: "orders".into(),
                    replica_identity: ReplicaIdentity::Default,
                    columns: vec![
                        Column {
                            flags: 1,
                            name: "id".into(),
                            type_oid: 23,
                            type_modifier: -1,
                        },
                        Column {
                            flags: 0,
                            name: "note".into(),
                            type_oid: 1043,
                            type_modifier: 14,
                        },
                        Column {
                            flags: 0,
                            name: "prix_€".into(),
                            type_oid: 1700,
                            type_modifier: 655_366,
                        },
                    ],
                }),
                in_stream,
            ),
            (
                "Relation (no columns, pg_catalog, FULL)",
                streamed_xid(B::tag(b'R'), in_stream)
                    .u32(OID)
                    .s("")
                    .s("t")
                    .u8(b'f')
                    .i16(0)
                    .done(),
                LogicalMessage::Relation(Relation {
                    xid,
                    oid: OID,
                    namespace: "".into(),
                    name: "t".into(),
                    replica_identity: ReplicaIdentity::Full,
                    columns: vec![],
                }),
                in_stream,
            ),
            (
                "Type",
                streamed_xid(B::tag(b'Y'), in_stream)
                    .u32(16_400)
                    .s("public")
                    .s("mood")
                    .done(),
                LogicalMessage::Type(Type {
                    xid,
                    oid: 16_400,
                    namespace: "public".into(),
                    name: "mood".into(),
                }),
                in_stream,
            ),
            (
                "Insert",
                all_kinds_tuple(streamed_xid(B::tag(b'I'), in_stream).u32(OID).u8(b'N')).done(),
                LogicalMessage::Insert(Insert {
                    xid,
                    oid: OID,
                    new: all_kinds_values(),
                }),
                in_stream,
            ),
            (
                "Update (new only)",
                all_kinds_tuple(streamed_xid(B::tag(b'U'), in_stream).u32(OID).u8(b'N')).done(),
                LogicalMessage::Update(Update {
                    xid,
                    oid: OID,
                    old: None,
                    new: all_kinds_values(),
                }),
                in_stream,
            ),
            (
                "Update (key)",
                all_kinds_tuple(
                    key_tuple(streamed_xid(B::tag(b'U'), in_stream).u32(OID).u8(b'K')).u8(b'N'),
                )
                .done(),
                LogicalMessage::Update(Update {
                    xid,
                    oid: OID,
                    old: Some(OldTuple::Key(key_values())),
                    new: all_kinds_values(),
                }),
                in_stream,
            ),
            (
                "Update (old row)",
                all_kinds_tuple(
                    all_kinds_tuple(streamed_xid(B::tag(b'U'), in_stream).u32(OID).u8(b'O'))
                        .u8(b'N'),
                )
                .done(),
                LogicalMessage::Update(Update {
                    xid,
                    oid: OID,
                    old: Some(OldTuple::Full(all_kinds_values())),
                    new: all_kinds_values(),
                }),
                in_stream,
            ),
            (
                "Delete (key)",
                key_tuple(streamed_xid(B::tag(b'D'), in_stream).u32(OID).u8(b'K')).done(),
                LogicalMessage::Delete(Delete {
                    xid,
                    oid: OID,
                    old: OldTuple::Key(key_values()),
                }),
                in_stream,
            ),
            (
                "Delete (old row)",
                all_kinds_tuple(streamed_xid(B::tag(b'D'), in_stream).u32(OID).u8(b'O')).done(),
                LogicalMessage::Delete(Delete {
                    xid,
                    oid: OID,
                    old: OldTuple::Full(all_kinds_values()),
                }),
                in_stream,
            ),
            (
                "Truncate",
                streamed_xid(B::tag(b'T'), in_stream)
                    .i32(2)
                    .u8(3)
                    .u32(OID)
                    .u32(OID + 7)
                    .done(),
                LogicalMessage::Truncate(Truncate {
                    xid,
                    options: Truncate::CASCADE | Truncate::RESTART_IDENTITY,
                    relation_oids: vec![OID, OID + 7],
                }),
                in_stream,
            ),
            (
                "Message (transactional)",
                streamed_xid(B::tag(b'M'), in_stream)
                    .u8(1)
                    .u64(0x1_0000_0010)
                    .s("evolve")
                    .i32(4)
                    .raw(b"\0\n\xff!")
                    .done(),
                LogicalMessage::Message(Message {
                    xid,
                    transactional: true,
                    lsn: Lsn(0x1_0000_0010),
                    prefix: "evolve".into(),
                    content: Cow::Borrowed(b"\0\n\xff!"),
                }),
                in_stream,
            ),
            (
                "Message (non-transactional, empty)",
                streamed_xid(B::tag(b'M'), in_stream)
                    .u8(0)
                    .u64(5)
                    .s("")
                    .i32(0)
                    .done(),
                LogicalMessage::Message(Message {
                    xid,
                    transactional: false,
                    lsn: Lsn(5),
                    prefix: "".into(),
                    content: Cow::Borrowed(b""),
                }),
                in_stream,
            ),
        ]);
    }
    cases
}

#[test]
fn every_message_kind_decodes_and_encodes_back() {
    let cases = cases();
    assert_eq!(cases.len(), 8 + 2 * 12);
    for (name, bytes, expected, in_stream) in &cases {
        let parsed = LogicalMessage::parse(bytes, *in_stream)
            .unwrap_or_else(|e| panic!("{name} (in_stream {in_stream}): {e}"));
        assert_eq!(&parsed, expected, "{name} (in_stream {in_stream})");

        let (prefix, used) = LogicalMessage::parse_prefix(bytes, *in_stream).unwrap();
        assert_eq!((&prefix, used), (expected, bytes.len()), "{name}");

        let mut encoded = vec![0xAA];
        expected.encode(&mut encoded).unwrap();
        assert_eq!(&encoded[1..], &bytes[..], "{name}: encode");

        let owned = parsed.clone().into_owned();
        assert_eq!(&owned, expected, "{name}: into_owned");
    }
}

#[test]
fn decoded_values_borrow_from_the_input() {
    let bytes = all_kinds_tuple(B::tag(b'I').u32(OID).u8(b'N')).done();
    let range = bytes.as_ptr_range();
    let LogicalMessage::Insert(insert) = LogicalMessage::parse(&bytes, false).unwrap() else {
        panic!("not an insert");
    };
    for value in &insert.new {
        if let Value::Text(Cow::Owned(_)) | Value::Binary(Cow::Owned(_)) = value {
            panic!("{value:?} was copied");
        }
        if let Some(b) = value.as_bytes() {
            assert!(range.contains(&b.as_ptr()) || b.is_empty());
        }
    }
    let owned = LogicalMessage::Insert(insert).into_owned();
    let LogicalMessage::Insert(insert) = owned else {
        unreachable!()
    };
    assert!(matches!(insert.new.values[2], Value::Text(Cow::Owned(_))));
    drop(bytes);
    assert_eq!(insert.new.values[2].as_bytes(), Some(&b"a\nb\0c"[..]));
}

#[test]
fn every_truncation_is_an_error() {
    for (name, bytes, _, in_stream) in cases() {
        for len in 0..bytes.len() {
            for result in [
                LogicalMessage::parse(&bytes[..len], in_stream).map(|_| ()),
                LogicalMessage::parse_prefix(&bytes[..len], in_stream).map(|_| ()),
            ] {
                let err = result.expect_err(name);
                assert!(err.is_truncated(), "{name} cut at {len}: {err}");
                assert!(err.offset <= len, "{name} cut at {len}: {err}");
            }
        }
    }
}

#[test]
fn trailing_bytes_are_an_error_but_not_for_parse_prefix() {
    for (name, mut bytes, expected, in_stream) in cases() {
        let len = bytes.len();
        bytes.extend_from_slice(b"\nZ");
        let err = LogicalMessage::parse(&bytes, in_stream).expect_err(name);
        assert_eq!(err.offset, len, "{name}: {err}");
        assert_eq!(err.kind, DecodeErrorKind::TrailingBytes { count: 2 });
        assert_eq!(
            LogicalMessage::parse_prefix(&bytes, in_stream),
            Ok((expected, len)),
            "{name}"
        );
    }
}

#[test]
fn wrong_stream_state_is_detected_or_misreads_visibly() {
    // An Insert from a stream read as if outside one: the xid is taken for
    // the OID and the OID's first byte for the tuple tag.
    let streamed = B::tag(b'I')
        .u32(XID)
        .u32(OID)
        .u8(b'N')
        .i16(1)
        .u8(b'n')
        .done();
    let err = LogicalMessage::parse(&streamed, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid Insert message at byte 5: expected a new tuple ('N'), found 0x00"
    );
}

#[test]
fn error_messages_name_message_offset_and_problem() {
    let relation = B::tag(b'R')
        .u32(OID)
        .s("public")
        .s("orders")
        .u8(b'd')
        .i16(1)
        .u8(1)
        .done();
    // 'R' + oid (4) + "public\0" (7) + "orders\0" (7) + 'd' + count (2) +
    // flags (1) = 23: the column name starts there.
    let cases: Vec<(Vec<u8>, bool, &str)> = vec![
        (
            relation,
            false,
            "truncated Relation message at byte 23: expected a column name",
        ),
        (
            vec![],
            false,
            "truncated logical replication message at byte 0: expected a message type",
        ),
        (
            b"X".to_vec(),
            false,
            "invalid logical replication message at byte 0: unknown message type 'X' (0x58)",
        ),
        (
            // Protocol 3's Begin Prepare.
            b"b".to_vec(),
            false,
            "invalid logical replication message at byte 0: unknown message type 'b' (0x62)",
        ),
        (
            B::tag(b'R').u32(OID).s("pub").raw(b"na\xffme\0").done(),
            false,
            "invalid Relation message at byte 11: expected a relation name in UTF-8, found invalid UTF-8",
        ),
        (
            B::tag(b'R').u32(OID).s("a").s("b").u8(b'x').done(),
            false,
            "invalid Relation message at byte 9: expected a replica identity ('d', 'n', 'f' or 'i'), found 'x' (0x78)",
        ),
        (
            B::tag(b'R').u32(OID).s("a").s("b").u8(b'd').i16(-1).done(),
            false,
            "invalid Relation message at byte 10: expected a column count, found negative value -1",
        ),
        (
            B::tag(b'I')
                .u32(OID)
                .u8(b'N')
                .i16(2)
                .u8(b'n')
                .u8(b'x')
                .done(),
            false,
            "invalid Insert message at byte 9: expected a column value kind ('n', 'u', 't' or 'b'), found 'x' (0x78)",
        ),
        (
            B::tag(b'I')
                .u32(OID)
                .u8(b'N')
                .i16(1)
                .u8(b't')
                .i32(-7)
                .done(),
            false,
            "invalid Insert message at byte 9: expected a text value's length, found negative value -7",
        ),
        (
            B::tag(b'I')
                .u32(OID)
                .u8(b'N')
                .i16(1)
                .u8(b't')
                .i32(10)
                .raw(b"abc")
                .done(),
            false,
            "truncated Insert message at byte 13: expected a text value",
        ),
        (
            B::tag(b'U').u32(OID).u8(b'Q').done(),
            false,
            "invalid Update message at byte 5: expected an old key, old tuple or new tuple ('K', 'O' or 'N'), found 'Q' (0x51)",
        ),
        (
            key_tuple(B::tag(b'U').u32(OID).u8(b'K')).u8(b'K').done(),
            false,
            "invalid Update message at byte 15: expected a new tuple ('N'), found 'K' (0x4b)",
        ),
        (
            B::tag(b'D').u32(OID).u8(b'N').done(),
            false,
            "invalid Delete message at byte 5: expected an old key or old tuple ('K' or 'O'), found 'N' (0x4e)",
        ),
        (
            B::tag(b'T').i32(-2).done(),
            false,
            "invalid Truncate message at byte 1: expected a relation count, found negative value -2",
        ),
        (
            B::tag(b'M').u8(2).done(),
            false,
            "invalid logical decoding message at byte 1: expected the transactional flag (0 or 1), found 0x02",
        ),
        (
            B::tag(b'M').u8(1).u64(0).s("p").i32(-1).done(),
            false,
            "invalid logical decoding message at byte 12: expected a content length, found negative value -1",
        ),
        (
            B::tag(b'S').u32(XID).u8(7).done(),
            false,
            "invalid Stream Start message at byte 5: expected the first-segment flag (0 or 1), found 0x07",
        ),
        (
            B::tag(b'I').u32(XID).done(),
            true,
            "truncated Insert message at byte 5: expected a relation OID",
        ),
        (
            B::tag(b'I').done(),
            true,
            "truncated Insert message at byte 1: expected the streamed transaction's ID",
        ),
        (
            // Protocol 4's Stream Abort adds the abort LSN and time.
            B::tag(b'A').u32(XID).u32(XID).u64(0x100).i64(TIME).done(),
            false,
            "invalid Stream Abort message at byte 9: 16 unexpected bytes after the end of the message",
        ),
    ];
    for (bytes, in_stream, expected) in cases {
        let err = LogicalMessage::parse(&bytes, in_stream).unwrap_err();
        assert_eq!(err.to_string(), expected, "{bytes:?}");
    }
}

#[test]
fn huge_claimed_lengths_do_not_allocate_or_panic() {
    // Counts at their maximum with almost no data behind them.
    let inputs = [
        B::tag(b'T').i32(i32::MAX).u8(0).u32(1).done(),
        B::tag(b'R')
            .u32(OID)
            .s("a")
            .s("b")
            .u8(b'd')
            .i16(i16::MAX)
            .done(),
        B::tag(b'I').u32(OID).u8(b'N').i16(i16::MAX).u8(b'n').done(),
        B::tag(b'I')
            .u32(OID)
            .u8(b'N')
            .i16(1)
            .u8(b'b')
            .i32(i32::MAX)
            .done(),
        B::tag(b'M')
            .u8(0)
            .u64(0)
            .s("p")
            .i32(i32::MAX)
            .raw(b"x")
            .done(),
    ];
    for bytes in inputs {
        let err = LogicalMessage::parse(&bytes, false).unwrap_err();
        assert!(err.is_truncated(), "{err}");
    }
    // A count of 2^31 - 1 relations really present would be 8 GiB; the
    // capacity reserved is bounded by the bytes that are there.
    let mut bytes = B::tag(b'T').i32(1000).u8(0).done();
    for oid in 0..1000u32 {
        bytes.extend_from_slice(&oid.to_be_bytes());
    }
    let LogicalMessage::Truncate(t) = LogicalMessage::parse(&bytes, false).unwrap() else {
        panic!("not a truncate")
    };
    assert_eq!(t.relation_oids.len(), 1000);
    assert_eq!(t.relation_oids.capacity(), 1000);
}

#[test]
fn accessors() {
    let LogicalMessage::Relation(relation) = &cases()[8].2 else {
        panic!("case 8 is a Relation")
    };
    let keys: Vec<bool> = relation.columns.iter().map(Column::is_key).collect();
    assert_eq!(keys, [true, false, false]);
    let owned: Relation<'static> = relation.clone().into_owned();
    assert_eq!(&owned, relation);

    let truncate = Truncate {
        xid: None,
        options: Truncate::RESTART_IDENTITY,
        relation_oids: vec![],
    };
    assert!(!truncate.cascade() && truncate.restart_identity());

    let tuple = all_kinds_values();
    assert_eq!(tuple.len(), 5);
    assert!(!tuple.is_empty());
    assert_eq!(tuple.get(2).and_then(Value::as_str), Some("a\nb\0c"));
    assert_eq!(tuple.get(3).and_then(Value::as_str), None);
    assert_eq!(
        tuple.get(3).and_then(Value::as_bytes),
        Some(&[0, 0, 0, 42][..])
    );
    assert_eq!(tuple.get(0).and_then(Value::as_bytes), None);
    assert_eq!(tuple.get(1).and_then(Value::as_bytes), None);
    assert_eq!(tuple.get(9), None);
    assert_eq!(Value::Text(Cow::Borrowed(b"\xff")).as_str(), None);
    assert_eq!(tuple.iter().count(), 5);

    let old = OldTuple::Key(key_values());
    assert_eq!(old.tuple(), &key_values());

    for identity in [
        ReplicaIdentity::Default,
        ReplicaIdentity::Nothing,
        ReplicaIdentity::Full,
        ReplicaIdentity::Index,
    ] {
        assert_eq!(
            ReplicaIdentity::from_byte(identity.as_byte()),
            Some(identity)
        );
    }
    assert_eq!(ReplicaIdentity::from_byte(b'D'), None);
}

#[test]
fn encode_refuses_what_the_wire_cannot_carry() {
    let mut out = b"keep".to_vec();
    let with_nul = LogicalMessage::Type(Type {
        xid: None,
        oid: 1,
        namespace: "public".into(),
        name: "a\0b".into(),
    });
    assert_eq!(
        with_nul.encode(&mut out),
        Err(EncodeError::InteriorNul {
            field: "a type name"
        })
    );
    assert_eq!(out, b"keep", "a failed encode leaves the buffer alone");

    let wide = LogicalMessage::Insert(Insert {
        xid: None,
        oid: 1,
        new: TupleData {
            values: vec![Value::Null; 40_000],
        },
    });
    let err = wide.encode(&mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot encode a tuple's column list: 40000 is more than the protocol's maximum of 32767"
    );
    assert_eq!(out, b"keep");
}

#[test]
fn decoder_tracks_streams() {
    let messages = [
        B::tag(b'S').u32(XID).u8(1).done(),
        B::tag(b'I')
            .u32(XID)
            .u32(OID)
            .u8(b'N')
            .i16(1)
            .counted(b't', b"1")
            .done(),
        B::tag(b'E').done(),
        B::tag(b'B').u64(0x10).i64(TIME).u32(5).done(),
        B::tag(b'I')
            .u32(OID)
            .u8(b'N')
            .i16(1)
            .counted(b't', b"2")
            .done(),
        B::tag(b'C').u8(0).u64(0x10).u64(0x20).i64(TIME).done(),
        B::tag(b'c')
            .u32(XID)
            .u8(0)
            .u64(0x30)
            .u64(0x40)
            .i64(TIME)
            .done(),
    ];
    let mut decoder = LogicalDecoder::new();
    let mut states = vec![];
    let mut inserts = vec![];
    for bytes in &messages {
        if let LogicalMessage::Insert(insert) = decoder.decode(bytes).unwrap() {
            let first = insert.new.values[0].as_str().map(str::to_owned);
            inserts.push((insert.xid, first));
        }
        states.push(decoder.in_stream());
    }
    assert_eq!(states, [true, true, false, false, false, false, false]);
    assert_eq!(
        inserts,
        [
            (Some(XID), Some("1".to_owned())),
            (None, Some("2".to_owned()))
        ]
    );

    // A failed decode leaves the state alone.
    let mut decoder = LogicalDecoder::new();
    decoder.decode(&messages[0]).unwrap();
    assert!(decoder.decode(b"E!").is_err());
    assert!(decoder.in_stream());
    let (message, used) = decoder.decode_prefix(b"E\n").unwrap();
    assert_eq!((message, used), (LogicalMessage::StreamStop, 1));
    assert!(!decoder.in_stream());
}
