//! The replicas' catalog: `state_dir/replicate.db`, a SQLite file of
//! evolve-replicate's own beside the pipeline's `pipeline.db` (which the
//! pipeline alone owns). It holds each replica (its source, the
//! connection of the source's upstream, the node's connection, its
//! tables and the `COPY DATA` flag), the resolvers set on it, and its
//! transforms. Connections are stored by their name in `evolve.toml`,
//! never as URLs. WAL, `synchronous=FULL`, foreign keys on: dropping a
//! replica drops its resolvers and transforms in the same transaction.
//! Every write is one SQLite transaction.

use std::path::{Path, PathBuf};

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_pipeline::PipelineError;
use rusqlite::{Connection, OptionalExtension, params};

use crate::transform::Transform;

/// The file's name in the pipeline's `state_dir`.
pub const FILE: &str = "replicate.db";

/// The catalog's schema version (`PRAGMA user_version`).
const VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS replicas (
    name TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    upstream_connection TEXT NOT NULL,
    node_connection TEXT NOT NULL,
    copy_data INTEGER NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS replica_tables (
    replica TEXT NOT NULL REFERENCES replicas (name) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    schema_name TEXT NOT NULL,
    table_name TEXT NOT NULL,
    PRIMARY KEY (replica, schema_name, table_name)
);
CREATE TABLE IF NOT EXISTS resolvers (
    replica TEXT NOT NULL REFERENCES replicas (name) ON DELETE CASCADE,
    conflict_type TEXT NOT NULL,
    resolver TEXT NOT NULL,
    PRIMARY KEY (replica, conflict_type)
);
CREATE TABLE IF NOT EXISTS transforms (
    name TEXT PRIMARY KEY,
    replica TEXT NOT NULL REFERENCES replicas (name) ON DELETE CASCADE,
    schema_name TEXT NOT NULL,
    table_name TEXT NOT NULL,
    filter TEXT,
    UNIQUE (replica, schema_name, table_name)
);
CREATE TABLE IF NOT EXISTS transform_sets (
    transform TEXT NOT NULL REFERENCES transforms (name) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    column_name TEXT NOT NULL,
    expression TEXT NOT NULL,
    PRIMARY KEY (transform, ord)
);
";

/// A replica as the catalog has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub name: String,
    /// The pipeline source it was created from.
    pub source: String,
    /// The connection of the source's upstream when the replica was
    /// created (the replica keeps reading it if the source is dropped).
    pub upstream_connection: String,
    /// The node's connection.
    pub node_connection: String,
    /// Its upstream tables, as (schema, name), in order.
    pub tables: Vec<(String, String)>,
    pub copy_data: bool,
    /// Its task runs (`ALTER REPLICA ... ENABLE`, the default).
    pub enabled: bool,
    /// The resolvers set on it (the defaults for the others).
    pub resolvers: Resolvers,
}

impl ReplicaInfo {
    /// Its tables as `schema.table`, comma-separated.
    pub fn table_list(&self) -> String {
        self.tables
            .iter()
            .map(|(s, t)| format!("{s}.{t}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A transform and its replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformInfo {
    pub replica: String,
    pub transform: Transform,
}

/// The open catalog.
pub struct Catalog {
    conn: Connection,
}

fn store(context: &str, e: rusqlite::Error) -> PipelineError {
    PipelineError::Store {
        context: format!("replicas' catalog: {context}"),
        message: e.to_string(),
    }
}

impl Catalog {
    /// The catalog's path in `state_dir`.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(FILE)
    }

    /// Opens (creating if missing) the catalog in `state_dir`.
    pub fn open(state_dir: &Path) -> Result<Catalog, PipelineError> {
        std::fs::create_dir_all(state_dir).map_err(|e| PipelineError::Store {
            context: format!("create the state directory {}", state_dir.display()),
            message: format!(
                "{e}; set state_dir in evolve.toml to a directory this user can create and write"
            ),
        })?;
        let path = Self::path(state_dir);
        let context = format!("open {}", path.display());
        let conn = Connection::open(&path).map_err(|e| store(&context, e))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| store(&context, e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| store(&context, e))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| store(&context, e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| store(&context, e))?;
        Self::init(conn)
    }

    /// An in-memory catalog, for tests.
    pub fn in_memory() -> Result<Catalog, PipelineError> {
        let conn = Connection::open_in_memory().map_err(|e| store("open", e))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| store("open", e))?;
        Self::init(conn)
    }

    fn init(conn: Connection) -> Result<Catalog, PipelineError> {
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| store("read the schema version", e))?;
        if version > VERSION {
            return Err(PipelineError::Store {
                context: "replicas' catalog".into(),
                message: format!(
                    "its schema version is {version}, newer than this evolve's ({VERSION}); run a newer evolve"
                ),
            });
        }
        conn.execute_batch(SCHEMA)
            .map_err(|e| store("create the tables", e))?;
        if version == 1 {
            // Version 2 added `enabled`; replicas of version 1 are.
            conn.execute_batch(
                "ALTER TABLE replicas ADD COLUMN enabled INTEGER NOT NULL DEFAULT 1",
            )
            .map_err(|e| store("add column enabled", e))?;
        }
        conn.pragma_update(None, "user_version", VERSION)
            .map_err(|e| store("set the schema version", e))?;
        Ok(Catalog { conn })
    }

