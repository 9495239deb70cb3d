//! The persistent primary index: a copy-on-write B+tree of index pages per table, plus a RAM
//! overlay of the changes since the last checkpoint.
//!
//! Both index kinds use the same tree, ordered by the order-preserving key encoding (a hash
//! index gains nothing on the device from hashing: its lookups descend the same two or three
//! cached pages, and a tree keeps range queries and the open cost the same for both kinds).
//!
//! # On-device format
//!
//! An index page is one block from the space manager, 1 KiB (a bigger size class only when
//! two long keys must share a page: every page of more than one entry holds at least two).
//! Small pages keep what a checkpoint writes for scattered changes small — one leaf per
//! changed key at worst — at the price of a tree one level higher (three levels for 100k
//! rows of 8-byte keys, forty-odd entries a page); open reads no page either way.
//!
//! ```text
//!  0 16  block header (kind IndexPage, format version 1; the checksum covers `len` bytes:
//!        the header and the entries — the rest of the page is zero)
//! 16  8  owner      id of the table
//! 24  1  level      0 for a leaf; a parent is one level above its children
//! 25  3  reserved   zero
//! 28  2  count      entries (at least one)
//! 30  2  reserved   zero
//! 32  …  entries, keys strictly ascending:
//!        key length u16 | key | class u8 | chunk u32 | index u32 | slot u16
//!        leaf:  the row's key and its tuple's block and slot
//!        inner: the smallest key the child may hold (entry 0: anything lower too) and the
//!               child page (slot 0)
//! ```
//!
//! The catalog entry of a table names its root page, the tree's height, its entry count and
//! page count. Pages change only at checkpoints and never in place: a checkpoint merges the
//! overlay into the tree by writing every changed leaf and its path to the root at new
//! locations (so it writes pages in proportion to the changes, not to the table), writes the
//! catalog that names the new root, and only then frees the old pages. The new pages' and old
//! pages' allocator marks travel in that catalog snapshot and are re-applied when it is read
//! (see `db`), so a crash leaves either the old root with the old pages allocated or the new
//! root with the new ones.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use ember_device::BlockDevice;

use crate::allocator::BlockRef;
use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};
use crate::schema::IndexKind;
use crate::space::SpaceManager;

/// Target size of an index page (see the module docs).
pub const PAGE: usize = 1024;
/// The longest key the index holds (two entries must fit the largest block).
pub const MAX_KEY: usize = 16 * 1024;
/// The most levels a tree may have (far more than any device can fill).
pub const MAX_HEIGHT: u8 = 32;
const HDR: usize = 32;
const ENTRY: usize = 2 + 9 + 2;

/// Where a row lives (for an inner entry: the child page, slot 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The block.
    pub block: BlockRef,
    /// The slot in it.
    pub slot: u16,
}

/// An index page in RAM.
#[derive(Debug)]
pub struct Node {
    level: u8,
    keys: Vec<u8>,
    ends: Vec<u32>,
    vals: Vec<Loc>,
}

impl Node {
    fn from_entries(level: u8, entries: &[(Vec<u8>, Loc)]) -> Node {
        let mut n = Node {
            level,
            keys: Vec::with_capacity(entries.iter().map(|e| e.0.len()).sum()),
            ends: Vec::with_capacity(entries.len()),
            vals: Vec::with_capacity(entries.len()),
        };
        for (k, v) in entries {
            n.keys.extend_from_slice(k);
            n.ends.push(n.keys.len() as u32);
            n.vals.push(*v);
        }
        n
    }
    fn len(&self) -> usize {
        self.vals.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.keys[start..self.ends[i] as usize]
    }
    fn search(&self, key: &[u8]) -> core::result::Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(key) {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
    /// The child of an inner node that holds `key`.
    fn route(&self, key: &[u8]) -> usize {
        match self.search(key) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        }
    }
    fn entries(&self) -> Vec<(Vec<u8>, Loc)> {
        (0..self.len())
            .map(|i| (self.key(i).to_vec(), self.vals[i]))
            .collect()
    }
    fn bytes(&self) -> usize {
        HDR + ENTRY * self.len() + self.keys.len()
    }
}

