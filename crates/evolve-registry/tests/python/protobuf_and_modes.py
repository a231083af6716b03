"""Confluent's Python client against an evolve registry: Protobuf schemas
sent as descriptors, Confluent's bundled imports, and a producer on a
READONLY subject.

Usage: protobuf_and_modes.py URL

- CI registers a .proto text; the ProtobufSerializer (which sends the
  base64 of the FileDescriptorProto) finds it with auto.register.schemas
  off, with and without normalize.schemas, and registers nothing new with
  it on.
- A message importing confluent/type/decimal.proto and
  google/type/date.proto registers (the client never sends those as
  references), and so does one with a dependency of its own, which the
  registry serves back as .proto text.
- An AvroSerializer with auto.register.schemas (the default) keeps
  producing after its subject is made READONLY.
- test_compatibility on a subject that does not exist is True.

Prints one JSON object with what it saw; exits non-zero on any mismatch.
"""

import json
import sys
import urllib.request

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.schema_registry.confluent.type import decimal_pb2  # noqa: F401 (registers the file)
from google.type import date_pb2  # noqa: F401 (registers the file)
from confluent_kafka.serialization import MessageField, SerializationContext


def check(condition, what):
    if not condition:
        raise SystemExit(f"MISMATCH: {what}")


url = sys.argv[1]


def rest(method, path, body=None):
    request = urllib.request.Request(
        url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request) as reply:
        text = reply.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def schema_id(payload):
    # Confluent's wire format: magic byte, then the id (4 bytes, big-endian).
    check(payload[0] == 0, f"magic byte {payload[0]}")
    return int.from_bytes(payload[1:5], "big")


summary = {}
pool = descriptor_pool.Default()

# --- a .proto text registered by CI, found from the descriptor -------------
text = 'syntax = "proto3";\npackage evolvepy;\n\n// sent by CI\nmessage Ping {\n  int64 id = 1;\n  string note_text = 2;\n}\n'
registered = rest("POST", "/subjects/ping-value/versions", {"schemaType": "PROTOBUF", "schema": text})["id"]
ping_file = descriptor_pb2.FileDescriptorProto(name="evolvepy/ping.proto", package="evolvepy", syntax="proto3")
ping = ping_file.message_type.add(name="Ping")
ping.field.add(name="id", number=1, type=3, label=1)
ping.field.add(name="note_text", number=2, type=9, label=1)
pool.Add(ping_file)
Ping = message_factory.GetMessageClass(pool.FindMessageTypeByName("evolvepy.Ping"))
ctx = SerializationContext("ping", MessageField.VALUE)
for normalize in (False, True):
    serializer = ProtobufSerializer(
        Ping,
        SchemaRegistryClient({"url": url}),
        {"use.deprecated.format": False, "auto.register.schemas": False, "normalize.schemas": normalize},
    )
    got = schema_id(serializer(Ping(id=1, note_text="x"), ctx))
    check(got == registered, f"lookup with normalize={normalize} found id {got}, not {registered}")
serializer = ProtobufSerializer(Ping, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})
got = schema_id(serializer(Ping(id=2), ctx))
check(got == registered, f"auto-registration gave id {got}, not {registered}")
versions = rest("GET", "/subjects/ping-value/versions")
check(versions == [1], f"ping-value versions {versions}")
summary["ping_id"] = registered

# --- Confluent's bundled imports, and a dependency of its own --------------
common = descriptor_pb2.FileDescriptorProto(name="evolvepy/common.proto", package="evolvepy.common", syntax="proto3")
money = common.message_type.add(name="Money")
money.field.add(name="units", number=1, type=3, label=1)
money.field.add(name="currency", number=2, type=9, label=1)
pool.Add(common)
price_file = descriptor_pb2.FileDescriptorProto(
    name="evolvepy/price.proto",
    package="evolvepy",
    syntax="proto3",
    dependency=["confluent/type/decimal.proto", "google/type/date.proto", "evolvepy/common.proto"],
)
price = price_file.message_type.add(name="Price")
price.field.add(name="amount", number=1, type=11, type_name=".confluent.type.Decimal", label=1)
price.field.add(name="day", number=2, type=11, type_name=".google.type.Date", label=1)
price.field.add(name="cash", number=3, type=11, type_name=".evolvepy.common.Money", label=1)
pool.Add(price_file)
Price = message_factory.GetMessageClass(pool.FindMessageTypeByName("evolvepy.Price"))
serializer = ProtobufSerializer(Price, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})
price_id = schema_id(serializer(Price(), SerializationContext("price", MessageField.VALUE)))
served = rest("GET", f"/schemas/ids/{price_id}/schema")
check("message Price {" in served, f"price served as {served!r}")
check('import "confluent/type/decimal.proto";' in served, f"price served as {served!r}")
latest = rest("GET", "/subjects/price-value/versions/latest")
check(
    [r["name"] for r in latest.get("references", [])] == ["evolvepy/common.proto"],
    f"references {latest.get('references')}",
)
dependency = rest("GET", "/subjects/evolvepy%2Fcommon.proto/versions/latest")
check("message Money {" in dependency["schema"], f"dependency stored as {dependency['schema']!r}")
summary["price_id"] = price_id

# --- a producer on a subject ops made READONLY -----------------------------
avsc = json.dumps({"type": "record", "name": "Evt", "fields": [{"name": "id", "type": "long"}]})
admin = SchemaRegistryClient({"url": url})
evt_id = admin.register_schema("evt-value", Schema(avsc, "AVRO"))
admin.update_mode("evt-value", "READONLY")
producer = AvroSerializer(SchemaRegistryClient({"url": url}), avsc)
got = schema_id(producer({"id": 1}, SerializationContext("evt", MessageField.VALUE)))
check(got == evt_id, f"READONLY subject answered id {got}, not {evt_id}")
summary["readonly_id"] = got

summary["new_subject_compatible"] = admin.test_compatibility("brand-new-value", Schema(avsc, "AVRO"))
check(summary["new_subject_compatible"] is True, "test_compatibility on a new subject")

print(json.dumps(summary))
