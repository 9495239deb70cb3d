//! The block buffer (LUNAR §3.3, "Buffer" module): data blocks in RAM.
//!
//! Blocks with changes not yet written home always stay in RAM (the engine says which, with
//! [`Buffer::mark_dirty`], and when a checkpoint has written them home and landed). The basic engine keeps
//! nothing else: a clean block is dropped as soon as the operation that read it ends, so the
//! engine's RAM is its dirty blocks and indexes (plus up to 256 KiB of dropped blocks' buffers
//! kept for the next reads, [`Buffer::take_spare`]). With the `buffer` feature, clean blocks
//! stay too, least recently used out first, within a byte budget ([`Options::buffer_bytes`]);
//! a point read of a block not in RAM brings it in only while the budget has room or on the
//! block's second point read in a while ([`Buffer::admit`]).
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

/// The bytes of a block a scan hints into the CPU's cache ahead of reading it: its header,
/// slot array and first tuples (all of a 4 KiB block; a bigger block's later tuples come
/// in behind the reads, as the CPU's own prefetcher sees them go by).
const HINT_BYTES: usize = 4096;

/// Bytes of the buffers of dropped blocks kept for the next blocks read (see
/// [`Buffer::take_spare`]): a scan of a table bigger than the buffer reads and drops a block
/// every few rows, and a fresh 4 KiB allocation and its free each time were a sixth of such a
/// scan's time.
const SPARE_BYTES: usize = 256 << 10;

/// Blocks a buffer remembers point reads of (see [`Buffer::admit`]): 16 KiB.
const RECENT: usize = 1024;

/// A cache line.
const LINE: usize = 64;

/// Asks the CPU to bring the cache line at `p` into its nearest cache. A hint only: it reads
/// nothing into the program, and `p` may be any address.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 loads no value and never faults, whatever the address (Intel SDM
    // vol. 2, PREFETCHh), and SSE, which it belongs to, is part of every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How far a block a scan reaches soon is brought into the CPU's cache
/// ([`Buffer::hint`]). Each stage loads only what the one before brought in, so the loads
/// a scan's reads would wait for, one after another, happen while it reads other blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hint {
    /// The block's entry in the slab (found through the map alone).
    Entry,
    /// What the entry points at: the block's shared bytes handle and its check marks.
    Handle,
    /// The block's bytes (up to [`HINT_BYTES`]).
    Bytes,
    /// The block's header sector, which a checkpoint seals.
    Header,
}

/// The next blocks a scan over a list of locations reaches, hinted into the CPU's cache a
/// stage at a time: as the scan starts a run of rows in one block, the block of the run after
/// it gets its bytes in, the one after that its handle, the third its entry. A full scan
/// of a table bigger than the CPU's cache otherwise waits on four loads in a row at each
/// block (map, entry, handle, bytes); with the hints it waits on the map's alone (a full
/// scan through SQL of 300,000 rows of 116 bytes, `scan_time` example: 92–103 → 69–70 ns a
/// row; SQLite's 72–73).
#[derive(Debug, Default, Clone)]
pub(crate) struct Lookahead {
    /// Where the next three runs start in the list (its length past the last).
    runs: Option<[usize; 3]>,
}

impl Lookahead {
    /// Starts over (the scan moved to another list).
    pub(crate) fn reset(&mut self) {
        self.runs = None;
    }

    /// The scan is at row `i` of a list of `len` rows, row `j` of which lies in `block(j)`:
    /// hints the blocks of the runs after the one `i` is in, if the scan started a new run
    /// since the last call.
    pub(crate) fn reach(
        &mut self,
        i: usize,
        len: usize,
        block: impl Fn(usize) -> BlockRef,
        buffer: &Buffer,
    ) {
        // Where the hint is no instruction, the loads that find what to hint are wasted.
        if cfg!(target_arch = "x86_64") {
            self.steps(i, len, &block, |j, stage| buffer.hint(&block(j), stage));
        }
    }

