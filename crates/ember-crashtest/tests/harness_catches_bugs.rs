//! The harness proves itself on a small log of our own: it passes the correct log over every
//! cut point of a workload of more than 200 operations, and it catches each deliberately
//! broken variant.

#![allow(clippy::unwrap_used)]

use ember_crashtest::{CrashTest, Failure};
use ember_device::{
    BlockDevice, CostModel, DeviceError, FaultyBlock, FaultyFlash, FlashDevice, FlashGeometry,
    MemBlock, SimFlash, TearMode,
};

const SS: u64 = 512;
const MAGIC: u32 = 0x454D_4C47; // "EMLG"
const APPENDS: u32 = 60;

/// How the log writes an append; every variant but `Correct` has a crash bug.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    /// record, sync, header, sync; acknowledged after the second sync.
    Correct,
    /// record, header, sync: the header may reach the medium without the record.
    MissingSync,
    /// Like `Correct`, but the header straddles two sectors, so a cut can tear it.
    StraddlingHeader,
    /// Acknowledges the append before the header is synced.
    EarlyAck,
}

/// The payload of record `i`: 1 to 400 bytes, a function of `i` only.
fn payload(i: u32) -> Vec<u8> {
    (0..(i * 37 % 400 + 1))
        .map(|j| (i as u8).wrapping_mul(31) ^ j as u8)
        .collect()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A tiny block-device log: a header (magic, count, crc32) and record `i` in sector `i + 2`
/// as (len u16, crc32 u32, payload). (The header of the `StraddlingHeader` variant spans
/// sectors 0 and 1.)
struct BlockLog<D: BlockDevice> {
    dev: D,
    count: u32,
    variant: Variant,
}

impl<D: BlockDevice> BlockLog<D> {
    fn header_at(variant: Variant) -> u64 {
        if variant == Variant::StraddlingHeader {
            SS - 6
        } else {
            0
        }
    }

    fn write_header(&mut self, count: u32) -> Result<(), DeviceError> {
        let mut h = [0u8; 12];
        h[..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&count.to_le_bytes());
        let crc = crc32fast::hash(&h[..8]);
        h[8..].copy_from_slice(&crc.to_le_bytes());
        self.dev.write(Self::header_at(self.variant), &h)
    }

    fn create(dev: D, variant: Variant) -> Result<Self, DeviceError> {
        let mut log = BlockLog {
            dev,
            count: 0,
            variant,
        };
        log.write_header(0)?;
        log.dev.sync()?;
        Ok(log)
    }

    fn open(mut dev: D, variant: Variant) -> Result<Self, String> {
        let mut h = [0u8; 12];
        dev.read(Self::header_at(variant), &mut h)
            .map_err(|e| e.to_string())?;
        if u32_at(&h, 0) != MAGIC || u32_at(&h, 8) != crc32fast::hash(&h[..8]) {
            return Err("the header is corrupt".into());
        }
        Ok(BlockLog {
            dev,
            count: u32_at(&h, 4),
            variant,
        })
    }

    /// Appends a record; `Ok(true)` when it is acknowledged as durable.
    fn append(&mut self, data: &[u8]) -> Result<bool, DeviceError> {
        let mut rec = vec![0u8; 6 + data.len()];
        rec[..2].copy_from_slice(&(data.len() as u16).to_le_bytes());
        rec[2..6].copy_from_slice(&crc32fast::hash(data).to_le_bytes());
        rec[6..].copy_from_slice(data);
        self.dev.write(SS * (u64::from(self.count) + 2), &rec)?;
        if self.variant != Variant::MissingSync {
            self.dev.sync()?;
        }
        self.write_header(self.count + 1)?;
        self.count += 1;
        if self.variant == Variant::EarlyAck {
            return Ok(true);
        }
        self.dev.sync()?;
        Ok(true)
    }

    fn get(&mut self, i: u32) -> Result<Vec<u8>, String> {
        let at = SS * (u64::from(i) + 2);
        let mut head = [0u8; 6];
        self.dev.read(at, &mut head).map_err(|e| e.to_string())?;
        let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
        if len > SS as usize - 6 {
            return Err(format!("record {i} has a bad length {len}"));
        }
        let mut data = vec![0u8; len];
        self.dev
            .read(at + 6, &mut data)
            .map_err(|e| e.to_string())?;
        if crc32fast::hash(&data) != u32_at(&head, 2) {
            return Err(format!("record {i} fails its checksum"));
        }
        Ok(data)
    }
}

/// What the workload acknowledged: the number of appends that returned.
#[derive(Default)]
struct Acked(u32);

fn block_crash_test(variant: Variant) -> Result<ember_crashtest::Report, Box<Failure>> {
    CrashTest::new().run(
        || MemBlock::new(((APPENDS + 3) as u64 * SS) as usize),
        |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, acked: &mut Acked| {
            let mut log = BlockLog::create(&mut *dev, variant)?;
            for i in 0..APPENDS {
                if log.append(&payload(i))? {
                    acked.0 = i + 1;
                }
            }
            Ok::<(), DeviceError>(())
        },
        |medium, acked, _cut| {
            // An empty device means the cut came before creation finished: nothing promised.
            if medium.as_bytes().iter().all(|&b| b == 0) {
                return if acked.0 == 0 {
                    Ok(())
                } else {
                    Err("the log vanished".into())
                };
            }
            let mut log = BlockLog::open(medium, variant)?;
            if log.count < acked.0 {
                return Err(format!(
                    "{} appends acknowledged, {} found",
                    acked.0, log.count
                ));
            }
            if log.count > acked.0 + 1 {
                return Err(format!(
                    "{} records found, only {} issued",
                    log.count,
                    acked.0 + 1
                ));
            }
            for i in 0..log.count {
                if log.get(i)? != payload(i) {
                    return Err(format!("record {i} holds the wrong bytes"));
                }
            }
            Ok(())
        },
    )
}

#[test]
fn the_correct_log_survives_every_cut_point() {
    let report = block_crash_test(Variant::Correct).unwrap_or_else(|f| panic!("{f}"));
    assert!(
        report.ops >= 200,
        "workload has only {} operations",
        report.ops
    );
    assert_eq!(
        report.points as u64,
        report.ops + 1,
        "every cut point is tried"
    );
    assert!(!report.sampled);
}

#[test]
fn a_missing_sync_is_caught() {
    let failure = block_crash_test(Variant::MissingSync).expect_err("the bug went unnoticed");
    assert!(
        failure.to_string().contains("EMBER_CRASH_POINT="),
        "{failure}"
    );
}

#[test]
fn a_header_that_can_tear_is_caught() {
    let failure = block_crash_test(Variant::StraddlingHeader).expect_err("the bug went unnoticed");
    assert!(failure.message.contains("corrupt"), "{failure}");
}

#[test]
fn an_early_acknowledgement_is_caught() {
    let failure = block_crash_test(Variant::EarlyAck).expect_err("the bug went unnoticed");
    assert!(failure.message.contains("acknowledged"), "{failure}");
}

#[test]
fn a_failure_replays_from_its_point_and_seed() {
    let failure = block_crash_test(Variant::MissingSync).unwrap_err();
    // Replaying the reported run alone, in a child process with the printed variables,
    // reproduces the same failure.
    let replay = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "replay_target", "--nocapture"])
        .env("EMBER_CRASH_POINT", failure.point.to_string())
        .env("EMBER_CRASH_SEED", format!("{:#x}", failure.seed))
        .env("EMBER_REPLAY_EXPECT", failure.message.clone())
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
}

