//! The registry on a Kafka topic (`--storage kafka://...`), against the
//! real broker of the test harness (`evolve_test::kafka`): two instances
//! on one topic agree on ids and versions, a restart replays the same
//! state, the topic is created as Confluent creates `_schemas` and a wrong
//! one is refused, a topic written in Confluent's record format is served
//! unchanged (and so is its compacted form), Confluent's Python client
//! registers and reads back a data contract, and writes sent to any of
//! three instances are written by one and forwarded to it by the others
//! (with the caller's credentials; taking over from a writer that cannot
//! be reached, declining to when another took over first; never, for an
//! instance that may not write).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evolve_registry::access::Access;
use evolve_registry::auth::Users;
use evolve_registry::forward::{Forwarder, PeerUrl};
use evolve_registry::http::{App, DEFAULT_MAX_BODY, DEFAULT_MAX_SCHEMA, router};
use evolve_registry::kafka::{KafkaLog, KafkaSpec};
use evolve_registry::metrics::Metrics;
use evolve_registry::service::{Registry, Settings};
use evolve_registry::state::SchemaInput;
use evolve_registry::store::{Storage, StorageSpec};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use serde_json::{Value, json};

/// The shared broker, started off the async threads (it takes a while).
async fn broker() -> &'static evolve_test::Kafka {
    tokio::task::spawn_blocking(evolve_test::kafka)
        .await
        .expect("broker")
}

fn topic(hint: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "registry-{hint}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn spec(kafka: &evolve_test::Kafka, topic: &str) -> KafkaSpec {
    match format!("{}/{topic}", kafka.url()).parse::<StorageSpec>() {
        Ok(StorageSpec::Kafka(spec)) => spec,
        other => panic!("not a Kafka storage: {other:?}"),
    }
}

async fn instance(kafka: &evolve_test::Kafka, topic: &str) -> Arc<Registry<Storage>> {
    let log = KafkaLog::open(&spec(kafka, topic))
        .await
        .expect("kafka log");
    Arc::new(
        Registry::open(Storage::Kafka(Box::new(log)), Settings::default())
            .await
            .expect("registry"),
    )
}

fn record_schema(field: &str) -> SchemaInput {
    SchemaInput {
        schema: format!(
            r#"{{"type":"record","name":"R","fields":[{{"name":"{field}","type":"int","default":0}}]}}"#
        ),
        ..SchemaInput::default()
    }
}

async fn register(registry: &Registry<Storage>, subject: &str, input: &SchemaInput) -> (u32, u32) {
    registry
        .write(|state| {
            let r = state.register(subject, input, 409)?;
            Ok(((r.id, r.version), r.records))
        })
        .await
        .expect("register")
}

/// Every committed record of `topic`: (key, value).
async fn committed(
    kafka: &'static evolve_test::Kafka,
    topic: &str,
) -> Vec<(String, Option<String>)> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        kafka
            .read_committed(&topic, Duration::from_secs(30))
            .expect("read the topic")
            .into_iter()
            .map(|r| (r.key_text(), r.value_text()))
            .collect()
    })
    .await
    .expect("join")
}

fn admin(kafka: &evolve_test::Kafka) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka.bootstrap())
        .create()
        .expect("admin client")
}

