//! The Confluent REST API, route by route, over a registry on a fresh
//! SQLite file.

mod common;

use common::{avro, open_at, registry, temp_path};
use evolve_registry::http::DEFAULT_MAX_BODY;
use evolve_registry::record::parse_export;
use evolve_registry::service::Settings;
use serde_json::json;

fn order_v1() -> serde_json::Value {
    json!({"type": "record", "name": "Order", "namespace": "shop",
           "fields": [{"name": "id", "type": "long"}]})
}

fn order_v2() -> serde_json::Value {
    json!({"type": "record", "name": "Order", "namespace": "shop",
           "fields": [{"name": "id", "type": "long"},
                      {"name": "note", "type": "string", "default": ""}]})
}

/// Adds a field without a default: BACKWARD-incompatible.
fn order_bad() -> serde_json::Value {
    json!({"type": "record", "name": "Order", "namespace": "shop",
           "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": "int"}]})
}

#[tokio::test]
async fn ids_are_global_and_deduplicated_and_versions_count_up() {
    let r = registry("ids").await;
    let id = r.register("orders-value", avro(order_v1())).await;
    assert_eq!(id, 1);
    // The same schema with other white space and key order: same id, no
    // new version, nothing appended.
    let offset = r.offset();
    let same = r#"{ "namespace":"shop", "name":"Order", "type":"record", "fields":[{"type":"long","name":"id"}] }"#;
    assert_eq!(r.register("orders-value", json!({"schema": same})).await, 1);
    assert_eq!(r.offset(), offset, "re-registering appended a record");
    // Under another subject: the same id, version 1 there.
    assert_eq!(r.register("orders-copy", avro(order_v1())).await, 1);
    assert_eq!(r.register("orders-value", avro(order_v2())).await, 2);

    assert_eq!(
        r.ok("GET", "/subjects", None).await,
        json!(["orders-copy", "orders-value"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?subjectPrefix=orders-v", None).await,
        json!(["orders-value"])
    );
    assert_eq!(
        r.ok("GET", "/subjects/orders-value/versions", None).await,
        json!([1, 2])
    );
    let latest = r
        .ok("GET", "/subjects/orders-value/versions/latest", None)
        .await;
    assert_eq!(latest["version"], 2);
    assert_eq!(latest["id"], 2);
    assert_eq!(latest["subject"], "orders-value");
    assert!(
        latest.get("schemaType").is_none(),
        "AVRO has no schemaType field: {latest}"
    );
    assert_eq!(
        r.ok("GET", "/subjects/orders-value/versions/-1", None)
            .await,
        latest
    );
    let by_id = r.ok("GET", "/schemas/ids/1", None).await;
    assert_eq!(by_id["schema"], order_v1().to_string());
    let raw = r
        .call("GET", "/subjects/orders-value/versions/1/schema", None)
        .await;
    assert_eq!(raw.text, order_v1().to_string());
    assert_eq!(
        r.ok("GET", "/schemas/ids/1/subjects", None).await,
        json!(["orders-copy", "orders-value"])
    );
    assert_eq!(
        r.ok("GET", "/schemas/ids/1/versions", None).await,
        json!([{"subject": "orders-copy", "version": 1}, {"subject": "orders-value", "version": 1}])
    );
    assert_eq!(
        r.ok("GET", "/schemas/types", None).await,
        json!(["JSON", "PROTOBUF", "AVRO"])
    );

    // Lookup finds the version holding a schema.
    let found = r
        .ok("POST", "/subjects/orders-value", Some(avro(order_v2())))
        .await;
    assert_eq!(
        (found["id"].as_u64(), found["version"].as_u64()),
        (Some(2), Some(2))
    );
    r.call("POST", "/subjects/orders-value", Some(avro(order_bad())))
        .await
        .error(404, 40403);
    r.call("POST", "/subjects/nope", Some(avro(order_v1())))
        .await
        .error(404, 40401);
    r.call("GET", "/schemas/ids/99", None)
        .await
        .error(404, 40403);
    r.call("GET", "/subjects/orders-value/versions/7", None)
        .await
        .error(404, 40402);
}

#[tokio::test]
async fn incompatible_schemas_are_refused_with_every_reason() {
    let r = registry("compat").await;
    r.register("s", avro(order_v1())).await;
    let offset = r.offset();
    let message = r
        .call("POST", "/subjects/s/versions", Some(avro(order_bad())))
        .await
        .error(409, 409);
    assert!(
        message.contains("READER_FIELD_MISSING_DEFAULT_VALUE"),
        "{message}"
    );
    assert!(message.contains("qty"), "{message}");
    assert_eq!(r.offset(), offset, "a refused schema was stored");

    // The check endpoints say the same without registering.
    let verdict = r
        .ok(
            "POST",
            "/compatibility/subjects/s/versions/latest?verbose=true",
            Some(avro(order_bad())),
        )
        .await;
    assert_eq!(verdict["is_compatible"], false);
    assert_eq!(
        verdict["messages"].as_array().map(Vec::len),
        Some(1),
        "{verdict}"
    );
    let quiet = r
        .ok(
            "POST",
            "/compatibility/subjects/s/versions",
            Some(avro(order_bad())),
        )
        .await;
    assert_eq!(quiet, json!({"is_compatible": false}));
    let fine = r
        .ok(
            "POST",
            "/compatibility/subjects/s/versions",
            Some(avro(order_v2())),
        )
        .await;
    assert_eq!(fine["is_compatible"], true);
    // A subject with no versions accepts anything.
    let empty = r
        .ok(
            "POST",
            "/compatibility/subjects/new/versions",
            Some(avro(order_bad())),
        )
        .await;
    assert_eq!(empty["is_compatible"], true);

    // NONE lets it through.
    r.ok("PUT", "/config/s", Some(json!({"compatibility": "NONE"})))
        .await;
    assert_eq!(r.register("s", avro(order_bad())).await, 2);

    // The 8.0.4+ error code, when configured.
    let r = open_at(
        temp_path("compat40901"),
        Settings {
            incompatible_code: 40901,
            ..Settings::default()
        },
        DEFAULT_MAX_BODY,
    )
    .await;
    r.register("s", avro(order_v1())).await;
    r.call("POST", "/subjects/s/versions", Some(avro(order_bad())))
        .await
        .error(409, 40901);
}

#[tokio::test]
async fn transitive_levels_check_every_live_version() {
    let r = registry("transitive").await;
    let v1 = json!({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]});
    let v2 = json!({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                    {"name": "b", "type": "int", "default": 0}]});
    // Drops b's default: reads v2's data (b present) but not v1's.
    let v3 = json!({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                    {"name": "b", "type": "int"}]});
    r.register("t", avro(v1)).await;
    r.register("t", avro(v2)).await;
    r.ok(
        "PUT",
        "/config/t",
        Some(json!({"compatibility": "BACKWARD_TRANSITIVE"})),
    )
    .await;
    let message = r
        .call("POST", "/subjects/t/versions", Some(avro(v3.clone())))
        .await
        .error(409, 409);
    assert!(message.contains("oldSchemaVersion:1"), "{message}");
    assert!(!message.contains("oldSchemaVersion:2"), "{message}");
    // Against one named version, the level's direction only.
    let against_2 = r
        .ok(
            "POST",
            "/compatibility/subjects/t/versions/2",
            Some(avro(v3.clone())),
        )
        .await;
    assert_eq!(against_2["is_compatible"], true);
    r.ok(
        "PUT",
        "/config/t",
        Some(json!({"compatibility": "BACKWARD"})),
    )
    .await;
    assert_eq!(r.register("t", avro(v3)).await, 3);
}

