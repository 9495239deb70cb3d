//! The log and its environment: which logs are readied for small writes.
#![allow(clippy::unwrap_used)]

mod common;

use ember_lsm::{Db, Options};

/// Commits that do not sync leave their logs as tables are left (written once, synced once:
/// nothing readied; each log here holds too few records to be judged small); the first
/// commit that syncs readies its log, once.
#[test]
fn a_log_is_readied_at_its_first_synced_commit_and_only_once() {
    let env = common::counting_env();
    let readied = env.readied.clone();
    let db = Db::create(env, common::tiny()).unwrap();
    // Enough unsynced commits to rotate through several logs, flush and compact.
    for i in 0..400u32 {
        db.put(format!("k{i:04}").as_bytes(), &[7; 300], false)
            .unwrap();
    }
    assert!(readied.lock().unwrap().is_empty(), "{:?}", readied.lock());
    db.put(b"synced", b"1", true).unwrap();
    db.put(b"synced", b"2", true).unwrap();
    let first = readied.lock().unwrap().clone();
    assert_eq!(first.len(), 1, "{first:?}");
    // Synced commits that fill the log: each new log is readied at its first commit — a
    // blob kept from a flushed memtable again in each life, but once in each.
    for i in 0..200u32 {
        db.put(format!("s{i:04}").as_bytes(), &[8; 40], true)
            .unwrap();
    }
    let all = readied.lock().unwrap().clone();
    assert!(all.len() > 2, "{all:?}");
    assert!(
        all.windows(2).all(|w| w[0] != w[1]),
        "a log readied twice in one life: {all:?}"
    );
    assert_eq!(db.get(b"synced").unwrap().as_deref(), Some(&b"2"[..]));
}

/// Without syncs, a log is readied once its records prove small (64 of them averaging under
/// 256 bytes), and never while they are big.
#[test]
fn an_unsynced_log_is_readied_when_its_records_are_small() {
    let opts = Options {
        write_buffer: 1 << 20,
        log_capacity: 2 << 20,
        ..common::tiny()
    };
    for (value, readied_after) in [(40usize, Some(64usize)), (600, None)] {
        let env = common::counting_env();
        let readied = env.readied.clone();
        let db = Db::create(env, opts.clone()).unwrap();
        for i in 0..200usize {
            let was = readied.lock().unwrap().len();
            db.put(format!("k{i:04}").as_bytes(), &vec![7; value], false)
                .unwrap();
            let now = readied.lock().unwrap().len();
            if now > was {
                assert_eq!(Some(i), readied_after, "{value}-byte values");
            }
        }
        let n = readied.lock().unwrap().len();
        assert_eq!(
            n,
            usize::from(readied_after.is_some()),
            "{value}-byte values"
        );
    }
}
