//! Model-based property test: random puts, deletes, batches, gets, range scans, flushes,
//! compaction steps and reopens against a `BTreeMap`, with tables small enough that the data
//! spreads over the memtable, the immutable memtable and several levels.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use ember_lsm::WriteBatch;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Batch(Vec<(u16, Option<u16>)>),
    Get(u16),
    Range(u16, u16, bool),
    Probe(u16, u16),
    /// The last items below a key (or the end), at most a number of them.
    Back(u16, Option<u16>, usize),
    Step,
    Flush,
    Reopen,
    /// The next items (at most this many) of an iterator kept across operations, read
    /// borrowed ([`ember_lsm::Iter::next_with`]); none kept: one starts at the key.
    Cursor(u16, usize),
}

fn key(k: u16) -> Vec<u8> {
    // Keys of different lengths sharing prefixes.
    format!("key{:0w$}", k, w = 2 + (k % 3) as usize).into_bytes()
}

fn value(k: u16, v: u16) -> Vec<u8> {
    let mut out = format!("{k}:{v}:").into_bytes();
    out.resize(out.len() + (v % 90) as usize, b'v');
    out
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..120u16, any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (0..120u16).prop_map(Op::Delete),
        2 => prop::collection::vec((0..120u16, prop::option::of(any::<u16>())), 1..8)
            .prop_map(Op::Batch),
        3 => (0..120u16).prop_map(Op::Get),
        2 => (0..120u16, 0..120u16, any::<bool>()).prop_map(|(a, b, i)| Op::Range(a, b, i)),
        2 => (0..120u16, 0..120u16).prop_map(|(a, b)| Op::Probe(a, b)),
        2 => (0..120u16, prop::option::of(0..120u16), 0..40usize)
            .prop_map(|(a, b, n)| Op::Back(a, b, n)),
        1 => Just(Op::Step),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        3 => (0..120u16, 1..12usize).prop_map(|(a, n)| Op::Cursor(a, n)),
    ]
}

fn check_range(
    db: &common::MemDb,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) {
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.range(lo, hi).map(|r| r.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .range::<[u8], _>((lo, hi))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got, want, "range {lo:?}..{hi:?}");
    // The borrowing iterator gives the same items.
    let mut it = db.range(lo, hi);
    let mut borrowed = Vec::new();
    while let Some(r) = it.next_with(|k, v| (k.to_vec(), v.to_vec())) {
        borrowed.push(r.unwrap());
    }
    assert_eq!(borrowed, want, "range {lo:?}..{hi:?} borrowed");
}

/// An iterator kept across operations: the snapshot it reads, where it is, and the writes
/// committed when it was made.
struct Kept {
    it: ember_lsm::Iter<
        ember_lsm::SpaceEnv<ember_table::SpaceManager<ember_device::MemBlock<Vec<u8>>>>,
    >,
    snapshot: BTreeMap<Vec<u8>, Vec<u8>>,
    after: Bound<Vec<u8>>,
    writes: usize,
}

