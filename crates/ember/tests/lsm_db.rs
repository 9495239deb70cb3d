//! `USING lsm` tables in the database's own device, through the SQL engine a `Connection`
//! runs: reopen, rollback of the statement that made the tree, the sweep of objects a crash
//! left outside the catalog, and power cuts at every device operation of a mixed workload
//! (and at a sample of them with the lsm engine's background thread running).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use ember::{Connection, Engine, OpenOptions, Value, close_engine, open_engine};
use ember_crashtest::{CrashTest, SharedDevice};
use ember_device::{FaultyBlock, MemBlock, PowerFail, SplitMix64};
use ember_sql::parse;
use ember_table::{Database, FormatOptions, Mode, Options};

fn all(conn: &Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut st = conn.prepare(sql).unwrap();
    let mut rows = st.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(r) = rows.next().unwrap() {
        out.push(r.values().to_vec());
    }
    out
}

/// A 64 MiB database whose lsm tree has 256 KiB of RAM: flushes, compactions and value
/// blobs happen within a few thousand rows.
fn small_tree() -> OpenOptions {
    OpenOptions {
        capacity: 64 << 20,
        lsm_memory_bytes: 256 << 10,
        ..OpenOptions::default()
    }
}

/// `PRAGMA integrity_check` of a database whose space the lsm tree and time series share
/// with the table engine's tables: their blobs and extents are theirs, not leaked space
/// (before, every such database was reported corrupt), before and after a reopen.
#[test]
fn the_integrity_check_counts_what_the_other_engines_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.ember");
    let opts = small_tree();
    let check = |conn: &Connection| {
        assert_eq!(
            all(conn, "PRAGMA integrity_check"),
            vec![vec![Value::Text("ok".into())]]
        );
    };
    {
        let conn = Connection::open_with(&path, opts).unwrap();
        check(&conn);
        conn.execute_batch(
            "CREATE TABLE kv(id INTEGER PRIMARY KEY, v BLOB) USING lsm;
             CREATE TABLE plain(id INTEGER PRIMARY KEY, note TEXT);
             CREATE TABLE s(ts INTEGER PRIMARY KEY, x INTEGER)
                 USING timeseries(page_size=512, pages=256);
             INSERT INTO plain VALUES (1, 'table engine');",
        )
        .unwrap();
        let mut ins = conn.prepare("INSERT INTO kv VALUES (?1, ?2)").unwrap();
        for i in 0..3000i64 {
            // Values of 1 KiB and more go to value blobs.
            let v = vec![i as u8; if i % 3 == 0 { 1500 } else { 40 }];
            ins.execute(ember::params![i, v]).unwrap();
        }
        let mut ts = conn.prepare("INSERT INTO s VALUES (?1, ?2)").unwrap();
        for i in 0..200i64 {
            ts.execute(ember::params![i * 10, i]).unwrap();
        }
        conn.execute("UPDATE kv SET v = x'00' WHERE id % 3 = 0", [])
            .unwrap();
        check(&conn);
        conn.close().unwrap();
    }
    let conn = Connection::open_with(&path, opts).unwrap();
    check(&conn);
    assert_eq!(
        all(&conn, "SELECT count(*) FROM kv"),
        vec![vec![Value::Integer(3000)]]
    );
}

