//! Replicas inside a running pipeline: the statements of replicas and
//! transforms (`CREATE REPLICA`, `ALTER REPLICA ... {SET | RESET}
//! CONFLICT RESOLVER`, `CREATE TRANSFORM`, `DROP {REPLICA | TRANSFORM}`,
//! `SHOW {REPLICAS | TRANSFORMS}`, `SHOW CONFLICT RESOLVERS FOR
//! REPLICA`), run for the pipeline's admin API through its
//! [`StatementHandler`] seam, and one task per replica beside the
//! pipeline's engine.
//!
//! Every statement checks what it can before it changes anything, and
//! changes the catalog ([`crate::catalog`]) last: a failure leaves the
//! catalog as it was, and `CREATE REPLICA` leaves nothing upstream
//! either (the slot and publication it made are dropped again when
//! recording fails). `CREATE REPLICA` resolves the source's upstream
//! connection from the pipeline's catalog and config, checks the node
//! (reachable, its role able to create evolve's two tables there, in a
//! transaction rolled back) and the upstream tables (present, with a key
//! or replica identity: adding a table without one to a publication
//! would make its updates fail upstream), then creates the publication
//! and slot ([`Replica::create`]). `CREATE TRANSFORM` checks the node's
//! table and columns and prepares, without running, the statement the
//! transform will be part of (its `SET` expressions and `WHERE` over a
//! `NEW` row typed as the upstream types it), so an expression that does
//! not compile on the node is refused with the server's error.
//!
//! Tasks: [`StatementHandler::run`] starts one task per replica
//! ([`Replica::run`]); every statement that changes the catalog
//! reconciles them: the tasks of replicas that are gone or changed
//! (tables, connections, resolvers, transforms) are stopped and the new
//! ones started, the others go on. `DROP REPLICA` stops the replica's
//! task before it drops the slot and the publication upstream. A halted
//! replica tries its transaction again by itself with backoff, reading
//! the node's catalog afresh ([`Replica::run_retrying`]: every 30 s at
//! most, so a cause fixed on the node is seen without anyone telling the
//! pipeline), and at once when the catalog changes or `evolve replicate
//! skip` records a transaction to skip on its node: the halted replicas'
//! nodes are looked at every second for that, and a replica is woken once
//! per recorded skip.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_core::control::{
    AlterReplica, CreateReplica, CreateTransform, ObjectKind as Kind, Statement, sql_ident,
};
use evolve_pg::quote_ident;
use evolve_pipeline::admin::{HandlerFuture, ObjectReport, StatementHandler, StatementResult};
use evolve_pipeline::{Config, ObjectKind, Pipeline, PipelineError, upstream};
use serde_json::Value;
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::catalog::{Catalog, ReplicaInfo, TransformInfo};
use crate::error::ReplicateError;
use crate::replica::{Replica, ReplicaSpec};
use crate::transform::Transform;

/// The longest replica name: its slot, `evolve_replica_<name>`, is at
/// most 63 bytes.
pub const MAX_NAME_BYTES: usize = 63 - "evolve_replica_".len();

/// How long a stopping replica task may take before it is aborted.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// How often the nodes of halted replicas are looked at for a skip.
const SKIP_POLL: Duration = Duration::from_secs(1);

/// The replicas of one pipeline: their catalog and their tasks.
pub struct ReplicaService {
    catalog: Mutex<Catalog>,
    tasks: tokio::sync::Mutex<Tasks>,
}

#[derive(Default)]
struct Tasks {
    /// [`StatementHandler::run`] is running: replicas have tasks.
    active: bool,
    running: BTreeMap<String, Running>,
    /// Replicas whose task must not run (being dropped).
    held: HashSet<String>,
    /// Why a replica has no task (a connection missing from the config).
    problems: HashMap<String, String>,
    /// What the replica's earlier tasks in this process counted.
    carried: HashMap<String, Counted>,
    /// The skip a halted replica was last restarted for, so that a skip
    /// that does not get it past its halt restarts it once, not forever.
    skips_tried: HashMap<String, String>,
}

