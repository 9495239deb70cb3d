//! A corrupted sector anywhere gives a clean error naming the structure, or — where the
//! corruption hits bytes nothing reads — the right data; never a panic, never wrong rows.
//! The database has index pages of two levels (table `g`), so they are covered too.

#![allow(clippy::unwrap_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use ember_device::{BlockDevice, MemBlock};
use ember_table::{Database, FormatOptions, IndexKind, Mode, Options, Schema, Value};

const DEV: usize = 2 << 20;

fn options() -> Options {
    Options {
        mode: Mode::Full,
        format: FormatOptions {
            log_bytes: Some(64 * 1024),
            meta_bytes: Some(64 * 1024),
            root_bytes: Some(4096),
            ..FormatOptions::default()
        },
        block_size: 1024,
        ..Options::default()
    }
}

fn expected(i: i64) -> Vec<Value> {
    vec![
        Value::Integer(i),
        Value::Text(format!("row {i} {}", "z".repeat((i % 40) as usize))),
    ]
}

/// Rows of each table.
const TABLES: [(&str, IndexKind, i64); 3] = [
    ("h", IndexKind::Hash, 60),
    ("r", IndexKind::Tree, 40),
    ("g", IndexKind::Tree, 100),
];

/// A small database: three tables, some rows checkpointed, some only in the journal.
fn build() -> Vec<u8> {
    let mut db = Database::create(MemBlock::new(DEV), options()).unwrap();
    for (t, kind, n) in TABLES {
        let schema = Schema::key_value("INTEGER", "TEXT", kind);
        db.create_table(t, schema).unwrap();
        // For `g`, enough rows for an index of two levels.
        for i in 0..n.max(40).min(if t == "g" { n } else { 40 }) {
            db.insert(t, &expected(i)).unwrap();
        }
    }
    db.checkpoint().unwrap();
    for i in 40..60 {
        db.insert("h", &expected(i)).unwrap();
    }
    let mut bytes = vec![0u8; DEV];
    db.device().read(0, &mut bytes).unwrap();
    bytes
}

/// Opens, looks up, scans and looks up everything again, twice: with no buffer, where every
/// lookup takes its row's tuple alone from the device (the header sector and the tuple),
/// and with the default buffer, where lookups read whole blocks or find the scan's. `Err` is
/// a clean failure, wrong rows are a bug.
fn exercise(bytes: Vec<u8>) -> Result<(), String> {
    for buffer_bytes in [0, options().buffer_bytes] {
        let opts = Options {
            buffer_bytes,
            ..options()
        };
        let dev = MemBlock::from_backing(bytes.clone());
        let mut db = Database::open(dev, opts).map_err(|e| e.to_string())?;
        for (t, _, n) in TABLES {
            let get_all = |db: &mut Database<_>| -> Result<(), String> {
                for i in 0..n {
                    if let Some(r) = db.get(t, &[Value::Integer(i)]).map_err(|e| e.to_string())? {
                        assert_eq!(r, expected(i), "wrong data returned from {t}");
                    }
                }
                Ok(())
            };
            get_all(&mut db)?;
            let rows = db.scan(t).map_err(|e| e.to_string())?;
            for r in &rows {
                let Value::Integer(k) = r[0] else {
                    panic!("wrong data: a row without its key in {t}: {r:?}");
                };
                assert_eq!(*r, expected(k), "wrong data returned from {t}");
            }
            get_all(&mut db)?;
        }
    }
    Ok(())
}

#[test]
fn every_corrupted_sector_is_a_clean_error_or_harmless() {
    let good = build();
    exercise(good.clone()).unwrap();
    let used: Vec<usize> = (0..DEV / 512)
        .filter(|&s| good[s * 512..(s + 1) * 512].iter().any(|&b| b != 0))
        .collect();
    let mut errors = 0;
    let mut index_errors = 0;
    for &s in &used {
        for (at, flip) in [(0usize, 0x01u8), (100, 0x80), (511, 0x10)] {
            let mut bad = good.clone();
            bad[s * 512 + at] ^= flip;
            match catch_unwind(AssertUnwindSafe(|| exercise(bad))) {
                Ok(Ok(())) => {}
                Ok(Err(msg)) => {
                    errors += 1;
                    index_errors += usize::from(msg.contains("index page"));
                    assert!(!msg.is_empty());
                }
                Err(_) => panic!("a flipped bit in sector {s} (byte {at}) made the engine panic"),
            }
        }
    }
    assert!(errors > 0, "no corruption was noticed at all");
    assert!(index_errors > 0, "no corrupted index page was noticed");
    eprintln!(
        "{} sectors in use, {errors} corruptions reported cleanly",
        used.len()
    );
}
