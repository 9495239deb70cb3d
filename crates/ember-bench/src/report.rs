//! Results and their output: one [`RunResult`] per (workload, system), the median of repeated
//! runs, the Markdown tables and the JSON file every suite writes.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::measure::{ProcIo, Result};

/// What one workload on one system measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The workload's name (`insert-sync`, …).
    pub workload: String,
    /// The configuration under test, unique within a suite (`sqlite-wal`, …).
    pub system: String,
    /// The code under test (`emberdb-table`, `sqlite`).
    pub engine: String,
    /// How the system was set up (durability, sizes, modes).
    pub params: Map<String, Value>,
    /// Operations timed.
    pub ops: u64,
    /// Wall-clock seconds of the timed loop.
    pub seconds: f64,
    /// Median latency of one operation, µs.
    pub p50_us: f64,
    /// 99th-percentile latency of one operation, µs.
    pub p99_us: f64,
    /// 99.9th-percentile latency, µs.
    pub p999_us: f64,
    /// The slowest operation, µs.
    pub max_us: f64,
    /// Bytes the application handed over (keys and values), for write workloads.
    pub app_bytes: Option<u64>,
    /// Device bytes written (see `device_bytes_source` for what counted them).
    pub device_bytes: Option<u64>,
    /// What `device_bytes` counts.
    pub device_bytes_source: Option<&'static str>,
    /// `/proc/self/io` over the same window as `device_bytes`.
    pub proc_io: Option<ProcIo>,
    /// Anything else worth keeping (load time, syncs, cache hits).
    pub extra: Map<String, Value>,
    /// Operations per second of every repeat (this result is their median run).
    pub repeats: Vec<f64>,
}

impl RunResult {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// `bytes` per application byte, where both are known.
    fn per_app_byte(&self, bytes: Option<u64>) -> Option<f64> {
        match (bytes, self.app_bytes) {
            (Some(b), Some(a)) if a > 0 => Some(b as f64 / a as f64),
            _ => None,
        }
    }

    /// Device bytes written per application byte.
    pub fn device_per_app(&self) -> Option<f64> {
        self.per_app_byte(self.device_bytes)
    }

    /// `/proc/self/io` `write_bytes` per application byte.
    pub fn proc_write_per_app(&self) -> Option<f64> {
        self.per_app_byte(self.proc_io.map(|p| p.write_bytes))
    }

    /// `/proc/self/io` `wchar` per application byte.
    pub fn proc_wchar_per_app(&self) -> Option<f64> {
        self.per_app_byte(self.proc_io.map(|p| p.wchar))
    }

    /// The JSON object of this result.
    pub fn to_json(&self) -> Value {
        let proc_io = self.proc_io.map(|p| {
            json!({
                "rchar": p.rchar, "wchar": p.wchar, "syscr": p.syscr, "syscw": p.syscw,
                "read_bytes": p.read_bytes, "write_bytes": p.write_bytes,
                "cancelled_write_bytes": p.cancelled_write_bytes,
            })
        });
        json!({
            "workload": self.workload,
            "system": self.system,
            "engine": self.engine,
            "params": self.params,
            "ops": self.ops,
            "seconds": self.seconds,
            "ops_per_sec": self.ops_per_sec(),
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "p999_us": self.p999_us,
            "max_us": self.max_us,
            "app_bytes": self.app_bytes,
            "device_bytes": self.device_bytes,
            "device_bytes_source": self.device_bytes_source,
            "proc_io": proc_io,
            "extra": self.extra,
            "repeats_ops_per_sec": self.repeats,
        })
    }
}

/// The run with the median ops/s (the lower middle one for an even count), carrying every
/// run's ops/s in `repeats`; `None` for no runs.
pub fn median_run(mut runs: Vec<RunResult>) -> Option<RunResult> {
    let all: Vec<f64> = runs.iter().map(RunResult::ops_per_sec).collect();
    runs.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
    let mid = runs.len().checked_sub(1)? / 2;
    let mut m = runs.swap_remove(mid);
    m.repeats = all;
    Some(m)
}

/// The machine the suite ran on: cores, OS, kernel, CPU model.
pub fn machine() -> Value {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .ok();
    let cpu = fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
    });
    json!({ "cores": cores, "os": std::env::consts::OS, "arch": std::env::consts::ARCH,
            "kernel": kernel, "cpu": cpu })
}

