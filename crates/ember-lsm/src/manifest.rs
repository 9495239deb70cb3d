//! The manifest: the set of live logs and tables, as one snapshot written alternately to the
//! environment's two root slots.
//!
//! ```text
//!  0 4  magic "ELMF"
//!  4 1  format version (3; 2 and 1 are read too: 2 has no log record counts, 1 no value
//!         blobs either)
//!  5 3  reserved, zero
//!  8 8  generation (the slot written is generation % 2)
//! 16 4  payload length
//! 20 4  CRC-32 of bytes 0..20 and the payload
//! 24 …  payload:
//!       next blob id varint
//!       log count varint, per log (oldest first): id varint, (version 2) log number
//!         varint (version 1: the id), capacity varint, locator bytes, (version 3) record
//!         count varint (0: the active log, whose records run to its first invalid one; n + 1:
//!         a sealed log that holds n records)
//!       level count varint, per level: table count varint, per table:
//!         id, size, entries, index offset, index length, bloom offset, bloom length
//!         (varints), smallest key, largest key, locator (varint length + bytes),
//!         (version 2) value refs offset, value refs length (varints; length 0: none)
//!       (version 2) value blob count varint, per value blob: id, bytes of values
//!         (varints), locator
//!       (version 2) kept log count varint, per kept log (a flushed memtable's, to be
//!         written again): as a live log
//!       (version 3) the first log number not reserved varint (versions 1 and 2: the next
//!         blob id, which log numbers were drawn from)
//! ```
//!
//! A snapshot is written with one write and made durable with one sync; the reader takes the
//! valid slot with the higher generation, so a torn snapshot leaves the previous one in force.
//! Blobs that a new snapshot drops are removed only after it is durable. A snapshot that only
//! switches logs may wait for a later sync ([`Manifest::write_unsynced`]), but never two in a
//! row: the next snapshot overwrites the slot of the one before it.
//!
//! Why sealed logs carry their record count: while a log switch's snapshot waits, the new log's
//! records and the snapshot may reach the device before the sealed log's last records. Replay
//! stops at a sealed log that holds fewer records than its count, before the logs after it, so
//! what replays is still a prefix of the commits.
//!
//! Why log numbers are reserved: a log switch whose snapshot is lost still wrote records under
//! its new log number. A snapshot that is synced reserves the numbers up to the one it names
//! (`log_numbers`), a switch that waits for a sync takes only reserved numbers, and an open
//! starts at the reservation's end, so no number marks the records of two logs.

use crate::coding::{Reader, le32, le64, put_bytes, put_varint};
use crate::env::{BlobId, Env};
use crate::error::{LsmError, Result};
use crate::sstable::{Handle, TableMeta};
use crate::vlog::ValueMeta;

const MAGIC: [u8; 4] = *b"ELMF";
/// The format this build writes.
const VERSION: u8 = 3;
const HEADER: usize = 24;

/// A log the manifest names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogMeta {
    /// Its blob.
    pub id: BlobId,
    /// The log number its records carry ([`crate::wal`]).
    pub number: u64,
    /// Bytes it was created with.
    pub capacity: u64,
    /// The environment's locator.
    pub locator: Vec<u8>,
    /// For a sealed log (the immutable memtable's), the records it holds; `None` for the
    /// active log, a kept one, and any log of a snapshot before version 3.
    pub records: Option<u64>,
}

/// One manifest snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Incremented by every write.
    pub generation: u64,
    /// The next blob id to hand out.
    pub next_blob: BlobId,
    /// Live logs, oldest first (the immutable memtable's, then the active one's).
    pub logs: Vec<LogMeta>,
    /// Tables per level (level 0 newest first; deeper levels in key order).
    pub levels: Vec<Vec<TableMeta>>,
    /// Value blobs the tables point into, by id.
    pub values: Vec<ValueMeta>,
    /// Logs of flushed memtables kept to be written again (none is replayed).
    pub spare: Vec<LogMeta>,
    /// Log numbers below this may have been used; an open numbers its logs from here.
    pub log_numbers: u64,
}

/// A snapshot's bytes: the header (see the module docs) of `version` and `generation`, then
/// `payload`.
fn seal(version: u8, generation: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[version, 0, 0, 0]);
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out);
    h.update(payload);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn put_log(p: &mut Vec<u8>, l: &LogMeta) {
    put_varint(p, l.id);
    put_varint(p, l.number);
    put_varint(p, l.capacity);
    put_bytes(p, &l.locator);
    put_varint(p, l.records.map_or(0, |n| n.saturating_add(1)));
}

