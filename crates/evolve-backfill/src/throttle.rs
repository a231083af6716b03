//! When to pause, and how big the next batch is (pure: the caller reads
//! the server and the clock).

use std::time::Duration;

use serde::Serialize;

/// The limits a backfill or a rewrite holds itself to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Pause while any replica's `replay_lag` is above this.
    pub max_lag: Option<Duration>,
    /// Pause while any logical slot retains more WAL than this (bytes).
    pub max_slot_wal: Option<u64>,
}

/// What the server said before a batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The replica furthest behind (`application_name`) and its replay lag.
    pub replica: Option<(String, Duration)>,
    /// The logical slot retaining the most WAL and how many bytes.
    pub slot: Option<(String, u64)>,
}

/// Why a batch waits. Every pause is reported with one of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Pause {
    /// A replica replays too far behind.
    ReplicaLag {
        replica: String,
        lag_ms: u64,
        limit_ms: u64,
    },
    /// A logical slot holds back too much WAL.
    SlotWal {
        slot: String,
        bytes: u64,
        limit: u64,
    },
    /// The previous attempt waited for its locks until `lock_timeout`
    /// expired; the next waits before trying again.
    LockWait { attempt: u32, wait_ms: u64 },
    /// The previous attempt was rolled back by the server to break a
    /// deadlock (`cause` `deadlock`, SQLSTATE 40P01) or because it could
    /// not be serialized with another transaction (`serialization_failure`,
    /// 40001); nothing of it was kept, so it is tried again after a wait,
    /// like a lock wait and counted with it.
    Conflict {
        cause: String,
        attempt: u32,
        wait_ms: u64,
    },
    /// `evolve backfill pause` asked for it.
    Requested,
}

impl std::fmt::Display for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pause::ReplicaLag {
                replica,
                lag_ms,
                limit_ms,
            } => write!(
                f,
                "replica {replica:?} replays {} behind (limit --max-lag {})",
                millis(*lag_ms),
                millis(*limit_ms)
            ),
            Pause::SlotWal { slot, bytes, limit } => write!(
                f,
                "replication slot {slot:?} retains {} of WAL (limit --max-slot-wal {})",
                bytes_text(*bytes),
                bytes_text(*limit)
            ),
            Pause::LockWait { attempt, wait_ms } => write!(
                f,
                "attempt {attempt} waited for its locks until lock_timeout; waiting {} before the next",
                millis(*wait_ms)
            ),
            Pause::Conflict {
                cause,
                attempt,
                wait_ms,
            } => write!(
                f,
                "attempt {attempt} was rolled back by a {}; waiting {} before the next",
                cause.replace('_', " "),
                millis(*wait_ms)
            ),
            Pause::Requested => write!(f, "paused by 'evolve backfill pause'"),
        }
    }
}

fn millis(ms: u64) -> String {
    if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// `1.5 MB`, `3 GB` (powers of 1024).
pub fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The throttle decision: the first limit exceeded, or none. A limit that
/// is not set never pauses; a value equal to its limit does not pause.
pub fn decide(observed: &Observed, limits: &Limits) -> Option<Pause> {
    if let (Some(limit), Some((replica, lag))) = (limits.max_lag, &observed.replica)
        && *lag > limit
    {
        return Some(Pause::ReplicaLag {
            replica: replica.clone(),
            lag_ms: lag.as_millis() as u64,
            limit_ms: limit.as_millis() as u64,
        });
    }
    if let (Some(limit), Some((slot, bytes))) = (limits.max_slot_wal, &observed.slot)
        && *bytes > limit
    {
        return Some(Pause::SlotWal {
            slot: slot.clone(),
            bytes: *bytes,
            limit,
        });
    }
    None
}

/// The batch-size controller: holds each batch near a target duration by
/// scaling the size with target/took, by at most a factor of two either
/// way per batch, within `[min, max]`. Without a target the size is fixed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSizer {
    size: u64,
    min: u64,
    max: u64,
    target: Option<Duration>,
}

impl BatchSizer {
    pub const MIN: u64 = 10;
    pub const MAX: u64 = 1_000_000;

