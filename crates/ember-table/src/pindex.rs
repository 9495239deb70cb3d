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
//! changed key at worst — at the price of a tree one level higher (100k rows of 8-byte keys
//! take three levels; a leaf of keys inserted in order holds about 230 entries, forty-odd
//! in version 1); open reads no page either way.
//!
//! ```text
//!  0 16  block header (kind IndexPage, format version 2; the checksum covers `len` bytes:
//!        the header and the entries — the rest of the page is zero)
//! 16  8  owner      id of the table
//! 24  1  level      0 for a leaf; a parent is one level above its children
//! 25  3  reserved   zero
//! 28  2  count      entries (at least one)
//! 30  2  reserved   zero
//! 32  …  entries, keys strictly ascending, each coded against the entry before it in the
//!        page (the first against an empty key and block 0 of chunk 0, slot 0):
//!          shared varint   leading bytes the key shares with the previous key
//!          suffix varint   length of the rest of the key, then the rest
//!          tag    u8       bits 0–4: size class; bits 5–7: how the location follows
//!            0  the previous entry's block (class, chunk, index), slot = previous slot + 1
//!            1  the previous entry's block, slot varint
//!            2  the previous entry's chunk, index = previous index + 1, slot 0
//!            3  the previous entry's chunk, index = previous index + 1, slot varint
//!            4  the previous entry's chunk, index varint, slot varint
//!            5  chunk varint, index varint, slot varint
//!        varints are LEB128, at most 5 bytes, and must fit their field (u32, slot u16)
//!        leaf:  the row's key and its tuple's block and slot
//!        inner: the smallest key the child may hold (entry 0: anything lower too) and the
//!               child page (slot 0)
//! ```
//!
//! A table filled in key order costs about four bytes an entry (a one-byte shared length,
//! a one-byte suffix length, the last key byte, and the tag), against 13 plus the whole key
//! in version 1, whose entries were `key length u16 | key | class u8 | chunk u32 | index u32 |
//! slot u16`; version 1 pages are still read.
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
use std::ops::{Bound, Range, RangeBounds};
use std::sync::Arc;

use ember_device::BlockDevice;

use crate::allocator::BlockRef;
use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};
use crate::ikey::{self, Key, head_word as head};
use crate::schema::IndexKind;
use crate::space::SpaceManager;

/// Target size of an index page (see the module docs).
pub const PAGE: usize = 1024;
/// The longest key the index holds (two entries must fit the largest block).
pub const MAX_KEY: usize = 16 * 1024;
/// The most levels a tree may have (far more than any device can fill).
pub const MAX_HEIGHT: u8 = 32;
const HDR: usize = 32;

/// Where a row lives (for an inner entry: the child page, slot 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The block.
    pub block: BlockRef,
    /// The slot in it.
    pub slot: u16,
}

/// Decoded index pages by block (block addresses are not chosen by users: a fast hash).
pub type PageCache = HashMap<BlockRef, Arc<Node>, foldhash::fast::RandomState>;

/// An index page in RAM.
#[derive(Debug)]
pub struct Node {
    level: u8,
    keys: Vec<u8>,
    ends: Vec<u32>,
    /// Bytes every key of the node starts with (the common prefix of its first and last
    /// keys, which it shares with all between them).
    skip: usize,
    /// The shared prefix when it is at most [`PREFIX_INLINE`] bytes long (read with the node,
    /// not from the keys).
    prefix: [u8; PREFIX_INLINE],
    /// The keys' length when all have one, at most 8 bytes past the prefix: a key of that
    /// length with the prefix is then equal to a node key exactly when their heads are, and
    /// a search finds it without reading the keys.
    exact: Option<usize>,
    /// Each key's first 8 bytes past the shared `skip`, big-endian (zeros past a shorter
    /// key): where two heads differ they order as their keys do, so a search compares keys
    /// only where they tie. (Without the skip, keys such as zero-padded numbers or rowids in
    /// one leaf would share their first 8 bytes and every step would compare whole keys.)
    heads: Vec<u64>,
    vals: Vec<Loc>,
    /// Bytes of the encoded page (header and entries).
    size: usize,
}

