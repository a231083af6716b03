//! libpq's rules for what a connection string leaves out: the service
//! file, the `PG*` environment variables, defaults, and the password file.
//!
//! Precedence, as libpq: a value in the connection string beats the
//! service file's, which beats the environment's, which beats the
//! default. A password still missing then is looked up in the password
//! file.
//!
//! Pure: the environment is a map, files are their text; reading them is
//! [`crate::sources`]'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::conninfo::Params;

/// The parameters the environment may supply, and their variables.
pub(crate) const ENV_VARS: &[(&str, &str)] = &[
    ("host", "PGHOST"),
    ("port", "PGPORT"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("passfile", "PGPASSFILE"),
    ("dbname", "PGDATABASE"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("application_name", "PGAPPNAME"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
];

/// The variables that say where files are, beyond [`ENV_VARS`].
pub(crate) const FILE_VARS: &[&str] = &["PGSERVICE", "PGSERVICEFILE", "PGSYSCONFDIR", "HOME"];

/// Where libpq (as Debian and Ubuntu build it) looks for the system-wide
/// `pg_service.conf` when `PGSYSCONFDIR` is unset.
const SYSCONFDIR: &str = "/etc/postgresql-common";

/// The environment variables that matter, without empty ones (libpq
/// treats an empty value as unset for every parameter evolve reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Env(BTreeMap<String, String>);

impl Env {
    /// The variables of `vars` that [`ENV_VARS`] and [`FILE_VARS`] name.
    pub(crate) fn new<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Env {
        let wanted = |k: &str| ENV_VARS.iter().any(|(_, v)| *v == k) || FILE_VARS.contains(&k);
        Env(vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, v)| wanted(k) && !v.is_empty())
            .collect())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// What libpq would use when neither string, service nor environment says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Defaults {
    /// The operating-system user's name, the default `user`.
    pub(crate) user: Option<String>,
    /// The Unix-socket directory connected to when no host is given.
    pub(crate) socket_dir: String,
}

/// The service to read: `service` of the connection string, else
/// `PGSERVICE`.
pub(crate) fn service_name(explicit: &Params, env: &Env) -> Option<String> {
    explicit
        .get("service")
        .map(String::as_str)
        .or_else(|| env.get("PGSERVICE"))
        .map(str::to_string)
}

/// A file that may define services.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServiceFile {
    pub(crate) path: PathBuf,
    /// Named by `PGSERVICEFILE`: an error if it cannot be read (the others
    /// are skipped when absent).
    pub(crate) required: bool,
}

/// The service files to look in, in order: `PGSERVICEFILE` (else
/// `~/.pg_service.conf`), then `PGSYSCONFDIR/pg_service.conf`. As libpq, the
/// first that defines the service is the one read.
pub(crate) fn service_files(env: &Env) -> Vec<ServiceFile> {
    let mut files = Vec::new();
    match env.get("PGSERVICEFILE") {
        Some(path) => files.push(ServiceFile {
            path: path.into(),
            required: true,
        }),
        None => {
            if let Some(home) = env.get("HOME") {
                files.push(ServiceFile {
                    path: PathBuf::from(home).join(".pg_service.conf"),
                    required: false,
                });
            }
        }
    }
    files.push(ServiceFile {
        path: PathBuf::from(env.get("PGSYSCONFDIR").unwrap_or(SYSCONFDIR)).join("pg_service.conf"),
        required: false,
    });
    files
}

/// The parameters of section `[name]` of a service file's `text`, read as
/// libpq reads it: blank lines and lines starting with `#` are skipped,
/// leading and trailing whitespace is dropped, each line of the section is
/// `key=value` with nothing trimmed around the `=`. `Ok(None)` when the file
/// has no such section; the error is the reason with its line number.
pub(crate) fn service_section(text: &str, name: &str) -> Result<Option<Params>, String> {
    let mut found: Option<Params> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(group) = line.strip_prefix('[') {
            if found.is_some() {
                break;
            }
            if group
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(']'))
            {
                found = Some(Params::new());
            }
            continue;
        }
        let Some(params) = found.as_mut() else {
            continue;
        };
        let line_no = n + 1;
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {line_no} is not key=value"));
        };
        if key == "service" {
            return Err(format!(
                "line {line_no} names another service; services cannot be nested"
            ));
        }
        if !crate::conninfo::is_known(key) {
            return Err(format!(
                "line {line_no} sets a parameter evolve does not know"
            ));
        }
        if value.is_empty() {
            params.remove(key);
        } else {
            params.insert(key.to_string(), value.to_string());
        }
    }
    Ok(found)
}

