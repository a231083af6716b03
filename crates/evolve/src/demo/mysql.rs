//! `evolve demo mysql`: the pipeline's four absorb flows with a MariaDB
//! upstream, everything in this process.
//!
//! A throwaway MariaDB server ([`evolve_test::MariaDb`]: `mariadb-install-db`
//! and `mariadbd` with the row-based binlog, the same binaries and settings
//! the tests use) holds `orders` and `customers`; a throwaway PostgreSQL
//! cluster is the sink. A [`Pipeline`] reads the server's binlog and every
//! control statement goes through [`evolve_pipeline::admin::execute`], so the tour prints
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
use std::time::Instant;

use anyhow::{Context, bail};
use evolve_pg::{Client, quote_ident};
use evolve_pipeline::source::mysql::mysql_async::{self, prelude::Queryable};
use evolve_pipeline::{Config, Pipeline, TableState};
use evolve_test::{Cluster, MariaDb};
use tokio::sync::Mutex as AsyncMutex;

use super::stage::{
    self, ABSORB_WAIT, Background, CUSTOMERS, Diff, LOAD_GOES_ON, LOAD_INTERVAL, ORDERS, Paused,
    Rng, Stage, Toured, Upstream, say, secs,
};

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

    stage::frame(
        started,
        keep,
        (my, sink),
        &state_dir,
        "server, cluster",
        async |(my, sink), background| tour(my, sink, &state_dir, background).await,
    )
    .await
}

async fn tour(
    my: &MariaDb,
    sink: &Cluster,
    state_dir: &Path,
    background: &mut Background,
) -> anyhow::Result<Toured> {
    let mut t = Tour::setup(my, sink, state_dir, background).await?;
    t.flow_1().await?;
    t.flow_2().await?;
    t.flow_4().await?;
    t.flow_5().await?;
    t.finish(background).await?;
    Ok(Toured {
        checks: t.stage.checks,
        failures: t.stage.failures,
        keep: vec![
            format!(
                "  upstream: mariadb --socket={} {}",
                my.socket().display(),
                t.database
            ),
            format!("  sink:     psql {}", t.sink_url),
        ],
    })
}

// ----------------------------------------------------------- background

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
    let mut rng = Rng::new();
    let mut below = |n: i64| rng.below(n as u64) as i64;
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

