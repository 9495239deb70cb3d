//! The SQL front end's cost per statement on the `sqlitekv` suite's table and statements,
//! for instruction counts under callgrind (the machine is too noisy for timings of this
//! size); `kv_cost` in `ember-lsm` gives the engine API's cost for the same operations:
//!
//! ```sh
//! cargo build --release -p ember --example kv_sql_cost
//! valgrind --tool=callgrind --dump-instr=no \
//!     target/release/examples/kv_sql_cost [N] [lsm|table] [V] [C] [R]
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep kv_sql_cost::phase
//! ```
//!
//! Makes `t(k INTEGER PRIMARY KEY, v BLOB)` (`USING lsm` by default) in a database file under
//! the system's temporary directory (metadata mode, 8 MiB for data, the lsm thread on, a
//! coordination cache of `C` bytes, default 0: off), loads `N` rows (default 20,000) with
//! `V`-byte values (default 64) in transactions of 1,000, then runs, each statement its own
//! transaction and each phase its own function: `R` rounds (default 1) of `N` point selects
//! (`phase_select`; with the cache on, a round after the first finds what the doorkeeper
//! admitted), `N` updates (`phase_update`) and `N` inserts of new keys (`phase_insert`).
//! Divide a phase's inclusive count by its number of statements.

use std::error::Error;
use std::time::Instant;

use ember::{Connection, Value};
use ember_device::SplitMix64;

/// A permutation of `from..from + n`.
fn keys(from: u64, n: u64, seed: u64) -> Vec<i64> {
    let mut v: Vec<i64> = (from..from + n).map(|k| k as i64).collect();
    SplitMix64::new(seed).shuffle(&mut v);
    v
}

fn value(k: i64, v: usize) -> Vec<u8> {
    (0..v).map(|i| (k as usize + i) as u8).collect()
}

#[inline(never)]
fn phase_select(c: &Connection, keys: &[i64]) -> Result<usize, Box<dyn Error>> {
    let mut bytes = 0;
    for &k in keys {
        let mut st = c.prepare("SELECT v FROM t WHERE k = ?1")?;
        let mut rows = st.query(vec![Value::Integer(k)])?;
        match rows.next()?.map(|r| r.values().first()) {
            Some(Some(Value::Blob(b))) => bytes += b.len(),
            other => return Err(format!("key {k}: {other:?}").into()),
        }
    }
    Ok(bytes)
}

#[inline(never)]
fn phase_update(c: &Connection, keys: &[i64], v: usize) -> Result<(), Box<dyn Error>> {
    for &k in keys {
        let p = vec![Value::Integer(k), Value::Blob(value(k + 1, v))];
        if c.prepare("UPDATE t SET v = ?2 WHERE k = ?1")?.execute(p)? != 1 {
            return Err(format!("update of key {k} changed no row").into());
        }
    }
    Ok(())
}

#[inline(never)]
fn phase_insert(c: &Connection, keys: &[i64], v: usize) -> Result<(), Box<dyn Error>> {
    for &k in keys {
        let p = vec![Value::Integer(k), Value::Blob(value(k, v))];
        c.prepare("INSERT INTO t VALUES (?1, ?2)")?.execute(p)?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(Ok(20_000), |s| s.parse())?;
    let using = match args.next().as_deref() {
        None | Some("lsm") => " USING lsm",
        Some("table") => "",
        Some(other) => return Err(format!("engine {other}: lsm or table").into()),
    };
    let v: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    if !(1..=(1 << 20)).contains(&v) {
        return Err("the value size must be 1 byte to 1 MiB".into());
    }
    let cache: usize = args.next().map_or(Ok(0), |s| s.parse())?;
    let rounds: u64 = args.next().map_or(Ok(1), |s| s.parse())?;
    let path = std::env::temp_dir().join(format!("kv_sql_cost-{}.ember", std::process::id()));
    let r = run(&path, n, using, v, cache, rounds);
    let _ = std::fs::remove_file(&path);
    r
}

fn run(
    path: &std::path::Path,
    n: u64,
    using: &str,
    v: usize,
    cache: usize,
    rounds: u64,
) -> Result<(), Box<dyn Error>> {
    let opts = ember::OpenOptions {
        mode: ember::Mode::Metadata,
        capacity: 8 << 30,
        cache_bytes: 8 << 20,
        query_cache_bytes: 0,
        lsm_memory_bytes: 8 << 20,
        lsm_cache_bytes: cache,
        lsm_background: true,
    };
    let c = Connection::open_with(path, opts)?;
    c.execute_batch(&format!(
        "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB){using}"
    ))?;
    for chunk in keys(0, n, 1).chunks(1000) {
        c.execute_batch("BEGIN")?;
        for &k in chunk {
            let p = vec![Value::Integer(k), Value::Blob(value(k, v))];
            c.prepare("INSERT INTO t VALUES (?1, ?2)")?.execute(p)?;
        }
        c.execute_batch("COMMIT")?;
    }
    c.settle()?;
    let mut line = format!("{n} rows of {v} B{using}:");
    let t = Instant::now();
    let mut bytes = 0;
    for r in 0..rounds {
        bytes += phase_select(&c, &keys(0, n, 2 + 10 * r))?;
    }
    line += &format!(" select {:.0} ns ({bytes} B)", per(t, n * rounds));
    let t = Instant::now();
    phase_update(&c, &keys(0, n, 3), v)?;
    line += &format!(", update {:.0} ns", per(t, n));
    let t = Instant::now();
    phase_insert(&c, &keys(n, n, 4), v)?;
    line += &format!(", insert {:.0} ns", per(t, n));
    println!("{line} (one run: compare medians)");
    c.close()?;
    Ok(())
}

fn per(t: Instant, n: u64) -> f64 {
    t.elapsed().as_nanos() as f64 / n.max(1) as f64
}
