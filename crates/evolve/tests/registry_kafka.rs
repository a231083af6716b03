//! `evolve registry serve --storage kafka://...` as users run it: three
//! instances on one topic of the test harness's broker
//! (`evolve_test::kafka`), a stream of registrations spread across them,
//! and the instance that writes killed with SIGKILL in the middle of it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
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
        let mut child = Command::new(EVOLVE)
            .args(["registry", "serve", "--listen", "127.0.0.1:0"])
            .args(["--poll-interval-ms", "200"])
            .env("EVOLVE_REGISTRY_STORAGE", storage)
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
            .unwrap_or_else(|| panic!("no URL in {line:?}"));
        assert!(line.contains(storage), "{line}");
        Server {
            child,
            address: url.trim_start_matches("http://").to_owned(),
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
    let attempt = || -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(40)))?;
        let body = body.unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
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

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn schema(n: usize) -> String {
    serde_json::json!({"type": "record", "name": "R", "namespace": "failover",
        "fields": [{"name": format!("f{n}"), "type": "int", "default": 0}]})
    .to_string()
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

    // Registration n: schema n in subject n % SUBJECTS, sent to the live
    // instance n % live. Once KILL_AFTER were answered 200, the killer
    // SIGKILLs the instance that answered the last 200 (it holds the
    // writer's epoch) a few milliseconds after a registration was sent to
    // it, so that one is cut off in the middle.
    let next = Arc::new(AtomicUsize::new(0));
    let ok_count = Arc::new(AtomicUsize::new(0));
    let last_ok_by = Arc::new(AtomicUsize::new(usize::MAX));
    let in_flight: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let killed: Arc<Mutex<Option<(usize, Instant, usize)>>> = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    // (n, instance, answer, when)
    let results = Arc::new(Mutex::new(Vec::<(usize, usize, Answer, Instant)>::new()));
    let killer = {
        let (ok_count, last_ok_by, in_flight, killed, done, servers) = (
            Arc::clone(&ok_count),
            Arc::clone(&last_ok_by),
            Arc::clone(&in_flight),
            Arc::clone(&killed),
            Arc::clone(&done),
            Arc::clone(&servers),
        );
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let ok = ok_count.load(Ordering::SeqCst);
                let writer = last_ok_by.load(Ordering::SeqCst);
                if ok >= KILL_AFTER
                    && (in_flight[writer].load(Ordering::SeqCst) > 0 || ok >= KILL_AFTER + 15)
                {
                    std::thread::sleep(Duration::from_millis(3));
                    let cut = in_flight[writer].load(Ordering::SeqCst);
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
        let (next, ok_count, last_ok_by, in_flight, killed, results, addresses) = (
            Arc::clone(&next),
            Arc::clone(&ok_count),
            Arc::clone(&last_ok_by),
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
                    last_ok_by.store(instance, Ordering::SeqCst);
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
    eprintln!("killed instance {victim} with {cut} registration(s) in flight to it");
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
}
