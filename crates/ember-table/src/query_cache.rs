//! The query cache (LUNAR §3.3, "Query Cache" module, the `query-cache` feature): rows of
//! recent point lookups, by table and key, within a byte budget; oldest out first.
//!
//! A write to a key drops its entry at once; dropping a table drops its entries; a rollback
//! empties the cache (it may hold rows the rolled-back transaction wrote).

use std::collections::{HashMap, VecDeque};

use crate::row::Value;

type Key = (u64, Vec<u8>);

/// Cached rows (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct QueryCache {
    rows: HashMap<Key, (Vec<Value>, usize)>,
    order: VecDeque<Key>,
    bytes: usize,
    hits: u64,
    misses: u64,
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
            .rows
            .get(&(table, key.to_vec()))
            .map(|(r, _)| r.clone());
        if hit.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
    }

    pub(crate) fn put(&mut self, table: u64, key: &[u8], row: &[Value], budget: usize) {
        let w = weight(key, row);
        if w > budget {
            return;
        }
        self.invalidate(table, key);
        while self.bytes + w > budget {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((_, ow)) = self.rows.remove(&old) {
                self.bytes -= ow;
            }
        }
        let k = (table, key.to_vec());
        self.order.push_back(k.clone());
        self.rows.insert(k, (row.to_vec(), w));
        self.bytes += w;
    }

    pub(crate) fn invalidate(&mut self, table: u64, key: &[u8]) {
        if let Some((_, w)) = self.rows.remove(&(table, key.to_vec())) {
            self.bytes -= w;
            // The stale queue entry is skipped when it comes up.
        }
    }

    pub(crate) fn invalidate_table(&mut self, table: u64) {
        let keys: Vec<Key> = self.rows.keys().filter(|k| k.0 == table).cloned().collect();
        for k in keys {
            self.invalidate(k.0, &k.1);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        self.order.clear();
        self.bytes = 0;
    }

    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}
