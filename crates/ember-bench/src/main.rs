//! # ember-bench — every paper's evaluation, side by side with SQLite
//!
//! Owns the `ember-bench <suite>` binary. Suites so far:
//!
//! * `table`: the table engine (LUNAR) in full mode against SQLite (WAL and rollback journal,
//!   `synchronous=FULL`): synced inserts, 4 KiB synced inserts with the bytes written per
//!   application byte, random point reads (see [`table`]).
//!
//! To come (issue 5): db_bench, YCSB, Mobibench, the SQLiteKV, EmbedDB and iFKVS workloads,
//! through SQL and through the engine APIs, with SVG charts. Each suite is a module that
//! runs its workloads and hands [`report::RunResult`]s to the shared output; [`measure`] has
//! the timing, percentiles, `/proc/self/io` and scratch directories they share.
//!
//! Must not touch: engine internals beyond their public APIs. Micro-benchmarks of a single
//! crate (such as `ember-device`'s wrapper overhead) live in that crate's `benches/`.

mod measure;
mod report;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// EmberDB's benchmarks, each against SQLite in the same run. Run in release mode.
#[derive(Debug, Parser)]
#[command(name = "ember-bench", version)]
struct Cli {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(Debug, Subcommand)]
enum Suite {
    /// The table engine (full mode) against SQLite (WAL and rollback journal,
    /// synchronous=FULL): insert-sync, insert-4k-sync, read-random.
    Table(table::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cfg!(debug_assertions) {
        eprintln!("ember-bench: warning: a debug build; measure with --release");
    }
    let done = match &cli.suite {
        Suite::Table(args) => table::main(args),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ember-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
