//! Reading a migrations directory: every `.sql` file below it, named as
//! Flyway names them, checksummed and split into statements up front so that
//! a bad file stops the run before anything is applied.
//!
//! The directory is not trusted: the walk reads regular files only, never
//! follows a link out of the directory or into a directory unless told to
//! (and then refuses loops), stops at a depth and an entry count, and
//! refuses names it could not record faithfully (not UTF-8, a directory
//! named like a migration). A refused file is never read, so its content
//! never reaches a message.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use evolve_core::migration::{
    MigrationKind, MigrationName, Script, Version, flyway_checksum, parse_script,
};

use crate::MigrateError;
use crate::naming::{Named, Naming};
use crate::placeholders::{BuiltIns, Placeholders};

/// One migration file, read and parsed.
#[derive(Debug)]
pub struct MigrationFile {
    pub name: MigrationName,
    /// Path relative to the migrations directory, with `/` separators; this
    /// is what the history's `script` column records.
    pub script: String,
    pub path: PathBuf,
    /// Flyway's checksum: of the file as it is for a versioned migration,
    /// of the text after placeholder replacement for a repeatable one.
    pub checksum: i32,
    /// The text that runs, placeholders replaced.
    pub text: String,
    pub parsed: Script,
    /// Flyway's script configuration file beside it (`<file>.conf`): its
    /// path below the migrations directory and its `executeInTransaction`.
    /// `false` is also set as the `no-transaction` directive; `true` keeps
    /// the file in a transaction whatever it holds.
    pub config: Option<ScriptConfig>,
}

/// The settings of a migration's script configuration file
/// (`V2__x.sql.conf`) that evolve honours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptConfig {
    /// Its path below the migrations directory, for messages (or
    /// `flyway.executeInTransaction` for a callback that has no file and
    /// follows that setting).
    pub script: String,
    pub execute_in_transaction: Option<bool>,
}

impl MigrationFile {
    /// The version of a versioned or baseline migration.
    pub fn version(&self) -> Option<&Version> {
        self.name.kind.version()
    }

    /// Whether this is a baseline migration (`B<version>__...`).
    pub fn is_baseline(&self) -> bool {
        matches!(self.name.kind, MigrationKind::Baseline(_))
    }

    /// Versioned, repeatable or baseline, as `status` says it.
    pub fn kind(&self) -> crate::Kind {
        match self.name.kind {
            MigrationKind::Baseline(_) => crate::Kind::Baseline,
            MigrationKind::Repeatable => crate::Kind::Repeatable,
            MigrationKind::Versioned(_) => crate::Kind::Versioned,
        }
    }
}

/// A Flyway SQL callback: `<event>.sql` or `<event>__<description>.sql`.
#[derive(Debug)]
pub struct CallbackFile {
    /// One of [`crate::callbacks::EVENTS`].
    pub event: &'static str,
    pub description: Option<String>,
    /// Path relative to the migrations directory.
    pub script: String,
    /// The text that runs, placeholders replaced.
    pub text: String,
    pub parsed: Script,
    /// Flyway's script configuration file beside it
    /// (`beforeMigrate.sql.conf`), read as for a migration:
    /// `executeInTransaction` decides whether a callback of a verb's own
    /// events runs in a transaction of its own.
    pub config: Option<ScriptConfig>,
}

/// The migrations of a directory, versioned sorted by version and
/// repeatable sorted by description, and its callbacks in Flyway's order.
#[derive(Debug, Default)]
pub struct MigrationSet {
    pub versioned: BTreeMap<Version, MigrationFile>,
    pub repeatable: BTreeMap<String, MigrationFile>,
    /// Flyway's baseline migrations (`B<version>__...`), by version: on an
    /// empty database the highest one runs instead of the versioned
    /// migrations up to its version.
    pub baseline: BTreeMap<Version, MigrationFile>,
    /// Per event, the one without a description first, then by
    /// description (compared as Java compares strings).
    pub callbacks: Vec<CallbackFile>,
}

impl MigrationSet {
    /// Reads `dir` recursively, replacing no placeholders. Fails on the
    /// first unreadable, misnamed, non-UTF-8 or unparseable file, on entries
    /// the walk refuses (see the module docs), and on duplicate versions.
    pub fn load(dir: &Path, symlinks: Symlinks) -> Result<MigrationSet, MigrateError> {
        let off = Placeholders {
            replace: false,
            ..Placeholders::default()
        };
        MigrationSet::load_with(dir, symlinks, &off, &BuiltIns::default())
    }

