//! The admin API in process, through its router (the same code path as
//! over a socket): statements against real clusters, status and metrics.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use common::*;
use evolve_pipeline::Pipeline;
use evolve_pipeline::admin::router;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn call(router: &Router, method: &str, uri: &str, body: Vec<u8>) -> (u16, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/sql")
        .body(Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn sql(router: &Router, text: &str) -> (u16, Value) {
    let (status, body) = call(router, "POST", "/sql", text.as_bytes().to_vec()).await;
    let value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    (status, value)
}

/// The `rows` of the one `SHOW` in `text`.
async fn show(router: &Router, text: &str) -> Vec<Value> {
    let (status, body) = sql(router, text).await;
    assert_eq!(status, 200, "{body}");
    body["results"][0]["rows"].as_array().unwrap().clone()
}

async fn catalog(router: &Router) -> [usize; 4] {
    let mut counts = [0; 4];
    for (i, what) in ["SOURCES", "TABLES", "MATERIALIZED VIEWS", "SINKS"]
        .iter()
        .enumerate()
    {
        counts[i] = show(router, &format!("SHOW {what}")).await.len();
    }
    counts
}

fn statuses(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_create_objects_show_lists_them_and_status_reports_them() {
    let env = env("admin_create").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric, note text);
         INSERT INTO orders VALUES (1, 'ada', 10.5, NULL), (2, 'bob', 3, 'x');
         CREATE VIEW orders_doc AS SELECT id, customer, total FROM orders;",
    )
    .await
    .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let app = router(pipeline.clone());
    let src = &env.source;

    let (status, body) = sql(
        &app,
        &format!(
            "CREATE SOURCE {src} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');
             create table orders_v1 from source {src} (reference orders) with (exclude columns (note));
             CREATE MATERIALIZED VIEW orders_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;
             CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink (TABLE 'public.orders_json');"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("error").is_none(), "{body}");
    assert_eq!(
        statuses(&body),
        [
            "CREATE SOURCE",
            "CREATE TABLE",
            "CREATE MATERIALIZED VIEW",
            "CREATE SINK"
        ]
    );
    assert_eq!(
        body["results"][1]["statement"],
        format!(
            "CREATE TABLE orders_v1 FROM SOURCE {src} (REFERENCE public.orders) WITH (EXCLUDE COLUMNS (note))"
        )
    );

    let (status, body) = sql(
        &app,
        "SHOW SOURCES; SHOW TABLES; SHOW MATERIALIZED VIEWS; SHOW SINKS",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(statuses(&body), ["SHOW"; 4]);
    let r = &body["results"];
    assert_eq!(
        r[0]["columns"],
        json!(["name", "connection", "publication", "slot"])
    );
    assert_eq!(
        r[0]["rows"],
        json!([{"name": src, "connection": "up", "publication": "evolve_pub", "slot": format!("evolve_{src}")}])
    );
    assert_eq!(r[1]["rows"][0]["name"], "orders_v1");
    assert_eq!(r[1]["rows"][0]["reference"], "public.orders");
    assert_eq!(r[1]["rows"][0]["key"], "id");
    assert_eq!(r[1]["rows"][0]["columns"], 3, "note is excluded");
    assert_eq!(
        r[2]["rows"],
        json!([{"name": "orders_json", "table": "orders_v1", "absorb": "manual"}])
    );
    assert_eq!(
        r[3]["rows"],
        json!([{"name": "orders_sink", "from": "orders_json", "connection": "sink", "table": "public.orders_json"}])
    );

    // Running: status shows every object, the table running with its
    // documents; metrics say the same.
    let running = Running::start(pipeline.clone());
    // The documents leave `note` out: compare with a view without it.
    wait_equal(
        &up,
        &sink,
        "orders_doc",
        "orders_json",
        Duration::from_secs(30),
    )
    .await;
    let mut report = Value::Null;
    wait_until(
        "every object in /status to be running",
        Duration::from_secs(20),
        async || {
            let (status, text) = call(&app, "GET", "/status", Vec::new()).await;
            assert_eq!(status, 200, "{text}");
            report = serde_json::from_str(&text).unwrap();
            report["objects"]
                .as_array()
                .unwrap()
                .iter()
                .all(|o| o["state"] == "running")
        },
    )
    .await;
    let objects = report["objects"].as_array().unwrap();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["source", "table", "materialized view", "sink"],
        "{report}"
    );
    for o in objects {
        assert_eq!(o["state"], "running", "{report}");
    }
    assert_eq!(objects[0]["connection"], "up");
    assert!(objects[0]["lag_bytes"].is_u64(), "{report}");
    assert!(objects[0]["retained_wal_bytes"].is_i64(), "{report}");
    assert_eq!(objects[1]["documents"], 2, "{report}");
    assert_eq!(objects[1]["rows_copied"], 2, "{report}");
    assert_eq!(objects[2]["documents"], 2, "{report}");
    assert_eq!(objects[3]["target"], "public.orders_json");
    assert!(!report.to_string().contains("postgres://"), "{report}");

    // Row changes show as a rate, and the lag of their apply.
    up.batch_execute(
        "INSERT INTO orders (id, customer, total) SELECT i, 'new', i FROM generate_series(100, 149) i",
    )
    .await
    .unwrap();
    let mut report = Value::Null;
    wait_until(
        "a row rate above 0 in /status",
        Duration::from_secs(20),
        async || {
            let (_, text) = call(&app, "GET", "/status", Vec::new()).await;
            report = serde_json::from_str(&text).unwrap();
            report["objects"][0]["rows_per_second"]
                .as_f64()
                .unwrap_or(0.0)
                > 0.0
        },
    )
    .await;
    // 50 rows within the 10 s window, over at least one second; applied
    // well within seconds of their commit.
    let source = &report["objects"][0];
    let rate = source["rows_per_second"].as_f64().unwrap();
    assert!(rate <= 50.0, "{report}");
    let lag = source["lag_seconds"].as_f64().unwrap();
    assert!((0.0..10.0).contains(&lag), "{report}");

    let (status, metrics) = call(&app, "GET", "/metrics", Vec::new()).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(
            "evolve_pipeline_object_state{kind=\"table\",name=\"orders_v1\",state=\"running\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "evolve_pipeline_documents{kind=\"materialized view\",name=\"orders_json\"} 52"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("evolve_pipeline_statements_total{result=\"ok\"} 8"),
        "{metrics}"
    );
    assert!(!metrics.contains("postgres://"), "{metrics}");

    // Dropping in dependency order, while running; IF EXISTS of a missing
    // object is a notice.
    let (status, body) = sql(
        &app,
        &format!(
            "DROP SINK orders_sink; DROP MATERIALIZED VIEW orders_json; DROP TABLE orders_v1;
             DROP SOURCE {src}; DROP SINK IF EXISTS orders_sink"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        statuses(&body),
        [
            "DROP SINK",
            "DROP MATERIALIZED VIEW",
            "DROP TABLE",
            "DROP SOURCE",
            "DROP SINK"
        ]
    );
    assert_eq!(
        body["results"][4]["notice"],
        "sink \"orders_sink\" does not exist, skipping"
    );
    assert_eq!(catalog(&app).await, [0, 0, 0, 0]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_postgres_shaped_and_leave_the_catalog_unchanged() {
    let env = env("admin_errors").await;
    let up = connect(&env.up.url).await;
    up.batch_execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric);")
        .await
        .unwrap();
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    let app = router(pipeline);
    let src = &env.source;

    // A misspelled keyword: 400 with a hint; nothing applied, not even the
    // valid statement before it (the whole text is parsed first).
    let (status, body) = sql(
        &app,
        &format!(
            "CREATE SOURCE {src} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');\n\
             CREAT TABLE orders_v1 FROM SOURCE {src} (REFERENCE public.orders);"
        ),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], "42601", "{body}");
    assert_eq!(error["message"], "syntax error at or near \"CREAT\"");
    assert_eq!(error["hint"], "Did you mean CREATE?");
    assert_eq!(error["position"]["line"], 2);
    assert_eq!(error["position"]["column"], 1);
    assert_eq!(body["results"], json!([]));
    assert_eq!(catalog(&app).await, [0, 0, 0, 0]);

    // REFRESH REFERENCES of a source that does not exist.
    let (status, body) = sql(&app, "ALTER SOURCE nosuch REFRESH REFERENCES").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "42704", "{body}");
    assert_eq!(body["error"]["message"], "source \"nosuch\" does not exist");
    assert_eq!(catalog(&app).await, [0, 0, 0, 0]);

    // An unknown connection: nothing created upstream or in the catalog.
    let (status, body) = sql(
        &app,
        &format!("CREATE SOURCE {src} FROM POSTGRES CONNECTION nope (PUBLICATION 'evolve_pub')"),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "42704");
    assert_eq!(
        body["error"]["message"],
        "connection \"nope\" does not exist"
    );
    assert!(
        body["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("sink, up"),
        "{body}"
    );
    assert!(body["error"]["hint"].is_string(), "{body}");
    assert_eq!(catalog(&app).await, [0, 0, 0, 0]);

    // A reference to a source that does not exist: the statements before it
    // are applied, it is not, and the error names it.
    let (status, body) = sql(
        &app,
        &format!(
            "CREATE SOURCE {src} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');
CREATE TABLE orders_v1 FROM SOURCE nope (REFERENCE public.orders);
CREATE MATERIALIZED VIEW orders_json AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;"
        ),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(statuses(&body), ["CREATE SOURCE"]);
    let error = &body["error"];
    assert_eq!(error["code"], "42704", "{body}");
    assert_eq!(error["message"], "source \"nope\" does not exist");
    assert_eq!(
        error["hint"],
        "SHOW SOURCES lists the sources there are; CREATE SOURCE makes one."
    );
    assert_eq!(
        error["statement"],
        "CREATE TABLE orders_v1 FROM SOURCE nope (REFERENCE public.orders)"
    );
    assert_eq!(error["position"]["line"], 2);
    assert_eq!(catalog(&app).await, [1, 0, 0, 0]);

    // An upstream table that does not exist, and a view over a table that
    // does not exist: refused, catalog unchanged.
    let (status, body) = sql(
        &app,
        &format!("CREATE TABLE orders_v1 FROM SOURCE {src} (REFERENCE public.ordres)"),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "42P01", "{body}");
    assert!(body["error"]["hint"].is_string(), "{body}");
    // A partitioned table or a view: named for what it is, with the way
    // out.
    up.batch_execute(
        "CREATE TABLE parted (id int, r int, PRIMARY KEY (id, r)) PARTITION BY LIST (r);
         CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1);
         CREATE VIEW orders_view AS SELECT * FROM orders;",
    )
    .await
    .unwrap();
    for (reference, what) in [
        (
            "public.parted",
            "is a partitioned table, which logical replication does not stream as a table; its changes are published per partition",
        ),
        (
            "public.orders_view",
            "is a view, which logical replication does not stream as a table; reference the tables it reads",
        ),
    ] {
        let (status, body) = sql(
            &app,
            &format!("CREATE TABLE t_v1 FROM SOURCE {src} (REFERENCE {reference})"),
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["code"], "42809", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(what), "{message}");
    }
    let (status, body) = sql(
        &app,
        "CREATE MATERIALIZED VIEW v AS SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v9 t",
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "table \"orders_v9\" does not exist"
    );
    assert_eq!(catalog(&app).await, [1, 0, 0, 0]);

    // Exists already: 409.
    let (status, body) = sql(
        &app,
        &format!("CREATE SOURCE {src} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub')"),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "42710");

    // Not UTF-8, an unknown endpoint.
    let (status, body) = call(&app, "POST", "/sql", vec![0xff, 0xfe]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("UTF-8"), "{body}");
    let (status, _) = call(&app, "GET", "/nope", Vec::new()).await;
    assert_eq!(status, 404);
    // A known endpoint, another method: said, in the API's error form.
    let (status, body) = call(&app, "DELETE", "/status", Vec::new()).await;
    assert_eq!(status, 405, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        body["error"]["message"],
        "DELETE is not a method of /status"
    );

    let (status, body) = sql(&app, &format!("DROP SOURCE {src}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(catalog(&app).await, [0, 0, 0, 0]);
}
