//! After a failed write the engine refuses every further write, a flush included: what it
//! holds in RAM may not match what reached the device, so nothing more goes there.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;

use ember_device::MemBlock;
use ember_lsm::{Db, LsmError, SpaceEnv};
use ember_table::{FormatOptions, SpaceManager};

#[test]
fn a_failed_sync_poisons_writes_and_flushes() {
    let sm = SpaceManager::format(MemBlock::new(8 << 20), FormatOptions::default()).unwrap();
    let env = common::Counting::new(SpaceEnv::create(sm, 64 * 1024).unwrap());
    let failing = env.failing.clone();
    let db = Db::create(env, common::tiny()).unwrap();
    db.put(b"a", b"1", true).unwrap();
    failing.store(true, Ordering::SeqCst);
    assert!(db.put(b"b", b"2", true).is_err(), "the sync failed");
    // The device works again; the engine still refuses.
    failing.store(false, Ordering::SeqCst);
    let poisoned = |r: ember_lsm::Result<()>, what: &str| match r {
        Err(LsmError::Poisoned(_)) => {}
        other => panic!("{what} after a failed sync: {other:?}"),
    };
    poisoned(db.flush(), "flush");
    poisoned(db.put(b"c", b"3", false), "put");
    poisoned(db.flush(), "a second flush");
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}