#[test]
fn lsm_tables_live_in_the_database_file_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.ember");
    let opts = small_tree();
    {
        let conn = Connection::open_with(&path, opts).unwrap();
        conn.execute_batch(
            "CREATE TABLE kv(id INTEGER PRIMARY KEY, name TEXT, n INTEGER) USING lsm;
             CREATE INDEX kv_n ON kv(n);
             CREATE TABLE plain(id INTEGER PRIMARY KEY, note TEXT);
             INSERT INTO plain VALUES (1, 'table engine');",
        )
        .unwrap();
        let mut ins = conn.prepare("INSERT INTO kv VALUES (?1, ?2, ?3)").unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for i in 0..5000i64 {
            ins.execute(ember::params![
                i,
                format!("row-{i:05}-{}", "x".repeat(40)),
                i % 97
            ])
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        conn.execute("DELETE FROM kv WHERE id % 10 = 3", [])
            .unwrap();
        conn.execute("UPDATE kv SET name = 'changed' WHERE n = 5", [])
            .unwrap();
        conn.close().unwrap();
    }
    // One file, no side files: the tree's blobs are extents of the database.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let conn = Connection::open_with(&path, opts).unwrap();
    let count = all(&conn, "SELECT count(*) FROM kv");
    assert_eq!(count, vec![vec![Value::Integer(4500)]]);
    let changed = all(
        &conn,
        "SELECT id FROM kv WHERE n = 5 AND name = 'changed' ORDER BY id",
    );
    let want: Vec<Vec<Value>> = (0..5000i64)
        .filter(|i| i % 97 == 5 && i % 10 != 3)
        .map(|i| vec![Value::Integer(i)])
        .collect();
    assert_eq!(changed, want);
    assert_eq!(
        all(&conn, "SELECT name FROM kv WHERE id = 4998"),
        vec![vec![Value::Text(format!("row-04998-{}", "x".repeat(40)))]]
    );
    assert_eq!(
        all(&conn, "SELECT note FROM plain"),
        vec![vec![Value::Text("table engine".into())]]
    );
    // Writes after the reopen go on in the same tree.
    conn.execute("INSERT INTO kv VALUES (9000, 'late', 1)", [])
        .unwrap();
    assert_eq!(
        all(&conn, "SELECT max(id) FROM kv"),
        vec![vec![Value::Integer(9000)]]
    );
}

#[test]
fn a_rolled_back_first_lsm_table_leaves_no_tree_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.ember");
    let opts = OpenOptions {
        capacity: 32 << 20,
        ..OpenOptions::default()
    };
    {
        let conn = Connection::open_with(&path, opts).unwrap();
        conn.execute_batch(
            "BEGIN; CREATE TABLE gone(a) USING lsm; INSERT INTO gone VALUES (1); ROLLBACK;",
        )
        .unwrap();
        assert!(conn.execute_batch("SELECT * FROM gone").is_err());
        conn.execute_batch("CREATE TABLE kept(a) USING lsm; INSERT INTO kept VALUES (7);")
            .unwrap();
    }
    let conn = Connection::open_with(&path, opts).unwrap();
    assert_eq!(
        all(&conn, "SELECT a FROM kept"),
        vec![vec![Value::Integer(7)]]
    );
    assert!(conn.execute_batch("SELECT * FROM gone").is_err());
}

fn topts(mode: Mode) -> Options {
    Options {
        mode,
        format: FormatOptions {
            log_bytes: Some(64 * 1024),
            ..FormatOptions::default()
        },
        ..Options::default()
    }
}

