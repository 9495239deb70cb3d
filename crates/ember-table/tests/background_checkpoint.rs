//! Checkpoints whose writes home run on a thread of the device's (a file's writer handle)
//! while transactions go on: every row reads back as the last commit left it, during the
//! run, after the database is dropped with a checkpoint in flight and reopened, and after a
//! clean close. (Cuts at every write and sync of the same steps, run by the writer's
//! thread on a fault-injecting device, are in `db_crash.rs`.)

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use ember_device::SplitMix64;
use ember_device::file::FileBlock;
use ember_table::{Database, FormatOptions, IndexKind, Mode, Options, Schema, Value};

fn options(mode: Mode) -> Options {
    Options {
        mode,
        format: FormatOptions {
            // Small: a checkpoint every few hundred commits.
            log_bytes: Some(256 * 1024),
            ..FormatOptions::default()
        },
        block_size: 4096,
        // Small: clean blocks leave RAM and are read back from the file.
        buffer_bytes: 64 * 1024,
        ..Options::default()
    }
}

fn row(k: i64, rng: &mut SplitMix64) -> Vec<Value> {
    let n = 50 + rng.below(400) as usize;
    vec![
        Value::Integer(k),
        Value::Blob((0..n).map(|_| rng.byte()).collect()),
    ]
}

fn check(db: &mut Database<FileBlock>, model: &BTreeMap<i64, Vec<Value>>) {
    assert_eq!(db.row_count("t").unwrap(), model.len());
    for (k, r) in model {
        assert_eq!(
            db.get("t", &[Value::Integer(*k)]).unwrap().as_ref(),
            Some(r)
        );
    }
}

fn run(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.img");
    let mut db =
        Database::create(FileBlock::create(&path, 64 << 20).unwrap(), options(mode)).unwrap();
    db.create_table("t", Schema::key_value("INTEGER", "BLOB", IndexKind::Tree))
        .unwrap();
    let mut rng = SplitMix64::new(5);
    let mut model = BTreeMap::new();
    for step in 0..6000u64 {
        let k = rng.below(1500) as i64;
        if step % 17 == 0 && model.contains_key(&k) {
            assert!(db.delete("t", &[Value::Integer(k)]).unwrap());
            model.remove(&k);
            continue;
        }
        let r = row(k, &mut rng);
        if model.contains_key(&k) {
            assert!(db.update("t", &r).unwrap());
        } else {
            db.insert("t", &r).unwrap();
        }
        model.insert(k, r);
        // Now and then a transaction of rows too big for its record: written in place, it
        // waits for the checkpoint in flight.
        if step % 500 == 250 {
            db.begin().unwrap();
            for j in 0..3 {
                let k = 2000 + (step as i64) * 3 + j;
                let r = vec![Value::Integer(k), Value::Blob(vec![j as u8; 1500])];
                db.insert("t", &r).unwrap();
                model.insert(k, r);
            }
            db.commit().unwrap();
        }
        if step % 1000 == 999 {
            check(&mut db, &model);
        }
        // An explicit checkpoint writes home through the device's handle on this thread,
        // with the background one before it landed first.
        if step % 2000 == 1333 {
            db.checkpoint().unwrap();
            check(&mut db, &model);
        }
    }
    assert!(
        db.background_checkpoints() >= 3,
        "only {} checkpoints ran in the background",
        db.background_checkpoints()
    );
    check(&mut db, &model);
    // Dropped, maybe with a checkpoint in flight: reopening replays what the journal holds.
    drop(db);
    let mut db = Database::open(FileBlock::open(&path).unwrap(), options(mode)).unwrap();
    db.verify().unwrap();
    check(&mut db, &model);
    db.close().unwrap();
    let mut db = Database::open(FileBlock::open(&path).unwrap(), options(mode)).unwrap();
    db.verify().unwrap();
    check(&mut db, &model);
}

#[test]
fn metadata_mode_rows_survive_checkpoints_written_in_the_background() {
    run(Mode::Metadata);
}

#[test]
fn full_mode_rows_survive_checkpoints_written_in_the_background() {
    run(Mode::Full);
}
