//! The `ycsb` suite: LUNAR's YCSB setup (§4.1). A table of an 8-byte integer key and five
//! 100-byte columns, loaded with R records (untimed, 100,000 by default, 2,000 with
//! --quick); then operations on keys drawn from a scrambled Zipfian distribution
//! ([`crate::zipf`]) with constant 0 (uniform), 0.5 or 0.99, in four mixes:
//!
//! | mix | reads | updates |
//! |---|---:|---:|
//! | write-only | 0% | 100% |
//! | read-heavy | 90% | 10% |
//! | balanced | 50% | 50% |
//! | update-heavy | 10% | 90% |
//!
//! A read fetches all five columns of one row; an update rewrites all five (YCSB with
//! `writeallfields=true`; SQL `UPDATE t SET f0 = ?, … WHERE k = ?`). Every operation is its
//! own transaction. Async runs R operations, sync runs R/10 (each update synced). Each
//! (mix, skew) is a workload `mix/zipf-θ`, run on ember-sql, ember-api and SQLite at both
//! durabilities, each on a fresh database.
//!
//! LUNAR runs 20 million operations per system on a board; on this shared 2-core machine
//! the default is R operations, and `--scale` multiplies every size.

use std::path::Path;
use std::time::Instant;

use ember_device::SplitMix64;
use serde_json::Map;

use crate::dbbench::Values;
use crate::measure::{Latencies, ProcIo, Result};
use crate::stores::{self, Durability, KeyKind, Layout, Store, System};
use crate::suite::{self, Job, Measured, SuiteArgs};
use crate::zipf::Zipfian;

/// Value columns per row.
pub const COLS: usize = 5;
/// Bytes of one column.
pub const COL_BYTES: usize = 100;
const LAYOUT: Layout = Layout {
    key: KeyKind::Int,
    cols: COLS,
};

/// The mixes: name and share of reads.
pub const MIXES: [(&str, f64); 4] = [
    ("write-only", 0.0),
    ("read-heavy", 0.9),
    ("balanced", 0.5),
    ("update-heavy", 0.1),
];
/// The Zipfian constants.
pub const SKEWS: [f64; 3] = [0.0, 0.5, 0.99];

/// One job's setup.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    records: u64,
    ops: u64,
    read_fraction: f64,
    theta: f64,
    seed: u64,
}

/// The workload name of a mix and skew: `balanced/zipf-0.99`.
pub fn workload_name(mix: &str, theta: f64) -> String {
    format!("{mix}/zipf-{theta}")
}

/// The jobs `args` asks for.
pub fn jobs(args: &SuiteArgs) -> Vec<Job<Spec>> {
    let records = args.size(100_000, 2_000);
    let mut jobs = Vec::new();
    for (mix, read_fraction) in MIXES {
        for theta in SKEWS {
            let name = workload_name(mix, theta);
            if !args.wants(&name) {
                continue;
            }
            for d in [Durability::Sync, Durability::Async] {
                if !args.wants_durability(d) {
                    continue;
                }
                let ops = match d {
                    Durability::Sync => (records / 10).max(1),
                    Durability::Async => records,
                };
                for system in System::SQL_PEERS {
                    if !args.wants_system(system) {
                        continue;
                    }
                    let mut params = Map::new();
                    params.insert("records".into(), records.into());
                    params.insert("operations".into(), ops.into());
                    params.insert("read_fraction".into(), read_fraction.into());
                    params.insert("zipfian".into(), theta.into());
                    params.insert("key_bytes".into(), 8.into());
                    params.insert("columns".into(), COLS.into());
                    params.insert("column_bytes".into(), COL_BYTES.into());
                    jobs.push(Job {
                        workload: name.clone(),
                        system,
                        durability: d,
                        params,
                        spec: Spec {
                            records,
                            ops,
                            read_fraction,
                            theta,
                            seed: 0x7c5b,
                        },
                    });
                }
            }
        }
    }
    jobs
}

/// Five column values from the pool.
fn row(values: &mut Values) -> Vec<Vec<u8>> {
    (0..COLS).map(|_| values.next().to_vec()).collect()
}

