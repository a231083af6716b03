//! `evolve.toml`: where the state lives, where the admin API listens, how
//! long change history is kept, and the named connections.
//!
//! ```toml
//! state_dir = "evolve-state"            # embedded store (relative to the file)
//! admin_listen = "127.0.0.1:7800"
//! retain_history = "10m"                # change feed kept for subscribe --as-of
//! admin_token_file = "admin.token"      # or admin_token = "${EVOLVE_ADMIN_TOKEN}"
//! admin_allowed_hosts = ["pipeline.internal"]
//! [connections.pg_conn]
//! url = "postgres://replicator:${PG_PASSWORD}@db.example:5432/shop"
//! [connections.my_conn]                # MySQL or MariaDB, for FROM MYSQL sources
//! url = "mysql://evolve:${MY_PASSWORD}@db.example:3306/shop"
//! ```
//!
//! A connection whose url starts with `kafka://` is a Kafka cluster (for
//! Kafka sinks): the url lists the bootstrap brokers, `host:port` separated
//! by commas, and TLS and SASL are set beside it with libpq's names where
//! there is one ([`KafkaOptions`]):
//!
//! ```toml
//! [connections.k]
//! url = "kafka://broker1:9093,broker2:9093"
//! sslmode = "verify-full"          # disable (default), require, verify-ca, verify-full
//! sslrootcert = "ca.pem"           # relative to the config file
//! sslcert = "client.pem"           # with sslkey: a client certificate
//! sslkey = "client.key"
//! sasl_mechanism = "SCRAM-SHA-256" # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
//! user = "evolve"
//! password = "${KAFKA_PASSWORD}"
//! ```
//!
//! `${NAME}` in a url is replaced by the environment variable `NAME` (an
//! error names the variable when it is unset; `$$` is a literal `$`).
//! Connection urls never appear in `Debug` output or in errors except
//! through [`evolve_pg::redact_url`].
//!
//! `admin_token` (or `admin_token_file`, a file whose first line is the
//! token, relative to the config file) makes every admin endpoint but
//! `/metrics` require `Authorization: Bearer TOKEN`; an `admin_listen`
//! that is not a loopback address is refused without one (see
//! [`crate::admin`]). `admin_allowed_hosts` names the host names, besides
//! `localhost`, loopback addresses and the listen address, that clients
//! may use in the `Host` header.
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

/// The default [`Config::sink_load_rows`].
pub const DEFAULT_SINK_LOAD_ROWS: usize = 5_000;

/// The default [`Config::kafka_snapshot_memory_keys`]: about 150 MiB.
pub const DEFAULT_KAFKA_SNAPSHOT_MEMORY_KEYS: usize = 1_000_000;

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
    /// The admin API's bearer token, if it requires one.
    pub admin_token: Option<AdminToken>,
    /// Host names accepted in the admin API's `Host` header besides
    /// `localhost`, loopback addresses and the listen address.
    pub admin_allowed_hosts: Vec<String>,
    /// The named connections.
    pub connections: BTreeMap<String, Connection>,
    /// Documents per chunk of a sink's initial load (at most; a chunk is
    /// also cut at about 1 MiB): the load holds a few chunks in memory,
    /// whatever the size of the table. Not read from `evolve.toml`.
    pub sink_load_rows: usize,
    /// Keys an `ENVELOPE UPSERT` Kafka table's snapshot keeps in memory
    /// while it finds each key's last record (about 150 bytes each); past
    /// that they move to a file in the state directory.
    pub kafka_snapshot_memory_keys: usize,
    /// `admin_token_file` as written, read by [`Config::load`].
    token_file: Option<PathBuf>,
    /// Connections [`Config::load_lenient`] could not expand (a `${VAR}`
    /// not set), with the error [`Config::connection`] gives for them.
    unusable: BTreeMap<String, String>,
}

/// The admin API's bearer token; never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    /// A token; `None` when `text` is empty after trimming white space.
    pub fn new(text: &str) -> Option<AdminToken> {
        let text = text.trim();
        (!text.is_empty()).then(|| AdminToken(text.to_string()))
    }

    /// Why `text` cannot be a token, if it cannot: it travels in an HTTP
    /// `Authorization: Bearer` header, which carries visible ASCII only
    /// (a control character, a space or a non-ASCII letter would make
    /// every client's request fail).
    pub fn problem(text: &str) -> Option<&'static str> {
        let text = text.trim();
        if text.is_empty() {
            Some("is empty")
        } else if !text.chars().all(|c| c.is_ascii_graphic()) {
            Some(
                "holds a character an HTTP header cannot carry (a space, a control character or a non-ASCII letter); use letters, digits and punctuation",
            )
        } else {
            None
        }
    }

    /// The token, for comparing and sending only.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// Whether `offered` is this token, in time that does not depend on
    /// where they first differ.
    pub fn matches(&self, offered: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        let mut diff = mine.len() ^ offered.len();
        for (i, b) in mine.iter().enumerate() {
            diff |= usize::from(b ^ offered.get(i).copied().unwrap_or(0));
        }
        diff == 0
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

/// A named connection: a PostgreSQL url whose password never shows, or a
/// `kafka://` url with its [`KafkaOptions`].
#[derive(Clone)]
pub struct Connection {
    url: String,
    kafka: KafkaOptions,
}

/// What kind of system a connection reaches, by its url's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionKind {
    /// `postgres://`, `postgresql://` or a `key=value` conninfo string.
    Postgres,
    /// `kafka://host:port[,host:port...]`.
    Kafka,
    /// `http://` or `https://`: a Confluent-compatible schema registry.
    Registry,
}

