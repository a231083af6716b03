//! Each key's last record, as an `ENVELOPE UPSERT` snapshot's first pass
//! finds it: in memory up to a number of keys, then in a database file of
//! its own beside the state store, so a topic of any number of keys is
//! snapshotted in bounded memory.
//!
//! In memory a key costs about 120 to 150 bytes (measured: 1,000,000 keys
//! of 12 to 13 bytes added 120 to 150 MiB to the process); past the limit
//! (`kafka_snapshot_memory_keys`, [`crate::config::Config`]) every key
//! moves to the file, whose page cache is bounded ([`CACHE_KIB`]). The
//! file is removed when the map is dropped, and a file left by a crash is
//! removed by the next snapshot of the table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{PipelineError, Result};

/// The file's page cache, in KiB.
const CACHE_KIB: i64 = 64 * 1024;

/// A record's place: partition and offset.
pub type Place = (i32, i64);

/// Keys and the place of each one's last record.
pub struct LastRecords {
    memory: HashMap<Vec<u8>, Place>,
    /// The keys once there were more than `limit`, in the file at `path`.
    file: Option<Connection>,
    limit: usize,
    /// Where the file goes.
    path: PathBuf,
}

impl Drop for LastRecords {
    fn drop(&mut self) {
        if let Some(conn) = self.file.take() {
            drop(conn);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// An error of the file at `path` while doing `what`.
fn failed<'a>(what: &'a str, path: &'a Path) -> impl Fn(rusqlite::Error) -> PipelineError + 'a {
    move |e| PipelineError::store(format!("{what} in {}", path.display()), e)
}

impl LastRecords {
    /// An empty map that moves to a file at `path` past `limit` keys. A
    /// file there (left by a crash) is removed: it holds nothing of this
    /// snapshot.
    pub fn new(path: &Path, limit: usize) -> LastRecords {
        let _ = std::fs::remove_file(path);
        LastRecords {
            memory: HashMap::new(),
            file: None,
            limit,
            path: path.to_path_buf(),
        }
    }

    /// Whether the keys are in the file.
    #[cfg(test)]
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    /// `key`'s last record is at `place`.
    pub fn set(&mut self, key: &[u8], place: Place) -> Result<()> {
        if let Some(file) = &self.file {
            file.prepare_cached(
                "INSERT INTO last (key, part, pos) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (key) DO UPDATE SET part = ?2, pos = ?3",
            )
            .and_then(|mut s| s.execute(params![key, place.0, place.1]))
            .map_err(failed("keep a snapshot's key", &self.path))?;
            return Ok(());
        }
        match self.memory.get_mut(key) {
            Some(p) => *p = place,
            None => {
                self.memory.insert(key.to_vec(), place);
                if self.memory.len() > self.limit {
                    self.spill()?;
                }
            }
        }
        Ok(())
    }

    /// `key`'s last record is a tombstone: the key is not in the snapshot.
    pub fn remove(&mut self, key: &[u8]) -> Result<()> {
        match &self.file {
            Some(file) => {
                file.prepare_cached("DELETE FROM last WHERE key = ?1")
                    .and_then(|mut s| s.execute([key]))
                    .map_err(failed("forget a snapshot's key", &self.path))?;
            }
            None => {
                self.memory.remove(key);
            }
        }
        Ok(())
    }

    /// Whether the record of `key` at `place` is the key's last one.
    pub fn is_last(&self, key: &[u8], place: Place) -> Result<bool> {
        match &self.file {
            Some(file) => file
                .prepare_cached("SELECT part, pos FROM last WHERE key = ?1")
                .and_then(|mut s| {
                    s.query_row([key], |r| Ok((r.get::<_, i32>(0)?, r.get::<_, i64>(1)?)))
                        .optional()
                })
                .map(|found| found == Some(place))
                .map_err(failed("look up a snapshot's key", &self.path)),
            None => Ok(self.memory.get(key) == Some(&place)),
        }
    }

    /// How many keys there are.
    pub fn len(&self) -> Result<u64> {
        match &self.file {
            Some(file) => file
                .query_row("SELECT count(*) FROM last", [], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(failed("count a snapshot's keys", &self.path)),
            None => Ok(self.memory.len() as u64),
        }
    }

    /// Moves every key to the file.
    fn spill(&mut self) -> Result<()> {
        let fail = failed("move a snapshot's keys", &self.path);
        let filled = Connection::open(&self.path).and_then(|file| {
            // Nothing in it outlives the process: no journal, no syncs.
            file.execute_batch(&format!(
                "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; \
                 PRAGMA cache_size = -{CACHE_KIB}; \
                 CREATE TABLE last (key BLOB PRIMARY KEY, part INTEGER NOT NULL, \
                 pos INTEGER NOT NULL) WITHOUT ROWID; BEGIN"
            ))?;
            {
                let mut insert =
                    file.prepare("INSERT INTO last (key, part, pos) VALUES (?1, ?2, ?3)")?;
                for (key, (partition, offset)) in &self.memory {
                    insert.execute(params![key, partition, offset])?;
                }
            }
            Ok(file)
        });
        let file = match filled {
            Ok(file) => file,
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                return Err(fail(e));
            }
        };
        self.memory = HashMap::new();
        tracing::info!(
            file = %self.path.display(),
            keys = self.limit + 1,
            "an upsert snapshot's keys moved to disk"
        );
        self.file = Some(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A path of its own for a test's file (not created).
    fn scratch() -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::env::temp_dir().join(format!(
            "evolve-last-records-{}-{}.sqlite",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, i32, i64),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..24, 0i32..3, 0i64..50).prop_map(|(k, p, o)| Op::Set(k, p, o)),
            1 => (0u8..24).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// In memory or moved to its file midway, the map answers as a
        /// plain map of the same operations does.
        #[test]
        fn the_map_answers_as_a_plain_map_does(
            ops in proptest::collection::vec(op(), 0..80),
            limit in 0usize..30,
        ) {
            let path = scratch();
            let mut last = LastRecords::new(&path, limit);
            let mut model: HashMap<Vec<u8>, Place> = HashMap::new();
            for op in &ops {
                match *op {
                    Op::Set(k, p, o) => {
                        last.set(&[k], (p, o)).unwrap();
                        model.insert(vec![k], (p, o));
                    }
                    Op::Remove(k) => {
                        last.remove(&[k]).unwrap();
                        model.remove(&vec![k]);
                    }
                }
            }
            prop_assert_eq!(last.len().unwrap(), model.len() as u64);
            for k in 0u8..24 {
                for p in 0i32..3 {
                    for o in 0i64..50 {
                        prop_assert_eq!(
                            last.is_last(&[k], (p, o)).unwrap(),
                            model.get(&vec![k]) == Some(&(p, o))
                        );
                    }
                }
            }
            prop_assert_eq!(last.spilled(), path.exists());
            drop(last);
            prop_assert!(!path.exists(), "the file outlived the map");
        }
    }

    #[test]
    fn a_file_that_cannot_be_made_is_an_error_naming_it() {
        let path = std::env::temp_dir()
            .join(format!("evolve-no-such-dir-{}", std::process::id()))
            .join("keys.sqlite");
        let mut last = LastRecords::new(&path, 1);
        last.set(b"a", (0, 1)).unwrap();
        let e = last.set(b"b", (0, 2)).unwrap_err().to_string();
        assert!(e.contains("move a snapshot's keys in"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn keys_past_the_limit_move_to_a_file_that_goes_with_the_map() {
        let path = scratch();
        // A file a crash left behind goes even when nothing spills.
        std::fs::write(&path, b"not a database").unwrap();
        drop(LastRecords::new(&path, 2));
        assert!(!path.exists());
        std::fs::write(&path, b"not a database").unwrap();
        let mut last = LastRecords::new(&path, 2);
        last.set(b"a", (0, 1)).unwrap();
        last.set(b"b", (0, 2)).unwrap();
        last.set(b"a", (0, 3)).unwrap();
        assert!(!last.spilled(), "two keys stay in memory");
        last.set(b"c", (1, 4)).unwrap();
        assert!(last.spilled(), "the third key moves them all");
        last.remove(b"b").unwrap();
        last.set(b"d", (0, 5)).unwrap();
        assert_eq!(last.len().unwrap(), 3);
        assert!(last.is_last(b"a", (0, 3)).unwrap());
        assert!(!last.is_last(b"a", (0, 1)).unwrap());
        assert!(!last.is_last(b"b", (0, 2)).unwrap());
        assert!(last.is_last(b"c", (1, 4)).unwrap());
        assert!(!last.is_last(b"c", (0, 4)).unwrap());
        assert!(last.is_last(b"d", (0, 5)).unwrap());
        drop(last);
        assert!(!path.exists());
    }
}
