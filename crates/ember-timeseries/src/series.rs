//! The engine: one time series on one storage, with its buffers, write path and lookups.
//!
//! A `put` appends the record to the write buffer (a data page image in RAM, its header's
//! key and data min/max and bitmap kept up to date); a full buffer is written to the data
//! area's next slot, its point added to the spline and its bitmap to the index write buffer.
//! A `get` asks the spline for the page (or binary-searches the live pages), reads it into the
//! read buffer, checks both checksums and binary-searches its records.

use core::cmp::Ordering;
use core::mem::size_of;

use ember_device::DeviceError;

use crate::config::{Config, DataOrder, OnFull};
use crate::error::{AreaKind, Error, Result};
use crate::page::{Header, Kind, Layout, MAX_BITMAP, VarRef};
use crate::ring::Ring;
use crate::spline::Spline;
use crate::storage::Storage;
use crate::value::{Col, ColType, read_int};

/// Counters of what the engine did. Reads and writes count pages (a header-only read
/// counts as a header read); `erases` counts erase units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records put.
    pub records: u64,
    /// Key lookups (`get`, `get_var`).
    pub lookups: u64,
    /// Data pages read whole (a read-ahead counts every page it read).
    pub page_reads: u64,
    /// Device read calls that read whole data pages (one read-ahead of several pages is one).
    pub read_calls: u64,
    /// Data pages of which only the header was read.
    pub header_reads: u64,
    /// Index pages read.
    pub index_reads: u64,
    /// Variable-data pages read.
    pub var_reads: u64,
    /// Data pages written.
    pub page_writes: u64,
    /// Device write calls that wrote data pages (a batch of several pages is one).
    pub write_calls: u64,
    /// Temporary pages written (record-level consistency).
    pub temp_writes: u64,
    /// Index pages written.
    pub index_writes: u64,
    /// Variable-data pages written.
    pub var_writes: u64,
    /// Slots invalidated by recovery (block devices).
    pub invalidations: u64,
    /// Erase units erased.
    pub erases: u64,
    /// Syncs issued.
    pub syncs: u64,
}

impl Stats {
    /// Pages written of every kind.
    pub fn writes(&self) -> u64 {
        self.page_writes + self.temp_writes + self.index_writes + self.var_writes
    }

    /// Pages read of every kind (header-only reads excluded).
    pub fn reads(&self) -> u64 {
        self.page_reads + self.index_reads + self.var_reads
    }
}

/// Where the temporary page of the next put goes (record-level consistency): an absolute
/// unit of the data area and a slot in it (`k == unit`: pick and erase a fresh unit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TempPos {
    pub unit: u32,
    pub k: u32,
}

/// A time series: fixed-size records with ascending keys on a [`Storage`], in the memory the
/// caller gave. See the crate docs for the whole picture.
pub struct Series<'a, S: Storage> {
    pub(crate) store: S,
    pub(crate) cfg: Config<'a>,
    pub(crate) lay: Layout,
    pub(crate) block: bool,
    pub(crate) wbuf: &'a mut [u8],
    pub(crate) rbuf: &'a mut [u8],
    pub(crate) iwbuf: &'a mut [u8],
    pub(crate) irbuf: &'a mut [u8],
    pub(crate) vwbuf: &'a mut [u8],
    pub(crate) vrbuf: &'a mut [u8],
    /// Sealed data pages waiting to be written together (`Config::write_pages` > 1): pages
    /// `staged_first ..` in slots `0 .. staged` (empty when writes are not batched).
    pub(crate) sbuf: &'a mut [u8],
    pub(crate) staged_first: u32,
    pub(crate) staged: usize,
    /// Records in the staged pages.
    pub(crate) staged_records: usize,
    pub(crate) spline: Spline<'a>,
    pub(crate) data: Ring,
    pub(crate) index: Ring,
    pub(crate) var: Ring,
    /// Records in the write buffer.
    pub(crate) wcount: usize,
    pub(crate) temp: TempPos,
    /// The data page the read buffer holds (verified whole), with its header; it starts at
    /// byte `roff` of the read buffer.
    pub(crate) rcache: Option<Header>,
    /// Byte offset in the read buffer of the page `rcache` describes (or whose header
    /// `load_header` read).
    pub(crate) roff: usize,
    /// Read-ahead window: data pages `first .. first + n` were read, in one device call, into
    /// the read buffer's page slots `0 .. n` (each is checked when it is used). Only an
    /// iterator walking pages in order fills it; any write to the data area empties it.
    pub(crate) ahead: Option<(u32, u32)>,
    /// The index page the index read buffer holds.
    pub(crate) icache: Option<Header>,
    /// The variable-data page the variable read buffer holds.
    pub(crate) vcache: Option<Header>,
    /// Data page id of the first bitmap in the index write buffer, and their count.
    pub(crate) idx_first: u32,
    pub(crate) idx_count: usize,
    /// Index pages cannot be trusted (found covering data pages that do not exist).
    pub(crate) idx_broken: bool,
    /// Payload bytes used in the variable-data write buffer.
    pub(crate) var_used: usize,
    /// Records in the write buffer point into the variable-data write buffer.
    pub(crate) var_pinned: bool,
    /// Largest key of the newest data page.
    pub(crate) newest_max: u64,
    /// The last key put.
    pub(crate) last_key: Option<u64>,
    /// The data order when it is an integer column (offset, type): the write path compares
    /// it as `i64`s without going through [`Config::compare`].
    pub(crate) int_order: Option<(usize, ColType)>,
    /// With an integer data order: the write buffer's smallest and largest data value as
    /// `i64`s (`None`: not known, compare with the header's bytes).
    pub(crate) wmm: Option<(i64, i64)>,
    pub(crate) stats: Stats,
}

