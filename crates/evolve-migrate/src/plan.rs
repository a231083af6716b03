//! What state each migration is in, from the files on disk and the rows in
//! the history table. Pure: no I/O, so every rule here is unit-tested.

use std::collections::BTreeMap;

use evolve_core::migration::Version;
use serde::Serialize;

use crate::files::{MigrationFile, MigrationSet};
use crate::history::{
    HistoryRow, Progress, TYPE_BASELINE, TYPE_DELETE, TYPE_SCHEMA, TYPE_SQL, TYPE_SQL_BASELINE,
    is_java_migration,
};

/// The state of one migration. Serialized in kebab-case
/// (`ignored-out-of-order`, `missing-file`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// On disk, not yet applied; `apply` runs it.
    Pending,
    /// Applied, and the file still has the recorded checksum.
    Applied,
    /// Recorded as failed (a no-transaction file that stopped part-way, or
    /// one still running). `apply` resumes it where it stopped.
    Failed,
    /// Applied, but the file on disk has another checksum or name.
    Edited,
    /// Applied, but the file is gone.
    MissingFile,
    /// Applied, the file is gone and its version is above every file's
    /// (or there are no versioned files at all): a newer set of files
    /// applied it (Flyway's FUTURE_SUCCESS). Valid, and
    /// `repair` leaves it alone, as Flyway's does: the newer files still
    /// have it, and a row marked deleted would make them run it again.
    Future,
    /// Pending, but sorts before an applied version; `apply` refuses unless
    /// `--out-of-order`.
    IgnoredOutOfOrder,
    /// The baseline row.
    Baseline,
    /// A file at or below the baseline version: never applied.
    BelowBaseline,
    /// A repeatable migration whose file changed since it last ran; `apply`
    /// runs it again.
    Outdated,
    /// Marked deleted by `repair` after its file was deleted (a repeatable
    /// file that comes back is pending again).
    Deleted,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Applied => "applied",
            State::Failed => "failed",
            State::Edited => "edited",
            State::MissingFile => "missing-file",
            State::Future => "future",
            State::IgnoredOutOfOrder => "ignored-out-of-order",
            State::Baseline => "baseline",
            State::BelowBaseline => "below-baseline",
            State::Outdated => "outdated",
            State::Deleted => "deleted",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Versioned,
    Repeatable,
    Baseline,
}

/// One line of `evolve migrate status`. This is also the documented shape
/// of `status --format json` (see the README).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrationStatus {
    pub version: Option<String>,
    pub description: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Flyway's type, as `flyway info` shows it: the history row's `type`
    /// (`SQL`, `BASELINE`, `JDBC`, ...; for a migration `repair` marked
    /// deleted, the type of the row it deleted), `SQL` for a file without
    /// a row.
    pub history_type: String,
    pub script: String,
    pub state: State,
    /// The file's checksum, or the recorded one when there is no file.
    pub checksum: Option<i32>,
    /// The checksum in the history, when it differs from the file's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_checksum: Option<i32>,
    pub installed_rank: Option<i32>,
    pub installed_by: Option<String>,
    pub applied_at: Option<String>,
    pub execution_time_ms: Option<i32>,
    /// Whether the file runs outside a transaction.
    pub no_transaction: bool,
    /// `-- evolve:phase`: the file's step in an expand/contract change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `-- evolve:backfill NAME`: the backfill job the file hands off to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill_job: Option<String>,
    /// For a failed no-transaction file: statements done of the total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statements_done: Option<i32>,
    /// Why the state is what it is, for the states that need a reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The state of everything, plus what `apply` would run.
#[derive(Debug)]
pub struct Plan<'a> {
    pub migrations: Vec<MigrationStatus>,
    /// Highest applied version (or the baseline), if any.
    pub current_version: Option<Version>,
    /// Highest version in the history, failed or not (not one `repair`
    /// marked deleted): what Flyway's target `current` stands for.
    pub last_applied: Option<Version>,
    pub(crate) files: &'a MigrationSet,
}

