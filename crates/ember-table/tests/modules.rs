//! The optional modules (Cargo features): each does its job when on, and the basic engine
//! keeps no clean block in RAM when the buffer is off.

#![allow(clippy::unwrap_used)]

use ember_device::{Accounted, MemBlock};
use ember_table::{Database, IndexKind, Mode, Options, Schema, Value};

type Dev = Accounted<MemBlock<Vec<u8>>>;

fn db(buffer_bytes: usize) -> Database<Dev> {
    let opts = Options {
        mode: Mode::Metadata,
        buffer_bytes,
        block_size: 4096,
        ..Options::default()
    };
    let mut db = Database::create(Accounted::new(MemBlock::new(16 << 20)), opts).unwrap();
    let schema = Schema::key_value("INTEGER", "TEXT", IndexKind::Hash);
    db.create_table("t", schema).unwrap();
    db.begin().unwrap();
    for i in 0..2000 {
        db.insert("t", &[Value::Integer(i), Value::Text("x".repeat(100))])
            .unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    db
}

/// `db` closed and opened again: nothing of it in RAM.
#[cfg(feature = "prefetch")]
fn cold(db: Database<Dev>) -> Database<Dev> {
    let opts = Options {
        mode: Mode::Metadata,
        buffer_bytes: db.buffer_budget(),
        block_size: 4096,
        ..Options::default()
    };
    Database::open(db.close().unwrap(), opts).unwrap()
}

#[cfg(any(feature = "buffer", feature = "query-cache", feature = "prefetch"))]
fn reads(db: &mut Database<Dev>) -> u64 {
    db.device().stats().reads
}

#[cfg(feature = "buffer")]
#[test]
fn the_buffer_keeps_recent_blocks_within_its_budget() {
    let mut db = db(64 * 1024);
    // A block's first point read takes its row alone; the second brings the block in.
    db.get("t", &[Value::Integer(5)]).unwrap();
    db.get("t", &[Value::Integer(6)]).unwrap(); // same block
    let before = reads(&mut db);
    db.get("t", &[Value::Integer(7)]).unwrap(); // same block
    assert_eq!(reads(&mut db), before, "a buffered block is not read again");
    db.scan("t").unwrap();
    assert!(db.buffered_bytes() <= 64 * 1024);
}

#[cfg(not(feature = "buffer"))]
#[test]
fn without_the_buffer_no_clean_block_stays() {
    let mut db = db(1 << 20);
    db.scan("t").unwrap();
    assert_eq!(db.buffered_bytes(), 0);
}

#[cfg(feature = "query-cache")]
#[test]
fn the_query_cache_serves_repeats_and_forgets_writes() {
    let mut db = db(0);
    // A row is kept the second time its key misses, not the first.
    let before = reads(&mut db);
    db.get("t", &[Value::Integer(9)]).unwrap();
    db.get("t", &[Value::Integer(9)]).unwrap();
    assert!(reads(&mut db) > before);
    let before = reads(&mut db);
    let row = db.get("t", &[Value::Integer(9)]).unwrap();
    assert_eq!(reads(&mut db), before);
    assert_eq!(db.query_cache_stats().0, 1);
    db.update("t", &[Value::Integer(9), Value::Text("new".into())])
        .unwrap();
    let after = db.get("t", &[Value::Integer(9)]).unwrap();
    assert_ne!(row, after);
    assert_eq!(
        after,
        Some(vec![Value::Integer(9), Value::Text("new".into())])
    );
    db.begin().unwrap();
    db.update("t", &[Value::Integer(9), Value::Text("rolled back".into())])
        .unwrap();
    db.get("t", &[Value::Integer(9)]).unwrap();
    db.rollback().unwrap();
    assert_eq!(db.get("t", &[Value::Integer(9)]).unwrap(), after);
}

/// On a device whose reads are I/Os (here a file read with `pread`, its mapping off), the
/// prefetcher reads a scan's blocks in runs, one request each. (On a device that reads from
/// memory it copies each block into its own buffer instead: there is no I/O to save.)
#[cfg(feature = "prefetch")]
#[test]
fn the_prefetcher_reads_a_scan_in_few_large_requests() {
    use ember_device::BlockDevice;
    use ember_device::file::FileBlock;
    let db = db(4 << 20);
    let blocks = db.device_bytes_in_use() / 4096;
    let mut mem = db.close().unwrap();
    let mut bytes = vec![0u8; mem.capacity() as usize];
    mem.read(0, &mut bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ember");
    std::fs::write(&path, bytes).unwrap();
    let file = FileBlock::open(&path).unwrap().with_mapping(false);
    let opts = Options {
        mode: Mode::Metadata,
        buffer_bytes: 4 << 20,
        block_size: 4096,
        ..Options::default()
    };
    let mut db = Database::open(Accounted::new(file), opts).unwrap();
    let before = db.device().stats().reads;
    let rows = db.scan("t").unwrap();
    assert_eq!(rows.len(), 2000);
    let used = db.device().stats().reads - before;
    // Runs of up to 64 KiB (16 blocks), after the window's first doublings; the index
    // pages' reads come on top. Without read-ahead it would be a read a block.
    assert!(used * 3 < blocks, "{used} reads for {blocks} blocks");
}

/// A scan read a few rows a call, each call going on from the last key of the one before
/// (as the SQL layer reads a full scan), keeps the read-ahead window it grew: the blocks
/// still come in a few large reads, not in runs of 1, 2, 4 each call.
#[cfg(feature = "prefetch")]
#[test]
fn a_scan_resumed_call_after_call_keeps_reading_ahead() {
    use ember_table::{Order, ValueRef};
    use std::ops::Bound;
    // What one call reading the whole range costs.
    let mut db = cold(db(4 << 20));
    let before = reads(&mut db);
    db.range_visit(
        "t",
        Bound::Unbounded,
        Bound::Unbounded,
        Order::asc(None),
        |_| Ok(()),
    )
    .unwrap();
    let whole = reads(&mut db) - before;
    let mut db = cold(db);
    let before = reads(&mut db);
    let mut last: Option<i64> = None;
    let mut seen = Vec::new();
    loop {
        let lo = last.map(|k| [Value::Integer(k)]);
        let lo = match &lo {
            Some(k) => Bound::Excluded(&k[..]),
            None => Bound::Unbounded,
        };
        let n = seen.len();
        db.range_visit("t", lo, Bound::Unbounded, Order::asc(Some(50)), |mut r| {
            if let Some(Ok(ValueRef::Integer(k))) = r.next() {
                seen.push(k);
            }
            Ok(())
        })
        .unwrap();
        if seen.len() == n {
            break;
        }
        last = seen.last().copied();
    }
    assert_eq!(seen, (0..2000).collect::<Vec<i64>>());
    let used = reads(&mut db) - before;
    assert!(
        used <= whole + 2,
        "{used} reads in calls of 50 rows, {whole} in one call"
    );
}
