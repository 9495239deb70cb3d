//! The engine API's cost per operation, for instruction counts under callgrind (the machine
//! is too noisy for timings of this size):
//!
//! ```sh
//! cargo build --release -p ember-lsm --example kv_cost
//! valgrind --tool=callgrind --dump-instr=no \
//!     target/release/examples/kv_cost [N] [mem|file] [V] [R]
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep kv_cost::phase
//! ```
//!
//! `N` (default 100,000) random puts of 8-byte big-endian keys (a permutation) with `V`-byte
//! values (default 64), not synced, then `R` rounds (default 1) of `N` random gets of the same keys — the `sqlitekv` suite's
//! insert-rand and query-rand on the engine API, with the same 8 MiB budget and no
//! background thread. `file` (the default) keeps the database in a sparse file image under
//! the system's temporary directory through the table engine's space manager, as the suite
//! does; `mem` keeps it in RAM. Each phase is its own function (`phase_put`, `phase_get`)
//! so callgrind's inclusive counts split them: divide by `N` for instructions per operation.
//! The wall time per operation it prints is one run's (compare medians of several), and so
//! are the bytes the engine wrote to the device (the table engine's own writes included).
//!
//! For experiments with the tree's shape, `EMBER_LSM_L0_TRIGGER`, `EMBER_LSM_LEVEL1_BYTES`
//! and `EMBER_LSM_MULTIPLIER` override the budget's defaults.

use std::error::Error;
use std::time::Instant;

use ember_device::file::FileBlock;
use ember_device::{Accounted, BlockDevice, MemBlock, SplitMix64};
use ember_lsm::{Db, Env, Options, SpaceEnv};
use ember_table::{Database, FormatOptions, Mode};

/// A permutation of `0..n`.
fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    SplitMix64::new(seed).shuffle(&mut v);
    v
}

#[inline(never)]
fn phase_put<E: Env>(
    db: &Db<E>,
    keys: &[u64],
    values: &[u8],
    v: usize,
) -> Result<(), Box<dyn Error>> {
    for (i, k) in keys.iter().enumerate() {
        let at = (i * 64) % (values.len() - v);
        db.put(&k.to_be_bytes(), &values[at..at + v], false)?;
    }
    Ok(())
}

#[inline(never)]
fn phase_get<E: Env>(db: &Db<E>, keys: &[u64]) -> Result<usize, Box<dyn Error>> {
    let mut bytes = 0;
    for k in keys {
        match db.get(&k.to_be_bytes())? {
            Some(v) => bytes += v.len(),
            None => return Err(format!("key {k} not found").into()),
        }
    }
    Ok(bytes)
}

/// The budget's options, with the overrides the environment gives.
fn options() -> Result<Options, Box<dyn Error>> {
    let var = |name: &str| -> Result<Option<u64>, Box<dyn Error>> {
        match std::env::var(name) {
            Ok(s) => Ok(Some(s.parse().map_err(|e| format!("{name}: {e}"))?)),
            Err(_) => Ok(None),
        }
    };
    let mut o = Options::with_budget(8 << 20);
    if let Some(x) = var("EMBER_LSM_L0_TRIGGER")? {
        o.l0_trigger = usize::try_from(x)?;
    }
    if let Some(x) = var("EMBER_LSM_LEVEL1_BYTES")? {
        o.level1_bytes = x;
    }
    if let Some(x) = var("EMBER_LSM_MULTIPLIER")? {
        o.level_multiplier = x;
    }
    Ok(o)
}

fn run<D: BlockDevice>(dev: D, n: u64, v: usize, rounds: u32) -> Result<(), Box<dyn Error>> {
    let opts = ember_table::Options {
        mode: Mode::Metadata,
        format: FormatOptions::default(),
        ..ember_table::Options::default()
    };
    let tdb = Database::create(Accounted::new(dev), opts)?;
    let env = SpaceEnv::create(tdb, 64 << 10)?;
    let db = Db::create(env, options()?)?;
    let mut rng = SplitMix64::new(3);
    let values: Vec<u8> = (0..(1 << 20)).map(|_| rng.byte()).collect();
    let (puts, gets) = (permutation(n, 1), permutation(n, 2));
    let t = Instant::now();
    phase_put(&db, &puts, &values, v)?;
    let put_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    let mut bytes = 0;
    for _ in 0..rounds {
        bytes += phase_get(&db, &gets)?;
    }
    let get_ns = t.elapsed().as_nanos() as f64 / (n * u64::from(rounds)) as f64;
    let levels = db.level_counts();
    let dev = db.close()?.into_space().close()?;
    let written = dev.stats().write_bytes;
    println!(
        "{n} puts ({put_ns:.0} ns each), {n} gets ({get_ns:.0} ns each, {bytes} bytes read), \
         levels {levels:?}, {:.1} MB written ({:.1}x the values)",
        written as f64 / 1e6,
        written as f64 / (n as f64 * v as f64),
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(100_000), |s| s.parse())?;
    let v: usize = std::env::args().nth(3).map_or(Ok(64), |s| s.parse())?;
    let rounds: u32 = std::env::args().nth(4).map_or(Ok(1), |s| s.parse())?;
    if !(1..=(512 << 10)).contains(&v) {
        return Err("the value size must be 1 byte to 512 KiB".into());
    }
    match std::env::args().nth(2).as_deref() {
        Some("mem") => {
            // Room for the data a few times over (compactions write before they free).
            let bytes = (n as usize).saturating_mul(v + 64).saturating_mul(4);
            run(MemBlock::new(bytes.max(256 << 20)), n, v, rounds.max(1))
        }
        _ => {
            let path = std::env::temp_dir().join(format!("kv_cost-{}.img", std::process::id()));
            let dev = FileBlock::create(&path, 8 << 30)?;
            let r = run(dev, n, v, rounds.max(1));
            let _ = std::fs::remove_file(&path);
            r
        }
    }
}
