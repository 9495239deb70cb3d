//! The coordination cache (SQLiteKV §3.1.1.2): results of point and range queries on lsm
//! tables kept in the front end, so a repeated query skips the LSM tree (memtables, filters,
//! table blocks) and the KV-to-SQL work (an index range's row lookups).
//!
//! **Memory** is a slab allocator: the cache's byte budget is cut into pages of
//! [`PAGE_BYTES`] (smaller when the budget is), each page serving one size class and cut into
//! equal slots — 128, 512 or 4,096 bytes. A result goes into the smallest class that holds it;
//! a result over 4,096 bytes takes several 4,096-byte slots. When its class has no free slot
//! and no page is left, the class's results are evicted until one fits, chosen by CLOCK
//! (second chance): a ring of the class's results in the order they were kept, and a bit
//! per result set when a query reads it; the eviction hand passes over a result whose bit is
//! set (clearing it) and takes the first whose bit is clear — the least recently used,
//! roughly, at the cost of a store on a hit instead of reordering a list. A result never
//! fragments memory and the budget is never exceeded. A result larger than an eighth of the
//! budget is not kept.
//!
//! **What a result covers.** Each entry lists the keys it depends on: key ranges of the LSM
//! key space (a rowid range scan: its row-key range; an index range: its index-key range) and
//! single keys (a point query: its row key; an index range: the row key of each row it
//! returned). A write to a key drops exactly the entries that depend on it — writes to other
//! keys leave them alone — except that a write to the one key a point query covers rewrites
//! that result when the write commits ([`CoordCache::refresh`]), instead of dropping it.
//!
//! **Admission** (TinyLFU's "doorkeeper", [`ember_table::doorkeeper`], which the table
//! engine's query cache uses too): a result is kept the second time its query misses, not
//! the first. A bit array with two bits per query remembers the queries that missed once;
//! it is cleared when a quarter of its bits are set, so "once" means "recently".
//! A stream of one-off queries (uniform random reads, the uniqueness probe of each INSERT)
//! then costs a hash and two bits a miss instead of a slab slot, a ring entry, the
//! invalidation maps and, soon after, an eviction; a query that repeats is kept from its
//! second miss on.
//!
//! The stored bytes are a result's rows as `count varint`, then per row `rowid i64 LE`, `len
//! varint` and the row's encoding (`ember_table::row`), or, for a point query that found
//! nothing, no bytes. Nothing here is on a device.

use ember_table::Doorkeeper;
use foldhash::HashMap;
use std::borrow::Cow;
use std::collections::VecDeque;

/// Bytes of a slab page (or the whole budget, if smaller).
pub const PAGE_BYTES: usize = 64 << 10;
/// The slot sizes of the classes.
pub const CLASSES: [usize; 3] = [128, 512, 4096];
/// Key bytes that name the object (table or index) a key belongs to.
const GROUP: usize = 9;
/// Most range results kept per object (the oldest goes first): a write checks each.
pub const RANGES_PER_OBJECT: usize = 256;

fn group(k: &[u8]) -> &[u8] {
    &k[..k.len().min(GROUP)]
}

/// Where a slot is: page and slot index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotRef {
    page: u32,
    slot: u32,
}

#[derive(Debug, Default)]
struct Class {
    free: Vec<SlotRef>,
    /// The CLOCK ring: `(entry, stamp)` of the class's results in the order they were kept
    /// (the hand is the front). A pair whose entry is gone, or holds a newer result (its
    /// stamp differs), is stale and skipped; stale pairs are swept out when a result is kept
    /// in the class and the ring holds more than `2 × live + 64` pairs.
    ring: VecDeque<(usize, u64)>,
    /// Results of the class in the cache.
    live: usize,
}

#[derive(Debug)]
struct Entry {
    query: Vec<u8>,
    class: usize,
    slots: Vec<SlotRef>,
    len: usize,
    /// When it was kept (unique: it names this result in the ring).
    stamp: u64,
    /// Read since the hand last passed it (CLOCK's reference bit).
    used: bool,
    points: Vec<Vec<u8>>,
    ranges: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// How the cache has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered.
    pub hits: u64,
    /// Lookups not answered.
    pub misses: u64,
    /// Results dropped by a write to a key they cover.
    pub invalidations: u64,
    /// Point results rewritten in place by a committed write to their key.
    pub refreshes: u64,
    /// Results dropped for room.
    pub evictions: u64,
    /// Bytes of slab pages in use (never above the budget).
    pub slab_bytes: usize,
}

