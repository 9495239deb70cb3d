//! The flash-device contract, and flash on a block device.
//!
//! A flash device has a runtime geometry: the granularity of reads and writes, the size of the
//! erase unit, the value erased bytes read as, and the part's write rule. In terms of
//! *programmed* bits (bits that differ from the erase value):
//!
//! * [`WriteRule::AndRewrite`] (NOR flash): a write may only add programmed bits. Writing data
//!   whose programmed bits do not include every bit already programmed at the target is an
//!   error ([`DeviceError::WriteRule`]), never a silent change; after a legal write the bytes
//!   read back exactly as written. Zeroing a slot to neutralize it is legal.
//! * [`WriteRule::WriteOnce`] (NAND-like, DataFlash pages): each write unit may be programmed
//!   once per erase.
//!
//! A write or erase that returned is durable: flash parts have no volatile write cache. `sync`
//! exists for flash devices that sit on a block device with a cache ([`FlashOnBlock`]); on raw
//! parts it is free.

use crate::block::BlockDevice;
use crate::error::{DeviceError, Op, Result, check_aligned, check_bounds};

/// What a flash part allows between two erases of a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteRule {
    /// Each write unit may be programmed once per erase.
    WriteOnce,
    /// Bits may be programmed (moved away from the erase value) any number of times, never
    /// returned to the erase value except by an erase. NOR flash.
    AndRewrite,
}

/// The shape of a flash part, known at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlashGeometry {
    /// Total size in bytes (a multiple of `erase_size`).
    pub capacity: u64,
    /// Reads must be aligned to, and a multiple of, this many bytes.
    pub read_size: u32,
    /// Writes must be aligned to, and a multiple of, this many bytes.
    pub write_size: u32,
    /// The erase unit (segment, sector, block) in bytes.
    pub erase_size: u32,
    /// What every byte of an erased unit reads as (0xFF for NOR).
    pub erase_value: u8,
    /// The part's write rule.
    pub rule: WriteRule,
}

impl FlashGeometry {
    /// A byte-programmable NOR part with `erase_size`-byte segments, erasing to 0xFF.
    pub const fn nor(capacity: u64, erase_size: u32) -> Self {
        FlashGeometry {
            capacity,
            read_size: 1,
            write_size: 1,
            erase_size,
            erase_value: 0xFF,
            rule: WriteRule::AndRewrite,
        }
    }

    /// Checks that the sizes are consistent: all positive, write size divides the erase size,
    /// the capacity is a whole number of erase units.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason| Err(DeviceError::BadGeometry { reason });
        if self.read_size == 0 || self.write_size == 0 || self.erase_size == 0 {
            return bad("read, write and erase sizes must be positive");
        }
        if !self.erase_size.is_multiple_of(self.write_size)
            || !self.erase_size.is_multiple_of(self.read_size)
        {
            return bad("the erase size must be a multiple of the read and write sizes");
        }
        if !self.capacity.is_multiple_of(u64::from(self.erase_size)) {
            return bad("the capacity must be a whole number of erase units");
        }
        Ok(())
    }

    /// Number of erase units.
    pub fn erase_units(&self) -> u64 {
        self.capacity / u64::from(self.erase_size)
    }

    /// Checks bounds and alignment of an access for `op` (read, write or erase).
    pub fn check_access(&self, op: Op, offset: u64, len: u64) -> Result<()> {
        check_bounds(op, offset, len, self.capacity)?;
        let align = match op {
            Op::Read => self.read_size,
            Op::Erase => self.erase_size,
            _ => self.write_size,
        };
        check_aligned(op, offset, len, u64::from(align))
    }

    /// The bits of `byte` that are programmed (differ from the erase value).
    #[inline]
    pub fn programmed(&self, byte: u8) -> u8 {
        byte ^ self.erase_value
    }

    /// Whether writing `new` over `old` keeps the AND-rewrite rule: every programmed bit of
    /// `old` stays programmed.
    #[inline]
    pub fn may_overwrite(&self, old: u8, new: u8) -> bool {
        self.programmed(old) & !self.programmed(new) == 0
    }
}

/// A flash part (or something that behaves like one). See the module docs for the contract.
pub trait FlashDevice {
    /// The part's geometry.
    fn geometry(&self) -> FlashGeometry;

