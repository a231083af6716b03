//! `evolve demo` (the pipeline tour): the pipeline absorbing upstream schema
//! changes behind a stable JSON interface, under write load, everything in
//! this process.
//!
//! Two throwaway clusters ([`evolve_test::Cluster`]): the upstream, with
//! `orders` and `customers`, and the sink. A [`Pipeline`] runs in a task
//! between them, and every control statement goes through
//! [`evolve_pipeline::admin::execute`], so the tour prints and runs the real statements. A
//! load task keeps writing upstream (status and amount of existing orders,
//! new orders, customer visits: never a column the flows are about); a
//! reader task queries the consumer view `open_orders` on the sink every
//! 20 ms for the whole tour.
//!
//! # What is counted, and how
//!
//! *Downstream changes* are the writes a sink table received, counted by
//! an `AFTER INSERT OR UPDATE OR DELETE ... FOR EACH ROW` trigger into an
//! audit table beside it. *Rows that really changed* are computed from the
//! upstream on its own: `count(*) WHERE region IS NOT NULL` and the like,
//! or, after the unplanned drop, the number of keys whose document upstream
//! (`coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}')` over the new version's
//! columns) differs from the one the sink holds.
//!
//! For each count the load pauses (a lock it takes for each transaction),
//! the tour waits until the sink has caught up (every sink document equals
//! the upstream one over the current version's columns; for a stalled
//! table, its audit count has not moved), counts, applies, waits until the
//! sink shows the new version, counts the writes, and resumes the load.
//! Readers never pause.
//!
//! Any failed expectation is printed with a ✗ and makes the command exit 1
//! after cleanup; a statement that fails, or a wait that times out, stops
//! the tour there (and also cleans up).
//!
//! Cleanup (load, reader, pipeline, both clusters, the state directory)
//! runs whatever happened, also on Ctrl-C; with `--keep` it waits for
//! Ctrl-C after the tour, with the pipeline still running. The tour runs
//! on the multi-thread runtime (`cli::wants_multi_thread`): the pipeline,
//! the load and the reader work at the same time as the narration.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use evolve_pg::{Client, quote_ident, quote_literal};
use evolve_pipeline::{Config, Pipeline, TableState};
use evolve_test::Cluster;
use tokio::sync::Mutex as AsyncMutex;

use super::stage::{
    self, ABSORB_WAIT, Background, CUSTOMERS, Diff, LOAD_GOES_ON, LOAD_INTERVAL, ORDERS, Paused,
    Rng, Stage, Toured, Upstream, WAIT, say, secs,
};

/// The reader's pause between queries.
const READ_INTERVAL: Duration = Duration::from_millis(20);

const CREATE_CUSTOMERS: &str = "CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, \
     city text NOT NULL, visits int NOT NULL DEFAULT 0)";
const CREATE_ORDERS: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, \
     status text NOT NULL, amount numeric(10,2) NOT NULL, note text, coupon text, \
     created_at timestamptz NOT NULL DEFAULT now())";

const OPEN_ORDERS: &str = "CREATE VIEW open_orders AS SELECT (key->>'id')::bigint AS id, \
     (data->>'customer_id')::bigint AS customer_id, (data->>'amount')::numeric AS amount \
     FROM public.orders_json WHERE data->>'status' = 'open'";

