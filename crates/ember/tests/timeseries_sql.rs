//! `CREATE TABLE … USING timeseries(…)`: a slice of a real sensor data set inserted through
//! SQL, then key ranges, value ranges through the bitmap index, GROUP BY with aggregates and
//! a join of two series on the key — each compared with SQLite running the same SQL on a
//! plain table — before and after reopening; the errors the engine gives for what it
//! cannot do; rollback; and power cuts at every device operation of an insert workload.

#![allow(clippy::unwrap_used)]

use ember::{Connection, Engine, OpenOptions, Value, close_engine, open_engine};
use ember_crashtest::CrashTest;
use ember_device::{FaultyBlock, MemBlock};
use ember_sql::parse;
use ember_table::{Database, FormatOptions, Mode, Options};

/// The first `n` records (key, a, b, c) of a data set in the EmbedDB format (README).
fn dataset(file: &str, n: usize) -> Vec<(i64, i64, i64, i64)> {
    let path = format!(
        "{}/../../../shared/datasets/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let d = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let i32at = |o: usize| i64::from(i32::from_le_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]));
    let mut out = Vec::new();
    for p in (0..d.len()).step_by(512) {
        let count = usize::from(u16::from_le_bytes([d[p + 4], d[p + 5]]));
        for i in 0..count.min(31) {
            let o = p + 16 + 16 * i;
            let key = i64::from(u32::from_le_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]));
            out.push((key, i32at(o + 4), i32at(o + 8), i32at(o + 12)));
            if out.len() == n {
                return out;
            }
        }
    }
    out
}

fn rows(conn: &Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut st = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut r = st.query([]).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    while let Some(row) = r.next().unwrap() {
        out.push(row.values().to_vec());
    }
    out
}

fn lite_rows(db: &rusqlite::Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut st = db.prepare(sql).unwrap();
    let n = st.column_count();
    let mut r = st.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(row) = r.next().unwrap() {
        let mut v = Vec::new();
        for i in 0..n {
            v.push(match row.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Null => Value::Null,
                rusqlite::types::ValueRef::Integer(x) => Value::Integer(x),
                rusqlite::types::ValueRef::Real(x) => Value::Real(x),
                rusqlite::types::ValueRef::Text(t) => {
                    Value::Text(String::from_utf8_lossy(t).into_owned())
                }
                rusqlite::types::ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            });
        }
        out.push(v);
    }
    out
}

fn same(a: &[Vec<Value>], b: &[Vec<Value>], sql: &str) {
    assert_eq!(a.len(), b.len(), "{sql}: row counts differ");
    for (x, y) in a.iter().zip(b) {
        let eq = x.len() == y.len()
            && x.iter().zip(y).all(|(p, q)| match (p, q) {
                (Value::Real(f), Value::Real(g)) => (f - g).abs() <= 1e-9 * f.abs().max(1.0),
                _ => p == q,
            });
        assert!(eq, "{sql}: {x:?} vs {y:?}");
    }
}

const SCHEMA_W: &str =
    "CREATE TABLE w(ts INTEGER PRIMARY KEY, temp INT32, pressure INT32, wind INT32)";
const USING_W: &str = " USING timeseries(key_size=4, page_size=512, pages=256, index=temp, index_min=300, index_max=500, index_bits=64)";
const SCHEMA_G: &str = "CREATE TABLE g(ts INTEGER PRIMARY KEY, eth INTEGER, co REAL)";
const USING_G: &str = " USING timeseries(page_size=512, pages=128)";

