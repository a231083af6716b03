//! Feeds arbitrary text to the consumer-contract analysis as a view
//! definition over a sink table and a view: it must never panic, and
//! every read it reports has a non-empty path.

#![no_main]

use evolve_core::contract::{Column, Input, analyze};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let inputs = [
        Input::sink_table("orders_json"),
        Input {
            name: "v".into(),
            columns: [("doc".to_string(), Column::Document { path: vec![] })].into(),
        },
    ];
    if let Ok(analysis) = analyze(text, &inputs) {
        assert!(analysis.reads.iter().all(|r| !r.path.is_empty()));
    }
});
