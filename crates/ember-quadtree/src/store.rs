//! The store: partitions of quadtrees, operations, and the checkpointing schemes.

use ember_device::FlashDevice;

use crate::config::{Checkpointing, Config, Layout, MAX_DEPTH, MAX_NODE, MAX_PARTITIONS};
use crate::error::{Error, Result, Structure};
use crate::format::{MAX_RECORD, Mark, MarkKind, Record, SLOT_FREE, Slot, le16, record_size};
use crate::log::LogPos;

/// Node-mark table slots (RB: which nodes have a write mark since the checkpoint; WAL: which
/// nodes have redo entries). A full table only costs duplicate marks (or log walks): never a
/// wrong answer.
pub(crate) const MARK_SLOTS: usize = 16;

/// A range query: an inclusive range per dimension and an inclusive time range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query<const D: usize> {
    /// Lowest value per dimension.
    pub lo: [u16; D],
    /// Highest value per dimension (inclusive).
    pub hi: [u16; D],
    /// Earliest timestamp (inclusive).
    pub t_lo: u32,
    /// Latest timestamp (inclusive).
    pub t_hi: u32,
}

impl<const D: usize> Query<D> {
    /// Every record.
    pub const fn all() -> Self {
        Query {
            lo: [0; D],
            hi: [u16::MAX; D],
            t_lo: 0,
            t_hi: u32::MAX,
        }
    }

    /// Records whose dimensions are exactly `dims`.
    pub const fn point(dims: [u16; D]) -> Self {
        Query {
            lo: dims,
            hi: dims,
            t_lo: 0,
            t_hi: u32::MAX,
        }
    }

    fn matches(&self, r: &Record<D>) -> bool {
        r.ts >= self.t_lo
            && r.ts <= self.t_hi
            && (0..D).all(|k| r.dims[k] >= self.lo[k] && r.dims[k] <= self.hi[k])
    }
}

/// Free-space bookkeeping of one partition (what a commit record saves).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Part {
    /// Node units allocated (unit 0 is the initial root).
    pub units: u16,
    /// Records written.
    pub records: u16,
    /// The root's unit (always 0 except under COW).
    pub root: u16,
}

/// A node's region: per dimension `[lo, lo + span)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region<const D: usize> {
    lo: [u32; D],
    span: [u32; D],
}

impl<const D: usize> Region<D> {
    pub(crate) fn child(&self, pivot: Option<[u16; D]>, c: usize) -> Region<D> {
        let mut r = *self;
        for k in 0..D {
            let mid = self.mid(pivot, k);
            if c >> k & 1 == 1 {
                r.span[k] = self.lo[k] + self.span[k] - mid;
                r.lo[k] = mid;
            } else {
                r.span[k] = mid - self.lo[k];
            }
        }
        r
    }

    /// Where dimension `k` is cut: the pivot (kept strictly inside) or the middle. A span of
    /// 1 is not cut (every point goes to the lower child).
    fn mid(&self, pivot: Option<[u16; D]>, k: usize) -> u32 {
        let (lo, span) = (self.lo[k], self.span[k]);
        if span < 2 {
            return lo + span;
        }
        match pivot {
            Some(p) => u32::from(p[k]).clamp(lo + 1, lo + span - 1),
            None => lo + span / 2,
        }
    }

    pub(crate) fn child_index(&self, pivot: Option<[u16; D]>, dims: &[u16; D]) -> usize {
        (0..D)
            .filter(|&k| u32::from(dims[k]) >= self.mid(pivot, k))
            .fold(0, |c, k| c | 1 << k)
    }

    fn meets(&self, q: &Query<D>) -> bool {
        (0..D).all(|k| {
            u32::from(q.lo[k]) < self.lo[k] + self.span[k] && u32::from(q.hi[k]) >= self.lo[k]
        })
    }
}

/// What one node holds, read once.
pub(crate) struct NodeView {
    pub bytes: [u8; MAX_NODE],
    pub slots: usize,
}

impl NodeView {
    pub fn slot(&self, i: usize) -> Slot {
        Slot::decode(le16(&self.bytes[2 * i..]))
    }

    /// Where the node's log ends and its child pointer (see [`NodeLog`]).
    pub fn log(&self) -> NodeLog {
        let r: Result<NodeLog> = locate(self.slots, |i| Ok(le16(&self.bytes[2 * i..])));
        // Reading from RAM cannot fail.
        r.unwrap_or(NodeLog {
            len: self.slots,
            child: None,
        })
    }
}

