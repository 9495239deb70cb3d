//! A small version of the aging experiment (`examples/aging.rs`): tables of 8..=512 KiB grow
//! by interleaved appends and are dropped at random, on a 16 MiB device, 3x its size written,
//! with the variable-size and the fixed 4 KiB allocators. Checks what must hold whatever the
//! tuning: live extents never overlap and stay inside the data zone, the allocator holds
//! exactly the live tables' blocks (also after reopening from the device bytes, with and
//! without a checkpoint), and the layout score is a fraction.

#![allow(clippy::unwrap_used)]

use ember_device::{MemBlock, SplitMix64};
use ember_table::{AllocConfig, BlockRef, Extent, FormatOptions, SpaceManager, TableError};

const KIB: u64 = 1024;
const DEVICE: u64 = 16 << 20;
const WRITTEN_TIMES: u64 = 3;
const GROWING: usize = 4;
const CHECKS: u64 = 12;

type Sm = SpaceManager<MemBlock<Vec<u8>>>;

struct Table {
    size: u64,
    requested: u64,
    extents: Vec<Extent>,
}

/// Log-uniform in `lo..=hi`, rounded up to a 512-byte sector.
fn log_uniform(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    let x = (l + u * (h - l)).exp() as u64;
    x.clamp(lo, hi).div_ceil(512) * 512
}

fn fullness(sm: &Sm) -> f64 {
    let a = sm.allocator();
    a.allocated_bytes() as f64 / (a.chunk_count() as u64 * a.chunk_bytes()) as f64
}

/// Of the blocks after each table's first, the fraction that follow their predecessor.
fn layout_score(tables: &[Table]) -> f64 {
    let (mut next, mut pairs) = (0u64, 0u64);
    for t in tables {
        for w in t.extents.windows(2) {
            pairs += 1;
            next += u64::from(w[0].offset + w[0].len == w[1].offset);
        }
    }
    if pairs == 0 {
        1.0
    } else {
        next as f64 / pairs as f64
    }
}

fn live_blocks(tables: &[Table]) -> Vec<BlockRef> {
    let mut b: Vec<BlockRef> = tables
        .iter()
        .flat_map(|t| t.extents.iter().map(|e| e.block))
        .collect();
    b.sort_unstable();
    b
}

fn allocated(sm: &Sm) -> Vec<BlockRef> {
    let mut b = sm.allocator().allocated();
    b.sort_unstable();
    b
}

/// Everything that must hold between two operations.
fn check(sm: &Sm, tables: &[Table]) {
    let data = sm.superblock().data;
    let mut ext: Vec<Extent> = tables
        .iter()
        .flat_map(|t| t.extents.iter().copied())
        .collect();
    for e in &ext {
        assert!(e.len > 0);
        assert!(
            e.offset >= data.start && e.offset + e.len <= data.start + data.len,
            "{e:?} is outside the data zone {data:?}"
        );
        assert_eq!(sm.allocator().extent(e.block), (e.offset, e.len));
        assert!(sm.allocator().is_allocated(e.block));
    }
    ext.sort_by_key(|e| e.offset);
    for w in ext.windows(2) {
        assert!(
            w[0].offset + w[0].len <= w[1].offset,
            "{:?} overlaps {:?}",
            w[0],
            w[1]
        );
    }
    let blocks = live_blocks(tables);
    assert!(
        blocks.windows(2).all(|w| w[0] != w[1]),
        "a block is in two places"
    );
    assert_eq!(allocated(sm), blocks, "the allocator holds other blocks");
    assert_eq!(
        sm.allocator().allocated_bytes(),
        ext.iter().map(|e| e.len).sum::<u64>()
    );
    let score = layout_score(tables);
    assert!((0.0..=1.0).contains(&score), "layout score {score}");
}

