//! The journal: the LOG zone, a ring of checksummed, chained redo records.
//!
//! The table engine writes every transaction's redo record here and makes it durable with one
//! `sync` (group commit: several records in one write and one sync); the changes reach their
//! home locations later, at a checkpoint. The journal does not interpret payloads.
//!
//! # On-device format
//!
//! The zone starts with two journal header sectors, A and B, written alternately; the valid
//! one with the higher generation is current:
//!
//! ```text
//!  0 16  block header (kind JournalHeader, see `format`)
//! 16  8  generation        incremented on every header write
//! 24  8  checkpoint lsn    LSN of the first record still needed
//! 32  8  checkpoint pos    its byte offset in the ring
//! 40  4  checkpoint crc    CRC of the record before it (the chain continues from it)
//! 44  8  ring length       bytes of the ring (the rest of the zone)
//! ```
//!
//! The ring follows. Records start on sector boundaries and occupy whole sectors:
//!
//! ```text
//!  0 16  block header (kind JournalRecord; the checksum covers header and payload)
//! 16  8  lsn               consecutive, from the checkpoint lsn on (a wrap record
//!                          carries the LSN of the record after it)
//! 24  4  prev crc          checksum field of the previous record
//! 28  4  payload length
//! 32  1  record type       1 = payload, 2 = wrap (continue at ring offset 0)
//! 33  7  spill             version 3 on: sector number of a block where the next record may
//!                          lie instead of the ring (0: none); see "Spilled records"
//! 40  8  synced lsn        every record up to this LSN was durable when this one was written
//! 48  …  payload, then zero padding to the sector boundary
//! ```
//!
//! # Spilled records
//!
//! A record may name a *spill block*: a block the engine has reserved (the record's payload
//! marks it allocated) for a transaction that will write a fresh block of its own anyway. That
//! transaction's record may then go into that block instead of the ring — right after the
//! sealed header that starts the block's first sector, in the same device write as the
//! block — so its commit is one write. Such a record has the ring's format without the
//! sector padding, and does not move the ring's head. Recovery, when the ring does not hold
//! the next record, reads the spill block named by the last record: the header's covered
//! length says where the record starts, and the record is accepted on the same terms as one
//! in the ring (checksum, next LSN, the previous record's checksum), so a block that never
//! received it — or holds a record of an earlier use — ends the log. The engine must keep
//! those bytes in place until the next checkpoint. Spilled bytes count towards the journal's
//! use like ring bytes, so checkpoints come as often. (The search for valid records after a
//! damaged one, which tells corruption from a tear, follows the ring only: damage followed
//! by spilled records alone reads as the end of the log.)
//!
//! Recovery reads from the checkpoint position and accepts records while each one checks,
//! carries the next LSN and names its predecessor's checksum; the first that does not is the
//! end of the log — unless a valid record further on, chained to it, says it had been synced:
//! then it is corruption inside the log, reported as an error rather than silently cutting
//! the log short. (Without that evidence a damaged record is indistinguishable from one torn
//! by the crash.) A record whose checksum holds but whose format version is newer than this
//! build is refused with a version error: it was not torn, and replaying the log without it
//! would lose it. The chain makes a stale record from an earlier lap of the ring — or one
//! embedded in a torn record's payload — unacceptable, since it cannot name a checksum written
//! after it.

use ember_device::BlockDevice;

use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};

const SECTOR: u64 = 512;
const HEADERS: u64 = 2 * SECTOR;
const RECORD_HEADER: usize = 48;
const TYPE_PAYLOAD: u8 = 1;
const TYPE_WRAP: u8 = 2;
/// Bytes a record needs besides its payload (its header).
pub const RECORD_OVERHEAD: usize = RECORD_HEADER;
/// The largest spill sector number the header holds (7 bytes).
const SPILL_MAX: u64 = (1 << 56) - 1;

/// A record recovered from the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its log sequence number.
    pub lsn: u64,
    /// What the engine wrote.
    pub payload: Vec<u8>,
    /// For a record spilled into a block: the device offset where it lies and its bytes as
    /// written (the engine keeps them in its image of the block).
    pub spilled: Option<(u64, Vec<u8>)>,
}

