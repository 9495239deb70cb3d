//! The table suite: EmberDB's table engine (LUNAR, `Mode::Full`) against SQLite in WAL and in
//! rollback-journal mode, both with `synchronous=FULL`, on files in one directory.
//!
//! Workloads (N rows, default 100,000; 2,000 with `--quick`), each on a fresh database whose
//! files are removed afterwards, each system run after the other (never concurrently, since
//! `/proc/self/io` counts the whole process):
//!
//! * `insert-sync`: N single-row inserts, each its own durable transaction; sequential
//!   integer keys, 100-byte values.
//! * `insert-4k-sync`: the same with 4 KiB values and N/10 rows (Mobibench-style), for the
//!   bytes written per application byte.
//! * `read-random`: N rows loaded in one transaction, then N point lookups of uniformly random
//!   keys.
//!
//! The insert workloads also run `floor`: no database, just one `pwrite` of the row's bytes
//! at the next offset of a zero-filled file and one `fdatasync` per row — what any engine
//! that writes a commit once and syncs once must pay on this machine, the bound for both.
//!
//! Values are pseudo-random bytes from [`SplitMix64`] (incompressible; neither engine
//! compresses, so db_bench's half-compressible values would change nothing), the same bytes
//! for every system.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ember_device::file::FileBlock;
use ember_device::{Accounted, BlockDevice, IoStats, SplitMix64};
use ember_table::{Database, IndexKind, Mode, Options, Schema, Value};
use rusqlite::{Connection, params};
use serde_json::{Map, Value as Json, json};

use crate::measure::{Latencies, ProcIo, Result, Scratch, file_system};
use crate::report::{self, RunResult};

/// Arguments of `ember-bench table`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Small sizes (N = 2,000) for a quick look.
    #[arg(long)]
    pub quick: bool,
    /// Rows per workload (default 100,000, or 2,000 with --quick); insert-4k-sync uses N/10.
    #[arg(long)]
    pub n: Option<u64>,
    /// Directory to put the databases in (a fresh subdirectory is made and removed there).
    #[arg(long, default_value = "target/bench-tmp")]
    pub dir: PathBuf,
    /// Where to write the JSON results.
    #[arg(long, default_value = "target/bench-table.json")]
    pub out: PathBuf,
    /// Runs of each (workload, system), interleaved; the run with the median ops/s is
    /// reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub repeat: u64,
    /// read-random: close and reopen each database between the load and the lookups (the
    /// engines' caches start cold, the OS page cache stays warm; the open is timed apart).
    #[arg(long)]
    pub reopen: bool,
    /// Write zeros over EmberDB's whole image file before each run (untimed, uncounted), so
    /// no write has to allocate file blocks: closer to a raw partition than a sparse file.
    #[arg(long)]
    pub prefill: bool,
    /// Run only these workloads (repeatable): insert-sync, insert-4k-sync, read-random.
    #[arg(long = "only", value_name = "WORKLOAD", value_parser = ["insert-sync", "insert-4k-sync", "read-random"])]
    pub only: Vec<String>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Rows per workload.
    pub n: u64,
    /// Parent directory of the scratch directory.
    pub dir: PathBuf,
    /// Runs per (workload, system).
    pub repeat: u64,
    /// Size of EmberDB's (sparse) image file.
    pub image_bytes: u64,
    /// Seed of the values and of the lookup keys.
    pub seed: u64,
    /// Workloads to run by name (empty: all).
    pub only: Vec<String>,
    /// read-random: reopen between the load and the lookups.
    pub reopen: bool,
    /// Fill EmberDB's image with zeros first instead of leaving it sparse.
    pub prefill: bool,
}

impl Config {
    /// The configuration the command line asks for.
    pub fn from_args(a: &Args) -> Config {
        Config {
            n: a.n.unwrap_or(if a.quick { 2_000 } else { 100_000 }),
            dir: a.dir.clone(),
            repeat: a.repeat,
            image_bytes: 1 << 30,
            seed: 0x5eed_7ab1e,
            only: a.only.clone(),
            reopen: a.reopen,
            prefill: a.prefill,
        }
    }
}