struct Running {
    spec: ReplicaSpec,
    /// It copies its tables first (`COPY DATA = true`).
    copy: bool,
    replica: Arc<Replica>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Conflicts by type and resolution.
type Conflicts = BTreeMap<(ConflictType, Resolver), u64>;

/// What a replica's tasks counted since the pipeline started: conflicts,
/// and parts of large upstream transactions applied to the node.
#[derive(Clone, Debug, Default)]
struct Counted {
    conflicts: Conflicts,
    parts: u64,
}

impl Counted {
    fn add(&mut self, status: &crate::replica::ReplicaStatus) {
        for (k, n) in &status.conflicts {
            *self.conflicts.entry(*k).or_default() += n;
        }
        self.parts += status.parts;
    }
}

/// A replica as `SHOW REPLICAS` and `/status` show it.
struct Shown {
    info: ReplicaInfo,
    state: String,
    position: Option<String>,
    counted: Counted,
    error: Option<String>,
}

/// A refusal in PostgreSQL's shape.
fn refused(
    sqlstate: &'static str,
    primary: String,
    detail: Option<String>,
    hint: Option<String>,
) -> PipelineError {
    PipelineError::Refused {
        sqlstate,
        primary,
        detail,
        hint,
    }
}

fn unknown_replica(name: &str) -> PipelineError {
    refused(
        "42704",
        format!("replica \"{name}\" does not exist"),
        None,
        Some("SHOW REPLICAS lists the replicas.".into()),
    )
}

fn unknown_transform(name: &str) -> PipelineError {
    refused(
        "42704",
        format!("transform \"{name}\" does not exist"),
        None,
        Some("SHOW TRANSFORMS lists the transforms.".into()),
    )
}

/// A replica's error, as the admin API answers it.
fn replicate_error(e: ReplicateError) -> PipelineError {
    match e {
        ReplicateError::Node { context, message } => PipelineError::Database { context, message },
        ReplicateError::Source(e) => e,
        ReplicateError::Stream {
            replica, message, ..
        } => PipelineError::Database {
            context: format!("replication stream of replica \"{replica}\""),
            message,
        },
        halted @ ReplicateError::Halted { .. } => refused("55000", halted.to_string(), None, None),
    }
}

/// A server error's SQLSTATE among those a transform's check meets, as
/// the `'static` code [`PipelineError::Refused`] carries; others are
/// `42000`, their class.
fn static_sqlstate(code: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "42601", "42703", "42704", "42725", "42803", "42804", "42809", "42830", "42846", "42883",
        "42P01", "42P02", "42P10", "42P18", "42501", "22P02", "22023", "0A000",
    ];
    KNOWN
        .iter()
        .find(|k| **k == code)
        .copied()
        .unwrap_or("42000")
}

/// Whether `name` can be a replica's: its slot's name must be valid.
fn check_name(name: &str) -> Result<(), PipelineError> {
    let reason = if name.len() > MAX_NAME_BYTES {
        Some(format!("it is longer than {MAX_NAME_BYTES} bytes"))
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Some("it has characters other than lower-case letters, digits and underscores".into())
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(refused(
            "42602",
            format!("invalid replica name \"{name}\": {reason}"),
            Some(format!(
                "Its replication slot and publication upstream are named evolve_replica_{name}."
            )),
            Some(format!(
                "Use lower-case letters, digits and underscores, at most {MAX_NAME_BYTES} bytes."
            )),
        )),
    }
}

/// `schema.table`, each part quoted where needed, for messages.
fn reference(schema: &str, table: &str) -> String {
    format!("{}.{}", sql_ident(schema), sql_ident(table))
}

/// What a replica runs with: its connections' urls from `config`, its
/// resolvers and its transforms.
fn spec(
    config: &Config,
    info: &ReplicaInfo,
    transforms: &[TransformInfo],
) -> Result<ReplicaSpec, PipelineError> {
    Ok(ReplicaSpec {
        name: info.name.clone(),
        upstream_connection: info.upstream_connection.clone(),
        upstream: config
            .connection(&info.upstream_connection)?
            .url()
            .to_string(),
        node: config.connection(&info.node_connection)?.url().to_string(),
        tables: info.tables.clone(),
        resolvers: info.resolvers.clone(),
        transforms: transforms
            .iter()
            .filter(|t| t.replica == info.name)
            .map(|t| t.transform.clone())
            .collect(),
    })
}

fn same(a: &ReplicaSpec, b: &ReplicaSpec) -> bool {
    a.name == b.name
        && a.upstream == b.upstream
        && a.node == b.node
        && a.tables == b.tables
        && a.resolvers == b.resolvers
        && a.transforms == b.transforms
}

/// Drops slot and publication `slot` upstream, waiting for a session
/// that is ending to release the slot.
async fn drop_upstream(up: &Client, slot: &str) -> Result<(), PipelineError> {
    upstream::wait_slot_released(up, slot).await?;
    upstream::drop_slot_released(up, slot).await?;
    up.batch_execute(&format!("DROP PUBLICATION IF EXISTS {}", quote_ident(slot)))
        .await
        .map_err(|e| database(format!("drop publication {slot}"), &e))
}

fn database(context: impl Into<String>, e: &tokio_postgres::Error) -> PipelineError {
    PipelineError::Database {
        context: context.into(),
        message: match e.as_db_error() {
            Some(db) => evolve_pg::describe_db_error(db, None),
            None => e.to_string(),
        },
    }
}

impl ReplicaService {
    /// Opens the replicas' catalog in `state_dir` (the pipeline's).
    pub fn open(state_dir: &Path) -> Result<ReplicaService, PipelineError> {
        Ok(ReplicaService {
            catalog: Mutex::new(Catalog::open(state_dir)?),
            tasks: tokio::sync::Mutex::new(Tasks::default()),
        })
    }

