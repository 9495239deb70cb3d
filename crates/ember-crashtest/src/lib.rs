//! # ember-crashtest — crash safety, tested rather than argued
//!
//! The harness every engine's crash tests use. Given a fresh device, a workload and a checker,
//! [`CrashTest::run`]:
//!
//! 1. runs the workload once on a fault-injecting device to count its device operations
//!    (writes, syncs, erases, resizes);
//! 2. for every cut point `n` in `0..=ops` (or a seeded sample when there are more than
//!    [`CrashTest::max_points`]) re-runs it on a fresh device whose power fails during
//!    operation `n` (`n == ops`: after the last one), with the torn writes and lost unsynced
//!    writes of [`ember_device::FaultPlan`];
//! 3. drops everything the workload held in RAM, keeping only what it wrote down as
//!    acknowledged, and hands the surviving device bytes to the checker, which reopens the
//!    structure from them and checks the promises it makes.
//!
//! A failure names the cut point and the seed and prints the one command that replays exactly
//! that run (`EMBER_CRASH_POINT` / `EMBER_CRASH_SEED`).
//!
//! This crate is test support: it owns no on-device format and must not be a dependency of
//! any engine outside `[dev-dependencies]`.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

pub use ember_device::PowerFail;
use ember_device::{BlockDevice, DeviceWriter, FaultPlan, FaultyBlock, PowerCut, SplitMix64};

/// A crash test: how many cut points, which seed, which fault model.
#[derive(Debug, Clone)]
pub struct CrashTest {
    name: String,
    seed: u64,
    max_points: usize,
    seeds_per_point: u32,
    shape: fn(FaultPlan) -> FaultPlan,
}

/// What a passing crash test covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The test's name.
    pub name: String,
    /// Device operations of the workload without a cut.
    pub ops: u64,
    /// Cut points tried (including the one after the last operation).
    pub points: usize,
    /// Runs made (points × seeds per point).
    pub runs: usize,
    /// Whether the points were a sample of all of them.
    pub sampled: bool,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash test '{}': {} runs over {} cut points of {} operations{}: all passed",
            self.name,
            self.runs,
            self.points,
            self.ops,
            if self.sampled { " (sampled)" } else { "" }
        )
    }
}

/// The first run that broke a promise, with everything needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The test's name.
    pub name: String,
    /// The cut point (index of the interrupted operation; `ops` = after the last).
    pub point: u64,
    /// Device operations of the workload without a cut.
    pub ops: u64,
    /// The seed of the failing run.
    pub seed: u64,
    /// What the cut did, if the run got that far.
    pub cut: Option<PowerCut>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash test '{}' failed at cut point {} of {} operations (seed {:#x}): {}",
            self.name, self.point, self.ops, self.seed, self.message
        )?;
        if let Some(cut) = &self.cut {
            write!(f, "\n  the cut: {:?} during {:?}", cut.outcome, cut.op)?;
        }
        let pkg = std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "<crate>".into());
        write!(
            f,
            "\n  replay: EMBER_CRASH_POINT={} EMBER_CRASH_SEED={:#x} cargo test -p {} -- --exact {}",
            self.point, self.seed, pkg, self.name
        )
    }
}

impl std::error::Error for Failure {}

/// Runs `f`, turning a panic into its message (a panic in an engine under test is a finding
/// like any other, and must come with its cut point and seed).
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// Hands what survived a cut to the checker: why it broke a promise, if it did (a panic in
/// the reopen or the check is a failure like any other).
fn checked<M, S>(
    check: &impl Fn(M, &S, &PowerCut) -> Result<(), String>,
    medium: M,
    state: &S,
    cut: &PowerCut,
) -> Result<(), String> {
    match guarded(|| check(medium, state, cut)) {
        Ok(r) => r,
        Err(panic) => Err(format!(
            "the checker panicked (the reopen or the check): {panic}"
        )),
    }
}

/// Reads a number in decimal or `0x` hex.
fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Spreads a base seed over cut points and repetitions.
fn point_seed(base: u64, point: u64, k: u32) -> u64 {
    let mut r = SplitMix64::new(base ^ point.rotate_left(17) ^ u64::from(k).rotate_left(41));
    r.next_u64()
}

