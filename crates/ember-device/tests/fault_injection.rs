//! Fault injection does what it promises: torn writes and erases of every kind happen, each is
//! reproducible from its seed, unsynced writes can be lost, synced ones never are.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use ember_device::{
    BlockDevice, CostModel, CutOutcome, DeviceError, EraseTear, FaultPlan, FaultyBlock,
    FaultyFlash, FlashDevice, FlashGeometry, FlashOnBlock, MemBlock, PowerFail, SimFlash, TearMode,
    WriteRule,
};

const SS: usize = 512;

fn sector(dev: &[u8], s: usize) -> &[u8] {
    &dev[s * SS..(s + 1) * SS]
}

/// Runs `f` on a fresh 8-sector device wrapped with `plan` and returns the bytes that survive
/// and the cut.
fn block_run(
    plan: FaultPlan,
    f: impl FnOnce(&mut FaultyBlock<MemBlock<Vec<u8>>>),
) -> (Vec<u8>, ember_device::PowerCut) {
    let mut dev = FaultyBlock::new(MemBlock::new(8 * SS), plan);
    f(&mut dev);
    let (mem, cut) = dev.power_off();
    (mem.into_inner(), cut)
}

#[test]
fn a_torn_block_write_lands_whole_sectors_in_any_subset() {
    let mut landed_counts = BTreeSet::new();
    for seed in 0..200 {
        let plan = FaultPlan::cut_at(0, seed).write_through();
        let (bytes, cut) = block_run(plan, |d| {
            assert_eq!(
                d.write(SS as u64, &[0xAB; 4 * SS]),
                Err(DeviceError::PowerLost {
                    op: ember_device::Op::Write
                })
            );
        });
        let CutOutcome::Sectors { landed, of: 4 } = cut.outcome else {
            panic!("unexpected outcome {:?}", cut.outcome);
        };
        let mut seen = 0;
        for s in 1..5 {
            let sec = sector(&bytes, s);
            // Whole sectors: all new or all old, never mixed.
            assert!(sec.iter().all(|&b| b == 0xAB) || sec.iter().all(|&b| b == 0));
            seen += u64::from(sec[0] == 0xAB);
        }
        assert_eq!(seen, landed);
        landed_counts.insert(landed);
        // The same seed gives the same result.
        let (again, cut2) = block_run(plan, |d| {
            let _ = d.write(SS as u64, &[0xAB; 4 * SS]);
        });
        assert_eq!((bytes, cut), (again, cut2));
    }
    assert_eq!(
        landed_counts,
        BTreeSet::from([0, 1, 2, 3, 4]),
        "every subset size occurs"
    );
}

#[test]
fn unsynced_writes_may_be_lost_in_any_combination_synced_ones_never() {
    let mut outcomes = BTreeSet::new();
    let mut third = BTreeSet::new();
    for seed in 0..300 {
        let (bytes, cut) = block_run(FaultPlan::run_to_end(seed), |d| {
            d.write(0, &[1; SS]).unwrap();
            d.sync().unwrap();
            d.write(SS as u64, &[2; SS]).unwrap();
            d.write(2 * SS as u64, &[3; SS]).unwrap();
            for v in 4..7 {
                d.write(3 * SS as u64, &[v; SS]).unwrap();
            }
        });
        assert!(
            sector(&bytes, 0).iter().all(|&b| b == 1),
            "synced data lost"
        );
        assert_eq!(cut.unsynced_sectors, 3);
        outcomes.insert((sector(&bytes, 1)[0], sector(&bytes, 2)[0]));
        // A sector holds one of the images it had: never a mix.
        let s3 = sector(&bytes, 3);
        assert!(s3.iter().all(|&b| b == s3[0]));
        third.insert(s3[0]);
    }
    // Later writes can survive while earlier ones are lost (the cache reorders).
    assert_eq!(outcomes, BTreeSet::from([(0, 0), (0, 3), (2, 0), (2, 3)]));
    assert_eq!(third, BTreeSet::from([0, 4, 5, 6]));
}

