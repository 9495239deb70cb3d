//! The spline learned index on the key: a few points `(key, page id)` in a fixed RAM budget.
//!
//! Every data page written adds the point (its smallest key, its position), the position of
//! page `id` being `id × records per page` — the slot of its first record. The greedy spline
//! corridor (Neumann & Michel, as in EmbedDB's `spline.c`) keeps a point only when the next
//! one leaves the corridor of lines from the last kept point that pass within `ε` positions of
//! every point since; so between two kept points, linear interpolation is within `ε` record
//! positions of every page start. A key of page `p` then interpolates to a position in
//! `[p·n − ε, (p+1)·n + ε]` (`n` records per page): the lookup reads the predicted page
//! `⌊pos / n⌋` first, which is right unless the key is within `ε` positions of a page boundary
//! the line misses, then the pages `⌊(pos − ε) / n⌋ − 1 ..= ⌊(pos + ε) / n⌋`.
//!
//! EmbedDB measures `ε` in pages; measuring it in records is the same spline with a finer
//! error bound (`ε = n` is EmbedDB's `ε = 1`), and on the EmbedDB data sets `ε = 4` makes the
//! first page read the right one 96–97% of the time instead of 70–84%, for more points on
//! irregular data (see ARCHITECTURE.md).
//!
//! The points live in a caller-provided byte buffer used as a ring (`key` in the key size,
//! then the page id, little-endian). When it is full, the oldest point is dropped and keys
//! below the new first point fall back to binary search over the pages before it. Points
//! whose pages expired when the circular data area wrapped are dropped the same way. Nothing
//! of the spline is stored on flash: it is rebuilt from the page headers on open.

use crate::page::{get_key, get_u32, put_key, put_u32};

/// Where a key's page should be: the predicted id and the window it must lie in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prediction {
    pub page: u32,
    pub lo: u32,
    pub hi: u32,
}

pub(crate) struct Spline<'a> {
    buf: &'a mut [u8],
    ks: usize,
    cap: usize,
    head: usize,
    len: usize,
    err: i64,
    /// Positions per page (records per page).
    scale: i64,
    enabled: bool,
    /// The last point added (the end of the open segment).
    last: Option<(u64, i64)>,
    upper: (u64, i64),
    lower: (u64, i64),
    corridor: bool,
    /// Points dropped because the buffer was full.
    pub dropped: u64,
}

/// Whether the slope from `b` to `p` is greater than the slope from `b` to `q` (both points
/// to the right of `b`).
fn steeper(b: (u64, i64), p: (u64, i64), q: (u64, i64)) -> bool {
    let (pdx, qdx) = (i128::from(p.0 - b.0), i128::from(q.0 - b.0));
    let (pdy, qdy) = (i128::from(p.1 - b.1), i128::from(q.1 - b.1));
    pdy * qdx > qdy * pdx
}

impl<'a> Spline<'a> {
    /// A spline with error `err` record positions in `buf` for pages of `scale` records,
    /// holding at most `max_points` points (`err == None`: no key index).
    pub fn new(
        buf: &'a mut [u8],
        ks: usize,
        err: Option<u32>,
        max_points: Option<usize>,
        scale: usize,
    ) -> Self {
        let stride = ks + 4;
        let mut cap = buf.len() / stride;
        if let Some(m) = max_points {
            cap = cap.min(m);
        }
        Spline {
            buf,
            ks,
            cap,
            head: 0,
            len: 0,
            err: i64::from(err.unwrap_or(0)),
            scale: scale.max(1) as i64,
            enabled: err.is_some() && cap >= 2,
            last: None,
            upper: (0, 0),
            lower: (0, 0),
            corridor: false,
            dropped: 0,
        }
    }

    fn stride(&self) -> usize {
        self.ks + 4
    }

    /// Point `i` (0 = oldest kept).
    fn point(&self, i: usize) -> (u64, i64) {
        let at = ((self.head + i) % self.cap.max(1)) * self.stride();
        (
            get_key(self.buf, at, self.ks),
            i64::from(get_u32(self.buf, at + self.ks)) * self.scale,
        )
    }

    fn push(&mut self, p: (u64, i64)) {
        if self.cap == 0 {
            return;
        }
        if self.len == self.cap {
            self.head = (self.head + 1) % self.cap;
            self.len -= 1;
            self.dropped += 1;
        }
        let at = ((self.head + self.len) % self.cap) * self.stride();
        put_key(self.buf, at, self.ks, p.0);
        put_u32(self.buf, at + self.ks, (p.1 / self.scale) as u32);
        self.len += 1;
    }

