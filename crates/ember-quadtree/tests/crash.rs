//! Power cuts: at every flash operation of a 500-insert workload with checkpoints, and as
//! seeded random blackouts (several per run, landing in inserts, commits and restores). The
//! paper's correctness test: the records retrieved through the tree after a replay with
//! failures hash the same as after a replay without any.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;

use common::*;
use ember_crashtest::CrashTest;
use ember_device::{FaultPlan, FaultyFlash, PowerFail, SplitMix64};
use ember_quadtree::{Checkpointing, Config, Error, Store, Undo};

const N: u64 = 500;
const EVERY: u64 = 50;
const SEED: u64 = 11;

/// What the workload knows when power fails.
#[derive(Default)]
struct Acked {
    formatted: bool,
    /// Records covered by the last commit that returned.
    acked: u64,
    /// A commit under way (it may or may not have made it).
    inflight: Option<u64>,
}

/// Inserts records `from..N`, committing every `EVERY` (and when a partition must be freed).
fn run<F: ember_device::FlashDevice>(
    s: &mut Store<F, 2>,
    from: u64,
    mut on_commit: impl FnMut(Option<u64>, u64),
) -> Result<(), Error> {
    let mut i = from;
    while i < N {
        match s.put(&record(SEED, i)) {
            Ok(()) => i += 1,
            Err(Error::CheckpointNeeded) => {
                on_commit(Some(i), i);
                s.commit(&ctx(i))?;
                on_commit(None, i);
                continue;
            }
            Err(e) => return Err(e),
        }
        if i.is_multiple_of(EVERY) || i == N {
            on_commit(Some(i), i);
            s.commit(&ctx(i))?;
            on_commit(None, i);
        }
    }
    Ok(())
}

fn workload(dev: &mut FaultyFlash<Flash>, st: &mut Acked, cfg: Config<2>) -> Result<(), Error> {
    let mut s = Store::format(dev, cfg, &ctx(0))?;
    st.formatted = true;
    run(&mut s, 0, |inflight, i| {
        st.inflight = inflight;
        if inflight.is_none() {
            st.acked = i;
        }
    })
}

/// The records a store should hold after `k` records: exactly the first `k`.
fn expected(k: u64) -> Vec<ember_quadtree::Record<2>> {
    let mut v: Vec<_> = (0..k).map(|i| record(SEED, i)).collect();
    v.sort();
    v
}

/// The record-set hash of a run without failures, and how many compactions it made.
fn reference_hash(cfg: Config<2>) -> (u64, u32) {
    let mut s = Store::format(flash(&cfg), cfg, &ctx(0)).unwrap();
    run(&mut s, 0, |_, _| {}).unwrap();
    (set_hash(&all_records(&mut s)), s.stats().compactions)
}

/// COW must compact inside the workload (several times), so that the cuts land in it.
fn assert_compacts(name: &str, cfg: Config<2>, compactions: u32) {
    if cfg.checkpointing == Checkpointing::Cow {
        assert!(compactions >= 2, "{name}: {compactions} compactions");
    }
}

fn check(medium: Flash, st: &Acked, cfg: Config<2>, reference: u64) -> Result<(), String> {
    let mut c = [0u8; 64];
    let (s, n) = match Store::open(medium, cfg, &mut c) {
        Ok(x) => x,
        Err(Error::NoCheckpoint) if !st.formatted => return Ok(()),
        Err(e) => return Err(format!("open: {e}")),
    };
    // Restore twice: the second restore of the same state must agree.
    let (mut s, n2) =
        Store::open(s.into_device(), cfg, &mut c).map_err(|e| format!("reopen: {e}"))?;
    if n != n2 {
        return Err("two restores returned different contexts".into());
    }
    let k = parse_ctx(&c[..n]).ok_or("the context blob is not one that was committed")?;
    if k != st.acked && Some(k) != st.inflight && st.formatted {
        return Err(format!(
            "restored the checkpoint of {k} records; acked {}, in flight {:?}",
            st.acked, st.inflight
        ));
    }
    let got = all_records(&mut s);
    if got != expected(k) {
        return Err(format!(
            "after restoring {k} records the tree holds {} records, not the first {k}",
            got.len()
        ));
    }
    // Replay the rest: the same set as without failures.
    run(&mut s, k, |_, _| {}).map_err(|e| format!("replay after restore: {e}"))?;
    let (mut s, _) =
        Store::open(s.into_device(), cfg, &mut c).map_err(|e| format!("final open: {e}"))?;
    let h = set_hash(&all_records(&mut s));
    if h != reference {
        return Err("the replay with a failure holds another set than the one without".into());
    }
    Ok(())
}