fn put_loc(out: &mut Vec<u8>, l: Loc) {
    out.push(l.block.class);
    out.extend_from_slice(&l.block.chunk.to_le_bytes());
    out.extend_from_slice(&l.block.index.to_le_bytes());
    out.extend_from_slice(&l.slot.to_le_bytes());
}

/// A sealed page of `size` bytes.
fn encode(owner: u64, level: u8, entries: &[(Vec<u8>, Loc)], size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(size);
    b.resize(HDR, 0);
    b[16..24].copy_from_slice(&owner.to_le_bytes());
    b[24] = level;
    b[28..30].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    for (k, l) in entries {
        b.extend_from_slice(&(k.len() as u16).to_le_bytes());
        b.extend_from_slice(k);
        put_loc(&mut b, *l);
    }
    let len = b.len();
    b.resize(size.max(len), 0);
    format::seal(Kind::IndexPage, &mut b, len);
    b
}

/// Checks and decodes a page read from byte `offset`.
fn decode(buf: &[u8], offset: u64, owner: u64, level: u8) -> Result<Node> {
    let corrupt = |reason| TableError::Corrupt {
        structure: Kind::IndexPage.name(),
        offset,
        reason,
    };
    let len = format::check(Kind::IndexPage, buf, offset)?;
    if len < HDR {
        return Err(corrupt("shorter than its header"));
    }
    if u64_at(buf, 16) != owner {
        return Err(corrupt("belongs to another table"));
    }
    if buf[24] != level {
        return Err(corrupt("wrong level in the tree"));
    }
    let count = usize::from(u16::from_le_bytes([buf[28], buf[29]]));
    if count == 0 {
        return Err(corrupt("an empty page"));
    }
    let mut entries = Vec::with_capacity(count);
    let mut at = HDR;
    for _ in 0..count {
        let n = buf
            .get(at..at + 2)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
            .ok_or(corrupt("entries past the page's length"))?;
        let e = buf
            .get(at + 2..at + 2 + n + 11)
            .filter(|_| at + 2 + n + 11 <= len)
            .ok_or(corrupt("entries past the page's length"))?;
        let key = e[..n].to_vec();
        let l = Loc {
            block: BlockRef {
                class: e[n],
                chunk: u32_at(e, n + 1),
                index: u32_at(e, n + 5),
            },
            slot: u16::from_le_bytes([e[n + 9], e[n + 10]]),
        };
        if entries.last().is_some_and(|p: &(Vec<u8>, Loc)| p.0 >= key) {
            return Err(corrupt("keys out of order"));
        }
        entries.push((key, l));
        at += 2 + n + 11;
    }
    if at != len {
        return Err(corrupt("length does not match its entries"));
    }
    Ok(Node::from_entries(level, &entries))
}

/// The primary index of one table: the tree as of the last checkpoint and the changes since.
#[derive(Debug, Clone)]
pub struct PIndex {
    /// Hash or tree (the same B+tree on the device; see the module docs).
    pub kind: IndexKind,
    /// Root page of the tree (none: empty).
    pub root: Option<BlockRef>,
    /// Levels of the tree (0 when empty).
    pub height: u8,
    /// Pages of the tree.
    pub pages: u64,
    /// Live entries, the overlay included.
    pub count: u64,
    /// Changes since the last checkpoint: `None` deletes the key.
    pub overlay: BTreeMap<Vec<u8>, Option<Loc>>,
}

impl PIndex {
    /// An empty index.
    pub fn new(kind: IndexKind) -> Self {
        PIndex {
            kind,
            root: None,
            height: 0,
            pages: 0,
            count: 0,
            overlay: BTreeMap::new(),
        }
    }

    /// A rough upper bound of the pages the next checkpoint writes and frees.
    pub fn flush_estimate(&self) -> u64 {
        let n = self.overlay.len() as u64;
        if n == 0 {
            return 0;
        }
        let h = u64::from(self.height.max(1));
        2 * (n * h).min(self.pages) + n / 8 + h + 2
    }
}

/// [`Kid::bytes`] of a page not read.
const UNKNOWN: usize = usize::MAX;

/// A page a parent will point at.
#[derive(Debug)]
struct Kid {
    sep: Vec<u8>,
    page: BlockRef,
    bytes: usize,
    fresh: bool,
}

