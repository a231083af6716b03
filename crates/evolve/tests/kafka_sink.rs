//! `CREATE SINK ... INTO KAFKA` against a real Apache Kafka broker (the
//! harness's, `evolve_test::kafka`), driven as users drive it: `evolve
//! pipeline run` as a child, `evolve sql`, and a `read_committed` consumer
//! reading the topic to its end. Every test counts what it reads: records,
//! tombstones, and duplicates (which must be none).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use evolve_test::Record;
use serde_json::Value;
use support::*;

/// The shared broker, started off the async threads (it takes a while).
async fn broker() -> &'static evolve_test::Kafka {
    tokio::task::spawn_blocking(evolve_test::kafka)
        .await
        .unwrap()
}

/// Adds connections `k` (the broker) and `dead` (a port nobody listens on)
/// to the env's evolve.toml.
async fn with_kafka(env: &Env) {
    let kafka = broker().await;
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "[connections.k]\nurl = \"{}\"\n[connections.dead]\nurl = \"kafka://127.0.0.1:9\"\n",
        kafka.url()
    ));
    std::fs::write(&env.config, config).unwrap();
}

/// Every committed record of `topic` on the shared broker.
async fn records(topic: &str) -> Vec<Record> {
    topic_records(&evolve_test::kafka().bootstrap(), topic).await
}

/// Waits until `topic` on the shared broker has `n` committed records,
/// then checks that no more come for a moment.
async fn wait_records(topic: &str, n: usize) -> Vec<Record> {
    wait_topic_records(&evolve_test::kafka().bootstrap(), topic, n).await
}

/// The record's `evolve-position` header.
fn position(r: &Record) -> String {
    r.headers
        .iter()
        .find(|(k, _)| k == "evolve-position")
        .map(|(_, v)| text(v))
        .unwrap_or_else(|| panic!("no evolve-position header: {r:?}"))
}

/// Records whose (key, position) was seen before: a change written twice.
fn duplicates(records: &[Record]) -> usize {
    let mut seen = HashMap::new();
    records
        .iter()
        .filter(|r| seen.insert((r.key_text(), position(r)), ()).is_some())
        .count()
}

/// Source `src` (its slot named after `source`: slots are the cluster's,
/// shared by the tests), table, interface, and the statement `sink`.
async fn setup(env: &Env, admin: &str, source: &str, sink: &str) {
    sql_ok(
        admin,
        &[
            "-c",
            &format!(
                "CREATE SOURCE {source} FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
                 CREATE TABLE orders_v1 FROM SOURCE {source} (REFERENCE public.orders);
                 CREATE MATERIALIZED VIEW orders_json AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;
                 {sink}"
            ),
        ],
    )
    .await;
    let _ = env;
}

