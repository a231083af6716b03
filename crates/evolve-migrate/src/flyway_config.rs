//! Flyway's configuration: `flyway.conf` (Java properties), `flyway.toml`
//! and the `FLYWAY_*` environment variables, read into the settings evolve
//! applies. A key evolve does not apply is named in a warning, never
//! dropped in silence; a key Flyway refuses (a misspelt one) is an error,
//! as Flyway refuses the whole configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The Flyway settings evolve applies; `None` where the configuration is
/// silent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlywayConfig {
    /// `url` (JDBC) with `user` and `password`, as a `postgres://` URL.
    pub database_url: Option<String>,
    /// Why `url` cannot be used (a JDBC parameter without a libpq
    /// equivalent): the caller refuses the run when it would connect with
    /// it, naming where it came from.
    pub database_url_error: Option<String>,
    /// Where `url` came from (the configuration file, or `FLYWAY_URL`),
    /// for messages; set by the caller, which knows.
    pub url_source: Option<String>,
    /// The first `filesystem:` location.
    pub dir: Option<PathBuf>,
    /// `table`, in `defaultSchema` (else the first of `schemas`).
    pub history_schema: Option<String>,
    pub history_table: Option<String>,
    /// `schemas`, as listed.
    pub schemas: Vec<String>,
    /// `defaultSchema`, else the first of `schemas`: Flyway's default
    /// schema, first on the search_path of migrations and callbacks.
    pub default_schema: Option<String>,
    /// `createSchemas`: create the missing `schemas` (default true).
    pub create_schemas: Option<bool>,
    pub placeholders: BTreeMap<String, String>,
    pub placeholder_prefix: Option<String>,
    pub placeholder_suffix: Option<String>,
    pub placeholder_replacement: Option<bool>,
    pub target: Option<String>,
    pub out_of_order: Option<bool>,
    pub baseline_version: Option<String>,
    pub baseline_description: Option<String>,
    pub installed_by: Option<String>,
    pub group: Option<bool>,
    pub mixed: Option<bool>,
    pub baseline_on_migrate: Option<bool>,
    pub validate_on_migrate: Option<bool>,
    /// `failOnMissingLocations`: a location that does not exist is an
    /// error (true) or read as empty with a warning (false, the default).
    pub fail_on_missing_locations: Option<bool>,
    /// `executeInTransaction`: false runs every migration and callback
    /// outside a transaction, unless its script configuration says
    /// otherwise.
    pub execute_in_transaction: Option<bool>,
    /// `initSql`: run on every connection.
    pub init_sql: Option<String>,
    pub connect_retries: Option<u32>,
    /// `connectRetriesInterval`, in seconds.
    pub connect_retries_interval: Option<u32>,
    /// `lockRetryCount`; negative: without limit.
    pub lock_retry_count: Option<i64>,
    pub sql_migration_prefix: Option<String>,
    pub repeatable_sql_migration_prefix: Option<String>,
    pub sql_migration_separator: Option<String>,
    pub sql_migration_suffixes: Option<Vec<String>>,
    pub baseline_migration_prefix: Option<String>,
    /// `ignoreMigrationPatterns`: the states `validate` (and `apply`'s
    /// check) accept, replacing Flyway's default `*:future`.
    pub ignore_patterns: Option<crate::IgnorePatterns>,
    /// `environment`: the `[environments.<name>]` of a flyway.toml that
    /// applies, and the value of `${flyway:environment}` (`default` when
    /// unset).
    pub environment: Option<String>,
    /// `pipeline` (evolve's own key, outside `flyway.`): the admin API
    /// of the pipeline `apply` coordinates with, as `--pipeline` gives it.
    pub pipeline: Option<String>,
    /// Keys evolve does not apply, each with why: one warning per key.
    pub warnings: Vec<String>,
    /// Settings Flyway refuses (a key it does not know, an
    /// `ignoreMigrationPatterns` entry that is not a pattern,
    /// `flyway.environment` in a .conf file) or that evolve
    /// cannot honour as Flyway would (a `FLYWAY_CONFIG_FILE_ENCODING` other
    /// than UTF-8), each with the way out: the caller refuses the run,
    /// naming the first, before anything is applied.
    pub errors: Vec<String>,
}

/// A configuration file evolve cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ConfigError {
    pub line: usize,
    pub reason: String,
}

/// `flyway.conf`, read as Flyway reads it, with `java.util.Properties`
/// (backslashes taken literally, but a trailing `\` continues the value
/// on the next line): `#` and `!` comments; a key ends at the first `=`,
/// `:`, space or tab, and the value follows that and at most one `=` or
/// `:` after it, so `flyway.url jdbc:postgresql://h/db` and
/// `flyway.url: jdbc:...` say what `flyway.url=jdbc:...` does, and a line
/// that is only a key gives it an empty value.
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    const BLANK: [char; 3] = [' ', '\t', '\x0c'];
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start_matches(BLANK);
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let mut logical = trimmed.to_string();
        while logical.ends_with('\\') && !logical.ends_with("\\\\") {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start_matches(BLANK)),
                None => break,
            }
        }
        let end = logical
            .find(|c: char| c == '=' || c == ':' || BLANK.contains(&c))
            .unwrap_or(logical.len());
        let (key, rest) = logical.split_at(end);
        let rest = rest.trim_start_matches(BLANK);
        let rest = rest
            .strip_prefix('=')
            .or_else(|| rest.strip_prefix(':'))
            .unwrap_or(rest);
        // Flyway's .conf files have no environments: it refuses the key.
        let key = if key == "flyway.environment" {
            CONF_ENVIRONMENT
        } else {
            key
        };
        out.push((key.to_string(), rest.trim().to_string()));
    }
    out
}

/// The key [`parse_conf`] gives `flyway.environment`, which Flyway refuses
/// in a `.conf` file ("Unknown configuration property"): environments are
/// a flyway.toml's. [`FlywayConfig::from_pairs`] makes it an error.
pub const CONF_ENVIRONMENT: &str = "conf:flyway.environment";

/// Why `flyway.environment=<value>` in a `.conf` file stops the run, and
/// the way out (the caller puts the file's name before it).
pub fn conf_environment_error(value: &str) -> String {
    format!(
        "flyway.environment={value} in a .conf file: Flyway refuses it (\"Unknown configuration property: flyway.environment\"), as environments exist only in flyway.toml; remove the line, or move the configuration to a flyway.toml with [flyway] environment = \"{value}\" and an [environments.{value}] table"
    )
}

/// Flyway's expansion of environment variables in a `flyway.conf`: every
/// `${NAME}` (`NAME` of letters, digits and `_`) in the file's text is
/// replaced by the variable's value before the properties are read, as
/// Flyway's `ConfigUtils` does. An unset variable reads as empty, as in
/// Flyway, and is named in a warning (with its line), so that an empty
/// value never passes unnoticed. `lookup` reads the environment.
pub fn expand_conf_env(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut warnings = Vec::new();
    let mut rest = text;
    let mut consumed = 0;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if name_len == 0 || !after[name_len..].starts_with('}') {
            out.push_str(&rest[..at + 2]);
            consumed += at + 2;
            rest = after;
            continue;
        }
        let name = &after[..name_len];
        out.push_str(&rest[..at]);
        match lookup(name) {
            Some(value) => out.push_str(&value),
            None => {
                let line = 1 + text[..consumed + at].matches('\n').count();
                warnings.push(format!(
                    "line {line}: environment variable {name} is not set, so ${{{name}}} reads as empty, as Flyway reads it; set {name}"
                ));
            }
        }
        let used = at + 2 + name_len + 1;
        consumed += used;
        rest = &rest[used..];
    }
    out.push_str(rest);
    (out, warnings)
}

/// Flyway's property resolvers in a `flyway.toml` value: `${env.NAME}` is
/// the environment variable `NAME` (unset: an error, as in Flyway),
/// `$${...}` stands for `${...}` as written, and a value that is all
/// `!{...}` is taken verbatim. Other resolvers (`${vault.x}`,
/// `${localSecret.x}`, ...) are refused: evolve cannot resolve them, and
/// using the text as it is would connect or migrate with the wrong value.
fn resolve_toml_value(
    key: &str,
    value: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let trimmed = value.trim();
    if trimmed.len() >= 3 && trimmed.starts_with("!{") && trimmed.ends_with('}') {
        return Ok(trimmed[2..trimmed.len() - 1].to_string());
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        let escaped = at > 0 && rest[..at].ends_with('$');
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            break;
        };
        let inner = &after[..end];
        let Some((resolver, name)) = inner.split_once('.') else {
            out.push_str(&rest[..at + 2]);
            rest = after;
            continue;
        };
        if escaped {
            out.push_str(&rest[..at - 1]);
            out.push_str(&rest[at..at + 2 + end + 1]);
        } else {
            out.push_str(&rest[..at]);
            let name = name.trim();
            if !resolver.trim().eq_ignore_ascii_case("env") {
                return Err(format!(
                    "{key} uses resolver {}, which evolve does not have (it resolves ${{env.NAME}} only); put the value in the file, or pass it with a FLYWAY_* variable or a flag",
                    resolver.trim()
                ));
            }
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    return Err(format!(
                        "{key} reads environment variable {name}, which is not set (Flyway refuses it too); set {name}"
                    ));
                }
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The Flyway configuration files to read, in order: a later file's
/// settings override an earlier one's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigFiles {
    pub files: Vec<PathBuf>,
    /// Files named but not read, each with why.
    pub warnings: Vec<String>,
}

fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// Which configuration files to read, as Flyway's command line picks them
/// (its configuration precedence): `explicit` is `--flyway-config`
/// (Flyway's `-configFiles`), `listed` the value of `FLYWAY_CONFIG_FILES`
/// (comma-separated), `defaults` the files read when they exist, lowest
/// precedence first. Flyway reads files of one kind: those of `explicit`,
/// else those `listed` (naming both kinds there is refused, as Flyway
/// refuses it), else `.toml` when a default one exists, else `.conf`. The
/// default files of that kind come first, then the listed ones, then
/// `explicit`, which adds to the default files as Flyway's `-configFiles`
/// does (its settings override theirs); a file of the other kind, listed
/// or a default one that exists, is named in a warning, not read (Flyway
/// ignores it).
/// Whether a listed file exists is the reader's to find: one that does
/// not is an error there.
pub fn config_files(
    explicit: Option<&Path>,
    listed: Option<&str>,
    defaults: &[PathBuf],
    exists: &dyn Fn(&Path) -> bool,
) -> Result<ConfigFiles, String> {
    let listed: Vec<PathBuf> = listed
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(PathBuf::from)
        .collect();
    let kind_of = |toml: bool| if toml { ".toml" } else { ".conf" };
    let mut out = ConfigFiles::default();
    let toml = match explicit {
        Some(e) => is_toml(e),
        None => {
            let (tomls, confs): (Vec<&PathBuf>, Vec<&PathBuf>) =
                listed.iter().partition(|p| is_toml(p));
            if !tomls.is_empty() && !confs.is_empty() {
                let names = |l: &[&PathBuf]| {
                    l.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(format!(
                    "FLYWAY_CONFIG_FILES names both .toml files ({}) and .conf files ({}), which Flyway refuses too (\"Using both TOML configuration and CONF configuration is not supported\"); name files of one kind",
                    names(&tomls),
                    names(&confs)
                ));
            }
            if listed.is_empty() {
                defaults.iter().any(|d| is_toml(d) && exists(d))
            } else {
                !tomls.is_empty()
            }
        }
    };
    // The default files are read under --flyway-config too: Flyway's
    // -configFiles adds to them, it does not replace them.
    for d in defaults
        .iter()
        .filter(|d| exists(d) && explicit != Some(d.as_path()))
    {
        if is_toml(d) == toml {
            out.files.push(d.clone());
        } else {
            out.warnings.push(format!(
                "{} is not read: Flyway reads configuration files of one kind, here the {} ones, and ignores it too; move its settings into a {} file",
                d.display(),
                kind_of(toml),
                kind_of(toml)
            ));
        }
    }
    for file in listed {
        if is_toml(&file) == toml {
            out.files.push(file);
        } else {
            out.warnings.push(format!(
                "FLYWAY_CONFIG_FILES names {}, a {} file, which is not read beside the {} file --flyway-config names (Flyway reads configuration files of one kind, and ignores it too); convert it, or name it with --flyway-config",
                file.display(),
                kind_of(!toml),
                kind_of(toml)
            ));
        }
    }
    out.files.extend(explicit.map(Path::to_path_buf));
    Ok(out)
}

/// The prefix [`parse_toml_in`] gives the keys of the current environment's
/// `[environments.<name>.flyway]` table: [`FlywayConfig::from_pairs`]
/// applies them over every `flyway.*` setting of the files and of the
/// `FLYWAY_*` variables, as Flyway prefers an environment's `flyway`
/// settings to `[flyway]`'s (which the `FLYWAY_*` variables set).
pub const ENVIRONMENT_FLYWAY: &str = "environment:flyway.";

/// The settings an environment's `flyway` table holds in Flyway 13.12.1
/// (the fields of its `FlywayEnvironmentModel`); any other key there (but
/// a family of [`FLYWAY_KEY_FAMILIES`]) is refused, as Flyway refuses it
/// ("Unknown: 'environments.staging.flyway.schemas'").
const ENVIRONMENT_FLYWAY_KEYS: [&str; 52] = [
    "reportFilename",
    "detectEncoding",
    "encoding",
    "placeholderPrefix",
    "placeholderSuffix",
    "placeholderSeparator",
    "scriptPlaceholderPrefix",
    "scriptPlaceholderSuffix",
    "powershellExecutable",
    "sqlMigrationPrefix",
    "executeInTransaction",
    "repeatableSqlMigrationPrefix",
    "sqlMigrationSeparator",
    "sqlMigrationSuffixes",
    "cleanDisabled",
    "communityDBSupportEnabled",
    "locations",
    "callbackLocations",
    "jarDirs",
    "table",
    "tablespace",
    "target",
    "failOnMissingTarget",
    "placeholderReplacement",
    "ignoreMigrationPatterns",
    "validateMigrationNaming",
    "validateOnMigrate",
    "baselineVersion",
    "baselineDescription",
    "baselineOnMigrate",
    "outOfOrder",
    "skipExecutingMigrations",
    "callbacks",
    "skipDefaultCallbacks",
    "migrationResolvers",
    "skipDefaultResolvers",
    "mixed",
    "group",
    "installedBy",
    "createSchemas",
    "errorOverrides",
    "dryRunOutput",
    "stream",
    "batch",
    "outputQueryResults",
    "lockRetryCount",
    "kerberosConfigFile",
    "failOnMissingLocations",
    "loggers",
    "placeholders",
    "defaultSchema",
    "reportEnabled",
];

/// The settings Flyway 13.12.1 accepts in a flyway.conf (after `flyway.`;
/// also the names its `FLYWAY_*` variables stand for), any other one being
/// refused ("Unknown configuration property: flyway.loactions"). From the
/// jars: the keys `ClassicConfiguration.configure(Map)` of
/// flyway-core-13.12.1.jar takes (its `ConfigUtils` constants), those
/// flyway-commandline-13.12.1.jar's `LegacyConfigurationManager` takes
/// (`configFiles`, `configFileEncoding`), `configurations` (the name
/// `ConfigUtils.convertKey` gives `FLYWAY_CONFIGURATIONS`; in a
/// flyway.conf Flyway refuses it, evolve only warns), and those of the
/// `ConfigurationExtension`s in flyway-core: `baselineMigrationPrefix`, and
/// the stubs of Redgate's (`licenseKey`, `email`, `token`,
/// `offlinePermitPath`); last the Redgate-edition keys whose extensions
/// ship only in Flyway's own download, `undoSqlMigrationPrefix` (a
/// `ConfigUtils` constant) and `cherryPick`. Checked by running Flyway's
/// command line (`ConfigurationManagerImpl`, with these jars) on
/// flyway.conf files holding such keys and misspelt ones. The families
/// under a prefix are [`FLYWAY_KEY_FAMILIES`].
const FLYWAY_KEYS: [&str; 71] = [
    "baselineDescription",
    "baselineMigrationPrefix",
    "baselineOnMigrate",
    "baselineVersion",
    "batch",
    "callbackLocations",
    "callbacks",
    "cherryPick",
    "cleanDisabled",
    "communityDBSupportEnabled",
    "configFileEncoding",
    "configFiles",
    "configurations",
    "connectRetries",
    "connectRetriesInterval",
    "createSchemas",
    "defaultSchema",
    "detectEncoding",
    "driver",
    "dryRunOutput",
    "email",
    "encoding",
    "errorOverrides",
    "executeInTransaction",
    "failOnMissingLocations",
    "group",
    "ignoreMigrationPatterns",
    "initSql",
    "installedBy",
    "jarDirs",
    "kerberosConfigFile",
    "licenseKey",
    "locations",
    "lockRetryCount",
    "loggers",
    "mixed",
    "offlinePermitPath",
    "outOfOrder",
    "outputLogsInJson",
    "outputProgress",
    "outputQueryResults",
    "outputType",
    "password",
    "placeholderPrefix",
    "placeholderReplacement",
    "placeholderSeparator",
    "placeholderSuffix",
    "powershellExecutable",
    "repeatableSqlMigrationPrefix",
    "reportEnabled",
    "reportFilename",
    "resolvers",
    "schemas",
    "scriptPlaceholderPrefix",
    "scriptPlaceholderSuffix",
    "skipDefaultCallbacks",
    "skipDefaultResolvers",
    "skipExecutingMigrations",
    "sqlMigrationPrefix",
    "sqlMigrationSeparator",
    "sqlMigrationSuffixes",
    "stream",
    "table",
    "tablespace",
    "target",
    "token",
    "undoSqlMigrationPrefix",
    "url",
    "user",
    "validateMigrationNaming",
    "validateOnMigrate",
];

/// The families of settings under a prefix Flyway accepts in a
/// flyway.conf and a flyway.toml's `[flyway]`: placeholders, JDBC
/// properties (in a flyway.conf), and the namespaces of configuration
/// extensions: PostgreSQL's (flyway-database-postgresql-13.12.1.jar's
/// `PostgreSQLConfigurationExtension`, `postgresql.transactional.*`), and
/// those of plugins that ship in Flyway's download but not in these jars,
/// named in flyway-core's `UnknownParameterModel` or Flyway's
/// documentation (`oracle.*`, `sqlserver.*`, `vault.*`, `dapr.*`,
/// `gcsm.*`, `check.*`), accepted whatever follows. `flyway.plugins.*`,
/// deprecated in Flyway 11, is refused by 13.12.1, as evolve refuses it.
const FLYWAY_KEY_FAMILIES: [&str; 9] = [
    "placeholders.",
    "jdbcProperties.",
    "postgresql.transactional.",
    "oracle.",
    "sqlserver.",
    "vault.",
    "dapr.",
    "gcsm.",
    "check.",
];

/// The settings of a flyway.toml's `[flyway]` table that an environment's
/// `flyway` table has not: the fields of flyway-core-13.12.1.jar's
/// `FlywayModel` (and the keys of its configuration extensions, as in
/// [`FLYWAY_KEYS`]). Any key of `[flyway]` that is neither one of these,
/// one of [`ENVIRONMENT_FLYWAY_KEYS`] nor of a family is refused by Flyway
/// ("Unknown: 'flyway.loactions'"): `url`, `user`, `schemas` and the other
/// connection settings belong in `[environments.<name>]` there.
const TOML_FLYWAY_ONLY_KEYS: [&str; 13] = [
    "environment",
    "outputType",
    "outputProgress",
    "outputLogsInJson",
    "provisionMode",
    "color",
    "baselineMigrationPrefix",
    "licenseKey",
    "email",
    "token",
    "offlinePermitPath",
    "undoSqlMigrationPrefix",
    "cherryPick",
];

/// The settings of a flyway.toml's `[environments.<name>]` (the fields of
/// flyway-core-13.12.1.jar's `EnvironmentModel`); Flyway warns about any
/// other one ("Unknown parameters configured in Environment") and goes on.
const ENVIRONMENT_KEYS: [&str; 13] = [
    "url",
    "user",
    "password",
    "driver",
    "displayName",
    "schemas",
    "connectRetries",
    "connectRetriesInterval",
    "initSql",
    "jdbcProperties",
    "resolvers",
    "provisioner",
    "flyway",
];

/// The prefix [`parse_toml_in`] gives a key of a flyway.toml's `[flyway]`
/// table that Flyway refuses there (`url`, a misspelt key):
/// [`FlywayConfig::from_pairs`] makes it an error.
pub const TOML_REFUSED: &str = "toml:flyway.";

/// The prefix [`parse_toml_in`] gives a key Flyway accepts in a
/// flyway.toml's `[flyway]` (or an environment's `flyway` table) but not
/// in a flyway.conf (`color`, `failOnMissingTarget`), and evolve does not
/// apply: a warning.
const TOML_ONLY: &str = "toml:only:flyway.";

/// The prefix [`parse_toml_in`] gives a key of the current environment
/// that Flyway reads there but evolve does not (`displayName`,
/// `resolvers`, `provisioner`), or that Flyway warns about and ignores.
const ENVIRONMENT_OTHER: &str = "environment:other.";

/// `name` (after `flyway.`) is a setting Flyway 13.12.1 accepts in a
/// flyway.conf.
fn is_flyway_key(name: &str) -> bool {
    FLYWAY_KEYS.contains(&name) || in_key_family(name)
}

/// `name` is a key of one of [`FLYWAY_KEY_FAMILIES`] (something after the
/// prefix).
fn in_key_family(name: &str) -> bool {
    FLYWAY_KEY_FAMILIES
        .iter()
        .any(|f| name.strip_prefix(f).is_some_and(|rest| !rest.is_empty()))
}

/// `name` (after `flyway.`, a nested table's keys joined with `.`) is a
/// setting Flyway 13.12.1 accepts in a flyway.toml's `[flyway]` table, or
/// with `environment`, in an environment's `flyway` table.
fn is_toml_flyway_key(name: &str, environment: bool) -> bool {
    let top = name.split('.').next().unwrap_or(name);
    ENVIRONMENT_FLYWAY_KEYS.contains(&top)
        || (!environment && TOML_FLYWAY_ONLY_KEYS.contains(&top))
        || (top != "jdbcProperties" && in_key_family(name))
}

/// The known setting `name` is most likely a misspelling of: the one
/// within two edits (letter case aside), if exactly one is nearest; a key
/// of a family keeps what follows its first segment
/// (`placeholder.owner`: `placeholders.owner`).
fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let (top, rest) = match name.split_once('.') {
        Some((top, rest)) => (top, Some(rest)),
        None => (name, None),
    };
    let top = top.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    let mut tie = false;
    for candidate in known {
        let (ctop, family) = match candidate.split_once('.') {
            Some((t, _)) => (t, true),
            None => (candidate, false),
        };
        if family != rest.is_some() {
            continue;
        }
        let d = strsim::osa_distance(&top, &ctop.to_ascii_lowercase());
        if d > 2 {
            continue;
        }
        match best {
            Some((b, _)) if d > b => {}
            Some((b, c)) if d == b => tie |= c != ctop,
            _ => {
                best = Some((d, ctop));
                tie = false;
            }
        }
    }
    let (_, top) = best.filter(|_| !tie)?;
    Some(match rest {
        Some(rest) => format!("{top}.{rest}"),
        None => top.to_string(),
    })
}

