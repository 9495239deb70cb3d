//! Output modes, as sqlite3 prints them: list, csv, column, box, json, line.

use std::fs::File;
use std::io::{self, BufWriter, Write};

use ember::Value;

/// An output mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutMode {
    /// Values separated by `|` (the separator).
    List,
    /// RFC 4180 CSV.
    Csv,
    /// Aligned columns with a dashed rule under the headers.
    Column,
    /// A table drawn with box characters.
    Box,
    /// A JSON array of objects.
    Json,
    /// One `name = value` line per column, rows separated by blank lines.
    Line,
}

impl OutMode {
    /// A mode by name.
    pub fn parse(s: &str) -> Option<OutMode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "list" => OutMode::List,
            "csv" => OutMode::Csv,
            "column" => OutMode::Column,
            "box" => OutMode::Box,
            "json" => OutMode::Json,
            "line" => OutMode::Line,
            _ => return None,
        })
    }
}

/// A value as sqlite3's shell shows it.
pub fn text(v: &Value, null: &str) -> String {
    match v {
        Value::Null => null.to_string(),
        Value::Blob(b) => String::from_utf8_lossy(b).into_owned(),
        v => v.to_text().unwrap_or_default(),
    }
}

/// Where results go and how.
pub struct Printer {
    out: Box<dyn Write>,
    mode: OutMode,
    /// Print headers.
    pub headers: bool,
    /// Column separator (list mode).
    pub separator: String,
    /// Text for NULL.
    pub nullvalue: String,
}

impl Printer {
    /// Prints to stdout in list mode.
    pub fn new() -> Printer {
        Printer {
            out: Box::new(BufWriter::new(io::stdout())),
            mode: OutMode::List,
            headers: false,
            separator: "|".into(),
            nullvalue: String::new(),
        }
    }

    /// Sets the mode (column, box and line show headers, as sqlite3 does).
    pub fn set_mode(&mut self, m: OutMode) {
        self.mode = m;
        match m {
            OutMode::Csv => self.separator = ",".into(),
            OutMode::List => self.separator = "|".into(),
            OutMode::Column | OutMode::Box => self.headers = true,
            _ => {}
        }
    }

    /// Sends output to a file, or back to stdout.
    pub fn redirect(&mut self, file: Option<&str>) -> io::Result<()> {
        self.flush();
        self.out = match file {
            Some(f) if f != "stdout" => Box::new(BufWriter::new(File::create(f)?)),
            _ => Box::new(BufWriter::new(io::stdout())),
        };
        Ok(())
    }

