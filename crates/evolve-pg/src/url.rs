//! Taking libpq's TLS parameters out of a connection string, so that the
//! rest can go to `tokio_postgres::Config::from_str` (which knows only
//! `sslmode=disable|prefer|require` and refuses keys it does not know).
//!
//! Pure: no files, no sockets. Both forms are handled the way
//! tokio-postgres reads them: URLs (`postgres://...?...&sslmode=x`, values
//! percent-decoded) and key=value strings (`host=h sslmode='x'`, values
//! optionally single-quoted, backslash escapes).

/// The parameters evolve reads itself; every other key is left in place.
pub(crate) const TLS_KEYS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// A connection string without its TLS parameters, and those parameters
/// (decoded) in the order they appeared.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) rest: String,
    pub(crate) tls: Vec<(&'static str, String)>,
}

/// Splits the TLS parameters out of `url`. A string tokio-postgres would
/// refuse anyway comes back whole (with no TLS parameters), so that its
/// error is the one reported; the only error here is a TLS value that is
/// not valid percent-encoded UTF-8.
pub(crate) fn split_tls_params(url: &str) -> Result<Split, String> {
    match url_body(url) {
        Some(prefix_len) => split_url(url, prefix_len),
        None => Ok(split_key_value(url)),
    }
}

/// The length of the `postgres://` or `postgresql://` prefix, if any.
fn url_body(url: &str) -> Option<usize> {
    ["postgres://", "postgresql://"]
        .iter()
        .find(|p| url.starts_with(*p))
        .map(|p| p.len())
}

fn tls_key(key: &str) -> Option<&'static str> {
    TLS_KEYS.iter().copied().find(|k| *k == key)
}

fn split_url(url: &str, prefix_len: usize) -> Result<Split, String> {
    // As tokio-postgres: credentials end at the first '@', the query
    // starts at the first '?' after them.
    let body_start = url[prefix_len..]
        .find('@')
        .map_or(prefix_len, |at| prefix_len + at + 1);
    let Some(q) = url[body_start..].find('?').map(|q| body_start + q) else {
        return Ok(Split {
            rest: url.to_string(),
            tls: Vec::new(),
        });
    };
    let mut kept = Vec::new();
    let mut tls = Vec::new();
    for pair in url[q + 1..].split('&') {
        let found = pair
            .split_once('=')
            .and_then(|(k, v)| Some((tls_key(&percent_decode(k).ok()?)?, v)));
        match found {
            Some((key, value)) => {
                let value = percent_decode(value).map_err(|()| {
                    format!("the value of {key} is not valid percent-encoded UTF-8")
                })?;
                tls.push((key, value));
            }
            None => kept.push(pair),
        }
    }
    let mut rest = url[..q].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok(Split { rest, tls })
}

/// `%XX` decoding; `Err` for a result that is not UTF-8. A `%` not
/// followed by two hex digits stays as it is (as in percent-encoding).
fn percent_decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// One `key = value` of a key=value string: the key, the decoded value and
/// the byte range of the whole parameter.
struct Param<'a> {
    key: &'a str,
    value: String,
    span: std::ops::Range<usize>,
}

fn split_key_value(s: &str) -> Split {
    let whole = || Split {
        rest: s.to_string(),
        tls: Vec::new(),
    };
    let Some(params) = key_value_params(s) else {
        return whole();
    };
    let mut kept = Vec::new();
    let mut tls = Vec::new();
    for p in params {
        match tls_key(p.key) {
            Some(key) => tls.push((key, p.value)),
            None => kept.push(&s[p.span]),
        }
    }
    if tls.is_empty() {
        return whole();
    }
    Split {
        rest: kept.join(" "),
        tls,
    }
}

