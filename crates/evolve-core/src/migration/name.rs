//! Flyway-style migration file names.

use super::version::Version;

/// The longest description Flyway's history table stores (`description varchar(200)`).
const MAX_DESCRIPTION_CHARS: usize = 200;
/// The longest file name Flyway's history table stores (`script varchar(1000)`).
const MAX_FILE_NAME_CHARS: usize = 1000;
/// Separates the version (or the `R` prefix) from the description.
const SEPARATOR: &str = "__";
/// The suffix of every migration file.
const SUFFIX: &str = ".sql";

/// What a migration file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MigrationKind {
    /// `V<version>__<description>.sql`: applied once, in version order.
    Versioned(Version),
    /// `R__<description>.sql`: applied after the versioned migrations, and
    /// again whenever its checksum changes.
    Repeatable,
    /// `B<version>__<description>.sql`: Flyway's baseline migration, run on
    /// an empty database instead of the versioned migrations up to its
    /// version (recorded as `SQL_BASELINE`).
    Baseline(Version),
}

impl MigrationKind {
    /// The version of a versioned or baseline migration.
    pub fn version(&self) -> Option<&Version> {
        match self {
            MigrationKind::Versioned(v) | MigrationKind::Baseline(v) => Some(v),
            MigrationKind::Repeatable => None,
        }
    }
}

/// A parsed migration file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationName {
    /// Versioned or repeatable.
    pub kind: MigrationKind,
    /// The text between `__` and `.sql` with each '_' replaced by ' ', kept
    /// verbatim otherwise. It is data: store it with bound parameters only.
    pub description: String,
    /// The file name as given (Flyway's `script` column).
    pub script: String,
}

/// A file name that looks like a migration but cannot be one.
///
/// Messages name the file and say how to rename it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// [`Version::parse`] was given something that is not a version.
    #[error(
        "version {version:?} is not valid: {problem}; write digits separated by '.' or '_', like 1.2 or 2024_01_01"
    )]
    InvalidVersion {
        /// The rejected text.
        version: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A `V` file whose version is not a version.
    #[error(
        "migration file name {file:?} has an invalid version {version:?}: {problem}; name it like V1__add_users.sql or V2024_01_01.1__add_users.sql"
    )]
    BadVersion {
        /// The file name.
        file: String,
        /// The text between `V` and `__`.
        version: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// An `R` file that does not start with `R__`.
    #[error(
        "repeatable migration file name {file:?} does not start with \"R__\" (repeatable migrations have no version); name it like R__refresh_views.sql"
    )]
    RepeatableWithoutSeparator {
        /// The file name.
        file: String,
    },
    /// A `.sql` file whose name starts with none of `V`, `R` and `B`.
    #[error(
        "migration file name {file:?} does not start with V (versioned), R (repeatable) or B (baseline); name it like V1__add_users.sql or R__refresh_views.sql, or move it out of the migrations directory"
    )]
    UnknownPrefix {
        /// The file name.
        file: String,
    },
    /// A description longer than the history table can store.
    #[error(
        "migration file name {file:?} has a description of {chars} characters, more than the {MAX_DESCRIPTION_CHARS} the history table can store; shorten the description"
    )]
    DescriptionTooLong {
        /// The file name.
        file: String,
        /// The description's length in characters.
        chars: usize,
    },
    /// A file name longer than the history table can store.
    #[error(
        "migration file name {} is {chars} characters long, more than the {MAX_FILE_NAME_CHARS} the history table can store; shorten it",
        abbreviate(.file)
    )]
    FileNameTooLong {
        /// The file name.
        file: String,
        /// Its length in characters.
        chars: usize,
    },
}

/// Quotes the start of a long file name for an error message.
fn abbreviate(file: &str) -> String {
    const SHOWN: usize = 60;
    match file.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{:?}...", &file[..end]),
        None => format!("{file:?}"),
    }
}