fn every_cut(name: &str, max_points: usize) {
    let (_, cfg) = variants(16).into_iter().find(|v| v.0 == name).unwrap();
    let (reference, compactions) = reference_hash(cfg);
    assert_eq!(reference, set_hash(&expected(N)));
    assert_compacts(name, cfg, compactions);
    let report = CrashTest::new()
        .max_points(max_points)
        .run(
            || flash(&cfg),
            |dev: &mut FaultyFlash<Flash>, st: &mut Acked| workload(dev, st, cfg),
            |medium, st, _| check(medium, st, cfg, reference),
        )
        .unwrap_or_else(|f| panic!("{name}: {f}"));
    assert!(report.ops > 1000, "{report}");
}

#[test]
fn rb_discard_every_cut_point_of_500_inserts() {
    every_cut("rb-discard", usize::MAX);
}

#[test]
fn rb_erase_undo_every_cut_point_of_500_inserts() {
    every_cut("rb-erase", usize::MAX);
}

#[test]
fn rb_eager_split_cut_points() {
    every_cut("rb-eager-split", 400);
}

#[test]
fn rb_pivot_split_cut_points() {
    every_cut("rb-pivot", 400);
}

#[test]
fn wal_every_cut_point_of_500_inserts() {
    every_cut("wal", usize::MAX);
}

#[test]
fn cow_every_cut_point_of_500_inserts() {
    every_cut("cow", usize::MAX);
}

/// The record-set hashes a run without failures had at each commit, by the number of
/// records the commit's context says are in (several commits may say the same number).
fn snapshots(cfg: Config<2>, want_kept: bool) -> HashMap<u64, Vec<u64>> {
    let mut s = Store::format(flash(&cfg), cfg, &ctx(0)).unwrap();
    let mut snaps: HashMap<u64, Vec<u64>> = HashMap::new();
    snaps.entry(0).or_default().push(set_hash(&[]));
    let mut i = 0;
    // Compactions whose target is the oldest partition, dropped for it.
    let mut dropped_for_compaction = 0;
    let mut commit = |s: &mut Store<Flash, 2>, i: u64| {
        s.commit(&ctx(i)).unwrap();
        snaps.entry(i).or_default().push(set_hash(&all_records(s)));
    };
    while i < N {
        let full = s.partitions().count() == usize::from(cfg.partitions);
        match s.put(&record(SEED, i)) {
            Ok(()) => i += 1,
            Err(Error::CheckpointNeeded) => {
                if full && s.compaction_pending() {
                    dropped_for_compaction += 1;
                }
                commit(&mut s, i);
                continue;
            }
            Err(e) => panic!("reference put {i}: {e}"),
        }
        if i.is_multiple_of(EVERY) || i == N {
            commit(&mut s, i);
        }
    }
    let st = s.stats();
    let kept = all_records(&mut s).len() as u64;
    // The point of the test: the oldest partitions are erased, and COW compacts, into a
    // free partition and into the oldest one dropped for it.
    assert!(
        kept < N * 7 / 10,
        "{:?}: {kept} records kept",
        cfg.checkpointing
    );
    if cfg.checkpointing == Checkpointing::Cow {
        assert!(
            st.compactions >= 2 && dropped_for_compaction >= 1,
            "{st:?}, {dropped_for_compaction} compactions into a dropped partition"
        );
        assert!(!want_kept || st.kept_segments >= 1, "{st:?}");
    }
    snaps
}

