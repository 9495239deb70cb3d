//! The systems under test behind one small interface, so a suite says what to run once and
//! every system runs exactly that.
//!
//! * `ember-sql`: EmberDB through SQL (`ember::Connection`, statements prepared once and
//!   taken from the connection's statement cache).
//! * `ember-api`: EmberDB's table engine directly (`ember_table::Database` on an accounted
//!   file device, as the `table` suite does).
//! * `sqlite`: SQLite through rusqlite (bundled), WAL, `synchronous=FULL` for sync and `OFF`
//!   for async, statements from rusqlite's statement cache.
//! * `fjall` (LSM) and `redb` (B-tree): the key-value peers through their own APIs.
//!
//! A table has a key (an integer, or db_bench's 16-byte decimal string) and `cols` BLOB value
//! columns; the key-value peers store the columns concatenated.

use std::path::Path;

use ember_device::Accounted;
use ember_device::file::FileBlock;
use ember_table::{Column, Database, IndexKind, Mode, Options, Order, Schema, Value};
use rusqlite::types::{ToSqlOutput, ValueRef};
use serde_json::{Map, Value as Json, json};

use crate::measure::Result;

/// Size of EmberDB's (sparse) image file.
pub const IMAGE_BYTES: u64 = 4 << 30;
/// Bytes of data cached in RAM by every system that has such a setting (SQLite's default).
pub const CACHE_BYTES: usize = 2 << 20;

/// Whether every commit is durable when acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Every commit synced before it returns.
    Sync,
    /// No sync per commit.
    Async,
}

impl Durability {
    /// `sync` or `async`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }
}

/// A system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// EmberDB through SQL.
    EmberSql,
    /// EmberDB's table engine API.
    EmberApi,
    /// SQLite through rusqlite.
    Sqlite,
    /// fjall (LSM key-value store).
    Fjall,
    /// redb (B-tree key-value store).
    Redb,
}

impl System {
    /// The three systems every suite runs.
    pub const SQL_PEERS: [System; 3] = [System::EmberSql, System::EmberApi, System::Sqlite];
    /// Those and the key-value peers.
    pub const ALL: [System; 5] = [
        System::EmberSql,
        System::EmberApi,
        System::Sqlite,
        System::Fjall,
        System::Redb,
    ];

    /// The `system` field of a result.
    pub fn name(self) -> &'static str {
        match self {
            System::EmberSql => "ember-sql",
            System::EmberApi => "ember-api",
            System::Sqlite => "sqlite",
            System::Fjall => "fjall",
            System::Redb => "redb",
        }
    }

    /// The `engine` field of a result.
    pub fn engine(self) -> &'static str {
        match self {
            System::EmberSql | System::EmberApi => "emberdb-table",
            System::Sqlite => "sqlite",
            System::Fjall => "fjall",
            System::Redb => "redb",
        }
    }

    /// How the system is set up at this durability (goes into `params`).
    pub fn params(self, d: Durability) -> Map<String, Json> {
        let sync = d == Durability::Sync;
        let p = match self {
            System::EmberSql => json!({
                "api": "ember::Connection, prepared statements",
                "mode": if sync { "full" } else { "metadata" },
                "cache_bytes": CACHE_BYTES,
                "device": format!("file image, {} GiB sparse", IMAGE_BYTES >> 30),
            }),
            System::EmberApi => json!({
                "api": "ember_table::Database (tree index)",
                "mode": if sync { "full" } else { "metadata" },
                "buffer_bytes": CACHE_BYTES,
                "device": format!("file image, {} GiB sparse, Accounted", IMAGE_BYTES >> 30),
            }),
            System::Sqlite => json!({
                "api": "rusqlite, cached prepared statements",
                "journal_mode": "wal",
                "synchronous": if sync { "full" } else { "off" },
                "sqlite_version": rusqlite::version(),
                "cache_size": "default (2 MB)",
            }),
            System::Fjall => json!({
                "api": "fjall 2 Keyspace/Partition",
                "persist": if sync { "PersistMode::SyncData after each commit" } else { "none (journal buffered)" },
                "cache_bytes": CACHE_BYTES,
            }),
            System::Redb => json!({
                "api": "redb 2, one write transaction per commit",
                "redb_durability": if sync { "Immediate" } else { "None, every 1,000th commit Immediate (redb frees pages only then)" },
                "cache_bytes": CACHE_BYTES,
            }),
        };
        match p {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }
}

