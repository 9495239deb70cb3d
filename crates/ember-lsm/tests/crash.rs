//! The LSM engine under power cuts: a workload of 240 mixed operations (single puts and
//! deletes with and without sync, multi-key batches, batches larger than the write buffer
//! (which their commits flush), explicit flushes and compaction steps,
//! with memtables and tables small enough that rotations, flushes and compactions into
//! several levels happen inside it) is cut at every device operation, with torn sectors and
//! lost unsynced writes. After each cut the database must reopen and hold exactly the state
//! after some commit no older than the last acknowledged sync-mode commit: every
//! acknowledged sync commit present, no partial batch, commits lost only from the end. A
//! second test cuts a sample of points of the same workload with the background thread
//! flushing and compacting (`CrashTest::run_threaded`: each run's own interleaving). The
//! workload runs with every value in its table and, in a third test, with values of 32 bytes
//! or more kept in value blobs (with smaller tables, so that keys and pointers alone still
//! fill several levels, and blobs that the overwrites leave mostly garbage are collected).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use ember_crashtest::{CrashTest, SharedDevice};
use ember_device::{FaultyBlock, MemBlock, PowerFail, SplitMix64};
use ember_lsm::{Db, Env, LsmError, Options, SpaceEnv, WriteBatch};
use ember_table::{FormatOptions, SpaceManager};

const DEV: usize = 2 << 20;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct State {
    /// The engine's settings.
    opts: Options,
    root: Option<Vec<u8>>,
    /// The model after each commit (index 0: empty; the last may be the commit in flight).
    commits: Vec<Model>,
    /// Commits known durable: up to the last acknowledged sync commit.
    durable: usize,
}

fn format() -> FormatOptions {
    FormatOptions {
        log_bytes: Some(64 * 1024),
        ..FormatOptions::default()
    }
}

fn workload(dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut State) -> Result<(), LsmError> {
    let sm = SpaceManager::format(&mut *dev, format())?;
    let env = SpaceEnv::create(sm, 16 * 1024)?;
    let root = env.root_locator();
    let db = Db::create(env, st.opts.clone())?;
    st.root = Some(root);
    drive(&db, st, false)?;
    if st.opts.separate_values.is_some() {
        let values = db.value_blobs();
        assert!(!values.is_empty(), "no value blob was written");
    }
    let counts = db.level_counts();
    assert!(
        counts.iter().skip(1).filter(|&&c| c > 0).count() >= 2,
        "the workload should fill several levels: {counts:?}"
    );
    Ok(())
}

/// [`workload`] with the engine's background thread flushing and compacting, its tables
/// written through the device's writer handle.
fn threaded_workload(
    dev: SharedDevice<FaultyBlock<MemBlock<Vec<u8>>>>,
    st: &mut State,
) -> Result<(), LsmError> {
    let probe = dev.clone();
    let cut = || probe.with(|d| d.is_cut());
    let sm = SpaceManager::format(dev, format())?;
    let env = SpaceEnv::create(sm, 16 * 1024)?;
    let root = env.root_locator();
    let mut db = Db::create(env, st.opts.clone())?;
    st.root = Some(root);
    db.start_background();
    // Settled, so that a job that failed after the last commit is reported too.
    let r = drive(&db, st, true).and_then(|()| db.settle());
    if let Err(e) = &r {
        // Asked while the engine still runs: an error from anything but the power loss
        // must not pass for it because the thread reaches the cut later.
        assert!(cut(), "the workload failed before the cut: {e}");
    } else if !cut() {
        let levels = db.level_counts();
        assert!(
            levels.iter().skip(1).any(|&n| n > 0),
            "the background thread should have flushed and compacted: {levels:?}"
        );
        assert!(
            probe.handle_ops() > 0,
            "no table was written through the device's writer handle"
        );
    }
    r
}

