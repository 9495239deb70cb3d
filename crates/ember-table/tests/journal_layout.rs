//! The journal asks the device for a layout made for appends
//! (`BlockDevice::prepare_appends`: on a file, 64 KiB pages of the page cache) only in the
//! modes that sync it in bulk; in `full`, where every commit syncs it, a plain `prepare`
//! (4 KiB pages, so a sync after one record writes 4 KiB back, not 64).

#![allow(clippy::unwrap_used)]

use ember_device::{BlockDevice, MemBlock, Result};
use ember_table::{Database, IndexKind, Mode, Options, Schema, Value};

/// A memory device that counts the two kinds of prepare.
struct Counting {
    dev: MemBlock<Vec<u8>>,
    plain: u64,
    appends: u64,
}

impl BlockDevice for Counting {
    fn sector_size(&self) -> u32 {
        self.dev.sector_size()
    }
    fn capacity(&self) -> u64 {
        self.dev.capacity()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.dev.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.dev.write(offset, data)
    }
    fn sync(&mut self) -> Result<()> {
        self.dev.sync()
    }
    fn resize(&mut self, new_len: u64) -> Result<()> {
        self.dev.resize(new_len)
    }
    fn prepare(&mut self, _offset: u64, _len: u64) {
        self.plain += 1;
    }
    fn prepare_appends(&mut self, _offset: u64, _len: u64) {
        self.appends += 1;
    }
}

/// (plain prepares, prepares for appends) over 200 one-row commits in `mode`, the first
/// database created and the second opened on the same bytes.
fn prepares(mode: Mode) -> (u64, u64) {
    let dev = Counting {
        dev: MemBlock::new(16 << 20),
        plain: 0,
        appends: 0,
    };
    let opts = || Options {
        mode,
        ..Options::default()
    };
    let mut db = Database::create(dev, opts()).unwrap();
    db.create_table("t", Schema::key_value("INTEGER", "BLOB", IndexKind::Tree))
        .unwrap();
    for k in 0..100i64 {
        db.insert("t", &[Value::Integer(k), Value::Blob(vec![7; 100])])
            .unwrap();
    }
    let dev = db.close().unwrap();
    let mut db = Database::open(dev, opts()).unwrap();
    for k in 100..200i64 {
        db.insert("t", &[Value::Integer(k), Value::Blob(vec![7; 100])])
            .unwrap();
    }
    let dev = db.close().unwrap();
    (dev.plain, dev.appends)
}

#[test]
fn only_a_journal_synced_in_bulk_is_prepared_for_appends() {
    let (plain, appends) = prepares(Mode::Full);
    assert_eq!(appends, 0, "full mode syncs every record");
    assert!(plain >= 200, "full: {plain} plain prepares");
    for mode in [Mode::Metadata, Mode::Data] {
        let (_, appends) = prepares(mode);
        // Every commit's record, after the create and after the open.
        assert!(appends >= 200, "{mode:?}: {appends} prepares for appends");
    }
}