    fn catalog<T>(
        &self,
        f: impl FnOnce(&mut Catalog) -> Result<T, PipelineError>,
    ) -> Result<T, PipelineError> {
        let mut catalog = self.catalog.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut catalog)
    }

    // ------------------------------------------------------------ tasks

    /// Stops the tasks of replicas that are gone, held or changed, and
    /// starts those of replicas that have none (when the service runs).
    async fn reconcile(&self, config: &Config) {
        let mut tasks = self.tasks.lock().await;
        if !tasks.active {
            return;
        }
        let read = self.catalog(|c| Ok((c.replicas()?, c.transforms()?)));
        let (replicas, transforms) = match read {
            Ok(read) => read,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the replicas' catalog; replica tasks unchanged");
                return;
            }
        };
        let wanted: BTreeMap<String, (Result<ReplicaSpec, PipelineError>, bool)> = replicas
            .iter()
            .filter(|r| r.enabled && !tasks.held.contains(&r.name))
            .map(|r| (r.name.clone(), (spec(config, r, &transforms), r.copy_data)))
            .collect();
        let stale: Vec<String> = tasks
            .running
            .iter()
            .filter(|(name, running)| {
                // A task that ended is started again on every catalog
                // change.
                running.task.is_finished()
                    || !matches!(wanted.get(*name), Some((Ok(spec), _)) if same(spec, &running.spec))
            })
            .map(|(name, _)| name.clone())
            .collect();
        // A halted replica tries again on every catalog change.
        for running in tasks.running.values() {
            if running.replica.status().state == "halted" {
                running.replica.retry_now();
            }
        }
        for name in stale {
            tasks.stop(&name).await;
        }
        tasks.problems.clear();
        let known: HashSet<String> = replicas.iter().map(|r| r.name.clone()).collect();
        tasks.carried.retain(|name, _| known.contains(name));
        tasks.skips_tried.retain(|name, _| known.contains(name));
        for (name, (spec, copy)) in wanted {
            if tasks.running.contains_key(&name) {
                continue;
            }
            match spec {
                Ok(spec) => tasks.start(spec, copy),
                Err(e) => {
                    tracing::error!(replica = %name, error = %e, "replica not started");
                    tasks.problems.insert(name, e.to_string());
                }
            }
        }
    }

    /// Wakes the halted replicas whose node has a transaction to skip
    /// recorded (`evolve replicate skip`), so that they pass it now rather
    /// than at their next try.
    async fn resume_skipped(&self) {
        let halted: Vec<(String, String)> = {
            let tasks = self.tasks.lock().await;
            tasks
                .running
                .iter()
                .filter(|(_, r)| r.replica.status().state == "halted")
                .map(|(name, r)| (name.clone(), r.spec.node.clone()))
                .collect()
        };
        for (name, node) in halted {
            let Some(skip) = recorded_skip(&node, &name).await else {
                continue;
            };
            let mut tasks = self.tasks.lock().await;
            if tasks.skips_tried.get(&name) == Some(&skip) {
                continue;
            }
            let Some(running) = tasks.running.get(&name) else {
                continue;
            };
            if running.task.is_finished() {
                // A task that ended (not for a halt) is started again.
                let (spec, copy) = (running.spec.clone(), running.copy);
                tasks.stop(&name).await;
                tasks.start(spec, copy);
            } else {
                running.replica.retry_now();
            }
            tasks.skips_tried.insert(name.clone(), skip);
            tracing::info!(replica = %name, "a transaction to skip is recorded; replica tries again");
        }
    }

    // ------------------------------------------------------- statements

    async fn create_replica(
        &self,
        pipeline: &Pipeline,
        s: &CreateReplica,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        let mut result = StatementResult::tag(statement, "CREATE REPLICA");
        if self.catalog(|c| c.replica(&s.name))?.is_some() {
            if s.if_not_exists {
                result.notice = Some(format!("replica \"{}\" already exists, skipping", s.name));
                return Ok(result);
            }
            return Err(refused(
                "42710",
                format!("replica \"{}\" already exists", s.name),
                None,
                None,
            ));
        }
        check_name(&s.name)?;
        let source = pipeline
            .sources()?
            .into_iter()
            .find(|x| x.name == s.source)
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Source,
                name: s.source.clone(),
            })?;
        if source.dropping {
            return Err(refused(
                "55000",
                format!("source \"{}\" is being dropped", source.name),
                None,
                None,
            ));
        }
        let config = pipeline.config();
        let upstream_connection = config.connection(&source.connection)?.clone();
        let node_connection = config.connection(&s.connection)?.clone();
        // The node first: reachable, and its role able to make evolve's
        // tables there.
        let node = upstream::connect(&s.connection, &node_connection).await?;
        check_node(&node, &s.name, &s.connection).await?;
        let up = upstream::connect(&source.connection, &upstream_connection).await?;
        let tables: Vec<(String, String)> = if s.tables.is_empty() {
            publication_tables(&up, &source.name, &source.publication).await?
        } else {
            s.tables
                .iter()
                .map(|t| (t.schema.clone(), t.name.clone()))
                .collect()
        };
        for (schema, table) in &tables {
            check_upstream_table(&up, &source.name, schema, table).await?;
        }
        let slot = Replica::slot_name(&s.name);
        if upstream::slot_status(&up, &slot).await?.is_some() {
            return Err(PipelineError::SlotExists { slot });
        }
        let publication_exists: bool = up
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
                &[&slot],
            )
            .await
            .map_err(|e| database("read pg_publication", &e))?
            .get(0);
        if publication_exists {
            return Err(refused(
                "42710",
                format!("publication \"{slot}\" already exists upstream"),
                None,
                Some(format!(
                    "Another pipeline may own it; if not, drop it upstream with DROP PUBLICATION {}.",
                    quote_ident(&slot)
                )),
            ));
        }
        let info = ReplicaInfo {
            name: s.name.clone(),
            source: source.name.clone(),
            upstream_connection: source.connection.clone(),
            node_connection: s.connection.clone(),
            tables: tables.clone(),
            copy_data: s.copy_data,
            enabled: s.enabled,
            resolvers: Resolvers::default(),
        };
        // A position the node keeps from an earlier replica of this name
        // is not this one's: its stream starts at its own slot.
        node.execute(
            "DELETE FROM evolve_replica_progress
             WHERE replica = $1",
            &[&s.name],
        )
        .await
        .or_else(|e| match e.as_db_error() {
            // No such table yet: nothing to forget.
            Some(db) if db.code().code() == "42P01" => Ok(0),
            _ => Err(database(
                format!(
                    "forget an earlier position of replica {} on the node",
                    s.name
                ),
                &e,
            )),
        })?;
        drop(node);
        let spec = ReplicaSpec {
            name: s.name.clone(),
            upstream_connection: source.connection.clone(),
            upstream: upstream_connection.url().to_string(),
            node: node_connection.url().to_string(),
            tables,
            resolvers: Resolvers::default(),
            transforms: Vec::new(),
        };
        // With COPY DATA the slot is made when the replica's task starts,
        // with the snapshot its copy reads (after ALTER REPLICA ... ENABLE
        // when it is created disabled, so resolvers and transforms set in
        // between apply to the copy too).
        if s.copy_data {
            Replica::publish(&spec).await
        } else {
            Replica::create(spec).await.map(|_| ())
        }
        .map_err(replicate_error)?;
        if let Err(e) = self.catalog(|c| c.insert_replica(&info)) {
            if let Err(undo) = drop_upstream(&up, &slot).await {
                tracing::error!(replica = %s.name, error = %undo, "could not drop the slot and publication of a replica that was not recorded");
            }
            return Err(e);
        }
        tracing::info!(replica = %s.name, "replica created");
        self.reconcile(config).await;
        Ok(result)
    }

    async fn drop_replica(
        &self,
        pipeline: &Pipeline,
        name: &str,
        if_exists: bool,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        let mut result = StatementResult::tag(statement, "DROP REPLICA");
        let Some(info) = self.catalog(|c| c.replica(name))? else {
            if if_exists {
                result.notice = Some(format!("replica \"{name}\" does not exist, skipping"));
                return Ok(result);
            }
            return Err(unknown_replica(name));
        };
        let config = pipeline.config();
        {
            let mut tasks = self.tasks.lock().await;
            tasks.held.insert(name.to_string());
            tasks.stop(name).await;
        }
        let dropped = async {
            let connection = config.connection(&info.upstream_connection)?;
            let up = upstream::connect(&info.upstream_connection, connection).await?;
            drop_upstream(&up, &Replica::slot_name(name)).await
        }
        .await;
        self.tasks.lock().await.held.remove(name);
        if let Err(e) = dropped {
            self.reconcile(config).await;
            return Err(e);
        }
        let transforms = self
            .catalog(|c| c.delete_replica(name))?
            .unwrap_or_default();
        let mut notices: Vec<String> = transforms
            .iter()
            .map(|t| format!("drop cascades to transform {t}"))
            .collect();
        // The node's position of the replica goes with it, as DROP
        // SUBSCRIPTION drops its replication origin; its conflict history
        // stays (a log of what happened). A node that cannot be reached
        // keeps the row, which CREATE REPLICA of the same name clears.
        let forgotten = async {
            let connection = config.connection(&info.node_connection)?;
            let node = upstream::connect(&info.node_connection, connection).await?;
            match node
                .execute(
                    "DELETE FROM evolve_replica_progress WHERE replica = $1",
                    &[&name],
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if e.as_db_error().is_some_and(|d| d.code().code() == "42P01") => Ok(()),
                Err(e) => Err(PipelineError::Config {
                    message: match e.as_db_error() {
                        Some(db) => evolve_pg::describe_db_error(db, None),
                        None => e.to_string(),
                    },
                }),
            }
        }
        .await;
        if let Err(e) = forgotten {
            notices.push(format!(
                "the position of replica {name} on node connection {} was not removed ({}); CREATE REPLICA of the same name clears it",
                info.node_connection,
                e.primary()
            ));
        }
        if !notices.is_empty() {
            result.notice = Some(notices.join("\n"));
        }
        tracing::info!(replica = %name, "replica dropped");
        self.reconcile(config).await;
        Ok(result)
    }

    async fn alter_replica(
        &self,
        pipeline: &Pipeline,
        s: &AlterReplica,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        if !self.catalog(|c| c.set_resolver(&s.name, s.conflict, s.resolver))? {
            return Err(unknown_replica(&s.name));
        }
        self.reconcile(pipeline.config()).await;
        Ok(StatementResult::tag(statement, "ALTER REPLICA"))
    }

    async fn create_transform(
        &self,
        pipeline: &Pipeline,
        s: &CreateTransform,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        let mut result = StatementResult::tag(statement, "CREATE TRANSFORM");
        let (replica, transforms) =
            self.catalog(|c| Ok((c.replica(&s.replica)?, c.transforms()?)))?;
        if transforms.iter().any(|t| t.transform.name == s.name) {
            if s.if_not_exists {
                result.notice = Some(format!("transform \"{}\" already exists, skipping", s.name));
                return Ok(result);
            }
            return Err(refused(
                "42710",
                format!("transform \"{}\" already exists", s.name),
                None,
                None,
            ));
        }
        let Some(replica) = replica else {
            return Err(unknown_replica(&s.replica));
        };
        let (schema, table) = (s.table.schema.clone(), s.table.name.clone());
        let shown = reference(&schema, &table);
        if !replica
            .tables
            .iter()
            .any(|(sc, t)| *sc == schema && *t == table)
        {
            return Err(refused(
                "42P01",
                format!(
                    "table \"{shown}\" is not replicated by replica \"{}\"",
                    replica.name
                ),
                Some(format!(
                    "Replica \"{}\" replicates {}.",
                    replica.name,
                    replica.table_list()
                )),
                Some("A transform is for one of its replica's tables.".into()),
            ));
        }
        if let Some(other) = transforms.iter().find(|t| {
            t.replica == replica.name && t.transform.schema == schema && t.transform.table == table
        }) {
            return Err(refused(
                "42710",
                format!(
                    "replica \"{}\" has a transform for table \"{shown}\" already: {}",
                    replica.name, other.transform.name
                ),
                None,
                Some(format!(
                    "A replica has one transform per table: drop it (DROP TRANSFORM {}) and create one with every SET.",
                    sql_ident(&other.transform.name)
                )),
            ));
        }
        let transform = Transform {
            name: s.name.clone(),
            schema,
            table,
            sets: s.sets.clone(),
            filter: s.filter.clone(),
        };
        self.check_transform(pipeline.config(), &replica, &transform)
            .await?;
        self.catalog(|c| c.insert_transform(&replica.name, &transform))?;
        tracing::info!(transform = %s.name, replica = %replica.name, "transform created");
        self.reconcile(pipeline.config()).await;
        Ok(result)
    }

    /// Checks `t` against the node's table and the upstream's: the columns
    /// it sets exist on the node and are not key columns, and the node
    /// compiles the statement it will be part of.
    async fn check_transform(
        &self,
        config: &Config,
        replica: &ReplicaInfo,
        t: &Transform,
    ) -> Result<(), PipelineError> {
        let shown = reference(&t.schema, &t.table);
        let node_connection = config.connection(&replica.node_connection)?;
        let node = upstream::connect(&replica.node_connection, node_connection).await?;
        let Some(node_table) = crate::node::table(&node, &t.schema, &t.table)
            .await
            .map_err(replicate_error)?
        else {
            return Err(refused(
                "42P01",
                format!(
                    "relation \"{shown}\" does not exist on the node of replica \"{}\"",
                    replica.name
                ),
                None,
                Some(
                    "A transform computes columns of the node's table: create the table on the node first."
                        .into(),
                ),
            ));
        };
        for (column, _) in &t.sets {
            let Some(c) = node_table.table.columns.iter().find(|c| c.name == *column) else {
                let names: Vec<&str> = node_table
                    .table
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                return Err(refused(
                    "42703",
                    format!(
                        "column \"{column}\" of relation \"{shown}\" does not exist on the node of replica \"{}\"",
                        replica.name
                    ),
                    Some(format!("Its columns are {}.", names.join(", "))),
                    None,
                ));
            };
            if c.key {
                return Err(refused(
                    "42P10",
                    format!(
                        "transform \"{}\" cannot set key column \"{column}\" of relation \"{shown}\"",
                        t.name
                    ),
                    Some(
                        "Rows are found on the node by their key, so the key is applied as the upstream sends it."
                            .into(),
                    ),
                    None,
                ));
            }
        }
        let up_connection = config.connection(&replica.upstream_connection)?;
        let up = upstream::connect(&replica.upstream_connection, up_connection).await?;
        let columns = up
            .query(
                "SELECT a.attname::text, a.atttypid::oid::int8, format_type(a.atttypid, a.atttypmod)
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
                 ORDER BY a.attnum",
                &[&t.schema, &t.table],
            )
            .await
            .map_err(|e| database("read the upstream table's columns", &e))?;
        if columns.is_empty() {
            return Err(PipelineError::UpstreamTableNotFound {
                reference: format!("{}.{}", t.schema, t.table),
                source_name: replica.source.clone(),
            });
        }
        // `NEW` as the apply statement has it: the upstream's own types
        // (enums, domains) as text.
        let new_columns: Vec<String> = columns
            .iter()
            .map(|r| {
                let oid: i64 = r.get(1);
                let type_name: String = if oid >= 16_384 {
                    "text".into()
                } else {
                    r.get(2)
                };
                format!(
                    "NULL::{type_name} AS {}",
                    quote_ident(&r.get::<_, String>(0))
                )
            })
            .collect();
        let names: Vec<String> = columns.iter().map(|r| r.get::<_, String>(0)).collect();
        let sql = format!(
            "WITH \"new\" AS (SELECT {}) INSERT INTO {}.{} ({}) SELECT {} FROM \"new\" WHERE {}",
            new_columns.join(", "),
            quote_ident(&t.schema),
            quote_ident(&t.table),
            t.sets
                .iter()
                .map(|(c, _)| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", "),
            t.sets
                .iter()
                .map(|(_, e)| format!("({e})"))
                .collect::<Vec<_>>()
                .join(", "),
            t.condition(),
        );
        if let Err(e) = node.prepare(&sql).await {
            let Some(db) = e.as_db_error() else {
                return Err(database("check the transform on the node", &e));
            };
            return Err(refused(
                static_sqlstate(db.code().code()),
                format!(
                    "transform \"{}\" does not compile on the node of replica \"{}\": {}",
                    t.name,
                    replica.name,
                    db.message()
                ),
                db.detail().map(str::to_string),
                Some(db.hint().map(str::to_string).unwrap_or_else(|| {
                    format!(
                        "NEW is the upstream's row of {shown}, with the columns {}.",
                        names.join(", ")
                    )
                })),
            ));
        }
        Ok(())
    }

    async fn drop_transform(
        &self,
        pipeline: &Pipeline,
        name: &str,
        if_exists: bool,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        let mut result = StatementResult::tag(statement, "DROP TRANSFORM");
        if !self.catalog(|c| c.delete_transform(name))? {
            if if_exists {
                result.notice = Some(format!("transform \"{name}\" does not exist, skipping"));
                return Ok(result);
            }
            return Err(unknown_transform(name));
        }
        self.reconcile(pipeline.config()).await;
        Ok(result)
    }

    /// Every replica of the catalog with its task's state.
    async fn shown(&self) -> Result<Vec<Shown>, PipelineError> {
        let replicas = self.catalog(|c| c.replicas())?;
        let tasks = self.tasks.lock().await;
        Ok(replicas
            .into_iter()
            .map(|info| {
                let mut counted = tasks.carried.get(&info.name).cloned().unwrap_or_default();
                let (state, position, error) = match tasks.running.get(&info.name) {
                    Some(running) => {
                        let status = running.replica.status();
                        counted.add(&status);
                        (
                            status.state.clone(),
                            Some(status.position.to_string()),
                            status.error,
                        )
                    }
                    None if !info.enabled => ("disabled".to_string(), None, None),
                    None => match tasks.problems.get(&info.name) {
                        Some(problem) => ("stalled".to_string(), None, Some(problem.clone())),
                        None => (
                            if tasks.active { "starting" } else { "stopped" }.to_string(),
                            None,
                            None,
                        ),
                    },
                };
                Shown {
                    info,
                    state,
                    position,
                    counted,
                    error,
                }
            })
            .collect())
    }

    async fn show_replicas(&self, statement: &Statement) -> Result<StatementResult, PipelineError> {
        let rows = self
            .shown()
            .await?
            .into_iter()
            .map(|r| {
                vec![
                    r.info.name.clone().into(),
                    r.info.source.clone().into(),
                    r.info.node_connection.clone().into(),
                    r.info.table_list().into(),
                    r.state.into(),
                    r.position.map(Value::from).unwrap_or(Value::Null),
                    r.counted.conflicts.values().sum::<u64>().into(),
                    r.error.map(Value::from).unwrap_or(Value::Null),
                ]
            })
            .collect();
        Ok(StatementResult::show(
            statement,
            &[
                "name",
                "source",
                "node",
                "tables",
                "state",
                "position",
                "conflicts",
                "error",
            ],
            rows,
        ))
    }

    /// The replicas as `/status` objects.
    async fn reports(&self) -> Vec<ObjectReport> {
        let shown = match self.shown().await {
            Ok(shown) => shown,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the replicas for the status report");
                return Vec::new();
            }
        };
        shown
            .into_iter()
            .map(|r| {
                let mut by_type: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
                for ((c, res), n) in &r.counted.conflicts {
                    *by_type
                        .entry(c.name().to_string())
                        .or_default()
                        .entry(res.name().to_string())
                        .or_default() += n;
                }
                ObjectReport {
                    kind: "replica".into(),
                    name: r.info.name.clone(),
                    state: r.state,
                    error: r.error,
                    connection: Some(r.info.node_connection.clone()),
                    source: Some(r.info.source.clone()),
                    applied_lsn: r.position,
                    conflicts: Some(by_type),
                    large_transaction_parts: Some(r.counted.parts),
                    ..ObjectReport::default()
                }
            })
            .collect()
    }

    fn show_resolvers(
        &self,
        replica: &str,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        let Some(info) = self.catalog(|c| c.replica(replica))? else {
            return Err(unknown_replica(replica));
        };
        let rows = info
            .resolvers
            .list()
            .into_iter()
            .map(|(conflict, resolver, default)| {
                let allowed: Vec<&str> = conflict.allowed().iter().map(|r| r.name()).collect();
                vec![
                    conflict.name().into(),
                    resolver.name().into(),
                    default.into(),
                    allowed.join(", ").into(),
                ]
            })
            .collect();
        Ok(StatementResult::show(
            statement,
            &["conflict_type", "resolver", "default", "allowed"],
            rows,
        ))
    }

    fn show_transforms(&self, statement: &Statement) -> Result<StatementResult, PipelineError> {
        let rows = self
            .catalog(|c| c.transforms())?
            .into_iter()
            .map(|t| {
                let sets: Vec<String> = t
                    .transform
                    .sets
                    .iter()
                    .map(|(c, e)| format!("{} = {e}", sql_ident(c)))
                    .collect();
                vec![
                    t.transform.name.clone().into(),
                    t.replica.into(),
                    reference(&t.transform.schema, &t.transform.table).into(),
                    sets.join(", ").into(),
                    t.transform.filter.map(Value::from).unwrap_or(Value::Null),
                ]
            })
            .collect();
        Ok(StatementResult::show(
            statement,
            &["name", "replica", "table", "sets", "filter"],
            rows,
        ))
    }

    async fn execute_statement(
        &self,
        pipeline: &Pipeline,
        statement: &Statement,
    ) -> Result<StatementResult, PipelineError> {
        match statement {
            Statement::CreateReplica(s) => self.create_replica(pipeline, s, statement).await,
            Statement::AlterReplica(s) => self.alter_replica(pipeline, s, statement).await,
            Statement::EnableReplica(s) => {
                if !self.catalog(|c| c.set_enabled(&s.name, s.enabled))? {
                    return Err(unknown_replica(&s.name));
                }
                tracing::info!(replica = %s.name, enabled = s.enabled, "replica enabled or disabled");
                self.reconcile(pipeline.config()).await;
                Ok(StatementResult::tag(statement, "ALTER REPLICA"))
            }
            Statement::CreateTransform(s) => self.create_transform(pipeline, s, statement).await,
            Statement::ShowConflictResolvers(s) => self.show_resolvers(&s.replica, statement),
            Statement::Drop(d) if d.kind == Kind::Replica => {
                self.drop_replica(pipeline, &d.name, d.if_exists, statement)
                    .await
            }
            Statement::Drop(d) if d.kind == Kind::Transform => {
                self.drop_transform(pipeline, &d.name, d.if_exists, statement)
                    .await
            }
            Statement::Show(s) if s.kind == Kind::Replica => self.show_replicas(statement).await,
            Statement::Show(s) if s.kind == Kind::Transform => self.show_transforms(statement),
            other => Err(refused(
                "0A000",
                format!("evolve-replicate does not run {}", other.to_sql()),
                None,
                None,
            )),
        }
    }

    async fn run_tasks(&self, pipeline: &Pipeline, mut stop: watch::Receiver<bool>) {
        self.tasks.lock().await.active = true;
        self.reconcile(pipeline.config()).await;
        loop {
            let stopped = tokio::select! {
                _ = stop.wait_for(|s| *s) => true,
                _ = tokio::time::sleep(SKIP_POLL) => false,
            };
            if stopped {
                break;
            }
            self.resume_skipped().await;
        }
        let mut tasks = self.tasks.lock().await;
        tasks.active = false;
        let names: Vec<String> = tasks.running.keys().cloned().collect();
        for name in names {
            tasks.stop(&name).await;
        }
    }
}

