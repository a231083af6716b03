//! Behaviour that Confluent Schema Registry's source defines and clients
//! rely on: the look-up before a registration in any mode, one schema
//! however it is written, Protobuf sent as a descriptor, the imports
//! Confluent bundles, the compatibility endpoints' answers, the 7.4+
//! configuration settings, `GET /schemas`, error codes and pagination.

mod common;

use common::{avro, open_at, registry};
use evolve_registry::http::DEFAULT_MAX_BODY;
use evolve_registry::record::{Value, parse_export};
use evolve_registry::service::Settings;
use evolve_registry::store::{Log, SqliteLog};
use serde_json::json;

fn proto(text: &str) -> serde_json::Value {
    json!({"schemaType": "PROTOBUF", "schema": text})
}

#[tokio::test]
async fn a_locked_subject_answers_a_schema_it_holds() {
    let r = registry("locked").await;
    for mode in ["READONLY", "READONLY_OVERRIDE"] {
        let subject = format!("ro-{mode}");
        let id = r.register(&subject, avro(json!("string"))).await;
        r.ok(
            "PUT",
            &format!("/mode/{subject}"),
            Some(json!({"mode": mode})),
        )
        .await;
        let offset = r.offset();
        // A producer that registers its schema keeps working, whatever the
        // schema's spelling.
        assert_eq!(r.register(&subject, avro(json!("string"))).await, id);
        assert_eq!(
            r.register(&subject, avro(json!({"type": "string"}))).await,
            id
        );
        assert_eq!(r.offset(), offset, "{mode}: a re-registration appended");
        let message = r
            .call(
                "POST",
                &format!("/subjects/{subject}/versions"),
                Some(avro(json!("int"))),
            )
            .await
            .error(422, 42205);
        assert!(message.contains("read-only"), "{message}");
    }
}

#[tokio::test]
async fn import_mode_is_idempotent_and_takes_only_explicit_ids() {
    let r = registry("import").await;
    r.ok("PUT", "/mode/imp", Some(json!({"mode": "IMPORT"})))
        .await;
    let bytes = json!({"schema": "\"bytes\"", "id": 100, "version": 1});
    assert_eq!(r.register("imp", bytes.clone()).await, 100);
    let offset = r.offset();
    // The same import again: the same answer, nothing appended.
    assert_eq!(r.register("imp", bytes).await, 100);
    assert_eq!(r.register("imp", avro(json!("bytes"))).await, 100);
    assert_eq!(r.offset(), offset);
    // A new schema without an id would take an id an import may still
    // need: refused, as Confluent's checkRegisterMode refuses it.
    let message = r
        .call(
            "POST",
            "/subjects/imp/versions",
            Some(avro(json!("boolean"))),
        )
        .await
        .error(422, 42205);
    assert!(message.contains("not in read-write mode"), "{message}");
    assert!(message.contains("\"id\""), "{message}");
    // An id that is another schema's: 42205, as Confluent's
    // checkIfSchemaWithIdExist.
    let message = r
        .call(
            "POST",
            "/subjects/imp/versions",
            Some(json!({"schema": "\"double\"", "id": 100, "version": 2})),
        )
        .await
        .error(422, 42205);
    assert!(message.contains("id 100"), "{message}");
    assert_eq!(r.offset(), offset);
    assert_eq!(
        r.register(
            "imp",
            json!({"schema": "\"double\"", "id": 101, "version": 2})
        )
        .await,
        101
    );
}

#[tokio::test]
async fn an_explicit_version_in_readwrite_must_be_the_next_one() {
    // Confluent 7.4+ (KafkaSchemaRegistry.register): outside IMPORT an
    // explicit version is accepted when it is the subject's next version
    // (soft-deleted versions count), else 422 with 42201 "Version is not
    // one more than previous version", after the compatibility check.
    let r = registry("explicit-version").await;
    let record =
        |fields: serde_json::Value| avro(json!({"type": "record", "name": "R", "fields": fields}));
    let with_version = |body: serde_json::Value, version: u64| {
        let mut body = body;
        body["version"] = json!(version);
        body
    };
    let v1 = record(json!([{"name": "a", "type": "int"}]));
    let message = r
        .call(
            "POST",
            "/subjects/ev/versions",
            Some(with_version(v1.clone(), 2)),
        )
        .await
        .error(422, 42201);
    assert!(
        message.starts_with("Version is not one more than previous version"),
        "{message}"
    );
    assert!(message.contains("\"version\": 1"), "{message}");
    let id1 = r.register("ev", with_version(v1.clone(), 1)).await;

    let v2 = record(json!([{"name": "a", "type": "int"},
                           {"name": "b", "type": "int", "default": 0}]));
    let message = r
        .call(
            "POST",
            "/subjects/ev/versions",
            Some(with_version(v2.clone(), 3)),
        )
        .await
        .error(422, 42201);
    assert!(message.contains("is at version 1"), "{message}");
    assert!(message.contains("\"version\": 2"), "{message}");
    // An incompatible schema is 409 whatever its version, as the check
    // comes first.
    let incompatible = record(json!([{"name": "c", "type": "string"}]));
    r.call(
        "POST",
        "/subjects/ev/versions",
        Some(with_version(incompatible, 7)),
    )
    .await
    .error(409, 409);
    let id2 = r.register("ev", with_version(v2.clone(), 2)).await;
    assert_ne!(id1, id2);
    assert_eq!(
        r.ok("GET", "/subjects/ev/versions", None).await,
        json!([1, 2])
    );

    // With a version the look-up is skipped (Confluent 7.7+): the latest
    // schema sent again as version 3 is a third version. Its metadata is
    // stamped with "confluent:version": "3" (maybeSetMetadataRuleSet), so
    // it is not the schema of id2 (stamped "2"): a new id, as Confluent's
    // MD5 look-up (metadata included) finds none.
    let id3 = r.register("ev", with_version(v2.clone(), 3)).await;
    assert_ne!(id3, id2);
    assert_eq!(
        r.ok("GET", "/subjects/ev/versions/3", None).await["metadata"],
        json!({"properties": {"confluent:version": "3"}})
    );
    assert_eq!(
        r.ok("GET", "/subjects/ev/versions", None).await,
        json!([1, 2, 3])
    );
    // A soft-deleted version still counts.
    r.ok("DELETE", "/subjects/ev/versions/3", None).await;
    r.call(
        "POST",
        "/subjects/ev/versions",
        Some(with_version(v2.clone(), 3)),
    )
    .await
    .error(422, 42201);
    let id4 = r.register("ev", with_version(v2.clone(), 4)).await;
    assert!(![id1, id2, id3].contains(&id4), "{id4}");
    // Without a version, v2 is found whatever its stamp.
    assert_eq!(r.register("ev", v2).await, id4);

    // An explicit id stays IMPORT's.
    let message = r
        .call(
            "POST",
            "/subjects/ev/versions",
            Some(json!({"schema": "\"string\"", "id": 50})),
        )
        .await
        .error(422, 42205);
    assert!(message.contains("not in import mode"), "{message}");
}

#[tokio::test]
async fn an_avro_schema_is_one_schema_however_it_is_written() {
    let r = registry("avro-forms").await;
    let dotted = json!({"type": "record", "name": "com.x.Order",
                        "fields": [{"name": "id", "type": {"type": "long"}}]});
    let namespaced = json!({"type": "record", "name": "Order", "namespace": "com.x",
                            "fields": [{"name": "id", "type": "long"}]});
    let id = r.register("av", avro(dotted.clone())).await;
    for normalize in ["", "?normalize=true"] {
        let found = r
            .ok(
                "POST",
                &format!("/subjects/av{normalize}"),
                Some(avro(namespaced.clone())),
            )
            .await;
        assert_eq!(
            (found["id"].as_u64(), found["version"].as_u64()),
            (Some(id), Some(1))
        );
        assert_eq!(
            r.ok(
                "POST",
                &format!("/subjects/av/versions{normalize}"),
                Some(avro(namespaced.clone()))
            )
            .await["id"],
            id
        );
    }
    assert_eq!(r.ok("GET", "/subjects/av/versions", None).await, json!([1]));
    // The text is kept as first given.
    assert_eq!(
        r.ok("GET", &format!("/schemas/ids/{id}"), None).await["schema"],
        dotted.to_string()
    );
    // Another subject gets the same id; a doc makes another schema.
    assert_eq!(r.register("other", avro(namespaced.clone())).await, id);
    let mut documented = namespaced.clone();
    documented["doc"] = json!("an order");
    assert_ne!(r.register("other", avro(documented)).await, id);
    assert_eq!(
        r.register("prim", avro(json!({"type": "string"}))).await,
        r.register("prim", avro(json!("string"))).await
    );
    // Keys are computed again from the log on restart.
    let path = r.path.clone();
    drop(r);
    let r = common::open_at(
        path,
        evolve_registry::service::Settings::default(),
        evolve_registry::http::DEFAULT_MAX_BODY,
    )
    .await;
    assert_eq!(
        r.ok("POST", "/subjects/av", Some(avro(namespaced))).await["id"],
        id
    );
}