/// Something `apply` will run.
#[derive(Debug)]
pub struct Step<'a> {
    pub file: &'a MigrationFile,
    /// For a failed no-transaction file being resumed.
    pub resume: Option<Resume>,
    pub out_of_order: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    pub installed_rank: i32,
    pub statements_done: usize,
    pub done_checksum: i32,
}

/// Flyway's `target`: how far `apply` takes the versioned migrations.
/// Repeatable migrations run whatever it is, as in Flyway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// `latest`: every pending version (the default).
    #[default]
    Latest,
    /// `current`: none beyond the highest version in the history (a
    /// failed one included, as Flyway counts it); a database without one
    /// gets no versioned migration.
    Current,
    /// `next`: the first pending version only (under out-of-order, the
    /// first pending file even below the applied version).
    Next,
    /// `<version>`: up to and including it; a file or a history row must
    /// have it (Flyway's "No migration with a target version").
    Version(Version),
    /// `<version>?`: up to and including it, which no migration need have.
    AtMost(Version),
}

impl Target {
    /// The forms a target is written in, as a refusal names them.
    pub const FORMS: &'static str =
        "a version (2.1), a version no migration need have (2.1?), latest, current or next";

    /// A target as Flyway reads `target` (`latest`, `current` and `next`
    /// without regard to case; a trailing `?` lets the version be one no
    /// migration has, and changes nothing of the others, as in Flyway).
    pub fn parse(s: &str) -> Result<Target, String> {
        let t = s.trim();
        let (version, optional) = match t.strip_suffix('?') {
            Some(v) => (v.trim_end(), true),
            None => (t, false),
        };
        for (name, target) in [
            ("latest", Target::Latest),
            ("current", Target::Current),
            ("next", Target::Next),
        ] {
            if version.eq_ignore_ascii_case(name) {
                return Ok(target);
            }
        }
        match Version::parse(version) {
            Ok(v) if optional => Ok(Target::AtMost(v)),
            Ok(v) => Ok(Target::Version(v)),
            Err(_) => Err(format!(
                "target {t:?} is not a target; give {}",
                Target::FORMS
            )),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Latest => f.write_str("latest"),
            Target::Current => f.write_str("current"),
            Target::Next => f.write_str("next"),
            Target::Version(v) => write!(f, "{v}"),
            Target::AtMost(v) => write!(f, "{v}?"),
        }
    }
}

/// Options that change what apply would run.
#[derive(Clone, Debug, Default)]
pub struct StepOptions {
    pub target: Target,
    pub out_of_order: bool,
    /// Flyway's `ignoreMigrationPatterns`: the states that are no
    /// problem.
    pub ignore: crate::IgnorePatterns,
}

