//! The RAM cap: with one setting (`Options::with_budget`), memtables, the pinned index blocks
//! and bloom filters of levels 0 and 1, and the block cache (which also holds the indexes and
//! filters of deeper levels, loaded on demand) together stay within the budget through a
//! workload that fills several levels and reads all over them.

#![allow(clippy::unwrap_used)]

mod common;

use ember_device::SplitMix64;
use ember_lsm::Options;

#[test]
fn the_engine_stays_within_its_memory_budget() {
    let budget = 192 * 1024;
    let opts = Options {
        block_size: 1024,
        ..Options::with_budget(budget)
    };
    let (db, _) = common::fresh_on(16 << 20, opts);
    let mut rng = SplitMix64::new(1);
    let key = |i: u64| format!("user{:08}", (i * 2_654_435_761) % 1_000_000).into_bytes();
    let n = 12_000u64;
    let mut peak = 0;
    for i in 0..n {
        let v: Vec<u8> = (0..100 + rng.below(100)).map(|_| rng.byte()).collect();
        db.put(&key(i), &v, false).unwrap();
        if i % 500 == 0 {
            while db.step().unwrap() {}
            peak = peak.max(db.memory_usage().total());
        }
    }
    while db.step().unwrap() {}
    let counts = db.level_counts();
    assert!(
        counts.len() > 3 && counts[2] + counts[3] > 0,
        "deep levels: {counts:?}"
    );
    // Reads all over the key space load deep tables' indexes, filters and blocks.
    for j in 0..4000u64 {
        let i = rng.below(n);
        assert!(db.get(&key(i)).unwrap().is_some());
        if j % 250 == 0 {
            let scanned = db.iter_from(&key(i)).take(50).count();
            assert!(scanned > 0);
        }
        peak = peak.max(db.memory_usage().total());
    }
    let u = db.memory_usage();
    eprintln!("levels {counts:?}, peak {peak} of {budget} bytes, now {u:?}");
    assert!(u.cache > 4 * 1024, "the cache holds blocks: {u:?}");
    assert!(
        peak <= budget,
        "peak {peak} bytes over a budget of {budget}: {u:?}"
    );
    // Only levels 0 and 1 are pinned: the deep levels' metadata would not fit beside them.
    let all_meta: u64 = db
        .tables()
        .iter()
        .map(|(_, t)| t.index.len + t.bloom.len)
        .sum();
    assert!(
        (u.pinned as u64) < all_meta,
        "pinned {} of {all_meta} bytes of metadata",
        u.pinned
    );
}

/// One batch several times the write buffer (a bulk load in one transaction) does not stay
/// in RAM until the next write: the commit that brings it flushes it, and it reads back,
/// also after a reopen.
#[test]
fn a_batch_larger_than_the_write_buffer_does_not_stay_in_ram() {
    let budget = 192 * 1024;
    let opts = Options::with_budget(budget);
    let (db, root) = common::fresh_on(16 << 20, opts.clone());
    let key = |i: u64| format!("bulk{i:08}").into_bytes();
    let mut batch = ember_lsm::WriteBatch::new();
    let n = 4_000u64; // about 600 KiB of entries: 25 write buffers
    for i in 0..n {
        batch.put(key(i), vec![(i % 251) as u8; 120]);
    }
    db.write(batch, true).unwrap();
    let u = db.memory_usage();
    assert!(
        u.total() <= budget,
        "{} bytes held after the commit, over a budget of {budget}: {u:?}",
        u.total()
    );
    for i in (0..n).step_by(97) {
        assert_eq!(db.get(&key(i)).unwrap(), Some(vec![(i % 251) as u8; 120]));
    }
    assert_eq!(db.iter_from(b"bulk").count() as u64, n);
    let db = common::open(common::shut(db), &root, opts).unwrap();
    assert_eq!(db.iter_from(b"bulk").count() as u64, n);
    assert_eq!(
        db.get(&key(n - 1)).unwrap(),
        Some(vec![((n - 1) % 251) as u8; 120])
    );
}

/// Commits each larger than the write buffer (a bulk load in transactions of a thousand
/// 1 KB rows) leave level 0 as compactions keep it, not a table per commit: every read would
/// ask each of them. The same for explicit flushes.
#[test]
fn batches_larger_than_the_write_buffer_do_not_pile_up_in_level_0() {
    let opts = Options::with_budget(256 * 1024);
    let trigger = opts.l0_trigger;
    let (db, _) = common::fresh_on(64 << 20, opts);
    let key = |i: u64| (i * 2_654_435_761 % 1_000_003).to_be_bytes();
    let mut i = 0u64;
    for _ in 0..20 {
        let mut batch = ember_lsm::WriteBatch::new();
        for _ in 0..50 {
            batch.put(key(i), vec![(i % 251) as u8; 1000]);
            i += 1;
        }
        db.write(batch, false).unwrap();
        let counts = db.level_counts();
        assert!(
            counts[0] <= trigger,
            "{} level-0 tables after {i} rows, compactions start at {trigger}: {counts:?}",
            counts[0]
        );
    }
    for _ in 0..10 {
        db.put(&key(i), b"one", false).unwrap();
        i += 1;
        db.flush().unwrap();
        let counts = db.level_counts();
        assert!(counts[0] <= trigger, "after a flush: {counts:?}");
    }
    for j in (0..i).step_by(7) {
        assert!(db.get(&key(j)).unwrap().is_some(), "row {j}");
    }
}
