//! Read-ahead: with page buffers beyond those the configuration needs, an iterator walking
//! pages in order reads several consecutive pages in one device call. Whatever the window
//! size, on flash and on a block device, before and after the circular area wraps (windows
//! then cross the end of the area's slots), every key range, key-and-data range and full
//! scan returns exactly what a brute-force scan of the live records returns, lookups
//! interleaved with scans still find their records, and fewer device reads are made.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Rng, nor};
use ember_device::MemBlock;
use ember_timeseries::{
    Area, BlockStore, Col, Config, FlashStore, LinearBuckets, Query, Series, Source, Storage,
};

const PAGE: usize = 512;
const UNIT: u32 = 8;

/// Irregular ascending keys (steps of 1 to 40).
fn keys(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed);
    let mut k = 5_000u64;
    (0..n)
        .map(|_| {
            k += 1 + rng.below(40);
            k
        })
        .collect()
}

fn data(i: usize) -> [u8; 12] {
    let mut d = [0u8; 12];
    d[..4].copy_from_slice(&((i * 7919 % 1000) as i32).to_le_bytes());
    d[4..8].copy_from_slice(&(i as u32).to_le_bytes());
    d[8..].copy_from_slice(&(!(i as u32)).to_le_bytes());
    d
}

fn v0(d: &[u8]) -> i32 {
    i32::from_le_bytes(d[..4].try_into().unwrap())
}

fn collect<S: Storage>(ts: &mut Series<'_, S>, q: Query<'_>) -> Vec<(u64, [u8; 12])> {
    let mut it = ts.iter(q).unwrap();
    let mut v = Vec::new();
    while it.advance().unwrap() {
        let r = it.row();
        v.push((r.key, r.data.try_into().unwrap()));
    }
    v
}

static BUCKETS: LinearBuckets = LinearBuckets::new(Col::i32(0), 0, 1000, 32);

/// `extra` buffers beyond the four the data index needs: a read-ahead window of
/// `1 + extra` pages; `write_pages` full pages written per device call.
fn config(data_units: u32, extra: usize, write_pages: usize) -> Config<'static> {
    let dp = data_units * UNIT;
    let cfg =
        Config::new(4, 12, PAGE, UNIT, Area::new(0, dp)).index(Area::new(dp, 2 * UNIT), &BUCKETS);
    cfg.buffers(cfg.buffers_needed() + extra)
        .write_pages(write_pages)
}

