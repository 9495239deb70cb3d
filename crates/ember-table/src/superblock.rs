//! The superblock: the geometry of the database, in two copies at the start of the device.
//!
//! ```text
//! sector 0 and 1: two copies, written alternately; the valid copy with the higher
//! generation is current.
//!
//!   0 16  block header (kind Super)
//!  16  8  generation
//!  24  8  device capacity in bytes when formatted
//!  32  4  sector size
//!  36 12  allocator: min block, max block, growth (u32 each)
//!  48 64  zones ROOT, META, LOG, DATA: start and length in bytes (u64 each)
//! ```
//!
//! The zones follow the paper's three regions by access pattern: region 1 (SUPER, ROOT_ZONE,
//! META_ZONE: small, random, updated in place), region 3 (LOG: large and sequential) and
//! region 2 (DATA_ZONE: the variable-size allocator), in that order on the device.

use ember_device::BlockDevice;

use crate::allocator::AllocConfig;
use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};

const SECTOR: u64 = 512;
const ALIGN: u64 = 4096;

/// A byte range of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone {
    /// First byte.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Zone {
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// How to lay out a new database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FormatOptions {
    /// The data zone's allocator.
    pub alloc: AllocConfig,
    /// Bytes of the LOG zone (default: a sixteenth of the device, 256 KiB to 64 MiB).
    pub log_bytes: Option<u64>,
    /// Bytes of the META_ZONE (default: a 128th of the device, at least 256 KiB).
    pub meta_bytes: Option<u64>,
    /// Bytes of the ROOT_ZONE (default 64 KiB).
    pub root_bytes: Option<u64>,
}

/// The database geometry (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Incremented on every write.
    pub generation: u64,
    /// Device capacity when formatted.
    pub capacity: u64,
    /// Sector size of the device.
    pub sector_size: u32,
    /// The data zone's allocator.
    pub alloc: AllocConfig,
    /// The root table.
    pub root: Zone,
    /// Table metadata.
    pub meta: Zone,
    /// The journal.
    pub log: Zone,
    /// Table data and extents of the other engines.
    pub data: Zone,
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Superblock {
    /// Plans the zones of a device of `capacity` bytes.
    pub fn plan(capacity: u64, sector_size: u32, opts: &FormatOptions) -> Result<Self> {
        opts.alloc.class_sizes()?;
        let root_len = align_up(opts.root_bytes.unwrap_or(64 * 1024), ALIGN);
        let meta_len = align_up(
            opts.meta_bytes.unwrap_or((capacity / 128).max(256 * 1024)),
            ALIGN,
        );
        let log_len = align_up(
            opts.log_bytes
                .unwrap_or((capacity / 16).clamp(256 * 1024, 64 << 20)),
            64 * 1024,
        );
        let root = Zone {
            start: ALIGN,
            len: root_len,
        };
        let meta = Zone {
            start: root.end(),
            len: meta_len,
        };
        let log = Zone {
            start: align_up(meta.end(), 64 * 1024),
            len: log_len,
        };
        let data_start = log.end();
        if data_start >= capacity {
            return Err(TableError::Invalid("the device is too small for the zones"));
        }
        Ok(Superblock {
            generation: 0,
            capacity,
            sector_size,
            alloc: opts.alloc,
            root,
            meta,
            log,
            data: Zone {
                start: data_start,
                len: capacity - data_start,
            },
        })
    }

    fn encode(&self) -> [u8; 512] {
        let mut b = [0u8; 512];
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.capacity.to_le_bytes());
        b[32..36].copy_from_slice(&self.sector_size.to_le_bytes());
        b[36..40].copy_from_slice(&self.alloc.min_block.to_le_bytes());
        b[40..44].copy_from_slice(&self.alloc.max_block.to_le_bytes());
        b[44..48].copy_from_slice(&self.alloc.growth.to_le_bytes());
        for (i, z) in [self.root, self.meta, self.log, self.data]
            .iter()
            .enumerate()
        {
            b[48 + 16 * i..56 + 16 * i].copy_from_slice(&z.start.to_le_bytes());
            b[56 + 16 * i..64 + 16 * i].copy_from_slice(&z.len.to_le_bytes());
        }
        format::seal(Kind::Super, &mut b, 112);
        b
    }

    /// Writes the next copy (not synced).
    pub fn write<D: BlockDevice>(&mut self, dev: &mut D) -> Result<()> {
        self.generation += 1;
        let b = self.encode();
        dev.write((self.generation % 2) * SECTOR, &b)?;
        Ok(())
    }

    /// Reads the current superblock and checks that its zones fit the device.
    pub fn read<D: BlockDevice>(dev: &mut D) -> Result<Self> {
        let mut best: Option<Superblock> = None;
        let mut first_err = None;
        for copy in 0..2u64 {
            let mut b = [0u8; 512];
            dev.read(copy * SECTOR, &mut b)?;
            match format::check(Kind::Super, &b, copy * SECTOR) {
                Ok(_) => {
                    let zone = |i: usize| Zone {
                        start: u64_at(&b, 48 + 16 * i),
                        len: u64_at(&b, 56 + 16 * i),
                    };
                    let sb = Superblock {
                        generation: u64_at(&b, 16),
                        capacity: u64_at(&b, 24),
                        sector_size: u32_at(&b, 32),
                        alloc: AllocConfig {
                            min_block: u32_at(&b, 36),
                            max_block: u32_at(&b, 40),
                            growth: u32_at(&b, 44),
                        },
                        root: zone(0),
                        meta: zone(1),
                        log: zone(2),
                        data: zone(3),
                    };
                    if best.is_none_or(|s| sb.generation > s.generation) {
                        best = Some(sb);
                    }
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        let sb = best.ok_or_else(|| first_err.unwrap_or(TableError::Invalid("no superblock")))?;
        let corrupt = |reason| TableError::Corrupt {
            structure: Kind::Super.name(),
            offset: 0,
            reason,
        };
        let zones = [sb.root, sb.meta, sb.log, sb.data];
        let ordered = zones.windows(2).all(|w| {
            w[0].start
                .checked_add(w[0].len)
                .is_some_and(|e| e <= w[1].start)
        });
        if !ordered || zones[0].start < 2 * SECTOR {
            return Err(corrupt("zones overlap or are out of order"));
        }
        if sb
            .data
            .start
            .checked_add(sb.data.len)
            .is_none_or(|e| e > dev.capacity())
        {
            return Err(corrupt("zones reach past the end of the device"));
        }
        if sb.alloc.class_sizes().is_err() {
            return Err(corrupt("invalid allocator configuration"));
        }
        Ok(sb)
    }
}
