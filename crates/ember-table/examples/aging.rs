//! Aging experiment for the space manager's allocators (LUNAR §4.4, "Fragmentation").
//!
//! The paper ages its store with 5 GB of writes in a 1 GB partition, creating and deleting
//! tables of 8 KB to 512 KB, and reports the *layout score* (1.0: every block of a table
//! starts where the table's previous block ends): 0.763 for a fixed 4 KB allocator, 0.922 for
//! the variable-size one. This program runs the same kind of aging on an in-memory device,
//! once with the variable-size allocator (`AllocConfig::default()`: 512 B..64 KiB, growth 2)
//! and once with a fixed 4 KiB allocator, and prints a Markdown table.
//!
//! ```text
//! cargo run --release -p ember-table --example aging -- \
//!     [--device-mb N] [--written-times K] [--seed S] \
//!     [--growing G] [--steps-kib LO-HI] [--whole] [--hint]
//! ```
//!
//! # The workload
//!
//! - A *table* is a list of extents, in the order it got them. Its final size is drawn
//!   log-uniformly from 8 KiB..=512 KiB (rounded up to a 512-byte sector).
//! - A table grows by *appends*: each append is one `SpaceManager::allocate` call of a size
//!   drawn log-uniformly from `--steps-kib` (default 4..=64 KiB, rounded up to a sector; the
//!   last append is whatever is left), and the extents it returns are added to the table's
//!   list. `--whole` instead allocates each table with one request of its full size (the way
//!   a file-system aging tool writes a file in one go).
//! - `--growing` tables (default 4) grow at the same time: every append goes to one of them
//!   picked at random, so their blocks interleave. A table that reaches its size is complete
//!   and a new table takes its place.
//! - *Fullness* is the allocator's allocated bytes over the data area's bytes. A target
//!   fullness is drawn uniformly from 50%..85% at the start and again every 1/16 of the
//!   device size written. Whenever the device is fuller than the target, a random live table
//!   (complete or still growing) is dropped: all its extents are freed with one `free` call.
//!   An allocation that fails with `NoSpace` drops a random table too (counted separately).
//! - *Bytes written* are the bytes of the extents allocated (the block sizes, so rounding up
//!   counts); the run stops when they reach `--written-times` × the device size (default 5).
//! - Randomness is `ember_device::SplitMix64`. Table `n`'s size and append sizes come from a
//!   stream of its own derived from the seed, so both allocators see the same sequence of
//!   tables; which table grows or is dropped, and the target fullness, come from two more
//!   streams. The two runs diverge only where the allocators' rounding makes fullness differ.
//!   `--hint` asks for each append to be placed right after the table's last block, as the
//!   table engine does when a table grows.
//!
//! # The measures
//!
//! - Layout score: over all live tables, of the blocks after each table's first, the fraction
//!   whose offset equals the previous block's offset + length (pooled over tables). Reported
//!   at the end, and as the mean of samples taken every 1/16 of the device size written,
//!   from the first drop on (the first fill of the empty device is not counted as aging).
//! - Runs per table: the number of contiguous pieces a live table is in (1 is ideal), a
//!   measure that does not depend on how many blocks a table's bytes are cut into.
//! - Metadata I/O: the device is wrapped in `ember_device::Accounted`; since the experiment
//!   writes no table data, every byte written is the space manager's (journal and bitmaps).

use std::time::Instant;

use ember_device::{Accounted, MemBlock, SplitMix64};
use ember_table::{AllocConfig, Extent, FormatOptions, SpaceManager, TableError};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const SECTOR: u64 = 512;
/// Table sizes are drawn from this range.
const TABLE_MIN: u64 = 8 * KIB;
const TABLE_MAX: u64 = 512 * KIB;
/// The target fullness is drawn from this range.
const FULL_LO: f64 = 0.50;
const FULL_HI: f64 = 0.85;
/// Samples and target changes happen every device size / `PERIODS` bytes written.
const PERIODS: u64 = 16;

