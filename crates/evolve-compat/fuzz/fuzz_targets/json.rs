//! Arbitrary text as a Json schema: parsing never panics, and a schema that
//! parses can be checked against itself (compatible, by definition) and
//! canonicalised without panicking.
#![no_main]

use evolve_compat::{Schema, SchemaType, can_read};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(schema) = Schema::parse(SchemaType::Json, text, &[]) {
        let _ = schema.canonical_form();
        assert!(
            can_read(&schema, &schema).is_empty(),
            "a schema must be able to read its own data"
        );
    }
});
