//! I/O accounting: what an engine asked of its device, overall and per named region.

use crate::block::BlockDevice;
use crate::error::{DeviceError, Result};
use crate::flash::{FlashDevice, FlashGeometry};

/// How many regions one [`Accounted`] device can track.
pub const MAX_REGIONS: usize = 16;

/// Counters of device operations. Bytes are the bytes the caller passed; an operation that
/// failed is not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Read operations.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write operations.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Syncs; for a region, the syncs that made some of its writes durable.
    pub syncs: u64,
    /// Bytes made durable by syncs (written or erased, then covered by a sync).
    pub synced_bytes: u64,
    /// Erase operations.
    pub erases: u64,
    /// Bytes erased.
    pub erase_bytes: u64,
}

impl IoStats {
    /// The counts accumulated since `earlier` was taken.
    pub fn since(&self, earlier: &IoStats) -> IoStats {
        IoStats {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            syncs: self.syncs.saturating_sub(earlier.syncs),
            synced_bytes: self.synced_bytes.saturating_sub(earlier.synced_bytes),
            erases: self.erases.saturating_sub(earlier.erases),
            erase_bytes: self.erase_bytes.saturating_sub(earlier.erase_bytes),
        }
    }
}

/// Names a region added with [`Accounted::add_region`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionId(u8);

#[derive(Debug, Clone, Copy)]
struct Region {
    name: &'static str,
    start: u64,
    end: u64,
    stats: IoStats,
    /// Bytes written to the region since the last sync.
    unsynced: u64,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Read,
    Write,
    Erase,
}

/// A device wrapper that counts every operation, overall and per region (a zone, a log —
/// any byte range the caller names). Regions may overlap; each counts the part of an access
/// that falls inside it. The cost per operation is a scan of at most [`MAX_REGIONS`] ranges,
/// cheap enough to leave on.
///
/// Writes and syncs made through a [`writer`](BlockDevice::writer) handle of the device
/// (with `std`) are counted too, in the order they happened relative to each other, once
/// the device is next used or its counts are read.
#[derive(Debug)]
pub struct Accounted<D> {
    dev: D,
    counts: Counts,
    /// Operations of the writer handles given out, not yet counted.
    #[cfg(feature = "std")]
    side: Option<std::sync::Arc<std::sync::Mutex<std::vec::Vec<SideOp>>>>,
}

/// What an [`Accounted`] device has counted.
#[derive(Debug, Clone, Copy)]
struct Counts {
    total: IoStats,
    unsynced: u64,
    regions: [Option<Region>; MAX_REGIONS],
}

/// An operation made through a writer handle.
#[cfg(feature = "std")]
#[derive(Debug, Clone, Copy)]
enum SideOp {
    Write(u64, u64),
    Sync,
}

impl<D> Accounted<D> {
    /// Starts counting the operations on `dev`.
    pub fn new(dev: D) -> Self {
        Accounted {
            dev,
            counts: Counts {
                total: IoStats::default(),
                unsynced: 0,
                regions: [None; MAX_REGIONS],
            },
            #[cfg(feature = "std")]
            side: None,
        }
    }

