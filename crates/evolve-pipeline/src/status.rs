//! What each object of a running pipeline is doing, for status output.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
