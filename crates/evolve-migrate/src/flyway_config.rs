//! Flyway's configuration: `flyway.conf` (Java properties), `flyway.toml`
//! and the `FLYWAY_*` environment variables, read into the settings evolve
//! applies. A key evolve does not apply is named in a warning, never
//! dropped in silence.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The Flyway settings evolve applies; `None` where the configuration is
/// silent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlywayConfig {
    /// `url` (JDBC) with `user` and `password`, as a `postgres://` URL.
    pub database_url: Option<String>,
    /// The first `filesystem:` location.
    pub dir: Option<PathBuf>,
    /// `table`, in `defaultSchema` (else the first of `schemas`).
    pub history_schema: Option<String>,
    pub history_table: Option<String>,
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
    /// Keys evolve does not apply, each with why: one warning per key.
    pub warnings: Vec<String>,
}

/// A configuration file evolve cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ConfigError {
    pub line: usize,
    pub reason: String,
}

/// `flyway.conf`: `key=value` lines (also `key: value`), `#` and `!`
/// comments, a trailing `\` continues the value on the next line.
pub fn parse_conf(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let mut logical = trimmed.to_string();
        while logical.ends_with('\\') && !logical.ends_with("\\\\") {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let Some(at) = logical.find(['=', ':']) else {
            return Err(ConfigError {
                line: i + 1,
                reason: format!("{:?} is not key=value", excerpt(&logical)),
            });
        };
        let key = logical[..at].trim().to_string();
        let value = logical[at + 1..].trim().to_string();
        out.push((key, value));
    }
    Ok(out)
}

/// `flyway.toml`: the `[flyway]` table (with `[flyway.placeholders]`), and
/// `url`, `user` and `password` of `[environments.<name>]`, the environment
/// being `flyway.environment` (default `default`).
pub fn parse_toml(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
        line: e
            .span()
            .map(|s| 1 + text[..s.start.min(text.len())].matches('\n').count())
            .unwrap_or(1),
        reason: e.message().to_string(),
    })?;
    let mut out = Vec::new();
    let mut environment = "default".to_string();
    for (top, value) in &doc {
        match (top.as_str(), value) {
            ("flyway", toml::Value::Table(t)) => {
                for (k, v) in t {
                    if k == "environment"
                        && let toml::Value::String(e) = v
                    {
                        environment = e.clone();
                    }
                    flatten(&format!("flyway.{k}"), v, &mut out);
                }
            }
            ("environments", toml::Value::Table(_)) => {}
            (other, _) => out.push((other.to_string(), toml_text(value))),
        }
    }
    if let Some(toml::Value::Table(envs)) = doc.get("environments") {
        for (name, env) in envs {
            let toml::Value::Table(env) = env else {
                continue;
            };
            for (k, v) in env {
                if name == &environment {
                    flatten(&format!("flyway.{k}"), v, &mut out);
                } else {
                    out.push((format!("environments.{name}.{k}"), toml_text(v)));
                }
            }
        }
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
        if let Some(p) = rest.strip_prefix("PLACEHOLDERS_") {
            out.push((format!("flyway.placeholders.{}", p.to_lowercase()), value));
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
        out.push((format!("flyway.{key}"), value));
    }
    out
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

/// Keys of Flyway's that evolve accepts and has nothing to do for, given
/// the value that matches evolve's own behaviour.
const SAME_AS_EVOLVE: [(&str, &str); 7] = [
    ("sqlMigrationPrefix", "V"),
    ("repeatableSqlMigrationPrefix", "R"),
    ("sqlMigrationSeparator", "__"),
    ("sqlMigrationSuffixes", ".sql"),
    ("validateOnMigrate", "true"),
    ("encoding", "UTF-8"),
    ("cleanDisabled", "true"),
];

/// Keys of Flyway's that evolve does not apply, with why.
const UNSUPPORTED: [(&str, &str); 5] = [
    (
        "baselineOnMigrate",
        "run 'evolve migrate baseline' once instead",
    ),
    (
        "initSql",
        "evolve runs no SQL at the start of a session; put it in a beforeMigrate.sql callback",
    ),
    ("connectRetries", "evolve connects once; retry the command"),
    (
        "lockRetryCount",
        "evolve waits for the migration lock unless --no-wait is given",
    ),
    (
        "callbacks",
        "evolve runs only the SQL callbacks of the migrations directory",
    ),
];

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
        for (key, value) in pairs {
            settled.insert(key.clone(), value.clone());
        }
        for (key, value) in &settled {
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
                "environment" | "driver" => {}
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
        c.history_schema = default_schema.or_else(|| {
            schemas.and_then(|s| {
                s.split(',')
                    .map(str::trim)
                    .find(|s| !s.is_empty())
                    .map(str::to_string)
            })
        });
        if let Some(url) = url {
            match jdbc_to_postgres(&url, user.as_deref(), password.as_deref()) {
                Ok(u) => c.database_url = Some(u),
                Err(w) => c.warnings.push(w),
            }
        }
        c
    }
}

/// `jdbc:postgresql://host:port/db?params` with a user and password as a
/// `postgres://` URL.
fn jdbc_to_postgres(
    url: &str,
    user: Option<&str>,
    password: Option<&str>,
) -> Result<String, String> {
    let Some(rest) = url.strip_prefix("jdbc:postgresql://") else {
        return Err(
            "flyway.url is not a jdbc:postgresql:// URL; it is ignored, pass --database-url".into(),
        );
    };
    let auth = match (user, password) {
        (Some(u), Some(p)) => format!("{}:{}@", encode(u), encode(p)),
        (Some(u), None) => format!("{}@", encode(u)),
        _ => String::new(),
    };
    Ok(format!("postgres://{auth}{rest}"))
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

fn excerpt(s: &str) -> String {
    s.chars().take(40).collect()
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
            Ok(pairs(&[
                ("flyway.url", "jdbc:postgresql://h:5/db"),
                ("flyway.locations", "filesystem:sql,filesystem:more"),
                ("flyway.placeholders.x", "1"),
            ]))
        );
        assert_eq!(parse_conf("oops").unwrap_err().line, 1);
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
            ("flyway.sqlMigrationPrefix", "M"),
            ("flyway.outOfOrder", "perhaps"),
            ("flyway.user", "a b"),
            ("flyway.password", "p@ss"),
            ("flyway.url", "jdbc:postgresql://h:1/d?sslmode=require"),
        ]));
        assert_eq!(
            c.warnings,
            [
                "flyway.callbacks is not supported by evolve (evolve runs only the SQL callbacks of the migrations directory); it is ignored",
                "flyway.mixed is \"yes\", expected true or false; the setting is ignored",
                "flyway.outOfOrder is \"perhaps\", expected true or false; the setting is ignored",
                "flyway.sqlMigrationPrefix=M is not supported by evolve, which behaves as flyway.sqlMigrationPrefix=V; it is ignored",
            ]
        );
        assert_eq!(c.group, Some(true));
        assert_eq!(
            c.database_url.as_deref(),
            Some("postgres://a%20b:p%40ss@h:1/d?sslmode=require")
        );
    }
}
