//! Scans read the primary index a chunk at a time: ranges of every kind, in either order and
//! with limits, agree with a model across chunk boundaries, with rows checkpointed into the
//! index tree and rows only in its overlay; a corrupt tuple met on the way is an error.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ops::Bound;

use ember_device::{Accounted, BlockDevice, MemBlock};
use ember_table::{Database, IndexKind, Mode, Options, Order, Schema, Value};
use proptest::prelude::*;

fn opts() -> Options {
    Options {
        mode: Mode::Metadata,
        ..Options::default()
    }
}

/// Row `k`'s value in version `v`: mostly short, now and then past the inline limit (an
/// overflow row in the middle of a block's run of rows).
fn text(k: i64, v: u32) -> String {
    let n = if (k + i64::from(v)) % 211 == 0 {
        20_000
    } else {
        (k % 50) as usize
    };
    format!("{k}/{v}/{}", "z".repeat(n))
}

#[derive(Debug, Clone)]
enum Op {
    Put(i64, u32),
    Delete(i64),
}

fn ops(n: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            4 => (0i64..3000, any::<u32>()).prop_map(|(k, v)| Op::Put(k, v)),
            1 => (0i64..3000).prop_map(Op::Delete),
        ],
        0..n,
    )
}

fn run(db: &mut Database<MemBlock<Vec<u8>>>, model: &mut BTreeMap<i64, String>, ops: &[Op]) {
    db.begin().unwrap();
    for op in ops {
        apply(db, model, op);
    }
    db.commit().unwrap();
}

fn bound() -> impl Strategy<Value = Bound<i64>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => (-5i64..3005).prop_map(Bound::Included),
        2 => (-5i64..3005).prop_map(Bound::Excluded),
    ]
}

fn values(b: Bound<i64>) -> Bound<Vec<Value>> {
    b.map(|k| vec![Value::Integer(k)])
}

fn as_slice(b: &Bound<Vec<Value>>) -> Bound<&[Value]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn rows(model: &BTreeMap<i64, String>, keys: impl Iterator<Item = i64>) -> Vec<Vec<Value>> {
    keys.map(|k| vec![Value::Integer(k), Value::Text(model[&k].clone())])
        .collect()
}

type Query = (Bound<i64>, Bound<i64>, bool, Option<usize>);

