//! Running records against a [`Backend`] and comparing results.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use md5::{Digest, Md5};

use crate::parser::{self, QueryExpect, Record, RecordKind, SortMode, StatementExpect};
use crate::value::SqlValue;

/// What a backend gives back for one SQL text.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The rows of a statement that returns columns (possibly none).
    Rows(Vec<Vec<SqlValue>>),
    /// A statement without a result set ran.
    Done,
}

/// A database under test.
pub trait Backend {
    /// The name `skipif` / `onlyif` match (`sqlite`, `ember`).
    fn name(&self) -> &str;
    /// Runs `sql`, which may hold several statements separated by `;` (run in order; the
    /// outcome is the last statement's). An error is the database's message.
    fn execute(&mut self, sql: &str) -> Result<Outcome, String>;
}

/// One failed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The file name given to the runner.
    pub file: String,
    /// The 1-based line of the record.
    pub line: usize,
    /// The record's SQL (empty for an invalid record).
    pub sql: String,
    /// What was expected.
    pub expected: String,
    /// What happened.
    pub got: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "FAILED {}:{}", self.file, self.line)?;
        if !self.sql.is_empty() {
            writeln!(f, "  sql:")?;
            for line in self.sql.lines() {
                writeln!(f, "    {line}")?;
            }
        }
        writeln!(f, "  expected:")?;
        for line in self.expected.lines() {
            writeln!(f, "    {line}")?;
        }
        writeln!(f, "  got:")?;
        for line in self.got.lines() {
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// The result of running one or more files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Records (statements and queries) that passed.
    pub passed: usize,
    /// Records that failed (including records that could not be parsed).
    pub failed: usize,
    /// Records skipped by `skipif` / `onlyif`.
    pub skipped: usize,
    /// The failures, in order.
    pub failures: Vec<Failure>,
}

impl Report {
    /// Adds another report's counts and failures to this one.
    pub fn merge(&mut self, other: Report) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.failures.extend(other.failures);
    }
}

/// Runs the file at `path`; a file that cannot be read is one failure.
pub fn run_file(backend: &mut dyn Backend, path: impl AsRef<Path>) -> Report {
    let path = path.as_ref();
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => run_script(backend, &String::from_utf8_lossy(&bytes), &name),
        Err(e) => Report {
            failed: 1,
            failures: vec![Failure {
                file: name,
                line: 0,
                sql: String::new(),
                expected: "a readable test file".into(),
                got: format!("cannot read it: {e}"),
            }],
            ..Report::default()
        },
    }
}

/// Runs a script held in memory; `name` is the file name used in failures.
pub fn run_script(backend: &mut dyn Backend, text: &str, name: &str) -> Report {
    let mut run = Run::new(name);
    for record in parser::parse(text) {
        if run.record(backend, &record).is_break() {
            break;
        }
    }
    run.report
}

/// Runs a script and returns it with every query's expected results replaced by the results
/// the backend gives (hashed above the hash threshold, one row a line otherwise). Statements,
/// comments and the rest of the text are kept as they are; queries the backend fails on keep
/// their old results. Also returns the report of the run.
pub fn rewrite_script(backend: &mut dyn Backend, text: &str, name: &str) -> (String, Report) {
    let lines = parser::lines(text);
    let mut out: Vec<String> = Vec::new();
    let mut copied = 0; // lines[..copied] are in `out`
    let mut run = Run::new(name);
    for record in parser::parse(text) {
        let flow = run.record(backend, &record);
        if let RecordKind::Query {
            sql_end,
            end,
            expect: QueryExpect::Results(_),
            ..
        } = &record.kind
            && let Some(printed) = run.last_printed.take()
        {
            out.extend(lines[copied..=*sql_end].iter().map(|s| s.to_string()));
            if !printed.is_empty() {
                out.push("----".into());
                out.extend(printed);
            }
            copied = *end;
        }
        if flow.is_break() {
            break;
        }
    }
    out.extend(lines[copied..].iter().map(|s| s.to_string()));
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    let mut text = out.join("\n");
    text.push('\n');
    (text, run.report)
}

/// The state of a run through one file.
struct Run<'a> {
    name: &'a str,
    hash_threshold: usize,
    labels: HashMap<String, String>,
    report: Report,
    /// The results of the last query run, printed for [`rewrite_script`].
    last_printed: Option<Vec<String>>,
}

