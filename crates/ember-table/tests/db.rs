//! The table engine's API: rows in, rows out, transactions, reopening.

#![allow(clippy::unwrap_used)]

use std::ops::Bound;

use ember_device::MemBlock;
use ember_table::{
    Column, Database, IndexKind, Mode, Options, Order, Schema, TableError, Value, ValueRef,
};

fn schema(index: IndexKind) -> Schema {
    Schema {
        columns: vec![
            Column {
                name: "id".into(),
                decl_type: "INTEGER".into(),
                not_null: true,
            },
            Column {
                name: "name".into(),
                decl_type: "TEXT".into(),
                not_null: false,
            },
        ],
        primary_key: vec![0],
        index,
    }
}

fn row(i: i64, s: &str) -> Vec<Value> {
    vec![Value::Integer(i), Value::Text(s.into())]
}

fn opts(mode: Mode) -> Options {
    Options {
        mode,
        ..Options::default()
    }
}

fn fresh(mode: Mode) -> Database<MemBlock<Vec<u8>>> {
    Database::create(MemBlock::new(32 << 20), opts(mode)).unwrap()
}

#[test]
fn insert_new_reports_a_taken_key_and_changes_nothing() {
    for index in [IndexKind::Tree, IndexKind::Hash] {
        let mut db = fresh(Mode::Full);
        db.create_table("t", schema(index)).unwrap();
        assert!(db.insert_new("t", &row(3, "a")).unwrap());
        // A taken key: no error, nothing written, the first row kept.
        assert!(!db.insert_new("t", &row(3, "b")).unwrap());
        assert_eq!(
            db.get("t", &[Value::Integer(3)]).unwrap(),
            Some(row(3, "a"))
        );
        // Inside a transaction too, and the transaction goes on.
        db.begin().unwrap();
        assert!(db.insert_new("t", &row(4, "c")).unwrap());
        assert!(!db.insert_new("t", &row(4, "d")).unwrap());
        assert!(!db.insert_new("t", &row(3, "e")).unwrap());
        db.commit().unwrap();
        assert_eq!(db.scan("t").unwrap(), vec![row(3, "a"), row(4, "c")]);
        // A key freed by a delete is free again.
        assert!(db.delete("t", &[Value::Integer(3)]).unwrap());
        assert!(db.insert_new("t", &row(3, "f")).unwrap());
        assert_eq!(
            db.get("t", &[Value::Integer(3)]).unwrap(),
            Some(row(3, "f"))
        );
    }
}

#[test]
fn insert_get_update_delete_and_scan() {
    let mut db = fresh(Mode::Full);
    db.create_table("t", schema(IndexKind::Tree)).unwrap();
    for i in (0..200).rev() {
        db.insert("t", &row(i, &format!("n{i}"))).unwrap();
    }
    assert!(matches!(
        db.insert("t", &row(5, "dup")),
        Err(TableError::Constraint(_))
    ));
    assert_eq!(
        db.get("t", &[Value::Integer(7)]).unwrap(),
        Some(row(7, "n7"))
    );
    assert!(db.update("t", &row(7, &"x".repeat(3000))).unwrap());
    assert_eq!(
        db.get("t", &[Value::Integer(7)]).unwrap(),
        Some(row(7, &"x".repeat(3000)))
    );
    assert!(db.delete("t", &[Value::Integer(8)]).unwrap());
    assert!(!db.delete("t", &[Value::Integer(8)]).unwrap());
    let all = db.scan("t").unwrap();
    assert_eq!(all.len(), 199);
    let keys: Vec<i64> = all
        .iter()
        .map(|r| if let Value::Integer(i) = r[0] { i } else { -1 })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "a tree index scans in key order");
    let some = db
        .range(
            "t",
            Bound::Included(&[Value::Integer(10)][..]),
            Bound::Excluded(&[Value::Integer(15)][..]),
        )
        .unwrap();
    assert_eq!(some.len(), 5);
    assert!(matches!(
        db.get("nope", &[]),
        Err(TableError::NoSuchTable(_))
    ));
}