/// A node is a tiny log of pointer slots: the written ones (records, a neutralized `0`,
/// the child pointer) come first, the free (erased) ones after them, and a node's child
/// pointer is its last written slot — every way the engine writes a node keeps this
/// (appends at the first free slot; a split takes the last slot; COW copies put the child
/// pointer after the records, and its in-place redirect appends the new one; undo zeroes or
/// erases a suffix). So a put's descent needs only a few slots of each node: the last slot
/// (a split node's child pointer under RB and WAL), else a binary search for the first free
/// one — a fraction of the bytes of reading the whole node (Table I charges reads per byte).
/// Readers that want the records (scans, COW copies) read the whole node and find the same
/// answer with the same search ([`NodeView::log`]), so a damaged node that breaks the
/// layout still reads alike through every path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeLog {
    /// Written slots: `len` is the first free slot (the slot count if none is free).
    pub len: usize,
    /// The child pointer and its slot, if the last written slot is one.
    pub child: Option<(usize, u16)>,
}

impl NodeLog {
    /// The first free slot, if any.
    pub fn first_free(&self, slots: usize) -> Option<usize> {
        (self.len < slots).then_some(self.len)
    }
}

fn child_of(i: usize, v: u16) -> Option<(usize, u16)> {
    match Slot::decode(v) {
        Slot::Child(c) => Some((i, c)),
        _ => None,
    }
}

/// Finds a node's [`NodeLog`] from its slot values (`get(i)`: slot `i`), reading the last
/// slot, then binary-searching for the first free one: at most `1 + log2(slots)` reads.
pub(crate) fn locate(slots: usize, mut get: impl FnMut(usize) -> Result<u16>) -> Result<NodeLog> {
    let last = slots - 1;
    let v = get(last)?;
    if v != SLOT_FREE {
        return Ok(NodeLog {
            len: slots,
            child: child_of(last, v),
        });
    }
    // Slot `hi` is free; every slot below `lo` that was read is written.
    let (mut lo, mut hi) = (0, last);
    let mut below = None;
    while lo < hi {
        let mid = (lo + hi) / 2;
        let v = get(mid)?;
        if v == SLOT_FREE {
            hi = mid;
        } else {
            lo = mid + 1;
            below = Some((mid, v));
        }
    }
    // `lo` last moved past slot `hi - 1`, so that is the last written slot `below` holds.
    let child = match below {
        Some((i, v)) if i + 1 == hi => child_of(i, v),
        _ => None,
    };
    Ok(NodeLog { len: hi, child })
}

/// Counters for the benchmark and the tests (not persistent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records put.
    pub puts: u32,
    /// Node splits.
    pub splits: u32,
    /// Write marks written to the undo log.
    pub marks: u32,
    /// Redo entries written (WAL).
    pub redo_entries: u32,
    /// Nodes copied (COW path copies and compaction).
    pub node_copies: u32,
    /// COW compactions (a partition's live tree copied into a free partition).
    pub compactions: u32,
    /// Record-area segments a COW compaction found already holding the bytes it would copy
    /// (left from an earlier copy of the same tree): neither erased nor written.
    pub kept_segments: u32,
    /// Partitions erased for reuse.
    pub partition_erases: u32,
    /// Log erase units erased.
    pub log_erases: u32,
    /// Segments reverted by copy-erase-copyback.
    pub reverted_segments: u32,
    /// Bytes appended to the log.
    pub log_bytes: u32,
}

/// A multidimensional store on NOR flash that survives power loss at any instant: the
/// iFKVS engine (or one of its two baselines, by configuration).
///
/// RAM: this struct (the device handle aside) is all the engine keeps — see
/// [`Store::ram_bytes`]. Operations use a node buffer on the stack; scans write into the
/// caller's slice; the context blob lives in the caller's buffer.
pub struct Store<F: FlashDevice, const D: usize> {
    pub(crate) dev: F,
    pub(crate) cfg: Config<D>,
    pub(crate) lay: Layout,
    pub(crate) parts: [Part; MAX_PARTITIONS],
    /// The partitions in FIFO order: `order[..live]` are live, oldest first (the last is
    /// current); `order[live..]` are free, in the order they will be taken. RB and WAL only
    /// ever rotate it (a ring); COW compaction swaps the current partition with the first
    /// free one.
    pub(crate) order: [u8; MAX_PARTITIONS],
    pub(crate) live: u8,
    /// The live partitions at the last checkpoint (bit `p`: partition `p`).
    pub(crate) ck_mask: u8,
    /// The current partition's node units and records at the last checkpoint (or restore).
    pub(crate) ck_units: u16,
    pub(crate) ck_records: u16,
    /// Bit 0: node-area mark written; bit 1: record-area mark written; bit 2: the node table
    /// overflowed (WAL: walk the log for every node).
    pub(crate) flags: u8,
    pub(crate) marks: [u16; MARK_SLOTS],
    pub(crate) log: LogPos,
    /// Sequence number of the last commit.
    pub(crate) seq: u32,
    pub(crate) stats: Stats,
}

