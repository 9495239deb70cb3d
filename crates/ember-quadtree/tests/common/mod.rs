//! Shared test support: flash, configurations, a deterministic workload, record-set hashes.

#![allow(dead_code, clippy::unwrap_used)]

use ember_device::{CostModel, FlashGeometry, MemBlock, SimFlash, SplitMix64};
use ember_quadtree::{Checkpointing, Config, Query, Record, Store, Undo};

pub type Flash = SimFlash<MemBlock<Vec<u8>>>;

pub const SEG: u32 = 512;

pub fn flash(cfg: &Config<2>) -> Flash {
    SimFlash::in_memory(
        FlashGeometry::nor(cfg.flash_bytes(SEG), SEG),
        CostModel::MSP430_NOR,
    )
    .unwrap()
}

/// A small store: partitions of `units` segments.
pub fn config(mode: Checkpointing, undo: Undo, lazy: bool, units: u16) -> Config<2> {
    let mut c = Config::new([1001, 1201]);
    c.checkpointing = mode;
    c.undo = undo;
    c.lazy_split = lazy;
    c.partition_units = units;
    c.context_max = 64;
    c.log_units = if mode == Checkpointing::Wal { 12 } else { 4 };
    // COW compacts at half live (not the default 40 %): the 500-insert workloads then
    // compact several times, so the crash tests cut inside compactions.
    c.cow_compact_percent = 50;
    c
}

/// Every variant the crash tests cover.
pub fn variants(units: u16) -> Vec<(&'static str, Config<2>)> {
    let mut pivot = config(Checkpointing::Rollback, Undo::Discard, true, units);
    pivot.pivot_split = true;
    vec![
        (
            "rb-discard",
            config(Checkpointing::Rollback, Undo::Discard, true, units),
        ),
        (
            "rb-erase",
            config(Checkpointing::Rollback, Undo::Erase, true, units),
        ),
        (
            "rb-eager-split",
            config(Checkpointing::Rollback, Undo::Discard, false, units),
        ),
        ("rb-pivot", pivot),
        (
            "wal",
            config(Checkpointing::Wal, Undo::Discard, true, units),
        ),
        (
            "cow",
            config(Checkpointing::Cow, Undo::Discard, true, units),
        ),
    ]
}

/// Record `i` of the deterministic workload (humidity 0-100.0 %, temperature -20..100 F in
/// tenths, the temperature shifted by 200 so it is unsigned).
pub fn record(seed: u64, i: u64) -> Record<2> {
    let mut r = SplitMix64::new(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    Record {
        ts: i as u32,
        dims: [r.below(1001) as u16, r.below(1201) as u16],
    }
}

/// All records of a store, sorted.
pub fn all_records<F: ember_device::FlashDevice>(s: &mut Store<F, 2>) -> Vec<Record<2>> {
    let mut out = vec![Record::default(); 100_000];
    let n = s.scan(&Query::all(), &mut out).unwrap();
    out.truncate(n);
    out.sort();
    out
}

/// An order-free hash of a set of records.
pub fn set_hash(recs: &[Record<2>]) -> u64 {
    let mut v: Vec<_> = recs.to_vec();
    v.sort();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for r in v {
        for x in [u64::from(r.ts), u64::from(r.dims[0]), u64::from(r.dims[1])] {
            h = (h ^ x).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The context blob of the workload: how many records are in.
pub fn ctx(done: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&done.to_le_bytes());
    b[8..].copy_from_slice(&(!done).to_le_bytes());
    b
}

pub fn parse_ctx(b: &[u8]) -> Option<u64> {
    (b.len() == 16)
        .then(|| u64::from_le_bytes(b[..8].try_into().unwrap()))
        .filter(|d| u64::from_le_bytes(b[8..].try_into().unwrap()) == !d)
}
