//! `evolve registry serve --storage kafka://...` as users run it: three
//! instances on one topic of the test harness's broker
//! (`evolve_test::kafka`), a stream of registrations spread across them
//! that one instance writes and the others forward to it (with the
//! caller's credentials, over https with the certificate checked), and
//! the instance that writes killed with SIGKILL in the middle of it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const EVOLVE: &str = env!("CARGO_BIN_EXE_evolve");

/// A running `evolve registry serve`; killed on drop.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(storage: &str) -> Server {
        Server::start_with(storage, &[], None)
    }

    /// With more arguments, its log (stderr) in `log` when given.
    fn start_with(storage: &str, args: &[&str], log: Option<&Path>) -> Server {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::null(),
        };
        let mut child = Command::new(EVOLVE)
            .args(["registry", "serve", "--listen", "127.0.0.1:0"])
            .args(["--poll-interval-ms", "200"])
            .args(args)
            .env("EVOLVE_REGISTRY_STORAGE", storage)
            .stdout(Stdio::piped())
            .stderr(stderr)
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
            .unwrap_or_else(|| panic!("no URL in {line:?}"));
        assert!(line.contains(storage), "{line}");
        assert!(line.contains(&format!("advertised as {url}")), "{line}");
        Server {
            child,
            address: url
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .to_owned(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What an HTTP request came to.
#[derive(Debug)]
enum Answer {
    Status(u16, String),
    /// No answer: the connection failed or was cut.
    Failed(String),
}

fn http(address: &str, method: &str, path: &str, body: Option<&str>) -> Answer {
    http_as(address, method, path, body, None)
}

/// With basic credentials `user:password`.
fn http_as(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> Answer {
    let authorization = credentials
        .map(|(user, password)| {
            format!(
                "Authorization: Basic {}\r\n",
                base64(format!("{user}:{password}").as_bytes())
            )
        })
        .unwrap_or_default();
    let attempt = || -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(40)))?;
        let body = body.unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Content-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no status in {text:?}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        Ok((status, body.to_owned()))
    };
    match attempt() {
        Ok((status, body)) => Answer::Status(status, body),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn schema(n: usize) -> String {
    serde_json::json!({"type": "record", "name": "R", "namespace": "failover",
        "fields": [{"name": format!("f{n}"), "type": "int", "default": 0}]})
    .to_string()
}

/// Which of the instances at `addresses` writes, as the writer endpoint
/// of the instance at `address` says.
fn writer_of(address: &str, addresses: &[String]) -> Option<usize> {
    writer_of_as(address, addresses, None)
}

fn writer_of_as(
    address: &str,
    addresses: &[String],
    credentials: Option<(&str, &str)>,
) -> Option<usize> {
    let answer = match http_as(address, "GET", "/v1/metadata/writer", None, credentials) {
        Answer::Status(200, text) => json(&text),
        other => panic!("GET /v1/metadata/writer: {other:?}"),
    };
    let url = answer["writer"]["url"].as_str()?;
    addresses
        .iter()
        .position(|a| url.ends_with(&format!("://{a}")))
}

/// The value of a metric of the instance at `address` (`name` with its
/// labels, if any).
fn metric(address: &str, name: &str) -> u64 {
    metric_as(address, name, None)
}

fn metric_as(address: &str, name: &str, credentials: Option<(&str, &str)>) -> u64 {
    let text = match http_as(address, "GET", "/metrics", None, credentials) {
        Answer::Status(200, text) => text,
        other => panic!("GET /metrics: {other:?}"),
    };
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

const SUBJECTS: usize = 4;
const REGISTRATIONS: usize = 60;
const CLIENTS: usize = 3;
/// The writer is killed after this many registrations were answered 200.
const KILL_AFTER: usize = 20;

#[test]
fn killing_the_writer_mid_stream_loses_no_registration_and_another_takes_over() {
    let kafka = evolve_test::kafka();
    let topic = format!("failover-{}", std::process::id());
    let storage = format!("{}/{topic}", kafka.url());
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&storage)).collect();
    let addresses: Vec<String> = servers.iter().map(|s| s.address.clone()).collect();
    let servers = Arc::new(Mutex::new(
        servers.into_iter().map(Some).collect::<Vec<_>>(),
    ));
    match http(
        &addresses[0],
        "PUT",
        "/config",
        Some(r#"{"compatibility":"NONE"}"#),
    ) {
        Answer::Status(200, _) => {}
        other => panic!("PUT /config: {other:?}"),
    }

    // Instance 0 wrote the configuration: it writes, the others forward.
    let writer = writer_of(&addresses[1], &addresses).expect("a writer");
    assert_eq!(writer, 0, "the instance that wrote first writes");

    // Registration n: schema n in subject n % SUBJECTS, sent to the live
    // instance n % live (the others forward it to the writer). Once
    // KILL_AFTER were answered 200, the killer SIGKILLs the writer a few
    // milliseconds after a registration was sent, so that one is cut off
    // in the middle.
    let next = Arc::new(AtomicUsize::new(0));
    let ok_count = Arc::new(AtomicUsize::new(0));
    let in_flight: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let killed: Arc<Mutex<Option<(usize, Instant, usize)>>> = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    // (n, instance, answer, when)
    let results = Arc::new(Mutex::new(Vec::<(usize, usize, Answer, Instant)>::new()));
    let killer = {
        let (ok_count, in_flight, killed, done, servers) = (
            Arc::clone(&ok_count),
            Arc::clone(&in_flight),
            Arc::clone(&killed),
            Arc::clone(&done),
            Arc::clone(&servers),
        );
        std::thread::spawn(move || {
            let busy = || {
                in_flight
                    .iter()
                    .map(|n| n.load(Ordering::SeqCst))
                    .sum::<usize>()
            };
            while !done.load(Ordering::SeqCst) {
                let ok = ok_count.load(Ordering::SeqCst);
                if ok >= KILL_AFTER && (busy() > 0 || ok >= KILL_AFTER + 15) {
                    std::thread::sleep(Duration::from_millis(3));
                    let cut = busy();
                    if let Some(mut server) = servers.lock().unwrap()[writer].take() {
                        server.child.kill().expect("SIGKILL the writer");
                        let _ = server.child.wait();
                    }
                    *killed.lock().unwrap() = Some((writer, Instant::now(), cut));
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (next, ok_count, in_flight, killed, results, addresses) = (
            Arc::clone(&next),
            Arc::clone(&ok_count),
            Arc::clone(&in_flight),
            Arc::clone(&killed),
            Arc::clone(&results),
            addresses.clone(),
        );
        clients.push(std::thread::spawn(move || {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= REGISTRATIONS {
                    return;
                }
                let victim = killed.lock().unwrap().map(|(v, _, _)| v);
                let live: Vec<usize> = (0..addresses.len())
                    .filter(|i| Some(*i) != victim)
                    .collect();
                let instance = live[n % live.len()];
                let body = serde_json::json!({"schema": schema(n)}).to_string();
                in_flight[instance].fetch_add(1, Ordering::SeqCst);
                let answer = http(
                    &addresses[instance],
                    "POST",
                    &format!("/subjects/s{}/versions", n % SUBJECTS),
                    Some(&body),
                );
                in_flight[instance].fetch_sub(1, Ordering::SeqCst);
                let now = Instant::now();
                if let Answer::Status(200, _) = answer {
                    ok_count.fetch_add(1, Ordering::SeqCst);
                }
                results.lock().unwrap().push((n, instance, answer, now));
            }
        }));
    }
    for client in clients {
        client.join().expect("client thread");
    }
    done.store(true, Ordering::SeqCst);
    killer.join().expect("killer thread");
    let (victim, killed_at, cut) = killed.lock().unwrap().expect("the writer was killed");
    eprintln!("killed the writer, instance {victim}, with {cut} registration(s) in flight");
    let results = std::mem::take(&mut *results.lock().unwrap());
    assert_eq!(results.len(), REGISTRATIONS);

    // Every answer is a 200 with an id, or failed visibly: no answer (the
    // killed instance) or a 5xx. Nothing else (a 4xx would be a bug).
    let mut ids: BTreeMap<usize, u64> = BTreeMap::new();
    let mut failed = Vec::new();
    for (n, instance, answer, at) in &results {
        match answer {
            Answer::Status(200, body) => {
                let id = json(body)["id"].as_u64().expect("an id");
                ids.insert(*n, id);
            }
            Answer::Status(status, body) if *status >= 500 => {
                failed.push((*n, *instance, format!("{status} {body}")))
            }
            Answer::Failed(why) => failed.push((*n, *instance, why.clone())),
            Answer::Status(status, body) => {
                panic!("registration {n} on instance {instance} answered {status} {body}")
            }
        }
        let _ = at;
    }
    eprintln!(
        "{} registrations answered 200, {} failed visibly: {failed:?}",
        ids.len(),
        failed.len()
    );
    assert!(
        ids.len() >= REGISTRATIONS - 2 * CLIENTS,
        "too many failures: {failed:?}"
    );
    // Distinct schemas got distinct ids.
    let distinct: BTreeSet<u64> = ids.values().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an id was given twice: {ids:?}");

    // A new writer took over within seconds: the first registration
    // answered 200 after the kill.
    let first_after = results
        .iter()
        .filter(|(_, _, a, at)| matches!(a, Answer::Status(200, _)) && *at > killed_at)
        .map(|(_, _, _, at)| *at)
        .min()
        .expect("registrations succeeded after the kill");
    let takeover = first_after - killed_at;
    eprintln!("first registration after the kill: {takeover:?}");
    assert!(
        takeover < Duration::from_secs(10),
        "took over after {takeover:?}"
    );
    let after_kill = results
        .iter()
        .filter(|(_, _, a, at)| matches!(a, Answer::Status(200, _)) && *at > killed_at)
        .count();
    assert!(
        after_kill >= 20,
        "only {after_kill} registrations succeeded after the kill"
    );

    // Nothing answered 200 is lost: both survivors find every one, with
    // its id, by lookup and by id.
    let survivors: Vec<&String> = (0..addresses.len())
        .filter(|i| *i != victim)
        .map(|i| &addresses[i])
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // One survivor writes now, and both know it.
    let new_writer = writer_of(survivors[0], &addresses);
    assert!(
        new_writer.is_some_and(|w| w != victim),
        "a survivor writes: {new_writer:?}"
    );
    assert_eq!(writer_of(survivors[1], &addresses), new_writer);
    let is_writer: Vec<u64> = survivors
        .iter()
        .map(|a| metric(a, "evolve_registry_writer"))
        .collect();
    assert_eq!(is_writer.iter().sum::<u64>(), 1, "{is_writer:?}");
    for address in &survivors {
        for (n, id) in &ids {
            let body = serde_json::json!({"schema": schema(*n)}).to_string();
            match http(
                address,
                "POST",
                &format!("/subjects/s{}", n % SUBJECTS),
                Some(&body),
            ) {
                Answer::Status(200, text) => {
                    assert_eq!(json(&text)["id"], *id, "registration {n} on {address}")
                }
                other => panic!("registration {n} (id {id}) is not found on {address}: {other:?}"),
            }
            match http(address, "GET", &format!("/schemas/ids/{id}"), None) {
                Answer::Status(200, text) => assert_eq!(json(&text)["schema"], schema(*n)),
                other => panic!("GET /schemas/ids/{id} on {address}: {other:?}"),
            }
        }
    }

    // Versions without gaps in every subject, the same on both survivors,
    // one id per version and no id in two versions; the topic holds one
    // committed record per version (none written twice) and the config.
    let mut all_ids = BTreeSet::new();
    let mut total_versions = 0;
    for subject in 0..SUBJECTS {
        let mut seen = Vec::new();
        for address in &survivors {
            let versions = match http(
                address,
                "GET",
                &format!("/subjects/s{subject}/versions"),
                None,
            ) {
                Answer::Status(200, text) => json(&text),
                other => panic!("versions of s{subject}: {other:?}"),
            };
            seen.push(versions);
        }
        assert_eq!(seen[0], seen[1], "the survivors disagree on s{subject}");
        let versions: Vec<u64> = seen[0]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| v.as_u64().expect("version"))
            .collect();
        assert_eq!(
            versions,
            (1..=versions.len() as u64).collect::<Vec<_>>(),
            "gaps in s{subject}"
        );
        for v in &versions {
            match http(
                survivors[0],
                "GET",
                &format!("/subjects/s{subject}/versions/{v}"),
                None,
            ) {
                Answer::Status(200, text) => {
                    assert!(
                        all_ids.insert(json(&text)["id"].as_u64().expect("id")),
                        "an id in two versions"
                    );
                }
                other => panic!("s{subject} version {v}: {other:?}"),
            }
        }
        total_versions += versions.len();
    }
    assert!(total_versions >= ids.len() && total_versions <= REGISTRATIONS);
    let records = kafka
        .read_committed(&topic, Duration::from_secs(30))
        .expect("read the topic");
    let schema_records = records
        .iter()
        .filter(|r| r.key_text().contains("\"keytype\":\"SCHEMA\""))
        .count();
    assert_eq!(
        schema_records, total_versions,
        "a registration was written twice"
    );
    assert_eq!(
        records.len(),
        total_versions + 1,
        "the SCHEMA records and one CONFIG"
    );
    // The side topic names the first writer and whoever took over.
    let writers = kafka
        .read_committed(&format!("{topic}_writer"), Duration::from_secs(30))
        .expect("read the writer topic");
    eprintln!("{} writer records", writers.len());
    assert!(writers.len() >= 2, "{writers:?}");
}

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-registry-kafka-{hint}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// An argon2 hash of `password` by `evolve registry hash-password`.
fn hash_password(password: &str) -> String {
    let mut hasher = Command::new(EVOLVE)
        .args(["registry", "hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hash-password");
    hasher
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{password}\n").as_bytes())
        .expect("write password");
    let output = hasher.wait_with_output().expect("hash output");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

#[test]
fn writes_spread_over_three_instances_are_written_by_one_with_the_callers_credentials() {
    let kafka = evolve_test::kafka();
    let dir = temp_dir("forward");
    let storage = format!("{}/forward-{}", kafka.url(), std::process::id());
    let (alice, mallory) = (
        hash_password("alice-secret-1"),
        hash_password("mallory-secret-2"),
    );
    // The writer knows alice; the other two know alice and mallory.
    let writer_users = dir.join("writer-users");
    std::fs::write(&writer_users, format!("alice:{alice}\n")).expect("users");
    let other_users = dir.join("other-users");
    std::fs::write(&other_users, format!("alice:{alice}\nmallory:{mallory}\n")).expect("users");
    let logs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("serve-{i}.log"))).collect();
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            let users = if i == 0 { &writer_users } else { &other_users };
            Server::start_with(
                &storage,
                &[
                    "--users",
                    users.to_str().expect("path"),
                    "--log-level",
                    "info",
                ],
                Some(&logs[i]),
            )
        })
        .collect();
    let addresses: Vec<String> = servers.iter().map(|s| s.address.clone()).collect();
    let alice = Some(("alice", "alice-secret-1"));
    let mallory = Some(("mallory", "mallory-secret-2"));
    match http_as(
        &addresses[0],
        "PUT",
        "/config",
        Some(r#"{"compatibility":"NONE"}"#),
        alice,
    ) {
        Answer::Status(200, _) => {}
        other => panic!("PUT /config: {other:?}"),
    }

    // Registration n goes to instance n % 3.
    const COUNT: usize = 12;
    let mut ids = BTreeMap::new();
    for n in 0..COUNT {
        let body = serde_json::json!({"schema": schema(n)}).to_string();
        match http_as(
            &addresses[n % 3],
            "POST",
            &format!("/subjects/s{}/versions", n % SUBJECTS),
            Some(&body),
            alice,
        ) {
            Answer::Status(200, text) => {
                ids.insert(n, json(&text)["id"].as_u64().expect("id"));
            }
            other => panic!("registration {n} on instance {}: {other:?}", n % 3),
        }
    }
    let distinct: BTreeSet<u64> = ids.values().copied().collect();
    assert_eq!(distinct.len(), COUNT, "{ids:?}");

    // Exactly one instance appended: instance 0, once taken over; the
    // others forwarded every registration they received.
    let count = |i: usize, name: &str| metric_as(&addresses[i], name, alice);
    let commits: Vec<u64> = (0..3)
        .map(|i| count(i, "evolve_registry_writer_commits_total"))
        .collect();
    assert_eq!(commits, [1 + COUNT as u64, 0, 0]);
    let takeovers: Vec<u64> = (0..3)
        .map(|i| count(i, "evolve_registry_writer_takeovers_total"))
        .collect();
    assert_eq!(takeovers, [1, 0, 0]);
    let forwarded: Vec<u64> = (0..3)
        .map(|i| count(i, "evolve_registry_forwarded_total{outcome=\"answered\"}"))
        .collect();
    assert_eq!(forwarded, [0, COUNT as u64 / 3, COUNT as u64 / 3]);
    for address in &addresses {
        assert_eq!(writer_of_as(address, &addresses, alice), Some(0));
    }
    // Every registration is readable on every instance.
    for address in &addresses {
        for (n, id) in &ids {
            match http_as(address, "GET", &format!("/schemas/ids/{id}"), None, alice) {
                Answer::Status(200, text) => assert_eq!(json(&text)["schema"], schema(*n)),
                other => panic!("GET /schemas/ids/{id} on {address}: {other:?}"),
            }
        }
    }

    // mallory passes instance 1's check but not the writer's: refused,
    // and nothing registered. Without credentials instance 1 refuses by
    // itself.
    let body = serde_json::json!({"schema": schema(100)}).to_string();
    match http_as(
        &addresses[1],
        "POST",
        "/subjects/mallory/versions",
        Some(&body),
        mallory,
    ) {
        Answer::Status(401, text) => assert_eq!(json(&text)["error_code"], 401),
        other => panic!("mallory's registration through instance 1: {other:?}"),
    }
    match http_as(&addresses[1], "GET", "/subjects", None, mallory) {
        Answer::Status(200, _) => {}
        other => panic!("mallory reads through instance 1: {other:?}"),
    }
    match http(
        &addresses[2],
        "POST",
        "/subjects/anyone/versions",
        Some(&body),
    ) {
        Answer::Status(401, _) => {}
        other => panic!("a registration without credentials: {other:?}"),
    }
    match http_as(
        &addresses[0],
        "GET",
        "/subjects/mallory/versions",
        None,
        alice,
    ) {
        Answer::Status(404, _) => {}
        other => panic!("mallory's subject: {other:?}"),
    }
    assert_eq!(
        count(1, "evolve_registry_forwarded_total{outcome=\"answered\"}"),
        COUNT as u64 / 3 + 1
    );
    assert_eq!(
        count(2, "evolve_registry_forwarded_total{outcome=\"answered\"}"),
        COUNT as u64 / 3
    );

    // The logs say where writes went and never hold a password.
    drop(servers);
    let logs: Vec<String> = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).expect("log"))
        .collect();
    assert!(
        logs[1].contains(&format!("forwarded_to=\"http://{}\"", addresses[0])),
        "{}",
        logs[1]
    );
    for log in &logs {
        for secret in ["alice-secret-1", "mallory-secret-2", "Basic "] {
            assert!(!log.contains(secret), "{secret} in the log: {log}");
        }
    }
}

/// A self-signed certificate for localhost and 127.0.0.1: (cert, key).
fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl could not make a certificate");
    (cert, key)
}