/// Why `flyway.<name>` in a flyway.conf (or in a `FLYWAY_*` variable's
/// place) stops the run: Flyway refuses it; with the setting meant, if
/// one is near, and the way out.
fn unknown_key_error(name: &str) -> String {
    let known = FLYWAY_KEYS.iter().chain(&FLYWAY_KEY_FAMILIES).copied();
    let hint = match nearest(name, known) {
        Some(meant) => format!("did you mean flyway.{meant}? correct the key"),
        None => "correct the key, or remove it".to_string(),
    };
    format!(
        "flyway.{name}: Flyway knows no such setting and refuses the whole configuration (\"Unknown configuration property: flyway.{name}\"), so evolve runs nothing either; {hint}"
    )
}

/// Why `name` in a flyway.toml's `[flyway]` table (or, with
/// `environment`, in `[environments.<environment>.flyway]`) stops the
/// run, and the way out.
fn unknown_toml_key_error(name: &str, environment: Option<&str>) -> String {
    let table = match environment {
        Some(e) => format!("environments.{e}.flyway"),
        None => "flyway".to_string(),
    };
    let top = name.split('.').next().unwrap_or(name);
    let refused = format!(
        "{name} in [{table}] of a flyway.toml: Flyway refuses it (\"Unknown: '{table}.{name}'\"), so evolve runs nothing either"
    );
    let env = environment.unwrap_or("<name>");
    if ENVIRONMENT_KEYS.contains(&top) {
        return format!(
            "{refused}; it is a setting of an environment: move it to [environments.{env}]"
        );
    }
    if environment.is_some() && TOML_FLYWAY_ONLY_KEYS.contains(&top) {
        return format!("{refused}; move it to [flyway]");
    }
    let known = ENVIRONMENT_FLYWAY_KEYS
        .iter()
        .chain(if environment.is_some() {
            &[][..]
        } else {
            &TOML_FLYWAY_ONLY_KEYS[..]
        })
        .copied()
        .chain(
            FLYWAY_KEY_FAMILIES
                .iter()
                .copied()
                .filter(|f| *f != "jdbcProperties."),
        );
    match nearest(name, known) {
        Some(meant) => format!("{refused}; did you mean {meant}? correct the key"),
        None => format!("{refused}; correct the key, or remove it"),
    }
}

/// `flyway.toml`: the `[flyway]` table (with `[flyway.placeholders]`), and
/// the settings of `[environments.<name>]` (its `flyway` table's keys
/// prefixed `ENVIRONMENT_FLYWAY`), the environment being
/// `flyway.environment` (default `default`). `${env.NAME}` in a value is
/// resolved from the process environment (see [`parse_toml_with`]).
pub fn parse_toml(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    parse_toml_with(text, &|name| std::env::var(name).ok())
}

/// [`parse_toml`] with `lookup` reading the environment: `${env.NAME}` in
/// a value is `NAME`'s value (an unset one is an error naming the key, as
/// Flyway refuses it), `$${env.NAME}` is the text `${env.NAME}`, and other
/// resolvers are refused.
pub fn parse_toml_with(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    parse_toml_in(text, None, lookup)
}

fn toml_table(text: &str) -> Result<toml::Table, ConfigError> {
    text.parse().map_err(|e: toml::de::Error| ConfigError {
        line: e
            .span()
            .map(|s| 1 + text[..s.start.min(text.len())].matches('\n').count())
            .unwrap_or(1),
        reason: e.message().to_string(),
    })
}

/// The `[flyway] environment` a flyway.toml sets, if it sets one.
pub fn toml_environment(text: &str) -> Result<Option<String>, ConfigError> {
    let doc = toml_table(text)?;
    Ok(match doc.get("flyway").and_then(|f| f.get("environment")) {
        Some(toml::Value::String(e)) => Some(e.clone()),
        _ => None,
    })
}

/// [`parse_toml_with`], the settings of `[environments.<environment>]`
/// applying, when `environment` is given, whatever the file's own
/// `[flyway] environment` says: Flyway picks the environment once all
/// its configuration files and `FLYWAY_ENVIRONMENT` are merged.
pub fn parse_toml_in(
    text: &str,
    environment: Option<&str>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let doc = toml_table(text)?;
    let mut out = Vec::new();
    let mut own = "default".to_string();
    for (top, value) in &doc {
        match (top.as_str(), value) {
            ("flyway", toml::Value::Table(t)) => {
                for (k, v) in t {
                    if k == "environment"
                        && let toml::Value::String(e) = v
                    {
                        own = e.clone();
                    }
                    let mut keys = Vec::new();
                    flatten(&format!("flyway.{k}"), v, &mut keys);
                    // A key Flyway refuses in [flyway] (`url`, a
                    // misspelt one) is marked for `from_pairs` to refuse.
                    for (key, value) in keys {
                        let name = &key["flyway.".len()..];
                        if !is_toml_flyway_key(name, false) {
                            out.push((format!("{TOML_REFUSED}{name}"), value));
                        } else if name == "environment" || is_flyway_key(name) {
                            out.push((key, value));
                        } else {
                            out.push((format!("{TOML_ONLY}{name}"), value));
                        }
                    }
                }
            }
            ("environments", toml::Value::Table(_)) => {}
            (other, _) => out.push((other.to_string(), toml_text(value))),
        }
    }
    let environment = environment.map_or(own, str::to_string);
    if let Some(toml::Value::Table(envs)) = doc.get("environments") {
        for (name, env) in envs {
            let toml::Value::Table(env) = env else {
                continue;
            };
            for (k, v) in env {
                if name == &environment {
                    match (k.as_str(), v) {
                        // `[environments.<name>.flyway]`: settings that
                        // override `[flyway]`'s, wherever they are set.
                        ("flyway", toml::Value::Table(t)) => {
                            for (k, v) in t {
                                flatten(&format!("{ENVIRONMENT_FLYWAY}{k}"), v, &mut out);
                            }
                        }
                        // The connection settings evolve reads.
                        _ if ENVIRONMENT_KEYS.contains(&k.as_str())
                            && !["displayName", "resolvers", "provisioner"]
                                .contains(&k.as_str()) =>
                        {
                            flatten(&format!("flyway.{k}"), v, &mut out)
                        }
                        // Others, which Flyway reads (`displayName`) or
                        // warns about and ignores (a misspelt key).
                        _ => flatten(&format!("{ENVIRONMENT_OTHER}{k}"), v, &mut out),
                    }
                } else {
                    out.push((format!("environments.{name}.{k}"), toml_text(v)));
                }
            }
        }
    }
    let line_of = |key: &str| {
        let last = key.rsplit('.').next().unwrap_or(key);
        text.lines()
            .position(|l| l.trim_start().starts_with(last))
            .map_or(1, |i| i + 1)
    };
    for (key, value) in &mut out {
        if key.starts_with("environments.") {
            continue;
        }
        *value = resolve_toml_value(key, value, lookup).map_err(|reason| ConfigError {
            line: line_of(key),
            reason,
        })?;
    }
    Ok(out)
}

fn flatten(key: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flatten(&format!("{key}.{k}"), v, out);
            }
        }
        other => out.push((key.to_string(), toml_text(other))),
    }
}

fn toml_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(items) => items.iter().map(toml_text).collect::<Vec<_>>().join(","),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Table(_) => String::new(),
    }
}

/// The `FLYWAY_*` variables among `vars` as `flyway.*` keys:
/// `FLYWAY_BASELINE_ON_MIGRATE` is `flyway.baselineOnMigrate`,
/// `FLYWAY_PLACEHOLDERS_X` is placeholder `x`.
pub fn from_env(vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix("FLYWAY_") else {
            continue;
        };
        // The files to read, not a setting: see [`config_files`].
        if rest == "CONFIG_FILES" {
            continue;
        }
        // How to read the files, not a setting: only the variable says it
        // (Flyway ignores `flyway.configFileEncoding` inside a file).
        if rest == "CONFIG_FILE_ENCODING" {
            out.push((name, value));
            continue;
        }
        if let Some(p) = rest.strip_prefix("PLACEHOLDERS_") {
            out.push((format!("flyway.placeholders.{}", p.to_lowercase()), value));
            continue;
        }
        // Read by Flyway's command line, not settings.
        if FLYWAY_VARIABLES_NOT_SETTINGS.contains(&rest) {
            continue;
        }
        // The names Flyway's `ConfigUtils.convertKey` (and PostgreSQL's
        // configuration extension) give that the rule below does not.
        let special = match rest {
            "DRYRUN_OUTPUT" => Some("dryRunOutput".to_string()),
            "COMMUNITY_DB_SUPPORT_DISABLED" => Some("communityDBSupportEnabled".to_string()),
            "POSTGRESQL_TRANSACTIONAL_LOCK" => Some("postgresql.transactional.lock".to_string()),
            _ => rest
                .strip_prefix("JDBC_PROPERTIES_")
                .filter(|p| !p.is_empty())
                .map(|p| format!("jdbcProperties.{}", p.to_lowercase())),
        };
        if let Some(key) = special {
            out.push((format!("flyway.{key}"), value));
            continue;
        }
        let mut key = String::new();
        for (i, word) in rest.split('_').enumerate() {
            let word = word.to_lowercase();
            if i == 0 {
                key.push_str(&word);
            } else {
                let mut chars = word.chars();
                if let Some(c) = chars.next() {
                    key.extend(c.to_uppercase());
                    key.push_str(chars.as_str());
                }
            }
        }
        // Flyway ignores a variable that names no setting.
        if key == "environment" || is_flyway_key(&key) {
            out.push((format!("flyway.{key}"), value));
        } else {
            out.push((format!("{UNKNOWN_VARIABLE}{name}"), value));
        }
    }
    out
}

/// The prefix [`from_env`] gives a `FLYWAY_*` variable that names no
/// Flyway setting (`FLYWAY_LOACTIONS`): Flyway ignores it
/// (`ConfigUtils.convertKey` has no name for it), so evolve only warns.
const UNKNOWN_VARIABLE: &str = "variable:";

/// `FLYWAY_*` variables Flyway's command line reads that are not
/// settings (strings of flyway-core and flyway-commandline 13.12.1, and
/// `FLYWAY_TELEMETRY_OPTOUT`), without the `FLYWAY_`: not warned about.
const FLYWAY_VARIABLES_NOT_SETTINGS: [&str; 8] = [
    "APP_DATA_FOLDER",
    "CALLER",
    "DO_NOT_REDACT_URL",
    "LOG_DEBUG_CONFIGURATION_MAP",
    "NATIVE_CONNECTORS",
    "NEXT_MAJOR_VERSION",
    "SSL_AUTOCONFIGURATION",
    "TELEMETRY_OPTOUT",
];

/// The warning for `FLYWAY_<rest>`, a variable that names no setting.
fn unknown_variable_warning(name: &str) -> String {
    let rest = name.strip_prefix("FLYWAY_").unwrap_or(name);
    let meant = nearest(
        &rest.replace('_', "").to_ascii_lowercase(),
        FLYWAY_KEYS.iter().copied(),
    )
    .map(|k| {
        let mut v = String::from("FLYWAY_");
        for c in k.chars() {
            if c.is_ascii_uppercase() {
                v.push('_');
            }
            v.push(c.to_ascii_uppercase());
        }
        format!("; did you mean {v}?")
    })
    .unwrap_or_default();
    format!(
        "environment variable {name} names no Flyway setting; it is ignored, as Flyway ignores it{meant}"
    )
}