impl<'a> Plan<'a> {
    pub fn new(files: &'a MigrationSet, rows: &[HistoryRow], progress: &[Progress]) -> Plan<'a> {
        let mut migrations = Vec::new();
        let mut by_version: BTreeMap<Version, Vec<&HistoryRow>> = BTreeMap::new();
        let mut repeatable_rows: BTreeMap<&str, Vec<&HistoryRow>> = BTreeMap::new();
        let mut unversioned_odd: Vec<&HistoryRow> = Vec::new();
        for row in rows {
            if row.kind == TYPE_SCHEMA {
                continue;
            }
            match &row.version {
                Some(v) => match Version::parse(v) {
                    Ok(v) => by_version.entry(v).or_default().push(row),
                    Err(_) => unversioned_odd.push(row),
                },
                None => repeatable_rows
                    .entry(row.description.as_str())
                    .or_default()
                    .push(row),
            }
        }

        // The row that decides a version's state is its latest one.
        let effective: BTreeMap<&Version, &HistoryRow> = by_version
            .iter()
            .filter_map(|(v, rows)| rows.last().map(|r| (v, *r)))
            .collect();
        // Flyway's baseline migrations: on a database without any versioned
        // row (a fresh one), the highest `B` file runs instead of the
        // versioned files up to its version; once it ran (`SQL_BASELINE`),
        // it marks a baseline as a `BASELINE` row does.
        let fresh = effective.values().all(|r| r.kind == TYPE_DELETE);
        let pending_baseline = if fresh {
            files.baseline.keys().next_back().cloned()
        } else {
            None
        };
        let baseline = effective
            .iter()
            .filter(|(_, r)| (r.kind == TYPE_BASELINE || r.kind == TYPE_SQL_BASELINE) && r.success)
            .map(|(v, _)| (*v).clone())
            .max()
            .or_else(|| pending_baseline.clone());
        let current_version = effective
            .iter()
            .filter(|(_, r)| r.success && r.kind != TYPE_DELETE)
            .map(|(v, _)| (*v).clone())
            .max();
        let last_applied = effective
            .iter()
            .filter(|(_, r)| r.kind != TYPE_DELETE)
            .map(|(v, _)| (*v).clone())
            .max();

        let mut versions: Vec<&Version> = files.versioned.keys().collect();
        versions.extend(files.baseline.keys());
        versions.extend(effective.keys().copied());
        versions.sort();
        versions.dedup();
        for v in versions {
            let file = files.versioned.get(v);
            let bfile = files.baseline.get(v);
            let row = effective.get(v).copied();
            let mut s = match (row, bfile) {
                // The baseline migration that ran, or runs now.
                (Some(row), _) if row.kind == TYPE_SQL_BASELINE => baseline_migration_status(
                    v,
                    bfile,
                    file,
                    Some(row),
                    files.latest_version(),
                    progress,
                ),
                (None, Some(_)) if pending_baseline.as_ref() == Some(v) => {
                    baseline_migration_status(v, bfile, file, None, None, progress)
                }
                // A baseline migration that does not run: the database has
                // a history (or a higher one runs).
                (None, Some(b)) if file.is_none() => {
                    let mut s = from_file(b, State::BelowBaseline, Kind::Baseline);
                    s.history_type = TYPE_SQL_BASELINE.to_string();
                    s.note = Some(
                        "a baseline migration, which runs only on a database without versioned migrations, instead of the files up to its version".into(),
                    );
                    s
                }
                _ => versioned_status(
                    v,
                    file,
                    row,
                    baseline.as_ref(),
                    current_version.as_ref(),
                    files.latest_version(),
                    progress,
                ),
            };
            if s.state == State::Deleted
                && let Some(rows) = by_version.get(v)
            {
                s.history_type = deleted_type(rows);
            }
            migrations.push(s);
        }

        let mut descriptions: Vec<&str> = files.repeatable.keys().map(String::as_str).collect();
        descriptions.extend(repeatable_rows.keys().copied());
        descriptions.sort();
        descriptions.dedup();
        for d in descriptions {
            let file = files.repeatable.get(d);
            let row = repeatable_rows.get(d).and_then(|rows| rows.last().copied());
            let mut s = repeatable_status(d, file, row);
            if s.state == State::Deleted
                && let Some(rows) = repeatable_rows.get(d)
            {
                s.history_type = deleted_type(rows);
            }
            migrations.push(s);
        }
        for row in unversioned_odd {
            let mut s = from_row(row, State::Applied, Kind::Versioned);
            s.note = Some(format!(
                "version {:?} in the history is not a valid version",
                row.version.as_deref().unwrap_or("")
            ));
            migrations.push(s);
        }
        Plan {
            migrations,
            current_version,
            last_applied,
            files,
        }
    }

    /// Problems that make `validate` fail and `apply` refuse: edited or
    /// missing applied files, pending files that sort before applied ones,
    /// and future migrations, each unless `ignoreMigrationPatterns`
    /// (`for_apply.ignore`) lets it be.
    pub fn problems(&self, for_apply: &StepOptions) -> Vec<String> {
        let mut out = Vec::new();
        let latest = self
            .current_version
            .as_ref()
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        let ignore = &for_apply.ignore;
        for m in &self.migrations {
            let name = &m.script;
            match m.state {
                State::Edited => out.push(format!(
                    "migration {name} was edited after it was applied ({}); restore the file or run 'evolve migrate repair'",
                    m.note.as_deref().unwrap_or("checksum differs")
                )),
                State::MissingFile if !ignore.missing.of(m.kind) => out.push(format!(
                    "migration {name} was applied but its file is missing; restore it, run 'evolve migrate repair' to mark it deleted, or set ignoreMigrationPatterns = *:missing"
                )),
                State::IgnoredOutOfOrder
                    if !for_apply.out_of_order && !ignore.ignored.of(m.kind) =>
                {
                    out.push(format!(
                        "migration {name} is pending but sorts before applied version {latest}; give it a version above {latest}, apply it with --out-of-order, or set ignoreMigrationPatterns = *:ignored to leave it"
                    ))
                }
                State::Future if !ignore.future.of(m.kind) => out.push(format!(
                    "migration {name} was applied, and its version is above every file's (a future migration), which ignoreMigrationPatterns does not list; add *:future to it (Flyway's default), or restore the newer files"
                )),
                _ => {}
            }
            if m.note
                .as_deref()
                .is_some_and(|n| n.contains("not a valid version"))
            {
                out.push(format!(
                    "history row {} ({name}): {}; fix or delete that row",
                    m.installed_rank.unwrap_or_default(),
                    m.note.as_deref().unwrap_or_default()
                ));
            }
        }
        out
    }

    /// Versioned files on disk whose version `repair` marked deleted: `apply`
    /// never runs them, which `validate` reports.
    pub fn deleted_on_disk(&self) -> impl Iterator<Item = &MigrationStatus> {
        self.migrations.iter().filter(|m| {
            m.state == State::Deleted
                && m.kind == Kind::Versioned
                && m.version
                    .as_deref()
                    .and_then(|v| Version::parse(v).ok())
                    .is_some_and(|v| self.files.versioned.contains_key(&v))
        })
    }

    /// Failed migrations, which `validate` reports and `apply` resumes.
    pub fn failed(&self) -> impl Iterator<Item = &MigrationStatus> {
        self.migrations.iter().filter(|m| m.state == State::Failed)
    }

    /// The file of a versioned or baseline migration.
    fn file_of(&self, m: &MigrationStatus) -> Option<&'a MigrationFile> {
        let v = Version::parse(m.version.as_deref()?).ok()?;
        if m.kind == Kind::Baseline {
            self.files.baseline.get(&v)
        } else {
            self.files.versioned.get(&v)
        }
    }

