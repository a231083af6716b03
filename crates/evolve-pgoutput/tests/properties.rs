//! Property tests: the parsers never panic on any input, whatever they
//! accept encodes back to the same bytes, and generated messages survive
//! encode -> parse unchanged.

use std::borrow::Cow;

use evolve_pgoutput::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn small_string() -> impl Strategy<Value = String> {
    // Any chars but NUL, which strings cannot carry; some non-ASCII.
    "[^\u{0}]{0,12}"
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..24)
}

fn value() -> impl Strategy<Value = Value<'static>> {
    prop_oneof![
        Just(Value::Null),
        Just(Value::UnchangedToast),
        bytes().prop_map(|b| Value::Text(Cow::Owned(b))),
        bytes().prop_map(|b| Value::Binary(Cow::Owned(b))),
    ]
}

fn tuple() -> impl Strategy<Value = TupleData<'static>> {
    vec(value(), 0..6).prop_map(|values| TupleData { values })
}

fn old_tuple() -> impl Strategy<Value = OldTuple<'static>> {
    prop_oneof![
        tuple().prop_map(OldTuple::Key),
        tuple().prop_map(OldTuple::Full)
    ]
}

fn lsn() -> impl Strategy<Value = Lsn> {
    any::<u64>().prop_map(Lsn)
}

fn column() -> impl Strategy<Value = Column<'static>> {
    (any::<u8>(), small_string(), any::<u32>(), any::<i32>()).prop_map(
        |(flags, name, type_oid, type_modifier)| Column {
            flags,
            name: name.into(),
            type_oid,
            type_modifier,
        },
    )
}

fn replica_identity() -> impl Strategy<Value = ReplicaIdentity> {
    prop_oneof![
        Just(ReplicaIdentity::Default),
        Just(ReplicaIdentity::Nothing),
        Just(ReplicaIdentity::Full),
        Just(ReplicaIdentity::Index),
    ]
}

