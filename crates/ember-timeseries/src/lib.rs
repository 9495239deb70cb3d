//! # ember-timeseries — the time-series engine (EmbedDB)
//!
//! Will own (issue 6): fixed-size records with ascending 4- or 8-byte keys in caller-provided
//! page buffers; a circular queue of pages on raw flash or a block extent; recovery by scanning
//! page headers; the spline learned index; the bitmap data index; the variable-size data area;
//! iterators and relational operators — in a few KB of RAM, without allocation in the core.
//!
//! Must not touch: the heap, `std`, SQL, or any device other than through the
//! `ember_device` flash and block traits.

#![no_std]
#![forbid(unsafe_code)]
