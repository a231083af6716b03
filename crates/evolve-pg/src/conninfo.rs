//! Connection strings as libpq reads them, in both forms, into their
//! parameters: URLs (`postgres://user:password@host:port/dbname?key=value`,
//! every part optional and percent-decoded, several `host:port` pairs
//! separated by commas, IPv6 addresses in brackets) and key=value strings
//! (`host=h dbname='my db'`, values optionally single-quoted, backslash
//! escapes). Also the one redaction of passwords for every message.
//!
//! Pure: no environment, no files. Error reasons never quote the input,
//! which may hold a password; callers print the [`redact`]ed string.

use std::collections::BTreeMap;

/// Parameters by name, decoded; a later value for the same name replaces an
/// earlier one (as in libpq). Empty values are left out: libpq treats them
/// as unset.
pub(crate) type Params = BTreeMap<String, String>;

/// Every parameter evolve accepts: tokio-postgres's, and [`OWN_KEYS`].
const KEYS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "service",
    "passfile",
];

/// The parameters evolve handles itself; tokio-postgres never sees them.
pub(crate) const OWN_KEYS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "service",
    "passfile",
];

/// The parameters of `s`, a URL or a key=value string; an empty string has
/// none. The error is the reason, which never quotes `s`.
pub(crate) fn parse(s: &str) -> Result<Params, String> {
    let pairs = match ["postgresql://", "postgres://"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
    {
        Some(rest) => parse_url(rest)?,
        None => parse_key_value(s)?,
    };
    let mut params = Params::new();
    for (key, value) in pairs {
        if !is_known(&key) {
            return Err(if is_name(&key) {
                match closest_key(&key) {
                    Some(known) => {
                        format!("unknown parameter \"{key}\"; did you mean \"{known}\"?")
                    }
                    None => format!("unknown parameter \"{key}\""),
                }
            } else {
                "a parameter name is not valid".into()
            });
        }
        if value.is_empty() {
            params.remove(&key);
        } else {
            params.insert(key, value);
        }
    }
    Ok(params)
}

/// The known parameter `key` is most likely a misspelling of: the one
/// within two edits (a letter added, dropped, changed or two swapped), if
/// exactly one is nearest.
fn closest_key(key: &str) -> Option<&'static str> {
    let mut best: Option<(usize, &'static str)> = None;
    let mut tie = false;
    for &known in KEYS {
        let d = strsim::osa_distance(key, known);
        if d > 2 {
            continue;
        }
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tie = true,
            _ => {
                best = Some((d, known));
                tie = false;
            }
        }
    }
    best.filter(|_| !tie).map(|(_, k)| k)
}

/// `key` is a parameter evolve accepts.
pub(crate) fn is_known(key: &str) -> bool {
    KEYS.contains(&key)
}

