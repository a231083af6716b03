//! Consumer contracts end to end: an upstream (the shared cluster), a sink
//! (a second cluster) with consumer views and a materialized view on the
//! interface's sink table, one over another view, a running `evolve
//! pipeline run`, and a subscriber declaring its fields. `evolve
//! contracts` lists every field each consumer reads, with its cast, the
//! same whether the pipeline walks the sink database or the command does
//! (`--sink-url`); `migrate apply --pipeline` refuses files that take a
//! field a consumer reads (a drop read by a view, a drop read by a
//! subscriber only, a type change a view's cast would not take), naming
//! the consumer, before anything runs; `--allow-breaking-contract` lets
//! one through.

mod support;

use std::io::BufRead as _;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::text;

async fn contracts_json(args: &[&str]) -> Value {
    let mut all = vec!["contracts", "--format", "json"];
    all.extend_from_slice(args);
    let out = support::evolve(&all).await;
    assert!(
        out.status.success(),
        "evolve contracts: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("contracts JSON")
}

/// `evolve VERB --database-url DB --dir DIR --pipeline ADMIN EXTRA...`
/// (VERB `plan` or `migrate apply`).
async fn against_pipeline(
    verb: &[&str],
    db: &str,
    dir: &std::path::Path,
    admin: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = verb.to_vec();
    args.extend([
        "--database-url",
        db,
        "--dir",
        dir.to_str().unwrap(),
        "--pipeline",
        admin,
    ]);
    args.extend_from_slice(extra);
    support::evolve(&args).await
}

/// `consumer -> [field or field::cast]` of interface `orders_json`.
fn reads(answer: &Value) -> Vec<(String, Vec<String>)> {
    let interface = answer["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["interface"] == "orders_json")
        .expect("orders_json in the answer");
    let mut out: Vec<(String, Vec<String>)> = interface["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut fields: Vec<String> = c["reads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| match r["cast"].as_str() {
                    Some(cast) => format!("{}::{cast}", r["field"].as_str().unwrap()),
                    None => r["field"].as_str().unwrap().to_string(),
                })
                .collect();
            if !c["whole_document"].as_array().unwrap().is_empty() {
                fields.push("(whole)".into());
            }
            (
                format!(
                    "{} {}",
                    c["kind"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                ),
                fields,
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_views_matviews_and_subscribers_are_found_and_breaking_files_refused() {
    let env = support::env("contracts").await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2),
                                  addr jsonb, note text, tag text);
             INSERT INTO orders SELECT i, 'c' || i, i * 1.5, jsonb_build_object('city', 'x' || i),
                                       'note ' || i, 'tag ' || i FROM generate_series(1, 20) i;",
        )
        .await
        .unwrap();
    let pipeline = support::Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    support::sql_ok(
        &admin,
        &["-c", "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
         CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders);
         CREATE MATERIALIZED VIEW orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
         CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');"],
    )
    .await;
    support::wait_converged(&env).await;
    env.sink
        .batch_execute(
            "CREATE VIEW public.order_totals AS
               SELECT (key->>'id')::int AS id, (data->>'total')::numeric AS total,
                      data->>'customer' AS customer, data->'addr' AS addr
               FROM public.orders_json WHERE data ? 'total';
             CREATE VIEW public.cities AS SELECT id, addr->>'city' AS city FROM public.order_totals;
             CREATE MATERIALIZED VIEW public.city_counts AS
               SELECT data #>> '{addr,city}' AS city, count(*) AS n FROM public.orders_json GROUP BY 1;
             CREATE VIEW public.raw_docs AS SELECT md5(data::text) AS h FROM public.orders_json;",
        )
        .await
        .unwrap();

    // A subscriber declaring what it reads: kept while and after it runs.
    let mut child = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args([
            "subscribe",
            "orders_json",
            "--admin",
            &admin,
            "--fields",
            "id,tag",
            "--as",
            "billing",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let first = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert!(first.contains("\"type\""), "{first}");
    let _ = child.kill();
    let _ = child.wait();

    let expected = vec![
        (
            "materialized view public.city_counts".to_string(),
            vec!["addr.city".to_string()],
        ),
        (
            "subscriber billing".to_string(),
            vec!["id".to_string(), "tag".to_string()],
        ),
        (
            "view public.cities".to_string(),
            vec!["addr.city".to_string(), "id::integer".to_string()],
        ),
        (
            "view public.order_totals".to_string(),
            vec![
                "addr".to_string(),
                "customer".to_string(),
                "id::integer".to_string(),
                "total".to_string(),
                "total::numeric".to_string(),
            ],
        ),
        (
            "view public.raw_docs".to_string(),
            vec!["(whole)".to_string()],
        ),
    ];
    let walked = contracts_json(&["--admin", &admin]).await;
    assert_eq!(reads(&walked), expected, "{walked}");
    let by_url = contracts_json(&["--admin", &admin, "--sink-url", &env.sink_db.url]).await;
    assert_eq!(reads(&by_url), expected, "{by_url}");
    let out = support::evolve(&["contracts", "orders_json", "--admin", &admin]).await;
    let listing = text(&out.stdout);
    assert!(out.status.success(), "{listing}{}", text(&out.stderr));
    assert!(
        listing.contains("orders_json | total            | numeric | view public.order_totals"),
        "{listing}"
    );
    assert!(listing.contains("(11 rows)"), "{listing}");
    assert!(
        listing.contains(
            "view public.raw_docs reads the whole document of orders_json: md5((orders_json.data)::text)"
        ),
        "{listing}"
    );

    // Files that would break a consumer are refused before anything runs.
    let migrations = env.dir.join("migrations");
    std::fs::create_dir_all(&migrations).unwrap();
    let db = env.up_db.url.clone();
    // The upstream holds its tables and no history: adopted at version 0
    // first, as `apply` (like Flyway) refuses a non-empty schema without
    // history.
    let out = support::evolve(&[
        "migrate",
        "baseline",
        "--version",
        "0",
        "--database-url",
        &db,
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let refuse = |file: &'static str, sql: &'static str, names: &'static [&'static str]| {
        let (migrations, db, admin) = (migrations.clone(), db.clone(), admin.clone());
        async move {
            for f in std::fs::read_dir(&migrations).unwrap() {
                std::fs::remove_file(f.unwrap().path()).unwrap();
            }
            std::fs::write(migrations.join(file), sql).unwrap();
            let out = against_pipeline(&["migrate", "apply"], &db, &migrations, &admin, &[]).await;
            let stderr = text(&out.stderr);
            assert!(
                !out.status.success(),
                "{file} ran: {}{stderr}",
                text(&out.stdout)
            );
            for name in names {
                assert!(stderr.contains(name), "{file}: {name} not in {stderr}");
            }
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        }
    };
    refuse(
        "V2__drop_customer.sql",
        "ALTER TABLE orders DROP COLUMN customer;\n",
        &[
            "migration V2__drop_customer.sql was not run: the file drops column public.orders.customer, and view public.order_totals (sink orders_sink (public.orders_json)) reads field customer of orders_json",
            "--allow-breaking-contract FIELD (for orders_json.customer)",
        ],
    )
    .await;
    refuse(
        "V2__drop_tag.sql",
        "ALTER TABLE orders DROP COLUMN tag;\n",
        &["subscriber billing (subscribe) reads field tag of orders_json"],
    )
    .await;
    refuse(
        "V2__total_text.sql",
        "ALTER TABLE orders ALTER COLUMN total TYPE text;\n",
        &["changes the type of column public.orders.total to text, whose text form does not always cast to numeric, and view public.order_totals (sink orders_sink (public.orders_json)) reads field total of orders_json as numeric"],
    )
    .await;
    refuse(
        "V2__rename_city.sql",
        "ALTER TABLE orders RENAME COLUMN addr TO address;\n",
        &[
            "renames column public.orders.addr to address, and view public.cities",
            "and materialized view public.city_counts",
            "and view public.order_totals",
            "(for orders_json.addr, orders_json.addr.city)",
        ],
    )
    .await;
    // evolve plan --pipeline reports the same contracts, exit status 1.
    for f in std::fs::read_dir(&migrations).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    std::fs::write(
        migrations.join("V2__drop_customer.sql"),
        "ALTER TABLE orders DROP COLUMN customer;\n",
    )
    .unwrap();
    let out = against_pipeline(&["plan"], &db, &migrations, &admin, &[]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("  contract   breaks: the file drops column public.orders.customer, and view public.order_totals"),
        "{stdout}"
    );
    let out = against_pipeline(
        &["plan"],
        &db,
        &migrations,
        &admin,
        &["--allow-breaking-contract", "customer"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("breaks:"), "{stdout}");
    assert!(
        stdout.contains(
            "  contract   warning: view public.raw_docs reads whole documents of orders_json"
        ),
        "{stdout}"
    );

    // Nothing ran: the columns and the pipeline's tables are as they were.
    let columns: i64 = env
        .up
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'orders'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(columns, 6);
    let tables = support::sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    assert!(
        tables.contains("orders_v1") && !tables.contains("orders_v2"),
        "{tables}"
    );

    // A change no consumer minds runs: numeric(10,2) -> numeric keeps the cast.
    for f in std::fs::read_dir(&migrations).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    std::fs::write(
        migrations.join("V2__drop_note.sql"),
        "ALTER TABLE orders DROP COLUMN note;\n",
    )
    .unwrap();
    let out = against_pipeline(&["migrate", "apply"], &db, &migrations, &admin, &[]).await;
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // The subscriber's tag goes with --allow-breaking-contract.
    std::fs::write(
        migrations.join("V3__drop_tag.sql"),
        "ALTER TABLE orders DROP COLUMN tag;\n",
    )
    .unwrap();
    let out = against_pipeline(
        &["migrate", "apply"],
        &db,
        &migrations,
        &admin,
        &["--allow-breaking-contract", "orders_json.tag"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // The drift board names the consumers of a column dropped upstream
    // by hand.
    env.up
        .batch_execute("ALTER TABLE orders DROP COLUMN customer")
        .await
        .unwrap();
    let out = support::evolve(&["drift", "--admin", &admin]).await;
    let board = text(&out.stdout);
    assert!(out.status.success(), "{board}{}", text(&out.stderr));
    assert!(board.contains("column_drift"), "{board}");
    assert!(
        board.contains(": view public.order_totals reads customer of orders_json (field customer)"),
        "{board}"
    );
    let out = support::evolve(&["drift", "--admin", &admin, "--format", "json"]).await;
    let drift: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        drift["readers"].as_array().map(Vec::len),
        Some(1),
        "{drift}"
    );

    // Forgetting the subscriber removes its contract.
    let out = support::evolve(&["contracts", "--admin", &admin, "--forget", "billing"]).await;
    assert_eq!(
        text(&out.stdout),
        "forgot 1 declaration of billing\n",
        "{}",
        text(&out.stderr)
    );
    let after = contracts_json(&["--admin", &admin]).await;
    assert!(
        !reads(&after).iter().any(|(c, _)| c == "subscriber billing"),
        "{after}"
    );
    // An unknown interface: said, with where the names are.
    let out = support::evolve(&["contracts", "nosuch", "--admin", &admin]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("materialized view \"nosuch\" does not exist"),
        "{stderr}"
    );
    assert!(
        stderr.contains("SHOW MATERIALIZED VIEWS lists the materialized views."),
        "{stderr}"
    );
    // Again (or a typo): nothing to forget is said, exit 1.
    let out = support::evolve(&["contracts", "--admin", &admin, "--forget", "billing"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("subscriber billing has declared no fields;"),
        "{}",
        text(&out.stderr)
    );
}
