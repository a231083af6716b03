//! Kafka sources against a real Apache Kafka broker (the harness's) and
//! evolve's own schema registry (`evolve registry serve`), driven as users
//! drive them: records written by Confluent's Python client
//! (AvroSerializer, schemas registered on first use), `evolve pipeline run`
//! as a child, `evolve sql`, `evolve drift` and `evolve status`, and the
//! PostgreSQL sinks read back. Every phase counts the sink's writes.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

fn script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/kafka_avro_produce.py")
}

/// Runs the producer script with `args` and `stdin`; its stdout.
async fn python(args: Vec<String>, stdin: String) -> String {
    let mut all: Vec<std::ffi::OsString> = vec![script().into()];
    all.extend(args.into_iter().map(Into::into));
    python3(all, stdin).await
}

const V1: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"int"},{"name":"customer","type":"string"},{"name":"qty","type":"int"}]}"#;
/// A field with a default added: the pinned reader still reads it.
const V2: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"int"},{"name":"customer","type":"string"},{"name":"qty","type":"int"},
    {"name":"note","type":["null","string"],"default":null}]}"#;
/// `qty` dropped: BACKWARD compatible for the registry (a reader of this
/// version reads the older records), unreadable for a reader pinned at V1
/// (its `qty` has no default).
const V3: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"int"},{"name":"customer","type":"string"},
    {"name":"note","type":["null","string"],"default":null}]}"#;
const EVENT: &str = r#"{"type":"record","name":"Event","fields":[
    {"name":"kind","type":"string"},{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

/// A record as produced: key, and the value's fields (`None`: tombstone).
type Produced = (String, Option<Value>);

async fn produce(bootstrap: &str, topic: &str, registry: &str, schema: &str, records: &[Produced]) {
    let args = ["produce", bootstrap, topic, registry, schema];
    produce_lines(args.map(String::from).to_vec(), records).await;
}

/// Runs the producer script's `args` with `records` as its JSON lines
/// and checks that every one was delivered.
async fn produce_lines(args: Vec<String>, records: &[Produced]) {
    let lines: String = records
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}).to_string() + "\n")
        .collect();
    let n = python(args, lines).await;
    assert_eq!(n.trim(), records.len().to_string());
}

fn order(id: i64, qty: i64) -> Value {
    json!({"id": id, "customer": format!("c{id}"), "qty": qty})
}

/// The documents a reader with `fields` holds after `records`, keyed by
/// the sink's key JSON; a record lacking one of `fields` without a
/// default is where the reader stops.
fn fold(records: &[Produced], fields: &[&str]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (key, value) in records {
        let k = json!({"@key": key}).to_string();
        match value {
            None => {
                out.remove(&k);
            }
            Some(v) => {
                let mut doc = serde_json::Map::new();
                for f in fields {
                    match v.get(*f) {
                        Some(Value::Null) => {}
                        Some(x) => {
                            doc.insert((*f).to_string(), x.clone());
                        }
                        None if *f == "note" => {}
                        None => return out,
                    }
                }
                out.insert(k, Value::Object(doc));
            }
        }
    }
    out
}

/// `(key, document)` of a sink table, both as JSON.
async fn sink_docs(env: &Env, table: &str) -> BTreeMap<String, Value> {
    env.sink
        .query(&format!("SELECT key::text, data::text FROM {table}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let k: String = r.get(0);
            let d: String = r.get(1);
            (
                serde_json::from_str::<Value>(&k).unwrap().to_string(),
                serde_json::from_str(&d).unwrap(),
            )
        })
        .collect()
}

