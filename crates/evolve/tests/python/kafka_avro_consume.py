"""Reads a topic written with evolve's FORMAT AVRO as Confluent's own
Python client does: a read_committed DeserializingConsumer with
AvroDeserializer for keys and values, the schemas fetched by the id in
each record's wire header from the schema registry.

Usage: kafka_avro_consume.py BOOTSTRAP TOPIC REGISTRY_URL COUNT [USER:PASSWORD] [CA_FILE]

Prints one JSON line per record, {"key": ..., "value": ... or null}, and
exits 1 when COUNT records did not arrive within 60 s."""

import json
import sys
import time
import uuid

from confluent_kafka import DeserializingConsumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer


def main():
    bootstrap, topic, url, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    conf = {"url": url}
    if len(sys.argv) > 5 and sys.argv[5]:
        conf["basic.auth.user.info"] = sys.argv[5]
    if len(sys.argv) > 6 and sys.argv[6]:
        conf["ssl.ca.location"] = sys.argv[6]
    registry = SchemaRegistryClient(conf)
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "evolve-test-" + uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "key.deserializer": AvroDeserializer(registry),
            "value.deserializer": AvroDeserializer(registry),
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.time() + 60
    while seen < count and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise SystemExit(f"consumer error: {msg.error()}")
        print(json.dumps({"key": msg.key(), "value": msg.value()}), flush=True)
        seen += 1
    consumer.close()
    if seen < count:
        print(f"only {seen} of {count} records arrived", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
