//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ember_device::{BlockDevice, MemBlock};
use ember_lsm::{BlobId, Db, Env, Options, Result, SpaceEnv};
use ember_table::{FormatOptions, SpaceManager};

/// Options small enough that a few hundred operations flush, compact and fill several levels;
/// values of 32 bytes or more go to value blobs.
pub fn tiny() -> Options {
    Options {
        memory_budget: 256 * 1024,
        write_buffer: 2048,
        table_size: 1024,
        block_size: 256,
        bloom_bits_per_key: 10,
        l0_trigger: 2,
        level1_bytes: 2048,
        level_multiplier: 2,
        pinned_levels: 2,
        log_capacity: 4096,
        prefix_rule: None,
        separate_values: Some(32),
    }
}

/// A database on a RAM device.
pub type MemDb = Db<SpaceEnv<SpaceManager<MemBlock<Vec<u8>>>>>;

/// A fresh database on a RAM device; returns it with its root locator.
pub fn fresh(opts: Options) -> (MemDb, Vec<u8>) {
    fresh_on(8 << 20, opts)
}

/// [`fresh`] on a device of `bytes`.
pub fn fresh_on(bytes: usize, opts: Options) -> (MemDb, Vec<u8>) {
    let sm = SpaceManager::format(MemBlock::new(bytes), FormatOptions::default()).unwrap();
    let env = SpaceEnv::create(sm, 64 * 1024).unwrap();
    let root = env.root_locator();
    (Db::create(env, opts).unwrap(), root)
}

/// Opens a database from a device and its root locator.
pub fn open<D: BlockDevice>(
    dev: D,
    root: &[u8],
    opts: Options,
) -> ember_lsm::Result<Db<SpaceEnv<SpaceManager<D>>>> {
    let sm = SpaceManager::open(dev)?;
    Db::open(SpaceEnv::open(sm, root)?, opts)
}

/// Closes a database and the space manager under it and returns the device.
pub fn shut<D: BlockDevice>(db: Db<SpaceEnv<SpaceManager<D>>>) -> D {
    db.close().unwrap().into_space().close().unwrap()
}

/// A database on a borrowed RAM device.
pub type MemDbOn<'a> = Db<SpaceEnv<SpaceManager<&'a mut MemBlock<Vec<u8>>>>>;

/// An environment that counts its syncs, its reads and the bytes they read, makes each
/// sync take `delay` (as a real device's does), and fails its syncs while `failing` is set.
pub struct Counting<E> {
    pub inner: E,
    pub syncs: Arc<AtomicU64>,
    pub reads: Arc<AtomicU64>,
    pub read_bytes: Arc<AtomicU64>,
    pub delay: Duration,
    pub failing: Arc<AtomicBool>,
    /// While above zero, every third blob the background thread creates fails with a full
    /// table-engine journal (a transient error), counting this down.
    pub journal_full: Arc<AtomicU64>,
    /// While set, a blob the background thread creates panics instead.
    pub panic_in_job: Arc<AtomicBool>,
    /// Blobs created and not removed.
    pub live: Arc<std::sync::Mutex<std::collections::BTreeSet<BlobId>>>,
    /// Creates by the background thread so far.
    pub job_creates: u64,
    /// The blobs the engine readied ([`Env::ready`]), in order.
    pub readied: Arc<std::sync::Mutex<Vec<BlobId>>>,
    /// The blobs the engine readied for appends ([`Env::ready_appends`]), in order.
    pub appended: Arc<std::sync::Mutex<Vec<BlobId>>>,
    /// Writes and syncs in order: `'R'` a root slot's write (a manifest snapshot), `'W'` any
    /// other write, `'S'` a sync.
    pub events: Arc<std::sync::Mutex<Vec<char>>>,
}

/// A counting environment over a fresh space manager on a RAM device.
pub fn counting_env() -> Counting<SpaceEnv<SpaceManager<MemBlock<Vec<u8>>>>> {
    let sm = SpaceManager::format(MemBlock::new(8 << 20), FormatOptions::default()).unwrap();
    Counting::new(SpaceEnv::create(sm, 64 * 1024).unwrap())
}

impl<E> Counting<E> {
    /// Counts for `inner`, with syncs as fast as its own.
    pub fn new(inner: E) -> Self {
        Counting {
            inner,
            syncs: Arc::default(),
            reads: Arc::default(),
            read_bytes: Arc::default(),
            delay: Duration::ZERO,
            failing: Arc::default(),
            journal_full: Arc::default(),
            panic_in_job: Arc::default(),
            live: Arc::default(),
            readied: Arc::default(),
            appended: Arc::default(),
            events: Arc::default(),
            job_creates: 0,
        }
    }
}

impl<E: Env> Counting<E> {
    /// The faults asked for, on every third blob the background thread creates.
    fn inject(&mut self) -> Result<()> {
        if std::thread::current().name() == Some("ember-lsm-background") {
            assert!(
                !self.panic_in_job.load(Ordering::SeqCst),
                "a panic the test asked for"
            );
            self.job_creates += 1;
            if self.job_creates.is_multiple_of(3)
                && self
                    .journal_full
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err(ember_lsm::LsmError::Space(
                    ember_table::TableError::JournalFull {
                        needed: 1,
                        capacity: 0,
                    },
                ));
            }
        }
        Ok(())
    }
}

impl<E: Env> Env for Counting<E> {
    fn create(&mut self, id: BlobId, capacity: u64) -> Result<Vec<u8>> {
        self.inject()?;
        let locator = self.inner.create(id, capacity)?;
        self.live.lock().unwrap().insert(id);
        Ok(locator)
    }
    fn ready(&mut self, id: BlobId) -> Result<()> {
        self.readied.lock().unwrap().push(id);
        self.inner.ready(id)
    }
    fn ready_appends(&mut self, id: BlobId) -> Result<()> {
        self.appended.lock().unwrap().push(id);
        self.inner.ready_appends(id)
    }
    fn open(&mut self, id: BlobId, locator: &[u8]) -> Result<()> {
        self.inner.open(id, locator)?;
        self.live.lock().unwrap().insert(id);
        Ok(())
    }
    fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()> {
        let e = if ember_lsm::env::ROOT_SLOTS.contains(&id) {
            'R'
        } else {
            'W'
        };
        self.events.lock().unwrap().push(e);
        self.inner.write(id, offset, data)
    }
    fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.read_bytes
            .fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.inner.read(id, offset, buf)
    }
    fn capacity(&self, id: BlobId) -> Result<u64> {
        self.inner.capacity(id)
    }
    fn sync(&mut self) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(ember_lsm::LsmError::Io {
                op: "sync",
                path: "counting environment".into(),
                message: "a failure the test asked for".into(),
            });
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.events.lock().unwrap().push('S');
        self.inner.sync()
    }
    fn remove(&mut self, id: BlobId) -> Result<()> {
        self.inner.remove(id)?;
        self.live.lock().unwrap().remove(&id);
        Ok(())
    }
}