/// The cache (see the module docs).
#[derive(Debug)]
pub struct CoordCache {
    budget: usize,
    page_bytes: usize,
    pages: Vec<Box<[u8]>>,
    classes: Vec<Class>,
    entries: Vec<Option<Entry>>,
    free_entries: Vec<usize>,
    by_query: HashMap<Vec<u8>, usize>,
    by_key: HashMap<Vec<u8>, Vec<usize>>,
    /// Entries with range dependencies, by the object their range lies in (the key's first
    /// [`GROUP`] bytes: kind and object number); a write checks only its object's.
    ranged: HashMap<Vec<u8>, Vec<usize>>,
    clock: u64,
    stats: CacheStats,
    /// The doorkeeper (see the module docs).
    seen: Doorkeeper,
}

impl CoordCache {
    /// A cache of at most `budget` bytes of slab memory; `None` if `budget` is too small to
    /// hold one page of the smallest class (0 turns the cache off).
    pub fn new(budget: usize) -> Option<Self> {
        if budget < CLASSES[CLASSES.len() - 1] {
            return None;
        }
        Some(CoordCache {
            budget,
            page_bytes: PAGE_BYTES.min(budget),
            pages: Vec::new(),
            classes: CLASSES.iter().map(|_| Class::default()).collect(),
            entries: Vec::new(),
            free_entries: Vec::new(),
            by_query: HashMap::default(),
            by_key: HashMap::default(),
            ranged: HashMap::default(),
            clock: 0,
            stats: CacheStats::default(),
            // Four bits per result the budget holds in the smallest class.
            seen: Doorkeeper::with_bits(budget / CLASSES[0] * 4),
        })
    }

    /// Whether a result of `query`, which just missed, should be kept: yes if it missed
    /// recently already (the doorkeeper; see the module docs), else it is remembered.
    pub fn admit(&mut self, query: &[u8]) -> bool {
        // The lsm engine's bloom-filter hash (FNV-1a with a final mix).
        self.seen.admit(ember_lsm::sstable::bloom::key_hash(query))
    }

