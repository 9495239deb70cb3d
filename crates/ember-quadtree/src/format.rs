//! On-flash formats: records, pointer slots, log entries, commit records, backup headers.
//!
//! All integers are little-endian. Every structure but a pointer slot carries a checksum and
//! (in its tag byte) a format version; a slot is two bytes whose values are self-describing.

use crc32fast::Hasher;

/// CRC-32 (IEEE) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut h = Hasher::new();
    h.update(bytes);
    h.finalize()
}

/// A record: a timestamp and `D` fixed-point dimensions (the caller picks the scale, e.g.
/// humidity in tenths of a percent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record<const D: usize> {
    /// Timestamp (not indexed by the tree; scans filter on it).
    pub ts: u32,
    /// The indexed dimensions.
    pub dims: [u16; D],
}

impl<const D: usize> Default for Record<D> {
    fn default() -> Self {
        Record {
            ts: 0,
            dims: [0; D],
        }
    }
}

/// Bytes of a record on flash: timestamp, dimensions, check byte.
pub const fn record_size<const D: usize>() -> usize {
    4 + 2 * D + 1
}

/// Largest record (D = 4).
pub const MAX_RECORD: usize = 4 + 2 * 4 + 1;

/// The check byte: format version 1 in the top two bits (`0b10`), six bits of CRC. It is never
/// 0x00 (a neutralized record) nor 0xFF (an erased one).
fn check_byte(payload: &[u8]) -> u8 {
    0x80 | (crc32(payload) & 0x3F) as u8
}

impl<const D: usize> Record<D> {
    /// Encodes into `out` (at least [`record_size`] bytes).
    pub fn encode(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.ts.to_le_bytes());
        for (k, d) in self.dims.iter().enumerate() {
            out[4 + 2 * k..6 + 2 * k].copy_from_slice(&d.to_le_bytes());
        }
        let n = 4 + 2 * D;
        out[n] = check_byte(&out[..n]);
    }

    /// Decodes a record; `None` if the check byte does not match (neutralized, erased, torn
    /// or corrupt).
    pub fn decode(buf: &[u8]) -> Option<Self> {
        let n = 4 + 2 * D;
        if buf.len() <= n || buf[n] != check_byte(&buf[..n]) {
            return None;
        }
        let mut dims = [0u16; D];
        for (k, d) in dims.iter_mut().enumerate() {
            *d = u16::from_le_bytes([buf[4 + 2 * k], buf[5 + 2 * k]]);
        }
        Some(Record {
            ts: u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]),
            dims,
        })
    }
}

/// A pointer slot's meaning. Slots hold offsets within the partition, never addresses:
/// `0x8000 | r` is record `r` (counted from the partition's end), `1..=0x7FFE` is the first
/// node unit of a child group (counted from the partition's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Erased: free for the node's next pointer.
    Free,
    /// Zeroed: neutralized by undo.
    Dead,
    /// Points to a record.
    Record(u16),
    /// Points to a child group.
    Child(u16),
}

/// An available slot.
pub const SLOT_FREE: u16 = 0xFFFF;

impl Slot {
    /// Decodes a slot value.
    pub fn decode(v: u16) -> Slot {
        match v {
            SLOT_FREE => Slot::Free,
            0 => Slot::Dead,
            v if v & 0x8000 != 0 => Slot::Record(v & 0x7FFF),
            v => Slot::Child(v),
        }
    }

    /// Encodes a record pointer.
    pub fn record(r: u16) -> u16 {
        0x8000 | r
    }
}

/// Bytes of a log segment header: `"EQ" | version 1 | mode | seq u32 | crc32`.
pub const SEG_HEADER: u32 = 12;
/// Fixed bytes of a commit record besides state and context:
/// `tag 0xC1 | version 1 | context length u16 | seq u32 | state length u16 | 2 reserved`
/// (the CRC-32 after the padded body is counted separately).
pub const COMMIT_FIXED: u32 = 12;

