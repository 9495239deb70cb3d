//! Storage that routes each SQL table to its engine: names from
//! [`ember_sql::storage::engine_of`] that say `lsm` go to an [`LsmStore`], the rest (and
//! the catalog) to the table engine.
//!
//! A statement outside a transaction is one `begin`/`commit` pair from the executor, so its
//! KV operations become one atomic LSM batch; inside `BEGIN … COMMIT` the batch grows until
//! `COMMIT` (and `ROLLBACK` drops it). On commit the LSM batch is written first, then the
//! table engine commits (its catalog rows): a crash between the two leaves LSM objects the
//! catalog does not name, which [`Routed::sweep`] removes when the database opens.
//!
//! The LSM tree is made when the first lsm table is created (a database without lsm tables
//! carries none), by a factory the owner gives, inside the table engine's transaction of
//! that `CREATE TABLE` (so the owner can record the tree's root there); a rollback of that
//! transaction forgets the tree again.

use std::collections::HashSet;
use std::ops::Bound;

use ember_lsm::Env;
use ember_sql::catalog::Catalog;
use ember_sql::storage::engine_of;
use ember_sql::{ColumnSpec, Result, Row, SqlError, Storage, Value};

use crate::lsmstore::LsmStore;

fn lsm(name: &str) -> bool {
    engine_of(name) == "lsm"
}

/// Makes the LSM tree for the first lsm table, given the table engine (in its transaction).
pub type LsmFactory<S, E> = Box<dyn FnMut(&mut S) -> Result<LsmStore<E>>>;

/// The table engine plus an lsm store (see the module docs).
pub struct Routed<S: Storage, E: Env> {
    /// The table engine (and the catalog).
    pub table: S,
    /// The lsm tables, once the database has any.
    pub lsm: Option<LsmStore<E>>,
    factory: Option<LsmFactory<S, E>>,
    /// The tree was made in the open transaction.
    lsm_new: bool,
}

impl<S: Storage + std::fmt::Debug, E: Env> std::fmt::Debug for Routed<S, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routed")
            .field("table", &self.table)
            .field("lsm", &self.lsm.is_some())
            .field("factory", &self.factory.is_some())
            .finish()
    }
}

impl<S: Storage, E: Env> Routed<S, E> {
    /// Routes between the table engine and an lsm store (if the database has one).
    pub fn new(table: S, lsm: Option<LsmStore<E>>) -> Self {
        Routed {
            table,
            lsm,
            factory: None,
            lsm_new: false,
        }
    }

    /// Lets the first `CREATE TABLE … USING lsm` make the tree with `f`.
    pub fn with_factory(mut self, f: LsmFactory<S, E>) -> Self {
        self.factory = Some(f);
        self
    }

    fn store(&mut self, name: &str) -> Result<&mut LsmStore<E>> {
        self.lsm
            .as_mut()
            .ok_or_else(|| SqlError::Storage(format!("lsm engine: no tree holds {name}")))
    }

    /// Removes the lsm tables and indexes the catalog does not name (left by a crash between
    /// the LSM batch and the catalog's commit), durably; returns their names.
    pub fn sweep(&mut self, catalog: &Catalog) -> Result<Vec<String>> {
        let Some(store) = self.lsm.as_mut() else {
            return Ok(Vec::new());
        };
        let mut named: HashSet<String> = HashSet::new();
        for t in catalog.tables.values() {
            named.insert(t.engine.to_ascii_lowercase());
            named.extend(t.uniques.iter().map(|u| u.engine.to_ascii_lowercase()));
        }
        named.extend(
            catalog
                .indexes
                .values()
                .map(|i| i.engine.to_ascii_lowercase()),
        );
        store.sweep(&named)
    }
}

