//! # ember — the Rust API of EmberDB
//!
//! Owns `Connection`, `Statement`, `Rows`, `Transaction` and the options that open a
//! database on a file, a raw block device or memory — shaped like rusqlite, so a SQLite user
//! can switch in minutes:
//!
//! ```
//! use ember::{Connection, params};
//! let conn = Connection::open_in_memory()?;
//! conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT)")?;
//! conn.execute("INSERT INTO t(name) VALUES (?1)", params!["ember"])?;
//! let name: String = conn.query_row("SELECT name FROM t WHERE id = ?", [1], |r| r.get(0))?;
//! assert_eq!(name, "ember");
//! # Ok::<(), ember::Error>(())
//! ```
//!
//! One database is one device (a file is a device image: the table engine writes it with no
//! file system structure inside).
//!
//! Must not touch: parsing or planning (`ember-sql`) or storage (`ember-table` and the other
//! engines) beyond wiring them together.

#![forbid(unsafe_code)]

pub mod coordcache;
mod device;
pub mod lsmkey;
pub mod lsmroot;
pub mod lsmstore;
pub mod routed;
pub mod shared;
pub mod storage;
pub mod tsstore;
mod types;

use foldhash::HashMap;
use std::cell::RefCell;
use std::fmt;
use std::path::Path;
use std::rc::Rc;

use ember_device::MemBlock;
use ember_device::file::{FileBlock, RawBlock};
use ember_sql::{Executor, Parsed, Started, Stream};
use ember_table::{Database, Options};

use crate::routed::Routed;

pub use device::AnyDevice;
pub use ember_sql::{Output, SqlError, Value, is_blank};
pub use ember_table::Mode;
pub use storage::TableStorage;
pub use types::{FromSql, Params, ToSql};

/// Everything that can go wrong.
#[derive(Debug)]
pub enum Error {
    /// A SQL error (syntax with its position, constraint, missing names, storage).
    Sql(SqlError),
    /// Opening the device or the database failed.
    Open(String),
    /// `query_row` found no row.
    QueryReturnedNoRows,
    /// A column index past the end of the row.
    InvalidColumnIndex(usize),
    /// A column name the result does not have.
    InvalidColumnName(String),
    /// A value that does not convert to the Rust type asked for.
    InvalidColumnType {
        /// Column position.
        index: usize,
        /// Column name.
        name: String,
        /// What the value is.
        found: &'static str,
    },
    /// The number of parameters given is not the number the statement has.
    InvalidParameterCount {
        /// Given.
        given: usize,
        /// Expected.
        expected: usize,
    },
    /// A named parameter the statement does not have.
    InvalidParameterName(String),
    /// A Rust value that has no SQL form (e.g. a u64 above i64::MAX).
    ToSqlConversion(String),
    /// `prepare` was given more than one statement.
    MultipleStatements,
    /// `execute` was given a statement that returns rows.
    ExecuteReturnedResults,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sql(e) => write!(f, "{e}"),
            Error::Open(m) => write!(f, "cannot open the database: {m}"),
            Error::QueryReturnedNoRows => write!(f, "query returned no rows"),
            Error::InvalidColumnIndex(i) => write!(f, "invalid column index {i}"),
            Error::InvalidColumnName(n) => write!(f, "invalid column name {n}"),
            Error::InvalidColumnType { index, name, found } => write!(
                f,
                "column {index} ({name}) holds {found}, which does not convert to the type asked for"
            ),
            Error::InvalidParameterCount { given, expected } => write!(
                f,
                "wrong number of parameters: {given} given, the statement has {expected}"
            ),
            Error::InvalidParameterName(n) => write!(f, "the statement has no parameter named {n}"),
            Error::ToSqlConversion(m) => write!(f, "cannot convert to SQL: {m}"),
            Error::MultipleStatements => write!(
                f,
                "prepare takes one statement; use execute_batch for several"
            ),
            Error::ExecuteReturnedResults => {
                write!(f, "execute was given a query that returns rows; use query")
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<SqlError> for Error {
    fn from(e: SqlError) -> Self {
        Error::Sql(e)
    }
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// How to open a database.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Consistency mode (default: full — every commit durable, as SQLite's default).
    pub mode: Mode,
    /// Size of a new database file (a device image; sparse where the file system allows).
    pub capacity: u64,
    /// Bytes of clean data blocks kept in RAM.
    pub cache_bytes: usize,
    /// Bytes of point-query results kept (0: off).
    pub query_cache_bytes: usize,
    /// RAM cap of the LSM engine behind `USING lsm` tables (memtables, pinned indexes and
    /// filters, block cache).
    pub lsm_memory_bytes: usize,
    /// Bytes of the coordination cache in front of `USING lsm` tables: results of point and
    /// range queries, dropped by writes to the keys they cover (0: off).
    pub lsm_cache_bytes: usize,
    /// Whether the LSM engine flushes and compacts on a thread of its own (default), which
    /// merges without the engine's lock while statements go on; off, the statement whose
    /// commit fills a memtable does that work.
    pub lsm_background: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            mode: Mode::Full,
            capacity: 1 << 30,
            cache_bytes: 2 << 20,
            query_cache_bytes: 256 << 10,
            lsm_memory_bytes: 8 << 20,
            lsm_cache_bytes: 1 << 20,
            lsm_background: true,
        }
    }
}

