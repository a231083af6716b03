//! Drift: how each table's pinned columns differ from its upstream table
//! now (`evolve drift`, `GET /drift`).
//!
//! # Sources of truth
//!
//! A table pins every upstream column when it is created (name, attnum,
//! type OID, typmod). Two things compare the pin with upstream:
//!
//! - the source's task, on every Relation message: a pinned document
//!   column that is gone or has another type OID stalls the table (see
//!   `crate::apply`); drift reports such a table as `stalled`, with the
//!   error. Relation messages come only before the next row change of
//!   their table, and say nothing of attribute numbers;
//! - the upstream catalog, polled by [`crate::poll::drift`] for each
//!   request, and by [`crate::poll::poll_into`], which keeps the last
//!   result per table in a [`DriftBoard`] for
//!   status output (on `REFRESH REFERENCES`, `GET /drift`, and while the
//!   pipeline runs every [`POLL_INTERVAL`], from [`crate::absorb`]):
//!   one ordinary session per source reads each table's columns
//!   (`attname`, `attnum`, `atttypid`, `atttypmod`, `format_type`) by the
//!   pinned OID, and looks the pinned `schema.table` up by name.
//!   Comparing attribute numbers shows what no Relation message can: a
//!   column dropped and re-added with the same name and type (its old
//!   values are gone upstream, and the stream would carry on as if
//!   nothing happened).
//!
//! [`compare`] is the comparison itself, a pure function.
//!
//! # Signals
//!
//! A table is reported when it differs; an empty result means every table
//! matches its upstream table. Each row has one signal, the first that
//! applies:
//!
//! 1. `unknown`: the source's upstream could not be read (the connection
//!    error is in `error`; connections are named, never shown as URLs);
//! 2. `stalled`: the table is stalled (its error is in `error`); the
//!    column lists are filled in as for the others;
//! 3. `table_dropped`: no upstream table has the pinned OID any more. The
//!    `detail` says whether a table of the pinned name exists (dropped and
//!    re-created: the new one has another OID, and the stream, which
//!    follows OIDs, does not bring its changes). The column lists are
//!    empty;
//! 4. `table_renamed`: the pinned OID is there under another
//!    `schema.table` (named in `detail`). The stream follows the OID and
//!    goes on; the columns are compared as usual;
//! 5. `type_drift`: an ingested column's type OID or typmod changed
//!    (`integer` to `bigint`, `varchar(10)` to `varchar(20)`);
//! 6. `column_drift`: columns were added or dropped upstream.
//!
//! The lists: `added_upstream`, upstream columns whose names are not
//! pinned at all (a column pinned as excluded is not "added");
//! `dropped_upstream`, pinned columns that are not excluded and are
//! missing upstream, or present under the same name with another attnum
//! (dropped and re-added, which `detail` says: `column "x" was dropped
//! and re-added (attnum 3 → 7)`); `type_changed`, pinned columns that are
//! not excluded whose type differs, as `{"column", "from", "to"}` with
//! `format_type`'s names (`priority integer → bigint` in text). Columns
//! excluded on purpose are never reported as dropped or retyped. A pinned
//! column missing by name whose attnum now carries another name is
//! reported as dropped, and `detail` says it was renamed.
//!
//! # JSON
//!
//! `GET /drift` and `evolve drift --format json` answer a [`DriftReport`]:
//!
//! ```json
//! {"tables": [
//!   {"table": "orders_v1", "source": "src", "upstream": "public.orders",
//!    "signal": "type_drift", "status": "running",
//!    "added_upstream": ["region"], "dropped_upstream": [],
//!    "type_changed": [{"column": "priority", "from": "integer", "to": "bigint"}],
//!    "error": null, "detail": null}
//! ]}
//! ```
//!
//! Rows are sorted by table name; `status` is the table's state
//! (`pending`, `snapshotting`, `running`, `stalled`, ...); `error` and
//! `detail` are `null` when there is nothing to say. New signals and
//! fields may be added.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::store::{TableInfo, TableState};

/// How often the running pipeline polls the upstream catalogs when no
/// interface absorbs by itself ([`crate::absorb::INTERVAL`] otherwise).
pub const POLL_INTERVAL: Duration = Duration::from_secs(60);