/// How keys look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A 64-bit integer (8 bytes): YCSB, Mobibench. SQL: `INTEGER PRIMARY KEY`.
    Int,
    /// db_bench's 16-byte decimal string (`%016d`), stored as a BLOB primary key.
    Text16,
}

impl KeyKind {
    /// Bytes of one key as the application counts them.
    pub fn bytes(self) -> u64 {
        match self {
            KeyKind::Int => 8,
            KeyKind::Text16 => 16,
        }
    }

    fn encode(self, k: u64) -> Vec<u8> {
        match self {
            KeyKind::Int => k.to_be_bytes().to_vec(),
            KeyKind::Text16 => format!("{k:016}").into_bytes(),
        }
    }
}

/// The shape of the one table a workload uses.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// The key.
    pub key: KeyKind,
    /// Value columns (BLOBs).
    pub cols: usize,
}

impl Layout {
    fn create_sql(&self) -> String {
        let key = match self.key {
            KeyKind::Int => "k INTEGER PRIMARY KEY",
            KeyKind::Text16 => "k BLOB PRIMARY KEY",
        };
        let cols: Vec<String> = (0..self.cols).map(|i| format!(", f{i} BLOB")).collect();
        format!("CREATE TABLE t({key}{})", cols.concat())
    }

    fn insert_sql(&self) -> String {
        let ps: Vec<String> = (0..=self.cols).map(|i| format!("?{}", i + 1)).collect();
        format!("INSERT INTO t VALUES ({})", ps.join(", "))
    }

    fn update_sql(&self) -> String {
        let sets: Vec<String> = (0..self.cols)
            .map(|i| format!("f{i} = ?{}", i + 2))
            .collect();
        format!("UPDATE t SET {} WHERE k = ?1", sets.join(", "))
    }

    fn select_sql(&self) -> String {
        format!("SELECT {} FROM t WHERE k = ?1", self.col_list())
    }

    fn scan_sql(&self) -> String {
        format!("SELECT k, {} FROM t", self.col_list())
    }

    fn col_list(&self) -> String {
        let cols: Vec<String> = (0..self.cols).map(|i| format!("f{i}")).collect();
        cols.join(", ")
    }

    fn schema(&self) -> Schema {
        let mut columns = vec![Column {
            name: "k".into(),
            decl_type: match self.key {
                KeyKind::Int => "INTEGER".into(),
                KeyKind::Text16 => "BLOB".into(),
            },
            not_null: true,
        }];
        for i in 0..self.cols {
            columns.push(Column {
                name: format!("f{i}"),
                decl_type: "BLOB".into(),
                not_null: false,
            });
        }
        Schema {
            columns,
            primary_key: vec![0],
            index: IndexKind::Tree,
        }
    }

    fn ember_key(&self, k: u64) -> Value {
        match self.key {
            KeyKind::Int => Value::Integer(k as i64),
            KeyKind::Text16 => Value::Blob(self.key.encode(k)),
        }
    }
}