/// The SQL engine of one database, over any device: the executor over the table engine,
/// (from the first `USING lsm` table on) the LSM tree and the `USING timeseries` tables'
/// series, all in the same device. A [`Connection`]
/// runs one over a file, a raw device or memory; tests run one over fault-injecting devices.
pub type Engine<D> = Executor<Routed<TableStorage<D>, lsmroot::DbEnv<D>, tsstore::TsStore<D>>>;

/// Opens the SQL engine over an open table-engine database: opens its LSM tree if it has one
/// and every series of its timeseries tables, loads the catalog, and removes LSM objects the catalog does not name (a crash between an
/// LSM batch and the catalog's commit leaves them). The LSM tree runs without a background
/// thread whatever `opts` says (its flushes and compactions happen in commits, so a run on
/// a fault-injecting device is the same every time); [`Connection`] starts one.
pub fn open_engine<D: ember_device::BlockDevice>(
    db: Database<D>,
    opts: &OpenOptions,
) -> Result<Engine<D>> {
    let table = TableStorage::new(db);
    let lsm_opts = ember_lsm::Options::with_budget(opts.lsm_memory_bytes);
    let sync = opts.mode == Mode::Full;
    let cache = opts.lsm_cache_bytes;
    let mut lsm = lsmroot::open(&table, lsm_opts.clone(), sync)?;
    if let Some(l) = lsm.as_mut() {
        l.set_cache_bytes(cache);
    }
    let mut table = table;
    if let Some(l) = lsm.as_mut() {
        routed::replay_redo(&mut table, l)?;
    }
    let series = tsstore::TsStore::open(table.shared())?;
    let routed = Routed::new(table, lsm)
        .with_factory(Box::new(move |t| {
            let mut l = lsmroot::create(t, lsm_opts.clone(), sync)?;
            l.set_cache_bytes(cache);
            Ok(l)
        }))
        .with_series(series);
    let mut exec = Executor::open(routed)?;
    let catalog = exec.catalog().clone();
    exec.storage().sweep(&catalog)?;
    Ok(exec)
}

/// Closes the engine: the series (writing their buffered rows), the LSM tree, then the table
/// engine (a checkpoint); returns the device.
pub fn close_engine<D: ember_device::BlockDevice>(exec: Engine<D>) -> Result<D> {
    let routed = exec.into_storage();
    routed
        .ts
        .close()
        .map_err(|e| Error::Open(format!("close: {e}")))?;
    if let Some(lsm) = routed.lsm {
        drop(
            lsm.into_db()
                .close()
                .map_err(|e| Error::Open(format!("close: {e}")))?,
        );
    }
    let db = routed.table.into_database().ok_or_else(|| {
        Error::Open("close: the database is still in use by an lsm iterator".into())
    })?;
    db.close().map_err(|e| Error::Open(format!("close: {e}")))
}

struct Inner {
    exec: Engine<AnyDevice>,
    cache: HashMap<String, Rc<Parsed>>,
    /// The values the last [`Statement::execute`] or point [`Statement::query_row`] bound,
    /// kept for the next one to bind into ([`Params::bind_in`]): a statement run again and
    /// again allocates nothing for its text and blob parameters.
    spare_params: Vec<ember_sql::Value>,
}

