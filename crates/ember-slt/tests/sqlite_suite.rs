//! The acceptance tests under `tests/slt/` at the workspace root pass on SQLite, the reference:
//! every record, and at least 1,000 of them.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use std::path::Path;

use ember_slt::{Report, SqliteBackend, run_file, test_files};

#[test]
fn every_slt_file_passes_on_sqlite() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/slt");
    let files = test_files(&dir).unwrap();
    assert!(
        files.len() >= 10,
        "test files in {}: {files:?}",
        dir.display()
    );
    let mut total = Report::default();
    for file in &files {
        let mut sqlite = SqliteBackend::new().unwrap();
        let report = run_file(&mut sqlite, file);
        assert!(report.passed > 0, "{}: no record passed", file.display());
        total.merge(report);
    }
    let failures: Vec<String> = total.failures.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        total.failed,
        0,
        "failures on SQLite:\n{}",
        failures.join("\n")
    );
    assert!(
        total.passed >= 1000,
        "only {} records in tests/slt (at least 1,000 expected)",
        total.passed
    );
}
