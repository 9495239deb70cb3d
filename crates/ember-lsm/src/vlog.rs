//! Value blobs: large values kept out of the sorted tables (WiscKey's key-value separation).
//!
//! A flush writes every value of at least [`crate::Options::separate_values`] bytes to a value
//! blob and the table entry holds a [`ValuePtr`] to it instead, so compactions move keys
//! and pointers, not values. A compaction copies a value again only out of a blob that has
//! become mostly garbage (fewer than [`LIVE_FLOOR`] of its bytes are still pointed to), and
//! a blob no table points to any more is removed. Which tables point into which blobs, and
//! how many bytes, the manifest says ([`crate::sstable::TableMeta::values`]), so the live
//! bytes of every blob are known without reading a table.
//!
//! Layout of a value blob:
//!
//! ```text
//!  0 4  magic "ELVB"
//!  4 1  format version (1)
//!  5 3  reserved, zero
//!  8 8  blob id
//! 16 4  CRC-32 of bytes 0..16
//! 20 …  values, back to back
//! ```
//!
//! A pointer (the entry's stored bytes in a data block of format 2):
//!
//! ```text
//! blob id varint | offset varint | length varint | CRC-32 u32 (little-endian) of the blob
//! id (u64 LE), the offset (u64 LE) and the value
//! ```
//!
//! The checksum lives in the pointer, which lives in a checksummed block: a value read is
//! checked against it, so a torn, stale or misplaced value is an error, never wrong data.

use crate::coding::{Reader, le32, le64, put_varint};
use crate::env::{BlobId, Env};
use crate::error::{LsmError, Result};

const MAGIC: [u8; 4] = *b"ELVB";
const VERSION: u8 = 1;
/// Bytes of a value blob's header.
pub const HEADER: usize = 20;

/// A blob whose live bytes fall below this share of its values is collected: the
/// compactions that meet pointers into it copy those values to a new blob.
pub const LIVE_FLOOR: f64 = 0.5;

/// Where a value lies: its blob, offset and length, and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePtr {
    /// The value blob.
    pub blob: BlobId,
    /// First byte of the value in the blob.
    pub offset: u64,
    /// Bytes of the value.
    pub len: u32,
    /// CRC-32 of the blob id, the offset and the value (see the module docs).
    pub crc: u32,
}

fn value_crc(blob: BlobId, offset: u64, value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&blob.to_le_bytes());
    h.update(&offset.to_le_bytes());
    h.update(value);
    h.finalize()
}

impl ValuePtr {
    /// Appends the pointer's encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.blob);
        put_varint(out, self.offset);
        put_varint(out, u64::from(self.len));
        out.extend_from_slice(&self.crc.to_le_bytes());
    }

    /// Decodes a pointer stored in table `table`'s block at `offset`.
    pub fn decode(bytes: &[u8], table: BlobId, offset: u64) -> Result<Self> {
        let mut r = Reader::new(bytes, "value pointer", table, offset);
        let blob = r.varint()?;
        let at = r.varint()?;
        let len = u32::try_from(r.varint()?).map_err(|_| r.bad("value longer than 4 GiB"))?;
        let crc = r.u32()?;
        if r.remaining() != 0 {
            return Err(r.bad("trailing bytes"));
        }
        if at < HEADER as u64 {
            return Err(r.bad("value inside the blob's header"));
        }
        Ok(ValuePtr {
            blob,
            offset: at,
            len,
            crc,
        })
    }
}

/// What the manifest knows of a value blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMeta {
    /// Its blob id.
    pub id: BlobId,
    /// Bytes of its values, which the tables' references are counted against (the blob
    /// holds [`HEADER`] more).
    pub values: u64,
    /// The environment's locator of its blob.
    pub locator: Vec<u8>,
}

/// Builds one value blob in memory.
#[derive(Debug)]
pub struct ValueWriter {
    id: BlobId,
    buf: Vec<u8>,
}

