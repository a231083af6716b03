//! Shared helpers: a registry on a fresh SQLite file, driven in process
//! through the router (the same code path as over a socket).

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use evolve_registry::access::Access;
use evolve_registry::http::{App, DEFAULT_MAX_BODY, DEFAULT_MAX_SCHEMA, router};
use evolve_registry::metrics::Metrics;
use evolve_registry::service::{Registry, Settings};
use evolve_registry::store::{SqliteLog, Storage};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub fn temp_path(hint: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "evolve-registry-{}-{}-{}",
        std::process::id(),
        hint,
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("registry.db")
}

pub struct TestRegistry {
    pub app: Arc<App>,
    pub router: Router,
    pub path: PathBuf,
}

pub async fn open_at(path: PathBuf, settings: Settings, max_body: usize) -> TestRegistry {
    open_with(path, settings, max_body, DEFAULT_MAX_SCHEMA).await
}

pub async fn open_with(
    path: PathBuf,
    settings: Settings,
    max_body: usize,
    max_schema: usize,
) -> TestRegistry {
    let log = SqliteLog::open(&path).expect("sqlite log");
    let registry = Registry::open(Storage::Sqlite(log), settings)
        .await
        .expect("registry");
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: Metrics::default(),
        max_body,
        max_schema,
        access: Access::new("127.0.0.1:8081".parse().expect("address"), false, &[])
            .expect("access"),
    });
    TestRegistry {
        router: router(Arc::clone(&app)),
        app,
        path,
    }
}

pub async fn registry(hint: &str) -> TestRegistry {
    open_at(temp_path(hint), Settings::default(), DEFAULT_MAX_BODY).await
}

pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("reply is not JSON ({e}): {}", self.text))
    }

    /// Asserts a Confluent error and returns its message.
    #[track_caller]
    pub fn error(&self, status: u16, code: u64) -> String {
        assert_eq!(self.status, status, "status of {}", self.text);
        let body = self.json();
        assert_eq!(body["error_code"], code, "error_code of {}", self.text);
        body["message"].as_str().expect("message").to_owned()
    }
}

impl TestRegistry {
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = match body {
            Some(body) => request
                .header(
                    header::CONTENT_TYPE,
                    "application/vnd.schemaregistry.v1+json",
                )
                .body(Body::from(body)),
            None => request.body(Body::empty()),
        }
        .expect("request");
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("response");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        Reply {
            status,
            content_type,
            text: String::from_utf8(bytes.to_vec()).expect("utf-8 body"),
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        self.raw(method, path, body.map(|b| b.to_string()), &[])
            .await
    }

    pub async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let reply = self.call(method, path, body).await;
        assert_eq!(reply.status, 200, "{method} {path}: {}", reply.text);
        reply.json()
    }

    /// Registers and returns the id.
    pub async fn register(&self, subject: &str, body: Value) -> u64 {
        let reply = self
            .ok("POST", &format!("/subjects/{subject}/versions"), Some(body))
            .await;
        reply["id"].as_u64().expect("id")
    }

    pub fn offset(&self) -> i64 {
        self.app.registry.read(|s| s.offset)
    }
}

pub fn avro(schema: Value) -> Value {
    serde_json::json!({ "schema": schema.to_string() })
}

/// A registry on a fresh SQLite file served over TCP on a free loopback
/// port, until the returned sender is dropped or sent to.
pub struct Served {
    pub url: String,
    pub registry: TestRegistry,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn serve_tcp(hint: &str) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let log = SqliteLog::open(&temp_path(hint)).expect("sqlite log");
    let registry = Registry::open(Storage::Sqlite(log), Settings::default())
        .await
        .expect("registry");
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: Metrics::default(),
        max_body: DEFAULT_MAX_BODY,
        max_schema: DEFAULT_MAX_SCHEMA,
        access: Access::new(address, false, &[]).expect("access"),
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(evolve_registry::serve::serve(
        Arc::clone(&app),
        listener,
        None,
        async move {
            let _ = stopped.await;
        },
    ));
    Served {
        url: format!("http://{address}"),
        registry: TestRegistry {
            router: router(Arc::clone(&app)),
            app,
            path: PathBuf::new(),
        },
        _stop: stop,
    }
}

/// Runs a script of `tests/python` with `python3`, which must have
/// confluent-kafka's schema registry client (`cargo xtask test` installs
/// it), and returns its one line of JSON output.
pub async fn python_client(script: &str, args: &[&str]) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let present = std::process::Command::new("python3")
        .args(["-c", "import confluent_kafka.schema_registry"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        present,
        "python3 with confluent-kafka[schemaregistry] is needed for this test; \
         run `cargo xtask test` or pip install -r crates/evolve/tests/python/requirements.txt"
    );
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    // The server runs on this runtime: wait for the script off it.
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(&path)
            .args(&args)
            .output()
    })
    .await
    .expect("join")
    .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}"))
}