#[test]
fn rows_written_from_borrowed_values_read_back_as_owned_ones_do() {
    let mut db = fresh(Mode::Full);
    db.create_table("t", schema(IndexKind::Tree)).unwrap();
    let name = String::from("borrowed");
    db.insert("t", &[ValueRef::Integer(1), ValueRef::Text(&name)])
        .unwrap();
    db.insert("t", &row(2, "owned")).unwrap();
    assert_eq!(
        db.get("t", &[Value::Integer(1)]).unwrap(),
        Some(row(1, "borrowed"))
    );
    // The same checks as for owned rows: the primary key, NOT NULL, the column count.
    assert!(matches!(
        db.insert("t", &[ValueRef::Integer(1), ValueRef::Text("again")]),
        Err(TableError::Constraint(_))
    ));
    assert!(matches!(
        db.insert("t", &[ValueRef::Null, ValueRef::Text("x")]),
        Err(TableError::Constraint(_))
    ));
    assert!(matches!(
        db.insert("t", &[ValueRef::Integer(4)]),
        Err(TableError::Constraint(_))
    ));
    assert!(
        db.update("t", &[ValueRef::Integer(2), ValueRef::Text("changed")])
            .unwrap()
    );
    assert_eq!(
        db.get("t", &[Value::Integer(2)]).unwrap(),
        Some(row(2, "changed"))
    );
    assert!(
        !db.update("t", &[ValueRef::Integer(9), ValueRef::Text("none")])
            .unwrap()
    );
}

#[cfg(feature = "secondary-index")]
#[test]
fn borrowed_rows_keep_secondary_indexes_as_owned_ones_do() {
    let mut db = fresh(Mode::Full);
    db.create_table("t", schema(IndexKind::Tree)).unwrap();
    db.create_index("by_name", "t", &["name"], IndexKind::Tree, true)
        .unwrap();
    db.insert("t", &[ValueRef::Integer(1), ValueRef::Text("a")])
        .unwrap();
    db.insert("t", &row(2, "owned")).unwrap();
    assert!(matches!(
        db.insert("t", &[ValueRef::Integer(3), ValueRef::Text("owned")]),
        Err(TableError::Unique(_))
    ));
    assert!(
        db.update("t", &[ValueRef::Integer(2), ValueRef::Text("changed")])
            .unwrap()
    );
    let by = |db: &mut Database<_>, s: &str| {
        let k = [ValueRef::Text(s)];
        db.find_prefix_keys("by_name", Bound::Included(&k[..]), Bound::Included(&k[..]))
            .unwrap()
            .len()
    };
    assert_eq!((by(&mut db, "owned"), by(&mut db, "changed")), (0, 1));
}

#[test]
fn transactions_commit_and_roll_back_across_tables() {
    let mut db = fresh(Mode::Metadata);
    db.create_table("a", schema(IndexKind::Hash)).unwrap();
    db.begin().unwrap();
    db.create_table("b", schema(IndexKind::Tree)).unwrap();
    db.insert("a", &row(1, "one")).unwrap();
    db.insert("b", &row(2, "two")).unwrap();
    db.rollback().unwrap();
    assert!(db.schema("b").is_err());
    assert_eq!(db.get("a", &[Value::Integer(1)]).unwrap(), None);
    db.begin().unwrap();
    db.insert("a", &row(1, "one")).unwrap();
    db.update("a", &row(1, "uno")).unwrap();
    db.commit().unwrap();
    assert_eq!(
        db.get("a", &[Value::Integer(1)]).unwrap(),
        Some(row(1, "uno"))
    );
    // A failed autocommit statement leaves nothing behind.
    assert!(db.insert("a", &[Value::Null, Value::Null]).is_err());
    assert_eq!(db.row_count("a").unwrap(), 1);
}

#[test]
fn everything_survives_close_and_reopen_in_every_mode() {
    for mode in [
        Mode::None,
        Mode::Disorder,
        Mode::Metadata,
        Mode::Data,
        Mode::Full,
    ] {
        let mut db = fresh(mode);
        db.create_table("t", schema(IndexKind::Hash)).unwrap();
        for i in 0..500 {
            db.insert("t", &row(i, &"v".repeat((i % 50) as usize)))
                .unwrap();
        }
        db.delete("t", &[Value::Integer(3)]).unwrap();
        db.drop_table("t").unwrap();
        db.create_table("t", schema(IndexKind::Tree)).unwrap();
        db.insert("t", &row(1, "again")).unwrap();
        let dev = db.close().unwrap();
        let mut db = Database::open(dev, opts(mode)).unwrap();
        assert_eq!(db.scan("t").unwrap(), vec![row(1, "again")], "{mode:?}");
    }
}

