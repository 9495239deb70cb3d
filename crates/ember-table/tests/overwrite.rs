//! Updates that write a row over its old tuple, where it lies (`Database::place`): they
//! take no new space, the row keeps its place, a rollback brings the old bytes back, and
//! a transaction whose other tuples go home before its record leaves the overwritten
//! tuple for the checkpoint. The crash suites (`db_crash.rs`) cut power through such
//! updates in every mode.

#![allow(clippy::unwrap_used)]

use ember_device::{Accounted, FaultPlan, FaultyBlock, MemBlock, PowerFail, SplitMix64};
use ember_table::{Database, FormatOptions, IndexKind, Mode, Options, Schema, Value};

fn schema() -> Schema {
    Schema::key_value("INTEGER", "BLOB", IndexKind::Tree)
}

fn row(k: i64, len: usize, rng: &mut SplitMix64) -> Vec<Value> {
    vec![
        Value::Integer(k),
        Value::Blob((0..len).map(|_| rng.byte()).collect()),
    ]
}

fn options(mode: Mode, block_size: u32) -> Options {
    Options {
        mode,
        block_size,
        ..Options::default()
    }
}

/// Rows `0..n` of `len` bytes, committed and checkpointed: full blocks on the device.
fn loaded<D: ember_device::BlockDevice>(
    db: &mut Database<D>,
    n: i64,
    len: usize,
    rng: &mut SplitMix64,
) -> Vec<Vec<Value>> {
    db.create_table("t", schema()).unwrap();
    let rows: Vec<Vec<Value>> = (0..n).map(|k| row(k, len, rng)).collect();
    db.begin().unwrap();
    for r in &rows {
        db.insert("t", r).unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    rows
}

/// Closes `db`, opens it again with no buffer (every block read back from the device) and
/// checks that it holds `rows`.
fn reopened_holds<D: ember_device::BlockDevice>(
    db: Database<D>,
    mode: Mode,
    block_size: u32,
    rows: &[Vec<Value>],
) {
    let dev = db.close().unwrap();
    let cold = Options {
        buffer_bytes: 0,
        query_cache_bytes: 0,
        ..options(mode, block_size)
    };
    let mut db = Database::open(dev, cold).unwrap();
    db.verify().unwrap();
    for r in rows {
        assert_eq!(db.get("t", &r[..1]).unwrap().as_ref(), Some(r), "{mode:?}");
    }
}

#[test]
fn updates_of_rows_in_full_blocks_take_no_new_blocks() {
    for mode in [Mode::Metadata, Mode::Data, Mode::Full] {
        let mut rng = SplitMix64::new(3);
        let mut db =
            Database::create(Accounted::new(MemBlock::new(32 << 20)), options(mode, 4096)).unwrap();
        let mut rows = loaded(&mut db, 600, 100, &mut rng);
        let used = db.device_bytes_in_use();
        // Every row, twice, one transaction each, with checkpoints between: before rows
        // could be rewritten where they lay, each update moved its row to the table's last
        // block (the old one full), and the table grew by half.
        for round in 0..2 {
            for i in 0..rows.len() {
                let k = (i * 7 + round) % rows.len();
                rows[k] = row(k as i64, 100 - round * 3, &mut rng);
                assert!(db.update("t", &rows[k]).unwrap());
            }
            db.checkpoint().unwrap();
        }
        assert_eq!(db.device_bytes_in_use(), used, "{mode:?}");
        db.verify().unwrap();
        reopened_holds(db, mode, 4096, &rows);
    }
}

#[test]
fn a_rolled_back_overwrite_brings_the_old_row_back() {
    let mut rng = SplitMix64::new(4);
    let mut db = Database::create(MemBlock::new(16 << 20), options(Mode::Metadata, 4096)).unwrap();
    let rows = loaded(&mut db, 100, 200, &mut rng);
    db.begin().unwrap();
    for k in [5, 6, 5, 40] {
        assert!(db.update("t", &row(k, 150, &mut rng)).unwrap());
    }
    db.rollback().unwrap();
    for r in &rows {
        assert_eq!(db.get("t", &r[..1]).unwrap().as_ref(), Some(r));
    }
    db.verify().unwrap();
    db.checkpoint().unwrap();
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, options(Mode::Metadata, 4096)).unwrap();
    for r in &rows {
        assert_eq!(db.get("t", &r[..1]).unwrap().as_ref(), Some(r));
    }
}

