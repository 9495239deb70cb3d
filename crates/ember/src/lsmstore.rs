//! SQL tables and indexes as key-value items of one LSM tree (the lsm engine's SQL mapping).
//!
//! Keys are [`crate::lsmkey`]'s: a row is `r · object · rowid` → the row's encoding
//! (`ember_table::row::encode_row`), an index entry is `x · object · values · rowid` → empty,
//! and each table or index has a definition item `m · name` (a table: `T`; an index: `I`,
//! the table's name, the column positions) so indexes are known again after reopen.
//! Writes go to a pending batch that reads see; [`LsmStore::commit`] writes it as one
//! atomic LSM batch (one SQL statement, or a whole transaction), [`LsmStore::rollback`]
//! drops it.
//!
//! The tree is given the prefix rule [`INDEX_PREFIX`] (index keys without their 8-byte
//! rowid enter the tables' bloom filters too), so an equality probe on every column of an
//! index is a [`Db::probe`] that skips each table whose filter rules the values out, instead
//! of a merging iterator over every level.

use ember_sql::catalog::lower;
use ember_sql::storage::from_end;
use foldhash::HashMap;
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use ember_lsm::{Db, Env, PrefixRule, WriteBatch};
use ember_sql::{Result, Row, SqlError, Value};

use crate::coordcache::{self, CacheStats, CoordCache, RowsEncoder};
use crate::lsmkey::{self, INDEX, ROW};

const META: u8 = b'm';
/// The key of the redo marker: the number of the last redo record applied.
const MARKER: &[u8] = b"c";
const REDO_VERSION: u8 = 1;

/// The prefix rule the store gives its tree: an index entry's key without the rowid (its
/// last 8 bytes) — `x · object · values` — enters the tables' filters too.
pub const INDEX_PREFIX: PrefixRule = PrefixRule {
    kind: INDEX,
    suffix: 8,
};

fn lerr(e: ember_lsm::LsmError) -> SqlError {
    SqlError::Storage(format!("lsm engine: {e}"))
}

