//! # ember-device — the floor every EmberDB engine stands on
//!
//! This crate owns the devices EmberDB stores data on and the tools that prove the engines
//! survive losing power on them:
//!
//! * [`BlockDevice`]: byte-addressed storage with atomic sectors and a `sync` barrier —
//!   [`MemBlock`] (RAM or a caller's buffer), [`Extent`] (a window of another device), and with
//!   `std` the file and raw block devices in [`file`](mod@file).
//! * [`FlashDevice`]: flash parts with a runtime [`FlashGeometry`] and [`WriteRule`] —
//!   [`FlashOnBlock`] (flash made of a block extent), [`SimFlash`] (a NOR simulator that enforces
//!   the write rule and meters wear, modeled time and energy), and with the `embedded-storage`
//!   feature adapters both ways to real boards' drivers in its `embedded` module.
//! * [`FaultyBlock`] / [`FaultyFlash`]: fault injection — a power cut at operation N with torn
//!   writes and erases and lost unsynced writes, deterministic from a seed.
//! * [`Accounted`]: I/O accounting, overall and per named region.
//!
//! It must not know anything about the engines above it: no file formats, no checksums of
//! pages, no tables. It is `#![no_std]`; the `alloc` feature adds the heap-backed devices, the
//! simulator and fault injection, and `std` adds files.
//!
//! Unsafe code is denied except in one module: the shared mappings through which a file
//! device copies small writes and reads (`file::mapped`, see [the file
//! module](mod@file#mapped-writes)).

#![no_std]
#![deny(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod account;
mod block;
#[cfg(feature = "embedded-storage")]
pub mod embedded;
mod error;
mod extent;
#[cfg(feature = "alloc")]
mod fault;
#[cfg(feature = "std")]
pub mod file;
mod flash;
mod mem;
mod rng;
#[cfg(feature = "alloc")]
mod sim;

pub use account::{Accounted, IoStats, MAX_REGIONS, RegionId};
#[cfg(feature = "alloc")]
pub use block::DeviceWriter;
pub use block::{BlockDevice, DEFAULT_SECTOR_SIZE};
pub use error::{DeviceError, Op, Result};
pub use extent::Extent;
#[cfg(feature = "alloc")]
pub use fault::{
    CutOutcome, EraseTear, FaultPlan, FaultyBlock, FaultyFlash, PowerCut, PowerFail, TearMode,
};
pub use flash::{FlashDevice, FlashGeometry, FlashOnBlock, WriteRule};
pub use mem::{Backing, MemBlock};
pub use rng::SplitMix64;
#[cfg(feature = "alloc")]
pub use sim::{CostModel, Meter, SimFlash, UnitWear};
