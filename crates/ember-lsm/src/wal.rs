//! The write-ahead log.
//!
//! Each memtable has its own log blob, of a fixed capacity, written front to back: a new
//! blob, or one a flushed memtable's log left (kept, and written over from the start with a
//! new log number). A commit group (every batch waiting when the leader writes) is one
//! record, one device write, and — if any batch in it asked for sync — one `sync`:
//!
//! ```text
//!  0 4  magic "ELWR"
//!  4 1  format version (1)
//!  5 3  reserved, zero
//!  8 8  log number (a fresh one for each log, a kept blob written again included; before
//!       manifest format 3, the blob id of a new blob)
//! 16 8  record number (1, 2, … within the log)
//! 24 4  payload length
//! 28 4  CRC-32 of bytes 0..28 and the payload
//! 32 …  payload: batch count varint, then each batch (see `WriteBatch`)
//! ```
//!
//! Replay reads records in order and stops at the first that fails any check (a torn or
//! lost tail). The log number and record number reject bytes left in reused extents or a
//! kept blob by another log, and a record lost while a later one survived (unsynced writes)
//! ends the replay there, so what replays is always a prefix of the commits.

use crate::coding::{Reader, le32, le64, put_varint};
use crate::env::{BlobId, Env};
use crate::error::{LsmError, Result};
use crate::memtable::WriteBatch;

const MAGIC: [u8; 4] = *b"ELWR";
/// Bytes of a record header.
pub const HEADER: usize = 32;

/// The log being written.
#[derive(Debug)]
pub struct Wal {
    /// Its blob.
    pub id: BlobId,
    /// The log number its records carry.
    pub number: u64,
    /// Its capacity in bytes.
    pub capacity: u64,
    pos: u64,
    next: u64,
    /// What the environment was told of this log's commits: none yet, that they do not
    /// sync ([`Env::ready_appends`]), or that one synced ([`Env::ready`]).
    readied: Readied,
}

/// Records a log holds before [`Wal::wants_ready`] judges their size.
pub const SMALL_AFTER: u64 = 64;
/// The average record size, in bytes, under which a log whose commits do not sync is
/// readied for appends (see [`Wal::wants_ready`]).
pub const SMALL_RECORD: u64 = 256;

/// What a [`Wal`] told its environment (see [`Wal::wants_ready`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readied {
    No,
    Appends,
    Synced,
}

/// Starts a record in `rec` (cleared, its capacity kept): room for the header, then the
/// payload's batch count. Append each batch's encoding, then [`Wal::append`] the record.
pub fn start_record(rec: &mut Vec<u8>, batches: usize) {
    rec.clear();
    rec.resize(HEADER, 0);
    put_varint(rec, batches as u64);
}

impl Wal {
    /// A new, empty log numbered `number` in blob `id` (of `capacity` bytes), written from
    /// its start.
    pub fn new(id: BlobId, number: u64, capacity: u64) -> Self {
        Wal {
            id,
            number,
            capacity,
            pos: 0,
            next: 1,
            readied: Readied::No,
        }
    }

    /// Whether the log should be readied before the next append: before its first commit
    /// that syncs ([`Env::ready`]: the syncs that follow find its space allocated), and
    /// before that ([`Env::ready_appends`]) once it has [`SMALL_AFTER`] records averaging
    /// under [`SMALL_RECORD`] bytes. On a file image a readied log takes its records
    /// through the file's mapping, which saves a system call per record; but its page
    /// faults and the zeros written ahead cost more than that for records of a kilobyte,
    /// which came out slower that way than by `pwrite` (sqlitekv at 1 KiB: update-heavy
    /// 1.98× → 1.73× SQLite, insert-rand 5.88× → 5.48×), while 64-byte records gained.
    /// Otherwise a log is written once and synced once, as a table is (unless its blob was
    /// readied in an earlier log's life: see [`Env::ready`]).
    pub fn wants_ready(&self, sync: bool) -> bool {
        let records = self.next - 1;
        match self.readied {
            Readied::No => sync || (records >= SMALL_AFTER && self.pos < records * SMALL_RECORD),
            Readied::Appends => sync,
            Readied::Synced => false,
        }
    }