    /// The counts with the writer handles' operations not yet folded in.
    fn view(&self) -> Counts {
        #[allow(unused_mut)]
        let mut c = self.counts;
        #[cfg(feature = "std")]
        if let Some(side) = &self.side {
            for op in side.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                c.side(*op);
            }
        }
        c
    }

    /// Folds the writer handles' operations into the counts.
    fn drain(&mut self) {
        #[cfg(feature = "std")]
        if let Some(side) = &self.side {
            let ops = core::mem::take(&mut *side.lock().unwrap_or_else(|p| p.into_inner()));
            for op in ops {
                self.counts.side(op);
            }
        }
    }

    /// Tracks the bytes `[start, start + len)` under `name` from now on.
    pub fn add_region(&mut self, name: &'static str, start: u64, len: u64) -> Result<RegionId> {
        self.drain();
        let slot = self.counts.regions.iter().position(Option::is_none).ok_or(
            DeviceError::BadGeometry {
                reason: "too many accounting regions",
            },
        )?;
        self.counts.regions[slot] = Some(Region {
            name,
            start,
            end: start.saturating_add(len),
            stats: IoStats::default(),
            unsynced: 0,
        });
        Ok(RegionId(slot as u8))
    }

    /// Stops tracking a region.
    pub fn remove_region(&mut self, id: RegionId) {
        self.drain();
        if let Some(slot) = self.counts.regions.get_mut(usize::from(id.0)) {
            *slot = None;
        }
    }

    /// Counts over the whole device.
    pub fn stats(&self) -> IoStats {
        self.view().total
    }

    /// The name and counts of one region.
    pub fn region(&self, id: RegionId) -> Option<(&'static str, IoStats)> {
        self.view()
            .regions
            .get(usize::from(id.0))
            .copied()
            .flatten()
            .map(|r| (r.name, r.stats))
    }

    /// The name and counts of every region.
    pub fn regions(&self) -> impl Iterator<Item = (&'static str, IoStats)> + '_ {
        self.view()
            .regions
            .into_iter()
            .flatten()
            .map(|r| (r.name, r.stats))
    }

    /// Sets every counter to zero (regions stay).
    pub fn reset(&mut self) {
        self.drain();
        self.counts.total = IoStats::default();
        for r in self.counts.regions.iter_mut().flatten() {
            r.stats = IoStats::default();
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.dev
    }

    /// The wrapped device, mutable (operations made through it are not counted).
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    /// Stops counting and returns the device.
    pub fn into_inner(self) -> D {
        self.dev
    }

    /// Counts an operation that succeeded and passes its result on.
    fn counted(&mut self, done: Result<()>, kind: Kind, offset: u64, len: u64) -> Result<()> {
        done?;
        self.counts.count(kind, offset, len);
        Ok(())
    }

    /// Counts a sync that succeeded and passes its result on.
    fn counted_sync(&mut self, done: Result<()>) -> Result<()> {
        done?;
        self.counts.count_sync();
        Ok(())
    }
}

impl Counts {
    fn count(&mut self, kind: Kind, offset: u64, len: u64) {
        bump(&mut self.total, kind, len);
        // An erase changes the medium too; a sync makes it durable like a write.
        if let Kind::Write | Kind::Erase = kind {
            self.unsynced += len;
        }
        let end = offset.saturating_add(len);
        for r in self.regions.iter_mut().flatten() {
            let lo = offset.max(r.start);
            let hi = end.min(r.end);
            // A zero-length access counts in the region it points into.
            if lo < hi || (len == 0 && offset >= r.start && offset < r.end) {
                let part = hi.saturating_sub(lo);
                bump(&mut r.stats, kind, part);
                if let Kind::Write | Kind::Erase = kind {
                    r.unsynced += part;
                }
            }
        }
    }

    fn count_sync(&mut self) {
        self.total.syncs += 1;
        self.total.synced_bytes += core::mem::take(&mut self.unsynced);
        for r in self.regions.iter_mut().flatten() {
            if r.unsynced > 0 {
                r.stats.syncs += 1;
                r.stats.synced_bytes += core::mem::take(&mut r.unsynced);
            }
        }
    }

    #[cfg(feature = "std")]
    fn side(&mut self, op: SideOp) {
        match op {
            SideOp::Write(offset, len) => self.count(Kind::Write, offset, len),
            SideOp::Sync => self.count_sync(),
        }
    }
}

fn bump(s: &mut IoStats, kind: Kind, len: u64) {
    match kind {
        Kind::Read => {
            s.reads += 1;
            s.read_bytes += len;
        }
        Kind::Write => {
            s.writes += 1;
            s.write_bytes += len;
        }
        Kind::Erase => {
            s.erases += 1;
            s.erase_bytes += len;
        }
    }
}

impl<D: BlockDevice> BlockDevice for Accounted<D> {
    fn sector_size(&self) -> u32 {
        self.dev.sector_size()
    }
    fn capacity(&self) -> u64 {
        self.dev.capacity()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.drain();
        let done = self.dev.read(offset, buf);
        self.counted(done, Kind::Read, offset, buf.len() as u64)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.drain();
        let done = self.dev.write(offset, data);
        self.counted(done, Kind::Write, offset, data.len() as u64)
    }
    fn sync(&mut self) -> Result<()> {
        self.drain();
        let done = self.dev.sync();
        self.counted_sync(done)
    }
    fn resize(&mut self, new_len: u64) -> Result<()> {
        self.dev.resize(new_len)
    }
    fn prepare(&mut self, offset: u64, len: u64) {
        self.dev.prepare(offset, len)
    }
    fn prepare_appends(&mut self, offset: u64, len: u64) {
        self.dev.prepare_appends(offset, len)
    }
    fn reads_from_memory(&self) -> bool {
        self.dev.reads_from_memory()
    }
    #[cfg(feature = "std")]
    fn writer(&mut self) -> Option<alloc::boxed::Box<dyn crate::block::DeviceWriter>> {
        let inner = self.dev.writer()?;
        let side = self.side.get_or_insert_with(Default::default).clone();
        Some(alloc::boxed::Box::new(CountedWriter { inner, side }))
    }
}

/// A writer handle of an [`Accounted`] device: logs what succeeded for the device to count.
#[cfg(feature = "std")]
struct CountedWriter {
    inner: alloc::boxed::Box<dyn crate::block::DeviceWriter>,
    side: std::sync::Arc<std::sync::Mutex<std::vec::Vec<SideOp>>>,
}

#[cfg(feature = "std")]
impl CountedWriter {
    fn log(&self, op: SideOp) {
        self.side.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }
}

#[cfg(feature = "std")]
impl crate::block::DeviceWriter for CountedWriter {
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)?;
        self.log(SideOp::Write(offset, data.len() as u64));
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()?;
        self.log(SideOp::Sync);
        Ok(())
    }
}