/// A spare parameter buffer bigger than this is let go rather than kept for the next
/// statement (one big blob bound once should not stay in memory).
const SPARE_PARAM_BYTES: usize = 16 << 10;

impl Inner {
    /// Takes back the parameter values of the statement the executor is done with, for
    /// the next statement to bind into, letting go of big text and blob buffers.
    fn keep_params(&mut self) {
        let mut spent = self.exec.take_params();
        for v in &mut spent {
            let big = match v {
                ember_sql::Value::Blob(b) => b.capacity() > SPARE_PARAM_BYTES,
                ember_sql::Value::Text(t) => t.capacity() > SPARE_PARAM_BYTES,
                _ => false,
            };
            if big {
                *v = ember_sql::Value::Null;
            }
        }
        self.spare_params = spent;
    }
}

/// A connection to one database.
pub struct Connection {
    inner: RefCell<Option<Inner>>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

fn open_err(e: impl fmt::Display) -> Error {
    Error::Open(e.to_string())
}

impl Connection {
    /// Opens (or creates) the database in a file, or on a raw block device (`/dev/...`).
    pub fn open(path: impl AsRef<Path>) -> Result<Connection> {
        Self::open_with(path, OpenOptions::default())
    }

    /// A database in memory, gone when the connection closes.
    pub fn open_in_memory() -> Result<Connection> {
        Self::open_in_memory_with(OpenOptions {
            mode: Mode::Metadata,
            capacity: 256 << 20,
            ..OpenOptions::default()
        })
    }

    /// A database in memory with these options.
    pub fn open_in_memory_with(opts: OpenOptions) -> Result<Connection> {
        let dev = AnyDevice::Memory(MemBlock::new(opts.capacity as usize));
        let db = Database::create(dev, table_options(&opts)).map_err(open_err)?;
        Self::with_database(db, &opts)
    }

    /// Opens (or creates) a database with options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Connection> {
        use std::os::unix::fs::FileTypeExt;
        let path = path.as_ref();
        let meta = std::fs::metadata(path).ok();
        let is_block = meta
            .as_ref()
            .is_some_and(|m| m.file_type().is_block_device());
        let topts = table_options(&opts);
        let db = if is_block {
            let dev = AnyDevice::Raw(RawBlock::open(path).map_err(open_err)?);
            match Database::open(dev, topts) {
                Ok(db) => db,
                Err(_) => {
                    // A device without an EmberDB superblock: format it only when it is all
                    // zeros at the start (never overwrite someone's file system).
                    let mut dev = AnyDevice::Raw(RawBlock::open(path).map_err(open_err)?);
                    let mut head = vec![0u8; 64 << 10];
                    ember_device::BlockDevice::read(&mut dev, 0, &mut head).map_err(open_err)?;
                    if head.iter().any(|&b| b != 0) {
                        return Err(Error::Open(format!(
                            "{} holds data that is not an EmberDB database; zero its first 64 KiB to use it",
                            path.display()
                        )));
                    }
                    Database::create(dev, topts).map_err(open_err)?
                }
            }
        } else if meta.as_ref().is_some_and(|m| m.len() > 0) {
            let dev = AnyDevice::File(Box::new(FileBlock::open(path).map_err(open_err)?));
            Database::open(dev, topts)
                .map_err(|e| Error::Open(format!("{}: {e}", path.display())))?
        } else {
            let dev = AnyDevice::File(Box::new(
                FileBlock::create(path, opts.capacity).map_err(open_err)?,
            ));
            Database::create(dev, topts).map_err(open_err)?
        };
        Self::with_database(db, &opts)
    }

