//! The rusqlite-shaped API over the table engine: statements, parameters, rows,
//! transactions, reopening a file.

#![allow(clippy::unwrap_used)]

use ember::{Connection, Error, Value, named_params, params};

#[test]
fn basic_round_trip() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, score REAL);
         INSERT INTO t(name, score) VALUES ('a', 1.5), ('b', NULL), ('c', 3);",
    )
    .unwrap();
    assert_eq!(conn.last_insert_rowid(), 3);
    let n = conn
        .execute("UPDATE t SET score = ?1 WHERE name = ?2", params![9, "b"])
        .unwrap();
    assert_eq!(n, 1);
    let mut st = conn
        .prepare("SELECT id, name, score FROM t WHERE score > :min ORDER BY score DESC")
        .unwrap();
    let rows: Vec<(i64, String, f64)> = st
        .query_map(named_params! {":min": 2}, |r| {
            Ok((r.get(0)?, r.get("name")?, r.get(2)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![(2, "b".to_string(), 9.0), (3, "c".to_string(), 3.0)]
    );
    let none = conn.query_row("SELECT id FROM t WHERE id = 99", [], |r| r.get::<_, i64>(0));
    assert!(matches!(none, Err(Error::QueryReturnedNoRows)));
    let err = conn
        .execute("INSERT INTO t(name) VALUES (NULL)", [])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("NOT NULL constraint failed: t.name"),
        "{err}"
    );
    let err = conn.execute("SELECT * FROM", []).unwrap_err();
    assert!(
        err.to_string().contains("incomplete input at byte 13"),
        "{err}"
    );
}

#[test]
fn transactions_commit_and_roll_back() {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t(x UNIQUE)").unwrap();
    {
        let tx = conn.transaction().unwrap();
        tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
        tx.execute("INSERT INTO t VALUES (2)", []).unwrap();
        // A failing statement inside the transaction leaves the others.
        assert!(tx.execute("INSERT INTO t VALUES (3), (1)", []).is_err());
        tx.commit().unwrap();
    }
    {
        let tx = conn.transaction().unwrap();
        tx.execute("DELETE FROM t", []).unwrap();
        // dropped: rolled back
    }
    let v: Vec<i64> = conn
        .prepare("SELECT x FROM t ORDER BY x")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(v, vec![1, 2]);
}

#[test]
fn a_file_database_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.ember");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES(1); CREATE INDEX ta ON t(a); CREATE VIEW v AS SELECT a * 2 AS b FROM t;").unwrap();
    }
    let conn = Connection::open(&path).unwrap();
    let b: i64 = conn.query_row("SELECT b FROM v", [], |r| r.get(0)).unwrap();
    assert_eq!(b, 2);
    let a: Value = conn
        .query_row("SELECT a FROM t WHERE a = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(a, Value::Integer(1));
    assert_eq!(conn.table_names(), vec!["t".to_string(), "v".to_string()]);
}

#[test]
fn a_prepared_statement_is_planned_once() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, b TEXT); CREATE INDEX tb ON t(b);")
        .unwrap();
    for i in 0..100 {
        conn.execute(
            "INSERT INTO t(b) VALUES (?)",
            params![format!("v{}", i % 10)],
        )
        .unwrap();
    }
    let mut st = conn
        .prepare("SELECT count(*) FROM t AS a JOIN t AS c ON c.id = a.id WHERE a.b = ?")
        .unwrap();
    let n: i64 = st.query_row(["v3"], |r| r.get(0)).unwrap();
    assert_eq!(n, 10);
    let before = conn.plans_made();
    for k in 0..10 {
        let n: i64 = st.query_row([format!("v{k}")], |r| r.get(0)).unwrap();
        assert_eq!(n, 10);
    }
    assert_eq!(
        conn.plans_made(),
        before,
        "re-running a prepared statement planned again"
    );
    // A schema change plans it afresh, with the new index.
    conn.execute_batch("DROP INDEX tb").unwrap();
    let n: i64 = st.query_row(["v1"], |r| r.get(0)).unwrap();
    assert_eq!(n, 10);
    assert!(conn.plans_made() > before);
}

