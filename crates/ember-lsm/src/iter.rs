//! Ordered iteration: a merge of the memtable, the immutable memtable and every level, newest
//! source first, so the newest version of each key wins and tombstones hide older values.
//! Compaction uses the same merge (keeping tombstones); [`crate::Db`]'s iterators skip them.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::Memtable;
use crate::sstable::block::{Cursor, DataBlock, Stored};
use crate::sstable::{Handle, Index, TableMeta};
use crate::vlog::ValuePtr;

/// A key and its value or pointer or tombstone, borrowed where they lie.
type Kv<'a> = (&'a [u8], Option<Stored<'a>>);

/// Reads table blocks for a source (through the cache, or straight from the environment).
pub trait Fetch {
    /// The index of a table.
    fn index(&mut self, t: &TableMeta) -> Result<Arc<Index>>;
    /// A data block of a table.
    fn data(&mut self, t: &TableMeta, h: Handle) -> Result<Arc<DataBlock>>;
    /// The value `p` points to, into `buf` (checked).
    fn value(&mut self, p: &ValuePtr, buf: &mut Vec<u8>) -> Result<()>;
    /// The data block `blocks[0]` of a table, and maybe some of those after it (read
    /// ahead, as one read of the environment, about `ahead` bytes of them at most), pushed
    /// onto `out` in order. The default reads the first alone.
    fn data_run(
        &mut self,
        t: &TableMeta,
        blocks: &[(Vec<u8>, Handle)],
        ahead: u64,
        out: &mut VecDeque<Arc<DataBlock>>,
    ) -> Result<()> {
        let _ = ahead;
        if let Some((_, h)) = blocks.first() {
            out.push_back(self.data(t, *h)?);
        }
        Ok(())
    }
}

/// Bytes of data blocks a table source reads ahead at most: a scan's first block is read
/// alone, then each read takes twice as many bytes of the blocks that follow, up to this
/// (so a short range reads little, a long scan one read per 64 KiB).
pub const READ_AHEAD: u64 = 64 << 10;

/// Entries a memtable source copies at its first read; each later read copies twice as many,
/// up to [`MEM_CHUNK`]: a short range (an index probe) copies a few, a scan soon reads in
/// chunks of 256.
const MEM_FIRST_CHUNK: usize = 4;
/// The most entries a memtable source copies at a time (under the memtable's read lock).
const MEM_CHUNK: usize = 256;

/// Entries a memtable source copied and has not consumed yet: their keys and values side by
/// side in one buffer (reused from chunk to chunk, so a scan allocates nothing per entry).
#[derive(Debug, Default)]
pub struct MemChunk {
    /// Keys and values, back to back.
    bytes: Vec<u8>,
    /// Per entry: where its key ends in `bytes` (it starts where the previous entry ends)
    /// and where its value ends (`None`: a tombstone).
    ends: Vec<(usize, Option<usize>)>,
    /// The next entry to consume.
    at: usize,
}

impl MemChunk {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.at = 0;
    }

    fn push(&mut self, k: &[u8], v: Option<&[u8]>) {
        self.bytes.extend_from_slice(k);
        let kend = self.bytes.len();
        let vend = v.map(|v| {
            self.bytes.extend_from_slice(v);
            self.bytes.len()
        });
        self.ends.push((kend, vend));
    }

    fn is_empty(&self) -> bool {
        self.at >= self.ends.len()
    }

    /// The entry `i` (`None` past the end).
    fn entry(&self, i: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let (kend, vend) = *self.ends.get(i)?;
        let start = match i.checked_sub(1).and_then(|p| self.ends.get(p)) {
            None => 0,
            Some((k, v)) => v.unwrap_or(*k),
        };
        let key = self.bytes.get(start..kend)?;
        let value = match vend {
            None => None,
            Some(e) => Some(self.bytes.get(kend..e)?),
        };
        Some((key, value))
    }
}

/// One sorted input of a merge.
#[derive(Debug)]
pub enum Source {
    /// A memtable read at a sequence number, a chunk at a time.
    Mem {
        /// The memtable.
        mem: Arc<Memtable>,
        /// The snapshot.
        snap: u64,
        /// Entries read and not yet consumed.
        buf: MemChunk,
        /// Where the next chunk starts.
        from: Bound<Vec<u8>>,
        /// No more entries.
        done: bool,
        /// Entries the next read copies.
        chunk: usize,
    },
    /// Tables with disjoint key ranges in key order (one level-0 table, or a whole level).
    Tables {
        /// The tables.
        tables: Vec<Arc<TableMeta>>,
        /// Current table.
        ti: usize,
        /// Its index, once read.
        index: Option<Arc<Index>>,
        /// Current block in the index.
        bi: usize,
        /// The block, once read.
        block: Option<Arc<DataBlock>>,
        /// Current entry in the block.
        cur: Cursor,
        /// The current entry was consumed: move on at the next fill.
        step: bool,
        /// The key to position at, until the first block is read.
        seek: Option<Vec<u8>>,
        /// Blocks after the current one, read ahead (the next one first).
        ahead: VecDeque<Arc<DataBlock>>,
        /// Bytes the next read may read ahead.
        run: u64,
    },
}

