//! What a source, a table and a sink need of their servers, checked before
//! anything is created: by `CREATE SOURCE`, `CREATE TABLE` and `CREATE
//! SINK` (which refuse with the first failed check, creating nothing), and
//! all at once by `evolve pipeline check`.
//!
//! Each [`Check`] names what it looked at and, when it fails, the
//! statement that fixes it (`ALTER SYSTEM`, `ALTER ROLE`, `GRANT`,
//! `ALTER PUBLICATION`) for the role the connection logs in as.
//!
//! An upstream needs `wal_level = logical`, a role with the `REPLICATION`
//! attribute (or a superuser), a free replication slot (one more while a
//! table's snapshot is copied) and a free WAL sender (two while a snapshot
//! is copied), and either the publication already or the `CREATE`
//! privilege on the database to create it. Each table needs `SELECT` for
//! the snapshot, and must be in the publication (it is, when the
//! publication is `FOR ALL TABLES` or its owner added it) or owned by the
//! role, which then adds it. A sink needs `CREATE` on its schema (or the
//! target and `evolve_sink_progress` tables already, with `SELECT`,
//! `INSERT`, `UPDATE` and `DELETE`).

use serde::Serialize;
use tokio_postgres::Client;

use crate::error::{PipelineError, Result};
use crate::sink::PROGRESS_TABLE;

/// One check and its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked: `wal_level`, `replication role`, `publication`,
    /// `table public.orders`, ...
    pub subject: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub message: String,
    /// What to run to fix it, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn pass(subject: impl Into<String>, message: impl Into<String>) -> Check {
        Check {
            subject: subject.into(),
            ok: true,
            message: message.into(),
            fix: None,
        }
    }

    fn fail(
        subject: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            subject: subject.into(),
            ok: false,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    /// This failed check as the error of the statement it refuses.
    pub fn refusal(&self) -> PipelineError {
        PipelineError::Refused {
            sqlstate: if self.subject == "wal_level" || self.subject.starts_with("free ") {
                "55000"
            } else {
                "42501"
            },
            primary: self.message.clone(),
            detail: None,
            hint: self.fix.as_ref().map(|f| format!("Run: {f}")),
        }
    }
}

/// The first failed check as an error, if any failed.
pub fn first_failure(checks: &[Check]) -> Result<()> {
    match checks.iter().find(|c| !c.ok) {
        Some(c) => Err(c.refusal()),
        None => Ok(()),
    }
}

fn db_error(what: &str) -> impl FnOnce(tokio_postgres::Error) -> PipelineError + '_ {
    move |e| PipelineError::database(format!("check {what}"), &e)
}

/// The role and database of `client`'s session, as the server's
/// `quote_ident` writes them in statements (quoted only when needed).
async fn whoami(client: &Client) -> Result<(String, String)> {
    let row = client
        .query_one(
            "SELECT quote_ident(current_user), quote_ident(current_database())",
            &[],
        )
        .await
        .map_err(db_error("the session's role"))?;
    Ok((row.get(0), row.get(1)))
}

/// `names` joined with `.`, each as the server's `quote_ident` writes it.
async fn ident(client: &Client, names: &[&str]) -> Result<String> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let row = client
            .query_one("SELECT quote_ident($1)", &[name])
            .await
            .map_err(db_error("a name"))?;
        out.push(row.get::<_, String>(0));
    }
    Ok(out.join("."))
}

