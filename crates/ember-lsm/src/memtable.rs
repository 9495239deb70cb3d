//! Memtables and write batches.
//!
//! A memtable holds the operations committed since the last rotation, in RAM only (no
//! on-device format: a memtable is rebuilt from its log after a crash). Every committed
//! operation gets the next sequence number, so an iterator or a read that started at
//! sequence `s` sees exactly the operations up to `s`, even while later writes go into the
//! same memtable. When the active memtable is full it becomes the immutable memtable and is
//! flushed to a level-0 table.
//!
//! In-memory format: an ordered map (`BTreeMap`) from the user key — the bytes alone, in the
//! vector the write batch brought, so an insert copies nothing — to that key's versions,
//! newest first: the newest `(sequence, value or tombstone)` inline, older ones in a vector
//! kept oldest first so that a write appends and a reader walks it backwards.
//!
//! Visibility rule: a read at snapshot `s` sees, for each key, the version with the highest
//! sequence number ≤ `s`; a key all of whose versions are newer than `s` is absent at `s`,
//! and a tombstone hides the key (and every older source). A point read is one seek by the
//! borrowed key (`[u8]` comparisons, no search key built, nothing allocated but the value
//! it returns), then a walk of that key's versions — usually just the inline one.
//!
//! Beside the map, a bloom filter of the keys (a sixteenth of the write buffer, filled as
//! keys go in, charged to the memtables' RAM) answers most point reads of a key the memtable
//! does not hold without searching the map.
//!
//! Why this and not a map keyed by `(key, Reverse(sequence))` or a skiplist: the composite
//! key forced every probe to allocate an owned search key and to compare sequence numbers
//! alongside the bytes, and every version of a hot key took a tree node of its own; a
//! skiplist costs a pointer chase (a cache miss) per comparison where a B-tree node holds
//! eleven keys side by side, and this crate forbids the `unsafe` an arena skiplist would
//! need for lock-free readers, which the engine does not need anyway (the writer holds the
//! map's write lock only for the insert itself).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::ops::Bound;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::coding::{Reader, put_bytes, put_varint, varint_len};
use crate::error::Result;
use crate::sstable::bloom::key_hash;

/// A value or a tombstone (`None`).
pub type Value = Option<Vec<u8>>;

/// Bytes a memtable entry is charged beyond its key and value (map node, sequence, vectors).
pub const ENTRY_OVERHEAD: usize = 64;

/// An atomic group of puts and deletes: all of it survives a crash or none of it.
///
/// Encoding (inside a log record): `count varint`, then per operation `tag u8` (1 put,
/// 0 delete), `key` (varint length + bytes), and for a put `value` (varint length + bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<(Vec<u8>, Value)>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push((key.into(), Some(value.into())));
        self
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push((key.into(), None));
        self
    }

    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Bytes of the batch's encoding (what [`encode`](Self::encode) appends).
    pub(crate) fn encoded_len(&self) -> usize {
        let mut n = varint_len(self.ops.len() as u64);
        for (k, v) in &self.ops {
            n += 1 + varint_len(k.len() as u64) + k.len();
            if let Some(v) = v {
                n += varint_len(v.len() as u64) + v.len();
            }
        }
        n
    }

    /// Appends the batch's encoding.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.ops.len() as u64);
        for (k, v) in &self.ops {
            out.push(u8::from(v.is_some()));
            put_bytes(out, k);
            if let Some(v) = v {
                put_bytes(out, v);
            }
        }
    }

    /// Reads one batch.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let n = r.varint()?;
        if n > r.remaining() as u64 {
            return Err(r.bad("operation count beyond the record"));
        }
        let mut ops = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let tag = r.u8()?;
            let k = r.bytes()?.to_vec();
            let v = match tag {
                0 => None,
                1 => Some(r.bytes()?.to_vec()),
                _ => return Err(r.bad("unknown operation tag")),
            };
            ops.push((k, v));
        }
        Ok(WriteBatch { ops })
    }
}

/// The versions of one key, newest first: the newest inline (a key written once in a
/// memtable, the common case, costs no second allocation), older ones in `older`.
#[derive(Debug)]
struct Versions {
    /// Sequence number of the newest version.
    seq: u64,
    /// The newest version.
    value: Value,
    /// Older versions, oldest first (a new version pushes the previous newest at the end,
    /// so a key rewritten many times costs O(1) per write; readers walk it backwards).
    older: Vec<(u64, Value)>,
}