impl ValueWriter {
    /// A writer for blob `id`, with room for about `bytes` of values.
    pub fn new(id: BlobId, bytes: usize) -> Self {
        let mut buf = Vec::new();
        let _ = buf.try_reserve(bytes.saturating_add(HEADER));
        buf.extend_from_slice(&MAGIC);
        buf.push(VERSION);
        buf.extend_from_slice(&[0; 3]);
        buf.extend_from_slice(&id.to_le_bytes());
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        ValueWriter { id, buf }
    }

    /// Appends a value (at most 4 GiB); returns where it lies.
    pub fn add(&mut self, value: &[u8]) -> ValuePtr {
        let offset = self.buf.len() as u64;
        self.buf.extend_from_slice(value);
        ValuePtr {
            blob: self.id,
            offset,
            len: value.len() as u32,
            crc: value_crc(self.id, offset, value),
        }
    }

    /// Bytes so far, header included.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// Whether no value was added.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == HEADER
    }

    /// Its blob id.
    pub fn id(&self) -> BlobId {
        self.id
    }

    /// The blob's bytes and its metadata (without a locator yet).
    pub fn finish(self) -> (Vec<u8>, ValueMeta) {
        let meta = ValueMeta {
            id: self.id,
            values: (self.buf.len() - HEADER) as u64,
            locator: Vec::new(),
        };
        (self.buf, meta)
    }
}

/// Reads the value `p` points to into `buf` (resized to it) and checks it.
pub fn read_value(env: &mut dyn Env, p: &ValuePtr, buf: &mut Vec<u8>) -> Result<()> {
    // A large value is checked against its blob before room is made for it (a damaged
    // pointer whose block checksum still held must not cost gigabytes).
    if p.len > 1 << 20 && p.offset.saturating_add(u64::from(p.len)) > env.capacity(p.blob)? {
        return Err(LsmError::Corrupt {
            structure: "value pointer",
            table: p.blob,
            offset: p.offset,
            reason: "value beyond its blob",
        });
    }
    buf.resize(p.len as usize, 0);
    env.read(p.blob, p.offset, buf)?;
    if value_crc(p.blob, p.offset, buf) != p.crc {
        return Err(LsmError::Corrupt {
            structure: "value blob",
            table: p.blob,
            offset: p.offset,
            reason: "value checksum mismatch",
        });
    }
    Ok(())
}

/// Checks the header of value blob `id` (at open).
pub fn check_header(env: &mut dyn Env, id: BlobId) -> Result<()> {
    let mut h = [0u8; HEADER];
    env.read(id, 0, &mut h)?;
    let bad = |reason| LsmError::Corrupt {
        structure: "value blob",
        table: id,
        offset: 0,
        reason,
    };
    if h[0..4] != MAGIC {
        return Err(bad("bad magic"));
    }
    if h[4] != VERSION {
        return Err(bad("unknown format version"));
    }
    if crc32fast::hash(&h[..16]) != le32(&h, 16) {
        return Err(bad("header checksum mismatch"));
    }
    if le64(&h, 8) != id {
        return Err(bad("header of another blob"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pointers_round_trip_and_reject_damage() {
        let mut w = ValueWriter::new(7, 0);
        assert!(w.is_empty());
        let a = w.add(b"hello");
        let b = w.add(&[9u8; 300]);
        assert_eq!(a.offset, HEADER as u64);
        assert_eq!(b.offset, HEADER as u64 + 5);
        for p in [a, b] {
            let mut e = Vec::new();
            p.encode(&mut e);
            assert_eq!(ValuePtr::decode(&e, 1, 0).unwrap(), p);
            for n in 0..e.len() {
                assert!(ValuePtr::decode(&e[..n], 1, 0).is_err(), "truncated at {n}");
            }
            e.push(0);
            assert!(ValuePtr::decode(&e, 1, 0).is_err(), "trailing byte");
        }
        let (bytes, meta) = w.finish();
        assert_eq!(meta.values + HEADER as u64, bytes.len() as u64);
        assert_eq!(meta.values, 305);
    }
}
