//! PostgreSQL plumbing shared by evolve's parts: connecting, quoting, turning
//! server errors into messages people can act on, and the catalog queries
//! that more than one part needs (who holds a lock, who blocks whom).
//!
//! Layering: this crate knows PostgreSQL and tokio-postgres, and nothing of
//! migrations, pipelines or registries. Connection strings may carry
//! passwords: nothing here ever puts a password into an error or a log line
//! ([`redact_url`] shows what is safe to print).
//!
//! Every connection honours libpq's TLS parameters in its connection string
//! (`sslmode`, default `prefer`; `sslrootcert`; `sslcert` and `sslkey`),
//! over rustls: see [`tls`] for what each mode verifies. [`parse_url`] and
//! [`tls_settings`] give the same reading to callers that open sessions of
//! their own.

mod error;
mod ident;
mod session;
pub mod tls;
mod url;

pub use error::{PgError, describe_db_error, is_lock_timeout, sqlstate};
pub use ident::{QualifiedName, quote_ident, quote_literal};
pub use session::{SessionInfo, blocking_sessions, describe_sessions, sessions};
pub use tls::{SslMode, TlsSettings, Verification};

use std::str::FromStr;

use tokio_postgres::Socket;
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;

pub use tokio_postgres::{Client, Config};

/// Opens a connection with `application_name` set, and drives it on the
/// current tokio runtime. The returned client is usable from this runtime.
///
/// libpq's TLS parameters in `url` are honoured (`sslmode`, default
/// `prefer`; `sslrootcert`; `sslcert` and `sslkey`): see [`tls`].
pub async fn connect(url: &str, application_name: &str) -> Result<Client, PgError> {
    let (mut config, settings) = parse_url(url)?;
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
        None => PgError::Connect {
            target,
            reason: error_text(&e),
        },
    })
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

/// Parses a connection string (URL or key=value) into what tokio-postgres
/// takes and the TLS parameters evolve handles itself (`sslmode`,
/// `sslrootcert`, `sslcert`, `sslkey`; see [`tls`]).
///
/// The [`Config`]'s own `ssl_mode` is what tokio-postgres should do
/// (`disable`, `prefer` or `require`; `disable` for `allow`, whose TLS
/// attempt comes second); the [`TlsSettings`] say what is verified. For
/// callers that open sessions of their own, e.g. replication sessions.
pub fn parse_url(url: &str) -> Result<(Config, TlsSettings), PgError> {
    let bad = |reason: String| PgError::BadUrl {
        url: redact_url(url),
        reason,
    };
    let split = url::split_tls_params(url).map_err(bad)?;
    let settings = TlsSettings::from_params(split.tls).map_err(bad)?;
    let mut config = Config::from_str(&split.rest).map_err(|e| bad(error_text(&e)))?;
    config.ssl_mode(match settings.mode {
        SslMode::Disable | SslMode::Allow => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    Ok((config, settings))
}

/// The TLS parameters of a connection string (see [`tls`] and
/// [`parse_url`]).
pub fn tls_settings(url: &str) -> Result<TlsSettings, PgError> {
    parse_url(url).map(|(_, settings)| settings)
}

/// A printable form of a connection string with any password removed.
/// Works for URLs (`postgres://user:secret@host/db`) and for key/value
/// strings (`host=x password=secret`).
pub fn redact_url(url: &str) -> String {
    if let Some(rest) = url
        .strip_prefix("postgres://")
        .map(|r| ("postgres://", r))
        .or_else(|| {
            url.strip_prefix("postgresql://")
                .map(|r| ("postgresql://", r))
        })
    {
        let (scheme, rest) = rest;
        // userinfo ends at the last '@' before the first '/', '?' or end.
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let tail = &rest[authority_end..];
        let authority = match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                let user = userinfo.split(':').next().unwrap_or("");
                let masked = if userinfo.contains(':') {
                    format!("{user}:***")
                } else {
                    user.to_string()
                };
                format!("{masked}@{}", &authority[at + 1..])
            }
            None => authority.to_string(),
        };
        let tail = redact_query_password(tail);
        return format!("{scheme}{authority}{tail}");
    }
    // key=value form
    url.split_whitespace()
        .map(|kv| {
            if kv.to_ascii_lowercase().starts_with("password=") {
                "password=***".to_string()
            } else {
                kv.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn redact_query_password(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_string();
    };
    let (path, query) = tail.split_at(q + 1);
    let query = query
        .split('&')
        .map(|kv| {
            if kv.to_ascii_lowercase().starts_with("password=") {
                "password=***".to_string()
            } else {
                kv.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{path}{query}")
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
    use super::redact_url;

    #[track_caller]
    fn check(input: &str, expected: &str) {
        assert_eq!(redact_url(input), expected);
    }

    #[test]
    fn passwords_never_survive_redaction() {
        check(
            "postgres://app:s3cr%40t@db.example:5432/shop",
            "postgres://app:***@db.example:5432/shop",
        );
        check("postgresql://app@db/shop", "postgresql://app@db/shop");
        check(
            "postgres://db/shop?user=a&password=hunter2&sslmode=require",
            "postgres://db/shop?user=a&password=***&sslmode=require",
        );
        check(
            "host=db user=app password=hunter2 dbname=shop",
            "host=db user=app password=*** dbname=shop",
        );
        check("postgres://a:b@c@host/db", "postgres://a:***@host/db");
    }
}