impl CrashTest {
    /// A crash test named after the running test (libtest names the thread after it), with
    /// the default base seed (`EMBER_CRASH_BASE_SEED` overrides it, to sample other points and
    /// outcomes), at most 2,000 cut points and one seed per point.
    pub fn new() -> Self {
        let name = std::thread::current()
            .name()
            .unwrap_or("crash test")
            .to_string();
        let seed = std::env::var("EMBER_CRASH_BASE_SEED")
            .ok()
            .and_then(|v| parse_u64(&v))
            .unwrap_or(0x00E3_BE4D_B000_0001);
        CrashTest {
            name,
            seed,
            max_points: 2000,
            seeds_per_point: 1,
            shape: |p| p,
        }
    }

    /// Sets the base seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the most cut points to try; above it a seeded sample is taken (always including
    /// the first and the last point).
    pub fn max_points(mut self, n: usize) -> Self {
        self.max_points = n.max(2);
        self
    }

    /// Tries each cut point with this many different seeds (different torn outcomes).
    pub fn seeds_per_point(mut self, n: u32) -> Self {
        self.seeds_per_point = n.max(1);
        self
    }

    /// Adjusts every fault plan, e.g. `|p| p.write_through()` or `|p| p.tear(TearMode::Bits)`.
    pub fn plan(mut self, shape: fn(FaultPlan) -> FaultPlan) -> Self {
        self.shape = shape;
        self
    }

    /// Runs the crash test (see the crate docs). `workload` drives the device and records in
    /// its state what was acknowledged; it returns the device's error once power fails.
    /// `check` gets the surviving device, that state and the cut, reopens and checks.
    pub fn run<C, S, E>(
        &self,
        fresh: impl Fn() -> C::Medium,
        workload: impl Fn(&mut C, &mut S) -> Result<(), E>,
        check: impl Fn(C::Medium, &S, &PowerCut) -> Result<(), String>,
    ) -> Result<Report, Box<Failure>>
    where
        C: PowerFail,
        S: Default,
        E: fmt::Display,
    {
        let fail = |point, ops, seed, cut, message| self.failure(point, ops, seed, cut, message);
        // Count the operations of an uninterrupted run.
        let mut dev = C::wrap(fresh(), (self.shape)(FaultPlan::run_to_end(self.seed)));
        let mut state = S::default();
        match guarded(|| workload(&mut dev, &mut state)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let msg = format!("the workload fails without any power cut: {e}");
                return Err(fail(dev.ops(), dev.ops(), self.seed, None, msg));
            }
            Err(panic) => {
                let msg = format!("the workload panics without any power cut: {panic}");
                return Err(fail(dev.ops(), dev.ops(), self.seed, None, msg));
            }
        }
        let ops = dev.ops();
        let trace = dev.trace().to_vec();

        let runs = self.runs(ops);