/// The 240 operations, recording each commit's model and which are acknowledged durable.
/// With the background thread (`threaded`), the compactions due every 17 steps are left to
/// it (the workload waits for them) instead of being stepped by the caller: a caller's
/// steps in a fast build take every job before the thread wakes, and nothing would be
/// written through the device's writer handle.
fn drive<E: Env>(db: &Db<E>, st: &mut State, threaded: bool) -> Result<(), LsmError> {
    let mut model = Model::new();
    st.commits.push(model.clone());
    let mut rng = SplitMix64::new(7);
    for step in 0..240u64 {
        let mut next = model.clone();
        let mut batch = WriteBatch::new();
        let n = if rng.below(5) == 0 {
            2 + rng.below(4)
        } else {
            1
        };
        // Now and then a batch larger than the write buffer on its own, which its commit
        // flushes (a bulk load in one transaction).
        let bulk = step % 60 == 30;
        let n = if bulk { 24 } else { n };
        for _ in 0..n {
            let k = format!("key{:03}", rng.below(90)).into_bytes();
            if bulk {
                let v: Vec<u8> = (0..120).map(|_| rng.byte()).collect();
                batch.put(k.clone(), v.clone());
                next.insert(k, v);
            } else if rng.below(4) == 0 {
                batch.delete(k.clone());
                next.remove(&k);
            } else {
                let len = rng.below(150) as usize;
                let v: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
                batch.put(k.clone(), v.clone());
                next.insert(k, v);
            }
        }
        let sync = rng.below(3) != 0;
        st.commits.push(next.clone());
        db.write(batch, sync)?;
        model = next;
        if sync {
            st.durable = st.commits.len() - 1;
        }
        if step % 41 == 40 {
            db.flush()?;
            st.durable = st.commits.len() - 1;
        }
        if step % 17 == 16 {
            if threaded {
                db.settle()?;
            } else {
                while db.step()? {}
            }
        }
    }
    Ok(())
}

fn contents(db: &common::MemDbOn<'_>) -> Result<Model, String> {
    let mut m = Model::new();
    for r in db.iter() {
        let (k, v) = r.map_err(|e| format!("iteration failed: {e}"))?;
        m.insert(k, v);
    }
    for (k, v) in &m {
        let got = db.get(k).map_err(|e| format!("get failed: {e}"))?;
        if got.as_ref() != Some(v) {
            return Err(format!("get({k:?}) disagrees with the iterator"));
        }
    }
    Ok(m)
}

/// Reopens what survived a cut (twice: recovery writes its own tables and manifest) and
/// checks it is the state after some commit no older than the last acknowledged durable one.
fn check(mut medium: MemBlock<Vec<u8>>, st: &State) -> Result<(), String> {
    let Some(root) = &st.root else {
        return Ok(());
    };
    let got = {
        let db = common::open(&mut medium, root, st.opts.clone())
            .map_err(|e| format!("reopen failed: {e}"))?;
        let got = contents(&db)?;
        db.close().map_err(|e| format!("close: {e}"))?;
        got
    };
    let db = common::open(&mut medium, root, st.opts.clone())
        .map_err(|e| format!("second reopen failed: {e}"))?;
    if contents(&db)? != got {
        return Err("a second reopen changed the contents".into());
    }
    match st.commits.iter().rposition(|m| *m == got) {
        Some(k) if k >= st.durable => Ok(()),
        Some(k) => Err(format!(
            "the database went back to commit {k}; commit {} was acknowledged durable",
            st.durable
        )),
        None => Err("the database holds a state no prefix of the commits produced".into()),
    }
}

/// Values in their tables.
fn inline() -> Options {
    Options {
        separate_values: None,
        ..common::tiny()
    }
}

/// Values of 32 bytes or more in value blobs, tables small enough for keys and pointers.
fn separated() -> Options {
    Options {
        table_size: 256,
        level1_bytes: 512,
        ..common::tiny()
    }
}

fn cut_everywhere(opts: fn() -> Options) {
    let report = CrashTest::new()
        .run(
            || MemBlock::new(DEV),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut State| {
                st.opts = opts();
                workload(dev, st)
            },
            |medium, st, _| check(medium, st),
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.ops >= 200, "only {} operations", report.ops);
}

#[test]
fn every_acknowledged_sync_commit_survives_and_no_batch_is_partial() {
    cut_everywhere(inline);
}

#[test]
fn with_values_apart_every_acknowledged_sync_commit_survives() {
    cut_everywhere(separated);
}

/// The same promises with the background thread: its flushes and compactions, their
/// tables written and synced through the device's writer handle while commits go on, are
/// cut at a sample of points (each run's own interleaving).
#[test]
fn with_the_background_thread_every_acknowledged_sync_commit_survives() {
    let report = CrashTest::new()
        .max_points(600)
        .run_threaded(
            || MemBlock::new(DEV),
            |dev, st: &mut State| {
                st.opts = separated();
                threaded_workload(dev, st)
            },
            |medium, st, _| check(medium, st),
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.ops >= 200, "only {} operations", report.ops);
}
