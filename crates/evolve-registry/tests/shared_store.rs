//! Several registry instances sharing one PostgreSQL store, on a throwaway
//! cluster: concurrent registrations agree on ids and versions.

use std::sync::Arc;

use evolve_registry::service::{Registry, Settings};
use evolve_registry::state::SchemaInput;
use evolve_registry::store::{Log, PostgresLog, Storage};

async fn instance(url: &str) -> Arc<Registry<Storage>> {
    let log = PostgresLog::open(url).await.expect("postgres log");
    Arc::new(
        Registry::open(Storage::Postgres(log), Settings::default())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_on_two_instances_yield_one_id_and_one_version() {
    let db = evolve_test::fresh_db("registry_shared").await;
    let a = instance(&db.url).await;
    let b = instance(&db.url).await;

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

    // Both instances see the same log: 11 schema records and nothing else.
    a.catch_up().await.expect("catch up");
    b.catch_up().await.expect("catch up");
    let log = PostgresLog::open(&db.url).await.expect("log");
    let records = log.read_after(0).await.expect("read");
    assert_eq!(records.len(), 11, "one record per distinct registration");
    let versions_a = a.read(|s| s.subject("shared").map(|s| s.versions.len()));
    let versions_b = b.read(|s| s.subject("shared").map(|s| s.versions.len()));
    assert_eq!((versions_a, versions_b), (Some(11), Some(11)));

    // A third instance started now replays the same state.
    let c = instance(&db.url).await;
    assert_eq!(c.read(|s| s.offset), 11);
    assert_eq!(c.read(|s| s.schema_count()), 11);
}

/// Contexts and data contracts go through the PostgreSQL log like every
/// other record: a second instance replays a context's subjects, its own
/// ids and its CONTEXT record, and a schema's metadata and rule set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_and_data_contracts_persist_in_postgres() {
    let db = evolve_test::fresh_db("registry_contexts").await;
    let a = instance(&db.url).await;
    let metadata = serde_json::json!({"properties": {"owner": "team"}});
    let rules = serde_json::json!({"domainRules": [{"name": "r", "expr": "true"}]});
    let with_contract = SchemaInput {
        metadata: Some(metadata.clone()),
        rule_set: Some(rules.clone()),
        ..record_schema("a")
    };
    assert_eq!(register(&a, "plain", &record_schema("z")).await, (1, 1));
    assert_eq!(register(&a, ":.team:orders", &with_contract).await, (1, 1));
    assert_eq!(
        register(&a, ":.team:orders", &record_schema("b")).await,
        (2, 2)
    );

    let log = PostgresLog::open(&db.url).await.expect("log");
    let records = log.read_after(0).await.expect("read");
    assert!(
        records.iter().any(|(_, r)| r.key
            == evolve_registry::record::Key::Context {
                context: ".team".into()
            }),
        "no CONTEXT record"
    );

    let b = instance(&db.url).await;
    let contexts = b.read(|s| s.context_names());
    assert_eq!(contexts, vec![".".to_string(), ".team".to_string()]);
    let stored = b
        .read(|s| s.schema(".team", 1).cloned())
        .expect("schema 1 of .team");
    assert_eq!(stored.metadata, Some(metadata));
    assert_eq!(stored.rule_set, Some(rules));
    let plain = b
        .read(|s| s.schema(".", 1).cloned())
        .expect("schema 1 of .");
    assert!(plain.text.contains("\"z\""), "{}", plain.text);
    assert_eq!(
        b.read(|s| s.subject(":.team:orders").map(|s| s.versions.len())),
        Some(2)
    );
}

/// The server ends the registry's session (as a restart or an
/// administrator's `pg_terminate_backend` does): the next read and the
/// next registration open a new session instead of failing from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_closed_is_opened_again() {
    let db = evolve_test::fresh_db("registry_reconnect").await;
    let log = PostgresLog::open(&db.url).await.expect("postgres log");
    let admin = evolve_pg::connect(&db.url, "evolve test").await.unwrap();
    let terminate = async || -> i64 {
        admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = 'evolve registry' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    };
    let registry = Arc::new(
        Registry::open(Storage::Postgres(log), Settings::default())
            .await
            .expect("registry"),
    );
    assert_eq!(register(&registry, "s", &record_schema("a")).await, (1, 1));
    assert_eq!(terminate().await, 1, "the registry's one session");
    // Let the client notice the closed connection.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(register(&registry, "s", &record_schema("b")).await, (2, 2));
    assert_eq!(terminate().await, 1, "a new session was opened");
    let other = PostgresLog::open(&db.url).await.expect("postgres log");
    assert_eq!(other.read_after(0).await.unwrap().len(), 2);
}