/// Runs only under `a_failure_replays_from_its_point_and_seed`: with the replay variables set
/// the harness makes exactly one run, which must fail the same way.
#[test]
fn replay_target() {
    let Ok(expect) = std::env::var("EMBER_REPLAY_EXPECT") else {
        return;
    };
    let failure = block_crash_test(Variant::MissingSync).unwrap_err();
    assert_eq!(failure.message, expect);
}

/// A NOR flash log: records (len u16, payload, crc32) appended byte-wise, each followed by a
/// one-byte commit mark programmed from 0xFF to 0x00. Flash writes are durable on return, so
/// the order of the two writes is the whole argument.
fn flash_crash_test(
    mark_first: bool,
    tear: TearMode,
) -> Result<ember_crashtest::Report, Box<Failure>> {
    fn shape_prefix(p: ember_device::FaultPlan) -> ember_device::FaultPlan {
        p.tear(TearMode::Prefix)
    }
    fn shape_bits(p: ember_device::FaultPlan) -> ember_device::FaultPlan {
        p.tear(TearMode::Bits)
    }
    let shape = if tear == TearMode::Prefix {
        shape_prefix
    } else {
        shape_bits
    };
    CrashTest::new().plan(shape).seeds_per_point(3).run(
        || SimFlash::in_memory(FlashGeometry::nor(8192, 512), CostModel::FREE).unwrap(),
        |dev: &mut FaultyFlash<SimFlash<MemBlock<Vec<u8>>>>, acked: &mut Acked| {
            let mut at = 0u64;
            for i in 0..40 {
                let data = payload(i % 7 + 1);
                let mut rec = (data.len() as u16).to_le_bytes().to_vec();
                rec.extend_from_slice(&data);
                rec.extend_from_slice(&crc32fast::hash(&data).to_le_bytes());
                let mark = at + rec.len() as u64;
                if mark_first {
                    dev.write(mark, &[0])?;
                    dev.write(at, &rec)?;
                } else {
                    dev.write(at, &rec)?;
                    dev.write(mark, &[0])?;
                }
                acked.0 = i + 1;
                at = mark + 1;
            }
            Ok::<(), DeviceError>(())
        },
        |mut flash, acked, _| {
            // Scan: a record counts if its mark is programmed; it must then be intact.
            let mut at = 0u64;
            let mut found = 0;
            loop {
                let mut len = [0u8; 2];
                flash.read(at, &mut len).map_err(|e| e.to_string())?;
                let n = u64::from(u16::from_le_bytes(len));
                if n == 0xFFFF || at + 2 + n + 5 > 8192 {
                    break;
                }
                let mut body = vec![0u8; n as usize + 5];
                flash.read(at + 2, &mut body).map_err(|e| e.to_string())?;
                if body[n as usize + 4] != 0 {
                    break; // not committed: the end of the log
                }
                let crc = u32_at(&body, n as usize);
                if crc != crc32fast::hash(&body[..n as usize]) {
                    return Err(format!("committed record {found} fails its checksum"));
                }
                found += 1;
                at += 2 + n + 5;
            }
            if found < acked.0 {
                return Err(format!("{} appends acknowledged, {found} found", acked.0));
            }
            Ok(())
        },
    )
}