/// Whether to go on after a record.
enum Flow {
    Continue,
    Halt,
}

impl Flow {
    fn is_break(&self) -> bool {
        matches!(self, Flow::Halt)
    }
}

impl<'a> Run<'a> {
    fn new(name: &'a str) -> Self {
        Run {
            name,
            hash_threshold: 0,
            labels: HashMap::new(),
            report: Report::default(),
            last_printed: None,
        }
    }

    fn fail(&mut self, record: &Record, sql: &str, expected: String, got: String) {
        self.report.failed += 1;
        self.report.failures.push(Failure {
            file: self.name.to_string(),
            line: record.line,
            sql: sql.to_string(),
            expected,
            got,
        });
    }

    fn record(&mut self, backend: &mut dyn Backend, record: &Record) -> Flow {
        if let RecordKind::Invalid { message } = &record.kind {
            self.fail(record, "", "a valid record".into(), message.clone());
            return Flow::Continue;
        }
        if !record.conditions.iter().all(|c| c.allows(backend.name())) {
            if matches!(
                record.kind,
                RecordKind::Statement { .. } | RecordKind::Query { .. }
            ) {
                self.report.skipped += 1;
            }
            return Flow::Continue;
        }
        match &record.kind {
            RecordKind::Invalid { .. } => {}
            RecordKind::Halt => return Flow::Halt,
            RecordKind::HashThreshold(n) => self.hash_threshold = *n,
            RecordKind::Statement { expect, sql } => match (expect, backend.execute(sql)) {
                (StatementExpect::Ok, Ok(_)) => self.report.passed += 1,
                (StatementExpect::Ok, Err(e)) => {
                    self.fail(record, sql, "ok".into(), format!("error: {e}"))
                }
                (StatementExpect::Error(_), Ok(_)) => {
                    self.fail(record, sql, "an error".into(), "ok".into())
                }
                (StatementExpect::Error(message), Err(e)) => {
                    self.check_error(record, sql, message.as_deref(), &e)
                }
            },
            RecordKind::Query {
                types,
                sort,
                label,
                sql,
                expect,
                ..
            } => {
                let result = backend.execute(sql);
                match (expect, result) {
                    (QueryExpect::Error(_), Ok(_)) => {
                        self.fail(record, sql, "an error".into(), "rows".into())
                    }
                    (QueryExpect::Error(message), Err(e)) => {
                        self.check_error(record, sql, message.as_deref(), &e)
                    }
                    (QueryExpect::Results(lines), Err(e)) => {
                        self.fail(record, sql, lines.join("\n"), format!("error: {e}"))
                    }
                    (QueryExpect::Results(lines), Ok(outcome)) => {
                        let rows = match outcome {
                            Outcome::Rows(rows) => rows,
                            Outcome::Done => Vec::new(),
                        };
                        self.check_rows(record, sql, types, *sort, label.as_deref(), lines, rows)
                    }
                }
            }
        }
        Flow::Continue
    }