/// What a flush wrote and what it replaced.
#[derive(Debug, Default)]
pub struct Flushed {
    /// Pages written (allocated in RAM only: reserved).
    pub new: Vec<BlockRef>,
    /// Pages of the old tree no longer in the new one.
    pub old: Vec<BlockRef>,
    hint: Option<BlockRef>,
}

/// A page to visit: page, level, the lowest key it may hold, the key its keys stay below.
type Visit = (BlockRef, u8, Option<Vec<u8>>, Option<Vec<u8>>);

/// Access to a table's index pages: the space manager and the decoded-page cache.
pub struct Pages<'a, D: BlockDevice> {
    sm: &'a mut SpaceManager<D>,
    cache: &'a mut HashMap<BlockRef, Arc<Node>>,
    owner: u64,
}

fn corrupt(offset: u64, reason: &'static str) -> TableError {
    TableError::Corrupt {
        structure: Kind::IndexPage.name(),
        offset,
        reason,
    }
}

impl<'a, D: BlockDevice> Pages<'a, D> {
    /// The pages of table `owner`.
    pub fn new(
        sm: &'a mut SpaceManager<D>,
        cache: &'a mut HashMap<BlockRef, Arc<Node>>,
        owner: u64,
    ) -> Self {
        Pages { sm, cache, owner }
    }

    fn load(&mut self, b: BlockRef, level: u8) -> Result<Arc<Node>> {
        if let Some(n) = self.cache.get(&b) {
            if n.level == level {
                return Ok(n.clone());
            }
        }
        let (at, len) = self.sm.allocator().extent(b);
        if !self.sm.allocator().is_valid(b) || len < HDR as u64 {
            return Err(corrupt(at, "points at no block"));
        }
        let mut buf = vec![0u8; len as usize];
        self.sm.device().read(at, &mut buf)?;
        let n = Arc::new(decode(&buf, at, self.owner, level)?);
        self.cache.insert(b, n.clone());
        Ok(n)
    }

    fn root_level(ix: &PIndex) -> Result<u8> {
        ix.height
            .checked_sub(1)
            .filter(|h| *h < MAX_HEIGHT)
            .ok_or(TableError::Corrupt {
                structure: "catalog",
                offset: 0,
                reason: "index height out of range",
            })
    }

    /// The location of `key`, the overlay first.
    pub fn get(&mut self, ix: &PIndex, key: &[u8]) -> Result<Option<Loc>> {
        if let Some(v) = ix.overlay.get(key) {
            return Ok(*v);
        }
        let Some(mut page) = ix.root else {
            return Ok(None);
        };
        let mut level = Self::root_level(ix)?;
        loop {
            let n = self.load(page, level)?;
            if level == 0 {
                return Ok(n.search(key).ok().map(|i| n.vals[i]));
            }
            page = n.vals[n.route(key)].block;
            level -= 1;
        }
    }

    /// The tree's entries within the bounds, in key order (the overlay left out), checking
    /// the tree's structure on the way; with `pages`, every page visited (then the whole
    /// tree is visited).
    pub fn walk(
        &mut self,
        ix: &PIndex,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut pages: Option<&mut Vec<BlockRef>>,
    ) -> Result<Vec<(Vec<u8>, Loc)>> {
        let mut out = Vec::new();
        let Some(root) = ix.root else {
            return Ok(out);
        };
        let all = pages.is_some();
        let mut stack: Vec<Visit> = vec![(root, Self::root_level(ix)?, None, None)];
        while let Some((page, level, min, max)) = stack.pop() {
            let n = self.load(page, level)?;
            let at = self.sm.allocator().extent(page).0;
            if let Some(p) = pages.as_deref_mut() {
                p.push(page);
            }
            let first = usize::from(level > 0);
            for i in first..n.len() {
                let k = n.key(i);
                if min.as_deref().is_some_and(|m| k < m) || max.as_deref().is_some_and(|m| k >= m) {
                    return Err(corrupt(at, "a key outside its parent's range"));
                }
            }
            if level == 0 {
                for i in 0..n.len() {
                    if (lo, hi).contains(n.key(i)) {
                        out.push((n.key(i).to_vec(), n.vals[i]));
                    }
                }
                continue;
            }
            for i in (0..n.len()).rev() {
                let below = if i + 1 < n.len() {
                    Some(n.key(i + 1).to_vec())
                } else {
                    max.clone()
                };
                let above = if i == 0 {
                    min.clone()
                } else {
                    Some(n.key(i).to_vec())
                };
                if !all {
                    let under = match (&below, lo) {
                        (Some(b), Bound::Included(l) | Bound::Excluded(l)) => b.as_slice() <= l,
                        _ => false,
                    };
                    let over = match (&above, hi) {
                        (Some(a), Bound::Included(h)) => a.as_slice() > h,
                        (Some(a), Bound::Excluded(h)) => a.as_slice() >= h,
                        _ => false,
                    };
                    if under || over {
                        continue;
                    }
                }
                stack.push((n.vals[i].block, level - 1, above, below));
            }
        }
        Ok(out)
    }

