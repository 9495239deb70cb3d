//! The iFKVS benchmark: RB vs WAL vs COW under the energy-harvesting simulator, uniform and
//! normal data, lazy split on/off, discard vs erase undo. Prints one JSON object per run and
//! a Markdown table.
//!
//! `cargo run --release -p ember-quadtree --example ifkvs [records]`

use ember_quadtree::bench::{Distribution, Outcome, Params, paper_runs, records_arg, run, to_json};
use ember_quadtree::{Checkpointing, Undo};

fn main() {
    let records = records_arg();
    let mut runs = paper_runs(records);
    let mut eager = Params::paper(Checkpointing::Rollback, Distribution::Uniform);
    eager.lazy_split = false;
    eager.records = records;
    runs.push(("RB uniform, eager split".into(), eager));
    let mut erase = Params::paper(Checkpointing::Rollback, Distribution::Uniform);
    erase.undo = Undo::Erase;
    erase.records = records;
    runs.push(("RB uniform, erase undo".into(), erase));

    let mut rows: Vec<(String, Outcome)> = Vec::new();
    for (name, p) in &runs {
        match run(p) {
            Ok(o) => {
                println!("{}", to_json(p, &o));
                rows.push((name.clone(), o));
            }
            Err(e) => println!("{{\"suite\":\"ifkvs\",\"run\":\"{name}\",\"error\":\"{e}\"}}"),
        }
    }
    println!();
    println!(
        "| run | total s | failures | energy J | insert avg/max ms | commit avg/max ms | restore avg/max ms | scan avg ms | log peak B | partition erases | kept |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, o) in &rows {
        println!(
            "| {name} | {:.1} | {} | {:.3} | {:.3} / {:.1} | {:.2} / {:.1} | {:.2} / {:.1} | {:.2} | {} | {} | {} |",
            o.modeled_total_s,
            o.power_failures,
            o.energy_j,
            o.insert.avg_s() * 1e3,
            o.insert.max_s * 1e3,
            o.commit.avg_s() * 1e3,
            o.commit.max_s * 1e3,
            o.restore.avg_s() * 1e3,
            o.restore.max_s * 1e3,
            o.scan.avg_s() * 1e3,
            o.undo_log_peak_bytes,
            o.erases_per_partition.iter().sum::<u64>(),
            o.records_kept
        );
    }
    let find = |n: &str| rows.iter().find(|r| r.0 == n).map(|r| &r.1);
    if let (Some(rb), Some(wal), Some(cow)) =
        (find("RB uniform"), find("WAL uniform"), find("COW uniform"))
    {
        println!();
        println!(
            "uniform: RB/WAL total {:.2}, RB/COW total {:.2}, RB/WAL insert avg {:.2}",
            rb.modeled_total_s / wal.modeled_total_s,
            rb.modeled_total_s / cow.modeled_total_s,
            rb.insert.avg_s() / wal.insert.avg_s()
        );
    }
    if let (Some(rb), Some(er)) = (find("RB uniform"), find("RB uniform, erase undo")) {
        println!(
            "discard/erase restore avg {:.2}",
            rb.restore.avg_s() / er.restore.avg_s().max(1e-12)
        );
    }
}
