//! # ember-quadtree — the multidimensional store for intermittent power (iFKVS)
//!
//! Will own (issue 8): log-structured quadtree nodes on byte-writable NOR flash with lazy
//! split; record and node areas growing toward each other in FIFO partitions; the global undo
//! log with write marks; checkpoint commit and restore that survive power loss at any instant;
//! the WAL- and COW-based checkpointing baselines; the energy-harvesting simulator.
//!
//! Must not touch: the heap, `std`, SQL, or any device other than through the
//! `ember_device::FlashDevice` trait.

#![no_std]
#![forbid(unsafe_code)]
