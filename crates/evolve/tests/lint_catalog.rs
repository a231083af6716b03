//! `evolve lint --database-url`: types, NOT NULL checks, sizes and view
//! readers come from a real catalog, and change the verdicts that the files
//! alone cannot decide.

use std::process::Command;

const FILE: &str = "ALTER TABLE orders ALTER COLUMN s TYPE varchar(20);
ALTER TABLE orders ALTER COLUMN n TYPE bigint;
ALTER TABLE orders ALTER COLUMN a SET NOT NULL;
CREATE INDEX fresh_x ON fresh (x);
ALTER TABLE orders RENAME COLUMN n TO m;
";

fn lint(dir: &std::path::Path, url: Option<&str>) -> Vec<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.env_remove("DATABASE_URL")
        .args(["lint", "--format", "json"])
        .arg(dir.join("V9__change.sql"));
    if let Some(url) = url {
        cmd.args(["--database-url", url]);
    }
    let out = cmd.output().expect("run evolve");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{}:{}", f["line"], f["rule"].as_str().unwrap()))
        .collect()
}

/// A fresh database holding `schema`, and a directory holding
/// `V9__change.sql` with `file` (removed when the returned guard drops).
async fn setup(
    name: &str,
    schema: &str,
    file: &str,
) -> (evolve_test::TestDb, tokio_postgres::Client, Dir) {
    let db = evolve_test::fresh_db(name).await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client.batch_execute(schema).await.expect("schema");
    let dir = std::env::temp_dir().join(format!("evolve-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("V9__change.sql"), file).unwrap();
    (db, client, Dir(dir))
}

/// A directory removed on drop.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn the_catalog_decides_rewrites_checks_sizes_and_readers() {
    let (db, _client, dir) = setup(
        "lint_catalog",
        "CREATE TABLE orders (id bigint, s varchar(10), n int, a text);
             INSERT INTO orders VALUES (1, 'x', 1, 'a');
             ALTER TABLE orders ADD CONSTRAINT a_nn CHECK (a IS NOT NULL);
             CREATE VIEW v AS SELECT n FROM orders;
             CREATE TABLE fresh (x bigint);",
        FILE,
    )
    .await;

    // Files alone: the old types are unknown, so is the check, the size and
    // the view.
    assert_eq!(
        lint(&dir.0, None),
        [
            "1:changing-column-type",
            "2:changing-column-type",
            "3:adding-not-nullable-field",
            "4:require-concurrent-index-creation",
            "5:renaming-column",
        ]
    );
    // The catalog: varchar widening is no rewrite, int to bigint is one, the
    // valid check backs SET NOT NULL, the empty table needs no concurrent
    // build, and the view reading n is named.
    assert_eq!(
        lint(&dir.0, Some(&db.url)),
        [
            "2:alter-type-rewrite",
            "5:renaming-column",
            "5:rename-column-used-by-view",
        ]
    );
}

/// A default's volatility comes from `pg_proc`: a STABLE or IMMUTABLE
/// function of the user's fills existing rows without a rewrite, a
/// VOLATILE one (the default for CREATE FUNCTION) rewrites, and so does a
/// volatile built-in. Without the catalog every unknown function is taken
/// as volatile.
#[tokio::test]
async fn function_volatility_decides_whether_a_default_rewrites() {
    let (db, _client, dir) = setup(
        "lint_volatility",
        "CREATE TABLE orders (id bigint);
         INSERT INTO orders VALUES (1);
         CREATE FUNCTION tenant_default() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT 1';
         CREATE FUNCTION fixed_code() RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT ''x''';
         CREATE FUNCTION next_code() RETURNS text LANGUAGE sql AS 'SELECT md5(random()::text)';",
        "ALTER TABLE orders ADD COLUMN tenant bigint DEFAULT tenant_default();
ALTER TABLE orders ADD COLUMN code text DEFAULT public.fixed_code();
ALTER TABLE orders ADD COLUMN next text DEFAULT next_code();
ALTER TABLE orders ADD COLUMN r float8 DEFAULT random();
",
    )
    .await;
    assert_eq!(
        lint(&dir.0, None),
        [
            "1:adding-field-with-default",
            "2:adding-field-with-default",
            "3:adding-field-with-default",
            "4:adding-field-with-default",
        ]
    );
    assert_eq!(
        lint(&dir.0, Some(&db.url)),
        ["3:adding-field-with-default", "4:adding-field-with-default"]
    );
}

/// A partitioned table has no storage of its own (`pg_relation_size` of
/// the parent is 0): its size is its partitions', so an index build on it
/// is not taken for one on an empty table; and CREATE INDEX CONCURRENTLY
/// on it is refused by PostgreSQL, which the lint says before the
/// migration runs. An empty partitioned table still needs no finding.
#[tokio::test]
async fn a_partitioned_table_is_as_large_as_its_partitions() {
    let (db, client, dir) = setup(
        "lint_partitioned",
        "CREATE TABLE events (id bigint, x bigint) PARTITION BY RANGE (id);
             CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (100)
               PARTITION BY RANGE (id);
             CREATE TABLE events_low_a PARTITION OF events_low FOR VALUES FROM (0) TO (50);
             INSERT INTO events SELECT g, g FROM generate_series(0, 49) g;
             CREATE TABLE quiet (id bigint, x bigint) PARTITION BY RANGE (id);
             CREATE TABLE quiet_a PARTITION OF quiet FOR VALUES FROM (0) TO (100);",
        "-- evolve:no-transaction
CREATE INDEX IF NOT EXISTS events_x ON events (x);
CREATE INDEX IF NOT EXISTS quiet_x ON quiet (x);
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_y ON events (x);
",
    )
    .await;
    let found = lint(&dir.0, Some(&db.url));
    assert_eq!(
        found,
        [
            "2:require-concurrent-index-creation",
            "4:concurrent-index-on-partitioned-table",
        ]
    );
    // What the lint says of line 4 is what PostgreSQL does.
    let refused = client
        .batch_execute("CREATE INDEX CONCURRENTLY events_y ON events (x)")
        .await
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("cannot create index on partitioned table"),
        "{refused:?}"
    );
}

/// A domain with a constraint that only the database knows (created by an
/// earlier migration, or by hand): PostgreSQL adds a column of it by
/// rewriting the table, default or not, and so for a domain based on one.
/// Without the catalog the files say nothing about it.
#[tokio::test]
async fn a_domain_with_a_constraint_in_the_database_rewrites() {
    let (db, client, dir) = setup(
        "lint_domains",
        "CREATE TABLE orders (id bigint);
             INSERT INTO orders VALUES (1);
             CREATE DOMAIN positive AS bigint CHECK (VALUE > 0);
             CREATE DOMAIN small_positive AS positive;
             CREATE DOMAIN required AS text NOT NULL;
             CREATE DOMAIN plain_code AS text;",
        "ALTER TABLE orders ADD COLUMN a positive;
ALTER TABLE orders ADD COLUMN b small_positive;
ALTER TABLE orders ADD COLUMN c required DEFAULT 'x';
ALTER TABLE orders ADD COLUMN d plain_code;
",
    )
    .await;
    assert_eq!(lint(&dir.0, None), Vec::<String>::new());
    assert_eq!(
        lint(&dir.0, Some(&db.url)),
        [
            "1:adding-field-with-default",
            "2:adding-field-with-default",
            "3:adding-field-with-default",
        ]
    );
    // What the lint says is what PostgreSQL does: a new relfilenode.
    for (column, rewrites) in [
        ("e positive", true),
        ("f small_positive", true),
        ("g plain_code", false),
        ("h required DEFAULT 'y'", true),
    ] {
        let before: u32 = client
            .query_one(
                "SELECT relfilenode FROM pg_class WHERE relname = 'orders'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        client
            .batch_execute(&format!("ALTER TABLE orders ADD COLUMN {column}"))
            .await
            .unwrap();
        let after: u32 = client
            .query_one(
                "SELECT relfilenode FROM pg_class WHERE relname = 'orders'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(before != after, rewrites, "{column}");
    }
}
