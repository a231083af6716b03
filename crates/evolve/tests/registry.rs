//! `evolve registry` as users run it: the binary serving on a free port,
//! driven by Confluent's Python client (confluent-kafka, installed by
//! `cargo xtask test`), curl and openssl.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

const EVOLVE: &str = env!("CARGO_BIN_EXE_evolve");

fn temp_dir(hint: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "evolve-registry-cli-{}-{hint}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A running `evolve registry serve`; killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(EVOLVE)
            .args(["registry", "serve", "--listen", "127.0.0.1:0"])
            .args(args)
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
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require_python_client() {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import confluent_kafka.schema_registry.avro, google.protobuf, jsonschema",
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python3 with confluent-kafka[avro,json,protobuf,schemaregistry] is needed; \
         `cargo xtask test` installs it with pip"
    );
}

fn roundtrip(url: &str, extra: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/registry_roundtrip.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(url)
        .args(extra)
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("summary JSON")
}

fn assert_roundtrip_summary(summary: &serde_json::Value) {
    // Ids: Avro v1 = 1, Avro v2 = 2, JSON = 3, the imported .proto = 4,
    // the Protobuf schema = 5.
    assert_eq!(summary["avro_id"], 1, "{summary}");
    assert_eq!(summary["avro_versions"], 2, "{summary}");
    assert_eq!(summary["json_id"], 3, "{summary}");
    assert_eq!(summary["protobuf_id"], 5, "{summary}");
    assert_eq!(summary["protobuf_references"], 1, "{summary}");
    assert_eq!(summary["incompatible_http_status"], 409, "{summary}");
    assert_eq!(summary["incompatible_error_code"], 409, "{summary}");
    assert_eq!(summary["deleted_subject_error_code"], 40401, "{summary}");
    assert_eq!(summary["subjects"], 3, "{summary}");
}

#[test]
fn confluent_python_client_round_trips_avro_json_and_protobuf() {
    require_python_client();
    let dir = temp_dir("python");
    let storage = format!("sqlite:{}", dir.join("registry.db").display());
    let server = Server::start(&["--storage", &storage]);
    let summary = roundtrip(&server.url, &[]);
    assert_roundtrip_summary(&summary);
}

fn curl(args: &[&str]) -> (String, String) {
    let output = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (body.to_owned(), code.to_owned())
}

#[test]
fn tls_and_basic_auth_with_the_python_client_and_curl() {
    require_python_client();
    let dir = temp_dir("tls");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl could not make a certificate");

    // A users file with an argon2 hash made by the binary itself.
    let mut hasher = Command::new(EVOLVE)
        .args(["registry", "hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hash-password");
    use std::io::Write;
    hasher
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"s3cret\n")
        .expect("write password");
    let hashed = hasher.wait_with_output().expect("hash output");
    let hash = String::from_utf8(hashed.stdout).expect("utf-8");
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains("s3cret"));
    let users = dir.join("users");
    std::fs::write(&users, format!("ci:{}", hash.trim())).expect("users file");

    let storage = format!("sqlite:{}", dir.join("registry.db").display());
    let server = Server::start(&[
        "--storage",
        &storage,
        "--users",
        users.to_str().expect("path"),
        "--tls-cert",
        cert.to_str().expect("path"),
        "--tls-key",
        key.to_str().expect("path"),
    ]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let cacert = cert.to_str().expect("path");
    let subjects = format!("{}/subjects", server.url);

    let (body, code) = curl(&["--cacert", cacert, &subjects]);
    assert_eq!(code, "401", "{body}");
    assert!(body.contains("\"error_code\":401"), "{body}");
    let (_, code) = curl(&["--cacert", cacert, "-u", "ci:wrong", &subjects]);
    assert_eq!(code, "401");
    let (body, code) = curl(&["--cacert", cacert, "-u", "ci:s3cret", &subjects]);
    assert_eq!((body.as_str(), code.as_str()), ("[]", "200"));
    // Plain HTTP on the TLS port gets no answer.
    let (_, code) = curl(&[&subjects.replace("https://", "http://")]);
    assert_ne!(code, "200");

    // The Python client over TLS with basic auth, via the CA file.
    let summary = roundtrip(&server.url, &["ci", "s3cret", cacert]);
    assert_roundtrip_summary(&summary);
}

#[test]
fn import_reads_an_export_and_refuses_a_bad_one_whole() {
    let dir = temp_dir("import");
    let storage = format!("sqlite:{}", dir.join("registry.db").display());
    let export = dir.join("schemas.txt");
    std::fs::write(
        &export,
        concat!(
            r#"{"keytype":"SCHEMA","subject":"a","version":1,"magic":1}"#,
            "\t",
            r#"{"subject":"a","version":1,"id":10,"schema":"\"string\"","deleted":false}"#,
            "\n",
            r#"{"keytype":"CONFIG","subject":null,"magic":0}"#,
            "\t",
            r#"{"compatibilityLevel":"FULL"}"#,
            "\n"
        ),
    )
    .expect("export");
    let bad = dir.join("bad.txt");
    std::fs::write(
        &bad,
        format!(
            "{}\nthis line has no tab\n",
            std::fs::read_to_string(&export)
                .expect("read")
                .lines()
                .next()
                .expect("line")
        ),
    )
    .expect("bad export");

    let out = Command::new(EVOLVE)
        .args(["registry", "import"])
        .arg(&bad)
        .args(["--storage", &storage])
        .output()
        .expect("import");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("nothing was imported"), "{stderr}");

    let out = Command::new(EVOLVE)
        .args(["registry", "import"])
        .arg(&export)
        .args(["--storage", &storage])
        .output()
        .expect("import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("imported 2 records"), "{stdout}");
    assert!(stdout.contains("1 subject(s)"), "{stdout}");

    // Served afterwards: the imported id and the global level.
    let server = Server::start(&["--storage", &storage]);
    let (body, code) = curl(&[&format!("{}/subjects/a/versions/1", server.url)]);
    assert_eq!(code, "200");
    assert!(body.contains("\"id\":10"), "{body}");
    let (body, _) = curl(&[&format!("{}/config", server.url)]);
    assert_eq!(body, r#"{"compatibilityLevel":"FULL"}"#);
    drop(server);

    // A second import into the non-empty store is refused.
    let out = Command::new(EVOLVE)
        .args(["registry", "import"])
        .arg(&export)
        .args(["--storage", &storage])
        .output()
        .expect("import");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
}

#[test]
fn bad_storage_and_tls_files_are_refused_with_one_line() {
    let out = Command::new(EVOLVE)
        .args(["registry", "serve", "--storage", "mysql://root:pw@host/db"])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sqlite:PATH"), "{stderr}");
    assert!(!stderr.contains(":pw@"), "password leaked: {stderr}");

    let dir = temp_dir("badtls");
    let missing = dir.join("missing.pem");
    let out = Command::new(EVOLVE)
        .args(["registry", "serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing)
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing.pem"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