/// Parses a Flyway-style migration file name.
///
/// Flyway naming: `V<version>__<description>.sql` and `R__<description>.sql`.
/// The version ends at the first `__`; the description is the text between
/// that `__` and `.sql` with '_' replaced by ' ' (Flyway's rule), and `script`
/// is the file name as given. `file_name` is a bare name, not a path.
///
/// `B<version>__<description>.sql` is a baseline migration (Flyway 9+). As
/// in Flyway, the suffix matches in any letter case (`V2__x.SQL`), and a
/// versioned name without `__` has an empty description (`V1.sql`).
///
/// Returns `Ok(None)` for files that are not migrations at all: names that do
/// not end in `.sql` (in any letter case), hidden files (starting with '.'),
/// callbacks, and Flyway's undo files (`U<version>__...`, see
/// [`is_undo_file_name`]), which Flyway Community does not run either. Every
/// other `.sql` name must be a valid migration name: an unknown prefix, a bad
/// version, a description longer than 200 characters or a name longer than
/// 1000 characters is an error, so a misnamed migration is never silently
/// skipped.
pub fn parse_file_name(file_name: &str) -> Result<Option<MigrationName>, NameError> {
    let file = || file_name.to_owned();
    if file_name.starts_with('.') {
        return Ok(None);
    }
    let Some(stem_len) = sql_stem_len(file_name) else {
        return Ok(None);
    };
    let chars = file_name.chars().count();
    if chars > MAX_FILE_NAME_CHARS {
        return Err(NameError::FileNameTooLong {
            file: file(),
            chars,
        });
    }
    // The suffix in any letter case, as Flyway matches it (`V1__x.SQL`).
    let stem = &file_name[..stem_len];

    // Flyway's rule: the version ends at the first separator; without one
    // the whole rest is the version and the description is empty (`V1.sql`).
    let versioned = |rest: &str| {
        let (version, description) = rest.split_once(SEPARATOR).unwrap_or((rest, ""));
        let version = Version::parse(version).map_err(|e| match e {
            NameError::InvalidVersion { version, problem } => NameError::BadVersion {
                file: file(),
                version,
                problem,
            },
            other => other,
        })?;
        Ok::<_, NameError>((version, description.to_owned()))
    };
    let (kind, description) = if let Some(rest) = stem.strip_prefix('V') {
        let (version, description) = versioned(rest)?;
        (MigrationKind::Versioned(version), description)
    } else if let Some(rest) = stem.strip_prefix('B') {
        let (version, description) = versioned(rest)?;
        (MigrationKind::Baseline(version), description)
    } else if let Some(rest) = stem.strip_prefix('R') {
        let Some(description) = rest.strip_prefix(SEPARATOR) else {
            return Err(NameError::RepeatableWithoutSeparator { file: file() });
        };
        (MigrationKind::Repeatable, description.to_owned())
    } else if is_undo_file_name(file_name) {
        // Flyway Community skips undo files, as files it does not
        // recognise; the caller says so (see `is_undo_file_name`).
        return Ok(None);
    } else if callback_event(stem).is_some() {
        return Ok(None);
    } else {
        return Err(NameError::UnknownPrefix { file: file() });
    };

    let description = description.replace('_', " ");
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(NameError::DescriptionTooLong {
            file: file(),
            chars,
        });
    }
    Ok(Some(MigrationName {
        kind,
        description,
        script: file(),
    }))
}

/// Whether `file_name` is one of Flyway's undo migrations,
/// `U<version>[__<description>].sql`: evolve, like Flyway Community, does
/// not run them, and callers say that they are skipped (an undo file is
/// written on purpose, so it is named rather than refused).
pub fn is_undo_file_name(file_name: &str) -> bool {
    let Some(stem_len) = sql_stem_len(file_name) else {
        return false;
    };
    let Some(rest) = file_name[..stem_len].strip_prefix('U') else {
        return false;
    };
    let version = rest.split_once(SEPARATOR).map_or(rest, |(v, _)| v);
    Version::parse(version).is_ok()
}

