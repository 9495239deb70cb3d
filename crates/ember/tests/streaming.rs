//! `Rows` stepping through a query a chunk at a time: tables many chunks long on the table
//! engine, `USING lsm` and `USING timeseries`, WHERE filters and rowid ranges, queries that
//! still materialize (ORDER BY, LIMIT), statements run on the same connection between
//! `Rows::next` calls (writes, other queries with other parameters, DROP TABLE and other
//! schema changes), errors in later chunks, and `query_row` / `exists` on big tables.
//!
//! A chunk holds at most 128 rows (the first ones fewer), so after a few hundred rows a
//! scan of a few thousand has most of its rows still to read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ember::{Connection, Error, Value};

/// Rows in the big tables: several chunks.
const N: i64 = 5_000;

/// The engines a table can live on (`USING` clauses; ` nocache`: with the lsm
/// coordination cache off, so lsm ranges are read in chunks, not whole).
const ENGINES: [&str; 3] = ["", " USING lsm", " USING lsm nocache"];

/// The engines whose scans of [`big`]'s table are read in chunks: every one (an lsm table with
/// the coordination cache on reads a range whole only while its rows would fit in the cache,
/// which can then keep and answer it; the whole table is too large for that).
const CHUNKED: [&str; 3] = ["", " USING lsm", " USING lsm nocache"];

/// An in-memory connection for a table `USING` this (see [`ENGINES`]), and the clause.
fn open(using: &str) -> (Connection, &str) {
    let (using, cache) = match using.strip_suffix(" nocache") {
        Some(u) => (u, 0),
        None => (using, 1 << 20),
    };
    let conn = Connection::open_in_memory_with(ember::OpenOptions {
        mode: ember::Mode::Metadata,
        capacity: 256 << 20,
        lsm_cache_bytes: cache,
        ..ember::OpenOptions::default()
    })
    .unwrap();
    (conn, using)
}

/// A blob whose length and bytes depend on `k` (long and short ones alternate, so a buffer
/// reused for a shorter value must not keep the longer one's tail).
fn blob(k: i64) -> Vec<u8> {
    let len = if k % 3 == 0 { 200 } else { (k % 17) as usize };
    (0..len).map(|i| (k as usize * 31 + i) as u8).collect()
}

/// A text like the blob.
fn text(k: i64) -> String {
    let len = if k % 5 == 0 { 60 } else { (k % 7) as usize };
    (0..len)
        .map(|i| (b'a' + ((k as usize + i) % 26) as u8) as char)
        .collect()
}

/// A connection with `t(k INTEGER PRIMARY KEY, a INT, b BLOB, c TEXT)` on `using`, rows
/// 1..=N (`b` NULL on every 11th row).
fn big(using: &str) -> Connection {
    let (conn, using) = open(using);
    conn.execute_batch(&format!(
        "CREATE TABLE t(k INTEGER PRIMARY KEY, a INT, b BLOB, c TEXT){using}"
    ))
    .unwrap();
    conn.execute_batch("BEGIN").unwrap();
    {
        let mut ins = conn
            .prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4)")
            .unwrap();
        for k in 1..=N {
            let b = if k % 11 == 0 {
                Value::Null
            } else {
                Value::Blob(blob(k))
            };
            ins.execute(vec![
                Value::Integer(k),
                Value::Integer(k % 97),
                b,
                Value::Text(text(k)),
            ])
            .unwrap();
        }
    }
    conn.execute_batch("COMMIT").unwrap();
    conn
}

/// The row `t` holds for `k` as first inserted, as (k, a, b, c).
fn expected(k: i64) -> Vec<Value> {
    vec![
        Value::Integer(k),
        Value::Integer(k % 97),
        if k % 11 == 0 {
            Value::Null
        } else {
            Value::Blob(blob(k))
        },
        Value::Text(text(k)),
    ]
}

/// Every row of a query, by stepping `Rows`.
fn all(conn: &Connection, sql: &str, params: Vec<Value>) -> Vec<Vec<Value>> {
    let mut st = conn.prepare(sql).unwrap();
    let mut rows = st.query(params).unwrap();
    let mut out = Vec::new();
    while let Some(r) = rows.next().unwrap() {
        out.push(r.values().to_vec());
    }
    out
}

/// The same query's rows through `Connection::execute_each` (the materializing path).
fn materialized(conn: &Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    conn.execute_each(sql, |_, o| out = o.rows.clone()).unwrap();
    out
}

