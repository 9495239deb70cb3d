//! # ember-slt — a sqllogictest runner
//!
//! Owns the sqllogictest runner: the file format ([`parser`]), the printing of result values as
//! the original runner prints them ([`value`]), running records against a [`Backend`] and
//! comparing results ([`runner`]), and the SQLite backend ([`SqliteBackend`], feature `sqlite`,
//! on by default) the test files under `tests/slt/` are checked against. The EmberDB backend is
//! wired in the binary (`src/main.rs`, `default_backend`).
//!
//! Must not touch: the engines; a backend is reached only through [`Backend`].
//!
//! ```
//! use ember_slt::{run_script, Backend, Outcome, SqlValue};
//!
//! struct One;
//! impl Backend for One {
//!     fn name(&self) -> &str { "one" }
//!     fn execute(&mut self, _sql: &str) -> Result<Outcome, String> {
//!         Ok(Outcome::Rows(vec![vec![SqlValue::Integer(1)]]))
//!     }
//! }
//! let report = run_script(&mut One, "query I\nSELECT 1\n----\n1\n", "inline.slt");
//! assert_eq!((report.passed, report.failed), (1, 0));
//! ```

#[cfg(feature = "ember")]
mod ember;
mod fp;
pub mod parser;
pub mod runner;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod value;

#[cfg(feature = "ember")]
pub use ember::EmberBackend;
pub use parser::{
    Condition, ParseError, QueryExpect, Record, RecordKind, SortMode, StatementExpect,
};
pub use runner::{Backend, Failure, Outcome, Report, rewrite_script, run_file, run_script};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteBackend;
pub use value::SqlValue;

/// The test files (`.test`, `.slt`) at `path`: the path itself when it is a file, else every
/// such file below the directory, recursively, in name order.
pub fn test_files(path: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            files.extend(test_files(&entry)?);
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("test" | "slt")
        ) {
            files.push(entry);
        }
    }
    Ok(files)
}
