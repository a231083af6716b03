//! Feeds arbitrary text to `evolve lint`'s rules: the input is cut into
//! migration files at NUL bytes, each parsed with `parse_script` and linted
//! in order, without and with a catalog built from the names the files
//! mention. Neither may panic, and every finding must point inside its file.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use evolve_core::migration::lint::{
    CatalogFacts, LintInput, Options, TableFacts, lint_with, names_in,
};
use evolve_core::migration::{Script, parse_script};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let files: Vec<(String, &str, Script)> = text
        .split('\0')
        .take(8)
        .enumerate()
        .filter_map(|(i, t)| {
            parse_script(t)
                .ok()
                .map(|p| (format!("V{}__f.sql", i + 1), t, p))
        })
        .collect();
    // Every name the files mention is a table with every such name as a
    // column of a type picked by its length, read by a view.
    let names: BTreeSet<String> = files.iter().flat_map(|(_, t, _)| names_in(t)).collect();
    let types = [
        "integer",
        "text",
        "character varying(20)",
        "timestamp without time zone",
    ];
    let catalog = CatalogFacts {
        tables: names
            .iter()
            .take(16)
            .map(|n| {
                let columns: BTreeMap<String, String> = names
                    .iter()
                    .take(16)
                    .map(|c| (c.clone(), types[c.len() % types.len()].to_string()))
                    .collect();
                let facts = TableFacts {
                    readers: columns
                        .keys()
                        .map(|c| (c.clone(), BTreeSet::from([format!("{n}_v")])))
                        .collect(),
                    not_null: columns
                        .keys()
                        .filter(|c| c.len() % 2 == 0)
                        .cloned()
                        .collect(),
                    columns,
                    rows: Some(n.len() as u64 * 1_000_000),
                    bytes: (n.len() as u64) << 30,
                    matview: n.len() % 3 == 0,
                    ..TableFacts::default()
                };
                (n.clone(), facts)
            })
            .collect(),
        timezone: Some("UTC".into()),
        // Names of even length are functions that are not volatile.
        functions: names
            .iter()
            .take(16)
            .map(|n| (n.clone(), n.len() % 2 == 1))
            .collect(),
        // Names of a length divisible by 5 are domains with a CHECK.
        checked_domains: names
            .iter()
            .filter(|n| n.len() % 5 == 0)
            .cloned()
            .collect(),
    };
    let inputs: Vec<LintInput> = files
        .iter()
        .map(|(script, text, parsed)| LintInput {
            script,
            text,
            parsed,
        })
        .collect();
    // squawk's parser recurses: lint on a stack as large as the binary's.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(1 << 30)
            .spawn_scoped(scope, || {
                for options in [
                    Options::default(),
                    Options {
                        config: None,
                        catalog: Some(&catalog),
                    },
                ] {
                    for f in lint_with(&inputs, &options) {
                        let (_, text, _) = files
                            .iter()
                            .find(|(s, _, _)| *s == f.script)
                            .expect("a finding names one of the files");
                        assert!(f.line >= 1 && f.column >= 1, "{f:?}");
                        assert!(f.line as usize <= text.lines().count().max(1) + 1, "{f:?}");
                        assert!(!f.message.is_empty(), "{f:?}");
                    }
                }
            })
            .expect("spawn")
            .join()
            .expect("lint panicked");
    });
});
