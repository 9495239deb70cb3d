//! # ember-table — the native table engine (LUNAR) and the database's space manager
//!
//! Owns the on-device layout of every EmberDB database — the zones SUPER, ROOT_ZONE,
//! META_ZONE, DATA_ZONE and LOG; the variable-size size-class block allocator with crash-safe
//! bitmaps, which also hands extents to the other engines; slotted blocks; the hash and B+tree
//! primary indexes; the optional modules (buffer, prefetcher, secondary index, query cache);
//! and the five consistency modes none / disorder / metadata / data / full.
//!
//! Built so far: the block header every structure carries ([`format`](mod@format)), the journal
//! ([`journal`]), the variable-size allocator ([`allocator`]), the superblock and zones
//! ([`superblock`]), the space manager that hands out extents ([`space`]), and the typed values
//! with their row and order-preserving key encodings ([`row`]), table schemas ([`schema`]) and
//! slotted data blocks ([`slotted`]) with their tuple checksums ([`checksum`]). Tables, indexes,
//! the consistency modes and the modules build on them.
//!
//! Must not touch: SQL (it takes typed rows and keys), files (it sees only a
//! `ember_device::BlockDevice`).

// Two functions use `unsafe`: the CPU cache hint in `buffer` (a prefetch instruction) and
// the tuple checksum in `checksum` (the CPU's CRC-32C instruction).
#![deny(unsafe_code)]

pub mod allocator;
mod buffer;
pub mod catalog;
mod checkpoint;
pub mod checksum;
pub mod db;
pub mod doorkeeper;
pub mod error;
pub mod format;
pub mod ikey;
pub mod journal;
pub mod pindex;
#[cfg(feature = "query-cache")]
mod query_cache;
pub mod row;
pub mod schema;
#[cfg(feature = "secondary-index")]
mod secondary;
pub mod slotted;
pub mod space;
pub mod superblock;

pub use allocator::{AllocConfig, Allocator, BlockRef};
pub use db::{Database, Mode, Options, Order};
pub use doorkeeper::Doorkeeper;
pub use error::{Result, TableError};
pub use journal::{Journal, Record};
pub use row::{AsValueRef, RowError, RowValues, Value, ValueRef, row_values};
pub use schema::{Column, IndexDef, IndexKind, Schema};
pub use slotted::SlottedBlock;
pub use space::{Extent, ExtentSpace, SpaceManager};
pub use superblock::{FormatOptions, Superblock, Zone};
