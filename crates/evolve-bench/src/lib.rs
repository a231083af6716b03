//! Shared pieces of evolve's benchmarks. Each benchmark is a binary in
//! `src/bin/` that runs evolve and its named baseline in the same run and
//! prints both figures and the ratio; `cargo xtask bench NAME` runs one in
//! release mode. Results are kept in BENCHMARKS.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use evolve_pipeline::Pipeline;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `1.234 s` or `45.6 ms`.
pub fn fmt(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.3} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

/// `a / b` as a ratio like `1.13x`.
pub fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64().max(1e-9))
}

/// The pipeline running in a task.
pub struct Running {
    stop: oneshot::Sender<()>,
    handle: JoinHandle<evolve_pipeline::Result<()>>,
}

impl Running {
    pub fn start(pipeline: &Arc<Pipeline>) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let p = pipeline.clone();
        let handle = tokio::spawn(async move {
            p.run(async {
                let _ = stopped.await;
            })
            .await
        });
        Running { stop, handle }
    }

    pub async fn stop(self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .map_err(|_| "the pipeline did not stop within 60 s")???;
        Ok(())
    }
}

/// `kB` figures of /proc/self/status.
pub fn proc_status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// This process's CPU time so far (user, system), from /proc/self/stat.
pub fn cpu_time() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| -> Duration {
        let ticks: u64 = rest
            .split_whitespace()
            .nth(n)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        // USER_HZ is 100 on Linux.
        Duration::from_millis(ticks * 10)
    };
    // utime and stime: fields 14 and 15 of the line, 11 and 12 after the name.
    (field(11), field(12))
}

/// The CPU time used since `start` (from [`cpu_time`]).
pub fn cpu_since(start: (Duration, Duration)) -> String {
    let now = cpu_time();
    format!(
        "{} user + {} system",
        fmt(now.0.saturating_sub(start.0)),
        fmt(now.1.saturating_sub(start.1))
    )
}

/// `kB` as MiB.
pub fn mib(kb: u64) -> String {
    format!("{:.0} MiB", kb as f64 / 1024.0)
}

/// An LSN's text (`16/B374D848`) as a number.
pub fn lsn_value(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').unwrap_or(("0", "0"));
    (u64::from_str_radix(hi, 16).unwrap_or(0) << 32) | u64::from_str_radix(lo, 16).unwrap_or(0)
}

/// Writers updating random rows of `t (id int8, a ...)` at a fixed rate,
/// and their latencies between start and stop (the load of the backfill
/// and rewrite benchmarks).
pub struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Result<Vec<Duration>, tokio_postgres::Error>>>,
}

impl Writers {
    /// `n` writers, each at most `rate` writes a second (0: as fast as it can).
    pub async fn start(
        url: &str,
        n: usize,
        rows: i64,
        rate: u64,
    ) -> Result<Writers, Box<dyn std::error::Error + Send + Sync>> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..n {
            let c = evolve_pg::connect(url, "bench writer").await?;
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let update = c
                    .prepare("UPDATE t SET a = a + 1 WHERE id = $1::int8")
                    .await?;
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1);
                let mut latencies = Vec::new();
                let begun = tokio::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if rate > 0 {
                        let due =
                            begun + Duration::from_secs_f64(latencies.len() as f64 / rate as f64);
                        tokio::time::sleep_until(due).await;
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let id = (x % rows as u64) as i64 + 1;
                    let started = Instant::now();
                    c.execute(&update, &[&id]).await?;
                    latencies.push(started.elapsed());
                }
                Ok(latencies)
            }));
        }
        Ok(Writers { stop, tasks })
    }

    /// (writes, p99, longest).
    pub async fn stop(
        self,
    ) -> Result<(usize, Duration, Duration), Box<dyn std::error::Error + Send + Sync>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await??);
        }
        all.sort();
        let p99 = all
            .get(all.len().saturating_mul(99) / 100)
            .copied()
            .unwrap_or_default();
        Ok((all.len(), p99, all.last().copied().unwrap_or_default()))
    }
}

