//! The Kafka sink against what others left on the cluster and in the
//! registry, with a real Apache Kafka broker and evolve's own schema
//! registry: a progress topic created by someone else that would forget
//! positions, and a subject that already holds a schema the sink's is not
//! compatible with. Each ends with an error naming the object and the way
//! out, and once that is taken, with every change once.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use evolve_test::Record;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use serde_json::Value;
use support::*;

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap()
}

/// Sets `config` of topic `topic` (the others keep their value).
async fn set_topic_config(bootstrap: &str, topic: &str, config: &[(&str, &str)]) {
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in config {
        alter = alter.set(k, v);
    }
    for r in admin(bootstrap)
        .alter_configs(&[alter], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
}

/// Waits until sink `name` is retrying with an error that contains
/// `needle`; that error.
async fn wait_sink_error(admin: &str, name: &str, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let sink = object(admin, "sink", name).await.unwrap();
        if let Some(error) = sink["error"].as_str()
            && sink["state"] == "retrying"
            && error.contains(needle)
        {
            return error.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "sink {name} not retrying with {needle:?} after 90 s: {sink}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Table `orders` with `rows` rows, and source `source`, its table and
/// interface `orders_json`.
async fn orders(env: &Env, admin: &str, source: &str, rows: i32) {
    env.up
        .batch_execute(&format!(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, {rows}) i;"
        ))
        .await
        .unwrap();
    sql_ok(
        admin,
        &[
            "-c",
            &format!(
                "CREATE SOURCE {source} FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
                 CREATE TABLE orders_v1 FROM SOURCE {source} (REFERENCE public.orders);
                 CREATE MATERIALIZED VIEW orders_json AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;"
            ),
        ],
    )
    .await;
}

/// The progress topic created beforehand by someone else with the
/// broker's default `cleanup.policy=delete` (7 days' retention): the
/// broker would delete the position of a sink that writes nothing for a
/// week, and the sink would then write its whole interface again. CREATE
/// SINK refuses it, and a running sink whose progress topic is altered so
/// stops, retrying, both with the way out; once the topic is compacted,
/// every change arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_topic_that_would_delete_positions_is_refused() {
    // A broker of its own: the progress topic is the cluster's.
    let kafka = tokio::task::spawn_blocking(evolve_test::Kafka::start)
        .await
        .unwrap()
        .unwrap();
    let bootstrap = kafka.bootstrap();
    for r in admin(&bootstrap)
        .create_topics(
            &[
                NewTopic::new("_evolve_sink_progress", 1, TopicReplication::Fixed(1))
                    .set("cleanup.policy", "delete"),
            ],
            &AdminOptions::new(),
        )
        .await
        .unwrap()
    {
        r.unwrap();
    }
    let env = env("kafka_progress_policy").await;
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!("[connections.k]\nurl = \"{}\"\n", kafka.url()));
    std::fs::write(&env.config, config).unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    orders(&env, &url, "src_progress_policy", 20).await;

    let topic = "orders_progress_policy";
    let create =
        format!("CREATE SINK pp FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}')");
    let out = evolve(&["sql", "--admin", &url, "-c", &create]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let e = text(&out.stderr);
    assert!(
        e.starts_with(
            "ERROR:  Kafka topic \"_evolve_sink_progress\", where sink \"pp\" keeps its position, is not compacted (cleanup.policy=delete, retention.ms=604800000)"
        ) && e.contains(
            "--entity-name _evolve_sink_progress --add-config cleanup.policy=compact"
        ),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    let shown = sql_ok(&url, &["-c", "SHOW SINKS"]).await;
    assert!(!shown.contains("pp"), "{shown}");

    set_topic_config(
        &bootstrap,
        "_evolve_sink_progress",
        &[("cleanup.policy", "compact")],
    )
    .await;
    sql_ok(&url, &["-c", &create]).await;
    wait_topic_records(&bootstrap, topic, 20).await;

    // Altered back under the sink: at its next start it stops, retrying.
    set_topic_config(
        &bootstrap,
        "_evolve_sink_progress",
        &[("cleanup.policy", "delete"), ("retention.ms", "86400000")],
    )
    .await;
    pipeline.terminate();
    let pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    let error = wait_sink_error(&url, "pp", "is not compacted").await;
    assert!(
        error.starts_with(
            "ERROR: Kafka topic \"_evolve_sink_progress\", where sink \"pp\" keeps its position, is not compacted (cleanup.policy=delete, retention.ms=86400000)"
        ),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
    env.up
        .batch_execute("UPDATE orders SET total = 0 WHERE id <= 5")
        .await
        .unwrap();
    // Records kept for ever are as good as compacted.
    set_topic_config(
        &bootstrap,
        "_evolve_sink_progress",
        &[("retention.ms", "-1")],
    )
    .await;
    let all = wait_topic_records(&bootstrap, topic, 25).await;
    assert_eq!(folded(&all), upstream_documents(&env).await);
    drop(pipeline);
    drop(kafka);
}

/// Confluent's registry API, in one plain HTTP/1.1 request: the status
/// code and the body.
fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let authority = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// `<topic>-value` already holds a schema the sink's value schema is not
/// compatible with (another producer's): CREATE SINK fails with one line
/// naming the subject, the registry's reason and the ways out; sinking
/// into another topic works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_with_an_incompatible_schema_names_the_subject_and_the_way_out() {
    let kafka = tokio::task::spawn_blocking(evolve_test::kafka)
        .await
        .unwrap();
    let env = env("kafka_subject_incompatible").await;
    let (registry, registry_url) = serve_registry(&env, "127.0.0.1:0", &[]);
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "[connections.k]\nurl = \"{}\"\n[connections.csr]\nurl = \"{registry_url}\"\n",
        kafka.url()
    ));
    std::fs::write(&env.config, config).unwrap();
    let other = serde_json::json!({
        "schema": serde_json::json!({
            "type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "int"}],
        })
        .to_string()
    })
    .to_string();
    let (status, body) = http(
        &registry_url,
        "POST",
        "/subjects/orders_taken-value/versions",
        &other,
    );
    assert_eq!(status, 200, "{body}");

    let pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    orders(&env, &url, "src_subject_incompatible", 5).await;
    // The progress topic is not a sink's topic.
    let out = evolve(&[
        "sql",
        "--admin",
        &url,
        "-c",
        "CREATE SINK progress FROM orders_json INTO KAFKA CONNECTION k (TOPIC '_evolve_sink_progress')",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr),
        "ERROR:  Kafka topic \"_evolve_sink_progress\" of sink \"progress\" is where every Kafka sink keeps its position; choose another TOPIC\n"
    );
    let out = evolve(&[
        "sql",
        "--admin",
        &url,
        "-c",
        "CREATE SINK taken FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'orders_taken') \
         FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let e = text(&out.stderr);
    let first = e.lines().next().unwrap();
    assert_eq!(
        first,
        "ERROR:  subject \"orders_taken-value\" of schema registry connection \"csr\" holds schemas that the sink's schema is not compatible with; sink into another TOPIC, or, when no consumer needs the subject's schemas any more, delete the subject or set its compatibility to NONE"
    );
    assert!(
        e.contains(
            "DETAIL:  the registry answered 409 Conflict: Schema being registered is incompatible"
        ),
        "{e}"
    );
    let shown = sql_ok(&url, &["-c", "SHOW SINKS"]).await;
    assert!(!shown.contains("taken"), "{shown}");
    sql_ok(
        &url,
        &[
            "-c",
            "CREATE SINK fresh FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'orders_fresh') \
             FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
        ],
    )
    .await;
    wait_topic_records(&kafka.bootstrap(), "orders_fresh", 5).await;
    drop(pipeline);
    drop(registry);
}

/// Points connection `k` of the env's evolve.toml at `url`.
fn point_k_at(env: &Env, url: &str) {
    let config = std::fs::read_to_string(&env.config).unwrap();
    let mut out = String::new();
    let mut in_k = false;
    for line in config.lines() {
        if line.starts_with('[') {
            in_k = line == "[connections.k]";
        }
        if in_k && line.starts_with("url = ") {
            out.push_str(&format!("url = \"{url}\"\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    std::fs::write(&env.config, out).unwrap();
}

/// `DROP SINK` while the cluster cannot be reached leaves the sink's last
/// position in the progress topic (its tombstone is best effort, so that
/// a sink whose cluster is gone can be dropped). A sink created again
/// under that name, from another interface into the same topic, must
/// write its interface anew rather than resume at the dropped sink's
/// position with none of its documents loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_created_again_after_a_drop_that_missed_the_cluster_loads_anew() {
    let kafka = tokio::task::spawn_blocking(evolve_test::kafka)
        .await
        .unwrap();
    let env = env("kafka_drop_unreachable").await;
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!("[connections.k]\nurl = \"{}\"\n", kafka.url()));
    std::fs::write(&env.config, config).unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    orders(&env, &url, "src_drop_unreachable", 20).await;
    let topic = "orders_drop_unreachable";
    sql_ok(
        &url,
        &[
            "-c",
            &format!(
                "CREATE TABLE totals_v1 FROM SOURCE src_drop_unreachable (REFERENCE public.orders)
                   WITH (EXCLUDE COLUMNS (customer));
                 CREATE MATERIALIZED VIEW totals_json AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM totals_v1 t;
                 CREATE SINK again FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"
            ),
        ],
    )
    .await;
    wait_topic_records(&kafka.bootstrap(), topic, 20).await;

    // The cluster unreachable while the sink is dropped.
    pipeline.terminate();
    point_k_at(&env, "kafka://127.0.0.1:9");
    let mut pipeline = Pipeline::start(&env.config);
    sql_ok(&pipeline.url, &["-c", "DROP SINK again"]).await;
    pipeline.terminate();
    point_k_at(&env, &kafka.url());
    let pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    wait_all_running(&url).await;
    sql_ok(
        &url,
        &[
            "-c",
            &format!(
                "CREATE SINK again FROM totals_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"
            ),
        ],
    )
    .await;
    wait_topic_records(&kafka.bootstrap(), topic, 40).await;
    env.up
        .batch_execute("UPDATE orders SET total = 0 WHERE id = 1")
        .await
        .unwrap();
    let all = wait_topic_records(&kafka.bootstrap(), topic, 41).await;
    let anew = &all[20..];
    assert!(
        anew.iter().all(|r| {
            let v: Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
            v.get("customer").is_none() && v.get("total").is_some()
        }),
        "records of the old interface after the sink was created again: {:?}",
        anew.iter().map(Record::value_text).collect::<Vec<_>>()
    );
    let totals: BTreeMap<String, Value> = upstream_rows(&env.up)
        .await
        .into_iter()
        .map(|(k, d)| {
            let k: Value = serde_json::from_str(&k).unwrap();
            let d: Value = serde_json::from_str(&d).unwrap();
            (
                k.to_string(),
                serde_json::json!({"id": d["id"], "total": d["total"]}),
            )
        })
        .collect();
    assert_eq!(folded(anew), totals);
    drop(pipeline);
}

/// The broker killed (SIGKILL) and started again while upstream
/// transactions keep coming: the sink retries, aborts what was open, and
/// every upstream transaction arrives exactly once, in order per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_crash_under_writes_loses_and_repeats_nothing() {
    // A broker of its own, to crash.
    let mut kafka = tokio::task::spawn_blocking(evolve_test::Kafka::start)
        .await
        .unwrap()
        .unwrap();
    let bootstrap = kafka.bootstrap();
    let env = env("kafka_broker_crash").await;
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!("[connections.k]\nurl = \"{}\"\n", kafka.url()));
    std::fs::write(&env.config, config).unwrap();
    let pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    orders(&env, &url, "src_broker_crash", 30).await;
    let topic = "orders_broker_crash";
    sql_ok(
        &url,
        &[
            "-c",
            &format!(
                "CREATE SINK crash FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}')"
            ),
        ],
    )
    .await;
    wait_topic_records(&bootstrap, topic, 30).await;

    let writes = 150;
    let writer = async {
        for i in 0..writes {
            env.up
                .batch_execute(&format!(
                    "UPDATE orders SET total = total + 1 WHERE id = {}",
                    i % 30 + 1
                ))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    };
    let crash = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tokio::task::spawn_blocking(move || {
            kafka.restart().unwrap();
            kafka
        })
        .await
        .unwrap()
    };
    let ((), kafka) = tokio::join!(writer, crash);
    let all = wait_topic_records(&bootstrap, topic, 30 + writes).await;
    let mut seen = std::collections::HashSet::new();
    let mut last: BTreeMap<String, f64> = BTreeMap::new();
    for r in &all {
        let key = r.key_text();
        let position = r
            .headers
            .iter()
            .find(|(k, _)| k == "evolve-position")
            .map(|(_, v)| text(v))
            .unwrap();
        assert!(seen.insert((key.clone(), position)), "{key} twice: {all:?}");
        let v: Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        let total = v["total"].as_f64().unwrap();
        if let Some(before) = last.insert(key.clone(), total) {
            assert!(total == before + 1.0, "{key}: {before} then {total}");
        }
    }
    assert_eq!(folded(&all), upstream_documents(&env).await);
    drop(pipeline);
    drop(kafka);
}
