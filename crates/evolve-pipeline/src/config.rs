//! `evolve.toml`: where the state lives, where the admin API listens, how
//! long change history is kept, and the named connections.
//!
//! ```toml
//! state_dir = "evolve-state"            # embedded store (relative to the file)
//! admin_listen = "127.0.0.1:7800"
//! retain_history = "10m"                # change feed kept for subscribe --as-of
//! [connections.pg_conn]
//! url = "postgres://replicator:${PG_PASSWORD}@db.example:5432/shop"
//! ```
//!
//! `${NAME}` in a url is replaced by the environment variable `NAME` (an
//! error names the variable when it is unset; `$$` is a literal `$`).
//! Connection urls never appear in `Debug` output or in errors except
//! through [`evolve_pg::redact_url`].
//!
//! `retain_history` is how long each interface's change feed is kept after
//! every sink has committed it (by upstream commit time), so that
//! subscribers can start from a recent position (`evolve subscribe
//! --as-of`, see [`crate::subscribe`]): a number and a unit, `ms`, `s`,
//! `m` (or `min`), `h` or `d`, parts added up (`1h30m`); `"0s"` keeps
//! nothing beyond what the sinks still need.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{PipelineError, Result};

/// The default `state_dir`.
pub const DEFAULT_STATE_DIR: &str = "evolve-state";
/// The default `admin_listen`.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:7800";
/// The default `retain_history`: ten minutes.
pub const DEFAULT_RETAIN_HISTORY: Duration = Duration::from_secs(600);

/// A parsed `evolve.toml`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The embedded store's directory (`pipeline.db` inside).
    pub state_dir: PathBuf,
    /// The admin API's address.
    pub admin_listen: String,
    /// How long the change feed is kept after every sink has it (by
    /// upstream commit time), for subscribers starting at a past position.
    pub retain_history: Duration,
    /// The named connections.
    pub connections: BTreeMap<String, Connection>,
}

/// A named connection: a PostgreSQL url whose password never shows.
#[derive(Clone)]
pub struct Connection {
    url: String,
}

impl Connection {
    /// A connection to `url` (already expanded).
    pub fn new(url: impl Into<String>) -> Connection {
        Connection { url: url.into() }
    }

    /// The url with any password in it, for connecting only.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The url with the password replaced by `***`.
    pub fn redacted(&self) -> String {
        evolve_pg::redact_url(&self.url)
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.redacted())
            .finish()
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<String>,
    admin_listen: Option<String>,
    retain_history: Option<toml::Value>,
    #[serde(default)]
    connections: BTreeMap<String, RawConnection>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    url: String,
}

impl Config {
    /// A config with defaults and no connections, with the state in
    /// `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Config {
        Config {
            state_dir: state_dir.into(),
            admin_listen: DEFAULT_ADMIN_LISTEN.to_string(),
            retain_history: DEFAULT_RETAIN_HISTORY,
            connections: BTreeMap::new(),
        }
    }

    /// Sets `retain_history`.
    pub fn with_retain_history(mut self, retain: Duration) -> Config {
        self.retain_history = retain;
        self
    }

    /// Adds (or replaces) a named connection.
    pub fn with_connection(mut self, name: impl Into<String>, url: impl Into<String>) -> Config {
        self.connections.insert(name.into(), Connection::new(url));
        self
    }

    /// Reads and parses `path`; a relative `state_dir` is taken relative to
    /// the file's directory. `${NAME}` is expanded from the process
    /// environment.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| PipelineError::Config {
            message: format!("could not read config file {}: {e}", path.display()),
        })?;
        let mut config = Config::parse(&text, |name| std::env::var(name).ok()).map_err(|e| {
            PipelineError::Config {
                message: format!("config file {}: {}", path.display(), e.primary()),
            }
        })?;
        if config.state_dir.is_relative() {
            let base = path.parent().unwrap_or(Path::new("."));
            config.state_dir = base.join(&config.state_dir);
        }
        Ok(config)
    }

    /// Parses the text of a config file, expanding `${NAME}` with `env`.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| PipelineError::Config {
            // toml's message quotes the offending line, which may hold a
            // literal password: keep only the first line.
            message: e
                .message()
                .lines()
                .next()
                .unwrap_or("invalid TOML")
                .to_string(),
        })?;
        let retain_history = match &raw.retain_history {
            None => DEFAULT_RETAIN_HISTORY,
            Some(toml::Value::String(text)) => {
                parse_duration(text).map_err(|problem| PipelineError::Config {
                    message: format!("retain_history: {problem}"),
                })?
            }
            Some(other) => {
                return Err(PipelineError::Config {
                    message: format!(
                        "retain_history: expected a duration in quotes like \"10m\", found a {}",
                        other.type_str()
                    ),
                });
            }
        };
        let mut connections = BTreeMap::new();
        for (name, c) in raw.connections {
            let url = expand(&c.url, &env).map_err(|problem| PipelineError::Config {
                message: format!("connections.{name}.url: {problem}"),
            })?;
            connections.insert(name, Connection::new(url));
        }
        Ok(Config {
            state_dir: PathBuf::from(raw.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into())),
            admin_listen: raw
                .admin_listen
                .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into()),
            retain_history,
            connections,
        })
    }

    /// The connection named `name`.
    pub fn connection(&self, name: &str) -> Result<&Connection> {
        self.connections
            .get(name)
            .ok_or_else(|| PipelineError::UnknownConnection {
                name: name.to_string(),
                known: self.connections.keys().cloned().collect(),
            })
    }
}

