//! The variable-size block allocator of the DATA_ZONE (LUNAR §3.2.2).
//!
//! Blocks come in *size classes*: `min_block × growth^i` up to `max_block` (512 B to 64 KB,
//! growth 2 by default; growth 1 is a fixed-size allocator). A request up to `max_block` gets
//! one block of the smallest class that fits it (best fit); a larger request is split into
//! `max_block` blocks plus one block of the class that best fits the rest.
//!
//! The zone is cut into equal *chunks*; each chunk serves one class at a time and keeps its
//! allocation bitmap in one 512-byte sector, so that most updates are a single atomic sector
//! write. A chunk holds at most 3,840 blocks of its class. Its size is chosen when the zone is
//! formatted and kept in the class directory: eight largest blocks (512 KiB by default) on a
//! small zone; on a zone of at least [`MIN_CHUNKS`] bigger chunks, as many largest blocks as
//! the bitmap sector can track for the smallest class (30 × 64 KiB = 1,920 KiB by default,
//! so one sector covers 240 blocks of 8 KiB instead of 64), up to the zone's size over
//! [`MIN_CHUNKS`].
//!
//! # Keeping the bitmaps consistent (the paper's three cases)
//!
//! Every chunk has two bitmap *slots*, one in each of two *groups*; the class directory says
//! which group is active for each class.
//! 1. A change that touches one chunk of a class rewrites that chunk's active slot in place:
//!    one atomic sector write.
//! 2. A change that touches several chunks of a class copies the whole group of the class,
//!    with the changes, into the inactive slots, syncs, and then flips the class's flag in the
//!    class directory — one atomic sector write that switches the group.
//! 3. A change that spans classes is made atomic by the caller's journal transaction: the
//!    changes are recorded as a journal record first and re-applied on recovery with
//!    [`Allocator::mark`], which is idempotent.
//!
//! # On-device format
//!
//! ```text
//! zone sector 0, 1      class directory copies (written alternately; the valid copy with the
//!                       higher generation is current)
//! zone sector 2 + 2c + g  bitmap slot of chunk c in group g
//! data area             aligned to 4 KiB; chunk c occupies [data + c·chunk, data + (c+1)·chunk)
//!
//! class directory: 16-byte header (version 2) | generation u64 | min u32 | max u32 | growth u32 |
//!                  chunk u32 (bytes of a chunk: a multiple of max, at most 3,840 min blocks) |
//!                  chunks u32 | classes u8 | active group per class (u8 each)
//!                  (version 1: the same fields; its chunk size is always the small-zone one)
//! bitmap slot:     16-byte header | generation u64 | chunk u32 | class u8 (0xFF: none) | group u8 |
//!                  2 reserved | 480 bytes of bitmap (bit i = block i of the chunk in use)
//! ```
//!
//! A chunk's live slot is the valid slot, of the two, whose class names it in the class's
//! active group; if both qualify the higher generation wins (a chunk that moved from one class
//! to another). Before a class switches to group g, every slot of group g that still names
//! the class but belongs to a chunk the class gave up is rewritten as free, so no stale slot
//! comes alive with the switch. Every slot is written at format time, so a slot that fails its checksum is
//! corruption, reported as an error — never silently replaced by the other slot.

use ember_device::BlockDevice;

use crate::checkpoint::{OnDevice, Sink};
use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};

const SECTOR: u64 = 512;
/// Blocks one bitmap sector can track.
pub const BITS_PER_CHUNK: u32 = 480 * 8;
const WORDS: usize = (BITS_PER_CHUNK / 64) as usize;
const NO_CLASS: u8 = 0xFF;
const DATA_ALIGN: u64 = 4096;
/// A zone is cut into chunks bigger than 512 KiB only while it keeps at least this many.
pub const MIN_CHUNKS: u64 = 64;

/// The allocator's shape: size classes and their growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocConfig {
    /// Smallest block in bytes (a multiple of 512).
    pub min_block: u32,
    /// Largest block in bytes.
    pub max_block: u32,
    /// Each class's blocks are this many times the previous class's (1 = fixed-size).
    pub growth: u32,
}

impl Default for AllocConfig {
    fn default() -> Self {
        AllocConfig {
            min_block: 512,
            max_block: 64 * 1024,
            growth: 2,
        }
    }
}

impl AllocConfig {
    /// Largest blocks per chunk on a small zone: enough for 512 KiB (at least eight), or
    /// fewer where the smallest class would need more bits than one bitmap sector holds.
    fn base_chunk_blocks(&self) -> u32 {
        let want = ((512 * 1024) / self.max_block.max(1)).max(8);
        self.max_chunk_blocks().min(want)
    }

    /// The most largest blocks a chunk may hold: its smallest class still fits the bitmap.
    fn max_chunk_blocks(&self) -> u32 {
        let ratio = (self.max_block / self.min_block.max(1)).max(1);
        (BITS_PER_CHUNK / ratio).max(1)
    }

    /// Largest blocks per chunk for a zone of `len` bytes: as many as one bitmap sector can
    /// track, while the zone still has [`MIN_CHUNKS`] chunks; never fewer than
    /// [`base_chunk_blocks`](Self::base_chunk_blocks). Bigger chunks mean fewer bitmap
    /// sectors per block of the large classes (at 64 KiB × 30, one sector for 240 blocks of
    /// 8 KiB instead of 64), so a checkpoint writes fewer of them.
    fn chunk_blocks_for(&self, len: u64) -> u32 {
        let fit = len / (MIN_CHUNKS * u64::from(self.max_block.max(1)));
        let fit = u32::try_from(fit).unwrap_or(u32::MAX);
        fit.clamp(self.base_chunk_blocks(), self.max_chunk_blocks())
    }

