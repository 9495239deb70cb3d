//! The sqllogictest file format: records separated by blank lines.
//!
//! Accepted (the classic format of SQLite's sqllogictest, plus the common sqllogictest-rs
//! forms):
//!
//! * `# comment` lines anywhere outside a result block; a trailing `# comment` on a control line
//!   (`statement ok`, `query …`, `skipif`, `onlyif`, `hash-threshold`, `halt`);
//! * `statement ok` and `statement error [message]`, then the SQL up to the blank line (for
//!   `statement error`, a `----` block may hold the message instead, as in sqllogictest-rs);
//! * `query <types> [nosort|rowsort|valuesort] [label]`, then the SQL, then `----` and the
//!   expected results up to the blank line (no `----` means no rows); `query error [message]`;
//! * `hash-threshold N`, `halt`;
//! * `skipif <db>` / `onlyif <db>` before any record, stacked freely;
//! * CRLF line ends, trailing whitespace, no final blank line.
//!
//! A record that cannot be parsed (an unknown record type, a missing argument, a missing SQL
//! text) becomes [`RecordKind::Invalid`] with its line: the runner reports it as a failure and
//! goes on with the next record. Parsing never fails as a whole and never panics.

use std::fmt;

/// A `skipif` / `onlyif` condition on a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `skipif <db>`: skip the record when the backend is `<db>`.
    SkipIf(String),
    /// `onlyif <db>`: run the record only when the backend is `<db>`.
    OnlyIf(String),
}

impl Condition {
    /// Whether a record under this condition runs on the backend named `db`.
    pub fn allows(&self, db: &str) -> bool {
        match self {
            Condition::SkipIf(name) => !name.eq_ignore_ascii_case(db),
            Condition::OnlyIf(name) => name.eq_ignore_ascii_case(db),
        }
    }
}

/// How a query's result values are ordered before they are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortMode {
    /// As the backend returned them.
    #[default]
    NoSort,
    /// Rows sorted by their printed values, column by column (byte order).
    RowSort,
    /// All values sorted one by one, ignoring rows.
    ValueSort,
}

/// What a statement must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementExpect {
    /// Succeed.
    Ok,
    /// Fail; when a message is given, the error must contain it.
    Error(Option<String>),
}

/// What a query must return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryExpect {
    /// These result lines (one value a line, one row a line, or `N values hashing to H`).
    Results(Vec<String>),
    /// Fail; when a message is given, the error must contain it.
    Error(Option<String>),
}

/// One record of a test file.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The 1-based line of the record's command (`statement`, `query`, ...).
    pub line: usize,
    /// The `skipif` / `onlyif` conditions before it, in order.
    pub conditions: Vec<Condition>,
    /// What the record is.
    pub kind: RecordKind,
}

/// The kinds of record.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordKind {
    /// `statement ok` / `statement error`.
    Statement {
        /// Success or failure expected.
        expect: StatementExpect,
        /// The SQL text (its lines joined by `\n`).
        sql: String,
    },
    /// `query <types> ...`.
    Query {
        /// One type letter per column (`I`, `R`, `T`).
        types: String,
        /// The sort mode.
        sort: SortMode,
        /// The label, if any (queries with one label must give one result).
        label: Option<String>,
        /// The SQL text (its lines joined by `\n`).
        sql: String,
        /// The expected results or error.
        expect: QueryExpect,
        /// The 0-based index of the last line of the SQL (for rewriting results).
        sql_end: usize,
        /// The 0-based index one past the record's last line (for rewriting results).
        end: usize,
    },
    /// `hash-threshold N`: hash results of more than N values (0: never).
    HashThreshold(usize),
    /// `halt`: stop running the file.
    Halt,
    /// A record that could not be parsed; the runner reports it as a failure.
    Invalid {
        /// What is wrong.
        message: String,
    },
}