async fn wait_docs(env: &Env, table: &str, want: &BTreeMap<String, Value>) {
    let start = Instant::now();
    loop {
        let got = sink_docs(env, table).await;
        if &got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{table} did not reach the expected documents in 90 s:\n got {got:?}\nwant {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Table `name`'s row of `evolve drift --format json`.
async fn drift_row(admin: &str, name: &str) -> Value {
    let out = evolve(&["drift", "--admin", admin, "--format", "json"]).await;
    let drift: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    drift["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|r| r["table"] == name).cloned())
        .unwrap_or_else(|| panic!("no drift row for {name}: {drift}"))
}

async fn table_status(admin: &str, name: &str) -> Value {
    object(admin, "table", name)
        .await
        .unwrap_or_else(|| panic!("no status for table {name}"))
}

async fn wait_state(admin: &str, name: &str, state: &str) -> Value {
    let start = Instant::now();
    loop {
        let t = table_status(admin, name).await;
        if t["state"] == state {
            return t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "table {name} is not {state} after 60 s: {t}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The whole path of the README's Kafka tour: a topic with history read
/// by a table's snapshot, then streamed (updates, tombstones, inserts);
/// a producer that adds a field with a default (no stall, drift says
/// column_drift, a record changing only that field writes nothing); a
/// producer that drops a field the pinned reader needs (only that table
/// stalls, at the first such record's offset, counting the later ones,
/// while another Kafka table flows); a new table version pinned at the
/// new schema and a replacement that absorbs it with exactly the changed
/// keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_table_streams_absorbs_a_new_field_and_stalls_alone_on_a_breaking_schema() {
    let env = env("kafka_source").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    // One partition for the orders (their order decides where the table
    // stalls), three for the events.
    python(
        vec![
            "topic".into(),
            bootstrap.clone(),
            "ks_orders".into(),
            "1".into(),
        ],
        String::new(),
    )
    .await;
    python(
        vec![
            "topic".into(),
            bootstrap.clone(),
            "ks_events".into(),
            "3".into(),
        ],
        String::new(),
    )
    .await;

    // History before the source exists: the table's snapshot reads it.
    let mut produced: Vec<Produced> = (1..=20)
        .map(|i| (format!("o{i}"), Some(order(i, 1))))
        .collect();
    // A key written twice: the snapshot keeps its last record.
    produced.push(("o20".into(), Some(order(20, 2))));
    produce(&bootstrap, "ks_orders", &url, V1, &produced).await;
    let events: Vec<Produced> = (1..=6)
        .map(|i| {
            (
                format!("e{i}"),
                Some(json!({"kind": "seen", "at": 1_714_566_600_000i64 + i})),
            )
        })
        .collect();
    produce(&bootstrap, "ks_events", &url, EVENT, &events).await;

    env.sink
        .batch_execute(
            "CREATE TABLE public.orders_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);",
        )
        .await
        .unwrap();
    audit_sink(&env.sink).await;
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    // Bad input first: an unknown topic, a Kafka table without FORMAT.
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE SOURCE nope FROM KAFKA CONNECTION k (TOPIC 'ks_missing')",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("topic \"ks_missing\" does not exist on Kafka connection \"k\""),
        "{}",
        text(&out.stderr)
    );
    sql_ok(
        &admin,
        &[
            "-c",
            "CREATE SOURCE ev FROM KAFKA CONNECTION k (TOPIC 'ks_orders');
                 CREATE SOURCE evs FROM KAFKA CONNECTION k (TOPIC 'ks_events');",
        ],
    )
    .await;
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE TABLE orders_x FROM SOURCE ev (REFERENCE public.orders)",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("table \"orders_x\" of Kafka source \"ev\" needs a FORMAT"),
        "{}",
        text(&out.stderr)
    );
    sql_ok(
        &admin,
        &["-c", "CREATE TABLE orders_v1 FROM SOURCE ev
                   FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT;
                 CREATE MATERIALIZED VIEW orders_live AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
                 CREATE SINK orders_sink FROM orders_live INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');
                 CREATE TABLE events_v1 FROM SOURCE evs
                   FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE NONE;
                 CREATE MATERIALIZED VIEW events_live AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM events_v1 t;
                 CREATE SINK events_sink FROM events_live INTO POSTGRES CONNECTION sink_conn (TABLE 'public.events_json');"],
    )
    .await;
    let v1 = ["id", "customer", "qty"];
    wait_docs(&env, "public.orders_json", &fold(&produced, &v1)).await;
    wait_writes(&env.sink, 20).await;
    let tables = sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    assert!(
        tables.contains("ks_orders-value id 1 (version 1)"),
        "{tables}"
    );
    wait_state(&admin, "orders_v1", "running").await;
    let events_count = |n: i64| {
        let sink = &env.sink;
        async move {
            let start = Instant::now();
            loop {
                let got: i64 = sink
                    .query_one("SELECT count(*) FROM public.events_json", &[])
                    .await
                    .map(|r| r.get(0))
                    .unwrap_or(-1);
                if got == n {
                    return;
                }
                assert!(
                    got < n && start.elapsed() < Duration::from_secs(60),
                    "{got} events, want {n}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    events_count(6).await;
    let event_doc: Value = serde_json::from_str(
        &env.sink
            .query_one(
                "SELECT data::text FROM public.events_json WHERE data->>'at' LIKE '%.001+00:00'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, String>(0),
    )
    .unwrap();
    assert_eq!(
        event_doc,
        json!({"kind": "seen", "at": "2024-05-01T12:30:00.001+00:00"})
    );

    // The stream: 5 updates, 2 tombstones, 5 inserts.
    let mut batch: Vec<Produced> = (1..=5)
        .map(|i| (format!("o{i}"), Some(order(i, 10 + i))))
        .collect();
    batch.push(("o6".into(), None));
    batch.push(("o7".into(), None));
    batch.extend((21..=25).map(|i| (format!("o{i}"), Some(order(i, 1)))));
    produce(&bootstrap, "ks_orders", &url, V1, &batch).await;
    produced.extend(batch);
    wait_docs(&env, "public.orders_json", &fold(&produced, &v1)).await;
    wait_writes(&env.sink, 20 + 12).await;

    // A field with a default: no stall; drift names it; a record that
    // changes only the new field changes no document.
    let batch: Vec<Produced> = vec![
        (
            "o1".into(),
            Some(json!({"id": 1, "customer": "c1", "qty": 99, "note": "rush"})),
        ),
        (
            "o3".into(),
            Some(json!({"id": 3, "customer": "c3", "qty": 13, "note": "same qty"})),
        ),
        (
            "o26".into(),
            Some(json!({"id": 26, "customer": "c26", "qty": 1, "note": null})),
        ),
    ];
    produce(&bootstrap, "ks_orders", &url, V2, &batch).await;
    produced.extend(batch);
    wait_docs(&env, "public.orders_json", &fold(&produced, &v1)).await;
    wait_writes(&env.sink, 32 + 2).await;
    assert_eq!(table_status(&admin, "orders_v1").await["state"], "running");
    let row = drift_row(&admin, "orders_v1").await;
    assert_eq!(row["signal"], "column_drift", "{row}");
    assert_eq!(row["added_upstream"], json!(["note"]), "{row}");

    // `qty` dropped by the producer: orders_v1 stalls at the first such
    // record; the events keep flowing.
    let before_stall = produced.clone();
    let stall_offset = produced.len(); // one partition: offsets count records
    let batch: Vec<Produced> = vec![
        (
            "o2".into(),
            Some(json!({"id": 2, "customer": "c2-moved", "note": null})),
        ),
        (
            "o27".into(),
            Some(json!({"id": 27, "customer": "c27", "note": "new"})),
        ),
        (
            "o28".into(),
            Some(json!({"id": 28, "customer": "c28", "note": null})),
        ),
        ("o9".into(), None),
    ];
    produce(&bootstrap, "ks_orders", &url, V3, &batch).await;
    produced.extend(batch);
    let stalled = wait_state(&admin, "orders_v1", "stalled").await;
    let error = stalled["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains(&format!(
            "record at partition 0 offset {stall_offset} has writer schema id"
        )),
        "{error}"
    );
    assert!(error.contains("qty"), "{error}");
    // The later records are counted as they come.
    let start = Instant::now();
    loop {
        let t = table_status(&admin, "orders_v1").await;
        let error = t["error"].as_str().unwrap_or_default().to_string();
        if error.contains("2 later records not readable either") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{error}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let more: Vec<Produced> = (7..=10)
        .map(|i| {
            (
                format!("e{i}"),
                Some(json!({"kind": "late", "at": 1_714_566_700_000i64 + i})),
            )
        })
        .collect();
    produce(&bootstrap, "ks_events", &url, EVENT, &more).await;
    events_count(10).await;
    assert_eq!(table_status(&admin, "events_v1").await["state"], "running");
    // Readers keep the last consistent state.
    wait_docs(&env, "public.orders_json", &fold(&before_stall, &v1)).await;
    assert_eq!(audit_count(&env.sink).await, 34);
    let row = drift_row(&admin, "orders_v1").await;
    assert_eq!(row["signal"], "stalled", "{row}");

    // The next version, pinned at today's schema, replaces it: exactly the
    // keys whose documents differ reach the sink.
    sql_ok(
        &admin,
        &["-c", "CREATE TABLE orders_v2 FROM SOURCE ev
                   FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;
                 CREATE REPLACEMENT MATERIALIZED VIEW orders_live_v2 FOR orders_live AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v2 t;
                 ALTER MATERIALIZED VIEW orders_live APPLY REPLACEMENT orders_live_v2 WITH (WAIT = '60s');"],
    )
    .await;
    let v3 = ["id", "customer", "note"];
    let old = fold(&before_stall, &v1);
    let new = fold(&produced, &v3);
    wait_docs(&env, "public.orders_json", &new).await;
    let changed = old
        .keys()
        .chain(new.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .count() as i64;
    assert_eq!(
        changed, 26,
        "every document lost qty, o9 left, o27 and o28 came"
    );
    wait_writes(&env.sink, 34 + changed).await;
    wait_state(&admin, "orders_v2", "running").await;
    // And the stream goes on into the new version.
    let batch: Vec<Produced> = vec![(
        "o29".into(),
        Some(json!({"id": 29, "customer": "c29", "note": null})),
    )];
    produce(&bootstrap, "ks_orders", &url, V3, &batch).await;
    produced.extend(batch);
    wait_docs(&env, "public.orders_json", &fold(&produced, &v3)).await;
    wait_writes(&env.sink, 34 + changed + 1).await;
    drop(pipeline);
}

/// The registry and broker of a test: `evolve registry serve` started
/// here, the shared broker, and connections `k` and `csr` added to the
/// env's evolve.toml.
async fn kafka_env(env: &Env) -> (Killed, String, String) {
    let kafka = tokio::task::spawn_blocking(evolve_test::kafka)
        .await
        .unwrap();
    let (registry, url) = serve_registry(env, "127.0.0.1:0", &[]);
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "[connections.k]\nurl = \"{}\"\n[connections.csr]\nurl = \"{url}\"\n\
         [connections.dead]\nurl = \"kafka://127.0.0.1:9\"\n",
        kafka.url()
    ));
    std::fs::write(&env.config, config).unwrap();
    (registry, kafka.bootstrap(), url)
}

/// `public.orders_json` in the sink (its writes audited) and a pipeline
/// reading topic `topic` into it: source `name`, table `<name>_v1` read
/// with `format` (`FORMAT ... USING CONFLUENT SCHEMA REGISTRY CONNECTION
/// csr ...`), its interface `<name>_json` and sink `<name>_sink`.
async fn start_kafka_table(env: &Env, name: &str, topic: &str, format: &str) -> Pipeline {
    env.sink
        .batch_execute(
            "CREATE TABLE public.orders_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);",
        )
        .await
        .unwrap();
    audit_sink(&env.sink).await;
    let pipeline = Pipeline::start(&env.config);
    sql_ok(
        &pipeline.url,
        &[
            "-c",
            &format!(
                "CREATE SOURCE {name} FROM KAFKA CONNECTION k (TOPIC '{topic}');
                 CREATE TABLE {name}_v1 FROM SOURCE {name} {format};
                 CREATE MATERIALIZED VIEW {name}_json AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM {name}_v1 t;
                 CREATE SINK {name}_sink FROM {name}_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');"
            ),
        ],
    )
    .await;
    pipeline
}

/// Sets `subject`'s compatibility level in the registry at `url`.
async fn compatibility(url: &str, subject: &str, level: &str) {
    let args = ["compatibility", url, subject, level];
    python(args.map(String::from).to_vec(), String::new()).await;
}

async fn topic(bootstrap: &str, name: &str, partitions: u32) {
    python(
        vec![
            "topic".into(),
            bootstrap.into(),
            name.into(),
            partitions.to_string(),
        ],
        String::new(),
    )
    .await;
}

/// Topic `<name>_orders` of `partitions` holding order 0, and a pipeline
/// reading it into `public.orders_json` of the sink (its writes audited):
/// source `name`, table `<name>_v1`, its interface and sink, with order 0
/// written.
async fn one_table(env: &Env, bootstrap: &str, url: &str, name: &str, partitions: u32) -> Pipeline {
    let orders = format!("{name}_orders");
    topic(bootstrap, &orders, partitions).await;
    produce(
        bootstrap,
        &orders,
        url,
        V1,
        &[("o0".into(), Some(order(0, 0)))],
    )
    .await;
    let pipeline = start_kafka_table(
        env,
        name,
        &orders,
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    )
    .await;
    wait_writes(&env.sink, 1).await;
    pipeline
}

/// A record that is not Avro in the wire format, one that names a schema
/// id the registry does not have, and one whose payload is cut short:
/// each stalls only its own table, at that record, with a one-line reason;
/// an unreachable broker fails CREATE SOURCE with the connection named.
/// A type change (`int` to `long`) under `ABSORB = 'auto'`: the pinned
/// reader stalls, and evolve creates the next version pinned at the new
/// schema, hydrates and applies it, and drops the old one by itself; only
/// the changed document reaches the sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_stall_their_table_and_auto_absorb_follows_a_type_change() {
    let env = env("kafka_source_bad").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    for t in [
        "kb_nohdr",
        "kb_unknown",
        "kb_corrupt",
        "kb_auto",
        "kb_types",
    ] {
        topic(&bootstrap, t, 1).await;
        let first: Vec<Produced> = (1..=3)
            .map(|i| (format!("o{i}"), Some(order(i, 1))))
            .collect();
        produce(&bootstrap, t, &url, V1, &first).await;
    }
    env.sink
        .batch_execute(
            "CREATE TABLE public.orders_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);",
        )
        .await
        .unwrap();
    audit_sink(&env.sink).await;
    let pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE SOURCE gone FROM KAFKA CONNECTION dead (TOPIC 'kb_auto')",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let refused = text(&out.stderr);
    assert!(refused.contains("\"dead\""), "{refused}");
    assert!(refused.contains("no Kafka broker answered"), "{refused}");
    let mut statements = String::new();
    for t in [
        "kb_nohdr",
        "kb_unknown",
        "kb_corrupt",
        "kb_auto",
        "kb_types",
    ] {
        statements.push_str(&format!(
            "CREATE SOURCE {t} FROM KAFKA CONNECTION k (TOPIC '{t}');
             CREATE TABLE {t}_v1 FROM SOURCE {t} FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;"
        ));
    }
    statements.push_str(
        "CREATE MATERIALIZED VIEW auto_json WITH (ABSORB = 'auto') AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM kb_auto_v1 t;
         CREATE SINK auto_sink FROM auto_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');",
    );
    sql_ok(&admin, &["-c", &statements]).await;
    let v1 = ["id", "customer", "qty"];
    let mut produced: Vec<Produced> = (1..=3)
        .map(|i| (format!("o{i}"), Some(order(i, 1))))
        .collect();
    wait_docs(&env, "public.orders_json", &fold(&produced, &v1)).await;
    wait_writes(&env.sink, 3).await;
    for t in [
        "kb_nohdr",
        "kb_unknown",
        "kb_corrupt",
        "kb_auto",
        "kb_types",
    ] {
        wait_state(&admin, &format!("{t}_v1"), "running").await;
    }

    // Offset 3 of each topic (after the three good records).
    let raw = |t: &'static str, hex: &'static str| {
        python(
            vec![
                "raw".into(),
                bootstrap.clone(),
                t.into(),
                "o9".into(),
                hex.into(),
            ],
            String::new(),
        )
    };
    raw("kb_nohdr", "7b226964223a397d").await; // {"id":9}
    raw("kb_unknown", "000000270f02").await; // schema id 9999
    raw("kb_corrupt", "000000000102").await; // id 1, then a cut datum
    let reason = |t: &str| format!("{t}_v1");
    let nohdr = wait_state(&admin, &reason("kb_nohdr"), "stalled").await;
    assert!(
        nohdr["error"].as_str().unwrap().contains(
            "record at partition 0 offset 3 has no schema registry header (a zero byte and a 4-byte schema id)"
        ),
        "{nohdr}"
    );
    let unknown = wait_state(&admin, &reason("kb_unknown"), "stalled").await;
    assert!(
        unknown["error"].as_str().unwrap().contains(
            "record at partition 0 offset 3 names writer schema id 9999, which the registry of connection \"csr\" does not have"
        ),
        "{unknown}"
    );
    let corrupt = wait_state(&admin, &reason("kb_corrupt"), "stalled").await;
    assert!(
        corrupt["error"]
            .as_str()
            .unwrap()
            .contains("record at partition 0 offset 3 cannot be decoded with writer schema id 1"),
        "{corrupt}"
    );
    assert_eq!(table_status(&admin, "kb_auto_v1").await["state"], "running");

    // int to long: BACKWARD compatible, unreadable for the pinned reader.
    let v4 = V1.replace(
        r#"{"name":"qty","type":"int"}"#,
        r#"{"name":"qty","type":"long"}"#,
    );
    // Registered before any record uses it: drift says type_drift, and
    // the table runs on.
    python(
        vec![
            "register".into(),
            url.clone(),
            "kb_types-value".into(),
            v4.clone(),
        ],
        String::new(),
    )
    .await;
    let row = drift_row(&admin, "kb_types_v1").await;
    assert_eq!(row["signal"], "type_drift", "{row}");
    assert_eq!(
        row["type_changed"],
        json!([{"column": "qty", "from": "integer", "to": "bigint"}]),
        "{row}"
    );
    assert_eq!(
        table_status(&admin, "kb_types_v1").await["state"],
        "running"
    );
    let batch: Vec<Produced> = vec![("o2".into(), Some(order(2, 5_000_000_000)))];
    produce(&bootstrap, "kb_auto", &url, &v4, &batch).await;
    produced.extend(batch);
    // Absorbed: the next version reads every record; only o2's document
    // changed.
    let start = Instant::now();
    loop {
        let interfaces = sql_ok(&admin, &["-c", "SHOW MATERIALIZED VIEWS"]).await;
        if interfaces.contains("kb_auto_v2") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "not absorbed: {interfaces}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_docs(&env, "public.orders_json", &fold(&produced, &v1)).await;
    wait_writes(&env.sink, 4).await;
    let tables = sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    assert!(
        !tables.contains("kb_auto_v1 "),
        "the old version is dropped: {tables}"
    );
    assert!(tables.contains("kb_auto_v2"), "{tables}");
    drop(pipeline);
}

/// SIGKILL of `evolve pipeline run` three times while records stream in
/// over three partitions: the store's offsets and the sink's position
/// make every record one write, none lost, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_records_stream_applies_each_record_once() {
    const RECORDS: i64 = 3_000;
    let env = env("kafka_source_kill").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let mut pipeline = one_table(&env, &bootstrap, &url, "kk", 3).await;
    let records: Vec<Produced> = (1..=RECORDS)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    let writer = {
        let (bootstrap, url, records) = (bootstrap.clone(), url.clone(), records.clone());
        tokio::spawn(async move {
            for chunk in records.chunks(500) {
                produce(&bootstrap, "kk_orders", &url, V1, chunk).await;
            }
        })
    };
    for wait in [300u64, 900, 1_500] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        drop(pipeline); // SIGKILL
        pipeline = Pipeline::start(&env.config);
    }
    writer.await.unwrap();
    let mut all = vec![("o0".to_string(), Some(order(0, 0)))];
    all.extend(records);
    wait_docs(
        &env,
        "public.orders_json",
        &fold(&all, &["id", "customer", "qty"]),
    )
    .await;
    // One write per record: the first, then each of the others once.
    wait_writes(&env.sink, 1 + RECORDS).await;
    wait_all_running(&pipeline.url).await;
}

/// A topic deleted and created again while the pipeline was stopped ends
/// before the offset the source had read: the source stops, not retried,
/// naming the partition and the way out, rather than skipping the new
/// topic's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_again_behind_the_source_stops_it() {
    let env = env("kafka_source_recreated").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let pipeline = one_table(&env, &bootstrap, &url, "ka", 1).await;
    let first: Vec<Produced> = (1..=20)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "ka_orders", &url, V1, &first).await;
    wait_writes(&env.sink, 21).await;
    drop(pipeline);
    python(
        vec!["delete-topic".into(), bootstrap.clone(), "ka_orders".into()],
        String::new(),
    )
    .await;
    // Deleting is asynchronous in the broker: create until it takes.
    let again: Vec<Produced> = (100..103)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    topic(&bootstrap, "ka_orders", 1).await;
    produce(&bootstrap, "ka_orders", &url, V1, &again).await;
    let pipeline = Pipeline::start(&env.config);
    let start = Instant::now();
    let source = loop {
        let o = object(&pipeline.url, "source", "ka").await;
        if let Some(o) = o.filter(|o| o["state"] == "stalled") {
            break o;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the source did not stop"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let error = source["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the Kafka topic of source \"ka\" no longer holds the offsets")
            && error
                .contains("Partition 0 of topic \"ka_orders\" ends at offset 3, before offset 21")
            && error.contains("not retried"),
        "{error}"
    );
    // Nothing of the new topic was applied.
    assert_eq!(audit_count(&env.sink).await, 21);
}

/// Partitions added to a running table's topic are read without a
/// restart: records keyed into the new partitions reach the sink, each
/// once, and a restart afterwards reads none of them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_to_the_topic_are_read_without_a_restart() {
    let env = env("kafka_source_partitions").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let pipeline = one_table(&env, &bootstrap, &url, "kp", 1).await;
    let first: Vec<Produced> = (1..=20)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "kp_orders", &url, V1, &first).await;
    wait_writes(&env.sink, 21).await;
    python(
        vec![
            "partitions".into(),
            bootstrap.clone(),
            "kp_orders".into(),
            "3".into(),
        ],
        String::new(),
    )
    .await;
    // A fresh producer sees three partitions: most keys go to the new ones.
    let second: Vec<Produced> = (21..=80)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "kp_orders", &url, V1, &second).await;
    let mut all = vec![("o0".to_string(), Some(order(0, 0)))];
    all.extend(first);
    all.extend(second);
    let want = fold(&all, &["id", "customer", "qty"]);
    wait_docs(&env, "public.orders_json", &want).await;
    wait_writes(&env.sink, 81).await;
    drop(pipeline);
    let pipeline = Pipeline::start(&env.config);
    produce(
        &bootstrap,
        "kp_orders",
        &url,
        V1,
        &[("o81".into(), Some(order(81, 81)))],
    )
    .await;
    wait_writes(&env.sink, 82).await;
    wait_all_running(&pipeline.url).await;
}

