//! `evolve lint` against squawk over the same 1,000 migration files, in one
//! run: the files are written to a temporary directory (the lint corpus of
//! `crates/evolve/tests/lint-corpus`, each file under 16 table names, plus
//! a few larger files), then evolve lints the directory in-process (reading,
//! splitting and parsing included) and squawk (`squawk-cli` from PyPI) lints
//! the same files in one process. Prints both times and the ratio.
//!
//! Usage: `cargo xtask bench lint [FILES]` (default 1000).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use evolve_core::migration::lint::{LintInput, lint};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("FILES is a number"))
        .unwrap_or(1000);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../evolve/tests/lint-corpus");
    let mut texts: Vec<String> = std::fs::read_dir(&corpus)
        .expect("lint corpus")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .map(|p| std::fs::read_to_string(p).expect("read corpus file"))
        .collect();
    texts.sort();
    let dir = std::env::temp_dir().join(format!("evolve-bench-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut paths = Vec::with_capacity(n);
    for i in 0..n {
        let base = &texts[i % texts.len()];
        let text = base
            .replace("orders", &format!("orders_{}", i % 16))
            .replace("customers", &format!("customers_{}", i % 16));
        let path = dir.join(format!("V{}__change.sql", i + 1));
        std::fs::write(&path, text).expect("write file");
        paths.push(path);
    }
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    println!("{n} files, {bytes} bytes");

    // evolve: read, split, parse and lint, in the order they apply.
    let start = Instant::now();
    let loaded: Vec<(String, String, evolve_core::migration::Script)> = paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("read");
            let parsed = evolve_core::migration::parse_script(&text).expect("split");
            (p.display().to_string(), text, parsed)
        })
        .collect();
    let inputs: Vec<LintInput> = loaded
        .iter()
        .map(|(script, text, parsed)| LintInput {
            script,
            text,
            parsed,
        })
        .collect();
    let findings = lint(&inputs);
    let evolve = start.elapsed();
    println!(
        "evolve lint: {:>8.1} ms  ({} findings)",
        evolve.as_secs_f64() * 1e3,
        findings.len()
    );

    let start = Instant::now();
    let out = Command::new("squawk")
        .args(["--reporter", "json", "--assume-in-transaction"])
        .args(&paths)
        .stderr(Stdio::null())
        .output();
    let squawk = start.elapsed();
    match out {
        Ok(out) => {
            let count = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| v.as_array().map(Vec::len))
                .unwrap_or(0);
            println!(
                "squawk:      {:>8.1} ms  ({count} findings)",
                squawk.as_secs_f64() * 1e3
            );
            println!(
                "ratio: squawk / evolve = {:.2}",
                squawk.as_secs_f64() / evolve.as_secs_f64()
            );
        }
        Err(e) => println!("squawk did not run ({e}); pip install squawk-cli"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