    /// Every replica, by name.
    pub fn replicas(&self) -> Result<Vec<ReplicaInfo>, PipelineError> {
        let names: Vec<String> = {
            let mut q = self
                .conn
                .prepare("SELECT name FROM replicas ORDER BY name")
                .map_err(|e| store("read replicas", e))?;
            q.query_map([], |r| r.get(0))
                .and_then(|rows| rows.collect::<Result<_, _>>())
                .map_err(|e| store("read replicas", e))?
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(info) = self.replica(&name)? {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The replica called `name`.
    pub fn replica(&self, name: &str) -> Result<Option<ReplicaInfo>, PipelineError> {
        let ctx = "read a replica";
        let row = self
            .conn
            .query_row(
                "SELECT source, upstream_connection, node_connection, copy_data, enabled
                 FROM replicas WHERE name = ?1",
                [name],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, bool>(3)?,
                        r.get::<_, bool>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| store(ctx, e))?;
        let Some((source, upstream_connection, node_connection, copy_data, enabled)) = row else {
            return Ok(None);
        };
        let tables = {
            let mut q = self
                .conn
                .prepare(
                    "SELECT schema_name, table_name FROM replica_tables
                     WHERE replica = ?1 ORDER BY ord",
                )
                .map_err(|e| store(ctx, e))?;
            q.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| store(ctx, e))?
        };
        let set: Vec<(String, String)> = {
            let mut q = self
                .conn
                .prepare("SELECT conflict_type, resolver FROM resolvers WHERE replica = ?1")
                .map_err(|e| store(ctx, e))?;
            q.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| store(ctx, e))?
        };
        let mut resolvers = Resolvers::default();
        for (conflict, resolver) in set {
            let parsed = ConflictType::parse(&conflict).and_then(|c| {
                let r = Resolver::parse(&resolver)?;
                resolvers.set(c, r)
            });
            if let Err(e) = parsed {
                return Err(PipelineError::Store {
                    context: format!("replicas' catalog: the resolvers of replica {name}"),
                    message: e.to_string(),
                });
            }
        }
        Ok(Some(ReplicaInfo {
            name: name.to_string(),
            source,
            upstream_connection,
            node_connection,
            tables,
            copy_data,
            enabled,
            resolvers,
        }))
    }

    /// Records a new replica with its resolvers.
    pub fn insert_replica(&mut self, info: &ReplicaInfo) -> Result<(), PipelineError> {
        let ctx = "record a replica";
        let tx = self.conn.transaction().map_err(|e| store(ctx, e))?;
        tx.execute(
            "INSERT INTO replicas (name, source, upstream_connection, node_connection, copy_data, enabled)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                info.name,
                info.source,
                info.upstream_connection,
                info.node_connection,
                info.copy_data,
                info.enabled
            ],
        )
        .map_err(|e| store(ctx, e))?;
        for (i, (schema, table)) in info.tables.iter().enumerate() {
            tx.execute(
                "INSERT INTO replica_tables (replica, ord, schema_name, table_name)
                 VALUES (?1, ?2, ?3, ?4)",
                params![info.name, i as i64, schema, table],
            )
            .map_err(|e| store(ctx, e))?;
        }
        for (conflict, resolver) in info.resolvers.explicit() {
            tx.execute(
                "INSERT INTO resolvers (replica, conflict_type, resolver) VALUES (?1, ?2, ?3)",
                params![info.name, conflict.name(), resolver.name()],
            )
            .map_err(|e| store(ctx, e))?;
        }
        tx.commit().map_err(|e| store(ctx, e))
    }

    /// Drops replica `name` with its resolvers and transforms; the names
    /// of the transforms dropped with it, or `None` when there is no such
    /// replica.
    pub fn delete_replica(&mut self, name: &str) -> Result<Option<Vec<String>>, PipelineError> {
        let ctx = "drop a replica";
        let tx = self.conn.transaction().map_err(|e| store(ctx, e))?;
        let transforms: Vec<String> = {
            let mut q = tx
                .prepare("SELECT name FROM transforms WHERE replica = ?1 ORDER BY name")
                .map_err(|e| store(ctx, e))?;
            q.query_map([name], |r| r.get(0))
                .and_then(|rows| rows.collect::<Result<_, _>>())
                .map_err(|e| store(ctx, e))?
        };
        let deleted = tx
            .execute("DELETE FROM replicas WHERE name = ?1", [name])
            .map_err(|e| store(ctx, e))?;
        tx.commit().map_err(|e| store(ctx, e))?;
        Ok((deleted > 0).then_some(transforms))
    }