/// The journal of one device (see the module docs for the format).
#[derive(Debug, Clone)]
pub struct Journal {
    /// Byte offset of the zone on the device.
    start: u64,
    /// Bytes of the ring.
    ring: u64,
    generation: u64,
    /// Where the next record goes (ring offset), its LSN and the chain value it names.
    head: u64,
    next_lsn: u64,
    last_crc: u32,
    /// The oldest record still needed.
    ckpt_pos: u64,
    ckpt_lsn: u64,
    ckpt_crc: u32,
    /// Every record up to this LSN is known durable.
    synced_lsn: u64,
    /// The spill block the records appended from now on name (device offset; 0: none).
    spill: u64,
    /// Bytes of spilled records since the checkpoint.
    spilled: u64,
    /// The records of an append, built here before their write (kept between appends).
    buf: Vec<u8>,
    /// Whether the ring is synced in bulk (not after each record): its writes then ask
    /// the device for a layout made for appends ([`BlockDevice::prepare_appends`]).
    bulk: bool,
}

/// An append's buffer is kept for the next one up to this size.
const KEEP_BUF_BYTES: usize = 64 * 1024;

/// The spill block a record's header names (device offset; 0: none).
fn spill_of(rec: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..7].copy_from_slice(&rec[33..40]);
    u64::from_le_bytes(b).checked_mul(SECTOR).unwrap_or(0)
}

/// Where the journal's chain stands: saved before a write and restored if it fails, so the
/// next record is written where and as the failed one would have been.
#[derive(Debug, Clone, Copy)]
pub struct Position {
    head: u64,
    next_lsn: u64,
    last_crc: u32,
    spilled: u64,
}

impl Position {
    /// The LSN of the first record appended after this position.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }
}

/// Bytes a record with `payload` bytes occupies in the ring.
pub fn record_size(payload: usize) -> u64 {
    ((RECORD_HEADER + payload) as u64).div_ceil(SECTOR) * SECTOR
}

impl Journal {
    /// Lays out an empty journal in the zone `[start, start + len)` (sector-aligned, at least
    /// four sectors) and makes it durable.
    pub fn format<D: BlockDevice>(dev: &mut D, start: u64, len: u64) -> Result<Self> {
        if !start.is_multiple_of(SECTOR)
            || !len.is_multiple_of(SECTOR)
            || len < HEADERS + 2 * SECTOR
        {
            return Err(TableError::Invalid(
                "the journal zone must be sector-aligned and at least 2 KB",
            ));
        }
        let mut j = Journal {
            buf: Vec::new(),
            bulk: false,
            start,
            ring: len - HEADERS,
            generation: 0,
            head: 0,
            next_lsn: 1,
            last_crc: 0,
            ckpt_pos: 0,
            ckpt_lsn: 1,
            ckpt_crc: 0,
            synced_lsn: 0,
            spill: 0,
            spilled: 0,
        };
        // Both copies, so that neither holds an older format's leftovers.
        j.write_header(dev)?;
        j.write_header(dev)?;
        dev.sync()?;
        Ok(j)
    }

