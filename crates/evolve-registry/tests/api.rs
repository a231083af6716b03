//! The Confluent REST API, route by route, over a registry on a fresh
//! SQLite file.

mod common;

use common::{TestRegistry, avro, open_at, registry, temp_path};
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
    // Confluent 7.5+ ends the details with the settings they were found
    // under.
    assert!(
        message.ends_with(", {validateFields: 'false', compatibility: 'BACKWARD'}]"),
        "{message}"
    );
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
        Some(2),
        "{verdict}"
    );
    assert_eq!(
        verdict["messages"][1],
        "{validateFields: 'false', compatibility: 'BACKWARD'}"
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
    // versions count. The soft-deleted version of the same id goes for
    // good, as in Confluent: the schema is listed once, as version 4.
    assert_eq!(r.register("d", schema(2)).await, 2);
    assert_eq!(
        r.ok("GET", "/subjects/d/versions/latest", None).await["version"],
        4
    );
    assert_eq!(
        r.ok("GET", "/subjects/d/versions?deleted=true", None).await,
        json!([1, 3, 4])
    );
    r.call("GET", "/subjects/d/versions/2?deleted=true", None)
        .await
        .error(404, 40402);
    r.call("DELETE", "/subjects/d/versions/2?permanent=true", None)
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
    // Every answer that carries the schema carries its references, as
    // Confluent's do: a reader needs them to parse it.
    for path in [
        "/subjects/orders/versions/1".to_string(),
        "/subjects/orders/versions/latest".to_string(),
        format!("/schemas/ids/{id}"),
    ] {
        let answer = r.ok("GET", &path, None).await;
        assert_eq!(
            answer["references"],
            json!([{"name": "shop.Money", "subject": "money", "version": 1}]),
            "{path}: {answer}"
        );
    }
    // A schema without references has none listed.
    let plain = r.ok("GET", "/subjects/money/versions/latest", None).await;
    assert!(plain.get("references").is_none(), "{plain}");
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
        ("GET", "/schemas/ids/abc", None, 404, 404),
        ("GET", "/schemas/ids/0", None, 404, 40403),
        // A path segment that is not UTF-8: axum's refusal, as JSON.
        ("GET", "/subjects/%ff%fe/versions", None, 400, 400),
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
        r#"{"name":"N","type":"record","fields":[]}"#
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

fn payment() -> String {
    json!({"type": "record", "name": "Payment", "namespace": "shop",
           "fields": [{"name": "amount", "type": "double"}]})
    .to_string()
}

#[tokio::test]
async fn metadata_and_rule_sets_are_kept_and_take_part_in_dedup() {
    let r = registry("contracts").await;
    let metadata = json!({"properties": {"owner": "payments"}, "tags": {"Payment.amount": ["PII"]}, "sensitive": ["amount"]});
    let rules = json!({"domainRules": [{"name": "positive", "kind": "CONDITION", "type": "CEL", "mode": "WRITE", "expr": "message.amount > 0"}]});
    let with = |m: &serde_json::Value, rs: &serde_json::Value| json!({"schema": payment(), "metadata": m, "ruleSet": rs});
    let id = r.register("pay", with(&metadata, &rules)).await;

    // Every read that returns the schema returns its contract.
    for path in [
        "/subjects/pay/versions/1".to_string(),
        "/subjects/pay/versions/latest".to_string(),
        format!("/schemas/ids/{id}"),
    ] {
        let got = r.ok("GET", &path, None).await;
        assert_eq!(got["metadata"], metadata, "{path}: {got}");
        assert_eq!(got["ruleSet"], rules, "{path}: {got}");
    }
    let found = r
        .ok("POST", "/subjects/pay", Some(with(&metadata, &rules)))
        .await;
    assert_eq!(
        (found["id"].as_u64(), found["version"].as_u64()),
        (Some(id), Some(1))
    );
    assert_eq!(found["ruleSet"], rules);
    // A lookup without a contract finds the same schema.
    let bare = r
        .ok("POST", "/subjects/pay", Some(json!({"schema": payment()})))
        .await;
    assert_eq!(bare["version"], 1);

    // The same schema and contract: nothing new.
    let offset = r.offset();
    assert_eq!(r.register("pay", with(&metadata, &rules)).await, id);
    assert_eq!(r.offset(), offset);
    // Without a contract, the latest version's is inherited: nothing new.
    assert_eq!(r.register("pay", json!({"schema": payment()})).await, id);
    assert_eq!(r.offset(), offset);

    // Other metadata, or another rule set: a new version and a new id.
    let other = json!({"properties": {"owner": "billing"}});
    let id2 = r.register("pay", with(&other, &rules)).await;
    assert_ne!(id2, id);
    let other_rules = json!({"domainRules": []});
    let id3 = r.register("pay", with(&other, &other_rules)).await;
    assert!(id3 != id && id3 != id2);
    assert_eq!(
        r.ok("GET", "/subjects/pay/versions", None).await,
        json!([1, 2, 3])
    );
    // The same schema and contract under another subject: the same id.
    assert_eq!(r.register("pay-copy", with(&metadata, &rules)).await, id);

    // A contract survives a restart (the log's records hold it).
    drop(r.router);
    let path = r.path.clone();
    drop(r.app);
    let reopened = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    let got = reopened.ok("GET", "/subjects/pay/versions/1", None).await;
    assert_eq!(got["metadata"], metadata);
    assert_eq!(got["ruleSet"], rules);

    // Bad shapes are refused, naming the field.
    let reply = reopened
        .call(
            "POST",
            "/subjects/pay/versions",
            Some(json!({"schema": payment(), "metadata": {"properties": {"a": 1}}})),
        )
        .await;
    let message = reply.error(422, 42201);
    assert!(
        message.contains("\"metadata\"") && message.contains("properties"),
        "{message}"
    );
    let reply = reopened
        .call(
            "POST",
            "/subjects/pay/versions",
            Some(json!({"schema": payment(), "ruleSet": {"domainRules": [{}]}})),
        )
        .await;
    assert!(reply.error(422, 42201).contains("\"name\""));
}

#[tokio::test]
async fn config_defaults_and_overrides_apply_on_registration() {
    let r = registry("contract-config").await;
    let put = r
        .ok(
            "PUT",
            "/config",
            Some(json!({
                "defaultMetadata": {"properties": {"owner": "platform", "tier": "silver"}},
                "overrideMetadata": {"properties": {"tier": "gold"}},
                "defaultRuleSet": {"domainRules": [{"name": "a", "expr": "default"}]},
                "overrideRuleSet": {"domainRules": [{"name": "b", "expr": "override"}]},
            })),
        )
        .await;
    assert_eq!(
        put["overrideMetadata"],
        json!({"properties": {"tier": "gold"}})
    );
    // The level is kept when a PUT does not name one.
    let global = r.ok("GET", "/config", None).await;
    assert_eq!(global["compatibilityLevel"], "BACKWARD");
    assert_eq!(global["defaultRuleSet"]["domainRules"][0]["name"], "a");

    r.register(
        "s",
        json!({"schema": payment(), "metadata": {"properties": {"owner": "me"}},
                           "ruleSet": {"domainRules": [{"name": "a", "expr": "mine"}]}}),
    )
    .await;
    let got = r.ok("GET", "/subjects/s/versions/1", None).await;
    assert_eq!(
        got["metadata"],
        json!({"properties": {"owner": "me", "tier": "gold"}})
    );
    assert_eq!(
        got["ruleSet"],
        json!({"domainRules": [{"name": "a", "expr": "mine"}, {"name": "b", "expr": "override"}]})
    );

    // A subject's own configuration replaces the global one's contract.
    r.ok(
        "PUT",
        "/config/t",
        Some(json!({"compatibility": "NONE", "defaultMetadata": {"properties": {"owner": "t"}}})),
    )
    .await;
    let config = r.ok("GET", "/config/t", None).await;
    assert_eq!(config["compatibilityLevel"], "NONE");
    assert_eq!(
        config["defaultMetadata"],
        json!({"properties": {"owner": "t"}})
    );
    r.register("t", json!({"schema": payment()})).await;
    let got = r.ok("GET", "/subjects/t/versions/1", None).await;
    assert_eq!(got["metadata"], json!({"properties": {"owner": "t"}}));
    assert!(got.get("ruleSet").is_none(), "{got}");

    // Neither a level nor a contract field: refused.
    let reply = r.call("PUT", "/config", Some(json!({"nothing": 1}))).await;
    reply.error(422, 42203);
    let reply = r
        .call("PUT", "/config", Some(json!({"defaultMetadata": []})))
        .await;
    assert!(reply.error(422, 42201).contains("defaultMetadata"));
}

#[tokio::test]
async fn confluent_python_client_registers_and_reads_back_a_data_contract() {
    let served = common::serve_tcp("python-contracts").await;
    let summary = common::python_client("data_contracts.py", &[&served.url]).await;
    assert_eq!(summary["owner"], "payments");
    assert_eq!(summary["rule"], "checkAmount");
    assert_eq!(summary["configured_tier"], "gold");
    assert_ne!(summary["id"], summary["other_id"]);
    // What the client saw is what the registry stored.
    let latest = served
        .registry
        .ok("GET", "/subjects/payments-value/versions/1", None)
        .await;
    assert_eq!(latest["metadata"]["properties"]["owner"], "payments");
    assert_eq!(
        latest["ruleSet"]["domainRules"][0]["expr"],
        "message.amount > 0"
    );
}

#[tokio::test]
async fn contexts_keep_their_own_subjects_ids_and_settings() {
    let r = registry("contexts").await;
    assert_eq!(r.ok("GET", "/contexts", None).await, json!(["."]));
    // The same schema in the default context and in .team: id 1 in each.
    assert_eq!(r.register("orders", avro(order_v1())).await, 1);
    assert_eq!(r.register(":.team:orders", avro(order_v1())).await, 1);
    // A second schema in .team only: ids count per context.
    assert_eq!(r.register(":.team:orders", avro(order_v2())).await, 2);
    assert_eq!(r.register("other", avro(order_v2())).await, 2);
    assert_eq!(r.register(":.b:x", avro(order_v2())).await, 1);
    assert_eq!(
        r.ok("GET", "/contexts", None).await,
        json!([".", ".b", ".team"])
    );

    // Listing: every context (no prefix, or `:*:`), one context, or the
    // default context's subjects by prefix.
    assert_eq!(
        r.ok("GET", "/subjects", None).await,
        json!([":.b:x", ":.team:orders", "orders", "other"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?subjectPrefix=o", None).await,
        json!(["orders", "other"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?subjectPrefix=:.team:", None).await,
        json!([":.team:orders"])
    );
    assert_eq!(
        r.ok("GET", "/subjects?subjectPrefix=:*:", None).await,
        json!([":.b:x", ":.team:orders", "orders", "other"])
    );
    assert_eq!(
        r.ok("GET", "/contexts/.team/subjects", None).await,
        json!([":.team:orders"])
    );
    assert_eq!(
        r.ok("GET", "/contexts/./subjects", None).await,
        json!(["orders", "other"])
    );

    // The base context path and the qualified name are the same subject.
    let v2 = r
        .ok("GET", "/contexts/.team/subjects/orders/versions/2", None)
        .await;
    assert_eq!(
        (v2["subject"].as_str(), v2["id"].as_u64()),
        (Some(":.team:orders"), Some(2))
    );
    assert_eq!(
        r.ok("GET", "/subjects/:.team:orders/versions/latest", None)
            .await,
        v2
    );
    // `:.:` names the default context.
    assert_eq!(
        r.ok("GET", "/subjects/:.:orders/versions/1", None).await["id"],
        1
    );
    assert_eq!(
        r.ok("GET", "/contexts/team/subjects", None).await,
        json!([":.team:orders"]),
        "a context named without its dot"
    );

    // Ids: the default context's, a context's by subject or path, and an
    // id only another context has.
    let by_id = |path: &str| {
        let path = path.to_owned();
        let r = &r;
        async move { r.ok("GET", &path, None).await["schema"].clone() }
    };
    assert_eq!(by_id("/schemas/ids/1").await, order_v1().to_string());
    assert_eq!(by_id("/schemas/ids/2").await, order_v2().to_string());
    assert_eq!(
        by_id("/contexts/.b/schemas/ids/1").await,
        order_v2().to_string()
    );
    assert_eq!(
        by_id("/schemas/ids/1?subject=:.b:").await,
        order_v2().to_string()
    );
    assert_eq!(
        r.ok("GET", "/contexts/.team/schemas/ids/2/versions", None)
            .await,
        json!([{"subject": ":.team:orders", "version": 2}])
    );
    r.call("GET", "/contexts/.team/schemas/ids/3", None)
        .await
        .error(404, 40403);
    r.call("GET", "/contexts/.team/nothing/here", None)
        .await
        .error(404, 404);

    // A context's compatibility applies to its subjects only.
    r.ok(
        "PUT",
        "/contexts/.team/config",
        Some(json!({"compatibility": "NONE"})),
    )
    .await;
    assert_eq!(
        r.ok("GET", "/config/:.team:", None).await["compatibilityLevel"],
        "NONE"
    );
    r.register(":.team:orders", avro(order_bad())).await;
    r.call("POST", "/subjects/orders/versions", Some(avro(order_bad())))
        .await
        .error(409, 409);
    // A subject's own level still wins inside the context.
    r.ok(
        "PUT",
        "/contexts/.team/config/strict",
        Some(json!({"compatibility": "FULL"})),
    )
    .await;
    assert_eq!(
        r.ok("GET", "/config/:.team:strict", None).await["compatibilityLevel"],
        "FULL"
    );
    // IMPORT for a context that has subjects needs force, as for a
    // subject; another context's subjects do not count.
    r.call("PUT", "/mode/:.team:", Some(json!({"mode": "IMPORT"})))
        .await
        .error(422, 42205);
    r.ok(
        "PUT",
        "/contexts/.empty/mode",
        Some(json!({"mode": "IMPORT"})),
    )
    .await;
    let mode = |subject: &str| {
        let path = format!("/mode/{subject}?defaultToGlobal=true");
        let r = &r;
        async move { r.ok("GET", &path, None).await["mode"].clone() }
    };
    assert_eq!(mode(":.empty:x").await, "IMPORT");
    assert_eq!(mode(":.team:orders").await, "READWRITE");
    assert_eq!(
        r.ok("GET", "/config/:.team:x?defaultToGlobal=true", None)
            .await["compatibilityLevel"],
        "NONE"
    );
    // A context by itself is not a subject to register under.
    let message = r
        .call("POST", "/subjects/:.team:/versions", Some(avro(order_v1())))
        .await
        .error(422, 42208);
    assert!(message.contains("names a context"), "{message}");

    // The log holds the contexts: they and the per-context ids survive a
    // restart, and the next id in .team is 4.
    let TestRegistry { app, router, path } = r;
    drop((app, router));
    let r = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    assert_eq!(
        r.ok("GET", "/contexts", None).await,
        json!([".", ".b", ".team"])
    );
    let v4 = json!({"type": "record", "name": "Order", "namespace": "shop",
                    "fields": [{"name": "id", "type": "long"}, {"name": "z", "type": "int", "default": 0}]});
    assert_eq!(r.register(":.team:orders", avro(v4)).await, 4);
    assert_eq!(r.register("third", avro(order_bad())).await, 3);
}

#[tokio::test]
async fn references_resolve_within_the_context() {
    let r = registry("context-refs").await;
    let money = |field: &str| {
        json!({"type": "record", "name": "Money", "namespace": "shop",
               "fields": [{"name": field, "type": "long"}]})
    };
    // `money` means another schema in each context.
    r.register("money", avro(money("cents"))).await;
    r.register(":.team:money", avro(money("pennies"))).await;
    let order = json!({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [{"name": "total", "type": "shop.Money"}]});
    let body = json!({"schema": order.to_string(),
                      "references": [{"name": "shop.Money", "subject": "money", "version": 1}]});
    let id = r.register(":.team:orders", body.clone()).await;
    // Referenced by the context's money, not the default context's.
    assert_eq!(
        r.ok(
            "GET",
            "/subjects/:.team:money/versions/1/referencedby",
            None
        )
        .await,
        json!([id])
    );
    assert_eq!(
        r.ok("GET", "/subjects/money/versions/1/referencedby", None)
            .await,
        json!([])
    );
    r.call("DELETE", "/subjects/:.team:money/versions/1", None)
        .await
        .error(422, 42206);
    // A reference to a subject the context does not have is refused.
    let missing = json!({"schema": order.to_string(),
                         "references": [{"name": "shop.Money", "subject": "cash", "version": 1}]});
    r.register("cash", avro(money("cents"))).await;
    let message = r
        .call("POST", "/subjects/:.team:other/versions", Some(missing))
        .await
        .error(422, 42201);
    assert!(
        message.contains(":.team:cash") || message.contains("'cash'"),
        "{message}"
    );
}

#[test]
fn context_paths_rewrite_to_qualified_requests() {
    use evolve_registry::http::context_path;
    let cases = [
        (
            "/contexts/.a/subjects",
            None,
            Some("/subjects?subjectPrefix=%3A.a%3A"),
        ),
        (
            "/contexts/.a/subjects",
            Some("deleted=true"),
            Some("/subjects?deleted=true&subjectPrefix=%3A.a%3A"),
        ),
        (
            "/contexts/.a/subjects/s/versions/1",
            None,
            Some("/subjects/:.a:s/versions/1"),
        ),
        (
            "/contexts/.a/subjects/:.b:s/versions",
            None,
            Some("/subjects/:.b:s/versions"),
        ),
        ("/contexts/./subjects/s", None, Some("/subjects/s")),
        (
            "/contexts/./subjects",
            None,
            Some("/subjects?subjectPrefix=%3A.%3A"),
        ),
        ("/contexts/a/config", None, Some("/config/:.a:")),
        ("/contexts/.a/mode/s", None, Some("/mode/:.a:s")),
        (
            "/contexts/.a/compatibility/subjects/s/versions/latest",
            None,
            Some("/compatibility/subjects/:.a:s/versions/latest"),
        ),
        (
            "/contexts/.a/schemas/ids/3/schema",
            None,
            Some("/schemas/ids/3/schema?subject=%3A.a%3A"),
        ),
        ("/contexts/.a/schemas/types", None, Some("/schemas/types")),
        ("/contexts/.a/other", None, None),
        ("/contexts/.a%3Ab/subjects", None, None),
        ("/contexts/%ZZ/subjects", None, None),
    ];
    for (path, query, expected) in cases {
        assert_eq!(context_path(path, query).as_deref(), expected, "{path}");
    }
}

/// A body whose declared length is over the limit is refused as soon as
/// the headers are in: the registry does not wait for bytes it would
/// refuse (a client that declares 100 GB and sends one byte used to hold
/// the request until it gave up).
#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_at_once() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let served = common::serve_tcp("declared").await;
    let address = served.url.trim_start_matches("http://").to_string();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    socket
        .write_all(
            format!(
                "POST /subjects/s/versions HTTP/1.1\r\nHost: {address}\r\n\
                 Content-Type: application/vnd.schemaregistry.v1+json\r\n\
                 Content-Length: 99999999999\r\n\r\nx"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // The answer comes while the client still owes the body; without it
    // this read would wait until the test harness gives up.
    let mut head = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(60), socket.read(&mut head))
        .await
        .expect("an answer before the body")
        .unwrap();
    let text = String::from_utf8_lossy(&head[..n]);
    assert!(text.starts_with("HTTP/1.1 422"), "{text}");
    assert!(text.contains("42209"), "{text}");
}
