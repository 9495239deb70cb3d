//! The SQL executor's cost per row and per statement, for instruction counts under
//! callgrind (the machine is too noisy for timings of this size), with SQLite's cost for the
//! same statements on the same data as the yardstick:
//!
//! ```sh
//! cargo build --release -p ember --example exec_cost
//! valgrind --tool=callgrind target/release/examples/exec_cost scan table
//! ```
//!
//! Every run builds a 20,000-row table in memory, then runs one workload. The engine argument
//! is `table`, `lsm` (with the default 1 MiB coordination cache), `lsm-nocache` or `sqlite`
//! (SQLite through rusqlite, in memory). Workloads on
//! `t(k INTEGER PRIMARY KEY, a INT, b INT, c REAL, s TEXT)`: `scan` (5 aggregate full scans
//! with a WHERE), `group` (5 GROUP BY scans), `range` (50 rowid ranges of 1,001 rows),
//! `point` (20,000 point SELECTs), `insert` (20,000 INSERTs in one transaction), `update`
//! (20,000 point UPDATEs in one transaction), or `none` (the build alone: subtract it).
//! Workloads on dbbench's table `b(k BLOB PRIMARY KEY, f0 BLOB)` (16-byte keys, 100-byte
//! values): `bpoint` (20,000 point SELECTs by `k`), `bupdate` (20,000 `UPDATE … SET f0 = ?`
//! by `k`), `bscan` (5 full scans returning every row), or `bnone` (the build alone).
//! Top-n workloads on `t` with indexes `t_b(b)` and `t_ab(a, b)` made after the build (each
//! `b` value has about 1,540 rows, each `a` about 206): `topn` (200 × `ORDER BY b DESC LIMIT
//! 10`), `topnasc` (200 × `ORDER BY b LIMIT 10`), `lastn` (200 × `ORDER BY k DESC LIMIT
//! 10`), `topnwhere` (200 × `WHERE a = ? ORDER BY b DESC LIMIT 10`), or `topnnone` (the
//! build and the indexes alone: subtract it). A third argument sets the number of top-n
//! statements (a slow engine under callgrind takes fewer).

use std::error::Error;

/// Rows in each table.
const N: i64 = 20_000;

/// Inserts the rows of `t` with these keys in one transaction (`a`, `b`, `c` derived from
/// the key, `s` fixed).
macro_rules! insert_t {
    ($c:expr, $keys:expr, $krate:ident) => {{
        $c.execute_batch("BEGIN")?;
        {
            let mut ins = $c.prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)")?;
            for k in $keys {
                ins.execute($krate::params![
                    k,
                    k % 97,
                    k % 13,
                    k as f64 * 0.5,
                    "abcdefgh"
                ])?;
            }
        }
        $c.execute_batch("COMMIT")?;
    }};
}

