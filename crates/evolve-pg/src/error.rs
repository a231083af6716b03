use tokio_postgres::error::{DbError, ErrorPosition, SqlState};

/// Errors from talking to PostgreSQL. Messages never contain passwords.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The connection string could not be parsed.
    #[error(
        "connection string {url} is not valid: {reason}{}",
        form_hint(url, reason)
    )]
    BadUrl { url: String, reason: String },
    /// The server could not be reached or refused us. `given` names
    /// where the connection string came from (`--database-url` unless a
    /// caller says otherwise with [`PgError::given_by`]); the way out
    /// follows the server's refusal ([`connect_way_out`]).
    #[error(
        "could not connect to {target}: {reason}; {}",
        connect_way_out(reason, given)
    )]
    Connect {
        target: String,
        reason: String,
        given: &'static str,
    },
    /// TLS could not be set up (a file named in the connection string is
    /// unreadable) or failed (the server has no TLS, its certificate did not
    /// verify): see [`crate::tls`].
    #[error("could not connect to {target}: {reason}")]
    Tls { target: String, reason: String },
    /// The server asked for a password and none was found; `reason` says
    /// where it was looked for and the way out (a password file ignored
    /// for its permissions names the `chmod`).
    #[error("could not connect to {target}: the server asks for a password: {reason}")]
    Password { target: String, reason: String },
    /// A connection service (`service=NAME`, `PGSERVICE`) could not be
    /// read from the service files.
    #[error("{0}")]
    Service(String),
    /// A query failed. The message already carries the server's error
    /// (or the client's, with its cause), so it is not also the source:
    /// a chain printed in full would say it twice ("...: db error").
    #[error("{}", describe(.0))]
    Query(tokio_postgres::Error),
}

/// The way out of a failed connection whose error reads `reason`
/// (`ERROR 28P01: ...` when the server refused it), for a connection
/// string that `given` supplied: a refused password names the places a
/// password comes from, an unknown role or a missing `pg_hba.conf` line
/// the user and the server's configuration, an unknown database its name;
/// anything else (no answer, a refused TCP connection) the string and the
/// server.
pub fn connect_way_out(reason: &str, given: &str) -> String {
    let code = reason
        .strip_prefix("ERROR ")
        .or_else(|| reason.strip_prefix("FATAL "))
        .and_then(|r| r.split(':').next())
        .unwrap_or("");
    match code {
        "28P01" => format!(
            "check the password: the one in {given}, else PGPASSWORD or the password file (~/.pgpass)"
        ),
        "28000" => format!(
            "check the user in {given}, and that the server's pg_hba.conf lets it connect from here"
        ),
        "3D000" => format!("check the database name in {given}"),
        _ => format!("check {given} and that the server is running"),
    }
}

/// The way out after `reason`, unless it carries its own (after a `;`):
/// the form a connection string like `url` takes.
fn form_hint(url: &str, reason: &str) -> String {
    if reason.contains("; ") {
        String::new()
    } else {
        format!("; {}", form_of(url))
    }
}

/// The form a connection string like `url` takes, for a way out.
fn form_of(url: &str) -> &'static str {
    if url.contains("://") {
        "use postgres://user@host:port/database"
    } else {
        "use key=value pairs, e.g. host=db.example port=5432 dbname=shop user=app"
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> PgError {
        PgError::Query(e)
    }
}

impl PgError {
    /// This error, naming `given` (a flag, `the Flyway url`) as where the
    /// connection string came from.
    pub fn given_by(self, given: &'static str) -> PgError {
        match self {
            PgError::Connect { target, reason, .. } => PgError::Connect {
                target,
                reason,
                given,
            },
            other => other,
        }
    }

    /// The server's SQLSTATE, when the server reported the error.
    pub fn sqlstate(&self) -> Option<&SqlState> {
        match self {
            PgError::Query(e) => e.code(),
            _ => None,
        }
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => describe_db_error(db, None),
        None => e.to_string(),
    }
}

