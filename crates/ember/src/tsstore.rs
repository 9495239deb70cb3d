//! Timeseries tables: `CREATE TABLE … USING timeseries(options)` keeps a table in a time
//! series of the EmbedDB engine (`ember-timeseries`), in the database's own device.
//!
//! * **Schema.** The first column is the `INTEGER PRIMARY KEY` (the rowid, the record's
//!   key: a timestamp, 4 or 8 bytes unsigned, strictly ascending); every other column is a
//!   fixed-size number whose width comes from its declared type (see [`col_type`]). A record's
//!   data is the columns after the key, little-endian, packed.
//! * **Where it lives.** [`create`](TsStore::create_table_using) allocates extents from the
//!   table engine's space manager through [`SharedDb`] (durable on return), formats the
//!   series' page headers there, and writes its row into `ember$ts` in the `CREATE TABLE`'s
//!   transaction; [`TsStore::open`] reopens every series the rows name (the engine's own
//!   recovery finds each area's write point).
//! * **Reads.** Key ranges go through the engine's spline index; `index_scan` on the one
//!   column the `index=` option names goes through the bitmap data index and returns rows in
//!   index order (value, then rowid), as the planner expects.
//! * **Transactions.** Rows appended in a transaction wait in RAM (the transaction's
//!   pending rows, seen by its own reads) and are put into the series at `COMMIT`, so
//!   `ROLLBACK` drops them. What `COMMIT` then promises is the table's `durable=` option.
//!
//! The row of `ember$ts` (format version 1):
//!
//! ```text
//! ember$ts(name TEXT = engine name s<n>, version INTEGER = 1, config TEXT, extents BLOB)
//! config:  "key=value;…" with key_size, page_size, erase_pages, pages, full, durable,
//!          cols (the data columns' types: i8 i16 i32 i64 f32 f64, comma-separated),
//!          index (column position:min:max:bits:pages, or "-"), indexes (the SQL index
//!          names on it, comma-separated), names (the column names as created)
//! extents: per extent 25 bytes: class u8, chunk u32, index u32, offset u64, len u64 (LE)
//! ```
//!
//! The row lives in a checksummed table-engine block; opening checks each extent is still
//! allocated with the offset and length recorded.

use std::collections::HashMap;
use std::ops::Bound;

use ember_device::{BlockDevice, DeviceError, Op};
use ember_sql::value::compare;
use ember_sql::{ColumnSpec, Result, Row, SqlError, Value};
use ember_table::space::Extent;
use ember_table::{BlockRef, Column, ExtentSpace, IndexKind, Schema, TableError, Value as TValue};
use ember_timeseries::{
    Area, BlockStore, BucketFn, Col, ColType, Config, DataOrder, LinearBuckets, OnFull, Query,
    Series, Value as TsValue, read_num,
};
use ouroboros::self_referencing;

use crate::shared::SharedDb;

/// The table-engine table that holds one row per series.
pub const ROOT_TABLE: &str = "ember$ts";
const ROOT_VERSION: i64 = 1;
const EXTENT_BYTES: usize = 25;
/// Most spline points a series keeps in RAM (beyond them the oldest pages are found by
/// binary search).
const SPLINE_POINTS: usize = 1024;

fn terr(e: TableError) -> SqlError {
    SqlError::Storage(e.to_string())
}

fn serr(table: &str, e: ember_timeseries::Error) -> SqlError {
    SqlError::Storage(format!("timeseries table {table}: {e}"))
}

// ----- the block device over extents ---------------------------------------------------------

/// A block device made of extents of the database's device, end to end.
#[derive(Debug)]
pub struct ExtentDevice<D: BlockDevice> {
    db: SharedDb<D>,
    extents: Vec<Extent>,
    len: u64,
}

impl<D: BlockDevice> ExtentDevice<D> {
    fn new(db: SharedDb<D>, extents: Vec<Extent>) -> Self {
        let len = extents.iter().map(|e| e.len).sum();
        ExtentDevice { db, extents, len }
    }

    fn each(
        &mut self,
        op: Op,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut SharedDb<D>, u64, std::ops::Range<usize>) -> ember_table::Result<()>,
    ) -> ember_device::Result<()> {
        let end = offset.checked_add(len as u64).filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(DeviceError::OutOfBounds {
                op,
                offset,
                len: len as u64,
                capacity: self.len,
            });
        }
        let (mut base, mut done) = (0u64, 0usize);
        for e in &self.extents {
            let at = offset + done as u64;
            if done == len {
                break;
            }
            if at < base + e.len {
                let n = ((base + e.len - at) as usize).min(len - done);
                f(&mut self.db, e.offset + (at - base), done..done + n).map_err(
                    |err| match err {
                        TableError::Device(d) => d,
                        _ => DeviceError::Io {
                            op,
                            offset: at,
                            errno: None,
                            detail: "the database's space manager refused the access",
                        },
                    },
                )?;
                done += n;
            }
            base += e.len;
        }
        Ok(())
    }
}

impl<D: BlockDevice> BlockDevice for ExtentDevice<D> {
    fn sector_size(&self) -> u32 {
        ember_device::DEFAULT_SECTOR_SIZE
    }
    fn capacity(&self) -> u64 {
        self.len
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> ember_device::Result<()> {
        let len = buf.len();
        self.each(Op::Read, offset, len, |db, at, r| {
            db.read_at(at, &mut buf[r])
        })
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> ember_device::Result<()> {
        self.each(Op::Write, offset, data.len(), |db, at, r| {
            db.write_at(at, &data[r])
        })
    }
    fn sync(&mut self) -> ember_device::Result<()> {
        self.db.sync_space().map_err(|e| match e {
            TableError::Device(d) => d,
            _ => DeviceError::Io {
                op: Op::Sync,
                offset: 0,
                errno: None,
                detail: "the database's space manager refused the sync",
            },
        })
    }
    fn resize(&mut self, new_len: u64) -> ember_device::Result<()> {
        if new_len == self.len {
            Ok(())
        } else {
            Err(DeviceError::Unsupported {
                op: Op::Resize,
                reason: "a series' extents have a fixed size",
            })
        }
    }
}

// ----- the configuration -------------------------------------------------------------------

/// When rows of a committed transaction are durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durable {
    /// `COMMIT` writes the write buffer as a (partly filled) page and syncs: a committed
    /// transaction survives a crash. Each commit starts a new page.
    Commit,
    /// EmbedDB's default: rows reach the device a full page at a time; a crash loses the
    /// rows of the page not yet written, committed or not.
    Page,
    /// EmbedDB's record-level consistency: every row put is written to a temporary page and
    /// synced, so a committed row survives without starting a new page.
    Row,
}

/// The bitmap data index of a series: the column, [`LinearBuckets`] over `[min, max]` in
/// `bits` buckets, and its index pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSpec {
    /// SQL column position (1 or more: the key is 0).
    pub column: usize,
    /// Lower end of the bucketed range.
    pub min: i64,
    /// Upper end.
    pub max: i64,
    /// Buckets (bits of the bitmap), 8 to 256.
    pub bits: usize,
    /// Index pages.
    pub pages: u32,
}

