//! The global undo log (a circular buffer of erase units), commit and restore, discard and
//! erase-based undo, and the redo log of the WAL baseline.

use ember_device::FlashDevice;

use crate::config::{Checkpointing, Config, Layout, MAX_PARTITIONS, Undo};
use crate::error::{Error, Result, Structure};
use crate::format::{
    BACKUP_HEADER, COMMIT_FIXED, MARK_ENTRY, Mark, MarkKind, SEG_HEADER, SMALL_ENTRY, TAG_ABORT,
    TAG_BACKUP, TAG_COMMIT, TAG_MARK, TAG_MARK_V1, TAG_REDO, crc32, le16, le32, redo_size,
    small_entry,
};
use crate::store::{F_COMPACT, MARK_SLOTS, Part, Stats, Store};

/// Where the log is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogPos {
    /// Current erase unit of the log, its sequence number, and the next byte in it.
    pub seg: u16,
    pub seq: u32,
    pub pos: u32,
    /// Sequence number of the oldest unit still needed (the one holding the last commit).
    pub keep: u32,
    /// WAL: where the redo entries of the running interval start.
    pub pending: LogAt,
}

/// A position in the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogAt {
    pub seg: u16,
    pub seq: u32,
    pub pos: u32,
}

/// A log entry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Entry {
    Mark(Mark),
    Commit {
        seq: u32,
        ctx_len: u16,
        state_len: u16,
        /// Format version of the record (1: the window is a ring; 2: it is an order).
        version: u8,
    },
    Redo {
        part: u8,
        off: u32,
        len: u8,
        data: [u8; 16],
    },
    Abort,
}

/// One step of reading the log.
enum Step {
    /// Erased: no more entries in this unit.
    End,
    /// A zeroed word (a repaired torn entry).
    Pad,
    /// Not a valid entry: a torn write (only ever the last one), or corruption.
    Bad,
    Item(Entry, u32),
}

const STATE_MAX: usize = 4 + 8 * MAX_PARTITIONS;

/// Format version of the commit records this engine writes (version 1 records, whose
/// partition window is a ring, are still read).
const COMMIT_VERSION: u8 = 2;

impl<F: FlashDevice, const D: usize> Store<F, D> {
    fn seg_addr(&self, seg: u16) -> u64 {
        self.lay.log_base + u64::from(seg) * u64::from(self.lay.seg)
    }

    fn log_units(&self) -> u16 {
        self.cfg.log_units
    }

    /// Largest entry the log holds (how far a torn one can reach).
    fn max_entry(&self) -> u32 {
        u32::from(self.lay.commit_len)
            .max(redo_size(16))
            .max(SMALL_ENTRY)
    }

    /// Appends one entry (given in pieces, written in that order) to the log.
    pub(crate) fn log_append(&mut self, pieces: &[&[u8]]) -> Result<LogAt> {
        let len: u32 = pieces.iter().map(|p| p.len() as u32).sum();
        if self.log.pos + len > self.lay.seg {
            self.log_switch()?;
        }
        let at = LogAt {
            seg: self.log.seg,
            seq: self.log.seq,
            pos: self.log.pos,
        };
        let mut addr = self.seg_addr(at.seg) + u64::from(at.pos);
        for piece in pieces {
            self.write(Structure::Log, addr, piece)?;
            addr += piece.len() as u64;
        }
        self.log.pos += len;
        self.stats.log_bytes = self.stats.log_bytes.wrapping_add(len);
        Ok(at)
    }

    /// Moves to the next unit of the ring: erases it and writes its header.
    fn log_switch(&mut self) -> Result<()> {
        let seq = self.log.seq.wrapping_add(1);
        if seq.wrapping_sub(self.log.keep) >= u32::from(self.log_units()) {
            return Err(Error::LogFull);
        }
        let seg = (self.log.seg + 1) % self.log_units();
        let addr = self.seg_addr(seg);
        // A unit the log has not reached since the format is still erased: checking costs
        // a read of its first bytes where erasing costs 25 ms (Table I).
        if !self.is_erased(Structure::Log, addr, u64::from(self.lay.seg))? {
            self.erase(Structure::Log, addr, u64::from(self.lay.seg))?;
            self.stats.log_erases = self.stats.log_erases.wrapping_add(1);
        }
        self.write(Structure::Log, addr, &self.seg_header(seq))?;
        self.log.seg = seg;
        self.log.seq = seq;
        self.log.pos = SEG_HEADER;
        Ok(())
    }

    fn seg_header(&self, seq: u32) -> [u8; 12] {
        let mut h = [0u8; 12];
        h[..4].copy_from_slice(&[b'E', b'Q', 1, self.cfg.checkpointing.code()]);
        h[4..8].copy_from_slice(&seq.to_le_bytes());
        let c = crc32(&h[..8]);
        h[8..].copy_from_slice(&c.to_le_bytes());
        h
    }

    /// The sequence number of a log unit with a valid header.
    fn read_seg_header(&mut self, seg: u16) -> Result<Option<u32>> {
        let mut h = [0u8; 12];
        self.read(Structure::Log, self.seg_addr(seg), &mut h)?;
        let ok = h[..3] == [b'E', b'Q', 1] && le32(&h[8..]) == crc32(&h[..8]);
        if ok && h[3] != self.cfg.checkpointing.code() {
            return Err(Error::Config {
                reason: "the flash was formatted with another checkpointing scheme",
            });
        }
        Ok(ok.then(|| le32(&h[4..])))
    }

