//! The COW baseline (the revised BPFS of the paper's §V-A2): a checkpointed node is never
//! changed; the first change copies it — with its siblings, since one pointer names a group —
//! and its parent must then point to the copy, up to the root (the wandering tree). Nodes
//! written after the checkpoint take small updates in place. The commit record names the
//! roots; restore erases what was written after the checkpoint (copy-erase-copy-back where a
//! unit also holds checkpointed bytes).

use ember_device::FlashDevice;

use crate::config::MAX_DEPTH;
use crate::error::{Result, Structure};
use crate::format::{Record, Slot};
use crate::store::{NodeView, Store};

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
            let v = self.read_node(p, unit)?;
            let Some((_, g)) = v.child() else { break };
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
                let v = self.read_node(p, unit)?;
                if let (Some((old, _)), Some(free), Some((_, new))) =
                    (v.child(), v.first_free(), redirect)
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
        let mut out = [0xFFu8; crate::config::MAX_NODE];
        let mut n = 0;
        let mut child = None;
        for i in 0..v.slots {
            match v.slot(i) {
                Slot::Record(r) => {
                    out[2 * n..2 * n + 2].copy_from_slice(&Slot::record(r).to_le_bytes());
                    n += 1;
                }
                Slot::Child(c) => child = Some(c),
                Slot::Free => break,
                Slot::Dead => {}
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
}
