//! # ember-quadtree — the multidimensional store for intermittent power (iFKVS)
//!
//! Owns (issue 8): log-structured quadtree nodes on byte-writable NOR flash with lazy split;
//! record and node areas growing toward each other in FIFO partitions; the global undo log
//! with write marks; checkpoint commit and restore that survive power loss at any instant;
//! the WAL- and COW-based checkpointing baselines; the energy-harvesting simulator and the
//! benchmark driver (feature `std`).
//!
//! Must not touch: the heap or `std` in the engine (modules `store`, `log`, `cow`, `format`,
//! `config`), SQL, or any device other than through the `ember_device::FlashDevice` trait.
//!
//! ```
//! use ember_device::{CostModel, FlashGeometry, SimFlash};
//! use ember_quadtree::{Config, Query, Record, Store};
//!
//! let cfg = Config::<2>::new([1001, 1201]);
//! let flash = SimFlash::in_memory(FlashGeometry::nor(cfg.flash_bytes(512), 512), CostModel::MSP430_NOR)?;
//! let mut db = Store::format(flash, cfg, b"program context")?;
//! db.put(&Record { ts: 1, dims: [455, 703] })?;
//! db.commit(b"after one record")?;
//! let mut out = [Record::default(); 8];
//! let n = db.scan(&Query { lo: [400, 700], hi: [500, 800], t_lo: 0, t_hi: 10 }, &mut out)?;
//! assert_eq!(n, 1);
//! // After a power cut: reopen, which restores the last commit and returns its context.
//! let mut ctx = [0u8; 200];
//! let (mut db, len) = Store::open(db.into_device(), cfg, &mut ctx)?;
//! assert_eq!(&ctx[..len], b"after one record");
//! assert_eq!(db.get(&[455, 703])?, Some(Record { ts: 1, dims: [455, 703] }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "std")]
extern crate std;

mod config;
mod cow;
mod error;
mod format;
mod log;
mod store;

#[cfg(feature = "std")]
pub mod bench;
#[cfg(feature = "std")]
pub mod energy;

pub use config::{Checkpointing, Config, MAX_DEPTH, MAX_NODE, MAX_PARTITIONS, Undo};
pub use error::{Error, Result, Structure};
pub use format::{Record, record_size};
pub use store::{Query, Stats, Store};
