//! Data blocks: sorted entries with prefix compression and restart points.
//!
//! Payload (inside the block envelope of [`crate::coding::seal`]):
//!
//! ```text
//! entries:   shared varint | unshared varint | vtag varint | key suffix | value
//!            (shared: bytes of the previous key reused, 0 at a restart point;
//!             format 2, what this build writes — vtag 0: tombstone, 2n + 1: a value of
//!             n bytes, 2n + 2: a value pointer of n bytes (see [`crate::vlog`]);
//!             format 1, read still — vtag 0: tombstone, n + 1: a value of n bytes)
//! restarts:  count × u32 offset of a restart entry (every RESTART_INTERVAL-th entry as
//!            this build writes them, every 16th before; a reader takes any spacing)
//! count:     u32 number of restarts
//! ```
//!
//! A block is read into RAM (and cached) as this payload, not decoded: see [`DataBlock`].

use crate::coding::{Reader, put_varint};
use crate::error::Result;

/// The data-block format this build writes (the envelope's version byte of a data block).
pub const FORMAT: u8 = 2;

/// What an entry holds besides its key: the value itself, or a pointer to it in a value
/// blob ([`crate::vlog::ValuePtr`], encoded). A tombstone is `None` where a `Stored` is
/// optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored<'a> {
    /// The value's bytes.
    Inline(&'a [u8]),
    /// An encoded pointer to the value.
    Pointer(&'a [u8]),
}

impl<'a> Stored<'a> {
    /// The value's bytes if they are here (`None`: a pointer).
    pub fn inline(self) -> Option<&'a [u8]> {
        match self {
            Stored::Inline(v) => Some(v),
            Stored::Pointer(_) => None,
        }
    }
}

/// Entries between restart points this build writes (a reader takes any spacing: the
/// restart array says where they are). Eight, not LevelDB's sixteen: a point read scans
/// half as many entries after its binary search (-12% instructions per read of a cached
/// block) for about 2% more bytes (one more whole key and offset per eight entries).
pub const RESTART_INTERVAL: usize = 8;

/// A varint at `*pos` of `buf` (moved past it); `None` if truncated or too long.
#[inline(always)]
fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let b = *buf.get(*pos)?;
    *pos += 1;
    if b < 0x80 {
        return Some(u64::from(b));
    }
    let mut x = u64::from(b & 0x7f);
    for shift in (7..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        x |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(x);
        }
    }
    None
}

/// Builds one data block's payload.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    last: Vec<u8>,
    count: usize,
    interval: usize,
}

impl Default for BlockBuilder {
    fn default() -> Self {
        Self::with_restart_interval(RESTART_INTERVAL)
    }
}

impl BlockBuilder {
    /// A builder with a restart point every `interval` entries (at least 1).
    pub fn with_restart_interval(interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: Vec::new(),
            last: Vec::new(),
            count: 0,
            interval: interval.max(1),
        }
    }

    /// Adds an entry (keys in strictly ascending order).
    pub fn add(&mut self, key: &[u8], value: Option<Stored<'_>>) {
        let shared = if self.count.is_multiple_of(self.interval) {
            self.restarts.push(self.buf.len() as u32);
            0
        } else {
            key.iter()
                .zip(&self.last)
                .take_while(|(a, b)| a == b)
                .count()
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        let bytes = match value {
            None => {
                put_varint(&mut self.buf, 0);
                &[][..]
            }
            Some(Stored::Inline(v)) => {
                put_varint(&mut self.buf, 2 * v.len() as u64 + 1);
                v
            }
            Some(Stored::Pointer(p)) => {
                put_varint(&mut self.buf, 2 * p.len() as u64 + 2);
                p
            }
        };
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(bytes);
        self.last.clear();
        self.last.extend_from_slice(key);
        self.count += 1;
    }

    /// Bytes of the payload so far (about).
    pub fn size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The finished payload; the builder is empty again.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size());
        self.finish_into(&mut out);
        out
    }

    /// [`finish`](Self::finish), appending the payload to `out`; the builder keeps its
    /// buffers for the next block.
    pub fn finish_into(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.buf.clear();
        self.restarts.clear();
        self.last.clear();
        self.count = 0;
    }
}

