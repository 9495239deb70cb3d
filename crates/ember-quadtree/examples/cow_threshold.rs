//! The COW compaction threshold against what it costs: for each threshold and split mode, the modeled total
//! time, the records COW keeps, its compactions and partition erases (uniform data, the
//! paper's setup), with RB for reference. How the default of `Config::cow_compact_percent`
//! was chosen.
//!
//! `cargo run --release -p ember-quadtree --example cow_threshold [records]`

use ember_quadtree::Checkpointing;
use ember_quadtree::bench::{Distribution, Params, records_arg, run};

fn main() {
    let records = records_arg();
    println!(
        "| run | split | threshold % | total s | failures | commit avg/max ms | partition erases | kept |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut rows = vec![("RB", Checkpointing::Rollback, true, 0u8)];
    for lazy in [true, false] {
        for t in [0u8, 36, 40, 45, 50, 55, 60, 65, 70, 75, 80, 90] {
            rows.push(("COW", Checkpointing::Cow, lazy, t));
        }
    }
    for (name, ck, lazy, t) in rows {
        for dist in [Distribution::Uniform, Distribution::Normal] {
            let mut p = Params::paper(ck, dist);
            p.records = records;
            p.lazy_split = lazy;
            p.cow_compact_percent = t;
            let split = if lazy { "lazy" } else { "eager" };
            match run(&p) {
                Ok(o) => println!(
                    "| {name} {} | {split} | {t} | {:.1} | {} | {:.1} / {:.1} | {} | {} |",
                    dist.name(),
                    o.modeled_total_s,
                    o.power_failures,
                    o.commit.avg_s() * 1e3,
                    o.commit.max_s * 1e3,
                    o.erases_per_partition.iter().sum::<u64>(),
                    o.records_kept
                ),
                Err(e) => println!("| {name} {} | {split} | {t} | error: {e} |", dist.name()),
            }
        }
    }
}