/// One open database of one system. Operations outside `begin`/`commit` are each their own
/// transaction at the store's durability; inside, they commit together.
pub trait Store {
    /// Inserts a new row.
    fn insert(&mut self, k: u64, vals: &[&[u8]]) -> Result<()>;
    /// Replaces the values of an existing row (an error if there is none).
    fn update(&mut self, k: u64, vals: &[&[u8]]) -> Result<()>;
    /// Reads a row; returns the bytes of its values (an error if there is none).
    fn get(&mut self, k: u64) -> Result<usize>;
    /// Reads every row (in whatever order is cheapest); returns (rows, value bytes).
    fn scan(&mut self) -> Result<(u64, u64)>;
    /// Starts a batch.
    fn begin(&mut self) -> Result<()>;
    /// Commits the batch (synced at sync durability).
    fn commit(&mut self) -> Result<()>;
    /// Writes home what earlier commits left pending (SQLite's WAL, EmberDB's journal and
    /// index changes), as closing the database between YCSB's load and run phases would.
    /// For EmberDB through SQL this checkpoints the table engine only (`PRAGMA
    /// checkpoint`): an lsm or timeseries table's memory is not flushed.
    fn settle(&mut self) -> Result<()> {
        Ok(())
    }
    /// Bytes written to the device as the engine's own accounting counts them, if it has one.
    fn accounted_write_bytes(&mut self) -> Option<u64>;
    /// Closes; returns the accounted bytes written by the end (the close included).
    fn close(self: Box<Self>) -> Result<Option<u64>>;
}

/// Creates a fresh database of `system` in `dir` (which must hold no files of an earlier run).
pub fn open(system: System, d: Durability, dir: &Path, layout: Layout) -> Result<Box<dyn Store>> {
    Ok(match system {
        System::EmberSql => Box::new(EmberSql::create(dir, d, layout)?),
        System::EmberApi => Box::new(EmberApi::create(dir, d, layout)?),
        System::Sqlite => Box::new(Sqlite::create(dir, d, layout)?),
        System::Fjall => Box::new(Fjall::create(dir, d, layout)?),
        System::Redb => Box::new(Redb::create(dir, d, layout)?),
    })
}

fn mode(d: Durability) -> Mode {
    match d {
        Durability::Sync => Mode::Full,
        Durability::Async => Mode::Metadata,
    }
}

fn concat(vals: &[&[u8]]) -> Vec<u8> {
    vals.concat()
}

// ----- EmberDB through SQL ------------------------------------------------------------------

struct EmberSql {
    conn: ember::Connection,
    layout: Layout,
    sql: [String; 5],
}

impl EmberSql {
    fn create(dir: &Path, d: Durability, layout: Layout) -> Result<EmberSql> {
        let opts = ember::OpenOptions {
            mode: mode(d),
            capacity: IMAGE_BYTES,
            cache_bytes: CACHE_BYTES,
            ..ember::OpenOptions::default()
        };
        let conn = ember::Connection::open_with(dir.join("ember-sql.img"), opts)?;
        conn.execute_batch(&layout.create_sql())?;
        let sql = [
            layout.insert_sql(),
            layout.update_sql(),
            layout.select_sql(),
            layout.scan_sql(),
            String::new(),
        ];
        Ok(EmberSql { conn, layout, sql })
    }

    /// Runs statement `sql` with the key and `vals` as its parameters, borrowed as
    /// SQLite's are (the connection copies them into the buffers of the last statement's).
    fn execute(&self, sql: usize, k: u64, vals: &[&[u8]]) -> Result<usize> {
        let (int, bytes) = match self.layout.key {
            KeyKind::Int => (k as i64, Vec::new()),
            KeyKind::Text16 => (0, self.layout.key.encode(k)),
        };
        let mut p: Vec<&dyn ember::ToSql> = Vec::with_capacity(vals.len() + 1);
        p.push(match self.layout.key {
            KeyKind::Int => &int,
            KeyKind::Text16 => &bytes,
        });
        p.extend(vals.iter().map(|v| v as &dyn ember::ToSql));
        Ok(self.conn.prepare(&self.sql[sql])?.execute(&p[..])?)
    }

    fn params(&self, k: u64) -> Vec<ember::Value> {
        vec![match self.layout.key {
            KeyKind::Int => ember::Value::Integer(k as i64),
            KeyKind::Text16 => ember::Value::Blob(self.layout.key.encode(k)),
        }]
    }
}