    fn check_error(&mut self, record: &Record, sql: &str, message: Option<&str>, got: &str) {
        match message {
            Some(m) if !got.contains(m) => self.fail(
                record,
                sql,
                format!("an error containing `{m}`"),
                format!("error: {got}"),
            ),
            _ => self.report.passed += 1,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_rows(
        &mut self,
        record: &Record,
        sql: &str,
        types: &str,
        sort: SortMode,
        label: Option<&str>,
        expected: &[String],
        rows: Vec<Vec<SqlValue>>,
    ) {
        let ncols = types.chars().count();
        if let Some(row) = rows.iter().find(|r| r.len() != ncols) {
            self.last_printed = None;
            self.fail(
                record,
                sql,
                format!("{ncols} column(s) (types `{types}`)"),
                format!("{} column(s)", row.len()),
            );
            return;
        }
        let printed = print_rows(&rows, types, sort);
        let values: Vec<&str> = printed.iter().flatten().map(String::as_str).collect();
        let hash = hash_values(&values);
        let hashed = self.hash_threshold > 0 && values.len() > self.hash_threshold;
        self.last_printed = Some(if hashed {
            vec![format!("{} values hashing to {hash}", values.len())]
        } else {
            printed
                .iter()
                .map(|row| row.join(" ").trim_end().to_string())
                .collect()
        });
        let ok = match parse_hash_line(expected) {
            Some((count, want)) => count == values.len() && want == hash,
            None => matches_values(expected, &values) || matches_rows(expected, &printed),
        };
        if !ok {
            let got = if parse_hash_line(expected).is_some() || (hashed && expected.len() <= 1) {
                format!("{} values hashing to {hash}", values.len())
            } else if ncols > 1 && expected.len() == printed.len() && expected.len() != values.len()
            {
                printed
                    .iter()
                    .map(|row| row.join(" "))
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                values.join("\n")
            };
            let expected = if expected.is_empty() {
                "(no rows)".to_string()
            } else {
                expected.join("\n")
            };
            let got = if got.is_empty() {
                "(no rows)".to_string()
            } else {
                got
            };
            self.fail(record, sql, expected, got);
            return;
        }
        if let Some(label) = label {
            match self.labels.get(label) {
                Some(earlier) if *earlier != hash => {
                    let earlier = earlier.clone();
                    self.fail(
                        record,
                        sql,
                        format!(
                            "the result of the earlier queries labelled `{label}` (hash {earlier})"
                        ),
                        format!("{} values hashing to {hash}", values.len()),
                    );
                    return;
                }
                Some(_) => {}
                None => {
                    self.labels.insert(label.to_string(), hash);
                }
            }
        }
        self.report.passed += 1;
    }
}

/// Prints every value by its column's type and orders the result by the sort mode
/// (`valuesort` gives one value a row).
pub fn print_rows(rows: &[Vec<SqlValue>], types: &str, sort: SortMode) -> Vec<Vec<String>> {
    let types: Vec<char> = types.chars().collect();
    let mut printed: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .map(|(i, v)| v.format(types.get(i).copied().unwrap_or('T')))
                .collect()
        })
        .collect();
    match sort {
        SortMode::NoSort => {}
        SortMode::RowSort => printed.sort(),
        SortMode::ValueSort => {
            let mut values: Vec<String> = printed.into_iter().flatten().collect();
            values.sort();
            printed = values.into_iter().map(|v| vec![v]).collect();
        }
    }
    printed
}

