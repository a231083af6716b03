//! `evolve migrate apply --pipeline URL` under write load: an upstream
//! (the shared cluster) and a sink (a second cluster) with a consumer view
//! on the interface's sink table, a running `evolve pipeline run` with an
//! admin token, a task writing upstream all along, a reader of the
//! consumer view and a watcher of `evolve status`. A drop, a type change
//! and a rename go through `migrate apply --pipeline`: no table is ever
//! stalled, no read of the consumer view fails, and the sink receives
//! exactly one write per committed upstream change plus exactly the keys
//! each swap changes. Before that, `--dry-run` prints the steps and
//! changes nothing, an unreachable pipeline (or a missing token) leaves
//! the file unapplied with one line, and a file that fails after the swap
//! leaves the view on a copy of the version it read.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{connect, text, upstream_rows};

const TOKEN: &str = "tok-migrate-7c1e";

/// `evolve ARGS` with the admin token in the environment.
async fn evolve(args: &[&str]) -> std::process::Output {
    support::evolve_with(args, &[("EVOLVE_ADMIN_TOKEN", TOKEN)]).await
}

async fn sql_ok(admin: &str, statements: &str) -> Value {
    let out = evolve(&[
        "sql", "--admin", admin, "--format", "json", "-c", statements,
    ])
    .await;
    assert!(
        out.status.success(),
        "evolve sql {statements}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("sql JSON")
}

async fn status(admin: &str) -> Result<Vec<Value>, String> {
    let out = evolve(&["status", "--admin", admin, "--format", "json"]).await;
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    let report: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    report["objects"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("no objects in {report}"))
}

async fn tables(admin: &str) -> Vec<String> {
    let shown = sql_ok(admin, "SHOW TABLES").await;
    shown["results"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

async fn sink_rows(sink: &tokio_postgres::Client) -> Vec<(String, String)> {
    sink.query(
        "SELECT key::text, data::text FROM public.orders_json ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

async fn wait_converged(up: &tokio_postgres::Client, sink: &tokio_postgres::Client) {
    let start = Instant::now();
    loop {
        let exists: bool = sink
            .query_one("SELECT to_regclass('public.orders_json') IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0);
        if exists && upstream_rows(up).await == sink_rows(sink).await {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the sink did not converge in 90 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `evolve migrate apply` of `dir` on `db` with `args`.
async fn migrate(db: &str, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut all = vec![
        "migrate",
        "apply",
        "--database-url",
        db,
        "--dir",
        dir.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    evolve(&all).await
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drop_type_change_and_rename_under_load_never_stall() {
    let env = support::env("migrate_pipeline").await;
    // A token: the coordination is authenticated like every admin call.
    std::fs::write(
        &env.config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"{TOKEN}\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n[connections.sink_conn]\nurl = \"{}\"\n",
            env.up_db.url, env.sink_db.url
        ),
    )
    .unwrap();
    // 300 rows: note on 100 of them, qty on 150, tag on 60.
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, qty int, note text,
                                  tag text, n int NOT NULL DEFAULT 0);
             INSERT INTO orders (id, customer, qty, note, tag)
               SELECT i, 'c' || i,
                      CASE WHEN i % 2 = 0 THEN i END,
                      CASE WHEN i % 3 = 0 THEN 'note ' || i END,
                      CASE WHEN i % 5 = 0 THEN 'tag ' || i END
               FROM generate_series(1, 300) i;",
        )
        .await
        .unwrap();
    let pipeline = support::Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    sql_ok(
        &admin,
        "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
         CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders);
         CREATE MATERIALIZED VIEW orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
         CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');",
    )
    .await;
    wait_converged(&env.up, &env.sink).await;
    // The consumer, and every write into the sink table from now on.
    env.sink
        .batch_execute(
            "CREATE VIEW public.order_lines AS
               SELECT (key->>'id')::int AS id, (data->>'qty')::bigint AS qty,
                      data->>'note' AS note, data->>'label' AS label, (data->>'n')::int AS n
               FROM public.orders_json;
             CREATE TABLE public.audit (op text, key jsonb, old_data jsonb, new_data jsonb);
             CREATE FUNCTION public.audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO public.audit VALUES (TG_OP,
                 CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END,
                 CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.data END,
                 CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.data END);
               RETURN NULL;
             END $$;
             CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.orders_json
               FOR EACH ROW EXECUTE FUNCTION public.audit_fn();",
        )
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    // The write load: an insert of a new key and an update of a seeded
    // row in turn, each its own transaction touching no column the
    // migrations change, so each commit is exactly one sink write.
    let (inserted, updated, load_errors) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = {
        let (stop, inserted, updated, errors) = (
            Arc::clone(&stop),
            Arc::clone(&inserted),
            Arc::clone(&updated),
            Arc::clone(&load_errors),
        );
        let client = connect(&env.up_db.url).await;
        tokio::spawn(async move {
            let mut i: i32 = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let done = if i % 2 == 0 {
                    client
                        .execute(
                            "INSERT INTO orders (id, customer) VALUES ($1, 'load')",
                            &[&(100_000 + i)],
                        )
                        .await
                        .map(|n| (n == 1).then_some(&inserted))
                } else {
                    client
                        .execute(
                            "UPDATE orders SET n = n + 1 WHERE id = $1",
                            &[&(1 + (i / 2) % 300)],
                        )
                        .await
                        .map(|n| (n == 1).then_some(&updated))
                };
                match done {
                    Ok(Some(counter)) => {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    // A reader of the consumer view, counting failed reads.
    let (reads, read_errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (stop, reads, errors) = (
            Arc::clone(&stop),
            Arc::clone(&reads),
            Arc::clone(&read_errors),
        );
        let client = connect(&env.sink_db.url).await;
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let read = client
                    .query_one(
                        "SELECT count(*), coalesce(sum(qty), 0)::bigint, count(note), count(label), \
                                coalesce(sum(n), 0)::bigint FROM public.order_lines",
                        &[],
                    )
                    .await;
                match read {
                    Ok(_) => reads.fetch_add(1, Ordering::Relaxed),
                    Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    // A watcher of `evolve status`: every object stalled or stale it sees.
    let stalls = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let looks = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, stalls, looks, admin) = (
            Arc::clone(&stop),
            Arc::clone(&stalls),
            Arc::clone(&looks),
            admin.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match status(&admin).await {
                    Ok(objects) => {
                        looks.fetch_add(1, Ordering::Relaxed);
                        for o in objects {
                            if o["state"] == "stalled"
                                || o["state"] == "retrying"
                                || o["state"] == "stale"
                            {
                                stalls.lock().unwrap().push(o.to_string());
                            }
                        }
                    }
                    Err(e) => stalls.lock().unwrap().push(format!("status failed: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // POST /coordinate itself: JSON only, and the upstream matched by what
    // the server says of itself.
    let identity = env
        .up
        .query_one(
            "SELECT system_identifier::text, current_database()::text FROM pg_control_system()",
            &[],
        )
        .await
        .unwrap();
    let (system_identifier, database): (String, String) = (identity.get(0), identity.get(1));
    let ask = |system_identifier: &str, content_type: &str| {
        let body = serde_json::json!({
            "upstream": {"system_identifier": system_identifier, "database": database},
            "columns": [{"schema": "public", "table": "orders", "column": "note", "action": "drop"}],
        });
        let out = std::process::Command::new("curl")
            .args(["-sS", "-X", "POST", "-w", "\n%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
            .args(["-H", &format!("Content-Type: {content_type}")])
            .args(["--data", &body.to_string()])
            .arg(format!("{admin}/coordinate"))
            .output()
            .expect("run curl");
        let all = text(&out.stdout);
        let (body, code) = all.rsplit_once('\n').expect("status line");
        (code.trim().to_string(), body.to_string())
    };
    let (code, body) = ask(&system_identifier, "application/json");
    assert_eq!(code, "200", "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["sources"], serde_json::json!(["src"]), "{body}");
    assert_eq!(answer["tables"][0]["table"], "orders_v1", "{body}");
    assert_eq!(
        answer["tables"][0]["columns"],
        serde_json::json!(["note"]),
        "{body}"
    );
    assert_eq!(
        answer["tables"][0]["interfaces"],
        serde_json::json!(["orders_json"]),
        "{body}"
    );
    let (code, body) = ask("1", "application/json");
    assert_eq!(code, "200", "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer["tables"],
        serde_json::json!([]),
        "another server: {body}"
    );
    let (code, body) = ask(&system_identifier, "text/plain");
    assert_eq!(code, "415", "{body}");

    let migrations = env.dir.join("migrations");
    std::fs::create_dir_all(&migrations).unwrap();
    std::fs::write(
        migrations.join("V2__drop_note.sql"),
        "ALTER TABLE orders DROP COLUMN note;\n",
    )
    .unwrap();
    let db = env.up_db.url.clone();
    // The upstream holds the pipeline's tables and no history: adopted at
    // version 0 first, as `apply` (like Flyway) refuses a non-empty schema
    // without history.
    let out = evolve(&[
        "migrate",
        "baseline",
        "--version",
        "0",
        "--database-url",
        &db,
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The consumer view reads the note: the file is refused, naming it,
    // unless the contract is broken on purpose.
    let out = migrate(&db, &migrations, &["--pipeline", &admin]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{}{stderr}", text(&out.stdout));
    assert!(
        stderr.contains("migration V2__drop_note.sql was not run: the file drops column public.orders.note, and view public.order_lines (sink orders_sink (public.orders_json)) reads field note of orders_json"),
        "{stderr}"
    );
    assert_eq!(tables(&admin).await, ["orders_v1"]);
    let allow = ["--allow-breaking-contract", "note"];

    // --dry-run: the steps beside the file's statements; nothing changes.
    let out = migrate(
        &db,
        &migrations,
        &["--pipeline", &admin, "--dry-run", allow[0], allow[1]],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "V2__drop_note.sql changes columns table orders_v1 of the pipeline at",
        "  before: CREATE TABLE orders_v2 FROM SOURCE src (REFERENCE public.orders) WITH (EXCLUDE COLUMNS (note));",
        "  before: CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v2 t;",
        "  before: -- wait until orders_json_v2 is hydrated",
        "  before: ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2;",
        "  before: DROP TABLE IF EXISTS orders_v1;",
        "  file:   ALTER TABLE orders DROP COLUMN note;",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    assert_eq!(tables(&admin).await, ["orders_v1"]);

    // An unreachable pipeline, and a reachable one without the token: the
    // file is not run, one line says why, the history is unchanged.
    let history_rows = "SELECT count(*) FROM evolve_schema_history WHERE type = 'SQL'";
    for (pipeline, env_token) in [("http://127.0.0.1:9", true), (admin.as_str(), false)] {
        let mut args = vec![
            "migrate",
            "apply",
            "--database-url",
            db.as_str(),
            "--dir",
            migrations.to_str().unwrap(),
            "--pipeline",
            pipeline,
        ];
        args.push("--pipeline-timeout");
        args.push("30s");
        let out = if env_token {
            evolve(&args).await
        } else {
            support::evolve(&args).await
        };
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{}{stderr}", text(&out.stdout));
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("migration V2__drop_note.sql was not run: the pipeline could not be asked which tables ingest public.orders.note: "),
            "{stderr}"
        );
        let why = if env_token {
            "cannot reach the pipeline's admin API at http://127.0.0.1:9"
        } else {
            "the admin API requires a token"
        };
        assert!(stderr.contains(why), "{stderr}");
        if count(
            &env.up,
            "SELECT count(*) FROM pg_class WHERE relname = 'evolve_schema_history'",
        )
        .await
            == 1
        {
            assert_eq!(count(&env.up, history_rows).await, 0);
        }
        assert_eq!(
            count(
                &env.up,
                "SELECT count(*) FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'note'",
            )
            .await,
            1
        );
    }
    assert_eq!(tables(&admin).await, ["orders_v1"]);

    // A file that fails after the swap: rolled back, and the view moved
    // back onto a copy of the version it read (the note comes back).
    std::fs::write(
        migrations.join("V2__drop_note.sql"),
        "ALTER TABLE orders DROP COLUMN note;\nSELECT 1/0;\n",
    )
    .unwrap();
    let out = migrate(
        &db,
        &migrations,
        &["--pipeline", &admin, allow[0], allow[1]],
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("division by zero"), "{stderr}");
    assert!(
        stdout.contains("V2__drop_note.sql failed; materialized view orders_json moved back onto table orders_v3"),
        "{stdout}"
    );
    assert_eq!(count(&env.up, history_rows).await, 0);
    assert_eq!(tables(&admin).await, ["orders_v3"]);
    std::fs::write(
        migrations.join("V2__drop_note.sql"),
        "ALTER TABLE orders DROP COLUMN note;\n",
    )
    .unwrap();

    // The drop.
    let out = migrate(
        &db,
        &migrations,
        &["--pipeline", &admin, allow[0], allow[1]],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("V2__drop_note.sql: materialized view orders_json moved from table orders_v3 to orders_v4 (note (drop)) before the file"),
        "{stdout}"
    );
    assert_eq!(tables(&admin).await, ["orders_v4"]);

    // The type change: exclude, change, include.
    std::fs::write(
        migrations.join("V3__qty_bigint.sql"),
        "ALTER TABLE orders ALTER COLUMN qty TYPE bigint;\n",
    )
    .unwrap();
    let out = migrate(&db, &migrations, &["--pipeline", &admin]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("V3__qty_bigint.sql: after the commit, materialized view orders_json reads table orders_v6 (qty (type bigint)); dropped orders_v5"),
        "{stdout}"
    );
    assert_eq!(tables(&admin).await, ["orders_v6"]);

    // The rename: exclude the old key, include the new one.
    std::fs::write(
        migrations.join("V4__tag_to_label.sql"),
        "ALTER TABLE orders RENAME COLUMN tag TO label;\n",
    )
    .unwrap();
    let out = migrate(&db, &migrations, &["--pipeline", &admin]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(tables(&admin).await, ["orders_v8"]);

    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    wait_converged(&env.up, &env.sink).await;
    reader.await.unwrap();
    watcher.await.unwrap();

    assert_eq!(
        load_errors.load(Ordering::Relaxed),
        0,
        "writes upstream failed"
    );
    assert_eq!(
        read_errors.load(Ordering::Relaxed),
        0,
        "reads of the consumer view failed"
    );
    assert!(
        reads.load(Ordering::Relaxed) > 100,
        "the reader hardly read"
    );
    assert!(
        looks.load(Ordering::Relaxed) > 10,
        "the watcher hardly looked"
    );
    assert_eq!(
        *stalls.lock().unwrap(),
        Vec::<String>::new(),
        "stalled or stale objects"
    );

    // Exactly one sink write per committed upstream change, and exactly
    // the keys each swap changes (the n of a swapped row is unchanged).
    let (inserted, updated) = (
        inserted.load(Ordering::Relaxed) as i64,
        updated.load(Ordering::Relaxed) as i64,
    );
    assert!(inserted > 50 && updated > 50, "{inserted} {updated}");
    let start = Instant::now();
    loop {
        let total = count(&env.sink, "SELECT count(*) FROM public.audit").await;
        if total >= inserted + updated + 720 || start.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let sink = &env.sink;
    assert_eq!(
        count(
            sink,
            "SELECT count(*) FROM public.audit WHERE op = 'INSERT'"
        )
        .await,
        inserted
    );
    assert_eq!(
        count(
            sink,
            "SELECT count(*) FROM public.audit WHERE op = 'DELETE'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            sink,
            "SELECT count(*) FROM public.audit WHERE op = 'UPDATE' AND old_data->'n' <> new_data->'n'"
        )
        .await,
        updated
    );
    let swapped = |removed: &str| {
        format!(
            "SELECT count(*) FROM public.audit WHERE op = 'UPDATE' AND old_data->'n' = new_data->'n' \
             AND old_data ? '{removed}' AND NOT new_data ? '{removed}' AND old_data - '{removed}' = new_data"
        )
    };
    let added = |key: &str| {
        format!(
            "SELECT count(*) FROM public.audit WHERE op = 'UPDATE' AND old_data->'n' = new_data->'n' \
             AND new_data ? '{key}' AND NOT old_data ? '{key}' AND new_data - '{key}' = old_data"
        )
    };
    assert_eq!(
        count(sink, &swapped("note")).await,
        200,
        "the failed file's swap and the drop's"
    );
    assert_eq!(
        count(sink, &added("note")).await,
        100,
        "the swap back after the failed file"
    );
    assert_eq!(
        count(sink, &swapped("qty")).await,
        150,
        "the type change's exclusion"
    );
    assert_eq!(
        count(sink, &added("qty")).await,
        150,
        "the type change's inclusion"
    );
    assert_eq!(
        count(sink, &swapped("tag")).await,
        60,
        "the rename's exclusion"
    );
    assert_eq!(
        count(sink, &added("label")).await,
        60,
        "the rename's inclusion"
    );
    assert_eq!(
        count(
            sink,
            "SELECT count(*) FROM public.audit WHERE op = 'UPDATE' AND old_data->'n' = new_data->'n'"
        )
        .await,
        720,
        "writes beyond the swaps' changed keys"
    );

    // The history: every file applied, its coordination beside it.
    let rows = env
        .up
        .query(
            "SELECT h.version::text, p.columns, p.views, p.old_table, p.excluding_table,
                    p.final_table, p.state, p.pipeline = $1
             FROM evolve_schema_history h
             JOIN evolve_schema_history_pipeline p USING (installed_rank)
             ORDER BY h.installed_rank",
            &[&admin],
        )
        .await
        .unwrap();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row: Vec<String> = (0..7).map(|i| r.get::<_, String>(i)).collect();
            row.push(r.get::<_, bool>(7).to_string());
            row
        })
        .collect();
    let want = |v: &str, c: &str, old: &str, excl: &str, fin: &str| {
        [v, c, "orders_json", old, excl, fin, "done", "true"]
            .map(str::to_string)
            .to_vec()
    };
    assert_eq!(
        rows,
        [
            want("2", "note (drop)", "orders_v3", "orders_v4", "orders_v4"),
            want(
                "3",
                "qty (type bigint)",
                "orders_v4",
                "orders_v5",
                "orders_v6"
            ),
            want(
                "4",
                "tag (rename to label)",
                "orders_v6",
                "orders_v7",
                "orders_v8"
            ),
        ]
    );
}
