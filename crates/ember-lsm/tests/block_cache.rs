//! A point read keeps a data block it missed on the block's second miss in a while, not on
//! its first (the cache's doorkeeper): a block met once is read, searched where it lies and
//! dropped; a block met again is kept.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;

use ember_lsm::{Db, Options};

#[test]
fn a_point_read_keeps_a_data_block_on_its_second_miss() {
    let env = common::counting_env();
    let reads = env.reads.clone();
    // One table in level 0 (pinned: its index and filter are in RAM), blocks of 1 KiB.
    let opts = Options {
        memory_budget: 4 << 20,
        write_buffer: 1 << 20,
        table_size: 1 << 20,
        block_size: 1024,
        log_capacity: 1 << 20,
        ..common::tiny()
    };
    let db = Db::create(env, opts).unwrap();
    for i in 0..2000u32 {
        db.put(&i.to_be_bytes(), &[i as u8; 100], false).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(db.level_counts()[0], 1);
    let get = |i: u32| {
        let before = reads.load(Ordering::SeqCst);
        assert_eq!(db.get(&i.to_be_bytes()).unwrap().unwrap(), vec![i as u8; 100]);
        reads.load(Ordering::SeqCst) - before
    };
    let cache = || db.memory_usage().cache;
    // The first read loads the table's index and filter (pinned from then on).
    get(0);
    let empty = cache();
    // First miss: one read, nothing kept.
    assert_eq!(get(1000), 1);
    assert!(cache() - empty < 1024, "kept on a first miss");
    // Second: read again and kept; from then on no read, for any key of the block.
    assert_eq!(get(1000), 1);
    assert!(cache() - empty > 1024, "not kept on a second miss");
    assert_eq!(get(1000), 0);
    assert_eq!(get(1001), 0);
    // Keys all over the table, every value right: blocks met once are not kept (but for
    // the odd one that shares the doorkeeper's bit with a block missed before).
    let kept = cache();
    let read: u64 = (0..2000).step_by(50).map(get).sum();
    assert!(read >= 38, "{read} reads for 40 keys in 40 blocks, one of them kept");
    assert!(cache() - kept < 3 * 1200, "{} bytes kept", cache() - kept);
    // A missing key whose filter lets it through reads its block the same way.
    assert_eq!(db.get(&5000u32.to_be_bytes()).unwrap(), None);
}