    /// The block size of every class, smallest first.
    pub fn class_sizes(&self) -> Result<Vec<u32>> {
        let AllocConfig {
            min_block,
            max_block,
            growth,
        } = *self;
        if min_block == 0 || min_block % 512 != 0 {
            return Err(TableError::Invalid(
                "min_block must be a positive multiple of 512",
            ));
        }
        if max_block < min_block || growth == 0 {
            return Err(TableError::Invalid(
                "need max_block >= min_block and growth >= 1",
            ));
        }
        if max_block / min_block > BITS_PER_CHUNK {
            return Err(TableError::Invalid(
                "max_block / min_block must be at most 3840",
            ));
        }
        let mut sizes = vec![min_block];
        if growth > 1 {
            while let Some(next) = sizes.last().and_then(|s| s.checked_mul(growth)) {
                if next > max_block || sizes.len() >= 32 {
                    break;
                }
                sizes.push(next);
            }
        }
        Ok(sizes)
    }
}

/// One allocated block: `class`, `chunk`, `index` within the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockRef {
    /// Size class.
    pub class: u8,
    /// Chunk of the data area.
    pub chunk: u32,
    /// Block number within the chunk.
    pub index: u32,
}

#[derive(Debug, Clone)]
struct Chunk {
    class: Option<u8>,
    bits: [u64; WORDS],
    used: u32,
    /// Blocks in use according to the live slot on the device.
    durable_used: u32,
    generation: u64,
    dirty: bool,
    /// The class byte each of the chunk's two slots holds on the device.
    slots: [u8; 2],
}

impl Chunk {
    /// A chunk of no class with every block free, never written.
    fn empty() -> Self {
        Chunk {
            class: None,
            bits: [0; WORDS],
            used: 0,
            durable_used: 0,
            generation: 0,
            dirty: false,
            slots: [NO_CLASS; 2],
        }
    }

    fn is_set(&self, i: u32) -> bool {
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: u32, on: bool) -> bool {
        let w = &mut self.bits[(i / 64) as usize];
        let mask = 1u64 << (i % 64);
        let was = *w & mask != 0;
        if was != on {
            *w ^= mask;
            if on {
                self.used += 1;
            } else {
                self.used -= 1;
            }
            self.dirty = true;
        }
        was != on
    }
}

/// The allocator of one DATA_ZONE (see the module docs).
#[derive(Debug, Clone)]
pub struct Allocator {
    cfg: AllocConfig,
    sizes: Vec<u32>,
    zone: u64,
    data: u64,
    chunk_bytes: u64,
    chunks: Vec<Chunk>,
    active: Vec<u8>,
    dir_gen: u64,
    next_gen: u64,
}

impl Allocator {
    /// Lays out an empty allocator in the zone `[start, start + len)` and makes it durable.
    pub fn format<D: BlockDevice>(
        dev: &mut D,
        start: u64,
        len: u64,
        cfg: AllocConfig,
    ) -> Result<Self> {
        let mut a = Self::layout(start, len, cfg, cfg.chunk_blocks_for(len))?;
        let chunks = a.chunks.len();
        // Every slot starts valid, so that a bad checksum later can only mean corruption.
        let mut buf = vec![0u8; 2 * chunks * SECTOR as usize];
        for c in 0..chunks {
            for g in 0..2 {
                let at = (2 * c + g) * SECTOR as usize;
                a.encode_slot(c, g as u8, 0, &mut buf[at..at + SECTOR as usize]);
            }
        }
        dev.write(start + 2 * SECTOR, &buf)?;
        a.write_dir(&mut OnDevice(dev))?;
        a.write_dir(&mut OnDevice(dev))?;
        dev.sync()?;
        Ok(a)
    }