/// The change stream of the pipeline and replicate benchmarks: table
/// `bench_t`, the load procedure that fills it with a fixed shuffled mix
/// of transaction sizes, and the polls their consumers are timed with.
pub mod debezium;

pub mod stream {
    use std::time::{Duration, Instant};

    use tokio_postgres::Client;

    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Result<T> = std::result::Result<T, Error>;

    /// One round of the load: (rows per transaction, how many inserting
    /// transactions, how many updating ones). 70 transactions, 3,040 row
    /// changes (1,272 of them updates); [`mix`] shuffles them.
    pub const MIX: [(i32, usize, usize); 4] = [
        // (size, inserts, updates)
        (1, 28, 12),
        (10, 14, 6),
        (100, 6, 2),
        (1000, 1, 1),
    ];

    /// How long any consumer may take before the benchmark gives up.
    pub const TIMEOUT: Duration = Duration::from_secs(1800);

    pub const COLUMNS: &str = "id int8 PRIMARY KEY, name text NOT NULL, amount numeric(12,2) NOT NULL, \
     created_at timestamptz NOT NULL, active bool NOT NULL, attrs jsonb, note text";

    /// The row of id `g` (an SQL expression over `g`).
    pub const ROW: &str = "g, 'customer ' || g, (g % 100000) / 100.0, \
     timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', g % 3 <> 0, \
     jsonb_build_object('tier', g % 5, 'tags', jsonb_build_array('a', 'b')), \
     CASE WHEN g % 4 = 0 THEN NULL ELSE 'note ' || g END";

    pub async fn connect(url: &str) -> Result<Client> {
        Ok(evolve_pg::connect(url, "evolve-bench").await?)
    }

