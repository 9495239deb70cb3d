//! What the paper suites (`dbbench`, `ycsb`, `mobibench`) share: their command-line
//! arguments, the jobs they run (one workload on one system at one durability), the driver
//! that runs each job on a fresh database in one scratch directory with a progress bar, and
//! the output every suite writes: `DIR/<suite>.json`, `DIR/<suite>.md` and
//! `DIR/<suite>-*.svg`.

use std::fmt::Write as _;
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value as Json};

use crate::chart;
use crate::measure::{Latencies, ProcIo, Result, Scratch, file_system};
use crate::report::{self, RunResult};
use crate::stores::{Durability, System};

/// Arguments of `ember-bench dbbench|ycsb|mobibench|all`.
#[derive(Debug, Clone, clap::Args)]
pub struct SuiteArgs {
    /// Small sizes: every workload in seconds (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Where to write `<suite>.json`, `<suite>.md` and `<suite>-*.svg`.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// Run only these workloads (repeatable; a workload's name or its prefix before `/`).
    #[arg(long = "only", value_name = "WORKLOAD")]
    pub only: Vec<String>,
    /// Run only these systems (repeatable).
    #[arg(long = "system", value_name = "SYSTEM",
          value_parser = ["ember-sql", "ember-api", "sqlite", "fjall", "redb"])]
    pub systems: Vec<String>,
    /// Run only at these durabilities (repeatable).
    #[arg(long = "durability", value_name = "DURABILITY", value_parser = ["sync", "async"])]
    pub durabilities: Vec<String>,
    /// Scale every size by this factor (after --quick): 0.1 runs a tenth of the operations.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Parent directory of the databases (a fresh subdirectory is made there and removed).
    #[arg(long, default_value = "target/bench-tmp")]
    pub dir: PathBuf,
    /// Runs of each job, interleaved (every job once, then again); the run with the median
    /// ops/s is reported and every run's ops/s kept in the JSON.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub repeat: u64,
    /// Print one line per job on stderr (the default prints nothing but a progress bar on a
    /// terminal).
    #[arg(long, short)]
    pub verbose: bool,
}

impl SuiteArgs {
    /// A size: `full` by default, `quick` with --quick, times --scale (at least 1).
    pub fn size(&self, full: u64, quick: u64) -> u64 {
        let base = if self.quick { quick } else { full };
        ((base as f64 * self.scale).round() as u64).max(1)
    }

    /// Whether `workload` was asked for.
    pub fn wants(&self, workload: &str) -> bool {
        self.only.is_empty()
            || self
                .only
                .iter()
                .any(|o| o == workload || workload.split('/').next() == Some(o.as_str()))
    }

    /// Whether `d` was asked for.
    pub fn wants_durability(&self, d: Durability) -> bool {
        self.durabilities.is_empty() || self.durabilities.iter().any(|x| x == d.name())
    }

    /// Whether `system` was asked for.
    pub fn wants_system(&self, s: System) -> bool {
        self.systems.is_empty() || self.systems.iter().any(|x| x == s.name())
    }
}

/// One workload on one system at one durability.
#[derive(Debug, Clone)]
pub struct Job<W> {
    /// The workload's name in the results (unique within the suite with `durability`).
    pub workload: String,
    /// The system.
    pub system: System,
    /// The durability.
    pub durability: Durability,
    /// The workload's parameters (sizes, mix, skew); the system's are added.
    pub params: Map<String, Json>,
    /// What the suite needs to run it.
    pub spec: W,
}

/// What one job measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// Latencies of the timed operations (or batches).
    pub lat: Latencies,
    /// Operations counted in the throughput (rows for batches).
    pub ops: u64,
    /// Wall-clock seconds of the timed loop.
    pub seconds: f64,
    /// Bytes the application handed over in the timed loop (keys and values written).
    pub app_bytes: Option<u64>,
    /// `/proc/self/io` over the timed loop and the close.
    pub proc_io: Option<ProcIo>,
    /// The engine's own count of bytes written to its device (EmberDB's `Accounted`), same
    /// window.
    pub accounted: Option<u64>,
    /// Anything else.
    pub extra: Map<String, Json>,
}

