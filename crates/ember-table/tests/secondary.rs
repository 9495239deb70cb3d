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
    assert_eq!(
        db.insert("people", &p(4, "a@x", 1)),
        Err(TableError::Unique("by_email".into())),
        "the error names the index"
    );
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

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Random inserts, updates (many keep the indexed values, some change one of them, some
    /// collide in the unique index and are refused) and deletes, some inside rolled-back
    /// transactions: every index lookup answers as a model of the rows does.
    #[test]
    fn indexes_answer_as_the_rows_do_after_random_writes(
        ops in proptest::collection::vec(
            (0u8..4, 0i64..12, 0u8..5, 0i64..4, proptest::prelude::any::<bool>()),
            1..80,
        ),
    ) {
        let opts = Options { mode: Mode::Metadata, ..Options::default() };
        let mut db = Database::create(MemBlock::new(16 << 20), opts).unwrap();
        db.create_table("people", people()).unwrap();
        db.create_index("by_email", "people", &["email"], IndexKind::Tree, true).unwrap();
        db.create_index("by_age", "people", &["age"], IndexKind::Hash, false).unwrap();
        let mut model: std::collections::BTreeMap<i64, (String, i64)> = Default::default();
        for (op, id, email, age, in_txn) in ops {
            let email = format!("{email}@x");
            let txn = in_txn && op != 3;
            if txn {
                db.begin().unwrap();
            }
            let before = model.clone();
            let taken = |m: &std::collections::BTreeMap<i64, (String, i64)>| {
                m.iter().any(|(i, (e, _))| *i != id && *e == email)
            };
            match op {
                0 => {
                    let r = db.insert("people", &p(id, &email, age));
                    if model.contains_key(&id) || taken(&model) {
                        proptest::prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        model.insert(id, (email, age));
                    }
                }
                1 | 2 => {
                    // op 2 keeps the email (only the age may change).
                    let email = match (op, model.get(&id)) {
                        (2, Some((e, _))) => e.clone(),
                        _ => email,
                    };
                    let r = db.update("people", &p(id, &email, age));
                    let collides = model
                        .iter()
                        .any(|(i, (e, _))| *i != id && *e == email);
                    match (model.contains_key(&id), collides) {
                        (false, _) => proptest::prop_assert!(!r.unwrap()),
                        (true, true) => proptest::prop_assert!(r.is_err()),
                        (true, false) => {
                            proptest::prop_assert!(r.unwrap());
                            model.insert(id, (email, age));
                        }
                    }
                }
                _ => {
                    let there = db.delete("people", &[Value::Integer(id)]).unwrap();
                    proptest::prop_assert_eq!(there, model.remove(&id).is_some());
                }
            }
            if txn {
                db.rollback().unwrap();
                model = before;
            }
            for e in 0..5 {
                let e = format!("{e}@x");
                let got = db.find("by_email", &[Value::Text(e.clone())]).unwrap();
                let want: Vec<Vec<Value>> = model
                    .iter()
                    .filter(|(_, (m, _))| *m == e)
                    .map(|(i, (m, a))| p(*i, m, *a))
                    .collect();
                proptest::prop_assert_eq!(got, want);
            }
            for a in 0..4 {
                let mut got = db.find("by_age", &[Value::Integer(a)]).unwrap();
                got.sort_by_key(|r| match r[0] { Value::Integer(i) => i, _ => i64::MIN });
                let want: Vec<Vec<Value>> = model
                    .iter()
                    .filter(|(_, (_, m))| *m == a)
                    .map(|(i, (m, a))| p(*i, m, *a))
                    .collect();
                proptest::prop_assert_eq!(got, want);
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// An ordered, limited read of a tree index gives the first `limit` rows of the whole
    /// range in index order, from the high end read backwards (equal values then in
    /// descending primary key order), with and without bounds.
    #[test]
    fn a_limited_index_read_is_the_whole_range_cut(
        ages in proptest::collection::vec(0i64..6, 0..60),
        lo in proptest::option::of(0i64..6),
        hi in proptest::option::of(0i64..6),
        desc in proptest::prelude::any::<bool>(),
        limit in 0usize..12,
    ) {
        let mut db = Database::create(MemBlock::new(16 << 20), Options::default()).unwrap();
        db.create_table("people", people()).unwrap();
        db.create_index("by_age", "people", &["age"], IndexKind::Tree, false)
            .unwrap();
        for (i, a) in ages.iter().enumerate() {
            db.insert("people", &p(i as i64, "e", *a)).unwrap();
        }
        let (lo, hi) = (lo.map(|v| [Value::Integer(v)]), hi.map(|v| [Value::Integer(v)]));
        fn bound(b: &Option<[Value; 1]>) -> Bound<&[Value]> {
            match b {
                Some(v) => Bound::Included(&v[..]),
                None => Bound::Unbounded,
            }
        }
        let mut want = db.find_prefix("by_age", bound(&lo), bound(&hi)).unwrap();
        if desc {
            want.reverse();
        }
        want.truncate(limit);
        let order = if desc {
            ember_table::Order::desc(Some(limit))
        } else {
            ember_table::Order::asc(Some(limit))
        };
        let got = db
            .find_prefix_with("by_age", bound(&lo), bound(&hi), order)
            .unwrap();
        proptest::prop_assert_eq!(got, want);
    }
}
