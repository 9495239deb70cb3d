//! The COW baseline (the revised BPFS of the paper's §V-A2): a checkpointed node is never
//! changed; the first change copies it — with its siblings, since one pointer names a group —
//! and its parent must then point to the copy, up to the root (the wandering tree). Nodes
//! written after the checkpoint take small updates in place. The commit record names the
//! roots; restore erases what was written after the checkpoint (copy-erase-copy-back where a
//! unit also holds checkpointed bytes).
//!
//! Path copying leaves many dead nodes behind, so when the current partition fills while its
//! live (reachable) bytes are below [`Config::cow_compact_percent`](crate::Config) of it, the
//! revised BPFS compacts: the next commit copies the live tree, out of place, into a free
//! partition outside the last checkpoint, and its commit record names the copy — a cut
//! anywhere before that record restores the checkpoint, which never references the target.

use ember_device::FlashDevice;

use crate::config::{MAX_DEPTH, MAX_NODE};
use crate::error::{Error, Result, Structure};
use crate::format::{Record, Slot};
use crate::store::{NodeView, Store};

/// What a walk of a partition's tree finds: the node units and records a compacted copy
/// holds, and the deepest level.
#[derive(Debug, Clone, Copy, Default)]
struct LiveSize {
    units: u32,
    records: u32,
    depth: u32,
}

impl<F: FlashDevice, const D: usize> Store<F, D> {
    fn fresh(&self, p: u8, unit: u16) -> bool {
        !self.committed(p) || unit >= self.ck_units
    }

    /// COW put into partition `p`; `false` if the partition is full.
    pub(crate) fn cow_put(&mut self, p: u8, r: &Record<D>) -> Result<bool> {
        // The path to the leaf: the node at each level, and the first unit of the group it
        // sits in (0 for the root).
        let mut path = [(0u16, 0u16); MAX_DEPTH + 1];
        let mut k = 0;
        let mut unit = self.parts[p as usize].root;
        let mut group = 0u16;
        let mut region = self.root_region();
        loop {
            path[k] = (unit, group);
            let Some((_, g)) = self.node_log(p, unit)?.child else {
                break;
            };
            if k == MAX_DEPTH {
                return Ok(false);
            }
            let first = self.children(p, unit, g)?;
            let pivot = self.pivot(p, g)?;
            let c = region.child_index(pivot, &r.dims);
            region = region.child(pivot, c);
            unit = first + c as u16;
            group = g;
            k += 1;
        }
        if !self.fresh(p, unit) {
            // Room for a copy of the whole path, a split and the record.
            let need = (k as u32 + 1) * self.lay.group + self.lay.group;
            if !self.fits(p, need, u32::from(self.lay.rec)) {
                return Ok(false);
            }
            self.copy_path(p, &path[..=k])?;
        }
        self.put_in(p, r)
    }

    /// Copies the checkpointed nodes of `path` (root first, leaf last) bottom-up until a node
    /// written after the checkpoint can take the new child pointer in place.
    fn copy_path(&mut self, p: u8, path: &[(u16, u16)]) -> Result<()> {
        let mut redirect: Option<(u16, u16)> = None;
        for i in (0..path.len()).rev() {
            let (unit, group) = path[i];
            if i + 1 < path.len() && redirect.is_none() {
                break;
            }
            if self.fresh(p, unit) {
                let log = self.node_log(p, unit)?;
                let slots = usize::from(self.lay.slots);
                if let (Some((old, _)), Some(free), Some((_, new))) =
                    (log.child, log.first_free(slots), redirect)
                {
                    // In place: neutralize the old pointer, append the new one.
                    let off = u32::from(unit) * self.lay.node + 2 * old as u32;
                    self.store_write(p, off, &[0, 0], Structure::Node)?;
                    self.set_slot(p, unit, free, new)?;
                    return Ok(());
                }
            }
            if i == 0 {
                // The root is alone: one unit.
                let new = self.alloc_units(p, 1)?;
                self.copy_node(p, unit, new, redirect)?;
                self.parts[p as usize].root = new;
                return Ok(());
            }
            // The node's whole group moves (one pointer names it).
            let n = self.group_units();
            let new_g = self.alloc_units(p, n)?;
            for j in 0..n {
                let from = group + j;
                let to = new_g + j;
                let head = j < self.head_units();
                let rd = if from == unit { redirect } else { None };
                if head {
                    let v = self.read_node(p, from)?;
                    let len = self.lay.node as usize;
                    if v.bytes[..len].iter().any(|&b| b != 0xFF) {
                        let off = u32::from(to) * self.lay.node;
                        self.store_write(p, off, &v.bytes[..len], Structure::Node)?;
                    }
                } else {
                    self.copy_node(p, from, to, rd)?;
                }
            }
            redirect = Some((group, new_g));
        }
        Ok(())
    }