/// How long one source's poll may take before its tables are reported as
/// `unknown`.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(10);

// ----------------------------------------------------------------- model

/// Why a table is reported (see the module docs for the order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Columns were added or dropped upstream.
    ColumnDrift,
    /// An ingested column's type or typmod changed.
    TypeDrift,
    /// The table is stalled.
    Stalled,
    /// The upstream table has another name (same OID).
    TableRenamed,
    /// No upstream table has the pinned OID.
    TableDropped,
    /// The upstream catalog could not be read.
    Unknown,
}

impl Signal {
    /// `column_drift`, `type_drift`, `stalled`, `table_renamed`,
    /// `table_dropped`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::ColumnDrift => "column_drift",
            Signal::TypeDrift => "type_drift",
            Signal::Stalled => "stalled",
            Signal::TableRenamed => "table_renamed",
            Signal::TableDropped => "table_dropped",
            Signal::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An ingested column whose type changed upstream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeChange {
    /// The column.
    pub column: String,
    /// The pinned type, `format_type`'s name (with the OID or typmod when
    /// the names alone would be equal).
    pub from: String,
    /// The type upstream now.
    pub to: String,
}

impl fmt::Display for TypeChange {
    /// `priority integer → bigint`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} → {}", self.column, self.from, self.to)
    }
}

/// How a table differs from its upstream table: what [`compare`] finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    /// The signal (the first that applies).
    pub signal: Signal,
    /// Upstream columns not pinned at all, in upstream attnum order.
    pub added_upstream: Vec<String>,
    /// Pinned, not excluded, columns missing upstream or dropped and
    /// re-added, in pinned order.
    pub dropped_upstream: Vec<String>,
    /// Pinned, not excluded, columns whose type OID or typmod differ, in
    /// pinned order.
    pub type_changed: Vec<TypeChange>,
    /// Re-added or renamed columns, a renamed or dropped upstream table;
    /// sentences joined by `; `.
    pub detail: Option<String>,
    /// The upstream table's name now, when it was renamed.
    pub renamed_to: Option<UpstreamName>,
    /// `table_dropped` while a table of the pinned name exists upstream
    /// (dropped and re-created, as after a cut-over that drops the table
    /// and renames its copy into its place): that table's OID.
    pub recreated_oid: Option<u32>,
}

/// An upstream table's schema and name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamName {
    pub schema: String,
    pub table: String,
}

/// One upstream column as the catalog has it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamColumn {
    /// `attname`.
    pub name: String,
    /// `attnum`.
    pub attnum: i16,
    /// `atttypid`.
    pub type_oid: u32,
    /// `atttypmod`.
    pub typmod: i32,
    /// `format_type(atttypid, atttypmod)`.
    pub type_name: String,
}

/// What the upstream catalog says of a table's pinned OID and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// A table has the pinned OID (under the pinned name or another).
    Found {
        /// Its schema now.
        schema: String,
        /// Its name now.
        name: String,
        /// Its columns (not dropped, `attnum > 0`), in attnum order.
        columns: Vec<UpstreamColumn>,
    },
    /// No table has the pinned OID.
    Missing {
        /// The OID of a table of the pinned `schema.table`, if one exists
        /// (dropped and re-created).
        recreated_oid: Option<u32>,
    },
}

/// One row of `evolve drift` and `GET /drift`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftRow {
    /// The table, e.g. `orders_v1`.
    pub table: String,
    /// Its source.
    pub source: String,
    /// The pinned upstream `schema.table`.
    pub upstream: String,
    /// Why it is reported.
    pub signal: Signal,
    /// The table's state: `pending`, `snapshotting`, `running`, `stalled`,
    /// ...
    pub status: String,
    /// See [`Drift::added_upstream`].
    pub added_upstream: Vec<String>,
    /// See [`Drift::dropped_upstream`].
    pub dropped_upstream: Vec<String>,
    /// See [`Drift::type_changed`].
    pub type_changed: Vec<TypeChange>,
    /// A stalled table's error, or why the upstream could not be read.
    pub error: Option<String>,
    /// See [`Drift::detail`].
    pub detail: Option<String>,
    /// See [`Drift::renamed_to`]; left out when not renamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_to: Option<UpstreamName>,
    /// See [`Drift::recreated_oid`]; left out when not re-created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreated_oid: Option<u32>,
}

