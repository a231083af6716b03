//! Feeds arbitrary bytes to the replication stream parser: it must never
//! panic, whatever it accepts must encode back to the same bytes, and the
//! payload of WAL data goes on to the pgoutput parser.

#![no_main]

use evolve_pgoutput::{LogicalMessage, ReplicationMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = ReplicationMessage::parse(data) else {
        return;
    };
    let mut encoded = Vec::new();
    message.encode(&mut encoded);
    assert_eq!(encoded, data, "{message:?} does not encode back");
    if let ReplicationMessage::XLogData { data: payload, .. } = message {
        for in_stream in [false, true] {
            let _ = LogicalMessage::parse(payload, in_stream);
        }
    }
});