fn ember_value_len(v: &ember::Value) -> usize {
    match v {
        ember::Value::Blob(b) => b.len(),
        ember::Value::Text(t) => t.len(),
        _ => 0,
    }
}

impl Store for EmberSql {
    fn insert(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        self.execute(0, k, vals)?;
        Ok(())
    }

    fn update(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let n = self.execute(1, k, vals)?;
        if n != 1 {
            return Err(format!("ember-sql: update of key {k} changed {n} rows").into());
        }
        Ok(())
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        let p = self.params(k);
        let mut st = self.conn.prepare(&self.sql[2])?;
        let mut rows = st.query(p)?;
        let Some(row) = rows.next()? else {
            return Err(format!("ember-sql: key {k} not found").into());
        };
        Ok(row.values().iter().map(ember_value_len).sum())
    }

    fn scan(&mut self) -> Result<(u64, u64)> {
        let mut st = self.conn.prepare(&self.sql[3])?;
        let mut rows = st.query(())?;
        let (mut n, mut bytes) = (0u64, 0u64);
        while let Some(row) = rows.next()? {
            n += 1;
            bytes += row.values()[1..].iter().map(ember_value_len).sum::<usize>() as u64;
        }
        Ok((n, bytes))
    }

    fn begin(&mut self) -> Result<()> {
        self.conn.execute_batch("BEGIN")?;
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }

    fn settle(&mut self) -> Result<()> {
        self.conn.execute_batch("PRAGMA checkpoint")?;
        Ok(())
    }

    fn accounted_write_bytes(&mut self) -> Option<u64> {
        None
    }

    fn close(self: Box<Self>) -> Result<Option<u64>> {
        self.conn.close()?;
        Ok(None)
    }
}

// ----- EmberDB's engine API -----------------------------------------------------------------

type EmberDb = Database<Accounted<FileBlock>>;

struct EmberApi {
    db: EmberDb,
    layout: Layout,
}

impl EmberApi {
    fn create(dir: &Path, d: Durability, layout: Layout) -> Result<EmberApi> {
        let file = FileBlock::create(dir.join("ember-api.img"), IMAGE_BYTES)?;
        let opts = Options {
            mode: mode(d),
            buffer_bytes: CACHE_BYTES,
            ..Options::default()
        };
        let mut db = Database::create(Accounted::new(file), opts)?;
        db.create_table("t", layout.schema())?;
        Ok(EmberApi { db, layout })
    }

    fn row(&self, k: u64, vals: &[&[u8]]) -> Vec<Value> {
        let mut row = Vec::with_capacity(vals.len() + 1);
        row.push(self.layout.ember_key(k));
        row.extend(vals.iter().map(|v| Value::Blob(v.to_vec())));
        row
    }
}

fn table_value_len(v: &Value) -> usize {
    match v {
        Value::Blob(b) => b.len(),
        Value::Text(t) => t.len(),
        _ => 0,
    }
}

impl Store for EmberApi {
    fn insert(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let row = self.row(k, vals);
        self.db.insert("t", &row)?;
        Ok(())
    }

    fn update(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let row = self.row(k, vals);
        if !self.db.update("t", &row)? {
            return Err(format!("ember-api: update of missing key {k}").into());
        }
        Ok(())
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        let key = [self.layout.ember_key(k)];
        match self.db.get("t", &key)? {
            Some(row) => Ok(row[1..].iter().map(table_value_len).sum()),
            None => Err(format!("ember-api: key {k} not found").into()),
        }
    }

    fn scan(&mut self) -> Result<(u64, u64)> {
        // Rows are read in place, as SQLite's are read with `get_ref`.
        let (mut n, mut bytes) = (0u64, 0u64);
        let all = std::ops::Bound::Unbounded;
        self.db
            .range_visit("t", all, all, Order::default(), |row| {
                n += 1;
                for v in row.skip(1) {
                    bytes += match v? {
                        ember_table::ValueRef::Blob(b) => b.len(),
                        ember_table::ValueRef::Text(t) => t.len(),
                        _ => 0,
                    } as u64;
                }
                Ok(())
            })?;
        Ok((n, bytes))
    }