/// A message and whether it must be parsed as inside a stream.
fn message() -> impl Strategy<Value = (LogicalMessage<'static>, bool)> {
    let outside = prop_oneof![
        (lsn(), any::<i64>(), any::<u32>()).prop_map(|(final_lsn, commit_time, xid)| {
            LogicalMessage::Begin(Begin {
                final_lsn,
                commit_time,
                xid,
            })
        }),
        (any::<u8>(), lsn(), lsn(), any::<i64>()).prop_map(
            |(flags, commit_lsn, end_lsn, commit_time)| LogicalMessage::Commit(Commit {
                flags,
                commit_lsn,
                end_lsn,
                commit_time,
            })
        ),
        (lsn(), small_string()).prop_map(|(commit_lsn, name)| LogicalMessage::Origin(Origin {
            commit_lsn,
            name: name.into(),
        })),
        (any::<u32>(), any::<bool>()).prop_map(|(xid, first_segment)| {
            LogicalMessage::StreamStart(StreamStart { xid, first_segment })
        }),
        Just(LogicalMessage::StreamStop),
        (any::<u32>(), any::<u8>(), lsn(), lsn(), any::<i64>()).prop_map(
            |(xid, flags, commit_lsn, end_lsn, commit_time)| {
                LogicalMessage::StreamCommit(StreamCommit {
                    xid,
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                })
            }
        ),
        (any::<u32>(), any::<u32>())
            .prop_map(|(xid, subxid)| LogicalMessage::StreamAbort(StreamAbort { xid, subxid })),
    ]
    .prop_map(|m| (m, false));

    let xid_carrying = (
        any::<Option<u32>>(),
        prop_oneof![
            (
                any::<u32>(),
                small_string(),
                small_string(),
                replica_identity(),
                vec(column(), 0..5)
            )
                .prop_map(|(oid, namespace, name, replica_identity, columns)| {
                    LogicalMessage::Relation(Relation {
                        xid: None,
                        oid,
                        namespace: namespace.into(),
                        name: name.into(),
                        replica_identity,
                        columns,
                    })
                }),
            (any::<u32>(), small_string(), small_string()).prop_map(|(oid, namespace, name)| {
                LogicalMessage::Type(Type {
                    xid: None,
                    oid,
                    namespace: namespace.into(),
                    name: name.into(),
                })
            }),
            (any::<u32>(), tuple()).prop_map(|(oid, new)| LogicalMessage::Insert(Insert {
                xid: None,
                oid,
                new
            })),
            (any::<u32>(), proptest::option::of(old_tuple()), tuple()).prop_map(
                |(oid, old, new)| LogicalMessage::Update(Update {
                    xid: None,
                    oid,
                    old,
                    new,
                })
            ),
            (any::<u32>(), old_tuple()).prop_map(|(oid, old)| LogicalMessage::Delete(Delete {
                xid: None,
                oid,
                old
            })),
            (any::<u8>(), vec(any::<u32>(), 0..6)).prop_map(|(options, relation_oids)| {
                LogicalMessage::Truncate(Truncate {
                    xid: None,
                    options,
                    relation_oids,
                })
            }),
            (any::<bool>(), lsn(), small_string(), bytes()).prop_map(
                |(transactional, lsn, prefix, content)| LogicalMessage::Message(Message {
                    xid: None,
                    transactional,
                    lsn,
                    prefix: prefix.into(),
                    content: Cow::Owned(content),
                })
            ),
        ],
    )
        .prop_map(|(xid, mut m)| {
            match &mut m {
                LogicalMessage::Relation(r) => r.xid = xid,
                LogicalMessage::Type(t) => t.xid = xid,
                LogicalMessage::Insert(i) => i.xid = xid,
                LogicalMessage::Update(u) => u.xid = xid,
                LogicalMessage::Delete(d) => d.xid = xid,
                LogicalMessage::Truncate(t) => t.xid = xid,
                LogicalMessage::Message(msg) => msg.xid = xid,
                _ => unreachable!("only xid-carrying messages here"),
            }
            (m, xid.is_some())
        });

    prop_oneof![outside, xid_carrying]
}

/// Bytes that start with a known message type far more often than chance,
/// so arbitrary input reaches deep into each parser.
fn logical_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(&b"BCORYIUDTMSEcAXwk"[..]),
        vec(any::<u8>(), 0..64),
    )
        .prop_map(|(tag, rest)| {
            let mut bytes = vec![tag];
            bytes.extend(rest);
            bytes
        })
}