/// What an upstream needs for a source streaming `publication`; with
/// `new_slot`, the slot a source still to be created would make, which
/// must not exist yet.
pub async fn upstream(
    client: &Client,
    publication: &str,
    new_slot: Option<&str>,
) -> Result<Vec<Check>> {
    let (role, database) = whoami(client).await?;
    let mut checks = Vec::new();
    // WAL senders are counted with pg_stat_get_wal_senders(), which lists
    // every one to every role (pg_stat_activity hides the backend type of
    // other roles' sessions from a role without pg_read_all_stats).
    let row = client
        .query_one(
            "SELECT current_setting('wal_level'), \
                    r.rolreplication, r.rolsuper, \
                    current_setting('max_replication_slots')::int \
                      - (SELECT count(*) FROM pg_replication_slots)::int, \
                    current_setting('max_wal_senders')::int \
                      - (SELECT count(*) FROM pg_stat_get_wal_senders())::int, \
                    has_database_privilege(current_database(), 'CREATE') \
             FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await
        .map_err(db_error("the upstream's settings"))?;
    let wal_level: String = row.get(0);
    let (replication, superuser): (bool, bool) = (row.get(1), row.get(2));
    let free_slots: i32 = row.get(3);
    let free_senders: i32 = row.get(4);
    let may_create: bool = row.get(5);

    checks.push(if wal_level == "logical" {
        Check::pass("wal_level", "wal_level is logical")
    } else {
        Check::fail(
            "wal_level",
            format!("wal_level is {wal_level}; logical replication needs logical"),
            "ALTER SYSTEM SET wal_level = logical; then restart the server",
        )
    });
    checks.push(if replication || superuser {
        Check::pass(
            "replication role",
            format!(
                "role {role} may start replication ({})",
                if superuser {
                    "superuser"
                } else {
                    "REPLICATION"
                }
            ),
        )
    } else {
        Check::fail(
            "replication role",
            format!("role {role} does not have the REPLICATION attribute"),
            format!("ALTER ROLE {role} REPLICATION;"),
        )
    });
    checks.push(if free_slots >= 2 {
        Check::pass(
            "free replication slots",
            format!("{free_slots} replication slots free"),
        )
    } else {
        Check::fail(
            "free replication slots",
            format!(
                "{} replication slots free; a source needs one, and one more while a table's snapshot is copied",
                free_slots.max(0)
            ),
            "ALTER SYSTEM SET max_replication_slots = <more>; then restart the server (or drop unused slots with pg_drop_replication_slot)",
        )
    });
    checks.push(if free_senders >= 2 {
        Check::pass(
            "free WAL senders",
            format!("{free_senders} WAL senders free"),
        )
    } else {
        Check::fail(
            "free WAL senders",
            format!(
                "{} WAL senders free; a source streams with one, and one more while a table's snapshot is copied",
                free_senders.max(0)
            ),
            "ALTER SYSTEM SET max_wal_senders = <more>; then restart the server",
        )
    });
    let existing = client
        .query_opt(
            "SELECT p.puballtables, pg_get_userbyid(p.pubowner)::text, \
                    array_remove(ARRAY[CASE WHEN NOT p.pubinsert THEN 'insert' END, \
                                       CASE WHEN NOT p.pubupdate THEN 'update' END, \
                                       CASE WHEN NOT p.pubdelete THEN 'delete' END, \
                                       CASE WHEN NOT p.pubtruncate THEN 'truncate' END], NULL) \
             FROM pg_publication p WHERE p.pubname = $1",
            &[&publication],
        )
        .await
        .map_err(db_error("the publication"))?;
    let publication_q = ident(client, &[publication]).await?;
    let subject = format!("publication {publication_q}");
    checks.push(match existing {
        Some(row) if !row.get::<_, Vec<String>>(2).is_empty() => Check::fail(
            subject,
            format!(
                "publication {publication_q} does not publish {}, so those changes would never reach the pipeline",
                row.get::<_, Vec<String>>(2).join(", ")
            ),
            format!("ALTER PUBLICATION {publication_q} SET (publish = 'insert, update, delete, truncate');"),
        ),
        Some(row) => {
            let (all, owner): (bool, String) = (row.get(0), row.get(1));
            Check::pass(
                subject,
                format!(
                    "publication {publication_q} exists ({}, owned by {owner})",
                    if all { "FOR ALL TABLES" } else { "its own tables" }
                ),
            )
        }
        None if may_create => Check::pass(
            subject,
            format!("publication {publication_q} does not exist; role {role} may create it"),
        ),
        None => Check::fail(
            subject,
            format!("publication {publication_q} does not exist and role {role} may not create it"),
            format!(
                "CREATE PUBLICATION {publication_q} FOR TABLE <the tables>; as the tables' owner (or GRANT CREATE ON DATABASE {database} TO {role};)"
            ),
        ),
    });
    if let Some(slot) = new_slot {
        let taken = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(db_error("the replication slots"))?
            .is_some();
        let subject = format!("replication slot {slot}");
        checks.push(if taken {
            Check::fail(
                subject,
                format!(
                    "replication slot {slot} exists upstream already, so CREATE SOURCE would fail: another pipeline may own it"
                ),
                format!(
                    "name the source otherwise, or if nothing uses the slot: SELECT pg_drop_replication_slot('{slot}');"
                ),
            )
        } else {
            Check::pass(subject, format!("replication slot {slot} is free"))
        });
    }
    Ok(checks)
}

/// What upstream table `t.schema.t.table` needs to be read by a source
/// streaming `t.publication`: `SELECT`; membership of the publication, or
/// ownership so that the role can add it (for a table not created yet);
/// and a publication that sends every change of it
/// ([`crate::upstream::PublishedTable::gap`]).
pub async fn upstream_table(client: &Client, t: &PlannedTable) -> Result<Vec<Check>> {
    let (publication, schema, table) =
        (t.publication.as_str(), t.schema.as_str(), t.table.as_str());
    let (role, _) = whoami(client).await?;
    let name = ident(client, &[schema, table]).await?;
    let subject = format!("table {schema}.{table}");
    let row = client
        .query_opt(
            "SELECT has_table_privilege(c.oid, 'SELECT') AND has_schema_privilege(n.oid, 'USAGE'), \
                    pg_has_role(c.relowner, 'USAGE'), \
                    pg_get_userbyid(c.relowner)::text, \
                    EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $3 AND p.puballtables) \
                    OR EXISTS (SELECT 1 FROM pg_publication_tables t \
                               WHERE t.pubname = $3 AND t.schemaname = $1 AND t.tablename = $2), \
                    EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $3), \
                    has_schema_privilege(n.oid, 'USAGE'), c.oid \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&schema, &table, &publication],
        )
        .await
        .map_err(db_error("the upstream table"))?;
    // A missing table, a view or a partitioned table, a table without a
    // key: what CREATE TABLE would refuse (it names each itself).
    if let Err(e) = crate::upstream::inspect_table(client, &t.source, schema, table).await {
        if matches!(e, PipelineError::Database { .. }) {
            return Err(e);
        }
        let fix = e.hint().unwrap_or_else(|| match &e {
            PipelineError::UpstreamTableNotFound { .. } => {
                "create the table upstream first, or fix the REFERENCE".to_string()
            }
            _ => "REFERENCE an ordinary table with a primary key".to_string(),
        });
        return Ok(vec![Check::fail(subject, e.primary(), fix)]);
    }
    let Some(row) = row else {
        return Ok(Vec::new());
    };
    let (select, owns, owner, member, exists, usage): (bool, bool, String, bool, bool, bool) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
    );
    // Reading a table needs USAGE on its schema as well as SELECT on it.
    let mut checks = vec![if select {
        Check::pass(subject.clone(), format!("role {role} may read {name}"))
    } else if !usage {
        let schema_q = ident(client, &[schema]).await?;
        Check::fail(
            subject.clone(),
            format!(
                "role {role} may not read {name}: it lacks USAGE on schema {schema_q} (its snapshot needs it, beside SELECT on the table)"
            ),
            format!(
                "GRANT USAGE ON SCHEMA {schema_q} TO {role}; GRANT SELECT ON {name} TO {role};"
            ),
        )
    } else {
        Check::fail(
            subject.clone(),
            format!("role {role} may not read {name} (its snapshot needs SELECT)"),
            format!("GRANT SELECT ON {name} TO {role};"),
        )
    }];
    let oid: u32 = row.get(6);
    let publication_q = ident(client, &[publication]).await?;
    let gap = crate::upstream::publication_gaps(client, publication, &[oid])
        .await?
        .into_iter()
        .find_map(|p| p.gap(false, |c| !t.exclude.iter().any(|x| x == c)));
    if let Some((problem, fix)) = gap {
        checks.push(Check::fail(subject.clone(), problem, fix));
    }
    // An enum value renamed since the table pinned its labels: its
    // documents still show the old one (the running stream stalls it).
    if let Some(pinned) = &t.pinned {
        for (_, problem) in crate::upstream::relabeled_enums(client, &[pinned]).await? {
            let (problem, fix) = problem
                .split_once("; way out: ")
                .map(|(p, f)| (p.to_string(), f.to_string()))
                .unwrap_or((problem, String::new()));
            checks.push(Check::fail(subject.clone(), problem, fix));
        }
    }
    checks.push(if member {
        Check::pass(
            subject,
            format!("{name} is in publication {publication_q}"),
        )
    } else if t.pinned.is_some() {
        Check::fail(
            subject,
            format!(
                "{name} is not in publication {publication_q}, so its changes do not reach the stream (its table stalls, since it missed them)"
            ),
            format!("ALTER PUBLICATION {publication_q} ADD TABLE {name}; then a new version of the table through a replacement"),
        )
    } else if owns {
        Check::pass(
            subject,
            format!("{name} is owned by {owner}: role {role} adds it to publication {publication_q}"),
        )
    } else if exists {
        Check::fail(
            subject,
            format!(
                "{name} is not in publication {publication_q}, and role {role} cannot add it (the table belongs to {owner})"
            ),
            format!(
                "ALTER PUBLICATION {publication_q} ADD TABLE {name}; as {owner} (the table's owner, who must also own the publication)"
            ),
        )
    } else {
        Check::fail(
            subject,
            format!(
                "role {role} would create publication {publication_q} but cannot add {name} to it (the table belongs to {owner})"
            ),
            format!("CREATE PUBLICATION {publication_q} FOR TABLE {name}; as {owner}"),
        )
    });
    Ok(checks)
}

