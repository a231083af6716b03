//! Who may call the admin API: the rules every request passes before a
//! handler runs (see [`crate::admin`]).
//!
//! A web page open in a browser on the pipeline's machine can send
//! requests to a loopback address, and DNS rebinding lets a page of
//! another site reach it under its own host name. So, whatever the token:
//!
//! 1. `Host` must name the API: `localhost`, a loopback address, the
//!    listen address, any IP address when the API listens on all
//!    addresses (`0.0.0.0` or `::`), or a name in `admin_allowed_hosts`.
//!    A rebinding page's requests carry its own host name and are refused
//!    (`403`). A request without `Host` (no browser sends one) passes.
//! 2. `Origin`, when present, must be the API's own (`http://` and the
//!    `Host`), and `Sec-Fetch-Site`, when present, `same-origin` or
//!    `none`: a page of another origin is refused (`403`).
//! 3. With `admin_token` set, every endpoint but `/metrics` needs
//!    `Authorization: Bearer TOKEN` (`401` otherwise).
//! 4. `POST /sql` takes `Content-Type: application/json` (`{"sql":
//!    "..."}`) or `application/sql` (the text) only (`415` otherwise).
//!    Browsers send other content types across origins only after a
//!    preflight `OPTIONS` request, which the API never answers with CORS
//!    headers, so a page cannot make one.
//!
//! An `admin_listen` that is not a loopback address needs `admin_token`:
//! [`check_listen`] refuses it otherwise.

use std::net::IpAddr;

use axum::http::{HeaderMap, Method, StatusCode, header};

use crate::config::{AdminToken, Config};
use crate::error::{PipelineError, Result};

/// The rules of one admin API.
#[derive(Clone, Debug)]
pub(crate) struct Access {
    token: Option<AdminToken>,
    /// The listen address's host, lower case, without brackets.
    listen_host: String,
    allowed_hosts: Vec<String>,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    /// A SQLSTATE.
    pub code: &'static str,
    pub message: String,
    pub hint: Option<&'static str>,
}

/// The body of `POST /sql` as the request's content type says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SqlBody {
    /// `{"sql": "..."}`.
    Json,
    /// The statements' text.
    Text,
}

/// The host part of `authority` (`host`, `host:port`, `[v6]:port`),
/// lower case, without brackets.
fn host_of(authority: &str) -> String {
    let authority = authority.trim();
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else if authority.matches(':').count() == 1 {
        authority.split(':').next().unwrap_or_default()
    } else {
        // A bare IPv6 address, or no port.
        authority
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl Access {
    pub fn new(config: &Config) -> Access {
        Access {
            token: config.admin_token.clone(),
            listen_host: host_of(&config.admin_listen),
            allowed_hosts: config.admin_allowed_hosts.clone(),
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        if host == "localhost" || host == self.listen_host {
            return true;
        }
        if self.allowed_hosts.iter().any(|h| h == host) {
            return true;
        }
        match host.parse::<IpAddr>() {
            Ok(ip) if ip.is_loopback() => true,
            Ok(_) => self
                .listen_host
                .parse::<IpAddr>()
                .is_ok_and(|l| l.is_unspecified()),
            Err(_) => false,
        }
    }

    /// Checks a request before its handler; `Ok` with how to read the
    /// body of a `POST /sql`.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> std::result::Result<Option<SqlBody>, Refusal> {
        let refused = |message: String, hint: &'static str| Refusal {
            status: StatusCode::FORBIDDEN,
            code: "42501",
            message,
            hint: Some(hint),
        };
        let forbidden = |message: String| {
            refused(
                message,
                "The admin API answers requests to its own address only; list other host names in admin_allowed_hosts in evolve.toml.",
            )
        };
        let cross_origin = |message: String| {
            refused(
                message,
                "The admin API never answers web pages of other origins, whatever admin_allowed_hosts says; call it from evolve, curl or a program, not from a browser page.",
            )
        };
        let text = |name: header::HeaderName| -> std::result::Result<Option<&str>, Refusal> {
            match headers.get(&name) {
                None => Ok(None),
                Some(v) => v.to_str().map(Some).map_err(|_| {
                    forbidden(format!(
                        "the {name} header is not valid; the request was refused"
                    ))
                }),
            }
        };
        let host = text(header::HOST)?;
        if let Some(host) = host
            && !self.host_allowed(&host_of(host))
        {
            return Err(forbidden(format!(
                "host {:?} is not this admin API's address; the request was refused",
                host_of(host)
            )));
        }
        if let Some(origin) = text(header::ORIGIN)? {
            let own = host.is_some_and(|h| origin.eq_ignore_ascii_case(&format!("http://{h}")));
            if !own {
                return Err(cross_origin(format!(
                    "requests from origin {origin:?} are not allowed; the request was refused"
                )));
            }
        }
        if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))?
            && !matches!(site, "same-origin" | "none")
        {
            return Err(cross_origin(format!(
                "requests from a {site} web page are not allowed; the request was refused"
            )));
        }
        if let Some(token) = &self.token
            && path != "/metrics"
        {
            let offered = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
            if !offered.is_some_and(|o| token.matches(o)) {
                return Err(Refusal {
                    status: StatusCode::UNAUTHORIZED,
                    code: "28000",
                    message: if offered.is_some() {
                        "the admin token is not valid".into()
                    } else {
                        "the admin API requires a token".into()
                    },
                    hint: Some(
                        "Send Authorization: Bearer TOKEN; evolve's commands read it from EVOLVE_ADMIN_TOKEN or --config evolve.toml.",
                    ),
                });
            }
        }
        if method == Method::POST && path == "/sql" {
            let media = text(header::CONTENT_TYPE)?
                .and_then(|c| c.split(';').next())
                .map(|c| c.trim().to_ascii_lowercase());
            return match media.as_deref() {
                Some("application/json") => Ok(Some(SqlBody::Json)),
                Some("application/sql") => Ok(Some(SqlBody::Text)),
                other => Err(Refusal {
                    status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    code: "0A000",
                    message: match other {
                        Some(c) => format!("POST /sql does not take content type {c:?}"),
                        None => "POST /sql needs a content type".into(),
                    },
                    hint: Some(
                        "Send Content-Type: application/json with {\"sql\": \"...\"}, or Content-Type: application/sql with the statements.",
                    ),
                }),
            };
        }
        Ok(None)
    }
}