    /// Polls `sql` (one bool) every 10 ms until it is true; the time it took.
    pub async fn wait_for(
        client: &Client,
        sql: &str,
        started: Instant,
        what: &str,
    ) -> Result<Duration> {
        loop {
            if client.query_one(sql, &[]).await?.get::<_, bool>(0) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > TIMEOUT {
                return Err(format!("{what} did not finish within {TIMEOUT:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn count(client: &Client, table: &str) -> Result<i64> {
        Ok(client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await?
            .get(0))
    }

    pub async fn lsn(client: &Client, sql: &str) -> Result<String> {
        Ok(client.query_one(sql, &[]).await?.get(0))
    }

    /// The transaction sizes of the load (negative: updates), as the load
    /// procedure cycles through them: [`MIX`] shuffled with a fixed seed.
    pub fn mix() -> Vec<i32> {
        let mut sizes = Vec::new();
        for (size, inserts, updates) in MIX {
            sizes.extend(std::iter::repeat_n(size, inserts));
            sizes.extend(std::iter::repeat_n(-size, updates));
        }
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for i in (1..sizes.len()).rev() {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let j = (seed >> 33) as usize % (i + 1);
            sizes.swap(i, j);
        }
        sizes
    }

    /// What the load procedure does with `sizes` and `total`: (transactions,
    /// updated rows). Mirrors `bench_load`. The inserted rows are the ids
    /// 1 to `total` minus the updated rows.
    pub fn simulate(sizes: &[i32], total: i64) -> (u64, i64) {
        let (mut done, mut next_id, mut i, mut updates) = (0i64, 1i64, 0usize, 0i64);
        while done < total {
            let planned = sizes[i % sizes.len()];
            let s = i64::from(planned.abs()).min(total - done);
            if planned < 0 && next_id > s {
                updates += s;
            } else {
                next_id += s;
            }
            done += s;
            i += 1;
        }
        (i as u64, updates)
    }

    /// `bench_load(sizes int[], total bigint)`, with `ROW_EXPR` to be
    /// replaced by [`ROW`] ([`load_procedure`]).
    pub const LOAD_PROCEDURE: &str = "
CREATE PROCEDURE bench_load(sizes int[], total bigint) LANGUAGE plpgsql AS $$
DECLARE
    done bigint := 0;
    next_id bigint := 1;
    i bigint := 0;
    planned int;
    s bigint;
    a bigint;
BEGIN
    WHILE done < total LOOP
        planned := sizes[1 + i % array_length(sizes, 1)];
        s := least(abs(planned), total - done);
        IF planned < 0 AND next_id - 1 >= s THEN
            a := 1 + (i * 7919) % (next_id - s);
            UPDATE bench_t SET amount = amount + 1, active = NOT active,
                               attrs = attrs || jsonb_build_object('v', i)
             WHERE id BETWEEN a AND a + s - 1;
        ELSE
            INSERT INTO bench_t SELECT ROW_EXPR FROM generate_series(next_id, next_id + s - 1) g;
            next_id := next_id + s;
        END IF;
        done := done + s;
        i := i + 1;
        COMMIT;
    END LOOP;
END $$";

    /// [`LOAD_PROCEDURE`] with its rows.
    pub fn load_procedure() -> String {
        LOAD_PROCEDURE.replace("ROW_EXPR", ROW)
    }

    /// `rows` in `d` as a rate with thousands separators.
    pub fn per_second(rows: i64, d: Duration) -> String {
        let r = rows as f64 / d.as_secs_f64().max(1e-9);
        // Thousands separators.
        let s = format!("{:.0}", r);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    }

    /// The statement that makes `n` row changes with `bench_load` and
    /// transaction sizes `sizes` ([`mix`]); run it as a simple query, the
    /// procedure commits as it goes.
    pub fn load_call(sizes: &[i32], n: i64) -> String {
        let array: Vec<String> = sizes.iter().map(i32::to_string).collect();
        format!("CALL bench_load('{{{}}}', {n})", array.join(","))
    }

    /// What [`load`] did.
    pub struct Load {
        pub changes: i64,
        pub transactions: u64,
        pub updates: i64,
        pub took: Duration,
        /// The upstream's WAL insert position just before the marker row's
        /// transaction.
        pub before_marker: u64,
        /// The WAL insert position just after it.
        pub endpos: String,
        /// Rows in `bench_t` afterwards.
        pub rows: i64,
        pub wal_bytes: u64,
    }

    impl Load {
        /// The ids the load inserted: 1 to this.
        pub fn inserted(&self) -> i64 {
            self.changes - self.updates
        }
    }

    impl std::fmt::Display for Load {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "load: {} row changes ({} updates) in {} transactions + a marker row, {} ({} changes/s); {} rows; {:.0} MiB of WAL",
                self.changes,
                self.updates,
                self.transactions,
                super::fmt(self.took),
                per_second(self.changes, self.took),
                self.rows,
                self.wal_bytes as f64 / 1048576.0
            )
        }
    }

    /// `n` row changes into `bench_t` through `bench_load` (which commits as
    /// it goes), then the marker row (id 0) in a transaction of its own;
    /// the WAL is counted from the confirmed position of `slot`, made
    /// before the load.
    pub async fn load(client: &Client, n: i64, slot: &str) -> Result<Load> {
        let sizes = mix();
        let (transactions, updates) = simulate(&sizes, n);
        let started = Instant::now();
        // A simple query of one statement: the procedure commits as it goes.
        client.batch_execute(&load_call(&sizes, n)).await?;
        let took = started.elapsed();
        let before_marker =
            super::lsn_value(&lsn(client, "SELECT pg_current_wal_insert_lsn()::text").await?);
        client
            .batch_execute(&format!(
                "INSERT INTO bench_t SELECT {ROW} FROM (VALUES (0::int8)) v(g)"
            ))
            .await?;
        let endpos = lsn(client, "SELECT pg_current_wal_insert_lsn()::text").await?;
        let rows = count(client, "bench_t").await?;
        let wal_start = client
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?
            .get::<_, String>(0);
        let wal_bytes = super::lsn_value(&endpos).saturating_sub(super::lsn_value(&wal_start));
        Ok(Load {
            changes: n,
            transactions,
            updates,
            took,
            before_marker,
            endpos,
            rows,
            wal_bytes,
        })
    }
}
