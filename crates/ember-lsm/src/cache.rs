//! A bounded LRU cache of decoded blocks: data blocks of every level, and the index blocks
//! and bloom filters of tables below the pinned levels. Its limit is whatever the memory
//! budget leaves after the memtables and the pinned metadata.
//!
//! A point read keeps a data block it missed only on the block's second miss in a while
//! ([`Cache::admit`], a doorkeeper as in TinyLFU): on a data set larger than the cache, most
//! blocks a random read meets are not met again before they would be evicted, and keeping
//! each cost an allocation, a copy and an eviction for nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::coding::IdHash;
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
///
/// Recency is a queue of `(tick, key)` uses, oldest first: a hit stamps its entry with a new
/// tick and queues it again, leaving the older use in the queue as a stale record that
/// eviction skips (its tick no longer matches the entry's). The queue is swept of stale
/// records when it grows past twice the entries, so each operation is O(1) amortized.
#[derive(Debug, Default)]
pub struct Cache {
    map: HashMap<Key, (Cached, usize, u64), IdHash>,
    lru: VecDeque<(u64, Key)>,
    tick: u64,
    /// Bytes of the blocks held.
    bytes: usize,
    door: Doorkeeper,
}

/// A bit per hash slot of the blocks missed lately, cleared once a quarter of the bits are
/// set: it remembers the last one to two times as many distinct misses as the cache holds
/// blocks of [`DOOR_BLOCK`] bytes (the bits are a power of two, 1,024 at least).
#[derive(Debug, Default)]
struct Doorkeeper {
    bits: Vec<u64>,
    set: usize,
}

/// The block size the doorkeeper is sized for: four bits (rounded up to a power of two) for
/// each block of this size the cache's limit holds.
const DOOR_BLOCK: usize = 4096;

/// The smallest doorkeeper, in 64-bit words; below eight times its size a cache limit has
/// none (every miss is kept, as the cache is too small to churn).
const DOOR_MIN_WORDS: usize = 16;

impl Doorkeeper {
    fn bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// Whether `key` was marked since the last clear; marks it. Sized to `limit` first (and
    /// resized, which clears it, only when `limit` calls for under half or over twice its
    /// bits, so a limit moving a little does not clear it).
    fn seen(&mut self, key: Key, limit: usize) -> bool {
        let words = (4 * (limit / DOOR_BLOCK))
            .next_power_of_two()
            .div_ceil(64)
            .max(DOOR_MIN_WORDS);
        let have = self.bits.len();
        if words > 2 * have || 2 * words < have {
            self.bits = vec![0; words];
            self.set = 0;
        }
        let words = self.bits.len();
        // A 64-bit mix of both halves (splitmix64's finalizer), so nearby offsets and
        // table ids spread.
        let mut h = key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.1;
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        let bit = (h as usize) & (words * 64 - 1);
        let (w, m) = (bit / 64, 1u64 << (bit % 64));
        if self.bits[w] & m != 0 {
            return true;
        }
        if self.set >= words * 16 {
            self.bits.iter_mut().for_each(|w| *w = 0);
            self.set = 0;
        }
        self.bits[w] |= m;
        self.set += 1;
        false
    }
}

impl Cache {
    /// Bytes held: the blocks, and the doorkeeper's bits.
    pub fn bytes(&self) -> usize {
        self.bytes + self.door.bytes()
    }

    /// Whether a data block a point read missed should be kept: `true` if it was missed
    /// (and not kept) lately, else it is remembered as missed now. Sized for a cache of
    /// `limit` bytes, whose doorkeeper's bits then count against it.
    pub fn admit(&mut self, key: Key, limit: usize) -> bool {
        if limit < 8 * 8 * DOOR_MIN_WORDS {
            return true;
        }
        let had = self.door.bytes();
        let seen = self.door.seen(key, limit);
        if self.door.bytes() > had {
            // Room for the bits.
            self.shrink_to(limit);
        }
        seen
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn touch(&mut self, key: Key) -> u64 {
        self.tick += 1;
        self.lru.push_back((self.tick, key));
        if self.lru.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            // The entry being touched carries its old tick until the caller stamps it.
            self.lru
                .retain(|(t, k)| *k == key || map.get(k).is_some_and(|e| e.2 == *t));
            // Keep only the newest record of `key` (the one just pushed).
            let newest = self.tick;
            self.lru.retain(|(t, k)| *k != key || *t == newest);
        }
        self.tick
    }

