//! The `embeddb` suite: the EmbedDB paper's evaluation (paper 003 §4) on the `timeseries`
//! engine, against SQLite set up as in the paper.
//!
//! **Data.** The data sets of `shared/datasets` (or any file in their format given with
//! `--dataset`): 512-byte pages of 16-byte records, `u32` key and three `i32` values. The
//! `*_randomized.bin` twin of a file, when present, gives the key lookup order.
//!
//! **Workloads** (per data set, every one run on every system):
//!
//! | workload | what | ops |
//! |---|---|---|
//! | `insert` | every record in key order, then flush / commit | records |
//! | `lookup` | one record by key, keys in the randomized file's order | lookups |
//! | `key-range` | every record of a key range holding 5% of the data | queries |
//! | `data-range` | every record whose value column lies in a range holding ≈0.01% | queries |
//! | `sql-q1`..`sql-q5` | the paper's Table 3 queries (query 4 as a key join) | queries |
//!
//! The *value column* of a data set is the column with the most distinct values (the one a
//! 0.01% range can select). The Table 3 queries run on the data set they name (`uwa`:
//! 1, 2, 4; `ethylene`: 3; `watch`: 5), or on the first data set when that one is not given,
//! with the paper's columns: temperature, concentration and X are the first value, wind the
//! third. Query 4 joins two weather stations; the paper's second station (`sea`) is not in
//! `shared/datasets`, so unless `--sea PATH` gives it, the second station is the same data
//! set with its keys moved by the query's offset (every row then joins; the join still reads
//! both series in full).
//!
//! **Systems.** `ember-api`: the engine through its Rust API on a file-backed block device
//! (`ember_device::FileBlock` under `Accounted`, whose operation counts give the page reads),
//! 512-byte pages, the spline key index, a bitmap data index on the value column (buckets at
//! the quantiles of a 1-in-64 sample), page buffers and spline points in one arena. Its syncs
//! are counted and dropped, as SQLite's are with `synchronous=OFF`. `sqlite`: rusqlite
//! (bundled), `key INTEGER PRIMARY KEY`, an index on every column a workload filters on,
//! inserts in one transaction, WAL, `synchronous=OFF` — the paper's setup. Every system is a
//! [`Bench`]: adding one (`ember-sql`) is one function per workload.
//!
//! **Checks.** Every lookup, key range and data range is compared with the records in
//! memory; every Table 3 answer must equal SQLite's. A mismatch fails the run.
//!
//! **Output.** `DIR/embeddb.json` (the harness's format), `DIR/embeddb.md`,
//! `DIR/embeddb-vs-sqlite.svg`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ember_device::file::FileBlock;
use ember_device::{Accounted, BlockDevice, IoStats, SplitMix64};
use ember_timeseries::{
    Agg, AggState, Area, BlockStore, BoundaryBuckets, Cmp, Col, ColType, Config, DataOrder,
    GroupBy, KeyJoin, OnFull, Project, Query, Select, Series, Source, Value, cmp,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Map, Value as Json, json};

use crate::chart;
use crate::measure::{Latencies, ProcIo, Result, Scratch};
use crate::report::{self, RunResult};

/// Arguments of `ember-bench embeddb`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A smoke run: the first 20,000 records of each data set, fewer queries.
    #[arg(long)]
    pub quick: bool,
    /// Where to write `embeddb.json`, `embeddb.md` and `embeddb-vs-sqlite.svg`.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// Run only these workloads (repeatable): insert, lookup, key-range, data-range,
    /// sql-q1 … sql-q5.
    #[arg(long = "only", value_name = "WORKLOAD")]
    pub only: Vec<String>,
    /// A data set file (repeatable; default: every `*.bin` of `shared/datasets` that is not
    /// a `*_randomized.bin`).
    #[arg(long = "dataset", value_name = "PATH")]
    pub datasets: Vec<PathBuf>,
    /// The second weather station of Table 3's query 4 (the paper's `sea` data set).
    #[arg(long, value_name = "PATH")]
    pub sea: Option<PathBuf>,
    /// Use only the first N records of each data set.
    #[arg(long)]
    pub records: Option<usize>,
    /// Parent directory of the databases (a fresh subdirectory is made there and removed).
    #[arg(long, default_value = "target/bench-tmp")]
    pub dir: PathBuf,
    /// Page size of the engine's pages (the paper's is 512 bytes; a larger page reads more
    /// records per device call and needs more RAM for its four buffers).
    #[arg(long, default_value_t = PAGE)]
    pub page_bytes: usize,
    /// Pages of ember-api's data read buffer (1: no read-ahead): an iterator walking pages in
    /// order reads this many consecutive pages in one device call. Each page beyond the first
    /// is one more page buffer in the engine's arena (counted in its RAM).
    #[arg(long, default_value_t = READ_PAGES, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub read_pages: u32,
    /// Full data pages ember-api writes in one device call (1: each page when it fills; more
    /// take that many page buffers of RAM, and a power cut loses up to that many unwritten
    /// pages). At most the erase unit (8 pages).
    #[arg(long, default_value_t = WRITE_PAGES, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub write_pages: u32,
    /// Runs of every (data set, system), interleaved; the run with the median ops/s of each
    /// result is reported and every run's ops/s kept (default: 3, 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub repeat: Option<u64>,
    /// Print one line per result on stderr.
    #[arg(long, short)]
    pub verbose: bool,
}

/// The workloads, in report order.
pub const WORKLOADS: [&str; 9] = [
    "insert",
    "lookup",
    "key-range",
    "data-range",
    "sql-q1",
    "sql-q2",
    "sql-q3",
    "sql-q4",
    "sql-q5",
];

/// Bytes of a page of the data sets' files, and of the engine's pages unless `--page-bytes`
/// says otherwise.
const PAGE: usize = 512;
/// Pages of ember-api's data read buffer unless `--read-pages` says otherwise.
const READ_PAGES: u32 = 8;
/// Full pages ember-api writes per device call unless `--write-pages` says otherwise.
const WRITE_PAGES: u32 = 8;
/// Pages per erase unit (the unit the engine's areas are sized in).
const UNIT: u32 = 8;
/// Buckets of the bitmap data index (8 bytes per page).
const BUCKETS: usize = 64;
/// Bytes of spline points the arena holds beyond the page buffers.
const SPLINE_BYTES: usize = 8192;
/// Records inserted per timed batch (the insert latencies are per record, amortized).
const BATCH: usize = 64;

/// Table 3's constants.
const DAY: u64 = 86_400;
const WIND_LIMIT: i64 = 150;
const STATION_SHIFT: u64 = 473_385_600;
const Q4_FROM: u64 = 1_420_099_200;
const Q4_TO: u64 = 1_451_635_200;
const X_LIMIT: i64 = 500_000_000;
const Q5_BUCKET: u64 = 706_000;

/// One record: the key and the three values.
pub type Rec = (u64, [i32; 3]);

fn to_bytes(v: &[i32; 3]) -> [u8; 12] {
    let mut b = [0u8; 12];
    for (i, x) in v.iter().enumerate() {
        b[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes());
    }
    b
}

fn from_bytes(b: &[u8]) -> [i32; 3] {
    let mut v = [0i32; 3];
    for (i, x) in v.iter_mut().enumerate() {
        let mut w = [0u8; 4];
        if let Some(s) = b.get(4 * i..4 * i + 4) {
            w.copy_from_slice(s);
        }
        *x = i32::from_le_bytes(w);
    }
    v
}

// ----- data sets ------------------------------------------------------------------------

/// A data set: its records in key order and the lookup order.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The file's stem.
    pub name: String,
    /// The records, keys strictly ascending.
    pub records: Vec<Rec>,
    /// Keys in lookup order.
    pub lookup: Vec<u64>,
    /// Where the lookup order came from.
    pub lookup_source: String,
}

/// The data sets directory: `shared/datasets` beside the repository (as the engine's tests
/// find it).
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
}

/// Every data set file of `dir`: each `*.bin` that is not a `*_randomized.bin`, sorted.
pub fn dataset_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| {
        format!(
            "no data sets: cannot read {} ({e}); give files with --dataset",
            dir.display()
        )
    })?;
    let mut files = Vec::new();
    for e in entries {
        let p = e?.path();
        let stem = p.file_stem().map(|s| s.to_string_lossy().to_string());
        if p.extension().is_some_and(|x| x == "bin")
            && stem.is_some_and(|s| !s.ends_with("_randomized"))
        {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!("no data sets (*.bin) in {}", dir.display()).into());
    }
    Ok(files)
}

/// Reads a file in the data sets' format: 512-byte pages, a `u16` record count at offset 4,
/// then up to 31 records of 16 bytes from offset 16.
pub fn read_records(path: &Path) -> Result<Vec<Rec>> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (p, page) in bytes.chunks(PAGE).enumerate() {
        if page.len() < 16 {
            return Err(format!("{}: page {p} is cut short", path.display()).into());
        }
        let count = usize::from(u16::from_le_bytes([page[4], page[5]]));
        if 16 + 16 * count > page.len() {
            return Err(format!(
                "{}: page {p} claims {count} records, more than it holds",
                path.display()
            )
            .into());
        }
        for r in page[16..16 + 16 * count].chunks_exact(16) {
            let w = |i: usize| [r[i], r[i + 1], r[i + 2], r[i + 3]];
            out.push((
                u64::from(u32::from_le_bytes(w(0))),
                [
                    i32::from_le_bytes(w(4)),
                    i32::from_le_bytes(w(8)),
                    i32::from_le_bytes(w(12)),
                ],
            ));
        }
    }
    Ok(out)
}

/// Loads a data set: its records (the first `limit`, if given; keys must ascend strictly)
/// and its lookup order (the randomized twin's keys that are in the records, or a fixed
/// shuffle without a twin).
pub fn load_dataset(path: &Path, limit: Option<usize>) -> Result<Dataset> {
    let name = path
        .file_stem()
        .map_or_else(|| "data".into(), |s| s.to_string_lossy().to_string());
    let mut records = read_records(path)?;
    if let Some(n) = limit {
        records.truncate(n);
    }
    if records.is_empty() {
        return Err(format!("{}: no records", path.display()).into());
    }
    if let Some(i) = records.windows(2).position(|w| w[0].0 >= w[1].0) {
        return Err(format!(
            "{}: keys do not ascend strictly at record {} ({} then {})",
            path.display(),
            i + 1,
            records[i].0,
            records[i + 1].0
        )
        .into());
    }
    let twin = path.with_file_name(format!("{name}_randomized.bin"));
    let keys: HashSet<u64> = records.iter().map(|r| r.0).collect();
    let (lookup, lookup_source) = if twin.is_file() {
        let mut seen = HashSet::new();
        let order: Vec<u64> = read_records(&twin)?
            .into_iter()
            .map(|r| r.0)
            .filter(|k| keys.contains(k) && seen.insert(*k))
            .collect();
        let src = twin
            .file_name()
            .map_or_else(String::new, |s| s.to_string_lossy().to_string());
        (order, src)
    } else {
        (Vec::new(), String::new())
    };
    let (lookup, lookup_source) = if lookup.is_empty() {
        let mut k: Vec<u64> = records.iter().map(|r| r.0).collect();
        let mut rng = SplitMix64::new(0x5EED);
        for i in (1..k.len()).rev() {
            k.swap(i, rng.below(i as u64 + 1) as usize);
        }
        (k, "a fixed shuffle of the keys".to_string())
    } else {
        (lookup, lookup_source)
    };
    Ok(Dataset {
        name,
        records,
        lookup,
        lookup_source,
    })
}