/// A decimal over `bytes`, as Confluent's Python serializer writes it: in
/// as few bytes as the unscaled value takes (12.34 in two, where
/// `decimal(10,2)` could need five). Every record is a document with the
/// decimal as a number of its scale, none is undecodable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_decimals_are_read_whatever_their_length() {
    const PRICED: &str = r#"{"type":"record","name":"Priced","fields":[
        {"name":"id","type":"int"},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}}]}"#;
    let env = env("kafka_source_decimal").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kd_orders", 1).await;
    let prices = ["12.34", "-0.05", "12345678.90", "0.00", "99999999.99"];
    let records: Vec<Produced> = prices
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                format!("p{i}"),
                Some(json!({"id": i, "price": {"$decimal": p}})),
            )
        })
        .collect();
    produce(&bootstrap, "kd_orders", &url, PRICED, &records).await;
    env.sink
        .batch_execute(
            "CREATE TABLE public.priced_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    sql_ok(
        &pipeline.url,
        &[
            "-c",
            "CREATE SOURCE kd FROM KAFKA CONNECTION k (TOPIC 'kd_orders');
             CREATE TABLE kd_v1 FROM SOURCE kd FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;
             CREATE MATERIALIZED VIEW kd_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM kd_v1 t;
             CREATE SINK kd_sink FROM kd_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.priced_json');",
        ],
    )
    .await;
    // The snapshot read them; one more through the stream.
    let more: Vec<Produced> = vec![(
        "p9".into(),
        Some(json!({"id": 9, "price": {"$decimal": "-1234.5"}})),
    )];
    produce(&bootstrap, "kd_orders", &url, PRICED, &more).await;
    let want: BTreeMap<String, Value> = prices
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("p{i}"), i, p.to_string()))
        .chain([("p9".to_string(), 9, "-1234.50".to_string())])
        .map(|(k, i, p)| {
            (
                json!({"@key": k}).to_string(),
                json!({"id": i, "price": serde_json::from_str::<Value>(&p).unwrap()}),
            )
        })
        .collect();
    wait_docs(&env, "public.priced_json", &want).await;
    // Exactly as numeric(10,2) renders them: the scale kept.
    let texts: Vec<String> = env
        .sink
        .query(
            "SELECT (data->'price')::text FROM public.priced_json ORDER BY (data->>'id')::int",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        texts,
        [
            "12.34",
            "-0.05",
            "12345678.90",
            "0.00",
            "99999999.99",
            "-1234.50"
        ]
    );
    wait_all_running(&pipeline.url).await;
}

/// A Debezium change event's schema as Debezium's Avro converter writes
/// it (the row record defined in `before`, named in `after`; `source`
/// shortened).
const DEBEZIUM_ORDERS: &str = r#"{"type":"record","name":"Envelope","namespace":"pg.public.orders","fields":[
    {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
        {"name":"id","type":"int"},{"name":"customer","type":"string"},
        {"name":"note","type":["null","string"],"default":null}]}],"default":null},
    {"name":"after","type":["null","Value"],"default":null},
    {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql",
        "fields":[{"name":"db","type":"string"},{"name":"lsn","type":["null","long"],"default":null}]}},
    {"name":"op","type":"string"},
    {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

/// A change event of `op` with `before` and `after` rows (`id`,
/// `customer`, optional `note`).
fn event(op: &str, before: Option<Value>, after: Option<Value>) -> Option<Value> {
    Some(json!({
        "before": before, "after": after, "op": op, "ts_ms": 1,
        "source": {"db": "shop", "lsn": 42}
    }))
}

fn row(id: i64, customer: &str, note: Option<&str>) -> Value {
    json!({"id": id, "customer": customer, "note": note})
}

/// `ENVELOPE DEBEZIUM` over `FORMAT AVRO`: Debezium with its Avro
/// converter ([`debezium_tour`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_change_events_leave_exactly_their_rows() {
    debezium_tour("kdbz", "FORMAT AVRO", |bootstrap, topic, url| {
        let args = ["produce", bootstrap, topic, url, DEBEZIUM_ORDERS];
        args.map(String::from).to_vec()
    })
    .await;
}

/// A JSON Schema of orders, as a producer with Confluent's JSON Schema
/// serializer registers it.
const JSON_V1: &str = r#"{"type":"object","title":"Order","properties":{
    "id":{"type":"integer"},"customer":{"type":"string"},
    "price":{"type":["number","null"]},"tags":{"type":"array","items":{"type":"string"}}},
    "required":["id","customer"]}"#;
/// `note` added: data of either version is valid for the pinned reader
/// (its content model is open).
const JSON_V2: &str = r#"{"type":"object","title":"Order","properties":{
    "id":{"type":"integer"},"customer":{"type":"string"},
    "price":{"type":["number","null"]},"tags":{"type":"array","items":{"type":"string"}},
    "note":{"type":"string"}},
    "required":["id","customer"]}"#;
/// `id` a string: not what the pinned reader accepts.
const JSON_V3: &str = r#"{"type":"object","title":"Order","properties":{
    "id":{"type":"string"},"customer":{"type":"string"}},
    "required":["id","customer"]}"#;

async fn produce_json(
    bootstrap: &str,
    topic: &str,
    registry: &str,
    schema: &str,
    records: &[Produced],
) {
    let args = ["produce-json", bootstrap, topic, registry, schema];
    produce_lines(args.map(String::from).to_vec(), records).await;
}