impl ConnectionKind {
    /// The kind's name in messages: `postgres` or `kafka`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::Postgres => "postgres",
            ConnectionKind::Kafka => "kafka",
            ConnectionKind::Registry => "schema registry",
        }
    }
}

/// The settings beside a connection's url: a `kafka://` connection's TLS
/// and SASL ([`evolve_core::kafka`]), or a schema registry's `user`,
/// `password` and `sslrootcert`. The password never shows in `Debug`
/// output or errors.
pub use evolve_core::kafka::ClientOptions as KafkaOptions;

impl Connection {
    /// A connection to `url` (already expanded).
    pub fn new(url: impl Into<String>) -> Connection {
        Connection {
            url: url.into(),
            kafka: KafkaOptions::default(),
        }
    }

    /// A `kafka://` connection with TLS and SASL settings.
    pub fn kafka(url: impl Into<String>, options: KafkaOptions) -> Connection {
        Connection {
            url: url.into(),
            kafka: options,
        }
    }

    /// What the url's scheme says it reaches.
    pub fn kind(&self) -> ConnectionKind {
        if self.url.starts_with("kafka://") {
            ConnectionKind::Kafka
        } else if is_registry_url(&self.url) {
            ConnectionKind::Registry
        } else {
            ConnectionKind::Postgres
        }
    }

    /// A `kafka://` url's brokers, `host:port,host:port`.
    pub fn kafka_brokers(&self) -> Option<&str> {
        self.url.strip_prefix("kafka://")
    }

    /// A `kafka://` connection's TLS and SASL settings.
    pub fn kafka_options(&self) -> &KafkaOptions {
        &self.kafka
    }

    /// The url with any password in it, for connecting only.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The url with the password replaced by `***`.
    pub fn redacted(&self) -> String {
        evolve_pg::redact_url(&self.url)
    }

    /// Whether this is a MySQL or MariaDB connection
    /// (`mysql://user:password@host:port/db`), which only MySQL sources use.
    pub fn is_mysql(&self) -> bool {
        self.url
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("mysql://"))
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Connection");
        d.field("url", &self.redacted());
        if !self.kafka.is_empty() {
            d.field("kafka", &self.kafka);
        }
        d.finish()
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<String>,
    admin_listen: Option<String>,
    retain_history: Option<toml::Value>,
    admin_token: Option<String>,
    admin_token_file: Option<String>,
    #[serde(default)]
    admin_allowed_hosts: Vec<String>,
    #[serde(default)]
    connections: BTreeMap<String, RawConnection>,
    kafka_snapshot_memory_keys: Option<toml::Value>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    url: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
    sasl_mechanism: Option<String>,
    user: Option<String>,
    password: Option<String>,
}

impl RawConnection {
    /// The Kafka options of connection `name` at `url`, checked: only a
    /// `kafka://` url takes them, with values these are known for.
    fn kafka_options(
        self,
        name: &str,
        url: &str,
        env: &impl Fn(&str) -> Option<String>,
    ) -> std::result::Result<KafkaOptions, String> {
        let given: Vec<&str> = [
            ("sslmode", self.sslmode.is_some()),
            ("sslrootcert", self.sslrootcert.is_some()),
            ("sslcert", self.sslcert.is_some()),
            ("sslkey", self.sslkey.is_some()),
            ("sasl_mechanism", self.sasl_mechanism.is_some()),
            ("user", self.user.is_some()),
            ("password", self.password.is_some()),
        ]
        .into_iter()
        .filter_map(|(option, set)| set.then_some(option))
        .collect();
        if is_registry_url(url) {
            return self.registry_options(name, url, &given, env);
        }
        let Some(brokers) = url.strip_prefix("kafka://") else {
            if let Some(option) = given.first() {
                return Err(format!(
                    "connections.{name}.{option}: only a kafka:// connection takes {option} beside its url; \
                     a PostgreSQL connection says it in its url (e.g. ?sslmode=verify-full)"
                ));
            }
            return Ok(KafkaOptions::default());
        };
        evolve_core::kafka::check_brokers(
            brokers,
            "kafka://host:port[,host:port...]",
            "set sslmode, user, password and sasl_mechanism beside the url",
        )
        .map_err(|problem| format!("connections.{name}.url: {problem}"))?;
        let password = self.expanded_password(name, env)?;
        let mut options = match password {
            Some(password) => KafkaOptions::default().with_password(password),
            None => KafkaOptions::default(),
        };
        options.sslmode = self.sslmode;
        options.sslrootcert = self.sslrootcert.map(PathBuf::from);
        options.sslcert = self.sslcert.map(PathBuf::from);
        options.sslkey = self.sslkey.map(PathBuf::from);
        options.sasl_mechanism = self.sasl_mechanism;
        options.user = self.user;
        options.check().map_err(|p| match p.option {
            Some(option) => format!("connections.{name}.{option}: {}", p.problem),
            None => format!("connections.{name}: {}", p.problem),
        })?;
        Ok(options)
    }
}
impl RawConnection {
    /// `password`, with `${VAR}` expanded.
    fn expanded_password(
        &self,
        name: &str,
        env: &impl Fn(&str) -> Option<String>,
    ) -> std::result::Result<Option<String>, String> {
        self.password
            .as_deref()
            .map(|p| {
                expand(p, env).map_err(|problem| format!("connections.{name}.password: {problem}"))
            })
            .transpose()
    }

