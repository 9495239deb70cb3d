//! # ember-slt — run sqllogictest files
//!
//! Owns the command line: `ember-slt [--sqlite] [--rewrite] FILE_OR_DIR...` runs every `.test` /
//! `.slt` file given (directories recursively), each on a fresh in-memory database, prints each
//! failure and a last line `N passed, M failed`; the exit code is 1 when M > 0, 2 on a usage
//! error or a backend that cannot be opened.
//!
//! Must not touch: the runner's logic (in the library); this file only picks the backend.

use std::path::PathBuf;
use std::process::ExitCode;

use ember_slt::{Backend, Report, rewrite_script, run_file, test_files};

const USAGE: &str = "\
usage: ember-slt [--sqlite] [--rewrite] FILE_OR_DIR...

Runs sqllogictest files (.test, .slt; directories recursively), each on a fresh in-memory
database, and prints every failure and a last line `N passed, M failed`.

  --sqlite    run on SQLite (the reference the test files are checked against)
              instead of EmberDB
  --rewrite   replace every query's expected results in the files with what the
              database returns (for writing new tests; check the diff by hand)
  -h, --help  this text";

/// The EmberDB backend (a fresh in-memory database per file), used when `--sqlite` is
/// absent.
#[cfg(feature = "ember")]
fn default_backend() -> Result<Box<dyn Backend>, String> {
    Ok(Box::new(ember_slt::EmberBackend::new()?))
}

#[cfg(not(feature = "ember"))]
fn default_backend() -> Result<Box<dyn Backend>, String> {
    Err("this ember-slt was built without the `ember` feature; run with --sqlite".to_string())
}

#[cfg(feature = "sqlite")]
fn sqlite_backend() -> Result<Box<dyn Backend>, String> {
    Ok(Box::new(ember_slt::SqliteBackend::new()?))
}

#[cfg(not(feature = "sqlite"))]
fn sqlite_backend() -> Result<Box<dyn Backend>, String> {
    Err("this ember-slt was built without the `sqlite` feature".to_string())
}

fn main() -> ExitCode {
    let mut sqlite = false;
    let mut rewrite = false;
    let mut paths = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--sqlite" => sqlite = true,
            "--rewrite" => rewrite = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') && s.len() > 1 => {
                eprintln!("ember-slt: unknown option `{s}`\n\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    if paths.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let open = if sqlite {
        sqlite_backend
    } else {
        default_backend
    };
    let mut files = Vec::new();
    for path in &paths {
        match test_files(path) {
            Ok(found) => files.extend(found),
            Err(e) => {
                eprintln!("ember-slt: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let mut total = Report::default();
    for file in &files {
        let mut backend = match open() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("ember-slt: {e}");
                return ExitCode::from(2);
            }
        };
        let report = if rewrite {
            match std::fs::read_to_string(file) {
                Ok(text) => {
                    let name = file.display().to_string();
                    let (new, report) = rewrite_script(backend.as_mut(), &text, &name);
                    if new != text
                        && let Err(e) = std::fs::write(file, new)
                    {
                        eprintln!("ember-slt: cannot write {name}: {e}");
                        return ExitCode::from(2);
                    }
                    report
                }
                Err(_) => run_file(backend.as_mut(), file),
            }
        } else {
            run_file(backend.as_mut(), file)
        };
        for failure in &report.failures {
            println!("{failure}");
        }
        total.merge(report);
    }
    if total.skipped > 0 {
        println!("({} records skipped by skipif/onlyif)", total.skipped);
    }
    println!("{} passed, {} failed", total.passed, total.failed);
    if total.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
