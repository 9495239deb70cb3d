//! Configuration: where the store lives on the flash, how it is cut up, and which
//! checkpointing scheme runs it.

use ember_device::{FlashGeometry, WriteRule};

use crate::error::{Error, Result};
use crate::format::{COMMIT_FIXED, SEG_HEADER, record_size};

/// Most partitions a store may have.
pub const MAX_PARTITIONS: usize = 8;
/// Largest node (bytes): 64 pointer slots.
pub const MAX_NODE: usize = 128;
/// Deepest path a tree may have (a longer one is corruption; a put that would need it goes to
/// the next partition).
pub const MAX_DEPTH: usize = 40;

/// How checkpoints are made (the paper's RB and its two §V-A2 baselines, on the same tree and
/// the same partition cleaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checkpointing {
    /// iFKVS: writes go in place; the first post-checkpoint write to an area or node leaves a
    /// write mark in the global undo log; restore undoes what follows the marks.
    Rollback,
    /// The revised iNVMFS: every post-checkpoint write goes to a redo log (target + data);
    /// reads look there first; commit writes the log back home; restore forgets the log.
    Wal,
    /// The revised BPFS: a pre-checkpoint node is copied on its first change, and so is the
    /// path to the root (wandering tree); the commit record names the roots; restore erases
    /// what was written after the checkpoint.
    Cow,
}

impl Checkpointing {
    pub(crate) fn code(self) -> u8 {
        match self {
            Checkpointing::Rollback => 1,
            Checkpointing::Wal => 2,
            Checkpointing::Cow => 3,
        }
    }
}

/// How rollback undoes post-checkpoint bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Undo {
    /// Zero them (one-way bit flipping): idempotent, no erase. The space is lost until the
    /// partition is erased.
    Discard,
    /// Copy the segment's pre-checkpoint bytes to a backup segment (with a checksummed
    /// header), erase the segment, copy them back.
    Erase,
}

/// Where the store lives and how it is organized. The flash layout, from `base`: the undo log
/// (`log_units` erase units), the backup area (2 units), then `partitions` partitions of
/// `partition_units` units each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config<const D: usize> {
    /// Flash offset of the store (a multiple of the erase size).
    pub base: u64,
    /// Erase units of the circular undo log (the redo log for [`Checkpointing::Wal`]).
    pub log_units: u16,
    /// Number of partitions (2 to [`MAX_PARTITIONS`]), used first-in-first-out.
    pub partitions: u8,
    /// Erase units per partition.
    pub partition_units: u16,
    /// Node size in bytes (even, 8 to [`MAX_NODE`], dividing the erase size): `node_size / 2`
    /// pointer slots.
    pub node_size: u8,
    /// Largest context blob a commit may carry.
    pub context_max: u16,
    /// Exclusive upper bound of each dimension: the root's region is `[0, bound)`.
    pub bounds: [u16; D],
    /// Lazy split: a node that splits keeps its record pointers (off: they are copied into the
    /// children, and readers skip the split node's own).
    pub lazy_split: bool,
    /// Pivot split: a split cuts the region at the mean of the node's records instead of the
    /// middle; the pivot is stored in a small header before the children.
    pub pivot_split: bool,
    /// The checkpointing scheme.
    pub checkpointing: Checkpointing,
    /// How rollback undoes writes (rollback only).
    pub undo: Undo,
    /// COW only: when the current partition is full and its live (reachable) bytes are
    /// below this percentage of the partition, the next commit copies the live tree into a
    /// free partition (copy-based compaction, the paper's revised BPFS) instead of moving on
    /// to a new partition; 0 never compacts. Default 40: in the paper's workload with lazy
    /// split (the sweep in BENCHMARKS.md) the fastest setting that raises the records kept;
    /// 50, where a compaction frees as many bytes as it copies, is slower and keeps no more,
    /// and above 55 compactions follow each other every few dozen puts (with lazy split a
    /// full internal node is copied on every pointer update). With eager split COW makes far
    /// less garbage: 40–45 % never compacts there, and 65–80 % keep 2,900–4,200 records.
    pub cow_compact_percent: u8,
}

impl<const D: usize> Config<D> {
    /// The paper's setup for a region `[0, bound)` per dimension: 4 partitions of 20 KiB
    /// (40 × 512-byte segments), 64-byte nodes, a 4-segment undo log, a 200-byte context,
    /// lazy equal split, rollback with discard undo.
    pub const fn new(bounds: [u16; D]) -> Self {
        Config {
            base: 0,
            log_units: 4,
            partitions: 4,
            partition_units: 40,
            node_size: 64,
            context_max: 200,
            bounds,
            lazy_split: true,
            pivot_split: false,
            checkpointing: Checkpointing::Rollback,
            undo: Undo::Discard,
            cow_compact_percent: 40,
        }
    }