/// `FORMAT JSON`: records written by Confluent's JSON Schema serializer,
/// read by the table's snapshot and then streamed (an update, a
/// tombstone, an insert) into documents with the properties' mapped
/// types (`price` a numeric with its scale, `tags` JSON); a producer that
/// adds a property keeps the table flowing and drift says column_drift;
/// one whose `id` is a string stalls the table at that record with the
/// compatibility engine's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_records_stream_drift_and_stall() {
    let env = env("kafka_source_json").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kj_orders", 1).await;
    let history: Vec<Produced> = vec![
        (
            "1".into(),
            Some(json!({"id": 1, "customer": "a", "price": 12.50, "tags": ["x"]})),
        ),
        (
            "2".into(),
            Some(json!({"id": 2, "customer": "b", "price": null})),
        ),
        (
            "3".into(),
            Some(json!({"id": 3, "customer": "c", "price": 1e2})),
        ),
    ];
    produce_json(&bootstrap, "kj_orders", &url, JSON_V1, &history).await;
    let pipeline = start_kafka_table(
        &env,
        "kj",
        "kj_orders",
        "FORMAT JSON USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    )
    .await;
    let admin = pipeline.url.clone();
    let key = |k: &str| json!({"@key": k}).to_string();
    let want: BTreeMap<String, Value> = [
        (
            key("1"),
            json!({"id": 1, "customer": "a", "price": 12.5, "tags": ["x"]}),
        ),
        (key("2"), json!({"id": 2, "customer": "b"})),
        (key("3"), json!({"id": 3, "customer": "c", "price": 100.0})),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    assert_eq!(audit_count(&env.sink).await, 3);

    let stream: Vec<Produced> = vec![
        (
            "1".into(),
            Some(json!({"id": 1, "customer": "a2", "price": 0.125})),
        ),
        ("2".into(), None),
        (
            "4".into(),
            Some(json!({"id": 4, "customer": "d", "tags": []})),
        ),
    ];
    produce_json(&bootstrap, "kj_orders", &url, JSON_V1, &stream).await;
    let mut want: BTreeMap<String, Value> = [
        (key("1"), json!({"id": 1, "customer": "a2", "price": 0.125})),
        (key("3"), json!({"id": 3, "customer": "c", "price": 100.0})),
        (key("4"), json!({"id": 4, "customer": "d", "tags": []})),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    // The numbers are numeric's text, with the scale the producer wrote
    // (Python writes 1e2 as 100.0).
    let prices: Vec<String> = env
        .sink
        .query(
            "SELECT (data->'price')::text FROM public.orders_json WHERE data ? 'price' ORDER BY (data->>'id')::int",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(prices, ["0.125", "100.0"]);

    // A property added: the table flows on, drift says so.
    compatibility(&url, "kj_orders-value", "NONE").await;
    produce_json(
        &bootstrap,
        "kj_orders",
        &url,
        JSON_V2,
        &[(
            "5".into(),
            Some(json!({"id": 5, "customer": "e", "note": "n"})),
        )],
    )
    .await;
    want.insert(key("5"), json!({"id": 5, "customer": "e"}));
    wait_docs(&env, "public.orders_json", &want).await;
    let row = drift_row(&admin, "kj_v1").await;
    assert_eq!(row["signal"], "column_drift", "{row}");
    assert_eq!(row["added_upstream"], json!(["note"]), "{row}");

    // `id` a string: the table stalls at that record (offset 7).
    produce_json(
        &bootstrap,
        "kj_orders",
        &url,
        JSON_V3,
        &[("6".into(), Some(json!({"id": "six", "customer": "f"})))],
    )
    .await;
    let stalled = wait_state(&admin, "kj_v1", "stalled").await;
    let error = stalled["error"].as_str().unwrap();
    assert!(
        error.contains("record at partition 0 offset 7 has writer schema id")
            && error.contains("cannot read"),
        "{stalled}"
    );
    wait_docs(&env, "public.orders_json", &want).await;
}

/// A JSON Schema whose `ship_to` is a `$ref` to another subject's schema
/// (Confluent's JSON Schema references): pinned with it (SHOW TABLES
/// lists it), the records read, the referenced object a JSON document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_with_references_is_pinned_and_read() {
    const ADDRESS: &str = r#"{"type":"object","properties":{
        "street":{"type":"string"},"country":{"type":"string"}},"required":["street"]}"#;
    const ORDER: &str = r#"{"type":"object","properties":{
        "id":{"type":"integer"},"ship_to":{"$ref":"address.json"}},"required":["id"]}"#;
    let env = env("kafka_source_json_refs").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kjr_orders", 1).await;
    let register = |subject: &'static str, schema: &'static str, references: Value| {
        let url = url.clone();
        async move {
            python(
                vec![
                    "register".into(),
                    url,
                    subject.into(),
                    schema.into(),
                    references.to_string(),
                    "JSON".into(),
                ],
                String::new(),
            )
            .await
            .trim()
            .parse::<u32>()
            .unwrap()
        }
    };
    register("kjr_address", ADDRESS, json!([])).await;
    let id = register(
        "kjr_orders-value",
        ORDER,
        json!([{"name": "address.json", "subject": "kjr_address", "version": 1}]),
    )
    .await;
    // Records as Confluent's JSON Schema serializer frames them: a zero
    // byte, the schema id, the JSON text.
    let record = |key: &'static str, value: Value| {
        let mut hex = format!("00{id:08x}");
        for b in value.to_string().bytes() {
            hex.push_str(&format!("{b:02x}"));
        }
        python(
            vec![
                "raw".into(),
                bootstrap.clone(),
                "kjr_orders".into(),
                key.into(),
                hex,
            ],
            String::new(),
        )
    };
    record(
        "1",
        json!({"id": 1, "ship_to": {"street": "Main 1", "country": "NL"}}),
    )
    .await;
    let pipeline = start_kafka_table(
        &env,
        "kjr",
        "kjr_orders",
        "FORMAT JSON USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    )
    .await;
    let admin = pipeline.url.clone();
    record("2", json!({"id": 2, "ship_to": {"street": "Side 2"}})).await;
    let key = |k: &str| json!({"@key": k}).to_string();
    let want: BTreeMap<String, Value> = [
        (
            key("1"),
            json!({"id": 1, "ship_to": {"street": "Main 1", "country": "NL"}}),
        ),
        (key("2"), json!({"id": 2, "ship_to": {"street": "Side 2"}})),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    let tables = sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    assert!(
        tables.contains(&format!(
            "kjr_orders-value id {id} (version 1) referencing address.json (kjr_address version 1)"
        )),
        "{tables}"
    );
    wait_state(&admin, "kjr_v1", "running").await;
}

/// A field of a `FileDescriptorProto` in its JSON form.
fn proto_field(name: &str, number: u32, kind: &str) -> Value {
    json!({"name": name, "number": number, "type": kind, "label": "LABEL_OPTIONAL"})
}

/// `shop/money.proto` and `shop/order.proto` (importing it and
/// `google/protobuf/timestamp.proto`) as `FileDescriptorProto` JSON,
/// dependencies first: message `shop.Order` with a field of every kind
/// the test reads, `customer` of type `customer` and the `extra` fields
/// after them.
fn order_proto(customer: &str, extra: &[Value]) -> String {
    let money = json!({"name": "shop/money.proto", "package": "shop", "syntax": "proto3",
        "messageType": [{"name": "Money", "field": [
            proto_field("cents", 1, "TYPE_INT64"), proto_field("currency", 2, "TYPE_STRING")]}]});
    let mut fields = vec![
        proto_field("id", 1, "TYPE_INT64"),
        proto_field("customer", 2, customer),
        json!({"name": "note", "number": 3, "type": "TYPE_STRING", "label": "LABEL_OPTIONAL",
               "proto3Optional": true, "oneofIndex": 0}),
        json!({"name": "status", "number": 4, "type": "TYPE_ENUM", "label": "LABEL_OPTIONAL",
               "typeName": ".shop.Order.Status"}),
        json!({"name": "at", "number": 5, "type": "TYPE_MESSAGE", "label": "LABEL_OPTIONAL",
               "typeName": ".google.protobuf.Timestamp"}),
        json!({"name": "tags", "number": 6, "type": "TYPE_STRING", "label": "LABEL_REPEATED"}),
        proto_field("big", 7, "TYPE_UINT64"),
        json!({"name": "total", "number": 8, "type": "TYPE_MESSAGE", "label": "LABEL_OPTIONAL",
               "typeName": ".shop.Money"}),
    ];
    fields.extend_from_slice(extra);
    let order = json!({"name": "shop/order.proto", "package": "shop", "syntax": "proto3",
        "dependency": ["google/protobuf/timestamp.proto", "shop/money.proto"],
        "messageType": [{"name": "Order", "field": fields, "oneofDecl": [{"name": "_note"}],
            "enumType": [{"name": "Status", "value": [
                {"name": "NEW", "number": 0}, {"name": "PAID", "number": 1}]}]}]});
    json!([money, order]).to_string()
}

/// Produces `records` as messages `shop.Order` of `files`
/// ([`order_proto`]) with Confluent's Protobuf serializer.
async fn produce_protobuf(
    bootstrap: &str,
    topic: &str,
    registry: &str,
    files: &str,
    records: &[Produced],
) {
    produce_lines(
        protobuf_args(bootstrap, topic, registry, files, "shop.Order"),
        records,
    )
    .await;
}

/// The producer script's arguments for messages `message` of `files`.
fn protobuf_args(
    bootstrap: &str,
    topic: &str,
    registry: &str,
    files: &str,
    message: &str,
) -> Vec<String> {
    let args = [
        "produce-protobuf",
        bootstrap,
        topic,
        registry,
        files,
        message,
    ];
    args.map(String::from).to_vec()
}

/// `FORMAT PROTOBUF`: records written by Confluent's Protobuf serializer
/// (the schema registered as a serialized descriptor, its import of
/// `shop/money.proto` as a reference), read by the table's snapshot and
/// then streamed (an update, a tombstone, an insert) into documents equal
/// to `to_jsonb` of the same values in the mapped PostgreSQL types, with
/// proto3's defaults for fields without presence; a producer that adds a
/// field keeps the table flowing and drift says column_drift; one whose
/// `customer` became an `int64` stalls the table at that record with the
/// compatibility engine's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_records_stream_drift_and_stall() {
    let env = env("kafka_source_protobuf").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kpb_orders", 1).await;
    let v1 = order_proto("TYPE_STRING", &[]);
    let history: Vec<Produced> = vec![
        (
            "1".into(),
            Some(
                json!({"id": 1, "customer": "a", "note": "n", "status": "PAID",
                "at": "2024-05-01T12:30:00.500Z", "tags": ["x"], "big": "18446744073709551615",
                "total": {"cents": 1999, "currency": "EUR"}}),
            ),
        ),
        ("2".into(), Some(json!({"id": 2, "customer": "b"}))),
        ("3".into(), Some(json!({"id": 3, "note": ""}))),
    ];
    produce_protobuf(&bootstrap, "kpb_orders", &url, &v1, &history).await;
    let pipeline = start_kafka_table(
        &env,
        "kpb",
        "kpb_orders",
        "FORMAT PROTOBUF USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    )
    .await;
    let admin = pipeline.url.clone();
    let key = |k: &str| json!({"@key": k}).to_string();
    // Without presence, an absent field is its default: "", 0, the first
    // enum value, [].
    let defaults =
        |id: i64| json!({"id": id, "customer": "", "status": "NEW", "tags": [], "big": 0});
    let with = |mut doc: Value, fields: Value| {
        for (k, v) in fields.as_object().unwrap() {
            doc[k] = v.clone();
        }
        doc
    };
    let first = with(
        defaults(1),
        json!({"customer": "a", "note": "n", "status": "PAID", "at": "2024-05-01T12:30:00.5+00:00",
               "tags": ["x"], "big": 18446744073709551615u64,
               "total": {"cents": 1999, "currency": "EUR"}}),
    );
    let want: BTreeMap<String, Value> = [
        (key("1"), first),
        (key("2"), with(defaults(2), json!({"customer": "b"}))),
        (key("3"), with(defaults(3), json!({"note": ""}))),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    assert_eq!(audit_count(&env.sink).await, 3);
    // The document is to_jsonb of the same values in the mapped types.
    env.sink
        .batch_execute("SET TimeZone = 'UTC'")
        .await
        .unwrap();
    let (typed, document): (String, String) = {
        let row = env
            .sink
            .query_one(
                "SELECT jsonb_strip_nulls(to_jsonb(e))::text, (SELECT data::text FROM public.orders_json WHERE key = $1::text::jsonb)
                   FROM (SELECT 1::bigint AS id, 'a'::text AS customer, 'n'::text AS note, 'PAID'::text AS status,
                                '2024-05-01 12:30:00.5+00'::timestamptz AS at, '[\"x\"]'::jsonb AS tags,
                                18446744073709551615::numeric AS big,
                                '{\"cents\": 1999, \"currency\": \"EUR\"}'::jsonb AS total) e",
                &[&key("1")],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(document, typed);
    let tables = sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    assert!(
        tables.contains("kpb_orders-value id")
            && tables.contains(
                "(version 1) message shop.Order referencing shop/money.proto (shop/money.proto version 1)"
            ),
        "{tables}"
    );

    // The subject holds Protobuf: FORMAT AVRO is refused, saying so.
    let out = evolve(&[
        "sql",
        "--admin",
        &admin,
        "-c",
        "CREATE TABLE kpb_avro FROM SOURCE kpb FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    ])
    .await;
    assert!(!out.status.success());
    let error = text(&out.stderr);
    assert!(
        error.contains("is a schema of type PROTOBUF, and FORMAT AVRO reads AVRO schemas; name the format its producer writes"),
        "{error}"
    );

    let stream: Vec<Produced> = vec![
        ("1".into(), Some(json!({"id": 1, "customer": "a2"}))),
        ("2".into(), None),
        ("4".into(), Some(json!({"id": 4}))),
    ];
    produce_protobuf(&bootstrap, "kpb_orders", &url, &v1, &stream).await;
    let mut want: BTreeMap<String, Value> = [
        (key("1"), with(defaults(1), json!({"customer": "a2"}))),
        (key("3"), with(defaults(3), json!({"note": ""}))),
        (key("4"), defaults(4)),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    assert_eq!(audit_count(&env.sink).await, 6);

    // A field added (compatible): the table flows on, drift says so.
    let v2 = order_proto("TYPE_STRING", &[proto_field("region", 9, "TYPE_STRING")]);
    produce_protobuf(
        &bootstrap,
        "kpb_orders",
        &url,
        &v2,
        &[(
            "5".into(),
            Some(json!({"id": 5, "customer": "e", "region": "eu"})),
        )],
    )
    .await;
    want.insert(key("5"), with(defaults(5), json!({"customer": "e"})));
    wait_docs(&env, "public.orders_json", &want).await;
    assert_eq!(audit_count(&env.sink).await, 7);
    let row = drift_row(&admin, "kpb_v1").await;
    assert_eq!(row["signal"], "column_drift", "{row}");
    assert_eq!(row["added_upstream"], json!(["region"]), "{row}");

    // `customer` an int64: the table stalls at that record (offset 7).
    compatibility(&url, "kpb_orders-value", "NONE").await;
    let v3 = order_proto("TYPE_INT64", &[]);
    produce_protobuf(
        &bootstrap,
        "kpb_orders",
        &url,
        &v3,
        &[("6".into(), Some(json!({"id": 6, "customer": 6})))],
    )
    .await;
    let stalled = wait_state(&admin, "kpb_v1", "stalled").await;
    let error = stalled["error"].as_str().unwrap();
    assert!(
        error.contains("record at partition 0 offset 7 has writer schema id")
            && error.contains("cannot read"),
        "{stalled}"
    );
    wait_docs(&env, "public.orders_json", &want).await;
    assert_eq!(audit_count(&env.sink).await, 7);
}

/// The Debezium envelope of `DEBEZIUM_ORDERS` as Confluent's JSON Schema
/// converter writes it: optional values as a `oneOf` with `null`.
const DEBEZIUM_ORDERS_JSON: &str = r#"{"type":"object","title":"pg.public.orders.Envelope",
    "required":["source","op"],"properties":{
    "before":{"oneOf":[{"type":"null"},{"type":"object","title":"pg.public.orders.Value",
        "required":["id","customer"],"properties":{"id":{"type":"integer","connect.type":"int32"},
        "customer":{"type":"string"},"note":{"oneOf":[{"type":"null"},{"type":"string"}]}}}]},
    "after":{"oneOf":[{"type":"null"},{"type":"object","title":"pg.public.orders.Value",
        "required":["id","customer"],"properties":{"id":{"type":"integer","connect.type":"int32"},
        "customer":{"type":"string"},"note":{"oneOf":[{"type":"null"},{"type":"string"}]}}}]},
    "source":{"type":"object","properties":{"db":{"type":"string"},"lsn":{"oneOf":[{"type":"null"},{"type":"integer"}]}}},
    "op":{"type":"string"},
    "ts_ms":{"oneOf":[{"type":"null"},{"type":"integer"}]}}}"#;

/// The Debezium envelope of `DEBEZIUM_ORDERS` as Confluent's Protobuf
/// converter writes it (a `FileDescriptorProto` in JSON): `Envelope`
/// first, the optional note a `google.protobuf.StringValue`.
fn debezium_orders_proto() -> String {
    let message = |name: &str, fields: Vec<Value>| json!({"name": name, "field": fields});
    let of = |name: &str, number: u32, type_name: &str| {
        json!({"name": name, "number": number, "type": "TYPE_MESSAGE", "label": "LABEL_OPTIONAL",
               "typeName": type_name})
    };
    let file = json!({"name": "pg/public/orders.proto", "package": "pg.public.orders",
        "syntax": "proto3", "dependency": ["google/protobuf/wrappers.proto"],
        "messageType": [
            message("Envelope", vec![
                of("before", 1, ".pg.public.orders.Value"),
                of("after", 2, ".pg.public.orders.Value"),
                of("source", 3, ".pg.public.orders.Source"),
                proto_field("op", 4, "TYPE_STRING"),
                proto_field("ts_ms", 5, "TYPE_INT64")]),
            message("Value", vec![
                proto_field("id", 1, "TYPE_INT32"),
                proto_field("customer", 2, "TYPE_STRING"),
                of("note", 3, ".google.protobuf.StringValue")]),
            message("Source", vec![
                proto_field("db", 1, "TYPE_STRING"),
                proto_field("lsn", 2, "TYPE_INT64")])]});
    json!([file]).to_string()
}

/// Debezium's change events in a topic of `name`'s, written by the
/// producer script's `args` (a format's produce command without its
/// records), read by table `<name>_v1` with `format` and `ENVELOPE
/// DEBEZIUM`: the snapshot keeps each key's last event, the stream
/// applies updates, deletes and inserts with exact write counts, and a
/// truncate event stalls the table at its offset.
async fn debezium_tour(name: &str, format: &str, args: impl Fn(&str, &str, &str) -> Vec<String>) {
    let env = env(&format!("kafka_source_{name}")).await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let orders = format!("{name}_orders");
    topic(&bootstrap, &orders, 1).await;
    let produce = |records: Vec<Produced>| {
        let args = args(&bootstrap, &orders, &url);
        async move { produce_lines(args, &records).await }
    };
    // Each key's last event counts: an update, a delete followed by its
    // tombstone, a delete without one.
    let history: Vec<Produced> = vec![
        ("1".into(), event("r", None, Some(row(1, "a", None)))),
        ("2".into(), event("r", None, Some(row(2, "b", Some("n"))))),
        ("3".into(), event("r", None, Some(row(3, "c", None)))),
        (
            "2".into(),
            event("u", Some(row(2, "b", Some("n"))), Some(row(2, "b2", None))),
        ),
        ("3".into(), event("d", Some(row(3, "c", None)), None)),
        ("3".into(), None),
        ("4".into(), event("c", None, Some(row(4, "d", None)))),
        ("4".into(), event("d", Some(row(4, "d", None)), None)),
    ];
    produce(history).await;
    let pipeline = start_kafka_table(
        &env,
        name,
        &orders,
        &format!("{format} USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE DEBEZIUM"),
    )
    .await;
    let key = |k: &str| json!({"@key": k}).to_string();
    let want: BTreeMap<String, Value> = [
        (key("1"), json!({"id": 1, "customer": "a"})),
        (key("2"), json!({"id": 2, "customer": "b2"})),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    // The snapshot wrote the two rows, nothing of keys 3 and 4.
    assert_eq!(audit_count(&env.sink).await, 2);

    let stream: Vec<Produced> = vec![
        (
            "1".into(),
            event("u", Some(row(1, "a", None)), Some(row(1, "a2", None))),
        ),
        ("2".into(), event("d", Some(row(2, "b2", None)), None)),
        ("2".into(), None),
        ("4".into(), event("c", None, Some(row(4, "d", Some("x"))))),
    ];
    produce(stream).await;
    let want: BTreeMap<String, Value> = [
        (key("1"), json!({"id": 1, "customer": "a2"})),
        (key("4"), json!({"id": 4, "customer": "d", "note": "x"})),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &want).await;
    // An update, a delete, an insert.
    assert_eq!(audit_count(&env.sink).await, 5);
    let table = format!("{name}_v1");
    wait_state(&pipeline.url, &table, "running").await;

    // A truncate event (offset 12) stalls the table there, the way out
    // named; nothing after it is applied.
    produce(vec![
        ("1".into(), event("t", None, None)),
        ("5".into(), event("c", None, Some(row(5, "e", None)))),
    ])
    .await;
    let stalled = wait_state(&pipeline.url, &table, "stalled").await;
    let error = stalled["error"].as_str().unwrap();
    assert!(
        error.contains("record at partition 0 offset 12 is a truncate event (op \"t\")")
            && error.contains("skipped.operations"),
        "{stalled}"
    );
    wait_docs(&env, "public.orders_json", &want).await;
    assert_eq!(audit_count(&env.sink).await, 5);
}

/// `ENVELOPE DEBEZIUM` over `FORMAT JSON`: Debezium with Confluent's
/// JSON Schema converter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_change_events_in_json_schema() {
    debezium_tour("kdbzj", "FORMAT JSON", |bootstrap, topic, url| {
        let args = ["produce-json", bootstrap, topic, url, DEBEZIUM_ORDERS_JSON];
        args.map(String::from).to_vec()
    })
    .await;
}

/// `ENVELOPE DEBEZIUM` over `FORMAT PROTOBUF`: Debezium with Confluent's
/// Protobuf converter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_change_events_in_protobuf() {
    let files = debezium_orders_proto();
    debezium_tour("kdbzp", "FORMAT PROTOBUF", |bootstrap, topic, url| {
        protobuf_args(bootstrap, topic, url, &files, "pg.public.orders.Envelope")
    })
    .await;
}

const PAYMENT: &str = r#"{"type":"record","name":"Payment","namespace":"shop","fields":[
    {"name":"order","type":"int"},{"name":"cents","type":"long"}]}"#;
const SHOP_ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"int"},{"name":"customer","type":"string"}]}"#;

