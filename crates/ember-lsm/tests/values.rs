//! Values kept apart from keys ([`ember_lsm::vlog`]): which values go to value blobs, that
//! blobs the overwrites leave mostly garbage are collected and removed, that an iterator
//! still reads the blobs of its snapshot, and that a database written with every value in its
//! tables reads the same with separation turned on.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use ember_lsm::{Db, Options};

fn value(k: u32, round: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{k}/{round}/").into_bytes();
    v.resize(len, b'a' + (round % 26) as u8);
    v
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

#[test]
fn values_from_the_threshold_on_go_to_value_blobs() {
    let opts = Options {
        separate_values: Some(100),
        ..common::tiny()
    };
    let (db, _) = common::fresh(opts);
    for k in 0..50 {
        db.put(&key(k), &value(k, 0, 99 + (k % 2) as usize), false)
            .unwrap();
    }
    db.flush().unwrap();
    let values: u64 = db.value_blobs().iter().map(|v| v.values).sum();
    let live: u64 = db.value_blobs().iter().map(|v| v.live).sum();
    assert_eq!(
        values,
        25 * 100,
        "the 25 values of 100 bytes, not those of 99"
    );
    assert_eq!(live, values);
    for k in 0..50 {
        assert_eq!(
            db.get(&key(k)).unwrap(),
            Some(value(k, 0, 99 + (k % 2) as usize))
        );
    }
}

/// Overwrites leave old values behind in their blobs; compactions copy the live ones out of
/// blobs under half live and remove blobs nothing points into — from the device too.
#[test]
fn blobs_that_overwrites_left_mostly_garbage_are_collected() {
    let env = common::counting_env();
    let alive = env.live.clone();
    let opts = Options {
        write_buffer: 16 << 10,
        table_size: 4 << 10,
        block_size: 512,
        l0_trigger: 2,
        level1_bytes: 8 << 10,
        level_multiplier: 4,
        log_capacity: 32 << 10,
        separate_values: Some(64),
        ..common::tiny()
    };
    let db = Db::create(env, opts.clone()).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..30 {
        for k in 0..200 {
            let v = value(k, round, 200);
            db.put(&key(k), &v, false).unwrap();
            model.insert(key(k), v);
        }
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    let blobs = db.value_blobs();
    let values: u64 = blobs.iter().map(|v| v.values).sum();
    let live: u64 = blobs.iter().map(|v| v.live).sum();
    // 1.2 MB of values written for 40 KB live.
    assert_eq!(live, 200 * 200, "{blobs:?}");
    assert!(
        values <= 3 * live,
        "{values} bytes of values kept for {live} live: {blobs:?}"
    );
    // No blob is left under half live but those only level 0 points into.
    let level0: Vec<u64> = db
        .tables()
        .into_iter()
        .filter(|(l, _)| *l == 0)
        .flat_map(|(_, t)| t.values.into_iter().map(|(b, _)| b))
        .collect();
    for b in &blobs {
        assert!(
            2 * b.live >= b.values || level0.contains(&b.id),
            "blob {} is {} of {} bytes live",
            b.id,
            b.live,
            b.values
        );
    }
    // What the device holds: the tables, these value blobs, one log and one kept.
    let tables = db.tables().len();
    assert_eq!(db.kept_logs(), 1);
    assert_eq!(alive.lock().unwrap().len(), tables + blobs.len() + 2);
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert!(got == model);
    // The manifest names the blobs: a reopen reads every value.
    let env = db.close().unwrap();
    let db = Db::open(env, opts).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert!(got == model);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}

/// An iterator reads the values of its snapshot even when compactions have since moved
/// every pointer out of their blobs; the blobs go once it is dropped.
#[test]
fn an_iterator_keeps_the_blobs_of_its_snapshot() {
    let env = common::counting_env();
    let alive = env.live.clone();
    let opts = Options {
        separate_values: Some(16),
        ..common::tiny()
    };
    let db = Db::create(env, opts).unwrap();
    let mut old = BTreeMap::new();
    for k in 0..100 {
        db.put(&key(k), &value(k, 0, 40), false).unwrap();
        old.insert(key(k), value(k, 0, 40));
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    let first: Vec<u64> = db.value_blobs().iter().map(|v| v.id).collect();
    let it = db.iter();
    for round in 1..6 {
        for k in 0..100 {
            db.put(&key(k), &value(k, round, 40), false).unwrap();
        }
        db.flush().unwrap();
        while db.step().unwrap() {}
    }
    // Nothing the levels hold points into the first blobs any more, yet they stay.
    let now = db.value_blobs();
    for id in &first {
        let b = now.iter().find(|b| b.id == *id);
        assert_eq!(b.map(|b| b.live), Some(0), "blob {id}: {now:?}");
    }
    let got: BTreeMap<Vec<u8>, Vec<u8>> = it.map(|r| r.unwrap()).collect();
    assert!(got == old, "the iterator read its snapshot");
    // The iterator is gone: the next step removes them.
    db.step().unwrap();
    let now = db.value_blobs();
    assert!(
        first.iter().all(|id| now.iter().all(|b| b.id != *id)),
        "{now:?}"
    );
    assert_eq!(
        alive.lock().unwrap().len(),
        db.tables().len() + now.len() + 1 + db.kept_logs()
    );
}

/// A database whose values were all written into its tables (separation off, or an older
/// build) reads the same with separation on, and its compactions move the large values out.
#[test]
fn values_written_inline_read_the_same_with_separation_on() {
    let inline = Options {
        separate_values: None,
        ..common::tiny()
    };
    let (db, root) = common::fresh(inline);
    let mut model = BTreeMap::new();
    for k in 0..300 {
        let v = value(k, 0, 20 + (k % 60) as usize);
        db.put(&key(k), &v, false).unwrap();
        model.insert(key(k), v);
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    assert!(db.value_blobs().is_empty());
    let dev = common::shut(db);
    let db = common::open(dev, &root, common::tiny()).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert!(got == model);
    for k in 0..300 {
        let v = value(k, 1, 20 + (k % 60) as usize);
        db.put(&key(k), &v, false).unwrap();
        model.insert(key(k), v);
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    assert!(!db.value_blobs().is_empty());
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert!(got == model);
}

/// A kept log whose capacity the options no longer ask for is not kept across a reopen (it
/// would never be taken again); one of the right capacity is.
#[test]
fn a_kept_log_of_another_capacity_goes_at_reopen() {
    let env = common::counting_env();
    let alive = env.live.clone();
    let db = Db::create(env, common::tiny()).unwrap();
    for k in 0..200 {
        db.put(&key(k), &value(k, 0, 40), false).unwrap();
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    assert_eq!(db.kept_logs(), 1);
    let env = db.close().unwrap();
    let db = Db::open(env, common::tiny()).unwrap();
    assert_eq!(db.kept_logs(), 1, "the same capacity: still kept");
    let env = db.close().unwrap();
    let bigger = Options {
        log_capacity: 2 * common::tiny().log_capacity,
        ..common::tiny()
    };
    let db = Db::open(env, bigger.clone()).unwrap();
    // The old kept log went (and, the replayed log being of the old capacity too, none is
    // kept until a log of the new capacity is flushed).
    assert_eq!(db.kept_logs(), 0);
    let blobs = db.tables().len() + db.value_blobs().len() + 1;
    assert_eq!(alive.lock().unwrap().len(), blobs, "nothing leaked");
    for k in 0..200 {
        db.put(&key(k), &value(k, 1, 40), false).unwrap();
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    assert_eq!(db.kept_logs(), 1);
    for k in 0..200 {
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 1, 40)));
    }
}

/// Iterators and point reads on other threads while writers overwrite values kept apart and
/// the background thread flushes, compacts and collects blobs: every value read is one that
/// was written for its key, and every iterator sees every key (there are no deletes).
#[test]
fn readers_on_other_threads_meet_collections_and_read_right_values() {
    let opts = Options {
        write_buffer: 8 << 10,
        table_size: 2 << 10,
        block_size: 512,
        l0_trigger: 2,
        level1_bytes: 4 << 10,
        level_multiplier: 4,
        log_capacity: 16 << 10,
        separate_values: Some(48),
        ..common::tiny()
    };
    let (mut db, _) = common::fresh_on(32 << 20, opts);
    const KEYS: u32 = 150;
    for k in 0..KEYS {
        db.put(&key(k), &value(k, 0, 100), false).unwrap();
    }
    db.start_background();
    let db = std::sync::Arc::new(db);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A value of key `k` is `k/round/` then padding.
    let right = |k: &[u8], v: &[u8]| {
        let k: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        v.len() == 100 && v.starts_with(format!("{k}/").as_bytes())
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut scans = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) || scans < 3 {
                    let mut n = 0;
                    for r in db.iter() {
                        let (k, v) = r.unwrap();
                        assert!(right(&k, &v), "{k:?} = {v:?}");
                        n += 1;
                    }
                    assert_eq!(n, KEYS);
                    for k in (0..KEYS).step_by(7) {
                        let v = db.get(&key(k)).unwrap().unwrap();
                        assert!(right(&key(k), &v));
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    for round in 1..40 {
        for k in 0..KEYS {
            db.put(&key(k), &value(k, round, 100), false).unwrap();
        }
    }
    db.settle().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for r in readers {
        assert!(r.join().unwrap() >= 3);
    }
    // Collections ran: far fewer bytes kept than the 39 rounds wrote.
    let blobs = db.value_blobs();
    let values: u64 = blobs.iter().map(|b| b.values).sum();
    assert!(
        values < 10 * u64::from(KEYS) * 100,
        "{values} bytes kept: {blobs:?}"
    );
    for k in 0..KEYS {
        assert_eq!(db.get(&key(k)).unwrap(), Some(value(k, 39, 100)));
    }
}
