//! `evolve registry serve` against what a browser page, an oversized schema
//! or an unreachable store does to it, driven with curl (installed by
//! `cargo xtask test`) as users and attackers would.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The id of a registration's answer (Confluent 7.4.1+ answers the
/// version, the schema and more with it).
fn registered_id(reply: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(reply).ok()?["id"].as_u64()
}

const EVOLVE: &str = env!("CARGO_BIN_EXE_evolve");

fn temp_dir(hint: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "evolve-registry-hardening-{}-{hint}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A running `evolve registry serve` on a fresh SQLite store; killed on drop.
struct Server {
    child: Child,
    url: String,
    port: String,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Server {
        Server::start_with(dir, args, &[])
    }

    fn start_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let storage = format!("sqlite:{}", dir.join("registry.db").display());
        let mut child = Command::new(EVOLVE)
            .args(["registry", "serve", "--listen", "127.0.0.1:0", "--storage"])
            .arg(&storage)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn evolve registry serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        let port = url.rsplit(':').next().expect("port").to_owned();
        Server { child, url, port }
    }

    /// The log offset the registry has applied, from `/metrics`.
    fn offset(&self) -> i64 {
        let (body, code) = curl(&[&format!("{}/metrics", self.url)]);
        assert_eq!(code, "200", "{body}");
        body.lines()
            .find_map(|l| l.strip_prefix("evolve_registry_log_offset "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no offset in {body}"))
    }

    /// VmRSS and VmHWM of the server process, in bytes.
    fn memory(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {name} in {status}"))
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// curl's body and HTTP status.
fn curl(args: &[&str]) -> (String, String) {
    let output = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl (cargo xtask test installs it)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (body.to_owned(), code.to_owned())
}

fn register_body(schema: &str) -> String {
    serde_json::json!({ "schema": schema }).to_string()
}

#[track_caller]
fn assert_forbidden(body: &str, code: &str) {
    assert_eq!(code, "403", "{body}");
    assert_eq!(body.lines().count(), 1, "one line: {body}");
    let error: serde_json::Value = serde_json::from_str(body).expect("JSON error");
    assert_eq!(error["error_code"], 403, "{body}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Forbidden: ")),
        "{body}"
    );
}

#[test]
fn browser_pages_cannot_write_or_rebind_dns() {
    let dir = temp_dir("origin");
    let server = Server::start(&dir, &[]);
    let versions = format!("{}/subjects/orders-value/versions", server.url);
    let body =
        register_body(r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#);
    let offset = server.offset();

    // A page on another site posting a "simple" request (no preflight).
    let (reply, code) = curl(&[
        "-X",
        "POST",
        "-H",
        "Origin: http://evil.example",
        "-H",
        "Content-Type: text/plain",
        "--data",
        &body,
        &versions,
    ]);
    assert_forbidden(&reply, &code);
    assert_eq!(
        server.offset(),
        offset,
        "a refused write appended to the log"
    );

    // DNS rebinding: evil.example resolved to 127.0.0.1; reads and writes.
    let forged = "Host: evil.example:".to_owned() + &server.port;
    let (reply, code) = curl(&["-H", &forged, &format!("{}/subjects", server.url)]);
    assert_forbidden(&reply, &code);
    let (reply, code) = curl(&[
        "-X",
        "POST",
        "-H",
        &forged,
        "-H",
        "Content-Type: application/vnd.schemaregistry.v1+json",
        "--data",
        &body,
        &versions,
    ]);
    assert_forbidden(&reply, &code);
    let (reply, code) = curl(&[
        "-X",
        "DELETE",
        "-H",
        &forged,
        &format!("{}/config", server.url),
    ]);
    assert_forbidden(&reply, &code);
    assert_eq!(
        server.offset(),
        offset,
        "a refused write appended to the log"
    );

    // No CORS headers on any answer.
    let headers = Command::new("curl")
        .args([
            "-s",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-H",
            "Origin: http://evil.example",
        ])
        .arg(format!("{}/subjects", server.url))
        .output()
        .expect("curl");
    let headers = String::from_utf8_lossy(&headers.stdout).to_ascii_lowercase();
    assert!(headers.starts_with("http/1.1 200"), "{headers}");
    assert!(!headers.contains("access-control-"), "{headers}");

    // The same write from a client (no Origin), from the registry's own
    // origin, and with Host localhost: accepted.
    let (reply, code) = curl(&[
        "-H",
        "Content-Type: application/vnd.schemaregistry.v1+json",
        "--data",
        &body,
        &versions,
    ]);
    assert_eq!((registered_id(&reply), code.as_str()), (Some(1), "200"));
    assert_eq!(server.offset(), offset + 1);
    let own = format!("Origin: {}", server.url);
    let (reply, code) = curl(&[
        "-X",
        "PUT",
        "-H",
        &own,
        "-H",
        "Content-Type: application/json",
        "--data",
        r#"{"compatibility":"FULL"}"#,
        &format!("{}/config", server.url),
    ]);
    assert_eq!(code, "200", "{reply}");
    let localhost = format!("Host: localhost:{}", server.port);
    let (reply, code) = curl(&["-H", &localhost, &format!("{}/subjects", server.url)]);
    assert_eq!(
        (reply.as_str(), code.as_str()),
        (r#"["orders-value"]"#, "200")
    );
}

#[test]
fn allowed_hosts_extend_the_names_a_registry_answers_to() {
    let dir = temp_dir("allowed");
    let server = Server::start(&dir, &["--allowed-host", "registry.example.com"]);
    let subjects = format!("{}/subjects", server.url);
    let (reply, code) = curl(&["-H", "Host: registry.example.com", &subjects]);
    assert_eq!((reply.as_str(), code.as_str()), ("[]", "200"));
    let (reply, code) = curl(&["-H", "Host: other.example.com", &subjects]);
    assert_forbidden(&reply, &code);

    let out = Command::new(EVOLVE)
        .args(["registry", "serve", "--listen", "127.0.0.1:0"])
        .args(["--allowed-host", "https://registry.example.com"])
        .arg("--storage")
        .arg(format!("sqlite:{}", dir.join("other.db").display()))
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allowed-host"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// An Avro record of about `bytes` of text, its fields named after `tag`.
fn big_avro(tag: &str, bytes: usize) -> String {
    let mut fields = Vec::new();
    let mut size = 0;
    let mut n = 0;
    while size < bytes {
        let field = serde_json::json!({
            "name": format!("f_{tag}_{n:06}"),
            "type": ["null", "string"],
            "default": null,
            "doc": format!("field {n} of a large record"),
        });
        size += field.to_string().len() + 1;
        fields.push(field);
        n += 1;
    }
    serde_json::json!({"type": "record", "name": format!("Big{tag}"), "fields": fields}).to_string()
}

fn post_file(url: &str, body: &str, dir: &Path) -> (String, String) {
    let file = dir.join("body.json");
    std::fs::write(&file, body).expect("body file");
    curl(&[
        "-H",
        "Content-Type: application/vnd.schemaregistry.v1+json",
        "--data-binary",
        &format!("@{}", file.display()),
        url,
    ])
}

#[test]
fn schemas_over_max_schema_bytes_are_refused_and_nothing_is_appended() {
    let dir = temp_dir("max-schema");
    let server = Server::start(&dir, &["--max-schema-bytes", "100000"]);
    let versions = format!("{}/subjects/big-value/versions", server.url);
    let over = big_avro("a", 100_001);
    let offset = server.offset();
    let (reply, code) = post_file(&versions, &register_body(&over), &dir);
    assert_eq!(code, "422", "{reply}");
    let error: serde_json::Value = serde_json::from_str(&reply).expect("JSON");
    assert_eq!(error["error_code"], 42209, "{reply}");
    let message = error["message"].as_str().expect("message");
    assert!(
        message.starts_with("Register operation failed because schema is too large: "),
        "{message}"
    );
    assert!(
        message.contains(&format!("{} bytes", over.len())),
        "{message}"
    );
    assert!(
        message.contains("100000 bytes (--max-schema-bytes)"),
        "{message}"
    );
    assert_eq!(
        server.offset(),
        offset,
        "a refused schema appended to the log"
    );

    // The request body may be twice the schema: the escaped quotes.
    let under = big_avro("b", 90_000);
    assert!(under.len() <= 100_000);
    let (reply, code) = post_file(&versions, &register_body(&under), &dir);
    assert_eq!((registered_id(&reply), code.as_str()), (Some(1), "200"));
    assert_eq!(server.offset(), offset + 1);
}

#[test]
fn large_schemas_cost_the_registry_about_their_text() {
    const SCHEMA: usize = 3 * 1024 * 1024;
    let dir = temp_dir("memory");
    // glibc raises its mmap threshold to the size of each large block freed,
    // after which freed request buffers stay in the heap and VmRSS counts
    // them by chance of fragmentation. A fixed threshold returns every
    // block over it to the system on free, so that VmRSS measures what the
    // registry keeps.
    let server = Server::start_with(&dir, &[], &[("MALLOC_MMAP_THRESHOLD_", "131072")]);
    let schemas: Vec<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|tag| big_avro(tag, SCHEMA))
        .collect();
    let (rss_start, _) = server.memory();
    let register = |i: usize| {
        let url = format!("{}/subjects/big-{i}/versions", server.url);
        let (reply, code) = post_file(&url, &register_body(&schemas[i]), &dir.join(i.to_string()));
        assert_eq!(code, "200", "{reply}");
    };
    for i in 0..schemas.len() {
        std::fs::create_dir_all(dir.join(i.to_string())).expect("dir");
    }
    // The first registrations (at once, as on both worker threads) pay for
    // the parser's working set.
    std::thread::scope(|scope| {
        scope.spawn(|| register(0));
        scope.spawn(|| register(1));
    });
    let (rss_warm, _) = server.memory();
    for i in 2..schemas.len() {
        register(i);
    }
    let (rss_end, hwm_end) = server.memory();
    let text: u64 = schemas.iter().map(|s| s.len() as u64).sum();
    let per_schema = (rss_end.saturating_sub(rss_warm)) / 3;
    eprintln!(
        "5 schemas of {} bytes: VmRSS {} -> {} (after 2) -> {} MB, VmHWM {} MB, {} MB per schema after the first two",
        SCHEMA,
        rss_start >> 20,
        rss_warm >> 20,
        rss_end >> 20,
        hwm_end >> 20,
        per_schema >> 20
    );
    // Its text once (an id's dedup key is a digest, not a second copy),
    // and what the request itself took.
    assert!(
        per_schema <= 3 * SCHEMA as u64,
        "each further schema of {SCHEMA} bytes took {per_schema} bytes"
    );
    // The Avro parser's working set (about twenty times the text of the
    // schema it parses) once, not once per worker thread.
    assert!(
        hwm_end - rss_start <= 12 * text,
        "five schemas ({text} bytes of text) took the registry's high-water mark from {rss_start} to {hwm_end} bytes"
    );
}

#[test]
fn store_errors_name_the_flag_and_are_said_once() {
    let out = Command::new(EVOLVE)
        .args(["registry", "serve", "--listen", "127.0.0.1:0"])
        .args([
            "--storage",
            "postgres://registry:secret@127.0.0.1:1/registry",
        ])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--storage"), "{stderr}");
    assert!(!stderr.contains("--database-url"), "{stderr}");
    assert!(!stderr.contains("secret"), "password leaked: {stderr}");
    assert_eq!(stderr.matches("could not connect").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("127.0.0.1:1").count(), 1, "{stderr}");

    let dir = temp_dir("store");
    let out = Command::new(EVOLVE)
        .args(["registry", "serve", "--listen", "127.0.0.1:0", "--storage"])
        .arg(format!("sqlite:{}", dir.display()))
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches(&dir.display().to_string()).count(),
        1,
        "{stderr}"
    );

    // A flag refused, or a port taken: no store file is left behind.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").to_string();
    let db = dir.join("new.db");
    for flags in [
        vec!["--listen", port.as_str()],
        vec!["--listen", "127.0.0.1:0", "--allowed-host", ""],
        // Off loopback without users: anyone could write.
        vec!["--listen", "0.0.0.0:0"],
    ] {
        let out = Command::new(EVOLVE)
            .args(["registry", "serve"])
            .args(&flags)
            .arg("--storage")
            .arg(format!("sqlite:{}", db.display()))
            .output()
            .expect("serve");
        assert_eq!(out.status.code(), Some(1), "{flags:?}");
        assert!(!db.exists(), "{flags:?} left {}", db.display());
        if flags[1] == "0.0.0.0:0" {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("is not a loopback address and no --users file is given")
                    && stderr.contains("--no-auth"),
                "{stderr}"
            );
        }
    }
}

#[test]
fn schema_errors_name_json_schema_and_the_missing_import() {
    let dir = temp_dir("messages");
    let server = Server::start(&dir, &[]);
    let post = |subject: &str, body: serde_json::Value| {
        curl(&[
            "-H",
            "Content-Type: application/vnd.schemaregistry.v1+json",
            "--data",
            &body.to_string(),
            &format!("{}/subjects/{subject}/versions", server.url),
        ])
    };
    let (reply, code) = post(
        "j",
        serde_json::json!({"schemaType": "JSON", "schema": "{\"type\": 5}"}),
    );
    assert_eq!(code, "422", "{reply}");
    assert!(reply.contains("Invalid JSON Schema: "), "{reply}");
    let (reply, code) = post(
        "j",
        serde_json::json!({"schemaType": "JSON", "schema": "{"}),
    );
    assert_eq!(code, "422", "{reply}");
    assert!(
        reply.contains("Invalid JSON Schema: not valid JSON"),
        "{reply}"
    );

    let order = "syntax = \"proto3\";\nimport \"common.proto\";\nmessage Order { common.Money total = 1; }\n";
    let (reply, code) = post(
        "p",
        serde_json::json!({"schemaType": "PROTOBUF", "schema": order}),
    );
    assert_eq!(code, "422", "{reply}");
    let error: serde_json::Value = serde_json::from_str(&reply).expect("JSON");
    assert_eq!(error["error_code"], 42201);
    let message = error["message"].as_str().expect("message");
    assert!(
        message.starts_with("Invalid Protobuf schema: import \"common.proto\" not found"),
        "{message}"
    );
    assert!(
        message.contains("pass it as a reference in \"references\""),
        "{message}"
    );

    // The same through `evolve compat check`.
    let file = dir.join("order.proto");
    std::fs::write(&file, order).expect("write");
    let json = dir.join("bad.json");
    std::fs::write(&json, "{\"type\": 5}").expect("write");
    let out = Command::new(EVOLVE)
        .args(["compat", "check", "--type", "protobuf"])
        .arg(&file)
        .arg(&file)
        .output()
        .expect("compat check");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid Protobuf schema: import \"common.proto\" not found"),
        "{stderr}"
    );
    assert!(
        stderr.contains("pass it as a reference with --reference common.proto=FILE"),
        "{stderr}"
    );
    let out = Command::new(EVOLVE)
        .args(["compat", "check", "--type", "json"])
        .arg(&json)
        .arg(&json)
        .output()
        .expect("compat check");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.json: invalid JSON Schema: "),
        "{stderr}"
    );
}
