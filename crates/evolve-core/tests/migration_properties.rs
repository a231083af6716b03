//! Property tests for the migration-file layer: nothing panics on any input,
//! the statement split is sound, versions order numerically, and checksums
//! ignore line endings.

use std::cmp::Ordering;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use evolve_core::migration::{
    MigrationKind, ScriptError, Version, flyway_checksum, line_col, parse_file_name, parse_script,
};
use proptest::prelude::*;

// ---------------------------------------------------------------- file names

proptest! {
    #[test]
    fn file_names_never_panic(name in any::<String>()) {
        if let Ok(Some(m)) = parse_file_name(&name) {
            prop_assert_eq!(&m.script, &name);
            prop_assert!(!m.description.contains('_'));
        }
    }

    #[test]
    fn sql_file_names_never_panic(stem in "[VRU.]?[0-9._a-zA-Z' ;-]{0,30}") {
        let name = format!("{stem}.sql");
        let _ = parse_file_name(&name);
    }

    #[test]
    fn well_formed_names_parse(
        parts in prop::collection::vec("[0-9]{1,6}", 1..5),
        seps in prop::collection::vec(prop::sample::select(vec!['.', '_']), 4),
        description in "[a-zA-Z0-9_ ';\"-]{0,50}",
    ) {
        let mut version = parts[0].clone();
        for (part, sep) in parts[1..].iter().zip(&seps) {
            version.push(*sep);
            version.push_str(part);
        }
        let name = format!("V{version}__{description}.sql");
        let parsed = parse_file_name(&name).unwrap().unwrap();
        let MigrationKind::Versioned(v) = &parsed.kind else {
            panic!("{name}: not versioned");
        };
        prop_assert_eq!(v.as_str(), version.replace('_', "."));
        prop_assert_eq!(parsed.description, description.replace('_', " "));

        let repeatable = format!("R__{description}.sql");
        let parsed = parse_file_name(&repeatable).unwrap().unwrap();
        prop_assert_eq!(parsed.kind, MigrationKind::Repeatable);
    }
}

// ------------------------------------------------------------------ versions

/// A version's numeric value as small integers, with trailing zeros dropped:
/// the reference the `Version` ordering must agree with.
fn numeric(parts: &[u64]) -> Vec<u64> {
    let mut parts = parts.to_vec();
    while parts.last() == Some(&0) {
        parts.pop();
    }
    parts
}

fn version_text(parts: &[u64], zeros: &[usize], seps: &[char]) -> String {
    let mut text = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            text.push(seps[i % seps.len()]);
        }
        text.push_str(&"0".repeat(zeros[i % zeros.len()]));
        text.push_str(&part.to_string());
    }
    text
}

fn hash(v: &Version) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn version_parts() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![0..3u64, 0..20u64, any::<u64>()], 1..6)
}

proptest! {
    #[test]
    fn versions_never_panic(s in any::<String>()) {
        if let Ok(v) = Version::parse(&s) {
            prop_assert_eq!(v.as_str(), s.replace('_', "."));
        }
    }

    #[test]
    fn versions_order_numerically(
        a in version_parts(),
        b in version_parts(),
        zeros in prop::collection::vec(0..3usize, 1..4),
        seps in prop::collection::vec(prop::sample::select(vec!['.', '_']), 1..4),
    ) {
        let va = Version::parse(&version_text(&a, &zeros, &seps)).unwrap();
        let vb = Version::parse(&version_text(&b, &[0], &['.'])).unwrap();
        let expected = numeric(&a).cmp(&numeric(&b));
        prop_assert_eq!(va.cmp(&vb), expected);
        prop_assert_eq!(va == vb, expected == Ordering::Equal);
        if va == vb {
            prop_assert_eq!(hash(&va), hash(&vb));
        }
    }
}

// ----------------------------------------------------------------- checksums

proptest! {
    #[test]
    fn checksums_never_panic(bytes in any::<Vec<u8>>()) {
        match flyway_checksum(&bytes) {
            Ok(_) => prop_assert!(std::str::from_utf8(&bytes).is_ok()),
            Err(e) => {
                let valid_up_to = std::str::from_utf8(&bytes).unwrap_err().valid_up_to();
                prop_assert_eq!(e.offset, valid_up_to);
            }
        }
    }

    #[test]
    fn checksums_ignore_line_endings_and_bom(
        lines in prop::collection::vec("[^\r\n]{0,20}", 0..8),
        endings in prop::collection::vec(prop::sample::select(vec!["\n", "\r\n", "\r"]), 1..8),
        trailing in any::<bool>(),
        bom in any::<bool>(),
    ) {
        // Reference: CRC-32 of the lines' bytes, nothing between them, with
        // one U+FEFF removed from the start of the first line read.
        let mut crc = crc32fast::Hasher::new();
        for (i, line) in lines.iter().enumerate() {
            let line = if i == 0 && !bom {
                line.strip_prefix('\u{feff}').unwrap_or(line)
            } else {
                line
            };
            crc.update(line.as_bytes());
        }
        let expected = crc.finalize() as i32;

        let mut file = String::new();
        if bom {
            file.push('\u{feff}');
        }
        for (i, line) in lines.iter().enumerate() {
            file.push_str(line);
            if i + 1 < lines.len() || trailing {
                file.push_str(endings[i % endings.len()]);
            }
        }
        prop_assert_eq!(flyway_checksum(file.as_bytes()).unwrap(), expected);
    }
}

