//! Leveled compaction: which tables to merge next.
//!
//! Level 0 holds flushed memtables, whose ranges may overlap; when it holds
//! `l0_trigger` tables, all of them and the level-1 tables they overlap are merged into new
//! level-1 tables. Level `n ≥ 1` may hold `level1_bytes × multiplier^(n-1)` bytes; above
//! that, one of its tables (round robin through the key space) and the tables it overlaps in
//! level `n + 1` are merged into level `n + 1`. A table that overlaps nothing below moves
//! down without being rewritten. A tombstone is dropped when no deeper level has a table
//! whose range holds its key. When no level is over its limit, a value blob that has become
//! mostly garbage is collected ([`collect`]): a table that points into it is rewritten in
//! its own level, and the merge copies the values it still points to into a new blob.

use std::sync::Arc;

use crate::env::BlobId;
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
    /// The level its output goes to: `level + 1`, or `level` for a [`collect`].
    pub into: usize,
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
            into: 1,
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
            into: level + 1,
        });
    }
    None
}

/// A compaction that collects value blob `blob`: the table of level 1 or deeper that points
/// to the most of its bytes, rewritten in its own level. `None` if only level 0 points into
/// it (level 0 is merged soon anyway).
pub fn collect(levels: &Levels, blob: BlobId) -> Option<Pick> {
    let (_, level, t) = levels
        .iter()
        .enumerate()
        .skip(1)
        .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
        .filter_map(|(l, t)| {
            let (_, n) = t.values.iter().find(|(b, _)| *b == blob)?;
            Some((*n, l, t))
        })
        .max_by_key(|(n, l, _)| (*n, std::cmp::Reverse(*l)))?;
    Some(Pick {
        level,
        inputs: vec![t.clone()],
        next: Vec::new(),
        into: level,
    })
}

/// Whether a level deeper than `out` may hold `key` (so its tombstone must be kept).
pub fn deeper_may_hold(levels: &Levels, out: usize, key: &[u8]) -> bool {
    levels
        .iter()
        .skip(out + 1)
        .any(|l| l.iter().any(|t| t.covers(key)))
}