impl Node {
    fn from_entries(level: u8, entries: &[(Vec<u8>, Loc)]) -> Node {
        let mut n = Node {
            level,
            keys: Vec::with_capacity(entries.iter().map(|e| e.0.len()).sum()),
            ends: Vec::with_capacity(entries.len()),
            skip: 0,
            prefix: [0; PREFIX_INLINE],
            exact: None,
            heads: Vec::new(),
            vals: Vec::with_capacity(entries.len()),
            size: HDR,
        };
        for e in entries {
            n.keys.extend_from_slice(&e.0);
            n.ends.push(n.keys.len() as u32);
            n.vals.push(e.1);
        }
        n.with_size()
    }
    /// The node with [`bytes`](Self::bytes) set (its entries coded as version 2), its shared
    /// prefix's length and its keys' heads.
    fn with_size(mut self) -> Node {
        let mut size = HDR;
        for i in 0..self.len() {
            let prev = i.checked_sub(1).map(|p| (self.key(p), self.vals[p]));
            size += entry_len(prev, self.key(i), self.vals[i]);
        }
        self.size = size;
        self.skip = match self.len().checked_sub(1) {
            Some(last) if last > 0 => common_prefix(self.key(0), self.key(last)),
            _ => 0,
        };
        self.heads = (0..self.len())
            .map(|i| head(self.key(i).get(self.skip..).unwrap_or_default()))
            .collect();
        if self.skip > 0 && self.skip <= PREFIX_INLINE {
            let first = self.key_range(0);
            if let Some(p) = self.keys.get(first.start..first.start + self.skip) {
                self.prefix[..self.skip].copy_from_slice(p);
            }
        }
        if self.len() > 0 {
            let len = self.key(0).len();
            self.exact = ((0..self.len()).all(|i| self.key(i).len() == len)
                && len - self.skip <= 8)
                .then_some(len);
        }
        self
    }
    /// Where key `i` lies in `keys`.
    fn key_range(&self, i: usize) -> Range<usize> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        start..self.ends[i] as usize
    }
    fn len(&self) -> usize {
        self.vals.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        &self.keys[self.key_range(i)]
    }
    fn search(&self, key: &[u8]) -> core::result::Result<usize, usize> {
        use core::cmp::Ordering;
        // A key outside the shared prefix lies before or after every key of the node.
        if self.skip > 0 {
            let prefix = match self.prefix.get(..self.skip) {
                Some(p) => p,
                None => self.key(0).get(..self.skip).unwrap_or_default(),
            };
            let mine = key.get(..self.skip).unwrap_or(key);
            match ikey::cmp_bytes(mine, prefix) {
                Ordering::Less => return Err(0),
                Ordering::Greater => return Err(self.len()),
                Ordering::Equal => {}
            }
        }
        let h = head(key.get(self.skip..).unwrap_or_default());
        let exact = self.exact == Some(key.len());
        let (mut lo, mut hi) = (0, self.len());
        if exact && hi >= NARROW_FROM {
            match self.narrow(h) {
                Ok(found) => return found,
                Err(range) => (lo, hi) = range,
            }
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            let order = match self.heads.get(mid) {
                Some(&x) if x != h => x.cmp(&h),
                Some(_) if exact => Ordering::Equal,
                _ => ikey::cmp_bytes(self.key(mid), key),
            };
            match order {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
    /// For a probe with head `h` in a node whose keys have one length (heads then order
    /// them exactly, and each is unique), the answer of [`search`](Self::search), or the
    /// range of positions the answer lies in: every head before it is below `h`, every one
    /// from its end on above. The place is guessed from the first and last heads as if the
    /// heads between were evenly spread — rowids, and other keys made of dense numbers, are
    /// where the guess lands — and the range widened from the guess by doubling steps. A
    /// binary search of a leaf of 250 rowids reads about 8 heads on 5 cache lines, most of
    /// them misses when the node was not read lately; the guess reads the first, the last
    /// and its own.
    fn narrow(
        &self,
        h: u64,
    ) -> core::result::Result<core::result::Result<usize, usize>, (usize, usize)> {
        let heads = &self.heads;
        let n = heads.len();
        let (Some(&first), Some(&last)) = (heads.first(), heads.last()) else {
            return Err((0, n));
        };
        if h <= first {
            return Ok(if h == first { Ok(0) } else { Err(0) });
        }
        if h >= last {
            return Ok(if h == last { Ok(n - 1) } else { Err(n) });
        }
        // first < h < last: the answer lies in [1, n - 1).
        let guess = (u128::from(h - first) * (n as u128 - 1) / u128::from(last - first)) as usize;
        let g = guess.clamp(1, n.saturating_sub(2).max(1));
        let at = |i: usize| heads.get(i).copied().unwrap_or(u64::MAX);
        let hg = at(g);
        if hg == h {
            return Ok(Ok(g));
        }
        if hg < h {
            // Heads up to `a` are below `h`.
            let (mut a, mut step) = (g, 1);
            loop {
                let b = a + step;
                if b >= n - 1 {
                    return Err((a + 1, n - 1));
                }
                if at(b) >= h {
                    return Err((a + 1, b + 1));
                }
                a = b;
                step *= 2;
            }
        }
        // Heads from `b` on are above `h`.
        let (mut b, mut step) = (g, 1);
        loop {
            if b <= step {
                return Err((1, b));
            }
            let a = b - step;
            if at(a) <= h {
                return Err((a, b));
            }
            b = a;
            step *= 2;
        }
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
        self.size
    }
}

/// Nodes of at least this many keys of one length are searched by [`Node::narrow`] first.
const NARROW_FROM: usize = 16;

/// The longest shared prefix of an index page's keys kept in its decoded node.
const PREFIX_INLINE: usize = 16;

/// How many bytes `a` and `b` start with alike.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// An index entry: key and location.
type Entry = (Vec<u8>, Loc);

/// How an entry's location is coded against the previous entry's (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    NextSlot = 0,
    SameBlock = 1,
    NextBlock = 2,
    NextBlockSlot = 3,
    SameChunk = 4,
    Full = 5,
}

const MODES: [Mode; 6] = [
    Mode::NextSlot,
    Mode::SameBlock,
    Mode::NextBlock,
    Mode::NextBlockSlot,
    Mode::SameChunk,
    Mode::Full,
];

/// The state entry 0 of a page is coded against.
const ORIGIN: Loc = Loc {
    block: BlockRef {
        class: 0,
        chunk: 0,
        index: 0,
    },
    slot: 0,
};

fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7F => 1,
        0x80..=0x3FFF => 2,
        0x4000..=0x1F_FFFF => 3,
        0x20_0000..=0xFFF_FFFF => 4,
        _ => 5,
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint of at most 5 bytes that fits a `u32`, at `*at`, within `buf[..end]`.
fn get_varint(buf: &[u8], at: &mut usize, end: usize) -> Option<u32> {
    let mut v = 0u64;
    for i in 0..5 {
        let b = *buf.get(*at).filter(|_| *at < end)?;
        *at += 1;
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(v).ok();
        }
    }
    None
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The cheapest mode that codes `l` after `p`.
fn mode(p: Loc, l: Loc) -> Mode {
    let (pb, b) = (p.block, l.block);
    let same_chunk = pb.chunk == b.chunk;
    let same_block = same_chunk && pb.class == b.class && pb.index == b.index;
    if same_block && p.slot.checked_add(1) == Some(l.slot) {
        Mode::NextSlot
    } else if same_block {
        Mode::SameBlock
    } else if same_chunk && pb.index.checked_add(1) == Some(b.index) {
        if l.slot == 0 {
            Mode::NextBlock
        } else {
            Mode::NextBlockSlot
        }
    } else if same_chunk {
        Mode::SameChunk
    } else {
        Mode::Full
    }
}

/// Bytes of the entry `key`, `l` coded after `prev` (none: the first entry of a page).
fn entry_len(prev: Option<(&[u8], Loc)>, key: &[u8], l: Loc) -> usize {
    let (pk, pl) = prev.unwrap_or((&[], ORIGIN));
    let shared = shared_prefix(pk, key);
    let suffix = key.len() - shared;
    let slot = varint_len(u32::from(l.slot));
    let loc = match mode(pl, l) {
        Mode::NextSlot | Mode::NextBlock => 0,
        Mode::SameBlock | Mode::NextBlockSlot => slot,
        Mode::SameChunk => varint_len(l.block.index) + slot,
        Mode::Full => varint_len(l.block.chunk) + varint_len(l.block.index) + slot,
    };
    varint_len(shared as u32) + varint_len(suffix as u32) + suffix + 1 + loc
}

fn put_entry(out: &mut Vec<u8>, prev: Option<&Entry>, e: &Entry) {
    let (pk, pl): (&[u8], Loc) = prev.map_or((&[], ORIGIN), |p| (&p.0, p.1));
    let shared = shared_prefix(pk, &e.0);
    put_varint(out, shared as u32);
    put_varint(out, (e.0.len() - shared) as u32);
    out.extend_from_slice(&e.0[shared..]);
    let l = e.1;
    let m = mode(pl, l);
    out.push(l.block.class | (m as u8) << 5);
    match m {
        Mode::NextSlot | Mode::NextBlock => {}
        Mode::SameBlock | Mode::NextBlockSlot => put_varint(out, u32::from(l.slot)),
        Mode::SameChunk => {
            put_varint(out, l.block.index);
            put_varint(out, u32::from(l.slot));
        }
        Mode::Full => {
            put_varint(out, l.block.chunk);
            put_varint(out, l.block.index);
            put_varint(out, u32::from(l.slot));
        }
    }
}

/// A sealed page of `size` bytes.
fn encode(owner: u64, level: u8, entries: &[Entry], size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(size);
    b.resize(HDR, 0);
    b[16..24].copy_from_slice(&owner.to_le_bytes());
    b[24] = level;
    b[28..30].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut prev = None;
    for e in entries {
        put_entry(&mut b, prev, e);
        prev = Some(e);
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
    let (len, version) = format::check_versioned(Kind::IndexPage, buf, offset)?;
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
    let bad = || corrupt("a malformed entry, or entries past the page's length");
    let mut at = HDR;
    if version == 1 {
        let mut entries: Vec<Entry> = Vec::with_capacity(count);
        for _ in 0..count {
            let e = decode_v1(buf, &mut at, len).ok_or_else(bad)?;
            if entries.last().is_some_and(|p| p.0 >= e.0) {
                return Err(corrupt("keys out of order"));
            }
            entries.push(e);
        }
        if at != len {
            return Err(corrupt("length does not match its entries"));
        }
        return Ok(Node::from_entries(level, &entries));
    }
    // Version 2 decodes straight into the node: no allocation an entry.
    let mut n = Node {
        level,
        keys: Vec::with_capacity(2 * len),
        ends: Vec::with_capacity(count),
        skip: 0,
        prefix: [0; PREFIX_INLINE],
        exact: None,
        heads: Vec::new(),
        vals: Vec::with_capacity(count),
        size: HDR,
    };
    for i in 0..count {
        decode_v2(buf, &mut at, len, &mut n).ok_or_else(bad)?;
        if i > 0 && n.key(i - 1) >= n.key(i) {
            return Err(corrupt("keys out of order"));
        }
    }
    if at != len {
        return Err(corrupt("length does not match its entries"));
    }
    // Decoded pages stay cached: hold no more than the keys (and their heads, 8 bytes an
    // entry, which `with_size` adds).
    n.keys.shrink_to_fit();
    Ok(n.with_size())
}

/// A version 1 entry: `key length u16 | key | class u8 | chunk u32 | index u32 | slot u16`.
fn decode_v1(buf: &[u8], at: &mut usize, len: usize) -> Option<Entry> {
    let n = buf
        .get(*at..*at + 2)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))?;
    let e = buf
        .get(*at + 2..*at + 2 + n + 11)
        .filter(|_| *at + 2 + n + 11 <= len)?;
    let l = Loc {
        block: BlockRef {
            class: e[n],
            chunk: u32_at(e, n + 1),
            index: u32_at(e, n + 5),
        },
        slot: u16::from_le_bytes([e[n + 9], e[n + 10]]),
    };
    *at += 2 + n + 11;
    Some((e[..n].to_vec(), l))
}