/// What a series is: the options of its `CREATE TABLE` and its column types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Key bytes: 4 or 8.
    pub key_size: usize,
    /// Page bytes.
    pub page_size: usize,
    /// Pages per erase unit (what a full series drops at once with `full=overwrite`).
    pub erase_pages: u32,
    /// Data pages.
    pub pages: u32,
    /// What a full series does.
    pub overwrite: bool,
    /// What `COMMIT` promises.
    pub durable: Durable,
    /// The types of the columns after the key.
    pub cols: Vec<ColType>,
    /// The bitmap data index, if any.
    pub index: Option<IndexSpec>,
    /// SQL index names (engine level) that map to the data index.
    pub indexes: Vec<String>,
    /// Column names as created (for messages).
    pub names: Vec<String>,
}

fn ty_name(t: ColType) -> &'static str {
    match t {
        ColType::I8 => "i8",
        ColType::U8 => "u8",
        ColType::I16 => "i16",
        ColType::U16 => "u16",
        ColType::I32 => "i32",
        ColType::U32 => "u32",
        ColType::I64 => "i64",
        ColType::U64 => "u64",
        ColType::F32 => "f32",
        ColType::F64 => "f64",
    }
}

fn ty_parse(s: &str) -> Option<ColType> {
    Some(match s {
        "i8" => ColType::I8,
        "i16" => ColType::I16,
        "i32" => ColType::I32,
        "i64" => ColType::I64,
        "f32" => ColType::F32,
        "f64" => ColType::F64,
        _ => return None,
    })
}

fn is_float(t: ColType) -> bool {
    matches!(t, ColType::F32 | ColType::F64)
}

/// The stored type of a column declared `decl` (`int`, `real`: the widths of plain
/// INTEGER and REAL columns from the options): `TINYINT`/`INT1` i8, `SMALLINT`/`INT2`/`INT16`
/// i16, `INT4`/`INT32`/`MEDIUMINT` i32, `BIGINT`/`INT8`/`INT64` i64, other integer types
/// (`INTEGER`, `INT`) `int`; `FLOAT4`/`FLOAT32` f32, `FLOAT8`/`FLOAT64`/`DOUBLE` f64, other
/// real types (`REAL`, `FLOAT`) `real`. Anything else has no fixed size.
pub fn col_type(decl: &str, int: ColType, real: ColType) -> Option<ColType> {
    let d: String = decl
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase();
    Some(match d.as_str() {
        "TINYINT" | "INT1" => ColType::I8,
        "SMALLINT" | "INT2" | "INT16" => ColType::I16,
        "INT4" | "INT32" | "MEDIUMINT" => ColType::I32,
        "BIGINT" | "INT8" | "INT64" | "UNSIGNED BIG INT" => ColType::I64,
        "INTEGER" | "INT" => int,
        "FLOAT4" | "FLOAT32" => ColType::F32,
        "FLOAT8" | "FLOAT64" | "DOUBLE" | "DOUBLE PRECISION" => ColType::F64,
        "REAL" | "FLOAT" => real,
        _ => return None,
    })
}

/// The option names `USING timeseries(…)` takes.
pub const OPTIONS: &[&str] = &[
    "key_size",
    "page_size",
    "erase_pages",
    "pages",
    "full",
    "durable",
    "int",
    "real",
    "index",
    "index_min",
    "index_max",
    "index_bits",
    "index_pages",
];

