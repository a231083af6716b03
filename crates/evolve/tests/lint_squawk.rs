//! `evolve lint` next to squawk on the corpus in `tests/lint-corpus`: every
//! file carries the evolve rules it deserves (`expected.txt`), evolve must
//! raise exactly those, every real risk squawk reports evolve reports too,
//! and where squawk is wrong (`expected.txt` says why) squawk does report it
//! and evolve does not. Prints the table of both tools' findings per file.
//!
//! squawk comes from the `squawk-cli` PyPI package (`cargo xtask test`
//! installs it). Without it the test fails under CI (`CI` set) and is
//! skipped, loudly, elsewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// squawk's rules about locks, rewrites, scans and statements that fail:
/// the real risks. Each maps to the evolve rules that cover it.
const RISKS: &[(&str, &[&str])] = &[
    ("adding-field-with-default", &["adding-field-with-default"]),
    (
        "adding-foreign-key-constraint",
        &["adding-foreign-key-constraint"],
    ),
    ("adding-not-nullable-field", &["adding-not-nullable-field"]),
    (
        "adding-serial-primary-key-field",
        &["adding-serial-primary-key-field"],
    ),
    (
        "constraint-missing-not-valid",
        &[
            "constraint-missing-not-valid",
            "adding-foreign-key-constraint",
            "disallowed-unique-constraint",
            "adding-serial-primary-key-field",
        ],
    ),
    (
        "disallowed-unique-constraint",
        &["disallowed-unique-constraint"],
    ),
    (
        "changing-column-type",
        &["changing-column-type", "alter-type-rewrite"],
    ),
    ("prefer-repack", &["prefer-repack"]),
    (
        "require-concurrent-index-creation",
        &["require-concurrent-index-creation"],
    ),
    (
        "require-concurrent-index-deletion",
        &["require-concurrent-index-deletion"],
    ),
    (
        "require-concurrent-reindex",
        &["require-concurrent-reindex"],
    ),
    (
        "require-concurrent-partition-detach",
        &["require-concurrent-partition-detach"],
    ),
    (
        "ban-concurrent-index-creation-in-transaction",
        &["ban-concurrent-index-creation-in-transaction"],
    ),
    ("transaction-nesting", &["transaction-nesting"]),
    (
        "ban-uncommitted-transaction",
        &["ban-uncommitted-transaction"],
    ),
    ("syntax-error", &["syntax-error"]),
];

struct Case {
    file: String,
    expected: Vec<String>,
    /// squawk rules squawk gets wrong on this file.
    squawk_wrong: Vec<String>,
    note: String,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lint-corpus")
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus().join("expected.txt")).expect("expected.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let parts: Vec<&str> = l.splitn(3, '|').map(str::trim).collect();
            assert_eq!(parts.len(), 3, "expected.txt line {l:?}");
            let expected = match parts[1] {
                "-" => Vec::new(),
                rules => rules.split_whitespace().map(String::from).collect(),
            };
            let (wrong, note) = parts[2].split_once(':').unwrap_or(("", ""));
            Case {
                file: parts[0].to_string(),
                expected,
                squawk_wrong: wrong
                    .split(',')
                    .map(|r| r.trim().to_string())
                    .filter(|r| !r.is_empty())
                    .collect(),
                note: note.trim().to_string(),
            }
        })
        .collect()
}

fn squawk() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("squawk"))
        .find(|p| p.is_file())
}

/// file -> rules, in the order reported.
type ByFile = BTreeMap<String, Vec<String>>;

fn run_evolve(cases: &[Case]) -> ByFile {
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .current_dir(corpus())
        .args(["lint", "--format", "json"])
        .args(cases.iter().map(|c| &c.file))
        .output()
        .expect("run evolve");
    assert_eq!(
        out.status.code(),
        Some(1),
        "evolve lint exits 1 on errors; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("evolve json");
    let mut by_file = ByFile::new();
    for f in doc["findings"].as_array().expect("findings") {
        by_file
            .entry(f["script"].as_str().unwrap().to_string())
            .or_default()
            .push(f["rule"].as_str().unwrap().to_string());
    }
    by_file
}

/// squawk over the files, telling it that files without
/// `-- evolve:no-transaction` run in a transaction, as evolve runs them.
fn run_squawk(squawk: &Path, cases: &[Case]) -> ByFile {
    let mut by_file = ByFile::new();
    let (no_tx, tx): (Vec<&Case>, Vec<&Case>) = cases.iter().partition(|c| {
        std::fs::read_to_string(corpus().join(&c.file))
            .unwrap()
            .starts_with("-- evolve:no-transaction")
    });
    for (group, assume) in [(tx, true), (no_tx, false)] {
        let mut cmd = Command::new(squawk);
        cmd.current_dir(corpus()).args(["--reporter", "json"]);
        if assume {
            cmd.arg("--assume-in-transaction");
        }
        let out = cmd
            .args(group.iter().map(|c| &c.file))
            .output()
            .expect("run squawk");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "squawk printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        for f in doc.as_array().expect("squawk findings") {
            let file = f["file"].as_str().unwrap();
            let file = file.strip_prefix("./").unwrap_or(file);
            by_file
                .entry(file.to_string())
                .or_default()
                .push(f["rule_name"].as_str().unwrap().to_string());
        }
    }
    by_file
}

fn dedup(v: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for r in v {
        if !seen.contains(&r.as_str()) {
            seen.push(r);
        }
    }
    if seen.is_empty() {
        "-".into()
    } else {
        seen.join(", ")
    }
}

#[test]
fn evolve_flags_what_squawk_flags_and_is_right_where_squawk_is_wrong() {
    let Some(squawk) = squawk() else {
        let msg = "squawk is not installed (pip install squawk-cli; 'cargo xtask test' does it): the evolve/squawk lint comparison cannot run";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("\n!!!!! SKIPPED: {msg} !!!!!\n");
        return;
    };
    let cases = cases();
    let evolve = run_evolve(&cases);
    let squawk = run_squawk(&squawk, &cases);
    let none = Vec::new();
    let mut problems = Vec::new();
    println!("| file | evolve | squawk |\n|---|---|---|");
    for c in &cases {
        let ev = evolve.get(&c.file).unwrap_or(&none);
        let sq = squawk.get(&c.file).unwrap_or(&none);
        println!("| {} | {} | {} |", c.file, dedup(ev), dedup(sq));
        if *ev != c.expected {
            problems.push(format!(
                "{}: evolve raised {ev:?}, expected {:?}",
                c.file, c.expected
            ));
        }
        for s in sq {
            let Some((_, covered)) = RISKS.iter().find(|(r, _)| r == s) else {
                continue;
            };
            if c.squawk_wrong.contains(s) {
                continue;
            }
            if !ev.iter().any(|e| covered.contains(&e.as_str())) {
                problems.push(format!(
                    "{}: squawk reports the risk {s} and evolve does not",
                    c.file
                ));
            }
        }
        for w in &c.squawk_wrong {
            if !sq.contains(w) {
                problems.push(format!(
                    "{}: expected.txt says squawk wrongly reports {w} ({}), but squawk does not report it",
                    c.file, c.note
                ));
            }
            if ev.contains(w) {
                problems.push(format!("{}: evolve reports {w} too", c.file));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