/// Tag of a write mark (version 1): `0xA1 | partition | kind | 0 | object u16 | position u16 |
/// crc32` (12 bytes).
pub const TAG_MARK: u8 = 0xA1;
/// Tag of a commit record (version 1).
pub const TAG_COMMIT: u8 = 0xC1;
/// Tag of a redo entry (WAL, version 1): `0xD1 | partition | length | 0 | offset u32 | data,
/// zero-padded to 4 | crc32`.
pub const TAG_REDO: u8 = 0xD1;
/// Tag of an abort entry (WAL, version 1): redo entries before it and after the last commit
/// belong to a run that lost power. `0xE1 | 0 0 0 | seq u32 | crc32` (12 bytes).
pub const TAG_ABORT: u8 = 0xE1;
/// Bytes of a mark or abort entry.
pub const SMALL_ENTRY: u32 = 12;
/// Tag of a backup header (version 1): `0xBA | 1 | 0 0 | target u32 | image crc32 | crc32`.
pub const TAG_BACKUP: u8 = 0xBA;
/// Bytes of a backup header.
pub const BACKUP_HEADER: u32 = 16;

/// What a write mark marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// The node area of a partition; position: node units in use at the checkpoint.
    NodeArea,
    /// The record area; position: records in use at the checkpoint.
    RecordArea,
    /// One node; object: its unit; position: its first post-checkpoint slot.
    Node,
}

/// A decoded write mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Partition.
    pub part: u8,
    /// What is marked.
    pub kind: MarkKind,
    /// The node's unit (node marks).
    pub obj: u16,
    /// Where post-checkpoint data starts.
    pub pos: u16,
}

impl Mark {
    /// Encodes the 12-byte entry.
    pub fn encode(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = TAG_MARK;
        b[1] = self.part;
        b[2] = match self.kind {
            MarkKind::NodeArea => 0,
            MarkKind::RecordArea => 1,
            MarkKind::Node => 2,
        };
        b[4..6].copy_from_slice(&self.obj.to_le_bytes());
        b[6..8].copy_from_slice(&self.pos.to_le_bytes());
        let c = crc32(&b[..8]);
        b[8..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes a mark entry (`None` if its checksum or fields are bad).
    pub fn decode(b: &[u8; 12]) -> Option<Mark> {
        if b[0] != TAG_MARK || b[3] != 0 || le32(&b[8..]) != crc32(&b[..8]) {
            return None;
        }
        let kind = match b[2] {
            0 => MarkKind::NodeArea,
            1 => MarkKind::RecordArea,
            2 => MarkKind::Node,
            _ => return None,
        };
        Some(Mark {
            part: b[1],
            kind,
            obj: le16(&b[4..]),
            pos: le16(&b[6..]),
        })
    }
}

/// Encodes a small (12-byte) entry with a tag and a u32 value (abort entries).
pub fn small_entry(tag: u8, value: u32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0] = tag;
    b[4..8].copy_from_slice(&value.to_le_bytes());
    let c = crc32(&b[..8]);
    b[8..].copy_from_slice(&c.to_le_bytes());
    b
}

/// Bytes of a redo entry carrying `len` data bytes.
pub const fn redo_size(len: u32) -> u32 {
    8 + len.next_multiple_of(4) + 4
}

/// Little-endian u16 at the start of `b`.
pub fn le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

/// Little-endian u32 at the start of `b`.
pub fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_never_look_erased_or_neutralized() {
        let r = Record::<2> {
            ts: 0xFFFF_FFFF,
            dims: [0xFFFF, 0xFFFF],
        };
        let mut b = [0u8; 9];
        r.encode(&mut b);
        assert_ne!(b[8], 0xFF);
        assert_eq!(Record::<2>::decode(&b), Some(r));
        assert_eq!(Record::<2>::decode(&[0u8; 9]), None);
        assert_eq!(Record::<2>::decode(&[0xFFu8; 9]), None);
        b[2] ^= 1;
        // Six bits of CRC: most single-bit flips are caught (this one is).
        assert_eq!(Record::<2>::decode(&b), None);
    }

    #[test]
    fn marks_round_trip_and_torn_ones_fail() {
        let m = Mark {
            part: 3,
            kind: MarkKind::Node,
            obj: 77,
            pos: 5,
        };
        let mut b = m.encode();
        assert_eq!(Mark::decode(&b), Some(m));
        b[11] |= 0x01;
        b[11] = !b[11];
        assert_eq!(Mark::decode(&b), None);
        assert_eq!(Slot::decode(Slot::record(5)), Slot::Record(5));
        assert_eq!(Slot::decode(9), Slot::Child(9));
        assert_eq!(Slot::decode(0), Slot::Dead);
        assert_eq!(Slot::decode(0xFFFF), Slot::Free);
    }
}
