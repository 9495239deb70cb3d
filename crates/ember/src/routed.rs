//! Storage that routes each SQL table to its engine: names from
//! [`ember_sql::storage::engine_of`] that say `lsm` go to an [`LsmStore`], the rest (and
//! the catalog) to the table engine.
//!
//! A statement outside a transaction is one `begin`/`commit` pair from the executor, so its
//! KV operations become one atomic LSM batch; inside `BEGIN … COMMIT` the batch grows until
//! `COMMIT` (and `ROLLBACK` drops it). On commit the LSM batch is written first, then the
//! table engine commits (its catalog rows).

use std::ops::Bound;

use ember_lsm::Env;
use ember_sql::storage::engine_of;
use ember_sql::{ColumnSpec, Result, Row, Storage, Value};

use crate::lsmstore::LsmStore;

fn lsm(name: &str) -> bool {
    engine_of(name) == "lsm"
}

/// The table engine plus an lsm store (see the module docs).
#[derive(Debug)]
pub struct Routed<S: Storage, E: Env> {
    /// The table engine (and the catalog).
    pub table: S,
    /// The lsm tables.
    pub lsm: LsmStore<E>,
}

impl<S: Storage, E: Env> Storage for Routed<S, E> {
    fn engine_name(&self) -> &str {
        self.table.engine_name()
    }
    fn supports_engine(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case("lsm") || self.table.supports_engine(name)
    }
    fn has_table(&mut self, t: &str) -> Result<bool> {
        if lsm(t) {
            Ok(self.lsm.has_table(t))
        } else {
            self.table.has_table(t)
        }
    }
    fn create_table(&mut self, t: &str, columns: &[ColumnSpec]) -> Result<()> {
        if lsm(t) {
            self.lsm.create_table(t)
        } else {
            self.table.create_table(t, columns)
        }
    }
    fn drop_table(&mut self, t: &str) -> Result<()> {
        if lsm(t) {
            self.lsm.drop_table(t)
        } else {
            self.table.drop_table(t)
        }
    }
    fn insert(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if lsm(t) {
            self.lsm.put_row(t, rowid, row)
        } else {
            self.table.insert(t, rowid, row)
        }
    }
    fn update(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if lsm(t) {
            self.lsm.put_row(t, rowid, row)
        } else {
            self.table.update(t, rowid, row)
        }
    }
    fn delete(&mut self, t: &str, rowid: i64) -> Result<bool> {
        if lsm(t) {
            self.lsm.delete(t, rowid)
        } else {
            self.table.delete(t, rowid)
        }
    }
    fn get(&mut self, t: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        if lsm(t) {
            self.lsm.get(t, rowid)
        } else {
            self.table.get(t, rowid)
        }
    }
    fn scan(&mut self, t: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        if lsm(t) {
            self.lsm.scan(t, lo, hi)
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
            let mut rows = self.lsm.scan(t, lo, hi)?;
            if desc {
                rows.reverse();
            }
            rows.truncate(limit);
            Ok(rows)
        } else {
            self.table.scan_limited(t, lo, hi, desc, limit)
        }
    }
    fn max_rowid(&mut self, t: &str) -> Result<Option<i64>> {
        if lsm(t) {
            self.lsm.max_rowid(t)
        } else {
            self.table.max_rowid(t)
        }
    }
    fn create_index(&mut self, index: &str, t: &str, columns: &[usize]) -> Result<()> {
        if lsm(t) {
            self.lsm.create_index(index, t, columns)
        } else {
            self.table.create_index(index, t, columns)
        }
    }
    fn drop_index(&mut self, index: &str) -> Result<()> {
        if lsm(index) {
            self.lsm.drop_index(index)
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
            self.lsm.index_scan(index, lo, hi)
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
            let mut rows = self.lsm.index_scan(index, lo, hi)?;
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
        self.lsm.commit()?;
        self.table.commit()
    }
    fn rollback(&mut self) -> Result<()> {
        self.lsm.rollback()?;
        self.table.rollback()
    }
    fn pragma(
        &mut self,
        name: &str,
        value: Option<&Value>,
    ) -> Result<Option<Vec<(String, Value)>>> {
        self.table.pragma(name, value)
    }
}
