//! Feeds arbitrary UTF-8 to the control-language parser: it must never
//! panic, an error must point inside the input, and every statement it
//! returns must lie inside the input, in order, and render to canonical text
//! that parses back to the same statement.

#![no_main]

use evolve_core::control::parse;
use evolve_core::migration::line_col;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse(text) {
        Ok(statements) => {
            let mut end = 0;
            for statement in &statements {
                let span = statement.span();
                assert!(span.start >= end && span.start < span.end, "spans overlap");
                assert!(text.get(span.range()).is_some(), "span outside the input");
                end = span.end;
                let sql = statement.to_sql();
                let again = parse(&sql).expect("canonical text parses");
                assert_eq!(again.len(), 1);
                assert!(again[0].eq_ignoring_span(statement), "{sql}");
            }
        }
        Err(e) => {
            let p = e.position;
            assert!(p.offset <= text.len() && text.is_char_boundary(p.offset));
            assert_eq!((p.line, p.column), line_col(text, p.offset));
            let _ = e.to_string();
        }
    }
});