pub(crate) const F_NODE_AREA: u8 = 1;
pub(crate) const F_REC_AREA: u8 = 2;
pub(crate) const F_OVERFLOW: u8 = 4;
/// COW: the current partition is full and the next commit compacts it.
pub(crate) const F_COMPACT: u8 = 8;

impl<F: FlashDevice, const D: usize> Store<F, D> {
    // ---- device access -------------------------------------------------------------------

    pub(crate) fn read(&mut self, what: Structure, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.dev
            .read(addr, buf)
            .map_err(|error| Error::Device { what, addr, error })
    }

    pub(crate) fn write(&mut self, what: Structure, addr: u64, data: &[u8]) -> Result<()> {
        self.dev
            .write(addr, data)
            .map_err(|error| Error::Device { what, addr, error })
    }

    pub(crate) fn erase(&mut self, what: Structure, addr: u64, len: u64) -> Result<()> {
        self.dev
            .erase(addr, len)
            .map_err(|error| Error::Device { what, addr, error })
    }

    /// Whether `[addr, addr + len)` reads as erased.
    pub(crate) fn is_erased(&mut self, what: Structure, addr: u64, len: u64) -> Result<bool> {
        let mut buf = [0u8; 64];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(64) as usize;
            self.read(what, addr + at, &mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0xFF) {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    /// Erases the erase units of `[addr, addr + len)` that are not erased already.
    pub(crate) fn clean(&mut self, what: Structure, addr: u64, len: u64) -> Result<()> {
        let seg = u64::from(self.lay.seg);
        let mut at = addr;
        while at < addr + len {
            if !self.is_erased(what, at, seg)? {
                self.erase(what, at, seg)?;
            }
            at += seg;
        }
        Ok(())
    }

    // ---- the public API --------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &Config<D> {
        &self.cfg
    }

    /// The device.
    pub fn device(&self) -> &F {
        &self.dev
    }

    /// The device, mutably (for meters; writing to it behind the engine's back breaks it).
    pub fn device_mut(&mut self) -> &mut F {
        &mut self.dev
    }

    /// Gives the device back.
    pub fn into_device(self) -> F {
        self.dev
    }

    /// Counters since open.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Bytes of RAM the engine keeps, beyond the device handle and the caller's buffers.
    pub fn ram_bytes() -> usize {
        core::mem::size_of::<Self>() - core::mem::size_of::<F>()
    }

    /// Whether the next [`commit`](Store::commit) compacts the current partition (COW: a put
    /// found it full and mostly dead). Such a commit erases a partition and copies the live
    /// tree: it takes far longer than an ordinary one.
    pub fn compaction_pending(&self) -> bool {
        self.flags & F_COMPACT != 0
    }

    /// Live partitions, oldest first, and the records each holds (in RAM bookkeeping).
    pub fn partitions(&self) -> impl Iterator<Item = (u8, u16)> + '_ {
        (0..self.live).map(move |i| {
            let p = self.order[usize::from(i)];
            (p, self.parts[p as usize].records)
        })
    }

    pub(crate) fn cur(&self) -> u8 {
        self.order[usize::from(self.live) - 1]
    }

    /// The live partitions as a bit mask.
    pub(crate) fn live_mask(&self) -> u8 {
        self.order[..usize::from(self.live)]
            .iter()
            .fold(0, |m, &p| m | 1 << p)
    }

    /// Whether partition `p` belongs to the last checkpoint (writes to it must be undoable,
    /// and it must not be erased).
    pub(crate) fn committed(&self, p: u8) -> bool {
        self.ck_mask >> p & 1 == 1
    }

    pub(crate) fn root_region(&self) -> Region<D> {
        Region {
            lo: [0; D],
            span: self.cfg.bounds.map(u32::from),
        }
    }

    pub(crate) fn head_units(&self) -> u16 {
        u16::from(self.lay.head_units)
    }