    /// Opens the allocator in the zone, reading the class directory and every chunk's live
    /// bitmap slot.
    pub fn open<D: BlockDevice>(
        dev: &mut D,
        start: u64,
        len: u64,
        cfg: AllocConfig,
    ) -> Result<Self> {
        let mut best: Option<(u64, [u8; 512])> = None;
        let mut first_err = None;
        for copy in 0..2 {
            let at = start + copy * SECTOR;
            let mut d = [0u8; 512];
            dev.read(at, &mut d)?;
            match format::check(Kind::ClassDir, &d, at) {
                Ok(_) if best.is_none_or(|(g, _)| u64_at(&d, 16) > g) => {
                    best = Some((u64_at(&d, 16), d))
                }
                Ok(_) => {}
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        let Some((dir_gen, d)) = best else {
            return Err(first_err.unwrap_or(TableError::Invalid("no class directory")));
        };
        let corrupt = |reason| TableError::Corrupt {
            structure: Kind::ClassDir.name(),
            offset: start,
            reason,
        };
        let stored = AllocConfig {
            min_block: u32_at(&d, 24),
            max_block: u32_at(&d, 28),
            growth: u32_at(&d, 32),
        };
        if stored != cfg {
            return Err(TableError::Invalid(
                "the allocator configuration differs from the device's",
            ));
        }
        // Version 1 directories always hold the 512 KiB geometry; version 2 ones the size
        // chosen for the zone at format time. Either way the stored size is used.
        let chunk = u32_at(&d, 36);
        let blocks = chunk / cfg.max_block.max(1);
        if !chunk.is_multiple_of(cfg.max_block.max(1))
            || !(1..=cfg.max_chunk_blocks()).contains(&blocks)
        {
            return Err(corrupt("chunk size out of range for the configuration"));
        }
        let mut a = Self::layout(start, len, cfg, blocks)?;
        if u64::from(chunk) != a.chunk_bytes || u32_at(&d, 40) as usize != a.chunks.len() {
            return Err(corrupt("chunk geometry does not match the zone"));
        }
        if usize::from(d[44]) != a.sizes.len() {
            return Err(corrupt("class count does not match the configuration"));
        }
        for (k, flag) in a.active.iter_mut().enumerate() {
            *flag = d[48 + k];
            if *flag > 1 {
                return Err(corrupt("active group flag is neither 0 nor 1"));
            }
        }
        a.dir_gen = dir_gen;
        let n = a.chunks.len();
        let mut buf = vec![0u8; 2 * n * SECTOR as usize];
        dev.read(start + 2 * SECTOR, &mut buf)?;
        let mut max_gen = 0;
        for c in 0..n {
            let mut live: Option<(u64, u8, [u64; WORDS])> = None;
            for g in 0..2usize {
                let at_buf = (2 * c + g) * SECTOR as usize;
                let slot = &buf[at_buf..at_buf + SECTOR as usize];
                let at = start + 2 * SECTOR + at_buf as u64;
                format::check(Kind::Bitmap, slot, at)?;
                let generation = u64_at(slot, 16);
                max_gen = max_gen.max(generation);
                let class = slot[28];
                if u32_at(slot, 24) as usize != c || usize::from(slot[29]) != g {
                    return Err(TableError::Corrupt {
                        structure: Kind::Bitmap.name(),
                        offset: at,
                        reason: "slot names another chunk or group",
                    });
                }
                a.chunks[c].slots[g] = class;
                if class == NO_CLASS {
                    continue;
                }
                if usize::from(class) >= a.sizes.len() {
                    return Err(TableError::Corrupt {
                        structure: Kind::Bitmap.name(),
                        offset: at,
                        reason: "unknown size class",
                    });
                }
                if a.active[usize::from(class)] as usize != g {
                    continue; // superseded: the class's other group is live
                }
                if live.is_none_or(|(lg, _, _)| generation > lg) {
                    let mut bits = [0u64; WORDS];
                    for (w, word) in bits.iter_mut().enumerate() {
                        *word = u64_at(slot, 32 + 8 * w);
                    }
                    live = Some((generation, class, bits));
                }
            }
            if let Some((generation, class, bits)) = live {
                let per_chunk = a.blocks_per_chunk(class);
                let live_at =
                    start + (2 + 2 * c as u64 + u64::from(a.active[usize::from(class)])) * SECTOR;
                if bits_beyond(&bits, per_chunk) {
                    return Err(TableError::Corrupt {
                        structure: Kind::Bitmap.name(),
                        offset: live_at,
                        reason: "bits set past the chunk's last block",
                    });
                }
                let ch = &mut a.chunks[c];
                ch.class = Some(class);
                ch.bits = bits;
                ch.used = bits.iter().map(|w| w.count_ones()).sum();
                ch.durable_used = ch.used;
                ch.generation = generation;
            }
        }
        a.next_gen = max_gen + 1;
        Ok(a)
    }

    /// The geometry of a zone with chunks of `chunk_blocks` largest blocks, computed without
    /// touching the device.
    fn layout(start: u64, len: u64, cfg: AllocConfig, chunk_blocks: u32) -> Result<Self> {
        let sizes = cfg.class_sizes()?;
        if !start.is_multiple_of(SECTOR) {
            return Err(TableError::Invalid("the data zone must start on a sector"));
        }
        let chunk_bytes = u64::from(chunk_blocks) * u64::from(cfg.max_block);
        if chunk_bytes > u64::from(u32::MAX) {
            return Err(TableError::Invalid("a chunk would exceed 4 GiB"));
        }
        let data_at = |n: u64| (start + (2 + 2 * n) * SECTOR).div_ceil(DATA_ALIGN) * DATA_ALIGN;
        let mut n = len.saturating_sub(2 * SECTOR) / (chunk_bytes + 2 * SECTOR);
        while n > 0 && data_at(n) + n * chunk_bytes > start.saturating_add(len) {
            n -= 1;
        }
        if n == 0 {
            return Err(TableError::Invalid(
                "the data zone is smaller than one chunk",
            ));
        }
        let chunks = usize::try_from(n).map_err(|_| TableError::Invalid("too many chunks"))?;
        let empty = Chunk::empty();
        Ok(Allocator {
            cfg,
            active: vec![0; sizes.len()],
            sizes,
            zone: start,
            data: data_at(n),
            chunk_bytes,
            chunks: vec![empty; chunks],
            dir_gen: 0,
            next_gen: 1,
        })
    }

    /// Blocks of class `class` one chunk holds.
    fn blocks_per_chunk(&self, class: u8) -> u32 {
        let size = u64::from(self.sizes[usize::from(class)]);
        (self.chunk_bytes / size) as u32
    }

    /// The block size of every class.
    pub fn class_sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// The configuration.
    pub fn config(&self) -> AllocConfig {
        self.cfg
    }

    /// Bytes of one chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Byte offset on the device, and length, of a block.
    pub fn extent(&self, b: BlockRef) -> (u64, u64) {
        let size = u64::from(self.sizes.get(usize::from(b.class)).copied().unwrap_or(0));
        (
            self.data + u64::from(b.chunk) * self.chunk_bytes + u64::from(b.index) * size,
            size,
        )
    }

    /// Whether a block reference names a block of the zone (allocated or not).
    pub fn is_valid(&self, b: BlockRef) -> bool {
        usize::from(b.class) < self.sizes.len()
            && (b.chunk as usize) < self.chunks.len()
            && b.index < self.blocks_per_chunk(b.class)
    }

    /// Whether a block is currently allocated (in RAM).
    pub fn is_allocated(&self, b: BlockRef) -> bool {
        self.chunks.get(b.chunk as usize).is_some_and(|c| {
            c.class == Some(b.class) && b.index < BITS_PER_CHUNK && c.is_set(b.index)
        })
    }

    /// Whether `b` is free and can be taken without giving up another block: its chunk
    /// serves `b`'s class or holds no block (a [`mark`](Self::mark) of another class than
    /// the chunk's clears the chunk).
    pub fn is_free_to_take(&self, b: BlockRef) -> bool {
        self.is_valid(b)
            && self
                .chunks
                .get(b.chunk as usize)
                .is_some_and(|c| (c.class == Some(b.class) && !c.is_set(b.index)) || c.used == 0)
    }

    /// The smallest class whose blocks hold `bytes`.
    fn best_class(&self, bytes: u64) -> Option<u8> {
        self.sizes
            .iter()
            .position(|&s| u64::from(s) >= bytes)
            .map(|k| k as u8)
    }

    /// The size of the block a request of `bytes` (at most the largest block) gets.
    pub fn fit_size(&self, bytes: u64) -> Option<u64> {
        self.best_class(bytes)
            .map(|k| u64::from(self.sizes[usize::from(k)]))
    }

    /// Allocates room for `bytes` bytes: one block of the best-fitting class, or for requests
    /// over the largest block, largest blocks plus one block for the rest. Changes RAM only;
    /// [`flush`](Self::flush) makes them durable. All or nothing: on `NoSpace` nothing changes.
    pub fn allocate(&mut self, bytes: u64) -> Result<Vec<BlockRef>> {
        self.allocate_after(bytes, None)
    }

    /// [`allocate`](Self::allocate), placing the blocks right after `hint` where that is free
    /// (a table growing block by block stays contiguous), and the blocks of one request one
    /// after another where their class allows.
    pub fn allocate_after(&mut self, bytes: u64, hint: Option<BlockRef>) -> Result<Vec<BlockRef>> {
        if bytes == 0 {
            return Err(TableError::Invalid("an allocation of zero bytes"));
        }
        let max = u64::from(*self.sizes.last().unwrap_or(&0));
        let mut wants = Vec::new();
        let mut rest = bytes;
        while rest > max {
            wants.push(self.sizes.len() as u8 - 1);
            rest -= max;
        }
        if let Some(k) = self.best_class(rest) {
            wants.push(k);
        }
        let mut got: Vec<BlockRef> = Vec::with_capacity(wants.len());
        for (n, &k) in wants.iter().enumerate() {
            let after = got.last().copied().or(hint);
            // The blocks of this class still to come in this request, this one included.
            let run = wants[n..].iter().take_while(|&&w| w == k).count() as u32;
            let next = after
                .and_then(|a| self.take_after(k, a))
                .or_else(|| self.take(k, run));
            match next {
                Some(b) => got.push(b),
                None => {
                    for b in &got {
                        self.release(*b);
                    }
                    return Err(TableError::NoSpace { bytes });
                }
            }
        }
        Ok(got)
    }

    /// Takes the block of class `k` that follows `a` on the device, if it is free: the next
    /// block of `a`'s chunk, or the first block of the next chunk when that chunk is empty or
    /// already serves class `k`.
    fn take_after(&mut self, k: u8, a: BlockRef) -> Option<BlockRef> {
        if a.class != k {
            return None;
        }
        let per = self.blocks_per_chunk(k);
        let (c, i) = if a.index + 1 < per {
            (a.chunk as usize, a.index + 1)
        } else {
            (a.chunk as usize + 1, 0)
        };
        let ch = self.chunks.get_mut(c)?;
        let usable = ch.class == Some(k) || (ch.used == 0 && ch.durable_used == 0);
        if !usable || ch.is_set(i) {
            return None;
        }
        if ch.class != Some(k) {
            ch.class = Some(k);
            ch.dirty = true;
        }
        ch.set(i, true);
        Some(BlockRef {
            class: k,
            chunk: c as u32,
            index: i,
        })
    }

    /// Takes a free block of class `k`, or of the next larger class with room (best fit),
    /// preferring the start of `run` free blocks in a row.
    fn take(&mut self, k: u8, run: u32) -> Option<BlockRef> {
        (usize::from(k)..self.sizes.len()).find_map(|k| self.take_exact(k as u8, run))
    }

    fn take_exact(&mut self, k: u8, run: u32) -> Option<BlockRef> {
        let per = self.blocks_per_chunk(k);
        let run = run.clamp(1, per);
        // Where `run` blocks in a row are free: the fullest chunk of the class that has such
        // a run (dense chunks, contiguous requests), else an empty chunk, else any free block.
        // Every candidate is searched (a word at a time), without a list of them: a buffer
        // allocated and freed per allocation changed the heap under the caller's own
        // allocations enough to cost a scan 17% more instructions (`exec_cost bscan`).
        let with_run = self
            .chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.class == Some(k) && c.used + run <= per)
            .filter_map(|(i, c)| first_run(c, per, run).map(|at| (i, c.used, at)))
            .max_by_key(|&(i, used, _)| (used, core::cmp::Reverse(i)))
            .map(|(i, _, at)| (i, at));
        let empty = || {
            self.chunks
                .iter()
                .position(|c| c.used == 0 && c.durable_used == 0)
                .map(|i| (i, 0))
        };
        let any = || {
            self.chunks
                .iter()
                .enumerate()
                .filter(|(_, c)| c.class == Some(k) && c.used < per)
                .max_by_key(|(i, c)| (c.used, core::cmp::Reverse(*i)))
                .and_then(|(i, c)| first_run(c, per, 1).map(|at| (i, at)))
        };
        let (c, i) = with_run.or_else(empty).or_else(any)?;
        let ch = &mut self.chunks[c];
        if ch.class != Some(k) {
            ch.class = Some(k);
            ch.dirty = true;
        }
        ch.set(i, true);
        Some(BlockRef {
            class: k,
            chunk: c as u32,
            index: i,
        })
    }

    fn release(&mut self, b: BlockRef) {
        if let Some(ch) = self.chunks.get_mut(b.chunk as usize) {
            if ch.class == Some(b.class) && b.index < BITS_PER_CHUNK {
                ch.set(b.index, false);
            }
        }
    }

    /// Frees blocks (RAM only until [`flush`](Self::flush)). Freeing a block that is not
    /// allocated is an error and changes nothing.
    pub fn free(&mut self, blocks: &[BlockRef]) -> Result<()> {
        if blocks.iter().any(|b| !self.is_allocated(*b)) {
            return Err(TableError::Invalid("freeing a block that is not allocated"));
        }
        let mut sorted = blocks.to_vec();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(TableError::Invalid("freeing the same block twice"));
        }
        for b in blocks {
            self.release(*b);
        }
        Ok(())
    }