/// What a sink into `schema.table` needs of its server.
pub async fn sink(client: &Client, schema: &str, table: &str) -> Result<Vec<Check>> {
    let (role, _) = whoami(client).await?;
    let mut checks = Vec::new();
    let may_create: Option<bool> = client
        .query_one(
            "SELECT CASE WHEN to_regnamespace(quote_ident($1)) IS NULL THEN NULL \
                    ELSE has_schema_privilege(to_regnamespace(quote_ident($1)), 'CREATE') END",
            &[&schema],
        )
        .await
        .map_err(db_error("the sink's schema"))?
        .get(0);
    let schema_q = ident(client, &[schema]).await?;
    let Some(may_create) = may_create else {
        checks.push(Check::fail(
            format!("schema {schema}"),
            format!("schema {schema_q} does not exist on the sink's server"),
            format!("CREATE SCHEMA {schema_q} AUTHORIZATION {role};"),
        ));
        return Ok(checks);
    };
    for target in [table, PROGRESS_TABLE] {
        let name = ident(client, &[schema, target]).await?;
        let subject = format!("sink table {schema}.{target}");
        let rights: Option<bool> = client
            .query_one(
                "SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL \
                        ELSE (SELECT bool_and(has_table_privilege(to_regclass($1), p)) FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p) END",
                &[&name],
            )
            .await
            .map_err(db_error("the sink's tables"))?
            .get(0);
        checks.push(match rights {
            Some(true) => Check::pass(subject, format!("role {role} may write {name}")),
            Some(false) => Check::fail(
                subject,
                format!("role {role} may not write {name}"),
                format!("GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {role};"),
            ),
            None if may_create => Check::pass(
                subject,
                format!("{name} does not exist; role {role} may create it"),
            ),
            None => Check::fail(
                subject,
                format!(
                    "{name} does not exist and role {role} may not create tables in schema {schema_q}"
                ),
                format!("GRANT CREATE ON SCHEMA {schema_q} TO {role};"),
            ),
        });
    }
    Ok(checks)
}

