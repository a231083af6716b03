//! The registry's state under modes, imports, restarts and concurrent
//! writers: what must hold whatever order requests arrive in, on a fresh
//! SQLite file.

mod common;

use std::sync::Arc;

use common::{avro, open_at, registry, temp_path};
use evolve_registry::http::DEFAULT_MAX_BODY;
use evolve_registry::record::parse_export;
use evolve_registry::service::Settings;
use serde_json::json;

fn record_with(field: &str) -> serde_json::Value {
    avro(json!({"type": "record", "name": "R",
                "fields": [{"name": field, "type": "int", "default": 0}]}))
}

fn export(lines: &[(&str, &str)]) -> Vec<evolve_registry::record::Record> {
    let text = lines
        .iter()
        .map(|(k, v)| format!("{k}\t{v}"))
        .collect::<Vec<_>>()
        .join("\n");
    parse_export(&text).expect("export parses")
}

/// A global READONLY_OVERRIDE freezes every subject, those with a mode of
/// their own included (Confluent's `getModeInScope`: the global mode when
/// it is READONLY_OVERRIDE, else the subject's), and `GET /mode/{s}`
/// shows it; a global READONLY leaves a subject's own mode in force.
#[tokio::test]
async fn a_global_readonly_override_freezes_subjects_with_a_mode_of_their_own() {
    let r = registry("override").await;
    assert_eq!(r.register("own", avro(json!("string"))).await, 1);
    r.ok("PUT", "/mode/own", Some(json!({"mode": "READWRITE"})))
        .await;
    r.ok("PUT", "/mode/imp", Some(json!({"mode": "IMPORT"})))
        .await;
    r.ok("PUT", "/mode", Some(json!({"mode": "READONLY_OVERRIDE"})))
        .await;
    let offset = r.offset();

    let message = r
        .call("POST", "/subjects/own/versions", Some(avro(json!("bytes"))))
        .await
        .error(422, 42205);
    assert!(message.contains("read-only"), "{message}");
    assert!(
        message.contains("PUT /mode {\"mode\":\"READWRITE\"}"),
        "the way out is the global mode: {message}"
    );
    r.call("DELETE", "/subjects/own/versions/1", None)
        .await
        .error(422, 42205);
    r.call("DELETE", "/subjects/own", None)
        .await
        .error(422, 42205);
    let import = json!({"schema": "\"boolean\"", "id": 100, "version": 1});
    r.call("POST", "/subjects/imp/versions", Some(import))
        .await
        .error(422, 42205);
    assert_eq!(r.offset(), offset, "a write went through the override");

    // A schema the subject holds is still answered (the look-up first).
    assert_eq!(r.register("own", avro(json!("string"))).await, 1);
    for path in [
        "/mode/own",
        "/mode/imp",
        "/mode/own?defaultToGlobal=true",
        "/mode/none",
    ] {
        assert_eq!(
            r.ok("GET", path, None).await,
            json!({"mode": "READONLY_OVERRIDE"}),
            "GET {path}"
        );
    }

    // READONLY is a default only: a subject's own READWRITE still writes.
    r.ok("PUT", "/mode", Some(json!({"mode": "READONLY"})))
        .await;
    assert_eq!(r.register("own", avro(json!("bytes"))).await, 2);
    assert_eq!(
        r.ok("GET", "/mode/own", None).await,
        json!({"mode": "READWRITE"})
    );
    r.call(
        "POST",
        "/subjects/other/versions",
        Some(avro(json!("long"))),
    )
    .await
    .error(422, 42205);
}