/// Runs every job, each on a fresh database in one scratch directory under `args.dir`, with
/// a progress bar on a terminal; returns the results in job order.
pub fn run_jobs<W>(
    suite: &str,
    args: &SuiteArgs,
    jobs: &[Job<W>],
    run: impl Fn(&Job<W>, &Path) -> Result<Measured>,
) -> Result<(Vec<RunResult>, Map<String, Json>)> {
    let scratch = Scratch::new(&args.dir, &format!("ember-bench-{suite}"))?;
    let fs_name = file_system(scratch.dir()).unwrap_or_else(|| "unknown".into());
    let bar = progress(suite, jobs.len() as u64 * args.repeat);
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); jobs.len()];
    for rep in 0..args.repeat {
        for (i, job) in jobs.iter().enumerate() {
            bar.set_message(format!(
                "{} {} {}",
                job.workload,
                job.system.name(),
                job.durability.name()
            ));
            scratch.clear()?;
            settle();
            let m = run(job, scratch.dir()).map_err(|e| {
                format!(
                    "{suite}: {} on {} ({}): {e}",
                    job.workload,
                    job.system.name(),
                    job.durability.name()
                )
            })?;
            scratch.clear()?;
            let r = to_result(job, m);
            if args.verbose {
                bar.suspend(|| {
                    eprintln!(
                        "  {suite} {} {} {} (run {}/{}): {:.0} ops/s, p50 {:.1} µs, p99 {:.1} µs",
                        r.workload,
                        r.system,
                        job.durability.name(),
                        rep + 1,
                        args.repeat,
                        r.ops_per_sec(),
                        r.p50_us,
                        r.p99_us
                    )
                });
            }
            runs[i].push(r);
            bar.inc(1);
        }
    }
    let results: Vec<RunResult> = runs.into_iter().filter_map(report::median_run).collect();
    bar.finish_and_clear();
    let mut extra = Map::new();
    extra.insert("file_system".into(), fs_name.into());
    extra.insert("quick".into(), args.quick.into());
    extra.insert("scale".into(), args.scale.into());
    extra.insert("repeat".into(), args.repeat.into());
    extra.insert("sqlite_version".into(), rusqlite::version().into());
    extra.insert(
        "build".into(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into(),
    );
    Ok((results, extra))
}

/// Writes every dirty page of the machine back before a job (`sync(1)`), so a job does not
/// pay for the writeback of the one before it. Errors are ignored (no `sync` command: the
/// job just starts with whatever is dirty).
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// A bar on stderr when it is a terminal, hidden otherwise.
fn progress(suite: &str, len: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{suite} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {{msg}}"
    )) {
        bar.set_style(style);
    }
    bar
}

fn to_result<W>(job: &Job<W>, m: Measured) -> RunResult {
    let q = m.lat.percentiles_us(&[0.5, 0.99, 0.999, 1.0]);
    let mut params = job.params.clone();
    params.extend(job.system.params(job.durability));
    params.insert("durability".into(), job.durability.name().into());
    let mut extra = m.extra;
    if let Some(a) = m.accounted {
        extra.insert("accounted_write_bytes".into(), a.into());
    }
    RunResult {
        workload: job.workload.clone(),
        system: job.system.name().into(),
        engine: job.system.engine().into(),
        params,
        ops: m.ops,
        seconds: m.seconds,
        p50_us: q[0],
        p99_us: q[1],
        p999_us: q[2],
        max_us: q[3],
        app_bytes: m.app_bytes,
        device_bytes: m.proc_io.map(|p| p.write_bytes),
        device_bytes_source: m.proc_io.map(|_| "/proc/self/io write_bytes"),
        proc_io: m.proc_io,
        extra,
        repeats: Vec::new(),
    }
}

/// The durability of a result.
pub fn durability_of(r: &RunResult) -> &str {
    r.params
        .get("durability")
        .and_then(Json::as_str)
        .unwrap_or("?")
}

/// (workload, durability) pairs in the order they first appear.
pub fn groups(results: &[RunResult]) -> Vec<(String, String)> {
    let mut g: Vec<(String, String)> = Vec::new();
    for r in results {
        let k = (r.workload.clone(), durability_of(r).to_string());
        if !g.contains(&k) {
            g.push(k);
        }
    }
    g
}

/// Systems in the order they first appear.
pub fn systems_of(results: &[RunResult]) -> Vec<String> {
    let mut s: Vec<String> = Vec::new();
    for r in results {
        if !s.contains(&r.system) {
            s.push(r.system.clone());
        }
    }
    s
}

fn find<'a>(results: &'a [RunResult], w: &str, d: &str, s: &str) -> Option<&'a RunResult> {
    results
        .iter()
        .find(|r| r.workload == w && durability_of(r) == d && r.system == s)
}

/// The ratio of two throughputs, `–` if either is missing.
fn ratio(a: Option<&RunResult>, b: Option<&RunResult>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.ops_per_sec() > 0.0 => {
            format!("**{:.2}×**", a.ops_per_sec() / b.ops_per_sec())
        }
        _ => "–".into(),
    }
}

/// SQLite's median latency ÷ ours (above 1: ours is faster), `–` if either is missing.
fn p50_ratio(a: Option<&RunResult>, b: Option<&RunResult>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a.p50_us > 0.0 => format!("{:.2}×", b.p50_us / a.p50_us),
        _ => "–".into(),
    }
}

