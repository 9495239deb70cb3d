//! The `sqlitekv` suite: the SQLiteKV paper's evaluation (§IV; thesis ch. 4) on EmberDB's
//! `lsm` engine through SQL, against EmberDB's `table` engine through SQL, SQLite, EmberDB's
//! LSM engine through its own API (`ember_lsm::Db`) and fjall through its own API.
//!
//! A table of an 8-byte integer key and one value of `item_size` bytes (random, so nothing
//! compresses): `CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB) [USING lsm]`; the key-value
//! systems store the key's 8 big-endian bytes → the value. Every operation is its own
//! transaction (autocommit), SQL through prepared statements (`INSERT INTO t VALUES (?1, ?2)`,
//! `UPDATE t SET v = ?2 WHERE k = ?1`, `SELECT v FROM t WHERE k = ?1`).
//!
//! | workload | populate (untimed) | timed operations |
//! |---|---|---|
//! | update-heavy | N rows | 50% reads, 50% updates; keys Zipfian (0.99, scrambled) |
//! | read-most | N rows | 95% reads, 5% updates; Zipfian |
//! | read-heavy | N rows | reads only; Zipfian |
//! | read-latest | N rows | 5% reads, 95% inserts of new keys; reads of `latest − Zipfian rank` |
//! | insert-seq | – | N inserts, keys ascending |
//! | insert-rand | – | N inserts, keys in random order (a permutation) |
//! | query-seq | N rows | N point reads, keys ascending |
//! | query-rand | N rows | N point reads, keys in random order (a permutation) |
//!
//! The mixes are the paper's Table I (its read-latest is 5% queries, 95% inserts). N is
//! 100,000 by default (the paper's 100,000 populate + 100,000 requests), the populate goes in
//! random key order in transactions of 1,000; then each system settles (the flushes and
//! compactions the load left run before the timed part: EmberDB's `settle`, fjall until no
//! compaction has run for 200 ms; `settle_seconds` in the JSON). `sync` runs N/100 operations (each write synced,
//! about 5 ms a sync on this disk), `async` N. Every system gets the same RAM for data: 8 MiB
//! (SQLite `cache_size`, the table engine's block cache, the LSM engine's `memory_budget`,
//! fjall's block cache plus two 1 MiB memtables). `cache = on` rows add the coordination
//! cache ([`ember::OpenOptions::lsm_cache_bytes`]) to EmberDB lsm through SQL; every other
//! row has no result cache.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ember_device::SplitMix64;
use ember_device::file::FileBlock;
use rusqlite::types::ValueRef;
use serde_json::{Map, Value as Json, json};

use crate::chart;
use crate::dbbench::permutation;
use crate::measure::{Latencies, ProcIo, Result};
use crate::report::{self, RunResult};
use crate::stores::Durability;
use crate::suite::{self, Job, Measured, SuiteArgs};
use crate::zipf::Zipfian;

/// Bytes of data every system may keep in RAM.
pub const RAM_BYTES: usize = 8 << 20;
/// Size of EmberDB's (sparse) image files.
const IMAGE_BYTES: u64 = 8 << 30;
/// Rows per populate transaction.
const BATCH: usize = 1000;
/// YCSB's Zipfian constant.
pub const THETA: f64 = 0.99;

/// The workloads, in the paper's order.
pub const WORKLOADS: [&str; 8] = [
    "update-heavy",
    "read-most",
    "read-heavy",
    "read-latest",
    "insert-seq",
    "insert-rand",
    "query-seq",
    "query-rand",
];

/// Item sizes by default (the paper's range, every other step).
pub const SIZES: [usize; 4] = [64, 256, 1024, 4096];
/// Item sizes with --quick.
pub const QUICK_SIZES: [usize; 2] = [64, 1024];

/// Arguments of `ember-bench sqlitekv`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The options every paper suite takes.
    #[command(flatten)]
    pub common: SuiteArgs,
    /// Item (value) sizes in bytes, repeatable [default: 64, 256, 1024, 4096; --quick: 64,
    /// 1024].
    #[arg(long = "item-size", value_name = "BYTES")]
    pub item_sizes: Vec<usize>,
    /// Bytes of the coordination cache in the `cache = on` rows (0: no such rows).
    #[arg(long, default_value_t = 8 << 20)]
    pub cache_bytes: usize,
}

/// A system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sys {
    /// EmberDB through SQL, `USING lsm`.
    SqlLsm,
    /// EmberDB through SQL, the table engine.
    SqlTable,
    /// EmberDB's LSM engine through its API, in a table-engine database's space.
    ApiLsm,
    /// SQLite (rusqlite, bundled).
    Sqlite,
    /// fjall through its API.
    Fjall,
}

impl Sys {
    /// Every system, in the tables' order.
    pub const ALL: [Sys; 5] = [
        Sys::SqlLsm,
        Sys::SqlTable,
        Sys::ApiLsm,
        Sys::Sqlite,
        Sys::Fjall,
    ];