/// The events of Flyway's SQL callbacks, as its callback file names spell
/// them (`beforeMigrate.sql`, `afterEachMigrate__log.sql`).
pub const CALLBACK_EVENTS: [&str; 48] = [
    "beforeMigrate",
    "beforeEachMigrate",
    "beforeEachMigrateStatement",
    "afterEachMigrateStatement",
    "afterEachMigrateStatementError",
    "afterEachMigrate",
    "afterEachMigrateError",
    "afterMigrate",
    "afterMigrateApplied",
    "afterVersioned",
    "afterMigrateError",
    "afterMigrateOperationFinish",
    "beforeRepeatables",
    "beforeUndo",
    "beforeEachUndo",
    "beforeEachUndoStatement",
    "afterEachUndoStatement",
    "afterEachUndoStatementError",
    "afterEachUndo",
    "afterEachUndoError",
    "afterUndo",
    "afterUndoError",
    "afterUndoOperationFinish",
    "beforeClean",
    "afterClean",
    "afterCleanError",
    "afterCleanOperationFinish",
    "beforeInfo",
    "afterInfo",
    "afterInfoError",
    "afterInfoOperationFinish",
    "beforeValidate",
    "afterValidate",
    "afterValidateError",
    "afterValidateOperationFinish",
    "beforeBaseline",
    "afterBaseline",
    "afterBaselineError",
    "afterBaselineOperationFinish",
    "beforeRepair",
    "afterRepair",
    "afterRepairError",
    "afterRepairOperationFinish",
    "beforeCreateSchema",
    "createSchema",
    "beforeConnect",
    "afterConnect",
    "afterReportGenerated",
];

/// A Flyway SQL callback file name: `<event>.sql` or
/// `<event>__<description>.sql`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackName {
    /// One of [`CALLBACK_EVENTS`].
    pub event: &'static str,
    /// The text after the first `__`, as it is (Flyway orders the callbacks
    /// of one event by it, the one without a description first).
    pub description: Option<String>,
}

/// Parses a Flyway SQL callback file name (a bare name, not a path);
/// `None` when the name is not one.
pub fn parse_callback_name(file_name: &str) -> Option<CallbackName> {
    let stem = &file_name[..sql_stem_len(file_name)?];
    let event = callback_event(stem)?;
    let description = stem
        .split_once(SEPARATOR)
        .map(|(_, description)| description.to_string());
    Some(CallbackName { event, description })
}

/// The callback event a file stem names: the text before the first `__`
/// (or all of it) when it is one of [`CALLBACK_EVENTS`].
fn callback_event(stem: &str) -> Option<&'static str> {
    let id = stem.split_once(SEPARATOR).map_or(stem, |(id, _)| id);
    CALLBACK_EVENTS.iter().copied().find(|e| *e == id)
}

