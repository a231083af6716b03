use super::*;

/// Renders a parse result as one line per directive set and statement:
/// `line:column Kind "text"`, or the error message.
fn render(input: &str) -> String {
    let script = match parse_script(input) {
        Ok(script) => script,
        Err(e) => return format!("error: {e}\n"),
    };
    let mut out = String::new();
    let Directives {
        no_transaction,
        populate_in_transaction,
        rebuild_dependents_off,
        phase,
        backfill,
    } = script.directives;
    if let Some(phase) = phase {
        out.push_str(&format!("directive phase {phase}\n"));
    }
    if let Some(job) = backfill {
        out.push_str(&format!("directive backfill {job}\n"));
    }
    if no_transaction {
        out.push_str("directive no-transaction\n");
    }
    if populate_in_transaction {
        out.push_str("directive populate-in-transaction\n");
    }
    if rebuild_dependents_off {
        out.push_str("directive rebuild-dependents off\n");
    }
    for s in &script.statements {
        // Every statement is a verbatim slice of the input at its offset.
        assert_eq!(
            input.get(s.offset..s.offset + s.text.len()),
            Some(s.text.as_str())
        );
        assert_eq!((s.line, s.column), line_col(input, s.offset));
        out.push_str(&format!(
            "{}:{} {:?} {:?}\n",
            s.line, s.column, s.kind, s.text
        ));
        if let Some(data) = &s.copy_data {
            out.push_str(&format!("data {data:?}\n"));
        }
    }
    out
}

fn check(input: &str, expected: &str) {
    let actual = render(input);
    let expected = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    assert_eq!(actual, expected, "input:\n{input}");
}

#[test]
fn simple_statements() {
    check(
        "select 1; select 2",
        r#"
        1:1 Other "select 1"
        1:11 Other "select 2"
        "#,
    );
    check(
        "CREATE TABLE t (id int);\n\nINSERT INTO t VALUES (1);\n",
        r#"
        1:1 Other "CREATE TABLE t (id int)"
        3:1 Other "INSERT INTO t VALUES (1)"
        "#,
    );
}

#[test]
fn surrounding_comments_and_whitespace_are_trimmed() {
    check(
        "/* c */ select 1 -- x\n; \n\n  select /* inner */ 2\n-- trailing\n;",
        r#"
        1:9 Other "select 1"
        4:3 Other "select /* inner */ 2"
        "#,
    );
}

#[test]
fn empty_statements_and_comment_only_files() {
    check("", "");
    check(";;\n ; ", "");
    check("-- just a comment\n/* and /* a nested */ one */\n", "");
    check(
        ";;select 1;;;select 2;;",
        r#"
        1:3 Other "select 1"
        1:14 Other "select 2"
        "#,
    );
}

#[test]
fn dollar_quoted_bodies_stay_whole() {
    check(
        "select $$a;b$$; select $t$ x $$ ; $t$;select $_$;$_$",
        r#"
        1:1 Other "select $$a;b$$"
        1:17 Other "select $t$ x $$ ; $t$"
        1:39 Other "select $_$;$_$"
        "#,
    );
    check(
        "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $body$\nBEGIN\n  NEW.x := 1;\n  RETURN NEW;\nEND\n$body$;\nselect 2;",
        r#"
        1:1 Other "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $body$\nBEGIN\n  NEW.x := 1;\n  RETURN NEW;\nEND\n$body$"
        7:1 Other "select 2"
        "#,
    );
}

#[test]
fn do_blocks_stay_whole() {
    check(
        "DO $$\nBEGIN\n  PERFORM 1;\n  IF true THEN RAISE NOTICE 'x;y'; END IF;\nEND\n$$;\nDO LANGUAGE plpgsql $do$ BEGIN NULL; END $do$;",
        r#"
        1:1 Other "DO $$\nBEGIN\n  PERFORM 1;\n  IF true THEN RAISE NOTICE 'x;y'; END IF;\nEND\n$$"
        7:1 Other "DO LANGUAGE plpgsql $do$ BEGIN NULL; END $do$"
        "#,
    );
}