    /// Reads the entry at `at`.
    fn read_entry(&mut self, at: LogAt) -> Result<Step> {
        let seg = self.lay.seg;
        if at.pos + 4 > seg {
            return Ok(Step::End);
        }
        let addr = self.seg_addr(at.seg) + u64::from(at.pos);
        let mut h = [0u8; 12];
        let n = (seg - at.pos).min(12) as usize;
        self.read(Structure::Log, addr, &mut h[..n])?;
        if h[..4] == [0xFF; 4] {
            return Ok(Step::End);
        }
        if h[..4] == [0; 4] {
            return Ok(Step::Pad);
        }
        let small_ok = n == 12 && le32(&h[8..]) == crc32(&h[..8]);
        match h[0] {
            TAG_MARK => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&h[..8]);
                Ok(match Mark::decode(&b) {
                    Some(m) if n >= 8 => Step::Item(Entry::Mark(m), MARK_ENTRY),
                    _ => Step::Bad,
                })
            }
            TAG_MARK_V1 => Ok(match (small_ok, Mark::decode_v1(&h)) {
                (true, Some(m)) => Step::Item(Entry::Mark(m), SMALL_ENTRY),
                _ => Step::Bad,
            }),
            TAG_ABORT if small_ok && h[1..4] == [0; 3] => Ok(Step::Item(Entry::Abort, SMALL_ENTRY)),
            TAG_REDO => {
                let len = u32::from(h[2]);
                let total = redo_size(len);
                if len == 0 || len > 16 || h[3] != 0 || total > seg - at.pos {
                    return Ok(Step::Bad);
                }
                let mut b = [0u8; 28];
                let t = total as usize;
                self.read(Structure::Log, addr, &mut b[..t])?;
                if le32(&b[t - 4..]) != crc32(&b[..t - 4]) {
                    return Ok(Step::Bad);
                }
                let mut data = [0u8; 16];
                data[..len as usize].copy_from_slice(&b[8..8 + len as usize]);
                Ok(Step::Item(
                    Entry::Redo {
                        part: h[1],
                        off: le32(&b[4..]),
                        len: len as u8,
                        data,
                    },
                    total,
                ))
            }
            TAG_COMMIT if n == 12 && (h[1] == 1 || h[1] == COMMIT_VERSION) => {
                let ctx_len = le16(&h[2..]);
                let state_len = le16(&h[8..]);
                let total = (COMMIT_FIXED + u32::from(state_len) + u32::from(ctx_len))
                    .next_multiple_of(4)
                    + 4;
                if usize::from(state_len) > STATE_MAX
                    || ctx_len > self.cfg.context_max
                    || total > seg - at.pos
                {
                    return Ok(Step::Bad);
                }
                // The CRC over the whole record, read in pieces.
                let mut hasher = crc32fast::Hasher::new();
                let mut buf = [0u8; 64];
                let mut done = 0u32;
                while done < total - 4 {
                    let k = (total - 4 - done).min(64) as usize;
                    self.read(Structure::Commit, addr + u64::from(done), &mut buf[..k])?;
                    hasher.update(&buf[..k]);
                    done += k as u32;
                }
                let mut c = [0u8; 4];
                self.read(Structure::Commit, addr + u64::from(total - 4), &mut c)?;
                if hasher.finalize() != le32(&c) {
                    return Ok(Step::Bad);
                }
                Ok(Step::Item(
                    Entry::Commit {
                        seq: le32(&h[4..]),
                        ctx_len,
                        state_len,
                        version: h[1],
                    },
                    total,
                ))
            }
            _ => Ok(Step::Bad),
        }
    }

    /// The next entry from `at` (advancing it), through the units up to `last_seq`; `None`
    /// at the end (then `at` is where the log ends).
    pub(crate) fn log_next(
        &mut self,
        at: &mut LogAt,
        last_seq: u32,
    ) -> Result<Option<(LogAt, Entry)>> {
        loop {
            match self.read_entry(*at)? {
                Step::Item(e, len) => {
                    let here = *at;
                    at.pos += len;
                    return Ok(Some((here, e)));
                }
                Step::Pad => at.pos += 4,
                Step::End | Step::Bad => {
                    if at.seq == last_seq || at.seq.wrapping_sub(last_seq) as i32 > 0 {
                        return Ok(None);
                    }
                    at.seq = at.seq.wrapping_add(1);
                    at.seg = (at.seg + 1) % self.log_units();
                    at.pos = SEG_HEADER;
                }
            }
        }
    }

    // ---- state -----------------------------------------------------------------------------

    /// The state a commit record saves (version 2): `oldest | live | partitions | 0`, then
    /// per partition `units u16 | records u16 | root u16 | rank u8 | 0`, where `rank` is the
    /// partition's place in the FIFO order (`< live`: live, oldest first; the rest free).
    fn encode_state(&self, out: &mut [u8; STATE_MAX]) -> usize {
        out[0] = self.order[0];
        out[1] = self.live;
        out[2] = self.lay.parts;
        out[3] = 0;
        for (rank, &p) in self.order[..usize::from(self.lay.parts)].iter().enumerate() {
            let p = usize::from(p);
            let pt = self.parts[p];
            let b = &mut out[4 + 8 * p..12 + 8 * p];
            b[..2].copy_from_slice(&pt.units.to_le_bytes());
            b[2..4].copy_from_slice(&pt.records.to_le_bytes());
            b[4..6].copy_from_slice(&pt.root.to_le_bytes());
            b[6..8].copy_from_slice(&[rank as u8, 0]);
        }
        4 + 8 * usize::from(self.lay.parts)
    }

    /// Loads and checks a committed state.
    fn decode_state(&mut self, b: &[u8], version: u8, addr: u64) -> Result<()> {
        let bad = |reason| {
            Err(Error::Corrupt {
                what: Structure::Commit,
                addr,
                reason,
            })
        };
        let n = self.lay.parts;
        if b.len() != 4 + 8 * usize::from(n) || b[2] != n {
            return bad("the state does not match the configured partitions");
        }
        if b[0] >= n || b[1] == 0 || b[1] > n {
            return bad("the partition window is out of range");
        }
        self.live = b[1];
        let mut seen = 0u8;
        for p in 0..n {
            let e = &b[4 + 8 * usize::from(p)..];
            let pt = Part {
                units: le16(e),
                records: le16(&e[2..]),
                root: le16(&e[4..]),
            };
            self.parts[usize::from(p)] = pt;
            // Version 1 kept a ring from the oldest partition.
            let rank = if version == 1 {
                (p + n - b[0]) % n
            } else {
                e[6]
            };
            if rank >= n || seen >> rank & 1 == 1 {
                return bad("the partition order is not a permutation");
            }
            seen |= 1 << rank;
            self.order[usize::from(rank)] = p;
        }
        for i in 0..self.live {
            let p = self.order[usize::from(i)];
            let pt = self.parts[usize::from(p)];
            if pt.units == 0 || pt.root >= pt.units || !self.fits(p, 0, 0) {
                return bad("a partition's free-space pointers are out of range");
            }
        }
        Ok(())
    }

    // ---- format, open, commit -----------------------------------------------------------------

    fn blank(dev: F, cfg: Config<D>) -> Result<Self> {
        let lay = Layout::new(&cfg, &dev.geometry())?;
        Ok(Store {
            dev,
            cfg,
            lay,
            parts: [Part::default(); MAX_PARTITIONS],
            order: [0, 1, 2, 3, 4, 5, 6, 7],
            live: 1,
            ck_mask: 1,
            ck_units: 0,
            ck_records: 0,
            flags: 0,
            marks: [0; MARK_SLOTS],
            log: LogPos::default(),
            seq: 0,
            stats: Stats::default(),
        })
    }

    /// Erases the store's flash and commits an empty store with the caller's context.
    pub fn format(dev: F, cfg: Config<D>, context: &[u8]) -> Result<Self> {
        let mut s = Self::blank(dev, cfg)?;
        if context.len() > usize::from(cfg.context_max) {
            return Err(Error::Buffer {
                needed: context.len(),
                given: usize::from(cfg.context_max),
            });
        }
        let end = s.lay.part(s.lay.parts);
        s.clean(Structure::Partition, s.lay.log_base, end - s.lay.log_base)?;
        s.parts[0] = Part {
            units: 1,
            records: 0,
            root: 0,
        };
        s.log = LogPos {
            seg: 0,
            seq: 1,
            pos: SEG_HEADER,
            keep: 1,
            pending: LogAt {
                seg: 0,
                seq: 1,
                pos: SEG_HEADER,
            },
        };
        let h = s.seg_header(1);
        s.write(Structure::Log, s.lay.log_base, &h)?;
        s.commit(context)?;
        Ok(s)
    }

    /// Commits a checkpoint: the engine's state and the caller's context blob, in one
    /// checksummed commit record. When it returns, a power failure restores exactly this.
    ///
    /// Under COW, after a put answered [`Error::CheckpointNeeded`] because the current
    /// partition is full but mostly dead, the commit first compacts it: its live tree is
    /// copied into a free partition that the last checkpoint does not hold (if the free one
    /// is the oldest partition, just dropped, a commit record first makes the drop durable),
    /// and the commit record then names the copy; the old partition becomes free.
    pub fn commit(&mut self, context: &[u8]) -> Result<()> {
        if context.len() > usize::from(self.cfg.context_max) {
            return Err(Error::Buffer {
                needed: context.len(),
                given: usize::from(self.cfg.context_max),
            });
        }
        if self.cfg.checkpointing == Checkpointing::Cow
            && self.flags & F_COMPACT != 0
            && self.live < self.lay.parts
        {
            let q = self.order[usize::from(self.live)];
            if self.committed(q) {
                self.commit_record(context)?;
            }
            self.cow_compact(self.cur(), q)?;
        }
        self.commit_record(context)
    }

    /// Writes a commit record of the current state and `context` (checked by the caller).
    fn commit_record(&mut self, context: &[u8]) -> Result<()> {
        let mut state = [0u8; STATE_MAX];
        let sl = self.encode_state(&mut state);
        let seq = self.seq.wrapping_add(1);
        let mut head = [0u8; 12];
        head[0] = TAG_COMMIT;
        head[1] = COMMIT_VERSION;
        head[2..4].copy_from_slice(&(context.len() as u16).to_le_bytes());
        head[4..8].copy_from_slice(&seq.to_le_bytes());
        head[8..10].copy_from_slice(&(sl as u16).to_le_bytes());
        let body = COMMIT_FIXED as usize + sl + context.len();
        let pad = body.next_multiple_of(4) - body;
        let mut h = crc32fast::Hasher::new();
        h.update(&head);
        h.update(&state[..sl]);
        h.update(context);
        h.update(&[0u8; 4][..pad]);
        let mut tail = [0u8; 8];
        tail[pad..pad + 4].copy_from_slice(&h.finalize().to_le_bytes());
        let at = self.log_append(&[&head, &state[..sl], context, &tail[..pad + 4]])?;
        if self.cfg.checkpointing == Checkpointing::Wal {
            // Write the interval's redo entries home (idempotent: a restore repeats it).
            let end = LogAt {
                seg: self.log.seg,
                seq: self.log.seq,
                pos: self.log.pos,
            };
            self.wal_apply(self.log.pending, at)?;
            self.log.pending = end;
        }
        self.seq = seq;
        self.log.keep = at.seq;
        self.checkpointed();
        Ok(())
    }

    /// RAM bookkeeping after a commit or a restore: the current state is the checkpoint.
    fn checkpointed(&mut self) {
        self.ck_mask = self.live_mask();
        let c = self.parts[usize::from(self.cur())];
        self.ck_units = c.units;
        self.ck_records = c.records;
        self.table_clear();
    }

    /// Opens the store after a power-up: restores the last checkpoint (undoing everything
    /// written after it) and copies its context blob into `context`, returning its length.
    /// Power may fail during restore: the next open finishes the job.
    pub fn open(dev: F, cfg: Config<D>, context: &mut [u8]) -> Result<(Self, usize)> {
        let mut s = Self::blank(dev, cfg)?;
        let n = s.restore(context)?;
        Ok((s, n))
    }

    fn restore(&mut self, context: &mut [u8]) -> Result<usize> {
        self.finish_backup()?;
        let units = self.log_units();
        // The run of log units with consecutive sequence numbers ending at the newest.
        let mut newest: Option<(u16, u32)> = None;
        for s in 0..units {
            if let Some(q) = self.read_seg_header(s)?
                && newest.is_none_or(|(_, b)| q > b)
            {
                newest = Some((s, q));
            }
        }
        let (last_seg, last_seq) = newest.ok_or(Error::NoCheckpoint)?;
        let mut first = (last_seg, last_seq);
        for _ in 1..units {
            let s = (first.0 + units - 1) % units;
            match self.read_seg_header(s)? {
                Some(q) if q == first.1.wrapping_sub(1) => first = (s, q),
                _ => break,
            }
        }
        // Walk it: the last commit, where its interval's redo entries began, what follows.
        let mut at = LogAt {
            seg: first.0,
            seq: first.1,
            pos: SEG_HEADER,
        };
        let mut bound = at;
        let mut commit: Option<(LogAt, LogAt, u32, u16, u16, u8, LogAt)> = None;
        let mut stale = false;
        while let Some((here, e)) = self.log_next(&mut at, last_seq)? {
            match e {
                Entry::Commit {
                    seq,
                    ctx_len,
                    state_len,
                    version,
                } => {
                    commit = Some((here, at, seq, ctx_len, state_len, version, bound));
                    bound = at;
                    stale = false;
                }
                Entry::Abort => {
                    bound = at;
                    stale = false;
                }
                Entry::Redo { .. } => stale = true,
                Entry::Mark(_) => {}
            }
        }
        let (c_at, c_end, seq, ctx_len, state_len, version, apply_from) =
            commit.ok_or(Error::NoCheckpoint)?;
        if context.len() < usize::from(ctx_len) {
            return Err(Error::Buffer {
                needed: usize::from(ctx_len),
                given: context.len(),
            });
        }
        // Repair a torn tail: zero whatever a torn entry left after the last valid one.
        let end = self.repair_tail(at)?;
        self.log = LogPos {
            seg: at.seg,
            seq: at.seq,
            pos: end,
            keep: c_at.seq,
            pending: bound,
        };
        self.seq = seq;
        let c_addr = self.seg_addr(c_at.seg) + u64::from(c_at.pos);
        let mut state = [0u8; STATE_MAX];
        let sl = usize::from(state_len);
        self.read(Structure::Commit, c_addr + 12, &mut state[..sl])?;
        self.decode_state(&state[..sl], version, c_addr)?;
        let cl = usize::from(ctx_len);
        self.read(
            Structure::Commit,
            c_addr + 12 + sl as u64,
            &mut context[..cl],
        )?;
        self.ck_mask = self.live_mask();
        match self.cfg.checkpointing {
            Checkpointing::Rollback => {
                let mut at = c_end;
                while let Some((_, e)) = self.log_next(&mut at, last_seq)? {
                    if let Entry::Mark(m) = e {
                        self.undo(m)?;
                    }
                }
            }
            Checkpointing::Wal => {
                self.wal_apply(apply_from, c_at)?;
                if stale {
                    // The lost run's redo entries are void: an abort entry says so, and a
                    // fresh commit of the restored state (below) frees their log space.
                    let a = small_entry(TAG_ABORT, seq);
                    self.log_append(&[&a])?;
                    self.log.pending = LogAt {
                        seg: self.log.seg,
                        seq: self.log.seq,
                        pos: self.log.pos,
                    };
                }
            }
            Checkpointing::Cow => self.cow_restore()?,
        }
        self.checkpointed();
        // Power failing again and again before a commit would fill the log with the marks
        // (or redo entries) of lost runs: past half of it, commit the restored state anew.
        let cap = u64::from(self.log_units()) * u64::from(self.lay.seg);
        if self.log_usage() > cap / 2 || (stale && self.cfg.checkpointing == Checkpointing::Wal) {
            self.commit(&context[..cl])?;
        }
        Ok(cl)
    }

    /// Zeroes what a torn entry left at the end of the log; returns where writing resumes.
    fn repair_tail(&mut self, at: LogAt) -> Result<u32> {
        let seg = self.lay.seg;
        let base = self.seg_addr(at.seg);
        let reach = (at.pos + self.max_entry()).min(seg);
        let mut last = None;
        let mut buf = [0u8; 64];
        let mut p = at.pos;
        while p < reach {
            let k = (reach - p).min(64) as usize;
            self.read(Structure::Log, base + u64::from(p), &mut buf[..k])?;
            if let Some(i) = buf[..k].iter().rposition(|&b| b != 0xFF) {
                last = Some(p + i as u32);
            }
            p += k as u32;
        }
        let Some(last) = last else {
            return Ok(at.pos);
        };
        let end = (last + 1).next_multiple_of(4).min(seg);
        self.zero(
            Structure::Log,
            base + u64::from(at.pos),
            u64::from(end - at.pos),
        )?;
        Ok(end)
    }

    /// Writes zeros over `[addr, addr + len)`, skipping bytes already zero.
    fn zero(&mut self, what: Structure, addr: u64, len: u64) -> Result<()> {
        let mut buf = [0u8; 64];
        let mut at = 0;
        while at < len {
            let k = (len - at).min(64) as usize;
            self.read(what, addr + at, &mut buf[..k])?;
            if buf[..k].iter().any(|&b| b != 0) {
                self.write(what, addr + at, &[0u8; 64][..k])?;
            }
            at += k as u64;
        }
        Ok(())
    }

    // ---- undo --------------------------------------------------------------------------------

    /// Where the node area of `p` ends, scanning from unit `from`: the first run of erased
    /// units longer than any run inside allocated groups (a split writes at least one of its
    /// children; two neighbouring groups leave at most `2 * fanout - 2` erased units between
    /// written ones).
    pub(crate) fn node_area_end(&mut self, p: u8, from: u16) -> Result<u16> {
        let need = 2 * u32::from(self.group_units());
        let max = self.lay.part_len / self.lay.node;
        let mut run = 0;
        let mut u = u32::from(from);
        while u < max {
            let addr = self.lay.at(p, u * self.lay.node);
            if self.is_erased(Structure::Node, addr, u64::from(self.lay.node))? {
                run += 1;
                if run >= need - 1 {
                    return Ok((u + 1 - run) as u16);
                }
            } else {
                run = 0;
            }
            u += 1;
        }
        Ok((u - run) as u16)
    }

    /// Where the record area of `p` ends, scanning from record `from`.
    pub(crate) fn record_area_end(&mut self, p: u8, from: u16) -> Result<u16> {
        let max = (self.lay.part_len / u32::from(self.lay.rec)) as u16;
        let mut r = from;
        while r < max {
            let addr = self.lay.at(p, self.lay.rec_off(r));
            if self.is_erased(Structure::Record, addr, u64::from(u32::from(self.lay.rec)))? {
                break;
            }
            r += 1;
        }
        Ok(r)
    }

    /// Where a node's written slots end, from slot `from`.
    fn slots_end(&mut self, p: u8, unit: u16, from: u16) -> Result<u16> {
        let base = self.node_addr(p, unit);
        let mut i = from;
        while i < u16::from(self.lay.slots) {
            if self.is_erased(Structure::Node, base + 2 * u64::from(i), 2)? {
                break;
            }
            i += 1;
        }
        Ok(i)
    }

    /// Undoes what a write mark covers.
    fn undo(&mut self, m: Mark) -> Result<()> {
        let p = m.part;
        if p >= self.lay.parts || !self.committed(p) {
            return Ok(());
        }
        let max_units = (self.lay.part_len / self.lay.node) as u16;
        let erase = self.cfg.undo == Undo::Erase;
        match m.kind {
            MarkKind::NodeArea => {
                let pos = m.pos.min(max_units);
                let end = self.node_area_end(p, pos)?;
                if erase {
                    let a = self.lay.at(p, u32::from(pos) * self.lay.node);
                    let b = self.lay.at(p, u32::from(end) * self.lay.node);
                    self.revert_range(a, b, true)?;
                } else {
                    // Nothing reachable points into the post-checkpoint nodes once the
                    // node marks are undone: moving the free pointer past them is enough.
                    let pt = &mut self.parts[usize::from(p)];
                    pt.units = pt.units.max(end);
                }
            }
            MarkKind::RecordArea => {
                let m = Mark {
                    pos: m
                        .pos
                        .min((self.lay.part_len / u32::from(self.lay.rec)) as u16),
                    ..m
                };
                let end = self.record_area_end(p, m.pos)?;
                if erase {
                    if end > m.pos {
                        let a = self.lay.at(p, self.lay.rec_off(end - 1));
                        let b = self
                            .lay
                            .at(p, self.lay.rec_off(m.pos) + u32::from(self.lay.rec));
                        self.revert_range(a, b, false)?;
                    }
                } else {
                    let pt = &mut self.parts[usize::from(p)];
                    pt.records = pt.records.max(end);
                }
            }
            MarkKind::Node => {
                if m.obj >= max_units {
                    return Ok(());
                }
                let pos = m.pos.min(u16::from(self.lay.slots));
                let end = self.slots_end(p, m.obj, pos)?;
                let a = self.node_addr(p, m.obj) + 2 * u64::from(pos);
                let b = self.node_addr(p, m.obj) + 2 * u64::from(end);
                if erase {
                    self.revert_range(a, b, true)?;
                } else {
                    // Discard undo: neutralize the post-checkpoint slots (idempotent). The
                    // last slot is where a split writes the child pointer: zeroed, it would
                    // leave a leaf that can never split, so that one slot is erased back
                    // (copy-erase-copy-back) first; a rerun then finds the range shorter.
                    let last = u16::from(self.lay.slots) - 1;
                    let b = if end > last {
                        let c = self.node_addr(p, m.obj) + 2 * u64::from(last);
                        self.revert_range(c, c + 2, true)?;
                        c
                    } else {
                        b
                    };
                    if b > a {
                        self.zero(Structure::Node, a, b - a)?;
                    }
                }
            }
        }
        Ok(())
    }

    // ---- erase-based undo: copy, erase, copy back ------------------------------------------

    /// Returns `[a, b)` to the erased state, keeping every other byte of the units it
    /// touches. Units are done from the far end of the range back (`upward`: the range grew
    /// toward higher addresses), so an interrupted revert leaves a shorter range that a
    /// rescan from the mark still finds.
    pub(crate) fn revert_range(&mut self, a: u64, b: u64, upward: bool) -> Result<()> {
        if b <= a {
            return Ok(());
        }
        let seg = u64::from(self.lay.seg);
        let (first, last) = (a / seg * seg, (b - 1) / seg * seg);
        let mut s = if upward { last } else { first };
        loop {
            self.revert_segment(s, a.max(s), b.min(s + seg))?;
            if upward {
                if s == first {
                    break;
                }
                s -= seg;
            } else {
                if s == last {
                    break;
                }
                s += seg;
            }
        }
        Ok(())
    }

    fn revert_segment(&mut self, s: u64, a: u64, b: u64) -> Result<()> {
        if self.is_erased(Structure::Backup, a, b - a)? {
            return Ok(());
        }
        self.stats.reverted_segments = self.stats.reverted_segments.wrapping_add(1);
        let seg = u64::from(self.lay.seg);
        let image = self.lay.backup_base() + seg;
        // 1. The image: the unit with [a, b) erased.
        if !self.is_erased(Structure::Backup, image, seg)? {
            self.erase(Structure::Backup, image, seg)?;
        }
        let mut h = crc32fast::Hasher::new();
        let mut buf = [0u8; 64];
        let mut off = 0;
        while off < seg {
            let k = 64.min(seg - off) as usize;
            self.read(Structure::Backup, s + off, &mut buf[..k])?;
            for (i, x) in buf[..k].iter_mut().enumerate() {
                let at = s + off + i as u64;
                if at >= a && at < b {
                    *x = 0xFF;
                }
            }
            h.update(&buf[..k]);
            if buf[..k].iter().any(|&x| x != 0xFF) {
                self.write(Structure::Backup, image + off, &buf[..k])?;
            }
            off += k as u64;
        }
        // 2. The header that makes the copy-back happen even across a power cut.
        let slot = self.backup_slot()?;
        let mut hd = [0u8; 16];
        hd[0] = TAG_BACKUP;
        hd[1] = 1;
        hd[4..8].copy_from_slice(&((s - self.lay.log_base) as u32).to_le_bytes());
        hd[8..12].copy_from_slice(&h.finalize().to_le_bytes());
        let c = crc32(&hd[..12]);
        hd[12..].copy_from_slice(&c.to_le_bytes());
        self.write(Structure::Backup, slot, &hd)?;
        // 3. Erase and copy back; 4. retire the header.
        self.copy_back(s)?;
        self.write(Structure::Backup, slot, &[0u8; 16])
    }

    /// A free header slot in the backup area's first unit (erasing it when all are used).
    fn backup_slot(&mut self) -> Result<u64> {
        let base = self.lay.backup_base();
        for i in 0..self.lay.seg / BACKUP_HEADER {
            let at = base + u64::from(i * BACKUP_HEADER);
            if self.is_erased(Structure::Backup, at, u64::from(BACKUP_HEADER))? {
                return Ok(at);
            }
        }
        self.erase(Structure::Backup, base, u64::from(self.lay.seg))?;
        Ok(base)
    }

    fn copy_back(&mut self, s: u64) -> Result<()> {
        let seg = u64::from(self.lay.seg);
        let image = self.lay.backup_base() + seg;
        self.erase(Structure::Backup, s, seg)?;
        let mut buf = [0u8; 64];
        let mut off = 0;
        while off < seg {
            let k = 64.min(seg - off) as usize;
            self.read(Structure::Backup, image + off, &mut buf[..k])?;
            if buf[..k].iter().any(|&x| x != 0xFF) {
                self.write(Structure::Backup, s + off, &buf[..k])?;
            }
            off += k as u64;
        }
        Ok(())
    }

    /// Finishes an erase-based undo that power interrupted after its header was written.
    fn finish_backup(&mut self) -> Result<()> {
        let base = self.lay.backup_base();
        let seg = u64::from(self.lay.seg);
        for i in 0..self.lay.seg / BACKUP_HEADER {
            let at = base + u64::from(i * BACKUP_HEADER);
            let mut hd = [0u8; 16];
            self.read(Structure::Backup, at, &mut hd)?;
            if hd[0] != TAG_BACKUP || hd[1] != 1 || le32(&hd[12..]) != crc32(&hd[..12]) {
                continue;
            }
            let target = self.lay.log_base + u64::from(le32(&hd[4..]));
            let ok_target = target.is_multiple_of(seg)
                && target >= self.lay.part_base()
                && target < self.lay.part(self.lay.parts);
            // The image must be whole (it was, before the header was written).
            let mut h = crc32fast::Hasher::new();
            let mut buf = [0u8; 64];
            let mut off = 0;
            while off < seg {
                let k = 64.min(seg - off) as usize;
                self.read(Structure::Backup, base + seg + off, &mut buf[..k])?;
                h.update(&buf[..k]);
                off += k as u64;
            }
            if !ok_target || h.finalize() != le32(&hd[8..]) {
                return Err(Error::Corrupt {
                    what: Structure::Backup,
                    addr: at,
                    reason: "a pending backup names a bad target or its image fails its checksum",
                });
            }
            self.copy_back(target)?;
            self.write(Structure::Backup, at, &[0u8; 16])?;
        }
        Ok(())
    }

    // ---- WAL ---------------------------------------------------------------------------------

    /// WAL: a post-checkpoint write becomes a redo entry.
    pub(crate) fn wal_write(&mut self, p: u8, off: u32, data: &[u8]) -> Result<()> {
        let mut b = [0u8; 28];
        let len = data.len().min(16);
        b[0] = TAG_REDO;
        b[1] = p;
        b[2] = len as u8;
        b[4..8].copy_from_slice(&off.to_le_bytes());
        b[8..8 + len].copy_from_slice(&data[..len]);
        let t = redo_size(len as u32) as usize;
        let c = crc32(&b[..t - 4]);
        b[t - 4..t].copy_from_slice(&c.to_le_bytes());
        self.log_append(&[&b[..t]])?;
        self.stats.redo_entries = self.stats.redo_entries.wrapping_add(1);
        Ok(())
    }

    /// WAL: lays the redo entries of the running interval over `buf` (partition offset `off`).
    /// The entries since the last commit were written by this run (or checked by restore):
    /// the walk reads each entry's 8-byte head and the data of those that overlap.
    pub(crate) fn wal_overlay(&mut self, p: u8, off: u32, buf: &mut [u8]) -> Result<()> {
        let mut at = self.log.pending;
        let seg = self.lay.seg;
        let end = (off, off + buf.len() as u32);
        for _ in 0..=self.log_units() {
            let base = self.seg_addr(at.seg);
            let stop = if at.seq == self.log.seq {
                self.log.pos
            } else {
                seg
            };
            while at.pos + 8 <= stop {
                let mut h = [0u8; 8];
                self.read(Structure::Log, base + u64::from(at.pos), &mut h)?;
                let len = match h[0] {
                    TAG_REDO => redo_size(u32::from(h[2])),
                    TAG_MARK => MARK_ENTRY,
                    TAG_MARK_V1 | TAG_ABORT => SMALL_ENTRY,
                    TAG_COMMIT => {
                        let mut sl = [0u8; 2];
                        self.read(Structure::Log, base + u64::from(at.pos) + 8, &mut sl)?;
                        (COMMIT_FIXED + u32::from(le16(&h[2..])) + u32::from(le16(&sl)))
                            .next_multiple_of(4)
                            + 4
                    }
                    0 => 4,
                    _ => break,
                };
                if h[0] == TAG_REDO && h[1] == p {
                    let o = le32(&h[4..]);
                    let n = u32::from(h[2]).min(16);
                    if o < end.1 && o.saturating_add(n) > end.0 {
                        let mut data = [0u8; 16];
                        self.read(
                            Structure::Log,
                            base + u64::from(at.pos) + 8,
                            &mut data[..n as usize],
                        )?;
                        for i in 0..n {
                            let x = o + i;
                            if x >= end.0 && x < end.1 {
                                buf[(x - off) as usize] = data[i as usize];
                            }
                        }
                    }
                }
                at.pos += len;
            }
            if at.seq == self.log.seq {
                break;
            }
            at.seq = at.seq.wrapping_add(1);
            at.seg = (at.seg + 1) % self.log_units();
            at.pos = SEG_HEADER;
        }
        Ok(())
    }

    /// WAL: writes the redo entries in `[from, to)` to their home addresses.
    fn wal_apply(&mut self, from: LogAt, to: LogAt) -> Result<()> {
        let mut at = from;
        let part_len = self.lay.part_len;
        while let Some((here, e)) = self.log_next(&mut at, to.seq)? {
            if here.seq == to.seq && here.pos >= to.pos {
                break;
            }
            if let Entry::Redo {
                part,
                off,
                len,
                data,
            } = e
            {
                if part >= self.lay.parts || off.saturating_add(u32::from(len)) > part_len {
                    return Err(Error::Corrupt {
                        what: Structure::Log,
                        addr: self.seg_addr(here.seg) + u64::from(here.pos),
                        reason: "a redo entry's target is outside its partition",
                    });
                }
                let addr = self.lay.at(part, off);
                let mut cur = [0u8; 16];
                let n = usize::from(len);
                self.read(Structure::Node, addr, &mut cur[..n])?;
                if cur[..n] != data[..n] {
                    self.write(Structure::Node, addr, &data[..n])?;
                }
            }
        }
        Ok(())
    }

    /// Bytes of the log in use since the last commit's unit began (the undo-log usage).
    pub fn log_usage(&self) -> u64 {
        let units = u64::from(self.log.seq.wrapping_sub(self.log.keep));
        units * u64::from(self.lay.seg) + u64::from(self.log.pos)
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ember_device::{CostModel, FlashGeometry, SimFlash};

    fn s_cfg() -> Config<2> {
        Config::<2>::new([1001, 1201])
    }

    fn store() -> Store<SimFlash<ember_device::MemBlock<std::vec::Vec<u8>>>, 2> {
        let cfg = s_cfg();
        let f = SimFlash::in_memory(
            FlashGeometry::nor(cfg.flash_bytes(512), 512),
            CostModel::MSP430_NOR,
        )
        .unwrap();
        Store::format(f, cfg, b"").unwrap()
    }

    fn state(oldest: u8, live: u8, ranks: [u8; 4]) -> [u8; 36] {
        let mut b = [0u8; 36];
        b[..4].copy_from_slice(&[oldest, live, 4, 0]);
        for p in 0..4 {
            b[4 + 8 * p..6 + 8 * p].copy_from_slice(&1u16.to_le_bytes());
            b[10 + 8 * p] = ranks[p];
        }
        b
    }

    #[test]
    fn a_version_1_window_is_read_as_a_ring_and_version_2_as_an_order() {
        let mut s = store();
        // Version 1: oldest 2, three live: 2, 3, 0 (the ranks bytes are ignored).
        s.decode_state(&state(2, 3, [0; 4]), 1, 0).unwrap();
        assert_eq!((s.order[..4].to_vec(), s.live), (std::vec![2, 3, 0, 1], 3));
        // Version 2: partition 3 oldest, then 1, then 0; 2 free.
        s.decode_state(&state(3, 3, [2, 1, 3, 0]), 2, 0).unwrap();
        assert_eq!(s.order[..4].to_vec(), std::vec![3, 1, 0, 2]);
        assert_eq!(
            s.partitions().map(|x| x.0).collect::<std::vec::Vec<_>>(),
            [3, 1, 0]
        );
        // Not a permutation.
        assert!(matches!(
            s.decode_state(&state(0, 2, [0, 1, 1, 3]), 2, 0),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(
            s.decode_state(&state(0, 2, [0, 1, 2, 9]), 2, 0),
            Err(Error::Corrupt { .. })
        ));
    }

    fn rec(i: u16) -> crate::Record<2> {
        crate::Record {
            ts: u32::from(i),
            dims: [i * 7 % 1001, i * 13 % 1201],
        }
    }

    fn count_all(s: &mut Store<SimFlash<ember_device::MemBlock<std::vec::Vec<u8>>>, 2>) -> usize {
        let mut out = [crate::Record::default(); 64];
        s.scan(&crate::Query::all(), &mut out).unwrap()
    }

    /// A log written before marks shrank to 8 bytes: a version 1 (12-byte) mark after the
    /// last commit still has its node write undone on open.
    #[test]
    fn a_version_1_mark_is_still_undone() {
        let mut s = store();
        for i in 0..5 {
            s.put(&rec(i)).unwrap();
        }
        s.commit(b"five").unwrap();
        let p = s.cur();
        // As an old engine would: the mark, then a sixth pointer in the root (to record 0).
        let m = Mark {
            part: p,
            kind: MarkKind::Node,
            obj: 0,
            pos: 5,
        };
        s.log_append(&[&m.encode_v1()]).unwrap();
        let slot = s.node_addr(p, 0) + 10;
        s.write(
            Structure::Node,
            slot,
            &crate::format::Slot::record(0).to_le_bytes(),
        )
        .unwrap();
        assert_eq!(count_all(&mut s), 6);
        let mut ctx = [0u8; 200];
        let (mut s, n) = Store::<_, 2>::open(s.into_device(), s_cfg(), &mut ctx).unwrap();
        assert_eq!(&ctx[..n], b"five");
        assert_eq!(count_all(&mut s), 5);
        let mut b = [0xAAu8; 2];
        s.read(Structure::Node, slot, &mut b).unwrap();
        assert_eq!(b, [0, 0], "discard undo zeroes the slot");
    }

    /// Log units the log has not reached since the format are not erased again.
    #[test]
    fn the_first_pass_over_the_log_erases_nothing() {
        let mut s = store();
        let units = u32::from(s.log_units());
        let mut i = 0u16;
        while s.log.seq <= units {
            s.put(&rec(i)).unwrap();
            i += 1;
            if i.is_multiple_of(10) {
                s.commit(&[7u8; 150]).unwrap();
            }
        }
        // The ring has wrapped once: only the unit just entered needed an erase.
        assert_eq!(s.stats().log_erases, 1, "{:?}", s.stats());
        assert!(s.stats().marks > 0);
    }
}
