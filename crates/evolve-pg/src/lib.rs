//! PostgreSQL plumbing shared by evolve's parts: connecting, quoting, turning
//! server errors into messages people can act on, and the catalog queries
//! that more than one part needs (who holds a lock, who blocks whom).
//!
//! Layering: this crate knows PostgreSQL and tokio-postgres, and nothing of
//! migrations, pipelines or registries. Connection strings may carry
//! passwords: nothing here ever puts a password into an error or a log line
//! ([`redact_url`] shows what is safe to print).

mod error;
mod ident;
mod session;

pub use error::{PgError, describe_db_error, is_lock_timeout, sqlstate};
pub use ident::{QualifiedName, quote_ident, quote_literal};
pub use session::{SessionInfo, blocking_sessions, describe_sessions, sessions};

use std::str::FromStr;

pub use tokio_postgres::{Client, Config};

/// Opens a connection with `application_name` set, and drives it on the
/// current tokio runtime. The returned client is usable from this runtime.
pub async fn connect(url: &str, application_name: &str) -> Result<Client, PgError> {
    let mut config = Config::from_str(url).map_err(|e| PgError::BadUrl {
        url: redact_url(url),
        reason: first_line(&e.to_string()),
    })?;
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    let (client, connection) =
        config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| PgError::Connect {
                target: describe_target(&config),
                reason: first_line(&e.to_string()),
            })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended with an error");
        }
    });
    Ok(client)
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
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_string());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db}")
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
