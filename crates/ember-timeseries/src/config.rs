//! The configuration of a series, as EmbedDB's: key size, data size, page size, erase-unit
//! size in pages, buffer count, the areas on the storage, and the optional parts (spline key
//! index, bitmap data index, variable-size data, record-level consistency).
//!
//! All memory comes from the caller: one byte arena holds the page buffers and the spline
//! points ([`Config::buffer_bytes`] says how much the buffers take; what is left holds spline
//! points).

use core::cmp::Ordering;

use crate::bitmap::BucketFn;
use crate::error::{Error, Result};
use crate::page::{COMMON, Layout, MAX_BITMAP};
use crate::storage::Geometry;
use crate::value::Col;

/// The order of data values (for data-range queries and the pages' data min/max).
#[derive(Clone, Copy)]
pub enum DataOrder<'a> {
    /// By the numeric value of one column (the default: the first `i32`).
    Col(Col),
    /// By the bytes, lexicographically.
    Bytes,
    /// By a function.
    Fn(&'a dyn Fn(&[u8], &[u8]) -> Ordering),
}

impl core::fmt::Debug for DataOrder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DataOrder::Col(c) => write!(f, "Col({c:?})"),
            DataOrder::Bytes => f.write_str("Bytes"),
            DataOrder::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// What to do when an area is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnFull {
    /// Erase the oldest erase unit and go on (a circular queue: the newest data is kept).
    Overwrite,
    /// Refuse new data with [`Error::Full`](crate::Error::Full).
    Refuse,
}

/// A run of pages on the storage: `pages` pages starting at page number `first_page`
/// (page numbers count `page_size` bytes from address 0). Both must be multiples of the
/// erase-unit size in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Area {
    /// First page number.
    pub first_page: u32,
    /// Number of pages.
    pub pages: u32,
}

impl Area {
    /// `pages` pages from page number `first_page`.
    pub const fn new(first_page: u32, pages: u32) -> Area {
        Area { first_page, pages }
    }

    /// Whether the area has no pages (the part is not used).
    pub const fn is_empty(&self) -> bool {
        self.pages == 0
    }

    fn end(&self) -> u64 {
        u64::from(self.first_page) + u64::from(self.pages)
    }
}

/// How a series is laid out and what it keeps. Build one with [`Config::new`] and the
/// builder methods; [`Series::open`](crate::Series::open) checks it against the storage and
/// the memory given.
#[derive(Clone, Copy)]
pub struct Config<'a> {
    /// Key size in bytes: 4 or 8. Keys are unsigned integers and must ascend.
    pub key_size: usize,
    /// Size of every record's data in bytes.
    pub data_size: usize,
    /// Page size in bytes (a multiple of the medium's read and write sizes).
    pub page_size: usize,
    /// Pages per erase unit (the unit the circular queue erases ahead of its write point; a
    /// whole number of the flash part's erase units).
    pub erase_pages: u32,
    /// Page buffers in the arena: 2 (write + read), +2 with the data index, +2 with
    /// variable-size data. More are allowed and unused.
    pub buffers: usize,
    /// Full data pages written together in one device call (1, the default: each page is
    /// written when it fills). Above 1, that many page buffers more hold sealed pages until
    /// the batch is full, an erase unit ends, an index page is due or [`flush`]; readers see
    /// them from RAM. What a power cut loses is then the unwritten pages (up to this many
    /// plus the write buffer) instead of the write buffer alone. Not with record-level
    /// consistency; at most `erase_pages`.
    ///
    /// [`flush`]: crate::Series::flush
    pub write_pages: usize,
    /// What a full data or variable-data area does.
    pub on_full: OnFull,
    /// Each `put` is durable when it returns (EmbedDB's record-level consistency: the write
    /// buffer is written to a temporary page ahead of the write point after every put).
    pub record_level_consistency: bool,
    /// Allow a key equal to the last one (keys then only need to be non-decreasing).
    pub equal_keys: bool,
    /// The spline key index's error bound in record positions (EmbedDB's error of one page is
    /// the records per page); `None` for no key index (binary search).
    pub spline_error: Option<u32>,
    /// Most spline points to keep; `None` for as many as the arena holds.
    pub spline_max_points: Option<usize>,
    /// Keep each page's smallest and largest data value in its header (lets data-range
    /// queries skip pages from the header alone).
    pub data_min_max: bool,
    /// The bitmap data index: the bucket function. Needs [`Config::index`] pages.
    pub data_index: Option<&'a dyn BucketFn>,
    /// The order of data values, for data ranges and the pages' data min/max.
    pub data_order: DataOrder<'a>,
    /// On a block device: sync after every page (true, the default) or only at erase-unit
    /// boundaries and explicit flushes (faster; a power cut may then lose the unsynced pages
    /// of the last unit). Flash is synced after every write regardless.
    pub sync_every_page: bool,
    /// The data pages.
    pub data: Area,
    /// The bitmap index pages (empty: no data index).
    pub index: Area,
    /// The variable-size data pages (empty: no variable data).
    pub var: Area,
}

