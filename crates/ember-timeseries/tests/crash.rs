//! Power cuts at every device operation (ember-crashtest): after reopening from the surviving
//! bytes alone, the series holds exactly a prefix of the records put — every record of every
//! page whose write returned (with record-level consistency: every record whose put
//! returned), nothing that was never put, no wrong data — and goes on accepting records.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Flash, nor};
use ember_crashtest::CrashTest;
use ember_device::{FaultyBlock, FaultyFlash, MemBlock};
use ember_timeseries::{
    Area, BlockStore, Col, Config, FlashStore, LinearBuckets, OnFull, Query, Series, Source,
    Storage,
};

const PAGE: usize = 512;
const UNIT: u32 = 8;

fn key(i: u64) -> u64 {
    1_000 + i * 7 + i % 3
}

fn data(i: u64) -> [u8; 12] {
    let mut d = [0u8; 12];
    d[..4].copy_from_slice(&((i * 37 % 1000) as i32).to_le_bytes());
    d[4..8].copy_from_slice(&(i as u32).to_le_bytes());
    d[8..].copy_from_slice(&(!i as u32).to_le_bytes());
    d
}

static BUCKETS: LinearBuckets = LinearBuckets::new(Col::i32(0), 0, 1000, 32);

/// Data in `data_units` erase units, a bitmap index in 2 units after them.
fn config(data_units: u32, rlc: bool) -> Config<'static> {
    let dp = data_units * UNIT;
    Config::new(4, 12, PAGE, UNIT, Area::new(0, dp))
        .index(Area::new(dp, 2 * UNIT), &BUCKETS)
        .record_level_consistency(rlc)
}

/// What the workload knows when power fails.
#[derive(Default)]
struct Acked {
    /// Records whose put returned.
    acked: u64,
    /// Records known durable: in pages whose write (and sync) returned.
    durable: u64,
    /// Whether the series was opened (a cut before that leaves nothing promised).
    opened: bool,
}

fn workload<S: Storage>(
    store: S,
    cfg: Config<'static>,
    n: u64,
    st: &mut Acked,
) -> ember_timeseries::Result<()> {
    let mut arena = vec![0u8; cfg.buffer_bytes() + 1024];
    let mut ts = Series::open(store, cfg, &mut arena)?;
    st.opened = true;
    for i in 0..n {
        let syncs = ts.stats().syncs;
        ts.put(key(i), &data(i))?;
        st.acked = i + 1;
        if cfg.record_level_consistency {
            st.durable = st.acked;
        } else if ts.stats().syncs > syncs {
            // Every sync comes after the put's page write: the pages written are durable.
            st.durable = st.acked - ts.pending() as u64;
        }
    }
    Ok(())
}

/// Reopens and checks the promise; then writes on and checks again.
fn check<S: Storage>(
    store: S,
    cfg: Config<'static>,
    st: &Acked,
    wrapped: bool,
) -> Result<S, String> {
    let mut arena = vec![0u8; cfg.buffer_bytes() + 1024];
    let mut ts = Series::open(store, cfg, &mut arena).map_err(|e| format!("reopen: {e}"))?;
    let first = verify_run(&mut ts, st, wrapped, None)?;
    // Go on writing after the recovery point, then reopen once more.
    let start = ts.last_key().map_or(0, |k| (k - 1_000) / 7 + 1);
    let more = 3 * ts.records_per_page() as u64 + 5;
    for i in start..start + more {
        ts.put(key(i), &data(i))
            .map_err(|e| format!("put after recovery: {e}"))?;
    }
    let store = ts.close().map_err(|e| format!("close: {e}"))?;
    let mut ts = Series::open(store, cfg, &mut arena).map_err(|e| format!("second reopen: {e}"))?;
    let after = Acked {
        acked: start + more,
        durable: start + more,
        opened: true,
    };
    verify_run(&mut ts, &after, wrapped, Some(first))?;
    Ok(ts.into_storage())
}

/// Checks that the series holds records `a..m` of the sequence with `durable <= m <= acked + 1`
/// (`a == 0` unless the area wrapped); returns `a`.
fn verify_run<S: Storage>(
    ts: &mut Series<'_, S>,
    st: &Acked,
    wrapped: bool,
    first: Option<u64>,
) -> Result<u64, String> {
    let mut it = ts.iter(Query::all()).map_err(|e| e.to_string())?;
    let mut expect: Option<u64> = None;
    let mut start = 0;
    let mut n = 0u64;
    while it.advance().map_err(|e| format!("scan: {e}"))? {
        let r = it.row();
        let i = match expect {
            Some(i) => i,
            None => {
                let i = (r.key - 1_000) / 7;
                if !wrapped && i != 0 {
                    return Err(format!("the first record is {i}, not 0"));
                }
                if let Some(f) = first
                    && i < f
                {
                    return Err(format!("record {i} came back after recovery began at {f}"));
                }
                start = i;
                i
            }
        };
        if r.key != key(i) || r.data != data(i) {
            return Err(format!(
                "record {i}: key {} and data {:?} were never put there",
                r.key, r.data
            ));
        }
        expect = Some(i + 1);
        n += 1;
    }
    let m = expect.unwrap_or(0);
    if m < st.durable {
        return Err(format!(
            "{} records were durable, {m} recovered",
            st.durable
        ));
    }
    if m > st.acked + 1 {
        return Err(format!("{m} recovered but only {} were put", st.acked + 1));
    }
    if wrapped && n < m.min(2 * UNIT as u64 * ts.records_per_page() as u64) {
        return Err(format!("only {n} records kept after the wrap"));
    }
    // Lookups agree with the scan.
    let mut out = [0u8; 12];
    for i in [start, (start + m) / 2, m.saturating_sub(1)] {
        if i >= start && i < m {
            let found = ts.get(key(i), &mut out).map_err(|e| format!("get: {e}"))?;
            if !found || out != data(i) {
                return Err(format!("record {i} not found by key"));
            }
        }
    }
    Ok(start)
}

