//! The iFKVS workload under the energy-harvesting simulator (feature `std`): the driver the
//! benchmark harness calls ([`run`]), returning the paper's figures for one configuration.
//!
//! The workload (§V-A): records of a timestamp, a humidity (0–100.0 % in tenths) and a
//! temperature (−20..100 °F in tenths, stored +200 so it is unsigned), uniform or normal;
//! a checkpoint every 100 inserts whose context blob is the program's 200-byte SRAM image
//! (the progress counter in it); power from the capacitor model, so the device fails,
//! restores the last checkpoint and goes on until every record is in. Then random range
//! scans (a random range per dimension, the first 256 matches).

use std::format;
use std::string::{String, ToString};
use std::vec::Vec;

use ember_device::{FlashGeometry, MemBlock, SimFlash, SplitMix64};

use crate::energy::{EnergyModel, EnergyStats, Harvested};
use crate::{Checkpointing, Config, Error, Query, Record, Store, Undo};

/// The data distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Uniform over each dimension's range.
    Uniform,
    /// Normal around the middle (σ = 15 % of the range), clamped.
    Normal,
}

impl Distribution {
    /// The name used in results.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Normal => "normal",
        }
    }
}

/// One benchmark configuration.
#[derive(Debug, Clone)]
pub struct Params {
    /// RB, WAL or COW.
    pub checkpointing: Checkpointing,
    /// Data distribution.
    pub distribution: Distribution,
    /// Lazy split.
    pub lazy_split: bool,
    /// Discard or erase-based undo (RB).
    pub undo: Undo,
    /// COW compaction threshold (percent of live bytes in a full partition; 0: none).
    pub cow_compact_percent: u8,
    /// Records to insert.
    pub records: u64,
    /// Inserts between checkpoints.
    pub checkpoint_every: u64,
    /// Bytes of program context saved with each checkpoint.
    pub context_bytes: usize,
    /// The capacitor and supply.
    pub model: EnergyModel,
    /// CPU time charged for each engine call (put, commit, scan, the start of a restore).
    pub cpu_per_call_s: f64,
    /// Probability of a random blackout at each flash write or erase (0: none).
    pub blackout_p: f64,
    /// Range scans after the inserts.
    pub scans: u32,
    /// Matches a scan returns at most.
    pub scan_limit: usize,
    /// Seed of the data and the scans.
    pub seed: u64,
}

/// The paper's runs: RB, WAL and COW (in that order) on each data distribution, named as
/// the paper's figures name them ("RB uniform", …), with `records` records each.
pub fn paper_runs(records: u64) -> Vec<(String, Params)> {
    let mut runs = Vec::new();
    for dist in [Distribution::Uniform, Distribution::Normal] {
        for (name, ck) in [
            ("RB", Checkpointing::Rollback),
            ("WAL", Checkpointing::Wal),
            ("COW", Checkpointing::Cow),
        ] {
            let mut p = Params::paper(ck, dist);
            p.records = records;
            runs.push((format!("{name} {}", dist.name()), p));
        }
    }
    runs
}

/// The record count a command line gives as its first argument (the paper's 20,000 if it
/// gives none or no number).
pub fn records_arg() -> u64 {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000)
}

impl Params {
    /// The paper's setup: 20,000 records, a checkpoint every 100, 200-byte context, 4
    /// partitions of 20 KiB, 64-byte nodes, the testbed's capacitor and supply.
    pub fn paper(checkpointing: Checkpointing, distribution: Distribution) -> Self {
        Params {
            checkpointing,
            distribution,
            lazy_split: true,
            undo: Undo::Discard,
            cow_compact_percent: Config::<2>::new([1, 1]).cow_compact_percent,
            records: 20_000,
            checkpoint_every: 100,
            context_bytes: 200,
            model: EnergyModel::paper(),
            cpu_per_call_s: 50e-6,
            blackout_p: 0.0,
            scans: 100,
            scan_limit: 256,
            seed: 2024,
        }
    }