    /// Enables or disables replica `name`; false when there is no such
    /// replica.
    pub fn set_enabled(&mut self, name: &str, enabled: bool) -> Result<bool, PipelineError> {
        let changed = self
            .conn
            .execute(
                "UPDATE replicas SET enabled = ?2 WHERE name = ?1",
                params![name, enabled],
            )
            .map_err(|e| store("enable a replica", e))?;
        Ok(changed > 0)
    }

    /// Sets (`Some`) or resets (`None`) replica `name`'s resolver for
    /// `conflict`; false when there is no such replica.
    pub fn set_resolver(
        &mut self,
        name: &str,
        conflict: ConflictType,
        resolver: Option<Resolver>,
    ) -> Result<bool, PipelineError> {
        let ctx = "set a resolver";
        let tx = self.conn.transaction().map_err(|e| store(ctx, e))?;
        let exists = tx
            .query_row("SELECT 1 FROM replicas WHERE name = ?1", [name], |_| Ok(()))
            .optional()
            .map_err(|e| store(ctx, e))?
            .is_some();
        if !exists {
            return Ok(false);
        }
        match resolver {
            Some(r) => tx.execute(
                "INSERT INTO resolvers (replica, conflict_type, resolver) VALUES (?1, ?2, ?3)
                 ON CONFLICT (replica, conflict_type) DO UPDATE SET resolver = excluded.resolver",
                params![name, conflict.name(), r.name()],
            ),
            None => tx.execute(
                "DELETE FROM resolvers WHERE replica = ?1 AND conflict_type = ?2",
                params![name, conflict.name()],
            ),
        }
        .map_err(|e| store(ctx, e))?;
        tx.commit().map_err(|e| store(ctx, e))?;
        Ok(true)
    }