/// A parameter name as a user would type one: letters, digits and `_`.
fn is_name(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The part of a URL after `postgres://`, as libpq's
/// `conninfo_uri_parse_options` reads it.
fn parse_url(rest: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    // Credentials, if an '@' comes before any '/'.
    let mut p = rest;
    if let Some(at) = rest
        .find(['@', '/'])
        .filter(|&i| rest.as_bytes()[i] == b'@')
    {
        let userinfo = &rest[..at];
        let (user, password) = match userinfo.split_once(':') {
            Some((u, pw)) => (u, Some(pw)),
            None => (userinfo, None),
        };
        pairs.push(("user".into(), decode(user, "the user name")?));
        if let Some(pw) = password {
            pairs.push(("password".into(), decode(pw, "the password")?));
        }
        p = &rest[at + 1..];
    }
    // libpq ends the user information at the first '@', so a second one
    // before the path would make the rest of a password part of the host
    // (and show it in every message that names the host).
    if p[..p.find(['/', '?']).unwrap_or(p.len())].contains('@') {
        return Err(
            "the URL has more than one \"@\" before its host; percent-encode an \"@\" in the user name or password as %40".into(),
        );
    }
    // host[:port], comma-separated.
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    let mut any_port = false;
    loop {
        let host;
        if let Some(after) = p.strip_prefix('[') {
            let close = after
                .find(']')
                .ok_or("an IPv6 address in the URL has no closing \"]\"")?;
            if close == 0 {
                return Err("an IPv6 address in the URL is empty".into());
            }
            host = &after[..close];
            p = &after[close + 1..];
            if !p.is_empty() && !p.starts_with([':', '/', '?', ',']) {
                return Err("an IPv6 address in the URL is followed by something other than \":\", \"/\", \"?\" or \",\"".into());
            }
        } else {
            let end = p.find([':', '/', '?', ',']).unwrap_or(p.len());
            host = &p[..end];
            p = &p[end..];
        }
        hosts.push(decode(host, "a host")?);
        let mut port = "";
        if let Some(after) = p.strip_prefix(':') {
            let end = after.find(['/', '?', ',']).unwrap_or(after.len());
            port = &after[..end];
            p = &after[end..];
            any_port = true;
        }
        ports.push(decode(port, "a port")?);
        match p.strip_prefix(',') {
            Some(after) => p = after,
            None => break,
        }
    }
    if hosts.len() > 1 || !hosts[0].is_empty() {
        pairs.push(("host".into(), hosts.join(",")));
    }
    if hosts.len() > 1 || any_port {
        pairs.push(("port".into(), ports.join(",")));
    }
    // /dbname
    if let Some(after) = p.strip_prefix('/') {
        let end = after.find('?').unwrap_or(after.len());
        pairs.push(("dbname".into(), decode(&after[..end], "the database name")?));
        p = &after[end..];
    }
    // ?key=value&...
    if let Some(query) = p.strip_prefix('?') {
        let segments: Vec<&str> = query.split('&').collect();
        for (i, pair) in segments.iter().enumerate() {
            if pair.is_empty() && i + 1 == segments.len() {
                continue;
            }
            let mut parts = pair.split('=');
            let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(
                    "a query parameter of the URL is not one key=value (escape \"=\" and \"&\" in values as %3D and %26)"
                        .into(),
                );
            };
            let key = decode(key, "a query parameter name")?;
            let what = if key.ends_with("password") {
                "the password"
            } else {
                "a query parameter value"
            };
            pairs.push((key, decode(value, what)?));
        }
    }
    Ok(pairs)
}