    /// The largest result [`put`](Self::put) keeps (an eighth of the budget): a reader may
    /// stop gathering a result for the cache once it grows past this.
    pub fn max_result_bytes(&self) -> usize {
        self.budget / 8
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            slab_bytes: self.pages.len() * self.page_bytes,
            ..self.stats
        }
    }

    /// The bytes of a cached result, if there is one (and marks it used).
    pub fn get(&mut self, query: &[u8]) -> Option<Vec<u8>> {
        self.lookup(query).map(Cow::into_owned)
    }

    /// The bytes of a cached result, if there is one (and marks it used): borrowed from its
    /// slot when it fits one (every result of up to 4,096 bytes), gathered from its slots
    /// otherwise.
    pub fn lookup(&mut self, query: &[u8]) -> Option<Cow<'_, [u8]>> {
        let Some(&id) = self.by_query.get(query) else {
            self.stats.misses += 1;
            return None;
        };
        let e = self.entries.get_mut(id)?.as_mut()?;
        e.used = true;
        self.stats.hits += 1;
        let size = CLASSES[e.class];
        if let [s] = e.slots[..] {
            let at = s.slot as usize * size;
            return Some(Cow::Borrowed(&self.pages[s.page as usize][at..at + e.len]));
        }
        let mut out = Vec::with_capacity(e.len);
        let mut left = e.len;
        for s in &e.slots {
            let n = left.min(size);
            let at = s.slot as usize * size;
            out.extend_from_slice(&self.pages[s.page as usize][at..at + n]);
            left -= n;
        }
        Some(Cow::Owned(out))
    }

    /// Keeps `bytes` as the result of `query`, depending on the single keys `points` and the
    /// key ranges `ranges` (`[lo, hi)`, `None` = no upper end). Returns whether it was kept.
    pub fn put(
        &mut self,
        query: Vec<u8>,
        bytes: &[u8],
        points: Vec<Vec<u8>>,
        ranges: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ) -> bool {
        if bytes.len() > self.max_result_bytes() {
            return false;
        }
        self.remove_query(&query);
        let (class, need) = slots_for(bytes.len());
        let Some(slots) = self.take_slots(class, need) else {
            return false;
        };
        fill_slots(&mut self.pages, &slots, CLASSES[class], &[bytes]);
        self.clock += 1;
        let entry = Entry {
            query: query.clone(),
            class,
            slots,
            len: bytes.len(),
            stamp: self.clock,
            used: false,
            points,
            ranges,
        };
        let id = match self.free_entries.pop() {
            Some(i) => i,
            None => {
                self.entries.push(None);
                self.entries.len() - 1
            }
        };
        for k in &entry.points {
            self.by_key.entry(k.clone()).or_default().push(id);
        }
        let mut groups: Vec<&[u8]> = entry.ranges.iter().map(|(lo, _)| group(lo)).collect();
        groups.dedup();
        let mut crowded = Vec::new();
        for g in groups {
            let list = self.ranged.entry(g.to_vec()).or_default();
            list.push(id);
            if list.len() > RANGES_PER_OBJECT {
                crowded.push(list[0]);
            }
        }
        let stamp = entry.stamp;
        self.by_query.insert(query, id);
        self.entries[id] = Some(entry);
        let c = &mut self.classes[class];
        c.ring.push_back((id, stamp));
        c.live += 1;
        if c.ring.len() > 2 * c.live + 64 {
            let entries = &self.entries;
            c.ring
                .retain(|&(i, st)| entries[i].as_ref().is_some_and(|e| e.stamp == st));
        }
        for old in crowded {
            if self.remove(old) {
                self.stats.evictions += 1;
            }
        }
        true
    }

    /// Drops every result that depends on `key` (a write to it).
    pub fn invalidate(&mut self, key: &[u8]) {
        self.invalidate_except(key, None);
    }

    /// Drops every result that depends on `key` but the result of query `keep` (the key's
    /// point query, which the writer [refreshes](Self::refresh) when the write commits).
    pub fn invalidate_except(&mut self, key: &[u8], keep: Option<&[u8]>) {
        let keep = keep.and_then(|q| self.by_query.get(q).copied());
        let mut victims: Vec<usize> = match keep {
            None => self.by_key.remove(key).unwrap_or_default(),
            Some(k) => self
                .by_key
                .get(key)
                .map(|ids| ids.iter().copied().filter(|&id| id != k).collect())
                .unwrap_or_default(),
        };
        for &id in self.ranged.get(group(key)).map_or(&[][..], Vec::as_slice) {
            if let Some(e) = &self.entries[id]
                && e.ranges
                    .iter()
                    .any(|(lo, hi)| key >= lo.as_slice() && hi.as_deref().is_none_or(|h| key < h))
            {
                victims.push(id);
            }
        }
        for id in victims {
            if self.remove(id) {
                self.stats.invalidations += 1;
            }
        }
    }

    /// Replaces the bytes of `query`'s result with `head` then `body` (a committed write to
    /// the one key a point query covers), in place when they take as many slots of its
    /// class as the old bytes did; otherwise the result is dropped (an invalidation).
    /// Whether the result is there, refreshed.
    pub fn refresh(&mut self, query: &[u8], head: &[u8], body: &[u8]) -> bool {
        let Some(&id) = self.by_query.get(query) else {
            return false;
        };
        let Some(e) = self.entries.get_mut(id).and_then(Option::as_mut) else {
            return false;
        };
        let len = head.len() + body.len();
        if slots_for(len) != (e.class, e.slots.len()) {
            if self.remove(id) {
                self.stats.invalidations += 1;
            }
            return false;
        }
        fill_slots(&mut self.pages, &e.slots, CLASSES[e.class], &[head, body]);
        e.len = len;
        self.stats.refreshes += 1;
        true
    }

    /// Drops the result of `query`, if there is one (an invalidation).
    pub fn forget(&mut self, query: &[u8]) {
        if self.remove_query(query) {
            self.stats.invalidations += 1;
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        let ids: Vec<usize> = self.by_query.values().copied().collect();
        for id in ids {
            self.remove(id);
        }
    }

    /// Drops the result of `query`; whether there was one.
    fn remove_query(&mut self, query: &[u8]) -> bool {
        match self.by_query.get(query) {
            Some(&id) => self.remove(id),
            None => false,
        }
    }

    /// Frees an entry's slots and forgets it; whether it existed.
    fn remove(&mut self, id: usize) -> bool {
        let Some(e) = self.entries.get_mut(id).and_then(Option::take) else {
            return false;
        };
        let class = &mut self.classes[e.class];
        class.live -= 1;
        class.free.extend(e.slots);
        self.by_query.remove(&e.query);
        for k in &e.points {
            if let Some(v) = self.by_key.get_mut(k) {
                v.retain(|&x| x != id);
                if v.is_empty() {
                    self.by_key.remove(k);
                }
            }
        }
        for (lo, _) in &e.ranges {
            if let Some(v) = self.ranged.get_mut(group(lo)) {
                v.retain(|&x| x != id);
                if v.is_empty() {
                    self.ranged.remove(group(lo));
                }
            }
        }
        self.free_entries.push(id);
        true
    }

    /// `need` free slots of `class`: free ones, then a new page while the budget allows, then
    /// the class's results evicted by the CLOCK hand ([`clock_victim`](Self::clock_victim)).
    fn take_slots(&mut self, class: usize, need: usize) -> Option<Vec<SlotRef>> {
        let size = CLASSES[class];
        let per_page = self.page_bytes / size;
        loop {
            if self.classes[class].free.len() >= need {
                let free = &mut self.classes[class].free;
                let at = free.len() - need;
                return Some(free.split_off(at));
            }
            if (self.pages.len() + 1) * self.page_bytes <= self.budget {
                let page = self.pages.len() as u32;
                self.pages
                    .push(vec![0u8; self.page_bytes].into_boxed_slice());
                let free = &mut self.classes[class].free;
                free.extend(
                    (0..per_page as u32)
                        .rev()
                        .map(|slot| SlotRef { page, slot }),
                );
                continue;
            }
            let victim = self.clock_victim(class)?;
            self.remove(victim);
            self.stats.evictions += 1;
        }
    }

    /// The class's next result to evict: the hand moves over the ring, dropping stale pairs
    /// and giving each result read since it last passed a second chance (its bit cleared,
    /// back of the ring); the first result not read since is the one. `None` if the class
    /// holds none.
    fn clock_victim(&mut self, class: usize) -> Option<usize> {
        let c = &mut self.classes[class];
        while let Some((id, stamp)) = c.ring.pop_front() {
            let Some(e) = self.entries.get_mut(id).and_then(Option::as_mut) else {
                continue;
            };
            if e.stamp != stamp {
                continue;
            }
            if e.used {
                e.used = false;
                c.ring.push_back((id, stamp));
                continue;
            }
            return Some(id);
        }
        None
    }
}

