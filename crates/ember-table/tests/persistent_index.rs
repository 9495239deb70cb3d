//! The persistent primary index: open reads no data block, checkpoints write what changed,
//! and trees of several levels stay right through inserts, updates, deletes, checkpoints and
//! reopening.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ops::Bound;

use ember_device::{Accounted, MemBlock, SplitMix64};
use ember_table::{Column, Database, IndexKind, Mode, Options, Schema, TableError, Value};

fn schema(index: IndexKind, text_key: bool) -> Schema {
    Schema {
        columns: vec![
            Column {
                name: "k".into(),
                decl_type: if text_key { "TEXT" } else { "INTEGER" }.into(),
                not_null: true,
            },
            Column {
                name: "v".into(),
                decl_type: "BLOB".into(),
                not_null: false,
            },
        ],
        primary_key: vec![0],
        index,
    }
}

fn opts() -> Options {
    Options {
        mode: Mode::Metadata,
        ..Options::default()
    }
}

fn value(rng: &mut SplitMix64, n: usize) -> Value {
    Value::Blob((0..n).map(|_| rng.byte()).collect())
}

#[test]
fn open_reads_far_fewer_bytes_than_the_data() {
    let mut db = Database::create(MemBlock::new(64 << 20), opts()).unwrap();
    db.create_table("t", schema(IndexKind::Hash, false))
        .unwrap();
    let mut rng = SplitMix64::new(1);
    // Enough rows that the data outweighs the allocator's bitmaps of the 64 MiB device
    // (which open reads) well over twenty times.
    let n = 30_000;
    for chunk in 0..n / 1000 {
        db.begin().unwrap();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            db.insert("t", &[Value::Integer(i), value(&mut rng, 100)])
                .unwrap();
        }
        db.commit().unwrap();
    }
    let data = db.device_bytes_in_use();
    let dev = db.close().unwrap();
    let mut acc = Accounted::new(dev);
    let mut db = Database::open(&mut acc, opts()).unwrap();
    let read = db.device().stats().read_bytes;
    assert!(
        read * 20 < data,
        "open read {read} bytes of a database of {data} bytes"
    );
    assert_eq!(db.row_count("t").unwrap(), n as usize);
    // A lookup then reads the index pages on its path and its row's block (at most).
    let before = db.device().stats().read_bytes;
    assert!(db.get("t", &[Value::Integer(12_345)]).unwrap().is_some());
    let lookup = db.device().stats().read_bytes - before;
    assert!(lookup <= 4 * 4096 + 4096, "a lookup read {lookup} bytes");
    db.verify().unwrap();
}