/// The workloads over one connection type; `$c` is a connection of it, `$krate` its crate (for
/// `params!`). Returns a checksum of what was read so nothing is optimized away.
macro_rules! run_workload {
    ($c:expr, $what:expr, $using:expr, $krate:ident) => {{
        let c = $c;
        let using = $using;
        let mut acc = 0i64;
        let what: &str = $what;
        if what.starts_with('b') {
            c.execute_batch(&format!(
                "CREATE TABLE b(k BLOB PRIMARY KEY, f0 BLOB){using}"
            ))?;
            c.execute_batch("BEGIN")?;
            {
                let mut ins = c.prepare("INSERT INTO b VALUES (?1, ?2)")?;
                for i in 0..N {
                    ins.execute($krate::params![blob_key((i * 7919) % N), blob_value(i)])?;
                }
            }
            c.execute_batch("COMMIT")?;
        } else {
            c.execute_batch(&format!(
                "CREATE TABLE t(k INTEGER PRIMARY KEY, a INT, b INT, c REAL, s TEXT){using}"
            ))?;
            insert_t!(c, 0..N, $krate);
        }
        if what.starts_with("topn") || what == "lastn" {
            c.execute_batch("CREATE INDEX t_b ON t(b); CREATE INDEX t_ab ON t(a, b)")?;
        }
        let mut top = |sql: &str, arg: bool| -> Result<(), Box<dyn Error>> {
            let mut st = c.prepare(sql)?;
            let count: i64 = std::env::args()
                .nth(3)
                .and_then(|n| n.parse().ok())
                .unwrap_or(200);
            for i in 0..count {
                let mut rows = if arg {
                    st.query([i % 97])?
                } else {
                    st.query([])?
                };
                while let Some(r) = rows.next()? {
                    let v: i64 = r.get(0)?;
                    acc += v;
                }
            }
            Ok(())
        };
        match what {
            "topn" => top("SELECT k, a, s FROM t ORDER BY b DESC LIMIT 10", false)?,
            "topnasc" => top("SELECT k, a, s FROM t ORDER BY b LIMIT 10", false)?,
            "lastn" => top("SELECT k, a, s FROM t ORDER BY k DESC LIMIT 10", false)?,
            "topnwhere" => top(
                "SELECT k, a, s FROM t WHERE a = ?1 ORDER BY b DESC LIMIT 10",
                true,
            )?,
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
                    let lo = (i * 397) % (N - 1000);
                    let mut rows = st.query([lo, lo + 1000])?;
                    while let Some(r) = rows.next()? {
                        let v: i64 = r.get(1)?;
                        acc += v;
                    }
                }
            }
            "point" => {
                let mut st = c.prepare("SELECT a, s FROM t WHERE k = ?1")?;
                for i in 0..N {
                    let v: i64 = st.query_row([(i * 7919) % N], |r| r.get(0))?;
                    acc += v;
                }
            }
            "insert" => insert_t!(c, N..2 * N, $krate),
            "update" => {
                let mut st = c.prepare("UPDATE t SET a = a + 1 WHERE k = ?1")?;
                c.execute_batch("BEGIN")?;
                for i in 0..N {
                    st.execute([(i * 7919) % N])?;
                }
                c.execute_batch("COMMIT")?;
            }
            "bpoint" => {
                let mut st = c.prepare("SELECT f0 FROM b WHERE k = ?1")?;
                for i in 0..N {
                    let v: Vec<u8> = st.query_row([blob_key((i * 7877) % N)], |r| r.get(0))?;
                    acc += v.len() as i64;
                }
            }
            "bupdate" => {
                let mut st = c.prepare("UPDATE b SET f0 = ?2 WHERE k = ?1")?;
                c.execute_batch("BEGIN")?;
                for i in 0..N {
                    st.execute($krate::params![blob_key((i * 7877) % N), blob_value(i + 1)])?;
                }
                c.execute_batch("COMMIT")?;
            }
            "bscan" => {
                let mut st = c.prepare("SELECT k, f0 FROM b")?;
                for _ in 0..5 {
                    let mut rows = st.query([])?;
                    while let Some(r) = rows.next()? {
                        let v: Vec<u8> = r.get(1)?;
                        acc += v.len() as i64;
                    }
                }
            }
            _ => {}
        }
        acc
    }};
}

fn main() -> Result<(), Box<dyn Error>> {
    let what = std::env::args().nth(1).unwrap_or("scan".into());
    let engine = std::env::args().nth(2).unwrap_or("table".into());
    let acc = match engine.as_str() {
        "sqlite" => {
            let c = rusqlite::Connection::open_in_memory()?;
            run_workload!(&c, what.as_str(), "", rusqlite)
        }
        _ => {
            let using = if engine.starts_with("lsm") {
                " USING lsm"
            } else {
                ""
            };
            // `lsm-nocache`: the lsm engine without the coordination cache (the executor
            // and engine path alone); otherwise the defaults of `open_in_memory`.
            let c = if engine == "lsm-nocache" {
                ember::Connection::open_in_memory_with(ember::OpenOptions {
                    mode: ember::Mode::Metadata,
                    capacity: 256 << 20,
                    lsm_cache_bytes: 0,
                    ..ember::OpenOptions::default()
                })?
            } else {
                ember::Connection::open_in_memory()?
            };
            run_workload!(&c, what.as_str(), using, ember)
        }
    };
    println!("{what} {engine} {acc}");
    Ok(())
}

/// dbbench's 16-byte key for `i`.
fn blob_key(i: i64) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

/// A 100-byte value that depends on `i`.
fn blob_value(i: i64) -> Vec<u8> {
    (0..100).map(|j| b'a' + ((i + j) % 26) as u8).collect()
}
