//! The update and scan paths in isolation, for profiling (`perf`, `valgrind --tool=callgrind`).
//!
//! Loads `--n` rows in key order (transactions of 1,000, as db_bench's untimed load does:
//! a 16-byte decimal BLOB key and a 100-byte BLOB value, or with `--ycsb` an 8-byte integer
//! key and five 100-byte BLOB columns), then runs `--updates` updates of uniformly random
//! keys (one transaction each) and `--scans` full scans, in metadata mode on a file image
//! (`--dir`, default the system's temporary directory) or with `--mem` on an in-memory
//! device. Prints each phase's time, the device bytes written and the table's blocks.
//!
//! ```text
//! cargo run --release -p ember-table --example overwrite -- [--n 100000] [--updates N] [--scans 1] [--ycsb] [--mem]
//! ```

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use ember_device::{Accounted, BlockDevice, MemBlock, SplitMix64, file::FileBlock};
use ember_table::{Column, Database, IndexKind, Mode, Options, Schema, Value};

mod common;
use common::arg;

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

struct Shape {
    ycsb: bool,
}

impl Shape {
    fn schema(&self) -> Schema {
        let cols = if self.ycsb { 5 } else { 1 };
        let mut columns = vec![Column {
            name: "k".into(),
            decl_type: if self.ycsb { "INTEGER" } else { "BLOB" }.into(),
            not_null: true,
        }];
        for i in 0..cols {
            columns.push(Column {
                name: format!("f{i}"),
                decl_type: "BLOB".into(),
                not_null: false,
            });
        }
        Schema {
            columns,
            primary_key: vec![0],
            index: IndexKind::Tree,
        }
    }

    fn row(&self, k: u64, rng: &mut SplitMix64) -> Vec<Value> {
        let mut value = || Value::Blob((0..100).map(|_| rng.byte()).collect());
        if self.ycsb {
            let mut r = vec![Value::Integer(k as i64)];
            r.extend((0..5).map(|_| value()));
            r
        } else {
            vec![Value::Blob(format!("{k:016}").into_bytes()), value()]
        }
    }
}

fn run<D: BlockDevice>(dev: D, shape: &Shape) -> D {
    let n = arg("--n", 100_000);
    let updates = arg("--updates", n);
    let scans = arg("--scans", 1);
    let opts = Options {
        mode: Mode::Metadata,
        buffer_bytes: 2 << 20,
        ..Options::default()
    };
    let mut rng = SplitMix64::new(7);
    let mut db = Database::create(Accounted::new(dev), opts).unwrap();
    db.create_table("t", shape.schema()).unwrap();
    let t = Instant::now();
    let mut k = 0;
    while k < n {
        db.begin().unwrap();
        for _ in 0..1000.min(n - k) {
            db.insert("t", &shape.row(k, &mut rng)).unwrap();
            k += 1;
        }
        db.commit().unwrap();
    }
    let w0 = db.device().stats().write_bytes;
    println!("load {n} rows: {:.2} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..updates {
        let k = rng.below(n);
        assert!(db.update("t", &shape.row(k, &mut rng)).unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    let w1 = db.device().stats().write_bytes;
    println!(
        "{updates} updates: {secs:.2} s, {:.0} ops/s, {:.0} device bytes an update",
        updates as f64 / secs,
        (w1 - w0) as f64 / updates.max(1) as f64
    );
    for _ in 0..scans {
        let t = Instant::now();
        let mut rows = 0u64;
        db.range_visit(
            "t",
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            Default::default(),
            |_| {
                rows += 1;
                Ok(())
            },
        )
        .unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(rows, n);
        println!("scan (visit): {secs:.3} s, {:.0} rows/s", n as f64 / secs);
        let t = Instant::now();
        let all = db.scan("t").unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(all.len() as u64, n);
        println!("scan (rows): {secs:.3} s, {:.0} rows/s", n as f64 / secs);
    }
    let bytes = db.device_bytes_in_use();
    println!("device bytes in use: {bytes}");
    db.close().unwrap().into_inner()
}

fn main() {
    let shape = Shape {
        ycsb: flag("--ycsb"),
    };
    if flag("--mem") {
        run(MemBlock::new(1 << 30), &shape);
    } else {
        let dir = std::env::args()
            .position(|a| a == "--dir")
            .and_then(|i| std::env::args().nth(i + 1))
            .unwrap_or_else(|| std::env::temp_dir().display().to_string());
        let path = std::path::Path::new(&dir).join("ember-overwrite.img");
        run(FileBlock::create(&path, 4 << 30).unwrap(), &shape);
        std::fs::remove_file(&path).unwrap();
    }
}
