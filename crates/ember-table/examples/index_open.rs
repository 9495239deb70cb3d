//! What opening a table costs, and what a checkpoint after a few random updates writes.
//!
//! Builds a table of `--n` rows (8-byte integer key, 100-byte value) on an in-memory device
//! in metadata mode, closes it, then
//! - opens it `--opens` times through `ember_device::Accounted` and prints the median open
//!   time and the bytes read by one open, next to the bytes of the table's data blocks;
//! - runs `--updates` random updates (one transaction each), then one checkpoint, and prints
//!   the bytes the checkpoint wrote (and, of those, the META_ZONE's).
//!
//! ```text
//! cargo run --release -p ember-table --example index_open -- [--n 100000] [--updates 1000] [--opens 7]
//! ```

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use ember_device::{Accounted, MemBlock, SplitMix64};
use ember_table::{Database, IndexKind, Mode, Options, Schema, Value};

mod common;
use common::arg;

fn main() {
    let n = arg("--n", 100_000) as i64;
    let updates = arg("--updates", 1000);
    let opens = arg("--opens", 7) as usize;
    let tree = std::env::args().any(|a| a == "--tree");
    let opts = Options {
        mode: Mode::Metadata,
        ..Options::default()
    };
    let schema = Schema::key_value(
        "INTEGER",
        "BLOB",
        if tree {
            IndexKind::Tree
        } else {
            IndexKind::Hash
        },
    );
    let mut rng = SplitMix64::new(7);
    let mut value = || Value::Blob((0..100).map(|_| rng.byte()).collect());
    let mut db = Database::create(MemBlock::new(256 << 20), opts).unwrap();
    db.create_table("t", schema).unwrap();
    let mut k = 0;
    while k < n {
        db.begin().unwrap();
        for _ in 0..1000.min(n - k) {
            db.insert("t", &[Value::Integer(k), value()]).unwrap();
            k += 1;
        }
        db.commit().unwrap();
    }
    let data = db.device_bytes_in_use();
    let mut dev = db.close().unwrap();

    let mut times = Vec::new();
    let mut read = 0;
    for _ in 0..opens {
        let mut acc = Accounted::new(dev);
        let t0 = Instant::now();
        let db = Database::open(&mut acc, opts).unwrap();
        times.push(t0.elapsed().as_secs_f64());
        drop(db);
        read = acc.stats().read_bytes;
        dev = acc.into_inner();
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "rows {n}: open median {:.3} ms, {read} bytes read by open; {data} bytes allocated \
         (data blocks and index pages)",
        times[times.len() / 2] * 1e3
    );

    let mut acc = Accounted::new(dev);
    let mut db = Database::open(&mut acc, opts).unwrap();
    let mut rng = SplitMix64::new(11);
    for _ in 0..updates {
        let key = rng.below(n as u64) as i64;
        let v = Value::Blob((0..100).map(|_| rng.byte()).collect());
        assert!(db.update("t", &[Value::Integer(key), v]).unwrap());
    }
    let before = db.device().stats();
    db.checkpoint().unwrap();
    let ck = db.device().stats().since(&before);
    println!(
        "checkpoint after {updates} random updates: {} bytes written in {} writes, {} syncs",
        ck.write_bytes, ck.writes, ck.syncs
    );
}
