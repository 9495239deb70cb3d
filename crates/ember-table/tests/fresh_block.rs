//! A block made by the committing transaction carries its header in the same device write as
//! its first tuple — and, when the block is the spill block the previous record reserved, the
//! transaction's journal record too: a 4 KiB row in full mode is one 9-sector write (header,
//! slot, record and tuple) and one sync. A cut between header, record and tuple is impossible
//! by construction — they are one write — and a power cut that tears that write, or loses part
//! of it from the volatile cache before the sync returned, leaves the block unallocated and
//! the row absent after recovery.

#![allow(clippy::unwrap_used)]

use ember_device::{
    BlockDevice, CutOutcome, FaultPlan, FaultyBlock, MemBlock, PowerFail, Result as DevResult,
};
use ember_table::{Database, IndexKind, Mode, Options, Schema, TableError, Value};

const DEV: usize = 8 << 20;

/// Passes everything through and logs writes (offset, length) and syncs (`None`).
struct Log<D> {
    dev: D,
    ops: Vec<Option<(u64, usize)>>,
}

impl<D: BlockDevice> BlockDevice for Log<D> {
    fn sector_size(&self) -> u32 {
        self.dev.sector_size()
    }
    fn capacity(&self) -> u64 {
        self.dev.capacity()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        self.dev.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> DevResult<()> {
        self.ops.push(Some((offset, data.len())));
        self.dev.write(offset, data)
    }
    fn sync(&mut self) -> DevResult<()> {
        self.ops.push(None);
        self.dev.sync()
    }
    fn resize(&mut self, new_len: u64) -> DevResult<()> {
        self.dev.resize(new_len)
    }
}

fn opts() -> Options {
    Options {
        mode: Mode::Full,
        ..Options::default()
    }
}

fn row(k: i64) -> Vec<Value> {
    let v = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ k as u8)
        .collect();
    vec![Value::Integer(k), Value::Blob(v)]
}

/// Creates the database and inserts rows 1 to `rows`, one synced commit each.
fn workload<D: BlockDevice>(dev: D, rows: i64) -> Result<(), TableError> {
    let mut db = Database::create(dev, opts())?;
    db.create_table("t", Schema::key_value("INTEGER", "BLOB", IndexKind::Hash))?;
    for k in 1..=rows {
        db.insert("t", &row(k))?;
    }
    Ok(())
}

/// Data bytes in use after a reopen of the database with rows 1 to `rows`.
fn in_use_after_reopen(rows: i64) -> u64 {
    let mut fb = FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(0).write_through());
    workload(&mut fb, rows).unwrap();
    let db = Database::open(fb.power_off().0, opts()).unwrap();
    db.device_bytes_in_use()
}

#[test]
fn a_torn_first_write_leaves_the_block_unallocated_and_the_row_absent() {
    // The reference run: what the second insert writes, and where.
    let mut fb = FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(0).write_through());
    let mut log = Log {
        dev: &mut fb,
        ops: Vec::new(),
    };
    workload(&mut log, 2).unwrap();
    let (one_row, two_rows) = (in_use_after_reopen(1), in_use_after_reopen(2));
    assert!(two_rows > one_row);
    let ops = log.ops;
    let n = ops.len();
    // The commit of row 2: header + slot + record + tuple in one 9-sector write, one sync —
    // nothing else (row 1's record, in the journal, reserved the block).
    let Some((block_at, 4608)) = ops[n - 2] else {
        panic!(
            "the commit's write is not the 9-sector block write: {:?}",
            &ops[n - 3..]
        )
    };
    assert_eq!(ops[n - 1], None);
    assert_eq!(fb.ops(), n as u64);
    let first = (n - 2) as u64;
    let (medium, _) = fb.power_off();
    let block_at = block_at as usize;
    let image = medium.as_bytes()[block_at..block_at + 4608].to_vec();
    // Its first sector holds the header, the journal record and the start of the tuple.
    assert_eq!(&image[..4], b"EMSL");
    let header = u32::from_le_bytes(image[12..16].try_into().unwrap()) as usize;
    assert_eq!(&image[header..header + 4], b"EMJR");
    // The block was never written before (a fresh device reads as zeros): every sector of
    // the write differs from what it replaces, so what landed can be told sector by sector.
    for s in 0..9 {
        assert!(
            image[s * 512..(s + 1) * 512].iter().any(|&b| b != 0),
            "sector {s} of the block write is all zeros"
        );
    }

    let (mut torn, mut lost_after_record, mut present, mut absent) = (0, 0, 0, 0);
    for cut in first..first + 2 {
        for seed in 0..24 {
            for write_through in [false, true] {
                let mut plan = FaultPlan::cut_at(cut, seed);
                if write_through {
                    plan = plan.write_through();
                }
                let mut fb = FaultyBlock::new(MemBlock::new(DEV), plan);
                let r = workload(&mut fb, 2);
                assert!(r.is_err(), "the cut falls in the second insert");
                let (medium, pc) = fb.power_off();
                let landed = (0..9)
                    .filter(|&s| {
                        medium.as_bytes()[block_at + s * 512..block_at + (s + 1) * 512]
                            == image[s * 512..(s + 1) * 512]
                    })
                    .count();
                if cut == first {
                    // The cut interrupts the block write itself: some of its sectors landed.
                    let CutOutcome::Sectors { landed: l, of: 9 } = pc.outcome else {
                        panic!("{pc:?}")
                    };
                    assert_eq!(landed as u64, l);
                    if l > 0 && l < 9 {
                        torn += 1;
                    }
                } else if landed < 9 {
                    lost_after_record += 1;
                }
                let ctx = format!("cut at {cut} (first {first}), seed {seed}, {landed}/9 landed");
                let mut db =
                    Database::open(medium, opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                db.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(db.get("t", &[Value::Integer(1)]).unwrap(), Some(row(1)));
                match db.get("t", &[Value::Integer(2)]).unwrap() {
                    Some(r) => {
                        assert_eq!(r, row(2), "{ctx}");
                        assert_eq!(landed, 9, "{ctx}: the row is back from a partial write");
                        assert_eq!(db.device_bytes_in_use(), two_rows, "{ctx}");
                        present += 1;
                    }
                    None => {
                        // The block is free again: the data zone holds row 1's block only.
                        assert_eq!(db.device_bytes_in_use(), one_row, "{ctx}");
                        assert_eq!(db.row_count("t").unwrap(), 1);
                        absent += 1;
                    }
                }
                if landed < 9 {
                    assert!(
                        db.get("t", &[Value::Integer(2)]).unwrap().is_none(),
                        "{ctx}"
                    );
                }
            }
        }
    }
    // The cuts did tear the block write, did lose parts of it from the cache at the sync,
    // and both outcomes occurred.
    assert!(torn > 0, "no torn block write");
    assert!(lost_after_record > 0, "no block write lost from the cache");
    assert!(
        present > 0 && absent > 0,
        "present {present}, absent {absent}"
    );
}

