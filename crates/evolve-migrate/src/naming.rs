//! Which files are migrations: Flyway's naming settings
//! (`sqlMigrationPrefix`, `repeatableSqlMigrationPrefix`,
//! `sqlMigrationSeparator`, `sqlMigrationSuffixes`).
//!
//! Under Flyway's defaults (`V`, `R`, `__`, `.sql`) names are read by
//! `evolve_core`'s parser, the one `evolve lint` shares. Other settings are
//! read as Flyway's resource name parser reads them: the suffix is matched
//! first (the first of the suffixes that ends the name), then the longest
//! prefix among the versioned and repeatable prefixes and the callback
//! events, then the version ends at the first separator. evolve is stricter
//! than Flyway in one way, as it is under the defaults: a file that ends in
//! one of the suffixes but is no valid migration or callback name is an
//! error that says how to rename it, never skipped in silence.

use evolve_core::migration::{
    CALLBACK_EVENTS, CallbackName, MigrationKind, MigrationName, NameError, Version,
    is_undo_file_name, parse_callback_name, parse_file_name,
};

/// The longest description Flyway's history table stores.
const MAX_DESCRIPTION_CHARS: usize = 200;
/// The longest file name Flyway's history table stores.
const MAX_FILE_NAME_CHARS: usize = 1000;

/// Flyway's naming settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naming {
    /// `sqlMigrationPrefix` (`V`).
    pub versioned_prefix: String,
    /// `repeatableSqlMigrationPrefix` (`R`).
    pub repeatable_prefix: String,
    /// `baselineMigrationPrefix` (`B`).
    pub baseline_prefix: String,
    /// `sqlMigrationSeparator` (`__`).
    pub separator: String,
    /// `sqlMigrationSuffixes` (`.sql`), in the order they are tried.
    pub suffixes: Vec<String>,
}

impl Default for Naming {
    fn default() -> Self {
        Naming {
            versioned_prefix: "V".into(),
            repeatable_prefix: "R".into(),
            baseline_prefix: "B".into(),
            separator: "__".into(),
            suffixes: vec![".sql".into()],
        }
    }
}

/// What a file name names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Named {
    Migration(MigrationName),
    Callback(CallbackName),
    /// One of Flyway's undo migrations (`U<version>__...`), which evolve
    /// does not run (nor does Flyway Community): the caller warns and goes
    /// on.
    Undo,
}

impl Naming {
    /// Flyway's defaults, read by `evolve_core`'s parser.
    pub fn is_default(&self) -> bool {
        *self == Naming::default()
    }