/// A topic of two record types (orders and payments), each registered
/// under TopicRecordNameStrategy (`<topic>-shop.Order`,
/// `<topic>-shop.Payment`) by Confluent's serializer, some keys shared by
/// both types: a table per type, each pinned from its subject with
/// `SUBJECT`, reads its own records and skips the other type's, in the
/// snapshot and the stream. Appended (`ENVELOPE NONE`) each record of the
/// type is a row; keyed (`ENVELOPE UPSERT`) a key's row is its last record
/// of the type, even where the key's last record is of the other type
/// (the snapshot's first pass tells them apart), and a tombstone deletes
/// the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_of_two_record_types_feeds_a_table_per_type() {
    let env = env("kafka_source_record_types").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kev_events", 1).await;
    let produce = |schema: &'static str, records: Vec<Produced>| {
        let args = [
            "produce-topic-record",
            &bootstrap,
            "kev_events",
            &url,
            schema,
        ];
        let args = args.map(String::from).to_vec();
        async move { produce_lines(args, &records).await }
    };
    let order = |id: i64| json!({"id": id, "customer": format!("c{id}")});
    let payment = |id: i64, cents: i64| json!({"order": id, "cents": cents});
    // Offsets 0 to 4; the last record of key o1 is a payment.
    produce(
        SHOP_ORDER,
        vec![("o1".into(), Some(order(1))), ("o2".into(), Some(order(2)))],
    )
    .await;
    produce(PAYMENT, vec![("p1".into(), Some(payment(1, 500)))]).await;
    produce(SHOP_ORDER, vec![("o3".into(), Some(order(3)))]).await;
    produce(PAYMENT, vec![("o1".into(), Some(payment(1, 900)))]).await;

    let pipeline = start_kafka_table(
        &env,
        "kev",
        "kev_events",
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr SUBJECT 'kev_events-shop.Order' ENVELOPE NONE",
    )
    .await;
    let admin = pipeline.url.clone();
    env.sink
        .batch_execute(
            "CREATE TABLE public.payments_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);
             CREATE TABLE public.orders_keyed (key jsonb PRIMARY KEY, data jsonb NOT NULL);",
        )
        .await
        .unwrap();
    sql_ok(
        &admin,
        &[
            "-c",
            "CREATE TABLE pay_v1 FROM SOURCE kev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr
               SUBJECT 'kev_events-shop.Payment' ENVELOPE NONE;
             CREATE MATERIALIZED VIEW pay_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM pay_v1 t;
             CREATE SINK pay_sink FROM pay_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.payments_json');
             CREATE TABLE keyed_v1 FROM SOURCE kev FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr
               SUBJECT 'kev_events-shop.Order';
             CREATE MATERIALIZED VIEW keyed_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM keyed_v1 t;
             CREATE SINK keyed_sink FROM keyed_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_keyed');",
        ],
    )
    .await;
    let at = |offset: i64| json!({"@offset": format!("kev_events/0/{offset}")}).to_string();
    let key = |k: &str| json!({"@key": k}).to_string();
    let mut orders: BTreeMap<String, Value> =
        [(at(0), order(1)), (at(1), order(2)), (at(3), order(3))].into();
    let mut payments: BTreeMap<String, Value> =
        [(at(2), payment(1, 500)), (at(4), payment(1, 900))].into();
    let mut keyed: BTreeMap<String, Value> = [
        (key("o1"), order(1)),
        (key("o2"), order(2)),
        (key("o3"), order(3)),
    ]
    .into();
    wait_docs(&env, "public.orders_json", &orders).await;
    wait_docs(&env, "public.payments_json", &payments).await;
    wait_docs(&env, "public.orders_keyed", &keyed).await;

    // Streamed: offsets 5 to 8, a payment of key o2 and a tombstone of o3.
    produce(PAYMENT, vec![("p2".into(), Some(payment(2, 700)))]).await;
    produce(SHOP_ORDER, vec![("o4".into(), Some(order(4)))]).await;
    produce(SHOP_ORDER, vec![("o3".into(), None)]).await;
    produce(PAYMENT, vec![("o2".into(), Some(payment(2, 100)))]).await;
    payments.insert(at(5), payment(2, 700));
    payments.insert(at(8), payment(2, 100));
    orders.insert(at(6), order(4));
    keyed.insert(key("o4"), order(4));
    keyed.remove(&key("o3"));
    wait_docs(&env, "public.orders_json", &orders).await;
    wait_docs(&env, "public.payments_json", &payments).await;
    wait_docs(&env, "public.orders_keyed", &keyed).await;
    // The appended orders' sink wrote its four documents and nothing else.
    assert_eq!(audit_count(&env.sink).await, 4);
    let tables = sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    assert!(tables.contains("kev_events-shop.Payment id"), "{tables}");
    for table in ["kev_v1", "pay_v1", "keyed_v1"] {
        wait_state(&admin, table, "running").await;
    }
}

