//! Throwaway Apache Kafka brokers: the broker's own jars
//! (`org.apache.kafka:kafka_2.13`, [`KAFKA_VERSION`]) run with `java`.
//!
//! A [`Kafka`] is one KRaft node that is broker and controller at once, in
//! a fresh temp dir (`$TMPDIR/evolve-kafka-<pid>-<n>`), listening only on
//! 127.0.0.1 at two free ports (the broker's `PLAINTEXT` listener and the
//! controller's). Its storage is formatted with `kafka.tools.StorageTool
//! format` before `kafka.Kafka server.properties` starts it; starting one
//! takes 15 to 20 seconds, nearly all of it two JVMs starting.
//!
//! Settings are for tests: one replica for the offsets and transaction
//! state topics (`offsets.topic.replication.factor=1`,
//! `transaction.state.log.replication.factor=1`,
//! `transaction.state.log.min.isr=1`), `group.initial.rebalance.delay.ms=0`,
//! one partition per new topic, and a heap of 512 MiB (`-Xmx512m`).
//!
//! Tests share one broker per test binary ([`kafka`]) and use topics of
//! their own; benchmarks and the demo start their own with
//! [`Kafka::start`].
//!
//! # The jars
//!
//! The jars are not in the repository: `cargo xtask test` fetches them with
//! Maven into `target/kafka/jars` of the workspace when they are missing
//! (`EVOLVE_KAFKA_JARS` names another directory). Without them
//! [`Kafka::start`] fails with [`HarnessError::KafkaJarsMissing`], which says
//! so and names the way out; a test that needs Kafka fails, never passes
//! without a broker.
//!
//! # Cleanup
//!
//! Dropping a [`Kafka`] kills the broker and removes its directory. The
//! [`kafka`] broker lives in a static and is never dropped, so every broker
//! also has a watchdog, as the PostgreSQL clusters do: a small `sh` process
//! whose stdin is a pipe this process holds open; when this process exits
//! (normally, by panic, or killed with SIGKILL) the pipe closes and the
//! watchdog kills the broker and removes the directory.
//! `EVOLVE_TEST_KEEP=1` keeps the broker running, as for clusters.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;

use crate::HarnessError;

/// The Apache Kafka release the harness runs (`kafka_2.13`); keep in step
/// with `xtask`'s `KAFKA_VERSION`.
pub const KAFKA_VERSION: &str = "4.1.1";

/// How long a broker may take to accept connections and answer metadata.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Kills the broker (`$2`, a pid) when our end of the pipe closes, then
/// removes its directory (`$1`).
const WATCHDOG: &str = r#"
trap '' HUP INT QUIT
cat >/dev/null
kill -KILL "$2" 2>/dev/null
i=0
while kill -0 "$2" 2>/dev/null && [ "$i" -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
rm -rf "$1"
"#;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// The directory of the Kafka jars: `EVOLVE_KAFKA_JARS`, or the
/// workspace's `target/kafka/jars` where `cargo xtask test` puts them.
pub fn kafka_jars_dir() -> PathBuf {
    match std::env::var_os("EVOLVE_KAFKA_JARS") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/kafka/jars"),
    }
}

/// A running single-node Kafka (KRaft, broker and controller in one
/// process) on 127.0.0.1, killed and removed when dropped.
#[derive(Debug)]
pub struct Kafka {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    watchdog: Option<Child>,
    keep: bool,
}

