//! The devices a database can live on, behind one type.

use ember_device::file::{FileBlock, RawBlock};
use ember_device::{BlockDevice, DeviceError, MemBlock};

/// A file, a raw block device or memory.
#[derive(Debug)]
pub enum AnyDevice {
    /// A database file (a device image on a file system); boxed, as the largest.
    File(Box<FileBlock>),
    /// A raw block device or partition (`/dev/...`).
    Raw(RawBlock),
    /// Memory: gone when the connection closes.
    Memory(MemBlock<Vec<u8>>),
}

macro_rules! each {
    ($self:ident, $d:ident => $e:expr) => {
        match $self {
            AnyDevice::File($d) => $e,
            AnyDevice::Raw($d) => $e,
            AnyDevice::Memory($d) => $e,
        }
    };
}

impl BlockDevice for AnyDevice {
    fn sector_size(&self) -> u32 {
        each!(self, d => d.sector_size())
    }
    fn capacity(&self) -> u64 {
        each!(self, d => d.capacity())
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        each!(self, d => d.read(offset, buf))
    }
    fn write(&mut self, offset: u64, buf: &[u8]) -> Result<(), DeviceError> {
        each!(self, d => d.write(offset, buf))
    }
    fn sync(&mut self) -> Result<(), DeviceError> {
        each!(self, d => d.sync())
    }
    fn resize(&mut self, len: u64) -> Result<(), DeviceError> {
        each!(self, d => d.resize(len))
    }
    fn prepare(&mut self, offset: u64, len: u64) {
        each!(self, d => d.prepare(offset, len))
    }
    fn prepare_appends(&mut self, offset: u64, len: u64) {
        each!(self, d => d.prepare_appends(offset, len))
    }
    fn reads_from_memory(&self) -> bool {
        each!(self, d => d.reads_from_memory())
    }
    fn writer(&mut self) -> Option<Box<dyn ember_device::DeviceWriter>> {
        each!(self, d => d.writer())
    }
}
