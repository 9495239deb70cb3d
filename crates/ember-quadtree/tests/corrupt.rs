//! Flash images of random bytes, and valid images with random damage, never make open,
//! restore, scan, put or commit panic or loop: they give the right data or a clean error.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use ember_device::{FlashDevice, SplitMix64};
use ember_quadtree::{Query, Record, Store};

/// Everything a program would do after power-up, errors allowed.
fn poke(medium: Flash, cfg: ember_quadtree::Config<2>) {
    let mut c = [0u8; 64];
    let Ok((mut s, _)) = Store::open(medium, cfg, &mut c) else {
        return;
    };
    let mut out = vec![Record::default(); 4096];
    let _ = s.scan(&Query::all(), &mut out);
    let _ = s.get(&[500, 600]);
    for i in 0..40 {
        if s.put(&record(99, i)).is_err() {
            break;
        }
    }
    let _ = s.commit(&ctx(1));
    let _ = s.scan(&Query::all(), &mut out);
    if let Ok((mut s, _)) = Store::open(s.into_device(), cfg, &mut c) {
        let _ = s.scan(&Query::all(), &mut out);
    }
}

#[test]
fn random_images_give_clean_errors() {
    for (_, cfg) in variants(8) {
        for seed in 0..40u64 {
            let mut f = flash(&cfg);
            let mut rng = SplitMix64::new(seed);
            let len = f.geometry().capacity as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
            f.erase(0, len as u64).unwrap();
            f.write(0, &bytes).unwrap();
            poke(f, cfg);
        }
    }
}

#[test]
fn damaged_images_give_the_right_data_or_clean_errors() {
    for (name, cfg) in variants(8) {
        // A valid image with uncommitted work after the last checkpoint.
        let mut s = Store::format(flash(&cfg), cfg, &ctx(0)).unwrap();
        for i in 0..300 {
            s.put(&record(5, i)).unwrap();
            if i % 60 == 59 {
                s.commit(&ctx(i + 1)).unwrap();
            }
        }
        let image = s.into_device();
        let bytes = image.store().as_bytes().to_vec();
        let len = bytes.len();
        for seed in 0..150u64 {
            let mut rng = SplitMix64::new(seed ^ 0xDA3A);
            let mut b = bytes.clone();
            // Damage: a few random bytes, or a burst, sometimes in the log.
            let n = 1 + rng.below(8) as usize;
            let region = if rng.coin() { 6 * SEG as usize } else { len };
            for _ in 0..n {
                let at = rng.below(region as u64) as usize;
                b[at] = if rng.coin() {
                    rng.byte()
                } else {
                    b[at] & rng.byte()
                };
            }
            let mut f = flash(&cfg);
            f.erase(0, len as u64).unwrap();
            f.write(0, &b).unwrap();
            // Either a clean error, or the checkpointed records: never a panic.
            let mut c = [0u8; 64];
            if let Ok((mut s, k)) = Store::open(f, cfg, &mut c) {
                let mut out = vec![Record::default(); 4096];
                if let Ok(got) = s.scan(&Query::all(), &mut out)
                    && let Some(k) = parse_ctx(&c[..k])
                {
                    assert!(
                        got as u64 <= k.max(300),
                        "{name} seed {seed}: {got} records for {k}"
                    );
                }
                poke(s.into_device(), cfg);
            }
        }
    }
}

/// A write mark with a valid checksum and wild fields.
fn wild_mark(rng: &mut SplitMix64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0] = 0xA1;
    b[1] = rng.below(10) as u8;
    b[2] = rng.below(3) as u8;
    for x in &mut b[4..8] {
        *x = rng.byte();
    }
    let c = crc32fast::hash(&b[..8]);
    b[8..].copy_from_slice(&c.to_le_bytes());
    b
}

#[test]
fn wild_marks_and_random_partitions_give_clean_errors() {
    for (_, cfg) in variants(8) {
        let mut s = Store::format(flash(&cfg), cfg, &ctx(0)).unwrap();
        for i in 0..200 {
            s.put(&record(6, i)).unwrap();
            if i % 50 == 49 {
                s.commit(&ctx(i + 1)).unwrap();
            }
        }
        let bytes = s.into_device().store().as_bytes().to_vec();
        let log_end = usize::from(cfg.log_units) * SEG as usize;
        for seed in 0..40u64 {
            let mut rng = SplitMix64::new(seed ^ 0x3A7C);
            let mut b = bytes.clone();
            // Marks with valid checksums but any fields, at the end of every log unit.
            for u in 0..usize::from(cfg.log_units) {
                let base = u * SEG as usize;
                if let Some(at) = (12..SEG as usize - 40)
                    .step_by(4)
                    .find(|&o| b[base + o..base + o + 4] == [0xFF; 4])
                {
                    for k in 0..3 {
                        let m = wild_mark(&mut rng);
                        b[base + at + 12 * k..base + at + 12 * k + 12].copy_from_slice(&m);
                    }
                }
            }
            // And random bytes over a stretch of the partitions.
            if rng.coin() {
                let start = log_end + rng.below((b.len() - log_end) as u64) as usize;
                let end = (start + rng.below(4096) as usize).min(b.len());
                for x in &mut b[start..end] {
                    *x = rng.byte();
                }
            }
            let mut f = flash(&cfg);
            f.erase(0, b.len() as u64).unwrap();
            f.write(0, &b).unwrap();
            poke(f, cfg);
        }
    }
}
