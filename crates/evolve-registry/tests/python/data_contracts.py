"""Data contracts through Confluent's Python client against an evolve registry.

Usage: data_contracts.py URL

Registers an Avro schema with metadata and a rule set, reads them back by
subject and version, by id and by lookup with fresh clients (no client
cache), registers the same schema with other metadata (a new version and
id) and again unchanged (the same id), then sets a subject's
defaultMetadata and overrideRuleSet and registers a schema they apply to.
Prints one JSON object with what it saw; exits non-zero on any mismatch.
"""

import json
import sys

from confluent_kafka.schema_registry import (
    Metadata,
    MetadataProperties,
    MetadataTags,
    Rule,
    RuleKind,
    RuleMode,
    RuleParams,
    RuleSet,
    Schema,
    SchemaRegistryClient,
    ServerConfig,
)


def check(condition, what):
    if not condition:
        raise SystemExit(f"MISMATCH: {what}")


def rule(name, expr):
    return Rule(
        name=name,
        doc="amounts are positive",
        kind=RuleKind.CONDITION,
        mode=RuleMode.WRITE,
        type="CEL",
        tags=["PII"],
        params=RuleParams({"k": "v"}),
        expr=expr,
        on_success=None,
        on_failure="DLQ",
        disabled=False,
    )


def main(url):
    fresh = lambda: SchemaRegistryClient({"url": url})
    schema = json.dumps({
        "type": "record", "name": "Payment", "namespace": "shop",
        "fields": [{"name": "amount", "type": "double"}, {"name": "ssn", "type": "string"}],
    })
    metadata = Metadata(
        tags=MetadataTags({"Payment.ssn": ["PII"]}),
        properties=MetadataProperties({"owner": "payments", "application.major.version": "1"}),
        sensitive=["ssn"],
    )
    rules = RuleSet(migration_rules=None, domain_rules=[rule("checkAmount", "message.amount > 0")])
    subject = "payments-value"
    schema_id = fresh().register_schema(subject, Schema(schema, "AVRO", metadata=metadata, rule_set=rules))

    latest = fresh().get_latest_version(subject)
    check(latest.schema_id == schema_id, f"latest id {latest.schema_id} != {schema_id}")
    got = latest.schema
    check(got.metadata is not None, "latest version has no metadata")
    check(got.metadata.properties.properties.get("owner") == "payments", f"owner is {got.metadata.properties}")
    check(got.metadata.tags.tags.get("Payment.ssn") == ["PII"], f"tags are {got.metadata.tags}")
    check(list(got.metadata.sensitive) == ["ssn"], f"sensitive is {got.metadata.sensitive}")
    check(got.rule_set is not None and len(got.rule_set.domain_rules) == 1, "latest version has no domain rule")
    r = got.rule_set.domain_rules[0]
    check(r.name == "checkAmount" and r.expr == "message.amount > 0", f"rule is {r}")
    check(r.kind == RuleKind.CONDITION and r.mode == RuleMode.WRITE, f"rule kind/mode are {r.kind}/{r.mode}")
    check(r.on_failure == "DLQ" and r.params.params == {"k": "v"}, f"rule details are {r}")

    by_id = fresh().get_schema(schema_id)
    check(by_id.metadata is not None and by_id.metadata.properties.properties["owner"] == "payments",
          "the schema by id lost its metadata")
    check(by_id.rule_set is not None and by_id.rule_set.domain_rules[0].name == "checkAmount",
          "the schema by id lost its rule set")

    looked_up = fresh().lookup_schema(subject, Schema(schema, "AVRO", metadata=metadata, rule_set=rules))
    check(looked_up.schema_id == schema_id and looked_up.version == 1, f"lookup found {looked_up}")

    # The same schema with the same contract: the same id, no new version.
    again = fresh().register_schema(subject, Schema(schema, "AVRO", metadata=metadata, rule_set=rules))
    check(again == schema_id, f"re-registering gave id {again}, not {schema_id}")
    check(fresh().get_versions(subject) == [1], "re-registering made a version")

    # The same schema with other metadata: a new version with a new id.
    other = Metadata(tags=None, properties=MetadataProperties({"owner": "billing"}), sensitive=None)
    other_id = fresh().register_schema(subject, Schema(schema, "AVRO", metadata=other, rule_set=rules))
    check(other_id != schema_id, "other metadata reused the id")
    check(fresh().get_versions(subject) == [1, 2], "other metadata made no new version")
    v2 = fresh().get_version(subject, 2).schema
    check(v2.metadata.properties.properties == {"owner": "billing"}, f"version 2 metadata is {v2.metadata}")
    # Without a contract in the request, version 2's is kept: nothing new.
    inherited = fresh().register_schema(subject, Schema(schema, "AVRO"))
    check(inherited == other_id, f"a bare re-registration gave id {inherited}, not {other_id}")

    # Defaults and overrides of a subject's config apply on registration.
    configured = "configured-value"
    fresh().set_config(configured, ServerConfig(
        default_metadata=Metadata(tags=None, properties=MetadataProperties({"owner": "default", "tier": "gold"}), sensitive=None),
        override_rule_set=RuleSet(migration_rules=None, domain_rules=[rule("always", "true")]),
    ))
    config = fresh().get_config(configured)
    check(config.default_metadata.properties.properties["tier"] == "gold", f"config is {config}")
    fresh().register_schema(configured, Schema(schema, "AVRO", metadata=Metadata(
        tags=None, properties=MetadataProperties({"owner": "me"}), sensitive=None)))
    stored = fresh().get_latest_version(configured).schema
    check(stored.metadata.properties.properties == {"owner": "me", "tier": "gold"},
          f"defaults merged into {stored.metadata.properties.properties}")
    check([x.name for x in stored.rule_set.domain_rules] == ["always"], "the override rule set was not applied")

    print(json.dumps({
        "id": schema_id,
        "other_id": other_id,
        "owner": got.metadata.properties.properties["owner"],
        "rule": r.name,
        "configured_tier": stored.metadata.properties.properties["tier"],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
