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

/// Tag of a write mark (format version 2, 8 bytes): `0xA2 | kind << 4 | partition |
/// value u16 | slot u8 | crc32 & 0xFFFFFF` (the CRC-32 of the first five bytes, its low three
/// bytes). `value` is a node mark's unit or an area mark's position; `slot` a node mark's
/// first post-checkpoint slot (0 for area marks). A third smaller than version 1: marks are
/// most of what the undo log holds, and every 512 bytes of log costs an erase.
pub const TAG_MARK: u8 = 0xA2;
/// Tag of a version 1 write mark (still read): `0xA1 | partition | kind | 0 | object u16 |
/// position u16 | crc32` (12 bytes).
pub const TAG_MARK_V1: u8 = 0xA1;
/// Bytes of a (version 2) write mark.
pub const MARK_ENTRY: u32 = 8;
/// Tag of a commit record (version 1).
pub const TAG_COMMIT: u8 = 0xC1;
/// Tag of a redo entry (WAL, version 1): `0xD1 | partition | length | 0 | offset u32 | data,
/// zero-padded to 4 | crc32`.
pub const TAG_REDO: u8 = 0xD1;
/// Tag of an abort entry (WAL, version 1): redo entries before it and after the last commit
/// belong to a run that lost power. `0xE1 | 0 0 0 | seq u32 | crc32` (12 bytes).
pub const TAG_ABORT: u8 = 0xE1;
/// Bytes of an abort entry (and of a version 1 mark).
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

impl MarkKind {
    fn code(self) -> u8 {
        match self {
            MarkKind::NodeArea => 0,
            MarkKind::RecordArea => 1,
            MarkKind::Node => 2,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(MarkKind::NodeArea),
            1 => Some(MarkKind::RecordArea),
            2 => Some(MarkKind::Node),
            _ => None,
        }
    }
}

impl Mark {
    /// Encodes the 8-byte (version 2) entry; `None` if a field does not fit it (a partition
    /// above 15, a node slot above 255, an area mark's object not 0).
    pub fn encode(&self) -> Option<[u8; 8]> {
        let (value, slot) = match self.kind {
            MarkKind::Node => (self.obj, u8::try_from(self.pos).ok()?),
            _ if self.obj == 0 => (self.pos, 0),
            _ => return None,
        };
        if self.part > 0x0F {
            return None;
        }
        let mut b = [0u8; 8];
        b[0] = TAG_MARK;
        b[1] = self.kind.code() << 4 | self.part;
        b[2..4].copy_from_slice(&value.to_le_bytes());
        b[4] = slot;
        let c = crc32(&b[..5]).to_le_bytes();
        b[5..8].copy_from_slice(&c[..3]);
        Some(b)
    }

    /// Decodes a version 2 mark entry (`None` if its checksum or fields are bad).
    pub fn decode(b: &[u8; 8]) -> Option<Mark> {
        if b[0] != TAG_MARK || b[5..8] != crc32(&b[..5]).to_le_bytes()[..3] {
            return None;
        }
        let kind = MarkKind::from_code(b[1] >> 4)?;
        let (obj, pos) = match kind {
            MarkKind::Node => (le16(&b[2..]), u16::from(b[4])),
            _ if b[4] == 0 => (0, le16(&b[2..])),
            _ => return None,
        };
        Some(Mark {
            part: b[1] & 0x0F,
            kind,
            obj,
            pos,
        })
    }

    /// Encodes the 12-byte version 1 entry (the engine writes version 2; this one is for
    /// the tests that check old logs are still read).
    #[cfg(test)]
    pub fn encode_v1(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = TAG_MARK_V1;
        b[1] = self.part;
        b[2] = self.kind.code();
        b[4..6].copy_from_slice(&self.obj.to_le_bytes());
        b[6..8].copy_from_slice(&self.pos.to_le_bytes());
        let c = crc32(&b[..8]);
        b[8..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes a version 1 mark entry (`None` if its checksum or fields are bad).
    pub fn decode_v1(b: &[u8; 12]) -> Option<Mark> {
        if b[0] != TAG_MARK_V1 || b[3] != 0 || le32(&b[8..]) != crc32(&b[..8]) {
            return None;
        }
        Some(Mark {
            part: b[1],
            kind: MarkKind::from_code(b[2])?,
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
        let b = m.encode().unwrap();
        assert_eq!(Mark::decode(&b), Some(m));
        // Torn: any prefix of the bytes landed, the rest still erased.
        for k in 0..8 {
            let mut t = [0xFFu8; 8];
            t[..k].copy_from_slice(&b[..k]);
            assert_eq!(Mark::decode(&t), None, "{k} bytes");
        }
        // Every single-bit flip is caught.
        for bit in 0..64 {
            let mut t = b;
            t[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(Mark::decode(&t), None, "bit {bit}");
        }
        let area = Mark {
            part: 1,
            kind: MarkKind::RecordArea,
            obj: 0,
            pos: 0x7FFE,
        };
        assert_eq!(Mark::decode(&area.encode().unwrap()), Some(area));
        // What the 8 bytes cannot say is refused, not truncated.
        assert_eq!(Mark { pos: 256, ..m }.encode(), None);
        assert_eq!(Mark { part: 16, ..m }.encode(), None);
        assert_eq!(Mark { obj: 1, ..area }.encode(), None);
        // Version 1 (12 bytes) is still read.
        let mut v1 = m.encode_v1();
        assert_eq!(Mark::decode_v1(&v1), Some(m));
        v1[11] = !v1[11];
        assert_eq!(Mark::decode_v1(&v1), None);
        assert_eq!(Slot::decode(Slot::record(5)), Slot::Record(5));
        assert_eq!(Slot::decode(9), Slot::Child(9));
        assert_eq!(Slot::decode(0), Slot::Dead);
        assert_eq!(Slot::decode(0xFFFF), Slot::Free);
    }
}
