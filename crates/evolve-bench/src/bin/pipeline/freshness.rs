//! Freshness under a steady load: how long after an upstream commit the
//! sink has committed it, with the pipeline running live.
//!
//! A load generator (one upstream connection, a task beside the pipeline)
//! commits every 10 ms one `INSERT` of `rate / 100` rows into `fresh_t`,
//! whose rows carry their transaction's number (`txn`) and, in the
//! transaction's last row only, `mark = true` (NULL elsewhere, so only
//! that row's document has the key). It notes the wall-clock time at which
//! each commit was acknowledged. On the sink a deferred constraint trigger
//! on the sink table, `WHEN (NEW.data ? 'mark')`, writes the transaction's
//! number and `clock_timestamp()` into `fresh_arrival` as the sink's
//! transaction commits; both clusters are on this machine, so the two
//! clocks are one. The delay of a transaction is its arrival minus its
//! acknowledged commit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use evolve_bench::fmt;
use evolve_bench::stream::{COLUMNS, ROW, connect, count, per_second};
use tokio_postgres::Client;

use super::Result;

/// Transactions are committed on this period.
const TICK: Duration = Duration::from_millis(10);
/// A run is sustained when it achieved this share of its rate...
const ACHIEVED: f64 = 0.95;
/// ...and its p99 is under this.
pub const GOAL_P99: Duration = Duration::from_secs(1);
/// How many step-up runs at most.
const MAX_STEPS: usize = 6;

/// What a run measured.
pub struct Measured {
    pub rate: u64,
    pub rows_per_txn: i64,
    pub transactions: usize,
    pub rows: i64,
    /// Rows committed per second, from the first commit's start to the
    /// last commit's acknowledgement.
    pub achieved: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Transactions not in the sink when the wait for them ended.
    pub missing: usize,
}

impl Measured {
    pub fn sustained(&self) -> bool {
        self.missing == 0 && self.achieved >= ACHIEVED * self.rate as f64 && self.p99 < GOAL_P99
    }

    pub fn row(&self, label: &str) -> String {
        let max = if self.missing > 0 {
            format!(
                "> {} ({} transactions not in the sink)",
                fmt(self.max),
                self.missing
            )
        } else {
            fmt(self.max)
        };
        format!(
            "| {label} | {} /s ({} rows every {} ms) | {} /s | {} | {} | **{}** | {max} | {} |",
            thousands(self.rate as f64),
            self.rows_per_txn,
            TICK.as_millis(),
            thousands(self.achieved),
            self.transactions,
            fmt(self.p50),
            fmt(self.p99),
            if self.sustained() { "yes" } else { "no" }
        )
    }
}

pub fn header() -> &'static str {
    "| run | target | achieved | upstream commits | p50 | p99 | max | sustained |\n|---|---|---|---|---|---|---|---|"
}

fn thousands(v: f64) -> String {
    per_second(v.round() as i64, Duration::from_secs(1))
}

/// The upstream table and the sink's arrival log; the sink table
/// `public.fresh_t_json` must exist (the sink's initial load done).
pub async fn upstream_table(up: &Client) -> Result<()> {
    up.batch_execute(&format!(
        "CREATE TABLE fresh_t ({COLUMNS}, txn int8 NOT NULL, mark bool)"
    ))
    .await?;
    Ok(())
}

pub async fn arrival_trigger(sink: &Client) -> Result<()> {
    sink.batch_execute(
        "CREATE TABLE public.fresh_arrival (txn int8 NOT NULL, arrived timestamptz NOT NULL);
         CREATE FUNCTION public.fresh_arrived() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO public.fresh_arrival VALUES ((NEW.data->>'txn')::int8, clock_timestamp());
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER fresh_arrived AFTER INSERT ON public.fresh_t_json
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
             WHEN (NEW.data ? 'mark') EXECUTE FUNCTION public.fresh_arrived();",
    )
    .await?;
    Ok(())
}

/// Where the generator is: the next transaction number and row id.
pub struct Generator {
    client: Arc<Client>,
    next_txn: i64,
    next_id: i64,
}

impl Generator {
    pub async fn connect(url: &str) -> Result<Generator> {
        Ok(Generator {
            client: Arc::new(connect(url).await?),
            next_txn: 1,
            next_id: 1,
        })
    }