        for &(point, seed) in &runs {
            let plan = if point >= ops {
                FaultPlan::run_to_end(seed)
            } else {
                FaultPlan::cut_at(point, seed)
            };
            let mut dev = C::wrap(fresh(), (self.shape)(plan));
            let mut state = S::default();
            let result = match guarded(|| workload(&mut dev, &mut state)) {
                Ok(r) => r,
                Err(panic) => {
                    let msg = format!("the workload panicked: {panic}");
                    return Err(fail(point, ops, seed, dev.power_cut(), msg));
                }
            };
            let t = dev.trace();
            if let Some(k) = (0..t.len()).find(|&k| trace.get(k) != Some(&t[k])) {
                let msg = format!(
                    "the workload is not deterministic: operation {k} differs from the \
                     counting run"
                );
                return Err(fail(point, ops, seed, None, msg));
            }
            if let Err(e) = &result {
                if !dev.is_cut() {
                    let msg = format!("the workload failed before the cut: {e}");
                    return Err(fail(point, ops, seed, None, msg));
                }
            } else if point < ops && !dev.is_cut() {
                let msg = format!(
                    "the workload finished after {} operations without reaching the cut: \
                     it is not deterministic",
                    dev.ops()
                );
                return Err(fail(point, ops, seed, None, msg));
            }
            // Everything in RAM is dropped here; only the medium and the acknowledgements
            // go on.
            let (medium, cut) = dev.power_off();
            checked(&check, medium, &state, &cut)
                .map_err(|message| fail(point, ops, seed, Some(cut), message))?;
        }
        Ok(self.report(ops, &runs))
    }

    /// [`run`](Self::run) for a workload that writes from more than one thread, as an engine
    /// with a background thread does: the workload gets the fault-injecting device behind a
    /// [`SharedDevice`], whose [`writer`](BlockDevice::writer) handles the engine may give
    /// its threads, and must drop every handle before it returns.
    ///
    /// Threads interleave differently from run to run, so a cut point is the index of an
    /// operation in that run's own order, the workload is not held to repeat the counting
    /// run's operations, and a run that ends before its cut point loses power at the end. A
    /// failure gives its cut point and seed, but a replay may take another interleaving: run
    /// it a few times.
    pub fn run_threaded<M, S, E>(
        &self,
        fresh: impl Fn() -> M,
        workload: impl Fn(SharedDevice<FaultyBlock<M>>, &mut S) -> Result<(), E>,
        check: impl Fn(M, &S, &PowerCut) -> Result<(), String>,
    ) -> Result<Report, Box<Failure>>
    where
        M: BlockDevice + Send + 'static,
        S: Default,
        E: fmt::Display,
    {
        let fail = |point, ops, seed, cut, message: String| {
            let message = format!("{message} (threaded: a replay may interleave differently)");
            self.failure(point, ops, seed, cut, message)
        };
        count_engine_thread_panics();
        // One run of the workload under `plan`: the device taken back from it, or why not.
        let run_once = |plan: FaultPlan, state: &mut S| {
            let dev = SharedDevice::new(FaultyBlock::new(fresh(), (self.shape)(plan)));
            let panics = ENGINE_THREAD_PANICS.load(Ordering::SeqCst);
            let watchdog = Watchdog::start(&self.name, RUN_LIMIT);
            let result = guarded(|| workload(dev.clone(), state));
            drop(watchdog);
            let ops = dev.with(|d| d.ops());
            let cut = dev.with(|d| d.power_cut());
            if ENGINE_THREAD_PANICS.load(Ordering::SeqCst) != panics {
                // An engine may turn its thread's panic into an error, which a run after the
                // cut would otherwise take for the power loss.
                return Err((ops, cut, "an engine thread panicked (above)".to_string()));
            }
            let Some(dev) = dev.into_inner() else {
                return Err((
                    ops,
                    cut,
                    "the workload kept a handle to the device".to_string(),
                ));
            };
            match result {
                Ok(Ok(())) => Ok(dev),
                Ok(Err(_)) if cut.is_some() => Ok(dev),
                Ok(Err(e)) => Err((ops, cut, format!("the workload failed before the cut: {e}"))),
                Err(panic) => Err((ops, cut, format!("the workload panicked: {panic}"))),
            }
        };
        let mut state = S::default();
        let dev =
            run_once(FaultPlan::run_to_end(self.seed), &mut state).map_err(|(ops, _, msg)| {
                let msg = format!("without any power cut: {msg}");
                fail(ops, ops, self.seed, None, msg)
            })?;
        let ops = dev.ops();
        let runs = self.runs(ops);
        let mut reached = 0;
        for &(point, seed) in &runs {
            let plan = if point >= ops {
                FaultPlan::run_to_end(seed)
            } else {
                FaultPlan::cut_at(point, seed)
            };
            let mut state = S::default();
            let dev = run_once(plan, &mut state)
                .map_err(|(_, cut, msg)| fail(point, ops, seed, cut, msg))?;
            if point >= ops || dev.power_cut().is_some() {
                reached += 1;
            }
            let (medium, cut) = dev.power_off();
            checked(&check, medium, &state, &cut)
                .map_err(|message| fail(point, ops, seed, Some(cut), message))?;
        }
        // Runs that ended before their cut point (another interleaving issued fewer
        // operations) lost power after their last one instead: a test whose runs mostly do
        // that covers less than its report says.
        if reached * 10 < runs.len() * 8 {
            let msg = format!(
                "only {reached} of {} runs reached their cut point: the workload's operation \
                 count varies too much between runs",
                runs.len()
            );
            return Err(fail(ops, ops, self.seed, None, msg));
        }
        Ok(self.report(ops, &runs))
    }

    /// The failure of the run at `point` with `seed`.
    fn failure(
        &self,
        point: u64,
        ops: u64,
        seed: u64,
        cut: Option<PowerCut>,
        message: String,
    ) -> Box<Failure> {
        Box::new(Failure {
            name: self.name.clone(),
            point,
            ops,
            seed,
            cut,
            message,
        })
    }

    /// The runs `(cut point, seed)` for a workload of `ops` operations: the one the
    /// environment names for a replay, or every point (or a sample) with each of its seeds.
    fn runs(&self, ops: u64) -> Vec<(u64, u64)> {
        let replay = (
            std::env::var("EMBER_CRASH_POINT")
                .ok()
                .and_then(|v| parse_u64(&v)),
            std::env::var("EMBER_CRASH_SEED")
                .ok()
                .and_then(|v| parse_u64(&v)),
        );
        match replay {
            (Some(point), Some(seed)) => vec![(point, seed)],
            _ => self
                .points(ops)
                .into_iter()
                .flat_map(|p| (0..self.seeds_per_point).map(move |k| (p, k)))
                .map(|(p, k)| (p, point_seed(self.seed, p, k)))
                .collect(),
        }
    }

    /// Reports (and prints) what the passing `runs` covered.
    fn report(&self, ops: u64, runs: &[(u64, u64)]) -> Report {
        let points: BTreeSet<u64> = runs.iter().map(|r| r.0).collect();
        let report = Report {
            name: self.name.clone(),
            ops,
            points: points.len(),
            runs: runs.len(),
            sampled: points.len() < ops as usize + 1,
        };
        eprintln!("{report}");
        report
    }

    /// The cut points to try for a workload of `ops` operations.
    fn points(&self, ops: u64) -> Vec<u64> {
        let all = ops.saturating_add(1);
        if all <= self.max_points as u64 {
            return (0..=ops).collect();
        }
        let mut rng = SplitMix64::new(self.seed);
        let mut chosen = BTreeSet::from([0, ops]);
        while chosen.len() < self.max_points {
            chosen.insert(rng.below(all));
        }
        chosen.into_iter().collect()
    }
}