#[tokio::test]
async fn ids_stored_before_keys_were_normalized_stay_apart() {
    // Two ids whose texts are one schema now, as a log written before may
    // hold them: both keep serving, each subject keeps its own, and a new
    // subject gets the id of the text as written.
    let export = [
        (r#"{"keytype":"SCHEMA","subject":"a","version":1,"magic":1}"#,
         r#"{"subject":"a","version":1,"id":1,"schema":"{\"type\":\"string\"}","deleted":false}"#),
        (r#"{"keytype":"SCHEMA","subject":"b","version":1,"magic":1}"#,
         r#"{"subject":"b","version":1,"id":2,"schema":"\"string\"","deleted":false}"#),
    ]
    .iter()
    .map(|(k, v)| format!("{k}\t{v}"))
    .collect::<Vec<_>>()
    .join("\n");
    let r = registry("old-keys").await;
    r.app
        .registry
        .import(parse_export(&export).expect("export"), false)
        .await
        .expect("import");
    let offset = r.offset();
    assert_eq!(r.register("a", avro(json!("string"))).await, 1);
    assert_eq!(r.register("b", avro(json!({"type": "string"}))).await, 2);
    assert_eq!(r.offset(), offset, "a subject's own id was not found");
    assert_eq!(
        r.ok("POST", "/subjects/b", Some(avro(json!({"type": "string"}))))
            .await["id"],
        2
    );
    assert_eq!(r.register("c", avro(json!("string"))).await, 2);
    assert_eq!(r.register("d", avro(json!({"type": "string"}))).await, 1);
    assert_eq!(
        r.ok("GET", "/schemas/ids/1", None).await["schema"],
        r#"{"type":"string"}"#
    );
    assert_eq!(
        r.ok("GET", "/schemas/ids/2", None).await["schema"],
        r#""string""#
    );
}

const PING: &str = "syntax = \"proto3\";\npackage audit2;\n\nmessage Ping {\n  int64 id = 1;\n  string note_text = 2;\n}\n";

/// `PING` as Confluent's Python serializer sends it: the base64 of its
/// `FileDescriptorProto` (no json_name).
const PING_SERIALIZED: &str = "ChFhdWRpdDIvcGluZy5wcm90bxIGYXVkaXQyIiUKBFBpbmcSCgoCaWQYASABKAMSEQoJbm90ZV90ZXh0GAIgASgJYgZwcm90bzM=";

#[tokio::test]
async fn protobuf_layout_does_not_make_another_schema() {
    let r = registry("proto-layout").await;
    let id = r
        .register(
            "pw",
            proto("syntax = \"proto3\";\nmessage M {\n  int32 a = 1;\n}\n"),
        )
        .await;
    let one_line = proto("syntax = \"proto3\"; message M { int32 a = 1; } // same");
    for normalize in ["", "?normalize=true"] {
        let found = r
            .ok(
                "POST",
                &format!("/subjects/pw{normalize}"),
                Some(one_line.clone()),
            )
            .await;
        assert_eq!(found["id"], id);
        assert_eq!(
            r.ok(
                "POST",
                &format!("/subjects/pw/versions{normalize}"),
                Some(one_line.clone())
            )
            .await["id"],
            id
        );
    }
    assert_eq!(r.ok("GET", "/subjects/pw/versions", None).await, json!([1]));
    // A real change is another schema.
    let other = r
        .register(
            "pw",
            proto("syntax = \"proto3\"; message M { int32 a = 1; int32 b = 2; }"),
        )
        .await;
    assert_ne!(other, id);
}

#[tokio::test]
async fn a_protobuf_descriptor_is_the_schema_its_text_is_and_is_stored_as_text() {
    let r = registry("proto-descriptor").await;
    // CI registers the .proto text; the serializer looks up and
    // registers the descriptor.
    let id = r.register("ping-value", proto(PING)).await;
    let found = r
        .ok("POST", "/subjects/ping-value", Some(proto(PING_SERIALIZED)))
        .await;
    assert_eq!(
        (found["id"].as_u64(), found["version"].as_u64()),
        (Some(id), Some(1))
    );
    assert_eq!(r.register("ping-value", proto(PING_SERIALIZED)).await, id);
    assert_eq!(
        r.ok("GET", "/subjects/ping-value/versions", None).await,
        json!([1])
    );

    // Registered first as a descriptor: stored and served as the .proto
    // text rendered from it, as Confluent stores it.
    let fresh = registry("proto-descriptor-first").await;
    let id = fresh.register("ping-value", proto(PING_SERIALIZED)).await;
    let raw = fresh
        .call("GET", &format!("/schemas/ids/{id}/schema"), None)
        .await;
    assert_eq!(raw.text, PING);
    let serialized = fresh
        .ok("GET", &format!("/schemas/ids/{id}?format=serialized"), None)
        .await;
    let again = serialized["schema"].as_str().expect("schema");
    assert!(!again.contains(' '), "{again}");
    assert_eq!(fresh.register("ping-value", proto(again)).await, id);
    assert_eq!(fresh.register("ping-value", proto(PING)).await, id);

    // normalize=true stores the rendered text of a .proto text too.
    let commented =
        "syntax = \"proto3\";\n// a comment\npackage audit3;   message Pong { string s = 1; }";
    let id = fresh
        .ok(
            "POST",
            "/subjects/pong/versions?normalize=true",
            Some(proto(commented)),
        )
        .await["id"]
        .as_u64()
        .expect("id");
    assert_eq!(
        fresh
            .call("GET", &format!("/schemas/ids/{id}/schema"), None)
            .await
            .text,
        "syntax = \"proto3\";\npackage audit3;\n\nmessage Pong {\n  string s = 1;\n}\n"
    );
}

#[tokio::test]
async fn protobuf_records_kept_as_descriptors_read_back_as_text() {
    // A log written before registrations stored the rendered text (or
    // imported from a registry that kept the descriptor): the record
    // holds the base64 descriptor, here in a version and in a later
    // soft-deleted version of the same id.
    let path = common::temp_path("proto-old-records");
    let records = parse_export(&format!(
        "{}\t{}\n{}\t{}\n",
        r#"{"keytype":"SCHEMA","subject":"ping-value","version":1,"magic":1}"#,
        json!({"subject": "ping-value", "version": 1, "id": 1, "schemaType": "PROTOBUF",
               "schema": PING_SERIALIZED, "deleted": false}),
        r#"{"keytype":"SCHEMA","subject":"ping-copy","version":1,"magic":1}"#,
        json!({"subject": "ping-copy", "version": 1, "id": 1, "schemaType": "PROTOBUF",
               "schema": PING_SERIALIZED, "deleted": true}),
    ))
    .expect("export");
    let log = SqliteLog::open(&path).expect("sqlite log");
    assert!(log.append(0, &records).await.expect("append"));
    drop(log);

    // Replayed at start: served as the .proto text, as Confluent serves it.
    let r = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    assert_eq!(
        r.call("GET", "/schemas/ids/1/schema", None).await.text,
        PING
    );
    assert_eq!(r.ok("GET", "/schemas/ids/1", None).await["schema"], PING);
    assert_eq!(
        r.ok("GET", "/subjects/ping-value/versions/1", None).await["schema"],
        PING
    );
    assert_eq!(
        r.ok("GET", "/subjects/ping-copy/versions/1?deleted=true", None)
            .await["schema"],
        PING
    );
    // Still one schema, however it is sent, and the descriptor on request.
    let offset = r.offset();
    assert_eq!(r.register("ping-value", proto(PING_SERIALIZED)).await, 1);
    assert_eq!(r.register("ping-value", proto(PING)).await, 1);
    assert_eq!(r.offset(), offset);
    let serialized = r.ok("GET", "/schemas/ids/1?format=serialized", None).await;
    assert!(
        evolve_compat::protobuf::is_serialized(serialized["schema"].as_str().expect("schema")),
        "{serialized}"
    );
    // A record written for that id (here a soft delete) carries the text.
    r.ok("DELETE", "/subjects/ping-value/versions/1", None)
        .await;
    let log = r.app.registry.log().read_after(offset).await.expect("read");
    let Some(Value::Schema(written)) = &log[0].1.value else {
        panic!("a schema record: {log:?}")
    };
    assert_eq!(written.schema, PING);
}

#[tokio::test]
async fn confluents_bundled_protobuf_imports_need_no_reference() {
    let r = registry("proto-bundled").await;
    r.register(
        "dec-value",
        proto("syntax = \"proto3\";\nimport \"confluent/type/decimal.proto\";\nmessage P { confluent.type.Decimal amount = 1; }\n"),
    )
    .await;
    r.register(
        "date-value",
        proto("syntax = \"proto3\";\nimport \"google/type/date.proto\";\nimport \"google/type/money.proto\";\nimport \"confluent/meta.proto\";\n\
               message P { google.type.Date d = 1 [(confluent.field_meta).tags = \"PII\"]; google.type.Money m = 2; }\n"),
    )
    .await;
    let message = r
        .call(
            "POST",
            "/subjects/x/versions",
            Some(proto("syntax = \"proto3\";\nimport \"google/type/nope.proto\";\nmessage P { int32 a = 1; }\n")),
        )
        .await
        .error(422, 42201);
    assert!(message.contains("google/type/nope.proto"), "{message}");
}

#[tokio::test]
async fn compatibility_checks_answer_as_confluent_does() {
    let r = registry("compat-answers").await;
    // No such subject: nothing to be incompatible with, for latest too.
    for path in [
        "/compatibility/subjects/brand-new/versions/latest",
        "/compatibility/subjects/brand-new/versions",
    ] {
        assert_eq!(
            r.ok("POST", path, Some(avro(json!("int")))).await,
            json!({"is_compatible": true})
        );
    }
    // A version number it does not have: 40402 (Confluent's
    // versionNotFoundException), with or without the subject.
    r.call(
        "POST",
        "/compatibility/subjects/brand-new/versions/3",
        Some(avro(json!("int"))),
    )
    .await
    .error(404, 40402);
    r.register("s", avro(json!("int"))).await;
    r.call(
        "POST",
        "/compatibility/subjects/s/versions/3",
        Some(avro(json!("int"))),
    )
    .await
    .error(404, 40402);
    // An invalid schema with verbose: incompatible, and why.
    let verdict = r
        .ok(
            "POST",
            "/compatibility/subjects/s/versions/latest?verbose=true",
            Some(json!({"schema": "{bad"})),
        )
        .await;
    assert_eq!(verdict["is_compatible"], false);
    let messages = verdict["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{verdict}");
    assert!(
        messages[0]
            .as_str()
            .is_some_and(|m| m.starts_with("Invalid Avro schema")),
        "{verdict}"
    );
    // Without verbose: still 42201.
    r.call(
        "POST",
        "/compatibility/subjects/s/versions/latest",
        Some(json!({"schema": "{bad"})),
    )
    .await
    .error(422, 42201);
}

#[tokio::test]
async fn config_settings_are_stored_echoed_and_applied() {
    let r = registry("config-settings").await;
    // Without a level: accepted.
    assert_eq!(
        r.ok("PUT", "/config/n-value", Some(json!({"normalize": true})))
            .await,
        json!({"normalize": true})
    );
    let all = json!({"compatibility": "FULL", "alias": "target", "validateFields": false,
                     "validateRules": true, "compatibilityGroup": "major"});
    assert_eq!(
        r.ok("PUT", "/config/cfg", Some(all)).await,
        json!({"compatibility": "FULL", "alias": "target", "validateFields": false,
               "validateRules": true, "compatibilityGroup": "major"})
    );
    assert_eq!(
        r.ok("GET", "/config/cfg", None).await,
        json!({"compatibilityLevel": "FULL", "alias": "target", "validateFields": false,
               "validateRules": true, "compatibilityGroup": "major"})
    );
    // Null clears a setting; absent keeps it.
    assert_eq!(
        r.ok("PUT", "/config/cfg", Some(json!({"validateRules": null})))
            .await,
        json!({"compatibility": "FULL", "alias": "target", "validateFields": false,
               "compatibilityGroup": "major"})
    );
    r.call("PUT", "/config/cfg", Some(json!({"normalize": "yes"})))
        .await
        .error(400, 400);

    // normalize in the subject's configuration: stored normalized, as with
    // ?normalize=true.
    let id = r
        .register(
            "n-value",
            avro(json!({"namespace": "a", "name": "R", "type": "record", "fields": []})),
        )
        .await;
    assert_eq!(
        r.ok("GET", &format!("/schemas/ids/{id}"), None).await["schema"],
        r#"{"name":"a.R","type":"record","fields":[]}"#
    );
    // The global one applies where a subject has none; defaultToGlobal
    // shows it.
    r.ok("PUT", "/config", Some(json!({"normalize": true})))
        .await;
    assert_eq!(
        r.ok("GET", "/config/other?defaultToGlobal=true", None)
            .await,
        json!({"compatibilityLevel": "BACKWARD", "normalize": true})
    );
}

#[tokio::test]
async fn validate_fields_refuses_dollar_properties_and_reserved_fields() {
    // Confluent 7.5+: validateFields (in the subject's configuration, or
    // the global one) makes JsonSchema.validate(strict) refuse top-level
    // properties named $$..., and isCompatibleWithPrevious report the
    // fields the metadata's confluent:reserved names.
    let r = registry("validate-fields").await;
    let dollars = json!({"schemaType": "JSON", "schema": json!({
        "type": "object", "properties": {"id": {"type": "integer"}, "$$meta": {"type": "string"}}
    }).to_string()});
    // Off by default: stored as it is.
    r.register("js-off", dollars.clone()).await;
    r.ok("PUT", "/config/js", Some(json!({"validateFields": true})))
        .await;
    for path in [
        "/subjects/js/versions",
        "/compatibility/subjects/js/versions",
    ] {
        let message = r
            .call("POST", path, Some(dollars.clone()))
            .await
            .error(422, 42201);
        assert!(
            message.contains("#/properties/$$meta: Field names cannot start with $$ prefix"),
            "{message}"
        );
        assert!(message.contains("validateFields"), "{message}");
    }
    // Even a schema the subject already holds, as Confluent validates
    // before it looks the schema up.
    r.ok(
        "PUT",
        "/config/js-off",
        Some(json!({"validateFields": true})),
    )
    .await;
    r.call("POST", "/subjects/js-off/versions", Some(dollars.clone()))
        .await
        .error(422, 42201);
    r.call("POST", "/subjects/js-off", Some(dollars.clone()))
        .await
        .error(422, 42201);

    // Avro field names are checked whatever the setting: Avro's own rule.
    let message = r
        .call(
            "POST",
            "/subjects/avro-off/versions",
            Some(avro(json!({"type": "record", "name": "R",
                             "fields": [{"name": "$$meta", "type": "int"}]}))),
        )
        .await
        .error(422, 42201);
    assert!(message.contains("$$meta"), "{message}");

    // Reserved fields, for every schema type.
    r.ok("PUT", "/config", Some(json!({"validateFields": true})))
        .await;
    let reserving = |names: &str| json!({"properties": {"confluent:reserved": names}});
    let record = |fields: serde_json::Value, metadata: serde_json::Value| {
        json!({
            "schema": json!({"type": "record", "name": "User", "fields": fields}).to_string(),
            "metadata": metadata,
        })
    };
    let id = json!({"name": "id", "type": "long"});
    let ssn = json!({"name": "ssn", "type": "string", "default": ""});
    let email = json!({"name": "email", "type": "string", "default": ""});
    r.register("users", record(json!([id]), reserving("ssn, secret")))
        .await;
    // A field the metadata reserves (the latest version's metadata is
    // inherited when the request has none).
    let conflict = json!({"schema": json!({"type": "record", "name": "User",
                                           "fields": [id, ssn]}).to_string()});
    let message = r
        .call("POST", "/subjects/users/versions", Some(conflict.clone()))
        .await
        .error(409, 409);
    assert!(
        message.contains("The new schema has field that conflicts with the reserved field ssn."),
        "{message}"
    );
    assert!(
        message.ends_with("{validateFields: 'true', compatibility: 'BACKWARD'}]"),
        "{message}"
    );
    let verdict = r
        .ok(
            "POST",
            "/compatibility/subjects/users/versions/latest?verbose=true",
            Some(conflict),
        )
        .await;
    assert_eq!(
        verdict,
        json!({"is_compatible": false, "messages": [
            "The new schema has field that conflicts with the reserved field ssn.",
            "{validateFields: 'true', compatibility: 'BACKWARD'}",
        ]})
    );
    // A reserved name dropped from the metadata.
    let message = r
        .call(
            "POST",
            "/subjects/users/versions",
            Some(record(json!([id, email]), reserving("ssn"))),
        )
        .await
        .error(409, 409);
    assert!(
        message.contains("The new schema has reserved field secret removed from its metadata which is present in the old schema's metadata."),
        "{message}"
    );
    // Keeping the reservations and the reserved names out is fine.
    r.register("users", record(json!([id, email]), reserving("secret,ssn")))
        .await;

    // JSON Schema's top-level properties and Protobuf's top-level message
    // fields are fields too.
    let json_ssn = json!({"schemaType": "JSON", "metadata": reserving("ssn"),
        "schema": json!({"type": "object", "properties": {"ssn": {"type": "string"}}}).to_string()});
    r.call("POST", "/subjects/json-users/versions", Some(json_ssn))
        .await
        .error(409, 409);
    let proto_ssn = json!({"schemaType": "PROTOBUF", "metadata": reserving("ssn"),
        "schema": "syntax = \"proto3\";\nmessage User {\n  int64 id = 1;\n  string ssn = 2;\n}\n"});
    r.call(
        "POST",
        "/subjects/proto-users/versions",
        Some(proto_ssn.clone()),
    )
    .await
    .error(409, 409);
    // Off again: no check.
    r.ok("PUT", "/config", Some(json!({"validateFields": false})))
        .await;
    r.register("proto-users", proto_ssn).await;
}

#[tokio::test]
async fn an_alias_reads_and_writes_the_subject_it_names() {
    let r = registry("alias").await;
    let id = r.register("orders-value", avro(json!("string"))).await;
    r.ok(
        "PUT",
        "/config/orders",
        Some(json!({"alias": "orders-value"})),
    )
    .await;
    let latest = r.ok("GET", "/subjects/orders/versions/latest", None).await;
    assert_eq!(
        (latest["subject"].as_str(), latest["id"].as_u64()),
        (Some("orders-value"), Some(id))
    );
    assert_eq!(
        r.ok("POST", "/subjects/orders", Some(avro(json!("string"))))
            .await["id"],
        id
    );
    assert_eq!(
        r.register("orders", avro(json!(["null", "string"]))).await,
        id + 1
    );
    assert_eq!(
        r.ok("GET", "/subjects/orders-value/versions", None).await,
        json!([1, 2])
    );
    assert_eq!(
        r.ok("GET", &format!("/schemas/ids/{id}?subject=orders"), None)
            .await["schema"],
        "\"string\""
    );
    // The configuration itself is the alias's own.
    assert_eq!(
        r.ok("GET", "/config/orders", None).await,
        json!({"alias": "orders-value"})
    );
    // An alias is qualified within its subject's context.
    let team = r.register(":.team:money", avro(json!("long"))).await;
    r.ok(
        "PUT",
        "/config/:.team:cash",
        Some(json!({"alias": "money"})),
    )
    .await;
    assert_eq!(
        r.ok("GET", "/subjects/:.team:cash/versions/1", None).await["id"],
        team
    );
    assert_eq!(
        r.ok("GET", "/contexts/.team/subjects/cash/versions/1", None)
            .await["subject"],
        ":.team:money"
    );
}

#[tokio::test]
async fn compatibility_groups_check_only_versions_of_the_same_group() {
    let r = registry("groups").await;
    r.ok(
        "PUT",
        "/config/g",
        Some(json!({"compatibility": "BACKWARD", "compatibilityGroup": "major"})),
    )
    .await;
    let with_major = |schema: serde_json::Value, major: &str| json!({"schema": schema.to_string(), "metadata": {"properties": {"major": major}}});
    r.register("g", with_major(json!("int"), "1")).await;
    // Incompatible with version 1, but another group.
    r.register("g", with_major(json!("string"), "2")).await;
    // The same group is still checked.
    r.call(
        "POST",
        "/subjects/g/versions",
        Some(with_major(json!("boolean"), "2")),
    )
    .await
    .error(409, 409);
    assert_eq!(
        r.ok(
            "POST",
            "/compatibility/subjects/g/versions/latest",
            Some(with_major(json!("boolean"), "3"))
        )
        .await,
        json!({"is_compatible": true})
    );
}

#[tokio::test]
async fn schemas_are_listed_with_prefix_latest_only_deleted_and_pages() {
    let r = registry("list-schemas").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    r.register("ro-a", avro(json!("int"))).await;
    r.register("ro-a", avro(json!("long"))).await;
    r.register("ro-b", avro(json!("string"))).await;
    r.register("other", avro(json!("bytes"))).await;
    r.ok("DELETE", "/subjects/ro-a/versions/1", None).await;
    let listed = |body: serde_json::Value| -> Vec<(String, u64)> {
        body.as_array()
            .expect("array")
            .iter()
            .map(|s| {
                (
                    s["subject"].as_str().expect("subject").to_owned(),
                    s["version"].as_u64().expect("version"),
                )
            })
            .collect()
    };
    let pairs = |items: &[(&str, u64)]| -> Vec<(String, u64)> {
        items.iter().map(|(s, v)| (s.to_string(), *v)).collect()
    };
    let mut all = r.ok("GET", "/schemas", None).await;
    assert_eq!(
        listed(all.clone()),
        pairs(&[("other", 1), ("ro-a", 2), ("ro-b", 1)])
    );
    // Confluent 8.x's registration time (see
    // `registered_versions_carry_their_registration_time`).
    let ts = all[1].as_object_mut().and_then(|o| o.remove("ts"));
    assert!(ts.is_some_and(|ts| ts.is_i64()), "{all}");
    assert_eq!(
        all[1],
        // Confluent 8.x's guid (the MD5 of the schema, as a UUID) and
        // `deleted`.
        json!({"subject": "ro-a", "version": 2, "id": 2, "schema": "\"long\"",
               "guid": "e1dd9a1e-f98b-451b-5369-0370b393966b", "deleted": false})
    );
    assert_eq!(
        listed(
            r.ok("GET", "/schemas?subjectPrefix=ro&deleted=true", None)
                .await
        ),
        pairs(&[("ro-a", 1), ("ro-a", 2), ("ro-b", 1)])
    );
    assert_eq!(
        listed(
            r.ok("GET", "/schemas?subjectPrefix=ro&latestOnly=true", None)
                .await
        ),
        pairs(&[("ro-a", 2), ("ro-b", 1)])
    );
    assert_eq!(
        listed(r.ok("GET", "/schemas?offset=1&limit=1", None).await),
        pairs(&[("ro-a", 2)])
    );
    r.call("GET", "/schemas?limit=many", None)
        .await
        .error(404, 404);
}

#[tokio::test]
async fn parameters_that_are_not_numbers_answer_as_jersey_does() {
    // Confluent declares ids, offsets and limits as Java ints: JAX-RS
    // answers one it cannot convert with 404 / error_code 404 ("HTTP 404
    // Not Found") before the resource runs. Versions are Strings that
    // Confluent's VersionId reads: 422 / 42202 for anything but an int or
    // "latest" (RestApiTest.testCompatibilityInvalidVersion).
    let r = registry("not-numbers").await;
    let id = r.register("s", avro(json!("int"))).await;
    assert_eq!(id, 1);
    for path in [
        "/schemas/ids/abc",
        "/schemas/ids/abc/schema",
        "/schemas/ids/abc/subjects",
        "/schemas/ids/abc/versions",
        // Past a Java int (a u32 would take it).
        "/schemas/ids/4294967295",
        "/schemas/ids/%201",
        "/subjects?limit=abc",
        "/subjects?offset=x",
        "/subjects?limit=%205",
        "/subjects/s/versions?limit=1.5",
        "/schemas?offset=one",
        "/schemas/ids/1/subjects?limit=abc",
        "/schemas/ids/1/versions?offset=abc",
        "/subjects/s/versions/1/referencedby?limit=abc",
        "/contexts?limit=abc",
        "/subjects?limit=2147483648",
    ] {
        let message = r.call("GET", path, None).await.error(404, 404);
        assert!(
            message.starts_with("HTTP 404 Not Found"),
            "{path}: {message}"
        );
    }
    // Ints that name no schema are the resource's 40403.
    for (path, named) in [("/schemas/ids/0", "0"), ("/schemas/ids/-3", "-3")] {
        let message = r.call("GET", path, None).await.error(404, 40403);
        assert_eq!(message, format!("Schema {named} not found"));
    }
    // What Java's Integer.valueOf and VersionId take.
    assert_eq!(
        r.ok("GET", "/schemas/ids/+1", None).await["schema"],
        "\"int\""
    );
    for version in ["LATEST", "Latest", "+1", "%201%20", "-1", "%20latest"] {
        let got = r
            .ok("GET", &format!("/subjects/s/versions/{version}"), None)
            .await;
        assert_eq!(got["version"], 1, "{version}");
    }
    // An empty parameter is the default.
    assert_eq!(
        r.ok("GET", "/subjects?limit=&offset=", None).await,
        json!(["s"])
    );
    for (version, named) in [
        ("abc", "abc"),
        ("-02", "-2"),
        ("0", "0"),
        ("2147483648", "2147483648"),
    ] {
        let message = r
            .call("GET", &format!("/subjects/s/versions/{version}"), None)
            .await
            .error(422, 42202);
        assert!(
            message.contains(&format!("'{named}'")),
            "{version}: {message}"
        );
    }
    r.call(
        "POST",
        "/compatibility/subjects/s/versions/earliest",
        Some(avro(json!("int"))),
    )
    .await
    .error(422, 42202);
    // The id routes and contexts page as Confluent's do.
    r.register("t", avro(json!("int"))).await;
    assert_eq!(
        r.ok("GET", "/schemas/ids/1/subjects?offset=1", None).await,
        json!(["t"])
    );
    assert_eq!(
        r.ok("GET", "/schemas/ids/1/versions?limit=1", None).await,
        json!([{"subject": "s", "version": 1}])
    );
    r.register(":.team:u", avro(json!("int"))).await;
    assert_eq!(r.ok("GET", "/contexts", None).await, json!([".", ".team"]));
    assert_eq!(
        r.ok("GET", "/contexts?contextPrefix=.t", None).await,
        json!([".team"])
    );
    assert_eq!(
        r.ok("GET", "/contexts?offset=1&limit=1", None).await,
        json!([".team"])
    );
}

#[tokio::test]
async fn schemas_take_confluents_association_filters() {
    // Confluent 8.x SchemasResource.getSchemas: resourceType,
    // associationType and lifecycle filter by associations; a subject
    // without associations (evolve keeps none) is listed only for
    // lifecycle=NONE. format is not a parameter of /schemas.
    let r = registry("schemas-assoc").await;
    r.register("a", avro(json!("int"))).await;
    r.register(
        "p",
        proto("syntax = \"proto3\";\nmessage M { int32 x = 1; }\n"),
    )
    .await;
    let subjects = |v: serde_json::Value| -> Vec<String> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|s| s["subject"].as_str().expect("subject").to_owned())
            .collect()
    };
    assert_eq!(subjects(r.ok("GET", "/schemas", None).await), ["a", "p"]);
    for query in [
        "resourceType=topic",
        "associationType=value",
        "lifecycle=STRONG",
        "lifecycle=WEAK&lifecycle=STRONG",
        "resourceType=",
    ] {
        assert_eq!(
            r.ok("GET", &format!("/schemas?{query}"), None).await,
            json!([]),
            "{query}"
        );
    }
    for query in [
        "lifecycle=NONE",
        "lifecycle=STRONG&lifecycle=NONE&resourceType=topic",
    ] {
        assert_eq!(
            subjects(r.ok("GET", &format!("/schemas?{query}"), None).await),
            ["a", "p"],
            "{query}"
        );
    }
    let message = r
        .call("GET", "/schemas?lifecycle=none", None)
        .await
        .error(404, 404);
    assert!(message.contains("lifecycle"), "{message}");
    let listed = r.ok("GET", "/schemas?format=serialized", None).await;
    assert!(
        listed[1]["schema"]
            .as_str()
            .expect("schema")
            .contains("message M"),
        "{listed}"
    );
}