#[test]
fn write_through_devices_keep_everything_before_the_cut() {
    for seed in 0..50 {
        let (bytes, _) = block_run(FaultPlan::run_to_end(seed).write_through(), |d| {
            d.write(0, &[9; 3 * SS]).unwrap();
        });
        assert!(bytes[..3 * SS].iter().all(|&b| b == 9));
    }
}

#[test]
fn a_cut_sync_may_lose_what_it_was_syncing_and_everything_after_fails() {
    let mut lost = BTreeSet::new();
    for seed in 0..100 {
        let (bytes, cut) = block_run(FaultPlan::cut_at(1, seed), |d| {
            d.write(0, &[7; SS]).unwrap();
            assert!(d.sync().is_err());
            assert!(d.is_cut());
            let mut b = [0; 4];
            assert!(matches!(
                d.read(0, &mut b),
                Err(DeviceError::PowerLost { .. })
            ));
            assert!(matches!(d.write(0, &b), Err(DeviceError::PowerLost { .. })));
            assert!(matches!(d.sync(), Err(DeviceError::PowerLost { .. })));
        });
        assert_eq!(cut.index, 1);
        assert_eq!(cut.outcome, CutOutcome::Clean);
        lost.insert(bytes[0]);
    }
    assert_eq!(lost, BTreeSet::from([0, 7]));
}

#[test]
fn reads_see_unsynced_partial_sector_writes() {
    let mut d = FaultyBlock::new(MemBlock::new(4 * SS), FaultPlan::run_to_end(1));
    d.write(100, &[1; 1000]).unwrap();
    d.write(500, &[2; 20]).unwrap();
    d.sync().unwrap();
    d.write(510, &[3; 4]).unwrap();
    let mut buf = vec![0; 4 * SS];
    d.read(0, &mut buf).unwrap();
    let mut want = vec![0; 4 * SS];
    want[100..1100].fill(1);
    want[500..520].fill(2);
    want[510..514].fill(3);
    assert_eq!(buf, want);
    assert!(d.write(4 * SS as u64 - 1, &[0, 0]).is_err());
    assert!(!d.is_cut(), "a refused write is not a power cut");
}

mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Write(u16, Vec<u8>),
        Sync,
        Read(u16, u16),
        Resize(u16),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u16..4000, proptest::collection::vec(any::<u8>(), 0..1200))
                .prop_map(|(o, d)| Step::Write(o, d)),
            1 => Just(Step::Sync),
            3 => (0u16..4096, 0u16..1500).prop_map(|(o, l)| Step::Read(o, l)),
            1 => (0u16..5000).prop_map(Step::Resize),
        ]
    }

    proptest! {
        /// Before a cut the wrapper behaves exactly like plain memory; after power_off every
        /// sector holds its synced image or one of its later images.
        #[test]
        fn behaves_like_memory_until_the_cut(
            steps in proptest::collection::vec(step(), 1..40),
            seed: u64,
            start_len in 1000usize..4097,
        ) {
            let len = 4096usize;
            let mut d = FaultyBlock::new(MemBlock::new(start_len), FaultPlan::run_to_end(seed));
            let mut model = vec![0u8; start_len];
            let mut synced = vec![0u8; len];
            let mut history: Vec<Vec<Vec<u8>>> = vec![Vec::new(); len / SS];
            // Sector histories are only checked when the length never changed.
            let mut resized = start_len != len;
            for st in &steps {
                let len = model.len();
                match st {
                    Step::Resize(n) => {
                        d.resize(u64::from(*n)).unwrap();
                        model.resize(usize::from(*n), 0);
                        resized = true;
                    }
                    Step::Write(o, data) => {
                        let o = *o as usize;
                        let r = d.write(o as u64, data);
                        if o + data.len() <= len {
                            r.unwrap();
                            model[o..o + data.len()].copy_from_slice(data);
                            if !data.is_empty() && !resized {
                                for s in o / SS..(o + data.len()).div_ceil(SS) {
                                    history[s].push(model[s * SS..(s + 1) * SS].to_vec());
                                }
                            }
                        } else {
                            prop_assert!(r.is_err());
                        }
                    }
                    Step::Sync => {
                        d.sync().unwrap();
                        synced = model.clone();
                        history.iter_mut().for_each(Vec::clear);
                        // After a sync the whole device reads back as the model.
                        let mut all = vec![0u8; model.len()];
                        d.read(0, &mut all).unwrap();
                        prop_assert_eq!(&all, &model);
                    }
                    Step::Read(o, l) => {
                        let (o, l) = (*o as usize, *l as usize);
                        let mut buf = vec![0; l];
                        let r = d.read(o as u64, &mut buf);
                        if o + l <= len {
                            r.unwrap();
                            prop_assert_eq!(&buf[..], &model[o..o + l]);
                        } else {
                            prop_assert!(r.is_err());
                        }
                    }
                }
            }
            let (mem, _) = d.power_off();
            let after = mem.as_bytes();
            if resized {
                return Ok(());
            }
            for s in 0..len / SS {
                let got = &after[s * SS..(s + 1) * SS];
                let ok = got == &synced[s * SS..(s + 1) * SS] || history[s].iter().any(|h| h == got);
                prop_assert!(ok, "sector {} holds bytes it never had", s);
            }
        }
    }
}