    /// Opens the journal in the zone and returns the records written since the last
    /// checkpoint, in order, for replay.
    pub fn open<D: BlockDevice>(dev: &mut D, start: u64, len: u64) -> Result<(Self, Vec<Record>)> {
        let mut best: Option<(u64, [u8; 512], u64)> = None;
        let mut first_err = None;
        for copy in 0..2 {
            let at = start + copy * SECTOR;
            let mut h = [0u8; 512];
            dev.read(at, &mut h)?;
            match format::check(Kind::JournalHeader, &h, at) {
                Ok(_) => {
                    let generation = u64_at(&h, 16);
                    if best.is_none_or(|(g, _, _)| generation > g) {
                        best = Some((generation, h, at));
                    }
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        let Some((generation, h, at)) = best else {
            return Err(first_err.unwrap_or(TableError::Invalid("no journal header")));
        };
        let ring = u64_at(&h, 44);
        let ckpt_pos = u64_at(&h, 32);
        if len < HEADERS
            || ring != len - HEADERS
            || ckpt_pos >= ring
            || !ckpt_pos.is_multiple_of(SECTOR)
        {
            return Err(TableError::Corrupt {
                structure: Kind::JournalHeader.name(),
                offset: at,
                reason: "ring geometry does not match the zone",
            });
        }
        let mut j = Journal {
            buf: Vec::new(),
            bulk: false,
            start,
            ring,
            generation,
            head: ckpt_pos,
            next_lsn: u64_at(&h, 24),
            last_crc: u32_at(&h, 40),
            ckpt_pos,
            ckpt_lsn: u64_at(&h, 24),
            ckpt_crc: u32_at(&h, 40),
            synced_lsn: 0,
            spill: 0,
            spilled: 0,
        };
        let records = j.scan(dev)?;
        j.synced_lsn = j.next_lsn - 1;
        Ok((j, records))
    }

    /// Reads records from the checkpoint on, leaving `head`, `next_lsn` and `last_crc` after
    /// the last valid one.
    fn scan<D: BlockDevice>(&mut self, dev: &mut D) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        let mut used = 0u64;
        // The spill block the last record accepted names.
        let mut spill = 0u64;
        loop {
            if self.head == self.ring {
                self.head = 0;
            }
            let rec = match self.ring_record(dev, used)? {
                Some(rec) => rec,
                None => match self.spilled_record(dev, spill)? {
                    Some((at, rec)) => {
                        self.last_crc = u32_at(&rec, 8);
                        self.spilled += rec.len() as u64;
                        spill = spill_of(&rec);
                        out.push(Record {
                            lsn: self.next_lsn,
                            payload: rec[RECORD_HEADER..].to_vec(),
                            spilled: Some((at, rec)),
                        });
                        self.next_lsn += 1;
                        continue;
                    }
                    None => break,
                },
            };
            let size = record_size(rec.len() - RECORD_HEADER);
            self.last_crc = u32_at(&rec, 8);
            used += size;
            spill = spill_of(&rec);
            if rec[32] == TYPE_WRAP {
                self.head = self.ring;
                continue;
            }
            self.head += size;
            out.push(Record {
                lsn: self.next_lsn,
                payload: rec[RECORD_HEADER..].to_vec(),
                spilled: None,
            });
            self.next_lsn += 1;
        }
        Ok(out)
    }

    /// The record at the ring's head if it is the next one (`used`: ring bytes accepted so
    /// far).
    fn ring_record<D: BlockDevice>(&self, dev: &mut D, used: u64) -> Result<Option<Vec<u8>>> {
        let mut sector = [0u8; 512];
        let at = self.start + HEADERS + self.head;
        dev.read(at, &mut sector)?;
        let Some(len) = format::sealed_len(&sector) else {
            return Ok(None);
        };
        if sector[0..4] != Kind::JournalRecord.magic()
            || len < RECORD_HEADER
            || u64_at(&sector, 16) != self.next_lsn
            || u32_at(&sector, 24) != self.last_crc
        {
            return Ok(None);
        }
        let size = len.div_ceil(SECTOR as usize) as u64 * SECTOR;
        if self.head + size > self.ring || used + size >= self.ring {
            return Ok(None);
        }
        let mut rec = vec![0u8; len];
        dev.read(at, &mut rec)?;
        if let Err(e) = format::check(Kind::JournalRecord, &rec, at) {
            // A record that checks but has a newer format is not a tear: refuse it.
            if matches!(e, TableError::Version { .. }) {
                return Err(e);
            }
            // A torn last record ends the log. A damaged record that a valid record
            // follows (naming it as its predecessor) is corruption inside the log.
            if self.followed_by_valid(dev, size, u32_at(&sector, 8))? {
                return Err(e);
            }
            return Ok(None);
        }
        let payload_len = u32_at(&rec, 28) as usize;
        let kind = rec[32];
        if RECORD_HEADER + payload_len != len || !(kind == TYPE_PAYLOAD || kind == TYPE_WRAP) {
            return Ok(None);
        }
        Ok(Some(rec))
    }

    /// The next record, if it lies in the spill block at device offset `spill` (0: none):
    /// its device offset and bytes.
    fn spilled_record<D: BlockDevice>(
        &self,
        dev: &mut D,
        spill: u64,
    ) -> Result<Option<(u64, Vec<u8>)>> {
        if spill == 0
            || spill
                .checked_add(2 * SECTOR)
                .is_none_or(|e| e > dev.capacity())
        {
            return Ok(None);
        }
        let mut first = [0u8; 512];
        dev.read(spill, &mut first)?;
        // The record follows the block's sealed header, inside its first sector.
        let Some(header) = format::sealed_len(&first).filter(|&h| h + RECORD_HEADER <= 512) else {
            return Ok(None);
        };
        let head = &first[header..header + RECORD_HEADER];
        let len = format::sealed_len(head).unwrap_or(0);
        // The engine writes the record inside sector 0.
        if head[0..4] != Kind::JournalRecord.magic()
            || len < RECORD_HEADER
            || header + len > 512
            || u64_at(head, 16) != self.next_lsn
            || u32_at(head, 24) != self.last_crc
            || head[32] != TYPE_PAYLOAD
        {
            return Ok(None);
        }
        let at = spill + header as u64;
        let rec = first[header..header + len].to_vec();
        if let Err(e) = format::check(Kind::JournalRecord, &rec, at) {
            // As in the ring: a newer format is refused, and a damaged record that valid
            // records in the ring follow, saying it was synced, is corruption, not a tear.
            if matches!(e, TableError::Version { .. })
                || self.followed_by_valid(dev, 0, u32_at(&rec, 8))?
            {
                return Err(e);
            }
            return Ok(None);
        }
        if RECORD_HEADER + u32_at(&rec, 28) as usize != len {
            return Ok(None);
        }
        Ok(Some((at, rec)))
    }

    /// Whether valid records chained after the damaged record at `head` (of `size` bytes,
    /// whose checksum field is `crc`) say it had been synced. Follows the chain as far as it
    /// goes.
    fn followed_by_valid<D: BlockDevice>(&self, dev: &mut D, size: u64, crc: u32) -> Result<bool> {
        let (mut pos, mut prev, mut lsn) = (self.head + size, crc, self.next_lsn + 1);
        let mut walked = size;
        let mut sector = [0u8; 512];
        while walked < self.ring {
            if pos >= self.ring {
                pos = 0;
            }
            let at = self.start + HEADERS + pos;
            dev.read(at, &mut sector)?;
            let Some(len) = format::sealed_len(&sector) else {
                return Ok(false);
            };
            let rec_size = (len as u64).div_ceil(SECTOR) * SECTOR;
            if sector[0..4] != Kind::JournalRecord.magic()
                || len < RECORD_HEADER
                || pos + rec_size > self.ring
                || u32_at(&sector, 24) != prev
                || (u64_at(&sector, 16) != lsn && u64_at(&sector, 16) != lsn - 1)
            {
                return Ok(false);
            }
            let mut rec = vec![0u8; len];
            dev.read(at, &mut rec)?;
            if format::check(Kind::JournalRecord, &rec, at).is_err() {
                return Ok(false);
            }
            if u64_at(&rec, 40) >= self.next_lsn {
                return Ok(true);
            }
            if rec[32] == TYPE_PAYLOAD {
                lsn += 1;
            }
            prev = u32_at(&rec, 8);
            pos = if rec[32] == TYPE_WRAP {
                self.ring
            } else {
                pos + rec_size
            };
            walked += rec_size;
        }
        Ok(false)
    }

    fn write_header<D: BlockDevice>(&mut self, dev: &mut D) -> Result<()> {
        self.generation += 1;
        let (at, h) = self.header(self.generation, self.ckpt_lsn, self.ckpt_pos, self.ckpt_crc);
        dev.write(at, &h)?;
        Ok(())
    }

    /// Where the header of `generation` goes (the copies alternate) and its bytes.
    fn header(&self, generation: u64, lsn: u64, pos: u64, crc: u32) -> (u64, [u8; 512]) {
        let mut h = [0u8; 512];
        h[16..24].copy_from_slice(&generation.to_le_bytes());
        h[24..32].copy_from_slice(&lsn.to_le_bytes());
        h[32..40].copy_from_slice(&pos.to_le_bytes());
        h[40..44].copy_from_slice(&crc.to_le_bytes());
        h[44..52].copy_from_slice(&self.ring.to_le_bytes());
        format::seal(Kind::JournalHeader, &mut h, 52);
        (self.start + (generation % 2) * SECTOR, h)
    }

    /// The header a checkpoint at `p` writes — where, its bytes and its generation — for a
    /// writer other than the journal's own; [`adopt_checkpoint`](Self::adopt_checkpoint)
    /// once it is durable. No other header may be written in between.
    pub fn checkpoint_header(&self, p: Position) -> (u64, [u8; 512], u64) {
        let generation = self.generation + 1;
        let (at, h) = self.header(generation, p.next_lsn, self.pos_of(p), p.last_crc);
        (at, h, generation)
    }

    /// The ring offset where replay from `p` starts: a lap that ended exactly at the ring's
    /// end goes on at its start.
    fn pos_of(&self, p: Position) -> u64 {
        if p.head == self.ring { 0 } else { p.head }
    }

    /// Takes the checkpoint at `p` as done: its header of `generation`
    /// ([`checkpoint_header`](Self::checkpoint_header)) is durable. Frees the space of the
    /// records before `p`; the records after it stay.
    pub fn adopt_checkpoint(&mut self, p: Position, generation: u64) {
        if self.head == self.ring {
            self.head = 0;
        }
        self.generation = generation;
        self.ckpt_pos = self.pos_of(p);
        self.ckpt_lsn = p.next_lsn;
        self.ckpt_crc = p.last_crc;
        self.spilled = self.spilled.saturating_sub(p.spilled);
    }

    /// Bytes of the ring in use by records not yet checkpointed, and of the records spilled
    /// since the checkpoint.
    pub fn used(&self) -> u64 {
        (self.head + self.ring - self.ckpt_pos) % self.ring + self.spilled
    }

    /// Where the chain stands now (see [`rewind`](Self::rewind)).
    pub fn position(&self) -> Position {
        Position {
            head: self.head,
            next_lsn: self.next_lsn,
            last_crc: self.last_crc,
            spilled: self.spilled,
        }
    }

    /// Goes back to `p`, taken before a record whose write failed: the next record takes its
    /// place, LSN and chain value, so no record after it names one that never landed.
    pub fn rewind(&mut self, p: Position) {
        self.head = p.head;
        self.next_lsn = p.next_lsn;
        self.last_crc = p.last_crc;
        self.spilled = p.spilled;
    }

    /// Sets the spill block the records appended from now on name: the device offset of a
    /// block (sector-aligned, past the journal's headers) whose first sector will start with
    /// a sealed header, or `None`. See the module docs.
    pub fn set_spill(&mut self, at: Option<u64>) -> Result<()> {
        let at = at.unwrap_or(0);
        if !at.is_multiple_of(SECTOR) || at / SECTOR > SPILL_MAX {
            return Err(TableError::Invalid("a spill block off the sector grid"));
        }
        self.spill = at;
        Ok(())
    }

    /// Seals one record whose payload is `parts` into the front of `out`, for the caller to
    /// write right after the sealed header of the spill block named by the last record (see
    /// the module docs); returns its length. The record names the spill block set now.
    /// `Invalid` if `out` is too short.
    pub fn spill_record(&mut self, parts: &[&[u8]], out: &mut [u8]) -> Result<usize> {
        let payload = parts.iter().map(|p| p.len()).sum::<usize>();
        let len = RECORD_HEADER + payload;
        if out.len() < len {
            return Err(TableError::Invalid("no room for a spilled record"));
        }
        let rec = &mut out[..len];
        self.fill_record(rec, TYPE_PAYLOAD, parts);
        self.spilled += len as u64;
        Ok(len)
    }

    /// Bytes the ring can hold.
    pub fn capacity(&self) -> u64 {
        self.ring
    }

    /// Whether records with these payload sizes fit without a checkpoint first (counting a
    /// possible wrap record).
    pub fn fits(&self, payloads: &[usize]) -> bool {
        self.fits_bytes(payloads.iter().map(|&p| record_size(p)).sum::<u64>() + SECTOR)
    }

    /// Whether `need` bytes of records (and a possible wrap record) fit.
    fn fits_bytes(&self, need: u64) -> bool {
        // Keep one sector free so a full ring never looks empty.
        self.used() + need + self.wasted_at_wrap(need) < self.ring
    }

    /// Bytes skipped at the end of the ring if `need` bytes are appended now.
    fn wasted_at_wrap(&self, need: u64) -> u64 {
        if self.head + need > self.ring {
            self.ring - self.head
        } else {
            0
        }
    }

    /// Says whether the ring is synced in bulk rather than after each record (the table
    /// engine's modes but `full`): its flushes then prepare the device for appends.
    pub fn set_bulk_synced(&mut self, bulk: bool) {
        self.bulk = bulk;
    }

    /// Tells the journal that the device was synced: every record appended so far is
    /// durable. Later records carry this, which lets recovery tell corruption from a tear.
    pub fn note_synced(&mut self) {
        self.synced_lsn = self.next_lsn - 1;
    }

    /// The LSN of the first record not yet checkpointed (where replay starts).
    pub fn checkpoint_lsn(&self) -> u64 {
        self.ckpt_lsn
    }

    /// The LSN the next record will get.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Appends one record per payload, in order, with as few device writes as the ring allows
    /// (one, or two around the wrap). Not durable until the device is synced. Returns the LSN
    /// of the last record.
    pub fn append<D: BlockDevice>(&mut self, dev: &mut D, payloads: &[&[u8]]) -> Result<u64> {
        self.append_records(dev, payloads.iter().map(core::slice::from_ref))
    }

    /// Appends one record whose payload is `parts`, one after the other (as
    /// [`append`](Self::append) of their concatenation, without making it).
    pub fn append_parts<D: BlockDevice>(&mut self, dev: &mut D, parts: &[&[u8]]) -> Result<u64> {
        self.append_records(dev, core::iter::once(parts))
    }

    fn append_records<'a, D: BlockDevice>(
        &mut self,
        dev: &mut D,
        records: impl Iterator<Item = &'a [&'a [u8]]> + Clone,
    ) -> Result<u64> {
        let payload_len = |parts: &[&[u8]]| parts.iter().map(|p| p.len()).sum::<usize>();
        let need = records
            .clone()
            .map(|r| record_size(payload_len(r)))
            .sum::<u64>()
            + SECTOR;
        if !self.fits_bytes(need) {
            return Err(TableError::JournalFull {
                needed: need,
                capacity: self.ring,
            });
        }
        let mut buf = core::mem::take(&mut self.buf);
        buf.clear();
        let before = self.position();
        let r = self.append_into(dev, records, &mut buf, payload_len);
        if r.is_err() {
            self.rewind(before);
        }
        // A big transaction's buffer is not kept.
        if buf.capacity() <= KEEP_BUF_BYTES {
            self.buf = buf;
        }
        r
    }

