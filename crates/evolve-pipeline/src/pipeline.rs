//! The [`Pipeline`]: the catalog's verbs and the run loop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evolve_pgoutput::Lsn;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::bus::Bus;
use crate::config::Config;
use crate::error::{ObjectKind, PipelineError, Result};
use crate::sink::{self, SinkContext};
use crate::source::{self, SourceContext};
use crate::status::{ObjectStatus, StatusBoard};
use crate::store::{InterfaceInfo, SinkInfo, SourceInfo, Store, TableInfo, TableState};
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
}

/// A pipeline: its config, its catalog and state (the embedded store), and
/// [`run`](Pipeline::run), which moves data. Catalog changes made while it
/// runs restart its tasks, which resume from their stored positions.
pub struct Pipeline {
    config: Config,
    store: Mutex<Store>,
    changed: Arc<Notify>,
    status: StatusBoard,
    bus: Bus,
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

/// The slot name of source `name`: `evolve_` and the name when that is a
/// valid slot name, else a sanitized name with a hash.
fn slot_name(name: &str) -> String {
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
            changed: Arc::new(Notify::new()),
            status: StatusBoard::default(),
            bus: Bus::default(),
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

    // ------------------------------------------------------------ verbs

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
        if self.with_store(|s| s.source(name))?.is_some() {
            return Err(PipelineError::AlreadyExists {
                kind: ObjectKind::Source,
                name: name.to_string(),
            });
        }
        let conn = self.config.connection(connection)?;
        let client = upstream::connect(connection, conn).await?;
        let slot = slot_name(name);
        if upstream::slot_status(&client, &slot).await?.is_some() {
            return Err(PipelineError::SlotExists { slot });
        }
        let created = upstream::ensure_publication(&client, publication).await?;
        if let Err(e) = upstream::create_slot(&client, &slot).await {
            if created {
                let _ = client
                    .batch_execute(&format!(
                        "DROP PUBLICATION {}",
                        evolve_pg::quote_ident(publication)
                    ))
                    .await;
            }
            return Err(e);
        }
        let info = SourceInfo {
            name: name.to_string(),
            connection: connection.to_string(),
            publication: publication.to_string(),
            publication_created: created,
            slot,
            applied_lsn: Lsn(0),
        };
        self.with_store(|s| s.insert_source(&info))?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE TABLE ... FROM SOURCE ... (REFERENCE schema.table)`: pins the
    /// upstream table's columns, adds it to the source's publication, and
    /// leaves it pending: the running pipeline snapshots it, then streams.
    pub async fn create_table(&self, spec: &TableSpec) -> Result<TableInfo> {
        check_name(ObjectKind::Table, &spec.name)?;
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
        let conn = self.config.connection(&source.connection)?;
        let client = upstream::connect(&source.connection, conn).await?;
        let upstream =
            upstream::inspect_table(&client, &source.name, &spec.schema, &spec.table).await?;
        let reference = format!("{}.{}", spec.schema, spec.table);
        let mut columns = upstream.columns.clone();
        for (list, name) in spec
            .exclude
            .iter()
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
        upstream::add_to_publication(&client, &source.publication, &spec.schema, &spec.table)
            .await?;
        let mut info = TableInfo {
            id: 0,
            name: spec.name.clone(),
            source: source.name.clone(),
            upstream_schema: spec.schema.clone(),
            upstream_table: spec.table.clone(),
            upstream_oid: upstream.oid,
            columns,
            state: TableState::Pending,
            error: None,
            snapshot_lsn: None,
            rows_copied: 0,
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
            if s.interface(name)?.is_some() {
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
            s.insert_interface(name, table)?;
            s.interface(name)?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Interface,
                    name: name.to_string(),
                })
        })?;
        self.catalog_changed();
        Ok(info)
    }

    /// `CREATE SINK name FROM interface INTO POSTGRES CONNECTION connection
    /// (TABLE 'schema.table')`: creates the target table if missing and
    /// refuses one of another shape, or one holding rows no sink of this
    /// name wrote.
    pub async fn create_sink(
        &self,
        name: &str,
        interface: &str,
        connection: &str,
        schema: &str,
        table: &str,
    ) -> Result<SinkInfo> {
        check_name(ObjectKind::Sink, name)?;
        self.with_store(|s| {
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
        })?;
        let conn = self.config.connection(connection)?;
        let client = evolve_pg::connect(conn.url(), "evolve-pipeline")
            .await
            .map_err(|e| upstream::connect_error(connection, conn, &e.to_string()))?;
        sink::ensure_tables(&client, schema, table).await?;
        let targets = sink::Targets::new(schema, table);
        if sink::progress(&client, &targets, name).await?.is_none() {
            let rows = client
                .query_one(
                    &format!("SELECT EXISTS (SELECT 1 FROM {})", targets.table),
                    &[],
                )
                .await
                .map_err(|e| PipelineError::database("read the sink table", &e))?;
            if rows.get::<_, bool>(0) {
                return Err(PipelineError::SinkShape {
                    table: format!("{schema}.{table}"),
                    problem: format!(
                        "It has rows, and no progress record of sink \"{name}\" says what they are."
                    ),
                });
            }
        }
        let info = SinkInfo {
            name: name.to_string(),
            interface: interface.to_string(),
            connection: connection.to_string(),
            target_schema: schema.to_string(),
            target_table: table.to_string(),
        };
        self.with_store(|s| s.insert_sink(&info))?;
        self.catalog_changed();
        Ok(info)
    }

    fn refuse_dependents(&self, kind: ObjectKind, name: &str) -> Result<()> {
        let dependents = self.with_store(|s| s.dependents(kind, name))?;
        if dependents.is_empty() {
            return Ok(());
        }
        Err(PipelineError::HasDependents {
            kind,
            name: name.to_string(),
            dependents,
        })
    }

    /// `DROP SINK name`: forgets the sink and its progress record; its
    /// table is left as it is.
    pub async fn drop_sink(&self, name: &str) -> Result<()> {
        let sink = self
            .with_store(|s| s.sinks())?
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| PipelineError::UnknownObject {
                kind: ObjectKind::Sink,
                name: name.to_string(),
            })?;
        self.with_store(|s| s.delete_sink(name))?;
        self.catalog_changed();
        if let Ok(conn) = self.config.connection(&sink.connection)
            && let Ok(client) = evolve_pg::connect(conn.url(), "evolve-pipeline").await
        {
            let targets = sink::Targets::new(&sink.target_schema, &sink.target_table);
            let _ = client
                .execute(
                    &format!("DELETE FROM {} WHERE sink = $1", targets.progress),
                    &[&name],
                )
                .await;
        }
        Ok(())
    }

