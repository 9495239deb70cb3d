//! # ember-bench — every paper's evaluation, side by side with SQLite
//!
//! Owns the `ember-bench <suite>` binary. Suites so far:
//!
//! * `table`: the table engine (LUNAR) in full mode against SQLite (WAL and rollback journal,
//!   `synchronous=FULL`): synced inserts, 4 KiB synced inserts with the bytes written per
//!   application byte, random point reads (see [`table`]).
//! * `dbbench`: LevelDB's db_bench / sqlite-bench workloads, with the key-value peers fjall
//!   and redb (see [`dbbench`]).
//! * `ycsb`: LUNAR's YCSB mixes and Zipfian skews (see [`ycsb`]).
//! * `mobibench`: synchronous 4 KB-row inserts and updates and the bandwidth utilization
//!   (see [`mobibench`]).
//! * `ifkvs`: the iFKVS evaluation on the quadtree engine — RB vs WAL vs COW under the
//!   energy-harvesting simulator, in modeled time and energy (see [`ifkvs`]).
//! * `embeddb`: the EmbedDB evaluation on the time-series engine — inserts, key lookups,
//!   key and data ranges and the Table 3 queries on the sensor data sets (see [`embeddb`]).
//! * `sqlitekv`: the SQLiteKV evaluation — its four mixes and sequential/random inserts and
//!   queries over item sizes, lsm and table tables through SQL, the LSM API, SQLite and fjall
//!   (see [`sqlitekv`]).
//! * `all`: the four paper suites.
//!
//! Every paper suite runs EmberDB through SQL (`ember-sql`) and through the engine API
//! (`ember-api`) and SQLite, each at `sync` and `async` durability ([`stores`]), and writes
//! `DIR/<suite>.json`, `DIR/<suite>.md` and `DIR/<suite>-*.svg` ([`suite`], [`chart`]).
//! A suite is a small module that lists its jobs and runs one; [`measure`] has the timing,
//! percentiles, `/proc/self/io` and scratch directories they share.
//!
//! Must not touch: engine internals beyond their public APIs. Micro-benchmarks of a single
//! crate (such as `ember-device`'s wrapper overhead) live in that crate's `benches/`.

mod chart;
mod dbbench;
mod embeddb;
mod ifkvs;
mod measure;
mod mobibench;
mod report;
mod sqlitekv;
mod stores;
mod suite;
mod table;
mod ycsb;
mod zipf;

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
    /// db_bench / sqlite-bench: fillseq, fillrandom, fillseqsync, fillrandsync, fillseqbatch,
    /// fillrandbatch, overwrite, readseq, readrandom (with fjall and redb).
    Dbbench(suite::SuiteArgs),
    /// YCSB as in LUNAR: write-only, read-heavy, balanced, update-heavy × Zipfian 0, 0.5, 0.99.
    Ycsb(suite::SuiteArgs),
    /// Mobibench: synchronous 4 KB-row inserts and updates, bandwidth utilization.
    Mobibench(suite::SuiteArgs),
    /// iFKVS on the quadtree engine: RB vs WAL vs COW checkpointing under simulated
    /// intermittent power (modeled time and energy), lazy split, discard vs erase undo.
    Ifkvs(ifkvs::Args),
    /// EmbedDB on the timeseries engine against SQLite on the sensor data sets: insert,
    /// lookup, key-range, data-range, sql-q1..sql-q5 (paper 003's Table 3).
    Embeddb(embeddb::Args),
    /// SQLiteKV: update-heavy, read-most, read-heavy, read-latest, insert-seq/rand,
    /// query-seq/rand × item sizes, lsm and table through SQL, SQLite, the LSM API, fjall.
    Sqlitekv(sqlitekv::Args),
    /// dbbench, ycsb, mobibench and ifkvs.
    All(suite::SuiteArgs),
}

/// Runs the named paper suite; returns its Markdown report.
fn paper_suite(name: &str, args: &suite::SuiteArgs) -> measure::Result<String> {
    match name {
        "dbbench" => dbbench::main(args),
        "ycsb" => ycsb::main(args),
        "mobibench" => mobibench::main(args),
        other => Err(format!("no suite {other}").into()),
    }
}

/// Runs suites one after the other, printing each report on stdout.
fn paper_suites(names: &[&str], args: &suite::SuiteArgs) -> measure::Result<()> {
    for name in names {
        let md = paper_suite(name, args)?;
        println!("{md}");
    }
    eprintln!(
        "ember-bench: results in {} ({})",
        args.out.display(),
        names
            .iter()
            .map(|n| format!("{n}.json, {n}.md, {n}-*.svg"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cfg!(debug_assertions) {
        eprintln!("ember-bench: warning: a debug build; measure with --release");
    }
    let done = match &cli.suite {
        Suite::Table(args) => table::main(args),
        Suite::Dbbench(args) => paper_suites(&["dbbench"], args),
        Suite::Ycsb(args) => paper_suites(&["ycsb"], args),
        Suite::Mobibench(args) => paper_suites(&["mobibench"], args),
        Suite::Ifkvs(args) => ifkvs::main(args).map(|md| println!("{md}")),
        Suite::Embeddb(args) => embeddb::main(args).map(|md| println!("{md}")),
        Suite::Sqlitekv(args) => sqlitekv::main(args).map(|md| println!("{md}")),
        Suite::All(args) => paper_suites(&["dbbench", "ycsb", "mobibench"], args).and_then(|()| {
            let a = ifkvs::Args {
                quick: args.quick,
                out: args.out.clone(),
                records: None,
            };
            ifkvs::main(&a).map(|md| println!("{md}"))
        }),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ember-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