#[tokio::test]
async fn schemas_are_listed_with_the_subjects_aliases_name() {
    // Confluent 7.6+ (allVersionsIncludingAliasesWithSubjectPrefix): with
    // aliases=true, the configurations that subjectPrefix selects and that
    // have an alias add the subject each alias names, and every version of
    // such a subject lists the subjects that alias it.
    let r = registry("list-aliases").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    r.register("orders-value", avro(json!("int"))).await;
    r.register("orders-value", avro(json!("long"))).await;
    r.register("payments-value", avro(json!("string"))).await;
    r.register(":.team:money", avro(json!("bytes"))).await;
    for (subject, alias) in [
        ("orders", "orders-value"),
        ("ordering", "orders-value"),
        ("alias-of-pay", "payments-value"),
        (":.team:cash", "money"),
    ] {
        r.ok(
            "PUT",
            &format!("/config/{subject}"),
            Some(json!({"alias": alias})),
        )
        .await;
    }
    let listed = |body: serde_json::Value| -> Vec<(String, u64, serde_json::Value)> {
        body.as_array()
            .expect("array")
            .iter()
            .map(|s| {
                (
                    s["subject"].as_str().expect("subject").to_owned(),
                    s["version"].as_u64().expect("version"),
                    s.get("aliases").cloned().unwrap_or(json!(null)),
                )
            })
            .collect()
    };
    let row = |subject: &str, version: u64, aliases: serde_json::Value| {
        (subject.to_owned(), version, aliases)
    };
    assert_eq!(
        listed(
            r.ok("GET", "/schemas?subjectPrefix=orders&aliases=true", None)
                .await
        ),
        vec![
            row("orders-value", 1, json!(["orders"])),
            row("orders-value", 2, json!(["orders"])),
        ]
    );
    // Both aliases when the prefix selects both configurations.
    let both = r
        .ok(
            "GET",
            "/schemas?subjectPrefix=ord&aliases=true&latestOnly=true",
            None,
        )
        .await;
    assert_eq!(
        listed(both.clone()),
        vec![row("orders-value", 2, json!(["ordering", "orders"]))]
    );
    assert_eq!(both[0]["schema"], "\"long\"");
    // A subject the prefix does not select is listed for its alias.
    assert_eq!(
        listed(
            r.ok("GET", "/schemas?subjectPrefix=alias&aliases=true", None)
                .await
        ),
        vec![row("payments-value", 1, json!(["alias-of-pay"]))]
    );
    assert_eq!(
        r.ok("GET", "/schemas?subjectPrefix=alias", None).await,
        json!([])
    );
    // Without the parameter, no aliases.
    assert_eq!(
        listed(r.ok("GET", "/schemas?subjectPrefix=orders", None).await),
        vec![
            row("orders-value", 1, json!(null)),
            row("orders-value", 2, json!(null)),
        ]
    );
    // An alias is qualified in its subject's context.
    assert_eq!(
        listed(
            r.ok("GET", "/schemas?subjectPrefix=:.team:&aliases=true", None)
                .await
        ),
        vec![row(":.team:money", 1, json!([":.team:cash"]))]
    );
    // An empty prefix is no prefix: every context, as Confluent's default.
    assert_eq!(
        listed(
            r.ok("GET", "/schemas?subjectPrefix=&aliases=true", None)
                .await
        ),
        vec![
            row(":.team:money", 1, json!([":.team:cash"])),
            row("orders-value", 1, json!(["ordering", "orders"])),
            row("orders-value", 2, json!(["ordering", "orders"])),
            row("payments-value", 1, json!(["alias-of-pay"])),
        ]
    );
    assert_eq!(
        r.ok("GET", "/subjects?subjectPrefix=", None).await,
        json!([":.team:money", "orders-value", "payments-value"])
    );
}