/// Runs `ember-bench table`: the suite, the Markdown report on stdout, the JSON file.
pub fn main(args: &Args) -> Result<()> {
    let cfg = Config::from_args(args);
    let text = run_suite(&cfg, &args.out)?;
    println!("{text}");
    eprintln!("ember-bench: results written to {}", args.out.display());
    Ok(())
}

const KEY_BYTES: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    InsertSync,
    Insert4kSync,
    ReadRandom,
}

impl Workload {
    const ALL: [Workload; 3] = [
        Workload::InsertSync,
        Workload::Insert4kSync,
        Workload::ReadRandom,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::InsertSync => "insert-sync",
            Workload::Insert4kSync => "insert-4k-sync",
            Workload::ReadRandom => "read-random",
        }
    }

    fn rows(self, n: u64) -> u64 {
        match self {
            Workload::Insert4kSync => (n / 10).max(1),
            _ => n,
        }
    }

    fn value_bytes(self) -> usize {
        match self {
            Workload::Insert4kSync => 4096,
            _ => 100,
        }
    }

    /// The systems it runs on: EmberDB with a tree index too where that is cheap.
    fn systems(self) -> &'static [System] {
        const ALL: &[System] = &[
            System::Ember(IndexKind::Hash),
            System::Ember(IndexKind::Tree),
            System::Sqlite(Journal::Wal),
            System::Sqlite(Journal::Delete),
        ];
        const INSERTS: &[System] = &[
            System::Ember(IndexKind::Hash),
            System::Ember(IndexKind::Tree),
            System::Sqlite(Journal::Wal),
            System::Sqlite(Journal::Delete),
            System::Floor,
        ];
        const HASH_ONLY: &[System] = &[
            System::Ember(IndexKind::Hash),
            System::Sqlite(Journal::Wal),
            System::Sqlite(Journal::Delete),
            System::Floor,
        ];
        match self {
            Workload::Insert4kSync => HASH_ONLY,
            Workload::InsertSync => INSERTS,
            Workload::ReadRandom => ALL,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Journal {
    Wal,
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Ember(IndexKind),
    Sqlite(Journal),
    /// One write and one `fdatasync` per row on a preallocated file (see the module docs).
    Floor,
}

/// The EmberDB systems and the SQLite ones, by name, for the ratio table.
const EMBER_SYSTEMS: [&str; 2] = ["emberdb-hash", "emberdb-tree"];
/// (`floor` is in the second list so the report shows how close each comes to it.)
const SQLITE_SYSTEMS: [&str; 3] = ["sqlite-wal", "sqlite-delete", "floor"];

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Ember(IndexKind::Hash) => EMBER_SYSTEMS[0],
            System::Ember(IndexKind::Tree) => EMBER_SYSTEMS[1],
            System::Sqlite(Journal::Wal) => SQLITE_SYSTEMS[0],
            System::Sqlite(Journal::Delete) => SQLITE_SYSTEMS[1],
            System::Floor => "floor",
        }
    }

    fn engine(self) -> &'static str {
        match self {
            System::Ember(_) => "emberdb-table",
            System::Sqlite(_) => "sqlite",
            System::Floor => "none (pwrite + fdatasync)",
        }
    }

    fn params(self, cfg: &Config, w: Workload) -> Map<String, Json> {
        let mut p = json!({
            "durability": "sync",
            "rows": w.rows(cfg.n),
            "key_bytes": KEY_BYTES,
            "value_bytes": w.value_bytes(),
            "values": "pseudo-random (SplitMix64), incompressible",
        });
        if w == Workload::ReadRandom {
            let reads = if cfg.reopen {
                "after load, close and reopen"
            } else {
                "after load, same handle"
            };
            if let Some(p) = p.as_object_mut() {
                p.insert("reads".into(), reads.into());
            }
        }
        let more = match self {
            System::Ember(kind) => json!({
                "mode": "full",
                "index": if kind == IndexKind::Hash { "hash" } else { "tree" },
                "device": format!(
                    "FileBlock, {} MiB image ({}), Accounted",
                    cfg.image_bytes >> 20,
                    if cfg.prefill { "zero-filled first" } else { "sparse" }
                ),
                "options": "Options::default() but mode (4 KiB blocks, 1 MiB buffer, 256 KiB query cache)",
            }),
            System::Sqlite(j) => json!({
                "journal_mode": if j == Journal::Wal { "wal" } else { "delete" },
                "synchronous": "full",
                "sqlite_version": rusqlite::version(),
                "cache_size": "default (-2000: 2 MB)",
            }),
            System::Floor => json!({
                "file": "zero-filled and synced before the timed loop; rows written one after another",
            }),
        };
        if let (Some(p), Json::Object(more)) = (p.as_object_mut(), more) {
            p.extend(more);
        }
        match p {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }
}