/// The Markdown report: per (workload, durability) the ops/s of every system and the ratios
/// EmberDB/SQLite; then every row with its latencies and bytes.
pub fn markdown(suite: &str, title: &str, results: &[RunResult], notes: &str) -> String {
    let systems = systems_of(results);
    let mut s = format!("## ember-bench {suite}: {title}\n\n");
    let _ = writeln!(
        s,
        "{}. Ratios are EmberDB ops/s ÷ SQLite ops/s at the same \
         durability (above 1: EmberDB is faster); the (p50) ratios are SQLite's median \
         latency ÷ EmberDB's, which a few slow outliers on a noisy machine do not move.\n",
        report::machine_line()
    );
    s.push_str("| workload | durability |");
    for sys in &systems {
        let _ = write!(s, " {sys} ops/s |");
    }
    s.push_str(
        " ember-sql / sqlite | ember-api / sqlite | ember-sql / sqlite (p50) \
         | ember-api / sqlite (p50) |\n|---|---|",
    );
    for _ in &systems {
        s.push_str("---:|");
    }
    s.push_str("---:|---:|---:|---:|\n");
    for (w, d) in groups(results) {
        let _ = write!(s, "| {w} | {d} |");
        for sys in &systems {
            let cell =
                find(results, &w, &d, sys).map_or("–".into(), |r| report::num(r.ops_per_sec()));
            let _ = write!(s, " {cell} |");
        }
        let sq = find(results, &w, &d, "sqlite");
        let (es, ea) = (
            find(results, &w, &d, "ember-sql"),
            find(results, &w, &d, "ember-api"),
        );
        let _ = writeln!(
            s,
            " {} | {} | {} | {} |",
            ratio(es, sq),
            ratio(ea, sq),
            p50_ratio(es, sq),
            p50_ratio(ea, sq)
        );
    }
    s.push_str(
        "\nEvery row:\n\n| workload | durability | system | ops | seconds | ops/s | p50 µs \
         | p99 µs | app bytes | device bytes | app / device |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let util = match (r.app_bytes, r.device_bytes) {
            (Some(a), Some(d)) if d > 0 => format!("{:.1}%", 100.0 * a as f64 / d as f64),
            _ => "–".into(),
        };
        let opt = |x: Option<u64>| x.map_or("–".into(), |x| x.to_string());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {util} |",
            r.workload,
            durability_of(r),
            r.system,
            r.ops,
            r.seconds,
            report::num(r.ops_per_sec()),
            report::num(r.p50_us),
            report::num(r.p99_us),
            opt(r.app_bytes),
            opt(r.device_bytes),
        );
    }
    s.push_str(notes);
    s
}

/// Writes `DIR/<suite>.json`, `DIR/<suite>.md` and two charts per durability: ops/s
/// (`DIR/<suite>-<durability>.svg`) and ops/s relative to SQLite
/// (`DIR/<suite>-<durability>-vs-sqlite.svg`); returns the Markdown and the chart paths.
pub fn write_outputs(
    suite: &str,
    title: &str,
    out: &Path,
    extra: Map<String, Json>,
    results: &[RunResult],
    notes: &str,
) -> Result<(String, Vec<PathBuf>)> {
    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    report::write_json(&out.join(format!("{suite}.json")), suite, extra, results)?;
    let md = markdown(suite, title, results, notes);
    fs::write(out.join(format!("{suite}.md")), &md)?;
    let mut charts = Vec::new();
    for d in ["sync", "async"] {
        let part: Vec<RunResult> = results
            .iter()
            .filter(|r| durability_of(r) == d)
            .cloned()
            .collect();
        if part.is_empty() {
            continue;
        }
        let path = out.join(format!("{suite}-{d}.svg"));
        chart::grouped_bars(
            &path,
            &format!("{suite} ({d}): throughput"),
            "ops/s",
            &bars(&part, RunResult::ops_per_sec),
        )?;
        charts.push(path);
        // The same relative to SQLite (its bars are 1): readable when absolute figures span
        // orders of magnitude (reads against synced writes, scans against point reads).
        let path = out.join(format!("{suite}-{d}-vs-sqlite.svg"));
        let sqlite = |r: &RunResult| {
            find(&part, &r.workload, d, "sqlite").map_or(0.0, RunResult::ops_per_sec)
        };
        chart::grouped_bars(
            &path,
            &format!("{suite} ({d}): throughput relative to SQLite"),
            "ops/s ÷ SQLite ops/s",
            &bars(&part, |r| {
                let base = sqlite(r);
                if base > 0.0 {
                    r.ops_per_sec() / base
                } else {
                    0.0
                }
            }),
        )?;
        charts.push(path);
    }
    Ok((md, charts))
}