fn eopts(mode: Mode) -> OpenOptions {
    OpenOptions {
        mode,
        lsm_memory_bytes: 48 << 10, // 6 KiB memtables: flushes and compactions in the workload
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

#[test]
fn objects_the_catalog_does_not_name_are_swept_on_open() {
    let mut dev = MemBlock::new(16 << 20);
    {
        let db = Database::create(&mut dev, topts(Mode::Full)).unwrap();
        let mut e = open_engine(db, &eopts(Mode::Full)).unwrap();
        exec(
            &mut e,
            "CREATE TABLE a(x) USING lsm; INSERT INTO a VALUES (1)",
        )
        .unwrap();
        // What a crash after the LSM batch and before the catalog's commit leaves: an
        // lsm table (l99) with rows and an index that no catalog row names.
        let lsm = e.storage().lsm.as_mut().unwrap();
        lsm.create_table("l99").unwrap();
        lsm.put_row("l99", 1, &[Value::Integer(5)]).unwrap();
        lsm.create_index("li99", "l99", &[0]).unwrap();
        lsm.commit().unwrap();
        assert!(lsm.has_table("l99"));
        close_engine(e).unwrap();
    }
    let db = Database::open(&mut dev, topts(Mode::Full)).unwrap();
    let mut e = open_engine(db, &eopts(Mode::Full)).unwrap();
    let lsm = e.storage().lsm.as_mut().unwrap();
    assert!(!lsm.has_table("l99"));
    assert!(!lsm.has_index("li99"));
    assert_eq!(
        lsm.scan(
            "l99",
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded
        )
        .unwrap(),
        vec![]
    );
    assert_eq!(
        exec(&mut e, "SELECT x FROM a").unwrap(),
        vec![vec![Value::Integer(1)]]
    );
}

/// Rows of the lsm table `k` and of the table-engine table `p`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    k: Option<BTreeMap<i64, (String, i64)>>,
    p: Option<BTreeMap<i64, i64>>,
}

#[derive(Default)]
struct State {
    created: bool,
    /// The model after each commit (index 0: before the tables; the last may be in flight).
    commits: Vec<Model>,
    /// Commits acknowledged in full mode (durable).
    durable: usize,
}

fn snapshot<D: ember_device::BlockDevice>(e: &mut Engine<D>) -> Result<Model, String> {
    let mut m = Model::default();
    if e.catalog().tables.contains_key("k") {
        let mut rows = BTreeMap::new();
        for r in exec(e, "SELECT id, v, n FROM k ORDER BY id")? {
            match r.as_slice() {
                [Value::Integer(id), Value::Text(v), Value::Integer(n)] => {
                    rows.insert(*id, (v.clone(), *n));
                }
                other => return Err(format!("odd row {other:?}")),
            }
        }
        // The index must agree with the rows.
        let via_index = exec(e, "SELECT count(*) FROM k WHERE n >= 0")?;
        if via_index != vec![vec![Value::Integer(rows.len() as i64)]] {
            return Err(format!("index count {via_index:?} vs {} rows", rows.len()));
        }
        m.k = Some(rows);
    }
    if e.catalog().tables.contains_key("p") {
        let mut rows = BTreeMap::new();
        for r in exec(e, "SELECT id, c FROM p ORDER BY id")? {
            if let [Value::Integer(id), Value::Integer(c)] = r.as_slice() {
                rows.insert(*id, *c);
            }
        }
        m.p = Some(rows);
    }
    Ok(m)
}

/// 240 statements: inserts, updates and deletes on an lsm table with an index, many in
/// multi-statement transactions, some rolled back, a few on a table-engine table.
fn workload(dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut State) -> Result<(), String> {
    st.commits.push(Model::default());
    let db = Database::create(&mut *dev, topts(Mode::Full)).map_err(|e| e.to_string())?;
    st.created = true;
    let mut e = open_engine(db, &eopts(Mode::Full)).map_err(|e| e.to_string())?;
    drive(&mut e, st)?;
    let levels = e.storage().lsm.as_ref().unwrap().db().level_counts();
    if levels.iter().skip(1).all(|&n| n == 0) {
        return Err(format!(
            "no flush or compaction reached level 1: {levels:?}"
        ));
    }
    close_engine(e).map_err(|e| e.to_string())?;
    Ok(())
}

/// [`workload`] with the lsm engine's background thread (as a `Connection` runs it), its
/// tables written through the device's writer handle.
fn threaded_workload(
    dev: SharedDevice<FaultyBlock<MemBlock<Vec<u8>>>>,
    st: &mut State,
) -> Result<(), String> {
    let probe = dev.clone();
    let cut = || probe.with(|d| d.is_cut());
    st.commits.push(Model::default());
    let db = Database::create(dev, topts(Mode::Full)).map_err(|e| e.to_string())?;
    st.created = true;
    let mut e = open_engine(db, &eopts(Mode::Full)).map_err(|e| e.to_string())?;
    e.storage().start_lsm_background();
    // Settled, so that a job that failed after the last commit is reported too.
    let r = drive(&mut e, st).and_then(|()| {
        let lsm = e
            .storage()
            .lsm
            .as_ref()
            .ok_or_else(|| "no lsm tree".to_string())?;
        lsm.db().settle().map_err(|e| e.to_string())
    });
    if let Err(err) = &r {
        // Asked while the engine still runs: an error from anything but the power loss
        // must not pass for it because the thread reaches the cut later.
        assert!(cut(), "the workload failed before the cut: {err}");
        return r;
    }
    if !cut() {
        let levels = e.storage().lsm.as_ref().unwrap().db().level_counts();
        assert!(
            levels.iter().skip(1).any(|&n| n > 0),
            "no flush or compaction reached level 1: {levels:?}"
        );
        assert!(
            probe.handle_ops() > 0,
            "no table was written through the device's writer handle"
        );
    }
    close_engine(e).map_err(|e| e.to_string())?;
    Ok(())
}

/// The statements of [`workload`], recording each commit's model (all acknowledged in full
/// mode).
fn drive<D: ember_device::BlockDevice>(e: &mut Engine<D>, st: &mut State) -> Result<(), String> {
    let mut model = Model::default();
    let mut next = model.clone();
    next.k = Some(BTreeMap::new());
    st.commits.push(next.clone());
    exec(
        e,
        "CREATE TABLE k(id INTEGER PRIMARY KEY, v TEXT, n INTEGER) USING lsm",
    )?;
    model = next;
    st.durable = st.commits.len() - 1;
    let mut next = model.clone();
    st.commits.push(next.clone());
    exec(e, "CREATE INDEX k_n ON k(n)")?;
    st.durable = st.commits.len() - 1;
    let mut rng = SplitMix64::new(7);
    let mut stmts = 0;
    let mut step = 0u64;
    while stmts < 240 {
        step += 1;
        next = model.clone();
        let n = 1 + rng.below(3);
        let mut sql = String::from("BEGIN;");
        for _ in 0..n {
            stmts += 1;
            let id = rng.below(60) as i64;
            let rows = next.k.as_mut().unwrap();
            match rng.below(10) {
                0..=5 => {
                    let v = format!("{step}-{}", "v".repeat(100 + rng.below(200) as usize));
                    let nn = rng.below(9) as i64;
                    sql += &format!("INSERT OR REPLACE INTO k VALUES ({id}, '{v}', {nn});");
                    rows.insert(id, (v, nn));
                }
                6 | 7 => {
                    sql += &format!("DELETE FROM k WHERE id = {id};");
                    rows.remove(&id);
                }
                8 => {
                    sql += &format!("UPDATE k SET n = n + 1 WHERE id = {id};");
                    if let Some(r) = rows.get_mut(&id) {
                        r.1 += 1;
                    }
                }
                _ => {
                    // A table-engine statement in the same transaction: the commit must keep
                    // both engines' parts or neither.
                    if let Some(p) = next.p.as_mut() {
                        sql += &format!("INSERT OR REPLACE INTO p VALUES ({id}, {step});");
                        p.insert(id, step as i64);
                    } else {
                        sql += "CREATE TABLE p(id INTEGER PRIMARY KEY, c INTEGER);";
                        next.p = Some(BTreeMap::new());
                    }
                }
            }
        }
        if step.is_multiple_of(11) {
            sql += "ROLLBACK;";
            exec(e, &sql)?;
            continue;
        }
        sql += "COMMIT;";
        st.commits.push(next.clone());
        exec(e, &sql)?;
        model = next;
        st.durable = st.commits.len() - 1;
    }
    Ok(())
}

#[test]
fn power_cuts_keep_every_acknowledged_commit_whole() {
    let points = std::env::var("EMBER_LSM_SQL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let report = CrashTest::new()
        .max_points(points)
        .run(
            || MemBlock::new(12 << 20),
            workload,
            |medium, st, _| check(medium, st),
        )
        .unwrap_or_else(|f| panic!("{f}"));
    eprintln!("{report}");
    // About 370 since a flushed log is kept for the next memtable (no allocation, sync or
    // free per rotation); 470 before.
    assert!(report.ops >= 300, "only {} device operations", report.ops);
}

/// The same promises with the background thread flushing and compacting the lsm table's
/// tree while statements commit, cut at a sample of points (each run's own interleaving).
#[test]
fn with_the_background_thread_power_cuts_keep_every_acknowledged_commit_whole() {
    let points = std::env::var("EMBER_LSM_SQL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let report = CrashTest::new()
        .max_points(points)
        .run_threaded(
            || MemBlock::new(12 << 20),
            threaded_workload,
            |medium, st, _| check(medium, st),
        )
        .unwrap_or_else(|f| panic!("{f}"));
    // About 390–420 since a flushed log is kept and a job's handle sync counts for its
    // allocations (a run's own interleaving decides); about 480 before.
    assert!(report.ops >= 300, "only {} device operations", report.ops);
}

/// Reopens what survived a cut (twice: recovery must write home what it holds) and checks
/// it is the state after some commit no older than the last acknowledged one.
fn check(medium: MemBlock<Vec<u8>>, st: &State) -> Result<(), String> {
    if !st.created {
        return Ok(());
    }
    let db =
        Database::open(medium, topts(Mode::Full)).map_err(|e| format!("reopen failed: {e}"))?;
    let mut e =
        open_engine(db, &eopts(Mode::Full)).map_err(|e| format!("engine open failed: {e}"))?;
    let got = snapshot(&mut e)?;
    let dev = close_engine(e).map_err(|e| format!("close: {e}"))?;
    let db = Database::open(dev, topts(Mode::Full)).map_err(|e| format!("second open: {e}"))?;
    let mut e =
        open_engine(db, &eopts(Mode::Full)).map_err(|e| format!("second engine open: {e}"))?;
    if snapshot(&mut e)? != got {
        return Err("a second reopen changed the rows".into());
    }
    match st.commits.iter().rposition(|m| *m == got) {
        Some(k) if k >= st.durable => Ok(()),
        Some(k) => Err(format!(
            "went back to commit {k}; commit {} was acknowledged",
            st.durable
        )),
        None => Err(format!("a state no sequence of commits made: {got:?}")),
    }
}

fn cache_counter(conn: &Connection, name: &str) -> i64 {
    let rows = all(conn, "PRAGMA lsm_cache");
    let names = [
        "hits",
        "misses",
        "invalidations",
        "evictions",
        "slab_bytes",
        "refreshes",
    ];
    let i = names.iter().position(|n| *n == name).unwrap();
    match rows.first().and_then(|r| r.get(i)) {
        Some(Value::Integer(v)) => *v,
        other => panic!("PRAGMA lsm_cache gave {rows:?} ({other:?})"),
    }
}

/// A metadata-mode database of 32 MiB with the default coordination cache.
fn cache_test_options() -> OpenOptions {
    OpenOptions {
        capacity: 32 << 20,
        mode: Mode::Metadata,
        ..OpenOptions::default()
    }
}

/// `kv(id, v, n) USING lsm` indexed on `n`, with rows `(i, 'v<i>', i % 10)` for `i` below
/// `rows`, in a new database at `path`.
fn indexed_kv(path: &std::path::Path, rows: i64) -> Connection {
    let conn = Connection::open_with(path, cache_test_options()).unwrap();
    conn.execute_batch(
        "CREATE TABLE kv(id INTEGER PRIMARY KEY, v TEXT, n INTEGER) USING lsm;
         CREATE INDEX kv_n ON kv(n);",
    )
    .unwrap();
    for i in 0..rows {
        conn.execute(
            "INSERT INTO kv VALUES (?1, ?2, ?3)",
            ember::params![i, format!("v{i}"), i % 10],
        )
        .unwrap();
    }
    conn
}

#[test]
fn the_coordination_cache_answers_repeated_queries_and_writes_refresh_it() {
    let dir = tempfile::tempdir().unwrap();
    let opts = cache_test_options();
    let conn = indexed_kv(&dir.path().join("c.ember"), 200);
    let point = "SELECT v FROM kv WHERE id = 42";
    let range = "SELECT id FROM kv WHERE id BETWEEN 10 AND 19";
    let index = "SELECT id FROM kv WHERE n = 3 ORDER BY id";
    let first = (all(&conn, point), all(&conn, range), all(&conn, index));
    // A result is kept on its second recent miss (the cache's admission rule): by the end
    // of the first repeat every result is stored, and the next repeat hits.
    assert_eq!(
        (all(&conn, point), all(&conn, range), all(&conn, index)),
        first
    );
    let hits = cache_counter(&conn, "hits");
    assert_eq!(
        (all(&conn, point), all(&conn, range), all(&conn, index)),
        first
    );
    assert!(cache_counter(&conn, "hits") >= hits + 3, "repeats must hit");
    // A write to a row the index result returned refreshes it; one elsewhere does not.
    conn.execute("UPDATE kv SET v = 'new' WHERE id = 13", [])
        .unwrap();
    assert_eq!(all(&conn, index), first.2);
    assert_eq!(all(&conn, point), first.0);
    conn.execute("UPDATE kv SET n = 3 WHERE id = 150", [])
        .unwrap();
    let mut want = first.2.clone();
    want.push(vec![Value::Integer(150)]);
    want.sort_by_key(|r| match r[0] {
        Value::Integer(i) => i,
        _ => 0,
    });
    assert_eq!(all(&conn, index), want);
    conn.execute("DELETE FROM kv WHERE id = 15", []).unwrap();
    assert_eq!(all(&conn, range).len(), 9);
    // A committed write to the row a point result covers rewrites that result: the next
    // read hits and sees the new value.
    let refreshes = cache_counter(&conn, "refreshes");
    conn.execute("UPDATE kv SET v = 'changed' WHERE id = 42", [])
        .unwrap();
    assert_eq!(cache_counter(&conn, "refreshes"), refreshes + 1);
    let hits = cache_counter(&conn, "hits");
    assert_eq!(all(&conn, point), vec![vec![Value::Text("changed".into())]]);
    assert!(
        cache_counter(&conn, "hits") > hits,
        "the refreshed result hits"
    );
    assert!(cache_counter(&conn, "invalidations") > 0);
    // A rolled-back write leaves it as committed; a committed delete makes it "no row".
    conn.execute_batch("BEGIN; UPDATE kv SET v = 'gone' WHERE id = 42; ROLLBACK;")
        .unwrap();
    assert_eq!(all(&conn, point), vec![vec![Value::Text("changed".into())]]);
    conn.execute("DELETE FROM kv WHERE id = 42", []).unwrap();
    assert_eq!(all(&conn, point), Vec::<Vec<Value>>::new());
    // A longer value than the result's slots hold drops it instead.
    conn.execute(
        "INSERT INTO kv VALUES (42, ?1, 0)",
        ember::params!["x".repeat(600)],
    )
    .unwrap();
    assert_eq!(all(&conn, point), vec![vec![Value::Text("x".repeat(600))]]);

    let off = Connection::open_with(
        dir.path().join("off.ember"),
        OpenOptions {
            lsm_cache_bytes: 0,
            ..opts
        },
    )
    .unwrap();
    off.execute_batch("CREATE TABLE t(a) USING lsm").unwrap();
    assert_eq!(
        all(&off, "PRAGMA lsm_cache"),
        vec![vec![Value::Text("off".into())]]
    );
}

/// An index query inside a transaction that changed a row it returns (but not the indexed
/// column) must not leave that uncommitted row in the cache: after the rollback the query
/// gives the committed row.
#[test]
fn an_index_result_read_over_a_pending_row_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let conn = indexed_kv(&dir.path().join("p.ember"), 40);
    let index = "SELECT id, v FROM kv WHERE n = 3 ORDER BY id";
    let committed = all(&conn, index);
    conn.execute_batch("BEGIN; UPDATE kv SET v = 'uncommitted' WHERE id = 13;")
        .unwrap();
    // Twice: a result is kept on its second miss.
    for _ in 0..3 {
        let inside = all(&conn, index);
        assert!(inside.contains(&vec![Value::Integer(13), Value::Text("uncommitted".into())]));
    }
    conn.execute_batch("ROLLBACK").unwrap();
    assert_eq!(all(&conn, index), committed);
    assert_eq!(all(&conn, index), committed);
}
