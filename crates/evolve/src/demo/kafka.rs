//! `evolve demo kafka`: a Kafka table whose producer's schema evolves,
//! everything in this process.
//!
//! A throwaway Apache Kafka broker ([`evolve_test::Kafka`]: the broker's
//! own jars in KRaft mode, as the tests run it), evolve's schema registry
//! (`evolve registry serve`'s server, on a free port, with its SQLite
//! storage in the state directory) and a throwaway PostgreSQL cluster as
//! the sink. A producer in this process writes Avro records in
//! Confluent's wire format (the schema registered under `orders-value`,
//! its id in each record's header) to the topic `orders` (three
//! partitions, keyed by order), and click events to `clicks`; every
//! control statement goes through [`evolve_pipeline::admin::execute`], so the tour prints
//! and runs the real statements.
//!
//! The tour: the producer adds a field with a default (the pinned reader
//! reads on: no stall, and `evolve drift` names the field), then drops a
//! field the pinned reader needs (only that table stalls, at the first
//! such record, while the clicks flow), then a new table version pinned
//! at today's schema and a replacement absorb it, and the sink receives
//! exactly the orders whose document changed. Counted as in the other
//! tours: a trigger counts the sink's writes; what really changed is
//! computed from the records the producer wrote, kept beside it.
//!
//! A failed expectation is printed with a ✗ and makes the command exit 1
//! after cleanup; cleanup runs whatever happened, also on Ctrl-C.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use apache_avro::Schema;
use apache_avro::types::Value as Avro;
use evolve_pipeline::{Config, Pipeline, TableState};
use evolve_test::{Cluster, Kafka};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};
use tokio::sync::Mutex as AsyncMutex;

use super::stage::{
    self, Background, LOAD_GOES_ON, LOAD_INTERVAL, Paused, Rng, Stage, Toured, say, secs,
};

/// Orders written before the source exists (the table's snapshot).
const ORDERS: i64 = 2_000;

const V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"qty","type":"int"}]}"#;
const V2: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"qty","type":"int"},
  {"name":"coupon","type":["null","string"],"default":null}]}"#;
const V3: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"coupon","type":["null","string"],"default":null}]}"#;
const CLICK: &str = r#"{"type":"record","name":"Click","namespace":"shop","fields":[
  {"name":"page","type":"string"},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