type Dev = Accounted<MemBlock<Vec<u8>>>;
type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Clone, Copy)]
struct Params {
    device_mb: u64,
    written_times: u64,
    seed: u64,
    growing: usize,
    step_min: u64,
    step_max: u64,
    whole: bool,
    hint: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            device_mb: 256,
            written_times: 5,
            seed: 1,
            growing: 4,
            step_min: 4 * KIB,
            step_max: 64 * KIB,
            whole: false,
            hint: false,
        }
    }
}

const USAGE: &str = "usage: aging [--device-mb N] [--written-times K] [--seed S] \
                     [--growing G] [--steps-kib LO-HI] [--whole] [--hint]";

fn parse_args() -> Res<Params> {
    let mut p = Params::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Res<String> {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}").into())
        };
        match a.as_str() {
            "--device-mb" => p.device_mb = value(&a)?.parse()?,
            "--written-times" => p.written_times = value(&a)?.parse()?,
            "--seed" => p.seed = value(&a)?.parse()?,
            "--growing" => p.growing = value(&a)?.parse()?,
            "--steps-kib" => {
                let v = value(&a)?;
                let (lo, hi) = v.split_once('-').ok_or(USAGE)?;
                p.step_min = lo.parse::<u64>()? * KIB;
                p.step_max = hi.parse::<u64>()? * KIB;
            }
            "--whole" => p.whole = true,
            "--hint" => p.hint = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    if p.device_mb == 0 || p.written_times == 0 || p.growing == 0 {
        return Err("--device-mb, --written-times and --growing must be positive".into());
    }
    if p.step_min == 0 || p.step_min > p.step_max {
        return Err("--steps-kib needs 0 < LO <= HI".into());
    }
    Ok(p)
}

/// A number drawn log-uniformly from `lo..=hi`, rounded up to a sector.
fn log_uniform(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    let x = (l + u * (h - l)).exp() as u64;
    x.clamp(lo, hi).div_ceil(SECTOR) * SECTOR
}