pub async fn run(keep: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    say("evolve demo: a change data capture pipeline absorbing upstream schema changes")?;
    say("")?;
    say("An upstream PostgreSQL with an `orders` table under write load, a pipeline that")?;
    say("turns each row into one JSON document (the interface orders_json, whose shape")?;
    say("never changes), and a sink database where a consumer view reads them. Upstream,")?;
    say("the schema changes four times; each time the pipeline absorbs the change and the")?;
    say("sink receives exactly the rows whose document changed. To make the counts")?;
    say("comparable, the write load pauses while the numbers are taken; readers never do.")?;
    say("The flows are numbered as in the pipeline's design; flow 3, a planned type change,")?;
    say("is flow 2 followed by flow 1.")?;
    say("")?;
    say("== setup")?;
    say("starting two throwaway PostgreSQL clusters (initdb + pg_ctl), upstream and sink ...")?;
    let (up, sink) = tokio::join!(
        tokio::task::spawn_blocking(Cluster::start),
        tokio::task::spawn_blocking(Cluster::start)
    );
    let up = up
        .context("starting the upstream cluster")?
        .context("starting the upstream cluster")?;
    let sink = sink
        .context("starting the sink cluster")?
        .context("starting the sink cluster")?;
    say(format!(
        "  upstream on 127.0.0.1:{}, sink on 127.0.0.1:{} ({})",
        up.port(),
        sink.port(),
        secs(started.elapsed())
    ))?;
    let state_dir = std::env::temp_dir().join(format!("evolve-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state_dir);

    stage::frame(
        started,
        keep,
        (up, sink),
        &state_dir,
        "clusters",
        async |(up, sink), background| tour(up, sink, &state_dir, background).await,
    )
    .await
}

/// Runs setup and flows.
async fn tour(
    up_cluster: &Cluster,
    sink_cluster: &Cluster,
    state_dir: &Path,
    background: &mut Background,
) -> anyhow::Result<Toured> {
    let mut t = Tour::setup(up_cluster, sink_cluster, state_dir, background).await?;
    t.flow_1().await?;
    t.flow_2().await?;
    t.flow_4().await?;
    t.flow_5().await?;
    t.finish(background).await?;
    Ok(Toured {
        checks: t.stage.checks,
        failures: t.stage.failures,
        keep: vec![
            format!("  upstream: psql {}", t.up_url),
            format!(
                "  sink:     psql {}   (try: SELECT * FROM open_orders LIMIT 5)",
                t.sink_url
            ),
        ],
    })
}

// ----------------------------------------------------------- background

/// What the load did, and the lock that pauses it.
#[derive(Default)]
struct Load {
    /// Held for each transaction; the tour holds it to pause the load.
    gate: Arc<AsyncMutex<()>>,
    order_updates: AtomicU64,
    order_inserts: AtomicU64,
    customer_updates: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Load {
    fn orders_changed(&self) -> u64 {
        self.order_updates.load(Ordering::SeqCst) + self.order_inserts.load(Ordering::SeqCst)
    }

    fn transactions(&self) -> u64 {
        self.orders_changed() + self.customer_updates.load(Ordering::SeqCst)
    }
}

/// Until `stop`: one upstream transaction every [`LOAD_INTERVAL`], each
/// under the gate: an order's status and amount (55%), a new order (25%),
/// a customer's visits (20%).
async fn write_load(client: Client, load: Arc<Load>, stop: Arc<AtomicBool>) {
    const STATUSES: [&str; 3] = ["open", "paid", "shipped"];
    let mut rng = Rng::new();
    let mut next_id = ORDERS + 1;
    while !stop.load(Ordering::SeqCst) {
        {
            let _gate = load.gate.lock().await;
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let roll = rng.below(100);
            let result = if roll < 55 {
                let id = 1 + rng.below((next_id - 1) as u64) as i64;
                let status = STATUSES[rng.below(3) as usize];
                client
                    .execute(
                        "UPDATE orders SET status = $1, amount = amount + 1 WHERE id = $2",
                        &[&status, &id],
                    )
                    .await
                    .map(|_| &load.order_updates)
            } else if roll < 80 {
                let customer = 1 + rng.below(CUSTOMERS as u64) as i64;
                let inserted = client
                    .execute(
                        "INSERT INTO orders (id, customer_id, status, amount) \
                         VALUES ($1, $2, 'open', round((random() * 500)::numeric, 2))",
                        &[&next_id, &customer],
                    )
                    .await
                    .map(|_| &load.order_inserts);
                if inserted.is_ok() {
                    next_id += 1;
                }
                inserted
            } else {
                let customer = 1 + rng.below(CUSTOMERS as u64) as i64;
                client
                    .execute(
                        "UPDATE customers SET visits = visits + 1 WHERE id = $1",
                        &[&customer],
                    )
                    .await
                    .map(|_| &load.customer_updates)
            };
            match result {
                Ok(counter) => {
                    counter.fetch_add(1, Ordering::SeqCst);
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

/// What the reader saw.
#[derive(Default)]
struct Reads {
    answers: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// The last answer: open orders.
    open: AtomicI64,
}

/// Until `stop`: the consumer's query every [`READ_INTERVAL`].
async fn read_open_orders(client: Client, reads: Arc<Reads>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match client
            .query_one(
                "SELECT count(*), coalesce(sum(amount), 0)::text FROM open_orders",
                &[],
            )
            .await
        {
            Ok(row) => {
                reads.open.store(row.get(0), Ordering::SeqCst);
                reads.answers.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                reads.errors.fetch_add(1, Ordering::SeqCst);
                let mut first = reads.first_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| e.to_string());
            }
        }
        tokio::time::sleep(READ_INTERVAL).await;
    }
}

// ----------------------------------------------------------------- tour

/// Where the upstream is PostgreSQL.
impl Upstream for Client {
    async fn diff(
        &mut self,
        sink: &Client,
        table: &str,
        columns: &[String],
    ) -> anyhow::Result<Diff> {
        let sink_table = quote_ident(&format!("{table}_json"));
        let rows = sink
            .query(
                &format!("SELECT key::text, data::text FROM public.{sink_table}"),
                &[],
            )
            .await
            .with_context(|| format!("reading sink table {table}_json"))?;
        let keys: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let docs: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
        let columns = columns.to_vec();
        let sql = format!(
            "WITH s AS (SELECT k::jsonb AS k, d::jsonb AS d FROM unnest($1::text[], $2::text[]) AS x(k, d)), \
                  u AS (SELECT jsonb_build_object('id', t.id) AS k, \
                               coalesce(jsonb_strip_nulls((SELECT jsonb_object_agg(e.key, e.value) \
                                 FROM jsonb_each(to_jsonb(t)) e WHERE e.key = ANY($3::text[]))), '{{}}'::jsonb) AS d \
                        FROM public.{} t) \
             SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM s), \
                    count(*) FILTER (WHERE u.d IS DISTINCT FROM s.d) \
             FROM u FULL JOIN s ON u.k = s.k",
            quote_ident(table)
        );
        let row = self
            .query_one(&sql, &[&keys, &docs, &columns])
            .await
            .with_context(|| format!("comparing upstream {table} with the sink"))?;
        Ok(Diff {
            upstream: row.get(0),
            sink: row.get(1),
            differing: row.get(2),
        })
    }
}

struct Tour {
    /// The pipeline, the sink and the checks.
    stage: Stage,
    up: Client,
    up_url: String,
    sink_url: String,
    load: Arc<Load>,
    /// When the load started, and how long it was paused since.
    load_started: Instant,
    paused: Duration,
    reads: Arc<Reads>,
}

impl Tour {
    async fn setup(
        up_cluster: &Cluster,
        sink_cluster: &Cluster,
        state_dir: &Path,
        background: &mut Background,
    ) -> anyhow::Result<Tour> {
        let started = Instant::now();
        let up_db = up_cluster
            .create_database("shop")
            .await
            .context("creating the upstream database")?;
        let sink_db = sink_cluster
            .create_database("warehouse")
            .await
            .context("creating the sink database")?;
        let up = session(&up_db.url).await?;
        let sink = session(&sink_db.url).await?;
        let config = Config::new(PathBuf::from(state_dir))
            .with_connection("pg_conn", up_db.url.clone())
            .with_connection("sink_conn", sink_db.url.clone());
        let pipeline = Arc::new(Pipeline::open(config).context("opening the pipeline's state")?);
        let mut t = Tour {
            stage: Stage::new(pipeline, sink, "public", "the changes made meanwhile"),
            up,
            up_url: up_db.url.clone(),
            sink_url: sink_db.url.clone(),
            load: Arc::new(Load::default()),
            load_started: Instant::now(),
            paused: Duration::ZERO,
            reads: Arc::new(Reads::default()),
        };

        say("")?;
        say("The upstream: 200 customers and 3000 orders, some with a note, some with a coupon.")?;
        t.upstream(CREATE_CUSTOMERS).await?;
        t.upstream(&format!(
            "INSERT INTO customers (id, name, city) SELECT i, 'customer ' || i, \
             (ARRAY['Lisbon', 'Oslo', 'Lyon', 'Turin'])[1 + i % 4] FROM generate_series(1, {CUSTOMERS}) i"
        ))
        .await?;
        t.upstream(CREATE_ORDERS).await?;
        t.upstream(&format!(
            "INSERT INTO orders (id, customer_id, status, amount, note, coupon) \
             SELECT i, 1 + i % {CUSTOMERS}, (ARRAY['open', 'paid', 'shipped'])[1 + i % 3], \
             round((random() * 500)::numeric, 2), \
             CASE WHEN i % 9 = 0 THEN 'leave at the door' END, \
             CASE WHEN i % 13 = 0 THEN 'SPRING10' END \
             FROM generate_series(1, {ORDERS}) i"
        ))
        .await?;

        say("")?;
        say("The write load starts and runs until the end: a task updates the status and")?;
        say("amount of random orders, inserts new orders and counts customer visits, tens of")?;
        say("transactions a second. It never touches the columns the flows are about.")?;
        let load_client = session(&up_db.url).await?;
        t.load_started = Instant::now();
        background.load = Some(tokio::spawn(write_load(
            load_client,
            t.load.clone(),
            background.stop_load.clone(),
        )));

        say("")?;
        say(format!(
            "The pipeline runs in this process (state in {}); connections pg_conn (upstream)",
            state_dir.display()
        ))?;
        say("and sink_conn (sink). Each statement below goes through its SQL interface, as with")?;
        say("`evolve sql`.")?;
        background.spawn_pipeline(t.stage.pipeline.clone());
        t.stage
            .control(
                "CREATE SOURCE shop FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')",
            )
            .await?;
        t.stage.create_interfaces().await?;

        say("")?;
        say("On the sink: a trigger counts every write into each sink table, and a consumer")?;
        say("reads open orders through a view; a reader queries it every 20 ms from now on.")?;
        for name in ["orders_json", "customers_json"] {
            say(format!(
                "sink=# CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {name} FOR EACH ROW EXECUTE FUNCTION {name}_audit_fn();  -- adds (TG_OP, key) to {name}_audit"
            ))?;
            stage::audit(&t.stage.sink, name, true).await?;
            say("CREATE TRIGGER")?;
        }
        t.sink_sql(OPEN_ORDERS).await?;
        let reader = session(&sink_db.url).await?;
        background.reader = Some(tokio::spawn(read_open_orders(
            reader,
            t.reads.clone(),
            background.stop_reader.clone(),
        )));

        let pause = t.pause().await?;
        t.stage.check_hydrated(&mut t.up).await?;
        t.resume(pause)?;
        t.reader_line()?;
        say(format!("  (setup: {})", secs(started.elapsed())))?;
        Ok(t)
    }

    /// Flow 1: a column added upstream.
    async fn flow_1(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 1: a column is added upstream")?;
        say("Upstream adds orders.region and fills it for some rows. orders_v1 pinned its")?;
        say("columns when it was created, so it goes on ingesting without region.")?;
        let before = self.stage.audit("orders_json").await?;
        self.upstream("ALTER TABLE orders ADD COLUMN region text")
            .await?;
        self.upstream(
            "UPDATE orders SET region = (ARRAY['eu', 'us', 'apac'])[1 + id % 3] WHERE id % 10 = 0",
        )
        .await?;
        self.stage.check_ingestion_goes_on(before).await?;
        self.stage.drift().await?;
        say("A new version with region is hydrated beside it (snapshot plus the live stream),")?;
        say("then swapped in at one upstream position:")?;
        self.stage.replace("orders_v2", "").await?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let expected = self
            .count_upstream("SELECT count(*) FROM orders WHERE region IS NOT NULL")
            .await?;
        self.stage
            .apply_counted(
                &mut self.up,
                "orders_v2",
                expected,
                "the rows with a region",
            )
            .await?;
        self.resume(pause)?;
        self.stage.control("DROP TABLE orders_v1").await?;
        self.reader_line()?;
        say(format!("  (flow 1: {})", secs(started.elapsed())))
    }

    /// Flow 2: a planned drop, run by `evolve migrate apply --pipeline`.
    async fn flow_2(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 2: a planned drop, through evolve migrate apply --pipeline")?;
        say("The upstream team drops orders.note with a migration file. Applied with")?;
        say("--pipeline, evolve asks the pipeline which table versions ingest note, swaps in")?;
        say("a version without it first, and only then runs the file:")?;
        let dir = self.stage.pipeline.config().state_dir.join("migrations");
        std::fs::create_dir_all(&dir).context("creating the migrations directory")?;
        let file = "ALTER TABLE orders DROP COLUMN note;";
        std::fs::write(dir.join("V2__drop_note.sql"), format!("{file}\n"))
            .context("writing the migration file")?;
        say("$ cat migrations/V2__drop_note.sql")?;
        say(file)?;
        say("$ evolve migrate apply --pipeline http://127.0.0.1:7800")?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let expected = self
            .count_upstream("SELECT count(*) FROM orders WHERE note IS NOT NULL")
            .await?;
        let before = self.stage.audit("orders_json").await?;
        let opts = evolve_migrate::Options::new(self.up_url.clone(), dir);
        let apply_opts = evolve_migrate::ApplyOptions {
            pipeline: Some(Arc::new(super::coordinate::InProcess {
                pipeline: Arc::clone(&self.stage.pipeline),
            })),
            pipeline_timeout: Some(WAIT),
            ..evolve_migrate::ApplyOptions::default()
        };
        evolve_migrate::apply(&opts, &apply_opts, &mut |e| {
            let _ = say(crate::output::event_text(&e));
        })
        .await
        .context("evolve migrate apply --pipeline")?;
        self.stage
            .count_writes(
                &mut self.up,
                before,
                "orders_v3",
                expected,
                "the rows that had a note; the DROP COLUMN itself changed no document",
            )
            .await?;
        self.resume(pause)?;
        say("Then only rows that really change afterwards reach the sink:")?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let before = self.stage.audit("orders_json").await?;
        let expected = self
            .upstream("UPDATE orders SET status = 'paid' WHERE id <= 20 AND status <> 'paid'")
            .await?;
        self.stage
            .count_writes(
                &mut self.up,
                before,
                "orders_v3",
                expected as i64,
                "the rows the UPDATE changed",
            )
            .await?;
        let state = self.stage.table("orders_v3")?.state;
        self.stage.check(
            state == TableState::Running,
            format!("orders_v3 is {} after the drop", state.as_str()),
        )?;
        self.resume(pause)?;
        self.reader_line()?;
        say(format!("  (flow 2: {})", secs(started.elapsed())))
    }

    /// Flow 4: an unplanned drop.
    async fn flow_4(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 4: an unplanned drop")?;
        say("Somebody drops orders.coupon without telling anyone. orders_v3 ingests coupon,")?;
        say("so it can no longer apply the stream: it stalls, alone. The source's other table")?;
        say("keeps flowing, and readers and sinks keep the last consistent state.")?;
        let pause = self.pause().await?;
        self.caught_up(false).await?;
        let orders_before = self.stage.audit("orders_json").await?;
        let customers_before = self.stage.audit("customers_json").await?;
        let load_before = self.load.orders_changed();
        self.upstream("ALTER TABLE orders DROP COLUMN coupon")
            .await?;
        self.resume(pause)?;
        self.stage.check_stalled("orders_v3").await?;
        self.stage.drift().await?;
        say("Meanwhile a customer moves (customers is the source's other table):")?;
        self.upstream("UPDATE customers SET city = 'Porto' WHERE id = 7")
            .await?;
        tokio::time::sleep(LOAD_GOES_ON).await;
        let pause = self.pause().await?;
        let (customers, _) = self.caught_up(true).await?;
        let orders_writes = self.stage.audit("orders_json").await? - orders_before;
        let customers_writes = self.stage.audit("customers_json").await? - customers_before;
        let load_changed = self.load.orders_changed() - load_before;
        self.stage.check(
            orders_writes == 0,
            format!(
                "orders_json received {orders_writes} writes during the stall (the load changed orders {load_changed} times): the last consistent state"
            ),
        )?;
        self.stage.check(
            customers.differing == 0 && customers_writes > 0,
            format!(
                "customers_json received {customers_writes} writes during the stall and equals upstream"
            ),
        )?;
        self.resume(pause)?;
        self.reader_line()?;
        say("The same replacement flow recovers: a version with today's columns.")?;
        self.stage.replace("orders_v4", "").await?;
        let pause = self.pause().await?;
        self.caught_up(true).await?;
        let columns = self.stage.document_columns("orders_v4")?;
        let expected = self.up.diff(&self.stage.sink, "orders", &columns).await?;
        say(format!(
            "  upstream documents that differ from the sink's stale ones: {} (rows that had a coupon,",
            expected.differing
        ))?;
        say("  and rows the load changed during the stall)")?;
        self.stage
            .apply_counted(
                &mut self.up,
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
        self.reader_line()?;
        say(format!("  (flow 4: {})", secs(started.elapsed())))
    }

    /// Flow 5: `ABSORB = 'auto'`.
    async fn flow_5(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        say("")?;
        say("== flow 5: ABSORB = 'auto'")?;
        say("The same flow, run by evolve itself: when drift appears it creates the next")?;
        say("version, hydrates it, applies it and drops the old one.")?;
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
            "  waiting for evolve to absorb it (at most {} s; the load stays paused so the count is comparable) ...",
            ABSORB_WAIT.as_secs()
        ))?;
        let Some(new) = self.stage.wait_absorbed(&old).await? else {
            self.resume(pause)?;
            return Ok(());
        };
        let expected = self
            .count_upstream("SELECT count(*) FROM orders WHERE priority IS NOT NULL")
            .await?;
        self.stage
            .count_writes(
                &mut self.up,
                before,
                &new,
                expected,
                "the rows with a priority",
            )
            .await?;
        self.resume(pause)?;
        self.reader_line()?;
        say(format!("  (flow 5: {})", secs(started.elapsed())))
    }

    /// The load stops; everything is compared one last time.
    async fn finish(&mut self, background: &mut Background) -> anyhow::Result<()> {
        say("")?;
        say("== the end")?;
        background.stop_load().await;
        let ran = self.load_started.elapsed();
        let running = ran.saturating_sub(self.paused);
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
                "the load ran {} transactions ({} order updates, {} new orders, {} customer visits; {:.0}/s, paused {} of {} for the counts), {errors} errors{}",
                load.transactions(),
                load.order_updates.load(Ordering::SeqCst),
                load.order_inserts.load(Ordering::SeqCst),
                load.customer_updates.load(Ordering::SeqCst),
                load.transactions() as f64 / running.as_secs_f64().max(0.001),
                secs(self.paused),
                secs(ran),
                first.map(|e| format!(" (first: {e})")).unwrap_or_default()
            ),
        )?;
        self.stage.check_equal_upstream(&mut self.up).await?;
        // The reader goes on until everything is compared.
        background.stop_reader().await;
        let answers = self.reads.answers.load(Ordering::SeqCst);
        let errors = self.reads.errors.load(Ordering::SeqCst);
        let first = self
            .reads
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.stage.check(
            errors == 0 && answers > 0,
            format!(
                "open_orders answered {answers} queries, {errors} errors{}",
                first.map(|e| format!(" (first: {e})")).unwrap_or_default()
            ),
        )
    }

    // ------------------------------------------------------- statements

    /// Runs one statement upstream, printed; the rows it affected.
    async fn upstream(&self, sql: &str) -> anyhow::Result<u64> {
        say(format!("upstream=# {sql};"))?;
        let n = self
            .up
            .execute(sql, &[])
            .await
            .with_context(|| format!("upstream: {sql}"))?;
        say(command_tag(sql, n))?;
        Ok(n)
    }

    /// Runs one statement on the sink, printed.
    async fn sink_sql(&self, sql: &str) -> anyhow::Result<u64> {
        say(format!("sink=# {sql};"))?;
        let n = self
            .stage
            .sink
            .execute(sql, &[])
            .await
            .with_context(|| format!("sink: {sql}"))?;
        say(command_tag(sql, n))?;
        Ok(n)
    }

    // ------------------------------------------------------------ waits

    /// Pauses the load: returns once no load transaction is running.
    async fn pause(&self) -> anyhow::Result<Paused> {
        stage::pause(&self.load.gate).await
    }

    fn resume(&mut self, pause: Paused) -> anyhow::Result<()> {
        self.paused += stage::resume(pause)?;
        Ok(())
    }

    /// [`Stage::caught_up`], `orders_stalled` or not.
    async fn caught_up(&mut self, orders_stalled: bool) -> anyhow::Result<(Diff, Option<Diff>)> {
        let stalled = format!(
            "the sink table orders_json kept receiving writes for {} s while orders_v3 was stalled and the load paused",
            WAIT.as_secs()
        );
        self.stage
            .caught_up(&mut self.up, orders_stalled.then_some(stalled.as_str()))
            .await
    }

    // --------------------------------------------------------- readings

    fn reader_line(&self) -> anyhow::Result<()> {
        say(format!(
            "  open_orders: {} open orders; answered {} queries so far, {} errors",
            self.reads.open.load(Ordering::SeqCst),
            self.reads.answers.load(Ordering::SeqCst),
            self.reads.errors.load(Ordering::SeqCst)
        ))
    }

    async fn count_upstream(&self, sql: &str) -> anyhow::Result<i64> {
        let row = self
            .up
            .query_one(sql, &[])
            .await
            .with_context(|| format!("upstream: {sql}"))?;
        Ok(row.get(0))
    }
}

/// A session with the settings the pipeline's own sessions use (UTC, ISO
/// dates, ...), so that `to_jsonb` here renders values as it does there.
async fn session(url: &str) -> anyhow::Result<Client> {
    let client = evolve_pg::connect(url, "evolve demo")
        .await
        .context("connecting to a demo cluster")?;
    let mut sql = String::new();
    for (setting, value) in evolve_pipeline::upstream::SESSION_SETTINGS {
        sql.push_str(&format!("SET {setting} = {};", quote_literal(value)));
    }
    client
        .batch_execute(&sql)
        .await
        .context("setting up a demo session")?;
    Ok(client)
}

/// psql's command tag for `sql` that affected `rows` rows.
fn command_tag(sql: &str, rows: u64) -> String {
    let mut words = sql.split_whitespace().map(str::to_ascii_uppercase);
    let first = words.next().unwrap_or_default();
    match first.as_str() {
        "INSERT" => format!("INSERT 0 {rows}"),
        "UPDATE" | "DELETE" => format!("{first} {rows}"),
        _ => match words.next() {
            Some(second) => format!("{first} {second}"),
            None => first,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tags_are_psqls() {
        assert_eq!(command_tag("UPDATE orders SET x = 1", 7), "UPDATE 7");
        assert_eq!(command_tag("insert into t values (1)", 1), "INSERT 0 1");
        assert_eq!(
            command_tag("ALTER TABLE orders ADD COLUMN r text", 0),
            "ALTER TABLE"
        );
        assert_eq!(command_tag("CREATE VIEW v AS SELECT 1", 0), "CREATE VIEW");
    }
}