impl<F: FlashDevice> FlashDevice for Accounted<F> {
    fn geometry(&self) -> FlashGeometry {
        self.dev.geometry()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let done = self.dev.read(offset, buf);
        self.counted(done, Kind::Read, offset, buf.len() as u64)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let done = self.dev.write(offset, data);
        self.counted(done, Kind::Write, offset, data.len() as u64)
    }
    fn erase(&mut self, offset: u64, len: u64) -> Result<()> {
        let done = self.dev.erase(offset, len);
        self.counted(done, Kind::Erase, offset, len)
    }
    fn sync(&mut self) -> Result<()> {
        let done = self.dev.sync();
        self.counted_sync(done)
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use crate::MemBlock;

    #[test]
    fn counts_overall_and_per_region() {
        let mut dev = Accounted::new(MemBlock::new(8192));
        let meta = dev.add_region("meta", 0, 1024).unwrap();
        let log = dev.add_region("log", 4096, 4096).unwrap();
        dev.write(512, &[1; 1024]).unwrap(); // 512 bytes in meta, none in log
        dev.write(4096, &[2; 100]).unwrap();
        let mut buf = [0; 10];
        dev.read(4100, &mut buf).unwrap();
        dev.sync().unwrap();
        dev.sync().unwrap();
        let t = dev.stats();
        assert_eq!(
            (t.writes, t.write_bytes, t.reads, t.read_bytes),
            (2, 1124, 1, 10)
        );
        assert_eq!((t.syncs, t.synced_bytes), (2, 1124));
        let (name, m) = dev.region(meta).unwrap();
        assert_eq!(name, "meta");
        assert_eq!(
            (m.writes, m.write_bytes, m.syncs, m.synced_bytes),
            (1, 512, 1, 512)
        );
        let (_, l) = dev.region(log).unwrap();
        assert_eq!(
            (l.writes, l.write_bytes, l.reads, l.read_bytes),
            (1, 100, 1, 10)
        );
        assert_eq!(l.syncs, 1);
        let before = dev.stats();
        dev.write(0, &[0; 1]).unwrap();
        assert_eq!(dev.stats().since(&before).writes, 1);
        dev.reset();
        assert_eq!(dev.stats(), IoStats::default());
    }

    #[test]
    fn failed_operations_are_not_counted_and_regions_are_bounded() {
        let mut dev = Accounted::new(MemBlock::new(512));
        assert!(dev.write(510, &[0; 4]).is_err());
        assert_eq!(dev.stats().writes, 0);
        for _ in 0..MAX_REGIONS {
            dev.add_region("r", 0, 1).unwrap();
        }
        assert!(dev.add_region("one too many", 0, 1).is_err());
    }
}
