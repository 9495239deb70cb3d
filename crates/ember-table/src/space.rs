//! The space manager: owns the device of one database — its superblock, journal and data-zone
//! allocator — and hands out extents, to the table engine and to the other engines.
//!
//! An allocation or free is durable when its call returns: its block marks go into one
//! journal record and one `sync` (case 3 of the allocator: atomic across size classes) —
//! except an allocation made with [`SpaceManager::allocate_unsynced`], whose record is
//! durable at the next sync of the device. The
//! bitmaps themselves are written later, at a checkpoint, with the allocator's in-place and
//! copy-on-write updates; recovery replays the journal records after the last checkpoint,
//! which is idempotent.
//!
//! Journal payload of the space manager:
//!
//! ```text
//!  0 1  kind = 1 (block marks)
//!  1 4  count
//!  5 …  count × (class u8, chunk u32, index u32, in use u8)
//!  …    the caller's bytes (a table transaction's redo operations), possibly none
//! ```

use ember_device::BlockDevice;

use crate::allocator::{Allocator, BlockRef};
use crate::error::{Result, TableError};
use crate::format::u32_at;
use crate::journal::{Journal, Position, Record};
use crate::superblock::{FormatOptions, Superblock};

const MARKS: u8 = 1;
const MARK_BYTES: usize = 10;

/// A piece of the device handed out by the space manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Extent {
    /// The allocator's name for it (give it back with [`SpaceManager::free`]).
    pub block: BlockRef,
    /// First byte on the device.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The owner of one database device (see the module docs).
#[derive(Debug)]
pub struct SpaceManager<D: BlockDevice> {
    dev: D,
    sb: Superblock,
    alloc: Allocator,
    journal: Journal,
}

/// The start of a transaction's journal payload: [`MARKS`] and the block marks; the
/// caller's bytes follow them.
fn encode_marks(marks: &[Mark], p: &mut Vec<u8>) {
    p.reserve(5 + MARK_BYTES * marks.len());
    p.push(MARKS);
    p.extend_from_slice(&(marks.len() as u32).to_le_bytes());
    for (b, used) in marks {
        p.push(b.class);
        p.extend_from_slice(&b.chunk.to_le_bytes());
        p.extend_from_slice(&b.index.to_le_bytes());
        p.push(u8::from(*used));
    }
}

/// Calls `f` with the start of a record's payload for `marks` ([`encode_marks`]); most
/// commits mark no block, and their five bytes stay on the stack.
fn with_marks<T>(marks: &[Mark], f: impl FnOnce(&[u8]) -> T) -> T {
    if marks.is_empty() {
        f(&[MARKS, 0, 0, 0, 0])
    } else {
        let mut head = Vec::new();
        encode_marks(marks, &mut head);
        f(&head)
    }
}

/// A block and whether it is in use, as a journal record states it.
pub type Mark = (BlockRef, bool);

/// Splits a journal payload into its block marks and the caller's bytes.
pub fn decode_record(r: &Record) -> Result<(Vec<Mark>, &[u8])> {
    let bad = TableError::Corrupt {
        structure: "journal record (block marks)",
        offset: r.lsn,
        reason: "malformed payload",
    };
    let p = &r.payload;
    if p.len() < 5 || p[0] != MARKS {
        return Err(bad);
    }
    let n = u32_at(p, 1) as usize;
    let end = n
        .checked_mul(MARK_BYTES)
        .and_then(|m| m.checked_add(5))
        .filter(|&e| e <= p.len())
        .ok_or(bad)?;
    let marks = p[5..end]
        .chunks_exact(MARK_BYTES)
        .map(|m| {
            (
                BlockRef {
                    class: m[0],
                    chunk: u32_at(m, 1),
                    index: u32_at(m, 5),
                },
                m[9] != 0,
            )
        })
        .collect();
    Ok((marks, &p[end..]))
}

impl<D: BlockDevice> SpaceManager<D> {
    /// Formats the whole device as a new, empty database.
    pub fn format(mut dev: D, opts: FormatOptions) -> Result<Self> {
        let mut sb = Superblock::plan(dev.capacity(), dev.sector_size(), &opts)?;
        let journal = Journal::format(&mut dev, sb.log.start, sb.log.len)?;
        let alloc = Allocator::format(&mut dev, sb.data.start, sb.data.len, sb.alloc)?;
        // The superblock goes last: a device without one was never formatted.
        sb.write(&mut dev)?;
        sb.write(&mut dev)?;
        dev.sync()?;
        Ok(SpaceManager {
            dev,
            sb,
            alloc,
            journal,
        })
    }

