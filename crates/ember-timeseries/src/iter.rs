//! Iterators over a key range and a data range.
//!
//! With a key range, the start page is found like a lookup (spline, then the neighbour or a
//! binary search in its window) and pages are read in order until a key passes the end; the
//! data range, if any, filters records (and pages whose data min/max cannot match are not
//! scanned). With only a data range, the bitmap index decides which pages to read: a page is
//! read only if its bitmap — from the index write buffer, an index page, or as a last resort
//! its own header — overlaps the query's. Without an index, pages whose header data min/max
//! rules them out are skipped after reading the header only. The write buffer's records come
//! last. Data pages are read into the read buffer, index pages into the index read buffer.
//!
//! **Read-ahead.** When pages are walked in order (a key range or a scan: nothing skips
//! pages) and the read buffer holds several pages (buffers beyond those the configuration
//! needs), the pages from the current one on are read in one device call — up to the
//! buffer's size, not past the newest stored page, the end of the area's slots, or the page
//! the spline predicts for the range's last key plus one (past it, the prediction was wrong
//! and read-ahead goes on to the newest page). Each page's checksums are checked once, when
//! it becomes the current page, and its records are decoded in place.

use core::cmp::Ordering;

use crate::bitmap::overlaps;
use crate::error::{Error, Result};
use crate::ops::{Row, Source};
use crate::page::{MAX_BITMAP, get_key};
use crate::series::Series;
use crate::storage::Storage;
use crate::varlen::VarValue;

/// What an iterator returns: keys in `[min_key, max_key]` and data in `[min_data, max_data]`
/// (in the series' data order); `None` leaves that end open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Query<'q> {
    /// Smallest key.
    pub min_key: Option<u64>,
    /// Largest key.
    pub max_key: Option<u64>,
    /// Smallest data value (the data size).
    pub min_data: Option<&'q [u8]>,
    /// Largest data value (the data size).
    pub max_data: Option<&'q [u8]>,
}

impl<'q> Query<'q> {
    /// Every record.
    pub const fn all() -> Self {
        Query {
            min_key: None,
            max_key: None,
            min_data: None,
            max_data: None,
        }
    }

    /// Keys in `[min, max]`.
    pub const fn keys(min: u64, max: u64) -> Self {
        Query {
            min_key: Some(min),
            max_key: Some(max),
            min_data: None,
            max_data: None,
        }
    }

    /// Data in `[min, max]`.
    pub const fn data(min: Option<&'q [u8]>, max: Option<&'q [u8]>) -> Self {
        Query {
            min_key: None,
            max_key: None,
            min_data: min,
            max_data: max,
        }
    }

    /// The same query with keys in `[min, max]`.
    pub const fn with_keys(mut self, min: Option<u64>, max: Option<u64>) -> Self {
        self.min_key = min;
        self.max_key = max;
        self
    }

