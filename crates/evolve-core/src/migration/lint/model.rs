//! The schema the files build, statement by statement, seeded from the
//! catalog when there is one: tables and their column types, views and what
//! they read, materialized views and the ones they read, valid NOT NULL
//! checks. Drops and renames are followed.

use std::collections::{BTreeMap, BTreeSet};

use super::CatalogFacts;

#[derive(Default)]
pub(crate) struct Table {
    /// Column -> normalized type.
    pub columns: BTreeMap<String, String>,
    /// Columns with a valid CHECK (col IS NOT NULL) or NOT NULL already.
    pub not_null_ok: BTreeSet<String>,
    /// NOT VALID CHECK (col IS NOT NULL): constraint -> column.
    pub pending_checks: BTreeMap<String, String>,
    /// From the catalog: the table is empty.
    pub empty: bool,
    /// A partitioned table (from the catalog, or `PARTITION BY`).
    pub partitioned: bool,
    /// From the catalog: column -> views that read it.
    pub readers: BTreeMap<String, BTreeSet<String>>,
}

pub(crate) struct View {
    /// Every identifier and keyword of its definition, folded.
    pub idents: BTreeSet<String>,
    pub matview: bool,
    /// Matviews it reads (for the chain depth).
    pub reads: Vec<String>,
    /// WITH NO DATA and not refreshed since.
    pub unpopulated: bool,
}

#[derive(Default)]
pub(crate) struct Model {
    pub tables: BTreeMap<String, Table>,
    pub views: BTreeMap<String, View>,
    pub utc: bool,
    /// From the catalog: function name -> whether one of that name is
    /// VOLATILE.
    pub functions: BTreeMap<String, bool>,
    /// Domains with a CHECK or NOT NULL created or altered by the files:
    /// a column of one is added by a rewrite.
    pub checked_domains: BTreeSet<String>,
}

impl Model {
    pub fn new(catalog: Option<&CatalogFacts>) -> Model {
        let mut m = Model::default();
        let Some(c) = catalog else {
            return m;
        };
        m.utc = c.timezone.as_deref().is_some_and(super::types::is_utc);
        m.functions = c.functions.clone();
        m.checked_domains = c.checked_domains.clone();
        for (name, t) in &c.tables {
            if t.matview {
                m.views.insert(
                    name.clone(),
                    View {
                        idents: BTreeSet::new(),
                        matview: true,
                        reads: Vec::new(),
                        unpopulated: false,
                    },
                );
            }
            let mut table = Table {
                columns: t
                    .columns
                    .iter()
                    .map(|(c, ty)| (c.clone(), super::types::normalize_type(ty)))
                    .collect(),
                not_null_ok: t.not_null.clone(),
                empty: t.bytes == 0,
                partitioned: t.partitioned,
                readers: t.readers.clone(),
                ..Table::default()
            };
            for (con, (col, valid)) in &t.not_null_checks {
                if *valid {
                    table.not_null_ok.insert(col.clone());
                } else {
                    table.pending_checks.insert(con.clone(), col.clone());
                }
            }
            m.tables.insert(name.clone(), table);
        }
        m
    }

    /// Views (of the files or the catalog) that read `table.column`.
    pub fn readers(&self, table: &str, column: &str) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self
            .views
            .iter()
            .filter(|(_, v)| v.idents.contains(table) && v.idents.contains(column))
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(t) = self.tables.get(table)
            && let Some(r) = t.readers.get(column)
        {
            out.extend(r.iter().cloned());
        }
        out
    }

    pub fn drop_view(&mut self, name: &str) {
        self.views.remove(name);
        for t in self.tables.values_mut() {
            for r in t.readers.values_mut() {
                r.remove(name);
            }
        }
        // Dependents went with it (CASCADE), or the drop failed.
        let dependents: Vec<String> = self
            .views
            .iter()
            .filter(|(_, v)| v.reads.iter().any(|r| r == name))
            .map(|(n, _)| n.clone())
            .collect();
        for d in dependents {
            self.drop_view(&d);
        }
    }

    pub fn drop_table(&mut self, name: &str) {
        self.tables.remove(name);
        let readers: Vec<String> = self
            .views
            .iter()
            .filter(|(_, v)| v.idents.contains(name))
            .map(|(n, _)| n.clone())
            .collect();
        for v in readers {
            self.drop_view(&v);
        }
    }

    pub fn rename_table(&mut self, old: &str, new: &str) {
        if let Some(t) = self.tables.remove(old) {
            self.tables.insert(new.to_string(), t);
        }
        if let Some(v) = self.views.remove(old) {
            self.views.insert(new.to_string(), v);
        }
        for v in self.views.values_mut() {
            if v.idents.remove(old) {
                v.idents.insert(new.to_string());
            }
            for r in &mut v.reads {
                if r == old {
                    *r = new.to_string();
                }
            }
        }
        for t in self.tables.values_mut() {
            for r in t.readers.values_mut() {
                if r.remove(old) {
                    r.insert(new.to_string());
                }
            }
        }
    }

    pub fn rename_column(&mut self, table: &str, old: &str, new: &str) {
        if let Some(t) = self.tables.get_mut(table) {
            if let Some(ty) = t.columns.remove(old) {
                t.columns.insert(new.to_string(), ty);
            }
            if t.not_null_ok.remove(old) {
                t.not_null_ok.insert(new.to_string());
            }
            if let Some(r) = t.readers.remove(old) {
                t.readers.insert(new.to_string(), r);
            }
        }
        for v in self.views.values_mut() {
            if v.idents.contains(table) && v.idents.contains(old) {
                v.idents.insert(new.to_string());
            }
        }
    }

    pub fn drop_column(&mut self, table: &str, column: &str, cascade: bool) {
        if let Some(t) = self.tables.get_mut(table) {
            t.columns.remove(column);
            t.not_null_ok.remove(column);
            t.readers.remove(column);
        }
        if cascade {
            for v in self.readers(table, column) {
                self.drop_view(&v);
            }
        }
    }

    /// Layer of `name` in its chain of materialized views (1 = reads no
    /// materialized view).
    pub fn chain_depth(&self, name: &str) -> usize {
        fn depth(m: &Model, name: &str, seen: &mut Vec<String>) -> usize {
            if seen.iter().any(|s| s == name) || seen.len() > 64 {
                return 0;
            }
            seen.push(name.to_string());
            let below = m
                .views
                .get(name)
                .map(|v| {
                    v.reads
                        .iter()
                        .filter(|r| m.views.get(*r).is_some_and(|x| x.matview))
                        .map(|r| depth(m, r, seen))
                        .max()
                        .unwrap_or(0)
                })
                .unwrap_or(0);
            seen.pop();
            1 + below
        }
        depth(self, name, &mut Vec::new())
    }
}