/// Puts `n` records, then checks ranges against the live records (the newest ones the
/// series still holds, read back by a scan and checked to be a run of what was put).
fn run<S: Storage>(store: S, cfg: Config<'static>, n: usize, seed: u64) -> (S, u64, u64) {
    let ks = keys(n, seed);
    let mut arena = vec![0u8; cfg.buffer_bytes() + 2048];
    let mut ts = Series::format(store, cfg, &mut arena).unwrap();
    for (i, &k) in ks.iter().enumerate() {
        ts.put(k, &data(i)).unwrap();
    }
    let st = ts.stats();
    if cfg.write_pages > 1 {
        assert!(st.write_calls * 2 < st.page_writes, "{st:?}");
    } else {
        assert_eq!(st.write_calls, st.page_writes);
    }
    // Live records: a suffix of those put, ending with the newest (the write buffer's).
    let all = collect(&mut ts, Query::all());
    assert!(!all.is_empty());
    let first = ks.binary_search(&all[0].0).unwrap();
    let want_all: Vec<(u64, [u8; 12])> = ks[first..]
        .iter()
        .enumerate()
        .map(|(j, &k)| (k, data(first + j)))
        .collect();
    assert_eq!(all, want_all, "full scan");
    let live = &want_all;
    let mut rng = Rng(seed ^ 0xABCD);
    let before = ts.stats();
    let mut get = [0u8; 12];
    for round in 0..60 {
        // Bounds anywhere: below the oldest live key, inside, past the newest.
        let lo_i = rng.below(live.len() as u64 + 20) as usize;
        let len = rng.below(if round % 3 == 0 {
            live.len() as u64
        } else {
            200
        });
        let lo = live.get(lo_i).map_or(live[live.len() - 1].0 + 1, |r| r.0) - rng.below(3);
        let hi = lo + len * 20;
        let want: Vec<_> = live
            .iter()
            .filter(|r| (lo..=hi).contains(&r.0))
            .copied()
            .collect();
        assert_eq!(
            collect(&mut ts, Query::keys(lo, hi)),
            want,
            "keys {lo}..={hi}"
        );
        // With a data filter on top.
        let (a, b) = (rng.below(1000) as i32, rng.below(1000) as i32);
        let (dlo, dhi) = (a.min(b), a.max(b));
        let (mut lo_b, mut hi_b) = ([0u8; 12], [0u8; 12]);
        lo_b[..4].copy_from_slice(&dlo.to_le_bytes());
        hi_b[..4].copy_from_slice(&dhi.to_le_bytes());
        let q = Query::keys(lo, hi).with_data(Some(&lo_b), Some(&hi_b));
        let want_d: Vec<_> = want
            .iter()
            .filter(|r| (dlo..=dhi).contains(&v0(&r.1)))
            .copied()
            .collect();
        assert_eq!(
            collect(&mut ts, q),
            want_d,
            "keys {lo}..={hi}, data {dlo}..={dhi}"
        );
        // A lookup between scans uses the same read buffer.
        let j = rng.below(live.len() as u64) as usize;
        assert!(ts.get(live[j].0, &mut get).unwrap());
        assert_eq!(get, live[j].1);
    }
    // Data ranges through the bitmap index (no read-ahead there) agree too.
    let (mut lo_b, mut hi_b) = ([0u8; 12], [0u8; 12]);
    lo_b[..4].copy_from_slice(&100i32.to_le_bytes());
    hi_b[..4].copy_from_slice(&110i32.to_le_bytes());
    let want_d: Vec<_> = live
        .iter()
        .filter(|r| (100..=110).contains(&v0(&r.1)))
        .copied()
        .collect();
    assert_eq!(
        collect(&mut ts, Query::data(Some(&lo_b), Some(&hi_b))),
        want_d
    );
    let after = ts.stats();
    let (pages, calls) = (
        after.page_reads - before.page_reads,
        after.read_calls - before.read_calls,
    );
    (ts.into_storage(), pages, calls)
}

#[test]
fn read_ahead_ranges_equal_a_brute_force_scan_on_flash_across_the_wrap() {
    // 6 units of 8 pages (28 records each): 6,000 records wrap the area about four times.
    // Full pages written 1, 3 or 8 at a time: the queries run with sealed pages still
    // waiting in RAM.
    for (extra, write_pages) in [(0, 1), (1, 1), (2, 3), (3, 8), (6, 1), (11, 3), (0, 8)] {
        for (n, seed) in [(700, 1), (6_000, 2), (6_013, 3)] {
            let bytes = u64::from(8 * UNIT) * PAGE as u64;
            let cfg = config(6, extra, write_pages);
            let (_, pages, calls) = run(FlashStore(nor(bytes)), cfg, n, seed);
            if extra == 0 {
                assert_eq!(pages, calls, "one page per call without read-ahead");
            } else {
                assert!(
                    calls < pages,
                    "extra {extra}: {calls} calls for {pages} pages"
                );
            }
        }
    }
}

#[test]
fn read_ahead_ranges_equal_a_brute_force_scan_on_a_block_device() {
    for (extra, write_pages) in [(0, 1), (3, 1), (7, 8), (0, 5)] {
        let bytes = (12 * UNIT) as usize * PAGE;
        let (_, pages, calls) = run(
            BlockStore(MemBlock::new(bytes)),
            config(10, extra, write_pages),
            9_000,
            4,
        );
        assert!(extra == 0 || calls < pages);
    }
}

