//! # ember-table — the native table engine (LUNAR) and the database's space manager
//!
//! Will own (issue 3): the on-device layout of every EmberDB database — the zones SUPER,
//! ROOT_ZONE, META_ZONE, DATA_ZONE and LOG; the variable-size size-class block allocator with
//! crash-safe bitmaps, which also hands extents to the other engines; slotted blocks; the hash
//! and B+tree primary indexes; the optional modules (buffer, prefetcher, secondary index,
//! query cache); and the five consistency modes none / disorder / metadata / data / full.
//!
//! Must not touch: SQL (it takes typed rows and keys), files (it sees only a
//! `ember_device::BlockDevice`).