fn read_log(r: &mut Reader<'_>, version: u8) -> Result<LogMeta> {
    let id = r.varint()?;
    let number = if version >= 2 { r.varint()? } else { id };
    let capacity = r.varint()?;
    let locator = r.bytes()?.to_vec();
    let records = if version >= 3 {
        r.varint()?.checked_sub(1)
    } else {
        None
    };
    Ok(LogMeta {
        id,
        number,
        capacity,
        locator,
        records,
    })
}

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        put_varint(&mut p, self.next_blob);
        put_varint(&mut p, self.logs.len() as u64);
        for l in &self.logs {
            put_log(&mut p, l);
        }
        put_varint(&mut p, self.levels.len() as u64);
        for level in &self.levels {
            put_varint(&mut p, level.len() as u64);
            for t in level {
                for x in [
                    t.id,
                    t.size,
                    t.entries,
                    t.index.offset,
                    t.index.len,
                    t.bloom.offset,
                    t.bloom.len,
                ] {
                    put_varint(&mut p, x);
                }
                put_bytes(&mut p, &t.smallest);
                put_bytes(&mut p, &t.largest);
                put_bytes(&mut p, &t.locator);
                put_varint(&mut p, t.refs.offset);
                put_varint(&mut p, t.refs.len);
            }
        }
        put_varint(&mut p, self.values.len() as u64);
        for v in &self.values {
            put_varint(&mut p, v.id);
            put_varint(&mut p, v.values);
            put_bytes(&mut p, &v.locator);
        }
        put_varint(&mut p, self.spare.len() as u64);
        for l in &self.spare {
            put_log(&mut p, l);
        }
        put_varint(&mut p, self.log_numbers);
        seal(VERSION, self.generation, &p)
    }

    fn decode(payload: &[u8], version: u8, generation: u64, slot: usize) -> Result<Self> {
        let mut r = Reader::new(payload, "manifest", 0, slot as u64);
        let next_blob = r.varint()?;
        let n = r.varint()?;
        if n > r.remaining() as u64 {
            return Err(r.bad("log count beyond the snapshot"));
        }
        let mut logs = Vec::new();
        for _ in 0..n {
            logs.push(read_log(&mut r, version)?);
        }
        let nl = r.varint()?;
        if nl > 64 {
            return Err(r.bad("too many levels"));
        }
        let mut levels = Vec::new();
        for _ in 0..nl {
            let nt = r.varint()?;
            if nt > r.remaining() as u64 {
                return Err(r.bad("table count beyond the snapshot"));
            }
            let mut level = Vec::new();
            for _ in 0..nt {
                let mut x = [0u64; 7];
                for v in &mut x {
                    *v = r.varint()?;
                }
                level.push(TableMeta {
                    id: x[0],
                    size: x[1],
                    entries: x[2],
                    index: Handle {
                        offset: x[3],
                        len: x[4],
                    },
                    bloom: Handle {
                        offset: x[5],
                        len: x[6],
                    },
                    smallest: r.bytes()?.to_vec(),
                    largest: r.bytes()?.to_vec(),
                    locator: r.bytes()?.to_vec(),
                    refs: if version >= 2 {
                        Handle {
                            offset: r.varint()?,
                            len: r.varint()?,
                        }
                    } else {
                        Handle { offset: 0, len: 0 }
                    },
                    // Read from the table's value refs block at open.
                    values: Vec::new(),
                });
            }
            levels.push(level);
        }
        let mut values = Vec::new();
        let mut spare = Vec::new();
        if version >= 2 {
            let n = r.varint()?;
            if n > r.remaining() as u64 {
                return Err(r.bad("value blob count beyond the snapshot"));
            }
            for _ in 0..n {
                values.push(ValueMeta {
                    id: r.varint()?,
                    values: r.varint()?,
                    locator: r.bytes()?.to_vec(),
                });
            }
            let n = r.varint()?;
            if n > r.remaining() as u64 {
                return Err(r.bad("kept log count beyond the snapshot"));
            }
            for _ in 0..n {
                spare.push(read_log(&mut r, version)?);
            }
        }
        // Before version 3, log numbers were blob ids.
        let log_numbers = if version >= 3 { r.varint()? } else { next_blob };
        if r.remaining() != 0 {
            return Err(r.bad("trailing bytes"));
        }
        Ok(Manifest {
            generation,
            next_blob,
            logs,
            levels,
            values,
            spare,
            log_numbers,
        })
    }

    /// Writes this snapshot to its slot and syncs.
    pub fn write(&self, env: &mut dyn Env) -> Result<()> {
        self.write_unsynced(env)?;
        env.sync()
    }

    /// Writes this snapshot to its slot, durable at the next sync. The caller makes the
    /// previous snapshot durable first if it was written this way too (this one overwrites
    /// the one before that), and writes no snapshot this way that drops a blob it removes.
    pub fn write_unsynced(&self, env: &mut dyn Env) -> Result<()> {
        let bytes = self.encode();
        let capacity = env.root_capacity();
        if bytes.len() as u64 > capacity {
            return Err(LsmError::ManifestFull {
                bytes: bytes.len(),
                capacity,
            });
        }
        env.write_root((self.generation % 2) as usize, &bytes)
    }

    /// Reads one slot: `Ok(None)` if it holds no valid snapshot.
    fn read_slot(env: &mut dyn Env, slot: usize) -> Result<Option<Self>> {
        let mut head = [0u8; HEADER];
        match env.read_root(slot, 0, &mut head) {
            Ok(()) => {}
            Err(LsmError::OutOfBounds { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        let generation = le64(&head, 8);
        let version = head[4];
        if head[0..4] != MAGIC || generation % 2 != slot as u64 {
            return Ok(None);
        }
        let len = u64::from(le32(&head, 16));
        if len + HEADER as u64 > env.root_capacity() {
            return Ok(None);
        }
        let mut p = vec![0u8; len as usize];
        match env.read_root(slot, HEADER as u64, &mut p) {
            Ok(()) => {}
            Err(LsmError::OutOfBounds { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&head[..20]);
        h.update(&p);
        if h.finalize() != le32(&head, 20) {
            return Ok(None);
        }
        // The checksum holds, so an engine wrote these bytes: a version this build does not
        // know (a newer build's) or a payload that does not decode is an error, not a torn
        // write — falling back to the other slot would open an older snapshot whose blobs
        // may be gone.
        if !(1..=VERSION).contains(&version) {
            return Err(LsmError::Corrupt {
                structure: "manifest",
                table: 0,
                offset: slot as u64,
                reason: "a snapshot of a format version this build does not know",
            });
        }
        Self::decode(&p, version, generation, slot).map(Some)
    }

    /// The newest valid snapshot.
    pub fn load(env: &mut dyn Env) -> Result<Self> {
        let a = Self::read_slot(env, 0)?;
        let b = Self::read_slot(env, 1)?;
        match (a, b) {
            (Some(a), Some(b)) => Ok(if a.generation > b.generation { a } else { b }),
            (Some(m), None) | (None, Some(m)) => Ok(m),
            (None, None) => Err(LsmError::Corrupt {
                structure: "manifest",
                table: 0,
                offset: 0,
                reason: "neither root slot holds a valid snapshot",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::SpaceEnv;
    use ember_device::MemBlock;
    use ember_table::{FormatOptions, SpaceManager};

    fn env() -> SpaceEnv<SpaceManager<MemBlock<Vec<u8>>>> {
        let sm = SpaceManager::format(MemBlock::new(4 << 20), FormatOptions::default()).unwrap();
        SpaceEnv::create(sm, 64 * 1024).unwrap()
    }

    #[test]
    fn snapshots_round_trip_and_the_newer_slot_wins() {
        let mut env = env();
        let mut m = Manifest {
            generation: 1,
            next_blob: 9,
            logs: vec![LogMeta {
                id: 3,
                number: 8,
                capacity: 4096,
                locator: vec![1, 2, 3],
                records: Some(17),
            }],
            levels: vec![Vec::new(); 2],
            values: vec![ValueMeta {
                id: 5,
                values: 100,
                locator: vec![4],
            }],
            spare: vec![LogMeta {
                id: 4,
                number: 4,
                capacity: 4096,
                locator: vec![5],
                records: None,
            }],
            log_numbers: 30,
        };
        m.write(&mut env).unwrap();
        assert_eq!(Manifest::load(&mut env).unwrap(), m);
        m.generation = 2;
        m.next_blob = 10;
        m.write(&mut env).unwrap();
        assert_eq!(Manifest::load(&mut env).unwrap(), m);
    }

    /// A snapshot of version 1 (written before value blobs and kept logs) reads: log numbers
    /// are the blob ids, tables have no value refs, there are no value blobs or kept logs.
    #[test]
    fn a_version_1_snapshot_reads() {
        let mut env = env();
        let mut p = Vec::new();
        put_varint(&mut p, 12); // next blob
        put_varint(&mut p, 1); // one log
        put_varint(&mut p, 7);
        put_varint(&mut p, 4096);
        put_bytes(&mut p, &[9, 9]);
        put_varint(&mut p, 2); // two levels
        put_varint(&mut p, 1); // level 0: one table
        for x in [5u64, 300, 10, 200, 40, 240, 60] {
            put_varint(&mut p, x);
        }
        put_bytes(&mut p, b"a");
        put_bytes(&mut p, b"k");
        put_bytes(&mut p, &[1]);
        put_varint(&mut p, 0); // level 1: none
        env.write_root(1, &seal(1, 3, &p)).unwrap();
        env.sync().unwrap();
        let m = Manifest::load(&mut env).unwrap();
        assert_eq!(m.generation, 3);
        assert_eq!(m.next_blob, 12);
        assert_eq!(
            m.logs,
            vec![LogMeta {
                id: 7,
                number: 7,
                capacity: 4096,
                locator: vec![9, 9],
                records: None,
            }]
        );
        let t = &m.levels[0][0];
        assert_eq!((t.id, t.size, t.entries), (5, 300, 10));
        assert_eq!((t.index.offset, t.bloom.len), (200, 60));
        assert_eq!((t.refs.len, t.values.len()), (0, 0));
        assert!(m.values.is_empty() && m.spare.is_empty());
        assert_eq!(m.log_numbers, 12);
    }

    /// A snapshot of version 2 (before log record counts) reads: no log is sealed.
    #[test]
    fn a_version_2_snapshot_reads() {
        let mut env = env();
        let mut p = Vec::new();
        put_varint(&mut p, 12); // next blob
        put_varint(&mut p, 2); // two logs: id, number, capacity, locator
        for (id, number) in [(7u64, 10u64), (8, 11)] {
            put_varint(&mut p, id);
            put_varint(&mut p, number);
            put_varint(&mut p, 4096);
            put_bytes(&mut p, &[9]);
        }
        put_varint(&mut p, 1); // one level, no tables
        put_varint(&mut p, 0);
        put_varint(&mut p, 0); // no value blobs
        put_varint(&mut p, 0); // no kept logs
        env.write_root(0, &seal(2, 4, &p)).unwrap();
        env.sync().unwrap();
        let m = Manifest::load(&mut env).unwrap();
        assert_eq!(m.generation, 4);
        assert_eq!(m.logs.len(), 2);
        assert_eq!((m.logs[1].id, m.logs[1].number), (8, 11));
        assert!(m.logs.iter().all(|l| l.records.is_none()));
        assert_eq!(m.log_numbers, 12);
    }

    /// A slot whose checksum holds but whose version this build does not know is an error,
    /// not a torn write to step over (the other slot is an older snapshot).
    #[test]
    fn a_snapshot_of_an_unknown_version_is_an_error() {
        let mut env = env();
        let m = Manifest {
            generation: 1,
            levels: vec![Vec::new(); 1],
            ..Manifest::default()
        };
        m.write(&mut env).unwrap();
        let m2 = Manifest {
            generation: 2,
            ..m.clone()
        };
        let mut bytes = m2.encode();
        bytes = seal(VERSION + 1, 2, &bytes[HEADER..]);
        env.write_root(0, &bytes).unwrap();
        env.sync().unwrap();
        assert!(matches!(
            Manifest::load(&mut env),
            Err(LsmError::Corrupt {
                structure: "manifest",
                ..
            })
        ));
        // A torn one (bad checksum) is stepped over.
        bytes[HEADER] ^= 1;
        env.write_root(0, &bytes).unwrap();
        assert_eq!(Manifest::load(&mut env).unwrap(), m);
    }
}