    /// Whether it holds a block (its recency unchanged).
    pub fn contains(&self, key: Key) -> bool {
        self.map.contains_key(&key)
    }

    /// Looks a block up (and marks it used).
    pub fn get(&mut self, key: Key) -> Option<Cached> {
        if !self.map.contains_key(&key) {
            return None;
        }
        let tick = self.touch(key);
        let (v, _, t) = self.map.get_mut(&key)?;
        *t = tick;
        Some(v.clone())
    }

    /// `f` on a block (marked used) where it lies, without cloning it; `None` if it is not
    /// held.
    pub fn with<T>(&mut self, key: Key, f: impl FnOnce(&Cached) -> T) -> Option<T> {
        if !self.map.contains_key(&key) {
            return None;
        }
        let tick = self.touch(key);
        let (v, _, t) = self.map.get_mut(&key)?;
        *t = tick;
        Some(f(v))
    }

    /// Evicts the least recently used blocks until at most `limit` bytes are held.
    pub fn shrink_to(&mut self, limit: usize) {
        let limit = limit.saturating_sub(self.door.bytes());
        while self.bytes > limit {
            let Some((t, key)) = self.lru.pop_front() else {
                break;
            };
            if self.map.get(&key).is_some_and(|e| e.2 == t)
                && let Some((_, charge, _)) = self.map.remove(&key)
            {
                self.bytes -= charge;
            }
        }
    }