    /// Sets a block's state, as journal replay does. Replaying a journal's marks in order over
    /// any mix of the bitmaps before and after them ends in the state after them: the last
    /// mark of each block wins, and a mark for a class other than the chunk's takes the chunk
    /// over, clearing it (in a valid history the chunk was empty when it changed class).
    pub fn mark(&mut self, b: BlockRef, used: bool) -> Result<()> {
        if usize::from(b.class) >= self.sizes.len() || b.index >= self.blocks_per_chunk(b.class) {
            return Err(TableError::Invalid("block reference out of range"));
        }
        let ch = self
            .chunks
            .get_mut(b.chunk as usize)
            .ok_or(TableError::Invalid("block reference out of range"))?;
        if ch.class != Some(b.class) {
            ch.bits = [0; WORDS];
            ch.used = 0;
            ch.class = Some(b.class);
            ch.dirty = true;
        }
        ch.set(b.index, used);
        Ok(())
    }

    /// Takes over what `flushed` — a copy of this allocator taken earlier and flushed since
    /// (a checkpoint's, see [`checkpoint`](crate::checkpoint)) — knows of the device: its
    /// slots, generations and directory. A chunk whose blocks differ from what was flushed
    /// stays dirty. Nothing else may have flushed this allocator since the copy.
    pub(crate) fn adopt_flushed(&mut self, flushed: &Allocator) {
        for (c, f) in self.chunks.iter_mut().zip(&flushed.chunks) {
            c.slots = f.slots;
            c.generation = f.generation;
            c.durable_used = f.used;
            c.dirty = c.dirty && (c.class != f.class || c.bits != f.bits) || f.dirty;
        }
        self.active.clone_from(&flushed.active);
        self.dir_gen = flushed.dir_gen;
        self.next_gen = self.next_gen.max(flushed.next_gen);
    }

