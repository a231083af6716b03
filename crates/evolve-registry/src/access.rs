//! Which requests the registry answers at all, whatever the credentials:
//! protection against web pages in the user's browser.
//!
//! - DNS rebinding: a page on `evil.example` whose name is made to resolve
//!   to 127.0.0.1 talks to the registry as if it were its own site, and its
//!   requests carry `Host: evil.example`. Every request (reads too) must
//!   name the registry: `localhost`, a loopback address, the address it
//!   listens on (any IP address when it listens on all of them, 0.0.0.0 or
//!   `::`), or a name given with `--allowed-host`. The port is not compared.
//! - Cross-site writes: any page may send a "simple" POST (`Content-Type:
//!   text/plain`) without a CORS preflight. A write (any method but GET and
//!   HEAD) whose `Origin` header is present and is not the registry's own
//!   origin (its scheme and the `Host` the request was sent to) is refused.
//!   No CORS headers are ever sent, so pages cannot read answers either.
//!
//! Requests without `Host` (HTTP/1.0) or without `Origin` (every client
//! that is not a browser) pass.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, Method, header};

use crate::error::ApiError;

/// The `Host` and `Origin` rules of one registry.
#[derive(Clone, Debug)]
pub struct Access {
    scheme: &'static str,
    listen: SocketAddr,
    /// `--allowed-host` names, normalized (see [`normalize_host`]).
    allowed_hosts: Vec<String>,
}

impl Access {
    /// The rules for a registry serving on `listen` (the bound address),
    /// over TLS or not, with extra host names. A name that is not a bare
    /// host (a port, a path, a scheme) is refused with the way out.
    pub fn new(listen: SocketAddr, tls: bool, allowed_hosts: &[String]) -> Result<Access, String> {
        let mut names = Vec::with_capacity(allowed_hosts.len());
        for name in allowed_hosts {
            let bare = name.trim();
            let valid = !bare.is_empty()
                && (bare.parse::<IpAddr>().is_ok()
                    || bare
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')));
            if !valid {
                return Err(format!(
                    "--allowed-host {name:?} is not a host name; give the name alone, without scheme or port (e.g. --allowed-host registry.example.com)"
                ));
            }
            names.push(normalize_host(bare));
        }
        Ok(Access {
            scheme: if tls { "https" } else { "http" },
            listen,
            allowed_hosts: names,
        })
    }

    /// `Ok` when the request may go on; 403 with the reason otherwise.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        let host = match headers.get(header::HOST) {
            None => None,
            Some(value) => {
                let authority = value.to_str().ok().map(str::trim).unwrap_or("");
                match split_authority(authority) {
                    Some((name, _)) if self.is_own_host(&name) => Some(authority),
                    _ => {
                        return Err(ApiError::forbidden(format!(
                            "Forbidden: Host {:?} is not a name of this registry; send requests to localhost or {}, or start it with --allowed-host NAME",
                            String::from_utf8_lossy(value.as_bytes()),
                            self.listen.ip()
                        )));
                    }
                }
            }
        };
        if matches!(*method, Method::GET | Method::HEAD) {
            return Ok(());
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let own = match host {
            Some(authority) => format!("{}://{authority}", self.scheme),
            None => format!("{}://{}", self.scheme, self.listen),
        };
        let same = origin
            .to_str()
            .ok()
            .is_some_and(|o| normalize_origin(o) == normalize_origin(&own));
        if same {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "Forbidden: a write from origin {:?} is refused; this registry accepts writes from its own origin ({own}) or from clients that send no Origin",
                String::from_utf8_lossy(origin.as_bytes())
            )))
        }
    }

    fn is_own_host(&self, name: &str) -> bool {
        if name == "localhost" || self.allowed_hosts.iter().any(|h| h == name) {
            return true;
        }
        match name.parse::<IpAddr>() {
            Ok(ip) => {
                ip.is_loopback() || ip == self.listen.ip() || self.listen.ip().is_unspecified()
            }
            Err(_) => false,
        }
    }
}

/// A host as compared: lower case, no trailing dot, an IP address in its
/// standard spelling (IPv6 without brackets).
fn normalize_host(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(&host);
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    }
}