/// Drops a random table, growing or complete: frees all its extents.
fn drop_random(
    sm: &mut Sm,
    rng: &mut SplitMix64,
    tables: &mut Vec<Table>,
    growing: &mut Vec<usize>,
) {
    let i = rng.below(tables.len() as u64) as usize;
    let t = tables.swap_remove(i);
    if !t.extents.is_empty() {
        sm.free(&t.extents).unwrap();
    }
    // `growing` holds indices into `tables`: forget i, and follow the table moved into slot i.
    growing.retain(|&g| g != i);
    let moved = tables.len();
    for g in growing.iter_mut() {
        if *g == moved {
            *g = i;
        }
    }
}

fn age(cfg: AllocConfig, seed: u64) {
    let opts = FormatOptions {
        alloc: cfg,
        ..FormatOptions::default()
    };
    let mut sm = SpaceManager::format(MemBlock::new(DEVICE as usize), opts).unwrap();
    let mut rng = SplitMix64::new(seed);
    let mut tables: Vec<Table> = Vec::new();
    // Indices into `tables` of the tables still growing.
    let mut growing: Vec<usize> = Vec::new();
    let total = WRITTEN_TIMES * DEVICE;
    let period = total / CHECKS;
    let (mut written, mut next_check, mut checks) = (0u64, period, 0u64);
    let mut target = 0.5 + 0.35 * (rng.below(1000) as f64 / 1000.0);
    let (mut created, mut dropped) = (0u64, 0u64);

    while written < total {
        if fullness(&sm) > target {
            drop_random(&mut sm, &mut rng, &mut tables, &mut growing);
            dropped += 1;
            continue;
        }
        while growing.len() < GROWING {
            let size = log_uniform(&mut rng, 8 * KIB, 512 * KIB);
            tables.push(Table {
                size,
                requested: 0,
                extents: Vec::new(),
            });
            growing.push(tables.len() - 1);
            created += 1;
        }
        let gi = rng.below(growing.len() as u64) as usize;
        let t = &mut tables[growing[gi]];
        let step = log_uniform(&mut rng, 4 * KIB, 64 * KIB).min(t.size - t.requested);
        match sm.allocate(step) {
            Ok(ext) => {
                assert!(ext.iter().map(|e| e.len).sum::<u64>() >= step);
                written += ext.iter().map(|e| e.len).sum::<u64>();
                t.extents.extend(ext);
                t.requested += step;
                if t.requested == t.size {
                    growing.swap_remove(gi);
                }
            }
            Err(TableError::NoSpace { .. }) => {
                assert!(!tables.is_empty(), "no space on an empty device");
                drop_random(&mut sm, &mut rng, &mut tables, &mut growing);
                dropped += 1;
                continue;
            }
            Err(e) => panic!("allocate({step}): {e}"),
        }
        if written >= next_check {
            next_check += period;
            checks += 1;
            check(&sm, &tables);
            target = 0.5 + 0.35 * (rng.below(1000) as f64 / 1000.0);
            if checks % 4 == 2 {
                // Reopen from a copy of the device bytes, without a checkpoint: the journal
                // replays. Carry on with the reopened manager.
                let bytes = sm.device().clone();
                sm = SpaceManager::open(bytes).unwrap();
                check(&sm, &tables);
            } else if checks % 4 == 0 {
                sm.checkpoint().unwrap();
            }
        }
    }
    assert!(checks >= CHECKS, "ran {checks} checks");
    assert!(
        created > 0 && dropped > 0,
        "created {created}, dropped {dropped}"
    );
    check(&sm, &tables);
    let want = live_blocks(&tables);
    // Reopen after a clean close.
    let dev = sm.close().unwrap();
    let sm = SpaceManager::open(dev).unwrap();
    assert_eq!(allocated(&sm), want);
    check(&sm, &tables);
}

#[test]
fn aging_the_variable_size_allocator_keeps_the_space_consistent() {
    age(AllocConfig::default(), 7);
}

#[test]
fn aging_the_fixed_size_allocator_keeps_the_space_consistent() {
    age(
        AllocConfig {
            min_block: 4096,
            max_block: 4096,
            growth: 1,
        },
        7,
    );
}
