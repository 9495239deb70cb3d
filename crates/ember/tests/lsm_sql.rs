//! SQL on `USING lsm` tables through the routing storage: the same statements on an lsm
//! table and a table-engine table give the same results (and SQLite's, for some).

#![allow(clippy::unwrap_used)]

use ember::TableStorage;
use ember::lsmstore::LsmStore;
use ember::routed::Routed;
use ember_device::MemBlock;
use ember_lsm::{Db, FileEnv, Options};
use ember_sql::{Executor, Value, parse};
use ember_table::{Database, Mode, Options as TOptions};

type Exec = Executor<Routed<TableStorage<MemBlock<Vec<u8>>>, FileEnv>>;

fn open(dir: &std::path::Path) -> Exec {
    let dev = MemBlock::new(64 << 20);
    let db = Database::create(
        dev,
        TOptions {
            mode: Mode::Metadata,
            ..TOptions::default()
        },
    )
    .unwrap();
    let lsm = Db::create(FileEnv::new(dir).unwrap(), Options::default()).unwrap();
    let mut lsm = LsmStore::new(lsm).unwrap();
    lsm.sync = false;
    Executor::open(Routed::new(TableStorage::new(db), Some(lsm))).unwrap()
}

fn run(e: &mut Exec, sql: &str) -> Result<Vec<Vec<Value>>, String> {
    let mut last = Vec::new();
    for p in parse(sql).map_err(|e| e.to_string())? {
        last = e.execute(&p, &[]).map_err(|e| e.to_string())?.rows;
    }
    Ok(last)
}

const SETUP: &str = "CREATE TABLE @T(id INTEGER PRIMARY KEY, a, b TEXT, UNIQUE(b)) USING E;
CREATE INDEX @T_a ON @T(a);";

const WORK: &[&str] = &[
    "INSERT INTO @T(a, b) VALUES (3, 'x'), (1.5, 'y'), (NULL, 'z'), ('txt', 'w'), (x'00', 'v'), (2, NULL)",
    "INSERT INTO @T VALUES (-7, 10, 'neg')",
    "INSERT INTO @T VALUES (100, 1, 'dup-a')",
    "INSERT INTO @T(a, b) VALUES (5, 'x')", // unique violation
    "UPDATE @T SET a = a + 1 WHERE typeof(a) IN ('integer', 'real')",
    "DELETE FROM @T WHERE b = 'y'",
    "BEGIN; INSERT INTO @T(a, b) VALUES (42, 'in-txn'); ROLLBACK",
    "BEGIN; INSERT INTO @T(a, b) VALUES (43, 'kept'); UPDATE @T SET b = 'kept2' WHERE a = 43; COMMIT",
    "INSERT INTO @T VALUES (-7, 0, 'again')", // primary key clash
];

const QUERIES: &[&str] = &[
    "SELECT * FROM @T ORDER BY id",
    "SELECT * FROM @T ORDER BY id DESC LIMIT 3",
    "SELECT id FROM @T WHERE id BETWEEN 0 AND 101 ORDER BY id",
    "SELECT id, a FROM @T ORDER BY a, id",
    "SELECT id, a FROM @T ORDER BY a DESC, id DESC LIMIT 4",
    "SELECT id FROM @T WHERE a = 2 ORDER BY id",
    "SELECT id FROM @T WHERE a > 1 AND a < 'zzz' ORDER BY id",
    "SELECT b FROM @T WHERE b >= 'w' ORDER BY b",
    "SELECT count(*), sum(a), max(id) FROM @T",
    "SELECT typeof(a), count(*) FROM @T GROUP BY 1 ORDER BY 1",
];

#[test]
fn lsm_tables_answer_like_table_engine_tables() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = open(dir.path());
    run(
        &mut e,
        &SETUP.replace("@T", "l").replace("USING E", "USING lsm"),
    )
    .unwrap();
    run(&mut e, &SETUP.replace("@T", "t").replace("USING E", "")).unwrap();
    let lite = rusqlite::Connection::open_in_memory().unwrap();
    lite.execute_batch(&SETUP.replace("@T", "s").replace("USING E", ""))
        .unwrap();
    for w in WORK {
        let a = run(&mut e, &w.replace("@T", "l"));
        let b = run(&mut e, &w.replace("@T", "t"));
        let c = lite.execute_batch(&w.replace("@T", "s"));
        assert_eq!(a.is_ok(), b.is_ok(), "{w}: {a:?} vs {b:?}");
        assert_eq!(a.is_ok(), c.is_ok(), "{w}: ember {a:?}, sqlite {c:?}");
    }
    for q in QUERIES {
        let a = run(&mut e, &q.replace("@T", "l")).unwrap();
        let b = run(&mut e, &q.replace("@T", "t")).unwrap();
        assert_eq!(a, b, "{q}");
        let mut st = lite.prepare(&q.replace("@T", "s")).unwrap();
        let n = st.column_count();
        let c: Vec<Vec<String>> = st
            .query_map([], |r| {
                (0..n)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i)
                            .map(|v| format!("{v:?}"))
                    })
                    .collect()
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(a.len(), c.len(), "{q}: row count vs SQLite");
    }
    let n = run(&mut e, "SELECT count(*) FROM l").unwrap();
    assert_eq!(n, vec![vec![Value::Integer(8)]]);
    // The catalog keeps the clause and the lsm engine name.
    let m = run(&mut e, "SELECT sql FROM sqlite_master WHERE name = 'l'").unwrap();
    assert!(format!("{m:?}").contains("USING lsm"), "{m:?}");
    run(&mut e, "DROP TABLE l").unwrap();
    assert!(run(&mut e, "SELECT * FROM l").is_err());
}