    /// Whether the walk of a migrations directory reads `name`: it ends in
    /// one of the suffixes, in any letter case (a wrong case is reported by
    /// [`Naming::parse`]).
    pub fn is_candidate(&self, name: &[u8]) -> bool {
        self.suffixes.iter().any(|s| {
            let s = s.as_bytes();
            name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s)
        })
    }

    /// A name for a new versioned migration.
    pub fn versioned_file_name(&self, version: &str, description: &str) -> String {
        format!(
            "{}{version}{}{}{}",
            self.versioned_prefix,
            self.separator,
            description.replace(' ', "_"),
            self.suffixes.first().map(String::as_str).unwrap_or(".sql")
        )
    }

    /// Parses a bare file name: `Ok(None)` for a file that is no migration
    /// (hidden, or without one of the suffixes); an error, one line naming
    /// the file and how to rename it, for a misnamed one.
    pub fn parse(&self, file_name: &str) -> Result<Option<Named>, String> {
        if self.is_default() {
            if let Some(c) = parse_callback_name(file_name) {
                return Ok(Some(Named::Callback(c)));
            }
            if is_undo_file_name(file_name) {
                return Ok(Some(Named::Undo));
            }
            return parse_file_name(file_name)
                .map(|m| m.map(Named::Migration))
                .map_err(|e| e.to_string());
        }
        if file_name.starts_with('.') {
            return Ok(None);
        }
        let Some(suffix) = self.suffixes.iter().find(|s| {
            file_name.len() >= s.len()
                && file_name.is_char_boundary(file_name.len() - s.len())
                && file_name[file_name.len() - s.len()..].eq_ignore_ascii_case(s)
        }) else {
            return Ok(None);
        };
        // The suffix in any letter case, as Flyway matches it.
        let stem = &file_name[..file_name.len() - suffix.len()];
        let chars = file_name.chars().count();
        if chars > MAX_FILE_NAME_CHARS {
            return Err(format!(
                "migration file name {:?}... is {chars} characters long, more than the {MAX_FILE_NAME_CHARS} the history table can store; shorten it",
                file_name.chars().take(60).collect::<String>()
            ));
        }
        let sep = self.separator.as_str();
        let example = format!(
            "{}1{sep}add_users{suffix} or {}{sep}refresh_views{suffix}",
            self.versioned_prefix, self.repeatable_prefix
        );
        let unknown = || {
            format!(
                "migration file name {file_name:?} does not start with {:?} (versioned) or {:?} (repeatable), the prefixes the Flyway configuration sets; name it like {example}, or move it out of the migrations directory",
                self.versioned_prefix, self.repeatable_prefix
            )
        };
        let Some((prefix, kind)) = self.prefix_of(stem) else {
            let undo = stem.strip_prefix('U').is_some_and(|rest| {
                Version::parse(rest.split_once(sep).map_or(rest, |(v, _)| v)).is_ok()
            });
            return if undo {
                Ok(Some(Named::Undo))
            } else {
                Err(unknown())
            };
        };
        let rest = &stem[prefix.len()..];
        let (before, description) = match rest.find(sep) {
            Some(at) => (&rest[..at], Some(&rest[at + sep.len()..])),
            None => (rest, None),
        };
        let kind = match kind {
            Prefix::Callback(event) => {
                if !before.is_empty() {
                    return Err(unknown());
                }
                return Ok(Some(Named::Callback(CallbackName {
                    event,
                    description: description.map(str::to_string),
                })));
            }
            Prefix::Repeatable => {
                if !before.is_empty() || description.is_none() {
                    return Err(format!(
                        "repeatable migration file name {file_name:?} does not start with {:?} (repeatable migrations have no version); name it like {}{sep}refresh_views{suffix}",
                        format!("{prefix}{sep}"),
                        self.repeatable_prefix
                    ));
                }
                MigrationKind::Repeatable
            }
            Prefix::Versioned | Prefix::Baseline => {
                let version = Version::parse(before).map_err(|e| {
                    let problem = match e {
                        NameError::InvalidVersion { problem, .. } => problem.to_string(),
                        other => other.to_string(),
                    };
                    format!(
                        "migration file name {file_name:?} has an invalid version {before:?}: {problem}; name it like {}1{sep}add_users{suffix} or {}2024_01_01.1{sep}add_users{suffix}",
                        self.versioned_prefix, self.versioned_prefix
                    )
                })?;
                if matches!(kind, Prefix::Baseline) {
                    MigrationKind::Baseline(version)
                } else {
                    MigrationKind::Versioned(version)
                }
            }
        };
        let description = description.unwrap_or_default().replace('_', " ");
        let chars = description.chars().count();
        if chars > MAX_DESCRIPTION_CHARS {
            return Err(format!(
                "migration file name {file_name:?} has a description of {chars} characters, more than the {MAX_DESCRIPTION_CHARS} the history table can store; shorten the description"
            ));
        }
        Ok(Some(Named::Migration(MigrationName {
            kind,
            description,
            script: file_name.to_string(),
        })))
    }

    /// The longest of the prefixes `stem` starts with, as Flyway picks it
    /// (ties: versioned, then repeatable, then the callback events in
    /// order).
    fn prefix_of<'a>(&'a self, stem: &str) -> Option<(&'a str, Prefix)> {
        let mut prefixes: Vec<(&str, Prefix)> = vec![
            (self.versioned_prefix.as_str(), Prefix::Versioned),
            (self.repeatable_prefix.as_str(), Prefix::Repeatable),
            (self.baseline_prefix.as_str(), Prefix::Baseline),
        ];
        prefixes.extend(CALLBACK_EVENTS.iter().map(|e| (*e, Prefix::Callback(e))));
        // Stable: ties keep the order above.
        prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        prefixes.into_iter().find(|(p, _)| stem.starts_with(p))
    }
}