#[test]
fn a_long_key_range_reads_its_pages_in_few_device_calls() {
    let bytes = u64::from(40 * UNIT) * PAGE as u64;
    let cfg = config(38, 7, 1);
    let ks = keys(8_000, 9);
    let mut arena = vec![0u8; cfg.buffer_bytes() + 4096];
    let mut ts = Series::format(FlashStore(nor(bytes)), cfg, &mut arena).unwrap();
    for (i, &k) in ks.iter().enumerate() {
        ts.put(k, &data(i)).unwrap();
    }
    let (lo, hi) = (ks[1_000], ks[6_000]);
    let before = ts.stats();
    let got = collect(&mut ts, Query::keys(lo, hi));
    assert_eq!(got.len(), 5_001);
    let s = ts.stats();
    let (pages, calls) = (
        s.page_reads - before.page_reads,
        s.read_calls - before.read_calls,
    );
    // About 179 pages hold the range; the spline's end prediction keeps the overshoot small.
    let per = ts.records_per_page() as u64;
    let need = 5_001 / per + 2;
    assert!(
        pages <= need + 8,
        "{pages} pages read for a range of {need}"
    );
    assert!(
        calls <= need.div_ceil(8) + 3,
        "{calls} device calls for {pages} pages"
    );
}

#[test]
fn batched_writes_are_refused_where_they_cannot_work() {
    let mut arena = vec![0u8; 16 * 1024];
    let bytes = u64::from(12 * UNIT) * PAGE as u64;
    let bad = [
        config(10, 0, 0),
        config(10, 0, UNIT as usize + 1),
        config(10, 0, 2).record_level_consistency(true),
    ];
    for cfg in bad {
        assert!(matches!(
            Series::format(FlashStore(nor(bytes)), cfg, &mut arena),
            Err(ember_timeseries::Error::Config { .. })
        ));
    }
    // The staging pages are part of the arena the buffers take.
    let cfg = config(10, 0, 4);
    assert_eq!(cfg.buffer_bytes(), (4 + 4) * PAGE);
    let mut small = vec![0u8; cfg.buffer_bytes() - 1];
    assert!(matches!(
        Series::format(FlashStore(nor(bytes)), cfg, &mut small),
        Err(ember_timeseries::Error::Memory { .. })
    ));
}

#[test]
fn staged_pages_are_written_by_flush_and_found_after_reopen() {
    let bytes = u64::from(12 * UNIT) * PAGE as u64;
    let cfg = config(10, 3, 6);
    let ks = keys(1_000, 11);
    let mut arena = vec![0u8; cfg.buffer_bytes() + 2048];
    let mut ts = Series::format(FlashStore(nor(bytes)), cfg, &mut arena).unwrap();
    for (i, &k) in ks.iter().enumerate() {
        ts.put(k, &data(i)).unwrap();
    }
    assert!(ts.pending() > ts.buffered(), "some pages are staged");
    let flash = ts.close().unwrap();
    let mut ts = Series::open(flash, cfg, &mut arena).unwrap();
    assert_eq!(ts.pending(), 0);
    let want: Vec<_> = ks.iter().enumerate().map(|(i, &k)| (k, data(i))).collect();
    assert_eq!(collect(&mut ts, Query::all()), want);
    let mut out = [0u8; 12];
    for (i, &k) in ks.iter().enumerate().step_by(7) {
        assert!(ts.get(k, &mut out).unwrap());
        assert_eq!(out, data(i));
    }
}

#[test]
fn a_full_area_in_refuse_mode_keeps_every_staged_page() {
    // Until the area refuses: the same records survive a reopen with and without batching.
    let mut kept = Vec::new();
    for write_pages in [1, 4, 8] {
        let bytes = u64::from(12 * UNIT) * PAGE as u64;
        let cfg = config(4, 0, write_pages).on_full(ember_timeseries::OnFull::Refuse);
        let mut arena = vec![0u8; cfg.buffer_bytes() + 2048];
        let mut ts = Series::format(FlashStore(nor(bytes)), cfg, &mut arena).unwrap();
        let ks = keys(5_000, 12);
        let mut put = 0;
        for (i, &k) in ks.iter().enumerate() {
            match ts.put(k, &data(i)) {
                Ok(()) => put += 1,
                Err(ember_timeseries::Error::Full { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(put < ks.len(), "the area filled");
        assert!(matches!(
            ts.flush(),
            Err(ember_timeseries::Error::Full { .. })
        ));
        let flash = ts.into_storage();
        let mut ts = Series::open(flash, cfg, &mut arena).unwrap();
        let got = collect(&mut ts, Query::all());
        let want: Vec<_> = ks[..got.len()]
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, data(i)))
            .collect();
        assert_eq!(got, want);
        kept.push(got.len());
    }
    assert!(kept.iter().all(|&n| n == kept[0]), "{kept:?}");
}