/// The md5 (lowercase hex) of every value followed by `\n`, as the original runner hashes.
pub fn hash_values<S: AsRef<str>>(values: &[S]) -> String {
    let mut md5 = Md5::new();
    for v in values {
        md5.update(v.as_ref().as_bytes());
        md5.update(b"\n");
    }
    md5.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `N values hashing to H` as the only expected line.
fn parse_hash_line(expected: &[String]) -> Option<(usize, String)> {
    let [line] = expected else { return None };
    let mut words = line.split_whitespace();
    let count = words.next()?.parse().ok()?;
    if (words.next()?, words.next()?, words.next()?) != ("values", "hashing", "to") {
        return None;
    }
    let hash = words.next()?;
    if words.next().is_some() || hash.len() != 32 {
        return None;
    }
    Some((count, hash.to_ascii_lowercase()))
}

/// One value a line (the classic layout). Leading and trailing spaces do not count (a file
/// cannot keep trailing ones).
fn matches_values(expected: &[String], values: &[&str]) -> bool {
    expected.len() == values.len()
        && expected
            .iter()
            .zip(values)
            .all(|(e, v)| e.trim() == v.trim())
}

/// One row a line, values separated by single spaces or tabs (the sqllogictest-rs layout).
fn matches_rows(expected: &[String], rows: &[Vec<String>]) -> bool {
    expected.len() == rows.len()
        && expected.iter().zip(rows).all(|(line, row)| {
            let line = line.trim();
            line.replace('\t', " ") == row.join(" ").trim()
                || line
                    .split('\t')
                    .map(str::trim)
                    .eq(row.iter().map(|v| v.trim()))
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A backend answering from a fixed list, recording what it was asked.
    struct Scripted {
        name: String,
        answers: Vec<(String, Result<Outcome, String>)>,
        asked: Vec<String>,
    }

    impl Scripted {
        fn new(name: &str, answers: Vec<(&str, Result<Outcome, String>)>) -> Self {
            Scripted {
                name: name.into(),
                answers: answers
                    .into_iter()
                    .map(|(s, o)| (s.to_string(), o))
                    .collect(),
                asked: Vec::new(),
            }
        }
    }

    impl Backend for Scripted {
        fn name(&self) -> &str {
            &self.name
        }
        fn execute(&mut self, sql: &str) -> Result<Outcome, String> {
            self.asked.push(sql.to_string());
            self.answers
                .iter()
                .find(|(s, _)| s == sql)
                .map(|(_, o)| o.clone())
                .unwrap_or(Ok(Outcome::Done))
        }
    }

    fn rows(rows: Vec<Vec<SqlValue>>) -> Result<Outcome, String> {
        Ok(Outcome::Rows(rows))
    }

    use SqlValue::{Integer as I, Null, Real as R, Text as T};

    fn t(s: &str) -> SqlValue {
        T(s.to_string())
    }

    fn three_rows() -> Result<Outcome, String> {
        rows(vec![
            vec![I(3), t("c")],
            vec![I(1), t("a b")],
            vec![I(2), Null],
        ])
    }

    fn run(backend: &mut Scripted, text: &str) -> Report {
        run_script(backend, text, "t.slt")
    }

    #[test]
    fn statements_pass_and_fail() {
        let mut b = Scripted::new(
            "sqlite",
            vec![
                ("BAD", Err("syntax error near BAD".into())),
                ("GOOD", Ok(Outcome::Done)),
            ],
        );
        let report = run(
            &mut b,
            "statement ok\nGOOD\n\nstatement error\nBAD\n\nstatement error syntax\nBAD\n\n\
             statement error nothing like it\nBAD\n\nstatement ok\nBAD\n\nstatement error\nGOOD\n",
        );
        assert_eq!((report.passed, report.failed), (3, 3));
        assert_eq!(
            report.failures.iter().map(|f| f.line).collect::<Vec<_>>(),
            vec![10, 13, 16]
        );
        assert!(report.failures[1].got.contains("syntax error"));
    }

    #[test]
    fn both_layouts_and_sort_modes() {
        let mut b = Scripted::new("sqlite", vec![("Q", three_rows())]);
        let classic = "query IT nosort\nQ\n----\n3\nc\n1\na b\n2\nNULL\n";
        let rowwise = "query IT nosort\nQ\n----\n3 c\n1 a b\n2 NULL\n";
        let tabs = "query IT rowsort\nQ\n----\n1\ta b\n2\tNULL\n3\tc\n";
        let rowsort = "query IT rowsort\nQ\n----\n1\na b\n2\nNULL\n3\nc\n";
        let valuesort = "query IT valuesort\nQ\n----\n1\n2\n3\nNULL\na b\nc\n";
        for text in [classic, rowwise, tabs, rowsort, valuesort] {
            let report = run(&mut b, text);
            assert_eq!((report.passed, report.failed), (1, 0), "{text}\n{report:?}");
        }
        let wrong = "query IT rowsort\nQ\n----\n3 c\n1 a b\n2 NULL\n";
        let report = run(&mut b, wrong);
        assert_eq!(report.failed, 1);
        assert_eq!(report.failures[0].got, "1 a b\n2 NULL\n3 c");
    }

    #[test]
    fn types_format_values() {
        let mut b = Scripted::new(
            "sqlite",
            vec![(
                "Q",
                rows(vec![vec![R(2.75), R(2.75), R(2.75), t(""), I(5)]]),
            )],
        );
        let report = run(
            &mut b,
            "query IRTTR\nQ\n----\n2\n2.750\n2.75\n(empty)\n5.000\n",
        );
        assert_eq!((report.passed, report.failed), (1, 0), "{report:?}");
    }

    #[test]
    fn wrong_column_count_fails() {
        let mut b = Scripted::new("sqlite", vec![("Q", three_rows())]);
        let report = run(&mut b, "query I\nQ\n----\n3\n1\n2\n");
        assert_eq!(report.failed, 1);
        assert!(report.failures[0].got.contains("2 column"));
    }

    #[test]
    fn empty_results() {
        let mut b = Scripted::new(
            "sqlite",
            vec![("E", rows(vec![])), ("D", Ok(Outcome::Done))],
        );
        let report = run(&mut b, "query I\nE\n\nquery I\nE\n----\n\nquery T\nD\n");
        assert_eq!((report.passed, report.failed), (3, 0));
        let report = run(&mut b, "query I\nE\n----\n1\n");
        assert_eq!(report.failed, 1);
        assert_eq!(report.failures[0].got, "(no rows)");
    }

    #[test]
    fn md5_of_values_matches_known_digests() {
        // md5("") and md5("1\n2\n3\n") as computed by md5sum.
        assert_eq!(hash_values::<&str>(&[]), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            hash_values(&["1", "2", "3"]),
            "c0710d6b4f15dfa88f600b0e6b624077"
        );
    }

    #[test]
    fn hash_threshold_and_hash_lines() {
        let mut b = Scripted::new(
            "sqlite",
            vec![("Q", rows(vec![vec![I(3)], vec![I(1)], vec![I(2)]]))],
        );
        let text = "hash-threshold 2\n\nquery I rowsort\nQ\n----\n3 values hashing to c0710d6b4f15dfa88f600b0e6b624077\n";
        let report = run(&mut b, text);
        assert_eq!((report.passed, report.failed), (1, 0), "{report:?}");
        // Below the threshold a hash line still compares; a wrong hash fails and shows the hash.
        let text =
            "query I nosort\nQ\n----\n3 values hashing to c0710d6b4f15dfa88f600b0e6b624077\n";
        let report = run(&mut b, text);
        assert_eq!(report.failed, 1);
        assert!(report.failures[0].got.contains("hashing to"));
        // Over the threshold, listed values still compare.
        let text = "hash-threshold 1\n\nquery I rowsort\nQ\n----\n1\n2\n3\n";
        assert_eq!(run(&mut b, text).passed, 1);
    }

    #[test]
    fn labels_must_agree() {
        let mut b = Scripted::new(
            "sqlite",
            vec![
                ("A", rows(vec![vec![I(1)]])),
                ("B", rows(vec![vec![I(1)]])),
                ("C", rows(vec![vec![I(2)]])),
            ],
        );
        let text = "query I nosort label-1\nA\n----\n1\n\nquery I nosort label-1\nB\n----\n1\n\n\
                    query I nosort label-1\nC\n----\n2\n";
        let report = run(&mut b, text);
        assert_eq!((report.passed, report.failed), (2, 1));
        assert_eq!(report.failures[0].line, 11);
    }

    #[test]
    fn conditions_skip_and_halt() {
        let mut b = Scripted::new("ember", vec![]);
        let text = "skipif ember\nstatement ok\nA\n\nonlyif sqlite # not here\nstatement ok\nB\n\n\
                    onlyif ember\nstatement ok\nC\n\nonlyif sqlite\nhalt\n\nstatement ok\nD\n\n\
                    onlyif ember\nhalt\n\nstatement ok\nE\n";
        let report = run(&mut b, text);
        assert_eq!((report.passed, report.failed, report.skipped), (2, 0, 2));
        assert_eq!(b.asked, vec!["C", "D"]);
    }

    #[test]
    fn halt_stops_the_file() {
        let mut b = Scripted::new("sqlite", vec![]);
        let report = run(&mut b, "statement ok\nA\n\nhalt\n\nstatement ok\nB\n");
        assert_eq!(report.passed, 1);
        assert_eq!(b.asked, vec!["A"]);
    }

    #[test]
    fn invalid_records_fail_and_the_run_goes_on() {
        let mut b = Scripted::new("sqlite", vec![]);
        let report = run(
            &mut b,
            "statement ok\nA\n\nwhatever this is\n\nstatement ok\nB\n",
        );
        assert_eq!((report.passed, report.failed), (2, 1));
        assert_eq!(report.failures[0].line, 4);
        assert!(report.failures[0].got.contains("unknown record type"));
    }

    #[test]
    fn query_error_records() {
        let mut b = Scripted::new("sqlite", vec![("X", Err("no such table: x".into()))]);
        let report = run(
            &mut b,
            "query error no such table\nX\n\nquery error\nX\n\nquery error other\nX\n",
        );
        assert_eq!((report.passed, report.failed), (2, 1));
    }

    #[test]
    fn unreadable_file_is_a_failure() {
        let mut b = Scripted::new("sqlite", vec![]);
        let report = run_file(&mut b, "/nonexistent/dir/file.slt");
        assert_eq!(report.failed, 1);
    }

    #[test]
    fn rewrite_replaces_results_only() {
        let mut b = Scripted::new("sqlite", vec![("Q", three_rows())]);
        let text = "# head\nstatement ok\nA\n\nquery IT rowsort\nQ\n----\nold\n\nquery I\nQ2\n";
        let (new, _) = rewrite_script(&mut b, text, "t.slt");
        assert_eq!(
            new,
            "# head\nstatement ok\nA\n\nquery IT rowsort\nQ\n----\n1 a b\n2 NULL\n3 c\n\nquery I\nQ2\n"
        );
    }
}
