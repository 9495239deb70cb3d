//! Any text run as statements against a small in-memory database that already holds a few tables,
//! an index and a view: every statement either runs or returns an error; no panic, no stack
//! overflow. Inputs are kept short so that a run is milliseconds (row counts can double per
//! `INSERT … SELECT`, as in any SQL engine; a budget of statements bounds that).
#![no_main]

use libfuzzer_sys::fuzz_target;

const SETUP: &str = "
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL, d BLOB);
CREATE TABLE u(x, y NOT NULL DEFAULT 0, z UNIQUE, CHECK (y >= 0));
CREATE INDEX tb ON t(b, c);
CREATE VIEW v AS SELECT a, b FROM t WHERE a > 1;
INSERT INTO t VALUES (1, 'one', 1.5, x'01'), (2, NULL, -2.0, NULL), (3, 'three', NULL, x'ff00');
INSERT INTO u VALUES (1, 2, 'a'), (NULL, 0, NULL), ('x', 5, 3.25);
";

/// At most this many statements per input.
const MAX_STATEMENTS: usize = 12;

fuzz_target!(|data: &[u8]| {
    if data.len() > 2048 {
        return;
    }
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let stmts = ember_sql::split_statements(sql);
    if stmts.len() > MAX_STATEMENTS {
        return;
    }
    // A small device (4 MB), so that opening is cheap and "database or disk is full" paths
    // are reachable too.
    let opts = ember::OpenOptions {
        mode: ember::Mode::Metadata,
        capacity: 4 << 20,
        ..ember::OpenOptions::default()
    };
    let conn = ember::Connection::open_in_memory_with(opts).expect("in-memory database opens");
    // Strings and blobs up to 1 MB (SQLite's limit is 1 GB): memory stays small per run.
    conn.set_max_length(1 << 20);
    conn.execute_batch(SETUP).expect("setup runs");
    for (_, text) in stmts {
        // Each statement on its own, so one error does not hide the rest.
        let _ = conn.execute_each(text, |_, _| {});
    }
    // The database is still usable after whatever ran.
    let _ = conn.execute_batch("SELECT count(*) FROM sqlite_master;");
});