/// ENVELOPE UPSERT: the initial load, then inserts, updates and deletes,
/// each upstream transaction once; a delete is a tombstone; the topic
/// folds to exactly the upstream rows. SHOW SINKS and /status show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_envelope_load_and_changes() {
    let env = env("kafka_upsert").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 100) i;",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let topic = "orders_upsert";
    setup(
        &env,
        &admin,
        "src_upsert",
        &format!(
            "CREATE SINK orders_kafka FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}') ENVELOPE UPSERT;"
        ),
    )
    .await;
    let loaded = wait_records(topic, 100).await;
    assert_eq!(folded(&loaded), upstream_documents(&env).await);
    // One load: one position for all of it.
    let load_position = position(&loaded[0]);
    assert!(loaded.iter().all(|r| position(r) == load_position));
    for i in 101..=110 {
        env.up
            .batch_execute(&format!("INSERT INTO orders VALUES ({i}, 'new', 1)"))
            .await
            .unwrap();
    }
    env.up
        .batch_execute("UPDATE orders SET total = 99 WHERE id <= 5")
        .await
        .unwrap();
    for i in 6..=8 {
        env.up
            .batch_execute(&format!("DELETE FROM orders WHERE id = {i}"))
            .await
            .unwrap();
    }
    let all = wait_records(topic, 100 + 10 + 5 + 3).await;
    let tombstones: Vec<String> = all
        .iter()
        .filter(|r| r.value.is_none())
        .map(Record::key_text)
        .collect();
    assert_eq!(
        tombstones,
        [r#"{"id":6}"#, r#"{"id":7}"#, r#"{"id":8}"#],
        "one tombstone per delete"
    );
    assert_eq!(duplicates(&all), 0);
    assert_eq!(folded(&all), upstream_documents(&env).await);
    // The five updates were one upstream transaction: one position.
    let updates: Vec<&Record> = all[110..115].iter().collect();
    assert!(updates.iter().all(|r| position(r) == position(updates[0])));
    assert_eq!(
        json(updates[0].value.as_deref().unwrap()),
        serde_json::json!({"id": 1, "customer": "c1", "total": 99.00})
    );

    let shown = sql_ok(&admin, &["-c", "SHOW SINKS"]).await;
    assert!(
        shown.contains(&format!("topic '{topic}' (json, upsert)")),
        "{shown}"
    );
    let sink = object(&admin, "sink", "orders_kafka").await.unwrap();
    assert_eq!(sink["state"], "running", "{sink}");
    assert_eq!(sink["target"], format!("topic '{topic}' (json, upsert)"));

    // A record for the sink in the progress topic that evolve did not
    // write: the sink waits with the reason, and writes nothing (read as
    // no position, it would write the whole interface again).
    let mut pipeline = pipeline;
    pipeline.terminate();
    let written = all.len();
    produce_raw(
        "_evolve_sink_progress",
        b"orders_kafka",
        b"{\"offset\": 42}",
    )
    .await;
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let start = Instant::now();
    let error = loop {
        let sink = object(&admin, "sink", "orders_kafka").await.unwrap();
        if sink["state"] == "retrying" {
            break sink["error"].as_str().unwrap().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "sink not retrying: {sink}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        error.contains("holds no position evolve wrote")
            && error.contains("DROP SINK and CREATE SINK"),
        "{error}"
    );
    env.up
        .batch_execute("INSERT INTO orders VALUES (200, 'late', 1)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(records(topic).await.len(), written, "the sink wrote anyway");
    // The way out: the sink dropped and created again writes the
    // interface anew (107 + 1 rows), then follows it.
    sql_ok(
        &admin,
        &[
            "-c",
            &format!(
                "DROP SINK orders_kafka; CREATE SINK orders_kafka FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}') ENVELOPE UPSERT;"
            ),
        ],
    )
    .await;
    let again = wait_records(topic, written + 108).await;
    assert_eq!(folded(&again), upstream_documents(&env).await);
    let sink = object(&admin, "sink", "orders_kafka").await.unwrap();
    assert_eq!(sink["state"], "running", "{sink}");
}

/// Writes one plain (non-transactional) record to partition 0 of
/// `topic`, as any client of the cluster could.
async fn produce_raw(topic: &str, key: &[u8], value: &[u8]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let bootstrap = broker().await.bootstrap();
    let (topic, key, value) = (topic.to_string(), key.to_vec(), value.to_vec());
    tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .unwrap();
        producer
            .send(
                BaseRecord::to(&topic)
                    .partition(0)
                    .key(&key[..])
                    .payload(&value[..]),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(Duration::from_secs(30)).unwrap();
    })
    .await
    .unwrap();
}

/// ENVELOPE DEBEZIUM: `op` r for the load, then c, u (with before) and d
/// (after null), and no tombstones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_envelope_before_and_after() {
    let env = env("kafka_debezium").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3);",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let topic = "orders_debezium";
    setup(
        &env,
        &admin,
        "src_dbz",
        &format!(
            "CREATE SINK orders_dbz FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}') FORMAT JSON ENVELOPE DEBEZIUM;"
        ),
    )
    .await;
    wait_records(topic, 3).await;
    env.up
        .batch_execute(
            "UPDATE orders SET total = 10 WHERE id = 1;
             DELETE FROM orders WHERE id = 2;",
        )
        .await
        .unwrap();
    env.up
        .batch_execute("INSERT INTO orders VALUES (4, 'd', 4)")
        .await
        .unwrap();
    let all = wait_records(topic, 6).await;
    assert!(all.iter().all(|r| r.value.is_some()), "no tombstones");
    let values: Vec<Value> = all
        .iter()
        .map(|r| json(r.value.as_deref().unwrap()))
        .collect();
    let ops: Vec<&str> = values.iter().map(|v| v["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["r", "r", "r", "u", "d", "c"]);
    assert_eq!(
        values[0],
        serde_json::json!({"before": null, "after": {"id": 1, "customer": "a", "total": 1.00}, "op": "r"})
    );
    assert_eq!(
        values[3],
        serde_json::json!({
            "before": {"id": 1, "customer": "a", "total": 1.00},
            "after": {"id": 1, "customer": "a", "total": 10.00},
            "op": "u"
        })
    );
    assert_eq!(
        values[4],
        serde_json::json!({"before": {"id": 2, "customer": "b", "total": 2.00}, "after": null, "op": "d"})
    );
    assert_eq!(values[5]["after"]["id"], 4);
    assert_eq!(values[5]["before"], Value::Null);
    // The update and the delete were one upstream transaction.
    assert_eq!(position(&all[3]), position(&all[4]));
    assert_ne!(position(&all[4]), position(&all[5]));
    assert_eq!(duplicates(&all), 0);
    assert_eq!(all[3].key_text(), r#"{"id":1}"#);
}

/// SIGKILL of `evolve pipeline run` three times while upstream
/// transactions keep coming (the first soon after the table's snapshot,
/// while the sink loads), then a restart each time: a read_committed
/// consumer sees the load once and every later change exactly once, in
/// order per key. Each upstream transaction increments one key's
/// counter, so per key the values read must go up by one from the loaded
/// value to the upstream's final one: no gap, no repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_load_delivers_every_change_exactly_once() {
    const KEYS: i64 = 5_000;
    const PER_ROUND: i64 = 400;
    let env = env("kafka_sigkill").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(&format!(
            "CREATE TABLE orders (id int PRIMARY KEY, n int NOT NULL, pad text);
             INSERT INTO orders SELECT i, 0, repeat('x', 200) FROM generate_series(1, {KEYS}) i;"
        ))
        .await
        .unwrap();
    let topic = "orders_sigkill";
    let mut pipeline = Pipeline::start(&env.config);
    setup(
        &env,
        &pipeline.url,
        "src_kill",
        &format!(
            "CREATE SINK orders_eo FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"
        ),
    )
    .await;
    wait_running(&pipeline.url, "orders_v1").await;
    let kill_after = [
        Duration::from_millis(200),
        Duration::from_millis(1_500),
        Duration::from_millis(2_500),
    ];
    for (round, wait) in kill_after.iter().enumerate() {
        let up_url = env.up_db.url.clone();
        let writer = tokio::spawn(async move {
            let up = connect(&up_url).await;
            for i in 0..PER_ROUND {
                let id = (i * 7 + round as i64 * 13) % KEYS + 1;
                up.batch_execute(&format!("UPDATE orders SET n = n + 1 WHERE id = {id}"))
                    .await
                    .unwrap();
            }
        });
        tokio::time::sleep(*wait).await;
        drop(pipeline); // SIGKILL
        writer.await.unwrap();
        pipeline = Pipeline::start(&env.config);
        if round == 0 {
            // The next kills come under a stream of changes after the load.
            let start = Instant::now();
            while records(topic).await.len() < KEYS as usize {
                assert!(start.elapsed() < Duration::from_secs(120), "no load");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    // Converged: the topic folds to the upstream rows.
    let want = upstream_documents(&env).await;
    let start = Instant::now();
    let all = loop {
        let all = records(topic).await;
        if folded(&all) == want {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let again = records(topic).await;
            assert_eq!(again.len(), all.len(), "records after settling");
            break again;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{topic} did not converge in 120 s ({} records)",
            all.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(duplicates(&all), 0, "changes written twice");
    assert!(all.iter().all(|r| r.value.is_some()));
    // One load: the first KEYS records, one per key, at one position.
    let load = &all[..KEYS as usize];
    assert!(load.iter().all(|r| position(r) == position(&load[0])));
    let mut loaded_keys: Vec<String> = load.iter().map(Record::key_text).collect();
    loaded_keys.sort();
    loaded_keys.dedup();
    assert_eq!(
        loaded_keys.len() as i64,
        KEYS,
        "the load holds every key once"
    );
    let mut counters: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in &all {
        let v = json(r.value.as_deref().unwrap());
        counters
            .entry(v["id"].as_i64().unwrap())
            .or_default()
            .push(v["n"].as_i64().unwrap());
    }
    let finals: HashMap<i64, i64> = env
        .up
        .query("SELECT id::bigint, n::bigint FROM orders", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let (mut changes, mut broken) = (0, 0);
    for (id, seen) in &counters {
        changes += seen.len() - 1;
        let consecutive = seen.windows(2).all(|w| w[1] == w[0] + 1);
        if !consecutive || seen.last() != Some(&finals[id]) {
            broken += 1;
            eprintln!("key {id}: read {seen:?}, upstream ends at {}", finals[id]);
        }
    }
    assert_eq!(
        broken, 0,
        "keys whose changes were not exactly once, in order"
    );
    assert_eq!(all.len(), KEYS as usize + changes);
    eprintln!(
        "kafka exactly-once: {} records = {KEYS} loaded + {changes} changes (of {} upstream transactions), 0 duplicates",
        all.len(),
        3 * PER_ROUND
    );
    assert!(changes > 0, "no change arrived after the load");
    wait_all_running(&pipeline.url).await;
}

/// APPLY REPLACEMENT arrives as exactly the changed keys: a replacement
/// that excludes `note` changes the documents of the rows with a note,
/// and only those get a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_arrives_as_exactly_the_changed_keys() {
    let env = env("kafka_swap").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL, note text);
             INSERT INTO orders SELECT i, i, CASE WHEN i % 10 = 0 THEN 'n' || i END
               FROM generate_series(1, 200) i;",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let topic = "orders_swap";
    setup(
        &env,
        &admin,
        "src_swap",
        &format!(
            "CREATE SINK orders_sw FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"
        ),
    )
    .await;
    wait_records(topic, 200).await;
    sql_ok(
        &admin,
        &[
            "-c",
            "CREATE TABLE orders_v2 FROM SOURCE src_swap (REFERENCE public.orders) WITH (EXCLUDE COLUMNS (note));
             CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v2 t;
             ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2 WITH (WAIT = '60s');",
        ],
    )
    .await;
    let all = wait_records(topic, 200 + 20).await;
    let swapped = &all[200..];
    let mut keys: Vec<i64> = swapped
        .iter()
        .map(|r| json(r.key.as_deref().unwrap())["id"].as_i64().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, (1..=20).map(|i| i * 10).collect::<Vec<_>>());
    assert!(swapped.iter().all(|r| position(r) == position(&swapped[0])));
    assert!(swapped.iter().all(|r| {
        let v = json(r.value.as_deref().unwrap());
        v.get("note").is_none() && v["total"] == v["id"]
    }));
    assert_eq!(duplicates(&all), 0);
}

/// Bad input, each in one clear line: a connection of the wrong kind
/// either way, FORMAT AVRO, an unreachable broker at CREATE SINK; and a
/// sink whose broker becomes unreachable is shown retrying with the reason
/// and retried, then runs again once the broker is back in the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_connections_and_an_unreachable_broker() {
    let env = env("kafka_bad").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL);
             INSERT INTO orders VALUES (1, 1);",
        )
        .await
        .unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    setup(&env, &admin, "src_bad", "").await;
    let refused = async |statement: &str| -> String {
        let out = evolve(&["sql", "--admin", &admin, "-c", statement]).await;
        assert_eq!(out.status.code(), Some(1), "{statement}");
        text(&out.stderr)
    };
    let e =
        refused("CREATE SINK s1 FROM orders_json INTO KAFKA CONNECTION pg_conn (TOPIC 'x')").await;
    assert_eq!(
        e,
        "ERROR:  connection \"pg_conn\" is not a kafka:// connection; a Kafka sink needs url = \"kafka://host:port\"\n"
    );
    let e =
        refused("CREATE SINK s2 FROM orders_json INTO POSTGRES CONNECTION k (TABLE 'public.x')")
            .await;
    assert_eq!(
        e,
        "ERROR:  connection \"k\" is a kafka:// connection; INTO POSTGRES needs a PostgreSQL url (or write INTO KAFKA CONNECTION k (TOPIC '...'))\n"
    );
    let e = refused("CREATE SOURCE s5 FROM POSTGRES CONNECTION k (PUBLICATION 'p')").await;
    assert_eq!(
        e,
        "ERROR:  connection \"k\" is a kafka:// connection; a PostgreSQL source or session needs a PostgreSQL url\n"
    );
    let e = refused(
        "CREATE SINK s3 FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'x') \
         FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION k",
    )
    .await;
    assert_eq!(
        e,
        "ERROR:  connection \"k\" is not a schema registry connection; FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY needs url = \"http://host:port\" (or https://)\n"
    );
    let e = refused("CREATE SINK s4 FROM orders_json INTO KAFKA CONNECTION dead (TOPIC 'x')").await;
    let first = e.lines().next().unwrap();
    assert_eq!(
        first,
        "ERROR:  could not connect to connection \"dead\" (127.0.0.1:9)"
    );
    assert!(e.contains("no Kafka broker answered"), "{e}");
    let shown = sql_ok(&admin, &["-c", "SHOW SINKS"]).await;
    assert!(!shown.contains("s1") && !shown.contains("s4"), "{shown}");

    // A sink whose broker goes away: retrying, with the reason.
    let topic = "orders_bad";
    sql_ok(
        &admin,
        &[
            "-c",
            &format!("CREATE SINK ok FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}')"),
        ],
    )
    .await;
    wait_records(topic, 1).await;
    // A second sink into the topic another sink writes: refused, naming it.
    let e = refused(&format!(
        "CREATE SINK ok_again FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}')"
    ))
    .await;
    assert!(
        e.starts_with(&format!(
            "ERROR:  sink \"ok\" writes topic {topic} of connection \"k\" already"
        )),
        "{e}"
    );
    drop(pipeline);
    let good = std::fs::read_to_string(&env.config).unwrap();
    let url = broker().await.url();
    std::fs::write(
        &env.config,
        good.replace(&format!("url = \"{url}\""), "url = \"kafka://127.0.0.1:9\""),
    )
    .unwrap();
    pipeline = Pipeline::start(&env.config);
    let start = Instant::now();
    let retrying = loop {
        let sink = object(&pipeline.url, "sink", "ok").await.unwrap();
        if sink["state"] == "retrying" {
            break sink;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "sink not retrying: {sink}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let error = retrying["error"].as_str().unwrap();
    assert!(
        error.starts_with("ERROR: could not connect to connection \"k\" (127.0.0.1:9)"),
        "{error}"
    );
    env.up
        .batch_execute("INSERT INTO orders VALUES (2, 2)")
        .await
        .unwrap();
    drop(pipeline);
    std::fs::write(&env.config, good).unwrap();
    let pipeline = Pipeline::start(&env.config);
    let all = wait_records(topic, 2).await;
    assert_eq!(duplicates(&all), 0);
    assert_eq!(folded(&all), upstream_documents(&env).await);
    let sink = object(&pipeline.url, "sink", "ok").await.unwrap();
    assert_eq!(sink["state"], "running", "{sink}");
}

/// FORMAT AVRO through a registry over HTTPS with basic authentication
/// (evolve's own, `evolve registry serve`): the schemas registered under
/// the topics' subjects, and Confluent's Python client
/// (DeserializingConsumer with AvroDeserializer, schemas fetched by id)
/// reading both envelopes back to exactly the upstream rows; a registry
/// that refuses the credentials fails CREATE SINK with its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_records_through_a_tls_registry_read_by_confluents_client() {
    let env = env("kafka_avro").await;
    with_kafka(&env).await;
    let (cert, key) = (env.dir.join("cert.pem"), env.dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(made.success(), "openssl could not make a certificate");
    let mut hasher = std::process::Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(["registry", "hash-password"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut hasher.stdin.take().unwrap(), b"s3cret\n").unwrap();
    let hash = text(&hasher.wait_with_output().unwrap().stdout);
    let users = env.dir.join("users");
    std::fs::write(&users, format!("sink:{}", hash.trim())).unwrap();
    let (registry, url) = serve_registry(
        &env,
        "127.0.0.1:0",
        &[
            "--users".as_ref(),
            users.as_os_str(),
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
    );
    assert!(url.starts_with("https://"), "{url}");
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "[connections.csr]\nurl = \"{url}\"\nuser = \"sink\"\npassword = \"s3cret\"\nsslrootcert = \"{}\"\n\
         [connections.csr_wrong]\nurl = \"{url}\"\nuser = \"sink\"\npassword = \"nope\"\nsslrootcert = \"{}\"\n",
        cert.display(),
        cert.display()
    ));
    std::fs::write(&env.config, config).unwrap();
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 30) i;",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    setup(
        &env,
        &admin,
        "src_avro",
        "CREATE SINK avro_u FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'orders_avro_u') \
           FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT;
         CREATE SINK avro_d FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'orders_avro_d') \
           FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE DEBEZIUM;",
    )
    .await;
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE SINK avro_x FROM orders_json INTO KAFKA CONNECTION k (TOPIC 'orders_avro_x') \
           FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr_wrong",
    ])
    .await;
    let refused = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{refused}");
    assert!(
        refused
            .contains("registering the schema of subject \"orders_avro_x-key\" was refused (401"),
        "{refused}"
    );
    assert!(!refused.contains("nope"), "{refused}");
    // Both loads first: a sink that loads later takes the changes in.
    wait_records("orders_avro_u", 30).await;
    wait_records("orders_avro_d", 30).await;

    env.up
        .batch_execute(
            "UPDATE orders SET total = 99 WHERE id <= 3;
             DELETE FROM orders WHERE id = 30;
             INSERT INTO orders VALUES (31, 'new', NULL);",
        )
        .await
        .unwrap();
    // 30 loaded, 3 updates, 1 delete, 1 insert.
    let expected = 35;
    wait_records("orders_avro_u", expected).await;
    wait_records("orders_avro_d", expected).await;
    let kafka = broker().await;
    let read = |topic: &str| {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/python/kafka_avro_consume.py");
        let out = std::process::Command::new("python3")
            .arg(script)
            .args([
                &kafka.bootstrap(),
                topic,
                &url,
                &expected.to_string(),
                "sink:s3cret",
            ])
            .arg(&cert)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<Value>>()
    };
    let doc = |v: &Value| json(v.as_str().unwrap().as_bytes());
    let upserts = read("orders_avro_u");
    let mut state = BTreeMap::new();
    for r in &upserts {
        let key = doc(&r["key"]["key"]).to_string();
        match &r["value"] {
            Value::Null => state.remove(&key),
            v => state.insert(key, doc(&v["data"])),
        };
    }
    assert_eq!(state, upstream_documents(&env).await);
    assert_eq!(upserts.iter().filter(|r| r["value"].is_null()).count(), 1);
    let changes = read("orders_avro_d");
    let ops: Vec<&str> = changes
        .iter()
        .map(|r| r["value"]["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops.iter().filter(|o| **o == "r").count(), 30, "{ops:?}");
    assert_eq!(&ops[30..], ["u", "u", "u", "d", "c"], "{ops:?}");
    let update = &changes[30]["value"];
    assert_eq!(doc(&update["before"])["total"], serde_json::json!(1.00));
    assert_eq!(doc(&update["after"])["total"], serde_json::json!(99.00));
    assert!(changes[33]["value"]["after"].is_null());
    assert!(changes[34]["value"]["before"].is_null());
    let shown = sql_ok(&admin, &["-c", "SHOW SINKS"]).await;
    assert!(
        shown.contains("topic 'orders_avro_u' (avro, upsert)"),
        "{shown}"
    );
    drop(registry);
}

/// An admin client of the shared broker.
async fn admin() -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker().await.bootstrap())
        .create()
        .unwrap()
}