impl Spec {
    /// Parses the `USING timeseries(…)` clause (`using`, at byte `at` of the statement) for
    /// a table of these columns (the key first).
    pub fn parse(using: &str, at: usize, columns: &[ColumnSpec]) -> Result<Spec> {
        let body = match (using.find('('), using.ends_with(')')) {
            (Some(open), true) => Some((open + 1, &using[open + 1..using.len() - 1])),
            (None, _) => None,
            (Some(open), false) => {
                return Err(SqlError::syntax(at + open, "unbalanced timeseries options"));
            }
        };
        let mut opts: HashMap<&'static str, (usize, String)> = HashMap::new();
        if let Some((start, body)) = body {
            let mut off = start;
            for part in body.split(',') {
                let pos = at + off + (part.len() - part.trim_start().len());
                off += part.len() + 1;
                if part.trim().is_empty() {
                    if body.trim().is_empty() {
                        continue;
                    }
                    return Err(SqlError::syntax(pos, "empty timeseries option"));
                }
                let (name, value) = part.split_once('=').ok_or_else(|| {
                    SqlError::syntax(
                        pos,
                        format!(
                            "timeseries option {} needs a value: name=value",
                            part.trim()
                        ),
                    )
                })?;
                let name = name.trim().to_ascii_lowercase();
                let known = OPTIONS.iter().find(|o| **o == name).ok_or_else(|| {
                    SqlError::syntax(
                        pos,
                        format!(
                            "unknown timeseries option {name} (known: {})",
                            OPTIONS.join(", ")
                        ),
                    )
                })?;
                let value = value.trim().trim_matches(|c| c == '\'' || c == '"');
                if opts.insert(known, (pos, value.to_string())).is_some() {
                    return Err(SqlError::syntax(
                        pos,
                        format!("timeseries option {name} given twice"),
                    ));
                }
            }
        }
        let num = |name: &'static str, default: i64, lo: i64, hi: i64| -> Result<i64> {
            match opts.get(name) {
                None => Ok(default),
                Some((pos, v)) => v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| {
                        SqlError::syntax(
                            *pos,
                            format!("timeseries option {name} must be an integer from {lo} to {hi}, not {v}"),
                        )
                    }),
            }
        };
        let word = |name: &'static str,
                    default: &'static str,
                    allowed: &[&'static str]|
         -> Result<String> {
            match opts.get(name) {
                None => Ok(default.to_string()),
                Some((pos, v)) => {
                    let v = v.to_ascii_lowercase();
                    if allowed.contains(&v.as_str()) {
                        Ok(v)
                    } else {
                        Err(SqlError::syntax(
                            *pos,
                            format!(
                                "timeseries option {name} must be one of {}, not {v}",
                                allowed.join(", ")
                            ),
                        ))
                    }
                }
            }
        };
        let key_size = num("key_size", 8, 4, 8)?;
        if key_size != 4 && key_size != 8 {
            let pos = opts.get("key_size").map_or(at, |p| p.0);
            return Err(SqlError::syntax(
                pos,
                "timeseries option key_size must be 4 or 8",
            ));
        }
        let page_size = num("page_size", 512, 64, 65536)?;
        if (page_size as u64).count_ones() != 1 {
            let pos = opts.get("page_size").map_or(at, |p| p.0);
            return Err(SqlError::syntax(
                pos,
                "timeseries option page_size must be a power of two",
            ));
        }
        let erase_pages = num("erase_pages", 4, 1, 1024)? as u32;
        let pages = num("pages", 1024, 2, 1 << 24)? as u32;
        let pages = pages.div_ceil(erase_pages).max(2) * erase_pages;
        let overwrite = word("full", "refuse", &["refuse", "overwrite"])? == "overwrite";
        let durable = match word("durable", "commit", &["commit", "page", "row"])?.as_str() {
            "page" => Durable::Page,
            "row" => Durable::Row,
            _ => Durable::Commit,
        };
        let int = if num("int", 8, 4, 8)? == 4 {
            ColType::I32
        } else {
            ColType::I64
        };
        let real = if num("real", 8, 4, 8)? == 4 {
            ColType::F32
        } else {
            ColType::F64
        };
        if columns.len() < 2 {
            return Err(SqlError::invalid(
                "a timeseries table needs a value column after its key",
            ));
        }
        let mut cols = Vec::new();
        for c in &columns[1..] {
            cols.push(col_type(&c.decl_type, int, real).ok_or_else(|| {
                SqlError::invalid(format!(
                    "column {} of a timeseries table must be a fixed-size number (INTEGER or REAL types), not {}",
                    c.name,
                    if c.decl_type.is_empty() { "untyped" } else { &c.decl_type }
                ))
            })?);
        }
        let index = match opts.get("index") {
            None => {
                for o in ["index_min", "index_max", "index_bits", "index_pages"] {
                    if let Some((pos, _)) = opts.get(o) {
                        return Err(SqlError::syntax(
                            *pos,
                            format!("timeseries option {o} needs index=column"),
                        ));
                    }
                }
                None
            }
            Some((pos, name)) => {
                let column = columns
                    .iter()
                    .position(|c| c.name.eq_ignore_ascii_case(name))
                    .filter(|&i| i > 0)
                    .ok_or_else(|| {
                        SqlError::syntax(
                            *pos,
                            format!("timeseries option index names no value column: {name}"),
                        )
                    })?;
                let need = |o: &'static str| {
                    opts.get(o).map(|_| ()).ok_or_else(|| {
                        SqlError::syntax(*pos, format!("timeseries option index needs {o}"))
                    })
                };
                need("index_min")?;
                need("index_max")?;
                let min = num("index_min", 0, i64::MIN, i64::MAX)?;
                let max = num("index_max", 0, i64::MIN, i64::MAX)?;
                if max <= min {
                    return Err(SqlError::syntax(
                        opts["index_max"].0,
                        "timeseries option index_max must be above index_min",
                    ));
                }
                let bits = num("index_bits", 64, 8, 256)? as usize;
                let ipages = num(
                    "index_pages",
                    i64::from((pages / 16).max(2 * erase_pages)),
                    2,
                    1 << 24,
                )? as u32;
                let ipages = ipages.div_ceil(erase_pages).max(2) * erase_pages;
                Some(IndexSpec {
                    column,
                    min,
                    max,
                    bits,
                    pages: ipages,
                })
            }
        };
        Ok(Spec {
            key_size: key_size as usize,
            page_size: page_size as usize,
            erase_pages,
            pages,
            overwrite,
            durable,
            cols,
            index,
            indexes: Vec::new(),
            names: columns.iter().map(|c| c.name.clone()).collect(),
        })
    }

    /// The `config` text of the `ember$ts` row.
    pub fn encode(&self) -> String {
        let cols: Vec<&str> = self.cols.iter().map(|&t| ty_name(t)).collect();
        let index = match self.index {
            Some(i) => format!("{}:{}:{}:{}:{}", i.column, i.min, i.max, i.bits, i.pages),
            None => "-".into(),
        };
        format!(
            "key_size={};page_size={};erase_pages={};pages={};full={};durable={};cols={};index={};indexes={};names={}",
            self.key_size,
            self.page_size,
            self.erase_pages,
            self.pages,
            if self.overwrite {
                "overwrite"
            } else {
                "refuse"
            },
            match self.durable {
                Durable::Commit => "commit",
                Durable::Page => "page",
                Durable::Row => "row",
            },
            cols.join(","),
            index,
            self.indexes.join(","),
            self.names.join("\u{1f}"),
        )
    }

    /// Reads a `config` text back.
    pub fn decode(text: &str) -> Option<Spec> {
        let mut m: HashMap<&str, &str> = HashMap::new();
        for kv in text.split(';') {
            let (k, v) = kv.split_once('=')?;
            m.insert(k, v);
        }
        let n = |k: &str| m.get(k)?.parse::<u64>().ok();
        let list = |k: &str, sep: char| -> Option<Vec<String>> {
            let v = m.get(k)?;
            Some(if v.is_empty() {
                Vec::new()
            } else {
                v.split(sep).map(String::from).collect()
            })
        };
        let index = match *m.get("index")? {
            "-" => None,
            s => {
                let p: Vec<&str> = s.split(':').collect();
                if p.len() != 5 {
                    return None;
                }
                Some(IndexSpec {
                    column: p[0].parse().ok()?,
                    min: p[1].parse().ok()?,
                    max: p[2].parse().ok()?,
                    bits: p[3].parse().ok()?,
                    pages: p[4].parse().ok()?,
                })
            }
        };
        let cols = list("cols", ',')?
            .iter()
            .map(|s| ty_parse(s))
            .collect::<Option<Vec<_>>>()?;
        let spec = Spec {
            key_size: n("key_size")? as usize,
            page_size: n("page_size")? as usize,
            erase_pages: u32::try_from(n("erase_pages")?).ok()?,
            pages: u32::try_from(n("pages")?).ok()?,
            overwrite: match *m.get("full")? {
                "overwrite" => true,
                "refuse" => false,
                _ => return None,
            },
            durable: match *m.get("durable")? {
                "commit" => Durable::Commit,
                "page" => Durable::Page,
                "row" => Durable::Row,
                _ => return None,
            },
            cols,
            index,
            indexes: list("indexes", ',')?,
            names: list("names", '\u{1f}')?,
        };
        (spec
            .index
            .is_none_or(|i| i.column >= 1 && i.column <= spec.cols.len())
            && !spec.cols.is_empty())
        .then_some(spec)
    }

    /// Bytes of a record's data.
    pub fn data_size(&self) -> usize {
        self.cols.iter().map(|t| t.width()).sum()
    }

    fn offset(&self, col: usize) -> usize {
        self.cols[..col - 1].iter().map(|t| t.width()).sum()
    }

    fn data_col(&self, col: usize) -> Col {
        Col::at(self.offset(col), self.cols[col - 1])
    }

    /// Bytes of the extents the series needs.
    pub fn bytes(&self) -> u64 {
        let pages = u64::from(self.pages) + u64::from(self.index.map_or(0, |i| i.pages));
        pages * self.page_size as u64
    }

    fn config<'a>(&self, buckets: Option<&'a dyn BucketFn>) -> Config<'a> {
        let order = self.index.map_or(1, |i| i.column);
        let mut cfg = Config::new(
            self.key_size,
            self.data_size(),
            self.page_size,
            self.erase_pages,
            Area::new(0, self.pages),
        )
        .on_full(if self.overwrite {
            OnFull::Overwrite
        } else {
            OnFull::Refuse
        })
        .record_level_consistency(self.durable == Durable::Row)
        .data_order(DataOrder::Col(self.data_col(order)));
        if let (Some(i), Some(b)) = (self.index, buckets) {
            cfg = cfg.index(Area::new(self.pages, i.pages), b);
        }
        cfg
    }

    fn name(&self, col: usize) -> &str {
        self.names.get(col).map_or("?", String::as_str)
    }

    /// Encodes the values of a row (the key's position ignored) as the record's data.
    fn encode_row(&self, table: &str, row: &[Value]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.data_size());
        for (i, &ty) in self.cols.iter().enumerate() {
            let col = i + 1;
            let v = row.get(col).unwrap_or(&Value::Null);
            let bad = |what: String| {
                SqlError::invalid(format!(
                    "column {} of timeseries table {table} holds {} numbers: {what}",
                    self.name(col),
                    ty_name(ty)
                ))
            };
            let int = |v: &Value| -> Result<i64> {
                match v {
                    Value::Integer(n) => Ok(*n),
                    Value::Real(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Ok(*f as i64),
                    Value::Null => Err(bad("cannot store NULL".into())),
                    other => Err(bad(format!("cannot store {other:?}"))),
                }
            };
            match ty {
                ColType::F32 | ColType::F64 => {
                    let f = match v {
                        Value::Integer(n) => *n as f64,
                        Value::Real(f) => *f,
                        Value::Null => return Err(bad("cannot store NULL".into())),
                        other => return Err(bad(format!("cannot store {other:?}"))),
                    };
                    if ty == ColType::F32 {
                        out.extend_from_slice(&(f as f32).to_le_bytes());
                    } else {
                        out.extend_from_slice(&f.to_le_bytes());
                    }
                }
                _ => {
                    let n = int(v)?;
                    let range = |b| bad(format!("{n} does not fit in {b} bytes"));
                    match ty {
                        ColType::I8 => out.push(i8::try_from(n).map_err(|_| range(1))? as u8),
                        ColType::I16 => out.extend_from_slice(
                            &i16::try_from(n).map_err(|_| range(2))?.to_le_bytes(),
                        ),
                        ColType::I32 => out.extend_from_slice(
                            &i32::try_from(n).map_err(|_| range(4))?.to_le_bytes(),
                        ),
                        _ => out.extend_from_slice(&n.to_le_bytes()),
                    }
                }
            }
        }
        Ok(out)
    }

    fn decode_row(&self, key: u64, data: &[u8]) -> Row {
        let mut row = Vec::with_capacity(self.cols.len() + 1);
        row.push(Value::Integer(key as i64));
        let mut off = 0;
        for &ty in &self.cols {
            row.push(match read_num(data, off, ty) {
                Some(TsValue::Int(n)) => Value::Integer(n),
                // A NaN reading is NULL in SQL (see `storage::from_ref`).
                Some(TsValue::Float(f)) if f.is_nan() => Value::Null,
                Some(TsValue::Float(f)) => Value::Real(f),
                None => Value::Null,
            });
            off += ty.width();
        }
        (key as i64, row)
    }
}