#[test]
fn nested_comments_stay_whole() {
    check(
        "select 1 /* a /* ; */ ; */ + 1; select 2 -- ; no\n",
        r#"
        1:1 Other "select 1 /* a /* ; */ ; */ + 1"
        1:33 Other "select 2"
        "#,
    );
}

#[test]
fn strings_and_quoted_identifiers_stay_whole() {
    check(
        r#"select "we;ird" from "a""b;"; select 'it''s;'; select E'a\';b'; select 'a\'; select U&'x;', B'01', X'ff', N'n;'"#,
        r#"
        1:1 Other "select \"we;ird\" from \"a\"\"b;\""
        1:31 Other "select 'it''s;'"
        1:48 Other "select E'a\\';b'"
        1:65 Other "select 'a\\'"
        1:78 Other "select U&'x;', B'01', X'ff', N'n;'"
        "#,
    );
}

#[test]
fn begin_atomic_bodies_stay_whole() {
    check(
        "CREATE FUNCTION f(x int) RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\n  SELECT CASE WHEN x > 0 THEN 1 ELSE 2 END;\nEND;\nCREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END;\nselect 3",
        r#"
        1:1 Other "CREATE FUNCTION f(x int) RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\n  SELECT CASE WHEN x > 0 THEN 1 ELSE 2 END;\nEND"
        6:1 Other "CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END"
        7:1 Other "select 3"
        "#,
    );
    // Statements PostgreSQL would reject inside the body do not end it.
    check(
        "create function f() returns int language sql begin atomic selec 1; select 2; end; select 9;",
        r#"
        1:1 Other "create function f() returns int language sql begin atomic selec 1; select 2; end"
        1:83 Other "select 9"
        "#,
    );
}

#[test]
fn rule_action_lists_stay_whole() {
    check(
        "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); NOTIFY x);\nCREATE RULE q AS ON INSERT TO t DO INSTEAD INSERT INTO a VALUES (1); select 2;\ncreate rule s as on select to t do instead select 1 union select 2; select 3",
        r#"
        1:1 Other "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); NOTIFY x)"
        2:1 Other "CREATE RULE q AS ON INSERT TO t DO INSTEAD INSERT INTO a VALUES (1)"
        2:70 Other "select 2"
        3:1 Other "create rule s as on select to t do instead select 1 union select 2"
        3:69 Other "select 3"
        "#,
    );
}

#[test]
fn positions_count_lines_and_characters() {
    check(
        "select 'é';\r\n  select '日本'; select 3;\rselect 4;\n\u{feff}select 5",
        r#"
        1:1 Other "select 'é'"
        2:3 Other "select '日本'"
        2:16 Other "select 3"
        3:1 Other "select 4"
        4:1 Other "\u{feff}select 5"
        "#,
    );
    // A byte-order mark is whitespace at the start of the file (and not a
    // column); anywhere else it is an ordinary character, as in PostgreSQL.
    check(
        "\u{feff}select 1;\n",
        r#"
        1:1 Other "select 1"
        "#,
    );
}

