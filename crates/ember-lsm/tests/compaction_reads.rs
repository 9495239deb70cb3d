//! Compaction reads its input tables' data blocks in runs: one read of the environment for
//! many adjacent blocks, as a scan does, not one read per block.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;

use ember_device::MemBlock;
use ember_lsm::{Db, Options, SpaceEnv};
use ember_table::{FormatOptions, SpaceManager};

#[test]
fn a_compaction_reads_runs_of_data_blocks() {
    let sm = SpaceManager::format(MemBlock::new(32 << 20), FormatOptions::default()).unwrap();
    let env = common::Counting::new(SpaceEnv::create(sm, 64 * 1024).unwrap());
    let (reads, bytes) = (env.reads.clone(), env.read_bytes.clone());
    let opts = Options {
        write_buffer: 16 << 10,
        table_size: 64 << 10,
        block_size: 512,
        l0_trigger: 4,
        level1_bytes: 256 << 10,
        separate_values: None,
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
