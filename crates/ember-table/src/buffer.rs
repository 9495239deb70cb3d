//! The block buffer (LUNAR §3.3, "Buffer" module): data blocks in RAM.
//!
//! Blocks with changes not yet written home always stay in RAM (the engine says which, with
//! [`Buffer::mark_dirty`], and when a checkpoint has written them all). The basic engine keeps
//! nothing else: a clean block is dropped as soon as the operation that read it ends, so the
//! engine's RAM is its dirty blocks and indexes. With the `buffer` feature, clean blocks stay
//! too, least recently used out first, within a byte budget ([`Options::buffer_bytes`]).
//!
//! Blocks live in a slab; a hash map finds a block's slot, and the clean blocks form a
//! doubly linked recency list through the slab (most recent at the head), so a lookup, a
//! touch and an eviction are O(1) and allocate nothing.
//!
//! [`Options::buffer_bytes`]: crate::Options::buffer_bytes

use std::collections::HashMap;

use crate::allocator::BlockRef;
use crate::slotted::SlottedBlock;

/// "No slot" in the recency links.
const NIL: usize = usize::MAX;

#[derive(Debug)]
struct Entry {
    at: BlockRef,
    block: SlottedBlock,
    dirty: bool,
    /// Recency links (clean blocks only; `NIL` at the ends and for dirty blocks).
    prev: usize,
    next: usize,
}

/// Blocks in RAM (see the module docs).
#[derive(Debug)]
pub(crate) struct Buffer {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    map: HashMap<BlockRef, usize, foldhash::fast::RandomState>,
    /// Bytes of all blocks held, and of the dirty ones.
    total: usize,
    dirty_bytes: usize,
    /// Most and least recently used clean blocks.
    head: usize,
    tail: usize,
}

impl Default for Buffer {
    fn default() -> Self {
        Buffer {
            slots: Vec::new(),
            free: Vec::new(),
            map: HashMap::default(),
            total: 0,
            dirty_bytes: 0,
            head: NIL,
            tail: NIL,
        }
    }
}

impl Buffer {
    fn entry(&mut self, i: usize) -> Option<&mut Entry> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// Takes a clean block out of the recency list.
    fn unlink(&mut self, i: usize) {
        let Some(e) = self.entry(i) else { return };
        let (p, n) = (e.prev, e.next);
        e.prev = NIL;
        e.next = NIL;
        match self.entry(p) {
            Some(pe) => pe.next = n,
            None => {
                if self.head == i {
                    self.head = n;
                }
            }
        }
        match self.entry(n) {
            Some(ne) => ne.prev = p,
            None => {
                if self.tail == i {
                    self.tail = p;
                }
            }
        }
    }

    /// Puts a clean block at the head of the recency list.
    fn push_front(&mut self, i: usize) {
        let old = self.head;
        if let Some(e) = self.entry(i) {
            e.prev = NIL;
            e.next = old;
        }
        match self.entry(old) {
            Some(h) => h.prev = i,
            None => self.tail = i,
        }
        self.head = i;
    }

    pub(crate) fn contains(&self, b: &BlockRef) -> bool {
        self.map.contains_key(b)
    }

    pub(crate) fn get_mut(&mut self, b: &BlockRef) -> Option<&mut SlottedBlock> {
        let i = *self.map.get(b)?;
        let dirty = self.entry(i)?.dirty;
        if !dirty && self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        self.entry(i).map(|e| &mut e.block)
    }

    pub(crate) fn insert(&mut self, b: BlockRef, block: SlottedBlock) {
        self.remove(&b);
        let dirty = !block.is_clean();
        let size = block.size();
        self.total += size;
        let e = Entry {
            at: b,
            block,
            dirty: false,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(e);
                i
            }
            None => {
                self.slots.push(Some(e));
                self.slots.len() - 1
            }
        };
        self.map.insert(b, i);
        self.push_front(i);
        if dirty {
            self.mark_dirty(b);
        }
    }

    /// The block has changes not yet written home: it stays until [`all_clean`](Self::all_clean).
    pub(crate) fn mark_dirty(&mut self, b: BlockRef) {
        let Some(&i) = self.map.get(&b) else { return };
        let Some(e) = self.entry(i) else { return };
        if e.dirty {
            return;
        }
        e.dirty = true;
        let size = e.block.size();
        self.dirty_bytes += size;
        self.unlink(i);
    }

    /// A checkpoint wrote every block home.
    pub(crate) fn all_clean(&mut self) {
        for i in 0..self.slots.len() {
            let Some(e) = self.entry(i) else { continue };
            if e.dirty {
                e.dirty = false;
                self.push_front(i);
            }
        }
        self.dirty_bytes = 0;
    }

    pub(crate) fn remove(&mut self, b: &BlockRef) {
        let Some(i) = self.map.remove(b) else { return };
        self.unlink(i);
        if let Some(e) = self.slots.get_mut(i).and_then(Option::take) {
            self.total -= e.block.size();
            if e.dirty {
                self.dirty_bytes -= e.block.size();
            }
            self.free.push(i);
        }
    }

    /// Every block in RAM, in address order.
    pub(crate) fn keys(&self) -> Vec<BlockRef> {
        let mut k: Vec<BlockRef> = self.map.keys().copied().collect();
        k.sort_unstable();
        k
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
            let t = self.tail;
            let Some(at) = self.entry(t).map(|e| e.at) else {
                break;
            };
            self.remove(&at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(i: u32) -> BlockRef {
        BlockRef {
            class: 0,
            chunk: 0,
            index: i,
        }
    }

    fn blk() -> SlottedBlock {
        let mut b = SlottedBlock::new(1024, 1).unwrap();
        b.clean();
        b
    }

    #[test]
    #[cfg(not(feature = "buffer"))]
    fn without_the_buffer_module_only_dirty_blocks_stay() {
        let mut buf = Buffer::default();
        for i in 0..3 {
            buf.insert(r(i), blk());
        }
        buf.mark_dirty(r(1));
        buf.evict(1 << 20);
        assert_eq!(buf.keys(), vec![r(1)]);
    }

    #[test]
    #[cfg(feature = "buffer")]
    fn least_recently_used_clean_block_goes_first_and_dirty_ones_stay() {
        let mut buf = Buffer::default();
        for i in 0..4 {
            buf.insert(r(i), blk());
        }
        buf.mark_dirty(r(0));
        assert!(buf.get_mut(&r(1)).is_some()); // 1 is now the most recent
        buf.evict(2 * 1024);
        // Clean: 1, 2, 3 (recency 1 > 3 > 2); 2 goes.
        assert!(!buf.contains(&r(2)));
        assert!(buf.contains(&r(0)) && buf.contains(&r(1)) && buf.contains(&r(3)));
        buf.evict(0);
        assert_eq!(buf.keys(), vec![r(0)]);
        assert_eq!(buf.bytes(), 1024);
        buf.all_clean();
        buf.evict(0);
        assert!(buf.keys().is_empty());
        assert_eq!(buf.bytes(), 0);
        // Slots are reused.
        buf.insert(r(9), blk());
        buf.insert(r(9), blk());
        assert_eq!(buf.bytes(), 1024);
        assert_eq!(buf.slots.len(), 4);
    }
}