/// Formats a server error the way psql does, on as few lines as it needs:
/// `ERROR 42703: column "x" does not exist`, then `detail:`, `hint:` and
/// `where:` lines when the server sent them. `statement` (when given) lets
/// the position be shown as a line and column within that statement.
pub fn describe_db_error(db: &DbError, statement: Option<&str>) -> String {
    // The server quotes SQL in some messages (`at or near "'abc;` followed
    // by a newline): kept on the error's one line.
    let message = db.message().replace('\r', "\\r").replace('\n', "\\n");
    let mut out = format!("{} {}: {message}", db.severity(), db.code().code());
    if let (Some(ErrorPosition::Original(pos)), Some(stmt)) = (db.position(), statement) {
        let (line, col) = char_position(stmt, *pos as usize);
        out.push_str(&format!(" (at line {line}, column {col} of the statement)"));
    }
    if let Some(detail) = db.detail() {
        out.push_str(&format!("\n  detail: {detail}"));
    }
    if let Some(hint) = db.hint() {
        out.push_str(&format!("\n  hint: {hint}"));
    }
    if let Some(w) = db.where_() {
        out.push_str(&format!("\n  where: {}", w.replace('\n', "\n         ")));
    }
    out
}

/// Maps PostgreSQL's 1-based character position to a 1-based line and column.
fn char_position(text: &str, pos: usize) -> (usize, usize) {
    let (mut line, mut col) = (1, 1);
    for c in text.chars().take(pos.saturating_sub(1)) {
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line, col)
}

/// The server's SQLSTATE of an error, if the server sent one.
pub fn sqlstate(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.code()
}

/// True for `55P03 lock_not_available`, raised when `lock_timeout` expires.
pub fn is_lock_timeout(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

#[cfg(test)]
mod tests {
    use super::{char_position, connect_way_out};

    #[test]
    fn a_refused_login_names_what_to_check() {
        let way_out = |reason| connect_way_out(reason, "DATABASE_URL");
        assert!(
            way_out("FATAL 28P01: password authentication failed for user \"app\"")
                .starts_with("check the password: the one in DATABASE_URL, else PGPASSWORD")
        );
        assert!(
            way_out("FATAL 28000: no pg_hba.conf entry for host \"127.0.0.1\"")
                .contains("pg_hba.conf lets it connect")
        );
        assert_eq!(
            way_out("FATAL 3D000: database \"shop\" does not exist"),
            "check the database name in DATABASE_URL"
        );
        assert_eq!(
            way_out("error connecting to server: Connection refused (os error 111)"),
            "check DATABASE_URL and that the server is running"
        );
    }

    #[test]
    fn positions_count_characters_and_lines() {
        assert_eq!(char_position("select 1", 1), (1, 1));
        assert_eq!(char_position("select\n  x", 10), (2, 3));
        assert_eq!(char_position("é\nab", 4), (2, 2));
        assert_eq!(char_position("", 99), (1, 1));
    }

    /// The way out shows the form the user wrote: a URL or key=value pairs.
    #[test]
    fn a_bad_connection_string_is_answered_in_its_own_form() {
        let bad = |url: &str| {
            super::PgError::BadUrl {
                url: url.into(),
                reason: "r".into(),
            }
            .to_string()
        };
        assert!(bad("postgres://h:99999/db").ends_with("; use postgres://user@host:port/database"));
        assert!(bad("host=h sslmode=bogus").ends_with(
            "; use key=value pairs, e.g. host=db.example port=5432 dbname=shop user=app"
        ));
        let own = super::PgError::BadUrl {
            url: "host=h".into(),
            reason: "unknown parameter \"hots\"; did you mean \"host\"?".into(),
        }
        .to_string();
        assert!(own.ends_with("did you mean \"host\"?"), "{own}");
    }
}