#[test]
fn syntax_errors_do_not_refuse_the_file() {
    check(
        "selec 1; select 2",
        r#"
        1:1 Other "selec 1"
        1:10 Other "select 2"
        "#,
    );
    check(
        "insert into t values (1, (select 2; select 4;",
        r#"
        1:1 Other "insert into t values (1, (select 2"
        1:37 Other "select 4"
        "#,
    );
    check(
        "select 1 select 2; \\connect x\nselect 3",
        r#"
        1:1 Other "select 1 select 2"
        1:20 Other "\\connect x\nselect 3"
        "#,
    );
    // Unterminated tokens run to the end of the file, as in PostgreSQL.
    check(
        "select 1; select 'abc; select 2",
        r#"
        1:1 Other "select 1"
        1:11 Other "select 'abc; select 2"
        "#,
    );
    check(
        "select 1; select $a$ x; select 2",
        r#"
        1:1 Other "select 1"
        1:11 Other "select $a$ x; select 2"
        "#,
    );
    // An unterminated comment would hide the rest: refused, at its `/*`.
    for (text, at) in [
        ("select 1 /* a /* b */ ; select 2", (1, 10)),
        (
            "create table a (id int);\n/* forgot to close\ncreate table b (id int);\n",
            (2, 1),
        ),
        ("/* unterminated\ncreate table c (id int);", (1, 1)),
        ("-- evolve:no-transaction\nselect 1; /*", (2, 11)),
    ] {
        match parse_script(text) {
            Err(ScriptError::UnterminatedComment { line, column }) => {
                assert_eq!((line, column), at, "{text:?}")
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    check(
        "select 1 /* a /* b */ */ ; select '/*'; -- /*\nselect 2 /* c */",
        r#"
        1:1 Other "select 1"
        1:28 Other "select '/*'"
        2:1 Other "select 2"
        "#,
    );
    // A BEGIN ATOMIC body without END takes the rest of the file.
    check(
        "create function f() returns int language sql begin atomic select 1; select 2;",
        r#"
        1:1 Other "create function f() returns int language sql begin atomic select 1; select 2;"
        "#,
    );
}

#[test]
fn statement_kinds_in_a_script() {
    check(
        "BEGIN;\nCREATE INDEX CONCURRENTLY i ON t (a);\nCOMMIT;\nVACUUM ANALYZE t;\nALTER TYPE mood ADD VALUE 'meh';\nstart transaction;\nend",
        r#"
        1:1 TransactionControl "BEGIN"
        2:1 NonTransactional "CREATE INDEX CONCURRENTLY i ON t (a)"
        3:1 TransactionControl "COMMIT"
        4:1 NonTransactional "VACUUM ANALYZE t"
        5:1 Other "ALTER TYPE mood ADD VALUE 'meh'"
        6:1 TransactionControl "start transaction"
        7:1 TransactionControl "end"
        "#,
    );
    // Comments before the keywords do not hide them.
    check(
        "/* build it */ -- online\nCREATE /* x */ UNIQUE INDEX\nCONCURRENTLY i ON t (a)",
        r#"
        2:1 NonTransactional "CREATE /* x */ UNIQUE INDEX\nCONCURRENTLY i ON t (a)"
        "#,
    );
}

#[test]
fn directives() {
    check(
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY i ON t (a);",
        r#"
        directive no-transaction
        2:1 NonTransactional "CREATE INDEX CONCURRENTLY i ON t (a)"
        "#,
    );
    check(
        "\n-- Adds the index online.\n/* ticket 42 */\n--evolve:no-transaction\n  --  EVOLVE:populate-in-transaction  \n\n-- more notes\nselect 1",
        r#"
        directive no-transaction
        directive populate-in-transaction
        8:1 Other "select 1"
        "#,
    );
    // Empty statements are not statements; comment-only files may have directives.
    check(
        ";\n-- evolve:no-transaction\nselect 1",
        r#"
        directive no-transaction
        3:1 Other "select 1"
        "#,
    );
    check(
        "-- evolve:populate-in-transaction\n",
        "directive populate-in-transaction",
    );
    // Block comments and other comments that mention evolve are not directives.
    check(
        "/* evolve:no-transaction */\n-- see evolve:no-transaction\nselect 1",
        r#"
        3:1 Other "select 1"
        "#,
    );
    // Directive-looking text inside strings and bodies is data.
    check(
        "select 1;\nselect '\n-- evolve:no-transaction\n';\nDO $$ BEGIN -- evolve:bogus\nEND $$;",
        r#"
        1:1 Other "select 1"
        2:1 Other "select '\n-- evolve:no-transaction\n'"
        5:1 Other "DO $$ BEGIN -- evolve:bogus\nEND $$"
        "#,
    );
}

#[test]
fn directive_errors() {
    check(
        "-- evolve:no-transactoin\nselect 1",
        r#"error: unknown directive "-- evolve:no-transactoin" on line 1; the known directives are "-- evolve:no-transaction", "-- evolve:populate-in-transaction", "-- evolve:rebuild-dependents off", "-- evolve:phase expand|backfill|switch|contract" and "-- evolve:backfill NAME""#,
    );
    check(
        "\n\n-- evolve:no-transaction please\nselect 1",
        r#"error: unknown directive "-- evolve:no-transaction please" on line 3; the known directives are "-- evolve:no-transaction", "-- evolve:populate-in-transaction", "-- evolve:rebuild-dependents off", "-- evolve:phase expand|backfill|switch|contract" and "-- evolve:backfill NAME""#,
    );
    check(
        "-- evolve:\n",
        r#"error: unknown directive "-- evolve:" on line 1; the known directives are "-- evolve:no-transaction", "-- evolve:populate-in-transaction", "-- evolve:rebuild-dependents off", "-- evolve:phase expand|backfill|switch|contract" and "-- evolve:backfill NAME""#,
    );
    check(
        "select 1;\n-- evolve:no-transaction\nselect 2;",
        r#"error: directive "-- evolve:no-transaction" on line 2 comes after the first statement, where it would be ignored; move it to the top of the file, before the first statement"#,
    );
    check(
        "select 1 -- evolve:no-transaction\n;",
        r#"error: directive "-- evolve:no-transaction" on line 1 comes after the first statement, where it would be ignored; move it to the top of the file, before the first statement"#,
    );
    check(
        "select 1;\n-- evolve:typo",
        r#"error: directive "-- evolve:typo" on line 2 comes after the first statement, where it would be ignored; move it to the top of the file, before the first statement"#,
    );
}

#[test]
fn concurrent_index_names_of_statements() {
    let names = |input: &str| -> Vec<Option<(Option<String>, String)>> {
        parse_script(input)
            .unwrap()
            .statements
            .iter()
            .map(Statement::concurrent_index_name)
            .collect()
    };
    assert_eq!(
        names(
            "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS \"My Idx\" ON \"Sales\".orders (a);\ncreate unique index concurrently Orders_A on orders (a);\nCREATE INDEX CONCURRENTLY ON orders (b);\nCREATE INDEX i ON t (a);"
        ),
        vec![
            Some((Some("Sales".to_owned()), "My Idx".to_owned())),
            Some((None, "orders_a".to_owned())),
            None,
            None,
        ]
    );
}

/// Runs `f` on a thread with a small stack, as a tokio worker or a test
/// thread would, to show that the caller's stack size does not matter.
fn on_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn_scoped(s, f)
            .unwrap()
            .join()
            .unwrap()
    })
}