    pub(crate) fn group_units(&self) -> u16 {
        (self.lay.group / self.lay.node) as u16
    }

    /// Inserts a record.
    pub fn put(&mut self, r: &Record<D>) -> Result<()> {
        for (k, (&v, &b)) in r.dims.iter().zip(self.cfg.bounds.iter()).enumerate() {
            if v >= b {
                return Err(Error::OutOfRange {
                    dim: k,
                    value: v,
                    bound: b,
                });
            }
        }
        for _ in 0..2 {
            let p = self.cur();
            let done = match self.cfg.checkpointing {
                Checkpointing::Cow => self.cow_put(p, r)?,
                _ => self.put_in(p, r)?,
            };
            if done {
                self.stats.puts = self.stats.puts.wrapping_add(1);
                return Ok(());
            }
            if self.cfg.checkpointing == Checkpointing::Cow && self.cow_should_compact(p)? {
                // The commit compacts (it holds the context a checkpoint needs); its target
                // is the first free partition, the oldest one if none is free.
                if self.live == self.lay.parts {
                    self.drop_oldest();
                }
                self.flags |= F_COMPACT;
                return Err(Error::CheckpointNeeded);
            }
            self.next_partition()?;
        }
        Err(Error::Config {
            reason: "a record does not fit in an empty partition",
        })
    }

    /// Moves to the next partition, dropping the oldest if every one is live.
    fn next_partition(&mut self) -> Result<()> {
        if self.live == self.lay.parts {
            self.drop_oldest();
        }
        let next = self.order[usize::from(self.live)];
        if self.committed(next) {
            return Err(Error::CheckpointNeeded);
        }
        self.erase_partition(next)?;
        self.live += 1;
        self.flags &= F_OVERFLOW;
        Ok(())
    }

    /// Erases the units of free partition `p` that are not erased, and empties its tree.
    pub(crate) fn erase_partition(&mut self, p: u8) -> Result<()> {
        let at = self.lay.part(p);
        let len = u64::from(self.lay.part_len);
        let seg = u64::from(self.lay.seg);
        let mut u = 0;
        while u < len {
            if !self.is_erased(Structure::Partition, at + u, seg)? {
                self.erase(Structure::Partition, at + u, seg)?;
                self.stats.partition_erases = self.stats.partition_erases.wrapping_add(1);
            }
            u += seg;
        }
        self.parts[p as usize] = Part {
            units: 1,
            records: 0,
            root: 0,
        };
        Ok(())
    }

    /// Drops the oldest live partition from the window (it becomes the last free one).
    pub(crate) fn drop_oldest(&mut self) {
        let n = usize::from(self.lay.parts);
        self.order[..n].rotate_left(1);
        self.live -= 1;
    }

    /// Whether `nodes` more node bytes and `recs` more record bytes fit in partition `p`,
    /// keeping a guard gap of two splits between the areas (so that a scan for the end of
    /// either area after a power cut stops in erased bytes).
    pub(crate) fn fits(&self, p: u8, nodes: u32, recs: u32) -> bool {
        let pt = self.parts[p as usize];
        let node_end = u32::from(pt.units) * self.lay.node + nodes;
        let used = u32::from(pt.records) * u32::from(self.lay.rec) + recs;
        node_end + used + 2 * self.lay.group <= self.lay.part_len
    }

    // ---- reading the tree ------------------------------------------------------------------

    pub(crate) fn node_addr(&self, p: u8, unit: u16) -> u64 {
        self.lay.at(p, u32::from(unit) * self.lay.node)
    }

    /// Reads node `unit` of partition `p` (with the redo log's newer bytes under WAL).
    pub(crate) fn read_node(&mut self, p: u8, unit: u16) -> Result<NodeView> {
        let n = self.lay.node as usize;
        let mut v = NodeView {
            bytes: [0xFF; MAX_NODE],
            slots: usize::from(self.lay.slots),
        };
        self.read_node_bytes(p, unit, 0, &mut v.bytes[..n])?;
        Ok(v)
    }

    /// Under WAL, whether node `unit` may have newer bytes in the redo log.
    fn wal_dirty(&self, p: u8, unit: u16) -> bool {
        self.cfg.checkpointing == Checkpointing::Wal
            && self.committed(p)
            && (self.flags & F_OVERFLOW != 0 || self.table_has(key(p, unit)))
    }