    fn with_database(db: Database<AnyDevice>, opts: &OpenOptions) -> Result<Connection> {
        let mut exec = open_engine(db, opts)?;
        if opts.lsm_background {
            exec.storage().start_lsm_background();
        }
        Ok(Connection {
            inner: RefCell::new(Some(Inner {
                exec,
                cache: HashMap::default(),
                spare_params: Vec::new(),
            })),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> Result<T>) -> Result<T> {
        let mut g = self.inner.borrow_mut();
        let inner = g
            .as_mut()
            .ok_or_else(|| Error::Open("the connection is closed".into()))?;
        f(inner)
    }

    /// Parses one statement, through the statement cache.
    fn parse_one(&self, sql: &str) -> Result<Rc<Parsed>> {
        self.with(|inner| {
            if let Some(p) = inner.cache.get(sql) {
                return Ok(p.clone());
            }
            let mut all = ember_sql::parse(sql)?;
            if all.len() > 1 {
                return Err(Error::MultipleStatements);
            }
            let p = Rc::new(all.pop().ok_or_else(|| {
                Error::Sql(SqlError::syntax(
                    0,
                    "expected a statement but found the end of the text",
                ))
            })?);
            if inner.cache.len() > 256 {
                inner.cache.clear();
            }
            inner.cache.insert(sql.to_string(), p.clone());
            Ok(p)
        })
    }

    fn run(&self, p: &Parsed, params: Vec<ember_sql::Value>) -> Result<Output> {
        self.with(|inner| Ok(inner.exec.execute_owned(p, params)?))
    }

    /// The values the last [`Statement::execute`] bound, to bind the next into (empty if
    /// there are none, or the connection is closed).
    fn take_spare_params(&self) -> Vec<ember_sql::Value> {
        self.with(|inner| Ok(std::mem::take(&mut inner.spare_params)))
            .unwrap_or_default()
    }

    /// [`run`](Self::run) for a statement that is not a query, keeping its parameter values
    /// for the next statement to bind into (the buffers of big ones let go).
    fn run_keeping_params(&self, p: &Parsed, params: Vec<ember_sql::Value>) -> Result<()> {
        self.with(|inner| {
            let r = inner.exec.execute_owned(p, params);
            inner.keep_params();
            r.map(drop).map_err(Error::from)
        })
    }

    /// Runs one statement; returns the number of rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// Runs every statement of the text, in order; stops at the first error.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        for p in ember_sql::parse(sql)? {
            self.run(&p, Vec::new())?;
        }
        Ok(())
    }

    /// Runs the statements of the text one at a time, handing each one's text and output
    /// to `each` (the shell's loop); an error stops it, with the statements before run.
    pub fn execute_each(&self, sql: &str, mut each: impl FnMut(&str, &Output)) -> Result<()> {
        for (_, text) in ember_sql::split_statements(sql) {
            let parsed = ember_sql::parse(text)?;
            for p in parsed {
                let out = self.run(&p, Vec::new())?;
                each(&p.sql, &out);
            }
        }
        Ok(())
    }