    /// What `apply` runs, in order: resumed failures, pending versioned
    /// files up to the target, then repeatable files that are new or changed.
    pub fn steps(
        &self,
        opts: &StepOptions,
        progress: &[Progress],
    ) -> Result<Vec<Step<'a>>, String> {
        let mut steps = Vec::new();
        // The highest version that runs; `None` inside: none does.
        let bound: Option<Option<&Version>> = match &opts.target {
            Target::Latest | Target::Next => None,
            Target::Current => Some(self.last_applied.as_ref()),
            Target::Version(v) | Target::AtMost(v) => Some(Some(v)),
        };
        for m in &self.migrations {
            let in_target = |v: &Version| bound.is_none_or(|b| b.is_some_and(|t| v <= t));
            match (m.kind, m.state) {
                (Kind::Versioned | Kind::Baseline, State::Failed) => {
                    let Some(file) = self.file_of(m) else {
                        return Err(format!(
                            "migration {} failed on an earlier run and its file is gone; run 'evolve migrate repair' to remove the failed row",
                            m.script
                        ));
                    };
                    let rank = m.installed_rank.unwrap_or_default();
                    let Some(p) = progress.iter().find(|p| p.installed_rank == rank) else {
                        return Err(format!(
                            "migration {} failed on an earlier run and evolve has no record of how far it got; make sure its effects are complete or undone, then run 'evolve migrate repair' to remove the failed row",
                            m.script
                        ));
                    };
                    steps.push(Step {
                        file,
                        resume: Some(Resume {
                            installed_rank: rank,
                            statements_done: usize::try_from(p.statements_done).unwrap_or(0),
                            done_checksum: p.done_checksum,
                        }),
                        out_of_order: false,
                    });
                }
                (Kind::Versioned | Kind::Baseline, State::Pending | State::IgnoredOutOfOrder) => {
                    let Some(v) = m.version.as_deref().and_then(|v| Version::parse(v).ok()) else {
                        continue;
                    };
                    if !in_target(&v) {
                        continue;
                    }
                    if m.state == State::IgnoredOutOfOrder && !opts.out_of_order {
                        continue;
                    }
                    if let Some(file) = self.file_of(m) {
                        steps.push(Step {
                            file,
                            resume: None,
                            out_of_order: m.state == State::IgnoredOutOfOrder,
                        });
                    }
                }
                (Kind::Repeatable, State::Pending | State::Outdated) => {
                    if let Some(file) = self.files.repeatable.get(&m.description) {
                        steps.push(Step {
                            file,
                            resume: None,
                            out_of_order: false,
                        });
                    }
                }
                (Kind::Repeatable, State::Failed) => {
                    if let Some(file) = self.files.repeatable.get(&m.description) {
                        steps.push(Step {
                            file,
                            resume: None,
                            out_of_order: false,
                        });
                    }
                }
                _ => {}
            }
        }
        if opts.target == Target::Next {
            // The first pending version, in order; failed ones resumed are
            // no pending ones.
            let next = steps
                .iter()
                .filter(|s| s.resume.is_none())
                .filter_map(|s| s.file.version())
                .next()
                .cloned();
            if let Some(next) = next {
                steps.retain(|s| s.resume.is_some() || s.file.version().is_none_or(|v| *v <= next));
            }
        }
        // Repeatables run after every versioned migration.
        steps.sort_by_key(|s| s.file.version().is_none());
        Ok(steps)
    }
}

