//! The [`Pipeline`]: the catalog's verbs and the run loop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::position::Position;
use evolve_core::control::{format_duration, sql_ident};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::bus::Bus;
use crate::config::Config;
use crate::drift::DriftBoard;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::hydrate::{self, HydrateContext};
use crate::monitor::Monitor;
use crate::preflight;
use crate::sink::{self, SinkContext};
use crate::source::kafka::{self, KafkaSource};
use crate::source::mysql::{self, MysqlSource};
use crate::source::postgres::PostgresSource;
use crate::status::{ObjectStatus, StatusBoard};
use crate::store::SourceKind;
use crate::store::{
    InterfaceInfo, KafkaEnvelope, KafkaFormat, KafkaTarget, OutputColumn, ReplacementInfo,
    SinkInfo, SinkKind, SourceInfo, Store, TableInfo, TableState,
};
use crate::stream::{self, SourceContext};
use crate::swap;
use crate::upstream;

/// `CREATE TABLE name FROM SOURCE source (REFERENCE schema.table) WITH
/// (EXCLUDE COLUMNS (...), TEXT COLUMNS (...))`.
#[derive(Clone, Debug, Default)]
pub struct TableSpec {
    /// The table's name, e.g. `orders_v1`.
    pub name: String,
    /// The source.
    pub source: String,
    /// The upstream schema.
    pub schema: String,
    /// The upstream table.
    pub table: String,
    /// Columns left out of the document.
    pub exclude: Vec<String>,
    /// Columns whose document value is their text output as a string.
    pub text: Vec<String>,
    /// `FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY ...`: a table of a
    /// Kafka source (`schema` and `table` are then not used).
    pub kafka: Option<evolve_core::control::KafkaTable>,
}

/// How often [`Pipeline::wait_hydrated`] looks at the replacement's table.
const HYDRATED_POLL: Duration = Duration::from_millis(100);

/// A running snapshot copy.
struct Hydrator {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// A pipeline: its config, its catalog and state (the embedded store), and
/// [`run`](Pipeline::run), which moves data. Catalog changes made while it
/// runs restart its tasks, which resume from their stored positions.
pub struct Pipeline {
    config: Config,
    store: Mutex<Store>,
    /// Held by every verb that checks the catalog, works upstream or on a
    /// sink, and then writes the catalog, for all of it: two such verbs
    /// never interleave, whoever calls them (an admin request, the absorb
    /// controller), so the later one sees what the earlier one did and
    /// fails with the error that says so. The verbs that never wait check
    /// and write in one store call.
    catalog: tokio::sync::Mutex<()>,
    changed: Arc<Notify>,
    /// How many times [`Pipeline::run`] has stopped its tasks for a
    /// catalog change (each task of the catalog before it has ended once
    /// it counts one more); `None` while no engine runs in this process.
    restarts: watch::Sender<Option<u64>>,
    status: StatusBoard,
    bus: Bus,
    drift: DriftBoard,
    monitor: Monitor,
    /// Sinks listening to their tables' copies (kept across task restarts,
    /// as the copies are).
    taps: sink::Taps,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn check_name(kind: ObjectKind, name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > 63 {
        "it is longer than 63 bytes"
    } else if name.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(PipelineError::InvalidName {
        kind,
        name: name.to_string(),
        reason: reason.to_string(),
    })
}

/// Refuses a new sink `name` when one of that name exists or its
/// interface does not.
fn refuse_new_sink(s: &mut Store, name: &str, interface: &str) -> Result<()> {
    if s.sinks()?.iter().any(|x| x.name == name) {
        return Err(PipelineError::AlreadyExists {
            kind: ObjectKind::Sink,
            name: name.to_string(),
        });
    }
    if s.interface(interface)?.is_none() {
        return Err(PipelineError::UnknownObject {
            kind: ObjectKind::Interface,
            name: interface.to_string(),
        });
    }
    Ok(())
}

/// A sink's destination, for [`refuse_shared_target`].
enum Destination<'a> {
    Table { schema: &'a str, table: &'a str },
    Topic(&'a str),
}

/// Refuses sink `name` into `destination` through `connection` when
/// another sink of the catalog writes there already: each would keep its
/// own position and write over the other's rows (or mix its records into
/// the other's topic).
fn refuse_shared_target(
    s: &mut Store,
    name: &str,
    connection: &str,
    destination: Destination<'_>,
) -> Result<()> {
    let writes_there = |x: &SinkInfo| match destination {
        Destination::Table { schema, table } => {
            x.kafka.is_none() && x.target_schema == schema && x.target_table == table
        }
        Destination::Topic(topic) => x.kafka.as_ref().is_some_and(|k| k.topic == topic),
    };
    let Some(other) = s
        .sinks()?
        .into_iter()
        .find(|x| x.name != name && x.connection == connection && writes_there(x))
    else {
        return Ok(());
    };
    let what = match destination {
        Destination::Table { schema, table } => format!("table {schema}.{table}"),
        Destination::Topic(topic) => format!("topic {topic}"),
    };
    Err(PipelineError::Refused {
        sqlstate: "42710",
        primary: format!(
            "sink \"{}\" writes {what} of connection \"{connection}\" already",
            other.name
        ),
        detail: Some(
            "Two sinks into one destination would each keep their own position and write over each other's changes.".into(),
        ),
        hint: Some(format!(
            "Give sink \"{name}\" a destination of its own, or DROP SINK {} first.",
            other.name
        )),
    })
}

/// Refuses to drop an object others depend on.
fn refuse_dependents(s: &Store, kind: ObjectKind, name: &str) -> Result<()> {
    let dependents = s.dependents(kind, name)?;
    if dependents.is_empty() {
        return Ok(());
    }
    Err(PipelineError::HasDependents {
        kind,
        name: name.to_string(),
        dependents,
    })
}

/// Refuses new work for a source that `DROP SOURCE` was run on.
fn being_dropped(source: &SourceInfo) -> PipelineError {
    PipelineError::Refused {
        sqlstate: "55000",
        primary: format!("source \"{}\" is being dropped", source.name),
        detail: source.drop_error.as_ref().map(|e| {
            format!(
                "DROP SOURCE could not drop its replication slot \"{}\": {e}",
                source.slot
            )
        }),
        hint: Some(format!(
            "Finish dropping it (DROP SOURCE {}), then create it again.",
            sql_ident(&source.name)
        )),
    }
}

/// The output of the schema-agnostic interface form: `data jsonb NOT
/// NULL` (the `coalesce` makes it never null).
pub(crate) fn interface_output() -> Vec<OutputColumn> {
    vec![OutputColumn {
        name: "data".into(),
        type_name: "jsonb".into(),
        not_null: true,
    }]
}

/// Refuses a replacement whose output differs from its target's, naming
/// the first column that differs and how.
pub(crate) fn check_output_schema(
    target: &[OutputColumn],
    replacement: &[OutputColumn],
) -> Result<()> {
    let refuse = |detail: String| PipelineError::Refused {
        sqlstate: "42804",
        primary: "replacement schema differs from target schema".into(),
        detail: Some(detail),
        hint: Some(
            "A replacement must produce exactly the columns of the materialized view it replaces."
                .into(),
        ),
    };
    for (i, t) in target.iter().enumerate() {
        let Some(r) = replacement.get(i) else {
            return Err(refuse(format!(
                "Column {} \"{}\" is missing from the replacement.",
                i + 1,
                t.name
            )));
        };
        if r.name != t.name {
            return Err(refuse(format!(
                "Column {} is named \"{}\" in the replacement and \"{}\" in the target.",
                i + 1,
                r.name,
                t.name
            )));
        }
        if r.type_name != t.type_name {
            return Err(refuse(format!(
                "Column \"{}\" has type {} in the replacement and {} in the target.",
                t.name, r.type_name, t.type_name
            )));
        }
        if r.not_null != t.not_null {
            let null = |n: bool| if n { "NOT NULL" } else { "nullable" };
            return Err(refuse(format!(
                "Column \"{}\" is {} in the replacement and {} in the target.",
                t.name,
                null(r.not_null),
                null(t.not_null)
            )));
        }
    }
    if let Some(extra) = replacement.get(target.len()) {
        return Err(refuse(format!(
            "Column {} \"{}\" of the replacement is not in the target.",
            target.len() + 1,
            extra.name
        )));
    }
    Ok(())
}

/// The slot name of source `name`: `evolve_` and the name when that is a
/// valid slot name, else a sanitized name with a hash.
pub(crate) fn slot_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect();
    if clean == name && name.len() <= 50 {
        return format!("evolve_{name}");
    }
    // FNV-1a: stable across releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut clean = clean;
    clean.truncate(30);
    format!("evolve_{clean}_{:08x}", hash as u32)
}

impl Pipeline {
    /// Opens the pipeline's store in `config.state_dir` (created if
    /// missing).
    pub fn open(config: Config) -> Result<Pipeline> {
        let store = Store::open(&config.state_dir)?;
        Ok(Pipeline {
            config,
            store: Mutex::new(store),
            catalog: tokio::sync::Mutex::new(()),
            changed: Arc::new(Notify::new()),
            restarts: watch::Sender::new(None),
            status: StatusBoard::default(),
            bus: Bus::default(),
            drift: DriftBoard::default(),
            monitor: Monitor::default(),
            taps: sink::Taps::default(),
        })
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut store)
    }