    /// Reads `buf.len()` bytes of node `unit` from its byte `at` (with the redo log's newer
    /// bytes under WAL).
    fn read_node_bytes(&mut self, p: u8, unit: u16, at: u32, buf: &mut [u8]) -> Result<()> {
        let addr = self.node_addr(p, unit) + u64::from(at);
        if unit >= self.parts[p as usize].units || at + buf.len() as u32 > self.lay.node {
            return Err(Error::Corrupt {
                what: Structure::Node,
                addr,
                reason: "a pointer leads past the node area",
            });
        }
        self.read(Structure::Node, addr, buf)?;
        if self.wal_dirty(p, unit) {
            let off = u32::from(unit) * self.lay.node + at;
            self.wal_overlay(p, off, buf)?;
        }
        Ok(())
    }

    /// Where node `unit`'s log ends and its child pointer, reading as few slots as the
    /// layout allows ([`NodeLog`]). Under WAL a node with redo entries is read whole, once:
    /// each read of it walks the interval's redo log.
    pub(crate) fn node_log(&mut self, p: u8, unit: u16) -> Result<NodeLog> {
        if self.wal_dirty(p, unit) {
            return Ok(self.read_node(p, unit)?.log());
        }
        locate(usize::from(self.lay.slots), |i| {
            let mut b = [0u8; 2];
            self.read_node_bytes(p, unit, 2 * i as u32, &mut b)?;
            Ok(le16(&b))
        })
    }

    /// Reads record `r` of partition `p`.
    pub(crate) fn read_record(&mut self, p: u8, r: u16) -> Result<Record<D>> {
        let off = self.lay.rec_off(r);
        let addr = self.lay.at(p, off);
        if r >= self.parts[p as usize].records || off < self.lay.node {
            return Err(Error::Corrupt {
                what: Structure::Record,
                addr,
                reason: "a pointer leads past the record area",
            });
        }
        let mut b = [0xFFu8; MAX_RECORD];
        let n = record_size::<D>();
        self.read(Structure::Record, addr, &mut b[..n])?;
        if self.cfg.checkpointing == Checkpointing::Wal
            && self.committed(p)
            && p == self.cur()
            && r >= self.ck_records
        {
            self.wal_overlay(p, off, &mut b[..n])?;
        }
        Record::decode(&b[..n]).ok_or(Error::Corrupt {
            what: Structure::Record,
            addr,
            reason: "the record's check byte does not match",
        })
    }

    /// The pivot of a group (pivot split), or `None` (equal split).
    pub(crate) fn pivot(&mut self, p: u8, group: u16) -> Result<Option<[u16; D]>> {
        if !self.cfg.pivot_split {
            return Ok(None);
        }
        let mut b = [0u8; 2 * 4];
        self.read_node_bytes(p, group, 0, &mut b[..2 * D])?;
        let mut piv = [0u16; D];
        for (k, x) in piv.iter_mut().enumerate() {
            *x = le16(&b[2 * k..]);
        }
        Ok(Some(piv))
    }

    /// Checks a child pointer of node `unit`; returns the unit of child 0.
    pub(crate) fn children(&self, p: u8, unit: u16, g: u16) -> Result<u16> {
        let end = u32::from(g) + u32::from(self.group_units());
        if g == 0 || end > u32::from(self.parts[p as usize].units) {
            return Err(Error::Corrupt {
                what: Structure::Node,
                addr: self.node_addr(p, unit),
                reason: "a child pointer leads outside the node area",
            });
        }
        Ok(g + self.head_units())
    }

    /// Up to `out.len()` records matching `q`, from every live partition (oldest first).
    pub fn scan(&mut self, q: &Query<D>, out: &mut [Record<D>]) -> Result<usize> {
        let mut n = 0;
        for i in 0..self.live {
            if n == out.len() {
                break;
            }
            let p = self.order[usize::from(i)];
            let root = self.parts[p as usize].root;
            let region = self.root_region();
            // A tree visits each node once: a corrupt one that shares nodes cannot make the
            // scan run away.
            let mut budget = u32::from(self.parts[p as usize].units);
            self.visit(p, root, region, 0, &mut budget, q, out, &mut n)?;
        }
        Ok(n)
    }