#[tokio::test]
async fn subjects_and_versions_are_paged() {
    let r = registry("pages").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    for subject in ["a", "b", "c"] {
        r.register(subject, avro(json!("int"))).await;
    }
    r.register("a", avro(json!("long"))).await;
    r.register("a", avro(json!("string"))).await;
    assert_eq!(
        r.ok("GET", "/subjects?limit=2", None).await,
        json!(["a", "b"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?offset=1&limit=1", None).await,
        json!(["b"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?offset=2&limit=0", None).await,
        json!(["c"])
    );
    assert_eq!(
        r.ok("GET", "/subjects/a/versions?offset=1&limit=1", None)
            .await,
        json!([2])
    );
    assert_eq!(
        r.ok("GET", "/subjects/a/versions?offset=1", None).await,
        json!([2, 3])
    );
}

#[tokio::test]
async fn deleting_a_setting_a_subject_does_not_have_is_40401() {
    let r = registry("delete-none").await;
    r.register("s", avro(json!("int"))).await;
    let message = r.call("DELETE", "/config/s", None).await.error(404, 40401);
    assert!(message.contains("defaultToGlobal"), "{message}");
    r.call("DELETE", "/mode/s", None).await.error(404, 40401);
    r.call("DELETE", "/mode/nobody", None)
        .await
        .error(404, 40401);
    // Reads of an unset subject setting keep their own codes.
    r.call("GET", "/config/s", None).await.error(404, 40408);
    r.call("GET", "/mode/s", None).await.error(404, 40409);
    // The deleted configuration is answered whole.
    r.ok(
        "PUT",
        "/config/s",
        Some(json!({"compatibility": "FULL", "normalize": true})),
    )
    .await;
    assert_eq!(
        r.ok("DELETE", "/config/s", None).await,
        json!({"compatibilityLevel": "FULL", "normalize": true})
    );
}

#[tokio::test]
async fn schemas_nested_past_the_parsers_limit_are_refused_in_words() {
    let r = registry("deep").await;
    let mut avro_text = "\"int\"".to_owned();
    for i in 0..50 {
        avro_text = format!(
            r#"{{"type":"record","name":"R{i}","fields":[{{"name":"f","type":{avro_text}}}]}}"#
        );
    }
    let mut json_text = "{}".to_owned();
    for _ in 0..70 {
        json_text = format!(r#"{{"type":"object","properties":{{"a":{json_text}}}}}"#);
    }
    for body in [
        json!({"schema": avro_text}),
        json!({"schema": json_text, "schemaType": "JSON"}),
    ] {
        let message = r
            .call("POST", "/subjects/deep/versions", Some(body))
            .await
            .error(422, 42201);
        assert!(
            message.contains("nested deeper than 128 levels"),
            "{message}"
        );
        assert!(!message.contains("recursion limit"), "{message}");
    }
}

#[tokio::test]
async fn confluent_python_client_finds_protobuf_by_descriptor_and_produces_on_a_locked_subject() {
    let served = common::serve_tcp("python-protobuf").await;
    let summary = common::python_client("protobuf_and_modes.py", &[&served.url]).await;
    assert_eq!(summary["new_subject_compatible"], true);
    assert_eq!(
        served
            .registry
            .ok("GET", "/subjects/ping-value/versions", None)
            .await,
        json!([1])
    );
    assert_eq!(
        served.registry.ok("GET", "/mode/evt-value", None).await["mode"],
        "READONLY"
    );
}

#[test]
fn alias_paths_replace_the_subject_segment_and_parameter() {
    use evolve_registry::http::alias_path;
    let alias = |s: &str| match s {
        "orders" => Some("orders-value".to_owned()),
        ":.team:cash" => Some(":.team:money".to_owned()),
        _ => None,
    };
    assert_eq!(
        alias_path("/subjects/orders/versions/latest", None, alias).as_deref(),
        Some("/subjects/orders-value/versions/latest")
    );
    assert_eq!(
        alias_path(
            "/compatibility/subjects/orders/versions",
            Some("verbose=true"),
            alias
        )
        .as_deref(),
        Some("/compatibility/subjects/orders-value/versions?verbose=true")
    );
    assert_eq!(
        alias_path("/subjects/%3A.team%3Acash", None, alias).as_deref(),
        Some("/subjects/%3A.team%3Amoney")
    );
    assert_eq!(
        alias_path(
            "/schemas/ids/3",
            Some("subject=orders&format=serialized"),
            alias
        )
        .as_deref(),
        Some("/schemas/ids/3?subject=orders-value&format=serialized")
    );
    assert_eq!(alias_path("/subjects/other/versions", None, alias), None);
    assert_eq!(alias_path("/config/orders", None, alias), None);
    assert_eq!(
        alias_path("/subjects", Some("subjectPrefix=orders"), alias),
        None
    );
}

#[tokio::test]
async fn confluent_version_is_stamped_and_ignored_by_lookups() {
    // Confluent 7.4+ (AbstractSchemaRegistry.maybeSetMetadataRuleSet): a
    // registration that gives a version, or whose metadata (the request's,
    // else the latest version's) has confluent:version, stores the new
    // version in that property; look-ups (ParsedSchema.canLookup) do not
    // count the property when only one side has it.
    let r = registry("confluent-version").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    let r = &r;
    let metadata = |subject: &str, version: u32| {
        let path = format!("/subjects/{subject}/versions/{version}");
        async move { r.ok("GET", &path, None).await["metadata"].clone() }
    };
    let stamp = |v: &str| json!({"properties": {"confluent:version": v}});
    let int = avro(json!("int"));
    let mut first = int.clone();
    first["version"] = json!(1);
    let id1 = r.register("s", first).await;
    assert_eq!(metadata("s", 1).await, stamp("1"));
    // The same schema without version or metadata is the version stamped.
    let offset = r.offset();
    assert_eq!(r.register("s", int.clone()).await, id1);
    assert_eq!(r.offset(), offset, "a re-registration appended");
    // A new schema inherits the stamp, restamped with its version.
    let id2 = r.register("s", avro(json!("long"))).await;
    assert_ne!(id2, id1);
    assert_eq!(metadata("s", 2).await, stamp("2"));
    // The first schema again is still version 1 (the latest's stamp, 2,
    // does not make it another schema).
    assert_eq!(r.register("s", int.clone()).await, id1);
    assert_eq!(r.offset(), offset + 1);
    // Look-ups: without the property, the version is found; with it, only
    // the version of that number.
    let found = r.ok("POST", "/subjects/s", Some(int.clone())).await;
    assert_eq!(
        (found["version"].clone(), found["id"].clone()),
        (json!(1), json!(id1))
    );
    let mut with = int.clone();
    with["metadata"] = stamp("1");
    assert_eq!(
        r.ok("POST", "/subjects/s", Some(with.clone())).await["version"],
        1
    );
    with["metadata"] = stamp("2");
    r.call("POST", "/subjects/s", Some(with))
        .await
        .error(404, 40403);

    // A subject never stamped: no property is added, and a look-up that
    // names the version it finds matches.
    r.register("plain", int.clone()).await;
    assert_eq!(metadata("plain", 1).await, json!(null));
    let mut named = int.clone();
    named["metadata"] = stamp("1");
    assert_eq!(
        r.ok("POST", "/subjects/plain", Some(named.clone())).await["version"],
        1
    );
    named["metadata"] = stamp("3");
    r.call("POST", "/subjects/plain", Some(named))
        .await
        .error(404, 40403);
    // Other metadata without the property is stored as given.
    let mut owned = avro(json!("string"));
    owned["metadata"] = json!({"properties": {"owner": "x"}});
    r.register("plain", owned).await;
    assert_eq!(
        metadata("plain", 2).await,
        json!({"properties": {"owner": "x"}})
    );

    // IMPORT takes the schema as sent: no stamp.
    r.ok("PUT", "/mode/imp", Some(json!({"mode": "IMPORT"})))
        .await;
    r.register(
        "imp",
        json!({"schema": "\"bytes\"", "id": 500, "version": 1}),
    )
    .await;
    assert_eq!(metadata("imp", 1).await, json!(null));
}

#[tokio::test]
async fn json_schema_patterns_java_refuses_are_refused_and_others_kept() {
    // Confluent compiles every pattern with java.util.regex while the
    // schema loads (Everit's JavaUtilRegexpFactory): a PatternSyntaxException
    // is 42201. Patterns Java takes are registered, even those evolve's
    // own matcher cannot run (lookaround, backreferences).
    let r = registry("json-patterns").await;
    let json_schema =
        |schema: serde_json::Value| json!({"schemaType": "JSON", "schema": schema.to_string()});
    for (schema, pattern, at) in [
        (
            json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2,1}$"}}}),
            "^[A-Z]{2,1}$",
            "#/properties/code/pattern",
        ),
        (
            json!({"type": "object", "patternProperties": {"x(": {"type": "string"}}}),
            "x(",
            "#/patternProperties/x(",
        ),
    ] {
        let message = r
            .call("POST", "/subjects/p/versions", Some(json_schema(schema)))
            .await
            .error(422, 42201);
        assert!(message.contains(&format!("{pattern:?}")), "{message}");
        assert!(message.contains(at), "{message}");
        assert!(message.contains("java.util.regex"), "{message}");
    }
    let password = json!({"type": "object", "properties": {
        "password": {"type": "string", "pattern": "^(?=.*\\d)(?=.*[a-z]).{8,}$"},
        "twice": {"type": "string", "pattern": "^(a+)\\1$"},
        "letters": {"type": "string", "pattern": "^\\p{L}+$"}
    }});
    r.register("p", json_schema(password)).await;
}

#[tokio::test]
async fn json_schemas_stored_with_patterns_java_refuses_keep_working() {
    // A log an earlier release wrote, before patterns Java refuses were
    // refused: the JSON Schema of legacy-value (id 1) has one. What is
    // stored is read as it was; only schemas stored anew are checked.
    let path = common::temp_path("json-patterns-stored");
    let legacy = json!({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2,1}$"},
        "n": {"type": "integer"}
    }});
    let records = parse_export(&format!(
        "{}\t{}\n",
        r#"{"keytype":"SCHEMA","subject":"legacy-value","version":1,"magic":1}"#,
        json!({"subject": "legacy-value", "version": 1, "id": 1, "schemaType": "JSON",
               "schema": legacy.to_string(), "deleted": false}),
    ))
    .expect("export");
    let log = SqliteLog::open(&path).expect("sqlite log");
    assert!(log.append(0, &records).await.expect("append"));
    drop(log);
    let r = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    let json_schema =
        |schema: &serde_json::Value| json!({"schemaType": "JSON", "schema": schema.to_string()});
    // The same schema written another way (pretty-printed, keys moved).
    let legacy_again = json!({"schemaType": "JSON", "schema": serde_json::to_string_pretty(
        &json!({"properties": {
            "n": {"type": "integer"},
            "code": {"pattern": "^[A-Z]{2,1}$", "type": "string"}
        }, "type": "object"})
    ).expect("text")});

    // Served, found, re-registered and checked as before.
    assert_eq!(
        r.ok("GET", "/subjects/legacy-value/versions/1", None).await["schema"],
        legacy.to_string()
    );
    let found = r
        .ok("POST", "/subjects/legacy-value", Some(legacy_again.clone()))
        .await;
    assert_eq!(
        (found["id"].clone(), found["version"].clone()),
        (json!(1), json!(1))
    );
    let offset = r.offset();
    assert_eq!(r.register("legacy-value", json_schema(&legacy)).await, 1);
    assert_eq!(r.register("legacy-value", legacy_again.clone()).await, 1);
    assert_eq!(r.offset(), offset, "a re-registration appended");
    assert_eq!(
        r.ok(
            "POST",
            "/compatibility/subjects/legacy-value/versions/latest",
            Some(legacy_again.clone())
        )
        .await,
        json!({"is_compatible": true})
    );
    // The same schema under another subject is the stored one.
    assert_eq!(r.register("legacy-copy", legacy_again).await, 1);

    // A new version, checked against the stored one (BACKWARD): the
    // pattern dropped, which relaxes it.
    let fixed = json!({"type": "object", "properties": {
        "code": {"type": "string"},
        "n": {"type": "integer"}
    }});
    assert_eq!(
        r.ok(
            "POST",
            "/compatibility/subjects/legacy-value/versions/latest",
            Some(json_schema(&fixed))
        )
        .await,
        json!({"is_compatible": true})
    );
    let id2 = r.register("legacy-value", json_schema(&fixed)).await;
    assert_ne!(id2, 1);
    assert_eq!(
        r.ok("GET", "/subjects/legacy-value/versions", None).await,
        json!([1, 2])
    );
    // A schema referencing the stored one is checked on its own patterns.
    let referring = json!({"schemaType": "JSON", "schema": r#"{"$ref":"legacy.json"}"#,
        "references": [{"name": "legacy.json", "subject": "legacy-value", "version": 1}]});
    r.register("referring-value", referring).await;

    // A schema not stored yet with a pattern Java refuses is refused
    // (42201) by registration, the compatibility check and the look-up,
    // the old pattern kept in a new version included.
    let kept = json!({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2,1}$"},
        "n": {"type": "integer"},
        "m": {"type": "integer"}
    }});
    for (method, path) in [
        ("POST", "/subjects/legacy-value/versions"),
        ("POST", "/subjects/fresh-value/versions"),
        (
            "POST",
            "/compatibility/subjects/legacy-value/versions/latest",
        ),
        ("POST", "/subjects/legacy-value"),
    ] {
        let message = r
            .call(method, path, Some(json_schema(&kept)))
            .await
            .error(422, 42201);
        assert!(message.contains("\"^[A-Z]{2,1}$\""), "{path}: {message}");
        assert!(
            message.contains("#/properties/code/pattern"),
            "{path}: {message}"
        );
    }
    assert_eq!(
        r.ok("GET", "/subjects/legacy-value/versions", None).await,
        json!([1, 2])
    );
}

