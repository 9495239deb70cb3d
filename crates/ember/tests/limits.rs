//! Statements at and past the nesting and size limits: at the limit they run, past it they
//! fail with SQLite's words — never a stack overflow. Found by fuzzing (deep parentheses, long
//! `1+1+…` chains overflowed the stack). Each test runs on a thread with the stack a program
//! gets by default: 2 MB (a spawned thread) when optimized; unoptimized frames are several
//! times larger, so debug builds get the 8 MB of a main thread.

#![allow(clippy::unwrap_used)]

use ember::{Connection, Error};

/// Runs `f` on a thread with the stack described above.
fn on_default_stack(f: impl FnOnce() + Send + 'static) {
    let mb = if cfg!(debug_assertions) { 8 } else { 2 };
    std::thread::Builder::new()
        .stack_size(mb << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

fn conn() -> Connection {
    let c = Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE t(a INTEGER PRIMARY KEY, b); INSERT INTO t VALUES (1, 2);")
        .unwrap();
    c
}

fn one(c: &Connection, sql: &str) -> Result<i64, Error> {
    c.query_row(sql, [], |r| r.get::<_, i64>(0))
}

fn message(r: Result<i64, Error>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn nesting_up_to_the_limit_runs_and_past_it_is_an_error() {
    on_default_stack(nesting);
}

fn nesting() {
    let c = conn();
    let deep = |n: usize| format!("SELECT {}b{} FROM t", "(".repeat(n), ")".repeat(n));
    assert_eq!(one(&c, &deep(98)).unwrap(), 2);
    assert!(message(one(&c, &deep(100))).contains("parser stack overflow"));
    let m = message(one(&c, &deep(5_000)));
    assert!(m.contains("parser stack overflow"), "{m}");

    let negs = |n: usize| format!("SELECT {}b FROM t", "- ".repeat(n));
    assert_eq!(one(&c, &negs(97)).unwrap(), -2);
    assert!(message(one(&c, &negs(100_000))).contains("parser stack overflow"));

    let nots = |n: usize| format!("SELECT {}b FROM t", "NOT ".repeat(n));
    assert_eq!(one(&c, &nots(97)).unwrap(), 0);
    assert!(message(one(&c, &nots(10_000))).contains("parser stack overflow"));

    let subqueries = |n: usize| format!("SELECT {}b{}", "(SELECT ".repeat(n), " FROM t)".repeat(n));
    assert_eq!(one(&c, &format!("{} FROM t", subqueries(98))).unwrap(), 2);
    assert!(message(one(&c, &subqueries(3_000))).contains("parser stack overflow"));

    let from = |n: usize| {
        format!(
            "SELECT b FROM {}t{}",
            "(SELECT * FROM ".repeat(n),
            ")".repeat(n)
        )
    };
    assert_eq!(one(&c, &from(98)).unwrap(), 2);
    assert!(message(one(&c, &from(3_000))).contains("parser stack overflow"));
}

#[test]
fn expression_trees_up_to_the_limit_run_and_taller_ones_are_an_error() {
    on_default_stack(trees);
}

fn trees() {
    let c = conn();
    let chain = |op: &str, n: usize| format!("SELECT b{} FROM t", format!(" {op} b").repeat(n));
    // b + b + … with 999 operators is a tree 1000 tall: the tallest allowed.
    assert_eq!(one(&c, &chain("+", 999)).unwrap(), 2 * 1000);
    let m = message(one(&c, &chain("+", 1000)));
    assert!(
        m.contains("Expression tree is too large (maximum depth 1000)"),
        "{m}"
    );
    for op in ["*", "-", "||", "AND", "OR", "=", "<", "&", "IS"] {
        let m = message(one(&c, &chain(op, 100_000)));
        assert!(m.contains("Expression tree is too large"), "{op}: {m}");
    }
    // Also in WHERE, and a chain of chains through subqueries counts as one tree.
    let w = format!(
        "SELECT count(*) FROM t WHERE {}",
        "b = 2 AND ".repeat(990) + "1"
    );
    assert_eq!(one(&c, &w).unwrap(), 1);
    let half = "+ b ".repeat(600);
    // Side by side, two chains are as tall as the taller one; stacked (the subquery at the
    // bottom of the outer chain), their heights add up.
    let side = format!("SELECT b {half} + (SELECT b {half} FROM t) FROM t");
    assert_eq!(one(&c, &side).unwrap(), 2 * 1202);
    let m = message(one(
        &c,
        &format!("SELECT (SELECT b {half} FROM t) {half} FROM t"),
    ));
    assert!(m.contains("Expression tree is too large"), "{m}");
}

#[test]
fn at_most_64_tables_in_a_join() {
    let c = conn();
    let join = |n: usize| format!("SELECT count(*) FROM {}", vec!["t"; n].join(", "));
    assert_eq!(one(&c, &join(64)).unwrap(), 1);
    let m = message(one(&c, &join(65)));
    assert!(m.contains("at most 64 tables in a join"), "{m}");
}

#[test]
fn strings_and_blobs_longer_than_the_limit_are_an_error() {
    let c = conn();
    // Found by the `execute` fuzz target: a printf width of 5e18 asked for that many bytes.
    let fuzz = "SELECT '[' || printf('%00000005124095576030431000.5e-3888888right', 'left') || ']'";
    let m = c
        .query_row(fuzz, [], |r| r.get::<_, String>(0))
        .unwrap_err()
        .to_string();
    assert!(m.contains("string or blob too big"), "{m}");
    c.set_max_length(1000);
    let len = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0));
    assert_eq!(len("SELECT length(printf('%1000d', 1))").unwrap(), 1000);
    assert_eq!(len("SELECT length(zeroblob(1000))").unwrap(), 1000);
    assert_eq!(len("SELECT length(randomblob(1000))").unwrap(), 1000);
    for sql in [
        "SELECT length(printf('%1001d', 1))",
        "SELECT length(printf('%.1001f', 1.5))",
        "SELECT length(printf('%600d%600d', 1, 2))",
        "SELECT length(zeroblob(1001))",
        "SELECT length(randomblob(5000000000))",
        "SELECT length(hex(zeroblob(600)))",
        "SELECT length(printf('%600d', 1) || printf('%600d', 1))",
        "SELECT length(replace(printf('%100d', 1), ' ', 'xxxxxxxxxxxxxxxxxxxx'))",
        "SELECT length(group_concat(printf('%100d', a))) FROM (SELECT 1 AS a UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10)",
    ] {
        let m = message(len(sql));
        assert!(m.contains("string or blob too big"), "{sql}: {m}");
    }
    // randomblob is random, and at least one byte.
    let a: Vec<u8> = c
        .query_row("SELECT randomblob(16)", [], |r| r.get(0))
        .unwrap();
    let b: Vec<u8> = c
        .query_row("SELECT randomblob(16)", [], |r| r.get(0))
        .unwrap();
    assert_ne!(a, b);
    assert_ne!(a, vec![0; 16]);
    assert_eq!(len("SELECT length(randomblob(-5))").unwrap(), 1);
    assert_eq!(len("SELECT length(zeroblob(-5))").unwrap(), 0);
}