    /// Tells the environment how this log is written ([`wants_ready`](Self::wants_ready)):
    /// [`Env::ready`] if this commit syncs, else [`Env::ready_appends`].
    pub fn ready(&mut self, env: &mut dyn Env, sync: bool) -> Result<()> {
        if sync && self.readied != Readied::Synced {
            env.ready(self.id)?;
            self.readied = Readied::Synced;
        } else if self.readied == Readied::No {
            env.ready_appends(self.id)?;
            self.readied = Readied::Appends;
        }
        Ok(())
    }

    /// Whether a record with this payload still fits.
    pub fn fits(&self, payload: usize) -> bool {
        self.pos + (HEADER + payload) as u64 <= self.capacity
    }

    /// Records appended so far.
    pub fn records(&self) -> u64 {
        self.next - 1
    }

    /// Bytes written so far.
    pub fn used(&self) -> u64 {
        self.pos
    }

    /// Appends one record (one device write, not synced): `rec` is the header's room
    /// followed by the payload (see [`start_record`]); the header is filled in place.
    pub fn append(&mut self, env: &mut dyn Env, rec: &mut [u8]) -> Result<()> {
        let payload_len = rec.len().saturating_sub(HEADER);
        let too_large = LsmError::BatchTooLarge {
            bytes: payload_len,
            limit: u64::from(u32::MAX),
        };
        let len = u32::try_from(payload_len).map_err(|_| too_large)?;
        if rec.len() < HEADER {
            return Err(LsmError::Poisoned(
                "a log record without room for its header".into(),
            ));
        }
        rec[0..4].copy_from_slice(&MAGIC);
        rec[4..8].copy_from_slice(&[1, 0, 0, 0]);
        rec[8..16].copy_from_slice(&self.number.to_le_bytes());
        rec[16..24].copy_from_slice(&self.next.to_le_bytes());
        rec[24..28].copy_from_slice(&len.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&rec[..28]);
        h.update(&rec[HEADER..]);
        rec[28..32].copy_from_slice(&h.finalize().to_le_bytes());
        env.write(self.id, self.pos, rec)?;
        self.pos += rec.len() as u64;
        self.next += 1;
        Ok(())
    }
}

/// Reads every valid record of log `number` in blob `id` (of `capacity` bytes) and returns
/// its batches in order, and how many records held them.
pub fn replay(
    env: &mut dyn Env,
    id: BlobId,
    number: u64,
    capacity: u64,
) -> Result<(Vec<WriteBatch>, u64)> {
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut expect = 1u64;
    let mut head = [0u8; HEADER];
    while pos + HEADER as u64 <= capacity {
        // A file-backed log ends where its file does.
        match env.read(id, pos, &mut head) {
            Ok(()) => {}
            Err(LsmError::OutOfBounds { .. }) => break,
            Err(e) => return Err(e),
        }
        if head[0..4] != MAGIC
            || head[4] != 1
            || le64(&head, 8) != number
            || le64(&head, 16) != expect
        {
            break;
        }
        let len = u64::from(le32(&head, 24));
        if pos + HEADER as u64 + len > capacity {
            break;
        }
        let mut payload = vec![0u8; len as usize];
        match env.read(id, pos + HEADER as u64, &mut payload) {
            Ok(()) => {}
            Err(LsmError::OutOfBounds { .. }) => break,
            Err(e) => return Err(e),
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&head[..28]);
        h.update(&payload);
        if h.finalize() != le32(&head, 28) {
            break;
        }
        // A record whose checksum holds was written whole by this engine: its payload
        // decodes, or the format is broken, which is an error, not a torn tail.
        let mut r = Reader::new(&payload, "log record", id, pos);
        let n = r.varint()?;
        for _ in 0..n {
            out.push(WriteBatch::decode(&mut r)?);
        }
        pos += HEADER as u64 + len;
        expect += 1;
    }
    Ok((out, expect - 1))
}
