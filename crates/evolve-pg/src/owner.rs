//! Whether evolve may write to one of its own tables that is already there.
//!
//! evolve keeps its state in tables of the database it works on (the
//! migration history, backfill jobs, rewrite state, the refresh log, a
//! sink's progress, a replica's conflicts), created with `CREATE TABLE IF
//! NOT EXISTS` in a schema its role can create in. Anyone else who can
//! create there can create the table first, as theirs: a table's owner
//! decides its triggers, rules, defaults, check constraints and index
//! expressions, and those run with the privileges of whoever writes to
//! the table. A superuser running evolve would run them as a superuser.
//!
//! So before writing, evolve checks who owns the table it found. It is
//! trusted when its owner already holds every privilege of the connecting
//! role (it is that role, a superuser, or a member of that role): nothing
//! it runs can gain anything. Otherwise it is refused when the connecting
//! role is a superuser or has `CREATEROLE` (which in PostgreSQL 15 can
//! grant itself the roles that run programs on the server), and used when
//! both are ordinary roles (a team's shared tables, owned by whoever ran
//! evolve first, are the common case there). A relation of the table's
//! name that is not a table (a view, whose rules would take the writes) is
//! refused whoever owns it.

use tokio_postgres::Client;

/// Why a table cannot be used as evolve's.
#[derive(Debug)]
pub enum OwnerError {
    /// The catalog could not be read.
    Database(tokio_postgres::Error),
    /// The table is not evolve's to write: why (its kind or its owner)
    /// and the way out, as a clause for the caller's message about the
    /// table (`it is owned by role ...`).
    Refused(String),
}

impl std::fmt::Display for OwnerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnerError::Database(e) => match e.as_db_error() {
                Some(db) => f.write_str(&crate::describe_db_error(db, None)),
                None => write!(f, "{e}"),
            },
            OwnerError::Refused(message) => f.write_str(message),
        }
    }
}

impl From<tokio_postgres::Error> for OwnerError {
    fn from(e: tokio_postgres::Error) -> OwnerError {
        OwnerError::Database(e)
    }
}

/// Checks evolve's table `table` (as written in evolve's statements:
/// quoted and qualified, or a bare name found through the `search_path`)
/// before evolve writes to it; see the module's documentation. A table
/// that does not exist passes (evolve creates it as its own).
pub async fn check_state_table(client: &Client, table: &str) -> Result<(), OwnerError> {
    let row = client
        .query_opt(
            "SELECT c.oid::regclass::text, c.relkind::text, o.rolname::text, \
                    pg_has_role(c.relowner, current_user, 'USAGE'), \
                    (SELECT r.rolsuper OR r.rolcreaterole FROM pg_roles r WHERE r.rolname = current_user), \
                    current_user::text \
             FROM pg_class c JOIN pg_roles o ON o.oid = c.relowner \
             WHERE c.oid = to_regclass($1)",
            &[&table],
        )
        .await?;
    let Some(row) = row else {
        return Ok(());
    };
    let (name, kind, owner): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    let (owner_holds_us, privileged, us): (bool, Option<bool>, String) =
        (row.get(3), row.get(4), row.get(5));
    if kind != "r" && kind != "p" {
        return Err(OwnerError::Refused(format!(
            "it is a {} owned by {owner}, not a table; evolve keeps its state in a table of that name: drop or rename the {0} (after checking what it is), then run again",
            relkind_name(&kind)
        )));
    }
    if !owner_holds_us && privileged.unwrap_or(true) {
        return Err(OwnerError::Refused(format!(
            "it is owned by role {owner}, which cannot act as {us}: its triggers, rules, defaults and index expressions would run with {us}'s privileges; check the table, then ALTER TABLE {name} OWNER TO {} (or connect as {owner})",
            crate::quote_ident(&us)
        )));
    }
    Ok(())
}

/// `pg_class.relkind` in words.
fn relkind_name(kind: &str) -> &'static str {
    match kind {
        "v" => "view",
        "m" => "materialized view",
        "f" => "foreign table",
        "S" => "sequence",
        "i" | "I" => "index",
        "c" => "composite type",
        "t" => "TOAST table",
        _ => "relation",
    }
}