/// A version 2 entry (see the module docs), coded against the last entry of `n`, appended
/// to `n` (its size is left as it was); `None` if malformed (then `n` is left half changed).
fn decode_v2(buf: &[u8], at: &mut usize, len: usize, n: &mut Node) -> Option<()> {
    let (pk, pl) = match n.len().checked_sub(1) {
        Some(p) => (n.key_range(p), n.vals[p]),
        None => (0..0, ORIGIN),
    };
    let shared = get_varint(buf, at, len)? as usize;
    let suffix = get_varint(buf, at, len)? as usize;
    let rest = buf
        .get(*at..at.checked_add(suffix)?)
        .filter(|_| *at + suffix <= len)?;
    if shared > pk.len() {
        return None;
    }
    n.keys.extend_from_within(pk.start..pk.start + shared);
    n.keys.extend_from_slice(rest);
    n.ends.push(u32::try_from(n.keys.len()).ok()?);
    *at += suffix;
    let tag = *buf.get(*at).filter(|_| *at < len)?;
    *at += 1;
    let class = tag & 0x1F;
    let m = *MODES.get(usize::from(tag >> 5))?;
    let slot = |at: &mut usize| u16::try_from(get_varint(buf, at, len)?).ok();
    let pb = pl.block;
    let (chunk, index, slot) = match m {
        Mode::NextSlot => (pb.chunk, pb.index, pl.slot.checked_add(1)?),
        Mode::SameBlock => (pb.chunk, pb.index, slot(at)?),
        Mode::NextBlock => (pb.chunk, pb.index.checked_add(1)?, 0),
        Mode::NextBlockSlot => (pb.chunk, pb.index.checked_add(1)?, slot(at)?),
        Mode::SameChunk => {
            let index = get_varint(buf, at, len)?;
            (pb.chunk, index, slot(at)?)
        }
        Mode::Full => {
            let chunk = get_varint(buf, at, len)?;
            let index = get_varint(buf, at, len)?;
            (chunk, index, slot(at)?)
        }
    };
    n.vals.push(Loc {
        block: BlockRef {
            class,
            chunk,
            index,
        },
        slot,
    });
    Some(())
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
    pub overlay: Overlay,
}

/// A primary index's changes since the last checkpoint (`None` deletes the key), in key
/// order, with a filter of the keys it holds that a point lookup asks first.
///
/// After a bulk load the overlay holds about 262,144 entries (a commit checkpoints past
/// that), and a lookup of a key it does not hold walked the map's nodes down, a cache miss
/// at each (7% of a random point read through SQL at N = 1,000,000, most of whose keys are
/// in the tree). The filter answers "not here" with two bit tests for all but a few percent
/// of such keys.
///
/// Reads go through `Deref` to the map; changes only through [`insert`](Self::insert),
/// [`remove`](Self::remove) and [`take`](Self::take), which keep the filter: every key in
/// the map has its bits set (a removed key's stay set until the overlay is taken or the
/// filter is rebuilt from the map as it grows).
#[derive(Default, Clone)]
pub struct Overlay {
    map: BTreeMap<Key, Option<Loc>>,
    filter: Vec<u64>,
}

/// Filter bits per overlay entry at least (two bits set per key: at most about 5% of keys
/// not in the overlay pass the filter; 1-2% just after it grew).
const FILTER_BITS_PER_KEY: usize = 8;

impl core::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Overlay")
            .field("map", &self.map)
            .field("filter_words", &self.filter.len())
            .finish()
    }
}

impl core::ops::Deref for Overlay {
    type Target = BTreeMap<Key, Option<Loc>>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Overlay {
    /// The two filter bits of a key.
    fn bits(filter_bits: usize, key: &[u8]) -> [usize; 2] {
        use core::hash::BuildHasher;
        let h = foldhash::fast::FixedState::with_seed(0x0e71_a4b3).hash_one(key);
        let mask = filter_bits - 1;
        [h as usize & mask, (h >> 32) as usize & mask]
    }

    fn set_bits(filter: &mut [u64], key: &[u8]) {
        for b in Self::bits(filter.len() * 64, key) {
            filter[b / 64] |= 1 << (b % 64);
        }
    }

    /// Whether the filter lets `key` through: always if the map holds it.
    fn may_hold(&self, key: &[u8]) -> bool {
        !self.filter.is_empty()
            && Self::bits(self.filter.len() * 64, key)
                .iter()
                .all(|&b| self.filter[b / 64] & (1 << (b % 64)) != 0)
    }

    /// The entry for `key`, if the overlay has one: `Some(None)` if it deletes the key.
    pub fn lookup(&self, key: &[u8]) -> Option<&Option<Loc>> {
        if !self.may_hold(key) {
            return None;
        }
        ikey::get(&self.map, key)
    }

    /// Sets `key`'s entry; the entry before, if any.
    pub fn insert(&mut self, key: Key, v: Option<Loc>) -> Option<Option<Loc>> {
        let want = (self.map.len() + 1) * FILTER_BITS_PER_KEY;
        if self.filter.len() * 64 < want {
            // Grown to twice what is needed now, and filled again from the map.
            let words = (2 * want).next_power_of_two().max(64) / 64;
            self.filter = vec![0; words];
            for k in self.map.keys() {
                Self::set_bits(&mut self.filter, k.as_slice());
            }
        }
        Self::set_bits(&mut self.filter, key.as_slice());
        self.map.insert(key, v)
    }

    /// Removes `key`'s entry; the entry before, if any.
    pub fn remove(&mut self, key: &[u8]) -> Option<Option<Loc>> {
        self.map.remove(key)
    }

    /// Takes every entry out, leaving the overlay empty.
    pub fn take(&mut self) -> BTreeMap<Key, Option<Loc>> {
        self.filter = Vec::new();
        core::mem::take(&mut self.map)
    }
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
            overlay: Overlay::default(),
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

/// Index entries handed out a chunk at a time (see [`Pages::next_chunk`]): the keys back to
/// back in one buffer and each entry's key range and location, both reused from chunk to
/// chunk, so a scan allocates per chunk at most, never per row.
#[derive(Debug, Default)]
pub struct Chunk {
    keys: Vec<u8>,
    ents: Vec<(Range<usize>, Loc)>,
}

impl Chunk {
    /// Empties the chunk, keeping its buffers.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.ents.clear();
    }

    fn push(&mut self, key: &[u8], loc: Loc) {
        let start = self.keys.len();
        self.keys.extend_from_slice(key);
        self.ents.push((start..self.keys.len(), loc));
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    /// Whether the chunk holds no entry.
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// Entry `i`: its key and location (`i` below [`len`](Self::len)).
    pub fn get(&self, i: usize) -> (&[u8], Loc) {
        let (r, l) = &self.ents[i];
        (&self.keys[r.clone()], *l)
    }

    /// Entry `i`'s location.
    pub fn loc(&self, i: usize) -> Loc {
        self.ents[i].1
    }

    /// The locations, in order.
    pub fn locs(&self) -> impl Iterator<Item = Loc> + '_ {
        self.ents.iter().map(|e| e.1)
    }

    /// Appends the entries of `other`.
    pub fn append(&mut self, other: &Chunk) {
        let base = self.keys.len();
        self.keys.extend_from_slice(&other.keys);
        self.ents.extend(
            other
                .ents
                .iter()
                .map(|(r, l)| (r.start + base..r.end + base, *l)),
        );
    }

    /// The last entry's key.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.ents.last().map(|(r, _)| &self.keys[r.clone()])
    }

