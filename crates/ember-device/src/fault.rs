//! Fault injection: power cuts at a chosen operation, torn writes and erases, lost unsynced
//! writes — all decided by a seed, so that every failure replays exactly.
//!
//! Operations are numbered from 0 in the order they are issued; writes, syncs, erases and
//! resizes count, reads do not (a read changes nothing, so a cut during a read is the same as
//! a cut before the next counted operation). With [`FaultPlan::cut_at`]`(n, seed)` operation
//! `n` is interrupted: it may have partly happened, it returns [`DeviceError::PowerLost`], and
//! so does every operation after it. Taking the device out with `power_off` gives the bytes a
//! reopen would find; a device that was never cut loses power there and then.
//!
//! **Block devices** ([`FaultyBlock`]) have a volatile write cache unless the plan says
//! otherwise: each sector written since the last completed `sync` ends up holding one of the
//! images it had since then — its image at the last sync, or its image after any one of the
//! later writes to it (the cache wrote back part of its history, in order). The interrupted
//! write is the last entry of that history for the sectors it covers, so each of its sectors
//! lands or not, whole. A resize since the last sync may be undone too (the length and the
//! bytes a shrink cut off come back as they were at the sync). With `lose_unsynced` off the
//! device is write-through: everything before the cut is durable and only the interrupted
//! write's sectors may be missing.
//!
//! **Flash devices** ([`FaultyFlash`]) have no cache: a write or erase that returned is
//! durable. An interrupted write leaves a clean prefix of its bytes and some of the bits of
//! the byte after it ([`TearMode::Prefix`]) or any subset of the bits it was programming
//! ([`TearMode::Bits`]); an interrupted erase of
//! several units finishes the units before a random one, leaves that one unchanged, erased,
//! partly erased (some of its programmed bits back at the erase value) or holding garbage, and
//! the rest untouched. The torn state is produced with ordinary writes and erases on the inner
//! device, so any flash device can be wrapped. To model flash behind a volatile cache, put
//! [`FlashOnBlock`](crate::FlashOnBlock) over a [`FaultyBlock`].

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use crate::block::BlockDevice;
use crate::error::{DeviceError, Op, Result, check_bounds};
use crate::flash::{FlashDevice, FlashGeometry, WriteRule};
use crate::rng::{SplitMix64, mix};

/// How an interrupted flash write is torn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TearMode {
    /// The first bytes land, then some bits of the next byte, the rest do not.
    Prefix,
    /// Any subset of the bits the write was programming lands.
    Bits,
    /// The seed picks `Prefix` or `Bits` at each cut.
    Any,
}

/// When power fails and how the damage is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPlan {
    /// Index (from 0) of the counted operation that power fails during; `None` runs to the
    /// end (power is lost at `power_off`).
    pub cut_at: Option<u64>,
    /// Decides every random choice of the cut.
    pub seed: u64,
    /// Block devices: writes not covered by a completed `sync` may be lost (a volatile
    /// cache). Off: write-through.
    pub lose_unsynced: bool,
    /// Flash devices: how an interrupted write is torn.
    pub tear: TearMode,
}

impl FaultPlan {
    /// No cut until `power_off`; unsynced writes may be lost then.
    pub const fn run_to_end(seed: u64) -> Self {
        FaultPlan {
            cut_at: None,
            seed,
            lose_unsynced: true,
            tear: TearMode::Any,
        }
    }

    /// Power fails during operation `n`.
    pub const fn cut_at(n: u64, seed: u64) -> Self {
        FaultPlan {
            cut_at: Some(n),
            ..Self::run_to_end(seed)
        }
    }

    /// The same plan with a write-through block device.
    pub const fn write_through(mut self) -> Self {
        self.lose_unsynced = false;
        self
    }

    /// The same plan with the given flash tear mode.
    pub const fn tear(mut self, tear: TearMode) -> Self {
        self.tear = tear;
        self
    }
}

/// What an interrupted erase left in the unit it was erasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EraseTear {
    /// The unit kept its old contents.
    Unchanged,
    /// The unit was fully erased.
    Erased,
    /// Some programmed bits went back to the erase value, others did not.
    Partial,
    /// The unit holds random bytes.
    Garbage,
}

