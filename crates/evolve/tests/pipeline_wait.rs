//! Waiting for a replacement instead of polling, through the binary: the
//! README's `absorb.sql` (CREATE TABLE, CREATE REPLACEMENT, APPLY ... WITH
//! (WAIT), DROP TABLE) as one `evolve sql -f` over a table big enough that
//! hydrating it takes a while, `evolve sql --wait`, and `evolve status
//! --wait-hydrated`; each swap sends the sink exactly the changed rows.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

const ROWS: i64 = 100_000;

fn write(env: &Env, name: &str, sql: &str) -> String {
    let path = env.dir.join(name);
    std::fs::write(&path, sql).unwrap();
    path.to_str().unwrap().to_string()
}

async fn interface_table(admin: &str) -> String {
    object(admin, "materialized view", "orders_json")
        .await
        .expect("orders_json")["table"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The README's absorb.sql for version `n`: table `orders_v<n>`, its
/// replacement `orders_json_v<n>`, and `DROP TABLE orders_v<n-1>`.
fn absorb_sql(readme: &str, n: u32) -> String {
    readme
        .replace("orders_json_v2", &format!("orders_json_v{n}"))
        .replace("orders_v2", &format!("orders_v{n}"))
        .replace(
            "DROP TABLE orders_v1",
            &format!("DROP TABLE orders_v{}", n - 1),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_waits_for_the_replacement_to_hydrate() {
    let env = env("cli_wait").await;
    env.up
        .batch_execute(&format!(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, repeat('c', 40) || i, i % 1000
               FROM generate_series(1, {ROWS}) i;"
        ))
        .await
        .unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let setup = write(&env, "setup.sql", &readme_file("setup.sql"));
    sql_ok(&admin, &["-f", &setup]).await;
    wait_running(&admin, "orders_v1").await;
    wait_converged(&env).await;
    audit_sink(&env.sink).await;

    // A column added upstream, set on 1% of the rows (as in the README).
    env.up
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN region text;
             UPDATE orders SET region = 'eu' WHERE id % 100 = 0;",
        )
        .await
        .unwrap();
    let readme = readme_file("absorb.sql");
    assert!(readme.contains("WITH (WAIT = '60s')"), "{readme}");

    // Without WAIT, the APPLY right after CREATE REPLACEMENT is refused:
    // the replacement is still hydrating. The statements before it stay.
    let no_wait = write(
        &env,
        "no_wait.sql",
        &readme.replace(" WITH (WAIT = '60s')", ""),
    );
    let out = evolve(&["sql", "--admin", &admin, "-f", &no_wait]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "CREATE TABLE\nCREATE MATERIALIZED VIEW\n"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ERROR:  replacement \"orders_json_v2\" is not hydrated\n"),
        "{stderr}"
    );
    assert!(stderr.contains("WITH (WAIT = '60s')"), "{stderr}");
    assert_eq!(interface_table(&admin).await, "orders_v1");
    sql_ok(
        &admin,
        &[
            "-c",
            "DROP MATERIALIZED VIEW orders_json_v2; DROP TABLE orders_v2",
        ],
    )
    .await;

    // The README's file as printed: it waits, applies, drops the old table.
    let file = write(&env, "absorb.sql", &readme);
    let out = evolve(&["sql", "--admin", &admin, "-f", &file]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "CREATE TABLE\nCREATE MATERIALIZED VIEW\nALTER MATERIALIZED VIEW\nDROP TABLE\n"
    );
    assert_eq!(interface_table(&admin).await, "orders_v2");
    let copied = object(&admin, "table", "orders_v2").await.unwrap()["rows_copied"].clone();
    assert_eq!(copied, Value::from(ROWS));
    wait_writes(&env.sink, ROWS / 100).await;
    wait_converged(&env).await;

    // `evolve sql --wait` gives WAIT to an APPLY that does not say it.
    env.up
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN note text;
             UPDATE orders SET note = 'x' WHERE id % 250 = 0;",
        )
        .await
        .unwrap();
    let file = write(
        &env,
        "v3.sql",
        &absorb_sql(&readme, 3).replace(" WITH (WAIT = '60s')", ""),
    );
    let out = evolve(&["sql", "--admin", &admin, "--wait", "60s", "-f", &file]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(interface_table(&admin).await, "orders_v3");
    wait_writes(&env.sink, ROWS / 100 + ROWS / 250).await;
    wait_converged(&env).await;

    // Out of time: the error names the replacement, its state and rows
    // copied, and the way out; nothing is applied.
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE TABLE orders_v4 FROM SOURCE src (REFERENCE public.orders);
         CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v4 FOR orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v4 t;
         ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v4 WITH (WAIT = '50ms');",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "ERROR:  replacement \"orders_json_v4\" is not hydrated after waiting 50ms\n"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("DETAIL:  Its table \"orders_v4\" is "),
        "{stderr}"
    );
    assert!(
        stderr.contains(" rows copied so far). Nothing was applied."),
        "{stderr}"
    );
    assert!(stderr.contains("HINT:  Wait longer"), "{stderr}");
    assert_eq!(interface_table(&admin).await, "orders_v3");

    // `evolve status --wait-hydrated`: 1 with the state when time runs
    // out, 0 once hydrated.
    let out = evolve(&[
        "status",
        "--admin",
        &admin,
        "--wait-hydrated",
        "orders_json_v4",
        "--timeout",
        "0s",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "error: replacement \"orders_json_v4\" is not hydrated after waiting 0s: it is hydrating ("
        ),
        "{stderr}"
    );
    assert!(stderr.contains("wait longer with --timeout"), "{stderr}");
    let out = evolve(&["status", "--admin", &admin, "--wait-hydrated", "orders_v4"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("table \"orders_v4\" is running ({ROWS} rows copied)\n")
    );
    let out = evolve(&[
        "status",
        "--admin",
        &admin,
        "--format",
        "json",
        "--wait-hydrated",
        "orders_json_v4",
        "--timeout",
        "30s",
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(body["objects"][0]["name"], "orders_json_v4");
    assert_eq!(body["objects"][0]["hydrated"], true);
    let out = evolve(&["status", "--admin", &admin, "--wait-hydrated", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: the pipeline has no table or replacement \"nope\""),
        "{}",
        text(&out.stderr)
    );

    // Hydrated now: applied at once, and no document changed (v4 reads
    // what v3 reads), so the sink gets nothing.
    let before = audit_count(&env.sink).await;
    sql_ok(
        &admin,
        &[
            "-c",
            "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v4 WITH (WAIT = '5s')",
        ],
    )
    .await;
    assert_eq!(interface_table(&admin).await, "orders_v4");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(audit_count(&env.sink).await, before);
    wait_converged(&env).await;

    let status = pipeline.terminate();
    assert!(status.success(), "{status:?}");
}
