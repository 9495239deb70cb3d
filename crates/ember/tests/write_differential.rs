//! Differential test of the writing statements: random INSERTs (one row or several),
//! UPDATEs and DELETEs by key (plain, OR IGNORE, OR REPLACE, OR FAIL; outside and inside
//! transactions, some rolled back) on tables with NOT NULL, CHECK and UNIQUE constraints and
//! on a rowid table without an INTEGER PRIMARY KEY, some with assignments that fail as they
//! run (a text rowid, an integer overflow), run on EmberDB (table and lsm engines) and on
//! SQLite (rusqlite, bundled). After every statement both must agree on whether it failed
//! (a UNIQUE or NOT NULL error's whole message, a CHECK error's kind, another error's
//! text), on the rows it changed, and on the tables' contents.
//!
//! It keeps honest the statements that skip a lookup: an UPDATE or DELETE by rowid outside
//! a transaction learns from the engine's write whether the row was there, and an INSERT of
//! a given rowid from the engine's insert whether the rowid was free.
//!
//! `EMBER_WRITE_DIFF_STATEMENTS=N` sets the statements per engine (default 3,000),
//! `EMBER_WRITE_DIFF_SEED` the seed.

#![allow(clippy::unwrap_used)]

use ember::{Connection, Value};
use ember_device::SplitMix64;

mod common;
use common::sqlite_value;

const SCHEMA: [&str; 5] = [
    "CREATE TABLE t(k INTEGER PRIMARY KEY, v INT NOT NULL, w INT CHECK (w IS NULL OR w >= 0))",
    "CREATE TABLE u(k INTEGER PRIMARY KEY, a INT UNIQUE, b INT)",
    "CREATE TABLE r(a INT, b INT NOT NULL)",
    "CREATE TABLE s(k TEXT PRIMARY KEY NOT NULL, v INT NOT NULL, w BLOB)",
    "CREATE TABLE b(k BLOB PRIMARY KEY NOT NULL, v INT CHECK (v IS NULL OR v < 4))",
];

/// Each table and the query that lists its rows (with the rowid where it is hidden).
const TABLES: [(&str, &str); 5] = [
    ("t", "SELECT * FROM t ORDER BY k"),
    ("u", "SELECT * FROM u ORDER BY k"),
    ("r", "SELECT rowid, a, b FROM r ORDER BY rowid"),
    ("s", "SELECT rowid, k, v, w FROM s ORDER BY rowid"),
    ("b", "SELECT rowid, k, v FROM b ORDER BY rowid"),
];

struct Gen(SplitMix64);

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    fn key(&mut self) -> String {
        (self.below(14) as i64 - 1).to_string()
    }
    fn value(&mut self) -> String {
        match self.below(8) {
            0 => "NULL".into(),
            n => (n as i64 - 3).to_string(),
        }
    }
    /// A key of a table keyed by text or blobs: text, a blob, or a number (which a TEXT
    /// column stores as text and a BLOB one as it is).
    fn text_key(&mut self) -> String {
        let n = self.below(6);
        match self.below(5) {
            0 => n.to_string(),
            1 => format!("x'0{n}'"),
            2 => format!("{n}.0"),
            _ => format!("'k{n}'"),
        }
    }
    fn or(&mut self) -> &'static str {
        ["", "", "", " OR IGNORE", " OR REPLACE", " OR FAIL"][self.below(6) as usize]
    }
    fn statement(&mut self, in_txn: bool) -> String {
        match self.below(34) {
            // (Not OR FAIL: EmberDB takes it as ABORT, which SQLite's FAIL is only for a
            // statement that changes one row.)
            20 => format!(
                "INSERT{} INTO t VALUES ({}, {}, {}), ({}, {}, {})",
                ["", "", " OR IGNORE", " OR REPLACE"][self.below(4) as usize],
                self.key(),
                self.value(),
                self.value(),
                self.key(),
                self.value(),
                self.value()
            ),
            // Assignments that fail as they run: only where the row is there.
            21 => format!(
                "UPDATE t SET k = 'x{}', v = 1, w = 1 WHERE k = {}",
                self.below(3),
                self.key()
            ),
            22 => format!(
                "UPDATE t SET v = abs(-9223372036854775807 - {}), w = 0 WHERE k = {}",
                self.below(2),
                self.key()
            ),
            23 => format!(
                "INSERT{} INTO r(rowid, a, b) VALUES ({}, {}, {})",
                self.or(),
                self.key(),
                self.value(),
                self.value()
            ),
            24 => format!(
                "UPDATE{} r SET a = {}, b = {} WHERE rowid = {}",
                self.or(),
                self.value(),
                self.value(),
                self.key()
            ),
            25 => format!("DELETE FROM r WHERE rowid = {}", self.key()),
            26 => format!(
                "UPDATE{} r SET rowid = {} WHERE rowid = {}",
                self.or(),
                self.key(),
                self.key()
            ),
            // Tables keyed by text or blobs: an UPDATE that sets every other column from
            // no column makes its row without reading the old one (`update_by_key`).
            27 | 28 => format!(
                "INSERT{} INTO s VALUES ({}, {}, {})",
                self.or(),
                self.text_key(),
                self.value(),
                self.text_key()
            ),
            29 => format!(
                "UPDATE{} s SET v = {}, w = {} WHERE k = {}",
                self.or(),
                self.value(),
                self.text_key(),
                self.text_key()
            ),
            30 => format!(
                "UPDATE{} s SET {} = {} WHERE k = {}",
                self.or(),
                ["v", "w", "k"][self.below(3) as usize],
                self.value(),
                self.text_key()
            ),
            31 => format!(
                "INSERT{} INTO b VALUES ({}, {})",
                self.or(),
                self.text_key(),
                self.value()
            ),
            32 => format!(
                "UPDATE{} b SET v = {} WHERE {}",
                self.or(),
                self.value(),
                [
                    format!("k = {}", self.text_key()),
                    format!("{} = k", self.text_key()),
                    format!("k = {} AND v IS NOT NULL", self.text_key()),
                ][self.below(3) as usize]
            ),
            33 => format!(
                "DELETE FROM {} WHERE k = {}",
                ["s", "b"][self.below(2) as usize],
                self.text_key()
            ),
            0 if !in_txn => "BEGIN".into(),
            0 | 1 if in_txn => ["COMMIT", "ROLLBACK"][self.below(2) as usize].into(),
            2..=5 => format!(
                "INSERT{} INTO t VALUES ({}, {}, {})",
                self.or(),
                self.key(),
                self.value(),
                self.value()
            ),
            6 => format!(
                "INSERT{} INTO t(v, w) VALUES ({}, {})",
                self.or(),
                self.value(),
                self.value()
            ),
            7..=9 => format!(
                "UPDATE{} t SET v = {}, w = {} WHERE k = {}",
                self.or(),
                self.value(),
                self.value(),
                self.key()
            ),
            10 => format!(
                "UPDATE{} t SET v = {} WHERE k = {}",
                self.or(),
                self.value(),
                self.key()
            ),
            11 => format!(
                "UPDATE{} t SET k = {} WHERE k = {}",
                self.or(),
                self.key(),
                self.key()
            ),
            12 => format!("DELETE FROM t WHERE k = {}", self.key()),
            13..=15 => format!(
                "INSERT{} INTO u VALUES ({}, {}, {})",
                self.or(),
                self.key(),
                self.value(),
                self.value()
            ),
            16 | 17 => format!(
                "UPDATE{} u SET a = {}, b = {} WHERE k = {}",
                self.or(),
                self.value(),
                self.value(),
                self.key()
            ),
            18 => format!("DELETE FROM u WHERE k = {}", self.key()),
            _ => format!(
                "UPDATE{} u SET b = {} WHERE k = {}",
                self.or(),
                self.value(),
                self.key()
            ),
        }
    }
}

