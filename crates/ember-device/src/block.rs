//! The block-device contract.
//!
//! A block device is a flat array of bytes addressed by `u64` offsets and divided into sectors
//! (512 bytes unless the device says otherwise). The contract every implementation keeps, and
//! every engine may rely on:
//!
//! * **Sector atomicity.** The bytes of one aligned sector written by one `write` call reach the
//!   medium all together or not at all. A write that spans sectors may land any subset of them
//!   if power fails before the next `sync` returns.
//! * **Sync is a barrier.** When `sync` returns, every write issued before it is durable, and no
//!   write issued after it can reach the medium before the writes issued before it.
//! * **No promise between syncs.** Writes not yet covered by a `sync` may be lost in any
//!   combination; each sector ends up holding one of the images it had since the last sync
//!   (never bytes it was never given).
//! * **Reads see writes.** A read returns the latest bytes written, synced or not.
//!
//! Offsets and lengths need no alignment; sector alignment only matters for what survives a
//! crash.

use crate::error::Result;

/// The sector size of a device unless it says otherwise.
pub const DEFAULT_SECTOR_SIZE: u32 = 512;

/// A byte-addressed device with atomic sectors and a `sync` barrier (see the module docs for
/// the full contract).
pub trait BlockDevice {
    /// Size of the atomic unit of writing, in bytes (a power of two, at least 512 for real
    /// devices).
    fn sector_size(&self) -> u32;

    /// Current length of the device in bytes.
    fn capacity(&self) -> u64;

    /// Reads `buf.len()` bytes starting at `offset`.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Writes `data` starting at `offset`. Not durable until the next [`sync`](Self::sync).
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()>;

    /// Makes every write issued so far durable; a barrier for later writes.
    fn sync(&mut self) -> Result<()>;

    /// Changes the length of the device. New bytes read as zero. Devices of fixed size (raw
    /// block devices, caller-provided buffers) return [`DeviceError::Unsupported`] unless the
    /// length does not change.
    ///
    /// [`DeviceError::Unsupported`]: crate::DeviceError::Unsupported
    fn resize(&mut self, new_len: u64) -> Result<()>;

    /// Tells the device that `[offset, offset + len)` is about to be written, often and with
    /// syncs in between (a journal's ring, a table's new blocks). A device whose storage is
    /// allocated on first write — a sparse file — may allocate it now, in bigger pieces, so
    /// that later syncs do not also have to make an allocation durable. Never changes what
    /// the device holds; a range past the end is ignored. The default does nothing.
    fn prepare(&mut self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// [`prepare`](Self::prepare) for a range written front to back in small appends and
    /// synced in bulk, not after each append: a log whose commits are not each made
    /// durable. A device may lay it out for cheap appends at the price of a sync after one
    /// small write (a file device keeps it in 64 KiB pages of the page cache, see
    /// `FileBlock`'s "Page size"). The default is [`prepare`](Self::prepare).
    fn prepare_appends(&mut self, offset: u64, len: u64) {
        self.prepare(offset, len);
    }

    /// Whether reads are served from memory (RAM, a file mapping, memory-mapped flash), so
    /// that a read costs in proportion to its bytes rather than per call: an engine may then
    /// read the few hundred bytes it needs where it would otherwise read a whole block. The
    /// default, `false`, is right for a device where each read is an I/O.
    fn reads_from_memory(&self) -> bool {
        false
    }

    /// A second handle on this device that writes and syncs from another thread while the
    /// caller goes on using the device, or `None` (the default) where the device cannot be
    /// shared that way. See [`DeviceWriter`] for what the two may do at once.
    #[cfg(feature = "alloc")]
    fn writer(&mut self) -> Option<alloc::boxed::Box<dyn DeviceWriter>> {
        None
    }
}

/// A handle that writes to a device from another thread (see [`BlockDevice::writer`]).
///
/// While a handle is in use, the caller and the handle write disjoint byte ranges, and the
/// caller does not read a range the handle may still be writing; the caller does not
/// [`resize`](BlockDevice::resize) the device. The caller may
/// [`prepare`](BlockDevice::prepare) any range meanwhile, the handle's too: preparing never
/// changes what either wrote. A `sync` through either the device or the
/// handle is a barrier for every write that returned, through either, before it began; the
/// contract of the module docs holds for the writes of both together. A handle outliving
/// the device it came from writes to what the device was (the same file); callers do not
/// let it.
#[cfg(feature = "alloc")]
pub trait DeviceWriter: Send {
    /// Writes `data` starting at `offset`; not durable until a sync.
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()>;

    /// Makes every write issued so far, through the handle and through the device, durable.
    fn sync(&mut self) -> Result<()>;
}

/// Forwards the block-device contract through a pointer type.
macro_rules! forward_block_device {
    ($($ptr:ty),*) => {$(
        impl<D: BlockDevice + ?Sized> BlockDevice for $ptr {
            fn sector_size(&self) -> u32 {
                (**self).sector_size()
            }
            fn capacity(&self) -> u64 {
                (**self).capacity()
            }
            fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
                (**self).read(offset, buf)
            }
            fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
                (**self).write(offset, data)
            }
            fn sync(&mut self) -> Result<()> {
                (**self).sync()
            }
            fn resize(&mut self, new_len: u64) -> Result<()> {
                (**self).resize(new_len)
            }
            fn prepare(&mut self, offset: u64, len: u64) {
                (**self).prepare(offset, len)
            }
            fn prepare_appends(&mut self, offset: u64, len: u64) {
                (**self).prepare_appends(offset, len)
            }
            fn reads_from_memory(&self) -> bool {
                (**self).reads_from_memory()
            }
            #[cfg(feature = "alloc")]
            fn writer(&mut self) -> Option<alloc::boxed::Box<dyn DeviceWriter>> {
                (**self).writer()
            }
        }
    )*};
}

forward_block_device!(&mut D);
#[cfg(feature = "alloc")]
forward_block_device!(alloc::boxed::Box<D>);
