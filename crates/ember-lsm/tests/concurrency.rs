//! Group commit, the background thread, and the file environment.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ember_lsm::{Db, FileEnv, Options};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ember-lsm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_sync_commit_costs_one_sync_and_concurrent_commits_share_it() {
    let dir = temp_dir("group");
    let env = common::Counting {
        delay: Duration::from_millis(2),
        ..common::Counting::new(FileEnv::new(&dir).unwrap())
    };
    let syncs = env.syncs.clone();
    let opts = Options::with_budget(64 << 20); // no rotation inside the test
    let db = Arc::new(Db::create(env, opts).unwrap());
    let before = syncs.load(Ordering::SeqCst);
    for i in 0..20u32 {
        db.put(&i.to_be_bytes(), b"v", true).unwrap();
    }
    assert_eq!(
        syncs.load(Ordering::SeqCst) - before,
        20,
        "one sync per commit"
    );
    let before = syncs.load(Ordering::SeqCst);
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..40u32 {
                    db.put(format!("t{t}-{i:03}").as_bytes(), b"v", true)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let used = syncs.load(Ordering::SeqCst) - before;
    assert!(
        used < 320 / 2,
        "{used} syncs for 320 commits: no group commit"
    );
    assert_eq!(db.iter().count(), 20 + 320);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_background_thread_flushes_and_compacts_while_writers_go_on() {
    let dir = temp_dir("bg");
    let opts = Options {
        block_size: 1024,
        ..Options::with_budget(256 * 1024)
    };
    let mut db = Db::create(FileEnv::new(&dir).unwrap(), opts.clone()).unwrap();
    db.start_background();
    let db = Arc::new(db);
    let threads: Vec<_> = (0..2u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..3000u32 {
                    let k = format!("k{:06}", (i * 7 + t) % 5000);
                    db.put(k.as_bytes(), format!("{t}-{i}").repeat(8).as_bytes(), false)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut model = BTreeMap::new();
    for (k, v) in db.iter().map(|r| r.unwrap()) {
        model.insert(k, v);
    }
    assert!(model.len() > 1000);
    // Wait for the background thread to catch up.
    for _ in 0..200 {
        if !db.has_immutable() && db.level_counts()[0] < 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let counts = db.level_counts();
    assert!(
        counts.iter().skip(1).any(|&n| n > 0),
        "compacted: {counts:?}"
    );
    let db = Arc::try_unwrap(db).unwrap();
    db.put(b"last", b"one", true).unwrap();
    model.insert(b"last".to_vec(), b"one".to_vec());
    drop(db.close().unwrap());
    let db = Db::open(FileEnv::new(&dir).unwrap(), opts).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, model);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_batch_larger_than_a_log_commits_whole_and_survives_reopen() {
    let (db, root) = common::fresh(common::tiny());
    let mut b = ember_lsm::WriteBatch::new();
    for i in 0..40u32 {
        b.put(i.to_be_bytes().to_vec(), vec![i as u8; 1_000]);
    }
    db.write(b, true).unwrap();
    db.put(b"ok", b"fine", true).unwrap();
    assert_eq!(db.get(b"ok").unwrap(), Some(b"fine".to_vec()));
    let dev = common::shut(db);
    let db = common::open(dev, &root, common::tiny()).unwrap();
    for i in 0..40u32 {
        assert_eq!(
            db.get(&i.to_be_bytes()).unwrap(),
            Some(vec![i as u8; 1_000])
        );
    }
    assert_eq!(db.get(b"ok").unwrap(), Some(b"fine".to_vec()));
}

/// The background thread on a database file writes its tables through the device's own
/// writer handle (not through the environment): what it wrote is all there after a
/// reopen, and nothing committed meanwhile is lost.
#[test]
fn background_tables_written_through_the_device_handle_survive_a_reopen() {
    use ember_device::file::FileBlock;
    use ember_lsm::{Env, SpaceEnv};
    use ember_table::{FormatOptions, SpaceManager};

    let dir = temp_dir("handle");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("db.img");
    let opts = Options {
        block_size: 1024,
        ..Options::with_budget(256 * 1024)
    };
    let dev = FileBlock::create(&path, 64 << 20).unwrap();
    let sm = SpaceManager::format(dev, FormatOptions::default()).unwrap();
    let env = SpaceEnv::create(sm, 64 * 1024).unwrap();
    let root = env.root_locator();
    let mut db = Db::create(env, opts.clone()).unwrap();
    assert!(
        db.with_env(|e| e.device_writer().is_some()),
        "a file device gives a writer handle"
    );
    db.start_background();
    let mut model = BTreeMap::new();
    for i in 0..6000u32 {
        let k = format!("k{:06}", (i * 7919) % 4000);
        let v = format!("{i}-").repeat(10);
        db.put(k.as_bytes(), v.as_bytes(), i % 500 == 0).unwrap();
        model.insert(k.into_bytes(), v.into_bytes());
        if i % 1000 == 0 {
            let (k, v) = model.iter().next().unwrap();
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
    }
    db.flush().unwrap();
    let counts = db.level_counts();
    assert!(counts.iter().skip(1).any(|&n| n > 0), "{counts:?}");
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, model);
    let dev = db.close().unwrap().into_space().close().unwrap();
    drop(dev);
    let sm = SpaceManager::open(FileBlock::open(&path).unwrap()).unwrap();
    let db = Db::open(SpaceEnv::open(sm, &root).unwrap(), opts).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got, model);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `f` on a thread and fails the test if it takes longer than a minute (a hang).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: no end after a minute (a hang, or a panic above)"))
}

#[test]
fn a_full_journal_in_a_background_job_is_retried_and_its_tables_removed() {
    bounded("the retried jobs", || {
        let env = common::counting_env();
        let (journal_full, live) = (env.journal_full.clone(), env.live.clone());
        let mut db = Db::create(env, common::tiny()).unwrap();
        db.start_background();
        let mut model = BTreeMap::new();
        // Writes go on until the background jobs have met every failure (at most 60,000).
        let mut i = 0u32;
        while i < 3000 || journal_full.load(Ordering::SeqCst) > 0 {
            assert!(i < 60_000, "the background jobs did not meet the failures");
            if i == 1000 {
                // Compactions into several tables run from here on. Every third table a job
                // creates fails while the count lasts: a job that wrote tables before the
                // failure leaves them behind, doomed, and is picked again.
                journal_full.store(12, Ordering::SeqCst);
            }
            let k = format!("key{:05}", (i * 7919) % 1500).into_bytes();
            let v = format!("value-{i}-{}", "x".repeat((i % 40) as usize)).into_bytes();
            db.put(&k, &v, false).unwrap();
            model.insert(k, v);
            i += 1;
        }
        // The thread may be pausing after the last failure (`settle` does not wait for a
        // stalled job): the flush waits for a running job and runs what is due itself, and
        // each step removes the doomed tables first. Nothing is due afterwards, so the
        // thread starts no job while the blobs are counted.
        db.settle().unwrap();
        db.flush().unwrap();
        while db.step().unwrap() {}
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
        assert!(
            got == model,
            "the contents after the retries differ from the model"
        );
        // Nothing leaked: the blobs alive are the tables the levels name, the value blobs
        // they point into, one log and one kept for the next memtable.
        let tables: usize = db.level_counts().iter().sum();
        let values = db.value_blobs();
        assert!(
            !values.is_empty(),
            "values of 32 bytes or more are kept apart"
        );
        assert!(values.iter().all(|v| v.live > 0), "{values:?}");
        assert_eq!(
            live.lock().unwrap().len(),
            tables + values.len() + 1 + db.kept_logs(),
            "blobs alive besides the {tables} tables, {} value blobs and the logs",
            values.len()
        );
        assert_eq!(db.kept_logs(), 1);
        let env = db.close().unwrap();
        let db = Db::open(env, common::tiny()).unwrap();
        let again: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
        assert!(
            again == model,
            "the contents after a reopen differ from the model"
        );
    });
}

#[test]
fn a_panic_in_a_background_job_poisons_the_engine_instead_of_hanging() {
    bounded("the writers after the panic", || {
        let env = common::counting_env();
        env.panic_in_job.store(true, Ordering::SeqCst);
        let mut db = Db::create(env, common::tiny()).unwrap();
        db.put(b"before", b"1", true).unwrap();
        db.start_background();
        // The first flush the thread runs panics; commits go on until the engine refuses.
        let mut refused = None;
        for i in 0..10_000u32 {
            if let Err(e) = db.put(format!("k{i:05}").as_bytes(), &[7; 64], false) {
                refused = Some(e);
                break;
            }
        }
        match refused {
            Some(ember_lsm::LsmError::Poisoned(_)) => {}
            other => panic!("writes after the panic: {other:?}"),
        }
        assert!(matches!(db.flush(), Err(ember_lsm::LsmError::Poisoned(_))));
        assert!(matches!(
            db.settle(),
            Err(ember_lsm::LsmError::Poisoned(_)) | Ok(())
        ));
        assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
        drop(db);
    });
}