    /// A record whose dimensions are exactly `dims`, if there is one.
    pub fn get(&mut self, dims: &[u16; D]) -> Result<Option<Record<D>>> {
        let mut out = [Record::default(); 1];
        let n = self.scan(&Query::point(*dims), &mut out)?;
        Ok((n == 1).then_some(out[0]))
    }

    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        p: u8,
        unit: u16,
        region: Region<D>,
        depth: usize,
        budget: &mut u32,
        q: &Query<D>,
        out: &mut [Record<D>],
        n: &mut usize,
    ) -> Result<()> {
        if *budget == 0 {
            return Err(Error::Corrupt {
                what: Structure::Node,
                addr: self.node_addr(p, unit),
                reason: "the tree reaches some node twice",
            });
        }
        *budget -= 1;
        if depth > MAX_DEPTH {
            return Err(Error::Corrupt {
                what: Structure::Node,
                addr: self.node_addr(p, unit),
                reason: "the tree is deeper than any tree the engine builds",
            });
        }
        let Some(g) = self.visit_node(p, unit, q, out, n)? else {
            return Ok(());
        };
        let first = self.children(p, unit, g)?;
        let pivot = self.pivot(p, g)?;
        for c in 0..usize::from(self.lay.fanout) {
            if *n == out.len() {
                break;
            }
            let sub = region.child(pivot, c);
            if sub.meets(q) {
                self.visit(p, first + c as u16, sub, depth + 1, budget, q, out, n)?;
            }
        }
        Ok(())
    }

    /// Collects a node's matching records; returns its child pointer.
    #[inline(never)]
    fn visit_node(
        &mut self,
        p: u8,
        unit: u16,
        q: &Query<D>,
        out: &mut [Record<D>],
        n: &mut usize,
    ) -> Result<Option<u16>> {
        let v = self.read_node(p, unit)?;
        let log = v.log();
        let child = log.child.map(|c| c.1);
        if child.is_some() && !self.cfg.lazy_split {
            return Ok(child);
        }
        for i in 0..log.len {
            if *n == out.len() {
                break;
            }
            if let Slot::Record(r) = v.slot(i) {
                let rec = self.read_record(p, r)?;
                if q.matches(&rec) {
                    out[*n] = rec;
                    *n += 1;
                }
            }
        }
        Ok(child)
    }

    // ---- writing (rollback and WAL) ---------------------------------------------------------

    /// Writes `data` at partition offset `off`: in place (RB, COW, and any partition that is
    /// not part of the checkpoint), or as a redo entry (WAL).
    pub(crate) fn store_write(
        &mut self,
        p: u8,
        off: u32,
        data: &[u8],
        what: Structure,
    ) -> Result<()> {
        if self.cfg.checkpointing == Checkpointing::Wal && self.committed(p) {
            return self.wal_write(p, off, data);
        }
        let addr = self.lay.at(p, off);
        self.write(what, addr, data)
    }

    /// RB: the first write to an area of a checkpointed partition after the checkpoint leaves
    /// a write mark first.
    fn area_mark(&mut self, p: u8, kind: MarkKind) -> Result<()> {
        let bit = if kind == MarkKind::NodeArea {
            F_NODE_AREA
        } else {
            F_REC_AREA
        };
        if self.cfg.checkpointing != Checkpointing::Rollback
            || !self.committed(p)
            || self.flags & bit != 0
        {
            return Ok(());
        }
        let pt = self.parts[p as usize];
        let pos = if bit == F_NODE_AREA {
            pt.units
        } else {
            pt.records
        };
        self.write_mark(Mark {
            part: p,
            kind,
            obj: 0,
            pos,
        })?;
        self.flags |= bit;
        Ok(())
    }

    /// RB: the first write to a checkpointed node after the checkpoint leaves a write mark.
    fn node_mark(&mut self, p: u8, unit: u16, slot: usize) -> Result<()> {
        if self.cfg.checkpointing != Checkpointing::Rollback
            || !self.committed(p)
            || unit >= self.ck_units
            || self.table_has(key(p, unit))
        {
            return Ok(());
        }
        self.write_mark(Mark {
            part: p,
            kind: MarkKind::Node,
            obj: unit,
            pos: slot as u16,
        })?;
        self.table_add(key(p, unit));
        Ok(())
    }

    fn write_mark(&mut self, m: Mark) -> Result<()> {
        // Partitions (at most 8) and slots (at most 64) always fit a mark.
        let b = m.encode().ok_or(Error::Config {
            reason: "a write mark's fields do not fit its format",
        })?;
        self.log_append(&[&b])?;
        self.stats.marks = self.stats.marks.wrapping_add(1);
        Ok(())
    }

    pub(crate) fn table_has(&self, k: u16) -> bool {
        if self.cfg.checkpointing == Checkpointing::Wal {
            // WAL: the table is a 256-bit filter (a false hit only costs a log walk).
            let b = usize::from(k.wrapping_mul(0x9E37) >> 8);
            return self.marks[b / 16] >> (b % 16) & 1 == 1;
        }
        let mut i = usize::from(k.wrapping_mul(0x9E37)) % MARK_SLOTS;
        for _ in 0..MARK_SLOTS {
            match self.marks[i] {
                0 => return false,
                x if x == k => return true,
                _ => i = (i + 1) % MARK_SLOTS,
            }
        }
        false
    }

    /// Adds a key; sets the overflow flag if the table is full.
    pub(crate) fn table_add(&mut self, k: u16) {
        if self.cfg.checkpointing == Checkpointing::Wal {
            let b = usize::from(k.wrapping_mul(0x9E37) >> 8);
            self.marks[b / 16] |= 1 << (b % 16);
            return;
        }
        let mut i = usize::from(k.wrapping_mul(0x9E37)) % MARK_SLOTS;
        for _ in 0..MARK_SLOTS {
            if self.marks[i] == 0 || self.marks[i] == k {
                self.marks[i] = k;
                return;
            }
            i = (i + 1) % MARK_SLOTS;
        }
        self.flags |= F_OVERFLOW;
    }

    pub(crate) fn table_clear(&mut self) {
        self.marks = [0; MARK_SLOTS];
        self.flags = 0;
    }

    pub(crate) fn set_slot(&mut self, p: u8, unit: u16, i: usize, v: u16) -> Result<()> {
        self.node_mark(p, unit, i)?;
        let off = u32::from(unit) * self.lay.node + 2 * i as u32;
        self.store_write(p, off, &v.to_le_bytes(), Structure::Node)?;
        if self.cfg.checkpointing == Checkpointing::Wal && self.committed(p) {
            self.table_add(key(p, unit));
        }
        Ok(())
    }

    pub(crate) fn add_record(&mut self, p: u8, r: &Record<D>) -> Result<u16> {
        self.area_mark(p, MarkKind::RecordArea)?;
        let idx = self.parts[p as usize].records;
        let mut b = [0u8; MAX_RECORD];
        r.encode(&mut b);
        let off = self.lay.rec_off(idx);
        self.store_write(p, off, &b[..record_size::<D>()], Structure::Record)?;
        self.parts[p as usize].records += 1;
        Ok(idx)
    }

    pub(crate) fn alloc_units(&mut self, p: u8, n: u16) -> Result<u16> {
        self.area_mark(p, MarkKind::NodeArea)?;
        let u = self.parts[p as usize].units;
        self.parts[p as usize].units += n;
        Ok(u)
    }

    /// RB / WAL put into partition `p`; `false` if the partition is full.
    pub(crate) fn put_in(&mut self, p: u8, r: &Record<D>) -> Result<bool> {
        let mut unit = self.parts[p as usize].root;
        let mut region = self.root_region();
        let slots = usize::from(self.lay.slots);
        for depth in 0..=MAX_DEPTH {
            let log = self.node_log(p, unit)?;
            if let Some((_, g)) = log.child {
                let first = self.children(p, unit, g)?;
                let pivot = self.pivot(p, g)?;
                let c = region.child_index(pivot, &r.dims);
                region = region.child(pivot, c);
                unit = first + c as u16;
                continue;
            }
            let Some(free) = log.first_free(slots) else {
                // Undo neutralized the slot a split needs: the partition takes no more.
                return Ok(false);
            };
            if free + 1 < slots {
                if !self.fits(p, 0, u32::from(self.lay.rec)) {
                    return Ok(false);
                }
                let idx = self.add_record(p, r)?;
                self.set_slot(p, unit, free, Slot::record(idx))?;
                return Ok(true);
            }
            // The last slot is for the child pointer: split.
            if depth == MAX_DEPTH || !self.fits(p, self.lay.group, u32::from(self.lay.rec)) {
                return Ok(false);
            }
            self.split(p, unit, free, region)?;
        }
        Ok(false)
    }

    /// Splits leaf `unit` (whose last free slot is `free`): allocates its children
    /// contiguously, and points to them with one slot.
    fn split(&mut self, p: u8, unit: u16, free: usize, region: Region<D>) -> Result<()> {
        self.stats.splits = self.stats.splits.wrapping_add(1);
        // The node's record pointers, for a pivot or an eager split (a lazy equal split
        // needs none of them).
        let v = if self.cfg.pivot_split || !self.cfg.lazy_split {
            Some(self.read_node(p, unit)?)
        } else {
            None
        };
        let g = self.alloc_units(p, self.group_units())?;
        let first = g + self.head_units();
        let mut pivot = None;
        if self.cfg.pivot_split {
            // The mean of the node's records, kept inside the region.
            let mut sum = [0u64; D];
            let mut cnt = 0u64;
            for i in 0..free {
                if let Some(Slot::Record(r)) = v.as_ref().map(|v| v.slot(i)) {
                    let rec = self.read_record(p, r)?;
                    for (s, &d) in sum.iter_mut().zip(rec.dims.iter()) {
                        *s += u64::from(d);
                    }
                    cnt += 1;
                }
            }
            let mut piv = [0u16; D];
            for (k, x) in piv.iter_mut().enumerate() {
                *x = match sum[k].checked_div(cnt) {
                    Some(mean) => mean as u16,
                    None => region.mid(None, k) as u16,
                };
            }
            let mut b = [0u8; 2 * 4];
            for k in 0..D {
                b[2 * k..2 * k + 2].copy_from_slice(&piv[k].to_le_bytes());
            }
            let off = u32::from(g) * self.lay.node;
            self.store_write(p, off, &b[..2 * D], Structure::Node)?;
            if self.cfg.checkpointing == Checkpointing::Wal && self.committed(p) {
                self.table_add(key(p, g));
            }
            pivot = Some(piv);
        }
        if !self.cfg.lazy_split {
            // Classic split: copy the record pointers into the children (the parent's stay,
            // readers skip them once the child pointer is there).
            let mut fill = [0usize; 16];
            for i in 0..free {
                if let Some(Slot::Record(r)) = v.as_ref().map(|v| v.slot(i)) {
                    let rec = self.read_record(p, r)?;
                    let c = region.child_index(pivot, &rec.dims);
                    self.set_slot(p, first + c as u16, fill[c], Slot::record(r))?;
                    fill[c] += 1;
                }
            }
        }
        self.set_slot(p, unit, free, g)
    }
}