fn encode_extents(extents: &[Extent]) -> Vec<u8> {
    let mut b = Vec::with_capacity(extents.len() * EXTENT_BYTES);
    for e in extents {
        b.push(e.block.class);
        b.extend_from_slice(&e.block.chunk.to_le_bytes());
        b.extend_from_slice(&e.block.index.to_le_bytes());
        b.extend_from_slice(&e.offset.to_le_bytes());
        b.extend_from_slice(&e.len.to_le_bytes());
    }
    b
}

fn decode_extents(b: &[u8]) -> Option<Vec<Extent>> {
    if b.is_empty() || !b.len().is_multiple_of(EXTENT_BYTES) {
        return None;
    }
    let u32at = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let u64at = |s: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[..8]);
        u64::from_le_bytes(w)
    };
    Some(
        b.chunks_exact(EXTENT_BYTES)
            .map(|c| Extent {
                block: BlockRef {
                    class: c[0],
                    chunk: u32at(&c[1..5]),
                    index: u32at(&c[5..9]),
                },
                offset: u64at(&c[9..17]),
                len: u64at(&c[17..25]),
            })
            .collect(),
    )
}

// ----- an open series ----------------------------------------------------------------------

#[self_referencing]
struct OpenSeries<D: BlockDevice> {
    buckets: Option<LinearBuckets>,
    arena: Vec<u8>,
    #[borrows(buckets, mut arena)]
    #[not_covariant]
    series: Series<'this, BlockStore<ExtentDevice<D>>>,
}