#[test]
fn a_prepared_simple_select_follows_schema_changes() {
    // `SELECT … FROM t WHERE …` of plain columns keeps its short plan between runs; every
    // schema change must drop it: a new column, a new index, the table replaced by a view.
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE t(k INTEGER PRIMARY KEY, a TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y');",
    )
    .unwrap();
    let mut all = conn.prepare("SELECT * FROM t WHERE k = ?").unwrap();
    let mut by_a = conn.prepare("SELECT k FROM t WHERE a = ?").unwrap();
    let row = |st: &mut ember::Statement<'_>, p: Value| -> Vec<Value> {
        st.query_row([p], |r| Ok(r.values().to_vec())).unwrap()
    };
    assert_eq!(row(&mut all, Value::Integer(2)).len(), 2);
    let before = conn.plans_made();
    for _ in 0..5 {
        assert_eq!(
            row(&mut by_a, Value::Text("y".into())),
            vec![Value::Integer(2)]
        );
    }
    let after = conn.plans_made();
    for _ in 0..5 {
        assert_eq!(
            row(&mut by_a, Value::Text("y".into())),
            vec![Value::Integer(2)]
        );
    }
    assert_eq!(conn.plans_made(), after, "a re-run planned again");
    assert!(after > before);
    conn.execute_batch("ALTER TABLE t ADD COLUMN b DEFAULT 9")
        .unwrap();
    assert_eq!(
        row(&mut all, Value::Integer(2)),
        vec![
            Value::Integer(2),
            Value::Text("y".into()),
            Value::Integer(9)
        ]
    );
    conn.execute_batch("CREATE INDEX ta ON t(a)").unwrap();
    let planned = conn.plans_made();
    assert_eq!(
        row(&mut by_a, Value::Text("x".into())),
        vec![Value::Integer(1)]
    );
    assert!(
        conn.plans_made() > planned,
        "the new index was not considered"
    );
    conn.execute_batch(
        "DROP TABLE t; CREATE TABLE u(k INTEGER PRIMARY KEY, a TEXT); INSERT INTO u VALUES (7, 'y');
         CREATE VIEW t AS SELECT k, a FROM u;",
    )
    .unwrap();
    assert_eq!(
        row(&mut by_a, Value::Text("y".into())),
        vec![Value::Integer(7)]
    );
    assert_eq!(
        row(&mut all, Value::Integer(7)),
        vec![Value::Integer(7), Value::Text("y".into())]
    );
}

#[test]
fn three_valued_logic() {
    let conn = Connection::open_in_memory().unwrap();
    let row: Vec<Value> = conn
        .query_row(
            "SELECT 0 AND NULL, NULL AND 0, 1 AND NULL, NULL OR 1, 1 OR NULL, 0 OR NULL, NOT NULL, (1 = 1) AND (2 > 1), 0.0 OR 0",
            [],
            |r| Ok(r.values().to_vec()),
        )
        .unwrap();
    let i = Value::Integer;
    assert_eq!(
        row,
        vec![
            i(0),
            i(0),
            Value::Null,
            i(1),
            i(1),
            Value::Null,
            Value::Null,
            i(1),
            i(0)
        ]
    );
}

#[test]
fn aliases_constraint_messages_and_add_column_after_table_constraints() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, d TEXT, s REAL CHECK (s >= 0), UNIQUE(d, s));
         INSERT INTO t(d, s) VALUES ('a', 1), ('a', 2), ('b', 3);",
    )
    .unwrap();
    // A result alias in HAVING, WHERE and ORDER BY (SQLite's extension).
    let rows: Vec<(String, i64)> = conn
        .prepare(
            "SELECT d AS g, count(*) AS n FROM t WHERE g <> 'z' GROUP BY g HAVING n > 1 ORDER BY n",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows, vec![("a".to_string(), 2)]);
    let err = conn
        .execute("INSERT INTO t(d, s) VALUES ('c', -1)", [])
        .unwrap_err();
    assert_eq!(err.to_string(), "CHECK constraint failed: s >= 0");
    let err = conn
        .execute("INSERT INTO t(d, s) VALUES ('a', 1)", [])
        .unwrap_err();
    assert_eq!(err.to_string(), "UNIQUE constraint failed: t.d, t.s");
    // The new column goes before the table constraints.
    conn.execute_batch("ALTER TABLE t ADD COLUMN e INTEGER DEFAULT 7")
        .unwrap();
    let e: i64 = conn
        .query_row("SELECT e FROM t WHERE id = 3", [], |r| r.get(0))
        .unwrap();
    assert_eq!(e, 7);
    let sql: String = conn
        .query_row("SELECT sql FROM sqlite_master WHERE name = 't'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        sql.contains("s REAL CHECK (s >= 0), e INTEGER DEFAULT 7, UNIQUE(d, s)"),
        "{sql}"
    );
}

