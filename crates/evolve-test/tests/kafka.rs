//! The Kafka harness: the shared broker starts, answers, and a
//! `read_committed` read of a topic it lacks fails naming the topic.

use std::time::Duration;

#[test]
fn the_shared_broker_starts_and_reads_say_what_is_missing() {
    let kafka = evolve_test::kafka();
    assert!(kafka.url().starts_with("kafka://127.0.0.1:"));
    assert_eq!(kafka.bootstrap(), format!("127.0.0.1:{}", kafka.port()));
    let e = kafka
        .read_committed("no_such_topic", Duration::from_secs(10))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "could not read topic \"no_such_topic\" to its end: the topic does not exist"
    );
    // The broker is KRaft, formatted fresh: its log says it started.
    assert!(
        kafka.log_tail(400).contains("Kafka Server started"),
        "{}",
        kafka.log_tail(40)
    );
}

#[test]
fn missing_jars_name_the_way_out() {
    let e = evolve_test::HarnessError::KafkaJarsMissing {
        jars: "/nowhere/jars".into(),
    };
    assert_eq!(
        e.to_string(),
        format!(
            "the Apache Kafka jars (kafka_2.13 {}) are not in /nowhere/jars; run `cargo xtask test` (it fetches them with Maven), or set EVOLVE_KAFKA_JARS to a directory holding them",
            evolve_test::KAFKA_VERSION
        )
    );
}