#[derive(Clone, Copy, Debug)]
enum Prefix {
    Versioned,
    Repeatable,
    Baseline,
    Callback(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn custom() -> Naming {
        Naming {
            versioned_prefix: "M".into(),
            repeatable_prefix: "Rep".into(),
            baseline_prefix: "B".into(),
            separator: "-".into(),
            suffixes: vec![".pgsql".into(), ".ddl".into()],
        }
    }

    fn check(naming: &Naming, name: &str, expected: &str) {
        let got = match naming.parse(name) {
            Ok(None) => "skip".to_string(),
            Ok(Some(Named::Migration(m))) => match m.kind {
                MigrationKind::Versioned(v) => format!("V {} {:?}", v.as_str(), m.description),
                MigrationKind::Repeatable => format!("R {:?}", m.description),
                MigrationKind::Baseline(v) => format!("B {} {:?}", v.as_str(), m.description),
            },
            Ok(Some(Named::Undo)) => "undo".to_string(),
            Ok(Some(Named::Callback(c))) => format!("callback {} {:?}", c.event, c.description),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expected, "{name}");
    }

    #[test]
    fn custom_names_are_read_as_flyway_reads_them() {
        let n = custom();
        check(&n, "M1.2-add_users.pgsql", "V 1.2 \"add users\"");
        check(&n, "M2-x-y.ddl", "V 2 \"x-y\"");
        check(&n, "Rep-views.pgsql", "R \"views\"");
        check(&n, "afterMigrate.pgsql", "callback afterMigrate None");
        check(
            &n,
            "beforeEachMigrate-log_it.ddl",
            "callback beforeEachMigrate Some(\"log_it\")",
        );
        // Not one of the suffixes: not a migration under this naming.
        check(&n, "V1__old.sql", "skip");
        check(&n, "M1-x.pgsql~", "skip");
        check(&n, ".M1-x.pgsql", "skip");
        // Suffixes match in any letter case, as in Flyway.
        check(&n, "M1-x.PGSQL", "V 1 \"x\"");
        check(&n, "B3-base.pgsql", "B 3 \"base\"");
        check(&n, "U3-undo.pgsql", "undo");
        check(
            &n,
            "V1-x.pgsql",
            "error: migration file name \"V1-x.pgsql\" does not start with \"M\" (versioned) or \"Rep\" (repeatable), the prefixes the Flyway configuration sets; name it like M1-add_users.pgsql or Rep-refresh_views.pgsql, or move it out of the migrations directory",
        );
        // No separator: the rest is the version, the description empty.
        check(&n, "M1.pgsql", "V 1 \"\"");
        check(
            &n,
            "Rep1-x.pgsql",
            "error: repeatable migration file name \"Rep1-x.pgsql\" does not start with \"Rep-\" (repeatable migrations have no version); name it like Rep-refresh_views.pgsql",
        );
        assert!(
            n.parse("Ma-x.pgsql")
                .unwrap_err()
                .starts_with("migration file name \"Ma-x.pgsql\" has an invalid version \"a\": ")
        );
        assert!(n.is_candidate(b"M1-x.PgSql"));
        assert!(!n.is_candidate(b"M1-x.sql"));
        assert_eq!(
            n.versioned_file_name("3", "add postal code"),
            "M3-add_postal_code.pgsql"
        );
    }

    #[test]
    fn the_longest_prefix_wins() {
        // A versioned prefix that callbacks and the repeatable prefix start
        // with: the longer one is picked, as Flyway picks it.
        let n = Naming {
            versioned_prefix: "a".into(),
            repeatable_prefix: "ab".into(),
            ..Naming::default()
        };
        check(&n, "afterMigrate.sql", "callback afterMigrate None");
        check(&n, "ab__x.sql", "R \"x\"");
        check(&n, "a1__x.sql", "V 1 \"x\"");
    }

    #[test]
    fn defaults_are_evolve_cores() {
        let n = Naming::default();
        check(&n, "V1__add_users.sql", "V 1 \"add users\"");
        check(&n, "beforeMigrate.sql", "callback beforeMigrate None");
        check(&n, "README.md", "skip");
        check(&n, "U1__undo.sql", "undo");
        check(&n, "B2__base.sql", "B 2 \"base\"");
        check(&n, "V1.SQL", "V 1 \"\"");
    }
}