    /// The same query with data in `[min, max]`.
    pub const fn with_data(mut self, min: Option<&'q [u8]>, max: Option<&'q [u8]>) -> Self {
        self.min_data = min;
        self.max_data = max;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Pages,
    Buffer,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cur {
    None,
    Page(usize),
    Buffer(usize),
}

/// An iterator over a [`Query`] (see the module docs). It borrows the series; use it through
/// [`Source`] (`advance`, then `row`), or [`next_into`](Iter::next_into).
pub struct Iter<'s, 'a, S: Storage> {
    db: &'s mut Series<'a, S>,
    q: Query<'s>,
    stage: Stage,
    next: u32,
    end: u32,
    in_page: bool,
    first_page: bool,
    rec: usize,
    count: usize,
    use_index: bool,
    header_filter: bool,
    qbm: [u8; MAX_BITMAP],
    /// Pages are walked in order (no index or header filter skips any): read ahead.
    ahead: bool,
    /// The last page the key range is predicted to reach (read-ahead stops there; past it,
    /// the prediction was wrong and read-ahead goes on to the newest page).
    ahead_end: u32,
    /// The key range, open ends filled in.
    kmin: u64,
    kmax: u64,
    /// No data filter: records of a page are taken on their key alone (`advance`'s fast
    /// path).
    plain: bool,
    /// Byte offset in the read buffer of the page being walked.
    poff: usize,
    /// The page layout's record geometry: header bytes, record bytes, key and data sizes.
    hdr: usize,
    rsz: usize,
    ks: usize,
    ds: usize,
    cur: Cur,
    /// Byte offset of the current page record's data in the read buffer.
    cur_data: usize,
    /// The current record's key (read once when the record is found; `row` returns it).
    cur_key: u64,
}

impl<'a, S: Storage> Series<'a, S> {
    /// An iterator over the records `q` selects, in key order.
    pub fn iter<'s>(&'s mut self, q: Query<'s>) -> Result<Iter<'s, 'a, S>> {
        let ds = self.lay.ds;
        for d in [q.min_data, q.max_data].into_iter().flatten() {
            if d.len() != ds {
                return Err(Error::DataSize {
                    expected: ds,
                    given: d.len(),
                });
            }
        }
        let has_keys = q.min_key.is_some() || q.max_key.is_some();
        let has_data = q.min_data.is_some() || q.max_data.is_some();
        let mut qbm = [0u8; MAX_BITMAP];
        let use_index = !has_keys && has_data && self.cfg.has_index();
        if let (true, Some(b)) = (use_index, self.cfg.data_index) {
            b.query(q.min_data, q.max_data, &mut qbm[..self.lay.bm]);
        }
        let header_filter = !has_keys && has_data && !use_index && self.lay.minmax;
        let ahead = !use_index && !header_filter && self.read_slots() > 1;
        let mut it = Iter {
            stage: Stage::Pages,
            next: 0,
            end: 0,
            in_page: false,
            first_page: true,
            rec: 0,
            count: 0,
            use_index,
            header_filter,
            qbm,
            ahead,
            ahead_end: u32::MAX,
            kmin: q.min_key.unwrap_or(0),
            kmax: q.max_key.unwrap_or(u64::MAX),
            plain: !has_data,
            poff: 0,
            hdr: self.lay.hdr,
            rsz: self.lay.rec,
            ks: self.lay.ks,
            ds: self.lay.ds,
            cur: Cur::None,
            cur_data: 0,
            cur_key: 0,
            q,
            db: self,
        };
        match it.db.page_range() {
            None => it.stage = Stage::Buffer,
            Some((oldest, newest)) => {
                it.end = newest;
                it.next = oldest;
                if let Some(k) = q.max_key
                    && let Some(p) = it.db.spline.predict(k)
                {
                    it.ahead_end = p.hi.saturating_add(1);
                }
                if let Some(k) = q.min_key {
                    if k > it.db.newest_max {
                        it.stage = Stage::Buffer;
                    } else {
                        match it.db.lower_page(k)? {
                            Some(p) => it.next = p,
                            None => it.stage = Stage::Buffer,
                        }
                    }
                }
            }
        }
        Ok(it)
    }
}

impl<'s, 'a, S: Storage> Iter<'s, 'a, S> {
    #[inline]
    fn data_ok(&self, d: &[u8]) -> bool {
        let cfg = &self.db.cfg;
        if let Some(m) = self.q.min_data
            && cfg.compare(d, m) == Ordering::Less
        {
            return false;
        }
        if let Some(m) = self.q.max_data
            && cfg.compare(d, m) == Ordering::Greater
        {
            return false;
        }
        true
    }

    /// Whether the page in the read buffer may hold data in the range (from its header's
    /// data min/max).
    fn page_may_match(&self) -> bool {
        let lay = self.db.lay;
        if !lay.minmax {
            return true;
        }
        let cfg = &self.db.cfg;
        let page = self.db.rpage();
        let (lo, hi) = (lay.dmin(page), lay.dmax(page));
        if let Some(m) = self.q.max_data
            && cfg.compare(lo, m) == Ordering::Greater
        {
            return false;
        }
        if let Some(m) = self.q.min_data
            && cfg.compare(hi, m) == Ordering::Less
        {
            return false;
        }
        true
    }

    /// Whether `key` is in range: `Some(false)` below, `None` past the end.
    #[inline]
    fn key_ok(&self, key: u64) -> Option<bool> {
        if key > self.kmax {
            return None;
        }
        Some(key >= self.kmin)
    }

