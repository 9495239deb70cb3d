//! Leveled compaction: which tables to merge next.
//!
//! Level 0 holds flushed memtables, whose ranges may overlap; when it holds
//! `l0_trigger` tables, all of them and the level-1 tables they overlap are merged into new
//! level-1 tables. Level `n ≥ 1` may hold `level1_bytes × multiplier^(n-1)` bytes; above
//! that, one of its tables (round robin through the key space) and the tables it overlaps in
//! level `n + 1` are merged into level `n + 1`. A table that overlaps nothing below moves
//! down without being rewritten. A tombstone is dropped when no deeper level has a table
//! whose range holds its key.

use std::sync::Arc;

use crate::sstable::TableMeta;

/// Levels in the tree.
pub const LEVELS: usize = 7;

/// Tables per level.
pub type Levels = Vec<Vec<Arc<TableMeta>>>;

/// A compaction to run.
#[derive(Debug)]
pub struct Pick {
    /// The level read from.
    pub level: usize,
    /// Its tables taken (level 0: newest first).
    pub inputs: Vec<Arc<TableMeta>>,
    /// Overlapping tables of `level + 1`, in key order.
    pub next: Vec<Arc<TableMeta>>,
}

/// Bytes level `level ≥ 1` may hold.
pub fn level_max(level1_bytes: u64, multiplier: u64, level: usize) -> u64 {
    let mut m = level1_bytes;
    for _ in 1..level {
        m = m.saturating_mul(multiplier);
    }
    m
}

fn overlapping(level: &[Arc<TableMeta>], lo: &[u8], hi: &[u8]) -> Vec<Arc<TableMeta>> {
    level
        .iter()
        .filter(|t| t.overlaps(lo, hi))
        .cloned()
        .collect()
}

/// The next compaction, if any level is over its limit.
pub fn pick(
    levels: &Levels,
    l0_trigger: usize,
    level1_bytes: u64,
    multiplier: u64,
    pointers: &[Vec<u8>],
) -> Option<Pick> {
    if levels[0].len() >= l0_trigger.max(1) {
        let inputs = levels[0].clone();
        let lo = inputs.iter().map(|t| t.smallest.as_slice()).min()?;
        let hi = inputs.iter().map(|t| t.largest.as_slice()).max()?;
        let next = overlapping(&levels[1], lo, hi);
        return Some(Pick {
            level: 0,
            inputs,
            next,
        });
    }
    for level in 1..LEVELS - 1 {
        let bytes: u64 = levels[level].iter().map(|t| t.size).sum();
        if bytes <= level_max(level1_bytes, multiplier, level) {
            continue;
        }
        let ptr = pointers.get(level).map_or(&[][..], Vec::as_slice);
        let t = levels[level]
            .iter()
            .find(|t| t.smallest.as_slice() > ptr)
            .or_else(|| levels[level].first())?
            .clone();
        let next = overlapping(&levels[level + 1], &t.smallest, &t.largest);
        return Some(Pick {
            level,
            inputs: vec![t],
            next,
        });
    }
    None
}

/// Whether a level deeper than `out` may hold `key` (so its tombstone must be kept).
pub fn deeper_may_hold(levels: &Levels, out: usize, key: &[u8]) -> bool {
    levels
        .iter()
        .skip(out + 1)
        .any(|l| l.iter().any(|t| t.covers(key)))
}