#[test]
fn full_scan_returns_every_row_in_order_on_every_engine() {
    for using in ENGINES {
        let conn = big(using);
        let got = all(&conn, "SELECT k, a, b, c FROM t", vec![]);
        assert_eq!(got.len(), N as usize, "{using}");
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r, &expected(i as i64 + 1), "{using}: row {i}");
        }
        assert_eq!(
            got,
            materialized(&conn, "SELECT k, a, b, c FROM t"),
            "{using}"
        );
        // `*` is the same columns; the rowid is not among them.
        assert_eq!(got, all(&conn, "SELECT * FROM t", vec![]), "{using}");
    }
}

#[test]
fn projections_that_are_not_a_prefix() {
    for using in ENGINES {
        let conn = big(using);
        for (sql, pick) in [
            ("SELECT c, k FROM t", vec![3, 0]),
            ("SELECT b FROM t", vec![2]),
            ("SELECT k FROM t", vec![0]),
            ("SELECT a, a, k FROM t", vec![1, 1, 0]),
            ("SELECT rowid, c, b FROM t", vec![0, 3, 2]),
        ] {
            let got = all(&conn, sql, vec![]);
            assert_eq!(got.len(), N as usize, "{using}: {sql}");
            for (i, r) in got.iter().enumerate() {
                let e = expected(i as i64 + 1);
                let want: Vec<Value> = pick.iter().map(|&j| e[j].clone()).collect();
                assert_eq!(r, &want, "{using}: {sql}: row {i}");
            }
        }
    }
}

#[test]
fn where_filters_and_rowid_ranges_match_the_materialized_path() {
    for using in ENGINES {
        let conn = big(using);
        for sql in [
            "SELECT k, b FROM t WHERE a = 5",
            "SELECT k, c FROM t WHERE a > 90 AND k % 2 = 0",
            "SELECT * FROM t WHERE b IS NULL",
            "SELECT k FROM t WHERE k BETWEEN 1000 AND 3999",
            "SELECT k, a FROM t WHERE k > 2500",
            "SELECT k, a FROM t WHERE k >= 2.5 AND k < 4321.5",
            "SELECT k FROM t WHERE rowid <= 1025",
            "SELECT k FROM t WHERE k > 7000",
            "SELECT k FROM t WHERE 1 = 0",
            "SELECT k, c FROM t WHERE k > 100 AND c LIKE 'b%'",
        ] {
            let got = all(&conn, sql, vec![]);
            assert_eq!(got, materialized(&conn, sql), "{using}: {sql}");
        }
        // Spot checks that the filters do filter.
        assert_eq!(
            all(
                &conn,
                "SELECT k FROM t WHERE k BETWEEN 1000 AND 3999",
                vec![]
            )
            .len(),
            3000
        );
        let fives = all(&conn, "SELECT k, b FROM t WHERE a = 5", vec![]);
        assert_eq!(fives.len(), (1..=N).filter(|k| k % 97 == 5).count());
        assert!(
            fives
                .iter()
                .all(|r| matches!(r[0], Value::Integer(k) if k % 97 == 5))
        );
    }
}

#[test]
fn parameters_stay_with_their_query_while_others_run() {
    for using in ENGINES {
        let conn = big(using);
        let mut a = conn
            .prepare("SELECT k FROM t WHERE a = ?1 AND k BETWEEN ?2 AND ?3")
            .unwrap();
        let mut b = conn.prepare("SELECT k FROM t WHERE a = ?1").unwrap();
        let mut ra = a.query([7, 100, 4900]).unwrap();
        let mut rb = b.query([8]).unwrap();
        let (mut ga, mut gb) = (Vec::new(), Vec::new());
        // The two queries step in turn, with a third one run (other parameters) between.
        loop {
            let x = ra.next().unwrap().map(|r| r.get::<_, i64>(0).unwrap());
            let y = rb.next().unwrap().map(|r| r.get::<_, i64>(0).unwrap());
            let _: i64 = conn
                .query_row("SELECT count(*) FROM t WHERE a = ?1", [9], |r| r.get(0))
                .unwrap();
            ga.extend(x);
            gb.extend(y);
            if x.is_none() && y.is_none() {
                break;
            }
        }
        let want_a: Vec<i64> = (100..=4900).filter(|k| k % 97 == 7).collect();
        let want_b: Vec<i64> = (1..=N).filter(|k| k % 97 == 8).collect();
        assert_eq!(ga, want_a, "{using}");
        assert_eq!(gb, want_b, "{using}");
    }
}

