//! Registry benchmark: requests per second for `GET /schemas/ids/{id}` and
//! for re-registering an existing schema, each next to a hello-world
//! handler on the same HTTP stack (axum on hyper, same runtime, same load
//! generator): the ceiling. Then the latency of a FULL_TRANSITIVE check of
//! a 200-field Avro record against 100 versions, through the engine and
//! through `POST /compatibility/subjects/{s}/versions`. Then the same
//! reads and re-registrations, and new registrations (a distinct schema in
//! a subject of its own per request), on the SQLite store and on the
//! Kafka store (`_schemas` in a single-node broker this benchmark starts:
//! `evolve_test::Kafka`).
//!
//! `cargo xtask bench registry [SECONDS] [CONNECTIONS] [STORES]` (defaults
//! 5, 32, `sqlite,kafka`; `sqlite` skips the broker).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use evolve_registry::access::Access;
use evolve_registry::http::{App, DEFAULT_MAX_BODY, DEFAULT_MAX_SCHEMA};
use evolve_registry::kafka::{KafkaLog, KafkaSpec};
use evolve_registry::metrics::Metrics;
use evolve_registry::service::{Registry, Settings};
use evolve_registry::store::{SqliteLog, Storage};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let connections: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let stores = args.next().unwrap_or_else(|| "sqlite,kafka".into());
    let kafka = stores.split(',').any(|s| s == "kafka");
    if stores.split(',').any(|s| s != "sqlite" && s != "kafka") {
        return Err(format!("stores {stores:?}: name sqlite, kafka or sqlite,kafka").into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(bench(Duration::from_secs(seconds), connections, kafka))
}

/// Serves a registry on `storage` on a free loopback port.
async fn serve_registry(storage: Storage) -> Result<SocketAddr, BoxError> {
    let registry = Registry::open(storage, Settings::default()).await?;
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: Metrics::default(),
        max_body: DEFAULT_MAX_BODY,
        max_schema: DEFAULT_MAX_SCHEMA,
        access: Access::new(([127, 0, 0, 1], 0).into(), false, &[])?,
    });
    spawn(evolve_registry::http::router(app)).await
}