/// `host[:port]` or `[v6][:port]` as a normalized host and the port text.
fn split_authority(authority: &str) -> Option<(String, Option<&str>)> {
    if authority.is_empty() || authority.contains(['/', '@', ' ']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        match after {
            "" => (v6, None),
            _ => (v6, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            Some(_) => return None,
            None => (authority, None),
        }
    };
    if host.is_empty()
        || port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some((normalize_host(host), port))
}

/// `scheme://host[:port]` normalized: lower case, the default port of the
/// scheme dropped. Anything else (`null`, a path) stays as it is and
/// matches nothing.
fn normalize_origin(origin: &str) -> String {
    let lower = origin.trim().to_ascii_lowercase();
    let Some((scheme, authority)) = lower.split_once("://") else {
        return lower;
    };
    let Some((host, port)) = split_authority(authority) else {
        return lower;
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    match (scheme, port) {
        ("http", Some("80")) | ("https", Some("443")) | (_, None) => format!("{scheme}://{host}"),
        (_, Some(port)) => format!("{scheme}://{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn access(listen: &str, tls: bool, hosts: &[&str]) -> Access {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        Access::new(listen.parse().expect("address"), tls, &hosts).expect("access")
    }

    #[track_caller]
    fn check(access: &Access, method: Method, host: Option<&str>, origin: Option<&str>, ok: bool) {
        let mut headers = HeaderMap::new();
        if let Some(h) = host {
            headers.insert(header::HOST, HeaderValue::from_str(h).expect("host"));
        }
        if let Some(o) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(o).expect("origin"));
        }
        let got = access.check(&method, &headers);
        assert_eq!(
            got.is_ok(),
            ok,
            "{method} Host {host:?} Origin {origin:?}: {got:?}"
        );
        if let Err(e) = got {
            assert_eq!((e.status, e.error_code), (403, 403));
        }
    }

    #[test]
    fn loopback_registry_answers_its_own_names_only() {
        let a = access("127.0.0.1:8081", false, &[]);
        for host in [
            "127.0.0.1:8081",
            "localhost:8081",
            "LOCALHOST",
            "localhost.",
            "[::1]:8081",
            "127.1.2.3",
        ] {
            check(&a, Method::GET, Some(host), None, true);
        }
        for host in [
            "evil.example",
            "evil.example:8081",
            "10.0.0.5:8081",
            "localhost.evil.example",
            "127.0.0.1:80/x",
            "",
            "a:b:c",
        ] {
            check(&a, Method::GET, Some(host), None, false);
            check(&a, Method::POST, Some(host), None, false);
        }
        check(&a, Method::GET, None, None, true);
    }

    #[test]
    fn writes_from_another_origin_are_refused() {
        let a = access("127.0.0.1:8081", false, &[]);
        let host = Some("127.0.0.1:8081");
        check(&a, Method::POST, host, None, true);
        check(&a, Method::POST, host, Some("http://127.0.0.1:8081"), true);
        check(&a, Method::PUT, host, Some("HTTP://127.0.0.1:8081"), true);
        check(&a, Method::POST, host, Some("http://evil.example"), false);
        check(
            &a,
            Method::DELETE,
            host,
            Some("http://localhost:8081"),
            false,
        );
        check(
            &a,
            Method::POST,
            host,
            Some("https://127.0.0.1:8081"),
            false,
        );
        check(&a, Method::POST, host, Some("http://127.0.0.1:9999"), false);
        check(&a, Method::POST, host, Some("null"), false);
        check(&a, Method::POST, None, Some("http://127.0.0.1:8081"), true);
        check(&a, Method::POST, None, Some("http://evil.example"), false);
        // Reads carry the Origin of cross-site fetches too, but their
        // answers are not readable without CORS headers.
        check(&a, Method::GET, host, Some("http://evil.example"), true);
        let tls = access("127.0.0.1:443", true, &[]);
        check(
            &tls,
            Method::POST,
            Some("localhost"),
            Some("https://localhost:443"),
            true,
        );
    }

    #[test]
    fn other_addresses_and_allowed_hosts() {
        let a = access("10.0.0.5:8081", false, &["Registry.Example.com", "::2"]);
        for host in [
            "10.0.0.5:8081",
            "registry.example.com:8081",
            "[::2]:8081",
            "localhost:8081",
        ] {
            check(&a, Method::GET, Some(host), None, true);
        }
        check(&a, Method::GET, Some("10.0.0.6:8081"), None, false);
        check(&a, Method::GET, Some("evil.example"), None, false);
        let any = access("0.0.0.0:8081", false, &[]);
        check(&any, Method::GET, Some("192.168.1.20:8081"), None, true);
        check(&any, Method::GET, Some("registry.example.com"), None, false);
        for bad in ["", "http://x", "x:8081", "a/b"] {
            assert!(
                Access::new(
                    "127.0.0.1:1".parse().expect("addr"),
                    false,
                    &[bad.to_owned()]
                )
                .is_err(),
                "{bad}"
            );
        }
    }
}