    /// Compiles one statement for running many times.
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        let parsed = self.parse_one(sql)?;
        Ok(Statement {
            conn: self,
            parsed,
            spare: Vec::new(),
        })
    }

    /// Runs a query and maps its first row; [`Error::QueryReturnedNoRows`] if there is none.
    pub fn query_row<T, P: Params, F: FnOnce(&Row) -> Result<T>>(
        &self,
        sql: &str,
        params: P,
        f: F,
    ) -> Result<T> {
        self.prepare(sql)?.query_row(params, f)
    }

    /// The rowid of the last row inserted.
    pub fn last_insert_rowid(&self) -> i64 {
        self.with(|i| Ok(i.exec.last_insert_rowid())).unwrap_or(0)
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    pub fn changes(&self) -> u64 {
        self.with(|i| Ok(i.exec.changes())).unwrap_or(0)
    }

    /// How many access paths the planner has chosen on this connection (a prepared
    /// statement run again adds none).
    pub fn plans_made(&self) -> u64 {
        self.with(|i| Ok(i.exec.plans_made())).unwrap_or(0)
    }

    /// Sets the longest string or blob a statement may make on this connection (rusqlite's
    /// `set_limit(SQLITE_LIMIT_LENGTH, …)`); at most, and by default, SQLite's 1,000,000,000
    /// bytes. A longer result is the error "string or blob too big".
    pub fn set_max_length(&self, bytes: usize) {
        let _ = self.with(|i| {
            i.exec.set_max_length(bytes);
            Ok(())
        });
    }

    /// Whether no explicit transaction is open.
    pub fn is_autocommit(&self) -> bool {
        self.with(|i| Ok(!i.exec.in_transaction())).unwrap_or(true)
    }

    /// Starts a transaction, rolled back when dropped unless committed.
    pub fn transaction(&mut self) -> Result<Transaction<'_>> {
        self.execute_batch("BEGIN")?;
        Ok(Transaction {
            conn: self,
            done: false,
        })
    }

    /// Names of the tables and views (for the shell), sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.with(|i| {
            let c = i.exec.catalog();
            let mut v: Vec<String> = c
                .tables
                .values()
                .map(|t| t.name.clone())
                .chain(c.views.values().map(|v| v.name.clone()))
                .collect();
            v.sort();
            Ok(v)
        })
        .unwrap_or_default()
    }

    /// The `CREATE` texts of the schema (for the shell's `.schema`), tables first.
    pub fn schema_sql(&self) -> Vec<(String, String)> {
        self.with(|i| {
            let c = i.exec.catalog();
            let mut v: Vec<(String, String)> = c
                .tables
                .values()
                .map(|t| (t.name.clone(), t.sql.clone()))
                .collect();
            v.extend(c.views.values().map(|x| (x.name.clone(), x.sql.clone())));
            v.extend(c.indexes.values().map(|x| (x.table.clone(), x.sql.clone())));
            Ok(v)
        })
        .unwrap_or_default()
    }

    /// The user indexes: (table, index name), sorted.
    pub fn index_names(&self) -> Vec<(String, String)> {
        self.with(|i| {
            let mut v: Vec<(String, String)> = i
                .exec
                .catalog()
                .indexes
                .values()
                .map(|x| (x.table.clone(), x.name.clone()))
                .collect();
            v.sort();
            Ok(v)
        })
        .unwrap_or_default()
    }

    /// Waits until the LSM engine's background thread has no flush or compaction running or
    /// due (e.g. after a bulk load, before timing reads); at once without `USING lsm` tables.
    pub fn settle(&self) -> Result<()> {
        self.with(|inner| match inner.exec.storage().lsm.as_ref() {
            Some(l) => l
                .db()
                .settle()
                .map_err(|e| Error::Sql(SqlError::Storage(format!("lsm engine: {e}")))),
            None => Ok(()),
        })
    }

    /// Checkpoints and closes the database (dropping the connection does the same, ignoring
    /// errors).
    pub fn close(self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<()> {
        let Some(inner) = self.inner.borrow_mut().take() else {
            return Ok(());
        };
        close_engine(inner.exec)?;
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

fn table_options(o: &OpenOptions) -> Options {
    Options {
        mode: o.mode,
        buffer_bytes: o.cache_bytes,
        query_cache_bytes: o.query_cache_bytes,
        ..Options::default()
    }
}

/// A compiled statement.
pub struct Statement<'c> {
    conn: &'c Connection,
    parsed: Rc<Parsed>,
    /// The row buffers of the last streamed query, for the next one.
    spare: Vec<Vec<Value>>,
}

impl fmt::Debug for Statement<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Statement")
            .field("sql", &self.parsed.sql)
            .finish()
    }
}