// -------------------------------------------------------------- line_col

/// Reference for `line_col`: counts the line breaks before the offset with
/// string replacement instead of a state machine.
fn reference_line_col(text: &str, offset: usize) -> (u32, u32) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let mut before = &text[..offset];
    before = before.strip_prefix('\u{feff}').unwrap_or(before);
    // A "\r" whose "\n" comes after the offset has not ended the line yet.
    let pending_cr = before.ends_with('\r') && text[offset..].starts_with('\n');
    if pending_cr {
        before = &before[..before.len() - 1];
    }
    let normalized = before.replace("\r\n", "\n").replace('\r', "\n");
    let line = 1 + normalized.matches('\n').count() as u32;
    let last = normalized.rsplit('\n').next().unwrap_or_default();
    let column = 1 + last.chars().count() as u32 + u32::from(pending_cr);
    (line, column)
}

proptest! {
    #[test]
    fn line_col_matches_reference(text in "(\r|\n|\r\n|a|é|日|\u{feff}){0,20}", offset in 0..80usize) {
        prop_assert_eq!(line_col(&text, offset), reference_line_col(&text, offset));
    }
}

// -------------------------------------------------------------- scripts

/// PostgreSQL's whitespace (other Unicode spaces are identifier characters).
fn is_sql_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// Checks that a split is sound: statements are disjoint verbatim slices in
/// file order that start with a token, everything between them is
/// whitespace, comments and `;` only, and each statement parsed alone is one
/// statement.
fn assert_sound_split(input: &str) -> Result<(), TestCaseError> {
    let script = match parse_script(input) {
        Ok(script) => script,
        Err(ScriptError::UnknownDirective { .. } | ScriptError::LateDirective { .. }) => {
            return Ok(());
        }
        // Only where a `/*` opens at the position it names.
        Err(ScriptError::UnterminatedComment { line, column }) => {
            let at = input
                .char_indices()
                .map(|(i, _)| i)
                .find(|&i| line_col(input, i) == (line, column));
            prop_assert!(
                at.is_some_and(|i| input[i..].starts_with("/*")),
                "no /* at {}:{}",
                line,
                column
            );
            return Ok(());
        }
        Err(other) => return Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    };
    let mut gap_start = 0;
    let mut gaps = Vec::new();
    for s in &script.statements {
        prop_assert!(
            s.offset >= gap_start,
            "statements overlap or are out of order"
        );
        prop_assert!(!s.text.is_empty());
        prop_assert_eq!(
            input.get(s.offset..s.offset + s.text.len()),
            Some(s.text.as_str())
        );
        prop_assert_eq!((s.line, s.column), line_col(input, s.offset));
        // (It may end in whitespace: an unterminated string runs to the end.)
        prop_assert!(!s.text.starts_with(is_sql_whitespace));
        prop_assert!(!s.text.starts_with("--") && !s.text.starts_with("/*"));
        // Each statement, parsed alone, is itself (a byte-order mark is
        // whitespace only at the start of a file, so it is the exception).
        if !s.text.starts_with('\u{feff}') {
            let alone = parse_script(&s.text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let texts: Vec<&str> = alone.statements.iter().map(|a| a.text.as_str()).collect();
            prop_assert_eq!(texts, vec![s.text.as_str()]);
        }
        gaps.push(&input[gap_start..s.offset]);
        gap_start = s.offset + s.text.len();
    }
    gaps.push(&input[gap_start..]);
    // A byte-order mark is whitespace at the very start of a file only.
    if let Some(first) = gaps.first_mut() {
        *first = first.strip_prefix('\u{feff}').unwrap_or(first);
    }
    for gap in gaps {
        // Nothing executable between statements...
        let rest = parse_script(gap).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(rest.statements.is_empty(), "gap {:?} has statements", gap);
        // ...by a simple independent check too: after whitespace and ';',
        // a gap is empty or starts a comment.
        let trimmed = gap.trim_start_matches(|c: char| is_sql_whitespace(c) || c == ';');
        prop_assert!(
            trimmed.is_empty() || trimmed.starts_with("--") || trimmed.starts_with("/*"),
            "gap {:?}",
            gap
        );
    }
    Ok(())
}

/// Fragments that stress the lexer and the parser: quotes, comments, bodies.
fn sqlish() -> impl Strategy<Value = String> {
    let fragment = prop::sample::select(vec![
        "select",
        " ",
        "\n",
        "\r\n",
        ";",
        ";",
        "'",
        "''",
        "\"",
        "$$",
        "$a$",
        "$1",
        "/*",
        "*/",
        "--",
        "(",
        ")",
        "[",
        "]",
        ",",
        "E'",
        "\\",
        "1",
        "x",
        "é",
        "日本",
        "begin",
        "atomic",
        "end",
        "case",
        "when",
        "then",
        "create function f() returns int language sql ",
        "begin atomic ",
        "create rule r as on insert to t do also (",
        "do ",
        "U&\"",
        "-- evolve:no-transaction\n",
        "create index concurrently i on s.t (a)",
        "\u{feff}",
        "\t",
        "*",
        "e",
        ".",
    ]);
    prop::collection::vec(fragment, 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn scripts_never_panic(input in any::<String>()) {
        assert_sound_split(&input)?;
    }

    #[test]
    fn sqlish_scripts_split_soundly(input in sqlish()) {
        assert_sound_split(&input)?;
    }
}

/// Valid statements that contain `;`, quotes or comments, none of which may
/// split them.
const TRICKY: &[&str] = &[
    "select 1",
    "select 'a;b', 'it''s', E'x\\';y', $$ ; $$, $t$ $$; $t$",
    "select \"we;ird\" from \"a\"\"b\"",
    "select 1 /* a /* nested ; */ ; */ + 1",
    "select 2 -- comment ; inside\n+ 3",
    "DO $$ BEGIN PERFORM 1; RAISE NOTICE 'x;'; END $$",
    "CREATE FUNCTION f(x int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE WHEN x > 0 THEN 1 END; END",
    "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); NOTIFY x)",
    "CREATE FUNCTION g() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$",
    "CREATE INDEX CONCURRENTLY \"My Idx\" ON s.t (a)",
    "insert into t (name) values ('Zoë; 日本')",
    "COMMIT",
];

/// Whitespace, comments and empty statements that may separate statements.
fn separator() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        " ",
        "\n",
        "\r\n",
        "\t",
        ";",
        "-- c ; x\n",
        "/* c ; */",
        "/* a /* b */ ; */",
    ]);
    prop::collection::vec(piece, 0..4).prop_map(|p| p.concat())
}