#[tokio::test]
async fn versions_are_listed_deleted_only_or_deleted_as_negative() {
    // Confluent 7.x/8.x `listVersions`: `deletedOnly` lists the soft-deleted
    // versions only (over `deleted`), `deletedAsNegative` every version,
    // the soft-deleted ones negated (over both).
    let r = registry("versions-deleted").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    for schema in ["int", "long", "string"] {
        r.register("dv", avro(json!(schema))).await;
    }
    r.ok("DELETE", "/subjects/dv/versions/2", None).await;
    for (query, expected) in [
        ("", json!([1, 3])),
        ("?deleted=true", json!([1, 2, 3])),
        ("?deletedOnly=true", json!([2])),
        ("?deleted=true&deletedOnly=true", json!([2])),
        ("?deletedAsNegative=true", json!([1, -2, 3])),
        (
            "?deletedAsNegative=true&deletedOnly=true",
            json!([1, -2, 3]),
        ),
        ("?deletedAsNegative=true&offset=1&limit=1", json!([-2])),
    ] {
        assert_eq!(
            r.ok("GET", &format!("/subjects/dv/versions{query}"), None)
                .await,
            expected,
            "{query}"
        );
    }
    // A subject whose versions are all soft-deleted exists for `deleted`
    // and `deletedOnly` (`hasSubjects(subject, deleted || deletedOnly)`),
    // not for `deletedAsNegative` alone.
    r.ok("DELETE", "/subjects/dv", None).await;
    assert_eq!(
        r.ok("GET", "/subjects/dv/versions?deletedOnly=true", None)
            .await,
        json!([1, 2, 3])
    );
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/dv/versions?deletedAsNegative=true&deleted=true",
            None
        )
        .await,
        json!([-1, -2, -3])
    );
    r.call("GET", "/subjects/dv/versions?deletedAsNegative=true", None)
        .await
        .error(404, 40401);
}

