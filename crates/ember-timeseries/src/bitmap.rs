//! The bitmap data index: a user bucket function maps data values to bits; every data page
//! carries the OR of its records' bitmaps in its header, and index pages collect those bitmaps
//! in their own circular area so a data-range query reads only the pages whose bitmap
//! overlaps the query's.
//!
//! **Index page** (kind 3, see [`page`](crate::page)): the common header with `aux` = the id of
//! the first data page it covers and `count` = bitmaps, then `count` bitmaps of the bitmap
//! size, one per data page `aux, aux + 1, …` (a dead data slot has an empty bitmap). The
//! index area is its own circular queue and always overwrites its oldest page; data pages no
//! index page covers any more are checked through their own headers.
//!
//! Index pages are written when full (every `(page − 24) / bitmap size` data pages). The
//! bitmaps of data pages written since the last index page are kept in the index write
//! buffer; after a power cut they are rebuilt from the data pages' headers, so the index
//! needs no log either. On a block device every data page an index page covers is synced
//! before the index page is written, so an index page never names a data page that a power
//! cut can take back.

use crate::error::{AreaKind, Result};
use crate::page::{COMMON, Header, Kind};
use crate::series::{Series, dev};
use crate::storage::Storage;
use crate::value::Col;

/// A bucket function: which bits of a page's bitmap a data value sets, and which bits a
/// query range may touch. Implement it for any mapping (EmbedDB's `updateBitmap` /
/// `buildBitmapFromRange`); [`LinearBuckets`] and [`BoundaryBuckets`] cover the usual ones.
pub trait BucketFn {
    /// Bitmap size in bytes (1 to 32).
    fn bitmap_bytes(&self) -> usize;
    /// Sets the bits of the bucket(s) `data` falls in.
    fn add(&self, data: &[u8], bitmap: &mut [u8]);
    /// Sets the bits of every bucket that may hold a value in `[min, max]` (`None`: open).
    fn query(&self, min: Option<&[u8]>, max: Option<&[u8]>, bitmap: &mut [u8]);
}

/// Sets bit `i` of a bitmap (ignored past its end).
pub fn set_bit(bitmap: &mut [u8], i: usize) {
    if let Some(b) = bitmap.get_mut(i / 8) {
        *b |= 1 << (i % 8);
    }
}

/// Sets bits `lo..=hi`.
pub fn set_bits(bitmap: &mut [u8], lo: usize, hi: usize) {
    for i in lo..=hi.min(bitmap.len() * 8 - 1) {
        set_bit(bitmap, i);
    }
}

/// Whether two bitmaps share a set bit.
pub fn overlaps(a: &[u8], b: &[u8]) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

#[inline]
fn num(col: Col, data: &[u8]) -> Option<i64> {
    col.get_i64(0, data)
}

/// `bits` equal-width buckets over `[min, max]` of a column; values below `min` go to the
/// first bucket, above `max` to the last.
#[derive(Debug, Clone, Copy)]
pub struct LinearBuckets {
    /// The column bucketed.
    pub col: Col,
    /// Lower end of the bucketed range.
    pub min: i64,
    /// Upper end of the bucketed range.
    pub max: i64,
    /// Number of buckets (bits), 1 to 256.
    pub bits: usize,
}

impl LinearBuckets {
    /// `bits` buckets over `[min, max]` of `col`.
    pub const fn new(col: Col, min: i64, max: i64, bits: usize) -> Self {
        LinearBuckets {
            col,
            min,
            max,
            bits,
        }
    }

    fn bucket(&self, v: i64) -> usize {
        let bits = self.bits.max(1);
        if v <= self.min || self.max <= self.min {
            return 0;
        }
        if v >= self.max {
            return bits - 1;
        }
        let span = i128::from(self.max) - i128::from(self.min) + 1;
        let b = (i128::from(v) - i128::from(self.min)) * bits as i128 / span;
        (b as usize).min(bits - 1)
    }
}