    /// Writes a compacted copy of node `from` at unit `to` (dead slots dropped, the child
    /// pointer last and redirected to `redirect.1` if given).
    fn copy_node(&mut self, p: u8, from: u16, to: u16, redirect: Option<(u16, u16)>) -> Result<()> {
        self.stats.node_copies = self.stats.node_copies.wrapping_add(1);
        let v: NodeView = self.read_node(p, from)?;
        let log = v.log();
        let mut out = [0xFFu8; crate::config::MAX_NODE];
        let mut n = 0;
        let child = log.child.map(|c| c.1);
        // Without lazy split a split node's record pointers are dead (readers skip them,
        // its children hold copies): the copy drops them, which leaves the copy's free slots
        // for in-place pointer updates until the next checkpoint.
        let len = if child.is_some() && !self.cfg.lazy_split {
            0
        } else {
            log.len
        };
        for i in 0..len {
            if let Slot::Record(r) = v.slot(i) {
                out[2 * n..2 * n + 2].copy_from_slice(&Slot::record(r).to_le_bytes());
                n += 1;
            }
        }
        if let Some(c) = child {
            let c = match redirect {
                Some((old, new)) if old == c => new,
                _ => c,
            };
            out[2 * n..2 * n + 2].copy_from_slice(&c.to_le_bytes());
            n += 1;
        }
        if n > 0 {
            let off = u32::from(to) * self.lay.node;
            self.store_write(p, off, &out[..2 * n], Structure::Node)?;
        }
        Ok(())
    }

    /// COW restore: erase what the current partition gained after the checkpoint.
    pub(crate) fn cow_restore(&mut self) -> Result<()> {
        let p = self.cur();
        let pt = self.parts[p as usize];
        let end = self.node_area_end(p, pt.units)?;
        let a = self.lay.at(p, u32::from(pt.units) * self.lay.node);
        let b = self.lay.at(p, u32::from(end) * self.lay.node);
        self.revert_range(a, b, true)?;
        let rend = self.record_area_end(p, pt.records)?;
        if rend > pt.records {
            let a = self.lay.at(p, self.lay.rec_off(rend - 1));
            let b = self
                .lay
                .at(p, self.lay.rec_off(pt.records) + u32::from(self.lay.rec));
            self.revert_range(a, b, false)?;
        }
        Ok(())
    }

    // ---- compaction ---------------------------------------------------------------------

    /// Partition `p` is full: whether to compact it — its live bytes are below the threshold,
    /// and the copy leaves room for a put at the deepest level after the commit (which copies
    /// the path again, splitting at the end). Not if the tree is within a level of
    /// [`MAX_DEPTH`]: the put may have failed for depth, which no compaction cures (it would
    /// compact again and again).
    pub(crate) fn cow_should_compact(&mut self, p: u8) -> Result<bool> {
        let t = u32::from(self.cfg.cow_compact_percent);
        if t == 0 {
            return Ok(false);
        }
        let l = self.live_size(p)?;
        if l.depth as usize + 2 > MAX_DEPTH {
            return Ok(false);
        }
        let rec = u32::from(self.lay.rec);
        let (len, node, group) = (self.lay.part_len, self.lay.node, self.lay.group);
        let nodes = l.units * node;
        let records = l.records * rec;
        if (nodes + records) * 100 >= t * len {
            return Ok(false);
        }
        let need = nodes + (l.depth + 2) * group + records + rec + 2 * group;
        Ok(need <= len)
    }

    fn live_size(&mut self, p: u8) -> Result<LiveSize> {
        let mut l = LiveSize {
            units: 1,
            ..LiveSize::default()
        };
        let mut budget = u32::from(self.parts[p as usize].units);
        let root = self.parts[p as usize].root;
        self.live_walk(p, root, 0, &mut budget, &mut l)?;
        Ok(l)
    }

