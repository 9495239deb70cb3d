//! # ember — the EmberDB shell
//!
//! Owns the sqlite3-like shell: `ember [FILE] [SQL...]` opens a database file (default: an
//! in-memory database), a raw block device or partition, runs SQL typed interactively (line
//! editing and history), piped on stdin, or given as arguments, and offers the dot-commands
//! people use with sqlite3. Output in the default `list` mode is byte-compatible with
//! sqlite3's (`|` between columns, NULL as an empty string, headers off).
//!
//! Must not touch: anything below the `ember` facade except to report on devices.

mod output;

use std::io::{self, BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ember::{Connection, Mode, OpenOptions, Value};

use output::{OutMode, Printer};

/// EmberDB: one embedded database for devices from phones down to batteryless
/// microcontrollers. A sqlite3-like shell.
#[derive(Parser, Debug)]
#[command(name = "ember", version, about, long_about = None)]
struct Cli {
    /// Database file or raw block device (/dev/...); an in-memory database when absent.
    file: Option<PathBuf>,
    /// SQL statements or dot-commands to run instead of reading stdin.
    sql: Vec<String>,
    /// Consistency mode: none, disorder, metadata, data, full (default full).
    #[arg(long, default_value = "full")]
    consistency: String,
    /// Size of a new database file in MiB (a sparse device image).
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Stop at the first error.
    #[arg(long)]
    bail: bool,
    /// Print column headers.
    #[arg(long)]
    header: bool,
    /// Output mode: list, csv, column, box, json, line.
    #[arg(long, default_value = "list")]
    mode: String,
}

struct Shell {
    conn: Connection,
    printer: Printer,
    bail: bool,
    timer: bool,
    failed: bool,
    interactive: bool,
}

fn parse_mode(m: &str) -> Option<Mode> {
    Some(match m.to_ascii_lowercase().as_str() {
        "none" => Mode::None,
        "disorder" => Mode::Disorder,
        "metadata" => Mode::Metadata,
        "data" => Mode::Data,
        "full" => Mode::Full,
        _ => return None,
    })
}

/// Whether accumulated input ends a statement: a `;` outside quotes and comments as the
/// last significant character.
fn complete(sql: &str) -> bool {
    let b = sql.as_bytes();
    let mut i = 0;
    let mut last_semi = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' | b'"' | b'`' => {
                let q = c;
                i += 1;
                loop {
                    if i >= b.len() {
                        return false;
                    }
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                last_semi = false;
            }
            b'[' => {
                while i < b.len() && b[i] != b']' {
                    i += 1;
                }
                if i >= b.len() {
                    return false;
                }
                last_semi = false;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                if i + 1 >= b.len() {
                    return false;
                }
                i += 1;
            }
            b';' => last_semi = true,
            c if c.is_ascii_whitespace() => {}
            _ => last_semi = false,
        }
        i += 1;
    }
    last_semi
}

impl Shell {
    fn error(&mut self, line: usize, e: &ember::Error) {
        self.failed = true;
        let kind = match e {
            ember::Error::Sql(ember::SqlError::Syntax { .. }) => "Parse error",
            _ => "Runtime error",
        };
        if self.interactive {
            eprintln!("{kind}: {e}");
        } else {
            eprintln!("{kind} near line {line}: {e}");
        }
    }

    /// Runs SQL text that starts at input line `line`; false if it failed.
    fn run_sql(&mut self, sql: &str, line: usize) -> bool {
        let start = Instant::now();
        let printer = &mut self.printer;
        let r = self.conn.execute_each(sql, |_, out| {
            if !out.columns.is_empty() {
                printer.print(&out.columns, &out.rows);
            }
        });
        if self.timer {
            let t = start.elapsed().as_secs_f64();
            self.printer
                .line(&format!("Run Time: real {t:.3} user {t:.6} sys 0.000000"));
        }
        match r {
            Ok(()) => true,
            Err(e) => {
                self.error(line, &e);
                false
            }
        }
    }

