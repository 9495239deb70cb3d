//! The query cache (LUNAR §3.3, "Query Cache" module, the `query-cache` feature): rows of
//! recent point lookups, by table and key, within a byte budget; oldest out first.
//!
//! The engine offers it only rows it had to read from the device: a row whose block is in
//! the buffer is as quick to decode from there. And it keeps a row the second time its
//! key misses recently, not the first ([`Doorkeeper`]): a row is kept as owned values, which
//! costs an allocation per text or blob and an eviction soon after, and a stream of one-off
//! reads (uniform random keys) spent a tenth of a YCSB read doing that for rows never read
//! again. A write to a key drops its entry at once;
//! dropping a table drops its entries; a rollback empties the cache (it may hold rows the
//! rolled-back transaction wrote).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use crate::doorkeeper::Doorkeeper;
use crate::row::Value;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug)]
struct Cached {
    row: Vec<Value>,
    weight: usize,
    /// Which insertion this is, to tell its queue entry from stale ones.
    stamp: u64,
}

/// Cached rows (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct QueryCache {
    tables: Map<u64, Map<Vec<u8>, Cached>>,
    /// Insertion order: (table, key, stamp); entries whose stamp no longer matches are stale.
    order: VecDeque<(u64, Vec<u8>, u64)>,
    live: usize,
    bytes: usize,
    next_stamp: u64,
    hits: u64,
    misses: u64,
    /// Keys that missed once recently, sized for the budget it was made for.
    door: Option<(usize, Doorkeeper)>,
    hasher: foldhash::fast::RandomState,
}

fn weight(key: &[u8], row: &[Value]) -> usize {
    let values: usize = row
        .iter()
        .map(|v| match v {
            Value::Text(t) => t.len(),
            Value::Blob(b) => b.len(),
            _ => 8,
        })
        .sum();
    64 + key.len() + values
}

impl QueryCache {
    pub(crate) fn get(&mut self, table: u64, key: &[u8]) -> Option<Vec<Value>> {
        let hit = self
            .tables
            .get(&table)
            .and_then(|t| t.get(key))
            .map(|c| c.row.clone());
        if hit.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
    }

    /// Whether the row of `key`, which just missed, should be [put](Self::put): yes if it
    /// missed recently already (see the module docs).
    pub(crate) fn admit(&mut self, table: u64, key: &[u8], budget: usize) -> bool {
        // Four bits per row of the smallest weight the budget holds.
        let bits = budget / 64 * 4;
        let door = match &mut self.door {
            Some((b, d)) if *b == bits => d,
            door => &mut door.insert((bits, Doorkeeper::with_bits(bits))).1,
        };
        door.admit(self.hasher.hash_one((table, key)))
    }

    pub(crate) fn put(&mut self, table: u64, key: &[u8], row: &[Value], budget: usize) {
        let w = weight(key, row);
        if w > budget {
            return;
        }
        self.invalidate(table, key);
        while self.bytes + w > budget {
            let Some((t, k, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.stamp_of(t, &k) == Some(stamp) {
                self.invalidate(t, &k);
            }
        }
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        self.order.push_back((table, key.to_vec(), stamp));
        self.tables.entry(table).or_default().insert(
            key.to_vec(),
            Cached {
                row: row.to_vec(),
                weight: w,
                stamp,
            },
        );
        self.bytes += w;
        self.live += 1;
        // Keep the queue from filling with stale entries.
        if self.order.len() > 2 * self.live + 64 {
            let tables = &self.tables;
            self.order.retain(|(t, k, s)| {
                tables.get(t).and_then(|m| m.get(k)).map(|c| c.stamp) == Some(*s)
            });
        }
    }

    fn stamp_of(&self, table: u64, key: &[u8]) -> Option<u64> {
        self.tables.get(&table)?.get(key).map(|c| c.stamp)
    }

    pub(crate) fn invalidate(&mut self, table: u64, key: &[u8]) {
        if let Some(c) = self.tables.get_mut(&table).and_then(|t| t.remove(key)) {
            self.bytes -= c.weight;
            self.live -= 1;
        }
    }

    pub(crate) fn invalidate_table(&mut self, table: u64) {
        if let Some(t) = self.tables.remove(&table) {
            for c in t.values() {
                self.bytes -= c.weight;
                self.live -= 1;
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.tables.clear();
        self.order.clear();
        self.bytes = 0;
        self.live = 0;
    }

    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_on_its_second_recent_miss() {
        let mut q = QueryCache::default();
        assert!(!q.admit(1, b"k", 1 << 20));
        assert!(!q.admit(2, b"k", 1 << 20), "another table's key");
        assert!(q.admit(1, b"k", 1 << 20));
        assert!(q.admit(2, b"k", 1 << 20));
        // A new budget starts over.
        assert!(!q.admit(1, b"k", 1 << 21));
    }

    #[test]
    fn budget_holds_and_invalidation_is_exact() {
        let mut q = QueryCache::default();
        let row = vec![Value::Integer(1)];
        let w = weight(b"k0", &row);
        for i in 0..10u8 {
            q.put(1, &[b'k', b'0' + i], &row, 3 * w);
        }
        assert!(q.bytes <= 3 * w);
        assert_eq!(q.live, 3);
        assert!(q.get(1, b"k9").is_some());
        assert!(q.get(1, b"k0").is_none());
        q.invalidate(1, b"k9");
        assert!(q.get(1, b"k9").is_none());
        // Re-putting one key many times does not grow the queue without bound.
        for _ in 0..10_000 {
            q.put(1, b"k8", &row, 3 * w);
        }
        assert!(q.order.len() < 200);
        q.invalidate_table(1);
        assert_eq!((q.bytes, q.live), (0, 0));
        assert_eq!(q.stats().0, 1);
    }
}
