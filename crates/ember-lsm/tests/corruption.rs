//! Flipped bits in the stored blocks: every data block, index block and bloom filter is
//! checked on read, and so is every value read from a value blob (against the checksum in
//! its pointer), so a flipped bit gives a clean error (naming the table or blob and the
//! offset) or — where the bit lies outside anything read — the right data; never a panic
//! and never a wrong value. Flips anywhere else on the device never panic.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use ember_device::MemBlock;
use ember_lsm::LsmError;

/// The device, the root locator, the contents, and the device ranges of every table.
type Built = (
    MemBlock<Vec<u8>>,
    Vec<u8>,
    BTreeMap<Vec<u8>, Vec<u8>>,
    Vec<(u64, u64)>,
);

/// Options whose tables have prefix filters (key without its last byte), so both filter
/// block kinds meet the flipped bits.
fn opts() -> ember_lsm::Options {
    ember_lsm::Options {
        prefix_rule: Some(ember_lsm::PrefixRule {
            kind: b'k',
            suffix: 1,
        }),
        ..common::tiny()
    }
}

fn build() -> Built {
    let (db, root) = common::fresh_on(2 << 20, opts());
    let mut model = BTreeMap::new();
    for i in 0..400u32 {
        let k = format!("k{:04}", (i * 37) % 300).into_bytes();
        let v = format!("value-{i}-{}", "x".repeat((i % 40) as usize)).into_bytes();
        db.put(&k, &v, false).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    while db.step().unwrap() {}
    // Byte ranges of every table and value blob on the device.
    let mut ranges = Vec::new();
    let blobs = db.tables().into_iter().map(|(_, t)| (t.id, t.size)).chain(
        db.value_blobs()
            .into_iter()
            .map(|v| (v.id, v.values + ember_lsm::vlog::HEADER as u64)),
    );
    assert!(
        !db.value_blobs().is_empty(),
        "values of 32 bytes or more are kept apart"
    );
    for (id, size) in blobs {
        let ext = db.with_env(|e| e.extents(id)).unwrap();
        let mut left = size;
        for (off, len) in ext {
            let n = len.min(left);
            ranges.push((off, n));
            left -= n;
        }
    }
    assert!(db.level_counts().iter().filter(|&&n| n > 0).count() >= 2);
    (common::shut(db), root, model, ranges)
}

/// Opens and reads everything; `Ok(false)` if something failed cleanly.
fn read_all(
    dev: &mut MemBlock<Vec<u8>>,
    root: &[u8],
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<bool, String> {
    let db = match common::open(&mut *dev, root, opts()) {
        Ok(db) => db,
        Err(_) => return Ok(false),
    };
    let mut clean = true;
    let mut it = db.iter();
    let mut want = model.iter();
    for r in it.by_ref() {
        match r {
            Ok((k, v)) => {
                let w = want.next();
                if w != Some((&k, &v)) {
                    return Err(format!("iterator gave {k:?} = {v:?}, expected {w:?}"));
                }
            }
            Err(e) => {
                assert!(matches!(e, LsmError::Corrupt { .. }), "{e}");
                clean = false;
            }
        }
    }
    for (k, v) in model {
        match db.get(k) {
            Ok(Some(got)) if got == *v => {}
            Ok(other) => return Err(format!("get({k:?}) gave {other:?}, expected {v:?}")),
            Err(e) => {
                assert!(matches!(e, LsmError::Corrupt { .. }), "{e}");
                clean = false;
            }
        }
        // A probe through the prefix filters.
        let end = [k.as_slice(), &[0]].concat();
        match db.probe(k, &end, Some(&k[..k.len() - 1])) {
            Ok(got) if got == [(k.clone(), v.clone())] => {}
            Ok(other) => return Err(format!("probe({k:?}) gave {other:?}, expected {v:?}")),
            Err(e) => {
                assert!(matches!(e, LsmError::Corrupt { .. }), "{e}");
                clean = false;
            }
        }
    }
    Ok(clean)
}

#[test]
fn flipped_bits_in_tables_give_clean_errors_never_wrong_data() {
    let (dev, root, model, ranges) = build();
    let mut errors = 0;
    let mut tried = 0;
    for &(off, len) in &ranges {
        for at in (off..off + len).step_by(41) {
            let mut b = dev.clone().into_inner();
            b[at as usize] ^= 1 << (at % 8);
            let mut d = MemBlock::from_backing(b);
            tried += 1;
            match read_all(&mut d, &root, &model) {
                Ok(true) => {}
                Ok(false) => errors += 1,
                Err(e) => panic!("flip at device offset {at}: {e}"),
            }
        }
    }
    assert!(tried > 100, "{tried} flips");
    assert!(
        errors * 10 > tried * 9,
        "only {errors} of {tried} flips were detected"
    );
}

#[test]
fn flipped_bits_anywhere_never_panic() {
    let (dev, root, model, _) = build();
    let len = dev.as_bytes().len();
    for at in (0..len).step_by(4093) {
        let mut b = dev.clone().into_inner();
        b[at] ^= 0x10;
        let mut d = MemBlock::from_backing(b);
        // Any outcome but a panic: the space manager's and the manifest's own checks decide
        // what a flip outside the tables means.
        let _ = read_all(&mut d, &root, &model);
    }
}
