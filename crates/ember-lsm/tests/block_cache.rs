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
    // One table in level 0 (pinned: its index and filter are in RAM), blocks of 1 KiB, the
    // values in them.
    let opts = Options {
        memory_budget: 4 << 20,
        write_buffer: 1 << 20,
        table_size: 1 << 20,
        block_size: 1024,
        log_capacity: 1 << 20,
        separate_values: None,
        ..common::tiny()
    };
    let db = Db::create(env, opts).unwrap();
    // Even keys only, so odd ones are missing inside the table's range.
    for i in (0..4000u32).step_by(2) {
        db.put(&i.to_be_bytes(), &[i as u8; 100], false).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(db.level_counts()[0], 1);
    let get = |i: u32| {
        let before = reads.load(Ordering::SeqCst);
        assert_eq!(
            db.get(&i.to_be_bytes()).unwrap().unwrap(),
            vec![i as u8; 100]
        );
        reads.load(Ordering::SeqCst) - before
    };
    let cache = || db.memory_usage().cache;
    // The first read makes the doorkeeper's bits (the index and filter were pinned at the
    // flush).
    get(0);
    let empty = cache();
    // First miss: one read, nothing kept.
    assert_eq!(get(2000), 1);
    assert!(cache() - empty < 1024, "kept on a first miss");
    // Second: read again and kept; from then on no read, for any key of the block.
    assert_eq!(get(2000), 1);
    assert!(cache() - empty > 1024, "not kept on a second miss");
    assert_eq!(get(2000), 0);
    assert_eq!(get(2002), 0);
    // Keys all over the table, every value right: blocks met once are not kept (but for
    // the odd one that shares the doorkeeper's bit with a block missed before).
    let kept = cache();
    let read: u64 = (0..4000).step_by(100).map(get).sum();
    assert_eq!(read, 39, "40 keys in 40 blocks, one of them kept");
    assert!(cache() - kept < 3 * 1200, "{} bytes kept", cache() - kept);
    // Missing keys in the table's range: none found, whether their filter stops them or
    // their block is read (then searched where it was read).
    let before = reads.load(Ordering::SeqCst);
    for i in (1..4000u32).step_by(2) {
        assert_eq!(db.get(&i.to_be_bytes()).unwrap(), None);
    }
    assert!(
        reads.load(Ordering::SeqCst) > before,
        "no filter let a missing key through"
    );
}