#[test]
fn deep_nesting_is_parsed_on_any_stack() {
    // The word `atomic` makes parse_script run the parser (without it
    // there is nothing for the parser to find and it is skipped).
    // squawk needs up to ~3.5 KiB of stack per level in a debug build, so
    // each input overflows a 256 KiB stack many times over; the cheap ones
    // also go past the parser thread's fixed 8 MiB. (Parenthesis depth costs
    // squawk quadratic time, hence the smaller sizes for those.)
    let inputs = [
        format!(
            "select {}1{}; select 2 as atomic",
            "(".repeat(2_000),
            ")".repeat(2_000)
        ),
        format!("select {} ; select 2 as atomic", "(".repeat(2_000)),
        format!("select {}true; select 2 as atomic", "not ".repeat(2_000)),
        format!("select {}1; select 2 as atomic", "- ".repeat(2_000)),
        format!(
            "select {}1{}; select 2 as atomic",
            "array[".repeat(6_000),
            "]".repeat(6_000)
        ),
        format!(
            "select {}1; select 2 as atomic",
            "1 between 1 and ".repeat(6_000)
        ),
        format!(
            "select {}1{}; select 2 as atomic",
            "case when true then ".repeat(6_000),
            " end".repeat(6_000)
        ),
        // Long chains build deep trees, which also recurse when dropped.
        format!("select 1{}; select 2 as atomic", " + 1".repeat(20_000)),
        format!(
            "select true{}; select 2 as atomic",
            " and a = 1".repeat(10_000)
        ),
    ];
    for input in inputs {
        let script = on_small_stack(|| parse_script(&input)).unwrap();
        assert_eq!(script.statements.len(), 2, "{}", &input[..40]);
        assert_eq!(script.statements[1].text, "select 2 as atomic");
    }
}