    /// A schema registry connection's options: `user` and `password` for
    /// basic authentication, `sslrootcert` for an `https://` registry (its
    /// certificate and host name are checked against it).
    fn registry_options(
        self,
        name: &str,
        url: &str,
        given: &[&str],
        env: &impl Fn(&str) -> Option<String>,
    ) -> std::result::Result<KafkaOptions, String> {
        if let Some(option) = given
            .iter()
            .find(|o| !["user", "password", "sslrootcert"].contains(o))
        {
            return Err(format!(
                "connections.{name}.{option}: a schema registry connection takes user, password and sslrootcert beside its url"
            ));
        }
        let rest = url.split_once("://").map_or("", |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or("");
        if authority.is_empty() || authority.contains(['@', ' ', '?']) {
            return Err(format!(
                "connections.{name}.url: write the registry as http://host:port or https://host:port, with user and password beside the url"
            ));
        }
        if self.user.is_some() != self.password.is_some() {
            return Err(format!(
                "connections.{name}: user and password go together; set both for basic authentication, or neither"
            ));
        }
        if url.starts_with("https://") && self.sslrootcert.is_none() {
            return Err(format!(
                "connections.{name}: an https:// registry needs sslrootcert, the PEM file of the CA certificates its certificate is checked against"
            ));
        }
        if url.starts_with("http://") && self.sslrootcert.is_some() {
            return Err(format!(
                "connections.{name}.sslrootcert is set but the url is http://; write https:// to use TLS"
            ));
        }
        let password = self.expanded_password(name, env)?;
        let mut options = match password {
            Some(password) => KafkaOptions::default().with_password(password),
            None => KafkaOptions::default(),
        };
        options.sslrootcert = self.sslrootcert.map(PathBuf::from);
        options.user = self.user;
        Ok(options)
    }
}

/// The text of the admin token's file, refused (as ssh refuses a key
/// file) when group or others may read it: whoever can read the token
/// has the admin API.
fn read_token_file(file: &Path) -> std::result::Result<String, String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(file) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} can be read by group or others (mode {mode:04o}); run chmod 0600 {}",
                    file.display(),
                    file.display()
                ));
            }
        }
    }
    std::fs::read_to_string(file).map_err(|e| format!("could not read {}: {e}", file.display()))
}

/// Whether `url` names a schema registry (`http://`, `https://`).
fn is_registry_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