impl Versions {
    /// The newest version with a sequence number ≤ `snap`, if any.
    fn at(&self, snap: u64) -> Option<&Value> {
        if self.seq <= snap {
            return Some(&self.value);
        }
        self.older
            .iter()
            .rev()
            .find(|(s, _)| *s <= snap)
            .map(|(_, v)| v)
    }
}

type Map = BTreeMap<Vec<u8>, Versions>;

/// Probes of the memtable filter.
const FILTER_PROBES: u64 = 3;

/// A bloom filter over the keys in a memtable, filled as keys go in: a point read of a key
/// the memtable does not hold — most reads, once the data outgrows the memtables — costs a
/// hash and three bit tests instead of a tree search. Its size is fixed when the memtable is
/// made (a power of two of bits; no filter at all: every key "may" be there).
#[derive(Debug, Default)]
struct Filter {
    words: Vec<u64>,
}

impl Filter {
    fn with_bytes(bytes: usize) -> Self {
        let words = if bytes == 0 {
            0
        } else {
            (bytes / 8).next_power_of_two()
        };
        Filter {
            words: vec![0; words],
        }
    }

    fn bits(h: u64, words: usize) -> impl Iterator<Item = (usize, u64)> {
        let mask = (words as u64 * 64).wrapping_sub(1);
        let (h1, h2) = (h, (h >> 32) | 1);
        (0..FILTER_PROBES).map(move |i| {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) & mask;
            ((bit / 64) as usize, 1u64 << (bit % 64))
        })
    }

    fn add(&mut self, key: &[u8]) {
        if self.words.is_empty() {
            return;
        }
        for (w, b) in Self::bits(key_hash(key), self.words.len()) {
            self.words[w] |= b;
        }
    }

    #[cfg(test)]
    fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(key_hash(key))
    }

    /// Whether a key whose [`key_hash`] is `h` may be in the map (false: certainly not).
    fn may_contain_hash(&self, h: u64) -> bool {
        self.words.is_empty()
            || Self::bits(h, self.words.len()).all(|(w, b)| self.words[w] & b != 0)
    }
}

/// The map and its filter, under one lock.
#[derive(Debug, Default)]
struct Inner {
    map: Map,
    filter: Filter,
}

fn insert_into(inner: &mut Inner, seq: u64, key: Vec<u8>, value: Value) {
    match inner.map.entry(key) {
        Entry::Vacant(e) => {
            inner.filter.add(e.key());
            e.insert(Versions {
                seq,
                value,
                older: Vec::new(),
            });
        }
        Entry::Occupied(mut e) => {
            let v = e.get_mut();
            let old_seq = std::mem::replace(&mut v.seq, seq);
            let old = std::mem::replace(&mut v.value, value);
            v.older.push((old_seq, old));
        }
    }
}

/// A memtable (see the module docs). Shared between the writer and readers.
#[derive(Debug, Default)]
pub struct Memtable {
    inner: RwLock<Inner>,
    bytes: AtomicUsize,
    filter_bytes: usize,
}