/// What the interrupted operation left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CutOutcome {
    /// No write or erase was interrupted (the cut hit a sync or resize, or came after the
    /// last operation).
    Clean,
    /// A block write: `landed` of its `of` sectors reached the medium.
    Sectors {
        /// Sectors of the write that landed.
        landed: u64,
        /// Sectors the write covered.
        of: u64,
    },
    /// A flash write: its first `bytes` of `of` bytes landed, and some bits of the next.
    Prefix {
        /// Bytes that landed whole.
        bytes: u64,
        /// Bytes the write carried.
        of: u64,
    },
    /// A flash write: `programmed` of the `of` bits it was changing changed.
    Bits {
        /// Bits that changed.
        programmed: u64,
        /// Bits the write would have changed.
        of: u64,
    },
    /// A flash erase: `erased_units` units finished, then one was left as `torn`.
    Erase {
        /// Units fully erased before the cut.
        erased_units: u64,
        /// The state of the unit being erased.
        torn: EraseTear,
    },
}

/// A record of a power cut: where it struck and what it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerCut {
    /// Index of the interrupted operation (the count of operations before it).
    pub index: u64,
    /// The interrupted operation, or `None` when power was lost after the last one.
    pub op: Option<Op>,
    /// The seed of the plan.
    pub seed: u64,
    /// What the interrupted operation left.
    pub outcome: CutOutcome,
    /// Sectors with unsynced writes at the cut (block devices).
    pub unsynced_sectors: u64,
    /// Of those, sectors that lost at least their latest write.
    pub lost_sectors: u64,
    /// Whether a resize since the last sync was undone (block devices).
    pub length_reverted: bool,
}

/// Shared bookkeeping of both fault devices.
#[derive(Debug)]
struct Fuse {
    plan: FaultPlan,
    ops: u64,
    cut: Option<PowerCut>,
    /// A running fingerprint after each counted operation (kind, offset, length, a sample of
    /// the data), so a harness can tell that a re-run issued the same operations.
    trace: Vec<u64>,
}

impl Fuse {
    fn new(plan: FaultPlan) -> Self {
        Fuse {
            plan,
            ops: 0,
            cut: None,
            trace: Vec::new(),
        }
    }

    /// Counts an operation: `Ok(true)` if power fails during it.
    fn tick(&mut self, op: Op, offset: u64, len: u64, data: &[u8]) -> Result<bool> {
        if self.cut.is_some() {
            return Err(DeviceError::PowerLost { op });
        }
        let mut h = self.trace.last().copied().unwrap_or(0x5EED);
        let mut mix_in = |x: u64| h = mix(h, x);
        mix_in(op as u64);
        mix_in(offset);
        mix_in(len);
        let (head, tail) = (data.len().min(32), data.len().saturating_sub(32));
        for chunk in data[..head]
            .chunks(8)
            .chain(data[tail.max(head)..].chunks(8))
        {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            mix_in(u64::from_le_bytes(w));
        }
        self.trace.push(h);
        let index = self.ops;
        self.ops += 1;
        Ok(self.plan.cut_at == Some(index))
    }

    fn refuse(&self, op: Op) -> Result<()> {
        if self.cut.is_some() {
            Err(DeviceError::PowerLost { op })
        } else {
            Ok(())
        }
    }

    /// The random source of the cut at operation `index`.
    fn rng(&self, index: u64) -> SplitMix64 {
        SplitMix64::new(mix(self.plan.seed, index))
    }

    fn record(
        &mut self,
        index: u64,
        op: Option<Op>,
        outcome: CutOutcome,
        unsynced: (u64, u64),
    ) -> PowerCut {
        let cut = PowerCut {
            index,
            op,
            seed: self.plan.seed,
            outcome,
            unsynced_sectors: unsynced.0,
            lost_sectors: unsynced.1,
            length_reverted: false,
        };
        self.cut = Some(cut);
        cut
    }
}

/// What the fault-injecting wrappers have in common: the harness in `ember-crashtest` drives
/// any of them through this trait.
pub trait PowerFail: Sized {
    /// The wrapped device, which holds what survives a cut.
    type Medium;

    /// Wraps `medium` under `plan`.
    fn wrap(medium: Self::Medium, plan: FaultPlan) -> Self;

    /// Operations counted so far.
    fn ops(&self) -> u64;

    /// The cut, once power has failed.
    fn power_cut(&self) -> Option<PowerCut>;

    /// A running fingerprint after each counted operation: two runs issued the same
    /// operations up to `n` exactly when their traces agree up to `n`.
    fn trace(&self) -> &[u64];

