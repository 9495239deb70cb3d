//! The flash simulator: a NOR (or write-once) part with wear counters and a cost meter.

use alloc::vec::Vec;

use crate::block::BlockDevice;
use crate::error::{DeviceError, Op, Result};
use crate::flash::{FlashDevice, FlashGeometry, WriteRule, check_overwrite, fill};
use crate::mem::MemBlock;

/// The modeled cost of flash operations, per byte and per operation.
///
/// [`CostModel::MSP430_NOR`] is the iFKVS paper's Table I, measured with TI EnergyTrace on an
/// MSP430F5529's NOR flash (512-byte segments): read 600 ns and 6 nJ per byte, write 18 µs and
/// 209 nJ per byte, erase 50 µs and 420 nJ per byte erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostModel {
    /// Nanoseconds per byte read.
    pub read_ns_per_byte: u64,
    /// Picojoules per byte read.
    pub read_pj_per_byte: u64,
    /// Nanoseconds per byte written.
    pub write_ns_per_byte: u64,
    /// Picojoules per byte written.
    pub write_pj_per_byte: u64,
    /// Nanoseconds per byte erased.
    pub erase_ns_per_byte: u64,
    /// Picojoules per byte erased.
    pub erase_pj_per_byte: u64,
    /// Nanoseconds added to every read, write or erase (command overhead).
    pub ns_per_op: u64,
    /// Picojoules added to every read, write or erase.
    pub pj_per_op: u64,
}

impl CostModel {
    /// iFKVS Table I: MSP430F5529 NOR flash.
    pub const MSP430_NOR: CostModel = CostModel {
        read_ns_per_byte: 600,
        read_pj_per_byte: 6_000,
        write_ns_per_byte: 18_000,
        write_pj_per_byte: 209_000,
        erase_ns_per_byte: 50_000,
        erase_pj_per_byte: 420_000,
        ns_per_op: 0,
        pj_per_op: 0,
    };

    /// Everything free: counts wear only.
    pub const FREE: CostModel = CostModel {
        read_ns_per_byte: 0,
        read_pj_per_byte: 0,
        write_ns_per_byte: 0,
        write_pj_per_byte: 0,
        erase_ns_per_byte: 0,
        erase_pj_per_byte: 0,
        ns_per_op: 0,
        pj_per_op: 0,
    };

    fn charge(&self, op: Op, bytes: u64) -> Meter {
        let (ns, pj) = match op {
            Op::Read => (self.read_ns_per_byte, self.read_pj_per_byte),
            Op::Erase => (self.erase_ns_per_byte, self.erase_pj_per_byte),
            _ => (self.write_ns_per_byte, self.write_pj_per_byte),
        };
        Meter {
            time_ns: self.ns_per_op.saturating_add(ns.saturating_mul(bytes)),
            energy_pj: self.pj_per_op.saturating_add(pj.saturating_mul(bytes)),
        }
    }
}

/// Modeled time and energy spent by the part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meter {
    /// Modeled time in nanoseconds.
    pub time_ns: u64,
    /// Modeled energy in picojoules.
    pub energy_pj: u64,
}

impl Meter {
    fn add(&mut self, other: Meter) {
        self.time_ns = self.time_ns.saturating_add(other.time_ns);
        self.energy_pj = self.energy_pj.saturating_add(other.energy_pj);
    }

    /// The time and energy spent since `earlier`.
    pub fn since(&self, earlier: &Meter) -> Meter {
        Meter {
            time_ns: self.time_ns.saturating_sub(earlier.time_ns),
            energy_pj: self.energy_pj.saturating_sub(earlier.energy_pj),
        }
    }
}

/// What one erase unit has been through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnitWear {
    /// Reads that touched the unit.
    pub reads: u64,
    /// Bytes read from the unit.
    pub read_bytes: u64,
    /// Writes that touched the unit.
    pub writes: u64,
    /// Bytes written to the unit.
    pub write_bytes: u64,
    /// Times the unit was erased: its wear.
    pub erases: u64,
}

