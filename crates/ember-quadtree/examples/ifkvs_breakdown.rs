//! Where the modeled time of each iFKVS run goes: inserts, commits, restores and scans (each
//! split into flash reads, writes and erases), work lost to power failures, and recharging.
//!
//! `cargo run --release -p ember-quadtree --example ifkvs_breakdown [records]`

use ember_quadtree::bench::{Latency, paper_runs, records_arg, run};

fn main() {
    let records = records_arg();
    println!(
        "| run | total s | recharge s | failures | insert s (r/w/e) | commit s (r/w/e) | \
         restore s (r/w/e) | scan s | other on s | reads | bytes read | bytes written | bytes erased |"
    );
    println!("|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|");
    let f = |l: &Latency| {
        format!(
            "{:.2} ({:.2}/{:.2}/{:.2})",
            l.total_s, l.flash_s[0], l.flash_s[1], l.flash_s[2]
        )
    };
    for (name, p) in paper_runs(records) {
        match run(&p) {
            Ok(o) => {
                let phases =
                    o.insert.total_s + o.commit.total_s + o.restore.total_s + o.scan.total_s;
                println!(
                    "| {name} | {:.1} | {:.1} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} |",
                    o.modeled_total_s,
                    o.modeled_total_s - o.on_s,
                    o.power_failures,
                    f(&o.insert),
                    f(&o.commit),
                    f(&o.restore),
                    o.scan.total_s,
                    o.on_s - phases,
                    o.sim.ops[0],
                    o.sim.bytes[0],
                    o.sim.bytes[1],
                    o.sim.bytes[2],
                );
            }
            Err(e) => println!("| {name} | error: {e} |"),
        }
    }
}
