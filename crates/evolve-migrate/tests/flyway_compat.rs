//! evolve-migrate against the real Flyway. Checksums and history rows: a corpus of files
//! covering the edge cases of line endings, encodings and sizes, applied by
//! Flyway to one database and by evolve to another; evolve's checksum of
//! every file equals the one Flyway stores, and the rows evolve writes equal
//! Flyway's column by column.

mod flyway;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use evolve_migrate::{ApplyOptions, BuiltIns, MigrationSet, Options, Placeholders, Symlinks};
use tokio_postgres::Client;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let long_line = format!("SELECT '{}';\n", "x".repeat(200_000));
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("V1__bom.sql", b"\xEF\xBB\xBFCREATE TABLE bom (id int);\n".to_vec()),
        (
            "V2__crlf.sql",
            b"CREATE TABLE crlf (id int);\r\nINSERT INTO crlf VALUES (1);\r\n".to_vec(),
        ),
        ("V3__cr_only.sql", b"SELECT 1;\rSELECT 2;\r".to_vec()),
        (
            "V4__mixed_endings.sql",
            b"SELECT 1;\r\nSELECT 2;\nSELECT 3;\rSELECT 4;\n\r\n".to_vec(),
        ),
        ("V5__no_final_terminator.sql", b"SELECT 1;\nSELECT 2;".to_vec()),
        (
            "V6__trailing_white_space.sql",
            b"SELECT 1;   \t\n\n  \n\t\n".to_vec(),
        ),
        (
            "V7__non_ascii.sql",
            "-- gr\u{f6}\u{df}e \u{65e5}\u{672c}\u{8a9e} \u{1f680}\nCREATE TABLE \"gr\u{f6}\u{df}e\" (name text DEFAULT '\u{f1}and\u{fa}');\n"
                .as_bytes()
                .to_vec(),
        ),
        ("V8__empty.sql", Vec::new()),
        ("V9__long_line.sql", long_line.into_bytes()),
        (
            "V10__placeholder.sql",
            b"CREATE TABLE ${table_name} (id int);\n".to_vec(),
        ),
        ("V11__only_comment.sql", b"-- nothing to do\n".to_vec()),
        (
            "V12__bom_crlf.sql",
            b"\xEF\xBB\xBFSELECT 1;\r\nSELECT 2;\r\n".to_vec(),
        ),
        ("V13__single_newline.sql", b"\n".to_vec()),
        (
            "V14__line_separator.sql",
            "SELECT 'a\u{2028}b';\n".as_bytes().to_vec(),
        ),
        ("V15__blank_lines.sql", b"\n\n\nSELECT 1;\n\n\n".to_vec()),
        (
            "V16__tabs_and_form_feed.sql",
            b"SELECT\t1;\x0c\nSELECT 2 ;\t\n".to_vec(),
        ),
        ("sub/V17__in_a_subdirectory.sql", b"SELECT 17;\n".to_vec()),
        ("V18__1_dotted_description.sql", b"SELECT 18;\n".to_vec()),
        ("R__repeatable.sql", b"CREATE OR REPLACE VIEW rv AS SELECT 1 AS one;\n".to_vec()),
        (
            "R__repeatable_placeholder.sql",
            b"CREATE OR REPLACE VIEW ${view_name} AS SELECT 2 AS two;\r\n".to_vec(),
        ),
    ];
    files.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
}

fn write_corpus(dir: &Path) {
    for (name, bytes) in corpus() {
        let path = dir.join(&name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write corpus file");
    }
}

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-flyway-compat-{}-{hint}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

type Row = (
    i32,
    Option<String>,
    String,
    String,
    String,
    Option<i32>,
    String,
    bool,
);

async fn history(client: &Client) -> Vec<Row> {
    client
        .query(
            "SELECT installed_rank, version, description, type, script, checksum, installed_by, success
             FROM flyway_schema_history ORDER BY installed_rank",
            &[],
        )
        .await
        .expect("read flyway_schema_history")
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
            )
        })
        .collect()
}

const PLACEHOLDERS: [(&str, &str); 2] = [
    ("flyway.placeholders.table_name", "placeholder_table"),
    ("flyway.placeholders.view_name", "placeholder_view"),
];