/// The column (0..3) with the most distinct values.
fn value_column(recs: &[Rec]) -> usize {
    (0..3)
        .max_by_key(|&c| {
            let mut v: Vec<i32> = recs.iter().map(|r| r.1[c]).collect();
            v.sort_unstable();
            v.dedup();
            (v.len(), usize::MAX - c)
        })
        .unwrap_or(0)
}

/// `n − 1` bucket boundaries at the quantiles of a 1-in-64 sample of column `c`.
fn bucket_bounds(recs: &[Rec], c: usize, n: usize) -> Vec<i64> {
    let mut v: Vec<i64> = recs.iter().step_by(64).map(|r| i64::from(r.1[c])).collect();
    v.sort_unstable();
    let mut b: Vec<i64> = (1..n)
        .filter_map(|i| v.get(i * v.len() / n).copied())
        .collect();
    b.dedup();
    b
}

// ----- the Table 3 queries ----------------------------------------------------------------

/// A query of the paper's Table 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Q {
    /// Min, max, avg daily temperature.
    DailyTemp,
    /// Avg temperature on days with wind above 15 mph.
    WindyDays,
    /// Records with ethylene concentration above 0.
    Ethylene,
    /// Temperatures of two stations years apart (a key join).
    Stations,
    /// Records with X motion above 500,000,000, by key bucket.
    Motion,
}

impl Q {
    /// All five, in order.
    pub const ALL: [Q; 5] = [
        Q::DailyTemp,
        Q::WindyDays,
        Q::Ethylene,
        Q::Stations,
        Q::Motion,
    ];

    /// The workload name.
    pub fn workload(self) -> &'static str {
        match self {
            Q::DailyTemp => "sql-q1",
            Q::WindyDays => "sql-q2",
            Q::Ethylene => "sql-q3",
            Q::Stations => "sql-q4",
            Q::Motion => "sql-q5",
        }
    }

    /// The data set the paper runs it on.
    pub fn dataset(self) -> &'static str {
        match self {
            Q::DailyTemp | Q::WindyDays | Q::Stations => "uwa",
            Q::Ethylene => "ethylene",
            Q::Motion => "watch",
        }
    }

    /// The column it filters on by value, if any.
    pub fn filter_column(self) -> Option<usize> {
        match self {
            Q::Ethylene | Q::Motion => Some(0),
            _ => None,
        }
    }

    /// The SQL (on table `t(key, a, b, c)`, and `sea` for query 4).
    pub fn sql(self) -> String {
        match self {
            Q::DailyTemp => {
                format!("SELECT key / {DAY}, min(a), max(a), avg(a) FROM t GROUP BY key / {DAY}")
            }
            Q::WindyDays => format!(
                "SELECT key / {DAY}, avg(a), max(c) FROM t GROUP BY key / {DAY} \
                 HAVING max(c) > {WIND_LIMIT}"
            ),
            Q::Ethylene => "SELECT count(*) FROM t WHERE a > 0".into(),
            Q::Stations => format!(
                "SELECT u.key, s.a AS temp_sea, u.a AS temp_uwa FROM sea s \
                 JOIN (SELECT key + {STATION_SHIFT} AS key, a FROM t) u ON s.key = u.key \
                 WHERE s.key >= {Q4_FROM} AND s.key < {Q4_TO}"
            ),
            Q::Motion => format!(
                "SELECT key / {Q5_BUCKET} AS bucket, count(*) FROM t WHERE a > {X_LIMIT} \
                 GROUP BY key / {Q5_BUCKET}"
            ),
        }
    }
}

/// A query's answer: rows of numbers (sorted before comparing).
pub type Answer = Vec<Vec<f64>>;

fn same_answer(a: &Answer, b: &Answer) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(r, s)| r.len() == s.len() && r.iter().zip(s).all(|(x, y)| close(*x, *y)))
}

fn sort_answer(a: &mut Answer) {
    a.sort_by(|r, s| {
        r.iter()
            .zip(s)
            .map(|(x, y)| x.total_cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or(r.len().cmp(&s.len()))
    });
}

// ----- the systems ----------------------------------------------------------------------

/// A system under test: one function per workload (the driver times and checks them).
pub trait Bench {
    /// The `system` field of its results.
    fn name(&self) -> &'static str;
    /// The `engine` field.
    fn engine(&self) -> &'static str;
    /// How it is set up (goes into every result's params).
    fn params(&self) -> Map<String, Json>;
    /// Inserts records (keys ascending, continuing the previous call's).
    fn insert(&mut self, recs: &[Rec]) -> Result<()>;
    /// Makes the inserted records durable as the system's setup allows (flush, commit).
    fn finish_insert(&mut self) -> Result<()>;
    /// The record with key `key`.
    fn lookup(&mut self, key: u64) -> Result<Option<[i32; 3]>>;
    /// Calls `f` on every record with a key in `[lo, hi]`.
    fn key_range(&mut self, lo: u64, hi: u64, f: &mut dyn FnMut(u64, [i32; 3])) -> Result<()>;
    /// Calls `f` on every record whose column `col` lies in `[lo, hi]`.
    fn data_range(
        &mut self,
        col: usize,
        lo: i32,
        hi: i32,
        f: &mut dyn FnMut(u64, [i32; 3]),
    ) -> Result<()>;
    /// Loads query 4's second station (untimed).
    fn load_second_station(&mut self, recs: &[Rec]) -> Result<()>;
    /// Answers a Table 3 query.
    fn query(&mut self, q: Q) -> Result<Answer>;
    /// The device's operation counts, where the system has them.
    fn io(&mut self) -> Option<IoStats>;
    /// Figures worth reporting after a workload (RAM, index sizes).
    fn state(&self) -> Map<String, Json>;
}

/// A block device that drops syncs (they are counted by the `Accounted` around it): the
/// engine's counterpart of SQLite's `synchronous=OFF`.
#[derive(Debug)]
pub struct SyncOff<D>(pub D);

impl<D: BlockDevice> BlockDevice for SyncOff<D> {
    fn sector_size(&self) -> u32 {
        self.0.sector_size()
    }
    fn capacity(&self) -> u64 {
        self.0.capacity()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> ember_device::Result<()> {
        self.0.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> ember_device::Result<()> {
        self.0.write(offset, data)
    }
    fn sync(&mut self) -> ember_device::Result<()> {
        Ok(())
    }
    fn resize(&mut self, new_len: u64) -> ember_device::Result<()> {
        self.0.resize(new_len)
    }
}

type Store = BlockStore<Accounted<SyncOff<FileBlock>>>;

fn ts_err(e: ember_timeseries::Error) -> crate::measure::Error {
    format!("timeseries: {e:?}").into()
}

/// Data pages of `page` bytes for `n` records (a page header is well under 64 bytes), with
/// two spare units.
fn data_pages(n: usize, page: usize) -> u32 {
    let per = (page.saturating_sub(64) / 16).max(1);
    let pages = u32::try_from(n.div_ceil(per)).unwrap_or(u32::MAX / 2);
    (pages + 2 * UNIT).div_ceil(UNIT) * UNIT
}

/// Index pages of `page` bytes covering `data` data pages with `bm`-byte bitmaps, with two
/// spare units.
fn index_pages(data: u32, bm: usize, page: usize) -> u32 {
    let per = (page.saturating_sub(64) / bm.max(1)).max(1) as u32;
    (data.div_ceil(per) + 2 * UNIT).div_ceil(UNIT) * UNIT
}

fn open_store(path: &Path, pages: u32, page: usize) -> Result<Store> {
    // Never synced, as SQLite with synchronous=OFF: no write-behind either.
    let f = FileBlock::create(path, u64::from(pages) * page as u64)
        .map_err(|e| format!("{}: {e:?}", path.display()))?
        .with_write_behind(0);
    Ok(BlockStore(Accounted::new(SyncOff(f))))
}

/// Staging pages of `write_pages` full pages per write (`Config::staging_pages`).
fn staging(write_pages: usize) -> usize {
    if write_pages > 1 { write_pages } else { 0 }
}

/// The time-series engine through its Rust API.
pub struct EmberApi<'a> {
    ts: Series<'a, Store>,
    sea: Option<Series<'a, Store>>,
    sea_arena: Option<&'a mut [u8]>,
    sea_path: PathBuf,
    value_col: usize,
    arena_bytes: usize,
    page: usize,
    read_pages: usize,
    write_pages: usize,
}

impl<'a> EmberApi<'a> {
    /// A series of `page`-byte pages for `records` records in `dir`, its bitmap on
    /// `value_col` with `buckets`, a data read buffer of `read_pages` pages, `write_pages`
    /// full pages written per device call; `arena` holds its buffers and spline points
    /// ([`arena_len`](Self::arena_len)), `sea_arena` the second station's.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        dir: &Path,
        page: usize,
        (read_pages, write_pages): (usize, usize),
        records: usize,
        value_col: usize,
        buckets: &'a BoundaryBuckets<'a>,
        arena: &'a mut [u8],
        sea_arena: &'a mut [u8],
    ) -> Result<Self> {
        let dp = data_pages(records, page);
        let ip = index_pages(dp, BUCKETS.div_ceil(8), page);
        let cfg = Config::new(4, 12, page, UNIT, Area::new(0, dp))
            .index(Area::new(dp, ip), buckets)
            .data_order(DataOrder::Col(Col::i32(4 * value_col)))
            .on_full(OnFull::Refuse)
            .sync_every_page(false);
        // Buffers beyond those needed extend the data read buffer (read-ahead).
        let cfg = cfg
            .buffers(cfg.buffers_needed() + read_pages.max(1) - 1)
            .write_pages(write_pages.max(1));
        let store = open_store(&dir.join("ember.ts"), dp + ip, page)?;
        let arena_bytes = arena.len();
        let ts = Series::format(store, cfg, arena).map_err(ts_err)?;
        Ok(EmberApi {
            ts,
            sea: None,
            sea_arena: Some(sea_arena),
            sea_path: dir.join("ember-sea.ts"),
            value_col,
            arena_bytes,
            page,
            read_pages: read_pages.max(1),
            write_pages: write_pages.max(1),
        })
    }

    /// The arena an [`EmberApi`] of `page`-byte pages needs: four page buffers (the read
    /// buffer `read_pages` pages), `write_pages` staging pages when writes are batched, and
    /// the spline points.
    pub fn arena_len(page: usize, (read_pages, write_pages): (usize, usize)) -> usize {
        (3 + read_pages.max(1) + staging(write_pages)) * page + SPLINE_BYTES
    }

    /// The arena of the second station: two page buffers (the read buffer `read_pages`
    /// pages), the staging pages and the spline points.
    pub fn sea_arena_len(page: usize, (read_pages, write_pages): (usize, usize)) -> usize {
        (1 + read_pages.max(1) + staging(write_pages)) * page + SPLINE_BYTES
    }

    /// Counts rows of column 0 above `limit`, grouped by `group` (`None`: one count).
    fn count_above(&mut self, limit: i64, group: Option<u64>) -> Result<Answer> {
        let col = Col::i32(0);
        let min = to_bytes(&[
            i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX),
            0,
            0,
        ]);
        // On the value column the bitmap index picks the pages; elsewhere every page is read
        // and a selection filters.
        let use_index = self.value_col == 0 && limit < i64::from(i32::MAX);
        let q = if use_index {
            Query::data(Some(&min), None)
        } else {
            Query::all()
        };
        let it = self.ts.iter(q).map_err(ts_err)?;
        let sel = Select::new(it, cmp(col, Cmp::Gt, Value::Int(limit)));
        let aggs = [Agg::count()];
        let mut st = [AggState::default()];
        let mut out = [0u8; 8];
        let g = group.unwrap_or(0).max(1);
        let whole = group.is_none();
        let mut gb = GroupBy::new(
            sel,
            |r| if whole { 0 } else { (r.key / g) as i64 },
            &aggs,
            &mut st,
            &mut out,
        );
        let mut ans = Vec::new();
        while gb.advance().map_err(ts_err)? {
            let r = gb.row();
            let n = r.get(gb.col(0)).map_or(0.0, Value::as_f64);
            ans.push(if whole {
                vec![n]
            } else {
                vec![r.key as f64, n]
            });
        }
        if whole && ans.is_empty() {
            ans.push(vec![0.0]);
        }
        Ok(ans)
    }
}