struct Tour {
    /// The pipeline, the sink and the checks.
    stage: Stage,
    my: mysql_async::Conn,
    database: String,
    sink_url: String,
    load: Arc<Load>,
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
            stage: Stage::new(
                pipeline,
                sink,
                db.name.clone(),
                "the binlog from the snapshot's position",
            ),
            my,
            database: db.name.clone(),
            sink_url: sink_db.url.clone(),
            load: Arc::new(Load::default()),
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
        background.spawn_pipeline(t.stage.pipeline.clone());
        t.stage
            .control("CREATE SOURCE shop FROM MYSQL CONNECTION my_conn")
            .await?;
        t.stage.create_interfaces().await?;
        say("")?;
        say("On the sink, a trigger counts every write into each sink table.")?;
        for name in ["orders_json", "customers_json"] {
            stage::audit(&t.stage.sink, name, false).await?;
            say(format!(
                "sink=# CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {name} ...  -- into {name}_audit"
            ))?;
        }
        let pause = t.pause().await?;
        t.stage.check_hydrated(&mut t.my).await?;
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
        let before = self.stage.audit("orders_json").await?;
        self.upstream("ALTER TABLE orders ADD COLUMN region varchar(10)")
            .await?;
        self.upstream(
            "UPDATE orders SET region = ELT(1 + id % 3, 'eu', 'us', 'apac') WHERE id % 10 = 0",
        )
        .await?;
        self.stage.check_ingestion_goes_on(before).await?;
        self.stage.drift().await?;
        say("A new version with region is hydrated beside it (a consistent snapshot at its")?;
        say("binlog position, then the binlog from there), and swapped in at one position:")?;
        say("APPLY REPLACEMENT writes a row into evolve_markers upstream, and the swap")?;
        say("happens where the binlog carries it.")?;
        self.stage.replace("orders_v2", "").await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let expected = self
            .count_upstream("SELECT COUNT(*) FROM orders WHERE region IS NOT NULL")
            .await?;
        self.stage
            .apply_counted(
                &mut self.my,
                "orders_v2",
                expected,
                "the rows with a region",
            )
            .await?;
        self.resume(pause)?;
        self.stage.control("DROP TABLE orders_v1").await?;
        say(format!("  (flow 1: {})", secs(started.elapsed())))
    }

    /// Flow 2: a planned drop.
    async fn flow_2(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 2: a planned drop")?;
        say("orders.note is to be dropped. First a version without it (EXCLUDE COLUMNS) is")?;
        say("swapped in; then the DROP COLUMN upstream is nothing for the interface.")?;
        self.stage
            .replace("orders_v3", " WITH (EXCLUDE COLUMNS (note))")
            .await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let expected = self
            .count_upstream("SELECT COUNT(*) FROM orders WHERE note IS NOT NULL")
            .await?;
        self.stage
            .apply_counted(
                &mut self.my,
                "orders_v3",
                expected,
                "the rows that had a note",
            )
            .await?;
        self.stage.control("DROP TABLE orders_v2").await?;
        let before = self.stage.audit("orders_json").await?;
        self.upstream("ALTER TABLE orders DROP COLUMN note").await?;
        let changed = self
            .upstream("UPDATE orders SET status = 'paid' WHERE id <= 20 AND status <> 'paid'")
            .await?;
        self.stage
            .count_writes(
                &mut self.my,
                before,
                "orders_v3",
                changed as i64,
                "the rows the UPDATE changed; the DROP COLUMN itself changed no document",
            )
            .await?;
        let state = self.stage.table("orders_v3")?.state;
        self.stage.check(
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
        let orders_before = self.stage.audit("orders_json").await?;
        let customers_before = self.stage.audit("customers_json").await?;
        self.upstream("ALTER TABLE orders DROP COLUMN coupon")
            .await?;
        self.resume(pause)?;
        self.stage.check_stalled("orders_v3").await?;
        self.stage.drift().await?;
        self.upstream("UPDATE customers SET city = 'Porto' WHERE id = 7")
            .await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let pause = self.pause().await?;
        let (customers, _) = self.caught_up(true).await?;
        let orders_writes = self.stage.audit("orders_json").await? - orders_before;
        let customers_writes = self.stage.audit("customers_json").await? - customers_before;
        self.stage.check(
            orders_writes == 0,
            format!(
                "orders_json received {orders_writes} writes during the stall: the last consistent state"
            ),
        )?;
        self.stage.check(
            customers.differing == 0 && customers_writes > 0,
            format!(
                "customers_json received {customers_writes} writes during the stall and equals upstream"
            ),
        )?;
        self.resume(pause)?;
        say("The same replacement flow recovers: a version with today's columns.")?;
        self.stage.replace("orders_v4", "").await?;
        let pause = self.pause().await?;
        self.caught_up(true).await?;
        let columns = self.stage.document_columns("orders_v4")?;
        let expected = self.my.diff(&self.stage.sink, "orders", &columns).await?;
        say(format!(
            "  upstream documents that differ from the sink's stale ones: {} (rows that had a",
            expected.differing
        ))?;
        say("  coupon, and rows the load changed during the stall)")?;
        self.stage
            .apply_counted(
                &mut self.my,
                "orders_v4",
                expected.differing,
                &format!(
                    "the sink resumes without reprocessing: {} orders in all",
                    expected.upstream
                ),
            )
            .await?;
        self.resume(pause)?;
        self.stage.control("DROP TABLE orders_v3").await?;
        say(format!("  (flow 4: {})", secs(started.elapsed())))
    }

    /// Flow 5: `ABSORB = 'auto'`.
    async fn flow_5(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 5: ABSORB = 'auto'")?;
        say("The same flow, run by evolve itself: when drift appears it creates the next")?;
        say("version, hydrates it, applies it at a binlog marker and drops the old one.")?;
        self.stage
            .control("ALTER MATERIALIZED VIEW orders_json SET (ABSORB = 'auto')")
            .await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let before = self.stage.audit("orders_json").await?;
        let old = self.stage.interface_table("orders_json")?;
        self.upstream("ALTER TABLE orders ADD COLUMN priority int")
            .await?;
        self.upstream("UPDATE orders SET priority = 1 + id % 3 WHERE id % 25 = 0")
            .await?;
        say(format!(
            "  waiting for evolve to absorb it (at most {} s; the load stays paused) ...",
            ABSORB_WAIT.as_secs()
        ))?;
        let Some(new) = self.stage.wait_absorbed(&old).await? else {
            self.resume(pause)?;
            return Ok(());
        };
        let expected = self
            .count_upstream("SELECT COUNT(*) FROM orders WHERE priority IS NOT NULL")
            .await?;
        self.stage
            .count_writes(
                &mut self.my,
                before,
                &new,
                expected,
                "the rows with a priority",
            )
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
        self.stage.check(
            errors == 0,
            format!(
                "the load ran {} transactions, {errors} errors{}",
                load.transactions.load(Ordering::SeqCst),
                first.map(|e| format!(" (first: {e})")).unwrap_or_default()
            ),
        )?;
        self.stage.check_equal_upstream(&mut self.my).await
    }

    // ------------------------------------------------------- statements

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

    // ------------------------------------------------------------ waits

    async fn pause(&self) -> anyhow::Result<Paused> {
        stage::pause(&self.load.gate).await
    }

    fn resume(&mut self, pause: Paused) -> anyhow::Result<()> {
        stage::resume(pause)?;
        Ok(())
    }

    /// [`Stage::caught_up`], `orders_stalled` or not.
    async fn caught_up(&mut self, orders_stalled: bool) -> anyhow::Result<(Diff, Option<Diff>)> {
        let stalled = "orders_json kept receiving writes while its table was stalled";
        self.stage
            .caught_up(&mut self.my, orders_stalled.then_some(stalled))
            .await
    }

    // --------------------------------------------------------- readings

    async fn count_upstream(&mut self, sql: &str) -> anyhow::Result<i64> {
        let n: Option<i64> = self
            .my
            .query_first(sql)
            .await
            .with_context(|| format!("upstream: {sql}"))?;
        Ok(n.unwrap_or(0))
    }
}

/// Where the upstream is MariaDB.
impl Upstream for mysql_async::Conn {
    /// Compares sink table `<table>_json` with upstream `table` (keyed by
    /// `id`; integer and text columns), each upstream row's document taken
    /// over `columns` with NULLs left out.
    async fn diff(
        &mut self,
        sink: &Client,
        table: &str,
        columns: &[String],
    ) -> anyhow::Result<Diff> {
        let list: Vec<String> = columns
            .iter()
            .map(|c| format!("`{}`", c.replace('`', "``")))
            .collect();
        let sql = format!("SELECT {} FROM `{table}`", list.join(", "));
        let rows: Vec<mysql_async::Row> = self
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
        let sink_rows = sink
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