impl<S: Storage, E: Env> Storage for Routed<S, E> {
    fn engine_name(&self) -> &str {
        self.table.engine_name()
    }
    fn supports_engine(&self, name: &str) -> bool {
        (name.eq_ignore_ascii_case("lsm") && (self.lsm.is_some() || self.factory.is_some()))
            || self.table.supports_engine(name)
    }
    fn has_table(&mut self, t: &str) -> Result<bool> {
        if lsm(t) {
            Ok(self.lsm.as_ref().is_some_and(|l| l.has_table(t)))
        } else {
            self.table.has_table(t)
        }
    }
    fn create_table(&mut self, t: &str, columns: &[ColumnSpec]) -> Result<()> {
        if lsm(t) {
            if self.lsm.is_none() {
                let f = self.factory.as_mut().ok_or_else(|| {
                    SqlError::Storage("this database cannot hold lsm tables".into())
                })?;
                self.lsm = Some(f(&mut self.table)?);
                self.lsm_new = true;
            }
            self.store(t)?.create_table(t)
        } else {
            self.table.create_table(t, columns)
        }
    }
    fn drop_table(&mut self, t: &str) -> Result<()> {
        if lsm(t) {
            self.store(t)?.drop_table(t)
        } else {
            self.table.drop_table(t)
        }
    }
    fn insert(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if lsm(t) {
            self.store(t)?.put_row(t, rowid, row)
        } else {
            self.table.insert(t, rowid, row)
        }
    }
    fn update(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if lsm(t) {
            self.store(t)?.put_row(t, rowid, row)
        } else {
            self.table.update(t, rowid, row)
        }
    }
    fn delete(&mut self, t: &str, rowid: i64) -> Result<bool> {
        if lsm(t) {
            self.store(t)?.delete(t, rowid)
        } else {
            self.table.delete(t, rowid)
        }
    }
    fn get(&mut self, t: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        if lsm(t) {
            self.store(t)?.get(t, rowid)
        } else {
            self.table.get(t, rowid)
        }
    }
    fn scan(&mut self, t: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        if lsm(t) {
            self.store(t)?.scan(t, lo, hi)
        } else {
            self.table.scan(t, lo, hi)
        }
    }
    fn scan_limited(
        &mut self,
        t: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        if lsm(t) {
            if !desc {
                return self.store(t)?.scan_limited(t, lo, hi, limit);
            }
            // The tree iterates forward only: read the range, take its end.
            let mut rows = self.store(t)?.scan(t, lo, hi)?;
            rows.reverse();
            rows.truncate(limit);
            Ok(rows)
        } else {
            self.table.scan_limited(t, lo, hi, desc, limit)
        }
    }
    fn max_rowid(&mut self, t: &str) -> Result<Option<i64>> {
        if lsm(t) {
            self.store(t)?.max_rowid(t)
        } else {
            self.table.max_rowid(t)
        }
    }
    fn create_index(&mut self, index: &str, t: &str, columns: &[usize]) -> Result<()> {
        if lsm(t) {
            self.store(index)?.create_index(index, t, columns)
        } else {
            self.table.create_index(index, t, columns)
        }
    }
    fn drop_index(&mut self, index: &str) -> Result<()> {
        if lsm(index) {
            self.store(index)?.drop_index(index)
        } else {
            self.table.drop_index(index)
        }
    }
    fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>> {
        if lsm(index) {
            self.store(index)?.index_scan(index, lo, hi)
        } else {
            self.table.index_scan(index, lo, hi)
        }
    }
    fn index_scan_limited(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        if lsm(index) {
            let mut rows = self.store(index)?.index_scan(index, lo, hi)?;
            if desc {
                rows.reverse();
            }
            rows.truncate(limit);
            Ok(rows)
        } else {
            self.table.index_scan_limited(index, lo, hi, desc, limit)
        }
    }
    fn begin(&mut self) -> Result<()> {
        self.table.begin()
    }
    fn commit(&mut self) -> Result<()> {
        if let Some(l) = self.lsm.as_mut() {
            l.commit()?;
        }
        self.table.commit()?;
        self.lsm_new = false;
        Ok(())
    }
    fn rollback(&mut self) -> Result<()> {
        if let Some(l) = self.lsm.as_mut() {
            l.rollback()?;
        }
        if std::mem::take(&mut self.lsm_new) {
            // The table engine forgets the tree's root with the rest of the transaction.
            self.lsm = None;
        }
        self.table.rollback()
    }
    fn pragma(
        &mut self,
        name: &str,
        value: Option<&Value>,
    ) -> Result<Option<Vec<(String, Value)>>> {
        if name == "lsm_cache" {
            let st = self.lsm.as_ref().and_then(LsmStore::cache_stats);
            let int = |v: u64| Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
            return Ok(Some(match st {
                None => vec![("lsm_cache".into(), Value::Text("off".into()))],
                Some(s) => vec![
                    ("hits".into(), int(s.hits)),
                    ("misses".into(), int(s.misses)),
                    ("invalidations".into(), int(s.invalidations)),
                    ("evictions".into(), int(s.evictions)),
                    ("slab_bytes".into(), int(s.slab_bytes as u64)),
                ],
            }));
        }
        self.table.pragma(name, value)
    }
}
