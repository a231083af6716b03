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