    fn begin(&mut self) -> Result<()> {
        self.db.begin()?;
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.db.commit()?;
        Ok(())
    }

    fn settle(&mut self) -> Result<()> {
        self.db.checkpoint()?;
        Ok(())
    }

    fn accounted_write_bytes(&mut self) -> Option<u64> {
        Some(self.db.device().stats().write_bytes)
    }

    fn close(self: Box<Self>) -> Result<Option<u64>> {
        let dev = self.db.close()?;
        Ok(Some(dev.stats().write_bytes))
    }
}

// ----- SQLite -------------------------------------------------------------------------------

struct Sqlite {
    conn: rusqlite::Connection,
    layout: Layout,
    sql: [String; 4],
}

/// SQLite at a durability level as every suite runs it: `dir/sqlite.db` in WAL mode with
/// `synchronous` FULL (sync) or OFF (async), both checked after they are set.
pub fn open_sqlite(dir: &Path, d: Durability) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(dir.join("sqlite.db"))?;
    let got: String = conn.query_row("PRAGMA journal_mode=wal", [], |r| r.get(0))?;
    if !got.eq_ignore_ascii_case("wal") {
        return Err(format!("SQLite refused journal_mode=wal (got {got})").into());
    }
    let (want, code) = match d {
        Durability::Sync => ("FULL", 2),
        Durability::Async => ("OFF", 0),
    };
    conn.pragma_update(None, "synchronous", want)?;
    let sync: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
    if sync != code {
        return Err(format!("SQLite synchronous is {sync}, not {want}").into());
    }
    Ok(conn)
}

impl Sqlite {
    fn create(dir: &Path, d: Durability, layout: Layout) -> Result<Sqlite> {
        let conn = open_sqlite(dir, d)?;
        conn.execute_batch(&layout.create_sql())?;
        let sql = [
            layout.insert_sql(),
            layout.update_sql(),
            layout.select_sql(),
            layout.scan_sql(),
        ];
        Ok(Sqlite { conn, layout, sql })
    }

    fn params<'a>(&self, key: &'a [u8], k: u64, vals: &[&'a [u8]]) -> Vec<ToSqlOutput<'a>> {
        let mut p = Vec::with_capacity(vals.len() + 1);
        p.push(match self.layout.key {
            KeyKind::Int => ToSqlOutput::Borrowed(ValueRef::Integer(k as i64)),
            KeyKind::Text16 => ToSqlOutput::Borrowed(ValueRef::Blob(key)),
        });
        p.extend(
            vals.iter()
                .map(|v| ToSqlOutput::Borrowed(ValueRef::Blob(v))),
        );
        p
    }
}

fn sqlite_len(v: ValueRef<'_>) -> usize {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => b.len(),
        _ => 0,
    }
}

impl Store for Sqlite {
    fn insert(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let key = self.layout.key.encode(k);
        let p = self.params(&key, k, vals);
        let mut st = self.conn.prepare_cached(&self.sql[0])?;
        st.execute(rusqlite::params_from_iter(p))?;
        Ok(())
    }

    fn update(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let key = self.layout.key.encode(k);
        let p = self.params(&key, k, vals);
        let mut st = self.conn.prepare_cached(&self.sql[1])?;
        let n = st.execute(rusqlite::params_from_iter(p))?;
        if n != 1 {
            return Err(format!("sqlite: update of key {k} changed {n} rows").into());
        }
        Ok(())
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        let key = self.layout.key.encode(k);
        let p = self.params(&key, k, &[]);
        let cols = self.layout.cols;
        let mut st = self.conn.prepare_cached(&self.sql[2])?;
        let mut rows = st.query(rusqlite::params_from_iter(p))?;
        let Some(row) = rows.next()? else {
            return Err(format!("sqlite: key {k} not found").into());
        };
        let mut n = 0;
        for i in 0..cols {
            n += sqlite_len(row.get_ref(i)?);
        }
        Ok(n)
    }