impl<'c> Statement<'c> {
    /// Runs the statement; returns the number of rows changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        let mut vals = self.conn.take_spare_params();
        params.bind_in(&self.parsed.params, &mut vals)?;
        if matches!(self.parsed.stmt, ember_sql::ast::Stmt::Select(_)) {
            return Err(Error::ExecuteReturnedResults);
        }
        self.conn.run_keeping_params(&self.parsed, vals)?;
        Ok(self.conn.changes() as usize)
    }

    /// Runs a query; step through the rows with [`Rows::next`] (see [`Rows`] for when they
    /// are read).
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        let vals = params.bind(&self.parsed.params)?;
        let parsed = &self.parsed;
        let started = self
            .conn
            .with(|inner| Ok(inner.exec.start(parsed, vals)?))?;
        Ok(Rows::new(
            self.conn,
            parsed.clone(),
            started,
            &mut self.spare,
        ))
    }

    /// Runs a query and maps every row.
    pub fn query_map<T, P: Params, F: FnMut(&Row) -> Result<T>>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let mut rows = self.query(params)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(f(r));
        }
        Ok(out.into_iter())
    }

    /// Runs a query and maps its first row.
    pub fn query_row<T, P: Params, F: FnOnce(&Row) -> Result<T>>(
        &mut self,
        params: P,
        f: F,
    ) -> Result<T> {
        let mut vals = self.conn.take_spare_params();
        params.bind_in(&self.parsed.params, &mut vals)?;
        let parsed = &self.parsed;
        let started = self.conn.with(|inner| {
            let started = inner.exec.start(parsed, vals)?;
            if matches!(started, Started::Done(_)) {
                // Computed whole (a point query): its parameters are spent, kept for the
                // next statement to bind into.
                inner.keep_params();
            }
            Ok(started)
        })?;
        if let Started::Done(out) = started {
            // The first row is the answer, without stepping.
            let values = out
                .rows
                .into_iter()
                .next()
                .ok_or(Error::QueryReturnedNoRows)?;
            return f(&Row {
                width: values.len(),
                values,
                columns: out.columns,
            });
        }
        let mut rows = Rows::new(self.conn, parsed.clone(), started, &mut self.spare);
        match rows.next()? {
            Some(r) => f(r),
            None => Err(Error::QueryReturnedNoRows),
        }
    }

    /// Whether the query returns at least one row.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        Ok(self.query(params)?.next()?.is_some())
    }

    /// Number of parameters.
    pub fn parameter_count(&self) -> usize {
        self.parsed.params.len()
    }
}

/// The rows of a query, stepped through with [`Rows::next`].
///
/// A SELECT of plain columns of one table whose rows come from a full scan or a rowid range
/// (no join, grouping, aggregate, DISTINCT, ORDER BY or LIMIT) is read a chunk at a time as
/// `next` asks, in rowid order, into the same buffers each chunk (a scan of the table engine
/// allocates nothing per row; an lsm table with its coordination cache on and a timeseries
/// table give the whole range as the first chunk); any other query is computed when it
/// runs. Other statements may run on the connection between `next` calls: the rows of the
/// chunks not read yet are read as they are then (each row at most once, in rowid order),
/// and a DROP TABLE or a change to the table's definition makes `next` return an error. A
/// chunk's WHERE is checked before its rows come out, so an error in a row's WHERE can come
/// before rows that precede it in its chunk. An error ends the rows.
pub struct Rows<'s> {
    conn: &'s Connection,
    parsed: Rc<Parsed>,
    /// Where a streamed query's row buffers go when the rows are dropped (the statement's).
    home: &'s mut Vec<Vec<Value>>,
    /// The query's rows still to read, if it is read a chunk at a time.
    stream: Option<Box<Stream>>,
    /// The rows read: `buf[pos..len]` are still to be returned; the vectors of the others
    /// are reused by the next chunk.
    buf: Vec<Vec<Value>>,
    pos: usize,
    len: usize,
    /// A streamed row's width (its vector may hold more values after the result's).
    width: Option<usize>,
    /// The row `next` returned last; its vector is `buf[pos - 1]`'s, swapped out until the
    /// next call.
    current: Row,
    lent: bool,
}

impl fmt::Debug for Rows<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rows")
            .field("columns", &self.current.columns)
            .field("streamed", &self.stream.is_some())
            .finish_non_exhaustive()
    }
}

impl<'s> Rows<'s> {
    fn new(
        conn: &'s Connection,
        parsed: Rc<Parsed>,
        started: Started,
        home: &'s mut Vec<Vec<Value>>,
    ) -> Self {
        // `len`: the rows ready (a stream's buffers come with leftovers, none ready).
        let (columns, stream, buf, len, width) = match started {
            Started::Done(out) => {
                let len = out.rows.len();
                (out.columns, None, out.rows, len, None)
            }
            Started::Stream(s) => {
                let width = s.width();
                let buf = std::mem::take(home);
                (s.columns().clone(), Some(s), buf, 0, Some(width))
            }
        };
        Rows {
            conn,
            parsed,
            home,
            stream,
            len,
            buf,
            pos: 0,
            width,
            current: Row {
                values: Vec::new(),
                width: 0,
                columns,
            },
            lent: false,
        }
    }