    fn step(&mut self) -> Result<bool> {
        let lay = self.db.lay;
        let has_data = self.q.min_data.is_some() || self.q.max_data.is_some();
        loop {
            match self.stage {
                Stage::Pages => {
                    if self.in_page {
                        // The page is read in place: no copy, its checksums were checked
                        // once when it was loaded.
                        let page = self.db.rpage();
                        while self.rec < self.count {
                            let i = self.rec;
                            self.rec += 1;
                            let key = lay.key(page, i);
                            match self.key_ok(key) {
                                None => {
                                    self.stage = Stage::Done;
                                    self.in_page = false;
                                    return Ok(false);
                                }
                                Some(false) => continue,
                                Some(true) => {}
                            }
                            if has_data && !self.data_ok(lay.data(page, i)) {
                                continue;
                            }
                            self.cur = Cur::Page(i);
                            self.cur_data = self.poff + lay.rec_off(i) + lay.ks;
                            self.cur_key = key;
                            return Ok(true);
                        }
                        self.in_page = false;
                    }
                    if self.next > self.end {
                        self.stage = Stage::Buffer;
                        self.rec = 0;
                        continue;
                    }
                    let id = self.next;
                    self.next += 1;
                    if self.use_index {
                        let mut bm = [0u8; MAX_BITMAP];
                        let n = lay.bm;
                        if self.db.page_bitmap(id, &mut bm)? && !overlaps(&bm[..n], &self.qbm[..n])
                        {
                            continue;
                        }
                    } else if self.header_filter
                        && self.db.load_header(id)?.is_ok()
                        && !self.page_may_match()
                    {
                        continue;
                    }
                    let found = if self.ahead {
                        let upto = if id <= self.ahead_end {
                            self.ahead_end
                        } else {
                            self.end
                        };
                        self.db.resolve_forward_ahead(id, upto)?
                    } else {
                        self.db.resolve_forward(id)?
                    };
                    let Some((v, h)) = found else {
                        self.stage = Stage::Buffer;
                        self.rec = 0;
                        continue;
                    };
                    if v != id {
                        // Dead slots passed over; page `v` gets the same checks.
                        self.next = v;
                        continue;
                    }
                    if let Some(m) = self.q.max_key
                        && lay.min_key(self.db.rpage()) > m
                    {
                        self.stage = Stage::Done;
                        return Ok(false);
                    }
                    if has_data && !self.page_may_match() {
                        continue;
                    }
                    self.count = usize::from(h.count);
                    self.rec = match (self.first_page, self.q.min_key) {
                        (true, Some(k)) => lay.lower_bound(self.db.rpage(), self.count, k),
                        _ => 0,
                    };
                    self.first_page = false;
                    self.poff = self.db.roff;
                    self.in_page = true;
                }
                Stage::Buffer => {
                    while self.rec < self.db.wcount {
                        let i = self.rec;
                        self.rec += 1;
                        let key = lay.key(self.db.wbuf, i);
                        match self.key_ok(key) {
                            None => {
                                self.stage = Stage::Done;
                                return Ok(false);
                            }
                            Some(false) => continue,
                            Some(true) => {}
                        }
                        if has_data && !self.data_ok(lay.data(self.db.wbuf, i)) {
                            continue;
                        }
                        self.cur = Cur::Buffer(i);
                        self.cur_key = key;
                        return Ok(true);
                    }
                    self.stage = Stage::Done;
                }
                Stage::Done => return Ok(false),
            }
        }
    }

    /// Moves to the next record and copies it out: its key, and its data into `data`.
    /// `Ok(None)` at the end.
    pub fn next_into(&mut self, data: &mut [u8]) -> Result<Option<u64>> {
        if !self.advance()? {
            return Ok(None);
        }
        let r = self.row();
        let n = r.data.len().min(data.len());
        data[..n].copy_from_slice(&r.data[..n]);
        Ok(Some(r.key))
    }

    /// Reads the current record's variable-size value into `out`.
    pub fn var(&mut self, out: &mut [u8]) -> Result<VarValue> {
        let lay = self.db.lay;
        let r = match self.cur {
            Cur::Page(i) => lay.var_ref(self.db.rpage(), i),
            Cur::Buffer(i) => lay.var_ref(self.db.wbuf, i),
            Cur::None => None,
        };
        match r {
            Some(r) => self.db.read_var(r, out),
            None => Ok(VarValue::None),
        }
    }

    /// Collects the remaining records (key and data) into a vector.
    #[cfg(feature = "alloc")]
    pub fn collect_vec(mut self) -> Result<alloc::vec::Vec<(u64, alloc::vec::Vec<u8>)>> {
        let mut v = alloc::vec::Vec::new();
        while self.advance()? {
            let r = self.row();
            v.push((r.key, r.data.to_vec()));
        }
        Ok(v)
    }
}

impl<S: Storage> Source for Iter<'_, '_, S> {
    #[inline]
    fn advance(&mut self) -> Result<bool> {
        // The common case of a key range or a scan: the next record of the page being
        // walked, its key decoded in place and within the range.
        if self.plain && self.in_page && self.rec < self.count {
            let i = self.rec;
            let o = self.poff + self.hdr + i * self.rsz;
            let key = get_key(self.db.rbuf, o, self.ks);
            if key >= self.kmin && key <= self.kmax {
                self.rec = i + 1;
                self.cur = Cur::Page(i);
                self.cur_key = key;
                self.cur_data = o + self.ks;
                return Ok(true);
            }
        }
        self.cur = Cur::None;
        self.step()
    }

    #[inline]
    fn row(&self) -> Row<'_> {
        let lay = self.db.lay;
        match self.cur {
            Cur::Page(_) => Row {
                key: self.cur_key,
                data: self
                    .db
                    .rbuf
                    .get(self.cur_data..self.cur_data + self.ds)
                    .unwrap_or(&[]),
            },
            Cur::Buffer(i) => Row {
                key: self.cur_key,
                data: lay.data(self.db.wbuf, i),
            },
            Cur::None => Row { key: 0, data: &[] },
        }
    }
}