    /// `DROP MATERIALIZED VIEW name`.
    pub fn drop_interface(&self, name: &str) -> Result<()> {
        if self.with_store(|s| s.interface(name))?.is_none() {
            return Err(PipelineError::UnknownObject {
                kind: ObjectKind::Interface,
                name: name.to_string(),
            });
        }
        self.refuse_dependents(ObjectKind::Interface, name)?;
        self.with_store(|s| s.delete_interface(name))?;
        self.catalog_changed();
        Ok(())
    }

    /// `DROP TABLE name`: forgets the table and its documents, and removes
    /// its upstream table from the publication unless another table of the
    /// source still reads it.
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        let table =
            self.with_store(|s| s.table(name))?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Table,
                    name: name.to_string(),
                })?;
        self.refuse_dependents(ObjectKind::Table, name)?;
        self.with_store(|s| s.delete_table(name))?;
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

    /// `DROP SOURCE name`: drops its slot upstream (waiting up to 10 s for
    /// a running pipeline to release it), and its publication if the
    /// pipeline created it.
    pub async fn drop_source(&self, name: &str) -> Result<()> {
        let source =
            self.with_store(|s| s.source(name))?
                .ok_or_else(|| PipelineError::UnknownObject {
                    kind: ObjectKind::Source,
                    name: name.to_string(),
                })?;
        self.refuse_dependents(ObjectKind::Source, name)?;
        let conn = self.config.connection(&source.connection)?;
        let client = upstream::connect(&source.connection, conn).await?;
        self.with_store(|s| s.delete_source(name))?;
        self.catalog_changed();
        let mut attempt = 0;
        loop {
            match upstream::drop_slot(&client, &source.slot).await {
                Ok(()) => break,
                Err(e) if attempt >= 50 => return Err(e),
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
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

    /// What the running tasks last reported about each object.
    pub fn status(&self) -> Vec<ObjectStatus> {
        self.status.all()
    }

    // -------------------------------------------------------------- run

    /// Runs every source and sink until `shutdown` completes. Failures of
    /// one object are retried with backoff and reported in
    /// [`status`](Self::status); catalog changes restart the tasks.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        loop {
            let (stop_tx, stop_rx) = watch::channel(false);
            let mut tasks = JoinSet::new();
            self.spawn_tasks(&mut tasks, &stop_rx)?;
            let restart = tokio::select! {
                _ = &mut shutdown => false,
                _ = self.changed.notified() => true,
            };
            let _ = stop_tx.send(true);
            while tasks.join_next().await.is_some() {}
            if !restart {
                return Ok(());
            }
        }
    }

    fn spawn_tasks(&self, tasks: &mut JoinSet<()>, stop: &watch::Receiver<bool>) -> Result<()> {
        let (sources, tables, interfaces, sinks) =
            self.with_store(|s| Ok((s.sources()?, s.tables()?, s.interfaces()?, s.sinks()?)))?;
        let mut applied: HashMap<String, watch::Sender<Lsn>> = HashMap::new();
        for source in &sources {
            applied.insert(source.name.clone(), watch::channel(source.applied_lsn).0);
        }
        let mut source_sinks: HashMap<String, Vec<(i64, watch::Receiver<Lsn>)>> = HashMap::new();
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
            let (effective_tx, effective_rx) = watch::channel(Lsn(0));
            source_sinks
                .entry(table.source.clone())
                .or_default()
                .push((interface.id, effective_rx));
            tasks.spawn(sink::run(SinkContext {
                connection,
                state_dir: self.config.state_dir.clone(),
                interface_id: interface.id,
                table: table.name.clone(),
                source: table.source.clone(),
                applied: applied_tx.subscribe(),
                effective: effective_tx,
                stop: stop.clone(),
                status: self.status.clone(),
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
            tasks.spawn(source::run(SourceContext {
                sinks: source_sinks.remove(&source.name).unwrap_or_default(),
                connection,
                state_dir: self.config.state_dir.clone(),
                applied: applied_tx,
                stop: stop.clone(),
                status: self.status.clone(),
                bus: self.bus.clone(),
                source,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