    /// `seconds` at `rate` row changes a second, then waits up to `wait`
    /// for every transaction to be in the sink, and measures.
    pub async fn run(
        &mut self,
        sink: &Client,
        rate: u64,
        seconds: f64,
        wait: Duration,
    ) -> Result<Measured> {
        let rows_per_txn = ((rate as f64 * TICK.as_secs_f64()).round() as i64).max(1);
        let planned = ((seconds / TICK.as_secs_f64()).round() as usize).max(1);
        let first_txn = self.next_txn;
        let insert = self
            .client
            .prepare(&format!(
                "INSERT INTO fresh_t SELECT {ROW}, $1::int8, CASE WHEN g = $3::int8 THEN true END \
                 FROM generate_series($2::int8, $3::int8) g"
            ))
            .await?;
        // Acknowledged commit times, seconds since the epoch, per txn.
        let mut committed: Vec<f64> = Vec::with_capacity(planned);
        let begun = tokio::time::Instant::now();
        let started = Instant::now();
        for i in 0..planned {
            // A fixed schedule: a late commit is followed at once by the
            // next one due.
            tokio::time::sleep_until(begun + TICK * i as u32).await;
            let (txn, from, to) = (self.next_txn, self.next_id, self.next_id + rows_per_txn - 1);
            self.client.execute(&insert, &[&txn, &from, &to]).await?;
            committed.push(epoch(SystemTime::now()));
            self.next_txn += 1;
            self.next_id += rows_per_txn;
        }
        let took = started.elapsed();
        let rows = rows_per_txn * planned as i64;
        let achieved = rows as f64 / took.as_secs_f64().max(1e-9);

        // Wait for the sink to have every transaction.
        let waited = Instant::now();
        loop {
            let n: i64 = sink
                .query_one(
                    "SELECT count(*) FROM public.fresh_arrival WHERE txn >= $1",
                    &[&first_txn],
                )
                .await?
                .get(0);
            if n as usize >= planned || waited.elapsed() > wait {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let arrivals: Vec<(i64, f64)> = sink
            .query(
                "SELECT txn, extract(epoch FROM arrived)::float8 FROM public.fresh_arrival \
                 WHERE txn >= $1 AND txn < $2",
                &[&first_txn, &self.next_txn],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let rows_at: HashMap<i64, f64> = arrivals.iter().copied().collect();
        if rows_at.len() != arrivals.len() {
            return Err(format!(
                "the sink committed {} upstream transactions more than once",
                arrivals.len() - rows_at.len()
            )
            .into());
        }
        let mut delays: Vec<Duration> = committed
            .iter()
            .enumerate()
            .filter_map(|(i, at)| {
                rows_at
                    .get(&(first_txn + i as i64))
                    .map(|arrived| Duration::from_secs_f64((arrived - at).max(0.0)))
            })
            .collect();
        let missing = planned - delays.len();
        if missing > 0 {
            // Still on their way: at least as late as the wait.
            delays.extend(std::iter::repeat_n(
                wait + Duration::from_secs_f64(took.as_secs_f64()),
                missing,
            ));
        }
        delays.sort();
        let at = |q: usize| delays[(delays.len() * q / 100).min(delays.len() - 1)];
        Ok(Measured {
            rate,
            rows_per_txn,
            transactions: planned,
            rows,
            achieved,
            p50: at(50),
            p99: at(99),
            max: *delays.last().unwrap_or(&Duration::ZERO),
            missing,
        })
    }

    /// Every row the generator wrote, once the sink has them all.
    pub async fn check_rows(&self, sink: &Client) -> Result<()> {
        let got = count(sink, "public.fresh_t_json").await?;
        if got != self.next_id - 1 {
            return Err(format!(
                "evolve's freshness sink has {got} rows, the generator wrote {}",
                self.next_id - 1
            )
            .into());
        }
        Ok(())
    }
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The step-up after the fixed-rate run `base`: rates doubling from it
/// while each run is sustained (or halving while not), `seconds` each.
/// Prints each run; the highest sustained one.
pub async fn step_up(
    generator: &mut Generator,
    sink: &Client,
    base: &Measured,
    seconds: f64,
) -> Result<Option<Measured>> {
    let wait = Duration::from_secs_f64((2.0 * seconds).max(30.0));
    let mut best = None;
    let up = base.sustained();
    let mut rate = base.rate;
    for _ in 0..MAX_STEPS {
        rate = if up { rate * 2 } else { rate / 2 };
        if rate < 100 {
            break;
        }
        // A backlog from an unsustained run must be gone first.
        drain(generator, sink, Duration::from_secs(600)).await?;
        let m = generator.run(sink, rate, seconds, wait).await?;
        println!("{}", m.row(&format!("step, {seconds} s")));
        let sustained = m.sustained();
        if sustained {
            best = Some(m);
        }
        if sustained != up {
            break;
        }
    }
    if up && best.is_none() {
        // Doubling failed at once: the fixed rate is the highest known.
        return Ok(None);
    }
    Ok(best)
}

/// Waits until every transaction the generator committed is in the sink.
async fn drain(generator: &Generator, sink: &Client, wait: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        let n: i64 = sink
            .query_one("SELECT count(*) FROM public.fresh_arrival", &[])
            .await?
            .get(0);
        if n >= generator.next_txn - 1 {
            return Ok(());
        }
        if started.elapsed() > wait {
            return Err(format!(
                "the sink has {n} of {} freshness transactions after {wait:?}",
                generator.next_txn - 1
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