/// The key of a node in the mark table (never 0). Only the current partition is written,
/// and only a checkpointed one needs marks (or redo entries): the unit alone names the node.
pub(crate) fn key(_p: u8, unit: u16) -> u16 {
    unit.wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every node layout the engine writes — `k` written slots (records, neutralized ones,
    /// the child pointer last or not), the rest free — for every slot count: the search
    /// finds what a scan of every slot finds, within `1 + ceil(log2(slots))` reads.
    #[test]
    fn locate_finds_the_log_end_and_child_of_every_layout() {
        for slots in [4usize, 5, 8, 32, 64] {
            for k in 0..=slots {
                for last in [Slot::record(3), 0, 0x0042] {
                    let mut node = [SLOT_FREE; 64];
                    for (i, v) in node[..k].iter_mut().enumerate() {
                        *v = if i % 3 == 2 {
                            0
                        } else {
                            Slot::record(i as u16)
                        };
                    }
                    if k > 0 {
                        node[k - 1] = last;
                    }
                    let mut reads = 0;
                    let log: Result<NodeLog> = locate(slots, |i| {
                        reads += 1;
                        Ok(node[i])
                    });
                    let log = log.ok();
                    let child = (k > 0 && last == 0x0042).then(|| (k - 1, 0x0042));
                    assert_eq!(
                        log,
                        Some(NodeLog { len: k, child }),
                        "{slots} slots, {k} written"
                    );
                    let bound = 1 + (usize::BITS - (slots - 1).leading_zeros()) as usize;
                    assert!(reads <= bound, "{slots} slots, {k} written: {reads} reads");
                    // The whole-node view agrees.
                    let mut v = NodeView {
                        bytes: [0xFF; MAX_NODE],
                        slots,
                    };
                    for (i, x) in node[..slots].iter().enumerate() {
                        v.bytes[2 * i..2 * i + 2].copy_from_slice(&x.to_le_bytes());
                    }
                    assert_eq!(Some(v.log()), log);
                }
            }
        }
    }

    #[test]
    fn a_failing_read_is_passed_on() {
        let r = locate(8, |i| {
            if i == 3 {
                Err(Error::LogFull)
            } else {
                Ok(Slot::record(1))
            }
        });
        // Slot 7 is written: the search stops there without reading slot 3.
        assert_eq!(r.ok().map(|l| l.len), Some(8));
        let r = locate(8, |i| {
            if i == 7 {
                Ok(SLOT_FREE)
            } else {
                Err(Error::LogFull)
            }
        });
        assert!(matches!(r, Err(Error::LogFull)));
    }
}