#[test]
fn a_full_mode_commit_is_there_after_a_reopen_without_checkpoint() {
    let mut db = fresh(Mode::Full);
    db.create_table("t", schema(IndexKind::Hash)).unwrap();
    for i in 0..300 {
        db.insert("t", &row(i, "x")).unwrap();
    }
    // Take the bytes as they are on the device, without a checkpoint: the journal replays.
    let bytes = {
        let mut b = vec![0u8; 32 << 20];
        ember_device::BlockDevice::read(db_device(&mut db), 0, &mut b).unwrap();
        b
    };
    let mut db2 = Database::open(MemBlock::from_backing(bytes), opts(Mode::Full)).unwrap();
    assert_eq!(db2.row_count("t").unwrap(), 300);
    assert_eq!(
        db2.get("t", &[Value::Integer(299)]).unwrap(),
        Some(row(299, "x"))
    );
}

fn db_device(db: &mut Database<MemBlock<Vec<u8>>>) -> &mut MemBlock<Vec<u8>> {
    db.device()
}

#[test]
fn rowid_tables_number_their_rows() {
    let mut db = fresh(Mode::Metadata);
    let mut s = schema(IndexKind::Tree);
    s.primary_key.clear();
    db.create_table("log", s).unwrap();
    assert_eq!(db.insert("log", &row(0, "a")).unwrap(), Some(1));
    assert_eq!(db.insert("log", &row(0, "b")).unwrap(), Some(2));
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts(Mode::Metadata)).unwrap();
    assert_eq!(db.insert("log", &row(0, "c")).unwrap(), Some(3));
    assert_eq!(
        db.get("log", &[Value::Integer(2)]).unwrap(),
        Some(row(0, "b"))
    );
}

#[test]
fn churn_does_not_grow_the_table_without_bound() {
    let mut db = fresh(Mode::Metadata);
    db.create_table("t", schema(IndexKind::Hash)).unwrap();
    for round in 0..200 {
        for i in 0..20 {
            let v = format!("{round}-{}", "y".repeat((i * 7 + round) % 90));
            if round == 0 {
                db.insert("t", &row(i as i64, &v)).unwrap();
            } else {
                db.update("t", &row(i as i64, &v)).unwrap();
            }
        }
        for i in 0..20 {
            db.delete("t", &[Value::Integer(i)]).unwrap();
            db.insert("t", &row(i, "back")).unwrap();
        }
    }
    db.verify().unwrap();
    let used = db.device_bytes_in_use();
    assert!(used < 256 * 1024, "{used} bytes in use for 20 small rows");
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts(Mode::Metadata)).unwrap();
    db.verify().unwrap();
    assert_eq!(db.row_count("t").unwrap(), 20);
}

#[test]
fn random_updates_of_a_full_table_reuse_the_space_checkpoints_free() {
    // 3,000 rows of ~120 bytes fill their 4 KiB blocks; 30 rounds of 1,000 random updates
    // with a checkpoint after each. A row that does not fit its block moves to the last
    // block, leaving a hole that is free on the device once the next checkpoint wrote the
    // header that no longer names it; later updates of that block's rows go into it. Odd
    // rounds make rows 8 bytes longer, so that their updates cannot simply be written over
    // the old tuple (as even rounds' updates are, `tests/overwrite.rs`).
    let mut db = Database::create(MemBlock::new(64 << 20), opts(Mode::Metadata)).unwrap();
    db.create_table("t", schema(IndexKind::Tree)).unwrap();
    let text = |i: i64, round: i64| {
        format!(
            "{i:08}-{round:04}-{}",
            "x".repeat(100 + 8 * (round % 2) as usize)
        )
    };
    db.begin().unwrap();
    for i in 0..3000 {
        db.insert("t", &row(i, &text(i, 0))).unwrap();
    }
    db.commit().unwrap();
    db.checkpoint().unwrap();
    let mut sizes = vec![db.device_bytes_in_use()];
    let mut rng = ember_device::SplitMix64::new(3);
    let mut last = vec![0; 3000];
    for round in 1..=30 {
        for _ in 0..1000 {
            let i = rng.below(3000) as i64;
            db.update("t", &row(i, &text(i, round))).unwrap();
            last[i as usize] = round;
        }
        db.checkpoint().unwrap();
        sizes.push(db.device_bytes_in_use());
    }
    db.verify().unwrap();
    // Blocks thin out until their holes take the updates one checkpoint brings them (here
    // a third of the table each time), then the table stops growing; without reuse every
    // update would leave its old version behind and it would grow by the same each round.
    let (first, last10) = (sizes[10] - sizes[0], sizes[30] - sizes[20]);
    assert!(
        last10 * 8 < first && sizes[30] < 2 * sizes[0],
        "bytes in use by round: {sizes:?}"
    );
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts(Mode::Metadata)).unwrap();
    db.verify().unwrap();
    for (i, round) in last.iter().enumerate() {
        let r = db.get("t", &[Value::Integer(i as i64)]).unwrap().unwrap();
        assert_eq!(r, row(i as i64, &text(i as i64, *round)));
    }
}

