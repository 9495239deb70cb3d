//! The `dbbench` suite: LevelDB's db_bench / sqlite-bench workloads under their names, on
//! EmberDB (SQL and engine API), SQLite, and the key-value peers fjall (LSM) and redb
//! (B-tree).
//!
//! 16-byte keys (`%016d`, db_bench's format), 100-byte values that compress to half (as
//! db_bench makes them: 50 random printable bytes, repeated), N = 1,000,000 entries by
//! default (10,000 with --quick):
//!
//! | workload | durability | what is timed |
//! |---|---|---|
//! | fillseq | async | N inserts in key order, each its own transaction |
//! | fillrandom | async | N inserts in random order (a permutation: every key once) |
//! | fillseqsync / fillrandsync | sync | the same on N/100 entries, each commit synced |
//! | fillseqbatch / fillrandbatch | async | N inserts in transactions of 1,000 |
//! | overwrite | async | N updates of uniformly random existing keys (after an untimed load) |
//! | readseq | async | one scan of all N rows (after an untimed load) |
//! | readrandom | async | N point reads of uniformly random keys (after an untimed load) |
//!
//! db_bench's names say the durability (only the `sync` workloads sync), so each workload
//! runs at that one durability; untimed loads go in batches of 1,000. SQL: a table
//! `t(k BLOB PRIMARY KEY, f0 BLOB)` (sqlite-bench's schema), `INSERT`, `UPDATE … WHERE k =`,
//! `SELECT f0 … WHERE k =`, `SELECT k, f0 FROM t`.

use std::path::Path;
use std::time::Instant;

use ember_device::SplitMix64;
use serde_json::{Map, Value as Json, json};

use crate::measure::{Latencies, ProcIo, Result};
use crate::stores::{self, Durability, KeyKind, Layout, Store, System};
use crate::suite::{self, Job, Measured, SuiteArgs};

/// Bytes of a value.
pub const VALUE_BYTES: usize = 100;
/// Rows per batch (the batch workloads and the untimed loads).
pub const BATCH: u64 = 1000;
const LAYOUT: Layout = Layout {
    key: KeyKind::Text16,
    cols: 1,
};

/// The workloads, in db_bench's order.
pub const WORKLOADS: [&str; 9] = [
    "fillseq",
    "fillrandom",
    "fillseqsync",
    "fillrandsync",
    "fillseqbatch",
    "fillrandbatch",
    "overwrite",
    "readseq",
    "readrandom",
];

/// One workload's setup.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    name: &'static str,
    /// Entries (rows written, or loaded before a read or overwrite workload).
    n: u64,
    seed: u64,
}

/// The jobs `args` asks for: every workload on every system.
pub fn jobs(args: &SuiteArgs) -> Vec<Job<Spec>> {
    let n = args.size(1_000_000, 10_000);
    let mut jobs = Vec::new();
    for name in WORKLOADS {
        if !args.wants(name) {
            continue;
        }
        let sync = name.ends_with("sync");
        let d = if sync {
            Durability::Sync
        } else {
            Durability::Async
        };
        if !args.wants_durability(d) {
            continue;
        }
        let entries = if sync { (n / 100).max(1) } else { n };
        for system in System::ALL {
            if !args.wants_system(system) {
                continue;
            }
            let mut params = Map::new();
            params.insert("entries".into(), entries.into());
            params.insert("key_bytes".into(), 16.into());
            params.insert("value_bytes".into(), VALUE_BYTES.into());
            params.insert("values".into(), "half compressible (db_bench)".into());
            if name.ends_with("batch") {
                params.insert("batch".into(), BATCH.into());
                params.insert("latency_of".into(), "one batch".into());
            }
            if name == "readseq" {
                params.insert("latency_of".into(), "the whole scan".into());
            }
            jobs.push(Job {
                workload: name.into(),
                system,
                durability: d,
                params,
                spec: Spec {
                    name,
                    n: entries,
                    seed: 0xdb_be_c0,
                },
            });
        }
    }
    jobs
}

/// db_bench's value source: a pool of 50-random-printable-bytes-then-the-same-again pieces,
/// read 100 bytes at a time from a moving position.
pub struct Values {
    pool: Vec<u8>,
    at: usize,
}

impl Values {
    /// A 1 MiB pool.
    pub fn new(seed: u64) -> Values {
        let mut rng = SplitMix64::new(seed);
        let mut pool = Vec::with_capacity(1 << 20);
        while pool.len() < (1 << 20) {
            let raw: Vec<u8> = (0..VALUE_BYTES / 2)
                .map(|_| b' ' + rng.below(95) as u8)
                .collect();
            pool.extend_from_slice(&raw);
            pool.extend_from_slice(&raw);
        }
        Values { pool, at: 0 }
    }

    /// The next value.
    pub fn next(&mut self) -> &[u8] {
        if self.at + VALUE_BYTES > self.pool.len() {
            self.at = 0;
        }
        let v = &self.pool[self.at..self.at + VALUE_BYTES];
        self.at += VALUE_BYTES;
        v
    }
}