/// What a statement did: the error (see [`failed`]), else the rows it changed.
#[derive(Debug, PartialEq)]
enum Outcome {
    Failed(String),
    Changed(u64),
}

/// An error as both systems word it: a UNIQUE or NOT NULL constraint's message from its
/// name on (it names the table's columns), a CHECK constraint's kind (the expression's
/// text is printed differently), else the message after the last `: ` (what prefixes it
/// is each API's own).
fn failed(message: &str) -> Outcome {
    for kind in ["UNIQUE", "NOT NULL"] {
        if let Some(at) = message.find(&format!("{kind} constraint failed")) {
            return Outcome::Failed(message[at..].to_string());
        }
    }
    if message.contains("CHECK constraint failed") {
        return Outcome::Failed("CHECK".into());
    }
    let tail = message.rsplit(": ").next().unwrap_or(message);
    Outcome::Failed(tail.to_string())
}

fn sqlite_rows(c: &rusqlite::Connection, query: &str) -> Vec<Vec<Value>> {
    let mut st = c.prepare(query).unwrap();
    let n = st.column_count();
    let mut rows = st.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(r) = rows.next().unwrap() {
        out.push(
            (0..n)
                .map(|i| sqlite_value(r.get_ref(i).unwrap()))
                .collect(),
        );
    }
    out
}

fn ember_rows(c: &Connection, query: &str) -> Vec<Vec<Value>> {
    let mut st = c.prepare(query).unwrap();
    let mut rows = st.query(()).unwrap();
    let mut out = Vec::new();
    while let Some(r) = rows.next().unwrap() {
        out.push(r.values().to_vec());
    }
    out
}

fn run(using: &str, seed: u64, statements: usize) {
    let dir = tempfile::tempdir().unwrap();
    let e = Connection::open(dir.path().join("w.ember")).unwrap();
    let s = rusqlite::Connection::open_in_memory().unwrap();
    for ddl in SCHEMA {
        e.execute_batch(&format!("{ddl}{using}")).unwrap();
        s.execute_batch(ddl).unwrap();
    }
    let mut g = Gen(SplitMix64::new(seed));
    let mut in_txn = false;
    for i in 0..statements {
        let sql = g.statement(in_txn);
        let want = match s.execute(&sql, []) {
            Ok(n) => Outcome::Changed(n as u64),
            Err(err) => failed(&err.to_string()),
        };
        let got = match e.execute(&sql, ()) {
            Ok(_) => Outcome::Changed(e.changes()),
            Err(err) => failed(&err.to_string()),
        };
        // BEGIN, COMMIT and ROLLBACK change no rows; their counts are the last statement's.
        let control = ["BEGIN", "COMMIT", "ROLLBACK"].contains(&sql.as_str());
        if !control {
            assert_eq!(got, want, "statement {i} `{sql}`{using} (seed {seed})");
        }
        in_txn = !s.is_autocommit();
        for (table, query) in TABLES {
            assert_eq!(
                ember_rows(&e, query),
                sqlite_rows(&s, query),
                "table {table} after statement {i} `{sql}`{using} (seed {seed})"
            );
        }
    }
}

fn settings() -> (u64, usize) {
    let seed = std::env::var("EMBER_WRITE_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0001);
    let n = std::env::var("EMBER_WRITE_DIFF_STATEMENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000);
    (seed, n)
}

#[test]
fn writes_by_key_match_sqlite_on_the_table_engine() {
    let (seed, n) = settings();
    run("", seed, n);
}

#[test]
fn writes_by_key_match_sqlite_on_the_lsm_engine() {
    let (seed, n) = settings();
    run(" USING lsm", seed ^ 1, n);
}