impl<D: BlockDevice> OpenSeries<D> {
    fn start(
        spec: &Spec,
        dev: ExtentDevice<D>,
        format: bool,
        table: &str,
    ) -> Result<OpenSeries<D>> {
        let buckets = spec
            .index
            .map(|i| LinearBuckets::new(spec.data_col(i.column), i.min, i.max, i.bits));
        // Page buffers: write and read, and the index's two with a data index; then the
        // spline's points.
        let buffers = if spec.index.is_some() { 4 } else { 2 };
        let points = SPLINE_POINTS.min(spec.pages as usize + 2);
        let arena = vec![0u8; buffers * spec.page_size + points * (spec.key_size + 4)];
        OpenSeriesTryBuilder {
            buckets,
            arena,
            series_builder: |b: &Option<LinearBuckets>, a: &mut Vec<u8>| {
                let cfg = spec.config(b.as_ref().map(|x| x as &dyn BucketFn));
                let store = BlockStore(dev);
                if format {
                    Series::format(store, cfg, a)
                } else {
                    Series::open(store, cfg, a)
                }
            },
        }
        .try_build()
        .map_err(|e| match e {
            ember_timeseries::Error::Config { reason } => {
                SqlError::invalid(format!("timeseries options of {table}: {reason}"))
            }
            e => serr(table, e),
        })
    }
}

struct Table<D: BlockDevice> {
    spec: Spec,
    extents: Vec<Extent>,
    series: OpenSeries<D>,
    /// Rows appended in the open transaction (key, data), put into the series at commit.
    pending: Vec<(u64, Vec<u8>)>,
    /// The last key in the series.
    last: Option<u64>,
}

impl<D: BlockDevice> Table<D> {
    fn last_key(&self) -> Option<u64> {
        self.pending.last().map(|p| p.0).or(self.last)
    }

    /// Rows of the series (not the pending ones) a query selects.
    fn query(&mut self, name: &str, q: Query<'_>) -> Result<Vec<Row>> {
        let spec = &self.spec;
        self.series.with_series_mut(|s| {
            let mut rows = Vec::new();
            let mut buf = vec![0u8; spec.data_size()];
            let mut it = s.iter(q).map_err(|e| serr(name, e))?;
            while let Some(k) = it.next_into(&mut buf).map_err(|e| serr(name, e))? {
                rows.push(spec.decode_row(k, &buf));
            }
            Ok(rows)
        })
    }
}

/// The timeseries tables of a database (see the module docs).
pub struct TsStore<D: BlockDevice> {
    db: SharedDb<D>,
    tables: HashMap<String, Table<D>>,
    /// Series made in the open transaction (freed by a rollback).
    created: Vec<String>,
    /// Series dropped in the open transaction (freed by the commit, kept by a rollback).
    dropped: Vec<(String, Table<D>)>,
}

impl<D: BlockDevice> std::fmt::Debug for TsStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.tables.keys().collect();
        names.sort();
        f.debug_struct("TsStore").field("tables", &names).finish()
    }
}

fn key_of(table: &str, spec: &Spec, rowid: i64) -> Result<u64> {
    let max = if spec.key_size == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    u64::try_from(rowid)
        .ok()
        .filter(|&k| k <= max)
        .ok_or_else(|| {
            SqlError::invalid(format!(
                "timeseries table {table}: timestamp {rowid} does not fit its {}-byte unsigned key",
                spec.key_size
            ))
        })
}

/// Key bounds in the engine's inclusive form; `None` if no key can match.
fn key_bounds(spec: &Spec, lo: Bound<i64>, hi: Bound<i64>) -> Option<(u64, u64)> {
    let max = if spec.key_size == 4 {
        u64::from(u32::MAX)
    } else {
        i64::MAX as u64
    };
    let lo = match lo {
        Bound::Unbounded => 0,
        Bound::Included(x) => x.max(0) as u64,
        Bound::Excluded(x) => x.checked_add(1)?.max(0) as u64,
    };
    let hi = match hi {
        Bound::Unbounded => max,
        Bound::Included(x) => u64::try_from(x).ok()?.min(max),
        Bound::Excluded(x) => u64::try_from(x.checked_sub(1)?).ok()?.min(max),
    };
    (lo <= hi).then_some((lo, hi))
}

fn within(v: &Value, lo: &Bound<&[Value]>, hi: &Bound<&[Value]>) -> bool {
    use std::cmp::Ordering::*;
    let ok_lo = match lo {
        Bound::Unbounded => true,
        Bound::Included(b) => b.first().is_none_or(|b| compare(v, b) != Less),
        Bound::Excluded(b) => b.first().is_none_or(|b| compare(v, b) == Greater),
    };
    let ok_hi = match hi {
        Bound::Unbounded => true,
        Bound::Included(b) => b.first().is_none_or(|b| compare(v, b) != Greater),
        Bound::Excluded(b) => b.first().is_none_or(|b| compare(v, b) == Less),
    };
    ok_lo && ok_hi
}