/// The types of the references test: `Country` (subject
/// `kref_country`), `Address` using it (subject `kref_address`), and the
/// value schema `Order` using `Address` for two fields, one nullable.
const COUNTRY: &str =
    r#"{"type":"enum","name":"Country","namespace":"shop","symbols":["NL","DE","FR"]}"#;
const ADDRESS: &str = r#"{"type":"record","name":"Address","namespace":"shop","fields":[
    {"name":"street","type":"string"},{"name":"country","type":"shop.Country"}]}"#;
const ORDER_REF_V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"int"},{"name":"ship_to","type":"shop.Address"},
    {"name":"bill_to","type":["null","shop.Address"],"default":null}]}"#;
/// A field with a default added, still using `Address`.
const ORDER_REF_V2: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"id","type":"int"},{"name":"ship_to","type":"shop.Address"},
    {"name":"bill_to","type":["null","shop.Address"],"default":null},
    {"name":"note","type":["null","string"],"default":null}]}"#;

/// Registers `schema` under `subject` with `references` (`[{name,
/// subject, version}]`); its id.
async fn register_with(url: &str, subject: &str, schema: &str, references: Value) -> String {
    python(
        vec![
            "register".into(),
            url.into(),
            subject.into(),
            schema.into(),
            references.to_string(),
        ],
        String::new(),
    )
    .await
    .trim()
    .to_string()
}

/// Produces `records` with the subject's latest schema, as a producer
/// configured with `use.latest.version` does (its references resolved by
/// the client, nothing registered).
async fn produce_latest(bootstrap: &str, topic: &str, registry: &str, records: &[Produced]) {
    let args = ["produce-latest", bootstrap, topic, registry];
    produce_lines(args.map(String::from).to_vec(), records).await;
}

fn address(street: &str, country: &str) -> Value {
    json!({"street": street, "country": country})
}