/// Parses `90s`, `10m`, `1h30m`, `500ms`, `2d`: numbers each followed by
/// a unit, added up.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{text:?} is not a duration; use a number and a unit (ms, s, m, h, d), e.g. \"10m\", \"1h\" or \"90s\""
        )
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let seconds_per = match &rest[..unit] {
            "ms" => None,
            "s" => Some(1),
            "m" | "min" => Some(60),
            "h" => Some(3_600),
            "d" => Some(86_400),
            _ => return Err(bad()),
        };
        rest = &rest[unit..];
        let part = match seconds_per {
            None => Duration::from_millis(number),
            Some(s) => number
                .checked_mul(s)
                .map(Duration::from_secs)
                .ok_or_else(bad)?,
        };
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    Ok(total)
}

/// Replaces `${NAME}` with `env(NAME)`; `$$` is a literal `$`.
fn expand(input: &str, env: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail
                .find('}')
                .ok_or_else(|| "unterminated ${...}".to_string())?;
            let name = &tail[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("invalid variable name in ${{{name}}}"));
            }
            let value =
                env(name).ok_or_else(|| format!("environment variable {name} is not set"))?;
            out.push_str(&value);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "PW").then(|| "s3cret".to_string())
    }

    #[test]
    fn defaults_and_expansion() {
        let c = Config::parse(
            "[connections.pg]\nurl = \"postgres://u:${PW}@h/db?x=$$1\"\n",
            env,
        )
        .unwrap();
        assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(c.admin_listen, DEFAULT_ADMIN_LISTEN);
        let pg = c.connection("pg").unwrap();
        assert_eq!(pg.url(), "postgres://u:s3cret@h/db?x=$1");
        let debug = format!("{c:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("u:***@h"), "{debug}");
    }

    #[test]
    fn errors_name_the_variable_not_the_secret() {
        let e = Config::parse(
            "[connections.pg]\nurl = \"postgres://u:${NOPE}@h/db\"\n",
            env,
        )
        .unwrap_err();
        assert!(e.to_string().contains("NOPE is not set"), "{e}");
        let e = Config::parse("state_dir = 1\n", env).unwrap_err();
        assert!(e.to_string().starts_with("ERROR: "), "{e}");
        let e = Config::new("x").connection("zz").unwrap_err();
        assert!(e.to_string().contains("connection \"zz\" does not exist"));
    }

    #[test]
    fn retain_history_parses_and_bad_values_name_the_key() {
        let c = Config::parse("", env).unwrap();
        assert_eq!(c.retain_history, DEFAULT_RETAIN_HISTORY);
        for (text, want) in [
            ("10m", Duration::from_secs(600)),
            ("1h", Duration::from_secs(3600)),
            ("90s", Duration::from_secs(90)),
            ("0s", Duration::ZERO),
            ("1h30m", Duration::from_secs(5400)),
            ("250ms", Duration::from_millis(250)),
            ("2min", Duration::from_secs(120)),
            ("1d", Duration::from_secs(86_400)),
        ] {
            let c = Config::parse(&format!("retain_history = \"{text}\"\n"), env).unwrap();
            assert_eq!(c.retain_history, want, "{text}");
        }
        for text in [
            "\"\"",
            "\"10\"",
            "\"ten minutes\"",
            "\"10 m\"",
            "\"-1s\"",
            "\"m\"",
            "\"99999999999999999999d\"",
            "600",
            "true",
        ] {
            let e = Config::parse(&format!("retain_history = {text}\n"), env).unwrap_err();
            assert!(
                e.primary().starts_with("retain_history: "),
                "{text}: {}",
                e.primary()
            );
        }
    }

    #[test]
    fn toml_errors_do_not_quote_secrets() {
        let e = Config::parse(
            "[connections.pg]\nurl = \"postgres://u:hunter2@h/db\"\nbogus = 1\n",
            env,
        )
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
