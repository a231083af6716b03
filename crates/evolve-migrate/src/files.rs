//! Reading a migrations directory: every `.sql` file below it, named as
//! Flyway names them, checksummed and split into statements up front so that
//! a bad file stops the run before anything is applied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use evolve_core::migration::{
    MigrationKind, MigrationName, Script, Version, flyway_checksum, parse_file_name, parse_script,
};

use crate::MigrateError;

/// One migration file, read and parsed.
#[derive(Debug)]
pub struct MigrationFile {
    pub name: MigrationName,
    /// Path relative to the migrations directory, with `/` separators; this
    /// is what the history's `script` column records.
    pub script: String,
    pub path: PathBuf,
    pub checksum: i32,
    pub text: String,
    pub parsed: Script,
}

impl MigrationFile {
    pub fn version(&self) -> Option<&Version> {
        match &self.name.kind {
            MigrationKind::Versioned(v) => Some(v),
            MigrationKind::Repeatable => None,
        }
    }
}

/// The migrations of a directory, versioned sorted by version and
/// repeatable sorted by description.
#[derive(Debug, Default)]
pub struct MigrationSet {
    pub versioned: BTreeMap<Version, MigrationFile>,
    pub repeatable: BTreeMap<String, MigrationFile>,
}

impl MigrationSet {
    /// Reads `dir` recursively. Fails on the first unreadable, misnamed,
    /// non-UTF-8 or unparseable file, and on duplicate versions.
    pub fn load(dir: &Path) -> Result<MigrationSet, MigrateError> {
        let mut paths = Vec::new();
        collect(dir, dir, &mut paths)?;
        paths.sort();
        let mut set = MigrationSet::default();
        for (script, path) in paths {
            let file_name = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(mut name) =
                parse_file_name(&file_name).map_err(|e| MigrateError::Name(e.to_string()))?
            else {
                continue;
            };
            name.script = script.clone();
            let bytes = std::fs::read(&path).map_err(|e| MigrateError::Read {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let checksum = flyway_checksum(&bytes).map_err(|e| MigrateError::Script {
                script: script.clone(),
                reason: e.to_string(),
            })?;
            // flyway_checksum succeeded, so the bytes are UTF-8.
            let text = String::from_utf8(bytes).map_err(|e| MigrateError::Script {
                script: script.clone(),
                reason: format!("{e}; save the file as UTF-8"),
            })?;
            let parsed = parse_script(&text).map_err(|e| MigrateError::Script {
                script: script.clone(),
                reason: e.to_string(),
            })?;
            let file = MigrationFile {
                name,
                script,
                path,
                checksum,
                text,
                parsed,
            };
            match file.name.kind.clone() {
                MigrationKind::Versioned(v) => {
                    if let Some(other) = set.versioned.get(&v) {
                        return Err(MigrateError::DuplicateVersion {
                            version: v.to_string(),
                            first: other.script.clone(),
                            second: file.script,
                        });
                    }
                    set.versioned.insert(v, file);
                }
                MigrationKind::Repeatable => {
                    let key = file.name.description.clone();
                    if let Some(other) = set.repeatable.get(&key) {
                        return Err(MigrateError::DuplicateRepeatable {
                            description: key,
                            first: other.script.clone(),
                            second: file.script,
                        });
                    }
                    set.repeatable.insert(key, file);
                }
            }
        }
        Ok(set)
    }

    /// The highest version among the files.
    pub fn latest_version(&self) -> Option<&Version> {
        self.versioned.keys().next_back()
    }
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<(), MigrateError> {
    let entries = std::fs::read_dir(dir).map_err(|e| MigrateError::Dir {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    for entry in entries {
        let entry = entry.map_err(|e| MigrateError::Dir {
            dir: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let file_type = entry.file_type().map_err(|e| MigrateError::Read {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        // Follow symlinks the way users expect: a link to a file is a file.
        let is_dir = if file_type.is_symlink() {
            path.is_dir()
        } else {
            file_type.is_dir()
        };
        if is_dir {
            collect(root, &path, out)?;
        } else {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, path));
        }
    }
    Ok(())
}