/// A table's snapshot of a topic larger than the chunks its reader hands
/// over, over three partitions: the UPSERT table holds each key's last
/// record, with keys written twice and keys deleted by a tombstone left
/// out, and an ENVELOPE NONE table of the same topic one row per record
/// with a value; both exact. The UPSERT snapshot keeps 1,000 keys in
/// memory (`kafka_snapshot_memory_keys`), so its keys move to a file
/// midway, which is gone once the snapshot is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_a_chunk_keeps_each_keys_last_record() {
    const KEYS: i64 = 6_000;
    let env = env("kafka_source_big").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let config = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(
        &env.config,
        format!("kafka_snapshot_memory_keys = 1000\n{config}"),
    )
    .unwrap();
    topic(&bootstrap, "kbig", 3).await;
    let mut produced: Vec<Produced> = (0..KEYS)
        .map(|i| (format!("k{i}"), Some(order(i, 1))))
        .collect();
    produced.extend(
        (0..KEYS)
            .step_by(3)
            .map(|i| (format!("k{i}"), Some(order(i, 2)))),
    );
    produced.extend((0..KEYS).step_by(10).map(|i| (format!("k{i}"), None)));
    // 8,600 records, of which 8,000 have a value.
    assert_eq!(produced.len(), 8_600);
    produce(&bootstrap, "kbig", &url, V1, &produced).await;
    let want = fold(&produced, &["id", "customer", "qty"]);
    assert_eq!(want.len(), 5_400);

    let log = env.dir.join("pipeline.log");
    let pipeline = Pipeline::start_with(
        &env.config,
        &[],
        &[],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let admin = pipeline.url.clone();
    sql_ok(
        &admin,
        &["-c", "CREATE SOURCE kbig FROM KAFKA CONNECTION k (TOPIC 'kbig');
                 CREATE TABLE kbig_v1 FROM SOURCE kbig
                   FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT;
                 CREATE MATERIALIZED VIEW kbig_json AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM kbig_v1 t;
                 CREATE SINK kbig_sink FROM kbig_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.kbig_json');
                 CREATE TABLE kbig_log FROM SOURCE kbig
                   FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE NONE;
                 CREATE MATERIALIZED VIEW kbig_log_json AS
                   SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM kbig_log t;
                 CREATE SINK kbig_log_sink FROM kbig_log_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.kbig_log_json');"],
    )
    .await;
    wait_state(&admin, "kbig_v1", "running").await;
    wait_state(&admin, "kbig_log", "running").await;
    wait_docs(&env, "public.kbig_json", &want).await;
    let start = Instant::now();
    loop {
        let rows: i64 = env
            .sink
            .query_one(
                "SELECT count(*) FROM public.kbig_log_json WHERE data->>'qty' IN ('1', '2')",
                &[],
            )
            .await
            .map_or(0, |r| r.get(0));
        if rows == 8_000 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "kbig_log_json has {rows} rows after 90 s, 8000 expected"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (qty1, qty2): (i64, i64) = {
        let r = env
            .sink
            .query_one(
                "SELECT count(*) FILTER (WHERE data->>'qty' = '1'), \
                        count(*) FILTER (WHERE data->>'qty' = '2') FROM public.kbig_log_json",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((qty1, qty2), (6_000, 2_000));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logged
            .matches("an upsert snapshot's keys moved to disk")
            .count(),
        1,
        "{logged}"
    );
    let left: Vec<String> = std::fs::read_dir(env.dir.join("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("snapshot-keys-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A value schema that takes its types from other subjects (Confluent
/// `references`, two levels: `Order` uses `Address`, which uses
/// `Country`): CREATE TABLE pins it with the referenced schemas, the
/// snapshot and the stream write exact documents (a referenced record is
/// a JSON object, a nullable one left out when null) and exact counts, a
/// second version of `Order` (a field with a default, still referencing
/// `Address`) is read by the pinned reader without a stall (drift names
/// the field; a record changing only it writes nothing), and after a
/// restart the table reads on from its stored schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_with_references_is_pinned_and_read_across_versions() {
    let env = env("kafka_source_refs").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kref_orders", 1).await;
    register_with(&url, "kref_country", COUNTRY, json!([])).await;
    register_with(
        &url,
        "kref_address",
        ADDRESS,
        json!([{"name": "shop.Country", "subject": "kref_country", "version": 1}]),
    )
    .await;
    let to_address = json!([{"name": "shop.Address", "subject": "kref_address", "version": 1}]);
    let v1_id = register_with(&url, "kref_orders-value", ORDER_REF_V1, to_address.clone()).await;
    let order_ref = |id: i64, street: &str, bill: Option<&str>| {
        json!({"id": id, "ship_to": address(street, "NL"),
               "bill_to": bill.map(|b| address(b, "DE"))})
    };

    // History: the table's snapshot reads it.
    let mut produced: Vec<Produced> = (1..=5)
        .map(|i| {
            let bill = (i % 2 == 0).then(|| format!("Bill {i}"));
            (
                format!("o{i}"),
                Some(order_ref(i, &format!("Main {i}"), bill.as_deref())),
            )
        })
        .collect();
    produce_latest(&bootstrap, "kref_orders", &url, &produced).await;

    let pipeline = start_kafka_table(
        &env,
        "kref",
        "kref_orders",
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT",
    )
    .await;
    let admin = pipeline.url.clone();
    let fields = ["id", "ship_to", "bill_to"];
    let want = fold(&produced, &fields);
    // The documents as written out: the referenced records are objects,
    // their enum a string, a null bill_to left out.
    assert_eq!(
        want[&json!({"@key": "o2"}).to_string()],
        json!({"id": 2, "ship_to": {"street": "Main 2", "country": "NL"},
               "bill_to": {"street": "Bill 2", "country": "DE"}})
    );
    assert_eq!(
        want[&json!({"@key": "o1"}).to_string()],
        json!({"id": 1, "ship_to": {"street": "Main 1", "country": "NL"}})
    );
    wait_docs(&env, "public.orders_json", &want).await;
    wait_writes(&env.sink, 5).await;
    wait_state(&admin, "kref_v1", "running").await;
    let tables = sql_ok(&admin, &["-c", "SHOW TABLES"]).await;
    // With the schemas it references, in dependency order.
    assert!(
        tables.contains(&format!(
            "kref_orders-value id {v1_id} (version 1) referencing shop.Country (kref_country version 1), shop.Address (kref_address version 1)"
        )),
        "{tables}"
    );

    // The stream: an update, a tombstone, an insert.
    let batch: Vec<Produced> = vec![
        ("o1".into(), Some(order_ref(1, "Moved 1", Some("Bill 1")))),
        ("o2".into(), None),
        ("o6".into(), Some(order_ref(6, "Main 6", None))),
    ];
    produce_latest(&bootstrap, "kref_orders", &url, &batch).await;
    produced.extend(batch);
    wait_docs(&env, "public.orders_json", &fold(&produced, &fields)).await;
    wait_writes(&env.sink, 5 + 3).await;

    // Version 2 of Order, still referencing Address: read by the pinned
    // reader, no stall; o3 changes only the new field (no write).
    let v2_id = register_with(&url, "kref_orders-value", ORDER_REF_V2, to_address).await;
    assert_ne!(v2_id, v1_id);
    let with_note = |mut v: Value, note: &str| {
        v["note"] = json!(note);
        v
    };
    let batch: Vec<Produced> = vec![
        (
            "o3".into(),
            Some(with_note(order_ref(3, "Main 3", None), "same")),
        ),
        (
            "o4".into(),
            Some(with_note(order_ref(4, "Main 4", None), "bill dropped")),
        ),
        (
            "o7".into(),
            Some(with_note(order_ref(7, "Main 7", Some("Bill 7")), "new")),
        ),
    ];
    produce_latest(&bootstrap, "kref_orders", &url, &batch).await;
    produced.extend(batch);
    wait_docs(&env, "public.orders_json", &fold(&produced, &fields)).await;
    wait_writes(&env.sink, 8 + 2).await;
    assert_eq!(table_status(&admin, "kref_v1").await["state"], "running");
    let row = drift_row(&admin, "kref_v1").await;
    assert_eq!(row["signal"], "column_drift", "{row}");
    assert_eq!(row["added_upstream"], json!(["note"]), "{row}");

    // A restart: the table parses its stored schema again and reads on.
    drop(pipeline);
    let pipeline = Pipeline::start(&env.config);
    let batch: Vec<Produced> = vec![(
        "o8".into(),
        Some(with_note(order_ref(8, "Main 8", None), "after restart")),
    )];
    produce_latest(&bootstrap, "kref_orders", &url, &batch).await;
    produced.extend(batch);
    wait_docs(&env, "public.orders_json", &fold(&produced, &fields)).await;
    wait_writes(&env.sink, 10 + 1).await;
    wait_all_running(&pipeline.url).await;
    assert_eq!(audit_count(&env.sink).await, 11);
}

/// The broker crashes (SIGKILL) and comes back while records stream in:
/// nothing is lost or applied twice. The registry down when the stream
/// opens: the source retries and its status says why; once the registry
/// is back, the records flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_and_a_registry_outage_lose_nothing() {
    const RECORDS: i64 = 1_500;
    let env = env("kafka_source_restart").await;
    // A broker of this test's own: it is restarted.
    let mut broker = tokio::task::spawn_blocking(evolve_test::Kafka::start)
        .await
        .unwrap()
        .expect("start a broker");
    let bootstrap = broker.bootstrap();
    let (registry, url) = serve_registry(&env, "127.0.0.1:0", &[]);
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "[connections.k]\nurl = \"{}\"\n[connections.csr]\nurl = \"{url}\"\n",
        broker.url()
    ));
    std::fs::write(&env.config, config).unwrap();
    let mut pipeline = one_table(&env, &bootstrap, &url, "kr", 2).await;

    let records: Vec<Produced> = (1..=RECORDS)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    let (first, second) = records.split_at(RECORDS as usize / 2);
    produce(&bootstrap, "kr_orders", &url, V1, first).await;
    broker = tokio::task::spawn_blocking(move || {
        broker.restart().expect("restart the broker");
        broker
    })
    .await
    .unwrap();
    produce(&bootstrap, "kr_orders", &url, V1, second).await;
    let mut all = vec![("o0".to_string(), Some(order(0, 0)))];
    all.extend(records);
    let fields = ["id", "customer", "qty"];
    wait_docs(&env, "public.orders_json", &fold(&all, &fields)).await;
    wait_writes(&env.sink, 1 + RECORDS).await;

    // The registry down while the stream opens (it knows no writer
    // schema yet): the source says why and retries.
    drop(pipeline);
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    drop(registry);
    pipeline = Pipeline::start(&env.config);
    let more: Vec<Produced> = vec![("o0".into(), Some(order(0, 7)))];
    // Written with a producer that has the schema's id already: a raw
    // record in the wire format (id 1, then the Avro datum of order 0/7).
    python(
        vec![
            "raw".into(),
            bootstrap.clone(),
            "kr_orders".into(),
            "o0".into(),
            "0000000001000463300e".into(),
        ],
        String::new(),
    )
    .await;
    all.extend(more);
    let start = Instant::now();
    let shown = loop {
        let source = object(&pipeline.url, "source", "kr").await;
        let error = source
            .as_ref()
            .and_then(|s| s["error"].as_str())
            .unwrap_or_default()
            .to_string();
        if error.contains("schema registry connection \"csr\"") {
            // Retried, and shown so: not stalled.
            assert_eq!(source.as_ref().unwrap()["state"], "retrying", "{source:?}");
            break error;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{source:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(shown.contains("cannot connect"), "{shown}");
    let (_registry, _) = serve_registry(&env, &format!("127.0.0.1:{port}"), &[]);
    wait_docs(&env, "public.orders_json", &fold(&all, &fields)).await;
    wait_writes(&env.sink, 2 + RECORDS).await;
    wait_all_running(&pipeline.url).await;
    drop(pipeline);
    drop(broker);
}

/// `evolve demo kafka`, the README's Kafka tour, on its own broker,
/// registry and cluster: exits 0 with every check passed, the swap's
/// writes equal to the orders whose document changed. Its setup creates
/// sources, tables and sinks while records stream in, so each statement
/// restarts the streams under load (a stream that lost the batch it was
/// reading when the engine dropped its `next()` lost records there).
#[test]
fn demo_kafka_tours_the_kafka_table_with_exact_counts() {
    let out = Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(["demo", "kafka"])
        .output()
        .expect("run evolve demo kafka");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "evolve demo kafka failed\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(!stdout.contains('✗'), "{stdout}");
    let swap = stdout
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("downstream changes: ")?;
            let (writes, rest) = rest.split_once("   orders whose document really changed: ")?;
            let (changed, _) = rest.split_once("   ")?;
            Some((writes.parse::<u64>().ok()?, changed.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no swap line\n{stdout}"));
    assert_eq!(swap.0, swap.1, "{stdout}");
    assert!(swap.0 >= 2_000, "{stdout}");
    for line in [
        "only orders_v1 stalls: clicks_json received ",
        "no stall: orders_v1 is running",
        "evolve drift: orders_v1 (topic.orders) column_drift, running; added upstream: coupon",
    ] {
        assert!(stdout.contains(line), "{line}\n{stdout}");
    }
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("all 9 checks passed in "), "{stdout}");
}

/// Runs `code` with `python3 -c` and `args` (after the script name);
/// panics with its stderr when it fails.
async fn python_code(code: &'static str, args: Vec<String>) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new("python3")
            .arg("-c")
            .arg(code)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "python3 -c: {}", text(&out.stderr));
    })
    .await
    .unwrap();
}

/// Produces one record without a key, its value the bytes of `hex`
/// (none: a tombstone without a key).
const KEYLESS: &str = r#"
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1]})
p.produce(sys.argv[2], key=None, value=bytes.fromhex(sys.argv[3]) if len(sys.argv) > 3 else None)
if p.flush(30):
    raise SystemExit("not delivered")
"#;

/// Waits until source `name` shows `state`; returns its status.
async fn wait_source(admin: &str, name: &str, state: &str) -> Value {
    let start = Instant::now();
    loop {
        let o = object(admin, "source", name).await;
        if let Some(o) = o.clone().filter(|o| o["state"] == state) {
            return o;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "source {name} is not {state} after 60 s: {o:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A tombstone for a key the table never had changes nothing (no sink
/// write, the table runs on); a record without a key under ENVELOPE
/// UPSERT stalls its table at that record, naming it, and a table
/// created afterwards over the same topic stalls in its snapshot the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_of_an_unknown_key_is_nothing_and_a_keyless_record_stalls() {
    let env = env("kafka_source_keys").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let pipeline = one_table(&env, &bootstrap, &url, "kn", 1).await;
    // Offsets 1 and 2.
    let records: Vec<Produced> = vec![("never".into(), None), ("o1".into(), Some(order(1, 1)))];
    produce(&bootstrap, "kn_orders", &url, V1, &records).await;
    let mut all = vec![("o0".to_string(), Some(order(0, 0)))];
    all.extend(records);
    let fields = ["id", "customer", "qty"];
    wait_docs(&env, "public.orders_json", &fold(&all, &fields)).await;
    wait_writes(&env.sink, 2).await;
    assert_eq!(
        table_status(&pipeline.url, "kn_v1").await["state"],
        "running"
    );

    // Offset 3: order 9 in the wire format (id 1), without a key.
    python_code(
        KEYLESS,
        vec![
            bootstrap.clone(),
            "kn_orders".into(),
            "00000000011204633906".into(),
        ],
    )
    .await;
    let stalled = wait_state(&pipeline.url, "kn_v1", "stalled").await;
    let error = stalled["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("record at partition 0 offset 3 has no key, which ENVELOPE UPSERT"),
        "{stalled}"
    );
    assert_eq!(audit_count(&env.sink).await, 2);
    // A table created now reads the keyless record in its snapshot.
    sql_ok(
        &pipeline.url,
        &[
            "-c",
            "CREATE TABLE kn_v2 FROM SOURCE kn FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;",
        ],
    )
    .await;
    let stalled = wait_state(&pipeline.url, "kn_v2", "stalled").await;
    assert!(
        stalled["error"]
            .as_str()
            .unwrap_or_default()
            .contains("record at partition 0 offset 3 has no key"),
        "{stalled}"
    );
    assert_eq!(
        wait_source(&pipeline.url, "kn", "running").await["state"],
        "running"
    );
}

/// A topic deleted under a running source: the source notices within
/// its partition check (5 s) and retries, saying the topic does not
/// exist; created again, its producer writing more records than the
/// source had read, it is not read from the old offsets (which would
/// skip its first records): the last record the source read is not at
/// its offset any more, so the source stops with the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_while_streaming_is_not_read_from_the_old_offsets() {
    let env = env("kafka_source_deleted").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let pipeline = one_table(&env, &bootstrap, &url, "kx", 1).await;
    let first: Vec<Produced> = (1..=20)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "kx_orders", &url, V1, &first).await;
    wait_writes(&env.sink, 21).await;
    python(
        vec!["delete-topic".into(), bootstrap.clone(), "kx_orders".into()],
        String::new(),
    )
    .await;
    let gone = wait_source(&pipeline.url, "kx", "retrying").await;
    assert!(
        gone["error"]
            .as_str()
            .is_some_and(|e| e.contains("deleted") || e.contains("does not exist")),
        "{gone}"
    );
    topic(&bootstrap, "kx_orders", 1).await;
    let again: Vec<Produced> = (100..140)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "kx_orders", &url, V1, &again).await;
    // The retry that finds the topic again finds it empty (ends before
    // offset 21) or holding the new records (another record at 20).
    let source = wait_source(&pipeline.url, "kx", "stalled").await;
    let error = source["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the Kafka topic of source \"kx\" no longer holds the offsets")
            && (error.contains(
                "Partition 0 of topic \"kx_orders\" holds another record at offset 20 than the one the source read there"
            ) || error.contains("Partition 0 of topic \"kx_orders\" ends at offset"))
            && error.contains("not retried"),
        "{error}"
    );
    // Nothing of the new topic was applied.
    assert_eq!(audit_count(&env.sink).await, 21);
    drop(pipeline);

    // Restarted once the new topic holds more records than the source
    // read: the record at offset 20 tells the topics apart.
    let pipeline = Pipeline::start(&env.config);
    let source = wait_source(&pipeline.url, "kx", "stalled").await;
    let error = source["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(
            "Partition 0 of topic \"kx_orders\" holds another record at offset 20 than the one the source read there"
        ),
        "{error}"
    );
    assert_eq!(audit_count(&env.sink).await, 21);
}