/// Runs one admin request of the shared broker and checks each answer.
macro_rules! admin_ok {
    ($call:ident, $arg:expr) => {
        for r in admin()
            .await
            .$call($arg, &rdkafka::admin::AdminOptions::new())
            .await
            .unwrap()
        {
            r.unwrap();
        }
    };
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

/// Partitions added to the topic: the keys stay on the partition they
/// were loaded into (a key's tombstone lands beside its value, so the
/// compacted topic drops it), across a restart. The topic deleted under
/// the running sink, then created again empty: the sink stops, retrying,
/// with the way out, instead of writing only the later changes into a
/// topic that lost the rest; DROP SINK and CREATE SINK write it anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_repartitioned_or_deleted_under_the_sink_loses_no_key() {
    use rdkafka::admin::{NewPartitions, NewTopic, TopicReplication};
    let env = env("kafka_topic_lost").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 50) i;",
        )
        .await
        .unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let topic = "orders_topic_lost";
    setup(
        &env,
        &pipeline.url,
        "src_topic_lost",
        &format!("CREATE SINK lost FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"),
    )
    .await;
    wait_records(topic, 50).await;
    admin_ok!(create_partitions, &[NewPartitions::new(topic, 3)]);
    pipeline.terminate();
    let pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    wait_all_running(&url).await;
    env.up
        .batch_execute("DELETE FROM orders WHERE id <= 20")
        .await
        .unwrap();
    let all = wait_records(topic, 70).await;
    assert!(
        all.iter().all(|r| r.partition == 0),
        "records on other partitions than the load's: {:?}",
        all.iter()
            .filter(|r| r.partition != 0)
            .map(|r| (r.partition, r.key_text()))
            .collect::<Vec<_>>()
    );
    assert_eq!(duplicates(&all), 0);
    assert_eq!(folded(&all), upstream_documents(&env).await);

    admin_ok!(delete_topics, &[topic]);
    env.up
        .batch_execute("UPDATE orders SET total = 0 WHERE id = 21")
        .await
        .unwrap();
    let error = wait_sink_error(&url, "lost", "does not exist").await;
    assert!(
        error.starts_with(&format!(
            "ERROR: Kafka topic \"{topic}\" of sink \"lost\" does not exist, though the sink wrote the interface into it up to "
        )) && error.ends_with("DROP SINK and CREATE SINK to write the interface anew"),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
    // Created again (by an operator, or a broker that creates topics on
    // first use): empty, which the sink tells from its own topic.
    admin_ok!(
        create_topics,
        &[NewTopic::new(topic, 1, TopicReplication::Fixed(1))]
    );
    wait_sink_error(&url, "lost", "is empty from its start").await;
    assert!(records(topic).await.is_empty());
    sql_ok(
        &url,
        &[
            "-c",
            &format!(
                "DROP SINK lost; CREATE SINK lost FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"
            ),
        ],
    )
    .await;
    let anew = wait_records(topic, 30).await;
    assert_eq!(folded(&anew), upstream_documents(&env).await);
    drop(pipeline);
}

