//! What each object of a running pipeline is doing, for status output.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::ObjectKind;

/// The state of one object as its task last reported it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ObjectStatus {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its name.
    pub name: String,
    /// `starting`, `snapshotting`, `running`, `stalled`, ...
    pub state: String,
    /// The last error, when stalled or retrying.
    pub error: Option<String>,
}

/// Shared between the tasks and the pipeline.
#[derive(Clone, Default)]
pub struct StatusBoard {
    inner: Arc<Mutex<BTreeMap<(ObjectKind, String), ObjectStatus>>>,
    rates: Arc<Mutex<HashMap<(ObjectKind, String), Rate>>>,
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
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0);
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
    /// transaction, in seconds; 0 when it applied none in the last 10 s.
    pub fn lag_seconds(&self, name: &str) -> Option<f64> {
        let rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        let rate = rates.get(&(ObjectKind::Source, name.to_string()))?;
        Some(match rate.last_delay {
            Some((micros, at)) if at.elapsed() <= RATE_WINDOW => micros as f64 / 1e6,
            _ => 0.0,
        })
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
}