impl Memtable {
    /// An empty memtable without a key filter.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty memtable with a key filter of about `filter_bytes` bytes (rounded to a power
    /// of two; 0: none).
    pub fn with_filter(filter_bytes: usize) -> Self {
        let filter = Filter::with_bytes(filter_bytes);
        Memtable {
            filter_bytes: filter.words.len() * 8,
            inner: RwLock::new(Inner {
                map: Map::new(),
                filter,
            }),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Bytes of its key filter (RAM besides what [`bytes`](Self::bytes) counts).
    pub fn filter_bytes(&self) -> usize {
        self.filter_bytes
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one operation with sequence number `seq`, which must be higher than that of
    /// every operation already in the memtable. The key and value are moved in: a new key
    /// is stored in the vector it came in, a known key's vector is dropped.
    pub fn insert(&self, seq: u64, key: Vec<u8>, value: Value) {
        let charge = key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
        let mut m = self.write();
        insert_into(&mut m, seq, key, value);
        drop(m);
        self.bytes.fetch_add(charge, Ordering::Relaxed);
    }

    /// Adds operations in order, numbered from `*seq + 1` on (`*seq` ends at the last one's
    /// number), under one lock; the keys and values are moved in as by
    /// [`insert`](Self::insert).
    pub fn insert_all(&self, seq: &mut u64, ops: impl IntoIterator<Item = (Vec<u8>, Value)>) {
        let mut charge = 0;
        let mut m = self.write();
        for (key, value) in ops {
            *seq += 1;
            charge += key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
            insert_into(&mut m, *seq, key, value);
        }
        drop(m);
        self.bytes.fetch_add(charge, Ordering::Relaxed);
    }

    /// Bytes charged to this memtable.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.read().map.is_empty()
    }

    /// Calls `f` with the newest version of `key` at sequence `snap` and returns what it
    /// returns: `None` if the memtable does not know the key at `snap`, `Some(None)` for a
    /// tombstone. One seek, no allocation.
    pub fn get_with<T>(
        &self,
        key: &[u8],
        snap: u64,
        f: impl FnOnce(Option<&[u8]>) -> T,
    ) -> Option<T> {
        self.get_with_hash(key, key_hash(key), snap, f)
    }

    /// [`get_with`](Self::get_with) for a key whose [`key_hash`] the caller has (a read
    /// that goes on to the tables' filters hashes the key once).
    pub fn get_with_hash<T>(
        &self,
        key: &[u8],
        hash: u64,
        snap: u64,
        f: impl FnOnce(Option<&[u8]>) -> T,
    ) -> Option<T> {
        let m = self.read();
        if !m.filter.may_contain_hash(hash) {
            return None;
        }
        let v = m.map.get(key)?.at(snap)?;
        Some(f(v.as_deref()))
    }

    /// The newest version of `key` at sequence `snap`: `None` if the memtable does not know
    /// the key, `Some(None)` for a tombstone.
    pub fn get(&self, key: &[u8], snap: u64) -> Option<Value> {
        self.get_with(key, snap, |v| v.map(<[u8]>::to_vec))
    }

    /// Up to `n` keys after `from`, each with its newest version at `snap` (tombstones
    /// included), in key order.
    pub fn chunk(&self, from: Bound<&[u8]>, snap: u64, n: usize) -> Vec<(Vec<u8>, Value)> {
        let mut out: Vec<(Vec<u8>, Value)> = Vec::new();
        self.chunk_with(from, snap, n, |k, v| {
            out.push((k.to_vec(), v.map(<[u8]>::to_vec)));
        });
        out
    }

    /// Calls `f` on the first `n` keys from `from` on with their newest version at `snap`
    /// (tombstones included), in key order, under one lock and without copying: what
    /// [`chunk`](Self::chunk) copies out, borrowed. Returns how many it visited.
    pub fn chunk_with(
        &self,
        from: Bound<&[u8]>,
        snap: u64,
        n: usize,
        mut f: impl FnMut(&[u8], Option<&[u8]>),
    ) -> usize {
        let m = self.read();
        let mut seen = 0;
        for (k, versions) in m.map.range::<[u8], _>((from, Bound::Unbounded)) {
            let Some(v) = versions.at(snap) else {
                continue;
            };
            if seen == n {
                break;
            }
            f(k, v.as_deref());
            seen += 1;
        }
        seen
    }

    /// Calls `f` on each key in `lo..hi` with its newest version at `snap` (tombstones
    /// included), in key order, under one lock and without copying (for short ranges).
    pub fn range_with(
        &self,
        lo: &[u8],
        hi: &[u8],
        snap: u64,
        mut f: impl FnMut(&[u8], Option<&[u8]>),
    ) {
        if hi <= lo {
            return; // an empty range (BTreeMap::range would panic)
        }
        let m = self.read();
        // One descent to `lo` (a range with both bounds would search for `hi` too).
        for (k, versions) in m
            .map
            .range::<[u8], _>((Bound::Included(lo), Bound::Unbounded))
        {
            if k.as_slice() >= hi {
                break;
            }
            if let Some(v) = versions.at(snap) {
                f(k, v.as_deref());
            }
        }
    }

    /// Calls `f` on each key in `lo..hi` (`hi` `None`: no upper bound) with its newest
    /// version at `snap` (tombstones included), in descending key order, under one lock and
    /// without copying, until `f` returns `false` (for reads from the high end of a range).
    pub fn range_back_with(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        snap: u64,
        mut f: impl FnMut(&[u8], Option<&[u8]>) -> bool,
    ) {
        if hi.is_some_and(|h| h <= lo) {
            return; // an empty range (BTreeMap::range would panic)
        }
        let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
        let m = self.read();
        for (k, versions) in m.map.range::<[u8], _>((Bound::Included(lo), upper)).rev() {
            if let Some(v) = versions.at(snap)
                && !f(k, v.as_deref())
            {
                return;
            }
        }
    }

    /// Calls `f` on every key's newest version, in key order (for a flush), and stops at
    /// the first error.
    pub fn for_each_newest<E>(
        &self,
        mut f: impl FnMut(&[u8], Option<&[u8]>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let m = self.read();
        for (k, v) in m.map.iter() {
            f(k, v.value.as_deref())?;
        }
        Ok(())
    }

    /// Every key's newest version.
    pub fn all(&self) -> Vec<(Vec<u8>, Value)> {
        self.chunk(Bound::Unbounded, u64::MAX, usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn snapshots_hide_later_versions() {
        let m = Memtable::new();
        m.insert(1, b"a".to_vec(), Some(b"1".to_vec()));
        m.insert(2, b"a".to_vec(), Some(b"2".to_vec()));
        m.insert(3, b"b".to_vec(), None);
        assert_eq!(m.get(b"a", 1), Some(Some(b"1".to_vec())));
        assert_eq!(m.get(b"a", 5), Some(Some(b"2".to_vec())));
        assert_eq!(m.get(b"b", 2), None);
        assert_eq!(m.get(b"b", 3), Some(None));
        let c = m.chunk(Bound::Unbounded, 2, 10);
        assert_eq!(c, vec![(b"a".to_vec(), Some(b"2".to_vec()))]);
        let c = m.chunk(Bound::Excluded(b"a"), 9, 10);
        assert_eq!(c, vec![(b"b".to_vec(), None)]);
    }

    /// Random writes to a few keys against a plain list of every version: every point read
    /// and every chunk at every snapshot agrees with the visibility rule.
    #[test]
    fn every_snapshot_sees_the_newest_version_at_or_below_it() {
        // No filter, a filter too small to say no to much, and a roomy one.
        for filter in [0, 8, 4096] {
            snapshots_with_filter(filter);
        }
    }

    fn snapshots_with_filter(filter: usize) {
        let m = Memtable::with_filter(filter);
        assert_eq!(m.filter_bytes(), filter);
        let mut log: Vec<(Vec<u8>, u64, Value)> = Vec::new();
        let mut rng = ember_device::SplitMix64::new(11);
        for seq in 1..=400u64 {
            let k = format!("k{}", rng.below(12)).into_bytes();
            let v = (rng.below(4) != 0).then(|| seq.to_le_bytes().to_vec());
            m.insert(seq, k.clone(), v.clone());
            log.push((k, seq, v));
        }
        let want_at = |key: &[u8], snap: u64| -> Option<Value> {
            log.iter()
                .filter(|(k, s, _)| k == key && *s <= snap)
                .max_by_key(|(_, s, _)| *s)
                .map(|(_, _, v)| v.clone())
        };
        let mut keys: Vec<Vec<u8>> = log.iter().map(|(k, _, _)| k.clone()).collect();
        keys.sort();
        keys.dedup();
        for snap in [0, 1, 2, 7, 50, 199, 200, 333, 399, 400, u64::MAX] {
            let mut want_chunk = Vec::new();
            for k in &keys {
                assert_eq!(m.get(k, snap), want_at(k, snap), "key {k:?} at {snap}");
                if let Some(v) = want_at(k, snap) {
                    want_chunk.push((k.clone(), v));
                }
            }
            assert_eq!(m.get(b"missing", snap), None);
            for i in 0..200u32 {
                assert_eq!(m.get(&i.to_be_bytes(), snap), None);
            }
            assert_eq!(m.chunk(Bound::Unbounded, snap, usize::MAX), want_chunk);
            // Chunks of three, each starting after the last key of the one before.
            let mut got = Vec::new();
            let mut from: Option<Vec<u8>> = None;
            loop {
                let b = from.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                let c = m.chunk(b, snap, 3);
                assert!(c.len() <= 3);
                let Some((last, _)) = c.last() else { break };
                from = Some(last.clone());
                got.extend(c);
            }
            assert_eq!(got, want_chunk, "chunked at {snap}");
        }
        if filter >= 4096 {
            // The filter answers most absent keys by itself.
            let passed = (0..10_000u32)
                .filter(|i| m.read().filter.may_contain(&i.to_be_bytes()))
                .count();
            assert!(
                passed < 100,
                "{passed} of 10,000 absent keys passed the filter"
            );
        }
        let mut newest = Vec::new();
        m.for_each_newest(|k, v| {
            newest.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(newest, m.all());
        assert_eq!(newest.len(), keys.len());
    }

    #[test]
    fn batches_round_trip() {
        let mut b = WriteBatch::new();
        b.put("k", "v")
            .delete("x")
            .put(vec![7u8; 200], vec![9u8; 20_000]);
        let mut out = Vec::new();
        b.encode(&mut out);
        assert_eq!(out.len(), b.encoded_len());
        assert_eq!(WriteBatch::new().encoded_len(), 1);
        let mut r = Reader::new(&out, "t", 0, 0);
        assert_eq!(WriteBatch::decode(&mut r).unwrap(), b);
    }
}