    /// Runs a dot-command; returns false to quit.
    fn dot(&mut self, cmd: &str, line: usize) -> bool {
        let args = split_args(cmd);
        let name = args.first().map(String::as_str).unwrap_or("");
        let arg = |i: usize| args.get(i).map(String::as_str);
        let fail = |shell: &mut Shell, msg: String| {
            shell.failed = true;
            eprintln!("{msg}");
        };
        match name {
            ".quit" | ".exit" => return false,
            ".help" => self.printer.line(HELP),
            ".tables" => {
                let pat = arg(1).map(|p| p.replace('%', ""));
                let names: Vec<String> = self
                    .conn
                    .table_names()
                    .into_iter()
                    .filter(|n| pat.as_ref().is_none_or(|p| n.contains(p.as_str())))
                    .collect();
                if !names.is_empty() {
                    self.printer.line(&columns_layout(&names));
                }
            }
            ".schema" => {
                for (table, sql) in self.conn.schema_sql() {
                    if arg(1).is_none_or(|t| t.eq_ignore_ascii_case(&table)) {
                        self.printer.line(&format!("{sql};"));
                    }
                }
            }
            ".indexes" | ".indices" => {
                let names: Vec<String> = self
                    .conn
                    .index_names()
                    .into_iter()
                    .filter(|(t, _)| arg(1).is_none_or(|a| a.eq_ignore_ascii_case(t)))
                    .map(|(_, i)| i)
                    .collect();
                if !names.is_empty() {
                    self.printer.line(&columns_layout(&names));
                }
            }
            ".mode" => match arg(1).and_then(OutMode::parse) {
                Some(m) => self.printer.set_mode(m),
                None => fail(
                    self,
                    format!(
                        "Error: mode should be one of: list csv column box json line (got {})",
                        arg(1).unwrap_or("")
                    ),
                ),
            },
            ".headers" | ".header" => match arg(1) {
                Some(v) => {
                    self.printer.headers =
                        matches!(v.to_ascii_lowercase().as_str(), "on" | "1" | "yes" | "true")
                }
                None => fail(self, "Usage: .headers on|off".into()),
            },
            ".separator" => match arg(1) {
                Some(s) => self.printer.separator = unescape(s),
                None => fail(self, "Usage: .separator COL".into()),
            },
            ".nullvalue" => self.printer.nullvalue = arg(1).unwrap_or("").to_string(),
            ".bail" => self.bail = arg(1).is_some_and(|v| matches!(v, "on" | "1")),
            ".timer" => self.timer = arg(1).is_some_and(|v| matches!(v, "on" | "1")),
            ".output" | ".once" => {
                if let Err(e) = self.printer.redirect(arg(1)) {
                    fail(
                        self,
                        format!("Error: cannot open \"{}\": {e}", arg(1).unwrap_or("")),
                    );
                }
            }
            ".read" => match arg(1) {
                Some(f) => match std::fs::read_to_string(f) {
                    Ok(text) => {
                        let ok = self.run_script(&text);
                        if !ok && self.bail {
                            return false;
                        }
                    }
                    Err(e) => fail(self, format!("Error: cannot open \"{f}\": {e}")),
                },
                None => fail(self, "Usage: .read FILE".into()),
            },
            ".import" => {
                let (file, table) = match (arg(1), arg(2)) {
                    (Some(f), Some(t)) if !f.starts_with("--") => (f.to_string(), t.to_string()),
                    _ => {
                        let plain: Vec<&String> = args
                            .iter()
                            .skip(1)
                            .filter(|a| !a.starts_with("--"))
                            .collect();
                        match plain.as_slice() {
                            [f, t] => ((*f).clone(), (*t).clone()),
                            _ => {
                                fail(self, "Usage: .import [--csv] [--skip N] FILE TABLE".into());
                                return true;
                            }
                        }
                    }
                };
                let skip = args
                    .iter()
                    .position(|a| a == "--skip")
                    .and_then(|i| args.get(i + 1))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if let Err(e) = self.import(&file, &table, skip) {
                    fail(self, format!("Error: {e}"));
                }
            }
            ".dbinfo" => {
                let info = self.dbinfo();
                self.printer.line(&info);
            }
            _ => fail(
                self,
                format!(
                    "Error: unknown command or invalid arguments:  \"{}\". Enter \".help\" for help",
                    name.trim_start_matches('.')
                ),
            ),
        }
        let _ = line;
        true
    }

    fn dbinfo(&mut self) -> String {
        let mut out = String::new();
        for p in [
            "engine",
            "consistency_mode",
            "block_size",
            "cache_size",
            "page_stats",
        ] {
            if let Ok(mut st) = self.conn.prepare(&format!("PRAGMA {p}")) {
                if let Ok(mut rows) = st.query([]) {
                    let names: Vec<String> =
                        rows.column_names().iter().map(|s| s.to_string()).collect();
                    if let Ok(Some(r)) = rows.next() {
                        for (n, v) in names.iter().zip(r.values()) {
                            out.push_str(&format!("{n:<22} {}\n", output::text(v, "")));
                        }
                    }
                }
            }
        }
        out.trim_end().to_string()
    }