/// What one run measured, before it becomes a [`RunResult`].
struct Measured {
    lat: Latencies,
    seconds: f64,
    app_bytes: Option<u64>,
    device: Option<(u64, &'static str)>,
    proc_io: Option<ProcIo>,
    extra: Map<String, Json>,
}

/// Runs every workload on every system and returns the Markdown report; writes the JSON to
/// `out`.
pub fn run_suite(cfg: &Config, out: &Path) -> Result<String> {
    let scratch = Scratch::new(&cfg.dir, "ember-bench-table")?;
    let fs = file_system(scratch.dir()).unwrap_or_else(|| "unknown file system".into());
    eprintln!(
        "ember-bench table: N = {}, files in {} ({fs})",
        cfg.n,
        scratch.dir().display()
    );
    let mut results = Vec::new();
    let chosen = Workload::ALL
        .into_iter()
        .filter(|w| cfg.only.is_empty() || cfg.only.iter().any(|o| o == w.name()));
    for w in chosen {
        let systems = w.systems();
        let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); systems.len()];
        for rep in 0..cfg.repeat {
            for (i, &s) in systems.iter().enumerate() {
                scratch.clear()?;
                let m = run_one(cfg, &scratch, w, s)?;
                scratch.clear()?;
                let r = to_result(cfg, w, s, m);
                eprintln!(
                    "  {} {} (run {}/{}): {:.0} ops/s, p50 {:.1} µs, p99 {:.1} µs",
                    w.name(),
                    s.name(),
                    rep + 1,
                    cfg.repeat,
                    r.ops_per_sec(),
                    r.p50_us,
                    r.p99_us
                );
                runs[i].push(r);
            }
        }
        results.extend(runs.into_iter().filter_map(report::median_run));
    }

    let mut extra = Map::new();
    extra.insert("dir".into(), scratch.dir().display().to_string().into());
    extra.insert("file_system".into(), fs.clone().into());
    extra.insert("n".into(), cfg.n.into());
    extra.insert("repeat".into(), cfg.repeat.into());
    extra.insert("prefill".into(), cfg.prefill.into());
    extra.insert("reopen".into(), cfg.reopen.into());
    extra.insert("sqlite_version".into(), rusqlite::version().into());
    report::write_json(out, "table", extra, &results)?;

    let mut text = format!(
        "## ember-bench table\n\n\
         N = {} rows (insert-4k-sync: {}), 8-byte integer keys, 100-byte values \
         (4 KiB for insert-4k-sync), pseudo-random incompressible bytes; {} run(s) per row, \
         median reported. EmberDB image: {} MiB, {}. read-random: {}. \
         Files in `{}` ({fs}). SQLite {} (rusqlite, bundled). Machine: {} cores.\n\n",
        cfg.n,
        Workload::Insert4kSync.rows(cfg.n),
        cfg.repeat,
        cfg.image_bytes >> 20,
        if cfg.prefill {
            "zero-filled first (--prefill)"
        } else {
            "sparse"
        },
        if cfg.reopen {
            "closed and reopened after the load (--reopen)"
        } else {
            "lookups on the handle that loaded"
        },
        scratch.dir().display(),
        rusqlite::version(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    text.push_str(&report::results_table(&results));
    text.push_str("\nEmberDB / SQLite:\n\n");
    text.push_str(&report::ratio_table(
        &results,
        &EMBER_SYSTEMS,
        &SQLITE_SYSTEMS,
    ));
    text.push_str(LEGEND);
    Ok(text)
}

const LEGEND: &str = "
What the figures are:
- ops/s: operations timed ÷ wall-clock seconds of the timed loop (closing the database,
  EmberDB's checkpoint or SQLite's WAL checkpoint, is not timed; its bytes are counted).
  read-random times only the lookups, after a load in one transaction.
- p50 / p99: nearest-rank percentiles of each operation's latency.
- app B: bytes handed to the database, rows × (8-byte key + value).
- device B: EmberDB: bytes the engine passed to its device (`Accounted` write_bytes, the
  pwrite calls, before the page cache); SQLite: /proc/self/io write_bytes. Counted from the
  first insert to after close.
- proc write_bytes: /proc/self/io, bytes this process sent to the storage layer, counted in
  whole 4 KiB pages as they are dirtied (the same counter for both, so the comparable one).
- proc wchar: /proc/self/io, bytes passed to write system calls.
- None of them counts what ext4 writes for itself (its journal, inodes, block bitmaps).
- Durability: EmberDB Mode::Full syncs every commit (fdatasync via FileBlock::sync);
  SQLite synchronous=FULL. EmberDB runs on a 1 GiB image file (sparse unless --prefill),
  SQLite on its own files in the same directory; every database is fresh and removed
  afterwards. The JSON has more per row: p99.9 and max latency, the median of the first and
  last tenth of the operations, EmberDB's device counters, load and open times.
";

fn to_result(cfg: &Config, w: Workload, s: System, m: Measured) -> RunResult {
    let q = m.lat.percentiles_us(&[0.5, 0.99, 0.999, 1.0]);
    let (first, last) = m.lat.drift_us();
    let mut extra = m.extra;
    extra.insert("p50_us_first_tenth".into(), first.into());
    extra.insert("p50_us_last_tenth".into(), last.into());
    RunResult {
        workload: w.name().into(),
        system: s.name().into(),
        engine: s.engine().into(),
        params: s.params(cfg, w),
        ops: m.lat.len() as u64,
        seconds: m.seconds,
        p50_us: q[0],
        p99_us: q[1],
        p999_us: q[2],
        max_us: q[3],
        app_bytes: m.app_bytes,
        device_bytes: m.device.map(|d| d.0),
        device_bytes_source: m.device.map(|d| d.1),
        proc_io: m.proc_io,
        extra,
        repeats: Vec::new(),
    }
}

fn run_one(cfg: &Config, scratch: &Scratch, w: Workload, s: System) -> Result<Measured> {
    match s {
        System::Ember(kind) => ember_run(cfg, scratch, w, kind),
        System::Sqlite(j) => sqlite_run(cfg, scratch, w, j),
        System::Floor => floor_run(cfg, scratch, w),
    }
}

/// The floor: each row written once with `pwrite` and synced with `fdatasync`.
fn floor_run(cfg: &Config, scratch: &Scratch, w: Workload) -> Result<Measured> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let (rows, vb) = (w.rows(cfg.n), w.value_bytes());
    let row_bytes = KEY_BYTES + vb as u64;
    let path = scratch.path("floor.img");
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let len = (rows * row_bytes).clamp(1 << 20, 256 << 20);
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..len.div_ceil(1 << 20) {
        f.write_all(&zeros)?;
    }
    f.sync_all()?;
    let len = len.div_ceil(1 << 20) << 20;
    let mut at = 0u64;
    let (lat, seconds) = timed_inserts(rows, vb, cfg.seed, |k, v| {
        if at + row_bytes > len {
            at = 0;
        }
        let mut buf = Vec::with_capacity(row_bytes as usize);
        buf.extend_from_slice(&k.to_le_bytes());
        buf.extend_from_slice(v);
        f.write_all_at(&buf, at)?;
        f.sync_data()?;
        at += row_bytes;
        Ok(())
    })?;
    if w == Workload::ReadRandom {
        return Err("the floor has no read workload".into());
    }
    Ok(Measured {
        lat,
        seconds,
        app_bytes: Some(rows * row_bytes),
        device: Some((rows * row_bytes, "bytes passed to pwrite")),
        proc_io: None,
        extra: Map::new(),
    })
}