/// One record of a topic, as a `read_committed` consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// The key, `None` when it has none.
    pub key: Option<Vec<u8>>,
    /// The value, `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// The headers, in order, a header without a value as empty.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The key as text (lossy).
    pub fn key_text(&self) -> String {
        String::from_utf8_lossy(self.key.as_deref().unwrap_or_default()).into_owned()
    }

    /// The value as text (lossy), `None` for a tombstone.
    pub fn value_text(&self) -> Option<String> {
        self.value
            .as_deref()
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

impl Kafka {
    /// Formats storage in a fresh temp dir and starts the broker, waiting
    /// until it answers a metadata request.
    pub fn start() -> Result<Kafka, HarnessError> {
        let jars = kafka_jars_dir();
        let main_jar = jars.join(format!("kafka_2.13-{KAFKA_VERSION}.jar"));
        if !main_jar.is_file() {
            return Err(HarnessError::KafkaJarsMissing { jars });
        }
        let base = std::env::temp_dir();
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("evolve-kafka-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| HarnessError::io(format!("create directory {}", dir.display()), e))?;
        let keep = std::env::var_os("EVOLVE_TEST_KEEP").is_some_and(|v| !v.is_empty() && v != "0");
        let mut kafka = Kafka {
            dir,
            port: 0,
            child: None,
            watchdog: None,
            keep,
        };
        let mut attempt = 1;
        loop {
            match kafka.try_start(&jars) {
                Ok(()) => break,
                Err(_) if attempt < 3 && kafka.log_tail(200).contains("Address already in use") => {
                    attempt += 1;
                    kafka.kill();
                }
                Err(e) => {
                    kafka.kill();
                    return Err(e);
                }
            }
        }
        if keep {
            eprintln!(
                "evolve-test: keeping Kafka at 127.0.0.1:{} in {} (kill it with `kill {}`)",
                kafka.port,
                kafka.dir.display(),
                kafka.child.as_ref().map_or(0, Child::id)
            );
        }
        Ok(kafka)
    }

    /// `host:port` of the broker, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker as an `evolve.toml` connection url, `kafka://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("kafka://127.0.0.1:{}", self.port)
    }

    /// The broker's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The last `lines` lines of the broker's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Every record of `topic` up to its end, as a `read_committed`
    /// consumer sees it (committed transactions only; aborted ones and
    /// transaction markers skipped), in partition and offset order. Fails
    /// when the topic does not exist or its end is not reached within
    /// `timeout` (an open transaction holds a read_committed reader back).
    pub fn read_committed(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Result<Vec<Record>, HarnessError> {
        read_committed(&self.bootstrap(), topic, timeout)
    }

    fn try_start(&mut self, jars: &Path) -> Result<(), HarnessError> {
        let port = free_port()?;
        let controller = free_port()?;
        let data = self.dir.join("data");
        let _ = std::fs::remove_dir_all(&data);
        let properties = self.dir.join("server.properties");
        let log4j = self.dir.join("log4j2.properties");
        let settings = format!(
            "# evolve-test\n\
             process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
             log.dirs={}\n\
             num.partitions=1\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=4\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             transaction.state.log.num.partitions=4\n\
             group.initial.rebalance.delay.ms=0\n\
             auto.create.topics.enable=false\n",
            data.display()
        );
        std::fs::write(&properties, settings)
            .map_err(|e| HarnessError::io(format!("write {}", properties.display()), e))?;
        let log = self.dir.join("server.log");
        std::fs::write(
            &log4j,
            format!(
                "status = error\n\
                 appender.file.type = File\n\
                 appender.file.name = file\n\
                 appender.file.fileName = {}\n\
                 appender.file.layout.type = PatternLayout\n\
                 appender.file.layout.pattern = [%d] %p %m (%c)%n\n\
                 rootLogger.level = INFO\n\
                 rootLogger.appenderRef.file.ref = file\n",
                log.display()
            ),
        )
        .map_err(|e| HarnessError::io(format!("write {}", log4j.display()), e))?;
        let java = |main: &str| self.java(jars, main);
        let out = java("kafka.tools.StorageTool")
            .arg("format")
            // One argument: an id may start with '-', which argparse4j
            // would take for an option.
            .arg(format!("--cluster-id={}", cluster_id()))
            .arg("--config")
            .arg(&properties)
            .output()
            .map_err(|e| {
                HarnessError::io("run java (kafka.tools.StorageTool); install a JRE", e)
            })?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(HarnessError::Tool {
                tool: "kafka.tools.StorageTool format".into(),
                status: out.status,
                output,
            });
        }
        self.port = port;
        self.launch(jars)
    }

    /// The `java` command running `main` from the jars, in the broker's
    /// directory with its log settings.
    fn java(&self, jars: &Path, main: &str) -> Command {
        let mut cmd = Command::new("java");
        cmd.arg("-Xmx512m")
            .arg("-Xms128m")
            .arg("-XX:+UseSerialGC")
            .arg("-XX:TieredStopAtLevel=1")
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join("log4j2.properties").display()
            ))
            .arg("-cp")
            .arg(format!("{}/*", jars.display()))
            .arg(main)
            .current_dir(&self.dir)
            .stdin(Stdio::null());
        cmd
    }

    /// Starts the broker of the formatted storage and its settings.
    fn launch(&mut self, jars: &Path) -> Result<(), HarnessError> {
        let properties = self.dir.join("server.properties");
        let stdout = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("stdout.log"))
            .map_err(|e| HarnessError::io("create the broker's stdout.log", e))?;
        let stderr = stdout
            .try_clone()
            .map_err(|e| HarnessError::io("create the broker's stdout.log", e))?;
        let child = self
            .java(jars, "kafka.Kafka")
            .arg(&properties)
            .stdout(stdout)
            .stderr(stderr)
            // Out of the terminal's process group: Ctrl-C stops the tests,
            // and the watchdog then stops the broker.
            .process_group(0)
            .spawn()
            .map_err(|e| HarnessError::io("run java (kafka.Kafka); install a JRE", e))?;
        let pid = child.id();
        self.child = Some(child);
        if !self.keep {
            self.watchdog = Some(spawn_watchdog(&self.dir, pid)?);
        }
        self.wait_ready()
    }

    /// Until the broker accepts connections and answers metadata with
    /// itself, or it exited, or [`START_TIMEOUT`].
    fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let started = Instant::now();
        let failed = |kafka: &Kafka, why: String| HarnessError::KafkaStart {
            port: kafka.port,
            why,
            log: format!(
                "{}\n{}",
                kafka.log_tail(30),
                std::fs::read_to_string(kafka.dir.join("stdout.log"))
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(10)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        };
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(failed(self, format!("the broker exited ({status})")));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                break;
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(failed(self, "it did not accept connections in time".into()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()
            .map_err(|e| failed(self, format!("could not create a client: {e}")))?;
        loop {
            match consumer.fetch_metadata(None, Duration::from_secs(5)) {
                Ok(m) if !m.brokers().is_empty() => return Ok(()),
                Ok(_) => {}
                Err(e) if started.elapsed() > START_TIMEOUT => {
                    return Err(failed(
                        self,
                        format!("it answered no metadata in time: {e}"),
                    ));
                }
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the broker (SIGKILL: a crash) and starts it again on the same
    /// storage and port, waiting until it answers.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The old watchdog would remove the storage once its stdin
        // closes: it stays open until this process exits (when removing
        // the directory is right), and the new broker gets its own.
        if let Some(mut watchdog) = self.watchdog.take() {
            std::mem::forget(watchdog.stdin.take());
        }
        self.launch(&kafka_jars_dir())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The broker shared by every test of this process, started on first use.
///
/// # Panics
///
/// If the broker cannot be started (the jars missing, `java` missing, the
/// broker's log's last lines), with the reason; every later call panics
/// with the same message.
pub fn kafka() -> &'static Kafka {
    static SHARED: OnceLock<Result<Kafka, String>> = OnceLock::new();
    match SHARED.get_or_init(|| Kafka::start().map_err(|e| e.to_string())) {
        Ok(kafka) => kafka,
        Err(message) => panic!("could not start the shared test Kafka broker: {message}"),
    }
}

/// [`Kafka::read_committed`] against any brokers (`host:port,...`).
pub fn read_committed(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<Record>, HarnessError> {
    let fail = |why: String| HarnessError::KafkaRead {
        topic: topic.to_string(),
        why,
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("evolve-test-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .create()
        .map_err(|e| fail(format!("could not create a consumer: {e}")))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| fail(format!("could not read metadata: {e}")))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(fail("the topic does not exist".into()));
    }
    let mut assignment = rdkafka::TopicPartitionList::new();
    for p in &partitions {
        assignment
            .add_partition_offset(topic, *p, rdkafka::Offset::Beginning)
            .map_err(|e| fail(e.to_string()))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| fail(format!("could not assign the partitions: {e}")))?;
    let mut open: Vec<i32> = partitions.clone();
    let mut records = Vec::new();
    let deadline = Instant::now() + timeout;
    while !open.is_empty() {
        if Instant::now() > deadline {
            return Err(fail(format!(
                "partitions {open:?} did not reach their end in {timeout:?} (an open transaction?)"
            )));
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => open.retain(|x| *x != p),
            Some(Err(e)) => return Err(fail(e.to_string())),
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default();
                records.push(Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

/// Whether `e` is Kafka's "unknown topic".
pub fn is_unknown_topic(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition)
}

fn spawn_watchdog(dir: &Path, pid: u32) -> Result<Child, HarnessError> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("evolve-kafka-watchdog")
        .arg(dir)
        .arg(pid.to_string())
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| HarnessError::io("start the cleanup watchdog (/bin/sh)", e))
}

/// A port that was free a moment ago.
fn free_port() -> Result<u16, HarnessError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| HarnessError::io("find a free port on 127.0.0.1", e))
}

/// A cluster id as `kafka-storage random-uuid` prints one: 16 random bytes
/// in URL-safe base64 without padding (22 characters).
fn cluster_id() -> String {
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if random.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos ^ u128::from(std::process::id())).to_le_bytes();
    }
    // The broker refuses ids whose UUID is all zero or reserved, and an
    // id that starts with '-' reads like an option: these bits keep the
    // first character a letter (index 4 to 31) and the id off them.
    bytes[0] = (bytes[0] | 0x10) & 0x7f;
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_22_url_safe_characters() {
        let id = cluster_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{id}"
        );
        assert_ne!(cluster_id(), id);
        for _ in 0..200 {
            assert!(cluster_id().starts_with(|c: char| c.is_ascii_alphabetic()));
        }
    }
}