    /// The store's configuration for these parameters (the same flash for every scheme: the
    /// log gets 16 units, which the redo log of WAL needs).
    pub fn config(&self) -> Config<2> {
        let mut c = Config::new([1001, 1201]);
        c.checkpointing = self.checkpointing;
        c.undo = self.undo;
        c.lazy_split = self.lazy_split;
        c.cow_compact_percent = self.cow_compact_percent;
        c.context_max = self.context_bytes as u16;
        c.log_units = 16;
        c
    }
}

/// Latency of one kind of operation, in modeled seconds (time with power on).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Operations that completed.
    pub count: u64,
    /// Their total time.
    pub total_s: f64,
    /// The slowest.
    pub max_s: f64,
    /// Of `total_s`, seconds of flash reads, writes and erases (each with the CPU time
    /// charged around a flash operation).
    pub flash_s: [f64; 3],
}

impl Latency {
    fn add(&mut self, s: f64, before: &EnergyStats, after: &EnergyStats) {
        self.count += 1;
        self.total_s += s;
        self.max_s = self.max_s.max(s);
        self.flash_s[0] += after.read_s - before.read_s;
        self.flash_s[1] += after.write_s - before.write_s;
        self.flash_s[2] += after.erase_s - before.erase_s;
    }

    /// Average seconds.
    pub fn avg_s(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_s / self.count as f64
        }
    }
}

/// The figures of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Modeled seconds to finish the workload (inserts, commits, restores, charging).
    pub modeled_total_s: f64,
    /// Seconds with power on.
    pub on_s: f64,
    /// Power failures.
    pub power_failures: u64,
    /// Joules drawn (flash, CPU, board).
    pub energy_j: f64,
    /// Joules drawn by flash operations.
    pub flash_energy_j: f64,
    /// Insert latency.
    pub insert: Latency,
    /// Commit latency.
    pub commit: Latency,
    /// Restore latency.
    pub restore: Latency,
    /// Scan latency (after the inserts).
    pub scan: Latency,
    /// Most undo (or redo) log bytes in use between two commits.
    pub undo_log_peak_bytes: u64,
    /// Erases of each partition's units.
    pub erases_per_partition: Vec<u64>,
    /// Erases of log units.
    pub log_erases: u64,
    /// The paper's §V-G estimate: years until 10^5 erases per segment at 10 records/s.
    pub lifetime_years: f64,
    /// Records retrievable at the end.
    pub records_kept: u64,
    /// Engine RAM in bytes.
    pub ram_bytes: usize,
    /// The simulator's own figures (flash time per operation kind, counts, bytes).
    pub sim: EnergyStats,
}

type Dev = Harvested<SimFlash<MemBlock<Vec<u8>>>>;

/// The data set.
pub fn dataset(d: Distribution, n: u64, seed: u64) -> Vec<Record<2>> {
    let mut rng = SplitMix64::new(seed);
    let mut unit = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (0..n)
        .map(|i| {
            let dims = match d {
                Distribution::Uniform => [
                    (unit() * 1001.0) as u16 % 1001,
                    (unit() * 1201.0) as u16 % 1201,
                ],
                Distribution::Normal => {
                    let mut g = |mean: f64, sd: f64, max: f64| {
                        let (a, b) = (unit().max(1e-12), unit());
                        let z = (-2.0 * a.ln()).sqrt() * (2.0 * core::f64::consts::PI * b).cos();
                        (mean + sd * z).round().clamp(0.0, max) as u16
                    };
                    [g(500.0, 150.0, 1000.0), g(600.0, 180.0, 1200.0)]
                }
            };
            Record { ts: i as u32, dims }
        })
        .collect()
}

fn context(done: u64, len: usize) -> Vec<u8> {
    let mut c = std::vec![0u8; len.max(16)];
    c[..8].copy_from_slice(&done.to_le_bytes());
    c[8..16].copy_from_slice(&(!done).to_le_bytes());
    for (i, x) in c[16..].iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31) ^ done as u8;
    }
    c.truncate(len.max(16));
    c
}