impl<S: Storage> core::fmt::Debug for Series<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Series")
            .field("config", &self.cfg)
            .field("data", &self.data)
            .field("buffered", &self.wcount)
            .field("spline_points", &self.spline.points())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Where a key was found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Loc {
    /// Record `idx` of the data page in the read buffer.
    Page(usize),
    /// Record `idx` of the write buffer.
    Buffer(usize),
}

/// A device error in `area` at `addr`.
pub(crate) fn dev(
    area: AreaKind,
    page: Option<u32>,
    addr: u64,
) -> impl FnOnce(DeviceError) -> Error {
    move |error| Error::Device {
        area,
        page,
        addr,
        error,
    }
}

/// Splits `n` bytes off the front of a slice.
fn take<'a>(buf: &mut &'a mut [u8], n: usize) -> &'a mut [u8] {
    let all = core::mem::take(buf);
    let (head, tail) = all.split_at_mut(n.min(all.len()));
    *buf = tail;
    head
}

impl<'a, S: Storage> Series<'a, S> {
    /// Opens the series on `store`: checks `cfg` against the storage and the arena, finds the
    /// newest page of every area by reading page headers, rebuilds the spline and the index
    /// write buffer from the data pages' headers, and (with record-level consistency) restores
    /// the write buffer from its newest temporary page. A blank storage opens empty.
    ///
    /// `arena` holds the page buffers first ([`Config::buffer_bytes`]) and spline points in the
    /// rest.
    pub fn open(store: S, cfg: Config<'a>, arena: &'a mut [u8]) -> Result<Self> {
        let geom = store.geometry();
        let lay = cfg.check(&geom)?;
        let needed = cfg.buffer_bytes();
        if arena.len() < needed {
            return Err(Error::Memory {
                needed,
                given: arena.len(),
            });
        }
        let ps = cfg.page_size;
        let mut rest = arena;
        let wbuf = take(&mut rest, ps);
        // The data read buffer takes the buffers beyond those needed: an iterator walking
        // pages in order reads that many consecutive pages in one device call.
        let extra = cfg.buffers - cfg.buffers_needed();
        let rbuf = take(&mut rest, ps * (1 + extra));
        let (iwbuf, irbuf) = if cfg.has_index() {
            (take(&mut rest, ps), take(&mut rest, ps))
        } else {
            (take(&mut rest, 0), take(&mut rest, 0))
        };
        let (vwbuf, vrbuf) = if cfg.has_var() {
            (take(&mut rest, ps), take(&mut rest, ps))
        } else {
            (take(&mut rest, 0), take(&mut rest, 0))
        };
        let sbuf = take(&mut rest, cfg.staging_pages() * ps);
        let spline = Spline::new(
            rest,
            cfg.key_size,
            cfg.spline_error,
            cfg.spline_max_points,
            lay.per_page,
        );
        let overwrite = cfg.on_full == OnFull::Overwrite;
        let ring = |area, a: crate::config::Area, reserved, overwrite| {
            Ring::new(
                area,
                u64::from(a.first_page) * ps as u64,
                ps,
                a.pages,
                cfg.erase_pages,
                reserved,
                overwrite,
            )
        };
        let mut s = Series {
            block: geom.erase_value.is_none(),
            data: ring(AreaKind::Data, cfg.data, cfg.reserved_units(), overwrite),
            index: ring(AreaKind::Index, cfg.index, 0, true),
            var: ring(AreaKind::Var, cfg.var, 0, overwrite),
            store,
            cfg,
            lay,
            wbuf,
            rbuf,
            iwbuf,
            irbuf,
            vwbuf,
            vrbuf,
            sbuf,
            staged_first: 0,
            staged: 0,
            staged_records: 0,
            spline,
            wcount: 0,
            temp: TempPos {
                unit: u32::MAX,
                k: cfg.erase_pages,
            },
            rcache: None,
            roff: 0,
            ahead: None,
            icache: None,
            vcache: None,
            idx_first: 0,
            idx_count: 0,
            idx_broken: false,
            var_used: 0,
            var_pinned: false,
            newest_max: 0,
            last_key: None,
            int_order: match cfg.data_order {
                DataOrder::Col(Col::Data { offset, ty }) if !ty.is_float() => Some((offset, ty)),
                _ => None,
            },
            wmm: None,
            stats: Stats::default(),
        };
        s.wbuf.fill(0);
        s.iwbuf.fill(0);
        s.vwbuf.fill(0);
        s.recover()?;
        Ok(s)
    }