/// A numeric bound of the indexed column in the engine's inclusive form, as data bytes:
/// `Ok(None)` open, `Err(())` nothing can match.
fn data_bound(
    spec: &Spec,
    col: usize,
    b: &Bound<&[Value]>,
    low: bool,
) -> std::result::Result<Option<Vec<u8>>, ()> {
    let v = match b {
        Bound::Unbounded => return Ok(None),
        Bound::Included(v) | Bound::Excluded(v) => match v.first() {
            None => return Ok(None),
            Some(v) => v,
        },
    };
    let x = match v {
        Value::Integer(n) => *n as f64,
        Value::Real(f) => *f,
        // Every number sorts above NULL and below text and blobs.
        Value::Null => return if low { Ok(None) } else { Err(()) },
        Value::Text(_) | Value::Blob(_) => return if low { Err(()) } else { Ok(None) },
    };
    let ty = spec.cols[col - 1];
    let mut data = vec![0u8; spec.data_size()];
    let off = spec.offset(col);
    if is_float(ty) {
        if ty == ColType::F32 {
            data[off..off + 4].copy_from_slice(&(x as f32).to_le_bytes());
        } else {
            data[off..off + 8].copy_from_slice(&x.to_le_bytes());
        }
        return Ok(Some(data));
    }
    let (min, max) = match ty {
        ColType::I8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
        ColType::I16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        ColType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    };
    // Integers inside the bound: round toward it; exact integers stay (the exact filter
    // afterwards applies Excluded).
    let n = match v {
        Value::Integer(n) => *n,
        _ => {
            let r = if low { x.ceil() } else { x.floor() };
            if r >= 9.2e18 {
                i64::MAX
            } else if r <= -9.2e18 {
                i64::MIN
            } else {
                r as i64
            }
        }
    };
    if (low && n > max) || (!low && n < min) {
        return Err(());
    }
    let n = n.clamp(min, max);
    let w = ty.width();
    data[off..off + w].copy_from_slice(&n.to_le_bytes()[..w]);
    Ok(Some(data))
}

impl<D: BlockDevice> TsStore<D> {
    /// Opens the series the database holds (none if it has no `ember$ts`).
    pub fn open(db: SharedDb<D>) -> Result<Self> {
        let rows = {
            let mut g = db.lock()?;
            if g.table_names().contains(&ROOT_TABLE) {
                g.scan(ROOT_TABLE).map_err(terr)?
            } else {
                Vec::new()
            }
        };
        let mut store = TsStore {
            db,
            tables: HashMap::new(),
            created: Vec::new(),
            dropped: Vec::new(),
        };
        for row in rows {
            let bad = |why: &str| {
                SqlError::Storage(format!("timeseries engine: a row of {ROOT_TABLE} {why}"))
            };
            let (name, config, ext) = match row.as_slice() {
                [
                    TValue::Text(n),
                    TValue::Integer(ROOT_VERSION),
                    TValue::Text(c),
                    TValue::Blob(e),
                ] => (n.clone(), c.clone(), e.clone()),
                [_, TValue::Integer(v), _, _] => {
                    return Err(bad(&format!(
                        "has format version {v}; this build reads {ROOT_VERSION}"
                    )));
                }
                _ => return Err(bad("is not (name, version, config, extents)")),
            };
            let spec = Spec::decode(&config).ok_or_else(|| bad("has a config it cannot read"))?;
            let extents = decode_extents(&ext).ok_or_else(|| bad("has a bad extent list"))?;
            for e in &extents {
                let now = store.db.allocated_extent(e.block);
                if now != Some(*e) {
                    return Err(bad(&format!(
                        "names an extent at {} that the space manager does not hold as allocated",
                        e.offset
                    )));
                }
            }
            let dev = ExtentDevice::new(store.db.clone(), extents.clone());
            let mut series = OpenSeries::start(&spec, dev, false, &name)?;
            let last = series.with_series_mut(|s| s.last_key());
            store.tables.insert(
                name,
                Table {
                    spec,
                    extents,
                    series,
                    pending: Vec::new(),
                    last,
                },
            );
        }
        Ok(store)
    }

    fn table(&mut self, name: &str) -> Result<&mut Table<D>> {
        self.tables
            .get_mut(name)
            .ok_or_else(|| SqlError::Storage(format!("timeseries engine: no series {name}")))
    }

    fn index_table(&mut self, index: &str) -> Result<(String, usize)> {
        for (n, t) in &self.tables {
            if t.spec.indexes.iter().any(|i| i == index) {
                let col = t.spec.index.map_or(0, |i| i.column);
                return Ok((n.clone(), col));
            }
        }
        Err(SqlError::Storage(format!(
            "timeseries engine: no data index {index}"
        )))
    }

    fn write_row(&mut self, name: &str) -> Result<()> {
        let t = self.table(name)?;
        let row = [
            TValue::Text(name.to_string()),
            TValue::Integer(ROOT_VERSION),
            TValue::Text(t.spec.encode()),
            TValue::Blob(encode_extents(&t.extents)),
        ];
        let mut db = self.db.lock()?;
        if !db.table_names().contains(&ROOT_TABLE) {
            let col = |name: &str, ty: &str| Column {
                name: name.into(),
                decl_type: ty.into(),
                not_null: true,
            };
            db.create_table(
                ROOT_TABLE,
                Schema {
                    columns: vec![
                        col("name", "TEXT"),
                        col("version", "INTEGER"),
                        col("config", "TEXT"),
                        col("extents", "BLOB"),
                    ],
                    primary_key: vec![0],
                    index: IndexKind::Tree,
                },
            )
            .map_err(terr)?;
        }
        db.delete(ROOT_TABLE, &[TValue::Text(name.to_string())])
            .map_err(terr)?;
        db.insert(ROOT_TABLE, &row).map_err(terr)?;
        Ok(())
    }

    /// The engine's counters of a series (pages read and written, lookups), and its records
    /// per page; `None` if there is no such series.
    pub fn stats(&mut self, name: &str) -> Option<(ember_timeseries::Stats, usize)> {
        let t = self.tables.get_mut(name)?;
        Some(
            t.series
                .with_series_mut(|s| (s.stats(), s.records_per_page())),
        )
    }