/// A data block as read: its payload (prefix-compressed entries, the restart array, the
/// restart count), searched in place. Loading a block copies the payload once and decodes
/// nothing; a seek is a binary search over the restart points, whose keys are stored whole,
/// then a scan of at most [`RESTART_INTERVAL`] entries into a [`Cursor`] (a point read,
/// [`DataBlock::get`], scans them without building their keys). The restart array
/// is checked when the block is loaded; a malformed entry is reported as corruption when a
/// seek or a scan reaches it (never a panic), and so are keys out of order met by a scan.
///
/// `B` holds the payload: a vector for a block kept (in the cache, in an iterator), or a
/// borrowed slice for a block searched once where it was read ([`DataBlock::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataBlock<B = Vec<u8>> {
    buf: B,
    /// Where the restart array starts (the end of the entries).
    body: usize,
    /// Number of restart points.
    restarts: usize,
    /// Its format (1 or [`FORMAT`]): how value tags read.
    format: u8,
    table: u64,
    offset: u64,
}

/// A position in a data block: the current entry's full key and where its value lies.
#[derive(Debug, Default, Clone)]
pub struct Cursor {
    key: Vec<u8>,
    /// The current entry's value, as (start, length, a pointer?) in the block; `None`: a
    /// tombstone.
    value: Option<(usize, usize, bool)>,
    /// Where the next entry starts.
    next: usize,
    valid: bool,
}

impl Cursor {
    /// Whether it is at an entry (not past the end).
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current entry's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The current entry's value in `block` (the block it was positioned in); `None`: a
    /// tombstone.
    pub fn value<'a, B: AsRef<[u8]>>(&self, block: &'a DataBlock<B>) -> Option<Stored<'a>> {
        block.stored(self.value?)
    }
}

impl DataBlock {
    /// Checks a payload (already checksummed) of `format` of `table` at `offset` and keeps
    /// a copy.
    pub fn decode(payload: &[u8], format: u8, table: u64, offset: u64) -> Result<Self> {
        let b = DataBlock::check(payload, format, table, offset)?;
        Ok(DataBlock {
            buf: payload.to_vec(),
            body: b.body,
            restarts: b.restarts,
            format,
            table,
            offset,
        })
    }

    /// Bytes this block is charged in a cache.
    pub fn charge(&self) -> usize {
        64 + self.buf.capacity()
    }
}

impl<'p> DataBlock<&'p [u8]> {
    /// Checks a payload (already checksummed) of `format` of `table` at `offset`, to be
    /// searched where it lies.
    pub fn check(payload: &'p [u8], format: u8, table: u64, offset: u64) -> Result<Self> {
        let r = Reader::new(payload, "data block", table, offset);
        if format != 1 && format != FORMAT {
            return Err(r.bad("unknown data-block format"));
        }
        if payload.len() < 4 {
            return Err(r.bad("no restart count"));
        }
        let n = crate::coding::le32(payload, payload.len() - 4) as usize;
        let trailer = n
            .checked_mul(4)
            .and_then(|t| t.checked_add(4))
            .filter(|&t| t <= payload.len())
            .ok_or_else(|| r.bad("restart array beyond the block"))?;
        let body = payload.len() - trailer;
        if body > u32::MAX as usize {
            return Err(r.bad("block larger than 4 GiB"));
        }
        if (n == 0) != (body == 0) {
            return Err(r.bad("entries without restart points"));
        }
        let mut prev = None;
        for i in 0..n {
            let at = crate::coding::le32(payload, body + 4 * i) as usize;
            if at >= body || prev.is_some_and(|p| at <= p) || (i == 0 && at != 0) {
                return Err(r.bad("restart point out of place"));
            }
            prev = Some(at);
        }
        Ok(DataBlock {
            buf: payload,
            body,
            restarts: n,
            format,
            table,
            offset,
        })
    }
}