/// A topic deleted while the pipeline is stopped and created again with
/// fewer partitions (a topic's partitions are never removed otherwise):
/// the source stops naming the partition that is gone, rather than
/// reading the new partition 0 from the old one's offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_again_with_fewer_partitions_stops_the_source() {
    let env = env("kafka_source_fewer").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    let pipeline = one_table(&env, &bootstrap, &url, "kw", 3).await;
    let first: Vec<Produced> = (1..=30)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "kw_orders", &url, V1, &first).await;
    wait_writes(&env.sink, 31).await;
    drop(pipeline);
    python(
        vec!["delete-topic".into(), bootstrap.clone(), "kw_orders".into()],
        String::new(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    topic(&bootstrap, "kw_orders", 1).await;
    // More records in partition 0 than the source read from the old one.
    let again: Vec<Produced> = (100..160)
        .map(|i| (format!("o{i}"), Some(order(i, i))))
        .collect();
    produce(&bootstrap, "kw_orders", &url, V1, &again).await;
    let pipeline = Pipeline::start(&env.config);
    let source = wait_source(&pipeline.url, "kw", "stalled").await;
    let error = source["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the Kafka topic of source \"kw\" no longer holds the offsets")
            && error.contains("has 1 partition")
            && error.contains("not retried"),
        "{error}"
    );
    assert_eq!(audit_count(&env.sink).await, 31);
}

/// SIGKILL of `evolve pipeline run` while a table's snapshot is read and
/// its sink loads it, with records streaming in meanwhile: each key's
/// document reaches the sink once (the load is one sink transaction, and
/// a killed snapshot is copied again from the start), none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_snapshot_and_its_load_writes_each_document_once() {
    const KEYS: i64 = 20_000;
    let env = env("kafka_source_kill_load").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "kl_orders", 3).await;
    let before: Vec<Produced> = (0..KEYS)
        .map(|i| (format!("o{i}"), Some(order(i, 1))))
        .collect();
    for chunk in before.chunks(5_000) {
        produce(&bootstrap, "kl_orders", &url, V1, chunk).await;
    }
    let mut pipeline = start_kafka_table(
        &env,
        "kl",
        "kl_orders",
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr",
    )
    .await;
    let after: Vec<Produced> = (0..300)
        .map(|i| (format!("o{}", KEYS + i), Some(order(KEYS + i, 2))))
        .collect();
    let writer = {
        let (bootstrap, url, after) = (bootstrap.clone(), url.clone(), after.clone());
        tokio::spawn(async move {
            for chunk in after.chunks(50) {
                produce(&bootstrap, "kl_orders", &url, V1, chunk).await;
            }
        })
    };
    for wait in [200u64, 700, 1_200] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        drop(pipeline); // SIGKILL
        pipeline = Pipeline::start(&env.config);
    }
    writer.await.unwrap();
    let mut all = before;
    all.extend(after);
    wait_docs(
        &env,
        "public.orders_json",
        &fold(&all, &["id", "customer", "qty"]),
    )
    .await;
    wait_writes(&env.sink, KEYS + 300).await;
    wait_all_running(&pipeline.url).await;
}

/// `GET /schemas/ids/{id}` requests the registry at `url` answered.
async fn id_requests(url: &str) -> u64 {
    let body = curl_get(&format!("{}/metrics", url.trim_end_matches('/'))).await;
    body.lines()
        .filter(|l| {
            l.starts_with("evolve_registry_requests_total{")
                && l.contains("method=\"GET\"")
                && l.contains("route=\"/schemas/ids/{id}\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A GET with curl; the body.
async fn curl_get(url: &str) -> String {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl").args(["-sf", &url]).output().unwrap();
        assert!(out.status.success(), "curl {url}: {}", text(&out.stderr));
        text(&out.stdout)
    })
    .await
    .unwrap()
}

/// A keyed table pinned with `SUBJECT` over a topic of two record types:
/// its snapshot asks the registry once for each writer schema id (the
/// first pass tells the types apart by them, and decoding reuses them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_tables_snapshot_fetches_each_writer_schema_once() {
    let env = env("kafka_source_subject_ids").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "ksi_events", 1).await;
    let produce = |schema: &'static str, records: Vec<Produced>| {
        let args = [
            "produce-topic-record",
            &bootstrap,
            "ksi_events",
            &url,
            schema,
        ];
        let args = args.map(String::from).to_vec();
        async move { produce_lines(args, &records).await }
    };
    let order = |id: i64| json!({"id": id, "customer": format!("c{id}")});
    let payment = |id: i64, cents: i64| json!({"order": id, "cents": cents});
    produce(
        SHOP_ORDER,
        vec![("o1".into(), Some(order(1))), ("o2".into(), Some(order(2)))],
    )
    .await;
    produce(PAYMENT, vec![("p1".into(), Some(payment(1, 500)))]).await;
    let pipeline = start_kafka_table(
        &env,
        "ksi",
        "ksi_events",
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr SUBJECT 'ksi_events-shop.Order'",
    )
    .await;
    let key = |k: &str| json!({"@key": k}).to_string();
    let keyed: BTreeMap<String, Value> = [(key("o1"), order(1)), (key("o2"), order(2))].into();
    wait_docs(&env, "public.orders_json", &keyed).await;
    wait_state(&pipeline.url, "ksi_v1", "running").await;
    // The Order and the Payment writer schemas: two ids, each asked for
    // once by the snapshot (the stream has read no record yet).
    assert_eq!(id_requests(&url).await, 2);
}

/// Waits until table `name` of the pipeline at `admin` shows `skipped`
/// records of other types left out (`evolve status`'s `skipped_records`).
async fn wait_skipped(admin: &str, name: &str, skipped: u64) {
    let start = Instant::now();
    loop {
        let t = table_status(admin, name).await;
        if t["skipped_records"] == skipped {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "table {name} does not show {skipped} skipped records after 60 s: {t}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Tables pinned with `SUBJECT` over a topic of two record types count
/// the records of the other type they leave out, in `evolve status` and
/// the metrics: as many as the other type's records, from the snapshot
/// (a keyed table's first pass, an appended table's decoding) and from
/// the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_table_counts_the_other_types_records_it_skips() {
    let env = env("kafka_source_skipped").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    topic(&bootstrap, "ksk_events", 1).await;
    let produce = |schema: &'static str, records: Vec<Produced>| {
        let args = [
            "produce-topic-record",
            &bootstrap,
            "ksk_events",
            &url,
            schema,
        ];
        let args = args.map(String::from).to_vec();
        async move { produce_lines(args, &records).await }
    };
    let order = |id: i64| json!({"id": id, "customer": format!("c{id}")});
    let payment = |id: i64, cents: i64| json!({"order": id, "cents": cents});
    // Read by the snapshots: two orders, three payments.
    produce(
        SHOP_ORDER,
        vec![("o1".into(), Some(order(1))), ("o2".into(), Some(order(2)))],
    )
    .await;
    produce(
        PAYMENT,
        vec![
            ("p1".into(), Some(payment(1, 500))),
            ("o1".into(), Some(payment(1, 900))),
            ("p3".into(), Some(payment(3, 100))),
        ],
    )
    .await;
    let pipeline = start_kafka_table(
        &env,
        "ksk",
        "ksk_events",
        "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr SUBJECT 'ksk_events-shop.Order'",
    )
    .await;
    let admin = pipeline.url.clone();
    sql_ok(
        &admin,
        &[
            "-c",
            "CREATE TABLE ksk_appended FROM SOURCE ksk FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr
               SUBJECT 'ksk_events-shop.Order' ENVELOPE NONE;",
        ],
    )
    .await;
    let key = |k: &str| json!({"@key": k}).to_string();
    let mut keyed: BTreeMap<String, Value> = [(key("o1"), order(1)), (key("o2"), order(2))].into();
    wait_docs(&env, "public.orders_json", &keyed).await;
    for table in ["ksk_v1", "ksk_appended"] {
        wait_state(&admin, table, "running").await;
        wait_skipped(&admin, table, 3).await;
    }

    // Streamed: two more payments and an order.
    produce(
        PAYMENT,
        vec![
            ("p4".into(), Some(payment(4, 200))),
            ("o2".into(), Some(payment(2, 300))),
        ],
    )
    .await;
    produce(SHOP_ORDER, vec![("o3".into(), Some(order(3)))]).await;
    keyed.insert(key("o3"), order(3));
    wait_docs(&env, "public.orders_json", &keyed).await;
    for table in ["ksk_v1", "ksk_appended"] {
        wait_skipped(&admin, table, 5).await;
    }
    let metrics = curl_get(&format!("{}/metrics", admin.trim_end_matches('/'))).await;
    for table in ["ksk_v1", "ksk_appended"] {
        let line =
            format!("evolve_pipeline_skipped_records_total{{kind=\"table\",name=\"{table}\"}} 5");
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}
