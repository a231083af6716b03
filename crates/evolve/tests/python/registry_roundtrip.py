"""Drives an evolve registry with Confluent's own Python client.

Usage: registry_roundtrip.py URL [USER PASSWORD [CA_FILE]]

Serializes one message in each format (Avro, JSON Schema, Protobuf with an
imported file) through confluent-kafka's serializers, which register the
schemas, checks the wire format (magic byte 0, 4-byte big-endian id,
Protobuf message indexes), deserializes with the deserializers (which fetch
the writer schema by id), then exercises the client's admin calls. Prints
one JSON object with what it counted; exits non-zero on any mismatch.
"""

import json
import sys

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def check(condition, what):
    if not condition:
        raise SystemExit(f"MISMATCH: {what}")


def wire_id(data):
    check(data[0] == 0, f"magic byte is {data[0]}, not 0")
    return int.from_bytes(data[1:5], "big")


def avro_roundtrip(client, summary):
    schema = json.dumps({
        "type": "record", "name": "Order", "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    })
    ctx = SerializationContext("orders", MessageField.VALUE)
    serializer = AvroSerializer(client, schema)
    value = {"id": 42, "status": "PAID", "note": "fragile"}
    data = serializer(value, ctx)
    schema_id = wire_id(data)
    back = AvroDeserializer(client)(data, ctx)
    check(back == value, f"avro round trip gave {back}")
    registered = client.get_latest_version("orders-value")
    check(registered.schema_id == schema_id, "avro id differs from latest version's id")
    summary["avro_id"] = schema_id

    # Evolution through the client: a compatible v2, an incompatible v3.
    v2 = json.loads(schema)
    v2["fields"].append({"name": "qty", "type": "int", "default": 1})
    check(client.test_compatibility("orders-value", Schema(json.dumps(v2), "AVRO")), "v2 should be compatible")
    v2_id = client.register_schema("orders-value", Schema(json.dumps(v2), "AVRO"))
    # id long -> string: no promotion reads it.
    v3 = json.loads(json.dumps(v2))
    v3["fields"][0]["type"] = "string"
    check(not client.test_compatibility("orders-value", Schema(json.dumps(v3), "AVRO")), "v3 should be incompatible")
    try:
        client.register_schema("orders-value", Schema(json.dumps(v3), "AVRO"))
        check(False, "an incompatible schema was registered")
    except SchemaRegistryError as e:
        summary["incompatible_http_status"] = e.http_status_code
        summary["incompatible_error_code"] = e.error_code
    check(client.get_versions("orders-value") == [1, 2], "versions after v2")
    # A v1 consumer reads v2 data: the deserializer resolves writer v2
    # against the reader it is given.
    data2 = AvroSerializer(client, json.dumps(v2))({"id": 7, "status": "NEW", "note": None, "qty": 3}, ctx)
    check(wire_id(data2) == v2_id, f"v2 wire id {wire_id(data2)} != {v2_id}")
    back2 = AvroDeserializer(client)(data2, ctx)
    check(back2["qty"] == 3, f"v2 round trip gave {back2}")
    summary["avro_versions"] = len(client.get_versions("orders-value"))


def json_roundtrip(client, summary):
    schema = json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Payment", "type": "object",
        "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
        "required": ["id"],
    })
    ctx = SerializationContext("payments", MessageField.VALUE)
    serializer = JSONSerializer(schema, client)
    value = {"id": 9, "amount": 12.5}
    data = serializer(value, ctx)
    schema_id = wire_id(data)
    # No reader schema: the deserializer fetches the writer's by id.
    back = JSONDeserializer(None, schema_registry_client=client)(data, ctx)
    check(back == value, f"json round trip gave {back}")
    got = client.get_schema(schema_id)
    check(got.schema_type == "JSON", f"schema type {got.schema_type}")
    summary["json_id"] = schema_id


def protobuf_classes():
    pool = descriptor_pool.DescriptorPool()
    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop", syntax="proto3")
    m = money.message_type.add(name="Money")
    m.field.add(name="cents", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    m.field.add(name="currency", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3",
                                               dependency=["shop/money.proto"])
    # Two messages: Order is the second, so its message index is [1].
    order.message_type.add(name="Unused").field.add(
        name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    o = order.message_type.add(name="Order")
    o.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    o.field.add(name="total", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                type_name=".shop.Money", label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    o.field.add(name="tags", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    pool.Add(money)
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def protobuf_roundtrip(client, summary):
    Order = protobuf_classes()
    ctx = SerializationContext("invoices", MessageField.VALUE)
    serializer = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    value = Order(id=5, tags=["a", "b"])
    value.total.cents = 1999
    value.total.currency = "EUR"
    data = serializer(value, ctx)
    schema_id = wire_id(data)
    # Message indexes after the id: count 1, index 1 (zigzag: 0x02, 0x02).
    check(data[5:7] == b"\x02\x02", f"message indexes {data[5:7]!r}")
    # With the client, the deserializer also fetches the writer schema
    # (format=serialized) and its references.
    deserializer = ProtobufDeserializer(Order, {"use.deprecated.format": False}, schema_registry_client=client)
    back = deserializer(data, ctx)
    check(back == value, f"protobuf round trip gave {back}")
    latest = client.get_latest_version("invoices-value")
    refs = [(r.name, r.subject, r.version) for r in latest.schema.references]
    check(refs == [("shop/money.proto", "shop/money.proto", 1)], f"references {refs}")
    check(client.get_latest_version("shop/money.proto").version == 1, "referenced subject")
    summary["protobuf_id"] = schema_id
    summary["protobuf_references"] = len(refs)


def admin_calls(client, summary):
    subjects = client.get_subjects()
    check("orders-value" in subjects and "payments-value" in subjects, f"subjects {subjects}")
    client.set_compatibility("payments-value", "FULL")
    check(client.get_compatibility("payments-value") == "FULL", "subject compatibility")
    deleted = client.delete_subject("payments-value")
    check(deleted == [1], f"soft delete returned {deleted}")
    deleted = client.delete_subject("payments-value", permanent=True)
    check(deleted == [1], f"permanent delete returned {deleted}")
    check("payments-value" not in client.get_subjects(), "subject still listed")
    try:
        client.get_latest_version("payments-value")
        check(False, "a deleted subject still has a latest version")
    except SchemaRegistryError as e:
        summary["deleted_subject_error_code"] = e.error_code
    summary["subjects"] = len(client.get_subjects())


def main():
    url = sys.argv[1]
    conf = {"url": url}
    if len(sys.argv) > 3:
        conf["basic.auth.user.info"] = f"{sys.argv[2]}:{sys.argv[3]}"
    if len(sys.argv) > 4:
        conf["ssl.ca.location"] = sys.argv[4]
    client = SchemaRegistryClient(conf)
    summary = {}
    avro_roundtrip(client, summary)
    json_roundtrip(client, summary)
    protobuf_roundtrip(client, summary)
    admin_calls(client, summary)
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
