//! `evolve change` on tables that are not the plain case: partitioned
//! tables, inheritance parents, columns with a collation, generated names
//! that are already taken or that PostgreSQL would cut to the same
//! identifier, tables of the same name in two schemas. Each test applies
//! what `evolve change` wrote (or expects a refusal with nothing written)
//! against a real PostgreSQL.

mod backfill_support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use backfill_support::{assert_refused, connect, evolve, text};

/// A directory of migration files, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "evolve-change-audit-{}-{}",
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

    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort_by_key(|n| n[1..n.find("__").unwrap()].parse::<u32>().unwrap());
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn adopt(url: &str) {
    let out = evolve(url, &["migrate", "baseline", "--version", "0"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn change(url: &str, dir: &TempDir, args: &[&str]) {
    let mut all = vec!["change"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--dir", dir.path().to_str().unwrap()]);
    let out = evolve(url, &all);
    assert!(
        out.status.success(),
        "change {args:?}\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn apply(url: &str, dir: &TempDir, extra: &[&str]) -> String {
    let mut args = vec!["migrate", "apply", "--dir", dir.path().to_str().unwrap()];
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

/// Refused with one error line holding `parts`, and no file written.
fn refused(url: &str, args: &[&str], parts: &[&str]) {
    let dir = TempDir::new();
    let mut all = vec!["change"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--dir", dir.path().to_str().unwrap()]);
    let out = evolve(url, &all);
    assert_refused(&out, parts);
    assert!(dir.files().is_empty(), "{args:?} wrote {:?}", dir.files());
}

/// PostgreSQL builds no index concurrently on a partitioned table and (before
/// 18) adds no NOT VALID foreign key to one, so the files `add-foreign-key`
/// wrote for one failed at their first statement. It is refused up front,
/// with the way out: the same change on each partition.
#[tokio::test]
async fn add_foreign_key_on_a_partitioned_table_is_refused_up_front() {
    let db = evolve_test::fresh_db("chga_fk_parted").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE customers (id int8 PRIMARY KEY);
         CREATE TABLE orders (id int8, region int, customer_id int8, PRIMARY KEY (id, region))
           PARTITION BY LIST (region);
         CREATE TABLE orders_eu PARTITION OF orders FOR VALUES IN (1);
         CREATE TABLE orders_us PARTITION OF orders FOR VALUES IN (2);",
    )
    .await
    .unwrap();
    refused(
        &db.url,
        &[
            "add-foreign-key",
            "orders",
            "--columns",
            "customer_id",
            "--references",
            "customers",
            "--to",
            "id",
        ],
        &[
            "public.orders is a partitioned table",
            "public.orders_eu",
            "each partition",
        ],
    );

    // The way out works: the change on a partition applies end to end.
    adopt(&db.url);
    let dir = TempDir::new();
    change(
        &db.url,
        &dir,
        &[
            "add-foreign-key",
            "orders_eu",
            "--columns",
            "customer_id",
            "--references",
            "customers",
            "--to",
            "id",
        ],
    );
    apply(&db.url, &dir, &[]);
    let valid: bool = c
        .query_one(
            "SELECT convalidated FROM pg_constraint WHERE conrelid = 'orders_eu'::regclass AND contype = 'f'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(valid);
}

/// The sync trigger is a row trigger of the table named; rows of an
/// inheritance child fire the child's triggers only, so a write through
/// either shape to a child's row was never copied to the other column, and
/// the backfill then overwrote the new column with the stale old one.
/// A table with inheritance children is refused, naming them.
#[tokio::test]
async fn a_table_with_inheritance_children_is_refused() {
    let db = evolve_test::fresh_db("chga_inherit").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE events (id int8 PRIMARY KEY, name text, n int4);
         CREATE TABLE events_2025 (note text) INHERITS (events);
         INSERT INTO events VALUES (1, 'a', 1);
         INSERT INTO events_2025 VALUES (2, 'b', 2, 'x');",
    )
    .await
    .unwrap();
    for args in [
        vec!["rename-column", "events", "name", "title"],
        vec!["change-type", "events", "n", "bigint"],
        vec!["set-not-null", "events", "name", "--default", "'none'"],
        vec![
            "split-column",
            "events",
            "name",
            "--into",
            "a=name",
            "--into",
            "b=name",
            "--merge",
            "a",
        ],
    ] {
        refused(
            &db.url,
            &args,
            &[
                "public.events has inheritance children",
                "public.events_2025",
            ],
        );
    }
    // Without --default there is no trigger: the CHECK recurses to the
    // children, and the change works.
    adopt(&db.url);
    c.batch_execute("UPDATE events SET name = 'c' WHERE name IS NULL")
        .await
        .unwrap();
    let dir = TempDir::new();
    change(&db.url, &dir, &["set-not-null", "events", "name"]);
    apply(&db.url, &dir, &[]);
}

/// The new column of a rename (and the shadow column of a type change to a
/// collatable type) is made with the old column's collation: without it,
/// a `COLLATE "C"` column came back with the database's default collation
/// at the contract step, changing sort order and comparisons silently.
#[tokio::test]
async fn rename_and_change_type_keep_the_collation() {
    let db = evolve_test::fresh_db("chga_collation").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE words (id int8 PRIMARY KEY, w text COLLATE \"C\" NOT NULL, code varchar(10) COLLATE \"C\");
         INSERT INTO words VALUES (1, 'b', 'b'), (2, 'B', 'B'), (3, 'a', 'a');",
    )
    .await
    .unwrap();
    adopt(&db.url);
    let dir = TempDir::new();
    change(&db.url, &dir, &["rename-column", "words", "w", "word"]);
    change(&db.url, &dir, &["change-type", "words", "code", "text"]);
    apply(&db.url, &dir, &["--wait-backfill"]);
    let collations: Vec<(String, String)> = c
        .query(
            "SELECT attname::text, coalesce(collname::text, '-')
               FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation
              WHERE attrelid = 'words'::regclass AND attnum > 0 AND NOT attisdropped
              ORDER BY attnum",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        collations.contains(&("word".into(), "C".into())),
        "{collations:?}"
    );
    assert!(
        collations.contains(&("code".into(), "C".into())),
        "{collations:?}"
    );
    let order: Vec<String> = c
        .query("SELECT word FROM words ORDER BY word", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, ["B", "a", "b"]);
}

/// A generated index or constraint name that already belongs to another
/// object: `CREATE INDEX CONCURRENTLY IF NOT EXISTS` skipped the index (the
/// foreign key went in without one), and a taken constraint name failed
/// the expand step. The generated names avoid the names in use.
#[tokio::test]
async fn generated_names_avoid_names_already_taken() {
    let db = evolve_test::fresh_db("chga_taken").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE customers (id int8 PRIMARY KEY);
         INSERT INTO customers SELECT generate_series(1, 10);
         CREATE TABLE orders (id int8 PRIMARY KEY, customer_id int8, archived bool, note text);
         INSERT INTO orders SELECT i, 1 + i % 10, false, CASE WHEN i % 2 = 0 THEN 'n' END FROM generate_series(1, 100) i;
         -- A partial index whose name is the one the foreign key's index would get.
         CREATE INDEX orders_customer_id_idx ON orders (customer_id) WHERE archived;
         -- A constraint whose name the NOT NULL check would get.
         ALTER TABLE orders ADD CONSTRAINT orders_note_not_null CHECK (length(note) < 100);",
    )
    .await
    .unwrap();
    adopt(&db.url);
    let dir = TempDir::new();
    change(
        &db.url,
        &dir,
        &[
            "add-foreign-key",
            "orders",
            "--columns",
            "customer_id",
            "--references",
            "customers",
            "--to",
            "id",
        ],
    );
    change(
        &db.url,
        &dir,
        &["set-not-null", "orders", "note", "--default", "'-'"],
    );
    apply(&db.url, &dir, &["--wait-backfill"]);
    let full_index: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_index i
              WHERE i.indrelid = 'orders'::regclass AND i.indisvalid AND i.indpred IS NULL
                AND i.indnatts = 1
                AND i.indkey[0] = (SELECT attnum FROM pg_attribute
                                    WHERE attrelid = 'orders'::regclass AND attname = 'customer_id')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(full_index, 1, "the foreign key's index was built");
    let (not_null, kept): (bool, i64) = {
        let r = c
            .query_one(
                "SELECT a.attnotnull,
                        (SELECT count(*) FROM pg_constraint WHERE conrelid = 'orders'::regclass
                            AND conname = 'orders_note_not_null' AND pg_get_constraintdef(oid) LIKE '%length%')
                   FROM pg_attribute a WHERE a.attrelid = 'orders'::regclass AND a.attname = 'note'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(not_null);
    assert_eq!(kept, 1, "the user's own constraint is left as it was");
}

/// A trigger function's SQL names the column (and whatever `--using`,
/// `--into` and `--merge` name); a column called like a PL/pgSQL variable
/// (`found`, `new`, `tg_op`) made that SQL ambiguous, so after the expand
/// step every INSERT and UPDATE of the table failed. The whole sequence now
/// runs with the old and the new shape writing between the steps.
#[tokio::test]
async fn columns_named_like_plpgsql_variables_keep_writes_working() {
    let db = evolve_test::fresh_db("chga_plpgsql_names").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE lost (id int8 PRIMARY KEY, found int4 NOT NULL, tg_op text);
         INSERT INTO lost SELECT i, i, 'a' || i || ' b' || i FROM generate_series(1, 20) i;",
    )
    .await
    .unwrap();
    adopt(&db.url);
    let dir = TempDir::new();
    change(
        &db.url,
        &dir,
        &[
            "change-type",
            "lost",
            "found",
            "bigint",
            "--using",
            "found + 0",
        ],
    );
    change(
        &db.url,
        &dir,
        &[
            "split-column",
            "lost",
            "tg_op",
            "--into",
            "new=split_part(tg_op, ' ', 1)",
            "--into",
            "old=split_part(tg_op, ' ', 2)",
            "--merge",
            "new || ' ' || old",
        ],
    );
    let files = dir.files();
    assert_eq!(files.len(), 8, "{files:?}");
    let mut next = 100;
    for (i, file) in files.iter().enumerate() {
        let version = (i + 1).to_string();
        apply(&db.url, &dir, &["--target", &version, "--wait-backfill"]);
        next += 1;
        let write = if i < 4 {
            format!(
                "INSERT INTO lost (id, found, tg_op) VALUES ({next}, {next}, 'x y'); UPDATE lost SET found = found + 1 WHERE id = 1"
            )
        } else if i < 7 {
            format!(
                "INSERT INTO lost (id, found, new, old) VALUES ({next}, 1, 'p', 'q'); UPDATE lost SET tg_op = 'c d' WHERE id = 2"
            )
        } else {
            format!(
                "INSERT INTO lost (id, found, new, old) VALUES ({next}, 1, 'p', 'q'); UPDATE lost SET new = 'e' WHERE id = 2"
            )
        };
        c.batch_execute(&write)
            .await
            .unwrap_or_else(|e| panic!("writing after {file}: {e:?}"));
    }
    let row = c
        .query_one(
            "SELECT found::text, new, old, pg_typeof(found)::text FROM lost WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(3), "bigint");
    assert_eq!(row.get::<_, String>(0), "5", "four updates of found = 1");
    let row = c
        .query_one("SELECT new, old FROM lost WHERE id = 2", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("e".to_string(), "d".to_string())
    );
    let (p, q): (String, String) = {
        let r = c
            .query_one("SELECT new, old FROM lost WHERE id = 105", &[])
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((p.as_str(), q.as_str()), ("p", "q"));
}

/// PostgreSQL lets a foreign key reference any unique index on exactly
/// the referenced columns (not only a primary key or unique constraint),
/// but not a DEFERRABLE one: the first was refused, the second generated
/// files whose expand step failed.
#[tokio::test]
async fn foreign_keys_reference_what_postgresql_accepts() {
    let db = evolve_test::fresh_db("chga_fk_unique").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE products (id int8 PRIMARY KEY, sku text NOT NULL, ean text,
                                CONSTRAINT products_ean_key UNIQUE (ean) DEFERRABLE);
         CREATE UNIQUE INDEX products_sku ON products (sku);
         INSERT INTO products VALUES (1, 'a', '1'), (2, 'b', '2');
         CREATE TABLE lines (id int8 PRIMARY KEY, sku text, ean text);
         INSERT INTO lines VALUES (1, 'a', '1'), (2, 'b', NULL);",
    )
    .await
    .unwrap();
    refused(
        &db.url,
        &[
            "add-foreign-key",
            "lines",
            "--columns",
            "ean",
            "--references",
            "products",
            "--to",
            "ean",
        ],
        &["public.products (ean)", "DEFERRABLE"],
    );
    adopt(&db.url);
    let dir = TempDir::new();
    change(
        &db.url,
        &dir,
        &[
            "add-foreign-key",
            "lines",
            "--columns",
            "sku",
            "--references",
            "products",
            "--to",
            "sku",
        ],
    );
    apply(&db.url, &dir, &[]);
    let e = c
        .batch_execute("INSERT INTO lines VALUES (3, 'zz', NULL)")
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("foreign key"), "{e:?}");
}

/// The sync trigger compared the two sides with the type's own `=`: for a
/// case-insensitive `citext` column, a write that changed only the case
/// counted as no change, so it never reached the other side (a rename
/// ended with the old spelling in the new column; a split's old column
/// kept the old spelling for the old application to read). Values are
/// now compared by their text.
#[tokio::test]
async fn case_only_changes_of_citext_values_are_kept_in_step() {
    let db = evolve_test::fresh_db("chga_citext").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE EXTENSION citext;
         CREATE TABLE users (id int8 PRIMARY KEY, email citext NOT NULL);
         INSERT INTO users VALUES (1, 'bob@example.com'), (2, 'ann@example.com');
         CREATE TABLE people (id int8 PRIMARY KEY, name citext);
         INSERT INTO people VALUES (1, 'bob smith');",
    )
    .await
    .unwrap();
    adopt(&db.url);

    let dir = TempDir::new();
    change(
        &db.url,
        &dir,
        &["rename-column", "users", "email", "email_address"],
    );
    apply(
        &db.url,
        &dir,
        &["--until-phase", "backfill", "--wait-backfill"],
    );
    // The old application changes only the case; the new one too.
    c.batch_execute(
        "UPDATE users SET email = 'BOB@example.com' WHERE id = 1;
         UPDATE users SET email_address = 'Ann@example.com' WHERE id = 2;",
    )
    .await
    .unwrap();
    let (old, new): (String, String) = {
        let r = c
            .query_one(
                "SELECT email::text || ',' || email_address::text, (SELECT email::text || ',' || email_address::text FROM users WHERE id = 2) FROM users WHERE id = 1",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(old, "BOB@example.com,BOB@example.com");
    assert_eq!(new, "Ann@example.com,Ann@example.com");
    apply(&db.url, &dir, &["--until-phase", "contract"]);
    let emails: Vec<String> = c
        .query("SELECT email_address::text FROM users ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(emails, ["BOB@example.com", "Ann@example.com"]);

    change(
        &db.url,
        &dir,
        &[
            "split-column",
            "people",
            "name",
            "--into",
            "first=split_part(name, ' ', 1)::citext",
            "--into",
            "last=split_part(name, ' ', 2)::citext",
            "--merge",
            "first || ' ' || last",
        ],
    );
    apply(
        &db.url,
        &dir,
        &["--until-phase", "backfill", "--wait-backfill"],
    );
    c.batch_execute("UPDATE people SET first = 'Bob' WHERE id = 1")
        .await
        .unwrap();
    let name: String = c
        .query_one("SELECT name::text FROM people WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        name, "Bob smith",
        "the old application reads the new spelling"
    );
    apply(&db.url, &dir, &[]);
}

/// `evolve backfill` skips rows whose column already equals the new value
/// (`IS DISTINCT FROM`), which a type without an equality operator (json)
/// cannot do: a rename of a json column wrote files whose expand step
/// applied and whose trigger then failed every write to the table ("operator
/// does not exist: json = json"), and whose backfill job failed. Such
/// changes are refused up front with the way out (jsonb), which works.
#[tokio::test]
async fn columns_without_equality_are_refused_with_the_way_out() {
    let db = evolve_test::fresh_db("chga_json").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "CREATE TABLE events (id int8 PRIMARY KEY, payload json, body text);
         INSERT INTO events SELECT i, json_build_object('n', i), '{}' FROM generate_series(1, 30) i;",
    )
    .await
    .unwrap();
    refused(
        &db.url,
        &["rename-column", "events", "payload", "data"],
        &["column public.events.payload has type json", "jsonb"],
    );
    refused(
        &db.url,
        &[
            "change-type",
            "events",
            "body",
            "json",
            "--using",
            "body::json",
        ],
        &["has type json", "jsonb"],
    );
    refused(
        &db.url,
        &["set-not-null", "events", "payload", "--default", "'{}'"],
        &["has type json", "jsonb"],
    );
    adopt(&db.url);
    let dir = TempDir::new();
    change(
        &db.url,
        &dir,
        &[
            "change-type",
            "events",
            "payload",
            "jsonb",
            "--using",
            "payload::jsonb",
        ],
    );
    apply(&db.url, &dir, &["--until-phase", "expand"]);
    c.batch_execute("UPDATE events SET payload = '{\"n\": 0}' WHERE id = 1")
        .await
        .unwrap();
    apply(&db.url, &dir, &["--wait-backfill"]);
    let ok: bool = c
        .query_one(
            "SELECT pg_typeof(payload) = 'jsonb'::regtype AND payload = '{\"n\": 0}' FROM events WHERE id = 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ok);
}

/// An application role that may use only some columns (`GRANT SELECT (c)`)
/// lost them: the new column of a rename had no privileges (the new
/// application failed from the expand step on), and a type change's
/// shadow column, renamed into place at the switch, had none either (the
/// running application failed from the switch on). The column's
/// privileges and comment go with it.
#[tokio::test]
async fn column_privileges_and_comments_go_to_the_new_column() {
    let db = evolve_test::fresh_db("chga_grants").await;
    let c = connect(&db.url).await;
    c.batch_execute(
        "DO $$ BEGIN CREATE ROLE chga_app; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
         CREATE TABLE items (id int8 PRIMARY KEY, qty int4 NOT NULL, label text, secret text);
         INSERT INTO items SELECT i, i, 'l' || i, 's' FROM generate_series(1, 20) i;
         GRANT SELECT (id, qty, label), INSERT (id, qty, label), UPDATE (qty, label) ON items TO chga_app;
         COMMENT ON COLUMN items.qty IS 'units in stock';",
    )
    .await
    .unwrap();
    adopt(&db.url);
    let dir = TempDir::new();
    change(&db.url, &dir, &["change-type", "items", "qty", "bigint"]);
    change(&db.url, &dir, &["rename-column", "items", "label", "title"]);
    let files = dir.files();
    for (i, file) in files.iter().enumerate() {
        apply(
            &db.url,
            &dir,
            &["--target", &(i + 1).to_string(), "--wait-backfill"],
        );
        let label = if i < 7 { "label" } else { "title" };
        let as_app = format!(
            "SET ROLE chga_app;
             UPDATE items SET qty = qty + 1 WHERE id = 1;
             INSERT INTO items (id, qty, {label}) VALUES ({}, 1, 'x');
             SELECT id, qty FROM items WHERE id = 1;
             RESET ROLE;",
            100 + i
        );
        c.batch_execute(&as_app)
            .await
            .unwrap_or_else(|e| panic!("the application role after {file}: {e:?}"));
        c.batch_execute("RESET ROLE").await.unwrap();
        if i >= 4 {
            // The new application uses the new column from the expand step on.
            c.batch_execute(&format!(
                "SET ROLE chga_app; UPDATE items SET title = 'y{i}' WHERE id = 2; SELECT title FROM items; RESET ROLE;"
            ))
            .await
            .unwrap_or_else(|e| panic!("the new application after {file}: {e:?}"));
            c.batch_execute("RESET ROLE").await.unwrap();
        }
    }
    let denied = c
        .batch_execute("SET ROLE chga_app; SELECT secret FROM items")
        .await
        .unwrap_err();
    c.batch_execute("RESET ROLE").await.unwrap();
    assert!(
        format!("{denied:?}").contains("permission denied"),
        "{denied:?}"
    );
    let r = c
        .query_one(
            "SELECT qty, col_description('items'::regclass, (SELECT attnum FROM pg_attribute
                       WHERE attrelid = 'items'::regclass AND attname = 'qty'))
               FROM items WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 9, "eight updates of qty = 1");
    assert_eq!(
        r.get::<_, Option<String>>(1).as_deref(),
        Some("units in stock")
    );
}