// ----- workload loops, shared by every system ---------------------------------------------

/// Fills `buf` with the generator's next bytes.
fn fill(rng: &mut SplitMix64, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let x = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
}

/// Inserts keys 1..=rows with fresh values through `insert`, timing each call.
fn timed_inserts(
    rows: u64,
    value_bytes: usize,
    seed: u64,
    mut insert: impl FnMut(i64, &[u8]) -> Result<()>,
) -> Result<(Latencies, f64)> {
    let mut rng = SplitMix64::new(seed);
    let mut v = vec![0u8; value_bytes];
    let mut lat = Latencies::with_capacity(rows as usize);
    let start = Instant::now();
    for k in 1..=rows as i64 {
        fill(&mut rng, &mut v);
        lat.time(|| insert(k, &v))?;
    }
    Ok((lat, start.elapsed().as_secs_f64()))
}

/// Looks up `rows` random keys in 1..=rows through `get`, which returns the value's length;
/// a missing row or a wrong length is an error.
fn timed_gets(
    rows: u64,
    value_bytes: usize,
    seed: u64,
    mut get: impl FnMut(i64) -> Result<Option<usize>>,
) -> Result<(Latencies, f64)> {
    let mut rng = SplitMix64::new(seed ^ 0x6e7);
    let mut lat = Latencies::with_capacity(rows as usize);
    let start = Instant::now();
    for _ in 0..rows {
        let k = 1 + rng.below(rows) as i64;
        match lat.time(|| get(k))? {
            Some(len) if len == value_bytes => {}
            found => return Err(format!("lookup of key {k} found {found:?}").into()),
        }
    }
    Ok((lat, start.elapsed().as_secs_f64()))
}