/// Every parameter: the connection string's, then the service's, then the
/// environment's ([`ENV_VARS`]), then the defaults (`user` the OS user,
/// `dbname` the user, `host` the socket directory when no host or hostaddr
/// is given).
pub(crate) fn merge(
    explicit: Params,
    service: Option<Params>,
    env: &Env,
    defaults: &Defaults,
) -> Params {
    let mut params = explicit;
    params.remove("service");
    for (key, value) in service.unwrap_or_default() {
        params.entry(key).or_insert(value);
    }
    for (key, var) in ENV_VARS {
        if let Some(value) = env.get(var) {
            params
                .entry(key.to_string())
                .or_insert_with(|| value.to_string());
        }
    }
    if let Some(user) = &defaults.user {
        params.entry("user".into()).or_insert_with(|| user.clone());
    }
    if let Some(user) = params.get("user").cloned() {
        params.entry("dbname".into()).or_insert(user);
    }
    if !params.contains_key("host") && !params.contains_key("hostaddr") {
        params.insert("host".into(), defaults.socket_dir.clone());
    }
    params
}

/// The password file: `passfile` (which `PGPASSFILE` supplies), else
/// `~/.pgpass`.
pub(crate) fn passfile(params: &Params, env: &Env) -> Option<PathBuf> {
    match params.get("passfile") {
        Some(path) => Some(path.into()),
        None => env
            .get("HOME")
            .map(|home| PathBuf::from(home).join(".pgpass")),
    }
}

/// What a password-file line is matched against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PgpassKey {
    pub(crate) host: String,
    pub(crate) port: String,
    pub(crate) dbname: String,
    pub(crate) user: String,
}

impl std::fmt::Display for PgpassKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let esc = |s: &str| s.replace('\\', "\\\\").replace(':', "\\:");
        write!(
            f,
            "{}:{}:{}:{}",
            esc(&self.host),
            esc(&self.port),
            esc(&self.dbname),
            esc(&self.user)
        )
    }
}

/// The key of the first host of merged `params`, as libpq forms it: the
/// host (its `hostaddr` if it has no name), `localhost` for the default
/// Unix-socket directory `socket_dir`; the port, 5432 when unset.
pub(crate) fn pgpass_key(params: &Params, socket_dir: &str) -> PgpassKey {
    let first = |key: &str| {
        params
            .get(key)
            .and_then(|v| v.split(',').next())
            .unwrap_or("")
            .to_string()
    };
    let mut host = first("host");
    if host.is_empty() {
        host = first("hostaddr");
    }
    if host.is_empty() || host == socket_dir {
        host = "localhost".into();
    }
    let mut port = first("port");
    if port.is_empty() {
        port = "5432".into();
    }
    PgpassKey {
        host,
        port,
        dbname: params.get("dbname").cloned().unwrap_or_default(),
        user: params.get("user").cloned().unwrap_or_default(),
    }
}