fn progress(c: &[u8]) -> Option<u64> {
    let d = u64::from_le_bytes(c.get(..8)?.try_into().ok()?);
    let n = u64::from_le_bytes(c.get(8..16)?.try_into().ok()?);
    (n == !d).then_some(d)
}

/// Runs the workload; `Err` says why it could not finish.
pub fn run(p: &Params) -> Result<Outcome, String> {
    let cfg = p.config();
    let geom = FlashGeometry::nor(cfg.flash_bytes(512), 512);
    let sim = SimFlash::in_memory(geom, p.model.cost).map_err(|e| format!("flash: {e}"))?;
    let mut dev: Dev = Harvested::new(sim, p.model.clone());
    if p.blackout_p > 0.0 {
        dev = dev.with_blackouts(p.blackout_p, p.seed ^ 0xB1AC);
    }
    let data = dataset(p.distribution, p.records, p.seed);
    let mut out = Outcome {
        ram_bytes: Store::<&mut Dev, 2>::ram_bytes(),
        ..Outcome::default()
    };
    let mut buf = std::vec![0u8; p.context_bytes.max(16)];
    let mut formatted = false;
    let mut tries = 0u64;
    let now = |d: &Dev| d.stats().on_s;
    'life: loop {
        tries += 1;
        if tries > 1_000_000 {
            return Err("no progress after a million power failures".into());
        }
        if !dev.is_on() && !dev.recharge() {
            return Err("the supply never charges the capacitor".into());
        }
        dev.cpu(p.cpu_per_call_s);
        let t0 = now(&dev);
        let s0 = dev.stats();
        let opened = if formatted {
            Store::open(&mut dev, cfg, &mut buf).map(|(s, n)| (s, progress(&buf[..n])))
        } else {
            Store::format(&mut dev, cfg, &context(0, p.context_bytes)).map(|s| (s, Some(0)))
        };
        let (mut s, done) = match opened {
            Ok(x) => x,
            Err(e) if e.is_power_loss() => continue 'life,
            Err(e) => return Err(format!("restore: {e}")),
        };
        if formatted {
            let t = now(s.device()) - t0;
            out.restore.add(t, &s0, &s.device().stats());
        }
        formatted = true;
        let mut i = done.ok_or("the restored context is not one the workload wrote")?;
        while i < p.records {
            s.device_mut().cpu(p.cpu_per_call_s);
            let t0 = now(s.device());
            let s0 = s.device().stats();
            // A checkpoint every `checkpoint_every` inserts, and when the partition ring
            // needs one to free its oldest partition.
            let due = match s.put(&data[i as usize]) {
                Ok(()) => {
                    out.insert
                        .add(now(s.device()) - t0, &s0, &s.device().stats());
                    i += 1;
                    i.is_multiple_of(p.checkpoint_every) || i == p.records
                }
                Err(Error::CheckpointNeeded) => true,
                Err(e) if e.is_power_loss() => continue 'life,
                Err(e) => return Err(format!("put {i}: {e}")),
            };
            out.undo_log_peak_bytes = out.undo_log_peak_bytes.max(s.log_usage());
            if due {
                s.device_mut().cpu(p.cpu_per_call_s);
                let t0 = now(s.device());
                let s0 = s.device().stats();
                match s.commit(&context(i, p.context_bytes)) {
                    Ok(()) => out
                        .commit
                        .add(now(s.device()) - t0, &s0, &s.device().stats()),
                    Err(e) if e.is_power_loss() => continue 'life,
                    Err(e) => return Err(format!("commit at {i}: {e}")),
                }
            }
        }
        // The scans, over what the store holds at the end.
        let mut rng = SplitMix64::new(p.seed ^ 0x5CA7);
        let mut got = std::vec![Record::default(); p.scan_limit];
        for _ in 0..p.scans {
            let mut q = Query::all();
            for k in 0..2 {
                let max = if k == 0 { 1001 } else { 1201 };
                let a = rng.below(max) as u16;
                let b = rng.below(max) as u16;
                q.lo[k] = a.min(b);
                q.hi[k] = a.max(b);
            }
            s.device_mut().cpu(p.cpu_per_call_s);
            let t0 = now(s.device());
            let s0 = s.device().stats();
            match s.scan(&q, &mut got) {
                Ok(_) => out.scan.add(now(s.device()) - t0, &s0, &s.device().stats()),
                Err(e) if e.is_power_loss() => continue 'life,
                Err(e) => return Err(format!("scan: {e}")),
            }
        }
        let mut all = std::vec![Record::default(); p.records as usize + 1];
        out.records_kept = match s.scan(&Query::all(), &mut all) {
            Ok(n) => n as u64,
            Err(e) if e.is_power_loss() => continue 'life,
            Err(e) => return Err(format!("final scan: {e}")),
        };
        break;
    }
    let st = dev.stats();
    out.modeled_total_s = st.time_s;
    out.on_s = st.on_s;
    out.power_failures = st.failures;
    out.energy_j = st.energy_j;
    out.flash_energy_j = st.flash_j;
    out.sim = st;
    let wear = dev.inner().wear();
    let first = usize::from(cfg.log_units) + 2;
    let per = usize::from(cfg.partition_units);
    out.log_erases = wear[..usize::from(cfg.log_units)]
        .iter()
        .map(|w| w.erases)
        .sum();
    out.erases_per_partition = (0..usize::from(cfg.partitions))
        .map(|k| {
            wear[first + k * per..first + (k + 1) * per]
                .iter()
                .map(|w| w.erases)
                .sum()
        })
        .collect();
    let part_erases: u64 = out.erases_per_partition.iter().sum();
    let segments = (usize::from(cfg.partitions) * per) as f64;
    if part_erases > 0 {
        // §V-G: at 10 records/s the workload takes records/10 s; every segment has been
        // erased once after segments/erases of those; a segment lasts 10^5 erases.
        let secs = p.records as f64 / 10.0 * segments / part_erases as f64 * 1e5;
        out.lifetime_years = secs / (365.25 * 24.0 * 3600.0);
    }
    Ok(out)
}