fn nor_sim() -> SimFlash<MemBlock<Vec<u8>>> {
    SimFlash::in_memory(FlashGeometry::nor(2048, 512), CostModel::FREE).unwrap()
}

#[test]
fn a_torn_flash_write_leaves_a_clean_prefix_and_one_half_programmed_byte() {
    let mut prefixes = BTreeSet::new();
    let mut partial = false;
    for seed in 0..200 {
        let mut f = FaultyFlash::new(nor_sim(), FaultPlan::cut_at(1, seed).tear(TearMode::Prefix));
        f.write(0, &[0x0F; 8]).unwrap();
        assert!(f.write(0, &[0x00; 64]).is_err());
        let (mut sim, cut) = f.power_off();
        let again = {
            let mut f =
                FaultyFlash::new(nor_sim(), FaultPlan::cut_at(1, seed).tear(TearMode::Prefix));
            f.write(0, &[0x0F; 8]).unwrap();
            let _ = f.write(0, &[0x00; 64]);
            f.power_off()
        };
        assert_eq!(again.1, cut, "seed {seed} does not replay");
        assert_eq!(again.0.store().as_bytes(), sim.store().as_bytes());
        let CutOutcome::Prefix { bytes, of: 64 } = cut.outcome else {
            panic!("{:?}", cut.outcome)
        };
        let mut img = [0; 64];
        sim.read(0, &mut img).unwrap();
        for (i, &b) in img.iter().enumerate() {
            let old = if i < 8 { 0x0F } else { 0xFF };
            if (i as u64) < bytes {
                assert_eq!(b, 0, "byte {i} with {bytes} landed");
            } else if i as u64 == bytes {
                // Half-programmed: only bits that were going to 0 may have.
                assert_eq!(b & !old, 0, "byte {i}");
                partial |= b != old && b != 0;
            } else {
                assert_eq!(b, old, "byte {i} with {bytes} landed");
            }
        }
        prefixes.insert(bytes);
    }
    assert!(prefixes.contains(&0) && prefixes.iter().any(|&b| b > 0 && b < 64));
    assert!(partial, "a half-programmed byte occurs");
}