/// The password of the first line of a password file's `text` that
/// matches `key`, read as libpq reads it: `host:port:database:user:password`,
/// `*` alone matches anything, `\:` and `\\` stand for `:` and `\`, lines
/// starting with `#` are comments. `None` when no line matches (or the one
/// that does has an empty password).
pub(crate) fn pgpass_lookup(text: &str, key: &PgpassKey) -> Option<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .find_map(|line| {
            let rest = match_field(line, &key.host)?;
            let rest = match_field(rest, &key.port)?;
            let rest = match_field(rest, &key.dbname)?;
            let rest = match_field(rest, &key.user)?;
            Some(unescape_password(rest))
        })
        .filter(|p| !p.is_empty())
}

/// libpq's `pwdfMatchesString`: the rest of `line` after its first field
/// if that field matches `token`.
fn match_field<'a>(line: &'a str, token: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix("*:") {
        return Some(rest);
    }
    let mut chars = line.char_indices();
    let mut tok = token.chars().peekable();
    loop {
        let (i, c) = chars.next()?;
        let (c, escaped, end) = if c == '\\' {
            let (j, c2) = chars.next()?;
            (c2, true, j + c2.len_utf8())
        } else {
            (c, false, i + c.len_utf8())
        };
        if c == ':' && !escaped && tok.peek().is_none() {
            return Some(&line[end..]);
        }
        if tok.next()? != c {
            return None;
        }
    }
}