impl core::fmt::Debug for Config<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Config")
            .field("key_size", &self.key_size)
            .field("data_size", &self.data_size)
            .field("page_size", &self.page_size)
            .field("erase_pages", &self.erase_pages)
            .field("buffers", &self.buffers)
            .field("write_pages", &self.write_pages)
            .field("on_full", &self.on_full)
            .field("record_level_consistency", &self.record_level_consistency)
            .field("equal_keys", &self.equal_keys)
            .field("spline_error", &self.spline_error)
            .field("spline_max_points", &self.spline_max_points)
            .field("data_min_max", &self.data_min_max)
            .field(
                "data_index",
                &self.data_index.map(|b| b.bitmap_bytes()).unwrap_or(0),
            )
            .field("data_order", &self.data_order)
            .field("sync_every_page", &self.sync_every_page)
            .field("data", &self.data)
            .field("index", &self.index)
            .field("var", &self.var)
            .finish()
    }
}

impl<'a> Config<'a> {
    /// A series of `key_size`-byte keys and `data_size`-byte data in `page_size`-byte pages,
    /// erased `erase_pages` pages at a time, its data pages in `data`. Defaults: overwrite the
    /// oldest data when full, a spline key index with error 4 records, data min/max in page headers,
    /// no data index, no variable data, no record-level consistency, 2 buffers.
    pub fn new(
        key_size: usize,
        data_size: usize,
        page_size: usize,
        erase_pages: u32,
        data: Area,
    ) -> Self {
        Config {
            key_size,
            data_size,
            page_size,
            erase_pages,
            buffers: 2,
            write_pages: 1,
            on_full: OnFull::Overwrite,
            record_level_consistency: false,
            equal_keys: false,
            spline_error: Some(4),
            spline_max_points: None,
            data_min_max: true,
            data_index: None,
            data_order: DataOrder::Col(Col::i32(0)),
            sync_every_page: true,
            data,
            index: Area::new(0, 0),
            var: Area::new(0, 0),
        }
    }

    /// Adds the bitmap data index with bucket function `buckets`, its pages in `area`, and
    /// raises the buffer count to what is needed.
    pub fn index(mut self, area: Area, buckets: &'a dyn BucketFn) -> Self {
        self.index = area;
        self.data_index = Some(buckets);
        self.buffers = self.buffers.max(self.buffers_needed());
        self
    }

    /// Adds the variable-size data area and raises the buffer count to what is needed.
    pub fn var(mut self, area: Area) -> Self {
        self.var = area;
        self.buffers = self.buffers.max(self.buffers_needed());
        self
    }

    /// Sets what a full area does.
    pub fn on_full(mut self, on_full: OnFull) -> Self {
        self.on_full = on_full;
        self
    }

    /// Turns record-level consistency on or off.
    pub fn record_level_consistency(mut self, on: bool) -> Self {
        self.record_level_consistency = on;
        self
    }

    /// Allows keys equal to the previous one.
    pub fn equal_keys(mut self, on: bool) -> Self {
        self.equal_keys = on;
        self
    }

    /// Sets the spline error bound (`None`: no key index, binary search).
    pub fn spline(mut self, error: Option<u32>) -> Self {
        self.spline_error = error;
        self
    }

    /// Caps the spline's points.
    pub fn spline_max_points(mut self, n: Option<usize>) -> Self {
        self.spline_max_points = n;
        self
    }

    /// Turns the data min/max in page headers on or off.
    pub fn data_min_max(mut self, on: bool) -> Self {
        self.data_min_max = on;
        self
    }

    /// Sets the order of data values.
    pub fn data_order(mut self, order: DataOrder<'a>) -> Self {
        self.data_order = order;
        self
    }