    pub fn new(initial: u64, target: Option<Duration>) -> BatchSizer {
        let max = Self::MAX.max(initial);
        BatchSizer {
            size: initial.clamp(1, max),
            min: Self::MIN.min(initial.max(1)),
            max,
            target: target.filter(|t| !t.is_zero()),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// After a batch that scanned `scanned` keys in `took`: the next size.
    /// A short last batch (fewer keys than asked) says nothing about speed.
    pub fn observe(&mut self, took: Duration, scanned: u64) -> u64 {
        let Some(target) = self.target else {
            return self.size;
        };
        if scanned < self.size {
            return self.size;
        }
        let factor = (target.as_secs_f64() / took.as_secs_f64().max(1e-6)).clamp(0.5, 2.0);
        let next = (self.size as f64 * factor).round() as u64;
        self.size = next.clamp(self.min, self.max);
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn observed(lag_ms: Option<u64>, slot: Option<u64>) -> Observed {
        Observed {
            replica: lag_ms.map(|ms| ("standby".to_string(), Duration::from_millis(ms))),
            slot: slot.map(|b| ("cdc".to_string(), b)),
        }
    }

    #[test]
    fn pauses_name_the_limit_exceeded() {
        let limits = Limits {
            max_lag: Some(Duration::from_secs(5)),
            max_slot_wal: Some(1 << 30),
        };
        assert_eq!(decide(&observed(Some(5000), Some(1 << 30)), &limits), None);
        let lag = decide(&observed(Some(5001), None), &limits).unwrap();
        assert_eq!(
            lag.to_string(),
            "replica \"standby\" replays 5.0 s behind (limit --max-lag 5.0 s)"
        );
        let slot = decide(&observed(None, Some(3 << 30)), &limits).unwrap();
        assert_eq!(
            slot.to_string(),
            "replication slot \"cdc\" retains 3.0 GB of WAL (limit --max-slot-wal 1.0 GB)"
        );
        assert_eq!(
            decide(&observed(Some(99_999), Some(u64::MAX)), &Limits::default()),
            None
        );
    }

    #[test]
    fn the_sizer_moves_toward_the_target() {
        let mut s = BatchSizer::new(1000, Some(Duration::from_millis(200)));
        assert_eq!(s.observe(Duration::from_millis(100), 1000), 2000);
        assert_eq!(s.observe(Duration::from_millis(400), 2000), 1000);
        assert_eq!(s.observe(Duration::from_secs(10), 1000), 500);
        // A short last batch changes nothing.
        assert_eq!(s.observe(Duration::from_millis(1), 3), 500);
        let mut fixed = BatchSizer::new(1000, None);
        assert_eq!(fixed.observe(Duration::from_millis(1), 1000), 1000);
        let mut zero = BatchSizer::new(7, Some(Duration::ZERO));
        assert_eq!(zero.observe(Duration::from_secs(9), 7), 7);
    }

    proptest! {
        #[test]
        fn the_sizer_stays_in_bounds_and_moves_at_most_twofold(
            initial in 1u64..2_000_000,
            target_ms in 1u64..10_000,
            tooks in proptest::collection::vec(0u64..100_000, 1..30),
        ) {
            let mut s = BatchSizer::new(initial, Some(Duration::from_millis(target_ms)));
            for took in tooks {
                let before = s.size();
                let after = s.observe(Duration::from_micros(took * 100), before);
                prop_assert!(after >= 1);
                prop_assert!(after <= BatchSizer::MAX.max(initial));
                prop_assert!(after <= before * 2 + 1);
                prop_assert!(after * 2 + 1 >= before || after == s.min);
                // Faster than the target never shrinks; slower never grows.
                let took = Duration::from_micros(took * 100);
                if took < Duration::from_millis(target_ms) { prop_assert!(after >= before.min(s.max)); }
                if took > Duration::from_millis(target_ms) { prop_assert!(after <= before.max(s.min)); }
            }
        }

        #[test]
        fn decide_pauses_exactly_when_a_limit_is_exceeded(
            lag in proptest::option::of(0u64..20_000),
            slot in proptest::option::of(0u64..(4u64 << 30)),
            max_lag in proptest::option::of(0u64..20_000),
            max_slot in proptest::option::of(0u64..(4u64 << 30)),
        ) {
            let limits = Limits { max_lag: max_lag.map(Duration::from_millis), max_slot_wal: max_slot };
            let over_lag = matches!((lag, max_lag), (Some(l), Some(m)) if l > m);
            let over_slot = matches!((slot, max_slot), (Some(s), Some(m)) if s > m);
            let got = decide(&observed(lag, slot), &limits);
            prop_assert_eq!(got.is_some(), over_lag || over_slot);
            if over_lag {
                let is_lag = matches!(got, Some(Pause::ReplicaLag { .. }));
                prop_assert!(is_lag);
            }
        }
    }
}
