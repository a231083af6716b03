//! How a Kafka table reads its records' keys, against a real Apache
//! Kafka broker (the harness's) and evolve's own schema registry: the
//! key format is decided once, at `CREATE TABLE` (the registry's
//! `<topic>-key` subject, or `KEY FORMAT ... VALUE FORMAT ...`), never
//! guessed record by record. Records are written by Confluent's Python
//! client (AvroSerializer), keys as raw bytes or Avro.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const ORDER: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"int"},{"name":"customer","type":"string"},{"name":"qty","type":"int"}]}"#;
const ORDER_KEY: &str = r#"{"type":"record","name":"OrderKey","namespace":"shop","fields":[{"name":"id","type":"long"}]}"#;

/// Reads JSON lines `{"key_hex": "..." | "key": {...}, "value": {...} |
/// null}` and produces them in order: the key's bytes as given, or
/// written by Confluent's AvroSerializer with the key schema (registered
/// under `<topic>-key`); the value written by the AvroSerializer with
/// the value schema (`<topic>-value`). Prints the number delivered.
const PRODUCE: &str = r#"
import json, sys
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
bootstrap, topic, url, value_schema = sys.argv[1:5]
registry = SchemaRegistryClient({"url": url})
values = AvroSerializer(registry, value_schema, conf={"auto.register.schemas": True})
keys = AvroSerializer(registry, sys.argv[5], conf={"auto.register.schemas": True}) if len(sys.argv) > 5 else None
p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
delivered, failures = [0], []
def report(err, _msg):
    if err is not None:
        failures.append(str(err))
    else:
        delivered[0] += 1
for line in sys.stdin:
    if not line.strip():
        continue
    r = json.loads(line)
    if "key_hex" in r:
        key = bytes.fromhex(r["key_hex"])
    else:
        key = keys(r["key"], SerializationContext(topic, MessageField.KEY))
    value = r["value"]
    if value is not None:
        value = values(value, SerializationContext(topic, MessageField.VALUE))
    p.produce(topic, key=key, value=value, on_delivery=report)
    p.poll(0)
if p.flush(60) or failures:
    raise SystemExit(f"not delivered: {failures[:3]}")
print(delivered[0])
"#;

/// Runs `python3 -c code args`, `stdin` on its standard input; its
/// stdout.
async fn python(code: &'static str, args: Vec<String>, stdin: String) -> String {
    let mut all: Vec<std::ffi::OsString> = vec!["-c".into(), code.into()];
    all.extend(args.into_iter().map(Into::into));
    python3(all, stdin).await
}

/// Produces `records` (JSON lines as [`PRODUCE`] reads them) into
/// `topic`, keys written with `key_schema` where a record has `key`.
async fn produce(
    bootstrap: &str,
    topic: &str,
    url: &str,
    key_schema: Option<&str>,
    records: &[Value],
) {
    let mut args = vec![
        bootstrap.to_string(),
        topic.to_string(),
        url.to_string(),
        ORDER.to_string(),
    ];
    args.extend(key_schema.map(String::from));
    let lines: String = records.iter().map(|r| format!("{r}\n")).collect();
    let n = python(PRODUCE, args, lines).await;
    assert_eq!(n.trim(), records.len().to_string());
}

/// The producer script's other commands (`topic`, `register`); its
/// stdout.
async fn script(args: &[&str]) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python/kafka_avro_produce.py")
        .display()
        .to_string();
    const RUN: &str = "import runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')";
    let mut all = vec![path];
    all.extend(args.iter().map(|a| a.to_string()));
    python(RUN, all, String::new()).await
}

fn order(id: i64, qty: i64) -> Value {
    json!({"id": id, "customer": format!("c{id}"), "qty": qty})
}

/// The broker, a registry, and connections `k` and `csr` in the env's
/// evolve.toml: (registry, bootstrap, registry url).
async fn kafka_env(env: &Env) -> (Killed, String, String) {
    let kafka = tokio::task::spawn_blocking(evolve_test::kafka)
        .await
        .unwrap();
    let (registry, url) = serve_registry(env, "127.0.0.1:0", &[]);
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "[connections.k]\nurl = \"{}\"\n[connections.csr]\nurl = \"{url}\"\n",
        kafka.url()
    ));
    std::fs::write(&env.config, config).unwrap();
    (registry, kafka.bootstrap(), url)
}

/// `(key, document)` of a sink table, both as JSON text.
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