/// `%XX` decoding as libpq's: a `%` not followed by two hex digits, `%00`
/// and a result that is not UTF-8 are errors naming `what`.
fn decode(s: &str, what: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
            let (Some(h), Some(l)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return Err(format!(
                    "{what} in the URL has a \"%\" not followed by two hex digits (write \"%\" as %25)"
                ));
            };
            let byte = (h * 16 + l) as u8;
            if byte == 0 {
                return Err(format!("{what} in the URL contains %00"));
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{what} in the URL is not valid UTF-8"))
}

/// A key=value string as libpq's `conninfo_parse` reads it.
fn parse_key_value(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut it = s.chars().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while it.next_if(|c| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut it);
        if it.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = it.next_if(|&c| !c.is_whitespace() && c != '=') {
            key.push(c);
        }
        skip_ws(&mut it);
        if it.next_if_eq(&'=').is_none() {
            return Err(if key.contains("://") {
                "only postgres:// and postgresql:// URLs are connection strings".into()
            } else {
                "a parameter has no \"=\" (key=value pairs are separated by spaces)".into()
            });
        }
        if key.is_empty() {
            return Err("a \"=\" has no parameter name before it".into());
        }
        skip_ws(&mut it);
        let mut value = String::new();
        if it.next_if_eq(&'\'').is_some() {
            loop {
                match it.next() {
                    Some('\'') => break,
                    Some('\\') => match it.next() {
                        Some(c) => value.push(c),
                        None => return Err("a quoted value has no closing quote".into()),
                    },
                    Some(c) => value.push(c),
                    None => return Err("a quoted value has no closing quote".into()),
                }
            }
        } else {
            while let Some(c) = it.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(c) = it.next() {
                        value.push(c);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// `params` as a key=value string for `tokio_postgres::Config::from_str`,
/// every value quoted; [`OWN_KEYS`] are left out.
pub(crate) fn to_key_value(params: &Params) -> String {
    params
        .iter()
        .filter(|(k, _)| !OWN_KEYS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A printable form of any connection string, valid or not, with every
/// password replaced by `***`: the password of a URL's user information
/// (whatever the scheme, or none: `app:secret@host/db`), and the value of
/// every parameter whose name ends in `password` (`password=secret`,
/// `password = 'a b'`, `?password=secret`, `?pass%77ord=secret`). When in
/// doubt it hides more: from an unterminated quote to the end.
pub(crate) fn redact(s: &str) -> String {
    let (head, rest) = redact_userinfo(s);
    let mut out = head;
    // In a URL's query '&' ends a value; in a key=value string only
    // whitespace does.
    out.push_str(&redact_password_params(rest, s.contains("://")));
    out
}

/// `(redacted prefix, rest)`: the user information up to the last `@` with
/// its password masked, when `s` has any; the rest is still to be looked at.
fn redact_userinfo(s: &str) -> (String, &str) {
    let (scheme_end, has_scheme) = match s.find("://") {
        Some(i) => (i + 3, true),
        None => (0, false),
    };
    let region = &s[scheme_end..];
    let Some(at) = region.rfind('@') else {
        return (String::new(), s);
    };
    let userinfo = &region[..at];
    let Some(colon) = userinfo.find(':') else {
        return (String::new(), s);
    };
    if !has_scheme && userinfo.contains(|c: char| c.is_whitespace() || c == '=') {
        // A key=value string with an '@' in some value.
        return (String::new(), s);
    }
    let head = format!("{}{}:***@", &s[..scheme_end], &userinfo[..colon]);
    (head, &region[at + 1..])
}

/// Masks the value of every `...password = value` parameter in `s`, in
/// key=value strings and URL queries alike.
fn redact_password_params(s: &str, url: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let bytes = s.as_bytes();
    while i < s.len() {
        let starts_key = i == 0 || matches!(bytes[i - 1], b'?' | b'&') || {
            let prev = s[..i].chars().next_back().unwrap_or(' ');
            prev.is_whitespace()
        };
        if starts_key && let Some(value_start) = password_value_start(&s[i..]) {
            let value_start = i + value_start;
            out.push_str(&s[i..value_start]);
            out.push_str("***");
            i = value_end(s, value_start, url);
            continue;
        }
        let c = s[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// If `s` starts with a key ending in `password` (case-insensitive,
/// percent-decoded), then `=`: the offset of its value.
fn password_value_start(s: &str) -> Option<usize> {
    let key_end = s
        .find(|c: char| c.is_whitespace() || c == '=' || c == '&')
        .unwrap_or(s.len());
    let key = lossy_decode(&s[..key_end]).to_ascii_lowercase();
    if !key.ends_with("password") {
        return None;
    }
    let after_key = &s[key_end..];
    let eq = after_key.len() - after_key.trim_start().len();
    let after_eq = after_key[eq..].strip_prefix('=')?;
    let ws = after_eq.len() - after_eq.trim_start().len();
    Some(key_end + eq + 1 + ws)
}

/// Where the value starting at `start` ends: after its closing quote (the
/// end of `s` if there is none), else at unescaped whitespace or (in a
/// `url`) `&`.
fn value_end(s: &str, start: usize, url: bool) -> usize {
    let rest = &s[start..];
    if let Some(quoted) = rest.strip_prefix('\'') {
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return start + 1 + i + 1,
                _ => {}
            }
        }
        return s.len();
    }
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '&' if url => return start + i,
            c if c.is_whitespace() => return start + i,
            _ => {}
        }
    }
    s.len()
}

/// Percent-decoding that never fails, for recognising names only.
fn lossy_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_string();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: &[(&str, &str)]) {
        let params = parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        let got: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut expected = expected.to_vec();
        expected.sort();
        assert_eq!(got, expected, "parameters of {input}");
    }

    #[track_caller]
    fn check_err(input: &str, expected: &str) {
        match parse(input) {
            Ok(p) => panic!("{input} parsed: {p:?}"),
            Err(e) => assert_eq!(e, expected, "error for {input}"),
        }
    }

    #[test]
    fn urls_as_libpq_reads_them() {
        check(
            "postgres://app:s3cr%40t@db.example:5433/shop?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.pem",
            &[
                ("user", "app"),
                ("password", "s3cr@t"),
                ("host", "db.example"),
                ("port", "5433"),
                ("dbname", "shop"),
                ("sslmode", "verify-full"),
                ("sslrootcert", "/tmp/ca x.pem"),
            ],
        );
        // No port: none is set (PGPORT may apply); no user: likewise.
        check(
            "postgresql://db/shop",
            &[("host", "db"), ("dbname", "shop")],
        );
        check("postgres://", &[]);
        check("postgres:///shop", &[("dbname", "shop")]);
        check(
            "postgres://%2Fvar%2Frun%2Fpostgresql/shop",
            &[("host", "/var/run/postgresql"), ("dbname", "shop")],
        );
        check(
            "postgres://a@h1:1,[::1]:2,h3/d",
            &[
                ("user", "a"),
                ("host", "h1,::1,h3"),
                ("port", "1,2,"),
                ("dbname", "d"),
            ],
        );
        check(
            "postgres://app@/shop?host=/tmp&port=5433&",
            &[
                ("user", "app"),
                ("host", "/tmp"),
                ("port", "5433"),
                ("dbname", "shop"),
            ],
        );
        check(
            "postgres://h?service=prod&passfile=/p",
            &[("host", "h"), ("service", "prod"), ("passfile", "/p")],
        );
        // A '?' in the password is the password's; the query follows.
        check(
            "postgres://u:p?w@h/db?application_name=a",
            &[
                ("user", "u"),
                ("password", "p?w"),
                ("host", "h"),
                ("dbname", "db"),
                ("application_name", "a"),
            ],
        );
        // Later values replace earlier ones; empty ones unset.
        check(
            "postgres://u@h/db?user=v&dbname=",
            &[("user", "v"), ("host", "h")],
        );
    }

    #[test]
    fn key_value_strings_as_libpq_reads_them() {
        check(
            "host=h  sslmode = verify-ca user=u sslrootcert='/a b/ca.pem' password='x \\' y'",
            &[
                ("host", "h"),
                ("sslmode", "verify-ca"),
                ("user", "u"),
                ("sslrootcert", "/a b/ca.pem"),
                ("password", "x ' y"),
            ],
        );
        check(
            r"sslkey=/k\ 1.pem dbname=d",
            &[("sslkey", "/k 1.pem"), ("dbname", "d")],
        );
        check("service=prod", &[("service", "prod")]);
        check("", &[]);
        check("  ", &[]);
        check("host='' dbname=d", &[("dbname", "d")]);
    }

    #[test]
    fn bad_strings_are_refused_without_quoting_them() {
        check_err(
            "app:apppw@host/db",
            "a parameter has no \"=\" (key=value pairs are separated by spaces)",
        );
        check_err(
            "mysql://app:apppw@h/db",
            "only postgres:// and postgresql:// URLs are connection strings",
        );
        check_err(
            "mysql://app:apppw@h/db?sslmode=require",
            "a parameter name is not valid",
        );
        check_err("password='apppw", "a quoted value has no closing quote");
        check_err(
            "password=apppw hots=h",
            "unknown parameter \"hots\"; did you mean \"host\"?",
        );
        check_err(
            "postgres://h/db?sslmod=require",
            "unknown parameter \"sslmod\"; did you mean \"sslmode\"?",
        );
        check_err("postgres://h/db?colour=red", "unknown parameter \"colour\"");
        check_err("= x", "a \"=\" has no parameter name before it");
        check_err(
            "postgres://app:ap%ZZpw@h/db",
            "the password in the URL has a \"%\" not followed by two hex digits (write \"%\" as %25)",
        );
        check_err(
            "postgres://h/db?password=a=b",
            "a query parameter of the URL is not one key=value (escape \"=\" and \"&\" in values as %3D and %26)",
        );
        check_err(
            "postgres://h/db?sslmode",
            "a query parameter of the URL is not one key=value (escape \"=\" and \"&\" in values as %3D and %26)",
        );
        check_err(
            "postgres://[::1/db",
            "an IPv6 address in the URL has no closing \"]\"",
        );
        check_err(
            "postgres://h/%C3",
            "the database name in the URL is not valid UTF-8",
        );
        check_err(
            "postgres://h/a%00",
            "the database name in the URL contains %00",
        );
        // A raw '@' in the password: refused, and the redacted form shows
        // none of it.
        let two_ats = "postgres://u:hunter@s3cretpw@127.0.0.1:5432/db";
        check_err(
            two_ats,
            "the URL has more than one \"@\" before its host; percent-encode an \"@\" in the user name or password as %40",
        );
        assert_eq!(redact(two_ats), "postgres://u:***@127.0.0.1:5432/db");
        // One after the path is the path's.
        check("postgres://h/d%40b", &[("host", "h"), ("dbname", "d@b")]);
    }

    #[test]
    fn rendering_for_tokio_postgres_quotes_every_value() {
        let params = parse("host=h password='a\\'b\\\\c d' sslmode=require service=s").unwrap();
        let kv = to_key_value(&params);
        assert_eq!(kv, r"host='h' password='a\'b\\c d'");
        let config: tokio_postgres::Config = kv.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"a'b\\c d"[..]));
    }

    #[track_caller]
    fn check_redact(input: &str, expected: &str) {
        assert_eq!(redact(input), expected, "redaction of {input}");
    }

    #[test]
    fn passwords_never_survive_redaction() {
        check_redact(
            "postgres://app:s3cr%40t@db.example:5432/shop",
            "postgres://app:***@db.example:5432/shop",
        );
        check_redact("postgresql://app@db/shop", "postgresql://app@db/shop");
        check_redact(
            "postgres://db/shop?user=a&password=hunter2&sslmode=require",
            "postgres://db/shop?user=a&password=***&sslmode=require",
        );
        check_redact(
            "postgres://db/shop?pass%77ord=hunter2",
            "postgres://db/shop?pass%77ord=***",
        );
        check_redact(
            "host=db user=app password=hunter2 dbname=shop",
            "host=db user=app password=*** dbname=shop",
        );
        check_redact(
            "host=db password = 'hunter 2' dbname=shop",
            "host=db password = *** dbname=shop",
        );
        check_redact("host=db PASSWORD='hunter 2", "host=db PASSWORD=***");
        check_redact("host=db sslpassword=k", "host=db sslpassword=***");
        check_redact(r"password=a\ b&c host=h", "password=*** host=h");
        check_redact("postgres://a:b@c@host/db", "postgres://a:***@host/db");
        check_redact("app:apppw@host/db", "app:***@host/db");
        check_redact("mysql://app:apppw@h/db", "mysql://app:***@h/db");
        check_redact(
            "host=h application_name=me@x password=y",
            "host=h application_name=me@x password=***",
        );
        check_redact("host=db", "host=db");
        check_redact("", "");
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(s in "\\PC{0,60}") {
            let _ = parse(&s);
        }

        #[test]
        fn parsing_never_panics_on_url_like_input(s in "postgres(ql)?://[a-z:@/?&=%,\\[\\]'\\\\ 0-9]{0,40}") {
            let _ = parse(&s);
        }

        #[test]
        fn redaction_hides_any_password(
            user in "[a-z]{1,8}",
            password in "Q[a-zA-Z0-9!#$*+,;~&]{4,16}",
            host in "[a-z]{1,8}",
        ) {
            for s in [
                format!("postgres://{user}:{password}@{host}/db"),
                format!("{user}:{password}@{host}/db"),
                format!("mysql://{user}:{password}@{host}/db"),
                format!("host={host} password={password} user={user}"),
                format!("host={host} password='{password} x' user={user}"),
                format!("{host} password={password}"),
                format!("host={host} password = {password}"),
            ] {
                let r = redact(&s);
                proptest::prop_assert!(!r.contains(&password), "{} -> {}", s, r);
            }
        }

        #[test]
        fn redaction_never_panics(s in "\\PC{0,60}") {
            let _ = redact(&s);
        }
    }
}