    /// Bytes of flash the store needs with erase units of `erase_size` bytes.
    pub const fn flash_bytes(&self, erase_size: u32) -> u64 {
        (self.log_units as u64 + 2 + self.partitions as u64 * self.partition_units as u64)
            * erase_size as u64
    }
}

/// The layout worked out from a configuration and a geometry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub seg: u32,
    pub log_base: u64,
    pub log_units: u16,
    pub part_len: u32,
    pub node: u32,
    pub slots: u8,
    /// Children of a split (2^D).
    pub fanout: u8,
    /// Node units before the children of a group (the pivot with pivot split).
    pub head_units: u8,
    /// Bytes a split allocates (header and children): also the guard gap kept free between
    /// the node area and the record area.
    pub group: u32,
    pub rec: u8,
    /// Bytes of a commit record.
    pub commit_len: u16,
    pub parts: u8,
}

impl Layout {
    pub fn new<const D: usize>(cfg: &Config<D>, geom: &FlashGeometry) -> Result<Self> {
        let bad = |reason| Err(Error::Config { reason });
        if geom.validate().is_err() {
            return bad("the flash geometry is invalid");
        }
        if geom.rule != WriteRule::AndRewrite
            || geom.read_size != 1
            || geom.write_size != 1
            || geom.erase_value != 0xFF
        {
            return bad("the engine needs byte-writable NOR flash erasing to 0xFF");
        }
        if D == 0 || D > 4 {
            return bad("the number of dimensions must be 1 to 4");
        }
        if cfg.bounds.contains(&0) {
            return bad("every dimension bound must be positive");
        }
        let seg = geom.erase_size;
        if !(2..=MAX_PARTITIONS as u8).contains(&cfg.partitions) {
            return bad("partitions must be 2 to 8");
        }
        if cfg.cow_compact_percent > 100 {
            return bad("the compaction threshold is a percentage (0 to 100)");
        }
        if cfg.log_units < 2 {
            return bad("the log needs at least 2 erase units");
        }
        let node = u32::from(cfg.node_size);
        if node < 8
            || node as usize > MAX_NODE
            || !node.is_multiple_of(2)
            || !seg.is_multiple_of(node)
        {
            return bad("node size must be even, 8 to 128 bytes, and divide the erase size");
        }
        if !cfg.base.is_multiple_of(u64::from(seg)) {
            return bad("the base must be a multiple of the erase size");
        }
        let fanout = 1u8 << D;
        let group_head = if cfg.pivot_split {
            node.max((2 * D) as u32)
        } else {
            0
        };
        let group = group_head + u32::from(fanout) * node;
        let rec = record_size::<D>() as u32;
        let part_len = u32::from(cfg.partition_units) * seg;
        if part_len < 4 * group + node {
            return bad("a partition must hold at least four splits");
        }
        if part_len / node > 0x7FFE || part_len / rec > 0x7FFE {
            return bad("a partition must hold fewer than 32,767 nodes and records");
        }
        let state = 4 + 8 * u32::from(cfg.partitions);
        let commit_len =
            (COMMIT_FIXED + state + u32::from(cfg.context_max)).next_multiple_of(4) + 4;
        if SEG_HEADER + commit_len > seg {
            return bad("a commit record (state and context) must fit in one erase unit");
        }
        let total = cfg.flash_bytes(seg);
        if cfg
            .base
            .checked_add(total)
            .is_none_or(|end| end > geom.capacity)
        {
            return bad("the store does not fit on the flash");
        }
        Ok(Layout {
            seg,
            log_base: cfg.base,
            log_units: cfg.log_units,
            part_len,
            node,
            slots: (node / 2) as u8,
            fanout,
            head_units: (group_head / node) as u8,
            group,
            rec: rec as u8,
            commit_len: commit_len as u16,
            parts: cfg.partitions,
        })
    }

    /// Flash address of the backup area (header unit, then image unit).
    pub fn backup_base(&self) -> u64 {
        self.log_base + u64::from(self.log_units) * u64::from(self.seg)
    }

    /// Flash address of the first partition.
    pub fn part_base(&self) -> u64 {
        self.backup_base() + 2 * u64::from(self.seg)
    }

    /// Flash address of partition `p`.
    pub fn part(&self, p: u8) -> u64 {
        self.part_base() + u64::from(p) * u64::from(self.part_len)
    }

    /// Flash address of node byte offset `off` (node area offsets count from the partition).
    pub fn at(&self, p: u8, off: u32) -> u64 {
        self.part(p) + u64::from(off)
    }

    /// Partition offset of record `r` (the record area grows down from the partition's end).
    pub fn rec_off(&self, r: u16) -> u32 {
        self.part_len
            .saturating_sub((u32::from(r) + 1) * u32::from(self.rec))
    }
}
