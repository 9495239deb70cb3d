//! The block buffer (LUNAR §3.3, "Buffer" module): data blocks in RAM.
//!
//! Blocks with changes not yet written always stay in RAM. The basic engine keeps nothing
//! else: a clean block is dropped as soon as the operation that read it ends, so the engine's
//! RAM is its dirty blocks and indexes. With the `buffer` feature, clean blocks stay too,
//! least recently used out first, within a byte budget ([`Options::buffer_bytes`]).
//!
//! [`Options::buffer_bytes`]: crate::Options::buffer_bytes

#[cfg(feature = "buffer")]
use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};

use crate::allocator::BlockRef;
use crate::slotted::SlottedBlock;

/// Blocks in RAM (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    blocks: BTreeMap<BlockRef, SlottedBlock>,
    /// Bytes of all blocks held (clean or not).
    total: usize,
    /// Without the buffer module: blocks used since the last eviction (the only ones that
    /// can be clean and held).
    #[cfg(not(feature = "buffer"))]
    recent: Vec<BlockRef>,
    #[cfg(feature = "buffer")]
    lru: Lru,
}

/// Recency of use, for the `buffer` feature.
#[cfg(feature = "buffer")]
#[derive(Debug, Default)]
struct Lru {
    tick: u64,
    stamp: HashMap<BlockRef, u64>,
    order: BTreeMap<u64, BlockRef>,
}

#[cfg(feature = "buffer")]
impl Lru {
    fn touch(&mut self, b: BlockRef) {
        self.tick += 1;
        if let Some(old) = self.stamp.insert(b, self.tick) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, b);
    }

    fn forget(&mut self, b: BlockRef) {
        if let Some(old) = self.stamp.remove(&b) {
            self.order.remove(&old);
        }
    }
}

impl Buffer {
    pub(crate) fn contains(&self, b: &BlockRef) -> bool {
        self.blocks.contains_key(b)
    }

    pub(crate) fn get_mut(&mut self, b: &BlockRef) -> Option<&mut SlottedBlock> {
        #[cfg(feature = "buffer")]
        if self.blocks.contains_key(b) {
            self.lru.touch(*b);
        }
        #[cfg(not(feature = "buffer"))]
        self.recent.push(*b);
        self.blocks.get_mut(b)
    }

    pub(crate) fn insert(&mut self, b: BlockRef, block: SlottedBlock) {
        #[cfg(feature = "buffer")]
        self.lru.touch(b);
        #[cfg(not(feature = "buffer"))]
        self.recent.push(b);
        self.total += block.size();
        if let Some(old) = self.blocks.insert(b, block) {
            self.total -= old.size();
        }
    }

    pub(crate) fn remove(&mut self, b: &BlockRef) {
        #[cfg(feature = "buffer")]
        self.lru.forget(*b);
        if let Some(old) = self.blocks.remove(b) {
            self.total -= old.size();
        }
    }

    /// Every block in RAM, in address order.
    pub(crate) fn keys(&self) -> Vec<BlockRef> {
        self.blocks.keys().copied().collect()
    }

    /// Bytes of the blocks in RAM.
    pub(crate) fn bytes(&self) -> usize {
        self.total
    }

    /// Drops clean blocks not in `busy`: all of them, or with the `buffer` feature the least
    /// recently used until the clean ones fit `budget` bytes. `all` looks at every block
    /// (after a checkpoint cleaned them); otherwise only at what the last operations used.
    pub(crate) fn evict(&mut self, busy: &BTreeSet<BlockRef>, budget: usize, all: bool) {
        #[cfg(not(feature = "buffer"))]
        {
            let _ = budget;
            let look: Vec<BlockRef> = if all {
                self.recent.clear();
                self.keys()
            } else {
                core::mem::take(&mut self.recent)
            };
            for b in look {
                if self.blocks.get(&b).is_some_and(|blk| blk.is_clean()) && !busy.contains(&b) {
                    self.remove(&b);
                }
            }
        }
        #[cfg(feature = "buffer")]
        {
            let _ = all;
            // Everything held fits: nothing to look at.
            if self.total <= budget {
                return;
            }
            let mut clean: usize = self
                .blocks
                .iter()
                .filter(|(b, blk)| blk.is_clean() && !busy.contains(b))
                .map(|(_, blk)| blk.size())
                .sum();
            let mut victims = Vec::new();
            for b in self.lru.order.values() {
                if clean <= budget {
                    break;
                }
                if let Some(blk) = self.blocks.get(b) {
                    if blk.is_clean() && !busy.contains(b) {
                        clean -= blk.size();
                        victims.push(*b);
                    }
                }
            }
            for v in victims {
                self.remove(&v);
            }
        }
    }
}
