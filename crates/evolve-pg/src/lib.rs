//! PostgreSQL plumbing shared by evolve's parts: connecting, quoting, turning
//! server errors into messages people can act on, and the catalog queries
//! that more than one part needs (who holds a lock, who blocks whom).
//!
//! Layering: this crate knows PostgreSQL and tokio-postgres, and nothing of
//! migrations, pipelines or registries. Connection strings may carry
//! passwords: nothing here ever puts a password into an error or a log line
//! ([`redact_url`] shows what is safe to print).
//!
//! Connection strings are read as libpq reads them, in both forms (URL
//! and key=value), and what they leave out comes from where psql would
//! take it: the connection service file (`service=NAME` or `PGSERVICE`;
//! `PGSERVICEFILE`, `~/.pg_service.conf`, `PGSYSCONFDIR/pg_service.conf`),
//! then the environment (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
//! `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`,
//! `PGAPPNAME`, `PGCONNECT_TIMEOUT`), then libpq's defaults (the OS user, a
//! database named after the user, the local Unix socket); a password still
//! missing is looked up in the password file (`passfile`, `PGPASSFILE`,
//! `~/.pgpass`), which is ignored with a warning unless only its owner may
//! read it. Values in the string beat the service file's, which beat the
//! environment's.
//!
//! Every connection honours libpq's TLS parameters (`sslmode`, default
//! `prefer`; `sslrootcert`; `sslcert` and `sslkey`), over rustls: see
//! [`tls`] for what each mode verifies. [`parse_url`] and [`tls_settings`]
//! give the same reading to callers that open sessions of their own.

mod conninfo;
mod error;
mod ident;
mod owner;
mod resolve;
mod session;
mod sources;
pub mod tls;
mod x509;

pub use error::{PgError, connect_way_out, describe_db_error, is_lock_timeout, sqlstate};
pub use ident::{QualifiedName, dollar_quote, quote_ident, quote_literal, shell_word};
pub use owner::{OwnerError, check_state_table};
pub use session::{SessionInfo, blocking_sessions, describe_sessions, sessions};
pub use tls::{SslMode, TlsSettings, Verification};

use std::str::FromStr;

use tokio_postgres::Socket;
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;

pub use tokio_postgres::{Client, Config};

/// Opens a connection with `application_name` set (unless the connection
/// string, the service or `PGAPPNAME` names one), and drives it on the
/// current tokio runtime. The returned client is usable from this runtime.
///
/// The connection string is resolved as [`parse_url`] says; libpq's TLS
/// parameters are honoured (`sslmode`, default `prefer`; `sslrootcert`;
/// `sslcert` and `sslkey`): see [`tls`].
pub async fn connect(url: &str, application_name: &str) -> Result<Client, PgError> {
    let Resolved {
        mut config,
        settings,
        no_password,
    } = resolve(url)?;
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    let target = describe_target(&config);
    let plain_only = settings.mode == SslMode::Disable || unix_sockets_only(&config);
    let opened = if plain_only {
        open(&config, tokio_postgres::NoTls).await
    } else {
        let tls = tls::client_config(&settings)
            .map(tls::MakeRustlsConnect::new)
            .map_err(|reason| PgError::Tls {
                target: target.clone(),
                reason,
            })?;
        if settings.mode == SslMode::Allow {
            // libpq's `allow`: plain first, TLS if the server refuses that.
            match open(&config, tokio_postgres::NoTls).await {
                Err(e) if e.as_db_error().is_some() => {
                    config.ssl_mode(tokio_postgres::config::SslMode::Require);
                    open(&config, tls).await
                }
                other => other,
            }
        } else {
            open(&config, tls).await
        }
    };
    opened.map_err(|e| match tls::describe_error(&e, &settings) {
        Some(reason) => PgError::Tls { target, reason },
        None if is_password_missing(&e) => PgError::Password {
            target,
            reason: no_password.unwrap_or_else(|| "none was given".into()),
        },
        None => PgError::Connect {
            target,
            reason: error_text(&e),
            given: "--database-url",
        },
    })
}

/// tokio-postgres's error when the server asks for a password it was not
/// given.
fn is_password_missing(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_none() && error_text(e) == "invalid configuration: password missing"
}

/// Connects with `tls` and drives the connection in a task.
async fn open<T>(config: &Config, tls: T) -> Result<Client, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection) = config.connect(tls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended with an error");
        }
    });
    Ok(client)
}

/// Every host is a Unix-domain socket, where TLS is never used (as libpq).
fn unix_sockets_only(config: &Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty() && hosts.iter().all(|h| !matches!(h, Host::Tcp(_)))
}

