//! Request and record decoding never panic, whatever the bytes (the fuzz
//! targets in `fuzz/` explore further; these run in every test run).

use evolve_registry::http::decode_schema_body;
use evolve_registry::record::parse_export;
use evolve_registry::state::{State, VersionSpec};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bodies_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        match decode_schema_body(&bytes, false) {
            Ok(input) => { let _ = State::new().register("s", &input, 409); }
            Err(e) => prop_assert!(matches!(e.status, 400 | 422), "{e:?}"),
        }
    }

    #[test]
    fn json_shaped_bodies_register_or_fail_with_a_confluent_code(
        schema in "[\\[\\]{}\":,a-z0-9 ]{0,60}",
        schema_type in prop::sample::select(vec!["AVRO", "JSON", "PROTOBUF", "XML", ""]),
    ) {
        let body = serde_json::json!({"schema": schema, "schemaType": schema_type}).to_string();
        if let Ok(input) = decode_schema_body(body.as_bytes(), true) {
            match State::new().register("s", &input, 409) {
                Ok(r) => prop_assert_eq!((r.id, r.version), (1, 1)),
                Err(e) => {
                    prop_assert_eq!(e.error_code, 42201, "{:?}", e);
                    prop_assert!(!e.message.contains('\n'));
                }
            }
        }
    }

    #[test]
    fn versions_parse_only_in_range(text in "[-+0-9a-z]{0,12}") {
        if let Ok(VersionSpec::Number(n)) = VersionSpec::parse(&text) {
            prop_assert!((1..=i32::MAX as u32).contains(&n));
        }
    }

    #[test]
    fn exports_never_panic(text in "[\\t\\n{}\":,a-zA-Z0-9_ \\[\\]]{0,200}") {
        if let Ok(records) = parse_export(&text) {
            let mut state = State::new();
            for (i, r) in records.iter().enumerate() {
                state.apply(i as i64 + 1, r);
            }
        }
    }
}