fn check(
    db: &mut Database<MemBlock<Vec<u8>>>,
    model: &BTreeMap<i64, String>,
    kind: IndexKind,
    q: &Query,
) {
    let (lo, hi, desc, limit) = *q;
    let order = Order {
        keyed: true,
        desc,
        limit,
    };
    let (l, h) = (values(lo), values(hi));
    let got = db
        .range_with("t", as_slice(&l), as_slice(&h), order)
        .unwrap();
    // Empty when the bounds cross, or meet with one of them excluded (the model's
    // `BTreeMap::range` panics on a key excluded at both ends).
    let empty = match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    };
    let mut keys: Vec<i64> = if empty {
        Vec::new()
    } else {
        model.range((lo, hi)).map(|(k, _)| *k).collect()
    };
    if desc {
        keys.reverse();
    }
    keys.truncate(limit.unwrap_or(usize::MAX));
    assert_eq!(got, rows(model, keys.into_iter()), "{kind:?} {q:?}");
    // Unkeyed: a hash index's full range comes in storage order.
    let all = db
        .range_with(
            "t",
            Bound::Unbounded,
            Bound::Unbounded,
            Order {
                keyed: false,
                desc,
                limit,
            },
        )
        .unwrap();
    assert_eq!(all.len(), model.len().min(limit.unwrap_or(usize::MAX)));
    if limit.is_none() {
        let mut sorted = all;
        sorted.sort_by_key(|r| match r[0] {
            Value::Integer(k) => k,
            _ => i64::MIN,
        });
        assert_eq!(sorted, rows(model, model.keys().copied()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// More rows than a chunk holds, some checkpointed into the index tree, some since
    /// (updates, deletions of checkpointed rows, new rows between them) only in its overlay.
    #[test]
    fn ranges_match_a_model(
        hash in any::<bool>(),
        before in ops(2600),
        after in ops(900),
        queries in proptest::collection::vec(
            (bound(), bound(), any::<bool>(),
             prop_oneof![2 => Just(None), 1 => (0usize..1500).prop_map(Some)]),
            1..6,
        ),
    ) {
        let kind = if hash { IndexKind::Hash } else { IndexKind::Tree };
        let (mut db, mut model) = checkpointed(kind, &before);
        run(&mut db, &mut model, &after);
        let full = (Bound::Unbounded, Bound::Unbounded, false, None);
        check(&mut db, &model, kind, &full);
        for q in &queries {
            check(&mut db, &model, kind, q);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A scan read a few rows a call, each call going on from the last key the one before
    /// returned (as the SQL layer reads a full scan; the engine then serves entries it read
    /// ahead), sees the table as it is at each call: rows put and deleted between calls,
    /// ahead of the scan and behind it, committed, checkpointed or still in a transaction.
    #[test]
    fn a_scan_resumed_between_changes_sees_each_change(
        hash in any::<bool>(),
        before in ops(2000),
        steps in proptest::collection::vec((1usize..300, ops(40), 0u8..4), 1..40),
    ) {
        let kind = if hash { IndexKind::Hash } else { IndexKind::Tree };
        let (mut db, mut model) = checkpointed(kind, &before);
        let mut last: Option<i64> = None;
        for (limit, change, how) in &steps {
            last = next_rows(&mut db, &model, last, *limit)?;
            match how {
                0 => run(&mut db, &mut model, change),
                1 => {
                    run(&mut db, &mut model, change);
                    db.checkpoint().unwrap();
                }
                2 => {
                    // Changes in a transaction still open during the next call.
                    db.begin().unwrap();
                    for op in change {
                        apply(&mut db, &mut model, op);
                    }
                    last = next_rows(&mut db, &model, last, *limit)?;
                    db.commit().unwrap();
                }
                _ => {} // no change
            }
        }
    }
}

/// A database of one table `t` with `ops` applied and checkpointed, and its model.
fn checkpointed(
    kind: IndexKind,
    ops: &[Op],
) -> (Database<MemBlock<Vec<u8>>>, BTreeMap<i64, String>) {
    let mut db = Database::create(MemBlock::new(64 << 20), opts()).unwrap();
    db.create_table("t", Schema::key_value("INTEGER", "TEXT", kind))
        .unwrap();
    let mut model = BTreeMap::new();
    run(&mut db, &mut model, ops);
    db.checkpoint().unwrap();
    (db, model)
}

/// One call of a scan read a few rows a call: the (at most) `limit` rows after key `last`
/// (from the start if `None`), checked against the model; the last key returned, or `None`
/// at the end of the table (the next call starts over).
fn next_rows(
    db: &mut Database<MemBlock<Vec<u8>>>,
    model: &BTreeMap<i64, String>,
    last: Option<i64>,
    limit: usize,
) -> Result<Option<i64>, TestCaseError> {
    let lo = last.map(|k| vec![Value::Integer(k)]);
    let lo = match &lo {
        Some(k) => Bound::Excluded(k.as_slice()),
        None => Bound::Unbounded,
    };
    let got = db
        .range_with("t", lo, Bound::Unbounded, Order::asc(Some(limit)))
        .unwrap();
    let from = last.map_or(Bound::Unbounded, Bound::Excluded);
    let keys = model
        .range((from, Bound::Unbounded))
        .map(|(k, _)| *k)
        .take(limit);
    prop_assert_eq!(&got, &rows(model, keys));
    Ok(match got.last().map(|r| &r[0]) {
        Some(Value::Integer(k)) => Some(*k),
        _ => None,
    })
}

/// Applies one operation inside the open transaction.
fn apply(db: &mut Database<MemBlock<Vec<u8>>>, model: &mut BTreeMap<i64, String>, op: &Op) {
    match *op {
        Op::Put(k, v) => {
            let row = [Value::Integer(k), Value::Text(text(k, v))];
            if model.insert(k, text(k, v)).is_some() {
                assert!(db.update("t", &row).unwrap());
            } else {
                db.insert("t", &row).unwrap();
            }
        }
        Op::Delete(k) => {
            let had = model.remove(&k).is_some();
            assert_eq!(db.delete("t", &[Value::Integer(k)]).unwrap(), had);
        }
    }
}

/// A database of 600 rows, checkpointed, as device bytes; row `k` holds a unique text.
fn image(kind: IndexKind) -> Vec<u8> {
    let mut db = Database::create(MemBlock::new(8 << 20), opts()).unwrap();
    db.create_table("t", Schema::key_value("INTEGER", "TEXT", kind))
        .unwrap();
    db.begin().unwrap();
    for k in 0..600 {
        db.insert("t", &[Value::Integer(k), Value::Text(format!("row<{k}>"))])
            .unwrap();
    }
    db.commit().unwrap();
    let mut dev = db.close().unwrap();
    let mut bytes = vec![0u8; 8 << 20];
    dev.read(0, &mut bytes).unwrap();
    bytes
}

fn find(bytes: &[u8], what: &[u8]) -> usize {
    bytes.windows(what.len()).position(|w| w == what).unwrap()
}

#[test]
fn a_corrupt_tuple_met_by_a_scan_is_an_error() {
    for kind in [IndexKind::Tree, IndexKind::Hash] {
        // A row in the middle of its block's run, and its key's byte too.
        for (k, nudge) in [(301i64, 4usize), (301, 0), (0, 3), (599, 2)] {
            let mut bytes = image(kind);
            let at = find(&bytes, format!("row<{k}>").as_bytes());
            // `nudge` 0 hits the byte before the text: the tuple's row encoding.
            bytes[at + nudge - usize::from(nudge == 0)] ^= 0x20;
            let mut db = Database::open(MemBlock::from_backing(bytes), opts()).unwrap();
            let err = db.scan("t").unwrap_err().to_string();
            assert!(err.contains("checksum"), "{kind:?} {k}: {err}");
            let key = [Value::Integer(k)];
            for order in [Order::asc(None), Order::desc(None), Order::desc(Some(700))] {
                let r = db.range_with("t", Bound::Unbounded, Bound::Unbounded, order);
                assert!(r.is_err(), "{kind:?} {k} {order:?}");
                let r = db.range_with("t", Bound::Included(&key), Bound::Included(&key), order);
                assert!(r.is_err(), "{kind:?} {k} {order:?}");
            }
            let mut seen = 0;
            let r = db.range_visit(
                "t",
                Bound::Unbounded,
                Bound::Unbounded,
                Order::default(),
                |_| {
                    seen += 1;
                    Ok(())
                },
            );
            assert!(r.is_err());
            assert!(seen <= 600);
            // Rows away from it still read.
            let far = [Value::Integer(if k < 300 { 400 } else { 100 })];
            let r = db.range_with(
                "t",
                Bound::Included(&far),
                Bound::Included(&far),
                Order::asc(None),
            );
            assert_eq!(r.unwrap().len(), 1, "{kind:?} {k}");
        }
    }
}

/// An update or delete is the first to touch a corrupt tuple (no read of the row before
/// it): the checksum is still checked, the statement fails cleanly, and the rows around it
/// stay readable and writable.
#[test]
fn a_corrupt_tuple_met_by_an_update_or_delete_is_an_error() {
    for delete in [false, true] {
        let mut bytes = image(IndexKind::Tree);
        let at = find(&bytes, b"row<301>");
        bytes[at + 4] ^= 0x20;
        let mut db = Database::open(MemBlock::from_backing(bytes), opts()).unwrap();
        let r = if delete {
            db.delete("t", &[Value::Integer(301)]).map(|_| ())
        } else {
            db.update("t", &[Value::Integer(301), Value::Text("new".into())])
                .map(|_| ())
        };
        let err = r.unwrap_err().to_string();
        assert!(err.contains("checksum"), "delete {delete}: {err}");
        // The same again: the failed statement left nothing marked as checked.
        let err = db
            .delete("t", &[Value::Integer(301)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("checksum"), "delete {delete}, again: {err}");
        db.update("t", &[Value::Integer(300), Value::Text("new".into())])
            .unwrap();
        assert!(db.delete("t", &[Value::Integer(302)]).unwrap());
        let k = [Value::Integer(300)];
        let r = db
            .range_with(
                "t",
                Bound::Included(&k),
                Bound::Included(&k),
                Order::asc(None),
            )
            .unwrap();
        assert_eq!(
            r,
            vec![vec![Value::Integer(300), Value::Text("new".into())]]
        );
    }
}

#[test]
fn a_descending_limit_reads_few_rows() {
    let mut db = Database::create(MemBlock::new(64 << 20), opts()).unwrap();
    db.create_table("t", Schema::key_value("INTEGER", "TEXT", IndexKind::Tree))
        .unwrap();
    db.begin().unwrap();
    for k in 0..20_000 {
        db.insert("t", &[Value::Integer(k), Value::Text("x".repeat(100))])
            .unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    let mut dev = db.close().unwrap();
    let mut bytes = vec![0u8; 64 << 20];
    dev.read(0, &mut bytes).unwrap();
    let dev = Accounted::new(MemBlock::from_backing(bytes));
    let mut db = Database::open(dev, opts()).unwrap();
    let before = db.device().stats().read_bytes;
    let rows = db
        .range_with(
            "t",
            Bound::Unbounded,
            Bound::Unbounded,
            Order::desc(Some(10)),
        )
        .unwrap();
    let keys: Vec<Value> = rows.into_iter().map(|r| r[0].clone()).collect();
    let want: Vec<Value> = (19_990..20_000).rev().map(Value::Integer).collect();
    assert_eq!(keys, want);
    let read = db.device().stats().read_bytes - before;
    assert!(read < 64 * 1024, "{read} bytes read for 10 rows");
}

#[test]
fn a_tuple_corrupted_on_the_device_after_a_scan_is_caught_when_read_again() {
    let bytes = image(IndexKind::Tree);
    let at = find(&bytes, b"row<301>");
    let small = Options {
        buffer_bytes: 0,
        ..opts()
    };
    let mut db = Database::open(MemBlock::from_backing(bytes), small).unwrap();
    // Scans check every tuple once and remember it while the block stays in RAM: here
    // no clean block stays, so the next scan reads and checks them again.
    for _ in 0..2 {
        assert_eq!(db.scan("t").unwrap().len(), 600);
    }
    let sector = at / 512 * 512;
    let mut s = [0u8; 512];
    db.device().read(sector as u64, &mut s).unwrap();
    s[at - sector + 4] ^= 0x20;
    db.device().write(sector as u64, &s).unwrap();
    let err = db.scan("t").unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
}

/// Bytes read from the device by `f`.
fn reads<D: BlockDevice>(
    db: &mut Database<Accounted<D>>,
    f: impl FnOnce(&mut Database<Accounted<D>>),
) -> u64 {
    let before = db.device().stats().read_bytes;
    f(db);
    db.device().stats().read_bytes - before
}

fn get_row<D: BlockDevice>(db: &mut Database<D>, k: i64) {
    let r = db.get("t", &[Value::Integer(k)]).unwrap().unwrap();
    assert_eq!(r, vec![Value::Integer(k), Value::Text(format!("row<{k}>"))]);
}

/// On a device that reads from memory, a point read of a row whose block is not in RAM
/// reads the block's header sector and the tuple, not the block — unless the buffer has
/// room for the block (with the `buffer` feature), or it is the block's second point read in
/// a while, which brings the block in; later reads of it read nothing. Without the buffer
/// every point read is that small. On a device whose reads are I/Os, the block is read whole.
#[test]
fn a_point_read_takes_one_tuple_and_a_second_brings_its_block_in() {
    let buffered = cfg!(feature = "buffer");
    // One block's room: the first block read fills it.
    for budget in [4096, 0] {
        let dev = Accounted::new(MemBlock::from_backing(image(IndexKind::Tree)));
        let small = Options {
            buffer_bytes: budget,
            ..opts()
        };
        let mut db = Database::open(dev, small).unwrap();
        // The index pages first, so that what follows reads data blocks only.
        for k in [10, 300, 301, 302] {
            assert!(db.contains("t", &[Value::Integer(k)]).unwrap());
        }
        let fill = reads(&mut db, |db| get_row(db, 10));
        let first = reads(&mut db, |db| get_row(db, 300));
        assert!((512..=1024).contains(&first), "{first} bytes for one row");
        let second = reads(&mut db, |db| get_row(db, 301));
        let third = reads(&mut db, |db| get_row(db, 302));
        if buffered && budget > 0 {
            assert_eq!(fill as usize, db.block_size(), "room: the block, whole");
            assert_eq!(second as usize, db.block_size(), "the block, whole");
            assert_eq!(third, 0);
        } else {
            assert!((512..=1024).contains(&fill), "{fill} bytes for one row");
            assert!((512..=1024).contains(&second), "{second} bytes for one row");
            assert!((512..=1024).contains(&third), "{third} bytes for one row");
        }
    }
    // A file read with `pread` (no mapping): each read is an I/O.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ember");
    std::fs::write(&path, image(IndexKind::Tree)).unwrap();
    let file = ember_device::file::FileBlock::open(&path)
        .unwrap()
        .with_mapping(false);
    assert!(!file.reads_from_memory());
    let none = Options {
        buffer_bytes: 0,
        ..opts()
    };
    let mut db = Database::open(Accounted::new(file), none).unwrap();
    assert!(db.contains("t", &[Value::Integer(300)]).unwrap());
    let read = reads(&mut db, |db| get_row(db, 300));
    assert_eq!(
        read as usize,
        db.block_size(),
        "an I/O device: the block, whole"
    );
}

/// A point read that takes a tuple without its block checks what a whole block's read
/// checks: the header sector's checksum and the tuple's.
#[test]
fn a_corrupt_tuple_or_header_met_by_a_point_read_is_an_error() {
    for header in [false, true] {
        let mut bytes = image(IndexKind::Tree);
        let at = find(&bytes, b"row<301>");
        if header {
            // The block's header: the last slotted-block magic before the tuple; a byte of
            // its slot array.
            let start = bytes[..at].windows(4).rposition(|w| w == b"EMSL").unwrap();
            bytes[start + 40 + 8 * 3] ^= 0x01;
        } else {
            bytes[at + 4] ^= 0x20;
        }
        let small = Options {
            buffer_bytes: 4096,
            ..opts()
        };
        let mut db = Database::open(MemBlock::from_backing(bytes), small).unwrap();
        // Another block fills the buffer's room, so that the first read takes the tuple
        // alone and the second (with the `buffer` feature) the whole block: both fail.
        get_row(&mut db, 10);
        for _ in 0..2 {
            let err = db.get("t", &[Value::Integer(301)]).unwrap_err().to_string();
            assert!(err.contains("checksum"), "header {header}: {err}");
        }
        // A row in another block still reads.
        get_row(&mut db, 100);
    }
}

/// A full range in storage order (hash index) takes the whole index at once, however many
/// key bytes that is (more than a chunk's bound here).
#[test]
fn a_storage_order_scan_returns_every_row_of_a_large_table() {
    let mut db = Database::create(MemBlock::new(64 << 20), opts()).unwrap();
    db.create_table("t", Schema::key_value("TEXT", "INTEGER", IndexKind::Hash))
        .unwrap();
    let n = 20_000;
    db.begin().unwrap();
    for k in 0..n {
        let key = format!("a fairly long key {k:08}");
        db.insert("t", &[Value::Text(key), Value::Integer(k)])
            .unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    let mut seen = vec![false; n as usize];
    db.range_visit(
        "t",
        Bound::Unbounded,
        Bound::Unbounded,
        Order::default(),
        |mut r| {
            let Some(Ok(ember_table::ValueRef::Integer(k))) = r.nth(1) else {
                panic!("a row without its value");
            };
            assert!(
                !std::mem::replace(&mut seen[k as usize], true),
                "row {k} twice"
            );
            Ok(())
        },
    )
    .unwrap();
    assert!(seen.iter().all(|s| *s), "rows missing");
}

/// Long keys end a chunk by their bytes before its count of entries: ranges still come
/// whole and in order.
#[test]
fn chunks_of_long_keys_end_early_and_ranges_stay_whole() {
    let mut db = Database::create(MemBlock::new(64 << 20), opts()).unwrap();
    db.create_table("t", Schema::key_value("TEXT", "INTEGER", IndexKind::Tree))
        .unwrap();
    let n = 3_000;
    let key = |k: i64| format!("{k:06}{}", "k".repeat(400));
    db.begin().unwrap();
    for k in 0..n {
        db.insert("t", &[Value::Text(key(k)), Value::Integer(k)])
            .unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    // Half of them replaced since the checkpoint (overlay entries).
    db.begin().unwrap();
    for k in (0..n).step_by(2) {
        db.update("t", &[Value::Text(key(k)), Value::Integer(-k)])
            .unwrap();
    }
    db.commit().unwrap();
    for desc in [false, true] {
        let mut got = Vec::new();
        let order = Order {
            keyed: true,
            desc,
            limit: None,
        };
        db.range_visit("t", Bound::Unbounded, Bound::Unbounded, order, |mut r| {
            let Some(Ok(ember_table::ValueRef::Integer(v))) = r.nth(1) else {
                panic!("a row without its value");
            };
            got.push(v);
            Ok(())
        })
        .unwrap();
        let mut want: Vec<i64> = (0..n).map(|k| if k % 2 == 0 { -k } else { k }).collect();
        if desc {
            want.reverse();
        }
        assert_eq!(got, want, "desc {desc}");
    }
}