    /// Adds a block charged `charge` bytes, keeping the total (the doorkeeper's bits too)
    /// within `limit`: a block larger than the limit less the bits is not kept.
    pub fn insert(&mut self, key: Key, value: Cached, charge: usize, limit: usize) {
        if let Some((_, c, _)) = self.map.remove(&key) {
            // Its queue records are stale now (no entry matches them).
            self.bytes -= c;
        }
        if charge.saturating_add(self.door.bytes()) > limit {
            self.shrink_to(limit);
            return;
        }
        self.shrink_to(limit - charge);
        let tick = self.touch(key);
        self.map.insert(key, (value, charge, tick));
        self.bytes += charge;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn block(n: u8) -> Cached {
        Cached::Bloom(Arc::new(
            Bloom::decode(&[1, n, 0, 0, 0, 0, 0, 0, 0], false, 0, 0).unwrap(),
        ))
    }

    fn held(c: &Cached) -> u8 {
        match c {
            Cached::Bloom(b) => b.encode()[1],
            _ => 0,
        }
    }

    /// A key is admitted on its second miss, forgotten after about as many distinct misses
    /// as the limit holds 4 KiB blocks, and the doorkeeper's bits count against the limit.
    #[test]
    fn the_doorkeeper_admits_a_second_miss_and_forgets_after_a_while() {
        let mut c = Cache::default();
        let limit = 1 << 20; // 256 blocks of 4 KiB: 1,024 bits, cleared at 256 set
        assert!(!c.admit((1, 0), limit));
        assert!(c.admit((1, 0), limit));
        assert!(c.admit((1, 0), limit));
        assert_eq!(c.bytes(), 128);
        // Distinct blocks are mostly turned away (a few share a bit with another), and the
        // first is still remembered after them (under a quarter of the bits are set).
        let admitted = (2..100u64)
            .filter(|&i| c.admit((i, 4096 * i), limit))
            .count();
        assert!(admitted < 15, "{admitted} of 98 admitted on a first miss");
        assert!(c.admit((1, 0), limit));
        // Fifty keys missed, then a window's worth of other misses: the fifty are forgotten
        // (but for the few whose bits were set again after the clear).
        for i in 0..50u64 {
            c.admit((3, 4096 * i), limit);
        }
        for i in 0..300u64 {
            c.admit((7, 4096 * i), limit);
        }
        let kept = (0..50u64)
            .filter(|&i| c.admit((3, 4096 * i), limit))
            .count();
        assert!(kept < 15, "{kept} of 50 remembered past the window");
        // Blocks and bits together stay within the limit.
        for i in 0..1000u64 {
            c.insert((9, i), block(1), 4096, limit);
            assert!(c.bytes() <= limit, "{} bytes held", c.bytes());
        }
        assert_eq!(c.len(), (limit - 128) / 4096);
        // A limit calling for twice the bits keeps them; four times resizes (and clears)
        // them (1,024 blocks: 4,096 bits), and half keeps them again.
        c.admit((1, 0), limit);
        assert!(c.admit((1, 0), 2 << 20));
        assert!(!c.admit((1, 0), 4 << 20));
        assert!(c.admit((1, 0), 4 << 20));
        assert_eq!(c.bytes() - c.len() * 4096, 512);
        assert!(c.admit((1, 0), 2 << 20));
        assert_eq!(c.bytes() - c.len() * 4096, 512);
        // Bits that need room make it: a cache full to its limit before it had any.
        let mut d = Cache::default();
        for i in 0..256u64 {
            d.insert((9, i), block(1), 4096, limit);
        }
        assert_eq!(d.bytes(), limit);
        assert!(!d.admit((1, 0), limit));
        assert_eq!((d.len(), d.bytes()), (255, limit - 4096 + 128));
        assert!(!c.admit((2, 0), 16 << 20));
        assert!(!c.admit((2, 0), limit));
        assert_eq!(c.bytes() - c.len() * 4096, 128);
        assert!(!c.admit((2, 0), 4 << 20));
        assert!(c.bytes() <= 4 << 20);
        c.insert((9, 5000), block(1), 4096, limit);
        assert!(c.bytes() <= limit, "{} bytes held", c.bytes());
        assert_eq!(c.len(), (limit - c.door.bytes()) / 4096);
        // Under 1 KiB, no doorkeeper: every miss is kept.
        assert!(c.admit((5, 5), 1000));
    }

    /// Against a plain list in recency order: the same blocks are evicted, in the same
    /// order, through many hits (which leave stale queue records behind) and re-inserts.
    #[test]
    fn evicts_the_least_recently_used_like_a_list_would() {
        let mut c = Cache::default();
        let mut model: Vec<(Key, u8, usize)> = Vec::new(); // oldest first
        let mut rng = ember_device::SplitMix64::new(5);
        let limit = 1000;
        for step in 0..20_000u64 {
            let key = (rng.below(40), 0);
            let n = (step % 250) as u8;
            if rng.below(3) == 0 {
                let charge = 50 + rng.below(100) as usize;
                c.insert(key, block(n), charge, limit);
                model.retain(|(k, _, _)| *k != key);
                model.push((key, n, charge));
                while model.iter().map(|e| e.2).sum::<usize>() > limit {
                    model.remove(0);
                }
            } else {
                let got = c.get(key).map(|v| held(&v));
                let want = model.iter().position(|(k, _, _)| *k == key).map(|i| {
                    let e = model.remove(i);
                    model.push(e);
                    e.1
                });
                assert_eq!(got, want, "step {step}");
            }
            assert_eq!(c.bytes(), model.iter().map(|e| e.2).sum::<usize>());
            assert_eq!(c.len(), model.len());
            assert!(c.lru.len() <= 2 * c.map.len() + 65);
        }
        c.shrink_to(0);
        assert!(c.is_empty());
        assert_eq!(c.bytes(), 0);
    }
}
