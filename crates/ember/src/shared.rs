//! One table-engine database shared by the engines of a connection: the table engine's
//! tables, and the extents the other engines (the LSM tree) keep in the same device.

use std::sync::{Arc, Mutex, MutexGuard};

use ember_device::BlockDevice;
use ember_sql::SqlError;
use ember_table::space::Extent;
use ember_table::{BlockRef, Database, ExtentSpace, TableError};

/// A handle on a [`Database`]; clones share it. The LSM tree's environment holds one, the
/// table storage another, so both engines allocate from the one space manager.
#[derive(Debug)]
pub struct SharedDb<D: BlockDevice>(Arc<Mutex<Database<D>>>);

impl<D: BlockDevice> Clone for SharedDb<D> {
    fn clone(&self) -> Self {
        SharedDb(Arc::clone(&self.0))
    }
}

const POISONED: &str = "a thread panicked while it held the database";

impl<D: BlockDevice> SharedDb<D> {
    /// Shares `db`.
    pub fn new(db: Database<D>) -> Self {
        SharedDb(Arc::new(Mutex::new(db)))
    }

    /// Locks the database for the caller.
    pub fn lock(&self) -> Result<MutexGuard<'_, Database<D>>, SqlError> {
        self.0
            .lock()
            .map_err(|_| SqlError::Storage(POISONED.into()))
    }

    fn engine(&self) -> ember_table::Result<MutexGuard<'_, Database<D>>> {
        self.0.lock().map_err(|_| TableError::Invalid(POISONED))
    }

    /// The database, if this is the last handle.
    pub fn into_inner(self) -> Option<Database<D>> {
        Arc::into_inner(self.0).and_then(|m| m.into_inner().ok())
    }
}

impl<D: BlockDevice> ExtentSpace for SharedDb<D> {
    fn allocate_extents(&mut self, bytes: u64) -> ember_table::Result<Vec<Extent>> {
        self.engine()?.allocate_extents(bytes)
    }
    fn allocate_extents_unsynced(&mut self, bytes: u64) -> ember_table::Result<Vec<Extent>> {
        self.engine()?.allocate_extents_unsynced(bytes)
    }
    fn free_extents(&mut self, extents: &[Extent]) -> ember_table::Result<()> {
        self.engine()?.free_extents(extents)
    }
    fn allocated_extent(&self, block: BlockRef) -> Option<Extent> {
        self.engine().ok()?.allocated_extent(block)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> ember_table::Result<()> {
        self.engine()?.read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> ember_table::Result<()> {
        self.engine()?.write_at(offset, data)
    }
    fn write_at_once(&mut self, offset: u64, data: &[u8]) -> ember_table::Result<()> {
        self.engine()?.write_at_once(offset, data)
    }
    fn sync_space(&mut self) -> ember_table::Result<()> {
        self.engine()?.sync_space()
    }
    fn device_writer(&mut self) -> Option<Box<dyn ember_device::DeviceWriter>> {
        self.engine().ok()?.device_writer()
    }
    fn prepare_space(&mut self, offset: u64, len: u64) {
        if let Ok(mut db) = self.engine() {
            db.prepare_space(offset, len);
        }
    }
}
