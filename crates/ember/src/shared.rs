//! One table-engine database shared by the engines of a connection: the table engine's
//! tables, and the extents the other engines (the LSM tree) keep in the same device.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ember_device::BlockDevice;
use ember_sql::SqlError;
use ember_table::space::Extent;
use ember_table::{BlockRef, Database, ExtentSpace, TableError};

/// A handle on a [`Database`]; clones share it. The LSM tree's environment holds one, the
/// table storage another, so both engines allocate from the one space manager.
///
/// A transaction the SQL layer begins is begun in the table engine only when something
/// locks the database for it ([`SharedDb::lock`]): a statement that reads and writes only
/// the other engines' tables never takes the table engine's lock, which the LSM tree's
/// background thread holds while it allocates and syncs (see [`SharedDb::defer_begin`]).
#[derive(Debug)]
pub struct SharedDb<D: BlockDevice>(Arc<Shared<D>>);

#[derive(Debug)]
struct Shared<D: BlockDevice> {
    db: Mutex<Database<D>>,
    /// A transaction was begun for the SQL layer and not yet in the table engine.
    begin: AtomicBool,
}

impl<D: BlockDevice> Clone for SharedDb<D> {
    fn clone(&self) -> Self {
        SharedDb(Arc::clone(&self.0))
    }
}

const POISONED: &str = "a thread panicked while it held the database";

impl<D: BlockDevice> SharedDb<D> {
    /// Shares `db`.
    pub fn new(db: Database<D>) -> Self {
        SharedDb(Arc::new(Shared {
            db: Mutex::new(db),
            begin: AtomicBool::new(false),
        }))
    }

    /// Locks the database for the SQL layer, beginning the transaction
    /// [`defer_begin`](Self::defer_begin) deferred, if any.
    pub fn lock(&self) -> Result<MutexGuard<'_, Database<D>>, SqlError> {
        let mut db = self
            .0
            .db
            .lock()
            .map_err(|_| SqlError::Storage(POISONED.into()))?;
        // Deferred until begun: a failed begin leaves it deferred, so every later lock of
        // the transaction fails the same way rather than runs outside a transaction.
        if self.0.begin.load(Ordering::Acquire) {
            db.begin().map_err(|e| SqlError::Storage(e.to_string()))?;
            self.0.begin.store(false, Ordering::Release);
        }
        Ok(db)
    }

    /// Begins a transaction for the SQL layer at the next [`lock`](Self::lock), not now.
    /// Until then the table engine has no transaction open, which for everything the other
    /// engines ask of its space (allocations, frees, reads, writes, syncs) is what an empty
    /// one is; a transaction nothing locked the database for is over without the lock
    /// ([`end_deferred`](Self::end_deferred)).
    pub fn defer_begin(&self) -> Result<(), SqlError> {
        if self.0.begin.swap(true, Ordering::AcqRel) {
            return Err(SqlError::Storage(
                "table engine: a transaction is already open".into(),
            ));
        }
        Ok(())
    }

    /// Ends a deferred transaction that was never begun in the table engine: `true` if
    /// there was one (it held nothing to commit or take back), `false` if the transaction
    /// is the table engine's own now.
    pub fn end_deferred(&self) -> bool {
        self.0.begin.swap(false, Ordering::AcqRel)
    }

    /// Whether a transaction was begun for the SQL layer and not yet in the table engine.
    pub fn deferred(&self) -> bool {
        self.0.begin.load(Ordering::Acquire)
    }

    /// Locks the database for another engine's use of its space: a deferred transaction
    /// stays deferred.
    fn engine(&self) -> ember_table::Result<MutexGuard<'_, Database<D>>> {
        self.0.db.lock().map_err(|_| TableError::Invalid(POISONED))
    }

    /// The database, if this is the last handle.
    pub fn into_inner(self) -> Option<Database<D>> {
        Arc::into_inner(self.0).and_then(|s| s.db.into_inner().ok())
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
    fn prepare_appends_space(&mut self, offset: u64, len: u64) {
        if let Ok(mut db) = self.engine() {
            db.prepare_appends_space(offset, len);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ember_device::MemBlock;
    use ember_table::Options;

    fn shared() -> SharedDb<MemBlock<Vec<u8>>> {
        SharedDb::new(Database::create(MemBlock::new(8 << 20), Options::default()).unwrap())
    }

    /// A deferred transaction is begun by the first lock for the SQL layer, not by the other
    /// engines' use of the space, and ends without the lock if nothing locked the database.
    #[test]
    fn a_deferred_transaction_begins_at_the_first_lock() {
        let s = shared();
        s.defer_begin().unwrap();
        assert!(s.deferred());
        // Twice is an error, as a second BEGIN is in the table engine.
        assert!(s.defer_begin().is_err());
        // The space's own users leave it deferred.
        let mut space = s.clone();
        let ext = space.allocate_extents_unsynced(4096).unwrap();
        space.free_extents(&ext).unwrap();
        assert!(s.deferred());
        // Never locked: over without the table engine.
        assert!(s.end_deferred());
        assert!(!s.deferred());
        assert!(s.lock().unwrap().begin().is_ok(), "no transaction was open");
        s.lock().unwrap().rollback().unwrap();

        // Locked: begun in the table engine, which then owns it.
        s.defer_begin().unwrap();
        let mut db = s.lock().unwrap();
        assert!(!s.deferred());
        assert!(db.begin().is_err(), "the lock began the transaction");
        db.commit().unwrap();
        drop(db);
        assert!(!s.end_deferred());
    }
}