#[tokio::test]
async fn referencedby_finds_soft_deleted_versions_and_takes_deleted() {
    // Confluent's `getReferencedBy` finds the version with soft-deleted
    // versions included, and `deleted` adds referrers whose versions are
    // all soft-deleted.
    let r = registry("referencedby-deleted").await;
    let money = json!({"type": "record", "name": "Money", "namespace": "shop",
                       "fields": [{"name": "cents", "type": "long"}]});
    r.register("money", avro(money)).await;
    let order = json!({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [{"name": "total", "type": "shop.Money"}]});
    let id = r
        .register(
            "orders",
            json!({"schema": order.to_string(),
                   "references": [{"name": "shop.Money", "subject": "money", "version": 1}]}),
        )
        .await;
    assert_eq!(
        r.ok("GET", "/subjects/money/versions/1/referencedby", None)
            .await,
        json!([id])
    );
    r.ok("DELETE", "/subjects/orders/versions/1", None).await;
    assert_eq!(
        r.ok("GET", "/subjects/money/versions/1/referencedby", None)
            .await,
        json!([])
    );
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/money/versions/1/referencedby?deleted=true",
            None
        )
        .await,
        json!([id])
    );
    // The referenced version soft-deleted too: still found.
    r.ok("DELETE", "/subjects/money/versions/1", None).await;
    assert_eq!(
        r.ok("GET", "/subjects/money/versions/1/referencedby", None)
            .await,
        json!([])
    );
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/money/versions/1/referencedby?deleted=true",
            None
        )
        .await,
        json!([id])
    );
    // `latest` is the newest live version, which there is none of: 40402
    // (the subject exists, soft-deleted versions counted).
    r.call("GET", "/subjects/money/versions/latest/referencedby", None)
        .await
        .error(404, 40402);
    r.call("GET", "/subjects/money/versions/2/referencedby", None)
        .await
        .error(404, 40402);
    r.call("GET", "/subjects/nobody/versions/1/referencedby", None)
        .await
        .error(404, 40401);
}