    /// What [`reach`](Self::reach) hints, in order: `(row, stage)` for the block of each
    /// `row` (`< len`).
    fn steps(
        &mut self,
        i: usize,
        len: usize,
        block: impl Fn(usize) -> BlockRef,
        mut hint: impl FnMut(usize, Hint),
    ) {
        let next_run = |j: usize| {
            if j >= len {
                return len;
            }
            let b = block(j);
            let mut k = j + 1;
            while k < len && block(k) == b {
                k += 1;
            }
            k
        };
        let r = match &mut self.runs {
            None => {
                let r1 = next_run(i);
                let r2 = next_run(r1);
                let r3 = next_run(r2);
                self.runs = Some([r1, r2, r3]);
                // Each block gets the stages it would have had the scan been going: the
                // waits are the first run's only.
                for (j, stages) in [
                    (r3, &[Hint::Entry][..]),
                    (r2, &[Hint::Entry, Hint::Handle][..]),
                    (r1, &[Hint::Entry, Hint::Handle, Hint::Bytes][..]),
                ] {
                    for &s in stages {
                        if j < len {
                            hint(j, s);
                        }
                    }
                }
                return;
            }
            Some(r) => r,
        };
        if r[0] > i || r[0] >= len {
            return;
        }
        while r[0] <= i && r[0] < len {
            *r = [r[1], r[2], next_run(r[2])];
        }
        // The farthest first: its map lookup is the one load here that may wait, and the
        // nearer stages' loads find what earlier calls brought in.
        for (j, s) in [
            (r[2], Hint::Entry),
            (r[1], Hint::Handle),
            (r[0], Hint::Bytes),
        ] {
            if j < len {
                hint(j, s);
            }
        }
    }
}

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
/// ([`Buffer::get_mut`], [`Buffer::at_mut`]) or replaces it ([`Buffer::insert`]); the only other access is
/// shared ([`Buffer::get_checked`]). So a marked slot and its tuple are byte for byte what
/// was checked: only bytes read from the device are checked, and those are not read again
/// while the block stays in RAM.
///
/// The marks of the first 64 slots live in the struct (a block of a few kilobytes has fewer
/// tuples than that), the rest in a vector: a block read into RAM costs no allocation for
/// its marks.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    first: u64,
    rest: Vec<u64>,
}

impl Checked {
    /// Whether slot `i` was checked.
    pub(crate) fn has(&self, i: usize) -> bool {
        let word = match i / 64 {
            0 => Some(self.first),
            w => self.rest.get(w - 1).copied(),
        };
        word.is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Forgets every mark.
    fn clear(&mut self) {
        self.first = 0;
        self.rest.clear();
    }

    /// Slot `i`'s tuple matched its checksum.
    pub(crate) fn set(&mut self, i: usize) {
        let bit = 1 << (i % 64);
        match i / 64 {
            0 => self.first |= bit,
            w => {
                if self.rest.len() < w {
                    self.rest.resize(w, 0);
                }
                self.rest[w - 1] |= bit;
            }
        }
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
    /// Buffers of dropped blocks, and their bytes (at most [`SPARE_BYTES`]).
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// Blocks point reads found outside the buffer lately, one per hash of the address
    /// ([`RECENT`] of them; see [`admit`](Self::admit)). Empty until the first such read.
    recent: Vec<Option<BlockRef>>,
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
            spare: Vec::new(),
            spare_bytes: 0,
            recent: Vec::new(),
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

    /// Brings a stage of block `b` into the CPU's cache (see [`Hint`]); nothing if the
    /// block is not in RAM. Changes nothing, not even the recency order.
    pub(crate) fn hint(&self, b: &BlockRef, stage: Hint) {
        if let Some(&i) = self.map.get(b) {
            self.hint_at(i, stage);
        }
    }

    /// [`hint`](Self::hint) for the block at slab place `i` (see
    /// [`places_where`](Self::places_where)).
    pub(crate) fn hint_at(&self, i: usize, stage: Hint) {
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        match stage {
            Hint::Entry => {
                let p: *const Option<Entry> = slot;
                let p = p.cast::<u8>();
                for off in (0..core::mem::size_of::<Option<Entry>>()).step_by(LINE) {
                    prefetch(p.wrapping_add(off));
                }
            }
            Hint::Handle => {
                if let Some(e) = slot {
                    prefetch(e.block.handle());
                    // The first 64 marks came with the entry.
                    if let Some(w) = e.checked.rest.first() {
                        prefetch(w);
                    }
                }
            }
            Hint::Bytes | Hint::Header => {
                if let Some(e) = slot {
                    let want = if matches!(stage, Hint::Header) {
                        crate::slotted::HEADER_SECTOR
                    } else {
                        HINT_BYTES
                    };
                    let bytes = e.block.bytes(0..e.block.size().min(want));
                    for line in bytes.chunks(LINE) {
                        prefetch(line.as_ptr());
                    }
                }
            }
        }
    }

    pub(crate) fn contains(&self, b: &BlockRef) -> bool {
        self.map.contains_key(b)
    }

    /// Whether a point read of block `b` (`size` bytes), which is not in RAM, should read
    /// the whole block in, to keep it within `budget` clean bytes: with the `buffer` feature
    /// and a budget (without them nothing read is kept), when the block fits without
    /// evicting another, or else on its second point read in a while (the last
    /// [`RECENT`] blocks read otherwise are remembered by address hash). Otherwise the read
    /// takes just the header sector and its tuple from the device, and `b` is remembered.
    /// Random reads over a table larger than the budget then copy the bytes they need
    /// instead of a block each and churning the buffer, while the buffer still fills while
    /// it has room and a block read again soon (a hot row's) comes in whole and stays.
    pub(crate) fn admit(&mut self, b: BlockRef, size: usize, budget: usize) -> bool {
        if !cfg!(feature = "buffer") || budget == 0 {
            return false;
        }
        if self.total - self.dirty_bytes + size <= budget {
            return true;
        }
        if self.recent.is_empty() {
            self.recent = vec![None; RECENT];
        }
        let addr = u64::from(b.chunk) << 32 | u64::from(b.index);
        let h = (addr ^ u64::from(b.class) << 56).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let i = (h >> (64 - RECENT.trailing_zeros())) as usize;
        match self.recent.get_mut(i) {
            Some(seen) if *seen == Some(b) => {
                *seen = None;
                true
            }
            Some(seen) => {
                *seen = Some(b);
                false
            }
            None => true,
        }
    }

    /// The block, to change or read (its [`Checked`] marks are dropped).
    pub(crate) fn get_mut(&mut self, b: &BlockRef) -> Option<&mut SlottedBlock> {
        let e = self.touch(b)?;
        e.checked.clear();
        Some(&mut e.block)
    }

    /// The block to read, with the marks of its slots checked since it came into RAM or was
    /// last handed out mutably ([`get_mut`](Self::get_mut), [`at_mut`](Self::at_mut)).
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
            if let Some(bytes) = e.block.into_bytes()
                && bytes.len() <= SPARE_BYTES
            {
                // The oldest go first: a pool full of a size no read asks for any more
                // would keep out the size the reads want now.
                while self.spare_bytes + bytes.len() > SPARE_BYTES {
                    let old = self.spare.remove(0);
                    self.spare_bytes -= old.len();
                }
                self.spare_bytes += bytes.len();
                self.spare.push(bytes);
            }
        }
    }