    /// The largest live key, overlay included: the rightmost leaf is enough unless the
    /// overlay deleted all of its keys.
    pub fn last(&mut self, ix: &PIndex) -> Result<Option<Vec<u8>>> {
        let over = ix
            .overlay
            .iter()
            .rev()
            .find(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone());
        let Some(mut page) = ix.root else {
            return Ok(over);
        };
        let mut level = Self::root_level(ix)?;
        let tree = loop {
            let n = self.load(page, level)?;
            if level == 0 {
                let live = (0..n.len())
                    .rev()
                    .map(|i| n.key(i))
                    .find(|k| !matches!(ix.overlay.get(*k), Some(None)));
                match live {
                    Some(k) => break Some(k.to_vec()),
                    None => {
                        let all = self.range(ix, Bound::Unbounded, Bound::Unbounded)?;
                        return Ok(all.into_iter().next_back().map(|(k, _)| k));
                    }
                }
            }
            let Some(last) = n.vals.last() else {
                let at = self.sm.allocator().extent(page).0;
                return Err(corrupt(at, "an inner page without children"));
            };
            page = last.block;
            level -= 1;
        };
        Ok(over.max(tree))
    }

    /// The entries within the bounds, overlay included, in key order.
    pub fn range(
        &mut self,
        ix: &PIndex,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Loc)>> {
        let tree = self.walk(ix, lo, hi, None)?;
        if ix.overlay.is_empty() {
            return Ok(tree);
        }
        let mut out = Vec::with_capacity(tree.len());
        let mut over = ix
            .overlay
            .range::<[u8], _>((lo, hi))
            .map(|(k, v)| (k, *v))
            .peekable();
        for (k, l) in tree {
            while let Some((ok, ov)) = over.next_if(|(ok, _)| ok.as_slice() < k.as_slice()) {
                if let Some(v) = ov {
                    out.push((ok.clone(), v));
                }
            }
            match over.next_if(|(ok, _)| ok.as_slice() == k.as_slice()) {
                Some((_, Some(v))) => out.push((k, v)),
                Some((_, None)) => {}
                None => out.push((k, l)),
            }
        }
        for (ok, ov) in over {
            if let Some(v) = ov {
                out.push((ok.clone(), v));
            }
        }
        Ok(out)
    }