/// The class of a result of `len` bytes and how many of its slots it takes.
fn slots_for(len: usize) -> (usize, usize) {
    let class = CLASSES
        .iter()
        .position(|&c| len <= c)
        .unwrap_or(CLASSES.len() - 1);
    (class, len.div_ceil(CLASSES[class]).max(1))
}

/// Copies `parts`, one after the other, into `slots` of `size` bytes each (which hold them).
fn fill_slots(pages: &mut [Box<[u8]>], slots: &[SlotRef], size: usize, parts: &[&[u8]]) {
    let mut parts = parts.iter().copied();
    let mut part: &[u8] = parts.next().unwrap_or_default();
    for s in slots {
        let start = s.slot as usize * size;
        let mut dst = &mut pages[s.page as usize][start..start + size];
        loop {
            while part.is_empty() {
                match parts.next() {
                    Some(p) => part = p,
                    None => return,
                }
            }
            if dst.is_empty() {
                break;
            }
            let n = part.len().min(dst.len());
            dst[..n].copy_from_slice(&part[..n]);
            dst = &mut dst[n..];
            part = &part[n..];
        }
    }
}

/// The bytes of a result: rows as `(rowid, row encoding)`.
pub fn encode_rows<'a>(rows: impl ExactSizeIterator<Item = (i64, &'a [u8])>) -> Vec<u8> {
    let mut out = RowsEncoder::default();
    for (rowid, enc) in rows {
        out.push(rowid, enc);
    }
    out.finish()
}

