//! Memory-backed block devices: over a caller-provided buffer (no allocation) or a `Vec`.

use crate::block::{BlockDevice, DEFAULT_SECTOR_SIZE};
use crate::error::{DeviceError, Op, Result, check_bounds};

/// Storage a [`MemBlock`] keeps its bytes in.
pub trait Backing {
    /// All bytes of the device.
    fn bytes(&self) -> &[u8];
    /// All bytes of the device, mutable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Changes the length; new bytes are zero. Fixed-size storage refuses any change.
    fn set_len(&mut self, len: usize) -> Result<()>;
}

impl Backing for &mut [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
    fn set_len(&mut self, len: usize) -> Result<()> {
        if len == self.len() {
            Ok(())
        } else {
            Err(DeviceError::Unsupported {
                op: Op::Resize,
                reason: "a caller-provided buffer has a fixed size",
            })
        }
    }
}

#[cfg(feature = "alloc")]
impl Backing for alloc::vec::Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
    fn set_len(&mut self, len: usize) -> Result<()> {
        let more = len.saturating_sub(self.len());
        self.try_reserve_exact(more)
            .map_err(|_| DeviceError::Unsupported {
                op: Op::Resize,
                reason: "not enough memory for the new length",
            })?;
        self.resize(len, 0);
        Ok(())
    }
}

/// A block device in RAM. Everything written is durable at once (there is no cache to lose);
/// wrap it in [`FaultyBlock`](crate::FaultyBlock) to model a volatile cache and power cuts.
#[derive(Debug, Clone)]
pub struct MemBlock<B: Backing> {
    store: B,
    sector_size: u32,
}

#[cfg(feature = "alloc")]
impl MemBlock<alloc::vec::Vec<u8>> {
    /// A zero-filled device of `len` bytes with 512-byte sectors.
    pub fn new(len: usize) -> Self {
        Self::from_backing(alloc::vec![0; len])
    }
}

impl<'a> MemBlock<&'a mut [u8]> {
    /// A device over a caller-provided buffer (fixed size, no allocation).
    pub fn from_slice(buf: &'a mut [u8]) -> Self {
        Self::from_backing(buf)
    }
}

impl<B: Backing> MemBlock<B> {
    /// A device over the given storage, with 512-byte sectors.
    pub fn from_backing(store: B) -> Self {
        MemBlock {
            store,
            sector_size: DEFAULT_SECTOR_SIZE,
        }
    }

    /// Sets the sector size (a power of two).
    pub fn with_sector_size(mut self, sector_size: u32) -> Result<Self> {
        if !sector_size.is_power_of_two() {
            return Err(DeviceError::BadGeometry {
                reason: "sector size must be a power of two",
            });
        }
        self.sector_size = sector_size;
        Ok(self)
    }

    /// The device's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.store.bytes()
    }

    /// The storage, for inspection or to build another device from.
    pub fn into_inner(self) -> B {
        self.store
    }

    fn range(&self, op: Op, offset: u64, len: usize) -> Result<core::ops::Range<usize>> {
        check_bounds(op, offset, len as u64, self.capacity())?;
        // In bounds of a slice, so the offset fits in usize.
        let start = offset as usize;
        Ok(start..start + len)
    }
}

impl<B: Backing> BlockDevice for MemBlock<B> {
    fn sector_size(&self) -> u32 {
        self.sector_size
    }

    fn capacity(&self) -> u64 {
        self.store.bytes().len() as u64
    }

    fn reads_from_memory(&self) -> bool {
        true
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.range(Op::Read, offset, buf.len())?;
        buf.copy_from_slice(&self.store.bytes()[r]);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.range(Op::Write, offset, data.len())?;
        self.store.bytes_mut()[r].copy_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn resize(&mut self, new_len: u64) -> Result<()> {
        let len = usize::try_from(new_len).map_err(|_| DeviceError::OutOfBounds {
            op: Op::Resize,
            offset: 0,
            len: new_len,
            capacity: usize::MAX as u64,
        })?;
        self.store.set_len(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_written_and_checks_bounds() {
        let mut dev = MemBlock::new(1024);
        dev.write(510, b"hello").unwrap();
        let mut buf = [0u8; 5];
        dev.read(510, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        let err = dev.write(1020, b"hello").unwrap_err();
        assert!(matches!(err, DeviceError::OutOfBounds { offset: 1020, .. }));
        assert!(dev.read(u64::MAX, &mut buf).is_err());
    }

    #[test]
    fn slice_backed_device_has_fixed_size() {
        let mut buf = [0u8; 512];
        let mut dev = MemBlock::from_slice(&mut buf);
        dev.write(0, &[7; 512]).unwrap();
        assert!(dev.resize(1024).is_err());
        dev.resize(512).unwrap();
        assert_eq!(buf[511], 7);
    }

    #[test]
    fn vec_backed_device_grows_with_zeros() {
        let mut dev = MemBlock::new(0);
        dev.resize(4096).unwrap();
        assert_eq!(dev.capacity(), 4096);
        assert!(dev.as_bytes().iter().all(|&b| b == 0));
    }
}