fn user_placeholders() -> BTreeMap<String, String> {
    PLACEHOLDERS
        .iter()
        .map(|(k, v)| {
            (
                k.trim_start_matches("flyway.placeholders.").to_string(),
                v.to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn checksums_and_rows_equal_flyways() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("corpus");
    write_corpus(&dir);

    // Flyway applies the corpus.
    let by_flyway = evolve_test::fresh_db("fw_corpus").await;
    flyway.ok(&by_flyway.url, &dir, &PLACEHOLDERS, "migrate");
    let fw_client = evolve_pg::connect(&by_flyway.url, "evolve test")
        .await
        .expect("connect");
    let fw_rows = history(&fw_client).await;
    assert_eq!(fw_rows.len(), corpus().len(), "{fw_rows:#?}");

    // evolve's checksum of each file is the one Flyway stored.
    let placeholders = Placeholders {
        values: user_placeholders(),
        ..Placeholders::default()
    };
    let set = MigrationSet::load_with(
        &dir,
        Symlinks::WithinDir,
        &placeholders,
        &BuiltIns::default(),
    )
    .expect("load corpus");
    let evolve_checksums: Vec<(String, i32)> = set
        .versioned
        .values()
        .chain(set.repeatable.values())
        .map(|f| (f.script.clone(), f.checksum))
        .collect();
    for (script, checksum) in &evolve_checksums {
        let row = fw_rows
            .iter()
            .find(|r| &r.4 == script)
            .unwrap_or_else(|| panic!("flyway recorded no row for {script}: {fw_rows:#?}"));
        assert_eq!(row.5, Some(*checksum), "checksum of {script}");
    }

    // evolve applies the same files to another database: the same rows.
    let by_evolve = evolve_test::fresh_db("ev_corpus").await;
    let mut opts = Options::new(by_evolve.url.clone(), &dir);
    opts.history_table = (None, "flyway_schema_history".into());
    opts.placeholders.values = user_placeholders();
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("evolve applies the corpus");
    let ev_client = evolve_pg::connect(&by_evolve.url, "evolve test")
        .await
        .expect("connect");
    let ev_rows = history(&ev_client).await;
    assert_eq!(ev_rows, fw_rows);

    // Flyway accepts the history evolve wrote.
    let outcomes = flyway.run(&by_evolve.url, &dir, &PLACEHOLDERS, &["validate", "info"]);
    outcomes[0].expect_ok("validate");
    for row in outcomes[1].rows() {
        assert_eq!(row["state"], "SUCCESS", "{row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

async fn table_text(client: &Client, sql: &str) -> Vec<String> {
    let row = client.query_one(sql, &[]).await.expect(sql);
    (0..row.len()).map(|i| row.get::<_, String>(i)).collect()
}

/// Built-in and user placeholders, with Flyway's and with other prefixes
/// and suffixes, hold the values Flyway gives them; a placeholder without
/// a value stops both tools before anything runs.
#[tokio::test]
async fn placeholders_are_replaced_as_flyway_replaces_them() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("placeholders");
    std::fs::write(
        dir.join("V1__built_ins.sql"),
        "CREATE TABLE b AS SELECT '${flyway:filename}'::text f, '${flyway:user}'::text u,\n  '${flyway:database}'::text d, '${flyway:defaultSchema}'::text s,\n  '${flyway:table}'::text t, '${MyName}'::text a, '${myname}'::text a2,\n  '${flyway:workingDirectory}'::text w, '${flyway:timestamp}'::text ts;\n",
    )
    .expect("write");
    let config = [("flyway.placeholders.MyName", "my value")];
    let values: BTreeMap<String, String> = [("MyName".to_string(), "my value".to_string())].into();
    let select = "SELECT f, u, d, s, t, a, a2, w FROM b";

    let by_flyway = evolve_test::fresh_db("fw_ph").await;
    flyway.ok(&by_flyway.url, &dir, &config, "migrate");
    let fw_client = evolve_pg::connect(&by_flyway.url, "t")
        .await
        .expect("connect");
    let by_evolve = evolve_test::fresh_db("ev_ph").await;
    let mut opts = Options::new(by_evolve.url.clone(), &dir);
    opts.history_table = (None, "flyway_schema_history".into());
    opts.placeholders.values = values.clone();
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    let ev_client = evolve_pg::connect(&by_evolve.url, "t")
        .await
        .expect("connect");
    let fw_values = table_text(&fw_client, select).await;
    let ev_values = table_text(&ev_client, select).await;
    // Only the database names differ.
    assert_eq!(fw_values[2], by_flyway.name);
    assert_eq!(ev_values[2], by_evolve.name);
    let strip = |mut v: Vec<String>| {
        v.remove(2);
        v
    };
    assert_eq!(strip(ev_values), strip(fw_values));
    let ts = table_text(&ev_client, "SELECT ts FROM b").await.remove(0);
    assert_eq!(ts.len(), "2026-01-01 00:00:00".len(), "{ts}");
    // Checksums of both (before replacement, as for every versioned file).
    assert_eq!(history(&ev_client).await, history(&fw_client).await);

    // Another prefix and suffix; a missing placeholder on line 3.
    std::fs::write(
        dir.join("V2__prefix.sql"),
        "CREATE TABLE #[MyName_t] (id int);\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("V3__missing.sql"),
        "SELECT 1;\n-- the next line lacks a value\nSELECT '#[nope]';\n",
    )
    .expect("write");
    let config = [
        ("flyway.placeholders.MyName_t", "prefixed"),
        ("flyway.placeholderPrefix", "#["),
        ("flyway.placeholderSuffix", "]"),
        ("flyway.placeholders.MyName", "my value"),
    ];
    let outcome = flyway
        .run(&by_flyway.url, &dir, &config, &["migrate"])
        .remove(0);
    assert!(
        !outcome.ok() && outcome.error().contains("#[nope]"),
        "{}",
        outcome.error()
    );
    opts.placeholders.prefix = "#[".into();
    opts.placeholders.suffix = "]".into();
    opts.placeholders
        .values
        .insert("MyName_t".into(), "prefixed".into());
    let err = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("a missing placeholder fails")
        .to_string();
    assert!(
        err.starts_with("migration V3__missing.sql: line 3: placeholder #[nope] has no value, so nothing was applied;"),
        "{err}"
    );
    assert_eq!(history(&ev_client).await.len(), 1, "nothing was applied");
    // With a value, both apply V2 and V3 alike.
    std::fs::write(
        dir.join("V3__missing.sql"),
        "SELECT 1;\n-- now it has one\nSELECT '#[nope]';\n",
    )
    .expect("write");
    opts.placeholders.values.insert("nope".into(), "x".into());
    let mut config = config.to_vec();
    config.push(("flyway.placeholders.nope", "x"));
    flyway.ok(&by_flyway.url, &dir, &config, "migrate");
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    let n: i64 = ev_client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'prefixed'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);

    // Replacement switched off: the text stays as it is in both.
    std::fs::write(
        dir.join("V4__off.sql"),
        "CREATE TABLE off AS SELECT '#[not_replaced]'::text v;\n",
    )
    .expect("write");
    config.push(("flyway.placeholderReplacement", "false"));
    flyway.ok(&by_flyway.url, &dir, &config, "migrate");
    opts.placeholders.replace = false;
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    assert_eq!(
        table_text(&ev_client, "SELECT v FROM off").await,
        table_text(&fw_client, "SELECT v FROM off").await
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A repeatable migration runs again when a placeholder's value changes,
/// in both tools (its checksum is of the replaced text).
#[tokio::test]
async fn a_new_placeholder_value_runs_a_repeatable_migration_again() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("repeatable_ph");
    std::fs::write(
        dir.join("R__v.sql"),
        "CREATE OR REPLACE VIEW v AS SELECT '${value}'::text AS value;\n",
    )
    .expect("write");
    let db = evolve_test::fresh_db("fw_rph").await;
    flyway.ok(
        &db.url,
        &dir,
        &[("flyway.placeholders.value", "one")],
        "migrate",
    );
    let mut opts = Options::new(db.url.clone(), &dir);
    opts.history_table = (None, "flyway_schema_history".into());
    opts.placeholders
        .values
        .insert("value".into(), "one".into());
    let report = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    assert_eq!(report.applied, 0, "same value: nothing to run");
    opts.placeholders
        .values
        .insert("value".into(), "two".into());
    let report = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    assert_eq!(report.applied, 1);
    let outcomes = flyway.run(
        &db.url,
        &dir,
        &[("flyway.placeholders.value", "two")],
        &["validate", "info"],
    );
    outcomes[0].expect_ok("validate");
    let states: Vec<String> = outcomes[1]
        .rows()
        .iter()
        .map(|r| r["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states, ["SUPERSEDED", "SUCCESS"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flyway's Java-based migrations in the history are applied and never
/// run again; a failed one is not repaired; the history of Flyway 4 and
/// older (another column set) is refused with the difference named.
#[tokio::test]
async fn java_migrations_and_other_column_sets() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("java");
    std::fs::write(dir.join("V1__one.sql"), "CREATE TABLE one (id int);\n").expect("write");
    let db = evolve_test::fresh_db("fw_java").await;
    flyway.ok(&db.url, &dir, &[], "migrate");
    let client = evolve_pg::connect(&db.url, "t").await.expect("connect");
    client
        .batch_execute(
            "INSERT INTO flyway_schema_history (installed_rank, version, description, type, script, checksum, installed_by, execution_time, success)
             VALUES (2, '2', 'java step', 'JDBC', 'db.migration.V2__java_step', NULL, 'postgres', 3, true)",
        )
        .await
        .expect("insert a Java migration's row");
    std::fs::write(dir.join("V3__three.sql"), "CREATE TABLE three (id int);\n").expect("write");
    let mut opts = Options::new(db.url.clone(), &dir);
    opts.history_table = (None, "flyway_schema_history".into());
    let status = evolve_migrate::status(&opts).await.expect("status");
    let java = status
        .migrations
        .iter()
        .find(|m| m.version.as_deref() == Some("2"))
        .expect("the Java migration is listed");
    assert_eq!(java.state, evolve_migrate::State::Applied);
    assert!(
        java.note
            .as_deref()
            .unwrap_or("")
            .contains("Java-based migration (type JDBC)"),
        "{java:?}"
    );
    let report = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    assert_eq!(report.applied, 1, "only V3 runs");
    // (validate fails on pending files, as Flyway's does: after apply.)
    evolve_migrate::validate(&opts)
        .await
        .expect("a Java migration is valid");
    let changed = evolve_migrate::repair(&opts, &mut |_| {})
        .await
        .expect("repair")
        .changed;
    assert_eq!(changed, 0, "repair leaves the Java migration alone");
    client
        .batch_execute("UPDATE flyway_schema_history SET success = false WHERE installed_rank = 2")
        .await
        .expect("fail it");
    let err = evolve_migrate::repair(&opts, &mut |_| {})
        .await
        .expect_err("refused")
        .to_string();
    assert!(err.contains("db.migration.V2__java_step is a failed Java-based migration, which evolve cannot repair"), "{err}");

    // Flyway 4's column set.
    client
        .batch_execute(
            "CREATE TABLE schema_version (version_rank INT NOT NULL, installed_rank INT NOT NULL, version VARCHAR(50) NOT NULL,
               description VARCHAR(200) NOT NULL, type VARCHAR(20) NOT NULL, script VARCHAR(1000) NOT NULL, checksum INT,
               installed_by VARCHAR(100) NOT NULL, installed_on TIMESTAMP NOT NULL DEFAULT now(), execution_time INT NOT NULL,
               success BOOLEAN NOT NULL)",
        )
        .await
        .expect("create");
    opts.history_table = (None, "schema_version".into());
    let err = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        err.starts_with("history table public.schema_version: has column version_rank (NOT NULL), which the history of Flyway 4 and older has"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every callback file logs its name (and a placeholder) into `cb_log`.
fn write_callbacks(dir: &Path, events: &[&str]) {
    for event in events {
        std::fs::write(
            dir.join(format!("{event}.sql")),
            "CREATE TABLE IF NOT EXISTS cb_log (n serial PRIMARY KEY, event text);\nINSERT INTO cb_log (event) VALUES ('${flyway:filename} ${who}');\n",
        )
        .expect("write callback");
    }
}

async fn callback_log(client: &Client) -> Vec<String> {
    client
        .query("SELECT event FROM cb_log ORDER BY n", &[])
        .await
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .unwrap_or_default()
}

/// The same callbacks run for the same events, in the same order, the
/// same number of times, in Flyway and in evolve; beforeEachMigrate's
/// work rolls back with a failed migration; the histories are identical.
#[tokio::test]
async fn callbacks_run_as_flyway_runs_them() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("callbacks");
    write_callbacks(
        &dir,
        &[
            "beforeMigrate",
            "beforeMigrate__b",
            "beforeMigrate__a",
            "beforeEachMigrate",
            "afterEachMigrate",
            "afterEachMigrateError",
            "afterVersioned",
            "beforeRepeatables",
            "afterMigrateApplied",
            "afterMigrate",
            "afterMigrateError",
            "beforeValidate",
            "afterValidate",
            "beforeRepair",
            "afterRepair",
            "beforeBaseline",
            "afterBaseline",
            "beforeInfo",
            "afterInfo",
        ],
    );
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);\n").expect("write");
    std::fs::write(dir.join("V2__b.sql"), "INSERT INTO a VALUES (2);\n").expect("write");
    std::fs::write(
        dir.join("R__r.sql"),
        "CREATE OR REPLACE VIEW r AS SELECT 1 AS one;\n",
    )
    .expect("write");
    let config = [
        ("flyway.placeholders.who", "someone"),
        ("flyway.baselineVersion", "0"),
    ];
    let failing = dir.join("V3__fails.sql");

    let fw = evolve_test::fresh_db("fw_cb").await;
    let outcomes = flyway.run(&fw.url, &dir, &config, &["baseline", "migrate"]);
    outcomes[0].expect_ok("baseline");
    outcomes[1].expect_ok("migrate");
    std::fs::write(&failing, "SELECT 1/0;\n").expect("write");
    assert!(!flyway.run(&fw.url, &dir, &config, &["migrate"])[0].ok());
    std::fs::remove_file(&failing).expect("rm");
    let outcomes = flyway.run(&fw.url, &dir, &config, &["repair", "info", "validate"]);
    for o in &outcomes {
        o.expect_ok("repair, info, validate");
    }

    let ev = evolve_test::fresh_db("ev_cb").await;
    let mut opts = Options::new(ev.url.clone(), &dir);
    opts.history_table = (None, "flyway_schema_history".into());
    opts.placeholders
        .values
        .insert("who".into(), "someone".into());
    let zero = evolve_core::migration::Version::parse("0").expect("version");
    evolve_migrate::baseline(&opts, &zero, None, &mut |_| {})
        .await
        .expect("baseline");
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    std::fs::write(&failing, "SELECT 1/0;\n").expect("write");
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("V3 fails");
    std::fs::remove_file(&failing).expect("rm");
    evolve_migrate::repair(&opts, &mut |_| {})
        .await
        .expect("repair");
    evolve_migrate::status(&opts).await.expect("status");
    evolve_migrate::validate(&opts).await.expect("validate");

    let fw_client = evolve_pg::connect(&fw.url, "t").await.expect("connect");
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    let fw_log = callback_log(&fw_client).await;
    let ev_log = callback_log(&ev_client).await;
    let expected: Vec<String> = [
        "beforeBaseline",
        "afterBaseline",
        "beforeValidate",
        "afterValidate",
        "beforeMigrate",
        "beforeMigrate__a",
        "beforeMigrate__b",
        "beforeEachMigrate",
        "afterEachMigrate",
        "beforeEachMigrate",
        "afterEachMigrate",
        "afterVersioned",
        "beforeRepeatables",
        "beforeEachMigrate",
        "afterEachMigrate",
        "afterMigrateApplied",
        "afterMigrate",
        // V3 fails: its beforeEachMigrate rolls back with it.
        "beforeValidate",
        "afterValidate",
        "beforeMigrate",
        "beforeMigrate__a",
        "beforeMigrate__b",
        "afterMigrateError",
        "beforeRepair",
        "afterRepair",
        "beforeInfo",
        "afterInfo",
        "beforeValidate",
        "afterValidate",
    ]
    .iter()
    .map(|e| format!("{e}.sql someone"))
    .collect();
    assert_eq!(fw_log, expected);
    assert_eq!(ev_log, fw_log);
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn exists(client: &Client, table: &str) -> bool {
    client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .expect("to_regclass")
        .get(0)
}

/// `group = true` rolls back every pending migration with the one that
/// fails, and `mixed` decides whether a file that mixes statements that
/// cannot run in a transaction with ones that can is refused or run: in
/// both tools alike.
#[tokio::test]
async fn group_and_mixed_as_flyway() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("group");
    std::fs::write(dir.join("V1__t.sql"), "CREATE TABLE g (id int);\n").expect("write");
    std::fs::write(dir.join("V2__ok.sql"), "INSERT INTO g VALUES (1);\n").expect("write");
    std::fs::write(dir.join("V3__fails.sql"), "INSERT INTO g VALUES (1/0);\n").expect("write");
    let mixed_dir = temp_dir("mixed");
    std::fs::write(
        mixed_dir.join("V1__mixed.sql"),
        "CREATE TABLE m (id int);\nCREATE INDEX CONCURRENTLY m_i ON m (id);\n",
    )
    .expect("write");

    let fw = evolve_test::fresh_db("fw_group").await;
    let ev = evolve_test::fresh_db("ev_group").await;
    let fw_client = evolve_pg::connect(&fw.url, "t").await.expect("connect");
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    let mut opts = Options::new(ev.url.clone(), &dir);
    opts.history_table = (None, "flyway_schema_history".into());

    // group: nothing of V1..V3 stays.
    assert!(!flyway.run(&fw.url, &dir, &[("flyway.group", "true")], &["migrate"])[0].ok());
    let group = ApplyOptions {
        group: true,
        ..ApplyOptions::default()
    };
    let err = evolve_migrate::apply(&opts, &group, &mut |_| {})
        .await
        .expect_err("V3 fails")
        .to_string();
    assert!(
        err.contains("none of the pending migrations was applied"),
        "{err}"
    );
    assert!(!exists(&fw_client, "g").await);
    assert!(!exists(&ev_client, "g").await);
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    assert!(history(&ev_client).await.is_empty());

    // Without group, V1 and V2 stay.
    assert!(!flyway.run(&fw.url, &dir, &[], &["migrate"])[0].ok());
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("V3 fails");
    assert!(exists(&ev_client, "g").await);
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    assert_eq!(history(&ev_client).await.len(), 2);

    // mixed = false refuses the mixed file, mixed = true applies it.
    let fw = evolve_test::fresh_db("fw_mixed").await;
    let ev = evolve_test::fresh_db("ev_mixed").await;
    let fw_client = evolve_pg::connect(&fw.url, "t").await.expect("connect");
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    let mut opts = Options::new(ev.url.clone(), &mixed_dir);
    opts.history_table = (None, "flyway_schema_history".into());
    let outcomes = flyway.run(&fw.url, &mixed_dir, &[], &["migrate"]);
    assert!(!outcomes[0].ok());
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("mixed = false refuses it");
    assert!(!exists(&fw_client, "m").await);
    assert!(!exists(&ev_client, "m").await);
    // Flyway's transactional lock would make its own CREATE INDEX
    // CONCURRENTLY wait for it forever.
    flyway.ok(
        &fw.url,
        &mixed_dir,
        &[
            ("flyway.mixed", "true"),
            ("flyway.postgresql.transactional.lock", "false"),
        ],
        "migrate",
    );
    let mixed = ApplyOptions {
        mixed: true,
        ..ApplyOptions::default()
    };
    evolve_migrate::apply(&opts, &mixed, &mut |_| {})
        .await
        .expect("mixed = true applies it");
    assert!(exists(&ev_client, "m_i").await);
    assert!(exists(&fw_client, "m_i").await);
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&mixed_dir);
}

/// Options of evolve for `dir` on `url`, with Flyway's history table.
fn flyway_opts(url: &str, dir: &Path) -> Options {
    let mut opts = Options::new(url.to_string(), dir);
    opts.history_table = (None, "flyway_schema_history".into());
    opts
}

/// `(script, state)` of every row of Flyway's `info`.
fn flyway_states(outcome: &flyway::Outcome) -> Vec<(String, String)> {
    outcome
        .expect_ok("info")
        .rows()
        .iter()
        .map(|r| {
            (
                r["script"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `(script, state)` of evolve's `status`, with Flyway's names of the
/// states.
async fn evolve_states(opts: &Options) -> Vec<(String, String)> {
    use evolve_migrate::State;
    let mut out: Vec<(String, String)> = evolve_migrate::status(opts)
        .await
        .expect("status")
        .migrations
        .into_iter()
        .map(|m| {
            let state = match m.state {
                State::Applied => "SUCCESS",
                State::Future => "FUTURE_SUCCESS",
                State::MissingFile => "MISSING_SUCCESS",
                State::Pending => "PENDING",
                State::IgnoredOutOfOrder => "IGNORED",
                other => other.as_str(),
            };
            (m.script, state.to_string())
        })
        .collect();
    // Flyway lists by version, repeatable migrations last; so does evolve.
    out.sort_by_key(|(script, _)| script.starts_with('R'));
    out
}

/// A script configuration file beside a callback is read as Flyway reads
/// it: `executeInTransaction=false` runs the callback outside a
/// transaction, so its statements before a failing one stay;
/// `placeholderReplacement=false` leaves its placeholders. A callback
/// that fails in its transaction names the line of the failing statement,
/// as Flyway does, and rolls back in both tools.
#[tokio::test]
async fn callback_script_configuration_as_flyway() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("callback_conf");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);\n").expect("write");
    std::fs::write(
        dir.join("beforeMigrate.sql"),
        "CREATE TABLE IF NOT EXISTS cb_a (id int);\nSELECT 1/0;\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("beforeMigrate.sql.conf"),
        "executeInTransaction=false\n",
    )
    .expect("write");
    let fw = evolve_test::fresh_db("fw_cbconf").await;
    let ev = evolve_test::fresh_db("ev_cbconf").await;
    let fw_client = evolve_pg::connect(&fw.url, "t").await.expect("connect");
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    let opts = flyway_opts(&ev.url, &dir);
    let apply =
        || async { evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {}).await };

    // Outside a transaction: cb_a stays although the callback failed.
    let outcome = flyway.run(&fw.url, &dir, &[], &["migrate"]).remove(0);
    assert!(
        !outcome.ok() && outcome.error().contains("Line       : 2"),
        "{}",
        outcome.error()
    );
    let err = apply().await.expect_err("the callback fails").to_string();
    assert_eq!(
        err,
        "callback beforeMigrate.sql failed at line 2, column 1: ERROR 22012: division by zero\n  it runs outside a transaction: its statements before statement 2 stay applied; fix it and run again"
    );
    assert!(exists(&fw_client, "cb_a").await);
    assert!(exists(&ev_client, "cb_a").await);

    // In a transaction (no configuration file): rolled back, line 2 named.
    std::fs::remove_file(dir.join("beforeMigrate.sql.conf")).expect("rm");
    std::fs::write(
        dir.join("beforeMigrate.sql"),
        "CREATE TABLE cb_b (id int);\nSELECT 1/0;\n",
    )
    .expect("write");
    let outcome = flyway.run(&fw.url, &dir, &[], &["migrate"]).remove(0);
    assert!(
        !outcome.ok() && outcome.error().contains("Line       : 2"),
        "{}",
        outcome.error()
    );
    let err = apply().await.expect_err("the callback fails").to_string();
    assert_eq!(
        err,
        "callback beforeMigrate.sql failed at line 2, column 1: ERROR 22012: division by zero\n  its transaction was rolled back; fix it and run again"
    );
    assert!(!exists(&fw_client, "cb_b").await);
    assert!(!exists(&ev_client, "cb_b").await);

    // placeholderReplacement=false: the text stays as written.
    std::fs::remove_file(dir.join("beforeMigrate.sql")).expect("rm");
    std::fs::write(
        dir.join("afterMigrate.sql"),
        "CREATE TABLE kept AS SELECT '${not_replaced}'::text AS v;\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("afterMigrate.sql.conf"),
        "placeholderReplacement=false\n",
    )
    .expect("write");
    flyway.ok(&fw.url, &dir, &[], "migrate");
    apply().await.expect("apply");
    let select = "SELECT v FROM kept";
    assert_eq!(table_text(&fw_client, select).await, ["${not_replaced}"]);
    assert_eq!(
        table_text(&ev_client, select).await,
        table_text(&fw_client, select).await
    );
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key Flyway does not know in a script configuration file (a misspelt
/// `executeInTransaction`) stops both tools before anything runs.
#[tokio::test]
async fn an_unknown_script_configuration_key_is_refused_as_in_flyway() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("conf_key");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);\n").expect("write");
    std::fs::write(dir.join("V2__b.sql"), "CREATE TABLE b (id int);\n").expect("write");
    std::fs::write(dir.join("V2__b.sql.conf"), "executeInTranscation=false\n").expect("write");
    let fw = evolve_test::fresh_db("fw_confkey").await;
    let ev = evolve_test::fresh_db("ev_confkey").await;
    let outcome = flyway.run(&fw.url, &dir, &[], &["migrate"]).remove(0);
    assert_eq!(
        outcome.error(),
        "Unknown configuration property: executeInTranscation. Please check your script config files"
    );
    let err = evolve_migrate::apply(
        &flyway_opts(&ev.url, &dir),
        &ApplyOptions::default(),
        &mut |_| {},
    )
    .await
    .expect_err("refused")
    .to_string();
    assert_eq!(
        err,
        "migration V2__b.sql.conf: executeInTranscation is not a script configuration setting (Flyway refuses it too); correct it to executeInTransaction, placeholderReplacement or encoding, or remove it"
    );
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    assert!(!exists(&ev_client, "a").await, "nothing ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without any migration file, Flyway's `info` says FUTURE_SUCCESS of
/// every applied version (and MISSING_SUCCESS of a repeatable one), and so
/// does evolve's `status`; validate fails on the repeatable one only. A
/// location that does not exist reads as empty in both (Flyway logs it),
/// unless failOnMissingLocations.
#[tokio::test]
async fn without_files_applied_versions_are_future_as_in_flyway() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("no_files");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);\n").expect("write");
    std::fs::write(dir.join("V2.sql"), "CREATE TABLE b (id int);\n").expect("write");
    std::fs::write(
        dir.join("R__v.sql"),
        "CREATE OR REPLACE VIEW v AS SELECT 1 AS one;\n",
    )
    .expect("write");
    let fw = evolve_test::fresh_db("fw_nofiles").await;
    let ev = evolve_test::fresh_db("ev_nofiles").await;
    flyway.ok(&fw.url, &dir, &[], "migrate");
    let mut opts = flyway_opts(&ev.url, &dir);
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply");
    for name in ["V1__a.sql", "V2.sql", "R__v.sql"] {
        std::fs::remove_file(dir.join(name)).expect("rm");
    }
    let expected = [
        ("V1__a.sql", "FUTURE_SUCCESS"),
        ("V2.sql", "FUTURE_SUCCESS"),
        ("R__v.sql", "MISSING_SUCCESS"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    let missing = "migration R__v.sql was applied but its file is missing; restore it, run 'evolve migrate repair' to mark it deleted, or set ignoreMigrationPatterns = *:missing";
    for exists in [true, false] {
        if !exists {
            std::fs::remove_dir(&dir).expect("rmdir");
        }
        let outcomes = flyway.run(&fw.url, &dir, &[], &["info", "validate"]);
        assert_eq!(
            flyway_states(&outcomes[0]),
            expected,
            "directory exists: {exists}"
        );
        assert_eq!(
            outcomes[1].error(),
            "Detected applied migration not resolved locally: v.\nIf you removed this migration intentionally, run repair to mark the migration as deleted."
        );
        assert_eq!(
            evolve_states(&opts).await,
            expected,
            "directory exists: {exists}"
        );
        let err = evolve_migrate::validate(&opts)
            .await
            .expect_err("the repeatable is missing")
            .to_string();
        assert_eq!(err, missing);
    }
    let fail = [("flyway.failOnMissingLocations", "true")];
    let outcome = flyway.run(&fw.url, &dir, &fail, &["info"]).remove(0);
    assert!(
        outcome
            .error()
            .starts_with("Failed to find filesystem location"),
        "{}",
        outcome.error()
    );
    opts.fail_on_missing_dir = true;
    let err = evolve_migrate::status(&opts)
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "migrations directory {} cannot be read",
            dir.display()
        )),
        "{err}"
    );
}

/// Flyway's ignoreMigrationPatterns: `*:missing` and `*:ignored` let
/// validate and migrate pass over a deleted file and a file below the
/// applied version (which stays unapplied); a list without `*:future`
/// makes a future migration a failure, as in Flyway.
#[tokio::test]
async fn ignore_migration_patterns_as_flyway() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("ignore_patterns");
    for (name, table) in [("V1__a.sql", "a"), ("V2__b.sql", "b"), ("V3__c.sql", "c")] {
        std::fs::write(dir.join(name), format!("CREATE TABLE {table} (id int);\n")).expect("write");
    }
    let fw = evolve_test::fresh_db("fw_ignore").await;
    let ev = evolve_test::fresh_db("ev_ignore").await;
    flyway.ok(&fw.url, &dir, &[], "migrate");
    let mut opts = flyway_opts(&ev.url, &dir);
    let apply = |opts: &Options| {
        let opts = opts.clone();
        async move { evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {}).await }
    };
    apply(&opts).await.expect("apply");
    std::fs::remove_file(dir.join("V2__b.sql")).expect("rm");
    std::fs::write(dir.join("V2_5__bb.sql"), "CREATE TABLE bb (id int);\n").expect("write");

    // Flyway's default, *:future: both refuse.
    let outcomes = flyway.run(&fw.url, &dir, &[], &["validate", "migrate"]);
    assert!(!outcomes[0].ok() && !outcomes[1].ok());
    let err = apply(&opts).await.expect_err("refused").to_string();
    assert_eq!(
        err,
        "migration V2__b.sql was applied but its file is missing; restore it, run 'evolve migrate repair' to mark it deleted, or set ignoreMigrationPatterns = *:missing\nmigration V2_5__bb.sql is pending but sorts before applied version 3; give it a version above 3, apply it with --out-of-order, or set ignoreMigrationPatterns = *:ignored to leave it"
    );

    // *:missing,*:ignored: both validate and migrate, V2.5 stays pending.
    let patterns = [("flyway.ignoreMigrationPatterns", "*:missing,*:ignored")];
    let config = evolve_migrate::FlywayConfig::from_pairs(
        &patterns.map(|(k, v)| (k.to_string(), v.to_string())),
    );
    config.configure(&mut opts);
    let outcomes = flyway.run(&fw.url, &dir, &patterns, &["validate", "migrate", "info"]);
    outcomes[0].expect_ok("validate");
    outcomes[1].expect_ok("migrate");
    assert_eq!(outcomes[1].0["executed"], 0);
    evolve_migrate::validate(&opts).await.expect("valid");
    assert_eq!(apply(&opts).await.expect("apply").applied, 0);
    // (Flyway lists the ignored file after the applied ones.)
    let sorted = |mut v: Vec<(String, String)>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(evolve_states(&opts).await),
        sorted(flyway_states(&outcomes[2]))
    );
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    let fw_client = evolve_pg::connect(&fw.url, "t").await.expect("connect");
    assert_eq!(history(&ev_client).await, history(&fw_client).await);

    // V3 gone too: it is future, which *:missing,*:ignored does not list.
    std::fs::remove_file(dir.join("V3__c.sql")).expect("rm");
    let outcome = flyway
        .run(&fw.url, &dir, &patterns, &["validate"])
        .remove(0);
    assert!(
        outcome
            .error()
            .starts_with("Detected applied migration not resolved locally: 3."),
        "{}",
        outcome.error()
    );
    let err = evolve_migrate::validate(&opts)
        .await
        .expect_err("future")
        .to_string();
    assert_eq!(
        err,
        "migration V3__c.sql was applied, and its version is above every file's (a future migration), which ignoreMigrationPatterns does not list; add *:future to it (Flyway's default), or restore the newer files"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flyway's `executeInTransaction = false`: every migration and callback
/// runs outside a transaction (a file that mixes `CREATE INDEX
/// CONCURRENTLY` with other statements is no longer refused), so a
/// failing file keeps its statements before the failure and is recorded
/// as failed, in both tools alike.
#[tokio::test]
async fn execute_in_transaction_false_as_flyway() {
    let Some(flyway) = flyway::flyway() else {
        return;
    };
    let dir = temp_dir("no_tx");
    std::fs::write(
        dir.join("V1__a.sql"),
        "CREATE TABLE a (id int);\nCREATE INDEX CONCURRENTLY a_id ON a (id);\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("V2__b.sql"),
        "CREATE TABLE b (id int);\nSELECT 1/0;\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("afterMigrateError.sql"),
        "CREATE TABLE IF NOT EXISTS cb (id int);\nSELECT 1/0;\n",
    )
    .expect("write");
    let fw = evolve_test::fresh_db("fw_notx").await;
    let ev = evolve_test::fresh_db("ev_notx").await;
    let config = [
        ("flyway.executeInTransaction", "false"),
        ("flyway.postgresql.transactional.lock", "false"),
    ];
    let outcome = flyway.run(&fw.url, &dir, &config, &["migrate"]).remove(0);
    assert!(
        outcome
            .error()
            .starts_with("Error while executing afterMigrateError callback"),
        "{}",
        outcome.error()
    );
    let mut opts = flyway_opts(&ev.url, &dir);
    evolve_migrate::FlywayConfig::from_pairs(&[(
        "flyway.executeInTransaction".to_string(),
        "false".to_string(),
    )])
    .configure(&mut opts);
    let err = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("the callback fails")
        .to_string();
    assert!(
        err.starts_with("callback afterMigrateError.sql failed at line 2, column 1: ERROR 22012: division by zero\n  it runs outside a transaction"),
        "{err}"
    );
    let fw_client = evolve_pg::connect(&fw.url, "t").await.expect("connect");
    let ev_client = evolve_pg::connect(&ev.url, "t").await.expect("connect");
    for table in ["a_id", "b", "cb"] {
        assert!(exists(&fw_client, table).await, "{table} in Flyway's");
        assert!(exists(&ev_client, table).await, "{table} in evolve's");
    }
    assert_eq!(history(&ev_client).await, history(&fw_client).await);
    let _ = std::fs::remove_dir_all(&dir);
}
