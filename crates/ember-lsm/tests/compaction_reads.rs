//! Compaction reads its input tables' data blocks in runs: one read of the environment for
//! many adjacent blocks, as a scan does, not one read per block.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ember_device::MemBlock;
use ember_lsm::{BlobId, Db, Env, Options, Result, SpaceEnv};
use ember_table::{FormatOptions, SpaceManager};

/// Counts reads and the bytes they read.
struct Counting<E> {
    inner: E,
    reads: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl<E: Env> Env for Counting<E> {
    fn create(&mut self, id: BlobId, capacity: u64) -> Result<Vec<u8>> {
        self.inner.create(id, capacity)
    }
    fn open(&mut self, id: BlobId, locator: &[u8]) -> Result<()> {
        self.inner.open(id, locator)
    }
    fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write(id, offset, data)
    }
    fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.bytes.fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.inner.read(id, offset, buf)
    }
    fn capacity(&self, id: BlobId) -> Result<u64> {
        self.inner.capacity(id)
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn remove(&mut self, id: BlobId) -> Result<()> {
        self.inner.remove(id)
    }
}

#[test]
fn a_compaction_reads_runs_of_data_blocks() {
    let reads = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let sm = SpaceManager::format(MemBlock::new(32 << 20), FormatOptions::default()).unwrap();
    let env = Counting {
        inner: SpaceEnv::create(sm, 64 * 1024).unwrap(),
        reads: reads.clone(),
        bytes: bytes.clone(),
    };
    let opts = Options {
        write_buffer: 16 << 10,
        table_size: 64 << 10,
        block_size: 512,
        l0_trigger: 4,
        level1_bytes: 256 << 10,
        ..common::tiny()
    };
    let db = Db::create(env, opts).unwrap();
    // Writes alone read nothing but what the compactions they bring read.
    let mut x = 1u64;
    for _ in 0..6_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        db.put(&(x >> 16).to_be_bytes(), &[b'v'; 100], false)
            .unwrap();
    }
    db.flush().unwrap();
    let (n, b) = (reads.load(Ordering::SeqCst), bytes.load(Ordering::SeqCst));
    assert!(n > 0, "no compaction ran");
    // Blocks are 512 bytes (a little more with their trailers); a compaction that read
    // them one at a time would average under 1 KiB a read, index blocks included.
    assert!(
        b / n >= 4096,
        "{n} reads of {b} bytes: {} bytes a read",
        b / n
    );
    // Everything is still there.
    assert_eq!(db.iter().count(), 6_000);
}