    /// Whether some change is not yet durable.
    pub fn is_dirty(&self) -> bool {
        self.chunks.iter().any(|c| c.dirty)
    }

    /// Makes every change durable, class by class: one dirty chunk is rewritten in place
    /// (case 1); several are copied with the whole group into the inactive slots, synced, and
    /// switched to by flipping the class's flag (case 2). Syncs at the end. A crash in the
    /// middle leaves each class in its old or its new state; across classes the caller's
    /// journal makes the whole change atomic (case 3).
    pub fn flush<D: BlockDevice>(&mut self, dev: &mut D) -> Result<()> {
        self.flush_to(&mut OnDevice(dev))
    }

    /// [`flush`](Self::flush) through a checkpoint's sink (the device, or a handle of it
    /// on another thread).
    pub(crate) fn flush_to(&mut self, dev: &mut dyn Sink) -> Result<()> {
        if !self.is_dirty() {
            return Ok(());
        }
        for k in 0..self.sizes.len() as u8 {
            let dirty: Vec<usize> = (0..self.chunks.len())
                .filter(|&c| self.chunks[c].dirty && self.chunks[c].class == Some(k))
                .collect();
            match dirty.len() {
                0 => {}
                1 => {
                    let g = self.active[usize::from(k)];
                    self.write_slot(dev, dirty[0], g)?;
                }
                _ => {
                    let g = 1 - self.active[usize::from(k)];
                    // Slots of group g that still name the class but belong to chunks it gave
                    // up must not come alive with the flip.
                    let stale: Vec<usize> = (0..self.chunks.len())
                        .filter(|&c| {
                            self.chunks[c].class != Some(k)
                                && self.chunks[c].slots[usize::from(g)] == k
                        })
                        .collect();
                    for c in stale {
                        self.write_free_slot(dev, c, g)?;
                    }
                    let members: Vec<usize> = (0..self.chunks.len())
                        .filter(|&c| self.chunks[c].class == Some(k))
                        .collect();
                    for c in members {
                        self.write_slot(dev, c, g)?;
                    }
                    dev.sync()?;
                    self.active[usize::from(k)] = g;
                    self.write_dir(dev)?;
                }
            }
        }
        dev.sync()?;
        for c in &mut self.chunks {
            c.dirty = false;
            c.durable_used = c.used;
        }
        Ok(())
    }

    fn write_slot(&mut self, dev: &mut dyn Sink, c: usize, g: u8) -> Result<()> {
        let generation = self.next_gen;
        self.next_gen += 1;
        self.chunks[c].generation = generation;
        let mut s = [0u8; 512];
        self.encode_slot(c, g, generation, &mut s);
        dev.write(self.zone + (2 + 2 * c as u64 + u64::from(g)) * SECTOR, &s)?;
        self.chunks[c].slots[usize::from(g)] = s[28];
        Ok(())
    }

