//! The pages' data min/max under every column type of the data order: a data-range query
//! without a bitmap index skips pages on their header's min/max alone, so a wrong min or max
//! loses records. For each type, data ranges equal a brute-force scan — also after a reopen
//! that restores the write buffer from its temporary page (record-level consistency), where
//! the write path no longer knows the buffer's min/max decoded.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Rng, nor};
use ember_timeseries::{Area, Col, ColType, Config, DataOrder, FlashStore, Query, Series, Source};

const PAGE: usize = 256;
const UNIT: u32 = 16;
const TYPES: [ColType; 10] = [
    ColType::I8,
    ColType::U8,
    ColType::I16,
    ColType::U16,
    ColType::I32,
    ColType::U32,
    ColType::I64,
    ColType::U64,
    ColType::F32,
    ColType::F64,
];

/// A random value of `ty`, little-endian, in 8 bytes (the column at offset 0).
fn value(rng: &mut Rng, ty: ColType) -> [u8; 8] {
    let r = rng.next();
    let mut d = [0u8; 8];
    match ty {
        ColType::F32 => {
            d[..4].copy_from_slice(&((r % 20_001) as f32 / 7.0 - 1_400.0).to_le_bytes())
        }
        ColType::F64 => {
            d.copy_from_slice(&((r % 2_000_001) as f64 / 3.0 - 300_000.0).to_le_bytes())
        }
        _ => d[..ty.width()].copy_from_slice(&r.to_le_bytes()[..ty.width()]),
    }
    d
}

fn num(ty: ColType, d: &[u8]) -> f64 {
    Col::at(0, ty).get(0, d).unwrap().as_f64()
}

fn check(
    ts: &mut Series<'_, FlashStore<common::Flash>>,
    ty: ColType,
    recs: &[(u64, [u8; 8])],
    rng: &mut Rng,
) {
    for _ in 0..25 {
        let a = recs[rng.below(recs.len() as u64) as usize].1;
        let b = recs[rng.below(recs.len() as u64) as usize].1;
        let (lo, hi) = if num(ty, &a) <= num(ty, &b) {
            (a, b)
        } else {
            (b, a)
        };
        let (l, h) = (num(ty, &lo), num(ty, &hi));
        let want: Vec<u64> = recs
            .iter()
            .filter(|r| (l..=h).contains(&num(ty, &r.1)))
            .map(|r| r.0)
            .collect();
        let mut it = ts.iter(Query::data(Some(&lo), Some(&hi))).unwrap();
        let mut got = Vec::new();
        while it.advance().unwrap() {
            got.push(it.row().key);
        }
        assert_eq!(got, want, "{ty:?}: values {l}..={h}");
    }
}

#[test]
fn data_ranges_skip_pages_on_a_correct_min_max_for_every_column_type() {
    for (t, ty) in TYPES.into_iter().enumerate() {
        for rlc in [false, true] {
            let cfg = Config::new(4, 8, PAGE, UNIT, Area::new(0, 32 * UNIT))
                .data_order(DataOrder::Col(Col::at(0, ty)))
                .record_level_consistency(rlc);
            let mut rng = Rng(t as u64 * 2 + u64::from(rlc));
            let mut arena = vec![0u8; cfg.buffer_bytes() + 1024];
            let flash = nor(u64::from(32 * UNIT) * PAGE as u64);
            let mut ts = Series::format(FlashStore(flash), cfg, &mut arena).unwrap();
            let mut recs = Vec::new();
            let n = if rlc { 500 } else { 3_000 };
            for i in 0..n {
                let r = (10 + 3 * i as u64, value(&mut rng, ty));
                ts.put(r.0, &r.1).unwrap();
                recs.push(r);
            }
            check(&mut ts, ty, &recs, &mut rng);
            if rlc {
                // A power cut with a partly filled write buffer: it comes back from its
                // temporary page, and more records go into the same page.
                assert!(ts.buffered() > 0);
                let flash = ts.into_storage();
                let mut ts = Series::open(flash, cfg, &mut arena).unwrap();
                for i in n..n + 40 {
                    let r = (10 + 3 * i as u64, value(&mut rng, ty));
                    ts.put(r.0, &r.1).unwrap();
                    recs.push(r);
                }
                ts.flush().unwrap();
                check(&mut ts, ty, &recs, &mut rng);
            }
        }
    }
}
