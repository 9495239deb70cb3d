//! The table engine (LUNAR) behind the SQL layer's storage interface.
//!
//! Each SQL table is an engine table whose first column, `ember$rowid`, is the primary key
//! (a B+tree, so scans come in rowid order as SQLite's do); indexes are tree secondary
//! indexes on the shifted column positions.

use foldhash::HashMap;
use std::ops::Bound;
use std::sync::MutexGuard;

use ember_device::BlockDevice;
use ember_sql::catalog::lower;
use ember_sql::{ColumnSpec, Result, Row, SqlError, Storage, Value};
use ember_table::{
    Column, Database, IndexKind, Order, RowError, RowValues, Schema, TableError, Value as TValue,
    ValueRef, row::decode_key,
};

use crate::shared::SharedDb;

const ROWID: &str = "ember$rowid";

/// A SQL value borrowed as the table engine's row encoding takes it.
#[inline]
pub(crate) fn value_ref(v: &Value) -> ValueRef<'_> {
    match v {
        Value::Null => ValueRef::Null,
        Value::Integer(i) => ValueRef::Integer(*i),
        Value::Real(r) => ValueRef::Real(*r),
        Value::Text(t) => ValueRef::Text(t),
        Value::Blob(b) => ValueRef::Blob(b),
    }
}

/// A rowid bound as the engine's key bound (a one-value row).
fn rowid_bound(b: Bound<i64>) -> Bound<[TValue; 1]> {
    b.map(|i| [TValue::Integer(i)])
}

/// At most `limit` rows in key order, from the high end when `desc`.
fn limited(desc: bool, limit: usize) -> Order {
    if desc {
        Order::desc(Some(limit))
    } else {
        Order::asc(Some(limit))
    }
}

