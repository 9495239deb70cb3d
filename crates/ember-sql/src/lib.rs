//! # ember-sql — the SQL front end
//!
//! Will own (issue 4): the lexer and parser of the SQLite dialect, the typed AST, the planner
//! and executor, the engine interface the four engines plug into, and (issue 7) the SQL-to-KV
//! compiler and the coordination cache.
//!
//! Must not touch: device I/O or on-device formats (those belong to the engines), and the
//! user-facing API (that is `ember`).
