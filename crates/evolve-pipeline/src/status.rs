//! What each object of a running pipeline is doing, for status output.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::ObjectKind;
use crate::position::Position;

/// The state of one object as its task last reported it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ObjectStatus {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its name.
    pub name: String,
    /// `starting`, `snapshotting`, `running`, `retrying`, `stalled`, ...
    pub state: String,
    /// The last error, when stalled or retrying.
    pub error: Option<String>,
}

/// Shared between the tasks and the pipeline.
#[derive(Clone, Default)]
pub struct StatusBoard {
    inner: Arc<Mutex<BTreeMap<(ObjectKind, String), ObjectStatus>>>,
    rates: Arc<Mutex<HashMap<(ObjectKind, String), Rate>>>,
    freshness: Arc<Mutex<Freshness>>,
    skipped: Arc<Mutex<HashMap<String, Skipped>>>,
}

/// A table's records of other record types left out since the pipeline
/// started (see [`StatusBoard::skipped`]).
#[derive(Debug, Default, Clone, Copy)]
struct Skipped {
    /// By the table's last snapshot (a copy that starts again counts
    /// again from zero).
    copied: u64,
    /// By the stream.
    streamed: u64,
}

/// Upstream commit times, for the sinks' lag: each source's recent
/// transactions (position and upstream commit time), and each sink's
/// committed position with the delay of its last write.
#[derive(Debug, Default)]
struct Freshness {
    commits: HashMap<String, VecDeque<(Position, i64)>>,
    sinks: HashMap<String, SinkFreshness>,
    /// The upstream commit time of the large transaction each source is
    /// receiving ([`StatusBoard::source_receiving`]).
    receiving: HashMap<String, i64>,
}

/// What a sink last committed.
#[derive(Debug)]
struct SinkFreshness {
    source: String,
    position: Position,
    /// Microseconds from the upstream commit to the sink's commit of the
    /// last transaction it wrote, and when it committed.
    last_delay: Option<(i64, Instant)>,
}

/// Transactions per source whose commit times are kept: a sink further
/// behind than this is reported at least as late as the oldest kept.
const COMMITS_KEPT: usize = 100_000;

/// Now, in Unix microseconds.
fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// How far the rate looks back.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// A running count sampled over time: rows per second over the last
/// [`RATE_WINDOW`], and for sources the commit time of the last applied
/// transaction.
#[derive(Debug, Default)]
struct Rate {
    total: u64,
    samples: VecDeque<(Instant, u64)>,
    last_commit_micros: Option<i64>,
    /// Microseconds from the upstream commit to the apply of the last
    /// transaction, and when it was applied.
    last_delay: Option<(i64, Instant)>,
}

impl Rate {
    fn add(&mut self, rows: u64) {
        let now = Instant::now();
        if self.samples.is_empty() {
            self.samples.push_back((now, self.total));
        }
        self.total += rows;
        if self
            .samples
            .back()
            .is_none_or(|(t, _)| now.duration_since(*t) >= Duration::from_millis(250))
        {
            self.samples.push_back((now, self.total));
        }
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
            && self.samples.len() > 1
        {
            self.samples.pop_front();
        }
    }

    fn per_second(&self) -> f64 {
        let Some(&(first, count)) = self.samples.front() else {
            return 0.0;
        };
        let elapsed = first.elapsed();
        if elapsed > RATE_WINDOW + Duration::from_secs(1) && self.samples.len() <= 1 {
            return 0.0;
        }
        let seconds = elapsed.as_secs_f64().max(1.0);
        (self.total - count) as f64 / seconds
    }
}

