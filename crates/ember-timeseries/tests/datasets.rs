//! The EmbedDB data sets (`shared/datasets`, every file there): every record is found by key
//! after insert and after reopen, key ranges and data ranges equal a brute-force scan, and
//! the figures the paper reports (page reads per lookup, RAM, pages read by data-range
//! queries) are measured and bounded.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;

use common::*;
use ember_timeseries::{
    Area, BoundaryBuckets, BucketFn, Col, Config, DataOrder, FlashStore, Query, Series, Source,
};

const PAGE: usize = 512;
const UNIT: u32 = 8;
const INDEX_PAGES: u32 = 64;

fn data_pages(n: usize) -> u32 {
    ((n / 20) as u32 + 4 * UNIT).div_ceil(UNIT) * UNIT
}

fn config<'a>(n: usize, buckets: &'a dyn BucketFn, c: usize) -> Config<'a> {
    let dp = data_pages(n);
    Config::new(4, 12, PAGE, UNIT, Area::new(0, dp))
        .index(Area::new(dp, INDEX_PAGES), buckets)
        .data_order(DataOrder::Col(Col::i32(4 * c)))
}

/// The value column with the most distinct values (the one a 0.01% range can select).
fn busiest_column(recs: &[(u64, [u8; 12])]) -> usize {
    (0..3)
        .max_by_key(|&c| {
            let mut v: Vec<i32> = recs.iter().map(|r| col(&r.1, c)).collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        })
        .unwrap()
}

fn flash_for(n: usize) -> Flash {
    nor(u64::from(data_pages(n) + INDEX_PAGES) * PAGE as u64)
}

/// Looks every key up in `order`; returns page reads per lookup.
fn lookup_all(
    ts: &mut Series<'_, FlashStore<Flash>>,
    order: &[u64],
    by_key: &HashMap<u64, [u8; 12]>,
) -> f64 {
    let before = ts.stats();
    let mut out = [0u8; 12];
    for &k in order {
        assert!(ts.get(k, &mut out).unwrap(), "key {k} not found");
        assert_eq!(&out, &by_key[&k], "key {k}: wrong data");
    }
    let reads = ts.stats().page_reads - before.page_reads;
    reads as f64 / order.len() as f64
}

fn collect(ts: &mut Series<'_, FlashStore<Flash>>, q: Query<'_>) -> Vec<(u64, [u8; 12])> {
    let mut it = ts.iter(q).unwrap();
    let mut v = Vec::new();
    while it.advance().unwrap() {
        let r = it.row();
        v.push((r.key, r.data.try_into().unwrap()));
    }
    v
}