/// The password field: up to an unescaped `:` or the end, `\x` read as `x`.
fn unescape_password(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ':' => break,
            '\\' if chars.peek().is_some() => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conninfo;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::new(vars.iter().copied())
    }

    fn defaults() -> Defaults {
        Defaults {
            user: Some("osuser".into()),
            socket_dir: "/var/run/postgresql".into(),
        }
    }

    #[track_caller]
    fn resolved(url: &str, service: Option<&str>, vars: &[(&str, &str)]) -> Vec<(String, String)> {
        let explicit = conninfo::parse(url).unwrap();
        let service = service.map(|text| service_section(text, "s").unwrap().unwrap());
        merge(explicit, service, &env(vars), &defaults())
            .into_iter()
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn string_beats_service_beats_environment_beats_defaults() {
        let service = "[s]\nhost=svc.example\nport=6000\ndbname=svcdb\nsslmode=require\n";
        let vars = [
            ("PGHOST", "env.example"),
            ("PGPORT", "7000"),
            ("PGUSER", "envuser"),
            ("PGDATABASE", "envdb"),
            ("PGPASSWORD", "envpw"),
            ("PGSSLMODE", "disable"),
            ("PGAPPNAME", "envapp"),
            ("PGCONNECT_TIMEOUT", "3"),
            ("PGSSLROOTCERT", "/ca.pem"),
            ("UNRELATED", "x"),
        ];
        assert_eq!(
            resolved("postgres://app@db.example/shop", Some(service), &vars),
            pairs(&[
                ("user", "app"),
                ("host", "db.example"),
                ("dbname", "shop"),
                ("port", "6000"),
                ("sslmode", "require"),
                ("password", "envpw"),
                ("application_name", "envapp"),
                ("connect_timeout", "3"),
                ("sslrootcert", "/ca.pem"),
            ])
        );
        // key=value says the same.
        assert_eq!(
            resolved("user=app host=db.example dbname=shop", Some(service), &vars),
            resolved("postgres://app@db.example/shop", Some(service), &vars),
        );
        // Nothing given: the environment, then the defaults.
        assert_eq!(
            resolved("", None, &vars[..3]),
            pairs(&[
                ("host", "env.example"),
                ("port", "7000"),
                ("user", "envuser"),
                ("dbname", "envuser"),
            ])
        );
        assert_eq!(
            resolved("", None, &[("PGHOST", "")]),
            pairs(&[
                ("host", "/var/run/postgresql"),
                ("user", "osuser"),
                ("dbname", "osuser"),
            ])
        );
        // A hostaddr alone needs no default host.
        assert_eq!(
            resolved("hostaddr=127.0.0.1", None, &[]),
            pairs(&[
                ("hostaddr", "127.0.0.1"),
                ("user", "osuser"),
                ("dbname", "osuser")
            ])
        );
    }

    #[test]
    fn the_service_comes_from_the_string_or_pgservice() {
        let explicit = conninfo::parse("service=a").unwrap();
        assert_eq!(
            service_name(&explicit, &env(&[("PGSERVICE", "b")])),
            Some("a".into())
        );
        let explicit = conninfo::parse("host=h").unwrap();
        assert_eq!(
            service_name(&explicit, &env(&[("PGSERVICE", "b")])),
            Some("b".into())
        );
        assert_eq!(service_name(&explicit, &env(&[])), None);
    }

    #[test]
    fn service_files_are_looked_for_as_libpq_does() {
        let files = service_files(&env(&[("HOME", "/home/u")]));
        assert_eq!(
            files,
            [
                ServiceFile {
                    path: "/home/u/.pg_service.conf".into(),
                    required: false
                },
                ServiceFile {
                    path: "/etc/postgresql-common/pg_service.conf".into(),
                    required: false
                },
            ]
        );
        let files = service_files(&env(&[
            ("HOME", "/home/u"),
            ("PGSERVICEFILE", "/s.conf"),
            ("PGSYSCONFDIR", "/etc/pg"),
        ]));
        assert_eq!(
            files,
            [
                ServiceFile {
                    path: "/s.conf".into(),
                    required: true
                },
                ServiceFile {
                    path: "/etc/pg/pg_service.conf".into(),
                    required: false
                },
            ]
        );
    }

    #[test]
    fn service_sections_as_libpq_reads_them() {
        let text = "# services\n\n[other]\nhost=o\n  [s]  \n  host=h\nport=5433\r\npassword=a b=c \n# note\n[s2]\nhost=x\n";
        let section = service_section(text, "s").unwrap().unwrap();
        assert_eq!(
            section.into_iter().collect::<Vec<_>>(),
            pairs(&[("host", "h"), ("port", "5433"), ("password", "a b=c")])
        );
        assert_eq!(service_section(text, "nope").unwrap(), None);
        assert_eq!(
            service_section("[s]\nhost h\n", "s").unwrap_err(),
            "line 2 is not key=value"
        );
        assert_eq!(
            service_section("[s]\nservice=t\n", "s").unwrap_err(),
            "line 2 names another service; services cannot be nested"
        );
        assert_eq!(
            service_section("[s]\nhots=t\n", "s").unwrap_err(),
            "line 2 sets a parameter evolve does not know"
        );
        // Lines of other sections are not checked.
        assert_eq!(
            service_section("[t]\nnonsense\n[s]\nhost=h\n", "s")
                .unwrap()
                .map(|p| p.len()),
            Some(1)
        );
    }

    fn key(host: &str, port: &str, dbname: &str, user: &str) -> PgpassKey {
        PgpassKey {
            host: host.into(),
            port: port.into(),
            dbname: dbname.into(),
            user: user.into(),
        }
    }

    #[test]
    fn password_file_lines_as_libpq_reads_them() {
        let text = "\
# comment:*:*:*:nope
db.example:5432:shop:app:first
db.example:5432:shop:app:second
*:*:*:ops:ops\\:pw\\\\x:ignored
h\\:6:*:*:*:colon-host
::1:5432:*:*:v6
*:5433:*:*:
*:*:*:*:fallback
";
        let lookup = |k: PgpassKey| pgpass_lookup(text, &k);
        assert_eq!(
            lookup(key("db.example", "5432", "shop", "app")).as_deref(),
            Some("first"),
            "first match wins"
        );
        assert_eq!(
            lookup(key("other", "1", "x", "ops")).as_deref(),
            Some("ops:pw\\x"),
            "escapes, and the password ends at an unescaped colon"
        );
        assert_eq!(
            lookup(key("h:6", "1", "x", "u")).as_deref(),
            Some("colon-host")
        );
        assert_eq!(lookup(key("::1", "5432", "x", "u")).as_deref(), Some("v6"));
        assert_eq!(
            lookup(key("db.example", "5433", "shop", "app")),
            None,
            "an empty password is none"
        );
        assert_eq!(
            lookup(key("db.example", "5432", "shop", "nobody")).as_deref(),
            Some("fallback")
        );
        // '*' is a wildcard only as a whole field.
        assert_eq!(
            pgpass_lookup("db*:*:*:*:x\n", &key("dbx", "1", "d", "u")),
            None
        );
        assert_eq!(
            pgpass_lookup("db*:*:*:*:x", &key("db*", "1", "d", "u")).as_deref(),
            Some("x")
        );
        // CRLF files.
        assert_eq!(
            pgpass_lookup("h:1:d:u:pw\r\n", &key("h", "1", "d", "u")).as_deref(),
            Some("pw")
        );
        assert_eq!(pgpass_lookup("", &key("h", "1", "d", "u")), None);
        assert_eq!(pgpass_lookup("h:1:d", &key("h", "1", "d", "u")), None);
    }

    #[test]
    fn unix_sockets_match_localhost_as_in_libpq() {
        let params = |url: &str| merge(conninfo::parse(url).unwrap(), None, &env(&[]), &defaults());
        assert_eq!(
            pgpass_key(&params("dbname=shop"), "/var/run/postgresql"),
            key("localhost", "5432", "shop", "osuser")
        );
        assert_eq!(
            pgpass_key(
                &params("host=/var/run/postgresql port=5433 user=app"),
                "/var/run/postgresql"
            ),
            key("localhost", "5433", "app", "app")
        );
        // Another socket directory matches only itself.
        assert_eq!(
            pgpass_key(&params("host=/tmp/x"), "/var/run/postgresql").host,
            "/tmp/x"
        );
        assert_eq!(
            pgpass_key(&params("postgres://a@h1:7,h2/d"), "/var/run/postgresql"),
            key("h1", "7", "d", "a")
        );
        assert_eq!(
            pgpass_key(&params("hostaddr=10.0.0.1"), "/var/run/postgresql").host,
            "10.0.0.1"
        );
        assert_eq!(key("h:1", "5", "d\\b", "u").to_string(), "h\\:1:5:d\\\\b:u");
    }

    #[test]
    fn the_password_file_is_passfile_or_home() {
        let p = conninfo::parse("passfile=/p").unwrap();
        assert_eq!(passfile(&p, &env(&[("HOME", "/h")])), Some("/p".into()));
        let p = Params::new();
        assert_eq!(
            passfile(&p, &env(&[("HOME", "/h")])),
            Some("/h/.pgpass".into())
        );
        assert_eq!(passfile(&p, &env(&[])), None);
    }

    proptest::proptest! {
        #[test]
        fn password_files_never_panic(
            text in "[a-z*:\\\\#\\n\\r é]{0,80}",
            host in "[a-z:\\\\]{0,4}",
            user in "[a-z*]{0,3}",
        ) {
            let _ = pgpass_lookup(&text, &key(&host, "5432", "d", &user));
        }

        #[test]
        fn service_files_never_panic(text in "[a-z\\[\\]=#\\n\\r é]{0,80}", name in "[a-z\\]]{0,3}") {
            let _ = service_section(&text, &name);
        }

        #[test]
        fn a_written_line_is_found(
            host in "[a-z:\\\\*]{1,6}",
            user in "[a-z:\\\\]{1,6}",
            password in "[a-z:\\\\]{1,8}",
        ) {
            let k = key(&host, "5432", "db", &user);
            let esc = |s: &str| s.replace('\\', "\\\\").replace(':', "\\:");
            let line = format!("{k}:{}\n", esc(&password));
            proptest::prop_assert_eq!(pgpass_lookup(&line, &k), Some(password));
        }
    }
}