    /// The `system` field.
    pub fn name(self) -> &'static str {
        match self {
            Sys::SqlLsm | Sys::SqlTable => "ember-sql",
            Sys::ApiLsm => "ember-api",
            Sys::Sqlite => "sqlite",
            Sys::Fjall => "fjall",
        }
    }

    /// The harness's nearest system (for its progress bar; `main` sets the real fields).
    fn harness(self) -> crate::stores::System {
        use crate::stores::System;
        match self {
            Sys::SqlLsm | Sys::SqlTable => System::EmberSql,
            Sys::ApiLsm => System::EmberApi,
            Sys::Sqlite => System::Sqlite,
            Sys::Fjall => System::Fjall,
        }
    }

    /// The `engine` field.
    pub fn engine(self) -> &'static str {
        match self {
            Sys::SqlLsm | Sys::ApiLsm => "lsm",
            Sys::SqlTable => "table",
            Sys::Sqlite => "sqlite",
            Sys::Fjall => "fjall",
        }
    }
}

/// A system and its result cache (0: off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The system.
    pub sys: Sys,
    /// Coordination cache bytes (only [`Sys::SqlLsm`] has one).
    pub cache: usize,
}

impl Config {
    /// A short unique label: `ember-sql-lsm`, `ember-sql-lsm-cache`, `ember-sql-table`,
    /// `ember-api-lsm`, `sqlite`, `fjall`.
    pub fn label(self) -> String {
        let base = match self.sys {
            Sys::SqlLsm | Sys::SqlTable | Sys::ApiLsm => {
                format!("{}-{}", self.sys.name(), self.sys.engine())
            }
            Sys::Sqlite | Sys::Fjall => self.sys.name().to_string(),
        };
        if self.cache > 0 {
            base + "-cache"
        } else {
            base
        }
    }
}

/// One job's setup.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    workload: &'static str,
    config: Config,
    item: usize,
    populate: u64,
    ops: u64,
    seed: u64,
}

/// The configurations to run.
fn configs(args: &Args) -> Vec<Config> {
    let mut v = Vec::new();
    for sys in Sys::ALL {
        v.push(Config { sys, cache: 0 });
        if sys == Sys::SqlLsm && args.cache_bytes > 0 {
            v.push(Config {
                sys,
                cache: args.cache_bytes,
            });
        }
    }
    v.retain(|c| {
        let s = &args.common.systems;
        s.is_empty() || s.iter().any(|x| *x == c.label() || x == c.sys.name())
    });
    v
}

/// The jobs `args` asks for: every workload × item size × durability × configuration.
pub fn jobs(args: &Args) -> Vec<Job<Spec>> {
    let n = args.common.size(100_000, 4_000);
    let sizes: Vec<usize> = if !args.item_sizes.is_empty() {
        args.item_sizes.clone()
    } else if args.common.quick {
        QUICK_SIZES.to_vec()
    } else {
        SIZES.to_vec()
    };
    let mut jobs = Vec::new();
    for workload in WORKLOADS {
        if !args.common.wants(workload) {
            continue;
        }
        for &item in &sizes {
            for d in [Durability::Sync, Durability::Async] {
                if !args.common.wants_durability(d) {
                    continue;
                }
                let ops = match d {
                    Durability::Sync => (n / 100).max(1),
                    Durability::Async => n,
                };
                let populate = if workload.starts_with("insert") { 0 } else { n };
                for config in configs(args) {
                    let mut params = Map::new();
                    params.insert("item_size".into(), item.into());
                    params.insert("key_bytes".into(), 8.into());
                    params.insert(
                        "cache".into(),
                        if config.cache > 0 { "on" } else { "off" }.into(),
                    );
                    params.insert("cache_bytes".into(), config.cache.into());
                    params.insert("populate".into(), populate.into());
                    params.insert("operations".into(), ops.into());
                    params.insert("label".into(), config.label().into());
                    params.extend(setup(config, d));
                    jobs.push(Job {
                        // What the progress bar shows; `main` puts the plain name back.
                        workload: format!("{workload} {item} B {}", config.label()),
                        system: config.sys.harness(),
                        durability: d,
                        params,
                        spec: Spec {
                            workload,
                            config,
                            item,
                            populate,
                            ops,
                            seed: 0x5b1e_0007,
                        },
                    });
                }
            }
        }
    }
    jobs
}