/// A transaction that overwrites a row and then writes more tuple bytes than its record
/// carries writes those home before its record, with the overwritten tuple's old bytes in
/// their sector; the tuple's new bytes reach the device with the next checkpoint, also when
/// they lie in another page of a big block than its header.
#[test]
fn an_overwrite_in_a_transaction_that_writes_home_reaches_the_device_at_the_checkpoint() {
    for mode in [Mode::Metadata, Mode::Full] {
        let mut rng = SplitMix64::new(5);
        let mut db = Database::create(MemBlock::new(32 << 20), options(mode, 16384)).unwrap();
        let mut rows = loaded(&mut db, 200, 300, &mut rng);
        db.begin().unwrap();
        for k in [10, 35, 10, 150] {
            rows[k] = row(k as i64, 300, &mut rng);
            assert!(db.update("t", &rows[k]).unwrap());
        }
        for k in 200..204 {
            let r = row(k, 1000, &mut rng);
            db.insert("t", &r).unwrap();
            rows.push(r);
        }
        db.commit().unwrap();
        db.checkpoint().unwrap();
        reopened_holds(db, mode, 16384, &rows);
    }
}

/// A transaction writes a row home (its tuples outgrow its record); a checkpoint starts
/// and, before it lands, a later transaction updates that row with one of the same length.
/// Replay from the checkpoint before checks the row's tuple on the device, so the update
/// must not go over it: the checkpoint that ends recovery would write the update there, and
/// a second power cut inside that checkpoint would leave a record whose tuple fails its
/// check — replay would stop there and lose every commit after it. Here every write reaches
/// the device (no commit is lost to the first cut), and a second cut falls at every write
/// and sync of the checkpoint that ends recovery.
/// Row 1000 holds its last update and the rows around it are there.
fn holds_the_last_update<D: ember_device::BlockDevice>(db: &mut Database<D>, ctx: &str) {
    db.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let small = vec![Value::Integer(1000), Value::Blob(vec![9; 100])];
    let big = vec![Value::Integer(1002), Value::Blob(vec![7; 1500])];
    assert_eq!(
        db.get("t", &[Value::Integer(1000)]).unwrap(),
        Some(small),
        "{ctx}"
    );
    assert_eq!(
        db.get("t", &[Value::Integer(1002)]).unwrap(),
        Some(big),
        "{ctx}"
    );
}

#[test]
fn an_update_of_a_row_written_home_before_a_checkpoint_lands_survives_a_second_cut() {
    let opts = || Options {
        format: FormatOptions {
            log_bytes: Some(64 << 10),
            ..FormatOptions::default()
        },
        ..options(Mode::Metadata, 4096)
    };
    let small = |k: i64, round: u8| vec![Value::Integer(k), Value::Blob(vec![round; 100])];
    let big = |k: i64| vec![Value::Integer(k), Value::Blob(vec![7; 1500])];
    let left = || {
        let mut fb = FaultyBlock::new(
            MemBlock::new(16 << 20),
            FaultPlan::run_to_end(0).write_through(),
        );
        let mut db = Database::create(&mut fb, opts()).unwrap();
        db.create_table("t", schema()).unwrap();
        for k in 0..40 {
            db.insert("t", &small(k, 0)).unwrap();
        }
        db.checkpoint().unwrap();
        // Row 1000 goes home with the two big rows, before their record.
        db.begin().unwrap();
        db.insert("t", &small(1000, 1)).unwrap();
        db.insert("t", &big(1001)).unwrap();
        db.insert("t", &big(1002)).unwrap();
        db.commit().unwrap();
        let mut round = 2;
        while !db.checkpoint_in_flight() {
            db.update("t", &small(i64::from(round % 40), round))
                .unwrap();
            round = round.wrapping_add(1).max(2);
        }
        assert!(db.update("t", &small(1000, 9)).unwrap());
        drop(db);
        fb.power_off().0
    };
    let mut fb = FaultyBlock::new(left(), FaultPlan::run_to_end(0));
    let mut db = Database::open(&mut fb, opts()).unwrap();
    holds_the_last_update(&mut db, "no second cut");
    drop(db);
    let recovery_ops = fb.ops();
    assert!(
        recovery_ops >= 5,
        "recovery wrote little: {recovery_ops} operations"
    );
    for cut in 0..recovery_ops {
        for seed in 0..3 {
            let mut fb = FaultyBlock::new(left(), FaultPlan::cut_at(cut, seed));
            let _ = Database::open(&mut fb, opts()).map(drop);
            let (medium, _) = fb.power_off();
            let ctx = format!("cut {cut} of {recovery_ops}, seed {seed}");
            let mut db = Database::open(medium, opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            holds_the_last_update(&mut db, &ctx);
        }
    }
}