    fn catalog_changed(&self) {
        self.changed.notify_one();
    }

    /// [`Pipeline::catalog_changed`], then waits (up to 30 s) until the
    /// engine running in this process has stopped every task of the
    /// catalog as it was: an object dropped has no task left working on it
    /// when this returns.
    async fn catalog_changed_and_settled(&self) {
        let mut restarts = self.restarts.subscribe();
        let Some(before) = *restarts.borrow_and_update() else {
            self.catalog_changed();
            return;
        };
        self.catalog_changed();
        let _ = tokio::time::timeout(
            Duration::from_secs(30),
            restarts.wait_for(|n| n.is_none_or(|n| n > before)),
        )
        .await;
    }

    // ------------------------------------------------------------ verbs

    /// Refuses `name` when a source has it (the catalog lock held).
    fn refuse_existing_source(&self, name: &str) -> Result<()> {
        if self.with_store(|s| s.source(name))?.is_some() {
            return Err(PipelineError::AlreadyExists {
                kind: ObjectKind::Source,
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// `CREATE SOURCE name FROM POSTGRES CONNECTION connection (PUBLICATION
    /// 'publication')`: creates the publication upstream if it is missing,
    /// and the source's logical replication slot.
    pub async fn create_source(
        &self,
        name: &str,
        connection: &str,
        publication: &str,
    ) -> Result<SourceInfo> {
        check_name(ObjectKind::Source, name)?;
        let _catalog = self.catalog.lock().await;
        self.refuse_existing_source(name)?;
        let conn = self.config.connection(connection)?;
        if conn.is_mysql() {
            return Err(PipelineError::Refused {
                sqlstate: "22023",
                primary: format!(
                    "connection \"{connection}\" is a MySQL connection; FROM POSTGRES needs a PostgreSQL one"
                ),
                detail: None,
                hint: Some(format!(
                    "CREATE SOURCE {} FROM MYSQL CONNECTION {}",
                    sql_ident(name),
                    sql_ident(connection)
                )),
            });
        }
        let client = upstream::connect(connection, conn).await?;
        preflight::first_failure(&preflight::upstream(&client, publication, None).await?)?;
        let slot = slot_name(name);
        if upstream::slot_status(&client, &slot).await?.is_some() {
            return Err(PipelineError::SlotExists { slot });
        }
        let created = upstream::ensure_publication(&client, publication).await?;
        let drop_publication = async || {
            if created {
                let _ = client
                    .batch_execute(&format!(
                        "DROP PUBLICATION {}",
                        evolve_pg::quote_ident(publication)
                    ))
                    .await;
            }
        };
        if let Err(e) = upstream::create_slot(&client, &slot).await {
            drop_publication().await;
            return Err(e);
        }
        // The stream must start as the source will start it; otherwise
        // the source would be accepted and then stall holding WAL.
        if let Err(e) = upstream::probe_stream(name, conn, &slot, publication).await {
            let _ = upstream::drop_slot_released(&client, &slot).await;
            drop_publication().await;
            return Err(e);
        }
        // The source's stream finds the slot free.
        upstream::wait_slot_released(&client, &slot).await?;
        // Where the slot starts: the source's stream must never find it
        // confirmed past what the state knows.
        let confirmed = upstream::slot_status(&client, &slot)
            .await?
            .map_or(Position::ZERO, |s| Position::from_lsn(s.confirmed_flush));
        let info = SourceInfo {
            name: name.to_string(),
            connection: connection.to_string(),
            publication: publication.to_string(),
            publication_created: created,
            slot,
            applied_lsn: Position::ZERO,
            dropping: false,
            drop_error: None,
            kind: SourceKind::Postgres,
        };
        self.with_store(|s| s.insert_source_confirmed(&info, confirmed))?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE SOURCE name FROM MYSQL CONNECTION connection`: checks the
    /// server's binlog settings and the user's privileges (refusing with
    /// the settings to change), and records the source with the binlog's
    /// current position as its applied position (with the GTID state it
    /// stands for, when the server has GTIDs): its stream starts there.
    /// There is nothing to create upstream (a binlog has no slot).
    pub async fn create_mysql_source(&self, name: &str, connection: &str) -> Result<SourceInfo> {
        check_name(ObjectKind::Source, name)?;
        let _catalog = self.catalog.lock().await;
        self.refuse_existing_source(name)?;
        let conn = self.config.connection(connection)?;
        if !conn.is_mysql() {
            return Err(PipelineError::Refused {
                sqlstate: "22023",
                primary: format!(
                    "connection \"{connection}\" is not a MySQL connection, which FROM MYSQL needs"
                ),
                detail: Some(format!("Its url is {}.", conn.redacted())),
                hint: Some(
                    "Name a connection whose url is mysql://user:password@host:port/database, or use FROM POSTGRES."
                        .into(),
                ),
            });
        }
        let (position, gtid_state) = mysql::check_server(name, connection, conn).await?;
        let info = SourceInfo {
            name: name.to_string(),
            connection: connection.to_string(),
            publication: String::new(),
            publication_created: false,
            slot: slot_name(name),
            applied_lsn: position,
            dropping: false,
            drop_error: None,
            kind: SourceKind::Mysql,
        };
        self.with_store(|s| s.insert_source_resuming(&info, gtid_state.as_deref()))?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE SOURCE name FROM KAFKA CONNECTION connection (TOPIC
    /// 'topic')`: checks that the topic exists and records the source with
    /// the topic's high watermarks as its resume state, so its stream
    /// starts at the topic's end (tables read what came before from their
    /// snapshots; see [`crate::source::kafka`]).
    pub async fn create_kafka_source(
        &self,
        name: &str,
        connection: &str,
        topic: &str,
    ) -> Result<SourceInfo> {
        check_name(ObjectKind::Source, name)?;
        let _catalog = self.catalog.lock().await;
        self.refuse_existing_source(name)?;
        let conn = self.config.connection(connection)?;
        if !sink::is_kafka(conn) {
            return Err(PipelineError::Refused {
                sqlstate: "22023",
                primary: format!(
                    "connection \"{connection}\" is not a Kafka connection, which FROM KAFKA needs"
                ),
                detail: Some(format!("Its url is {}.", conn.redacted())),
                hint: Some(
                    "Name a connection whose url is kafka://host:port[,host:port...].".into(),
                ),
            });
        }
        let offsets = kafka::check_topic(connection, conn, topic).await?;
        let info = SourceInfo {
            name: name.to_string(),
            connection: connection.to_string(),
            publication: topic.to_string(),
            publication_created: false,
            slot: slot_name(name),
            applied_lsn: Position::ZERO,
            dropping: false,
            drop_error: None,
            kind: SourceKind::Kafka,
        };
        self.with_store(|s| s.insert_source_resuming(&info, Some(&offsets.to_json())))?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE TABLE ... FROM SOURCE ... (REFERENCE schema.table)`: pins the
    /// upstream table's columns, adds it to the source's publication, and
    /// leaves it pending: the running pipeline snapshots it, then streams.
    pub async fn create_table(&self, spec: &TableSpec) -> Result<TableInfo> {
        check_name(ObjectKind::Table, &spec.name)?;
        let _catalog = self.catalog.lock().await;
        if self.with_store(|s| s.table(&spec.name))?.is_some() {
            return Err(PipelineError::AlreadyExists {
                kind: ObjectKind::Table,
                name: spec.name.clone(),
            });
        }
        let source = self
            .with_store(|s| s.source(&spec.source))?
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Source,
                name: spec.source.clone(),
            })?;
        if source.dropping {
            return Err(being_dropped(&source));
        }
        let conn = self.config.connection(&source.connection)?;
        let mut kafka_info = None;
        match (&spec.kafka, source.kind) {
            (Some(_), SourceKind::Kafka) | (None, SourceKind::Postgres | SourceKind::Mysql) => {}
            (None, SourceKind::Kafka) => {
                return Err(PipelineError::Refused {
                    sqlstate: "42601",
                    primary: format!(
                        "table \"{}\" of Kafka source \"{}\" needs a FORMAT",
                        spec.name, source.name
                    ),
                    detail: None,
                    hint: Some(format!(
                        "Write CREATE TABLE {} FROM SOURCE {} FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION <registry> [ENVELOPE UPSERT | ENVELOPE NONE].",
                        sql_ident(&spec.name),
                        sql_ident(&source.name)
                    )),
                });
            }
            (Some(_), _) => {
                return Err(PipelineError::Refused {
                    sqlstate: "42601",
                    primary: format!(
                        "source \"{}\" is a {} source; FORMAT is for the tables of Kafka sources",
                        source.name,
                        source.kind.as_str()
                    ),
                    detail: None,
                    hint: Some(
                        "Name the upstream table with (REFERENCE schema.table) instead.".into(),
                    ),
                });
            }
        }
        // A MySQL source has no publication: its table is read from the
        // binlog as soon as the catalog names it. A Kafka table's columns
        // are its subject's latest schema's fields.
        let (upstream, client) = if let Some(format) = &spec.kafka {
            let registry = self.config.connection(&format.registry)?;
            let pinned = kafka::pin_reader(&source.publication, registry, format).await?;
            kafka_info = Some(pinned.info);
            let taken = self.with_store(|s| s.tables_of(&source.name))?;
            let oid = taken.iter().map(|t| t.upstream_oid).max().unwrap_or(0) + 1;
            (
                upstream::UpstreamTable {
                    oid,
                    schema: "topic".into(),
                    name: source.publication.clone(),
                    columns: pinned.columns,
                    generated: Vec::new(),
                },
                None,
            )
        } else if source.kind == SourceKind::Mysql {
            let upstream = mysql::inspect_table(
                &source.name,
                &source.connection,
                conn,
                &spec.schema,
                &spec.table,
                &spec.exclude,
            )
            .await?;
            (upstream, None)
        } else {
            let client = upstream::connect(&source.connection, conn).await?;
            let upstream =
                upstream::inspect_table(&client, &source.name, &spec.schema, &spec.table).await?;
            preflight::first_failure(
                &preflight::upstream_table(
                    &client,
                    &preflight::PlannedTable {
                        source: source.name.clone(),
                        connection: source.connection.clone(),
                        publication: source.publication.clone(),
                        schema: spec.schema.clone(),
                        table: spec.table.clone(),
                        exclude: spec.exclude.clone(),
                        pinned: None,
                    },
                )
                .await?,
            )?;
            (upstream, Some(client))
        };
        let (upstream_schema, upstream_table) = if source.kind == SourceKind::Kafka {
            ("topic".to_string(), source.publication.clone())
        } else {
            (spec.schema.clone(), spec.table.clone())
        };
        let reference = format!("{upstream_schema}.{upstream_table}");
        let mut columns = upstream.columns.clone();
        // A Kafka table's key column is excluded from its document already.
        let kafka_keys: Vec<String> = columns
            .iter()
            .filter(|c| spec.kafka.is_some() && c.key)
            .map(|c| c.name.clone())
            .collect();
        for (list, name) in spec
            .exclude
            .iter()
            .filter(|c| !kafka_keys.contains(c))
            .map(|c| ("EXCLUDE", c))
            .chain(spec.text.iter().map(|c| ("TEXT", c)))
        {
            let Some(column) = columns.iter_mut().find(|c| &c.name == name) else {
                return Err(PipelineError::BadColumn {
                    reference,
                    column: name.clone(),
                    reason: format!("does not exist (listed in {list} COLUMNS)"),
                });
            };
            if list == "EXCLUDE" {
                if column.key {
                    return Err(PipelineError::BadColumn {
                        reference,
                        column: name.clone(),
                        reason: "is part of the key and cannot be excluded".into(),
                    });
                }
                column.excluded = true;
            } else {
                column.as_text = true;
                column.kind = evolve_core::document::TypeKind::Text;
            }
        }
        if let Some(generated) = upstream
            .generated
            .iter()
            .find(|g| columns.iter().any(|c| &c.name == *g && !c.excluded))
        {
            return Err(PipelineError::BadColumn {
                reference,
                column: generated.clone(),
                reason: "is a generated column, which logical replication does not send; list it in EXCLUDE COLUMNS".into(),
            });
        }
        if let Some(client) = &client {
            upstream::add_to_publication(client, &source.publication, &spec.schema, &spec.table)
                .await?;
        }
        let mut info = TableInfo {
            id: 0,
            name: spec.name.clone(),
            source: source.name.clone(),
            upstream_schema,
            upstream_table,
            upstream_oid: upstream.oid,
            columns,
            state: TableState::Pending,
            error: None,
            snapshot_lsn: None,
            rows_copied: 0,
            kafka: kafka_info,
        };
        info.id = self.with_store(|s| s.insert_table(&info))?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE MATERIALIZED VIEW name AS SELECT coalesce(jsonb_strip_nulls(
    /// to_jsonb(t)), '{}'::jsonb) AS data FROM table t`: the interface over
    /// `table`.
    pub fn create_interface(&self, name: &str, table: &str) -> Result<InterfaceInfo> {
        check_name(ObjectKind::Interface, name)?;
        let info = self.with_store(|s| {
            if s.interface(name)?.is_some() || s.replacement(name)?.is_some() {
                return Err(PipelineError::AlreadyExists {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                });
            }
            if s.table(table)?.is_none() {
                return Err(PipelineError::UnknownObject {
                    kind: ObjectKind::Table,
                    name: table.to_string(),
                });
            }
            s.insert_interface(name, table, &interface_output())?;
            s.interface(name)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                })
        })?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE REPLACEMENT MATERIALIZED VIEW name FOR target AS SELECT
    /// coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM
    /// table t`: the interface `target` over another table of the same
    /// source, hydrating (its table's snapshot) until applied. At most one
    /// replacement is pending per interface.
    pub fn create_replacement(
        &self,
        name: &str,
        target: &str,
        table: &str,
    ) -> Result<ReplacementInfo> {
        check_name(ObjectKind::Interface, name)?;
        let info = self.with_store(|s| {
            if s.interface(name)?.is_some() || s.replacement(name)?.is_some() {
                return Err(PipelineError::AlreadyExists {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                });
            }
            let interface = s.interface(target)?.ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Interface,
                name: target.to_string(),
            })?;
            let new_table = s.table(table)?.ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: table.to_string(),
            })?;
            if let Some(existing) = s.replacements()?.into_iter().find(|r| r.target == target) {
                return Err(PipelineError::Refused {
                    sqlstate: "42710",
                    primary: format!(
                        "materialized view \"{target}\" already has a pending replacement \"{}\"",
                        existing.name
                    ),
                    detail: Some("At most one replacement is pending per materialized view.".into()),
                    hint: Some(format!(
                        "Apply it (ALTER MATERIALIZED VIEW {target} APPLY REPLACEMENT {}) or drop it (DROP MATERIALIZED VIEW {}).",
                        existing.name, existing.name
                    )),
                });
            }
            let old_table = s.table(&interface.table)?;
            if let Some(old) = &old_table
                && old.source != new_table.source
            {
                return Err(PipelineError::Refused {
                    sqlstate: "0A000",
                    primary: format!(
                        "table \"{table}\" reads source \"{}\", but materialized view \"{target}\" reads source \"{}\"",
                        new_table.source, old.source
                    ),
                    detail: Some("A replacement is swapped in at one position of its source's stream, so it must read the same source.".into()),
                    hint: Some(format!("Create the new table version FROM SOURCE {}.", old.source)),
                });
            }
            if new_table.name == interface.table {
                return Err(PipelineError::Refused {
                    sqlstate: "42P17",
                    primary: format!(
                        "materialized view \"{target}\" already reads table \"{table}\""
                    ),
                    detail: None,
                    hint: Some("A replacement reads a new table version: CREATE TABLE ... FROM SOURCE first.".into()),
                });
            }
            // The target's output as recorded when it was created, against
            // what the replacement's query outputs.
            let target_output =
                s.interface_output(target)?
                    .ok_or_else(|| PipelineError::UnknownObject {
                        kind: ObjectKind::Interface,
                        name: target.to_string(),
                    })?;
            check_output_schema(&target_output, &interface_output())?;
            s.insert_replacement(name, target, table)?;
            s.replacement(name)?.ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Interface,
                name: name.to_string(),
            })
        })?;
        Ok(info)
    }

    /// Replacement `name` of interface `target`, its table and its source,
    /// for `APPLY REPLACEMENT`.
    fn replacement_of(
        &self,
        target: &str,
        name: &str,
    ) -> Result<(ReplacementInfo, TableInfo, SourceInfo)> {
        let (replacement, table, source) = self.with_store(|s| {
            let replacement = s
                .replacement(name)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                })?;
            if s.interface(target)?.is_none() {
                return Err(PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: target.to_string(),
                });
            }
            let table =
                s.table(&replacement.table)?
                    .ok_or_else(|| PipelineError::UnknownObject {
                        kind: ObjectKind::Table,
                        name: replacement.table.clone(),
                    })?;
            let source = s
                .source(&table.source)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Source,
                    name: table.source.clone(),
                })?;
            Ok((replacement, table, source))
        })?;
        if replacement.target != target {
            return Err(PipelineError::Refused {
                sqlstate: "42809",
                primary: format!(
                    "\"{name}\" is a replacement for materialized view \"{}\", not \"{target}\"",
                    replacement.target
                ),
                detail: None,
                hint: Some(format!(
                    "ALTER MATERIALIZED VIEW {} APPLY REPLACEMENT {name}",
                    replacement.target
                )),
            });
        }
        Ok((replacement, table, source))
    }

    /// `APPLY REPLACEMENT ... WITH (WAIT = ...)`: waits up to `wait` for
    /// replacement `name` of interface `target` to be hydrated (its table's
    /// snapshot in and following the stream). Returns at once when it is,
    /// or when its table is stalled (which [`Pipeline::apply_replacement`]
    /// refuses with the table's error); fails, having changed nothing,
    /// when `wait` passes first. Needs the pipeline running: it is what
    /// hydrates the table.
    pub async fn wait_hydrated(&self, target: &str, name: &str, wait: Duration) -> Result<()> {
        let start = tokio::time::Instant::now();
        loop {
            let (_, table, _) = self.replacement_of(target, name)?;
            if matches!(table.state, TableState::Running | TableState::Stalled) {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= wait {
                return Err(PipelineError::Refused {
                    sqlstate: "57014",
                    primary: format!(
                        "replacement \"{name}\" is not hydrated after waiting {}",
                        format_duration(wait)
                    ),
                    detail: Some(format!(
                        "Its table \"{}\" is {} ({} rows copied so far). Nothing was applied.",
                        table.name,
                        table.state.as_str(),
                        table.rows_copied
                    )),
                    hint: Some(format!(
                        "Wait longer (ALTER MATERIALIZED VIEW {} APPLY REPLACEMENT {} \
                         WITH (WAIT = '10min')), or apply it once `evolve status` shows it hydrated.",
                        sql_ident(target),
                        sql_ident(name)
                    )),
                });
            }
            tokio::time::sleep((wait - waited).min(HYDRATED_POLL)).await;
        }
    }

    /// The request part of [`Pipeline::apply_replacement`]: refuses a
    /// replacement that is not hydrated, marks it as applying and writes the
    /// swap's message upstream. When that fails, the mark is cleared and the
    /// error recorded, so the replacement can be applied again or dropped
    /// (a message that did reach the WAL is then ignored by the stream).
    async fn request_swap(
        &self,
        target: &str,
        name: &str,
        table: &TableInfo,
        source: &SourceInfo,
    ) -> Result<()> {
        if table.state != TableState::Running {
            let (detail, hint) = match table.state {
                TableState::Stalled => (
                    format!(
                        "Its table \"{}\" is stalled: {}",
                        table.name,
                        table.error.clone().unwrap_or_default()
                    ),
                    "Create a new table version that matches upstream and a replacement over it."
                        .to_string(),
                ),
                _ => (
                    format!(
                        "Its table \"{}\" is {} ({} rows copied so far).",
                        table.name,
                        table.state.as_str(),
                        table.rows_copied
                    ),
                    format!(
                        "Wait for it with ALTER MATERIALIZED VIEW {} APPLY REPLACEMENT {} \
                         WITH (WAIT = '60s'), or apply it once `evolve status` shows it hydrated.",
                        sql_ident(target),
                        sql_ident(name)
                    ),
                ),
            };
            return Err(PipelineError::Refused {
                sqlstate: "55000",
                primary: format!("replacement \"{name}\" is not hydrated"),
                detail: Some(detail),
                hint: Some(hint),
            });
        }
        self.with_store(|s| s.set_replacement_applying(name, true))?;
        let emitted = async {
            if source.kind == SourceKind::Kafka {
                // Nothing to write upstream: the source's stream sees the
                // request in the store (see `source::kafka`).
                return Ok(());
            }
            let conn = self.config.connection(&source.connection)?;
            if source.kind == SourceKind::Mysql {
                // A row of the marker table, which the binlog carries.
                return mysql::write_marker(
                    &source.name,
                    &source.connection,
                    conn,
                    &source.slot,
                    swap::MESSAGE_PREFIX,
                    &swap::apply_message(&source.slot, name),
                )
                .await;
            }
            let mut client = upstream::connect(&source.connection, conn).await?;
            let fail = |e: tokio_postgres::Error| {
                PipelineError::database("request the swap upstream (pg_logical_emit_message)", &e)
            };
            // The message's commit is flushed at once, whatever the
            // server's synchronous_commit: the stream decodes only flushed
            // WAL, and under synchronous_commit = off the commit would wait
            // for the WAL writer (up to wal_writer_delay).
            let tx = client.transaction().await.map_err(fail)?;
            tx.batch_execute("SET LOCAL synchronous_commit = local")
                .await
                .map_err(fail)?;
            tx.execute(
                "SELECT pg_logical_emit_message(true, $1, $2)",
                &[
                    &swap::MESSAGE_PREFIX,
                    &swap::apply_message(&source.slot, name),
                ],
            )
            .await
            .map_err(fail)?;
            tx.commit().await.map_err(fail)?;
            Ok::<(), PipelineError>(())
        }
        .await;
        if let Err(e) = emitted {
            let error = match e.detail() {
                Some(detail) => format!("{}: {detail}", e.primary()),
                None => e.primary(),
            };
            self.with_store(|s| s.set_replacement_error(name, &error))?;
            return Err(e);
        }
        Ok(())
    }

    /// `ALTER MATERIALIZED VIEW target APPLY REPLACEMENT name`: swaps the
    /// replacement in at one upstream position (see `crate::swap`), and
    /// returns once it is applied. Refused while the replacement is not
    /// hydrated ([`Pipeline::wait_hydrated`] waits for that). Needs the
    /// pipeline running: the swap happens in its source's stream; when
    /// that does not happen within `wait`, the request stays and is
    /// applied when the stream reaches it.
    pub async fn apply_replacement(&self, target: &str, name: &str, wait: Duration) -> Result<()> {
        // Each transaction this process's stream commits wakes the wait
        // (the swap's is one of them), so it returns once the swap is
        // committed; the store is also read every 50 ms, for a pipeline
        // run by another process.
        let mut committed = self.bus.subscribe();
        let (replacement, source) = {
            let _catalog = self.catalog.lock().await;
            let (replacement, table, source) = self.replacement_of(target, name)?;
            self.request_swap(target, name, &table, &source).await?;
            (replacement, source)
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let (pending, now_reads) = self.with_store(|s| {
                Ok((s.replacement(name)?, s.interface(target)?.map(|i| i.table)))
            })?;
            match pending {
                None if now_reads.as_deref() == Some(replacement.table.as_str()) => {
                    self.catalog_changed();
                    return Ok(());
                }
                None => {
                    return Err(PipelineError::Refused {
                        sqlstate: "55000",
                        primary: format!(
                            "replacement \"{name}\" was dropped before it was applied"
                        ),
                        detail: None,
                        hint: None,
                    });
                }
                Some(r) if !r.applying => {
                    return Err(PipelineError::Refused {
                        sqlstate: "55000",
                        primary: format!("replacement \"{name}\" could not be applied"),
                        detail: r.error,
                        hint: Some(
                            "Nothing changed for readers; fix the cause and apply it again.".into(),
                        ),
                    });
                }
                Some(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(PipelineError::Refused {
                        sqlstate: "57014",
                        primary: format!(
                            "replacement \"{name}\" was not applied within {} s",
                            wait.as_secs()
                        ),
                        detail: Some(format!(
                            "The swap is requested in source \"{}\"'s stream and happens when the running pipeline reaches it.",
                            source.name
                        )),
                        hint: Some("Check that the pipeline is running (`evolve status`); the request stays pending.".into()),
                    });
                }
                Some(_) => {
                    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
                    tokio::select! {
                        woken = committed.recv() => match woken {
                            Err(RecvError::Closed) => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            // Only a wake-up: the transactions are let go
                            // at once, not kept by this follower.
                            _ => while !matches!(
                                committed.try_recv(),
                                Err(TryRecvError::Empty | TryRecvError::Closed)
                            ) {},
                        },
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            }
        }
    }

    /// `CREATE SINK name FROM interface INTO POSTGRES CONNECTION connection
    /// (TABLE 'schema.table')`: creates the target table if missing and
    /// refuses one of another shape, one holding rows, or one with a
    /// progress record of this name left by an earlier sink.
    pub async fn create_sink(
        &self,
        name: &str,
        interface: &str,
        connection: &str,
        schema: &str,
        table: &str,
    ) -> Result<SinkInfo> {
        check_name(ObjectKind::Sink, name)?;
        let _catalog = self.catalog.lock().await;
        let info = SinkInfo {
            name: name.to_string(),
            kind: SinkKind::Postgres,
            interface: interface.to_string(),
            connection: connection.to_string(),
            target_schema: schema.to_string(),
            target_table: table.to_string(),
            kafka: None,
        };
        self.with_store(|s| {
            refuse_new_sink(s, name, interface)?;
            refuse_shared_target(s, name, connection, Destination::Table { schema, table })
        })?;
        let conn = self.config.connection(connection)?;
        if conn.kind() != crate::config::ConnectionKind::Postgres {
            return Err(sink::not_postgres(connection, conn.kind()));
        }
        let client = evolve_pg::connect(conn.url(), "evolve-pipeline")
            .await
            .map_err(|e| upstream::connect_error(connection, conn, &e.to_string()))?;
        preflight::first_failure(&preflight::sink(&client, schema, table).await?)?;
        sink::ensure_tables(&client, schema, table, name).await?;
        sink::check_new_target(&client, schema, table, name).await?;
        // DROP MATERIALIZED VIEW does not wait, so it may have run meanwhile.
        self.with_store(|s| {
            refuse_new_sink(s, name, interface)?;
            s.insert_sink(&info)
        })?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE SINK name FROM interface INTO KAFKA CONNECTION connection
    /// (TOPIC 'topic') [FORMAT JSON] [ENVELOPE UPSERT | ENVELOPE
    /// DEBEZIUM]`: checks that a broker answers and creates the topic and
    /// the progress topic when they are missing (see the Kafka sink's
    /// docs in `sink/kafka.rs` for what it writes).
    pub async fn create_kafka_sink(
        &self,
        name: &str,
        interface: &str,
        connection: &str,
        target: KafkaTarget,
    ) -> Result<SinkInfo> {
        check_name(ObjectKind::Sink, name)?;
        let _catalog = self.catalog.lock().await;
        self.with_store(|s| {
            refuse_new_sink(s, name, interface)?;
            refuse_shared_target(s, name, connection, Destination::Topic(&target.topic))
        })?;
        let conn = self.config.connection(connection)?;
        if !sink::is_kafka(conn) {
            return Err(sink::not_kafka(connection));
        }
        sink::ensure_kafka_topics(connection, conn, name, &target.topic).await?;
        if let Some(registry) = &target.registry {
            // The schemas are registered now, so that a registry that
            // refuses them fails the statement.
            let r = self.config.connection(registry)?;
            sink::register_avro_schemas(registry, r, interface, &target).await?;
        }
        let info = SinkInfo {
            name: name.to_string(),
            kind: SinkKind::Kafka,
            interface: interface.to_string(),
            connection: connection.to_string(),
            target_schema: String::new(),
            target_table: String::new(),
            kafka: Some(target),
        };
        // DROP MATERIALIZED VIEW does not wait, so it may have run meanwhile.
        self.with_store(|s| {
            refuse_new_sink(s, name, interface)?;
            s.insert_sink(&info)
        })?;
        self.catalog_changed();
        Ok(info)
    }

    /// [`Pipeline::create_kafka_sink`] as the statement asks for it.
    pub async fn create_kafka_sink_as(
        &self,
        name: &str,
        interface: &str,
        connection: &str,
        asked: &evolve_core::control::KafkaSink,
    ) -> Result<SinkInfo> {
        use evolve_core::control::{SinkEnvelope, SinkFormat};
        let (format, registry) = match &asked.format {
            SinkFormat::Json => (KafkaFormat::Json, None),
            SinkFormat::Avro { registry } => {
                let conn = self.config.connection(registry)?;
                if conn.kind() != crate::config::ConnectionKind::Registry {
                    return Err(PipelineError::Refused {
                        sqlstate: "42809",
                        primary: format!(
                            "connection \"{registry}\" is not a schema registry connection; FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY needs url = \"http://host:port\" (or https://)"
                        ),
                        detail: None,
                        hint: None,
                    });
                }
                (KafkaFormat::Avro, Some(registry.clone()))
            }
        };
        let envelope = match asked.envelope {
            SinkEnvelope::Upsert => KafkaEnvelope::Upsert,
            SinkEnvelope::Debezium => KafkaEnvelope::Debezium,
        };
        let target = KafkaTarget {
            registry,
            topic: asked.topic.clone(),
            format,
            envelope,
        };
        self.create_kafka_sink(name, interface, connection, target)
            .await
    }

    /// `DROP SINK name`: forgets the sink and its progress record; its
    /// table (or topic) is left as it is.
    pub async fn drop_sink(&self, name: &str) -> Result<()> {
        let _catalog = self.catalog.lock().await;
        let sink = self
            .with_store(|s| s.sinks())?
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Sink,
                name: name.to_string(),
            })?;
        self.with_store(|s| s.delete_sink(name))?;
        // Its task may be writing a transaction (and its progress): the
        // progress record goes once the task has stopped.
        self.catalog_changed_and_settled().await;
        // Best effort: a sink whose destination cannot be reached can be
        // dropped. What is left is said, and a sink created again under
        // the name deals with it (a Kafka sink clears it, a PostgreSQL
        // sink refuses the table until it is removed).
        let left = |error: String| {
            tracing::warn!(
                sink = %name,
                connection = %sink.connection,
                error = %error,
                "the dropped sink's progress record could not be removed"
            );
        };
        let conn = match self.config.connection(&sink.connection) {
            Ok(conn) => conn,
            Err(e) => {
                left(e.to_string());
                return Ok(());
            }
        };
        if sink.kind == SinkKind::Kafka {
            if let Err(e) = sink::forget_kafka(&sink.connection, conn, name).await {
                left(e.to_string());
            }
            return Ok(());
        }
        let client = match evolve_pg::connect(conn.url(), "evolve-pipeline").await {
            Ok(client) => client,
            Err(e) => {
                left(upstream::connect_error(&sink.connection, conn, &e.to_string()).to_string());
                return Ok(());
            }
        };
        let targets = sink::Targets::new(&sink.target_schema, &sink.target_table);
        match client
            .execute(
                &format!("DELETE FROM {} WHERE sink = $1", targets.progress),
                &[&name],
            )
            .await
        {
            // No progress table: nothing is left.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {}
            Err(e) => {
                left(PipelineError::database("delete the sink's progress record", &e).to_string())
            }
            Ok(_) => {}
        }
        Ok(())
    }

    /// `DROP MATERIALIZED VIEW name`: an interface, or a pending
    /// replacement.
    pub fn drop_interface(&self, name: &str) -> Result<()> {
        let interface = self.with_store(|s| {
            if let Some(r) = s.replacement(name)? {
                if r.applying {
                    return Err(PipelineError::Refused {
                        sqlstate: "55006",
                        primary: format!("replacement \"{name}\" is being applied"),
                        detail: Some("Its swap was requested in the source's stream.".into()),
                        hint: Some(
                            "Wait for it to be applied, then drop what it replaced instead.".into(),
                        ),
                    });
                }
                s.delete_replacement(name)?;
                return Ok(false);
            }
            if s.interface(name)?.is_none() {
                return Err(PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                });
            }
            refuse_dependents(s, ObjectKind::Interface, name)?;
            s.delete_interface(name)?;
            Ok(true)
        })?;
        if interface {
            self.catalog_changed();
        }
        Ok(())
    }

    /// `DROP TABLE name`: forgets the table and its documents, and removes
    /// its upstream table from the publication unless another table of the
    /// source still reads it.
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        let _catalog = self.catalog.lock().await;
        let table = self.with_store(|s| {
            let table = s.table(name)?.ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: name.to_string(),
            })?;
            refuse_dependents(s, ObjectKind::Table, name)?;
            s.delete_table(name)?;
            Ok(table)
        })?;
        self.catalog_changed();
        let others = self.with_store(|s| s.tables_of(&table.source))?;
        let shared = others.iter().any(|t| {
            t.upstream_schema == table.upstream_schema && t.upstream_table == table.upstream_table
        });
        if !shared
            && let Some(source) = self.with_store(|s| s.source(&table.source))?
            && let Ok(conn) = self.config.connection(&source.connection)
            && let Ok(client) = upstream::connect(&source.connection, conn).await
        {
            let _ = upstream::remove_from_publication(
                &client,
                &source.publication,
                &table.upstream_schema,
                &table.upstream_table,
            )
            .await;
        }
        Ok(())
    }

    /// `DROP SOURCE name`: stops its stream, drops its slot upstream
    /// (waiting up to 10 s for the stream to release it) and its
    /// publication if the pipeline created it. The source leaves the
    /// catalog only once its slot is gone: when the slot cannot be dropped,
    /// it stays listed, stopped and marked as being dropped with the error
    /// (`SHOW SOURCES`, `evolve status`), and running `DROP SOURCE` again
    /// tries again.
    pub async fn drop_source(&self, name: &str) -> Result<()> {
        let _catalog = self.catalog.lock().await;
        let source = self.with_store(|s| {
            let source = s
                .source(name)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Source,
                    name: name.to_string(),
                })?;
            refuse_dependents(s, ObjectKind::Source, name)?;
            Ok(source)
        })?;
        if matches!(source.kind, SourceKind::Mysql | SourceKind::Kafka) {
            // Nothing upstream to drop: a binlog or topic reader leaves no
            // trace (a Kafka source commits no consumer group offsets).
            self.with_store(|s| s.delete_source(name))?;
            self.catalog_changed();
            return Ok(());
        }
        let conn = self.config.connection(&source.connection)?;
        let client = upstream::connect(&source.connection, conn).await?;
        self.with_store(|s| s.set_source_dropping(name, None))?;
        self.status.set(ObjectKind::Source, name, "dropping", None);
        self.catalog_changed();
        let mut attempt = 0;
        let dropped = loop {
            match upstream::drop_slot(&client, &source.slot).await {
                Ok(()) => break Ok(()),
                Err(e) if attempt >= 50 => break Err(e),
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        if let Err(e) = dropped {
            let reason = match e.detail() {
                Some(detail) => format!("{}: {detail}", e.primary()),
                None => e.primary(),
            };
            self.with_store(|s| s.set_source_dropping(name, Some(&reason)))?;
            self.status
                .set(ObjectKind::Source, name, "dropping", Some(reason.clone()));
            return Err(PipelineError::Refused {
                sqlstate: "55006",
                primary: format!(
                    "source \"{name}\" is not dropped: its replication slot \"{}\" could not be dropped upstream",
                    source.slot
                ),
                detail: Some(format!(
                    "{reason}\nThe source stays listed and no longer streams; its slot keeps WAL upstream until it is dropped."
                )),
                hint: Some(format!(
                    "Stop whatever still uses the slot (pg_stat_replication shows it), then run DROP SOURCE {} again.",
                    sql_ident(name)
                )),
            });
        }
        self.with_store(|s| s.delete_source(name))?;
        self.catalog_changed();
        if source.publication_created {
            client
                .batch_execute(&format!(
                    "DROP PUBLICATION IF EXISTS {}",
                    evolve_pg::quote_ident(&source.publication)
                ))
                .await
                .map_err(|e| PipelineError::database("DROP PUBLICATION", &e))?;
        }
        Ok(())
    }

    /// Each upstream table of source `name` as its stream last announced
    /// it (the schema history at the source's applied position), by the
    /// table's upstream id: its columns and the name it has now.
    pub fn upstream_schemas(
        &self,
        name: &str,
    ) -> Result<HashMap<u32, Arc<evolve_core::change::TableSchema>>> {
        self.with_store(|s| {
            let applied = s.applied_lsn(name)?;
            s.schemas_at(name, applied)
        })
    }

    /// `SHOW SOURCES`.
    pub fn sources(&self) -> Result<Vec<SourceInfo>> {
        self.with_store(|s| s.sources())
    }

    /// `SHOW TABLES`.
    pub fn tables(&self) -> Result<Vec<TableInfo>> {
        self.with_store(|s| s.tables())
    }

    /// `SHOW MATERIALIZED VIEWS`.
    pub fn interfaces(&self) -> Result<Vec<InterfaceInfo>> {
        self.with_store(|s| s.interfaces())
    }

    /// `ALTER MATERIALIZED VIEW name SET (ABSORB = 'auto' | 'manual')`.
    pub fn set_absorb(&self, name: &str, auto: bool) -> Result<()> {
        self.with_store(|s| {
            if s.interface(name)?.is_none() {
                return Err(PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                });
            }
            s.set_absorb(name, auto)
        })
    }

    /// The pending replacements.
    pub fn replacements(&self) -> Result<Vec<ReplacementInfo>> {
        self.with_store(|s| s.replacements())
    }

    /// Records the fields subscriber `consumer` of `interface` reads.
    pub fn declare_fields(&self, interface: &str, consumer: &str, fields: &[String]) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.with_store(|s| s.declare_fields(interface, consumer, fields, now))
    }

    /// Forgets what subscriber `consumer` declared; how many declarations.
    pub fn forget_fields(&self, interface: Option<&str>, consumer: &str) -> Result<usize> {
        self.with_store(|s| s.forget_fields(interface, consumer))
    }

    /// The subscribers' declared fields.
    pub fn declared_fields(&self) -> Result<Vec<crate::store::Declaration>> {
        self.with_store(|s| s.declared_fields())
    }

    /// `SHOW SINKS`.
    pub fn sinks(&self) -> Result<Vec<SinkInfo>> {
        self.with_store(|s| s.sinks())
    }

    /// The current documents of interface `name`, `(key, document)` in key
    /// byte order.
    pub fn documents(&self, name: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.with_store(|s| {
            let interface = s
                .interface(name)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                })?;
            let table = s
                .table(&interface.table)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Table,
                    name: interface.table.clone(),
                })?;
            s.docs(table.id)
        })
    }

    /// How many documents table `name` holds (one per upstream row).
    pub fn document_count(&self, name: &str) -> Result<u64> {
        self.with_store(|s| {
            let table = s.table(name)?.ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Table,
                name: name.to_string(),
            })?;
            s.doc_count(table.id)
        })
    }

    /// The change bus: every committed upstream transaction, published as
    /// it becomes durable (see [`crate::bus`]).
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The last drift poll of each table ([`crate::drift`]): refreshed by
    /// `GET /drift`, `REFRESH REFERENCES` and, while the pipeline runs,
    /// every [`crate::drift::POLL_INTERVAL`] (every
    /// [`crate::absorb::INTERVAL`] when an interface absorbs by itself).
    pub fn drift_board(&self) -> &DriftBoard {
        &self.drift
    }

    /// Monitoring's shared upstream sessions ([`crate::monitor`]).
    pub(crate) fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// The running tasks' status board (rates, last commit times).
    pub fn status_board(&self) -> &StatusBoard {
        &self.status
    }

    /// What the running tasks last reported about each object.
    pub fn status(&self) -> Vec<ObjectStatus> {
        self.status.all()
    }

    // -------------------------------------------------------------- run

    /// Runs the engine, every source, snapshot and sink, until `shutdown`
    /// completes; refused while another engine runs on the same state
    /// directory ([`Store::lock_engine`]). Failures of one object are
    /// retried with backoff and reported in [`status`](Self::status);
    /// catalog changes restart the
    /// tasks. The controllers that drive the façade (absorb, drift polls)
    /// are not started here: [`crate::absorb::run_with`] runs them beside
    /// the engine.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        // One engine per state directory, for as long as this one runs.
        let _engine = Store::lock_engine(&self.config.state_dir)?;
        tokio::pin!(shutdown);
        // Snapshot copies outlive the restarts: a catalog change must not
        // start a long copy over.
        let mut hydrators: HashMap<i64, Hydrator> = HashMap::new();
        self.restarts.send_replace(Some(0));
        let result = loop {
            let (stop_tx, stop_rx) = watch::channel(false);
            let mut tasks = JoinSet::new();
            let spawned = self
                .spawn_tasks(&mut tasks, &stop_rx)
                .and_then(|()| self.spawn_hydrators(&mut hydrators));
            let restart = match spawned {
                Err(e) => Err(e),
                Ok(()) => Ok(tokio::select! {
                    _ = &mut shutdown => false,
                    _ = self.changed.notified() => true,
                }),
            };
            let _ = stop_tx.send(true);
            while tasks.join_next().await.is_some() {}
            self.restarts
                .send_modify(|n| *n = Some(n.map_or(1, |n| n + 1)));
            match restart {
                Ok(true) => continue,
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        for (_, hydrator) in hydrators.drain() {
            let _ = hydrator.stop.send(true);
            let _ = hydrator.task.await;
        }
        self.restarts.send_replace(None);
        result
    }

    /// Starts a copy for every table that needs one and has none running;
    /// stops the copies of tables that are gone.
    fn spawn_hydrators(&self, hydrators: &mut HashMap<i64, Hydrator>) -> Result<()> {
        let (sources, tables) = self.with_store(|s| Ok((s.sources()?, s.tables()?)))?;
        hydrators.retain(|id, h| {
            let wanted = tables.iter().any(|t| {
                t.id == *id && matches!(t.state, TableState::Pending | TableState::Snapshotting)
            });
            if !wanted {
                let _ = h.stop.send(true);
            }
            wanted && !h.task.is_finished()
        });
        for table in tables {
            if !matches!(table.state, TableState::Pending | TableState::Snapshotting)
                || hydrators.contains_key(&table.id)
            {
                continue;
            }
            let Some(source) = sources.iter().find(|s| s.name == table.source) else {
                continue;
            };
            let connection = match self.config.connection(&source.connection) {
                Ok(c) => c.clone(),
                Err(e) => {
                    self.status.set(
                        ObjectKind::Table,
                        &table.name,
                        "stalled",
                        Some(e.to_string()),
                    );
                    continue;
                }
            };
            let (stop, stop_rx) = watch::channel(false);
            let id = table.id;
            // The source's kind picks the implementation of `Source`.
            let task = match source.kind {
                SourceKind::Postgres => tokio::spawn(hydrate::run(HydrateContext {
                    upstream: PostgresSource::new(source.clone(), connection),
                    state_dir: self.config.state_dir.clone(),
                    table,
                    stop: stop_rx,
                    status: self.status.clone(),
                    taps: self.taps.clone(),
                })),
                SourceKind::Mysql => tokio::spawn(hydrate::run(HydrateContext {
                    upstream: MysqlSource::new(source.clone(), connection, Vec::new()),
                    state_dir: self.config.state_dir.clone(),
                    table,
                    stop: stop_rx,
                    status: self.status.clone(),
                    taps: self.taps.clone(),
                })),
                SourceKind::Kafka => tokio::spawn(hydrate::run(HydrateContext {
                    upstream: KafkaSource::new(
                        source.clone(),
                        connection,
                        self.config.state_dir.clone(),
                        Vec::new(),
                        self.registries_of(std::slice::from_ref(&table)),
                    )
                    .with_snapshot_memory_keys(self.config.kafka_snapshot_memory_keys),
                    state_dir: self.config.state_dir.clone(),
                    table,
                    stop: stop_rx,
                    status: self.status.clone(),
                    taps: self.taps.clone(),
                })),
            };
            hydrators.insert(id, Hydrator { stop, task });
        }
        Ok(())
    }

    /// The registry connections that Kafka tables among `tables` name
    /// (those missing from the config are left out: their tables fail
    /// with the name when they need it).
    fn registries_of(&self, tables: &[TableInfo]) -> Vec<(String, crate::config::Connection)> {
        let mut out: Vec<(String, crate::config::Connection)> = Vec::new();
        for t in tables {
            if let Some(k) = &t.kafka
                && !out.iter().any(|(n, _)| *n == k.registry)
                && let Ok(c) = self.config.connection(&k.registry)
            {
                out.push((k.registry.clone(), c.clone()));
            }
        }
        out
    }

    fn spawn_tasks(&self, tasks: &mut JoinSet<()>, stop: &watch::Receiver<bool>) -> Result<()> {
        let (sources, tables, interfaces, sinks) =
            self.with_store(|s| Ok((s.sources()?, s.tables()?, s.interfaces()?, s.sinks()?)))?;
        // A source being dropped no longer streams: its slot must be free.
        let sources: Vec<SourceInfo> = sources.into_iter().filter(|s| !s.dropping).collect();
        let mut applied: HashMap<String, watch::Sender<Position>> = HashMap::new();
        for source in &sources {
            applied.insert(source.name.clone(), watch::channel(source.applied_lsn).0);
        }
        let mut source_sinks: HashMap<String, Vec<(i64, watch::Receiver<Position>)>> =
            HashMap::new();
        for info in sinks {
            let Some(interface) = interfaces.iter().find(|i| i.name == info.interface) else {
                continue;
            };
            let Some(table) = tables.iter().find(|t| t.name == interface.table) else {
                continue;
            };
            let Some(applied_tx) = applied.get(&table.source) else {
                continue;
            };
            let connection = match self.config.connection(&info.connection) {
                Ok(c) => c.clone(),
                Err(e) => {
                    self.status
                        .set(ObjectKind::Sink, &info.name, "stalled", Some(e.to_string()));
                    continue;
                }
            };
            let registry = match info.kafka.as_ref().and_then(|k| k.registry.as_deref()) {
                None => None,
                Some(name) => match self.config.connection(name) {
                    Ok(c) => Some(c.clone()),
                    Err(e) => {
                        self.status.set(
                            ObjectKind::Sink,
                            &info.name,
                            "stalled",
                            Some(e.to_string()),
                        );
                        continue;
                    }
                },
            };
            // A sink whose table is still to be copied may load beside the
            // copy: the copy waits for it to start listening.
            let expected = (matches!(table.state, TableState::Pending | TableState::Snapshotting)
                && info.kind == SinkKind::Postgres)
                .then(|| self.taps.expect(&table.name));
            let (effective_tx, effective_rx) = watch::channel(Position::ZERO);
            source_sinks
                .entry(table.source.clone())
                .or_default()
                .push((interface.id, effective_rx));
            tasks.spawn(sink::run(SinkContext {
                connection,
                registry,
                state_dir: self.config.state_dir.clone(),
                interface_id: interface.id,
                table: table.name.clone(),
                source: table.source.clone(),
                load_rows: self.config.sink_load_rows,
                applied: applied_tx.subscribe(),
                effective: effective_tx,
                stop: stop.clone(),
                status: self.status.clone(),
                taps: self.taps.clone(),
                expected,
                bus: self.bus.clone(),
                sink: info,
            }));
        }
        for source in sources {
            let connection = match self.config.connection(&source.connection) {
                Ok(c) => c.clone(),
                Err(e) => {
                    self.status.set(
                        ObjectKind::Source,
                        &source.name,
                        "stalled",
                        Some(e.to_string()),
                    );
                    continue;
                }
            };
            let Some(applied_tx) = applied.remove(&source.name) else {
                continue;
            };
            let sinks = source_sinks.remove(&source.name).unwrap_or_default();
            // The source's kind picks the implementation of `Source`.
            match source.kind {
                SourceKind::Postgres => tasks.spawn(stream::run(SourceContext {
                    sinks,
                    upstream: PostgresSource::new(source.clone(), connection),
                    state_dir: self.config.state_dir.clone(),
                    applied: applied_tx,
                    stop: stop.clone(),
                    status: self.status.clone(),
                    bus: self.bus.clone(),
                    retain_history: self.config.retain_history,
                    source,
                })),
                SourceKind::Kafka => {
                    let mine: Vec<TableInfo> = tables
                        .iter()
                        .filter(|t| t.source == source.name)
                        .cloned()
                        .collect();
                    let registries = self.registries_of(&mine);
                    tasks.spawn(stream::run(SourceContext {
                        sinks,
                        upstream: KafkaSource::new(
                            source.clone(),
                            connection,
                            self.config.state_dir.clone(),
                            mine,
                            registries,
                        ),
                        state_dir: self.config.state_dir.clone(),
                        applied: applied_tx,
                        stop: stop.clone(),
                        status: self.status.clone(),
                        bus: self.bus.clone(),
                        retain_history: self.config.retain_history,
                        source,
                    }))
                }
                SourceKind::Mysql => {
                    let read: Vec<(String, String)> = tables
                        .iter()
                        .filter(|t| t.source == source.name)
                        .map(|t| (t.upstream_schema.clone(), t.upstream_table.clone()))
                        .collect();
                    tasks.spawn(stream::run(SourceContext {
                        sinks,
                        upstream: MysqlSource::new(source.clone(), connection, read),
                        state_dir: self.config.state_dir.clone(),
                        applied: applied_tx,
                        stop: stop.clone(),
                        status: self.status.clone(),
                        bus: self.bus.clone(),
                        retain_history: self.config.retain_history,
                        source,
                    }))
                }
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_output_must_match_the_target() {
        let ok = interface_output();
        assert!(check_output_schema(&ok, &ok).is_ok());
        let col = |name: &str, type_name: &str, not_null: bool| OutputColumn {
            name: name.into(),
            type_name: type_name.into(),
            not_null,
        };
        let detail = |r: Vec<OutputColumn>| {
            let e = check_output_schema(&ok, &r).unwrap_err();
            assert_eq!(e.primary(), "replacement schema differs from target schema");
            e.detail().unwrap()
        };
        assert_eq!(
            detail(vec![col("doc", "jsonb", true)]),
            "Column 1 is named \"doc\" in the replacement and \"data\" in the target."
        );
        assert_eq!(
            detail(vec![col("data", "json", true)]),
            "Column \"data\" has type json in the replacement and jsonb in the target."
        );
        assert_eq!(
            detail(vec![col("data", "jsonb", false)]),
            "Column \"data\" is nullable in the replacement and NOT NULL in the target."
        );
        assert_eq!(
            detail(vec![]),
            "Column 1 \"data\" is missing from the replacement."
        );
        assert_eq!(
            detail(vec![col("data", "jsonb", true), col("extra", "int", false)]),
            "Column 2 \"extra\" of the replacement is not in the target."
        );
    }

    #[test]
    fn slot_names_are_valid() {
        assert_eq!(slot_name("src"), "evolve_src");
        let odd = slot_name("Shop \"DB\"; --");
        assert!(odd.starts_with("evolve_shop__db_____"), "{odd}");
        assert!(odd.len() <= 63);
        assert_ne!(slot_name("a-b"), slot_name("a_b"));
        assert!(slot_name(&"x".repeat(63)).len() <= 63);
    }
}