/// A simulated flash part whose bytes live in any block device: RAM for tests
/// ([`SimFlash::in_memory`]), a file for images too big for RAM.
///
/// It enforces the geometry and the write rule — a write that would return a programmed bit
/// to the erase value (AND-rewrite) or program a write unit twice (write-once) is refused with
/// [`DeviceError::WriteRule`] and changes nothing — counts reads, writes and erases per erase
/// unit, and meters modeled time and energy with a [`CostModel`]. Checking the rule reads the
/// old bytes from the backing store; that read is not charged to the part.
#[derive(Debug)]
pub struct SimFlash<D: BlockDevice> {
    store: D,
    geom: FlashGeometry,
    cost: CostModel,
    meter: Meter,
    wear: Vec<UnitWear>,
    /// For write-once parts: one bit per write unit, set while the unit is programmed.
    programmed: Vec<u64>,
}

impl SimFlash<MemBlock<Vec<u8>>> {
    /// A freshly erased part in RAM.
    pub fn in_memory(geom: FlashGeometry, cost: CostModel) -> Result<Self> {
        geom.validate()?;
        let len = usize::try_from(geom.capacity).map_err(|_| DeviceError::BadGeometry {
            reason: "capacity does not fit in memory",
        })?;
        let store = MemBlock::from_backing(alloc::vec![geom.erase_value; len]);
        Self::build(store, geom, cost, false)
    }
}

impl<D: BlockDevice> SimFlash<D> {
    /// A freshly erased part over `store` (every byte set to the erase value; not charged).
    pub fn new(mut store: D, geom: FlashGeometry, cost: CostModel) -> Result<Self> {
        geom.validate()?;
        Self::fit(&mut store, &geom)?;
        fill(&mut store, 0, geom.capacity, geom.erase_value)?;
        Self::build(store, geom, cost, false)
    }

    /// A part whose contents are already in `store` (an image from an earlier run), which
    /// must hold at least `geom.capacity` bytes.
    ///
    /// For a write-once part a write unit counts as programmed if any of its bytes is not
    /// erased; a unit whose program left every byte erased (a torn program that landed
    /// nothing, or a program of erased-value bytes) looks fresh again. Crash tests keep the
    /// `SimFlash` that lost power instead of reopening its image, and so keep that knowledge.
    pub fn open(store: D, geom: FlashGeometry, cost: CostModel) -> Result<Self> {
        geom.validate()?;
        if store.capacity() < geom.capacity {
            return Err(DeviceError::BadGeometry {
                reason: "the flash image is smaller than the part",
            });
        }
        Self::build(store, geom, cost, true)
    }

    fn fit(store: &mut D, geom: &FlashGeometry) -> Result<()> {
        if store.capacity() < geom.capacity {
            store.resize(geom.capacity)?;
        }
        Ok(())
    }

    fn build(mut store: D, geom: FlashGeometry, cost: CostModel, scan: bool) -> Result<Self> {
        let units = usize::try_from(geom.erase_units()).map_err(|_| DeviceError::BadGeometry {
            reason: "too many erase units",
        })?;
        let mut programmed = Vec::new();
        if geom.rule == WriteRule::WriteOnce {
            let wunits = (geom.capacity / u64::from(geom.write_size)) as usize;
            programmed = alloc::vec![0u64; wunits.div_ceil(64)];
            if scan {
                let mut buf = alloc::vec![0u8; geom.write_size as usize];
                for w in 0..wunits {
                    store.read(w as u64 * u64::from(geom.write_size), &mut buf)?;
                    if buf.iter().any(|&b| b != geom.erase_value) {
                        programmed[w / 64] |= 1 << (w % 64);
                    }
                }
            }
        }
        Ok(SimFlash {
            store,
            geom,
            cost,
            meter: Meter::default(),
            wear: alloc::vec![UnitWear::default(); units],
            programmed,
        })
    }

    /// Modeled time and energy spent so far.
    pub fn meter(&self) -> Meter {
        self.meter
    }

    /// Sets the modeled time and energy back to zero (wear stays).
    pub fn reset_meter(&mut self) {
        self.meter = Meter::default();
    }

    /// The cost model in use.
    pub fn cost_model(&self) -> CostModel {
        self.cost
    }

    /// Wear of every erase unit, in address order.
    pub fn wear(&self) -> &[UnitWear] {
        &self.wear
    }

