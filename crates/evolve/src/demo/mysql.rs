//! `evolve demo mysql`: the pipeline's four absorb flows with a MariaDB
//! upstream, everything in this process.
//!
//! A throwaway MariaDB server ([`evolve_test::MariaDb`]: `mariadb-install-db`
//! and `mariadbd` with the row-based binlog, the same binaries and settings
//! the tests use) holds `orders` and `customers`; a throwaway PostgreSQL
//! cluster is the sink. A [`Pipeline`] reads the server's binlog and every
//! control statement goes through [`admin::execute`], so the tour prints
//! and runs the real statements. A load task keeps writing upstream
//! (status and amount of orders, new orders, customer visits: never a
//! column the flows are about).
//!
//! Counted as in the PostgreSQL tour (`demo/pipeline.rs`): *downstream
//! changes* are the writes a sink table received (a trigger counts them
//! into an audit table); *rows that really changed* are computed from the
//! upstream on its own (`COUNT(*) ... WHERE region IS NOT NULL`, or the
//! keys whose upstream document over the new version's columns differs
//! from the one the sink holds). For each count the load pauses, the tour
//! waits until the sink has caught up, counts, applies, waits for the sink
//! to show the new version, and counts the writes.
//!
//! A failed expectation is printed with a ✗ and makes the command exit 1
//! after cleanup; cleanup (load, pipeline, server, cluster, state
//! directory) runs whatever happened, also on Ctrl-C.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use evolve_pg::{Client, quote_ident};
use evolve_pipeline::admin;
use evolve_pipeline::source::mysql::mysql_async::{self, prelude::Queryable};
use evolve_pipeline::{Config, Pipeline, PipelineError, TableState};
use evolve_test::{Cluster, MariaDb};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, oneshot};
use tokio::task::JoinHandle;

use super::pipeline::say;

const ORDERS: i64 = 3_000;
const CUSTOMERS: i64 = 200;
const LOAD_INTERVAL: Duration = Duration::from_millis(15);
const WAIT: Duration = Duration::from_secs(30);
const ABSORB_WAIT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_millis(300);
const POLL: Duration = Duration::from_millis(50);
const LOAD_GOES_ON: Duration = Duration::from_millis(1500);

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The interface query over `table`.
fn interface_query(table: &str) -> String {
    format!("SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM {table} t")
}