impl Bench for EmberApi<'_> {
    fn name(&self) -> &'static str {
        "ember-api"
    }
    fn engine(&self) -> &'static str {
        "timeseries"
    }
    fn params(&self) -> Map<String, Json> {
        let cfg = self.ts.config();
        let p = json!({
            "api": "ember_timeseries::Series (iterators and relational operators)",
            "device": "file-backed block device (ember_device::FileBlock) under Accounted; \
                       syncs counted and dropped (as synchronous=OFF)",
            "page_bytes": self.page,
            "records_per_page": self.ts.records_per_page(),
            "erase_unit_pages": UNIT,
            "spline_error_records": cfg.spline_error,
            "bitmap_bytes": BUCKETS.div_ceil(8),
            "bitmap_column": self.value_col,
            "arena_bytes": self.arena_bytes,
            "read_buffer_pages": self.read_pages,
            "write_pages_per_call": self.write_pages,
        });
        match p {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }
    fn insert(&mut self, recs: &[Rec]) -> Result<()> {
        for (k, v) in recs {
            self.ts.put(*k, &to_bytes(v)).map_err(ts_err)?;
        }
        Ok(())
    }
    fn finish_insert(&mut self) -> Result<()> {
        self.ts.flush().map_err(ts_err)
    }
    fn lookup(&mut self, key: u64) -> Result<Option<[i32; 3]>> {
        let mut out = [0u8; 12];
        Ok(self
            .ts
            .get(key, &mut out)
            .map_err(ts_err)?
            .then(|| from_bytes(&out)))
    }
    fn key_range(&mut self, lo: u64, hi: u64, f: &mut dyn FnMut(u64, [i32; 3])) -> Result<()> {
        let mut it = self.ts.iter(Query::keys(lo, hi)).map_err(ts_err)?;
        while it.advance().map_err(ts_err)? {
            let r = it.row();
            f(r.key, from_bytes(r.data));
        }
        Ok(())
    }
    fn data_range(
        &mut self,
        col: usize,
        lo: i32,
        hi: i32,
        f: &mut dyn FnMut(u64, [i32; 3]),
    ) -> Result<()> {
        if col != self.value_col {
            return Err(format!(
                "ember-api: data ranges run on the indexed column {}, not {col}",
                self.value_col
            )
            .into());
        }
        let (mut a, mut b) = ([0i32; 3], [0i32; 3]);
        a[col] = lo;
        b[col] = hi;
        let (a, b) = (to_bytes(&a), to_bytes(&b));
        let mut it = self
            .ts
            .iter(Query::data(Some(&a), Some(&b)))
            .map_err(ts_err)?;
        while it.advance().map_err(ts_err)? {
            let r = it.row();
            f(r.key, from_bytes(r.data));
        }
        Ok(())
    }
    fn load_second_station(&mut self, recs: &[Rec]) -> Result<()> {
        let arena = self
            .sea_arena
            .take()
            .ok_or("ember-api: the second station is loaded already")?;
        let dp = data_pages(recs.len(), self.page);
        let cfg = Config::new(4, 12, self.page, UNIT, Area::new(0, dp))
            .on_full(OnFull::Refuse)
            .sync_every_page(false);
        let cfg = cfg
            .buffers(cfg.buffers_needed() + self.read_pages - 1)
            .write_pages(self.write_pages);
        let store = open_store(&self.sea_path, dp, self.page)?;
        let mut sea = Series::format(store, cfg, arena).map_err(ts_err)?;
        for (k, v) in recs {
            sea.put(*k, &to_bytes(v)).map_err(ts_err)?;
        }
        sea.flush().map_err(ts_err)?;
        self.sea = Some(sea);
        Ok(())
    }
    fn query(&mut self, q: Q) -> Result<Answer> {
        let temp = Col::i32(0);
        let mut ans = Vec::new();
        match q {
            Q::DailyTemp => {
                let it = self.ts.iter(Query::all()).map_err(ts_err)?;
                let aggs = [Agg::min(temp), Agg::max(temp), Agg::avg(temp)];
                let mut st = [AggState::default(); 3];
                let mut out = [0u8; 24];
                let mut g = GroupBy::new(it, |r| (r.key / DAY) as i64, &aggs, &mut st, &mut out);
                while g.advance().map_err(ts_err)? {
                    let r = g.row();
                    let mut row = vec![r.key as f64];
                    for i in 0..3 {
                        row.push(r.get(g.col(i)).map_or(f64::NAN, Value::as_f64));
                    }
                    ans.push(row);
                }
            }
            Q::WindyDays => {
                let it = self.ts.iter(Query::all()).map_err(ts_err)?;
                let aggs = [Agg::avg(temp), Agg::max(Col::i32(8))];
                let mut st = [AggState::default(); 2];
                let mut out = [0u8; 16];
                let g = GroupBy::new(it, |r| (r.key / DAY) as i64, &aggs, &mut st, &mut out);
                // max(c) is an integer column of the group-by's output: its second 8 bytes.
                let max_wind = Col::at(8, ColType::I64);
                let mut having = Select::new(g, cmp(max_wind, Cmp::Gt, Value::Int(WIND_LIMIT)));
                while having.advance().map_err(ts_err)? {
                    let r = having.row();
                    ans.push(vec![
                        r.key as f64,
                        r.get(Col::at(0, ColType::F64))
                            .map_or(f64::NAN, Value::as_f64),
                        r.get(max_wind).map_or(f64::NAN, Value::as_f64),
                    ]);
                }
            }
            Q::Ethylene => ans = self.count_above(0, None)?,
            Q::Motion => ans = self.count_above(X_LIMIT, Some(Q5_BUCKET))?,
            Q::Stations => {
                let sea = self
                    .sea
                    .as_mut()
                    .ok_or("ember-api: query 4 needs the second station loaded")?;
                // s.key in [from, to): the second station's key range; the first station's
                // keys moved by the offset, so its range is pushed down moved back.
                let s = sea.iter(Query::keys(Q4_FROM, Q4_TO - 1)).map_err(ts_err)?;
                let u = self
                    .ts
                    .iter(Query::keys(
                        Q4_FROM - STATION_SHIFT,
                        Q4_TO - 1 - STATION_SHIFT,
                    ))
                    .map_err(ts_err)?;
                let mut ubuf = [0u8; 4];
                let u = Project::new(u, &mut ubuf, |r, out| {
                    out.copy_from_slice(r.data.get(0..4).unwrap_or(&[0; 4]));
                    (r.key + STATION_SHIFT, 4)
                });
                let mut jbuf = [0u8; 16];
                let mut j = KeyJoin::new(s, u, &mut jbuf);
                while j.advance().map_err(ts_err)? {
                    let r = j.row();
                    let v = |off| r.get(Col::i32(off)).map_or(f64::NAN, Value::as_f64);
                    ans.push(vec![r.key as f64, v(0), v(12)]);
                }
            }
        }
        Ok(ans)
    }
    fn io(&mut self) -> Option<IoStats> {
        let mut s = self.ts.storage().device().stats();
        if let Some(sea) = self.sea.as_mut() {
            let t = sea.storage().device().stats();
            s.reads += t.reads;
            s.read_bytes += t.read_bytes;
            s.writes += t.writes;
            s.write_bytes += t.write_bytes;
            s.syncs += t.syncs;
        }
        Some(s)
    }
    fn state(&self) -> Map<String, Json> {
        let mut m = Map::new();
        // The engine's RAM: its state without the device handle (on a board a peripheral;
        // here a file plus the accounting wrapper), the page buffers and the spline points
        // held.
        let handle = std::mem::size_of::<Store>();
        let ram = self.ts.ram_used() - handle;
        let buffers = self.ts.config().buffer_bytes();
        let spline = self.ts.spline_points() * self.ts.config().spline_point_bytes();
        m.insert("ram_bytes".into(), ram.into());
        m.insert(
            "ram_state_bytes".into(),
            ram.saturating_sub(buffers + spline).into(),
        );
        m.insert("ram_buffer_bytes".into(), buffers.into());
        m.insert("ram_spline_bytes".into(), spline.into());
        m.insert("device_handle_bytes".into(), handle.into());
        m.insert("spline_points".into(), self.ts.spline_points().into());
        m.insert("spline_dropped".into(), self.ts.spline_dropped().into());
        m.insert("data_pages".into(), self.ts.data_pages().into());
        m
    }
}

/// SQLite through rusqlite, as the paper set it up.
pub struct Sqlite {
    conn: Connection,
    indexed: Vec<usize>,
    in_tx: bool,
}

const COLS: [&str; 3] = ["a", "b", "c"];

impl Sqlite {
    /// A database in `dir` with table `t`, an index on each of `indexed`, in a transaction.
    pub fn create(dir: &Path, indexed: &[usize]) -> Result<Self> {
        let conn = Connection::open(dir.join("sqlite.db"))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "OFF")?;
        conn.execute_batch(
            "CREATE TABLE t(key INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER);",
        )?;
        for &c in indexed {
            let col = COLS.get(c).ok_or("no such column")?;
            conn.execute_batch(&format!("CREATE INDEX t_{col} ON t({col});"))?;
        }
        conn.execute_batch("BEGIN")?;
        Ok(Sqlite {
            conn,
            indexed: indexed.to_vec(),
            in_tx: true,
        })
    }

    fn rows(
        &mut self,
        sql: &str,
        p: impl rusqlite::Params,
        f: &mut dyn FnMut(u64, [i32; 3]),
    ) -> Result<()> {
        let mut st = self.conn.prepare_cached(sql)?;
        let mut rows = st.query(p)?;
        while let Some(r) = rows.next()? {
            let k: i64 = r.get(0)?;
            f(k as u64, [r.get(1)?, r.get(2)?, r.get(3)?]);
        }
        Ok(())
    }
}