impl Tasks {
    fn start(&mut self, spec: ReplicaSpec, copy: bool) {
        let replica = Arc::new(Replica::new(spec.clone()).copying(copy));
        let (stop, stop_rx) = watch::channel(false);
        let task = {
            let replica = Arc::clone(&replica);
            tokio::spawn(async move {
                // A halt is logged and shown in its status, and tried
                // again; an error that retrying cannot help ends the task.
                let _ = replica.run_retrying(stop_rx).await;
            })
        };
        tracing::info!(replica = %spec.name, "replica task started");
        self.running.insert(
            spec.name.clone(),
            Running {
                spec,
                copy,
                replica,
                stop,
                task,
            },
        );
    }

    /// Stops replica `name`'s task, if it has one, and waits for it.
    async fn stop(&mut self, name: &str) {
        let Some(running) = self.running.remove(name) else {
            return;
        };
        let _ = running.stop.send(true);
        let mut task = running.task;
        if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
            tracing::warn!(replica = %name, "replica task did not stop in time; aborted");
            task.abort();
            let _ = task.await;
        }
        self.carried
            .entry(name.to_string())
            .or_default()
            .add(&running.replica.status());
    }
}

/// The transaction to skip that the node at `node` has recorded for
/// replica `name`, if any, as its LSN.
async fn recorded_skip(node: &str, name: &str) -> Option<String> {
    let connect = evolve_pg::connect(node, "evolve replicate");
    let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(5), connect).await else {
        return None;
    };
    client
        .query_opt(
            "SELECT skip_lsn::text FROM evolve_replica_progress
             WHERE replica = $1 AND skip_lsn IS NOT NULL",
            &[&name],
        )
        .await
        .ok()
        .flatten()
        .map(|r| r.get(0))
}

