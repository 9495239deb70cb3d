//! The block buffer (LUNAR §3.3, "Buffer" module): data blocks in RAM.
//!
//! Blocks with changes not yet written home always stay in RAM (the engine says which, with
//! [`Buffer::mark_dirty`], and when a checkpoint has written them all). The basic engine keeps
//! nothing else: a clean block is dropped as soon as the operation that read it ends, so the
//! engine's RAM is its dirty blocks and indexes. With the `buffer` feature, clean blocks stay
//! too, least recently used out first, within a byte budget ([`Options::buffer_bytes`]).
//! Every operation costs O(1) plus the blocks it evicts.
//!
//! [`Options::buffer_bytes`]: crate::Options::buffer_bytes

use std::collections::{BTreeMap, HashSet};

use crate::allocator::BlockRef;
use crate::slotted::SlottedBlock;

/// Blocks in RAM (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    blocks: BTreeMap<BlockRef, SlottedBlock>,
    /// Bytes of all blocks held.
    total: usize,
    /// Blocks with changes not yet written home, and their bytes.
    dirty: HashSet<BlockRef>,
    dirty_bytes: usize,
    /// Clean blocks by recency of use: tick -> block, and block -> tick.
    order: BTreeMap<u64, BlockRef>,
    stamp: BTreeMap<BlockRef, u64>,
    tick: u64,
}

impl Buffer {
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

    pub(crate) fn contains(&self, b: &BlockRef) -> bool {
        self.blocks.contains_key(b)
    }

    pub(crate) fn get_mut(&mut self, b: &BlockRef) -> Option<&mut SlottedBlock> {
        if self.blocks.contains_key(b) && !self.dirty.contains(b) {
            self.touch(*b);
        }
        self.blocks.get_mut(b)
    }

    pub(crate) fn insert(&mut self, b: BlockRef, block: SlottedBlock) {
        let clean = block.is_clean();
        self.total += block.size();
        if let Some(old) = self.blocks.insert(b, block) {
            self.total -= old.size();
            if self.dirty.remove(&b) {
                self.dirty_bytes -= old.size();
            }
        }
        if clean {
            self.touch(b);
        } else {
            self.mark_dirty(b);
        }
    }

    /// The block has changes not yet written home: it stays until [`all_clean`](Self::all_clean).
    pub(crate) fn mark_dirty(&mut self, b: BlockRef) {
        let Some(size) = self.blocks.get(&b).map(SlottedBlock::size) else {
            return;
        };
        if self.dirty.insert(b) {
            self.dirty_bytes += size;
            self.forget(b);
        }
    }

    /// A checkpoint wrote every block home.
    pub(crate) fn all_clean(&mut self) {
        for b in std::mem::take(&mut self.dirty) {
            if self.blocks.contains_key(&b) {
                self.touch(b);
            }
        }
        self.dirty_bytes = 0;
    }

    pub(crate) fn remove(&mut self, b: &BlockRef) {
        self.forget(*b);
        if let Some(old) = self.blocks.remove(b) {
            self.total -= old.size();
            if self.dirty.remove(b) {
                self.dirty_bytes -= old.size();
            }
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

    /// Drops clean blocks, least recently used first, until the clean ones fit `budget`
    /// bytes (with the `buffer` feature) or none is left (without it).
    pub(crate) fn evict(&mut self, budget: usize) {
        let budget = if cfg!(feature = "buffer") { budget } else { 0 };
        while self.total - self.dirty_bytes > budget {
            let Some((_, b)) = self.order.pop_first() else {
                break;
            };
            self.stamp.remove(&b);
            if let Some(old) = self.blocks.remove(&b) {
                self.total -= old.size();
            }
        }
    }
}