    /// Writes slot `g` of chunk `c` as naming no class.
    fn write_free_slot(&mut self, dev: &mut dyn Sink, c: usize, g: u8) -> Result<()> {
        let generation = self.next_gen;
        self.next_gen += 1;
        let mut s = [0u8; 512];
        s[16..24].copy_from_slice(&generation.to_le_bytes());
        s[24..28].copy_from_slice(&(c as u32).to_le_bytes());
        s[28] = NO_CLASS;
        s[29] = g;
        format::seal(Kind::Bitmap, &mut s, 512);
        dev.write(self.zone + (2 + 2 * c as u64 + u64::from(g)) * SECTOR, &s)?;
        self.chunks[c].slots[usize::from(g)] = NO_CLASS;
        Ok(())
    }

    fn encode_slot(&self, c: usize, g: u8, generation: u64, s: &mut [u8]) {
        let ch = &self.chunks[c];
        s[16..24].copy_from_slice(&generation.to_le_bytes());
        s[24..28].copy_from_slice(&(c as u32).to_le_bytes());
        s[28] = ch.class.unwrap_or(NO_CLASS);
        s[29] = g;
        for (w, word) in ch.bits.iter().enumerate() {
            s[32 + 8 * w..40 + 8 * w].copy_from_slice(&word.to_le_bytes());
        }
        format::seal(Kind::Bitmap, s, 512);
    }

    fn write_dir(&mut self, dev: &mut dyn Sink) -> Result<()> {
        // The copies alternate, so the previous directory survives a torn or corrupt write.
        self.dir_gen += 1;
        let mut d = [0u8; 512];
        d[16..24].copy_from_slice(&self.dir_gen.to_le_bytes());
        d[24..28].copy_from_slice(&self.cfg.min_block.to_le_bytes());
        d[28..32].copy_from_slice(&self.cfg.max_block.to_le_bytes());
        d[32..36].copy_from_slice(&self.cfg.growth.to_le_bytes());
        d[36..40].copy_from_slice(&(self.chunk_bytes as u32).to_le_bytes());
        d[40..44].copy_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        d[44] = self.sizes.len() as u8;
        d[48..48 + self.active.len()].copy_from_slice(&self.active);
        format::seal(Kind::ClassDir, &mut d, 48 + self.active.len());
        dev.write(self.zone + (self.dir_gen % 2) * SECTOR, &d)?;
        Ok(())
    }

    /// Every allocated block, in address order.
    pub fn allocated(&self) -> Vec<BlockRef> {
        let mut out = Vec::new();
        for (c, ch) in self.chunks.iter().enumerate() {
            let Some(k) = ch.class else { continue };
            for i in 0..self.blocks_per_chunk(k) {
                if ch.is_set(i) {
                    out.push(BlockRef {
                        class: k,
                        chunk: c as u32,
                        index: i,
                    });
                }
            }
        }
        out
    }

    /// Bytes in allocated blocks.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter_map(|c| {
                c.class
                    .map(|k| u64::from(c.used) * u64::from(self.sizes[usize::from(k)]))
            })
            .sum()
    }
}

/// The first index of `run` free blocks in a row among the chunk's first `per` blocks
/// (`None` for a run of 0). A word at a time: a full word ends a run, an empty one adds 64
/// blocks to it, and only a mixed word is looked at block by block.
fn first_run(c: &Chunk, per: u32, run: u32) -> Option<u32> {
    if run == 0 {
        return None;
    }
    // Free blocks in a row just before block `base`.
    let mut len = 0u32;
    let mut base = 0u32;
    while base < per {
        let n = (per - base).min(64);
        let w = *c.bits.get((base / 64) as usize)?;
        // Blocks past `per` count as taken.
        let w = if n < 64 { w | (u64::MAX << n) } else { w };
        if w == u64::MAX {
            len = 0;
        } else if w == 0 {
            if len + 64 >= run {
                return Some(base - len);
            }
            len += 64;
        } else {
            for b in 0..n {
                if w & (1 << b) != 0 {
                    len = 0;
                } else {
                    len += 1;
                    if len == run {
                        return Some(base + b + 1 - run);
                    }
                }
            }
        }
        base += 64;
    }
    None
}