#[test]
fn rows_larger_than_a_block_live_in_overflow_blocks() {
    let mut db = fresh(Mode::Full);
    db.create_table("big", schema(IndexKind::Tree)).unwrap();
    let huge = |i: i64, n: usize| vec![Value::Integer(i), Value::Text("é".repeat(n))];
    db.insert("big", &huge(1, 100_000)).unwrap(); // 200 KB: four overflow blocks
    db.insert("big", &huge(2, 10)).unwrap();
    db.insert("big", &huge(3, 40_000)).unwrap();
    assert_eq!(
        db.get("big", &[Value::Integer(1)]).unwrap(),
        Some(huge(1, 100_000))
    );
    db.update("big", &huge(1, 30_000)).unwrap();
    db.delete("big", &[Value::Integer(3)]).unwrap();
    db.verify().unwrap();
    db.begin().unwrap();
    db.insert("big", &huge(4, 50_000)).unwrap();
    db.rollback().unwrap();
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts(Mode::Full)).unwrap();
    db.verify().unwrap();
    assert_eq!(
        db.get("big", &[Value::Integer(1)]).unwrap(),
        Some(huge(1, 30_000))
    );
    assert_eq!(db.get("big", &[Value::Integer(4)]).unwrap(), None);
    let before = db.device_bytes_in_use();
    db.drop_table("big").unwrap();
    db.checkpoint().unwrap();
    assert!(
        db.device_bytes_in_use() < before,
        "dropping gives the overflow blocks back"
    );
    db.verify().unwrap();
}

#[test]
fn a_transaction_too_big_for_the_journal_is_refused_whole() {
    let format = ember_table::FormatOptions {
        log_bytes: Some(128 * 1024),
        ..Default::default()
    };
    let mut db = Database::create(
        MemBlock::new(32 << 20),
        Options {
            format,
            ..opts(Mode::Full)
        },
    )
    .unwrap();
    db.create_table("t", schema(IndexKind::Hash)).unwrap();
    db.insert("t", &row(-1, "before")).unwrap();
    db.begin().unwrap();
    for i in 0..10_000 {
        db.insert("t", &row(i, "a row of the big transaction"))
            .unwrap();
    }
    let err = db.commit().unwrap_err();
    assert!(matches!(err, TableError::JournalFull { .. }), "{err}");
    // Nothing of it stays, in RAM or after a reopen, and the database goes on working.
    assert_eq!(db.row_count("t").unwrap(), 1);
    assert!(db.get("t", &[Value::Integer(5)]).unwrap().is_none());
    db.insert("t", &row(1, "after")).unwrap();
    // Many small commits fill the journal too: checkpoints between them make room.
    for i in 2..3_000 {
        db.insert("t", &row(i, "small")).unwrap();
    }
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts(Mode::Full)).unwrap();
    db.verify().unwrap();
    assert_eq!(db.row_count("t").unwrap(), 3_000);
    assert_eq!(
        db.get("t", &[Value::Integer(1)]).unwrap(),
        Some(row(1, "after"))
    );
}