/// How a system is set up at a durability (goes into `params`).
fn setup(c: Config, d: Durability) -> Map<String, Json> {
    let sync = d == Durability::Sync;
    let p = match c.sys {
        Sys::SqlLsm | Sys::SqlTable => json!({
            "api": "ember::Connection, prepared statements",
            "mode": if sync { "full" } else { "metadata" },
            "cache_bytes_table": RAM_BYTES,
            "lsm_memory_bytes": RAM_BYTES,
            "query_cache_bytes": 0,
            "device": "file image, sparse",
        }),
        Sys::ApiLsm => json!({
            "api": "ember_lsm::Db put/get/write (sync flag per commit), a background thread \
                    for flushes and compactions (as the SQL front end runs it)",
            "env": "SpaceEnv over ember_table::Database on a file image",
            "mode": if sync { "full" } else { "metadata" },
            "lsm_memory_bytes": RAM_BYTES,
        }),
        Sys::Sqlite => json!({
            "api": "rusqlite, cached prepared statements",
            "journal_mode": "wal",
            "synchronous": if sync { "full" } else { "off" },
            "cache_size_bytes": RAM_BYTES,
            "sqlite_version": rusqlite::version(),
        }),
        Sys::Fjall => json!({
            "api": "fjall 2 Keyspace/Partition",
            "persist": if sync { "PersistMode::SyncData after each commit" } else { "none" },
            "cache_bytes": RAM_BYTES - (2 << 20),
            "max_memtable_size": 1 << 20,
            "max_write_buffer_size": 2 << 20,
        }),
    };
    match p {
        Json::Object(m) => m,
        _ => Map::new(),
    }
}

// ----- the systems --------------------------------------------------------------------------

/// One open database.
trait Kv {
    /// Inserts a new row (its own transaction).
    fn insert(&mut self, k: u64, v: &[u8]) -> Result<()>;
    /// Replaces an existing row's value (its own transaction).
    fn update(&mut self, k: u64, v: &[u8]) -> Result<()>;
    /// Reads a row; returns its value's length (an error if it is missing).
    fn get(&mut self, k: u64) -> Result<usize>;
    /// Inserts rows in one transaction.
    fn insert_batch(&mut self, rows: &[(u64, &[u8])]) -> Result<()>;
    /// Waits for background work the load left (flushes, compactions) where the system
    /// says when it is done.
    fn settle(&mut self) -> Result<()> {
        Ok(())
    }
    /// Closes.
    fn close(self: Box<Self>) -> Result<()>;
}

fn open(c: Config, d: Durability, dir: &Path) -> Result<Box<dyn Kv>> {
    Ok(match c.sys {
        Sys::SqlLsm | Sys::SqlTable => Box::new(EmberSql::create(c, d, dir)?),
        Sys::ApiLsm => Box::new(EmberApi::create(d, dir)?),
        Sys::Sqlite => Box::new(Sqlite::create(d, dir)?),
        Sys::Fjall => Box::new(Fjall::create(d, dir)?),
    })
}

const INSERT: &str = "INSERT INTO t VALUES (?1, ?2)";
const UPDATE: &str = "UPDATE t SET v = ?2 WHERE k = ?1";
const SELECT: &str = "SELECT v FROM t WHERE k = ?1";

struct EmberSql {
    conn: ember::Connection,
}

impl EmberSql {
    fn create(c: Config, d: Durability, dir: &Path) -> Result<EmberSql> {
        let opts = ember::OpenOptions {
            mode: match d {
                Durability::Sync => ember::Mode::Full,
                Durability::Async => ember::Mode::Metadata,
            },
            capacity: IMAGE_BYTES,
            cache_bytes: RAM_BYTES,
            query_cache_bytes: 0,
            lsm_memory_bytes: RAM_BYTES,
            lsm_cache_bytes: c.cache,
            lsm_background: true,
        };
        let conn = ember::Connection::open_with(dir.join("ember.img"), opts)?;
        let using = if c.sys == Sys::SqlLsm {
            " USING lsm"
        } else {
            ""
        };
        conn.execute_batch(&format!(
            "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB){using}"
        ))?;
        Ok(EmberSql { conn })
    }
}

impl Kv for EmberSql {
    fn settle(&mut self) -> Result<()> {
        Ok(self.conn.settle()?)
    }

    // Parameters borrowed, as SQLite's are (the connection copies them into the buffers of
    // the last statement's).
    fn insert(&mut self, k: u64, v: &[u8]) -> Result<()> {
        self.conn.prepare(INSERT)?.execute((k as i64, v))?;
        Ok(())
    }

    fn update(&mut self, k: u64, v: &[u8]) -> Result<()> {
        let n = self.conn.prepare(UPDATE)?.execute((k as i64, v))?;
        if n != 1 {
            return Err(format!("ember-sql: update of key {k} changed {n} rows").into());
        }
        Ok(())
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        let mut st = self.conn.prepare(SELECT)?;
        let mut rows = st.query(vec![ember::Value::Integer(k as i64)])?;
        // Borrowed, as SQLite's `get_ref`: the value is measured where it lies.
        match rows.next()?.map(|r| r.values().first()) {
            Some(Some(ember::Value::Blob(b))) => Ok(b.len()),
            other => Err(format!("ember-sql: key {k}: {other:?}").into()),
        }
    }