    fn scan(&mut self) -> Result<(u64, u64)> {
        let cols = self.layout.cols;
        let mut st = self.conn.prepare_cached(&self.sql[3])?;
        let mut rows = st.query([])?;
        let (mut n, mut bytes) = (0u64, 0u64);
        while let Some(row) = rows.next()? {
            n += 1;
            for i in 1..=cols {
                bytes += sqlite_len(row.get_ref(i)?) as u64;
            }
        }
        Ok((n, bytes))
    }

    fn begin(&mut self) -> Result<()> {
        self.conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }

    fn settle(&mut self) -> Result<()> {
        // (busy, WAL frames, frames checkpointed): a busy checkpoint did not finish.
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
        if busy != 0 {
            return Err("sqlite: the WAL checkpoint was blocked".into());
        }
        Ok(())
    }

    fn accounted_write_bytes(&mut self) -> Option<u64> {
        None
    }

    fn close(self: Box<Self>) -> Result<Option<u64>> {
        self.conn.close().map_err(|(_, e)| e)?;
        Ok(None)
    }
}

// ----- fjall --------------------------------------------------------------------------------

struct Fjall {
    ks: fjall::Keyspace,
    part: fjall::PartitionHandle,
    batch: Option<fjall::Batch>,
    layout: Layout,
    sync: bool,
}

impl Fjall {
    fn create(dir: &Path, d: Durability, layout: Layout) -> Result<Fjall> {
        let ks = fjall::Config::new(dir.join("fjall"))
            .cache_size(CACHE_BYTES as u64)
            .open()?;
        let part = ks.open_partition("t", fjall::PartitionCreateOptions::default())?;
        Ok(Fjall {
            ks,
            part,
            batch: None,
            layout,
            sync: d == Durability::Sync,
        })
    }

    fn persist(&self) -> Result<()> {
        if self.sync {
            self.ks.persist(fjall::PersistMode::SyncData)?;
        }
        Ok(())
    }

    fn put(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let key = self.layout.key.encode(k);
        let v = concat(vals);
        match &mut self.batch {
            Some(b) => b.insert(&self.part, key, v),
            None => {
                self.part.insert(key, v)?;
                self.persist()?;
            }
        }
        Ok(())
    }
}

impl Store for Fjall {
    fn insert(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        self.put(k, vals)
    }

    fn update(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        self.put(k, vals)
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        match self.part.get(self.layout.key.encode(k))? {
            Some(v) => Ok(v.len()),
            None => Err(format!("fjall: key {k} not found").into()),
        }
    }

    fn scan(&mut self) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0u64, 0u64);
        for kv in self.part.iter() {
            let (_, v) = kv?;
            n += 1;
            bytes += v.len() as u64;
        }
        Ok((n, bytes))
    }

    fn begin(&mut self) -> Result<()> {
        self.batch = Some(self.ks.batch());
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        if let Some(b) = self.batch.take() {
            b.commit()?;
            self.persist()?;
        }
        Ok(())
    }

    fn accounted_write_bytes(&mut self) -> Option<u64> {
        None
    }

    fn close(self: Box<Self>) -> Result<Option<u64>> {
        self.ks.persist(fjall::PersistMode::SyncAll)?;
        Ok(None)
    }
}

// ----- redb ---------------------------------------------------------------------------------

const REDB_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("t");

struct Redb {
    db: redb::Database,
    tx: Option<redb::WriteTransaction>,
    layout: Layout,
    durability: redb::Durability,
    /// Non-durable commits since the last durable one.
    undurable: u32,
}

/// redb frees pages only at a durable commit, so an async run makes every this-many commits
/// durable (otherwise the file grows without bound).
const REDB_DURABLE_EVERY: u32 = 1000;