/// Allocated bytes of a file on disk (`st_blocks` × 512).
fn allocated(path: &Path) -> Option<u64> {
    fs::metadata(path).ok().map(|m| m.blocks() * 512)
}

// ----- EmberDB ------------------------------------------------------------------------------

type EmberDb = Database<Accounted<FileBlock>>;

fn kv_schema(index: IndexKind) -> Schema {
    Schema::key_value("INTEGER", "BLOB", index)
}

fn ember_create(path: &Path, cfg: &Config, index: IndexKind) -> Result<EmberDb> {
    let mut file = FileBlock::create(path, cfg.image_bytes)?;
    if cfg.prefill {
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < cfg.image_bytes {
            let len = zeros.len().min((cfg.image_bytes - at) as usize);
            file.write(at, &zeros[..len])?;
            at += len as u64;
        }
        file.sync()?;
    }
    let dev = Accounted::new(file);
    let mut db = Database::create(dev, ember_options())?;
    db.create_table("kv", kv_schema(index))?;
    Ok(db)
}

/// Full mode; everything else as `Options::default()`.
fn ember_options() -> Options {
    Options {
        mode: Mode::Full,
        ..Options::default()
    }
}

fn ember_insert(db: &mut EmberDb, k: i64, v: &[u8]) -> Result<()> {
    db.insert("kv", &[Value::Integer(k), Value::Blob(v.to_vec())])?;
    Ok(())
}

fn io_json(s: &IoStats) -> Json {
    json!({
        "reads": s.reads, "read_bytes": s.read_bytes, "writes": s.writes,
        "write_bytes": s.write_bytes, "syncs": s.syncs, "synced_bytes": s.synced_bytes,
    })
}