impl Config {
    /// A config with defaults and no connections, with the state in
    /// `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Config {
        Config {
            state_dir: state_dir.into(),
            admin_listen: DEFAULT_ADMIN_LISTEN.to_string(),
            retain_history: DEFAULT_RETAIN_HISTORY,
            admin_token: None,
            admin_allowed_hosts: Vec::new(),
            connections: BTreeMap::new(),
            sink_load_rows: DEFAULT_SINK_LOAD_ROWS,
            kafka_snapshot_memory_keys: DEFAULT_KAFKA_SNAPSHOT_MEMORY_KEYS,
            token_file: None,
            unusable: BTreeMap::new(),
        }
    }

    /// Sets [`Config::kafka_snapshot_memory_keys`].
    pub fn with_kafka_snapshot_memory_keys(mut self, keys: usize) -> Config {
        self.kafka_snapshot_memory_keys = keys;
        self
    }

    /// Sets [`Config::sink_load_rows`] (at least 1).
    pub fn with_sink_load_rows(mut self, rows: usize) -> Config {
        self.sink_load_rows = rows.max(1);
        self
    }

    /// Sets the admin API's listen address.
    pub fn with_admin_listen(mut self, listen: impl Into<String>) -> Config {
        self.admin_listen = listen.into();
        self
    }

    /// Sets (or clears) the admin API's bearer token.
    pub fn with_admin_token(mut self, token: Option<AdminToken>) -> Config {
        self.admin_token = token;
        self
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
        Config::load_with(path, false)
    }

    /// [`Config::load`] for a command that uses only some connections
    /// (`evolve replicate skip`, `evolve rollout`): a connection whose
    /// `${VAR}` is not set is an error only when the command asks for it
    /// ([`Config::connection`]).
    pub fn load_lenient(path: &Path) -> Result<Config> {
        Config::load_with(path, true)
    }

    fn load_with(path: &Path, lenient: bool) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| PipelineError::Config {
            message: format!("could not read config file {}: {e}", path.display()),
        })?;
        let mut config = Config::parse_with(&text, |name| std::env::var(name).ok(), lenient)
            .map_err(|e| PipelineError::Config {
                message: format!("config file {}: {}", path.display(), e.primary()),
            })?;
        for message in config.unusable.values_mut() {
            *message = format!("config file {}: {message}", path.display());
        }
        let base = path.parent().unwrap_or(Path::new("."));
        if config.state_dir.is_relative() {
            config.state_dir = base.join(&config.state_dir);
        }
        for connection in config.connections.values_mut() {
            let k = &mut connection.kafka;
            for file in [&mut k.sslrootcert, &mut k.sslcert, &mut k.sslkey]
                .into_iter()
                .flatten()
            {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        if let Some(file) = config.token_file.take() {
            let file = base.join(file);
            let token = read_token_file(&file).map_err(|problem| PipelineError::Config {
                message: format!(
                    "config file {}: admin_token_file: {problem}",
                    path.display()
                ),
            })?;
            let first = token.lines().next().unwrap_or_default();
            if let Some(problem) = AdminToken::problem(first) {
                return Err(PipelineError::Config {
                    message: format!(
                        "config file {}: admin_token_file: the first line of {} {problem}; write the token on its first line",
                        path.display(),
                        file.display()
                    ),
                });
            }
            config.admin_token = AdminToken::new(first);
        }
        Ok(config)
    }

    /// Parses the text of a config file, expanding `${NAME}` with `env`.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Config> {
        Config::parse_with(text, env, false)
    }

    fn parse_with(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
        lenient: bool,
    ) -> Result<Config> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| PipelineError::Config {
            message: toml_problem(text, &e),
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
        let kafka_snapshot_memory_keys = match &raw.kafka_snapshot_memory_keys {
            None => DEFAULT_KAFKA_SNAPSHOT_MEMORY_KEYS,
            Some(toml::Value::Integer(n)) if *n >= 0 => usize::try_from(*n).unwrap_or(usize::MAX),
            Some(other) => {
                let found = match other {
                    toml::Value::Integer(n) => n.to_string(),
                    other => format!("a {}", other.type_str()),
                };
                return Err(PipelineError::Config {
                    message: format!(
                        "kafka_snapshot_memory_keys: expected a number of keys (0 or more), found {found}"
                    ),
                });
            }
        };
        if raw.admin_token.is_some() && raw.admin_token_file.is_some() {
            return Err(PipelineError::Config {
                message: "admin_token and admin_token_file are both set; keep one".into(),
            });
        }
        let admin_token = match &raw.admin_token {
            None => None,
            Some(text) => {
                let text = expand(text, &env).map_err(|problem| PipelineError::Config {
                    message: format!("admin_token: {problem}"),
                })?;
                if let Some(problem) = AdminToken::problem(&text) {
                    return Err(PipelineError::Config {
                        message: format!("admin_token {problem}; set a token or remove the line"),
                    });
                }
                AdminToken::new(&text)
            }
        };
        for host in &raw.admin_allowed_hosts {
            if host.is_empty() || host.contains(['/', ' ', '@']) {
                return Err(PipelineError::Config {
                    message: format!(
                        "admin_allowed_hosts: {host:?} is not a host name; list names like \"pipeline.internal\""
                    ),
                });
            }
        }
        let mut connections = BTreeMap::new();
        let mut unusable = BTreeMap::new();
        for (name, c) in raw.connections {
            let expanded = expand(&c.url, &env)
                .map_err(|problem| format!("connections.{name}.url: {problem}"))
                .and_then(|url| {
                    let kafka = c.kafka_options(&name, &url, &env)?;
                    // A PostgreSQL connection string is checked now, as
                    // far as it goes by itself: a port that is not one
                    // is said at start, not at the first CREATE SOURCE.
                    let lower = url.to_ascii_lowercase();
                    if lower.starts_with("postgres://")
                        || lower.starts_with("postgresql://")
                        || !url.contains("://")
                    {
                        evolve_pg::check_url(&url)
                            .map_err(|e| format!("connections.{name}.url: {e}"))?;
                    }
                    Ok((url, kafka))
                });
            match expanded {
                Ok((url, kafka)) => {
                    connections.insert(name, Connection::kafka(url, kafka));
                }
                Err(message) if lenient => {
                    unusable.insert(name, message);
                }
                Err(message) => return Err(PipelineError::Config { message }),
            }
        }
        Ok(Config {
            state_dir: PathBuf::from(raw.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into())),
            admin_listen: raw
                .admin_listen
                .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into()),
            retain_history,
            admin_token,
            admin_allowed_hosts: raw
                .admin_allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            connections,
            sink_load_rows: DEFAULT_SINK_LOAD_ROWS,
            kafka_snapshot_memory_keys,
            token_file: raw.admin_token_file.map(PathBuf::from),
            unusable,
        })
    }

    /// What a client of the admin API needs of the config file at `path`:
    /// the listen address and the token (from `admin_token`, expanded from
    /// the environment, or `admin_token_file`). Connections are not
    /// expanded, so their variables need not be set.
    pub fn load_admin(path: &Path) -> Result<(String, Option<AdminToken>)> {
        let bad = |message: String| PipelineError::Config {
            message: format!("config file {}: {message}", path.display()),
        };
        let text = std::fs::read_to_string(path).map_err(|e| PipelineError::Config {
            message: format!("could not read config file {}: {e}", path.display()),
        })?;
        let raw: RawConfig = toml::from_str(&text).map_err(|e| bad(toml_problem(&text, &e)))?;
        let listen = raw
            .admin_listen
            .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into());
        let token = match (raw.admin_token, raw.admin_token_file) {
            (Some(text), None) => {
                let text = expand(&text, &|name: &str| std::env::var(name).ok())
                    .map_err(|p| bad(format!("admin_token: {p}")))?;
                AdminToken::new(&text)
            }
            (None, Some(file)) => {
                let file = path.parent().unwrap_or(Path::new(".")).join(file);
                let text = read_token_file(&file)
                    .map_err(|problem| bad(format!("admin_token_file: {problem}")))?;
                AdminToken::new(text.lines().next().unwrap_or_default())
            }
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(bad(
                    "admin_token and admin_token_file are both set; keep one".into(),
                ));
            }
        };
        Ok((listen, token))
    }

    /// The connection named `name`.
    pub fn connection(&self, name: &str) -> Result<&Connection> {
        if let Some(message) = self.unusable.get(name) {
            return Err(PipelineError::Config {
                message: message.clone(),
            });
        }
        self.connections
            .get(name)
            .ok_or_else(|| PipelineError::UnknownConnection {
                name: name.to_string(),
                known: self.connections.keys().cloned().collect(),
            })
    }
}