/// The answer to `GET /drift`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftReport {
    /// One per table that differs from upstream, by table name.
    pub tables: Vec<DriftRow>,
    /// The consumers reading a column a row reports dropped or retyped
    /// upstream ([`crate::contracts`]); left out when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<DriftReader>,
}

/// A consumer of an interface over a drifted table that reads one of the
/// columns dropped or retyped upstream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftReader {
    /// The table version of the drift row.
    pub table: String,
    /// The upstream column.
    pub column: String,
    /// The interface the consumer reads.
    pub interface: String,
    /// `view public.order_lines`, `subscriber billing`.
    pub consumer: String,
    /// The field path it reads, dotted.
    pub field: String,
    /// The cast it applies.
    #[serde(default)]
    pub cast: Option<String>,
}

fn state_name(state: TableState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl DriftRow {
    /// The row of `table` with what [`compare`] found.
    pub fn new(table: &TableInfo, drift: Drift) -> DriftRow {
        DriftRow {
            table: table.name.clone(),
            source: table.source.clone(),
            upstream: table.reference(),
            signal: drift.signal,
            status: state_name(table.state),
            added_upstream: drift.added_upstream,
            dropped_upstream: drift.dropped_upstream,
            type_changed: drift.type_changed,
            error: if table.state == TableState::Stalled {
                table.error.clone()
            } else {
                None
            },
            detail: drift.detail,
            renamed_to: drift.renamed_to,
            recreated_oid: drift.recreated_oid,
        }
    }

    /// The row of `table` whose upstream could not be read, and why.
    pub fn unknown(table: &TableInfo, error: String) -> DriftRow {
        DriftRow {
            table: table.name.clone(),
            source: table.source.clone(),
            upstream: table.reference(),
            signal: Signal::Unknown,
            status: state_name(table.state),
            added_upstream: Vec::new(),
            dropped_upstream: Vec::new(),
            type_changed: Vec::new(),
            error: Some(error),
            detail: None,
            renamed_to: None,
            recreated_oid: None,
        }
    }
}

// ------------------------------------------------------------ comparison

/// Whether `row` reports an upstream table dropped and re-created under
/// its pinned name: `table_dropped` while a table of that name (with
/// another OID) exists, as after a cut-over that drops the table and
/// renames its copy into its place.
pub fn recreated(row: &DriftRow) -> bool {
    row.signal == Signal::TableDropped && row.recreated_oid.is_some()
}

/// Compares `table`'s pinned columns (and state) with `upstream`; `None`
/// when they match and the table is not stalled. See the module docs for
/// the rules.
pub fn compare(table: &TableInfo, upstream: &Upstream) -> Option<Drift> {
    let mut details = Vec::new();
    let mut added = Vec::new();
    let mut dropped = Vec::new();
    let mut type_changed = Vec::new();
    let mut table_signal = None;
    let mut renamed_to = None;
    let mut recreated_oid = None;
    let reference = table.reference();
    match upstream {
        Upstream::Missing {
            recreated_oid: recreated,
        } => {
            table_signal = Some(Signal::TableDropped);
            recreated_oid = *recreated;
            details.push(match recreated {
                Some(oid) => format!(
                    "upstream table \"{reference}\" was dropped and re-created (OID {} → {oid}); its changes no longer reach this table",
                    table.upstream_oid
                ),
                None => format!(
                    "upstream table \"{reference}\" (OID {}) was dropped",
                    table.upstream_oid
                ),
            });
        }
        Upstream::Found {
            schema,
            name,
            columns,
        } => {
            if *schema != table.upstream_schema || *name != table.upstream_table {
                table_signal = Some(Signal::TableRenamed);
                renamed_to = Some(UpstreamName {
                    schema: schema.clone(),
                    table: name.clone(),
                });
                details.push(format!(
                    "upstream table \"{reference}\" was renamed to \"{schema}.{name}\""
                ));
            }
            for c in columns {
                if !table.columns.iter().any(|p| p.name == c.name) {
                    added.push(c.name.clone());
                }
            }
            for pinned in &table.columns {
                let by_name = columns.iter().find(|c| c.name == pinned.name);
                let Some(now) = by_name else {
                    // Renamed: its attnum lives on under a name not pinned.
                    if let Some(renamed) = columns.iter().find(|c| {
                        c.attnum == pinned.attnum && !table.columns.iter().any(|p| p.name == c.name)
                    }) {
                        details.push(format!(
                            "column \"{}\" was renamed to \"{}\"",
                            pinned.name, renamed.name
                        ));
                    }
                    if !pinned.excluded {
                        dropped.push(pinned.name.clone());
                    }
                    continue;
                };
                if pinned.excluded {
                    continue;
                }
                if now.attnum != pinned.attnum {
                    dropped.push(pinned.name.clone());
                    details.push(if columns.iter().any(|c| c.attnum == pinned.attnum) {
                        format!(
                            "column \"{}\" moved from attnum {} to {} (columns were renamed)",
                            pinned.name, pinned.attnum, now.attnum
                        )
                    } else {
                        format!(
                            "column \"{}\" was dropped and re-added (attnum {} → {})",
                            pinned.name, pinned.attnum, now.attnum
                        )
                    });
                }
                if now.type_oid != pinned.type_oid || now.typmod != pinned.typmod {
                    let (mut from, mut to) = (pinned.type_name.clone(), now.type_name.clone());
                    if from == to {
                        // Same name, another type (re-created) or typmod.
                        if now.type_oid != pinned.type_oid {
                            from = format!("{from} (OID {})", pinned.type_oid);
                            to = format!("{to} (OID {})", now.type_oid);
                        } else {
                            from = format!("{from} (typmod {})", pinned.typmod);
                            to = format!("{to} (typmod {})", now.typmod);
                        }
                    }
                    type_changed.push(TypeChange {
                        column: pinned.name.clone(),
                        from,
                        to,
                    });
                }
            }
        }
    }
    let signal = if table.state == TableState::Stalled {
        Signal::Stalled
    } else if let Some(signal) = table_signal {
        signal
    } else if !type_changed.is_empty() {
        Signal::TypeDrift
    } else if !added.is_empty() || !dropped.is_empty() {
        Signal::ColumnDrift
    } else {
        return None;
    };
    Some(Drift {
        signal,
        added_upstream: added,
        dropped_upstream: dropped,
        type_changed,
        detail: (!details.is_empty()).then(|| details.join("; ")),
        renamed_to,
        recreated_oid,
    })
}

// ----------------------------------------------------------------- board

/// The last poll of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastPoll {
    /// When it was polled.
    pub at: SystemTime,
    /// How it differed, `None` when it matched.
    pub drift: Option<DriftRow>,
}

