//! The COW compaction threshold against what it costs: for each threshold, the modeled total
//! time, the records COW keeps, its compactions and partition erases (uniform data, the
//! paper's setup), with RB for reference. How the default of `Config::cow_compact_percent`
//! was chosen.
//!
//! `cargo run --release -p ember-quadtree --example cow_threshold [records]`

use ember_quadtree::Checkpointing;
use ember_quadtree::bench::{Distribution, Params, run};

fn main() {
    let records: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    println!(
        "| run | threshold % | total s | failures | commit avg/max ms | partition erases | kept |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut rows = vec![("RB", Checkpointing::Rollback, 0u8)];
    for t in [0u8, 36, 40, 45, 50, 55, 60, 70, 80] {
        rows.push(("COW", Checkpointing::Cow, t));
    }
    for (name, ck, t) in rows {
        for dist in [Distribution::Uniform, Distribution::Normal] {
            let mut p = Params::paper(ck, dist);
            p.records = records;
            p.cow_compact_percent = t;
            match run(&p) {
                Ok(o) => println!(
                    "| {name} {} | {t} | {:.1} | {} | {:.1} / {:.1} | {} | {} |",
                    dist.name(),
                    o.modeled_total_s,
                    o.power_failures,
                    o.commit.avg_s() * 1e3,
                    o.commit.max_s * 1e3,
                    o.erases_per_partition.iter().sum::<u64>(),
                    o.records_kept
                ),
                Err(e) => println!("| {name} {} | {t} | error: {e} |", dist.name()),
            }
        }
    }
}