async fn wait_docs(env: &Env, admin: &str, table: &str, want: &BTreeMap<String, Value>) {
    let start = Instant::now();
    loop {
        let got = sink_docs(env, table).await;
        if &got == want {
            return;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let status = status(admin).await;
            panic!(
                "{table} did not reach the expected documents in 60 s:\n got {got:?}\nwant {want:?}\nstatus {status:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_state(admin: &str, name: &str, state: &str) -> Value {
    let start = Instant::now();
    loop {
        let t = object(admin, "table", name)
            .await
            .unwrap_or_else(|| panic!("no status for table {name}"));
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

/// `{"@key": key}` as the sink's key column holds it.
fn key(key: Value) -> String {
    json!({ "@key": key }).to_string()
}

/// A 5-byte Confluent wire header naming schema `id`, in hex.
fn header(id: &str) -> String {
    format!("00{:08x}", id.trim().parse::<u32>().unwrap())
}

/// A topic without a `<topic>-key` subject whose keys are raw bytes that
/// start like Confluent's wire format, naming the id of a schema the
/// registry has (the topic's value schema): an UPSERT table pins plain
/// keys at CREATE TABLE and reads every key as text (UTF-8 without a NUL,
/// else bytea's hex form), in its snapshot and in its stream; the key
/// bytes are never decoded with the schema they seem to name (which made
/// one key a garbage record and stalled the table at another). SHOW
/// TABLES shows the pinned key format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_keys_that_look_like_the_wire_format_are_text_without_a_key_subject() {
    let env = env("kafka_keys_raw").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    script(&["topic", &bootstrap, "kr_orders", "1"]).await;
    let id = script(&["register", &url, "kr_orders-value", ORDER]).await;
    let id = header(&id);
    // `<id> 02 02 61 02` is an Order record (id 1, customer "a", qty 1);
    // `<id> ff` is no record; `<id> 78` is the text "\0\0\0\0\u{1}x".
    let record = format!("{id}02026102");
    let broken = format!("{id}ff");
    let texty = format!("{id}78");
    produce(
        &bootstrap,
        "kr_orders",
        &url,
        None,
        &[
            json!({"key_hex": record, "value": order(1, 1)}),
            json!({"key_hex": broken, "value": order(2, 1)}),
            json!({"key_hex": hex("plain"), "value": order(3, 1)}),
        ],
    )
    .await;
    env.sink
        .batch_execute("CREATE TABLE public.kr_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);")
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    sql_ok(
        &pipeline.url,
        &[
            "-c",
            "CREATE SOURCE kr FROM KAFKA CONNECTION k (TOPIC 'kr_orders');
             CREATE TABLE kr_v1 FROM SOURCE kr FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;
             CREATE MATERIALIZED VIEW kr_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM kr_v1 t;
             CREATE SINK kr_sink FROM kr_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.kr_json');",
        ],
    )
    .await;
    let hexed = |h: &str| key(json!(format!("\\x{h}")));
    let mut want = BTreeMap::from([
        (hexed(&record), order(1, 1)),
        (hexed(&broken), order(2, 1)),
        (key(json!("plain")), order(3, 1)),
    ]);
    wait_docs(&env, &pipeline.url, "public.kr_json", &want).await;
    // The stream reads them the same way: an update of a snapshotted key,
    // and a new one.
    produce(
        &bootstrap,
        "kr_orders",
        &url,
        None,
        &[
            json!({"key_hex": broken, "value": order(2, 5)}),
            json!({"key_hex": texty, "value": order(4, 1)}),
        ],
    )
    .await;
    want.insert(hexed(&broken), order(2, 5));
    want.insert(hexed(&texty), order(4, 1));
    wait_docs(&env, &pipeline.url, "public.kr_json", &want).await;
    assert_eq!(
        wait_state(&pipeline.url, "kr_v1", "running").await["state"],
        "running"
    );
    let tables = sql_ok(&pipeline.url, &["-c", "SHOW TABLES"]).await;
    assert!(
        tables.contains("kr_orders-value id 1 (version 1); key format text"),
        "{tables}"
    );
}

/// A topic whose producer writes Avro keys, registered under
/// `<topic>-key`: the table pins registry keys at CREATE TABLE and reads
/// each key with the schema its header names (a JSON object in the
/// sink's key); a key without the wire header then stalls that table at
/// that record, counting the later undecodable ones, while an ENVELOPE NONE table
/// of the same topic (which reads no keys) flows on. `KEY FORMAT TEXT
/// VALUE FORMAT AVRO` overrides the subject: a table created so reads
/// the Avro keys as bytea's hex form, and the bare key as its text.
/// SHOW TABLES shows each table's key format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_keys_are_decoded_and_a_key_without_the_header_stalls_its_table_alone() {
    let env = env("kafka_keys_registry").await;
    let (_registry, bootstrap, url) = kafka_env(&env).await;
    script(&["topic", &bootstrap, "kk_orders", "1"]).await;
    // The key schema is registered first (id 1), then the value's (id 2).
    produce(
        &bootstrap,
        "kk_orders",
        &url,
        Some(ORDER_KEY),
        &[
            json!({"key": {"id": 1}, "value": order(1, 1)}),
            json!({"key": {"id": 2}, "value": order(2, 1)}),
        ],
    )
    .await;
    env.sink
        .batch_execute(
            "CREATE TABLE public.kk_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);
             CREATE TABLE public.kk_all (key jsonb PRIMARY KEY, data jsonb NOT NULL);
             CREATE TABLE public.kk_text (key jsonb PRIMARY KEY, data jsonb NOT NULL);",
        )
        .await
        .unwrap();
    let pipeline = Pipeline::start(&env.config);
    let interface = |name: &str, sink: &str| {
        format!(
            "CREATE MATERIALIZED VIEW {name}_json AS
               SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM {name} t;
             CREATE SINK {name}_sink FROM {name}_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.{sink}');"
        )
    };
    sql_ok(
        &pipeline.url,
        &[
            "-c",
            &format!(
                "CREATE SOURCE kk FROM KAFKA CONNECTION k (TOPIC 'kk_orders');
                 CREATE TABLE kk_v1 FROM SOURCE kk FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;
                 CREATE TABLE kk_all FROM SOURCE kk FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE NONE;
                 {} {}",
                interface("kk_v1", "kk_json"),
                interface("kk_all", "kk_all"),
            ),
        ],
    )
    .await;
    let want = BTreeMap::from([
        (key(json!({"id": 1})), order(1, 1)),
        (key(json!({"id": 2})), order(2, 1)),
    ]);
    wait_docs(&env, &pipeline.url, "public.kk_json", &want).await;

    // Offset 2: a key without the wire header; offset 3: a good one.
    produce(
        &bootstrap,
        "kk_orders",
        &url,
        Some(ORDER_KEY),
        &[
            json!({"key_hex": hex("plain"), "value": order(3, 1)}),
            json!({"key": {"id": 4}, "value": order(4, 1)}),
        ],
    )
    .await;
    let stalled = wait_state(&pipeline.url, "kk_v1", "stalled").await;
    let error = stalled["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("record at partition 0 offset 2")
            && error.contains("key")
            && error.contains("no schema registry header"),
        "{stalled}"
    );
    // Offset 4: another one, counted on the stalled table.
    produce(
        &bootstrap,
        "kk_orders",
        &url,
        Some(ORDER_KEY),
        &[json!({"key_hex": hex("plain2"), "value": order(5, 1)})],
    )
    .await;
    let start = Instant::now();
    loop {
        let t = object(&pipeline.url, "table", "kk_v1").await.unwrap();
        if t["error"]
            .as_str()
            .unwrap_or_default()
            .contains("1 later records not readable either")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the record after the stall is not counted: {t}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let start = Instant::now();
    loop {
        let all = sink_docs(&env, "public.kk_all").await;
        if all.len() == 5 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the ENVELOPE NONE table did not read on: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        wait_state(&pipeline.url, "kk_all", "running").await["state"],
        "running"
    );
    // Nothing of offsets 2 to 4 reached the stalled table's sink.
    assert_eq!(sink_docs(&env, "public.kk_json").await, want);

    // KEY FORMAT TEXT over the same topic: the Avro keys are bytes, not
    // UTF-8 text without a NUL, so bytea's hex form (the header naming
    // key schema 1, then the zigzag long); the bare key is its text.
    sql_ok(
        &pipeline.url,
        &[
            "-c",
            &format!(
                "CREATE TABLE kk_text FROM SOURCE kk KEY FORMAT TEXT VALUE FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr;
                 {}",
                interface("kk_text", "kk_text")
            ),
        ],
    )
    .await;
    let text_want = BTreeMap::from([
        (key(json!("\\x000000000102")), order(1, 1)),
        (key(json!("\\x000000000104")), order(2, 1)),
        (key(json!("plain")), order(3, 1)),
        (key(json!("\\x000000000108")), order(4, 1)),
        (key(json!("plain2")), order(5, 1)),
    ]);
    wait_docs(&env, &pipeline.url, "public.kk_text", &text_want).await;
    assert_eq!(
        wait_state(&pipeline.url, "kk_text", "running").await["state"],
        "running"
    );
    let tables = sql_ok(&pipeline.url, &["-c", "SHOW TABLES"]).await;
    for line in ["kk_v1 ", "kk_text "] {
        let row = tables
            .lines()
            .find(|l| l.trim_start().starts_with(line))
            .unwrap_or_else(|| panic!("no {line}in {tables}"));
        let format = if line == "kk_v1 " { "avro" } else { "text" };
        assert!(
            row.contains(&format!(
                "kk_orders-value id 2 (version 1); key format {format}"
            )),
            "{tables}"
        );
    }
}

/// `text` as hex.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}