/// Groups of bars (one group per workload, one bar per system) of `value`.
pub fn bars(results: &[RunResult], value: impl Fn(&RunResult) -> f64) -> chart::Groups {
    let systems = systems_of(results);
    let all = groups(results);
    let mixed = all.iter().any(|(_, d)| *d != all[0].1);
    let mut groups = Vec::new();
    for (w, d) in all {
        let vals = systems
            .iter()
            .map(|s| find(results, &w, &d, s).map(&value))
            .collect();
        let label = if mixed { format!("{w}/{d}") } else { w };
        groups.push((label, vals));
    }
    chart::Groups {
        series: systems,
        groups,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_filters() {
        let mut a = SuiteArgs {
            quick: false,
            out: "o".into(),
            only: vec!["fillseq".into(), "read-heavy".into()],
            systems: vec![],
            durabilities: vec![],
            scale: 0.5,
            repeat: 1,
            dir: "d".into(),
            verbose: false,
        };
        assert_eq!(a.size(1000, 10), 500);
        a.quick = true;
        assert_eq!(a.size(1000, 10), 5);
        a.scale = 0.0;
        assert_eq!(a.size(1000, 10), 1);
        assert!(a.wants("fillseq"));
        assert!(!a.wants("fillseqsync"));
        assert!(a.wants("read-heavy/zipf-0.99"));
        assert!(!a.wants("balanced/zipf-0"));
        assert!(a.wants_system(System::Redb));
        a.systems = vec!["sqlite".into()];
        assert!(a.wants_system(System::Sqlite) && !a.wants_system(System::EmberSql));
        assert!(a.wants_durability(Durability::Sync) && a.wants_durability(Durability::Async));
        a.durabilities = vec!["async".into()];
        assert!(a.wants_durability(Durability::Async) && !a.wants_durability(Durability::Sync));
    }
}

/// End-to-end runs of every paper suite at a tiny size in a temporary directory: the files
/// exist and the JSON has the fields the issue names, one row per (workload, system,
/// durability). Times nothing.
#[cfg(test)]
mod e2e {
    use std::collections::BTreeSet;

    use super::*;

    fn tiny(tmp: &Path) -> SuiteArgs {
        SuiteArgs {
            quick: true,
            out: tmp.join("out"),
            only: vec![],
            systems: vec![],
            durabilities: vec![],
            scale: 0.02,
            repeat: 1,
            dir: tmp.join("scratch"),
            verbose: false,
        }
    }

    fn check(out: &Path, suite: &str, rows: usize) -> Result<Json> {
        let doc: Json =
            serde_json::from_str(&fs::read_to_string(out.join(format!("{suite}.json")))?)?;
        assert_eq!(doc["suite"], suite);
        assert!(doc["machine"]["cores"].as_u64().is_some_and(|c| c > 0));
        assert!(doc["machine"]["os"].is_string());
        let results = doc["results"].as_array().ok_or("no results")?;
        assert_eq!(results.len(), rows, "{suite}");
        let mut seen = BTreeSet::new();
        for r in results {
            crate::report::assert_result_fields(r);
            let d = r["params"]["durability"].as_str().ok_or("durability")?;
            assert!(d == "sync" || d == "async");
            let sys = r["system"].as_str().ok_or("system")?;
            assert!(["ember-sql", "ember-api", "sqlite", "fjall", "redb"].contains(&sys));
            assert!(
                seen.insert(format!("{} {sys} {d}", r["workload"])),
                "duplicate {r}"
            );
        }
        let md = fs::read_to_string(out.join(format!("{suite}.md")))?;
        assert!(md.contains("ember-sql / sqlite"), "{md}");
        assert!(out.join(format!("{suite}-async.svg")).exists());
        assert!(out.join(format!("{suite}-async-vs-sqlite.svg")).exists());
        Ok(doc)
    }

    #[test]
    fn every_suite_writes_its_files() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let args = tiny(tmp.path());
        crate::dbbench::main(&args)?;
        check(&args.out, "dbbench", 9 * 5)?;
        assert!(args.out.join("dbbench-sync.svg").exists());

        let mut y = args.clone();
        y.only = vec!["balanced".into(), "write-only/zipf-0.99".into()];
        crate::ycsb::main(&y)?;
        check(&args.out, "ycsb", 4 * 2 * 3)?;

        crate::mobibench::main(&args)?;
        let doc = check(&args.out, "mobibench", 2 * 2 * 3)?;
        assert!(args.out.join("mobibench-utilization.svg").exists());
        for r in doc["results"].as_array().ok_or("results")? {
            assert!(r["app_bytes"].as_u64().is_some_and(|x| x > 0), "{r}");
            assert!(r["device_bytes"].as_u64().is_some_and(|x| x > 0), "{r}");
        }
        // Every scratch database is gone.
        assert_eq!(fs::read_dir(tmp.path().join("scratch"))?.count(), 0);
        Ok(())
    }
}