    /// Opens a database device: reads the superblock, the allocator and the journal, and
    /// replays the journal's block marks.
    pub fn open(dev: D) -> Result<Self> {
        let (mut sm, records) = Self::open_raw(dev)?;
        for r in &records {
            sm.replay(r)?;
        }
        if !records.is_empty() {
            sm.checkpoint()?;
        }
        Ok(sm)
    }

    /// Opens a database device without replaying the journal: returns the records since the
    /// last checkpoint, for a caller that validates them and replays the ones it accepts
    /// with [`replay`](Self::replay), in order.
    pub fn open_raw(mut dev: D) -> Result<(Self, Vec<Record>)> {
        let sb = Superblock::read(&mut dev)?;
        let alloc = Allocator::open(&mut dev, sb.data.start, sb.data.len, sb.alloc)?;
        let (journal, records) = Journal::open(&mut dev, sb.log.start, sb.log.len)?;
        let sm = SpaceManager {
            dev,
            sb,
            alloc,
            journal,
        };
        Ok((sm, records))
    }

    /// Applies a journal record's block marks to the allocator (idempotent).
    pub fn replay(&mut self, r: &Record) -> Result<()> {
        for (b, used) in decode_record(r)?.0 {
            self.alloc.mark(b, used)?;
        }
        Ok(())
    }

