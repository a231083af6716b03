//! Feeds arbitrary bytes to Flyway's checksum: it must never panic, and must
//! fail exactly on input that is not UTF-8, at the first invalid byte.

#![no_main]

use evolve_core::migration::flyway_checksum;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match (flyway_checksum(data), std::str::from_utf8(data)) {
        (Ok(_), Ok(_)) => {}
        (Err(e), Err(utf8)) => assert_eq!(e.offset, utf8.valid_up_to()),
        (result, utf8) => panic!("checksum {result:?} but UTF-8 check {utf8:?}"),
    }
});