    /// Forgets every point.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
        self.last = None;
        self.corridor = false;
    }

    /// Points kept.
    pub fn points(&self) -> usize {
        self.len
    }

    /// Bytes of the buffer in use.
    pub fn bytes_used(&self) -> usize {
        self.len * self.stride()
    }

    /// Adds the point (smallest key of page `page`, `page`); keys must not decrease.
    pub fn add(&mut self, key: u64, page: u32) {
        if !self.enabled {
            return;
        }
        let p = (key, i64::from(page) * self.scale);
        let Some(last) = self.last else {
            self.push(p);
            self.last = Some(p);
            self.corridor = false;
            return;
        };
        if key <= last.0 {
            // Equal keys (or a page of a key seen before): the first page keeps the point.
            return;
        }
        if self.len == 0 {
            self.push(last);
        }
        let base = self.point(self.len - 1);
        if !self.corridor || base.0 >= key {
            self.upper = (key, p.1 + self.err);
            self.lower = (key, p.1 - self.err);
            self.corridor = true;
        } else if steeper(base, p, self.upper) || steeper(base, self.lower, p) {
            // Outside the corridor: the segment ends at the last point, which starts the
            // next one.
            self.push(last);
            self.upper = (key, p.1 + self.err);
            self.lower = (key, p.1 - self.err);
        } else {
            let up = (key, p.1 + self.err);
            let lo = (key, p.1 - self.err);
            if steeper(base, self.upper, up) {
                self.upper = up;
            }
            if steeper(base, lo, self.lower) {
                self.lower = lo;
            }
        }
        self.last = Some(p);
    }

    /// Drops points no longer needed once pages before `oldest` are gone.
    pub fn expire(&mut self, oldest: u32) {
        while self.len >= 2 && self.point(1).1 <= i64::from(oldest) * self.scale {
            self.head = (self.head + 1) % self.cap.max(1);
            self.len -= 1;
        }
    }

    /// The key of the first kept point (keys below it are not covered).
    #[cfg(test)]
    pub fn first_key(&self) -> Option<u64> {
        (self.len > 0).then(|| self.point(0).0)
    }

    /// The page of the first kept point.
    pub fn first_page(&self) -> Option<u32> {
        (self.len > 0).then(|| (self.point(0).1 / self.scale) as u32)
    }

    /// Predicts the page of `key`; `None` when the key is below the first kept point (or the
    /// spline is off).
    pub fn predict(&self, key: u64) -> Option<Prediction> {
        if !self.enabled || self.len == 0 {
            return None;
        }
        let first = self.point(0);
        if key < first.0 {
            return None;
        }
        // The last kept point at or below the key.
        let (mut lo, mut hi) = (0, self.len);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.point(mid).0 <= key {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let a = self.point(lo);
        let b = if lo + 1 < self.len {
            Some(self.point(lo + 1))
        } else {
            self.last.filter(|l| l.0 > a.0)
        };
        let y = match b {
            Some(b) if key < b.0 => {
                let num = i128::from(key - a.0) * i128::from(b.1 - a.1);
                a.1 + (num / i128::from(b.0 - a.0)) as i64
            }
            Some(b) => b.1,
            None => a.1,
        };
        let (e, n) = (self.err, self.scale);
        let clamp = |v: i64| v.clamp(0, i64::from(u32::MAX)) as u32;
        Some(Prediction {
            page: clamp(y.div_euclid(n)),
            lo: clamp((y - e).div_euclid(n) - 1),
            hi: clamp((y + e).div_euclid(n)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages whose smallest keys grow irregularly; every page must lie in its key's window.
    fn check(keys: &[u64], err: u32, cap: usize) -> usize {
        let mut mem = [0u8; 4096];
        let mut s = Spline::new(&mut mem, 8, Some(err), Some(cap), 10);
        for (i, &k) in keys.iter().enumerate() {
            s.add(k, i as u32);
        }
        for (i, &k) in keys.iter().enumerate() {
            // The page's smallest key, and a key inside the page.
            for probe in [k, k + (keys.get(i + 1).map_or(1, |n| n - k)) / 2] {
                match s.predict(probe) {
                    Some(p) => assert!(
                        p.lo <= i as u32 && i as u32 <= p.hi,
                        "key {probe} of page {i} predicted {p:?}"
                    ),
                    None => assert!(probe < s.first_key().unwrap()),
                }
            }
        }
        s.points()
    }

    #[test]
    fn every_page_lies_in_its_window() {
        let linear: [u64; 200] = core::array::from_fn(|i| i as u64 * 100);
        assert!(check(&linear, 1, 100) <= 2);
        let mut k = 0;
        let bumpy: [u64; 300] = core::array::from_fn(|i| {
            k += 10 + (i as u64 * 7919) % 97 + if i % 50 == 0 { 5000 } else { 0 };
            k
        });
        let n = check(&bumpy, 1, 300);
        assert!(n > 2 && n < 300, "{n} points");
        check(&bumpy, 0, 300);
        check(&bumpy, 4, 300);
        check(&bumpy, 25, 300);
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_points() {
        let mut k = 0;
        let bumpy: [u64; 300] = core::array::from_fn(|i| {
            k += 1 + (i as u64 * 7919) % 1000;
            k
        });
        let mut mem = [0u8; 4096];
        let mut s = Spline::new(&mut mem, 4, Some(0), Some(10), 1);
        for (i, &k) in bumpy.iter().enumerate() {
            s.add(k, i as u32);
        }
        assert_eq!(s.points(), 10);
        assert!(s.dropped > 0);
        assert!(s.predict(bumpy[0]).is_none());
        let last = *bumpy.last().unwrap();
        let p = s.predict(last).unwrap();
        assert!(p.lo <= 299 && 299 <= p.hi);
    }
}
