//! Recovery without a write-ahead log: find each area's newest page by reading page headers,
//! then rebuild what lived only in RAM.
//!
//! **Finding the write point.** Page `id` lives in slot `id mod slots`, so `id / slots` is the
//! lap that wrote it. Going through the erase units in address order, the units whose first
//! page belongs to the newest lap come first, then (after the write point) units erased,
//! reserved or holding the lap before. So when unit 0's first page is valid, a binary search
//! on "unit `u`'s first page is valid and of unit 0's lap" finds the newest unit in
//! `log2(units)` header reads; otherwise (the write point is near the end of the area, or the
//! area is blank) every unit's first header is read. The pages of that unit are then read
//! whole: the newest valid one is the newest page.
//!
//! **After the newest page.** On flash, slots after it in its unit must be erased to be
//! written; a slot that is not (a page torn by the power cut) is skipped and the next page
//! records the gap. When the write point is at a unit boundary the unit is erased before its
//! first write, as always. On a block device, pages after the newest one in its unit that a
//! lost unsynced write left behind are invalidated (their header zeroed, then a sync), so a
//! later recovery cannot take them for newer pages.
//!
//! **Rebuilding.** The live range follows from the write point (see [`ring`](crate::ring));
//! the spline is rebuilt from the headers of the live data pages (header reads only), the
//! index write buffer from the bitmaps of the data pages no index page covers yet, and with
//! record-level consistency the write buffer from the newest temporary page.

use crate::error::{AreaKind, Result};
use crate::page::{COMMON, Kind, MAX_BITMAP};
use crate::series::{Series, dev};
use crate::storage::Storage;

