//! The acceptance tests under `tests/slt/` at the workspace root: every record passes on
//! SQLite, the reference the files are checked against, and on EmberDB; there are at least
//! 1,000 of them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use ember_slt::{Backend, Report, run_file, test_files};

/// Runs every file on a fresh backend from `open` and asserts that every record passes.
#[allow(dead_code)] // unused when both backends are compiled out
fn every_file_passes(open: &dyn Fn() -> Box<dyn Backend>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/slt");
    let files = test_files(&dir).unwrap();
    assert!(
        files.len() >= 10,
        "test files in {}: {files:?}",
        dir.display()
    );
    let mut total = Report::default();
    let mut name = String::new();
    for file in &files {
        let mut backend = open();
        name = backend.name().to_string();
        let report = run_file(backend.as_mut(), file);
        assert!(report.passed > 0, "{}: no record passed", file.display());
        total.merge(report);
    }
    let failures: Vec<String> = total.failures.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        total.failed,
        0,
        "failures on {name}:\n{}",
        failures.join("\n")
    );
    assert!(
        total.passed >= 1000,
        "only {} records in tests/slt (at least 1,000 expected)",
        total.passed
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn every_slt_file_passes_on_sqlite() {
    every_file_passes(&|| Box::new(ember_slt::SqliteBackend::new().unwrap()));
}

#[cfg(feature = "ember")]
#[test]
fn every_slt_file_passes_on_ember() {
    every_file_passes(&|| Box::new(ember_slt::EmberBackend::new().unwrap()));
}