    /// Orders the entries by `f` of their locations (stable).
    pub fn sort_by_loc<K: Ord>(&mut self, mut f: impl FnMut(Loc) -> K) {
        self.ents.sort_by_key(|e| f(e.1));
    }

    /// Reverses the entries' order.
    pub fn reverse(&mut self) {
        self.ents.reverse();
    }

    /// Keeps the first `n` entries.
    pub fn truncate(&mut self, n: usize) {
        self.ents.truncate(n);
    }
}

/// A range of a primary index read a chunk at a time, overlay merged, in key order from
/// either end (see [`Pages::next_chunk`]).
///
/// It holds the path from the root to the leaf it reads (the pages themselves, so no
/// borrow of [`Pages`] outlives a chunk) and the bounds still to hand out: after a chunk
/// the near bound becomes the chunk's last key, excluded. Tree entries up to that key have
/// been consumed by the path and overlay entries are looked up afresh from the bound, so
/// the index must not change while a cursor is in use (a scan holds the database).
#[derive(Debug)]
pub struct Cursor {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    desc: bool,
    /// Pages from the root down, each with the child being read (inner pages) or, in a
    /// leaf, the next entry (ascending) or one past it (descending). Empty once the tree's
    /// part of the range is used up, or before the first chunk.
    path: Vec<(Arc<Node>, usize)>,
    started: bool,
    done: bool,
}

impl Cursor {
    /// The entries within the bounds, from the low end (or with `desc` the high end).
    pub fn new(lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, desc: bool) -> Self {
        let done = empty_range(bound_ref(&lo), bound_ref(&hi));
        Cursor {
            lo,
            hi,
            desc,
            path: Vec::new(),
            started: false,
            done,
        }
    }

    /// Whether every entry has been handed out.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next tree entry (the leaf at the end of the path), if the leaf has one left.
    fn head(&self) -> Option<(&[u8], Loc)> {
        let (n, i) = self.path.last()?;
        let i = if self.desc { i.checked_sub(1)? } else { *i };
        (i < n.len()).then(|| (n.key(i), n.vals[i]))
    }

    /// Ascending, the entries from the head to the end of its leaf when all of them lie
    /// below `before` (`None`: no bound) and within the cursor's high bound: how many (0
    /// when not all of them do, descending, or without a head). A merge hands them out
    /// without comparing each with the overlay's next key and the bound.
    fn leaf_run(&self, before: Option<&[u8]>) -> usize {
        if self.desc {
            return 0;
        }
        let Some((n, i)) = self.path.last() else {
            return 0;
        };
        let Some(end) = n.len().checked_sub(1).filter(|&e| e >= *i) else {
            return 0;
        };
        let last = n.key(end);
        let within = match bound_ref(&self.hi) {
            Bound::Included(h) => last <= h,
            Bound::Excluded(h) => last < h,
            Bound::Unbounded => true,
        };
        if within && before.is_none_or(|b| last < b) {
            n.len() - i
        } else {
            0
        }
    }

    /// Steps past the tree entry [`head`](Self::head) gave.
    fn step(&mut self) {
        if let Some((_, i)) = self.path.last_mut() {
            if self.desc {
                *i = i.saturating_sub(1);
            } else {
                *i += 1;
            }
        }
    }
}