    /// Guards a walk of partition `p` against a corrupt tree (shared or too deep nodes).
    fn walk_guard(&self, p: u8, unit: u16, depth: u32, budget: &mut u32) -> Result<()> {
        if *budget == 0 || depth as usize > MAX_DEPTH {
            return Err(Error::Corrupt {
                what: Structure::Node,
                addr: self.node_addr(p, unit),
                reason: "the tree reaches some node twice or is deeper than any the engine builds",
            });
        }
        *budget -= 1;
        Ok(())
    }

    fn live_walk(
        &mut self,
        p: u8,
        unit: u16,
        depth: u32,
        budget: &mut u32,
        l: &mut LiveSize,
    ) -> Result<()> {
        self.walk_guard(p, unit, depth, budget)?;
        let (records, child) = self.live_in_node(p, unit)?;
        l.records += records;
        l.depth = l.depth.max(depth);
        if let Some(g) = child {
            let first = self.children(p, unit, g)?;
            l.units += u32::from(self.group_units());
            for c in 0..u16::from(self.lay.fanout) {
                self.live_walk(p, first + c, depth + 1, budget, l)?;
            }
        }
        Ok(())
    }

    /// The live record pointers of a node (none in a split node without lazy split: readers
    /// skip them) and its child group.
    #[inline(never)]
    fn live_in_node(&mut self, p: u8, unit: u16) -> Result<(u32, Option<u16>)> {
        let v = self.read_node(p, unit)?;
        let log = v.log();
        let child = log.child.map(|c| c.1);
        if child.is_some() && !self.cfg.lazy_split {
            return Ok((0, child));
        }
        let n = (0..log.len)
            .filter(|&i| matches!(v.slot(i), Slot::Record(_)))
            .count() as u32;
        Ok((n, child))
    }

    /// Copies the live tree of the current partition `p` into free partition `q`, then puts
    /// `q` in `p`'s place in the FIFO order and frees `p`. `q` must be the first free
    /// partition and outside the last checkpoint, so a cut anywhere in here leaves the
    /// checkpoint whole. `false` (nothing changed but `q`'s bytes) if the tree no longer fits
    /// once compacted.
    ///
    /// Records are never dead (no update or delete), so the record area is copied as it is
    /// and keeps its record numbers: the node slots that point to records are copied
    /// unchanged. When `q` last held an earlier copy of the same tree (compactions
    /// alternate between two partitions), the segments at the top of its record area that
    /// already hold the same bytes are neither erased nor written again.
    pub(crate) fn cow_compact(&mut self, p: u8, q: u8) -> Result<bool> {
        let live = usize::from(self.live);
        if self.committed(q) || live == usize::from(self.lay.parts) || self.order[live] != q {
            return Err(Error::CheckpointNeeded);
        }
        let records = self.parts[p as usize].records;
        let rec_lo = self.lay.rec_off(records.saturating_sub(1));
        let rec_lo = if records == 0 {
            self.lay.part_len
        } else {
            rec_lo
        };
        let kept = self.prepare_target(p, q, rec_lo)?;
        self.copy_bytes(p, q, rec_lo, kept)?;
        self.parts[q as usize] = crate::store::Part {
            units: 1,
            records,
            root: 0,
        };
        let mut budget = u32::from(self.parts[p as usize].units);
        let root = self.parts[p as usize].root;
        if !self.copy_tree(p, root, q, 0, 0, &mut budget)? {
            return Ok(false);
        }
        self.order[live - 1] = q;
        self.order[live] = p;
        self.stats.compactions = self.stats.compactions.wrapping_add(1);
        Ok(true)
    }

    /// Makes free partition `q` ready to receive `p`'s record area `[rec_lo, part_len)` and
    /// a new node area: the segments at its top that lie wholly in that range and already
    /// hold `p`'s bytes are kept, every other segment that is not erased is erased. Returns
    /// the partition offset where the kept segments begin (`part_len` if none).
    fn prepare_target(&mut self, p: u8, q: u8, rec_lo: u32) -> Result<u32> {
        let seg = self.lay.seg;
        let len = self.lay.part_len;
        let mut kept = len;
        while kept >= seg && kept - seg >= rec_lo && self.same_bytes(p, q, kept - seg, seg)? {
            kept -= seg;
            self.stats.kept_segments = self.stats.kept_segments.wrapping_add(1);
        }
        let mut at = 0;
        while at < kept {
            let addr = self.lay.at(q, at);
            if !self.is_erased(Structure::Partition, addr, u64::from(seg))? {
                self.erase(Structure::Partition, addr, u64::from(seg))?;
                self.stats.partition_erases = self.stats.partition_erases.wrapping_add(1);
            }
            at += seg;
        }
        Ok(kept)
    }