fn bits_beyond(bits: &[u64; WORDS], n: u32) -> bool {
    (n..BITS_PER_CHUNK).any(|i| bits[(i / 64) as usize] & (1 << (i % 64)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_device::MemBlock;
    use proptest::prelude::*;

    /// `first_run` a block at a time, as the definition says.
    fn first_run_slowly(c: &Chunk, per: u32, run: u32) -> Option<u32> {
        let mut len = 0;
        for i in 0..per {
            if c.is_set(i) {
                len = 0;
            } else {
                len += 1;
                if len == run {
                    return Some(i + 1 - run);
                }
            }
        }
        None
    }

    proptest! {
        /// The word-at-a-time search finds the run a block-at-a-time one finds, for bitmaps
        /// of empty, full and mixed words and every chunk length.
        #[test]
        fn first_run_agrees_with_a_search_block_by_block(
            words in proptest::collection::vec(
                prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), (0u32..64).prop_map(|b| !(1u64 << b))],
                WORDS,
            ),
            per in 1u32..=BITS_PER_CHUNK,
            run in 0u32..200,
        ) {
            let mut c = Chunk::empty();
            c.class = Some(0);
            c.bits.copy_from_slice(&words);
            prop_assert_eq!(first_run(&c, per, run), first_run_slowly(&c, per, run));
        }
    }

    const ZONE: u64 = 8 << 20;

    fn fresh(cfg: AllocConfig) -> (MemBlock<Vec<u8>>, Allocator) {
        let mut dev = MemBlock::new(ZONE as usize + 4096);
        let a = Allocator::format(&mut dev, 4096, ZONE, cfg).unwrap();
        (dev, a)
    }

    #[test]
    fn classes_follow_the_configuration() {
        let sizes = AllocConfig::default().class_sizes().unwrap();
        assert_eq!(sizes, [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]);
        let fixed = AllocConfig {
            min_block: 4096,
            max_block: 4096,
            growth: 1,
        };
        assert_eq!(fixed.class_sizes().unwrap(), [4096]);
        let bad = AllocConfig {
            min_block: 100,
            ..AllocConfig::default()
        };
        assert!(bad.class_sizes().is_err());
    }

    #[test]
    fn best_fit_and_splitting_of_large_requests() {
        let (_, mut a) = fresh(AllocConfig::default());
        let one = a.allocate(100).unwrap();
        assert_eq!(a.extent(one[0]).1, 512);
        let b = a.allocate(3000).unwrap();
        assert_eq!(a.extent(b[0]).1, 4096);
        let big = a.allocate(200 * 1024).unwrap();
        let lens: Vec<u64> = big.iter().map(|&b| a.extent(b).1).collect();
        assert_eq!(lens, [65536, 65536, 65536, 8192]);
        // No two allocated blocks overlap.
        let mut ext: Vec<(u64, u64)> = a.allocated().iter().map(|&b| a.extent(b)).collect();
        ext.sort();
        for w in ext.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0);
        }
        assert!(
            a.free(&[one[0], one[0]]).is_err(),
            "a double free is refused"
        );
        a.free(&one).unwrap();
        assert!(a.free(&one).is_err(), "a double free is refused");
    }

    #[test]
    fn a_request_and_a_hinted_request_are_contiguous_even_among_holes() {
        let (_, mut a) = fresh(AllocConfig::default());
        // Leave holes: every other 64 KiB block of the first chunk free.
        let first: Vec<BlockRef> = (0..8).flat_map(|_| a.allocate(65536).unwrap()).collect();
        let odd: Vec<BlockRef> = first.iter().copied().skip(1).step_by(2).collect();
        a.free(&odd).unwrap();
        let run = a.allocate(4 * 65536).unwrap();
        let offs: Vec<u64> = run.iter().map(|&b| a.extent(b).0).collect();
        assert!(offs.windows(2).all(|w| w[1] == w[0] + 65536), "{offs:?}");
        let next = a.allocate_after(65536, run.last().copied()).unwrap();
        assert_eq!(a.extent(next[0]).0, offs[3] + 65536);
    }

    #[test]
    fn a_full_zone_refuses_and_changes_nothing() {
        let (_, mut a) = fresh(AllocConfig::default());
        let before = a.allocated_bytes();
        let err = a.allocate(64 << 20).unwrap_err();
        assert!(matches!(err, TableError::NoSpace { .. }));
        assert_eq!(a.allocated_bytes(), before);
        let mut n = 0;
        while a.allocate(65536).is_ok() {
            n += 1;
        }
        assert_eq!(
            n as usize,
            a.chunk_count() * (a.chunk_bytes() / 65536) as usize
        );
    }

    #[test]
    fn a_copy_flushed_elsewhere_is_taken_over_and_later_changes_stay_dirty() {
        let (mut dev, mut a) = fresh(AllocConfig::default());
        let cfg = a.config();
        let before = a.allocate(512).unwrap();
        let freed = a.allocate(512).unwrap();
        a.flush(&mut dev).unwrap();
        // A checkpoint's copy gives `freed` back and is flushed (on another thread); the
        // allocator meanwhile takes blocks of another class.
        let mut copy = a.clone();
        copy.free(&freed).unwrap();
        let during = a.allocate(65536).unwrap();
        copy.flush(&mut dev).unwrap();
        let on_device = Allocator::open(&mut dev, 4096, ZONE, cfg).unwrap();
        assert!(on_device.is_allocated(before[0]) && !on_device.is_allocated(freed[0]));
        assert!(!on_device.is_allocated(during[0]));
        a.free(&freed).unwrap();
        a.adopt_flushed(&copy);
        // What changed since the copy is still to be written; the next flush writes it.
        assert!(a.is_dirty());
        a.flush(&mut dev).unwrap();
        let b = Allocator::open(&mut dev, 4096, ZONE, cfg).unwrap();
        assert_eq!(b.allocated(), a.allocated());
        assert!(b.is_allocated(during[0]) && !b.is_allocated(freed[0]));
        // Nothing changed since a copy: nothing left to write.
        let copy = a.clone();
        let mut flushed = copy.clone();
        flushed.flush(&mut dev).unwrap();
        a.adopt_flushed(&flushed);
        assert!(!a.is_dirty());
    }

    #[test]
    fn flushed_state_reopens_through_both_update_paths() {
        let (mut dev, mut a) = fresh(AllocConfig::default());
        let cfg = a.config();
        // Case 1: one chunk of one class.
        let x = a.allocate(512).unwrap();
        a.flush(&mut dev).unwrap();
        let b = Allocator::open(&mut dev, 4096, ZONE, cfg).unwrap();
        assert_eq!(b.allocated(), a.allocated());
        // Case 2: enough 64 KB blocks to need two chunks of the class.
        let per_chunk = (a.chunk_bytes() / 65536) as usize;
        let mut big = Vec::new();
        for _ in 0..per_chunk + 3 {
            big.extend(a.allocate(65536).unwrap());
        }
        a.flush(&mut dev).unwrap();
        assert_eq!(a.active[7], 1, "the class switched groups");
        let b = Allocator::open(&mut dev, 4096, ZONE, cfg).unwrap();
        assert_eq!(b.allocated(), a.allocated());
        a.free(&big[..5]).unwrap();
        a.free(&x).unwrap();
        a.flush(&mut dev).unwrap();
        let b = Allocator::open(&mut dev, 4096, ZONE, cfg).unwrap();
        assert_eq!(b.allocated(), a.allocated());
        assert!(Allocator::open(&mut dev, 4096, ZONE, AllocConfig { growth: 4, ..cfg }).is_err());
    }

    #[test]
    fn a_corrupt_bitmap_is_reported_not_replaced() {
        let (mut dev, mut a) = fresh(AllocConfig::default());
        a.allocate(512).unwrap();
        a.flush(&mut dev).unwrap();
        let mut s = [0u8; 1];
        // Flip one bit of chunk 0's group-0 slot.
        let at = 4096 + 2 * 512 + 100;
        dev.read(at, &mut s).unwrap();
        dev.write(at, &[s[0] ^ 0x10]).unwrap();
        let err = Allocator::open(&mut dev, 4096, ZONE, a.config()).unwrap_err();
        assert!(err.to_string().contains("allocation bitmap"), "{err}");
    }

    #[test]
    fn replay_marks_are_idempotent() {
        let (mut dev, mut a) = fresh(AllocConfig::default());
        let b = BlockRef {
            class: 3,
            chunk: 2,
            index: 7,
        };
        a.mark(b, true).unwrap();
        a.mark(b, true).unwrap();
        assert!(a.is_allocated(b));
        a.flush(&mut dev).unwrap();
        let r = Allocator::open(&mut dev, 4096, ZONE, a.config()).unwrap();
        assert_eq!(r.allocated(), vec![b]);
        // A later mark for another class takes the chunk over.
        let other = BlockRef { class: 1, ..b };
        a.mark(other, true).unwrap();
        assert_eq!(a.allocated(), vec![other]);
    }

    #[test]
    fn chunk_size_grows_with_the_zone_and_is_read_back() {
        let cfg = AllocConfig::default();
        assert_eq!(cfg.chunk_blocks_for(16 << 20), 8, "a small zone: 512 KiB");
        assert_eq!(cfg.chunk_blocks_for(80 << 20), 20);
        assert_eq!(
            cfg.chunk_blocks_for(1 << 30),
            30,
            "as many as the bitmap tracks"
        );
        let fixed = AllocConfig {
            min_block: 4096,
            max_block: 4096,
            growth: 1,
        };
        assert_eq!(fixed.chunk_blocks_for(1 << 30), 3840);
        let big: u64 = 160 << 20;
        let mut dev = MemBlock::new(big as usize + 4096);
        let mut a = Allocator::format(&mut dev, 4096, big, cfg).unwrap();
        assert_eq!(a.chunk_bytes(), 30 * 65536);
        let rows: Vec<BlockRef> = (0..500).flat_map(|_| a.allocate(4104).unwrap()).collect();
        assert_eq!(
            rows[0].chunk, rows[239].chunk,
            "240 blocks of 8 KiB a chunk"
        );
        assert_ne!(rows[0].chunk, rows[240].chunk);
        a.allocate(512).unwrap();
        a.flush(&mut dev).unwrap();
        let b = Allocator::open(&mut dev, 4096, big, cfg).unwrap();
        assert_eq!(b.chunk_bytes(), a.chunk_bytes());
        assert_eq!(b.allocated(), a.allocated());
    }

    #[test]
    fn a_version_1_directory_keeps_its_512_kib_chunks() {
        // As an earlier build formatted a big zone: 512 KiB chunks, a version 1 directory.
        let cfg = AllocConfig::default();
        let big: u64 = 160 << 20;
        let mut dev = MemBlock::new(big as usize + 4096);
        let mut a = Allocator::layout(4096, big, cfg, 8).unwrap();
        let n = a.chunks.len();
        let mut buf = vec![0u8; 2 * n * 512];
        for c in 0..n {
            for g in 0..2 {
                let at = (2 * c + g) * 512;
                a.encode_slot(c, g as u8, 0, &mut buf[at..at + 512]);
            }
        }
        dev.write(4096 + 1024, &buf).unwrap();
        a.write_dir(&mut OnDevice(&mut dev)).unwrap();
        a.write_dir(&mut OnDevice(&mut dev)).unwrap();
        a.allocate(65536).unwrap();
        a.flush(&mut dev).unwrap();
        for copy in 0..2u64 {
            let at = 4096 + copy * 512;
            let mut d = [0u8; 512];
            dev.read(at, &mut d).unwrap();
            let len = format::sealed_len(&d).unwrap();
            format::seal_as(Kind::ClassDir, 1, &mut d, len);
            dev.write(at, &d).unwrap();
        }
        let b = Allocator::open(&mut dev, 4096, big, cfg).unwrap();
        assert_eq!(b.chunk_bytes(), 512 * 1024);
        assert_eq!(b.allocated(), a.allocated());
    }

    #[test]
    fn a_chunk_size_out_of_range_is_a_clean_error() {
        let (mut dev, a) = fresh(AllocConfig::default());
        for bad in [0u32, 1000, 31 * 65536, 9 * 65536] {
            for copy in 0..2u64 {
                let at = 4096 + copy * 512;
                let mut d = [0u8; 512];
                dev.read(at, &mut d).unwrap();
                let len = format::sealed_len(&d).unwrap();
                d[36..40].copy_from_slice(&bad.to_le_bytes());
                format::seal(Kind::ClassDir, &mut d, len);
                dev.write(at, &d).unwrap();
            }
            let err = Allocator::open(&mut dev, 4096, ZONE, a.config()).unwrap_err();
            assert!(err.to_string().contains("class directory"), "{bad}: {err}");
        }
    }
}