    /// Prints a line of text.
    pub fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{s}");
    }

    /// Flushes.
    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }

    /// Prints a result.
    pub fn print(&mut self, cols: &[String], rows: &[Vec<Value>]) {
        let null = self.nullvalue.clone();
        let _ = match self.mode {
            OutMode::List => self.list(cols, rows, &null),
            OutMode::Csv => self.csv(cols, rows, &null),
            OutMode::Column => self.column(cols, rows, &null),
            OutMode::Box => self.boxed(cols, rows, &null),
            OutMode::Json => self.json(cols, rows),
            OutMode::Line => self.lines(cols, rows, &null),
        };
        // Interactive use wants each result at once.
        self.flush();
    }

    fn list(&mut self, cols: &[String], rows: &[Vec<Value>], null: &str) -> io::Result<()> {
        if self.headers {
            writeln!(self.out, "{}", cols.join(&self.separator))?;
        }
        for r in rows {
            let vals: Vec<String> = r.iter().map(|v| text(v, null)).collect();
            writeln!(self.out, "{}", vals.join(&self.separator))?;
        }
        Ok(())
    }

    fn csv(&mut self, cols: &[String], rows: &[Vec<Value>], null: &str) -> io::Result<()> {
        let sep = self.separator.bytes().next().unwrap_or(b',');
        let mut w = csv::WriterBuilder::new()
            .delimiter(sep)
            .terminator(csv::Terminator::CRLF)
            .from_writer(Vec::new());
        if self.headers {
            w.write_record(cols).map_err(io::Error::other)?;
        }
        for r in rows {
            let vals: Vec<String> = r.iter().map(|v| text(v, null)).collect();
            w.write_record(&vals).map_err(io::Error::other)?;
        }
        let bytes = w
            .into_inner()
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.out.write_all(&bytes)
    }

    fn widths(cols: &[String], rows: &[Vec<String>]) -> Vec<usize> {
        let mut w: Vec<usize> = cols.iter().map(|c| c.chars().count()).collect();
        for r in rows {
            for (i, v) in r.iter().enumerate() {
                if let Some(x) = w.get_mut(i) {
                    *x = (*x).max(v.chars().count());
                }
            }
        }
        w
    }

    fn column(&mut self, cols: &[String], rows: &[Vec<Value>], null: &str) -> io::Result<()> {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| r.iter().map(|v| text(v, null)).collect())
            .collect();
        let w = Self::widths(cols, &cells);
        let fmt_row = |vals: &[String], nums: Option<&Vec<Value>>| -> String {
            let parts: Vec<String> = vals
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let right = nums
                        .and_then(|r| r.get(i))
                        .is_some_and(|x| matches!(x, Value::Integer(_) | Value::Real(_)));
                    if right {
                        format!("{v:>width$}", width = w[i])
                    } else {
                        format!("{v:<width$}", width = w[i])
                    }
                })
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        if self.headers {
            writeln!(self.out, "{}", fmt_row(cols, None))?;
            let rule: Vec<String> = w.iter().map(|&n| "-".repeat(n)).collect();
            writeln!(self.out, "{}", rule.join("  "))?;
        }
        for (r, vals) in rows.iter().zip(&cells) {
            writeln!(self.out, "{}", fmt_row(vals, Some(r)))?;
        }
        Ok(())
    }

    fn boxed(&mut self, cols: &[String], rows: &[Vec<Value>], null: &str) -> io::Result<()> {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| r.iter().map(|v| text(v, null)).collect())
            .collect();
        let w = Self::widths(cols, &cells);
        let rule = |l: &str, m: &str, r: &str| -> String {
            let parts: Vec<String> = w.iter().map(|&n| "─".repeat(n + 2)).collect();
            format!("{l}{}{r}", parts.join(m))
        };
        let row = |vals: &[String], nums: Option<&Vec<Value>>| -> String {
            let parts: Vec<String> = vals
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let right = nums
                        .and_then(|r| r.get(i))
                        .is_some_and(|x| matches!(x, Value::Integer(_) | Value::Real(_)));
                    if right {
                        format!(" {v:>width$} ", width = w[i])
                    } else if nums.is_none() {
                        format!(" {v:^width$} ", width = w[i])
                    } else {
                        format!(" {v:<width$} ", width = w[i])
                    }
                })
                .collect();
            format!("│{}│", parts.join("│"))
        };
        writeln!(self.out, "{}", rule("┌", "┬", "┐"))?;
        writeln!(self.out, "{}", row(cols, None))?;
        writeln!(self.out, "{}", rule("├", "┼", "┤"))?;
        for (r, vals) in rows.iter().zip(&cells) {
            writeln!(self.out, "{}", row(vals, Some(r)))?;
        }
        writeln!(self.out, "{}", rule("└", "┴", "┘"))
    }

    fn json(&mut self, cols: &[String], rows: &[Vec<Value>]) -> io::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let q = |s: &str| -> String {
            let mut o = String::from("\"");
            for c in s.chars() {
                match c {
                    '"' => o.push_str("\\\""),
                    '\\' => o.push_str("\\\\"),
                    '\n' => o.push_str("\\n"),
                    '\r' => o.push_str("\\r"),
                    '\t' => o.push_str("\\t"),
                    c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                    c => o.push(c),
                }
            }
            o.push('"');
            o
        };
        let objs: Vec<String> = rows
            .iter()
            .map(|r| {
                let fields: Vec<String> = cols
                    .iter()
                    .zip(r)
                    .map(|(c, v)| {
                        let val = match v {
                            Value::Null => "null".to_string(),
                            Value::Integer(i) => i.to_string(),
                            Value::Real(_) => v.to_text().unwrap_or_default(),
                            Value::Text(t) => q(t),
                            Value::Blob(b) => q(&String::from_utf8_lossy(b)),
                        };
                        format!("{}:{val}", q(c))
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            })
            .collect();
        writeln!(self.out, "[{}]", objs.join(",\n"))
    }

    fn lines(&mut self, cols: &[String], rows: &[Vec<Value>], null: &str) -> io::Result<()> {
        let w = cols.iter().map(|c| c.chars().count()).max().unwrap_or(0);
        for (k, r) in rows.iter().enumerate() {
            if k > 0 {
                writeln!(self.out)?;
            }
            for (c, v) in cols.iter().zip(r) {
                writeln!(self.out, "{c:>w$} = {}", text(v, null))?;
            }
        }
        Ok(())
    }
}