    /// Whether power has failed.
    fn is_cut(&self) -> bool {
        self.power_cut().is_some()
    }

    /// Cuts power now (if it has not failed yet) and returns the device holding exactly what
    /// survived, for a reopen.
    fn power_off(self) -> (Self::Medium, PowerCut);
}

impl<D: BlockDevice> PowerFail for FaultyBlock<D> {
    type Medium = D;

    fn wrap(medium: D, plan: FaultPlan) -> Self {
        Self::new(medium, plan)
    }

    fn ops(&self) -> u64 {
        self.fuse.ops
    }

    fn power_cut(&self) -> Option<PowerCut> {
        self.fuse.cut
    }

    fn trace(&self) -> &[u64] {
        &self.fuse.trace
    }

    fn power_off(mut self) -> (D, PowerCut) {
        let cut = match self.fuse.cut {
            Some(cut) => cut,
            None => self.crash(self.fuse.ops, None, Vec::new()),
        };
        (self.dev, cut)
    }
}

impl<F: FlashDevice> PowerFail for FaultyFlash<F> {
    type Medium = F;

    fn wrap(medium: F, plan: FaultPlan) -> Self {
        Self::new(medium, plan)
    }

    fn ops(&self) -> u64 {
        self.fuse.ops
    }

    fn power_cut(&self) -> Option<PowerCut> {
        self.fuse.cut
    }

    fn trace(&self) -> &[u64] {
        &self.fuse.trace
    }

    fn power_off(mut self) -> (F, PowerCut) {
        let cut = match self.fuse.cut {
            Some(cut) => cut,
            None => self
                .fuse
                .record(self.fuse.ops, None, CutOutcome::Clean, (0, 0)),
        };
        (self.dev, cut)
    }
}

/// A block device with a volatile write cache that loses power when the plan says (see the
/// module docs for exactly what survives).
#[derive(Debug)]
pub struct FaultyBlock<D: BlockDevice> {
    dev: D,
    fuse: Fuse,
    /// Sector index -> the sector's images since the last sync, oldest first. Only used with
    /// `lose_unsynced`; `dev` holds the synced state.
    pending: BTreeMap<u64, Vec<Box<[u8]>>>,
    /// The device length at the last sync, while a resize since then is not yet durable.
    synced_len: Option<u64>,
    /// Synced bytes `[from, synced_len)` that a shrink since the last sync cut off.
    cut_tail: Option<(u64, Vec<u8>)>,
}

impl<D: BlockDevice> FaultyBlock<D> {
    /// Wraps `dev`, which holds the durable state, under `plan`.
    pub fn new(dev: D, plan: FaultPlan) -> Self {
        FaultyBlock {
            dev,
            fuse: Fuse::new(plan),
            pending: BTreeMap::new(),
            synced_len: None,
            cut_tail: None,
        }
    }

    fn ss(&self) -> u64 {
        u64::from(self.dev.sector_size()).max(1)
    }

    /// The sectors `[offset, offset + len)` touches.
    fn sectors(&self, offset: u64, len: usize) -> core::ops::Range<u64> {
        let ss = self.ss();
        if len == 0 {
            return 0..0;
        }
        offset / ss..(offset + len as u64).div_ceil(ss)
    }

    /// The current image of sector `s`: the device's bytes with the latest pending image over
    /// them.
    fn image(&mut self, s: u64) -> Result<Box<[u8]>> {
        let ss = self.ss();
        let start = s * ss;
        let len = ss.min(self.dev.capacity().saturating_sub(start)) as usize;
        let mut img = vec![0u8; len].into_boxed_slice();
        self.dev.read(start, &mut img)?;
        if let Some(last) = self.pending.get(&s).and_then(|v| v.last()) {
            let n = last.len().min(len);
            img[..n].copy_from_slice(&last[..n]);
        }
        Ok(img)
    }

