//! Where pages live: any flash device of `ember-device`, or a block device (an extent the
//! space manager gave out).
//!
//! The engine only ever writes whole pages into slots that hold nothing live, so it needs
//! little from the medium:
//!
//! * **Flash** ([`FlashStore`]): a slot must be erased before it is written. The engine erases
//!   a whole erase unit when its write point enters it (which is ahead of every later write
//!   in that unit) and never writes a slot twice between erases, so both write rules of
//!   `ember-device` (AND-rewrite NOR, write-once) are kept. A write or erase that returned is
//!   durable on a raw part; the engine calls `sync` after each one anyway, which is free there
//!   and makes flash built on a cached block device (`FlashOnBlock`) behave the same.
//! * **Block** ([`BlockStore`]): slots are overwritten in place, nothing is erased. Writes are
//!   durable only after `sync`; the engine syncs after every page (the default) or at every
//!   erase-unit boundary (see `Config::sync_every_page`), so what a power cut can lose is
//!   bounded, and recovery invalidates pages it cannot prove were written before it.

use ember_device::{BlockDevice, DeviceError, FlashDevice};

/// The geometry the engine needs from a storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes addressable.
    pub capacity: u64,
    /// Reads must be aligned to, and a multiple of, this many bytes.
    pub read_size: u32,
    /// Writes must be aligned to, and a multiple of, this many bytes.
    pub write_size: u32,
    /// Erases must cover whole units of this many bytes (1 on block devices).
    pub erase_size: u32,
    /// The value erased bytes read as; `None` when the medium needs no erase (a block device:
    /// slots are overwritten in place).
    pub erase_value: Option<u8>,
}

/// A page-accessible medium the engine stores its areas on.
pub trait Storage {
    /// The medium's geometry.
    fn geometry(&self) -> Geometry;
    /// Reads `buf.len()` bytes at `addr`.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError>;
    /// Writes `data` at `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError>;
    /// Erases `[addr, addr + len)` (whole erase units); a no-op where nothing needs erasing.
    fn erase(&mut self, addr: u64, len: u64) -> Result<(), DeviceError>;
    /// Makes every completed write durable.
    fn sync(&mut self) -> Result<(), DeviceError>;
}

impl<T: Storage + ?Sized> Storage for &mut T {
    fn geometry(&self) -> Geometry {
        (**self).geometry()
    }
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        (**self).read(addr, buf)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        (**self).write(addr, data)
    }
    fn erase(&mut self, addr: u64, len: u64) -> Result<(), DeviceError> {
        (**self).erase(addr, len)
    }
    fn sync(&mut self) -> Result<(), DeviceError> {
        (**self).sync()
    }
}

/// Pages on a flash device (raw NOR, NAND, DataFlash, the simulator, or flash on a block
/// device).
#[derive(Debug)]
pub struct FlashStore<F>(pub F);

impl<F> FlashStore<F> {
    /// The flash device.
    pub fn into_inner(self) -> F {
        self.0
    }

    /// The flash device, borrowed.
    pub fn device(&mut self) -> &mut F {
        &mut self.0
    }
}

impl<F: FlashDevice> Storage for FlashStore<F> {
    fn geometry(&self) -> Geometry {
        let g = self.0.geometry();
        Geometry {
            capacity: g.capacity,
            read_size: g.read_size,
            write_size: g.write_size,
            erase_size: g.erase_size,
            erase_value: Some(g.erase_value),
        }
    }
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.0.read(addr, buf)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.0.write(addr, data)
    }
    fn erase(&mut self, addr: u64, len: u64) -> Result<(), DeviceError> {
        self.0.erase(addr, len)
    }
    fn sync(&mut self) -> Result<(), DeviceError> {
        self.0.sync()
    }
}

/// Pages on a block device: a file, a raw partition, memory, or an extent of a database.
#[derive(Debug)]
pub struct BlockStore<D>(pub D);

impl<D> BlockStore<D> {
    /// The block device.
    pub fn into_inner(self) -> D {
        self.0
    }

    /// The block device, borrowed.
    pub fn device(&mut self) -> &mut D {
        &mut self.0
    }
}

impl<D: BlockDevice> Storage for BlockStore<D> {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.0.capacity(),
            read_size: 1,
            write_size: 1,
            erase_size: 1,
            erase_value: None,
        }
    }
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.0.read(addr, buf)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.0.write(addr, data)
    }
    fn erase(&mut self, _addr: u64, _len: u64) -> Result<(), DeviceError> {
        Ok(())
    }
    fn sync(&mut self) -> Result<(), DeviceError> {
        self.0.sync()
    }
}