fn queries(keys: &[i64]) -> Vec<String> {
    let (k1, k2) = (keys[400], keys[1700]);
    vec![
        "SELECT count(*), min(ts), max(ts), sum(temp), sum(wind) FROM w".into(),
        format!("SELECT * FROM w WHERE ts BETWEEN {k1} AND {k2} ORDER BY ts"),
        format!("SELECT ts, wind FROM w WHERE ts > {k1} AND ts < {k1} + 6000"),
        format!("SELECT * FROM w WHERE ts = {}", keys[1234]),
        "SELECT ts, temp FROM w WHERE temp BETWEEN 400 AND 405 ORDER BY ts".into(),
        "SELECT ts, temp, wind FROM w WHERE temp > 455".into(),
        "SELECT count(*) FROM w WHERE temp < 380 OR temp >= 458".into(),
        "SELECT temp / 10 AS bucket, count(*), min(wind), max(wind), sum(wind), avg(wind) \
         FROM w GROUP BY bucket ORDER BY bucket"
            .into(),
        format!(
            "SELECT wind, count(*), avg(temp) FROM w WHERE ts >= {k2} GROUP BY wind \
             HAVING count(*) > 3 ORDER BY wind"
        ),
        format!(
            "SELECT w.ts, w.temp, g.eth, g.co FROM w JOIN g ON w.ts = g.ts \
             WHERE w.ts <= {k2} ORDER BY w.ts"
        ),
        "SELECT w.temp / 20 AS t, count(*), sum(g.eth) FROM w JOIN g ON g.ts = w.ts \
         WHERE w.temp BETWEEN 390 AND 440 GROUP BY t ORDER BY t"
            .into(),
        "SELECT ts, temp FROM w ORDER BY ts DESC LIMIT 7".into(),
        // An equality on the indexed column, ordered by the key: read from one end of that
        // value's index entries.
        "SELECT ts, temp FROM w WHERE temp = 420 ORDER BY ts DESC LIMIT 3".into(),
        "SELECT ts, wind FROM w WHERE temp = '421' ORDER BY ts LIMIT 4 OFFSET 2".into(),
    ]
}