impl Source {
    /// A memtable source starting at `from`.
    pub fn mem(mem: Arc<Memtable>, snap: u64, from: Bound<Vec<u8>>) -> Self {
        Source::Mem {
            mem,
            snap,
            buf: MemChunk::default(),
            from,
            done: false,
            chunk: MEM_FIRST_CHUNK,
        }
    }

    /// A source over tables with disjoint ranges, in key order, starting at `seek`.
    pub fn tables(mut tables: Vec<Arc<TableMeta>>, seek: Option<Vec<u8>>) -> Self {
        if let Some(k) = &seek {
            tables.retain(|t| t.largest.as_slice() >= k.as_slice());
        }
        Source::Tables {
            tables,
            ti: 0,
            index: None,
            bi: 0,
            block: None,
            cur: Cursor::default(),
            step: false,
            seek,
            ahead: VecDeque::new(),
            run: 0,
        }
    }

    /// Makes the current entry valid, or the source exhausted.
    fn fill(&mut self, f: &mut dyn Fetch) -> Result<()> {
        match self {
            Source::Mem {
                mem,
                snap,
                buf,
                from,
                done,
                chunk: n,
            } => {
                if buf.is_empty() && !*done {
                    buf.clear();
                    let b = match from {
                        Bound::Unbounded => Bound::Unbounded,
                        Bound::Included(k) => Bound::Included(k.as_slice()),
                        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
                    };
                    let got = mem.chunk_with(b, *snap, *n, |k, v| buf.push(k, v));
                    *n = (*n * 2).min(MEM_CHUNK);
                    match buf.entry(got.wrapping_sub(1)) {
                        None => *done = true,
                        Some((k, _)) => {
                            // The next chunk starts after the last key read (its buffer
                            // reused).
                            let mut next = match std::mem::replace(from, Bound::Unbounded) {
                                Bound::Included(v) | Bound::Excluded(v) => v,
                                Bound::Unbounded => Vec::new(),
                            };
                            next.clear();
                            next.extend_from_slice(k);
                            *from = Bound::Excluded(next);
                        }
                    }
                }
                Ok(())
            }
            Source::Tables {
                tables,
                ti,
                index,
                bi,
                block,
                cur,
                step,
                seek,
                ahead,
                run,
            } => loop {
                if let Some(b) = block {
                    if std::mem::take(step) {
                        b.step(cur)?;
                    }
                    if cur.valid() {
                        return Ok(());
                    }
                    *block = None;
                    *bi += 1;
                }
                let Some(t) = tables.get(*ti) else {
                    return Ok(());
                };
                let idx = match index {
                    Some(i) => i.clone(),
                    None => {
                        let i = f.index(t)?;
                        *bi = seek.as_deref().map_or(0, |k| i.find(k));
                        *index = Some(i.clone());
                        i
                    }
                };
                let Some((_, h)) = idx.blocks.get(*bi) else {
                    *index = None;
                    *ti += 1;
                    *seek = None;
                    ahead.clear();
                    continue;
                };
                let b = match ahead.pop_front() {
                    Some(b) => b,
                    None => {
                        f.data_run(t, idx.blocks.get(*bi..).unwrap_or_default(), *run, ahead)?;
                        *run = (*run * 2).clamp(8 << 10, READ_AHEAD);
                        match ahead.pop_front() {
                            Some(b) => b,
                            None => f.data(t, *h)?,
                        }
                    }
                };
                match seek.take() {
                    Some(k) => b.seek(&k, cur)?,
                    None => b.first(cur)?,
                }
                *block = Some(b);
            },
        }
    }

    /// The source's current key and value (`None` value: a tombstone).
    fn current(&self) -> Option<Kv<'_>> {
        match self {
            Source::Mem { buf, .. } => buf.entry(buf.at).map(|(k, v)| (k, v.map(Stored::Inline))),
            Source::Tables { block, cur, .. } => block
                .as_ref()
                .filter(|_| cur.valid())
                .map(|b| (cur.key(), cur.value(b))),
        }
    }

    fn advance(&mut self) {
        match self {
            Source::Mem { buf, .. } => buf.at += 1,
            Source::Tables { step, .. } => *step = true,
        }
    }
}