/// 0..n in a random order.
pub fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    SplitMix64::new(seed).shuffle(&mut v);
    v
}

/// Inserts keys 0..n in batches of [`BATCH`] (untimed loads).
pub fn load(st: &mut dyn Store, n: u64, values: &mut Values) -> Result<()> {
    let mut k = 0;
    while k < n {
        st.begin()?;
        for key in k..(k + BATCH).min(n) {
            st.insert(key, &[values.next()])?;
        }
        st.commit()?;
        k += BATCH;
    }
    Ok(())
}

/// Runs one job on a fresh database in `dir`.
pub fn run(job: &Job<Spec>, dir: &Path) -> Result<Measured> {
    let spec = job.spec;
    let n = spec.n;
    let mut st = stores::open(job.system, job.durability, dir, LAYOUT)?;
    let mut values = Values::new(spec.seed);
    let mut rng = SplitMix64::new(spec.seed ^ 0x5eed);
    let name = spec.name;
    let writes = !name.starts_with("read");
    let keys: Vec<u64> = if name.contains("rand") {
        permutation(n, spec.seed)
    } else {
        (0..n).collect()
    };
    let mut extra = Map::new();
    if name == "overwrite" || !writes {
        let t = Instant::now();
        load(st.as_mut(), n, &mut values)?;
        extra.insert("load_seconds".into(), t.elapsed().as_secs_f64().into());
    }
    let io0 = ProcIo::read();
    let acc0 = st.accounted_write_bytes();
    let mut lat = Latencies::with_capacity(n as usize);
    let start = Instant::now();
    match name {
        "fillseq" | "fillrandom" | "fillseqsync" | "fillrandsync" => {
            for &k in &keys {
                let v = values.next();
                lat.time(|| st.insert(k, &[v]))?;
            }
        }
        "fillseqbatch" | "fillrandbatch" => {
            for chunk in keys.chunks(BATCH as usize) {
                lat.time(|| -> Result<()> {
                    st.begin()?;
                    for &k in chunk {
                        st.insert(k, &[values.next()])?;
                    }
                    st.commit()
                })?;
            }
        }
        "overwrite" => {
            for _ in 0..n {
                let k = rng.below(n);
                let v = values.next();
                lat.time(|| st.update(k, &[v]))?;
            }
        }
        "readseq" => {
            let (rows, bytes) = lat.time(|| st.scan())?;
            if rows != n || bytes != n * VALUE_BYTES as u64 {
                return Err(format!("readseq found {rows} rows, {bytes} bytes").into());
            }
        }
        "readrandom" => {
            for _ in 0..n {
                let k = rng.below(n);
                let got = lat.time(|| st.get(k))?;
                if got != VALUE_BYTES {
                    return Err(format!("readrandom: key {k} has {got} bytes").into());
                }
            }
        }
        other => return Err(format!("unknown dbbench workload {other}").into()),
    }
    let seconds = start.elapsed().as_secs_f64();
    let accounted = st.close()?;
    let proc_io = ProcIo::delta(io0);
    let row = KeyKind::Text16.bytes() + VALUE_BYTES as u64;
    Ok(Measured {
        lat,
        ops: n,
        seconds,
        app_bytes: writes.then_some(n * row),
        proc_io,
        accounted: match (acc0, accounted) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        },
        extra,
    })
}

const NOTES: &str = "
Notes: db_bench's workload names decide the durability (only fillseqsync and fillrandsync
sync; they run N/100 entries). Batches are transactions of 1,000 rows (their latency is per
batch); readseq's latency is the whole scan. fillrandom writes a permutation of the keys
(every key once, so every system does N real inserts); overwrite and readrandom draw keys
uniformly with repeats. Device bytes are /proc/self/io write_bytes over the timed loop and
the close (the same counter for every system).
";

/// Runs `ember-bench dbbench`: the jobs, then the JSON, Markdown and charts in `args.out`.
pub fn main(args: &SuiteArgs) -> Result<String> {
    let jobs = jobs(args);
    let (results, mut extra) = suite::run_jobs("dbbench", args, &jobs, run)?;
    extra.insert(
        "workloads".into(),
        Json::Array(WORKLOADS.iter().map(|w| json!(w)).collect()),
    );
    let (md, _) = suite::write_outputs(
        "dbbench",
        "db_bench / sqlite-bench workloads",
        &args.out,
        extra,
        &results,
        NOTES,
    )?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_compress_to_half_and_permutations_are_complete() {
        let mut v = Values::new(1);
        for _ in 0..20_000 {
            let x = v.next();
            assert_eq!(x.len(), VALUE_BYTES);
            assert_eq!(x[..50], x[50..], "a value is 50 bytes twice");
            assert!(x.iter().all(|b| (b' '..=b'~').contains(b)));
        }
        let mut p = permutation(1000, 3);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }
}
