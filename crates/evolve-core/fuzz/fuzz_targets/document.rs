//! Feeds arbitrary bytes to the row-document encoder: the first bytes pick a
//! column type (arrays and composites nested a few levels), the rest is the
//! value. It must never panic, must leave the output untouched on error, and
//! every document it produces must be valid JSON whose json/jsonb re-encoding
//! is a fixpoint.

#![no_main]

use evolve_core::document::{Column, TypeKind, encode_row};
use libfuzzer_sys::fuzz_target;

/// Builds a kind from the front of `data`, consuming what it uses.
fn kind(data: &mut &[u8], depth: u32) -> TypeKind {
    let Some((&b, rest)) = data.split_first() else {
        return TypeKind::Text;
    };
    *data = rest;
    match b % 13 {
        0 => TypeKind::Bool,
        1 => TypeKind::Integer,
        2 => TypeKind::Numeric,
        3 => TypeKind::Float,
        4 => TypeKind::Json,
        5 => TypeKind::Jsonb,
        6 => TypeKind::Date,
        7 => TypeKind::Timestamp,
        8 => TypeKind::TimestampTz,
        9 | 10 if depth < 4 => TypeKind::Array {
            element: Box::new(kind(data, depth + 1)),
            delimiter: if b & 0x80 == 0 { b',' } else { b';' },
        },
        11 | 12 if depth < 4 => {
            let n = usize::from(b >> 5);
            let fields = (0..n)
                .map(|i| (format!("f{}", i % 3), kind(data, depth + 1)))
                .collect();
            TypeKind::Composite { fields }
        }
        _ => TypeKind::Text,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let kind = kind(&mut rest, 0);
    let columns = [Column::new("v", kind)];
    let mut out = b"keep".to_vec();
    match encode_row(&columns, &[Some(rest)], &mut out) {
        Ok(()) => {
            let doc = &out[4..];
            assert!(std::str::from_utf8(doc).is_ok(), "document is not UTF-8");
            // The document is JSON that jsonb reads back as itself.
            let mut again = Vec::new();
            encode_row(
                &[Column::new("v", TypeKind::Jsonb)],
                &[Some(doc)],
                &mut again,
            )
            .expect("a document is valid jsonb");
            assert_eq!(&again[5..again.len() - 1], doc);
        }
        Err(_) => assert_eq!(out, b"keep"),
    }
});
