//! The workload under the energy-harvesting simulator: power fails when the capacitor
//! empties (and at random blackouts), the program restores and goes on, and every record
//! ends up retrievable, for RB, WAL and COW.

#![allow(clippy::unwrap_used)]

use ember_quadtree::bench::{Distribution, Params, run};
use ember_quadtree::{Checkpointing, Undo};

#[test]
fn every_scheme_finishes_through_power_failures_with_every_record() {
    for ck in [
        Checkpointing::Rollback,
        Checkpointing::Wal,
        Checkpointing::Cow,
    ] {
        for (blackouts, undo) in [
            (0.0, Undo::Discard),
            (0.002, Undo::Discard),
            (0.0, Undo::Erase),
        ] {
            let mut p = Params::paper(ck, Distribution::Normal);
            p.records = 2_000;
            p.scans = 5;
            p.undo = undo;
            p.blackout_p = blackouts;
            // A smaller capacitor: failures every few hundred inserts. RB's are cheap enough
            // to need an even smaller one (1 mF holds 2.8 mJ above the off threshold); a WAL
            // commit needs more than that.
            p.model.capacitance = if ck == Checkpointing::Rollback {
                0.001
            } else {
                0.002
            };
            let o = run(&p).unwrap_or_else(|e| panic!("{ck:?}: {e}"));
            assert!(o.power_failures >= 2, "{ck:?}: {o:?}");
            assert!(o.restore.count >= 1, "{ck:?}");
            // 2,000 records fit in the four partitions: none may be lost or doubled.
            assert_eq!(
                o.records_kept, 2_000,
                "{ck:?} blackouts {blackouts} {undo:?}"
            );
            assert!(o.modeled_total_s > o.on_s && o.energy_j > o.flash_energy_j);
        }
    }
}