    /// Reads `buf.len()` bytes at `offset` (aligned to the read size).
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Programs `data` at `offset` (aligned to the write size), following the write rule.
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()>;

    /// Erases the whole erase units covering `[offset, offset + len)` (both aligned to the
    /// erase size).
    fn erase(&mut self, offset: u64, len: u64) -> Result<()>;

    /// Makes completed writes durable where a cache sits between the caller and the medium
    /// (a no-op on raw parts).
    fn sync(&mut self) -> Result<()>;
}

/// Forwards the flash-device contract through a pointer type.
macro_rules! forward_flash_device {
    ($($ptr:ty),*) => {$(
        impl<F: FlashDevice + ?Sized> FlashDevice for $ptr {
            fn geometry(&self) -> FlashGeometry {
                (**self).geometry()
            }
            fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
                (**self).read(offset, buf)
            }
            fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
                (**self).write(offset, data)
            }
            fn erase(&mut self, offset: u64, len: u64) -> Result<()> {
                (**self).erase(offset, len)
            }
            fn sync(&mut self) -> Result<()> {
                (**self).sync()
            }
        }
    )*};
}

forward_flash_device!(&mut F);
#[cfg(feature = "alloc")]
forward_flash_device!(alloc::boxed::Box<F>);

/// Size of the stack buffer used to fill erased units and to check writes.
pub(crate) const CHUNK: usize = 256;

