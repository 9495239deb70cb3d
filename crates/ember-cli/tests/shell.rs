//! The shell as a user drives it: piped SQL, arguments, output modes, errors and exit codes,
//! and (where a `sqlite3` binary is installed) byte-for-byte the same output as sqlite3.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Stdio};

fn run(bin: &str, args: &[&str], stdin: &str) -> (String, String, i32) {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

const EMBER: &str = env!("CARGO_BIN_EXE_ember");

#[test]
fn piped_sql_prints_rows_and_the_file_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.ember");
    let db = db.to_str().unwrap();
    let (out, err, code) = run(
        EMBER,
        &[db],
        "CREATE TABLE t(a); INSERT INTO t VALUES(1); SELECT * FROM t;",
    );
    assert_eq!((out.as_str(), err.as_str(), code), ("1\n", "", 0));
    let (out, _, code) = run(EMBER, &[db], "SELECT * FROM t;\n");
    assert_eq!((out.as_str(), code), ("1\n", 0));
    let (out, _, code) = run(EMBER, &[db, "SELECT a + 1 FROM t", "SELECT 'x'"], "");
    assert_eq!((out.as_str(), code), ("2\nx\n", 0));
}

#[test]
fn errors_go_to_stderr_and_set_the_exit_code() {
    let (out, err, code) = run(
        EMBER,
        &[],
        "SELECT 1;\nSELEC 2;\nSELECT 3;\nSELECT * FROM nope;\n",
    );
    assert_eq!(out, "1\n3\n");
    assert!(err.contains("Parse error near line 2"), "{err}");
    assert!(err.contains("no such table: nope"), "{err}");
    assert_eq!(code, 1);
    let (out, _, code) = run(EMBER, &["--bail"], "SELECT 1;\nSELEC 2;\nSELECT 3;\n");
    assert_eq!((out.as_str(), code), ("1\n", 1));
}

const SCRIPT: &str = "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, score REAL, note);
INSERT INTO t VALUES (1, 'ann', 2.5, NULL), (2, 'bob, jr', 10, 'said \"hi\"'), (3, NULL, -1, x'414243');
SELECT * FROM t;
.headers on
SELECT id, name AS who, score * 2 FROM t ORDER BY id DESC;
.mode csv
SELECT * FROM t;
.headers off
.mode list
.separator ;
SELECT id, name FROM t WHERE score > 0;
.separator |
SELECT count(*), sum(score), group_concat(name, '+') FROM t;
SELECT typeof(1), typeof(1.0), typeof('a'), typeof(x'00'), typeof(NULL), 7/2, 7.0/2, 1/0;
";

#[test]
fn list_and_csv_modes_print_what_sqlite3_prints() {
    let (out, err, code) = run(EMBER, &[], SCRIPT);
    assert_eq!((err.as_str(), code), ("", 0));
    let expected = "1|ann|2.5|\n2|bob, jr|10.0|said \"hi\"\n3||-1.0|ABC\n\
id|who|score * 2\n3||-2.0\n2|bob, jr|20.0\n1|ann|5.0\n\
id,name,score,note\r\n1,ann,2.5,\r\n2,\"bob, jr\",10.0,\"said \"\"hi\"\"\"\r\n3,,-1.0,ABC\r\n\
1;ann\n2;bob, jr\n\
3|11.5|ann+bob, jr\n\
integer|real|text|blob|null|3|3.5|\n";
    assert_eq!(out, expected);
    // The real sqlite3, when installed, prints the same bytes.
    if let Ok(o) = Command::new("sqlite3").arg("-version").output() {
        if o.status.success() {
            let (lite, lerr, _) = run("sqlite3", &[], SCRIPT);
            assert_eq!(lerr, "");
            assert_eq!(out, lite);
        }
    }
}

#[test]
fn other_modes_and_dot_commands() {
    let script = "CREATE TABLE t(a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (22, NULL);
CREATE INDEX tb ON t(b);
.tables
.indexes
.schema t
.mode line
SELECT * FROM t;
.mode json
SELECT * FROM t;
.mode column
SELECT * FROM t;
";
    let (out, err, code) = run(EMBER, &[], script);
    assert_eq!((err.as_str(), code), ("", 0), "{out}");
    assert!(
        out.starts_with("t\ntb\nCREATE TABLE t(a INTEGER, b TEXT);\nCREATE INDEX tb ON t(b);\n"),
        "{out}"
    );
    assert!(
        out.contains("a = 1\nb = x\n\n a = 22\n b = \n")
            || out.contains("a = 1\nb = x\n\na = 22\nb = \n"),
        "{out}"
    );
    assert!(
        out.contains("[{\"a\":1,\"b\":\"x\"},\n{\"a\":22,\"b\":null}]\n"),
        "{out}"
    );
    assert!(out.contains("a   b\n--  -\n 1  x\n22\n"), "{out}");
}

#[test]
fn import_reads_csv_into_a_new_table() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("in.csv");
    std::fs::write(&csv, "name,qty\napple,3\n\"pear, green\",5\n").unwrap();
    let script = format!(
        ".import {} fruit\nSELECT name, qty * 2 FROM fruit ORDER BY name;\n",
        csv.display()
    );
    let (out, err, code) = run(EMBER, &[], &script);
    assert_eq!((err.as_str(), code), ("", 0));
    assert_eq!(out, "apple|6\npear, green|10\n");
}