/// An https request with curl, the certificate checked against `ca`:
/// (status, body).
fn curl(ca: &Path, method: &str, url: &str, body: Option<&str>) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "-X", method, "-w", "\n%{http_code}", "--cacert"])
        .arg(ca)
        .args(["-H", "Content-Type: application/vnd.schemaregistry.v1+json"]);
    if let Some(body) = body {
        command.args(["--data-binary", body]);
    }
    let output = command.arg(url).output().expect("run curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn forwarding_over_https_checks_the_writers_certificate() {
    let kafka = evolve_test::kafka();
    let dir = temp_dir("tls");
    let storage = format!("{}/forward-tls-{}", kafka.url(), std::process::id());
    let (cert, key) = certificate(&dir, "shared");
    let (other_cert, _) = certificate(&dir, "other");
    let tls = [
        "--tls-cert",
        cert.to_str().expect("path"),
        "--tls-key",
        key.to_str().expect("path"),
    ];
    // Instance 1 checks the writer against the certificate it serves
    // itself (the default); instance 2 against another one.
    let servers = [
        Server::start_with(&storage, &tls, None),
        Server::start_with(&storage, &tls, None),
        Server::start_with(
            &storage,
            &[&tls[..], &["--peer-ca", other_cert.to_str().expect("path")]].concat(),
            None,
        ),
    ];
    let url = |i: usize, path: &str| format!("https://{}{path}", servers[i].address);
    let (status, text) = curl(
        &cert,
        "PUT",
        &url(0, "/config"),
        Some(r#"{"compatibility":"NONE"}"#),
    );
    assert_eq!(status, 200, "{text}");
    let body = serde_json::json!({"schema": schema(1)}).to_string();
    let (status, text) = curl(&cert, "POST", &url(1, "/subjects/s/versions"), Some(&body));
    assert_eq!(
        (status, json(&text)["id"].clone()),
        (200, serde_json::json!(1))
    );

    // A writer whose certificate does not verify is an error, not a
    // reason to take over.
    let body = serde_json::json!({"schema": schema(2)}).to_string();
    let (status, text) = curl(&cert, "POST", &url(2, "/subjects/s/versions"), Some(&body));
    assert_eq!(status, 500, "{text}");
    let answer = json(&text);
    assert_eq!(answer["error_code"], 50003, "{text}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or("")
            .contains("--peer-ca"),
        "{text}"
    );
    let (status, text) = curl(&cert, "GET", &url(2, "/v1/metadata/writer"), None);
    assert_eq!(status, 200, "{text}");
    let writer = json(&text);
    assert_eq!(writer["writer"]["url"], url(0, ""), "{text}");
    assert_eq!(writer["is_writer"], false, "{text}");
    let (_, metrics) = curl(&cert, "GET", &url(2, "/metrics"), None);
    assert!(
        metrics.contains("evolve_registry_writer_takeovers_total 0")
            && metrics.contains("evolve_registry_forwarded_total{outcome=\"failed\"} 1"),
        "{metrics}"
    );
}