/// [`encode_rows`] a row at a time, for a reader that does not know the count before it
/// has read them all.
#[derive(Debug, Default)]
pub struct RowsEncoder {
    rows: u64,
    body: Vec<u8>,
}

impl RowsEncoder {
    /// Adds a row.
    pub fn push(&mut self, rowid: i64, enc: &[u8]) {
        self.body.extend_from_slice(&rowid.to_le_bytes());
        varint(&mut self.body, enc.len() as u64);
        self.body.extend_from_slice(enc);
        self.rows += 1;
    }

    /// Bytes of the rows so far (the result is at most 10 more).
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The result's bytes.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 10);
        varint(&mut out, self.rows);
        out.extend_from_slice(&self.body);
        out
    }
}

/// The rows of a result's bytes; `None` if they do not parse (never for bytes this module
/// wrote).
pub fn decode_rows(bytes: &[u8]) -> Option<Vec<(i64, &[u8])>> {
    let mut at = 0;
    let n = read_varint(bytes, &mut at)?;
    let mut out = Vec::with_capacity((n as usize).min(bytes.len()));
    for _ in 0..n {
        let id = i64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?);
        at += 8;
        let len = read_varint(bytes, &mut at)? as usize;
        out.push((id, bytes.get(at..at.checked_add(len)?)?));
        at += len;
    }
    Some(out)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row key of object 1 (kind byte, object number, then the rest).
    fn key(i: u32) -> Vec<u8> {
        let mut k = vec![b'r', 0, 0, 0, 0, 0, 0, 0, 1];
        k.extend_from_slice(&i.to_be_bytes());
        k
    }

    #[test]
    fn a_query_is_admitted_on_its_second_recent_miss() {
        let mut c = CoordCache::new(64 << 10).unwrap();
        assert!(!c.admit(b"q1"), "a first miss is only remembered");
        assert!(c.admit(b"q1"), "a second miss is admitted");
        assert!(c.admit(b"q1"));
        assert!(!c.admit(b"q2"));
        // Many one-off queries age the doorkeeper: q2's first miss is forgotten.
        for i in 0..c.seen.bits() {
            c.admit(format!("one-off {i}").as_bytes());
            assert!(
                c.seen.set_bits() * 4 < c.seen.bits(),
                "cleared when a quarter is set"
            );
        }
        let admitted = (0..100)
            .filter(|i| c.admit(format!("fresh {i}").as_bytes()))
            .count();
        assert!(
            admitted < 10,
            "{admitted} of 100 new queries taken for repeats"
        );
    }

    #[test]
    fn a_result_comes_back_whole_from_any_class() {
        let mut c = CoordCache::new(1 << 20).unwrap();
        for (i, n) in [0usize, 1, 127, 128, 129, 512, 4096, 4097, 20_000]
            .into_iter()
            .enumerate()
        {
            let bytes: Vec<u8> = (0..n).map(|b| (b * 7 + i) as u8).collect();
            assert!(c.put(key(i as u32), &bytes, vec![], vec![]));
            assert_eq!(c.get(&key(i as u32)), Some(bytes));
        }
        assert_eq!(c.stats().hits, 9);
    }

    #[test]
    fn memory_never_exceeds_the_budget_and_old_results_make_room() {
        let budget = 256 << 10;
        let mut c = CoordCache::new(budget).unwrap();
        for i in 0..20_000u32 {
            let n = [60usize, 300, 3000, 9000][i as usize % 4];
            c.put(key(i), &vec![i as u8; n], vec![key(i)], vec![]);
            assert!(c.stats().slab_bytes <= budget);
        }
        assert!(c.stats().evictions > 0);
        // The newest of each size is there, the oldest are gone.
        assert_eq!(c.get(&key(19_999)), Some(vec![19_999u32 as u8; 9000]));
        assert_eq!(c.get(&key(19_996)), Some(vec![19_996u32 as u8; 60]));
        assert_eq!(c.get(&key(0)), None);
    }

    #[test]
    fn a_result_read_since_it_was_kept_outlives_one_that_was_not() {
        // One page of 128-byte slots: 512 results, then each new one evicts.
        let mut c = CoordCache::new(PAGE_BYTES).unwrap();
        let per_page = (PAGE_BYTES / CLASSES[0]) as u32;
        for i in 0..per_page {
            assert!(c.put(key(i), &[i as u8; 100], vec![key(i)], vec![]));
        }
        assert_eq!(c.stats().evictions, 0);
        // Read the even ones; the odd ones go first, oldest first.
        for i in (0..per_page).step_by(2) {
            assert!(c.lookup(&key(i)).is_some());
        }
        for j in 0..per_page / 2 {
            assert!(c.put(key(per_page + j), b"new", vec![], vec![]));
        }
        assert_eq!(c.stats().evictions, u64::from(per_page / 2));
        for i in 0..per_page {
            assert_eq!(c.get(&key(i)).is_some(), i % 2 == 0, "result {i}");
        }
        // Their second chance used, the even ones (read again just now by `get`) stay
        // ahead of the new ones, which were never read.
        for j in 0..per_page / 2 {
            assert!(c.put(key(2 * per_page + j), b"newer", vec![], vec![]));
        }
        for j in 0..per_page / 2 {
            assert!(c.get(&key(per_page + j)).is_none(), "new result {j}");
            assert!(c.get(&key(2 * j)).is_some(), "even result {}", 2 * j);
        }
    }

    #[test]
    fn invalidated_results_leave_the_ring_and_their_ids_are_reused_safely() {
        let mut c = CoordCache::new(PAGE_BYTES).unwrap();
        let per_page = (PAGE_BYTES / CLASSES[0]) as u32;
        // Keep and drop many times the page's worth: the ring's stale pairs are swept, and
        // a reused entry id never lets an old pair evict the new result early.
        for round in 0..20u32 {
            for i in 0..per_page {
                let k = key(round * per_page + i);
                assert!(c.put(k.clone(), &[1; 50], vec![k.clone()], vec![]));
                if i % 3 != 0 {
                    c.invalidate(&k);
                }
            }
            let ring: usize = c.classes.iter().map(|cl| cl.ring.len()).sum();
            let live: usize = c.classes.iter().map(|cl| cl.live).sum();
            assert_eq!(live, c.by_query.len());
            assert!(
                ring <= 2 * live + 65,
                "round {round}: ring {ring}, live {live}"
            );
        }
        let last = 19 * per_page;
        assert!(c.get(&key(last + 3)).is_some());
        assert!(c.get(&key(last + 4)).is_none());
    }

    #[test]
    fn a_stale_ring_pair_never_evicts_the_result_that_reused_its_id() {
        let mut c = CoordCache::new(PAGE_BYTES).unwrap();
        let per_page = (PAGE_BYTES / CLASSES[0]) as u32;
        for i in 0..per_page {
            c.put(key(i), b"x", vec![key(i)], vec![]);
        }
        // The oldest goes; the next result takes its entry id (and its slot), while the
        // ring still holds the old pair at the hand.
        c.invalidate(&key(0));
        c.put(key(1000), b"z", vec![], vec![]);
        c.put(key(1001), b"y", vec![], vec![]);
        assert!(
            c.get(&key(1000)).is_some(),
            "the reused id's new result stays"
        );
        assert!(c.get(&key(1)).is_none(), "the next oldest is evicted");
        assert!(c.get(&key(1001)).is_some());
    }

    #[test]
    fn when_every_result_was_read_the_hand_still_evicts_the_oldest() {
        let mut c = CoordCache::new(PAGE_BYTES).unwrap();
        let per_page = (PAGE_BYTES / CLASSES[0]) as u32;
        for i in 0..per_page {
            c.put(key(i), b"x", vec![], vec![]);
        }
        for i in 0..per_page {
            assert!(c.lookup(&key(i)).is_some());
        }
        // One full turn clears every bit; then the oldest goes.
        assert!(c.put(key(per_page), b"new", vec![], vec![]));
        assert!(c.get(&key(0)).is_none());
        assert_eq!(c.stats().evictions, 1);
        assert!(c.get(&key(1)).is_some());
    }

    #[test]
    fn a_refresh_rewrites_in_place_or_drops_a_result_that_outgrew_its_slots() {
        let mut c = CoordCache::new(1 << 20).unwrap();
        let q = b"P5".to_vec();
        assert!(!c.refresh(&q, &[1], b"none"), "nothing to refresh");
        c.put(q.clone(), b"\x01old", vec![key(5)], vec![]);
        c.put(b"ix".to_vec(), b"index", vec![key(5)], vec![]);
        // A write to key 5 drops the index result but keeps the point result for refreshing.
        c.invalidate_except(&key(5), Some(&q));
        assert!(c.get(b"ix").is_none());
        assert!(c.refresh(&q, &[1], b"new value"));
        assert_eq!(c.get(&q).unwrap(), b"\x01new value");
        assert!(c.refresh(&q, &[0], &[]));
        assert_eq!(c.get(&q).unwrap(), b"\x00");
        // Still covered by key 5: a plain invalidation drops it.
        c.invalidate(&key(5));
        assert!(c.get(&q).is_none());
        // Across several 4 KiB slots, the same count is rewritten; a bigger one is dropped.
        let big = vec![7u8; 9000];
        c.put(q.clone(), &big, vec![key(5)], vec![]);
        let body: Vec<u8> = (0..8500u32).map(|i| (i % 251) as u8).collect();
        assert!(c.refresh(&q, &[2], &body));
        let mut want = vec![2u8];
        want.extend_from_slice(&body);
        assert_eq!(c.get(&q).unwrap(), want, "across the slots' edges too");
        assert!(!c.refresh(&q, &[2], &[9u8; 13000]));
        assert!(c.get(&q).is_none());
        assert_eq!(c.stats().refreshes, 3);
    }

    #[test]
    fn a_write_drops_exactly_the_results_that_cover_its_key() {
        let mut c = CoordCache::new(1 << 20).unwrap();
        c.put(b"p5".to_vec(), b"five", vec![key(5)], vec![]);
        c.put(b"p6".to_vec(), b"six", vec![key(6)], vec![]);
        c.put(
            b"r".to_vec(),
            b"range",
            vec![],
            vec![(key(10), Some(key(20)))],
        );
        c.put(b"open".to_vec(), b"tail", vec![], vec![(key(100), None)]);
        c.put(
            b"ix".to_vec(),
            b"index",
            vec![key(7)],
            vec![(key(50), Some(key(60)))],
        );
        c.invalidate(&key(20)); // the end of a range is outside it
        c.invalidate(&key(9));
        c.invalidate(&key(99));
        for q in [&b"p5"[..], b"p6", b"r", b"open", b"ix"] {
            assert!(c.get(q).is_some(), "{q:?}");
        }
        c.invalidate(&key(5));
        assert!(c.get(b"p5").is_none());
        assert!(c.get(b"p6").is_some());
        c.invalidate(&key(10));
        assert!(c.get(b"r").is_none());
        c.invalidate(&key(1_000_000));
        assert!(c.get(b"open").is_none());
        c.invalidate(&key(7)); // a row the index range returned
        assert!(c.get(b"ix").is_none());
        assert_eq!(c.stats().invalidations, 4);
    }

    #[test]
    fn range_results_per_object_are_capped() {
        let mut c = CoordCache::new(4 << 20).unwrap();
        for i in 0..(RANGES_PER_OBJECT as u32 + 10) {
            let q = format!("q{i}").into_bytes();
            c.put(q, b"x", vec![], vec![(key(i), Some(key(i + 1)))]);
        }
        assert!(c.get(b"q0").is_none());
        assert!(
            c.get(format!("q{}", RANGES_PER_OBJECT + 9).as_bytes())
                .is_some()
        );
        assert_eq!(c.stats().evictions, 10);
    }

    #[test]
    fn rows_round_trip() {
        let rows: Vec<(i64, &[u8])> = vec![(-5, b"abc"), (7, b""), (i64::MAX, &[0u8; 300])];
        let b = encode_rows(rows.iter().copied());
        assert_eq!(decode_rows(&b).unwrap(), rows);
        assert!(decode_rows(&b[..b.len() - 1]).is_none());
    }

    #[test]
    fn too_small_a_budget_is_off() {
        assert!(CoordCache::new(0).is_none());
        assert!(CoordCache::new(1000).is_none());
    }
}
