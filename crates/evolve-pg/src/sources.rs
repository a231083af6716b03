//! The I/O of resolving a connection string: the process's environment,
//! the service and password files, and the password file's permissions.
//! The rules are [`crate::resolve`]'s.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::PgError;
use crate::conninfo::{self, Params};
use crate::resolve::{self, Defaults, Env};
use crate::tls::io_reason;

/// Every parameter of a connection string after libpq's rules, and, when
/// there is still no password, why not.
pub(crate) struct Resolution {
    pub(crate) params: Params,
    /// Why no password was found (with the way out), for the error when
    /// the server asks for one.
    pub(crate) no_password: Option<String>,
}

/// Reads `url` and fills in what it leaves out from the service file, the
/// environment, the defaults and the password file.
pub(crate) fn resolve(url: &str) -> Result<Resolution, PgError> {
    let explicit = conninfo::parse(url).map_err(|reason| PgError::BadUrl {
        url: conninfo::redact(url),
        reason,
    })?;
    let env = Env::new(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    );
    let service = match resolve::service_name(&explicit, &env) {
        Some(name) => Some(read_service(&name, &env)?),
        None => None,
    };
    let defaults = Defaults {
        user: whoami::username().ok(),
        socket_dir: default_socket_dir(),
    };
    let mut params = resolve::merge(explicit, service, &env, &defaults);
    let mut no_password = None;
    if !params.contains_key("password") {
        match password_from_file(&params, &env, &defaults.socket_dir) {
            Ok(password) => {
                params.insert("password".into(), password);
            }
            Err(why) => no_password = Some(why),
        }
    }
    Ok(Resolution {
        params,
        no_password,
    })
}

/// Where libpq connects when no host is given: Debian's and Ubuntu's socket
/// directory when it exists, else PostgreSQL's own default.
fn default_socket_dir() -> String {
    let debian = "/var/run/postgresql";
    if Path::new(debian).is_dir() {
        debian.into()
    } else {
        "/tmp".into()
    }
}

/// The parameters of service `name`, from the first service file that
/// defines it.
fn read_service(name: &str, env: &Env) -> Result<Params, PgError> {
    let files = resolve::service_files(env);
    for file in &files {
        let path = file.path.display();
        let text = match std::fs::read(&file.path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if !file.required && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(PgError::Service(format!(
                    "cannot read service file {path} (for service \"{name}\"): {}",
                    io_reason(&e)
                )));
            }
        };
        match resolve::service_section(&text, name) {
            Ok(Some(params)) => return Ok(params),
            Ok(None) => {}
            Err(reason) => {
                return Err(PgError::Service(format!(
                    "service file {path}: {reason}; fix that line"
                )));
            }
        }
    }
    let looked: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    Err(PgError::Service(format!(
        "service \"{name}\" is not defined in {}; add a [{name}] section or fix the name (the service file is PGSERVICEFILE, else ~/.pg_service.conf, and PGSYSCONFDIR/pg_service.conf)",
        looked.join(" or ")
    )))
}

/// The password-file line for the first host of `params`; the error says
/// why there is none, and the way out.
fn password_from_file(params: &Params, env: &Env, socket_dir: &str) -> Result<String, String> {
    let key = resolve::pgpass_key(params, socket_dir);
    let Some(path) = resolve::passfile(params, env) else {
        return Err(
            "none was given; set PGPASSWORD or PGPASSFILE, or put it in the connection string"
                .into(),
        );
    };
    let shown = path.display();
    let Ok(meta) = std::fs::metadata(&path) else {
        return Err(format!(
            "none was given; set PGPASSWORD, put it in the connection string, or add the line {key}:PASSWORD to the password file {shown} (mode 0600)"
        ));
    };
    if !meta.is_file() {
        let why = format!("password file {shown} is not a plain file and is ignored");
        warn_once(&path, &why);
        return Err(why);
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        let why = format!(
            "password file {shown} is ignored because group or others can access it (mode {mode:04o}); run chmod 0600 {shown}"
        );
        warn_once(&path, &why);
        return Err(why);
    }
    let text = std::fs::read(&path)
        .map_err(|e| format!("password file {shown} cannot be read: {}", io_reason(&e)))?;
    resolve::pgpass_lookup(&String::from_utf8_lossy(&text), &key).ok_or_else(|| {
        format!(
            "password file {shown} has no line for {key}; add {key}:PASSWORD, set PGPASSWORD or put it in the connection string"
        )
    })
}

/// A warning about the password file `path`, once per process (as libpq,
/// which warns on every connection, but without repeating itself).
fn warn_once(path: &Path, message: &str) {
    static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let first = WARNED
        .lock()
        .map(|mut warned| warned.insert(path.to_path_buf()))
        .unwrap_or(true);
    if first {
        tracing::warn!("{message}");
    }
}