#[tokio::test]
async fn a_repeated_query_parameter_is_read_by_its_first_value() {
    // Jersey reads a single-valued @QueryParam with getFirst.
    let r = registry("first-param").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    r.register("fp", avro(json!("int"))).await;
    r.register("fp", avro(json!("long"))).await;
    r.ok("DELETE", "/subjects/fp/versions/1", None).await;
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/fp/versions?deleted=true&deleted=false",
            None
        )
        .await,
        json!([1, 2])
    );
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/fp/versions?deleted=false&deleted=true",
            None
        )
        .await,
        json!([2])
    );
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/fp/versions?deleted=true&limit=1&limit=2",
            None
        )
        .await,
        json!([1])
    );
}

#[tokio::test]
async fn schemas_carry_confluent_8s_guid_and_deleted() {
    // Confluent 8.x (`SchemaValue.toSchemaEntity`): `guid` is the MD5 of
    // the schema (text, references, data contract) as a UUID, the same in
    // every subject and context; `deleted` whether the version read is
    // soft-deleted. `/schemas/ids/{id}?subject=` also names the version.
    let r = registry("guid").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    // printf '"long"' | md5sum: e1dd9a1ef98b451b53690370b393966b
    let long_guid = "e1dd9a1e-f98b-451b-5369-0370b393966b";
    r.register("ga", avro(json!("int"))).await;
    let id = r.register("ga", avro(json!("long"))).await;
    assert_eq!(r.register("gb", avro(json!("long"))).await, id);
    let by_id = r.ok("GET", &format!("/schemas/ids/{id}"), None).await;
    assert_eq!(by_id["guid"], json!(long_guid), "{by_id}");
    assert_eq!(by_id["deleted"], json!(false), "{by_id}");
    assert!(by_id.get("subject").is_none(), "{by_id}");
    let mut by_subject = r
        .ok("GET", &format!("/schemas/ids/{id}?subject=gb"), None)
        .await;
    let ts = by_subject.as_object_mut().and_then(|o| o.remove("ts"));
    assert!(ts.is_some_and(|ts| ts.is_i64()), "{by_subject}");
    assert_eq!(
        by_subject,
        json!({"schema": "\"long\"", "subject": "gb", "version": 1,
               "guid": long_guid, "deleted": false})
    );
    let version = r.ok("GET", "/subjects/ga/versions/2", None).await;
    assert_eq!(version["guid"], json!(long_guid), "{version}");
    assert_eq!(version["deleted"], json!(false), "{version}");
    // Another context: another id, the same guid.
    r.register(":.other:gc", avro(json!("long"))).await;
    assert_eq!(
        r.ok("GET", "/subjects/:.other:gc/versions/1", None).await["guid"],
        json!(long_guid)
    );
    // A soft-deleted version says so.
    r.ok("DELETE", "/subjects/ga/versions/1", None).await;
    let deleted = r
        .ok("GET", "/subjects/ga/versions/1?deleted=true", None)
        .await;
    assert_eq!(deleted["deleted"], json!(true), "{deleted}");
    let listed = r
        .ok("GET", "/schemas?subjectPrefix=ga&deleted=true", None)
        .await;
    assert_eq!(listed[0]["deleted"], json!(true), "{listed}");
    assert_eq!(listed[1]["deleted"], json!(false), "{listed}");
    // The data contract counts: the same text with metadata is another
    // guid.
    r.register(
        "gd",
        json!({"schema": "\"long\"", "metadata": {"properties": {"owner": "x"}}}),
    )
    .await;
    let with_metadata = r.ok("GET", "/subjects/gd/versions/1", None).await;
    assert_ne!(with_metadata["guid"], json!(long_guid), "{with_metadata}");
}

#[tokio::test]
async fn version_minus_one_registers_the_next_version_stamped() {
    // Confluent's register: a version <= 0 other than 0 is the next
    // version, stamped with confluent:version (maybeSetMetadataRuleSet:
    // `version != 0`), and looked up against the latest version only
    // (registerOrForward's isLatestVersion).
    let r = registry("version-minus-one").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    let id1 = r.register("nv", avro(json!("int"))).await;
    let latest = |schema: &str| json!({"schema": format!("\"{schema}\""), "version": -1});
    let id2 = r.register("nv", latest("long")).await;
    assert_eq!(
        r.ok("GET", "/subjects/nv/versions/2", None).await["metadata"],
        json!({"properties": {"confluent:version": "2"}})
    );
    // The latest version sent again: found, nothing new.
    let offset = r.offset();
    assert_eq!(r.register("nv", latest("long")).await, id2);
    assert_eq!(r.offset(), offset);
    // An older version's schema is not the latest: a new version, stamped
    // (so not id1, whose metadata has no stamp).
    let id3 = r.register("nv", latest("int")).await;
    assert!(![id1, id2].contains(&id3), "{id3}");
    assert_eq!(
        r.ok("GET", "/subjects/nv/versions/3", None).await["metadata"],
        json!({"properties": {"confluent:version": "3"}})
    );
    assert_eq!(
        r.ok("GET", "/subjects/nv/versions", None).await,
        json!([1, 2, 3])
    );
}