/// One JSON object, as the harness prints results: `params` and figures.
pub fn to_json(p: &Params, o: &Outcome) -> String {
    let ck = match p.checkpointing {
        Checkpointing::Rollback => "rb",
        Checkpointing::Wal => "wal",
        Checkpointing::Cow => "cow",
    };
    let undo = match p.undo {
        Undo::Discard => "discard",
        Undo::Erase => "erase",
    };
    let lat = |l: &Latency| {
        format!(
            "{{\"count\":{},\"avg_ms\":{:.4},\"max_ms\":{:.4}}}",
            l.count,
            l.avg_s() * 1e3,
            l.max_s * 1e3
        )
    };
    let erases: Vec<String> = o
        .erases_per_partition
        .iter()
        .map(|e| e.to_string())
        .collect();
    format!(
        "{{\"suite\":\"ifkvs\",\"params\":{{\"checkpoint\":\"{ck}\",\"distribution\":\"{}\",\
         \"lazy_split\":{},\"undo\":\"{undo}\",\"records\":{},\"checkpoint_every\":{}}},\
         \"modeled_total_s\":{:.3},\"on_s\":{:.3},\"power_failures\":{},\"energy_j\":{:.4},\
         \"flash_energy_j\":{:.4},\"insert\":{},\"commit\":{},\"restore\":{},\"scan\":{},\
         \"undo_log_peak_bytes\":{},\"erases_per_partition\":[{}],\"log_erases\":{},\
         \"lifetime_years\":{:.2},\"records_kept\":{},\"ram_bytes\":{}}}",
        p.distribution.name(),
        p.lazy_split,
        p.records,
        p.checkpoint_every,
        o.modeled_total_s,
        o.on_s,
        o.power_failures,
        o.energy_j,
        o.flash_energy_j,
        lat(&o.insert),
        lat(&o.commit),
        lat(&o.restore),
        lat(&o.scan),
        o.undo_log_peak_bytes,
        erases.join(","),
        o.log_erases,
        o.lifetime_years,
        o.records_kept,
        o.ram_bytes
    )
}