    /// [`MigrationSet::load`], replacing placeholders as Flyway does; a
    /// placeholder without a value fails the load.
    pub fn load_with(
        dir: &Path,
        symlinks: Symlinks,
        placeholders: &Placeholders,
        built_ins: &BuiltIns,
    ) -> Result<MigrationSet, MigrateError> {
        MigrationSet::load_named(dir, symlinks, &Naming::default(), placeholders, built_ins)
    }

    /// [`MigrationSet::load_with`] under Flyway's naming settings `naming`.
    pub fn load_named(
        dir: &Path,
        symlinks: Symlinks,
        naming: &Naming,
        placeholders: &Placeholders,
        built_ins: &BuiltIns,
    ) -> Result<MigrationSet, MigrateError> {
        let mut paths = walk(dir, symlinks, naming)?;
        paths.sort();
        let mut set = MigrationSet::default();
        for (script, path) in paths {
            let file_name = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut name = match naming.parse(&file_name).map_err(MigrateError::Name)? {
                None => continue,
                Some(Named::Callback(callback)) => {
                    let file = load_callback(&path, script, callback, placeholders, built_ins)?;
                    set.add_callback(file)?;
                    continue;
                }
                Some(Named::Undo) => {
                    tracing::warn!(
                        "migration {script} is an undo migration, which evolve does not run (nor does Flyway Community); it is skipped, write a new versioned migration to revert a change"
                    );
                    continue;
                }
                Some(Named::Migration(name)) => name,
            };
            name.script = script.clone();
            let config = read_script_config(&path, &script)?;
            let bytes = read_regular(&path)?;
            let mut checksum = flyway_checksum(&bytes).map_err(|e| MigrateError::Script {
                script: script.clone(),
                reason: e.to_string(),
            })?;
            // flyway_checksum succeeded, so the bytes are UTF-8.
            let raw = String::from_utf8(bytes).map_err(|e| MigrateError::Script {
                script: script.clone(),
                reason: format!("{e}; save the file as UTF-8"),
            })?;
            let text = config
                .placeholders(placeholders)
                .replace(&raw, built_ins, &file_name)
                .map_err(|m| MigrateError::Placeholder {
                    script: script.clone(),
                    line: m.line,
                    placeholder: m.placeholder,
                })?;
            if name.kind == MigrationKind::Repeatable && text != raw {
                checksum = flyway_checksum(text.as_bytes()).map_err(|e| MigrateError::Script {
                    script: script.clone(),
                    reason: e.to_string(),
                })?;
            }
            let mut parsed = parse_script(&text).map_err(|e| MigrateError::Script {
                script: script.clone(),
                reason: e.to_string(),
            })?;
            let config = config.settings;
            if config
                .as_ref()
                .is_some_and(|c| c.execute_in_transaction == Some(false))
            {
                parsed.directives.no_transaction = true;
            }
            if let Some(c) = &config
                && c.execute_in_transaction == Some(true)
                && parsed.directives.no_transaction
            {
                return Err(MigrateError::Script {
                    script: script.clone(),
                    reason: format!(
                        "starts with '-- evolve:no-transaction', and {} says executeInTransaction=true; remove one of the two",
                        c.script
                    ),
                });
            }
            let file = MigrationFile {
                name,
                script,
                path,
                checksum,
                text,
                parsed,
                config,
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
                MigrationKind::Baseline(v) => {
                    if let Some(other) = set.baseline.get(&v) {
                        return Err(MigrateError::DuplicateVersion {
                            version: v.to_string(),
                            first: other.script.clone(),
                            second: file.script,
                        });
                    }
                    set.baseline.insert(v, file);
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

    fn add_callback(&mut self, file: CallbackFile) -> Result<(), MigrateError> {
        let stem = |f: &CallbackFile| f.script.rsplit('/').next().unwrap_or_default().to_string();
        if let Some(other) = self.callbacks.iter().find(|c| stem(c) == stem(&file)) {
            return Err(MigrateError::DuplicateCallback {
                first: other.script.clone(),
                second: file.script,
            });
        }
        let key = |f: &CallbackFile| {
            (
                f.event,
                f.description
                    .as_ref()
                    .map(|d| d.encode_utf16().collect::<Vec<u16>>()),
            )
        };
        let at = self.callbacks.partition_point(|c| key(c) <= key(&file));
        self.callbacks.insert(at, file);
        Ok(())
    }

    /// The callbacks of `event`, in the order they run.
    pub fn callbacks_of<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a CallbackFile> {
        self.callbacks.iter().filter(move |c| c.event == event)
    }

    /// Flyway's `executeInTransaction = false`: every migration and
    /// callback whose script configuration file does not say otherwise
    /// runs outside a transaction, statement by statement.
    pub fn execute_outside_transactions(&mut self) {
        let own = |c: &Option<ScriptConfig>| c.as_ref().and_then(|c| c.execute_in_transaction);
        for file in self
            .versioned
            .values_mut()
            .chain(self.repeatable.values_mut())
            .chain(self.baseline.values_mut())
        {
            if own(&file.config).is_none() {
                file.parsed.directives.no_transaction = true;
            }
        }
        for callback in &mut self.callbacks {
            if own(&callback.config).is_none() {
                callback.config = Some(ScriptConfig {
                    script: "flyway.executeInTransaction".into(),
                    execute_in_transaction: Some(false),
                });
            }
        }
    }

    /// The highest version among the files (baseline migrations
    /// included).
    pub fn latest_version(&self) -> Option<&Version> {
        self.versioned
            .keys()
            .next_back()
            .into_iter()
            .chain(self.baseline.keys().next_back())
            .max()
    }
}

/// What a script configuration file says.
#[derive(Default)]
struct ScriptConfigRead {
    settings: Option<ScriptConfig>,
    placeholder_replacement: Option<bool>,
}

impl ScriptConfigRead {
    /// The placeholder settings of its script: `placeholderReplacement`
    /// can turn replacement off for it (never on when it is off overall).
    fn placeholders<'a>(&self, placeholders: &'a Placeholders) -> Cow<'a, Placeholders> {
        match self.placeholder_replacement {
            Some(replace) => Cow::Owned(Placeholders {
                replace: replace && placeholders.replace,
                ..placeholders.clone()
            }),
            None => Cow::Borrowed(placeholders),
        }
    }
}

/// Reads Flyway's script configuration file of the migration or callback
/// at `path` (`<file>.conf` beside it), when there is one:
/// `executeInTransaction` and `placeholderReplacement` are honoured,
/// `encoding` must be UTF-8 (evolve reads no other), `shouldExecute` is
/// refused (whether the file runs at all cannot be guessed), and any other
/// key is refused, as Flyway refuses it.
fn read_script_config(path: &Path, script: &str) -> Result<ScriptConfigRead, MigrateError> {
    let mut conf_path = path.as_os_str().to_owned();
    conf_path.push(".conf");
    let conf_path = PathBuf::from(conf_path);
    let conf_script = format!("{script}.conf");
    match std::fs::symlink_metadata(&conf_path) {
        Err(_) => return Ok(ScriptConfigRead::default()),
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            return Err(refuse(
                &conf_path,
                "is not a regular file; evolve reads a script configuration only from a regular file, replace it with one or remove it",
            ));
        }
    }
    let bytes = read_regular(&conf_path)?;
    let text = String::from_utf8(bytes).map_err(|e| MigrateError::Script {
        script: conf_script.clone(),
        reason: format!("{e}; save the file as UTF-8"),
    })?;
    let mut read = ScriptConfigRead::default();
    let mut settings = ScriptConfig {
        script: conf_script.clone(),
        execute_in_transaction: None,
    };
    let boolean = |key: &str, value: &str| match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(MigrateError::Script {
            script: conf_script.clone(),
            reason: format!("{key} is {value:?}; write true or false"),
        }),
    };
    for (key, value) in crate::flyway_config::parse_conf(&text) {
        match key.as_str() {
            "executeInTransaction" => {
                settings.execute_in_transaction = Some(boolean(&key, &value)?);
            }
            "placeholderReplacement" => {
                read.placeholder_replacement = Some(boolean(&key, &value)?);
            }
            "encoding" if value.trim().eq_ignore_ascii_case("UTF-8") => {}
            "encoding" => {
                return Err(MigrateError::Script {
                    script: conf_script.clone(),
                    reason: format!(
                        "encoding is {value:?}, and evolve reads migrations as UTF-8 only; convert {script} to UTF-8 and remove the key"
                    ),
                });
            }
            // Running a file its configuration says to skip (or skipping
            // one it says to run) would be worse than stopping.
            "shouldExecute" => {
                return Err(MigrateError::Script {
                    script: conf_script.clone(),
                    reason: format!(
                        "shouldExecute is not supported by evolve, which cannot tell whether {script} should run; remove the key, or move {script} out of the migrations directory if it must not run"
                    ),
                });
            }
            // Flyway refuses the file too ("Unknown configuration
            // property"): a misspelt executeInTransaction would otherwise
            // run the script in a transaction its author meant to avoid.
            _ => {
                return Err(MigrateError::Script {
                    script: conf_script.clone(),
                    reason: format!(
                        "{key} is not a script configuration setting (Flyway refuses it too); correct it to executeInTransaction, placeholderReplacement or encoding, or remove it"
                    ),
                });
            }
        }
    }
    read.settings = Some(settings);
    Ok(read)
}

