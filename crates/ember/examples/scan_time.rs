//! Wall-clock time of a full-table scan through SQL, a row at a time, with SQLite's on the
//! same rows in the same run (the `readseq` workload of `ember-bench dbbench`, repeated so
//! that one run gives a steady figure):
//!
//! ```sh
//! cargo build --release -p ember --example scan_time
//! target/release/examples/scan_time 300000 10          # EmberDB, table engine
//! target/release/examples/scan_time 300000 10 lsm      # EmberDB, lsm engine
//! target/release/examples/scan_time 300000 10 sqlite   # SQLite (WAL, synchronous=OFF)
//! target/release/examples/scan_time 300000 10 table 2 1000  # a 2 MiB block cache (default
//!                                                           # 64), a commit every 1,000 rows
//! ```
//!
//! Loads `rows` rows of `t(k BLOB PRIMARY KEY, f0 BLOB)` (16-byte keys, 100-byte values) into
//! a fresh file under the system's temporary directory in one transaction (or one every
//! `batch` rows, as `dbbench` loads: its checkpoints write the blocks home, and a block
//! cache smaller than the table then reads them back during the scan), then runs
//! `SELECT k, f0 FROM t` `repeats` times and prints nanoseconds per row read. The machine
//! this was written on is noisy: compare medians of runs interleaved with the other system.

use std::error::Error;
use std::time::Instant;

fn key(i: u64) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 100]
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let rows: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(300_000);
    let repeats: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10);
    let system = args.next().unwrap_or_else(|| "table".into());
    let cache_mib: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(64);
    let batch: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(u64::MAX);
    let dir = std::env::temp_dir();
    let (bytes, elapsed) = match system.as_str() {
        "sqlite" => {
            let path = dir.join(format!("scan_time-{}.sqlite", std::process::id()));
            let c = rusqlite::Connection::open(&path)?;
            c.execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;
                 CREATE TABLE t(k BLOB PRIMARY KEY, f0 BLOB)",
            )?;
            c.execute_batch("BEGIN")?;
            {
                let mut ins = c.prepare("INSERT INTO t VALUES (?1, ?2)")?;
                for i in 0..rows {
                    ins.execute(rusqlite::params![key(i), value(i)])?;
                }
            }
            c.execute_batch("COMMIT")?;
            let start = Instant::now();
            let mut bytes = 0usize;
            let mut st = c.prepare("SELECT k, f0 FROM t")?;
            for _ in 0..repeats {
                let mut rs = st.query([])?;
                while let Some(r) = rs.next()? {
                    if let rusqlite::types::ValueRef::Blob(b) = r.get_ref(1)? {
                        bytes += b.len();
                    }
                }
            }
            let elapsed = start.elapsed();
            drop(st);
            drop(c);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            (bytes, elapsed)
        }
        "table" | "lsm" => {
            let path = dir.join(format!("scan_time-{}.ember", std::process::id()));
            let opts = ember::OpenOptions {
                capacity: 1 << 30,
                cache_bytes: cache_mib << 20,
                ..Default::default()
            };
            let c = ember::Connection::open_with(&path, opts)?;
            let using = if system == "lsm" { " USING lsm" } else { "" };
            c.execute_batch(&format!(
                "CREATE TABLE t(k BLOB PRIMARY KEY, f0 BLOB){using}"
            ))?;
            c.execute_batch("BEGIN")?;
            {
                let mut ins = c.prepare("INSERT INTO t VALUES (?1, ?2)")?;
                for i in 0..rows {
                    ins.execute(ember::params![key(i), value(i)])?;
                    if (i + 1) % batch == 0 {
                        c.execute_batch("COMMIT; BEGIN")?;
                    }
                }
            }
            c.execute_batch("COMMIT")?;
            let start = Instant::now();
            let mut bytes = 0usize;
            let mut st = c.prepare("SELECT k, f0 FROM t")?;
            for _ in 0..repeats {
                let mut rs = st.query(())?;
                while let Some(r) = rs.next()? {
                    if let Some(ember::Value::Blob(b)) = r.values().get(1) {
                        bytes += b.len();
                    }
                }
            }
            let elapsed = start.elapsed();
            drop(st);
            c.close()?;
            let _ = std::fs::remove_file(&path);
            (bytes, elapsed)
        }
        other => return Err(format!("unknown system {other:?}: table, lsm or sqlite").into()),
    };
    let read = rows * repeats;
    if bytes as u64 != read * 100 {
        return Err(format!("read {bytes} value bytes, expected {}", read * 100).into());
    }
    println!(
        "{system}: {} ns/row ({read} rows read)",
        elapsed.as_nanos() as u64 / read.max(1)
    );
    Ok(())
}
