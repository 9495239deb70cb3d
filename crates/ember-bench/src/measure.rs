//! Measuring: per-operation latencies and their percentiles, the kernel's per-process I/O
//! counters (`/proc/self/io`), and a scratch directory for the databases under test.
//!
//! Every suite uses these, so a suite module only says what to run.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors of the harness: any error of an engine, SQLite, the file system or the output.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// A result with the harness's error.
pub type Result<T> = std::result::Result<T, Error>;

/// Latencies of individual operations, in nanoseconds.
#[derive(Debug, Default)]
pub struct Latencies {
    ns: Vec<u64>,
}

impl Latencies {
    /// Room for `n` operations, so recording never reallocates inside a measured loop.
    pub fn with_capacity(n: usize) -> Self {
        Latencies {
            ns: Vec::with_capacity(n),
        }
    }

    /// Runs `op`, records how long it took and passes its result on.
    pub fn time<T>(&mut self, op: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = op();
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.ns.push(ns);
        out
    }

    /// Records a latency measured elsewhere (an amortized per-operation time of a batch).
    pub fn record_ns(&mut self, ns: u64) {
        self.ns.push(ns);
    }

    /// The median latency of the first and of the last tenth of the operations, in
    /// microseconds (to see drift as a database grows).
    pub fn drift_us(&self) -> (f64, f64) {
        let tenth = (self.ns.len() / 10).max(1).min(self.ns.len());
        let median = |part: &[u64]| {
            let mut v = part.to_vec();
            v.sort_unstable();
            percentile(&v, 0.5) as f64 / 1000.0
        };
        (
            median(&self.ns[..tenth]),
            median(&self.ns[self.ns.len() - tenth..]),
        )
    }

    /// Operations recorded.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// The `q`-quantile (0 < q ≤ 1, nearest rank) of each of `qs`, in microseconds; zeros if
    /// nothing was recorded.
    pub fn percentiles_us(&self, qs: &[f64]) -> Vec<f64> {
        let mut sorted = self.ns.clone();
        sorted.sort_unstable();
        qs.iter()
            .map(|&q| percentile(&sorted, q) as f64 / 1000.0)
            .collect()
    }
}

/// Nearest-rank percentile of sorted values (0 for none).
fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The kernel's I/O counters for this whole process (all threads), from `/proc/self/io`.
///
/// * `wchar` / `rchar`: bytes passed to `write`/`pwrite` (`read`/`pread`) system calls —
///   what the process handed the kernel, whatever the page cache then did with it.
/// * `write_bytes`: bytes this process caused to be sent to the storage layer — counted when
///   a page-cache page is dirtied, so whole pages (4 KiB): a 512-byte write into a clean page
///   counts 4096, a second write to a page still dirty counts nothing.
/// * `cancelled_write_bytes`: dirty bytes that never went out (their file was truncated or
///   deleted first).
///
/// Neither counts what the file system writes for itself (the ext4 journal, inode updates),
/// which its own threads do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes read by system calls.
    pub rchar: u64,
    /// Bytes written by system calls.
    pub wchar: u64,
    /// Read system calls.
    pub syscr: u64,
    /// Write system calls.
    pub syscw: u64,
    /// Bytes fetched from the storage layer.
    pub read_bytes: u64,
    /// Bytes sent (page-granular) to the storage layer.
    pub write_bytes: u64,
    /// Dirty bytes dropped before they were written.
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// The counters now; `None` where the kernel does not provide them.
    pub fn read() -> Option<ProcIo> {
        let text = fs::read_to_string("/proc/self/io").ok()?;
        let mut io = ProcIo::default();
        for line in text.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<u64>() else {
                continue;
            };
            match name.trim() {
                "rchar" => io.rchar = value,
                "wchar" => io.wchar = value,
                "syscr" => io.syscr = value,
                "syscw" => io.syscw = value,
                "read_bytes" => io.read_bytes = value,
                "write_bytes" => io.write_bytes = value,
                "cancelled_write_bytes" => io.cancelled_write_bytes = value,
                _ => {}
            }
        }
        Some(io)
    }

    /// The counts since `earlier`.
    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(earlier.cancelled_write_bytes),
        }
    }

    /// The counts since `start` was taken (`None` if either reading is missing).
    pub fn delta(start: Option<ProcIo>) -> Option<ProcIo> {
        Some(ProcIo::read()?.since(&start?))
    }
}

/// A fresh directory for one suite's databases, inside a parent the user chose; removed with
/// everything in it when dropped. Only files the suite created there are ever removed.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// Creates `parent/<name>-<pid>` (and `parent` if missing); an existing directory of that
    /// name (left by a crashed run of the same pid) is emptied first.
    pub fn new(parent: &Path, name: &str) -> Result<Scratch> {
        let dir = parent.join(format!("{name}-{}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
        }
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let dir = fs::canonicalize(&dir)?;
        Ok(Scratch { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A path inside the directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Removes every file in the directory (between workloads).
    pub fn clear(&self) -> Result<()> {
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.is_dir() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
        }
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The type of the file system holding `path` (the longest mount point in `/proc/mounts`
/// that is a prefix of its canonical path), with its device; `None` where unknown.
pub fn file_system(path: &Path) -> Option<String> {
    let path = fs::canonicalize(path).ok()?;
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, at, ty) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(at)
                .then(|| (at.len(), format!("{ty} on {dev}")))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7], 0.5), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