fn ember_run(cfg: &Config, scratch: &Scratch, w: Workload, index: IndexKind) -> Result<Measured> {
    let path = scratch.path("ember.img");
    let mut db = ember_create(&path, cfg, index)?;
    let (rows, vb) = (w.rows(cfg.n), w.value_bytes());
    let mut extra = Map::new();
    match w {
        Workload::InsertSync | Workload::Insert4kSync => {
            let dev0 = db.device().stats();
            let io0 = ProcIo::read();
            let (lat, seconds) =
                timed_inserts(rows, vb, cfg.seed, |k, v| ember_insert(&mut db, k, v))?;
            let timed = db.device().stats().since(&dev0);
            extra.insert(
                "ram_block_bytes_before_close".into(),
                db.buffered_bytes().into(),
            );
            extra.insert(
                "data_zone_bytes_in_use".into(),
                db.device_bytes_in_use().into(),
            );
            let dev = db.close()?.stats().since(&dev0);
            let proc_io = ProcIo::delta(io0);
            extra.insert("device_io_timed_loop".into(), io_json(&timed));
            extra.insert("device_io_with_close".into(), io_json(&dev));
            extra.insert("file_allocated_bytes".into(), allocated(&path).into());
            Ok(Measured {
                lat,
                seconds,
                app_bytes: Some(rows * (KEY_BYTES + vb as u64)),
                device: Some((dev.write_bytes, "Accounted write_bytes")),
                proc_io,
                extra,
            })
        }
        Workload::ReadRandom => {
            let load = Instant::now();
            db.begin()?;
            timed_inserts(rows, vb, cfg.seed, |k, v| ember_insert(&mut db, k, v))?;
            db.commit()?;
            extra.insert("load_seconds".into(), load.elapsed().as_secs_f64().into());
            extra.insert(
                "ram_block_bytes_after_load".into(),
                db.buffered_bytes().into(),
            );
            if cfg.reopen {
                let dev = db.close()?;
                let open = Instant::now();
                db = Database::open(dev, ember_options())?;
                extra.insert("open_seconds".into(), open.elapsed().as_secs_f64().into());
            }
            let dev0 = db.device().stats();
            let io0 = ProcIo::read();
            let (lat, seconds) = timed_gets(rows, vb, cfg.seed, |k| {
                Ok(match db.get("kv", &[Value::Integer(k)])?.as_deref() {
                    Some([_, Value::Blob(v)]) => Some(v.len()),
                    Some(_) => Some(usize::MAX),
                    None => None,
                })
            })?;
            let proc_io = ProcIo::delta(io0);
            let dev = db.device().stats().since(&dev0);
            let (hits, misses) = db.query_cache_stats();
            extra.insert("device_io_lookups".into(), io_json(&dev));
            extra.insert("query_cache_hits".into(), hits.into());
            extra.insert("query_cache_misses".into(), misses.into());
            db.close()?;
            Ok(Measured {
                lat,
                seconds,
                app_bytes: None,
                device: None,
                proc_io,
                extra,
            })
        }
    }
}

// ----- SQLite -------------------------------------------------------------------------------

fn sqlite_create(path: &Path, journal: Journal) -> Result<Connection> {
    let conn = Connection::open(path)?;
    let want = match journal {
        Journal::Wal => "wal",
        Journal::Delete => "delete",
    };
    let got: String = conn.query_row(&format!("PRAGMA journal_mode={want}"), [], |r| r.get(0))?;
    if !got.eq_ignore_ascii_case(want) {
        return Err(format!("SQLite refused journal_mode={want} (got {got})").into());
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    let sync: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
    if sync != 2 {
        return Err(format!("SQLite synchronous is {sync}, not FULL (2)").into());
    }
    conn.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB)", [])?;
    Ok(conn)
}

const SQL_INSERT: &str = "INSERT INTO kv(k, v) VALUES (?1, ?2)";

fn sqlite_close(conn: Connection) -> Result<()> {
    conn.close().map_err(|(_, e)| e)?;
    Ok(())
}