    /// Zeroes the counters of every series.
    pub fn reset_stats(&mut self) {
        for t in self.tables.values_mut() {
            t.series.with_series_mut(|s| s.reset_stats());
        }
    }

    /// Whether the series exists.
    pub fn has_table(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }

    /// Makes a series for a table (see the module docs).
    pub fn create_table_using(
        &mut self,
        name: &str,
        columns: &[ColumnSpec],
        using: &str,
        at: usize,
    ) -> Result<()> {
        let spec = Spec::parse(using, at, columns)?;
        let extents = self.db.allocate_extents(spec.bytes()).map_err(terr)?;
        let dev = ExtentDevice::new(self.db.clone(), extents.clone());
        let series = match OpenSeries::start(&spec, dev, true, name) {
            Ok(s) => s,
            Err(e) => {
                let _ = self.db.free_extents(&extents);
                return Err(e);
            }
        };
        self.tables.insert(
            name.to_string(),
            Table {
                spec,
                extents,
                series,
                pending: Vec::new(),
                last: None,
            },
        );
        self.created.push(name.to_string());
        self.write_row(name)
    }

    /// Drops a series (its space is given back when the transaction commits).
    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        let t = self
            .tables
            .remove(name)
            .ok_or_else(|| SqlError::Storage(format!("timeseries engine: no series {name}")))?;
        self.db
            .lock()?
            .delete(ROOT_TABLE, &[TValue::Text(name.to_string())])
            .map_err(terr)?;
        self.dropped.push((name.to_string(), t));
        Ok(())
    }

    /// Appends a row (held until commit); keys must ascend.
    pub fn insert(&mut self, name: &str, rowid: i64, row: &[Value]) -> Result<()> {
        let t = self.table(name)?;
        let key = key_of(name, &t.spec, rowid)?;
        if let Some(last) = t.last_key() {
            if key <= last {
                return Err(SqlError::invalid(format!(
                    "timeseries table {name}: timestamps must ascend: got {key} after {last}"
                )));
            }
        }
        let data = t.spec.encode_row(name, row)?;
        t.pending.push((key, data));
        Ok(())
    }

    /// Deletes a row: only one appended in the open transaction and the newest (the
    /// executor's undo of a failed statement); the engine keeps no other deletes. A row
    /// that is not there is no error (`false`): a DELETE by key reads nothing first.
    pub fn delete(&mut self, name: &str, rowid: i64) -> Result<bool> {
        let t = self.table(name)?;
        if let Some(&(k, _)) = t.pending.last() {
            if k as i64 == rowid {
                t.pending.pop();
                return Ok(true);
            }
        }
        if self.get(name, rowid)?.is_none() {
            return Ok(false);
        }
        Err(SqlError::invalid(format!(
            "timeseries table {name} is append-only: rows cannot be deleted"
        )))
    }

    /// The row under a key.
    pub fn get(&mut self, name: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        let t = self.table(name)?;
        let Ok(key) = key_of(name, &t.spec, rowid) else {
            return Ok(None);
        };
        if let Ok(i) = t.pending.binary_search_by_key(&key, |p| p.0) {
            return Ok(Some(t.spec.decode_row(key, &t.pending[i].1).1));
        }
        let spec = &t.spec;
        t.series.with_series_mut(|s| {
            let mut buf = vec![0u8; spec.data_size()];
            if s.get(key, &mut buf).map_err(|e| serr(name, e))? {
                Ok(Some(spec.decode_row(key, &buf).1))
            } else {
                Ok(None)
            }
        })
    }

    /// Rows in a key range, in key order.
    pub fn scan(&mut self, name: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        let t = self.table(name)?;
        let Some((a, b)) = key_bounds(&t.spec, lo, hi) else {
            return Ok(Vec::new());
        };
        let q = if lo == Bound::Unbounded && hi == Bound::Unbounded {
            Query::all()
        } else {
            Query::keys(a, b)
        };
        let mut rows = t.query(name, q)?;
        for (k, d) in &t.pending {
            if (a..=b).contains(k) {
                rows.push(t.spec.decode_row(*k, d));
            }
        }
        Ok(rows)
    }

    /// The newest key.
    pub fn max_rowid(&mut self, name: &str) -> Result<Option<i64>> {
        Ok(self.table(name)?.last_key().map(|k| k as i64))
    }

    /// Maps a SQL index on the series' data-indexed column to the bitmap index.
    pub fn create_index(&mut self, index: &str, name: &str, columns: &[usize]) -> Result<()> {
        let t = self.table(name)?;
        match t.spec.index {
            Some(i) if columns == [i.column] => {}
            Some(i) => {
                return Err(SqlError::invalid(format!(
                    "timeseries table has a data index on column {} only (option index=)",
                    t.spec.name(i.column)
                )));
            }
            None => {
                return Err(SqlError::invalid(
                    "a timeseries table has indexes only on the column its index= option names",
                ));
            }
        }
        t.spec.indexes.push(index.to_string());
        self.write_row(name)
    }

    /// Forgets a SQL index name (the bitmap index stays with the series).
    pub fn drop_index(&mut self, index: &str) -> Result<()> {
        let (name, _) = self.index_table(index)?;
        self.table(&name)?.spec.indexes.retain(|i| i != index);
        self.write_row(&name)
    }

    /// Rows whose indexed value is in the bounds, through the bitmap index, in index order.
    pub fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>> {
        let (name, col) = self.index_table(index)?;
        let t = self.table(&name)?;
        let (Ok(min), Ok(max)) = (
            data_bound(&t.spec, col, &lo, true),
            data_bound(&t.spec, col, &hi, false),
        ) else {
            return Ok(Vec::new());
        };
        let q = Query::data(min.as_deref(), max.as_deref());
        let mut rows = t.query(&name, q)?;
        for (k, d) in &t.pending {
            rows.push(t.spec.decode_row(*k, d));
        }
        rows.retain(|(_, r)| within(&r[col], &lo, &hi));
        rows.sort_by(|a, b| compare(&a.1[col], &b.1[col]).then(a.0.cmp(&b.0)));
        Ok(rows)
    }

    /// Whether the open transaction's rows fit their series (full=refuse): a transaction
    /// is refused whole rather than put in part.
    fn check_room(name: &str, t: &mut Table<D>) -> Result<()> {
        if t.pending.is_empty() || t.spec.overwrite {
            return Ok(());
        }
        let spec = &t.spec;
        let n = t.pending.len() as u64;
        let (room, needed) = t.series.with_series_mut(|s| {
            let reserved = if spec.durable == Durable::Row { 2 } else { 0 };
            let units = u64::from(spec.pages / spec.erase_pages);
            let cap = units.saturating_sub(reserved) * u64::from(spec.erase_pages);
            let used = s
                .page_range()
                .map_or(0, |(_, newest)| u64::from(newest) + 1);
            let per = s.records_per_page().max(1) as u64;
            let rows = s.buffered() as u64 + n;
            let flush = spec.durable == Durable::Commit && !rows.is_multiple_of(per);
            (cap.saturating_sub(used), rows / per + u64::from(flush))
        });
        if needed > room {
            return Err(SqlError::Storage(format!(
                "timeseries table {name} is full: {room} free pages do not hold the transaction's {n} rows (option pages={}, full=refuse)",
                spec.pages
            )));
        }
        Ok(())
    }

    /// Puts the open transaction's rows into their series and makes them as durable as each
    /// table's `durable=` option says.
    pub fn commit(&mut self) -> Result<()> {
        for (name, t) in self.tables.iter_mut() {
            Self::check_room(name, t)?;
        }
        for (name, t) in self.tables.iter_mut() {
            if t.pending.is_empty() {
                continue;
            }
            let pending = std::mem::take(&mut t.pending);
            let durable = t.spec.durable;
            let full = t.spec.pages;
            let res = t.series.with_series_mut(|s| {
                for (k, d) in &pending {
                    s.put(*k, d).map_err(|e| match e {
                        ember_timeseries::Error::Full { .. } => SqlError::Storage(format!(
                            "timeseries table {name} is full ({full} pages; option full=refuse)"
                        )),
                        e => serr(name, e),
                    })?;
                }
                if durable == Durable::Commit {
                    s.flush().map_err(|e| serr(name, e))?;
                }
                Ok(())
            });
            t.last = t.series.with_series_mut(|s| s.last_key());
            res?;
        }
        Ok(())
    }

    /// After the table engine committed: gives the dropped series' space back. The
    /// transaction is committed whatever happens here, so a free that fails only leaks the
    /// space (as a cut at this point would), and is not reported as a failed commit.
    pub fn committed(&mut self) -> Result<()> {
        self.created.clear();
        for (_, t) in std::mem::take(&mut self.dropped) {
            let extents = t.extents.clone();
            drop(t);
            let _ = self.db.free_extents(&extents);
        }
        Ok(())
    }

    /// Drops the open transaction's rows, forgets the series it made (giving their space
    /// back once the table engine rolled back) and keeps those it dropped.
    pub fn rollback(&mut self) -> Vec<Extent> {
        for t in self.tables.values_mut() {
            t.pending.clear();
        }
        for (name, t) in std::mem::take(&mut self.dropped) {
            self.tables.insert(name, t);
        }
        let mut free = Vec::new();
        for name in std::mem::take(&mut self.created) {
            if let Some(t) = self.tables.remove(&name) {
                free.extend(t.extents.iter().copied());
            }
        }
        free
    }

    /// Gives extents back (after a rollback).
    pub fn free(&mut self, extents: &[Extent]) -> Result<()> {
        if extents.is_empty() {
            return Ok(());
        }
        self.db.free_extents(extents).map_err(terr)
    }

    /// Writes every series' buffered rows and lets go of the database.
    pub fn close(self) -> Result<()> {
        for (name, mut t) in self.tables {
            t.series
                .with_series_mut(|s| s.flush())
                .map_err(|e| serr(&name, e))?;
        }
        Ok(())
    }
}