    /// Sets blocks' states in the allocator as a journal record's marks would (idempotent;
    /// for marks the caller keeps elsewhere, such as the catalog's index page marks).
    pub fn apply_marks(&mut self, marks: &[Mark]) -> Result<()> {
        for (b, used) in marks {
            self.alloc.mark(*b, *used)?;
        }
        Ok(())
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The device.
    pub fn device(&mut self) -> &mut D {
        &mut self.dev
    }

    /// The allocator (read-only: changes go through [`allocate`](Self::allocate) and
    /// [`free`](Self::free)).
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    fn extent(&self, block: BlockRef) -> Extent {
        let (offset, len) = self.alloc.extent(block);
        Extent { block, offset, len }
    }

    /// Allocates room for `bytes` bytes (one block, or several for more than the largest
    /// block) and makes the allocation durable.
    pub fn allocate(&mut self, bytes: u64) -> Result<Vec<Extent>> {
        self.allocate_after(bytes, None)
    }

    /// [`allocate`](Self::allocate), right after `hint` on the device where that is free.
    pub fn allocate_after(&mut self, bytes: u64, hint: Option<BlockRef>) -> Result<Vec<Extent>> {
        self.allocate_logged(bytes, hint, true)
    }

    /// [`allocate`](Self::allocate) without the sync: the allocation is durable only once
    /// the device is next synced (by [`sync`](Self::sync) or by anyone else), and a cut
    /// before that leaves the blocks free. For an owner that syncs before anything durable
    /// names them (see [`ExtentSpace::allocate_extents_unsynced`]).
    pub fn allocate_unsynced(&mut self, bytes: u64) -> Result<Vec<Extent>> {
        self.allocate_logged(bytes, None, false)
    }

    fn allocate_logged(
        &mut self,
        bytes: u64,
        hint: Option<BlockRef>,
        sync: bool,
    ) -> Result<Vec<Extent>> {
        let blocks = self.alloc.allocate_after(bytes, hint)?;
        let marks: Vec<Mark> = blocks.iter().map(|&b| (b, true)).collect();
        if let Err(e) = self.log_marks(&marks, sync) {
            // Not durable: forget it in RAM too.
            let _ = self.alloc.free(&blocks);
            return Err(e);
        }
        Ok(blocks.iter().map(|&b| self.extent(b)).collect())
    }

    /// Gives extents back, durably.
    pub fn free(&mut self, extents: &[Extent]) -> Result<()> {
        let blocks: Vec<BlockRef> = extents.iter().map(|e| e.block).collect();
        self.alloc.free(&blocks)?;
        let marks: Vec<Mark> = blocks.iter().map(|&b| (b, false)).collect();
        if let Err(e) = self.log_marks(&marks, true) {
            for b in &blocks {
                let _ = self.alloc.mark(*b, true);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Appends a record of `marks`, and syncs if `sync`.
    fn log_marks(&mut self, marks: &[Mark], sync: bool) -> Result<()> {
        // The table engine makes room first (`Database::journal_room`): this checkpoint is
        // for a space manager used on its own, whose journal holds only marks.
        if !self.journal_fits(marks.len(), 0) {
            self.checkpoint()?;
        }
        self.append(marks, &[])?;
        if sync { self.sync() } else { Ok(()) }
    }

    /// Syncs the device: every record appended so far is durable.
    pub fn sync(&mut self) -> Result<()> {
        self.dev.sync()?;
        self.journal.note_synced();
        Ok(())
    }

    /// Reserves blocks for `bytes` in RAM only; the caller records them with
    /// [`append`](Self::append) (or gives them back with [`unreserve`](Self::unreserve)).
    pub fn reserve(&mut self, bytes: u64) -> Result<Vec<Extent>> {
        self.reserve_after(bytes, None)
    }

    /// [`reserve`](Self::reserve), right after `hint` on the device where that is free.
    pub fn reserve_after(&mut self, bytes: u64, hint: Option<BlockRef>) -> Result<Vec<Extent>> {
        let blocks = self.alloc.allocate_after(bytes, hint)?;
        Ok(blocks.iter().map(|&b| self.extent(b)).collect())
    }

    /// Gives back blocks reserved and never recorded, or frees recorded blocks in RAM once
    /// the record that frees them is durable (a freed block must not be reused before).
    pub fn unreserve(&mut self, blocks: &[BlockRef]) -> Result<()> {
        self.alloc.free(blocks)
    }

    /// The extent of a block.
    pub fn extent_of(&self, block: BlockRef) -> Extent {
        self.extent(block)
    }

    /// Appends one journal record with block marks and the caller's bytes (not synced).
    /// A full journal is [`TableError::JournalFull`]: the caller checkpoints what it owns,
    /// then [`checkpoint`](Self::checkpoint)s.
    pub fn append(&mut self, marks: &[Mark], rest: &[u8]) -> Result<()> {
        with_marks(marks, |head| {
            self.journal.append_parts(&mut self.dev, &[head, rest])
        })?;
        Ok(())
    }

    /// Seals one journal record with block marks and the caller's bytes into the front of
    /// `out`, for the caller to write into the spill block named by the last record (see the
    /// journal's module docs); returns its length. `Invalid` if it does not fit `out`.
    pub fn append_spilled(&mut self, marks: &[Mark], rest: &[u8], out: &mut [u8]) -> Result<usize> {
        with_marks(marks, |head| self.journal.spill_record(&[head, rest], out))
    }

    /// Bytes of a record with this many marks and caller bytes spilled into a block.
    pub fn spilled_size(marks: usize, rest: usize) -> usize {
        crate::journal::RECORD_OVERHEAD + 5 + MARK_BYTES * marks + rest
    }

    /// Names the spill block (an allocated block, by the device offset of its start) of the
    /// records appended from now on, or none.
    pub fn set_spill(&mut self, block: Option<BlockRef>) -> Result<()> {
        let at = block.map(|b| self.alloc.extent(b).0);
        self.journal.set_spill(at)
    }

    /// Whether a record with this many marks and caller bytes fits the journal now.
    pub fn journal_fits(&self, marks: usize, rest: usize) -> bool {
        self.journal.fits(&[5 + MARK_BYTES * marks + rest])
    }

    /// Says whether the journal is synced in bulk rather than after each record (see
    /// [`Journal::set_bulk_synced`]).
    pub fn set_journal_bulk_synced(&mut self, bulk: bool) {
        self.journal.set_bulk_synced(bulk);
    }

    /// Whether more than half of the journal holds records not yet checkpointed (the table
    /// engine starts a checkpoint between transactions then, so once it lands the journal
    /// has at least half its room free).
    pub fn journal_half_full(&self) -> bool {
        self.journal.used() * 2 > self.journal.capacity()
    }

    /// Bytes the journal can hold at most.
    pub fn journal_capacity(&self) -> u64 {
        self.journal.capacity()
    }

    /// Writes the allocator's bitmaps home and empties the journal. The caller must have
    /// written everything else the journal's records describe (and synced it) first.
    pub fn checkpoint(&mut self) -> Result<()> {
        self.alloc.flush(&mut self.dev)?;
        self.journal.checkpoint(&mut self.dev)
    }

    /// Where the journal stands now: the end of the records appended so far.
    pub fn journal_position(&self) -> Position {
        self.journal.position()
    }

    /// What a checkpoint at `p` (now) writes after the caller's own state, for a writer on
    /// another thread: the allocator as it is now with `freed` given back, to flush, and
    /// the journal header — where and what, and its generation — that drops the records
    /// before `p`. Taken between transactions (no block reserved and not yet recorded);
    /// [`adopt_checkpoint`](Self::adopt_checkpoint) once both are durable, with no other
    /// checkpoint in between.
    pub(crate) fn checkpoint_parts(
        &self,
        p: Position,
        freed: &[BlockRef],
    ) -> Result<(Allocator, (u64, [u8; 512]), u64)> {
        let mut alloc = self.alloc.clone();
        alloc.free(freed)?;
        let (at, header, generation) = self.journal.checkpoint_header(p);
        Ok((alloc, (at, header), generation))
    }

    /// The checkpoint of [`checkpoint_parts`](Self::checkpoint_parts) is durable, its
    /// allocator `flushed`: gives `freed` back in RAM (records after `p` that may replay
    /// no longer name them), takes over what the flush wrote, and frees the journal's space
    /// before `p`. Writes nothing.
    pub(crate) fn adopt_checkpoint(
        &mut self,
        p: Position,
        generation: u64,
        flushed: &Allocator,
        freed: &[BlockRef],
    ) -> Result<()> {
        self.alloc.free(freed)?;
        self.alloc.adopt_flushed(flushed);
        self.journal.adopt_checkpoint(p, generation);
        Ok(())
    }

    /// Checkpoints and returns the device.
    pub fn close(mut self) -> Result<D> {
        self.checkpoint()?;
        Ok(self.dev)
    }
}

/// The database's allocator as the other engines see it (the LSM tree's blobs, a time
/// series' pages): extents (durable on return, or at the next sync), raw reads and writes
/// inside them, and a sync barrier.
///
/// Implemented by [`SpaceManager`] (a device of its own) and by
/// [`Database`](crate::Database), which hands out extents of the device its tables live on
/// and keeps its own journal consistent while doing so. An engine must only write inside
/// extents it was given and not yet gave back.
pub trait ExtentSpace {
    /// Allocates room for `bytes` (one block, or several above the largest block size);
    /// durable on return.
    fn allocate_extents(&mut self, bytes: u64) -> Result<Vec<Extent>>;
    /// [`allocate_extents`](Self::allocate_extents), durable only once the device is next
    /// synced ([`sync_space`](Self::sync_space), or any sync of the same device): a cut
    /// before that leaves the extents free. For an owner that syncs the device before it
    /// writes anything that names them — it saves a sync per allocation (an LSM tree's table
    /// is then one sync, not two). By default the same as `allocate_extents`.
    fn allocate_extents_unsynced(&mut self, bytes: u64) -> Result<Vec<Extent>> {
        self.allocate_extents(bytes)
    }
    /// Gives extents back; durable on return.
    fn free_extents(&mut self, extents: &[Extent]) -> Result<()>;
    /// The extent of an allocated block (after a restart, from a saved [`BlockRef`]);
    /// `None` if the block is not a valid block of this device or not allocated.
    fn allocated_extent(&self, block: BlockRef) -> Option<Extent>;
    /// Reads device bytes.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes device bytes (durable after [`sync_space`](Self::sync_space)), readying the
    /// space around them for more small writes with syncs in between (see
    /// `BlockDevice::prepare`).
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()>;
    /// [`write_at`](Self::write_at) that readies nothing: for bytes written once and synced
    /// once (an LSM tree's table), or into space the caller readied itself with
    /// [`prepare_space`](Self::prepare_space). On a sparse file readying writes zeros over
    /// the holes of the megabyte around, which a table written once gains nothing from. By
    /// default the same as `write_at`.
    fn write_at_once(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_at(offset, data)
    }
    /// Makes every earlier write durable; a barrier for later ones.
    fn sync_space(&mut self) -> Result<()>;
    /// A handle that writes device bytes and syncs without this space (from another thread,
    /// while the space goes on), if the device gives one; its sync makes every write durable,
    /// through the handle and through the space. `None` by default.
    fn device_writer(&mut self) -> Option<Box<dyn ember_device::DeviceWriter>> {
        None
    }
    /// Readies device bytes `offset .. offset + len` for small writes with syncs in between,
    /// as [`write_at`](Self::write_at) does around its own (a sparse file's holes around
    /// them filled now; see `BlockDevice::prepare`). Does nothing by default.
    fn prepare_space(&mut self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// Readies device bytes `offset .. offset + len` for appends that are synced in bulk (a
    /// log whose commits do not sync): as [`prepare_space`](Self::prepare_space), in the
    /// layout `BlockDevice::prepare_appends` gives (on a file, 64 KiB pages). By default the
    /// same as `prepare_space`.
    fn prepare_appends_space(&mut self, offset: u64, len: u64) {
        self.prepare_space(offset, len);
    }
}

impl<D: BlockDevice> ExtentSpace for SpaceManager<D> {
    fn allocate_extents(&mut self, bytes: u64) -> Result<Vec<Extent>> {
        self.allocate(bytes)
    }
    fn allocate_extents_unsynced(&mut self, bytes: u64) -> Result<Vec<Extent>> {
        self.allocate_unsynced(bytes)
    }
    fn free_extents(&mut self, extents: &[Extent]) -> Result<()> {
        self.free(extents)
    }
    fn allocated_extent(&self, block: BlockRef) -> Option<Extent> {
        (self.alloc.is_valid(block) && self.alloc.is_allocated(block)).then(|| self.extent(block))
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.dev.read(offset, buf)?)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        // Other engines append to their extents (a log, sorted tables, pages), syncing as
        // they go: worth allocating ahead (see `BlockDevice::prepare`).
        self.dev.prepare(offset, data.len() as u64);
        Ok(self.dev.write(offset, data)?)
    }
    fn write_at_once(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        Ok(self.dev.write(offset, data)?)
    }
    fn sync_space(&mut self) -> Result<()> {
        self.sync()
    }
    fn device_writer(&mut self) -> Option<Box<dyn ember_device::DeviceWriter>> {
        self.dev.writer()
    }
    fn prepare_space(&mut self, offset: u64, len: u64) {
        self.dev.prepare(offset, len);
    }
    fn prepare_appends_space(&mut self, offset: u64, len: u64) {
        self.dev.prepare_appends(offset, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_device::MemBlock;

    #[test]
    fn extents_survive_reopening_with_and_without_a_checkpoint() {
        let sm = SpaceManager::format(MemBlock::new(16 << 20), FormatOptions::default()).unwrap();
        let mut sm = sm;
        let a = sm.allocate(1000).unwrap();
        let b = sm.allocate(300 * 1024).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 5);
        assert!(b.iter().all(|e| e.offset >= sm.superblock().data.start));
        sm.free(&b[1..3]).unwrap();
        // Reopen from the bytes alone, without a checkpoint: the journal replays.
        let dev = std::mem::replace(sm.device(), MemBlock::new(0));
        let mut sm = SpaceManager::open(dev).unwrap();
        let mut want: Vec<BlockRef> = a
            .iter()
            .chain(&b[..1])
            .chain(&b[3..])
            .map(|e| e.block)
            .collect();
        want.sort();
        assert_eq!(sm.allocator().allocated(), want);
        assert!(sm.free(&b[1..2]).is_err(), "already free");
        let dev = sm.close().unwrap();
        let sm = SpaceManager::open(dev).unwrap();
        assert_eq!(sm.allocator().allocated(), want);
    }

    /// An unsynced allocation is durable once the device is synced, by anyone, and may be
    /// lost by a cut before that — the blocks are then free again, and the space opens clean.
    #[test]
    fn an_unsynced_allocation_is_durable_at_the_next_sync_only() {
        use ember_device::{FaultPlan, FaultyBlock, PowerFail};
        let mut lost = 0;
        for seed in 0..16 {
            let dev = FaultyBlock::new(MemBlock::new(16 << 20), FaultPlan::run_to_end(seed));
            let mut sm = SpaceManager::format(dev, FormatOptions::default()).unwrap();
            let synced = sm.allocate(1000).unwrap();
            let later = sm.allocate_unsynced(3000).unwrap();
            sm.device().sync().unwrap();
            let unsynced = sm.allocate_unsynced(5000).unwrap();
            let spare = FaultyBlock::new(MemBlock::new(0), FaultPlan::run_to_end(0));
            let (medium, _) = std::mem::replace(sm.device(), spare).power_off();
            let sm = SpaceManager::open(medium).unwrap();
            for e in synced.iter().chain(&later) {
                assert!(sm.allocator().is_allocated(e.block), "seed {seed}");
            }
            if !sm.allocator().is_allocated(unsynced[0].block) {
                lost += 1;
            }
        }
        assert!(
            lost > 0,
            "no cut lost an unsynced allocation: it was synced"
        );
    }

    #[test]
    fn an_unformatted_device_is_refused_cleanly() {
        let err = SpaceManager::open(MemBlock::new(1 << 20)).unwrap_err();
        assert!(err.to_string().contains("superblock"), "{err}");
        assert!(SpaceManager::format(MemBlock::new(64 * 1024), FormatOptions::default()).is_err());
    }
}