#[test]
fn nesting_beyond_the_limit_is_refused() {
    let input = format!("select 1;\n select {}1", "(".repeat(MAX_NESTING + 1));
    let error = on_small_stack(|| parse_script(&input)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "SQL at line 2, column {} is nested too deeply to split safely (more than {MAX_NESTING} levels of brackets, or of operators without a comma between them); split the statement or simplify the expression",
            8 + MAX_NESTING
        )
    );
    // Long flat lists are not nesting.
    let values = (0..20_000)
        .map(|i| format!("({i}, 'v{i}')"))
        .collect::<Vec<_>>()
        .join(",\n");
    let input = format!("INSERT INTO t (a, b) VALUES\n{values};");
    let script = on_small_stack(|| parse_script(&input)).unwrap();
    assert_eq!(script.statements.len(), 1);
}

#[test]
fn rebuild_dependents_off_is_a_directive() {
    check(
        "-- evolve:rebuild-dependents off\nALTER TABLE t ALTER COLUMN c TYPE text;",
        r#"
        directive rebuild-dependents off
        2:1 Other "ALTER TABLE t ALTER COLUMN c TYPE text"
        "#,
    );
}

#[test]
fn phase_and_backfill_directives() {
    check(
        "-- evolve:phase Backfill\n-- evolve:backfill users_full_name\nupdate t set a = b;",
        r#"
        directive phase backfill
        directive backfill users_full_name
        3:1 Other "update t set a = b"
        "#,
    );
    check(
        "-- evolve:phase later\nselect 1",
        r#"error: unknown directive "-- evolve:phase later" on line 1; the known directives are "-- evolve:no-transaction", "-- evolve:populate-in-transaction", "-- evolve:rebuild-dependents off", "-- evolve:phase expand|backfill|switch|contract" and "-- evolve:backfill NAME""#,
    );
}

#[test]
fn copy_from_stdin_data_is_not_sql() {
    // The rows run to the line `\.`; a quote or a comment opener in them
    // is data, and the statements after them are split as ever.
    check(
        "create table t(i int, s text);\ncopy t (i, s) from stdin;\n1\tit's\n2\t/* no comment\n\\.\nselect 1;\n",
        r#"
        1:1 Other "create table t(i int, s text)"
        2:1 Other "copy t (i, s) from stdin"
        data "1\tit's\n2\t/* no comment\n"
        6:1 Other "select 1"
        "#,
    );
    // Options after STDIN, the rest of the statement's line skipped, CRLF
    // and white space around the terminator, no rows at all.
    check(
        "COPY t FROM STDIN WITH (FORMAT csv); -- rows\r\n1,a\r\n  \\.  \r\nCOPY t FROM STDIN;\n\\.\n",
        r#"
        1:1 Other "COPY t FROM STDIN WITH (FORMAT csv)"
        data "1,a\r\n"
        4:1 Other "COPY t FROM STDIN"
        data ""
        "#,
    );
    // Not from STDIN: an ordinary statement.
    check(
        "copy t from '/tmp/x';\nselect 2;",
        r#"
        1:1 Other "copy t from '/tmp/x'"
        2:1 Other "select 2"
        "#,
    );
    check(
        "copy t from stdin;\n1\n2\n",
        "error: the COPY ... FROM STDIN at line 1 has no line \"\\.\" after its data, so the rest of the file would be read as rows; end the data with a line holding only \\.",
    );
}
