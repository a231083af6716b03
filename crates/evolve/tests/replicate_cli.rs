//! Replicas as users drive them: `evolve pipeline run` as a child
//! process, every replica statement through `evolve sql`, rows inserted
//! upstream and seen on a node at another schema version with the
//! configured resolver's effect and a transform applied, a halt skipped
//! with `evolve replicate skip`, a restart, and `DROP REPLICA` leaving
//! nothing upstream. Bad input (unknown replica, source, connection,
//! table, column, resolver; a resolver the type does not allow; an
//! unreachable node) is a Postgres-style error, exit 1, the catalog and
//! the upstream unchanged. Upstream and node are databases of the shared
//! throwaway cluster.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

use support::{Pipeline, evolve, text};

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-replicate-cli-{}-{hint}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `evolve sql -c sql` succeeds; its stdout.
async fn sql_ok(admin: &str, sql: &str) -> String {
    let out = evolve(&["sql", "--admin", admin, "-c", sql]).await;
    assert!(
        out.status.success(),
        "{sql}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `evolve sql -c sql` fails with exit 1, printing nothing on stdout;
/// its stderr, which starts with `ERROR:  ` and `message`.
async fn sql_err(admin: &str, sql: &str, message: &str) -> String {
    let out = evolve(&["sql", "--admin", admin, "-c", sql]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{sql}\n{stderr}");
    assert_eq!(text(&out.stdout), "", "{sql}");
    assert!(
        stderr.starts_with(&format!("ERROR:  {message}")),
        "{sql}\nwanted ERROR:  {message}\ngot {stderr}"
    );
    stderr
}

/// The rows of the one `SHOW` in `sql`, as JSON objects.
async fn show(admin: &str, sql: &str) -> Vec<Value> {
    let out = evolve(&["sql", "--admin", admin, "--format", "json", "-c", sql]).await;
    assert!(out.status.success(), "{sql}: {}", text(&out.stderr));
    let response: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    response["results"][0]["rows"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no rows in {response}"))
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .query(&format!("SELECT t::text FROM ({sql}) t"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Slots and publications upstream whose name starts with
/// `evolve_replica`.
async fn replica_objects(up: &tokio_postgres::Client) -> Vec<String> {
    up.query(
        "SELECT 'slot ' || slot_name FROM pg_replication_slots
         WHERE slot_name LIKE 'evolve_replica%' AND database = current_database()
         UNION ALL
         SELECT 'publication ' || pubname FROM pg_publication WHERE pubname LIKE 'evolve_replica%'
         ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Waits until `sql` on `client` returns `want`.
async fn wait_rows(client: &tokio_postgres::Client, sql: &str, want: &[&str]) {
    let start = Instant::now();
    loop {
        let got = rows(client, sql).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{sql}: wanted {want:?}, got {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `SHOW REPLICAS` shows `name` in `state`; its row.
async fn wait_state(admin: &str, name: &str, state: &str) -> Value {
    let start = Instant::now();
    loop {
        let replicas = show(admin, "SHOW REPLICAS").await;
        if let Some(row) = replicas.iter().find(|r| r["name"] == name)
            && row["state"] == state
        {
            return row.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "replica {name} is not {state}: {replicas:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A TCP port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_and_transforms_through_evolve_sql() {
    let up_db = evolve_test::fresh_db("rcli_up").await;
    let node_db = evolve_test::fresh_db("rcli_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text, note text);
         CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, status text);
         CREATE TABLE nokey (a int);",
    )
    .await
    .unwrap();
    // The node is at an older version: orders has no `note` yet, and
    // customers has the name split in two.
    node.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text);
         CREATE TABLE customers (id int PRIMARY KEY, first_name text, last_name text, status text);",
    )
    .await
    .unwrap();

    // A role of the node that may not create tables there.
    let reader = format!("rcli_reader_{}", std::process::id());
    node.batch_execute(&format!(
        "CREATE ROLE {reader} LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC;"
    ))
    .await
    .unwrap();
    let reader_url = node_db.url.replacen("postgres@", &format!("{reader}@"), 1);

    let dir = temp_dir("e2e");
    let config = dir.join("evolve.toml");
    let dead = format!("postgres://postgres@127.0.0.1:{}/nowhere", closed_port());
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n\
             [connections.node_b_conn]\nurl = \"{}\"\n\
             [connections.dead_conn]\nurl = \"{dead}\"\n\
             [connections.reader_conn]\nurl = \"{reader_url}\"\n",
            up_db.url, node_db.url
        ),
    )
    .unwrap();
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    let config_arg = config.to_str().unwrap().to_string();

    assert_eq!(
        sql_ok(
            &admin,
            "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')"
        )
        .await,
        "CREATE SOURCE\n"
    );
    assert!(show(&admin, "SHOW REPLICAS").await.is_empty());

    // ---------------------------------------------------- bad CREATE REPLICA
    let stderr = sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION dead_conn \
         WITH (TABLES (public.orders))",
        "could not connect to connection \"dead_conn\" (",
    )
    .await;
    assert!(
        stderr.contains("HINT:  Check the connection's url"),
        "{stderr}"
    );
    let stderr = sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION reader_conn \
         WITH (TABLES (public.orders))",
        "the role of connection \"reader_conn\" cannot create evolve's tables on the node of replica \"node_b\"",
    )
    .await;
    assert!(
        stderr.contains("DETAIL:  ERROR 42501: permission denied"),
        "{stderr}"
    );
    sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION nope_conn",
        "connection \"nope_conn\" does not exist",
    )
    .await;
    sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE nosrc INTO POSTGRES CONNECTION node_b_conn",
        "source \"nosrc\" does not exist",
    )
    .await;
    let stderr = sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn \
         WITH (TABLES (public.orders, public.nope))",
        "upstream table \"public.nope\" does not exist in source \"src\"",
    )
    .await;
    assert!(stderr.contains("HINT:  Check the spelling"), "{stderr}");
    sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn \
         WITH (TABLES (public.nokey))",
        "upstream table \"public.nokey\" has no primary key or replica identity index",
    )
    .await;
    // The source's publication has no tables yet.
    sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn",
        "source \"src\" publishes no tables yet",
    )
    .await;
    sql_err(
        &admin,
        "CREATE REPLICA \"Node B\" FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn \
         WITH (TABLES (public.orders))",
        "invalid replica name \"Node B\"",
    )
    .await;
    // A syntax error points at the word.
    let stderr = sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONECTION node_b_conn",
        "syntax error at or near \"CONECTION\"",
    )
    .await;
    assert!(
        stderr.contains("HINT:  Did you mean CONNECTION?"),
        "{stderr}"
    );
    // Nothing was created, here or upstream.
    assert!(show(&admin, "SHOW REPLICAS").await.is_empty());
    assert_eq!(replica_objects(&up).await, Vec::<String>::new());

    // ------------------------------------------------------ CREATE REPLICA
    assert_eq!(
        sql_ok(
            &admin,
            "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn\n  \
             WITH (TABLES (public.orders, public.customers));"
        )
        .await,
        "CREATE REPLICA\n"
    );
    assert_eq!(
        replica_objects(&up).await,
        [
            "publication evolve_replica_node_b",
            "slot evolve_replica_node_b"
        ]
    );
    sql_err(
        &admin,
        "CREATE REPLICA node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn",
        "replica \"node_b\" already exists",
    )
    .await;
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE REPLICA IF NOT EXISTS node_b FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn",
    ])
    .await;
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("NOTICE:  replica \"node_b\" already exists, skipping"),
        "{}",
        text(&out.stderr)
    );
    let row = wait_state(&admin, "node_b", "running").await;
    assert_eq!(row["source"], "src");
    assert_eq!(row["node"], "node_b_conn");
    assert_eq!(row["tables"], "public.orders, public.customers");
    assert_eq!(row["conflicts"], 0);

    // ------------------------------------------------------------ resolvers
    assert_eq!(
        sql_ok(
            &admin,
            "ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'ignore';"
        )
        .await,
        "ALTER REPLICA\n"
    );
    let stderr = sql_err(
        &admin,
        "ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'skip'",
        "conflict resolver \"skip\" is not allowed for target_column_missing; use one of ignore, ignore_if_null, error",
    )
    .await;
    assert!(stderr.contains("\nLINE 1: "), "{stderr}");
    sql_err(
        &admin,
        "ALTER REPLICA node_b SET CONFLICT RESOLVER target_column_missing = 'drop_it'",
        "unknown conflict resolver \"drop_it\"; the resolvers are skip, error, ",
    )
    .await;
    sql_err(
        &admin,
        "ALTER REPLICA node_b SET CONFLICT RESOLVER column_missing = 'ignore'",
        "unknown conflict type \"column_missing\"; the conflict types are target_table_missing, ",
    )
    .await;
    let stderr = sql_err(
        &admin,
        "ALTER REPLICA node_x SET CONFLICT RESOLVER insert_exists = 'skip'",
        "replica \"node_x\" does not exist",
    )
    .await;
    assert!(
        stderr.contains("HINT:  SHOW REPLICAS lists the replicas."),
        "{stderr}"
    );
    let resolvers = show(&admin, "SHOW CONFLICT RESOLVERS FOR REPLICA node_b").await;
    assert_eq!(resolvers.len(), 8);
    let resolver = |rows: &[Value], conflict: &str| {
        rows.iter()
            .find(|r| r["conflict_type"] == conflict)
            .cloned()
            .unwrap()
    };
    let r = resolver(&resolvers, "target_column_missing");
    assert_eq!(
        (&r["resolver"], &r["default"], &r["allowed"]),
        (
            &Value::from("ignore"),
            &Value::from(false),
            &Value::from("ignore, ignore_if_null, error")
        )
    );
    let r = resolver(&resolvers, "insert_exists");
    assert_eq!(
        (&r["resolver"], &r["default"]),
        (&Value::from("update_if_newer"), &Value::from(true))
    );
    let table = sql_ok(&admin, "SHOW CONFLICT RESOLVERS FOR REPLICA node_b").await;
    assert!(
        table.contains(" target_column_missing       | ignore "),
        "{table}"
    );
    sql_err(
        &admin,
        "SHOW CONFLICT RESOLVERS FOR REPLICA node_x",
        "replica \"node_x\" does not exist",
    )
    .await;

    // ------------------------------------------------------- bad transforms
    let stderr = sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers \
         SET frist_name = split_part(NEW.name, ' ', 1)",
        "column \"frist_name\" of relation \"public.customers\" does not exist on the node of replica \"node_b\"",
    )
    .await;
    assert!(
        stderr.contains("DETAIL:  Its columns are id, first_name, last_name, status."),
        "{stderr}"
    );
    let stderr = sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers \
         SET first_name = split_part(NEW.nme, ' ', 1)",
        "transform \"split_name\" does not compile on the node of replica \"node_b\": column new.nme does not exist",
    )
    .await;
    assert!(stderr.contains("HINT:  "), "{stderr}");
    sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers \
         SET first_name = NEW.name WHERE NEW.name",
        "transform \"split_name\" does not compile on the node of replica \"node_b\": argument of WHERE must be type boolean",
    )
    .await;
    let stderr = sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.nope SET a = 1",
        "table \"public.nope\" is not replicated by replica \"node_b\"",
    )
    .await;
    assert!(
        stderr.contains("DETAIL:  Replica \"node_b\" replicates public.orders, public.customers."),
        "{stderr}"
    );
    sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_x FOR TABLE public.customers SET a = 1",
        "replica \"node_x\" does not exist",
    )
    .await;
    sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers SET id = 1",
        "transform \"split_name\" cannot set key column \"id\" of relation \"public.customers\"",
    )
    .await;
    sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers \
         SET first_name = split_part(NEW.name, ' ', 1",
        "syntax error at end of input",
    )
    .await;
    assert!(show(&admin, "SHOW TRANSFORMS").await.is_empty());

    // ------------------------------------------------------ CREATE TRANSFORM
    assert_eq!(
        sql_ok(
            &admin,
            "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.customers\n  \
             SET first_name = split_part(NEW.name, ' ', 1), last_name = split_part(NEW.name, ' ', 2)\n  \
             WHERE NEW.status <> 'test';"
        )
        .await,
        "CREATE TRANSFORM\n"
    );
    let transforms = show(&admin, "SHOW TRANSFORMS").await;
    assert_eq!(
        transforms,
        [serde_json::json!({
            "name": "split_name",
            "replica": "node_b",
            "table": "public.customers",
            "sets": "first_name = split_part(NEW.name, ' ', 1), last_name = split_part(NEW.name, ' ', 2)",
            "filter": "NEW.status <> 'test'",
        })]
    );
    sql_err(
        &admin,
        "CREATE TRANSFORM split_name ON REPLICA node_b FOR TABLE public.orders SET status = 'x'",
        "transform \"split_name\" already exists",
    )
    .await;
    sql_err(
        &admin,
        "CREATE TRANSFORM other ON REPLICA node_b FOR TABLE public.customers SET status = 'x'",
        "replica \"node_b\" has a transform for table \"public.customers\" already: split_name",
    )
    .await;

    // ---------------------------------------------------------- rows flow
    wait_state(&admin, "node_b", "running").await;
    up.batch_execute(
        "INSERT INTO orders VALUES (1, 'new', 'a note'), (2, 'paid', NULL);
         INSERT INTO customers VALUES (1, 'Ada Lovelace', 'ok'), (2, 'Test User', 'test');
         UPDATE orders SET note = 'changed', status = 'shipped' WHERE id = 2;",
    )
    .await
    .unwrap();
    // `note` is not on the node: ignored (target_column_missing = ignore);
    // the names are split by the transform; the test customer is dropped
    // by its filter.
    wait_rows(
        &node,
        "SELECT id, status FROM orders ORDER BY id",
        &["(1,new)", "(2,shipped)"],
    )
    .await;
    wait_rows(
        &node,
        "SELECT id, first_name, last_name, status FROM customers ORDER BY id",
        &["(1,Ada,Lovelace,ok)"],
    )
    .await;
    let history = rows(
        &node,
        "SELECT conflict_type, resolution, count(*) FROM evolve_conflict_history
         WHERE replica = 'node_b' AND table_name = 'orders' GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .await;
    assert_eq!(history, ["(target_column_missing,ignore,2)"]);
    let row = wait_state(&admin, "node_b", "running").await;
    assert!(row["conflicts"].as_u64().unwrap() >= 2, "{row}");
    assert!(row["position"].as_str().unwrap().contains('/'), "{row}");

    // `evolve status` (its JSON is `GET /status`) and `/metrics` count the
    // conflicts by type and resolution.
    let replica = support::object(&admin, "replica", "node_b")
        .await
        .expect("replica node_b in /status");
    assert_eq!(replica["state"], "running", "{replica}");
    assert_eq!(replica["source"], "src", "{replica}");
    assert_eq!(replica["connection"], "node_b_conn", "{replica}");
    // Both tables drop a column the node lacks: `note` of 2 orders and
    // `name` (split by the transform) of the 2 customers.
    let logged: i64 = node
        .query_one(
            "SELECT count(*) FROM evolve_conflict_history
             WHERE replica = 'node_b' AND conflict_type = 'target_column_missing'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(logged, 4);
    assert_eq!(
        replica["conflicts"]["target_column_missing"]["ignore"], 4,
        "{replica}"
    );
    let out = evolve(&["status", "--admin", &admin]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        printed.contains("target_column_missing ignore 4"),
        "{printed}"
    );
    let out = std::process::Command::new("curl")
        .args(["-sS", &format!("{admin}/metrics")])
        .output()
        .expect("run curl (installed by cargo xtask test)");
    let metrics = text(&out.stdout);
    assert!(
        metrics.contains(
            "evolve_pipeline_conflicts_total{kind=\"replica\",name=\"node_b\",conflict_type=\"target_column_missing\",resolution=\"ignore\"} 4"
        ),
        "{metrics}"
    );

    // ------------------------------- a large transaction goes in parts
    // Over 20,000 rows (`PART_ROWS`) in one upstream transaction reach the
    // node in parts (savepoints of one node transaction), and `/status`,
    // `/metrics` and `evolve status` count them. The rows are taken away again by a
    // second large transaction.
    up.batch_execute(
        "INSERT INTO orders SELECT g, 'bulk', NULL FROM generate_series(1000, 21000) g",
    )
    .await
    .unwrap();
    wait_rows(&node, "SELECT count(*) FROM orders", &["(20003)"]).await;
    up.batch_execute("DELETE FROM orders WHERE id >= 1000")
        .await
        .unwrap();
    wait_rows(&node, "SELECT count(*) FROM orders", &["(2)"]).await;
    let replica = support::object(&admin, "replica", "node_b")
        .await
        .expect("replica node_b in /status");
    let parts = replica["large_transaction_parts"].as_u64().unwrap_or(0);
    assert!(
        parts >= 2,
        "both large transactions went in parts: {replica}"
    );
    let out = std::process::Command::new("curl")
        .args(["-sS", &format!("{admin}/metrics")])
        .output()
        .expect("run curl (installed by cargo xtask test)");
    let metrics = text(&out.stdout);
    assert!(
        metrics.contains(&format!(
            "evolve_pipeline_large_transaction_parts_total{{kind=\"replica\",name=\"node_b\"}} {parts}"
        )),
        "{metrics}"
    );
    let out = evolve(&["status", "--admin", &admin]).await;
    assert!(
        text(&out.stdout).contains(&format!("{parts} parts of large transactions")),
        "{}",
        text(&out.stdout)
    );

    // ------------------------------------- a restart keeps the catalog
    assert!(
        pipeline.terminate().success(),
        "evolve pipeline run exited badly"
    );
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    wait_state(&admin, "node_b", "running").await;
    assert_eq!(show(&admin, "SHOW TRANSFORMS").await.len(), 1);
    up.batch_execute("INSERT INTO customers VALUES (3, 'Grace Hopper', 'ok')")
        .await
        .unwrap();
    wait_rows(
        &node,
        "SELECT id, first_name, last_name FROM customers ORDER BY id",
        &["(1,Ada,Lovelace)", "(3,Grace,Hopper)"],
    )
    .await;

    // ------------------------------------------------------ DROP TRANSFORM
    assert_eq!(
        sql_ok(&admin, "DROP TRANSFORM split_name").await,
        "DROP TRANSFORM\n"
    );
    sql_err(
        &admin,
        "DROP TRANSFORM split_name",
        "transform \"split_name\" does not exist",
    )
    .await;
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "DROP TRANSFORM IF EXISTS split_name",
    ])
    .await;
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("NOTICE:  transform \"split_name\" does not exist, skipping")
    );
    assert!(show(&admin, "SHOW TRANSFORMS").await.is_empty());

    // --------------------------------- RESET, a halt, and skipping it
    assert_eq!(
        sql_ok(
            &admin,
            "ALTER REPLICA node_b RESET CONFLICT RESOLVER target_column_missing"
        )
        .await,
        "ALTER REPLICA\n"
    );
    let r = resolver(
        &show(&admin, "SHOW CONFLICT RESOLVERS FOR REPLICA node_b").await,
        "target_column_missing",
    );
    assert_eq!(
        (&r["resolver"], &r["default"]),
        (&Value::from("ignore_if_null"), &Value::from(true))
    );
    wait_state(&admin, "node_b", "running").await;
    // A replica that is not halted has no transaction to skip: an LSN
    // ahead is refused, not armed for whatever transaction ends there.
    let out = evolve(&[
        "replicate",
        "skip",
        "node_b",
        "--lsn",
        "FF/FFFFFF",
        "--config",
        &config_arg,
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains(
            "the replica is not halted (its node records no halt), so there is no transaction to skip"
        ),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        rows(
            &node,
            "SELECT skip_lsn FROM evolve_replica_progress WHERE replica = 'node_b'"
        )
        .await,
        vec!["()".to_string()]
    );
    // With ignore_if_null a note the node cannot hold halts the replica.
    up.batch_execute("INSERT INTO orders VALUES (3, 'lost', 'a note the node lacks')")
        .await
        .unwrap();
    let row = wait_state(&admin, "node_b", "halted").await;
    let error = row["error"].as_str().unwrap().to_string();
    let lsn = error
        .split("evolve replicate skip node_b --lsn ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c == '`' || c.is_whitespace()).next())
        .unwrap_or_else(|| panic!("no skip command in {error}"))
        .to_string();
    assert!(error.contains("\"note\""), "{error}");
    // A bad LSN and an unknown replica are refused.
    let out = evolve(&[
        "replicate",
        "skip",
        "node_b",
        "--lsn",
        "nope",
        "--config",
        &config_arg,
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not an LSN"),
        "{}",
        text(&out.stderr)
    );
    // A position the replica has applied already is refused, as
    // ALTER SUBSCRIPTION ... SKIP refuses one behind its origin.
    let out = evolve(&[
        "replicate",
        "skip",
        "node_b",
        "--lsn",
        "0/1",
        "--config",
        &config_arg,
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("so the transaction finished at 0/1 is behind it"),
        "{}",
        text(&out.stderr)
    );
    let out = evolve(&[
        "replicate",
        "skip",
        "node_x",
        "--lsn",
        &lsn,
        "--config",
        &config_arg,
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("replica \"node_x\" does not exist"),
        "{}",
        text(&out.stderr)
    );
    let out = evolve(&[
        "replicate",
        "skip",
        "node_b",
        "--lsn",
        &lsn,
        "--config",
        &config_arg,
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "replica node_b will skip the upstream transaction finished at {lsn} (only a \
             transaction that finishes exactly there: SHOW REPLICAS shows the replica halted \
             until it has passed it)\n"
        )
    );
    wait_state(&admin, "node_b", "running").await;
    up.batch_execute("INSERT INTO orders VALUES (4, 'after', NULL)")
        .await
        .unwrap();
    // The skipped transaction's row is not there; the next one is.
    wait_rows(
        &node,
        "SELECT id, status FROM orders ORDER BY id",
        &["(1,new)", "(2,shipped)", "(4,after)"],
    )
    .await;

    // ------------------------- a halt the node's fix ends, nobody telling
    up.batch_execute("INSERT INTO orders VALUES (10, 'noted', 'a note')")
        .await
        .unwrap();
    let row = wait_state(&admin, "node_b", "halted").await;
    let error = row["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("fix the cause (the pipeline tries the transaction again by itself"),
        "{error}"
    );
    // The halt is logged once and counted, however often it is tried.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        rows(
            &node,
            "SELECT conflict_type, resolution, key::text FROM evolve_conflict_history
             WHERE replica = 'node_b' AND detail LIKE 'halted the replica%' ORDER BY id"
        )
        .await,
        vec![
            r#"(target_column_missing,ignore_if_null,"{""id"": ""3""}")"#.to_string(),
            r#"(target_column_missing,ignore_if_null,"{""id"": ""10""}")"#.to_string()
        ]
    );
    // Another LSN than the halt's is refused, naming the halt's.
    let out = evolve(&[
        "replicate",
        "skip",
        "node_b",
        "--lsn",
        "FF/FFFFFF",
        "--config",
        &config_arg,
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("not at FF/FFFFFF; to skip it: evolve replicate skip node_b --lsn "),
        "{}",
        text(&out.stderr)
    );
    // The node gets the column: the replica applies the row by itself.
    node.batch_execute("ALTER TABLE orders ADD COLUMN note text")
        .await
        .unwrap();
    wait_rows(
        &node,
        "SELECT id, note FROM orders WHERE id = 10",
        &["(10,\"a note\")"],
    )
    .await;
    wait_state(&admin, "node_b", "running").await;

    // ------------------------------------- DROP SOURCE while a replica reads it
    let stderr = sql_err(
        &admin,
        "DROP SOURCE src",
        "cannot drop source \"src\" because other objects depend on it",
    )
    .await;
    assert!(
        stderr.contains(
            "DETAIL:  replica \"node_b\" depends on it.\nHINT:  Drop the dependent objects first."
        ),
        "{stderr}"
    );
    assert_eq!(show(&admin, "SHOW SOURCES").await.len(), 1);
    wait_state(&admin, "node_b", "running").await;

    // --------------------------------------------------------- DROP REPLICA
    assert_eq!(
        rows(
            &node,
            "SELECT replica FROM evolve_replica_progress WHERE replica = 'node_b'"
        )
        .await,
        vec!["(node_b)".to_string()]
    );
    assert_eq!(
        sql_ok(&admin, "DROP REPLICA node_b;").await,
        "DROP REPLICA\n"
    );
    assert_eq!(replica_objects(&up).await, Vec::<String>::new());
    assert!(show(&admin, "SHOW REPLICAS").await.is_empty());
    // Its position on the node goes with it; its conflict history stays.
    assert_eq!(
        rows(
            &node,
            "SELECT replica FROM evolve_replica_progress WHERE replica = 'node_b'"
        )
        .await,
        Vec::<String>::new()
    );
    assert_ne!(
        rows(
            &node,
            "SELECT count(*) FROM evolve_conflict_history WHERE replica = 'node_b'"
        )
        .await,
        vec!["(0)".to_string()]
    );
    sql_err(
        &admin,
        "DROP REPLICA node_b",
        "replica \"node_b\" does not exist",
    )
    .await;
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "DROP REPLICA IF EXISTS node_b",
    ])
    .await;
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("NOTICE:  replica \"node_b\" does not exist, skipping"));
    // Nothing is applied any more.
    up.batch_execute("INSERT INTO orders VALUES (5, 'unseen', NULL)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        rows(&node, "SELECT id FROM orders WHERE id = 5").await,
        Vec::<String>::new()
    );

    // A replica with transforms: DROP REPLICA drops them with it; the
    // tables default to the source's publication's.
    sql_ok(
        &admin,
        "CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders)",
    )
    .await;
    sql_ok(
        &admin,
        "CREATE REPLICA node_c FROM SOURCE src INTO POSTGRES CONNECTION node_b_conn;
         CREATE TRANSFORM shout ON REPLICA node_c FOR TABLE public.orders SET status = upper(NEW.status);",
    )
    .await;
    let replicas = show(&admin, "SHOW REPLICAS").await;
    assert_eq!(replicas[0]["tables"], "public.orders");
    let out = evolve(&["sql", "--admin", &admin, "-c", "DROP REPLICA node_c"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("NOTICE:  drop cascades to transform shout"),
        "{}",
        text(&out.stderr)
    );
    assert!(show(&admin, "SHOW TRANSFORMS").await.is_empty());
    assert_eq!(replica_objects(&up).await, Vec::<String>::new());
    assert!(
        pipeline.terminate().success(),
        "evolve pipeline run exited badly"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `COPY DATA = true` with `ENABLED = false`: nothing is copied or
/// streamed until `ALTER REPLICA ... ENABLE`, so a resolver set in between
/// applies to the copy; the copy and the stream meet exactly; a restart
/// does not copy again; `DISABLE` stops applying and `ENABLE` resumes
/// where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_data_waits_for_enable_and_copies_through_the_resolvers() {
    let up_db = evolve_test::fresh_db("rcopy_up").await;
    let node_db = evolve_test::fresh_db("rcopy_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text, note text);
         INSERT INTO orders SELECT g, 'old', CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' || g END
         FROM generate_series(1, 300) g;",
    )
    .await
    .unwrap();
    // The node has no `note`, and a row of its own with key 1.
    node.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, status text);
         INSERT INTO orders VALUES (1, 'local');",
    )
    .await
    .unwrap();
    let dir = temp_dir("copy");
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n\
             [connections.copy_conn]\nurl = \"{}\"\n",
            up_db.url, node_db.url
        ),
    )
    .unwrap();
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    sql_ok(
        &admin,
        "CREATE SOURCE csrc FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')",
    )
    .await;
    assert_eq!(
        sql_ok(
            &admin,
            "CREATE REPLICA copy_c FROM SOURCE csrc INTO POSTGRES CONNECTION copy_conn \
             WITH (TABLES (public.orders), COPY DATA = true, ENABLED = false)"
        )
        .await,
        "CREATE REPLICA\n"
    );
    // Disabled: a publication, no slot yet, nothing on the node.
    let row = wait_state(&admin, "copy_c", "disabled").await;
    assert_eq!(row["position"], Value::Null, "{row}");
    assert_eq!(
        replica_objects(&up).await,
        ["publication evolve_replica_copy_c"]
    );
    up.batch_execute("INSERT INTO orders VALUES (301, 'while disabled', 'n301')")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rows(&node, "SELECT count(*) FROM orders").await, ["(1)"]);

    // The default target_column_missing (ignore_if_null) would halt on
    // the first note; the resolver set now applies to the copy.
    sql_ok(
        &admin,
        "ALTER REPLICA copy_c SET CONFLICT RESOLVER target_column_missing = 'ignore';
         ALTER REPLICA copy_c ENABLE;",
    )
    .await;
    wait_state(&admin, "copy_c", "running").await;
    up.batch_execute(
        "INSERT INTO orders VALUES (302, 'after', 'n302');
         UPDATE orders SET status = 'paid' WHERE id = 2;",
    )
    .await
    .unwrap();
    let upstream = rows(&up, "SELECT id, status FROM orders ORDER BY id").await;
    assert_eq!(upstream.len(), 302);
    let want: Vec<&str> = upstream.iter().map(String::as_str).collect();
    wait_rows(&node, "SELECT id, status FROM orders ORDER BY id", &want).await;
    let history = "SELECT conflict_type, resolution, count(*) FROM evolve_conflict_history
                   WHERE replica = 'copy_c' GROUP BY 1, 2 ORDER BY 1, 2";
    // Key 1 was on the node (updated: without track_commit_timestamp
    // update_if_newer updates); 202 rows had a note (200 copied, 301,
    // and 302 streamed; the update of 2 sends its note too: 203).
    assert_eq!(
        rows(&node, history).await,
        [
            "(insert_exists,update,1)",
            "(target_column_missing,ignore,203)"
        ]
    );
    assert_eq!(
        replica_objects(&up).await,
        [
            "publication evolve_replica_copy_c",
            "slot evolve_replica_copy_c"
        ]
    );

    // A restart streams on from the node's position: nothing is copied
    // again (a second copy would meet 302 existing keys).
    assert!(pipeline.terminate().success());
    let mut pipeline = Pipeline::start(&config);
    let admin = pipeline.url.clone();
    wait_state(&admin, "copy_c", "running").await;
    up.batch_execute("INSERT INTO orders VALUES (303, 'restarted', NULL)")
        .await
        .unwrap();
    wait_rows(
        &node,
        "SELECT status FROM orders WHERE id = 303",
        &["(restarted)"],
    )
    .await;
    assert_eq!(
        rows(&node, history).await,
        [
            "(insert_exists,update,1)",
            "(target_column_missing,ignore,203)"
        ]
    );

    // DISABLE stops applying; ENABLE resumes where it stopped.
    sql_ok(&admin, "ALTER REPLICA copy_c DISABLE").await;
    wait_state(&admin, "copy_c", "disabled").await;
    up.batch_execute("INSERT INTO orders VALUES (304, 'held', NULL)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        rows(&node, "SELECT id FROM orders WHERE id = 304").await,
        Vec::<String>::new()
    );
    sql_ok(&admin, "ALTER REPLICA copy_c ENABLE").await;
    wait_rows(
        &node,
        "SELECT status FROM orders WHERE id = 304",
        &["(held)"],
    )
    .await;
    sql_err(
        &admin,
        "ALTER REPLICA nope ENABLE",
        "replica \"nope\" does not exist",
    )
    .await;

    assert_eq!(
        sql_ok(&admin, "DROP REPLICA copy_c").await,
        "DROP REPLICA\n"
    );
    assert_eq!(replica_objects(&up).await, Vec::<String>::new());
    assert!(pipeline.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}