#[test]
fn last_key_is_the_largest_primary_key() {
    for kind in [IndexKind::Tree, IndexKind::Hash] {
        let mut db = fresh(Mode::Metadata);
        db.create_table("t", schema(kind)).unwrap();
        assert_eq!(db.last_key("t").unwrap(), None);
        for i in [5, -3, 42, 7] {
            db.insert("t", &row(i, "x")).unwrap();
        }
        assert_eq!(db.last_key("t").unwrap(), Some(vec![Value::Integer(42)]));
        db.delete("t", &[Value::Integer(42)]).unwrap();
        assert_eq!(db.last_key("t").unwrap(), Some(vec![Value::Integer(7)]));
        // Keys in index pages written by a checkpoint, and deletes since then that empty
        // the rightmost leaf: the answer comes from the pages and the changes together.
        for i in 100..2_000 {
            db.insert("t", &row(i, "x")).unwrap();
        }
        db.checkpoint().unwrap();
        assert_eq!(db.last_key("t").unwrap(), Some(vec![Value::Integer(1_999)]));
        for i in 1_000..2_000 {
            db.delete("t", &[Value::Integer(i)]).unwrap();
        }
        assert_eq!(db.last_key("t").unwrap(), Some(vec![Value::Integer(999)]));
        db.insert("t", &row(5_000, "x")).unwrap();
        assert_eq!(db.last_key("t").unwrap(), Some(vec![Value::Integer(5_000)]));
        let dev = db.close().unwrap();
        let mut db = Database::open(dev, opts(Mode::Metadata)).unwrap();
        assert_eq!(db.last_key("t").unwrap(), Some(vec![Value::Integer(5_000)]));
    }
}

/// Regression: rows whose tuples lived only in journal records were replayed into RAM at
/// open, and the checkpoint that followed wrote their block headers but not the tuples, so
/// once the blocks left RAM every such row failed its checksum.
#[test]
fn rows_replayed_from_the_journal_reach_their_blocks() {
    let small = Options {
        mode: Mode::Full,
        block_size: 1024,
        buffer_bytes: 0,
        query_cache_bytes: 0,
        ..Options::default()
    };
    let mut db = Database::create(MemBlock::new(4 << 20), small).unwrap();
    db.create_table("t", schema(IndexKind::Hash)).unwrap();
    for i in 0..60 {
        db.insert("t", &row(i, &format!("row {i}"))).unwrap();
    }
    // The device as a power cut would leave it: rows in journal records only.
    let mut bytes = vec![0u8; 4 << 20];
    use ember_device::BlockDevice;
    db.device().read(0, &mut bytes).unwrap();
    let db = Database::open(MemBlock::from_backing(bytes), small).unwrap();
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, small).unwrap();
    db.verify().unwrap();
    for i in 0..60 {
        assert_eq!(
            db.get("t", &[Value::Integer(i)]).unwrap(),
            Some(row(i, &format!("row {i}")))
        );
    }
}

#[test]
fn ordered_ranges_read_from_either_end() {
    for kind in [IndexKind::Tree, IndexKind::Hash] {
        let mut db = fresh(Mode::Metadata);
        db.create_table("t", schema(kind)).unwrap();
        for i in [5, -3, 42, 7, 19, 0] {
            db.insert("t", &row(i, "x")).unwrap();
        }
        let keys = |rows: Vec<Vec<Value>>| -> Vec<Value> {
            rows.into_iter().map(|r| r[0].clone()).collect()
        };
        let int = |v: &[i64]| -> Vec<Value> { v.iter().map(|&i| Value::Integer(i)).collect() };
        let all = db
            .range_with("t", Bound::Unbounded, Bound::Unbounded, Order::asc(None))
            .unwrap();
        assert_eq!(keys(all), int(&[-3, 0, 5, 7, 19, 42]), "{kind:?}");
        let last = db
            .range_with(
                "t",
                Bound::Unbounded,
                Bound::Unbounded,
                Order::desc(Some(2)),
            )
            .unwrap();
        assert_eq!(keys(last), int(&[42, 19]), "{kind:?}");
        let lo = [Value::Integer(1)];
        let mid = db
            .range_with(
                "t",
                Bound::Included(&lo[..]),
                Bound::Unbounded,
                Order::asc(Some(2)),
            )
            .unwrap();
        assert_eq!(keys(mid), int(&[5, 7]), "{kind:?}");
    }
}

/// The database, reopened from the device's bytes as they are (the journal replays).
fn replayed(db: &mut Database<MemBlock<Vec<u8>>>) -> Database<MemBlock<Vec<u8>>> {
    let mut b = vec![0u8; 32 << 20];
    ember_device::BlockDevice::read(db_device(db), 0, &mut b).unwrap();
    Database::open(MemBlock::from_backing(b), opts(Mode::Full)).unwrap()
}

