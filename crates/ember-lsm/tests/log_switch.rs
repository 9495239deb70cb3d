//! A log switch's manifest snapshot waits for the next sync (it only seals one log and
//! starts the next), but the next snapshot never overwrites the slot of the one before an
//! unsynced one: between two snapshots there is always a sync. The crash tests check what
//! survives a cut; this checks the order of writes and syncs that argument rests on.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use ember_lsm::{Db, Options};

/// The device's writes and syncs, as `common::Counting` records them, while the keys are
/// put (by the writer and the background thread, with `background`).
fn run(keys: impl Iterator<Item = u32>, background: bool) -> Vec<char> {
    let env = common::counting_env();
    let events = Arc::clone(&env.events);
    let opts = Options {
        separate_values: None,
        ..common::tiny()
    };
    let mut db = Db::create(env, opts).unwrap();
    if background {
        db.start_background();
    }
    let mut n = 0u32;
    for k in keys {
        db.put(&k.to_be_bytes(), &[k as u8; 40], false).unwrap();
        n += 1;
        if !background && n.is_multiple_of(7) {
            // Compactions, among them moves down a level, which write a snapshot without
            // a sync of their own.
            while db.step().unwrap() {}
        }
        if n.is_multiple_of(500) {
            db.put(b"sync", b"now", true).unwrap();
        }
    }
    drop(db);
    events.lock().unwrap().clone()
}

fn check(events: &[char]) {
    // `Db::create` clears slot 0 before its first snapshot: start after that one's sync.
    let first = events.iter().position(|&e| e == 'S').unwrap();
    let events = &events[first + 1..];
    // Some snapshot waited: a write other than a snapshot came before the next sync.
    let waited = events
        .iter()
        .enumerate()
        .filter(|&(i, &e)| e == 'R' && events[i + 1..].iter().find(|&&e| e != 'R') == Some(&'W'))
        .count();
    assert!(waited > 0, "no log switch's snapshot waited for a sync");
    // Never two snapshots without a sync between them.
    let mut since_sync = 0;
    for (i, &e) in events.iter().enumerate() {
        match e {
            'S' => since_sync = 0,
            'R' => {
                since_sync += 1;
                assert!(
                    since_sync < 2,
                    "two snapshots without a sync, at event {i}: {:?}",
                    &events[i.saturating_sub(12)..(i + 4).min(events.len())]
                );
            }
            _ => {}
        }
    }
}

fn scattered(n: u32) -> impl Iterator<Item = u32> {
    (0..n).map(|k| k.wrapping_mul(2_654_435_761) % 1000)
}

#[test]
fn snapshots_that_wait_for_a_sync_never_come_two_in_a_row() {
    check(&run(0..3000, false));
    check(&run((0..3000).rev(), false));
    check(&run(scattered(3000), false));
}

/// With the background thread, a job picked before a log switch installs its tables after
/// it: its snapshot must sync the switch's first.
#[test]
fn with_the_background_thread_snapshots_never_come_two_in_a_row() {
    // The interleaving is each run's own: several runs.
    for _ in 0..8 {
        check(&run(scattered(20_000), true));
    }
}