/// Refuses a node whose role cannot create evolve's tables there (tried
/// in a transaction that is rolled back).
async fn check_node(node: &Client, replica: &str, connection: &str) -> Result<(), PipelineError> {
    let tried = node
        .batch_execute(&format!("BEGIN; {}; ROLLBACK", crate::apply::NODE_SETUP))
        .await;
    let Err(e) = tried else {
        return match crate::apply::node_tables_owned(node).await {
            Ok(()) => Ok(()),
            Err((table, evolve_pg::OwnerError::Refused(reason))) => Err(refused(
                "42501",
                format!("table {table} on the node of replica \"{replica}\": {reason}"),
                None,
                None,
            )),
            Err((table, evolve_pg::OwnerError::Database(e))) => Err(database(
                format!("check the owner of {table} on the node of replica {replica}"),
                &e,
            )),
        };
    };
    let _ = node.batch_execute("ROLLBACK").await;
    match e.as_db_error() {
        Some(db) if db.code().code() == "42501" => Err(refused(
            "42501",
            format!(
                "the role of connection \"{connection}\" cannot create evolve's tables on the node of replica \"{replica}\""
            ),
            Some(evolve_pg::describe_db_error(db, None)),
            Some(
                "A replica keeps its position in evolve_replica_progress and its conflicts in evolve_conflict_history on the node: grant the role CREATE on its schema, or create those tables as their owner and grant it INSERT, UPDATE and SELECT."
                    .into(),
            ),
        )),
        _ => Err(database(
            format!("prepare the node of replica {replica}"),
            &e,
        )),
    }
}

