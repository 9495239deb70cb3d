//! Slotted data blocks (LUNAR §3.2.3): tuples of one table in a block from the allocator.
//!
//! ```text
//!  0 16  block header (kind Slotted; the checksum covers the whole block)
//! 16  8  owner             id of the table the block belongs to
//! 24  1  next present      1 if the table's next block follows
//! 25  1  next class        \\
//! 26  4  next chunk         } the next block of the table (an allocator BlockRef)
//! 30  4  next index        /
//! 34  2  slot count
//! 36  2  data start        offset of the lowest tuple byte (tuples grow down from the end)
//! 38  2  reserved
//! 40  …  slot array: per slot (offset u16, length u16); offset 0 marks a free slot
//! ```
//!
//! A slot number never changes while its tuple lives, so the primary index can point at
//! (block, slot) and tuples can move inside the block (compaction, growing updates) without
//! touching it. Offsets are 16-bit, so blocks are at most 64 KiB.

use crate::allocator::BlockRef;
use crate::error::{Result, TableError};
use crate::format::{self, HEADER, Kind, u32_at, u64_at};

const SLOTS_AT: usize = 40;
const SLOT: usize = 4;

/// A slotted block in RAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlottedBlock {
    buf: Vec<u8>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl SlottedBlock {
    /// An empty block of `size` bytes (at most 64 KiB) owned by table `owner`.
    pub fn new(size: usize, owner: u64) -> Result<Self> {
        if !(512..=65536).contains(&size) {
            return Err(TableError::Invalid("a slotted block is 512 B to 64 KiB"));
        }
        let mut buf = vec![0u8; size];
        buf[16..24].copy_from_slice(&owner.to_le_bytes());
        let mut b = SlottedBlock { buf };
        b.set_data_start(size);
        Ok(b)
    }

    /// A block read from byte `offset` of the device: checks header and checksum.
    pub fn from_bytes(buf: Vec<u8>, offset: u64) -> Result<Self> {
        let corrupt = |reason| TableError::Corrupt {
            structure: Kind::Slotted.name(),
            offset,
            reason,
        };
        if !(512..=65536).contains(&buf.len()) {
            return Err(corrupt("block size out of range"));
        }
        let len = format::check(Kind::Slotted, &buf, offset)?;
        if len != buf.len() {
            return Err(corrupt("checksum does not cover the block"));
        }
        let b = SlottedBlock { buf };
        // Every slot and the free-space bounds must fit the block.
        let n = b.slot_count();
        let end_of_slots = SLOTS_AT + n * SLOT;
        if end_of_slots > b.data_start() || b.data_start() > b.buf.len() {
            return Err(corrupt("slot array and data overlap"));
        }
        for i in 0..n {
            let (off, l) = b.slot(i);
            if off != 0
                && ((off as usize) < b.data_start() || off as usize + l as usize > b.buf.len())
            {
                return Err(corrupt("a slot points outside the tuple area"));
            }
        }
        Ok(b)
    }

    /// Seals the block for writing: fills in header and checksum, returns the bytes.
    pub fn seal(&mut self) -> &[u8] {
        let len = self.buf.len();
        format::seal(Kind::Slotted, &mut self.buf, len);
        &self.buf
    }

    /// The table the block belongs to.
    pub fn owner(&self) -> u64 {
        u64_at(&self.buf, 16)
    }

    /// The table's next block, if any.
    pub fn next(&self) -> Option<BlockRef> {
        (self.buf[24] == 1).then(|| BlockRef {
            class: self.buf[25],
            chunk: u32_at(&self.buf, 26),
            index: u32_at(&self.buf, 30),
        })
    }

    /// Sets the table's next block.
    pub fn set_next(&mut self, next: Option<BlockRef>) {
        let b = next.unwrap_or(BlockRef {
            class: 0,
            chunk: 0,
            index: 0,
        });
        self.buf[24] = u8::from(next.is_some());
        self.buf[25] = b.class;
        self.buf[26..30].copy_from_slice(&b.chunk.to_le_bytes());
        self.buf[30..34].copy_from_slice(&b.index.to_le_bytes());
    }

    /// Number of slots, used or free.
    pub fn slot_count(&self) -> usize {
        usize::from(u16_at(&self.buf, 34))
    }

    fn set_slot_count(&mut self, n: usize) {
        self.buf[34..36].copy_from_slice(&(n as u16).to_le_bytes());
    }

    fn data_start(&self) -> usize {
        match u16_at(&self.buf, 36) {
            // A full 64 KiB block stores its empty data start as 0.
            0 => self.buf.len(),
            d => usize::from(d),
        }
    }

    fn set_data_start(&mut self, d: usize) {
        let v = if d >= 65536 { 0 } else { d as u16 };
        self.buf[36..38].copy_from_slice(&v.to_le_bytes());
    }

    fn slot(&self, i: usize) -> (u16, u16) {
        let at = SLOTS_AT + i * SLOT;
        (u16_at(&self.buf, at), u16_at(&self.buf, at + 2))
    }

    fn set_slot(&mut self, i: usize, off: u16, len: u16) {
        let at = SLOTS_AT + i * SLOT;
        self.buf[at..at + 2].copy_from_slice(&off.to_le_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Bytes of live tuples.
    fn live_bytes(&self) -> usize {
        (0..self.slot_count())
            .map(|i| self.slot(i))
            .filter(|&(o, _)| o != 0)
            .map(|(_, l)| usize::from(l))
            .sum()
    }

    /// The largest tuple an insert could take now (after compaction if need be).
    pub fn free_space(&self) -> usize {
        let has_free_slot = (0..self.slot_count()).any(|i| self.slot(i).0 == 0);
        let slots = SLOTS_AT + (self.slot_count() + usize::from(!has_free_slot)) * SLOT;
        self.buf.len().saturating_sub(slots + self.live_bytes())
    }

    /// The largest tuple an empty block of `size` bytes holds.
    pub fn capacity(size: usize) -> usize {
        size.saturating_sub(SLOTS_AT + SLOT)
    }

    /// The tuple in slot `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        if i >= self.slot_count() {
            return None;
        }
        let (o, l) = self.slot(i);
        (o != 0).then(|| &self.buf[usize::from(o)..usize::from(o) + usize::from(l)])
    }

    /// The live slots, in slot order.
    pub fn slots(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        (0..self.slot_count()).filter_map(|i| self.get(i).map(|t| (i, t)))
    }

    /// Stores a tuple and returns its slot, or `None` if it does not fit.
    pub fn insert(&mut self, tuple: &[u8]) -> Option<usize> {
        if tuple.is_empty() || tuple.len() > self.free_space() {
            return None;
        }
        let i = (0..self.slot_count())
            .find(|&i| self.slot(i).0 == 0)
            .unwrap_or_else(|| {
                let n = self.slot_count();
                // The slot array grows down into the tuple area: make room first.
                if self.data_start() < SLOTS_AT + (n + 1) * SLOT {
                    self.compact();
                }
                self.set_slot_count(n + 1);
                self.set_slot(n, 0, 0);
                n
            });
        self.place(i, tuple);
        Some(i)
    }

    /// Writes `tuple` into slot `i` at the bottom of the free area, compacting first if the
    /// contiguous gap is too small (the caller has checked the total free space).
    fn place(&mut self, i: usize, tuple: &[u8]) {
        let slots_end = SLOTS_AT + self.slot_count() * SLOT;
        if self.data_start() < slots_end + tuple.len() {
            self.compact();
        }
        let start = self.data_start() - tuple.len();
        self.buf[start..start + tuple.len()].copy_from_slice(tuple);
        self.set_data_start(start);
        self.set_slot(i, start as u16, tuple.len() as u16);
    }

    /// Replaces the tuple in slot `i`; the slot number stays. `Ok(false)` if the new tuple
    /// does not fit in this block (the caller moves it elsewhere).
    pub fn update(&mut self, i: usize, tuple: &[u8]) -> Result<bool> {
        let (o, l) = self.get_slot(i)?;
        if tuple.is_empty() {
            return Err(TableError::Invalid("an empty tuple"));
        }
        if tuple.len() <= usize::from(l) {
            let o = usize::from(o);
            self.buf[o..o + tuple.len()].copy_from_slice(tuple);
            self.set_slot(i, o as u16, tuple.len() as u16);
            return Ok(true);
        }
        let room =
            self.free_space() + usize::from(l) + SLOT * usize::from(self.has_free_slot_besides(i));
        if tuple.len() > room.saturating_sub(SLOT * usize::from(self.has_free_slot_besides(i))) {
            return Ok(false);
        }
        self.set_slot(i, 0, 0);
        self.place(i, tuple);
        Ok(true)
    }

    fn has_free_slot_besides(&self, i: usize) -> bool {
        (0..self.slot_count()).any(|j| j != i && self.slot(j).0 == 0)
    }

    fn get_slot(&self, i: usize) -> Result<(u16, u16)> {
        if i >= self.slot_count() || self.slot(i).0 == 0 {
            return Err(TableError::Invalid("no tuple in that slot"));
        }
        Ok(self.slot(i))
    }

    /// Removes the tuple in slot `i`; the slot can be reused by a later insert.
    pub fn delete(&mut self, i: usize) -> Result<()> {
        self.get_slot(i)?;
        self.set_slot(i, 0, 0);
        // Trailing free slots go away.
        let mut n = self.slot_count();
        while n > 0 && self.slot(n - 1).0 == 0 {
            n -= 1;
        }
        self.set_slot_count(n);
        if n == 0 {
            self.set_data_start(self.buf.len());
        }
        Ok(())
    }

    /// Moves every live tuple to the end of the block, closing the gaps; slots stay.
    pub fn compact(&mut self) {
        let mut live: Vec<(usize, Vec<u8>)> = self.slots().map(|(i, t)| (i, t.to_vec())).collect();
        live.sort_by_key(|(i, _)| *i);
        let mut at = self.buf.len();
        for (i, t) in &live {
            at -= t.len();
            self.buf[at..at + t.len()].copy_from_slice(t);
            self.set_slot(*i, at as u16, t.len() as u16);
        }
        self.set_data_start(at);
    }
}