impl Default for CrashTest {
    fn default() -> Self {
        Self::new()
    }
}

/// Panics so far on threads an engine started (named `ember-…`), process-wide.
static ENGINE_THREAD_PANICS: AtomicU64 = AtomicU64::new(0);

/// Most time one run of a threaded workload may take before the test is stopped as hung.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Chains a panic hook (once per process) that counts the panics of engine threads, which
/// an engine may turn into an error ([`CrashTest::run_threaded`] fails a run that had one).
fn count_engine_thread_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("ember-"))
            {
                ENGINE_THREAD_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// Ends the process if a run takes longer than its limit: a deadlock after a power cut
/// stops the test with a message instead of hanging it.
struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Watchdog {
    fn start(name: &str, limit: Duration) -> Watchdog {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let name = name.to_string();
        let spawned = std::thread::Builder::new()
            .name("crashtest-watchdog".into())
            .spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                    eprintln!(
                        "crash test '{name}': a run took more than {limit:?} (a hang): stopping"
                    );
                    std::process::abort();
                }
            });
        Watchdog(spawned.is_ok().then_some(done))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            let _ = done.send(());
        }
    }
}

/// A block device behind a mutex, shared by its clones and by the
/// [`writer`](BlockDevice::writer) handles it gives out, so an engine can write to it from
/// another thread ([`CrashTest::run_threaded`]). Every operation, through any clone or
/// handle, is one operation of the device inside, in the order the lock was taken.
#[derive(Debug)]
pub struct SharedDevice<D> {
    dev: Arc<Mutex<D>>,
    /// Writes and syncs issued through the writer handles.
    handle_ops: Arc<AtomicU64>,
}

impl<D> Clone for SharedDevice<D> {
    fn clone(&self) -> Self {
        SharedDevice {
            dev: Arc::clone(&self.dev),
            handle_ops: Arc::clone(&self.handle_ops),
        }
    }
}

