//! Memtables and write batches.
//!
//! A memtable is an ordered map from (key, sequence number, newest first) to a value or a
//! tombstone. Every committed operation gets the next sequence number, so an iterator or a
//! read that started at sequence `s` sees exactly the operations up to `s`, even while later
//! writes go into the same memtable. When the active memtable is full it becomes the
//! immutable memtable and is flushed to a level-0 table.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::coding::{Reader, put_bytes, put_varint};
use crate::error::Result;

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

type Map = BTreeMap<(Vec<u8>, Reverse<u64>), Value>;

/// A memtable (see the module docs). Shared between the writer and readers.
#[derive(Debug, Default)]
pub struct Memtable {
    map: RwLock<Map>,
    bytes: AtomicUsize,
}

impl Memtable {
    /// An empty memtable.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one operation with sequence number `seq`.
    pub fn insert(&self, seq: u64, key: &[u8], value: Value) {
        let charge = key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        m.insert((key.to_vec(), Reverse(seq)), value);
        self.bytes.fetch_add(charge, Ordering::Relaxed);
    }

    /// Bytes charged to this memtable.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The newest version of `key` at sequence `snap`: `None` if the memtable does not know
    /// the key, `Some(None)` for a tombstone.
    pub fn get(&self, key: &[u8], snap: u64) -> Option<Value> {
        let m = self.read();
        let from = (key.to_vec(), Reverse(snap));
        let ((k, _), v) = m.range(from..).next()?;
        (k.as_slice() == key).then(|| v.clone())
    }

    /// Up to `n` keys after `from`, each with its newest version at `snap` (tombstones
    /// included), in key order.
    pub fn chunk(&self, from: Bound<&[u8]>, snap: u64, n: usize) -> Vec<(Vec<u8>, Value)> {
        let m = self.read();
        let start = match from {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(k) => Bound::Included((k.to_vec(), Reverse(u64::MAX))),
            // Every version of `k` sorts before (k, Reverse(0)) or equals it.
            Bound::Excluded(k) => Bound::Excluded((k.to_vec(), Reverse(0))),
        };
        let mut out: Vec<(Vec<u8>, Value)> = Vec::new();
        for ((k, Reverse(seq)), v) in m.range((start, Bound::Unbounded)) {
            if *seq > snap || out.last().is_some_and(|(l, _)| l == k) {
                continue;
            }
            if out.len() == n {
                break;
            }
            out.push((k.clone(), v.clone()));
        }
        out
    }

    /// Every key's newest version (for a flush).
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
        m.insert(1, b"a", Some(b"1".to_vec()));
        m.insert(2, b"a", Some(b"2".to_vec()));
        m.insert(3, b"b", None);
        assert_eq!(m.get(b"a", 1), Some(Some(b"1".to_vec())));
        assert_eq!(m.get(b"a", 5), Some(Some(b"2".to_vec())));
        assert_eq!(m.get(b"b", 2), None);
        assert_eq!(m.get(b"b", 3), Some(None));
        let c = m.chunk(Bound::Unbounded, 2, 10);
        assert_eq!(c, vec![(b"a".to_vec(), Some(b"2".to_vec()))]);
        let c = m.chunk(Bound::Excluded(b"a"), 9, 10);
        assert_eq!(c, vec![(b"b".to_vec(), None)]);
    }

    #[test]
    fn batches_round_trip() {
        let mut b = WriteBatch::new();
        b.put("k", "v").delete("x");
        let mut out = Vec::new();
        b.encode(&mut out);
        let mut r = Reader::new(&out, "t", 0, 0);
        assert_eq!(WriteBatch::decode(&mut r).unwrap(), b);
    }
}