#[test]
fn order_by_and_limit_still_work() {
    for using in ENGINES {
        let conn = big(using);
        let desc = all(&conn, "SELECT k FROM t ORDER BY k DESC LIMIT 3", vec![]);
        assert_eq!(
            desc,
            vec![
                vec![Value::Integer(N)],
                vec![Value::Integer(N - 1)],
                vec![Value::Integer(N - 2)]
            ],
            "{using}"
        );
        let by_c = all(&conn, "SELECT k, c FROM t ORDER BY c, k", vec![]);
        assert_eq!(by_c.len(), N as usize);
        let text_of = |v: &Value| v.to_text().unwrap_or_default();
        assert!(
            by_c.windows(2)
                .all(|w| text_of(&w[0][1]) <= text_of(&w[1][1])),
            "{using}"
        );
        let off = all(&conn, "SELECT k FROM t LIMIT 2 OFFSET 3000", vec![]);
        assert_eq!(
            off,
            vec![vec![Value::Integer(3001)], vec![Value::Integer(3002)]]
        );
        let agg = all(&conn, "SELECT count(*), sum(a) FROM t WHERE k > 10", vec![]);
        let sum: i64 = (11..=N).map(|k| k % 97).sum();
        assert_eq!(agg, vec![vec![Value::Integer(N - 10), Value::Integer(sum)]]);
    }
}

#[test]
fn writes_between_next_calls() {
    for using in CHUNKED {
        let conn = big(using);
        let mut st = conn.prepare("SELECT k, a FROM t").unwrap();
        let mut rows = st.query([]).unwrap();
        let mut got: Vec<(i64, i64)> = Vec::new();
        for _ in 0..1500 {
            let r = rows.next().unwrap().unwrap();
            got.push((r.get(0).unwrap(), r.get(1).unwrap()));
        }
        // Past the rows read (and the chunk they came in): changed, removed, added.
        conn.execute("UPDATE t SET a = -k WHERE k > 3000", [])
            .unwrap();
        conn.execute("DELETE FROM t WHERE k > 4500", []).unwrap();
        conn.execute("INSERT INTO t(k, a) VALUES (9001, 1), (9002, 2)", [])
            .unwrap();
        // Behind it: invisible to the rest of the scan.
        conn.execute("DELETE FROM t WHERE k <= 100", []).unwrap();
        conn.execute("INSERT INTO t(k, a) VALUES (0, 0)", [])
            .unwrap();
        while let Some(r) = rows.next().unwrap() {
            got.push((r.get(0).unwrap(), r.get(1).unwrap()));
        }
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "{using}: rowids come in order, each once"
        );
        let keys: Vec<i64> = got.iter().map(|r| r.0).collect();
        let mut want: Vec<i64> = (1..=4500).collect();
        want.extend([9001, 9002]);
        assert_eq!(keys, want, "{using}");
        for &(k, a) in &got {
            if k > N {
                assert_eq!(a, k - 9000, "{using}: row {k}");
            } else if k > 3000 {
                assert_eq!(a, -k, "{using}: row {k} is read after its update");
            } else {
                assert_eq!(a, k % 97, "{using}: row {k}");
            }
        }
    }
}

#[test]
fn a_timeseries_table_streams_too() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE s(t INTEGER PRIMARY KEY, v INTEGER, x REAL) \
         USING timeseries(page_size=512, pages=512)",
    )
    .unwrap();
    conn.execute_batch("BEGIN").unwrap();
    {
        let mut ins = conn.prepare("INSERT INTO s VALUES (?1, ?2, ?3)").unwrap();
        for t in 1..=N {
            ins.execute(vec![
                Value::Integer(t * 10),
                Value::Integer(t % 13),
                Value::Real(t as f64 / 4.0),
            ])
            .unwrap();
        }
    }
    conn.execute_batch("COMMIT").unwrap();
    for sql in [
        "SELECT t, v, x FROM s",
        "SELECT x, t FROM s WHERE v = 4",
        "SELECT t FROM s WHERE t BETWEEN 12345 AND 34567",
    ] {
        let got = all(&conn, sql, vec![]);
        assert_eq!(got, materialized(&conn, sql), "{sql}");
        assert!(!got.is_empty(), "{sql}");
    }
    assert_eq!(
        all(&conn, "SELECT t, v, x FROM s", vec![]).len(),
        N as usize
    );
    // A series is read whole at the first chunk: an insert after it is not seen.
    let mut st = conn.prepare("SELECT t FROM s").unwrap();
    let mut rows = st.query([]).unwrap();
    rows.next().unwrap().unwrap();
    conn.execute("INSERT INTO s VALUES (?1, 1, 1.0)", [N * 10 + 5])
        .unwrap();
    let mut n = 1;
    let mut last = 0;
    while let Some(r) = rows.next().unwrap() {
        n += 1;
        last = r.get(0).unwrap();
    }
    assert_eq!((n, last), (N, N * 10));
    let t: i64 = conn
        .query_row("SELECT t FROM s WHERE v = 12", [], |r| r.get(0))
        .unwrap();
    assert_eq!(t, 120);
}