/// The length of `name` without its `.sql` suffix, matched in any letter case;
/// `None` when the name does not end in `.sql`.
fn sql_stem_len(name: &str) -> Option<usize> {
    let stem_len = name.len().checked_sub(SUFFIX.len())?;
    let suffix = name.get(stem_len..)?;
    suffix.eq_ignore_ascii_case(SUFFIX).then_some(stem_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected outcome of parsing a file name.
    enum Expect<'a> {
        /// Not a migration file (`Ok(None)`).
        Skip,
        /// A versioned migration: the version's stored text and the description.
        V(&'a str, &'a str),
        /// A repeatable migration with this description.
        R(&'a str),
        /// An error with exactly this message.
        Fails(&'a str),
    }
    use Expect::*;

    fn check(file_name: &str, expected: Expect<'_>) {
        let actual = parse_file_name(file_name);
        match (actual, expected) {
            (Ok(None), Skip) => {}
            (Ok(Some(m)), V(version, description)) => {
                let MigrationKind::Versioned(v) = &m.kind else {
                    panic!("{file_name:?}: expected versioned, got {m:?}");
                };
                assert_eq!(v.as_str(), version, "{file_name:?}");
                assert_eq!(m.description, description, "{file_name:?}");
                assert_eq!(m.script, file_name);
            }
            (Ok(Some(m)), R(description)) => {
                assert_eq!(m.kind, MigrationKind::Repeatable, "{file_name:?}");
                assert_eq!(m.description, description, "{file_name:?}");
                assert_eq!(m.script, file_name);
            }
            (Err(e), Fails(message)) => assert_eq!(e.to_string(), message, "{file_name:?}"),
            (actual, _) => panic!("{file_name:?}: unexpected {actual:?}"),
        }
    }

    #[test]
    fn versioned_names() {
        check("V1__add_users.sql", V("1", "add users"));
        check("V1.1__add_users.sql", V("1.1", "add users"));
        check("V1_1__add_users.sql", V("1.1", "add users"));
        check("V2024_01_01.3__x.sql", V("2024.01.01.3", "x"));
        check("V001__init.sql", V("001", "init"));
        check("V41__add_postal_code.sql", V("41", "add postal code"));
        // The version ends at the first "__"; the rest is description.
        check("V1__a__b.sql", V("1", "a  b"));
        check("V1___lead.sql", V("1", " lead"));
        check("V1__.sql", V("1", ""));
        check("V1__Grüße_日本.sql", V("1", "Grüße 日本"));
    }

    #[test]
    fn descriptions_are_kept_verbatim_as_data() {
        check(
            "V3__x'; drop table t; --.sql",
            V("3", "x'; drop table t; --"),
        );
        check("R__\"; DROP TABLE x; --.sql", R("\"; DROP TABLE x; --"));
        check("V4__a%b\\c$d.sql", V("4", "a%b\\c$d"));
    }

    #[test]
    fn repeatable_names() {
        check("R__refresh_views.sql", R("refresh views"));
        check("R__.sql", R(""));
        check("R___x.sql", R(" x"));
    }

    #[test]
    fn non_migrations_are_skipped() {
        check("README.md", Skip);
        check("V1__x.sql.bak", Skip);
        check("V1__x.sql~", Skip);
        check("V1__x.txt", Skip);
        check("", Skip);
        check(".sql", Skip);
        check(".V1__x.sql", Skip);
        check("._V1__x.sql", Skip);
        check(".#V1__x.sql", Skip);
        check("sql", Skip);
    }

    #[test]
    fn misnamed_migrations_are_errors() {
        check(
            "V1_add.sql",
            Fails(
                "migration file name \"V1_add.sql\" has an invalid version \"1_add\": it contains something other than digits, '.' and '_'; name it like V1__add_users.sql or V2024_01_01.1__add_users.sql",
            ),
        );
        // Flyway's names: no separator, no description.
        check("V1.sql", V("1", ""));
        check("V1.2.sql", V("1.2", ""));
        check(
            "V__x.sql",
            Fails(
                "migration file name \"V__x.sql\" has an invalid version \"\": it is empty; name it like V1__add_users.sql or V2024_01_01.1__add_users.sql",
            ),
        );
        check(
            "V1.a__x.sql",
            Fails(
                "migration file name \"V1.a__x.sql\" has an invalid version \"1.a\": it contains something other than digits, '.' and '_'; name it like V1__add_users.sql or V2024_01_01.1__add_users.sql",
            ),
        );
        check(
            "V1..2__x.sql",
            Fails(
                "migration file name \"V1..2__x.sql\" has an invalid version \"1..2\": it has an empty part (two separators in a row, or one at an end); name it like V1__add_users.sql or V2024_01_01.1__add_users.sql",
            ),
        );
        check(
            "V-1__x.sql",
            Fails(
                "migration file name \"V-1__x.sql\" has an invalid version \"-1\": it contains something other than digits, '.' and '_'; name it like V1__add_users.sql or V2024_01_01.1__add_users.sql",
            ),
        );
        // Undo files are skipped (the caller warns), as Flyway Community
        // skips them.
        check("U1__drop_users.sql", Skip);
        check("U1.sql", Skip);
        assert!(is_undo_file_name("U1.1__drop_users.sql"));
        assert!(!is_undo_file_name("Users.sql"));
        check(
            "Users.sql",
            Fails(
                "migration file name \"Users.sql\" does not start with V (versioned), R (repeatable) or B (baseline); name it like V1__add_users.sql or R__refresh_views.sql, or move it out of the migrations directory",
            ),
        );
        check(
            "R1__x.sql",
            Fails(
                "repeatable migration file name \"R1__x.sql\" does not start with \"R__\" (repeatable migrations have no version); name it like R__refresh_views.sql",
            ),
        );
        check(
            "v1__x.sql",
            Fails(
                "migration file name \"v1__x.sql\" does not start with V (versioned), R (repeatable) or B (baseline); name it like V1__add_users.sql or R__refresh_views.sql, or move it out of the migrations directory",
            ),
        );
        check(
            "001_init.sql",
            Fails(
                "migration file name \"001_init.sql\" does not start with V (versioned), R (repeatable) or B (baseline); name it like V1__add_users.sql or R__refresh_views.sql, or move it out of the migrations directory",
            ),
        );
        // The suffix in any letter case, as Flyway reads it.
        check("V1__x.SQL", V("1", "x"));
        check("R__x.Sql", R("x"));
        check("V1__line\nbreak.sql", V("1", "line\nbreak"));
    }

    #[test]
    fn callbacks_are_not_migrations() {
        check("beforeMigrate.sql", Skip);
        check("afterEachMigrate__log_it.sql", Skip);
        check("beforeInfo__.sql", Skip);
        check(
            "beforeMigrat.sql",
            Fails(
                "migration file name \"beforeMigrat.sql\" does not start with V (versioned), R (repeatable) or B (baseline); name it like V1__add_users.sql or R__refresh_views.sql, or move it out of the migrations directory",
            ),
        );
        assert_eq!(
            parse_callback_name("afterMigrate__b_c.sql"),
            Some(CallbackName {
                event: "afterMigrate",
                description: Some("b_c".into())
            })
        );
        assert_eq!(
            parse_callback_name("beforeValidate.sql"),
            Some(CallbackName {
                event: "beforeValidate",
                description: None
            })
        );
        assert_eq!(
            parse_callback_name("beforeValidate.SQL").map(|c| c.event),
            Some("beforeValidate")
        );
        assert_eq!(parse_callback_name("beforevalidate.sql"), None);
        assert_eq!(parse_callback_name("V1__x.sql"), None);
    }

    #[test]
    fn length_limits() {
        let ok = format!("V1__{}.sql", "d".repeat(200));
        check(&ok, V("1", &"d".repeat(200)));
        // Characters, not bytes: 200 two-byte characters fit.
        let ok = format!("V1__{}.sql", "é".repeat(200));
        check(&ok, V("1", &"é".repeat(200)));
        let long = format!("V1__{}.sql", "d".repeat(201));
        check(
            &long,
            Fails(&format!(
                "migration file name {long:?} has a description of 201 characters, more than the 200 the history table can store; shorten the description"
            )),
        );
        let huge = format!("V{}__x.sql", "1".repeat(993));
        assert_eq!(huge.chars().count(), 1001);
        check(
            &huge,
            Fails(&format!(
                "migration file name \"V{}\"... is 1001 characters long, more than the 1000 the history table can store; shorten it",
                "1".repeat(59)
            )),
        );
        let max = format!("V{}__x.sql", "1".repeat(992));
        assert_eq!(max.chars().count(), 1000);
        check(&max, V(&"1".repeat(992), "x"));
    }

    #[test]
    fn versions_from_names_order_numerically() {
        let version = |name: &str| match parse_file_name(name) {
            Ok(Some(MigrationName {
                kind: MigrationKind::Versioned(v),
                ..
            })) => v,
            other => panic!("{name}: {other:?}"),
        };
        assert!(version("V1.9__a.sql") < version("V1.10__a.sql"));
        assert!(version("V1.10__a.sql") < version("V2__a.sql"));
        assert_eq!(version("V1__a.sql"), version("V1.0__b.sql"));
        assert_eq!(version("V1__a.sql"), version("V1_0_0__b.sql"));
    }
}