// ----------------------------------------------------------------- plans

/// What `evolve pipeline check` checks: the upstream of each source, each
/// table, each sink, whether from the catalog or from a file of
/// statements not run yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each source.
    pub sources: Vec<PlannedSource>,
    /// Each table.
    pub tables: Vec<PlannedTable>,
    /// `(connection, schema, table)` of each sink; `(connection, "",
    /// topic)` of a Kafka sink.
    pub sinks: Vec<(String, String, String)>,
    /// `(connection, statement)`: every connection the statements name,
    /// with the statement that names it (`CREATE SOURCE s`), so that one
    /// `evolve.toml` lacks fails the check.
    pub named_connections: Vec<(String, String)>,
    /// What the statements themselves get wrong (a table of a source that
    /// neither the catalog nor the statements create).
    pub statement_checks: Vec<Check>,
}

impl Plan {
    /// The objects of a catalog.
    pub fn from_catalog(
        sources: &[crate::store::SourceInfo],
        tables: &[crate::store::TableInfo],
        sinks: &[crate::store::SinkInfo],
    ) -> Plan {
        let mut plan = Plan::default();
        for s in sources {
            plan.sources.push(PlannedSource {
                connection: s.connection.clone(),
                publication: s.publication.clone(),
                new_slot: None,
            });
        }
        for t in tables {
            if let Some(s) = sources.iter().find(|s| s.name == t.source) {
                plan.tables.push(PlannedTable {
                    source: s.name.clone(),
                    connection: s.connection.clone(),
                    publication: s.publication.clone(),
                    schema: t.upstream_schema.clone(),
                    table: t.upstream_table.clone(),
                    exclude: t
                        .columns
                        .iter()
                        .filter(|c| c.excluded && !c.key)
                        .map(|c| c.name.clone())
                        .collect(),
                    pinned: Some(t.clone()),
                });
            }
        }
        for k in sinks {
            plan.sinks.push(match &k.kafka {
                // A Kafka sink's topic stands where a table would.
                Some(t) => (k.connection.clone(), String::new(), t.topic.clone()),
                None => (
                    k.connection.clone(),
                    k.target_schema.clone(),
                    k.target_table.clone(),
                ),
            });
        }
        plan
    }