#[test]
fn a_transaction_rolled_back_between_next_calls() {
    for using in ENGINES {
        let conn = big(using);
        conn.execute_batch("BEGIN").unwrap();
        let mut st = conn.prepare("SELECT k, a FROM t").unwrap();
        let mut rows = st.query([]).unwrap();
        let mut n = 0;
        for _ in 0..100 {
            rows.next().unwrap().unwrap();
            n += 1;
        }
        conn.execute("DELETE FROM t WHERE k > 4000", []).unwrap();
        conn.execute_batch("ROLLBACK").unwrap();
        let mut last = 0;
        while let Some(r) = rows.next().unwrap() {
            last = r.get(0).unwrap();
            n += 1;
        }
        assert_eq!(
            (n, last),
            (N, N),
            "{using}: the rollback brought the rows back"
        );
    }
}

/// Steps `rows` until it ends or fails; the error, if one came.
fn drain(rows: &mut ember::Rows<'_>) -> Option<Error> {
    loop {
        match rows.next() {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

#[test]
fn drop_table_between_next_calls_is_an_error() {
    for using in CHUNKED {
        let conn = big(using);
        let mut st = conn.prepare("SELECT k, b FROM t WHERE a >= 0").unwrap();
        let mut rows = st.query([]).unwrap();
        for _ in 0..10 {
            rows.next().unwrap().unwrap();
        }
        conn.execute_batch("DROP TABLE t").unwrap();
        let e = drain(&mut rows).expect("reading on from a dropped table fails");
        assert!(e.to_string().contains("dropped"), "{using}: {e}");
        // After the error the rows are done.
        assert!(matches!(rows.next(), Ok(None)), "{using}");

        // Dropped and made again, with other columns: an error too, not the new table's rows
        // read with the old one's plan.
        let conn = big(using);
        let mut st = conn.prepare("SELECT k, b FROM t").unwrap();
        let mut rows = st.query([]).unwrap();
        rows.next().unwrap().unwrap();
        conn.execute_batch("DROP TABLE t; CREATE TABLE t(x TEXT, k INTEGER PRIMARY KEY)")
            .unwrap();
        conn.execute_batch("INSERT INTO t VALUES ('new', 4000)")
            .unwrap();
        let e = drain(&mut rows).expect("the table was replaced");
        assert!(e.to_string().contains("changed"), "{using}: {e}");
    }
}

#[test]
fn a_cached_lsm_range_is_read_whole_if_the_cache_can_keep_it() {
    let conn = big(" USING lsm");
    let cache_hits = |conn: &Connection| -> i64 {
        let mut st = conn.prepare("PRAGMA lsm_cache").unwrap();
        let mut rows = st.query([]).unwrap();
        let r = rows.next().unwrap().unwrap();
        r.get(0).unwrap() // the hits
    };
    // 300 rows fit in the cache: read whole with the first row, and kept.
    let small = "SELECT k, a FROM t WHERE k <= 300";
    let before = cache_hits(&conn);
    let mut st = conn.prepare(small).unwrap();
    for _ in 0..3 {
        let mut rows = st.query([]).unwrap();
        let mut n = 0;
        while let Some(r) = rows.next().unwrap() {
            n += 1;
            assert_eq!(r.get::<_, i64>(0).unwrap(), n);
        }
        assert_eq!(n, 300);
    }
    assert!(
        cache_hits(&conn) > before,
        "the range was never answered from the cache"
    );
    let mut rows = st.query([]).unwrap();
    rows.next().unwrap().unwrap();
    // The rows were all read with the first: later writes and even a DROP do not show.
    conn.execute("DELETE FROM t WHERE k > 10", []).unwrap();
    conn.execute_batch("DROP TABLE t").unwrap();
    let mut n = 1;
    while let Some(r) = rows.next().unwrap() {
        n += 1;
        assert_eq!(r.get::<_, i64>(0).unwrap(), n);
    }
    assert_eq!(n, 300);
}

#[test]
fn an_unrelated_schema_change_between_next_calls_is_harmless() {
    for using in ENGINES {
        let conn = big(using);
        let mut st = conn.prepare("SELECT k FROM t WHERE a = 3").unwrap();
        let mut rows = st.query([]).unwrap();
        let mut got: Vec<i64> = vec![rows.next().unwrap().unwrap().get(0).unwrap()];
        conn.execute_batch("CREATE TABLE other(x); CREATE INDEX ta ON t(a); DROP TABLE other")
            .unwrap();
        while let Some(r) = rows.next().unwrap() {
            got.push(r.get(0).unwrap());
        }
        let want: Vec<i64> = (1..=N).filter(|k| k % 97 == 3).collect();
        assert_eq!(got, want, "{using}");
    }
}

#[test]
fn an_error_in_a_later_chunk_comes_out_of_next() {
    for using in CHUNKED {
        let conn = big(using);
        // abs() of the smallest integer overflows: an error on row 4000 only.
        let sql = "SELECT k FROM t WHERE abs(CASE WHEN k = 4000 THEN -9223372036854775808 ELSE k END) > 0";
        let mut st = conn.prepare(sql).unwrap();
        let mut rows = st.query([]).unwrap();
        let mut n = 0;
        let e = loop {
            match rows.next() {
                Ok(Some(_)) => n += 1,
                Ok(None) => panic!("{using}: no error"),
                Err(e) => break e,
            }
        };
        // The chunks before the failing row's came out first (the failing row's chunk is
        // checked whole before its rows are handed out).
        assert!(n > 1000 && n < 4000, "{using}: {n} rows before the error");
        assert!(e.to_string().contains("overflow"), "{using}: {e}");
        // The first row does not need the failing one.
        let k: i64 = conn.query_row(sql, [], |r| r.get(0)).unwrap();
        assert_eq!(k, 1, "{using}");
        assert!(conn.prepare(sql).unwrap().exists([]).unwrap());
    }
}

#[test]
fn query_row_and_exists_on_a_big_table() {
    for using in ENGINES {
        let conn = big(using);
        let (k, b): (i64, Vec<u8>) = conn
            .query_row("SELECT k, b FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!((k, b), (1, blob(1)), "{using}");
        let k: i64 = conn
            .query_row("SELECT k FROM t WHERE a = 50 AND k > 2000", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(k, (2001..).find(|k| k % 97 == 50).unwrap(), "{using}");
        assert!(matches!(
            conn.query_row("SELECT k FROM t WHERE k > ?1", [N], |r| r.get::<_, i64>(0)),
            Err(Error::QueryReturnedNoRows)
        ));
        let mut st = conn.prepare("SELECT k FROM t WHERE a = ?1").unwrap();
        assert!(st.exists([96]).unwrap(), "{using}");
        assert!(!st.exists([97]).unwrap(), "{using}");
    }
}

#[test]
fn a_query_stopped_early_and_run_again() {
    for using in ENGINES {
        let conn = big(using);
        let mut st = conn.prepare("SELECT k, c FROM t WHERE k >= ?1").unwrap();
        {
            let mut rows = st.query([10]).unwrap();
            for _ in 0..1200 {
                rows.next().unwrap().unwrap();
            }
        }
        let mut rows = st.query([4990]).unwrap();
        let mut got = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            got.push(r.get::<_, i64>(0).unwrap());
            assert_eq!(r.get::<_, String>("c").unwrap(), text(got[got.len() - 1]));
        }
        assert_eq!(got, (4990..=N).collect::<Vec<_>>(), "{using}");
        drop(rows);
        let names = st.query([1]).unwrap().column_names().join(",");
        assert_eq!(names, "k,c");
    }
}

#[test]
fn query_map_reads_every_row() {
    for using in ENGINES {
        let conn = big(using);
        let mut st = conn.prepare("SELECT k, b FROM t WHERE k > ?1").unwrap();
        let got: Vec<(i64, Option<Vec<u8>>)> = st
            .query_map([1000], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got.len(), (N - 1000) as usize);
        for (k, b) in got {
            assert_eq!(b, (k % 11 != 0).then(|| blob(k)), "{using}: row {k}");
        }
    }
}
