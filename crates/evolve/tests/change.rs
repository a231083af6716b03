//! `evolve change` as users run it: each generated sequence applied phase
//! by phase with `evolve migrate apply --until-phase` while a writer of the
//! old shape and a writer of the new shape run (the old one stops before
//! the contract step, as an application redeployed), counting failed
//! statements, comparing the data at the end and printing the longest
//! statement either writer waited for; the backfill hand-off; bad input.

mod backfill_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use backfill_support::{assert_refused, connect, evolve, text};

/// A directory of migration files, removed at the end.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "evolve-change-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How one application version writes: `insert` and `update` take the row
/// id as `$1` (int8) and the value as `$2` (text, maybe NULL).
#[derive(Clone, Copy)]
struct Shape {
    insert: &'static str,
    update: &'static str,
    /// The value this writer writes for the `n`th statement of row `id`;
    /// `late` once the switch step is applied.
    value: fn(id: i64, n: u64, late: bool) -> Option<String>,
}

#[derive(Debug, Default)]
struct Stats {
    ok: u64,
    failed: u64,
    errors: Vec<String>,
    longest: Duration,
    /// What it last wrote per row.
    wrote: BTreeMap<i64, Option<String>>,
}

struct Writer {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Stats>,
}

/// Starts a writer on rows `own` (updates) and new ids from `first_new`.
fn writer(url: &str, shape: Shape, own: Vec<i64>, first_new: i64, late: Arc<AtomicBool>) -> Writer {
    let stop = Arc::new(AtomicBool::new(false));
    let url = url.to_string();
    let flag = stop.clone();
    let handle = tokio::spawn(async move {
        let c = connect(&url).await;
        let insert = c.prepare(shape.insert).await.expect("prepare insert");
        let update = c.prepare(shape.update).await.expect("prepare update");
        let mut stats = Stats::default();
        let mut rows = own;
        let mut next = first_new;
        let mut n = 0u64;
        while !flag.load(Ordering::Relaxed) {
            n += 1;
            let (stmt, id) = if n.is_multiple_of(3) || rows.is_empty() {
                next += 1;
                (&insert, next)
            } else {
                (&update, rows[(n as usize * 7919) % rows.len()])
            };
            let value = (shape.value)(id, n, late.load(Ordering::Relaxed));
            let started = Instant::now();
            let result = c.execute(stmt, &[&id, &value]).await;
            stats.longest = stats.longest.max(started.elapsed());
            match result {
                Ok(_) => {
                    stats.ok += 1;
                    if std::ptr::eq(stmt, &insert) {
                        rows.push(id);
                    }
                    stats.wrote.insert(id, value);
                }
                Err(e) => {
                    stats.failed += 1;
                    if stats.errors.len() < 5 {
                        stats.errors.push(format!("{e:?}"));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stats
    });
    Writer { stop, handle }
}

impl Writer {
    async fn finish(self) -> Stats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.await.expect("writer task")
    }
}

/// `evolve migrate baseline --version 0`: the tables were made outside
/// migrations, and `apply` (like Flyway) refuses a non-empty schema
/// without history; every file still runs.
fn adopt(url: &str) {
    let out = evolve(url, &["migrate", "baseline", "--version", "0"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn apply(url: &str, dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["migrate", "apply", "--dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = evolve(url, &args);
    assert!(
        out.status.success(),
        "apply {extra:?}\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A change run end to end under both writers.
struct Scenario {
    name: &'static str,
    setup: &'static str,
    change: &'static [&'static str],
    old: Shape,
    new: Shape,
    /// `SELECT id, value::text` over the final table.
    final_values: &'static str,
    /// What a written value reads as at the end.
    expect: fn(Option<String>) -> Option<String>,
    /// Files expected, by phase.
    phases: &'static [&'static str],
    /// Materialized views of `setup` that read the changed column.
    matviews: &'static [&'static str],
    /// Queries through the views and materialized views of `setup` that
    /// must return true after every phase, run in one repeatable-read
    /// transaction after each of `matviews` was read as `apply` left it
    /// and refreshed.
    readers: &'static [&'static str],
}

/// Reads every materialized view as the last phase left it (populated),
/// refreshes it and checks the scenario's readers in one snapshot.
async fn check_readers(c: &tokio_postgres::Client, s: &Scenario, after: &str) {
    if s.readers.is_empty() {
        return;
    }
    for m in s.matviews {
        c.query_one(&format!("SELECT count(*) FROM {m}"), &[])
            .await
            .unwrap_or_else(|e| panic!("reading {m} after the {after} step: {e:?}"));
    }
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    for m in s.matviews {
        c.batch_execute(&format!("REFRESH MATERIALIZED VIEW {m}"))
            .await
            .unwrap_or_else(|e| panic!("refreshing {m} after the {after} step: {e:?}"));
    }
    for q in s.readers {
        let ok: bool = c
            .query_one(*q, &[])
            .await
            .unwrap_or_else(|e| panic!("{q} after the {after} step: {e:?}"))
            .get(0);
        assert!(ok, "{q} is false after the {after} step");
    }
    c.batch_execute("COMMIT").await.unwrap();
}

async fn run(s: Scenario) {
    let db = evolve_test::fresh_db(s.name).await;
    let c = connect(&db.url).await;
    c.batch_execute(s.setup).await.expect("setup");
    adopt(&db.url);
    let dir = TempDir::new();
    let d = dir.path().to_str().unwrap();
    // An ordinary migration before the change: numbering continues after it.
    std::fs::write(dir.path().join("V1__start.sql"), "SELECT 1;\n").unwrap();
    apply(&db.url, dir.path(), &[]);

    let mut args: Vec<&str> = vec!["change"];
    args.extend_from_slice(s.change);
    args.extend_from_slice(&["--dir", d]);
    let out = evolve(&db.url, &args);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "V1__start.sql")
        .collect();
    names.sort_by_key(|n| n[1..n.find("__").unwrap()].parse::<u32>().unwrap());
    assert_eq!(names.len(), s.phases.len(), "{names:?}");
    for (i, (name, phase)) in names.iter().zip(s.phases).enumerate() {
        assert!(name.starts_with(&format!("V{}__", i + 2)), "{name}");
        let body = std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(
            body.starts_with(&format!("-- evolve:phase {phase}\n")),
            "{name}:\n{body}"
        );
        assert!(body.contains("Compatible"), "{name}:\n{body}");
    }

    // status shows the phases.
    let out = evolve(
        &db.url,
        &["migrate", "status", "--dir", d, "--format", "json"],
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases: Vec<String> = status["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["phase"].as_str().map(String::from))
        .collect();
    assert_eq!(phases, s.phases);

    let seed: Vec<i64> = (1..=400).collect();
    let late = Arc::new(AtomicBool::new(false));
    let old_rows: Vec<i64> = seed.iter().copied().filter(|i| i % 2 == 1).collect();
    let new_rows: Vec<i64> = seed.iter().copied().filter(|i| i % 2 == 0).collect();
    let old = writer(&db.url, s.old, old_rows, 1_000_000, late.clone());
    tokio::time::sleep(Duration::from_millis(100)).await;

    check_readers(&c, &s, "start").await;
    let out = apply(&db.url, dir.path(), &["--until-phase", "expand"]);
    assert!(
        out.contains("stopped before") || !s.phases[1..].contains(&"expand"),
        "{out}"
    );
    check_readers(&c, &s, "expand").await;
    let new = writer(&db.url, s.new, new_rows, 2_000_000, late.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    if s.phases.contains(&"backfill") {
        apply(
            &db.url,
            dir.path(),
            &["--until-phase", "backfill", "--wait-backfill"],
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        check_readers(&c, &s, "backfill").await;
    }
    apply(&db.url, dir.path(), &["--phase", "switch"]);
    late.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    check_readers(&c, &s, "switch").await;
    // The old application is redeployed before the contract step.
    let old = old.finish().await;
    apply(&db.url, dir.path(), &["--until-phase", "contract"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    check_readers(&c, &s, "contract").await;
    let new = new.finish().await;

    let out = evolve(
        &db.url,
        &["migrate", "status", "--dir", d, "--format", "json"],
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        status["migrations"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["state"] == "applied" || m["type"] == "baseline"),
        "{status}"
    );

    println!(
        "{}: old-shape writer {} ok / {} failed, new-shape writer {} ok / {} failed; longest statement waited {:?} (old) and {:?} (new)",
        s.name, old.ok, old.failed, new.ok, new.failed, old.longest, new.longest
    );
    assert_eq!(old.failed, 0, "old-shape writer failed: {:?}", old.errors);
    assert_eq!(new.failed, 0, "new-shape writer failed: {:?}", new.errors);
    assert!(
        old.ok > 20 && new.ok > 20,
        "writers ran: {} {}",
        old.ok,
        new.ok
    );

    let rows: BTreeMap<i64, Option<String>> = c
        .query(s.final_values, &[])
        .await
        .expect("final values")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut checked = 0;
    for (id, value) in old.wrote.iter().chain(new.wrote.iter()) {
        assert_eq!(
            rows.get(id),
            Some(&(s.expect)(value.clone())),
            "row {id} at the end"
        );
        checked += 1;
    }
    assert!(checked > 40);
}

fn text_value(id: i64, n: u64, _late: bool) -> Option<String> {
    Some(format!("v{id}-{n}"))
}

#[tokio::test]
async fn rename_column_under_old_and_new_writers() {
    run(Scenario {
        name: "chg_rename",
        setup:
            "CREATE TABLE users (id int8 PRIMARY KEY, name text NOT NULL DEFAULT 'anon', age int);
                INSERT INTO users SELECT i, 'seed' || i, i FROM generate_series(1, 400) i;",
        change: &["rename-column", "users", "name", "full_name"],
        old: Shape {
            insert: "INSERT INTO users (id, name) VALUES ($1, $2)",
            update: "UPDATE users SET name = $2 WHERE id = $1",
            value: text_value,
        },
        new: Shape {
            insert: "INSERT INTO users (id, full_name) VALUES ($1, $2)",
            update: "UPDATE users SET full_name = $2 WHERE id = $1",
            value: text_value,
        },
        final_values: "SELECT id, full_name FROM users",
        expect: |v| v,
        phases: &["expand", "backfill", "switch", "contract"],
        matviews: &[],
        readers: &[],
    })
    .await;
}

#[tokio::test]
async fn change_type_under_old_and_new_writers() {
    run(Scenario {
        name: "chg_type",
        // A view, a view over it and a materialized view (with an index)
        // read the column: the switch rebuilds them onto the new column.
        setup: "CREATE TABLE items (id int8 PRIMARY KEY, qty int4 NOT NULL DEFAULT 0);
                INSERT INTO items SELECT i, i FROM generate_series(1, 400) i;
                CREATE VIEW items_v AS SELECT id, qty FROM items;
                CREATE VIEW items_total AS SELECT count(*) AS n, sum(qty) AS total FROM items_v;
                CREATE MATERIALIZED VIEW items_m AS SELECT id, qty, qty * 2 AS twice FROM items;
                CREATE UNIQUE INDEX items_m_id ON items_m (id);",
        change: &["change-type", "items", "qty", "bigint"],
        old: Shape {
            insert: "INSERT INTO items (id, qty) VALUES ($1, $2::text::int4)",
            update: "UPDATE items SET qty = $2::text::int4 WHERE id = $1",
            value: |id, n, _| Some(((id + n as i64) % 1_000_000).to_string()),
        },
        new: Shape {
            insert: "INSERT INTO items (id, qty) VALUES ($1, $2::text::int8)",
            update: "UPDATE items SET qty = $2::text::int8 WHERE id = $1",
            // Values beyond int4 once the column is bigint.
            value: |id, n, late| {
                Some((if late { 5_000_000_000 } else { 0 } + id + n as i64).to_string())
            },
        },
        final_values: "SELECT id, qty::text FROM items",
        expect: |v| v,
        phases: &["expand", "backfill", "switch", "contract"],
        matviews: &["items_m"],
        // Values beyond int4 from the switch on: equal only when the views
        // read the new bigint column.
        readers: &[
            "SELECT (SELECT count(*) FROM items_v v JOIN items i USING (id) WHERE v.qty = i.qty) = (SELECT count(*) FROM items)",
            "SELECT (SELECT n FROM items_total) = (SELECT count(*) FROM items) AND (SELECT total FROM items_total) = (SELECT sum(qty) FROM items)",
            "SELECT (SELECT count(*) FROM items_m m JOIN items i USING (id) WHERE m.qty = i.qty AND m.twice = i.qty * 2) = (SELECT count(*) FROM items)",
            "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'items_m_id')",
        ],
    })
    .await;
}

#[tokio::test]
async fn set_not_null_under_old_and_new_writers() {
    run(Scenario {
        name: "chg_notnull",
        setup: "CREATE TABLE notes (id int8 PRIMARY KEY, body text);
                INSERT INTO notes SELECT i, CASE WHEN i % 3 = 0 THEN NULL ELSE 'b' || i END FROM generate_series(1, 400) i;
                CREATE VIEW notes_v AS SELECT id, body FROM notes;
                CREATE MATERIALIZED VIEW notes_m AS SELECT id, body, length(body) AS len FROM notes;",
        change: &["set-not-null", "notes", "body", "--default", "'none'"],
        old: Shape {
            insert: "INSERT INTO notes (id, body) VALUES ($1, $2)",
            update: "UPDATE notes SET body = $2 WHERE id = $1",
            value: |id, n, _| (n % 2 == 0).then(|| format!("o{id}-{n}")),
        },
        new: Shape {
            insert: "INSERT INTO notes (id, body) VALUES ($1, $2)",
            update: "UPDATE notes SET body = $2 WHERE id = $1",
            value: text_value,
        },
        final_values: "SELECT id, body FROM notes",
        expect: |v| Some(v.unwrap_or_else(|| "none".into())),
        phases: &["expand", "backfill", "switch", "contract"],
        matviews: &["notes_m"],
        readers: &[
            "SELECT (SELECT count(*) FROM notes_v v JOIN notes n USING (id) WHERE v.body IS NOT DISTINCT FROM n.body) = (SELECT count(*) FROM notes)",
            "SELECT (SELECT count(*) FROM notes_m m JOIN notes n USING (id) WHERE m.body IS NOT DISTINCT FROM n.body) = (SELECT count(*) FROM notes)",
        ],
    })
    .await;
}

#[tokio::test]
async fn split_column_under_old_and_new_writers() {
    run(Scenario {
        name: "chg_split",
        // A view reads the column (and a view reads that one): the switch
        // redefines it over the merge of the new columns, so the contract
        // can drop the column.
        setup: "CREATE TABLE people (id int8 PRIMARY KEY, name text);
                INSERT INTO people SELECT i, 'f' || i || ' l' || i FROM generate_series(1, 400) i;
                CREATE VIEW people_v AS
                  SELECT p.id, p.name, upper(p.name) AS shout FROM people p WHERE p.name IS NOT NULL;
                CREATE VIEW people_n AS SELECT count(DISTINCT name) AS names FROM people_v;",
        change: &[
            "split-column",
            "people",
            "name",
            "--into",
            "first_name=split_part(name, ' ', 1)",
            "--into",
            "last_name=split_part(name, ' ', 2)",
            "--merge",
            "first_name || ' ' || last_name",
        ],
        old: Shape {
            insert: "INSERT INTO people (id, name) VALUES ($1, $2)",
            update: "UPDATE people SET name = $2 WHERE id = $1",
            value: |id, n, _| Some(format!("of{id} ol{n}")),
        },
        new: Shape {
            insert: "INSERT INTO people (id, first_name, last_name) VALUES ($1, split_part($2, ' ', 1), split_part($2, ' ', 2))",
            update: "UPDATE people SET first_name = split_part($2, ' ', 1), last_name = split_part($2, ' ', 2) WHERE id = $1",
            value: |id, n, _| Some(format!("nf{id} nl{n}")),
        },
        final_values: "SELECT id, first_name || ' ' || last_name FROM people",
        expect: |v| v,
        phases: &["expand", "backfill", "switch", "contract"],
        matviews: &[],
        // The view's name is the table's value in every phase: the old
        // column while it exists, the merge of the new ones after.
        readers: &[
            "SELECT (SELECT count(*) FROM people_v v JOIN people p USING (id)
                      WHERE v.name = coalesce(to_jsonb(p) ->> 'name',
                                              (to_jsonb(p) ->> 'first_name') || ' ' || (to_jsonb(p) ->> 'last_name'))
                        AND v.shout = upper(v.name)) = (SELECT count(*) FROM people)",
            "SELECT (SELECT names FROM people_n) = (SELECT count(DISTINCT name) FROM people_v)",
        ],
    })
    .await;
}

#[tokio::test]
async fn add_foreign_key_under_old_and_new_writers() {
    run(Scenario {
        name: "chg_fk",
        setup: "CREATE TABLE customers (id int8 PRIMARY KEY);
                INSERT INTO customers SELECT generate_series(1, 50);
                CREATE TABLE orders (id int8 PRIMARY KEY, customer_id int8);
                INSERT INTO orders SELECT i, 1 + i % 50 FROM generate_series(1, 400) i;",
        change: &[
            "add-foreign-key",
            "orders",
            "--columns",
            "customer_id",
            "--references",
            "customers",
            "--to",
            "id",
        ],
        old: Shape {
            insert: "INSERT INTO orders (id, customer_id) VALUES ($1, $2::text::int8)",
            update: "UPDATE orders SET customer_id = $2::text::int8 WHERE id = $1",
            value: |id, n, _| Some((1 + (id + n as i64) % 50).to_string()),
        },
        new: Shape {
            insert: "INSERT INTO orders (id, customer_id) VALUES ($1, $2::text::int8)",
            update: "UPDATE orders SET customer_id = $2::text::int8 WHERE id = $1",
            value: |id, n, _| Some((1 + (id * 3 + n as i64) % 50).to_string()),
        },
        final_values: "SELECT id, customer_id::text FROM orders",
        expect: |v| v,
        phases: &["expand", "expand", "switch"],
        matviews: &[],
        readers: &[],
    })
    .await;
}

/// The backfill hand-off: `apply` records the file without running the
/// UPDATE; the switch refuses, naming the job, until `evolve backfill run`
/// (restarted by its name) has finished.
#[tokio::test]
async fn switch_waits_for_the_backfill_job_named_in_the_error() {
    let db = evolve_test::fresh_db("chg_handoff").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE users (id int8 PRIMARY KEY, name text);
         INSERT INTO users SELECT i, 'n' || i FROM generate_series(1, 3000) i;",
    )
    .await
    .unwrap();
    adopt(&db.url);
    let dir = TempDir::new();
    let d = dir.path().to_str().unwrap();
    let out = evolve(
        &db.url,
        &[
            "change",
            "rename-column",
            "users",
            "name",
            "full_name",
            "--dir",
            d,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job = "rename_users_name_to_full_name";
    let out = apply(
        &db.url,
        dir.path(),
        &["--until-phase", "backfill", "--backfill", "defer"],
    );
    assert!(
        out.contains(job) && out.contains("evolve backfill run"),
        "{out}"
    );
    let missing: i64 = c
        .query_one("SELECT count(*) FROM users WHERE full_name IS NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(missing, 3000, "the UPDATE was handed off, not run");

    let out = evolve(
        &db.url,
        &["migrate", "apply", "--dir", d, "--until-phase", "switch"],
    );
    assert_refused(
        &out,
        &[
            &format!("backfill job {job} has not finished"),
            "evolve backfill status",
        ],
    );

    let out = evolve(
        &db.url,
        &[
            "backfill",
            "run",
            "--name",
            job,
            "--table",
            "users",
            "--set",
            "full_name = name",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    apply(&db.url, dir.path(), &["--until-phase", "switch"]);
    let status = evolve(&db.url, &["backfill", "status", job, "--format", "json"]);
    assert!(
        text(&status.stdout).contains("finished"),
        "{}",
        text(&status.stdout)
    );
}

/// The default hand-off starts the job in the background: apply returns at
/// once, and the job finishes on its own.
#[tokio::test]
async fn backfill_starts_in_the_background_and_finishes() {
    let db = evolve_test::fresh_db("chg_background").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE users (id int8 PRIMARY KEY, name text);
         INSERT INTO users SELECT i, 'n' || i FROM generate_series(1, 2000) i;",
    )
    .await
    .unwrap();
    adopt(&db.url);
    let dir = TempDir::new();
    let d = dir.path().to_str().unwrap();
    let out = evolve(
        &db.url,
        &[
            "change",
            "rename-column",
            "users",
            "name",
            "full_name",
            "--dir",
            d,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = apply(&db.url, dir.path(), &["--until-phase", "backfill"]);
    assert!(out.contains("started in the background"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let missing: i64 = c
            .query_one(
                "SELECT count(*) FROM users WHERE full_name IS DISTINCT FROM name",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "background backfill did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    apply(&db.url, dir.path(), &["--until-phase", "contract"]);
}

/// Bad input: one error line naming the object and the way out, exit 1,
/// no file written.
#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let db = evolve_test::fresh_db("chg_bad").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE users (id int8 PRIMARY KEY, name text, n int8, code varchar(20));
         CREATE VIEW user_names AS SELECT id, name FROM users;
         CREATE MATERIALIZED VIEW user_names_m AS SELECT id, name FROM users;",
    )
    .await
    .unwrap();
    let dir = TempDir::new();
    let d = dir.path().to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["rename-column", "nosuch", "a", "b"],
            vec!["table nosuch does not exist"],
        ),
        (
            vec!["rename-column", "users", "nosuch", "b"],
            vec!["column \"nosuch\" of table public.users does not exist"],
        ),
        (
            vec!["change-type", "users", "n", "nosuchtype"],
            vec!["type nosuchtype does not exist"],
        ),
        (
            vec!["change-type", "users", "n", "int4"],
            vec!["can lose data", "--using"],
        ),
        (
            vec!["change-type", "users", "code", "varchar(5)"],
            vec!["can lose data", "--using"],
        ),
        (
            vec!["rename-column", "users", "name", "full_name"],
            vec![
                "view public.user_names",
                "public.users.name",
                "view-compatible path",
                "migration of its own",
            ],
        ),
        (
            vec!["rename-column", "users", "name", "n"],
            vec!["already exists"],
        ),
        (
            vec![
                "split-column",
                "users",
                "name",
                "--into",
                "a=name",
                "--into",
                "b=name",
                "--merge",
                "a",
            ],
            // The view would be redefined over the new columns; the
            // materialized view cannot.
            vec![
                "materialized view public.user_names_m",
                "public.users.name",
                "contract step drops",
                "\"a\", \"b\"",
                "only plain views",
            ],
        ),
    ];
    for (args, parts) in cases {
        let mut all = vec!["change"];
        all.extend_from_slice(&args);
        all.extend_from_slice(&["--dir", d]);
        let out = evolve(&db.url, &all);
        assert_refused(&out, &parts);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?} wrote files"
        );
    }
}