proptest! {
    #[test]
    fn joined_statements_split_back(
        picks in prop::collection::vec((prop::sample::select(TRICKY), separator(), separator()), 0..8),
        trailing in any::<bool>(),
    ) {
        let mut input = String::new();
        for (i, (statement, before, after)) in picks.iter().enumerate() {
            input.push_str(before);
            input.push_str(statement);
            input.push_str(after);
            if i + 1 < picks.len() || trailing {
                input.push(';');
            }
        }
        let script = parse_script(&input).unwrap();
        let texts: Vec<&str> = script.statements.iter().map(|s| s.text.as_str()).collect();
        let expected: Vec<&str> = picks.iter().map(|(s, _, _)| *s).collect();
        prop_assert_eq!(texts, expected);
        assert_sound_split(&input)?;
    }
}

// ---------------------------------------------------------------- effects

/// Fragments of the statements `evolve plan` analyses, glued at random:
/// `effects::analyze` returns Ok or a syntax error, never panics.
fn ddlish() -> impl Strategy<Value = String> {
    let fragment = prop::sample::select(vec![
        "alter table ",
        "t ",
        "s.t ",
        "\"Odd\" ",
        "attach partition ",
        "detach partition ",
        "concurrently ",
        "finalize ",
        "for values from (1) to (2) ",
        "default ",
        "partition of ",
        "create table ",
        "add constraint k ",
        "primary key ",
        "using index ",
        "unique ",
        "alter column c ",
        "type ",
        "varchar(10) ",
        "numeric(10, 2) ",
        "using c::text ",
        "using ",
        "cast(c as text) ",
        "set (user_catalog_table = true) ",
        "reindex ",
        "index ",
        "table ",
        "truncate ",
        "cascade ",
        "do $$ begin end $$ ",
        "select ",
        "f() ",
        "set_config('a', 'b', false) ",
        "add column d ",
        "default now() ",
        ", ",
        "(",
        ")",
        ";",
        "'",
        "\"",
        ". ",
    ]);
    prop::collection::vec(fragment, 0..16).prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn effects_never_panic(input in ddlish()) {
        let _ = evolve_core::migration::effects::analyze(&input);
    }

    #[test]
    fn effects_never_panic_on_any_text(input in any::<String>()) {
        let _ = evolve_core::migration::effects::analyze(&input);
    }
}