    /// Adds what `statements` would create; tables find their source among
    /// the statements or in `sources` (the catalog's).
    pub fn add_statements(
        &mut self,
        statements: &[evolve_core::control::Statement],
        sources: &[crate::store::SourceInfo],
    ) {
        use evolve_core::control::Statement;
        // Every source, whatever its kind, for the tables' sources.
        let mut all_sources: Vec<String> = sources.iter().map(|s| s.name.clone()).collect();
        // Only PostgreSQL upstreams are checked here; a MySQL or Kafka
        // source's checks run at CREATE SOURCE.
        let mut named: Vec<(String, String, String)> = sources
            .iter()
            .filter(|s| s.kind == crate::store::SourceKind::Postgres)
            .map(|s| (s.name.clone(), s.connection.clone(), s.publication.clone()))
            .collect();
        for statement in statements {
            match statement {
                Statement::CreateSource(s) => {
                    all_sources.push(s.name.clone());
                    self.named_connections
                        .push((s.connection.clone(), format!("CREATE SOURCE {}", s.name)));
                    if s.kind == evolve_core::control::SourceKind::Postgres {
                        named.push((s.name.clone(), s.connection.clone(), s.publication.clone()));
                        let new = !sources.iter().any(|c| c.name == s.name);
                        self.sources.push(PlannedSource {
                            connection: s.connection.clone(),
                            publication: s.publication.clone(),
                            new_slot: new.then(|| crate::pipeline::slot_name(&s.name)),
                        });
                    }
                }
                Statement::CreateTable(t) if !all_sources.contains(&t.source) => {
                    self.statement_checks.push(Check::fail(
                        format!("table {}", t.name),
                        format!(
                            "CREATE TABLE {} reads source \"{}\", which neither the pipeline has nor the statements create",
                            t.name, t.source
                        ),
                        format!(
                            "create the source before the table (CREATE SOURCE {} FROM ...), or name an existing one (SHOW SOURCES)",
                            t.source
                        ),
                    ));
                }
                Statement::CreateTable(t) => {
                    if let Some((_, connection, publication)) =
                        named.iter().rev().find(|(name, _, _)| *name == t.source)
                    {
                        self.tables.push(PlannedTable {
                            source: t.source.clone(),
                            connection: connection.clone(),
                            publication: publication.clone(),
                            schema: t.reference.schema.clone(),
                            table: t.reference.name.clone(),
                            exclude: t.exclude_columns.clone(),
                            pinned: None,
                        });
                    }
                }
                Statement::CreateSink(k) => {
                    self.named_connections
                        .push((k.connection.clone(), format!("CREATE SINK {}", k.name)));
                    self.sinks.push(match &k.kafka {
                        Some(t) => (k.connection.clone(), String::new(), t.topic.clone()),
                        None => (
                            k.connection.clone(),
                            k.table.schema.clone(),
                            k.table.name.clone(),
                        ),
                    });
                }
                Statement::CreateReplica(r) => self
                    .named_connections
                    .push((r.connection.clone(), format!("CREATE REPLICA {}", r.name))),
                _ => {}
            }
        }
        self.sources.dedup();
        self.tables.dedup();
        self.sinks.dedup();
    }
}