const _: () = assert!(HEADER <= SLOTS_AT);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tuples_keep_their_slots_through_deletes_updates_and_compaction() {
        let mut b = SlottedBlock::new(512, 7).unwrap();
        let a = b.insert(&[1; 100]).unwrap();
        let c = b.insert(&[2; 100]).unwrap();
        let d = b.insert(&[3; 100]).unwrap();
        b.delete(c).unwrap();
        assert!(
            b.update(a, &[4; 200]).unwrap(),
            "grows into the freed space"
        );
        assert_eq!(b.get(a).unwrap(), &[4; 200][..]);
        assert_eq!(b.get(d).unwrap(), &[3; 100][..]);
        assert!(b.get(c).is_none());
        let e = b.insert(&[5; 50]).unwrap();
        assert_eq!(e, c, "the freed slot is reused");
        assert!(
            !b.update(d, &[6; 400]).unwrap(),
            "too big: the caller moves it"
        );
        b.set_next(Some(BlockRef {
            class: 2,
            chunk: 9,
            index: 4,
        }));
        let bytes = b.seal().to_vec();
        let back = SlottedBlock::from_bytes(bytes, 0).unwrap();
        assert_eq!(back.get(a).unwrap(), &[4; 200][..]);
        assert_eq!(back.owner(), 7);
        assert_eq!(back.next().unwrap().chunk, 9);
    }

    #[test]
    fn a_64k_block_works_and_corruption_is_reported() {
        let mut b = SlottedBlock::new(65536, 1).unwrap();
        let big = vec![9u8; SlottedBlock::capacity(65536)];
        let s = b.insert(&big).unwrap();
        assert_eq!(b.get(s).unwrap().len(), big.len());
        let mut bytes = b.seal().to_vec();
        bytes[1000] ^= 1;
        let err = SlottedBlock::from_bytes(bytes, 4096).unwrap_err();
        assert!(err.to_string().contains("data block"), "{err}");
    }

    #[test]
    fn a_new_slot_never_overwrites_the_lowest_tuple() {
        // The lowest tuple ends right where a new slot would go, and there is room in a hole
        // left by a shrinking update.
        let mut b = SlottedBlock::new(512, 1).unwrap();
        let first = b.insert(&[1; 100]).unwrap();
        let gap = b.data_start() - (SLOTS_AT + 2 * SLOT);
        let second = b.insert(&vec![2; gap]).unwrap();
        assert_eq!(b.data_start(), SLOTS_AT + 2 * SLOT);
        assert!(b.update(first, &[3; 10]).unwrap());
        let third = b.insert(&[4; 10]).unwrap();
        assert!(b.get(second).unwrap().iter().all(|&x| x == 2));
        assert_eq!(b.get(third).unwrap(), &[4; 10][..]);
    }

    proptest! {
        /// Random inserts, updates and deletes agree with a model of slot -> bytes.
        #[test]
        fn behaves_like_a_map_of_slots(ops in proptest::collection::vec((0u8..3, 0usize..12, 1usize..300), 1..80)) {
            let mut b = SlottedBlock::new(2048, 1).unwrap();
            let mut model: std::collections::BTreeMap<usize, Vec<u8>> = Default::default();
            for (n, (op, slot, len)) in ops.into_iter().enumerate() {
                let bytes = vec![n as u8; len];
                match op {
                    0 => {
                        let fits = len <= b.free_space();
                        match b.insert(&bytes) {
                            Some(s) => { prop_assert!(fits); prop_assert!(!model.contains_key(&s)); model.insert(s, bytes); }
                            None => prop_assert!(!fits),
                        }
                    }
                    1 => if let Some(&s) = model.keys().nth(slot % model.len().max(1)) {
                        if b.update(s, &bytes).unwrap() { model.insert(s, bytes); }
                    },
                    _ => if let Some(&s) = model.keys().nth(slot % model.len().max(1)) {
                        b.delete(s).unwrap();
                        model.remove(&s);
                    },
                }
                for (s, t) in &model {
                    prop_assert_eq!(b.get(*s).unwrap(), &t[..]);
                }
                prop_assert_eq!(b.slots().count(), model.len());
            }
            let bytes = b.seal().to_vec();
            let back = SlottedBlock::from_bytes(bytes, 0).unwrap();
            for (s, t) in &model {
                prop_assert_eq!(back.get(*s).unwrap(), &t[..]);
            }
        }
    }
}