#[test]
fn a_checkpoint_writes_what_changed_not_the_index() {
    let mut db = Database::create(Accounted::new(MemBlock::new(64 << 20)), opts()).unwrap();
    db.create_table("t", schema(IndexKind::Tree, false))
        .unwrap();
    let mut rng = SplitMix64::new(2);
    let n = 20_000;
    db.begin().unwrap();
    for i in 0..n {
        db.insert("t", &[Value::Integer(i), value(&mut rng, 100)])
            .unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    // Ten updates that move their rows: the checkpoint rewrites about ten leaves and their
    // paths, not the hundreds of pages of the index.
    for _ in 0..10 {
        let k = rng.below(n as u64) as i64;
        db.update("t", &[Value::Integer(k), value(&mut rng, 3000)])
            .unwrap();
    }
    let before = db.device().stats();
    db.checkpoint().unwrap();
    let written = db.device().stats().since(&before).write_bytes;
    assert!(written < 200 * 1024, "the checkpoint wrote {written} bytes");
    db.verify().unwrap();
}

/// A random workload against a model, with checkpoints and reopenings, on a table big enough
/// for a tree of three levels.
fn model_run(kind: IndexKind, text_key: bool, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let key = |i: i64| {
        if text_key {
            // Long keys: fewer entries per page, more levels.
            Value::Text(format!("{i:08}{}", "k".repeat(200)))
        } else {
            Value::Integer(i)
        }
    };
    let mut db = Database::create(MemBlock::new(64 << 20), opts()).unwrap();
    db.create_table("t", schema(kind, text_key)).unwrap();
    let mut model: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
    for round in 0..8 {
        db.begin().unwrap();
        for _ in 0..1500 {
            let i = rng.below(4000) as i64;
            let len = rng.below(60) as usize;
            let row = vec![key(i), value(&mut rng, len)];
            match rng.below(10) {
                0..=5 => {
                    if model.contains_key(&i) {
                        assert!(db.update("t", &row).unwrap());
                    } else {
                        db.insert("t", &row).unwrap();
                    }
                    model.insert(i, row);
                }
                _ => {
                    assert_eq!(
                        db.delete("t", &[key(i)]).unwrap(),
                        model.remove(&i).is_some()
                    );
                }
            }
        }
        if round == 3 {
            // Most rows go: pages empty out and merge, the tree gets lower.
            let keys: Vec<i64> = model.keys().copied().filter(|k| k % 5 != 0).collect();
            for i in keys {
                assert!(db.delete("t", &[key(i)]).unwrap());
                model.remove(&i);
            }
        }
        db.commit().unwrap();
        match round % 3 {
            0 => db.checkpoint().unwrap(),
            1 => {
                // Reopen without a checkpoint: the journal replays into the index.
                let bytes = db.device().as_bytes().to_vec();
                db = Database::open(MemBlock::from_backing(bytes), opts()).unwrap();
            }
            _ => {
                let dev = db.close().unwrap();
                db = Database::open(dev, opts()).unwrap();
            }
        }
        db.verify().unwrap();
        assert_eq!(db.row_count("t").unwrap(), model.len());
        let mut rows = db.scan("t").unwrap();
        // A hash index scans in storage order.
        rows.sort_by_key(|r| format!("{:?}", r[0]));
        let mut want: Vec<Vec<Value>> = model.values().cloned().collect();
        want.sort_by_key(|r| format!("{:?}", r[0]));
        assert_eq!(rows, want);
        for _ in 0..50 {
            let i = rng.below(4000) as i64;
            assert_eq!(db.get("t", &[key(i)]).unwrap(), model.get(&i).cloned());
        }
        let (lo, hi) = (rng.below(4000) as i64, rng.below(4000) as i64);
        let got = db
            .range(
                "t",
                Bound::Included(&[key(lo)]),
                Bound::Excluded(&[key(hi)]),
            )
            .unwrap();
        let want: Vec<Vec<Value>> = if lo < hi {
            model.range(lo..hi).map(|(_, r)| r.clone()).collect()
        } else {
            Vec::new()
        };
        assert_eq!(got, want);
    }
    // Dropping the table gives every index page back.
    db.drop_table("t").unwrap();
    db.checkpoint().unwrap();
    db.verify().unwrap();
    assert_eq!(db.device_bytes_in_use(), 0);
}

#[test]
fn tree_index_follows_a_model() {
    model_run(IndexKind::Tree, false, 3);
}

#[test]
fn hash_index_follows_a_model() {
    model_run(IndexKind::Hash, false, 4);
}

#[test]
fn long_keys_make_deeper_trees_that_follow_a_model() {
    model_run(IndexKind::Tree, true, 5);
}

#[test]
fn rowids_continue_after_reopening() {
    let mut db = Database::create(MemBlock::new(16 << 20), opts()).unwrap();
    let mut s = schema(IndexKind::Tree, false);
    s.primary_key.clear();
    db.create_table("r", s).unwrap();
    for _ in 0..10 {
        db.insert("r", &[Value::Integer(1), Value::Null]).unwrap();
    }
    let bytes = db.device().as_bytes().to_vec();
    let mut db = Database::open(MemBlock::from_backing(bytes), opts()).unwrap();
    assert_eq!(
        db.insert("r", &[Value::Integer(1), Value::Null]).unwrap(),
        Some(11)
    );
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts()).unwrap();
    assert_eq!(
        db.insert("r", &[Value::Integer(1), Value::Null]).unwrap(),
        Some(12)
    );
    db.verify().unwrap();
}

#[test]
fn keys_longer_than_the_index_holds_are_refused() {
    let mut db = Database::create(MemBlock::new(16 << 20), opts()).unwrap();
    db.create_table("t", schema(IndexKind::Hash, true)).unwrap();
    let long = Value::Text("x".repeat(17 * 1024));
    assert!(matches!(
        db.insert("t", &[long, Value::Null]),
        Err(TableError::Constraint(_))
    ));
    let ok = Value::Text("y".repeat(16 * 1000));
    db.insert("t", &[ok.clone(), Value::Null]).unwrap();
    db.checkpoint().unwrap();
    db.verify().unwrap();
    assert!(db.get("t", &[ok]).unwrap().is_some());
}
