//! The variable-size data area: its own circular queue of pages holding a byte stream of
//! values, each `u32` length (little-endian) then the bytes, running on across pages. A
//! record that has a value stores where it starts (a [`VarRef`]: page id and payload offset)
//! after its data.
//!
//! **Variable-data page** (kind 4, see [`page`](crate::page)): the common header with
//! `count` = payload bytes used, then the payload. A length prefix never straddles two pages
//! (a value starts on the next page when fewer than 4 bytes are left).
//!
//! The write buffer's page is written when full, and also before any data page whose records
//! point into it (and, with record-level consistency, before every temporary page), so a
//! record on flash never points at bytes a power cut can lose. When the area wraps, the oldest
//! values are overwritten (or, configured to refuse, new values are refused); reading a value
//! whose pages are gone says so instead of returning other bytes.

use crate::error::{AreaKind, Error, Result};
use crate::page::{COMMON, Header, Kind, VarRef, get_u32, put_u32};
use crate::series::{Series, dev};
use crate::storage::Storage;

/// What reading a record's variable-size value found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarValue {
    /// The record has no value.
    None,
    /// The value has `len` bytes; `min(len, out.len())` were copied.
    Value {
        /// Its full length.
        len: usize,
    },
    /// The value was in pages the circular area has overwritten since.
    Gone,
}

/// Where a value's bytes are: the variable-data write buffer or the read buffer.
#[derive(Clone, Copy)]
enum Src {
    Write,
    Read,
}

impl<'a, S: Storage> Series<'a, S> {
    /// The longest value the variable-data area holds.
    pub fn max_var_len(&self) -> usize {
        let pages = self.var.slots.saturating_sub(2 * self.var.unit) as usize;
        pages.saturating_mul(self.lay.var_payload).saturating_sub(4)
    }

    /// Appends a value to the stream; returns where it starts.
    pub(crate) fn var_append(&mut self, v: &[u8]) -> Result<VarRef> {
        let max = self.max_var_len();
        if v.len() > max || v.len() > u32::MAX as usize {
            return Err(Error::VarTooLarge { len: v.len(), max });
        }
        let payload = self.lay.var_payload;
        if self.var_used + 4 > payload {
            self.write_var_page()?;
        }
        let r = VarRef {
            page: self.var.next,
            offset: self.var_used as u32,
        };
        put_u32(self.vwbuf, COMMON + self.var_used, v.len() as u32);
        self.var_used += 4;
        let mut rest = v;
        loop {
            if self.var_used == payload {
                self.write_var_page()?;
            }
            if rest.is_empty() {
                break;
            }
            let n = rest.len().min(payload - self.var_used);
            let o = COMMON + self.var_used;
            self.vwbuf[o..o + n].copy_from_slice(&rest[..n]);
            self.var_used += n;
            rest = &rest[n..];
        }
        Ok(r)
    }

    /// Writes the variable-data write buffer as the next page of its area.
    pub(crate) fn write_var_page(&mut self) -> Result<()> {
        if self.var_used == 0 {
            self.var_pinned = false;
            return Ok(());
        }
        self.enter(AreaKind::Var)?;
        let id = self.var.next;
        let h = Header {
            kind: Kind::Var,
            id,
            count: self.var_used as u16,
            gap: self.var.gap,
            aux: 0,
        };
        self.lay.seal(self.vwbuf, &h);
        let addr = self.var.addr(id);
        self.store
            .write(addr, &self.vwbuf[..self.lay.page])
            .map_err(dev(AreaKind::Var, Some(id), addr))?;
        self.stats.var_writes += 1;
        let ends_unit = (id + 1).is_multiple_of(self.var.unit);
        self.sync_after_write(AreaKind::Var, ends_unit)?;
        self.var.written(id);
        self.var_used = 0;
        self.var_pinned = false;
        self.vwbuf.fill(0);
        if ends_unit {
            self.erase_ahead(AreaKind::Var)?;
        }
        Ok(())
    }

    /// Makes variable-data page `id` readable: the write buffer, or the page read and checked
    /// into the read buffer. `Ok(None)`: the page is gone (overwritten) or not written.
    fn var_page(&mut self, id: u32) -> Result<Option<(Src, usize)>> {
        if id == self.var.next {
            return Ok(Some((Src::Write, self.var_used)));
        }
        if !self.var.is_live(id) {
            return Ok(None);
        }
        if let Some(h) = self.vcache
            && h.id == id
        {
            return Ok(Some((Src::Read, usize::from(h.count))));
        }
        self.vcache = None;
        let addr = self.var.addr(id);
        let ps = self.lay.page;
        self.store
            .read(addr, &mut self.vrbuf[..ps])
            .map_err(dev(AreaKind::Var, Some(id), addr))?;
        self.stats.var_reads += 1;
        match self.lay.verify(self.vrbuf) {
            Ok(h) if h.kind == Kind::Var && h.id == id => {
                self.vcache = Some(h);
                Ok(Some((Src::Read, usize::from(h.count))))
            }
            Ok(_) => Err(self.var_corrupt(id, "the slot holds another page")),
            Err(why) => Err(self.var_corrupt(id, why)),
        }
    }

    fn var_corrupt(&self, id: u32, reason: &'static str) -> Error {
        Error::Corrupt {
            area: AreaKind::Var,
            page: id,
            addr: self.var.addr(id),
            reason,
        }
    }

    fn var_bytes(&self, src: Src) -> &[u8] {
        match src {
            Src::Write => self.vwbuf,
            Src::Read => self.vrbuf,
        }
    }

    /// Reads the value at `r` into `out`.
    pub(crate) fn read_var(&mut self, r: VarRef, out: &mut [u8]) -> Result<VarValue> {
        let Some((src, used)) = self.var_page(r.page)? else {
            return Ok(VarValue::Gone);
        };
        let mut off = r.offset as usize;
        if off + 4 > used {
            return Ok(VarValue::Gone);
        }
        let len = get_u32(self.var_bytes(src), COMMON + off) as usize;
        if len > self.max_var_len() {
            return Err(self.var_corrupt(r.page, "a value length larger than the area"));
        }
        off += 4;
        let mut page = r.page;
        let mut used = used;
        let mut src = src;
        let mut copied = 0;
        let want = len.min(out.len());
        let payload = self.lay.var_payload;
        while copied < want {
            if off == payload {
                page = page.wrapping_add(1);
                let Some((s, u)) = self.var_page(page)? else {
                    return Ok(VarValue::Gone);
                };
                src = s;
                used = u;
                off = 0;
            }
            let n = (want - copied).min(payload - off);
            if off + n > used {
                return Ok(VarValue::Gone);
            }
            out[copied..copied + n]
                .copy_from_slice(&self.var_bytes(src)[COMMON + off..COMMON + off + n]);
            copied += n;
            off += n;
        }
        Ok(VarValue::Value { len })
    }

    /// Looks `key` up: copies its data into `data` and its variable-size value into `var`.
    /// `Ok(None)`: no record has that key.
    pub fn get_var(
        &mut self,
        key: u64,
        data: &mut [u8],
        var: &mut [u8],
    ) -> Result<Option<VarValue>> {
        let Some(loc) = self.find(key)? else {
            return Ok(None);
        };
        let d = self.loc_data(loc);
        let n = d.len().min(data.len());
        data[..n].copy_from_slice(&d[..n]);
        match self.loc_var(loc) {
            None => Ok(Some(VarValue::None)),
            Some(r) => self.read_var(r, var).map(Some),
        }
    }
}