    /// The most and the fewest erases any unit has had.
    pub fn erase_spread(&self) -> (u64, u64) {
        let max = self.wear.iter().map(|w| w.erases).max().unwrap_or(0);
        let min = self.wear.iter().map(|w| w.erases).min().unwrap_or(0);
        (max, min)
    }

    /// The backing store (the part's raw image).
    pub fn store(&self) -> &D {
        &self.store
    }

    /// The backing store, for keeping the image after the simulation.
    pub fn into_inner(self) -> D {
        self.store
    }

    fn account(&mut self, op: Op, offset: u64, len: u64) {
        self.meter.add(self.cost.charge(op, len));
        let es = u64::from(self.geom.erase_size);
        let mut at = offset;
        let end = offset + len;
        while at < end || (len == 0 && at == offset) {
            let unit = (at / es) as usize;
            let part = ((unit as u64 + 1) * es).min(end) - at;
            if let Some(w) = self.wear.get_mut(unit) {
                match op {
                    Op::Read => {
                        w.reads += 1;
                        w.read_bytes += part;
                    }
                    Op::Erase => w.erases += 1,
                    _ => {
                        w.writes += 1;
                        w.write_bytes += part;
                    }
                }
            }
            if len == 0 {
                break;
            }
            at += part;
        }
    }

    fn write_units(&self, offset: u64, len: u64) -> core::ops::Range<usize> {
        let ws = u64::from(self.geom.write_size);
        (offset / ws) as usize..((offset + len) / ws) as usize
    }

    fn is_programmed(&self, w: usize) -> bool {
        self.programmed[w / 64] & (1 << (w % 64)) != 0
    }

    fn set_programmed(&mut self, units: core::ops::Range<usize>, on: bool) {
        for w in units {
            if on {
                self.programmed[w / 64] |= 1 << (w % 64);
            } else {
                self.programmed[w / 64] &= !(1 << (w % 64));
            }
        }
    }
}

impl<D: BlockDevice> FlashDevice for SimFlash<D> {
    fn geometry(&self) -> FlashGeometry {
        self.geom
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.geom.check_access(Op::Read, offset, buf.len() as u64)?;
        self.store.read(offset, buf)?;
        self.account(Op::Read, offset, buf.len() as u64);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        self.geom.check_access(Op::Write, offset, len)?;
        match self.geom.rule {
            WriteRule::AndRewrite => check_overwrite(&mut self.store, &self.geom, offset, data)?,
            WriteRule::WriteOnce => {
                let units = self.write_units(offset, len);
                if let Some(w) = units.clone().find(|&w| self.is_programmed(w)) {
                    return Err(DeviceError::WriteRule {
                        offset: w as u64 * u64::from(self.geom.write_size),
                    });
                }
            }
        }
        self.store.write(offset, data)?;
        if self.geom.rule == WriteRule::WriteOnce {
            self.set_programmed(self.write_units(offset, len), true);
        }
        self.account(Op::Write, offset, len);
        Ok(())
    }

