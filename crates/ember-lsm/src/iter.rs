//! Ordered iteration: a merge of the memtable, the immutable memtable and every level, newest
//! source first, so the newest version of each key wins and tombstones hide older values.
//! Compaction uses the same merge (keeping tombstones); [`crate::Db`]'s iterators skip them.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::{Memtable, Value};
use crate::sstable::block::{Cursor, DataBlock};
use crate::sstable::{Handle, Index, TableMeta};

/// A key and its newest value or tombstone.
pub type Entry = (Vec<u8>, Value);

/// Reads table blocks for a source (through the cache, or straight from the environment).
pub trait Fetch {
    /// The index of a table.
    fn index(&mut self, t: &TableMeta) -> Result<Arc<Index>>;
    /// A data block of a table.
    fn data(&mut self, t: &TableMeta, h: Handle) -> Result<Arc<DataBlock>>;
}

/// Entries a memtable source copies at its first read; each later read copies twice as many,
/// up to [`MEM_CHUNK`]: a short range (an index probe) copies a few, a scan soon reads in
/// chunks of 64.
const MEM_FIRST_CHUNK: usize = 4;
/// The most entries a memtable source copies at a time.
const MEM_CHUNK: usize = 64;

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
        buf: VecDeque<Entry>,
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
    },
}

impl Source {
    /// A memtable source starting at `from`.
    pub fn mem(mem: Arc<Memtable>, snap: u64, from: Bound<Vec<u8>>) -> Self {
        Source::Mem {
            mem,
            snap,
            buf: VecDeque::new(),
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
                    let b = match from {
                        Bound::Unbounded => Bound::Unbounded,
                        Bound::Included(k) => Bound::Included(k.as_slice()),
                        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
                    };
                    let chunk = mem.chunk(b, *snap, *n);
                    *n = (*n * 2).min(MEM_CHUNK);
                    match chunk.last() {
                        None => *done = true,
                        Some((k, _)) => *from = Bound::Excluded(k.clone()),
                    }
                    buf.extend(chunk);
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
                    continue;
                };
                let b = f.data(t, *h)?;
                match seek.take() {
                    Some(k) => b.seek(&k, cur)?,
                    None => b.first(cur)?,
                }
                *block = Some(b);
            },
        }
    }

    /// The source's current key and value (`None` value: a tombstone).
    fn current(&self) -> Option<(&[u8], Option<&[u8]>)> {
        match self {
            Source::Mem { buf, .. } => buf.front().map(|(k, v)| (k.as_slice(), v.as_deref())),
            Source::Tables { block, cur, .. } => block
                .as_ref()
                .filter(|_| cur.valid())
                .map(|b| (cur.key(), cur.value(b))),
        }
    }

    fn advance(&mut self) {
        match self {
            Source::Mem { buf, .. } => {
                buf.pop_front();
            }
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
}

impl Merge {
    /// Merges `sources` (newest first) over the range `lower..upper`.
    pub fn new(sources: Vec<Source>, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> Self {
        Merge {
            sources,
            lower,
            upper,
        }
    }

    /// The next key with its newest value or tombstone.
    pub fn next_entry(&mut self, f: &mut dyn Fetch) -> Result<Option<Entry>> {
        let (mut key, mut value) = (Vec::new(), Vec::new());
        Ok(match self.next_into(f, &mut key, &mut value)? {
            None => None,
            Some(true) => Some((key, Some(value))),
            Some(false) => Some((key, None)),
        })
    }

    /// The next key with its newest value or tombstone, into `key` and `value` (cleared
    /// first; a merge that writes tables reuses them, allocating nothing per entry):
    /// `Some(true)` for a value, `Some(false)` for a tombstone, `None` at the end.
    pub fn next_into(
        &mut self,
        f: &mut dyn Fetch,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<Option<bool>> {
        loop {
            for s in &mut self.sources {
                s.fill(f)?;
            }
            let mut best: Option<(&[u8], Option<&[u8]>)> = None;
            for s in &self.sources {
                if let Some(e) = s.current()
                    && best.is_none_or(|b| e.0 < b.0)
                {
                    best = Some(e);
                }
            }
            let Some((k, v)) = best else {
                return Ok(None);
            };
            key.clear();
            key.extend_from_slice(k);
            value.clear();
            let is_value = v.is_some();
            if let Some(v) = v {
                value.extend_from_slice(v);
            }
            for s in &mut self.sources {
                if s.current().is_some_and(|c| c.0 == key.as_slice()) {
                    s.advance();
                }
            }
            let below = match &self.lower {
                Bound::Included(lo) => *key < *lo,
                Bound::Excluded(lo) => *key <= *lo,
                Bound::Unbounded => false,
            };
            if below {
                continue;
            }
            let above = match &self.upper {
                Bound::Included(hi) => *key > *hi,
                Bound::Excluded(hi) => *key >= *hi,
                Bound::Unbounded => false,
            };
            if above {
                self.sources.clear();
                return Ok(None);
            }
            return Ok(Some(is_value));
        }
    }
}