/// Reads a connection string (URL or key=value) as libpq does, fills in
/// what it leaves out (service file, `PG*` environment variables, defaults,
/// password file: see the [crate docs](crate)), and returns what
/// tokio-postgres takes and the TLS parameters evolve handles itself
/// (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`; see [`tls`]).
///
/// The [`Config`]'s own `ssl_mode` is what tokio-postgres should do
/// (`disable`, `prefer` or `require`; `disable` for `allow`, whose TLS
/// attempt comes second); the [`TlsSettings`] say what is verified. For
/// callers that open sessions of their own, e.g. replication sessions.
pub fn parse_url(url: &str) -> Result<(Config, TlsSettings), PgError> {
    resolve(url).map(|r| (r.config, r.settings))
}

/// Checks what a connection string says by itself, without the
/// environment, the service or password files (so without I/O): its
/// syntax, its parameters, their values (a port that is not one, an
/// `sslmode` that does not exist). What it leaves out is not checked here;
/// [`parse_url`] fills that in when connecting.
pub fn check_url(url: &str) -> Result<(), PgError> {
    let params = conninfo::parse(url).map_err(|reason| PgError::BadUrl {
        url: redact_url(url),
        reason,
    })?;
    read_params(url, &params).map(|_| ())
}

/// What tokio-postgres takes of `params` (parameters of `url`, for
/// messages) and the TLS parameters evolve handles itself.
fn read_params(url: &str, params: &conninfo::Params) -> Result<(Config, TlsSettings), PgError> {
    let bad = |reason: String| PgError::BadUrl {
        url: redact_url(url),
        reason,
    };
    let tls_params = tls::TLS_KEYS
        .iter()
        .filter_map(|&k| Some((k, params.get(k)?.clone())))
        .collect();
    let settings = TlsSettings::from_params(tls_params).map_err(bad)?;
    if let Some(ports) = params.get("port") {
        for port in ports.split(',') {
            if !port.trim().is_empty() && !port.trim().parse::<u16>().is_ok_and(|p| p > 0) {
                return Err(bad(format!(
                    "port \"{port}\" is not a port number; use one from 1 to 65535 (PostgreSQL's default is 5432)"
                )));
            }
        }
    }
    let config =
        Config::from_str(&conninfo::to_key_value(params)).map_err(|e| bad(error_text(&e)))?;
    Ok((config, settings))
}

/// A resolved connection string.
struct Resolved {
    config: Config,
    settings: TlsSettings,
    /// Why there is no password, when there is none.
    no_password: Option<String>,
}

fn resolve(url: &str) -> Result<Resolved, PgError> {
    let resolution = sources::resolve(url)?;
    let (mut config, settings) = read_params(url, &resolution.params)?;
    config.ssl_mode(match settings.mode {
        SslMode::Disable | SslMode::Allow => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    Ok(Resolved {
        config,
        settings,
        no_password: resolution.no_password,
    })
}

/// The TLS parameters of a connection string, resolved as [`parse_url`]
/// says (see [`tls`]).
pub fn tls_settings(url: &str) -> Result<TlsSettings, PgError> {
    parse_url(url).map(|(_, settings)| settings)
}

/// A printable form of any connection string, valid or not, with every
/// password replaced by `***`: in URLs of any scheme
/// (`postgres://user:secret@host/db`, `mysql://user:secret@host`, also
/// without one: `user:secret@host/db`), in their queries (`?password=x`)
/// and in key=value strings (`password=secret`, `password = 'a b'`). The
/// one function every message about a connection string goes through.
pub fn redact_url(url: &str) -> String {
    conninfo::redact(url)
}

/// `user@host:port/dbname` for messages, never the password.
pub fn describe_target(config: &Config) -> String {
    let user = config.get_user().unwrap_or("(default user)");
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            Host::Tcp(h) => h.clone(),
            Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_string());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db}")
}

/// One line for a client error: the server's own message (`FATAL 28000:
/// no pg_hba.conf entry ...`) when it sent one, else the error and its
/// causes (`error connecting to server: Connection refused (os error 111)`).
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return first_line(&describe_db_error(db, None));
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let cause = s.to_string();
        if !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = s.source();
    }
    first_line(&text)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::check_url;

    /// Values a connection string cannot have are named with the way out.
    #[test]
    fn bad_values_name_their_way_out() {
        let e = |url: &str| check_url(url).unwrap_err().to_string();
        assert_eq!(
            e("postgres://app:secret@h:99999/db"),
            "connection string postgres://app:***@h:99999/db is not valid: port \"99999\" is not a port number; use one from 1 to 65535 (PostgreSQL's default is 5432)"
        );
        assert!(
            e("host=h sslmode=bogus").ends_with(
                "sslmode \"bogus\" is not one of disable, allow, prefer, require, verify-ca, verify-full; use one of them (require encrypts, verify-full also checks the server's certificate and name)"
            ),
            "{}",
            e("host=h sslmode=bogus")
        );
        assert!(e("postgres://h/db?sslmod=require").ends_with("did you mean \"sslmode\"?"));
        assert!(check_url("host=a,b port=5432,5433 dbname=x").is_ok());
    }
}
