//! `Db::probe` (short ranges read under one lock) and the prefix filters it skips tables
//! with, against a `BTreeMap`: keys shaped like SQL index entries (`x · group · id`, the id
//! the 8-byte suffix of the prefix rule), probes by group over the memtable, the immutable
//! memtable and several levels, with deletes, moves between groups, reopens, and tables
//! written with and without the rule.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use ember_lsm::{Options, PrefixRule, WriteBatch};
use proptest::prelude::*;

const RULE: PrefixRule = PrefixRule {
    kind: b'x',
    suffix: 8,
};

/// The prefix of a group: `x`, then the group's number (1 or 2 bytes, so prefixes differ in
/// length, and no prefix is another's).
fn group(g: u8) -> Vec<u8> {
    if g < 8 {
        vec![b'x', g]
    } else {
        vec![b'x', 0xF0, g]
    }
}

fn key(g: u8, id: u64) -> Vec<u8> {
    let mut k = group(g);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The smallest key above every key starting with `p`.
fn end(p: &[u8]) -> Vec<u8> {
    let mut e = p.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xFF {
            e.push(last + 1);
            break;
        }
    }
    e
}

#[derive(Debug, Clone)]
enum Op {
    /// Row `id` now lives in group `g` (its old entry, if any, is deleted in the same batch).
    Move(u64, u8),
    Delete(u64),
    Probe(u8),
    Flush,
    Step,
    Reopen,
    /// Switch the rule on or off for the tables written from now on.
    Rule(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..60u64, 0..12u8).prop_map(|(i, g)| Op::Move(i, g)),
        2 => (0..60u64).prop_map(Op::Delete),
        4 => (0..13u8).prop_map(Op::Probe),
        1 => Just(Op::Flush),
        2 => Just(Op::Step),
        1 => Just(Op::Reopen),
        1 => any::<bool>().prop_map(Op::Rule),
    ]
}

fn opts(rule: bool) -> Options {
    Options {
        prefix_rule: rule.then_some(RULE),
        ..common::tiny()
    }
}

fn check(db: &common::MemDb, model: &BTreeMap<Vec<u8>, Vec<u8>>, g: u8) {
    let p = group(g);
    let e = end(&p);
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .range(p.clone()..e.clone())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(db.probe(&p, &e, Some(&p)).unwrap(), want, "group {g}");
    assert_eq!(
        db.probe(&p, &e, None).unwrap(),
        want,
        "group {g} unfiltered"
    );
}

fn run(ops: Vec<Op>) {
    let mut rule = true;
    let (mut db, root) = common::fresh(opts(rule));
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut at: BTreeMap<u64, u8> = BTreeMap::new();
    for (n, op) in ops.into_iter().enumerate() {
        match op {
            Op::Move(id, g) => {
                let mut b = WriteBatch::new();
                if let Some(old) = at.insert(id, g) {
                    b.delete(key(old, id));
                    model.remove(&key(old, id));
                }
                let v = format!("{n}").into_bytes();
                b.put(key(g, id), v.clone());
                model.insert(key(g, id), v);
                db.write(b, false).unwrap();
            }
            Op::Delete(id) => {
                if let Some(old) = at.remove(&id) {
                    db.delete(&key(old, id), false).unwrap();
                    model.remove(&key(old, id));
                }
            }
            Op::Probe(g) => check(&db, &model, g),
            Op::Flush => db.flush().unwrap(),
            Op::Step => {
                db.step().unwrap();
            }
            Op::Reopen => {
                let dev = common::shut(db);
                db = common::open(dev, &root, opts(rule)).unwrap();
            }
            Op::Rule(on) => {
                rule = on;
                db.set_prefix_rule(rule.then_some(RULE));
            }
        }
    }
    for g in 0..13 {
        check(&db, &model, g);
    }
    // A probe is a range read: the same items as the iterator's.
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(db.probe(b"", b"\xff", None).unwrap(), all);
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn probes_find_what_a_btreemap_holds(ops in prop::collection::vec(op(), 1..300)) {
        run(ops);
    }
}

/// A group moved out of every deeper level by deletes in the memtable, and moved back in
/// later: the probe's answer follows the newest source of each key.
#[test]
fn a_probe_takes_the_newest_version_of_each_key_across_levels() {
    let (db, _) = common::fresh(opts(true));
    let mut model = BTreeMap::new();
    for id in 0..300u64 {
        let g = (id % 5) as u8;
        db.put(&key(g, id), b"old", false).unwrap();
        model.insert(key(g, id), b"old".to_vec());
    }
    let counts = db.level_counts();
    assert!(
        counts.iter().skip(1).filter(|&&n| n > 0).count() >= 2,
        "several levels: {counts:?}"
    );
    // Group 1 leaves (tombstones newer than the tables), group 2 is rewritten.
    for id in (1..300u64).step_by(5) {
        db.delete(&key(1, id), false).unwrap();
        model.remove(&key(1, id));
    }
    for id in (2..300u64).step_by(10) {
        db.put(&key(2, id), b"new", false).unwrap();
        model.insert(key(2, id), b"new".to_vec());
    }
    for g in 0..6 {
        check(&db, &model, g);
    }
    assert!(
        db.probe(&group(1), &end(&group(1)), Some(&group(1)))
            .unwrap()
            .is_empty()
    );
    // An empty or reversed range is empty, not a panic.
    assert!(db.probe(b"x", b"x", None).unwrap().is_empty());
    assert!(db.probe(b"y", b"x", None).unwrap().is_empty());
}