impl Bench for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }
    fn engine(&self) -> &'static str {
        "sqlite"
    }
    fn params(&self) -> Map<String, Json> {
        let cache: i64 = self
            .conn
            .pragma_query_value(None, "cache_size", |r| r.get(0))
            .unwrap_or(0);
        let page: i64 = self
            .conn
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .unwrap_or(0);
        let p = json!({
            "api": "rusqlite (bundled), prepared statements",
            "version": rusqlite::version(),
            "schema": "t(key INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER)",
            "indexed_columns": self.indexed.iter().map(|&c| COLS[c]).collect::<Vec<_>>(),
            "journal_mode": "WAL",
            "synchronous": "OFF",
            "inserts": "one transaction",
            "page_bytes": page,
            "cache_size": cache,
        });
        match p {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }
    fn insert(&mut self, recs: &[Rec]) -> Result<()> {
        let mut st = self
            .conn
            .prepare_cached("INSERT INTO t(key, a, b, c) VALUES (?1, ?2, ?3, ?4)")?;
        for (k, v) in recs {
            st.execute(params![*k as i64, v[0], v[1], v[2]])?;
        }
        Ok(())
    }
    fn finish_insert(&mut self) -> Result<()> {
        if self.in_tx {
            self.conn.execute_batch("COMMIT")?;
            self.in_tx = false;
        }
        Ok(())
    }
    fn lookup(&mut self, key: u64) -> Result<Option<[i32; 3]>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT a, b, c FROM t WHERE key = ?1")?;
        Ok(st
            .query_row([key as i64], |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?]))
            .optional()?)
    }
    fn key_range(&mut self, lo: u64, hi: u64, f: &mut dyn FnMut(u64, [i32; 3])) -> Result<()> {
        self.rows(
            "SELECT key, a, b, c FROM t WHERE key BETWEEN ?1 AND ?2",
            [lo as i64, hi as i64],
            f,
        )
    }
    fn data_range(
        &mut self,
        col: usize,
        lo: i32,
        hi: i32,
        f: &mut dyn FnMut(u64, [i32; 3]),
    ) -> Result<()> {
        let c = COLS.get(col).ok_or("no such column")?;
        self.rows(
            &format!("SELECT key, a, b, c FROM t WHERE {c} BETWEEN ?1 AND ?2"),
            [lo, hi],
            f,
        )
    }
    fn load_second_station(&mut self, recs: &[Rec]) -> Result<()> {
        self.conn.execute_batch(
            "BEGIN; CREATE TABLE sea(key INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER);",
        )?;
        {
            let mut st = self
                .conn
                .prepare_cached("INSERT INTO sea(key, a, b, c) VALUES (?1, ?2, ?3, ?4)")?;
            for (k, v) in recs {
                st.execute(params![*k as i64, v[0], v[1], v[2]])?;
            }
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }
    fn query(&mut self, q: Q) -> Result<Answer> {
        let mut st = self.conn.prepare_cached(&q.sql())?;
        let n = st.column_count();
        let mut rows = st.query([])?;
        let mut ans = Vec::new();
        while let Some(r) = rows.next()? {
            let mut row = Vec::with_capacity(n);
            for i in 0..n {
                row.push(r.get::<_, f64>(i)?);
            }
            ans.push(row);
        }
        Ok(ans)
    }
    fn io(&mut self) -> Option<IoStats> {
        None
    }
    fn state(&self) -> Map<String, Json> {
        Map::new()
    }
}

/// EmberDB through SQL: `ember::Connection` on a file database, the series as
/// `USING timeseries(...)` tables set up as [`EmberApi`]'s (page size, erase unit, data and
/// index pages, a 64-bit bitmap on the same column), statements prepared once (the
/// connection's statement cache), all inserts in one transaction.
pub struct EmberSql {
    conn: ember::Connection,
    value_col: usize,
    page: usize,
    index_range: (i64, i64),
    in_tx: bool,
}

fn ember_f64(v: &ember::Value) -> f64 {
    match v {
        ember::Value::Integer(i) => *i as f64,
        ember::Value::Real(r) => *r,
        _ => f64::NAN,
    }
}

fn ember_i32(v: &ember::Value) -> Result<i32> {
    match v {
        ember::Value::Integer(i) => {
            Ok(i32::try_from(*i).map_err(|_| "ember-sql: value out of range")?)
        }
        other => Err(format!("ember-sql: not an integer: {other:?}").into()),
    }
}

impl EmberSql {
    /// Bytes of the database file (sparse where the file system allows).
    const CAPACITY: u64 = 1 << 30;

    /// A database `ember-sql.db` in `dir` with series `t` for `recs` (its bitmap on
    /// `value_col` over the column's range), in a transaction.
    pub fn create(dir: &Path, page: usize, recs: &[Rec], value_col: usize) -> Result<Self> {
        let opts = ember::OpenOptions {
            mode: ember::Mode::Metadata,
            capacity: Self::CAPACITY,
            ..ember::OpenOptions::default()
        };
        let conn = ember::Connection::open_with(dir.join("ember-sql.db"), opts)?;
        let col = COLS.get(value_col).ok_or("no such column")?;
        let lo = recs
            .iter()
            .map(|r| i64::from(r.1[value_col]))
            .min()
            .unwrap_or(0);
        let hi = recs
            .iter()
            .map(|r| i64::from(r.1[value_col]))
            .max()
            .unwrap_or(0)
            .max(lo + 1);
        let dp = data_pages(recs.len(), page);
        let ip = index_pages(dp, BUCKETS.div_ceil(8), page);
        conn.execute_batch(&format!(
            "CREATE TABLE t(key INTEGER PRIMARY KEY, a INT4, b INT4, c INT4) USING timeseries(\
             key_size=4, page_size={page}, erase_pages={UNIT}, pages={dp}, full=refuse, \
             durable=page, index={col}, index_min={lo}, index_max={hi}, index_bits={BUCKETS}, \
             index_pages={ip}); CREATE INDEX t_{col} ON t({col}); BEGIN;"
        ))?;
        Ok(EmberSql {
            conn,
            value_col,
            page,
            index_range: (lo, hi),
            in_tx: true,
        })
    }

    fn rows(
        &mut self,
        sql: &str,
        p: Vec<ember::Value>,
        f: &mut dyn FnMut(u64, [i32; 3]),
    ) -> Result<()> {
        let mut st = self.conn.prepare(sql)?;
        let mut rows = st.query(p)?;
        while let Some(r) = rows.next()? {
            let v = r.values();
            let [k, a, b, c] = v else {
                return Err(format!("ember-sql: {} columns, not 4", v.len()).into());
            };
            let k = match k {
                ember::Value::Integer(k) => *k as u64,
                other => return Err(format!("ember-sql: key {other:?}").into()),
            };
            f(k, [ember_i32(a)?, ember_i32(b)?, ember_i32(c)?]);
        }
        Ok(())
    }
}

impl Bench for EmberSql {
    fn name(&self) -> &'static str {
        "ember-sql"
    }
    fn engine(&self) -> &'static str {
        "timeseries"
    }
    fn params(&self) -> Map<String, Json> {
        let p = json!({
            "api": "ember::Connection, prepared statements (statement cache)",
            "schema": "t(key INTEGER PRIMARY KEY, a INT4, b INT4, c INT4) USING timeseries(...)",
            "device": "file database (ember_device::FileBlock), mode Metadata",
            "page_bytes": self.page,
            "erase_unit_pages": UNIT,
            "durable": "page (EmbedDB's default: rows reach the device a page at a time)",
            "bitmap_bits": BUCKETS,
            "bitmap_column": self.value_col,
            "bitmap_buckets": format!("linear over [{}, {}]", self.index_range.0, self.index_range.1),
            "inserts": "one transaction",
        });
        match p {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }
    fn insert(&mut self, recs: &[Rec]) -> Result<()> {
        let mut st = self
            .conn
            .prepare("INSERT INTO t(key, a, b, c) VALUES (?1, ?2, ?3, ?4)")?;
        for (k, v) in recs {
            st.execute([*k as i64, i64::from(v[0]), i64::from(v[1]), i64::from(v[2])])?;
        }
        Ok(())
    }
    fn finish_insert(&mut self) -> Result<()> {
        if self.in_tx {
            self.conn.execute_batch("COMMIT")?;
            self.in_tx = false;
        }
        Ok(())
    }
    fn lookup(&mut self, key: u64) -> Result<Option<[i32; 3]>> {
        let mut st = self.conn.prepare("SELECT a, b, c FROM t WHERE key = ?1")?;
        let mut rows = st.query([key as i64])?;
        let Some(r) = rows.next()? else {
            return Ok(None);
        };
        let v = r.values();
        let [a, b, c] = v else {
            return Err(format!("ember-sql: {} columns, not 3", v.len()).into());
        };
        Ok(Some([ember_i32(a)?, ember_i32(b)?, ember_i32(c)?]))
    }
    fn key_range(&mut self, lo: u64, hi: u64, f: &mut dyn FnMut(u64, [i32; 3])) -> Result<()> {
        self.rows(
            "SELECT key, a, b, c FROM t WHERE key BETWEEN ?1 AND ?2",
            vec![
                ember::Value::Integer(lo as i64),
                ember::Value::Integer(hi as i64),
            ],
            f,
        )
    }
    fn data_range(
        &mut self,
        col: usize,
        lo: i32,
        hi: i32,
        f: &mut dyn FnMut(u64, [i32; 3]),
    ) -> Result<()> {
        let c = COLS.get(col).ok_or("no such column")?;
        self.rows(
            &format!("SELECT key, a, b, c FROM t WHERE {c} BETWEEN ?1 AND ?2"),
            vec![
                ember::Value::Integer(i64::from(lo)),
                ember::Value::Integer(i64::from(hi)),
            ],
            f,
        )
    }
    fn load_second_station(&mut self, recs: &[Rec]) -> Result<()> {
        let dp = data_pages(recs.len(), self.page);
        let page = self.page;
        self.conn.execute_batch(&format!(
            "BEGIN; CREATE TABLE sea(key INTEGER PRIMARY KEY, a INT4, b INT4, c INT4) \
             USING timeseries(key_size=4, page_size={page}, erase_pages={UNIT}, pages={dp}, \
             full=refuse, durable=page);"
        ))?;
        {
            let mut st = self
                .conn
                .prepare("INSERT INTO sea(key, a, b, c) VALUES (?1, ?2, ?3, ?4)")?;
            for (k, v) in recs {
                st.execute([*k as i64, i64::from(v[0]), i64::from(v[1]), i64::from(v[2])])?;
            }
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }
    fn query(&mut self, q: Q) -> Result<Answer> {
        // Query 4 as a join of the two series with the first one's key looked up from the
        // second's (the same rows as SQLite's text, whose derived-table join the executor
        // runs as a nested loop over all rows).
        let sql = match q {
            Q::Stations => format!(
                "SELECT s.key, s.a AS temp_sea, u.a AS temp_uwa FROM sea s JOIN t u \
                 ON u.key = s.key - {STATION_SHIFT} \
                 WHERE s.key >= {Q4_FROM} AND s.key < {Q4_TO}"
            ),
            _ => q.sql(),
        };
        let mut st = self.conn.prepare(&sql)?;
        let mut rows = st.query(())?;
        let mut ans = Vec::new();
        while let Some(r) = rows.next()? {
            ans.push(r.values().iter().map(ember_f64).collect());
        }
        Ok(ans)
    }
    fn io(&mut self) -> Option<IoStats> {
        None
    }
    fn state(&self) -> Map<String, Json> {
        Map::new()
    }
}

// ----- the driver -----------------------------------------------------------------------

/// How much of each workload to run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    lookups: usize,
    key_ranges: usize,
    data_ranges: usize,
    query_runs: usize,
    bandwidth_pages: u64,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                lookups: 2_000,
                key_ranges: 5,
                data_ranges: 10,
                query_runs: 2,
                bandwidth_pages: 2_000,
            }
        } else {
            Sizes {
                lookups: usize::MAX,
                key_ranges: 50,
                data_ranges: 50,
                query_runs: 5,
                bandwidth_pages: 10_000,
            }
        }
    }
}