#[tokio::test]
async fn deletes_soft_then_permanent_and_versions_keep_counting() {
    let r = registry("deletes").await;
    r.ok("PUT", "/config", Some(json!({"compatibility": "NONE"})))
        .await;
    let schema = |n: i32| avro(json!({"type": "enum", "name": "E", "symbols": [format!("S{n}")]}));
    for n in 1..=3 {
        r.register("d", schema(n)).await;
    }
    r.call("DELETE", "/subjects/d/versions/2?permanent=true", None)
        .await
        .error(404, 40407);
    assert_eq!(
        r.ok("DELETE", "/subjects/d/versions/2", None).await,
        json!(2)
    );
    r.call("DELETE", "/subjects/d/versions/2", None)
        .await
        .error(404, 40406);
    r.call("GET", "/subjects/d/versions/2", None)
        .await
        .error(404, 40402);
    assert_eq!(
        r.ok("GET", "/subjects/d/versions/2?deleted=true", None)
            .await["version"],
        2
    );
    assert_eq!(
        r.ok("GET", "/subjects/d/versions", None).await,
        json!([1, 3])
    );
    assert_eq!(
        r.ok("GET", "/subjects/d/versions?deleted=true", None).await,
        json!([1, 2, 3])
    );
    // Re-registering the deleted schema makes a new version, 4: soft-deleted
    // versions count.
    assert_eq!(r.register("d", schema(2)).await, 2);
    assert_eq!(
        r.ok("GET", "/subjects/d/versions/latest", None).await["version"],
        4
    );
    assert_eq!(
        r.ok("DELETE", "/subjects/d/versions/2?permanent=true", None)
            .await,
        json!(2)
    );
    r.call("GET", "/subjects/d/versions/2?deleted=true", None)
        .await
        .error(404, 40402);

    r.call("DELETE", "/subjects/d?permanent=true", None)
        .await
        .error(404, 40405);
    assert_eq!(r.ok("DELETE", "/subjects/d", None).await, json!([1, 3, 4]));
    r.call("DELETE", "/subjects/d", None)
        .await
        .error(404, 40404);
    r.call("GET", "/subjects/d/versions", None)
        .await
        .error(404, 40401);
    assert_eq!(r.ok("GET", "/subjects", None).await, json!([]));
    assert_eq!(
        r.ok("GET", "/subjects?deleted=true", None).await,
        json!(["d"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?deletedOnly=true", None).await,
        json!(["d"])
    );
    // Ids of soft-deleted versions still resolve (consumers of old data).
    assert!(r.ok("GET", "/schemas/ids/1", None).await["schema"].is_string());
    assert_eq!(
        r.ok("DELETE", "/subjects/d?permanent=true", None).await,
        json!([1, 3, 4])
    );
    r.call("GET", "/subjects/d/versions?deleted=true", None)
        .await
        .error(404, 40401);
    r.call("GET", "/schemas/ids/1", None)
        .await
        .error(404, 40403);
    assert_eq!(r.ok("GET", "/subjects?deleted=true", None).await, json!([]));
    r.call("DELETE", "/subjects/d", None)
        .await
        .error(404, 40401);
}

#[tokio::test]
async fn references_resolve_and_protect_what_they_name() {
    let r = registry("refs").await;
    let money = json!({"type": "record", "name": "Money", "namespace": "shop",
                       "fields": [{"name": "cents", "type": "long"}]});
    r.register("money", avro(money.clone())).await;
    let order = json!({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [{"name": "total", "type": "shop.Money"}]});
    let body = json!({"schema": order.to_string(),
                      "references": [{"name": "shop.Money", "subject": "money", "version": 1}]});
    let id = r.register("orders", body.clone()).await;
    let version = r.ok("GET", "/subjects/orders/versions/1", None).await;
    assert_eq!(
        version["references"],
        json!([{"name": "shop.Money", "subject": "money", "version": 1}])
    );
    assert_eq!(
        r.ok("GET", "/subjects/money/versions/1/referencedby", None)
            .await,
        json!([id])
    );
    let message = r
        .call("DELETE", "/subjects/money/versions/1", None)
        .await
        .error(422, 42206);
    assert!(message.contains(&format!("[{id}]")), "{message}");
    r.call("DELETE", "/subjects/money", None)
        .await
        .error(422, 42206);
    // Without the reference the name does not resolve.
    r.call(
        "POST",
        "/subjects/orders2/versions",
        Some(avro(order.clone())),
    )
    .await
    .error(422, 42201);
    // A reference to a subject that does not exist.
    let missing = json!({"schema": order.to_string(),
                         "references": [{"name": "shop.Money", "subject": "nope", "version": 1}]});
    let message = r
        .call("POST", "/subjects/orders3/versions", Some(missing))
        .await
        .error(422, 42201);
    assert!(message.contains("'nope'"), "{message}");
    // Once the referrer is gone, the referenced version can go.
    r.ok("DELETE", "/subjects/orders", None).await;
    assert_eq!(
        r.ok("DELETE", "/subjects/money/versions/1", None).await,
        json!(1)
    );
}

#[tokio::test]
async fn protobuf_and_json_schemas_register_with_their_types() {
    let r = registry("types").await;
    let proto =
        "syntax = \"proto3\";\npackage shop;\nmessage Order { int64 id = 1; string note = 2; }\n";
    let id = r
        .register("p", json!({"schema": proto, "schemaType": "PROTOBUF"}))
        .await;
    let got = r.ok("GET", &format!("/schemas/ids/{id}"), None).await;
    assert_eq!(got["schemaType"], "PROTOBUF");
    assert_eq!(got["schema"], proto);
    // The serialized format: base64 of the FileDescriptorProto, which
    // registers again as the same kind of schema.
    let serialized = r
        .ok("GET", &format!("/schemas/ids/{id}?format=serialized"), None)
        .await;
    let b64 = serialized["schema"].as_str().expect("schema");
    assert!(!b64.contains(' ') && b64 != proto, "{b64}");
    let check = r
        .ok(
            "POST",
            "/compatibility/subjects/p/versions",
            Some(json!({"schema": b64, "schemaType": "PROTOBUF"})),
        )
        .await;
    assert_eq!(check["is_compatible"], true);
    // Changing a field's type across wire groups is incompatible.
    let bad = proto.replace("string note", "int32 note");
    let message = r
        .call(
            "POST",
            "/subjects/p/versions",
            Some(json!({"schema": bad, "schemaType": "PROTOBUF"})),
        )
        .await
        .error(409, 409);
    assert!(
        message.contains("FIELD_KIND_CHANGED") || message.contains("FIELD_SCALAR_KIND_CHANGED"),
        "{message}"
    );

    let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": false});
    let id = r
        .register(
            "j",
            json!({"schema": schema.to_string(), "schemaType": "JSON"}),
        )
        .await;
    assert_eq!(
        r.ok("GET", &format!("/schemas/ids/{id}"), None).await["schemaType"],
        "JSON"
    );
    // The same text as Avro is another schema (another type).
    r.call(
        "POST",
        "/subjects/j/versions",
        Some(json!({"schema": schema.to_string()})),
    )
    .await
    .error(422, 42201);
}

#[tokio::test]
async fn config_and_mode_follow_confluent() {
    let r = registry("config").await;
    assert_eq!(
        r.ok("GET", "/config", None).await,
        json!({"compatibilityLevel": "BACKWARD"})
    );
    assert_eq!(
        r.ok(
            "PUT",
            "/config/s",
            Some(json!({"compatibility": "full_transitive"}))
        )
        .await,
        json!({"compatibility": "FULL_TRANSITIVE"})
    );
    assert_eq!(
        r.ok("GET", "/config/s", None).await,
        json!({"compatibilityLevel": "FULL_TRANSITIVE"})
    );
    r.call("GET", "/config/other", None).await.error(404, 40408);
    assert_eq!(
        r.ok("GET", "/config/other?defaultToGlobal=true", None)
            .await,
        json!({"compatibilityLevel": "BACKWARD"})
    );
    r.call("PUT", "/config", Some(json!({"compatibility": "SIDEWAYS"})))
        .await
        .error(422, 42203);
    assert_eq!(
        r.ok("DELETE", "/config/s", None).await,
        json!({"compatibilityLevel": "FULL_TRANSITIVE"})
    );
    r.call("GET", "/config/s", None).await.error(404, 40408);
    r.ok("PUT", "/config", Some(json!({"compatibility": "FORWARD"})))
        .await;
    assert_eq!(
        r.ok("DELETE", "/config", None).await,
        json!({"compatibilityLevel": "FORWARD"})
    );
    assert_eq!(
        r.ok("GET", "/config", None).await,
        json!({"compatibilityLevel": "BACKWARD"})
    );

    assert_eq!(
        r.ok("GET", "/mode", None).await,
        json!({"mode": "READWRITE"})
    );
    r.call("PUT", "/mode", Some(json!({"mode": "WRONG"})))
        .await
        .error(422, 42204);
    r.ok("PUT", "/mode/locked", Some(json!({"mode": "READONLY"})))
        .await;
    let message = r
        .call("POST", "/subjects/locked/versions", Some(avro(order_v1())))
        .await
        .error(422, 42205);
    assert!(message.contains("read-only"), "{message}");
    r.call("GET", "/mode/free", None).await.error(404, 40409);
    assert_eq!(
        r.ok("GET", "/mode/free?defaultToGlobal=true", None).await,
        json!({"mode": "READWRITE"})
    );
    // An explicit id outside IMPORT mode is refused.
    let mut explicit = avro(order_v1());
    explicit["id"] = json!(100);
    r.call("POST", "/subjects/free/versions", Some(explicit.clone()))
        .await
        .error(422, 42205);

    // IMPORT keeps the given id and version and skips checks; switching a
    // non-empty registry to IMPORT needs force.
    r.register("existing", avro(order_v1())).await;
    r.call("PUT", "/mode", Some(json!({"mode": "IMPORT"})))
        .await
        .error(422, 42205);
    r.ok("PUT", "/mode?force=true", Some(json!({"mode": "IMPORT"})))
        .await;
    explicit["version"] = json!(5);
    explicit["schema"] = json!(order_bad().to_string());
    assert_eq!(r.register("imported", explicit).await, 100);
    let got = r.ok("GET", "/subjects/imported/versions/5", None).await;
    assert_eq!(got["id"], 100);
    r.ok("PUT", "/mode", Some(json!({"mode": "READWRITE"})))
        .await;
    // New ids continue after the imported one.
    assert_eq!(r.register("after", avro(order_v2())).await, 101);
}

#[tokio::test]
async fn bad_input_gets_the_right_code_and_stores_nothing() {
    let r = open_at(temp_path("bad"), Settings::default(), 4096).await;
    let offset = r.offset();
    let cases: Vec<(&str, &str, Option<String>, u16, u64)> = vec![
        (
            "POST",
            "/subjects/s/versions",
            Some("{not json".into()),
            400,
            400,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some("[1,2]".into()),
            400,
            400,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some(r#"{"schema": "{\"type\": \"recrod\"}"}"#.into()),
            422,
            42201,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some(
                r#"{"schema": "syntax = \"proto3\"; message {", "schemaType": "PROTOBUF"}"#.into(),
            ),
            422,
            42201,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some(r#"{"schema": "\"int\"", "schemaType": "XML"}"#.into()),
            422,
            42201,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some(r#"{"schemaType": "AVRO"}"#.into()),
            422,
            42201,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some(r#"{"schema": ""}"#.into()),
            422,
            42201,
        ),
        (
            "POST",
            "/subjects/s%07bell/versions",
            Some(r#"{"schema": "\"int\""}"#.into()),
            422,
            42208,
        ),
        (
            "POST",
            "/subjects/s/versions",
            Some(format!(r#"{{"schema": "\"{}\""}}"#, "x".repeat(5000))),
            422,
            42209,
        ),
        ("GET", "/subjects/s/versions/abc", None, 422, 42202),
        ("GET", "/subjects/s/versions/0", None, 422, 42202),
        ("GET", "/subjects/s/versions/2147483648", None, 422, 42202),
        ("DELETE", "/subjects/s/versions/-2", None, 422, 42202),
        ("GET", "/schemas/ids/abc", None, 404, 40403),
        ("GET", "/no/such/route", None, 404, 404),
        ("PATCH", "/subjects", None, 405, 405),
    ];
    for (method, path, body, status, code) in cases {
        let reply = r.raw(method, path, body.clone(), &[]).await;
        let message = reply.error(status, code);
        assert!(!message.is_empty(), "{method} {path}");
        assert!(!message.contains('\n'), "message is one line: {message}");
    }
    assert_eq!(r.offset(), offset, "bad input appended to the log");
    assert_eq!(r.ok("GET", "/subjects?deleted=true", None).await, json!([]));
}

#[tokio::test]
async fn state_survives_a_restart_and_content_types_follow_accept() {
    let r = registry("restart").await;
    r.register("a", avro(order_v1())).await;
    r.register("a", avro(order_v2())).await;
    r.ok("DELETE", "/subjects/a/versions/1", None).await;
    r.ok("PUT", "/config/a", Some(json!({"compatibility": "FULL"})))
        .await;
    let path = r.path.clone();
    drop(r);
    let r = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    assert_eq!(r.ok("GET", "/subjects/a/versions", None).await, json!([2]));
    assert_eq!(
        r.ok("GET", "/config/a", None).await,
        json!({"compatibilityLevel": "FULL"})
    );
    assert_eq!(r.register("b", avro(json!("string"))).await, 3);

    let reply = r.raw("GET", "/subjects", None, &[]).await;
    assert_eq!(reply.content_type, "application/vnd.schemaregistry.v1+json");
    let reply = r
        .raw("GET", "/subjects", None, &[("accept", "application/json")])
        .await;
    assert_eq!(reply.content_type, "application/json");
    let reply = r
        .raw(
            "GET",
            "/subjects",
            None,
            &[(
                "accept",
                "application/vnd.schemaregistry.v1+json, application/json",
            )],
        )
        .await;
    assert_eq!(reply.content_type, "application/vnd.schemaregistry.v1+json");

    let metrics = r.raw("GET", "/metrics", None, &[]).await;
    assert!(
        metrics.content_type.starts_with("text/plain"),
        "{}",
        metrics.content_type
    );
    assert!(
        metrics.text.contains(
            r#"evolve_registry_requests_total{method="GET",route="/subjects",status="200"} 3"#
        ),
        "{}",
        metrics.text
    );
    assert!(
        metrics.text.contains("evolve_registry_schemas 3"),
        "{}",
        metrics.text
    );
}

#[tokio::test]
async fn an_export_imports_with_its_ids_versions_and_deletions() {
    let export = [
        (r#"{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}"#,
         r#"{"subject":"orders-value","version":1,"id":41,"schema":"\"string\"","deleted":false}"#),
        (r#"{"keytype":"SCHEMA","subject":"orders-value","version":2,"magic":1}"#,
         r#"{"subject":"orders-value","version":2,"id":42,"schema":"{\"type\":\"record\",\"name\":\"R\",\"fields\":[]}","deleted":false}"#),
        (r#"{"keytype":"CONFIG","subject":"orders-value","magic":0}"#, r#"{"compatibilityLevel":"NONE"}"#),
        (r#"{"keytype":"SCHEMA","subject":"gone","version":1,"magic":1}"#,
         r#"{"subject":"gone","version":1,"id":41,"schema":"\"string\"","deleted":true}"#),
        (r#"{"keytype":"SCHEMA","subject":"gone","version":1,"magic":1}"#, "null"),
        (r#"{"keytype":"NOOP","magic":0}"#, "null"),
    ]
    .iter()
    .map(|(k, v)| format!("{k}\t{v}"))
    .collect::<Vec<_>>()
    .join("\n");
    let records = parse_export(&export).expect("export parses");
    let r = registry("import").await;
    assert_eq!(
        r.app
            .registry
            .import(records.clone(), false)
            .await
            .expect("import"),
        6
    );
    assert_eq!(
        r.ok("GET", "/subjects?deleted=true", None).await,
        json!(["orders-value"])
    );
    assert_eq!(
        r.ok("GET", "/subjects/orders-value/versions/2", None).await["id"],
        42
    );
    assert_eq!(
        r.ok("GET", "/config/orders-value", None).await,
        json!({"compatibilityLevel": "NONE"})
    );
    // New ids continue after the highest imported one.
    assert_eq!(r.register("next", avro(json!("int"))).await, 43);
    // A second import into a non-empty registry is refused.
    let err = r.app.registry.import(records, false).await.unwrap_err();
    assert_eq!(err.error_code, 42205, "{err}");
}

#[tokio::test]
async fn normalize_stores_the_layout_free_text() {
    let r = registry("normalize").await;
    let spaced = "{ \"type\" : \"record\", \"name\" : \"N\",\n  \"fields\" : [ ] }";
    let reply = r
        .ok(
            "POST",
            "/subjects/n/versions?normalize=true",
            Some(json!({"schema": spaced})),
        )
        .await;
    let id = reply["id"].as_u64().expect("id");
    let stored = r.ok("GET", &format!("/schemas/ids/{id}"), None).await;
    assert_eq!(
        stored["schema"],
        r#"{"fields":[],"name":"N","type":"record"}"#
    );
    // Lookup with normalize finds it from any layout.
    let found = r
        .ok(
            "POST",
            "/subjects/n?normalize=true",
            Some(json!({"schema": "{\"name\":\"N\",\"type\":\"record\",\"fields\":[]}"})),
        )
        .await;
    assert_eq!(found["id"], id);
}

#[tokio::test]
async fn max_schema_bytes_applies_to_every_schema_body() {
    let r = common::open_with(temp_path("max-schema"), Settings::default(), 1 << 20, 64).await;
    let offset = r.offset();
    let long = " ".repeat(60) + "\"string\"";
    assert!(long.len() > 64);
    for (method, path, operation) in [
        ("POST", "/subjects/s/versions", "Register"),
        ("POST", "/subjects/s", "Lookup"),
        (
            "POST",
            "/compatibility/subjects/s/versions",
            "Compatibility check",
        ),
    ] {
        let reply = r
            .raw(
                method,
                path,
                Some(json!({ "schema": long }).to_string()),
                &[],
            )
            .await;
        let message = reply.error(422, 42209);
        assert!(
            message.starts_with(&format!("{operation} operation failed because schema is too large: {} bytes, more than the limit of 64 bytes", long.len())),
            "{message}"
        );
    }
    assert_eq!(r.offset(), offset, "a refused schema appended to the log");
    assert_eq!(r.register("s", json!({"schema": "\"string\""})).await, 1);
}
