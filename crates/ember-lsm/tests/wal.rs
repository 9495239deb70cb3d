//! The log and its environment: which logs are readied for small synced writes.
#![allow(clippy::unwrap_used)]

mod common;

use ember_lsm::Db;

/// Commits that do not sync leave their logs as tables are left (written once, synced
/// once: nothing readied); the first commit that syncs readies its log, once.
#[test]
fn only_a_log_whose_commits_sync_is_readied_and_only_once() {
    let env = common::counting_env();
    let readied = env.readied.clone();
    let db = Db::create(env, common::tiny()).unwrap();
    // Enough unsynced commits to rotate through several logs, flush and compact.
    for i in 0..400u32 {
        db.put(format!("k{i:04}").as_bytes(), &[7; 40], false)
            .unwrap();
    }
    assert!(readied.lock().unwrap().is_empty(), "{:?}", readied.lock());
    db.put(b"synced", b"1", true).unwrap();
    db.put(b"synced", b"2", true).unwrap();
    let first = readied.lock().unwrap().clone();
    assert_eq!(first.len(), 1, "{first:?}");
    // Synced commits that fill the log: each new log is readied at its first commit.
    for i in 0..200u32 {
        db.put(format!("s{i:04}").as_bytes(), &[8; 40], true)
            .unwrap();
    }
    let all = readied.lock().unwrap().clone();
    assert!(all.len() > 2, "{all:?}");
    let mut distinct = all.clone();
    distinct.dedup();
    assert_eq!(distinct, all, "a log readied twice");
    assert_eq!(db.get(b"synced").unwrap().as_deref(), Some(&b"2"[..]));
}