/// The tables of publication `publication` (source `source`'s), by name.
async fn publication_tables(
    up: &Client,
    source: &str,
    publication: &str,
) -> Result<Vec<(String, String)>, PipelineError> {
    let rows = up
        .query(
            "SELECT schemaname::text, tablename::text FROM pg_publication_tables
             WHERE pubname = $1 ORDER BY 1, 2",
            &[&publication],
        )
        .await
        .map_err(|e| database("read pg_publication_tables", &e))?;
    if rows.is_empty() {
        return Err(refused(
            "22023",
            format!("source \"{source}\" publishes no tables yet"),
            Some(format!(
                "Without TABLES, a replica replicates the tables of publication \"{publication}\"."
            )),
            Some("Name the tables: WITH (TABLES (schema.table, ...)).".into()),
        ));
    }
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Refuses an upstream table that is missing, or that has neither a key
/// nor a replica identity that logical replication can send updates and
/// deletes with.
async fn check_upstream_table(
    up: &Client,
    source: &str,
    schema: &str,
    table: &str,
) -> Result<(), PipelineError> {
    let row = up
        .query_opt(
            "SELECT c.relreplident::text,
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&schema, &table],
        )
        .await
        .map_err(|e| database("read the upstream table", &e))?;
    let shown = format!("{schema}.{table}");
    let Some(row) = row else {
        return Err(PipelineError::UpstreamTableNotFound {
            reference: shown,
            source_name: source.to_string(),
        });
    };
    let (identity, primary, index): (String, bool, bool) = (row.get(0), row.get(1), row.get(2));
    let detail = match identity.as_str() {
        "f" => return Ok(()),
        "d" if primary => return Ok(()),
        "i" if index => return Ok(()),
        "n" => "Its replica identity is NOTHING, so its updates and deletes cannot be replicated.",
        _ => "It has no primary key, and its replica identity is DEFAULT.",
    };
    Err(PipelineError::NoReplicaIdentity {
        reference: shown,
        detail: detail.into(),
    })
}

