//! # ember-lsm — the LSM-tree engine (SQLiteKV)
//!
//! Owns (issue 7): the write-ahead log with group commit ([`wal`]), memtables and write
//! batches ([`memtable`]), sorted tables with prefix-compressed data blocks, an index block
//! and a bloom filter, every block checksummed and versioned ([`sstable`]), large values
//! kept apart from keys in value blobs and collected when mostly garbage ([`vlog`]), leveled
//! compaction ([`compaction`]), the manifest of live logs, tables and value blobs ([`manifest`]), ordered
//! iterators merging every source ([`iter`]), crash recovery and the RAM budget that keeps
//! only levels 0 and 1's indexes and filters resident ([`db`], [`cache`]); and storage through
//! an environment trait ([`mod@env`]) over space-manager extents (the default) or plain files.
//!
//! Must not touch: SQL parsing or planning (the SQL-to-KV compiler and the coordination cache
//! live in `ember-sql`), `std::fs` (all storage goes through the environment trait; only
//! [`env::FileEnv`] uses files).
//!
//! ```
//! use ember_device::MemBlock;
//! use ember_lsm::{Db, Options, SpaceEnv, WriteBatch};
//! use ember_table::{FormatOptions, SpaceManager};
//!
//! let sm = SpaceManager::format(MemBlock::new(8 << 20), FormatOptions::default())?;
//! let env = SpaceEnv::create(sm, 64 * 1024)?;
//! let root = env.root_locator(); // keep it: it opens the database again
//! let db = Db::create(env, Options::with_budget(1 << 20))?;
//! let mut batch = WriteBatch::new();
//! batch.put("a", "1").put("b", "2").delete("c");
//! db.write(batch, true)?; // atomic, durable on return
//! assert_eq!(db.get(b"a")?, Some(b"1".to_vec()));
//! let keys: Vec<Vec<u8>> = db.iter().map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
//! assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
//! let sm = db.close()?.into_space();
//! let db = Db::open(SpaceEnv::open(sm, &root)?, Options::with_budget(1 << 20))?;
//! assert_eq!(db.get(b"b")?, Some(b"2".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod cache;
pub mod coding;
pub mod compaction;
pub mod db;
pub mod env;
pub mod error;
pub mod iter;
pub mod manifest;
pub mod memtable;
pub mod sstable;
pub mod vlog;
pub mod wal;

pub use db::{Db, Iter, MemoryUsage, Options, ValueBlob};
pub use env::{BlobId, Env, FileEnv, SpaceEnv};
pub use error::{LsmError, Result};
pub use memtable::WriteBatch;
pub use sstable::bloom::PrefixRule;
