//! # ember-sql — the SQL front end
//!
//! Owns the lexer and parser of the SQLite dialect ([`lexer`], [`parser`], the typed AST in
//! [`ast`]), SQL values with SQLite's semantics ([`value`]), and the planner and executor
//! ([`exec`]) that run statements over the storage interface every engine implements
//! ([`storage`]). Works with `alloc` alone (no `std`), so it can run wherever the engines do.
//!
//! Must not touch: device I/O or on-device formats (those belong to the engines), and the
//! user-facing API (that is `ember`).

#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

mod aggregate;
pub mod ast;
pub mod catalog;
pub mod error;
pub mod eval;
pub mod exec;
pub mod lexer;
pub mod parser;
pub mod storage;
pub mod value;

pub use error::{Result, SqlError};
pub use exec::{Executor, Output, Started, Stream};
pub use parser::{Parsed, is_blank, parse, parse_expr, split_statements};
pub use storage::{ColumnSpec, MASTER, Row, Storage};
pub use value::{Affinity, Value};