/// The last poll result of each table, kept in memory for status output
/// (like [`crate::status::StatusBoard`]). Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct DriftBoard {
    inner: Arc<Mutex<BTreeMap<String, LastPoll>>>,
}

impl DriftBoard {
    /// Records a poll at `at`: the row of every polled table (`None` where
    /// it matched), forgetting the tables no longer in `catalog`.
    pub fn record(
        &self,
        catalog: &[String],
        polled: &[(String, Option<DriftRow>)],
        at: SystemTime,
    ) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|table, _| catalog.contains(table));
        for (table, drift) in polled {
            map.insert(
                table.clone(),
                LastPoll {
                    at,
                    drift: drift.clone(),
                },
            );
        }
    }

    /// The last poll of `table`, if it was polled.
    pub fn get(&self, table: &str) -> Option<LastPoll> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(table).cloned()
    }

    /// The rows of the last polls that found drift, by table name.
    pub fn all(&self) -> Vec<DriftRow> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.values().filter_map(|p| p.drift.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ColumnInfo;
    use evolve_core::document::TypeKind;

    fn pinned(name: &str, attnum: i16, type_oid: u32, typmod: i32, type_name: &str) -> ColumnInfo {
        ColumnInfo {
            name: name.into(),
            attnum,
            type_oid,
            typmod,
            type_name: type_name.into(),
            not_null: false,
            kind: TypeKind::Text,
            excluded: false,
            as_text: false,
            key: attnum == 1,
            labels: None,
        }
    }

    fn up(name: &str, attnum: i16, type_oid: u32, typmod: i32, type_name: &str) -> UpstreamColumn {
        UpstreamColumn {
            name: name.into(),
            attnum,
            type_oid,
            typmod,
            type_name: type_name.into(),
        }
    }

    /// `orders_v1` over `public.orders` (OID 5000): id integer, priority
    /// integer, code varchar(10), note text (excluded).
    fn table() -> TableInfo {
        let mut note = pinned("note", 4, 25, -1, "text");
        note.excluded = true;
        TableInfo {
            id: 1,
            name: "orders_v1".into(),
            source: "src".into(),
            upstream_schema: "public".into(),
            upstream_table: "orders".into(),
            upstream_oid: 5000,
            columns: vec![
                pinned("id", 1, 23, -1, "integer"),
                pinned("priority", 2, 23, -1, "integer"),
                pinned("code", 3, 1043, 14, "character varying(10)"),
                note,
            ],
            state: TableState::Running,
            error: None,
            snapshot_lsn: None,
            rows_copied: 0,
            kafka: None,
        }
    }

    /// The upstream columns as pinned.
    fn same() -> Vec<UpstreamColumn> {
        vec![
            up("id", 1, 23, -1, "integer"),
            up("priority", 2, 23, -1, "integer"),
            up("code", 3, 1043, 14, "character varying(10)"),
            up("note", 4, 25, -1, "text"),
        ]
    }

    fn found(columns: Vec<UpstreamColumn>) -> Upstream {
        Upstream::Found {
            schema: "public".into(),
            name: "orders".into(),
            columns,
        }
    }

    fn drift(signal: Signal) -> Drift {
        Drift {
            signal,
            added_upstream: Vec::new(),
            dropped_upstream: Vec::new(),
            type_changed: Vec::new(),
            detail: None,
            renamed_to: None,
            recreated_oid: None,
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn change(column: &str, from: &str, to: &str) -> TypeChange {
        TypeChange {
            column: column.into(),
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn matching_columns_are_no_drift() {
        assert_eq!(compare(&table(), &found(same())), None);
    }

    #[test]
    fn a_column_added_upstream() {
        let mut columns = same();
        columns.push(up("region", 5, 25, -1, "text"));
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                added_upstream: strings(&["region"]),
                ..drift(Signal::ColumnDrift)
            })
        );
    }

    #[test]
    fn a_column_dropped_upstream() {
        let mut columns = same();
        columns.remove(1);
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                dropped_upstream: strings(&["priority"]),
                ..drift(Signal::ColumnDrift)
            })
        );
    }

    #[test]
    fn an_excluded_column_dropped_is_not_reported() {
        let mut columns = same();
        columns.pop();
        assert_eq!(compare(&table(), &found(columns)), None);
    }

    #[test]
    fn an_excluded_column_retyped_or_readded_is_not_reported() {
        let mut columns = same();
        columns.pop();
        columns.push(up("note", 9, 3802, -1, "jsonb"));
        assert_eq!(compare(&table(), &found(columns)), None);
    }

    #[test]
    fn a_type_change_integer_to_bigint() {
        let mut columns = same();
        columns[1] = up("priority", 2, 20, -1, "bigint");
        let d = compare(&table(), &found(columns)).unwrap();
        assert_eq!(
            d,
            Drift {
                type_changed: vec![change("priority", "integer", "bigint")],
                ..drift(Signal::TypeDrift)
            }
        );
        assert_eq!(d.type_changed[0].to_string(), "priority integer → bigint");
    }

    #[test]
    fn a_typmod_change_shows_in_the_type_names() {
        let mut columns = same();
        columns[2] = up("code", 3, 1043, 24, "character varying(20)");
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                type_changed: vec![change(
                    "code",
                    "character varying(10)",
                    "character varying(20)"
                )],
                ..drift(Signal::TypeDrift)
            })
        );
    }

    #[test]
    fn a_type_change_with_the_same_name_shows_the_oid_or_typmod() {
        let mut columns = same();
        // A type dropped and re-created under the same name.
        columns[1] = up("priority", 2, 70000, -1, "integer");
        // A typmod that format_type does not show.
        columns[2] = up("code", 3, 1043, 15, "character varying(10)");
        assert_eq!(
            compare(&table(), &found(columns)).unwrap().type_changed,
            vec![
                change("priority", "integer (OID 23)", "integer (OID 70000)"),
                change(
                    "code",
                    "character varying(10) (typmod 14)",
                    "character varying(10) (typmod 15)"
                ),
            ]
        );
    }

    #[test]
    fn type_drift_wins_over_column_drift() {
        let mut columns = same();
        columns[1] = up("priority", 2, 20, -1, "bigint");
        columns.push(up("region", 5, 25, -1, "text"));
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                added_upstream: strings(&["region"]),
                type_changed: vec![change("priority", "integer", "bigint")],
                ..drift(Signal::TypeDrift)
            })
        );
    }

    #[test]
    fn a_column_dropped_and_readded_is_dropped_with_a_detail() {
        let mut columns = same();
        columns.remove(1);
        columns.push(up("priority", 7, 23, -1, "integer"));
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                dropped_upstream: strings(&["priority"]),
                detail: Some("column \"priority\" was dropped and re-added (attnum 2 → 7)".into()),
                ..drift(Signal::ColumnDrift)
            })
        );
    }

    #[test]
    fn a_column_readded_with_another_type_is_dropped_and_retyped() {
        let mut columns = same();
        columns.remove(1);
        columns.push(up("priority", 7, 20, -1, "bigint"));
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                dropped_upstream: strings(&["priority"]),
                type_changed: vec![change("priority", "integer", "bigint")],
                detail: Some("column \"priority\" was dropped and re-added (attnum 2 → 7)".into()),
                ..drift(Signal::TypeDrift)
            })
        );
    }

    #[test]
    fn a_renamed_column_is_dropped_and_added_with_a_detail() {
        let mut columns = same();
        columns[1] = up("urgency", 2, 23, -1, "integer");
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                added_upstream: strings(&["urgency"]),
                dropped_upstream: strings(&["priority"]),
                detail: Some("column \"priority\" was renamed to \"urgency\"".into()),
                ..drift(Signal::ColumnDrift)
            })
        );
    }

    #[test]
    fn swapped_column_names_are_dropped_with_a_detail() {
        let mut columns = same();
        columns[1] = up("code", 2, 23, -1, "integer");
        columns[2] = up("priority", 3, 1043, 14, "character varying(10)");
        let d = compare(&table(), &found(columns)).unwrap();
        assert_eq!(d.signal, Signal::TypeDrift);
        assert_eq!(d.dropped_upstream, strings(&["priority", "code"]));
        assert_eq!(
            d.detail.as_deref(),
            Some(
                "column \"priority\" moved from attnum 2 to 3 (columns were renamed); \
                 column \"code\" moved from attnum 3 to 2 (columns were renamed)"
            )
        );
    }

    #[test]
    fn a_renamed_excluded_column_is_added_with_a_detail() {
        let mut columns = same();
        columns[3] = up("memo", 4, 25, -1, "text");
        assert_eq!(
            compare(&table(), &found(columns)),
            Some(Drift {
                added_upstream: strings(&["memo"]),
                detail: Some("column \"note\" was renamed to \"memo\"".into()),
                ..drift(Signal::ColumnDrift)
            })
        );
    }

    #[test]
    fn a_stalled_table_is_reported_even_without_differences() {
        let mut t = table();
        t.state = TableState::Stalled;
        t.error = Some("column \"priority\" changed type".into());
        let d = compare(&t, &found(same())).unwrap();
        assert_eq!(d, drift(Signal::Stalled));
        let row = DriftRow::new(&t, d);
        assert_eq!(row.status, "stalled");
        assert_eq!(
            row.error.as_deref(),
            Some("column \"priority\" changed type")
        );
    }

    #[test]
    fn stalled_wins_and_keeps_the_lists() {
        let mut t = table();
        t.state = TableState::Stalled;
        let mut columns = same();
        columns[1] = up("priority", 2, 20, -1, "bigint");
        assert_eq!(
            compare(&t, &found(columns)),
            Some(Drift {
                type_changed: vec![change("priority", "integer", "bigint")],
                ..drift(Signal::Stalled)
            })
        );
    }

    #[test]
    fn a_dropped_upstream_table() {
        assert_eq!(
            compare(
                &table(),
                &Upstream::Missing {
                    recreated_oid: None
                }
            ),
            Some(Drift {
                detail: Some("upstream table \"public.orders\" (OID 5000) was dropped".into()),
                ..drift(Signal::TableDropped)
            })
        );
    }

    #[test]
    fn a_recreated_upstream_table_is_dropped() {
        assert_eq!(
            compare(
                &table(),
                &Upstream::Missing {
                    recreated_oid: Some(6000)
                }
            ),
            Some(Drift {
                detail: Some(
                    "upstream table \"public.orders\" was dropped and re-created (OID 5000 → 6000); \
                     its changes no longer reach this table"
                        .into()
                ),
                recreated_oid: Some(6000),
                ..drift(Signal::TableDropped)
            })
        );
    }

    #[test]
    fn only_a_table_re_created_under_its_name_is_recreated() {
        let row = |recreated_oid| {
            let upstream = Upstream::Missing { recreated_oid };
            DriftRow::new(&table(), compare(&table(), &upstream).unwrap())
        };
        assert!(recreated(&row(Some(6000))));
        assert!(!recreated(&row(None)));
        let mut stalled = table();
        stalled.state = TableState::Stalled;
        let upstream = Upstream::Missing {
            recreated_oid: Some(6000),
        };
        let row = DriftRow::new(&stalled, compare(&stalled, &upstream).unwrap());
        assert!(!recreated(&row), "a stalled table is reported as stalled");
    }

    #[test]
    fn a_renamed_upstream_table_keeps_comparing_columns() {
        let mut columns = same();
        columns[1] = up("priority", 2, 20, -1, "bigint");
        assert_eq!(
            compare(
                &table(),
                &Upstream::Found {
                    schema: "archive".into(),
                    name: "orders_old".into(),
                    columns,
                }
            ),
            Some(Drift {
                type_changed: vec![change("priority", "integer", "bigint")],
                detail: Some(
                    "upstream table \"public.orders\" was renamed to \"archive.orders_old\"".into()
                ),
                renamed_to: Some(UpstreamName {
                    schema: "archive".into(),
                    table: "orders_old".into(),
                }),
                ..drift(Signal::TableRenamed)
            })
        );
    }

    #[test]
    fn rows_serialize_as_documented() {
        let mut columns = same();
        columns[1] = up("priority", 2, 20, -1, "bigint");
        columns.push(up("region", 5, 25, -1, "text"));
        let t = table();
        let row = DriftRow::new(&t, compare(&t, &found(columns)).unwrap());
        let json = serde_json::to_value(DriftReport {
            tables: vec![row.clone()],
            readers: Vec::new(),
        })
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({"tables": [{
                "table": "orders_v1", "source": "src", "upstream": "public.orders",
                "signal": "type_drift", "status": "running",
                "added_upstream": ["region"], "dropped_upstream": [],
                "type_changed": [{"column": "priority", "from": "integer", "to": "bigint"}],
                "error": null, "detail": null
            }]})
        );
        let back: DriftReport = serde_json::from_value(json).unwrap();
        assert_eq!(back.tables, vec![row]);
    }

    #[test]
    fn the_board_keeps_the_last_poll_and_forgets_dropped_tables() {
        let board = DriftBoard::default();
        let t = table();
        let unknown = DriftRow::unknown(&t, "could not connect".into());
        board.record(
            &strings(&["orders_v1", "steady_v1"]),
            &[
                ("orders_v1".into(), Some(unknown.clone())),
                ("steady_v1".into(), None),
            ],
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(board.all(), vec![unknown]);
        assert_eq!(
            board.get("steady_v1"),
            Some(LastPoll {
                at: SystemTime::UNIX_EPOCH,
                drift: None
            })
        );
        board.record(
            &strings(&["orders_v1"]),
            &[("orders_v1".into(), None)],
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(board.all(), Vec::<DriftRow>::new());
        assert_eq!(board.get("steady_v1"), None);
        assert!(board.get("orders_v1").is_some());
    }
}