/// The device's measured bandwidth, bytes per second (a file in the scratch directory, 512-byte
/// pages, no syncs: what the engine's device sees).
#[derive(Debug, Clone, Copy)]
pub struct Bandwidth {
    /// Sequential page writes, one page per call.
    pub seq_write: f64,
    /// Sequential page writes, `batch` pages per call (ember-api's `--write-pages`): the
    /// insert figures' theoretical maximum, since the engine writes that many at once.
    pub seq_write_batched: f64,
    /// Pages per call of `seq_write_batched`.
    pub batch: u64,
    /// Sequential page reads (every byte inspected).
    pub seq_read: f64,
    /// Random page reads (every byte inspected).
    pub rand_read: f64,
    /// Pages in each test.
    pub pages: u64,
}

impl Bandwidth {
    fn to_json(self) -> Json {
        json!({
            "pages": self.pages,
            "page_bytes": PAGE,
            "seq_write_bytes_per_sec": self.seq_write,
            "seq_write_batched_bytes_per_sec": self.seq_write_batched,
            "batch_pages": self.batch,
            "seq_read_bytes_per_sec": self.seq_read,
            "random_read_bytes_per_sec": self.rand_read,
            "how": "a FileBlock file in the scratch directory: the pages written in order \
                    (no sync; one page per call, then batch_pages per call), read in order, \
                    read in a random order; reads inspect every byte",
        })
    }
}

/// Measures the bandwidth of the engine's device kind, as the paper does (10,000 pages).
pub fn bandwidth(dir: &Path, pages: u64, batch: u64) -> Result<Bandwidth> {
    let path = dir.join("bandwidth.dev");
    let mut f = FileBlock::create(&path, pages * PAGE as u64).map_err(|e| format!("{e:?}"))?;
    let mut buf = [0u8; PAGE];
    let bytes = (pages * PAGE as u64) as f64;
    let t = Instant::now();
    for p in 0..pages {
        buf[..8].copy_from_slice(&p.to_le_bytes());
        f.write(p * PAGE as u64, &buf)
            .map_err(|e| format!("{e:?}"))?;
    }
    let seq_write = bytes / t.elapsed().as_secs_f64().max(1e-9);
    let batch = batch.max(1);
    let mut big = vec![0u8; PAGE * batch as usize];
    let t = Instant::now();
    let mut p = 0;
    while p < pages {
        let n = batch.min(pages - p);
        let len = PAGE * n as usize;
        big[..8].copy_from_slice(&p.to_le_bytes());
        f.write(p * PAGE as u64, &big[..len])
            .map_err(|e| format!("{e:?}"))?;
        p += n;
    }
    let seq_write_batched = bytes / t.elapsed().as_secs_f64().max(1e-9);
    let mut sum = 0u64;
    let t = Instant::now();
    for p in 0..pages {
        f.read(p * PAGE as u64, &mut buf)
            .map_err(|e| format!("{e:?}"))?;
        sum = sum.wrapping_add(buf.iter().map(|&b| u64::from(b)).sum::<u64>());
    }
    let seq_read = bytes / t.elapsed().as_secs_f64().max(1e-9);
    let mut rng = SplitMix64::new(pages);
    let t = Instant::now();
    for _ in 0..pages {
        let p = rng.below(pages);
        f.read(p * PAGE as u64, &mut buf)
            .map_err(|e| format!("{e:?}"))?;
        sum = sum.wrapping_add(buf.iter().map(|&b| u64::from(b)).sum::<u64>());
    }
    let rand_read = bytes / t.elapsed().as_secs_f64().max(1e-9);
    std::hint::black_box(sum);
    drop(f);
    let _ = fs::remove_file(&path);
    Ok(Bandwidth {
        seq_write,
        seq_write_batched,
        batch,
        seq_read,
        rand_read,
        pages,
    })
}

/// The queries of one data set, fixed before any system runs so every system gets the same.
struct Work<'d> {
    ds: &'d Dataset,
    by_key: HashMap<u64, [i32; 3]>,
    lookups: &'d [u64],
    /// First record index of each key range; every range holds `span` records.
    key_ranges: Vec<usize>,
    span: usize,
    value_col: usize,
    /// (lo, hi, keys selected).
    data_ranges: Vec<(i32, i32, Vec<u64>)>,
    queries: Vec<Q>,
    query_runs: usize,
    second_station: Option<&'d [Rec]>,
}

impl<'d> Work<'d> {
    fn new(
        ds: &'d Dataset,
        sizes: Sizes,
        queries: Vec<Q>,
        second_station: Option<&'d [Rec]>,
    ) -> Self {
        let recs = &ds.records;
        let n = recs.len();
        let mut rng = SplitMix64::new(0xE3BE_DDB0 ^ n as u64);
        let span = (n / 20).max(1);
        let key_ranges = (0..sizes.key_ranges)
            .map(|_| rng.below((n - span + 1) as u64) as usize)
            .collect();
        let value_col = value_column(recs);
        let data_ranges = data_ranges(recs, value_col, sizes.data_ranges, &mut rng);
        Work {
            ds,
            by_key: recs.iter().copied().collect(),
            lookups: &ds.lookup[..ds.lookup.len().min(sizes.lookups)],
            key_ranges,
            span,
            value_col,
            data_ranges,
            queries,
            query_runs: sizes.query_runs,
            second_station,
        }
    }

    /// Columns some workload filters on by value.
    fn indexed(&self) -> Vec<usize> {
        let mut v = vec![self.value_col];
        for q in &self.queries {
            if let Some(c) = q.filter_column()
                && !v.contains(&c)
            {
                v.push(c);
            }
        }
        v
    }
}

/// `count` value ranges of column `col` selecting about 0.01% of the records each, with the
/// keys each selects. A range starts at a random distinct value and grows over the next
/// distinct values until it holds the target; ranges holding more than four times the
/// target (values that repeat often) are drawn again, up to a limit, after which the
/// smallest range seen is taken.
fn data_ranges(
    recs: &[Rec],
    col: usize,
    count: usize,
    rng: &mut SplitMix64,
) -> Vec<(i32, i32, Vec<u64>)> {
    let mut vals: Vec<i32> = recs.iter().map(|r| r.1[col]).collect();
    vals.sort_unstable();
    let mut distinct: Vec<(i32, usize)> = Vec::new();
    for v in vals {
        match distinct.last_mut() {
            Some((x, n)) if *x == v => *n += 1,
            _ => distinct.push((v, 1)),
        }
    }
    let target = (recs.len() / 10_000).max(1);
    let pick = |rng: &mut SplitMix64| {
        let a = rng.below(distinct.len() as u64) as usize;
        let mut n = 0;
        let mut b = a;
        while b < distinct.len() {
            n += distinct[b].1;
            if n >= target {
                break;
            }
            b += 1;
        }
        let b = b.min(distinct.len() - 1);
        (distinct[a].0, distinct[b].0, n)
    };
    (0..count)
        .map(|_| {
            let mut best = pick(rng);
            for _ in 0..1_000 {
                if best.2 >= target && best.2 <= 4 * target {
                    break;
                }
                let c = pick(rng);
                let better = |c: (i32, i32, usize), b: (i32, i32, usize)| {
                    (c.2 >= target && (b.2 < target || c.2 < b.2)) || (b.2 < target && c.2 > b.2)
                };
                if better(c, best) {
                    best = c;
                }
            }
            let (lo, hi, _) = best;
            let keys = recs
                .iter()
                .filter(|r| (lo..=hi).contains(&r.1[col]))
                .map(|r| r.0)
                .collect();
            (lo, hi, keys)
        })
        .collect()
}

/// Everything one system's run of one data set produced.
struct Outcome {
    results: Vec<RunResult>,
    answers: Vec<(Q, Answer)>,
}

fn result(
    workload: &str,
    sys: &mut dyn Bench,
    w: &Work<'_>,
    ops: u64,
    seconds: f64,
    lat: &Latencies,
    mut params: Map<String, Json>,
) -> RunResult {
    let q = lat.percentiles_us(&[0.5, 0.99, 0.999, 1.0]);
    let mut all = Map::new();
    all.insert("dataset".into(), w.ds.name.clone().into());
    all.insert("records".into(), w.ds.records.len().into());
    all.insert("value_column".into(), w.value_col.into());
    all.extend(sys.params());
    all.extend(sys.state());
    all.append(&mut params);
    RunResult {
        workload: workload.into(),
        system: sys.name().into(),
        engine: sys.engine().into(),
        params: all,
        ops,
        seconds,
        p50_us: q[0],
        p99_us: q[1],
        p999_us: q[2],
        max_us: q[3],
        app_bytes: None,
        device_bytes: None,
        device_bytes_source: None,
        proc_io: None,
        extra: Map::new(),
        repeats: Vec::new(),
    }
}

fn io_delta(sys: &mut dyn Bench, before: Option<IoStats>) -> Option<IoStats> {
    Some(sys.io()?.since(&before?))
}

fn mismatch(what: String) -> crate::measure::Error {
    what.into()
}