/// An import into a registry that holds schemas (`--force`) cannot give
/// an id that is another schema here: replayed, the id would keep the
/// schema it had, and the imported version would serve that one instead
/// of the schema exported. Nothing of the import is appended. The same
/// schema under the same id (an export of this registry) imports.
#[tokio::test]
async fn a_forced_import_refuses_an_id_that_is_another_schema_here() {
    let r = registry("import-ids").await;
    assert_eq!(r.register("local", avro(json!("string"))).await, 1);
    let offset = r.offset();

    let colliding = export(&[
        (
            r#"{"keytype":"SCHEMA","subject":"remote","version":1,"magic":1}"#,
            r#"{"subject":"remote","version":1,"id":7,"schema":"\"long\"","deleted":false}"#,
        ),
        (
            r#"{"keytype":"SCHEMA","subject":"remote","version":2,"magic":1}"#,
            r#"{"subject":"remote","version":2,"id":1,"schema":"\"int\"","deleted":false}"#,
        ),
    ]);
    let err = r
        .app
        .registry
        .import(colliding, true)
        .await
        .expect_err("an import that reuses id 1 for another schema");
    assert_eq!(err.error_code, 42205, "{err}");
    assert!(err.message.contains("id 1"), "{}", err.message);
    assert!(err.message.contains("'remote'"), "{}", err.message);
    assert!(err.message.contains("version 2"), "{}", err.message);
    assert_eq!(r.offset(), offset, "part of a refused import was appended");
    assert_eq!(r.ok("GET", "/subjects", None).await, json!(["local"]));

    // Two schemas under one id within one export: refused as well, even
    // into an empty registry.
    let empty = registry("import-ids-empty").await;
    let inconsistent = export(&[
        (
            r#"{"keytype":"SCHEMA","subject":"a","version":1,"magic":1}"#,
            r#"{"subject":"a","version":1,"id":3,"schema":"\"long\"","deleted":false}"#,
        ),
        (
            r#"{"keytype":"SCHEMA","subject":"b","version":1,"magic":1}"#,
            r#"{"subject":"b","version":1,"id":3,"schema":"\"double\"","deleted":false}"#,
        ),
    ]);
    let err = empty
        .app
        .registry
        .import(inconsistent, false)
        .await
        .expect_err("an export with two schemas under id 3");
    assert_eq!(err.error_code, 42205, "{err}");
    assert_eq!(empty.offset(), 0);

    // The schema id 1 is here, written another way, and an id this
    // registry does not use: imported, and served as exported.
    let same = export(&[
        (
            r#"{"keytype":"SCHEMA","subject":"copy","version":1,"magic":1}"#,
            r#"{"subject":"copy","version":1,"id":1,"schema":"{\"type\": \"string\"}","deleted":false}"#,
        ),
        (
            r#"{"keytype":"SCHEMA","subject":"copy","version":2,"magic":1}"#,
            r#"{"subject":"copy","version":2,"id":9,"schema":"\"long\"","deleted":false}"#,
        ),
    ]);
    assert_eq!(r.app.registry.import(same, true).await.expect("import"), 2);
    let v1 = r.ok("GET", "/subjects/copy/versions/1", None).await;
    assert_eq!(
        (v1["id"].clone(), v1["schema"].clone()),
        (json!(1), json!("\"string\""))
    );
    let v2 = r.ok("GET", "/subjects/copy/versions/2", None).await;
    assert_eq!(
        (v2["id"].clone(), v2["schema"].clone()),
        (json!(9), json!("\"long\""))
    );
}

