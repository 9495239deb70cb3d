//! Slotted data blocks (LUNAR §3.2.3), laid out so that no live byte is overwritten — but by
//! `SlottedBlock::overwrite`, whose caller's journal record carries the new bytes.
//!
//! ```text
//! sector 0 starts with the header — header and slots always lie in sector 0, which is
//! written as one atomic sector
//!    0 16  block header (kind Slotted, format version 3; the checksum covers the header
//!          and the slot array: `len` = 40 + 8 × slot capacity, at most 512)
//!   16  8  owner             id of the table the block belongs to
//!   24  1  next present      1 if the table's next block follows
//!   25  9  next block        class u8, chunk u32, index u32 (an allocator BlockRef)
//!   34  2  slot count
//!   36  2  free offset       where the next tuple goes (tuples are appended upward)
//!   38  2  reserved
//!   40  …  slots             capacity × (offset u16, length u16, checksum of the tuple u32:
//!                            CRC-32C, or CRC-32 if written before version 3; see `checksum`);
//!                            offset 0 marks a free slot
//! `len`…: tuples, appended; the first ones may share sector 0 with the header
//! ```
//!
//! The slot capacity (1 to 59) is chosen when the block is made: a block made for a first
//! tuple gets as many slots as leave that tuple in the fewest sectors (a 4 KiB row and its
//! header then take 9 sectors, not 10), other blocks get 59 (the header fills sector 0).
//! Format version 1 blocks are the 59-slot case (`len` = 512) and are read as such; versions
//! 1 and 2 differ from 3 only in their tuples' checksum function.
//!
//! A tuple is written into free space first and becomes live only when the header sector
//! that points at it is written, so a crash at any moment leaves each block's header either
//! old or new and every tuple it names intact — or, when a checkpoint writes header and
//! tuples together, every tuple it names in a journal record that recovery replays (see
//! `db`). While a block is *fresh* — made since the last
//! checkpoint, so that no durable catalog names it and recovery rebuilds it from the journal
//! instead of reading it — its header may go out with its tuples in one write (see `db`).
//! Once it is not, tuples are appended from byte 512 on only: sector 0, rewritten whole with
//! every header change, then holds only bytes that never change again (the header is
//! replaced, the tuple bytes after it are rewritten as they were). A tuple whose checksum
//! fails is reported, never returned. Space left by deleted or replaced tuples is reclaimed by
//! copying the live tuples into a fresh block ([`SlottedBlock::compacted`]) with the same slot
//! numbers, so the primary index's (block, slot) locations only change block.

use std::sync::Arc;

use crate::allocator::BlockRef;
use crate::checksum;
use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};

/// Bytes of the header sector.
pub const HEADER_SECTOR: usize = 512;
const SLOTS_AT: usize = 40;
const SLOT: usize = 8;
/// Slots one block can have.
pub const MAX_SLOTS: usize = (HEADER_SECTOR - SLOTS_AT) / SLOT;
/// The smallest header: the fixed fields and one slot.
pub const MIN_HEADER: usize = SLOTS_AT + SLOT;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// One slot: where a tuple is and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset of the tuple in the block (0: the slot is free).
    pub offset: u16,
    /// Tuple length.
    pub len: u16,
    /// Checksum of the tuple ([`crate::checksum`]).
    pub crc: u32,
}

impl Slot {
    /// Checks `tuple`, read from this slot of the block at device offset `block_at`,
    /// against the slot's checksum.
    pub fn check(&self, tuple: &[u8], block_at: u64) -> Result<()> {
        if !checksum::tuple_matches(tuple, self.crc) {
            return Err(TableError::Corrupt {
                structure: "tuple",
                offset: block_at + u64::from(self.offset),
                reason: "checksum mismatch",
            });
        }
        Ok(())
    }
}

/// Slot `i` as stored in a block's (or its header sector's) bytes; a slot past them reads
/// as free.
fn slot_of(buf: &[u8], i: usize) -> Slot {
    let at = SLOTS_AT + i * SLOT;
    // One bounds check for the whole slot.
    let s: &[u8; SLOT] = buf
        .get(at..at + SLOT)
        .and_then(|s| s.try_into().ok())
        .unwrap_or(&[0; SLOT]);
    Slot {
        offset: u16::from_le_bytes([s[0], s[1]]),
        len: u16::from_le_bytes([s[2], s[3]]),
        crc: u32::from_le_bytes([s[4], s[5], s[6], s[7]]),
    }
}

/// The checked fields of a header sector: what reading a whole block and reading one
/// tuple by its header sector alone both rely on.
struct Header {
    /// Where the tuple area starts (the checksummed length).
    start: usize,
    /// Slots in use.
    count: usize,
    /// The end of the tuple area.
    free_at: usize,
}

impl Header {
    /// Checks the header sector at the start of `bytes` (at least the sector) of a block of
    /// `size` bytes at device offset `offset`: the checksum and version, the slot count and
    /// the free offset.
    fn read(bytes: &[u8], size: usize, offset: u64) -> Result<Header> {
        let corrupt = |reason| TableError::Corrupt {
            structure: Kind::Slotted.name(),
            offset,
            reason,
        };
        if !(1024..=65536).contains(&size) || !size.is_multiple_of(512) {
            return Err(corrupt("block size out of range"));
        }
        let sector = bytes
            .get(..HEADER_SECTOR)
            .ok_or(corrupt("shorter than its header sector"))?;
        // Version 1 covers the whole sector (59 slots); version 2 the header and its slots.
        let start = format::check(Kind::Slotted, sector, offset)?;
        if start < MIN_HEADER || !(start - SLOTS_AT).is_multiple_of(SLOT) {
            return Err(corrupt(
                "the checksum does not cover a header and its slots",
            ));
        }
        let count = usize::from(u16_at(sector, 34));
        let free_at = match u16_at(sector, 36) {
            0 => size, // a full 64 KiB block
            d => usize::from(d),
        };
        if count > (start - SLOTS_AT) / SLOT {
            return Err(corrupt("too many slots"));
        }
        if free_at < start || free_at > size {
            return Err(corrupt("free offset out of range"));
        }
        Ok(Header {
            start,
            count,
            free_at,
        })
    }