/// Like `check`, when the oldest partitions are erased along the way: the restored store
/// holds a set the run without failures had at a commit of the restored context, and the
/// replay ends with the set that run ended with.
fn check_wrapped(
    medium: Flash,
    st: &Acked,
    cfg: Config<2>,
    snaps: &HashMap<u64, Vec<u64>>,
) -> Result<(), String> {
    let mut c = [0u8; 64];
    let (s, n) = match Store::open(medium, cfg, &mut c) {
        Ok(x) => x,
        Err(Error::NoCheckpoint) if !st.formatted => return Ok(()),
        Err(e) => return Err(format!("open: {e}")),
    };
    let (mut s, n2) =
        Store::open(s.into_device(), cfg, &mut c).map_err(|e| format!("reopen: {e}"))?;
    if n != n2 {
        return Err("two restores returned different contexts".into());
    }
    let k = parse_ctx(&c[..n]).ok_or("the context blob is not one that was committed")?;
    if k != st.acked && Some(k) != st.inflight && st.formatted {
        return Err(format!(
            "restored the checkpoint of {k} records; acked {}, in flight {:?}",
            st.acked, st.inflight
        ));
    }
    let h = set_hash(&all_records(&mut s));
    if !snaps.get(&k).is_some_and(|v| v.contains(&h)) {
        return Err(format!(
            "after restoring {k} records the tree holds a set no commit of {k} had"
        ));
    }
    run(&mut s, k, |_, _| {}).map_err(|e| format!("replay after restore: {e}"))?;
    let (mut s, _) =
        Store::open(s.into_device(), cfg, &mut c).map_err(|e| format!("final open: {e}"))?;
    let recs = all_records(&mut s);
    // FIFO partitions keep the newest records: a run ending with the last one.
    let first = N - recs.len() as u64;
    if recs != (first..N).map(|i| record(SEED, i)).collect::<Vec<_>>() {
        return Err("the replay does not hold a run of the newest records".into());
    }
    // Discard undo leaves the undone bytes' space used until the partition is erased, so
    // after a failure RB fills (and drops) partitions at other points than without one;
    // COW and WAL restore the checkpoint's flash exactly and end with the same set.
    let exact = cfg.checkpointing != Checkpointing::Rollback || cfg.undo != Undo::Discard;
    if exact && !snaps[&N].contains(&set_hash(&recs)) {
        return Err("the replay with a failure holds another set than the one without".into());
    }
    Ok(())
}

/// Every cut point with partitions so small that the ring wraps several times: the oldest
/// partition is dropped (a commit first, then its erase) and, under COW, compactions take
/// the freed partition (drop, commit, erase, copy, commit — all in one `commit`).
fn every_cut_wrapping(name: &str, units: u16, max_points: usize) {
    let (_, mut cfg) = variants(units).into_iter().find(|v| v.0 == name).unwrap();
    cfg.partitions = 2;
    every_cut_wrapping_with(name, cfg, max_points, false);
}

/// `want_kept`: the run without failures must have a compaction keep record segments.
fn every_cut_wrapping_with(name: &str, cfg: Config<2>, max_points: usize, want_kept: bool) {
    let snaps = snapshots(cfg, want_kept);
    let report = CrashTest::new()
        .max_points(max_points)
        .run(
            || flash(&cfg),
            |dev: &mut FaultyFlash<Flash>, st: &mut Acked| workload(dev, st, cfg),
            |medium, st, _| check_wrapped(medium, st, cfg, &snaps),
        )
        .unwrap_or_else(|f| panic!("{name}: {f}"));
    assert!(report.ops > 1000, "{report}");
}

#[test]
fn cow_every_cut_point_while_compacting_and_wrapping() {
    every_cut_wrapping("cow", 14, usize::MAX);
}

/// Every cut point where COW compactions alternate between two partitions: the target
/// still holds the tree's previous copy, whose record-area segments the compaction keeps.
#[test]
fn cow_every_cut_point_while_compacting_onto_the_previous_copy() {
    let (_, mut cfg) = variants(10).into_iter().find(|v| v.0 == "cow").unwrap();
    cfg.partitions = 2;
    cfg.lazy_split = false;
    cfg.cow_compact_percent = 60;
    every_cut_wrapping_with("cow-eager-60", cfg, usize::MAX, true);
}

#[test]
fn rb_and_wal_cut_points_while_wrapping() {
    every_cut_wrapping("wal", 6, 600);
    every_cut_wrapping("rb-discard", 6, 600);
}

/// Where a blackout struck.
#[derive(Debug, Default, Clone, Copy)]
struct Hits {
    restore: u64,
    commit: u64,
    /// In a commit that compacts (COW).
    compaction: u64,
    insert: u64,
    format: u64,
}