impl<B: AsRef<[u8]>> DataBlock<B> {
    fn bad(&self, reason: &'static str) -> crate::error::LsmError {
        Reader::new(&[], "data block", self.table, self.offset).bad(reason)
    }

    /// The value an entry holds, from its (start, length, a pointer?) in the block.
    fn stored(&self, (at, len, pointer): (usize, usize, bool)) -> Option<Stored<'_>> {
        let bytes = self.buf.as_ref().get(at..at.checked_add(len)?)?;
        Some(if pointer {
            Stored::Pointer(bytes)
        } else {
            Stored::Inline(bytes)
        })
    }

    /// Where restart point `i` (< `restarts`, checked on load) starts.
    fn restart(&self, i: usize) -> usize {
        crate::coding::le32(self.buf.as_ref(), self.body + 4 * i) as usize
    }

    /// The key of restart point `i`, stored whole.
    fn restart_key(&self, i: usize) -> Result<&[u8]> {
        let body = &self.buf.as_ref()[..self.body];
        let mut pos = self.restart(i);
        let bad = || self.bad("truncated entry");
        if varint(body, &mut pos).ok_or_else(bad)? != 0 {
            return Err(self.bad("restart entry shares a prefix"));
        }
        let n = varint(body, &mut pos).ok_or_else(bad)?;
        varint(body, &mut pos).ok_or_else(bad)?;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| pos.checked_add(n))
            .ok_or_else(bad)?;
        body.get(pos..end).ok_or_else(bad)
    }

    /// The entry at `pos` of the entries (`pos` < their end): its parts as stored, the key
    /// not yet joined to the previous one's prefix.
    #[inline(always)]
    fn entry(&self, body: &[u8], mut pos: usize) -> Result<Entry> {
        let bad = || self.bad("truncated entry");
        let shared = varint(body, &mut pos).ok_or_else(bad)?;
        let unshared = varint(body, &mut pos).ok_or_else(bad)?;
        let vtag = varint(body, &mut pos).ok_or_else(bad)?;
        let suffix = pos;
        pos = usize::try_from(unshared)
            .ok()
            .and_then(|n| pos.checked_add(n))
            .filter(|&e| e <= body.len())
            .ok_or_else(bad)?;
        let key_end = pos;
        let value = match vtag {
            0 => None,
            n => {
                let (len, pointer) = if self.format == 1 {
                    (n - 1, false)
                } else {
                    ((n - 1) / 2, n % 2 == 0)
                };
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|n| pos.checked_add(n))
                    .filter(|&e| e <= body.len())
                    .ok_or_else(bad)?;
                let start = pos;
                pos = end;
                Some((start, end - start, pointer))
            }
        };
        Ok(Entry {
            shared,
            suffix: suffix..key_end,
            value,
            next: pos,
        })
    }

    /// Reads the entry at `cur.next` into `cur`, whose key is the previous entry's (or empty
    /// at a restart point); past the last entry, `cur` becomes invalid.
    fn parse_next(&self, cur: &mut Cursor) -> Result<()> {
        let body = &self.buf.as_ref()[..self.body];
        if cur.next >= body.len() {
            cur.valid = false;
            return Ok(());
        }
        let e = self.entry(body, cur.next)?;
        if e.shared > cur.key.len() as u64 {
            return Err(self.bad("shared prefix longer than the previous key"));
        }
        let shared = e.shared as usize;
        let suffix = &body[e.suffix];
        // The previous key and this one agree on `shared` bytes: the rest decides the order.
        if cur.valid && suffix <= &cur.key[shared..] {
            return Err(self.bad("keys out of order"));
        }
        cur.key.truncate(shared);
        cur.key.extend_from_slice(suffix);
        cur.value = e.value;
        cur.next = e.next;
        cur.valid = true;
        Ok(())
    }

    /// Positions `cur` at the first entry.
    pub fn first(&self, cur: &mut Cursor) -> Result<()> {
        cur.key.clear();
        cur.valid = false;
        cur.next = 0;
        self.parse_next(cur)
    }

    /// Moves `cur` to the next entry (or past the end).
    pub fn step(&self, cur: &mut Cursor) -> Result<()> {
        if !cur.valid {
            return Ok(());
        }
        self.parse_next(cur)
    }

    /// Where the entries to scan for `key` start: the restart point before the first one
    /// whose key is ≥ `key` (binary search over the restart keys), or the first entry.
    #[inline(always)]
    fn interval_start(&self, key: &[u8]) -> Result<usize> {
        let (mut lo, mut hi) = (0, self.restarts);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.restart_key(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(if lo == 0 { 0 } else { self.restart(lo - 1) })
    }

    /// Positions `cur` at the first entry with key ≥ `key` (or past the end).
    pub fn seek(&self, key: &[u8], cur: &mut Cursor) -> Result<()> {
        cur.key.clear();
        cur.valid = false;
        cur.next = self.interval_start(key)?;
        loop {
            self.parse_next(cur)?;
            if !cur.valid || cur.key.as_slice() >= key {
                return Ok(());
            }
        }
    }

    /// The value of `key` if the block holds it (`Some(None)`: a tombstone).
    ///
    /// A [`seek`](Self::seek) that builds no key: after the binary search over the restart
    /// points, each entry of the interval is compared with `key` from its stored parts.
    /// While the entries sort below `key`, `m` is how many leading bytes the last one
    /// shares with `key` (it differs from `key` at byte `m`, being below it, unless it is a
    /// prefix of `key`). An entry that keeps more than `m` bytes of the last key then sorts
    /// below `key` too, without a look at its suffix; one that keeps at most `m` agrees
    /// with `key` on those bytes, and its suffix decides. Malformed entries are errors as
    /// in a seek; keys out of order are found by scans (a seek meets only those before the
    /// key it stops at, and a point read answers for the entry equal to `key` alone).
    pub fn get(&self, key: &[u8]) -> Result<Option<Option<Stored<'_>>>> {
        let body = &self.buf.as_ref()[..self.body];
        let mut pos = self.interval_start(key)?;
        // The previous entry's key length (none at a restart point) and `m`.
        let (mut prev_len, mut m) = (0usize, 0usize);
        while pos < body.len() {
            let e = self.entry(body, pos)?;
            if e.shared > prev_len as u64 {
                return Err(self.bad("shared prefix longer than the previous key"));
            }
            let shared = e.shared as usize;
            let suffix = &body[e.suffix];
            if shared <= m {
                // `shared` ≤ `m` ≤ `key.len()`: the entry and `key` agree up to `shared`.
                let rest = &key[shared..];
                let c = suffix.iter().zip(rest).take_while(|(a, b)| a == b).count();
                match (suffix.get(c), rest.get(c)) {
                    (None, None) => {
                        return match e.value {
                            None => Ok(Some(None)),
                            Some(v) => self
                                .stored(v)
                                .map(|s| Some(Some(s)))
                                .ok_or_else(|| self.bad("truncated entry")),
                        };
                    }
                    // A prefix of `key`, or below it at byte `shared + c`.
                    (None, Some(_)) => m = shared + c,
                    (Some(a), Some(b)) if a < b => m = shared + c,
                    // Past `key`: the block does not hold it.
                    _ => return Ok(None),
                }
            }
            prev_len = shared + suffix.len();
            pos = e.next;
        }
        Ok(None)
    }
}

