//! The block buffer (LUNAR §3.3, "Buffer" module): data blocks in RAM.
//!
//! Blocks with changes not yet written home always stay in RAM (the engine says which, with
//! [`Buffer::mark_dirty`], and when a checkpoint has written them home and landed). The basic engine keeps
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
    checked: Checked,
}

/// The slots of a block in RAM whose tuples matched their slots' checksums, so a scan that
/// meets the block again need not compute them again.
///
/// Invariant: slot `i` is marked only after its tuple matched its slot's CRC, and the marks
/// of a block are dropped whenever the [`Buffer`] hands the block out mutably
/// ([`Buffer::get_mut`]) or replaces it ([`Buffer::insert`]); the only other access is
/// shared ([`Buffer::get_checked`]). So a marked slot and its tuple are byte for byte what
/// was checked: only bytes read from the device are checked, and those are not read again
/// while the block stays in RAM.
#[derive(Debug, Default)]
pub(crate) struct Checked(Vec<u64>);

impl Checked {
    /// Whether slot `i` was checked.
    pub(crate) fn has(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Slot `i`'s tuple matched its checksum.
    pub(crate) fn set(&mut self, i: usize) {
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        self.0[i / 64] |= 1 << (i % 64);
    }
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

    /// The block, to change or read (its [`Checked`] marks are dropped).
    pub(crate) fn get_mut(&mut self, b: &BlockRef) -> Option<&mut SlottedBlock> {
        let e = self.touch(b)?;
        e.checked.0.clear();
        Some(&mut e.block)
    }

    /// The block to read, with the marks of its slots checked since it came into RAM or was
    /// last handed out by [`get_mut`](Self::get_mut).
    pub(crate) fn get_checked(&mut self, b: &BlockRef) -> Option<(&SlottedBlock, &mut Checked)> {
        let e = self.touch(b)?;
        Some((&e.block, &mut e.checked))
    }

    /// A block's entry, made the most recently used.
    fn touch(&mut self, b: &BlockRef) -> Option<&mut Entry> {
        let i = *self.map.get(b)?;
        let dirty = self.entry(i)?.dirty;
        if !dirty && self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        self.entry(i)
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
            checked: Checked::default(),
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

    /// The block has changes not yet written home: it stays until [`clean_where`](Self::clean_where) finds it written.
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

    /// A checkpoint wrote home every block with no change left in it (`written`): they
    /// become clean, free to leave RAM.
    pub(crate) fn clean_where(&mut self, written: impl Fn(&SlottedBlock) -> bool) {
        for i in 0..self.slots.len() {
            let Some(e) = self.entry(i) else { continue };
            if e.dirty && written(&e.block) {
                e.dirty = false;
                let size = e.block.size();
                self.dirty_bytes -= size;
                self.push_front(i);
            }
        }
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

    /// A block's checked slots are forgotten once the block is handed out to change: a
    /// tuple changed behind its checksum is caught again.
    #[test]
    fn checked_slots_are_forgotten_when_the_block_may_change() {
        let mut buf = Buffer::default();
        let mut b = SlottedBlock::new(1024, 1).unwrap();
        let slot = b.insert(b"a tuple").unwrap();
        buf.insert(r(1), b);
        let (blk, checked) = buf.get_checked(&r(1)).unwrap();
        assert!(!checked.has(slot));
        assert_eq!(blk.get(slot, 0).unwrap(), Some(&b"a tuple"[..]));
        checked.set(slot);
        assert!(
            buf.get_checked(&r(1)).unwrap().1.has(slot),
            "kept while only read"
        );
        let blk = buf.get_mut(&r(1)).unwrap();
        let at = usize::from(blk.slot(slot).offset);
        blk.load_tuple(at, b"A").unwrap();
        let (blk, checked) = buf.get_checked(&r(1)).unwrap();
        assert!(!checked.has(slot));
        assert!(blk.get_with(slot, 0, !checked.has(slot)).is_err());
        // A block put in its place starts with none checked.
        buf.get_checked(&r(1)).unwrap().1.set(slot);
        buf.insert(r(1), blk_with_tuple());
        assert!(!buf.get_checked(&r(1)).unwrap().1.has(slot));
    }

    fn blk_with_tuple() -> SlottedBlock {
        let mut b = SlottedBlock::new(1024, 1).unwrap();
        b.insert(b"another").unwrap();
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
        // A block with changes not yet written stays dirty.
        buf.get_mut(&r(0)).unwrap().insert(b"changed").unwrap();
        buf.clean_where(SlottedBlock::is_clean);
        buf.evict(0);
        assert_eq!(buf.keys(), vec![r(0)]);
        buf.clean_where(|_| true);
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
