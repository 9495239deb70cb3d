//! A bounded LRU cache of decoded blocks: data blocks of every level, and the index blocks
//! and bloom filters of tables below the pinned levels. Its limit is whatever the memory
//! budget leaves after the memtables and the pinned metadata.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::sstable::Index;
use crate::sstable::block::DataBlock;
use crate::sstable::bloom::Bloom;

/// A cached, decoded block.
#[derive(Debug, Clone)]
pub enum Cached {
    /// A data block.
    Data(Arc<DataBlock>),
    /// An index block.
    Index(Arc<Index>),
    /// A bloom filter.
    Bloom(Arc<Bloom>),
}

/// (table id, block offset).
pub type Key = (u64, u64);

/// The cache (see the module docs).
#[derive(Debug, Default)]
pub struct Cache {
    map: HashMap<Key, (Cached, usize, u64)>,
    lru: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
}

impl Cache {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Looks a block up (and marks it used).
    pub fn get(&mut self, key: Key) -> Option<Cached> {
        let (v, _, t) = self.map.get_mut(&key)?;
        self.lru.remove(t);
        self.tick += 1;
        *t = self.tick;
        self.lru.insert(self.tick, key);
        Some(v.clone())
    }

    /// Evicts the least recently used blocks until at most `limit` bytes are held.
    pub fn shrink_to(&mut self, limit: usize) {
        while self.bytes > limit {
            let Some((_, key)) = self.lru.pop_first() else {
                break;
            };
            if let Some((_, charge, _)) = self.map.remove(&key) {
                self.bytes -= charge;
            }
        }
    }

    /// Adds a block charged `charge` bytes, keeping the total within `limit` (a block larger
    /// than the limit is not kept).
    pub fn insert(&mut self, key: Key, value: Cached, charge: usize, limit: usize) {
        if let Some((_, c, t)) = self.map.remove(&key) {
            self.lru.remove(&t);
            self.bytes -= c;
        }
        if charge > limit {
            self.shrink_to(limit);
            return;
        }
        self.shrink_to(limit - charge);
        self.tick += 1;
        self.map.insert(key, (value, charge, self.tick));
        self.lru.insert(self.tick, key);
        self.bytes += charge;
    }
}