#[test]
fn a_torn_flash_write_lands_any_subset_of_its_bits_and_replays_from_its_seed() {
    let mut partial = false;
    for seed in 0..100 {
        let run = || {
            let mut f =
                FaultyFlash::new(nor_sim(), FaultPlan::cut_at(1, seed).tear(TearMode::Bits));
            f.write(0, &[0b1111_0000; 16]).unwrap();
            let _ = f.write(0, &[0b0000_0000; 16]);
            let (sim, cut) = f.power_off();
            (sim.into_inner().into_inner(), cut)
        };
        let (img, cut) = run();
        assert_eq!(run(), (img.clone(), cut), "seed {seed} does not replay");
        let CutOutcome::Bits { programmed, of: 64 } = cut.outcome else {
            panic!("{:?}", cut.outcome)
        };
        let mut count = 0;
        for &b in &img[..16] {
            // Bits programmed before (the low nibble, at 0) stay programmed; only the high
            // nibble may change.
            assert_eq!(b & 0x0F, 0);
            count += u64::from((!b & 0xF0).count_ones());
        }
        assert_eq!(count, programmed);
        partial |= programmed > 0 && programmed < 64;
    }
    assert!(partial);
}

#[test]
fn an_interrupted_erase_leaves_every_kind_of_damage() {
    let run = |seed| {
        let mut f = FaultyFlash::new(nor_sim(), FaultPlan::cut_at(4, seed));
        for u in 0..4 {
            f.write(u * 512, &[0x5A; 512]).unwrap();
        }
        assert!(f.erase(0, 2048).is_err());
        f.power_off()
    };
    let mut kinds = BTreeSet::new();
    for seed in 0..200 {
        let (sim, cut) = run(seed);
        let (again, cut2) = run(seed);
        assert_eq!(cut, cut2);
        assert_eq!(
            sim.store().as_bytes(),
            again.store().as_bytes(),
            "seed {seed} does not replay"
        );
        let CutOutcome::Erase { erased_units, torn } = cut.outcome else {
            panic!("{:?}", cut.outcome)
        };
        let img = sim.into_inner().into_inner();
        for u in 0..4usize {
            let unit = &img[u * 512..(u + 1) * 512];
            if (u as u64) < erased_units {
                assert!(unit.iter().all(|&b| b == 0xFF));
            } else if u as u64 > erased_units {
                assert!(unit.iter().all(|&b| b == 0x5A));
            } else {
                match torn {
                    EraseTear::Unchanged => assert!(unit.iter().all(|&b| b == 0x5A)),
                    EraseTear::Erased => assert!(unit.iter().all(|&b| b == 0xFF)),
                    // Only bits that were programmed (0 in 0x5A) may still be programmed.
                    EraseTear::Partial => assert!(unit.iter().all(|&b| b & 0x5A == 0x5A)),
                    EraseTear::Garbage => {}
                }
            }
        }
        kinds.insert(format!("{torn:?}"));
    }
    assert_eq!(kinds.len(), 4, "{kinds:?}");
}

#[test]
fn a_torn_program_uses_up_a_write_once_unit() {
    let geom = FlashGeometry {
        capacity: 4096,
        read_size: 1,
        write_size: 256,
        erase_size: 1024,
        erase_value: 0xFF,
        rule: WriteRule::WriteOnce,
    };
    let sim = SimFlash::in_memory(geom, CostModel::FREE).unwrap();
    let mut f = FaultyFlash::new(sim, FaultPlan::cut_at(0, 3));
    assert!(f.write(0, &[0; 256]).is_err());
    let (mut sim, _) = f.power_off();
    assert!(matches!(
        sim.write(0, &[0; 256]),
        Err(DeviceError::WriteRule { .. })
    ));
    sim.erase(0, 1024).unwrap();
    sim.write(0, &[0; 256]).unwrap();
}

