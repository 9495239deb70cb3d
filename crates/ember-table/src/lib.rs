//! # ember-table — the native table engine (LUNAR) and the database's space manager
//!
//! Owns the on-device layout of every EmberDB database — the zones SUPER, ROOT_ZONE,
//! META_ZONE, DATA_ZONE and LOG; the variable-size size-class block allocator with crash-safe
//! bitmaps, which also hands extents to the other engines; slotted blocks; the hash and B+tree
//! primary indexes; the optional modules (buffer, prefetcher, secondary index, query cache);
//! and the five consistency modes none / disorder / metadata / data / full.
//!
//! Built so far: the block header every structure carries ([`format`]) and the journal
//! ([`journal`]). The rest of issue 3 builds on them.
//!
//! Must not touch: SQL (it takes typed rows and keys), files (it sees only a
//! `ember_device::BlockDevice`).

#![forbid(unsafe_code)]

pub mod allocator;
pub mod error;
pub mod format;
pub mod journal;

pub use allocator::{AllocConfig, Allocator, BlockRef};
pub use error::{Result, TableError};
pub use journal::{Journal, Record};
