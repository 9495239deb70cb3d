//! # ember — the Rust API of EmberDB
//!
//! Will own (issue 4): `Connection`, `Statement`, `Rows` and options, shaped like rusqlite
//! so a SQLite user can switch in minutes; opening a database on a file, a raw block device or
//! memory.
//!
//! Must not touch: parsing or planning (`ember-sql`) or storage (`ember-table` and the
//! other engines).