/// Flyway's type of a migration `repair` marked deleted: that of the
/// latest row the `DELETE` row stands for.
fn deleted_type(rows: &[&HistoryRow]) -> String {
    rows.iter()
        .rev()
        .find(|r| r.kind != TYPE_DELETE)
        .map(|r| r.kind.clone())
        .unwrap_or_else(|| TYPE_SQL.to_string())
}

fn from_row(row: &HistoryRow, state: State, kind: Kind) -> MigrationStatus {
    MigrationStatus {
        version: row.version.clone(),
        description: row.description.clone(),
        kind,
        history_type: row.kind.clone(),
        script: row.script.clone(),
        state,
        checksum: row.checksum,
        recorded_checksum: None,
        installed_rank: Some(row.installed_rank),
        installed_by: Some(row.installed_by.clone()),
        applied_at: Some(row.installed_on.clone()),
        execution_time_ms: Some(row.execution_time),
        no_transaction: false,
        phase: None,
        backfill_job: None,
        statements_done: None,
        note: None,
    }
}

fn from_file(file: &MigrationFile, state: State, kind: Kind) -> MigrationStatus {
    MigrationStatus {
        version: file.version().map(|v| v.as_str().to_string()),
        description: file.name.description.clone(),
        kind,
        history_type: TYPE_SQL.to_string(),
        script: file.script.clone(),
        state,
        checksum: Some(file.checksum),
        recorded_checksum: None,
        installed_rank: None,
        installed_by: None,
        applied_at: None,
        execution_time_ms: None,
        no_transaction: crate::apply::no_transaction(file, false),
        phase: file.parsed.directives.phase.map(|p| p.as_str().to_string()),
        backfill_job: file.parsed.directives.backfill.clone(),
        statements_done: None,
        note: None,
    }
}

/// File and row together: the file's identity, the row's record.
fn merged(file: &MigrationFile, row: &HistoryRow, state: State, kind: Kind) -> MigrationStatus {
    let mut s = from_file(file, state, kind);
    s.history_type = row.kind.clone();
    s.installed_rank = Some(row.installed_rank);
    s.installed_by = Some(row.installed_by.clone());
    s.applied_at = Some(row.installed_on.clone());
    s.execution_time_ms = Some(row.execution_time);
    if row.checksum != Some(file.checksum) {
        s.recorded_checksum = row.checksum;
    }
    s
}