    fn erase(&mut self, offset: u64, len: u64) -> Result<()> {
        self.geom.check_access(Op::Erase, offset, len)?;
        fill(&mut self.store, offset, len, self.geom.erase_value)?;
        if self.geom.rule == WriteRule::WriteOnce {
            let units = self.write_units(offset, len);
            self.set_programmed(units, false);
        }
        let es = u64::from(self.geom.erase_size);
        for unit in (offset / es)..((offset + len) / es) {
            self.account(Op::Erase, unit * es, es);
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nor() -> SimFlash<MemBlock<Vec<u8>>> {
        SimFlash::in_memory(FlashGeometry::nor(4096, 512), CostModel::MSP430_NOR).unwrap()
    }

    #[test]
    fn write_rule_is_enforced_on_nor() {
        let mut f = nor();
        f.write(10, &[0b1010_1010]).unwrap();
        // Programming more bits (1 -> 0) is fine; neutralizing with zeros is fine.
        f.write(10, &[0b1000_0010]).unwrap();
        f.write(10, &[0]).unwrap();
        // Any 0 -> 1 is refused and changes nothing.
        let err = f.write(8, &[0, 0, 0x01]).unwrap_err();
        assert_eq!(err, DeviceError::WriteRule { offset: 10 });
        let mut b = [0xAA; 3];
        f.read(8, &mut b).unwrap();
        assert_eq!(b, [0xFF, 0xFF, 0]);
        f.erase(0, 512).unwrap();
        f.write(10, &[0x7F]).unwrap();
    }

    #[test]
    fn write_rule_is_enforced_on_write_once_parts() {
        let geom = FlashGeometry {
            capacity: 8192,
            read_size: 1,
            write_size: 256,
            erase_size: 2048,
            erase_value: 0xFF,
            rule: WriteRule::WriteOnce,
        };
        let mut f = SimFlash::in_memory(geom, CostModel::FREE).unwrap();
        f.write(256, &[0xFF; 256]).unwrap();
        // Even an all-erased-value program counts as the unit's one program.
        assert_eq!(
            f.write(256, &[0; 256]),
            Err(DeviceError::WriteRule { offset: 256 })
        );
        assert!(matches!(
            f.write(100, &[0; 256]),
            Err(DeviceError::Unaligned { .. })
        ));
        f.erase(0, 2048).unwrap();
        f.write(256, &[0; 256]).unwrap();
        // An image reopened keeps knowing which units are programmed.
        let store = f.into_inner();
        let mut f = SimFlash::open(store, geom, CostModel::FREE).unwrap();
        assert!(f.write(256, &[0; 256]).is_err());
        f.write(512, &[0; 256]).unwrap();
    }

    #[test]
    fn geometry_is_checked() {
        let mut f = nor();
        assert!(matches!(
            f.erase(100, 512),
            Err(DeviceError::Unaligned { .. })
        ));
        assert!(matches!(
            f.erase(0, 100),
            Err(DeviceError::Unaligned { .. })
        ));
        assert!(matches!(
            f.write(4095, &[0, 0]),
            Err(DeviceError::OutOfBounds { .. })
        ));
        assert!(SimFlash::in_memory(FlashGeometry::nor(1000, 512), CostModel::FREE).is_err());
    }

    #[test]
    fn meters_wear_time_and_energy_with_table_one_costs() {
        let mut f = nor();
        f.write(0, &[0; 100]).unwrap();
        let mut buf = [0; 10];
        f.read(0, &mut buf).unwrap();
        f.erase(0, 1024).unwrap();
        let m = f.meter();
        // 100 B written, 10 B read, 1024 B erased.
        assert_eq!(m.time_ns, 100 * 18_000 + 10 * 600 + 1024 * 50_000);
        assert_eq!(m.energy_pj, 100 * 209_000 + 10 * 6_000 + 1024 * 420_000);
        assert_eq!(f.wear()[0].erases, 1);
        assert_eq!(f.wear()[1].erases, 1);
        assert_eq!(f.wear()[2].erases, 0);
        assert_eq!((f.wear()[0].writes, f.wear()[0].write_bytes), (1, 100));
        assert_eq!(f.erase_spread(), (1, 0));
        // A write across a unit boundary is split between the units.
        f.write(500, &[0; 20]).unwrap();
        assert_eq!(f.wear()[0].write_bytes, 112);
        assert_eq!(f.wear()[1].write_bytes, 8);
    }

    #[test]
    fn a_short_image_is_refused_not_padded_with_programmed_zeros() {
        let store = MemBlock::new(512);
        let err = SimFlash::open(store, FlashGeometry::nor(1024, 512), CostModel::FREE);
        assert!(matches!(err, Err(DeviceError::BadGeometry { .. })));
    }

    #[cfg(feature = "std")]
    #[test]
    fn an_image_in_a_file_survives_reopening() {
        use crate::file::FileBlock;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nor.img");
        let geom = FlashGeometry::nor(64 * 1024, 512);
        let mut f =
            SimFlash::new(FileBlock::create(&path, 0).unwrap(), geom, CostModel::FREE).unwrap();
        f.write(1000, b"kept").unwrap();
        f.sync().unwrap();
        drop(f);
        let mut f = SimFlash::open(FileBlock::open(&path).unwrap(), geom, CostModel::FREE).unwrap();
        let mut b = [0; 6];
        f.read(999, &mut b).unwrap();
        assert_eq!(&b, b"\xFFkept\xFF");
        assert!(
            f.write(1000, &[0xFF]).is_err(),
            "the rule holds across reopening"
        );
    }
}