impl StatementHandler for ReplicaService {
    fn execute<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        statement: &'a Statement,
    ) -> HandlerFuture<'a, Result<StatementResult, PipelineError>> {
        Box::pin(self.execute_statement(pipeline, statement))
    }

    fn status<'a>(&'a self) -> HandlerFuture<'a, Vec<ObjectReport>> {
        Box::pin(self.reports())
    }

    fn source_dependents<'a>(
        &'a self,
        source: &'a str,
    ) -> HandlerFuture<'a, Vec<(String, String)>> {
        Box::pin(async move {
            match self.catalog(|c| c.replicas()) {
                Ok(replicas) => replicas
                    .into_iter()
                    .filter(|r| r.source == source)
                    .map(|r| ("replica".to_string(), r.name))
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the replicas for DROP SOURCE");
                    Vec::new()
                }
            }
        })
    }

    fn run<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        stop: watch::Receiver<bool>,
    ) -> HandlerFuture<'a, Result<(), PipelineError>> {
        Box::pin(async move {
            self.run_tasks(pipeline, stop).await;
            Ok(())
        })
    }
}

/// The node url of replica `name` as the catalog in `config`'s state
/// directory and `config`'s connections have it (for `evolve replicate
/// skip`).
pub fn node_url(config: &Config, name: &str) -> Result<String, PipelineError> {
    let path = Catalog::path(&config.state_dir);
    if !path.exists() {
        return Err(refused(
            "42704",
            format!("replica \"{name}\" does not exist"),
            Some(format!(
                "{} does not exist: the pipeline has no replicas.",
                path.display()
            )),
            Some("Create replicas with CREATE REPLICA through evolve sql.".into()),
        ));
    }
    let info = Catalog::open(&config.state_dir)?
        .replica(name)?
        .ok_or_else(|| unknown_replica(name))?;
    Ok(config.connection(&info.node_connection)?.url().to_string())
}
