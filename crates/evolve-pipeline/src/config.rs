//! `evolve.toml`: where the state lives, where the admin API listens, and
//! the named connections.
//!
//! ```toml
//! state_dir = "evolve-state"            # embedded store (relative to the file)
//! admin_listen = "127.0.0.1:7800"
//! [connections.pg_conn]
//! url = "postgres://replicator:${PG_PASSWORD}@db.example:5432/shop"
//! ```
//!
//! `${NAME}` in a url is replaced by the environment variable `NAME` (an
//! error names the variable when it is unset; `$$` is a literal `$`).
//! Connection urls never appear in `Debug` output or in errors except
//! through [`evolve_pg::redact_url`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{PipelineError, Result};

/// The default `state_dir`.
pub const DEFAULT_STATE_DIR: &str = "evolve-state";
/// The default `admin_listen`.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:7800";

/// A parsed `evolve.toml`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The embedded store's directory (`pipeline.db` inside).
    pub state_dir: PathBuf,
    /// The admin API's address.
    pub admin_listen: String,
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
            connections: BTreeMap::new(),
        }
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
    fn toml_errors_do_not_quote_secrets() {
        let e = Config::parse(
            "[connections.pg]\nurl = \"postgres://u:hunter2@h/db\"\nbogus = 1\n",
            env,
        )
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