#[tokio::test]
async fn empty_metadata_is_no_metadata_to_a_versioned_look_up() {
    // canLookupIgnoringVersion: a schema sent with confluent:version N
    // finds version N stored without it, its metadata compared with the
    // property removed, and Confluent's Metadata holds an absent part as
    // an empty one: `{"properties": {}}` stored is what is left.
    let r = registry("empty-metadata").await;
    let id = r
        .register(
            "em",
            json!({"schema": "\"int\"", "metadata": {"properties": {}}}),
        )
        .await;
    let stamped = json!({"schema": "\"int\"",
                         "metadata": {"properties": {"confluent:version": "1"}}});
    let found = r.ok("POST", "/subjects/em", Some(stamped.clone())).await;
    assert_eq!(
        (found["id"].as_u64(), found["version"].as_u64()),
        (Some(id), Some(1))
    );
    let offset = r.offset();
    assert_eq!(r.register("em", stamped).await, id);
    assert_eq!(r.offset(), offset, "a new version was registered");
    // Another version number still finds nothing.
    r.call(
        "POST",
        "/subjects/em",
        Some(json!({"schema": "\"int\"",
                    "metadata": {"properties": {"confluent:version": "2"}}})),
    )
    .await
    .error(404, 40403);
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

#[tokio::test]
async fn registered_versions_carry_their_registration_time() {
    // Confluent 8.0+ (`SchemaValue.toSchemaEntity`, `SchemaString`): `ts`,
    // epoch milliseconds, on a version, on `/schemas/ids/{id}` and on
    // `/schemas`. evolve stores it in the version's record.
    let r = registry("ts").await;
    let before = now_millis();
    let id = r.register("t", avro(json!("string"))).await;
    let after = now_millis();
    let version = r.ok("GET", "/subjects/t/versions/1", None).await;
    let ts = version["ts"].as_i64().expect("ts");
    assert!(
        (before..=after).contains(&ts),
        "{ts} not in {before}..={after}"
    );
    let by_id = r.ok("GET", &format!("/schemas/ids/{id}"), None).await;
    assert_eq!(by_id["ts"], json!(ts), "{by_id}");
    let listed = r.ok("GET", "/schemas?subjectPrefix=t", None).await;
    assert_eq!(listed[0]["ts"], json!(ts), "{listed}");
    // A soft delete keeps the registration time.
    r.ok("DELETE", "/subjects/t/versions/1", None).await;
    let deleted = r
        .ok("GET", "/subjects/t/versions/1?deleted=true", None)
        .await;
    assert_eq!(deleted["ts"], json!(ts), "{deleted}");
    // It is in the log: a restart reads it back.
    let path = r.path.clone();
    drop(r);
    let r = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    let deleted = r
        .ok("GET", "/subjects/t/versions/1?deleted=true", None)
        .await;
    assert_eq!(deleted["ts"], json!(ts), "{deleted}");

    // A record without a time (written before evolve kept it, or
    // Confluent's, whose values carry none) has no `ts`, as Confluent
    // leaves out a field it has no value for.
    let path = common::temp_path("ts-old-records");
    let records = parse_export(&format!(
        "{}\t{}\n",
        r#"{"keytype":"SCHEMA","subject":"old","version":1,"magic":1}"#,
        json!({"subject": "old", "version": 1, "id": 1, "schema": "\"string\"",
               "deleted": false}),
    ))
    .expect("export");
    let log = SqliteLog::open(&path).expect("sqlite log");
    assert!(log.append(0, &records).await.expect("append"));
    drop(log);
    let r = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    let old = r.ok("GET", "/subjects/old/versions/1", None).await;
    assert!(old.get("ts").is_none(), "{old}");
    assert_eq!(old["deleted"], json!(false), "{old}");
}

#[tokio::test]
async fn latest_with_deleted_is_still_the_newest_live_version() {
    // Confluent's `get(subject, version, returnDeletedSchema)`
    // (AbstractSchemaRegistry): `latest` is `getLatestVersion`, which
    // skips soft-deleted versions whatever `deleted` says.
    let r = registry("latest-deleted").await;
    r.ok("PUT", "/config/s", Some(json!({"compatibility": "NONE"})))
        .await;
    r.register("s", avro(json!("string"))).await;
    r.register("s", avro(json!("int"))).await;
    r.ok("DELETE", "/subjects/s/versions/2", None).await;
    let latest = r
        .ok("GET", "/subjects/s/versions/latest?deleted=true", None)
        .await;
    assert_eq!(latest["version"], json!(1), "{latest}");
    assert_eq!(latest["deleted"], json!(false), "{latest}");
    let minus_one = r
        .ok("GET", "/subjects/s/versions/-1?deleted=true", None)
        .await;
    assert_eq!(minus_one["version"], json!(1), "{minus_one}");
    let raw = r
        .call(
            "GET",
            "/subjects/s/versions/latest/schema?deleted=true",
            None,
        )
        .await;
    assert_eq!(raw.text, "\"string\"");
    // The soft-deleted version is still read by its number.
    let two = r
        .ok("GET", "/subjects/s/versions/2?deleted=true", None)
        .await;
    assert_eq!(two["deleted"], json!(true), "{two}");
    // A permanent delete of `latest` names the newest live version too
    // (`validateDeleteSchemaVersion`), which is not soft-deleted: 40407,
    // and version 2 stays.
    r.call("DELETE", "/subjects/s/versions/latest?permanent=true", None)
        .await
        .error(404, 40407);
    r.ok("GET", "/subjects/s/versions/2?deleted=true", None)
        .await;
    // Every version soft-deleted: no `latest`, even with `deleted` (the
    // subject exists then: 40402), and no subject without it (40401).
    r.ok("DELETE", "/subjects/s/versions/1", None).await;
    r.call("GET", "/subjects/s/versions/latest?deleted=true", None)
        .await
        .error(404, 40402);
    r.call("GET", "/subjects/s/versions/latest", None)
        .await
        .error(404, 40401);
}

#[tokio::test]
async fn a_version_a_soft_deleted_schema_references_is_not_deleted_for_good() {
    // Confluent's `deleteSchemaVersion` and `deleteSubject`
    // (KafkaSchemaRegistry) check `getReferencedBy(key, permanentDelete)`
    // first: a permanent delete counts soft-deleted referrers, and 42206
    // comes before 40407.
    let r = registry("refs-permanent").await;
    let money = json!({"type": "record", "name": "Money", "namespace": "shop",
                       "fields": [{"name": "cents", "type": "long"}]});
    let money_id = r.register("money", avro(money.clone())).await;
    let order = json!({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [{"name": "total", "type": "shop.Money"}]});
    let order_body = json!({"schema": order.to_string(),
        "references": [{"name": "shop.Money", "subject": "money", "version": 1}]});
    let order_id = r.register("orders", order_body).await;
    // A live version that is referenced: 42206 before 40407, in Confluent's
    // words.
    let message = r
        .call("DELETE", "/subjects/money/versions/1?permanent=true", None)
        .await
        .error(422, 42206);
    assert!(
        message.starts_with(
            "One or more references exist to the schema \
             {magic=1,keytype=SCHEMA,subject=money,version=1}."
        ),
        "{message}"
    );
    assert!(message.contains(&format!("[{order_id}]")), "{message}");
    // The referrer soft-deleted: a soft delete of what it references is
    // taken (only live referrers count for it)...
    r.ok("DELETE", "/subjects/orders/versions/1", None).await;
    r.ok("DELETE", "/subjects/money/versions/1", None).await;
    // ... a permanent one is not, of the version or of the subject.
    let message = r
        .call("DELETE", "/subjects/money/versions/1?permanent=true", None)
        .await
        .error(422, 42206);
    assert!(message.contains("subject=money,version=1"), "{message}");
    r.call("DELETE", "/subjects/money?permanent=true", None)
        .await
        .error(422, 42206);
    // Registering the schema again makes a new version and keeps the
    // soft-deleted one the referrer names (Confluent's `register` does not
    // tombstone a referenced version).
    assert_eq!(r.register("money", avro(money)).await, money_id);
    assert_eq!(
        r.ok("GET", "/subjects/money/versions?deleted=true", None)
            .await,
        json!([1, 2])
    );
    // Once the referrer is gone for good, so can the version be.
    r.ok("DELETE", "/subjects/orders/versions/1?permanent=true", None)
        .await;
    assert_eq!(
        r.ok("DELETE", "/subjects/money/versions/1?permanent=true", None)
            .await,
        json!(1)
    );
}

#[tokio::test]
async fn a_subject_soft_delete_ignores_references_from_the_subject_itself() {
    // Confluent's `deleteSubject`: `getReferencedBySubjects` without the
    // subject itself.
    let r = registry("refs-self").await;
    r.ok(
        "PUT",
        "/config/self",
        Some(json!({"compatibility": "NONE"})),
    )
    .await;
    let money = json!({"type": "record", "name": "Money", "namespace": "shop",
                       "fields": [{"name": "cents", "type": "long"}]});
    r.register("self", avro(money)).await;
    let order = json!({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [{"name": "total", "type": "shop.Money"}]});
    r.register(
        "self",
        json!({"schema": order.to_string(),
               "references": [{"name": "shop.Money", "subject": "self", "version": 1}]}),
    )
    .await;
    assert_eq!(r.ok("DELETE", "/subjects/self", None).await, json!([1, 2]));
    assert_eq!(
        r.ok("DELETE", "/subjects/self?permanent=true", None).await,
        json!([1, 2])
    );
}

#[tokio::test]
async fn registration_answers_the_version_as_confluent_8_does() {
    // Confluent 7.4.1+ answers a registration with `new
    // RegisterSchemaResponse(result)` (SubjectVersionsResource.register):
    // id, version, schemaType (`AVRO` too), schema, references, metadata,
    // ruleSet, and from 8.0 the guid; no `ts` or `deleted` (the schema is
    // the request's, not one read from the store).
    let r = registry("register-answer").await;
    let reply = r
        .ok(
            "POST",
            "/subjects/a/versions",
            Some(avro(json!({"type": "string"}))),
        )
        .await;
    let version = r.ok("GET", "/subjects/a/versions/1", None).await;
    assert_eq!(
        reply,
        json!({"id": 1, "version": 1, "guid": version["guid"], "schemaType": "AVRO",
               "schema": version["schema"]})
    );
    // The same schema again, however written: the same answer.
    let again = r
        .ok("POST", "/subjects/a/versions", Some(avro(json!("string"))))
        .await;
    assert_eq!(again, reply);
    // Another subject: its own version.
    r.register("b", avro(json!("bytes"))).await;
    let b = r
        .ok("POST", "/subjects/b/versions", Some(avro(json!("string"))))
        .await;
    assert_eq!(
        (b["id"].clone(), b["version"].clone()),
        (json!(1), json!(2))
    );
    // References and the data contract are there when the schema has them.
    let order = json!({"type": "record", "name": "Order", "fields": [
        {"name": "s", "type": "string"}]});
    let answer = r
        .ok(
            "POST",
            "/subjects/c/versions",
            Some(json!({"schema": order.to_string(),
                        "metadata": {"properties": {"owner": "shop"}}})),
        )
        .await;
    assert_eq!(answer["schemaType"], json!("AVRO"), "{answer}");
    assert_eq!(
        answer["metadata"],
        json!({"properties": {"owner": "shop"}}),
        "{answer}"
    );
    assert!(answer.get("ts").is_none(), "{answer}");
    assert!(answer.get("deleted").is_none(), "{answer}");
    let proto_answer = r
        .ok(
            "POST",
            "/subjects/p/versions",
            Some(proto(
                "syntax = \"proto3\";\nmessage Ping {\n  string id = 1;\n}\n",
            )),
        )
        .await;
    assert_eq!(
        proto_answer["schemaType"],
        json!("PROTOBUF"),
        "{proto_answer}"
    );
    assert_eq!(proto_answer["version"], json!(1), "{proto_answer}");
    let text = r.ok("GET", "/subjects/p/versions/1", None).await;
    assert_eq!(proto_answer["schema"], text["schema"], "{proto_answer}");
    // Sent as a serialized descriptor (as confluent-kafka-python sends
    // it): answered in that form, which that client caches under the id
    // and decodes as a descriptor.
    let serialized = r
        .ok(
            "POST",
            "/subjects/ping/versions",
            Some(json!({"schemaType": "PROTOBUF", "schema": PING_SERIALIZED})),
        )
        .await;
    let id = serialized["id"].as_u64().expect("id");
    let descriptor = r
        .ok("GET", &format!("/schemas/ids/{id}?format=serialized"), None)
        .await;
    assert_eq!(serialized["schema"], descriptor["schema"], "{serialized}");
    let stored = r.ok("GET", "/subjects/ping/versions/1", None).await;
    assert_ne!(serialized["schema"], stored["schema"], "{stored}");
}