    /// `.import FILE TABLE`: CSV rows into a table (created from the header row if absent).
    fn import(&mut self, file: &str, table: &str, skip: usize) -> Result<(), String> {
        let f = std::fs::File::open(file).map_err(|e| format!("cannot open \"{file}\": {e}"))?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(io::BufReader::new(f));
        let mut records = rdr.byte_records();
        for _ in 0..skip {
            records.next();
        }
        let exists = self
            .conn
            .table_names()
            .iter()
            .any(|t| t.eq_ignore_ascii_case(table));
        let first = match records.next() {
            Some(r) => r.map_err(|e| e.to_string())?,
            None => return Ok(()),
        };
        let fields = |r: &csv::ByteRecord| -> Vec<String> {
            r.iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect()
        };
        let head = fields(&first);
        let ncols;
        let mut pending = Vec::new();
        if exists {
            ncols = self
                .conn
                .prepare(&format!(
                    "SELECT * FROM \"{}\" LIMIT 0",
                    table.replace('"', "\"\"")
                ))
                .and_then(|mut s| s.query([]).map(|r| r.column_names().len()))
                .map_err(|e| e.to_string())?;
            pending.push(head);
        } else {
            let cols: Vec<String> = head
                .iter()
                .map(|c| format!("\"{}\" TEXT", c.replace('"', "\"\"")))
                .collect();
            self.conn
                .execute_batch(&format!(
                    "CREATE TABLE \"{}\"({})",
                    table.replace('"', "\"\""),
                    cols.join(", ")
                ))
                .map_err(|e| e.to_string())?;
            ncols = head.len();
        }
        let marks: Vec<String> = (1..=ncols).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "INSERT INTO \"{}\" VALUES({})",
            table.replace('"', "\"\""),
            marks.join(",")
        );
        let bar = if size > 8 << 20 && io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(size);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Some(b)
        } else {
            None
        };
        self.conn
            .execute_batch("BEGIN")
            .map_err(|e| e.to_string())?;
        let result = (|| -> Result<usize, String> {
            let mut st = self.conn.prepare(&sql).map_err(|e| e.to_string())?;
            let mut n = 0;
            let mut insert = |vals: Vec<String>| -> Result<(), String> {
                let mut row: Vec<Value> = vals.into_iter().map(Value::Text).collect();
                row.resize(ncols, Value::Null);
                row.truncate(ncols);
                st.execute(row).map_err(|e| e.to_string())?;
                n += 1;
                Ok(())
            };
            for r in pending.drain(..) {
                insert(r)?;
            }
            for rec in records {
                let rec = rec.map_err(|e| e.to_string())?;
                if let (Some(b), Some(p)) = (&bar, rec.position()) {
                    b.set_position(p.byte());
                }
                insert(fields(&rec))?;
            }
            Ok(n)
        })();
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        match result {
            Ok(_) => self.conn.execute_batch("COMMIT").map_err(|e| e.to_string()),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Runs a script (stdin or `.read`); returns false if anything failed.
    fn run_script(&mut self, text: &str) -> bool {
        let mut ok = true;
        let mut buf = String::new();
        let mut start_line = 1;
        for (i, line) in text.lines().enumerate() {
            let lineno = i + 1;
            if buf.trim().is_empty() {
                buf.clear();
                start_line = lineno;
                let t = line.trim_start();
                if t.starts_with('.') {
                    if !self.dot(t, lineno) {
                        return ok;
                    }
                    if self.failed && self.bail {
                        return false;
                    }
                    continue;
                }
            }
            buf.push_str(line);
            buf.push('\n');
            if complete(&buf) {
                let sql = std::mem::take(&mut buf);
                if !self.run_sql(&sql, start_line) {
                    ok = false;
                    if self.bail {
                        return false;
                    }
                }
            }
        }
        if !buf.trim().is_empty() && !ember::is_blank(&buf) && !self.run_sql(&buf, start_line) {
            ok = false;
        }
        ok
    }

    fn interactive(&mut self, history: Option<PathBuf>) {
        let Ok(mut rl) = rustyline::DefaultEditor::new() else {
            let mut text = String::new();
            let _ = io::stdin().read_to_string(&mut text);
            self.run_script(&text);
            return;
        };
        if let Some(h) = &history {
            let _ = rl.load_history(h);
        }
        let mut buf = String::new();
        loop {
            let prompt = if buf.is_empty() {
                "ember> "
            } else {
                "   ...> "
            };
            match rl.readline(prompt) {
                Ok(line) => {
                    if buf.is_empty() && line.trim_start().starts_with('.') {
                        let _ = rl.add_history_entry(line.as_str());
                        if !self.dot(line.trim(), 0) {
                            break;
                        }
                        continue;
                    }
                    buf.push_str(&line);
                    buf.push('\n');
                    if complete(&buf) {
                        let _ = rl.add_history_entry(buf.trim_end());
                        let sql = std::mem::take(&mut buf);
                        self.run_sql(&sql, 0);
                    }
                }
                Err(rustyline::error::ReadlineError::Interrupted) => buf.clear(),
                Err(_) => break,
            }
        }
        if let Some(h) = &history {
            let _ = rl.save_history(h);
        }
    }
}