fn versioned_status(
    v: &Version,
    file: Option<&MigrationFile>,
    row: Option<&HistoryRow>,
    baseline: Option<&Version>,
    current: Option<&Version>,
    latest_file: Option<&Version>,
    progress: &[Progress],
) -> MigrationStatus {
    match (file, row) {
        (_, Some(row)) if row.kind == TYPE_BASELINE => {
            let mut s = from_row(row, State::Baseline, Kind::Baseline);
            if let Some(f) = file {
                s.note = Some(format!("{} is covered by the baseline", f.script));
            }
            s
        }
        (Some(file), Some(row)) if row.kind == TYPE_DELETE => {
            let mut s = merged(file, row, State::Deleted, Kind::Versioned);
            s.note = Some("version marked deleted by repair; apply never runs this file, give it a new version".into());
            s
        }
        (None, Some(row)) if row.kind == TYPE_DELETE => {
            from_row(row, State::Deleted, Kind::Versioned)
        }
        (None, Some(row)) if is_java_migration(&row.kind) => {
            let mut s = from_row(
                row,
                if row.success {
                    State::Applied
                } else {
                    State::Failed
                },
                Kind::Versioned,
            );
            s.note = Some(format!(
                "a Java-based migration (type {}) that Flyway applied; evolve never runs it again and does not repair it",
                row.kind
            ));
            s
        }
        (file, Some(row)) if !row.success => {
            let mut s = match file {
                Some(f) => merged(f, row, State::Failed, Kind::Versioned),
                None => from_row(row, State::Failed, Kind::Versioned),
            };
            s.statements_done = progress
                .iter()
                .find(|p| p.installed_rank == row.installed_rank)
                .map(|p| p.statements_done);
            if let (Some(done), Some(f)) = (s.statements_done, file) {
                s.note = Some(format!(
                    "stopped after {done} of {}; apply resumes it",
                    crate::apply::count(f.parsed.statements.len(), "statement", "statements")
                ));
            }
            s
        }
        (Some(file), Some(row)) => {
            let checksum_differs = row.checksum != Some(file.checksum);
            let renamed = row.description != file.name.description;
            let state = if checksum_differs || renamed {
                State::Edited
            } else {
                State::Applied
            };
            let mut s = merged(file, row, state, Kind::Versioned);
            if checksum_differs {
                s.note = Some(format!(
                    "checksum {} recorded, {} on disk",
                    row.checksum
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "none".into()),
                    file.checksum
                ));
            } else if renamed {
                s.note = Some(format!(
                    "description {:?} recorded, {:?} on disk",
                    row.description, file.name.description
                ));
            }
            s
        }
        // As in Flyway, a directory without versioned files makes every
        // applied version one of the future.
        (None, Some(row)) if latest_file.is_none_or(|l| v > l) => {
            let mut s = from_row(row, State::Future, Kind::Versioned);
            s.note = Some("above every file's version: applied by a newer set of files".into());
            s
        }
        (None, Some(row)) => from_row(row, State::MissingFile, Kind::Versioned),
        (Some(file), None) => {
            if baseline.is_some_and(|b| v <= b) {
                from_file(file, State::BelowBaseline, Kind::Versioned)
            } else if current.is_some_and(|c| v < c) {
                from_file(file, State::IgnoredOutOfOrder, Kind::Versioned)
            } else {
                from_file(file, State::Pending, Kind::Versioned)
            }
        }
        (None, None) => unreachable!("a version comes from a file or a row"),
    }
}

