//! The SQL executor's cost per row and per statement, for instruction counts under
//! callgrind (the machine is too noisy for timings of this size):
//!
//! ```sh
//! cargo build --release -p ember --example exec_cost
//! valgrind --tool=callgrind target/release/examples/exec_cost scan table
//! ```
//!
//! Every run builds a 20,000-row table (`k INTEGER PRIMARY KEY, a INT, b INT, c REAL, s TEXT`,
//! engine `table` or `lsm`) in memory, then runs one workload: `scan` (5 aggregate full
//! scans with a WHERE), `group` (5 GROUP BY scans), `range` (50 rowid ranges of 1,001 rows),
//! `point` (20,000 point SELECTs), `insert` (20,000 INSERTs in one transaction), `update`
//! (20,000 point UPDATEs in one transaction), or `none` (the build alone: subtract it).

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let what = std::env::args().nth(1).unwrap_or("scan".into());
    let engine = std::env::args().nth(2).unwrap_or("table".into());
    let using = match engine.as_str() {
        "lsm" => " USING lsm",
        _ => "",
    };
    let c = ember::Connection::open_in_memory()?;
    c.execute_batch(&format!(
        "CREATE TABLE t(k INTEGER PRIMARY KEY, a INT, b INT, c REAL, s TEXT){using}"
    ))?;
    let n: i64 = 20_000;
    c.execute_batch("BEGIN")?;
    insert_rows(&c, 0..n)?;
    c.execute_batch("COMMIT")?;
    let mut acc = 0i64;
    match what.as_str() {
        "scan" => {
            let mut st = c.prepare("SELECT count(*), sum(a), avg(c) FROM t WHERE b > 3")?;
            for _ in 0..5 {
                let v: i64 = st.query_row([], |r| r.get(0))?;
                acc += v;
            }
        }
        "group" => {
            let mut st = c.prepare("SELECT b, min(a), max(c), count(*) FROM t GROUP BY b")?;
            for _ in 0..5 {
                let mut rows = st.query([])?;
                while let Some(r) = rows.next()? {
                    let v: i64 = r.get(3)?;
                    acc += v;
                }
            }
        }
        "range" => {
            let mut st = c.prepare("SELECT k, a, s FROM t WHERE k BETWEEN ?1 AND ?2")?;
            for i in 0..50 {
                let lo = (i * 397) % (n - 1000);
                let mut rows = st.query([lo, lo + 1000])?;
                while let Some(r) = rows.next()? {
                    let v: i64 = r.get(1)?;
                    acc += v;
                }
            }
        }
        "point" => {
            let mut st = c.prepare("SELECT a, s FROM t WHERE k = ?1")?;
            for i in 0..20_000i64 {
                let v: i64 = st.query_row([(i * 7919) % n], |r| r.get(0))?;
                acc += v;
            }
        }
        "insert" => {
            c.execute_batch("BEGIN")?;
            insert_rows(&c, n..n + 20_000)?;
            c.execute_batch("COMMIT")?;
        }
        "update" => {
            let mut st = c.prepare("UPDATE t SET a = a + 1 WHERE k = ?1")?;
            c.execute_batch("BEGIN")?;
            for i in 0..20_000i64 {
                st.execute([(i * 7919) % n])?;
            }
            c.execute_batch("COMMIT")?;
        }
        _ => {}
    }
    println!("{what} {engine} {acc}");
    Ok(())
}

/// Inserts the rows with these keys (`a`, `b`, `c` derived from the key, `s` fixed).
fn insert_rows(c: &ember::Connection, keys: std::ops::Range<i64>) -> Result<(), Box<dyn Error>> {
    let mut ins = c.prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)")?;
    for k in keys {
        ins.execute(ember::params![
            k,
            k % 97,
            k % 13,
            k as f64 * 0.5,
            "abcdefgh"
        ])?;
    }
    Ok(())
}