/// Splits a dot-command into words, honoring quotes.
fn split_args(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut has = false;
    for c in cmd.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                has = true;
            }
            None if c.is_whitespace() => {
                if has || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            None => cur.push(c),
        }
    }
    if has || !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("\\t", "\t")
        .replace("\\n", "\n")
        .replace("\\r", "\r")
}

/// Names in columns, as sqlite3's `.tables` prints them.
fn columns_layout(names: &[String]) -> String {
    let w = names.iter().map(|n| n.chars().count()).max().unwrap_or(0) + 2;
    let per_row = (80 / w).max(1);
    let rows = names.len().div_ceil(per_row);
    let mut out = Vec::new();
    for r in 0..rows {
        let mut line = String::new();
        for c in 0..per_row {
            if let Some(n) = names.get(c * rows + r) {
                line.push_str(&format!("{n:<w$}"));
            }
        }
        out.push(line.trim_end().to_string());
    }
    out.join("\n")
}

const HELP: &str = ".bail on|off             Stop after hitting an error
.dbinfo                  Show the engine, consistency mode and storage statistics
.exit                    Exit this program
.headers on|off          Turn display of headers on or off
.help                    Show this message
.import FILE TABLE       Import CSV data from FILE into TABLE (--skip N skips rows)
.indexes ?TABLE?         Show names of indexes
.mode MODE               Set output mode: list csv column box json line
.nullvalue STRING        Use STRING in place of NULL values
.output ?FILE?           Send output to FILE or stdout
.quit                    Exit this program
.read FILE               Read input from FILE
.schema ?TABLE?          Show the CREATE statements
.separator COL           Change the column separator for list mode
.tables ?PATTERN?        List names of tables
.timer on|off            Turn SQL timer on or off";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(mode) = parse_mode(&cli.consistency) else {
        eprintln!("ember: --consistency must be one of none, disorder, metadata, data, full");
        return ExitCode::from(2);
    };
    let opts = OpenOptions {
        mode,
        capacity: cli.size_mib << 20,
        ..OpenOptions::default()
    };
    let conn = match &cli.file {
        Some(p) if p.as_os_str() != ":memory:" => Connection::open_with(p, opts),
        _ => Connection::open_in_memory(),
    };
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ember: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(out_mode) = OutMode::parse(&cli.mode) else {
        eprintln!("ember: --mode must be one of list, csv, column, box, json, line");
        return ExitCode::from(2);
    };
    let mut printer = Printer::new();
    printer.set_mode(out_mode);
    if cli.header {
        printer.headers = true;
    }
    let interactive = cli.sql.is_empty() && io::stdin().is_terminal();
    let mut shell = Shell {
        conn,
        printer,
        bail: cli.bail,
        timer: false,
        failed: false,
        interactive,
    };
    if !cli.sql.is_empty() {
        for s in &cli.sql {
            let t = s.trim_start();
            if t.starts_with('.') {
                if !shell.dot(t, 1) {
                    break;
                }
            } else if !shell.run_sql(s, 1) && shell.bail {
                break;
            }
        }
    } else if interactive {
        println!(
            "EmberDB {} — enter \".help\" for usage hints.",
            env!("CARGO_PKG_VERSION")
        );
        if cli.file.is_none() {
            println!(
                "Connected to a transient in-memory database.\nUse \".open FILENAME\" by restarting with `ember FILENAME` for a persistent one."
            );
        }
        let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ember_history"));
        shell.interactive(history);
    } else {
        let mut text = String::new();
        let stdin = io::stdin();
        for line in stdin.lock().lines() {
            match line {
                Ok(l) => {
                    text.push_str(&l);
                    text.push('\n');
                }
                Err(e) => {
                    eprintln!("ember: reading stdin: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        shell.run_script(&text);
    }
    shell.printer.flush();
    let failed = shell.failed;
    if let Err(e) = shell.conn.close() {
        eprintln!("ember: {e}");
        return ExitCode::FAILURE;
    }
    let _ = io::stdout().flush();
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_end_at_a_semicolon_outside_quotes() {
        assert!(complete("select 1;"));
        assert!(complete("select ';' ; -- done\n"));
        assert!(!complete("select ';"));
        assert!(!complete("select 1"));
        assert!(!complete("select 1; select 2"));
        assert!(!complete("select /* ; */ 1"));
        assert!(complete("select 'it''s';"));
    }

    #[test]
    fn dot_command_words() {
        assert_eq!(
            split_args(".import 'my file.csv' t"),
            vec![".import", "my file.csv", "t"]
        );
        assert_eq!(split_args(".separator \"\""), vec![".separator", ""]);
    }
}