/// A source `evolve pipeline check` checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlannedSource {
    /// Its connection.
    pub connection: String,
    /// Its publication.
    pub publication: String,
    /// The slot it would create, for a source only statements create (a
    /// slot of that name upstream makes CREATE SOURCE fail).
    pub new_slot: Option<String>,
}

/// A table `evolve pipeline check` checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlannedTable {
    /// Its source.
    pub source: String,
    /// Its source's connection.
    pub connection: String,
    /// Its source's publication.
    pub publication: String,
    /// The upstream table.
    pub schema: String,
    pub table: String,
    /// Upstream columns it does not read (EXCLUDE COLUMNS, less the key).
    pub exclude: Vec<String>,
    /// The table as the catalog pins it, when it is there already (not
    /// only in statements): its upstream table must be in the publication,
    /// since nothing adds it any more, and its enums must still have the
    /// labels it pinned.
    pub pinned: Option<crate::store::TableInfo>,
}

/// The checks of one connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConnectionReport {
    /// The connection's name in `evolve.toml`.
    pub connection: String,
    /// `user@host:port/db`, never with a password.
    pub target: String,
    /// What it is used for: `source`, `sink`, both, or nothing yet.
    pub used_as: Vec<&'static str>,
    pub checks: Vec<Check>,
}

/// `evolve pipeline check`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub connections: Vec<ConnectionReport>,
    /// The statements' own failed checks: connections `evolve.toml` lacks,
    /// tables of sources that do not exist.
    pub statements: Vec<Check>,
}

impl Report {
    /// How many checks failed.
    pub fn failures(&self) -> usize {
        self.connections
            .iter()
            .flat_map(|c| &c.checks)
            .chain(&self.statements)
            .filter(|c| !c.ok)
            .count()
    }
}

/// The way out of a connection that failed: the url itself when it does
/// not parse, the password file when it is ignored, else the server.
fn connect_fix(name: &str, connection: &crate::config::Connection, e: &PipelineError) -> String {
    if evolve_pg::parse_url(connection.url()).is_err() {
        return format!(
            "correct connections.{name}.url in evolve.toml (the message above says what is wrong)"
        );
    }
    let said = e.to_string();
    if said.contains("password file") && said.contains("chmod") {
        return "restrict the password file to its owner (the chmod above)".into();
    }
    format!("check connections.{name}.url in evolve.toml, the server and its pg_hba.conf")
}

