//! The storage interface every engine implements for the SQL layer.
//!
//! A table here is rows keyed by a 64-bit rowid (SQLite's model: an `INTEGER PRIMARY KEY`
//! column is the rowid; other keys and UNIQUE constraints are secondary indexes the SQL
//! layer checks). Rows are the table's column values without the rowid. Indexes map the
//! values of some columns to rowids and answer equality and range probes in SQLite's value
//! order. The SQL layer keeps its own catalog (the `CREATE` texts) in an ordinary table
//! named [`MASTER`], so an engine stores nothing but tables and indexes.
//!
//! Transactions: [`Storage::begin`] … [`Storage::commit`] / [`Storage::rollback`] bracket
//! every statement outside an explicit transaction and the whole of an explicit one; the SQL
//! layer undoes a failed statement inside an explicit transaction itself, with the inverse
//! operations, so engines need no savepoints.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Bound;

use crate::error::Result;
use crate::value::Value;

/// Name of the table that holds the SQL catalog.
pub const MASTER: &str = "ember_master";

/// A column as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSpec {
    /// Name.
    pub name: String,
    /// Declared type, as written.
    pub decl_type: String,
}

/// A row id and its column values.
pub type Row = (i64, Vec<Value>);

/// A storage engine under the SQL layer.
pub trait Storage {
    /// Which engine this is (for EXPLAIN QUERY PLAN and PRAGMAs).
    fn engine_name(&self) -> &str;
    /// Whether tables can be created on the engine named in `CREATE TABLE … USING name`
    /// (`table` is always accepted). An engine other than `table` is recorded in the
    /// engine-level names: its tables are named `l<n>` (lsm) or `s<n>` (timeseries) and its indexes `li<n>` or
    /// `si<n>`, so
    /// the choice lives in `ember_master` and survives reopen; see [`engine_of`].
    fn supports_engine(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case("table")
    }
    /// Creates a table on the engine a `CREATE TABLE … USING name(options)` names:
    /// `using` is the clause's raw text (`name(options)`), which starts at byte `at` of the
    /// statement (for errors). Engines without options create the table as usual.
    fn create_table_using(
        &mut self,
        table: &str,
        columns: &[ColumnSpec],
        using: &str,
        at: usize,
    ) -> Result<()> {
        let _ = (using, at);
        self.create_table(table, columns)
    }
    /// Whether the table exists.
    fn has_table(&mut self, table: &str) -> Result<bool>;
    /// Creates a table keyed by rowid with these columns.
    fn create_table(&mut self, table: &str, columns: &[ColumnSpec]) -> Result<()>;
    /// Drops a table and its indexes.
    fn drop_table(&mut self, table: &str) -> Result<()>;
    /// Inserts a row under a rowid that is not in use.
    fn insert(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<()>;
    /// Replaces the row under an existing rowid.
    fn update(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<()>;
    /// Inserts a row under a rowid unless the rowid is in use: `false` then, and nothing
    /// written. An engine whose insert looks the rowid up anyway answers here with that one
    /// lookup, where the default asks [`contains`](Self::contains) first.
    fn insert_new(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<bool> {
        insert_if_absent(self, table, rowid, row)
    }
    /// Replaces the row under a rowid if there is one: whether there was (nothing is written
    /// if not). An engine whose update looks the rowid up anyway answers here with that one
    /// lookup, where the default asks [`contains`](Self::contains) first.
    fn update_existing(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<bool> {
        update_if_present(self, table, rowid, row)
    }
    /// Deletes a row; whether it existed.
    fn delete(&mut self, table: &str, rowid: i64) -> Result<bool>;
    /// The row under a rowid.
    fn get(&mut self, table: &str, rowid: i64) -> Result<Option<Vec<Value>>>;
    /// Whether a row has this rowid (engines answer from their index, without the row).
    fn contains(&mut self, table: &str, rowid: i64) -> Result<bool> {
        Ok(self.get(table, rowid)?.is_some())
    }
    /// The rows whose rowid lies within the bounds, in rowid order.
    fn scan(&mut self, table: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>>;
    /// The largest rowid in use.
    fn max_rowid(&mut self, table: &str) -> Result<Option<i64>>;
    /// Creates an index on column positions of a table (not unique: the SQL layer checks).
    fn create_index(&mut self, index: &str, table: &str, columns: &[usize]) -> Result<()>;
    /// Drops an index.
    fn drop_index(&mut self, index: &str) -> Result<()>;
    /// Creates an index that serves a UNIQUE constraint: as
    /// [`create_index`](Self::create_index), and where the engine can, it refuses itself an
    /// insert that would repeat a key without a NULL (see
    /// [`enforces_unique`](Self::enforces_unique)).
    fn create_unique_index(&mut self, index: &str, table: &str, columns: &[usize]) -> Result<()> {
        self.create_index(index, table, columns)
    }
    /// Whether the engine refuses itself an [`insert`](Self::insert) that would repeat a key
    /// (without a NULL) of this index, failing with [`SqlError::Unique`] naming it — then a
    /// plain INSERT of a new rowid need not probe the index first. An index created by
    /// [`create_index`](Self::create_index), or by an engine that cannot, is not.
    ///
    /// [`SqlError::Unique`]: crate::SqlError::Unique
    fn enforces_unique(&mut self, index: &str) -> Result<bool> {
        let _ = index;
        Ok(false)
    }
    /// The rows whose indexed values lie within the bounds, in index order. A bound may
    /// give fewer values than the index has columns: it then bounds that prefix (`a = 1` on
    /// an index of `(a, b)` is `Included([1])` at both ends).
    fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>>;
    /// The rowids of the rows whose indexed values equal `values` (one per index column) in
    /// the index's order, without reading the rows: a uniqueness probe needs no more.
    fn index_rowids(&mut self, index: &str, values: &[Value]) -> Result<Vec<i64>> {
        let b = Bound::Included(values);
        Ok(self
            .index_scan(index, b, b)?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }
    /// Like [`scan`](Self::scan), from the high end when `desc`, and at most `limit` rows:
    /// `ORDER BY rowid DESC LIMIT 10` reads 10 rows where the engine can.
    fn scan_limited(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        Ok(from_end(self.scan(table, lo, hi)?, desc, limit))
    }
    /// The first rows whose rowid lies within the bounds, in ascending rowid order, read
    /// into `out` for a query that steps through a table a chunk at a time (resuming with
    /// `lo = Excluded(last rowid)`). Row `i` overwrites `out[i]` (pushed when `out` is
    /// shorter) with the row's column values followed by its rowid as an integer — the
    /// layout the executor evaluates rows in — reusing the vector and, where the engine
    /// can, the buffers of the text and blob values already in it; `out` past the rows read
    /// holds leftovers. Returns how many rows were read (at most `limit`, unless the engine
    /// reads ranges whole) and whether the range may hold more after them. The default
    /// reads through [`scan_limited`](Self::scan_limited); an engine whose `scan_limited`
    /// reads the whole range anyway should read it once here (and say there is no more).
    fn scan_chunk(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        limit: usize,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<(usize, bool)> {
        let rows = self.scan_limited(table, lo, hi, false, limit)?;
        let n = chunk_from_rows(rows, out);
        Ok((n, n >= limit))
    }
    /// Like [`index_scan`](Self::index_scan), from the high end when `desc` (rows with
    /// equal indexed values then come in descending rowid order), and at most `limit` rows.
    fn index_scan_limited(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        Ok(from_end(self.index_scan(index, lo, hi)?, desc, limit))
    }
    /// Starts a transaction.
    fn begin(&mut self) -> Result<()>;
    /// Commits it.
    fn commit(&mut self) -> Result<()>;
    /// Whether the open transaction has changed anything yet (an engine that cannot tell
    /// says yes).
    fn has_changes(&mut self) -> bool {
        true
    }
    /// Takes it back.
    fn rollback(&mut self) -> Result<()>;
    /// An engine setting or statistic by name (`PRAGMA name`), as (column, value) rows.
    fn pragma(&mut self, name: &str, value: Option<&Value>)
    -> Result<Option<Vec<(String, Value)>>>;
    /// `PRAGMA integrity_check` (or `quick_check`, `name`) of a storage whose space other
    /// engines keep data in too: `foreign` are the (offset, length) ranges of that space
    /// they hold. By default the pragma itself.
    fn integrity_check_with(
        &mut self,
        name: &str,
        foreign: &[(u64, u64)],
    ) -> Result<Option<Vec<(String, Value)>>> {
        let _ = foreign;
        self.pragma(name, None)
    }
}

/// The first `limit` of `rows` (read in ascending order) from the high end when `desc`:
/// what a limited read gives for an engine that reads a range whole.
pub fn from_end(mut rows: Vec<Row>, desc: bool, limit: usize) -> Vec<Row> {
    if desc {
        rows.reverse();
    }
    rows.truncate(limit);
    rows
}

/// Puts rows into a chunk buffer as [`Storage::scan_chunk`] lays them out (each row's
/// values, then its rowid), moving each row in place of the buffer's old one; how many.
pub fn chunk_from_rows(rows: Vec<Row>, out: &mut Vec<Vec<Value>>) -> usize {
    let n = rows.len();
    for (i, (id, mut row)) in rows.into_iter().enumerate() {
        row.push(Value::Integer(id));
        match out.get_mut(i) {
            Some(slot) => *slot = row,
            None => out.push(row),
        }
    }
    n
}

/// The engine (`"table"`, `"lsm"` or `"timeseries"`) an engine-level table or index name
/// belongs to: names given to tables created `USING lsm` start with `l` (`l<n>`, their
/// indexes `li<n>` and `l<n>_u<k>`), those of tables created `USING timeseries` with `s`
/// (`s<n>`, their data index `si<n>`), all others (`t<n>`, `i<n>`, `t<n>_u<k>`, the
/// catalog) are the table engine's.
pub fn engine_of(name: &str) -> &'static str {
    if name.starts_with('l') {
        "lsm"
    } else if name.starts_with('s') {
        "timeseries"
    } else {
        "table"
    }
}

/// [`Storage::insert_new`] by a [`contains`](Storage::contains) probe, then an insert.
pub fn insert_if_absent<S: Storage + ?Sized>(
    s: &mut S,
    table: &str,
    rowid: i64,
    row: &[Value],
) -> Result<bool> {
    if s.contains(table, rowid)? {
        return Ok(false);
    }
    s.insert(table, rowid, row)?;
    Ok(true)
}

/// [`Storage::update_existing`] by a [`contains`](Storage::contains) probe, then an update.
pub fn update_if_present<S: Storage + ?Sized>(
    s: &mut S,
    table: &str,
    rowid: i64,
    row: &[Value],
) -> Result<bool> {
    if !s.contains(table, rowid)? {
        return Ok(false);
    }
    s.update(table, rowid, row)?;
    Ok(true)
}