/// Parse `data` every way, and check that what is accepted encodes back to
/// the bytes it was decoded from.
fn check_no_panic_and_canonical(data: &[u8]) -> Result<(), TestCaseError> {
    for in_stream in [false, true] {
        let whole = LogicalMessage::parse(data, in_stream);
        match LogicalMessage::parse_prefix(data, in_stream) {
            Ok((message, used)) => {
                prop_assert!(used <= data.len());
                let mut encoded = Vec::new();
                message.encode(&mut encoded).unwrap();
                prop_assert_eq!(&encoded[..], &data[..used]);
                prop_assert_eq!(whole.is_ok(), used == data.len());
            }
            Err(e) => {
                prop_assert_eq!(whole, Err(e.clone()));
                prop_assert!(e.offset <= data.len());
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
    match ReplicationMessage::parse(data) {
        Ok(message) => {
            let mut encoded = Vec::new();
            message.encode(&mut encoded);
            prop_assert_eq!(&encoded[..], data);
        }
        Err(e) => prop_assert!(e.offset <= data.len()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..96)) {
        check_no_panic_and_canonical(&data)?;
    }

    #[test]
    fn arbitrary_bytes_behind_a_known_tag_never_panic(data in logical_bytes()) {
        check_no_panic_and_canonical(&data)?;
    }

    #[test]
    fn generated_messages_round_trip((message, in_stream) in message(), junk in bytes()) {
        let mut encoded = Vec::new();
        message.encode(&mut encoded).unwrap();
        let parsed = LogicalMessage::parse(&encoded, in_stream).unwrap();
        prop_assert_eq!(&parsed, &message);

        let len = encoded.len();
        encoded.extend_from_slice(&junk);
        let (parsed, used) = LogicalMessage::parse_prefix(&encoded, in_stream).unwrap();
        prop_assert_eq!(used, len);
        prop_assert_eq!(&parsed, &message);

        // Wrapped in XLogData, as the server sends it.
        let wrapped = ReplicationMessage::XLogData {
            wal_start: Lsn(1),
            wal_end: Lsn(2),
            server_time: 3,
            data: &encoded[..len],
        };
        let mut copy_data = Vec::new();
        wrapped.encode(&mut copy_data);
        let ReplicationMessage::XLogData { data, .. } = ReplicationMessage::parse(&copy_data).unwrap() else {
            return Err(TestCaseError::fail("not XLogData"));
        };
        prop_assert_eq!(LogicalMessage::parse(data, in_stream).unwrap(), message);
    }

    #[test]
    fn damaged_messages_never_panic(
        (message, _) in message(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut encoded = Vec::new();
        message.encode(&mut encoded).unwrap();
        let cut = cut.index(encoded.len() + 1);
        check_no_panic_and_canonical(&encoded[..cut])?;
        let at = flip.index(encoded.len());
        encoded[at] = byte;
        check_no_panic_and_canonical(&encoded)?;
    }

    #[test]
    fn replication_messages_round_trip(
        keepalive in any::<bool>(),
        wal_start in lsn(),
        wal_end in lsn(),
        server_time in any::<i64>(),
        flag in any::<bool>(),
        data in bytes(),
    ) {
        let message = if keepalive {
            ReplicationMessage::PrimaryKeepalive { wal_end, server_time, reply_requested: flag }
        } else {
            ReplicationMessage::XLogData { wal_start, wal_end, server_time, data: &data }
        };
        let mut encoded = Vec::new();
        message.encode(&mut encoded);
        prop_assert_eq!(ReplicationMessage::parse(&encoded), Ok(message));
    }

    #[test]
    fn standby_status_update_layout(write in lsn(), flush in lsn(), apply in lsn(), time in any::<i64>(), reply in any::<bool>()) {
        let bytes = encode_standby_status_update(write, flush, apply, time, reply);
        prop_assert_eq!(bytes[0], b'r');
        prop_assert_eq!(u64::from_be_bytes(bytes[1..9].try_into().unwrap()), write.0);
        prop_assert_eq!(u64::from_be_bytes(bytes[9..17].try_into().unwrap()), flush.0);
        prop_assert_eq!(u64::from_be_bytes(bytes[17..25].try_into().unwrap()), apply.0);
        prop_assert_eq!(i64::from_be_bytes(bytes[25..33].try_into().unwrap()), time);
        prop_assert_eq!(bytes[33], u8::from(reply));
    }

    #[test]
    fn lsn_text_round_trips(value in any::<u64>()) {
        let lsn = Lsn(value);
        prop_assert_eq!(lsn.to_string().parse::<Lsn>(), Ok(lsn));
        prop_assert_eq!(lsn.to_string().to_lowercase().parse::<Lsn>(), Ok(lsn));
    }

    #[test]
    fn lsn_parse_never_panics_and_accepts_only_its_form(s in "[0-9a-fA-F/+ x-]{0,20}|\\PC{0,20}") {
        if let Ok(lsn) = s.parse::<Lsn>() {
            // Accepted: exactly two 1-8 digit hex runs around one slash.
            let (high, low) = s.split_once('/').unwrap();
            for part in [high, low] {
                prop_assert!((1..=8).contains(&part.len()));
                prop_assert!(part.bytes().all(|b| b.is_ascii_hexdigit()));
            }
            let high = u64::from_str_radix(high, 16).unwrap();
            let low = u64::from_str_radix(low, 16).unwrap();
            prop_assert_eq!(lsn.0, (high << 32) | low);
        }
    }
}