fn load(st: &mut dyn Store, records: u64, values: &mut Values) -> Result<()> {
    let mut k = 0;
    while k < records {
        st.begin()?;
        for key in k..(k + 1000).min(records) {
            let r = row(values);
            let refs: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
            st.insert(key, &refs)?;
        }
        st.commit()?;
        k += 1000;
    }
    Ok(())
}

/// Runs one job on a fresh database in `dir`.
pub fn run(job: &Job<Spec>, dir: &Path) -> Result<Measured> {
    let s = job.spec;
    let mut st = stores::open(job.system, job.durability, dir, LAYOUT)?;
    let mut values = Values::new(s.seed);
    let mut extra = Map::new();
    let t = Instant::now();
    load(st.as_mut(), s.records, &mut values)?;
    // YCSB loads and runs in two processes: the load's database is closed, its pending
    // writes home, before the run starts.
    st.settle()?;
    extra.insert("load_seconds".into(), t.elapsed().as_secs_f64().into());

    // The operations and their keys are drawn before the timed loop.
    let mut zipf = Zipfian::new(s.records, s.theta, s.seed ^ 0x21bf);
    let mut coin = SplitMix64::new(s.seed ^ 0xc017);
    let plan: Vec<(bool, u64)> = (0..s.ops)
        .map(|_| {
            let read = (coin.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= s.read_fraction
                && s.read_fraction > 0.0;
            (read, zipf.next_scrambled())
        })
        .collect();
    let updates = plan.iter().filter(|(r, _)| !r).count() as u64;
    let mut rows: Vec<Vec<Vec<u8>>> = (0..updates.min(1024)).map(|_| row(&mut values)).collect();
    if rows.is_empty() {
        rows.push(row(&mut values));
    }

    let io0 = ProcIo::read();
    let acc0 = st.accounted_write_bytes();
    let mut lat = Latencies::with_capacity(s.ops as usize);
    let start = Instant::now();
    let mut u = 0usize;
    for &(read, k) in &plan {
        if read {
            let got = lat.time(|| st.get(k))?;
            if got != COLS * COL_BYTES {
                return Err(format!("key {k} has {got} bytes").into());
            }
        } else {
            let r = &rows[u % rows.len()];
            u += 1;
            let refs: [&[u8]; COLS] = [&r[0], &r[1], &r[2], &r[3], &r[4]];
            lat.time(|| st.update(k, &refs))?;
        }
    }
    // The run's own writes go home within the timed span: a system that defers them (to a
    // checkpoint) pays for them here, not in a later phase.
    let settle = Instant::now();
    st.settle()?;
    extra.insert(
        "settle_seconds".into(),
        settle.elapsed().as_secs_f64().into(),
    );
    let seconds = start.elapsed().as_secs_f64();
    let accounted = st.close()?;
    let proc_io = ProcIo::delta(io0);
    extra.insert("updates".into(), updates.into());
    extra.insert("reads".into(), (s.ops - updates).into());
    Ok(Measured {
        lat,
        ops: s.ops,
        seconds,
        app_bytes: Some(updates * (8 + (COLS * COL_BYTES) as u64)),
        proc_io,
        accounted: match (acc0, accounted) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        },
        extra,
    })
}

const NOTES: &str = "
Notes: R records loaded untimed, then written home (SQLite's WAL checkpointed, EmberDB
checkpointed), as YCSB's separate load and run phases leave them; async runs R operations,
sync R/10 (each update synced; reads are the same at both), and the timed span ends with
the run's own writes home the same way. Keys: scrambled Zipfian over the R records (zipf-0 is uniform).
Latencies are per operation. App bytes count the updates (8-byte key + 5 × 100 bytes);
device bytes are /proc/self/io write_bytes over the operations and the close.
";

/// Runs `ember-bench ycsb`.
pub fn main(args: &SuiteArgs) -> Result<String> {
    let jobs = jobs(args);
    let (results, extra) = suite::run_jobs("ycsb", args, &jobs, run)?;
    let (md, _) = suite::write_outputs(
        "ycsb",
        "YCSB mixes and Zipfian skews (LUNAR §4.3.1)",
        &args.out,
        extra,
        &results,
        NOTES,
    )?;
    Ok(md)
}
