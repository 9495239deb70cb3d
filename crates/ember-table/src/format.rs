//! The header every on-device block of the table engine starts with.
//!
//! ```text
//! offset size field
//!  0     4    magic       identifies the structure (see [`Kind`])
//!  4     2    version     format version of the structure (little-endian)
//!  6     2    reserved    zero
//!  8     4    crc32       IEEE CRC-32 of the whole block with this field read as zero
//! 12     4    len         bytes of the block covered by the checksum (header included)
//! ```
//!
//! A block is *sealed* by filling in the header and checksum and *checked* on every read: a
//! wrong magic, a version newer than this build, a length that does not fit, or a checksum
//! mismatch is a [`TableError`] naming the structure and its offset — never a panic and never
//! silently wrong data.

use crate::error::{Result, TableError};

/// Size of the block header in bytes.
pub const HEADER: usize = 16;

/// The on-device structures, each with its own magic number and current format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The superblock (two copies at the start of the device).
    Super,
    /// A journal header sector.
    JournalHeader,
    /// A journal record.
    JournalRecord,
    /// One slot of a chunk's allocation bitmap.
    Bitmap,
    /// A copy of the allocator's class directory (the active bitmap group of each class).
    ClassDir,
    /// A slotted data block of a table.
    Slotted,
    /// The header of a catalog snapshot.
    Catalog,
    /// A page of a table's persistent primary index.
    IndexPage,
}

/// Reads a little-endian `u32` at `at` (the caller has checked the length).
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a little-endian `u64` at `at` (the caller has checked the length).
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl Kind {
    /// The magic number at offset 0.
    pub const fn magic(self) -> [u8; 4] {
        match self {
            Kind::Super => *b"EMSB",
            Kind::JournalHeader => *b"EMJH",
            Kind::JournalRecord => *b"EMJR",
            Kind::Bitmap => *b"EMBM",
            Kind::ClassDir => *b"EMCD",
            Kind::Slotted => *b"EMSL",
            Kind::Catalog => *b"EMCT",
            Kind::IndexPage => *b"EMIX",
        }
    }

    /// The current format version.
    pub const fn version(self) -> u16 {
        match self {
            // 2: table entries name their primary index's root; the snapshot carries the
            // allocator marks of the index pages its checkpoint wrote and freed. 3: a
            // table's BlockSet is stored as runs of consecutive blocks (version 2 catalogs,
            // one 9-byte entry per block, are still read).
            Kind::Catalog => 3,
            // 2: the header covers the fixed fields and a slot array of 1 to 59 slots, and
            // tuples may follow it in sector 0 (version 1: always 59 slots, the whole
            // sector). 3: the slots' tuple checksums may be CRC-32C (see `checksum`; the
            // CRC-32 of earlier versions' tuples is still accepted). Versions 1 and 2 are
            // still read.
            Kind::Slotted => 3,
            // 2: the table engine's payloads may hold "add block" with a header length
            // (operation 10). 3: the header names a spill block. 4: the payloads' tuple
            // checksums are CRC-32C, as in version 3 data blocks. Versions 1 to 3 are still
            // read.
            Kind::JournalRecord => 4,
            // 2: entries are prefix-compressed and their locations delta-coded against the
            // entry before (a few bytes an entry instead of 13 plus the key). Version 1 pages
            // are still read.
            Kind::IndexPage => 2,
            // 2: the chunk size is chosen for the zone at format time (up to as many largest
            // blocks as one bitmap sector tracks) and read from the directory; version 1
            // directories, always 512 KiB chunks, are still read.
            Kind::ClassDir => 2,
            _ => 1,
        }
    }

    /// The name used in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Super => "superblock",
            Kind::JournalHeader => "journal header",
            Kind::JournalRecord => "journal record",
            Kind::Bitmap => "allocation bitmap",
            Kind::ClassDir => "allocator class directory",
            Kind::Slotted => "data block",
            Kind::Catalog => "catalog",
            Kind::IndexPage => "index page",
        }
    }
}

/// Fills in the header of `block[..len]` (magic, version, length, checksum).
pub fn seal(kind: Kind, block: &mut [u8], len: usize) {
    seal_as(kind, kind.version(), block, len);
}

/// [`seal`] with an explicit format version.
pub(crate) fn seal_as(kind: Kind, version: u16, block: &mut [u8], len: usize) {
    debug_assert!(len >= HEADER && len <= block.len());
    block[0..4].copy_from_slice(&kind.magic());
    block[4..6].copy_from_slice(&version.to_le_bytes());
    block[6..8].fill(0);
    block[8..12].fill(0);
    block[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = crc32fast::hash(&block[..len]);
    block[8..12].copy_from_slice(&crc.to_le_bytes());
}

/// Reads the covered length from a header without checking anything else.
pub fn sealed_len(block: &[u8]) -> Option<usize> {
    let b = block.get(12..16)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// Checks the header and checksum of a block read from byte `offset`; returns the covered
/// length.
pub fn check(kind: Kind, block: &[u8], offset: u64) -> Result<usize> {
    check_versioned(kind, block, offset).map(|(len, _)| len)
}

/// [`check`], also returning the block's format version (1 to the current one).
pub fn check_versioned(kind: Kind, block: &[u8], offset: u64) -> Result<(usize, u16)> {
    let corrupt = |reason| TableError::Corrupt {
        structure: kind.name(),
        offset,
        reason,
    };
    if block.len() < HEADER {
        return Err(corrupt("shorter than its header"));
    }
    if block[0..4] != kind.magic() {
        return Err(corrupt("wrong magic number"));
    }
    let len = sealed_len(block).unwrap_or(0);
    if len < HEADER || len > block.len() {
        return Err(corrupt("length field out of range"));
    }
    let stored = u32::from_le_bytes([block[8], block[9], block[10], block[11]]);
    let mut h = crc32fast::Hasher::new();
    h.update(&block[..8]);
    h.update(&[0; 4]);
    h.update(&block[12..len]);
    if h.finalize() != stored {
        return Err(corrupt("checksum mismatch"));
    }
    // Checked after the checksum, so a flipped bit is reported as corruption.
    let version = u16::from_le_bytes([block[4], block[5]]);
    if version == 0 {
        return Err(corrupt("format version 0"));
    }
    if version > kind.version() {
        return Err(TableError::Version {
            structure: kind.name(),
            offset,
            found: version,
        });
    }
    Ok((len, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_blocks_check_and_every_flipped_bit_is_caught() {
        let mut b = vec![0u8; 512];
        b[HEADER..HEADER + 5].copy_from_slice(b"hello");
        seal(Kind::Super, &mut b, 512);
        assert_eq!(check(Kind::Super, &b, 0).unwrap(), 512);
        assert!(check(Kind::JournalHeader, &b, 0).is_err());
        for i in 0..b.len() * 8 {
            let mut c = b.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(
                check(Kind::Super, &c, 0).is_err(),
                "bit {i} flip not caught"
            );
        }
    }

    #[test]
    fn newer_versions_are_refused_by_name() {
        let mut b = vec![0u8; 64];
        seal_as(Kind::JournalRecord, 9, &mut b, 64);
        assert!(matches!(
            check(Kind::JournalRecord, &b, 4096),
            Err(TableError::Version {
                found: 9,
                offset: 4096,
                ..
            })
        ));
    }
}