/// Writes `value` over `[offset, offset + len)` of a block device, a chunk at a time.
pub(crate) fn fill<D: BlockDevice + ?Sized>(
    dev: &mut D,
    offset: u64,
    len: u64,
    value: u8,
) -> Result<()> {
    let chunk = [value; CHUNK];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(CHUNK as u64) as usize;
        dev.write(offset + at, &chunk[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Checks that writing `data` at `offset` keeps the AND-rewrite rule against what `dev` holds.
pub(crate) fn check_overwrite<D: BlockDevice + ?Sized>(
    dev: &mut D,
    geom: &FlashGeometry,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    let mut old = [0u8; CHUNK];
    for (i, part) in data.chunks(CHUNK).enumerate() {
        let at = offset + (i * CHUNK) as u64;
        let old = &mut old[..part.len()];
        dev.read(at, old)?;
        if let Some(j) = (0..part.len()).find(|&j| !geom.may_overwrite(old[j], part[j])) {
            return Err(DeviceError::WriteRule {
                offset: at + j as u64,
            });
        }
    }
    Ok(())
}

/// Checks that `[offset, offset + len)` of `dev` reads as erased.
pub(crate) fn check_erased<D: BlockDevice + ?Sized>(
    dev: &mut D,
    geom: &FlashGeometry,
    offset: u64,
    len: usize,
) -> Result<()> {
    let mut old = [0u8; CHUNK];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(CHUNK);
        dev.read(offset + at as u64, &mut old[..n])?;
        if let Some(j) = old[..n].iter().position(|&b| b != geom.erase_value) {
            return Err(DeviceError::WriteRule {
                offset: offset + (at + j) as u64,
            });
        }
        at += n;
    }
    Ok(())
}

/// A flash device made of a block device (usually an [`Extent`](crate::Extent) the space
/// manager gave out): an erase writes the erase value over the unit, a write is a plain write
/// (for every legal flash write the result is exactly the data written), `sync` syncs the
/// block device. With `checked` on, each write first reads the target and refuses one that
/// breaks the AND-rewrite rule (for write-once geometry, one whose target is not erased);
/// off, the caller is trusted and no read is spent.
#[derive(Debug)]
pub struct FlashOnBlock<D: BlockDevice> {
    dev: D,
    geom: FlashGeometry,
    checked: bool,
}

impl<D: BlockDevice> FlashOnBlock<D> {
    /// Flash with the given read/write/erase sizes, erase value and rule over the whole of
    /// `dev` (rounded down to whole erase units).
    pub fn new(
        dev: D,
        read_size: u32,
        write_size: u32,
        erase_size: u32,
        erase_value: u8,
        rule: WriteRule,
    ) -> Result<Self> {
        let capacity = if erase_size == 0 {
            0
        } else {
            dev.capacity() / u64::from(erase_size) * u64::from(erase_size)
        };
        let geom = FlashGeometry {
            capacity,
            read_size,
            write_size,
            erase_size,
            erase_value,
            rule,
        };
        geom.validate()?;
        Ok(FlashOnBlock {
            dev,
            geom,
            checked: false,
        })
    }

    /// Turns write-rule checking on or off (off by default).
    pub fn checked(mut self, on: bool) -> Self {
        self.checked = on;
        self
    }

    /// The underlying block device.
    pub fn into_inner(self) -> D {
        self.dev
    }
}

impl<D: BlockDevice> FlashDevice for FlashOnBlock<D> {
    fn geometry(&self) -> FlashGeometry {
        self.geom
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.geom.check_access(Op::Read, offset, buf.len() as u64)?;
        self.dev.read(offset, buf)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.geom
            .check_access(Op::Write, offset, data.len() as u64)?;
        if self.checked {
            match self.geom.rule {
                WriteRule::AndRewrite => check_overwrite(&mut self.dev, &self.geom, offset, data)?,
                // Without a record of programmed units, require an erased target.
                WriteRule::WriteOnce => {
                    check_erased(&mut self.dev, &self.geom, offset, data.len())?
                }
            }
        }
        self.dev.write(offset, data)
    }

    fn erase(&mut self, offset: u64, len: u64) -> Result<()> {
        self.geom.check_access(Op::Erase, offset, len)?;
        fill(&mut self.dev, offset, len, self.geom.erase_value)
    }

    fn sync(&mut self) -> Result<()> {
        self.dev.sync()
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use crate::{Extent, MemBlock};

    #[test]
    fn flash_on_an_extent_erases_writes_and_checks_the_rule() {
        let mut dev = MemBlock::new(8192);
        {
            let ext = Extent::new(&mut dev, 4096, 4096).unwrap();
            let mut f = FlashOnBlock::new(ext, 1, 1, 1024, 0xFF, WriteRule::AndRewrite)
                .unwrap()
                .checked(true);
            assert_eq!(f.geometry().capacity, 4096);
            f.erase(1024, 1024).unwrap();
            f.write(1024, &[0xF0]).unwrap();
            f.write(1024, &[0x00]).unwrap();
            assert_eq!(
                f.write(1024, &[0x01]),
                Err(DeviceError::WriteRule { offset: 1024 })
            );
            // Not erased yet: the zeros of a fresh block device are programmed bits.
            assert!(f.write(0, &[0xF0]).is_err());
            assert!(f.erase(0, 1000).is_err());
        }
        // The extent's offsets start at 4096 on the device below.
        assert_eq!(dev.as_bytes()[4096 + 1024], 0);
        assert_eq!(dev.as_bytes()[4096 + 1025], 0xFF);
        assert_eq!(dev.as_bytes()[1025], 0);
    }

    #[test]
    fn write_once_geometry_on_a_block_device_requires_erased_targets() {
        let mut f = FlashOnBlock::new(
            MemBlock::new(4096),
            1,
            256,
            1024,
            0xFF,
            WriteRule::WriteOnce,
        )
        .unwrap()
        .checked(true);
        f.erase(0, 4096).unwrap();
        f.write(256, &[0x12; 256]).unwrap();
        assert!(matches!(
            f.write(256, &[0x12; 256]),
            Err(DeviceError::WriteRule { .. })
        ));
        assert!(matches!(
            f.write(100, &[0; 256]),
            Err(DeviceError::Unaligned { .. })
        ));
        let mut back = [0; 4];
        f.read(256, &mut back).unwrap();
        assert_eq!(back, [0x12; 4]);
    }

    #[test]
    fn bad_geometry_is_refused() {
        assert!(
            FlashOnBlock::new(MemBlock::new(4096), 1, 3, 1024, 0xFF, WriteRule::AndRewrite)
                .is_err()
        );
        assert!(
            FlashOnBlock::new(MemBlock::new(4096), 1, 1, 0, 0xFF, WriteRule::AndRewrite).is_err()
        );
        assert!(FlashGeometry::nor(1000, 512).validate().is_err());
    }
}