async fn bench(duration: Duration, connections: usize, kafka: bool) -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!("evolve-bench-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let log = SqliteLog::open(&dir.join("registry.db"))?;
    let registry_addr = serve_registry(Storage::Sqlite(log)).await?;
    let hello_addr =
        spawn(Router::new().route("/hello", get(|| async { "{}" }).post(|| async { "{}" })))
            .await?;

    let schema = json!({"type": "record", "name": "Order", "namespace": "bench",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}]})
    .to_string();
    let body = json!({ "schema": schema }).to_string();
    let (status, text) = request(
        registry_addr,
        "POST",
        "/subjects/bench-value/versions",
        Some(&body),
    )
    .await?;
    if status != 200 {
        return Err(format!("seeding failed: {status} {text}").into());
    }
    println!(
        "registry benchmark: {} s per figure, {connections} keep-alive connections, 2 worker threads, loopback",
        duration.as_secs()
    );

    let hello = load(hello_addr, "GET", "/hello", None, duration, connections).await?;
    let by_id = load(
        registry_addr,
        "GET",
        "/schemas/ids/1",
        None,
        duration,
        connections,
    )
    .await?;
    let hello2 = load(
        hello_addr,
        "POST",
        "/hello",
        Some(&body),
        duration,
        connections,
    )
    .await?;
    let reregister = load(
        registry_addr,
        "POST",
        "/subjects/bench-value/versions",
        Some(&body),
        duration,
        connections,
    )
    .await?;
    println!("| figure | evolve req/s | hello-world req/s | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| GET /schemas/ids/1 | {by_id:.0} | {hello:.0} | {:.2}x |",
        by_id / hello
    );
    println!(
        "| POST /subjects/bench-value/versions (already registered) | {reregister:.0} | {hello2:.0} | {:.2}x |",
        reregister / hello2
    );

    // FULL_TRANSITIVE: a 200-field record against 100 versions.
    let version = |n: usize| {
        let fields: Vec<serde_json::Value> = (0..200 + n)
            .map(|i| {
                if i < 200 {
                    json!({"name": format!("f{i}"), "type": "long"})
                } else {
                    json!({"name": format!("f{i}"), "type": ["null", "string"], "default": null})
                }
            })
            .collect();
        json!({"type": "record", "name": "Wide", "namespace": "bench", "fields": fields})
            .to_string()
    };
    request(
        registry_addr,
        "PUT",
        "/config/wide",
        Some(r#"{"compatibility":"FULL_TRANSITIVE"}"#),
    )
    .await?;
    for n in 0..100 {
        let body = json!({ "schema": version(n) }).to_string();
        let (status, text) = request(
            registry_addr,
            "POST",
            "/subjects/wide/versions",
            Some(&body),
        )
        .await?;
        if status != 200 {
            return Err(format!("registering version {n}: {status} {text}").into());
        }
    }
    let new = evolve_compat::Schema::parse(evolve_compat::SchemaType::Avro, &version(100), &[])?;
    let previous: Vec<evolve_compat::Schema> = (0..100)
        .rev()
        .map(|n| evolve_compat::Schema::parse(evolve_compat::SchemaType::Avro, &version(n), &[]))
        .collect::<Result<_, _>>()?;
    let mut engine = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let findings = evolve_compat::check(evolve_compat::Mode::FullTransitive, &new, &previous);
        engine.push(started.elapsed());
        if !findings.is_empty() {
            return Err(format!("expected compatible, got {findings:?}").into());
        }
    }
    let check_body = json!({ "schema": version(100) }).to_string();
    let mut http = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let (status, text) = request(
            registry_addr,
            "POST",
            "/compatibility/subjects/wide/versions",
            Some(&check_body),
        )
        .await?;
        http.push(started.elapsed());
        if status != 200 || !text.contains("\"is_compatible\":true") {
            return Err(format!("check: {status} {text}").into());
        }
    }
    println!(
        "FULL_TRANSITIVE check, 200-field record against 100 versions: engine median {:.2} ms, HTTP (parse + check) median {:.2} ms (goal < 20 ms)",
        median(&mut engine).as_secs_f64() * 1000.0,
        median(&mut http).as_secs_f64() * 1000.0
    );

    // The stores: reads and re-registrations are answered from memory;
    // a new registration appends to the store.
    let mut rows = vec![(
        "sqlite",
        by_id,
        reregister,
        load_new(registry_addr, "sqlite", duration, connections).await?,
    )];
    // Kept until the end: dropping it stops the broker.
    let mut _broker = None;
    if kafka {
        let broker = tokio::task::spawn_blocking(evolve_test::Kafka::start).await??;
        let spec = KafkaSpec::parse(&format!("{}/_schemas", broker.url()))?;
        let addr = serve_registry(Storage::Kafka(Box::new(KafkaLog::open(&spec).await?))).await?;
        let (status, text) =
            request(addr, "POST", "/subjects/bench-value/versions", Some(&body)).await?;
        if status != 200 {
            return Err(format!("seeding the Kafka store failed: {status} {text}").into());
        }
        let by_id = load(addr, "GET", "/schemas/ids/1", None, duration, connections).await?;
        let reregister = load(
            addr,
            "POST",
            "/subjects/bench-value/versions",
            Some(&body),
            duration,
            connections,
        )
        .await?;
        let new = load_new(addr, "kafka", duration, connections).await?;
        rows.push(("kafka (single broker)", by_id, reregister, new));
        _broker = Some(broker);
    }
    println!("| store | GET /schemas/ids/1 req/s | re-register req/s | new registrations/s |");
    println!("|---|---|---|---|");
    for (store, by_id, reregister, new) in rows {
        println!("| {store} | {by_id:.0} | {reregister:.0} | {new:.0} |");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// New registrations per second over `duration` with `connections`
/// connections: each request a distinct schema in a subject of its own
/// (no compatibility check), so every one appends to the store.
async fn load_new(
    addr: SocketAddr,
    tag: &'static str,
    duration: Duration,
    connections: usize,
) -> Result<f64, BoxError> {
    let next = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (next, count) = (Arc::clone(&next), Arc::clone(&count));
        let mut sender = connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let schema =
                    json!({"type": "record", "name": format!("New{n}"), "namespace": "bench",
                    "fields": [{"name": "id", "type": "long"}]})
                    .to_string();
                let body = json!({ "schema": schema }).to_string();
                let path = format!("/subjects/new-{tag}-{n}/versions");
                let (status, text) = send(&mut sender, "POST", &path, Some(&body)).await?;
                if status != 200 {
                    return Err::<(), BoxError>(
                        format!("POST {path}: {status} {}", String::from_utf8_lossy(&text)).into(),
                    );
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn spawn(router: Router) -> Result<SocketAddr, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(addr)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, BoxError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn send(
    sender: &mut Sender,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, Bytes), BoxError> {
    sender.ready().await?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/vnd.schemaregistry.v1+json")
        .body(Full::new(Bytes::from(body.unwrap_or_default().to_owned())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, bytes))
}

async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), BoxError> {
    let mut sender = connect(addr).await?;
    let (status, bytes) = send(&mut sender, method, path, body).await?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Requests per second over `duration` with `connections` keep-alive
/// connections, each sending the next request as soon as the previous
/// answer is read. Every answer must be 200.
async fn load(
    addr: SocketAddr,
    method: &'static str,
    path: &'static str,
    body: Option<&str>,
    duration: Duration,
    connections: usize,
) -> Result<f64, BoxError> {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let count = Arc::clone(&count);
        let body = body.map(str::to_owned);
        let mut sender = connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let (status, text) = send(&mut sender, method, path, body.as_deref()).await?;
                if status != 200 {
                    return Err::<(), BoxError>(
                        format!(
                            "{method} {path}: {status} {}",
                            String::from_utf8_lossy(&text)
                        )
                        .into(),
                    );
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}