/// The parameters of a key=value string, read as tokio-postgres reads
/// them; `None` where it would report an error.
fn key_value_params(s: &str) -> Option<Vec<Param<'_>>> {
    let mut params = Vec::new();
    let mut it = s.char_indices().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut it);
        let Some(&(start, _)) = it.peek() else {
            return Some(params);
        };
        while it
            .next_if(|&(_, c)| !c.is_whitespace() && c != '=')
            .is_some()
        {}
        let key_end = it.peek().map_or(s.len(), |&(i, _)| i);
        let key = &s[start..key_end];
        if key.is_empty() {
            return None;
        }
        skip_ws(&mut it);
        it.next_if(|&(_, c)| c == '=')?;
        skip_ws(&mut it);
        let mut value = String::new();
        let end;
        if it.next_if(|&(_, c)| c == '\'').is_some() {
            loop {
                match it.next()? {
                    (i, '\'') => {
                        end = i + 1;
                        break;
                    }
                    (_, '\\') => value.push(it.next()?.1),
                    (_, c) => value.push(c),
                }
            }
        } else {
            loop {
                match it.peek() {
                    Some(&(_, c)) if !c.is_whitespace() => {
                        it.next();
                        if c == '\\' {
                            if let Some((_, c2)) = it.next() {
                                value.push(c2);
                            }
                        } else {
                            value.push(c);
                        }
                    }
                    Some(&(i, _)) => {
                        end = i;
                        break;
                    }
                    None => {
                        end = s.len();
                        break;
                    }
                }
            }
            if value.is_empty() {
                return None;
            }
        }
        params.push(Param {
            key,
            value,
            span: start..end,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, rest: &str, tls: &[(&str, &str)]) {
        let split = split_tls_params(input).unwrap();
        assert_eq!(split.rest, rest, "rest of {input}");
        let got: Vec<(&str, &str)> = split.tls.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(got, tls, "TLS parameters of {input}");
    }

    #[test]
    fn urls_lose_their_tls_parameters_only() {
        check(
            "postgres://u:p@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.pem&application_name=a",
            "postgres://u:p@h:5/db?application_name=a",
            &[("sslmode", "verify-full"), ("sslrootcert", "/tmp/ca x.pem")],
        );
        check(
            "postgresql://h/db?sslcert=/c.pem&sslkey=/k.pem",
            "postgresql://h/db",
            &[("sslcert", "/c.pem"), ("sslkey", "/k.pem")],
        );
        check("postgres://h/db", "postgres://h/db", &[]);
        check(
            "postgres://h/db?connect_timeout=3",
            "postgres://h/db?connect_timeout=3",
            &[],
        );
        // A '?' in the password is not the query.
        check(
            "postgres://u:p?w@h/db?sslmode=require",
            "postgres://u:p?w@h/db",
            &[("sslmode", "require")],
        );
        // Unknown or malformed pairs are left for tokio-postgres to judge.
        check(
            "postgres://h/db?sslmode&sslcrl=x",
            "postgres://h/db?sslmode&sslcrl=x",
            &[],
        );
        check(
            "postgres://h/db?ssl%6Dode=disable",
            "postgres://h/db",
            &[("sslmode", "disable")],
        );
        assert!(split_tls_params("postgres://h/db?sslrootcert=%FF").is_err());
    }

    #[test]
    fn key_value_strings_lose_their_tls_parameters_only() {
        check(
            "host=h  sslmode = verify-ca user=u sslrootcert='/a b/ca.pem' password='x y'",
            "host=h user=u password='x y'",
            &[("sslmode", "verify-ca"), ("sslrootcert", "/a b/ca.pem")],
        );
        check(
            r"sslkey=/k\ 1.pem dbname=d",
            "dbname=d",
            &[("sslkey", "/k 1.pem")],
        );
        check("host=h dbname=d", "host=h dbname=d", &[]);
        // What tokio-postgres refuses comes back whole.
        check("host=h sslmode=", "host=h sslmode=", &[]);
        check("sslmode='require", "sslmode='require", &[]);
        check("= x", "= x", &[]);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2f%").unwrap(), "a b/%");
        assert_eq!(percent_decode("%zz%4").unwrap(), "%zz%4");
        assert_eq!(percent_decode("%C3%A9").unwrap(), "é");
        assert!(percent_decode("%C3").is_err());
    }
}
