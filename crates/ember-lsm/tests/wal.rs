//! The log and its environment: how each log is readied for the writes it gets.
#![allow(clippy::unwrap_used)]

mod common;

use ember_lsm::{Db, Options};

/// Commits that do not sync, of records too big to be judged small, leave their logs as
/// tables are left (written once, synced once: nothing readied); the first commit that
/// syncs readies its log, once, and so does each new log's first synced commit.
#[test]
fn a_log_is_readied_at_its_first_synced_commit_and_only_once() {
    let env = common::counting_env();
    let (readied, appended) = (env.readied.clone(), env.appended.clone());
    let db = Db::create(env, common::tiny()).unwrap();
    // Enough unsynced commits to rotate through several logs, flush and compact.
    for i in 0..400u32 {
        db.put(format!("k{i:04}").as_bytes(), &[7; 300], false)
            .unwrap();
    }
    assert!(readied.lock().unwrap().is_empty(), "{:?}", readied.lock());
    assert!(appended.lock().unwrap().is_empty(), "{:?}", appended.lock());
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
    assert!(appended.lock().unwrap().is_empty(), "{:?}", appended.lock());
    assert_eq!(db.get(b"synced").unwrap().as_deref(), Some(&b"2"[..]));
}

/// Without syncs, a log is readied for appends once its records prove small (64 of them
/// averaging under 256 bytes), and never while they are big; a commit that syncs then
/// readies it for syncs, once.
#[test]
fn an_unsynced_log_is_readied_for_appends_when_its_records_are_small() {
    let opts = Options {
        write_buffer: 1 << 20,
        log_capacity: 2 << 20,
        ..common::tiny()
    };
    for (value, readied_after) in [(40usize, Some(64usize)), (600, None)] {
        let env = common::counting_env();
        let (readied, appended) = (env.readied.clone(), env.appended.clone());
        let db = Db::create(env, opts.clone()).unwrap();
        for i in 0..200usize {
            let was = appended.lock().unwrap().len();
            db.put(format!("k{i:04}").as_bytes(), &vec![7; value], false)
                .unwrap();
            let now = appended.lock().unwrap().len();
            if now > was {
                assert_eq!(Some(i), readied_after, "{value}-byte values");
            }
        }
        let logs = appended.lock().unwrap().clone();
        assert_eq!(
            logs.len(),
            usize::from(readied_after.is_some()),
            "{value}-byte values"
        );
        assert!(readied.lock().unwrap().is_empty(), "{value}-byte values");
        db.put(b"synced", b"1", true).unwrap();
        db.put(b"synced", b"2", true).unwrap();
        let synced = readied.lock().unwrap().clone();
        assert_eq!(synced.len(), 1, "{value}-byte values: {synced:?}");
        if let Some(&log) = logs.first() {
            assert_eq!(synced, vec![log], "the same log, now synced");
        }
        assert_eq!(appended.lock().unwrap().len(), logs.len());
    }
}
