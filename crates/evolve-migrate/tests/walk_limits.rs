//! The bounds on the walk of a migrations directory: a directory nested
//! deeper than 32 levels, or a walk meeting more than 100,000 entries, is
//! refused with one line naming the path, before anything is applied; at
//! the bound the same directory applies.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use evolve_migrate::{ApplyOptions, ApplyReport, MigrateError, Options};
use tokio_postgres::Client;

static DIRS: AtomicUsize = AtomicUsize::new(0);

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-migrate-walk-{}-{}-{hint}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

async fn apply(url: &str, dir: &Path) -> Result<ApplyReport, MigrateError> {
    let opts = Options::new(url.to_string(), dir);
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {}).await
}

/// Whether the history table and table `table` exist.
async fn made(client: &Client, table: &str) -> (bool, bool) {
    let row = client
        .query_one(
            "SELECT to_regclass('evolve_schema_history') IS NOT NULL, to_regclass($1) IS NOT NULL",
            &[&table],
        )
        .await
        .expect("to_regclass");
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn a_directory_nested_deeper_than_32_levels_is_refused_before_anything_runs() {
    let db = evolve_test::fresh_db("walk_depth").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    let dir = temp_dir("depth");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    let mut level_32 = dir.clone();
    for i in 1..=32 {
        level_32 = level_32.join(format!("d{i}"));
    }
    let level_33 = level_32.join("d33");
    std::fs::create_dir_all(&level_33).expect("mkdir");
    std::fs::write(level_33.join("V2__deep.sql"), "CREATE TABLE deep (id int);").expect("write");

    let message = apply(&db.url, &dir)
        .await
        .expect_err("33 levels are refused")
        .to_string();
    assert_eq!(
        message,
        format!(
            "{} is nested more than 32 directories deep below the migrations directory; flatten it",
            level_33.display()
        )
    );
    assert_eq!(
        made(&client, "a").await,
        (false, false),
        "nothing ran: no history table, no table a"
    );

    // 32 levels are read: both files apply.
    std::fs::rename(level_33.join("V2__deep.sql"), level_32.join("V2__deep.sql")).expect("mv");
    std::fs::remove_dir(&level_33).expect("rmdir");
    let report = apply(&db.url, &dir).await.expect("32 levels apply");
    assert_eq!(report.applied, 2);
    assert_eq!(made(&client, "deep").await, (true, true));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_directory_of_more_than_100_000_entries_is_refused_before_anything_runs() {
    let db = evolve_test::fresh_db("walk_entries").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    let dir = temp_dir("entries");
    std::fs::write(dir.join("V1__a.sql"), "CREATE TABLE a (id int);").expect("write");
    // With V1__a.sql, 100,001 entries: files that are no migrations count
    // too (the walk bounds its own work, not the migrations').
    let sub = dir.join("notes");
    std::fs::create_dir(&sub).expect("mkdir");
    for i in 0..99_999 {
        std::fs::File::create(sub.join(format!("n{i}.txt"))).expect("create");
    }

    let message = apply(&db.url, &dir)
        .await
        .expect_err("100,001 entries are refused")
        .to_string();
    assert_eq!(
        message,
        format!(
            "migrations directory {} holds more than 100000 entries; point --dir at the migrations themselves",
            dir.display()
        )
    );
    assert_eq!(
        made(&client, "a").await,
        (false, false),
        "nothing ran: no history table, no table a"
    );

    // 100,000 entries are read.
    std::fs::remove_file(sub.join("n0.txt")).expect("rm");
    let report = apply(&db.url, &dir).await.expect("100,000 entries apply");
    assert_eq!(report.applied, 1);
    assert_eq!(made(&client, "a").await, (true, true));
    let _ = std::fs::remove_dir_all(dir);
}