    /// The images of every sector `data` at `offset` touches, after the write.
    fn images_after(&mut self, offset: u64, data: &[u8]) -> Result<Vec<(u64, Box<[u8]>)>> {
        let ss = self.ss();
        let mut out = Vec::new();
        let end = offset + data.len() as u64;
        for s in self.sectors(offset, data.len()) {
            let start = s * ss;
            if start >= offset && start + ss <= end {
                let from = (start - offset) as usize;
                out.push((s, Box::from(&data[from..from + ss as usize])));
                continue;
            }
            let mut img = self.image(s)?;
            let lo = offset.max(start);
            let hi = end.min(start + img.len() as u64);
            img[(lo - start) as usize..(hi - start) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            out.push((s, img));
        }
        Ok(out)
    }

    /// Power fails during operation `index` (`op`), with the sector images of the
    /// interrupted write, if any. Writes what survives to the inner device.
    fn crash(&mut self, index: u64, op: Option<Op>, torn: Vec<(u64, Box<[u8]>)>) -> PowerCut {
        let mut rng = self.fuse.rng(index);
        let ss = self.ss();
        let torn_ids: Vec<u64> = torn.iter().map(|(s, _)| *s).collect();
        let (mut landed, mut unsynced, mut lost) = (0, 0, 0);
        let mut reverted = false;
        if self.fuse.plan.lose_unsynced {
            for (s, img) in torn {
                self.pending.entry(s).or_default().push(img);
            }
            for (&s, versions) in &self.pending {
                // The cache wrote back the first `k` images of this sector's history.
                let n = versions.len() as u64;
                let k = rng.below(n + 1);
                unsynced += 1;
                if k < n {
                    lost += 1;
                } else if torn_ids.binary_search(&s).is_ok() {
                    landed += 1;
                }
                if k > 0 {
                    // The inner device is the medium here; it has no power to lose.
                    let _ = self.dev.write(s * ss, &versions[k as usize - 1]);
                }
            }
            self.pending.clear();
            if let Some(len) = self.synced_len.take() {
                if len != self.dev.capacity() && rng.coin() {
                    // The resize since the last sync did not reach the medium.
                    reverted = true;
                    let _ = self.dev.resize(len);
                    if let Some((from, bytes)) = self.cut_tail.take() {
                        let _ = self.dev.write(from, &bytes);
                    }
                }
            }
        } else {
            for (s, img) in torn {
                if rng.coin() {
                    landed += 1;
                    let _ = self.dev.write(s * ss, &img);
                }
            }
        }
        let outcome = if torn_ids.is_empty() {
            CutOutcome::Clean
        } else {
            CutOutcome::Sectors {
                landed,
                of: torn_ids.len() as u64,
            }
        };
        let mut cut = self.fuse.record(index, op, outcome, (unsynced, lost));
        cut.length_reverted = reverted;
        self.fuse.cut = Some(cut);
        cut
    }

    /// Writes the latest image of every pending sector to the device, merging neighbours.
    fn flush_pending(&mut self) -> Result<()> {
        let pending = core::mem::take(&mut self.pending);
        if let Err(e) = self.write_latest(&pending) {
            // Nothing is lost: the images stay pending.
            self.pending = pending;
            return Err(e);
        }
        Ok(())
    }

    /// Before a resize to `new_len`: remembers the synced length and the synced bytes a
    /// shrink cuts off, so that a crash can undo the resize.
    fn remember_length(&mut self, new_len: u64) -> Result<()> {
        let cur = self.dev.capacity();
        let synced = *self.synced_len.get_or_insert(cur);
        // Bytes below `kept_from` are already saved (or were never cut).
        let kept_from = self
            .cut_tail
            .as_ref()
            .map_or(synced.min(cur), |(from, _)| *from);
        if new_len < kept_from {
            let n = usize::try_from(kept_from - new_len).map_err(|_| DeviceError::Unsupported {
                op: Op::Resize,
                reason: "the cut-off tail does not fit in memory",
            })?;
            let mut bytes = vec![0u8; n];
            self.dev.read(new_len, &mut bytes)?;
            if let Some((_, older)) = self.cut_tail.take() {
                bytes.extend_from_slice(&older);
            }
            self.cut_tail = Some((new_len, bytes));
        }
        Ok(())
    }

    /// Writes the latest image of each sector, merging runs of whole, consecutive sectors
    /// into one write (a short image — the device's last sector — ends a run).
    fn write_latest(&mut self, pending: &BTreeMap<u64, Vec<Box<[u8]>>>) -> Result<()> {
        let ss = self.ss();
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0;
        for (&s, versions) in pending {
            let Some(img) = versions.last() else { continue };
            let contiguous =
                run_start + (run.len() as u64) / ss == s && (run.len() as u64).is_multiple_of(ss);
            if !run.is_empty() && !contiguous {
                self.dev.write(run_start * ss, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = s;
            }
            run.extend_from_slice(img);
        }
        if !run.is_empty() {
            self.dev.write(run_start * ss, &run)?;
        }
        Ok(())
    }
}

impl<D: BlockDevice> BlockDevice for FaultyBlock<D> {
    fn sector_size(&self) -> u32 {
        self.dev.sector_size()
    }

    fn capacity(&self) -> u64 {
        self.dev.capacity()
    }

    fn reads_from_memory(&self) -> bool {
        self.dev.reads_from_memory()
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.fuse.refuse(Op::Read)?;
        self.dev.read(offset, buf)?;
        let ss = self.ss();
        let end = offset + buf.len() as u64;
        let range = self.sectors(offset, buf.len());
        for (&s, versions) in self.pending.range(range) {
            let Some(img) = versions.last() else { continue };
            let start = s * ss;
            let lo = offset.max(start);
            let hi = end.min(start + img.len() as u64);
            if lo < hi {
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&img[(lo - start) as usize..(hi - start) as usize]);
            }
        }
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let index = self.fuse.ops;
        let cut = self.fuse.tick(Op::Write, offset, data.len() as u64, data)?;
        if !cut && !self.fuse.plan.lose_unsynced {
            return self.dev.write(offset, data);
        }
        let images = check_bounds(Op::Write, offset, data.len() as u64, self.dev.capacity())
            .and_then(|()| self.images_after(offset, data));
        if cut {
            // A write that could not have happened tears nothing.
            self.crash(index, Some(Op::Write), images.unwrap_or_default());
            return Err(DeviceError::PowerLost { op: Op::Write });
        }
        for (s, img) in images? {
            self.pending.entry(s).or_default().push(img);
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let index = self.fuse.ops;
        if self.fuse.tick(Op::Sync, 0, 0, &[])? {
            self.crash(index, Some(Op::Sync), Vec::new());
            return Err(DeviceError::PowerLost { op: Op::Sync });
        }
        self.flush_pending()?;
        self.dev.sync()?;
        self.synced_len = None;
        self.cut_tail = None;
        Ok(())
    }

    fn resize(&mut self, new_len: u64) -> Result<()> {
        let index = self.fuse.ops;
        if self.fuse.tick(Op::Resize, new_len, 0, &[])? {
            self.crash(index, Some(Op::Resize), Vec::new());
            return Err(DeviceError::PowerLost { op: Op::Resize });
        }
        if self.fuse.plan.lose_unsynced {
            self.remember_length(new_len)?;
        }
        self.dev.resize(new_len)?;
        // Pending images past the new end are gone; one that straddles it is cut short.
        let ss = self.ss();
        self.pending.split_off(&new_len.div_ceil(ss));
        if let Some(versions) = self.pending.get_mut(&(new_len / ss)) {
            let keep = (new_len % ss) as usize;
            for v in versions.iter_mut() {
                if v.len() > keep {
                    *v = Box::from(&v[..keep]);
                }
            }
        }
        Ok(())
    }
}

/// A flash device that loses power when the plan says (see the module docs for what an
/// interrupted write or erase leaves).
#[derive(Debug)]
pub struct FaultyFlash<F: FlashDevice> {
    dev: F,
    fuse: Fuse,
}

impl<F: FlashDevice> FaultyFlash<F> {
    /// Wraps `dev` under `plan`.
    pub fn new(dev: F, plan: FaultPlan) -> Self {
        FaultyFlash {
            dev,
            fuse: Fuse::new(plan),
        }
    }

    /// Programs a torn version of `data` at `offset`.
    fn tear_write(&mut self, rng: &mut SplitMix64, offset: u64, data: &[u8]) -> CutOutcome {
        let geom = self.dev.geometry();
        let mut old = vec![geom.erase_value; data.len()];
        if self.dev.read(offset, &mut old).is_err() {
            // Cannot see the old bytes (unaligned for reads): nothing lands.
            return CutOutcome::Prefix {
                bytes: 0,
                of: data.len() as u64,
            };
        }
        let bits = match self.fuse.plan.tear {
            TearMode::Prefix => false,
            TearMode::Bits => true,
            TearMode::Any => rng.coin(),
        };
        let mut torn = old.clone();
        let outcome = if bits {
            let (mut programmed, mut of) = (0, 0);
            for (i, t) in torn.iter_mut().enumerate() {
                let changing = geom.programmed(data[i]) & !geom.programmed(old[i]);
                let landed = changing & rng.byte();
                of += u64::from(changing.count_ones());
                programmed += u64::from(landed.count_ones());
                *t = (geom.programmed(old[i]) | landed) ^ geom.erase_value;
            }
            CutOutcome::Bits { programmed, of }
        } else {
            let bytes = rng.below(data.len() as u64 + 1) as usize;
            torn[..bytes].copy_from_slice(&data[..bytes]);
            // The byte being programmed when power failed got some of its bits.
            if let (Some(t), Some(&d)) = (torn.get_mut(bytes), data.get(bytes)) {
                let old = geom.programmed(*t);
                let changing = geom.programmed(d) & !old;
                *t = (old | (changing & rng.byte())) ^ geom.erase_value;
            }
            CutOutcome::Prefix {
                bytes: bytes as u64,
                of: data.len() as u64,
            }
        };
        // On a write-once part the interrupted program still used up the units.
        if torn != old || geom.rule == WriteRule::WriteOnce {
            let _ = self.dev.write(offset, &torn);
        }
        outcome
    }

    /// Leaves the units of an erase of `[offset, offset + len)` as an interrupted erase would.
    fn tear_erase(&mut self, rng: &mut SplitMix64, offset: u64, len: u64) -> CutOutcome {
        let geom = self.dev.geometry();
        let es = u64::from(geom.erase_size);
        let units = len.checked_div(es).unwrap_or(0);
        if units == 0 {
            return CutOutcome::Erase {
                erased_units: 0,
                torn: EraseTear::Unchanged,
            };
        }
        let done = rng.below(units);
        for u in 0..done {
            let _ = self.dev.erase(offset + u * es, es);
        }
        let at = offset + done * es;
        let torn = match rng.below(4) {
            0 => EraseTear::Unchanged,
            1 => EraseTear::Erased,
            2 => EraseTear::Partial,
            _ => EraseTear::Garbage,
        };
        match torn {
            EraseTear::Unchanged => {}
            EraseTear::Erased => {
                let _ = self.dev.erase(at, es);
            }
            EraseTear::Partial | EraseTear::Garbage => {
                let mut unit = vec![0u8; es as usize];
                let _ = self.dev.read(at, &mut unit);
                for b in unit.iter_mut() {
                    let keep = if torn == EraseTear::Partial {
                        geom.programmed(*b) & rng.byte()
                    } else {
                        rng.byte()
                    };
                    *b = keep ^ geom.erase_value;
                }
                let _ = self.dev.erase(at, es);
                let _ = self.dev.write(at, &unit);
            }
        }
        CutOutcome::Erase {
            erased_units: done,
            torn,
        }
    }
}

impl<F: FlashDevice> FlashDevice for FaultyFlash<F> {
    fn geometry(&self) -> FlashGeometry {
        self.dev.geometry()
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.fuse.refuse(Op::Read)?;
        self.dev.read(offset, buf)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let index = self.fuse.ops;
        if !self.fuse.tick(Op::Write, offset, data.len() as u64, data)? {
            return self.dev.write(offset, data);
        }
        let mut rng = self.fuse.rng(index);
        let outcome = match self
            .dev
            .geometry()
            .check_access(Op::Write, offset, data.len() as u64)
        {
            Ok(()) => self.tear_write(&mut rng, offset, data),
            Err(_) => CutOutcome::Clean,
        };
        self.fuse.record(index, Some(Op::Write), outcome, (0, 0));
        Err(DeviceError::PowerLost { op: Op::Write })
    }

    fn erase(&mut self, offset: u64, len: u64) -> Result<()> {
        let index = self.fuse.ops;
        if !self.fuse.tick(Op::Erase, offset, len, &[])? {
            return self.dev.erase(offset, len);
        }
        let mut rng = self.fuse.rng(index);
        let outcome = match self.dev.geometry().check_access(Op::Erase, offset, len) {
            Ok(()) => self.tear_erase(&mut rng, offset, len),
            Err(_) => CutOutcome::Clean,
        };
        self.fuse.record(index, Some(Op::Erase), outcome, (0, 0));
        Err(DeviceError::PowerLost { op: Op::Erase })
    }

    fn sync(&mut self) -> Result<()> {
        let index = self.fuse.ops;
        if !self.fuse.tick(Op::Sync, 0, 0, &[])? {
            return self.dev.sync();
        }
        self.fuse
            .record(index, Some(Op::Sync), CutOutcome::Clean, (0, 0));
        Err(DeviceError::PowerLost { op: Op::Sync })
    }
}
