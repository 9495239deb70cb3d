//! # ember-bench — every paper's evaluation, side by side with SQLite
//!
//! Will own (issue 5): the `ember-bench <suite>` binary — db_bench, YCSB, Mobibench, the
//! SQLiteKV, EmbedDB and iFKVS workloads — run in release mode against EmberDB (through SQL and
//! through the engine APIs) and the real SQLite in the same run, writing JSON, a Markdown
//! table of ratios and SVG charts.
//!
//! Must not touch: engine internals beyond their public APIs. Micro-benchmarks of a single
//! crate (such as `ember-device`'s wrapper overhead) live in that crate's `benches/`.

fn main() -> std::process::ExitCode {
    eprintln!(
        "ember-bench: no suites yet; they arrive with the benchmark harness. \
         The device wrappers' overhead: cargo bench -p ember-device --bench wrappers"
    );
    std::process::ExitCode::from(2)
}