#[test]
fn the_flash_log_survives_torn_writes_of_both_kinds() {
    for tear in [TearMode::Prefix, TearMode::Bits] {
        let r = flash_crash_test(false, tear).unwrap_or_else(|f| panic!("{f}"));
        assert!(r.ops >= 80 && r.runs == 3 * r.points);
    }
}

#[test]
fn a_commit_mark_written_before_its_record_is_caught() {
    // A clean prefix keeps the length field and loses the checksum: caught. (Torn bits
    // almost always garble the length too, which this scan reads as the end of the log.)
    let f = flash_crash_test(true, TearMode::Prefix).expect_err("the bug went unnoticed");
    assert!(f.message.contains("checksum"), "{f}");
}

#[test]
fn a_workload_that_fails_without_a_cut_is_reported() {
    let f = CrashTest::new()
        .run(
            || MemBlock::new(512),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, _: &mut Acked| dev.write(1000, &[1]),
            |_, _, _| Ok(()),
        )
        .unwrap_err();
    assert!(f.message.contains("without any power cut"), "{f}");
}

#[test]
fn a_panicking_checker_is_a_failure_with_its_cut_point() {
    let f = CrashTest::new()
        .run(
            || MemBlock::new(1024),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, _: &mut Acked| {
                dev.write(0, &[1])?;
                dev.sync()
            },
            |medium, _, _| {
                let b = medium.as_bytes();
                // An "engine" that indexes with a byte it read: panics on some cut.
                let v = [0u8; 1][usize::from(b[0])];
                if v == 0 {
                    Ok(())
                } else {
                    Err("unreachable".into())
                }
            },
        )
        .unwrap_err();
    assert!(f.message.contains("panicked"), "{f}");
    assert!(f.to_string().contains("EMBER_CRASH_POINT="));
}

#[test]
fn a_workload_that_differs_between_runs_is_caught() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let f = CrashTest::new()
        .run(
            || MemBlock::new(8192),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, _: &mut Acked| {
                // Writes somewhere else on every run, like iterating a randomly seeded map.
                let run = RUNS.fetch_add(1, Ordering::Relaxed);
                dev.write(0, &[1])?;
                dev.write(512 * (1 + run % 8), &[2])?;
                dev.sync()
            },
            |_, _, _| Ok(()),
        )
        .unwrap_err();
    assert!(f.message.contains("not deterministic"), "{f}");
}