/// A merge of sources, newest first (see the module docs).
#[derive(Debug)]
pub struct Merge {
    sources: Vec<Source>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// The sources at the key being consumed (reused from entry to entry).
    at_key: Vec<usize>,
    /// The source that alone held the last key consumed, and the smallest key of every
    /// other source then (`None`: they were all exhausted): see [`Merge::next_with`].
    lead: Option<usize>,
    second: Option<Vec<u8>>,
}

impl Merge {
    /// Merges `sources` (newest first) over the range `lower..upper`.
    pub fn new(sources: Vec<Source>, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> Self {
        Merge {
            sources,
            lower,
            upper,
            at_key: Vec::new(),
            lead: None,
            second: None,
        }
    }

    /// `visit` on the next key and its newest value, value pointer or tombstone (`None`),
    /// borrowed where they lie (a memtable chunk or a data block: nothing is copied);
    /// `None` at the end.
    pub fn next_with<T>(
        &mut self,
        f: &mut dyn Fetch,
        visit: impl FnOnce(&[u8], Option<Stored<'_>>) -> T,
    ) -> Result<Option<T>> {
        let mut visit = Some(visit);
        loop {
            // The source that alone held the last key, if its next key is still below every
            // other source's (`second`), is the only one at the smallest key: the others
            // were not moved since `second` was taken. A scan over tables with disjoint
            // ranges takes most keys this way, with one comparison.
            let lead = match self.lead.take() {
                Some(i) => match self.sources.get_mut(i) {
                    Some(s) => {
                        s.fill(f)?;
                        s.current()
                            .is_some_and(|(k, _)| self.second.as_ref().is_none_or(|b| k < b))
                            .then_some(i)
                    }
                    None => None,
                },
                None => None,
            };
            let best: Option<(usize, Kv<'_>)> = match lead {
                Some(i) => self
                    .sources
                    .get(i)
                    .and_then(|s| s.current().map(|e| (i, e))),
                None => {
                    for s in &mut self.sources {
                        s.fill(f)?;
                    }
                    // (source, key, value or tombstone) of the smallest key.
                    let mut best: Option<(usize, Kv<'_>)> = None;
                    for (i, s) in self.sources.iter().enumerate() {
                        if let Some((k, v)) = s.current()
                            && best.is_none_or(|b| k < b.1.0)
                        {
                            best = Some((i, (k, v)));
                        }
                    }
                    best
                }
            };
            let Some((at, (k, v))) = best else {
                return Ok(None);
            };
            // Every source at this key moves past it (older versions are hidden).
            self.at_key.clear();
            self.at_key.push(at);
            if lead.is_none() {
                let mut second: Option<&[u8]> = None;
                for (i, s) in self.sources.iter().enumerate() {
                    match s.current() {
                        Some((c, _)) if i != at && c == k => self.at_key.push(i),
                        Some((c, _)) if i != at && second.is_none_or(|b| c < b) => {
                            second = Some(c);
                        }
                        _ => {}
                    }
                }
                if self.at_key.len() == 1 {
                    // The next key of `at` is the smallest if it is below `second`.
                    self.lead = Some(at);
                    match (second, &mut self.second) {
                        (None, b) => *b = None,
                        (Some(c), Some(b)) => {
                            b.clear();
                            b.extend_from_slice(c);
                        }
                        (Some(c), b) => *b = Some(c.to_vec()),
                    }
                }
            } else {
                self.lead = Some(at);
            }
            let below = match &self.lower {
                Bound::Included(lo) => k < lo.as_slice(),
                Bound::Excluded(lo) => k <= lo.as_slice(),
                Bound::Unbounded => false,
            };
            let above = match &self.upper {
                Bound::Included(hi) => k > hi.as_slice(),
                Bound::Excluded(hi) => k >= hi.as_slice(),
                Bound::Unbounded => false,
            };
            if above {
                self.sources.clear();
                self.lead = None;
                return Ok(None);
            }
            let out = if below {
                None
            } else {
                visit.take().map(|visit| visit(k, v))
            };
            if !below {
                // Keys come in ascending order: every later one is above the lower bound too.
                self.lower = Bound::Unbounded;
            }
            for &i in &self.at_key {
                if let Some(s) = self.sources.get_mut(i) {
                    s.advance();
                }
            }
            if out.is_some() {
                return Ok(out);
            }
        }
    }
}
