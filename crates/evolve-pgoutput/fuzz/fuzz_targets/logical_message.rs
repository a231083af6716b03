//! Feeds arbitrary bytes to the pgoutput parser, outside and inside a
//! stream: it must never panic, an error must point inside the input, and
//! whatever it accepts must encode back to exactly the bytes it consumed.

#![no_main]

use evolve_pgoutput::{LogicalDecoder, LogicalMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for in_stream in [false, true] {
        let whole = LogicalMessage::parse(data, in_stream);
        match LogicalMessage::parse_prefix(data, in_stream) {
            Ok((message, used)) => {
                assert!(used <= data.len());
                let mut encoded = Vec::new();
                message
                    .encode(&mut encoded)
                    .expect("a decoded message is encodable");
                assert_eq!(encoded, &data[..used], "{message:?} does not encode back");
                assert_eq!(whole.is_ok(), used == data.len());
                let owned = message.clone().into_owned();
                assert_eq!(owned, message);
            }
            Err(error) => {
                assert!(error.offset <= data.len(), "{error}");
                assert_eq!(whole, Err(error));
            }
        }
    }

    // The input as a sequence of messages, as a client decodes a stream.
    let mut decoder = LogicalDecoder::new();
    let mut rest = data;
    while let Ok((_, used)) = decoder.decode_prefix(rest) {
        match rest.get(used.max(1)..) {
            Some(next) => rest = next,
            None => break,
        }
    }
});