/// Whether `listen` (an `admin_listen` value) is a loopback address or
/// `localhost`.
fn is_loopback(listen: &str) -> bool {
    let host = host_of(listen);
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses an `admin_listen` that is not a loopback address when no
/// `admin_token` is set.
pub fn check_listen(config: &Config) -> Result<()> {
    if config.admin_token.is_none() && !is_loopback(&config.admin_listen) {
        return Err(PipelineError::Config {
            message: format!(
                "admin_listen = \"{}\" is not a loopback address and no admin_token is set: anyone who reaches it could change the pipeline; set admin_token_file (or admin_token) in evolve.toml, or listen on 127.0.0.1",
                config.admin_listen
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn access(listen: &str, token: Option<&str>) -> Access {
        let config = Config::new("x")
            .with_admin_listen(listen)
            .with_admin_token(token.and_then(AdminToken::new));
        let mut a = Access::new(&config);
        a.allowed_hosts = vec!["pipe.internal".into()];
        a
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn status(a: &Access, method: Method, path: &str, pairs: &[(&'static str, &str)]) -> u16 {
        match a.check(&method, path, &headers(pairs)) {
            Ok(_) => 200,
            Err(r) => r.status.as_u16(),
        }
    }

    #[test]
    fn hosts() {
        let a = access("127.0.0.1:7800", None);
        for ok in [
            "127.0.0.1:7800",
            "localhost:7800",
            "LOCALHOST",
            "[::1]:7800",
            "127.0.0.2",
            "pipe.internal:7800",
        ] {
            assert_eq!(
                status(&a, Method::GET, "/status", &[("host", ok)]),
                200,
                "{ok}"
            );
        }
        for bad in [
            "evil.example:7800",
            "evil.example",
            "10.0.0.1:7800",
            "[::2]:1",
        ] {
            assert_eq!(
                status(&a, Method::GET, "/status", &[("host", bad)]),
                403,
                "{bad}"
            );
        }
        assert_eq!(status(&a, Method::GET, "/status", &[]), 200);
        let any = access("0.0.0.0:7800", Some("t"));
        let auth = ("authorization", "Bearer t");
        assert_eq!(
            status(
                &any,
                Method::GET,
                "/status",
                &[("host", "10.1.2.3:7800"), auth]
            ),
            200
        );
        assert_eq!(
            status(
                &any,
                Method::GET,
                "/status",
                &[("host", "rebind.example"), auth]
            ),
            403
        );
    }

    #[test]
    fn origins() {
        let a = access("127.0.0.1:7800", None);
        let host = ("host", "127.0.0.1:7800");
        assert_eq!(
            status(
                &a,
                Method::GET,
                "/status",
                &[host, ("origin", "http://127.0.0.1:7800")]
            ),
            200
        );
        for bad in [
            "http://evil.example",
            "null",
            "https://127.0.0.1:7800",
            "http://localhost:7800",
        ] {
            assert_eq!(
                status(&a, Method::GET, "/status", &[host, ("origin", bad)]),
                403,
                "{bad}"
            );
        }
        assert_eq!(
            status(
                &a,
                Method::GET,
                "/status",
                &[host, ("sec-fetch-site", "cross-site")]
            ),
            403
        );
        assert_eq!(
            status(
                &a,
                Method::GET,
                "/status",
                &[host, ("sec-fetch-site", "none")]
            ),
            200
        );
        // The way out differs: another host name can be allowed, another
        // origin cannot.
        let hint = |pairs: &[(&'static str, &str)]| {
            a.check(&Method::GET, "/status", &headers(pairs))
                .err()
                .and_then(|r| r.hint)
                .unwrap()
        };
        assert!(hint(&[("host", "pipe.example")]).contains("admin_allowed_hosts"));
        let cross = hint(&[host, ("origin", "http://evil.example")]);
        assert!(
            cross.contains("whatever admin_allowed_hosts says"),
            "{cross}"
        );
        let site = hint(&[host, ("sec-fetch-site", "cross-site")]);
        assert_eq!(site, cross);
    }

    #[test]
    fn tokens() {
        let a = access("127.0.0.1:7800", Some("s3cret"));
        assert_eq!(status(&a, Method::GET, "/status", &[]), 401);
        assert_eq!(
            status(
                &a,
                Method::GET,
                "/status",
                &[("authorization", "Bearer nope")]
            ),
            401
        );
        assert_eq!(
            status(&a, Method::GET, "/status", &[("authorization", "s3cret")]),
            401
        );
        assert_eq!(
            status(
                &a,
                Method::GET,
                "/status",
                &[("authorization", "Bearer s3cret")]
            ),
            200
        );
        assert_eq!(status(&a, Method::GET, "/metrics", &[]), 200);
        let r = a
            .check(
                &Method::GET,
                "/drift",
                &headers(&[("authorization", "Bearer nope")]),
            )
            .unwrap_err();
        assert!(!r.message.contains("s3cret"));
    }

    #[test]
    fn sql_content_types() {
        let a = access("127.0.0.1:7800", None);
        let body = |ct: Option<&str>| {
            let pairs: Vec<(&'static str, &str)> =
                ct.map(|c| ("content-type", c)).into_iter().collect();
            a.check(&Method::POST, "/sql", &headers(&pairs))
        };
        assert_eq!(body(Some("application/json")), Ok(Some(SqlBody::Json)));
        assert_eq!(
            body(Some("Application/JSON; charset=utf-8")),
            Ok(Some(SqlBody::Json))
        );
        assert_eq!(body(Some("application/sql")), Ok(Some(SqlBody::Text)));
        for bad in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            None,
        ] {
            assert_eq!(
                body(bad).unwrap_err().status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn listen_needs_a_token_off_loopback() {
        for ok in [
            "127.0.0.1:7800",
            "localhost:7800",
            "[::1]:7800",
            "127.0.0.1:0",
        ] {
            check_listen(&Config::new("x").with_admin_listen(ok)).unwrap();
        }
        for bad in [
            "0.0.0.0:7800",
            "10.0.0.5:7800",
            "[::]:7800",
            "pipeline.example:7800",
        ] {
            let e = check_listen(&Config::new("x").with_admin_listen(bad)).unwrap_err();
            assert!(e.primary().contains("admin_token"), "{bad}");
            check_listen(
                &Config::new("x")
                    .with_admin_listen(bad)
                    .with_admin_token(AdminToken::new("t")),
            )
            .unwrap();
        }
    }
}