/// A parse error: the first invalid record of a file (see [`parse_strict`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// The lines of `text` without line ends (`\n` or `\r\n`) and trailing whitespace.
pub fn lines(text: &str) -> Vec<&str> {
    text.split('\n').map(str::trim_end).collect()
}

/// A control line without its trailing `# comment`.
fn strip_comment(line: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_space {
            return line[..i].trim_end();
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// Parses a whole file; invalid records come back as [`RecordKind::Invalid`].
pub fn parse(text: &str) -> Vec<Record> {
    let lines = lines(text);
    let mut records = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].is_empty() {
            i += 1;
            continue;
        }
        let (record, next) = parse_record(&lines, i);
        if let Some(record) = record {
            records.push(record);
        }
        i = next;
    }
    records
}

/// Parses a whole file, failing on the first invalid record.
pub fn parse_strict(text: &str) -> Result<Vec<Record>, ParseError> {
    let records = parse(text);
    if let Some(bad) = records.iter().find_map(|r| match &r.kind {
        RecordKind::Invalid { message } => Some(ParseError {
            line: r.line,
            message: message.clone(),
        }),
        _ => None,
    }) {
        return Err(bad);
    }
    Ok(records)
}

/// The index of the next blank line at or after `i` (or the end).
fn block_end(lines: &[&str], mut i: usize) -> usize {
    while i < lines.len() && !lines[i].is_empty() {
        i += 1;
    }
    i
}

/// Reads SQL lines from `i` up to a blank line or `----`; returns the SQL, the index of the
/// last SQL line and the index where it stopped.
fn read_sql(lines: &[&str], mut i: usize) -> (String, usize, usize) {
    let mut sql = Vec::new();
    let mut last = i.saturating_sub(1);
    while i < lines.len() && !lines[i].is_empty() && lines[i] != "----" {
        if !lines[i].trim_start().starts_with('#') {
            sql.push(lines[i]);
        }
        last = i;
        i += 1;
    }
    (sql.join("\n"), last, i)
}

