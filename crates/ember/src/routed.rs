//! Storage that routes each SQL table to its engine: names from
//! [`ember_sql::storage::engine_of`] that say `lsm` go to an [`LsmStore`], those that say
//! `timeseries` to a [`SeriesStore`] (the database's [`TsStore`](crate::tsstore::TsStore)),
//! the rest (and the catalog) to the table engine.
//!
//! Timeseries tables hold a transaction's rows in RAM until `COMMIT`, which puts them into
//! their series before the LSM batch and the table engine commit (a crash between leaves
//! rows in a series whose catalog row is not yet committed only when the series was made in
//! the same transaction, and then no catalog names it); `ROLLBACK` drops them.
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
use ember_sql::storage::{chunk_from_rows, engine_of, from_end};
use ember_sql::{ColumnSpec, Result, Row, SqlError, Storage, Value};

use crate::lsmstore::LsmStore;

fn lsm(name: &str) -> bool {
    engine_of(name) == "lsm"
}

fn ts(name: &str) -> bool {
    engine_of(name) == "timeseries"
}

/// The timeseries tables of a database, as the router drives them (see
/// [`TsStore`](crate::tsstore::TsStore) for what each does).
#[allow(missing_docs)]
pub trait SeriesStore {
    fn has_table(&self, t: &str) -> bool;
    fn create_table_using(
        &mut self,
        t: &str,
        columns: &[ColumnSpec],
        using: &str,
        at: usize,
    ) -> Result<()>;
    fn drop_table(&mut self, t: &str) -> Result<()>;
    fn insert(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()>;
    fn delete(&mut self, t: &str, rowid: i64) -> Result<bool>;
    fn get(&mut self, t: &str, rowid: i64) -> Result<Option<Vec<Value>>>;
    fn scan(&mut self, t: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>>;
    fn max_rowid(&mut self, t: &str) -> Result<Option<i64>>;
    fn create_index(&mut self, index: &str, t: &str, columns: &[usize]) -> Result<()>;
    fn drop_index(&mut self, index: &str) -> Result<()>;
    fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>>;
    /// Before the table engine commits.
    fn commit(&mut self) -> Result<()>;
    /// After the table engine committed.
    fn committed(&mut self) -> Result<()>;
    /// After the table engine rolled back.
    fn rolled_back(&mut self) -> Result<()>;
    /// The device ranges, as (offset, length), of the space the series hold (see
    /// `Storage::integrity_check_with`).
    fn held_ranges(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }
}

/// A database without timeseries tables.
#[derive(Debug, Default)]
pub struct NoSeries;

fn no_series<T>() -> Result<T> {
    Err(SqlError::Storage(
        "this database cannot hold timeseries tables".into(),
    ))
}

impl SeriesStore for NoSeries {
    fn has_table(&self, _: &str) -> bool {
        false
    }
    fn create_table_using(&mut self, _: &str, _: &[ColumnSpec], _: &str, _: usize) -> Result<()> {
        no_series()
    }
    fn drop_table(&mut self, _: &str) -> Result<()> {
        no_series()
    }
    fn insert(&mut self, _: &str, _: i64, _: &[Value]) -> Result<()> {
        no_series()
    }
    fn delete(&mut self, _: &str, _: i64) -> Result<bool> {
        no_series()
    }
    fn get(&mut self, _: &str, _: i64) -> Result<Option<Vec<Value>>> {
        no_series()
    }
    fn scan(&mut self, _: &str, _: Bound<i64>, _: Bound<i64>) -> Result<Vec<Row>> {
        no_series()
    }
    fn max_rowid(&mut self, _: &str) -> Result<Option<i64>> {
        no_series()
    }
    fn create_index(&mut self, _: &str, _: &str, _: &[usize]) -> Result<()> {
        no_series()
    }
    fn drop_index(&mut self, _: &str) -> Result<()> {
        no_series()
    }
    fn index_scan(&mut self, _: &str, _: Bound<&[Value]>, _: Bound<&[Value]>) -> Result<Vec<Row>> {
        no_series()
    }
    fn commit(&mut self) -> Result<()> {
        Ok(())
    }
    fn committed(&mut self) -> Result<()> {
        Ok(())
    }
    fn rolled_back(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The table-engine table holding the redo record of the last transaction that wrote to both
/// engines: `(rowid 1, seq INTEGER, batch BLOB)`, the batch in
/// [`LsmStore::pending_bytes`]'s format.
pub const REDO_TABLE: &str = "ember$lsmredo";

/// Applies the redo record a crash kept out of the tree (if its number is above the tree's
/// marker); called when a database opens, before anything reads the tree.
pub fn replay_redo<S: Storage, E: Env>(table: &mut S, lsm: &mut LsmStore<E>) -> Result<()> {
    if !table.has_table(REDO_TABLE)? {
        return Ok(());
    }
    let Some(row) = table.get(REDO_TABLE, 1)? else {
        return Ok(());
    };
    let (Some(Value::Integer(seq)), Some(Value::Blob(bytes))) = (row.first(), row.get(1)) else {
        return Err(SqlError::Storage(format!(
            "lsm engine: the redo record in {REDO_TABLE} is not (seq, batch)"
        )));
    };
    let seq = u64::try_from(*seq).unwrap_or(0);
    if lsm.marker()? < seq {
        lsm.replay(bytes, seq)?;
    }
    Ok(())
}

/// Makes the LSM tree for the first lsm table, given the table engine (in its transaction).
pub type LsmFactory<S, E> = Box<dyn FnMut(&mut S) -> Result<LsmStore<E>>>;

/// The table engine plus an lsm store and the timeseries tables (see the module docs).
pub struct Routed<S: Storage, E: Env, T: SeriesStore = NoSeries> {
    /// The table engine (and the catalog).
    pub table: S,
    /// The lsm tables, once the database has any.
    pub lsm: Option<LsmStore<E>>,
    factory: Option<LsmFactory<S, E>>,
    /// The tree was made in the open transaction.
    lsm_new: bool,
    /// The number of the last redo record (read from the tree when first needed).
    redo_seq: Option<u64>,
    /// The timeseries tables.
    pub ts: T,
    /// Whether `ts` can make tables.
    ts_on: bool,
}

impl<S: Storage + std::fmt::Debug, E: Env, T: SeriesStore> std::fmt::Debug for Routed<S, E, T> {
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
            redo_seq: None,
            ts: NoSeries,
            ts_on: false,
        }
    }
}

impl<S: Storage, E: Env, T: SeriesStore> Routed<S, E, T> {
    /// Keeps the timeseries tables in `ts` (and lets `CREATE TABLE … USING timeseries` make
    /// them).
    pub fn with_series<U: SeriesStore>(self, ts: U) -> Routed<S, E, U> {
        Routed {
            table: self.table,
            lsm: self.lsm,
            factory: self.factory,
            lsm_new: self.lsm_new,
            redo_seq: self.redo_seq,
            ts,
            ts_on: true,
        }
    }

    /// Lets the first `CREATE TABLE … USING lsm` make the tree with `f`.
    pub fn with_factory(mut self, f: LsmFactory<S, E>) -> Self {
        self.factory = Some(f);
        self
    }

    /// Starts the LSM tree's background thread (see [`ember_lsm::Db::start_background`]),
    /// now if it is open, and when the factory makes it otherwise.
    pub fn start_lsm_background(&mut self)
    where
        S: 'static,
        E: Send + 'static,
    {
        if let Some(l) = self.lsm.as_mut() {
            l.start_background();
        }
        if let Some(mut f) = self.factory.take() {
            self.factory = Some(Box::new(move |s| {
                let mut l = f(s)?;
                l.start_background();
                Ok(l)
            }));
        }
    }

    /// Commits a transaction that wrote to both the table engine and the tree as one: the
    /// tree's batch goes into the table engine's transaction as a redo record (the table
    /// [`REDO_TABLE`], one row, overwritten each time), the table engine commits — the commit
    /// point — and then the batch goes into the tree with the record's number as its marker.
    /// A crash between the two leaves a marker older than the record, and opening applies the
    /// record ([`replay_redo`]).
    fn commit_both(&mut self) -> Result<()> {
        let Some(l) = self.lsm.as_mut() else {
            return self.table.commit();
        };
        let seq = match self.redo_seq {
            Some(s) => s,
            None => l.marker()?,
        } + 1;
        let bytes = l.pending_bytes();
        if !self.table.has_table(REDO_TABLE)? {
            let col = |n: &str, t: &str| ColumnSpec {
                name: n.into(),
                decl_type: t.into(),
            };
            self.table
                .create_table(REDO_TABLE, &[col("seq", "INTEGER"), col("batch", "BLOB")])?;
        }
        let row = [Value::Integer(seq as i64), Value::Blob(bytes)];
        if self.table.contains(REDO_TABLE, 1)? {
            self.table.update(REDO_TABLE, 1, &row)?;
        } else {
            self.table.insert(REDO_TABLE, 1, &row)?;
        }
        self.table.commit()?;
        self.redo_seq = Some(seq);
        l.commit_marked(seq)
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

impl<S: Storage, E: Env, T: SeriesStore> Storage for Routed<S, E, T> {
    fn engine_name(&self) -> &str {
        self.table.engine_name()
    }
    fn supports_engine(&self, name: &str) -> bool {
        (name.eq_ignore_ascii_case("lsm") && (self.lsm.is_some() || self.factory.is_some()))
            || (name.eq_ignore_ascii_case("timeseries") && self.ts_on)
            || self.table.supports_engine(name)
    }
    fn has_table(&mut self, t: &str) -> Result<bool> {
        if ts(t) {
            return Ok(self.ts.has_table(t));
        }
        if lsm(t) {
            Ok(self.lsm.as_ref().is_some_and(|l| l.has_table(t)))
        } else {
            self.table.has_table(t)
        }
    }
    fn create_table(&mut self, t: &str, columns: &[ColumnSpec]) -> Result<()> {
        if ts(t) {
            return self.ts.create_table_using(t, columns, "timeseries", 0);
        }
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
        if ts(t) {
            return self.ts.drop_table(t);
        }
        if lsm(t) {
            self.store(t)?.drop_table(t)
        } else {
            self.table.drop_table(t)
        }
    }
    fn insert(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if ts(t) {
            return self.ts.insert(t, rowid, row);
        }
        if lsm(t) {
            self.store(t)?.put_row(t, rowid, row)
        } else {
            self.table.insert(t, rowid, row)
        }
    }
    fn update(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if ts(t) {
            return Err(SqlError::invalid(
                "a timeseries table is append-only: rows cannot be updated",
            ));
        }
        if lsm(t) {
            self.store(t)?.put_row(t, rowid, row)
        } else {
            self.table.update(t, rowid, row)
        }
    }
    fn insert_new(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<bool> {
        if ts(t) || lsm(t) {
            return ember_sql::storage::insert_if_absent(self, t, rowid, row);
        }
        self.table.insert_new(t, rowid, row)
    }
    fn update_existing(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<bool> {
        if ts(t) || lsm(t) {
            return ember_sql::storage::update_if_present(self, t, rowid, row);
        }
        self.table.update_existing(t, rowid, row)
    }
    fn delete(&mut self, t: &str, rowid: i64) -> Result<bool> {
        if ts(t) {
            return self.ts.delete(t, rowid);
        }
        if lsm(t) {
            self.store(t)?.delete(t, rowid)
        } else {
            self.table.delete(t, rowid)
        }
    }
    fn get(&mut self, t: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        if ts(t) {
            return self.ts.get(t, rowid);
        }
        if lsm(t) {
            self.store(t)?.get(t, rowid)
        } else {
            self.table.get(t, rowid)
        }
    }
    fn contains(&mut self, t: &str, rowid: i64) -> Result<bool> {
        if ts(t) {
            return Ok(self.ts.get(t, rowid)?.is_some());
        }
        if lsm(t) {
            self.store(t)?.contains(t, rowid)
        } else {
            self.table.contains(t, rowid)
        }
    }
    fn scan(&mut self, t: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        if ts(t) {
            return self.ts.scan(t, lo, hi);
        }
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
        if ts(t) {
            return Ok(from_end(self.ts.scan(t, lo, hi)?, desc, limit));
        }
        if lsm(t) {
            let store = self.store(t)?;
            if desc {
                store.scan_back(t, lo, hi, limit)
            } else {
                store.scan_limited(t, lo, hi, limit)
            }
        } else {
            self.table.scan_limited(t, lo, hi, desc, limit)
        }
    }
    fn scan_chunk(
        &mut self,
        t: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        limit: usize,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<(usize, bool)> {
        if ts(t) {
            // A series cannot stop early: the rest of the range is one chunk.
            let rows = self.ts.scan(t, lo, hi)?;
            return Ok((chunk_from_rows(rows, out), false));
        }
        if lsm(t) {
            self.store(t)?.scan_chunk(t, lo, hi, limit, out)
        } else {
            self.table.scan_chunk(t, lo, hi, limit, out)
        }
    }
    fn max_rowid(&mut self, t: &str) -> Result<Option<i64>> {
        if ts(t) {
            return self.ts.max_rowid(t);
        }
        if lsm(t) {
            self.store(t)?.max_rowid(t)
        } else {
            self.table.max_rowid(t)
        }
    }
    fn create_index(&mut self, index: &str, t: &str, columns: &[usize]) -> Result<()> {
        if ts(t) {
            return self.ts.create_index(index, t, columns);
        }
        if lsm(t) {
            self.store(index)?.create_index(index, t, columns)
        } else {
            self.table.create_index(index, t, columns)
        }
    }
    fn create_unique_index(&mut self, index: &str, t: &str, columns: &[usize]) -> Result<()> {
        if ts(t) || lsm(t) {
            // Those engines leave uniqueness to the executor's probe.
            return self.create_index(index, t, columns);
        }
        self.table.create_unique_index(index, t, columns)
    }
    fn enforces_unique(&mut self, index: &str) -> Result<bool> {
        if ts(index) || lsm(index) {
            return Ok(false);
        }
        self.table.enforces_unique(index)
    }
    fn drop_index(&mut self, index: &str) -> Result<()> {
        if ts(index) {
            return self.ts.drop_index(index);
        }
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
        if ts(index) {
            return self.ts.index_scan(index, lo, hi);
        }
        if lsm(index) {
            self.store(index)?.index_scan(index, lo, hi)
        } else {
            self.table.index_scan(index, lo, hi)
        }
    }
    fn index_rowids(&mut self, index: &str, values: &[Value]) -> Result<Vec<i64>> {
        if ts(index) {
            let b = Bound::Included(values);
            let rows = self.ts.index_scan(index, b, b)?;
            return Ok(rows.into_iter().map(|(r, _)| r).collect());
        }
        if lsm(index) {
            self.store(index)?.index_rowids(index, values)
        } else {
            self.table.index_rowids(index, values)
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
            return self
                .store(index)?
                .index_scan_limited(index, lo, hi, desc, limit);
        }
        if ts(index) {
            Ok(from_end(self.ts.index_scan(index, lo, hi)?, desc, limit))
        } else {
            self.table.index_scan_limited(index, lo, hi, desc, limit)
        }
    }
    fn begin(&mut self) -> Result<()> {
        self.table.begin()
    }
    fn create_table_using(
        &mut self,
        t: &str,
        columns: &[ColumnSpec],
        using: &str,
        at: usize,
    ) -> Result<()> {
        if ts(t) {
            self.ts.create_table_using(t, columns, using, at)
        } else {
            self.create_table(t, columns)
        }
    }
    fn commit(&mut self) -> Result<()> {
        if let Err(e) = self.ts.commit() {
            // The executor takes a failed COMMIT as the end of the transaction: take all of
            // it back (a full series refuses the whole transaction).
            let _ = self.rollback();
            return Err(e);
        }
        let mixed =
            self.lsm.as_ref().is_some_and(LsmStore::has_pending) && self.table.has_changes();
        if mixed {
            self.commit_both()?;
        } else {
            if let Some(l) = self.lsm.as_mut() {
                l.commit()?;
            }
            self.table.commit()?;
        }
        self.lsm_new = false;
        self.ts.committed()
    }
    fn rollback(&mut self) -> Result<()> {
        if let Some(l) = self.lsm.as_mut() {
            l.rollback()?;
        }
        if std::mem::take(&mut self.lsm_new) {
            // The table engine forgets the tree's root with the rest of the transaction.
            self.lsm = None;
        }
        // The series forget the transaction even if the table engine's rollback fails.
        let table = self.table.rollback();
        let ts = self.ts.rolled_back();
        table.and(ts)
    }
    fn pragma(
        &mut self,
        name: &str,
        value: Option<&Value>,
    ) -> Result<Option<Vec<(String, Value)>>> {
        if matches!(name, "integrity_check" | "quick_check") {
            // The table engine checks its space with what the other engines hold in it.
            let mut foreign = self.ts.held_ranges();
            if let Some(l) = self.lsm.as_ref() {
                foreign.extend(l.held_ranges()?);
            }
            return self.table.integrity_check_with(name, &foreign);
        }
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
                    ("refreshes".into(), int(s.refreshes)),
                ],
            }));
        }
        self.table.pragma(name, value)
    }
}
