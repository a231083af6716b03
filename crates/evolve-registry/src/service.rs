//! One registry instance: the state replayed from its log, kept current,
//! and writes that append to the log.
//!
//! Reads are served from memory. A read that finds nothing (an unknown id
//! or subject) first catches up with the log and looks again, so an id
//! returned by another instance is found at once; other reads see another
//! instance's writes within the poll interval. Writes take the instance's
//! writer lock, catch up, compute their records from the state (pure) and
//! append them at the offset they computed against; when another instance
//! appended first, they catch up and compute again.

use std::sync::{RwLock, Weak};
use std::time::Duration;

use crate::error::ApiError;
use crate::record::Record;
use crate::state::{State, StoredSchema};
use crate::store::{Log, StoreError};

/// How many times a write recomputes after losing a race before it gives
/// up with 50002.
const MAX_WRITE_ATTEMPTS: usize = 100;

#[derive(Clone, Debug)]
pub struct Settings {
    /// The `error_code` of an incompatible registration: 409 (Confluent
    /// through 8.0.3, Karapace; the default) or 40901 (Confluent 8.0.4+).
    pub incompatible_code: u32,
    /// How often the log is polled for other instances' writes.
    pub poll_interval: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            incompatible_code: 409,
            poll_interval: Duration::from_secs(1),
        }
    }
}

pub struct Registry<L: Log> {
    log: L,
    state: RwLock<State>,
    writer: tokio::sync::Mutex<()>,
    pub settings: Settings,
}

impl<L: Log> Registry<L> {
    /// Replays the whole log.
    pub async fn open(log: L, settings: Settings) -> Result<Registry<L>, StoreError> {
        let registry = Registry {
            log,
            state: RwLock::new(State::new()),
            writer: tokio::sync::Mutex::new(()),
            settings,
        };
        registry
            .catch_up()
            .await
            .map_err(|e| StoreError(e.message))?;
        Ok(registry)
    }

    pub fn describe_store(&self) -> String {
        self.log.describe()
    }

    /// The log the state is replayed from.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// Applies every record appended since the state's offset.
    pub async fn catch_up(&self) -> Result<(), ApiError> {
        let offset = self.read(|s| s.offset);
        let records = self
            .log
            .read_after(offset)
            .await
            .map_err(|e| ApiError::store(e.0))?;
        if records.is_empty() {
            return Ok(());
        }
        let uncomputed = {
            let mut state = self.state.write().map_err(|_| poisoned())?;
            for (offset, record) in &records {
                if *offset > state.offset {
                    state.apply(*offset, record);
                }
            }
            state.take_uncomputed()
        };
        compute_keys_in_background(uncomputed);
        Ok(())
    }

    /// Runs `f` on the current state.
    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        match self.state.read() {
            Ok(state) => f(&state),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// Runs `f`; when it answers "not found" (HTTP 404), catches up with
    /// the log and runs it again.
    pub async fn read_fresh<T>(
        &self,
        f: impl Fn(&State) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        match self.read(&f) {
            Err(e) if e.status == 404 => {
                self.catch_up().await?;
                self.read(&f)
            }
            other => other,
        }
    }

    /// Computes a write from the current state and appends its records;
    /// recomputes when another instance appended first. Writes on one
    /// instance run one at a time, so a write is computed once per attempt
    /// and large schemas are never parsed by several writes at once. A
    /// registration of a schema that is already a live version should not
    /// come here: see [`State::existing_registration`], answered from
    /// memory like a read.
    pub async fn write<T>(
        &self,
        op: impl Fn(&State) -> Result<(T, Vec<Record>), ApiError>,
    ) -> Result<T, ApiError> {
        let _writer = self.writer.lock().await;
        for _ in 0..MAX_WRITE_ATTEMPTS {
            self.catch_up().await?;
            let (offset, (answer, records)) = self.read(|s| op(s).map(|r| (s.offset, r)))?;
            if records.is_empty() {
                return Ok(answer);
            }
            if self
                .log
                .append(offset, &records)
                .await
                .map_err(|e| ApiError::store(e.0))?
            {
                let mut state = self.state.write().map_err(|_| poisoned())?;
                // A catch-up that ran since the append has applied these
                // records already (and perhaps later ones): the state's
                // offset never moves back.
                if state.offset == offset {
                    for (i, record) in records.iter().enumerate() {
                        state.apply(offset + 1 + i as i64, record);
                    }
                }
                // What this write added is keyed when next looked up.
                drop(state.take_uncomputed());
                return Ok(answer);
            }
        }
        Err(ApiError::timeout(format!(
            "gave up after {MAX_WRITE_ATTEMPTS} attempts: other registry instances kept writing to {} first",
            self.log.describe()
        )))
    }

    /// Appends records read from an export, as they are (ids, versions and
    /// deletions included), after checking that every one can be read and
    /// that no id names two schemas ([`State::check_import`]). The
    /// registry must be empty, or `force`.
    pub async fn import(&self, records: Vec<Record>, force: bool) -> Result<usize, ApiError> {
        let count = records.len();
        self.write(move |state| {
            if !force && !state.is_empty() {
                return Err(ApiError::not_permitted(format!(
                    "the registry already holds {} subject(s); import into an empty store, or pass --force",
                    state.subject_names("", true, false).len()
                )));
            }
            state.check_import(&records)?;
            Ok(((), records.clone()))
        })
        .await?;
        Ok(count)
    }
}

/// Computes, on a thread of its own, the normalized keys of the schemas
/// the state read without them (see [`crate::state::StoredSchema::keys`]),
/// so that the first registration after a start does not wait for them
/// all. A schema the state no longer holds is skipped; a registration that
/// needs a key first computes it itself (each key is computed once).
fn compute_keys_in_background(schemas: Vec<Weak<StoredSchema>>) {
    if schemas.is_empty() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("evolve-registry-keys".into())
        .spawn(move || {
            for schema in schemas {
                if let Some(schema) = schema.upgrade() {
                    schema.keys();
                }
            }
        });
}

fn poisoned() -> ApiError {
    ApiError::store("registry state lock is poisoned (a request panicked); restart the registry")
}