pub async fn run(keep: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    say("evolve demo kafka: a Kafka table whose producer changes its schema")?;
    say("")?;
    say("A Kafka topic of Avro orders (Confluent's wire format, schemas in a registry) under")?;
    say("a steady producer, a pipeline that reads it into a table pinned to the reader schema")?;
    say("of the day it was created, the stable interface orders_json over it, and a")?;
    say("PostgreSQL sink. The producer changes its schema twice; the second change breaks")?;
    say("the pinned reader, and a new table version absorbs it.")?;
    say("")?;
    say("== setup")?;
    say("starting a throwaway Apache Kafka broker (KRaft, one node), evolve's schema")?;
    say("registry and a PostgreSQL sink cluster ...")?;
    let (kafka, sink) = tokio::join!(
        tokio::task::spawn_blocking(Kafka::start),
        tokio::task::spawn_blocking(Cluster::start)
    );
    let kafka = kafka
        .context("starting the Kafka broker")?
        .context("starting the Kafka broker (`cargo xtask demo kafka` fetches its jars)")?;
    let sink = sink
        .context("starting the sink cluster")?
        .context("starting the sink cluster")?;
    let state_dir = std::env::temp_dir().join(format!("evolve-demo-kafka-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state_dir);
    std::fs::create_dir_all(&state_dir).context("creating the state directory")?;
    let (registry_url, registry_task) = start_registry(&state_dir).await?;
    say(format!(
        "  Kafka on {}, registry on {registry_url}, sink on 127.0.0.1:{} ({})",
        kafka.bootstrap(),
        sink.port(),
        secs(started.elapsed())
    ))?;

    let registry = Aborting(registry_task);
    stage::frame(
        started,
        keep,
        (kafka, sink, registry),
        &state_dir,
        "broker, registry, cluster",
        async |(kafka, sink, _), background| {
            tour(kafka, &registry_url, sink, &state_dir, background).await
        },
    )
    .await
}

/// The registry's task, stopped when the demo removes its servers.
struct Aborting(tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// evolve's registry on a free loopback port, its storage in `dir`.
async fn start_registry(dir: &Path) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    use evolve_registry::http::{App, DEFAULT_MAX_SCHEMA, default_max_body};
    let spec = format!("sqlite:{}", dir.join("registry.db").display());
    let registry =
        crate::registry::open(&spec, evolve_registry::service::Settings::default()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the registry's port")?;
    let address = listener.local_addr()?;
    let access =
        evolve_registry::access::Access::new(address, false, &[]).map_err(anyhow::Error::msg)?;
    let app = Arc::new(App {
        registry,
        users: None,
        metrics: evolve_registry::metrics::Metrics::default(),
        max_body: default_max_body(DEFAULT_MAX_SCHEMA),
        max_schema: DEFAULT_MAX_SCHEMA,
        access,
    });
    let task = tokio::spawn(async move {
        if let Err(e) =
            evolve_registry::serve::serve(app, listener, None, std::future::pending()).await
        {
            tracing::warn!(error = %e, "the demo's registry stopped");
        }
    });
    Ok((format!("http://{address}"), task))
}

async fn tour(
    kafka: &Kafka,
    registry: &str,
    sink: &Cluster,
    state_dir: &Path,
    background: &mut Background,
) -> anyhow::Result<Toured> {
    let mut t = Tour::setup(kafka, registry, sink, state_dir, background).await?;
    t.adds_a_field().await?;
    t.breaks_the_reader().await?;
    t.absorbs_it().await?;
    t.finish(background).await?;
    Ok(Toured {
        checks: t.stage.checks,
        failures: t.stage.failures,
        keep: vec![
            format!("  Kafka:    {}", kafka.bootstrap()),
            format!("  registry: {registry}"),
            format!("  sink:     psql {}", t.sink_url),
        ],
    })
}

// ------------------------------------------------------------ producer

/// One order as the producer last wrote it.
#[derive(Clone, Debug, PartialEq)]
struct Order {
    id: i64,
    customer: String,
    /// `None` once the producer's schema has no `qty`.
    qty: Option<i32>,
    coupon: Option<String>,
}

impl Order {
    /// Its document for a reader with `fields`.
    fn document(&self, fields: &[String]) -> Value {
        let mut doc = serde_json::Map::new();
        for f in fields {
            let v = match f.as_str() {
                "id" => Some(json!(self.id)),
                "customer" => Some(json!(self.customer)),
                "qty" => self.qty.map(|q| json!(q)),
                "coupon" => self.coupon.as_ref().map(|c| json!(c)),
                _ => None,
            };
            if let Some(v) = v {
                doc.insert(f.clone(), v);
            }
        }
        Value::Object(doc)
    }
}

/// The producer: Avro in Confluent's wire format, schemas registered
/// over the registry's HTTP API, an idempotent librdkafka producer.
struct Producer {
    producer: FutureProducer,
    registry: String,
    /// The order schemas by version (1 to 3) and the clicks' (0): parsed,
    /// with their registry ids.
    schemas: Mutex<BTreeMap<u8, (Arc<Schema>, u32)>>,
}

impl Producer {
    async fn new(bootstrap: &str, registry: &str) -> anyhow::Result<Producer> {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .context("creating the producer")?;
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .context("creating an admin client")?;
        let topics = [
            NewTopic::new("orders", 3, TopicReplication::Fixed(1)),
            NewTopic::new("clicks", 1, TopicReplication::Fixed(1)),
        ];
        for result in admin
            .create_topics(&topics, &AdminOptions::new())
            .await
            .context("creating the topics")?
        {
            result.map_err(|(topic, e)| anyhow!("creating topic {topic}: {e}"))?;
        }
        let p = Producer {
            producer,
            registry: registry.to_string(),
            schemas: Mutex::new(BTreeMap::new()),
        };
        p.register(1, "orders-value", V1).await?;
        p.register(0, "clicks-value", CLICK).await?;
        Ok(p)
    }

    /// Registers `schema` under `subject` (as a producer's serializer
    /// does on first use) and keeps it as version `version`.
    async fn register(&self, version: u8, subject: &str, schema: &str) -> anyhow::Result<u32> {
        let body = json!({ "schema": schema }).to_string();
        let (status, answer) = http_post(
            &self.registry,
            &format!("/subjects/{subject}/versions"),
            body,
        )
        .await?;
        let answer: Value = serde_json::from_slice(&answer).unwrap_or_default();
        let id = answer["id"]
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| anyhow!("registering {subject} answered {status}: {answer}"))?;
        let parsed = Schema::parse_str(schema).context("parsing a demo schema")?;
        self.schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(version, (Arc::new(parsed), id));
        Ok(id)
    }

    fn encode(&self, version: u8, value: Avro) -> anyhow::Result<Vec<u8>> {
        let (schema, id) = self
            .schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&version)
            .cloned()
            .ok_or_else(|| anyhow!("schema version {version} is not registered"))?;
        let mut out = vec![0u8];
        out.extend_from_slice(&id.to_be_bytes());
        apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
            .build()
            .and_then(|w| w.write_value(&mut out, value))
            .context("encoding a record")?;
        Ok(out)
    }

    async fn send(&self, topic: &str, key: &str, payload: &[u8]) -> anyhow::Result<()> {
        self.producer
            .send(
                FutureRecord::to(topic).key(key).payload(payload),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| anyhow!("producing to {topic}: {e}"))?;
        Ok(())
    }

    /// Writes `order` with schema `version`.
    async fn order(&self, version: u8, order: &Order) -> anyhow::Result<()> {
        let mut fields = vec![
            ("id".to_string(), Avro::Long(order.id)),
            ("customer".to_string(), Avro::String(order.customer.clone())),
        ];
        if version < 3 {
            fields.push(("qty".to_string(), Avro::Int(order.qty.unwrap_or(0))));
        }
        if version >= 2 {
            let coupon = match &order.coupon {
                Some(c) => Avro::Union(1, Box::new(Avro::String(c.clone()))),
                None => Avro::Union(0, Box::new(Avro::Null)),
            };
            fields.push(("coupon".to_string(), coupon));
        }
        let payload = self.encode(version, Avro::Record(fields))?;
        self.send("orders", &key(order.id), &payload).await
    }

    async fn click(&self, n: u64) -> anyhow::Result<()> {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let payload = self.encode(
            0,
            Avro::Record(vec![
                (
                    "page".to_string(),
                    Avro::String(format!("/orders/{}", n % 50)),
                ),
                ("at".to_string(), Avro::TimestampMillis(at)),
            ]),
        )?;
        self.send("clicks", &format!("click-{n}"), &payload).await
    }
}

fn key(id: i64) -> String {
    format!("order-{id}")
}

/// A POST with a JSON body to `base` + `path`: the status and the answer.
async fn http_post(base: &str, path: &str, body: String) -> anyhow::Result<(u16, Vec<u8>)> {
    use http_body_util::{BodyExt, Full};
    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .with_context(|| format!("connecting to the registry at {base}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, authority)
        .header(
            hyper::header::CONTENT_TYPE,
            "application/vnd.schemaregistry.v1+json",
        )
        .body(Full::new(hyper::body::Bytes::from(body)))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, bytes.to_vec()))
}

// ---------------------------------------------------------------- load

/// What the producer wrote, kept beside it: the last record of each
/// order, and the clicks.
#[derive(Default)]
struct Load {
    gate: Arc<AsyncMutex<()>>,
    /// The order schema the producer writes with (1 to 3).
    version: AtomicU8,
    orders: Mutex<BTreeMap<i64, Order>>,
    clicks: AtomicU64,
    records: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Load {
    fn orders(&self) -> BTreeMap<i64, Order> {
        self.orders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Until `stop`: one record every [`LOAD_INTERVAL`] under the gate: an
/// order's quantity changed, a new order (with a coupon now and then once
/// the schema has coupons), or a click.
async fn write_load(producer: Arc<Producer>, load: Arc<Load>, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new();
    let mut next_id = ORDERS + 1;
    while !stop.load(Ordering::SeqCst) {
        {
            let _gate = load.gate.lock().await;
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let version = load.version.load(Ordering::SeqCst);
            let roll = rng.below(100);
            let result = if roll < 30 {
                let n = load.clicks.load(Ordering::SeqCst) + 1;
                let sent = producer.click(n).await;
                if sent.is_ok() {
                    load.clicks.store(n, Ordering::SeqCst);
                }
                sent
            } else {
                let id = if roll < 75 {
                    1 + rng.below((next_id - 1) as u64) as i64
                } else {
                    next_id += 1;
                    next_id - 1
                };
                let mut order = load.orders().get(&id).cloned().unwrap_or_else(|| Order {
                    id,
                    customer: format!("customer {}", 1 + id % 200),
                    qty: Some(1),
                    coupon: None,
                });
                order.qty = (version < 3).then(|| 1 + rng.below(9) as i32);
                if version >= 2 && rng.below(4) == 0 {
                    order.coupon = Some("SPRING10".into());
                } else if version < 2 {
                    order.coupon = None;
                }
                let sent = producer.order(version, &order).await;
                if sent.is_ok() {
                    load.orders
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id, order);
                }
                sent
            };
            match result {
                Ok(()) => {
                    load.records.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => {
                    load.errors.fetch_add(1, Ordering::SeqCst);
                    let mut first = load.first_error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert_with(|| e.to_string());
                }
            }
        }
        tokio::time::sleep(LOAD_INTERVAL).await;
    }
}

// ----------------------------------------------------------------- tour

struct Tour {
    stage: Stage,
    producer: Arc<Producer>,
    load: Arc<Load>,
    sink_url: String,
}

impl Tour {
    async fn setup(
        kafka: &Kafka,
        registry: &str,
        sink_cluster: &Cluster,
        state_dir: &Path,
        background: &mut Background,
    ) -> anyhow::Result<Tour> {
        let started = Instant::now();
        let sink_db = sink_cluster
            .create_database("warehouse")
            .await
            .context("creating the sink database")?;
        let sink = evolve_pg::connect(&sink_db.url, "evolve demo")
            .await
            .context("connecting to the sink")?;
        let producer = Arc::new(Producer::new(&kafka.bootstrap(), registry).await?);
        let config = Config::new(PathBuf::from(state_dir))
            .with_connection("k", kafka.url())
            .with_connection("csr", registry.to_string())
            .with_connection("sink_conn", sink_db.url.clone());
        let pipeline = Arc::new(Pipeline::open(config).context("opening the pipeline's state")?);
        let load = Arc::new(Load::default());
        load.version.store(1, Ordering::SeqCst);
        let mut t = Tour {
            stage: Stage::new(
                pipeline,
                sink,
                "topic",
                "the topic from the snapshot's offsets",
            ),
            producer,
            load,
            sink_url: sink_db.url.clone(),
        };

        say("")?;
        say(format!(
            "The producer writes {ORDERS} orders with schema version 1 (registered as orders-value):"
        ))?;
        say(format!("  {}", compact(V1)))?;
        let history: Vec<Order> = (1..=ORDERS)
            .map(|id| Order {
                id,
                customer: format!("customer {}", 1 + id % 200),
                qty: Some(1 + (id % 9) as i32),
                coupon: None,
            })
            .collect();
        let sends = history.iter().map(|o| t.producer.order(1, o));
        for sent in futures_util::future::join_all(sends).await {
            sent?;
        }
        t.load
            .orders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(history.into_iter().map(|o| (o.id, o)));
        say(
            "Then it keeps going: changed quantities, new orders and click events, tens a second.",
        )?;
        background.load = Some(tokio::spawn(write_load(
            t.producer.clone(),
            t.load.clone(),
            background.stop_load.clone(),
        )));

        say("")?;
        say(format!(
            "The pipeline runs in this process (state in {}); connections k",
            state_dir.display()
        ))?;
        say("(kafka://...), csr (the registry) and sink_conn (the sink). Each statement below")?;
        say("goes through its SQL interface, as with `evolve sql`.")?;
        background.spawn_pipeline(t.stage.pipeline.clone());
        for sql in [
            "CREATE SOURCE shop FROM KAFKA CONNECTION k (TOPIC 'orders')".to_string(),
            "CREATE SOURCE web FROM KAFKA CONNECTION k (TOPIC 'clicks')".to_string(),
            "CREATE TABLE orders_v1 FROM SOURCE shop \
             FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT"
                .to_string(),
            format!(
                "CREATE MATERIALIZED VIEW orders_json AS {}",
                stage::interface_query("orders_v1")
            ),
            "CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn \
             (TABLE 'public.orders_json')"
                .to_string(),
            "CREATE TABLE clicks_v1 FROM SOURCE web \
             FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE NONE"
                .to_string(),
            format!(
                "CREATE MATERIALIZED VIEW clicks_json AS {}",
                stage::interface_query("clicks_v1")
            ),
            "CREATE SINK clicks_sink FROM clicks_json INTO POSTGRES CONNECTION sink_conn \
             (TABLE 'public.clicks_json')"
                .to_string(),
        ] {
            t.stage.control(&sql).await?;
        }
        say("")?;
        say("On the sink, a trigger counts every write into each sink table.")?;
        for name in ["orders_json", "clicks_json"] {
            stage::audit(&t.stage.sink, name, false).await?;
            say(format!(
                "sink=# CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {name} ...  -- into {name}_audit"
            ))?;
        }
        t.stage
            .wait_table("orders_v1", |t| t.state == TableState::Running)
            .await?;
        let pause = t.pause().await?;
        let (differing, documents) = t.wait_orders(&t.fields("orders_v1")?).await?;
        let clicks = t.wait_clicks().await?;
        t.stage.check(
            differing == 0 && clicks,
            format!(
                "orders_json ({documents} documents) equals what the producer wrote, read with schema version 1; clicks_json has every click"
            ),
        )?;
        t.resume(pause)?;
        say(format!("  (setup: {})", secs(started.elapsed())))?;
        Ok(t)
    }

    /// The producer adds a field with a default.
    async fn adds_a_field(&mut self) -> anyhow::Result<()> {
        say("")?;
        say("== the producer adds a field with a default")?;
        say("Schema version 2 adds an optional coupon (default null); the registry accepts it")?;
        say("(BACKWARD), and the producer writes with it from now on:")?;
        say(format!("  {}", compact(V2)))?;
        let registered = self.producer.register(2, "orders-value", V2).await?;
        say(format!("  registered as id {registered}"))?;
        self.load.version.store(2, Ordering::SeqCst);
        let before = self.stage.audit("orders_json").await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let writes = self.stage.audit("orders_json").await? - before;
        let state = self.stage.table("orders_v1")?.state;
        self.stage.check(
            state == TableState::Running && writes > 0,
            format!(
                "no stall: orders_v1 is {} and orders_json received {writes} writes from version 2 records",
                state.as_str()
            ),
        )?;
        self.stage.drift().await?;
        let pause = self.pause().await?;
        let (differing, documents) = self.wait_orders(&self.fields("orders_v1")?).await?;
        self.stage.check(
            differing == 0,
            format!(
                "orders_json ({documents} documents) equals the records read with the pinned version 1: no coupon in any document"
            ),
        )?;
        self.resume(pause)
    }

    /// The producer drops a field the pinned reader needs.
    async fn breaks_the_reader(&mut self) -> anyhow::Result<()> {
        say("")?;
        say("== a writer schema the pinned reader cannot read")?;
        say("Schema version 3 drops qty. The registry accepts it (a reader of version 3 reads")?;
        say("the older records), but orders_v1's reader needs qty, which has no default:")?;
        say(format!("  {}", compact(V3)))?;
        let registered = self.producer.register(3, "orders-value", V3).await?;
        say(format!("  registered as id {registered}"))?;
        let clicks_before = self.stage.audit("clicks_json").await?;
        self.load.version.store(3, Ordering::SeqCst);
        self.stage.check_stalled("orders_v1").await?;
        let orders_before = self.stage.audit("orders_json").await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let clicks = self.stage.audit("clicks_json").await? - clicks_before;
        let orders = self.stage.audit("orders_json").await? - orders_before;
        let clicks_state = self.stage.table("clicks_v1")?.state;
        self.stage.check(
            clicks > 0 && orders == 0 && clicks_state == TableState::Running,
            format!(
                "only orders_v1 stalls: clicks_json received {clicks} writes meanwhile, orders_json {orders} (readers keep the last consistent state)"
            ),
        )
    }

    /// A new table version pinned at today's schema, and the replacement.
    async fn absorbs_it(&mut self) -> anyhow::Result<()> {
        say("")?;
        say("== the replacement that absorbs it")?;
        say("orders_v2 pins today's schema (version 3) and reads the topic from its start;")?;
        say("older records resolve against it (qty skipped, coupon defaulted).")?;
        self.stage
            .control(
                "CREATE TABLE orders_v2 FROM SOURCE shop \
                 FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr ENVELOPE UPSERT",
            )
            .await?;
        self.stage
            .control(&format!(
                "CREATE REPLACEMENT MATERIALIZED VIEW orders_json_v2 FOR orders_json AS {}",
                stage::interface_query("orders_v2")
            ))
            .await?;
        let started = Instant::now();
        let table = self
            .stage
            .wait_table("orders_v2", |t| t.state == TableState::Running)
            .await?;
        say(format!(
            "  orders_v2 hydrated while the producer went on: {} rows copied, then the stream ({})",
            table.rows_copied,
            secs(started.elapsed())
        ))?;
        let pause = self.pause().await?;
        // The stream takes in what the producer wrote last.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let fields = self.fields("orders_v2")?;
        let expected = self.differing(&fields).await?;
        let before = self.stage.audit("orders_json").await?;
        self.stage
            .control("ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT orders_json_v2")
            .await?;
        let (differing, _) = self.wait_orders(&fields).await?;
        tokio::time::sleep(stage::SETTLE).await;
        let writes = self.stage.audit("orders_json").await? - before;
        self.stage.check(
            writes == expected && differing == 0,
            format!(
                "downstream changes: {writes}   orders whose document really changed: {expected}"
            ),
        )?;
        say("    (every order written before version 3 loses qty; those with a coupon gain it)")?;
        self.resume(pause)?;
        let before = self.stage.audit("orders_json").await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let writes = self.stage.audit("orders_json").await? - before;
        self.stage.check(
            writes > 0,
            format!("the stream goes on into orders_v2: {writes} writes since the swap"),
        )
    }

    async fn finish(&mut self, background: &mut Background) -> anyhow::Result<()> {
        say("")?;
        say("== the end")?;
        background.stop_load().await;
        let records = self.load.records.load(Ordering::SeqCst);
        let errors = self.load.errors.load(Ordering::SeqCst);
        let first = self
            .load
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.stage.check(
            errors == 0,
            format!(
                "the producer wrote {records} records besides the first {ORDERS}, {errors} failed{}",
                first.map(|e| format!(" (first: {e})")).unwrap_or_default()
            ),
        )?;
        let (differing, documents) = self.wait_orders(&self.fields("orders_v2")?).await?;
        let clicks = self.wait_clicks().await?;
        self.stage.check(
            differing == 0 && clicks,
            format!(
                "orders_json ({documents} documents) equals the producer's records read with version 3; clicks_json has all {} clicks",
                self.load.clicks.load(Ordering::SeqCst)
            ),
        )
    }

    async fn pause(&self) -> anyhow::Result<Paused> {
        stage::pause(&self.load.gate).await
    }

    fn resume(&self, pause: Paused) -> anyhow::Result<()> {
        stage::resume(pause).map(|_| ())
    }

    fn fields(&self, table: &str) -> anyhow::Result<Vec<String>> {
        self.stage.document_columns(table)
    }

    /// The sink's orders_json, by order id.
    async fn sink_orders(&self) -> anyhow::Result<BTreeMap<String, Value>> {
        let rows = self
            .stage
            .sink
            .query("SELECT key::text, data::text FROM public.orders_json", &[])
            .await
            .context("reading orders_json on the sink")?;
        let mut out = BTreeMap::new();
        for r in rows {
            let k: Value = serde_json::from_str(r.get::<_, &str>(0))?;
            let d: Value = serde_json::from_str(r.get::<_, &str>(1))?;
            out.insert(k["@key"].as_str().unwrap_or_default().to_string(), d);
        }
        Ok(out)
    }

    /// How many orders' documents over `fields` differ from the sink's.
    async fn differing(&self, fields: &[String]) -> anyhow::Result<i64> {
        let sink = self.sink_orders().await?;
        let want: BTreeMap<String, Value> = self
            .load
            .orders()
            .values()
            .map(|o| (key(o.id), o.document(fields)))
            .collect();
        let mut n = 0;
        for k in want
            .keys()
            .chain(sink.keys().filter(|k| !want.contains_key(*k)))
        {
            if want.get(k) != sink.get(k) {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Waits until the sink's orders equal the producer's over `fields`
    /// (at most 30 s): the differing count and the sink's documents.
    async fn wait_orders(&self, fields: &[String]) -> anyhow::Result<(i64, usize)> {
        let started = Instant::now();
        loop {
            let differing = self.differing(fields).await?;
            if differing == 0 || started.elapsed() >= stage::WAIT {
                return Ok((differing, self.sink_orders().await?.len()));
            }
            tokio::time::sleep(stage::POLL).await;
        }
    }

    /// Waits until clicks_json holds every click (at most 30 s).
    async fn wait_clicks(&self) -> anyhow::Result<bool> {
        let started = Instant::now();
        loop {
            let want = self.load.clicks.load(Ordering::SeqCst) as i64;
            let got: i64 = self
                .stage
                .sink
                .query_one("SELECT count(*) FROM public.clicks_json", &[])
                .await
                .context("counting clicks_json")?
                .get(0);
            if got == want {
                return Ok(true);
            }
            if started.elapsed() >= stage::WAIT {
                return Ok(false);
            }
            tokio::time::sleep(stage::POLL).await;
        }
    }
}

/// A schema on one line.
fn compact(schema: &str) -> String {
    serde_json::from_str::<Value>(schema)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| schema.to_string())
}