/// A row's encoding (the table engine's row format), from borrowed values: no value is
/// copied but into the output, which is sized once.
fn encode_row(row: &[Value]) -> Vec<u8> {
    use ember_table::ValueRef;
    fn value_ref(v: &Value) -> ValueRef<'_> {
        match v {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(r) => ValueRef::Real(*r),
            Value::Text(t) => ValueRef::Text(t),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
    // Version, count and one serial type byte a column (more only for long values, which
    // the slack covers), then the payloads.
    let bytes = 2
        + 2 * row.len()
        + row
            .iter()
            .map(|v| match v {
                Value::Null => 0,
                Value::Integer(_) | Value::Real(_) => 8,
                Value::Text(t) => t.len() + 8,
                Value::Blob(b) => b.len() + 8,
            })
            .sum::<usize>();
    let mut out = Vec::with_capacity(bytes);
    ember_table::row::encode_row_iter(row.iter().map(value_ref), row.len(), &mut out);
    out
}

fn decode_row(key: &[u8], bytes: &[u8]) -> Result<Vec<Value>> {
    ember_table::row_values(bytes)
        .and_then(crate::storage::sql_values)
        .map_err(|e| SqlError::Storage(format!("lsm engine: row under key {key:02x?}: {e}")))
}

/// Decodes a row's encoding into `row` as a chunk lays it out — its values, then `rowid` —
/// reusing the vector and the text and blob buffers in it.
fn fill_row(row: &mut Vec<Value>, key: &[u8], bytes: &[u8], rowid: i64) -> Result<()> {
    ember_table::row_values(bytes)
        .and_then(|values| crate::storage::fill_values(row, values, rowid))
        .map_err(|e| SqlError::Storage(format!("lsm engine: row under key {key:02x?}: {e}")))
}

fn meta_key(name: &str) -> Vec<u8> {
    let mut k = vec![META];
    k.extend_from_slice(name.to_ascii_lowercase().as_bytes());
    k
}

fn object(name: &str) -> Result<u64> {
    lsmkey::object_number(name)
        .ok_or_else(|| SqlError::Storage(format!("lsm engine: bad object name {name:?}")))
}

#[derive(Debug, Clone)]
struct IndexInfo {
    table: String,
    columns: Arc<[usize]>,
    /// The object numbers of the index and of its table (`None`: a name without one).
    object: Option<u64>,
    table_object: Option<u64>,
}

impl IndexInfo {
    fn new(name: &str, table: String, columns: &[usize]) -> Self {
        IndexInfo {
            object: lsmkey::object_number(name),
            table_object: lsmkey::object_number(&table),
            table,
            columns: columns.into(),
        }
    }
}

/// SQL tables over an LSM tree (see the module docs).
#[derive(Debug)]
pub struct LsmStore<E: Env> {
    db: Db<E>,
    /// Writes not yet in the tree (None: a delete).
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    indexes: HashMap<String, IndexInfo>,
    tables: Vec<String>,
    /// Whether commits sync the device.
    pub sync: bool,
    /// Results of earlier queries (off when `None`).
    cache: Option<CoordCache>,
    /// Largest rowid per table, once known (`None` inside: the table is empty).
    max: HashMap<String, Option<i64>>,
    /// Where the last [`scan_chunk`](Self::scan_chunk) stopped, to go on from there.
    resume: Option<Resume<E>>,
    /// A point query's cache identity is built here (no allocation per read).
    query_buf: Vec<u8>,
}

/// A range read left where a chunk ended (see [`LsmStore::scan_chunk`]).
#[derive(Debug)]
struct Resume<E: Env> {
    /// The tree's iterator, at the first row not read yet.
    iter: ember_lsm::Iter<E>,
    /// The row key the next chunk starts at.
    next: Vec<u8>,
    /// The end of the range.
    end: Option<Vec<u8>>,
}

impl<E: Env> LsmStore<E> {
    /// Wraps an open tree and reads its table and index definitions.
    pub fn new(db: Db<E>) -> Result<Self> {
        db.set_prefix_rule(Some(INDEX_PREFIX));
        let (tables, indexes) = Self::new_defs(&db)?;
        Ok(LsmStore {
            db,
            pending: BTreeMap::new(),
            indexes,
            tables,
            sync: true,
            cache: None,
            max: HashMap::default(),
            resume: None,
            query_buf: Vec::new(),
        })
    }

    /// Sets the coordination cache's memory (0, or too little for one slab page: off).
    pub fn set_cache_bytes(&mut self, bytes: usize) {
        self.cache = CoordCache::new(bytes);
    }

    /// The coordination cache's counters, if it is on.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(CoordCache::stats)
    }

    /// The tree.
    pub fn db(&self) -> &Db<E> {
        &self.db
    }

    /// Starts the tree's background thread (see [`Db::start_background`]).
    pub fn start_background(&mut self)
    where
        E: Send + 'static,
    {
        self.db.start_background();
    }

    /// Gives the tree back (pending writes are dropped).
    pub fn into_db(self) -> Db<E> {
        self.db
    }

    /// Whether the store has this table.
    pub fn has_table(&self, table: &str) -> bool {
        self.tables.iter().any(|t| t.eq_ignore_ascii_case(table))
    }

    fn put(&mut self, k: Vec<u8>, v: Vec<u8>) {
        self.invalidate(&k);
        self.pending.insert(k, Some(v));
    }

    fn del(&mut self, k: Vec<u8>) {
        self.invalidate(&k);
        self.pending.insert(k, None);
    }

    /// Drops the cached results a write to `k` changes, but a row key's own point result:
    /// reads see the pending write before the cache, a rollback leaves the committed value
    /// that result holds, and a commit [refreshes](CoordCache::refresh) it. (Only row keys
    /// are read by point queries.)
    fn invalidate(&mut self, k: &[u8]) {
        let Some(c) = self.cache.as_mut() else {
            return;
        };
        if k.first() != Some(&ROW) {
            c.invalidate(k);
            return;
        }
        let mut q = std::mem::take(&mut self.query_buf);
        query_key_into(&mut q, b'P', k, None);
        c.invalidate_except(k, Some(&q));
        self.query_buf = q;
    }

    /// The value under a key: pending writes, then the cache, then the tree.
    fn read(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read_with(k, <[u8]>::to_vec)
    }

    /// `f` on the value under a key — pending writes, then the cache, then the tree —
    /// borrowed where it lies (no copy), but for a result the cache admits on this miss;
    /// `None` if there is none.
    ///
    /// A point query's cached result is `1 | value`, or `0` for a key with no value.
    fn read_with<T>(&mut self, k: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        if let Some(v) = self.pending.get(k) {
            return Ok(v.as_deref().map(f));
        }
        let Some(cache) = self.cache.as_mut() else {
            return self.db.get_with(k, f).map_err(lerr);
        };
        let mut query = std::mem::take(&mut self.query_buf);
        query_key_into(&mut query, b'P', k, None);
        let r = (|| {
            if let Some(b) = cache.lookup(&query) {
                return Ok(match b.split_first() {
                    Some((1, v)) => Some(f(v)),
                    _ => None,
                });
            }
            if !cache.admit(&query) {
                return self.db.get_with(k, f).map_err(lerr);
            }
            // Read into the result's bytes once: `1 | value`, or `0`.
            let mut b = Vec::new();
            let found = self
                .db
                .get_with(k, |v| {
                    b.reserve_exact(1 + v.len());
                    b.push(1);
                    b.extend_from_slice(v);
                })
                .map_err(lerr)?;
            if found.is_none() {
                b.push(0);
            }
            cache.put(query.clone(), &b, vec![k.to_vec()], Vec::new());
            Ok(found.map(|()| f(&b[1..])))
        })();
        self.query_buf = query;
        r
    }

    /// A row decoded from where it lies ([`read_with`](Self::read_with)).
    fn read_row(&mut self, key: &[u8]) -> Result<Option<Vec<Value>>> {
        self.read_with(key, |v| decode_row(key, v))?.transpose()
    }

    /// Whether a cached range result may be used or kept for `[lo, hi)`: the cache is on
    /// and no pending write falls in the range (the cache holds committed state only).
    fn range_cacheable(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        self.cache.is_some() && hi.is_none_or(|h| lo < h) && !self.pending_in(lo, hi)
    }

    /// Whether a pending write falls in `[lo, hi)` (`hi` `None`: unbounded); never in an
    /// empty range.
    fn pending_in(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        if hi.is_some_and(|h| h <= lo) {
            return false;
        }
        let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
        self.pending
            .range::<[u8], _>((Bound::Included(lo), upper))
            .next()
            .is_some()
    }

    /// Rows `(rowid, row encoding)` cached for a query, decoded.
    fn cached_rows(&mut self, query: &[u8]) -> Result<Option<Vec<Row>>> {
        let Some(bytes) = self.cache.as_mut().and_then(|c| c.lookup(query)) else {
            return Ok(None);
        };
        let rows = coordcache::decode_rows(&bytes).ok_or_else(|| {
            SqlError::Storage("lsm engine: a cached result does not parse".into())
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for (rowid, enc) in rows {
            out.push((rowid, decode_row(query, enc)?));
        }
        Ok(Some(out))
    }

    /// Items with keys in `[lo, hi)`, pending writes applied, in key order.
    fn range(&self, lo: &[u8], hi: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.range_limited(lo, hi, usize::MAX)
    }

    /// The first `limit` items of [`range`](Self::range): the tree's iterator and the pending
    /// writes merged as they go, so a short read stops early.
    fn range_limited(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if hi.is_some_and(|h| h <= lo) || limit == 0 {
            return Ok(Vec::new()); // an empty range (BTreeMap::range would panic)
        }
        let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
        let tree = self
            .db
            .range(Bound::Included(lo), upper)
            .map(|r| r.map_err(lerr));
        let mine = self.pending.range::<[u8], _>((Bound::Included(lo), upper));
        let mut out = Vec::new();
        merge_pending(tree, mine, false, limit, &mut out)?;
        Ok(out)
    }

    /// The last `limit` items of [`range`](Self::range), in descending key order: the tree's
    /// [`Db::probe_back`] and the pending writes merged. The tree is asked for `limit` items
    /// first; everything it holds from the last of them up is then known, so the pending
    /// writes there are merged in (a pending delete hides the tree's item); if they hid
    /// too many, the tree is asked again below that item, for twice as many.
    fn range_back(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut hi = hi.map(<[u8]>::to_vec);
        let mut ask = limit;
        while out.len() < limit && hi.as_deref().is_none_or(|h| lo < h) {
            let tree = self.db.probe_back(lo, hi.as_deref(), ask).map_err(lerr)?;
            // The tree's items are all it holds in [floor, hi).
            let floor = match tree.last() {
                Some((k, _)) if tree.len() == ask => Some(k.clone()),
                _ => None,
            };
            let upper = hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let from = Bound::Included(floor.as_deref().unwrap_or(lo));
            let mine = self.pending.range::<[u8], _>((from, upper)).rev();
            merge_pending(tree.into_iter().map(Ok), mine, true, limit, &mut out)?;
            let Some(f) = floor else {
                break; // the tree gave all it holds down to `lo`
            };
            hi = Some(f);
            ask = ask.saturating_mul(2);
        }
        Ok(out)
    }

    /// The items of [`range`](Self::range) for a short range (an index probe): the tree's
    /// [`Db::probe`] (with `prefix`: every key in the range has it as its prefix under
    /// [`INDEX_PREFIX`]) and the pending writes merged.
    fn probe(
        &self,
        lo: &[u8],
        hi: &[u8],
        prefix: Option<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if hi <= lo {
            return Ok(Vec::new());
        }
        let tree = self.db.probe(lo, hi, prefix).map_err(lerr)?;
        let mut mine = self
            .pending
            .range::<[u8], _>((Bound::Included(lo), Bound::Excluded(hi)))
            .peekable();
        if mine.peek().is_none() {
            return Ok(tree);
        }
        let mut out = Vec::with_capacity(tree.len());
        merge_pending(tree.into_iter().map(Ok), mine, false, usize::MAX, &mut out)?;
        Ok(out)
    }

    /// Writes the pending batch as one atomic LSM batch.
    pub fn commit(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // The point results of the keys written take their new values (`1 | value`, or `0`
        // for a delete); if the batch then fails, they are dropped instead.
        let mut refreshed = Vec::new();
        if let Some(c) = self.cache.as_mut() {
            let mut q = std::mem::take(&mut self.query_buf);
            for (k, v) in self.pending.iter().filter(|(k, _)| k.first() == Some(&ROW)) {
                query_key_into(&mut q, b'P', k, None);
                let kept = match v {
                    Some(v) => c.refresh(&q, &[1], v),
                    None => c.refresh(&q, &[0], &[]),
                };
                if kept {
                    refreshed.push(q.clone());
                }
            }
            self.query_buf = q;
        }
        let mut b = WriteBatch::new();
        for (k, v) in std::mem::take(&mut self.pending) {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        // A kept iterator would read an old snapshot (and hold its memtable and tables).
        self.resume = None;
        let r = self.db.write(b, self.sync).map_err(lerr);
        if r.is_err()
            && let Some(c) = self.cache.as_mut()
        {
            for q in &refreshed {
                c.forget(q);
            }
        }
        r
    }

    /// The device ranges of every blob of the tree (see `Env::held_ranges`), once the
    /// background thread is idle, so that none is being made or removed meanwhile.
    pub fn held_ranges(&self) -> Result<Vec<(u64, u64)>> {
        self.db.settle().map_err(lerr)?;
        Ok(self.db.with_env(|e| e.held_ranges()))
    }

    /// Whether writes wait for the next commit.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The pending writes as a redo record the table engine keeps for a transaction that
    /// spans both engines: `version u8 = 1 | count u32 | per write: tag u8 (0 delete, 1 put) |
    /// key length u32 | key | (put) value length u32 | value` (little-endian).
    pub fn pending_bytes(&self) -> Vec<u8> {
        let mut out = vec![REDO_VERSION];
        out.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        for (k, v) in &self.pending {
            out.push(u8::from(v.is_some()));
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            if let Some(v) = v {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
        }
        out
    }

    /// The number of the last redo record whose batch is in the tree (0: none).
    pub fn marker(&self) -> Result<u64> {
        match self.db.get(MARKER).map_err(lerr)? {
            None => Ok(0),
            Some(v) => v
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| SqlError::Storage("lsm engine: a bad redo marker".into())),
        }
    }

    /// Commits the pending writes with the marker of redo record `seq`, in one batch.
    pub fn commit_marked(&mut self, seq: u64) -> Result<()> {
        self.pending
            .insert(MARKER.to_vec(), Some(seq.to_be_bytes().to_vec()));
        self.commit()
    }

    /// Applies redo record `seq` (its writes and its marker, synced) — on open, when the table
    /// engine committed a transaction whose LSM batch a crash kept out of the tree.
    pub fn replay(&mut self, bytes: &[u8], seq: u64) -> Result<()> {
        let bad = || SqlError::Storage("lsm engine: a redo record does not parse".into());
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let s = bytes
                .get(at..at.checked_add(n).ok_or_else(bad)?)
                .ok_or_else(bad)?;
            at += n;
            Ok(s)
        };
        if take(1)? != [REDO_VERSION] {
            return Err(SqlError::Storage(
                "lsm engine: a redo record of an unknown format version".into(),
            ));
        }
        let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let count = u32_of(take(4)?);
        let mut writes = Vec::new();
        for _ in 0..count {
            let tag = take(1)?[0];
            let klen = u32_of(take(4)?);
            let key = take(klen)?.to_vec();
            let value = match tag {
                0 => None,
                1 => {
                    let vlen = u32_of(take(4)?);
                    Some(take(vlen)?.to_vec())
                }
                _ => return Err(bad()),
            };
            writes.push((key, value));
        }
        for (k, v) in writes {
            match v {
                Some(v) => self.put(k, v),
                None => self.del(k),
            }
        }
        let sync = std::mem::replace(&mut self.sync, true);
        let r = self.commit_marked(seq);
        self.sync = sync;
        let (tables, indexes) = Self::new_defs(&self.db)?;
        self.tables = tables;
        self.indexes = indexes;
        self.max.clear();
        r
    }

    /// Drops every table and index whose name is not in `named` (lower case), and makes
    /// that durable; returns the names dropped.
    pub fn sweep(&mut self, named: &HashSet<String>) -> Result<Vec<String>> {
        let mut gone = Vec::new();
        for t in self.tables.clone() {
            if !named.contains(&t.to_ascii_lowercase()) {
                self.drop_table(&t)?;
                gone.push(t);
            }
        }
        let idx: Vec<String> = self.indexes.keys().cloned().collect();
        for i in idx {
            if !named.contains(&i.to_ascii_lowercase()) {
                self.drop_index(&i)?;
                gone.push(i);
            }
        }
        if !gone.is_empty() {
            let sync = std::mem::replace(&mut self.sync, true);
            let r = self.commit();
            self.sync = sync;
            r?;
        }
        Ok(gone)
    }

    /// Drops the pending batch (and reloads definitions it may have changed).
    pub fn rollback(&mut self) -> Result<()> {
        if self.pending.keys().any(|k| k.first() == Some(&META)) {
            self.pending.clear();
            let fresh = LsmStore::new_defs(&self.db)?;
            self.tables = fresh.0;
            self.indexes = fresh.1;
        }
        self.pending.clear();
        self.max.clear();
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn new_defs(db: &Db<E>) -> Result<(Vec<String>, HashMap<String, IndexInfo>)> {
        let mut tables = Vec::new();
        let mut indexes = HashMap::default();
        let lo = [META];
        let hi = [META + 1];
        for item in db.range(Bound::Included(&lo[..]), Bound::Excluded(&hi[..])) {
            let (k, v) = item.map_err(lerr)?;
            let name = String::from_utf8_lossy(&k[1..]).into_owned();
            match v.first() {
                Some(b'T') => tables.push(name),
                Some(b'I') => {
                    let text = String::from_utf8_lossy(&v[1..]).into_owned();
                    let mut parts = text.split(',');
                    let table = parts.next().unwrap_or_default().to_string();
                    let columns = parts
                        .map(|p| p.parse::<usize>())
                        .collect::<std::result::Result<Vec<_>, _>>()
                        .map_err(|_| {
                            SqlError::Storage(format!(
                                "lsm engine: bad definition of index {name}: {text:?}"
                            ))
                        })?;
                    let info = IndexInfo::new(&name, table, &columns);
                    indexes.insert(name, info);
                }
                _ => {
                    return Err(SqlError::Storage(format!(
                        "lsm engine: bad definition item for {name}"
                    )));
                }
            }
        }
        Ok((tables, indexes))
    }

    /// Creates a table.
    pub fn create_table(&mut self, table: &str) -> Result<()> {
        object(table)?;
        self.put(meta_key(table), b"T".to_vec());
        self.tables.push(table.to_ascii_lowercase());
        self.max.insert(table.to_ascii_lowercase(), None);
        Ok(())
    }

    fn index_entries(&self, table: &str) -> Vec<(u64, Arc<[usize]>)> {
        self.indexes
            .values()
            .filter(|i| i.table.eq_ignore_ascii_case(table))
            .filter_map(|i| Some((i.object?, i.columns.clone())))
            .collect()
    }

    fn pick(row: &[Value], cols: &[usize]) -> Vec<Value> {
        cols.iter()
            .map(|&c| row.get(c).cloned().unwrap_or(Value::Null))
            .collect()
    }

    /// Drops a table, its rows and its indexes.
    pub fn drop_table(&mut self, table: &str) -> Result<()> {
        let idx: Vec<String> = self
            .indexes
            .iter()
            .filter(|(_, i)| i.table.eq_ignore_ascii_case(table))
            .map(|(n, _)| n.clone())
            .collect();
        for i in idx {
            self.drop_index(&i)?;
        }
        let p = lsmkey::object_prefix(ROW, object(table)?);
        let end = lsmkey::prefix_end(&p);
        for (k, _) in self.range(&p, end.as_deref())? {
            self.del(k);
        }
        self.del(meta_key(table));
        self.tables.retain(|t| !t.eq_ignore_ascii_case(table));
        self.max.remove(&table.to_ascii_lowercase());
        Ok(())
    }

    /// Inserts or replaces the row under a rowid, keeping indexes in step.
    pub fn put_row(&mut self, table: &str, rowid: i64, row: &[Value]) -> Result<()> {
        let obj = object(table)?;
        let key = lsmkey::row_key(obj, rowid);
        let entries = self.index_entries(table);
        // Without indexes the old row is not needed: the put is blind (no read).
        let old = if entries.is_empty() {
            None
        } else {
            self.read_row(&key)?
        };
        for (io, cols) in &entries {
            let new = Self::pick(row, cols);
            if let Some(old) = &old {
                let before = Self::pick(old, cols);
                if before == new {
                    // Equal values make the same entry key: the entry stays as it is.
                    continue;
                }
                self.del(lsmkey::index_key(*io, &before, rowid));
            }
            self.put(lsmkey::index_key(*io, &new, rowid), Vec::new());
        }
        self.put(key, encode_row(row));
        if let Some(m) = self.max.get_mut(&*lower(table)) {
            *m = Some(m.map_or(rowid, |x| x.max(rowid)));
        }
        Ok(())
    }

    /// Deletes a row; whether it existed.
    pub fn delete(&mut self, table: &str, rowid: i64) -> Result<bool> {
        let key = lsmkey::row_key(object(table)?, rowid);
        let entries = self.index_entries(table);
        if entries.is_empty() {
            // Only whether the row exists matters.
            if self.read_with(&key, |_| ())?.is_none() {
                return Ok(false);
            }
        } else {
            let Some(old) = self.read_row(&key)? else {
                return Ok(false);
            };
            for (io, cols) in entries {
                self.del(lsmkey::index_key(io, &Self::pick(&old, &cols), rowid));
            }
        }
        self.del(key);
        let t = lower(table);
        if self.max.get(&*t) == Some(&Some(rowid)) {
            self.max.remove(&*t); // found again by the next max_rowid
        }
        Ok(true)
    }

    /// Whether a row has this rowid (the row is not decoded, nor read where the engine keeps
    /// it apart from its key: a cached result answers, else the engine's `contains`).
    ///
    /// A rowid above the table's largest, when that is known, is answered without a probe:
    /// an INSERT of a new largest rowid (ascending keys, the newest row) then costs no
    /// search of the tree for a row that cannot be there.
    pub fn contains(&mut self, table: &str, rowid: i64) -> Result<bool> {
        let key = lsmkey::row_key_array(object(table)?, rowid);
        // `max` is exact where known, the pending batch included: raised by every row put,
        // forgotten when its row is deleted, cleared at a rollback and a replay.
        if let Some(&max) = self.max.get(&*lower(table))
            && max.is_none_or(|m| rowid > m)
        {
            return Ok(false);
        }
        if let Some(v) = self.pending.get(&key[..]) {
            return Ok(v.is_some());
        }
        if let Some(cache) = self.cache.as_mut() {
            let mut query = std::mem::take(&mut self.query_buf);
            query_key_into(&mut query, b'P', &key, None);
            let hit = cache.lookup(&query).map(|b| b.first() == Some(&1));
            self.query_buf = query;
            if let Some(found) = hit {
                return Ok(found);
            }
        }
        self.db.contains(&key).map_err(lerr)
    }

    /// The row under a rowid.
    pub fn get(&mut self, table: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        let key = lsmkey::row_key_array(object(table)?, rowid);
        self.read_row(&key)
    }

    /// Rows with rowids within the bounds, in rowid order.
    pub fn scan(&mut self, table: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        self.scan_limited(table, lo, hi, usize::MAX)
    }

    /// The first `limit` rows with rowids within the bounds, in rowid order (reads no
    /// further than it needs to).
    pub fn scan_limited(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        limit: usize,
    ) -> Result<Vec<Row>> {
        let Some((start, end)) = row_range(object(table)?, lo, hi) else {
            return Ok(Vec::new());
        };
        let whole = limit == usize::MAX && self.range_cacheable(&start, end.as_deref());
        let query = query_key(b'R', &start, end.as_deref());
        if whole && let Some(rows) = self.cached_rows(&query)? {
            return Ok(rows);
        }
        // The result's bytes for the cache, while they are few enough for it to keep.
        let cap = self.cache.as_ref().map_or(0, CoordCache::max_result_bytes);
        let mut raw = whole.then(RowsEncoder::default);
        let mut out = Vec::new();
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        if self.pending_in(&start, end.as_deref()) {
            let items = self.range_limited(&start, end.as_deref(), limit)?;
            out.reserve(items.len());
            for (k, v) in &items {
                let (rowid, row) = row_item(k, v)?;
                out.push((rowid, row));
                if let Some(r) = raw.as_mut() {
                    r.push(rowid, v);
                    if r.len() > cap {
                        raw = None;
                    }
                }
            }
        } else if end.as_deref().is_none_or(|e| start.as_slice() < e) {
            // No pending write in the range: each row decodes from where the tree holds it.
            let mut it = self.db.range(Bound::Included(&start), upper);
            while out.len() < limit {
                let got = it.next_with(|k, v| -> Result<Row> {
                    let row = row_item(k, v)?;
                    if let Some(r) = raw.as_mut() {
                        r.push(row.0, v);
                    }
                    Ok(row)
                });
                match got {
                    None => break,
                    Some(r) => out.push(r.map_err(lerr)??),
                }
                if raw.as_ref().is_some_and(|r| r.len() > cap) {
                    raw = None;
                }
            }
        }
        self.keep_rows(query, raw, start, end);
        Ok(out)
    }

    /// Keeps a whole range's rows in the cache (if it admits the query).
    fn keep_rows(
        &mut self,
        query: Vec<u8>,
        raw: Option<RowsEncoder>,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
    ) {
        if let Some(raw) = raw
            && let Some(c) = self.cache.as_mut()
            && c.admit(&query)
        {
            c.put(query, &raw.finish(), Vec::new(), vec![(start, end)]);
        }
    }

    /// The first rows with rowids within the bounds, in rowid order, into `out` as
    /// [`ember_sql::Storage::scan_chunk`] lays them out (each row's values, then its rowid;
    /// the vectors and the blob and text buffers already in `out` reused): at most `limit`,
    /// except as below; returns how many and whether the range may hold more.
    ///
    /// Each row decodes from where the tree holds it (a memtable chunk or a cached data
    /// block) straight into `out`: nothing is copied before. When the range may hold more,
    /// the tree's iterator is kept, with the row key the next chunk starts at; a call for
    /// exactly that key and the same end goes on with it, without a new seek through every
    /// level — if no write committed since (then it yields exactly what a new iterator
    /// would; [`commit`](Self::commit) drops it, so it never holds an old memtable or old
    /// tables past a write). A range with pending writes is read through
    /// [`scan_limited`](Self::scan_limited) (the writes merged in).
    ///
    /// With the coordination cache on, a new range is answered from the cache if it holds
    /// it; if not, it is read past `limit` for as long as its rows would fit in the cache,
    /// so that a range which ends within that is read whole and kept (the cache keeps whole
    /// ranges only); a longer one goes on a chunk at a time, uncached.
    pub fn scan_chunk(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        limit: usize,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<(usize, bool)> {
        let kept = self.resume.take();
        let obj = object(table)?;
        let Some((start, end)) = row_range(obj, lo, hi) else {
            return Ok((0, false));
        };
        if end.as_deref().is_some_and(|e| e <= start.as_slice()) {
            return Ok((0, false));
        }
        if self.pending_in(&start, end.as_deref()) {
            let rows = self.scan_limited(table, lo, hi, limit)?;
            let n = ember_sql::storage::chunk_from_rows(rows, out);
            return Ok((n, n >= limit));
        }
        let resumed = kept
            .filter(|r| r.next == start && r.end == end && r.iter.is_current())
            .map(|r| r.iter);
        let fresh = resumed.is_none();
        let query = query_key(b'R', &start, end.as_deref());
        let cap = match self.cache.as_ref() {
            Some(c) if fresh => Some(c.max_result_bytes()),
            _ => None,
        };
        if cap.is_some()
            && let Some(rows) = self.cached_rows(&query)?
        {
            let n = ember_sql::storage::chunk_from_rows(rows, out);
            return Ok((n, false));
        }
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut iter = resumed.unwrap_or_else(|| self.db.range(Bound::Included(&start), upper));
        let mut raw = cap.map(|_| RowsEncoder::default());
        let (mut n, mut last) = (0usize, None);
        let more = loop {
            if n >= limit && raw.is_none() {
                break true;
            }
            let slot = match out.get_mut(n) {
                Some(slot) => slot,
                None => {
                    out.push(Vec::new());
                    out.last_mut()
                        .ok_or_else(|| SqlError::invalid("internal: no row"))?
                }
            };
            let got = iter.next_with(|k, v| -> Result<i64> {
                let rowid = lsmkey::rowid_of(k)
                    .ok_or_else(|| SqlError::Storage(format!("lsm engine: short key {k:02x?}")))?;
                fill_row(slot, k, v, rowid)?;
                if let Some(r) = raw.as_mut() {
                    r.push(rowid, v);
                }
                Ok(rowid)
            });
            match got {
                None => break false,
                Some(r) => last = Some(r.map_err(lerr)??),
            }
            n += 1;
            if raw.as_ref().is_some_and(|r| r.len() > cap.unwrap_or(0)) {
                raw = None; // too large to keep: read by chunks from here on
            }
        };
        if more {
            // The next chunk starts after the last row (the executor resumes there).
            if let Some(next) = last.and_then(|r| r.checked_add(1)) {
                self.resume = Some(Resume {
                    iter,
                    next: lsmkey::row_key(obj, next),
                    end,
                });
            }
        } else {
            self.keep_rows(query, raw, start, end);
        }
        Ok((n, more))
    }

    /// The last `limit` rows with rowids within the bounds, in descending rowid order (for
    /// `ORDER BY rowid DESC LIMIT n`): read backwards (`range_back`),
    /// no further than needed. Not cached (as [`scan_limited`](Self::scan_limited)'s cut
    /// results are not).
    pub fn scan_back(
        &mut self,
        table: &str,
        lo: Bound<i64>,
        hi: Bound<i64>,
        limit: usize,
    ) -> Result<Vec<Row>> {
        let Some((start, end)) = row_range(object(table)?, lo, hi) else {
            return Ok(Vec::new());
        };
        if limit == usize::MAX {
            return Ok(from_end(self.scan(table, lo, hi)?, true, limit));
        }
        self.range_back(&start, end.as_deref(), limit)?
            .iter()
            .map(|(k, v)| row_item(k, v))
            .collect()
    }

    /// The largest rowid in use (kept once known; a scan of the table the first time).
    pub fn max_rowid(&mut self, table: &str) -> Result<Option<i64>> {
        if let Some(m) = self.max.get(&*lower(table)) {
            return Ok(*m);
        }
        let m = self.find_max_rowid(table)?;
        self.max.insert(table.to_ascii_lowercase(), m);
        Ok(m)
    }

    /// The largest rowid of a table, found without reading the table: the last row key of
    /// its range, read backwards (`range_back`, one bounded read from the high end, pending
    /// writes included).
    fn find_max_rowid(&mut self, table: &str) -> Result<Option<i64>> {
        Ok(self
            .scan_back(table, Bound::Unbounded, Bound::Unbounded, 1)?
            .first()
            .map(|r| r.0))
    }

    /// Creates an index on column positions of a table and fills it.
    pub fn create_index(&mut self, index: &str, table: &str, columns: &[usize]) -> Result<()> {
        let io = object(index)?;
        let mut def = format!("I{}", table.to_ascii_lowercase());
        for c in columns {
            def.push_str(&format!(",{c}"));
        }
        self.put(meta_key(index), def.into_bytes());
        for (rowid, row) in self.scan(table, Bound::Unbounded, Bound::Unbounded)? {
            self.put(
                lsmkey::index_key(io, &Self::pick(&row, columns), rowid),
                Vec::new(),
            );
        }
        self.indexes.insert(
            index.to_ascii_lowercase(),
            IndexInfo::new(index, table.to_ascii_lowercase(), columns),
        );
        Ok(())
    }

    /// Drops an index.
    pub fn drop_index(&mut self, index: &str) -> Result<()> {
        let p = lsmkey::object_prefix(INDEX, object(index)?);
        let end = lsmkey::prefix_end(&p);
        for (k, _) in self.range(&p, end.as_deref())? {
            self.del(k);
        }
        self.del(meta_key(index));
        self.indexes.remove(&index.to_ascii_lowercase());
        Ok(())
    }

    /// Whether this store holds the index.
    pub fn has_index(&self, index: &str) -> bool {
        self.indexes.contains_key(&index.to_ascii_lowercase())
    }

    /// Rows whose indexed values lie within the bounds (a bound may be a prefix), in index
    /// order (equal values by rowid).
    pub fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>> {
        let Some(b) = self.index_bounds(index, lo, hi)? else {
            return Ok(Vec::new());
        };
        let cacheable = self.range_cacheable(&b.start, b.end.as_deref());
        let query = if cacheable {
            let q = query_key(b'I', &b.start, b.end.as_deref());
            if let Some(rows) = self.cached_rows(&q)? {
                return Ok(rows);
            }
            q
        } else {
            Vec::new()
        };
        let items = self.index_items(&b)?;
        let (out, raw) = self.index_rows(index, b.table, &items, cacheable)?;
        if let Some(raw) = raw {
            self.keep_index_result(query, raw, b);
        }
        Ok(out)
    }

    /// Like [`index_scan`](Self::index_scan), from the high end when `desc` (rows with equal
    /// indexed values then come in descending rowid order), and at most `limit` rows: only
    /// the first `limit` index entries from that end are read — forward by
    /// `range_limited`, backwards by
    /// `range_back` — and only the rows they name. An equality probe
    /// on every column (one value's entries, found through the tables' prefix filters) and
    /// an unlimited scan are [`index_scan`](Self::index_scan)'s, cut after. A limited
    /// result is cached under its own query (direction and limit in it), never as the range.
    pub fn index_scan_limited(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Row>> {
        let Some(b) = self.index_bounds(index, lo, hi)? else {
            return Ok(Vec::new());
        };
        if b.whole || limit == usize::MAX {
            return Ok(from_end(self.index_scan(index, lo, hi)?, desc, limit));
        }
        let cacheable = self.range_cacheable(&b.start, b.end.as_deref());
        let query = limited_query_key(desc, limit, &b.start, b.end.as_deref());
        if cacheable && let Some(rows) = self.cached_rows(&query)? {
            return Ok(rows);
        }
        let items = if desc {
            self.range_back(&b.start, b.end.as_deref(), limit)?
        } else {
            self.range_limited(&b.start, b.end.as_deref(), limit)?
        };
        let (out, raw) = self.index_rows(index, b.table, &items, cacheable)?;
        if let Some(raw) = raw {
            self.keep_index_result(query, raw, b);
        }
        Ok(out)
    }

    /// The rows of table object `obj` that index entries name, in the entries' order; with
    /// `keep`, also each one's rowid, row key and encoding (for the cache) — unless a row
    /// has a pending write: the cache holds committed state only, and the index range
    /// alone (which [`range_cacheable`](Self::range_cacheable) checks) does not show a
    /// write that left the indexed columns as they were.
    #[allow(clippy::type_complexity)]
    fn index_rows(
        &mut self,
        index: &str,
        obj: u64,
        items: &[(Vec<u8>, Vec<u8>)],
        keep: bool,
    ) -> Result<(Vec<Row>, Option<Vec<(i64, Vec<u8>, Vec<u8>)>>)> {
        let mut out = Vec::with_capacity(items.len());
        let mut raw = keep.then(|| Vec::with_capacity(items.len()));
        for (k, _) in items {
            let rowid = index_rowid(k)?;
            let key = lsmkey::row_key(obj, rowid);
            let missing = || {
                SqlError::Storage(format!(
                    "lsm engine: index {index} names row {rowid} of object {obj}, which is \
                     missing"
                ))
            };
            if raw.is_some() && self.pending.contains_key(&key) {
                raw = None;
            }
            if let Some(raw) = raw.as_mut() {
                let bytes = self.read(&key)?.ok_or_else(missing)?;
                out.push((rowid, decode_row(&key, &bytes)?));
                raw.push((rowid, key, bytes));
            } else {
                out.push((rowid, self.read_row(&key)?.ok_or_else(missing)?));
            }
        }
        Ok((out, raw))
    }

    /// Offers the cache an index scan's result (rows from [`index_rows`](Self::index_rows)):
    /// it depends on the scan's key range and on each row it returned.
    fn keep_index_result(
        &mut self,
        query: Vec<u8>,
        raw: Vec<(i64, Vec<u8>, Vec<u8>)>,
        b: IndexBounds,
    ) {
        if let Some(c) = self.cache.as_mut()
            && c.admit(&query)
        {
            let bytes = coordcache::encode_rows(raw.iter().map(|(r, _, b)| (*r, b.as_slice())));
            let points = raw.into_iter().map(|(_, k, _)| k).collect();
            c.put(query, &bytes, points, vec![(b.start, b.end)]);
        }
    }

    /// The rowids under `values` in an index, read from the index entries alone.
    pub fn index_rowids(&mut self, index: &str, values: &[Value]) -> Result<Vec<i64>> {
        let v = Bound::Included(values);
        let Some(b) = self.index_bounds(index, v, v)? else {
            return Ok(Vec::new());
        };
        self.index_items(&b)?
            .iter()
            .map(|(k, _)| index_rowid(k))
            .collect()
    }

    /// The index entries within bounds: an equality probe through [`probe`](Self::probe)
    /// (its filters asked for the values when they cover every column), anything else
    /// through the tree's iterator.
    fn index_items(&self, b: &IndexBounds) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        match (&b.end, b.eq) {
            (Some(end), true) => self.probe(&b.start, end, b.whole.then_some(&b.start[..])),
            _ => self.range(&b.start, b.end.as_deref()),
        }
    }

    /// The key range an index's entries within the bounds lie in (`None`: an empty range).
    fn index_bounds(
        &self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Option<IndexBounds>> {
        let info = match self.indexes.get(index) {
            Some(i) => i,
            None => self
                .indexes
                .get(&index.to_ascii_lowercase())
                .ok_or_else(|| SqlError::Storage(format!("lsm engine: no index {index}")))?,
        };
        let io = match info.object {
            Some(o) => o,
            None => object(index)?,
        };
        let table = match info.table_object {
            Some(o) => o,
            None => object(&info.table)?,
        };
        let base = lsmkey::object_prefix(INDEX, io);
        let enc = |vals: &[Value]| {
            let mut k = Vec::with_capacity(base.len() + 8 + vals.len() * 12);
            k.extend_from_slice(&base);
            for v in vals {
                lsmkey::encode_value(&mut k, v);
            }
            k
        };
        // An equality probe: both bounds take the same values in.
        let eq = match (lo, hi) {
            (Bound::Included(a), Bound::Included(b)) => std::ptr::eq(a, b) || enc(a) == enc(b),
            _ => false,
        };
        let whole = eq && matches!(lo, Bound::Included(v) if v.len() == info.columns.len());
        let start = match lo {
            Bound::Unbounded => base.clone(),
            Bound::Included(v) => enc(v),
            Bound::Excluded(v) => match lsmkey::prefix_end(&enc(v)) {
                Some(k) => k,
                None => return Ok(None),
            },
        };
        let end = match hi {
            Bound::Unbounded => lsmkey::prefix_end(&base),
            Bound::Included(_) if eq => lsmkey::prefix_end(&start),
            Bound::Included(v) => lsmkey::prefix_end(&enc(v)),
            Bound::Excluded(v) => Some(enc(v)),
        };
        Ok(Some(IndexBounds {
            table,
            start,
            end,
            eq,
            whole,
        }))
    }
}

/// A row item (row key, encoded row) as the SQL layer's (rowid, values).
fn row_item(k: &[u8], v: &[u8]) -> Result<Row> {
    let rowid = lsmkey::rowid_of(k)
        .ok_or_else(|| SqlError::Storage(format!("lsm engine: short key {k:02x?}")))?;
    Ok((rowid, decode_row(k, v)?))
}

/// Merges the tree's items of a key range with the pending writes of the same range, both
/// in one key order (`desc`: descending) — a pending write replaces the tree's item with its
/// key, a pending delete hides it — into `out` until it holds `limit` items. The first
/// error of the tree's items ends the merge.
fn merge_pending<'p>(
    tree: impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>,
    mine: impl Iterator<Item = (&'p Vec<u8>, &'p Option<Vec<u8>>)>,
    desc: bool,
    limit: usize,
    out: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<()> {
    let (mut tree, mut mine) = (tree.peekable(), mine.peekable());
    let first = |a: &[u8], b: &[u8]| if desc { a > b } else { a < b };
    while out.len() < limit {
        let from_tree = match (tree.peek(), mine.peek()) {
            (None, None) => break,
            (Some(Err(_)), _) => true,
            (Some(Ok((tk, _))), Some((pk, _))) => first(tk, pk),
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if from_tree {
            if let Some(item) = tree.next() {
                out.push(item?);
            }
            continue;
        }
        let Some((pk, pv)) = mine.next() else { break };
        if let Some(Ok((tk, _))) = tree.peek()
            && tk == pk
        {
            tree.next(); // the pending write hides the tree's version
        }
        if let Some(v) = pv {
            out.push((pk.clone(), v.clone()));
        }
    }
    Ok(())
}

/// The row keys of table object `obj` with rowids within the bounds, as `[start, end)`
/// (`end` `None`: to the end of the key space); `None` if no rowid can be within them.
fn row_range(obj: u64, lo: Bound<i64>, hi: Bound<i64>) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let start = match lo {
        Bound::Unbounded => lsmkey::object_prefix(ROW, obj),
        Bound::Included(r) => lsmkey::row_key(obj, r),
        Bound::Excluded(r) => lsmkey::row_key(obj, r.checked_add(1)?),
    };
    let end = match hi {
        Bound::Unbounded => lsmkey::prefix_end(&lsmkey::object_prefix(ROW, obj)),
        Bound::Included(r) => match r.checked_add(1) {
            Some(r) => Some(lsmkey::row_key(obj, r)),
            None => lsmkey::prefix_end(&lsmkey::object_prefix(ROW, obj)),
        },
        Bound::Excluded(r) => Some(lsmkey::row_key(obj, r)),
    };
    Some((start, end))
}

/// Where an index scan's entries lie: see [`LsmStore::index_bounds`].
struct IndexBounds {
    /// The object number of the index's table.
    table: u64,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    /// Both bounds are the same values, included: every entry has the prefix `start`.
    eq: bool,
    /// An equality probe on every column: `start` is each entry's [`INDEX_PREFIX`] prefix.
    whole: bool,
}

/// The rowid at the end of an index entry's key.
fn index_rowid(k: &[u8]) -> Result<i64> {
    lsmkey::rowid_of(k).ok_or_else(|| SqlError::Storage(format!("lsm engine: short key {k:02x?}")))
}

/// A query's identity in the cache: kind (`P` point, `R` rowid range, `I` index range),
/// then the key range.
fn query_key(kind: u8, lo: &[u8], hi: Option<&[u8]>) -> Vec<u8> {
    let mut q = Vec::new();
    query_key_into(&mut q, kind, lo, hi);
    q
}

/// [`query_key`] into `q` (cleared first, its capacity kept).
fn query_key_into(q: &mut Vec<u8>, kind: u8, lo: &[u8], hi: Option<&[u8]>) {
    q.clear();
    q.reserve(6 + lo.len() + hi.map_or(0, <[u8]>::len));
    q.push(kind);
    q.extend_from_slice(&(lo.len() as u32).to_le_bytes());
    q.extend_from_slice(lo);
    if let Some(h) = hi {
        q.push(1);
        q.extend_from_slice(h);
    }
}

/// The cache's identity of a limited index scan: `L`, the direction (1: descending), the
/// limit (u64 LE), then the whole scan's [`query_key`] (kind `I`) — never equal to a whole
/// scan's, whose first byte is its kind.
fn limited_query_key(desc: bool, limit: usize, lo: &[u8], hi: Option<&[u8]>) -> Vec<u8> {
    let mut q = vec![b'L', u8::from(desc)];
    q.extend_from_slice(&(limit as u64).to_le_bytes());
    q.extend_from_slice(&query_key(b'I', lo, hi));
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_lsm::{FileEnv, Options};
    use ember_sql::value::compare;
    use proptest::prelude::*;

    fn store(dir: &std::path::Path, create: bool) -> LsmStore<FileEnv> {
        let env = FileEnv::new(dir).unwrap();
        let db = if create {
            Db::create(env, Options::default()).unwrap()
        } else {
            Db::open(env, Options::default()).unwrap()
        };
        let mut s = LsmStore::new(db).unwrap();
        s.sync = false;
        s
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            (-5i64..5).prop_map(Value::Integer),
            (-10i64..10).prop_map(|i| Value::Real(i as f64 / 2.0)),
            "[ab]{0,2}".prop_map(Value::Text),
            proptest::collection::vec(0u8..2, 0..2).prop_map(Value::Blob),
        ]
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(i64, Value, Value),
        Del(i64),
        Commit,
        Rollback,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (-20i64..20, value(), value()).prop_map(|(r, a, b)| Op::Put(r, a, b)),
            2 => (-20i64..20).prop_map(Op::Del),
            1 => Just(Op::Commit),
            1 => Just(Op::Rollback),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn rows_and_index_agree_with_a_model(ops in proptest::collection::vec(op(), 1..60),
                                             lo in value(), hi in value()) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = store(dir.path(), true);
            s.create_table("l1").unwrap();
            s.create_index("li2", "l1", &[1, 0]).unwrap();
            s.commit().unwrap();
            let mut model: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
            let mut committed = model.clone();
            for o in ops {
                match o {
                    Op::Put(r, a, b) => {
                        s.put_row("l1", r, &[a.clone(), b.clone()]).unwrap();
                        model.insert(r, vec![a, b]);
                    }
                    Op::Del(r) => {
                        prop_assert_eq!(s.delete("l1", r).unwrap(), model.remove(&r).is_some());
                    }
                    Op::Commit => {
                        s.commit().unwrap();
                        committed = model.clone();
                    }
                    Op::Rollback => {
                        s.rollback().unwrap();
                        model = committed.clone();
                    }
                }
            }
            let want: Vec<Row> = model.clone().into_iter().collect();
            prop_assert_eq!(s.scan("l1", Bound::Unbounded, Bound::Unbounded).unwrap(), want);
            prop_assert_eq!(
                s.scan("l1", Bound::Excluded(-3), Bound::Included(7)).unwrap(),
                model.range((Bound::Excluded(-3), Bound::Included(7)))
                    .map(|(r, v)| (*r, v.clone())).collect::<Vec<_>>()
            );
            // Index on (b): rows with lo <= b <= hi, ordered by (b, a, rowid).
            let mut want: Vec<Row> = model.clone().into_iter()
                .filter(|(_, v)| compare(&v[1], &lo).is_ge() && compare(&v[1], &hi).is_le())
                .collect();
            want.sort_by(|x, y| compare(&x.1[1], &y.1[1])
                .then(compare(&x.1[0], &y.1[0])).then(x.0.cmp(&y.0)));
            let got = s.index_scan("li2", Bound::Included(std::slice::from_ref(&lo)),
                                   Bound::Included(std::slice::from_ref(&hi))).unwrap();
            // Equal values (1 and 1.0) may come in either order of a; compare (b, rowid) sets.
            let key = |r: &Row| (format!("{:?}", r.1), r.0);
            let mut g: Vec<_> = got.iter().map(key).collect();
            let mut w: Vec<_> = want.iter().map(key).collect();
            for (x, y) in got.iter().zip(&want) {
                prop_assert!(compare(&x.1[1], &y.1[1]).is_eq(), "{:?} vs {:?}", got, want);
            }
            g.sort();
            w.sort();
            prop_assert_eq!(g, w);
            // Reopen: what was committed is there, definitions too.
            s.commit().unwrap();
            let db = s.into_db();
            drop(db);
            let mut s = store(dir.path(), false);
            prop_assert!(s.has_table("l1") && s.has_index("li2"));
            let want: Vec<Row> = model.into_iter().collect();
            prop_assert_eq!(s.scan("l1", Bound::Unbounded, Bound::Unbounded).unwrap(), want.clone());
            prop_assert_eq!(s.index_scan("li2", Bound::Unbounded, Bound::Unbounded).unwrap().len(),
                            want.len());
        }
    }

    /// A table dropped and made again in one batch, a batch of rows rolled back, and a
    /// reopened store (the largest rowid not known) answer `contains` as their rows say,
    /// with the coordination cache on.
    #[test]
    fn contains_after_a_drop_a_rollback_and_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(dir.path(), true);
        s.set_cache_bytes(8 << 10);
        s.create_table("l1").unwrap();
        for r in [1, 5, 9] {
            s.put_row("l1", r, &[Value::Integer(r)]).unwrap();
        }
        s.commit().unwrap();
        assert!(s.contains("l1", 9).unwrap() && !s.contains("l1", 10).unwrap());
        s.drop_table("l1").unwrap();
        s.create_table("l1").unwrap();
        s.put_row("l1", 2, &[Value::Integer(2)]).unwrap();
        for (r, there) in [(1, false), (2, true), (5, false), (9, false)] {
            assert_eq!(
                s.contains("l1", r).unwrap(),
                there,
                "rowid {r} after the drop"
            );
        }
        s.commit().unwrap();
        s.put_row("l1", 20, &[Value::Integer(20)]).unwrap();
        assert!(s.contains("l1", 20).unwrap());
        s.rollback().unwrap();
        assert!(!s.contains("l1", 20).unwrap() && s.contains("l1", 2).unwrap());
        s.put_row("l1", 7, &[Value::Integer(7)]).unwrap();
        s.commit().unwrap();
        drop(s);
        let mut s = store(dir.path(), false);
        s.set_cache_bytes(8 << 10);
        for (r, there) in [(2, true), (7, true), (8, false), (20, false)] {
            assert_eq!(
                s.contains("l1", r).unwrap(),
                there,
                "rowid {r} after a reopen"
            );
        }
        assert_eq!(s.max_rowid("l1").unwrap(), Some(7));
        assert!(s.contains("l1", 7).unwrap() && !s.contains("l1", 8).unwrap());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// The largest rowid, searched for without reading the table, is the model's after any
        /// mix of puts, deletes, commits and rollbacks (rowids at both ends of the range too);
        /// and whether a row exists — answered from the largest rowid where it is known (after
        /// it was searched for, or from the table's creation), from a probe elsewhere — is the
        /// model's after every step, at rowids below, at and above the largest.
        #[test]
        fn the_largest_rowid_is_found_by_search_and_answers_contains(
            ops in proptest::collection::vec(
                (0u8..5, prop_oneof![
                    3 => -30i64..30,
                    1 => Just(i64::MAX),
                    1 => Just(i64::MIN),
                    1 => any::<i64>(),
                ]),
                1..50,
            ),
            fresh in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = store(dir.path(), true);
            s.create_table("l1").unwrap();
            s.commit().unwrap();
            if fresh {
                // As a reopened store has it: the largest rowid not known yet.
                s.max.clear();
            }
            let mut model = std::collections::BTreeSet::new();
            let mut committed = model.clone();
            for (op, r) in ops {
                match op {
                    0 | 1 => {
                        s.put_row("l1", r, &[Value::Integer(r)]).unwrap();
                        model.insert(r);
                    }
                    2 => {
                        prop_assert_eq!(s.delete("l1", r).unwrap(), model.remove(&r));
                    }
                    3 => {
                        s.max.clear();
                        prop_assert_eq!(s.max_rowid("l1").unwrap(), model.last().copied());
                    }
                    _ if r % 2 == 0 => {
                        s.commit().unwrap();
                        committed = model.clone();
                    }
                    _ => {
                        s.rollback().unwrap();
                        model = committed.clone();
                    }
                }
                // The search, after every step, leaving what the store knew as it was.
                let known = s.max.remove("l1");
                prop_assert_eq!(s.max_rowid("l1").unwrap(), model.last().copied());
                match known {
                    Some(m) => s.max.insert("l1".into(), m),
                    None => s.max.remove("l1"),
                };
                let probes = [r.saturating_sub(1), r, r.saturating_add(1), 31, -31, i64::MAX];
                for probe in probes {
                    prop_assert_eq!(
                        s.contains("l1", probe).unwrap(),
                        model.contains(&probe),
                        "rowid {}",
                        probe
                    );
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Q {
        W(Op),
        /// Sets the row's unindexed column (if the row exists): a write that leaves its
        /// index entry as it is.
        Touch(i64, Value),
        /// The whole index: the same query each time, so the cache keeps and answers it.
        IndexAll,
        Get(i64),
        Scan(i64, i64),
        First(i64, usize),
        Index(Value, Value),
        /// A limited index scan (direction, limit) between two values.
        Limited(Value, Value, bool, usize),
        Max,
    }

    fn q() -> impl Strategy<Value = Q> {
        prop_oneof![
            4 => op().prop_map(Q::W),
            3 => (-20i64..20, value()).prop_map(|(r, v)| Q::Touch(r, v)),
            3 => Just(Q::IndexAll),
            3 => (-22i64..22).prop_map(Q::Get),
            2 => (-22i64..22, -22i64..22).prop_map(|(a, b)| Q::Scan(a, b)),
            1 => (-22i64..22, 0usize..5).prop_map(|(a, n)| Q::First(a, n)),
            2 => (value(), value()).prop_map(|(a, b)| Q::Index(a, b)),
            2 => (value(), value(), any::<bool>(), 0usize..5)
                .prop_map(|(a, b, d, n)| Q::Limited(a, b, d, n)),
            1 => Just(Q::Max),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(60))]
        /// The coordination cache (small: results are evicted too) never changes an answer:
        /// the same queries between the same writes, on a store with the cache and one
        /// without.
        #[test]
        fn the_cache_never_changes_an_answer(qs in proptest::collection::vec(q(), 1..150)) {
            let d1 = tempfile::tempdir().unwrap();
            let d2 = tempfile::tempdir().unwrap();
            let mut plain = store(d1.path(), true);
            let mut cached = store(d2.path(), true);
            cached.set_cache_bytes(8 << 10);
            for s in [&mut plain, &mut cached] {
                s.create_table("l1").unwrap();
                s.create_index("li2", "l1", &[1]).unwrap();
                s.commit().unwrap();
            }
            for q in qs {
                match q {
                    Q::W(o) => {
                        for s in [&mut plain, &mut cached] {
                            match o.clone() {
                                Op::Put(r, a, b) => s.put_row("l1", r, &[a, b]).unwrap(),
                                Op::Del(r) => {
                                    s.delete("l1", r).unwrap();
                                }
                                Op::Commit => s.commit().unwrap(),
                                Op::Rollback => s.rollback().unwrap(),
                            }
                        }
                    }
                    Q::Touch(r, v) => {
                        for s in [&mut plain, &mut cached] {
                            if let Some(mut row) = s.get("l1", r).unwrap() {
                                row[0] = v.clone();
                                s.put_row("l1", r, &row).unwrap();
                            }
                        }
                    }
                    Q::IndexAll => {
                        let all = (Bound::Unbounded, Bound::Unbounded);
                        prop_assert_eq!(cached.index_scan("li2", all.0, all.1).unwrap(), plain.index_scan("li2", all.0, all.1).unwrap());
                    }
                    Q::Get(r) => prop_assert_eq!(cached.get("l1", r).unwrap(), plain.get("l1", r).unwrap()),
                    Q::Scan(a, b) => {
                        let (lo, hi) = (Bound::Included(a), Bound::Excluded(b));
                        prop_assert_eq!(cached.scan("l1", lo, hi).unwrap(), plain.scan("l1", lo, hi).unwrap());
                    }
                    Q::First(a, n) => {
                        let (lo, hi) = (Bound::Excluded(a), Bound::Unbounded);
                        let all = plain.scan("l1", lo, hi).unwrap();
                        let want: Vec<Row> = all.into_iter().take(n).collect();
                        prop_assert_eq!(cached.scan_limited("l1", lo, hi, n).unwrap(), want);
                    }
                    Q::Index(a, b) => {
                        let (lo, hi) = (Bound::Included(std::slice::from_ref(&a)), Bound::Included(std::slice::from_ref(&b)));
                        prop_assert_eq!(cached.index_scan("li2", lo, hi).unwrap(), plain.index_scan("li2", lo, hi).unwrap());
                    }
                    Q::Limited(a, b, desc, n) => {
                        let (lo, hi) = (Bound::Included(std::slice::from_ref(&a)), Bound::Included(std::slice::from_ref(&b)));
                        let mut want = plain.index_scan("li2", lo, hi).unwrap();
                        if desc {
                            want.reverse();
                        }
                        want.truncate(n);
                        prop_assert_eq!(plain.index_scan_limited("li2", lo, hi, desc, n).unwrap(), want.clone());
                        prop_assert_eq!(cached.index_scan_limited("li2", lo, hi, desc, n).unwrap(), want);
                    }
                    Q::Max => prop_assert_eq!(cached.max_rowid("l1").unwrap(), plain.max_rowid("l1").unwrap()),
                }
            }
            let st = cached.cache_stats().unwrap();
            prop_assert!(st.slab_bytes <= 8 << 10);
        }
    }

    #[derive(Debug, Clone)]
    enum P {
        /// Row `rowid` gets index value `v` (a put, or an update moving its entry).
        Put(i64, i64),
        Del(i64),
        /// An equality probe (index_scan with equal bounds, and index_rowids).
        Probe(i64),
        Commit,
        Rollback,
        /// Commit, then freeze and flush the memtable (a level-0 table; compactions follow).
        Flush,
        /// Commit, then one unit of background work.
        Step,
        Reopen,
    }

    fn p() -> impl Strategy<Value = P> {
        prop_oneof![
            6 => (0i64..40, 0i64..12).prop_map(|(r, v)| P::Put(r, v)),
            2 => (0i64..40).prop_map(P::Del),
            4 => (0i64..13).prop_map(P::Probe),
            2 => Just(P::Commit),
            1 => Just(P::Rollback),
            1 => Just(P::Flush),
            2 => Just(P::Step),
            1 => Just(P::Reopen),
        ]
    }

    /// A store whose tree flushes after a few KiB, so entries spread over levels.
    /// A new [`small_store`] with table `l1` and index `li2` on columns `cols`, committed.
    fn indexed_store(dir: &std::path::Path, cols: &[usize]) -> LsmStore<FileEnv> {
        let mut s = small_store(dir, true);
        s.create_table("l1").unwrap();
        s.create_index("li2", "l1", cols).unwrap();
        s.commit().unwrap();
        s
    }

    fn small_store(dir: &std::path::Path, create: bool) -> LsmStore<FileEnv> {
        let env = FileEnv::new(dir).unwrap();
        let opts = Options {
            l0_trigger: 2,
            level1_bytes: 8 << 10,
            level_multiplier: 4,
            ..Options::with_budget(32 << 10)
        };
        let db = if create {
            Db::create(env, opts).unwrap()
        } else {
            Db::open(env, opts).unwrap()
        };
        let mut s = LsmStore::new(db).unwrap();
        s.sync = false;
        s
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Index equality probes (the tree's `probe` with its prefix filters) agree with a
        /// model over the memtable, level-0 tables and deeper levels, for values rows moved
        /// away from (their old entries deleted), values never used, and pending writes.
        #[test]
        fn index_probes_agree_with_a_model(ps in proptest::collection::vec(p(), 1..200)) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = indexed_store(dir.path(), &[0]);
            // Wide rows, so a few hundred writes fill several tables.
            let pad = Value::Blob(vec![7; 120]);
            let mut model: BTreeMap<i64, i64> = BTreeMap::new();
            let mut committed = model.clone();
            for op in ps {
                match op {
                    P::Put(r, v) => {
                        s.put_row("l1", r, &[Value::Integer(v), pad.clone()]).unwrap();
                        model.insert(r, v);
                    }
                    P::Del(r) => {
                        prop_assert_eq!(s.delete("l1", r).unwrap(), model.remove(&r).is_some());
                    }
                    P::Probe(v) => {
                        let want: Vec<i64> =
                            model.iter().filter(|(_, x)| **x == v).map(|(r, _)| *r).collect();
                        let key = [Value::Integer(v)];
                        let b = Bound::Included(&key[..]);
                        let rows = s.index_scan("li2", b, b).unwrap();
                        let got: Vec<i64> = rows.iter().map(|r| r.0).collect();
                        prop_assert_eq!(&got, &want, "value {}", v);
                        prop_assert!(rows.iter().all(|r| r.1[0] == Value::Integer(v)));
                        prop_assert_eq!(s.index_rowids("li2", &key).unwrap(), want);
                        // The same probe as a real: 3 and 3.0 are one index value.
                        let real = [Value::Real(v as f64)];
                        let b = Bound::Included(&real[..]);
                        prop_assert_eq!(s.index_scan("li2", b, b).unwrap(), rows);
                    }
                    P::Commit => {
                        s.commit().unwrap();
                        committed = model.clone();
                    }
                    P::Rollback => {
                        s.rollback().unwrap();
                        model = committed.clone();
                    }
                    P::Flush | P::Step => {
                        s.commit().unwrap();
                        committed = model.clone();
                        if matches!(op, P::Flush) {
                            s.db().flush().unwrap();
                        } else {
                            s.db().step().unwrap();
                        }
                    }
                    P::Reopen => {
                        s.commit().unwrap();
                        committed = model.clone();
                        drop(s.into_db().close().unwrap());
                        s = small_store(dir.path(), false);
                    }
                }
            }
            s.commit().unwrap();
            for v in 0..13 {
                let want: Vec<i64> =
                    model.iter().filter(|(_, x)| **x == v).map(|(r, _)| *r).collect();
                prop_assert_eq!(s.index_rowids("li2", &[Value::Integer(v)]).unwrap(), want);
            }
        }
    }

    /// How a transaction of the store's proptests ends, or what follows it.
    #[derive(Debug, Clone, Copy)]
    enum Tx {
        Commit,
        Rollback,
        /// Commit, then freeze and flush the memtable.
        Flush,
        /// Commit, then one unit of background work.
        Step,
    }

    /// Commits twice as often as it rolls back, flushes or steps.
    fn tx() -> impl Strategy<Value = Tx> {
        prop_oneof![
            2 => Just(Tx::Commit),
            1 => Just(Tx::Rollback),
            1 => Just(Tx::Flush),
            2 => Just(Tx::Step),
        ]
    }

    fn apply_tx(s: &mut LsmStore<FileEnv>, tx: Tx) {
        match tx {
            Tx::Rollback => s.rollback().unwrap(),
            Tx::Commit => s.commit().unwrap(),
            Tx::Flush => {
                s.commit().unwrap();
                s.db().flush().unwrap();
            }
            Tx::Step => {
                s.commit().unwrap();
                s.db().step().unwrap();
            }
        }
    }

    #[derive(Debug, Clone)]
    enum T {
        /// Row `rowid` gets `(a, b)`.
        Put(i64, i64, i64),
        Del(i64),
        /// A transaction's end, or work after it.
        Tx(Tx),
        /// A limited index scan, `desc` or not, of `limit` rows: everything, `a` alone (a
        /// prefix bound), `(a, b)` up from a value or below one, or `(a, b)` exactly.
        Index(u8, i64, i64, bool, usize),
        /// A limited rowid scan from either end, between two rowids.
        Rows(i64, i64, bool, usize),
    }

    fn t() -> impl Strategy<Value = T> {
        prop_oneof![
            8 => (-30i64..30, 0i64..3, 0i64..4).prop_map(|(r, a, b)| T::Put(r, a, b)),
            3 => (-30i64..30).prop_map(T::Del),
            6 => tx().prop_map(T::Tx),
            4 => (0u8..5, 0i64..3, 0i64..4, any::<bool>(), 0usize..12)
                .prop_map(|(k, a, b, d, n)| T::Index(k, a, b, d, n)),
            2 => (-35i64..35, -35i64..35, any::<bool>(), 0usize..12)
                .prop_map(|(x, y, d, n)| T::Rows(x, y, d, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Limited index and rowid scans from either end — read no further than they need —
        /// give what the whole scan gives, reversed for `desc` (equal values then in
        /// descending rowid order), cut at the limit: over pending writes (puts, moves,
        /// deletes) inside an open transaction, rollbacks, and tables in several levels.
        #[test]
        fn limited_scans_agree_with_whole_scans(ts in proptest::collection::vec(t(), 1..250)) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = indexed_store(dir.path(), &[0, 1]);
            let pad = Value::Blob(vec![7; 100]);
            for op in ts {
                match op {
                    T::Put(r, a, b) => {
                        let row = [Value::Integer(a), Value::Integer(b), pad.clone()];
                        s.put_row("l1", r, &row).unwrap();
                    }
                    T::Del(r) => {
                        s.delete("l1", r).unwrap();
                    }
                    T::Tx(tx) => apply_tx(&mut s, tx),
                    T::Index(kind, a, b, desc, n) => {
                        let (a, ab) = ([Value::Integer(a)], [Value::Integer(a), Value::Integer(b)]);
                        let (lo, hi) = match kind {
                            0 => (Bound::Unbounded, Bound::Unbounded),
                            1 => (Bound::Included(&a[..]), Bound::Included(&a[..])),
                            2 => (Bound::Excluded(&ab[..]), Bound::Unbounded),
                            3 => (Bound::Unbounded, Bound::Excluded(&ab[..])),
                            _ => (Bound::Included(&ab[..]), Bound::Included(&ab[..])),
                        };
                        let mut want = s.index_scan("li2", lo, hi).unwrap();
                        if desc {
                            want.reverse();
                        }
                        want.truncate(n);
                        let got = s.index_scan_limited("li2", lo, hi, desc, n).unwrap();
                        prop_assert_eq!(got, want, "kind {} desc {} limit {}", kind, desc, n);
                    }
                    T::Rows(x, y, desc, n) => {
                        let (lo, hi) = (Bound::Included(x), Bound::Excluded(y));
                        let mut want = s.scan("l1", lo, hi).unwrap();
                        if desc {
                            want.reverse();
                        }
                        want.truncate(n);
                        let got = if desc {
                            s.scan_back("l1", lo, hi, n).unwrap()
                        } else {
                            s.scan_limited("l1", lo, hi, n).unwrap()
                        };
                        prop_assert_eq!(got, want, "rows {}..{} desc {} limit {}", x, y, desc, n);
                    }
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum C {
        /// Row `rowid` gets a row whose second value is of kind `k` (so a chunk buffer's
        /// values change kind and length from read to read).
        Put(i64, i64, u8),
        Del(i64),
        /// A transaction's end, or work after it.
        Tx(Tx),
        /// The next chunk of the scan under way, of at most this many rows (none under way:
        /// a new scan starts).
        Chunk(usize),
        /// A new scan between two rowids (the next chunk starts it).
        Start(i64, i64),
        /// The scan under way starts over (a query run again).
        Again,
    }

    fn c() -> impl Strategy<Value = C> {
        prop_oneof![
            8 => (-40i64..40, any::<i64>(), 0u8..4).prop_map(|(r, a, k)| C::Put(r, a, k)),
            3 => (-40i64..40).prop_map(C::Del),
            6 => tx().prop_map(C::Tx),
            10 => (1usize..9).prop_map(C::Chunk),
            2 => (-45i64..45, -45i64..45).prop_map(|(x, y)| C::Start(x, y)),
            2 => Just(C::Again),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A scan read a chunk at a time as the executor reads one (each chunk resuming
        /// after the last rowid of the one before) gets, at every chunk, the rows a whole
        /// scan from there gives at that moment — with writes, commits (which make a kept
        /// iterator stale), rollbacks, flushes and compactions between chunks, pending
        /// writes in the range, the chunk buffer's old values reused, and the coordination
        /// cache on (ranges small enough kept whole, larger ones chunked) or off.
        #[test]
        fn chunked_scans_agree_with_whole_scans(
            cs in proptest::collection::vec(c(), 1..300),
            cache in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = indexed_store(dir.path(), &[0]);
            if cache {
                s.set_cache_bytes(8 << 10); // keeps results of about 7 rows at most
            }
            let mut out: Vec<Vec<Value>> = Vec::new();
            let (mut lo, mut hi) = (Bound::Unbounded, Bound::Unbounded);
            let mut first = lo;
            let mut under_way = false;
            for op in cs {
                match op {
                    C::Put(r, a, k) => {
                        let v = match k {
                            0 => Value::Blob(vec![a as u8; (a as usize) % 150]),
                            1 => Value::Text("t".repeat((a as usize) % 40)),
                            2 => Value::Null,
                            _ => Value::Real(a as f64),
                        };
                        s.put_row("l1", r, &[Value::Integer(a), v]).unwrap();
                    }
                    C::Del(r) => {
                        s.delete("l1", r).unwrap();
                    }
                    C::Tx(tx) => apply_tx(&mut s, tx),
                    C::Start(x, y) => {
                        (lo, hi) = (Bound::Included(x.min(y)), Bound::Excluded(x.max(y)));
                        first = lo;
                        under_way = true;
                    }
                    C::Again => lo = first,
                    C::Chunk(limit) => {
                        if !under_way {
                            (lo, hi) = (Bound::Unbounded, Bound::Unbounded);
                            first = lo;
                            under_way = true;
                        }
                        let all = s.scan("l1", lo, hi).unwrap();
                        let (n, more) = s.scan_chunk("l1", lo, hi, limit, &mut out).unwrap();
                        let got: Vec<Row> = out[..n]
                            .iter()
                            .map(|r| {
                                let (id, vals) = r.split_last().unwrap();
                                let Value::Integer(id) = id else { panic!("no rowid: {r:?}") };
                                (*id, vals.to_vec())
                            })
                            .collect();
                        prop_assert!(n >= limit.min(all.len()), "{} rows of {}", n, all.len());
                        prop_assert!(more || n == all.len(), "ended early: {} of {}", n, all.len());
                        if !cache {
                            prop_assert!(n <= limit);
                        }
                        prop_assert_eq!(&got[..], &all[..n.min(all.len())]);
                        match got.last() {
                            Some((last, _)) if more => lo = Bound::Excluded(*last),
                            _ => under_way = false,
                        }
                    }
                }
            }
        }
    }

    /// The cache keeps a limited scan's rows under a query of their own: the whole range,
    /// the other direction and another limit are never answered with them, and a write in
    /// the range drops them.
    #[test]
    fn a_limited_result_is_cached_apart_from_the_whole_range() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(dir.path(), true);
        s.set_cache_bytes(64 << 10);
        s.create_table("l1").unwrap();
        s.create_index("li2", "l1", &[0, 1]).unwrap();
        for r in 0..10 {
            s.put_row("l1", r, &[Value::Integer(r % 2), Value::Integer(r)])
                .unwrap();
        }
        s.commit().unwrap();
        let one = [Value::Integer(1)];
        let b = Bound::Included(&one[..]);
        let ids = |rows: Vec<Row>| rows.into_iter().map(|r| r.0).collect::<Vec<_>>();
        // Twice each: a result is kept at its second miss.
        for _ in 0..3 {
            let rows = s.index_scan_limited("li2", b, b, true, 2).unwrap();
            assert_eq!(ids(rows), vec![9, 7]);
            let rows = s.index_scan_limited("li2", b, b, false, 2).unwrap();
            assert_eq!(ids(rows), vec![1, 3]);
            let rows = s.index_scan_limited("li2", b, b, true, 3).unwrap();
            assert_eq!(ids(rows), vec![9, 7, 5]);
            assert_eq!(ids(s.index_scan("li2", b, b).unwrap()), vec![1, 3, 5, 7, 9]);
        }
        assert!(s.cache_stats().unwrap().hits >= 4, "{:?}", s.cache_stats());
        s.put_row("l1", 11, &[Value::Integer(1), Value::Integer(11)])
            .unwrap();
        s.commit().unwrap();
        let rows = s.index_scan_limited("li2", b, b, true, 2).unwrap();
        assert_eq!(ids(rows), vec![11, 9]);
    }

    /// Probes find entries in several levels of the tree, and none for a value whose rows
    /// all moved on (the old entries' tombstones are newer than the tables holding them).
    #[test]
    fn a_probe_reads_every_level_and_sees_deleted_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = small_store(dir.path(), true);
        s.create_table("l1").unwrap();
        s.create_index("li2", "l1", &[0, 1]).unwrap();
        let text = |i: i64| Value::Text(format!("name {i:03} {}", "x".repeat(100)));
        for r in 0..400 {
            s.put_row("l1", r, &[Value::Integer(r % 50), text(r)])
                .unwrap();
            s.commit().unwrap();
        }
        let levels = s.db().level_counts();
        assert!(
            levels.iter().filter(|&&n| n > 0).count() >= 2,
            "several levels: {levels:?}"
        );
        // Value 7 of column 0 goes away; every seventh row changes its second column.
        for r in (7..400).step_by(50) {
            s.delete("l1", r).unwrap();
        }
        for r in (0..400).step_by(7).filter(|r| r % 50 != 7) {
            s.put_row("l1", r, &[Value::Integer(r % 50), text(r + 1000)])
                .unwrap();
        }
        s.commit().unwrap();
        let probe = |s: &mut LsmStore<FileEnv>, vals: &[Value]| -> Vec<i64> {
            let b = Bound::Included(vals);
            let mut r: Vec<i64> = s
                .index_scan("li2", b, b)
                .unwrap()
                .into_iter()
                .map(|r| r.0)
                .collect();
            r.sort();
            r
        };
        assert!(probe(&mut s, &[Value::Integer(7)]).is_empty());
        assert_eq!(
            probe(&mut s, &[Value::Integer(8)]),
            vec![8, 58, 108, 158, 208, 258, 308, 358]
        );
        // Whole-key probes (the prefix filter is asked): old values gone, new ones found.
        assert!(probe(&mut s, &[Value::Integer(14), text(14)]).is_empty());
        assert_eq!(probe(&mut s, &[Value::Integer(14), text(1014)]), vec![14]);
        assert_eq!(probe(&mut s, &[Value::Integer(15), text(15)]), vec![15]);
        assert!(probe(&mut s, &[Value::Integer(15), text(16)]).is_empty());
        assert!(probe(&mut s, &[Value::Integer(99), text(1)]).is_empty());
    }

    #[test]
    fn dropping_a_table_removes_rows_indexes_and_definitions() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(dir.path(), true);
        s.create_table("l1").unwrap();
        s.create_table("l3").unwrap();
        s.put_row("l1", 1, &[Value::Integer(5)]).unwrap();
        s.put_row("l3", 1, &[Value::Integer(6)]).unwrap();
        s.create_index("li2", "l1", &[0]).unwrap();
        s.commit().unwrap();
        s.drop_table("l1").unwrap();
        s.commit().unwrap();
        assert!(!s.has_table("l1") && !s.has_index("li2"));
        assert_eq!(s.db().iter().count(), 2, "l3's definition and row stay");
        assert_eq!(s.get("l3", 1).unwrap(), Some(vec![Value::Integer(6)]));
        assert!(
            s.get("lx", 1).is_err(),
            "a bad name is an error, not a panic"
        );
    }
}