pub(crate) fn bound_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Whether no key lies within the bounds (a `BTreeMap` range panics on such bounds).
pub(crate) fn empty_range(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

/// Entries a chunk holds at most.
pub const CHUNK: usize = 1024;
/// Key bytes past which a chunk ends early.
const CHUNK_KEY_BYTES: usize = 256 * 1024;

/// Access to a table's index pages: the space manager and the decoded-page cache.
pub struct Pages<'a, D: BlockDevice> {
    sm: &'a mut SpaceManager<D>,
    cache: &'a mut PageCache,
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
    pub fn new(sm: &'a mut SpaceManager<D>, cache: &'a mut PageCache, owner: u64) -> Self {
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
        if let Some(v) = ix.overlay.lookup(key) {
            return Ok(*v);
        }
        let Some(mut page) = ix.root else {
            return Ok(None);
        };
        let mut level = Self::root_level(ix)?;
        loop {
            // A page in the cache is searched where it lies: no reference taken (an atomic
            // increment and decrement of the page's count per level).
            let next = match self.cache.get(&page).filter(|n| n.level == level) {
                Some(n) => Self::step(n, key, level),
                None => Self::step(&*self.load(page, level)?, key, level),
            };
            match next {
                Ok(loc) => return Ok(loc),
                Err(child) => page = child,
            }
            level -= 1;
        }
    }

    /// One level of a lookup of `key` in node `n` at `level`: at a leaf, the key's
    /// location (`Ok`); above, the child to go down to (`Err`).
    fn step(n: &Node, key: &[u8], level: u8) -> std::result::Result<Option<Loc>, BlockRef> {
        if level == 0 {
            return Ok(n.search(key).ok().map(|i| n.vals[i]));
        }
        Err(n.vals[n.route(key)].block)
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
            .map(|(k, _)| k.to_vec());
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
                    out.push((ok.to_vec(), v));
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
                out.push((ok.to_vec(), v));
            }
        }
        Ok(out)
    }

    /// Checks that `n` (at `page`), the child the deepest page of `path` is reading, holds
    /// only keys within the range its parent gives it.
    fn check_child(&self, page: BlockRef, n: &Node, path: &[(Arc<Node>, usize)]) -> Result<()> {
        let at = || self.sm.allocator().extent(page).0;
        let (mut min, mut max) = (None, None);
        for (p, i) in path.iter().rev() {
            if min.is_none() && *i > 0 {
                min = Some(p.key(*i));
            }
            if max.is_none() && i + 1 < p.len() {
                max = Some(p.key(i + 1));
            }
            if min.is_some() && max.is_some() {
                break;
            }
        }
        let Some(last) = n.len().checked_sub(1) else {
            return Err(corrupt(at(), "an empty page"));
        };
        // Keys ascend within a page (decoding checks it): its ends are enough.
        let first = usize::from(n.level > 0);
        if first <= last
            && (min.is_some_and(|m| n.key(first) < m) || max.is_some_and(|m| n.key(last) >= m))
        {
            return Err(corrupt(at(), "a key outside its parent's range"));
        }
        Ok(())
    }

    /// Descends from the child the deepest page of `cur.path` is reading to a leaf: to the
    /// child holding `target` (none: the first child, descending the last), and in the leaf
    /// to the first entry of the range.
    fn descend(&mut self, cur: &mut Cursor, mut page: BlockRef, mut level: u8) -> Result<()> {
        let target = if cur.desc {
            bound_ref(&cur.hi)
        } else {
            bound_ref(&cur.lo)
        };
        loop {
            let n = self.load(page, level)?;
            self.check_child(page, &n, &cur.path)?;
            let len = n.len();
            if level == 0 {
                let at = match (target, cur.desc) {
                    (Bound::Unbounded, false) => 0,
                    (Bound::Unbounded, true) => len,
                    (Bound::Included(k), false) => n.search(k).unwrap_or_else(|i| i),
                    (Bound::Excluded(k), false) => n.search(k).map_or_else(|i| i, |i| i + 1),
                    (Bound::Included(k), true) => n.search(k).map_or_else(|i| i, |i| i + 1),
                    (Bound::Excluded(k), true) => n.search(k).unwrap_or_else(|i| i),
                };
                cur.path.push((n, at));
                return Ok(());
            }
            let i = match target {
                Bound::Unbounded if cur.desc => len - 1,
                Bound::Unbounded => 0,
                Bound::Included(k) | Bound::Excluded(k) => n.route(k),
            };
            page = n.vals[i].block;
            level -= 1;
            cur.path.push((n, i));
        }
    }

    /// Makes the cursor's path name a leaf with an entry left, moving on to the next leaf
    /// (the previous, descending) as needed; `false` when the tree has no entry left within
    /// the far bound.
    fn tree_head(&mut self, ix: &PIndex, cur: &mut Cursor) -> Result<bool> {
        if !cur.started {
            cur.started = true;
            if let Some(root) = ix.root {
                let level = Self::root_level(ix)?;
                self.descend(cur, root, level)?;
            }
        }
        loop {
            if let Some((k, _)) = cur.head() {
                let within = if cur.desc {
                    match bound_ref(&cur.lo) {
                        Bound::Included(l) => k >= l,
                        Bound::Excluded(l) => k > l,
                        Bound::Unbounded => true,
                    }
                } else {
                    match bound_ref(&cur.hi) {
                        Bound::Included(h) => k <= h,
                        Bound::Excluded(h) => k < h,
                        Bound::Unbounded => true,
                    }
                };
                if !within {
                    cur.path.clear();
                }
                return Ok(within);
            }
            // The leaf is used up: the next child of the nearest page that has one.
            cur.path.pop();
            let next = loop {
                let Some((n, i)) = cur.path.last_mut() else {
                    return Ok(false);
                };
                let j = if cur.desc {
                    i.checked_sub(1)
                } else {
                    Some(*i + 1).filter(|j| *j < n.len())
                };
                match j {
                    Some(j) => {
                        *i = j;
                        break (n.vals[j].block, n.level - 1);
                    }
                    None => {
                        cur.path.pop();
                    }
                }
            };
            // From here on the whole subtree is within the near bound.
            let saved = if cur.desc {
                std::mem::replace(&mut cur.hi, Bound::Unbounded)
            } else {
                std::mem::replace(&mut cur.lo, Bound::Unbounded)
            };
            let r = self.descend(cur, next.0, next.1);
            if cur.desc {
                cur.hi = saved;
            } else {
                cur.lo = saved;
            }
            r?;
        }
    }

    /// Fills `out` with the next entries of the cursor's range, overlay included (an
    /// overlay entry overrides, adds or with `None` deletes the tree's entry for its key):
    /// at most `max` (at least one), fewer at the end of the range or when their keys pass
    /// a bound of bytes. An empty chunk means the range is used up.
    pub fn next_chunk(
        &mut self,
        ix: &PIndex,
        cur: &mut Cursor,
        max: usize,
        out: &mut Chunk,
    ) -> Result<()> {
        out.clear();
        if cur.done {
            return Ok(());
        }
        let over = ix
            .overlay
            .range::<[u8], _>((bound_ref(&cur.lo), bound_ref(&cur.hi)));
        if cur.desc {
            self.merge(ix, cur, over.rev(), max.max(1), out)?;
        } else {
            self.merge(ix, cur, over, max.max(1), out)?;
        }
        if cur.done {
            return Ok(());
        }
        // The chunk is full: the rest of the range lies past its last key.
        let last = out.last_key().map(|k| Bound::Excluded(k.to_vec()));
        if let Some(b) = last {
            if cur.desc {
                cur.hi = b;
            } else {
                cur.lo = b;
            }
        }
        cur.done = empty_range(bound_ref(&cur.lo), bound_ref(&cur.hi));
        Ok(())
    }

    /// The merge of [`next_chunk`](Self::next_chunk): tree entries from the cursor's path
    /// and the overlay entries `over` within the cursor's bounds, in the cursor's order.
    fn merge<'o>(
        &mut self,
        ix: &PIndex,
        cur: &mut Cursor,
        over: impl Iterator<Item = (&'o Key, &'o Option<Loc>)>,
        max: usize,
        out: &mut Chunk,
    ) -> Result<()> {
        let mut over = over.peekable();
        while out.len() < max && out.keys.len() < CHUNK_KEY_BYTES {
            let tree = self.tree_head(ix, cur)?;
            // The rest of the leaf before the overlay's next key: no comparison per entry.
            let run = if tree {
                cur.leaf_run(over.peek().map(|(k, _)| k.as_slice()))
            } else {
                0
            };
            if run > 1 {
                if let Some((n, i)) = cur.path.last_mut() {
                    let end = *i + run;
                    while *i < end && out.len() < max && out.keys.len() < CHUNK_KEY_BYTES {
                        out.push(n.key(*i), n.vals[*i]);
                        *i += 1;
                    }
                }
                continue;
            }
            let t = if tree { cur.head() } else { None };
            let (ok, ov) = match (t, over.peek()) {
                (None, None) => {
                    cur.done = true;
                    return Ok(());
                }
                (Some((tk, tl)), o) => {
                    let first = o.map(|(ok, _)| {
                        if cur.desc {
                            ok.as_slice().cmp(tk).reverse()
                        } else {
                            ok.as_slice().cmp(tk)
                        }
                    });
                    match first {
                        Some(core::cmp::Ordering::Less) => {}
                        Some(core::cmp::Ordering::Equal) => {
                            // The overlay's entry replaces the tree's.
                            cur.step();
                        }
                        _ => {
                            out.push(tk, tl);
                            cur.step();
                            continue;
                        }
                    }
                    match over.next() {
                        Some(e) => e,
                        None => continue,
                    }
                }
                (None, Some(_)) => match over.next() {
                    Some(e) => e,
                    None => continue,
                },
            };
            if let Some(l) = ov {
                out.push(ok, *l);
            }
        }
        Ok(())
    }

    /// Merges the overlay into the tree, copy-on-write: writes the new pages (not synced)
    /// and returns them with the old pages they replace; `ix` then names the new root and
    /// its overlay is empty.
    pub fn flush(&mut self, ix: &mut PIndex) -> Result<Flushed> {
        let mut st = Flushed::default();
        if ix.overlay.is_empty() {
            return Ok(st);
        }
        let changes: Vec<(Vec<u8>, Option<Loc>)> = ix
            .overlay
            .take()
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect();
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
        // An entry's size depends on the one before it in its page: `first[i]` is entry i
        // opening a page, `after[i]` the sum of entries 1..i each coded after the one before.
        let first: Vec<usize> = entries.iter().map(|e| entry_len(None, &e.0, e.1)).collect();
        let mut after = Vec::with_capacity(entries.len() + 1);
        after.push(0);
        for i in 0..entries.len() {
            let c = if i == 0 {
                0
            } else {
                let (p, e) = (&entries[i - 1], &entries[i]);
                entry_len(Some((&p.0, p.1)), &e.0, e.1)
            };
            after.push(after[i] + c);
        }
        // Bytes of a page holding entries s..e.
        let page_bytes = |s: usize, e: usize| HDR + first[s] + after[e] - after[s + 1];
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        let mut start = 0;
        while start < entries.len() {
            let mut end = start + 1;
            while end < entries.len() && (end - start < 2 || page_bytes(start, end + 1) <= PAGE) {
                end += 1;
            }
            groups.push((start, end, page_bytes(start, end)));
            start = end;
        }
        // Balance a short last page with the one before it.
        if groups.len() >= 2 {
            let (s1, _, b1) = groups[groups.len() - 2];
            let (_, e2, b2) = groups[groups.len() - 1];
            if b2 < PAGE / 2 && e2 - s1 >= 4 {
                let half = (b1 + b2) / 2;
                let mut cut = s1 + 2;
                while cut < e2 - 2 && page_bytes(s1, cut + 1) <= half {
                    cut += 1;
                }
                let n = groups.len();
                groups[n - 2] = (s1, cut, page_bytes(s1, cut));
                groups[n - 1] = (cut, e2, page_bytes(cut, e2));
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

    /// Every key the overlay holds is found, removed and taken keys are not, and the filter
    /// turns away most keys it never held (so lookups of those skip the map).
    #[test]
    fn the_overlay_filter_finds_its_keys_and_turns_away_most_others() {
        let key = |i: u64| Key::new(&i.to_be_bytes());
        let mut o = Overlay::default();
        assert_eq!(o.lookup(&5u64.to_be_bytes()), None);
        for i in 0..50_000u64 {
            let v = (i % 7 != 0).then(|| loc(i as u32));
            assert_eq!(o.insert(key(i), v), None);
        }
        for i in 0..50_000u64 {
            let want = (i % 7 != 0).then(|| loc(i as u32));
            assert_eq!(o.lookup(&i.to_be_bytes()), Some(&want), "key {i}");
        }
        assert_eq!(o.remove(&3u64.to_be_bytes()), Some(Some(loc(3))));
        assert_eq!(o.lookup(&3u64.to_be_bytes()), None);
        let passed = (1_000_000..1_100_000u64)
            .filter(|i| o.may_hold(&i.to_be_bytes()))
            .count();
        assert!(
            passed < 10_000,
            "{passed} of 100,000 absent keys passed the filter"
        );
        assert_eq!(o.take().len(), 50_000 - 1);
        assert!(o.is_empty());
        assert_eq!(o.lookup(&1u64.to_be_bytes()), None);
    }

    proptest::proptest! {
        /// Keys whose heads differ order as their heads; a node searched by heads finds
        /// what a search by whole keys finds (short keys, zero bytes and prefixes of one
        /// another included), also when its keys share a prefix the heads skip.
        #[test]
        fn heads_order_as_their_keys(
            a in proptest::collection::vec(0u8..3, 0..11),
            b in proptest::collection::vec(0u8..3, 0..11),
            mut keys in proptest::collection::btree_set(
                proptest::collection::vec(0u8..3, 0..11), 1..40),
            prefix in proptest::collection::vec(0u8..3, 0..20),
            width in 0usize..11,
        ) {
            if head(&a) != head(&b) {
                proptest::prop_assert_eq!(head(&a).cmp(&head(&b)), a.cmp(&b));
            }
            keys.insert(a.clone());
            let entries: Vec<Entry> = keys.iter().map(|k| (k.clone(), loc(1))).collect();
            let n = Node::from_entries(0, &entries);
            for probe in [&a, &b] {
                proptest::prop_assert_eq!(
                    n.search(probe),
                    entries.binary_search_by(|e| e.0.as_slice().cmp(probe))
                );
            }
            // The same keys behind a prefix they all share (the node then compares heads
            // past it), probed with and without it.
            let shared: Vec<Entry> = keys
                .iter()
                .map(|k| ([prefix.as_slice(), k].concat(), loc(1)))
                .collect();
            let n = Node::from_entries(0, &shared);
            let probes = [
                a.clone(),
                b.clone(),
                [prefix.as_slice(), &a].concat(),
                [prefix.as_slice(), &b].concat(),
            ];
            for probe in &probes {
                proptest::prop_assert_eq!(
                    n.search(probe),
                    shared.binary_search_by(|e| e.0.as_slice().cmp(probe))
                );
            }
            // Keys of one length (cut or zero-padded to `width`), so that a search may find
            // a key by its head alone.
            let fit = |k: &[u8]| {
                let mut k = [prefix.as_slice(), k].concat();
                k.resize(prefix.len() + width, 0);
                k
            };
            let fixed: std::collections::BTreeSet<Vec<u8>> = keys.iter().map(|k| fit(k)).collect();
            let fixed: Vec<Entry> = fixed.into_iter().map(|k| (k, loc(1))).collect();
            let n = Node::from_entries(0, &fixed);
            for probe in probes.iter().chain([&fit(&a), &fit(&b)]) {
                proptest::prop_assert_eq!(
                    n.search(probe),
                    fixed.binary_search_by(|e| e.0.as_slice().cmp(probe))
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// A node of keys of one length — rowids, dense or spread, with a gap or a cluster
        /// here and there — finds every key and the place of every other one as a binary
        /// search of its keys does (`Node::narrow` guesses first).
        #[test]
        fn a_guessed_search_agrees_with_a_binary_search(
            base in proptest::prelude::any::<u64>(),
            gaps in proptest::collection::vec(
                proptest::prop_oneof![1u64..2, 1u64..4, 1u64..1000, 1u64..u64::MAX / 512],
                1..600,
            ),
            probes in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..20),
            marker in 0u8..3,
        ) {
            let mut v = base;
            let mut nums = vec![v];
            for g in &gaps {
                match v.checked_add(*g) {
                    Some(x) => v = x,
                    None => break,
                }
                nums.push(v);
            }
            let key = |x: u64| {
                let mut k = vec![marker];
                k.extend_from_slice(&x.to_be_bytes());
                k
            };
            let entries: Vec<Entry> = nums.iter().map(|&x| (key(x), loc(1))).collect();
            let n = Node::from_entries(0, &entries);
            let near = nums
                .iter()
                .step_by(7)
                .flat_map(|&x| [x.wrapping_sub(1), x, x.wrapping_add(1)]);
            let all: Vec<u64> = near
                .chain(probes)
                .chain([0, u64::MAX, base])
                .collect();
            for x in all {
                let k = key(x);
                proptest::prop_assert_eq!(
                    n.search(&k),
                    entries.binary_search_by(|e| e.0.as_slice().cmp(&k))
                );
            }
        }
    }

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

    /// Locations that exercise every mode: runs of slots in a block, runs of blocks, jumps
    /// within a chunk and across chunks and classes.
    fn mixed(n: u32) -> Vec<Entry> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut l = ORIGIN;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                l = match x % 7 {
                    0 | 1 => Loc {
                        slot: l.slot.wrapping_add(1),
                        ..l
                    },
                    2 => Loc {
                        slot: (x >> 8) as u16 % 300,
                        ..l
                    },
                    3 => Loc {
                        block: BlockRef {
                            index: l.block.index.wrapping_add(1),
                            ..l.block
                        },
                        slot: if x & 256 == 0 { 0 } else { 9 },
                    },
                    4 => Loc {
                        block: BlockRef {
                            index: (x >> 16) as u32 % 3840,
                            ..l.block
                        },
                        slot: 0,
                    },
                    5 => Loc {
                        block: BlockRef {
                            class: (x >> 40) as u8 % 32,
                            chunk: (x >> 20) as u32,
                            index: (x >> 50) as u32,
                        },
                        slot: u16::MAX,
                    },
                    _ => loc(i),
                };
                let key = if x & 1 == 0 {
                    format!("key{i:06}").into_bytes()
                } else {
                    format!("key{i:06}{}", "x".repeat((x >> 3) as usize % 200)).into_bytes()
                };
                (key, l)
            })
            .collect()
    }

    /// A version 1 page, as earlier builds wrote it.
    fn encode_v1(owner: u64, level: u8, entries: &[Entry]) -> Vec<u8> {
        let mut b = vec![0u8; HDR];
        b[16..24].copy_from_slice(&owner.to_le_bytes());
        b[24] = level;
        b[28..30].copy_from_slice(&(entries.len() as u16).to_le_bytes());
        for (k, l) in entries {
            b.extend_from_slice(&(k.len() as u16).to_le_bytes());
            b.extend_from_slice(k);
            b.push(l.block.class);
            b.extend_from_slice(&l.block.chunk.to_le_bytes());
            b.extend_from_slice(&l.block.index.to_le_bytes());
            b.extend_from_slice(&l.slot.to_le_bytes());
        }
        let len = b.len();
        b.resize(len.max(PAGE), 0);
        format::seal_as(Kind::IndexPage, 1, &mut b, len);
        b
    }

    #[test]
    fn every_location_mode_round_trips_and_sizes_are_exact() {
        let entries = mixed(3000);
        let mut seen = [false; 6];
        for w in entries.windows(2) {
            seen[mode(w[0].1, w[1].1) as usize] = true;
        }
        assert_eq!(seen, [true; 6], "every mode is exercised");
        for chunk in entries.chunks(37) {
            let page = encode(3, 1, chunk, PAGE);
            let n = decode(&page, 0, 3, 1).unwrap();
            assert_eq!(n.entries(), chunk);
            assert_eq!(Some(n.bytes()), format::sealed_len(&page), "size is exact");
        }
    }

    #[test]
    fn keys_in_order_cost_a_few_bytes_an_entry() {
        // Integer keys 1..=500 and one 8 KiB row per block, as a table filled in key order.
        let entries: Vec<Entry> = (1..=500i64)
            .map(|k| {
                let mut key = Vec::new();
                crate::row::encode_key(&[crate::row::Value::Integer(k)], &mut key);
                let b = BlockRef {
                    class: 4,
                    chunk: k as u32 / 240,
                    index: k as u32 % 240,
                };
                (key, Loc { block: b, slot: 0 })
            })
            .collect();
        let n = Node::from_entries(0, &entries);
        let per_entry = (n.bytes() - HDR) as f64 / entries.len() as f64;
        assert!(per_entry <= 4.5, "{per_entry} bytes an entry");
        assert_eq!(
            decode(&encode(1, 0, &entries, 4096), 0, 1, 0)
                .unwrap()
                .entries(),
            entries
        );
    }

    #[test]
    fn version_1_pages_are_still_read() {
        let entries: Vec<Entry> = mixed(40);
        let page = encode_v1(9, 0, &entries);
        assert_eq!(decode(&page, 4096, 9, 0).unwrap().entries(), entries);
        let mut bad = page.clone();
        bad[40] ^= 4;
        assert!(decode(&bad, 4096, 9, 0).is_err());
    }

    #[test]
    fn malformed_entries_under_a_valid_checksum_are_clean_errors() {
        let entries: Vec<Entry> = mixed(20);
        let good = encode(9, 0, &entries, PAGE);
        let len = format::sealed_len(&good).unwrap();
        // Every byte of the entries replaced by every value, the page resealed: decoding
        // either fails with an error naming the page or gives well-formed entries.
        for at in HDR..len {
            for v in [0u8, 1, 0x7F, 0x80, 0xBF, 0xC5, 0xE0, 0xFF] {
                let mut bad = good.clone();
                bad[at] = v;
                format::seal(Kind::IndexPage, &mut bad, len);
                match decode(&bad, 4096, 9, 0) {
                    Ok(n) => assert!(n.entries().windows(2).all(|w| w[0].0 < w[1].0)),
                    Err(e) => assert!(e.to_string().contains("index page"), "{e}"),
                }
            }
        }
        // A shared prefix longer than the previous key, and a mode past the last.
        let mut bad = good.clone();
        bad[HDR] = 5;
        format::seal(Kind::IndexPage, &mut bad, len);
        assert!(decode(&bad, 4096, 9, 0).is_err());
        let one = encode(9, 0, &entries[..1], PAGE);
        let l1 = format::sealed_len(&one).unwrap();
        let mut bad = one.clone();
        bad[l1
            - 1
            - varint_len(u32::from(entries[0].1.slot))
            - varint_len(entries[0].1.block.index)
            - varint_len(entries[0].1.block.chunk)] |= 0xE0;
        format::seal(Kind::IndexPage, &mut bad, l1);
        assert!(decode(&bad, 4096, 9, 0).is_err());
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
        let len = format::sealed_len(&page).unwrap();
        assert_eq!(len, n.bytes());
        for bit in 0..len * 8 {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad, 4096, 9, 0).is_err(), "bit {bit}");
        }
    }

    mod stream {
        use super::*;
        use crate::superblock::FormatOptions;
        use ember_device::MemBlock;
        use proptest::prelude::*;

        /// Keys ordered by `n`, long enough (34 bytes, little shared) that a thousand of
        /// them make a tree of three levels.
        fn key(n: u16) -> Vec<u8> {
            let mut k = n.to_be_bytes().to_vec();
            let mut x = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for _ in 0..32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                k.push(x as u8);
            }
            k
        }

        /// A bound on key `n`, or (`short`) on its first two bytes, which sort just before
        /// it and name no key.
        fn bound(kind: u8, n: u16, short: bool) -> Bound<Vec<u8>> {
            let k = if short {
                n.to_be_bytes().to_vec()
            } else {
                key(n)
            };
            match kind {
                0 => Bound::Unbounded,
                1 => Bound::Included(k),
                _ => Bound::Excluded(k),
            }
        }

        fn bounds() -> impl Strategy<Value = Bound<Vec<u8>>> {
            (0u8..3, 0u16..3100, any::<bool>()).prop_map(|(k, n, s)| bound(k, n, s))
        }

        /// Changes: key, and a location to set or (`None`) a deletion.
        fn changes(n: usize) -> impl Strategy<Value = Vec<(u16, Option<u32>)>> {
            proptest::collection::vec(
                (
                    0u16..3000,
                    prop_oneof![3 => any::<u32>().prop_map(Some), 1 => Just(None)],
                ),
                0..n,
            )
        }

        type Query = (Bound<Vec<u8>>, Bound<Vec<u8>>, bool, usize, Option<usize>);

        fn apply(
            ix: &mut PIndex,
            model: &mut BTreeMap<Vec<u8>, Loc>,
            changes: &[(u16, Option<u32>)],
        ) {
            for (n, v) in changes {
                let l = v.map(loc);
                ix.overlay.insert(key(*n).into(), l);
                match l {
                    Some(l) => model.insert(key(*n), l),
                    None => model.remove(&key(*n)),
                };
            }
        }

        /// The range through [`Pages::next_chunk`], chunks of at most `max` entries and
        /// `limit` entries in all, as a scan reads it.
        fn stream(
            p: &mut Pages<'_, impl BlockDevice>,
            ix: &PIndex,
            q: &Query,
            chunks: &mut usize,
        ) -> Vec<Entry> {
            let (lo, hi, desc, max, limit) = q.clone();
            let mut cur = Cursor::new(lo, hi, desc);
            let mut left = limit.unwrap_or(usize::MAX);
            let mut out = Vec::new();
            let mut c = Chunk::default();
            while left > 0 {
                p.next_chunk(ix, &mut cur, left.min(max), &mut c).unwrap();
                if c.is_empty() {
                    assert!(cur.is_done());
                    break;
                }
                assert!(c.len() <= left.min(max));
                *chunks += 1;
                left -= c.len();
                out.extend((0..c.len()).map(|i| (c.get(i).0.to_vec(), c.get(i).1)));
            }
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            /// Streaming ranges agree with a model after changes checkpointed into the tree
            /// and changes only in the overlay (deleting tree keys, adding keys between
            /// them, replacing their locations), for every kind of bound, both directions,
            /// small chunks and limits; and with the materialised `range`.
            #[test]
            fn streaming_ranges_match_a_model(
                before in changes(1500),
                mid in changes(300),
                after in changes(400),
                queries in proptest::collection::vec(
                    (bounds(), bounds(), any::<bool>(), 1usize..9,
                     prop_oneof![2 => Just(None), 1 => (0usize..40).prop_map(Some)]),
                    1..10,
                ),
            ) {
                let mut sm =
                    SpaceManager::format(MemBlock::new(32 << 20), FormatOptions::default())
                        .unwrap();
                let mut cache = PageCache::default();
                let mut ix = PIndex::new(IndexKind::Tree);
                let mut model = BTreeMap::new();
                apply(&mut ix, &mut model, &before);
                Pages::new(&mut sm, &mut cache, 7).flush(&mut ix).unwrap();
                apply(&mut ix, &mut model, &mid);
                Pages::new(&mut sm, &mut cache, 7).flush(&mut ix).unwrap();
                apply(&mut ix, &mut model, &after);
                let mut p = Pages::new(&mut sm, &mut cache, 7);
                let mut chunks = 0;
                for q in &queries {
                    let (lo, hi) = (bound_ref(&q.0), bound_ref(&q.1));
                    let mut want: Vec<Entry> = model
                        .iter()
                        .filter(|(k, _)| (lo, hi).contains(k.as_slice()))
                        .map(|(k, l)| (k.clone(), *l))
                        .collect();
                    if !empty_range(lo, hi) {
                        prop_assert_eq!(&p.range(&ix, lo, hi).unwrap(), &want);
                    }
                    if q.2 {
                        want.reverse();
                    }
                    if let Some(n) = q.4 {
                        want.truncate(n);
                    }
                    let got = stream(&mut p, &ix, q, &mut chunks);
                    prop_assert_eq!(got, want, "height {}", ix.height);
                }
            }
        }

        /// A tree of three levels holding keys 0 to 2,999 (location `n` for key `n`),
        /// written out, its overlay empty; and the model of it.
        fn three_levels(
            sm: &mut SpaceManager<MemBlock<Vec<u8>>>,
            cache: &mut PageCache,
        ) -> (PIndex, BTreeMap<Vec<u8>, Loc>) {
            let mut ix = PIndex::new(IndexKind::Tree);
            let mut model = BTreeMap::new();
            let all: Vec<(u16, Option<u32>)> = (0..3000).map(|n| (n, Some(u32::from(n)))).collect();
            apply(&mut ix, &mut model, &all);
            Pages::new(sm, cache, 7).flush(&mut ix).unwrap();
            assert_eq!(ix.height, 3);
            (ix, model)
        }

        /// Every key as the high bound, included and excluded, of a short ascending range
        /// over a tree of three levels and an overlay: some bound is a leaf's last key, where
        /// a merge hands out the rest of a leaf without comparing each entry.
        #[test]
        fn every_key_bounds_a_range_exactly() {
            let mut sm =
                SpaceManager::format(MemBlock::new(32 << 20), FormatOptions::default()).unwrap();
            let mut cache = PageCache::default();
            let (mut ix, mut model) = three_levels(&mut sm, &mut cache);
            let changed: Vec<(u16, Option<u32>)> = (0..3000)
                .filter(|n| n % 37 == 0 || n % 53 == 0)
                .map(|n| (n, (n % 2 == 0).then_some(u32::from(n) + 1)))
                .chain((3000..3100).map(|n| (n, Some(u32::from(n)))))
                .collect();
            apply(&mut ix, &mut model, &changed);
            let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
            let mut p = Pages::new(&mut sm, &mut cache, 7);
            let mut chunks = 0;
            for (i, k) in keys.iter().enumerate() {
                let lo = Bound::Included(keys[i.saturating_sub(20)].clone());
                for hi in [Bound::Included(k.clone()), Bound::Excluded(k.clone())] {
                    let want: Vec<Entry> = model
                        .range::<Vec<u8>, _>((lo.clone(), hi.clone()))
                        .map(|(k, l)| (k.clone(), *l))
                        .collect();
                    let q = (lo.clone(), hi, false, 64, None);
                    assert_eq!(stream(&mut p, &ix, &q, &mut chunks), want, "key {i}");
                }
            }
        }

        /// A full range over a tree of three levels whose overlay deletes whole leaves,
        /// read one entry a chunk in both directions.
        #[test]
        fn whole_leaves_deleted_by_the_overlay_are_skipped() {
            let mut sm =
                SpaceManager::format(MemBlock::new(32 << 20), FormatOptions::default()).unwrap();
            let mut cache = PageCache::default();
            let (mut ix, mut model) = three_levels(&mut sm, &mut cache);
            let gone: Vec<(u16, Option<u32>)> = (0..3000)
                .filter(|n| n % 500 < 300 || n % 7 == 0)
                .map(|n| (n, None))
                .collect();
            apply(&mut ix, &mut model, &gone);
            let mut p = Pages::new(&mut sm, &mut cache, 7);
            for desc in [false, true] {
                let mut want: Vec<Entry> = model.iter().map(|(k, l)| (k.clone(), *l)).collect();
                if desc {
                    want.reverse();
                }
                for max in [1, 5, CHUNK] {
                    let q = (Bound::Unbounded, Bound::Unbounded, desc, max, None);
                    let mut chunks = 0;
                    assert_eq!(stream(&mut p, &ix, &q, &mut chunks), want);
                    assert!(chunks >= want.len() / max);
                }
            }
        }
    }
}