/// A config file's TOML error as one line: its line, the key written on
/// it, and what is wrong, without the values serde's message quotes
/// (`invalid type: integer `123456`, expected a string` for `password =
/// 123456`, or a whole url with its password written where a table
/// belongs). toml's own rendering adds the offending line itself, so
/// neither it nor the message's values are kept.
fn toml_problem(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().lines().next().unwrap_or("invalid TOML");
    let message = match ["invalid type: ", "invalid value: ", "invalid length "]
        .into_iter()
        .find(|p| message.starts_with(p))
    {
        Some(_) => without_values(message),
        None => message.to_string(),
    }
    .replace("struct RawConnection", "a table of url and options")
    .replace("struct RawConfig", "a table");
    let Some(span) = e.span() else {
        return message;
    };
    let start = span.start.min(text.len());
    let line = text.as_bytes()[..start]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1;
    let key = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        });
    match key {
        Some(key) => format!("line {line}, {key}: {message}"),
        None => format!("line {line}: {message}"),
    }
}

/// `message` without what it quotes between backticks or double quotes
/// (and the space before it): serde's rendering of the value it refused.
fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        if c == '`' || c == '"' {
            if out.ends_with(' ') {
                out.pop();
            }
            // A string's Debug form escapes its quotes; skip to the
            // closing one, past any backslash escape.
            while let Some(inner) = chars.next() {
                if inner == '\\' && c == '"' {
                    chars.next();
                } else if inner == c {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses `90s`, `10m`, `1h30m`, `500ms`, `2d`: numbers each followed by
/// a unit, added up ([`evolve_core::control::parse_duration`]).
fn parse_duration(text: &str) -> Result<Duration, String> {
    evolve_core::control::parse_duration(text.trim()).ok_or_else(|| {
        format!(
            "{text:?} is not a duration; use {}",
            evolve_core::control::DURATION_FORMAT
        )
    })
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

    /// A PostgreSQL connection string is checked as far as it goes by
    /// itself when the file is read; the password never shows.
    #[test]
    fn postgres_urls_are_checked_when_read() {
        for (url, said) in [
            (
                "postgres://u:${PW}@h:99999/db",
                "connections.pg.url: connection string postgres://u:***@h:99999/db is not valid",
            ),
            ("postgres://[::1/db", "has no closing"),
            ("host=h port=abc password=${PW}", "password=***"),
            (
                "postgres://h/db?sslmode=bogus",
                "sslmode \"bogus\" is not one of",
            ),
        ] {
            let e =
                Config::parse(&format!("[connections.pg]\nurl = \"{url}\"\n"), env).unwrap_err();
            assert!(e.primary().contains(said), "{url}: {}", e.primary());
            assert!(!e.primary().contains("s3cret"), "{}", e.primary());
        }
        // Other schemes are not PostgreSQL's to check.
        for url in ["mysql://u@h:3306/db", "kafka://h:9092", "http://h:8081"] {
            Config::parse(&format!("[connections.c]\nurl = \"{url}\"\n"), env).unwrap();
        }
    }

    /// Strict, a connection whose variable is not set fails the file;
    /// lenient (for commands that use some connections), only a request
    /// for that connection fails, with the same message.
    #[test]
    fn lenient_configs_fail_only_for_the_connection_used() {
        let text = "[connections.up]\nurl = \"postgres://u:${UP_PW}@h/db\"\n\
                    [connections.node]\nurl = \"postgres://u:${PW}@n/db\"\n";
        let strict = Config::parse(text, env).unwrap_err();
        assert!(
            strict
                .to_string()
                .contains("connections.up.url: environment variable UP_PW is not set"),
            "{strict}"
        );
        let c = Config::parse_with(text, env, true).unwrap();
        assert_eq!(
            c.connection("node").unwrap().url(),
            "postgres://u:s3cret@n/db"
        );
        let e = c.connection("up").unwrap_err();
        assert!(
            e.to_string()
                .contains("connections.up.url: environment variable UP_PW is not set"),
            "{e}"
        );
        assert!(matches!(
            c.connection("other"),
            Err(PipelineError::UnknownConnection { .. })
        ));
    }

    #[test]
    fn defaults_and_expansion() {
        let c = Config::parse(
            "[connections.pg]\nurl = \"postgres://u:${PW}@h/db?application_name=$$1\"\n",
            env,
        )
        .unwrap();
        assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(c.admin_listen, DEFAULT_ADMIN_LISTEN);
        let pg = c.connection("pg").unwrap();
        assert_eq!(pg.url(), "postgres://u:s3cret@h/db?application_name=$1");
        let debug = format!("{c:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("u:***@h"), "{debug}");
    }

    #[test]
    fn kafka_connections_and_their_options() {
        let c = Config::parse(
            "[connections.k]\nurl = \"kafka://b1:9092,b2:9093\"\nsslmode = \"verify-full\"\n\
             sslrootcert = \"ca.pem\"\nsasl_mechanism = \"scram-sha-256\"\nuser = \"ev\"\n\
             password = \"${PW}\"\n[connections.pg]\nurl = \"postgres://h/db\"\n",
            env,
        )
        .unwrap();
        let k = c.connection("k").unwrap();
        assert_eq!(k.kind(), ConnectionKind::Kafka);
        assert_eq!(k.kafka_brokers(), Some("b1:9092,b2:9093"));
        let o = k.kafka_options();
        assert_eq!(o.sasl_mechanism.as_deref(), Some("SCRAM-SHA-256"));
        assert_eq!(o.password(), Some("s3cret"));
        assert_eq!(c.connection("pg").unwrap().kind(), ConnectionKind::Postgres);
        let debug = format!("{c:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        let bad = |text: &str| Config::parse(text, env).unwrap_err().to_string();
        for (text, want) in [
            (
                "[connections.k]\nurl = \"kafka://\"\n",
                "connections.k.url: kafka:// names no broker",
            ),
            (
                "[connections.k]\nurl = \"kafka://u:s3cret@h:9092\"\n",
                "connections.k.url: a kafka:// url takes no user or password",
            ),
            (
                "[connections.k]\nurl = \"kafka://h:9092?sasl_mechanism=PLAIN&user=u&password=s3cret\"\n",
                "connections.k.url: a kafka:// url here takes no options after '?'; set sslmode, user",
            ),
            (
                "[connections.k]\nurl = \"kafka://h\"\n",
                "\"h\" is not host:port",
            ),
            (
                "[connections.pg]\nurl = \"postgres://h/db\"\nsslmode = \"require\"\n",
                "connections.pg.sslmode: only a kafka:// connection takes sslmode",
            ),
            (
                "[connections.k]\nurl = \"kafka://h:1\"\nsslmode = \"on\"\n",
                "connections.k.sslmode: \"on\" is not one of",
            ),
            (
                "[connections.k]\nurl = \"kafka://h:1\"\nsslrootcert = \"ca.pem\"\n",
                "connections.k.sslrootcert: it is set but sslmode is not",
            ),
            (
                "[connections.k]\nurl = \"kafka://h:1\"\nuser = \"u\"\npassword = \"s3cret\"\n",
                "sasl_mechanism, user and password go together",
            ),
            (
                "[connections.k]\nurl = \"kafka://h:1\"\nsasl_mechanism = \"GSSAPI\"\nuser = \"u\"\npassword = \"p\"\n",
                "\"GSSAPI\" is not one of PLAIN",
            ),
        ] {
            let e = bad(text);
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
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
    fn kafka_snapshot_memory_keys_is_read_and_bad_values_name_the_key() {
        let c = Config::parse("", env).unwrap();
        assert_eq!(c.kafka_snapshot_memory_keys, 1_000_000);
        let c = Config::parse("kafka_snapshot_memory_keys = 250_000\n", env).unwrap();
        assert_eq!(c.kafka_snapshot_memory_keys, 250_000);
        for text in ["-1", "\"many\"", "1.5"] {
            let e =
                Config::parse(&format!("kafka_snapshot_memory_keys = {text}\n"), env).unwrap_err();
            assert!(
                e.primary().contains("kafka_snapshot_memory_keys"),
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

    #[test]
    fn admin_token_and_hosts() {
        let c = Config::parse(
            "admin_token = \"${PW}\"\nadmin_allowed_hosts = [\"Pipe.Internal\"]\n",
            env,
        )
        .unwrap();
        let token = c.admin_token.clone().unwrap();
        assert_eq!(token.secret(), "s3cret");
        assert!(token.matches(b"s3cret"));
        assert!(!token.matches(b"s3cre"));
        assert!(!token.matches(b"s3cret!"));
        assert!(!token.matches(b"S3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(c.admin_allowed_hosts, vec!["pipe.internal".to_string()]);
        assert!(Config::parse("", env).unwrap().admin_token.is_none());
        // A token no client could send in a header is refused, unshown.
        let e = Config::parse("admin_token = \"bad token\\u0001\"\n", env).unwrap_err();
        assert!(
            e.primary().contains("an HTTP header cannot carry"),
            "{}",
            e.primary()
        );
        assert!(!e.primary().contains("bad token"), "{}", e.primary());
        for bad in [
            "admin_token = \"  \"\n",
            "admin_token = \"a b\"\n",
            "admin_token = \"a\"\nadmin_token_file = \"f\"\n",
            "admin_allowed_hosts = [\"http://x/\"]\n",
        ] {
            let e = Config::parse(bad, env).unwrap_err();
            assert!(e.primary().contains("admin_"), "{bad}: {}", e.primary());
        }
    }

    #[test]
    fn admin_token_file_is_read_relative_to_the_config() {
        let dir = std::env::temp_dir().join(format!("evolve-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let private = |file: &str, text: &str| {
            use std::os::unix::fs::PermissionsExt;
            let file = dir.join(file);
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        std::fs::write(dir.join("admin.token"), "tok-123\nignored\n").unwrap();
        let path = dir.join("evolve.toml");
        std::fs::write(&path, "admin_token_file = \"admin.token\"\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                dir.join("admin.token"),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
        }
        let e = Config::load(&path).unwrap_err();
        assert!(
            e.primary()
                .contains("can be read by group or others (mode 0644); run chmod 0600"),
            "{}",
            e.primary()
        );
        assert!(!e.primary().contains("tok-123"), "{}", e.primary());
        private("admin.token", "tok-123\nignored\n");
        let c = Config::load(&path).unwrap();
        assert_eq!(c.admin_token.unwrap().secret(), "tok-123");
        std::fs::write(&path, "admin_token_file = \"missing.token\"\n").unwrap();
        let e = Config::load(&path).unwrap_err();
        assert!(e.primary().contains("admin_token_file"), "{}", e.primary());
        private("tab.token", "tok\t123\n");
        std::fs::write(&path, "admin_token_file = \"tab.token\"\n").unwrap();
        let e = Config::load(&path).unwrap_err();
        assert!(
            e.primary().contains("an HTTP header cannot carry"),
            "{}",
            e.primary()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn toml_errors_name_the_line_and_key_and_never_a_value() {
        let bad = |text: &str| Config::parse(text, env).unwrap_err().primary();
        for (text, want) in [
            (
                "[connections.k]\nurl = \"postgres://h/db\"\npassword = 123456\n",
                "line 3, password: invalid type: integer, expected a string",
            ),
            (
                "state_dir = 5\n",
                "line 1, state_dir: invalid type: integer, expected a string",
            ),
            (
                "[connections]\npg = \"postgres://u:s3cret@h/db\"\n",
                "line 2, pg: invalid type: string, expected a table of url and options",
            ),
            (
                "[connections.k]\nurl = \"postgres://h/db\"\npasswd = \"x\"\n",
                "line 3, passwd: unknown field `passwd`, expected one of",
            ),
            ("a = \"unterminated\n", "line 1"),
        ] {
            let got = bad(text);
            assert!(got.starts_with(want), "{text:?}: {got}");
            assert!(!got.contains("123456") && !got.contains("s3cret"), "{got}");
        }
        assert_eq!(
            without_values(r#"invalid type: string "a \"b\" `c`", expected x"#),
            "invalid type: string, expected x"
        );
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// Where the generated files hold secrets: the environment's
        /// `PW` and the literals below, only ever written as a password,
        /// a url's password or the admin token.
        const SECRETS: [&str; 3] = ["s3cret", "123456", "pa55word"];

        fn env(name: &str) -> Option<String> {
            (name == "PW").then(|| "s3cret".to_string())
        }

        fn secret() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "\"s3cret\"",
                "\"${PW}\"",
                "123456",
                "\"pa55word\"",
                "true",
                "[\"s3cret\"]",
                "{ a = \"s3cret\" }",
                "\"\"",
                "\"${NOPE}\"",
                "\"${PW\"",
            ])
        }

        fn url() -> impl Strategy<Value = String> {
            (
                prop::sample::select(vec![
                    "postgres",
                    "postgresql",
                    "mysql",
                    "kafka",
                    "http",
                    "https",
                    "ftp",
                    "",
                ]),
                prop::sample::select(vec!["", "u@", "u:s3cret@", "u:${PW}@", ":pa55word@"]),
                prop::sample::select(vec!["h", "b1,b2", "", "h h", "[::1]", "${HOST}"]),
                prop::sample::select(vec!["", ":9092", ":5432", ":x", ":"]),
                prop::sample::select(vec!["", "/db", "/db?sslmode=require", "/${DB}"]),
            )
                .prop_map(|(scheme, userinfo, host, port, path)| {
                    let scheme = if scheme.is_empty() {
                        String::new()
                    } else {
                        format!("{scheme}://")
                    };
                    format!("{scheme}{userinfo}{host}{port}{path}")
                })
        }

        fn connection_line() -> impl Strategy<Value = String> {
            prop_oneof![
                url().prop_map(|u| format!("url = \"{u}\"")),
                secret().prop_map(|s| format!("password = {s}")),
                prop::sample::select(vec![
                    "user = \"u\"",
                    "user = 5",
                    "sslmode = \"verify-full\"",
                    "sslmode = \"require\"",
                    "sslmode = \"on\"",
                    "sslrootcert = \"ca.pem\"",
                    "sslcert = \"c.pem\"",
                    "sslkey = \"k.pem\"",
                    "sasl_mechanism = \"scram-sha-256\"",
                    "sasl_mechanism = \"PLAIN\"",
                    "sasl_mechanism = \"gssapi\"",
                    "port = 5432",
                    "url = 5",
                ])
                .prop_map(String::from),
            ]
        }

        fn top_line() -> impl Strategy<Value = String> {
            prop_oneof![
                secret().prop_map(|s| format!("admin_token = {s}")),
                prop::sample::select(vec![
                    "state_dir = \"state\"",
                    "state_dir = 5",
                    "admin_listen = \"127.0.0.1:9000\"",
                    "retain_history = \"1h30m\"",
                    "retain_history = \"10 minutes\"",
                    "retain_history = \"99999999999999999999d\"",
                    "retain_history = 5",
                    "admin_token_file = \"t\"",
                    "admin_allowed_hosts = [\"pipe.internal\", \"a b\"]",
                    "admin_allowed_hosts = \"x\"",
                    "kafka_snapshot_memory_keys = 10",
                    "kafka_snapshot_memory_keys = -1",
                    "kafka_snapshot_memory_keys = \"x\"",
                    "unknown = 1",
                ])
                .prop_map(String::from),
            ]
        }

        fn document() -> impl Strategy<Value = String> {
            (
                prop::collection::vec(top_line(), 0..4),
                prop::collection::vec(
                    (
                        prop::sample::select(vec!["pg", "k", "my", "csr", "k"]),
                        prop::collection::vec(connection_line(), 0..5),
                    ),
                    0..3,
                ),
                prop::option::of(url()),
            )
                .prop_map(|(top, connections, inline)| {
                    let mut text = top.join("\n");
                    text.push('\n');
                    for (name, lines) in connections {
                        text.push_str(&format!("[connections.{name}]\n{}\n", lines.join("\n")));
                    }
                    if let Some(url) = inline {
                        // A url written where its table belongs.
                        text.push_str(&format!("[connections]\nx = \"{url}\"\n"));
                    }
                    text
                })
        }

        fn check(text: &str, result: &Result<Config>, secrets: bool) {
            match result {
                Ok(config) => {
                    let debug = format!("{config:?}");
                    for s in SECRETS.iter().filter(|_| secrets) {
                        assert!(!debug.contains(s), "{text:?}: {debug}");
                    }
                }
                Err(e) => {
                    let message = e.primary();
                    assert!(
                        !message.is_empty() && !message.contains('\n'),
                        "{text:?}: {message:?}"
                    );
                    for s in SECRETS.iter().filter(|_| secrets) {
                        assert!(!message.contains(s), "{text:?} gave {message:?}");
                    }
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            /// Whatever the file holds, parsing gives a config or one
            /// line of error, and neither shows a secret.
            #[test]
            fn config_files_never_panic_nor_show_a_secret(text in document()) {
                check(&text, &Config::parse(&text, env), true);
            }

            /// The same files with one byte dropped or one character put in
            /// anywhere: never a panic, always one line (the secrets may
            /// have moved out of their places, so they are not looked for).
            #[test]
            fn damaged_config_files_never_panic(
                text in document(),
                at in any::<prop::sample::Index>(),
                put in prop::option::of(prop::sample::select(vec!['"', '\'', '[', ']', '=', '\n', '$', '{', '}', '#', '\\', 'é'])),
            ) {
                let mut text = text;
                let mut at = at.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                match put {
                    Some(c) => text.insert(at, c),
                    None if at < text.len() => {
                        text.remove(at);
                    }
                    None => {}
                }
                check(&text, &Config::parse(&text, env), false);
            }
        }
    }
}