/// An entry's parts as stored ([`DataBlock::entry`]).
struct Entry {
    /// Bytes of the previous key its key begins with.
    shared: u64,
    /// Where the rest of its key lies in the block.
    suffix: core::ops::Range<usize>,
    /// Its value as [`Cursor`] holds it.
    value: Option<(usize, usize, bool)>,
    /// Where the next entry starts.
    next: usize,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A value or pointer, owned: `(bytes, a pointer?)`.
    type Owned = Option<(Vec<u8>, bool)>;

    fn own(v: Option<Stored<'_>>) -> Owned {
        v.map(|s| match s {
            Stored::Inline(b) => (b.to_vec(), false),
            Stored::Pointer(b) => (b.to_vec(), true),
        })
    }

    fn entries<B: AsRef<[u8]>>(d: &DataBlock<B>) -> Vec<(Vec<u8>, Owned)> {
        let mut cur = Cursor::default();
        d.first(&mut cur).unwrap();
        let mut out = Vec::new();
        while cur.valid() {
            out.push((cur.key().to_vec(), own(cur.value(d))));
            d.step(&mut cur).unwrap();
        }
        out
    }

    fn stored(v: &Owned) -> Option<Stored<'_>> {
        v.as_ref().map(|(b, p)| {
            if *p {
                Stored::Pointer(b)
            } else {
                Stored::Inline(b)
            }
        })
    }

    /// Blocks of format 1 (written before value pointers): vtag `n + 1` is a value of `n`
    /// bytes. This builds one by hand and reads it.
    #[test]
    fn format_1_blocks_still_read() {
        let mut p = Vec::new();
        let mut want = Vec::new();
        for i in 0..5u8 {
            let k = vec![b'k', i];
            p.extend_from_slice(&[0, 2]);
            if i == 3 {
                p.push(0);
                p.extend_from_slice(&k);
                want.push((k, None));
            } else {
                p.push(i + 1);
                p.extend_from_slice(&k);
                p.extend(std::iter::repeat_n(i, usize::from(i)));
                want.push((k, Some((vec![i; usize::from(i)], false))));
            }
        }
        // One restart point per entry.
        let mut at = 0u32;
        let mut restarts = Vec::new();
        for i in 0..5u32 {
            restarts.extend_from_slice(&at.to_le_bytes());
            at += 5 + if i == 3 { 0 } else { i };
        }
        p.extend_from_slice(&restarts);
        p.extend_from_slice(&5u32.to_le_bytes());
        let d = DataBlock::decode(&p, 1, 1, 0).unwrap();
        assert_eq!(entries(&d), want);
        // Point reads too: each key, and keys between and around them.
        for (k, v) in &want {
            assert_eq!(d.get(k).unwrap().map(own), Some(v.clone()));
            let mut after = k.clone();
            after.push(0);
            assert_eq!(d.get(&after).unwrap(), None);
        }
        assert_eq!(d.get(b"").unwrap(), None);
        assert_eq!(d.get(b"k").unwrap(), None);
        // Read as this build's format, the same bytes mean something else or nothing.
        assert!(DataBlock::check(&p, 3, 1, 0).is_err(), "unknown format");
    }

    #[test]
    fn blocks_round_trip_with_prefixes_and_tombstones() {
        // This build's spacing of restart points, the older builds' 16, and extremes.
        for interval in [RESTART_INTERVAL, 16, 1, 3, 100] {
            round_trip(interval);
        }
    }

    fn round_trip(interval: usize) {
        let mut b = BlockBuilder::with_restart_interval(interval);
        let mut want = Vec::new();
        for i in 0..40u32 {
            let k = format!("key{i:04}").into_bytes();
            // Tombstones, values (some empty) and pointers (every fifth).
            let v = (i % 3 != 0).then(|| (vec![i as u8; i as usize], i % 5 == 1));
            b.add(&k, stored(&v));
            want.push((k, v));
        }
        let p = b.finish();
        let d = DataBlock::decode(&p, FORMAT, 1, 0).unwrap();
        assert_eq!(entries(&d), want);
        // Searched where it lies, the same.
        let borrowed = DataBlock::check(&p, FORMAT, 1, 0).unwrap();
        assert_eq!(entries(&borrowed), want);
        assert_eq!(
            borrowed.get(b"key0007").unwrap(),
            Some(Some(Stored::Inline(&[7u8; 7][..])))
        );
        assert_eq!(
            borrowed.get(b"key0011").unwrap(),
            Some(Some(Stored::Pointer(&[11u8; 11][..])))
        );
        assert_eq!(borrowed.get(b"key0006").unwrap(), Some(None));
        assert_eq!(borrowed.get(b"key00065").unwrap(), None);
        let mut cur = Cursor::default();
        d.seek(b"key0005", &mut cur).unwrap();
        assert_eq!(cur.key(), b"key0005");
        // Every key, every gap between keys, before the first and after the last.
        for (i, (k, v)) in want.iter().enumerate() {
            assert_eq!(own(d.get(k).unwrap().flatten()), *v, "{i}");
            assert!(d.get(k).unwrap().is_some(), "{i}");
            let mut gap = k.clone();
            gap.push(0);
            d.seek(&gap, &mut cur).unwrap();
            match want.get(i + 1) {
                Some((next, _)) => assert_eq!(cur.key(), next.as_slice()),
                None => assert!(!cur.valid()),
            }
            assert_eq!(d.get(&gap).unwrap(), None);
        }
        d.seek(b"", &mut cur).unwrap();
        assert_eq!(cur.key(), b"key0000");
        d.seek(b"kez", &mut cur).unwrap();
        assert!(!cur.valid());
    }

    proptest::proptest! {
        /// A point read answers as the map the block was built from, for every key it holds
        /// and for keys it does not: between its keys, prefixes of them, keys they are
        /// prefixes of, before the first and after the last. Short keys over three letters
        /// share long prefixes, as an SQL table's keys do.
        #[test]
        fn point_reads_answer_as_the_map(
            keys in proptest::collection::btree_map(
                proptest::collection::vec(0u8..3, 0..7),
                (0u8..3, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..5)),
                0..60,
            ),
            probes in proptest::collection::vec(proptest::collection::vec(0u8..3, 0..8), 0..60),
            interval in 1usize..12,
        ) {
            let mut b = BlockBuilder::with_restart_interval(interval);
            let mut want = std::collections::BTreeMap::new();
            for (k, (kind, v)) in &keys {
                let v: Owned = match kind {
                    0 => None,
                    1 => Some((v.clone(), false)),
                    _ => Some((v.clone(), true)),
                };
                b.add(k, stored(&v));
                want.insert(k.clone(), v);
            }
            let p = b.finish();
            let d = DataBlock::decode(&p, FORMAT, 1, 0).unwrap();
            for k in keys.keys().chain(&probes) {
                let got = d.get(k).unwrap().map(own);
                proptest::prop_assert_eq!(got.as_ref(), want.get(k), "{:?}", k);
            }
        }
    }

    /// Damaged payloads (checksums aside): every truncation and every single-byte change
    /// gives an error or a well-formed answer, never a panic.
    #[test]
    fn damaged_blocks_never_panic() {
        let mut b = BlockBuilder::default();
        for i in 0..40u32 {
            let k = format!("key{:04}", i * 3).into_bytes();
            let v = match i % 5 {
                0 => None,
                1 => Some(Stored::Pointer(&b"ptr"[..])),
                _ => Some(Stored::Inline(&b"value"[..])),
            };
            b.add(&k, v);
        }
        let p = b.finish();
        let probe = |q: &[u8]| {
            let Ok(d) = DataBlock::decode(q, FORMAT, 1, 0) else {
                return;
            };
            let mut cur = Cursor::default();
            if d.first(&mut cur).is_ok() {
                while cur.valid() && d.step(&mut cur).is_ok() {}
            }
            for k in [&b"key0000"[..], b"key0050", b"key0118", b"zzz", b""] {
                let _ = d.get(k);
            }
        };
        for len in 0..p.len() {
            probe(&p[..len]);
        }
        for i in 0..p.len() {
            for x in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut q = p.clone();
                q[i] = x;
                probe(&q);
            }
        }
        // Keys out of order are corruption.
        let mut q = p.clone();
        // The second restart point, "key0048", follows "key0045": make it "key0008".
        let at = q.windows(7).position(|w| w == b"key0048").unwrap();
        q[at + 5] = b'0';
        let d = DataBlock::decode(&q, FORMAT, 1, 0).unwrap();
        let mut cur = Cursor::default();
        d.first(&mut cur).unwrap();
        let mut r = Ok(());
        while cur.valid() && r.is_ok() {
            r = d.step(&mut cur);
        }
        assert!(r.is_err(), "a scan over keys out of order fails");
    }
}