    /// Checks that a live slot points into the tuple area.
    fn check_slot(&self, s: Slot, offset: u64) -> Result<()> {
        let end = usize::from(s.offset) + usize::from(s.len);
        if s.offset != 0 && (usize::from(s.offset) < self.start || end > self.free_at) {
            return Err(TableError::Corrupt {
                structure: Kind::Slotted.name(),
                offset,
                reason: "a slot points outside the tuple area",
            });
        }
        Ok(())
    }
}

/// Slot `i` of the block of `size` bytes at device offset `offset`, from its header sector
/// alone, checked as [`SlottedBlock::from_bytes`] checks it: a point read of one tuple reads
/// this sector and then the tuple, not the whole block. `None` for a free slot.
pub fn slot_from_header(sector: &[u8], size: usize, i: usize, offset: u64) -> Result<Option<Slot>> {
    let header = Header::read(sector, size, offset)?;
    if i >= header.count {
        return Ok(None);
    }
    let s = slot_of(sector, i);
    header.check_slot(s, offset)?;
    Ok((s.offset != 0).then_some(s))
}

/// Where a new tuple goes.
enum Spot {
    /// Into gap `i`, from its start.
    Gap(usize),
    /// At the end of the tuple area.
    End,
}

/// A slotted block in RAM, with the sectors changed since it was read or last written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlottedBlock {
    /// The block's bytes, shared with a checkpoint that took them to write home (see
    /// [`share_dirty_pages`](Self::share_dirty_pages)) until the block next changes.
    buf: Arc<Vec<u8>>,
    /// Sector `i` changed: bit `i` (blocks have at most 128 sectors).
    dirty: u128,
    /// Where the tuple area starts: the header's length, 40 + 8 × slot capacity.
    start: usize,
    /// Made since the last checkpoint (see the module docs); blocks read from the device
    /// never are.
    fresh: bool,
    /// Dead space a new tuple may take (`[start, end)` ranges past sector 0, ascending):
    /// bytes no slot named when the block was last durable — at the last checkpoint's
    /// snapshot, or as read — and none written since. Taken from the block as it is before its first
    /// slot change after that (`None`: not yet); see [`put`](Self::put).
    gaps: Option<Vec<(u32, u32)>>,
}

impl SlottedBlock {
    /// An empty, fresh block of `size` bytes (1 KiB to 64 KiB, whole sectors) owned by table
    /// `owner`, with 59 slots.
    pub fn new(size: usize, owner: u64) -> Result<Self> {
        Self::with_start(size, owner, HEADER_SECTOR)
    }

    /// An empty, fresh block whose tuple area starts at `start` (40 + 8 × the slot capacity:
    /// 48 to 512), as the journal names it.
    pub fn with_start(size: usize, owner: u64, start: usize) -> Result<Self> {
        if !(1024..=65536).contains(&size) || !size.is_multiple_of(512) {
            return Err(TableError::Invalid(
                "a slotted block is 1 KiB to 64 KiB of whole sectors",
            ));
        }
        if !(MIN_HEADER..=HEADER_SECTOR).contains(&start)
            || !(start - SLOTS_AT).is_multiple_of(SLOT)
        {
            return Err(TableError::Invalid(
                "a slotted block header of a wrong length",
            ));
        }
        let mut buf = vec![0u8; size];
        buf[16..24].copy_from_slice(&owner.to_le_bytes());
        let mut b = SlottedBlock {
            buf: Arc::new(buf),
            dirty: 1,
            start,
            fresh: true,
            gaps: None,
        };
        b.set_free_at(start);
        Ok(b)
    }

