//! What the fault-injection and accounting wrappers cost per operation, against the bare
//! device they wrap. Run: `cargo bench -p ember-device --bench wrappers`.
//!
//! Each group runs the same operation on the bare device and through each wrapper; compare
//! the medians within a group (this machine is noisy: ratios, not absolute times).

#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ember_device::{
    Accounted, BlockDevice, CostModel, FaultPlan, FaultyBlock, FaultyFlash, FlashDevice,
    FlashGeometry, MemBlock, SimFlash,
};

const DEV: usize = 1 << 20;

/// The bytes every write carries (a static, so no benchmark pays for building it).
static DATA: [u8; 4096] = [0x5A; 4096];

fn accounted_block() -> Accounted<MemBlock<Vec<u8>>> {
    let mut d = Accounted::new(MemBlock::new(DEV));
    for (i, name) in ["super", "meta", "data", "log"].into_iter().enumerate() {
        d.add_region(name, (i * DEV / 4) as u64, (DEV / 4) as u64)
            .unwrap();
    }
    d
}

/// Writes `size` bytes at a moving aligned offset, with a sync every `sync_every` writes.
fn write_loop<D: BlockDevice>(dev: &mut D, size: usize, sync_every: u64, i: &mut u64) {
    let data = black_box(&DATA);
    let slots = (DEV / size) as u64;
    dev.write((*i % slots) * size as u64, &data[..size])
        .unwrap();
    *i += 1;
    if i.is_multiple_of(sync_every) {
        dev.sync().unwrap();
    }
}

fn block(c: &mut Criterion) {
    for (size, sync_every) in [(512usize, 1u64), (4096, 16)] {
        let mut g = c.benchmark_group(format!("block write {size} B, sync every {sync_every}"));
        let mut i = 0;
        g.bench_function("bare MemBlock", |b| {
            let mut d = MemBlock::new(DEV);
            b.iter(|| write_loop(&mut d, size, sync_every, &mut i))
        });
        g.bench_function("Accounted (4 regions)", |b| {
            let mut d = accounted_block();
            b.iter(|| write_loop(&mut d, size, sync_every, &mut i))
        });
        g.bench_function("FaultyBlock write-through", |b| {
            let mut d =
                FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(1).write_through());
            b.iter(|| write_loop(&mut d, size, sync_every, &mut i))
        });
        g.bench_function("FaultyBlock volatile cache", |b| {
            let mut d = FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(1));
            b.iter(|| write_loop(&mut d, size, sync_every, &mut i))
        });
        g.finish();
    }

    let mut g = c.benchmark_group("block read 512 B");
    let mut buf = [0u8; 512];
    let mut run = |name: &str, d: &mut dyn BlockDevice| {
        let mut i = 0u64;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                i = (i + 7) % (DEV as u64 / 512);
                d.read(i * 512, black_box(&mut buf)).unwrap();
            })
        });
    };
    run("bare MemBlock", &mut MemBlock::new(DEV));
    run("Accounted (4 regions)", &mut accounted_block());
    run(
        "FaultyBlock write-through",
        &mut FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(1).write_through()),
    );
    // With 64 sectors waiting for a sync, a read has to look through them.
    let mut cached = FaultyBlock::new(MemBlock::new(DEV), FaultPlan::run_to_end(1));
    for s in 0..64u64 {
        cached.write(s * 4096, &[1; 512]).unwrap();
    }
    run("FaultyBlock volatile cache, 64 dirty sectors", &mut cached);
    g.finish();
}

fn flash(c: &mut Criterion) {
    let sim =
        || SimFlash::in_memory(FlashGeometry::nor(DEV as u64, 512), CostModel::MSP430_NOR).unwrap();
    let mut g = c.benchmark_group("flash program 64 B + erase every 8");
    let mut run = |name: &str, f: &mut dyn FlashDevice| {
        let mut i = 0u64;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let unit = (i / 8) % (DEV as u64 / 512);
                if i.is_multiple_of(8) {
                    f.erase(unit * 512, 512).unwrap();
                }
                f.write(unit * 512 + (i % 8) * 64, &[0; 64]).unwrap();
                i += 1;
            })
        });
    };
    run("bare SimFlash", &mut sim());
    run("Accounted<SimFlash>", &mut Accounted::new(sim()));
    run(
        "FaultyFlash<SimFlash>",
        &mut FaultyFlash::new(sim(), FaultPlan::run_to_end(1)),
    );
    g.finish();
}

criterion_group!(benches, block, flash);
criterion_main!(benches);