impl BucketFn for LinearBuckets {
    fn bitmap_bytes(&self) -> usize {
        self.bits.max(1).div_ceil(8)
    }
    fn add(&self, data: &[u8], bitmap: &mut [u8]) {
        if let Some(v) = num(self.col, data) {
            set_bit(bitmap, self.bucket(v));
        }
    }
    fn query(&self, min: Option<&[u8]>, max: Option<&[u8]>, bitmap: &mut [u8]) {
        let lo = min.and_then(|m| num(self.col, m)).unwrap_or(i64::MIN);
        let hi = max.and_then(|m| num(self.col, m)).unwrap_or(i64::MAX);
        if lo <= hi {
            set_bits(bitmap, self.bucket(lo), self.bucket(hi));
        }
    }
}

/// Buckets split at ascending boundaries: bucket `i` holds the values `v` with
/// `bounds[i − 1] <= v < bounds[i]` (`bounds.len() + 1` buckets). Boundaries taken from
/// quantiles of a sample of the data make every bucket about equally likely.
#[derive(Debug, Clone, Copy)]
pub struct BoundaryBuckets<'b> {
    /// The column bucketed.
    pub col: Col,
    /// Ascending boundaries (at most 255).
    pub bounds: &'b [i64],
}

impl<'b> BoundaryBuckets<'b> {
    /// Buckets of `col` split at `bounds`.
    pub const fn new(col: Col, bounds: &'b [i64]) -> Self {
        BoundaryBuckets { col, bounds }
    }

    fn bucket(&self, v: i64) -> usize {
        self.bounds.partition_point(|&b| b <= v)
    }
}

impl BucketFn for BoundaryBuckets<'_> {
    fn bitmap_bytes(&self) -> usize {
        (self.bounds.len() + 1).div_ceil(8)
    }
    fn add(&self, data: &[u8], bitmap: &mut [u8]) {
        if let Some(v) = num(self.col, data) {
            set_bit(bitmap, self.bucket(v));
        }
    }
    fn query(&self, min: Option<&[u8]>, max: Option<&[u8]>, bitmap: &mut [u8]) {
        let lo = min.and_then(|m| num(self.col, m)).unwrap_or(i64::MIN);
        let hi = max.and_then(|m| num(self.col, m)).unwrap_or(i64::MAX);
        if lo <= hi {
            set_bits(bitmap, self.bucket(lo), self.bucket(hi));
        }
    }
}

// ----- index pages ----------------------------------------------------------------------