/// A document larger than the topic takes: the sink retries with one line
/// naming the key, its size and the way out; raising the topic's
/// `max.message.bytes` (past the 1,000,000 bytes librdkafka sends by
/// default) lets it through, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_larger_than_the_topic_takes_names_the_way_out() {
    use rdkafka::admin::{AlterConfig, ResourceSpecifier};
    let env = env("kafka_large").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 10) i;",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    let url = pipeline.url.clone();
    let topic = "orders_large";
    setup(
        &env,
        &url,
        "src_large",
        &format!("CREATE SINK large FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"),
    )
    .await;
    wait_records(topic, 10).await;
    env.up
        .batch_execute("INSERT INTO orders VALUES (11, repeat('x', 1100000), 1)")
        .await
        .unwrap();
    let error = wait_sink_error(&url, "large", "max.message.bytes").await;
    assert!(
        error.starts_with(r#"ERROR: sink "large" cannot write its record for key {"id":11} (1100"#)
            && error.contains(&format!("into Kafka topic \"{topic}\", which takes smaller records; it retries: raise the topic's max.message.bytes above 1100")),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
    admin_ok!(
        alter_configs,
        &[AlterConfig::new(ResourceSpecifier::Topic(topic)).set("max.message.bytes", "2000000")]
    );
    let all = wait_records(topic, 11).await;
    assert_eq!(duplicates(&all), 0);
    assert_eq!(folded(&all), upstream_documents(&env).await);
    drop(pipeline);
}

/// A sink whose progress record an earlier evolve wrote (a position, no
/// partition count), and partitions added to its topic before the first
/// restart on this one: the sink spreads the keys over the count its
/// records were written with (one partition here), so every key's
/// tombstone lands beside its value, and the progress it writes from
/// then on keeps that count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_releases_progress_and_partitions_added_move_no_key() {
    use rdkafka::admin::NewPartitions;
    let env = env("kafka_legacy_progress").await;
    with_kafka(&env).await;
    env.up
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2));
             INSERT INTO orders SELECT i, 'c' || i, i FROM generate_series(1, 50) i;",
        )
        .await
        .unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let topic = "orders_legacy_progress";
    setup(
        &env,
        &pipeline.url,
        "src_legacy_progress",
        &format!(
            "CREATE SINK legacy_progress FROM orders_json INTO KAFKA CONNECTION k (TOPIC '{topic}');"
        ),
    )
    .await;
    wait_records(topic, 50).await;
    pipeline.terminate();
    // The progress record as an earlier evolve wrote it: the position only.
    let progress = records("_evolve_sink_progress").await;
    let last = progress
        .iter()
        .rev()
        .find(|r| r.key.as_deref() == Some(b"legacy_progress".as_slice()))
        .expect("the sink's progress record");
    let value = json(last.value.as_deref().unwrap());
    assert_eq!(value["partitions"], 1, "{value}");
    let old = serde_json::json!({"position": value["position"]}).to_string();
    produce_raw("_evolve_sink_progress", b"legacy_progress", old.as_bytes()).await;
    admin_ok!(create_partitions, &[NewPartitions::new(topic, 3)]);

    let pipeline = Pipeline::start(&env.config);
    wait_all_running(&pipeline.url).await;
    env.up
        .batch_execute("DELETE FROM orders WHERE id <= 20")
        .await
        .unwrap();
    let all = wait_records(topic, 70).await;
    assert!(
        all.iter().all(|r| r.partition == 0),
        "records on other partitions than the load's: {:?}",
        all.iter()
            .filter(|r| r.partition != 0)
            .map(|r| (r.partition, r.key_text()))
            .collect::<Vec<_>>()
    );
    assert_eq!(duplicates(&all), 0);
    assert_eq!(folded(&all), upstream_documents(&env).await);
    let progress = records("_evolve_sink_progress").await;
    let last = progress
        .iter()
        .rev()
        .find(|r| r.key.as_deref() == Some(b"legacy_progress".as_slice()))
        .unwrap();
    assert_eq!(json(last.value.as_deref().unwrap())["partitions"], 1);
    drop(pipeline);
}