fn run(ops: Vec<Op>, separate_values: Option<usize>) {
    // Every table's filter also holds key prefixes (the key without its last byte).
    let opts = ember_lsm::Options {
        prefix_rule: Some(ember_lsm::PrefixRule {
            kind: b'k',
            suffix: 1,
        }),
        separate_values,
        ..common::tiny()
    };
    let (mut db, root) = common::fresh(opts.clone());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut kept: Option<Kept> = None;
    let mut writes = 0usize;
    for op in ops {
        if matches!(op, Op::Put(..) | Op::Delete(_) | Op::Batch(_)) {
            writes += 1;
        }
        match op {
            Op::Put(k, v) => {
                db.put(&key(k), &value(k, v), v % 2 == 0).unwrap();
                model.insert(key(k), value(k, v));
            }
            Op::Delete(k) => {
                db.delete(&key(k), false).unwrap();
                model.remove(&key(k));
            }
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v) in ops {
                    match v {
                        Some(v) => {
                            b.put(key(k), value(k, v));
                            model.insert(key(k), value(k, v));
                        }
                        None => {
                            b.delete(key(k));
                            model.remove(&key(k));
                        }
                    }
                }
                db.write(b, true).unwrap();
            }
            Op::Get(k) => {
                assert_eq!(db.get(&key(k)).unwrap(), model.get(&key(k)).cloned());
                assert_eq!(db.contains(&key(k)).unwrap(), model.contains_key(&key(k)));
                // The borrowing read sees the same value (and none for a deleted key).
                let len = db.get_with(&key(k), |v| (v.len(), v.first().copied()));
                let want = model.get(&key(k)).map(|v| (v.len(), v.first().copied()));
                assert_eq!(len.unwrap(), want);
            }
            Op::Range(a, b, incl) => {
                let (a, b) = (key(a).min(key(b)), key(a).max(key(b)));
                let hi = if incl {
                    Bound::Included(b.as_slice())
                } else {
                    Bound::Excluded(b.as_slice())
                };
                check_range(&db, &model, Bound::Included(&a), hi);
                check_range(&db, &model, Bound::Excluded(&a), Bound::Unbounded);
            }
            Op::Probe(a, b) => {
                let (a, b) = (key(a).min(key(b)), key(a).max(key(b)));
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(a.clone()..b.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(db.probe(&a, &b, None).unwrap(), want, "probe {a:?}..{b:?}");
                // A one-key probe whose prefix filter is asked for the key's prefix.
                let mut end = a.clone();
                end.push(0);
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .get(&a)
                    .map(|v| (a.clone(), v.clone()))
                    .into_iter()
                    .collect();
                assert_eq!(db.probe(&a, &end, Some(&a[..a.len() - 1])).unwrap(), want);
            }
            Op::Back(a, b, n) => {
                let a = key(a);
                let b = b.map(key);
                let upper = b
                    .as_ref()
                    .map_or(Bound::Unbounded, |b| Bound::Excluded(b.clone()));
                let want: Vec<(Vec<u8>, Vec<u8>)> = if b.as_ref().is_some_and(|b| *b <= a) {
                    Vec::new()
                } else {
                    model
                        .range((Bound::Included(a.clone()), upper))
                        .rev()
                        .take(n)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                };
                let got = db.probe_back(&a, b.as_deref(), n).unwrap();
                assert_eq!(got, want, "probe_back {a:?}..{b:?} {n}");
            }
            Op::Step => {
                db.step().unwrap();
            }
            Op::Flush => db.flush().unwrap(),
            Op::Cursor(a, n) => {
                let k = kept.get_or_insert_with(|| Kept {
                    it: db.range(Bound::Included(&key(a)), Bound::Unbounded),
                    snapshot: model.clone(),
                    after: Bound::Included(key(a)),
                    writes,
                });
                // Current exactly while nothing was written since it was made (flushes and
                // compaction steps leave it current).
                assert_eq!(k.it.is_current(), writes == k.writes, "is_current");
                let want: Vec<(Vec<u8>, Vec<u8>)> = k
                    .snapshot
                    .range((k.after.clone(), Bound::Unbounded))
                    .take(n)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut got = Vec::new();
                while got.len() < n {
                    match k.it.next_with(|k, v| (k.to_vec(), v.to_vec())) {
                        Some(r) => got.push(r.unwrap()),
                        None => break,
                    }
                }
                assert_eq!(got, want, "kept iterator after {:?}", k.after);
                match got.last() {
                    Some((last, _)) if got.len() == n => k.after = Bound::Excluded(last.clone()),
                    _ => kept = None,
                }
            }
            Op::Reopen => {
                kept = None;
                let dev = common::shut(db);
                db = common::open(dev, &root, opts.clone()).unwrap();
            }
        }
    }
    check_range(&db, &model, Bound::Unbounded, Bound::Unbounded);
    for n in [1, 7, usize::MAX] {
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .rev()
            .take(n)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            db.probe_back(b"", None, n).unwrap(),
            want,
            "probe_back all {n}"
        );
    }
    for k in 0..120 {
        assert_eq!(db.get(&key(k)).unwrap(), model.get(&key(k)).cloned());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Values kept in their tables, or those of at least some length (from 0: all of them)
    /// kept in value blobs.
    #[test]
    fn the_engine_behaves_like_a_btreemap(
        ops in prop::collection::vec(op(), 1..300),
        separate in prop::option::of(0usize..64),
    ) {
        run(ops, separate);
    }
}

/// An iterator opened before later writes, flushes and compactions sees exactly the
/// snapshot it started with, read across the memtable, the immutable memtable and levels.
#[test]
fn iterators_see_their_snapshot_across_every_source() {
    let (db, _) = common::fresh(common::tiny());
    let mut model = BTreeMap::new();
    for i in 0..600u32 {
        let k = format!("k{:04}", (i * 7919) % 500).into_bytes();
        let v = format!("v{i}").into_bytes();
        db.put(&k, &v, false).unwrap();
        model.insert(k, v);
    }
    let counts = db.level_counts();
    assert!(
        counts.iter().skip(1).filter(|&&n| n > 0).count() >= 2,
        "several levels: {counts:?}"
    );
    let snapshot = model.clone();
    let it = db.iter();
    // Writes after the iterator opened: new keys, overwrites, deletes, and enough of them
    // to rotate the memtable and compact.
    for i in 0..300u32 {
        let k = format!("k{:04}", (i * 13) % 520).into_bytes();
        if i % 3 == 0 {
            db.delete(&k, false).unwrap();
            model.remove(&k);
        } else {
            db.put(&k, b"new", false).unwrap();
            model.insert(k, b"new".to_vec());
        }
        db.step().unwrap();
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = it.map(|r| r.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = snapshot.into_iter().collect();
    assert_eq!(got, want);
    let now: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(now, model.into_iter().collect::<Vec<_>>());
}