impl Redb {
    fn create(dir: &Path, d: Durability, layout: Layout) -> Result<Redb> {
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(dir.join("redb.db"))?;
        let durability = match d {
            Durability::Sync => redb::Durability::Immediate,
            Durability::Async => redb::Durability::None,
        };
        let tx = db.begin_write()?;
        tx.open_table(REDB_TABLE)?;
        tx.commit()?;
        Ok(Redb {
            db,
            tx: None,
            layout,
            durability,
            undurable: 0,
        })
    }

    fn begin_write(&mut self) -> Result<redb::WriteTransaction> {
        let mut tx = self.db.begin_write()?;
        if matches!(self.durability, redb::Durability::None) {
            self.undurable += 1;
            if self.undurable >= REDB_DURABLE_EVERY {
                self.undurable = 0;
                return Ok(tx);
            }
        }
        tx.set_durability(self.durability);
        Ok(tx)
    }

    fn put(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        let key = self.layout.key.encode(k);
        let v = concat(vals);
        match &self.tx {
            Some(tx) => {
                tx.open_table(REDB_TABLE)?
                    .insert(key.as_slice(), v.as_slice())?;
            }
            None => {
                let tx = self.begin_write()?;
                tx.open_table(REDB_TABLE)?
                    .insert(key.as_slice(), v.as_slice())?;
                tx.commit()?;
            }
        }
        Ok(())
    }
}

impl Store for Redb {
    fn insert(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        self.put(k, vals)
    }

    fn update(&mut self, k: u64, vals: &[&[u8]]) -> Result<()> {
        self.put(k, vals)
    }

    fn get(&mut self, k: u64) -> Result<usize> {
        let key = self.layout.key.encode(k);
        let table = self.db.begin_read()?.open_table(REDB_TABLE)?;
        match table.get(key.as_slice())? {
            Some(v) => Ok(v.value().len()),
            None => Err(format!("redb: key {k} not found").into()),
        }
    }

    fn scan(&mut self) -> Result<(u64, u64)> {
        use redb::ReadableTable;
        let table = self.db.begin_read()?.open_table(REDB_TABLE)?;
        let (mut n, mut bytes) = (0u64, 0u64);
        for kv in table.iter()? {
            let (_, v) = kv?;
            n += 1;
            bytes += v.value().len() as u64;
        }
        Ok((n, bytes))
    }

    fn begin(&mut self) -> Result<()> {
        let tx = self.begin_write()?;
        self.tx = Some(tx);
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        if let Some(tx) = self.tx.take() {
            tx.commit()?;
        }
        Ok(())
    }

    fn accounted_write_bytes(&mut self) -> Option<u64> {
        None
    }

    fn close(self: Box<Self>) -> Result<Option<u64>> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(redb::Durability::Immediate);
        tx.commit()?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every system stores, updates, reads, scans and batches the same rows.
    #[test]
    fn every_system_round_trips() -> Result<()> {
        for key in [KeyKind::Int, KeyKind::Text16] {
            for s in System::ALL {
                for d in [Durability::Sync, Durability::Async] {
                    let tmp = tempfile::tempdir()?;
                    let layout = Layout { key, cols: 2 };
                    let mut st = open(s, d, tmp.path(), layout)?;
                    st.insert(1, &[b"ab", b"cde"])?;
                    st.begin()?;
                    st.insert(2, &[b"x", b"y"])?;
                    st.insert(3, &[b"x", b""])?;
                    st.commit()?;
                    st.update(1, &[b"abcd", b"e"])?;
                    assert_eq!(st.get(1)?, 5, "{s:?} {d:?} {key:?}");
                    assert_eq!(st.get(2)?, 2);
                    assert!(st.get(9).is_err());
                    assert_eq!(st.scan()?, (3, 8));
                    let acc = st.close()?;
                    assert_eq!(acc.is_some(), s == System::EmberApi);
                }
            }
        }
        Ok(())
    }
}