/// Runs every workload of `w` on `sys`, checking every answer.
fn run_system(
    sys: &mut dyn Bench,
    w: &Work<'_>,
    bw: &Bandwidth,
    wants: &dyn Fn(&str) -> bool,
) -> Result<Outcome> {
    let mut results = Vec::new();
    let recs = &w.ds.records;
    let name = sys.name();
    let ds = &w.ds.name;

    // insert: every record, timed in batches, then flush / commit.
    let mut lat = Latencies::with_capacity(recs.len() / BATCH + 1);
    let io0 = sys.io();
    let proc0 = ProcIo::read();
    let t0 = Instant::now();
    for chunk in recs.chunks(BATCH) {
        let t = Instant::now();
        sys.insert(chunk)?;
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        lat.record_ns(ns / chunk.len() as u64);
    }
    sys.finish_insert()?;
    let seconds = t0.elapsed().as_secs_f64();
    let proc_io = ProcIo::delta(proc0);
    let io = io_delta(sys, io0);
    if wants("insert") {
        // The engine writes `batch` pages a call: its bound is the bandwidth at that size.
        let max = bw.seq_write.max(bw.seq_write_batched) / 16.0;
        let rate = recs.len() as f64 / seconds.max(1e-9);
        let mut p = Map::new();
        p.insert(
            "latency".into(),
            format!("per record, batches of {BATCH}").into(),
        );
        p.insert("theoretical_max_inserts_per_sec".into(), max.into());
        p.insert("share_of_theoretical_max".into(), (rate / max).into());
        p.insert(
            "theoretical_max_basis".into(),
            "measured sequential write bandwidth (at the engine's pages per write) ÷ 16 \
             bytes per record"
                .into(),
        );
        if let Some(io) = io {
            p.insert("device_writes".into(), io.writes.into());
            p.insert("device_syncs_dropped".into(), io.syncs.into());
        }
        let mut r = result("insert", sys, w, recs.len() as u64, seconds, &lat, p);
        r.app_bytes = Some(16 * recs.len() as u64);
        r.proc_io = proc_io;
        match io {
            Some(io) => {
                r.device_bytes = Some(io.write_bytes);
                r.device_bytes_source = Some("ember_device::Accounted write bytes");
            }
            None => {
                r.device_bytes = proc_io.map(|p| p.write_bytes);
                r.device_bytes_source = proc_io.map(|_| "/proc/self/io write_bytes");
            }
        }
        results.push(r);
    }

    if let Some(second) = w.second_station {
        sys.load_second_station(second)?;
    }

    if wants("lookup") {
        let mut lat = Latencies::with_capacity(w.lookups.len());
        let io0 = sys.io();
        let proc0 = ProcIo::read();
        let t0 = Instant::now();
        for &k in w.lookups {
            let got = lat.time(|| sys.lookup(k))?;
            if got.as_ref() != w.by_key.get(&k) {
                return Err(mismatch(format!(
                    "lookup on {name}, {ds}: key {k}: got {got:?}, the data set has {:?}",
                    w.by_key.get(&k)
                )));
            }
        }
        let seconds = t0.elapsed().as_secs_f64();
        let n = w.lookups.len().max(1) as f64;
        let mut p = Map::new();
        p.insert("lookup_order".into(), w.ds.lookup_source.clone().into());
        p.insert(
            "theoretical_max_lookups_per_sec".into(),
            (bw.rand_read / PAGE as f64).into(),
        );
        if let Some(io) = io_delta(sys, io0) {
            p.insert("page_reads_per_lookup".into(), (io.reads as f64 / n).into());
            p.insert(
                "read_bytes_per_lookup".into(),
                (io.read_bytes as f64 / n).into(),
            );
        }
        if let Some(pio) = ProcIo::delta(proc0) {
            p.insert(
                "read_syscalls_per_lookup".into(),
                (pio.syscr as f64 / n).into(),
            );
        }
        results.push(result(
            "lookup",
            sys,
            w,
            w.lookups.len() as u64,
            seconds,
            &lat,
            p,
        ));
    }

    if wants("key-range") {
        let mut lat = Latencies::with_capacity(w.key_ranges.len());
        let io0 = sys.io();
        let t0 = Instant::now();
        let mut rows: Vec<(u64, [i32; 3])> = Vec::with_capacity(w.span);
        for &i in &w.key_ranges {
            let (lo, hi) = (recs[i].0, recs[i + w.span - 1].0);
            rows.clear();
            lat.time(|| sys.key_range(lo, hi, &mut |k, v| rows.push((k, v))))?;
            // Checked outside the timed call: the rows must be the data set's, in order.
            if rows.as_slice() != &recs[i..i + w.span] {
                let j = rows
                    .iter()
                    .zip(&recs[i..])
                    .position(|(a, b)| a != b)
                    .unwrap_or(rows.len().min(w.span));
                return Err(mismatch(format!(
                    "key-range on {name}, {ds}: keys {lo}..={hi}: {} rows, the data set has                      {}; first difference at row {j}: {:?} against {:?}",
                    rows.len(),
                    w.span,
                    rows.get(j),
                    recs.get(i + j)
                )));
            }
        }
        let seconds = t0.elapsed().as_secs_f64();
        let q = w.key_ranges.len().max(1) as f64;
        let mut p = Map::new();
        p.insert("records_per_query".into(), w.span.into());
        p.insert(
            "records_per_sec".into(),
            (q * w.span as f64 / seconds.max(1e-9)).into(),
        );
        let scan_bytes = (w.span * 16) as f64;
        p.insert(
            "theoretical_max_queries_per_sec".into(),
            ((bw.seq_read + bw.rand_read) / 2.0 / scan_bytes).into(),
        );
        if let Some(io) = io_delta(sys, io0) {
            // Device read calls (a read-ahead of several pages is one) and bytes read.
            p.insert(
                "device_reads_per_query".into(),
                (io.reads as f64 / q).into(),
            );
            p.insert(
                "read_bytes_per_query".into(),
                (io.read_bytes as f64 / q).into(),
            );
        }
        results.push(result(
            "key-range",
            sys,
            w,
            w.key_ranges.len() as u64,
            seconds,
            &lat,
            p,
        ));
    }

    if wants("data-range") {
        let mut lat = Latencies::with_capacity(w.data_ranges.len());
        let io0 = sys.io();
        let t0 = Instant::now();
        let mut selected = 0usize;
        let mut rows: Vec<(u64, [i32; 3])> = Vec::new();
        for (lo, hi, want) in &w.data_ranges {
            rows.clear();
            lat.time(|| sys.data_range(w.value_col, *lo, *hi, &mut |k, v| rows.push((k, v))))?;
            // Checked outside the timed call: exactly the records a scan selects.
            rows.sort_unstable_by_key(|r| r.0);
            if let Some((k, _)) = rows.iter().find(|(k, v)| w.by_key.get(k) != Some(v)) {
                return Err(mismatch(format!(
                    "data-range on {name}, {ds}: key {k} returned with data the data set \
                     does not have"
                )));
            }
            if !rows.iter().map(|r| r.0).eq(want.iter().copied()) {
                return Err(mismatch(format!(
                    "data-range on {name}, {ds}: values {lo}..={hi}: {} rows, a scan finds {}",
                    rows.len(),
                    want.len()
                )));
            }
            selected += want.len();
        }
        let seconds = t0.elapsed().as_secs_f64();
        let q = w.data_ranges.len().max(1) as f64;
        let mut p = Map::new();
        p.insert("column".into(), w.value_col.into());
        p.insert(
            "selected_fraction".into(),
            (selected as f64 / q / recs.len() as f64).into(),
        );
        if let Some(io) = io_delta(sys, io0) {
            let total = sys
                .state()
                .get("data_pages")
                .and_then(Json::as_u64)
                .unwrap_or(0);
            p.insert("pages_read_per_query".into(), (io.reads as f64 / q).into());
            p.insert("total_data_pages".into(), total.into());
            if total > 0 {
                p.insert(
                    "pages_read_fraction".into(),
                    (io.reads as f64 / q / total as f64).into(),
                );
            }
        }
        results.push(result(
            "data-range",
            sys,
            w,
            w.data_ranges.len() as u64,
            seconds,
            &lat,
            p,
        ));
    }

    let mut answers = Vec::new();
    for &qy in &w.queries {
        let runs = w.query_runs.max(1);
        let mut lat = Latencies::with_capacity(runs);
        let io0 = sys.io();
        let t0 = Instant::now();
        let mut first: Option<Answer> = None;
        for _ in 0..runs {
            let mut a = lat.time(|| sys.query(qy))?;
            sort_answer(&mut a);
            match &first {
                None => first = Some(a),
                Some(f) if same_answer(f, &a) => {}
                Some(_) => {
                    return Err(mismatch(format!(
                        "{} on {name}, {ds}: two runs gave different answers",
                        qy.workload()
                    )));
                }
            }
        }
        let seconds = t0.elapsed().as_secs_f64();
        let a = first.unwrap_or_default();
        let mut p = Map::new();
        p.insert("sql".into(), qy.sql().into());
        p.insert("table3_dataset".into(), qy.dataset().into());
        p.insert("answer_rows".into(), a.len().into());
        if let Some(io) = io_delta(sys, io0) {
            p.insert(
                "device_reads_per_query".into(),
                (io.reads as f64 / runs as f64).into(),
            );
            p.insert(
                "read_bytes_per_query".into(),
                (io.read_bytes as f64 / runs as f64).into(),
            );
        }
        results.push(result(qy.workload(), sys, w, runs as u64, seconds, &lat, p));
        answers.push((qy, a));
    }
    Ok(Outcome { results, answers })
}

// ----- the suite ------------------------------------------------------------------------

/// The systems, in run order (SQLite last: the others' answers are checked against its).
pub const SYSTEMS: [&str; 3] = ["ember-api", "ember-sql", "sqlite"];

/// Runs one system on one data set's work in `dir`.
fn run_named(
    system: &str,
    w: &Work<'_>,
    dir: &Path,
    bw: &Bandwidth,
    args: &Args,
) -> Result<Outcome> {
    let wants = |x: &str| args.wants(x);
    match system {
        "ember-api" => {
            let bounds = bucket_bounds(&w.ds.records, w.value_col, BUCKETS);
            let buckets = BoundaryBuckets::new(Col::i32(4 * w.value_col), &bounds);
            let rw = (args.read_pages as usize, args.write_pages as usize);
            let mut arena = vec![0u8; EmberApi::arena_len(args.page_bytes, rw)];
            let mut sea_arena = vec![0u8; EmberApi::sea_arena_len(args.page_bytes, rw)];
            let mut sys = EmberApi::create(
                dir,
                args.page_bytes,
                rw,
                w.ds.records.len(),
                w.value_col,
                &buckets,
                &mut arena,
                &mut sea_arena,
            )?;
            run_system(&mut sys, w, bw, &wants)
        }
        "ember-sql" => {
            let mut sys = EmberSql::create(dir, args.page_bytes, &w.ds.records, w.value_col)?;
            run_system(&mut sys, w, bw, &wants)
        }
        "sqlite" => {
            let mut sys = Sqlite::create(dir, &w.indexed())?;
            run_system(&mut sys, w, bw, &wants)
        }
        other => Err(format!("no system {other}").into()),
    }
}

impl Args {
    /// Whether `workload` was asked for.
    pub fn wants(&self, workload: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == workload)
    }
}