/// Parses the record starting at the non-blank line `start`. Returns it (None for a block of
/// comments only) and the index after it.
fn parse_record(lines: &[&str], start: usize) -> (Option<Record>, usize) {
    let mut conditions = Vec::new();
    let mut i = start;
    let invalid = |line: usize, message: String, next: usize| {
        (
            Some(Record {
                line: line + 1,
                conditions: Vec::new(),
                kind: RecordKind::Invalid { message },
            }),
            next,
        )
    };
    loop {
        if i >= lines.len() || lines[i].is_empty() {
            if conditions.is_empty() {
                return (None, i);
            }
            return invalid(start, "a condition without a record after it".into(), i);
        }
        let raw = lines[i];
        if raw.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let control = strip_comment(raw);
        let mut tokens = control.split_whitespace();
        let command = tokens.next().unwrap_or("");
        let args: Vec<&str> = tokens.collect();
        let record = |kind: RecordKind, conditions: Vec<Condition>| Record {
            line: i + 1,
            conditions,
            kind,
        };
        match command {
            "skipif" | "onlyif" => {
                let Some(db) = args.first() else {
                    return invalid(i, format!("`{command}` without a database name"), {
                        block_end(lines, i)
                    });
                };
                conditions.push(if command == "skipif" {
                    Condition::SkipIf((*db).to_string())
                } else {
                    Condition::OnlyIf((*db).to_string())
                });
                i += 1;
            }
            "hash-threshold" => {
                let n = match args.as_slice() {
                    [n] => n.parse::<usize>().ok(),
                    _ => None,
                };
                let Some(n) = n else {
                    return invalid(
                        i,
                        format!("`hash-threshold` needs one number, got `{control}`"),
                        block_end(lines, i),
                    );
                };
                return (
                    Some(record(RecordKind::HashThreshold(n), conditions)),
                    i + 1,
                );
            }
            "halt" => {
                return (Some(record(RecordKind::Halt, conditions)), i + 1);
            }
            "statement" => {
                let expect = match args.first().copied() {
                    Some("ok") if args.len() == 1 => StatementExpect::Ok,
                    Some("error") => {
                        // The message is the rest of the raw line (not comment-stripped, a
                        // message may hold `#`), unless that rest is only a comment.
                        let rest = raw.trim_start()["statement".len()..].trim_start()
                            ["error".len()..]
                            .trim();
                        if rest.is_empty() || rest.starts_with('#') {
                            StatementExpect::Error(None)
                        } else {
                            StatementExpect::Error(Some(rest.to_string()))
                        }
                    }
                    _ => {
                        return invalid(
                            i,
                            format!(
                                "expected `statement ok` or `statement error`, got `{control}`"
                            ),
                            block_end(lines, i),
                        );
                    }
                };
                let (sql, _, mut j) = read_sql(lines, i + 1);
                if sql.trim().is_empty() {
                    return invalid(i, "a statement without SQL".into(), block_end(lines, j));
                }
                let mut expect = expect;
                if j < lines.len() && lines[j] == "----" {
                    let end = block_end(lines, j + 1);
                    match expect {
                        StatementExpect::Error(None) => {
                            let message = lines[j + 1..end].join("\n");
                            expect = StatementExpect::Error(
                                (!message.trim().is_empty()).then(|| message.trim().to_string()),
                            );
                        }
                        _ => {
                            return invalid(
                                j,
                                "results (`----`) after a statement that expects none".into(),
                                end,
                            );
                        }
                    }
                    j = end;
                }
                return (
                    Some(record(RecordKind::Statement { expect, sql }, conditions)),
                    j,
                );
            }
            "query" => {
                let Some(&first) = args.first() else {
                    return invalid(i, "`query` without column types".into(), {
                        block_end(lines, i)
                    });
                };
                let mut error = None;
                let mut types = String::new();
                let mut sort = SortMode::NoSort;
                let mut label = None;
                if first == "error" {
                    let rest =
                        raw.trim_start()["query".len()..].trim_start()["error".len()..].trim();
                    error = Some(
                        (!rest.is_empty() && !rest.starts_with('#')).then(|| rest.to_string()),
                    );
                } else {
                    if !first.chars().all(|c| c.is_ascii_alphabetic()) {
                        return invalid(
                            i,
                            format!("bad column types `{first}` (letters such as I, R, T)"),
                            block_end(lines, i),
                        );
                    }
                    types = first.to_string();
                    for arg in &args[1..] {
                        match *arg {
                            "nosort" => sort = SortMode::NoSort,
                            "rowsort" => sort = SortMode::RowSort,
                            "valuesort" => sort = SortMode::ValueSort,
                            other if label.is_none() => label = Some(other.to_string()),
                            other => {
                                return invalid(
                                    i,
                                    format!("unexpected `{other}` in `{control}`"),
                                    block_end(lines, i),
                                );
                            }
                        }
                    }
                }
                let (sql, sql_end, j) = read_sql(lines, i + 1);
                if sql.trim().is_empty() {
                    return invalid(i, "a query without SQL".into(), block_end(lines, j));
                }
                let (results, end) = if j < lines.len() && lines[j] == "----" {
                    let end = block_end(lines, j + 1);
                    (
                        lines[j + 1..end].iter().map(|s| s.to_string()).collect(),
                        end,
                    )
                } else {
                    (Vec::new(), j)
                };
                let expect = match error {
                    Some(None) if !results.is_empty() => {
                        QueryExpect::Error(Some(results.join("\n").trim().to_string()))
                    }
                    Some(message) => QueryExpect::Error(message),
                    None => QueryExpect::Results(results),
                };
                return (
                    Some(record(
                        RecordKind::Query {
                            types,
                            sort,
                            label,
                            sql,
                            expect,
                            sql_end,
                            end,
                        },
                        conditions,
                    )),
                    end,
                );
            }
            other => {
                return invalid(
                    i,
                    format!("unknown record type `{other}`"),
                    block_end(lines, i),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn one(text: &str) -> Record {
        let records = parse(text);
        assert_eq!(records.len(), 1, "{records:?}");
        records.into_iter().next().unwrap()
    }

    #[test]
    fn statement_ok_and_error() {
        let r = one("statement ok\nCREATE TABLE t(a)\n");
        assert_eq!(r.line, 1);
        assert_eq!(
            r.kind,
            RecordKind::Statement {
                expect: StatementExpect::Ok,
                sql: "CREATE TABLE t(a)".into()
            }
        );
        let r = one("\n\nstatement error\nSELECT x\n");
        assert_eq!(r.line, 3);
        assert!(matches!(
            r.kind,
            RecordKind::Statement {
                expect: StatementExpect::Error(None),
                ..
            }
        ));
        let r = one("statement error no such table\nSELECT * FROM nope");
        assert!(matches!(
            r.kind,
            RecordKind::Statement { expect: StatementExpect::Error(Some(ref m)), .. } if m == "no such table"
        ));
        let r = one("statement error # a comment, not a message\nSELECT x");
        assert!(matches!(
            r.kind,
            RecordKind::Statement {
                expect: StatementExpect::Error(None),
                ..
            }
        ));
        let r = one("statement error\nSELECT x\n----\nno such column: x\n");
        assert!(matches!(
            r.kind,
            RecordKind::Statement { expect: StatementExpect::Error(Some(ref m)), .. } if m == "no such column: x"
        ));
    }

    #[test]
    fn multi_line_sql_and_comments() {
        let r = one(
            "# leading comment\nstatement ok # trailing\nINSERT INTO t\n# inside\nVALUES (1)\n",
        );
        assert_eq!(r.line, 2);
        assert_eq!(
            r.kind,
            RecordKind::Statement {
                expect: StatementExpect::Ok,
                sql: "INSERT INTO t\nVALUES (1)".into()
            }
        );
    }

    #[test]
    fn query_header_forms() {
        let r = one("query ITR rowsort label-7\nSELECT 1, 'a', 2.5\n----\n1\na\n2.500\n");
        let RecordKind::Query {
            types,
            sort,
            label,
            sql,
            expect,
            ..
        } = r.kind
        else {
            panic!("not a query");
        };
        assert_eq!(types, "ITR");
        assert_eq!(sort, SortMode::RowSort);
        assert_eq!(label.as_deref(), Some("label-7"));
        assert_eq!(sql, "SELECT 1, 'a', 2.5");
        assert_eq!(
            expect,
            QueryExpect::Results(vec!["1".into(), "a".into(), "2.500".into()])
        );
        for (header, want) in [
            ("query I", SortMode::NoSort),
            ("query I nosort", SortMode::NoSort),
            ("query I valuesort", SortMode::ValueSort),
            ("query I rowsort # comment", SortMode::RowSort),
        ] {
            let r = one(&format!("{header}\nSELECT 1\n----\n1"));
            assert!(
                matches!(r.kind, RecordKind::Query { sort, label: None, .. } if sort == want),
                "{header}"
            );
        }
    }

    #[test]
    fn query_without_results_and_query_error() {
        let r = one("query I\nSELECT 1 WHERE 0\n");
        assert!(
            matches!(r.kind, RecordKind::Query { expect: QueryExpect::Results(ref v), .. } if v.is_empty())
        );
        let r = one("query error divide\nSELECT x\n");
        assert!(
            matches!(r.kind, RecordKind::Query { expect: QueryExpect::Error(Some(ref m)), .. } if m == "divide")
        );
        let r = one("query error\nSELECT x\n");
        assert!(matches!(
            r.kind,
            RecordKind::Query {
                expect: QueryExpect::Error(None),
                ..
            }
        ));
    }

    #[test]
    fn results_end_at_blank_line_and_keep_hash_lines() {
        let records = parse("query I\nSELECT 1\n----\n# not a comment here\n1\n\nhalt\n");
        assert_eq!(records.len(), 2);
        assert!(
            matches!(&records[0].kind, RecordKind::Query { expect: QueryExpect::Results(v), .. } if v == &["# not a comment here", "1"])
        );
        assert_eq!(records[1].kind, RecordKind::Halt);
        assert_eq!(records[1].line, 7);
    }

    #[test]
    fn conditions_with_trailing_comments_stack() {
        let r = one(
            "skipif mysql # MySQL differs\nonlyif sqlite # only here\nskipif ember\nstatement ok\nSELECT 1\n",
        );
        assert_eq!(
            r.conditions,
            vec![
                Condition::SkipIf("mysql".into()),
                Condition::OnlyIf("sqlite".into()),
                Condition::SkipIf("ember".into())
            ]
        );
        assert_eq!(r.line, 4);
        assert!(r.conditions[0].allows("sqlite"));
        assert!(r.conditions[1].allows("sqlite"));
        assert!(!r.conditions[1].allows("ember"));
        assert!(!r.conditions[2].allows("ember"));
    }

    #[test]
    fn hash_threshold_and_halt() {
        let records = parse("hash-threshold 8\n\nonlyif ember\nhalt\n\nhalt # the end\n");
        assert_eq!(records[0].kind, RecordKind::HashThreshold(8));
        assert_eq!(records[1].kind, RecordKind::Halt);
        assert_eq!(
            records[1].conditions,
            vec![Condition::OnlyIf("ember".into())]
        );
        assert_eq!(records[2].kind, RecordKind::Halt);
        assert!(records[2].conditions.is_empty());
    }

    #[test]
    fn crlf_trailing_whitespace_and_no_final_newline() {
        let records = parse(
            "statement ok  \r\nCREATE TABLE t(a)\t\r\n\r\nquery I\r\nSELECT 1\r\n----\r\n1   ",
        );
        assert_eq!(records.len(), 2);
        assert!(
            matches!(&records[0].kind, RecordKind::Statement { sql, .. } if sql == "CREATE TABLE t(a)")
        );
        assert!(
            matches!(&records[1].kind, RecordKind::Query { expect: QueryExpect::Results(v), .. } if v == &["1"])
        );
    }

    #[test]
    fn malformed_records_are_errors_with_lines() {
        let cases = [
            ("frobnicate\nSELECT 1\n", 1, "unknown record type"),
            ("\n\nstatement maybe\nSELECT 1\n", 3, "statement ok"),
            ("statement ok\n", 1, "without SQL"),
            ("query\nSELECT 1\n", 1, "column types"),
            ("query I\n----\n1\n", 1, "without SQL"),
            ("query I? nosort\nSELECT 1\n", 1, "bad column types"),
            ("query I nosort a b\nSELECT 1\n", 1, "unexpected"),
            ("hash-threshold x\n", 1, "hash-threshold"),
            ("skipif\nstatement ok\nSELECT 1\n", 1, "database name"),
            (
                "skipif sqlite\n\nstatement ok\nSELECT 1\n",
                1,
                "condition without",
            ),
            ("statement ok\nSELECT 1\n----\n1\n", 3, "expects none"),
        ];
        for (text, line, words) in cases {
            let err = parse_strict(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.message.contains(words), "{text:?}: {err}");
        }
        // The records after a bad one still parse.
        let records = parse("bogus\n\nstatement ok\nSELECT 1\n");
        assert_eq!(records.len(), 2);
        assert!(matches!(records[1].kind, RecordKind::Statement { .. }));
    }

    #[test]
    fn comment_only_blocks_are_not_records() {
        assert!(parse("# just\n# comments\n\n\n").is_empty());
        assert!(parse("").is_empty());
    }
}