/// Writes `{"suite", "machine", "results", …extra}` to `path` (creating its directory).
pub fn write_json(
    path: &Path,
    suite: &str,
    extra: Map<String, Value>,
    results: &[RunResult],
) -> Result<()> {
    let mut doc = Map::new();
    doc.insert("suite".into(), suite.into());
    doc.insert("machine".into(), machine());
    doc.extend(extra);
    doc.insert(
        "results".into(),
        results.iter().map(RunResult::to_json).collect(),
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(&Value::Object(doc))?;
    fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// The machine and the SQLite it ran against, as the Markdown reports open:
/// "2 cores, linux; SQLite 3.53.2".
pub fn machine_line() -> String {
    format!(
        "{} cores, {}; SQLite {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::env::consts::OS,
        rusqlite::version()
    )
}

/// A figure for a Markdown table: no decimals from 100, one from 10, two below.
pub fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), num)
}

/// The results as a Markdown table: ops, ops/s, p50 and p99 in µs, and bytes written per
/// application byte by each counter.
pub fn results_table(results: &[RunResult]) -> String {
    let mut s = String::new();
    s.push_str(
        "| workload | system | ops | ops/s | p50 µs | p99 µs | device B / app B \
         | proc write_bytes / app B | proc wchar / app B |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.system,
            r.ops,
            num(r.ops_per_sec()),
            num(r.p50_us),
            num(r.p99_us),
            opt(r.device_per_app()),
            opt(r.proc_write_per_app()),
            opt(r.proc_wchar_per_app()),
        );
    }
    s
}

/// Ratios of each `ours` system to each `theirs` system, per workload where both ran:
/// ops/s (above 1: ours is faster), p99 latency (below 1: ours is faster) and proc
/// `write_bytes` per application byte (below 1: ours writes less; the same counter for both).
pub fn ratio_table(results: &[RunResult], ours: &[&str], theirs: &[&str]) -> String {
    let mut s = String::new();
    s.push_str(
        "| workload | ratio | ops/s | p99 latency | proc write_bytes per app B |\n\
         |---|---|---:|---:|---:|\n",
    );
    let find = |w: &str, sys: &str| results.iter().find(|r| r.workload == w && r.system == sys);
    let mut workloads: Vec<&str> = Vec::new();
    for r in results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    for w in workloads {
        for o in ours {
            for t in theirs {
                let (Some(a), Some(b)) = (find(w, o), find(w, t)) else {
                    continue;
                };
                let ratio = |x: f64, y: f64| (y > 0.0).then(|| x / y);
                let bytes = match (a.proc_write_per_app(), b.proc_write_per_app()) {
                    (Some(x), Some(y)) => ratio(x, y),
                    _ => None,
                };
                let _ = writeln!(
                    s,
                    "| {w} | {o} / {t} | {} | {} | {} |",
                    opt(ratio(a.ops_per_sec(), b.ops_per_sec())),
                    opt(ratio(a.p99_us, b.p99_us)),
                    opt(bytes),
                );
            }
        }
    }
    s
}

/// Test support: a result row has every field of the harness's JSON format, and at least one
/// operation.
#[cfg(test)]
pub fn assert_result_fields(r: &Value) {
    for f in ["workload", "system", "engine"] {
        assert!(r[f].is_string(), "{f} in {r}");
    }
    for f in ["ops", "seconds", "ops_per_sec", "p50_us", "p99_us"] {
        assert!(r[f].is_number(), "{f} in {r}");
    }
    for f in ["app_bytes", "device_bytes"] {
        assert!(r.get(f).is_some(), "{f} in {r}");
    }
    assert!(r["ops"].as_u64().is_some_and(|x| x > 0), "{r}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: &str, ops: u64, seconds: f64) -> RunResult {
        RunResult {
            workload: "w".into(),
            system: system.into(),
            engine: "e".into(),
            params: Map::new(),
            ops,
            seconds,
            p50_us: 1.0,
            p99_us: 2.0,
            p999_us: 3.0,
            max_us: 4.0,
            app_bytes: Some(100),
            device_bytes: Some(250),
            device_bytes_source: None,
            proc_io: None,
            extra: Map::new(),
            repeats: Vec::new(),
        }
    }

    #[test]
    fn median_and_tables() {
        let m = median_run(vec![
            run("a", 10, 1.0),
            run("a", 30, 1.0),
            run("a", 20, 1.0),
        ]);
        let m = m.map(|m| (m.ops, m.repeats));
        assert_eq!(m, Some((20, vec![10.0, 30.0, 20.0])));
        assert!(median_run(Vec::new()).is_none());

        let rs = [run("x", 200, 1.0), run("y", 100, 1.0)];
        let t = results_table(&rs);
        assert!(
            t.contains("| w | x | 200 | 200 | 1.00 | 2.00 | 2.50 | – | – |"),
            "{t}"
        );
        let r = ratio_table(&rs, &["x"], &["y"]);
        assert!(r.contains("| w | x / y | 2.00 | 1.00 | – |"), "{r}");
    }
}
