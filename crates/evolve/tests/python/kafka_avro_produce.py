"""Writes Avro records into a topic as Confluent's own Python client does:
AvroSerializer with the value schema registered under TopicNameStrategy
(`<topic>-value`) on first use, string keys, tombstones for null values.

Usage:
  kafka_avro_produce.py topic BOOTSTRAP TOPIC PARTITIONS
      creates the topic (nothing when it exists)
  kafka_avro_produce.py partitions BOOTSTRAP TOPIC PARTITIONS
      adds partitions to the topic until it has PARTITIONS
  kafka_avro_produce.py compatibility REGISTRY_URL SUBJECT LEVEL
      sets the subject's compatibility level (e.g. NONE)
  kafka_avro_produce.py register REGISTRY_URL SUBJECT SCHEMA_JSON [REFERENCES_JSON] [TYPE]
      registers the schema (Avro, or TYPE: JSON, PROTOBUF) under the
      subject, with the references given as
      [{"name": ..., "subject": ..., "version": ...}]; prints its id
  kafka_avro_produce.py raw BOOTSTRAP TOPIC KEY VALUE_HEX
      produces one record with the value's bytes as given (no serializer)
  kafka_avro_produce.py produce BOOTSTRAP TOPIC REGISTRY_URL SCHEMA_JSON
      reads JSON lines {"key": "k", "value": {...} | null} from stdin and
      produces them in order (an idempotent producer, flushed at the end);
      prints the number of records delivered. A value {"$decimal": "12.34"}
      is the decimal.Decimal the serializer takes for a decimal field.
  kafka_avro_produce.py produce-topic-record BOOTSTRAP TOPIC REGISTRY_URL SCHEMA_JSON
      as produce, with the schema registered under TopicRecordNameStrategy
      (`<topic>-<record full name>`), for a topic of several record types
  kafka_avro_produce.py produce-latest BOOTSTRAP TOPIC REGISTRY_URL
      as produce, with the subject's latest registered schema and the
      schemas its references name (use.latest.version, no registration)
  kafka_avro_produce.py produce-json BOOTSTRAP TOPIC REGISTRY_URL SCHEMA_JSON
      as produce, with Confluent's JSON Schema serializer (JSONSerializer)
      and the JSON Schema given, registered on first use
  kafka_avro_produce.py produce-protobuf BOOTSTRAP TOPIC REGISTRY_URL FILES_JSON MESSAGE
      as produce, with Confluent's Protobuf serializer (ProtobufSerializer)
      and message MESSAGE (a full name) of FILES_JSON, a list of
      FileDescriptorProto in their JSON form, dependencies first (the
      well-known types are there already); each value is the message's
      JSON form. The serializer registers the message's file (and the
      files it imports, as references) on first use.

Exits 1 with the error on any failure."""

import decimal
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=int(partitions), replication_factor=1)])
    for f in futures.values():
        try:
            f.result(30)
        except Exception as e:  # noqa: BLE001
            if "already exists" not in str(e).lower() and "TOPIC_ALREADY_EXISTS" not in str(e):
                raise


def delete_topic(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def add_partitions(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_partitions([NewPartitions(topic, int(partitions))])
    for f in futures.values():
        f.result(30)


def set_compatibility(url, subject, level):
    SchemaRegistryClient({"url": url}).set_compatibility(subject_name=subject, level=level)


def decimals(value):
    """`value` with each {"$decimal": text} made a decimal.Decimal."""
    if isinstance(value, dict):
        if list(value) == ["$decimal"]:
            return decimal.Decimal(value["$decimal"])
        return {k: decimals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decimals(v) for v in value]
    return value


def protobuf_serializer(registry, files, message):
    """Confluent's ProtobufSerializer for `message` of `files` (JSON), and
    the function that makes a value's JSON that message."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import (descriptor_pb2, descriptor_pool, json_format, message_factory,
                                 timestamp_pb2, wrappers_pb2)
    pool = descriptor_pool.DescriptorPool()
    for known in (timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(known.DESCRIPTOR.serialized_pb)
    for file in json.loads(files):
        pool.Add(json_format.ParseDict(file, descriptor_pb2.FileDescriptorProto()))
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(message))
    serializer = ProtobufSerializer(cls, registry, {"auto.register.schemas": True,
                                                    "use.deprecated.format": False})
    return lambda value, ctx: serializer(json_format.ParseDict(value, cls()), ctx)


def produce(bootstrap, topic, url, schema, json_schema=False, message=None, topic_record=False):
    registry = SchemaRegistryClient({"url": url})
    if schema is None:
        conf = {"auto.register.schemas": False, "use.latest.version": True}
    else:
        conf = {"auto.register.schemas": True}
    if topic_record:
        from confluent_kafka.schema_registry import topic_record_subject_name_strategy
        conf["subject.name.strategy"] = topic_record_subject_name_strategy
    if message is not None:
        serializer = protobuf_serializer(registry, schema, message)
    elif json_schema:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        serializer = JSONSerializer(schema, registry, conf=conf)
    else:
        serializer = AvroSerializer(registry, schema, conf=conf)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures = []
    delivered = [0]

    def report(err, _msg):
        if err is not None:
            failures.append(str(err))
        else:
            delivered[0] += 1

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        record = json.loads(line)
        value = decimals(record.get("value"))
        payload = None
        if value is not None:
            payload = serializer(value, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, key=record["key"].encode(), value=payload, on_delivery=report)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failures:
        raise SystemExit(f"{remaining} records not delivered; failures: {failures[:3]}")
    print(delivered[0])


def register(url, subject, schema, references="[]", schema_type="AVRO"):
    from confluent_kafka.schema_registry import Schema, SchemaReference
    refs = [SchemaReference(r["name"], r["subject"], r["version"]) for r in json.loads(references)]
    registered = Schema(schema, schema_type, references=refs)
    print(SchemaRegistryClient({"url": url}).register_schema(subject, registered))


def raw(bootstrap, topic, key, value_hex):
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=key.encode(), value=bytes.fromhex(value_hex))
    if producer.flush(30):
        raise SystemExit("the record was not delivered")
    print(1)


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "topic":
        create_topic(*args)
    elif command == "partitions":
        add_partitions(*args)
    elif command == "delete-topic":
        delete_topic(*args)
    elif command == "compatibility":
        set_compatibility(*args)
    elif command == "register":
        register(*args)
    elif command == "raw":
        raw(*args)
    elif command == "produce":
        produce(*args)
    elif command == "produce-latest":
        produce(*args, None)
    elif command == "produce-json":
        produce(*args, json_schema=True)
    elif command == "produce-topic-record":
        produce(*args, topic_record=True)
    elif command == "produce-protobuf":
        produce(*args[:4], message=args[4])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"kafka_avro_produce.py: {e}", file=sys.stderr)
        sys.exit(1)