fn boolean(key: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!(
            "{key} is {value:?}, expected true or false; the setting is ignored"
        )),
    }
}

fn whole_number<T: std::str::FromStr>(key: &str, value: &str, what: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{key} is {value:?}, expected {what}; the setting is ignored"))
}

/// A setting that must not be empty.
fn not_empty(key: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        Err(format!(
            "{key} is empty, which names no files; the setting is ignored"
        ))
    } else {
        Ok(value.to_string())
    }
}

/// The forms of an `ignoreMigrationPatterns` entry, as a refusal names
/// them.
const IGNORE_PATTERN_FORMS: &str = "<type>:<state>, type *, versioned or repeatable, state *, pending, missing, ignored or future (e.g. *:pending, repeatable:missing)";

/// One of Flyway's `ignoreMigrationPatterns` (`<type>:<state>`, each
/// part trimmed and compared without regard to case): the types and the
/// states it names, or what is wrong with it (Flyway refuses such a
/// pattern: "Invalid pattern", "Invalid migration type", "Invalid
/// migration state").
fn ignore_pattern(pattern: &str) -> Result<(crate::ByType, &'static [&'static str]), String> {
    const STATES: [&str; 4] = ["pending", "missing", "ignored", "future"];
    let mut parts = pattern.split(':');
    let (Some(kind), Some(state), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err("is not of the form <type>:<state>".into());
    };
    let types = match kind.trim().to_ascii_lowercase().as_str() {
        "*" => crate::ByType::ALL,
        "versioned" => crate::ByType {
            versioned: true,
            repeatable: false,
        },
        "repeatable" => crate::ByType {
            versioned: false,
            repeatable: true,
        },
        _ => {
            return Err(format!(
                "has type {:?}, which is not a migration type",
                kind.trim()
            ));
        }
    };
    let state = state.trim().to_ascii_lowercase();
    let states: &'static [&'static str] = match state.as_str() {
        "*" => &STATES,
        s => STATES
            .iter()
            .position(|x| *x == s)
            .map(|i| &STATES[i..=i])
            .ok_or_else(|| format!("has state {s:?}, which is not a state it can name"))?,
    };
    Ok((types, states))
}

/// `ignoreMigrationPatterns`' value: the states it lets be, or the refusal
/// of its first invalid entry. Entries are separated by commas and
/// trimmed; an empty value names none, and a trailing comma is no entry
/// (as in Flyway), but an empty entry between two others is refused, as
/// Flyway refuses it.
fn ignore_patterns(key: &str, value: &str) -> Result<crate::IgnorePatterns, String> {
    let mut ignore = crate::IgnorePatterns::NONE;
    let mut entries: Vec<&str> = value.split(',').collect();
    while entries.last().is_some_and(|e| e.trim().is_empty()) {
        entries.pop();
    }
    for pattern in entries {
        let pattern = pattern.trim();
        let (types, states) = ignore_pattern(pattern).map_err(|why| {
            format!(
                "{key}: pattern {pattern:?} {why} (Flyway refuses it too); write {IGNORE_PATTERN_FORMS}"
            )
        })?;
        for state in states {
            let slot = match *state {
                "pending" => &mut ignore.pending,
                "missing" => &mut ignore.missing,
                "ignored" => &mut ignore.ignored,
                _ => &mut ignore.future,
            };
            slot.versioned |= types.versioned;
            slot.repeatable |= types.repeatable;
        }
    }
    Ok(ignore)
}

/// Keys of Flyway's that evolve accepts and has nothing to do for, given
/// the value that matches evolve's own behaviour.
const SAME_AS_EVOLVE: [(&str, &str); 2] = [("encoding", "UTF-8"), ("cleanDisabled", "true")];

/// Keys of Flyway's that evolve does not apply, with why.
const UNSUPPORTED: [(&str, &str); 1] = [(
    "callbacks",
    "evolve runs only the SQL callbacks of the migrations directory",
)];

impl FlywayConfig {
    /// Settings from `flyway.*` pairs, later pairs overriding earlier ones.
    pub fn from_pairs(pairs: &[(String, String)]) -> FlywayConfig {
        let mut c = FlywayConfig::default();
        let mut url = None;
        let mut user = None;
        let mut password = None;
        let mut schemas: Option<String> = None;
        let mut default_schema = None;
        let mut settled: BTreeMap<String, String> = BTreeMap::new();
        let settle = |settled: &mut BTreeMap<String, String>, key: String, value: &String| {
            // Placeholder names are matched without regard to case: a
            // later `placeholders.NAME` replaces an earlier `name`.
            if let Some(name) = key.strip_prefix("flyway.placeholders.") {
                let lower = name.to_lowercase();
                settled.retain(|k, _| {
                    k.strip_prefix("flyway.placeholders.")
                        .is_none_or(|n| n.to_lowercase() != lower)
                });
            }
            settled.insert(key, value.clone());
        };
        let (overrides, plain): (Vec<_>, Vec<_>) = pairs
            .iter()
            .partition(|(k, _)| k.starts_with(ENVIRONMENT_FLYWAY));
        for (key, value) in plain {
            settle(&mut settled, key.clone(), value);
        }
        // The current environment's `flyway` table overrides `[flyway]`
        // and the `FLYWAY_*` variables, as in Flyway; its placeholders
        // replace all others (Flyway takes the environment's placeholder
        // map whole when it has one).
        let mut misplaced = Vec::new();
        let mut environment_other = Vec::new();
        if overrides
            .iter()
            .any(|(k, _)| k[ENVIRONMENT_FLYWAY.len()..].starts_with("placeholders."))
        {
            settled.retain(|k, _| !k.starts_with("flyway.placeholders."));
        }
        for (key, value) in overrides {
            let k = &key[ENVIRONMENT_FLYWAY.len()..];
            if !is_toml_flyway_key(k, true) {
                misplaced.push(k.to_string());
            } else if is_flyway_key(k) {
                settle(&mut settled, format!("flyway.{k}"), value);
            } else {
                settle(&mut settled, format!("{TOML_ONLY}{k}"), value);
            }
        }
        for (key, value) in &settled {
            if key == "pipeline" {
                c.pipeline = Some(value.trim().to_string()).filter(|v| !v.is_empty());
                continue;
            }
            if key == "FLYWAY_CONFIG_FILE_ENCODING" {
                let encoding = value.trim();
                let utf8 = ["UTF-8", "UTF8", "US-ASCII", "ASCII"]
                    .iter()
                    .any(|e| e.eq_ignore_ascii_case(encoding));
                if !utf8 {
                    c.errors.push(format!(
                        "FLYWAY_CONFIG_FILE_ENCODING={value}: evolve reads Flyway configuration files as UTF-8 only, so it cannot read them as {value} as Flyway would; convert the .conf files to UTF-8 (iconv -f {encoding} -t UTF-8) and unset FLYWAY_CONFIG_FILE_ENCODING (a flyway.toml is UTF-8 in Flyway too)"
                    ));
                }
                continue;
            }
            if key == CONF_ENVIRONMENT {
                c.errors.push(conf_environment_error(value));
                continue;
            }
            if let Some(name) = key.strip_prefix(TOML_REFUSED) {
                c.errors.push(unknown_toml_key_error(name, None));
                continue;
            }
            if let Some(name) = key.strip_prefix(TOML_ONLY) {
                c.warnings.push(format!(
                    "flyway.{name} is not supported by evolve; it is ignored"
                ));
                continue;
            }
            if let Some(name) = key.strip_prefix(ENVIRONMENT_OTHER) {
                environment_other.push(name.to_string());
                continue;
            }
            if let Some(name) = key.strip_prefix(UNKNOWN_VARIABLE) {
                c.warnings.push(unknown_variable_warning(name));
                continue;
            }
            let Some(k) = key.strip_prefix("flyway.") else {
                c.warnings.push(format!(
                    "configuration key {key} is not a Flyway setting evolve knows; it is ignored"
                ));
                continue;
            };
            if let Some(name) = k.strip_prefix("placeholders.") {
                c.placeholders.insert(name.to_string(), value.clone());
                continue;
            }
            let set_bool =
                |slot: &mut Option<bool>, warnings: &mut Vec<String>| match boolean(key, value) {
                    Ok(b) => *slot = Some(b),
                    Err(w) => warnings.push(w),
                };
            match k {
                "url" => url = Some(value.clone()),
                "user" => user = Some(value.clone()),
                "password" => password = Some(value.clone()),
                "locations" => {
                    let locations: Vec<&str> = value
                        .split(',')
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .collect();
                    for (i, l) in locations.iter().enumerate() {
                        match l.strip_prefix("filesystem:") {
                            Some(path) if i == 0 => c.dir = Some(PathBuf::from(path)),
                            _ if i == 0 && !l.contains(':') => c.dir = Some(PathBuf::from(l)),
                            _ => c.warnings.push(format!(
                                "{key}: location {l} is ignored; evolve reads one filesystem: location (the first), move the files there"
                            )),
                        }
                    }
                }
                "schemas" => schemas = Some(value.clone()),
                "defaultSchema" => default_schema = Some(value.clone()),
                "table" => c.history_table = Some(value.clone()),
                "placeholderPrefix" => c.placeholder_prefix = Some(value.clone()),
                "placeholderSuffix" => c.placeholder_suffix = Some(value.clone()),
                "placeholderReplacement" => {
                    set_bool(&mut c.placeholder_replacement, &mut c.warnings)
                }
                "target" => c.target = Some(value.clone()),
                "outOfOrder" => set_bool(&mut c.out_of_order, &mut c.warnings),
                "baselineVersion" => c.baseline_version = Some(value.clone()),
                "baselineDescription" => c.baseline_description = Some(value.clone()),
                "installedBy" => c.installed_by = Some(value.clone()),
                "group" => set_bool(&mut c.group, &mut c.warnings),
                "mixed" => set_bool(&mut c.mixed, &mut c.warnings),
                "baselineOnMigrate" => set_bool(&mut c.baseline_on_migrate, &mut c.warnings),
                "validateOnMigrate" => set_bool(&mut c.validate_on_migrate, &mut c.warnings),
                "executeInTransaction" => {
                    set_bool(&mut c.execute_in_transaction, &mut c.warnings)
                }
                "failOnMissingLocations" => {
                    set_bool(&mut c.fail_on_missing_locations, &mut c.warnings)
                }
                "createSchemas" => set_bool(&mut c.create_schemas, &mut c.warnings),
                "initSql" => {
                    c.init_sql = Some(value.clone()).filter(|v| !v.trim().is_empty());
                }
                "connectRetries" => {
                    match whole_number(key, value, "a whole number, 0 or more") {
                        Ok(n) => c.connect_retries = Some(n),
                        Err(w) => c.warnings.push(w),
                    }
                }
                "connectRetriesInterval" => {
                    match whole_number(key, value, "a whole number of seconds, 1 or more") {
                        Ok(0) => c.warnings.push(format!(
                            "{key} is 0, expected a whole number of seconds, 1 or more; the setting is ignored"
                        )),
                        Ok(n) => c.connect_retries_interval = Some(n),
                        Err(w) => c.warnings.push(w),
                    }
                }
                "lockRetryCount" => {
                    match whole_number(key, value, "a whole number (-1: without limit)") {
                        Ok(n) => c.lock_retry_count = Some(n),
                        Err(w) => c.warnings.push(w),
                    }
                }
                "sqlMigrationPrefix" => match not_empty(key, value) {
                    Ok(v) => c.sql_migration_prefix = Some(v),
                    Err(w) => c.warnings.push(w),
                },
                "baselineMigrationPrefix" => match not_empty(key, value) {
                    Ok(v) => c.baseline_migration_prefix = Some(v),
                    Err(w) => c.warnings.push(w),
                },
                "ignoreMigrationPatterns" => match ignore_patterns(key, value) {
                    Ok(ignore) => c.ignore_patterns = Some(ignore),
                    Err(e) => c.errors.push(e),
                },
                "repeatableSqlMigrationPrefix" => match not_empty(key, value) {
                    Ok(v) => c.repeatable_sql_migration_prefix = Some(v),
                    Err(w) => c.warnings.push(w),
                },
                "sqlMigrationSeparator" => match not_empty(key, value) {
                    Ok(v) => c.sql_migration_separator = Some(v),
                    Err(w) => c.warnings.push(w),
                },
                "sqlMigrationSuffixes" => {
                    let suffixes: Vec<String> = value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect();
                    if suffixes.is_empty() {
                        c.warnings.push(format!(
                            "{key} is empty, which names no files; the setting is ignored"
                        ));
                    } else {
                        c.sql_migration_suffixes = Some(suffixes);
                    }
                }
                "environment" => {
                    c.environment = Some(value.trim().to_string()).filter(|v| !v.is_empty());
                }
                "configFileEncoding" => c.warnings.push(format!(
                    "{key} is not read from a configuration file (Flyway reads the files' encoding only from FLYWAY_CONFIG_FILE_ENCODING and -configFileEncoding); it is ignored, and the files are read as UTF-8"
                )),
                "configFiles" => c.warnings.push(format!(
                    "{key} is not read from a configuration file (Flyway reads it only from -configFiles and FLYWAY_CONFIG_FILES); list the files in FLYWAY_CONFIG_FILES, or name one with --flyway-config"
                )),
                "driver" => {}
                // Flyway refuses the whole configuration.
                other if !is_flyway_key(other) => c.errors.push(unknown_key_error(other)),
                other => match SAME_AS_EVOLVE.iter().find(|(name, _)| *name == other) {
                    Some((_, same)) if value.trim().eq_ignore_ascii_case(same) => {}
                    Some((_, same)) => c.warnings.push(format!(
                        "{key}={value} is not supported by evolve, which behaves as {key}={same}; it is ignored"
                    )),
                    None => match UNSUPPORTED.iter().find(|(name, _)| *name == other) {
                        Some((_, why)) => c.warnings.push(format!(
                            "{key} is not supported by evolve ({why}); it is ignored"
                        )),
                        None => c.warnings.push(format!(
                            "{key} is not supported by evolve; it is ignored"
                        )),
                    },
                },
            }
        }
        let environment = c.environment.as_deref().unwrap_or("default");
        for k in misplaced {
            c.errors.push(unknown_toml_key_error(&k, Some(environment)));
        }
        for k in environment_other {
            let top = k.split('.').next().unwrap_or(&k);
            if ENVIRONMENT_KEYS.contains(&top) {
                c.warnings.push(format!(
                    "environments.{environment}.{k} is not supported by evolve; it is ignored"
                ));
            } else {
                let meant = nearest(&k, ENVIRONMENT_KEYS.iter().copied())
                    .map(|m| format!("; did you mean {m}?"))
                    .unwrap_or_default();
                c.warnings.push(format!(
                    "environments.{environment}.{k} is not a setting of a Flyway environment; it is ignored, as Flyway ignores it (with a warning){meant}"
                ));
            }
        }
        c.schemas = schemas
            .iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        c.default_schema = default_schema
            .filter(|s| !s.trim().is_empty())
            .or_else(|| c.schemas.first().cloned());
        c.history_schema = c.default_schema.clone();
        if let Some(url) = url {
            match jdbc_to_postgres(&url, user.as_deref(), password.as_deref()) {
                Ok(u) => c.database_url = Some(u),
                Err(JdbcError::NotPostgres) => c.warnings.push(
                    "flyway.url is not a jdbc:postgresql:// URL; it is ignored, pass --database-url"
                        .into(),
                ),
                Err(JdbcError::Parameter(reason)) => c.database_url_error = Some(reason),
            }
        }
        c
    }
}

