//! What a registry's start costs: replaying a log of 5,000 schema versions
//! (4,000 distinct Avro records, 1,000 distinct Protobuf messages, five
//! versions to a subject). Each distinct schema has keys: the normalized
//! form of an Avro schema, the compiled descriptor of a Protobuf one. The
//! start reads the records without computing them (a thread computes them
//! once the registry is up, and a request that needs one first computes
//! it). The times are printed, not asserted (`cargo test -p
//! evolve-registry --test replay_cost -- --nocapture` shows them): the
//! start, its parts, what computing every key costs on top, and a new
//! registration right after the start. What is asserted is that the
//! replayed state holds every schema and takes the next id.

mod common;

use std::time::Instant;

use evolve_compat::SchemaType;
use evolve_registry::record::{Key, Record, SchemaValue, Value};
use evolve_registry::service::{Registry, Settings};
use evolve_registry::state::{SchemaInput, State, dedup_key};
use evolve_registry::store::{Log, SqliteLog, Storage};

const AVRO_VERSIONS: u32 = 4_000;
const PROTOBUF_VERSIONS: u32 = 1_000;
/// Versions per subject.
const VERSIONS: u32 = 5;

fn avro(n: u32) -> String {
    let fields: Vec<String> = (0..12)
        .map(|f| {
            format!(
                r#"{{"name":"field_{f}","type":["null","string"],"default":null,"doc":"field {f} of record {n}"}}"#
            )
        })
        .collect();
    format!(
        r#"{{"type":"record","name":"Record{n}","namespace":"com.example.replay","fields":[{{"name":"id","type":"long"}},{}]}}"#,
        fields.join(",")
    )
}

fn protobuf(n: u32) -> String {
    let fields: String = (0..12)
        .map(|f| format!("  string field_{f} = {};\n", f + 2))
        .collect();
    format!(
        "syntax = \"proto3\";\npackage replay.p{n};\n\nmessage Message{n} {{\n  int64 id = 1;\n{fields}}}\n"
    )
}

fn version(subject: String, version: u32, id: u32, schema: String, protobuf: bool) -> Record {
    Record {
        key: Key::Schema {
            subject: subject.clone(),
            version,
        },
        value: Some(Value::Schema(SchemaValue {
            subject,
            version,
            id,
            schema,
            schema_type: protobuf.then(|| "PROTOBUF".to_owned()),
            references: Vec::new(),
            metadata: None,
            rule_set: None,
            deleted: false,
            ts: None,
        })),
    }
}

#[tokio::test]
async fn replaying_five_thousand_versions() {
    let path = common::temp_path("replay-cost");
    let log = SqliteLog::open(&path).expect("sqlite log");
    let mut records = Vec::new();
    for n in 0..AVRO_VERSIONS {
        let subject = format!("avro-{}-value", n / VERSIONS);
        records.push(version(subject, n % VERSIONS + 1, n + 1, avro(n), false));
    }
    for n in 0..PROTOBUF_VERSIONS {
        let subject = format!("proto-{}-value", n / VERSIONS);
        let id = AVRO_VERSIONS + n + 1;
        records.push(version(subject, n % VERSIONS + 1, id, protobuf(n), true));
    }
    assert!(log.append(0, &records).await.expect("append"));
    drop(log);

    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let total = AVRO_VERSIONS + PROTOBUF_VERSIONS;

    // A registry's start: read the log and apply every record.
    let started = Instant::now();
    let log = SqliteLog::open(&path).expect("sqlite log");
    let registry = Registry::open(Storage::Sqlite(log), Settings::default())
        .await
        .expect("registry");
    let start = started.elapsed();
    registry.read(|state| {
        assert_eq!(state.schema_count(), total as usize);
        assert_eq!(state.offset, i64::from(total));
    });
    // A new schema registered at once, before the keys computed in the
    // background are all there: it computes those that are not.
    let started = Instant::now();
    let input = SchemaInput {
        schema: avro(AVRO_VERSIONS + PROTOBUF_VERSIONS),
        ..SchemaInput::default()
    };
    let id = registry
        .write(|state| {
            let r = state.register("new-value", &input, 409)?;
            Ok((r.id, r.records))
        })
        .await
        .expect("register");
    assert_eq!(id, total + 1);
    let first = started.elapsed();
    drop(registry);

    // The parts, on a state of its own: reading and decoding the records,
    // applying them, then computing every normalized key (what the start
    // did before keys were computed when first needed).
    let log = SqliteLog::open(&path).expect("sqlite log");
    let started = Instant::now();
    let read = log.read_after(0).await.expect("read");
    let reading = started.elapsed();
    let started = Instant::now();
    let mut state = State::new();
    for (offset, record) in &read {
        state.apply(*offset, record);
    }
    let applying = started.elapsed();
    let started = Instant::now();
    let unknown = dedup_key(SchemaType::Avro, "\"null\"", &[], None, None);
    assert_eq!(state.id_of(".", &unknown), None);
    let keying = started.elapsed();
    println!(
        "{total} schema versions ({AVRO_VERSIONS} Avro, {PROTOBUF_VERSIONS} Protobuf), {build} build: \
         start {:.2} s (reading and decoding {:.2} s, applying {:.2} s); \
         every normalized key {:.2} s more (computed in the background after the start); \
         a new registration right after the start {:.2} s",
        start.as_secs_f64(),
        reading.as_secs_f64(),
        applying.as_secs_f64(),
        keying.as_secs_f64(),
        first.as_secs_f64(),
    );
    let _ = std::fs::remove_dir_all(path.parent().expect("temp dir"));
}
