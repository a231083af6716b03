//! Feeds arbitrary bytes to the script and file-name parsers: they must never
//! panic, and a successful split must be sound (statements are disjoint,
//! verbatim slices of the input in file order).

#![no_main]

use evolve_core::migration::{Version, line_col, parse_file_name, parse_script};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_file_name(text);
    let _ = Version::parse(text);
    let _ = line_col(text, data.len() / 2);

    let Ok(script) = parse_script(text) else {
        return;
    };
    let mut end = 0;
    for statement in &script.statements {
        assert!(statement.offset >= end, "statements overlap");
        end = statement.offset + statement.text.len();
        assert_eq!(text.get(statement.offset..end), Some(statement.text.as_str()));
        let _ = statement.concurrent_index_name();
    }
});