impl FlywayConfig {
    /// Flyway's naming settings, its defaults where the configuration is
    /// silent.
    pub fn naming(&self) -> crate::Naming {
        let mut n = crate::Naming::default();
        if let Some(p) = &self.sql_migration_prefix {
            n.versioned_prefix = p.clone();
        }
        if let Some(p) = &self.repeatable_sql_migration_prefix {
            n.repeatable_prefix = p.clone();
        }
        if let Some(s) = &self.sql_migration_separator {
            n.separator = s.clone();
        }
        if let Some(s) = &self.sql_migration_suffixes {
            n.suffixes = s.clone();
        }
        if let Some(p) = &self.baseline_migration_prefix {
            n.baseline_prefix = p.clone();
        }
        n
    }

    /// Applies the connection, naming and schema settings to `opts`:
    /// naming, initSql, connectRetries (and connectRetriesInterval),
    /// lockRetryCount (as a limit of the wait for the migration lock: one
    /// second a retry, -1 without limit), the default schema and the
    /// schemas, createSchemas, ignoreMigrationPatterns,
    /// failOnMissingLocations, executeInTransaction; and the first setting
    /// Flyway refuses, as [`crate::Options::refused_setting`].
    pub fn configure(&self, opts: &mut crate::Options) {
        opts.refused_setting = self.errors.first().map(|e| format!("Flyway setting {e}"));
        opts.placeholders.environment = self.environment.clone();
        opts.naming = self.naming();
        opts.init_sql = self.init_sql.clone();
        if let Some(n) = self.connect_retries {
            opts.connect_retries = n;
        }
        if let Some(s) = self.connect_retries_interval {
            opts.connect_retries_interval = std::time::Duration::from_secs(u64::from(s));
        }
        if let Some(n) = self.lock_retry_count {
            opts.lock_wait_limit = u64::try_from(n).ok().map(std::time::Duration::from_secs);
        }
        opts.default_schema = self.default_schema.clone();
        let mut schemas: Vec<String> = self.default_schema.iter().cloned().collect();
        for s in &self.schemas {
            if !schemas.contains(s) {
                schemas.push(s.clone());
            }
        }
        opts.schemas = schemas;
        if let Some(c) = self.create_schemas {
            opts.create_schemas = c;
        }
        if let Some(ignore) = self.ignore_patterns {
            opts.ignore_patterns = ignore;
        }
        if let Some(fail) = self.fail_on_missing_locations {
            opts.fail_on_missing_dir = fail;
        }
        if let Some(in_transaction) = self.execute_in_transaction {
            opts.execute_in_transaction = in_transaction;
        }
    }

    /// Applies baselineOnMigrate (at baselineVersion, default 1, with
    /// baselineDescription) and validateOnMigrate to `apply`; an error
    /// names a baselineVersion that is not a version.
    pub fn configure_apply(&self, apply: &mut crate::ApplyOptions) -> Result<(), String> {
        if self.baseline_on_migrate == Some(true) {
            let version = self.baseline_version.as_deref().unwrap_or("1");
            let version = evolve_core::migration::Version::parse(version)
                .map_err(|e| format!("Flyway setting flyway.baselineVersion: {e}"))?;
            apply.baseline_on_migrate = Some(version);
            apply.baseline_description = self.baseline_description.clone();
        }
        if self.validate_on_migrate == Some(false) {
            apply.skip_validation = true;
        }
        Ok(())
    }
}

/// Why a `flyway.url` cannot be used.
enum JdbcError {
    /// Not `jdbc:postgresql://`: ignored with a warning.
    NotPostgres,
    /// A parameter evolve cannot honour: the run is refused when it would
    /// connect with this URL.
    Parameter(String),
}

/// `jdbc:postgresql://host:port/db?params` with a user and password as a
/// `postgres://` URL. The PostgreSQL JDBC driver's parameters that have a
/// libpq equivalent are mapped to it (`currentSchema` to the session's
/// `search_path`, `ApplicationName`, `connectTimeout`/`loginTimeout`,
/// `ssl` and `sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `options`,
/// `user`, `password`, `tcpKeepAlive`, `targetServerType` any/primary);
/// any other is refused rather than dropped, since the connection would
/// not be the one Flyway opens.
fn jdbc_to_postgres(
    url: &str,
    user: Option<&str>,
    password: Option<&str>,
) -> Result<String, JdbcError> {
    let Some(rest) = url.strip_prefix("jdbc:postgresql://") else {
        return Err(JdbcError::NotPostgres);
    };
    let auth = match (user, password) {
        (Some(u), Some(p)) => format!("{}:{}@", encode(u), encode(p)),
        (Some(u), None) => format!("{}@", encode(u)),
        _ => String::new(),
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut params: Vec<(String, String)> = Vec::new();
    let mut ssl: Option<String> = None;
    let mut sslmode: Option<String> = None;
    let mut options: Vec<String> = Vec::new();
    let refuse = |name: &str, why: &str| {
        JdbcError::Parameter(format!(
            "flyway.url has JDBC parameter {name}, {why}; remove it from flyway.url (or pass --database-url)"
        ))
    };
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value);
        match name {
            "currentSchema" => {
                // libpq's options: spaces and backslashes escaped.
                let path = value.replace('\\', "\\\\").replace(' ', "\\ ");
                options.push(format!("-c search_path={path}"));
            }
            "options" => options.push(value),
            "ApplicationName" => params.push(("application_name".into(), value)),
            "connectTimeout" | "loginTimeout" => {
                params.push(("connect_timeout".into(), value));
            }
            "ssl" => ssl = Some(value),
            "sslmode" => sslmode = Some(value),
            "sslrootcert" | "sslcert" | "sslkey" | "user" | "password" => {
                params.push((name.to_string(), value));
            }
            "tcpKeepAlive" => match value.as_str() {
                "true" => params.push(("keepalives".into(), "1".into())),
                "false" => params.push(("keepalives".into(), "0".into())),
                _ => return Err(refuse(name, "whose value is not true or false")),
            },
            "targetServerType" => match value.as_str() {
                "any" => params.push(("target_session_attrs".into(), "any".into())),
                "primary" | "master" => {
                    params.push(("target_session_attrs".into(), "read-write".into()));
                }
                _ => {
                    return Err(refuse(
                        name,
                        "whose value has no libpq equivalent evolve applies (any and primary do)",
                    ));
                }
            },
            other => {
                return Err(refuse(
                    other,
                    "which has no libpq equivalent evolve applies",
                ));
            }
        }
    }
    // pgjdbc: sslmode wins; else ssl=true (or a bare ssl) is verify-full.
    match (sslmode, ssl) {
        (Some(mode), _) => params.push(("sslmode".into(), mode)),
        (None, Some(ssl)) if ssl.is_empty() || ssl.eq_ignore_ascii_case("true") => {
            params.push(("sslmode".into(), "verify-full".into()));
        }
        (None, Some(ssl)) if ssl.eq_ignore_ascii_case("false") => {}
        (None, Some(_)) => return Err(refuse("ssl", "whose value is not true or false")),
        (None, None) => {}
    }
    if !options.is_empty() {
        params.push(("options".into(), options.join(" ")));
    }
    let mut out = format!("postgres://{auth}{base}");
    for (i, (k, v)) in params.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(k);
        out.push('=');
        out.push_str(&encode(v));
    }
    Ok(out)
}