/// A reference may name a subject of another context (`:.b:money`, or
/// `:.:money` from inside a context). Such a version is referenced as
/// much as one referenced from its own context: `referencedby` lists the
/// referrer, and neither the version nor its subject can be deleted
/// (42206), so the referrer never names a version that is gone.
#[tokio::test]
async fn a_version_referenced_from_another_context_cannot_be_deleted() {
    let r = registry("cross-context").await;
    let money = json!({"schema": r#"{"type":"record","name":"Money","fields":[{"name":"cents","type":"long"}]}"#});
    let order = |subject: &str| {
        json!({"schema": r#"{"type":"record","name":"Order","fields":[{"name":"m","type":"Money"}]}"#,
               "references": [{"name": "Money", "subject": subject, "version": 1}]})
    };
    assert_eq!(r.register(":.b:money", money.clone()).await, 1);
    assert_eq!(r.register("money", money).await, 1);
    // From the default context into `.b`, and from `.c` into the default
    // context.
    let into_b = r.register("order", order(":.b:money")).await;
    let into_default = r.register(":.c:order", order(":.:money")).await;
    assert_eq!(
        r.ok("GET", "/subjects/:.b:money/versions/1/referencedby", None)
            .await,
        json!([into_b])
    );
    assert_eq!(
        r.ok("GET", "/subjects/money/versions/1/referencedby", None)
            .await,
        json!([into_default])
    );
    let offset = r.offset();
    for (subject, id) in [(":.b:money", into_b), ("money", into_default)] {
        let message = r
            .call("DELETE", &format!("/subjects/{subject}/versions/1"), None)
            .await
            .error(422, 42206);
        assert!(message.contains(&format!("[{id}]")), "{message}");
        r.call("DELETE", &format!("/subjects/{subject}"), None)
            .await
            .error(422, 42206);
    }
    assert_eq!(r.offset(), offset, "a referenced version was deleted");

    // Once the referrer is gone for good, the version can go too.
    r.ok("DELETE", "/subjects/:.c:order", None).await;
    r.call("DELETE", "/subjects/money/versions/1?permanent=true", None)
        .await
        .error(422, 42206);
    r.ok("DELETE", "/subjects/:.c:order?permanent=true", None)
        .await;
    r.ok("DELETE", "/subjects/money/versions/1", None).await;
    r.ok("DELETE", "/subjects/money/versions/1?permanent=true", None)
        .await;
}

/// Reads from `stream` until the server closes it, or `limit` passes:
/// whether it closed, and after how long.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    limit: std::time::Duration,
) -> (bool, std::time::Duration) {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buffer = [0u8; 1024];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok();
    (closed, started.elapsed())
}

/// A connection that never finishes its request's headers (or, over TLS,
/// its handshake) is closed after a while, as Confluent's Jetty closes
/// idle connections: before, each one held a task and a file descriptor
/// for good, so anyone who could reach the port (no credentials needed,
/// they are read with the headers) could use up the descriptors and
/// leave the registry unable to accept anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_its_headers_is_closed() {
    use tokio::io::AsyncWriteExt;
    let limit = evolve_registry::serve::IDLE_TIMEOUT + std::time::Duration::from_secs(15);

    // Plain TCP: half a request line, then nothing.
    let served = common::serve_tcp("stall").await;
    let address = served.url.trim_start_matches("http://").to_owned();
    let mut plain = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    plain
        .write_all(b"GET /subjects HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");

    // TLS: a connection that never says hello.
    let dir = temp_path("stall-tls");
    let dir = dir.parent().expect("dir");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl");
    assert!(made.success(), "openssl could not make a certificate");
    let tls = evolve_registry::serve::load_tls(&cert, &key).expect("tls");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let tls_address = listener.local_addr().expect("address");
    let registry = open_at(
        temp_path("stall-tls-db"),
        Settings::default(),
        DEFAULT_MAX_BODY,
    )
    .await;
    tokio::spawn(evolve_registry::serve::serve(
        Arc::clone(&registry.app),
        listener,
        Some(tls),
        std::future::pending(),
    ));
    let mut silent = tokio::net::TcpStream::connect(tls_address)
        .await
        .expect("connect");

    let ((plain_closed, plain_after), (tls_closed, tls_after)) = tokio::join!(
        closed_within(&mut plain, limit),
        closed_within(&mut silent, limit)
    );
    assert!(
        plain_closed,
        "a stalled request was still open after {plain_after:?}"
    );
    assert!(
        tls_closed,
        "a stalled TLS handshake was still open after {tls_after:?}"
    );

    // A request sent in time is answered as before.
    let mut prompt = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    prompt
        .write_all(b"GET /subjects HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut prompt, &mut answer)
        .await
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n[]"), "{answer}");
}

/// Two instances on one SQLite file, registering at once: one id and one
/// version for one schema, distinct ids and gapless versions for
/// different ones, each instance finding the other's ids; and a restart
/// replays all of it with the configuration and modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_sqlite_file_agree_and_a_restart_keeps_everything() {
    let path = temp_path("two-sqlite");
    let a = Arc::new(open_at(path.clone(), Settings::default(), DEFAULT_MAX_BODY).await);
    let b = Arc::new(open_at(path.clone(), Settings::default(), DEFAULT_MAX_BODY).await);
    let at_once = |bodies: Vec<serde_json::Value>| {
        let tasks: Vec<_> = bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                let r = Arc::clone(if i % 2 == 0 { &a } else { &b });
                tokio::spawn(async move {
                    let reply = r.call("POST", "/subjects/s/versions", Some(body)).await;
                    assert_eq!(reply.status, 200, "{}", reply.text);
                    let reply = reply.json();
                    (
                        reply["id"].as_u64().expect("id"),
                        reply["version"].as_u64().expect("version"),
                    )
                })
            })
            .collect();
        async move {
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.expect("task"));
            }
            answers
        }
    };
    let same = at_once(vec![record_with("a"); 8]).await;
    assert!(same.iter().all(|x| *x == (1, 1)), "{same:?}");
    let different = at_once((0..8).map(|i| record_with(&format!("f{i}"))).collect()).await;
    let (mut ids, mut versions): (Vec<u64>, Vec<u64>) = different.into_iter().unzip();
    ids.sort();
    versions.sort();
    assert_eq!(ids, (2..=9).collect::<Vec<u64>>());
    assert_eq!(versions, (2..=9).collect::<Vec<u64>>());
    for id in 1..=9 {
        for r in [&a, &b] {
            r.ok("GET", &format!("/schemas/ids/{id}"), None).await;
        }
    }

    a.ok("PUT", "/config/s", Some(json!({"compatibility": "NONE"})))
        .await;
    a.ok("DELETE", "/subjects/s/versions/9", None).await;
    b.ok("PUT", "/mode/s", Some(json!({"mode": "READONLY"})))
        .await;
    // A write on one instance sees the other's mode at once.
    a.call("POST", "/subjects/s/versions", Some(avro(json!("string"))))
        .await
        .error(422, 42205);
    let offset = a.offset().max(b.offset());
    drop((a, b));
    let c = open_at(path, Settings::default(), DEFAULT_MAX_BODY).await;
    assert_eq!(c.offset(), offset);
    assert_eq!(
        c.ok("GET", "/subjects/s/versions", None).await,
        json!([1, 2, 3, 4, 5, 6, 7, 8])
    );
    assert_eq!(
        c.ok("GET", "/config/s", None).await,
        json!({"compatibilityLevel": "NONE"})
    );
    assert_eq!(
        c.ok("GET", "/mode/s", None).await,
        json!({"mode": "READONLY"})
    );
    let reply = c.ok("GET", "/subjects/s/versions/1", None).await;
    assert_eq!(
        (reply["id"].clone(), reply["version"].clone()),
        (json!(1), json!(1))
    );
}