/// Reads a callback file and its script configuration file, replacing its
/// placeholders; refuses the events evolve does not run.
fn load_callback(
    path: &Path,
    script: String,
    name: evolve_core::migration::CallbackName,
    placeholders: &Placeholders,
    built_ins: &BuiltIns,
) -> Result<CallbackFile, MigrateError> {
    let Some(event) = crate::callbacks::EVENTS
        .iter()
        .copied()
        .find(|e| *e == name.event)
    else {
        return Err(MigrateError::Script {
            script,
            reason: format!(
                "evolve does not run {} callbacks; move the file out of the migrations directory (or run that step with Flyway)",
                name.event
            ),
        });
    };
    let config = read_script_config(path, &script)?;
    let bytes = read_regular(path)?;
    let raw = String::from_utf8(bytes).map_err(|e| MigrateError::Script {
        script: script.clone(),
        reason: format!("{e}; save the file as UTF-8"),
    })?;
    let file_name = script.rsplit('/').next().unwrap_or_default().to_string();
    let text = config
        .placeholders(placeholders)
        .replace(&raw, built_ins, &file_name)
        .map_err(|m| MigrateError::Placeholder {
            script: script.clone(),
            line: m.line,
            placeholder: m.placeholder,
        })?;
    let parsed = parse_script(&text).map_err(|e| MigrateError::Script {
        script: script.clone(),
        reason: e.to_string(),
    })?;
    if let Some(copy) = parsed.statements.iter().find(|s| s.copy_data.is_some()) {
        return Err(MigrateError::Script {
            script,
            reason: format!(
                "line {}: evolve runs COPY ... FROM STDIN with its rows in migrations only, not in callbacks; move the rows into a migration, or load them with INSERT",
                copy.line
            ),
        });
    }
    Ok(CallbackFile {
        event,
        description: name.description,
        script,
        text,
        parsed,
        config: config.settings,
    })
}