    /// Merges the overlay into the tree, copy-on-write: writes the new pages (not synced)
    /// and returns them with the old pages they replace; `ix` then names the new root and
    /// its overlay is empty.
    pub fn flush(&mut self, ix: &mut PIndex) -> Result<Flushed> {
        let mut st = Flushed::default();
        if ix.overlay.is_empty() {
            return Ok(st);
        }
        let changes: Vec<(Vec<u8>, Option<Loc>)> =
            std::mem::take(&mut ix.overlay).into_iter().collect();
        let (mut kids, mut level) = match ix.root {
            None => {
                let sets: Vec<(Vec<u8>, Loc)> = changes
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v)))
                    .collect();
                (self.pack(0, sets, &mut st)?, 0)
            }
            Some(root) => {
                let level = Self::root_level(ix)?;
                (self.cow(root, level, &changes, &mut st)?, level)
            }
        };
        loop {
            match kids.len() {
                0 => {
                    ix.root = None;
                    ix.height = 0;
                    break;
                }
                1 => {
                    let n = self.load(kids[0].page, level)?;
                    if level > 0 && n.len() == 1 {
                        let child = n.vals[0].block;
                        self.discard(&kids[0], &mut st)?;
                        kids = vec![Kid {
                            sep: Vec::new(),
                            page: child,
                            bytes: UNKNOWN,
                            fresh: false,
                        }];
                        level -= 1;
                        continue;
                    }
                    ix.root = Some(kids[0].page);
                    ix.height = level + 1;
                    break;
                }
                _ => {
                    if level + 1 >= MAX_HEIGHT {
                        return Err(TableError::Invalid("the index tree is too high"));
                    }
                    let entries = kids
                        .into_iter()
                        .map(|k| {
                            (
                                k.sep,
                                Loc {
                                    block: k.page,
                                    slot: 0,
                                },
                            )
                        })
                        .collect();
                    level += 1;
                    kids = self.pack(level, entries, &mut st)?;
                }
            }
        }
        ix.pages = (ix.pages + st.new.len() as u64).saturating_sub(st.old.len() as u64);
        Ok(st)
    }

    /// Applies sorted `changes` to the subtree at `page` (of `level`); returns the pages
    /// that replace it, in order (none if it became empty).
    fn cow(
        &mut self,
        page: BlockRef,
        level: u8,
        changes: &[(Vec<u8>, Option<Loc>)],
        st: &mut Flushed,
    ) -> Result<Vec<Kid>> {
        let n = self.load(page, level)?;
        st.old.push(page);
        if level == 0 {
            let mut merged = Vec::with_capacity(n.len() + changes.len());
            let mut c = changes.iter().peekable();
            for i in 0..n.len() {
                let k = n.key(i);
                while let Some((ck, cv)) = c.next_if(|(ck, _)| ck.as_slice() < k) {
                    if let Some(v) = cv {
                        merged.push((ck.clone(), *v));
                    }
                }
                match c.next_if(|(ck, _)| ck.as_slice() == k) {
                    Some((_, Some(v))) => merged.push((k.to_vec(), *v)),
                    Some((_, None)) => {}
                    None => merged.push((k.to_vec(), n.vals[i])),
                }
            }
            for (ck, cv) in c {
                if let Some(v) = cv {
                    merged.push((ck.clone(), *v));
                }
            }
            return self.pack(0, merged, st);
        }
        let mut kids = Vec::with_capacity(n.len() + 2);
        let mut from = 0;
        for i in 0..n.len() {
            // Child i holds keys below the next separator.
            let to = if i + 1 < n.len() {
                let next = n.key(i + 1);
                from + changes[from..].partition_point(|(k, _)| k.as_slice() < next)
            } else {
                changes.len()
            };
            let child = n.vals[i].block;
            if from == to {
                kids.push(Kid {
                    sep: n.key(i).to_vec(),
                    page: child,
                    bytes: UNKNOWN,
                    fresh: false,
                });
            } else {
                let mut new = self.cow(child, level - 1, &changes[from..to], st)?;
                if let Some(first) = new.first_mut() {
                    if i > 0 {
                        // Keep the separator the parent routed by.
                        first.sep = n.key(i).to_vec();
                    }
                }
                kids.extend(new);
            }
            from = to;
        }
        // A rewritten page under a quarter full is merged with a neighbour when both fit
        // one page.
        let mut i = 0;
        while kids.len() > 1 && i < kids.len() {
            if !kids[i].fresh || kids[i].bytes >= PAGE / 4 {
                i += 1;
                continue;
            }
            let j = if i + 1 < kids.len() { i + 1 } else { i - 1 };
            let (a, b) = (i.min(j), i.max(j));
            for k in [a, b] {
                if kids[k].bytes == UNKNOWN {
                    kids[k].bytes = self.load(kids[k].page, level - 1)?.bytes();
                }
            }
            if kids[a].bytes + kids[b].bytes - HDR > PAGE {
                i += 1;
                continue;
            }
            let mut ents = self.load(kids[a].page, level - 1)?.entries();
            let mut right = self.load(kids[b].page, level - 1)?.entries();
            if level - 1 > 0 {
                if let Some(r) = right.first_mut() {
                    r.0 = kids[b].sep.clone();
                }
            }
            ents.append(&mut right);
            let sep = kids[a].sep.clone();
            self.discard(&kids[a], st)?;
            self.discard(&kids[b], st)?;
            let mut packed = self.pack(level - 1, ents, st)?;
            if let Some(first) = packed.first_mut() {
                first.sep = sep;
            }
            kids.splice(a..=b, packed);
            i = a;
        }
        if kids.is_empty() {
            return Ok(kids);
        }
        let entries = kids
            .into_iter()
            .map(|k| {
                (
                    k.sep,
                    Loc {
                        block: k.page,
                        slot: 0,
                    },
                )
            })
            .collect();
        self.pack(level, entries, st)
    }

    /// Drops a page from the tree being built: a page written by this flush is given back,
    /// a page of the old tree is freed with the others.
    fn discard(&mut self, k: &Kid, st: &mut Flushed) -> Result<()> {
        if k.fresh {
            st.new.retain(|b| *b != k.page);
            self.cache.remove(&k.page);
            self.sm.unreserve(&[k.page])?;
        } else {
            st.old.push(k.page);
        }
        Ok(())
    }

    /// Writes `entries` as pages of `level`, about `PAGE` bytes each, at new locations.
    fn pack(
        &mut self,
        level: u8,
        entries: Vec<(Vec<u8>, Loc)>,
        st: &mut Flushed,
    ) -> Result<Vec<Kid>> {
        let size = |e: &(Vec<u8>, Loc)| ENTRY + e.0.len();
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        let mut start = 0;
        while start < entries.len() {
            let (mut end, mut bytes) = (start, HDR);
            while end < entries.len() {
                let e = size(&entries[end]);
                if end - start >= 2 && bytes + e > PAGE {
                    break;
                }
                bytes += e;
                end += 1;
            }
            groups.push((start, end, bytes));
            start = end;
        }
        // Balance a short last page with the one before it.
        if groups.len() >= 2 {
            let (s1, _, b1) = groups[groups.len() - 2];
            let (_, e2, b2) = groups[groups.len() - 1];
            if b2 < PAGE / 2 && e2 - s1 >= 4 {
                let half = (b1 + b2) / 2;
                let (mut cut, mut bytes) = (s1, HDR);
                while cut < e2 - 2 && (cut < s1 + 2 || bytes + size(&entries[cut]) <= half) {
                    bytes += size(&entries[cut]);
                    cut += 1;
                }
                let total: usize = entries[s1..e2].iter().map(size).sum::<usize>() + 2 * HDR;
                let n = groups.len();
                groups[n - 2] = (s1, cut, bytes);
                groups[n - 1] = (cut, e2, total - bytes);
            }
        }
        let mut out = Vec::with_capacity(groups.len());
        for (s, e, bytes) in groups {
            let ext = self.sm.reserve_after(bytes.max(PAGE) as u64, st.hint)?;
            let [x] = ext[..] else {
                self.sm
                    .unreserve(&ext.iter().map(|e| e.block).collect::<Vec<_>>())?;
                return Err(TableError::Invalid("the allocator split an index page"));
            };
            st.hint = Some(x.block);
            let page = encode(self.owner, level, &entries[s..e], x.len as usize);
            self.sm.device().write(x.offset, &page)?;
            self.cache
                .insert(x.block, Arc::new(Node::from_entries(level, &entries[s..e])));
            st.new.push(x.block);
            out.push(Kid {
                sep: entries[s].0.clone(),
                page: x.block,
                bytes,
                fresh: true,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(i: u32) -> Loc {
        Loc {
            block: BlockRef {
                class: 1,
                chunk: i / 7,
                index: i,
            },
            slot: (i % 59) as u16,
        }
    }

    #[test]
    fn pages_round_trip_and_every_flipped_bit_is_caught() {
        let entries: Vec<(Vec<u8>, Loc)> = (0..50u32)
            .map(|i| (format!("key{i:04}").into_bytes(), loc(i)))
            .collect();
        let page = encode(9, 0, &entries, PAGE);
        let n = decode(&page, 4096, 9, 0).unwrap();
        assert_eq!(n.entries(), entries);
        assert!(decode(&page, 4096, 8, 0).is_err(), "another owner");
        assert!(decode(&page, 4096, 9, 1).is_err(), "another level");
        let len = HDR + entries.iter().map(|e| ENTRY + e.0.len()).sum::<usize>();
        for bit in 0..len * 8 {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad, 4096, 9, 0).is_err(), "bit {bit}");
        }
    }
}
