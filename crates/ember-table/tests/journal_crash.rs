//! The journal under power cuts: every record acknowledged by a sync is recovered, in order,
//! with the exact bytes; nothing is recovered that was never written; a checkpoint is atomic.

#![allow(clippy::unwrap_used)]

use ember_crashtest::CrashTest;
use ember_device::{FaultyBlock, MemBlock, TearMode};
use ember_table::{Journal, TableError};

const START: u64 = 1024;
const LEN: u64 = 12 * 1024;

fn payload(i: u64) -> Vec<u8> {
    (0..(i * 211 % 1300 + 1))
        .map(|j| (i.wrapping_mul(7) ^ j) as u8)
        .collect()
}

/// What the workload knows: payloads by LSN, the highest LSN made durable, and the
/// checkpoints completed and in flight.
#[derive(Default)]
struct State {
    payloads: Vec<Vec<u8>>,
    synced: u64,
    ckpt: u64,
    ckpt_in_flight: Option<u64>,
}

#[test]
fn acknowledged_records_survive_every_cut() {
    let report = CrashTest::new()
        .seeds_per_point(2)
        .run(
            || MemBlock::new((START + LEN) as usize),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut State| {
                let mut j = Journal::format(dev, START, LEN)?;
                st.ckpt = 1;
                st.payloads.push(Vec::new()); // LSN 0 is never used
                let mut i = 1;
                while i < 150 {
                    let batch: Vec<Vec<u8>> = (i..i + i % 3 + 1).map(payload).collect();
                    let sizes: Vec<usize> = batch.iter().map(Vec::len).collect();
                    if !j.fits(&sizes) {
                        st.ckpt_in_flight = Some(j.next_lsn());
                        j.checkpoint(dev)?;
                        st.ckpt = j.next_lsn();
                        st.ckpt_in_flight = None;
                    }
                    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                    st.payloads.extend(batch.iter().cloned());
                    let last = j.append(dev, &refs)?;
                    ember_device::BlockDevice::sync(dev)?;
                    st.synced = last;
                    i += batch.len() as u64;
                }
                Ok::<(), TableError>(())
            },
            |mut medium, st, _| {
                if st.payloads.is_empty() {
                    return Ok(()); // cut before the format finished: nothing promised
                }
                let (j, recs) = Journal::open(&mut medium, START, LEN)
                    .map_err(|e| format!("open failed: {e}"))?;
                let ckpt = j.checkpoint_lsn();
                if ckpt != st.ckpt && Some(ckpt) != st.ckpt_in_flight {
                    return Err(format!("checkpoint {ckpt} was never written"));
                }
                for (k, r) in recs.iter().enumerate() {
                    if r.lsn != ckpt + k as u64 {
                        return Err(format!("LSN {} out of sequence", r.lsn));
                    }
                    match st.payloads.get(r.lsn as usize) {
                        Some(p) if *p == r.payload => {}
                        _ => return Err(format!("LSN {} holds bytes never written", r.lsn)),
                    }
                }
                // Everything synced after the checkpoint is there.
                let end = ckpt + recs.len() as u64;
                if st.synced >= ckpt && end <= st.synced {
                    return Err(format!(
                        "LSN {} was synced but replay ends before it",
                        st.synced
                    ));
                }
                Ok(())
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(report.ops >= 200, "only {} operations", report.ops);
}

#[test]
fn acknowledged_records_survive_a_write_through_device_with_torn_sectors() {
    // The same promise when the device keeps everything but the interrupted write.
    CrashTest::new()
        .plan(|p| p.write_through().tear(TearMode::Any))
        .run(
            || MemBlock::new((START + LEN) as usize),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, acked: &mut Vec<Vec<u8>>| {
                let mut j = Journal::format(dev, START, LEN)?;
                for i in 1..7 {
                    j.append(dev, &[&payload(i)])?;
                    ember_device::BlockDevice::sync(dev)?;
                    acked.push(payload(i));
                }
                Ok::<(), TableError>(())
            },
            |mut medium, acked, _| {
                let Ok((_, recs)) = Journal::open(&mut medium, START, LEN) else {
                    return if acked.is_empty() {
                        Ok(())
                    } else {
                        Err("open failed".into())
                    };
                };
                if recs.len() < acked.len() {
                    return Err(format!(
                        "{} acknowledged, {} recovered",
                        acked.len(),
                        recs.len()
                    ));
                }
                for (r, p) in recs.iter().zip(acked) {
                    if r.payload != *p {
                        return Err(format!("LSN {} differs", r.lsn));
                    }
                }
                Ok(())
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
}