    /// The bytes to change: copied first if a checkpoint still holds them.
    fn bytes_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.buf)
    }

    /// An empty, fresh block of `size` bytes for a first tuple of `tuple` bytes: as many
    /// slots (up to 59) as leave header and tuple in the fewest sectors.
    pub fn for_tuple(size: usize, owner: u64, tuple: usize) -> Result<Self> {
        let sectors = (MIN_HEADER + tuple).div_ceil(512);
        let room = (sectors * 512).min(size);
        let slots = room
            .checked_sub(SLOTS_AT + tuple)
            .map(|r| (r / SLOT).min(MAX_SLOTS))
            .filter(|&n| n >= 1)
            .ok_or(TableError::Invalid("a tuple does not fit a fresh block"))?;
        Self::with_start(size, owner, SLOTS_AT + SLOT * slots)
    }

    /// An empty, fresh block for a first tuple of `tuple` bytes that keeps `room` bytes
    /// right after its header, inside sector 0, for a journal record (see `db`): as many
    /// slots (up to 59) as leave header, room and tuple in the fewest sectors. `None` if
    /// they do not fit the block, or the room does not fit sector 0 with one slot.
    pub fn for_tuple_with_room(size: usize, owner: u64, tuple: usize, room: usize) -> Option<Self> {
        let sectors = (MIN_HEADER + room + tuple).div_ceil(512);
        let fill = (sectors * 512).min(size);
        let in_sector = HEADER_SECTOR.checked_sub(SLOTS_AT + room)? / SLOT;
        let slots = fill
            .checked_sub(SLOTS_AT + room + tuple)
            .map(|r| (r / SLOT).min(in_sector).min(MAX_SLOTS))
            .filter(|&n| n >= 1)?;
        let mut b = Self::with_start(size, owner, SLOTS_AT + SLOT * slots).ok()?;
        let free = b.start + room;
        b.set_free_at(free);
        Some(b)
    }

    /// The `len` bytes after the header (the room [`for_tuple_with_room`] kept), to be
    /// written with sector 0. `None` past the room or the tuple area.
    ///
    /// [`for_tuple_with_room`]: Self::for_tuple_with_room
    pub fn room_mut(&mut self, len: usize) -> Option<&mut [u8]> {
        let end = self.start.checked_add(len)?;
        let first = (0..self.slot_count())
            .map(|i| self.slot(i))
            .filter(|s| s.offset != 0)
            .map(|s| usize::from(s.offset))
            .min()
            .unwrap_or(self.free_at());
        if end > first || end > HEADER_SECTOR {
            return None;
        }
        self.dirty |= 1;
        let start = self.start;
        Some(&mut self.bytes_mut()[start..end])
    }

    /// Bytes a block needs to hold one tuple of `tuple` bytes (see [`for_tuple`](Self::for_tuple)).
    pub fn size_for(tuple: usize) -> usize {
        MIN_HEADER + tuple
    }

    /// A block read from byte `offset` of the device: checks the header sector. Tuples are
    /// checked when they are read.
    pub fn from_bytes(buf: Vec<u8>, offset: u64) -> Result<Self> {
        let header = Header::read(&buf, buf.len(), offset)?;
        for i in 0..header.count {
            header.check_slot(slot_of(&buf, i), offset)?;
        }
        Ok(SlottedBlock {
            buf: Arc::new(buf),
            dirty: 0,
            start: header.start,
            fresh: false,
            gaps: None,
        })
    }

    /// The block's bytes, with the header sealed, for writing.
    pub fn seal(&mut self) -> &[u8] {
        let start = self.start;
        format::seal(Kind::Slotted, &mut self.bytes_mut()[..HEADER_SECTOR], start);
        &self.buf
    }

    /// Where the tuple area starts (the header's length).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Slots the block can have.
    pub fn slot_capacity(&self) -> usize {
        (self.start - SLOTS_AT) / SLOT
    }

    /// Whether the block was made since the last checkpoint (see the module docs).
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// A checkpoint took the block's image to write home: once it lands, a durable catalog
    /// names the block and that image is durable. Its header may only be written after the
    /// tuples it points at are durable, new tuples go after sector 0, and the space its
    /// slots do not name is free to reuse — in RAM at once; on the device only once the
    /// checkpoint has landed, which the engine waits for before it writes any tuple home.
    pub fn settle(&mut self) {
        self.fresh = false;
        self.gaps = None;
    }

    /// The changed sectors, header sealed and included, as byte ranges (runs of
    /// consecutive sectors merged), and forgets them. For a fresh block, whose header may
    /// reach the device before its tuples and the record, and for a checkpoint that made
    /// the records durable first, whose replay rewrites every tuple the header names (see
    /// `db`); otherwise the header waits for its tuples ([`take_dirty_tuples`](Self::take_dirty_tuples)).
    pub fn take_dirty(&mut self) -> Vec<core::ops::Range<usize>> {
        self.take_dirty_pages(512)
    }

    /// The changed sectors, header sealed and included, widened to the whole `page`s (a
    /// power of two, counted from the block's start) they lie in, as byte ranges (runs of
    /// consecutive pages merged), and forgets them. An unchanged sector written again
    /// holds what the device holds — or, in a fresh block, a sector no one wrote yet,
    /// whose old bytes nothing names — and a file's page cache writes whole pages back
    /// anyway. For the same writers as [`take_dirty`](Self::take_dirty).
    pub fn take_dirty_pages(&mut self, page: usize) -> Vec<core::ops::Range<usize>> {
        if self.header_dirty() {
            let start = self.start;
            format::seal(Kind::Slotted, &mut self.bytes_mut()[..HEADER_SECTOR], start);
        }
        let per = (page / 512).max(1);
        let sectors = self.buf.len() / 512;
        let mut runs: Vec<core::ops::Range<usize>> = Vec::new();
        for p in 0..sectors.div_ceil(per) {
            let (first, last) = (p * per, ((p + 1) * per).min(sectors));
            if (first..last).all(|s| self.dirty & (1 << s) == 0) {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.end == first * 512 => r.end = last * 512,
                _ => runs.push(first * 512..last * 512),
            }
        }
        self.dirty = 0;
        runs
    }

    /// [`take_dirty_pages`](Self::take_dirty_pages), with the block's bytes as they are now,
    /// shared: the block copies them before its next change, so a checkpoint can write
    /// them home while the engine goes on.
    pub fn share_dirty_pages(
        &mut self,
        page: usize,
    ) -> (Arc<Vec<u8>>, Vec<core::ops::Range<usize>>) {
        let runs = self.take_dirty_pages(page);
        (Arc::clone(&self.buf), runs)
    }

    /// Size of the block in bytes.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// Sectors changed since the block was read or [`clean`](Self::clean)ed, ascending.
    /// Tuple sectors come before the header sector in the order they must reach the medium.
    pub fn dirty_sectors(&self) -> impl Iterator<Item = usize> + '_ {
        (1..self.buf.len() / 512)
            .chain(core::iter::once(0))
            .filter(|&i| self.dirty & (1 << i) != 0)
    }

    /// Forgets which sectors changed (after they were written).
    pub fn clean(&mut self) {
        self.dirty = 0;
    }

    /// The changed tuple sectors as byte ranges (runs of consecutive sectors merged), and
    /// forgets them; the header sector stays marked.
    pub fn take_dirty_tuples(&mut self) -> Vec<core::ops::Range<usize>> {
        let mut runs: Vec<core::ops::Range<usize>> = Vec::new();
        for s in 1..self.buf.len() / 512 {
            if self.dirty & (1 << s) == 0 {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.end == s * 512 => r.end += 512,
                _ => runs.push(s * 512..(s + 1) * 512),
            }
        }
        self.dirty &= 1;
        runs
    }

    /// Marks every sector changed (a block image that was never written).
    pub fn mark_all_dirty(&mut self) {
        for s in 0..self.buf.len() / 512 {
            self.dirty |= 1 << s;
        }
    }

    /// Whether a checkpoint has anything to do with the block: sectors to write home, or
    /// the freshness and the noted gaps it ends ([`settle`](Self::settle)).
    pub fn checkpoint_work(&self) -> bool {
        self.dirty != 0 || self.fresh || self.gaps.is_some()
    }

    /// Whether no sector changed since the block was read or written.
    pub fn is_clean(&self) -> bool {
        self.dirty == 0
    }

    /// Whether the header sector changed.
    pub fn header_dirty(&self) -> bool {
        self.dirty & 1 != 0
    }

    /// The block's bytes, unless a checkpoint still holds them (for the buffer to fill with
    /// the next block it reads).
    pub(crate) fn into_bytes(self) -> Option<Vec<u8>> {
        Arc::try_unwrap(self.buf).ok()
    }

    /// Where the handle to the block's shared bytes lies (for a cache hint: a scan about to
    /// read the block loads it first).
    pub(crate) fn handle(&self) -> *const Vec<u8> {
        Arc::as_ptr(&self.buf)
    }

    /// The bytes in `range` (for writing dirty tuple sectors).
    pub fn bytes(&self, range: core::ops::Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// Raises the free offset to at least `at` (journal replay: tuples up to `at` exist).
    pub fn reserve_to(&mut self, at: usize) {
        if at > self.free_at() && at <= self.buf.len() {
            self.set_free_at(at);
        }
    }

    /// Places tuple bytes read from the device at their offset (journal replay of a block
    /// whose header is rebuilt in RAM).
    pub fn load_tuple(&mut self, at: usize, bytes: &[u8]) -> Result<()> {
        let end = at
            .checked_add(bytes.len())
            .filter(|&e| at >= self.start && e <= self.buf.len())
            .ok_or(TableError::Invalid("tuple outside its block"))?;
        self.bytes_mut()[at..end].copy_from_slice(bytes);
        Ok(())
    }

    /// Places tuple bytes that are not on the device yet (journal replay of a tuple its
    /// record carried): like [`load_tuple`](Self::load_tuple), and the sectors are marked
    /// changed so the next checkpoint writes them home.
    pub fn restore_tuple(&mut self, at: usize, bytes: &[u8]) -> Result<()> {
        self.load_tuple(at, bytes)?;
        self.touch(at, at + bytes.len());
        Ok(())
    }

    fn touch(&mut self, from: usize, to: usize) {
        for s in from / 512..to.div_ceil(512) {
            self.dirty |= 1 << s;
        }
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
        let buf = self.bytes_mut();
        buf[24] = u8::from(next.is_some());
        buf[25] = b.class;
        buf[26..30].copy_from_slice(&b.chunk.to_le_bytes());
        buf[30..34].copy_from_slice(&b.index.to_le_bytes());
        self.dirty |= 1;
    }

    /// Number of slots, used or free.
    pub fn slot_count(&self) -> usize {
        usize::from(u16_at(&self.buf, 34))
    }

    fn set_slot_count(&mut self, n: usize) {
        self.bytes_mut()[34..36].copy_from_slice(&(n as u16).to_le_bytes());
        self.dirty |= 1;
    }

    fn free_at(&self) -> usize {
        match u16_at(&self.buf, 36) {
            0 => self.buf.len(), // a full 64 KiB block
            d => usize::from(d),
        }
    }

    fn set_free_at(&mut self, at: usize) {
        let v = if at >= 65536 { 0 } else { at as u16 };
        self.bytes_mut()[36..38].copy_from_slice(&v.to_le_bytes());
        self.dirty |= 1;
    }

    /// Slot `i` as stored.
    pub fn slot(&self, i: usize) -> Slot {
        slot_of(&self.buf, i)
    }

    /// Sets slot `i` (journal replay of a slot change, or the engine's own updates).
    pub fn set_slot(&mut self, i: usize, s: Slot) -> Result<()> {
        if i >= self.slot_capacity() {
            return Err(TableError::Invalid("slot number out of range"));
        }
        self.snapshot_gaps();
        self.write_slot(i, s);
        Ok(())
    }

    /// Writes slot `i` (below the capacity), without noting the gaps first.
    fn write_slot(&mut self, i: usize, s: Slot) {
        let at = SLOTS_AT + i * SLOT;
        let buf = self.bytes_mut();
        buf[at..at + 2].copy_from_slice(&s.offset.to_le_bytes());
        buf[at + 2..at + 4].copy_from_slice(&s.len.to_le_bytes());
        buf[at + 4..at + 8].copy_from_slice(&s.crc.to_le_bytes());
        if i >= self.slot_count() {
            self.set_slot_count(i + 1);
        }
        self.dirty |= 1;
    }

    /// Where the next tuple goes: the free offset, but past sector 0 once the block is not
    /// fresh.
    fn append_at(&self) -> usize {
        if self.fresh {
            self.free_at()
        } else {
            self.free_at().max(HEADER_SECTOR)
        }
    }

    /// Bytes still free at the end of the tuple area.
    pub fn free_space(&self) -> usize {
        self.buf.len() - self.append_at()
    }

    /// Bytes held by live tuples.
    pub fn live_bytes(&self) -> usize {
        (0..self.slot_count())
            .map(|i| self.slot(i))
            .filter(|s| s.offset != 0)
            .map(|s| usize::from(s.len))
            .sum()
    }

    /// The largest tuple a fresh block of `size` bytes holds.
    pub fn capacity(size: usize) -> usize {
        size.saturating_sub(MIN_HEADER)
    }

    /// Bytes neither live nor free: dead tuples, and the end of sector 0 once the block is
    /// not fresh.
    pub fn dead_bytes(&self) -> usize {
        self.buf.len() - self.start - self.free_space() - self.live_bytes()
    }

    /// The tuple in slot `i`, checked against its checksum; `Ok(None)` for a free slot.
    /// `offset` is the block's device offset, for the error.
    pub fn get(&self, i: usize, offset: u64) -> Result<Option<&[u8]>> {
        self.get_with(i, offset, true)
    }

    /// Like [`get`](Self::get), checking the tuple's checksum only with `check`: without it
    /// only for a slot whose tuple was checked and has not changed since (see
    /// [`Checked`](crate::buffer::Checked)).
    pub(crate) fn get_with(&self, i: usize, offset: u64, check: bool) -> Result<Option<&[u8]>> {
        if i >= self.slot_count() {
            return Ok(None);
        }
        let s = self.slot(i);
        if s.offset == 0 {
            return Ok(None);
        }
        let t = &self.buf[usize::from(s.offset)..usize::from(s.offset) + usize::from(s.len)];
        if check {
            s.check(t, offset)?;
        }
        Ok(Some(t))
    }

    /// The live slot numbers.
    pub fn live_slots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.slot_count()).filter(|&i| self.slot(i).offset != 0)
    }

    /// The dead space of the block as it is durable: every byte past sector 0 (the whole
    /// tuple area of a fresh block has been written since the last checkpoint, so none)
    /// and below the free offset that no slot names. Taken before the first slot change
    /// after the block was read or settled, and kept until the next checkpoint: a tuple
    /// replaced or deleted since stays on the device until a checkpoint writes the header
    /// that no longer names it, since a crash before that replays only from there.
    fn snapshot_gaps(&mut self) {
        if self.gaps.is_some() {
            return;
        }
        let mut gaps = Vec::new();
        if !self.fresh {
            let mut live: Vec<(usize, usize)> = (0..self.slot_count())
                .map(|i| self.slot(i))
                .filter(|s| s.offset != 0)
                .map(|s| {
                    (
                        usize::from(s.offset),
                        usize::from(s.offset) + usize::from(s.len),
                    )
                })
                .collect();
            live.sort_unstable();
            let mut at = self.start.max(HEADER_SECTOR);
            let end = self.free_at();
            for (s, e) in live.into_iter().chain(core::iter::once((end, end))) {
                let s = s.min(end);
                if s > at {
                    gaps.push((at as u32, s as u32));
                }
                at = at.max(e);
            }
        }
        self.gaps = Some(gaps);
    }

    /// Where a tuple of `len` bytes would go: the smallest gap it fits (its position in
    /// the list), else the free space at the end.
    fn spot_for(&mut self, len: usize) -> Option<Spot> {
        self.snapshot_gaps();
        let best = self.gaps.as_ref().and_then(|g| {
            g.iter()
                .enumerate()
                .filter(|(_, (s, e))| (e - s) as usize >= len)
                .min_by_key(|(_, (s, e))| e - s)
                .map(|(i, _)| i)
        });
        match best {
            Some(i) => Some(Spot::Gap(i)),
            None => (len <= self.free_space()).then_some(Spot::End),
        }
    }

    /// Whether a tuple of `len` bytes fits the block (in a gap or at the end).
    pub fn fits(&mut self, len: usize) -> bool {
        len > 0 && self.spot_for(len).is_some()
    }

    /// Appends `tuple` to the free space — or writes it into a gap (see
    /// [`snapshot_gaps`](Self::snapshot_gaps)) — and returns the slot it would occupy,
    /// without making it live (see [`put`](Self::put)). `None` if it does not fit or no
    /// slot is free.
    fn append(&mut self, slot: usize, tuple: &[u8]) -> Option<Slot> {
        if tuple.is_empty() || slot >= self.slot_capacity() {
            return None;
        }
        let at = match self.spot_for(tuple.len())? {
            Spot::End => self.append_at(),
            Spot::Gap(i) => {
                let gaps = self.gaps.as_mut()?;
                let (s, e) = gaps[i];
                if (e - s) as usize == tuple.len() {
                    gaps.remove(i);
                } else {
                    gaps[i].0 = s + tuple.len() as u32;
                }
                s as usize
            }
        };
        self.bytes_mut()[at..at + tuple.len()].copy_from_slice(tuple);
        self.touch(at, at + tuple.len());
        if at + tuple.len() > self.free_at() {
            self.set_free_at(at + tuple.len());
        }
        Some(Slot {
            offset: at as u16,
            len: tuple.len() as u16,
            crc: checksum::tuple(tuple),
        })
    }

    /// A free slot number (reusing one, or the next new one), if the block has one left.
    pub fn free_slot(&self) -> Option<usize> {
        (0..self.slot_count())
            .find(|&i| self.slot(i).offset == 0)
            .or_else(|| (self.slot_count() < self.slot_capacity()).then_some(self.slot_count()))
    }

    /// Stores `tuple` in slot `i` (new or replacing): appends it and points the slot at it.
    /// Returns the new slot entry, or `None` if it does not fit (compact or move it).
    pub fn put(&mut self, i: usize, tuple: &[u8]) -> Option<Slot> {
        let s = self.append(i, tuple)?;
        self.set_slot(i, s).ok()?;
        Some(s)
    }

    /// Writes `tuple` over the live tuple of slot `i` where it lies — if it is not longer
    /// than that tuple — and returns the slot entry before and after; the bytes it replaces
    /// are appended to `old`. `None` (nothing changed) otherwise.
    ///
    /// The one write that overwrites live bytes: only for a caller whose journal record
    /// carries the tuple and who keeps its sectors from the device until that record is
    /// durable (see `db`, `Database::place`). A tuple in sector 0 — a block's first ones,
    /// made while it was fresh — may be overwritten too: that sector goes home only with
    /// a checkpoint, or whole with a fresh block's tuples.
    pub(crate) fn overwrite(
        &mut self,
        i: usize,
        tuple: &[u8],
        old: &mut Vec<u8>,
    ) -> Option<(Slot, Slot)> {
        if i >= self.slot_count() {
            return None;
        }
        let before = self.slot(i);
        let at = usize::from(before.offset);
        if at < self.start || tuple.is_empty() || tuple.len() > usize::from(before.len) {
            return None;
        }
        let end = at + tuple.len();
        old.extend_from_slice(&self.buf[at..end]);
        self.bytes_mut()[at..end].copy_from_slice(tuple);
        self.touch(at, end);
        let after = Slot {
            offset: before.offset,
            len: tuple.len() as u16,
            crc: checksum::tuple(tuple),
        };
        // The same bytes stay live unless the tuple is shorter: only then does the block
        // note its gaps as they were (see `snapshot_gaps`).
        if after.len < before.len {
            self.snapshot_gaps();
        }
        self.write_slot(i, after);
        Some((before, after))
    }

    /// Marks the sectors of `range` changed again (bytes a write home left out: see
    /// `db`, `Database::write_tuples`).
    pub(crate) fn mark_changed(&mut self, range: core::ops::Range<usize>) {
        self.touch(range.start, range.end);
    }

    /// Stores a new tuple in a free slot; `None` if it does not fit.
    pub fn insert(&mut self, tuple: &[u8]) -> Option<usize> {
        let i = self.free_slot()?;
        self.put(i, tuple).map(|_| i)
    }

    /// Frees slot `i`; its bytes stay until the block is compacted.
    pub fn delete(&mut self, i: usize) -> Result<()> {
        if i >= self.slot_count() || self.slot(i).offset == 0 {
            return Err(TableError::Invalid("no tuple in that slot"));
        }
        self.set_slot(
            i,
            Slot {
                offset: 0,
                len: 0,
                crc: 0,
            },
        )?;
        let mut n = self.slot_count();
        while n > 0 && self.slot(n - 1).offset == 0 {
            n -= 1;
        }
        self.set_slot_count(n);
        Ok(())
    }

    /// A copy of the live tuples in a fresh block of `size` bytes with the same slot
    /// numbers and capacity, owner and next block; `None` if they do not fit.
    pub fn compacted(&self, size: usize, offset: u64) -> Result<Option<SlottedBlock>> {
        let mut b = SlottedBlock::with_start(size, self.owner(), self.start)?;
        b.set_next(self.next());
        for i in self.live_slots().collect::<Vec<_>>() {
            let Some(t) = self.get(i, offset)? else {
                continue;
            };
            if b.put(i, t).is_none() {
                return Ok(None);
            }
        }
        Ok(Some(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn live_bytes_are_never_overwritten() {
        let mut b = SlottedBlock::new(4096, 7).unwrap();
        let a = b.insert(&[1; 100]).unwrap();
        let before: Vec<u8> = b.buf[512..612].to_vec();
        b.clean();
        b.put(a, &[2; 50]).unwrap(); // an update appends
        assert_eq!(
            &b.buf[512..612],
            &before[..],
            "the old version stays in place"
        );
        assert_eq!(b.get(a, 0).unwrap().unwrap(), &[2; 50][..]);
        let dirty: Vec<usize> = b.dirty_sectors().collect();
        assert_eq!(dirty, [1, 0], "the tuple's sector, then the header sector");
    }

    #[test]
    fn shared_pages_keep_the_bytes_they_had_when_the_block_changes() {
        let mut b = SlottedBlock::new(4096, 1).unwrap();
        b.insert(b"before").unwrap();
        let (bytes, runs) = b.share_dirty_pages(4096);
        assert_eq!(runs, vec![0..4096]);
        let then = bytes.to_vec();
        assert_eq!(&then[..], b.bytes(0..4096));
        // A change copies the block's bytes: the shared ones stay as they were.
        let i = b.insert(b"after").unwrap();
        assert_eq!(&bytes[..], &then[..]);
        assert_ne!(&then[..], b.bytes(0..4096));
        assert_eq!(b.get(i, 0).unwrap(), Some(&b"after"[..]));
        assert!(!b.is_clean());
    }

    #[test]
    fn changed_sectors_widen_to_the_pages_they_lie_in() {
        let mut b = SlottedBlock::new(16 * 1024, 7).unwrap();
        b.insert(&[1; 100]).unwrap();
        // Header and the tuple's sector: the first 4 KiB page, sealed.
        assert_eq!(b.take_dirty_pages(4096), vec![0..4096]);
        assert!(b.is_clean());
        assert!(SlottedBlock::from_bytes(b.buf.to_vec(), 0).is_ok());
        assert_eq!(
            b.take_dirty_pages(4096),
            Vec::<core::ops::Range<usize>>::new()
        );
        // A tuple running into the third page: one run of three pages, not the fourth.
        b.insert(&[2; 9000]).unwrap();
        assert_eq!(b.take_dirty_pages(4096), vec![0..12 * 1024]);
        // Sector by sector: the changed sectors only, header first.
        b.put(0, &[3; 30]).unwrap();
        let mut c = b.clone();
        assert_eq!(
            b.take_dirty_pages(512),
            vec![0..512, 9 * 1024..9 * 1024 + 512]
        );
        assert_eq!(c.take_dirty(), vec![0..512, 9 * 1024..9 * 1024 + 512]);
        // Header and a tuple two pages apart: two runs, the clean page between left out.
        b.put(0, &[5; 30]).unwrap();
        assert_eq!(b.take_dirty_pages(4096), vec![0..4096, 8192..12 * 1024]);
        // A block smaller than a page is written whole.
        let mut small = SlottedBlock::new(2048, 7).unwrap();
        small.insert(&[4; 10]).unwrap();
        assert_eq!(small.take_dirty_pages(4096), vec![0..2048]);
    }

    #[test]
    fn dead_space_is_reused_only_once_a_checkpoint_made_it_dead_on_the_device() {
        // A full, settled block: tuples of 300 bytes from byte 512 on.
        let mut b = SlottedBlock::new(2048, 7).unwrap();
        b.settle();
        let slots: Vec<usize> = (0..5).map(|i| b.insert(&[i as u8; 300]).unwrap()).collect();
        assert_eq!(b.insert(&[9; 300]), None, "full");
        // A checkpoint writes it: now the image is durable.
        b.settle();
        b.clean();
        // Replacing slot 1 cannot reuse its own bytes (the durable header names them) and
        // there is no other room: the row must move.
        assert_eq!(b.put(slots[1], &[11; 300]), None);
        // Deleting slot 2 frees its bytes in RAM, but not on the device until the next
        // checkpoint: they are not reused yet.
        b.delete(slots[2]).unwrap();
        let before = b.bytes(0..2048).to_vec();
        assert_eq!(
            b.put(slots[1], &[11; 300]),
            None,
            "freed since the checkpoint"
        );
        assert_eq!(b.bytes(0..2048), &before[..], "nothing was written");
        // After the checkpoint the hole is reused, in place, and every other byte stays.
        b.settle();
        b.clean();
        let hole = 512 + 2 * 300;
        let s = b.put(slots[1], &[11; 250]).unwrap();
        assert_eq!(usize::from(s.offset), hole);
        assert_eq!(b.get(slots[1], 0).unwrap().unwrap(), &[11; 250][..]);
        for (i, &sl) in slots.iter().enumerate() {
            if i != 1 && i != 2 {
                assert_eq!(b.get(sl, 0).unwrap().unwrap(), &[i as u8; 300][..]);
            }
        }
        let after = b.bytes(0..2048);
        assert_eq!(after[512..hole], before[512..hole]);
        assert_eq!(
            after[hole + 250..],
            before[hole + 250..],
            "of the tuples, only the hole changed"
        );
        // The 50 bytes left of the hole take a small tuple; the old version of slot 1 is
        // dead now but still durable: a second update of it must not land there.
        let s = b.put(slots[1], &[12; 40]).unwrap();
        assert_eq!(usize::from(s.offset), hole + 250);
        assert_eq!(b.put(slots[1], &[13; 40]), None);
        // The block reads back as written, and the slot numbers are unchanged.
        let back = SlottedBlock::from_bytes(b.seal().to_vec(), 0).unwrap();
        assert_eq!(back.get(slots[1], 0).unwrap().unwrap(), &[12; 40][..]);
        assert_eq!(back.get(slots[2], 0).unwrap(), None);
        // A fresh block has no dead space to reuse before it was ever checkpointed.
        let mut f = SlottedBlock::new(1024, 7).unwrap();
        let x = f.insert(&[1; 500]).unwrap();
        f.delete(x).unwrap();
        assert_eq!(f.insert(&[2; 500]), None);
    }

    #[test]
    fn round_trip_compaction_and_corruption() {
        let mut b = SlottedBlock::new(2048, 3).unwrap();
        let x = b.insert(&[1; 600]).unwrap();
        let y = b.insert(&[2; 600]).unwrap();
        b.delete(x).unwrap();
        assert!(b.insert(&[3; 600]).is_none(), "full until compacted");
        let mut c = b.compacted(2048, 0).unwrap().unwrap();
        assert_eq!(c.get(y, 0).unwrap().unwrap(), &[2; 600][..]);
        let z = c.insert(&[3; 600]).unwrap();
        c.set_next(Some(BlockRef {
            class: 1,
            chunk: 2,
            index: 3,
        }));
        let bytes = c.seal().to_vec();
        let back = SlottedBlock::from_bytes(bytes.clone(), 8192).unwrap();
        assert_eq!(back.get(z, 8192).unwrap().unwrap(), &[3; 600][..]);
        assert_eq!(back.next().unwrap().index, 3);
        assert_eq!(back.owner(), 3);
        // A flipped bit in a tuple is caught when the tuple is read.
        let mut bad = bytes.clone();
        bad[600] ^= 4;
        let back = SlottedBlock::from_bytes(bad, 8192).unwrap();
        let err = back.get(y, 8192).unwrap_err();
        assert!(err.to_string().contains("tuple"), "{err}");
        // ... and in the header sector when the block is read.
        let mut bad = bytes;
        bad[50] ^= 4;
        assert!(SlottedBlock::from_bytes(bad, 0).is_err());
    }

    #[test]
    fn slots_run_out_cleanly() {
        let mut b = SlottedBlock::new(65536, 1).unwrap();
        for _ in 0..MAX_SLOTS {
            b.insert(&[1]).unwrap();
        }
        assert!(b.insert(&[1]).is_none());
        let big = SlottedBlock::capacity(65536);
        let mut c = SlottedBlock::for_tuple(65536, 1, big).unwrap();
        assert!(c.insert(&vec![0; big]).is_some());
        assert!(c.insert(&[1]).is_none(), "one slot, no room");
        let bytes = c.seal().to_vec();
        SlottedBlock::from_bytes(bytes, 0).unwrap();
        assert!(SlottedBlock::for_tuple(65536, 1, big + 1).is_err());
    }

    #[test]
    fn a_first_tuple_shares_sector_0_with_the_header() {
        // A 4 KiB row's tuple: header, slot and tuple in 9 sectors, one contiguous write.
        let tuple = vec![7u8; 4125];
        let mut b = SlottedBlock::for_tuple(8192, 5, tuple.len()).unwrap();
        assert_eq!(b.start(), 40 + 8 * 55);
        assert_eq!(b.slot_capacity(), 55);
        let s = b.insert(&tuple).unwrap();
        assert_eq!(b.slot(s).offset as usize, b.start());
        assert_eq!(b.take_dirty(), vec![(0..9 * 512)]);
        assert!(b.is_clean());
        // Small rows keep most of the slots; a block for one sector's worth of tuple fits
        // it in sector 0.
        let small = SlottedBlock::for_tuple(4096, 5, 100).unwrap();
        assert_eq!((small.start(), small.slot_capacity()), (408, 46));
        // The header's checksum covers the header and slots, not the tuple bytes after it.
        let bytes = b.seal().to_vec();
        let back = SlottedBlock::from_bytes(bytes.clone(), 0).unwrap();
        assert_eq!(back.get(s, 0).unwrap().unwrap(), &tuple[..]);
        assert!(!back.is_fresh());
        let mut bad = bytes.clone();
        bad[b.start() + 3] ^= 1;
        let back2 = SlottedBlock::from_bytes(bad, 0).unwrap();
        assert!(back2.get(s, 0).is_err(), "caught by the tuple's CRC");
        let mut bad = bytes;
        bad[b.start() - 1] ^= 1;
        assert!(
            SlottedBlock::from_bytes(bad, 0).is_err(),
            "caught by the header's"
        );
        // Once the block is not fresh, new tuples go past sector 0, which then holds bytes
        // that never change.
        let mut c = SlottedBlock::for_tuple(4096, 5, 100).unwrap();
        c.insert(&[1; 100]).unwrap();
        let fresh_second = c.clone().insert(&[2; 100]).unwrap();
        c.settle();
        c.clean();
        let before = c.bytes(0..512)[c.start()..].to_vec();
        let t = c.insert(&[2; 100]).unwrap();
        assert_eq!(t, fresh_second);
        assert_eq!(c.slot(t).offset, 512);
        assert_eq!(&c.bytes(0..512)[c.start()..], &before[..]);
        assert_eq!(c.dirty_sectors().collect::<Vec<_>>(), [1, 0]);
        assert_eq!(c.dead_bytes(), 512 - (c.start() + 100));
    }

    #[test]
    fn version_1_blocks_are_read_as_59_slot_blocks_with_crc32_tuples() {
        let mut b = SlottedBlock::new(2048, 9).unwrap();
        let s = b.insert(&[3; 300]).unwrap();
        let mut bytes = b.seal().to_vec();
        // Re-seal as version 1 wrote it: the tuple's CRC-32 in its slot, version 1, the
        // checksum over the whole sector.
        let at = SLOTS_AT + s * SLOT + 4;
        bytes[at..at + 4].copy_from_slice(&crc32fast::hash(&[3; 300]).to_le_bytes());
        bytes[4..6].copy_from_slice(&1u16.to_le_bytes());
        bytes[8..12].fill(0);
        let crc = crc32fast::hash(&bytes[..512]);
        bytes[8..12].copy_from_slice(&crc.to_le_bytes());
        let back = SlottedBlock::from_bytes(bytes, 0).unwrap();
        assert_eq!((back.start(), back.slot_capacity()), (512, MAX_SLOTS));
        assert_eq!(back.get(s, 0).unwrap().unwrap(), &[3; 300][..]);
        // A newer version than this build is refused by name.
        let mut newer = b.seal().to_vec();
        newer[4..6].copy_from_slice(&4u16.to_le_bytes());
        newer[8..12].fill(0);
        let crc = crc32fast::hash(&newer[..512]);
        newer[8..12].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            SlottedBlock::from_bytes(newer, 0),
            Err(TableError::Version { found: 4, .. })
        ));
    }

    proptest! {
        /// Random puts and deletes agree with a model of slot -> bytes, across seal/read
        /// and compaction.
        #[test]
        fn behaves_like_a_map_of_slots(ops in proptest::collection::vec((0u8..3, 0usize..12, 1usize..300), 1..80)) {
            let mut b = SlottedBlock::new(8192, 1).unwrap();
            let mut model: std::collections::BTreeMap<usize, Vec<u8>> = Default::default();
            for (n, (op, k, len)) in ops.into_iter().enumerate() {
                let bytes = vec![n as u8; len];
                let pick = model.keys().nth(k % model.len().max(1)).copied();
                match (op, pick) {
                    (0, _) | (_, None) => {
                        if let Some(s) = b.insert(&bytes) { model.insert(s, bytes); }
                        else if let Some(c) = b.compacted(8192, 0).unwrap() { b = c; }
                    }
                    (1, Some(s)) => if b.put(s, &bytes).is_some() { model.insert(s, bytes); },
                    (_, Some(s)) => { b.delete(s).unwrap(); model.remove(&s); }
                }
                for (s, t) in &model {
                    prop_assert_eq!(b.get(*s, 0).unwrap().unwrap(), &t[..]);
                }
                prop_assert_eq!(b.live_slots().count(), model.len());
            }
            let bytes = b.seal().to_vec();
            let back = SlottedBlock::from_bytes(bytes, 0).unwrap();
            for (s, t) in &model {
                prop_assert_eq!(back.get(*s, 0).unwrap().unwrap(), &t[..]);
            }
        }
    }
}