    /// Erases every area of the configuration (block devices: clears every page header) and
    /// opens the series empty.
    pub fn format(mut store: S, cfg: Config<'a>, arena: &'a mut [u8]) -> Result<Self> {
        let geom = store.geometry();
        cfg.check(&geom)?;
        let ps = cfg.page_size as u64;
        for (area, a) in [
            (AreaKind::Data, cfg.data),
            (AreaKind::Index, cfg.index),
            (AreaKind::Var, cfg.var),
        ] {
            let start = u64::from(a.first_page) * ps;
            let len = u64::from(a.pages) * ps;
            if len == 0 {
                continue;
            }
            if geom.erase_value.is_some() {
                store.erase(start, len).map_err(dev(area, None, start))?;
            } else {
                let zero = [0u8; crate::page::COMMON];
                for p in 0..u64::from(a.pages) {
                    let at = start + p * ps;
                    store.write(at, &zero).map_err(dev(area, None, at))?;
                }
            }
        }
        store.sync().map_err(dev(AreaKind::Data, None, 0))?;
        Self::open(store, cfg, arena)
    }

    /// Writes the partly filled write buffer as a data page and makes everything durable. The
    /// next record starts a new page.
    pub fn flush(&mut self) -> Result<()> {
        // Staged pages first: they are written even if the write buffer cannot be (a full
        // area in refuse mode).
        self.write_staged()?;
        self.write_data_page()?;
        self.write_staged()?;
        if self.var_used > 0 {
            self.write_var_page()?;
        }
        self.sync(AreaKind::Data)
    }

    /// Flushes and gives the storage back.
    pub fn close(mut self) -> Result<S> {
        self.flush()?;
        Ok(self.store)
    }

    /// Gives the storage back without flushing (what a power cut would leave, plus the
    /// buffers' contents lost).
    pub fn into_storage(self) -> S {
        self.store
    }

    /// The storage.
    pub fn storage(&mut self) -> &mut S {
        &mut self.store
    }