    fn append_into<'a, D: BlockDevice>(
        &mut self,
        dev: &mut D,
        records: impl Iterator<Item = &'a [&'a [u8]]>,
        buf: &mut Vec<u8>,
        payload_len: impl Fn(&[&[u8]]) -> usize,
    ) -> Result<u64> {
        let mut buf_start = self.head;
        for parts in records {
            let size = record_size(payload_len(parts));
            if self.head + size > self.ring {
                // Close this lap: a wrap record where there is room for one, then go on at 0.
                if self.head < self.ring {
                    self.push_record(buf, TYPE_WRAP, &[]);
                }
                self.flush(dev, buf_start, buf)?;
                self.head = 0;
                buf_start = 0;
            }
            self.push_record(buf, TYPE_PAYLOAD, parts);
            self.head += size;
        }
        self.flush(dev, buf_start, buf)?;
        Ok(self.next_lsn - 1)
    }

    /// Appends to `buf` a record of this kind whose payload is `parts`, one after the other.
    fn push_record(&mut self, buf: &mut Vec<u8>, kind: u8, parts: &[&[u8]]) {
        let payload = parts.iter().map(|p| p.len()).sum::<usize>();
        let at = buf.len();
        buf.resize(at + record_size(payload) as usize, 0);
        self.fill_record(&mut buf[at..at + RECORD_HEADER + payload], kind, parts);
    }

    /// Builds a record of this kind in `rec` (exactly its header and payload) and advances
    /// the chain.
    fn fill_record(&mut self, rec: &mut [u8], kind: u8, parts: &[&[u8]]) {
        let len = rec.len();
        let payload = len - RECORD_HEADER;
        rec[..RECORD_HEADER].fill(0);
        rec[16..24].copy_from_slice(&self.next_lsn.to_le_bytes());
        rec[24..28].copy_from_slice(&self.last_crc.to_le_bytes());
        rec[28..32].copy_from_slice(&(payload as u32).to_le_bytes());
        rec[32] = kind;
        rec[33..40].copy_from_slice(&(self.spill / SECTOR).to_le_bytes()[..7]);
        rec[40..48].copy_from_slice(&self.synced_lsn.to_le_bytes());
        let mut p = RECORD_HEADER;
        for part in parts {
            rec[p..p + part.len()].copy_from_slice(part);
            p += part.len();
        }
        format::seal(Kind::JournalRecord, rec, len);
        self.last_crc = u32_at(rec, 8);
        if kind == TYPE_PAYLOAD {
            self.next_lsn += 1;
        }
    }

    fn flush<D: BlockDevice>(&self, dev: &mut D, ring_at: u64, buf: &mut Vec<u8>) -> Result<()> {
        if !buf.is_empty() {
            let at = self.start + HEADERS + ring_at;
            // The ring is written again and again, with syncs: worth allocating ahead.
            if self.bulk {
                dev.prepare_appends(at, buf.len() as u64);
            } else {
                dev.prepare(at, buf.len() as u64);
            }
            dev.write(at, buf)?;
            buf.clear();
        }
        Ok(())
    }

    /// Declares every record appended so far applied to its home locations (the caller has
    /// written and synced them) and frees their space: writes the header and syncs.
    pub fn checkpoint<D: BlockDevice>(&mut self, dev: &mut D) -> Result<()> {
        self.checkpoint_at(dev, self.position())
    }

    /// Declares the records appended before `p` (a [`position`](Self::position) taken
    /// earlier) applied to their home locations and frees their space; the records after it
    /// stay. Writes the header and syncs; the caller has made the records after `p` durable
    /// first if it wants them to survive with it.
    pub fn checkpoint_at<D: BlockDevice>(&mut self, dev: &mut D, p: Position) -> Result<()> {
        let (at, h, generation) = self.checkpoint_header(p);
        dev.write(at, &h)?;
        self.adopt_checkpoint(p, generation);
        dev.sync()?;
        self.note_synced();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_device::MemBlock;

    fn payload(i: u64) -> Vec<u8> {
        (0..(i * 97 % 1500)).map(|j| (i ^ j) as u8).collect()
    }

    #[test]
    fn records_come_back_in_order_across_many_laps_of_the_ring() {
        let mut dev = MemBlock::new(64 * 1024);
        let mut j = Journal::format(&mut dev, 4096, 16 * 1024).unwrap();
        let mut since_ckpt = Vec::new();
        for i in 0..400u64 {
            let p = payload(i);
            if !j.fits(&[p.len()]) {
                j.checkpoint(&mut dev).unwrap();
                since_ckpt.clear();
            }
            let lsn = j.append(&mut dev, &[&p]).unwrap();
            since_ckpt.push(Record {
                lsn,
                payload: p,
                spilled: None,
            });
            if i % 37 == 0 {
                let (j2, recs) = Journal::open(&mut dev, 4096, 16 * 1024).unwrap();
                assert_eq!(recs, since_ckpt, "after record {i}");
                assert_eq!(j2.next_lsn(), j.next_lsn());
            }
        }
        assert!(j.generation > 4, "the ring wrapped several times");
    }

    #[test]
    fn a_batch_is_one_write_and_a_full_journal_says_so() {
        let mut dev = ember_device::Accounted::new(MemBlock::new(32 * 1024));
        let mut j = Journal::format(&mut dev, 0, 8 * 1024).unwrap();
        let before = dev.stats();
        j.append(&mut dev, &[b"one", b"two", b"three"]).unwrap();
        assert_eq!(dev.stats().since(&before).writes, 1);
        let err = j.append(&mut dev, &[&vec![0u8; 8 * 1024]]).unwrap_err();
        assert!(matches!(err, TableError::JournalFull { .. }));
        let (_, recs) = Journal::open(&mut dev, 0, 8 * 1024).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2].payload, b"three");
    }

    #[test]
    fn a_damaged_record_inside_the_log_is_an_error_not_the_end() {
        let mut dev = MemBlock::new(64 * 1024);
        let mut j = Journal::format(&mut dev, 0, 32 * 1024).unwrap();
        for i in 0..5u64 {
            j.append(&mut dev, &[&payload(i + 3)]).unwrap();
            j.note_synced(); // MemBlock writes are durable at once
        }
        // Flip a payload byte of the second record.
        let second = HEADERS + record_size(payload(3).len());
        let mut b = [0u8; 1];
        dev.read(second + 45, &mut b).unwrap();
        dev.write(second + 45, &[b[0] ^ 1]).unwrap();
        let err = Journal::open(&mut dev, 0, 32 * 1024).unwrap_err();
        assert!(err.to_string().contains("journal record"), "{err}");
        // A damaged record of the last, unsynced batch is just the end of the log, even
        // with a valid record of the same batch after it.
        let mut dev = MemBlock::new(64 * 1024);
        let mut j = Journal::format(&mut dev, 0, 32 * 1024).unwrap();
        j.append(&mut dev, &[b"zero"]).unwrap();
        j.note_synced();
        j.append(&mut dev, &[b"one", b"two"]).unwrap();
        dev.write(HEADERS + 512 + 50, &[0xEE]).unwrap();
        let (_, recs) = Journal::open(&mut dev, 0, 32 * 1024).unwrap();
        assert_eq!(recs.len(), 1);
    }

    #[test]
    fn a_record_of_a_newer_format_is_refused_not_dropped() {
        let mut dev = MemBlock::new(64 * 1024);
        let mut j = Journal::format(&mut dev, 0, 32 * 1024).unwrap();
        j.append(&mut dev, &[b"zero"]).unwrap();
        j.append(&mut dev, &[b"one"]).unwrap();
        // Re-seal the second record as a newer build would: version 9, a valid checksum.
        let at = HEADERS + 512;
        let mut rec = [0u8; 512];
        dev.read(at, &mut rec).unwrap();
        let len = format::sealed_len(&rec).unwrap();
        rec[4..6].copy_from_slice(&9u16.to_le_bytes());
        rec[8..12].fill(0);
        let crc = crc32fast::hash(&rec[..len]);
        rec[8..12].copy_from_slice(&crc.to_le_bytes());
        dev.write(at, &rec).unwrap();
        let err = Journal::open(&mut dev, 0, 32 * 1024).unwrap_err();
        assert!(matches!(err, TableError::Version { found: 9, .. }), "{err}");
    }

    #[test]
    fn a_spilled_record_is_found_through_the_record_before_it() {
        let mut dev = MemBlock::new(64 * 1024);
        let mut j = Journal::format(&mut dev, 0, 16 * 1024).unwrap();
        let block = 32 * 1024u64;
        j.set_spill(Some(block)).unwrap();
        j.append(&mut dev, &[b"one"]).unwrap();
        // The block: a sealed 40-byte header, the record right after it, in one write.
        j.set_spill(None).unwrap();
        let mut image = vec![0u8; 1024];
        let len = j.spill_record(&[b"two"], &mut image[40..]).unwrap();
        format::seal(Kind::Slotted, &mut image[..512], 40);
        dev.write(block, &image).unwrap();
        j.append(&mut dev, &[b"three"]).unwrap();
        assert_eq!(j.used(), 2 * SECTOR + len as u64);
        let (j2, recs) = Journal::open(&mut dev, 0, 16 * 1024).unwrap();
        let payloads: Vec<&[u8]> = recs.iter().map(|r| r.payload.as_slice()).collect();
        assert_eq!(payloads, [&b"one"[..], b"two", b"three"]);
        assert_eq!(
            recs[1].spilled,
            Some((block + 40, image[40..40 + len].to_vec()))
        );
        assert_eq!(j2.next_lsn(), 4);
        assert_eq!(j2.used(), j.used());
        // A block that never received the record ends the log there, and the records
        // after it in the ring are not taken (they do not chain to the one before).
        dev.write(block + 40 + 20, &[0xEE]).unwrap();
        let (_, recs) = Journal::open(&mut dev, 0, 16 * 1024).unwrap();
        assert_eq!(recs.len(), 1);
        // Nor does a valid record of an earlier use of the block (another LSN and chain).
        let mut scratch = MemBlock::new(64 * 1024);
        let mut earlier = Journal::format(&mut scratch, 0, 16 * 1024).unwrap();
        earlier.append(&mut scratch, &[b"a", b"b", b"c"]).unwrap();
        image[40..].fill(0);
        earlier.spill_record(&[b"old"], &mut image[40..]).unwrap();
        let mut dev2 = MemBlock::new(64 * 1024);
        dev2.write(block, &image).unwrap();
        let mut j = Journal::format(&mut dev2, 0, 16 * 1024).unwrap();
        j.set_spill(Some(block)).unwrap();
        j.append(&mut dev2, &[b"one"]).unwrap();
        let (_, recs) = Journal::open(&mut dev2, 0, 16 * 1024).unwrap();
        assert_eq!(
            recs.len(),
            1,
            "an old record in the spill block is not the next one"
        );
    }

    #[test]
    fn damaged_headers_are_reported_by_name() {
        let mut dev = MemBlock::new(16 * 1024);
        Journal::format(&mut dev, 0, 8 * 1024).unwrap();
        dev.write(0, &[0xAB; 1024]).unwrap();
        let err = Journal::open(&mut dev, 0, 8 * 1024).unwrap_err();
        assert!(err.to_string().contains("journal header"), "{err}");
    }
}
