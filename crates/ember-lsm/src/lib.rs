//! # ember-lsm — the LSM-tree engine (SQLiteKV)
//!
//! Will own (issue 7): the write-ahead log with group commit, memtables, sorted tables (data
//! blocks, index block, bloom filter, checksums), leveled compaction, the manifest and crash
//! recovery; storage through an environment trait over space-manager extents; the RAM budget
//! that keeps only levels 0 and 1's indexes in memory.
//!
//! Must not touch: SQL parsing or planning (the SQL-to-KV compiler and the coordination cache
//! live in `ember-sql`), `std::fs` (all storage goes through the environment trait).