    /// Whether partitions `p` and `q` hold the same `len` bytes at offset `off`.
    fn same_bytes(&mut self, p: u8, q: u8, off: u32, len: u32) -> Result<bool> {
        let mut a = [0u8; MAX_NODE];
        let mut b = [0u8; MAX_NODE];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(MAX_NODE as u32) as usize;
            self.read(Structure::Record, self.lay.at(p, off + at), &mut a[..n])?;
            self.read(Structure::Record, self.lay.at(q, off + at), &mut b[..n])?;
            if a[..n] != b[..n] {
                return Ok(false);
            }
            at += n as u32;
        }
        Ok(true)
    }

    /// Copies partition `p`'s bytes `[from, to)` to the same offsets of partition `q`.
    fn copy_bytes(&mut self, p: u8, q: u8, from: u32, to: u32) -> Result<()> {
        let mut buf = [0u8; MAX_NODE];
        let mut at = from;
        while at < to {
            let n = (to - at).min(MAX_NODE as u32) as usize;
            self.read(Structure::Record, self.lay.at(p, at), &mut buf[..n])?;
            self.write(Structure::Record, self.lay.at(q, at), &buf[..n])?;
            at += n as u32;
        }
        Ok(())
    }

    /// Copies the subtree of node `from` (partition `p`) to node `to` of partition `q`.
    fn copy_tree(
        &mut self,
        p: u8,
        from: u16,
        q: u8,
        to: u16,
        depth: u32,
        budget: &mut u32,
    ) -> Result<bool> {
        self.walk_guard(p, from, depth, budget)?;
        let Some((g, new_g)) = self.copy_live_node(p, from, q, to)? else {
            return Ok(true);
        };
        if new_g == 0 {
            return Ok(false);
        }
        let first = self.children(p, from, g)?;
        for j in 0..self.head_units() {
            // The pivot header of the group, as it is.
            let v = self.read_node(p, g + j)?;
            let len = self.lay.node as usize;
            if v.bytes[..len].iter().any(|&b| b != 0xFF) {
                let off = u32::from(new_g + j) * self.lay.node;
                self.store_write(q, off, &v.bytes[..len], Structure::Node)?;
            }
        }
        let new_first = new_g + self.head_units();
        for c in 0..u16::from(self.lay.fanout) {
            if !self.copy_tree(p, first + c, q, new_first + c, depth + 1, budget)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Writes node `to` of `q` with node `from`'s live record pointers (their records are
    /// at the same numbers in `q`), then the pointer to a newly allocated child group.
    /// Returns the old and new child groups (the new one 0 if `q` is full).
    #[inline(never)]
    fn copy_live_node(&mut self, p: u8, from: u16, q: u8, to: u16) -> Result<Option<(u16, u16)>> {
        self.stats.node_copies = self.stats.node_copies.wrapping_add(1);
        let v = self.read_node(p, from)?;
        let log = v.log();
        let child = log.child.map(|c| c.1);
        let mut out = [0xFFu8; MAX_NODE];
        let mut n = 0;
        if child.is_none() || self.cfg.lazy_split {
            for i in 0..log.len {
                if let Slot::Record(r) = v.slot(i) {
                    out[2 * n..2 * n + 2].copy_from_slice(&Slot::record(r).to_le_bytes());
                    n += 1;
                }
            }
        }
        let mut moved = None;
        if let Some(g) = child {
            if !self.fits(q, self.lay.group, 0) {
                return Ok(Some((g, 0)));
            }
            let new_g = self.alloc_units(q, self.group_units())?;
            out[2 * n..2 * n + 2].copy_from_slice(&new_g.to_le_bytes());
            n += 1;
            moved = Some((g, new_g));
        }
        if n > 0 {
            let off = u32::from(to) * self.lay.node;
            self.store_write(q, off, &out[..2 * n], Structure::Node)?;
        }
        Ok(moved)
    }
}
