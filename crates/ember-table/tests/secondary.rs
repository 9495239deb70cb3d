//! Secondary indexes: kept up to date by every write, unique ones enforced, rolled back with
//! their transaction, and back after a reopen.

#![cfg(feature = "secondary-index")]
#![allow(clippy::unwrap_used)]

use std::ops::Bound;

use ember_device::MemBlock;
use ember_table::{Column, Database, IndexKind, Mode, Options, Schema, TableError, Value};

fn people() -> Schema {
    let col = |n: &str, t: &str| Column {
        name: n.into(),
        decl_type: t.into(),
        not_null: false,
    };
    Schema {
        columns: vec![
            col("id", "INTEGER"),
            col("email", "TEXT"),
            col("age", "INTEGER"),
        ],
        primary_key: vec![0],
        index: IndexKind::Hash,
    }
}

fn p(id: i64, email: &str, age: i64) -> Vec<Value> {
    vec![
        Value::Integer(id),
        Value::Text(email.into()),
        Value::Integer(age),
    ]
}

#[test]
fn secondary_indexes_follow_every_write() {
    let opts = Options {
        mode: Mode::Full,
        ..Options::default()
    };
    let mut db = Database::create(MemBlock::new(16 << 20), opts).unwrap();
    db.create_table("people", people()).unwrap();
    db.insert("people", &p(1, "a@x", 30)).unwrap();
    db.insert("people", &p(2, "b@x", 40)).unwrap();
    db.create_index("by_email", "people", &["email"], IndexKind::Hash, true)
        .unwrap();
    db.create_index("by_age", "people", &["AGE"], IndexKind::Tree, false)
        .unwrap();
    db.insert("people", &p(3, "c@x", 30)).unwrap();
    assert_eq!(
        db.find("by_email", &[Value::Text("b@x".into())]).unwrap(),
        vec![p(2, "b@x", 40)]
    );
    assert_eq!(db.find("by_age", &[Value::Integer(30)]).unwrap().len(), 2);
    assert!(matches!(
        db.insert("people", &p(4, "a@x", 1)),
        Err(TableError::Constraint(_))
    ));
    assert_eq!(
        db.row_count("people").unwrap(),
        3,
        "the refused insert left nothing"
    );
    db.update("people", &p(1, "z@x", 50)).unwrap();
    assert!(
        db.find("by_email", &[Value::Text("a@x".into())])
            .unwrap()
            .is_empty()
    );
    db.delete("people", &[Value::Integer(3)]).unwrap();
    let adults = db
        .find_range(
            "by_age",
            Bound::Included(&[Value::Integer(35)][..]),
            Bound::Unbounded,
        )
        .unwrap();
    assert_eq!(adults, vec![p(2, "b@x", 40), p(1, "z@x", 50)]);
    db.begin().unwrap();
    db.insert("people", &p(9, "q@x", 45)).unwrap();
    db.drop_index("by_email").unwrap();
    db.rollback().unwrap();
    assert!(db.find("by_age", &[Value::Integer(45)]).unwrap().is_empty());
    assert_eq!(
        db.find("by_email", &[Value::Text("z@x".into())])
            .unwrap()
            .len(),
        1
    );
    // Back after a reopen, from the journal alone and after a checkpoint.
    let mut bytes = vec![0u8; 16 << 20];
    ember_device::BlockDevice::read(db.device(), 0, &mut bytes).unwrap();
    let mut again = Database::open(MemBlock::from_backing(bytes), opts).unwrap();
    assert_eq!(
        again
            .find("by_email", &[Value::Text("z@x".into())])
            .unwrap(),
        vec![p(1, "z@x", 50)]
    );
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts).unwrap();
    assert_eq!(
        db.find("by_age", &[Value::Integer(40)]).unwrap(),
        vec![p(2, "b@x", 40)]
    );
    assert_eq!(db.indexes("people").unwrap().len(), 2);
}

#[test]
fn prefix_ranges_over_a_two_column_index() {
    use ember_device::MemBlock;
    use ember_table::{Column, Database, IndexKind, Options, Schema, Value};
    use std::ops::Bound;
    let mut db = Database::create(MemBlock::new(8 << 20), Options::default()).unwrap();
    let col = |n: &str| Column {
        name: n.into(),
        decl_type: String::new(),
        not_null: false,
    };
    db.create_table(
        "t",
        Schema {
            columns: vec![col("id"), col("a"), col("b")],
            primary_key: vec![0],
            index: IndexKind::Tree,
        },
    )
    .unwrap();
    db.create_index("ab", "t", &["a", "b"], IndexKind::Tree, false)
        .unwrap();
    for i in 0..30i64 {
        db.insert(
            "t",
            &[
                Value::Integer(i),
                Value::Integer(i % 3),
                Value::Text(format!("{i}")),
            ],
        )
        .unwrap();
    }
    let ids = |rows: Vec<Vec<Value>>| -> Vec<i64> {
        let mut v: Vec<i64> = rows
            .into_iter()
            .map(|r| match r[0] {
                Value::Integer(i) => i,
                _ => -1,
            })
            .collect();
        v.sort();
        v
    };
    let one = [Value::Integer(1)];
    let eq = db
        .find_prefix("ab", Bound::Included(&one), Bound::Included(&one))
        .unwrap();
    assert_eq!(ids(eq), (0..30).filter(|i| i % 3 == 1).collect::<Vec<_>>());
    let gt = db
        .find_prefix("ab", Bound::Excluded(&one), Bound::Unbounded)
        .unwrap();
    assert_eq!(ids(gt), (0..30).filter(|i| i % 3 == 2).collect::<Vec<_>>());
    let le = db
        .find_prefix("ab", Bound::Unbounded, Bound::Included(&one))
        .unwrap();
    assert_eq!(ids(le), (0..30).filter(|i| i % 3 < 2).collect::<Vec<_>>());
    let lt = db
        .find_prefix("ab", Bound::Unbounded, Bound::Excluded(&one))
        .unwrap();
    assert_eq!(ids(lt), (0..30).filter(|i| i % 3 == 0).collect::<Vec<_>>());
}