/// The topic's partitions and cleanup.policy, as the broker reports them.
async fn topic_settings(kafka: &evolve_test::Kafka, topic: &str) -> (usize, String) {
    let admin = admin(kafka);
    let metadata = admin
        .inner()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len();
    let configs = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .expect("describe");
    let policy = configs[0]
        .as_ref()
        .expect("config")
        .get("cleanup.policy")
        .and_then(|e| e.value.clone())
        .unwrap_or_default();
    (partitions, policy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_topic_agree_on_ids_and_versions_and_a_restart_replays_them() {
    let kafka = broker().await;
    let topic = topic("shared");
    let a = instance(kafka, &topic).await;
    let b = instance(kafka, &topic).await;
    // Created as Confluent creates `_schemas`.
    assert_eq!(
        topic_settings(kafka, &topic).await,
        (1, "compact".to_string())
    );

    // The same schema, 16 times at once through both instances.
    let same = record_schema("a");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let registry = Arc::clone(if i % 2 == 0 { &a } else { &b });
        let input = same.clone();
        tasks.push(tokio::spawn(async move {
            register(&registry, "shared", &input).await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("task"));
    }
    assert!(
        answers.iter().all(|x| *x == (1, 1)),
        "every registration must get id 1 version 1: {answers:?}"
    );

    // Different schemas at once: distinct ids 2..=11 and versions 2..=11,
    // no gaps, no duplicates.
    let mut tasks = Vec::new();
    for i in 0..10 {
        let registry = Arc::clone(if i % 2 == 0 { &a } else { &b });
        let input = record_schema(&format!("f{i}"));
        tasks.push(tokio::spawn(async move {
            register(&registry, "shared", &input).await
        }));
    }
    let mut ids = Vec::new();
    let mut versions = Vec::new();
    for t in tasks {
        let (id, version) = t.await.expect("task");
        ids.push(id);
        versions.push(version);
    }
    ids.sort();
    versions.sort();
    assert_eq!(ids, (2..=11).collect::<Vec<u32>>());
    assert_eq!(versions, (2..=11).collect::<Vec<u32>>());

    // The topic holds 11 committed SCHEMA records in Confluent's format and
    // nothing else: no registration was written twice.
    let records = committed(kafka, &topic).await;
    assert_eq!(
        records.len(),
        11,
        "one record per distinct registration: {records:?}"
    );
    let mut seen = BTreeMap::new();
    for (key, value) in &records {
        let key: Value = serde_json::from_str(key).expect("key JSON");
        assert_eq!(key["keytype"], "SCHEMA", "{key}");
        assert_eq!(key["magic"], 1, "{key}");
        let value: Value =
            serde_json::from_str(value.as_deref().expect("a value")).expect("value JSON");
        assert_eq!(key["version"], value["version"]);
        seen.insert(
            value["version"].as_u64().expect("version"),
            value["id"].as_u64().expect("id"),
        );
    }
    assert_eq!(seen.len(), 11, "versions 1..=11 once each: {seen:?}");

    // Both instances see the same state.
    a.catch_up().await.expect("catch up");
    b.catch_up().await.expect("catch up");
    let versions_a = a.read(|s| s.subject("shared").map(|s| s.versions.len()));
    let versions_b = b.read(|s| s.subject("shared").map(|s| s.versions.len()));
    assert_eq!((versions_a, versions_b), (Some(11), Some(11)));

    // A third instance started now replays the same state, and registers
    // after it.
    let c = instance(kafka, &topic).await;
    assert_eq!(c.read(|s| s.offset), 11);
    assert_eq!(c.read(|s| s.schema_count()), 11);
    let by_version: BTreeMap<u64, u64> = c.read(|s| {
        s.subject("shared")
            .expect("subject")
            .versions
            .iter()
            .map(|(v, e)| (u64::from(*v), u64::from(e.id)))
            .collect()
    });
    assert_eq!(by_version, seen, "the replay gives every version its id");
    assert_eq!(register(&c, "shared", &record_schema("z")).await, (12, 12));
    // ... and the first instance, which was fenced by it, takes over again.
    assert_eq!(register(&a, "other", &record_schema("y")).await, (13, 1));
    assert_eq!(committed(kafka, &topic).await.len(), 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_two_partitions_or_records_deleted_by_age_is_refused() {
    let kafka = broker().await;
    let two = topic("two-partitions");
    let deleting = topic("delete-policy");
    let admin = admin(kafka);
    let created = admin
        .create_topics(
            [
                &NewTopic::new(&two, 2, TopicReplication::Fixed(1))
                    .set("cleanup.policy", "compact"),
                &NewTopic::new(&deleting, 1, TopicReplication::Fixed(1))
                    .set("cleanup.policy", "delete"),
            ],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create topics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");

    let err = KafkaLog::open(&spec(kafka, &two))
        .await
        .err()
        .expect("two partitions refused")
        .0;
    assert!(
        err.contains(&format!("topic \"{two}\" has 2 partitions"))
            && err.contains("needs exactly one")
            && err.contains("recreate it with one partition")
            && !err.contains('\n'),
        "{err}"
    );
    let err = KafkaLog::open(&spec(kafka, &deleting))
        .await
        .err()
        .expect("delete policy refused")
        .0;
    assert!(
        err.contains("has cleanup.policy=delete")
            && err.contains("needs cleanup.policy=compact")
            && err.contains("--add-config cleanup.policy=compact")
            && !err.contains('\n'),
        "{err}"
    );
    // Neither was changed.
    assert_eq!(topic_settings(kafka, &two).await, (2, "compact".into()));
    assert_eq!(topic_settings(kafka, &deleting).await, (1, "delete".into()));

    // No broker at all: one line naming the store and the way out.
    let dead = KafkaSpec::parse("kafka://127.0.0.1:9/_schemas").expect("spec");
    let started = std::time::Instant::now();
    let err = KafkaLog::open(&dead).await.err().expect("no broker").0;
    assert!(
        err.starts_with("registry store kafka://127.0.0.1:9/_schemas: no Kafka broker answered")
            && err.contains("check --storage"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

// ---- a topic another registry wrote -----------------------------------------

/// Keys as Confluent writes them, field order included: Kafka compacts by
/// the key's bytes.
fn schema_key(subject: &str, version: u32) -> String {
    format!(
        r#"{{"keytype":"SCHEMA","subject":{},"version":{version},"magic":1}}"#,
        json!(subject)
    )
}

fn subject_key(keytype: &str, subject: Option<&str>) -> String {
    format!(
        r#"{{"keytype":"{keytype}","subject":{},"magic":0}}"#,
        subject.map_or(Value::Null, |s| json!(s))
    )
}

fn schema_value(subject: &str, version: u32, id: u32, schema: &str, extra: Value) -> String {
    let mut value = json!({
        "subject": subject, "version": version, "id": id, "schema": schema, "deleted": false,
    });
    if let (Some(v), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        for (k, x) in extra {
            v.insert(k.clone(), x.clone());
        }
    }
    value.to_string()
}

/// A `_schemas` topic as Confluent Schema Registry writes it (its
/// documented key and value JSON, no transactions): versions of several
/// subjects, Protobuf references, a version soft-deleted then permanently
/// deleted (a tombstone), a soft-deleted subject (DELETE_SUBJECT), the
/// same schema in two subjects, an id gap, global and subject CONFIG and
/// MODE records, a CONFIG removed by a tombstone, and NOOP records.
fn confluent_topic() -> Vec<(String, Option<String>)> {
    let order_v1 = json!({"type": "record", "name": "Order", "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}]})
    .to_string();
    let order_v2 = json!({"type": "record", "name": "Order", "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}]})
    .to_string();
    let money = "syntax = \"proto3\";\npackage shop;\n\nmessage Money {\n  int64 cents = 1;\n}\n";
    let payment = "syntax = \"proto3\";\npackage shop;\n\nimport \"money.proto\";\n\nmessage Payment {\n  shop.Money amount = 1;\n}\n";
    let noop = || (r#"{"keytype":"NOOP","magic":0}"#.to_string(), None);
    let config = |subject: Option<&str>| subject_key("CONFIG", subject);
    let mode = |subject: Option<&str>| subject_key("MODE", subject);
    let s = |t: &str| Some(t.to_string());
    vec![
        noop(),
        (config(None), s(r#"{"compatibilityLevel":"FULL"}"#)),
        (mode(None), s(r#"{"mode":"READWRITE"}"#)),
        (
            schema_key("orders-value", 1),
            s(&schema_value("orders-value", 1, 1, &order_v1, json!({}))),
        ),
        (
            schema_key("orders-value", 2),
            s(&schema_value("orders-value", 2, 2, &order_v2, json!({}))),
        ),
        (
            schema_key("money.proto", 1),
            s(&schema_value(
                "money.proto",
                1,
                3,
                money,
                json!({"schemaType": "PROTOBUF"}),
            )),
        ),
        (
            schema_key("payments-value", 1),
            s(&schema_value(
                "payments-value",
                1,
                4,
                payment,
                json!({
                    "schemaType": "PROTOBUF",
                    "references": [{"name": "money.proto", "subject": "money.proto", "version": 1}],
                }),
            )),
        ),
        // The same schema in another subject keeps its id.
        (
            schema_key("orders-copy", 1),
            s(&schema_value("orders-copy", 1, 1, &order_v1, json!({}))),
        ),
        // A subject soft-deleted as a whole.
        (
            schema_key("gone-value", 1),
            s(&schema_value("gone-value", 1, 5, "\"string\"", json!({}))),
        ),
        (
            schema_key("gone-value", 2),
            s(&schema_value("gone-value", 2, 6, "\"bytes\"", json!({}))),
        ),
        (
            subject_key("DELETE_SUBJECT", Some("gone-value")),
            s(r#"{"subject":"gone-value","version":2}"#),
        ),
        // Version 1 soft-deleted, then permanently deleted.
        (
            schema_key("legacy-value", 1),
            s(&schema_value("legacy-value", 1, 7, "\"int\"", json!({}))),
        ),
        (
            schema_key("legacy-value", 2),
            s(&schema_value("legacy-value", 2, 8, "\"long\"", json!({}))),
        ),
        (
            schema_key("legacy-value", 1),
            s(&schema_value(
                "legacy-value",
                1,
                7,
                "\"int\"",
                json!({"deleted": true}),
            )),
        ),
        noop(),
        (schema_key("legacy-value", 1), None),
        (mode(Some("legacy-value")), s(r#"{"mode":"READONLY"}"#)),
        // A subject config set, changed, and one removed by a tombstone.
        (
            config(Some("orders-value")),
            s(r#"{"compatibilityLevel":"FORWARD"}"#),
        ),
        (
            config(Some("orders-value")),
            s(r#"{"compatibilityLevel":"NONE"}"#),
        ),
        (
            config(Some("money.proto")),
            s(r#"{"compatibilityLevel":"NONE"}"#),
        ),
        (config(Some("money.proto")), None),
        // An id gap (another registry's ids need not be dense).
        (
            schema_key("late-value", 1),
            s(&schema_value("late-value", 1, 20, "\"double\"", json!({}))),
        ),
    ]
}

/// What compaction leaves of `records` once the cleaner has also removed
/// the tombstones: the last record of every key, in the order of those
/// last records.
fn compacted(records: &[(String, Option<String>)]) -> Vec<(String, Option<String>)> {
    let mut last = BTreeMap::new();
    for (i, (key, _)) in records.iter().enumerate() {
        last.insert(key.clone(), i);
    }
    records
        .iter()
        .enumerate()
        .filter(|(i, (key, value))| last[key] == *i && value.is_some())
        .map(|(_, r)| r.clone())
        .collect()
}

/// Writes `records` to a new topic as a plain (non-transactional)
/// producer does, with the settings Confluent creates `_schemas` with.
/// The Kafka timestamp [`write_topic`] gives its records.
const CONFLUENT_RECORDS_TS: i64 = 1_700_000_000_000;

async fn write_topic(
    kafka: &evolve_test::Kafka,
    topic: &str,
    records: Vec<(String, Option<String>)>,
) {
    let created =
        admin(kafka)
            .create_topics(
                [&NewTopic::new(topic, 1, TopicReplication::Fixed(1))
                    .set("cleanup.policy", "compact")],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("create topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let bootstrap = kafka.bootstrap();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let producer: ThreadedProducer<_> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .create()
            .expect("producer");
        for (key, value) in &records {
            // One Kafka timestamp for every record, so that a topic and
            // its compacted copy, written later, read the same `ts`.
            let mut record = BaseRecord::<str, str>::to(&topic)
                .partition(0)
                .key(key)
                .timestamp(CONFLUENT_RECORDS_TS);
            if let Some(value) = value {
                record = record.payload(value);
            }
            producer.send(record).map_err(|(e, _)| e).expect("send");
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
    })
    .await
    .expect("join");
}

/// A registry on `topic` behind the router, in process.
async fn served(kafka: &evolve_test::Kafka, topic: &str) -> common::TestRegistry {
    let log = KafkaLog::open(&spec(kafka, topic))
        .await
        .expect("kafka log");
    let registry = Registry::open(Storage::Kafka(Box::new(log)), Settings::default())
        .await
        .expect("registry");
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: Metrics::default(),
        max_body: DEFAULT_MAX_BODY,
        max_schema: DEFAULT_MAX_SCHEMA,
        access: Access::new("127.0.0.1:8081".parse().expect("address"), false, &[])
            .expect("access"),
    });
    common::TestRegistry {
        router: router(Arc::clone(&app)),
        app,
        path: std::path::PathBuf::new(),
    }
}

/// The reads whose answers say what a registry holds.
const READS: &[&str] = &[
    "/subjects",
    "/subjects?deleted=true",
    "/subjects/orders-value/versions",
    "/subjects/orders-value/versions/1",
    "/subjects/orders-value/versions/2",
    "/subjects/orders-copy/versions/1",
    "/subjects/money.proto/versions/1",
    "/subjects/payments-value/versions/1",
    "/subjects/gone-value/versions",
    "/subjects/gone-value/versions?deleted=true",
    "/subjects/gone-value/versions/2?deleted=true",
    "/subjects/legacy-value/versions",
    "/subjects/legacy-value/versions?deleted=true",
    "/subjects/late-value/versions/1",
    "/schemas/ids/1",
    "/schemas/ids/1/versions",
    "/schemas/ids/4",
    "/schemas/ids/6",
    "/schemas/ids/7",
    "/schemas/ids/20",
    "/config",
    "/config/orders-value",
    "/config/money.proto",
    "/mode",
    "/mode/legacy-value",
];

async fn answers(registry: &common::TestRegistry) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for path in READS {
        let reply = registry.call("GET", path, None).await;
        out.push((reply.status, reply.text));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_written_in_confluents_format_is_served_unchanged_and_so_is_its_compacted_form() {
    let kafka = broker().await;
    let full = topic("confluent");
    let records = confluent_topic();
    write_topic(kafka, &full, records.clone()).await;
    let registry = served(kafka, &full).await;
    let get = |path: &'static str| {
        let registry = &registry;
        async move { registry.ok("GET", path, None).await }
    };

    assert_eq!(
        get("/subjects").await,
        json!([
            "late-value",
            "legacy-value",
            "money.proto",
            "orders-copy",
            "orders-value",
            "payments-value"
        ])
    );
    assert_eq!(
        get("/subjects?deleted=true").await,
        json!([
            "gone-value",
            "late-value",
            "legacy-value",
            "money.proto",
            "orders-copy",
            "orders-value",
            "payments-value"
        ])
    );
    assert_eq!(get("/subjects/orders-value/versions").await, json!([1, 2]));
    let v2 = get("/subjects/orders-value/versions/2").await;
    assert_eq!(
        (v2["id"].clone(), v2["version"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(get("/subjects/orders-copy/versions/1").await["id"], 1);
    assert_eq!(
        get("/schemas/ids/1/versions").await,
        json!([{"subject": "orders-copy", "version": 1}, {"subject": "orders-value", "version": 1}])
    );
    let payment = get("/schemas/ids/4").await;
    assert_eq!(payment["schemaType"], "PROTOBUF", "{payment}");
    assert_eq!(
        payment["references"],
        json!([{"name": "money.proto", "subject": "money.proto", "version": 1}])
    );
    // The soft-deleted subject: hidden, but kept with its versions and ids.
    registry
        .call("GET", "/subjects/gone-value/versions", None)
        .await
        .error(404, 40401);
    assert_eq!(
        get("/subjects/gone-value/versions?deleted=true").await,
        json!([1, 2])
    );
    assert_eq!(
        get("/subjects/gone-value/versions/2?deleted=true").await["id"],
        6
    );
    assert_eq!(get("/schemas/ids/6").await["schema"], "\"bytes\"");
    // The permanently deleted version is gone, its id with it.
    assert_eq!(get("/subjects/legacy-value/versions").await, json!([2]));
    assert_eq!(
        get("/subjects/legacy-value/versions?deleted=true").await,
        json!([2])
    );
    registry
        .call("GET", "/schemas/ids/7", None)
        .await
        .error(404, 40403);
    assert_eq!(get("/subjects/late-value/versions/1").await["id"], 20);
    // Confluent's records carry no `ts` in their value: a version's `ts`
    // is its record's Kafka timestamp, as Confluent's reader sets it
    // (`KafkaStoreMessageHandler.validateUpdate`).
    assert_eq!(
        get("/subjects/orders-value/versions/1").await["ts"],
        json!(CONFLUENT_RECORDS_TS)
    );

    // Config and mode records.
    assert_eq!(get("/config").await["compatibilityLevel"], "FULL");
    assert_eq!(
        get("/config/orders-value").await["compatibilityLevel"],
        "NONE"
    );
    assert_eq!(
        get("/config/money.proto?defaultToGlobal=true").await["compatibilityLevel"],
        "FULL",
        "the tombstone removed the subject's config"
    );
    registry
        .call("GET", "/config/money.proto", None)
        .await
        .error(404, 40408);
    assert_eq!(get("/mode").await["mode"], "READWRITE");
    assert_eq!(get("/mode/legacy-value").await["mode"], "READONLY");
    registry
        .call(
            "POST",
            "/subjects/legacy-value/versions",
            Some(json!({"schema": "\"float\""})),
        )
        .await
        .error(422, 42205);

    // evolve registers after them: the next id after the highest, the next
    // version, written in Confluent's format after their records.
    let body = json!({"schema": json!({"type": "record", "name": "Order", "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "total", "type": "int"}]}).to_string()});
    let reply = registry
        .ok("POST", "/subjects/orders-value/versions", Some(body))
        .await;
    assert_eq!(reply["id"], 21, "{reply}");
    assert_eq!(
        get("/subjects/orders-value/versions").await,
        json!([1, 2, 3])
    );
    let topic_now = committed(kafka, &full).await;
    assert_eq!(topic_now.len(), records.len() + 1, "one record added");
    assert_eq!(
        &topic_now[..records.len()],
        &records[..],
        "their records untouched"
    );
    let (key, value) = topic_now.last().expect("the new record");
    assert_eq!(key, &schema_key("orders-value", 3));
    let value: Value = serde_json::from_str(value.as_deref().expect("value")).expect("JSON");
    assert_eq!(
        (value["id"].clone(), value["deleted"].clone()),
        (json!(21), json!(false))
    );

    // The compacted topic (what the log cleaner leaves, tombstones removed
    // too) is served exactly as the full one was before the registration.
    let before = {
        let fresh = topic("confluent-again");
        write_topic(kafka, &fresh, records.clone()).await;
        answers(&served(kafka, &fresh).await).await
    };
    let small = topic("compacted");
    let kept = compacted(&records);
    assert!(
        kept.len() < records.len() - 5,
        "compaction removes records: {}",
        kept.len()
    );
    write_topic(kafka, &small, kept).await;
    let after = answers(&served(kafka, &small).await).await;
    for ((path, b), a) in READS.iter().zip(&before).zip(&after) {
        assert_eq!(b, a, "GET {path}: full topic vs compacted topic");
    }
    assert_eq!(
        before.iter().filter(|(s, _)| *s == 200).count(),
        READS.len() - 3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_python_client_registers_and_reads_back_a_data_contract_on_the_kafka_store() {
    let kafka = broker().await;
    let topic = topic("python");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let log = KafkaLog::open(&spec(kafka, &topic))
        .await
        .expect("kafka log");
    let registry = Registry::open(Storage::Kafka(Box::new(log)), Settings::default())
        .await
        .expect("registry");
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: Metrics::default(),
        max_body: DEFAULT_MAX_BODY,
        max_schema: DEFAULT_MAX_SCHEMA,
        access: Access::new(address, false, &[]).expect("access"),
    });
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(evolve_registry::serve::serve(
        Arc::clone(&app),
        listener,
        None,
        async move {
            let _ = stopped.await;
        },
    ));
    let summary = common::python_client("data_contracts.py", &[&format!("http://{address}")]).await;
    assert_eq!(summary["owner"], "payments", "{summary}");
    assert_eq!(summary["rule"], "checkAmount", "{summary}");
    assert_eq!(summary["configured_tier"], "gold", "{summary}");

    // The contract is in the topic, and a fresh instance replays it.
    let records = committed(kafka, &topic).await;
    let with_contract = records
        .iter()
        .filter_map(|(_, v)| v.as_deref())
        .filter(|v| v.contains("\"ruleSet\"") && v.contains("\"metadata\""))
        .count();
    assert!(with_contract >= 2, "{records:?}");
    let fresh = instance(kafka, &topic).await;
    let id = summary["id"].as_u64().expect("id") as u32;
    let stored = fresh
        .read(|s| s.schema(".", id).cloned())
        .expect("the schema replayed");
    assert_eq!(
        stored
            .metadata
            .as_ref()
            .map(|m| m["properties"]["owner"].clone()),
        Some(json!("payments"))
    );
    assert_eq!(
        stored
            .rule_set
            .as_ref()
            .map(|r| r["domainRules"][0]["name"].clone()),
        Some(json!("checkAmount"))
    );
}

// ---- several instances: one writes, the others forward -------------------------

/// An instance served on a free loopback port with its address advertised
/// (as `evolve registry serve` does), and driven in process through its
/// router; stopped when dropped.
struct Node {
    registry: common::TestRegistry,
    url: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Node {
    async fn start(kafka: &evolve_test::Kafka, topic: &str, users: Option<&str>) -> Node {
        Node::start_with(kafka, topic, users, true).await
    }

    /// `eligible`: whether it may become the writer.
    async fn start_with(
        kafka: &evolve_test::Kafka,
        topic: &str,
        users: Option<&str>,
        eligible: bool,
    ) -> Node {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let url = format!("http://{address}");
        let log = KafkaLog::open(&spec(kafka, topic))
            .await
            .expect("kafka log");
        log.serve_as(Forwarder::new(
            Some(PeerUrl::parse(&url).expect("url")),
            eligible,
            None,
        ));
        let settings = Settings {
            poll_interval: Duration::from_millis(200),
            ..Settings::default()
        };
        let registry = Registry::open(Storage::Kafka(Box::new(log)), settings)
            .await
            .expect("registry");
        let app = Arc::new(App {
            registry,
            users: users.map(|text| Users::parse(text).expect("users")),
            metrics: Metrics::default(),
            max_body: DEFAULT_MAX_BODY,
            max_schema: DEFAULT_MAX_SCHEMA,
            access: Access::new(address, false, &[]).expect("access"),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(evolve_registry::serve::serve(
            Arc::clone(&app),
            listener,
            None,
            async move {
                let _ = stopped.await;
            },
        ));
        Node {
            registry: common::TestRegistry {
                router: router(Arc::clone(&app)),
                app,
                path: std::path::PathBuf::new(),
            },
            url,
            _stop: stop,
        }
    }

    fn log(&self) -> &KafkaLog {
        match self.registry.app.registry.log() {
            Storage::Kafka(log) => log,
            _ => unreachable!("a Kafka node"),
        }
    }

    /// (takeovers, commits, forwarded answered, unreachable, failed)
    fn counts(&self) -> (u64, u64, u64, u64, u64) {
        let writer = self.log().writer_stats();
        let forwarded = self.log().forwarder().expect("forwarder").stats();
        (
            writer.takeovers,
            writer.commits,
            forwarded.answered,
            forwarded.unreachable,
            forwarded.failed,
        )
    }

    /// Registration `n`: schema `f{n}` in subject `s{n % 3}`.
    async fn register_nth(&self, n: usize) -> common::Reply {
        self.register(&format!("s{}", n % 3), &format!("f{n}"))
            .await
    }

    async fn register(&self, subject: &str, field: &str) -> common::Reply {
        let body = json!({"schema": record_schema(field).schema});
        self.registry
            .call("POST", &format!("/subjects/{subject}/versions"), Some(body))
            .await
    }
}

/// Writes a record to the writer topic of `topic` as a plain producer,
/// naming a writer that is not one of the test's instances.
async fn fake_writer(kafka: &evolve_test::Kafka, topic: &str, instance: &str, url: &str) {
    let bootstrap = kafka.bootstrap();
    let topic = format!("{topic}_writer");
    let value = json!({"instance": instance, "url": url}).to_string();
    tokio::task::spawn_blocking(move || {
        let producer: ThreadedProducer<_> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .create()
            .expect("producer");
        producer
            .send(
                BaseRecord::<str, str>::to(&topic)
                    .partition(0)
                    .key("writer")
                    .payload(&value),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        producer.flush(Duration::from_secs(30)).expect("flush");
    })
    .await
    .expect("join");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_sent_to_any_of_three_instances_are_written_by_one_and_forwarded_by_the_others() {
    let kafka = broker().await;
    let topic = topic("forward");
    let nodes = [
        Node::start(kafka, &topic, None).await,
        Node::start(kafka, &topic, None).await,
        Node::start(kafka, &topic, None).await,
    ];
    // The first write, on instance 0, makes it the writer.
    let reply = nodes[0]
        .registry
        .call("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    // 30 new schemas in 3 subjects, three at a time, round robin over the
    // instances.
    const ROUNDS: usize = 10;
    let mut ids = BTreeMap::new();
    for round in 0..ROUNDS {
        let n = |i: usize| round * 3 + i;
        let (a, b, c) = tokio::join!(
            nodes[0].register_nth(n(0)),
            nodes[1].register_nth(n(1)),
            nodes[2].register_nth(n(2)),
        );
        for (i, reply) in [a, b, c].into_iter().enumerate() {
            assert_eq!(reply.status, 200, "registration {}: {}", n(i), reply.text);
            ids.insert(n(i), reply.json()["id"].as_u64().expect("id"));
        }
    }
    let distinct: std::collections::BTreeSet<u64> = ids.values().copied().collect();
    assert_eq!(distinct.len(), 3 * ROUNDS, "ids are unique: {ids:?}");

    // Instance 0 took over once and committed every write; the others
    // took over never, committed nothing, and forwarded theirs.
    let counts: Vec<_> = nodes.iter().map(Node::counts).collect();
    assert_eq!(counts[0], (1, 1 + 3 * ROUNDS as u64, 0, 0, 0), "{counts:?}");
    assert_eq!(counts[1], (0, 0, ROUNDS as u64, 0, 0), "{counts:?}");
    assert_eq!(counts[2], (0, 0, ROUNDS as u64, 0, 0), "{counts:?}");
    for (i, node) in nodes.iter().enumerate() {
        let writer = node.registry.ok("GET", "/v1/metadata/writer", None).await;
        assert_eq!(writer["writer"]["url"], nodes[0].url.as_str(), "{writer}");
        assert_eq!(writer["is_writer"], i == 0, "{writer}");
        assert_eq!(writer["url"], node.url.as_str(), "{writer}");
    }
    let metrics = nodes[1].registry.call("GET", "/metrics", None).await.text;
    assert!(
        metrics.contains("evolve_registry_forwarded_total{outcome=\"answered\"} 10")
            && metrics.contains("evolve_registry_writer 0"),
        "{metrics}"
    );

    // Every registration is readable on every instance, by id and by
    // lookup, at once (an instance reads the log after a write it
    // forwarded, and on a miss).
    for node in &nodes {
        for (n, id) in &ids {
            let by_id = node
                .registry
                .ok("GET", &format!("/schemas/ids/{id}"), None)
                .await;
            assert_eq!(by_id["schema"], record_schema(&format!("f{n}")).schema);
            let found = node
                .registry
                .ok(
                    "POST",
                    &format!("/subjects/s{}", n % 3),
                    Some(json!({"schema": record_schema(&format!("f{n}")).schema})),
                )
                .await;
            assert_eq!(found["id"], *id);
        }
    }

    // Re-registering is answered from memory: nothing is forwarded.
    let again = nodes[1].register("s1", "f1").await;
    assert_eq!(
        (again.status, again.json()["id"].as_u64()),
        (200, ids.get(&1).copied())
    );
    assert_eq!(nodes[1].counts().2, ROUNDS as u64);

    // The other writes are forwarded too, and are visible at once on the
    // instance that forwarded them.
    let via = &nodes[2].registry;
    via.ok("PUT", "/config/s0", Some(json!({"compatibility": "FULL"})))
        .await;
    assert_eq!(
        via.ok("GET", "/config/s0", None).await["compatibilityLevel"],
        "FULL"
    );
    via.ok("PUT", "/mode/s1", Some(json!({"mode": "READONLY"})))
        .await;
    assert_eq!(via.ok("GET", "/mode/s1", None).await["mode"], "READONLY");
    assert_eq!(
        via.ok("DELETE", "/subjects/s2/versions/1", None).await,
        json!(1)
    );
    assert_eq!(
        via.ok("DELETE", "/config/s0", None).await["compatibilityLevel"],
        "FULL"
    );
    let versions = via.ok("DELETE", "/subjects/s2", None).await;
    assert_eq!(versions.as_array().map(Vec::len), Some(ROUNDS - 1));
    // An error of the writer comes back as it is.
    via.call("DELETE", "/subjects/s2", None)
        .await
        .error(404, 40404);
    assert_eq!(nodes[2].counts(), (0, 0, ROUNDS as u64 + 6, 0, 0));
    assert_eq!(nodes[0].counts().1, 1 + 3 * ROUNDS as u64 + 5);

    // The topic holds Confluent's records only; the writer topic names
    // instance 0, once.
    let records = committed(kafka, &topic).await;
    assert_eq!(records.len(), 1 + 3 * ROUNDS + 5, "{records:?}");
    for (key, _) in &records {
        let key: Value = serde_json::from_str(key).expect("key JSON");
        assert!(
            ["SCHEMA", "CONFIG", "MODE", "DELETE_SUBJECT"]
                .contains(&key["keytype"].as_str().unwrap_or("")),
            "{key}"
        );
    }
    let writers = committed(kafka, &format!("{topic}_writer")).await;
    assert_eq!(writers.len(), 1, "{writers:?}");
    let record: Value =
        serde_json::from_str(writers[0].1.as_deref().expect("value")).expect("JSON");
    assert_eq!(record["url"], nodes[0].url.as_str());
    assert_eq!(record["instance"], nodes[0].log().instance());

    // A write under a context's base path is forwarded as the same write
    // about the context's subject.
    let reply = nodes[1]
        .registry
        .call(
            "POST",
            "/contexts/.team/subjects/t/versions",
            Some(json!({"schema": record_schema("t").schema})),
        )
        .await;
    assert_eq!((reply.status, reply.json()["id"].as_u64()), (200, Some(1)));
    assert_eq!(nodes[1].counts(), (0, 0, ROUNDS as u64 + 1, 0, 0));
    let versions = nodes[0]
        .registry
        .ok("GET", "/subjects/:.team:t/versions", None)
        .await;
    assert_eq!(versions, json!([1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_keeps_the_callers_credentials() {
    let kafka = broker().await;
    let topic = topic("forward-auth");
    let hash = |password: &str| evolve_registry::auth::hash_password(password).expect("hash");
    let (alice, mallory) = (hash("alice-secret"), hash("mallory-secret"));
    // The writer knows alice only; the other instance knows both.
    let writer = Node::start(kafka, &topic, Some(&format!("alice:{alice}"))).await;
    let other = Node::start(
        kafka,
        &topic,
        Some(&format!("alice:{alice}\nmallory:{mallory}")),
    )
    .await;
    let basic = |user: &str, password: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
    };
    let as_alice = basic("alice", "alice-secret");
    let as_mallory = basic("mallory", "mallory-secret");
    let body = || Some(json!({"schema": record_schema("a").schema}).to_string());
    let reply = writer
        .registry
        .raw(
            "PUT",
            "/config",
            Some(r#"{"compatibility":"NONE"}"#.to_owned()),
            &[("authorization", &as_alice)],
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    // mallory passes the other instance's check, not the writer's: the
    // writer's refusal comes back.
    let refused = other
        .registry
        .raw(
            "POST",
            "/subjects/s/versions",
            body(),
            &[("authorization", &as_mallory)],
        )
        .await;
    refused.error(401, 401);
    assert_eq!(other.counts(), (0, 0, 1, 0, 0));
    let reads = other
        .registry
        .raw("GET", "/subjects", None, &[("authorization", &as_mallory)])
        .await;
    assert_eq!((reads.status, reads.text.as_str()), (200, "[]"));
    // Without credentials the other instance refuses by itself.
    other
        .registry
        .raw("POST", "/subjects/s/versions", body(), &[])
        .await
        .error(401, 401);
    assert_eq!(other.counts().2, 1, "not forwarded");
    // alice is accepted by both.
    let accepted = other
        .registry
        .raw(
            "POST",
            "/subjects/s/versions",
            body(),
            &[("authorization", &as_alice)],
        )
        .await;
    assert_eq!(accepted.status, 200, "{}", accepted.text);
    assert_eq!(other.counts(), (0, 0, 2, 0, 0));
    assert_eq!(
        writer.counts().1,
        2,
        "the writer committed the config and the schema"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_cannot_be_reached_is_taken_over_and_one_that_took_over_is_followed() {
    let kafka = broker().await;
    let topic = topic("forward-takeover");
    let a = Node::start(kafka, &topic, None).await;

    // The record names a writer whose port is closed: instance a takes
    // over and writes.
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        listener.local_addr().expect("address")
    };
    fake_writer(
        kafka,
        &topic,
        "00000000000000aa",
        &format!("http://{closed}"),
    )
    .await;
    let reply = a.register("x", "x").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(a.counts(), (1, 1, 0, 1, 0));

    // A writer that takes the request and closes without an answer: a
    // delete may have been applied and fails visibly; a registration is
    // written here.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_at = silent.local_addr().expect("address");
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        while let Ok((mut stream, _)) = silent.accept().await {
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer).await;
        }
    });
    fake_writer(
        kafka,
        &topic,
        "00000000000000bb",
        &format!("http://{silent_at}"),
    )
    .await;
    let b = Node::start(kafka, &topic, None).await;
    let message = b
        .registry
        .call("DELETE", "/subjects/x", None)
        .await
        .error(500, 50003);
    assert!(message.contains("may have been applied"), "{message}");
    assert_eq!(
        b.registry.ok("GET", "/subjects/x/versions", None).await,
        json!([1])
    );
    let reply = b.register("y", "y").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(b.counts(), (1, 1, 0, 0, 2));

    // a still holds its producer and believes it writes: its write is
    // fenced, it finds that b took over since, declines to take over
    // again and forwards to b.
    let reply = a.register("z", "z").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(a.counts(), (1, 1, 1, 1, 0));
    assert_eq!(b.counts(), (1, 2, 0, 0, 2));
    let writer = a.registry.ok("GET", "/v1/metadata/writer", None).await;
    assert_eq!(writer["writer"]["url"], b.url.as_str());
    assert_eq!(writer["is_writer"], false);

    // A write forwarded to a (by an instance that has not seen b take
    // over) is not forwarded again, and a does not take over from b
    // either: it answers that it no longer writes, and the forwarder
    // routes the write again.
    let body = json!({"schema": record_schema("w").schema}).to_string();
    let message = a
        .registry
        .raw(
            "POST",
            "/subjects/w/versions",
            Some(body),
            &[("x-evolve-forwarded", "0000000000000000")],
        )
        .await
        .error(500, 50004);
    assert!(message.contains(b.log().instance()), "{message}");
    assert_eq!(a.counts(), (1, 1, 1, 1, 0));
    assert_eq!(b.counts().0, 1, "b still writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_may_not_write_forwards_and_never_takes_over() {
    let kafka = broker().await;
    let topic = topic("forward-ineligible");
    let follower = Node::start_with(kafka, &topic, None, false).await;
    // Nobody writes yet, and it may not.
    follower.register("x", "x").await.error(500, 50004);
    let writer = Node::start(kafka, &topic, None).await;
    let reply = writer.register("x", "x").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reply = follower.register("y", "y").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(follower.counts(), (0, 0, 1, 0, 0));
    // The writer stops serving: the follower still does not take over.
    let stopped_writer = writer.log().instance().to_owned();
    drop(writer);
    let message = follower.register("z", "z").await.error(500, 50004);
    assert!(message.contains("--writer-eligible false"), "{message}");
    assert_eq!(follower.counts(), (0, 0, 1, 1, 0));
    let status = follower
        .registry
        .ok("GET", "/v1/metadata/writer", None)
        .await;
    assert_eq!(status["writer"]["instance"], stopped_writer.as_str());
    assert_eq!(status["is_writer"], false);
}