fn sqlite_run(cfg: &Config, scratch: &Scratch, w: Workload, journal: Journal) -> Result<Measured> {
    let path = scratch.path("sqlite.db");
    let mut conn = sqlite_create(&path, journal)?;
    let (rows, vb) = (w.rows(cfg.n), w.value_bytes());
    let mut extra = Map::new();
    match w {
        Workload::InsertSync | Workload::Insert4kSync => {
            let io0 = ProcIo::read();
            let (lat, seconds) = {
                let mut st = conn.prepare(SQL_INSERT)?;
                timed_inserts(rows, vb, cfg.seed, |k, v| {
                    st.execute(params![k, v])?;
                    Ok(())
                })?
            };
            sqlite_close(conn)?;
            let proc_io = ProcIo::delta(io0);
            extra.insert("file_allocated_bytes".into(), allocated(&path).into());
            Ok(Measured {
                lat,
                seconds,
                app_bytes: Some(rows * (KEY_BYTES + vb as u64)),
                device: proc_io.map(|p| (p.write_bytes, "/proc/self/io write_bytes")),
                proc_io,
                extra,
            })
        }
        Workload::ReadRandom => {
            let load = Instant::now();
            {
                let tx = conn.transaction()?;
                {
                    let mut st = tx.prepare(SQL_INSERT)?;
                    timed_inserts(rows, vb, cfg.seed, |k, v| {
                        st.execute(params![k, v])?;
                        Ok(())
                    })?;
                }
                tx.commit()?;
            }
            extra.insert("load_seconds".into(), load.elapsed().as_secs_f64().into());
            if cfg.reopen {
                sqlite_close(conn)?;
                let open = Instant::now();
                conn = Connection::open(&path)?;
                conn.pragma_update(None, "synchronous", "FULL")?;
                extra.insert("open_seconds".into(), open.elapsed().as_secs_f64().into());
            }
            let io0 = ProcIo::read();
            let (lat, seconds) = {
                let mut st = conn.prepare("SELECT v FROM kv WHERE k = ?1")?;
                timed_gets(rows, vb, cfg.seed, |k| {
                    match st.query_row([k], |r| r.get::<_, Vec<u8>>(0)) {
                        Ok(v) => Ok(Some(v.len())),
                        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                        Err(e) => Err(e.into()),
                    }
                })?
            };
            let proc_io = ProcIo::delta(io0);
            sqlite_close(conn)?;
            Ok(Measured {
                lat,
                seconds,
                app_bytes: None,
                device: None,
                proc_io,
                extra,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The whole suite at a tiny size, end to end: every (workload, system) row is in the
    /// JSON with positive ops/s. Times nothing.
    #[test]
    fn tiny_suite_writes_every_row() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let cfg = Config {
            n: 50,
            dir: tmp.path().to_path_buf(),
            repeat: 1,
            image_bytes: 64 << 20,
            seed: 1,
            only: Vec::new(),
            reopen: false,
            prefill: false,
        };
        let out = tmp.path().join("out/bench-table.json");
        let text = run_suite(&cfg, &out)?;
        assert!(text.contains("| insert-sync | emberdb-hash |"), "{text}");
        assert!(text.contains("emberdb-hash / sqlite-wal"), "{text}");

        let doc: Json = serde_json::from_str(&fs::read_to_string(&out)?)?;
        assert_eq!(doc["suite"], "table");
        assert!(doc["machine"]["cores"].as_u64().is_some_and(|c| c > 0));
        let results = doc["results"].as_array().ok_or("no results array")?;
        let mut seen = BTreeSet::new();
        for r in results {
            let key = (
                r["workload"].as_str().ok_or("workload")?.to_string(),
                r["system"].as_str().ok_or("system")?.to_string(),
            );
            assert!(r["ops_per_sec"].as_f64().is_some_and(|x| x > 0.0), "{r}");
            assert_eq!(r["params"]["durability"], "sync");
            if key.0 != "read-random" {
                assert!(r["app_bytes"].as_u64().is_some_and(|x| x > 0), "{r}");
                assert!(r["device_bytes"].as_u64().is_some_and(|x| x > 0), "{r}");
            }
            assert!(seen.insert(key), "duplicate row {r}");
        }
        let mut want = BTreeSet::new();
        for w in Workload::ALL {
            for s in w.systems() {
                want.insert((w.name().to_string(), s.name().to_string()));
            }
        }
        assert_eq!(seen, want);
        // insert-sync: 2 EmberDB + 2 SQLite + floor; insert-4k-sync: 1 + 2 + floor; reads: 4.
        assert_eq!(want.len(), 5 + 4 + 4);
        // The scratch directory is gone; only the JSON is left.
        let left: Vec<_> = fs::read_dir(tmp.path())?.collect();
        assert_eq!(left.len(), 1, "{left:?}");
        Ok(())
    }
}
