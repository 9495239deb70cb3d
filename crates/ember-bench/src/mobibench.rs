//! The `mobibench` suite: LUNAR's Mobibench runs (§4.2, Fig. 9). A table of an 8-byte
//! integer key and one 4 KB (4,096-byte) column, pre-populated with 10,000 rows (untimed);
//! then N single-row transactions (100,000 by default, as in the paper; 500 with --quick):
//!
//! * `insert`: N inserts of new rows;
//! * `update`: N updates of uniformly random pre-populated rows.
//!
//! Mobibench is synchronous (`sync`: every commit durable); the `async` rows show the same at
//! the other durability. The figure is the **bandwidth utilization**: bytes the application
//! handed over (key + row) ÷ bytes that reached storage. For every system the latter is
//! `/proc/self/io` `write_bytes` over the timed loop and the close (the pages the process
//! dirtied in the page cache, which is what the kernel writes to the disk: the same counter
//! for EmberDB and SQLite); for `ember-api` the device layer's own count (`Accounted`
//! write_bytes) is reported too.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use ember_device::SplitMix64;
use serde_json::{Map, Value as Json};

use crate::measure::{Latencies, ProcIo, Result};
use crate::report::RunResult;
use crate::stores::{self, Durability, KeyKind, Layout, Store, System};
use crate::suite::{self, Job, Measured, SuiteArgs, durability_of};

/// Bytes of a row's value.
pub const ROW_BYTES: usize = 4096;
const LAYOUT: Layout = Layout {
    key: KeyKind::Int,
    cols: 1,
};
/// The workloads.
pub const WORKLOADS: [&str; 2] = ["insert", "update"];

/// One job's setup.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    name: &'static str,
    prepopulate: u64,
    ops: u64,
    seed: u64,
}

/// The jobs `args` asks for.
pub fn jobs(args: &SuiteArgs) -> Vec<Job<Spec>> {
    let ops = args.size(100_000, 500);
    let prepopulate = args.size(10_000, 500);
    let mut jobs = Vec::new();
    for name in WORKLOADS {
        if !args.wants(name) {
            continue;
        }
        for d in [Durability::Sync, Durability::Async] {
            if !args.wants_durability(d) {
                continue;
            }
            for system in System::SQL_PEERS {
                if !args.wants_system(system) {
                    continue;
                }
                let mut params = Map::new();
                params.insert("prepopulated_rows".into(), prepopulate.into());
                params.insert("operations".into(), ops.into());
                params.insert("key_bytes".into(), 8.into());
                params.insert("row_bytes".into(), ROW_BYTES.into());
                jobs.push(Job {
                    workload: name.into(),
                    system,
                    durability: d,
                    params,
                    spec: Spec {
                        name,
                        prepopulate,
                        ops,
                        seed: 0x0b1b,
                    },
                });
            }
        }
    }
    jobs
}

fn fill(rng: &mut SplitMix64, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let x = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
}

fn prepopulate(st: &mut dyn Store, rows: u64, rng: &mut SplitMix64) -> Result<()> {
    let mut v = vec![0u8; ROW_BYTES];
    let mut k = 0;
    while k < rows {
        st.begin()?;
        for key in k..(k + 500).min(rows) {
            fill(rng, &mut v);
            st.insert(key, &[&v])?;
        }
        st.commit()?;
        k += 500;
    }
    Ok(())
}

/// Runs one job on a fresh database in `dir`.
pub fn run(job: &Job<Spec>, dir: &Path) -> Result<Measured> {
    let s = job.spec;
    let mut st = stores::open(job.system, job.durability, dir, LAYOUT)?;
    let mut rng = SplitMix64::new(s.seed);
    let mut extra = Map::new();
    let t = Instant::now();
    prepopulate(st.as_mut(), s.prepopulate, &mut rng)?;
    extra.insert(
        "prepopulate_seconds".into(),
        t.elapsed().as_secs_f64().into(),
    );
    // Pseudo-random (incompressible) rows, made before the timed loop.
    let rows: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let mut v = vec![0u8; ROW_BYTES];
            fill(&mut rng, &mut v);
            v
        })
        .collect();

    let io0 = ProcIo::read();
    let acc0 = st.accounted_write_bytes();
    let mut lat = Latencies::with_capacity(s.ops as usize);
    let start = Instant::now();
    for i in 0..s.ops {
        let v = &rows[i as usize % rows.len()];
        if s.name == "insert" {
            lat.time(|| st.insert(s.prepopulate + i, &[v]))?;
        } else {
            let k = rng.below(s.prepopulate);
            lat.time(|| st.update(k, &[v]))?;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let accounted = st.close()?;
    let proc_io = ProcIo::delta(io0);
    Ok(Measured {
        lat,
        ops: s.ops,
        seconds,
        app_bytes: Some(s.ops * (8 + ROW_BYTES as u64)),
        proc_io,
        accounted: match (acc0, accounted) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        },
        extra,
    })
}

/// Bandwidth utilization by /proc/self/io write_bytes (and by `Accounted`, where there).
pub fn utilization(r: &RunResult) -> (Option<f64>, Option<f64>) {
    let app = r.app_bytes.unwrap_or(0) as f64;
    let by = |d: Option<u64>| d.filter(|&d| d > 0).map(|d| app / d as f64);
    let acc = r.extra.get("accounted_write_bytes").and_then(Json::as_u64);
    (by(r.device_bytes), by(acc))
}

fn utilization_table(results: &[RunResult]) -> String {
    let mut s = String::from(
        "\nBandwidth utilization (application bytes ÷ bytes that reached storage; LUNAR \
         Fig. 9):\n\n| workload | durability | system | utilization (/proc/self/io \
         write_bytes) | utilization (device layer, Accounted) | device bytes per op |\n\
         |---|---|---|---:|---:|---:|\n",
    );
    for r in results {
        let (p, a) = utilization(r);
        let pct = |x: Option<f64>| x.map_or("–".into(), |x| format!("{:.1}%", 100.0 * x));
        let per_op = r.device_bytes.map_or("–".into(), |d| {
            format!("{:.0}", d as f64 / r.ops.max(1) as f64)
        });
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {per_op} |",
            r.workload,
            durability_of(r),
            r.system,
            pct(p),
            pct(a)
        );
    }
    s
}

/// Runs `ember-bench mobibench`.
pub fn main(args: &SuiteArgs) -> Result<String> {
    let jobs = jobs(args);
    let (results, extra) = suite::run_jobs("mobibench", args, &jobs, run)?;
    let notes = format!(
        "{}\nNotes: 4,096-byte pseudo-random (incompressible) rows and 8-byte keys; each \
         operation its own transaction. /proc/self/io write_bytes counts whole 4 KiB pages \
         as they are dirtied, after each sync a page is counted again when rewritten.\n",
        utilization_table(&results)
    );
    let (md, _) = suite::write_outputs(
        "mobibench",
        "synchronous 4 KB inserts and updates (LUNAR §4.2)",
        &args.out,
        extra,
        &results,
        &notes,
    )?;
    // The utilization chart, like LUNAR's Fig. 9.
    let path = args.out.join("mobibench-utilization.svg");
    let util = suite::bars(&results, |r| 100.0 * utilization(r).0.unwrap_or(0.0));
    crate::chart::grouped_bars(
        &path,
        "mobibench: bandwidth utilization (app bytes / storage bytes)",
        "%",
        &util,
    )?;
    Ok(md)
}