    fn insert_batch(&mut self, rows: &[(u64, &[u8])]) -> Result<()> {
        self.conn.execute_batch("BEGIN")?;
        for &(k, v) in rows {
            self.insert(k, v)?;
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.conn.close()?;
        Ok(())
    }
}

type ApiDb = ember_lsm::Db<ember_lsm::SpaceEnv<ember_table::Database<FileBlock>>>;

struct EmberApi {
    db: ApiDb,
    sync: bool,
}

impl EmberApi {
    fn create(d: Durability, dir: &Path) -> Result<EmberApi> {
        let file = FileBlock::create(dir.join("ember-api.img"), IMAGE_BYTES)?;
        let sync = d == Durability::Sync;
        let opts = ember_table::Options {
            mode: if sync {
                ember_table::Mode::Full
            } else {
                ember_table::Mode::Metadata
            },
            ..ember_table::Options::default()
        };
        let tdb = ember_table::Database::create(file, opts)?;
        let env = ember_lsm::SpaceEnv::create(tdb, 64 << 10)?;
        let mut db = ember_lsm::Db::create(env, ember_lsm::Options::with_budget(RAM_BYTES))?;
        db.start_background();
        Ok(EmberApi { db, sync })
    }
}

impl Kv for EmberApi {
    fn settle(&mut self) -> Result<()> {
        Ok(self.db.settle()?)
    }

    fn insert(&mut self, k: u64, v: &[u8]) -> Result<()> {
        self.db.put(&k.to_be_bytes(), v, self.sync)?;
        Ok(())
    }

    fn update(&mut self, k: u64, v: &[u8]) -> Result<()> {
        self.insert(k, v)
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        match self.db.get(&k.to_be_bytes())? {
            Some(v) => Ok(v.len()),
            None => Err(format!("ember-api: key {k} not found").into()),
        }
    }

    fn insert_batch(&mut self, rows: &[(u64, &[u8])]) -> Result<()> {
        let mut b = ember_lsm::WriteBatch::new();
        for &(k, v) in rows {
            b.put(k.to_be_bytes(), v);
        }
        self.db.write(b, self.sync)?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        let env = self.db.close()?;
        env.into_space().close()?;
        Ok(())
    }
}

struct Sqlite {
    conn: rusqlite::Connection,
}

impl Sqlite {
    fn create(d: Durability, dir: &Path) -> Result<Sqlite> {
        let conn = crate::stores::open_sqlite(dir, d)?;
        // A negative cache_size is KiB.
        conn.pragma_update(None, "cache_size", -((RAM_BYTES >> 10) as i64))?;
        conn.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")?;
        Ok(Sqlite { conn })
    }
}

impl Kv for Sqlite {
    fn insert(&mut self, k: u64, v: &[u8]) -> Result<()> {
        let mut st = self.conn.prepare_cached(INSERT)?;
        st.execute(rusqlite::params![k as i64, v])?;
        Ok(())
    }

    fn update(&mut self, k: u64, v: &[u8]) -> Result<()> {
        let mut st = self.conn.prepare_cached(UPDATE)?;
        let n = st.execute(rusqlite::params![k as i64, v])?;
        if n != 1 {
            return Err(format!("sqlite: update of key {k} changed {n} rows").into());
        }
        Ok(())
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        let mut st = self.conn.prepare_cached(SELECT)?;
        let mut rows = st.query([k as i64])?;
        let Some(row) = rows.next()? else {
            return Err(format!("sqlite: key {k} not found").into());
        };
        match row.get_ref(0)? {
            ValueRef::Blob(b) => Ok(b.len()),
            other => Err(format!("sqlite: key {k}: {other:?}").into()),
        }
    }

    fn insert_batch(&mut self, rows: &[(u64, &[u8])]) -> Result<()> {
        self.conn.prepare_cached("BEGIN")?.execute([])?;
        for &(k, v) in rows {
            self.insert(k, v)?;
        }
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.conn.close().map_err(|(_, e)| e)?;
        Ok(())
    }
}

struct Fjall {
    ks: fjall::Keyspace,
    part: fjall::PartitionHandle,
    sync: bool,
}

impl Fjall {
    fn create(d: Durability, dir: &Path) -> Result<Fjall> {
        let ks = fjall::Config::new(dir.join("fjall"))
            .cache_size((RAM_BYTES - (2 << 20)) as u64)
            .max_write_buffer_size(2 << 20)
            .open()?;
        let part = ks.open_partition(
            "t",
            fjall::PartitionCreateOptions::default().max_memtable_size(1 << 20),
        )?;
        Ok(Fjall {
            ks,
            part,
            sync: d == Durability::Sync,
        })
    }