/// Runs every check of `plan` against the connections of `config`, one
/// session per connection; a connection that cannot be reached is one
/// failed check. Connections the plan does not use are only connected to.
pub async fn run(config: &crate::config::Config, plan: &Plan) -> Report {
    let mut connections = Vec::new();
    for (name, connection) in &config.connections {
        let target = evolve_pg::parse_url(connection.url())
            .map(|(c, _)| evolve_pg::describe_target(&c))
            .unwrap_or_else(|_| connection.redacted());
        let mut used_as = Vec::new();
        if plan.sources.iter().any(|s| &s.connection == name) {
            used_as.push("source");
        }
        if plan.sinks.iter().any(|s| &s.0 == name) {
            used_as.push("sink");
        }
        let mut checks = Vec::new();
        if crate::sink::is_kafka(connection) {
            kafka_checks(name, connection, plan, &mut checks).await;
            connections.push(ConnectionReport {
                connection: name.clone(),
                target: connection.redacted(),
                used_as,
                checks,
            });
            continue;
        }
        match crate::upstream::connect(name, connection).await {
            Err(e) => {
                let message = match e.detail() {
                    Some(reason) => format!("{}: {reason}", e.primary()),
                    None => e.primary(),
                };
                checks.push(Check::fail(
                    "connection",
                    message,
                    connect_fix(name, connection, &e),
                ));
            }
            Ok(client) => {
                checks.push(Check::pass("connection", format!("connected as {target}")));
                let mut all = Vec::new();
                for s in plan.sources.iter().filter(|s| &s.connection == name) {
                    all.push(upstream(&client, &s.publication, s.new_slot.as_deref()).await);
                }
                for t in plan.tables.iter().filter(|t| &t.connection == name) {
                    all.push(upstream_table(&client, t).await);
                }
                for (_, schema, table) in plan.sinks.iter().filter(|s| &s.0 == name) {
                    all.push(sink(&client, schema, table).await);
                }
                for result in all {
                    match result {
                        Ok(found) => {
                            for c in found {
                                if !checks.contains(&c) {
                                    checks.push(c);
                                }
                            }
                        }
                        Err(e) => checks.push(Check::fail(
                            "catalog",
                            e.primary(),
                            "check that the role may read the server's catalogs",
                        )),
                    }
                }
            }
        }
        connections.push(ConnectionReport {
            connection: name.clone(),
            target,
            used_as,
            checks,
        });
    }
    let mut statements = plan.statement_checks.clone();
    for (connection, statement) in &plan.named_connections {
        if !config.connections.contains_key(connection) {
            let check = Check::fail(
                format!("connection {connection}"),
                format!(
                    "{statement} names connection \"{connection}\", which evolve.toml does not have"
                ),
                format!(
                    "add a [connections.{connection}] section with a url to evolve.toml, or fix the name"
                ),
            );
            if !statements.contains(&check) {
                statements.push(check);
            }
        }
    }
    Report {
        connections,
        statements,
    }
}

/// A `kafka://` connection's checks: a broker answers, and each topic of
/// the plan's sinks exists (or will be created by the sink).
async fn kafka_checks(
    name: &str,
    connection: &crate::config::Connection,
    plan: &Plan,
    checks: &mut Vec<Check>,
) {
    let topics: Vec<String> = plan
        .sinks
        .iter()
        .filter(|s| s.0 == name)
        .map(|s| s.2.clone())
        .collect();
    match crate::sink::missing_kafka_topics(name, connection, topics.clone()).await {
        Err(e) => checks.push(Check::fail(
            "connection",
            match e.detail() {
                Some(reason) => format!("{}: {reason}", e.primary()),
                None => e.primary(),
            },
            format!(
                "check connections.{name}.url in evolve.toml and that the Kafka brokers are running"
            ),
        )),
        Ok(missing) => {
            checks.push(Check::pass(
                "connection",
                format!("a Kafka broker of {} answered", connection.redacted()),
            ));
            for topic in topics {
                checks.push(Check::pass(
                    format!("topic {topic}"),
                    if missing.contains(&topic) {
                        "does not exist yet; the sink creates it".to_string()
                    } else {
                        "exists".to_string()
                    },
                ));
            }
        }
    }
}