impl<D: BlockDevice> crate::routed::SeriesStore for TsStore<D> {
    fn held_ranges(&self) -> Vec<(u64, u64)> {
        // Dropped series keep their space until the transaction commits.
        self.tables
            .values()
            .chain(self.dropped.iter().map(|(_, t)| t))
            .flat_map(|t| t.extents.iter().map(|e| (e.offset, e.len)))
            .collect()
    }

    fn has_table(&self, t: &str) -> bool {
        TsStore::has_table(self, t)
    }
    fn create_table_using(
        &mut self,
        t: &str,
        columns: &[ColumnSpec],
        using: &str,
        at: usize,
    ) -> Result<()> {
        TsStore::create_table_using(self, t, columns, using, at)
    }
    fn drop_table(&mut self, t: &str) -> Result<()> {
        TsStore::drop_table(self, t)
    }
    fn insert(&mut self, t: &str, rowid: i64, row: &[Value]) -> Result<()> {
        TsStore::insert(self, t, rowid, row)
    }
    fn delete(&mut self, t: &str, rowid: i64) -> Result<bool> {
        TsStore::delete(self, t, rowid)
    }
    fn get(&mut self, t: &str, rowid: i64) -> Result<Option<Vec<Value>>> {
        TsStore::get(self, t, rowid)
    }
    fn scan(&mut self, t: &str, lo: Bound<i64>, hi: Bound<i64>) -> Result<Vec<Row>> {
        TsStore::scan(self, t, lo, hi)
    }
    fn max_rowid(&mut self, t: &str) -> Result<Option<i64>> {
        TsStore::max_rowid(self, t)
    }
    fn create_index(&mut self, index: &str, t: &str, columns: &[usize]) -> Result<()> {
        TsStore::create_index(self, index, t, columns)
    }
    fn drop_index(&mut self, index: &str) -> Result<()> {
        TsStore::drop_index(self, index)
    }
    fn index_scan(
        &mut self,
        index: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Row>> {
        TsStore::index_scan(self, index, lo, hi)
    }
    fn commit(&mut self) -> Result<()> {
        TsStore::commit(self)
    }
    fn committed(&mut self) -> Result<()> {
        TsStore::committed(self)
    }
    fn rolled_back(&mut self) -> Result<()> {
        let free = self.rollback();
        self.free(&free)
    }
}
