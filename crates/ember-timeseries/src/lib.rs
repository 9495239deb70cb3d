//! # ember-timeseries — the time-series engine (EmbedDB)
//!
//! Owns the on-storage format and the algorithms of EmberDB's `timeseries` engine (EmbedDB,
//! paper 003 §3): fixed-size records with ascending 4- or 8-byte keys, kept in caller-provided
//! page buffers; each area a circular queue of pages on raw flash (erased ahead of its write
//! point, wear spread evenly) or on a block-device extent, overwriting the oldest data or
//! refusing when full; recovery by reading page headers, no write-ahead log; optional
//! record-level consistency; the spline learned index on the key; the bitmap data index in
//! its own pages; the variable-size data area; iterators over key and data ranges and
//! relational operators on them — all in a few KB of RAM, without allocation.
//!
//! The modules are named after what they own on the storage or in RAM:
//!
//! | module | owns |
//! |---|---|
//! | [`page`] | the page header, checksums and the data-page record layout |
//! | `ring` | a circular area of page slots: ids, erase-ahead, live range, full |
//! | [`storage`] | the two kinds of medium: flash devices and block devices |
//! | `spline` | the spline learned index in its RAM budget |
//! | [`bitmap`] | bucket functions and the bitmap index pages |
//! | [`varlen`] | the variable-size data pages and their value stream |
//! | `temp` | temporary pages (record-level consistency) |
//! | `recovery` | finding each area's write point, rebuilding RAM state |
//! | [`series`] | the engine: open, put, get, flush |
//! | [`iter`] | key- and data-range iterators |
//! | [`ops`] | selection, projection, group-by, key join, `exec` |
//!
//! A series is opened on a [`Storage`] ([`FlashStore`] around any
//! `ember_device::FlashDevice`, [`BlockStore`] around any `ember_device::BlockDevice`) with a
//! [`Config`] and one byte arena the caller owns (page buffers, then spline points):
//!
//! ```
//! use ember_device::{CostModel, FlashGeometry, SimFlash};
//! use ember_timeseries::{Area, Config, FlashStore, Query, Series, Source};
//!
//! let flash = SimFlash::in_memory(FlashGeometry::nor(64 * 1024, 4096), CostModel::FREE).unwrap();
//! // 4-byte keys, 12-byte data, 512-byte pages erased 8 at a time, 128 data pages.
//! let cfg = Config::new(4, 12, 512, 8, Area::new(0, 128));
//! let mut arena = [0u8; 2048];
//! let mut ts = Series::open(FlashStore(flash), cfg, &mut arena).unwrap();
//! for t in 0..1000u64 {
//!     let v = (t as i32 * 3).to_le_bytes();
//!     ts.put(t * 60, &[v, v, v].concat()).unwrap();
//! }
//! let mut data = [0u8; 12];
//! assert!(ts.get(600, &mut data).unwrap());
//! let mut it = ts.iter(Query::keys(6000, 6600)).unwrap();
//! let mut n = 0;
//! while it.advance().unwrap() {
//!     n += 1;
//! }
//! assert_eq!(n, 11);
//! ```
//!
//! Must not touch: the heap (the `alloc` feature only adds conveniences), `std`, SQL, or any
//! device other than through the `ember_device` flash and block traits.

#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod bitmap;
mod config;
mod error;
pub mod iter;
pub mod ops;
pub mod page;
mod recovery;
mod ring;
pub mod series;
mod spline;
pub mod storage;
mod temp;
mod value;
pub mod varlen;

pub use bitmap::{BoundaryBuckets, BucketFn, LinearBuckets};
pub use config::{Area, Config, DataOrder, OnFull};
pub use error::{AreaKind, Error, Result};
pub use iter::{Iter, Query};
pub use ops::{
    Agg, AggKind, AggState, Cmp, GroupBy, KeyJoin, Project, ProjectCols, Row, Select, SliceSource,
    Source, cmp, exec,
};
pub use page::{FORMAT_VERSION, MAX_BITMAP, VarRef};
pub use series::{Series, Stats};
pub use storage::{BlockStore, FlashStore, Geometry, Storage};
pub use value::{Col, ColType, Value, compare_first_i32, read_num};
pub use varlen::VarValue;