    /// A buffer of `size` bytes for a block about to be read into it: one a dropped block
    /// left, or a new one. Its bytes are stale; the caller overwrites them all.
    /// Only a buffer of exactly `size` bytes is reused: a bigger one would hold memory the
    /// buffer's budget does not count, a smaller one would be reallocated anyway.
    pub(crate) fn take_spare(&mut self, size: usize) -> Vec<u8> {
        match self.spare.iter().rposition(|b| b.len() == size) {
            Some(i) => {
                let b = self.spare.swap_remove(i);
                self.spare_bytes -= b.len();
                b
            }
            None => vec![0; size],
        }
    }

    /// The blocks in RAM for which `pick` holds, with their places in the slab (for
    /// [`at_mut`](Self::at_mut)): a walk through the slab, which a checkpoint makes over
    /// every block it has work with, without a map lookup (a cache miss) each.
    pub(crate) fn places_where<'a>(
        &'a self,
        pick: impl Fn(&SlottedBlock) -> bool + 'a,
    ) -> impl Iterator<Item = (usize, BlockRef)> + 'a {
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, e)| e.as_ref().filter(|e| pick(&e.block)).map(|e| (i, e.at)))
    }

    /// Block `b` at slab place `i` (from [`places_where`](Self::places_where)), handed out
    /// mutably as [`get_mut`](Self::get_mut) does (its check marks dropped), but left where
    /// it is in the recency order; `None` if `b` is not there (a block was added or dropped
    /// since).
    pub(crate) fn at_mut(&mut self, i: usize, b: &BlockRef) -> Option<&mut SlottedBlock> {
        let e = self.entry(i).filter(|e| e.at == *b)?;
        e.checked.clear();
        Some(&mut e.block)
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

    /// Marks on either side of the 64 slots kept in the struct are kept apart, and a slot
    /// never marked reads as unchecked however far past the marks it lies.
    #[test]
    fn checked_marks_each_slot_alone() {
        let mut c = Checked::default();
        let marked = [0, 5, 63, 64, 127, 200];
        for i in marked {
            c.set(i);
        }
        for i in 0..300 {
            assert_eq!(c.has(i), marked.contains(&i), "slot {i}");
        }
        assert_eq!(c.rest.len(), 3);
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
        // Marks past the 64 kept in the entry are forgotten too, by either way of handing
        // the block out to change.
        let i = buf.map[&r(1)];
        for hand_out in 0..2 {
            let checked = buf.get_checked(&r(1)).unwrap().1;
            checked.set(0);
            checked.set(100);
            if hand_out == 0 {
                buf.get_mut(&r(1)).unwrap();
            } else {
                buf.at_mut(i, &r(1)).unwrap();
            }
            let checked = buf.get_checked(&r(1)).unwrap().1;
            assert!(!checked.has(0) && !checked.has(100), "way {hand_out}");
        }
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

    /// The stages a scan hints, over a list of rows in blocks 0,0,0,1,1,2,3,3,4 (runs
    /// starting at rows 0, 3, 5, 6, 8), called at each row as the scan goes.
    #[test]
    fn a_scan_hints_each_block_a_stage_at_a_time_before_it_reaches_it() {
        let blocks = [0u32, 0, 0, 1, 1, 2, 3, 3, 4];
        let len = blocks.len();
        let block = |j: usize| r(blocks[j]);
        let mut look = Lookahead::default();
        let mut got = Vec::new();
        for i in 0..len {
            let mut at = Vec::new();
            look.steps(i, len, block, |j, s| at.push((blocks[j], format!("{s:?}"))));
            got.push(at);
        }
        let h = |b: u32, s: &str| (b, s.to_string());
        assert_eq!(
            got,
            vec![
                // The first call catches up: block 1 fully, 2 to its handle, 3 its entry.
                vec![
                    h(3, "Entry"),
                    h(2, "Entry"),
                    h(2, "Handle"),
                    h(1, "Entry"),
                    h(1, "Handle"),
                    h(1, "Bytes"),
                ],
                vec![],
                vec![],
                // Each new run: the next block's bytes, then the handle and entry of the
                // ones after (none past the list).
                vec![h(4, "Entry"), h(3, "Handle"), h(2, "Bytes")],
                vec![],
                vec![h(4, "Handle"), h(3, "Bytes")],
                vec![h(4, "Bytes")],
                vec![],
                vec![],
            ]
        );
        // Starting over mid-run (a new list) catches up again from there.
        look.reset();
        let mut at = Vec::new();
        look.steps(4, len, block, |j, s| at.push((blocks[j], format!("{s:?}"))));
        assert_eq!(at.first(), Some(&h(4, "Entry")));
        assert_eq!(at.last(), Some(&h(2, "Bytes")));
    }

    /// Hints change nothing a reader sees: not the blocks, not the recency order.
    #[test]
    fn a_hint_changes_nothing() {
        let mut buf = Buffer::default();
        for i in 0..3 {
            buf.insert(r(i), blk());
        }
        let keys = buf.keys();
        for i in 0..4 {
            for s in [Hint::Entry, Hint::Handle, Hint::Bytes] {
                buf.hint(&r(i), s);
            }
        }
        assert_eq!(buf.keys(), keys);
        // Least recently used first: 0 and 1 go, as without the hints.
        buf.evict(1024);
        let kept = if cfg!(feature = "buffer") {
            vec![r(2)]
        } else {
            vec![]
        };
        assert_eq!(buf.keys(), kept);
    }

    /// A dropped block's buffer is read into again, up to [`SPARE_BYTES`] of them; one a
    /// checkpoint still shares is not.
    #[test]
    fn dropped_blocks_leave_their_buffers_for_the_next_reads() {
        let mut buf = Buffer::default();
        let mut shared = blk();
        shared.insert(b"held").unwrap();
        let held = shared.share_dirty_pages(512);
        buf.insert(r(9999), shared);
        buf.clean_where(|_| true);
        buf.evict(0);
        assert_eq!((buf.spare.len(), buf.spare_bytes), (0, 0));
        drop(held);
        let n = SPARE_BYTES / 1024 + 3;
        for i in 0..n as u32 {
            buf.insert(r(i), blk());
        }
        buf.evict(0);
        assert_eq!(buf.spare_bytes, SPARE_BYTES);
        assert_eq!(buf.spare.len(), SPARE_BYTES / 1024);
        // Another size gets a fresh buffer and leaves the pool as it is.
        let b = buf.take_spare(4096);
        assert_eq!((b.len(), buf.spare_bytes), (4096, SPARE_BYTES));
        let b = buf.take_spare(1024);
        assert_eq!((b.len(), buf.spare_bytes), (1024, SPARE_BYTES - 1024));
        while !buf.spare.is_empty() {
            buf.take_spare(1024);
        }
        assert_eq!((buf.spare_bytes, buf.take_spare(512).len()), (0, 512));
        // A dropped block of another size pushes the oldest spares out, not itself.
        for i in 0..(SPARE_BYTES / 1024) as u32 {
            buf.insert(r(i), blk());
        }
        buf.evict(0);
        assert_eq!(buf.spare_bytes, SPARE_BYTES);
        let mut big = SlottedBlock::new(4096, 1).unwrap();
        big.clean();
        buf.insert(r(7777), big);
        buf.evict(0);
        assert_eq!(buf.spare_bytes, SPARE_BYTES);
        assert_eq!(buf.spare.last().map(Vec::len), Some(4096));
        assert_eq!(buf.spare.len(), SPARE_BYTES / 1024 - 3);
    }
}
