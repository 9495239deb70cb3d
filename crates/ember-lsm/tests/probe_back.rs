//! `Db::probe_back` (the last items of a range, read backwards in rounds) where a round's
//! reads end exactly at a table boundary of a deeper level: the level's source gave all the
//! entries it was asked for, the tables below still hold more of the range, and newer
//! tombstones hide some of what it gave — so a second round must read below.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

#[test]
fn a_round_that_ends_at_a_table_boundary_reads_the_tables_below() {
    let (db, _) = common::fresh(common::tiny());
    let mut model = BTreeMap::new();
    for i in 0..400 {
        let v = vec![b'v'; 20 + (i % 7) as usize];
        db.put(&key(i), &v, false).unwrap();
        model.insert(key(i), v);
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    let deep: Vec<_> = db.tables().into_iter().filter(|(l, _)| *l > 0).collect();
    assert!(
        deep.len() >= 3,
        "several deeper tables: {:?}",
        db.level_counts()
    );
    let mut checked = 0;
    for (_, t) in deep {
        // The table's first keys: `hi` just above its `n`th, tombstones for the two below.
        let keys: Vec<Vec<u8>> = model
            .range(t.smallest.clone()..=t.largest.clone())
            .map(|(k, _)| k.clone())
            .take(6)
            .collect();
        if keys.first() == model.keys().next() || keys.len() < 6 {
            continue; // no table below it
        }
        for n in 3..=5 {
            let hi = keys[n].clone();
            let hidden = [keys[n - 1].clone(), keys[n - 2].clone()];
            for k in &hidden {
                db.delete(k, false).unwrap();
            }
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .range(..hi.clone())
                .rev()
                .filter(|(k, _)| !hidden.contains(k))
                .take(n)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(
                db.probe_back(b"", Some(&hi), n).unwrap(),
                want,
                "below {hi:?}"
            );
            for k in &hidden {
                db.put(k, &model[k], false).unwrap();
            }
            db.flush().unwrap();
            checked += 1;
        }
    }
    assert!(checked > 0);
}
