//! The heap a full scan takes, for `valgrind --tool=massif` (a scan reads the primary index
//! a chunk at a time, so its peak should not grow with the table):
//!
//! ```text
//! cargo build --release -p ember-table --example scan_memory
//! target/release/examples/scan_memory build /tmp/t.img 100000
//! valgrind --tool=massif --massif-out-file=/tmp/m.out target/release/examples/scan_memory scan /tmp/t.img
//! ms_print /tmp/m.out | head -40
//! ```
//!
//! `build` writes a table of N rows (8-byte integer keys, 100-byte BLOB values, the index
//! checkpointed) to a file image and closes it; `scan` opens it and visits every row once,
//! keeping none, with a 1 MiB block buffer (`--desc`: from the high end).

#![allow(clippy::unwrap_used)]

use std::ops::Bound;

use ember_device::file::FileBlock;
use ember_table::{Database, IndexKind, Mode, Options, Order, Schema, Value};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opts = Options {
        mode: Mode::Metadata,
        buffer_bytes: 1 << 20,
        ..Options::default()
    };
    match args.get(1).map(String::as_str) {
        Some("build") => {
            let n: i64 = args[3].parse().unwrap();
            let dev = FileBlock::create(&args[2], (n as u64 * 400).max(64 << 20)).unwrap();
            let mut db = Database::create(dev, opts).unwrap();
            let schema = Schema::key_value("INTEGER", "BLOB", IndexKind::Tree);
            db.create_table("t", schema).unwrap();
            for c in 0..(n + 999) / 1000 {
                db.begin().unwrap();
                for k in c * 1000..((c + 1) * 1000).min(n) {
                    db.insert("t", &[Value::Integer(k), Value::Blob(vec![7; 100])])
                        .unwrap();
                }
                db.commit().unwrap();
            }
            db.close().unwrap();
        }
        Some("scan") => {
            let mut db = Database::open(FileBlock::open(&args[2]).unwrap(), opts).unwrap();
            let order = if args.iter().any(|a| a == "--desc") {
                Order::desc(None)
            } else {
                Order::asc(None)
            };
            let mut rows = 0u64;
            db.range_visit("t", Bound::Unbounded, Bound::Unbounded, order, |_| {
                rows += 1;
                Ok(())
            })
            .unwrap();
            println!("{rows} rows");
        }
        _ => eprintln!("usage: scan_memory build PATH N | scan PATH [--desc]"),
    }
}