/// Locks a device; a thread that panicked holding it left nothing half-done that matters to
/// a test (the panic is reported), so the poison is ignored.
fn lock_device<D>(m: &Mutex<D>) -> MutexGuard<'_, D> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<D> SharedDevice<D> {
    /// Shares `dev`.
    pub fn new(dev: D) -> Self {
        SharedDevice {
            dev: Arc::new(Mutex::new(dev)),
            handle_ops: Arc::default(),
        }
    }

    /// `f` on the device inside, under the lock.
    pub fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut lock_device(&self.dev))
    }

    /// Writes and syncs issued so far through the [`writer`](BlockDevice::writer) handles
    /// (a test can tell that its engine's threads wrote through them at all).
    pub fn handle_ops(&self) -> u64 {
        self.handle_ops.load(Ordering::SeqCst)
    }

    /// The device back, or `None` while another clone or handle holds it.
    pub fn into_inner(self) -> Option<D> {
        Arc::try_unwrap(self.dev)
            .ok()
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
    }
}

impl<D: BlockDevice + Send + 'static> BlockDevice for SharedDevice<D> {
    fn sector_size(&self) -> u32 {
        lock_device(&self.dev).sector_size()
    }
    fn capacity(&self) -> u64 {
        lock_device(&self.dev).capacity()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> ember_device::Result<()> {
        lock_device(&self.dev).read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> ember_device::Result<()> {
        lock_device(&self.dev).write(offset, data)
    }
    fn sync(&mut self) -> ember_device::Result<()> {
        lock_device(&self.dev).sync()
    }
    fn resize(&mut self, new_len: u64) -> ember_device::Result<()> {
        lock_device(&self.dev).resize(new_len)
    }
    fn prepare(&mut self, offset: u64, len: u64) {
        lock_device(&self.dev).prepare(offset, len);
    }
    fn prepare_appends(&mut self, offset: u64, len: u64) {
        lock_device(&self.dev).prepare_appends(offset, len);
    }
    fn reads_from_memory(&self) -> bool {
        lock_device(&self.dev).reads_from_memory()
    }
    fn writer(&mut self) -> Option<Box<dyn DeviceWriter>> {
        Some(Box::new(SharedWriter(self.clone())))
    }
}

/// A [`SharedDevice`]'s writer handle.
struct SharedWriter<D>(SharedDevice<D>);

impl<D: BlockDevice + Send + 'static> DeviceWriter for SharedWriter<D> {
    fn write(&mut self, offset: u64, data: &[u8]) -> ember_device::Result<()> {
        self.0.handle_ops.fetch_add(1, Ordering::SeqCst);
        lock_device(&self.0.dev).write(offset, data)
    }
    fn sync(&mut self) -> ember_device::Result<()> {
        self.0.handle_ops.fetch_add(1, Ordering::SeqCst);
        lock_device(&self.0.dev).sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_include_both_ends_and_are_seeded() {
        let t = CrashTest::new().max_points(10);
        let p = t.points(1_000_000);
        assert_eq!(p.len(), 10);
        assert_eq!((p[0], p[9]), (0, 1_000_000));
        assert_eq!(p, t.points(1_000_000));
        assert_eq!(t.points(5), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_shared_device_counts_the_handles_operations_with_its_own() {
        use ember_device::MemBlock;
        let mut dev = SharedDevice::new(FaultyBlock::new(
            MemBlock::new(4096),
            FaultPlan::cut_at(2, 1),
        ));
        let mut w = dev.writer().unwrap();
        dev.write(0, &[1; 512]).unwrap();
        w.write(512, &[2; 512]).unwrap();
        // Operation 2, through the handle, is the cut; the device is out for both.
        assert!(w.sync().is_err());
        assert!(dev.write(1024, &[3; 4]).is_err());
        assert_eq!(dev.with(|d| d.power_cut().map(|c| c.index)), Some(2));
        // Not while the handle holds it.
        assert!(dev.clone().into_inner().is_none());
        drop(w);
        let (_, cut) = dev.into_inner().unwrap().power_off();
        assert_eq!(cut.index, 2);
    }

    #[test]
    fn replay_numbers_parse_in_hex_and_decimal() {
        assert_eq!(parse_u64("0x1f"), Some(31));
        assert_eq!(parse_u64(" 42 "), Some(42));
        assert_eq!(parse_u64("zz"), None);
    }
}
