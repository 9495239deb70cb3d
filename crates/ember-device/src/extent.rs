//! A window onto part of a block device.

use crate::block::BlockDevice;
use crate::error::{DeviceError, Op, Result, check_bounds};

/// The bytes `[start, start + len)` of a block device, seen as a device of its own: offsets
/// are relative to `start`, accesses outside the window are refused, and `sync` syncs the
/// whole underlying device. This is how the space manager hands an engine its extent.
#[derive(Debug)]
pub struct Extent<D: BlockDevice> {
    dev: D,
    start: u64,
    len: u64,
}

impl<D: BlockDevice> Extent<D> {
    /// The window `[start, start + len)` of `dev`; `start` must be sector-aligned and the
    /// window must lie within the device.
    pub fn new(dev: D, start: u64, len: u64) -> Result<Self> {
        if !start.is_multiple_of(u64::from(dev.sector_size())) {
            return Err(DeviceError::Unaligned {
                op: Op::Open,
                offset: start,
                len,
                align: u64::from(dev.sector_size()),
            });
        }
        check_bounds(Op::Open, start, len, dev.capacity())?;
        Ok(Extent { dev, start, len })
    }

    /// First byte of the window on the underlying device.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The underlying device.
    pub fn into_inner(self) -> D {
        self.dev
    }

    fn abs(&self, op: Op, offset: u64, len: usize) -> Result<u64> {
        check_bounds(op, offset, len as u64, self.len)?;
        Ok(self.start + offset)
    }
}

impl<D: BlockDevice> BlockDevice for Extent<D> {
    fn sector_size(&self) -> u32 {
        self.dev.sector_size()
    }
    fn capacity(&self) -> u64 {
        self.len
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.abs(Op::Read, offset, buf.len())?;
        self.dev.read(at, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.abs(Op::Write, offset, data.len())?;
        self.dev.write(at, data)
    }
    fn sync(&mut self) -> Result<()> {
        self.dev.sync()
    }
    fn reads_from_memory(&self) -> bool {
        self.dev.reads_from_memory()
    }
    fn prepare(&mut self, offset: u64, len: u64) {
        if offset.checked_add(len).is_some_and(|e| e <= self.len) {
            self.dev.prepare(self.start + offset, len);
        }
    }
    fn prepare_appends(&mut self, offset: u64, len: u64) {
        if offset.checked_add(len).is_some_and(|e| e <= self.len) {
            self.dev.prepare_appends(self.start + offset, len);
        }
    }
    fn resize(&mut self, new_len: u64) -> Result<()> {
        if new_len == self.len {
            Ok(())
        } else {
            Err(DeviceError::Unsupported {
                op: Op::Resize,
                reason: "an extent has the size the space manager gave it",
            })
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use crate::MemBlock;

    #[test]
    fn offsets_are_relative_and_bounded() {
        let mut dev = MemBlock::new(4096);
        {
            let mut ext = Extent::new(&mut dev, 1024, 1024).unwrap();
            ext.write(0, b"abc").unwrap();
            assert!(ext.write(1022, b"abc").is_err());
        }
        assert_eq!(&dev.as_bytes()[1024..1027], b"abc");
        assert!(Extent::new(&mut dev, 100, 10).is_err());
        assert!(Extent::new(&mut dev, 3584, 1024).is_err());
    }
}