    fn persist(&self) -> Result<()> {
        if self.sync {
            self.ks.persist(fjall::PersistMode::SyncData)?;
        }
        Ok(())
    }
}

impl Kv for Fjall {
    fn insert(&mut self, k: u64, v: &[u8]) -> Result<()> {
        self.part.insert(k.to_be_bytes(), v)?;
        self.persist()
    }

    fn update(&mut self, k: u64, v: &[u8]) -> Result<()> {
        self.insert(k, v)
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        match self.part.get(k.to_be_bytes())? {
            Some(v) => Ok(v.len()),
            None => Err(format!("fjall: key {k} not found").into()),
        }
    }

    fn insert_batch(&mut self, rows: &[(u64, &[u8])]) -> Result<()> {
        let mut b = self.ks.batch();
        for &(k, v) in rows {
            b.insert(&self.part, k.to_be_bytes(), v);
        }
        b.commit()?;
        self.persist()
    }

    /// fjall says how many compactions run, not how many are due: done when none has run
    /// for 200 ms.
    fn settle(&mut self) -> Result<()> {
        let mut quiet = 0;
        while quiet < 10 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            quiet = if self.ks.active_compactions() == 0 {
                quiet + 1
            } else {
                0
            };
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.ks.persist(fjall::PersistMode::SyncAll)?;
        Ok(())
    }
}

// ----- workloads ----------------------------------------------------------------------------

/// Random, incompressible values: a pool read `item` bytes at a time from a moving position.
struct Values {
    pool: Vec<u8>,
    at: usize,
    item: usize,
}

impl Values {
    fn new(item: usize, seed: u64) -> Values {
        let mut rng = SplitMix64::new(seed);
        let len = (4 << 20).max(4 * item);
        let mut pool = Vec::with_capacity(len + 8);
        while pool.len() < len {
            pool.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        Values { pool, at: 0, item }
    }

    fn next(&mut self) -> &[u8] {
        // Step by a prime so consecutive values differ even for items dividing the pool.
        if self.at + self.item > self.pool.len() {
            self.at %= 61;
        }
        let v = &self.pool[self.at..self.at + self.item];
        self.at += self.item + 1;
        v
    }
}

/// One timed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read(u64),
    Update(u64),
    Insert(u64),
}

/// The share of reads and whether writes are inserts of new keys, per mix.
fn mix(workload: &str) -> Option<(f64, bool)> {
    Some(match workload {
        "update-heavy" => (0.5, false),
        "read-most" => (0.95, false),
        "read-heavy" => (1.0, false),
        "read-latest" => (0.05, true),
        _ => return None,
    })
}

/// The timed operations of a job, drawn before the timed loop.
fn plan(s: &Spec) -> Vec<Op> {
    let n = s.populate;
    match s.workload {
        "insert-seq" => (0..s.ops).map(Op::Insert).collect(),
        "insert-rand" => permutation(s.ops, s.seed ^ 0x1a5e)
            .into_iter()
            .map(Op::Insert)
            .collect(),
        "query-seq" => (0..s.ops).map(|i| Op::Read(i % n.max(1))).collect(),
        "query-rand" => {
            let p = permutation(n.max(1), s.seed ^ 0x9e7);
            (0..s.ops as usize)
                .map(|i| Op::Read(p[i % p.len()]))
                .collect()
        }
        w => {
            let (reads, inserts) = mix(w).unwrap_or((1.0, false));
            let mut zipf = Zipfian::new(n.max(1), THETA, s.seed ^ 0x21bf);
            let mut coin = SplitMix64::new(s.seed ^ 0xc017);
            let mut next_key = n;
            (0..s.ops)
                .map(|_| {
                    let u = (coin.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    let read = u < reads;
                    if inserts {
                        if read {
                            // YCSB's "latest": the newest key minus a Zipfian rank.
                            let latest = next_key - 1;
                            Op::Read(latest.saturating_sub(zipf.next_rank()))
                        } else {
                            next_key += 1;
                            Op::Insert(next_key - 1)
                        }
                    } else if read {
                        Op::Read(zipf.next_scrambled())
                    } else {
                        Op::Update(zipf.next_scrambled())
                    }
                })
                .collect()
        }
    }
}

/// Runs one job on a fresh database in `dir`.
pub fn run(job: &Job<Spec>, dir: &Path) -> Result<Measured> {
    let s = job.spec;
    let mut st = open(s.config, job.durability, dir)?;
    let mut values = Values::new(s.item, s.seed);
    let mut extra = Map::new();
    let t = Instant::now();
    let order = permutation(s.populate, s.seed ^ 0x10ad);
    for chunk in order.chunks(BATCH) {
        let vals: Vec<Vec<u8>> = chunk.iter().map(|_| values.next().to_vec()).collect();
        let rows: Vec<(u64, &[u8])> = chunk
            .iter()
            .zip(&vals)
            .map(|(&k, v)| (k, v.as_slice()))
            .collect();
        st.insert_batch(&rows)?;
    }
    extra.insert("load_seconds".into(), t.elapsed().as_secs_f64().into());
    let t = Instant::now();
    st.settle()?;
    extra.insert("settle_seconds".into(), t.elapsed().as_secs_f64().into());

    let plan = plan(&s);
    let writes = plan.iter().filter(|o| !matches!(o, Op::Read(_))).count() as u64;
    let io0 = ProcIo::read();
    let mut lat = Latencies::with_capacity(plan.len());
    let start = Instant::now();
    for &op in &plan {
        match op {
            Op::Read(k) => {
                let got = lat.time(|| st.get(k))?;
                if got != s.item {
                    return Err(format!("key {k} has {got} bytes, not {}", s.item).into());
                }
            }
            Op::Update(k) => {
                let v = values.next();
                lat.time(|| st.update(k, v))?;
            }
            Op::Insert(k) => {
                let v = values.next();
                lat.time(|| st.insert(k, v))?;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    st.close()?;
    let proc_io = ProcIo::delta(io0);
    extra.insert("writes".into(), writes.into());
    extra.insert("reads".into(), (plan.len() as u64 - writes).into());
    Ok(Measured {
        lat,
        ops: plan.len() as u64,
        seconds,
        app_bytes: Some(writes * (8 + s.item as u64)),
        proc_io,
        accounted: None,
        extra,
    })
}

// ----- output -------------------------------------------------------------------------------

fn param<'a>(r: &'a RunResult, k: &str) -> &'a Json {
    r.params.get(k).unwrap_or(&Json::Null)
}

fn label(r: &RunResult) -> String {
    param(r, "label").as_str().unwrap_or(&r.system).to_string()
}

fn item(r: &RunResult) -> u64 {
    param(r, "item_size").as_u64().unwrap_or(0)
}

/// (workload, item size, durability) in the order they first appear.
fn row_keys(results: &[RunResult]) -> Vec<(String, u64, String)> {
    let mut v: Vec<(String, u64, String)> = Vec::new();
    for r in results {
        let k = (
            r.workload.clone(),
            item(r),
            suite::durability_of(r).to_string(),
        );
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}

fn find<'a>(
    results: &'a [RunResult],
    (w, i, d): &(String, u64, String),
    label_: &str,
) -> Option<&'a RunResult> {
    results.iter().find(|r| {
        r.workload == *w && item(r) == *i && suite::durability_of(r) == d && label(r) == label_
    })
}

fn ratio(a: Option<&RunResult>, b: Option<&RunResult>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b.ops_per_sec() > 0.0 => Some(a.ops_per_sec() / b.ops_per_sec()),
        _ => None,
    }
}

fn cell(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.2}×"))
}