/// A baseline migration (`B<version>__...`): `bfile` its file, `file` a
/// versioned file of the same version (which it stands for), `row` its
/// `SQL_BASELINE` row when it ran (`None`: it runs now, on a fresh
/// database).
fn baseline_migration_status(
    v: &Version,
    bfile: Option<&MigrationFile>,
    file: Option<&MigrationFile>,
    row: Option<&HistoryRow>,
    latest_file: Option<&Version>,
    progress: &[Progress],
) -> MigrationStatus {
    let mut s = match (bfile, row) {
        (Some(b), None) => from_file(b, State::Pending, Kind::Baseline),
        (Some(b), Some(row)) if !row.success => {
            let mut s = merged(b, row, State::Failed, Kind::Baseline);
            s.statements_done = progress
                .iter()
                .find(|p| p.installed_rank == row.installed_rank)
                .map(|p| p.statements_done);
            s
        }
        (Some(b), Some(row)) => {
            let differs = row.checksum != Some(b.checksum);
            // Flyway's state of a baseline migration that ran: BASELINE.
            let mut s = merged(
                b,
                row,
                if differs {
                    State::Edited
                } else {
                    State::Baseline
                },
                Kind::Baseline,
            );
            if differs {
                s.note = Some(format!(
                    "checksum {} recorded, {} on disk",
                    row.checksum
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "none".into()),
                    b.checksum
                ));
            }
            s
        }
        (None, Some(row)) if !row.success => from_row(row, State::Failed, Kind::Baseline),
        (None, Some(row)) if latest_file.is_none_or(|l| v > l) => {
            from_row(row, State::Future, Kind::Baseline)
        }
        (None, Some(row)) => from_row(row, State::MissingFile, Kind::Baseline),
        (None, None) => unreachable!("a baseline migration comes from a file or a row"),
    };
    s.history_type = TYPE_SQL_BASELINE.to_string();
    if let (Some(f), None) = (file, &s.note) {
        s.note = Some(format!("{} is covered by the baseline migration", f.script));
    }
    s
}

fn repeatable_status(
    description: &str,
    file: Option<&MigrationFile>,
    row: Option<&HistoryRow>,
) -> MigrationStatus {
    match (file, row) {
        (Some(file), None) => from_file(file, State::Pending, Kind::Repeatable),
        // Marked deleted by repair, and the file is back: Flyway runs it
        // again, whatever its checksum.
        (Some(file), Some(row)) if row.kind == TYPE_DELETE => {
            let mut s = from_file(file, State::Pending, Kind::Repeatable);
            s.note =
                Some("marked deleted by repair; its file is back, so apply runs it again".into());
            s
        }
        (Some(file), Some(row)) if !row.success => {
            merged(file, row, State::Failed, Kind::Repeatable)
        }
        (Some(file), Some(row)) => {
            if row.checksum == Some(file.checksum) {
                merged(file, row, State::Applied, Kind::Repeatable)
            } else {
                let mut s = merged(file, row, State::Outdated, Kind::Repeatable);
                s.note = Some("changed since it last ran; apply runs it again".into());
                s
            }
        }
        (None, Some(row)) if row.kind == TYPE_DELETE => {
            from_row(row, State::Deleted, Kind::Repeatable)
        }
        (None, Some(row)) if is_java_migration(&row.kind) => {
            let mut s = from_row(
                row,
                if row.success {
                    State::Applied
                } else {
                    State::Failed
                },
                Kind::Repeatable,
            );
            s.note = Some(format!(
                "a Java-based migration (type {}) that Flyway applied; evolve never runs it again and does not repair it",
                row.kind
            ));
            s
        }
        (None, Some(row)) => from_row(row, State::MissingFile, Kind::Repeatable),
        (None, None) => {
            unreachable!("repeatable {description:?} comes from a file or a row")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).expect("version")
    }

    /// Flyway's targets read as Flyway reads them; evolve once refused
    /// `current`, `next` and `<version>?`.
    #[test]
    fn targets_parse_as_flyway_reads_them() {
        for (text, target) in [
            ("latest", Target::Latest),
            (" LATEST ", Target::Latest),
            ("current", Target::Current),
            ("Current", Target::Current),
            ("next", Target::Next),
            ("next?", Target::Next),
            ("2.1", Target::Version(v("2.1"))),
            ("2.1?", Target::AtMost(v("2.1"))),
        ] {
            assert_eq!(Target::parse(text), Ok(target), "{text}");
        }
        for text in ["", "?", "soon", "2.x", "current version"] {
            assert_eq!(
                Target::parse(text),
                Err(format!(
                    "target {:?} is not a target; give a version (2.1), a version no migration need have (2.1?), latest, current or next",
                    text.trim()
                )),
                "{text}"
            );
        }
        assert_eq!(Target::AtMost(v("2.1")).to_string(), "2.1?");
    }
}
