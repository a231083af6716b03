//! Arbitrary text as a `_schemas` export: parsing never panics, and every
//! record read replays into a state without panicking.
#![no_main]

use evolve_registry::record::parse_export;
use evolve_registry::state::State;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(records) = parse_export(text) {
        let mut state = State::new();
        for (i, record) in records.iter().enumerate() {
            state.apply(i as i64 + 1, record);
        }
    }
});