impl<S: Storage> Series<'_, S> {
    /// Recovers every area and rebuilds the RAM state.
    pub(crate) fn recover(&mut self) -> Result<()> {
        self.recover_ring(AreaKind::Data)?;
        if self.cfg.has_index() {
            self.recover_ring(AreaKind::Index)?;
        }
        if self.cfg.has_var() {
            self.recover_ring(AreaKind::Var)?;
        }
        self.rebuild()?;
        if self.cfg.record_level_consistency {
            self.recover_temp()?;
        }
        Ok(())
    }

    fn kind_of(area: AreaKind) -> Kind {
        match area {
            AreaKind::Data => Kind::Data,
            AreaKind::Index => Kind::Index,
            AreaKind::Var => Kind::Var,
        }
    }

    /// The id of the page in `slot` if its header is valid and of `area`'s kind.
    fn probe_slot(&mut self, area: AreaKind, slot: u32) -> Result<Option<u32>> {
        self.drop_read_cache();
        let ring = *self.ring(area);
        let addr = ring.slot_addr(slot);
        let n = self.lay.probe;
        self.store
            .read(addr, &mut self.rbuf[..n])
            .map_err(dev(area, None, addr))?;
        self.stats.header_reads += 1;
        Ok(match self.lay.header(&self.rbuf[..n]) {
            Ok(h) if h.kind == Self::kind_of(area) && h.id % ring.slots == slot => Some(h.id),
            _ => None,
        })
    }

    /// The id of the page in `slot` if the whole page is valid and of `area`'s kind.
    fn check_slot(&mut self, area: AreaKind, slot: u32) -> Result<Option<u32>> {
        self.drop_read_cache();
        let ring = *self.ring(area);
        let addr = ring.slot_addr(slot);
        let ps = self.lay.page;
        self.store
            .read(addr, &mut self.rbuf[..ps])
            .map_err(dev(area, None, addr))?;
        self.stats.page_reads += 1;
        Ok(match self.lay.verify(self.rbuf) {
            Ok(h) if h.kind == Self::kind_of(area) && h.id % ring.slots == slot => Some(h.id),
            _ => None,
        })
    }

    /// The newest valid page of unit `u` (a slot index of units): on flash the largest id;
    /// on a block device the end of the run of consecutive valid pages from the unit's start.
    fn newest_in_unit(&mut self, area: AreaKind, u: u32) -> Result<Option<u32>> {
        let ring = *self.ring(area);
        let mut newest: Option<u32> = None;
        for k in 0..ring.unit {
            let slot = u * ring.unit + k;
            match self.check_slot(area, slot)? {
                Some(id) => {
                    if self.block {
                        match newest {
                            Some(n) if id != n + 1 => break,
                            None if k > 0 => break,
                            _ => {}
                        }
                    }
                    if newest.is_none_or(|n| id > n) {
                        newest = Some(id);
                    }
                }
                None if self.block && newest.is_some() => break,
                None => {}
            }
        }
        Ok(newest)
    }

    /// Finds the write point of one area (see the module docs).
    pub(crate) fn recover_ring(&mut self, area: AreaKind) -> Result<()> {
        let ring = *self.ring(area);
        let units = ring.units;
        let newest_unit = match self.probe_slot(area, 0)? {
            Some(id0) => {
                let lap = id0 / ring.slots;
                let (mut lo, mut hi, mut lo_id) = (0, units - 1, id0);
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    match self.probe_slot(area, mid * ring.unit)? {
                        Some(id) if id / ring.slots == lap => {
                            lo = mid;
                            lo_id = id;
                        }
                        _ => hi = mid - 1,
                    }
                }
                Some((lo, lo_id))
            }
            None => {
                let mut best: Option<(u32, u32)> = None;
                for u in 1..units {
                    if let Some(id) = self.probe_slot(area, u * ring.unit)?
                        && best.is_none_or(|b| id > b.1)
                    {
                        best = Some((u, id));
                    }
                }
                best
            }
        };
        let mut newest = None;
        let mut first_id = None;
        if let Some((u, id)) = newest_unit {
            first_id = Some(id);
            newest = self.newest_in_unit(area, u)?;
            if newest.is_none() {
                // Its first page was torn: the newest page ends the unit before.
                newest = self.newest_in_unit(area, (u + units - 1) % units)?;
            }
        }
        let r = self.ring_mut(area);
        r.gap = 0;
        match newest {
            Some(n) => {
                r.newest = Some(n);
                r.next = n + 1;
            }
            None => {
                r.newest = None;
                r.next = first_id.unwrap_or(0);
            }
        }
        r.ready = false;
        let next = r.next;
        if self.block {
            self.invalidate_after(area)?;
            let r = self.ring_mut(area);
            r.ready = !next.is_multiple_of(r.unit);
        } else if !next.is_multiple_of(ring.unit) {
            self.skip_torn(area)?;
        }
        let r = self.ring_mut(area);
        r.oldest = match r.newest {
            Some(_) => r.recovered_oldest(),
            None => r.next,
        };
        Ok(())
    }

    /// Flash: moves the write point past slots of its unit that are not erased.
    fn skip_torn(&mut self, area: AreaKind) -> Result<()> {
        let ring = *self.ring(area);
        let erased = self.store.geometry().erase_value.unwrap_or(0xFF);
        let ps = self.lay.page;
        let mut next = ring.next;
        let mut gap: u16 = 0;
        let mut ready = false;
        while !next.is_multiple_of(ring.unit) {
            let addr = ring.addr(next);
            self.store
                .read(addr, &mut self.rbuf[..ps])
                .map_err(dev(area, Some(next), addr))?;
            self.stats.page_reads += 1;
            if self.rbuf[..ps].iter().all(|&b| b == erased) {
                ready = true;
                break;
            }
            next += 1;
            gap = gap.saturating_add(1);
        }
        self.drop_read_cache();
        let r = self.ring_mut(area);
        r.next = next;
        r.gap = gap;
        r.ready = ready;
        Ok(())
    }

    /// Block devices: zeroes the header of every page after the write point in its unit that
    /// claims an id at or past the write point (left by writes a power cut half-kept).
    fn invalidate_after(&mut self, area: AreaKind) -> Result<()> {
        let ring = *self.ring(area);
        let start = ring.next % ring.slots;
        let unit_start = start - start % ring.unit;
        let mut any = false;
        for slot in start..unit_start + ring.unit {
            let n = self.lay.probe;
            let addr = ring.slot_addr(slot);
            self.store
                .read(addr, &mut self.rbuf[..n])
                .map_err(dev(area, None, addr))?;
            self.stats.header_reads += 1;
            let stale = match self.lay.header(&self.rbuf[..n]) {
                Ok(h) => h.kind == Self::kind_of(area) && h.id >= ring.next,
                // Unreadable pages are left alone; they are never taken for pages.
                Err(_) => false,
            };
            if stale {
                self.store
                    .write(addr, &[0u8; COMMON])
                    .map_err(dev(area, None, addr))?;
                self.stats.invalidations += 1;
                any = true;
            }
        }
        self.drop_read_cache();
        if any {
            self.sync(area)?;
        }
        Ok(())
    }

    /// Rebuilds the spline, the newest key and the index write buffer from the live data
    /// pages' headers.
    fn rebuild(&mut self) -> Result<()> {
        self.spline.clear();
        self.last_key = None;
        self.idx_count = 0;
        self.idx_broken = false;
        let Some((oldest, newest)) = self.page_range() else {
            if self.cfg.has_index() {
                self.idx_first = self.data.next;
                if let Some(end) = self.index_coverage_end()? {
                    self.idx_broken = end > self.data.next;
                }
            }
            return Ok(());
        };
        let has_index = self.cfg.has_index();
        // The data pages the index pages do not cover yet.
        let mut pending_from = u32::MAX;
        if has_index {
            pending_from = match self.index_coverage_end()? {
                Some(end) if end > newest + 1 => {
                    self.idx_broken = true;
                    oldest
                }
                Some(end) => end.max(oldest),
                None => oldest,
            };
            self.idx_first = pending_from;
        }
        let bm = self.lay.bm;
        for id in oldest..=newest {
            let mut bitmap = [0u8; MAX_BITMAP];
            if let Ok(h) = self.load_header(id)? {
                let _ = h;
                let page = self.rpage();
                let (min, max) = (self.lay.min_key(page), self.lay.max_key(page));
                bitmap[..bm].copy_from_slice(self.lay.bitmap(page));
                self.spline.add(min, id);
                if id == newest {
                    self.newest_max = max;
                    self.last_key = Some(self.newest_max);
                }
            }
            if has_index && id >= pending_from {
                self.index_add(id, &bitmap[..bm])?;
            }
        }
        if self.last_key.is_none() {
            // The newest page was valid a moment ago (it was found whole).
            if let Ok(h) = self.load_page(newest)? {
                let _ = h;
                self.newest_max = self.lay.max_key(self.rpage());
                self.last_key = Some(self.newest_max);
            }
        }
        Ok(())
    }

    /// One past the last data page the newest index page covers.
    fn index_coverage_end(&mut self) -> Result<Option<u32>> {
        let Some(j) = self.index.newest else {
            return Ok(None);
        };
        Ok(self
            .load_index(j)?
            .map(|h| h.aux.saturating_add(u32::from(h.count))))
    }
}
