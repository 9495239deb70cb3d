//! Byte encodings shared by every structure: varints, little-endian integers, checksums and
//! the sealed block envelope.

use crate::error::{LsmError, Result};

/// Appends `x` as an LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Bytes of `x` as an LEB128 varint.
pub fn varint_len(x: u64) -> usize {
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A bounds-checked reader over a byte slice; every failure is a `Corrupt` error naming the
/// structure, table and offset it was given.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    structure: &'static str,
    table: u64,
    offset: u64,
}

impl<'a> Reader<'a> {
    /// Reads `buf`, which came from `structure` of `table` at `offset`.
    pub fn new(buf: &'a [u8], structure: &'static str, table: u64, offset: u64) -> Self {
        Reader {
            buf,
            pos: 0,
            structure,
            table,
            offset,
        }
    }

    /// A corruption error of this structure.
    pub fn bad(&self, reason: &'static str) -> LsmError {
        LsmError::Corrupt {
            structure: self.structure,
            table: self.table,
            offset: self.offset,
            reason,
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.bad("truncated field"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A varint.
    pub fn varint(&mut self) -> Result<u64> {
        // One byte, the common case (lengths and counts under 128).
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        let mut x = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            x |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(x);
            }
        }
        Err(self.bad("varint too long"))
    }

    /// A varint that must fit in `usize` and in the bytes left (a length).
    pub fn length(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > self.remaining() as u64 {
            return Err(self.bad("length beyond the block"));
        }
        Ok(n as usize)
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.length()?;
        self.take(n)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64> {
        let mut x = [0u8; 8];
        x.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(x))
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32> {
        let mut x = [0u8; 4];
        x.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(x))
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
}

/// Reads a little-endian u32 at `at` of a slice known to be long enough.
pub fn le32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

/// Reads a little-endian u64 at `at` of a slice known to be long enough.
pub fn le64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// A hasher for the engine's integer-keyed maps (blob ids, cache keys): one multiply and a
/// rotate per word (FxHash), where the standard library's SipHash spends some hundred
/// instructions per lookup. The keys are the engine's own numbers, not attacker-chosen.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// A `HashMap` builder with [`IdHasher`].
pub type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// Format version of every block this build writes but data blocks, whose version is
/// their format ([`crate::sstable::block::FORMAT`]).
pub const VERSION: u8 = 1;
/// Magic of a sorted-table block.
pub const BLOCK_MAGIC: [u8; 4] = *b"ELBK";
/// Size of the block envelope header.
pub const BLOCK_HEADER: usize = 24;

/// Kinds of sorted-table blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    /// Sorted entries with restart points.
    Data = 1,
    /// The index: last key and handle of each data block.
    Index = 2,
    /// The bloom filter of the table's keys.
    Bloom = 3,
    /// The bloom filter of the table's keys and their prefixes under a rule (tables
    /// written from 2026-11-23 on by a database given a prefix rule).
    PrefixBloom = 4,
    /// The value blobs the table's pointers point into, with the bytes of each (a table
    /// with pointers; from 2026-11-28).
    Refs = 5,
}

impl BlockKind {
    /// The version this build writes blocks of this kind with.
    fn version(self) -> u8 {
        match self {
            BlockKind::Data => crate::sstable::block::FORMAT,
            _ => VERSION,
        }
    }

    fn name(self) -> &'static str {
        match self {
            BlockKind::Data => "data block",
            BlockKind::Index => "index block",
            BlockKind::Bloom | BlockKind::PrefixBloom => "bloom filter",
            BlockKind::Refs => "value refs block",
        }
    }
}

/// Wraps `payload` in the block envelope:
///
/// ```text
///  0 4  magic "ELBK"
///  4 1  format version (1; a data block: its format, 1 or 2)
///  5 1  kind (1 data, 2 index, 3 bloom, 4 prefix bloom, 5 value refs)
///  6 2  reserved, zero
///  8 8  table id
/// 16 4  payload length
/// 20 4  CRC-32 of the header (this field as zero) and the payload
/// 24 …  payload
/// ```
pub fn seal(kind: BlockKind, table: u64, payload: &[u8], out: &mut Vec<u8>) {
    seal_with(kind, table, out, |o| o.extend_from_slice(payload));
}

/// [`seal`], with the payload appended to `out` by `write` where it goes (no copy of it is
/// made first). `write` only appends; it must not shorten `out`.
pub fn seal_with(kind: BlockKind, table: u64, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&BLOCK_MAGIC);
    out.push(kind.version());
    out.push(kind as u8);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    write(out);
    let len = out.len().saturating_sub(start + BLOCK_HEADER) as u32;
    out[start + 16..start + 20].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&out[start..]);
    out[start + 20..start + 24].copy_from_slice(&crc.to_le_bytes());
}

/// Checks a block read at `offset` of `table` and returns its version and payload.
pub fn open_block(kind: BlockKind, table: u64, offset: u64, block: &[u8]) -> Result<(u8, &[u8])> {
    let bad = |reason| LsmError::Corrupt {
        structure: kind.name(),
        table,
        offset,
        reason,
    };
    if block.len() < BLOCK_HEADER {
        return Err(bad("shorter than its header"));
    }
    if block[0..4] != BLOCK_MAGIC {
        return Err(bad("bad magic"));
    }
    let version = block[4];
    if version != kind.version() && !(kind == BlockKind::Data && version == 1) {
        return Err(bad("unknown format version"));
    }
    if block[5] != kind as u8 {
        return Err(bad("wrong block kind"));
    }
    if le64(block, 8) != table {
        return Err(bad("block of another table"));
    }
    if le32(block, 16) as usize != block.len() - BLOCK_HEADER {
        return Err(bad("length does not match its handle"));
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&block[..20]);
    h.update(&[0; 4]);
    h.update(&block[24..]);
    if h.finalize() != le32(block, 20) {
        return Err(bad("checksum mismatch"));
    }
    Ok((version, &block[BLOCK_HEADER..]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn varints_round_trip_and_know_their_length() {
        let mut xs = vec![0, 1, 127, 128, 255, 16_383, 16_384, u64::MAX - 1, u64::MAX];
        xs.extend((0..64).map(|s| 1u64 << s));
        xs.extend((1..64).map(|s| (1u64 << s) - 1));
        for x in xs {
            let mut out = Vec::new();
            put_varint(&mut out, x);
            assert_eq!(varint_len(x), out.len(), "{x}");
            out.push(0x55);
            let mut r = Reader::new(&out, "t", 0, 0);
            assert_eq!(r.varint().unwrap(), x);
            assert_eq!(r.u8().unwrap(), 0x55);
        }
        // Truncated and overlong varints are errors, not panics.
        assert!(Reader::new(&[0x80], "t", 0, 0).varint().is_err());
        assert!(Reader::new(&[0xff; 11], "t", 0, 0).varint().is_err());
        assert!(Reader::new(&[], "t", 0, 0).varint().is_err());
    }
}
