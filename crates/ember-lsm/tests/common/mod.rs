//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use ember_device::{BlockDevice, MemBlock};
use ember_lsm::{Db, Options, SpaceEnv};
use ember_table::{FormatOptions, SpaceManager};

/// Options small enough that a few hundred operations flush, compact and fill several levels.
pub fn tiny() -> Options {
    Options {
        memory_budget: 256 * 1024,
        write_buffer: 2048,
        table_size: 1024,
        block_size: 256,
        bloom_bits_per_key: 10,
        l0_trigger: 2,
        level1_bytes: 2048,
        level_multiplier: 2,
        pinned_levels: 2,
        log_capacity: 4096,
        prefix_rule: None,
    }
}

/// A database on a RAM device.
pub type MemDb = Db<SpaceEnv<SpaceManager<MemBlock<Vec<u8>>>>>;

/// A fresh database on a RAM device; returns it with its root locator.
pub fn fresh(opts: Options) -> (MemDb, Vec<u8>) {
    fresh_on(8 << 20, opts)
}

/// [`fresh`] on a device of `bytes`.
pub fn fresh_on(bytes: usize, opts: Options) -> (MemDb, Vec<u8>) {
    let sm = SpaceManager::format(MemBlock::new(bytes), FormatOptions::default()).unwrap();
    let env = SpaceEnv::create(sm, 64 * 1024).unwrap();
    let root = env.root_locator();
    (Db::create(env, opts).unwrap(), root)
}

/// Opens a database from a device and its root locator.
pub fn open<D: BlockDevice>(
    dev: D,
    root: &[u8],
    opts: Options,
) -> ember_lsm::Result<Db<SpaceEnv<SpaceManager<D>>>> {
    let sm = SpaceManager::open(dev)?;
    Db::open(SpaceEnv::open(sm, root)?, opts)
}

/// Closes a database and the space manager under it and returns the device.
pub fn shut<D: BlockDevice>(db: Db<SpaceEnv<SpaceManager<D>>>) -> D {
    db.close().unwrap().into_space().close().unwrap()
}

/// A database on a borrowed RAM device.
pub type MemDbOn<'a> = Db<SpaceEnv<SpaceManager<&'a mut MemBlock<Vec<u8>>>>>;