#[derive(Debug, Clone)]
enum KeyOp {
    Insert(i64),
    Delete(i64),
    /// A transaction of inserts and deletes, committed (`true`) or rolled back.
    Txn(Vec<(bool, i64)>, bool),
    Reopen,
    Replay,
    Checkpoint,
    Recreate,
}

fn key_op() -> impl proptest::strategy::Strategy<Value = KeyOp> {
    use proptest::prelude::*;
    let k = -5i64..40;
    prop_oneof![
        6 => k.clone().prop_map(KeyOp::Insert),
        3 => k.clone().prop_map(KeyOp::Delete),
        2 => (proptest::collection::vec((any::<bool>(), k), 1..6), any::<bool>())
            .prop_map(|(ops, commit)| KeyOp::Txn(ops, commit)),
        1 => Just(KeyOp::Reopen),
        1 => Just(KeyOp::Replay),
        1 => Just(KeyOp::Checkpoint),
        1 => Just(KeyOp::Recreate),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// An insert is refused exactly when its primary key is there, whatever came before:
    /// deletes, rolled-back inserts, reopening, journal replay, checkpoints, a dropped and
    /// recreated table (an insert above every key skips the index probe; this shows the
    /// bound it uses stays a bound).
    #[test]
    fn an_insert_is_refused_exactly_when_its_key_is_there(
        ops in proptest::collection::vec(key_op(), 1..60),
    ) {
        let mut db = fresh(Mode::Full);
        db.create_table("t", schema(IndexKind::Tree)).unwrap();
        let mut model = std::collections::BTreeSet::new();
        let insert = |db: &mut Database<MemBlock<Vec<u8>>>, model: &std::collections::BTreeSet<i64>, k: i64| {
            let r = db.insert("t", &row(k, "v"));
            match r {
                Ok(_) => proptest::prop_assert!(!model.contains(&k), "duplicate {k} accepted"),
                Err(TableError::Constraint(_)) => {
                    proptest::prop_assert!(model.contains(&k), "new key {k} refused")
                }
                Err(e) => proptest::prop_assert!(false, "insert {k}: {e}"),
            }
            Ok(())
        };
        for op in ops {
            match op {
                KeyOp::Insert(k) => {
                    insert(&mut db, &model, k)?;
                    model.insert(k);
                }
                KeyOp::Delete(k) => {
                    let there = db.delete("t", &[Value::Integer(k)]).unwrap();
                    proptest::prop_assert_eq!(there, model.remove(&k));
                }
                KeyOp::Txn(ops, commit) => {
                    let mut m = model.clone();
                    db.begin().unwrap();
                    for (ins, k) in ops {
                        if ins {
                            insert(&mut db, &m, k)?;
                            m.insert(k);
                        } else {
                            proptest::prop_assert_eq!(db.delete("t", &[Value::Integer(k)]).unwrap(), m.remove(&k));
                        }
                    }
                    if commit {
                        db.commit().unwrap();
                        model = m;
                    } else {
                        db.rollback().unwrap();
                    }
                }
                KeyOp::Reopen => {
                    let dev = db.close().unwrap();
                    db = Database::open(dev, opts(Mode::Full)).unwrap();
                }
                KeyOp::Replay => db = replayed(&mut db),
                KeyOp::Checkpoint => db.checkpoint().unwrap(),
                KeyOp::Recreate => {
                    db.drop_table("t").unwrap();
                    db.create_table("t", schema(IndexKind::Tree)).unwrap();
                    model.clear();
                }
            }
        }
        let keys: Vec<i64> = db
            .scan("t")
            .unwrap()
            .into_iter()
            .map(|r| match r[0] {
                Value::Integer(i) => i,
                _ => i64::MIN,
            })
            .collect();
        proptest::prop_assert_eq!(keys, model.into_iter().collect::<Vec<_>>());
    }
}

/// A finished transaction's buffers are kept for the next one. Nothing of one — its
/// operations, its tuples, its undo records, the switch that writes a big transaction's
/// tuples in place — may reach the next: a small commit after a big one and a rolled-back
/// one is still one device write (its record, carrying its tuple) and one sync, and the rows
/// read back, and replay from the journal, as committed.
#[test]
fn each_transaction_starts_clean_after_a_big_and_a_rolled_back_one() {
    use ember_device::{Accounted, BlockDevice};
    use std::collections::BTreeMap;
    let mut db =
        Database::create(Accounted::new(MemBlock::new(32 << 20)), opts(Mode::Full)).unwrap();
    db.create_table("t", schema(IndexKind::Tree)).unwrap();
    let mut model = BTreeMap::new();
    let long = |i: i64| format!("{i:0>200}");
    // Over 2 KiB of tuples: written in place before the record.
    db.begin().unwrap();
    for i in 0..40 {
        db.insert("t", &row(i, &long(i))).unwrap();
        model.insert(i, long(i));
    }
    db.commit().unwrap();
    db.begin().unwrap();
    db.insert("t", &row(100, "gone")).unwrap();
    db.update("t", &row(1, "gone")).unwrap();
    db.delete("t", &[Value::Integer(2)]).unwrap();
    db.rollback().unwrap();
    for (i, s) in [(50, "small"), (3, "changed"), (51, "another")] {
        let before = db.device().stats();
        if model.insert(i, s.to_string()).is_some() {
            assert!(db.update("t", &row(i, s)).unwrap());
        } else {
            db.insert("t", &row(i, s)).unwrap();
        }
        let d = db.device().stats().since(&before);
        assert_eq!((d.writes, d.syncs), (1, 1), "commit of row {i}: {d:?}");
    }
    assert!(db.delete("t", &[Value::Integer(4)]).unwrap());
    model.remove(&4);
    let expect: Vec<Vec<Value>> = model.iter().map(|(i, s)| row(*i, s)).collect();
    fn all<D: BlockDevice>(db: &mut Database<D>) -> Vec<Vec<Value>> {
        db.range_with("t", Bound::Unbounded, Bound::Unbounded, Order::asc(None))
            .unwrap()
    }
    assert_eq!(all(&mut db), expect);
    let mut bytes = vec![0u8; 32 << 20];
    db.device().read(0, &mut bytes).unwrap();
    let mut db2 = Database::open(MemBlock::from_backing(bytes), opts(Mode::Full)).unwrap();
    db2.verify().unwrap();
    assert_eq!(all(&mut db2), expect);
}

/// The engine remembers where it last found a primary key, so an update or delete right
/// after a read does not search the index again. Every change that moves or removes a row,
/// and a rollback, must make it forget: a row read, moved by an update, read again; read
/// inside a transaction that is rolled back; read and deleted; read and dropped with a
/// rolled-back insert under the same key.
#[test]
fn a_row_read_and_then_moved_or_rolled_back_is_found_where_it_is() {
    for kind in [IndexKind::Tree, IndexKind::Hash] {
        let mut db = fresh(Mode::Metadata);
        db.create_table("t", schema(kind)).unwrap();
        for i in 0..20 {
            db.insert("t", &row(i, "short")).unwrap();
        }
        let get = |db: &mut Database<MemBlock<Vec<u8>>>, i: i64| {
            db.get("t", &[Value::Integer(i)]).unwrap()
        };
        // Moved out of its full block by a longer row.
        assert_eq!(get(&mut db, 3), Some(row(3, "short")));
        let long = "l".repeat(3000);
        assert!(db.update("t", &row(3, &long)).unwrap());
        assert_eq!(get(&mut db, 3), Some(row(3, &long)), "{kind:?}");
        assert!(db.update("t", &row(3, "again")).unwrap());
        assert_eq!(get(&mut db, 3), Some(row(3, "again")), "{kind:?}");
        // Read inside a transaction, then rolled back.
        db.begin().unwrap();
        db.insert("t", &row(100, "pending")).unwrap();
        assert_eq!(get(&mut db, 100), Some(row(100, "pending")));
        db.rollback().unwrap();
        assert_eq!(get(&mut db, 100), None, "{kind:?}");
        assert!(!db.update("t", &row(100, "x")).unwrap());
        db.begin().unwrap();
        assert!(db.update("t", &row(5, &long)).unwrap());
        assert_eq!(get(&mut db, 5), Some(row(5, &long)));
        db.rollback().unwrap();
        assert_eq!(get(&mut db, 5), Some(row(5, "short")), "{kind:?}");
        // Read, then deleted.
        assert_eq!(get(&mut db, 7), Some(row(7, "short")));
        assert!(db.delete("t", &[Value::Integer(7)]).unwrap());
        assert_eq!(get(&mut db, 7), None, "{kind:?}");
        assert!(!db.delete("t", &[Value::Integer(7)]).unwrap());
        db.verify().unwrap();
    }
}