/// The Markdown report: ops/s per (workload, item size, durability) of every configuration,
/// the ratios the goals name, then every row with latencies and bytes.
pub fn markdown(results: &[RunResult], notes: &str) -> String {
    let mut labels: Vec<String> = Vec::new();
    for r in results {
        let l = label(r);
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    let mut s = String::from("## ember-bench sqlitekv: the SQLiteKV evaluation\n\n");
    let _ = writeln!(
        s,
        "{}. ops/s of every configuration; ratios: lsm/SQLite and \
         table/SQLite are EmberDB through SQL ÷ SQLite, SQL/API is EmberDB lsm through SQL ÷ its \
         engine API, API/fjall is the engine API ÷ fjall, +cache/lsm is the lsm row with the \
         coordination cache ÷ without (all at the same durability and item size).\n",
        report::machine_line()
    );
    s.push_str("| workload | item B | durability |");
    for l in &labels {
        let _ = write!(s, " {l} |");
    }
    s.push_str(
        " lsm / SQLite | table / SQLite | SQL / API | API / fjall | +cache / lsm |\n|---|---:|---|",
    );
    for _ in &labels {
        s.push_str("---:|");
    }
    s.push_str("---:|---:|---:|---:|---:|\n");
    for key in row_keys(results) {
        let _ = write!(s, "| {} | {} | {} |", key.0, key.1, key.2);
        for l in &labels {
            let c = find(results, &key, l).map_or("–".into(), |r| report::num(r.ops_per_sec()));
            let _ = write!(s, " {c} |");
        }
        let f = |l: &str| find(results, &key, l);
        let lsm = f("ember-sql-lsm");
        let _ = writeln!(
            s,
            " **{}** | {} | {} | {} | {} |",
            cell(ratio(lsm, f("sqlite"))),
            cell(ratio(f("ember-sql-table"), f("sqlite"))),
            cell(ratio(lsm, f("ember-api-lsm"))),
            cell(ratio(f("ember-api-lsm"), f("fjall"))),
            cell(ratio(f("ember-sql-lsm-cache"), lsm)),
        );
    }
    s.push_str(
        "\nEvery row:\n\n| workload | item B | durability | configuration | ops | seconds | \
         ops/s | p50 µs | p99 µs | load s | app bytes | device bytes |\n\
         |---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let opt = |x: Option<u64>| x.map_or("–".into(), |x| x.to_string());
        let load = r
            .extra
            .get("load_seconds")
            .and_then(Json::as_f64)
            .map_or("–".into(), |x| format!("{x:.2}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {load} | {} | {} |",
            r.workload,
            item(r),
            suite::durability_of(r),
            label(r),
            r.ops,
            r.seconds,
            report::num(r.ops_per_sec()),
            report::num(r.p50_us),
            report::num(r.p99_us),
            opt(r.app_bytes),
            opt(r.device_bytes),
        );
    }
    s.push_str(notes);
    s
}

/// The chart: per durability, ops/s relative to SQLite of every configuration, one group per
/// (workload, item size) — absolute figures span three orders of magnitude.
fn charts(out: &Path, results: &[RunResult]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for d in ["async", "sync"] {
        let part: Vec<&RunResult> = results
            .iter()
            .filter(|r| suite::durability_of(r) == d)
            .collect();
        if part.is_empty() {
            continue;
        }
        let mut series: Vec<String> = Vec::new();
        for r in &part {
            let l = label(r);
            if !series.contains(&l) {
                series.push(l);
            }
        }
        let mut groups = Vec::new();
        for key in row_keys(results).into_iter().filter(|k| k.2 == d) {
            let base = find(results, &key, "sqlite").map_or(0.0, RunResult::ops_per_sec);
            let vals = series
                .iter()
                .map(|l| {
                    find(results, &key, l)
                        .filter(|_| base > 0.0)
                        .map(|r| r.ops_per_sec() / base)
                })
                .collect();
            groups.push((format!("{}/{} B", key.0, key.1), vals));
        }
        let path = out.join(format!("sqlitekv-{d}.svg"));
        chart::grouped_bars(
            &path,
            &format!("sqlitekv ({d}): throughput relative to SQLite"),
            "ops/s ÷ SQLite ops/s",
            &chart::Groups { series, groups },
        )?;
        paths.push(path);
    }
    Ok(paths)
}

const NOTES: &str = "
Notes: item B is the value's size (random bytes); the key is an 8-byte integer besides.
Populate (untimed): N rows in random key order, transactions of 1,000. Timed: every
operation its own transaction; sync runs N/100 operations, async N. Zipfian 0.99 (scrambled)
over the populated keys; read-latest reads the newest key minus a Zipfian rank. Device bytes
are /proc/self/io write_bytes over the timed loop and the close (the same counter for every
system). Every system has 8 MiB for data (see the JSON's params); `-cache` rows add the
coordination cache.
";

/// Runs `ember-bench sqlitekv`: the jobs, then `sqlitekv.json`, `sqlitekv.md` and the charts.
pub fn main(args: &Args) -> Result<String> {
    let jobs = jobs(args);
    let (mut results, mut extra) = suite::run_jobs("sqlitekv", &args.common, &jobs, run)?;
    // The harness describes systems by its own enum; ours come from the job (one result per
    // job, in job order).
    for (r, j) in results.iter_mut().zip(&jobs) {
        r.workload = j.spec.workload.into();
        r.system = j.spec.config.sys.name().into();
        r.engine = j.spec.config.sys.engine().into();
        r.params = j.params.clone();
        r.params
            .insert("durability".into(), j.durability.name().into());
    }
    extra.insert(
        "workloads".into(),
        Json::Array(WORKLOADS.iter().map(|w| json!(w)).collect()),
    );
    let out = &args.common.out;
    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    crate::report::write_json(&out.join("sqlitekv.json"), "sqlitekv", extra, &results)?;
    let md = markdown(&results, NOTES);
    fs::write(out.join("sqlitekv.md"), &md)?;
    charts(out, &results)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn plans_have_the_papers_mixes() {
        let spec = |workload, populate, ops| Spec {
            workload,
            config: Config {
                sys: Sys::Sqlite,
                cache: 0,
            },
            item: 64,
            populate,
            ops,
            seed: 1,
        };
        let p = plan(&spec("read-latest", 1000, 20_000));
        let reads = p.iter().filter(|o| matches!(o, Op::Read(_))).count();
        assert!((800..1200).contains(&reads), "{reads}");
        // Inserts are new keys in order; reads never name a key not yet inserted.
        let mut next = 1000;
        for o in &p {
            match *o {
                Op::Insert(k) => {
                    assert_eq!(k, next);
                    next += 1;
                }
                Op::Read(k) => assert!(k < next),
                Op::Update(_) => panic!("read-latest updates"),
            }
        }
        let p = plan(&spec("update-heavy", 1000, 20_000));
        let reads = p.iter().filter(|o| matches!(o, Op::Read(_))).count();
        assert!((9_000..11_000).contains(&reads), "{reads}");
        assert!(p.iter().all(|o| match o {
            Op::Read(k) | Op::Update(k) => *k < 1000,
            Op::Insert(_) => false,
        }));
        assert!(
            plan(&spec("read-heavy", 100, 500))
                .iter()
                .all(|o| matches!(o, Op::Read(_)))
        );
        let mut keys: Vec<u64> = plan(&spec("insert-rand", 0, 300))
            .iter()
            .map(|o| match o {
                Op::Insert(k) => *k,
                _ => u64::MAX,
            })
            .collect();
        assert_ne!(keys, (0..300).collect::<Vec<_>>());
        keys.sort_unstable();
        assert_eq!(keys, (0..300).collect::<Vec<_>>());
        assert_eq!(
            plan(&spec("query-seq", 5, 5)),
            (0..5).map(Op::Read).collect::<Vec<_>>()
        );
        let mut v = Values::new(100, 3);
        let a = v.next().to_vec();
        assert_eq!(a.len(), 100);
        assert_ne!(a, v.next());
    }

    /// Arguments for a tiny run in `tmp`: every workload and configuration, 64-byte items.
    fn tiny(tmp: &Path) -> Args {
        Args {
            common: SuiteArgs {
                quick: true,
                out: tmp.join("out"),
                only: vec![],
                systems: vec![],
                durabilities: vec![],
                scale: 0.01,
                repeat: 1,
                dir: tmp.join("scratch"),
                verbose: false,
            },
            item_sizes: vec![64],
            cache_bytes: 1 << 20,
        }
    }

    /// With `--durability async` only async jobs run, and each result row describes the job
    /// that made it (its durability and operation count).
    #[test]
    fn a_durability_filter_keeps_rows_and_jobs_together() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let mut args = tiny(tmp.path());
        args.common.only = vec!["read-heavy".into(), "insert-seq".into()];
        args.common.durabilities = vec!["async".into()];
        assert!(
            jobs(&args)
                .iter()
                .all(|j| j.durability == Durability::Async)
        );
        main(&args)?;
        let doc: Json =
            serde_json::from_str(&fs::read_to_string(args.common.out.join("sqlitekv.json"))?)?;
        let results = doc["results"].as_array().ok_or("no results")?;
        assert_eq!(results.len(), 2 * configs(&args).len());
        for r in results {
            assert_eq!(r["params"]["durability"], "async", "{r}");
            assert_eq!(r["ops"], r["params"]["operations"], "{r}");
        }
        Ok(())
    }

    /// A tiny run of every workload on every configuration at both durabilities: the files
    /// exist and the JSON has one row per workload × configuration × durability with the
    /// fields the issue names. Times nothing.
    #[test]
    fn every_workload_and_system_has_a_row() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let args = tiny(tmp.path());
        main(&args)?;
        let doc: Json =
            serde_json::from_str(&fs::read_to_string(args.common.out.join("sqlitekv.json"))?)?;
        assert_eq!(doc["suite"], "sqlitekv");
        let results = doc["results"].as_array().ok_or("no results")?;
        let mut seen = BTreeSet::new();
        for r in results {
            crate::report::assert_result_fields(r);
            let p = &r["params"];
            assert_eq!(p["item_size"], 64);
            let cache = p["cache"].as_str().ok_or("cache")?;
            assert!(cache == "on" || cache == "off");
            let d = p["durability"].as_str().ok_or("durability")?;
            assert!(d == "sync" || d == "async");
            assert!(seen.insert(format!(
                "{} {} {} {cache} {d}",
                r["workload"], r["system"], r["engine"]
            )));
        }
        let configs = configs(&args);
        assert_eq!(configs.len(), 6);
        for w in WORKLOADS {
            for c in &configs {
                for d in ["sync", "async"] {
                    let cache = if c.cache > 0 { "on" } else { "off" };
                    let k = format!(
                        "\"{w}\" \"{}\" \"{}\" {cache} {d}",
                        c.sys.name(),
                        c.sys.engine()
                    );
                    assert!(seen.contains(&k), "missing {k}");
                }
            }
        }
        assert_eq!(results.len(), WORKLOADS.len() * configs.len() * 2);
        let md = fs::read_to_string(args.common.out.join("sqlitekv.md"))?;
        assert!(
            md.contains("lsm / SQLite") && md.contains("ember-sql-lsm-cache"),
            "{md}"
        );
        assert!(args.common.out.join("sqlitekv-async.svg").exists());
        assert!(args.common.out.join("sqlitekv-sync.svg").exists());
        assert_eq!(fs::read_dir(tmp.path().join("scratch"))?.count(), 0);
        Ok(())
    }
}