#[test]
fn every_record_of_every_data_set_is_found_and_ranges_match_a_scan() {
    for ds in datasets() {
        let recs = &ds.records;
        let by_key: HashMap<u64, [u8; 12]> = recs.iter().copied().collect();
        assert_eq!(by_key.len(), recs.len(), "{}: duplicate keys", ds.name);
        // A 16-byte bitmap: 128 buckets at the quantiles of the busiest column.
        let c = busiest_column(recs);
        let bounds = quantile_bounds(recs, c, 128);
        let buckets = BoundaryBuckets::new(Col::i32(4 * c), &bounds);
        let cfg = config(recs.len(), &buckets, c);
        // The page buffers and 8 KiB of spline points.
        let mut arena = vec![0u8; cfg.buffer_bytes() + 8192];
        let mut ts = Series::open(FlashStore(flash_for(recs.len())), cfg, &mut arena).unwrap();
        for (k, d) in recs {
            ts.put(*k, d).unwrap();
        }
        let reads = lookup_all(&mut ts, &ds.lookup_order, &by_key);
        let ram = ts.ram_used();
        let points = ts.spline_points();

        // Key ranges of 5% of the data.
        let mut rng = Rng(0x5EED ^ recs.len() as u64);
        let span = recs.len() / 20;
        for _ in 0..10 {
            let i = rng.below((recs.len() - span) as u64) as usize;
            let (lo, hi) = (recs[i].0, recs[i + span - 1].0);
            let got = collect(&mut ts, Query::keys(lo, hi));
            assert_eq!(
                got.as_slice(),
                &recs[i..i + span],
                "{}: keys {lo}..={hi}",
                ds.name
            );
        }

        // Data ranges of about 0.01% (ten records) on that column, through the bitmap.
        let mut vals: Vec<i32> = recs.iter().map(|r| col(&r.1, c)).collect();
        vals.sort_unstable();
        let mut frac = Vec::new();
        for _ in 0..8 {
            let i = rng.below((vals.len() - 10) as u64) as usize;
            let (lo, hi) = (vals[i], vals[i + 9]);
            let (mut lo_b, mut hi_b) = ([0u8; 12], [0u8; 12]);
            lo_b[4 * c..4 * c + 4].copy_from_slice(&lo.to_le_bytes());
            hi_b[4 * c..4 * c + 4].copy_from_slice(&hi.to_le_bytes());
            let before = ts.stats().page_reads;
            let got = collect(&mut ts, Query::data(Some(&lo_b), Some(&hi_b)));
            let read = ts.stats().page_reads - before;
            let want: Vec<(u64, [u8; 12])> = recs
                .iter()
                .filter(|r| (lo..=hi).contains(&col(&r.1, c)))
                .copied()
                .collect();
            assert_eq!(got, want, "{}: values {lo}..={hi}", ds.name);
            frac.push(read as f64 / ts.data_pages() as f64);
        }
        let mean_frac = frac.iter().sum::<f64>() / frac.len() as f64;

        eprintln!(
            "{}: {} records, {:.3} page reads per lookup, {} spline points, RAM {} bytes, \
             data range (~0.01%) reads {:.1}% of pages",
            ds.name,
            recs.len(),
            reads,
            points,
            ram,
            100.0 * mean_frac
        );
        assert!(
            reads <= 1.3,
            "{}: {reads:.3} page reads per lookup",
            ds.name
        );
        assert!(
            mean_frac <= 0.2,
            "{}: data ranges read {mean_frac:.3} of the pages",
            ds.name
        );

        // Reopen from the flash alone.
        let flash = ts.close().unwrap().into_inner();
        let mut ts = Series::open(FlashStore(flash), cfg, &mut arena).unwrap();
        assert_eq!(ts.last_key(), recs.last().map(|r| r.0));
        let reads_after = lookup_all(&mut ts, &ds.lookup_order, &by_key);
        assert!(
            reads_after <= 1.3,
            "{}: {reads_after:.3} after reopen",
            ds.name
        );
        let all = collect(&mut ts, Query::all());
        assert_eq!(all.len(), recs.len());
        assert!(
            all.iter().zip(recs).all(|(a, b)| a == b),
            "{}: full scan",
            ds.name
        );
    }
}

/// The whole engine in 4,096 bytes: its state struct (without the flash handle, which on a
/// board is a peripheral) plus one fixed arena for the page buffers (write, read, index write,
/// index read) and the spline points. The arena is exactly what is left of 4 KiB, so the
/// test fails if the state grows or the engine needs more of the arena than it was given; with
/// too few spline points the index drops its oldest and falls back to binary search, which
/// the lookups still have to survive.
#[test]
fn the_engine_runs_in_4096_bytes_of_ram() {
    const BUDGET: usize = 4096;
    for ds in datasets() {
        let recs = &ds.records;
        let by_key: HashMap<u64, [u8; 12]> = recs.iter().copied().collect();
        let c = busiest_column(recs);
        let bounds = quantile_bounds(recs, c, 32);
        let buckets = BoundaryBuckets::new(Col::i32(4 * c), &bounds);
        let cfg = config(recs.len(), &buckets, c);
        let state = size_of::<Series<'_, FlashStore<Flash>>>() - size_of::<FlashStore<Flash>>();
        assert!(
            state + cfg.buffer_bytes() < BUDGET,
            "state {state} B + buffers {} B",
            cfg.buffer_bytes()
        );
        let mut arena = [0u8; BUDGET];
        let arena = &mut arena[..BUDGET - state];
        let mut ts = Series::open(FlashStore(flash_for(recs.len())), cfg, arena).unwrap();
        for (k, d) in recs {
            ts.put(*k, d).unwrap();
        }
        ts.flush().unwrap();
        let ram = ts.ram_used() - size_of::<FlashStore<Flash>>();
        assert!(ram <= BUDGET, "RAM in use {ram} B");
        let mut keys: Vec<u64> = recs.iter().map(|r| r.0).collect();
        let mut rng = Rng(7);
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let reads = lookup_all(&mut ts, &keys[..2000], &by_key);
        let span = recs.len() / 20;
        let (lo, hi) = (recs[100].0, recs[100 + span - 1].0);
        assert_eq!(
            collect(&mut ts, Query::keys(lo, hi)).as_slice(),
            &recs[100..100 + span]
        );
        eprintln!(
            "{}: {} records in {BUDGET} B (state {state} B, arena {} B): {} spline points, \
         {} dropped, {reads:.3} page reads per lookup",
            ds.name,
            recs.len(),
            BUDGET - state,
            ts.spline_points(),
            ts.spline_dropped()
        );
    }
}
