//! The circular area: a run of page slots used as a queue, erased ahead of its write point.
//!
//! Pages get logical ids 0, 1, 2, … in write order; page `id` lives in slot `id mod slots`
//! (so the id says which lap of the queue wrote it). Slots are grouped in erase units of
//! `unit` pages. When the write point enters a unit — after the last page of the previous
//! unit is written, or at the first write after open — the whole unit is erased, so every
//! slot from the write point to the end of its unit is erased before it is written, and a
//! unit is erased once per lap: wear is spread evenly over the area.
//!
//! With `reserved` units (record-level consistency keeps its temporary pages in the two
//! units after the write point's), the live pages are the ids in
//! `[oldest, newest]` where, once the queue has wrapped, `oldest` is the first id of the unit
//! `reserved + 1` units after the write point's unit, one lap back. A full area either
//! overwrites (moving `oldest`) or refuses to enter the next unit.
//!
//! A slot the write point finds programmed after a power cut (a torn page) cannot be written
//! on flash without erasing its unit, which holds live pages; it is skipped, and the next
//! page written records how many slots before it were skipped (`gap` in its header), so
//! readers know those slots are dead rather than corrupt.

use crate::error::{AreaKind, Error, Result};

/// One circular area's geometry and write state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ring {
    pub area: AreaKind,
    /// Byte address of slot 0.
    pub base: u64,
    pub page: u64,
    pub slots: u32,
    /// Pages per erase unit.
    pub unit: u32,
    pub units: u32,
    /// Units kept ahead of the write point (temporary pages).
    pub reserved: u32,
    pub overwrite: bool,
    /// Id the next page written gets.
    pub next: u32,
    /// Dead slots right before `next`, recorded in the next page's header.
    pub gap: u16,
    /// The newest page written, if any.
    pub newest: Option<u32>,
    /// The oldest live id (`next` when the area is empty).
    pub oldest: u32,
    /// The slots from `next` to the end of its unit are known to be erased.
    pub ready: bool,
}

impl Ring {
    pub fn new(
        area: AreaKind,
        base: u64,
        page: usize,
        slots: u32,
        unit: u32,
        reserved: u32,
        overwrite: bool,
    ) -> Ring {
        Ring {
            area,
            base,
            page: page as u64,
            slots,
            unit,
            units: slots / unit.max(1),
            reserved,
            overwrite,
            next: 0,
            gap: 0,
            newest: None,
            oldest: 0,
            ready: false,
        }
    }

    /// Byte address of the slot holding page `id`.
    pub fn addr(&self, id: u32) -> u64 {
        self.base + u64::from(id % self.slots) * self.page
    }

    /// Byte address of slot `slot`.
    pub fn slot_addr(&self, slot: u32) -> u64 {
        self.base + u64::from(slot) * self.page
    }

    /// Byte address of the first slot of absolute unit `u` (counting across laps).
    pub fn unit_addr(&self, u: u32) -> u64 {
        self.slot_addr((u % self.units) * self.unit)
    }

    /// Bytes per erase unit.
    pub fn unit_bytes(&self) -> u64 {
        u64::from(self.unit) * self.page
    }

    /// Whether the area holds no live page.
    pub fn is_empty(&self) -> bool {
        match self.newest {
            None => true,
            Some(n) => self.oldest > n,
        }
    }

    /// Live page count (dead slots included).
    pub fn live(&self) -> u64 {
        match self.newest {
            Some(n) if n >= self.oldest => u64::from(n - self.oldest) + 1,
            _ => 0,
        }
    }

    /// Whether `id` is a live page id.
    pub fn is_live(&self, id: u32) -> bool {
        matches!(self.newest, Some(n) if id >= self.oldest && id <= n)
    }

    /// The oldest live id after entering absolute unit `u` (overwrite mode).
    fn oldest_after_entering(&self, u: u32) -> u32 {
        let first_kept = (u64::from(u) + 1 + u64::from(self.reserved)) * u64::from(self.unit);
        first_kept.saturating_sub(u64::from(self.slots)) as u32
    }

    /// Whether the write point may enter absolute unit `u` without destroying live data
    /// the configuration says to keep.
    pub fn may_enter(&self, u: u32) -> bool {
        self.overwrite || u64::from(u) + u64::from(self.reserved) < u64::from(self.units)
    }

    /// Checks that the write point's unit can be written; when it is not yet erased, says
    /// which unit to erase and the oldest live id after that. `Ok(None)`: ready.
    pub fn plan_entry(&self) -> Result<Option<(u32, u32)>> {
        if self.next > u32::MAX - 2 * self.slots.max(self.unit) {
            return Err(Error::IdsExhausted { area: self.area });
        }
        if self.ready {
            return Ok(None);
        }
        let u = self.next / self.unit;
        if !self.may_enter(u) {
            return Err(Error::Full { area: self.area });
        }
        let oldest = if self.overwrite {
            self.oldest.max(self.oldest_after_entering(u))
        } else {
            self.oldest
        };
        Ok(Some((u, oldest)))
    }

    /// Records that page `id` was written.
    pub fn written(&mut self, id: u32) {
        if self.newest.is_none() && self.oldest > id {
            self.oldest = id;
        }
        self.newest = Some(id);
        self.next = id + 1;
        self.gap = 0;
        if self.next.is_multiple_of(self.unit) {
            self.ready = false;
        }
    }

    /// The oldest live id in overwrite mode for a write point at `next` (used by recovery).
    pub fn recovered_oldest(&self) -> u32 {
        if self.overwrite {
            self.oldest_after_entering(self.next / self.unit)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_range_follows_the_write_point_around_the_ring() {
        // 4 units of 2 pages.
        let mut r = Ring::new(AreaKind::Data, 0, 512, 8, 2, 0, true);
        for id in 0..40u32 {
            if let Some((_, oldest)) = r.plan_entry().unwrap() {
                r.oldest = oldest;
                r.ready = true;
            }
            assert_eq!(r.next, id);
            r.written(id);
            // Never more than the area; at least the area minus the unit being entered.
            assert!(r.live() <= 8);
            assert!(r.live() >= 7 || id < 8);
        }
        assert_eq!(r.oldest, 32);
    }

    #[test]
    fn refuse_mode_stops_before_the_first_unit_comes_round() {
        let mut r = Ring::new(AreaKind::Data, 0, 512, 8, 2, 1, false);
        let mut written = 0;
        loop {
            match r.plan_entry() {
                Ok(Some(_)) => r.ready = true,
                Ok(None) => {}
                Err(Error::Full { .. }) => break,
                Err(e) => panic!("{e}"),
            }
            r.written(r.next);
            written += 1;
        }
        // 4 units, one reserved ahead: 3 units of data.
        assert_eq!(written, 6);
        assert_eq!(r.oldest, 0);
    }
}