    /// The next row, or None at the end.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<&Row>> {
        if self.lent {
            self.lent = false;
            if let Some(slot) = self.buf.get_mut(self.pos.wrapping_sub(1)) {
                std::mem::swap(slot, &mut self.current.values);
            }
        }
        if self.pos >= self.len {
            let Some(stream) = self.stream.as_mut() else {
                return Ok(None);
            };
            self.pos = 0;
            self.len = 0;
            let (parsed, buf) = (&self.parsed, &mut self.buf);
            let n = self
                .conn
                .with(|inner| Ok(inner.exec.next_chunk(parsed, stream, buf)?));
            self.len = n?;
            if self.len == 0 {
                return Ok(None);
            }
        }
        let Some(slot) = self.buf.get_mut(self.pos) else {
            return Ok(None);
        };
        std::mem::swap(slot, &mut self.current.values);
        self.pos += 1;
        self.lent = true;
        let all = self.current.values.len();
        self.current.width = self.width.map_or(all, |w| w.min(all));
        Ok(Some(&self.current))
    }

    /// The result's column names.
    pub fn column_names(&self) -> Vec<&str> {
        self.current.columns.iter().map(String::as_str).collect()
    }
}

impl Drop for Rows<'_> {
    fn drop(&mut self) {
        // A streamed query's buffers (at most a chunk's rows) serve the statement's next run.
        if self.width.is_some() {
            if self.lent {
                if let Some(slot) = self.buf.get_mut(self.pos.wrapping_sub(1)) {
                    std::mem::swap(slot, &mut self.current.values);
                }
            }
            *self.home = std::mem::take(&mut self.buf);
        }
    }
}

/// One result row.
pub struct Row {
    /// The values; the row is the first `width` of them.
    values: Vec<Value>,
    width: usize,
    columns: Rc<[String]>,
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Row")
            .field("values", &self.values())
            .field("columns", &self.columns)
            .finish()
    }
}

impl Clone for Row {
    fn clone(&self) -> Self {
        Row {
            values: self.values().to_vec(),
            width: self.len(),
            columns: self.columns.clone(),
        }
    }
}

/// A column of a row, by position or by name.
pub trait RowIndex {
    /// The position.
    fn index(&self, row: &Row) -> Result<usize>;
}
impl RowIndex for usize {
    fn index(&self, row: &Row) -> Result<usize> {
        if *self < row.len() {
            Ok(*self)
        } else {
            Err(Error::InvalidColumnIndex(*self))
        }
    }
}
impl RowIndex for &str {
    fn index(&self, row: &Row) -> Result<usize> {
        row.columns
            .iter()
            .position(|c| c.eq_ignore_ascii_case(self))
            .ok_or_else(|| Error::InvalidColumnName(self.to_string()))
    }
}

impl Row {
    /// A column value converted to `T`.
    pub fn get<I: RowIndex, T: FromSql>(&self, idx: I) -> Result<T> {
        let i = idx.index(self)?;
        let v = self.values().get(i).ok_or(Error::InvalidColumnIndex(i))?;
        T::from_sql(v).map_err(|found| Error::InvalidColumnType {
            index: i,
            name: self.columns.get(i).cloned().unwrap_or_default(),
            found,
        })
    }

    /// A column's value.
    pub fn get_value<I: RowIndex>(&self, idx: I) -> Result<&Value> {
        let i = idx.index(self)?;
        self.values().get(i).ok_or(Error::InvalidColumnIndex(i))
    }

    /// All values.
    pub fn values(&self) -> &[Value] {
        self.values.get(..self.width).unwrap_or(&self.values)
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        self.values().len()
    }

    /// Whether the row has no columns.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open transaction; rolled back on drop unless [`commit`](Transaction::commit)ted.
pub struct Transaction<'c> {
    conn: &'c mut Connection,
    done: bool,
}

impl fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("done", &self.done)
            .finish()
    }
}

impl Transaction<'_> {
    /// Commits.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        self.conn.execute_batch("COMMIT")
    }

    /// Rolls back.
    pub fn rollback(mut self) -> Result<()> {
        self.done = true;
        self.conn.execute_batch("ROLLBACK")
    }
}

impl std::ops::Deref for Transaction<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}