/// `read_ahead`: page buffers beyond those needed (the iterator's read-ahead window);
/// `write_pages`: full pages written per device call.
fn flash_test(
    data_units: u32,
    rlc: bool,
    n: u64,
    test: CrashTest,
    wrapped: bool,
    (read_ahead, write_pages): (usize, usize),
) {
    let cfg = config(data_units, rlc);
    let cfg = cfg
        .buffers(cfg.buffers_needed() + read_ahead)
        .write_pages(write_pages);
    let bytes = u64::from((data_units + 2) * UNIT) * PAGE as u64;
    let report = test
        .run(
            || nor(bytes),
            |dev: &mut FaultyFlash<Flash>, st: &mut Acked| workload(FlashStore(dev), cfg, n, st),
            |medium, st, _| {
                if !st.opened {
                    return Ok(());
                }
                check(FlashStore(medium), cfg, st, wrapped).map(|_| ())
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.ops > 100, "{report}");
}

#[test]
fn a_power_cut_at_every_flash_operation_of_5000_records_loses_only_the_unwritten_page() {
    // Every cut point (about 400), two torn outcomes each.
    flash_test(
        32,
        false,
        5_000,
        CrashTest::new().seeds_per_point(2),
        false,
        (0, 1),
    );
}

#[test]
fn wrapping_many_times_under_power_cuts_keeps_a_run_of_the_newest_records() {
    // 6 units of data: 5,000 records go round the area about four times; scans read ahead
    // 4 pages at a time (windows cross the end of the area and torn, dead slots).
    flash_test(
        6,
        false,
        5_000,
        CrashTest::new().max_points(500),
        true,
        (3, 1),
    );
}

#[test]
fn batched_page_writes_lose_only_the_unwritten_pages() {
    // Four full pages per device call: a cut loses the staged pages and the write buffer,
    // nothing written; at every cut point, and wrapping with read-ahead on.
    flash_test(32, false, 5_000, CrashTest::new(), false, (0, 4));
    flash_test(
        6,
        false,
        5_000,
        CrashTest::new().max_points(500),
        true,
        (3, 3),
    );
}

#[test]
fn record_level_consistency_loses_no_acknowledged_put() {
    // Every operation of a 600-record workload (about 1,300 operations)...
    flash_test(
        8,
        true,
        600,
        CrashTest::new().max_points(5_000),
        false,
        (0, 1),
    );
}

#[test]
fn record_level_consistency_over_5000_records_at_400_sampled_cuts() {
    // ...and 400 of the cut points of the 5,000-record one (about 11,300 operations).
    flash_test(
        32,
        true,
        5_000,
        CrashTest::new().max_points(400),
        false,
        (2, 1),
    );
}

#[test]
fn a_block_device_losing_unsynced_writes_keeps_a_synced_prefix() {
    for every_page in [true, false] {
        // Without per-page syncs, scans also read ahead 6 pages at a time.
        let cfg = config(16, false).sync_every_page(every_page);
        let cfg = cfg.buffers(cfg.buffers_needed() + if every_page { 0 } else { 5 });
        // ... and write 8 pages per device call.
        let cfg = cfg.write_pages(if every_page { 1 } else { 8 });
        let bytes = (18 * UNIT) as usize * PAGE;
        CrashTest::new()
            .max_points(400)
            .run(
                || MemBlock::new(bytes),
                |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut Acked| {
                    workload(BlockStore(dev), cfg, 2_000, st)
                },
                |medium, st, _| {
                    if !st.opened {
                        return Ok(());
                    }
                    check(BlockStore(medium), cfg, st, false).map(|_| ())
                },
            )
            .unwrap_or_else(|f| panic!("{f}"));
    }
}

#[test]
fn refuse_mode_survives_cuts_at_the_full_point() {
    let cfg = config(4, false).on_full(OnFull::Refuse);
    let bytes = u64::from(6 * UNIT) * PAGE as u64;
    CrashTest::new()
        .run(
            || nor(bytes),
            |dev: &mut FaultyFlash<Flash>, st: &mut Acked| match workload(
                FlashStore(dev),
                cfg,
                2_000,
                st,
            ) {
                Err(ember_timeseries::Error::Full { .. }) => Ok(()),
                r => r,
            },
            |medium, st, _| {
                if !st.opened {
                    return Ok(());
                }
                let mut arena = vec![0u8; cfg.buffer_bytes() + 1024];
                let mut ts =
                    Series::open(FlashStore(medium), cfg, &mut arena).map_err(|e| e.to_string())?;
                verify_run(&mut ts, st, false, None).map(|_| ())
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
}