/// Recovery rebuilds a replayed fresh block's image in RAM, and the checkpoint that ends
/// recovery writes its first sector from that image: the records spilled into such blocks
/// must be in it, or a second power cut during that checkpoint (before the journal is
/// emptied) would find them gone and lose the commits after them.
#[test]
fn recovery_keeps_the_spilled_records_in_their_blocks() {
    let mut fb = FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(0).write_through());
    workload(&mut fb, 6).unwrap();
    let (medium, _) = fb.power_off();
    let before = medium.as_bytes().to_vec();
    // Rows 2 to 6 spilled their records into their blocks: find them by their magic numbers.
    let spilled: Vec<(usize, usize)> = (0..before.len() / 512)
        .map(|s| s * 512)
        .filter(|&at| &before[at..at + 4] == b"EMSL")
        .filter_map(|at| {
            let header = u32::from_le_bytes(before[at + 12..at + 16].try_into().unwrap());
            let rec = at + header as usize;
            (&before[rec..rec + 4] == b"EMJR").then(|| {
                let len = u32::from_le_bytes(before[rec + 12..rec + 16].try_into().unwrap());
                (rec, len as usize)
            })
        })
        .collect();
    assert_eq!(spilled.len(), 5, "{spilled:?}");
    let mut db = Database::open(medium, opts()).unwrap();
    db.verify().unwrap();
    for k in 1..=6 {
        assert_eq!(db.get("t", &[Value::Integer(k)]).unwrap(), Some(row(k)));
    }
    let after = db.close().unwrap();
    for (rec, len) in spilled {
        assert_eq!(
            after.as_bytes()[rec..rec + len],
            before[rec..rec + len],
            "the record at byte {rec} was overwritten"
        );
    }
}

/// Rows 1 to 8, one synced commit each (rows 2 to 8 spill their records into their blocks),
/// then rows 2 to 5 deleted (their blocks given back), and no checkpoint: all of it is left
/// for recovery to replay.
fn replay_left(dev: &mut FaultyBlock<MemBlock<Vec<u8>>>) {
    let mut db = Database::create(&mut *dev, opts()).unwrap();
    db.create_table("t", Schema::key_value("INTEGER", "BLOB", IndexKind::Tree))
        .unwrap();
    for k in 1..=8 {
        db.insert("t", &row(k)).unwrap();
    }
    for k in 2..=5 {
        assert!(db.delete("t", &[Value::Integer(k)]).unwrap());
    }
}

/// A second power cut, at any point of the checkpoint that ends recovery, loses nothing: the
/// replayed records' spilled bytes and the blocks they give back are left as they were until
/// the journal is emptied.
#[test]
fn a_cut_during_the_checkpoint_that_ends_recovery_loses_nothing() {
    let left = || {
        let mut fb = FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(0).write_through());
        replay_left(&mut fb);
        fb.power_off().0
    };
    let mut fb = FaultyBlock::new(left(), FaultPlan::run_to_end(0));
    Database::open(&mut fb, opts()).unwrap();
    let recovery_ops = fb.ops();
    assert!(
        recovery_ops >= 5,
        "recovery wrote little: {recovery_ops} operations"
    );
    for cut in 0..recovery_ops {
        for seed in 0..6 {
            let mut fb = FaultyBlock::new(left(), FaultPlan::cut_at(cut, seed));
            assert!(Database::open(&mut fb, opts()).is_err(), "cut {cut} missed");
            let (medium, _) = fb.power_off();
            let ctx = format!("cut {cut} of {recovery_ops}, seed {seed}");
            let mut db = Database::open(medium, opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            db.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            for k in 1..=8 {
                let want = (k == 1 || k > 5).then(|| row(k));
                assert_eq!(
                    db.get("t", &[Value::Integer(k)]).unwrap(),
                    want,
                    "{ctx}: row {k}"
                );
            }
        }
    }
}