/// One seeded run: power fails again and again (each life lasts a random number of flash
/// operations, short enough to land in restores), the program restores and goes on, until
/// the workload is done. Returns the hash of the final set.
fn blackout_run(cfg: Config<2>, seed: u64, hits: &mut Hits) -> Result<u64, String> {
    let mut rng = SplitMix64::new(seed);
    let mut medium = flash(&cfg);
    let mut formatted = false;
    for life in 0..10_000 {
        let span = if rng.below(4) == 0 {
            rng.below(40)
        } else {
            rng.below(700)
        };
        let mut dev = FaultyFlash::new(medium, FaultPlan::cut_at(span, rng.next_u64()));
        let mut phase = "format";
        let res: Result<(), Error> = (|| {
            let mut s = if formatted {
                phase = "restore";
                let mut c = [0u8; 64];
                let (s, n) = Store::open(&mut dev, cfg, &mut c)?;
                let k = parse_ctx(&c[..n]).unwrap_or(u64::MAX);
                phase = "insert";
                let mut s = s;
                run_phased(&mut s, k, &mut phase)?;
                return Ok(());
            } else {
                Store::format(&mut dev, cfg, &ctx(0))?
            };
            formatted = true;
            phase = "insert";
            run_phased(&mut s, 0, &mut phase)
        })();
        match res {
            Ok(()) => {
                let (m, _) = dev.power_off();
                let mut c = [0u8; 64];
                let (mut s, n) =
                    Store::open(m, cfg, &mut c).map_err(|e| format!("final open: {e}"))?;
                if parse_ctx(&c[..n]) != Some(N) {
                    return Err("the finished run's checkpoint is not the last".into());
                }
                let recs = all_records(&mut s);
                if recs.len() as u64 != N {
                    return Err(format!(
                        "{} records at the end (partitions {:?})",
                        recs.len(),
                        s.partitions().collect::<Vec<_>>()
                    ));
                }
                return Ok(set_hash(&recs));
            }
            Err(e) if e.is_power_loss() => {
                match phase {
                    "restore" => hits.restore += 1,
                    "commit" => hits.commit += 1,
                    "compaction" => hits.compaction += 1,
                    "format" => hits.format += 1,
                    _ => hits.insert += 1,
                }
                medium = dev.power_off().0;
            }
            Err(e) => return Err(format!("life {life}, {phase}: {e}")),
        }
    }
    Err("no progress after 10,000 power failures".into())
}

fn run_phased<F: ember_device::FlashDevice>(
    s: &mut Store<F, 2>,
    from: u64,
    phase: &mut &'static str,
) -> Result<(), Error> {
    if from > N {
        return Err(Error::NoCheckpoint);
    }
    let mut i = from;
    while i < N {
        match s.put(&record(SEED, i)) {
            Ok(()) => i += 1,
            Err(Error::CheckpointNeeded) => {
                *phase = if s.compaction_pending() {
                    "compaction"
                } else {
                    "commit"
                };
                s.commit(&ctx(i))?;
                *phase = "insert";
                continue;
            }
            Err(e) => return Err(e),
        }
        if i.is_multiple_of(EVERY) || i == N {
            *phase = "commit";
            s.commit(&ctx(i))?;
            *phase = "insert";
        }
    }
    Ok(())
}

fn blackouts(seeds: u64) {
    for (name, cfg) in variants(16) {
        let (reference, compactions) = reference_hash(cfg);
        assert_compacts(name, cfg, compactions);
        let mut hits = Hits::default();
        for seed in 0..seeds {
            let h = blackout_run(
                cfg,
                seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xB1AC,
                &mut hits,
            )
            .unwrap_or_else(|e| panic!("{name}, seed {seed}: {e}"));
            assert_eq!(h, reference, "{name}, seed {seed}: another set of records");
        }
        eprintln!("{name}: {seeds} runs, blackouts {hits:?}");
        if seeds >= 50 {
            assert!(
                hits.restore > 0 && hits.commit > 0 && hits.insert > 0,
                "{name}: {hits:?}"
            );
            if cfg.checkpointing == Checkpointing::Cow {
                assert!(
                    hits.compaction > 0,
                    "{name}: no cut in a compaction: {hits:?}"
                );
            }
        }
    }
}

#[test]
fn seeded_random_blackouts_leave_the_same_records() {
    blackouts(60);
}

/// The long version for the note: `EMBER_QT_SEEDS=10000 cargo test --release -p
/// ember-quadtree --test crash -- --ignored`.
#[test]
#[ignore]
fn many_seeded_random_blackouts() {
    let n = std::env::var("EMBER_QT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    blackouts(n);
}
