//! The change bus: every committed upstream transaction, as it was
//! applied to the state, broadcast to whoever follows the pipeline live
//! (subscribers).
//!
//! The source task publishes a [`Committed`] right after the SQLite commit
//! that made it durable, in commit order, also for transactions that
//! changed no document (they carry the position forward). A follower that
//! subscribes to the bus *before* reading a snapshot of the state (the
//! documents and the applied position `P`, in one read) sees every
//! transaction after `P` on the bus: a transaction committed to SQLite
//! before the read is in the snapshot (position at or below `P`, skipped),
//! and one committed after it is published after the follower subscribed.
//!
//! The bus holds at most [`CAPACITY`] transactions per follower; one that
//! falls further behind gets [`broadcast::error::RecvError::Lagged`] and
//! must be cut off (it cannot know what it missed), so a slow follower
//! never stalls the pipeline. It also counts the bytes it has published
//! ([`Bus::published`], [`Committed::published_through`]), so that a
//! follower can tell how much memory its backlog holds and read the
//! store instead before that grows (sinks do).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use evolve_core::change::RowChange;

use crate::position::Position;
use tokio::sync::broadcast;

/// Transactions a follower may be behind before it is cut off.
pub const CAPACITY: usize = 4096;

/// One change of an interface: the net effect of one upstream transaction
/// on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The interface's id.
    pub interface: i64,
    /// The key document.
    pub key: Vec<u8>,
    /// The document before, `None` for an insert.
    pub old: Option<Vec<u8>>,
    /// The document after, `None` for a delete.
    pub new: Option<Vec<u8>>,
}

/// One committed upstream transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The source it came from.
    pub source: String,
    /// Its position: the end LSN of its commit record.
    pub pos: Position,
    /// Its commit time upstream, microseconds since the Unix epoch (0 when
    /// unknown).
    pub commit_time_micros: i64,
    /// What it changed, per interface, in the order applied.
    pub changes: Vec<Change>,
    /// Its row changes of the source's tables, typed, in upstream order:
    /// collected only while someone follows rows ([`Bus::follow_rows`]),
    /// `None` for a transaction that began before that.
    pub rows: Option<Vec<RowChange>>,
    /// The bytes the bus had published up to and including this
    /// transaction ([`Bus::publish`] sets it): a follower that has taken
    /// it is `Bus::published() - published_through` bytes behind.
    pub published_through: u64,
}

impl Committed {
    /// What the transaction holds in memory, roughly: its keys and
    /// documents, and a fixed amount per change and row.
    pub fn size(&self) -> u64 {
        let changes: usize = self
            .changes
            .iter()
            .map(|c| {
                64 + c.key.len()
                    + c.old.as_ref().map_or(0, Vec::len)
                    + c.new.as_ref().map_or(0, Vec::len)
            })
            .sum();
        let rows = self.rows.as_ref().map_or(0, |rows| 256 * rows.len());
        (128 + changes + rows) as u64
    }
}

/// The bus (cheap to clone).
#[derive(Clone, Debug)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Committed>>,
    /// The bytes published so far ([`Committed::size`] of each).
    published: Arc<AtomicU64>,
    /// How many [`RowFollower`]s there are: the source collects typed rows
    /// only while there is one.
    row_followers: Arc<AtomicUsize>,
}

impl Default for Bus {
    fn default() -> Bus {
        Bus {
            tx: broadcast::channel(CAPACITY).0,
            published: Arc::new(AtomicU64::new(0)),
            row_followers: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// A follower of the bus that asked for typed rows: every transaction
/// that begins upstream after [`Bus::follow_rows`] returned carries
/// [`Committed::rows`] until this is dropped.
#[derive(Debug)]
pub struct RowFollower {
    pub rx: broadcast::Receiver<Arc<Committed>>,
    count: Arc<AtomicUsize>,
}

impl Drop for RowFollower {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Bus {
    /// Publishes a committed transaction (nobody listening is fine).
    pub fn publish(&self, mut committed: Committed) {
        let size = committed.size();
        committed.published_through = self.published.fetch_add(size, Ordering::SeqCst) + size;
        let _ = self.tx.send(Arc::new(committed));
    }

    /// The bytes published so far: what a follower that has taken the
    /// transaction published through `n` bytes is behind is this minus `n`.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    /// Follows the bus from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Committed>> {
        self.tx.subscribe()
    }

    /// How many followers there are.
    pub fn followers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Follows the bus from now on, with typed rows.
    pub fn follow_rows(&self) -> RowFollower {
        self.row_followers.fetch_add(1, Ordering::SeqCst);
        RowFollower {
            rx: self.tx.subscribe(),
            count: Arc::clone(&self.row_followers),
        }
    }

    /// Whether a transaction beginning now must collect typed rows.
    pub fn wants_rows(&self) -> bool {
        self.row_followers.load(Ordering::SeqCst) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_that_falls_behind_is_told() {
        let bus = Bus::default();
        let mut rx = bus.subscribe();
        for n in 0..(CAPACITY as u64 + 10) {
            bus.publish(Committed {
                source: "src".into(),
                pos: Position::from_u64(n),
                commit_time_micros: 0,
                changes: Vec::new(),
                rows: None,
                published_through: 0,
            });
        }
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(10))
        ));
    }

    #[test]
    fn the_bytes_published_are_counted() {
        let bus = Bus::default();
        let mut rx = bus.subscribe();
        let change = Change {
            interface: 1,
            key: vec![0; 10],
            old: Some(vec![0; 100]),
            new: Some(vec![0; 200]),
        };
        for _ in 0..3 {
            bus.publish(Committed {
                source: "src".into(),
                pos: Position::from_u64(1),
                commit_time_micros: 0,
                changes: vec![change.clone(), change.clone()],
                rows: None,
                published_through: 0,
            });
        }
        // 128 per transaction, 64 + 310 per change.
        let each = 128 + 2 * (64 + 310);
        assert_eq!(bus.published(), 3 * each);
        let first = rx.try_recv().unwrap();
        assert_eq!(first.published_through, each);
        assert_eq!(bus.published() - first.published_through, 2 * each);
    }

    #[test]
    fn rows_are_wanted_while_a_row_follower_lives() {
        let bus = Bus::default();
        assert!(!bus.wants_rows());
        let a = bus.follow_rows();
        let b = bus.clone().follow_rows();
        assert!(bus.wants_rows());
        drop(a);
        assert!(bus.wants_rows());
        drop(b);
        assert!(!bus.wants_rows());
    }
}