    /// Compares two data values in the configured order.
    #[inline]
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self.data_order {
            DataOrder::Col(c) => match (c.get(0, a), c.get(0, b)) {
                (Some(x), Some(y)) => x.cmp_num(y),
                _ => a.cmp(b),
            },
            DataOrder::Bytes => a.cmp(b),
            DataOrder::Fn(f) => f(a, b),
        }
    }

    /// Block devices: sync after every page, or only at erase-unit boundaries.
    pub fn sync_every_page(mut self, on: bool) -> Self {
        self.sync_every_page = on;
        self
    }

    /// Sets the page-buffer count. Buffers beyond [`buffers_needed`](Self::buffers_needed)
    /// extend the data read buffer: an iterator walking pages in order reads that many more
    /// consecutive pages in one device call (read-ahead).
    pub fn buffers(mut self, n: usize) -> Self {
        self.buffers = n;
        self
    }

    /// Sets how many full data pages are written together in one device call (see
    /// [`Config::write_pages`]).
    pub fn write_pages(mut self, n: usize) -> Self {
        self.write_pages = n;
        self
    }

    /// Page buffers holding sealed pages for batched writes (0 when `write_pages` is 1).
    pub fn staging_pages(&self) -> usize {
        if self.write_pages > 1 {
            self.write_pages
        } else {
            0
        }
    }

    /// Whether the bitmap data index is configured.
    pub fn has_index(&self) -> bool {
        self.data_index.is_some() && !self.index.is_empty()
    }

    /// Whether the variable-size data area is configured.
    pub fn has_var(&self) -> bool {
        !self.var.is_empty()
    }

    /// Page buffers the configuration needs: 2, +2 with the data index, +2 with variable data.
    pub fn buffers_needed(&self) -> usize {
        2 + if self.has_index() { 2 } else { 0 } + if self.has_var() { 2 } else { 0 }
    }

    /// Bytes of the arena the page buffers take (`buffers × page_size`, plus `write_pages`
    /// pages when writes are batched); the rest holds spline points.
    pub fn buffer_bytes(&self) -> usize {
        self.buffers
            .saturating_add(self.staging_pages())
            .saturating_mul(self.page_size)
    }

    /// Bytes one spline point takes (key + page id).
    pub fn spline_point_bytes(&self) -> usize {
        self.key_size + 4
    }

    /// The arena size for the buffers plus `points` spline points.
    pub fn arena_bytes(&self, points: usize) -> usize {
        self.buffer_bytes() + points * self.spline_point_bytes()
    }

    /// Erase units reserved ahead of the data write point for temporary pages.
    pub(crate) fn reserved_units(&self) -> u32 {
        if self.record_level_consistency { 2 } else { 0 }
    }

    /// Checks the configuration against the storage geometry and returns the page layout.
    pub(crate) fn check(&self, geom: &Geometry) -> Result<Layout> {
        let bad = |reason| Err(Error::Config { reason });
        if self.key_size != 4 && self.key_size != 8 {
            return bad("the key size must be 4 or 8 bytes");
        }
        if self.page_size < 64 || self.page_size > 1 << 20 {
            return bad("the page size must be between 64 bytes and 1 MiB");
        }
        if self.data_size > self.page_size {
            return bad("the data size is larger than a page");
        }
        if self.erase_pages == 0 {
            return bad("the erase unit must hold at least one page");
        }
        if self.data_index.is_some() == self.index.is_empty() {
            return bad("the data index needs both a bucket function and index pages");
        }
        let bm = match self.data_index {
            Some(b) => {
                let n = b.bitmap_bytes();
                if n == 0 || n > MAX_BITMAP {
                    return bad("the bitmap must be 1 to 32 bytes");
                }
                n
            }
            None => 0,
        };
        if self.write_pages == 0 || self.write_pages > self.erase_pages as usize {
            return bad("write_pages must be 1 to the erase unit's pages");
        }
        if self.write_pages > 1 && self.record_level_consistency {
            return bad("batched page writes and record-level consistency exclude each other");
        }
        if self.buffers < self.buffers_needed() {
            return bad("too few page buffers: 2, +2 with the data index, +2 with variable data");
        }
        let lay = Layout::new(
            self.page_size,
            self.key_size,
            self.data_size,
            bm,
            self.data_min_max,
            self.has_var(),
            geom.read_size as usize,
        );
        if lay.per_page == 0 {
            return bad("a page does not hold the header and one record");
        }
        if lay.per_page > usize::from(u16::MAX) || lay.idx_per_page > usize::from(u16::MAX) {
            return bad("the page is too large for 16-bit record counts");
        }
        if self.has_var() && self.page_size < COMMON + 16 {
            return bad("variable-data pages are too small");
        }
        let ps = self.page_size as u64;
        if geom.read_size == 0 || geom.write_size == 0 {
            return bad("the medium reports a zero read or write size");
        }
        if !ps.is_multiple_of(u64::from(geom.read_size))
            || !ps.is_multiple_of(u64::from(geom.write_size))
        {
            return bad("the page size must be a multiple of the medium's read and write sizes");
        }
        let unit_bytes = ps * u64::from(self.erase_pages);
        if geom.erase_size == 0 || !unit_bytes.is_multiple_of(u64::from(geom.erase_size)) {
            return bad(
                "the erase unit in pages must be a whole number of the medium's erase units",
            );
        }
        let areas = [
            (self.data, 2 + self.reserved_units()),
            (self.index, 2),
            (self.var, 2),
        ];
        for (i, (a, min_units)) in areas.iter().enumerate() {
            if a.is_empty() {
                if i == 0 {
                    return bad("the data area is empty");
                }
                continue;
            }
            if a.first_page % self.erase_pages != 0 || a.pages % self.erase_pages != 0 {
                return bad("areas must start and end on erase-unit boundaries");
            }
            if a.pages / self.erase_pages < *min_units {
                return bad(
                    "an area needs at least 2 erase units (4 for data with record-level consistency)",
                );
            }
            if a.end() * ps > geom.capacity {
                return bad("an area reaches past the end of the storage");
            }
            for b in areas.iter().skip(i + 1).map(|x| x.0) {
                if !b.is_empty()
                    && u64::from(a.first_page) < b.end()
                    && u64::from(b.first_page) < a.end()
                {
                    return bad("areas overlap");
                }
            }
        }
        Ok(lay)
    }
}