/// A value borrowed from a table-engine row, copied into a SQL value. A NaN reads as NULL,
/// as SQLite reads one from a record: SQL has no NaN (a bound one is NULL, an arithmetic
/// one too), and no comparison may meet one.
#[inline]
fn from_ref(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(r) if r.is_nan() => Value::Null,
        ValueRef::Real(r) => Value::Real(r),
        ValueRef::Text(t) => Value::Text(t.to_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// The values of an encoded row as a SQL row, with one spare slot for the rowid the executor
/// appends.
pub(crate) fn sql_values(values: RowValues<'_>) -> std::result::Result<Vec<Value>, RowError> {
    let mut row = Vec::with_capacity(values.remaining() + 1);
    values.for_each_value(|v| {
        row.push(from_ref(v));
        Ok::<_, RowError>(())
    })?;
    Ok(row)
}

/// Overwrites `slot` with a borrowed value (from a table-engine row, or a parameter being
/// bound), reusing the buffer of the text or blob already there when the new value is of
/// the same kind.
pub(crate) fn assign_ref(slot: &mut Value, v: ValueRef<'_>) {
    match (slot, v) {
        (Value::Blob(b), ValueRef::Blob(new)) => {
            b.clear();
            b.extend_from_slice(new);
        }
        (Value::Text(t), ValueRef::Text(new)) => {
            t.clear();
            t.push_str(new);
        }
        (slot, v) => *slot = from_ref(v),
    }
}

/// Decodes an engine row (its rowid first) into `row` as [`Storage::scan_chunk`] lays it
/// out — the SQL values, then the rowid — reusing the vector and the value buffers in it.
/// `Ok(false)`: the engine row's first value (its rowid) is not an integer.
fn fill_row(
    row: &mut Vec<Value>,
    mut values: RowValues<'_>,
) -> std::result::Result<bool, RowError> {
    let Some(ValueRef::Integer(id)) = values.next().transpose()? else {
        return Ok(false);
    };
    fill_values(row, values, id)?;
    Ok(true)
}

/// Decodes `values` into `row`, then appends `rowid` (a chunk row's layout for
/// [`Storage::scan_chunk`]), reusing the vector and the text and blob buffers in it.
pub(crate) fn fill_values(
    row: &mut Vec<Value>,
    values: RowValues<'_>,
    rowid: i64,
) -> std::result::Result<(), RowError> {
    let mut n = 0;
    values.for_each_value(|v| {
        match row.get_mut(n) {
            Some(slot) => assign_ref(slot, v),
            None => row.push(from_ref(v)),
        }
        n += 1;
        Ok::<_, RowError>(())
    })?;
    match row.get_mut(n) {
        Some(slot) => *slot = Value::Integer(rowid),
        None => row.push(Value::Integer(rowid)),
    }
    row.truncate(n + 1);
    Ok(())
}

/// A value of the table engine's row encoding as a SQL value.
pub(crate) fn from_t(v: TValue) -> Value {
    match v {
        TValue::Null => Value::Null,
        TValue::Integer(i) => Value::Integer(i),
        TValue::Real(r) if r.is_nan() => Value::Null,
        TValue::Real(r) => Value::Real(r),
        TValue::Text(t) => Value::Text(t),
        TValue::Blob(b) => Value::Blob(b),
    }
}

/// Runs an engine call that hands rows to a visitor, collecting them as (rowid, SQL row):
/// each row decodes from its block straight into SQL values.
fn collect_rows(
    call: impl FnOnce(
        &mut dyn FnMut(RowValues<'_>) -> ember_table::Result<()>,
    ) -> ember_table::Result<()>,
) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    let mut bad = None;
    call(&mut |mut values| {
        match values.next().transpose()? {
            Some(ValueRef::Integer(id)) => out.push((id, sql_values(values)?)),
            _ => {
                bad.get_or_insert_with(|| {
                    SqlError::Storage("an engine row whose rowid is not an integer".into())
                });
            }
        }
        Ok(())
    })
    .map_err(err)?;
    match bad {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

fn err(e: TableError) -> SqlError {
    match e {
        // The executor words it as SQLite does (it knows the table and columns).
        TableError::Unique(index) => SqlError::Unique(index),
        e => SqlError::Storage(e.to_string()),
    }
}

/// Splits an engine row into (rowid, SQL row).
fn split(mut r: Vec<TValue>) -> Result<Row> {
    if r.is_empty() {
        return Err(SqlError::Storage("an engine row without its rowid".into()));
    }
    let mut values = r.drain(..);
    match values.next() {
        Some(TValue::Integer(id)) => {
            // One spare slot: the executor appends the rowid.
            let mut row = Vec::with_capacity(values.len() + 1);
            row.extend(values.map(from_t));
            Ok((id, row))
        }
        _ => Err(SqlError::Storage(
            "an engine row whose rowid is not an integer".into(),
        )),
    }
}

/// The table engine as SQL storage.
#[derive(Debug)]
pub struct TableStorage<D: BlockDevice> {
    db: SharedDb<D>,
    /// Largest rowid per table, once asked.
    max: HashMap<String, Option<i64>>,
    in_txn: bool,
}

impl<D: BlockDevice> TableStorage<D> {
    /// Creates engine index `index` on `columns` (SQL positions) of `table`, unique or not.
    fn new_index(
        &mut self,
        index: &str,
        table: &str,
        columns: &[usize],
        unique: bool,
    ) -> Result<()> {
        let mut db = self.db.lock()?;
        let schema = db.schema(table).map_err(err)?;
        let names: Vec<String> = columns
            .iter()
            .map(|&c| {
                schema
                    .columns
                    .get(c + 1)
                    .map(|c| c.name.clone())
                    .ok_or_else(|| {
                        SqlError::Storage(format!("index {index}: column {c} out of range"))
                    })
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        db.create_index(index, table, &refs, IndexKind::Tree, unique)
            .map_err(err)
    }

    /// The rows whose rowid is within the bounds, decoded from their blocks straight into
    /// SQL rows.
    fn rows(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        order: Order,
    ) -> Result<Vec<Row>> {
        let (lo, hi) = (rowid_bound(lo), rowid_bound(hi));
        let (lo, hi) = (lo.as_ref().map(|a| &a[..]), hi.as_ref().map(|a| &a[..]));
        let mut db = self.db.lock()?;
        collect_rows(|visit| db.range_visit(table, lo, hi, order, visit))
    }

    /// The rows an index gives within the bounds, decoded straight into SQL rows.
    fn index_rows(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        order: Order,
    ) -> Result<Vec<Row>> {
        fn conv<'a>(b: Bound<&'a [Value]>) -> Bound<Vec<ValueRef<'a>>> {
            b.map(|v| v.iter().map(value_ref).collect())
        }
        // An equality probe (both bounds the same values) converts them once, on the stack
        // when they are few.
        let same = matches!((lo, hi), (Bound::Included(a), Bound::Included(b)) if a == b);
        if let (true, Bound::Included(v)) = (same, lo) {
            let mut refs = [ValueRef::Null; 4];
            if v.len() <= refs.len() {
                for (r, x) in refs.iter_mut().zip(v) {
                    *r = value_ref(x);
                }
                let probe = Bound::Included(&refs[..v.len()]);
                let mut db = self.db.lock()?;
                return collect_rows(|visit| {
                    db.find_prefix_visit(index, probe, probe, order, visit)
                });
            }
        }
        let (lo, hi) = (conv(lo), if same { Bound::Unbounded } else { conv(hi) });
        let lo = lo.as_ref().map(Vec::as_slice);
        let hi = if same {
            lo
        } else {
            hi.as_ref().map(Vec::as_slice)
        };
        let mut db = self.db.lock()?;
        collect_rows(|visit| db.find_prefix_visit(index, lo, hi, order, visit))
    }

    /// Wraps an open table-engine database.
    pub fn new(db: Database<D>) -> Self {
        TableStorage {
            db: SharedDb::new(db),
            max: HashMap::default(),
            in_txn: false,
        }
    }

    /// The engine database (locked until the guard is dropped).
    pub fn database(&self) -> Result<MutexGuard<'_, Database<D>>> {
        self.db.lock()
    }

    /// A handle on the engine database, for the engines that keep their data in its space.
    pub fn shared(&self) -> SharedDb<D> {
        self.db.clone()
    }

    /// Gives the engine database back, if no other handle on it is left.
    pub fn into_database(self) -> Option<Database<D>> {
        self.db.into_inner()
    }

    /// Notes a row added under `rowid` in the largest rowid known for the table, if one is.
    fn raise_max(&mut self, table: &str, rowid: i64) {
        if let Some(m) = self.max.get_mut(&*lower(table)) {
            *m = Some(m.map_or(rowid, |x| x.max(rowid)));
        }
    }

    /// The engine row for a SQL row: the rowid, then the values, borrowed (the engine
    /// encodes them straight into the tuple).
    fn row(rowid: i64, row: &[Value]) -> Vec<ValueRef<'_>> {
        let mut r = Vec::with_capacity(row.len() + 1);
        r.push(ValueRef::Integer(rowid));
        r.extend(row.iter().map(value_ref));
        r
    }
}

impl<D: BlockDevice> Storage for TableStorage<D> {
    fn engine_name(&self) -> &str {
        "table"
    }

    fn has_table(&mut self, table: &str) -> Result<bool> {
        Ok(self
            .db
            .lock()?
            .table_names()
            .iter()
            .any(|n| n.eq_ignore_ascii_case(table)))
    }

    fn create_table(&mut self, table: &str, columns: &[ColumnSpec]) -> Result<()> {
        let mut cols = vec![Column {
            name: ROWID.into(),
            decl_type: "INTEGER".into(),
            not_null: true,
        }];
        cols.extend(columns.iter().map(|c| Column {
            name: c.name.clone(),
            decl_type: c.decl_type.clone(),
            not_null: false,
        }));
        self.db
            .lock()?
            .create_table(
                table,
                Schema {
                    columns: cols,
                    primary_key: vec![0],
                    index: IndexKind::Tree,
                },
            )
            .map_err(err)?;
        self.max.insert(table.to_ascii_lowercase(), None);
        Ok(())
    }

    fn drop_table(&mut self, table: &str) -> Result<()> {
        self.max.remove(&table.to_ascii_lowercase());
        self.db.lock()?.drop_table(table).map_err(err)
    }

    fn insert(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<()> {
        self.db
            .lock()?
            .insert(table, &Self::row(rowid, row))
            .map_err(err)?;
        self.raise_max(table, rowid);
        Ok(())
    }

    fn update(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<()> {
        if self.update_existing(table, rowid, row)? {
            Ok(())
        } else {
            Err(SqlError::Storage(format!(
                "update of a missing row {rowid} in {table}"
            )))
        }
    }

    fn insert_new(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<bool> {
        let new = self
            .db
            .lock()?
            .insert_new(table, &Self::row(rowid, row))
            .map_err(err)?;
        if new {
            self.raise_max(table, rowid);
        }
        Ok(new)
    }

    fn update_existing(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<bool> {
        self.db
            .lock()?
            .update(table, &Self::row(rowid, row))
            .map_err(err)
    }

    fn delete(&mut self, table: &str, rowid: i64) -> Result<bool> {
        let gone = self
            .db
            .lock()?
            .delete(table, &[TValue::Integer(rowid)])
            .map_err(err)?;
        if gone {
            // The largest rowid may have gone; ask the engine again next time.
            self.max.remove(&table.to_ascii_lowercase());
        }
        Ok(gone)
    }

    fn contains(&mut self, table: &str, rowid: i64) -> Result<bool> {
        self.db
            .lock()?
            .contains(table, &[TValue::Integer(rowid)])
            .map_err(err)
    }

    fn get(&mut self, table: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        // `None` inside: the engine row's first value (its rowid) is not an integer.
        let row = self
            .db
            .lock()?
            .get_visit(
                table,
                &[TValue::Integer(rowid)],
                |mut values| match values.next().transpose()? {
                    Some(ValueRef::Integer(_)) => Ok(Some(sql_values(values)?)),
                    _ => Ok(None),
                },
                |r| Ok(split(r).ok().map(|(_, row)| row)),
            )
            .map_err(err)?;
        match row {
            Some(Some(r)) => Ok(Some(r)),
            Some(None) => Err(SqlError::Storage(
                "an engine row whose rowid is not an integer".into(),
            )),
            None => Ok(None),
        }
    }

    fn scan(&mut self, table: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        self.rows(table, lo, hi, Order::default())
    }

    fn scan_limited(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        let order = limited(desc, limit);
        self.rows(table, lo, hi, order)
    }

    fn scan_chunk(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        limit: usize,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<(usize, bool)> {
        let (lo, hi) = (rowid_bound(lo), rowid_bound(hi));
        let (lo, hi) = (lo.as_ref().map(|a| &a[..]), hi.as_ref().map(|a| &a[..]));
        let mut db = self.db.lock()?;
        let (mut n, mut bad) = (0, false);
        db.range_visit(table, lo, hi, Order::asc(Some(limit)), |values| {
            if out.len() <= n {
                out.push(Vec::new());
            }
            if fill_row(&mut out[n], values)? {
                n += 1;
            } else {
                bad = true;
            }
            Ok(())
        })
        .map_err(err)?;
        if bad {
            return Err(SqlError::Storage(
                "an engine row whose rowid is not an integer".into(),
            ));
        }
        Ok((n, n >= limit))
    }

    fn max_rowid(&mut self, table: &str) -> Result<Option<i64>> {
        if let Some(Some(m)) = self.max.get(&*lower(table)) {
            return Ok(Some(*m));
        }
        let m = match self.db.lock()?.last_key(table).map_err(err)? {
            Some(v) => match v.first() {
                Some(TValue::Integer(i)) => Some(*i),
                _ => None,
            },
            None => None,
        };
        self.max.insert(table.to_ascii_lowercase(), m);
        Ok(m)
    }

    fn create_index(&mut self, index: &str, table: &str, columns: &[usize]) -> Result<()> {
        self.new_index(index, table, columns, false)
    }

    fn create_unique_index(&mut self, index: &str, table: &str, columns: &[usize]) -> Result<()> {
        self.new_index(index, table, columns, true)
    }

    fn enforces_unique(&mut self, index: &str) -> Result<bool> {
        Ok(self.db.lock()?.index_def(index).is_some_and(|d| d.unique))
    }

    fn drop_index(&mut self, index: &str) -> Result<()> {
        self.db.lock()?.drop_index(index).map_err(err)
    }

    fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>> {
        self.index_rows(index, lo, hi, Order::default())
    }

    fn index_rowids(&mut self, index: &str, values: &[Value]) -> Result<Vec<i64>> {
        let vals: Vec<ValueRef<'_>> = values.iter().map(value_ref).collect();
        let b = Bound::Included(&vals[..]);
        let pks = self.db.lock()?.find_prefix_keys(index, b, b).map_err(err)?;
        pks.iter()
            .map(|pk| match decode_key(pk, 1).as_deref() {
                Ok([TValue::Integer(id)]) => Ok(*id),
                _ => Err(SqlError::Storage(format!(
                    "index {index} holds a primary key that is not a rowid: {pk:02x?}"
                ))),
            })
            .collect()
    }

    fn index_scan_limited(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        let order = limited(desc, limit);
        self.index_rows(index, lo, hi, order)
    }

    /// Begun in the table engine when the transaction first locks it (see [`SharedDb`]).
    fn begin(&mut self) -> Result<()> {
        self.db.defer_begin()?;
        self.in_txn = true;
        Ok(())
    }

    fn has_changes(&mut self) -> bool {
        !self.db.deferred() && self.db.lock().map_or(true, |db| !db.txn_is_empty())
    }

    fn commit(&mut self) -> Result<()> {
        self.in_txn = false;
        if self.db.end_deferred() {
            return Ok(());
        }
        self.db.lock()?.commit().map_err(err)
    }

    fn rollback(&mut self) -> Result<()> {
        self.in_txn = false;
        self.max.clear();
        if self.db.end_deferred() {
            return Ok(());
        }
        self.db.lock()?.rollback().map_err(err)
    }

    fn integrity_check_with(
        &mut self,
        name: &str,
        foreign: &[(u64, u64)],
    ) -> Result<Option<Vec<(String, Value)>>> {
        if self.in_txn {
            return Err(SqlError::invalid(
                "PRAGMA integrity_check inside a transaction",
            ));
        }
        Ok(Some(match self.db.lock()?.verify_with(foreign) {
            Ok(()) => vec![(name.into(), Value::Text("ok".into()))],
            Err(e) => vec![(name.into(), Value::Text(e.to_string()))],
        }))
    }

    fn pragma(
        &mut self,
        name: &str,
        value: Option<&Value>,
    ) -> Result<Option<Vec<(String, Value)>>> {
        let int = |v: usize| Value::Integer(v as i64);
        Ok(Some(match name {
            "engine" => vec![("engine".into(), Value::Text("table".into()))],
            "consistency_mode" | "journal_mode" | "synchronous" => {
                if value.is_some() {
                    return Err(SqlError::invalid(format!(
                        "PRAGMA {name} is chosen when the database is opened (ember::OpenOptions::mode, or the shell's --mode)"
                    )));
                }
                vec![(
                    name.into(),
                    Value::Text(format!("{:?}", self.db.lock()?.mode()).to_ascii_lowercase()),
                )]
            }
            "cache_size" => vec![("cache_size".into(), int(self.db.lock()?.buffer_budget()))],
            "page_size" | "block_size" => vec![(name.into(), int(self.db.lock()?.block_size()))],
            "page_stats" | "stats" => {
                let (hits, misses) = self.db.lock()?.query_cache_stats();
                return Ok(Some(vec![
                    (
                        "device_bytes_in_use".into(),
                        Value::Integer(self.db.lock()?.device_bytes_in_use() as i64),
                    ),
                    (
                        "buffered_bytes".into(),
                        int(self.db.lock()?.buffered_bytes()),
                    ),
                    ("query_cache_hits".into(), Value::Integer(hits as i64)),
                    ("query_cache_misses".into(), Value::Integer(misses as i64)),
                ]));
            }
            "integrity_check" | "quick_check" => {
                return self.integrity_check_with(name, &[]);
            }
            "checkpoint" | "wal_checkpoint" => {
                self.db.lock()?.checkpoint().map_err(err)?;
                vec![("checkpoint".into(), Value::Text("ok".into()))]
            }
            _ => return Err(SqlError::invalid(format!("unknown PRAGMA {name}"))),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_table::row::encode_row_refs;
    use ember_table::row_values;

    /// A NaN in a stored row (written by the engine API, or a foreign file) reads as NULL,
    /// as SQLite reads one, by every path from the engine's values to SQL's.
    #[test]
    fn a_stored_nan_reads_as_null() {
        let mut bytes = Vec::new();
        encode_row_refs(
            &[
                ValueRef::Integer(7),
                ValueRef::Real(f64::NAN),
                ValueRef::Real(1.5),
            ],
            &mut bytes,
        );
        let want = [Value::Null, Value::Real(1.5)];
        let mut values = row_values(&bytes).unwrap();
        assert_eq!(
            values.next().transpose().unwrap(),
            Some(ValueRef::Integer(7))
        );
        assert_eq!(sql_values(values).unwrap(), want);
        // Into fresh vectors and into reused ones holding a real where the NaN goes.
        for mut row in [
            Vec::new(),
            vec![Value::Real(2.0), Value::Blob(vec![1]), Value::Null],
        ] {
            assert!(fill_row(&mut row, row_values(&bytes).unwrap()).unwrap());
            assert_eq!(row, [Value::Null, Value::Real(1.5), Value::Integer(7)]);
        }
        assert_eq!(from_t(TValue::Real(f64::NAN)), Value::Null);
    }
}