pub async fn run(keep: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    say("evolve demo mysql: the absorb flows with a MariaDB upstream")?;
    say("")?;
    say("A MariaDB server with an `orders` table under write load, a pipeline that reads")?;
    say("its row-based binlog and turns each row into one JSON document (the interface")?;
    say("orders_json, whose shape never changes), and a PostgreSQL sink. Upstream, the")?;
    say("schema changes four times; each time the pipeline absorbs the change and the")?;
    say("sink receives exactly the rows whose document changed. The write load pauses")?;
    say("while the numbers are taken.")?;
    say("")?;
    say("== setup")?;
    say("starting a throwaway MariaDB server (mariadb-install-db + mariadbd, binlog_format=ROW,")?;
    say("binlog_row_image=FULL, binlog_row_metadata=FULL) and a PostgreSQL sink cluster ...")?;
    let (my, sink) = tokio::join!(
        tokio::task::spawn_blocking(MariaDb::start),
        tokio::task::spawn_blocking(Cluster::start)
    );
    let my = my
        .context("starting the MariaDB server")?
        .context("starting the MariaDB server (the mariadb-server package provides it)")?;
    let sink = sink
        .context("starting the sink cluster")?
        .context("starting the sink cluster")?;
    say(format!(
        "  MariaDB on 127.0.0.1:{}, sink on 127.0.0.1:{} ({})",
        my.port(),
        sink.port(),
        secs(started.elapsed())
    ))?;
    let state_dir = std::env::temp_dir().join(format!("evolve-demo-mysql-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state_dir);

    let mut background = Background::default();
    let outcome = tokio::select! {
        outcome = tour(&my, &sink, &state_dir, &mut background) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if keep && let Ok(tour) = &outcome {
        say("")?;
        say("keeping everything until Ctrl-C (the pipeline keeps running):")?;
        say(format!(
            "  upstream: mariadb --socket={} {}",
            my.socket().display(),
            tour.database
        ))?;
        say(format!("  sink:     psql {}", tour.sink_url))?;
        say(format!("  pipeline state: {}", state_dir.display()))?;
        super::wait_for_ctrl_c().await;
    }

    let cleanup = Instant::now();
    let stop_errors = background.stop().await;
    tokio::task::spawn_blocking(move || drop((my, sink)))
        .await
        .context("removing the server and the cluster")?;
    let _ = std::fs::remove_dir_all(&state_dir);
    say(format!(
        "\npipeline stopped, server, cluster and state removed ({})",
        secs(cleanup.elapsed())
    ))?;
    let Outcome {
        checks,
        mut failures,
        ..
    } = outcome?;
    failures.extend(stop_errors);
    let total = secs(started.elapsed());
    if failures.is_empty() {
        say(format!("all {checks} checks passed in {total}"))?;
        return Ok(());
    }
    say(format!(
        "{} of {checks} checks failed ({total}):",
        failures.len()
    ))?;
    for f in &failures {
        say(format!("  ✗ {f}"))?;
    }
    bail!(
        "the demo failed: {} expectation(s) not met, first: {}",
        failures.len(),
        failures[0]
    )
}

struct Outcome {
    checks: u32,
    failures: Vec<String>,
    database: String,
    sink_url: String,
}

async fn tour(
    my: &MariaDb,
    sink: &Cluster,
    state_dir: &Path,
    background: &mut Background,
) -> anyhow::Result<Outcome> {
    let mut t = Tour::setup(my, sink, state_dir, background).await?;
    t.flow_1().await?;
    t.flow_2().await?;
    t.flow_4().await?;
    t.flow_5().await?;
    t.finish(background).await?;
    Ok(Outcome {
        checks: t.checks,
        failures: t.failures,
        database: t.database,
        sink_url: t.sink_url,
    })
}

// ----------------------------------------------------------- background

#[derive(Default)]
struct Background {
    stop_load: Arc<AtomicBool>,
    load: Option<JoinHandle<()>>,
    pipeline_stop: Option<oneshot::Sender<()>>,
    pipeline: Option<JoinHandle<Result<(), PipelineError>>>,
}

impl Background {
    async fn stop_load(&mut self) {
        self.stop_load.store(true, Ordering::SeqCst);
        if let Some(load) = self.load.take() {
            let _ = load.await;
        }
    }

    async fn stop(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        self.stop_load().await;
        if let Some(stop) = self.pipeline_stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut pipeline) = self.pipeline.take() {
            match tokio::time::timeout(Duration::from_secs(20), &mut pipeline).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => errors.push(format!("the pipeline failed: {e}")),
                Ok(Err(e)) => errors.push(format!("the pipeline task failed: {e}")),
                Err(_) => {
                    pipeline.abort();
                    errors.push("the pipeline did not stop within 20 s".into());
                }
            }
        }
        errors
    }
}

#[derive(Default)]
struct Load {
    gate: Arc<AsyncMutex<()>>,
    transactions: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// Until `stop`: one upstream transaction every [`LOAD_INTERVAL`] under
/// the gate: an order's status and amount, a new order, or a customer's
/// visits.
async fn write_load(mut conn: mysql_async::Conn, load: Arc<Load>, stop: Arc<AtomicBool>) {
    const STATUSES: [&str; 3] = ["open", "paid", "shipped"];
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    let mut below = |n: i64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n.max(1) as u64) as i64
    };
    let mut next_id = ORDERS + 1;
    while !stop.load(Ordering::SeqCst) {
        {
            let _gate = load.gate.lock().await;
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let roll = below(100);
            let result = if roll < 55 {
                let id = 1 + below(next_id - 1);
                conn.exec_drop(
                    "UPDATE orders SET status = ?, amount = amount + 1 WHERE id = ?",
                    (STATUSES[below(3) as usize], id),
                )
                .await
            } else if roll < 80 {
                let inserted = conn
                    .exec_drop(
                        "INSERT INTO orders (id, customer_id, status, amount) VALUES (?, ?, 'open', ?)",
                        (next_id, 1 + below(CUSTOMERS), below(50_000)),
                    )
                    .await;
                if inserted.is_ok() {
                    next_id += 1;
                }
                inserted
            } else {
                conn.exec_drop(
                    "UPDATE customers SET visits = visits + 1 WHERE id = ?",
                    (1 + below(CUSTOMERS),),
                )
                .await
            };
            match result {
                Ok(()) => {
                    load.transactions.fetch_add(1, Ordering::SeqCst);
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
    let _ = conn.disconnect().await;
}

// ----------------------------------------------------------------- tour

struct Paused {
    _guard: OwnedMutexGuard<()>,
}

/// How the sink compares with the upstream over some columns.
#[derive(Clone, Copy, Debug, Default)]
struct Diff {
    upstream: i64,
    sink: i64,
    differing: i64,
}

struct Tour {
    pipeline: Arc<Pipeline>,
    my: mysql_async::Conn,
    sink: Client,
    database: String,
    sink_url: String,
    load: Arc<Load>,
    checks: u32,
    failures: Vec<String>,
}

impl Tour {
    async fn setup(
        server: &MariaDb,
        sink_cluster: &Cluster,
        state_dir: &Path,
        background: &mut Background,
    ) -> anyhow::Result<Tour> {
        let started = Instant::now();
        let db = tokio::task::block_in_place(|| server.create_database("shop"))
            .context("creating the upstream database")?;
        let sink_db = sink_cluster
            .create_database("warehouse")
            .await
            .context("creating the sink database")?;
        let connect = async || {
            mysql_async::Conn::new(
                mysql_async::Opts::from_url(&db.url).context("the server's url")?,
            )
            .await
            .context("connecting to the MariaDB server")
        };
        let my = connect().await?;
        let load_conn = connect().await?;
        let sink = evolve_pg::connect(&sink_db.url, "evolve demo")
            .await
            .context("connecting to the sink")?;
        let config = Config::new(PathBuf::from(state_dir))
            .with_connection("my_conn", db.url.clone())
            .with_connection("sink_conn", sink_db.url.clone());
        let pipeline = Arc::new(Pipeline::open(config).context("opening the pipeline's state")?);
        let mut t = Tour {
            pipeline,
            my,
            sink,
            database: db.name.clone(),
            sink_url: sink_db.url.clone(),
            load: Arc::new(Load::default()),
            checks: 0,
            failures: Vec::new(),
        };

        say("")?;
        say(format!(
            "The upstream database {}: {CUSTOMERS} customers and {ORDERS} orders, some with a note,",
            db.name
        ))?;
        say("some with a coupon.")?;
        t.upstream(
            "CREATE TABLE customers (id bigint PRIMARY KEY, name varchar(40) NOT NULL, \
             city varchar(20) NOT NULL, visits int NOT NULL DEFAULT 0)",
        )
        .await?;
        t.upstream(&format!(
            "INSERT INTO customers (id, name, city) SELECT seq, CONCAT('customer ', seq), \
             ELT(1 + seq % 4, 'Lisbon', 'Oslo', 'Lyon', 'Turin') FROM seq_1_to_{CUSTOMERS}"
        ))
        .await?;
        t.upstream(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, \
             status varchar(20) NOT NULL, amount int NOT NULL, note text, coupon varchar(20))",
        )
        .await?;
        t.upstream(&format!(
            "INSERT INTO orders SELECT seq, 1 + seq % {CUSTOMERS}, ELT(1 + seq % 3, 'open', 'paid', 'shipped'), \
             seq * 7 % 50000, IF(seq % 9 = 0, 'leave at the door', NULL), \
             IF(seq % 13 = 0, 'SPRING10', NULL) FROM seq_1_to_{ORDERS}"
        ))
        .await?;

        say("")?;
        say("The write load starts and runs until the end, tens of transactions a second;")?;
        say("it never touches the columns the flows are about.")?;
        background.load = Some(tokio::spawn(write_load(
            load_conn,
            t.load.clone(),
            background.stop_load.clone(),
        )));

        say("")?;
        say(format!(
            "The pipeline runs in this process (state in {}); connections my_conn",
            state_dir.display()
        ))?;
        say("(mysql://..., the upstream) and sink_conn (the sink). Each statement below goes")?;
        say("through its SQL interface, as with `evolve sql`.")?;
        let (stop, stopped) = oneshot::channel::<()>();
        let pipeline = t.pipeline.clone();
        background.pipeline_stop = Some(stop);
        background.pipeline = Some(tokio::spawn(async move {
            evolve_pipeline::absorb::run_with(&pipeline, async {
                let _ = stopped.await;
            })
            .await
        }));
        t.control("CREATE SOURCE shop FROM MYSQL CONNECTION my_conn")
            .await?;
        for name in ["orders", "customers"] {
            t.control(&format!(
                "CREATE TABLE {name}_v1 FROM SOURCE shop (REFERENCE {}.{name})",
                t.database
            ))
            .await?;
            t.control(&format!(
                "CREATE MATERIALIZED VIEW {name}_json AS {}",
                interface_query(&format!("{name}_v1"))
            ))
            .await?;
            t.control(&format!(
                "CREATE SINK {name}_sink FROM {name}_json INTO POSTGRES CONNECTION sink_conn \
                 (TABLE 'public.{name}_json')"
            ))
            .await?;
        }
        say("")?;
        say("On the sink, a trigger counts every write into each sink table.")?;
        for name in ["orders_json", "customers_json"] {
            audit(&t.sink, name).await?;
            say(format!(
                "sink=# CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {name} ...  -- into {name}_audit"
            ))?;
        }
        let pause = t.pause().await?;
        let (customers, orders) = t.caught_up(false).await?;
        let orders = orders.unwrap_or_default();
        t.check(
            orders.differing == 0 && customers.differing == 0,
            format!(
                "orders_json ({} documents) and customers_json ({}) in the sink equal upstream",
                orders.sink, customers.sink
            ),
        )?;
        t.resume(pause)?;
        say(format!("  (setup: {})", secs(started.elapsed())))?;
        Ok(t)
    }

    /// Flow 1: a column added upstream.
    async fn flow_1(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 1: a column is added upstream")?;
        say("Upstream adds orders.region and fills it for some rows. orders_v1 pinned its")?;
        say("columns when it was created; the binlog's table maps now carry region, which")?;
        say("orders_v1 ignores: it goes on ingesting.")?;
        let before = self.audit("orders_json").await?;
        self.upstream("ALTER TABLE orders ADD COLUMN region varchar(10)")
            .await?;
        self.upstream(
            "UPDATE orders SET region = ELT(1 + id % 3, 'eu', 'us', 'apac') WHERE id % 10 = 0",
        )
        .await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let writes = self.audit("orders_json").await? - before;
        let state = self.table("orders_v1")?.state;
        self.check(
            writes > 0 && state == TableState::Running,
            format!(
                "ingestion goes on: orders_v1 is {}, orders_json received {writes} writes from the load since the ALTER",
                state.as_str()
            ),
        )?;
        self.drift().await?;
        say("A new version with region is hydrated beside it (a consistent snapshot at its")?;
        say("binlog position, then the binlog from there), and swapped in at one position:")?;
        say("APPLY REPLACEMENT writes a row into evolve_markers upstream, and the swap")?;
        say("happens where the binlog carries it.")?;
        self.replace("orders_v2", "").await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let expected = self
            .count_upstream("SELECT COUNT(*) FROM orders WHERE region IS NOT NULL")
            .await?;
        self.apply_counted("orders_v2", expected, "the rows with a region")
            .await?;
        self.resume(pause)?;
        self.control("DROP TABLE orders_v1").await?;
        say(format!("  (flow 1: {})", secs(started.elapsed())))
    }

    /// Flow 2: a planned drop.
    async fn flow_2(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 2: a planned drop")?;
        say("orders.note is to be dropped. First a version without it (EXCLUDE COLUMNS) is")?;
        say("swapped in; then the DROP COLUMN upstream is nothing for the interface.")?;
        self.replace("orders_v3", " WITH (EXCLUDE COLUMNS (note))")
            .await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let expected = self
            .count_upstream("SELECT COUNT(*) FROM orders WHERE note IS NOT NULL")
            .await?;
        self.apply_counted("orders_v3", expected, "the rows that had a note")
            .await?;
        self.control("DROP TABLE orders_v2").await?;
        let before = self.audit("orders_json").await?;
        self.upstream("ALTER TABLE orders DROP COLUMN note").await?;
        let changed = self
            .upstream("UPDATE orders SET status = 'paid' WHERE id <= 20 AND status <> 'paid'")
            .await?;
        self.count_writes(
            before,
            "orders_v3",
            changed as i64,
            "the rows the UPDATE changed; the DROP COLUMN itself changed no document",
        )
        .await?;
        let state = self.table("orders_v3")?.state;
        self.check(
            state == TableState::Running,
            format!("orders_v3 is {} after the drop", state.as_str()),
        )?;
        self.resume(pause)?;
        say(format!("  (flow 2: {})", secs(started.elapsed())))
    }

    /// Flow 4: an unplanned drop.
    async fn flow_4(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 4: an unplanned drop")?;
        say("Somebody drops orders.coupon without telling anyone. The binlog carries the")?;
        say("ALTER TABLE; orders_v3 ingests coupon, so it stalls right there, alone. The")?;
        say("source's other table keeps flowing, and the sink keeps the last consistent state.")?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let orders_before = self.audit("orders_json").await?;
        let customers_before = self.audit("customers_json").await?;
        self.upstream("ALTER TABLE orders DROP COLUMN coupon")
            .await?;
        self.resume(pause)?;
        let stalled_at = Instant::now();
        let table = self
            .wait_table("orders_v3", |t| t.state == TableState::Stalled)
            .await?;
        say(format!(
            "  orders_v3 stalled after {}: {}",
            secs(stalled_at.elapsed()),
            table.error.as_deref().unwrap_or("(no error)")
        ))?;
        let status = admin::status(&self.pipeline)
            .await
            .context("reading the pipeline's status")?;
        let interface = status
            .objects
            .iter()
            .find(|o| o.name == "orders_json")
            .ok_or_else(|| anyhow!("evolve status does not list orders_json"))?;
        say(format!(
            "  evolve status: materialized view orders_json is {}: {}",
            interface.state,
            interface.error.as_deref().unwrap_or("(no reason given)")
        ))?;
        self.check(
            interface.state == "stale" && interface.error.is_some(),
            format!("status says orders_json is {} and why", interface.state),
        )?;
        self.drift().await?;
        self.upstream("UPDATE customers SET city = 'Porto' WHERE id = 7")
            .await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let pause = self.pause().await?;
        let (customers, _) = self.caught_up(true).await?;
        let orders_writes = self.audit("orders_json").await? - orders_before;
        let customers_writes = self.audit("customers_json").await? - customers_before;
        self.check(
            orders_writes == 0,
            format!(
                "orders_json received {orders_writes} writes during the stall: the last consistent state"
            ),
        )?;
        self.check(
            customers.differing == 0 && customers_writes > 0,
            format!(
                "customers_json received {customers_writes} writes during the stall and equals upstream"
            ),
        )?;
        self.resume(pause)?;
        say("The same replacement flow recovers: a version with today's columns.")?;
        self.replace("orders_v4", "").await?;
        let pause = self.pause().await?;
        self.caught_up(true).await?;
        let columns = self.document_columns("orders_v4")?;
        let expected = self.diff("orders", &columns).await?;
        say(format!(
            "  upstream documents that differ from the sink's stale ones: {} (rows that had a",
            expected.differing
        ))?;
        say("  coupon, and rows the load changed during the stall)")?;
        self.apply_counted(
            "orders_v4",
            expected.differing,
            &format!(
                "the sink resumes without reprocessing: {} orders in all",
                expected.upstream
            ),
        )
        .await?;
        self.resume(pause)?;
        self.control("DROP TABLE orders_v3").await?;
        say(format!("  (flow 4: {})", secs(started.elapsed())))
    }

    /// Flow 5: `ABSORB = 'auto'`.
    async fn flow_5(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 5: ABSORB = 'auto'")?;
        say("The same flow, run by evolve itself: when drift appears it creates the next")?;
        say("version, hydrates it, applies it at a binlog marker and drops the old one.")?;
        self.control("ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'auto')")
            .await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let before = self.audit("orders_json").await?;
        let old = self.interface_table("orders_json")?;
        self.upstream("ALTER TABLE orders ADD COLUMN priority int")
            .await?;
        self.upstream("UPDATE orders SET priority = 1 + id % 3 WHERE id % 25 = 0")
            .await?;
        say(format!(
            "  waiting for evolve to absorb it (at most {} s; the load stays paused) ...",
            ABSORB_WAIT.as_secs()
        ))?;
        let waiting = Instant::now();
        let new = loop {
            let now_reads = self.interface_table("orders_json")?;
            let old_exists = self.pipeline.tables()?.iter().any(|t| t.name == old);
            if now_reads != old && !old_exists {
                break Some(now_reads);
            }
            if waiting.elapsed() >= ABSORB_WAIT {
                break None;
            }
            tokio::time::sleep(POLL).await;
        };
        let Some(new) = new else {
            let now_reads = self.interface_table("orders_json")?;
            self.check(
                false,
                format!(
                    "evolve did not absorb the change within {} s (orders_json reads {now_reads})",
                    ABSORB_WAIT.as_secs()
                ),
            )?;
            self.resume(pause)?;
            return Ok(());
        };
        say(format!(
            "  orders_json now reads {new}, and {old} is gone ({})",
            secs(waiting.elapsed())
        ))?;
        let expected = self
            .count_upstream("SELECT COUNT(*) FROM orders WHERE priority IS NOT NULL")
            .await?;
        self.count_writes(before, &new, expected, "the rows with a priority")
            .await?;
        self.resume(pause)?;
        say(format!("  (flow 5: {})", secs(started.elapsed())))
    }

    async fn finish(&mut self, background: &mut Background) -> anyhow::Result<()> {
        say("")?;
        say("== the end")?;
        background.stop_load().await;
        let load = self.load.clone();
        let errors = load.errors.load(Ordering::SeqCst);
        let first = load
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.check(
            errors == 0,
            format!(
                "the load ran {} transactions, {errors} errors{}",
                load.transactions.load(Ordering::SeqCst),
                first.map(|e| format!(" (first: {e})")).unwrap_or_default()
            ),
        )?;
        let customers = self
            .converge("customers", &self.document_columns("customers_v1")?)
            .await?;
        let table = self.interface_table("orders_json")?;
        let orders = self
            .converge("orders", &self.document_columns(&table)?)
            .await?;
        self.check(
            orders.differing == 0 && customers.differing == 0,
            format!(
                "orders_json ({} documents, {} differing) and customers_json ({}, {} differing) equal upstream",
                orders.sink, orders.differing, customers.sink, customers.differing
            ),
        )
    }

    // ------------------------------------------------------- statements

    async fn control(&self, sql: &str) -> anyhow::Result<()> {
        say(format!("evolve=> {sql};"))?;
        let started = Instant::now();
        let response = admin::execute(&self.pipeline, sql).await;
        for result in &response.results {
            if let Some(notice) = &result.notice {
                say(format!("NOTICE:  {notice}"))?;
            }
            let took = started.elapsed();
            if took >= Duration::from_millis(100) {
                say(format!("{}   ({})", result.status, secs(took)))?;
            } else {
                say(&result.status)?;
            }
        }
        let Some(error) = response.error else {
            return Ok(());
        };
        say(format!("ERROR:  {}", error.message))?;
        if let Some(detail) = &error.detail {
            say(format!("DETAIL:  {detail}"))?;
        }
        if let Some(hint) = &error.hint {
            say(format!("HINT:  {hint}"))?;
        }
        bail!("{sql} failed: {}", error.message)
    }

    /// Runs one statement upstream, printed as the mariadb client does;
    /// the rows it affected.
    async fn upstream(&mut self, sql: &str) -> anyhow::Result<u64> {
        say(format!("MariaDB [{}]> {sql};", self.database))?;
        self.my
            .query_drop(sql)
            .await
            .with_context(|| format!("upstream: {sql}"))?;
        let n = self.my.affected_rows();
        say(format!("Query OK, {n} rows affected"))?;
        Ok(n)
    }

    async fn replace(&self, version: &str, options: &str) -> anyhow::Result<()> {
        self.control(&format!(
            "CREATE TABLE {version} FROM SOURCE shop (REFERENCE {}.orders){options}",
            self.database
        ))
        .await?;
        self.control(&format!(
            "CREATE REPLACEMENT MATERIALIZED VIEW {} FOR orders_json AS {}",
            replacement_name(version),
            interface_query(version)
        ))
        .await?;
        let started = Instant::now();
        let table = self
            .wait_table(version, |t| t.state == TableState::Running)
            .await?;
        say(format!(
            "  {version} hydrated while the load went on: {} rows copied, then the binlog from the snapshot's position ({})",
            table.rows_copied,
            secs(started.elapsed())
        ))
    }

    async fn apply_counted(
        &mut self,
        version: &str,
        expected: i64,
        what: &str,
    ) -> anyhow::Result<()> {
        let before = self.audit("orders_json").await?;
        self.control(&format!(
            "ALTER MATERIALIZED VIEW orders_json APPLY REPLACEMENT {}",
            replacement_name(version)
        ))
        .await?;
        self.count_writes(before, version, expected, what).await
    }

    async fn count_writes(
        &mut self,
        before: i64,
        version: &str,
        expected: i64,
        what: &str,
    ) -> anyhow::Result<()> {
        let columns = self.document_columns(version)?;
        self.wait_converged("orders", &columns).await?;
        tokio::time::sleep(SETTLE).await;
        let writes = self.audit("orders_json").await? - before;
        self.check(
            writes == expected,
            format!("downstream changes: {writes}   rows that really changed: {expected}"),
        )?;
        say(format!("    ({what})"))
    }

    // ------------------------------------------------------------ waits

    async fn pause(&self) -> anyhow::Result<Paused> {
        let guard = self.load.gate.clone().lock_owned().await;
        say("  (load paused while the numbers are taken)")?;
        Ok(Paused { _guard: guard })
    }

    fn resume(&mut self, pause: Paused) -> anyhow::Result<()> {
        drop(pause);
        say("  (load resumed)")
    }

    /// Waits until the sink has every change of the paused load (for a
    /// stalled orders table: until its audit count holds still).
    async fn caught_up(&mut self, orders_stalled: bool) -> anyhow::Result<(Diff, Option<Diff>)> {
        let columns = self.document_columns("customers_v1")?;
        let customers = self.wait_converged("customers", &columns).await?;
        if !orders_stalled {
            let table = self.interface_table("orders_json")?;
            let columns = self.document_columns(&table)?;
            let orders = self.wait_converged("orders", &columns).await?;
            return Ok((customers, Some(orders)));
        }
        let started = Instant::now();
        let mut count = self.audit("orders_json").await?;
        loop {
            tokio::time::sleep(SETTLE).await;
            let now = self.audit("orders_json").await?;
            if now == count {
                return Ok((customers, None));
            }
            if started.elapsed() >= WAIT {
                bail!("orders_json kept receiving writes while its table was stalled");
            }
            count = now;
        }
    }

    async fn wait_converged(&mut self, table: &str, columns: &[String]) -> anyhow::Result<Diff> {
        let diff = self.converge(table, columns).await?;
        if diff.differing != 0 {
            bail!(
                "the sink table {table}_json did not catch up with upstream {table} within {} s: {} rows upstream, {} in the sink, {} differing",
                WAIT.as_secs(),
                diff.upstream,
                diff.sink,
                diff.differing
            );
        }
        Ok(diff)
    }

    async fn converge(&mut self, table: &str, columns: &[String]) -> anyhow::Result<Diff> {
        let started = Instant::now();
        loop {
            let diff = self.diff(table, columns).await?;
            if diff.differing == 0 || started.elapsed() >= WAIT {
                return Ok(diff);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn wait_table(
        &self,
        name: &str,
        ready: impl Fn(&evolve_pipeline::TableInfo) -> bool,
    ) -> anyhow::Result<evolve_pipeline::TableInfo> {
        let started = Instant::now();
        loop {
            let table = self.table(name)?;
            if ready(&table) {
                return Ok(table);
            }
            if started.elapsed() >= WAIT {
                bail!(
                    "table {name} is still {} after {} s{}",
                    table.state.as_str(),
                    WAIT.as_secs(),
                    table.error.map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    // --------------------------------------------------------- readings

    fn check(&mut self, ok: bool, line: String) -> anyhow::Result<()> {
        self.checks += 1;
        if !ok {
            self.failures.push(line.clone());
        }
        say(format!("  {line}   {}", if ok { "✓" } else { "✗" }))
    }

    /// `evolve drift`, one line per table.
    async fn drift(&self) -> anyhow::Result<()> {
        let rows = evolve_pipeline::poll::drift(&self.pipeline, None)
            .await
            .context("reading drift")?;
        for row in rows {
            let mut what = Vec::new();
            if !row.added_upstream.is_empty() {
                what.push(format!("added upstream: {}", row.added_upstream.join(", ")));
            }
            if !row.dropped_upstream.is_empty() {
                what.push(format!(
                    "dropped upstream: {}",
                    row.dropped_upstream.join(", ")
                ));
            }
            for change in &row.type_changed {
                what.push(format!("type changed: {change}"));
            }
            say(format!(
                "  evolve drift: {} ({}) {}, {}; {}",
                row.table,
                row.upstream,
                row.signal,
                row.status,
                what.join("; ")
            ))?;
        }
        Ok(())
    }

    fn table(&self, name: &str) -> anyhow::Result<evolve_pipeline::TableInfo> {
        self.pipeline
            .tables()?
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| anyhow!("the pipeline has no table {name}"))
    }

    fn interface_table(&self, name: &str) -> anyhow::Result<String> {
        self.pipeline
            .interfaces()?
            .into_iter()
            .find(|i| i.name == name)
            .map(|i| i.table)
            .ok_or_else(|| anyhow!("the pipeline has no materialized view {name}"))
    }

    fn document_columns(&self, table: &str) -> anyhow::Result<Vec<String>> {
        Ok(self
            .table(table)?
            .document_columns()
            .map(|c| c.name.clone())
            .collect())
    }

    async fn count_upstream(&mut self, sql: &str) -> anyhow::Result<i64> {
        let n: Option<i64> = self
            .my
            .query_first(sql)
            .await
            .with_context(|| format!("upstream: {sql}"))?;
        Ok(n.unwrap_or(0))
    }

    async fn audit(&self, table: &str) -> anyhow::Result<i64> {
        let sql = format!(
            "SELECT count(*) FROM public.{}",
            quote_ident(&format!("{table}_audit"))
        );
        let row = self
            .sink
            .query_one(&sql, &[])
            .await
            .with_context(|| format!("sink: {sql}"))?;
        Ok(row.get(0))
    }

    /// Compares sink table `<table>_json` with upstream `table` (keyed by
    /// `id`; integer and text columns), each upstream row's document taken
    /// over `columns` with NULLs left out.
    async fn diff(&mut self, table: &str, columns: &[String]) -> anyhow::Result<Diff> {
        let list: Vec<String> = columns
            .iter()
            .map(|c| format!("`{}`", c.replace('`', "``")))
            .collect();
        let sql = format!("SELECT {} FROM `{table}`", list.join(", "));
        let rows: Vec<mysql_async::Row> = self
            .my
            .exec(sql.as_str(), ())
            .await
            .with_context(|| format!("upstream: {sql}"))?;
        let mut upstream: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for row in rows {
            let mut doc = serde_json::Map::new();
            for (i, column) in columns.iter().enumerate() {
                let value = match row.as_ref(i) {
                    None | Some(mysql_async::Value::NULL) => continue,
                    Some(mysql_async::Value::Int(n)) => serde_json::json!(n),
                    Some(mysql_async::Value::UInt(n)) => serde_json::json!(n),
                    Some(mysql_async::Value::Bytes(b)) => {
                        serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
                    }
                    Some(other) => {
                        bail!("{table}.{column}: a value the tour does not read: {other:?}")
                    }
                };
                doc.insert(column.clone(), value);
            }
            let key = serde_json::json!({"id": doc.get("id").cloned().unwrap_or_default()});
            upstream.insert(key.to_string(), serde_json::Value::Object(doc));
        }
        let sink_rows = self
            .sink
            .query(
                &format!(
                    "SELECT key::text, data::text FROM public.{}",
                    quote_ident(&format!("{table}_json"))
                ),
                &[],
            )
            .await
            .with_context(|| format!("reading sink table {table}_json"))?;
        let mut differing = 0;
        let mut seen = 0;
        for row in &sink_rows {
            let key: serde_json::Value = serde_json::from_str(row.get::<_, &str>(0))?;
            let data: serde_json::Value = serde_json::from_str(row.get::<_, &str>(1))?;
            match upstream.get(&key.to_string()) {
                Some(doc) => {
                    seen += 1;
                    if *doc != data {
                        differing += 1;
                    }
                }
                None => differing += 1,
            }
        }
        differing += upstream.len() as i64 - seen;
        Ok(Diff {
            upstream: upstream.len() as i64,
            sink: sink_rows.len() as i64,
            differing,
        })
    }
}

/// `orders_json_v2` for table `orders_v2`.
fn replacement_name(version: &str) -> String {
    let suffix = version.strip_prefix("orders_").unwrap_or(version);
    format!("orders_json_{suffix}")
}

/// Counts every write into sink table `table` in `<table>_audit`.
async fn audit(sink: &Client, table: &str) -> anyhow::Result<()> {
    let (t, audit, function) = (
        quote_ident(table),
        quote_ident(&format!("{table}_audit")),
        quote_ident(&format!("{table}_audit_fn")),
    );
    sink.batch_execute(&format!(
        "CREATE TABLE public.{audit} (op text NOT NULL, key jsonb NOT NULL);
         CREATE FUNCTION public.{function}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO public.{audit} (op, key) VALUES (TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.{t}
           FOR EACH ROW EXECUTE FUNCTION public.{function}();"
    ))
    .await
    .with_context(|| format!("sink: creating the audit trigger on {table}"))
}