/// Runs the suite; writes `embeddb.json`, `embeddb.md`, `embeddb-vs-sqlite.svg`; returns
/// the Markdown.
pub fn main(args: &Args) -> Result<String> {
    for o in &args.only {
        if !WORKLOADS.contains(&o.as_str()) {
            return Err(format!("no workload {o} (one of {})", WORKLOADS.join(", ")).into());
        }
    }
    let files = if args.datasets.is_empty() {
        dataset_files(&default_dir())?
    } else {
        args.datasets.clone()
    };
    let limit = args.records.or(args.quick.then_some(20_000));
    let datasets = files
        .iter()
        .map(|f| load_dataset(f, limit))
        .collect::<Result<Vec<_>>>()?;
    let sizes = Sizes::new(args.quick);
    let scratch = Scratch::new(&args.dir, "ember-bench-embeddb")?;
    let bw = bandwidth(
        scratch.dir(),
        sizes.bandwidth_pages,
        u64::from(args.write_pages),
    )?;

    // Each Table 3 query on the data set it names, else on the first.
    let plan: Vec<(Q, usize)> = Q::ALL
        .iter()
        .filter(|q| args.wants(q.workload()))
        .map(|&q| {
            let i = datasets
                .iter()
                .position(|d| d.name.contains(q.dataset()))
                .unwrap_or(0);
            (q, i)
        })
        .collect();
    // Query 4's second station.
    let (second, second_source): (Option<Vec<Rec>>, String) =
        match plan.iter().find(|(q, _)| *q == Q::Stations) {
            None => (None, String::new()),
            Some(&(_, i)) => match &args.sea {
                Some(p) => (
                    Some(load_dataset(p, None)?.records),
                    p.display().to_string(),
                ),
                None => (
                    Some(
                        datasets[i]
                            .records
                            .iter()
                            .map(|&(k, v)| (k + STATION_SHIFT, v))
                            .collect(),
                    ),
                    format!(
                        "{} with keys + {STATION_SHIFT} (the paper's sea data set is not in \
                         shared/datasets)",
                        datasets[i].name
                    ),
                ),
            },
        };

    let works: Vec<Work<'_>> = datasets
        .iter()
        .enumerate()
        .map(|(i, ds)| {
            let queries: Vec<Q> = plan
                .iter()
                .filter(|(_, d)| *d == i)
                .map(|(q, _)| *q)
                .collect();
            let station = queries
                .contains(&Q::Stations)
                .then_some(second.as_deref())
                .flatten();
            Work::new(ds, sizes, queries, station)
        })
        .collect();
    let repeat = args.repeat.unwrap_or(if args.quick { 1 } else { 3 });
    let bar = progress(repeat * (datasets.len() * SYSTEMS.len()) as u64);
    // Every run of each (data set, workload, system), in first-seen order.
    let mut runs: Vec<Vec<RunResult>> = Vec::new();
    for rep in 0..repeat {
        for w in &works {
            let ds = w.ds;
            let mut answers: Vec<(&str, Vec<(Q, Answer)>)> = Vec::new();
            for system in SYSTEMS {
                bar.set_message(format!("{} {system} (run {})", ds.name, rep + 1));
                scratch.clear()?;
                let out = run_named(system, w, scratch.dir(), &bw, args)
                    .map_err(|e| format!("embeddb: {} on {system}: {e}", ds.name))?;
                scratch.clear()?;
                for r in out.results {
                    if args.verbose {
                        bar.suspend(|| {
                            eprintln!(
                                "  embeddb {} {} {} (run {}/{repeat}): {:.0} ops/s, p50 {:.1} µs",
                                ds.name,
                                r.workload,
                                r.system,
                                rep + 1,
                                r.ops_per_sec(),
                                r.p50_us
                            )
                        });
                    }
                    let same = |x: &RunResult| {
                        x.workload == r.workload
                            && x.system == r.system
                            && x.params.get("dataset") == r.params.get("dataset")
                    };
                    match runs.iter_mut().find(|v| v.first().is_some_and(same)) {
                        Some(v) => v.push(r),
                        None => runs.push(vec![r]),
                    }
                }
                answers.push((system, out.answers));
                bar.inc(1);
            }
            check_answers(&ds.name, &answers)?;
        }
    }
    bar.finish_and_clear();
    let mut results: Vec<RunResult> = runs.into_iter().filter_map(report::median_run).collect();
    paired_ratios(&mut results);

    let mut extra = Map::new();
    extra.insert("quick".into(), args.quick.into());
    extra.insert("repeat".into(), repeat.into());
    extra.insert(
        "build".into(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into(),
    );
    extra.insert("sqlite_version".into(), rusqlite::version().into());
    extra.insert("device_bandwidth".into(), bw.to_json());
    extra.insert(
        "datasets".into(),
        datasets
            .iter()
            .map(|d| json!({"name": d.name, "records": d.records.len(), "lookup_order": d.lookup_source}))
            .collect(),
    );
    extra.insert("q4_second_station".into(), second_source.clone().into());
    fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    report::write_json(&args.out.join("embeddb.json"), "embeddb", extra, &results)?;
    chart::grouped_bars(
        &args.out.join("embeddb-vs-sqlite.svg"),
        "embeddb: ember-api ops/s ÷ SQLite ops/s (above 1: EmberDB faster)",
        "ratio",
        &ratio_groups(&results, &datasets),
    )?;
    let md = markdown(&results, &datasets, &bw, &second_source, args);
    fs::write(args.out.join("embeddb.md"), &md)?;
    Ok(md)
}

/// Every system's Table 3 answers must equal the first system's.
fn check_answers(ds: &str, answers: &[(&str, Vec<(Q, Answer)>)]) -> Result<()> {
    let Some((base_sys, base)) = answers.last() else {
        return Ok(());
    };
    for (sys, list) in answers {
        for (q, a) in list {
            let Some((_, b)) = base.iter().find(|(x, _)| x == q) else {
                continue;
            };
            if !same_answer(a, b) {
                let at = a
                    .iter()
                    .zip(b)
                    .position(|(r, s)| !same_answer(&vec![r.clone()], &vec![s.clone()]))
                    .unwrap_or(a.len().min(b.len()));
                return Err(format!(
                    "{} on {ds}: {sys} and {base_sys} disagree ({} rows against {}; first \
                     difference at row {at}: {:?} against {:?})",
                    q.workload(),
                    a.len(),
                    b.len(),
                    a.get(at),
                    b.get(at)
                )
                .into());
            }
        }
    }
    Ok(())
}

fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    if let Ok(style) =
        ProgressStyle::with_template("embeddb [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn find<'r>(results: &'r [RunResult], ds: &str, w: &str, sys: &str) -> Option<&'r RunResult> {
    results.iter().find(|r| {
        r.workload == w
            && r.system == sys
            && r.params.get("dataset").and_then(Json::as_str) == Some(ds)
    })
}

/// The ratio of the two systems' median ops/s.
fn ratio_of_medians(results: &[RunResult], ds: &str, w: &str) -> Option<f64> {
    let a = find(results, ds, w, "ember-api")?.ops_per_sec();
    let b = find(results, ds, w, "sqlite")?.ops_per_sec();
    (b > 0.0).then(|| a / b)
}

/// The median of the per-run ratios: run `i` of both systems ran back to back, so their
/// ratio cancels what the shared machine's load did to both (set by [`paired_ratios`]).
fn ratio(results: &[RunResult], ds: &str, w: &str) -> Option<f64> {
    param(find(results, ds, w, "ember-api"), "ratio_to_sqlite")
}

/// [`ratio`] for `ember-sql`.
fn ratio_sql(results: &[RunResult], ds: &str, w: &str) -> Option<f64> {
    param(find(results, ds, w, "ember-sql"), "ratio_to_sqlite")
}

/// Puts into every ember-api and ember-sql result's params the median over runs of its ops/s ÷ SQLite's
/// in the same run (`ratio_to_sqlite`), with every run's ratio.
fn paired_ratios(results: &mut [RunResult]) {
    let sqlite: Vec<(String, Option<Json>, Vec<f64>)> = results
        .iter()
        .filter(|r| r.system == "sqlite")
        .map(|r| {
            (
                r.workload.clone(),
                r.params.get("dataset").cloned(),
                r.repeats.clone(),
            )
        })
        .collect();
    for r in results.iter_mut().filter(|r| r.system != "sqlite") {
        let Some((_, _, base)) = sqlite
            .iter()
            .find(|(w, d, _)| *w == r.workload && d.as_ref() == r.params.get("dataset"))
        else {
            continue;
        };
        let mut per_run: Vec<f64> = r
            .repeats
            .iter()
            .zip(base)
            .filter(|(_, b)| **b > 0.0)
            .map(|(a, b)| a / b)
            .collect();
        if per_run.is_empty() {
            continue;
        }
        r.params
            .insert("ratio_to_sqlite_per_run".into(), per_run.clone().into());
        per_run.sort_by(f64::total_cmp);
        let n = per_run.len();
        let median = if n % 2 == 1 {
            per_run[n / 2]
        } else {
            (per_run[n / 2 - 1] + per_run[n / 2]) / 2.0
        };
        r.params.insert("ratio_to_sqlite".into(), median.into());
    }
}

fn ratio_groups(results: &[RunResult], datasets: &[Dataset]) -> chart::Groups {
    let mut groups = Vec::new();
    for w in WORKLOADS {
        let vals: Vec<Option<f64>> = datasets
            .iter()
            .map(|d| ratio(results, &d.name, w))
            .collect();
        if vals.iter().any(Option::is_some) {
            groups.push((w.to_string(), vals));
        }
    }
    chart::Groups {
        series: datasets.iter().map(|d| d.name.clone()).collect(),
        groups,
    }
}

fn param(r: Option<&RunResult>, key: &str) -> Option<f64> {
    r?.params.get(key)?.as_f64()
}

/// The goal of a workload (paper 003 / issue 6): a ratio to reach, or none.
fn goal(w: &str) -> (Option<f64>, &'static str) {
    match w {
        "insert" => (Some(10.0), "≥ 10×"),
        "lookup" => (Some(2.0), "≥ 2×"),
        "key-range" => (Some(5.0), "≥ 5×"),
        "sql-q1" | "sql-q2" | "sql-q4" => (Some(1.0), "> 1×"),
        "sql-q3" | "sql-q5" => (None, "SQLite's B-tree may win"),
        _ => (None, "pages read ≤ 20%"),
    }
}

fn markdown(
    results: &[RunResult],
    datasets: &[Dataset],
    bw: &Bandwidth,
    second: &str,
    args: &Args,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## embeddb{}\n\n{}; {} build. Device (a file, 512-byte pages, no \
         sync): sequential write {:.0} MB/s ({:.0} MB/s {} pages a call), sequential read {:.0} \
         MB/s, random read {:.0} MB/s ({} pages). Ratios are ember-api (or ember-sql) ops/s ÷ SQLite ops/s (above 1: \
         EmberDB is faster): the median over runs of the two systems' ops/s in the same run \
         (run back to back), and the ratio of each system's median run; goals are judged on \
         ember-api's first.\n",
        if args.quick { " (--quick)" } else { "" },
        report::machine_line(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        bw.seq_write / 1e6,
        bw.seq_write_batched / 1e6,
        bw.batch,
        bw.seq_read / 1e6,
        bw.rand_read / 1e6,
        bw.pages
    );
    s.push_str(
        "| data set | workload | ember-api ops/s | ember-sql ops/s | sqlite ops/s \
         | ratio (median of runs) | ratio of medians | ember-sql ratio | p50 µs ember / sql / sqlite \
         | goal | met |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for d in datasets {
        for w in WORKLOADS {
            let (a, e, b) = (
                find(results, &d.name, w, "ember-api"),
                find(results, &d.name, w, "ember-sql"),
                find(results, &d.name, w, "sqlite"),
            );
            if a.is_none() && b.is_none() {
                continue;
            }
            let ops =
                |r: Option<&RunResult>| r.map_or("–".into(), |r| report::num(r.ops_per_sec()));
            let p50 = |r: Option<&RunResult>| r.map_or("–".into(), |r| report::num(r.p50_us));
            let ra = ratio(results, &d.name, w);
            let (g, gtext) = goal(w);
            let met = match (w, g, ra) {
                ("data-range", _, _) => param(a, "pages_read_fraction").map_or("–".into(), |f| {
                    format!(
                        "{} ({:.1}% of pages)",
                        if f <= 0.2 { "yes" } else { "no" },
                        100.0 * f
                    )
                }),
                ("lookup", Some(g), Some(x)) => {
                    let reads = param(a, "page_reads_per_lookup");
                    let ok = x >= g && reads.is_some_and(|r| r <= 1.3);
                    format!(
                        "{} ({} page reads per lookup, goal ≤ 1.3)",
                        if ok { "yes" } else { "no" },
                        reads.map_or("–".into(), |r| format!("{r:.3}"))
                    )
                }
                (_, Some(g), Some(x)) => if x > g || (g > 1.0 && x >= g) {
                    "yes"
                } else {
                    "no"
                }
                .into(),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {w} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {gtext} | {met} |",
                d.name,
                ops(a),
                ops(e),
                ops(b),
                ra.map_or("–".into(), report::num),
                ratio_of_medians(results, &d.name, w).map_or("–".into(), report::num),
                ratio_sql(results, &d.name, w).map_or("–".into(), report::num),
                p50(a),
                p50(e),
                p50(b),
            );
        }
    }
    s.push_str(
        "\n| data set | records | value column | engine RAM B (state + buffers + spline) \
         | spline points | page reads / lookup | data range: records selected, pages read \
         | inserts: share of theoretical max (ember / sqlite) |\n\
         |---|---:|---:|---:|---:|---:|---|---|\n",
    );
    for d in datasets {
        let ins = |sys| find(results, &d.name, "insert", sys);
        let any = WORKLOADS
            .iter()
            .find_map(|w| find(results, &d.name, w, "ember-api"));
        let dr = find(results, &d.name, "data-range", "ember-api");
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            d.name,
            d.records.len(),
            param(any, "value_column").map_or("–".into(), |c| format!("{c:.0}")),
            param(any, "ram_bytes").map_or("–".into(), |x| format!("{x:.0}")),
            param(any, "spline_points").map_or("–".into(), |x| format!("{x:.0}")),
            param(
                find(results, &d.name, "lookup", "ember-api"),
                "page_reads_per_lookup"
            )
            .map_or("–".into(), |x| format!("{x:.3}")),
            match (
                param(dr, "selected_fraction"),
                param(dr, "pages_read_fraction")
            ) {
                (Some(sf), Some(pf)) => format!("{:.3}%, {:.1}%", 100.0 * sf, 100.0 * pf),
                _ => "–".into(),
            },
            param(ins("ember-api"), "share_of_theoretical_max")
                .map_or("–".into(), |x| format!("{:.1}%", 100.0 * x)),
            param(ins("sqlite"), "share_of_theoretical_max")
                .map_or("–".into(), |x| format!("{:.1}%", 100.0 * x)),
        );
    }
    if !second.is_empty() {
        let _ = writeln!(s, "\nQuery 4's second station: {second}.");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_compare_with_a_tolerance_and_sort() {
        let mut a: Answer = vec![vec![2.0, 1.0], vec![1.0, 5.0]];
        sort_answer(&mut a);
        assert_eq!(a[0], vec![1.0, 5.0]);
        let b: Answer = vec![vec![1.0, 5.0 + 1e-12], vec![2.0, 1.0]];
        assert!(same_answer(&a, &b));
        let c: Answer = vec![vec![1.0, 5.1], vec![2.0, 1.0]];
        assert!(!same_answer(&a, &c));
        assert!(!same_answer(&a, &a[..1].to_vec()));
    }

    #[test]
    fn a_bad_data_set_file_is_an_error() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let p = tmp.path().join("bad.bin");
        let mut page = vec![0u8; PAGE];
        page[4] = 40; // 40 records do not fit a 512-byte page
        fs::write(&p, &page)?;
        assert!(read_records(&p).is_err());
        // Keys that do not ascend.
        let mut page = vec![0u8; PAGE];
        page[4] = 2;
        page[16..20].copy_from_slice(&5u32.to_le_bytes());
        page[32..36].copy_from_slice(&5u32.to_le_bytes());
        fs::write(&p, &page)?;
        assert!(load_dataset(&p, None).is_err());
        Ok(())
    }

    /// An in-memory system with one deliberate fault, to show the driver catches it.
    struct Faulty {
        recs: Vec<Rec>,
        fault: &'static str,
    }

    impl Bench for Faulty {
        fn name(&self) -> &'static str {
            "faulty"
        }
        fn engine(&self) -> &'static str {
            "test"
        }
        fn params(&self) -> Map<String, Json> {
            Map::new()
        }
        fn insert(&mut self, recs: &[Rec]) -> Result<()> {
            self.recs.extend_from_slice(recs);
            Ok(())
        }
        fn finish_insert(&mut self) -> Result<()> {
            Ok(())
        }
        fn lookup(&mut self, key: u64) -> Result<Option<[i32; 3]>> {
            let i = self.recs.binary_search_by_key(&key, |r| r.0).ok();
            let off = usize::from(self.fault == "lookup");
            Ok(i.and_then(|i| self.recs.get(i + off)).map(|r| r.1))
        }
        fn key_range(&mut self, lo: u64, hi: u64, f: &mut dyn FnMut(u64, [i32; 3])) -> Result<()> {
            let skip = usize::from(self.fault == "key-range");
            for r in self
                .recs
                .iter()
                .filter(|r| (lo..=hi).contains(&r.0))
                .skip(skip)
            {
                f(r.0, r.1);
            }
            Ok(())
        }
        fn data_range(
            &mut self,
            col: usize,
            lo: i32,
            hi: i32,
            f: &mut dyn FnMut(u64, [i32; 3]),
        ) -> Result<()> {
            let skip = usize::from(self.fault == "data-range");
            for r in self
                .recs
                .iter()
                .filter(|r| (lo..=hi).contains(&r.1[col]))
                .skip(skip)
            {
                f(r.0, r.1);
            }
            Ok(())
        }
        fn load_second_station(&mut self, _: &[Rec]) -> Result<()> {
            Ok(())
        }
        fn query(&mut self, _: Q) -> Result<Answer> {
            Ok(vec![vec![self.recs.len() as f64]])
        }
        fn io(&mut self) -> Option<IoStats> {
            None
        }
        fn state(&self) -> Map<String, Json> {
            Map::new()
        }
    }

    #[test]
    fn a_wrong_answer_fails_the_run() {
        let recs: Vec<Rec> = (0..2_000u64)
            .map(|k| (3 * k, [k as i32 % 97, (k * k % 1009) as i32, k as i32]))
            .collect();
        let ds = Dataset {
            name: "synthetic".into(),
            lookup: recs.iter().rev().map(|r| r.0).collect(),
            records: recs,
            lookup_source: "reversed".into(),
        };
        let w = Work::new(&ds, Sizes::new(true), vec![], None);
        let bw = Bandwidth {
            seq_write: 1e8,
            seq_write_batched: 1e8,
            batch: 1,
            seq_read: 1e8,
            rand_read: 1e8,
            pages: 1,
        };
        let all = |_: &str| true;
        let mut ok = Faulty {
            recs: Vec::new(),
            fault: "",
        };
        assert_eq!(
            run_system(&mut ok, &w, &bw, &all)
                .map(|o| o.results.len())
                .ok(),
            Some(4)
        );
        for fault in ["lookup", "key-range", "data-range"] {
            let mut bad = Faulty {
                recs: Vec::new(),
                fault,
            };
            let e = run_system(&mut bad, &w, &bw, &all)
                .err()
                .map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.starts_with(fault)),
                "{fault}: {e:?}"
            );
        }
        // Two systems that disagree on a Table 3 answer.
        let a = vec![(Q::DailyTemp, vec![vec![1.0, 2.0]])];
        let b = vec![(Q::DailyTemp, vec![vec![1.0, 2.5]])];
        assert!(check_answers("d", &[("x", a.clone()), ("y", a.clone())]).is_ok());
        assert!(check_answers("d", &[("x", a), ("y", b)]).is_err());
    }

    /// The quick mode on a slice of one data set: every workload × system is in the JSON,
    /// with the fields the harness's format names.
    #[test]
    fn quick_run_on_a_slice_has_every_workload_and_system() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let file = default_dir().join("uwa500K_only_100K.bin");
        assert!(
            file.is_file(),
            "the EmbedDB data sets are missing: expected {} (shared/ beside the repository)",
            file.display()
        );
        let args = Args {
            quick: true,
            out: tmp.path().join("out"),
            only: vec![],
            datasets: vec![file],
            sea: None,
            records: Some(3_000),
            page_bytes: PAGE,
            read_pages: READ_PAGES,
            write_pages: WRITE_PAGES,
            repeat: Some(2),
            dir: tmp.path().join("scratch"),
            verbose: false,
        };
        let md = main(&args)?;
        assert!(md.contains("uwa500K_only_100K"), "{md}");
        let doc: Json = serde_json::from_str(&fs::read_to_string(args.out.join("embeddb.json"))?)?;
        assert_eq!(doc["suite"], "embeddb");
        assert!(doc["machine"]["cores"].as_u64().is_some_and(|c| c > 0));
        let results = doc["results"].as_array().ok_or("no results")?;
        let mut seen = HashSet::new();
        for r in results {
            crate::report::assert_result_fields(r);
            assert_eq!(r["params"]["dataset"], "uwa500K_only_100K");
            assert_eq!(r["params"]["records"], 3_000);
            let sys = r["system"].as_str().ok_or("system")?;
            let engine = if sys == "ember-api" || sys == "ember-sql" {
                "timeseries"
            } else {
                "sqlite"
            };
            assert_eq!(r["engine"], engine);
            assert!(
                seen.insert(format!("{} {sys}", r["workload"].as_str().ok_or("w")?)),
                "duplicate {r}"
            );
            if sys == "ember-api" {
                assert!(r["params"]["ram_bytes"].as_u64().is_some_and(|x| x > 0));
            }
            if sys != "sqlite" {
                // Two runs, two paired ratios, and their median.
                let per_run = r["params"]["ratio_to_sqlite_per_run"].as_array();
                assert_eq!(per_run.map(Vec::len), Some(2), "{r}");
                assert!(
                    r["params"]["ratio_to_sqlite"]
                        .as_f64()
                        .is_some_and(|x| x > 0.0)
                );
            }
        }
        for w in WORKLOADS {
            for s in SYSTEMS {
                assert!(seen.contains(&format!("{w} {s}")), "{w} on {s} missing");
            }
        }
        assert_eq!(results.len(), WORKLOADS.len() * SYSTEMS.len());
        let ember = |w: &str| {
            results
                .iter()
                .find(|r| r["workload"] == w && r["system"] == "ember-api")
                .map(|r| r["params"].clone())
                .unwrap_or(Json::Null)
        };
        assert!(ember("lookup")["page_reads_per_lookup"].as_f64().is_some());
        assert!(
            ember("data-range")["pages_read_fraction"]
                .as_f64()
                .is_some()
        );
        assert!(
            ember("insert")["theoretical_max_inserts_per_sec"]
                .as_f64()
                .is_some()
        );
        assert!(args.out.join("embeddb-vs-sqlite.svg").exists());
        assert!(args.out.join("embeddb.md").exists());
        assert!(md.contains("ember-sql ops/s"), "{md}");
        Ok(())
    }
}