/// A uniform number in `[0, 1)`.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The seed of an independent stream: stream `n` of kind `salt`.
fn stream(seed: u64, salt: u64, n: u64) -> SplitMix64 {
    let mut h = SplitMix64::new(seed ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut h = SplitMix64::new(h.next_u64() ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    SplitMix64::new(h.next_u64())
}

struct Table {
    /// Final size in bytes.
    size: u64,
    /// Bytes requested so far.
    requested: u64,
    /// Extents, in the order the table got them.
    extents: Vec<Extent>,
    /// Append sizes.
    rng: SplitMix64,
}

impl Table {
    fn new(seed: u64, n: u64) -> Self {
        let mut rng = stream(seed, 1, n);
        let size = log_uniform(&mut rng, TABLE_MIN, TABLE_MAX);
        Table {
            size,
            requested: 0,
            extents: Vec::new(),
            rng,
        }
    }

    /// The size of the next append.
    fn next_step(&mut self, p: &Params) -> u64 {
        let left = self.size - self.requested;
        if p.whole {
            left
        } else {
            log_uniform(&mut self.rng, p.step_min, p.step_max).min(left)
        }
    }
}

/// Contiguous successor pairs, successor pairs, and runs, over a set of tables.
#[derive(Debug, Default, Clone, Copy)]
struct Layout {
    contiguous: u64,
    pairs: u64,
    runs: u64,
    tables: u64,
}

impl Layout {
    fn of<'a>(tables: impl Iterator<Item = &'a Table>) -> Self {
        let mut l = Layout::default();
        for t in tables {
            if t.extents.is_empty() {
                continue;
            }
            l.tables += 1;
            l.runs += 1;
            for w in t.extents.windows(2) {
                l.pairs += 1;
                if w[0].offset + w[0].len == w[1].offset {
                    l.contiguous += 1;
                } else {
                    l.runs += 1;
                }
            }
        }
        l
    }

    fn score(&self) -> f64 {
        if self.pairs == 0 {
            1.0
        } else {
            self.contiguous as f64 / self.pairs as f64
        }
    }

    fn runs_per_table(&self) -> f64 {
        self.runs as f64 / self.tables.max(1) as f64
    }
}

struct Outcome {
    name: &'static str,
    end: Layout,
    mean_score: f64,
    samples: usize,
    written: u64,
    requested: u64,
    created: u64,
    dropped: u64,
    no_space: u64,
    final_fullness: f64,
    mean_fullness: f64,
    live_tables: usize,
    journal_bytes: u64,
    bitmap_bytes: u64,
    syncs: u64,
    allocs: u64,
    chunk_bytes: u64,
    chunks: usize,
    seconds: f64,
}

/// Bytes of the data area the allocator hands out.
fn data_bytes(sm: &SpaceManager<Dev>) -> f64 {
    let a = sm.allocator();
    (a.chunk_count() as u64 * a.chunk_bytes()) as f64
}

fn age(name: &'static str, cfg: AllocConfig, p: &Params) -> Res<Outcome> {
    let started = Instant::now();
    let capacity = p.device_mb * MIB;
    let dev = Accounted::new(MemBlock::new(usize::try_from(capacity)?));
    let opts = FormatOptions {
        alloc: cfg,
        ..FormatOptions::default()
    };
    let mut sm = SpaceManager::format(dev, opts)?;
    let sb = *sm.superblock();
    let log = sm.device().add_region("log", sb.log.start, sb.log.len)?;
    let data = sm.device().add_region("data", sb.data.start, sb.data.len)?;

    let total = p.written_times * capacity;
    let period = (capacity / PERIODS).max(1);
    let mut choose = stream(p.seed, 2, 0);
    let mut targets = stream(p.seed, 3, 0);
    let mut target = FULL_LO + (FULL_HI - FULL_LO) * unit(&mut targets);
    let mut next_mark = period;

    let mut growing: Vec<Table> = Vec::new();
    let mut complete: Vec<Table> = Vec::new();
    let (mut created, mut dropped, mut no_space) = (0u64, 0u64, 0u64);
    let (mut written, mut requested, mut allocs) = (0u64, 0u64, 0u64);
    let mut scores = Vec::new();
    let mut fulls = Vec::new();
    // Bytes in live tables' extents (the allocator's `allocated_bytes()` is a scan of every
    // chunk: too slow to call per operation).
    let mut live_bytes = 0u64;
    let capacity_bytes = data_bytes(&sm);

    // Drops a random live table; false if there is none.
    let drop_one = |sm: &mut SpaceManager<Dev>,
                    choose: &mut SplitMix64,
                    growing: &mut Vec<Table>,
                    complete: &mut Vec<Table>,
                    live_bytes: &mut u64|
     -> Res<bool> {
        let n = growing.len() + complete.len();
        if n == 0 {
            return Ok(false);
        }
        let i = choose.below(n as u64) as usize;
        let t = if i < growing.len() {
            growing.swap_remove(i)
        } else {
            complete.swap_remove(i - growing.len())
        };
        if !t.extents.is_empty() {
            sm.free(&t.extents)?;
            *live_bytes -= t.extents.iter().map(|e| e.len).sum::<u64>();
        }
        Ok(true)
    };

    while written < total {
        if live_bytes as f64 / capacity_bytes > target {
            drop_one(
                &mut sm,
                &mut choose,
                &mut growing,
                &mut complete,
                &mut live_bytes,
            )?;
            dropped += 1;
            continue;
        }
        while growing.len() < p.growing {
            growing.push(Table::new(p.seed, created));
            created += 1;
        }
        let g = choose.below(growing.len() as u64) as usize;
        let step = growing[g].next_step(p);
        let hint = if p.hint {
            growing[g].extents.last().map(|e| e.block)
        } else {
            None
        };
        match sm.allocate_after(step, hint) {
            Ok(ext) => {
                allocs += 1;
                let got = ext.iter().map(|e| e.len).sum::<u64>();
                written += got;
                live_bytes += got;
                requested += step;
                let t = &mut growing[g];
                t.extents.extend(ext);
                t.requested += step;
                if t.requested == t.size {
                    complete.push(growing.swap_remove(g));
                }
            }
            Err(TableError::NoSpace { .. }) => {
                no_space += 1;
                if !drop_one(
                    &mut sm,
                    &mut choose,
                    &mut growing,
                    &mut complete,
                    &mut live_bytes,
                )? {
                    return Err("no space on an empty device".into());
                }
                dropped += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        while written >= next_mark {
            next_mark += period;
            // Sample the aged state only: from the first drop on (the first fill is not aging).
            if dropped > 0 {
                scores.push(Layout::of(growing.iter().chain(&complete)).score());
                fulls.push(live_bytes as f64 / capacity_bytes);
            }
            target = FULL_LO + (FULL_HI - FULL_LO) * unit(&mut targets);
        }
    }

    // Sanity: the allocator holds exactly the live tables' bytes, and no extents overlap.
    let mut live: Vec<Extent> = growing
        .iter()
        .chain(&complete)
        .flat_map(|t| t.extents.iter().copied())
        .collect();
    assert_eq!(live.iter().map(|e| e.len).sum::<u64>(), live_bytes);
    assert_eq!(live_bytes, sm.allocator().allocated_bytes());
    live.sort_by_key(|e| e.offset);
    assert!(
        live.windows(2)
            .all(|w| w[0].offset + w[0].len <= w[1].offset)
    );

    let end = Layout::of(growing.iter().chain(&complete));
    let final_fullness = live_bytes as f64 / capacity_bytes;
    let written_to =
        |sm: &mut SpaceManager<Dev>, id| sm.device().region(id).map_or(0, |(_, s)| s.write_bytes);
    let (journal_bytes, bitmap_bytes) = (written_to(&mut sm, log), written_to(&mut sm, data));
    let syncs = sm.device().stats().syncs;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Ok(Outcome {
        name,
        end,
        mean_score: mean(&scores),
        samples: scores.len(),
        written,
        requested,
        created,
        dropped,
        no_space,
        final_fullness,
        mean_fullness: mean(&fulls),
        live_tables: growing.len() + complete.len(),
        journal_bytes,
        bitmap_bytes,
        syncs,
        allocs,
        chunk_bytes: sm.allocator().chunk_bytes(),
        chunks: sm.allocator().chunk_count(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / MIB as f64)
}

fn main() -> Res<()> {
    let p = parse_args()?;
    let growth = if p.whole {
        "one request per table".to_string()
    } else {
        format!(
            "appends of {}..={} KiB (log-uniform), {} tables growing at once",
            p.step_min / KIB,
            p.step_max / KIB,
            p.growing
        )
    };
    println!(
        "Aging: {} MiB device, {}x its size written, seed {}, tables of 8..=512 KiB \
         (log-uniform), {growth}, fullness kept at a target drawn from 50%..85%.\n",
        p.device_mb, p.written_times, p.seed
    );
    let fixed = AllocConfig {
        min_block: 4096,
        max_block: 4096,
        growth: 1,
    };
    let runs = [
        ("variable 512 B..64 KiB x2", AllocConfig::default()),
        ("fixed 4 KiB", fixed),
    ];
    let mut out = Vec::new();
    for (name, cfg) in runs {
        out.push(age(name, cfg, &p)?);
    }
    println!(
        "| allocator | layout score (end) | mean layout score | bytes written | tables created / dropped | final fullness |"
    );
    println!("|---|---|---|---|---|---|");
    for o in &out {
        println!(
            "| {} | {:.3} | {:.3} ({} samples) | {} | {} / {} | {:.1}% |",
            o.name,
            o.end.score(),
            o.mean_score,
            o.samples,
            mib(o.written),
            o.created,
            o.dropped,
            100.0 * o.final_fullness
        );
    }
    println!();
    println!(
        "| allocator | chunks | blocks/table (end) | runs/table (end) | requested / written | mean fullness | NoSpace drops | live tables | allocate calls | journal writes | bitmap writes | syncs | time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for o in &out {
        println!(
            "| {} | {} x {} KiB | {:.1} | {:.2} | {:.3} | {:.1}% | {} | {} | {} | {} | {} | {} | {:.1} s |",
            o.name,
            o.chunks,
            o.chunk_bytes / KIB,
            (o.end.pairs + o.end.tables) as f64 / o.end.tables.max(1) as f64,
            o.end.runs_per_table(),
            o.requested as f64 / o.written.max(1) as f64,
            100.0 * o.mean_fullness,
            o.no_space,
            o.live_tables,
            o.allocs,
            mib(o.journal_bytes),
            mib(o.bitmap_bytes),
            o.syncs,
            o.seconds
        );
    }
    Ok(())
}
