//! Temporary pages: record-level consistency as EmbedDB does it.
//!
//! With `record_level_consistency` on, every `put` that does not fill the write buffer writes
//! the whole buffer, as a **temporary page** (kind 2: a data page image whose id field names
//! the data page it will become), to the next slot of two erase units reserved right after
//! the data write point's unit. When one reserved unit is full, the other is erased and used;
//! when the write point moves into the next unit, the reserved pair moves with it (the unit
//! entered is erased for data as usual; its temporary pages stood for pages now written).
//!
//! On open, the reserved units are scanned for temporary pages naming the next data page id;
//! the one with the most records (checked whole) becomes the write buffer again. A torn
//! temporary page fails its checksum and the one before it wins: exactly the puts that
//! returned are there. The cost is one page write per record (plus an erase every erase-unit
//! of puts), against one page write per page of records without it.

use crate::error::{AreaKind, Error, Result};
use crate::page::{Header, Kind};
use crate::series::{Series, TempPos, dev};
use crate::storage::Storage;

impl<S: Storage> Series<'_, S> {
    /// Address of slot `k` of absolute data unit `u`.
    fn temp_addr(&self, u: u32, k: u32) -> u64 {
        self.data.unit_addr(u) + u64::from(k) * self.data.page
    }

    /// Writes the write buffer as a temporary page.
    pub(crate) fn write_temp(&mut self) -> Result<()> {
        if self.var_pinned {
            self.write_var_page()?;
        }
        let u = self.data.next / self.data.unit;
        let (a, b) = (u + 1, u + 2);
        let usable = (self.temp.unit == a || self.temp.unit == b) && self.temp.k < self.data.unit;
        if !usable {
            let nu = if self.temp.unit == a { b } else { a };
            if !self.data.may_enter(u) {
                return Err(Error::Full {
                    area: AreaKind::Data,
                });
            }
            let addr = self.data.unit_addr(nu);
            self.store.erase(addr, self.data.unit_bytes()).map_err(dev(
                AreaKind::Data,
                None,
                addr,
            ))?;
            self.stats.erases += 1;
            // Temporary units hold no live page; the window is dropped all the same.
            self.drop_read_cache();
            if !self.block {
                self.sync(AreaKind::Data)?;
            }
            self.temp = TempPos { unit: nu, k: 0 };
        }
        let lay = self.lay;
        let target = self.data.next;
        let h = Header {
            kind: Kind::Temp,
            id: target,
            count: self.wcount as u16,
            gap: 0,
            aux: lay.tag,
        };
        lay.seal(self.wbuf, &h);
        let addr = self.temp_addr(self.temp.unit, self.temp.k);
        self.store.write(addr, &self.wbuf[..lay.page]).map_err(dev(
            AreaKind::Data,
            Some(target),
            addr,
        ))?;
        self.stats.temp_writes += 1;
        self.temp.k += 1;
        // Each put must be durable when it returns, block device or not.
        self.sync(AreaKind::Data)
    }

    /// Restores the write buffer from the newest temporary page for the next data page.
    ///
    /// Temporary pages name the id the data write point had when they were written: the
    /// newest page's successor, or — when recovery skipped a torn data page — a later id. So
    /// the newest temporary page (by target, then count) with a target from the newest
    /// page's successor to the write point wins, looked for in the reserved units of both.
    pub(crate) fn recover_temp(&mut self) -> Result<()> {
        let unit = self.data.unit;
        let lower = self.data.newest.map_or(0, |n| n + 1).min(self.data.next);
        let next = self.data.next;
        let mut best: Option<(u32, u16, u32, u32)> = None;
        let n = self.lay.probe;
        self.drop_read_cache();
        for au in lower / unit + 1..=next / unit + 2 {
            for k in 0..unit {
                let addr = self.temp_addr(au, k);
                self.store.read(addr, &mut self.rbuf[..n]).map_err(dev(
                    AreaKind::Data,
                    None,
                    addr,
                ))?;
                self.stats.header_reads += 1;
                if let Ok(h) = self.lay.header(&self.rbuf[..n])
                    && h.kind == Kind::Temp
                    && (lower..=next).contains(&h.id)
                    && h.count > 0
                    && best.is_none_or(|b| (h.id, h.count) > (b.0, b.1))
                {
                    // Check it whole before trusting it.
                    let ps = self.lay.page;
                    self.store.read(addr, &mut self.rbuf[..ps]).map_err(dev(
                        AreaKind::Data,
                        None,
                        addr,
                    ))?;
                    self.stats.page_reads += 1;
                    if self.lay.verify(self.rbuf).is_ok() {
                        best = Some((h.id, h.count, au, k));
                    }
                }
            }
        }
        self.drop_read_cache();
        self.temp = TempPos {
            unit: u32::MAX,
            k: unit,
        };
        let Some((_, count, au, k)) = best else {
            return Ok(());
        };
        let addr = self.temp_addr(au, k);
        let ps = self.lay.page;
        self.store
            .read(addr, &mut self.wbuf[..ps])
            .map_err(dev(AreaKind::Data, None, addr))?;
        if self.lay.verify(self.wbuf).is_err() {
            // It verified a moment ago; a device that changes under us gets nothing restored.
            self.wbuf.fill(0);
            return Ok(());
        }
        self.wcount = usize::from(count);
        self.wmm = None;
        self.last_key = Some(self.lay.max_key(self.wbuf));
        // The next temporary page goes to the other unit (erased first), keeping this one.
        self.temp = TempPos { unit: au, k: unit };
        let u = next / unit;
        if au != u + 1 && au != u + 2 {
            // The write point moved past a torn page into the unit holding this temporary
            // page: entering it would erase the only copy. Write it again where it belongs.
            self.write_temp()?;
        }
        Ok(())
    }
}