#[test]
fn flash_on_a_cached_block_device_can_lose_unsynced_writes() {
    let mut lost = false;
    let mut kept = false;
    for seed in 0..50 {
        let block = FaultyBlock::new(MemBlock::new(4096), FaultPlan::run_to_end(seed));
        let mut flash = FlashOnBlock::new(block, 1, 1, 1024, 0xFF, WriteRule::AndRewrite).unwrap();
        flash.erase(0, 1024).unwrap();
        flash.sync().unwrap();
        flash.write(0, b"record").unwrap();
        let (mem, _) = flash.into_inner().power_off();
        let b = &mem.as_bytes()[..6];
        lost |= b == [0xFF; 6];
        kept |= b == b"record";
        assert!(b == [0xFF; 6] || b == b"record");
    }
    assert!(lost && kept);
}

#[test]
fn resizing_with_unsynced_writes_keeps_the_device_consistent() {
    let mut d = FaultyBlock::new(MemBlock::new(4 * SS), FaultPlan::run_to_end(5));
    d.write(0, &[1; 4 * SS]).unwrap();
    d.resize(SS as u64 + 100).unwrap();
    let mut buf = vec![0; SS + 100];
    d.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 1));
    d.resize(3 * SS as u64).unwrap();
    d.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 1));
    let mut tail = vec![9; SS];
    d.read(2 * SS as u64, &mut tail).unwrap();
    assert!(tail.iter().all(|&b| b == 0), "grown bytes read as zero");
    d.sync().unwrap();
    let (mem, _) = d.power_off();
    assert_eq!(mem.as_bytes().len(), 3 * SS);
    assert!(mem.as_bytes()[..SS + 100].iter().all(|&b| b == 1));
    assert!(mem.as_bytes()[SS + 100..].iter().all(|&b| b == 0));
}

#[test]
fn a_short_last_sector_does_not_shift_later_sectors_on_sync() {
    // Found in review: a 188-byte image of the old last sector was merged with the next
    // sector's image into one write, shifting it.
    let mut d = FaultyBlock::new(MemBlock::new(700), FaultPlan::run_to_end(1));
    d.write(600, &[1; 10]).unwrap();
    d.resize(2048).unwrap();
    d.write(1024, &[2; 512]).unwrap();
    d.sync().unwrap();
    let (mem, _) = d.power_off();
    let b = mem.as_bytes();
    assert!(b[600..610].iter().all(|&x| x == 1));
    assert!(b[610..1024].iter().all(|&x| x == 0));
    assert!(b[1024..1536].iter().all(|&x| x == 2));
    assert!(b[1536..].iter().all(|&x| x == 0));
}

#[test]
fn an_unsynced_resize_may_be_undone_a_synced_one_never() {
    let mut lengths = BTreeSet::new();
    for seed in 0..40 {
        let mut d = FaultyBlock::new(MemBlock::new(512), FaultPlan::run_to_end(seed));
        d.resize(4096).unwrap();
        let (mem, cut) = d.power_off();
        assert_eq!(cut.length_reverted, mem.as_bytes().len() == 512);
        lengths.insert(mem.as_bytes().len());

        let mut d = FaultyBlock::new(MemBlock::new(512), FaultPlan::run_to_end(seed));
        d.resize(4096).unwrap();
        d.sync().unwrap();
        assert_eq!(d.power_off().0.as_bytes().len(), 4096);
    }
    assert_eq!(lengths, BTreeSet::from([512, 4096]));
}

#[test]
fn an_undone_shrink_brings_back_the_synced_bytes() {
    let mut seen = BTreeSet::new();
    for seed in 0..40 {
        let mut d = FaultyBlock::new(MemBlock::new(4096), FaultPlan::run_to_end(seed));
        d.write(0, &[7; 4096]).unwrap();
        d.sync().unwrap();
        d.resize(1000).unwrap();
        d.resize(3000).unwrap();
        d.resize(600).unwrap();
        let (mem, _) = d.power_off();
        let b = mem.as_bytes();
        assert!(b.len() == 600 || b.len() == 4096);
        assert!(
            b.iter().all(|&x| x == 7),
            "seed {seed}: only synced bytes come back"
        );
        seen.insert(b.len());
    }
    assert_eq!(seen.len(), 2);
}