fn load(conn: &Connection, w: &[(i64, i64, i64, i64)], g: &[(i64, i64, i64, i64)], ts: bool) {
    let (uw, ug) = if ts { (USING_W, USING_G) } else { ("", "") };
    conn.execute_batch(&format!(
        "{SCHEMA_W}{uw}; {SCHEMA_G}{ug}; CREATE INDEX w_temp ON w(temp);"
    ))
    .unwrap();
    conn.execute_batch("BEGIN").unwrap();
    let mut ins = conn
        .prepare("INSERT INTO w VALUES (?1, ?2, ?3, ?4)")
        .unwrap();
    for r in w {
        ins.execute(ember::params![r.0, r.1, r.2, r.3]).unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    // g in several transactions: each commit starts a new page (durable=commit).
    let mut ins = conn.prepare("INSERT INTO g VALUES (?1, ?2, ?3)").unwrap();
    for chunk in g.chunks(200) {
        conn.execute_batch("BEGIN").unwrap();
        for r in chunk {
            ins.execute(ember::params![r.0, r.1, r.2 as f64 / 8.0])
                .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }
}

#[test]
fn a_sensor_data_set_through_sql_matches_sqlite_before_and_after_reopen() {
    let w = dataset("uwa500K_only_100K.bin", 2500);
    // The second series: gas readings under every third weather timestamp.
    let eth = dataset("ethylene_CO_only_100K.bin", 900);
    let g: Vec<_> = w
        .iter()
        .step_by(3)
        .zip(&eth)
        .map(|(a, b)| (a.0, b.1, b.2, 0))
        .collect();
    let keys: Vec<i64> = w.iter().map(|r| r.0).collect();
    let lite_conn = rusqlite::Connection::open_in_memory().unwrap();
    {
        let tx = lite_conn.unchecked_transaction().unwrap();
        tx.execute_batch(&format!(
            "{SCHEMA_W}; {SCHEMA_G}; CREATE INDEX w_temp ON w(temp);"
        ))
        .unwrap();
        for r in &w {
            tx.execute(
                "INSERT INTO w VALUES (?1, ?2, ?3, ?4)",
                [r.0, r.1, r.2, r.3],
            )
            .unwrap();
        }
        for r in &g {
            tx.execute(
                "INSERT INTO g VALUES (?1, ?2, ?3)",
                rusqlite::params![r.0, r.1, r.2 as f64 / 8.0],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ts.ember");
    let opts = OpenOptions {
        capacity: 32 << 20,
        ..OpenOptions::default()
    };
    let check = |conn: &Connection| {
        for q in queries(&keys) {
            same(&rows(conn, &q), &lite_rows(&lite_conn, &q), &q);
        }
        // The value range goes through the series' data index, the key range through its key.
        let plan = rows(
            conn,
            "EXPLAIN QUERY PLAN SELECT * FROM w WHERE temp BETWEEN 400 AND 405",
        );
        assert!(
            format!("{plan:?}").contains("USING INDEX w_temp"),
            "{plan:?}"
        );
        let q = "SELECT ts, temp FROM w WHERE temp = 420 ORDER BY ts DESC LIMIT 3";
        assert_eq!(
            rows(conn, q).len(),
            3,
            "{q}: the value has more rows than the limit"
        );
        let plan = rows(
            conn,
            "EXPLAIN QUERY PLAN SELECT * FROM w WHERE temp = 420 ORDER BY ts DESC LIMIT 3",
        );
        assert!(
            format!("{plan:?}").contains("USING INDEX w_temp (1 columns =?) ORDERED"),
            "{plan:?}"
        );
        let plan = rows(
            conn,
            "EXPLAIN QUERY PLAN SELECT * FROM w WHERE ts < 946800000",
        );
        assert!(
            format!("{plan:?}").contains("INTEGER PRIMARY KEY"),
            "{plan:?}"
        );
    };
    {
        let conn = Connection::open_with(&path, opts).unwrap();
        load(&conn, &w, &g, true);
        check(&conn);
        conn.close().unwrap();
    }
    let conn = Connection::open_with(&path, opts).unwrap();
    check(&conn);
    // Appends go on after the reopen, after the newest key.
    let last = *keys.last().unwrap();
    conn.execute(
        &format!("INSERT INTO w VALUES ({}, 420, 1, 2)", last + 60),
        [],
    )
    .unwrap();
    let err = conn
        .execute(
            &format!("INSERT INTO w VALUES ({}, 420, 1, 2)", last + 30),
            [],
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "timestamps must ascend: got {} after {}",
            last + 30,
            last + 60
        )),
        "{err}"
    );
    assert_eq!(
        rows(&conn, "SELECT count(*) FROM w WHERE temp = 420 AND ts > 0"),
        vec![vec![Value::Integer(
            w.iter().filter(|r| r.1 == 420).count() as i64 + 1
        )]]
    );
    // One file: the series live in the database's device.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
}

fn err(conn: &Connection, sql: &str) -> String {
    match conn.execute_batch(sql) {
        Ok(()) => panic!("{sql} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn what_the_engine_cannot_do_is_refused_with_a_reason() {
    let conn = Connection::open_in_memory().unwrap();
    let e = err(
        &conn,
        "CREATE TABLE a(t INTEGER PRIMARY KEY, v INTEGER) USING timeseries(page_size=512, colour=red)",
    );
    assert!(e.contains("unknown timeseries option colour"), "{e}");
    // The position is the option's in the statement.
    let at =
        "CREATE TABLE a(t INTEGER PRIMARY KEY, v INTEGER) USING timeseries(page_size=512, ".len();
    assert!(e.contains(&at.to_string()), "{e} (expected offset {at})");
    let e = err(
        &conn,
        "CREATE TABLE a(t INTEGER PRIMARY KEY, v TEXT) USING timeseries",
    );
    assert!(e.contains("fixed-size number"), "{e}");
    let e = err(
        &conn,
        "CREATE TABLE a(v INTEGER, t INTEGER PRIMARY KEY) USING timeseries",
    );
    assert!(e.contains("first column"), "{e}");
    let e = err(
        &conn,
        "CREATE TABLE a(t INTEGER PRIMARY KEY, v INTEGER UNIQUE) USING timeseries",
    );
    assert!(e.contains("UNIQUE"), "{e}");
    let e = err(
        &conn,
        "CREATE TABLE a(t INTEGER PRIMARY KEY, v INTEGER) USING timeseries(key_size=6)",
    );
    assert!(e.contains("key_size"), "{e}");
    conn.execute_batch(
        "CREATE TABLE a(t INTEGER PRIMARY KEY, v INTEGER, x REAL) \
         USING timeseries(key_size=4, index=v, index_min=0, index_max=100);
         INSERT INTO a VALUES (10, 1, 0.5), (20, 2, 1.5);",
    )
    .unwrap();
    let e = err(&conn, "INSERT INTO a VALUES (15, 3, 0)");
    assert!(e.contains("timestamps must ascend: got 15 after 20"), "{e}");
    let e = err(&conn, "INSERT INTO a VALUES (4294967296, 3, 0)");
    assert!(e.contains("4-byte"), "{e}");
    let e = err(&conn, "INSERT INTO a VALUES (30, NULL, 0)");
    assert!(e.contains("NULL"), "{e}");
    let e = err(&conn, "UPDATE a SET v = 5");
    assert!(e.contains("append-only"), "{e}");
    let e = err(&conn, "DELETE FROM a WHERE t = 10");
    assert!(e.contains("append-only"), "{e}");
    // A key that is not there matches nothing: no change, no error (as in SQLite), in and
    // out of a transaction, and the rows stay.
    assert_eq!(
        conn.execute("DELETE FROM a WHERE t = 12345", ()).unwrap(),
        0
    );
    conn.execute_batch("BEGIN").unwrap();
    assert_eq!(
        conn.execute("DELETE FROM a WHERE t = 12345", ()).unwrap(),
        0
    );
    conn.execute_batch("COMMIT").unwrap();
    assert_eq!(
        conn.execute("UPDATE a SET v = 5, x = 1 WHERE t = 12345", ())
            .unwrap(),
        0
    );
    let e = err(&conn, "CREATE INDEX ax ON a(x)");
    assert!(e.contains("data index on column v"), "{e}");
    let e = err(&conn, "CREATE UNIQUE INDEX av ON a(v)");
    assert!(e.contains("UNIQUE"), "{e}");
    let e = err(&conn, "ALTER TABLE a ADD COLUMN y INTEGER");
    assert!(e.contains("fixed"), "{e}");
    // A failed multi-row INSERT leaves none of its rows (the executor's undo pops them).
    let e = err(
        &conn,
        "INSERT INTO a VALUES (30, 3, 0), (40, 4, 0), (35, 5, 0)",
    );
    assert!(e.contains("ascend"), "{e}");
    assert_eq!(
        rows(&conn, "SELECT t, v, x FROM a"),
        vec![
            vec![Value::Integer(10), Value::Integer(1), Value::Real(0.5)],
            vec![Value::Integer(20), Value::Integer(2), Value::Real(1.5)],
        ]
    );
}

#[test]
fn rollback_drops_the_transactions_rows_and_its_reads_see_them() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE s(t INTEGER PRIMARY KEY, v INTEGER) USING timeseries(page_size=128, pages=64);
         INSERT INTO s VALUES (1, 10), (2, 20);",
    )
    .unwrap();
    conn.execute_batch("BEGIN").unwrap();
    for t in 3..200 {
        conn.execute(&format!("INSERT INTO s VALUES ({t}, {})", t * 10), [])
            .unwrap();
    }
    // The transaction reads its own rows.
    assert_eq!(
        rows(&conn, "SELECT count(*), max(t), sum(v) FROM s WHERE t >= 2"),
        vec![vec![
            Value::Integer(198),
            Value::Integer(199),
            Value::Integer((2..200).map(|t| t * 10).sum())
        ]]
    );
    conn.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        rows(&conn, "SELECT t, v FROM s"),
        vec![
            vec![Value::Integer(1), Value::Integer(10)],
            vec![Value::Integer(2), Value::Integer(20)],
        ]
    );
    // The keys are free again.
    conn.execute_batch("INSERT INTO s VALUES (3, 33)").unwrap();
    assert_eq!(
        rows(&conn, "SELECT v FROM s WHERE t = 3"),
        vec![vec![Value::Integer(33)]]
    );
    // A table made in a rolled-back transaction is gone, and so is its series.
    conn.execute_batch(
        "BEGIN; CREATE TABLE r(t INTEGER PRIMARY KEY, v INTEGER) USING timeseries; \
         INSERT INTO r VALUES (1, 1); ROLLBACK;",
    )
    .unwrap();
    assert!(conn.execute_batch("SELECT * FROM r").is_err());
    conn.execute_batch("DROP TABLE s").unwrap();
    assert!(conn.execute_batch("SELECT * FROM s").is_err());
}

// ----- power cuts ----------------------------------------------------------------------------

fn topts() -> Options {
    Options {
        mode: Mode::Full,
        format: FormatOptions {
            log_bytes: Some(64 * 1024),
            ..FormatOptions::default()
        },
        ..Options::default()
    }
}

fn eopts() -> OpenOptions {
    OpenOptions {
        mode: Mode::Full,
        ..OpenOptions::default()
    }
}

fn exec<D: ember_device::BlockDevice>(
    e: &mut Engine<D>,
    sql: &str,
) -> Result<Vec<Vec<Value>>, String> {
    let mut last = Vec::new();
    for p in parse(sql).map_err(|e| e.to_string())? {
        last = e.execute(&p, &[]).map_err(|e| e.to_string())?.rows;
    }
    Ok(last)
}

#[derive(Default)]
struct State {
    /// The table's CREATE committed.
    created: bool,
    /// Rows whose COMMIT returned (durable=commit: durable).
    acked: usize,
    /// Rows sent.
    sent: Vec<(i64, i64, i64)>,
}

/// 300 rows of a data set in commits of 1 to 9 rows, the table's `durable=` option `mode`.
fn workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: &str,
) -> Result<(), String> {
    let data = dataset("watch_only_100K.bin", 300);
    let db = Database::create(&mut *dev, topts()).map_err(|e| e.to_string())?;
    let mut e = open_engine(db, &eopts()).map_err(|e| e.to_string())?;
    exec(
        &mut e,
        &format!(
            "CREATE TABLE s(t INTEGER PRIMARY KEY, x INTEGER, y INT32) \
             USING timeseries(page_size=256, pages=64, erase_pages=2, durable={mode}, \
             index=y, index_min=-300000000, index_max=300000000)"
        ),
    )?;
    exec(&mut e, "CREATE INDEX s_y ON s(y)")?;
    st.created = true;
    let mut i = 0;
    let mut n = 1;
    while i < data.len() {
        let end = (i + n).min(data.len());
        let mut sql = String::from("BEGIN;");
        for r in &data[i..end] {
            sql += &format!("INSERT INTO s VALUES ({}, {}, {});", r.0, r.1, r.2);
            st.sent.push((r.0, r.1, r.2));
        }
        sql += "COMMIT;";
        exec(&mut e, &sql)?;
        st.acked = end;
        i = end;
        n = n % 9 + 1;
    }
    close_engine(e).map_err(|e| e.to_string())?;
    Ok(())
}

fn snapshot<D: ember_device::BlockDevice>(
    e: &mut Engine<D>,
) -> Result<Vec<(i64, i64, i64)>, String> {
    let mut out = Vec::new();
    for r in exec(e, "SELECT t, x, y FROM s")? {
        match r.as_slice() {
            [Value::Integer(t), Value::Integer(x), Value::Integer(y)] => out.push((*t, *x, *y)),
            other => return Err(format!("odd row {other:?}")),
        }
    }
    // The data index must agree with the rows.
    let via = exec(
        e,
        "SELECT count(*) FROM s WHERE y BETWEEN -2147483648 AND 2147483647",
    )?;
    if via != vec![vec![Value::Integer(out.len() as i64)]] {
        let plan = exec(
            e,
            "EXPLAIN QUERY PLAN SELECT count(*) FROM s WHERE y BETWEEN -2147483648 AND 2147483647",
        )?;
        return Err(format!(
            "data index count {via:?} vs {} rows {out:?} {plan:?}",
            out.len()
        ));
    }
    let want = out
        .iter()
        .filter(|r| (0..=100_000_000).contains(&r.2))
        .count() as i64;
    let via = exec(e, "SELECT count(*) FROM s WHERE y BETWEEN 0 AND 100000000")?;
    if via != vec![vec![Value::Integer(want)]] {
        return Err(format!(
            "data range count {via:?}; {want} rows are in the range"
        ));
    }
    Ok(out)
}

/// Power cuts at every device operation (up to `EMBER_TS_SQL_POINTS`) of the workload with
/// `durable=mode`: the reopened table holds a prefix of the rows sent, with every row whose
/// commit returned when `keeps_commits`.
fn power_cuts(mode: &'static str, keeps_commits: bool) {
    let points = std::env::var("EMBER_TS_SQL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(800);
    let report = CrashTest::new()
        .max_points(points)
        .run(
            || MemBlock::new(4 << 20),
            |dev, st| workload(dev, st, mode),
            |medium, st, _| {
                let db = match Database::open(medium, topts()) {
                    Ok(db) => db,
                    Err(_) if !st.created => return Ok(()),
                    Err(e) => return Err(format!("reopen failed: {e}")),
                };
                let mut e =
                    open_engine(db, &eopts()).map_err(|e| format!("engine open failed: {e}"))?;
                if !e.catalog().tables.contains_key("s") {
                    return if st.created {
                        Err("the committed table is gone".into())
                    } else {
                        Ok(())
                    };
                }
                let got = snapshot(&mut e)?;
                if keeps_commits && got.len() < st.acked {
                    return Err(format!(
                        "{} rows after the cut; {} were committed",
                        got.len(),
                        st.acked
                    ));
                }
                if got[..] != st.sent[..got.len()] {
                    return Err("the rows are not a prefix of those inserted".into());
                }
                // The table takes appends after the cut, and keeps them over a clean reopen.
                let next = got.last().map_or(1, |r| r.0 + 1);
                exec(&mut e, &format!("INSERT INTO s VALUES ({next}, 1, 2)"))?;
                let dev = close_engine(e).map_err(|e| format!("close: {e}"))?;
                let db = Database::open(dev, topts()).map_err(|e| format!("second open: {e}"))?;
                let mut e =
                    open_engine(db, &eopts()).map_err(|e| format!("second engine open: {e}"))?;
                let again = snapshot(&mut e)?;
                if again.len() != got.len() + 1 || again[..got.len()] != got[..] {
                    return Err("a second reopen changed the rows".into());
                }
                Ok(())
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    eprintln!("durable={mode}: {report}");
    assert!(report.ops >= 100, "only {} device operations", report.ops);
}

#[test]
fn power_cuts_keep_every_committed_row_with_durable_commit() {
    power_cuts("commit", true);
}

#[test]
fn power_cuts_keep_every_committed_row_with_durable_row() {
    power_cuts("row", true);
}

#[test]
fn power_cuts_keep_a_prefix_with_durable_page() {
    power_cuts("page", false);
}

#[test]
fn a_full_series_refuses_a_whole_transaction_or_overwrites_its_oldest_rows() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE f(t INTEGER PRIMARY KEY, v INTEGER) \
         USING timeseries(page_size=128, pages=8, erase_pages=2, durable=page);
         CREATE TABLE o(t INTEGER PRIMARY KEY, v INTEGER) \
         USING timeseries(page_size=128, pages=8, erase_pages=2, durable=page, full=overwrite);",
    )
    .unwrap();
    // Fill f one 10-row transaction at a time until it refuses one.
    let mut t = 0i64;
    let refused = loop {
        let mut sql = String::from("BEGIN;");
        for _ in 0..10 {
            t += 1;
            sql += &format!("INSERT INTO f VALUES ({t}, {});", t * 2);
        }
        sql += "COMMIT;";
        if let Err(e) = conn.execute_batch(&sql) {
            conn.execute_batch("ROLLBACK").ok();
            break e.to_string();
        }
        assert!(t < 10_000, "never full");
    };
    assert!(refused.contains("is full"), "{refused}");
    // None of the refused transaction's rows is there; all earlier ones are.
    let kept = t - 10;
    assert_eq!(
        rows(&conn, "SELECT count(*), max(t) FROM f"),
        vec![vec![Value::Integer(kept), Value::Integer(kept)]]
    );
    // o keeps the newest rows: a suffix of those inserted, in key order.
    conn.execute_batch("BEGIN").unwrap();
    for t in 1..=2000 {
        conn.execute(&format!("INSERT INTO o VALUES ({t}, {})", t * 2), [])
            .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    let got = rows(&conn, "SELECT t, v FROM o");
    assert!(got.len() > 20 && got.len() < 2000, "{} rows", got.len());
    let first = 2001 - got.len() as i64;
    for (i, r) in got.iter().enumerate() {
        let t = first + i as i64;
        assert_eq!(r, &vec![Value::Integer(t), Value::Integer(t * 2)]);
    }
}

#[test]
fn a_value_range_reads_only_the_pages_whose_bitmap_overlaps_and_a_key_range_only_its_pages() {
    use ember_timeseries::{BucketFn, Col, LinearBuckets};
    let w = dataset("uwa500K_only_100K.bin", 4000);
    let db = Database::create(MemBlock::new(16 << 20), topts()).unwrap();
    let mut e = open_engine(db, &eopts()).unwrap();
    exec(
        &mut e,
        &format!("{SCHEMA_W}{USING_W}; CREATE INDEX w_temp ON w(temp);"),
    )
    .unwrap();
    let mut sql = String::from("BEGIN;");
    for r in &w {
        sql += &format!("INSERT INTO w VALUES ({}, {}, {}, {});", r.0, r.1, r.2, r.3);
    }
    sql += "COMMIT;";
    exec(&mut e, &sql).unwrap();
    let name = e.catalog().tables["w"].engine.clone();
    let (_, per) = e.storage().ts.stats(&name).unwrap();
    let pages: Vec<&[(i64, i64, i64, i64)]> = w.chunks(per).collect();
    // The bucket function the options describe: temp is the first data column, an i32.
    let buckets = LinearBuckets::new(Col::i32(0), 300, 500, 64);
    for (lo, hi) in [(400, 401), (380, 390), (450, 460), (100, 200)] {
        let mut q = [0u8; 8];
        buckets.query(
            Some(&(lo as i32).to_le_bytes()),
            Some(&(hi as i32).to_le_bytes()),
            &mut q,
        );
        let overlapping = pages
            .iter()
            .filter(|p| {
                let mut b = [0u8; 8];
                for r in p.iter() {
                    buckets.add(&(r.1 as i32).to_le_bytes(), &mut b);
                }
                b.iter().zip(&q).any(|(x, y)| x & y != 0)
            })
            .count() as u64;
        e.storage().ts.reset_stats();
        let got = exec(
            &mut e,
            &format!("SELECT count(*) FROM w WHERE temp BETWEEN {lo} AND {hi}"),
        )
        .unwrap();
        let want = w.iter().filter(|r| (lo..=hi).contains(&r.1)).count() as i64;
        assert_eq!(got, vec![vec![Value::Integer(want)]]);
        let (st, _) = e.storage().ts.stats(&name).unwrap();
        eprintln!(
            "temp in [{lo}, {hi}]: {want} rows, {} of {} data pages read (+{} index pages)",
            st.page_reads,
            pages.len(),
            st.index_reads
        );
        assert_eq!(st.page_reads, overlapping, "temp in [{lo}, {hi}]");
    }
    // A key range reads its pages (and the spline's neighbour at most), not the series.
    e.storage().ts.reset_stats();
    let (k1, k2) = (w[1000].0, w[1000 + 3 * per].0);
    let got = exec(
        &mut e,
        &format!("SELECT count(*) FROM w WHERE ts BETWEEN {k1} AND {k2}"),
    )
    .unwrap();
    assert_eq!(got, vec![vec![Value::Integer(3 * per as i64 + 1)]]);
    let (st, _) = e.storage().ts.stats(&name).unwrap();
    eprintln!(
        "key range of {} rows: {} data pages read of {}",
        3 * per + 1,
        st.page_reads,
        pages.len()
    );
    assert!(st.page_reads <= 6, "{} pages read", st.page_reads);
    close_engine(e).unwrap();
}

/// Figures (run in release: `cargo test --release -p ember --test timeseries_sql -- --ignored
/// --nocapture`): 100,000 rows of a data set through SQL into a timeseries table, a
/// table-engine table and SQLite (in memory; INTEGER PRIMARY KEY, an index on the value).
#[test]
#[ignore = "figures, run in release"]
fn figures() {
    use std::time::Instant;
    let w = dataset("uwa500K_only_100K.bin", 100_000);
    let k1 = w[40_000].0;
    let k2 = w[45_000].0;
    let qs = [
        (
            "key range 5%",
            format!("SELECT count(*), sum(wind) FROM w WHERE ts BETWEEN {k1} AND {k2}"),
        ),
        (
            "value range",
            "SELECT count(*), sum(wind) FROM w WHERE temp BETWEEN 595 AND 602".to_string(),
        ),
        (
            "group by",
            "SELECT temp / 10, count(*), avg(wind), max(wind) FROM w GROUP BY temp / 10"
                .to_string(),
        ),
    ];
    let using =
        " USING timeseries(key_size=4, pages=8192, index=temp, index_min=300, index_max=620)";
    for (label, u) in [("timeseries", using), ("table", "")] {
        let conn = Connection::open_in_memory_with(OpenOptions {
            mode: Mode::Metadata,
            capacity: 256 << 20,
            ..OpenOptions::default()
        })
        .unwrap();
        conn.execute_batch(&format!("{SCHEMA_W}{u}; CREATE INDEX w_temp ON w(temp);"))
            .unwrap();
        let t = Instant::now();
        conn.execute_batch("BEGIN").unwrap();
        let mut ins = conn
            .prepare("INSERT INTO w VALUES (?1, ?2, ?3, ?4)")
            .unwrap();
        for r in &w {
            ins.execute(ember::params![r.0, r.1, r.2, r.3]).unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        let secs = t.elapsed().as_secs_f64();
        eprintln!("{label}: insert {:.0} rows/s", w.len() as f64 / secs);
        for (q, sql) in &qs {
            let t = Instant::now();
            let n = 20;
            for _ in 0..n {
                rows(&conn, sql);
            }
            eprintln!(
                "{label}: {q} {:.3} ms",
                t.elapsed().as_secs_f64() * 1e3 / f64::from(n)
            );
        }
    }
    let lite = rusqlite::Connection::open_in_memory().unwrap();
    lite.execute_batch(&format!("{SCHEMA_W}; CREATE INDEX w_temp ON w(temp);"))
        .unwrap();
    let t = Instant::now();
    {
        let tx = lite.unchecked_transaction().unwrap();
        let mut st = tx.prepare("INSERT INTO w VALUES (?1, ?2, ?3, ?4)").unwrap();
        for r in &w {
            st.execute([r.0, r.1, r.2, r.3]).unwrap();
        }
        drop(st);
        tx.commit().unwrap();
    }
    eprintln!(
        "sqlite: insert {:.0} rows/s",
        w.len() as f64 / t.elapsed().as_secs_f64()
    );
    for (q, sql) in &qs {
        let t = Instant::now();
        for _ in 0..20 {
            lite_rows(&lite, sql);
        }
        eprintln!(
            "sqlite: {q} {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3 / 20.0
        );
    }
}

#[test]
fn value_ranges_on_integer_and_real_index_columns_match_sqlite_for_every_bound_kind() {
    use ember_device::SplitMix64;
    let w = dataset("watch_only_100K.bin", 1500);
    let schema = "CREATE TABLE v(t INTEGER PRIMARY KEY, a INT32, r REAL, q FLOAT4)";
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!(
        "{schema} USING timeseries(index=r, index_min=-300, index_max=300, index_bits=128); \
         CREATE INDEX v_r ON v(r);"
    ))
    .unwrap();
    let lite = rusqlite::Connection::open_in_memory().unwrap();
    lite.execute_batch(&format!("{schema}; CREATE INDEX v_r ON v(r);"))
        .unwrap();
    conn.execute_batch("BEGIN").unwrap();
    for (i, r) in w.iter().enumerate() {
        // r: a real in about [-300, 300]; q: a value exact in f32.
        let real = r.2 as f64 / 1e6;
        let q = (r.3 / 1024) as f64 / 4.0;
        let sql = format!(
            "INSERT INTO v VALUES ({}, {}, {real:?}, {q:?})",
            r.0,
            r.1 / 1000
        );
        conn.execute_batch(&sql).unwrap();
        lite.execute_batch(&sql).unwrap();
        if i == 1000 {
            // The rest stays pending: reads inside the transaction see it too.
            conn.execute_batch("COMMIT; BEGIN").unwrap();
        }
    }
    let mut rng = SplitMix64::new(11);
    let ops = [">", ">=", "<", "<="];
    for _ in 0..60 {
        let x = rng.below(700) as f64 - 350.0 + rng.below(4) as f64 / 4.0;
        let y = x + rng.below(120) as f64 + 0.5;
        let (o1, o2) = (ops[rng.below(2) as usize], ops[2 + rng.below(2) as usize]);
        for sql in [
            format!("SELECT t, r FROM v WHERE r {o1} {x:?} AND r {o2} {y:?}"),
            format!("SELECT count(*), sum(a) FROM v WHERE r BETWEEN {x:?} AND {y:?}"),
            format!("SELECT t FROM v WHERE r {o1} {x:?} ORDER BY r, t"),
            format!("SELECT t, q FROM v WHERE r {o2} {} ORDER BY t", x as i64),
        ] {
            same(&rows(&conn, &sql), &lite_rows(&lite, &sql), &sql);
        }
    }
    // Bounds of other types: every number sorts below text and above NULL.
    for sql in [
        "SELECT count(*) FROM v WHERE r < 'a'",
        "SELECT count(*) FROM v WHERE r > 'a'",
        "SELECT count(*) FROM v WHERE r > NULL",
        "SELECT count(*) FROM v WHERE r >= -1e300 AND r <= 1e300",
    ] {
        same(&rows(&conn, sql), &lite_rows(&lite, sql), sql);
    }
    conn.execute_batch("COMMIT").unwrap();
}
