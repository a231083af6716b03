//! Arbitrary bytes as a registration body, then registered into an empty
//! state: decoding and registering never panic; an error is a Confluent
//! error with a one-line message.
#![no_main]

use evolve_registry::http::decode_schema_body;
use evolve_registry::state::{State, VersionSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = VersionSpec::parse(text);
    }
    for normalize in [false, true] {
        match decode_schema_body(data, normalize) {
            Ok(input) => {
                let state = State::new();
                if let Err(e) = state.register("fuzz", &input, 409) {
                    assert!(!e.message.contains('\n'));
                }
            }
            Err(e) => assert!(matches!(e.status, 400 | 422)),
        }
    }
});