/// Rows of a query on EmberDB and on SQLite, as text, in order.
fn both(conn: &Connection, lite: &rusqlite::Connection, sql: &str) -> (Vec<String>, Vec<String>) {
    let ours: Vec<String> = conn
        .prepare(sql)
        .unwrap()
        .query_map([], |r| {
            Ok((0..r.len())
                .map(|i| format!("{:?}", r.get::<_, Value>(i).unwrap()))
                .collect::<Vec<_>>()
                .join("|"))
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut st = lite.prepare(sql).unwrap();
    let n = st.column_count();
    let theirs: Vec<String> = st
        .query_map([], |r| {
            Ok((0..n)
                .map(|i| {
                    let v = match r.get_ref(i).unwrap() {
                        rusqlite::types::ValueRef::Null => Value::Null,
                        rusqlite::types::ValueRef::Integer(i) => Value::Integer(i),
                        rusqlite::types::ValueRef::Real(f) => Value::Real(f),
                        rusqlite::types::ValueRef::Text(t) => {
                            Value::Text(String::from_utf8_lossy(t).into_owned())
                        }
                        rusqlite::types::ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                    };
                    format!("{v:?}")
                })
                .collect::<Vec<_>>()
                .join("|"))
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    (ours, theirs)
}

#[test]
fn order_by_limit_reads_from_one_end_of_an_index() {
    let conn = Connection::open_in_memory().unwrap();
    let lite = rusqlite::Connection::open_in_memory().unwrap();
    let schema = "CREATE TABLE t(id INTEGER PRIMARY KEY, b, c TEXT, u INTEGER UNIQUE, d, e);
                  CREATE INDEX tb ON t(b); CREATE INDEX tde ON t(d, e);";
    conn.execute_batch(schema).unwrap();
    lite.execute_batch(schema).unwrap();
    let mut rows = Vec::new();
    for i in 0..200i64 {
        // Ties, NULLs and mixed types in b; u unique; (d, e) with repeats.
        let b = match i % 7 {
            0 => "NULL".to_string(),
            1 => format!("'t{}'", i % 5),
            2 => format!("{}.5", i % 9),
            _ => format!("{}", i % 11),
        };
        rows.push(format!(
            "({i}, {b}, 'c{i}', {}, {}, {})",
            (i * 37) % 1000,
            i % 4,
            (i * 13) % 6
        ));
    }
    let insert = format!("INSERT INTO t VALUES {}", rows.join(", "));
    conn.execute_batch(&insert).unwrap();
    lite.execute_batch(&insert).unwrap();
    for (sql, path) in [
        ("SELECT * FROM t ORDER BY id DESC LIMIT 5", "SCAN t"),
        (
            "SELECT id, c FROM t ORDER BY rowid LIMIT 3 OFFSET 10",
            "SCAN t",
        ),
        (
            "SELECT * FROM t ORDER BY b, id LIMIT 12",
            "SCAN t USING INDEX tb",
        ),
        (
            "SELECT * FROM t ORDER BY b DESC, rowid DESC LIMIT 12 OFFSET 3",
            "SCAN t USING INDEX tb",
        ),
        (
            "SELECT u FROM t ORDER BY u DESC LIMIT 4",
            "SCAN t USING INDEX sqlite_autoindex_t_1",
        ),
        (
            "SELECT d, e, id FROM t ORDER BY d, e, id LIMIT 20",
            "SCAN t USING INDEX tde",
        ),
        (
            "SELECT d, e, id FROM t ORDER BY d DESC, e DESC, id DESC LIMIT 7",
            "SCAN t USING INDEX tde",
        ),
        (
            "SELECT id FROM t ORDER BY b, id LIMIT -1 OFFSET 190",
            "SCAN t USING INDEX tb",
        ),
        // Not answerable from one end: sorted as usual.
        (
            "SELECT id, b FROM t ORDER BY b NULLS LAST, id LIMIT 5",
            "SCAN t",
        ),
        ("SELECT id FROM t ORDER BY d, id LIMIT 5", "SCAN t"),
        (
            "SELECT id FROM t WHERE c > 'c5' ORDER BY id DESC LIMIT 3",
            "SCAN t",
        ),
    ] {
        let (ours, theirs) = both(&conn, &lite, sql);
        assert_eq!(ours, theirs, "{sql}");
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(plan, [path], "{sql}");
    }
}

#[test]
fn create_table_using_names_the_engine_and_unknown_engines_are_refused() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute("CREATE TABLE t(a INTEGER PRIMARY KEY, b) USING table", [])
        .unwrap();
    conn.execute("INSERT INTO t(b) VALUES ('x')", []).unwrap();
    let sql: String = conn
        .query_row("SELECT sql FROM sqlite_master WHERE name = 't'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(sql.ends_with("USING table"), "{sql}");
    let err = conn
        .execute("CREATE TABLE u(a) USING nosuch", [])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such storage engine: nosuch"), "{err}");
}

/// Found by the differential test (seed 404): where SQLite jumps on a condition (WHERE, ON,
/// HAVING, CASE WHEN, iif) AND and OR stop at the side that decides, so an error on the other
/// side does not happen; as a value, both sides are evaluated (and the error shows).
#[test]
fn conditions_stop_at_the_deciding_side_as_sqlite_does() {
    let conn = ember::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES(-9223372036854775808);")
        .unwrap();
    let one = |sql: &str| -> Result<i64, ember::Error> { conn.query_row(sql, [], |r| r.get(0)) };
    assert_eq!(
        one("SELECT 4 FROM t WHERE (NOT (NULL IS a)) OR abs(a)").unwrap(),
        4
    );
    assert_eq!(
        one("SELECT 5 FROM t WHERE NOT ((a IS NULL) AND abs(a))").unwrap(),
        5
    );
    assert_eq!(
        one("SELECT CASE WHEN a < 0 OR abs(a) THEN 6 END FROM t").unwrap(),
        6
    );
    assert_eq!(one("SELECT iif(a < 0 OR abs(a), 7, 0) FROM t").unwrap(), 7);
    assert_eq!(
        one("SELECT count(*) FROM t GROUP BY a HAVING count(*) = 1 OR abs(a)").unwrap(),
        1
    );
    // As a value both sides run, as in SQLite.
    let e = one("SELECT (a < 0) OR abs(a) FROM t").unwrap_err();
    assert!(e.to_string().contains("integer overflow"), "{e}");
}

/// Column references remember where they were found in a scope; a prepared statement run
/// again after its table was re-made with the columns in another order, a column referenced
/// from joins of different shapes, and correlated references must each find the right
/// column, as SQLite does.
#[test]
fn cached_column_positions_follow_schema_and_scope_changes() {
    let conn = Connection::open_in_memory().unwrap();
    let lite = rusqlite::Connection::open_in_memory().unwrap();
    let setup = "CREATE TABLE t(a INTEGER, b TEXT, c REAL);
        INSERT INTO t VALUES (1, 'x', 1.5), (2, 'y', 2.5), (3, 'z', 3.5);
        CREATE TABLE u(b TEXT, a INTEGER, d INTEGER);
        INSERT INTO u VALUES ('y', 20, 7), ('z', 30, 8), ('w', 40, 9);";
    conn.execute_batch(setup).unwrap();
    lite.execute_batch(setup).unwrap();

    let mut st = conn
        .prepare("SELECT b, a FROM t WHERE a >= ?1 ORDER BY a")
        .unwrap();
    let rows = |st: &mut ember::Statement<'_>| -> Vec<(String, i64)> {
        st.query_map([2], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    assert_eq!(rows(&mut st), [("y".into(), 2), ("z".into(), 3)]);
    // The same names, other positions: the cached positions must not be reused.
    conn.execute_batch(
        "DROP TABLE t; CREATE TABLE t(c REAL, a INTEGER, b TEXT);
         INSERT INTO t VALUES (0.5, 5, 'p'), (0.25, 1, 'q');",
    )
    .unwrap();
    assert_eq!(rows(&mut st), [("p".into(), 5)]);
    conn.execute_batch(
        "DROP TABLE t; CREATE TABLE t(a INTEGER, b TEXT, c REAL);
         INSERT INTO t VALUES (1, 'x', 1.5), (2, 'y', 2.5), (3, 'z', 3.5);",
    )
    .unwrap();

    for sql in [
        // `b` and `a` at other positions in each table of a join.
        "SELECT t.a, u.a, t.b, u.d FROM t JOIN u ON t.b = u.b ORDER BY t.a",
        "SELECT a, b, d FROM t NATURAL JOIN u ORDER BY 1",
        "SELECT b, t.a, u.a FROM t JOIN u USING (b) ORDER BY 1",
        "SELECT b, t.a, u.a FROM t LEFT JOIN u USING (b) ORDER BY 1",
        // Correlated: `a` of the inner table first, the outer `c` from the enclosing row.
        "SELECT a, (SELECT count(*) FROM u WHERE u.a > t.a * 10 AND d > c) FROM t ORDER BY a",
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.b = t.b AND a > 25) ORDER BY a",
        "SELECT b, (SELECT max(a) FROM u WHERE b <= t.b) FROM t ORDER BY b",
        // One expression over a single table and over a join, in one statement.
        "SELECT a FROM t WHERE b IN (SELECT b FROM u WHERE d > 7) AND a > 1 ORDER BY a",
        "SELECT x.a, y.a FROM t AS x, t AS y WHERE x.a < y.a ORDER BY 1, 2",
        // Plain result columns move out of the rows; the same column twice, an ORDER BY on
        // a column not in the result and outer references must not.
        "SELECT b, a FROM t ORDER BY 2 DESC",
        "SELECT a, a, b FROM t ORDER BY 1",
        "SELECT a, b FROM t ORDER BY c DESC",
        "SELECT DISTINCT d FROM u ORDER BY 1",
        "SELECT a, (SELECT t.b FROM u WHERE u.d = 7) FROM t ORDER BY a",
    ] {
        let (ours, theirs) = both(&conn, &lite, sql);
        assert_eq!(ours, theirs, "{sql}");
    }
}

/// A point SELECT hands back exactly the columns it names, in its order, whichever way the
/// row becomes the result (cut to a prefix, moved forward in place, picked into a new row,
/// or with a column named twice), on both row engines.
#[test]
fn point_selects_project_columns_in_any_order() {
    for using in ["", " USING lsm"] {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INTEGER, c BLOB, d REAL){using};
             INSERT INTO t VALUES (1, 'one', 10, x'01', 1.5), (2, 'two', 20, x'0202', 2.5);"
        ))
        .unwrap();
        let row = |sql: &str| -> Vec<Value> {
            let mut st = conn.prepare(sql).unwrap();
            let mut rows = st.query(params![2]).unwrap();
            let r = rows.next().unwrap().unwrap().values().to_vec();
            assert!(rows.next().unwrap().is_none(), "{sql}: one row");
            r
        };
        let (a, b) = (Value::Text("two".into()), Value::Integer(20));
        let (c, d) = (Value::Blob(vec![2, 2]), Value::Real(2.5));
        let id = Value::Integer(2);
        let cases = [
            (
                "SELECT id, a FROM t WHERE id = ?1",
                vec![id.clone(), a.clone()],
            ),
            (
                "SELECT a, c FROM t WHERE id = ?1",
                vec![a.clone(), c.clone()],
            ),
            (
                "SELECT b, d FROM t WHERE id = ?1",
                vec![b.clone(), d.clone()],
            ),
            ("SELECT d FROM t WHERE id = ?1", vec![d.clone()]),
            (
                "SELECT c, a FROM t WHERE id = ?1",
                vec![c.clone(), a.clone()],
            ),
            (
                "SELECT d, id, b FROM t WHERE id = ?1",
                vec![d.clone(), id.clone(), b.clone()],
            ),
            (
                "SELECT c, c, a FROM t WHERE id = ?1",
                vec![c.clone(), c.clone(), a.clone()],
            ),
            (
                "SELECT a, b, c, d FROM t WHERE id = ?1",
                vec![a.clone(), b.clone(), c, d],
            ),
        ];
        for (sql, want) in cases {
            // Twice: the second run takes the statement's kept plan.
            assert_eq!(row(sql), want, "{sql}{using}");
            assert_eq!(row(sql), want, "{sql}{using}, again");
        }
        let mut st = conn.prepare("SELECT b, d FROM t WHERE id = ?1").unwrap();
        assert!(st.query(params![9]).unwrap().next().unwrap().is_none());
    }
}

/// Each statement's values are bound into the buffers of the last statement's: a slot that
/// held a blob, text or another type gets whatever comes next right, whatever the shape of
/// the parameter list (tuples, arrays, `params!`, named, owned), and an error in one
/// statement leaves the next unharmed.
#[test]
fn parameters_bound_again_into_the_last_statements_buffers_are_exact() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, a, b)")
        .unwrap();
    let long = vec![7u8; 20_000];
    let ins = "INSERT INTO t VALUES (?1, ?2, ?3)";
    conn.execute(ins, (1, &b"a long blob value"[..], "text one"))
        .unwrap();
    // A shorter blob and text in the same slots, then the types swapped.
    conn.execute(ins, (2, &b"ab"[..], "t")).unwrap();
    conn.execute(ins, params![3, "now text", &b"now a blob"[..]])
        .unwrap();
    conn.execute(ins, [Value::Integer(4), Value::Null, Value::Real(2.5)])
        .unwrap();
    // A big blob (its buffer is not kept), then a small one.
    conn.execute(ins, (5, &long[..], None::<i64>)).unwrap();
    conn.execute(ins, &[Value::Integer(6), Value::Blob(vec![1, 2])])
        .unwrap_err();
    #[allow(clippy::needless_borrows_for_generic_args)] // the `&[T; N]` list, on purpose
    conn.execute(ins, &[6i64, 60, 600]).unwrap();
    // Fewer parameters, then named ones, then an owned list.
    conn.execute("DELETE FROM t WHERE k = ?1", [4]).unwrap();
    conn.execute(
        "INSERT INTO t VALUES (:k, :a, :b)",
        named_params! {":k": 7, ":a": "x", ":b": &b"y"[..]},
    )
    .unwrap();
    conn.execute(
        ins,
        vec![
            Value::Integer(8),
            Value::Text("eight".into()),
            Value::Blob(vec![8; 3]),
        ],
    )
    .unwrap();
    // A statement that fails (a duplicate key) binds as the others; the next is whole.
    let dup = conn.execute(ins, (1, &b"dup"[..], "dup")).unwrap_err();
    assert!(dup.to_string().contains("UNIQUE"), "{dup}");
    conn.execute(ins, (9, &b"nine"[..], "nine")).unwrap();

    let mut st = conn.prepare("SELECT k, a, b FROM t ORDER BY k").unwrap();
    let rows: Vec<Vec<Value>> = st
        .query_map([], |r| Ok(r.values().to_vec()))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let blob = |b: &[u8]| Value::Blob(b.to_vec());
    let text = |t: &str| Value::Text(t.into());
    assert_eq!(
        rows,
        vec![
            vec![
                Value::Integer(1),
                blob(b"a long blob value"),
                text("text one")
            ],
            vec![Value::Integer(2), blob(b"ab"), text("t")],
            vec![Value::Integer(3), text("now text"), blob(b"now a blob")],
            vec![Value::Integer(5), Value::Blob(long.clone()), Value::Null],
            vec![Value::Integer(6), Value::Integer(60), Value::Integer(600)],
            vec![Value::Integer(7), text("x"), blob(b"y")],
            vec![Value::Integer(8), text("eight"), blob(&[8; 3])],
            vec![Value::Integer(9), blob(b"nine"), text("nine")],
        ]
    );
    // Point queries bind into the same buffers and leave theirs for the next statement:
    // each answer is its own parameters' row, and a write bound after them is exact.
    let by_key = "SELECT b FROM t WHERE k = ?1";
    let b_of = |k: i64| -> Value { conn.query_row(by_key, [k], |r| r.get(0)).unwrap() };
    assert_eq!(b_of(3), blob(b"now a blob"));
    assert_eq!(b_of(9), text("nine"));
    let k_of_a = |a: Value| -> i64 {
        conn.query_row("SELECT k FROM t WHERE a = ?1", [a], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(k_of_a(blob(b"a long blob value")), 1);
    assert_eq!(k_of_a(text("now text")), 3);
    assert_eq!(k_of_a(blob(b"ab")), 2);
    assert_eq!(k_of_a(Value::Blob(long.clone())), 5);
    conn.execute(ins, (10, "ten", &b"10"[..])).unwrap();
    assert_eq!(b_of(10), blob(b"10"));
    assert_eq!(k_of_a(text("ten")), 10);
    let missing = conn.query_row(by_key, [11], |r| r.get::<_, Value>(0));
    assert!(
        matches!(missing, Err(ember::Error::QueryReturnedNoRows)),
        "{missing:?}"
    );
    assert_eq!(b_of(1), text("text one"));
}