    /// Every transform, by name.
    pub fn transforms(&self) -> Result<Vec<TransformInfo>, PipelineError> {
        let ctx = "read transforms";
        let heads: Vec<(String, String, String, String, Option<String>)> = {
            let mut q = self
                .conn
                .prepare(
                    "SELECT name, replica, schema_name, table_name, filter FROM transforms
                     ORDER BY name",
                )
                .map_err(|e| store(ctx, e))?;
            q.query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|rows| rows.collect::<Result<_, _>>())
            .map_err(|e| store(ctx, e))?
        };
        let mut q = self
            .conn
            .prepare(
                "SELECT column_name, expression FROM transform_sets
                 WHERE transform = ?1 ORDER BY ord",
            )
            .map_err(|e| store(ctx, e))?;
        let mut out = Vec::with_capacity(heads.len());
        for (name, replica, schema, table, filter) in heads {
            let sets = q
                .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| store(ctx, e))?;
            out.push(TransformInfo {
                replica,
                transform: Transform {
                    name,
                    schema,
                    table,
                    sets,
                    filter,
                },
            });
        }
        Ok(out)
    }

    /// Records transform `t` of replica `replica`.
    pub fn insert_transform(&mut self, replica: &str, t: &Transform) -> Result<(), PipelineError> {
        let ctx = "record a transform";
        let tx = self.conn.transaction().map_err(|e| store(ctx, e))?;
        tx.execute(
            "INSERT INTO transforms (name, replica, schema_name, table_name, filter)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![t.name, replica, t.schema, t.table, t.filter],
        )
        .map_err(|e| store(ctx, e))?;
        for (i, (column, expression)) in t.sets.iter().enumerate() {
            tx.execute(
                "INSERT INTO transform_sets (transform, ord, column_name, expression)
                 VALUES (?1, ?2, ?3, ?4)",
                params![t.name, i as i64, column, expression],
            )
            .map_err(|e| store(ctx, e))?;
        }
        tx.commit().map_err(|e| store(ctx, e))
    }

    /// Drops transform `name`; false when there is none.
    pub fn delete_transform(&mut self, name: &str) -> Result<bool, PipelineError> {
        let deleted = self
            .conn
            .execute("DELETE FROM transforms WHERE name = ?1", [name])
            .map_err(|e| store("drop a transform", e))?;
        Ok(deleted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> ReplicaInfo {
        ReplicaInfo {
            name: name.into(),
            source: "src".into(),
            upstream_connection: "pg_conn".into(),
            node_connection: "node_conn".into(),
            tables: vec![
                ("public".into(), "orders".into()),
                ("Shop".into(), "Customers".into()),
            ],
            copy_data: false,
            enabled: true,
            resolvers: Resolvers::default(),
        }
    }

    fn split() -> Transform {
        Transform {
            name: "split_name".into(),
            schema: "Shop".into(),
            table: "Customers".into(),
            sets: vec![
                ("first_name".into(), "split_part(NEW.name, ' ', 1)".into()),
                ("last_name".into(), "split_part(NEW.name, ' ', 2)".into()),
            ],
            filter: Some("NEW.status <> 'test'".into()),
        }
    }

    #[test]
    fn replicas_resolvers_and_transforms_round_trip() {
        let mut c = Catalog::in_memory().unwrap();
        let mut a = info("node_a");
        a.resolvers
            .set(ConflictType::TargetTableMissing, Resolver::Skip)
            .unwrap();
        c.insert_replica(&a).unwrap();
        c.insert_replica(&info("node_b")).unwrap();
        assert_eq!(c.replica("node_a").unwrap(), Some(a.clone()));
        assert_eq!(c.replicas().unwrap().len(), 2);
        assert_eq!(a.table_list(), "public.orders, Shop.Customers");
        // A second replica of the same name is refused by the key.
        assert!(c.insert_replica(&info("node_b")).is_err());

        assert!(
            c.set_resolver(
                "node_b",
                ConflictType::TargetColumnMissing,
                Some(Resolver::Ignore)
            )
            .unwrap()
        );
        assert!(
            c.set_resolver(
                "node_b",
                ConflictType::TargetColumnMissing,
                Some(Resolver::Error)
            )
            .unwrap()
        );
        let b = c.replica("node_b").unwrap().unwrap();
        assert_eq!(
            b.resolvers.get(ConflictType::TargetColumnMissing),
            Resolver::Error
        );
        assert!(
            c.set_resolver("node_b", ConflictType::TargetColumnMissing, None)
                .unwrap()
        );
        assert_eq!(
            c.replica("node_b").unwrap().unwrap().resolvers,
            Resolvers::default()
        );
        assert!(
            !c.set_resolver("nope", ConflictType::InsertExists, None)
                .unwrap()
        );

        c.insert_transform("node_b", &split()).unwrap();
        assert_eq!(
            c.transforms().unwrap(),
            vec![TransformInfo {
                replica: "node_b".into(),
                transform: split()
            }]
        );
        // One per (replica, table), names unique.
        assert!(c.insert_transform("node_b", &split()).is_err());
        let mut other = split();
        other.name = "other".into();
        assert!(c.insert_transform("node_b", &other).is_err());
        assert_eq!(c.transforms().unwrap().len(), 1);

        // Dropping a replica drops its resolvers and transforms.
        assert_eq!(
            c.delete_replica("node_b").unwrap(),
            Some(vec!["split_name".to_string()])
        );
        assert!(c.transforms().unwrap().is_empty());
        assert_eq!(c.delete_replica("node_b").unwrap(), None);
        c.insert_transform("node_a", &split()).unwrap();
        assert!(c.delete_transform("split_name").unwrap());
        assert!(!c.delete_transform("split_name").unwrap());
    }

    #[test]
    fn the_file_survives_reopening() {
        let dir =
            std::env::temp_dir().join(format!("evolve-replicate-catalog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let mut c = Catalog::open(&dir).unwrap();
            c.insert_replica(&info("node_a")).unwrap();
            c.insert_transform("node_a", &split()).unwrap();
        }
        let c = Catalog::open(&dir).unwrap();
        assert_eq!(c.replica("node_a").unwrap(), Some(info("node_a")));
        assert_eq!(c.transforms().unwrap().len(), 1);
        assert!(Catalog::path(&dir).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_version_1_file_gains_enabled_replicas() {
        let dir = std::env::temp_dir().join(format!(
            "evolve-replicate-catalog-v1-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let conn = Connection::open(Catalog::path(&dir)).unwrap();
            conn.execute_batch(&SCHEMA.replace("    enabled INTEGER NOT NULL DEFAULT 1,\n", ""))
                .unwrap();
            conn.execute_batch(
                "PRAGMA user_version = 1;
                 INSERT INTO replicas (name, source, upstream_connection, node_connection, copy_data)
                 VALUES ('old', 'src', 'pg_conn', 'node_conn', 0);",
            )
            .unwrap();
        }
        let mut c = Catalog::open(&dir).unwrap();
        let old = c.replica("old").unwrap().unwrap();
        assert!(old.enabled);
        assert!(c.set_enabled("old", false).unwrap());
        assert!(!c.replica("old").unwrap().unwrap().enabled);
        assert!(!c.set_enabled("nope", true).unwrap());
        drop(c);
        // Opened again at version 2: nothing is migrated twice.
        let c = Catalog::open(&dir).unwrap();
        assert!(!c.replica("old").unwrap().unwrap().enabled);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