/// How the walk of a migrations directory treats symbolic links.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Symlinks {
    /// A link to a file inside the directory is read like the file; a link
    /// to a directory, or to anything outside the directory, is refused.
    #[default]
    WithinDir,
    /// Links are followed wherever they lead (`--follow-symlinks`); a link
    /// back to a directory already read is refused as a loop.
    Follow,
}

/// Directories deeper than this below the migrations directory are refused.
const MAX_DEPTH: usize = 32;
/// A walk that meets more entries than this stops with an error.
const MAX_ENTRIES: usize = 100_000;

/// `(script, path)` of every file below `root` whose name ends in one of
/// the suffixes of `naming` (`.sql`).
fn walk(
    root: &Path,
    symlinks: Symlinks,
    naming: &Naming,
) -> Result<Vec<(String, PathBuf)>, MigrateError> {
    let real_root = std::fs::canonicalize(root).map_err(|e| MigrateError::Dir {
        dir: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut walk = Walk {
        root,
        real_root: real_root.clone(),
        symlinks,
        naming,
        entries: 0,
        visited: vec![real_root],
        out: Vec::new(),
    };
    walk.dir(root, &mut Vec::new())?;
    Ok(walk.out)
}

struct Walk<'a> {
    root: &'a Path,
    real_root: PathBuf,
    symlinks: Symlinks,
    naming: &'a Naming,
    entries: usize,
    /// Resolved paths of the directories read so far (loop detection when
    /// links are followed).
    visited: Vec<PathBuf>,
    out: Vec<(String, PathBuf)>,
}

fn refuse(path: &Path, reason: impl Into<String>) -> MigrateError {
    MigrateError::Entry {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

impl Walk<'_> {
    /// Reads `dir`, whose path below the root is `rel`.
    fn dir(&mut self, dir: &Path, rel: &mut Vec<String>) -> Result<(), MigrateError> {
        let entries = std::fs::read_dir(dir).map_err(|e| MigrateError::Dir {
            dir: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        for entry in entries {
            let entry = entry.map_err(|e| MigrateError::Dir {
                dir: dir.to_path_buf(),
                reason: e.to_string(),
            })?;
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(MigrateError::TooManyEntries {
                    dir: self.root.to_path_buf(),
                    limit: MAX_ENTRIES,
                });
            }
            let path = entry.path();
            let os_name = entry.file_name();
            let raw = os_name.as_encoded_bytes();
            if raw.starts_with(b".") {
                continue;
            }
            let sql_name = self.naming.is_candidate(raw);
            let file_type = entry.file_type().map_err(|e| MigrateError::Read {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let (kind, resolved) = if file_type.is_symlink() {
                match std::fs::canonicalize(&path)
                    .and_then(|real| std::fs::metadata(&real).map(|m| (m.file_type(), real)))
                {
                    Ok((t, real)) => (t, Some(real)),
                    // A broken link matters only where a file was expected.
                    Err(_) if !sql_name => continue,
                    Err(e) => {
                        return Err(refuse(
                            &path,
                            format!(
                                "is a symbolic link that cannot be resolved ({e}); fix or remove it"
                            ),
                        ));
                    }
                }
            } else {
                (file_type, None)
            };
            if !kind.is_dir() && !sql_name {
                continue;
            }
            let Some(name) = os_name.to_str() else {
                return Err(refuse(
                    &path,
                    "has a name that is not UTF-8, which the history could not record as it is; rename it",
                ));
            };
            if kind.is_dir() {
                if sql_name {
                    return Err(refuse(
                        &path,
                        format!(
                            "is a directory named like a migration file; rename it so its name does not end in {}",
                            self.naming.suffixes.join(" or ")
                        ),
                    ));
                }
                let real = match resolved {
                    Some(real) => {
                        if self.symlinks == Symlinks::WithinDir {
                            return Err(refuse(
                                &path,
                                "is a symbolic link to a directory, which evolve does not follow; move the files into the migrations directory, or pass --follow-symlinks",
                            ));
                        }
                        if self.visited.contains(&real) {
                            return Err(refuse(
                                &path,
                                format!(
                                    "is a symbolic link back to {}, a directory already read (a loop); remove it",
                                    real.display()
                                ),
                            ));
                        }
                        real
                    }
                    None if self.symlinks == Symlinks::Follow => std::fs::canonicalize(&path)
                        .map_err(|e| MigrateError::Dir {
                            dir: path.clone(),
                            reason: e.to_string(),
                        })?,
                    None => PathBuf::new(),
                };
                if rel.len() >= MAX_DEPTH {
                    return Err(refuse(
                        &path,
                        format!(
                            "is nested more than {MAX_DEPTH} directories deep below the migrations directory; flatten it"
                        ),
                    ));
                }
                if self.symlinks == Symlinks::Follow {
                    self.visited.push(real);
                }
                rel.push(name.to_string());
                self.dir(&path, rel)?;
                rel.pop();
                continue;
            }
            if !kind.is_file() {
                return Err(refuse(
                    &path,
                    "is not a regular file (a FIFO, socket or device); evolve reads only regular files, remove it",
                ));
            }
            if let Some(real) = &resolved
                && self.symlinks == Symlinks::WithinDir
                && !real.starts_with(&self.real_root)
            {
                return Err(refuse(
                    &path,
                    "is a symbolic link to a file outside the migrations directory; copy the file in, or pass --follow-symlinks to read it",
                ));
            }
            let mut script = rel.join("/");
            if !script.is_empty() {
                script.push('/');
            }
            script.push_str(name);
            self.out.push((script, path));
        }
        Ok(())
    }
}

/// Reads a file the walk found, checking again on the open file that it is
/// a regular file (it may have been replaced since).
fn read_regular(path: &Path) -> Result<Vec<u8>, MigrateError> {
    let read_err = |e: std::io::Error| MigrateError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    if !file.metadata().map_err(read_err)?.is_file() {
        return Err(refuse(
            path,
            "is not a regular file (a FIFO, socket or device); evolve reads only regular files, remove it",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read_err)?;
    Ok(bytes)
}