    /// The configuration.
    pub fn config(&self) -> &Config<'a> {
        &self.cfg
    }

    /// Counters since open (or the last [`reset_stats`](Self::reset_stats)).
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Sets the counters back to zero.
    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
    }

    /// Records per data page.
    pub fn records_per_page(&self) -> usize {
        self.lay.per_page
    }

    /// Records in the write buffer (not yet in a data page).
    pub fn buffered(&self) -> usize {
        self.wcount
    }

    /// Records not yet written to the storage: the write buffer's and those of sealed pages
    /// waiting for a batched write ([`Config::write_pages`]).
    pub fn pending(&self) -> usize {
        self.wcount + self.staged_records
    }

    /// Live data pages (the oldest to the newest, dead slots included).
    pub fn data_pages(&self) -> u64 {
        self.data.live()
    }

    /// Ids of the oldest and newest live data pages.
    pub fn page_range(&self) -> Option<(u32, u32)> {
        match self.data.newest {
            Some(n) if n >= self.data.oldest => Some((self.data.oldest, n)),
            _ => None,
        }
    }

    /// The last key put, if any.
    pub fn last_key(&self) -> Option<u64> {
        self.last_key
    }

    /// Spline points in use.
    pub fn spline_points(&self) -> usize {
        self.spline.points()
    }

    /// Spline points dropped because its memory was full.
    pub fn spline_dropped(&self) -> u64 {
        self.spline.dropped
    }

    /// RAM in use: this state struct, the page buffers and the spline points held.
    pub fn ram_used(&self) -> usize {
        size_of::<Self>() + self.cfg.buffer_bytes() + self.spline.bytes_used()
    }

    // ----- device access -------------------------------------------------------------------

    pub(crate) fn ring(&self, area: AreaKind) -> &Ring {
        match area {
            AreaKind::Data => &self.data,
            AreaKind::Index => &self.index,
            AreaKind::Var => &self.var,
        }
    }

    pub(crate) fn ring_mut(&mut self, area: AreaKind) -> &mut Ring {
        match area {
            AreaKind::Data => &mut self.data,
            AreaKind::Index => &mut self.index,
            AreaKind::Var => &mut self.var,
        }
    }

    pub(crate) fn sync(&mut self, area: AreaKind) -> Result<()> {
        self.stats.syncs += 1;
        self.store.sync().map_err(dev(area, None, 0))
    }

    /// Syncs after a page write: always on flash, on a block device after every page if so
    /// configured and at every erase-unit boundary.
    pub(crate) fn sync_after_write(&mut self, area: AreaKind, ends_unit: bool) -> Result<()> {
        if !self.block || self.cfg.sync_every_page || ends_unit {
            self.sync(area)?;
        }
        Ok(())
    }

    /// Makes sure the write point of `area` can be written: erases its unit when the write
    /// point enters it (moving the oldest live page in overwrite mode), or refuses when full.
    pub(crate) fn enter(&mut self, area: AreaKind) -> Result<()> {
        let ring = *self.ring(area);
        let Some((u, oldest)) = ring.plan_entry()? else {
            return Ok(());
        };
        // The unit's old pages are gone from here on.
        self.ring_mut(area).oldest = oldest;
        if area == AreaKind::Data {
            self.spline.expire(oldest);
            // Slots of the unit are about to be rewritten.
            self.drop_read_cache();
        }
        let addr = ring.unit_addr(u);
        self.store
            .erase(addr, ring.unit_bytes())
            .map_err(dev(area, None, addr))?;
        self.stats.erases += 1;
        if !self.block {
            self.sync(area)?;
        }
        self.ring_mut(area).ready = true;
        Ok(())
    }

    /// After a page filled its unit: erase the next unit now (ahead of the write point). A
    /// full area in refuse mode is not an error yet; the next write reports it.
    pub(crate) fn erase_ahead(&mut self, area: AreaKind) -> Result<()> {
        match self.enter(area) {
            Err(Error::Full { .. }) => Ok(()),
            r => r,
        }
    }

    /// Forgets what the read buffer holds (the current page and the read-ahead window): for
    /// code about to use it as scratch space, and after writes to the data area.
    #[inline]
    pub(crate) fn drop_read_cache(&mut self) {
        self.rcache = None;
        self.ahead = None;
        self.roff = 0;
    }

    /// Page slots of the read buffer (1 without read-ahead buffers).
    #[inline]
    pub(crate) fn read_slots(&self) -> u32 {
        (self.rbuf.len() / self.lay.page.max(1)).max(1) as u32
    }

    /// The data page `load_page` (or `load_header`, its header part) last loaded.
    #[inline]
    pub(crate) fn rpage(&self) -> &[u8] {
        let ps = self.lay.page;
        self.rbuf.get(self.roff..self.roff + ps).unwrap_or(&[])
    }

    /// Where data page `id` is in the read-ahead window, if it is there.
    #[inline]
    fn in_window(&self, id: u32) -> Option<usize> {
        match self.ahead {
            Some((first, n)) if id >= first && id - first < n => {
                Some((id - first) as usize * self.lay.page)
            }
            _ => None,
        }
    }

    /// Reads data page `id` whole into the read buffer and checks it. `Ok(Err(reason))`: the
    /// slot does not hold a valid data page with that id.
    pub(crate) fn load_page(
        &mut self,
        id: u32,
    ) -> Result<core::result::Result<Header, &'static str>> {
        self.load_page_ahead(id, id)
    }

    /// [`load_page`](Self::load_page) for a reader walking pages in order up to page
    /// `upto`: when `id` is not in the read-ahead window, pages `id ..= upto` (as many as the
    /// read buffer holds, not past the newest page nor the end of the area's slots) are read
    /// in one device call and kept as the window. Each page is checked (both checksums)
    /// once, when it becomes the current page.
    pub(crate) fn load_page_ahead(
        &mut self,
        id: u32,
        upto: u32,
    ) -> Result<core::result::Result<Header, &'static str>> {
        if let Some(h) = self.rcache
            && h.id == id
        {
            return Ok(Ok(h));
        }
        self.rcache = None;
        let ps = self.lay.page;
        let off = match (self.in_window(id), self.in_staging(id)) {
            (Some(off), _) => off,
            (None, Some(at)) => self.load_staged(at),
            (None, None) => {
                let mut n = 1u32;
                let last = match self.newest_stored() {
                    Some(newest) => upto.min(newest),
                    None => id,
                };
                if last > id {
                    let to_wrap = self.data.slots - id % self.data.slots;
                    n = (last - id + 1).min(self.read_slots()).min(to_wrap);
                }
                self.ahead = None;
                let addr = self.data.addr(id);
                let len = n as usize * ps;
                self.store.read(addr, &mut self.rbuf[..len]).map_err(dev(
                    AreaKind::Data,
                    Some(id),
                    addr,
                ))?;
                self.stats.page_reads += u64::from(n);
                self.stats.read_calls += 1;
                if n > 1 {
                    self.ahead = Some((id, n));
                }
                0
            }
        };
        self.roff = off;
        Ok(match self.lay.verify(&self.rbuf[off..off + ps]) {
            Ok(h) if h.kind == Kind::Data && h.id == id => {
                self.rcache = Some(h);
                Ok(h)
            }
            Ok(_) => Err("the slot holds another page"),
            Err(why) => Err(why),
        })
    }

    /// Reads only the header of data page `id` into the read buffer (none is read when the
    /// page is in the read-ahead window).
    pub(crate) fn load_header(
        &mut self,
        id: u32,
    ) -> Result<core::result::Result<Header, &'static str>> {
        if let Some(h) = self.rcache
            && h.id == id
        {
            return Ok(Ok(h));
        }
        self.rcache = None;
        let n = self.lay.probe;
        let off = match (self.in_window(id), self.in_staging(id)) {
            (Some(off), _) => off,
            (None, Some(at)) => self.load_staged(at),
            (None, None) => {
                self.ahead = None;
                let addr = self.data.addr(id);
                self.store.read(addr, &mut self.rbuf[..n]).map_err(dev(
                    AreaKind::Data,
                    Some(id),
                    addr,
                ))?;
                self.stats.header_reads += 1;
                0
            }
        };
        self.roff = off;
        Ok(match self.lay.header(&self.rbuf[off..off + n]) {
            Ok(h) if h.kind == Kind::Data && h.id == id => Ok(h),
            Ok(_) => Err("the slot holds another page"),
            Err(why) => Err(why),
        })
    }

    /// The first valid data page at or after `id` (up to the newest), loaded whole in the
    /// read buffer. Invalid pages passed over must be dead slots — covered by the gap the
    /// next valid page records — or this is a [`Error::Corrupt`].
    pub(crate) fn resolve_forward(&mut self, id: u32) -> Result<Option<(u32, Header)>> {
        self.resolve_forward_ahead(id, id)
    }

    /// [`resolve_forward`](Self::resolve_forward) reading ahead up to page `upto` (see
    /// [`load_page_ahead`](Self::load_page_ahead)).
    pub(crate) fn resolve_forward_ahead(
        &mut self,
        id: u32,
        upto: u32,
    ) -> Result<Option<(u32, Header)>> {
        let Some(newest) = self.data.newest else {
            return Ok(None);
        };
        let mut first_bad: Option<(u32, &'static str)> = None;
        let mut v = id;
        while v <= newest {
            match self.load_page_ahead(v, upto.max(v))? {
                Ok(h) => {
                    if let Some((bad, why)) = first_bad
                        && u64::from(v - bad) > u64::from(h.gap)
                    {
                        return Err(self.corrupt(bad, why));
                    }
                    return Ok(Some((v, h)));
                }
                Err(why) => {
                    if first_bad.is_none() {
                        first_bad = Some((v, why));
                    }
                }
            }
            v += 1;
        }
        match first_bad {
            Some((bad, why)) => Err(self.corrupt(bad, why)),
            None => Ok(None),
        }
    }

    pub(crate) fn corrupt(&self, id: u32, reason: &'static str) -> Error {
        Error::Corrupt {
            area: AreaKind::Data,
            page: id,
            addr: self.data.addr(id),
            reason,
        }
    }

    // ----- writing -------------------------------------------------------------------------

    /// Appends a record. Keys must ascend (strictly, unless `equal_keys`); `data` must be the
    /// configured data size. The record is durable once its page is written (or at once,
    /// with record-level consistency).
    pub fn put(&mut self, key: u64, data: &[u8]) -> Result<()> {
        self.put_with(key, data, None)
    }

    /// Appends a record whose variable-size value `var` goes to the variable-data area.
    pub fn put_var(&mut self, key: u64, data: &[u8], var: &[u8]) -> Result<()> {
        self.put_with(key, data, Some(var))
    }

    fn put_with(&mut self, key: u64, data: &[u8], var: Option<&[u8]>) -> Result<()> {
        let lay = self.lay;
        if data.len() != lay.ds {
            return Err(Error::DataSize {
                expected: lay.ds,
                given: data.len(),
            });
        }
        if lay.ks == 4 && key > u64::from(u32::MAX) {
            return Err(Error::KeyTooLarge {
                key,
                key_size: lay.ks,
            });
        }
        if let Some(last) = self.last_key
            && (key < last || (key == last && !self.cfg.equal_keys))
        {
            return Err(Error::KeyNotAscending { key, last });
        }
        if var.is_some() && !self.cfg.has_var() {
            return Err(Error::NoVarArea);
        }
        if self.wcount >= lay.per_page {
            // A full buffer a refusing area left behind.
            self.write_data_page()?;
        }
        let rlc = self.cfg.record_level_consistency;
        if rlc && !self.data.ready && !self.data.may_enter(self.data.next / self.data.unit) {
            return Err(Error::Full {
                area: AreaKind::Data,
            });
        }
        let vref = match var {
            Some(v) => Some(self.var_append(v)?),
            None => None,
        };
        let i = self.wcount;
        lay.set_record(self.wbuf, i, key, data, vref);
        if i == 0 {
            lay.set_min_key(self.wbuf, key);
        }
        lay.set_max_key(self.wbuf, key);
        if let Some(b) = self.cfg.data_index {
            let o = lay.bitmap_off();
            b.add(data, &mut self.wbuf[o..o + lay.bm]);
        }
        if lay.minmax {
            let (mo, xo) = (lay.dmin_off(), lay.dmax_off());
            let v = match self.int_order {
                Some((o, ty)) => read_int(data, o, ty),
                None => None,
            };
            if i == 0 {
                self.wbuf[mo..mo + lay.ds].copy_from_slice(data);
                self.wbuf[xo..xo + lay.ds].copy_from_slice(data);
                self.wmm = v.map(|v| (v, v));
            } else if let (Some(v), Some((lo, hi))) = (v, self.wmm) {
                // The integer order, against the page's min/max kept decoded.
                if v < lo {
                    self.wbuf[mo..mo + lay.ds].copy_from_slice(data);
                    self.wmm = Some((v, hi));
                } else if v > hi {
                    self.wbuf[xo..xo + lay.ds].copy_from_slice(data);
                    self.wmm = Some((lo, v));
                }
            } else if self.data_cmp(data, mo) == Ordering::Less {
                // Below the page's smallest value, so not above its largest.
                self.wbuf[mo..mo + lay.ds].copy_from_slice(data);
            } else if self.data_cmp(data, xo) == Ordering::Greater {
                self.wbuf[xo..xo + lay.ds].copy_from_slice(data);
            }
        }
        self.wcount += 1;
        self.last_key = Some(key);
        self.stats.records += 1;
        if vref.is_some() {
            self.var_pinned = true;
        }
        if self.wcount == lay.per_page {
            match self.write_data_page() {
                Ok(()) => {}
                Err(Error::Full { .. }) if !rlc => {}
                Err(Error::Full { .. }) => self.write_temp()?,
                Err(e) => return Err(e),
            }
        } else if rlc {
            self.write_temp()?;
        }
        Ok(())
    }

    /// Compares `data` with the data value at byte `at` of the write buffer, in the data
    /// order.
    #[inline]
    fn data_cmp(&self, data: &[u8], at: usize) -> Ordering {
        let ds = self.lay.ds;
        let other = self.wbuf.get(at..at + ds).unwrap_or(&[]);
        if let Some((o, ty)) = self.int_order
            && let (Some(a), Some(b)) = (read_int(data, o, ty), read_int(other, o, ty))
        {
            return a.cmp(&b);
        }
        self.cfg.compare(data, other)
    }

    /// Writes the write buffer as the next data page (nothing if it is empty).
    pub(crate) fn write_data_page(&mut self) -> Result<()> {
        if self.wcount == 0 {
            return Ok(());
        }
        if self.var_pinned {
            // The values its records point to go first.
            self.write_var_page()?;
        }
        self.enter(AreaKind::Data)?;
        let lay = self.lay;
        let id = self.data.next;
        let gap = self.data.gap;
        let h = Header {
            kind: Kind::Data,
            id,
            count: self.wcount as u16,
            gap,
            aux: lay.tag,
        };
        lay.seal(self.wbuf, &h);
        let ends_unit = (id + 1).is_multiple_of(self.data.unit);
        // The outcome of a batched write: the page is staged whatever it is, so the
        // bookkeeping below is done before it is reported.
        let mut batch = Ok(());
        if self.sbuf.is_empty() {
            let addr = self.data.addr(id);
            self.store.write(addr, &self.wbuf[..lay.page]).map_err(dev(
                AreaKind::Data,
                Some(id),
                addr,
            ))?;
            self.stats.page_writes += 1;
            self.stats.write_calls += 1;
            self.sync_after_write(AreaKind::Data, ends_unit)?;
        } else {
            // Batched: the sealed page joins the staged run (ids, and so slots, consecutive
            // within one erase unit), written when the run is full or the unit ends.
            let ps = lay.page;
            if self.staged > 0
                && (self.staged * ps >= self.sbuf.len()
                    || self.data.addr(id)
                        != self.data.addr(self.staged_first) + (self.staged * ps) as u64)
            {
                // A batch whose write failed before: retried first (it never grows past
                // the buffer nor stops being one run of slots).
                self.write_staged()?;
            }
            if self.staged == 0 {
                self.staged_first = id;
            }
            let o = self.staged * ps;
            self.sbuf[o..o + ps].copy_from_slice(&self.wbuf[..ps]);
            self.staged += 1;
            self.staged_records += self.wcount;
            if self.staged * ps >= self.sbuf.len() || ends_unit {
                batch = self.write_staged();
            }
        }
        let (min, max) = (lay.min_key(self.wbuf), lay.max_key(self.wbuf));
        let mut bm = [0u8; MAX_BITMAP];
        bm[..lay.bm].copy_from_slice(lay.bitmap(self.wbuf));
        self.data.written(id);
        self.newest_max = max;
        self.spline.add(min, id);
        self.wcount = 0;
        self.wmm = None;
        self.wbuf.fill(0);
        if self.cfg.has_index() {
            for dead in 0..gap {
                self.index_add(
                    id - u32::from(gap) + u32::from(dead),
                    &[0u8; MAX_BITMAP][..lay.bm],
                )?;
            }
            self.index_add(id, &bm[..lay.bm])?;
        }
        batch?;
        if ends_unit {
            self.erase_ahead(AreaKind::Data)?;
        }
        Ok(())
    }

    /// Writes the staged pages (batched writes) in one device call.
    pub(crate) fn write_staged(&mut self) -> Result<()> {
        if self.staged == 0 {
            return Ok(());
        }
        let ps = self.lay.page;
        let (first, n) = (self.staged_first, self.staged);
        let addr = self.data.addr(first);
        self.store.write(addr, &self.sbuf[..n * ps]).map_err(dev(
            AreaKind::Data,
            Some(first),
            addr,
        ))?;
        self.stats.page_writes += n as u64;
        self.stats.write_calls += 1;
        self.staged = 0;
        self.staged_records = 0;
        let last = first + n as u32 - 1;
        self.sync_after_write(AreaKind::Data, (last + 1).is_multiple_of(self.data.unit))
    }

    /// Where staged page `id` is in the staging buffer, if it is there.
    #[inline]
    fn in_staging(&self, id: u32) -> Option<usize> {
        (self.staged > 0
            && id >= self.staged_first
            && ((id - self.staged_first) as usize) < self.staged)
            .then(|| (id - self.staged_first) as usize * self.lay.page)
    }

    /// The newest data page on the storage (staged pages are not yet).
    #[inline]
    fn newest_stored(&self) -> Option<u32> {
        if self.staged > 0 {
            self.staged_first.checked_sub(1)
        } else {
            self.data.newest
        }
    }

    /// Copies staged page `id` into the read buffer's first slot; its offset there.
    fn load_staged(&mut self, at: usize) -> usize {
        let ps = self.lay.page;
        self.ahead = None;
        self.rbuf[..ps].copy_from_slice(&self.sbuf[at..at + ps]);
        0
    }

    // ----- reading -------------------------------------------------------------------------

    /// The first live data page whose largest key is at least `key` (the only page that can
    /// hold `key`'s first record), loaded whole in the read buffer; `None` when every page's
    /// keys are smaller. The spline's prediction is read first, then its neighbour, then a
    /// binary search inside the spline's window, widening to the whole live range only if
    /// the window proves wrong.
    pub(crate) fn lower_page(&mut self, key: u64) -> Result<Option<u32>> {
        let Some((lo_all, hi_all)) = self.page_range() else {
            return Ok(None);
        };
        let (mut lo, mut hi) = (lo_all, hi_all);
        let (mut probe, wlo, whi) = match self.spline.predict(key) {
            Some(p) => (p.page.clamp(lo, hi), p.lo.clamp(lo, hi), p.hi.clamp(lo, hi)),
            None => {
                let h = self.spline.first_page().map_or(hi, |f| f.clamp(lo, hi));
                (lo + (h - lo) / 2, lo, h)
            }
        };
        let mut answer = None;
        let mut step = 0;
        let strict = !self.cfg.equal_keys;
        while lo <= hi {
            let id = probe.clamp(lo, hi);
            let Some((v, _)) = self.resolve_forward(id)? else {
                break;
            };
            let moved_left;
            if v > hi {
                // No valid page in [id, hi].
                match id.checked_sub(1) {
                    Some(h) => hi = h,
                    None => break,
                }
                moved_left = true;
            } else {
                let page = self.rpage();
                let (pmin, pmax) = (self.lay.min_key(page), self.lay.max_key(page));
                if pmax >= key {
                    answer = Some(v);
                    if pmin < key || (strict && pmin == key) {
                        break;
                    }
                    match v.checked_sub(1) {
                        Some(h) => hi = h,
                        None => break,
                    }
                    moved_left = true;
                } else {
                    lo = v + 1;
                    moved_left = false;
                }
            }
            if lo > hi {
                break;
            }
            step += 1;
            probe = if step == 1 {
                // The prediction is most often off by one: try the neighbour.
                if moved_left { hi } else { lo }
            } else {
                let (a, b) = (lo.max(wlo), hi.min(whi));
                if a <= b {
                    a + (b - a) / 2
                } else {
                    lo + (hi - lo) / 2
                }
            };
        }
        Ok(answer)
    }

    /// Finds the first record with `key`.
    pub(crate) fn find(&mut self, key: u64) -> Result<Option<Loc>> {
        self.stats.lookups += 1;
        let lay = self.lay;
        if self.data.newest.is_some() && !self.data.is_empty() && key <= self.newest_max {
            if let Some(id) = self.lower_page(key)? {
                let h = match self.load_page(id)? {
                    Ok(h) => h,
                    Err(why) => return Err(self.corrupt(id, why)),
                };
                let n = usize::from(h.count);
                let page = self.rpage();
                let i = lay.lower_bound(page, n, key);
                if i < n && lay.key(page, i) == key {
                    return Ok(Some(Loc::Page(i)));
                }
            }
            if key < self.newest_max {
                return Ok(None);
            }
        }
        if self.wcount > 0 && key >= lay.min_key(self.wbuf) {
            let i = lay.lower_bound(self.wbuf, self.wcount, key);
            if i < self.wcount && lay.key(self.wbuf, i) == key {
                return Ok(Some(Loc::Buffer(i)));
            }
        }
        Ok(None)
    }

    pub(crate) fn loc_data(&self, loc: Loc) -> &[u8] {
        match loc {
            Loc::Page(i) => self.lay.data(self.rpage(), i),
            Loc::Buffer(i) => self.lay.data(self.wbuf, i),
        }
    }

    pub(crate) fn loc_var(&self, loc: Loc) -> Option<VarRef> {
        match loc {
            Loc::Page(i) => self.lay.var_ref(self.rpage(), i),
            Loc::Buffer(i) => self.lay.var_ref(self.wbuf, i),
        }
    }

    /// Looks `key` up and copies its data into `out` (the data size; a shorter `out` gets the
    /// first bytes). `Ok(false)`: no record has that key.
    pub fn get(&mut self, key: u64, out: &mut [u8]) -> Result<bool> {
        match self.find(key)? {
            Some(loc) => {
                let d = self.loc_data(loc);
                let n = d.len().min(out.len());
                out[..n].copy_from_slice(&d[..n]);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