impl<S: Storage> Series<'_, S> {
    /// Adds the bitmap of data page `id` (ids arrive in order) to the index write buffer,
    /// writing the index page when it is full.
    pub(crate) fn index_add(&mut self, id: u32, bm: &[u8]) -> Result<()> {
        let n = self.lay.bm;
        if self.idx_count > 0 && u64::from(id) != u64::from(self.idx_first) + self.idx_count as u64
        {
            // Not the next page (cannot happen in order); keep the pages' bitmaps contiguous.
            self.write_index_page()?;
        }
        if self.idx_count == 0 {
            self.idx_first = id;
        }
        let o = COMMON + self.idx_count * n;
        self.iwbuf[o..o + n].copy_from_slice(&bm[..n]);
        self.idx_count += 1;
        if self.idx_count == self.lay.idx_per_page {
            self.write_index_page()?;
        }
        Ok(())
    }

    /// Writes the index write buffer as the next index page.
    pub(crate) fn write_index_page(&mut self) -> Result<()> {
        if self.idx_count == 0 {
            return Ok(());
        }
        // Every data page it covers is written (batched writes) and, on a block device,
        // durable before the index page can be.
        self.write_staged()?;
        if self.block {
            self.sync(AreaKind::Index)?;
        }
        self.enter(AreaKind::Index)?;
        let id = self.index.next;
        let h = Header {
            kind: Kind::Index,
            id,
            count: self.idx_count as u16,
            gap: self.index.gap,
            aux: self.idx_first,
        };
        self.lay.seal(self.iwbuf, &h);
        let addr = self.index.addr(id);
        self.store
            .write(addr, &self.iwbuf[..self.lay.page])
            .map_err(dev(AreaKind::Index, Some(id), addr))?;
        self.stats.index_writes += 1;
        let ends_unit = (id + 1).is_multiple_of(self.index.unit);
        self.sync_after_write(AreaKind::Index, ends_unit)?;
        self.index.written(id);
        self.idx_first += self.idx_count as u32;
        self.idx_count = 0;
        self.iwbuf.fill(0);
        if ends_unit {
            self.erase_ahead(AreaKind::Index)?;
        }
        Ok(())
    }

    /// Reads index page `id` whole into the index read buffer; `None` if it is not a valid
    /// index page with that id.
    pub(crate) fn load_index(&mut self, id: u32) -> Result<Option<Header>> {
        if let Some(h) = self.icache
            && h.id == id
        {
            return Ok(Some(h));
        }
        self.icache = None;
        let addr = self.index.addr(id);
        let ps = self.lay.page;
        self.store.read(addr, &mut self.irbuf[..ps]).map_err(dev(
            AreaKind::Index,
            Some(id),
            addr,
        ))?;
        self.stats.index_reads += 1;
        Ok(match self.lay.verify(self.irbuf) {
            Ok(h) if h.kind == Kind::Index && h.id == id => {
                self.icache = Some(h);
                Some(h)
            }
            _ => None,
        })
    }

    /// The index page covering data page `id`, loaded in the index read buffer.
    fn index_page_for(&mut self, id: u32) -> Result<Option<Header>> {
        let covers =
            |h: &Header| id >= h.aux && u64::from(id) < u64::from(h.aux) + u64::from(h.count);
        if let Some(h) = self.icache {
            if covers(&h) {
                return Ok(Some(h));
            }
            // Scans move forward: try the next index page first.
            if id >= h.aux && self.index.is_live(h.id + 1) {
                if let Some(n) = self.load_index(h.id + 1)? {
                    if covers(&n) {
                        return Ok(Some(n));
                    }
                }
            }
        }
        let Some(newest) = self.index.newest else {
            return Ok(None);
        };
        let (mut lo, mut hi) = (self.index.oldest, newest);
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            let Some(h) = self.load_index(mid)? else {
                return Ok(None);
            };
            if id < h.aux {
                match mid.checked_sub(1) {
                    Some(m) => hi = m,
                    None => break,
                }
            } else if !covers(&h) {
                lo = mid + 1;
            } else {
                return Ok(Some(h));
            }
        }
        Ok(None)
    }

    /// The bitmap of data page `id` into `out`: from the index write buffer, an index page, or
    /// the data page's own header. `Ok(false)`: the page's header is not valid (the caller
    /// reads the page and learns whether it is dead or corrupt).
    pub(crate) fn page_bitmap(&mut self, id: u32, out: &mut [u8]) -> Result<bool> {
        let n = self.lay.bm;
        if self.idx_count > 0
            && id >= self.idx_first
            && u64::from(id) < u64::from(self.idx_first) + self.idx_count as u64
        {
            let o = COMMON + (id - self.idx_first) as usize * n;
            out[..n].copy_from_slice(&self.iwbuf[o..o + n]);
            return Ok(true);
        }
        if !self.idx_broken
            && let Some(h) = self.index_page_for(id)?
        {
            let o = COMMON + (id - h.aux) as usize * n;
            out[..n].copy_from_slice(&self.irbuf[o..o + n]);
            return Ok(true);
        }
        match self.load_header(id)? {
            Ok(_) => {
                out[..n].copy_from_slice(self.lay.bitmap(self.rpage()));
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: i32) -> [u8; 4] {
        v.to_le_bytes()
    }

    #[test]
    fn a_query_bitmap_covers_every_value_in_its_range() {
        let lin = LinearBuckets::new(Col::i32(0), -100, 100, 16);
        let bounds = [-50, -10, 0, 3, 7, 40, 90];
        let bnd = BoundaryBuckets::new(Col::i32(0), &bounds);
        let fns: [&dyn BucketFn; 2] = [&lin, &bnd];
        for f in fns {
            for lo in (-130..130).step_by(7) {
                for hi in (lo..130).step_by(11) {
                    let mut q = [0u8; 2];
                    f.query(Some(&d(lo)), Some(&d(hi)), &mut q);
                    for v in lo..=hi {
                        let mut b = [0u8; 2];
                        f.add(&d(v), &mut b);
                        assert!(overlaps(&q, &b), "{v} in [{lo}, {hi}]");
                    }
                }
            }
        }
    }
}