/// A JDBC URL parameter's value, percent-decoded (left as it is when it is
/// not valid percent-encoding).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn conf_files_read_as_java_properties() {
        let text = "# comment\n! also\nflyway.url = jdbc:postgresql://h:5/db\nflyway.locations=filesystem:sql,\\\n  filesystem:more\nflyway.placeholders.x: 1\n";
        assert_eq!(
            parse_conf(text),
            pairs(&[
                ("flyway.url", "jdbc:postgresql://h:5/db"),
                ("flyway.locations", "filesystem:sql,filesystem:more"),
                ("flyway.placeholders.x", "1"),
            ])
        );
        // Space as the separator, a `:` in the value, one separator only,
        // a key alone.
        assert_eq!(
            parse_conf(
                "flyway.url jdbc:postgresql://h/db\n  flyway.user\t: app\nflyway.password==x:y\nflyway.cleanDisabled\n"
            ),
            pairs(&[
                ("flyway.url", "jdbc:postgresql://h/db"),
                ("flyway.user", "app"),
                ("flyway.password", "=x:y"),
                ("flyway.cleanDisabled", ""),
            ])
        );
    }

    #[test]
    fn toml_files_read_flyway_and_the_environment() {
        let text = "[environments.default]\nurl = \"jdbc:postgresql://h/db\"\nuser = \"app\"\n[environments.other]\nurl = \"x\"\n[flyway]\nlocations = [\"filesystem:sql\"]\noutOfOrder = true\n[flyway.placeholders]\nname = \"v\"\n";
        let got = parse_toml(text).expect("parses");
        let c = FlywayConfig::from_pairs(&got);
        assert_eq!(c.database_url.as_deref(), Some("postgres://app@h/db"));
        assert_eq!(c.dir, Some(PathBuf::from("sql")));
        assert_eq!(c.out_of_order, Some(true));
        assert_eq!(c.placeholders.get("name").map(String::as_str), Some("v"));
        assert_eq!(
            c.warnings,
            [
                "configuration key environments.other.url is not a Flyway setting evolve knows; it is ignored"
            ]
        );
    }

    #[test]
    fn pipeline_is_evolves_own_key() {
        let text =
            "pipeline = \"http://127.0.0.1:7800\"\n[flyway]\nlocations = [\"filesystem:sql\"]\n";
        let c = FlywayConfig::from_pairs(&parse_toml(text).expect("parses"));
        assert_eq!(c.pipeline.as_deref(), Some("http://127.0.0.1:7800"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = FlywayConfig::from_pairs(&parse_conf("pipeline=http://p:7800\n"));
        assert_eq!(c.pipeline.as_deref(), Some("http://p:7800"));
    }

    #[test]
    fn environment_variables_become_keys() {
        let got = from_env(pairs(&[
            ("FLYWAY_BASELINE_ON_MIGRATE", "true"),
            ("FLYWAY_PLACEHOLDERS_MY_NAME", "v"),
            ("HOME", "/root"),
        ]));
        assert_eq!(
            got,
            pairs(&[
                ("flyway.baselineOnMigrate", "true"),
                ("flyway.placeholders.my_name", "v")
            ])
        );
    }

    #[test]
    fn unsupported_keys_are_named() {
        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.group", "true"),
            ("flyway.mixed", "yes"),
            ("flyway.callbacks", "com.x.Y"),
            ("flyway.undoSqlMigrationPrefix", "U"),
            ("flyway.cleanDisabled", "false"),
            ("flyway.connectRetries", "-1"),
            ("flyway.sqlMigrationSeparator", ""),
            ("flyway.outOfOrder", "perhaps"),
            ("flyway.user", "a b"),
            ("flyway.password", "p@ss"),
            ("flyway.url", "jdbc:postgresql://h:1/d?sslmode=require"),
        ]));
        assert_eq!(
            c.warnings,
            [
                "flyway.callbacks is not supported by evolve (evolve runs only the SQL callbacks of the migrations directory); it is ignored",
                "flyway.cleanDisabled=false is not supported by evolve, which behaves as flyway.cleanDisabled=true; it is ignored",
                "flyway.connectRetries is \"-1\", expected a whole number, 0 or more; the setting is ignored",
                "flyway.mixed is \"yes\", expected true or false; the setting is ignored",
                "flyway.outOfOrder is \"perhaps\", expected true or false; the setting is ignored",
                "flyway.sqlMigrationSeparator is empty, which names no files; the setting is ignored",
                "flyway.undoSqlMigrationPrefix is not supported by evolve; it is ignored",
            ]
        );
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.group, Some(true));
        assert_eq!(
            c.database_url.as_deref(),
            Some("postgres://a%20b:p%40ss@h:1/d?sslmode=require")
        );
    }

    #[test]
    fn supported_keys_reach_the_options() {
        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.sqlMigrationPrefix", "M"),
            ("flyway.repeatableSqlMigrationPrefix", "Rep"),
            ("flyway.sqlMigrationSeparator", "-"),
            ("flyway.sqlMigrationSuffixes", ".pgsql, .ddl"),
            ("flyway.initSql", "SET lock_timeout = '1s'"),
            ("flyway.connectRetries", "2"),
            ("flyway.connectRetriesInterval", "5"),
            ("flyway.lockRetryCount", "-1"),
            ("flyway.schemas", "app, other,app"),
            ("flyway.baselineOnMigrate", "true"),
            ("flyway.baselineVersion", "3"),
            ("flyway.validateOnMigrate", "false"),
            ("flyway.createSchemas", "true"),
        ]));
        assert_eq!(c.warnings, Vec::<String>::new());
        let mut opts = crate::Options::new("postgres://h/d", "m");
        opts.lock_wait_limit = Some(std::time::Duration::from_secs(9));
        c.configure(&mut opts);
        assert_eq!(opts.naming.versioned_prefix, "M");
        assert_eq!(opts.naming.repeatable_prefix, "Rep");
        assert_eq!(opts.naming.separator, "-");
        assert_eq!(opts.naming.suffixes, [".pgsql", ".ddl"]);
        assert_eq!(opts.init_sql.as_deref(), Some("SET lock_timeout = '1s'"));
        assert_eq!(opts.connect_retries, 2);
        assert_eq!(opts.connect_retries_interval.as_secs(), 5);
        assert_eq!(opts.lock_wait_limit, None);
        assert_eq!(opts.default_schema.as_deref(), Some("app"));
        assert_eq!(opts.schemas, ["app", "other"]);
        assert_eq!(c.history_schema.as_deref(), Some("app"));
        let mut apply = crate::ApplyOptions::default();
        c.configure_apply(&mut apply).expect("valid");
        assert_eq!(
            apply.baseline_on_migrate.map(|v| v.to_string()),
            Some("3".into())
        );
        assert!(apply.skip_validation);

        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.lockRetryCount", "4"),
            ("flyway.defaultSchema", "d"),
            ("flyway.schemas", "s"),
        ]));
        let mut opts = crate::Options::new("postgres://h/d", "m");
        c.configure(&mut opts);
        assert_eq!(
            opts.lock_wait_limit,
            Some(std::time::Duration::from_secs(4))
        );
        assert_eq!(opts.schemas, ["d", "s"]);
        assert!(opts.naming.is_default());
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "APP_OWNER" => Some("team-billing".into()),
            "DB" => Some("shop".into()),
            _ => None,
        }
    }

    #[test]
    fn conf_files_expand_environment_variables_as_flyway() {
        let (text, warnings) = expand_conf_env(
            "flyway.url=jdbc:postgresql://h/${DB}\nflyway.placeholders.owner=${APP_OWNER}\nflyway.user=${NO_SUCH}x\nflyway.initSql=SELECT '${flyway:user}', '${not closed'\n",
            &env,
        );
        assert_eq!(
            text,
            "flyway.url=jdbc:postgresql://h/shop\nflyway.placeholders.owner=team-billing\nflyway.user=x\nflyway.initSql=SELECT '${flyway:user}', '${not closed'\n"
        );
        assert_eq!(
            warnings,
            [
                "line 3: environment variable NO_SUCH is not set, so ${NO_SUCH} reads as empty, as Flyway reads it; set NO_SUCH"
            ]
        );
        let c = FlywayConfig::from_pairs(&parse_conf(&text));
        assert_eq!(c.database_url.as_deref(), Some("postgres://x@h/shop"));
        assert_eq!(c.placeholders["owner"], "team-billing");
    }

    #[test]
    fn toml_files_resolve_env_as_flyway() {
        let text = "[environments.default]\nurl = \"jdbc:postgresql://h/${env.DB}\"\n[flyway.placeholders]\nowner = \"${env.APP_OWNER}\"\nkept = \"$${env.APP_OWNER}\"\nverbatim = \"!{${env.X}}\"\nplain = \"${flyway:user}\"\n";
        let c = FlywayConfig::from_pairs(&parse_toml_with(text, &env).expect("resolves"));
        assert_eq!(c.database_url.as_deref(), Some("postgres://h/shop"));
        assert_eq!(c.placeholders["owner"], "team-billing");
        assert_eq!(c.placeholders["kept"], "${env.APP_OWNER}");
        assert_eq!(c.placeholders["verbatim"], "${env.X}");
        assert_eq!(c.placeholders["plain"], "${flyway:user}");
        let e = parse_toml_with("[flyway.placeholders]\nowner = \"${env.NO_SUCH}\"\n", &env)
            .expect_err("unset");
        assert_eq!(e.line, 2);
        assert_eq!(
            e.reason,
            "flyway.placeholders.owner reads environment variable NO_SUCH, which is not set (Flyway refuses it too); set NO_SUCH"
        );
        let e = parse_toml_with("[environments.default]\npassword = \"${vault.pw}\"\n", &env)
            .expect_err("vault");
        assert!(
            e.reason
                .starts_with("flyway.password uses resolver vault, which evolve does not have"),
            "{}",
            e.reason
        );
    }

    #[test]
    fn jdbc_parameters_map_to_libpq_or_are_refused() {
        let c = FlywayConfig::from_pairs(&pairs(&[
            (
                "flyway.url",
                "jdbc:postgresql://h:5432/d?currentSchema=app,public&ApplicationName=my%20app&connectTimeout=7&ssl=true&tcpKeepAlive=false&targetServerType=primary",
            ),
            ("flyway.user", "u"),
        ]));
        assert_eq!(c.warnings, Vec::<String>::new());
        assert_eq!(c.database_url_error, None);
        assert_eq!(
            c.database_url.as_deref(),
            Some(
                "postgres://u@h:5432/d?application_name=my%20app&connect_timeout=7&keepalives=0&target_session_attrs=read-write&sslmode=verify-full&options=-c%20search_path%3Dapp%2Cpublic"
            )
        );
        let c = FlywayConfig::from_pairs(&pairs(&[(
            "flyway.url",
            "jdbc:postgresql://h/d?sslmode=require&ssl=true&currentSchema=my%20schema",
        )]));
        assert_eq!(
            c.database_url.as_deref(),
            Some("postgres://h/d?sslmode=require&options=-c%20search_path%3Dmy%5C%20schema")
        );
        let c = FlywayConfig::from_pairs(&pairs(&[(
            "flyway.url",
            "jdbc:postgresql://h/d?prepareThreshold=0",
        )]));
        assert_eq!(c.database_url, None);
        assert_eq!(
            c.database_url_error.as_deref(),
            Some(
                "flyway.url has JDBC parameter prepareThreshold, which has no libpq equivalent evolve applies; remove it from flyway.url (or pass --database-url)"
            )
        );
    }

    #[test]
    fn ignore_migration_patterns() {
        use crate::{ByType, IgnorePatterns};
        let c = FlywayConfig::from_pairs(&pairs(&[(
            "flyway.ignoreMigrationPatterns",
            "*:future, repeatable:pending,*:MISSING , versioned:ignored,",
        )]));
        let versioned = ByType {
            versioned: true,
            repeatable: false,
        };
        let repeatable = ByType {
            versioned: false,
            repeatable: true,
        };
        assert_eq!(
            c.ignore_patterns,
            Some(IgnorePatterns {
                pending: repeatable,
                missing: ByType::ALL,
                ignored: versioned,
                future: ByType::ALL,
            })
        );
        assert_eq!(c.warnings, Vec::<String>::new());
        assert_eq!(c.errors, Vec::<String>::new());
        let mut opts = crate::Options::new("postgres://h/d", "m");
        assert_eq!(opts.ignore_patterns, IgnorePatterns::default());
        c.configure(&mut opts);
        assert_eq!(opts.ignore_patterns.missing, ByType::ALL);
        // A list without *:future replaces Flyway's default, *:future.
        let c =
            FlywayConfig::from_pairs(&pairs(&[("flyway.ignoreMigrationPatterns", "versioned:*")]));
        assert_eq!(
            c.ignore_patterns,
            Some(IgnorePatterns {
                pending: versioned,
                missing: versioned,
                ignored: versioned,
                future: versioned,
            })
        );
        let c = FlywayConfig::from_pairs(&pairs(&[("flyway.ignoreMigrationPatterns", "")]));
        assert_eq!(c.ignore_patterns, Some(IgnorePatterns::NONE));
    }

    /// Flyway refuses an entry that is not `<type>:<state>` ("Invalid
    /// pattern", "Invalid migration type", "Invalid migration state");
    /// evolve once warned and ran on.
    #[test]
    fn an_invalid_ignore_migration_pattern_is_refused() {
        let forms = "write <type>:<state>, type *, versioned or repeatable, state *, pending, missing, ignored or future (e.g. *:pending, repeatable:missing)";
        for (value, why) in [
            (
                "*:bogus",
                "pattern \"*:bogus\" has state \"bogus\", which is not a state it can name",
            ),
            ("foo", "pattern \"foo\" is not of the form <type>:<state>"),
            (
                "*:future, x:pending",
                "pattern \"x:pending\" has type \"x\", which is not a migration type",
            ),
            (
                "*:failed",
                "pattern \"*:failed\" has state \"failed\", which is not a state it can name",
            ),
            (
                "*:future,,*:missing",
                "pattern \"\" is not of the form <type>:<state>",
            ),
            (
                "*:*:*",
                "pattern \"*:*:*\" is not of the form <type>:<state>",
            ),
        ] {
            let c = FlywayConfig::from_pairs(&pairs(&[("flyway.ignoreMigrationPatterns", value)]));
            assert_eq!(
                c.errors,
                [format!(
                    "flyway.ignoreMigrationPatterns: {why} (Flyway refuses it too); {forms}"
                )],
                "{value}"
            );
            assert_eq!(c.ignore_patterns, None, "{value}");
            let mut opts = crate::Options::new("postgres://h/d", "m");
            c.configure(&mut opts);
            assert_eq!(
                opts.refused_setting,
                Some(format!("Flyway setting {}", c.errors[0])),
                "{value}"
            );
        }
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    /// `FLYWAY_CONFIG_FILES` and `flyway.configFiles` were once only
    /// "not supported; it is ignored".
    #[test]
    fn config_files_are_picked_as_flyway_picks_them() {
        let defaults = paths(&["flyway.conf", "flyway.toml"]);
        let on_disk = |present: &'static [&'static str]| {
            move |p: &Path| present.iter().any(|x| Path::new(x) == p)
        };
        let pick =
            |explicit: Option<&str>, listed: Option<&str>, present: &'static [&'static str]| {
                config_files(
                    explicit.map(Path::new),
                    listed,
                    &defaults,
                    &on_disk(present),
                )
            };
        // Nothing listed: a default .toml wins over a .conf, which is
        // named.
        assert_eq!(
            pick(None, None, &["flyway.conf", "flyway.toml"]),
            Ok(ConfigFiles {
                files: paths(&["flyway.toml"]),
                warnings: vec!["flyway.conf is not read: Flyway reads configuration files of one kind, here the .toml ones, and ignores it too; move its settings into a .toml file".into()],
            })
        );
        // The home directory's files, then the working directory's.
        let home = paths(&[
            "/h/flyway.conf",
            "/h/flyway.toml",
            "/h/flyway.user.toml",
            "flyway.conf",
            "flyway.toml",
            "flyway.user.toml",
        ]);
        let files = |present: &'static [&'static str]| {
            config_files(None, None, &home, &on_disk(present)).map(|c| c.files)
        };
        assert_eq!(
            files(&["/h/flyway.conf", "flyway.conf"]),
            Ok(paths(&["/h/flyway.conf", "flyway.conf"]))
        );
        assert_eq!(
            files(&["/h/flyway.user.toml", "flyway.toml", "flyway.user.toml"]),
            Ok(paths(&[
                "/h/flyway.user.toml",
                "flyway.toml",
                "flyway.user.toml"
            ]))
        );
        assert_eq!(
            pick(None, Some(""), &["flyway.conf"]).map(|c| c.files),
            Ok(paths(&["flyway.conf"]))
        );
        // Listed files come after the default file of their kind, in order.
        assert_eq!(
            pick(
                None,
                Some(" a.conf, b/c.conf ,"),
                &["flyway.conf", "flyway.toml"]
            )
            .map(|c| c.files),
            Ok(paths(&["flyway.conf", "a.conf", "b/c.conf"]))
        );
        assert_eq!(
            pick(None, Some("x.toml,y.toml"), &["flyway.conf", "flyway.toml"]).map(|c| c.files),
            Ok(paths(&["flyway.toml", "x.toml", "y.toml"]))
        );
        // Both kinds listed: refused, as Flyway refuses them.
        let e = pick(None, Some("a.conf,x.toml"), &[]).unwrap_err();
        assert!(
            e.starts_with(
                "FLYWAY_CONFIG_FILES names both .toml files (x.toml) and .conf files (a.conf)"
            ),
            "{e}"
        );
        // --flyway-config: after the default files and the listed ones of
        // its kind, as Flyway's -configFiles adds to them (it once
        // replaced the default files); the others are named, not read.
        let c = pick(Some("my.conf"), Some("a.conf,x.toml"), &["flyway.conf"]).expect("picks");
        assert_eq!(c.files, paths(&["flyway.conf", "a.conf", "my.conf"]));
        assert_eq!(
            c.warnings,
            [
                "FLYWAY_CONFIG_FILES names x.toml, a .toml file, which is not read beside the .conf file --flyway-config names (Flyway reads configuration files of one kind, and ignores it too); convert it, or name it with --flyway-config"
            ]
        );
        let c = pick(Some("my.toml"), None, &["flyway.conf", "flyway.toml"]).expect("picks");
        assert_eq!(c.files, paths(&["flyway.toml", "my.toml"]));
        assert_eq!(
            c.warnings,
            [
                "flyway.conf is not read: Flyway reads configuration files of one kind, here the .toml ones, and ignores it too; move its settings into a .toml file"
            ]
        );
        // A default file named with --flyway-config is read once.
        let c = pick(Some("flyway.toml"), None, &["flyway.toml"]).expect("picks");
        assert_eq!(c.files, paths(&["flyway.toml"]));
    }

    #[test]
    fn config_files_is_no_setting() {
        assert_eq!(
            from_env(pairs(&[("FLYWAY_CONFIG_FILES", "a.conf")])),
            Vec::<(String, String)>::new()
        );
        let c = FlywayConfig::from_pairs(&pairs(&[("flyway.configFiles", "a.conf")]));
        assert_eq!(
            c.warnings,
            [
                "flyway.configFiles is not read from a configuration file (Flyway reads it only from -configFiles and FLYWAY_CONFIG_FILES); list the files in FLYWAY_CONFIG_FILES, or name one with --flyway-config"
            ]
        );
    }

    /// A later `placeholders.NAME` replaces an earlier `name`: the two
    /// are one placeholder.
    #[test]
    fn placeholder_names_in_another_case_are_one() {
        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.placeholders.name", "first"),
            ("flyway.placeholders.Other", "o"),
            ("flyway.placeholders.NAME", "second"),
        ]));
        assert_eq!(
            c.placeholders,
            BTreeMap::from([
                ("NAME".into(), "second".into()),
                ("Other".into(), "o".into())
            ])
        );
        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.placeholders.NAME", "first"),
            ("flyway.placeholders.name", "second"),
        ]));
        assert_eq!(
            c.placeholders,
            BTreeMap::from([("name".into(), "second".into())])
        );
    }

    /// `${flyway:environment}` was `default` whatever `environment` said.
    #[test]
    fn the_environment_reaches_the_placeholders() {
        let text = "[flyway]\nenvironment = \"staging\"\n[environments.default]\nuser = \"d\"\n[environments.staging]\nuser = \"s\"\nurl = \"jdbc:postgresql://h/db\"\n";
        let c = FlywayConfig::from_pairs(&parse_toml(text).expect("parses"));
        assert_eq!(c.environment.as_deref(), Some("staging"));
        assert_eq!(c.database_url.as_deref(), Some("postgres://s@h/db"));
        let mut opts = crate::Options::new("postgres://h/d", "m");
        c.configure(&mut opts);
        assert_eq!(opts.placeholders.environment.as_deref(), Some("staging"));
        // Picked from outside the file (FLYWAY_ENVIRONMENT, another file).
        let mut got = parse_toml_in(text, Some("default"), &|_| None).expect("parses");
        got.push(("flyway.environment".into(), "default".into()));
        let c = FlywayConfig::from_pairs(&got);
        assert_eq!(c.environment.as_deref(), Some("default"));
        assert_eq!(c.database_url, None);
        assert!(
            c.warnings
                .contains(&"configuration key environments.staging.url is not a Flyway setting evolve knows; it is ignored".to_string()),
            "{:?}",
            c.warnings
        );
        assert_eq!(toml_environment(text), Ok(Some("staging".into())));
    }

    /// `[environments.<name>.flyway]` was once read as the unknown keys
    /// `flyway.flyway.*`, each warned about and ignored.
    #[test]
    fn an_environments_flyway_table_overrides_flyway() {
        let text = "[flyway]\nenvironment = \"staging\"\ntable = \"main_history\"\noutOfOrder = true\n[flyway.placeholders]\nowner = \"main\"\nother = \"kept?\"\n[environments.staging]\nurl = \"jdbc:postgresql://h/db\"\n[environments.staging.flyway]\ntable = \"staging_history\"\nschemas = [\"s\"]\n[environments.staging.flyway.placeholders]\nowner = \"staging\"\n[environments.other.flyway]\ntable = \"other_history\"\n";
        let env = |_: &str| None;
        let got = parse_toml_with(text, &env).expect("parses");
        assert!(
            got.contains(&(
                format!("{ENVIRONMENT_FLYWAY}table"),
                "staging_history".into()
            )),
            "{got:?}"
        );
        // FLYWAY_TABLE sets [flyway]'s table, which the environment's
        // overrides, as in Flyway.
        let mut pairs = got.clone();
        pairs.push(("flyway.table".into(), "from_variable".into()));
        let c = FlywayConfig::from_pairs(&pairs);
        assert_eq!(c.history_table.as_deref(), Some("staging_history"));
        assert_eq!(c.out_of_order, Some(true));
        // The environment's placeholders replace [flyway]'s, as Flyway
        // takes the environment's placeholder map whole.
        assert_eq!(
            c.placeholders,
            BTreeMap::from([("owner".to_string(), "staging".to_string())])
        );
        // Flyway refuses `schemas` there: it is a setting of the
        // environment itself.
        assert_eq!(
            c.errors,
            [
                "schemas in [environments.staging.flyway] of a flyway.toml: Flyway refuses it (\"Unknown: 'environments.staging.flyway.schemas'\"), so evolve runs nothing either; it is a setting of an environment: move it to [environments.staging]"
            ]
        );
        assert!(
            !c.warnings.iter().any(|w| w.contains("flyway.flyway")),
            "{:?}",
            c.warnings
        );
        // Under another environment, that one's flyway table applies and
        // [flyway]'s placeholders stay.
        let other = parse_toml_in(text, Some("other"), &env).expect("parses");
        let c = FlywayConfig::from_pairs(&other);
        assert_eq!(c.history_table.as_deref(), Some("other_history"));
        assert_eq!(
            c.placeholders.get("other").map(String::as_str),
            Some("kept?")
        );
    }

    /// `flyway.environment` in a .conf file was once taken as the
    /// environment; Flyway refuses it ("Unknown configuration property").
    #[test]
    fn an_environment_in_a_conf_file_is_refused() {
        let got = parse_conf("flyway.url=jdbc:postgresql://h/db\nflyway.environment=staging\n");
        assert_eq!(got[1].0, CONF_ENVIRONMENT);
        let c = FlywayConfig::from_pairs(&got);
        assert_eq!(c.environment, None);
        assert_eq!(
            c.errors,
            [
                "flyway.environment=staging in a .conf file: Flyway refuses it (\"Unknown configuration property: flyway.environment\"), as environments exist only in flyway.toml; remove the line, or move the configuration to a flyway.toml with [flyway] environment = \"staging\" and an [environments.staging] table"
            ]
        );
        // FLYWAY_ENVIRONMENT and a flyway.toml's environment still count.
        let c = FlywayConfig::from_pairs(&from_env(pairs(&[("FLYWAY_ENVIRONMENT", "e")])));
        assert_eq!((c.environment.as_deref(), c.errors.len()), (Some("e"), 0));
    }

    /// FLYWAY_CONFIG_FILE_ENCODING was once "not supported by evolve; it
    /// is ignored", whatever it said.
    #[test]
    fn the_config_file_encoding_is_utf8_or_refused() {
        for utf8 in ["UTF-8", "utf8", " US-ASCII "] {
            let c = FlywayConfig::from_pairs(&from_env(pairs(&[(
                "FLYWAY_CONFIG_FILE_ENCODING",
                utf8,
            )])));
            assert_eq!((c.errors.len(), c.warnings.len()), (0, 0), "{utf8}: {c:?}");
        }
        let c = FlywayConfig::from_pairs(&from_env(pairs(&[(
            "FLYWAY_CONFIG_FILE_ENCODING",
            "ISO-8859-1",
        )])));
        assert_eq!(
            c.errors,
            [
                "FLYWAY_CONFIG_FILE_ENCODING=ISO-8859-1: evolve reads Flyway configuration files as UTF-8 only, so it cannot read them as ISO-8859-1 as Flyway would; convert the .conf files to UTF-8 (iconv -f ISO-8859-1 -t UTF-8) and unset FLYWAY_CONFIG_FILE_ENCODING (a flyway.toml is UTF-8 in Flyway too)"
            ]
        );
        // Inside a file Flyway ignores it.
        let c = FlywayConfig::from_pairs(&pairs(&[("flyway.configFileEncoding", "UTF-16")]));
        assert_eq!(c.errors.len(), 0);
        assert_eq!(
            c.warnings,
            [
                "flyway.configFileEncoding is not read from a configuration file (Flyway reads the files' encoding only from FLYWAY_CONFIG_FILE_ENCODING and -configFileEncoding); it is ignored, and the files are read as UTF-8"
            ]
        );
    }

    /// A key Flyway 13.12.1 does not know (`flyway.loactions`) was once
    /// "not supported by evolve; it is ignored", and evolve ran with the
    /// default locations; Flyway refuses the whole configuration ("Unknown
    /// configuration property: flyway.loactions").
    #[test]
    fn a_key_flyway_does_not_know_is_refused() {
        let refused = |key: &str| {
            let c = FlywayConfig::from_pairs(&pairs(&[(key, "x")]));
            assert_eq!(c.errors.len(), 1, "{key}: {c:?}");
            c.errors[0].clone()
        };
        assert_eq!(
            refused("flyway.loactions"),
            "flyway.loactions: Flyway knows no such setting and refuses the whole configuration (\"Unknown configuration property: flyway.loactions\"), so evolve runs nothing either; did you mean flyway.locations? correct the key"
        );
        // Flyway's keys are case-sensitive.
        assert!(
            refused("flyway.Locations").ends_with("did you mean flyway.locations? correct the key")
        );
        assert!(
            refused("flyway.placeholder.owner")
                .ends_with("did you mean flyway.placeholders.owner? correct the key")
        );
        assert!(refused("flyway.foo").ends_with("; correct the key, or remove it"));
        // Refused by Flyway 13.12.1 too: the `plugins` namespace (gone
        // since Flyway 11), a key of PostgreSQL's namespace it lacks,
        // keys of a flyway.toml or an environment only, removed keys.
        for key in [
            "flyway.plugins.x",
            "flyway.postgresql.foo",
            "flyway.color",
            "flyway.displayName",
            "flyway.workingDirectory",
            "flyway.cleanOnValidationError",
            "flyway.placeholders",
            "flyway.",
        ] {
            refused(key);
        }
        // A location that comes too is not applied.
        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.loactions", "filesystem:sql"),
            ("flyway.table", "t"),
        ]));
        assert_eq!((c.errors.len(), c.dir.clone()), (1, None), "{c:?}");
    }

    /// Keys Flyway knows but evolve does not apply (Redgate's, another
    /// database's, JDBC properties) stay warnings; placeholders of any
    /// name are placeholders; a key outside `flyway.` Flyway ignores.
    #[test]
    fn a_key_flyway_knows_is_only_a_warning() {
        let c = FlywayConfig::from_pairs(&pairs(&[
            ("flyway.undoSqlMigrationPrefix", "U"),
            ("flyway.cherryPick", "2"),
            ("flyway.licenseKey", "k"),
            ("flyway.dryRunOutput", "out.sql"),
            ("flyway.postgresql.transactional.lock", "false"),
            ("flyway.jdbcProperties.ssl", "true"),
            ("flyway.sqlserver.kerberos.login.file", "f"),
            ("flyway.vault.url", "u"),
            ("flyway.placeholders.Any_Name", "v"),
            ("flyway.configurations", "c"),
            ("foo", "bar"),
        ]));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.warnings.len(), 10, "{:?}", c.warnings);
        assert!(
            c.warnings.contains(
                &"flyway.postgresql.transactional.lock is not supported by evolve; it is ignored"
                    .to_string()
            ),
            "{:?}",
            c.warnings
        );
        assert_eq!(
            c.placeholders.get("Any_Name").map(String::as_str),
            Some("v")
        );
    }

    /// In a flyway.toml, `[flyway]` holds Flyway's `FlywayModel`: a
    /// misspelt key and the connection settings (`url`, `schemas`, which
    /// belong in `[environments.<name>]`) are refused, as Flyway refuses
    /// them ("Unknown: 'flyway.url'"); an unknown key of the environment
    /// Flyway only warns about.
    #[test]
    fn a_toml_key_flyway_does_not_know_is_refused() {
        let env = |_: &str| None;
        let config =
            |text: &str| FlywayConfig::from_pairs(&parse_toml_with(text, &env).expect("parses"));
        let base = "[environments.default]\nurl = \"jdbc:postgresql://h/db\"\n";
        let c = config(&format!(
            "{base}[flyway]\nloactions = [\"filesystem:sql\"]\n"
        ));
        assert_eq!(
            c.errors,
            [
                "loactions in [flyway] of a flyway.toml: Flyway refuses it (\"Unknown: 'flyway.loactions'\"), so evolve runs nothing either; did you mean locations? correct the key"
            ]
        );
        assert_eq!(c.dir, None);
        let c = config(&format!(
            "{base}[flyway]\nurl = \"jdbc:postgresql://h/other\"\n"
        ));
        assert_eq!(
            c.errors,
            [
                "url in [flyway] of a flyway.toml: Flyway refuses it (\"Unknown: 'flyway.url'\"), so evolve runs nothing either; it is a setting of an environment: move it to [environments.<name>]"
            ]
        );
        assert_eq!(c.database_url.as_deref(), Some("postgres://h/db"));
        // The environment's flyway table: `environment` is [flyway]'s.
        let c = config(&format!(
            "{base}[environments.default.flyway]\nenvironment = \"x\"\nloactions = [\"a\"]\n"
        ));
        assert_eq!(
            c.errors,
            [
                "environment in [environments.default.flyway] of a flyway.toml: Flyway refuses it (\"Unknown: 'environments.default.flyway.environment'\"), so evolve runs nothing either; move it to [flyway]",
                "loactions in [environments.default.flyway] of a flyway.toml: Flyway refuses it (\"Unknown: 'environments.default.flyway.loactions'\"), so evolve runs nothing either; did you mean locations? correct the key",
            ]
        );
        // What Flyway accepts there: its namespaces, placeholders, its own
        // keys; in the environment, a key Flyway warns about.
        let c = config(&format!(
            "{base}uurl = \"x\"\ndisplayName = \"D\"\n[flyway]\nlocations = [\"filesystem:sql\"]\ncolor = \"never\"\nbaselineMigrationPrefix = \"B\"\n[flyway.placeholders]\nx = \"1\"\n[flyway.postgresql.transactional]\nlock = false\n[environments.default.flyway]\ntable = \"h\"\n[environments.other.flyway]\nschemas = [\"ignored\"]\n"
        ));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.history_table.as_deref(), Some("h"));
        assert!(
            c.warnings.contains(
                &"environments.default.uurl is not a setting of a Flyway environment; it is ignored, as Flyway ignores it (with a warning); did you mean url?"
                    .to_string()
            ),
            "{:?}",
            c.warnings
        );
        assert!(
            c.warnings.contains(
                &"environments.default.displayName is not supported by evolve; it is ignored"
                    .to_string()
            ),
            "{:?}",
            c.warnings
        );
    }

    /// Flyway ignores a `FLYWAY_*` variable that names no setting (its
    /// `ConfigUtils.convertKey` has no name for it): evolve warns and
    /// goes on; the names it maps otherwise are Flyway's.
    #[test]
    fn an_unknown_flyway_variable_is_ignored_as_flyway_ignores_it() {
        let got = from_env(pairs(&[
            ("FLYWAY_LOACTIONS", "filesystem:sql"),
            ("FLYWAY_TELEMETRY_OPTOUT", "true"),
            ("FLYWAY_DRYRUN_OUTPUT", "o.sql"),
            ("FLYWAY_POSTGRESQL_TRANSACTIONAL_LOCK", "false"),
            ("FLYWAY_JDBC_PROPERTIES_SSL", "true"),
            ("FLYWAY_LOCATIONS", "filesystem:migrations"),
        ]));
        assert_eq!(
            got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            [
                "variable:FLYWAY_LOACTIONS",
                "flyway.dryRunOutput",
                "flyway.postgresql.transactional.lock",
                "flyway.jdbcProperties.ssl",
                "flyway.locations",
            ]
        );
        let c = FlywayConfig::from_pairs(&got);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.dir, Some(PathBuf::from("migrations")));
        assert!(
            c.warnings.contains(
                &"environment variable FLYWAY_LOACTIONS names no Flyway setting; it is ignored, as Flyway ignores it; did you mean FLYWAY_LOCATIONS?"
                    .to_string()
            ),
            "{:?}",
            c.warnings
        );
    }
}