impl StatusBoard {
    /// Records the state of an object.
    pub fn set(&self, kind: ObjectKind, name: &str, state: &str, error: Option<String>) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(
            (kind, name.to_string()),
            ObjectStatus {
                kind,
                name: name.to_string(),
                state: state.to_string(),
                error,
            },
        );
    }

    /// Counts `rows` more rows for an object (row changes applied by a
    /// source, rows copied by a table's snapshot), and for a source the
    /// commit time (Unix microseconds) of the transaction just applied.
    pub fn count(&self, kind: ObjectKind, name: &str, rows: u64, commit_micros: Option<i64>) {
        let mut rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        let rate = rates.entry((kind, name.to_string())).or_default();
        rate.add(rows);
        if let Some(commit) = commit_micros {
            rate.last_commit_micros = Some(commit);
            let now = unix_micros();
            rate.last_delay = Some((now.saturating_sub(commit).max(0), Instant::now()));
        }
    }

    /// Rows per second over the last 10 seconds.
    pub fn rows_per_second(&self, kind: ObjectKind, name: &str) -> Option<f64> {
        let rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        rates.get(&(kind, name.to_string())).map(Rate::per_second)
    }

    /// The upstream commit time (Unix microseconds) of the last
    /// transaction a source applied.
    pub fn last_commit(&self, name: &str) -> Option<i64> {
        let rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        rates
            .get(&(ObjectKind::Source, name.to_string()))
            .and_then(|r| r.last_commit_micros)
    }

    /// How far behind its upstream commit a source applied its latest
    /// transaction, in seconds, or the age of the large transaction it is
    /// receiving when that is more; 0 when it applied none in the last
    /// 10 s and receives none.
    pub fn lag_seconds(&self, name: &str) -> Option<f64> {
        let receiving = self.receiving_for(name);
        let rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        let rate = rates.get(&(ObjectKind::Source, name.to_string()));
        if rate.is_none() && receiving.is_none() {
            return None;
        }
        let applied = match rate.and_then(|r| r.last_delay) {
            Some((micros, at)) if at.elapsed() <= RATE_WINDOW => micros,
            _ => 0,
        };
        Some(applied.max(receiving.unwrap_or(0)) as f64 / 1e6)
    }

    /// Source `source` is receiving a large transaction committed upstream
    /// at `commit_micros`, not applied yet (`None` once it is): its age
    /// counts in the lag of the source and of its sinks meanwhile, which
    /// would otherwise show the last transaction applied before it.
    pub fn source_receiving(&self, source: &str, commit_micros: Option<i64>) {
        let mut f = self.freshness.lock().unwrap_or_else(|p| p.into_inner());
        match commit_micros {
            Some(at) => f.receiving.insert(source.to_string(), at),
            None => f.receiving.remove(source),
        };
    }

    /// The age in microseconds of the transaction `source` is receiving.
    fn receiving_for(&self, source: &str) -> Option<i64> {
        let f = self.freshness.lock().unwrap_or_else(|p| p.into_inner());
        f.receiving
            .get(source)
            .map(|at| unix_micros().saturating_sub(*at).max(0))
    }

    /// Source `source` applied the transaction at `pos`, committed
    /// upstream at `commit_micros` (Unix microseconds). Called before the
    /// position is handed to the sinks.
    pub fn source_committed(&self, source: &str, pos: Position, commit_micros: i64) {
        let mut f = self.freshness.lock().unwrap_or_else(|p| p.into_inner());
        let commits = f.commits.entry(source.to_string()).or_default();
        if commits.back().is_none_or(|(last, _)| *last < pos) {
            commits.push_back((pos, commit_micros));
        }
        if commits.len() > COMMITS_KEPT {
            commits.pop_front();
        }
    }

    /// Sink `sink` (of source `source`) has committed everything up to
    /// `pos`; `wrote` says that it wrote a transaction at `pos` just now
    /// (rather than moving past transactions with nothing for it), whose
    /// delay from its upstream commit is then recorded.
    pub fn sink_committed(&self, sink: &str, source: &str, pos: Position, wrote: bool) {
        let mut f = self.freshness.lock().unwrap_or_else(|p| p.into_inner());
        let delay = wrote
            .then(|| {
                let commits = f.commits.get(source)?;
                let i = commits.partition_point(|(p, _)| *p <= pos);
                let (_, at) = commits.get(i.checked_sub(1)?)?;
                Some((unix_micros().saturating_sub(*at).max(0), Instant::now()))
            })
            .flatten();
        let entry = f
            .sinks
            .entry(sink.to_string())
            .or_insert_with(|| SinkFreshness {
                source: source.to_string(),
                position: pos,
                last_delay: None,
            });
        entry.source = source.to_string();
        entry.position = entry.position.max(pos);
        if delay.is_some() {
            entry.last_delay = delay;
        }
    }

    /// How far behind its upstream commits sink `sink` is, in seconds: the
    /// age of the oldest transaction its source applied that the sink has
    /// not committed yet, or else the delay (upstream commit to sink
    /// commit) of the last transaction it wrote in the last 10 s, or 0.
    /// Upstream commit times are the upstream server's clock: on another
    /// host, clock skew adds to the figure. `None` before the sink's
    /// first commit.
    pub fn sink_lag_seconds(&self, sink: &str) -> Option<f64> {
        let f = self.freshness.lock().unwrap_or_else(|p| p.into_inner());
        let s = f.sinks.get(sink)?;
        let pending = f
            .commits
            .get(&s.source)
            .and_then(|commits| {
                let i = commits.partition_point(|(p, _)| *p <= s.position);
                commits.get(i).map(|(_, at)| *at)
            })
            // A large transaction the source is receiving is behind it.
            .or_else(|| f.receiving.get(&s.source).copied())
            .map(|at| unix_micros().saturating_sub(at).max(0));
        let last = s
            .last_delay
            .filter(|(_, at)| at.elapsed() <= RATE_WINDOW)
            .map(|(micros, _)| micros);
        Some(pending.or(last).unwrap_or(0) as f64 / 1e6)
    }

    /// `records` more records that table `table`'s stream left out as
    /// other tables' (a Kafka table pinned with `SUBJECT` skips the other
    /// record types of its topic).
    pub fn skipped_streamed(&self, table: &str, records: u64) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        skipped.entry(table.to_string()).or_default().streamed += records;
    }

    /// Table `table`'s snapshot has left out `records` records as other
    /// tables' so far (its copy's whole count: a copy started again
    /// replaces it).
    pub fn skipped_copied(&self, table: &str, records: u64) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        skipped.entry(table.to_string()).or_default().copied = records;
    }

    /// The records table `table` left out as other tables' since the
    /// pipeline started, by its snapshot and its stream; `None` when it
    /// left out none.
    pub fn skipped(&self, table: &str) -> Option<u64> {
        let skipped = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        skipped
            .get(table)
            .map(|s| s.copied + s.streamed)
            .filter(|n| *n > 0)
    }

    /// Every recorded state.
    pub fn all(&self) -> Vec<ObjectStatus> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.values().cloned().collect()
    }

    /// The recorded state of one object.
    pub fn get(&self, kind: ObjectKind, name: &str) -> Option<ObjectStatus> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(kind, name.to_string())).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_count_rows_and_remember_the_last_commit() {
        let board = StatusBoard::default();
        assert_eq!(board.rows_per_second(ObjectKind::Source, "src"), None);
        board.count(ObjectKind::Source, "src", 10, Some(5));
        board.count(ObjectKind::Source, "src", 30, None);
        // Within the first second the rate is taken over one second.
        let rate = board.rows_per_second(ObjectKind::Source, "src").unwrap();
        assert!((rate - 40.0).abs() < 1e-9, "{rate}");
        assert!(
            board.lag_seconds("src").unwrap() > 1e9,
            "commit time 5 µs after 1970"
        );
        assert_eq!(board.last_commit("src"), Some(5));
    }

    #[test]
    fn a_sink_is_as_late_as_its_oldest_transaction_not_committed() {
        let board = StatusBoard::default();
        assert_eq!(board.sink_lag_seconds("snk"), None);
        let now = unix_micros();
        let (p1, p2) = (Position::from_u64(10), Position::from_u64(20));
        board.source_committed("src", p1, now - 3_000_000);
        board.source_committed("src", p2, now - 1_000_000);
        // Committed nothing yet, at the start: the oldest pending counts.
        board.sink_committed("snk", "src", Position::ZERO, false);
        let lag = board.sink_lag_seconds("snk").unwrap();
        assert!((3.0..3.5).contains(&lag), "{lag}");
        // Wrote the first: the second is pending.
        board.sink_committed("snk", "src", p1, true);
        let lag = board.sink_lag_seconds("snk").unwrap();
        assert!((1.0..1.5).contains(&lag), "{lag}");
        // Caught up: the last write's own delay, about a second.
        board.sink_committed("snk", "src", p2, true);
        let lag = board.sink_lag_seconds("snk").unwrap();
        assert!((1.0..1.5).contains(&lag), "{lag}");
        // Moving past transactions with nothing for it keeps that delay,
        // and positions never go back.
        board.sink_committed("snk", "src", p1, false);
        let lag = board.sink_lag_seconds("snk").unwrap();
        assert!((1.0..1.5).contains(&lag), "{lag}");
        board.source_committed("src", Position::from_u64(30), unix_micros());
        board.sink_committed("snk", "src", Position::from_u64(30), true);
        assert!(board.sink_lag_seconds("snk").unwrap() < 0.5);
    }

    #[test]
    fn a_large_transaction_being_received_counts_in_the_lag() {
        let board = StatusBoard::default();
        assert_eq!(board.lag_seconds("src"), None);
        // Applied 1 s after its commit, just now.
        board.count(
            ObjectKind::Source,
            "src",
            1,
            Some(unix_micros() - 1_000_000),
        );
        let lag = board.lag_seconds("src").unwrap();
        assert!((0.9..2.0).contains(&lag), "{lag}");
        board.sink_committed("snk", "src", Position::from_u64(10), false);
        // Receiving one committed 30 s ago: the source and its sink are
        // 30 s behind until it is applied.
        board.source_receiving("src", Some(unix_micros() - 30_000_000));
        let lag = board.lag_seconds("src").unwrap();
        assert!((29.0..31.0).contains(&lag), "{lag}");
        let lag = board.sink_lag_seconds("snk").unwrap();
        assert!((29.0..31.0).contains(&lag), "{lag}");
        board.source_receiving("src", None);
        assert!(board.lag_seconds("src").unwrap() < 2.0);
        assert!(board.sink_lag_seconds("snk").unwrap() < 0.5);
    }
}
